//! The sorted-set family over TCP on the reference keyspace: every command's replies, options
//! and error texts as Redis 7.0.15 gives them (the expected bytes were taken from it), in RESP2
//! and, where the reply types differ, RESP3.

mod support;

use std::collections::HashSet;

use model::{Effect, Keyspace, Scope, Value};
use server::backend::Backend;
use server::resp::Reply;
use support::{Client, TestServer, expect, show};

/// Puts `value` at `key` (database 0) straight into the keyspace: the commands that make
/// strings, sets and lists belong to other families.
fn put(server: &TestServer, key: &str, value: Value) {
    let effect = Effect::Put {
        db: 0,
        key: key.as_bytes().to_vec(),
        value,
        expire_at_ms: 0,
    };
    let keyspace: &dyn Keyspace = server.backend.keyspace().expect("a keyspace");
    keyspace
        .transact(Scope::All, true, &mut |t| t.apply(vec![effect.clone()]))
        .expect("put");
}

fn string(s: &str) -> Value {
    Value::String(s.as_bytes().to_vec())
}

fn set(members: &[&str]) -> Value {
    Value::Set(members.iter().map(|m| m.as_bytes().to_vec()).collect())
}

fn list(elems: &[&str]) -> Value {
    Value::List(elems.iter().map(|m| m.as_bytes().to_vec()).collect())
}

/// Switches the connection's protocol.
fn hello(c: &mut Client, version: u8) {
    let reply = c.call(&format!("HELLO {version}"));
    let want = if version == 3 { b'%' } else { b'*' };
    assert_eq!(reply.first(), Some(&want), "{}", show(&reply));
}

/// Like [`expect`] for arguments that hold spaces or are empty.
#[track_caller]
fn expect_args(c: &mut Client, args: &[&[u8]], expected: &str) {
    let got = c.call_args(args);
    assert_eq!(show(&got), show(expected.as_bytes()), "command: {args:?}");
}

const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

/// Every command refuses a key of another kind, reading or writing, before it changes anything;
/// the set operations accept plain sets but not strings.
#[test]
fn other_kinds_are_wrongtype() {
    let server = TestServer::default_config();
    let mut c = server.client();
    put(&server, "s", string("x"));
    put(&server, "l", list(&["a"]));
    expect(&mut c, "ZADD z 1 a", ":1\r\n");
    for line in [
        "ZADD s 1 a",
        "ZADD l 1 a",
        "ZADD s incr 1 a",
        "ZINCRBY s 1 a",
        "ZSCORE s a",
        "ZMSCORE s a",
        "ZCARD s",
        "ZCOUNT s -inf +inf",
        "ZLEXCOUNT s - +",
        "ZRANGE s 0 -1",
        "ZRANGE s 0 -1 byscore",
        "ZRANGESTORE d s 0 -1",
        "ZREVRANGE s 0 -1",
        "ZRANGEBYSCORE s 0 1",
        "ZREVRANGEBYSCORE s 1 0",
        "ZRANGEBYLEX s - +",
        "ZREVRANGEBYLEX s + -",
        "ZRANK s a",
        "ZREVRANK s a",
        "ZREM s a",
        "ZREMRANGEBYRANK s 0 -1",
        "ZREMRANGEBYSCORE s 0 1",
        "ZREMRANGEBYLEX s - +",
        "ZPOPMIN s",
        "ZPOPMAX s 0",
        "BZPOPMIN nosuch s z 0",
        "BZPOPMAX s 0",
        "ZMPOP 2 nosuch s min",
        "BZMPOP 0 2 s z max",
        "ZRANDMEMBER s",
        "ZRANDMEMBER s 2",
        "ZUNION 2 z s",
        "ZUNION 2 s z foo",
        "ZINTER 2 z l",
        "ZDIFF 2 z s",
        "ZUNIONSTORE d 2 z s",
        "ZINTERSTORE d 2 z s",
        "ZDIFFSTORE d 2 s z",
        "ZINTERCARD 2 z s",
        "ZSCAN s 0",
        "ZSCAN s 0 foo",
    ] {
        expect(&mut c, line, WRONGTYPE);
    }
    // Nothing was popped or stored by the refused commands.
    expect(&mut c, "ZRANGE z 0 -1", "*1\r\n$1\r\na\r\n");
    expect(&mut c, "EXISTS d", ":0\r\n");
    // Argument errors come before the kind check where Redis checks them first.
    expect(&mut c, "ZADD s x a", "-ERR value is not a valid float\r\n");
    expect(&mut c, "ZCOUNT s x 1", "-ERR min or max is not a float\r\n");
    expect(
        &mut c,
        "ZRANGE s a b",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(
        &mut c,
        "ZPOPMIN s x",
        "-ERR value is out of range, must be positive\r\n",
    );
    expect(
        &mut c,
        "BZPOPMIN s x",
        "-ERR timeout is not a float or out of range\r\n",
    );
    expect(&mut c, "ZSCAN s x", "-ERR invalid cursor\r\n");
}

/// Each database has its own sorted sets.
#[test]
fn databases_are_separate() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "ZADD z 1 a", ":1\r\n");
    expect(&mut c, "SELECT 3", "+OK\r\n");
    expect(&mut c, "ZCARD z", ":0\r\n");
    expect(&mut c, "ZADD z 5 b 6 c", ":2\r\n");
    expect(&mut c, "ZUNIONSTORE u 1 z", ":2\r\n");
    expect(&mut c, "ZPOPMIN u", "*2\r\n$1\r\nb\r\n$1\r\n5\r\n");
    expect(&mut c, "SELECT 0", "+OK\r\n");
    expect(
        &mut c,
        "ZRANGE z 0 -1 withscores",
        "*2\r\n$1\r\na\r\n$1\r\n1\r\n",
    );
    expect(&mut c, "EXISTS u", ":0\r\n");
    let mut other = server.client();
    expect(&mut other, "SELECT 3", "+OK\r\n");
    expect(&mut other, "ZRANGE u 0 -1", "*1\r\n$1\r\nc\r\n");
}

/// The command table reports Redis 7.0's arity, flags and key positions.
#[test]
fn command_info_matches_redis() {
    let server = TestServer::default_config();
    let mut c = server.client();
    let entry = |c: &mut Client, name: &str| {
        c.send(&support::words(&format!("COMMAND INFO {name}")));
        let Reply::Array(mut items) = c.read_reply() else {
            panic!("COMMAND INFO {name}")
        };
        let Reply::Array(fields) = items.remove(0) else {
            panic!("{name} is not in the table")
        };
        fields
    };
    let flags = |fields: &[Reply]| -> Vec<String> {
        let Reply::Array(flags) = &fields[2] else {
            panic!("flags")
        };
        flags
            .iter()
            .map(|f| match f {
                Reply::Simple(s) => String::from_utf8_lossy(s).into_owned(),
                other => panic!("{other:?}"),
            })
            .collect()
    };
    let cases: &[(&str, i64, &[&str], [i64; 3])] = &[
        ("zadd", -4, &["write", "denyoom", "fast"], [1, 1, 1]),
        ("zrem", -3, &["write", "fast"], [1, 1, 1]),
        ("zrangebyscore", -4, &["readonly"], [1, 1, 1]),
        ("zrangestore", -5, &["write", "denyoom"], [1, 2, 1]),
        ("zrank", 3, &["readonly", "fast"], [1, 1, 1]),
        ("zremrangebylex", 4, &["write"], [1, 1, 1]),
        (
            "bzpopmin",
            -3,
            &["write", "noscript", "blocking", "fast"],
            [1, -2, 1],
        ),
        (
            "bzmpop",
            -5,
            &["write", "blocking", "movablekeys"],
            [0, 0, 0],
        ),
        ("zmpop", -4, &["write", "movablekeys"], [0, 0, 0]),
        (
            "zunionstore",
            -4,
            &["write", "denyoom", "movablekeys"],
            [1, 1, 1],
        ),
        ("zintercard", -3, &["readonly", "movablekeys"], [0, 0, 0]),
        ("zscan", -3, &["readonly"], [1, 1, 1]),
    ];
    for (name, arity, want_flags, keys) in cases {
        let fields = entry(&mut c, name);
        assert_eq!(fields[1], Reply::Integer(*arity), "{name}");
        assert_eq!(flags(&fields), *want_flags, "{name}");
        let got: Vec<Reply> = fields[3..6].to_vec();
        let want: Vec<Reply> = keys.iter().map(|k| Reply::Integer(*k)).collect();
        assert_eq!(got, want, "{name}");
    }
}

/// Arity errors name the command.
#[test]
fn arity() {
    let server = TestServer::default_config();
    let mut c = server.client();
    for (line, name) in [
        ("ZADD z 1", "zadd"),
        ("ZINCRBY z 1", "zincrby"),
        ("ZSCORE z", "zscore"),
        ("ZMSCORE z", "zmscore"),
        ("ZCARD", "zcard"),
        ("ZCOUNT z 1", "zcount"),
        ("ZLEXCOUNT z -", "zlexcount"),
        ("ZRANGE z 0", "zrange"),
        ("ZRANGESTORE d z 0", "zrangestore"),
        ("ZREVRANGE z 0", "zrevrange"),
        ("ZRANGEBYSCORE z 0", "zrangebyscore"),
        ("ZREVRANGEBYSCORE z 0", "zrevrangebyscore"),
        ("ZRANGEBYLEX z -", "zrangebylex"),
        ("ZREVRANGEBYLEX z +", "zrevrangebylex"),
        ("ZRANK z a b", "zrank"),
        ("ZREVRANK z", "zrevrank"),
        ("ZREM z", "zrem"),
        ("ZREMRANGEBYRANK z 0", "zremrangebyrank"),
        ("ZREMRANGEBYSCORE z 0 1 2", "zremrangebyscore"),
        ("ZREMRANGEBYLEX z -", "zremrangebylex"),
        ("ZPOPMIN", "zpopmin"),
        ("ZPOPMAX", "zpopmax"),
        ("BZPOPMIN z", "bzpopmin"),
        ("BZPOPMAX z", "bzpopmax"),
        ("BZMPOP 0 1 z", "bzmpop"),
        ("ZMPOP 1 z", "zmpop"),
        ("ZRANDMEMBER", "zrandmember"),
        ("ZUNIONSTORE d 1", "zunionstore"),
        ("ZINTERSTORE d 1", "zinterstore"),
        ("ZDIFFSTORE d 1", "zdiffstore"),
        ("ZUNION 1", "zunion"),
        ("ZINTER 1", "zinter"),
        ("ZDIFF 1", "zdiff"),
        ("ZINTERCARD 1", "zintercard"),
        ("ZSCAN z", "zscan"),
    ] {
        expect(
            &mut c,
            line,
            &format!("-ERR wrong number of arguments for '{name}' command\r\n"),
        );
    }
}

