//! Every command's reply bytes, its argument errors, and the introspection commands clients use
//! on connect (HELLO, CLIENT, COMMAND, CONFIG, INFO).

mod support;

use std::collections::HashSet;

use server::resp::Reply;
use support::{TestServer, expect, show};

#[test]
fn connection_commands() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "PING", "+PONG\r\n");
    expect(&mut c, "ping hello", "$5\r\nhello\r\n");
    expect(
        &mut c,
        "PING a b",
        "-ERR wrong number of arguments for 'ping' command\r\n",
    );
    expect(&mut c, "ECHO hi", "$2\r\nhi\r\n");
    expect(
        &mut c,
        "ECHO",
        "-ERR wrong number of arguments for 'echo' command\r\n",
    );
    expect(&mut c, "SELECT 0", "+OK\r\n");
    expect(&mut c, "SELECT 16", "-ERR DB index is out of range\r\n");
    expect(&mut c, "SELECT -1", "-ERR DB index is out of range\r\n");
    expect(&mut c, "SELECT 15", "+OK\r\n");
    expect(&mut c, "SELECT 0", "+OK\r\n");
    expect(
        &mut c,
        "SELECT x",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(
        &mut c,
        "AUTH pw",
        "-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\r\n",
    );
    expect(&mut c, "AUTH default pw", "+OK\r\n");
    expect(
        &mut c,
        "AUTH alice pw",
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n",
    );
    assert_eq!(c.call_args(&[b"ECHO", b"\r\n\0"]), b"$3\r\n\r\n\0\r\n");
}

#[test]
fn unknown_commands_and_arity() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(
        &mut c,
        "foo a b",
        "-ERR unknown command 'foo', with args beginning with: 'a' 'b' \r\n",
    );
    expect(
        &mut c,
        "foo",
        "-ERR unknown command 'foo', with args beginning with: \r\n",
    );
    expect(
        &mut c,
        "GET",
        "-ERR wrong number of arguments for 'get' command\r\n",
    );
    expect(
        &mut c,
        "get a b",
        "-ERR wrong number of arguments for 'get' command\r\n",
    );
    expect(
        &mut c,
        "SET a",
        "-ERR wrong number of arguments for 'set' command\r\n",
    );
    expect(
        &mut c,
        "DEL",
        "-ERR wrong number of arguments for 'del' command\r\n",
    );
    expect(
        &mut c,
        "EXISTS",
        "-ERR wrong number of arguments for 'exists' command\r\n",
    );
    expect(
        &mut c,
        "MGET",
        "-ERR wrong number of arguments for 'mget' command\r\n",
    );
    expect(
        &mut c,
        "MSET a",
        "-ERR wrong number of arguments for 'mset' command\r\n",
    );
    expect(
        &mut c,
        "MSET a b c",
        "-ERR wrong number of arguments for 'mset' command\r\n",
    );
    expect(
        &mut c,
        "HSET h f",
        "-ERR wrong number of arguments for 'hset' command\r\n",
    );
    expect(
        &mut c,
        "HSET h f v g",
        "-ERR wrong number of arguments for 'hset' command\r\n",
    );
    expect(
        &mut c,
        "HMSET h f v g",
        "-ERR wrong number of arguments for 'hmset' command\r\n",
    );
    expect(
        &mut c,
        "ZADD z 1",
        "-ERR wrong number of arguments for 'zadd' command\r\n",
    );
    expect(
        &mut c,
        "ZRANGEBYSCORE z 1",
        "-ERR wrong number of arguments for 'zrangebyscore' command\r\n",
    );
    expect(
        &mut c,
        "DBSIZE x",
        "-ERR wrong number of arguments for 'dbsize' command\r\n",
    );
    expect(
        &mut c,
        "SAVE x",
        "-ERR wrong number of arguments for 'save' command\r\n",
    );
    // Names are case-insensitive.
    expect(&mut c, "pInG", "+PONG\r\n");
    // Error texts never carry a line break from the client's bytes.
    assert_eq!(
        c.call_args(&[b"no\r\nsuch", b"x\ny"]),
        b"-ERR unknown command 'no  such', with args beginning with: 'x y' \r\n"
    );
}

