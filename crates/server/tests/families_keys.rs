//! The keys, strings and hashes families over TCP on the reference backend's keyspace: each
//! command's replies, errors and arity as Redis 7.0 gives them (every expectation here was read
//! from a real Redis 7.0.15), in RESP2 and, where the reply type differs, RESP3.

mod support;

use std::collections::HashSet;

use server::resp::Reply;
use support::{Client, TestServer, expect, show};

const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

/// Switches a connection to RESP3.
fn resp3(c: &mut Client) {
    c.send(&support::words("HELLO 3"));
    assert!(matches!(c.read_reply(), Reply::Map(_)));
}

fn arity(c: &mut Client, line: &str, name: &str) {
    expect(
        c,
        line,
        &format!("-ERR wrong number of arguments for '{name}' command\r\n"),
    );
}

/// Asserts that `key` has a deadline about `secs` seconds away (TTL rounds to the nearest
/// second; the slack only matters if the test stalls for seconds between two commands).
#[track_caller]
fn ttl_near(c: &mut Client, key: &str, secs: i64) {
    let Reply::Integer(n) = reply(c, &format!("TTL {key}")) else {
        panic!("TTL {key}")
    };
    assert!(
        (secs - 10..=secs).contains(&n),
        "TTL {key} is {n}, want about {secs}"
    );
}

/// Sends a command and returns the reply parsed.
fn reply(c: &mut Client, line: &str) -> Reply {
    c.send(&support::words(line));
    c.read_reply()
}

/// A bulk reply's bytes.
fn bytes(r: &Reply) -> Vec<u8> {
    match r {
        Reply::Bulk(b) => b.clone(),
        other => panic!("not a bulk: {other:?}"),
    }
}

fn bulks(items: &[&str]) -> Reply {
    Reply::Array(items.iter().map(Reply::bulk).collect())
}

// ---------------------------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------------------------

#[test]
fn del_unlink_exists_touch_type() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "MSET a 1 b 2", "+OK\r\n");
    expect(&mut c, "HSET h f v", ":1\r\n");
    expect(&mut c, "EXISTS a a nokey h", ":3\r\n");
    expect(&mut c, "TOUCH a a nokey", ":2\r\n");
    expect(&mut c, "TYPE a", "+string\r\n");
    expect(&mut c, "TYPE h", "+hash\r\n");
    expect(&mut c, "TYPE nokey", "+none\r\n");
    // A key named twice is deleted once.
    expect(&mut c, "DEL a a nokey", ":1\r\n");
    expect(&mut c, "UNLINK b h", ":2\r\n");
    expect(&mut c, "EXISTS a b h", ":0\r\n");
    arity(&mut c, "DEL", "del");
    arity(&mut c, "UNLINK", "unlink");
    arity(&mut c, "TOUCH", "touch");
    arity(&mut c, "TYPE a b", "type");
}

#[test]
fn rename_and_renamenx() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "RENAME nokey x", "-ERR no such key\r\n");
    expect(&mut c, "RENAMENX nokey x", "-ERR no such key\r\n");
    expect(&mut c, "SET a 1", "+OK\r\n");
    expect(&mut c, "RENAME a a", "+OK\r\n");
    expect(&mut c, "RENAMENX a a", ":0\r\n");
    expect(&mut c, "EXPIRE a 100", ":1\r\n");
    expect(&mut c, "RENAME a b", "+OK\r\n");
    expect(&mut c, "EXISTS a", ":0\r\n");
    expect(&mut c, "GET b", "$1\r\n1\r\n");
    // The deadline moves with the value.
    ttl_near(&mut c, "b", 100);
    expect(&mut c, "HSET h f v", ":1\r\n");
    expect(&mut c, "RENAMENX b h", ":0\r\n");
    expect(&mut c, "RENAMENX b c", ":1\r\n");
    // RENAME replaces a key of another kind.
    expect(&mut c, "RENAME c h", "+OK\r\n");
    expect(&mut c, "TYPE h", "+string\r\n");
    ttl_near(&mut c, "h", 100);
}

#[test]
fn copy_between_keys_and_databases() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "COPY nokey x", ":0\r\n");
    expect(&mut c, "SET e v", "+OK\r\n");
    expect(&mut c, "EXPIRE e 100", ":1\r\n");
    expect(
        &mut c,
        "COPY e e",
        "-ERR source and destination objects are the same\r\n",
    );
    expect(
        &mut c,
        "COPY e e DB 0",
        "-ERR source and destination objects are the same\r\n",
    );
    expect(&mut c, "COPY e f", ":1\r\n");
    ttl_near(&mut c, "f", 100);
    expect(&mut c, "COPY e f", ":0\r\n");
    expect(&mut c, "COPY e f REPLACE", ":1\r\n");
    expect(&mut c, "COPY e f DB", "-ERR syntax error\r\n");
    expect(&mut c, "COPY e f foo", "-ERR syntax error\r\n");
    expect(
        &mut c,
        "COPY e f DB x",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(
        &mut c,
        "COPY e f DB 16",
        "-ERR DB index is out of range\r\n",
    );
    expect(
        &mut c,
        "COPY e f DB -1",
        "-ERR DB index is out of range\r\n",
    );
    expect(
        &mut c,
        "COPY e f DB 4294967296",
        "-ERR value is out of range, value must between -2147483648 and 2147483647\r\n",
    );
    expect(&mut c, "COPY e e DB 1", ":1\r\n");
    expect(&mut c, "SELECT 1", "+OK\r\n");
    expect(&mut c, "GET e", "$1\r\nv\r\n");
    ttl_near(&mut c, "e", 100);
    expect(&mut c, "DBSIZE", ":1\r\n");
}

#[test]
fn move_and_swapdb() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "SET e v", "+OK\r\n");
    expect(
        &mut c,
        "MOVE e 0",
        "-ERR source and destination objects are the same\r\n",
    );
    expect(
        &mut c,
        "MOVE e x",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(&mut c, "MOVE e 16", "-ERR DB index is out of range\r\n");
    expect(
        &mut c,
        "MOVE e 4294967296",
        "-ERR value is out of range, value must between -2147483648 and 2147483647\r\n",
    );
    expect(&mut c, "MOVE nokey 1", ":0\r\n");
    expect(&mut c, "MOVE e 1", ":1\r\n");
    expect(&mut c, "EXISTS e", ":0\r\n");
    expect(&mut c, "SET e here", "+OK\r\n");
    // Present in the destination: nothing moves.
    expect(&mut c, "MOVE e 1", ":0\r\n");
    expect(&mut c, "GET e", "$4\r\nhere\r\n");
    expect(&mut c, "SWAPDB 0 1", "+OK\r\n");
    expect(&mut c, "GET e", "$1\r\nv\r\n");
    expect(&mut c, "SWAPDB 1 0", "+OK\r\n");
    expect(&mut c, "GET e", "$4\r\nhere\r\n");
    expect(&mut c, "SWAPDB 0 0", "+OK\r\n");
    expect(&mut c, "SWAPDB x 1", "-ERR invalid first DB index\r\n");
    expect(&mut c, "SWAPDB 0 x", "-ERR invalid second DB index\r\n");
    expect(
        &mut c,
        "SWAPDB 4294967296 0",
        "-ERR invalid first DB index\r\n",
    );
    expect(&mut c, "SWAPDB 0 16", "-ERR DB index is out of range\r\n");
    expect(&mut c, "SWAPDB -1 0", "-ERR DB index is out of range\r\n");
    arity(&mut c, "SWAPDB 0", "swapdb");
    arity(&mut c, "MOVE e", "move");
}