/// The members and scores of a ZRANDMEMBER reply (RESP2 flat or RESP3 nested), checked
/// against the set.
fn random_reply(reply: Reply, with_scores: bool, resp3: bool) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let Reply::Array(items) = reply else {
        panic!("{reply:?}")
    };
    if !with_scores {
        return items
            .into_iter()
            .map(|m| match m {
                Reply::Bulk(m) => (m, None),
                other => panic!("{other:?}"),
            })
            .collect();
    }
    if resp3 {
        return items
            .into_iter()
            .map(|pair| match pair {
                Reply::Array(p) => match (&p[0], &p[1]) {
                    (Reply::Bulk(m), Reply::Double(s)) => (m.clone(), Some(s.clone())),
                    other => panic!("{other:?}"),
                },
                other => panic!("{other:?}"),
            })
            .collect();
    }
    items
        .chunks(2)
        .map(|p| match (&p[0], &p[1]) {
            (Reply::Bulk(m), Reply::Bulk(s)) => (m.clone(), Some(s.clone())),
            other => panic!("{other:?}"),
        })
        .collect()
}

/// ZRANDMEMBER: one member, distinct members for a positive count, repeats for a negative one,
/// the whole set (highest first) for a count past its size; nested pairs in RESP3.
#[test]
fn zrandmember() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "ZADD z 1 a 2 b 3 c 4 d 5 e", ":5\r\n");
    let scores: Vec<(Vec<u8>, Vec<u8>)> = ["a", "b", "c", "d", "e"]
        .iter()
        .zip(["1", "2", "3", "4", "5"])
        .map(|(m, s)| (m.as_bytes().to_vec(), s.as_bytes().to_vec()))
        .collect();
    let score_of = |m: &[u8]| scores.iter().find(|(x, _)| x == m).map(|(_, s)| s.clone());
    for resp3 in [false, true] {
        if resp3 {
            hello(&mut c, 3);
        }
        c.send(&support::words("ZRANDMEMBER z"));
        let Reply::Bulk(one) = c.read_reply() else {
            panic!("a member")
        };
        assert!(score_of(&one).is_some());
        for (count, with_scores) in [(3, false), (3, true), (1, true), (4, false)] {
            let line = format!(
                "ZRANDMEMBER z {count}{}",
                if with_scores { " WITHSCORES" } else { "" }
            );
            c.send(&support::words(&line));
            let got = random_reply(c.read_reply(), with_scores, resp3);
            assert_eq!(got.len(), count, "{line}");
            let distinct: HashSet<_> = got.iter().map(|(m, _)| m.clone()).collect();
            assert_eq!(distinct.len(), count, "{line}: distinct");
            // A small set's sample comes in the set's order, as Redis samples it.
            assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "{line}: in order");
            for (m, s) in &got {
                let want = score_of(m).expect("a member of the set");
                if with_scores {
                    assert_eq!(s.as_ref(), Some(&want), "{line}");
                }
            }
        }
        c.send(&support::words("ZRANDMEMBER z -20 WITHSCORES"));
        let got = random_reply(c.read_reply(), true, resp3);
        assert_eq!(got.len(), 20);
        for (m, s) in &got {
            assert_eq!(s.clone(), score_of(m));
        }
        c.send(&support::words("ZRANDMEMBER z 10"));
        let got = random_reply(c.read_reply(), false, resp3);
        let names: Vec<&[u8]> = got.iter().map(|(m, _)| m.as_slice()).collect();
        assert_eq!(names, [&b"e"[..], b"d", b"c", b"b", b"a"]);
    }
    expect(&mut c, "ZRANDMEMBER missing", "_\r\n");
    expect(&mut c, "ZRANDMEMBER missing 3 withscores", "*0\r\n");
    hello(&mut c, 2);
    expect(&mut c, "ZRANDMEMBER missing", "$-1\r\n");
    expect(&mut c, "ZRANDMEMBER missing 3", "*0\r\n");
    expect(&mut c, "ZRANDMEMBER z 0", "*0\r\n");
    expect(&mut c, "ZRANDMEMBER z 0 withscores", "*0\r\n");
    expect(
        &mut c,
        "ZRANDMEMBER z x",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(
        &mut c,
        "ZRANDMEMBER z -9223372036854775808",
        "-ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807\r\n",
    );
    expect(
        &mut c,
        "ZRANDMEMBER z -9223372036854775807 withscores",
        "-ERR value is out of range\r\n",
    );
    expect(
        &mut c,
        "ZRANDMEMBER z 4611686018427387904 withscores",
        "-ERR value is out of range\r\n",
    );
    expect(&mut c, "ZRANDMEMBER z 1 foo", "-ERR syntax error\r\n");
    expect(
        &mut c,
        "ZRANDMEMBER z 1 withscores x",
        "-ERR syntax error\r\n",
    );
}

/// A large sorted set is scanned in steps whose cursors together return every member once
/// with its score, and MATCH filters each step.
#[test]
fn large_zscan_walks_the_whole_set() {
    let server = TestServer::default_config();
    let mut c = server.client();
    let members: Vec<String> = (0..500).map(|i| format!("member:{i}")).collect();
    for chunk in members.chunks(100) {
        let mut args: Vec<Vec<u8>> = vec![b"ZADD".to_vec(), b"z".to_vec()];
        for m in chunk {
            let i: u32 = m[7..].parse().unwrap();
            args.push(format!("{}", i % 50).into_bytes());
            args.push(m.as_bytes().to_vec());
        }
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        assert_eq!(c.call_args(&refs), b":100\r\n");
    }
    for pattern in [None, Some("member:1*")] {
        let mut seen = Vec::new();
        let mut cursor = b"0".to_vec();
        let mut steps = 0;
        loop {
            steps += 1;
            assert!(steps < 1000, "the scan ends");
            let mut args: Vec<&[u8]> = vec![b"ZSCAN", b"z", &cursor, b"COUNT", b"20"];
            if let Some(p) = pattern {
                args.extend([&b"MATCH"[..], p.as_bytes()]);
            }
            c.send(&args);
            let Reply::Array(parts) = c.read_reply() else {
                panic!("ZSCAN reply")
            };
            let (Reply::Bulk(next), Reply::Array(items)) = (&parts[0], &parts[1]) else {
                panic!("{parts:?}")
            };
            for pair in items.chunks(2) {
                let (Reply::Bulk(m), Reply::Bulk(s)) = (&pair[0], &pair[1]) else {
                    panic!("{pair:?}")
                };
                let i: u32 = String::from_utf8_lossy(&m[7..]).parse().unwrap();
                assert_eq!(s, &format!("{}", i % 50).into_bytes());
                seen.push(m.clone());
            }
            cursor = next.clone();
            if cursor == b"0" {
                break;
            }
        }
        assert!(steps > 2, "a large set takes several steps");
        let want: HashSet<Vec<u8>> = members
            .iter()
            .filter(|m| pattern.is_none_or(|_| m.starts_with("member:1")))
            .map(|m| m.as_bytes().to_vec())
            .collect();
        let got: HashSet<Vec<u8>> = seen.iter().cloned().collect();
        assert_eq!(got, want);
        assert_eq!(seen.len(), want.len(), "no member twice");
    }
}

/// ZADD: adds and updates, NX XX GT LT CH INCR, and the option conflicts Redis refuses.
#[test]
fn zadd_options() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "zadd z 1 a 2 b 3 c", ":3\r\n");
    expect(&mut c, "zadd z 1 a 9 d", ":1\r\n");
    expect(&mut c, "zadd z ch 1 a 5 b 9 d 7 e", ":2\r\n");
    expect(
        &mut c,
        "zrange z 0 -1 withscores",
        "*10\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nc\r\n$1\r\n3\r\n$1\r\nb\r\n$1\r\n5\r\n$1\r\ne\r\n$1\r\n7\r\n$1\r\nd\r\n$1\r\n9\r\n",
    );
    expect(&mut c, "zadd z nx 100 a 4 f", ":1\r\n");
    expect(&mut c, "zadd z xx ch 10 a 100 g", ":1\r\n");
    expect(&mut c, "zadd z gt ch 5 a 20 b 30 z1", ":2\r\n");
    expect(&mut c, "zadd z lt ch 20 a 1 b 0 z2", ":2\r\n");
    expect(
        &mut c,
        "zrange z 0 -1 withscores",
        "*16\r\n$2\r\nz2\r\n$1\r\n0\r\n$1\r\nb\r\n$1\r\n1\r\n$1\r\nc\r\n$1\r\n3\r\n$1\r\nf\r\n$1\r\n4\r\n$1\r\ne\r\n$1\r\n7\r\n$1\r\nd\r\n$1\r\n9\r\n$1\r\na\r\n$2\r\n10\r\n$2\r\nz1\r\n$2\r\n30\r\n",
    );
    // A member named twice is updated twice, in order.
    expect(&mut c, "zadd z 1 m 2 m", ":1\r\n");
    expect(&mut c, "zadd z ch 1 m 2 m", ":2\r\n");
    expect(&mut c, "zadd z ch 3 m 3 m", ":1\r\n");
    expect(&mut c, "zscore z m", "$1\r\n3\r\n");
    expect(&mut c, "zadd z incr 2.5 m", "$3\r\n5.5\r\n");
    expect(&mut c, "zadd z incr nx 1 m", "$-1\r\n");
    expect(&mut c, "zadd z incr xx 1 nosuch", "$-1\r\n");
    expect(&mut c, "zadd z incr gt -1 m", "$-1\r\n");
    expect(&mut c, "zadd z incr lt -1 m", "$3\r\n4.5\r\n");
    expect(&mut c, "zadd z incr 0 m", "$3\r\n4.5\r\n");
    expect(&mut c, "zadd z incr inf m", "$3\r\ninf\r\n");
    expect(
        &mut c,
        "zadd z incr -inf m",
        "-ERR resulting score is not a number (NaN)\r\n",
    );
    expect(&mut c, "zscore z m", "$3\r\ninf\r\n");
    expect(&mut c, "zadd missing xx 1 a", ":0\r\n");
    expect(&mut c, "zadd missing xx incr 1 a", "$-1\r\n");
    expect(&mut c, "exists missing", ":0\r\n");
    expect(
        &mut c,
        "zadd z nx xx 1 a",
        "-ERR XX and NX options at the same time are not compatible\r\n",
    );
    expect(
        &mut c,
        "zadd z gt lt 1 a",
        "-ERR GT, LT, and/or NX options at the same time are not compatible\r\n",
    );
    expect(
        &mut c,
        "zadd z nx gt 1 a",
        "-ERR GT, LT, and/or NX options at the same time are not compatible\r\n",
    );
    expect(
        &mut c,
        "zadd z nx lt 1 a",
        "-ERR GT, LT, and/or NX options at the same time are not compatible\r\n",
    );
    expect(
        &mut c,
        "zadd z incr 1 a 2 b",
        "-ERR INCR option supports a single increment-element pair\r\n",
    );
    expect(&mut c, "zadd z nx 1", "-ERR syntax error\r\n");
    expect(&mut c, "zadd z 1 a 2", "-ERR syntax error\r\n");
    expect(&mut c, "zadd z foo 1 a", "-ERR syntax error\r\n");
    expect(
        &mut c,
        "zadd z nan a",
        "-ERR value is not a valid float\r\n",
    );
    expect(
        &mut c,
        "zadd z 1e400 a",
        "-ERR value is not a valid float\r\n",
    );
    expect(
        &mut c,
        "zadd z 1 a x b",
        "-ERR value is not a valid float\r\n",
    );
    expect(
        &mut c,
        "zadd z NX XX x a",
        "-ERR XX and NX options at the same time are not compatible\r\n",
    );
    expect(
        &mut c,
        "zadd z",
        "-ERR wrong number of arguments for 'zadd' command\r\n",
    );
    // Scores as Redis 7.0 prints them.
    expect(
        &mut c,
        "zadd f 1.1 a 0.00001 b 1e20 c 123456789012345678 d -0 e 5e-324 g 1e16 h 1e17 i 0.1 j -123.456 k",
        ":10\r\n",
    );
    expect(
        &mut c,
        "zrange f 0 -1 withscores",
        "*20\r\n$1\r\nk\r\n$8\r\n-123.456\r\n$1\r\ne\r\n$1\r\n0\r\n$1\r\ng\r\n$23\r\n4.9406564584124654e-324\r\n$1\r\nb\r\n$22\r\n1.0000000000000001e-05\r\n$1\r\nj\r\n$19\r\n0.10000000000000001\r\n$1\r\na\r\n$18\r\n1.1000000000000001\r\n$1\r\nh\r\n$17\r\n10000000000000000\r\n$1\r\ni\r\n$5\r\n1e+17\r\n$1\r\nd\r\n$22\r\n1.2345678901234568e+17\r\n$1\r\nc\r\n$5\r\n1e+20\r\n",
    );
}

