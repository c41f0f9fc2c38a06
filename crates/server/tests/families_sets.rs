//! The sets commands over TCP on the reference keyspace: replies as Redis 7.0.15 gives them (the
//! table below was recorded from a real `redis-server` 7.0.15 in RESP2 and RESP3; the members
//! of a set reply are compared in sorted order, since a set has none), argument errors,
//! WRONGTYPE, random picks, and full SSCAN iterations.

mod support;

use std::collections::BTreeSet;

use server::resp::{Limits, Reply, parse_reply};
use support::{Client, TestServer, expect, show};

/// The RESP3 reply is the RESP2 one.
const SAME: &str = "";

/// `(command, RESP2 reply, RESP3 reply or SAME)`, run in order on one empty keyspace.
const CASES: &[(&str, &str, &str)] = &[
    (
        "sadd",
        "-ERR wrong number of arguments for 'sadd' command\r\n",
        SAME,
    ),
    (
        "sadd s",
        "-ERR wrong number of arguments for 'sadd' command\r\n",
        SAME,
    ),
    ("sadd s a b c a", ":3\r\n", SAME),
    ("sadd s a d", ":1\r\n", SAME),
    ("srem s a x", ":1\r\n", SAME),
    ("srem nokey a", ":0\r\n", SAME),
    ("scard s", ":3\r\n", SAME),
    ("scard nokey", ":0\r\n", SAME),
    ("sismember s b", ":1\r\n", SAME),
    ("sismember s zz", ":0\r\n", SAME),
    ("sismember nokey b", ":0\r\n", SAME),
    ("smismember s b zz c", "*3\r\n:1\r\n:0\r\n:1\r\n", SAME),
    ("smismember nokey a", "*1\r\n:0\r\n", SAME),
    (
        "smismember s",
        "-ERR wrong number of arguments for 'smismember' command\r\n",
        SAME,
    ),
    ("smembers nokey", "*0\r\n", "~0\r\n"),
    ("rpush lst a", ":1\r\n", SAME),
    (
        "sadd lst a",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "srem lst a",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "scard lst",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "sismember lst a",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "smismember lst a",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "smembers lst",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "spop lst",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "srandmember lst",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    ("spop nokey", "$-1\r\n", "_\r\n"),
    ("spop nokey 2", "*0\r\n", "~0\r\n"),
    ("spop nokey 0", "*0\r\n", "~0\r\n"),
    (
        "spop nokey -1",
        "-ERR value is out of range, must be positive\r\n",
        SAME,
    ),
    (
        "spop s -1",
        "-ERR value is out of range, must be positive\r\n",
        SAME,
    ),
    (
        "spop s x",
        "-ERR value is out of range, must be positive\r\n",
        SAME,
    ),
    ("spop s 1 2", "-ERR syntax error\r\n", SAME),
    ("spop s 0", "*0\r\n", "~0\r\n"),
    ("srandmember nokey", "$-1\r\n", "_\r\n"),
    ("srandmember nokey 3", "*0\r\n", SAME),
    ("srandmember nokey -3", "*0\r\n", SAME),
    ("srandmember nokey 0", "*0\r\n", SAME),
    (
        "srandmember nokey x",
        "-ERR value is not an integer or out of range\r\n",
        SAME,
    ),
    (
        "srandmember s -9223372036854775808",
        "-ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807\r\n",
        SAME,
    ),
    (
        "srandmember s 9223372036854775808",
        "-ERR value is not an integer or out of range\r\n",
        SAME,
    ),
    ("srandmember s 0", "*0\r\n", SAME),
    ("srandmember s 1 2", "-ERR syntax error\r\n", SAME),
    ("sadd one x", ":1\r\n", SAME),
    ("srandmember one 3", "*1\r\n$1\r\nx\r\n", SAME),
    (
        "srandmember one -3",
        "*3\r\n$1\r\nx\r\n$1\r\nx\r\n$1\r\nx\r\n",
        SAME,
    ),
    ("spop one 5", "*1\r\n$1\r\nx\r\n", "~1\r\n$1\r\nx\r\n"),
    ("sadd mv1 a b", ":2\r\n", SAME),
    ("smove nokey mv1 a", ":0\r\n", SAME),
    ("smove mv1 mv2 zz", ":0\r\n", SAME),
    ("smove mv1 mv2 a", ":1\r\n", SAME),
    ("smove mv1 mv1 b", ":1\r\n", SAME),
    ("smove mv1 mv1 zz", ":0\r\n", SAME),
    (
        "smove mv1 lst b",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "smove lst mv1 a",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    ("smove nokey lst a", ":0\r\n", SAME),
    ("smove mv1 mv2 b", ":1\r\n", SAME),
    (
        "smembers mv2",
        "*2\r\n$1\r\nb\r\n$1\r\na\r\n",
        "~2\r\n$1\r\nb\r\n$1\r\na\r\n",
    ),
    ("sadd i1 a b c d", ":4\r\n", SAME),
    ("sadd i2 c d e", ":3\r\n", SAME),
    ("sadd i3 d e f", ":3\r\n", SAME),
    (
        "sinter i1 i2",
        "*2\r\n$1\r\nd\r\n$1\r\nc\r\n",
        "~2\r\n$1\r\nd\r\n$1\r\nc\r\n",
    ),
    ("sinter i1 i2 i3", "*1\r\n$1\r\nd\r\n", "~1\r\n$1\r\nd\r\n"),
    ("sinter i1 nokey", "*0\r\n", "~0\r\n"),
    (
        "sinter i1 nokey lst",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "sinter i1 lst",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "sinter lst",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "sinter nokey lst",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "sunion nokey lst",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "sdiff nokey lst",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "sdiff lst nokey",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        SAME,
    ),
    (
        "sunion i1 i2 nokey",
        "*5\r\n$1\r\nd\r\n$1\r\nb\r\n$1\r\na\r\n$1\r\nc\r\n$1\r\ne\r\n",
        "~5\r\n$1\r\nd\r\n$1\r\nb\r\n$1\r\na\r\n$1\r\nc\r\n$1\r\ne\r\n",
    ),
    (
        "sdiff i1 i2 nokey",
        "*2\r\n$1\r\nb\r\n$1\r\na\r\n",
        "~2\r\n$1\r\nb\r\n$1\r\na\r\n",
    ),
    ("sdiff i1 i1", "*0\r\n", "~0\r\n"),
    ("sdiff nokey i1", "*0\r\n", "~0\r\n"),
    ("sinterstore d1 i1 i2", ":2\r\n", SAME),
    (
        "smembers d1",
        "*2\r\n$1\r\nc\r\n$1\r\nd\r\n",
        "~2\r\n$1\r\nc\r\n$1\r\nd\r\n",
    ),
    ("sinterstore d1 i1 nokey", ":0\r\n", SAME),
    ("sinterstore lst i1 i2", ":2\r\n", SAME),
    ("sunionstore d2 i1 i2", ":5\r\n", SAME),
    ("sdiffstore d3 i1 i2", ":2\r\n", SAME),
    ("sdiffstore d3 i1 i1", ":0\r\n", SAME),
    ("sunionstore d2 nokey", ":0\r\n", SAME),
    ("sunionstore d4 i1 lst", ":4\r\n", SAME),
    ("sadd d5 x", ":1\r\n", SAME),
    ("sunionstore d5 d5 i1", ":5\r\n", SAME),
    ("sdiffstore d5 d5 i1", ":1\r\n", SAME),
    ("smembers d5", "*1\r\n$1\r\nx\r\n", "~1\r\n$1\r\nx\r\n"),
    (
        "sintercard",
        "-ERR wrong number of arguments for 'sintercard' command\r\n",
        SAME,
    ),
    (
        "sintercard 1",
        "-ERR wrong number of arguments for 'sintercard' command\r\n",
        SAME,
    ),
    (
        "sintercard 0 i1",
        "-ERR numkeys should be greater than 0\r\n",
        SAME,
    ),
    (
        "sintercard -1 i1",
        "-ERR numkeys should be greater than 0\r\n",
        SAME,
    ),
    (
        "sintercard x i1",
        "-ERR numkeys should be greater than 0\r\n",
        SAME,
    ),
    (
        "sintercard 2 i1",
        "-ERR Number of keys can't be greater than number of args\r\n",
        SAME,
    ),
    ("sintercard 1 i1 i2", "-ERR syntax error\r\n", SAME),
    ("sintercard 2 i1 i2", ":2\r\n", SAME),
    ("sintercard 2 i1 i2 limit 1", ":1\r\n", SAME),
    ("sintercard 2 i1 i2 limit 0", ":2\r\n", SAME),
    (
        "sintercard 2 i1 i2 limit -1",
        "-ERR LIMIT can't be negative\r\n",
        SAME,
    ),
    (
        "sintercard 2 i1 i2 limit x",
        "-ERR LIMIT can't be negative\r\n",
        SAME,
    ),
    ("sintercard 2 i1 i2 limit", "-ERR syntax error\r\n", SAME),
    ("sintercard 2 i1 i2 foo 1", "-ERR syntax error\r\n", SAME),
    ("sintercard 2 i1 i2 limit 1 limit 5", ":2\r\n", SAME),
    ("sintercard 2 i1 nokey", ":0\r\n", SAME),
    ("sintercard 2 i1 lst", ":2\r\n", SAME),
    ("sintercard 2 nokey lst", ":0\r\n", SAME),
    ("sintercard 3 i1 i2 i3", ":1\r\n", SAME),
    (
        "sintercard 9223372036854775807 i1",
        "-ERR Number of keys can't be greater than number of args\r\n",
        SAME,
    ),
    (
        "sscan",
        "-ERR wrong number of arguments for 'sscan' command\r\n",
        SAME,
    ),
    (
        "sscan i1",
        "-ERR wrong number of arguments for 'sscan' command\r\n",
        SAME,
    ),
    ("sscan i1 x", "-ERR invalid cursor\r\n", SAME),
    (
        "sscan i1 18446744073709551616",
        "-ERR invalid cursor\r\n",
        SAME,
    ),
    ("sscan nokey 0", "*2\r\n$1\r\n0\r\n*0\r\n", SAME),
    ("sscan nokey 0 count 0", "*2\r\n$1\r\n0\r\n*0\r\n", SAME),
    ("sscan nokey x", "-ERR invalid cursor\r\n", SAME),
    (
        "sscan lst 0",
        "*2\r\n$1\r\n0\r\n*2\r\n$1\r\nc\r\n$1\r\nd\r\n",
        SAME,
    ),
    ("sscan i1 0 count 0", "-ERR syntax error\r\n", SAME),
    (
        "sscan i1 0 count x",
        "-ERR value is not an integer or out of range\r\n",
        SAME,
    ),
    ("sscan i1 0 count", "-ERR syntax error\r\n", SAME),
    ("sscan i1 0 match", "-ERR syntax error\r\n", SAME),
    ("sscan i1 0 foo", "-ERR syntax error\r\n", SAME),
    ("sscan i1 0 type string", "-ERR syntax error\r\n", SAME),
    (
        "sscan i1 0 match a",
        "*2\r\n$1\r\n0\r\n*1\r\n$1\r\na\r\n",
        SAME,
    ),
    (
        "sscan i1 0 match * count 100",
        "*2\r\n$1\r\n0\r\n*4\r\n$1\r\nd\r\n$1\r\nc\r\n$1\r\nb\r\n$1\r\na\r\n",
        SAME,
    ),
    (
        "sadd big a1 a2 a3 a4 a5 a6 a7 a8 a9 a10 a11 a12 a13 a14 a15 a16 a17 a18 a19 a20",
        ":20\r\n",
        SAME,
    ),
    // Extreme arguments.
    ("sadd es a b c", ":3\r\n", SAME),
    ("smismember es a a zz", "*3\r\n:1\r\n:1\r\n:0\r\n", SAME),
    ("sintercard 1 es limit 9223372036854775807", ":3\r\n", SAME),
    (
        "srandmember es 9223372036854775807",
        "*3\r\n$1\r\nc\r\n$1\r\nb\r\n$1\r\na\r\n",
        SAME,
    ),
    (
        "spop es 9223372036854775807",
        "*3\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\na\r\n",
        "~3\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\na\r\n",
    ),
    ("sadd es a b c", ":3\r\n", SAME),
    (
        "spop es 9223372036854775808",
        "-ERR value is out of range, must be positive\r\n",
        SAME,
    ),
    (
        "sunion es es es",
        "*3\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\na\r\n",
        "~3\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\na\r\n",
    ),
    ("sinterstore es es", ":3\r\n", SAME),
    (
        "smembers es",
        "*3\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\na\r\n",
        "~3\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\na\r\n",
    ),
    ("sadd eu 1 2 3", ":3\r\n", SAME),
    ("sadd eu 1 2.0 03", ":2\r\n", SAME),
    ("scard eu", ":5\r\n", SAME),
    ("smove es es zz", ":0\r\n", SAME),
    ("sadd em 1", ":1\r\n", SAME),
    ("smove em em 1", ":1\r\n", SAME),
    ("scard em", ":1\r\n", SAME),
];

/// Commands whose replies hold members in no particular order.
const UNORDERED: &[&str] = &[
    "smembers",
    "sinter",
    "sunion",
    "sdiff",
    "sscan",
    "spop",
    "srandmember",
];

fn parse(bytes: &[u8]) -> Reply {
    parse_reply(bytes, &Limits::default())
        .expect("a valid reply")
        .expect("a whole reply")
        .0
}

/// The reply with the elements of every array and set sorted (by their encoding), kinds kept.
fn sorted(reply: Reply) -> Reply {
    let sort = |items: Vec<Reply>| {
        let mut items: Vec<Reply> = items.into_iter().map(sorted).collect();
        items.sort_by_key(Reply::to_bytes);
        items
    };
    match reply {
        Reply::Array(items) => Reply::Array(sort(items)),
        Reply::Set(items) => Reply::Set(sort(items)),
        other => other,
    }
}

fn run_cases(c: &mut Client, resp3: bool) {
    for (line, resp2_reply, resp3_reply) in CASES {
        let want = if resp3 && !resp3_reply.is_empty() {
            resp3_reply
        } else {
            resp2_reply
        };
        let name = line.split(' ').next().unwrap_or_default();
        if UNORDERED.contains(&name) {
            let got = c.call(line);
            assert_eq!(
                sorted(parse(&got)),
                sorted(parse(want.as_bytes())),
                "command: {line}: {}",
                show(&got)
            );
        } else {
            expect(c, line, want);
        }
    }
}

#[test]
fn set_commands_reply_like_redis_in_resp2() {
    let server = TestServer::default_config();
    let mut c = server.client();
    run_cases(&mut c, false);
}

#[test]
fn set_commands_reply_like_redis_in_resp3() {
    let server = TestServer::default_config();
    let mut c = server.client();
    let hello = c.call("HELLO 3");
    assert!(hello.starts_with(b"%"), "{}", show(&hello));
    run_cases(&mut c, true);
}

/// The members of a set or array reply of bulk strings.
fn members(reply: Reply) -> Vec<String> {
    match reply {
        Reply::Array(items) | Reply::Set(items) => items
            .into_iter()
            .map(|r| match r {
                Reply::Bulk(b) => String::from_utf8(b).unwrap(),
                other => panic!("not a bulk string: {other:?}"),
            })
            .collect(),
        other => panic!("not a collection: {other:?}"),
    }
}

fn call(c: &mut Client, line: &str) -> Reply {
    c.send(&support::words(line));
    c.read_reply()
}

fn smembers(c: &mut Client, key: &str) -> BTreeSet<String> {
    members(call(c, &format!("SMEMBERS {key}")))
        .into_iter()
        .collect()
}

/// SPOP removes what it returns; SRANDMEMBER returns members without removing them, distinct
/// for a positive count, repeated for a negative one; RESP3 types as Redis (a set for SPOP with
/// a count, an array for SRANDMEMBER).
#[test]
fn random_members() {
    let server = TestServer::default_config();
    let mut c = server.client();
    let all: BTreeSet<String> = (0..20).map(|i| format!("m{i}")).collect();
    let line = all.iter().fold("SADD s".to_string(), |l, m| l + " " + m);
    expect(&mut c, &line, ":20\r\n");

    let picked = members(call(&mut c, "SRANDMEMBER s 5"));
    assert_eq!(picked.len(), 5);
    assert_eq!(
        picked.iter().collect::<BTreeSet<_>>().len(),
        5,
        "{picked:?}"
    );
    assert!(picked.iter().all(|m| all.contains(m)));
    assert_eq!(members(call(&mut c, "SRANDMEMBER s 50")).len(), 20);
    let repeated = members(call(&mut c, "SRANDMEMBER s -50"));
    assert_eq!(repeated.len(), 50);
    assert!(repeated.iter().all(|m| all.contains(m)));
    // Not Redis: a negative count past 2^24 is refused rather than building a reply of any
    // size (an absent key still answers an empty array, as in Redis).
    let refused = c.call("SRANDMEMBER s -16777217");
    assert!(
        refused.starts_with(b"-ERR value is out of range"),
        "{}",
        show(&refused)
    );
    expect(&mut c, "SRANDMEMBER nokey -16777217", "*0\r\n");
    let Reply::Bulk(one) = call(&mut c, "SRANDMEMBER s") else {
        panic!("SRANDMEMBER without a count is a bulk string")
    };
    assert!(all.contains(&String::from_utf8(one).unwrap()));
    assert_eq!(smembers(&mut c, "s"), all, "SRANDMEMBER removes nothing");

    let Reply::Bulk(popped) = call(&mut c, "SPOP s") else {
        panic!("SPOP without a count is a bulk string")
    };
    let popped = String::from_utf8(popped).unwrap();
    let mut left = all.clone();
    assert!(left.remove(&popped));
    let three = members(call(&mut c, "SPOP s 3"));
    assert_eq!(three.len(), 3);
    for m in &three {
        assert!(left.remove(m), "{m} popped twice or never there");
    }
    assert_eq!(smembers(&mut c, "s"), left);
    expect(&mut c, "SCARD s", ":16\r\n");

    let hello = c.call("HELLO 3");
    assert!(hello.starts_with(b"%"), "{}", show(&hello));
    let Reply::Set(two) = call(&mut c, "SPOP s 2") else {
        panic!("SPOP with a count is a set in RESP3")
    };
    assert_eq!(two.len(), 2);
    let Reply::Array(rand) = call(&mut c, "SRANDMEMBER s 2") else {
        panic!("SRANDMEMBER with a count is an array in RESP3")
    };
    assert_eq!(rand.len(), 2);
    // Popping more than there is empties the set, which then does not exist.
    assert_eq!(members(call(&mut c, "SPOP s 100")).len(), 14);
    expect(&mut c, "SCARD s", ":0\r\n");
    expect(&mut c, "SPOP s", "_\r\n");
}

/// A full SSCAN returns every member (MATCH filters, COUNT bounds each step); members present
/// for the whole scan come back even when others are added and removed meanwhile.
#[test]
fn sscan_iterates_every_member() {
    let server = TestServer::default_config();
    let mut c = server.client();
    let all: BTreeSet<String> = (0..500).map(|i| format!("k{i}")).collect();
    for chunk in all.iter().collect::<Vec<_>>().chunks(100) {
        let line = chunk
            .iter()
            .fold("SADD big".to_string(), |l, m| l + " " + m);
        expect(&mut c, &line, ":100\r\n");
    }
    let scan = |c: &mut Client, extra: &str, churn: bool| {
        let mut seen = Vec::new();
        let mut cursor = "0".to_string();
        let mut steps = 0;
        loop {
            let Reply::Array(parts) = call(c, &format!("SSCAN big {cursor}{extra}")) else {
                panic!("SSCAN replies with an array")
            };
            let [Reply::Bulk(next), page] = <[Reply; 2]>::try_from(parts).unwrap() else {
                panic!("SSCAN replies [cursor, members]")
            };
            let page = members(page);
            assert!(page.len() <= 25, "a step of {} members", page.len());
            seen.extend(page);
            steps += 1;
            if churn {
                expect(c, &format!("SADD big new{steps}"), ":1\r\n");
                expect(
                    c,
                    &format!("SREM big new{}", steps - 1),
                    &format!(":{}\r\n", u8::from(steps > 1)),
                );
            }
            cursor = String::from_utf8(next).unwrap();
            if cursor == "0" {
                return (seen, steps);
            }
        }
    };
    let (seen, steps) = scan(&mut c, " COUNT 20", false);
    assert!(steps >= 20, "{steps} steps of COUNT 20 for 500 members");
    assert_eq!(seen.len(), 500, "each member once");
    assert_eq!(seen.into_iter().collect::<BTreeSet<_>>(), all);

    let (seen, _) = scan(&mut c, " MATCH k1* COUNT 20", false);
    let want: BTreeSet<String> = all
        .iter()
        .filter(|m| m.starts_with("k1"))
        .cloned()
        .collect();
    assert_eq!(seen.into_iter().collect::<BTreeSet<_>>(), want);

    let (seen, _) = scan(&mut c, " COUNT 20", true);
    let seen: BTreeSet<String> = seen.into_iter().collect();
    assert!(
        all.is_subset(&seen),
        "a member present throughout was missed"
    );

    // Cursor forms C's strtoul takes: empty is 0; a leading space is not.
    let reply = c.call_args(&[b"SSCAN", b"nokey", b""]);
    assert_eq!(reply, b"*2\r\n$1\r\n0\r\n*0\r\n");
    let reply = c.call_args(&[b"SSCAN", b"big", b" 0"]);
    assert_eq!(reply, b"-ERR invalid cursor\r\n");
}

/// Sets live in the database SELECT chose, and the STORE forms write there.
#[test]
fn sets_live_in_the_selected_database() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "SADD a x y", ":2\r\n");
    expect(&mut c, "SELECT 3", "+OK\r\n");
    expect(&mut c, "SCARD a", ":0\r\n");
    expect(&mut c, "SADD a y z", ":2\r\n");
    expect(&mut c, "SADD b z", ":1\r\n");
    expect(&mut c, "SDIFFSTORE d a b", ":1\r\n");
    expect(&mut c, "SMEMBERS d", "*1\r\n$1\r\ny\r\n");
    expect(&mut c, "SMOVE a b y", ":1\r\n");
    expect(&mut c, "SELECT 0", "+OK\r\n");
    expect(&mut c, "SCARD d", ":0\r\n");
    expect(&mut c, "SCARD b", ":0\r\n");
    assert_eq!(
        smembers(&mut c, "a"),
        ["x", "y"].iter().map(|s| s.to_string()).collect()
    );
}