/// The commands that used to ignore SELECT now work on the selected database.
#[test]
fn databases_are_separate() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "SET k zero", "+OK\r\n");
    expect(&mut c, "HSET h f zero", ":1\r\n");
    expect(&mut c, "SELECT 3", "+OK\r\n");
    expect(&mut c, "GET k", "$-1\r\n");
    expect(&mut c, "HGET h f", "$-1\r\n");
    expect(&mut c, "EXISTS k h", ":0\r\n");
    expect(&mut c, "DBSIZE", ":0\r\n");
    expect(&mut c, "SET k three", "+OK\r\n");
    expect(&mut c, "KEYS *", "*1\r\n$1\r\nk\r\n");
    expect(&mut c, "FLUSHDB", "+OK\r\n");
    expect(&mut c, "DBSIZE", ":0\r\n");
    expect(&mut c, "SELECT 0", "+OK\r\n");
    expect(&mut c, "GET k", "$4\r\nzero\r\n");
    expect(&mut c, "DBSIZE", ":2\r\n");
    // Another connection starts in database 0.
    let mut other = server.client();
    expect(&mut other, "GET k", "$4\r\nzero\r\n");
    expect(&mut c, "SELECT 5", "+OK\r\n");
    expect(&mut c, "SET k five", "+OK\r\n");
    expect(&mut other, "FLUSHALL", "+OK\r\n");
    expect(&mut c, "DBSIZE", ":0\r\n");
}

#[test]
fn flush_and_dbsize() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "MSET a 1 b 2", "+OK\r\n");
    expect(&mut c, "DBSIZE", ":2\r\n");
    expect(&mut c, "FLUSHDB x", "-ERR syntax error\r\n");
    expect(&mut c, "FLUSHDB ASYNC x", "-ERR syntax error\r\n");
    expect(&mut c, "FLUSHALL x y", "-ERR syntax error\r\n");
    expect(&mut c, "DBSIZE", ":2\r\n");
    expect(&mut c, "FLUSHDB async", "+OK\r\n");
    expect(&mut c, "DBSIZE", ":0\r\n");
    expect(&mut c, "SET a 1", "+OK\r\n");
    expect(&mut c, "FLUSHDB SYNC", "+OK\r\n");
    expect(&mut c, "DBSIZE", ":0\r\n");
    arity(&mut c, "DBSIZE x", "dbsize");
}

#[test]
fn expire_conditions_and_deadlines() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "EXPIRE nokey 10", ":0\r\n");
    expect(&mut c, "SET k v", "+OK\r\n");
    expect(&mut c, "TTL k", ":-1\r\n");
    expect(&mut c, "PTTL k", ":-1\r\n");
    expect(&mut c, "EXPIRE k 100 XX", ":0\r\n");
    expect(&mut c, "EXPIRE k 100 GT", ":0\r\n");
    expect(&mut c, "EXPIRE k 100 NX", ":1\r\n");
    ttl_near(&mut c, "k", 100);
    expect(&mut c, "EXPIRE k 200 NX", ":0\r\n");
    expect(&mut c, "EXPIRE k 200 XX", ":1\r\n");
    expect(&mut c, "EXPIRE k 100 GT", ":0\r\n");
    expect(&mut c, "EXPIRE k 300 gt", ":1\r\n");
    expect(&mut c, "EXPIRE k 400 LT", ":0\r\n");
    expect(&mut c, "EXPIRE k 50 lt", ":1\r\n");
    ttl_near(&mut c, "k", 50);
    expect(&mut c, "PERSIST k", ":1\r\n");
    expect(&mut c, "PERSIST k", ":0\r\n");
    expect(&mut c, "PERSIST nokey", ":0\r\n");
    // A key with no deadline counts as infinite: LT applies, GT does not.
    expect(&mut c, "EXPIRE k 10 GT", ":0\r\n");
    expect(&mut c, "EXPIRE k 10 LT", ":1\r\n");
    expect(&mut c, "PEXPIRE k 100000000", ":1\r\n");
    ttl_near(&mut c, "k", 100000);
    let errors = [
        (
            "EXPIRE k 1 NX XX",
            "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n",
        ),
        (
            "EXPIRE k 1 NX GT",
            "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n",
        ),
        (
            "EXPIRE k 1 GT LT",
            "-ERR GT and LT options at the same time are not compatible\r\n",
        ),
        ("EXPIRE k 1 foo", "-ERR Unsupported option foo\r\n"),
        // The options are read before the time.
        ("EXPIRE k x foo", "-ERR Unsupported option foo\r\n"),
        (
            "EXPIRE k x",
            "-ERR value is not an integer or out of range\r\n",
        ),
        (
            "EXPIRE k 9223372036854775807",
            "-ERR invalid expire time in 'expire' command\r\n",
        ),
        (
            "EXPIRE k -9223372036854775808",
            "-ERR invalid expire time in 'expire' command\r\n",
        ),
        (
            "PEXPIRE k 9223372036854775807",
            "-ERR invalid expire time in 'pexpire' command\r\n",
        ),
        (
            "EXPIREAT k 9223372036854775807",
            "-ERR invalid expire time in 'expireat' command\r\n",
        ),
    ];
    for (line, want) in errors {
        expect(&mut c, line, want);
    }
    // The errors changed nothing.
    ttl_near(&mut c, "k", 100000);
    // A deadline that is not in the future deletes the key.
    for line in [
        "EXPIRE k -1",
        "EXPIRE k 0",
        "PEXPIRE k 0",
        "EXPIREAT k 1",
        "PEXPIREAT k 0",
    ] {
        expect(&mut c, "SET k v", "+OK\r\n");
        expect(&mut c, line, ":1\r\n");
        expect(&mut c, "EXISTS k", ":0\r\n");
    }
    expect(&mut c, "SET k v", "+OK\r\n");
    expect(&mut c, "EXPIREAT k 4102444800", ":1\r\n");
    expect(&mut c, "EXPIRETIME k", ":4102444800\r\n");
    expect(&mut c, "PEXPIRETIME k", ":4102444800000\r\n");
    expect(&mut c, "PEXPIREAT k 4102444800999", ":1\r\n");
    expect(&mut c, "EXPIRETIME k", ":4102444800\r\n");
    expect(&mut c, "PEXPIRETIME k", ":4102444800999\r\n");
    expect(&mut c, "SET p v", "+OK\r\n");
    expect(&mut c, "EXPIRETIME p", ":-1\r\n");
    expect(&mut c, "PEXPIRETIME p", ":-1\r\n");
    for cmd in ["TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME"] {
        expect(&mut c, &format!("{cmd} nokey"), ":-2\r\n");
    }
    arity(&mut c, "EXPIRE k", "expire");
    arity(&mut c, "PEXPIREAT k", "pexpireat");
}

#[test]
fn expired_keys_vanish() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "SET gone v", "+OK\r\n");
    expect(&mut c, "PEXPIRE gone 1", ":1\r\n");
    expect(&mut c, "HSET hgone f v", ":1\r\n");
    expect(&mut c, "PEXPIRE hgone 1", ":1\r\n");
    let deadline = std::time::Instant::now() + support::IO_TIMEOUT;
    while c.call("EXISTS gone hgone") != b":0\r\n" {
        assert!(std::time::Instant::now() < deadline, "keys never expired");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    expect(&mut c, "GET gone", "$-1\r\n");
    expect(&mut c, "TTL hgone", ":-2\r\n");
    expect(&mut c, "HLEN hgone", ":0\r\n");
    expect(&mut c, "KEYS *", "*0\r\n");
}