/// ZINCRBY, ZSCORE, ZMSCORE, ZCARD and ZRANK/ZREVRANK in RESP2 and RESP3.
#[test]
fn zincrby_and_point_reads() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "zincrby z 1.5 a", "$3\r\n1.5\r\n");
    expect(&mut c, "zincrby z 0.1 a", "$18\r\n1.6000000000000001\r\n");
    expect(&mut c, "zincrby z -0 b", "$2\r\n-0\r\n");
    expect(&mut c, "zincrby z inf c", "$3\r\ninf\r\n");
    expect(
        &mut c,
        "zincrby z -inf c",
        "-ERR resulting score is not a number (NaN)\r\n",
    );
    expect(
        &mut c,
        "zincrby z x a",
        "-ERR value is not a valid float\r\n",
    );
    expect(
        &mut c,
        "zincrby z nan a",
        "-ERR value is not a valid float\r\n",
    );
    expect(&mut c, "zadd z 1 a", ":0\r\n");
    expect(&mut c, "zscore z a", "$1\r\n1\r\n");
    expect(&mut c, "zscore z c", "$3\r\ninf\r\n");
    expect(&mut c, "zscore z nosuch", "$-1\r\n");
    expect(&mut c, "zscore missing a", "$-1\r\n");
    expect(
        &mut c,
        "zmscore z a nosuch c b",
        "*4\r\n$1\r\n1\r\n$-1\r\n$3\r\ninf\r\n$1\r\n0\r\n",
    );
    expect(&mut c, "zmscore missing a b", "*2\r\n$-1\r\n$-1\r\n");
    expect(&mut c, "zcard z", ":3\r\n");
    expect(&mut c, "zcard missing", ":0\r\n");
    expect(&mut c, "zrank z b", ":0\r\n");
    expect(&mut c, "zrank z a", ":1\r\n");
    expect(&mut c, "zrank z nosuch", "$-1\r\n");
    expect(&mut c, "zrank missing a", "$-1\r\n");
    expect(&mut c, "zrevrank z b", ":2\r\n");
    expect(&mut c, "zrevrank z c", ":0\r\n");
    expect(&mut c, "zrevrank z nosuch", "$-1\r\n");
    hello(&mut c, 3);
    expect(&mut c, "zincrby z 1 a", ",2\r\n");
    expect(&mut c, "zscore z a", ",2\r\n");
    expect(&mut c, "zscore z c", ",inf\r\n");
    expect(&mut c, "zscore z nosuch", "_\r\n");
    expect(&mut c, "zmscore z a nosuch c", "*3\r\n,2\r\n_\r\n,inf\r\n");
    expect(&mut c, "zrank z nosuch", "_\r\n");
    expect(&mut c, "zrank z c", ":2\r\n");
    expect(&mut c, "zcard z", ":3\r\n");
}

