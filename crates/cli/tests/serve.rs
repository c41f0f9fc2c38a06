//! `kavach serve` as a process: kill -9 at random moments loses no acknowledged write, and
//! redis-cli works against it unchanged.
//!
//! A kill -9 is not a power failure (the page cache survives it); power failures are tested on
//! the persistence simulator in `crates/dstore/tests/crash.rs`. This test checks the process
//! boundary: that a write is acknowledged only after it reached the pool, that recovery after
//! a SIGKILL at any moment (mid-request, mid-checkpoint) restores every acknowledged write, and
//! that nothing unacknowledged appears in part.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Scratch;
use pmem::rng::SplitMix64;

/// Small logs and slots: checkpoints happen during the test, and the pool stays small.
const STORE_ARGS: &[&str] = &["--shards", "8", "--log-mib", "1", "--slot-mib", "16"];

struct Server {
    child: Child,
    port: u16,
}

fn start(dir: &str) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kavach"))
        .args(["serve", "--dir", dir, "--port", "0"])
        .args(STORE_ARGS)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kavach serve");
    let err = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(err).lines();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    let port = loop {
        assert!(
            Instant::now() < deadline,
            "no `listening on` line: {seen:?}"
        );
        let Some(Ok(line)) = lines.next() else {
            panic!("kavach serve exited before listening: {seen:?}");
        };
        if let Some(rest) = line.split("listening on ").nth(1) {
            let addr = rest.split_whitespace().next().expect("address");
            break addr.rsplit(':').next().unwrap().parse().expect("port");
        }
        seen.push(line);
    };
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Server { child, port }
}

/// A minimal RESP client.
struct Client {
    stream: BufReader<TcpStream>,
}

impl Client {
    fn connect(port: u16) -> std::io::Result<Client> {
        let s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_read_timeout(Some(Duration::from_secs(20)))?;
        Ok(Client {
            stream: BufReader::new(s),
        })
    }

    fn send(&mut self, args: &[&[u8]]) -> std::io::Result<()> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.stream.get_mut().write_all(&out)
    }

    /// Read one reply: `Ok(Some(bytes))` for a bulk or simple string, `Ok(None)` for a nil.
    fn reply(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        let mut line = String::new();
        if self.stream.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let line = line.trim_end();
        match line.as_bytes().first() {
            Some(b'+') | Some(b':') => Ok(Some(line.as_bytes()[1..].to_vec())),
            Some(b'$') => {
                let n: i64 = line[1..].parse().expect("bulk length");
                if n < 0 {
                    return Ok(None);
                }
                let mut b = vec![0; n as usize + 2];
                self.stream.read_exact(&mut b)?;
                b.truncate(n as usize);
                Ok(Some(b))
            }
            _ => Err(std::io::Error::other(format!("unexpected reply {line}"))),
        }
    }

    fn call(&mut self, args: &[&[u8]]) -> std::io::Result<Option<Vec<u8>>> {
        self.send(args)?;
        self.reply()
    }
}

/// Per key: the last acknowledged value, and a value sent but not acknowledged.
#[derive(Debug, Default, Clone)]
struct KeyState {
    acked: Option<Vec<u8>>,
    in_flight: Option<Vec<u8>>,
}

#[test]
fn sigkill_at_random_moments_loses_no_acknowledged_write() {
    let scratch = Scratch::new("serve-kill9");
    let dir = scratch.path("store");
    let keys: Arc<Mutex<HashMap<Vec<u8>, KeyState>>> = Arc::default();
    let mut rng = SplitMix64::new(0x51_91_4b_11);
    let mut total_acked = 0u64;
    for round in 0..50u64 {
        let mut server = start(&dir);
        let port = server.port;
        // Everything acknowledged so far is there; nothing else is.
        {
            let mut c = Client::connect(port).expect("connect after restart");
            let mut k = keys.lock().unwrap();
            for (key, st) in k.iter_mut() {
                let got = c.call(&[b"GET", key]).expect("GET");
                let ok = got == st.acked || (st.in_flight.is_some() && got == st.in_flight);
                assert!(
                    ok,
                    "round {round}: key {} holds {:?}; acknowledged {:?}, in flight {:?}",
                    String::from_utf8_lossy(key),
                    got.as_ref()
                        .map(|v| String::from_utf8_lossy(v).into_owned()),
                    st.acked
                        .as_ref()
                        .map(|v| String::from_utf8_lossy(v).into_owned()),
                    st.in_flight
                        .as_ref()
                        .map(|v| String::from_utf8_lossy(v).into_owned()),
                );
                st.acked = got;
                st.in_flight = None;
            }
            let n = c.call(&[b"DBSIZE"]).unwrap().unwrap();
            let present = k.values().filter(|s| s.acked.is_some()).count();
            assert_eq!(
                String::from_utf8(n).unwrap(),
                present.to_string(),
                "round {round}: no stray keys"
            );
        }
        // Two writers on their own keys, until the kill.
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..2u64)
            .map(|t| {
                let keys = Arc::clone(&keys);
                let stop = Arc::clone(&stop);
                let seed = rng.next_u64();
                std::thread::spawn(move || -> u64 {
                    let mut rng = SplitMix64::new(seed);
                    let Ok(mut c) = Client::connect(port) else {
                        return 0;
                    };
                    let mut acked = 0;
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let key = format!("w{t}-k{}", rng.below(300)).into_bytes();
                        let len = [8, 100, 3000][rng.below(3) as usize];
                        let mut value = format!("r{round}-t{t}-i{i}-").into_bytes();
                        value.resize(len.max(value.len()), b'a' + (i % 26) as u8);
                        i += 1;
                        keys.lock()
                            .unwrap()
                            .entry(key.clone())
                            .or_default()
                            .in_flight = Some(value.clone());
                        match c.call(&[b"SET", &key, &value]) {
                            Ok(Some(r)) if r == b"OK" => {
                                let mut k = keys.lock().unwrap();
                                let st = k.get_mut(&key).unwrap();
                                st.acked = Some(value);
                                st.in_flight = None;
                                acked += 1;
                            }
                            _ => return acked,
                        }
                    }
                    acked
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20 + rng.below(200)));
        if round % 10 == 9 {
            // Sometimes kill right after asking for a checkpoint, so the kill can land in one.
            if let Ok(mut c) = Client::connect(port) {
                let _ = c.send(&[b"SAVE"]);
                std::thread::sleep(Duration::from_millis(rng.below(5)));
            }
        }
        server.child.kill().expect("SIGKILL");
        let _ = server.child.wait();
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            total_acked += w.join().expect("writer");
        }
    }
    assert!(
        total_acked > 500,
        "the writers got work done ({total_acked} acknowledged writes)"
    );
    // A last clean start and shutdown.
    let server = start(&dir);
    let mut c = Client::connect(server.port).unwrap();
    let _ = c.send(&[b"SHUTDOWN"]);
    let out = server.child.wait_with_output().expect("wait");
    assert!(out.status.success(), "clean shutdown exits 0");
}