#[test]
fn keys_scan_and_randomkey() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "RANDOMKEY", "$-1\r\n");
    expect(&mut c, "KEYS *", "*0\r\n");
    expect(&mut c, "SCAN 0", "*2\r\n$1\r\n0\r\n*0\r\n");
    let mut names = Vec::new();
    for i in 0..30 {
        names.push(format!("key:{i}"));
        expect(&mut c, &format!("SET key:{i} v"), "+OK\r\n");
    }
    expect(&mut c, "HSET other f v", ":1\r\n");
    let sorted = |r: Reply| -> Vec<Vec<u8>> {
        let Reply::Array(items) = r else {
            panic!("not an array: {r:?}")
        };
        let mut keys: Vec<Vec<u8>> = items
            .into_iter()
            .map(|k| match k {
                Reply::Bulk(b) => b,
                other => panic!("not a bulk: {other:?}"),
            })
            .collect();
        keys.sort();
        keys
    };
    let got = sorted(reply(&mut c, "KEYS key:*"));
    let mut want: Vec<Vec<u8>> = names.iter().map(|n| n.clone().into_bytes()).collect();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(
        sorted(reply(&mut c, "KEYS key:1?")),
        (10..20)
            .map(|i| format!("key:{i}").into_bytes())
            .collect::<Vec<_>>()
    );
    assert_eq!(sorted(reply(&mut c, "KEYS o[a-z]her")), [b"other".to_vec()]);
    let Reply::Bulk(random) = reply(&mut c, "RANDOMKEY") else {
        panic!("RANDOMKEY")
    };
    assert!(random == b"other" || random.starts_with(b"key:"));
    // SCAN walks every key exactly as the keyspace orders them, COUNT at a time.
    let scan_all = |c: &mut Client, extra: &str| {
        let mut cursor = "0".to_string();
        let mut seen = Vec::new();
        for _ in 0..1000 {
            let Reply::Array(parts) = reply(c, &format!("SCAN {cursor} {extra}")) else {
                panic!("scan reply")
            };
            let [Reply::Bulk(next), Reply::Array(keys)] = parts.as_slice() else {
                panic!("scan shape {parts:?}")
            };
            seen.extend(keys.iter().cloned());
            cursor = String::from_utf8(next.clone()).unwrap();
            if cursor == "0" {
                return seen;
            }
        }
        panic!("scan did not end")
    };
    assert_eq!(scan_all(&mut c, "COUNT 7").len(), 31);
    assert_eq!(scan_all(&mut c, "TYPE HASH"), [Reply::bulk("other")]);
    assert_eq!(scan_all(&mut c, "MATCH key:2* COUNT 3").len(), 11);
    assert!(scan_all(&mut c, "TYPE bogus").is_empty());
    for (line, want) in [
        ("SCAN x", "-ERR invalid cursor\r\n"),
        ("SCAN 18446744073709551616", "-ERR invalid cursor\r\n"),
        ("SCAN 0 COUNT 0", "-ERR syntax error\r\n"),
        ("SCAN 0 COUNT -1", "-ERR syntax error\r\n"),
        (
            "SCAN 0 COUNT x",
            "-ERR value is not an integer or out of range\r\n",
        ),
        ("SCAN 0 MATCH", "-ERR syntax error\r\n"),
        ("SCAN 0 TYPE", "-ERR syntax error\r\n"),
        ("SCAN 0 bogus 1", "-ERR syntax error\r\n"),
    ] {
        expect(&mut c, line, want);
    }
    // strtoul's grammar: a sign is accepted and "-1" wraps to the largest cursor.
    expect(
        &mut c,
        "SCAN 18446744073709551615",
        "*2\r\n$1\r\n0\r\n*0\r\n",
    );
    expect(&mut c, "SCAN -1", "*2\r\n$1\r\n0\r\n*0\r\n");
    c.send(&support::words("SCAN +0 COUNT 1000"));
    let Reply::Array(parts) = c.read_reply() else {
        panic!("SCAN +0")
    };
    assert_eq!(parts[0], Reply::bulk("0"));
    // RESP3 replies are the same arrays; a missing RANDOMKEY is the RESP3 null.
    resp3(&mut c);
    assert_eq!(sorted(reply(&mut c, "KEYS o*")), [b"other".to_vec()]);
    expect(&mut c, "FLUSHALL", "+OK\r\n");
    expect(&mut c, "RANDOMKEY", "_\r\n");
    expect(&mut c, "SCAN 0", "*2\r\n$1\r\n0\r\n*0\r\n");
}

#[test]
fn object_subcommands() {
    let server = TestServer::default_config();
    let mut c = server.client();
    for (set, encoding, refcount) in [
        ("SET n 100", "int", ":2147483647\r\n"),
        ("SET n 10000", "int", ":1\r\n"),
        ("SET n -1", "int", ":1\r\n"),
        ("SET n 012", "embstr", ":1\r\n"),
        ("SET n 1.5", "embstr", ":1\r\n"),
        ("SET n 12345678901234567890", "embstr", ":1\r\n"),
        (
            "SET n 12345678901234567890123456789012345678901234",
            "embstr",
            ":1\r\n",
        ),
        (
            "SET n 123456789012345678901234567890123456789012345",
            "raw",
            ":1\r\n",
        ),
    ] {
        expect(&mut c, set, "+OK\r\n");
        expect(
            &mut c,
            "OBJECT ENCODING n",
            &format!("${}\r\n{encoding}\r\n", encoding.len()),
        );
        expect(&mut c, "OBJECT REFCOUNT n", refcount);
    }
    expect(&mut c, "HSET h f v", ":1\r\n");
    expect(&mut c, "OBJECT ENCODING h", "$8\r\nlistpack\r\n");
    let long = "x".repeat(65);
    expect(&mut c, &format!("HSET h g {long}"), ":1\r\n");
    expect(&mut c, "OBJECT ENCODING h", "$9\r\nhashtable\r\n");
    expect(&mut c, "OBJECT IDLETIME h", ":0\r\n");
    expect(
        &mut c,
        "OBJECT FREQ h",
        "-ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please \
         note that when switching between policies at runtime LRU and LFU data will take some \
         time to adjust.\r\n",
    );
    for sub in ["ENCODING", "FREQ", "IDLETIME", "REFCOUNT"] {
        expect(&mut c, &format!("OBJECT {sub} nokey"), "$-1\r\n");
    }
    c.send(&support::words("OBJECT HELP"));
    let Reply::Array(lines) = c.read_reply() else {
        panic!("OBJECT HELP")
    };
    assert_eq!(lines.len(), 15);
    assert_eq!(
        lines[0],
        Reply::simple("OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:")
    );
    arity(&mut c, "OBJECT", "object");
    arity(&mut c, "OBJECT ENCODING", "object|encoding");
    arity(&mut c, "OBJECT encoding a b", "object|encoding");
    arity(&mut c, "OBJECT HELP x", "object|help");
    expect(
        &mut c,
        "OBJECT foo bar",
        "-ERR unknown subcommand 'foo'. Try OBJECT HELP.\r\n",
    );
    resp3(&mut c);
    expect(&mut c, "OBJECT ENCODING nokey", "_\r\n");
}

// ---------------------------------------------------------------------------------------------
// Strings
// ---------------------------------------------------------------------------------------------