/// ZRANGE and ZREVRANGE by rank: clamping, negative indices, REV, WITHSCORES.
#[test]
fn rank_ranges() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "zadd z 1 a 2 b 3 c 4 d 5 e", ":5\r\n");
    // Redis 7.0 refuses LIMIT on a rank range only when its count is not -1.
    expect(&mut c, "zrange z 0 0 limit 3 -1", "*1\r\n$1\r\na\r\n");
    expect(&mut c, "zrange z 0 0 limit -1 -1", "*1\r\n$1\r\na\r\n");
    expect(
        &mut c,
        "zrange z 0 0 limit 0 -5",
        "-ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX\r\n",
    );
    expect(
        &mut c,
        "zrange z 0 -1",
        "*5\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n",
    );
    expect(
        &mut c,
        "zrange z 0 -1 withscores",
        "*10\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n$1\r\nd\r\n$1\r\n4\r\n$1\r\ne\r\n$1\r\n5\r\n",
    );
    expect(
        &mut c,
        "zrange z 1 3",
        "*3\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n",
    );
    expect(&mut c, "zrange z -2 -1", "*2\r\n$1\r\nd\r\n$1\r\ne\r\n");
    expect(
        &mut c,
        "zrange z -100 100",
        "*5\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n",
    );
    expect(&mut c, "zrange z 3 1", "*0\r\n");
    expect(&mut c, "zrange z 5 10", "*0\r\n");
    expect(&mut c, "zrange z 0 -6", "*0\r\n");
    expect(
        &mut c,
        "zrange z -9223372036854775808 9223372036854775807",
        "*5\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n",
    );
    expect(&mut c, "zrange z 0 1 rev", "*2\r\n$1\r\ne\r\n$1\r\nd\r\n");
    expect(
        &mut c,
        "zrange z 0 0 rev withscores",
        "*2\r\n$1\r\ne\r\n$1\r\n5\r\n",
    );
    expect(&mut c, "zrange z -1 -1 rev", "*1\r\n$1\r\na\r\n");
    expect(
        &mut c,
        "zrevrange z 0 1 withscores",
        "*4\r\n$1\r\ne\r\n$1\r\n5\r\n$1\r\nd\r\n$1\r\n4\r\n",
    );
    expect(
        &mut c,
        "zrevrange z 1 -1",
        "*4\r\n$1\r\nd\r\n$1\r\nc\r\n$1\r\nb\r\n$1\r\na\r\n",
    );
    expect(
        &mut c,
        "zrevrange z -2 -1 WITHSCORES",
        "*4\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\na\r\n$1\r\n1\r\n",
    );
    expect(&mut c, "zrange missing 0 -1", "*0\r\n");
    expect(
        &mut c,
        "zrange z 0 -1 withscores withscores",
        "*10\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n$1\r\nd\r\n$1\r\n4\r\n$1\r\ne\r\n$1\r\n5\r\n",
    );
    expect(
        &mut c,
        "zrange z a 1",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(
        &mut c,
        "zrange z 0 1.5",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(
        &mut c,
        "zrange z 0 -1 limit 0 1",
        "-ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX\r\n",
    );
    expect(&mut c, "zrange z 0 -1 limit 1", "-ERR syntax error\r\n");
    expect(&mut c, "zrange z 0 -1 rev rev", "-ERR syntax error\r\n");
    expect(
        &mut c,
        "zrange z 0 -1 byscore bylex",
        "-ERR syntax error\r\n",
    );
    expect(&mut c, "zrange z 0 -1 foo", "-ERR syntax error\r\n");
    expect(&mut c, "zrevrange z 0 1 rev", "-ERR syntax error\r\n");
    expect(&mut c, "zrevrange z 0 1 byscore", "-ERR syntax error\r\n");
    expect(
        &mut c,
        "zrange z",
        "-ERR wrong number of arguments for 'zrange' command\r\n",
    );
    hello(&mut c, 3);
    expect(
        &mut c,
        "zrange z 0 1 withscores",
        "*2\r\n*2\r\n$1\r\na\r\n,1\r\n*2\r\n$1\r\nb\r\n,2\r\n",
    );
    expect(
        &mut c,
        "zrevrange z 0 1 withscores",
        "*2\r\n*2\r\n$1\r\ne\r\n,5\r\n*2\r\n$1\r\nd\r\n,4\r\n",
    );
    expect(&mut c, "zrange z 0 1", "*2\r\n$1\r\na\r\n$1\r\nb\r\n");
    expect(&mut c, "zrange missing 0 1 withscores", "*0\r\n");
}

/// ZRANGE BYSCORE, ZRANGEBYSCORE and ZREVRANGEBYSCORE: open ends, infinities, LIMIT, bound syntax.
#[test]
fn score_ranges() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "zadd z 1 a 2 b 3 c 4 d 5 e -inf m inf p", ":7\r\n");
    expect(
        &mut c,
        "zrangebyscore z -inf +inf withscores",
        "*14\r\n$1\r\nm\r\n$4\r\n-inf\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n$1\r\nd\r\n$1\r\n4\r\n$1\r\ne\r\n$1\r\n5\r\n$1\r\np\r\n$3\r\ninf\r\n",
    );
    expect(
        &mut c,
        "zrangebyscore z (1 3",
        "*2\r\n$1\r\nb\r\n$1\r\nc\r\n",
    );
    expect(
        &mut c,
        "zrangebyscore z 1 (3",
        "*2\r\n$1\r\na\r\n$1\r\nb\r\n",
    );
    expect(&mut c, "zrangebyscore z (1 (3", "*1\r\n$1\r\nb\r\n");
    expect(&mut c, "zrangebyscore z 5 5", "*1\r\n$1\r\ne\r\n");
    expect(&mut c, "zrangebyscore z (5 (5", "*0\r\n");
    expect(&mut c, "zrangebyscore z 6 1", "*0\r\n");
    expect(
        &mut c,
        "zrangebyscore z -1e400 1e400",
        "*7\r\n$1\r\nm\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n$1\r\np\r\n",
    );
    expect(
        &mut c,
        "zrangebyscore z ( 5",
        "*5\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n",
    );
    expect_args(
        &mut c,
        &[b"zrangebyscore", b"z", b"", b"2"],
        "*2\r\n$1\r\na\r\n$1\r\nb\r\n",
    );
    expect_args(
        &mut c,
        &[b"zrangebyscore", b"z", b"( 1", b"5"],
        "*4\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n",
    );
    expect_args(
        &mut c,
        &[b"zrangebyscore", b"z", b" 1", b"2"],
        "*2\r\n$1\r\na\r\n$1\r\nb\r\n",
    );
    expect(
        &mut c,
        "zrangebyscore z -inf inf limit 1 2",
        "*2\r\n$1\r\na\r\n$1\r\nb\r\n",
    );
    expect(
        &mut c,
        "zrangebyscore z -inf inf limit 5 -1",
        "*2\r\n$1\r\ne\r\n$1\r\np\r\n",
    );
    expect(&mut c, "zrangebyscore z -inf inf limit 0 0", "*0\r\n");
    expect(&mut c, "zrangebyscore z -inf inf limit -1 2", "*0\r\n");
    expect(&mut c, "zrangebyscore z -inf inf limit 100 1", "*0\r\n");
    expect(
        &mut c,
        "zrangebyscore z 0 10 withscores limit 1 2 withscores",
        "*4\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n",
    );
    expect(
        &mut c,
        "zrangebyscore z 0 10 limit 0 1 limit 2 1",
        "*1\r\n$1\r\nc\r\n",
    );
    expect(
        &mut c,
        "zrevrangebyscore z +inf -inf",
        "*7\r\n$1\r\np\r\n$1\r\ne\r\n$1\r\nd\r\n$1\r\nc\r\n$1\r\nb\r\n$1\r\na\r\n$1\r\nm\r\n",
    );
    expect(
        &mut c,
        "zrevrangebyscore z 5 1 limit 1 2 withscores",
        "*4\r\n$1\r\nd\r\n$1\r\n4\r\n$1\r\nc\r\n$1\r\n3\r\n",
    );
    expect(
        &mut c,
        "zrevrangebyscore z (5 (1",
        "*3\r\n$1\r\nd\r\n$1\r\nc\r\n$1\r\nb\r\n",
    );
    expect(&mut c, "zrevrangebyscore z 1 5", "*0\r\n");
    expect(
        &mut c,
        "zrange z (1 5 byscore limit 1 2 withscores",
        "*4\r\n$1\r\nc\r\n$1\r\n3\r\n$1\r\nd\r\n$1\r\n4\r\n",
    );
    expect(
        &mut c,
        "zrange z 5 (1 byscore rev limit 1 2 withscores",
        "*4\r\n$1\r\nd\r\n$1\r\n4\r\n$1\r\nc\r\n$1\r\n3\r\n",
    );
    expect(&mut c, "zrange z -inf 1 byscore rev", "*0\r\n");
    expect(
        &mut c,
        "zrange z +inf -inf byscore rev limit 0 2",
        "*2\r\n$1\r\np\r\n$1\r\ne\r\n",
    );
    expect(
        &mut c,
        "zrangebyscore z x 1",
        "-ERR min or max is not a float\r\n",
    );
    expect(
        &mut c,
        "zrangebyscore z 1 nan",
        "-ERR min or max is not a float\r\n",
    );
    expect_args(
        &mut c,
        &[b"zrangebyscore", b"z", b"1 ", b"2"],
        "-ERR min or max is not a float\r\n",
    );
    expect(
        &mut c,
        "zrangebyscore z ((1 2",
        "-ERR min or max is not a float\r\n",
    );
    expect(
        &mut c,
        "zrangebyscore z -inf inf limit 1",
        "-ERR syntax error\r\n",
    );
    expect(
        &mut c,
        "zrangebyscore z -inf inf limit x 1",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(
        &mut c,
        "zrangebyscore z -inf inf bogus",
        "-ERR syntax error\r\n",
    );
    expect(&mut c, "zrangebyscore z 1 2 rev", "-ERR syntax error\r\n");
    expect(
        &mut c,
        "zrangebyscore z 1 2 byscore",
        "-ERR syntax error\r\n",
    );
    expect(&mut c, "zrangebyscore missing -inf inf", "*0\r\n");
    hello(&mut c, 3);
    expect(
        &mut c,
        "zrangebyscore z 1 2 withscores",
        "*2\r\n*2\r\n$1\r\na\r\n,1\r\n*2\r\n$1\r\nb\r\n,2\r\n",
    );
    expect(
        &mut c,
        "zrevrangebyscore z +inf 4 withscores",
        "*3\r\n*2\r\n$1\r\np\r\n,inf\r\n*2\r\n$1\r\ne\r\n,5\r\n*2\r\n$1\r\nd\r\n,4\r\n",
    );
    expect(
        &mut c,
        "zrange z -inf 0 byscore withscores",
        "*1\r\n*2\r\n$1\r\nm\r\n,-inf\r\n",
    );
}

/// BYLEX ranges: bound syntax, REV, LIMIT, and WITHSCORES refused.
#[test]
fn lex_ranges() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "zadd z 0 a 0 b 0 c 0 d 0 e 0 f", ":6\r\n");
    expect(
        &mut c,
        "zrangebylex z - +",
        "*6\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n$1\r\nf\r\n",
    );
    expect(
        &mut c,
        "zrangebylex z [b (e",
        "*3\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n",
    );
    expect(
        &mut c,
        "zrangebylex z (b [e",
        "*3\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n",
    );
    expect(
        &mut c,
        "zrangebylex z [ +",
        "*6\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n$1\r\nf\r\n",
    );
    expect(&mut c, "zrangebylex z ( (c", "*2\r\n$1\r\na\r\n$1\r\nb\r\n");
    expect(&mut c, "zrangebylex z + -", "*0\r\n");
    expect(&mut c, "zrangebylex z [c [c", "*1\r\n$1\r\nc\r\n");
    expect(&mut c, "zrangebylex z (c (c", "*0\r\n");
    expect(
        &mut c,
        "zrangebylex z - + limit 1 2",
        "*2\r\n$1\r\nb\r\n$1\r\nc\r\n",
    );
    expect(
        &mut c,
        "zrangebylex z - + limit 4 -1",
        "*2\r\n$1\r\ne\r\n$1\r\nf\r\n",
    );
    expect(
        &mut c,
        "zrevrangebylex z + -",
        "*6\r\n$1\r\nf\r\n$1\r\ne\r\n$1\r\nd\r\n$1\r\nc\r\n$1\r\nb\r\n$1\r\na\r\n",
    );
    expect(
        &mut c,
        "zrevrangebylex z [e (b limit 1 2",
        "*2\r\n$1\r\nd\r\n$1\r\nc\r\n",
    );
    expect(&mut c, "zrevrangebylex z - +", "*0\r\n");
    expect(
        &mut c,
        "zrange z [b [d bylex",
        "*3\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n",
    );
    expect(
        &mut c,
        "zrange z [d [b bylex rev",
        "*3\r\n$1\r\nd\r\n$1\r\nc\r\n$1\r\nb\r\n",
    );
    expect(
        &mut c,
        "zrange z + - bylex rev limit 0 3",
        "*3\r\n$1\r\nf\r\n$1\r\ne\r\n$1\r\nd\r\n",
    );
    expect(
        &mut c,
        "zrangebylex z a +",
        "-ERR min or max not valid string range item\r\n",
    );
    expect(
        &mut c,
        "zrangebylex z +a +",
        "-ERR min or max not valid string range item\r\n",
    );
    expect_args(
        &mut c,
        &[b"zrangebylex", b"z", b"", b"+"],
        "-ERR min or max not valid string range item\r\n",
    );
    expect(
        &mut c,
        "zrangebylex z - + withscores",
        "-ERR syntax error, WITHSCORES not supported in combination with BYLEX\r\n",
    );
    expect(
        &mut c,
        "zrange z - + bylex withscores",
        "-ERR syntax error, WITHSCORES not supported in combination with BYLEX\r\n",
    );
    expect(&mut c, "zrangebylex z - + limit 1", "-ERR syntax error\r\n");
    expect(&mut c, "zrangebylex z - + rev", "-ERR syntax error\r\n");
    expect(&mut c, "zrangebylex missing - +", "*0\r\n");
}

/// ZRANGESTORE stores any range (deleting the destination when empty) and refuses WITHSCORES.
#[test]
fn zrangestore() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "zadd z 1 a 2 b 3 c 4 d 5 e", ":5\r\n");
    expect(&mut c, "zrangestore d z 0 -1", ":5\r\n");
    expect(
        &mut c,
        "zrange d 0 -1 withscores",
        "*10\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n$1\r\nd\r\n$1\r\n4\r\n$1\r\ne\r\n$1\r\n5\r\n",
    );
    expect(&mut c, "zrangestore d z 1 2 rev", ":2\r\n");
    expect(
        &mut c,
        "zrange d 0 -1 withscores",
        "*4\r\n$1\r\nc\r\n$1\r\n3\r\n$1\r\nd\r\n$1\r\n4\r\n",
    );
    expect(
        &mut c,
        "zrangestore d z 4 (1 byscore rev limit 1 2",
        ":2\r\n",
    );
    expect(
        &mut c,
        "zrange d 0 -1 withscores",
        "*4\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n",
    );
    expect(&mut c, "zrangestore d z [c + bylex", ":3\r\n");
    expect(
        &mut c,
        "zrange d 0 -1 withscores",
        "*6\r\n$1\r\nc\r\n$1\r\n3\r\n$1\r\nd\r\n$1\r\n4\r\n$1\r\ne\r\n$1\r\n5\r\n",
    );
    expect(&mut c, "zrangestore d z 10 20", ":0\r\n");
    expect(&mut c, "exists d", ":0\r\n");
    expect(&mut c, "zrangestore d z 0 -1", ":5\r\n");
    expect(&mut c, "zrangestore d missing 0 -1", ":0\r\n");
    expect(&mut c, "exists d", ":0\r\n");
    expect(&mut c, "zrangestore z z 0 1", ":2\r\n");
    expect(
        &mut c,
        "zrange z 0 -1 withscores",
        "*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n",
    );
    expect(
        &mut c,
        "zrangestore d z 0 -1 withscores",
        "-ERR syntax error\r\n",
    );
    expect(
        &mut c,
        "zrangestore d z 0 -1 limit 0 1",
        "-ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX\r\n",
    );
    expect(
        &mut c,
        "zrangestore d z x 1",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(
        &mut c,
        "zrangestore d z",
        "-ERR wrong number of arguments for 'zrangestore' command\r\n",
    );
}