#[test]
fn string_commands() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "GET k", "$-1\r\n");
    expect(&mut c, "SET k v", "+OK\r\n");
    expect(&mut c, "GET k", "$1\r\nv\r\n");
    expect(&mut c, "SET k v2 NX", "$-1\r\n");
    expect(&mut c, "SET k v2 XX", "+OK\r\n");
    expect(&mut c, "SET other v XX", "$-1\r\n");
    expect(&mut c, "SET other v nx", "+OK\r\n");
    expect(&mut c, "SET k v EX 100", "+OK\r\n");
    expect(&mut c, "SET k v px 100000", "+OK\r\n");
    expect(
        &mut c,
        "SET k v EX 0",
        "-ERR invalid expire time in 'set' command\r\n",
    );
    expect(
        &mut c,
        "SET k v PX -1",
        "-ERR invalid expire time in 'set' command\r\n",
    );
    expect(
        &mut c,
        "SET k v EX x",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(&mut c, "SET k v EX 1 PX 1", "-ERR syntax error\r\n");
    expect(&mut c, "SET k v NX XX", "-ERR syntax error\r\n");
    expect(&mut c, "SET k v EX", "-ERR syntax error\r\n");
    expect(&mut c, "SET k v bogus", "-ERR syntax error\r\n");
    expect(&mut c, "GET k", "$1\r\nv\r\n");
    expect(&mut c, "DEL k other nothere", ":2\r\n");
    expect(&mut c, "EXISTS k", ":0\r\n");
    expect(&mut c, "MSET a 1 b 2", "+OK\r\n");
    expect(&mut c, "EXISTS a b a nothere", ":3\r\n");
    expect(
        &mut c,
        "MGET a nothere b",
        "*3\r\n$1\r\n1\r\n$-1\r\n$1\r\n2\r\n",
    );
    expect(&mut c, "INCR a", ":2\r\n");
    expect(&mut c, "DECR a", ":1\r\n");
    expect(&mut c, "INCRBY a 10", ":11\r\n");
    expect(&mut c, "DECRBY a 20", ":-9\r\n");
    expect(&mut c, "INCR fresh", ":1\r\n");
    expect(
        &mut c,
        "INCRBY a x",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(
        &mut c,
        "INCRBY a 1.5",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(
        &mut c,
        "DECRBY a -9223372036854775808",
        "-ERR decrement would overflow\r\n",
    );
    expect(&mut c, "SET big 9223372036854775807", "+OK\r\n");
    expect(
        &mut c,
        "INCR big",
        "-ERR increment or decrement would overflow\r\n",
    );
    expect(&mut c, "SET word abc", "+OK\r\n");
    expect(
        &mut c,
        "INCR word",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(&mut c, "APPEND word def", ":6\r\n");
    expect(&mut c, "APPEND new xy", ":2\r\n");
    expect(&mut c, "STRLEN word", ":6\r\n");
    expect(&mut c, "STRLEN nothere", ":0\r\n");
    expect(&mut c, "TYPE word", "+string\r\n");
    expect(&mut c, "TYPE nothere", "+none\r\n");
}

#[test]
fn expiry_is_passed_to_the_backend() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "SET gone v PX 1", "+OK\r\n");
    // The reference backend drops the key once its deadline passes; poll until then (bounded).
    let deadline = std::time::Instant::now() + support::IO_TIMEOUT;
    while c.call("GET gone") != b"$-1\r\n" {
        assert!(std::time::Instant::now() < deadline, "key never expired");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    expect(&mut c, "SET stays v EX 100000", "+OK\r\n");
    expect(&mut c, "GET stays", "$1\r\nv\r\n");
    expect(&mut c, "SET past v PXAT 1", "+OK\r\n");
    expect(&mut c, "GET past", "$-1\r\n");
}

#[test]
fn hash_commands() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "HSET h a 1 b 2", ":2\r\n");
    expect(&mut c, "HSET h a 3 c 4", ":1\r\n");
    expect(&mut c, "HMSET h d 5", "+OK\r\n");
    expect(&mut c, "HGET h a", "$1\r\n3\r\n");
    expect(&mut c, "HGET h zz", "$-1\r\n");
    expect(&mut c, "HGET nothere a", "$-1\r\n");
    expect(
        &mut c,
        "HMGET h a zz b",
        "*3\r\n$1\r\n3\r\n$-1\r\n$1\r\n2\r\n",
    );
    expect(&mut c, "HMGET nothere a b", "*2\r\n$-1\r\n$-1\r\n");
    expect(&mut c, "HDEL h c d zz", ":2\r\n");
    // The reference backend returns fields sorted.
    expect(
        &mut c,
        "HGETALL h",
        "*4\r\n$1\r\na\r\n$1\r\n3\r\n$1\r\nb\r\n$1\r\n2\r\n",
    );
    expect(&mut c, "HGETALL nothere", "*0\r\n");
    expect(&mut c, "TYPE h", "+hash\r\n");
    let wrongtype = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
    expect(&mut c, "GET h", wrongtype);
    expect(&mut c, "INCR h", wrongtype);
    expect(&mut c, "APPEND h x", wrongtype);
    expect(&mut c, "SET s v", "+OK\r\n");
    expect(&mut c, "HSET s f v", wrongtype);
    expect(&mut c, "HGET s f", wrongtype);
    expect(&mut c, "HGETALL s", wrongtype);
    expect(&mut c, "MGET s h", "*2\r\n$1\r\nv\r\n$-1\r\n");
    expect(&mut c, "HDEL h a b", ":2\r\n");
    expect(&mut c, "EXISTS h", ":0\r\n");
}