#[test]
fn set_options() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "SET k v", "+OK\r\n");
    expect(&mut c, "SET k v2 NX", "$-1\r\n");
    expect(&mut c, "SET k v2 XX GET", "$1\r\nv\r\n");
    // With GET, a refused NX still replies the old value.
    expect(&mut c, "SET k v3 GET NX", "$2\r\nv2\r\n");
    expect(&mut c, "GET k", "$2\r\nv2\r\n");
    expect(&mut c, "SET fresh v GET", "$-1\r\n");
    expect(&mut c, "GET fresh", "$1\r\nv\r\n");
    // Options may repeat; only conflicting ones are refused.
    expect(&mut c, "SET k v GET GET", "$2\r\nv2\r\n");
    expect(&mut c, "SET k v EX 1 EX 200", "+OK\r\n");
    ttl_near(&mut c, "k", 200);
    expect(&mut c, "SET k v2 KEEPTTL", "+OK\r\n");
    ttl_near(&mut c, "k", 200);
    expect(&mut c, "SET k v2", "+OK\r\n");
    expect(&mut c, "TTL k", ":-1\r\n");
    expect(&mut c, "SET k v PX 300000", "+OK\r\n");
    ttl_near(&mut c, "k", 300);
    expect(&mut c, "SET k v EXAT 4102444800", "+OK\r\n");
    expect(&mut c, "EXPIRETIME k", ":4102444800\r\n");
    expect(&mut c, "SET k v PXAT 4102444800123", "+OK\r\n");
    expect(&mut c, "PEXPIRETIME k", ":4102444800123\r\n");
    // A deadline in the past leaves no key.
    expect(&mut c, "SET k v EXAT 1", "+OK\r\n");
    expect(&mut c, "GET k", "$-1\r\n");
    for (line, want) in [
        ("SET k v EX 1 PX 2", "-ERR syntax error\r\n"),
        ("SET k v KEEPTTL EX 1", "-ERR syntax error\r\n"),
        ("SET k v EX 10 KEEPTTL", "-ERR syntax error\r\n"),
        ("SET k v NX XX", "-ERR syntax error\r\n"),
        ("SET k v PERSIST", "-ERR syntax error\r\n"),
        ("SET k v EX", "-ERR syntax error\r\n"),
        // Syntax first, then the time.
        ("SET k v EX x NX XX", "-ERR syntax error\r\n"),
        (
            "SET k v EX x",
            "-ERR value is not an integer or out of range\r\n",
        ),
        (
            "SET k v EX 0",
            "-ERR invalid expire time in 'set' command\r\n",
        ),
        (
            "SET k v PXAT -5",
            "-ERR invalid expire time in 'set' command\r\n",
        ),
        (
            "SET k v PX 9223372036854775807",
            "-ERR invalid expire time in 'set' command\r\n",
        ),
        (
            "SET k v EX 9223372036854775",
            "-ERR invalid expire time in 'set' command\r\n",
        ),
    ] {
        expect(&mut c, line, want);
    }
    expect(&mut c, "HSET h f v", ":1\r\n");
    expect(&mut c, "SET h x GET", WRONGTYPE);
    expect(&mut c, "TYPE h", "+hash\r\n");
    // Without GET, SET replaces a key of any kind.
    expect(&mut c, "SET h x", "+OK\r\n");
    expect(&mut c, "GET h", "$1\r\nx\r\n");
    expect(&mut c, "HSET h2 f v", ":1\r\n");
    expect(&mut c, "GET h2", WRONGTYPE);
    arity(&mut c, "SET k", "set");
    arity(&mut c, "GET", "get");
    resp3(&mut c);
    expect(&mut c, "SET k v NX", "+OK\r\n");
    expect(&mut c, "SET k v NX", "_\r\n");
    expect(&mut c, "SET n v GET", "_\r\n");
    expect(&mut c, "GET missing", "_\r\n");
}

#[test]
fn getset_getdel_getex() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "GETSET k a", "$-1\r\n");
    expect(&mut c, "EXPIRE k 100", ":1\r\n");
    expect(&mut c, "GETSET k b", "$1\r\na\r\n");
    expect(&mut c, "TTL k", ":-1\r\n");
    expect(&mut c, "GETDEL nokey", "$-1\r\n");
    expect(&mut c, "GETDEL k", "$1\r\nb\r\n");
    expect(&mut c, "EXISTS k", ":0\r\n");
    expect(&mut c, "HSET h f v", ":1\r\n");
    expect(&mut c, "GETSET h x", WRONGTYPE);
    expect(&mut c, "GETDEL h", WRONGTYPE);
    expect(&mut c, "GETEX h", WRONGTYPE);
    expect(&mut c, "GETEX nokey EX 10", "$-1\r\n");
    // GETEX reads the time only once it found a string.
    expect(&mut c, "GETEX nokey EX 0", "$-1\r\n");
    expect(&mut c, "GETEX nokey PX x", "$-1\r\n");
    expect(&mut c, "GETEX h EX 0", WRONGTYPE);
    expect(&mut c, "GETEX nokey EX 1 PX 1", "-ERR syntax error\r\n");
    expect(&mut c, "SET k v", "+OK\r\n");
    expect(&mut c, "GETEX k", "$1\r\nv\r\n");
    expect(&mut c, "TTL k", ":-1\r\n");
    expect(&mut c, "GETEX k EX 100", "$1\r\nv\r\n");
    ttl_near(&mut c, "k", 100);
    expect(&mut c, "GETEX k PX 200000", "$1\r\nv\r\n");
    ttl_near(&mut c, "k", 200);
    expect(&mut c, "GETEX k EXAT 4102444800", "$1\r\nv\r\n");
    expect(&mut c, "EXPIRETIME k", ":4102444800\r\n");
    expect(&mut c, "GETEX k PERSIST", "$1\r\nv\r\n");
    expect(&mut c, "TTL k", ":-1\r\n");
    for (line, want) in [
        ("GETEX k PERSIST EX 1", "-ERR syntax error\r\n"),
        ("GETEX k NX", "-ERR syntax error\r\n"),
        ("GETEX k KEEPTTL", "-ERR syntax error\r\n"),
        ("GETEX k EX 1 PX 1", "-ERR syntax error\r\n"),
        (
            "GETEX k EX 0",
            "-ERR invalid expire time in 'getex' command\r\n",
        ),
    ] {
        expect(&mut c, line, want);
    }
    expect(&mut c, "GETEX k EXAT 1", "$1\r\nv\r\n");
    expect(&mut c, "EXISTS k", ":0\r\n");
    resp3(&mut c);
    expect(&mut c, "GETDEL nokey", "_\r\n");
    expect(&mut c, "GETSET k a", "_\r\n");
    expect(&mut c, "GETEX nokey", "_\r\n");
}

#[test]
fn setnx_setex_psetex() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "SETNX k a", ":1\r\n");
    expect(&mut c, "SETNX k b", ":0\r\n");
    expect(&mut c, "HSET h f v", ":1\r\n");
    expect(&mut c, "SETNX h b", ":0\r\n");
    expect(&mut c, "SETEX k 100 v", "+OK\r\n");
    ttl_near(&mut c, "k", 100);
    expect(&mut c, "GET k", "$1\r\nv\r\n");
    expect(&mut c, "PSETEX k 200000 w", "+OK\r\n");
    ttl_near(&mut c, "k", 200);
    expect(
        &mut c,
        "SETEX k 0 v",
        "-ERR invalid expire time in 'setex' command\r\n",
    );
    expect(
        &mut c,
        "SETEX k -1 v",
        "-ERR invalid expire time in 'setex' command\r\n",
    );
    expect(
        &mut c,
        "PSETEX k 0 v",
        "-ERR invalid expire time in 'psetex' command\r\n",
    );
    expect(
        &mut c,
        "SETEX k x v",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(&mut c, "SETEX h 10 v", "+OK\r\n");
    expect(&mut c, "TYPE h", "+string\r\n");
    arity(&mut c, "SETEX k 10", "setex");
    arity(&mut c, "SETNX k", "setnx");
}