/// ZCOUNT and ZLEXCOUNT.
#[test]
fn counts() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "zadd z 1 a 2 b 3 c 4 d 5 e", ":5\r\n");
    expect(&mut c, "zcount z -inf +inf", ":5\r\n");
    expect(&mut c, "zcount z (1 3", ":2\r\n");
    expect(&mut c, "zcount z 2 2", ":1\r\n");
    expect(&mut c, "zcount z (2 (2", ":0\r\n");
    expect(&mut c, "zcount z 5 1", ":0\r\n");
    expect(&mut c, "zcount z ( 2", ":2\r\n");
    expect(&mut c, "zcount missing 1 3", ":0\r\n");
    expect(&mut c, "zcount z x 3", "-ERR min or max is not a float\r\n");
    expect(
        &mut c,
        "zcount z 1",
        "-ERR wrong number of arguments for 'zcount' command\r\n",
    );
    expect(&mut c, "zadd l 0 a 0 b 0 c 0 d 0 e", ":5\r\n");
    expect(&mut c, "zlexcount l - +", ":5\r\n");
    expect(&mut c, "zlexcount l [b (d", ":2\r\n");
    expect(&mut c, "zlexcount l + -", ":0\r\n");
    expect(&mut c, "zlexcount l [ [", ":0\r\n");
    expect(&mut c, "zlexcount l ( (z", ":5\r\n");
    expect(
        &mut c,
        "zlexcount l x y",
        "-ERR min or max not valid string range item\r\n",
    );
    expect(&mut c, "zlexcount missing - +", ":0\r\n");
}

/// ZREM and ZREMRANGEBYRANK/SCORE/LEX: counts, clamping, the key deleted when emptied, parse errors first.
#[test]
fn removals() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "zadd z 1 a 2 b 3 c 4 d 5 e 6 f 7 g", ":7\r\n");
    expect(&mut c, "zrem z a a nosuch", ":1\r\n");
    expect(&mut c, "zrem missing a", ":0\r\n");
    expect(
        &mut c,
        "zrem z",
        "-ERR wrong number of arguments for 'zrem' command\r\n",
    );
    expect(&mut c, "zremrangebyrank z 0 0", ":1\r\n");
    expect(&mut c, "zremrangebyrank z -1 -1", ":1\r\n");
    expect(&mut c, "zremrangebyrank z 5 1", ":0\r\n");
    expect(&mut c, "zremrangebyrank z 10 20", ":0\r\n");
    expect(
        &mut c,
        "zrange z 0 -1",
        "*4\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n$1\r\nf\r\n",
    );
    expect(&mut c, "zremrangebyscore z (2 3", ":1\r\n");
    expect(&mut c, "zremrangebyscore z 5 1", ":0\r\n");
    expect(
        &mut c,
        "zrange z 0 -1",
        "*3\r\n$1\r\nd\r\n$1\r\ne\r\n$1\r\nf\r\n",
    );
    expect(&mut c, "zadd z 0 a 0 b 0 c", ":3\r\n");
    expect(&mut c, "zremrangebylex z - [a", ":1\r\n");
    expect(&mut c, "zremrangebylex z + -", ":0\r\n");
    expect(
        &mut c,
        "zrange z 0 -1",
        "*5\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n$1\r\nf\r\n",
    );
    expect(
        &mut c,
        "zremrangebyrank z x 1",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(
        &mut c,
        "zremrangebyrank missing x 1",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(&mut c, "zremrangebyrank missing 0 -1", ":0\r\n");
    expect(
        &mut c,
        "zremrangebyscore missing x 1",
        "-ERR min or max is not a float\r\n",
    );
    expect(
        &mut c,
        "zremrangebylex missing x +",
        "-ERR min or max not valid string range item\r\n",
    );
    expect(&mut c, "zremrangebyscore z -inf +inf", ":5\r\n");
    expect(&mut c, "exists z", ":0\r\n");
}

/// ZPOPMIN and ZPOPMAX: flat pairs, nested pairs with a count in RESP3, errors.
#[test]
fn pops() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "zadd z 1 a 2 b 3 c 4 d 5 e", ":5\r\n");
    expect(&mut c, "zpopmin z", "*2\r\n$1\r\na\r\n$1\r\n1\r\n");
    expect(&mut c, "zpopmax z", "*2\r\n$1\r\ne\r\n$1\r\n5\r\n");
    expect(
        &mut c,
        "zpopmin z 2",
        "*4\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n",
    );
    expect(&mut c, "zpopmin z 0", "*0\r\n");
    expect(&mut c, "zpopmin missing", "*0\r\n");
    expect(&mut c, "zpopmin missing 3", "*0\r\n");
    expect(
        &mut c,
        "zpopmin z -1",
        "-ERR value is out of range, must be positive\r\n",
    );
    expect(
        &mut c,
        "zpopmin z x",
        "-ERR value is out of range, must be positive\r\n",
    );
    expect(&mut c, "zpopmin z 1 2", "-ERR syntax error\r\n");
    expect(&mut c, "zpopmax z 10", "*2\r\n$1\r\nd\r\n$1\r\n4\r\n");
    expect(&mut c, "exists z", ":0\r\n");
    expect(&mut c, "zadd z 1 a 2 b 3 c 4 d", ":4\r\n");
    hello(&mut c, 3);
    expect(&mut c, "zpopmin z", "*2\r\n$1\r\na\r\n,1\r\n");
    expect(&mut c, "zpopmax z 1", "*1\r\n*2\r\n$1\r\nd\r\n,4\r\n");
    expect(&mut c, "zpopmax z 0", "*0\r\n");
    expect(&mut c, "zpopmin missing", "*0\r\n");
    expect(&mut c, "zpopmin missing 2", "*0\r\n");
    expect(
        &mut c,
        "zpopmin z 5",
        "*2\r\n*2\r\n$1\r\nb\r\n,2\r\n*2\r\n$1\r\nc\r\n,3\r\n",
    );
    expect(&mut c, "exists z", ":0\r\n");
}

/// ZMPOP: the first key holding a sorted set, COUNT, and its argument errors.
#[test]
fn zmpop() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "zadd a 1 x 2 y", ":2\r\n");
    expect(&mut c, "zadd b 5 p 6 q 7 r", ":3\r\n");
    expect(
        &mut c,
        "zmpop 2 nosuch b min",
        "*2\r\n$1\r\nb\r\n*1\r\n*2\r\n$1\r\np\r\n$1\r\n5\r\n",
    );
    expect(
        &mut c,
        "zmpop 2 b a max count 2",
        "*2\r\n$1\r\nb\r\n*2\r\n*2\r\n$1\r\nr\r\n$1\r\n7\r\n*2\r\n$1\r\nq\r\n$1\r\n6\r\n",
    );
    expect(&mut c, "zmpop 1 b max count 10", "*-1\r\n");
    expect(&mut c, "zmpop 1 b max", "*-1\r\n");
    expect(
        &mut c,
        "zmpop 3 nosuch b a min count 5",
        "*2\r\n$1\r\na\r\n*2\r\n*2\r\n$1\r\nx\r\n$1\r\n1\r\n*2\r\n$1\r\ny\r\n$1\r\n2\r\n",
    );
    expect(&mut c, "zmpop 1 a min", "*-1\r\n");
    expect(
        &mut c,
        "zmpop 0 a min",
        "-ERR numkeys should be greater than 0\r\n",
    );
    expect(
        &mut c,
        "zmpop x a min",
        "-ERR numkeys should be greater than 0\r\n",
    );
    expect(
        &mut c,
        "zmpop -1 a min",
        "-ERR numkeys should be greater than 0\r\n",
    );
    expect(&mut c, "zmpop 2 a min", "-ERR syntax error\r\n");
    expect(
        &mut c,
        "zmpop 9223372036854775807 a min",
        "-ERR syntax error\r\n",
    );
    expect(&mut c, "zmpop 1 a mid", "-ERR syntax error\r\n");
    expect(
        &mut c,
        "zmpop 1 a min count 0",
        "-ERR count should be greater than 0\r\n",
    );
    expect(
        &mut c,
        "zmpop 1 a min count x",
        "-ERR count should be greater than 0\r\n",
    );
    expect(
        &mut c,
        "zmpop 1 a min count 1 count 1",
        "-ERR syntax error\r\n",
    );
    expect(&mut c, "zmpop 1 a min count", "-ERR syntax error\r\n");
    expect(&mut c, "zmpop 1 a min foo", "-ERR syntax error\r\n");
    expect(&mut c, "zadd a 1 x", ":1\r\n");
    hello(&mut c, 3);
    expect(&mut c, "zmpop 1 nosuch min", "_\r\n");
    expect(
        &mut c,
        "zmpop 1 a max count 3",
        "*2\r\n$1\r\na\r\n*1\r\n*2\r\n$1\r\nx\r\n,1\r\n",
    );
}