#[test]
fn server_commands() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "DBSIZE", ":0\r\n");
    expect(&mut c, "MSET a 1 b 2 c 3", "+OK\r\n");
    expect(&mut c, "DBSIZE", ":3\r\n");
    expect(&mut c, "FLUSHALL", "+OK\r\n");
    expect(&mut c, "DBSIZE", ":0\r\n");
    expect(&mut c, "SET a 1", "+OK\r\n");
    expect(&mut c, "FLUSHALL ASYNC", "+OK\r\n");
    expect(&mut c, "FLUSHALL sync", "+OK\r\n");
    expect(&mut c, "FLUSHALL bogus", "-ERR syntax error\r\n");
    expect(&mut c, "SAVE", "+OK\r\n");
    assert_eq!(server.backend.save_calls(), 1);
}

#[test]
fn scan_visits_every_key() {
    let server = TestServer::default_config();
    let mut c = server.client();
    let mut pipeline = Vec::new();
    for i in 0..1000 {
        pipeline.extend(support::frame(&[
            b"SET",
            format!("key:{i}").as_bytes(),
            b"v",
        ]));
    }
    pipeline.extend(support::frame(&[b"HSET", b"hash:1", b"f", b"v"]));
    c.send_raw(&pipeline);
    for _ in 0..1000 {
        assert_eq!(c.read_reply_bytes(), b"+OK\r\n");
    }
    assert_eq!(c.read_reply_bytes(), b":1\r\n");
    let scan_all = |c: &mut support::Client, extra: &str| -> (Vec<Vec<u8>>, usize) {
        let mut cursor = b"0".to_vec();
        let mut seen = Vec::new();
        let mut steps = 0;
        loop {
            steps += 1;
            assert!(steps < 10_000, "scan did not terminate");
            let line = format!("SCAN {} {extra}", String::from_utf8_lossy(&cursor));
            c.send(&support::words(&line));
            let Reply::Array(parts) = c.read_reply() else {
                panic!("scan reply not an array")
            };
            let [Reply::Bulk(next), Reply::Array(keys)] = parts.as_slice() else {
                panic!("scan reply shape: {parts:?}")
            };
            for k in keys {
                let Reply::Bulk(k) = k else {
                    panic!("key not bulk")
                };
                seen.push(k.clone());
            }
            cursor = next.clone();
            if cursor == b"0" {
                return (seen, steps);
            }
        }
    };
    let (seen, _) = scan_all(&mut c, "MATCH key:* COUNT 37");
    let unique: HashSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), 1000);
    assert!(seen.iter().all(|k| k.starts_with(b"key:")));
    let (seen, _) = scan_all(&mut c, "MATCH key:1?? COUNT 100");
    let unique: HashSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), 100);
    let (seen, _) = scan_all(&mut c, "MATCH key:[0-4] COUNT 1000");
    let mut unique: Vec<_> = seen
        .into_iter()
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    unique.sort();
    assert_eq!(
        unique,
        vec![
            b"key:0".to_vec(),
            b"key:1".to_vec(),
            b"key:2".to_vec(),
            b"key:3".to_vec(),
            b"key:4".to_vec()
        ]
    );
    let (seen, _) = scan_all(&mut c, "TYPE hash");
    assert_eq!(seen, vec![b"hash:1".to_vec()]);
    let (seen, steps) = scan_all(&mut c, "");
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 1001);
    assert!(steps > 1, "default COUNT is small");

    expect(&mut c, "SCAN x", "-ERR invalid cursor\r\n");
    expect(&mut c, "SCAN 0 COUNT 0", "-ERR syntax error\r\n");
    expect(
        &mut c,
        "SCAN 0 COUNT x",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(&mut c, "SCAN 0 MATCH", "-ERR syntax error\r\n");
    expect(&mut c, "SCAN 0 bogus 1", "-ERR syntax error\r\n");
    expect(&mut c, "FLUSHALL", "+OK\r\n");
    expect(&mut c, "SCAN 0", "*2\r\n$1\r\n0\r\n*0\r\n");
}