#[test]
fn mget_mset_msetnx() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "MSET a 1 b 2 a 3", "+OK\r\n");
    expect(&mut c, "HSET h f v", ":1\r\n");
    expect(
        &mut c,
        "MGET a b nokey h",
        "*4\r\n$1\r\n3\r\n$1\r\n2\r\n$-1\r\n$-1\r\n",
    );
    expect(&mut c, "MSETNX a 1 c 2", ":0\r\n");
    expect(&mut c, "EXISTS c", ":0\r\n");
    expect(&mut c, "MSETNX h 1 c 2", ":0\r\n");
    expect(&mut c, "MSETNX c 1 d 2", ":1\r\n");
    expect(&mut c, "MGET c d", "*2\r\n$1\r\n1\r\n$1\r\n2\r\n");
    expect(&mut c, "EXPIRE c 100", ":1\r\n");
    expect(&mut c, "MSET c 9", "+OK\r\n");
    expect(&mut c, "TTL c", ":-1\r\n");
    arity(&mut c, "MSET a", "mset");
    arity(&mut c, "MSET a 1 b", "mset");
    arity(&mut c, "MSETNX a", "msetnx");
    arity(&mut c, "MSETNX a 1 b", "msetnx");
    arity(&mut c, "MGET", "mget");
    resp3(&mut c);
    expect(&mut c, "MGET c nokey", "*2\r\n$1\r\n9\r\n_\r\n");
}

#[test]
fn integer_counters() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "INCR n", ":1\r\n");
    expect(&mut c, "INCRBY n -10", ":-9\r\n");
    expect(&mut c, "DECR n", ":-10\r\n");
    expect(&mut c, "DECRBY n -15", ":5\r\n");
    expect(&mut c, "EXPIRE n 100", ":1\r\n");
    expect(&mut c, "INCR n", ":6\r\n");
    ttl_near(&mut c, "n", 100);
    expect(
        &mut c,
        "DECRBY n -9223372036854775808",
        "-ERR decrement would overflow\r\n",
    );
    expect(&mut c, "SET big 9223372036854775807", "+OK\r\n");
    expect(
        &mut c,
        "INCR big",
        "-ERR increment or decrement would overflow\r\n",
    );
    expect(
        &mut c,
        "DECRBY big -1",
        "-ERR increment or decrement would overflow\r\n",
    );
    expect(&mut c, "SET small -9223372036854775808", "+OK\r\n");
    expect(
        &mut c,
        "DECR small",
        "-ERR increment or decrement would overflow\r\n",
    );
    expect(&mut c, "INCRBY small 9223372036854775807", ":-1\r\n");
    for value in ["01", "-0", "+1", "1.0", "abc", "9223372036854775808"] {
        expect(&mut c, &format!("SET s {value}"), "+OK\r\n");
        expect(
            &mut c,
            "INCR s",
            "-ERR value is not an integer or out of range\r\n",
        );
    }
    assert_eq!(c.call_args(&[b"SET", b"s", b" 1"]), b"+OK\r\n");
    expect(
        &mut c,
        "INCR s",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(
        &mut c,
        "INCRBY n 1.5",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(&mut c, "HSET h f 1", ":1\r\n");
    for line in ["INCR h", "DECR h", "INCRBY h 1", "DECRBY h 1"] {
        expect(&mut c, line, WRONGTYPE);
    }
}

#[test]
fn incrbyfloat_in_long_double() {
    let server = TestServer::default_config();
    let mut c = server.client();
    for (set, incr, want) in [
        (None, "1.5", "1.5"),
        (None, "0.1", "1.6"),
        (None, "-1.6", "0"),
        (Some("1000"), "0.1", "1000.09999999999999998"),
        (Some("10.5"), "0.1", "10.6"),
        (Some("3"), "1.1", "4.1"),
        (Some("0.1"), "0.2", "0.3"),
        (Some("1"), "-1.1", "-0.1"),
        (Some("0"), "1e-20", "0"),
        (Some("0"), "0x10", "16"),
        (Some("0"), "5.0e3", "5000"),
        (Some("17179869184"), "1.5", "17179869185.5"),
    ] {
        if let Some(v) = set {
            expect(&mut c, &format!("SET f {v}"), "+OK\r\n");
        }
        expect(
            &mut c,
            &format!("INCRBYFLOAT f {incr}"),
            &format!("${}\r\n{want}\r\n", want.len()),
        );
        expect(&mut c, "GET f", &format!("${}\r\n{want}\r\n", want.len()));
    }
    expect(&mut c, "EXPIRE f 100", ":1\r\n");
    expect(&mut c, "INCRBYFLOAT f 1", "$13\r\n17179869186.5\r\n");
    ttl_near(&mut c, "f", 100);
    let not_float = "-ERR value is not a valid float\r\n";
    expect(&mut c, "INCRBYFLOAT f x", not_float);
    expect(&mut c, "INCRBYFLOAT f nan", not_float);
    expect(&mut c, "INCRBYFLOAT f 1e99999", not_float);
    assert_eq!(
        show(&c.call_args(&[b"INCRBYFLOAT", b"f", b" 1"])),
        show(not_float.as_bytes())
    );
    expect(
        &mut c,
        "INCRBYFLOAT f inf",
        "-ERR increment would produce NaN or Infinity\r\n",
    );
    expect(&mut c, "SET f 1.7976931348623157e308", "+OK\r\n");
    c.send(&support::words("INCRBYFLOAT f 1e308"));
    let Reply::Bulk(big) = c.read_reply() else {
        panic!("INCRBYFLOAT")
    };
    assert!(big.starts_with(b"27976931348623157000235224044135"));
    assert_eq!(big.len(), 309);
    expect(&mut c, "SET w abc", "+OK\r\n");
    expect(&mut c, "INCRBYFLOAT w 1", not_float);
    // "1\0002" is not a number even though strtold stops at the NUL.
    assert_eq!(c.call_args(&[b"SET", b"w", b"1\x002"]), b"+OK\r\n");
    expect(&mut c, "INCRBYFLOAT w 1", not_float);
    expect(&mut c, "HSET h f 1", ":1\r\n");
    expect(&mut c, "INCRBYFLOAT h 1", WRONGTYPE);
}

#[test]
fn append_strlen_ranges() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "APPEND s hello", ":5\r\n");
    assert_eq!(c.call_args(&[b"APPEND", b"s", b" world"]), b":11\r\n");
    expect(&mut c, "STRLEN s", ":11\r\n");
    expect(&mut c, "STRLEN nokey", ":0\r\n");
    for (range, want) in [
        ("0 4", "hello"),
        ("-5 -1", "world"),
        ("-1 -5", ""),
        ("5 2", ""),
        ("100 200", ""),
        ("-100 100", "hello world"),
        ("0 -1", "hello world"),
    ] {
        for cmd in ["GETRANGE", "SUBSTR"] {
            expect(
                &mut c,
                &format!("{cmd} s {range}"),
                &format!("${}\r\n{want}\r\n", want.len()),
            );
        }
    }
    expect(&mut c, "GETRANGE nokey 0 -1", "$0\r\n\r\n");
    expect(
        &mut c,
        "GETRANGE s x 1",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(&mut c, "SETRANGE r 5 hi", ":7\r\n");
    assert_eq!(c.call("GET r"), b"$7\r\n\0\0\0\0\0hi\r\n");
    expect(&mut c, "SETRANGE r 0 HELLO", ":7\r\n");
    expect(&mut c, "GET r", "$7\r\nHELLOhi\r\n");
    expect(&mut c, "EXPIRE r 100", ":1\r\n");
    expect(&mut c, "SETRANGE r 6 I!", ":8\r\n");
    ttl_near(&mut c, "r", 100);
    assert_eq!(c.call_args(&[b"SETRANGE", b"r", b"1", b""]), b":8\r\n");
    assert_eq!(c.call_args(&[b"SETRANGE", b"nor", b"1", b""]), b":0\r\n");
    expect(&mut c, "EXISTS nor", ":0\r\n");
    expect(&mut c, "SETRANGE r -1 x", "-ERR offset is out of range\r\n");
    expect(
        &mut c,
        "SETRANGE r 536870912 x",
        "-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n",
    );
    expect(&mut c, "HSET h f v", ":1\r\n");
    for line in ["APPEND h x", "STRLEN h", "GETRANGE h 0 1", "SETRANGE h 0 x"] {
        expect(&mut c, line, WRONGTYPE);
    }
    arity(&mut c, "GETRANGE s 0", "getrange");
    arity(&mut c, "SUBSTR s 0", "substr");
}