/// redis-cli from Debian's redis-tools, installed if missing (the test fails if it cannot be).
fn redis_cli() -> &'static str {
    let have = |cmd: &str| {
        Command::new(cmd)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !have("redis-cli") {
        let _ = Command::new("apt-get").arg("update").output();
        let o = Command::new("apt-get")
            .args(["install", "-y", "redis-tools"])
            .output()
            .expect("run apt-get to install redis-tools");
        assert!(
            o.status.success() && have("redis-cli"),
            "cannot install redis-tools: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    "redis-cli"
}

fn cli(port: u16, args: &[&str]) -> String {
    let o = Command::new(redis_cli())
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("run redis-cli");
    assert!(
        o.status.success(),
        "redis-cli {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim_end().to_string()
}

#[test]
fn redis_cli_works_unchanged() {
    let scratch = Scratch::new("serve-redis-cli");
    let server = start(&scratch.path("store"));
    let p = server.port;
    assert_eq!(cli(p, &["PING"]), "PONG");
    assert_eq!(cli(p, &["SET", "greeting", "hello"]), "OK");
    assert_eq!(cli(p, &["GET", "greeting"]), "hello");
    assert_eq!(cli(p, &["APPEND", "greeting", " world"]), "11");
    assert_eq!(cli(p, &["INCRBY", "n", "41"]), "41");
    assert_eq!(cli(p, &["INCR", "n"]), "42");
    assert_eq!(cli(p, &["HSET", "h", "a", "1", "b", "2"]), "2");
    assert_eq!(cli(p, &["HGET", "h", "b"]), "2");
    assert_eq!(
        cli(p, &["ZADD", "z", "1", "one", "2", "two", "3", "three"]),
        "3"
    );
    assert_eq!(cli(p, &["ZRANGEBYSCORE", "z", "(1", "+inf"]), "two\nthree");
    assert_eq!(
        cli(
            p,
            &[
                "ZRANGEBYSCORE",
                "z",
                "-inf",
                "+inf",
                "WITHSCORES",
                "LIMIT",
                "1",
                "1"
            ]
        ),
        "two\n2"
    );
    assert_eq!(cli(p, &["TYPE", "h"]), "hash");
    assert!(cli(p, &["GET", "h"]).contains("WRONGTYPE"));
    assert_eq!(cli(p, &["DBSIZE"]), "4");
    let mut scanned: Vec<String> = cli(p, &["--scan"]).lines().map(str::to_string).collect();
    scanned.sort();
    assert_eq!(scanned, ["greeting", "h", "n", "z"]);
    assert!(cli(p, &["INFO", "persistence"]).contains("durability:always"));
    assert_eq!(cli(p, &["SAVE"]), "OK");
    assert!(cli(p, &["INFO"]).contains("checkpoints:"));
    // The data survives a clean restart.
    assert_eq!(cli(p, &["SHUTDOWN"]), "");
    let out = server.child.wait_with_output().expect("wait");
    assert!(out.status.success());
    let server = start(&scratch.path("store"));
    assert_eq!(cli(server.port, &["GET", "greeting"]), "hello world");
    let all = cli(server.port, &["HGETALL", "h"]);
    let lines: Vec<&str> = all.lines().collect();
    let mut pairs: Vec<(&str, &str)> = lines.chunks(2).map(|c| (c[0], c[1])).collect();
    pairs.sort();
    assert_eq!(pairs, [("a", "1"), ("b", "2")]);
    cli(server.port, &["SHUTDOWN"]);
    let _ = server.child.wait_with_output();
}