fn flat_map(reply: Reply) -> Vec<(Vec<u8>, Reply)> {
    let Reply::Array(items) = reply else {
        panic!("not an array: {reply:?}")
    };
    items
        .chunks(2)
        .map(|p| match &p[0] {
            Reply::Bulk(k) => (k.clone(), p[1].clone()),
            other => panic!("key not bulk: {other:?}"),
        })
        .collect()
}

#[test]
fn hello_and_client() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(
        &mut c,
        "HELLO 4",
        "-NOPROTO unsupported protocol version\r\n",
    );
    expect(
        &mut c,
        "HELLO 1",
        "-NOPROTO unsupported protocol version\r\n",
    );
    expect(
        &mut c,
        "HELLO x",
        "-ERR Protocol version is not an integer or out of range\r\n",
    );
    expect(
        &mut c,
        "HELLO 2 bogus",
        "-ERR Syntax error in HELLO option 'bogus'\r\n",
    );
    c.send(&support::words("CLIENT ID"));
    let Reply::Integer(id) = c.read_reply() else {
        panic!("CLIENT ID")
    };
    for line in ["HELLO", "HELLO 2", "HELLO 2 SETNAME app AUTH default pw"] {
        c.send(&support::words(line));
        let fields = flat_map(c.read_reply());
        let keys: Vec<&[u8]> = fields.iter().map(|(k, _)| k.as_slice()).collect();
        assert_eq!(
            keys,
            [
                &b"server"[..],
                b"version",
                b"proto",
                b"id",
                b"mode",
                b"role",
                b"modules"
            ]
        );
        assert_eq!(fields[1].1, Reply::bulk(server::REDIS_VERSION));
        assert_eq!(fields[2].1, Reply::Integer(2));
        assert_eq!(fields[3].1, Reply::Integer(id));
        assert_eq!(fields[4].1, Reply::bulk("standalone"));
        assert_eq!(fields[5].1, Reply::bulk("master"));
        assert_eq!(fields[6].1, Reply::Array(vec![]));
    }
    expect(&mut c, "CLIENT GETNAME", "$3\r\napp\r\n");
    expect(&mut c, "CLIENT SETNAME worker-1", "+OK\r\n");
    expect(&mut c, "CLIENT GETNAME", "$8\r\nworker-1\r\n");
    assert_eq!(
        show(&c.call_args(&[b"CLIENT", b"SETNAME", b"a b"])),
        "-ERR Client names cannot contain spaces, newlines or special characters.\\r\\n"
    );
    expect(
        &mut c,
        "CLIENT SETNAME a b",
        "-ERR wrong number of arguments for 'client|setname' command\r\n",
    );
    expect(&mut c, "CLIENT SETINFO LIB-NAME jedis", "+OK\r\n");
    expect(&mut c, "CLIENT SETINFO lib-ver 5.1.0", "+OK\r\n");
    expect(
        &mut c,
        "CLIENT SETINFO color red",
        "-ERR Unrecognized option 'color'\r\n",
    );
    expect(
        &mut c,
        "CLIENT bogus",
        "-ERR unknown subcommand 'bogus'. Try CLIENT HELP.\r\n",
    );
    c.send(&support::words("CLIENT INFO"));
    let Reply::Bulk(info) = c.read_reply() else {
        panic!("CLIENT INFO")
    };
    let info = String::from_utf8(info).unwrap();
    assert!(info.starts_with(&format!("id={id} ")), "{info}");
    assert!(
        info.contains(" name=worker-1 ") && info.contains("lib-name=jedis lib-ver=5.1.0"),
        "{info}"
    );
    let mut other = server.client();
    other.send(&support::words("CLIENT ID"));
    assert_ne!(
        other.read_reply(),
        Reply::Integer(id),
        "client ids are unique"
    );
    expect(&mut other, "CLIENT GETNAME", "$-1\r\n");
}