#[test]
fn lcs_in_both_protocols() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "MSET l1 ohmytext l2 mynewtext", "+OK\r\n");
    expect(&mut c, "LCS l1 l2", "$6\r\nmytext\r\n");
    expect(&mut c, "LCS l1 l2 LEN", ":6\r\n");
    let idx2 = "*4\r\n$7\r\nmatches\r\n*2\r\n*2\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n\
                *2\r\n*2\r\n:2\r\n:3\r\n*2\r\n:0\r\n:1\r\n$3\r\nlen\r\n:6\r\n";
    expect(&mut c, "LCS l1 l2 IDX", idx2);
    expect(
        &mut c,
        "LCS l1 l2 IDX MINMATCHLEN 4 WITHMATCHLEN",
        "*4\r\n$7\r\nmatches\r\n*1\r\n*3\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n:4\r\n\
         $3\r\nlen\r\n:6\r\n",
    );
    expect(
        &mut c,
        "LCS l1 l2 IDX LEN",
        "-ERR If you want both the length and indexes, please just use IDX.\r\n",
    );
    expect(&mut c, "LCS l1 l2 foo", "-ERR syntax error\r\n");
    expect(&mut c, "LCS l1 l2 MINMATCHLEN", "-ERR syntax error\r\n");
    expect(
        &mut c,
        "LCS l1 l2 MINMATCHLEN x",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(&mut c, "LCS nokey nokey2", "$0\r\n\r\n");
    expect(&mut c, "HSET h f v", ":1\r\n");
    // The kinds are checked before the options.
    expect(
        &mut c,
        "LCS l1 h foo",
        "-ERR The specified keys must contain string values\r\n",
    );
    expect(&mut c, "MSET l3 abcabcabc l4 cbacbacba", "+OK\r\n");
    expect(
        &mut c,
        "LCS l3 l4 IDX WITHMATCHLEN",
        "*4\r\n$7\r\nmatches\r\n*5\r\n*3\r\n*2\r\n:8\r\n:8\r\n*2\r\n:6\r\n:6\r\n:1\r\n\
         *3\r\n*2\r\n:7\r\n:7\r\n*2\r\n:4\r\n:4\r\n:1\r\n*3\r\n*2\r\n:6\r\n:6\r\n*2\r\n:2\r\n\
         :2\r\n:1\r\n*3\r\n*2\r\n:4\r\n:4\r\n*2\r\n:1\r\n:1\r\n:1\r\n*3\r\n*2\r\n:2\r\n:2\r\n\
         *2\r\n:0\r\n:0\r\n:1\r\n$3\r\nlen\r\n:5\r\n",
    );
    resp3(&mut c);
    expect(
        &mut c,
        "LCS nokey nokey2 IDX",
        "%2\r\n$7\r\nmatches\r\n*0\r\n$3\r\nlen\r\n:0\r\n",
    );
    expect(&mut c, "LCS l1 l2 IDX", &idx2.replacen("*4", "%2", 1));
}

#[test]
fn bit_commands() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "SETBIT b 7 1", ":0\r\n");
    expect(&mut c, "GET b", "$1\r\n\x01\r\n");
    expect(&mut c, "SETBIT b 7 0", ":1\r\n");
    expect(&mut c, "SETBIT b 0 1", ":0\r\n");
    expect(&mut c, "GETBIT b 0", ":1\r\n");
    expect(&mut c, "GETBIT b 100", ":0\r\n");
    expect(&mut c, "GETBIT nokey 0", ":0\r\n");
    // Clearing a bit of a missing key still creates it.
    expect(&mut c, "SETBIT zero 7 0", ":0\r\n");
    assert_eq!(c.call("GET zero"), b"$1\r\n\0\r\n");
    let offset = "-ERR bit offset is not an integer or out of range\r\n";
    expect(&mut c, "SETBIT b -1 1", offset);
    expect(&mut c, "SETBIT b 4294967296 1", offset);
    expect(&mut c, "SETBIT b x 1", offset);
    expect(&mut c, "GETBIT b -1", offset);
    expect(
        &mut c,
        "SETBIT b 1 2",
        "-ERR bit is not an integer or out of range\r\n",
    );
    expect(&mut c, "SET bc foobar", "+OK\r\n");
    for (args, want) in [
        ("", 26),
        ("0 0", 4),
        ("1 1", 6),
        ("1 1 BYTE", 6),
        ("5 30 BIT", 17),
        ("-1 -2", 0),
        ("-2 -1", 7),
        ("0 -1 BIT", 26),
        ("3 3 BIT", 0),
        ("1 1 bit", 1),
        ("47 47 BIT", 0),
    ] {
        expect(
            &mut c,
            &format!("BITCOUNT bc {args}"),
            &format!(":{want}\r\n"),
        );
    }
    expect(&mut c, "BITCOUNT bc 0", "-ERR syntax error\r\n");
    expect(&mut c, "BITCOUNT bc 0 1 foo", "-ERR syntax error\r\n");
    expect(
        &mut c,
        "BITCOUNT bc x 1",
        "-ERR value is not an integer or out of range\r\n",
    );
    // A missing key is looked up before the arguments are read.
    expect(&mut c, "BITCOUNT nokey x y", ":0\r\n");
    assert_eq!(c.call_args(&[b"SET", b"bp", b"\xff\xf0\x00"]), b"+OK\r\n");
    for (args, want) in [
        ("0", 12),
        ("1", 0),
        ("1 2", -1),
        ("0 0 0", -1),
        ("0 0 -1", 12),
        ("1 7 15 BIT", 7),
        ("0 7 15 BIT", 12),
        ("0 0 7 BIT", -1),
    ] {
        expect(
            &mut c,
            &format!("BITPOS bp {args}"),
            &format!(":{want}\r\n"),
        );
    }
    assert_eq!(c.call_args(&[b"SET", b"ones", b"\xff\xff"]), b"+OK\r\n");
    expect(&mut c, "BITPOS ones 0", ":16\r\n");
    expect(&mut c, "BITPOS ones 0 1", ":16\r\n");
    expect(&mut c, "BITPOS ones 0 0 -1", ":-1\r\n");
    assert_eq!(c.call_args(&[b"SET", b"empty", b""]), b"+OK\r\n");
    expect(&mut c, "BITPOS empty 0", ":-1\r\n");
    expect(&mut c, "BITPOS nokey 0", ":0\r\n");
    expect(&mut c, "BITPOS nokey 1", ":-1\r\n");
    expect(
        &mut c,
        "BITPOS bp 2",
        "-ERR The bit argument must be 1 or 0.\r\n",
    );
    expect(&mut c, "BITPOS bp 1 0 1 foo", "-ERR syntax error\r\n");
    expect(&mut c, "BITOP AND dst bc bp", ":6\r\n");
    assert_eq!(c.call("GET dst"), b"$6\r\nf`\0\0\0\0\r\n");
    expect(&mut c, "BITOP OR dst bc bp nokey", ":6\r\n");
    assert_eq!(c.call("GET dst"), b"$6\r\n\xff\xffobar\r\n");
    expect(&mut c, "BITOP XOR dst bc bp", ":6\r\n");
    assert_eq!(c.call("GET dst"), b"$6\r\n\x99\x9fobar\r\n");
    expect(&mut c, "EXPIRE dst 100", ":1\r\n");
    expect(&mut c, "BITOP NOT dst bc", ":6\r\n");
    assert_eq!(c.call("GET dst"), b"$6\r\n\x99\x90\x90\x9d\x9e\x8d\r\n");
    expect(&mut c, "TTL dst", ":-1\r\n");
    expect(&mut c, "BITOP AND dst nokey nokey2", ":0\r\n");
    expect(&mut c, "EXISTS dst", ":0\r\n");
    expect(
        &mut c,
        "BITOP NOT dst bc bp",
        "-ERR BITOP NOT must be called with a single source key.\r\n",
    );
    expect(&mut c, "BITOP foo dst bc", "-ERR syntax error\r\n");
    expect(&mut c, "HSET h f v", ":1\r\n");
    for line in [
        "SETBIT h 1 1",
        "GETBIT h 1",
        "BITCOUNT h",
        "BITPOS h 0",
        "BITOP AND dst bc h",
    ] {
        expect(&mut c, line, WRONGTYPE);
    }
}

