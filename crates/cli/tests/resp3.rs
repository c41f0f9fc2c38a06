//! RESP3 beside RESP2: `kavach serve` answers the same command sequences as a real Redis 7
//! (`redis-server`, started by the test) byte for byte in both protocols, and the current
//! redis-py (which opens with `HELLO 3`) works against it with default settings.
//!
//! Both tools are installed when missing (apt-get, pip into a venv under the test's target
//! directory); if they cannot be installed the tests fail rather than pass without checking.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Scratch, ensure_tool, free_port, spawn_serve};
use server::resp::{Limits, Reply, parse_reply};

/// A child process killed when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `kavach serve` on a free port in `dir`, and the port it listens on.
fn start_kavach(dir: &str) -> (Running, u16) {
    let (child, port, _) =
        spawn_serve(dir, &["--shards", "4", "--log-mib", "1", "--slot-mib", "4"]);
    (Running(child), port)
}

/// A real `redis-server` on a free port of 127.0.0.1, without persistence, and its port.
fn start_redis(dir: &Path) -> (Running, u16) {
    ensure_tool("redis-server", "redis-server");
    let port = free_port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-server");
    let running = Running(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    (running, port)
}

/// A raw RESP connection that returns each reply's bytes.
struct Raw {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    fn connect(port: u16) -> Raw {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Raw {
            stream,
            buf: Vec::new(),
        }
    }

    fn call(&mut self, args: &[&str]) -> (Reply, Vec<u8>) {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        self.stream.write_all(&out).expect("send");
        loop {
            if let Some((reply, used)) =
                parse_reply(&self.buf, &Limits::default()).expect("well-formed reply")
            {
                let bytes: Vec<u8> = self.buf.drain(..used).collect();
                return (reply, bytes);
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = self.stream.read(&mut chunk).expect("read reply");
            assert!(
                n > 0,
                "connection closed while waiting for a reply to {args:?}"
            );
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// What may differ between the servers is blanked: HELLO's version and id, CLIENT ID, and the
/// INFO text (only its kind and first line are kept).
fn comparable(args: &[&str], reply: Reply, bytes: Vec<u8>) -> Vec<u8> {
    let name = args[0].to_ascii_uppercase();
    let blank = |k: &Reply, v: Reply| match k {
        Reply::Bulk(key) if key == b"version" => Reply::bulk("*"),
        Reply::Bulk(key) if key == b"id" => Reply::Integer(0),
        _ => v,
    };
    let sub = args.get(1).map(|s| s.to_ascii_uppercase());
    match (name.as_str(), reply) {
        ("HELLO", Reply::Map(pairs)) => Reply::Map(
            pairs
                .into_iter()
                .map(|(k, v)| {
                    let v = blank(&k, v);
                    (k, v)
                })
                .collect(),
        )
        .to_resp3_bytes(),
        ("HELLO", Reply::Array(items)) => {
            let mut items = items;
            for i in (1..items.len()).step_by(2) {
                let v = std::mem::replace(&mut items[i], Reply::Null);
                items[i] = blank(&items[i - 1], v);
            }
            Reply::Array(items).to_bytes()
        }
        ("CLIENT", Reply::Integer(_)) if sub.as_deref() == Some("ID") => b":0\r\n".to_vec(),
        // A hash's field order is unspecified: compare the pairs sorted.
        ("HGETALL", Reply::Map(mut pairs)) => {
            pairs.sort_by_key(|(k, _)| k.to_bytes());
            Reply::Map(pairs).to_resp3_bytes()
        }
        ("HGETALL", Reply::Array(items)) => {
            let mut pairs: Vec<Vec<Reply>> = items.chunks(2).map(<[Reply]>::to_vec).collect();
            pairs.sort_by_key(|p| p[0].to_bytes());
            Reply::Array(pairs.concat()).to_bytes()
        }
        ("INFO", Reply::Verbatim(format, text)) => {
            Reply::Verbatim(format, first_line(&text)).to_resp3_bytes()
        }
        ("INFO", Reply::Bulk(text)) => Reply::Bulk(first_line(&text)).to_bytes(),
        _ => bytes,
    }
}

fn first_line(text: &[u8]) -> Vec<u8> {
    text.split(|&b| b == b'\r')
        .next()
        .unwrap_or_default()
        .to_vec()
}

trait Resp3Bytes {
    fn to_resp3_bytes(&self) -> Vec<u8>;
}

impl Resp3Bytes for Reply {
    fn to_resp3_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_as(&mut out, true);
        out
    }
}

/// The sequence both servers run, after `HELLO 3` (or nothing, for RESP2) on a new connection.
const SEQUENCE: &[&[&str]] = &[
    &["FLUSHALL"],
    &["HELLO"],
    &["HELLO", "4"],
    &["HELLO", "x"],
    &["HELLO", "3", "AUTH", "bob", "pw"],
    &["HELLO", "3", "SETNAME", "a b"],
    &["HELLO", "3", "FOO"],
    &["HELLO", "3", "AUTH", "default"],
    &["PING"],
    &["PING", "hi"],
    &["ECHO", "e"],
    &["SET", "s", "v"],
    &["GET", "s"],
    &["GET", "missing"],
    &["SET", "s", "w", "NX"],
    &["SET", "s", "w", "XX"],
    &["MGET", "s", "missing"],
    &["APPEND", "s", "xyz"],
    &["STRLEN", "s"],
    &["INCR", "n"],
    &["INCRBY", "n", "41"],
    &["DECR", "n"],
    &["DECRBY", "n", "2"],
    &["INCR", "s"],
    &["HSET", "h", "a", "1", "b", "2"],
    &["HGET", "h", "a"],
    &["HGET", "h", "nope"],
    &["HMGET", "h", "a", "nope", "b"],
    &["HGETALL", "h"],
    &["HGETALL", "missing"],
    &["HDEL", "h", "b"],
    &["HGETALL", "h"],
    &["GET", "h"],
    &[
        "ZADD", "z", "1.5", "a", "2", "b", "-inf", "c", "inf", "d", "-3.25", "e",
    ],
    &["ZRANGEBYSCORE", "z", "-inf", "+inf"],
    &["ZRANGEBYSCORE", "z", "-inf", "+inf", "WITHSCORES"],
    &[
        "ZRANGEBYSCORE",
        "z",
        "(1.5",
        "inf",
        "WITHSCORES",
        "LIMIT",
        "0",
        "2",
    ],
    &["ZRANGEBYSCORE", "missing", "-inf", "+inf", "WITHSCORES"],
    &["ZREM", "z", "a", "nope"],
    &["TYPE", "z"],
    &["TYPE", "h"],
    &["TYPE", "missing"],
    &["EXISTS", "s", "h", "missing"],
    &["DEL", "s", "missing"],
    &["DBSIZE"],
    &["CLIENT", "GETNAME"],
    &["CLIENT", "SETNAME", "app"],
    &["CLIENT", "GETNAME"],
    &["CLIENT", "ID"],
    &["CLIENT", "NO-EVICT", "on"],
    &["CLIENT", "NO-EVICT", "maybe"],
    &["CLIENT", "KILL", "ID", "999999"],
    &["CLIENT", "KILL", "ID", "0"],
    &["CLIENT", "KILL", "ID", "x"],
    &["CLIENT", "KILL", "ADDR", "10.1.2.3:4"],
    &["CLIENT", "KILL", "10.1.2.3:4"],
    &["CLIENT", "KILL", "FOO", "bar"],
    &["CLIENT", "KILL", "ID"],
    &["CLIENT", "KILL", "SKIPME", "maybe"],
    &["CLIENT", "LIST", "ID", "x"],
    &["CLIENT", "LIST", "TYPE", "odd"],
    &["CLIENT", "LIST", "TYPE", "pubsub"],
    &["CLIENT", "LIST", "ID", "999999"],
    &["CLIENT", "LIST", "BOGUS"],
    &["CONFIG", "GET", "maxmemory"],
    &["CONFIG", "GET", "no-such-parameter"],
    &["COMMAND", "INFO", "no-such-command"],
    &["INFO", "server"],
    &[
        "HELLO", "3", "AUTH", "default", "anything", "SETNAME", "named",
    ],
    &["CLIENT", "GETNAME"],
    &["HELLO", "2"],
    &["GET", "missing"],
    &["HGETALL", "h"],
    &["HELLO", "3"],
    &["GET", "missing"],
    &["HGETALL", "h"],
];

fn run_sequence(port: u16, resp3: bool) -> Vec<(String, Vec<u8>)> {
    let mut c = Raw::connect(port);
    let mut replies = Vec::new();
    let opening: &[&[&str]] = if resp3 { &[&["HELLO", "3"]] } else { &[] };
    for args in opening.iter().chain(SEQUENCE) {
        let (reply, bytes) = c.call(args);
        replies.push((args.join(" "), comparable(args, reply, bytes)));
    }
    replies
}

#[test]
fn replies_match_redis_7_in_resp2_and_resp3() {
    let scratch = Scratch::new("resp3-differential");
    let redis_dir = scratch.path("redis");
    std::fs::create_dir_all(&redis_dir).unwrap();
    let (_redis, redis_port) = start_redis(Path::new(&redis_dir));
    let (_kavach, kavach_port) = start_kavach(&scratch.path("store"));
    for resp3 in [false, true] {
        let expected = run_sequence(redis_port, resp3);
        let got = run_sequence(kavach_port, resp3);
        for ((command, want), (_, have)) in expected.iter().zip(&got) {
            assert_eq!(
                String::from_utf8_lossy(have),
                String::from_utf8_lossy(want),
                "{} reply to `{command}` differs from Redis's",
                if resp3 { "RESP3" } else { "RESP2" }
            );
        }
    }
}

/// A venv with the current redis-py, made once per target directory.
fn python_with_redis_py() -> String {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("redis-py-venv");
    let python = venv.join("bin/python");
    let ready = Command::new(&python)
        .args(["-c", "import redis"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ready {
        let make_venv = || {
            Command::new("python3")
                .args(["-m", "venv", "--clear"])
                .arg(&venv)
                .output()
                .expect("run python3 -m venv")
        };
        let mut o = make_venv();
        if !o.status.success() {
            // Debian splits venv (ensurepip) out of python3: install it, then try again.
            // Another test binary may be installing at the same time: wait for dpkg's lock.
            let wait = "DPkg::Lock::Timeout=600";
            let _ = Command::new("apt-get")
                .args(["-o", wait, "update"])
                .output();
            let apt = Command::new("apt-get")
                .args(["-o", wait, "install", "-y", "python3-venv"])
                .output()
                .expect("run apt-get");
            assert!(
                apt.status.success(),
                "cannot install python3-venv: {}",
                String::from_utf8_lossy(&apt.stderr)
            );
            o = make_venv();
        }
        assert!(
            o.status.success(),
            "cannot make a venv: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let o = Command::new(venv.join("bin/pip"))
            .args(["install", "-q", "redis"])
            .output()
            .expect("run pip");
        assert!(
            o.status.success(),
            "cannot install redis-py: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    python.to_string_lossy().into_owned()
}

/// The smoke program: `sys.argv[1]` is the port, `sys.argv[2]` the protocol (`default`, 2, 3).
const SMOKE: &str = r#"
import sys, redis
port = int(sys.argv[1])
kw = {} if sys.argv[2] == "default" else {"protocol": int(sys.argv[2])}
r = redis.Redis(port=port, **kw)
want = 3 if sys.argv[2] in ("default", "3") else 2
assert r.connection_pool.get_connection().protocol == want
assert r.ping() is True
assert r.flushall() is True
assert r.set("k", "v") is True
assert r.get("k") == b"v"
assert r.get("missing") is None
assert r.hset("h", mapping={"a": "1", "b": "2"}) == 2
assert r.hgetall("h") == {b"a": b"1", b"b": b"2"}, r.hgetall("h")
assert r.zadd("z", {"one": 1, "half": 0.5}) == 2
scored = [tuple(x) for x in r.zrangebyscore("z", "-inf", "+inf", withscores=True)]
assert scored == [(b"half", 0.5), (b"one", 1.0)], scored
assert r.incr("n") == 1
assert r.incrby("n", 41) == 42
assert r.exists("k", "h", "missing") == 2
assert r.delete("k", "missing") == 1
assert r.set("e", "1", ex=100) is True
p = r.pipeline(transaction=False)
p.set("p1", "a").get("p1").hget("h", "a").incr("n")
assert p.execute() == [True, b"a", b"1", 43]
info = r.info()
assert info["redis_version"] and info["role"] == "master", info
assert r.client_setname("smoke") is True
assert r.client_getname() == "smoke" or r.client_getname() == b"smoke"
assert r.config_get("maxmemory") == {"maxmemory": "0"} or r.config_get("maxmemory") == {b"maxmemory": b"0"}
assert r.client_info()["resp"] == str(want), r.client_info()
other = redis.Redis(port=port, **kw)
other.client_setname("other")
listed = {c["name"]: c for c in r.client_list()}
assert {"smoke", "other"} <= set(listed), listed
assert r.client_kill_filter(_id=listed["other"]["id"]) == 1
assert "other" not in {c["name"] for c in r.client_list()}
print("ok", want)
"#;

#[test]
fn redis_py_works_with_default_settings() {
    let python = python_with_redis_py();
    let scratch = Scratch::new("resp3-redis-py");
    let (_kavach, port) = start_kavach(&scratch.path("store"));
    for protocol in ["default", "2", "3"] {
        let o = Command::new(&python)
            .args(["-c", SMOKE, &port.to_string(), protocol])
            .output()
            .expect("run python");
        assert!(
            o.status.success(),
            "redis-py (protocol {protocol}) failed: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