/// HELLO 3 switches the connection to RESP3 (maps, doubles, nulls, verbatim INFO); HELLO 2
/// switches it back, and RESP2 replies are what they were.
#[test]
fn resp3_reply_types() {
    let server = TestServer::default_config();
    let mut c = server.client();
    c.send(&support::words("CLIENT ID"));
    let Reply::Integer(id) = c.read_reply() else {
        panic!("CLIENT ID")
    };
    let hello = |proto: u8| {
        let pairs = [
            ("server", "$5\r\nredis\r\n".to_string()),
            (
                "version",
                format!(
                    "${}\r\n{}\r\n",
                    server::REDIS_VERSION.len(),
                    server::REDIS_VERSION
                ),
            ),
            ("proto", format!(":{proto}\r\n")),
            ("id", format!(":{id}\r\n")),
            ("mode", "$10\r\nstandalone\r\n".into()),
            ("role", "$6\r\nmaster\r\n".into()),
            ("modules", "*0\r\n".into()),
        ];
        let mut s = if proto == 3 {
            "%7\r\n".to_string()
        } else {
            "*14\r\n".to_string()
        };
        for (k, v) in pairs {
            s += &format!("${}\r\n{k}\r\n{v}", k.len());
        }
        s
    };
    // A refused HELLO changes nothing.
    expect(
        &mut c,
        "HELLO 3 SETNAME a\tb",
        "-ERR Client names cannot contain spaces, newlines or special characters.\r\n",
    );
    expect(
        &mut c,
        "HELLO 3 AUTH someone pw",
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n",
    );
    expect(
        &mut c,
        "HELLO 3 AUTH default",
        "-ERR Syntax error in HELLO option 'AUTH'\r\n",
    );
    expect(&mut c, "GET missing", "$-1\r\n");
    expect(&mut c, "HELLO 3 AUTH default anything", &hello(3));
    expect(&mut c, "HELLO", &hello(3));
    expect(&mut c, "GET missing", "_\r\n");
    expect(&mut c, "CLIENT GETNAME", "_\r\n");
    expect(&mut c, "SET k v", "+OK\r\n");
    expect(&mut c, "SET k v NX", "_\r\n");
    expect(&mut c, "MGET k missing", "*2\r\n$1\r\nv\r\n_\r\n");
    expect(&mut c, "HSET h f 1", ":1\r\n");
    expect(&mut c, "HMGET h f g", "*2\r\n$1\r\n1\r\n_\r\n");
    expect(&mut c, "HGET h g", "_\r\n");
    expect(&mut c, "HGETALL h", "%1\r\n$1\r\nf\r\n$1\r\n1\r\n");
    expect(&mut c, "HGETALL missing", "%0\r\n");
    expect(&mut c, "ZADD z 1.5 a inf b", ":2\r\n");
    expect(
        &mut c,
        "ZRANGEBYSCORE z -inf +inf WITHSCORES",
        "*2\r\n*2\r\n$1\r\na\r\n,1.5\r\n*2\r\n$1\r\nb\r\n,inf\r\n",
    );
    expect(
        &mut c,
        "ZRANGEBYSCORE z -inf +inf",
        "*2\r\n$1\r\na\r\n$1\r\nb\r\n",
    );
    expect(
        &mut c,
        "CONFIG GET maxmemory",
        "%1\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n",
    );
    expect(&mut c, "COMMAND INFO nosuch", "*1\r\n_\r\n");
    let info = c.call("INFO server");
    assert!(info.starts_with(b"="), "{}", show(&info));
    let text = info.splitn(2, |&b| b == b'\n').nth(1).unwrap();
    assert!(text.starts_with(b"txt:# Server\r\n"), "{}", show(&info));
    c.send(&support::words("CLIENT INFO"));
    let Reply::Verbatim(format, line) = c.read_reply() else {
        panic!("CLIENT INFO")
    };
    assert_eq!(&format, b"txt");
    assert!(String::from_utf8_lossy(&line).contains(" resp=3 "));
    expect(&mut c, "HELLO 2", &hello(2));
    expect(&mut c, "GET missing", "$-1\r\n");
    expect(&mut c, "HGETALL h", "*2\r\n$1\r\nf\r\n$1\r\n1\r\n");
    expect(
        &mut c,
        "ZRANGEBYSCORE z -inf +inf WITHSCORES",
        "*4\r\n$1\r\na\r\n$3\r\n1.5\r\n$1\r\nb\r\n$3\r\ninf\r\n",
    );
    // The protocol is per connection.
    let mut other = server.client();
    expect(&mut other, "GET missing", "$-1\r\n");
}