// ---------------------------------------------------------------------------------------------
// Hashes
// ---------------------------------------------------------------------------------------------

#[test]
fn hash_reads_and_writes() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "HSET h a 1 b 2 a 3", ":2\r\n");
    expect(&mut c, "HGET h a", "$1\r\n3\r\n");
    expect(&mut c, "HMSET h c 3", "+OK\r\n");
    expect(&mut c, "HSETNX h a 9", ":0\r\n");
    expect(&mut c, "HSETNX h z 9", ":1\r\n");
    expect(&mut c, "HEXISTS h z", ":1\r\n");
    expect(&mut c, "HEXISTS h nofield", ":0\r\n");
    expect(&mut c, "HEXISTS nokey a", ":0\r\n");
    expect(&mut c, "HLEN h", ":4\r\n");
    expect(&mut c, "HLEN nokey", ":0\r\n");
    expect(&mut c, "HSTRLEN h a", ":1\r\n");
    expect(&mut c, "HSTRLEN h nofield", ":0\r\n");
    expect(
        &mut c,
        "HMGET h a nofield b",
        "*3\r\n$1\r\n3\r\n$-1\r\n$1\r\n2\r\n",
    );
    expect(&mut c, "HMGET nokey a", "*1\r\n$-1\r\n");
    let mut keys = bulks(&["a", "b", "c", "z"]);
    assert_eq!(reply(&mut c, "HKEYS h"), keys);
    assert_eq!(reply(&mut c, "HVALS h"), bulks(&["3", "2", "3", "9"]));
    expect(&mut c, "HKEYS nokey", "*0\r\n");
    expect(&mut c, "HVALS nokey", "*0\r\n");
    expect(&mut c, "HDEL h a a nofield", ":1\r\n");
    expect(&mut c, "HDEL nokey a", ":0\r\n");
    expect(
        &mut c,
        "HGETALL h",
        "*6\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n$1\r\nz\r\n$1\r\n9\r\n",
    );
    expect(&mut c, "HGETALL nokey", "*0\r\n");
    // The last field takes the key with it, and the deadline is kept while fields remain.
    expect(&mut c, "EXPIRE h 100", ":1\r\n");
    expect(&mut c, "HSET h b 5", ":0\r\n");
    ttl_near(&mut c, "h", 100);
    expect(&mut c, "HDEL h b c z", ":3\r\n");
    expect(&mut c, "EXISTS h", ":0\r\n");
    arity(&mut c, "HSET h", "hset");
    arity(&mut c, "HSET h f", "hset");
    arity(&mut c, "HSET h f v g", "hset");
    arity(&mut c, "HMSET h f v g", "hmset");
    arity(&mut c, "HDEL h", "hdel");
    arity(&mut c, "HSETNX h f", "hsetnx");
    expect(&mut c, "SET s v", "+OK\r\n");
    for line in [
        "HSET s f v",
        "HMSET s f v",
        "HSETNX s f v",
        "HGET s f",
        "HMGET s f",
        "HEXISTS s f",
        "HLEN s",
        "HSTRLEN s f",
        "HKEYS s",
        "HVALS s",
        "HGETALL s",
        "HDEL s f",
        "HINCRBY s f 1",
        "HINCRBYFLOAT s f 1",
        "HRANDFIELD s",
        "HRANDFIELD s 1",
        "HSCAN s 0",
    ] {
        expect(&mut c, line, WRONGTYPE);
    }
    resp3(&mut c);
    expect(&mut c, "HSET h f 1 g 2", ":2\r\n");
    expect(
        &mut c,
        "HGETALL h",
        "%2\r\n$1\r\nf\r\n$1\r\n1\r\n$1\r\ng\r\n$1\r\n2\r\n",
    );
    expect(&mut c, "HGETALL nokey", "%0\r\n");
    keys = bulks(&["f", "g"]);
    assert_eq!(reply(&mut c, "HKEYS h"), keys);
    expect(&mut c, "HGET h nofield", "_\r\n");
    expect(&mut c, "HMGET h f nofield", "*2\r\n$1\r\n1\r\n_\r\n");
}

#[test]
fn hash_increments() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "HINCRBY h n 5", ":5\r\n");
    expect(&mut c, "HINCRBY h n -10", ":-5\r\n");
    expect(
        &mut c,
        "HINCRBY h n x",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(&mut c, "HSET h s abc big 9223372036854775807", ":2\r\n");
    expect(
        &mut c,
        "HINCRBY h s 1",
        "-ERR hash value is not an integer\r\n",
    );
    expect(
        &mut c,
        "HINCRBY h big 1",
        "-ERR increment or decrement would overflow\r\n",
    );
    expect(&mut c, "HINCRBY h big -1", ":9223372036854775806\r\n");
    expect(&mut c, "HINCRBYFLOAT h fl 1.5", "$3\r\n1.5\r\n");
    expect(&mut c, "HINCRBYFLOAT h fl 0.1", "$3\r\n1.6\r\n");
    expect(&mut c, "HGET h fl", "$3\r\n1.6\r\n");
    expect(&mut c, "HSET h t 1000", ":1\r\n");
    expect(
        &mut c,
        "HINCRBYFLOAT h t 0.1",
        "$22\r\n1000.09999999999999998\r\n",
    );
    expect(
        &mut c,
        "HINCRBYFLOAT h fl inf",
        "-ERR value is NaN or Infinity\r\n",
    );
    expect(
        &mut c,
        "HINCRBYFLOAT h fl x",
        "-ERR value is not a valid float\r\n",
    );
    expect(
        &mut c,
        "HINCRBYFLOAT h s 1",
        "-ERR hash value is not a float\r\n",
    );
    expect(&mut c, "HSET h i inf", ":1\r\n");
    expect(
        &mut c,
        "HINCRBYFLOAT h i 1",
        "-ERR increment would produce NaN or Infinity\r\n",
    );
    arity(&mut c, "HINCRBY h n", "hincrby");
    arity(&mut c, "HINCRBYFLOAT h n", "hincrbyfloat");
}