/// BZPOPMIN, BZPOPMAX and BZMPOP answer at once when a key holds members, and check their arguments like Redis 7.0.
#[test]
fn blocking_pops_with_members() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "zadd z 1 a 2 b 3 c", ":3\r\n");
    expect(
        &mut c,
        "bzpopmin nosuch z 0",
        "*3\r\n$1\r\nz\r\n$1\r\na\r\n$1\r\n1\r\n",
    );
    expect(
        &mut c,
        "bzpopmax z 0.5",
        "*3\r\n$1\r\nz\r\n$1\r\nc\r\n$1\r\n3\r\n",
    );
    expect(
        &mut c,
        "bzpopmin z x",
        "-ERR timeout is not a float or out of range\r\n",
    );
    expect(&mut c, "bzpopmin z -1", "-ERR timeout is negative\r\n");
    expect(&mut c, "bzpopmin z 1e30", "-ERR timeout is negative\r\n");
    expect(&mut c, "bzpopmin z inf", "-ERR timeout is negative\r\n");
    expect(
        &mut c,
        "bzpopmin z nan",
        "-ERR timeout is not a float or out of range\r\n",
    );
    expect_args(
        &mut c,
        &[b"bzpopmin", b"z", b""],
        "-ERR timeout is not a float or out of range\r\n",
    );
    expect_args(
        &mut c,
        &[b"bzpopmin", b"z", b" 1"],
        "-ERR timeout is not a float or out of range\r\n",
    );
    expect(
        &mut c,
        "bzpopmin z 9223372036854775807",
        "-ERR timeout is negative\r\n",
    );
    expect(
        &mut c,
        "bzpopmin z",
        "-ERR wrong number of arguments for 'bzpopmin' command\r\n",
    );
    expect(&mut c, "zadd z 1 a 2 b 3 c 4 d", ":3\r\n");
    expect(
        &mut c,
        "bzmpop 0 2 nosuch z min",
        "*2\r\n$1\r\nz\r\n*1\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n",
    );
    expect(
        &mut c,
        "bzmpop 1 1 z max count 2",
        "*2\r\n$1\r\nz\r\n*2\r\n*2\r\n$1\r\nd\r\n$1\r\n4\r\n*2\r\n$1\r\nc\r\n$1\r\n3\r\n",
    );
    expect(
        &mut c,
        "bzmpop x 1 z min",
        "-ERR timeout is not a float or out of range\r\n",
    );
    expect(
        &mut c,
        "bzmpop x 0 z min",
        "-ERR numkeys should be greater than 0\r\n",
    );
    expect(
        &mut c,
        "bzmpop 0 0 z min",
        "-ERR numkeys should be greater than 0\r\n",
    );
    expect(&mut c, "bzmpop -1 1 z mid", "-ERR syntax error\r\n");
    expect(&mut c, "bzmpop -1 1 z min", "-ERR timeout is negative\r\n");
    expect(
        &mut c,
        "bzmpop x 1 z min count 0",
        "-ERR count should be greater than 0\r\n",
    );
    expect(
        &mut c,
        "bzmpop 0 1 z max count 5 foo",
        "-ERR syntax error\r\n",
    );
    expect(
        &mut c,
        "bzmpop 0 1 z",
        "-ERR wrong number of arguments for 'bzmpop' command\r\n",
    );
    hello(&mut c, 3);
    expect(&mut c, "bzpopmin z 0", "*3\r\n$1\r\nz\r\n$1\r\nb\r\n,2\r\n");
    expect(&mut c, "zadd z 1 a 2 b 3 c", ":3\r\n");
    expect(&mut c, "bzpopmax z 0", "*3\r\n$1\r\nz\r\n$1\r\nc\r\n,3\r\n");
    expect(
        &mut c,
        "bzmpop 0 1 z min count 5",
        "*2\r\n$1\r\nz\r\n*2\r\n*2\r\n$1\r\na\r\n,1\r\n*2\r\n$1\r\nb\r\n,2\r\n",
    );
}

/// ZUNION, ZINTER and ZDIFF: sets count with score 1, WEIGHTS, AGGREGATE, WITHSCORES, and infinities summing to 0.
#[test]
fn set_operations() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "zadd z1 1 a 2 b 3 c", ":3\r\n");
    expect(&mut c, "zadd z2 10 b 20 c 30 d", ":3\r\n");
    expect(
        &mut c,
        "zunion 2 z1 z2",
        "*4\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n",
    );
    expect(
        &mut c,
        "zunion 2 z1 z2 withscores",
        "*8\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$2\r\n12\r\n$1\r\nc\r\n$2\r\n23\r\n$1\r\nd\r\n$2\r\n30\r\n",
    );
    expect(
        &mut c,
        "zinter 2 z1 z2 withscores",
        "*4\r\n$1\r\nb\r\n$2\r\n12\r\n$1\r\nc\r\n$2\r\n23\r\n",
    );
    expect(
        &mut c,
        "zdiff 2 z1 z2 withscores",
        "*2\r\n$1\r\na\r\n$1\r\n1\r\n",
    );
    expect(&mut c, "zdiff 2 z2 z1", "*1\r\n$1\r\nd\r\n");
    expect(
        &mut c,
        "zdiff 1 z1 withscores",
        "*6\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n",
    );
    expect(
        &mut c,
        "zunion 2 z1 nosuch withscores",
        "*6\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n",
    );
    expect(&mut c, "zinter 2 z1 nosuch withscores", "*0\r\n");
    expect(&mut c, "zdiff 2 nosuch z1", "*0\r\n");
    expect(
        &mut c,
        "zunion 2 z1 z2 weights 2 0.5 withscores",
        "*8\r\n$1\r\na\r\n$1\r\n2\r\n$1\r\nb\r\n$1\r\n9\r\n$1\r\nd\r\n$2\r\n15\r\n$1\r\nc\r\n$2\r\n16\r\n",
    );
    expect(
        &mut c,
        "zunion 2 z1 z2 weights 1 -1 aggregate min withscores",
        "*8\r\n$1\r\nd\r\n$3\r\n-30\r\n$1\r\nc\r\n$3\r\n-20\r\n$1\r\nb\r\n$3\r\n-10\r\n$1\r\na\r\n$1\r\n1\r\n",
    );
    expect(
        &mut c,
        "zunion 2 z1 z2 weights 1 -1 aggregate max withscores",
        "*8\r\n$1\r\nd\r\n$3\r\n-30\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n",
    );
    expect(
        &mut c,
        "zinter 2 z1 z2 aggregate min withscores",
        "*4\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n",
    );
    expect(
        &mut c,
        "zinter 2 z1 z2 aggregate max withscores weights 1 2",
        "*4\r\n$1\r\nb\r\n$2\r\n20\r\n$1\r\nc\r\n$2\r\n40\r\n",
    );
    expect(
        &mut c,
        "zunion 2 z1 z2 weights 1 -1 aggregate max weights 2 2 aggregate sum withscores",
        "*8\r\n$1\r\na\r\n$1\r\n2\r\n$1\r\nb\r\n$2\r\n24\r\n$1\r\nc\r\n$2\r\n46\r\n$1\r\nd\r\n$2\r\n60\r\n",
    );
    expect(
        &mut c,
        "zunion 1 z1 weights inf withscores",
        "*6\r\n$1\r\na\r\n$3\r\ninf\r\n$1\r\nb\r\n$3\r\ninf\r\n$1\r\nc\r\n$3\r\ninf\r\n",
    );
    expect(&mut c, "zadd zz 0 a 1 b", ":2\r\n");
    expect(
        &mut c,
        "zunion 1 zz weights -1 withscores",
        "*4\r\n$1\r\nb\r\n$2\r\n-1\r\n$1\r\na\r\n$2\r\n-0\r\n",
    );
    expect(
        &mut c,
        "zunion 1 zz weights inf withscores",
        "*4\r\n$1\r\na\r\n$1\r\n0\r\n$1\r\nb\r\n$3\r\ninf\r\n",
    );
    expect(
        &mut c,
        "zunion 2 zz zz weights inf -inf withscores",
        "*4\r\n$1\r\na\r\n$1\r\n0\r\n$1\r\nb\r\n$1\r\n0\r\n",
    );
    expect(
        &mut c,
        "zinter 2 zz zz weights inf -inf withscores",
        "*4\r\n$1\r\na\r\n$1\r\n0\r\n$1\r\nb\r\n$1\r\n0\r\n",
    );
    expect(
        &mut c,
        "zinter 2 zz zz weights inf -inf aggregate min withscores",
        "*4\r\n$1\r\nb\r\n$4\r\n-inf\r\n$1\r\na\r\n$1\r\n0\r\n",
    );
    expect(
        &mut c,
        "zinter 2 zz zz weights inf -inf aggregate max withscores",
        "*4\r\n$1\r\na\r\n$1\r\n0\r\n$1\r\nb\r\n$3\r\ninf\r\n",
    );
    // Sums add up smallest input first, as in Redis.
    expect(&mut c, "zadd f 0.1 a 0.2 b", ":2\r\n");
    expect(&mut c, "zadd g 0.2 a 0.1 b 0.7 c", ":3\r\n");
    expect(&mut c, "zadd h 0.3 a 0.3 b 0.3 c 0.1 x", ":4\r\n");
    expect(
        &mut c,
        "zunion 3 h g f withscores",
        "*8\r\n$1\r\nx\r\n$19\r\n0.10000000000000001\r\n$1\r\na\r\n$19\r\n0.60000000000000009\r\n$1\r\nb\r\n$19\r\n0.60000000000000009\r\n$1\r\nc\r\n$1\r\n1\r\n",
    );
    expect(
        &mut c,
        "zinter 3 h f g withscores",
        "*4\r\n$1\r\na\r\n$19\r\n0.60000000000000009\r\n$1\r\nb\r\n$19\r\n0.60000000000000009\r\n",
    );
    expect(
        &mut c,
        "zunion 0 z1",
        "-ERR at least 1 input key is needed for 'zunion' command\r\n",
    );
    expect(
        &mut c,
        "zunion -1 z1",
        "-ERR at least 1 input key is needed for 'zunion' command\r\n",
    );
    expect(
        &mut c,
        "zunion x z1",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(&mut c, "zunion 3 z1 z2", "-ERR syntax error\r\n");
    expect(&mut c, "zunion 2 z1 z2 weights 1", "-ERR syntax error\r\n");
    expect(
        &mut c,
        "zunion 2 z1 z2 weights 1 x",
        "-ERR weight value is not a float\r\n",
    );
    expect(
        &mut c,
        "zunion 2 z1 z2 weights 1 nan",
        "-ERR weight value is not a float\r\n",
    );
    expect(
        &mut c,
        "zunion 2 z1 z2 aggregate foo",
        "-ERR syntax error\r\n",
    );
    expect(&mut c, "zunion 2 z1 z2 aggregate", "-ERR syntax error\r\n");
    expect(&mut c, "zunion 2 z1 z2 foo", "-ERR syntax error\r\n");
    expect(&mut c, "zdiff 2 z1 z2 weights 1 1", "-ERR syntax error\r\n");
    expect(
        &mut c,
        "zdiff 2 z1 z2 aggregate sum",
        "-ERR syntax error\r\n",
    );
    expect(
        &mut c,
        "zinter 0 z1",
        "-ERR at least 1 input key is needed for 'zinter' command\r\n",
    );
    expect(
        &mut c,
        "zdiff 0 z1",
        "-ERR at least 1 input key is needed for 'zdiff' command\r\n",
    );
    hello(&mut c, 3);
    expect(
        &mut c,
        "zunion 2 z1 z2 withscores",
        "*4\r\n*2\r\n$1\r\na\r\n,1\r\n*2\r\n$1\r\nb\r\n,12\r\n*2\r\n$1\r\nc\r\n,23\r\n*2\r\n$1\r\nd\r\n,30\r\n",
    );
    expect(&mut c, "zinter 2 z1 z2", "*2\r\n$1\r\nb\r\n$1\r\nc\r\n");
    expect(
        &mut c,
        "zdiff 2 z1 z2 withscores",
        "*1\r\n*2\r\n$1\r\na\r\n,1\r\n",
    );
}