/// CLIENT LIST shows every open connection in Redis's line format; CLIENT KILL closes another
/// connection (even an idle one) or, with SKIPME no, the caller after its reply.
#[test]
fn client_list_and_kill() {
    let server = TestServer::default_config();
    let mut a = server.client();
    let mut b = server.client();
    let id_of = |c: &mut support::Client| {
        c.send(&support::words("CLIENT ID"));
        let Reply::Integer(id) = c.read_reply() else {
            panic!("CLIENT ID")
        };
        id
    };
    let (ida, idb) = (id_of(&mut a), id_of(&mut b));
    expect(&mut b, "CLIENT SETNAME bee", "+OK\r\n");
    expect(&mut b, "HELLO 3", &show_hello_prefix(&mut a, idb));
    a.send(&support::words("CLIENT LIST"));
    let Reply::Bulk(list) = a.read_reply() else {
        panic!("CLIENT LIST")
    };
    let list = String::from_utf8(list).unwrap();
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 2, "{list}");
    assert!(list.ends_with('\n'));
    let line_b = lines
        .iter()
        .find(|l| l.starts_with(&format!("id={idb} ")))
        .expect("b listed");
    let keys: Vec<&str> = line_b
        .split(' ')
        .map(|f| f.split('=').next().unwrap())
        .collect();
    let wanted = [
        "id", "addr", "laddr", "fd", "name", "age", "idle", "flags", "db",
    ];
    assert_eq!(keys[..wanted.len()], wanted, "{line_b}");
    for field in [" name=bee ", " cmd=hello ", " resp=3 "] {
        assert!(line_b.contains(field), "{field} in {line_b}");
    }
    let line_a = lines
        .iter()
        .find(|l| l.starts_with(&format!("id={ida} ")))
        .expect("a listed");
    for field in [" cmd=client|list ", " resp=2 "] {
        assert!(line_a.contains(field), "{field} in {line_a}");
    }
    let addr_b = line_b
        .split(' ')
        .find_map(|f| f.strip_prefix("addr="))
        .unwrap()
        .to_string();
    c_list_ids(&mut a, &format!("CLIENT LIST ID {ida} 999999"), &[ida]);
    c_list_ids(&mut a, "CLIENT LIST TYPE normal", &[ida, idb]);
    // b is idle (blocked reading) when a kills it.
    expect(&mut a, &format!("CLIENT KILL ID {idb}"), ":1\r\n");
    assert_eq!(b.read_to_close(), b"");
    expect(&mut a, &format!("CLIENT KILL ID {idb}"), ":0\r\n");
    expect(
        &mut a,
        &format!("CLIENT KILL {addr_b}"),
        "-ERR No such client\r\n",
    );
    let mut c = server.client();
    let idc = id_of(&mut c);
    c_list_ids(&mut a, "CLIENT LIST", &[ida, idc]);
    a.send(&support::words("CLIENT INFO"));
    let Reply::Bulk(info) = a.read_reply() else {
        panic!("CLIENT INFO")
    };
    let info = String::from_utf8(info).unwrap();
    let addr_c = c_addr(&mut c);
    expect(&mut a, &format!("CLIENT KILL {addr_c}"), "+OK\r\n");
    assert_eq!(c.read_to_close(), b"");
    // SKIPME defaults to yes: a connection does not kill itself unless told to.
    let addr_a = info
        .split(' ')
        .find_map(|f| f.strip_prefix("addr="))
        .unwrap();
    expect(&mut a, &format!("CLIENT KILL ADDR {addr_a}"), ":0\r\n");
    expect(
        &mut a,
        &format!("CLIENT KILL ADDR {addr_a} SKIPME no"),
        ":1\r\n",
    );
    assert_eq!(a.read_to_close(), b"");
}

/// The start of HELLO 3's reply, for a connection with this id.
fn show_hello_prefix(_: &mut support::Client, id: i64) -> String {
    let v = server::REDIS_VERSION;
    format!(
        "%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n${}\r\n{v}\r\n$5\r\nproto\r\n:3\r\n\
         $2\r\nid\r\n:{id}\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n\
         $7\r\nmodules\r\n*0\r\n",
        v.len()
    )
}

fn c_addr(c: &mut support::Client) -> String {
    c.send(&support::words("CLIENT INFO"));
    let Reply::Bulk(info) = c.read_reply() else {
        panic!("CLIENT INFO")
    };
    let info = String::from_utf8(info).unwrap();
    info.split(' ')
        .find_map(|f| f.strip_prefix("addr="))
        .unwrap()
        .to_string()
}