/// Members are binary-safe, and the algebra agrees with a model on larger sets.
#[test]
fn set_algebra_agrees_with_a_model() {
    let server = TestServer::default_config();
    let mut c = server.client();
    assert_eq!(c.call_args(&[b"SADD", b"bin", b"\r\n\0", b""]), b":2\r\n");
    assert_eq!(c.call_args(&[b"SISMEMBER", b"bin", b""]), b":1\r\n");
    assert_eq!(
        c.call_args(&[b"SREM", b"bin", b"\r\n\0", b"\r\n\0"]),
        b":1\r\n"
    );
    let sets: Vec<BTreeSet<String>> = [2, 3, 5]
        .iter()
        .map(|step| (0..200).step_by(*step).map(|i| format!("n{i}")).collect())
        .collect();
    for (i, s) in sets.iter().enumerate() {
        let line = s.iter().fold(format!("SADD s{i}"), |l, m| l + " " + m);
        expect(&mut c, &line, &format!(":{}\r\n", s.len()));
    }
    let inter: BTreeSet<String> = sets[0]
        .iter()
        .filter(|m| sets[1].contains(*m) && sets[2].contains(*m))
        .cloned()
        .collect();
    let union: BTreeSet<String> = sets.iter().flatten().cloned().collect();
    let diff: BTreeSet<String> = sets[0]
        .iter()
        .filter(|m| !sets[1].contains(*m) && !sets[2].contains(*m))
        .cloned()
        .collect();
    let got = |c: &mut Client, line: &str| -> BTreeSet<String> {
        members(call(c, line)).into_iter().collect()
    };
    assert_eq!(got(&mut c, "SINTER s0 s1 s2"), inter);
    assert_eq!(got(&mut c, "SUNION s0 s1 s2"), union);
    assert_eq!(got(&mut c, "SDIFF s0 s1 s2"), diff);
    expect(
        &mut c,
        "SINTERCARD 3 s0 s1 s2",
        &format!(":{}\r\n", inter.len()),
    );
    expect(&mut c, "SINTERCARD 3 s0 s1 s2 LIMIT 2", ":2\r\n");
    expect(
        &mut c,
        "SUNIONSTORE u s0 s1 s2",
        &format!(":{}\r\n", union.len()),
    );
    assert_eq!(smembers(&mut c, "u"), union);
    // A STORE may name its destination among its sources.
    expect(
        &mut c,
        "SINTERSTORE u u s2",
        &format!(":{}\r\n", sets[2].len()),
    );
    assert_eq!(smembers(&mut c, "u"), sets[2]);
    expect(&mut c, "SDIFFSTORE u u u", ":0\r\n");
    expect(&mut c, "SCARD u", ":0\r\n");
}