/// Plain sets are inputs with score 1 (the test seeds them directly into the keyspace).
#[test]
fn set_operations_with_sets() {
    let server = TestServer::default_config();
    let mut c = server.client();
    put(&server, "st", set(&["a", "d", "e"]));
    expect(&mut c, "zadd z1 1 a 2 b 3 c", ":3\r\n");
    expect(
        &mut c,
        "zunion 2 z1 st withscores",
        "*10\r\n$1\r\nd\r\n$1\r\n1\r\n$1\r\ne\r\n$1\r\n1\r\n$1\r\na\r\n$1\r\n2\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n",
    );
    expect(
        &mut c,
        "zinter 2 z1 st withscores weights 2 3",
        "*2\r\n$1\r\na\r\n$1\r\n5\r\n",
    );
    expect(
        &mut c,
        "zdiff 2 z1 st withscores",
        "*4\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n",
    );
    expect(
        &mut c,
        "zdiff 2 st z1 withscores",
        "*4\r\n$1\r\nd\r\n$1\r\n1\r\n$1\r\ne\r\n$1\r\n1\r\n",
    );
    expect(&mut c, "zintercard 2 z1 st", ":1\r\n");
    expect(&mut c, "zunionstore d 2 st z1", ":5\r\n");
    expect(
        &mut c,
        "zrange d 0 -1 withscores",
        "*10\r\n$1\r\nd\r\n$1\r\n1\r\n$1\r\ne\r\n$1\r\n1\r\n$1\r\na\r\n$1\r\n2\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n",
    );
}

/// ZUNIONSTORE, ZINTERSTORE and ZDIFFSTORE replace the destination (whatever it held) or delete it when the result is empty.
#[test]
fn stores() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "zadd z1 1 a 2 b 3 c", ":3\r\n");
    expect(&mut c, "zadd z2 10 b 20 c 30 d", ":3\r\n");
    expect(&mut c, "zunionstore d 2 z1 z2", ":4\r\n");
    expect(
        &mut c,
        "zrange d 0 -1 withscores",
        "*8\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$2\r\n12\r\n$1\r\nc\r\n$2\r\n23\r\n$1\r\nd\r\n$2\r\n30\r\n",
    );
    expect(
        &mut c,
        "zinterstore d 2 z1 z2 weights 2 1 aggregate max",
        ":2\r\n",
    );
    expect(
        &mut c,
        "zrange d 0 -1 withscores",
        "*4\r\n$1\r\nb\r\n$2\r\n10\r\n$1\r\nc\r\n$2\r\n20\r\n",
    );
    expect(&mut c, "zdiffstore d 2 z1 z2", ":1\r\n");
    expect(
        &mut c,
        "zrange d 0 -1 withscores",
        "*2\r\n$1\r\na\r\n$1\r\n1\r\n",
    );
    expect(&mut c, "zinterstore d 2 z1 nosuch", ":0\r\n");
    expect(&mut c, "exists d", ":0\r\n");
    expect(&mut c, "zdiffstore d 2 z1 z1", ":0\r\n");
    expect(&mut c, "exists d", ":0\r\n");
    expect(&mut c, "zunionstore z1 2 z1 z2", ":4\r\n");
    expect(
        &mut c,
        "zrange z1 0 -1 withscores",
        "*8\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$2\r\n12\r\n$1\r\nc\r\n$2\r\n23\r\n$1\r\nd\r\n$2\r\n30\r\n",
    );
    expect(&mut c, "zadd zz 0 a 1 b", ":2\r\n");
    expect(&mut c, "zunionstore d 1 zz weights -1", ":2\r\n");
    expect(&mut c, "zscore d a", "$1\r\n0\r\n");
    expect(
        &mut c,
        "zrange d 0 -1 withscores",
        "*4\r\n$1\r\nb\r\n$2\r\n-1\r\n$1\r\na\r\n$1\r\n0\r\n",
    );
    expect(
        &mut c,
        "zunionstore d 2 z1 z2 withscores",
        "-ERR syntax error\r\n",
    );
    expect(
        &mut c,
        "zunionstore d 0 z1",
        "-ERR at least 1 input key is needed for 'zunionstore' command\r\n",
    );
    expect(
        &mut c,
        "zinterstore d 0 z1",
        "-ERR at least 1 input key is needed for 'zinterstore' command\r\n",
    );
    expect(
        &mut c,
        "zdiffstore d 0 z1",
        "-ERR at least 1 input key is needed for 'zdiffstore' command\r\n",
    );
    expect(
        &mut c,
        "zdiffstore d 2 z1 z2 weights 1 1",
        "-ERR syntax error\r\n",
    );
    expect(&mut c, "zunionstore d 3 z1 z2", "-ERR syntax error\r\n");
}

/// ZINTERCARD with LIMIT.
#[test]
fn zintercard() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "zadd z1 1 a 2 b 3 c", ":3\r\n");
    expect(&mut c, "zadd z2 10 b 20 c 30 d", ":3\r\n");
    expect(&mut c, "zintercard 2 z1 z2", ":2\r\n");
    expect(&mut c, "zintercard 1 z1", ":3\r\n");
    expect(&mut c, "zintercard 2 z1 nosuch", ":0\r\n");
    expect(&mut c, "zintercard 2 z1 z2 limit 1", ":1\r\n");
    expect(&mut c, "zintercard 2 z1 z2 limit 0", ":2\r\n");
    expect(&mut c, "zintercard 2 z1 z2 limit 100", ":2\r\n");
    expect(
        &mut c,
        "zintercard 2 z1 z2 limit -1",
        "-ERR LIMIT can't be negative\r\n",
    );
    expect(
        &mut c,
        "zintercard 2 z1 z2 limit x",
        "-ERR LIMIT can't be negative\r\n",
    );
    expect(&mut c, "zintercard 2 z1 z2 limit", "-ERR syntax error\r\n");
    expect(
        &mut c,
        "zintercard 0 z1",
        "-ERR at least 1 input key is needed for 'zintercard' command\r\n",
    );
    expect(&mut c, "zintercard 3 z1 z2", "-ERR syntax error\r\n");
    expect(
        &mut c,
        "zintercard 2 z1 z2 withscores",
        "-ERR syntax error\r\n",
    );
    expect(
        &mut c,
        "zintercard 2 z1 z2 weights 1 1",
        "-ERR syntax error\r\n",
    );
    expect(
        &mut c,
        "zintercard 2 z1 z2 aggregate sum",
        "-ERR syntax error\r\n",
    );
}

/// ZSCAN of a small set: the whole set at once, scores as Redis keeps them, MATCH, cursor and option errors.
#[test]
fn small_zscan() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(
        &mut c,
        "zadd z 1.1 a 2 b 3 c 1 ab 1e17 big 123456789012345678 bigger inf top",
        ":7\r\n",
    );
    expect(
        &mut c,
        "zscan z 0",
        "*2\r\n$1\r\n0\r\n*14\r\n$2\r\nab\r\n$1\r\n1\r\n$1\r\na\r\n$18\r\n1.1000000000000001\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n$3\r\nbig\r\n$18\r\n100000000000000000\r\n$6\r\nbigger\r\n$18\r\n123456789012345680\r\n$3\r\ntop\r\n$3\r\ninf\r\n",
    );
    expect(
        &mut c,
        "zscan z 0 match a*",
        "*2\r\n$1\r\n0\r\n*4\r\n$2\r\nab\r\n$1\r\n1\r\n$1\r\na\r\n$18\r\n1.1000000000000001\r\n",
    );
    expect(
        &mut c,
        "zscan z 0 match *",
        "*2\r\n$1\r\n0\r\n*14\r\n$2\r\nab\r\n$1\r\n1\r\n$1\r\na\r\n$18\r\n1.1000000000000001\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n$3\r\nbig\r\n$18\r\n100000000000000000\r\n$6\r\nbigger\r\n$18\r\n123456789012345680\r\n$3\r\ntop\r\n$3\r\ninf\r\n",
    );
    expect(
        &mut c,
        "zscan z 0 count 1",
        "*2\r\n$1\r\n0\r\n*14\r\n$2\r\nab\r\n$1\r\n1\r\n$1\r\na\r\n$18\r\n1.1000000000000001\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n$3\r\nbig\r\n$18\r\n100000000000000000\r\n$6\r\nbigger\r\n$18\r\n123456789012345680\r\n$3\r\ntop\r\n$3\r\ninf\r\n",
    );
    expect(
        &mut c,
        "zscan z 0 count 1 match b*",
        "*2\r\n$1\r\n0\r\n*6\r\n$1\r\nb\r\n$1\r\n2\r\n$3\r\nbig\r\n$18\r\n100000000000000000\r\n$6\r\nbigger\r\n$18\r\n123456789012345680\r\n",
    );
    expect(
        &mut c,
        "zscan z 5",
        "*2\r\n$1\r\n0\r\n*14\r\n$2\r\nab\r\n$1\r\n1\r\n$1\r\na\r\n$18\r\n1.1000000000000001\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n$3\r\nbig\r\n$18\r\n100000000000000000\r\n$6\r\nbigger\r\n$18\r\n123456789012345680\r\n$3\r\ntop\r\n$3\r\ninf\r\n",
    );
    expect(
        &mut c,
        "zscan z -1",
        "*2\r\n$1\r\n0\r\n*14\r\n$2\r\nab\r\n$1\r\n1\r\n$1\r\na\r\n$18\r\n1.1000000000000001\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n$3\r\nbig\r\n$18\r\n100000000000000000\r\n$6\r\nbigger\r\n$18\r\n123456789012345680\r\n$3\r\ntop\r\n$3\r\ninf\r\n",
    );
    expect_args(
        &mut c,
        &[b"zscan", b"z", b""],
        "*2\r\n$1\r\n0\r\n*14\r\n$2\r\nab\r\n$1\r\n1\r\n$1\r\na\r\n$18\r\n1.1000000000000001\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n$3\r\nbig\r\n$18\r\n100000000000000000\r\n$6\r\nbigger\r\n$18\r\n123456789012345680\r\n$3\r\ntop\r\n$3\r\ninf\r\n",
    );
    expect(
        &mut c,
        "zscan z +5",
        "*2\r\n$1\r\n0\r\n*14\r\n$2\r\nab\r\n$1\r\n1\r\n$1\r\na\r\n$18\r\n1.1000000000000001\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n$3\r\nbig\r\n$18\r\n100000000000000000\r\n$6\r\nbigger\r\n$18\r\n123456789012345680\r\n$3\r\ntop\r\n$3\r\ninf\r\n",
    );
    expect(
        &mut c,
        "zscan z 18446744073709551615",
        "*2\r\n$1\r\n0\r\n*14\r\n$2\r\nab\r\n$1\r\n1\r\n$1\r\na\r\n$18\r\n1.1000000000000001\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n$3\r\nbig\r\n$18\r\n100000000000000000\r\n$6\r\nbigger\r\n$18\r\n123456789012345680\r\n$3\r\ntop\r\n$3\r\ninf\r\n",
    );
    expect(
        &mut c,
        "zscan z 18446744073709551616",
        "-ERR invalid cursor\r\n",
    );
    expect(&mut c, "zscan z x", "-ERR invalid cursor\r\n");
    expect(&mut c, "zscan z -", "-ERR invalid cursor\r\n");
    expect_args(&mut c, &[b"zscan", b"z", b" 1"], "-ERR invalid cursor\r\n");
    expect(&mut c, "zscan z 0 count 0", "-ERR syntax error\r\n");
    expect(
        &mut c,
        "zscan z 0 count x",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(&mut c, "zscan z 0 type zset", "-ERR syntax error\r\n");
    expect(&mut c, "zscan z 0 match", "-ERR syntax error\r\n");
    expect(&mut c, "zscan z 0 noscores", "-ERR syntax error\r\n");
    expect(&mut c, "zscan missing 0", "*2\r\n$1\r\n0\r\n*0\r\n");
    expect(&mut c, "zscan missing 0 foo", "*2\r\n$1\r\n0\r\n*0\r\n");
    expect(&mut c, "zscan missing x", "-ERR invalid cursor\r\n");
    hello(&mut c, 3);
    expect(
        &mut c,
        "zscan z 0 match b*",
        "*2\r\n$1\r\n0\r\n*6\r\n$1\r\nb\r\n$1\r\n2\r\n$3\r\nbig\r\n$18\r\n100000000000000000\r\n$6\r\nbigger\r\n$18\r\n123456789012345680\r\n",
    );
}