/// Checks which ids a CLIENT LIST command lists.
fn c_list_ids(c: &mut support::Client, line: &str, ids: &[i64]) {
    c.send(&support::words(line));
    let Reply::Bulk(list) = c.read_reply() else {
        panic!("{line}")
    };
    let mut listed: Vec<i64> = String::from_utf8(list)
        .unwrap()
        .lines()
        .map(|l| l.split(' ').next().unwrap()["id=".len()..].parse().unwrap())
        .collect();
    listed.sort_unstable();
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    assert_eq!(listed, ids, "{line}");
}

#[test]
fn command_introspection() {
    let server = TestServer::default_config();
    let mut c = server.client();
    c.send(&support::words("COMMAND COUNT"));
    let Reply::Integer(count) = c.read_reply() else {
        panic!("COMMAND COUNT")
    };
    c.send(&support::words("COMMAND"));
    let Reply::Array(entries) = c.read_reply() else {
        panic!("COMMAND")
    };
    assert_eq!(entries.len() as i64, count);
    let mut names = HashSet::new();
    for entry in &entries {
        let Reply::Array(fields) = entry else {
            panic!("entry")
        };
        assert_eq!(fields.len(), 10);
        let Reply::Bulk(name) = &fields[0] else {
            panic!("name")
        };
        assert!(matches!(fields[1], Reply::Integer(_)));
        assert!(
            matches!(&fields[2], Reply::Array(flags) if flags.iter().all(|f| matches!(f, Reply::Simple(_))))
        );
        names.insert(String::from_utf8(name.clone()).unwrap());
    }
    for name in support::COMMANDS {
        assert!(names.contains(*name), "COMMAND lacks {name}");
    }
    expect(
        &mut c,
        "COMMAND INFO get nosuch",
        "*2\r\n*10\r\n$3\r\nget\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n*0\r\n*0\r\n*0\r\n*0\r\n$-1\r\n",
    );
    expect(&mut c, "COMMAND DOCS nosuch", "*0\r\n");
    expect(
        &mut c,
        "COMMAND DOCS ping nosuch",
        "*2\r\n$4\r\nping\r\n*2\r\n$5\r\ngroup\r\n$10\r\nconnection\r\n",
    );
    expect(
        &mut c,
        "COMMAND bogus",
        "-ERR unknown subcommand 'bogus'. Try COMMAND HELP.\r\n",
    );
}

#[test]
fn config_commands() {
    let server = TestServer::start(|c| c.durability = "everysec".into());
    let mut c = server.client();
    expect(&mut c, "CONFIG GET save", "*2\r\n$4\r\nsave\r\n$0\r\n\r\n");
    expect(
        &mut c,
        "CONFIG GET appendonly",
        "*2\r\n$10\r\nappendonly\r\n$3\r\nyes\r\n",
    );
    expect(
        &mut c,
        "CONFIG GET APPENDFSYNC",
        "*2\r\n$11\r\nappendfsync\r\n$8\r\neverysec\r\n",
    );
    expect(&mut c, "CONFIG GET nosuch", "*0\r\n");
    expect(
        &mut c,
        "CONFIG GET maxclients",
        "*2\r\n$10\r\nmaxclients\r\n$5\r\n10000\r\n",
    );
    expect(
        &mut c,
        "CONFIG GET save appendonly",
        "*4\r\n$10\r\nappendonly\r\n$3\r\nyes\r\n$4\r\nsave\r\n$0\r\n\r\n",
    );
    c.send(&support::words("CONFIG GET *"));
    let all = flat_map(c.read_reply());
    assert!(all.len() > 10);
    assert!(
        all.iter()
            .any(|(k, v)| k == b"port" && *v == Reply::bulk(server.addr.port().to_string()))
    );
    c.send(&support::words("CONFIG GET app*"));
    assert_eq!(flat_map(c.read_reply()).len(), 2);
    expect(
        &mut c,
        "CONFIG GET",
        "-ERR wrong number of arguments for 'config|get' command\r\n",
    );
    expect(
        &mut c,
        "CONFIG SET save",
        "-ERR wrong number of arguments for 'config|set' command\r\n",
    );
    expect(
        &mut c,
        "CONFIG SET nosuch 1",
        "-ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'\r\n",
    );
    expect(&mut c, "CONFIG SET appendonly yes", "+OK\r\n");
    expect(
        &mut c,
        "CONFIG SET appendonly no",
        "-ERR CONFIG SET failed (possibly related to argument 'appendonly') - kavach cannot change it while running\r\n",
    );
    assert_eq!(c.call_args(&[b"CONFIG", b"SET", b"save", b""]), b"+OK\r\n");
    expect(&mut c, "CONFIG RESETSTAT", "+OK\r\n");
    expect(
        &mut c,
        "CONFIG REWRITE",
        "-ERR The server is running without a config file\r\n",
    );
    expect(
        &mut c,
        "CONFIG bogus",
        "-ERR unknown subcommand 'bogus'. Try CONFIG HELP.\r\n",
    );
}