#[test]
fn hrandfield_counts_and_shapes() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "HRANDFIELD nokey", "$-1\r\n");
    expect(&mut c, "HRANDFIELD nokey 2", "*0\r\n");
    expect(&mut c, "HRANDFIELD nokey 0 WITHVALUES", "*0\r\n");
    expect(&mut c, "HSET one f v", ":1\r\n");
    expect(&mut c, "HRANDFIELD one", "$1\r\nf\r\n");
    expect(&mut c, "HRANDFIELD one 0", "*0\r\n");
    expect(
        &mut c,
        "HRANDFIELD one -3",
        "*3\r\n$1\r\nf\r\n$1\r\nf\r\n$1\r\nf\r\n",
    );
    expect(
        &mut c,
        "HRANDFIELD one -2 WITHVALUES",
        "*4\r\n$1\r\nf\r\n$1\r\nv\r\n$1\r\nf\r\n$1\r\nv\r\n",
    );
    expect(
        &mut c,
        "HRANDFIELD one 5 WITHVALUES",
        "*2\r\n$1\r\nf\r\n$1\r\nv\r\n",
    );
    expect(
        &mut c,
        "HRANDFIELD one x",
        "-ERR value is not an integer or out of range\r\n",
    );
    expect(
        &mut c,
        "HRANDFIELD one -9223372036854775808",
        "-ERR value is out of range, value must between -9223372036854775807 and \
         9223372036854775807\r\n",
    );
    expect(
        &mut c,
        "HRANDFIELD one 9223372036854775807 WITHVALUES",
        "-ERR value is out of range\r\n",
    );
    expect(
        &mut c,
        "HRANDFIELD one 1 WITHVALUESX",
        "-ERR syntax error\r\n",
    );
    expect(
        &mut c,
        "HRANDFIELD one 1 WITHVALUES x",
        "-ERR syntax error\r\n",
    );
    for i in 0..20 {
        expect(&mut c, &format!("HSET h f{i} v{i}"), ":1\r\n");
    }
    // A positive count gives distinct fields; more than there are gives them all.
    for (count, n) in [(5, 5), (19, 19), (20, 20), (100, 20)] {
        c.send(&support::words(&format!("HRANDFIELD h {count} WITHVALUES")));
        let Reply::Array(items) = c.read_reply() else {
            panic!("HRANDFIELD")
        };
        assert_eq!(items.len(), n * 2);
        let fields: HashSet<_> = items.chunks(2).map(|p| bytes(&p[0])).collect();
        assert_eq!(fields.len(), n);
        for p in items.chunks(2) {
            let (Reply::Bulk(f), Reply::Bulk(v)) = (&p[0], &p[1]) else {
                panic!("pair {p:?}")
            };
            assert_eq!(f[1..], v[1..], "a field with its own value");
        }
    }
    c.send(&support::words("HRANDFIELD h -50"));
    let Reply::Array(items) = c.read_reply() else {
        panic!("HRANDFIELD")
    };
    assert_eq!(items.len(), 50);
    resp3(&mut c);
    expect(&mut c, "HRANDFIELD nokey", "_\r\n");
    expect(
        &mut c,
        "HRANDFIELD one -2 WITHVALUES",
        "*2\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n",
    );
    expect(&mut c, "HRANDFIELD one 1", "*1\r\n$1\r\nf\r\n");
}

#[test]
fn hscan_pages_large_hashes() {
    let server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "HSCAN nokey 0", "*2\r\n$1\r\n0\r\n*0\r\n");
    // A missing key answers before the options are read.
    expect(&mut c, "HSCAN nokey 0 bogus", "*2\r\n$1\r\n0\r\n*0\r\n");
    expect(&mut c, "HSET one f v", ":1\r\n");
    let whole = "*2\r\n$1\r\n0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n";
    expect(&mut c, "HSCAN one 0", whole);
    // A small hash comes whole whatever the cursor and COUNT.
    expect(&mut c, "HSCAN one 5 COUNT 1", whole);
    expect(&mut c, "HSCAN one 0 MATCH f*", whole);
    expect(&mut c, "HSCAN one 0 MATCH x*", "*2\r\n$1\r\n0\r\n*0\r\n");
    expect(&mut c, "HSCAN one x", "-ERR invalid cursor\r\n");
    expect(&mut c, "HSCAN one 0 TYPE string", "-ERR syntax error\r\n");
    expect(&mut c, "HSCAN one 0 COUNT 0", "-ERR syntax error\r\n");
    expect(&mut c, "HSCAN one 0 MATCH", "-ERR syntax error\r\n");
    let mut pipeline = Vec::new();
    for i in 0..300 {
        pipeline.extend(support::frame(&[
            b"HSET",
            b"big",
            format!("field:{i}").as_bytes(),
            b"v",
        ]));
    }
    c.send_raw(&pipeline);
    for _ in 0..300 {
        assert_eq!(c.read_reply_bytes(), b":1\r\n");
    }
    let mut cursor = "0".to_string();
    let mut seen = HashSet::new();
    let mut steps = 0;
    loop {
        steps += 1;
        assert!(steps < 1000, "HSCAN did not end");
        let Reply::Array(parts) = reply(&mut c, &format!("HSCAN big {cursor} COUNT 50")) else {
            panic!("HSCAN")
        };
        let [Reply::Bulk(next), Reply::Array(items)] = parts.as_slice() else {
            panic!("HSCAN shape")
        };
        assert!(items.len() <= 100);
        for p in items.chunks(2) {
            assert_eq!(p[1], Reply::bulk("v"));
            seen.insert(bytes(&p[0]));
        }
        cursor = String::from_utf8(next.clone()).unwrap();
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen.len(), 300);
    assert!(steps >= 6, "COUNT pages a large hash");
    // Fields present for the whole scan are returned even as others come and go.
    let mut cursor = "0".to_string();
    let mut seen = HashSet::new();
    for step in 0..1000 {
        let Reply::Array(parts) = reply(&mut c, &format!("HSCAN big {cursor} COUNT 20")) else {
            panic!("HSCAN")
        };
        let [Reply::Bulk(next), Reply::Array(items)] = parts.as_slice() else {
            panic!("HSCAN shape")
        };
        seen.extend(items.chunks(2).map(|p| bytes(&p[0])));
        // Remove two of the first hundred fields and add two new ones after every step.
        for i in [2 * step, 2 * step + 1].into_iter().filter(|i| *i < 100) {
            expect(&mut c, &format!("HDEL big field:{i}"), ":1\r\n");
        }
        expect(
            &mut c,
            &format!("HSET big new:{step}:a v new:{step}:b v"),
            ":2\r\n",
        );
        cursor = String::from_utf8(next.clone()).unwrap();
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(cursor, "0", "HSCAN did not end");
    for i in 100..300 {
        assert!(seen.contains(format!("field:{i}").as_bytes()), "field:{i}");
    }
}