/// SplitMix64, so the random test is the same on every run.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Random sorted-set requests from words that reach the option and error paths: each gets
/// exactly one well-formed reply, no command hands the store an invalid effect (a NaN score,
/// an out-of-range index: `ERR internal`), and every set stays consistent.
#[test]
fn random_requests_each_get_one_reply() {
    const NAMES: &[&str] = &[
        "zadd",
        "zincrby",
        "zscore",
        "zmscore",
        "zcard",
        "zcount",
        "zlexcount",
        "zrange",
        "zrangestore",
        "zrevrange",
        "zrangebyscore",
        "zrevrangebyscore",
        "zrangebylex",
        "zrevrangebylex",
        "zrank",
        "zrevrank",
        "zrem",
        "zremrangebyrank",
        "zremrangebyscore",
        "zremrangebylex",
        "zpopmin",
        "zpopmax",
        "zmpop",
        "zrandmember",
        "zunionstore",
        "zinterstore",
        "zdiffstore",
        "zunion",
        "zinter",
        "zdiff",
        "zintercard",
        "zscan",
    ];
    const WORDS: &[&str] = &[
        "z",
        "y",
        "s",
        "st",
        "a",
        "b",
        "c",
        "0",
        "1",
        "-1",
        "2",
        "3",
        "-0",
        "1.5",
        "inf",
        "-inf",
        "+inf",
        "nan",
        "(1",
        "(",
        "[a",
        "(b",
        "-",
        "+",
        "[",
        "1e400",
        "0x10",
        "9223372036854775807",
        "-9223372036854775808",
        "nx",
        "xx",
        "gt",
        "lt",
        "ch",
        "incr",
        "withscores",
        "limit",
        "byscore",
        "bylex",
        "rev",
        "weights",
        "aggregate",
        "sum",
        "min",
        "max",
        "count",
        "match",
        "*",
        "a*",
    ];
    const NUMBERS: &[&str] = &["0", "1", "2", "3", "-1", "-2", "10", "1.5", "-inf", "+inf"];
    let server = TestServer::default_config();
    put(&server, "s", string("x"));
    put(&server, "st", set(&["a", "b"]));
    let mut c = server.client();
    let mut rng = SplitMix(0x2e75_5eed);
    let (mut sent, mut answered, mut populated) = (0, 0, 0);
    for _batch in 0..300 {
        let mut requests = Vec::new();
        let count = 1 + rng.below(50);
        for _ in 0..count {
            let mut args: Vec<&[u8]> = vec![NAMES[rng.below(NAMES.len())].as_bytes()];
            // Mostly a key first, as most of these commands take one.
            if rng.below(10) < 8 {
                args.push([&b"z"[..], b"y", b"z", b"s", b"st"][rng.below(5)]);
            }
            // Short requests mostly (most commands take two or three arguments), numbers
            // half of the time.
            for _ in 0..1 + rng.below(3) + rng.below(2) * rng.below(6) {
                let word = if rng.below(2) == 0 {
                    NUMBERS[rng.below(NUMBERS.len())]
                } else {
                    WORDS[rng.below(WORDS.len())]
                };
                args.push(word.as_bytes());
            }
            requests.extend(support::frame(&args));
        }
        c.send_raw(&requests);
        sent += count;
        for _ in 0..count {
            match c.read_reply() {
                Reply::Error(e) => {
                    assert!(!e.is_empty() && !e.contains(&b'\n') && !e.contains(&b'\r'));
                    assert!(!e.starts_with(b"ERR internal"), "{}", show(&e));
                }
                _ => answered += 1,
            }
        }
        for key in ["z", "y"] {
            let card = c.call(&format!("ZCARD {key}"));
            let Reply::Array(all) = ({
                c.send(&support::words(&format!("ZRANGE {key} 0 -1 WITHSCORES")));
                c.read_reply()
            }) else {
                panic!("ZRANGE")
            };
            assert_eq!(card, format!(":{}\r\n", all.len() / 2).into_bytes());
            populated += usize::from(!all.is_empty());
            for pair in all.chunks(2) {
                let Reply::Bulk(score) = &pair[1] else {
                    panic!("{pair:?}")
                };
                assert_ne!(score.as_slice(), b"nan");
            }
        }
    }
    assert!(
        populated > 100,
        "the sets held members after {populated} batches only"
    );
    // The words reach past the argument checks often enough to change the sets.
    assert!(
        answered * 10 > sent,
        "{answered} of {sent} requests answered without an error"
    );
    expect(&mut c, "PING", "+PONG\r\n");
}

/// Lex ranges over members of different scores answer as Redis 7.0 walks a small set (its compact encoding): from the first member past the lower end, while inside the upper end.
#[test]
fn lex_ranges_of_mixed_scores() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "zadd z 1 b 2 a 3 d 4 c 5 f 6 e", ":6\r\n");
    expect(
        &mut c,
        "zrangebylex z - +",
        "*6\r\n$1\r\nb\r\n$1\r\na\r\n$1\r\nd\r\n$1\r\nc\r\n$1\r\nf\r\n$1\r\ne\r\n",
    );
    expect(
        &mut c,
        "zrangebylex z [a [b",
        "*2\r\n$1\r\nb\r\n$1\r\na\r\n",
    );
    expect(
        &mut c,
        "zrangebylex z [b [c",
        "*2\r\n$1\r\nb\r\n$1\r\na\r\n",
    );
    expect(
        &mut c,
        "zrangebylex z (c (h",
        "*4\r\n$1\r\nd\r\n$1\r\nc\r\n$1\r\nf\r\n$1\r\ne\r\n",
    );
    expect(
        &mut c,
        "zrangebylex z [c +",
        "*4\r\n$1\r\nd\r\n$1\r\nc\r\n$1\r\nf\r\n$1\r\ne\r\n",
    );
    expect(&mut c, "zrangebylex z - [c limit 2 10", "*0\r\n");
    expect(
        &mut c,
        "zrangebylex z - + limit 3 2",
        "*2\r\n$1\r\nc\r\n$1\r\nf\r\n",
    );
    expect(
        &mut c,
        "zrevrangebylex z + -",
        "*6\r\n$1\r\ne\r\n$1\r\nf\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\na\r\n$1\r\nb\r\n",
    );
    expect(
        &mut c,
        "zrevrangebylex z [d [a",
        "*4\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\na\r\n$1\r\nb\r\n",
    );
    expect(
        &mut c,
        "zrevrangebylex z (h (c",
        "*2\r\n$1\r\ne\r\n$1\r\nf\r\n",
    );
    expect(
        &mut c,
        "zrevrangebylex z + (c limit 1 2",
        "*1\r\n$1\r\nf\r\n",
    );
    expect(&mut c, "zlexcount z [a [c", ":2\r\n");
    expect(&mut c, "zlexcount z (c (h", ":4\r\n");
    expect(
        &mut c,
        "zrange z [e [b bylex rev",
        "*4\r\n$1\r\ne\r\n$1\r\nf\r\n$1\r\nc\r\n$1\r\nd\r\n",
    );
    expect(&mut c, "zremrangebylex z [a [d", ":4\r\n");
    expect(
        &mut c,
        "zrange z 0 -1 withscores",
        "*4\r\n$1\r\nf\r\n$1\r\n5\r\n$1\r\ne\r\n$1\r\n6\r\n",
    );
    expect(&mut c, "zadd y 1 z 2 a 3 b", ":3\r\n");
    expect(&mut c, "zrangebylex y [a [b", "*0\r\n");
    expect(&mut c, "zlexcount y [a +", ":3\r\n");
}

/// ZINCRBY is ZADD INCR inside Redis: an option word where the increment goes is a syntax error, while a member may be named like an option.
#[test]
fn zincrby_reads_options_like_zadd() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "zincrby z ch -2", "-ERR syntax error\r\n");
    expect(&mut c, "zincrby z nx a", "-ERR syntax error\r\n");
    expect(&mut c, "zincrby z incr incr", "-ERR syntax error\r\n");
    expect(&mut c, "zincrby z 1 nx", "$1\r\n1\r\n");
    expect(&mut c, "zincrby z 2.5 nx", "$3\r\n3.5\r\n");
    expect(
        &mut c,
        "zrange z 0 -1 withscores",
        "*2\r\n$2\r\nnx\r\n$3\r\n3.5\r\n",
    );
}