/// Parses INFO text into (section title, lines).
fn info_sections(text: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut sections: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for line in text.split("\r\n") {
        if let Some(title) = line.strip_prefix("# ") {
            sections.push((title.to_string(), Vec::new()));
        } else if let Some((k, v)) = line.split_once(':') {
            sections
                .last_mut()
                .expect("line before a section")
                .1
                .push((k.into(), v.into()));
        } else {
            assert!(line.is_empty(), "stray INFO line {line:?}");
        }
    }
    sections
}

fn info(c: &mut support::Client, line: &str) -> Vec<(String, Vec<(String, String)>)> {
    c.send(&support::words(line));
    let Reply::Bulk(text) = c.read_reply() else {
        panic!("INFO is a bulk string")
    };
    let text = String::from_utf8(text).unwrap();
    assert!(text.is_empty() || text.ends_with("\r\n"));
    info_sections(&text)
}

fn field<'a>(sections: &'a [(String, Vec<(String, String)>)], name: &str) -> &'a str {
    sections
        .iter()
        .flat_map(|(_, lines)| lines)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("INFO lacks {name}"))
}

#[test]
fn info_sections_and_counters() {
    let server = TestServer::start(|c| c.durability = "always".into());
    let mut c = server.client();
    expect(&mut c, "SET a 1", "+OK\r\n");
    let all = info(&mut c, "INFO");
    let titles: Vec<&str> = all.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        titles,
        [
            "Server",
            "Clients",
            "Memory",
            "Persistence",
            "Stats",
            "Replication",
            "CPU",
            "Cluster",
            "Integrity",
            "Keyspace"
        ]
    );
    assert_eq!(field(&all, "redis_version"), "7.0.0");
    assert_eq!(field(&all, "kavach_version"), env!("CARGO_PKG_VERSION"));
    assert_eq!(field(&all, "tcp_port"), server.addr.port().to_string());
    assert_eq!(field(&all, "connected_clients"), "1");
    assert_eq!(field(&all, "total_connections_received"), "1");
    assert_eq!(
        field(&all, "total_commands_processed"),
        "1",
        "INFO itself counts after"
    );
    assert_eq!(field(&all, "rejected_connections"), "0");
    assert_eq!(field(&all, "durability"), "always");
    assert_eq!(
        field(&all, "checkpoints"),
        "0",
        "backend lines are merged into Persistence"
    );
    assert_eq!(field(&all, "scrub_errors"), "0");
    assert_eq!(field(&all, "db0"), "keys=1,expires=0,avg_ttl=0");
    assert_eq!(field(&all, "role"), "master");
    assert!(field(&all, "total_net_input_bytes").parse::<u64>().unwrap() > 0);
    for key in [
        "uptime_in_seconds",
        "instantaneous_ops_per_sec",
        "total_net_output_bytes",
        "process_id",
    ] {
        field(&all, key).parse::<u64>().unwrap();
    }

    let some = info(&mut c, "INFO server KEYSPACE");
    let titles: Vec<&str> = some.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(titles, ["Server", "Keyspace"]);
    let persistence = info(&mut c, "INFO persistence");
    assert_eq!(persistence.len(), 1);
    assert_eq!(info(&mut c, "INFO everything").len(), 10);
    assert_eq!(info(&mut c, "INFO nosuch").len(), 0);
    expect(&mut c, "INFO nosuch", "$0\r\n\r\n");

    let mut second = server.client();
    expect(&mut second, "PING", "+PONG\r\n");
    let stats = info(&mut c, "INFO stats clients");
    assert_eq!(field(&stats, "connected_clients"), "2");
    assert_eq!(field(&stats, "total_connections_received"), "2");
    drop(second);
    expect(&mut c, "CONFIG RESETSTAT", "+OK\r\n");
    let stats = info(&mut c, "INFO stats");
    assert_eq!(field(&stats, "total_commands_processed"), "1");
    assert_eq!(field(&stats, "total_connections_received"), "0");
}
