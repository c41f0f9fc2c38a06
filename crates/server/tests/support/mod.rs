//! Test scaffolding shared by the integration tests: a reference [`Backend`] and helpers to start
//! a server on port 0 and talk to it over `std::net::TcpStream`.
//!
//! [`ReferenceBackend`] is NOT a store: it is a `Mutex<HashMap>` that implements the contract in
//! `src/backend.rs` as literally as possible (Redis type rules, WRONGTYPE, expiry via
//! `SetOptions::expire_at_ms`, SCAN's "every key present for the whole scan is returned at least
//! once") so that the server's replies can be checked byte for byte.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use server::backend::{Backend, BackendError, BackendResult, Bytes, InfoSection, SetOptions};
use server::resp::{Limits, Reply, parse_reply};
use server::{Config, RunSummary, Server, ShutdownHandle};

/// Generous guard against a hung test; no test relies on timing.
pub const IO_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, Clone)]
enum Value {
    Str(Bytes),
    Hash(HashMap<Bytes, Bytes>),
    Zset(HashMap<Bytes, f64>),
}

impl Value {
    fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::Hash(_) => "hash",
            Value::Zset(_) => "zset",
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    value: Value,
    expire_at_ms: Option<i64>,
}

/// The reference backend (test scaffolding; see the module documentation).
#[derive(Debug, Default)]
pub struct ReferenceBackend {
    /// The data model the generic commands run on.
    keyspace: model::MemoryKeyspace,
    map: Mutex<HashMap<Bytes, Entry>>,
    shutdown_calls: AtomicUsize,
    save_calls: AtomicUsize,
    sync_calls: AtomicUsize,
    /// `sync` fails while set (a store that cannot make its writes durable).
    pub fail_sync: AtomicBool,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// FNV-1a: a fixed hash that orders keys for SCAN cursors.
fn key_hash(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

impl ReferenceBackend {
    /// A fresh, empty backend.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// How many times `shutdown` was called.
    pub fn shutdown_calls(&self) -> usize {
        self.shutdown_calls.load(Ordering::SeqCst)
    }

    /// How many times `save` was called.
    pub fn save_calls(&self) -> usize {
        self.save_calls.load(Ordering::SeqCst)
    }

    pub fn sync_calls(&self) -> usize {
        self.sync_calls.load(Ordering::SeqCst)
    }

    /// Runs `f` in a transaction of the data model on `key` of database 0: WRONGTYPE unless
    /// the key is absent or a sorted set.
    fn on_zset<T: Default>(
        &self,
        key: &[u8],
        write: bool,
        f: impl FnOnce(&mut dyn model::Txn) -> model::ModelResult<T>,
    ) -> BackendResult<T> {
        use model::Keyspace as _;
        let scope = [(0, key)];
        let mut f = Some(f);
        let mut out = Ok(T::default());
        self.keyspace
            .transact(model::Scope::Keys(&scope), write, &mut |t| {
                match t.kind(0, key) {
                    None | Some(model::Kind::ZSet) => {}
                    Some(_) => {
                        out = Err(BackendError::WrongType);
                        return Ok(());
                    }
                }
                if let Some(f) = f.take() {
                    out = Ok(f(t)?);
                }
                Ok(())
            })
            .map_err(|e| BackendError::Failed(e.to_string()))?;
        out
    }

    /// Runs `f` on the live (unexpired) map.
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<Bytes, Entry>) -> T) -> T {
        let mut map = self.map.lock().unwrap();
        let now = now_ms();
        map.retain(|_, e| e.expire_at_ms.is_none_or(|at| at > now));
        f(&mut map)
    }
}

impl Backend for ReferenceBackend {
    fn keyspace(&self) -> Option<&dyn model::Keyspace> {
        Some(&self.keyspace)
    }

    fn set(&self, key: &[u8], value: &[u8], opts: &SetOptions) -> BackendResult<bool> {
        self.with(|m| {
            let exists = m.contains_key(key);
            if (opts.only_if_absent && exists) || (opts.only_if_present && !exists) {
                return Ok(false);
            }
            m.insert(
                key.to_vec(),
                Entry {
                    value: Value::Str(value.to_vec()),
                    expire_at_ms: opts.expire_at_ms,
                },
            );
            Ok(true)
        })
    }

    fn mset(&self, pairs: &[(&[u8], &[u8])]) -> BackendResult<()> {
        self.with(|m| {
            for (k, v) in pairs {
                m.insert(
                    k.to_vec(),
                    Entry {
                        value: Value::Str(v.to_vec()),
                        expire_at_ms: None,
                    },
                );
            }
            Ok(())
        })
    }

    fn del(&self, keys: &[&[u8]]) -> BackendResult<u64> {
        self.with(|m| Ok(keys.iter().filter(|k| m.remove(**k).is_some()).count() as u64))
    }

    fn incr_by(&self, key: &[u8], delta: i64) -> BackendResult<i64> {
        self.with(|m| {
            let (current, expire_at_ms) = match m.get(key) {
                None => (0, None),
                Some(Entry {
                    value: Value::Str(v),
                    expire_at_ms,
                }) => {
                    let n = std::str::from_utf8(v)
                        .ok()
                        .and_then(|s| s.parse::<i64>().ok())
                        .ok_or(BackendError::NotInteger)?;
                    (n, *expire_at_ms)
                }
                Some(_) => return Err(BackendError::WrongType),
            };
            let next = current.checked_add(delta).ok_or(BackendError::Overflow)?;
            m.insert(
                key.to_vec(),
                Entry {
                    value: Value::Str(next.to_string().into_bytes()),
                    expire_at_ms,
                },
            );
            Ok(next)
        })
    }

    fn append(&self, key: &[u8], value: &[u8]) -> BackendResult<u64> {
        self.with(|m| match m.get_mut(key) {
            None => {
                m.insert(
                    key.to_vec(),
                    Entry {
                        value: Value::Str(value.to_vec()),
                        expire_at_ms: None,
                    },
                );
                Ok(value.len() as u64)
            }
            Some(Entry {
                value: Value::Str(v),
                ..
            }) => {
                v.extend_from_slice(value);
                Ok(v.len() as u64)
            }
            Some(_) => Err(BackendError::WrongType),
        })
    }

    fn hset(&self, key: &[u8], pairs: &[(&[u8], &[u8])]) -> BackendResult<u64> {
        self.with(|m| {
            let entry = m.entry(key.to_vec()).or_insert(Entry {
                value: Value::Hash(HashMap::new()),
                expire_at_ms: None,
            });
            let Value::Hash(h) = &mut entry.value else {
                return Err(BackendError::WrongType);
            };
            Ok(pairs
                .iter()
                .filter(|(f, v)| h.insert(f.to_vec(), v.to_vec()).is_none())
                .count() as u64)
        })
    }

    fn hdel(&self, key: &[u8], fields: &[&[u8]]) -> BackendResult<u64> {
        self.with(|m| {
            let (removed, empty) = match m.get_mut(key).map(|e| &mut e.value) {
                None => return Ok(0),
                Some(Value::Hash(h)) => (
                    fields.iter().filter(|f| h.remove(**f).is_some()).count(),
                    h.is_empty(),
                ),
                Some(_) => return Err(BackendError::WrongType),
            };
            if empty {
                m.remove(key);
            }
            Ok(removed as u64)
        })
    }

    // The sorted-set methods the server still calls work on the data model (database 0), so
    // that they see the keys the keyspace commands wrote and the other way round.
    fn zadd(&self, key: &[u8], members: &[(f64, &[u8])]) -> BackendResult<u64> {
        assert!(
            members.iter().all(|(s, _)| !s.is_nan()),
            "the server must reject NaN"
        );
        self.on_zset(key, true, |t| {
            let added = members
                .iter()
                .map(|(_, m)| *m)
                .filter(|m| t.zset_score(0, key, m).is_none())
                .collect::<std::collections::HashSet<_>>()
                .len() as u64;
            let effect = model::Effect::ZAdd {
                db: 0,
                key: key.to_vec(),
                members: members.iter().map(|(s, m)| (*s, m.to_vec())).collect(),
            };
            t.apply(vec![effect]).map(|()| added)
        })
    }

    fn zrem(&self, key: &[u8], members: &[&[u8]]) -> BackendResult<u64> {
        self.on_zset(key, true, |t| {
            let removed = members
                .iter()
                .filter(|m| t.zset_score(0, key, m).is_some())
                .collect::<std::collections::HashSet<_>>()
                .len() as u64;
            let effect = model::Effect::ZRem {
                db: 0,
                key: key.to_vec(),
                members: members.iter().map(|m| m.to_vec()).collect(),
            };
            t.apply(vec![effect]).map(|()| removed)
        })
    }

    fn flushall(&self) -> BackendResult<()> {
        self.with(|m| m.clear());
        Ok(())
    }

    fn save(&self) -> BackendResult<()> {
        self.save_calls.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn sync(&self) -> BackendResult<()> {
        self.sync_calls.fetch_add(1, Ordering::SeqCst);
        if self.fail_sync.load(Ordering::SeqCst) {
            return Err(BackendError::Failed("the log force failed".into()));
        }
        Ok(())
    }

    fn info(&self) -> Vec<InfoSection> {
        // The Keyspace section is the server's own, read through the data model.
        vec![
            (
                "Persistence".to_string(),
                vec![("checkpoints".to_string(), self.save_calls().to_string())],
            ),
            (
                "Integrity".to_string(),
                vec![("scrub_errors".to_string(), "0".to_string())],
            ),
        ]
    }

    fn shutdown(&self) -> BackendResult<()> {
        if self.shutdown_calls.fetch_add(1, Ordering::SeqCst) == 0 {
            Ok(())
        } else {
            Err(BackendError::Failed("already shut down".into()))
        }
    }
}

/// A server running on a background thread.
pub struct TestServer {
    pub addr: SocketAddr,
    pub handle: ShutdownHandle,
    pub backend: Arc<ReferenceBackend>,
    thread: Option<JoinHandle<io::Result<RunSummary>>>,
}

impl TestServer {
    /// Starts a server on 127.0.0.1, port 0, with the given adjustments to the default config.
    pub fn start(adjust: impl FnOnce(&mut Config)) -> TestServer {
        let backend = ReferenceBackend::new();
        let mut config = Config {
            port: 0,
            workers: 2,
            ..Config::default()
        };
        adjust(&mut config);
        let server = Server::bind(config, backend.clone()).expect("bind");
        let addr = server.local_addr();
        let handle = server.handle();
        let thread = std::thread::spawn(move || server.run());
        TestServer {
            addr,
            handle,
            backend,
            thread: Some(thread),
        }
    }

    /// A server with the default config (port 0, two workers).
    pub fn default_config() -> TestServer {
        Self::start(|_| {})
    }

    /// A connected client.
    pub fn client(&self) -> Client {
        Client::connect(self.addr)
    }

    /// Waits for `run` to return (after a shutdown was requested some other way).
    pub fn join(&mut self) -> RunSummary {
        let thread = self.thread.take().expect("joined twice");
        // Guard: the test harness would otherwise hang forever on a bug.
        let deadline = std::time::Instant::now() + IO_TIMEOUT;
        while !thread.is_finished() {
            assert!(std::time::Instant::now() < deadline, "server did not stop");
            std::thread::sleep(Duration::from_millis(5));
        }
        thread
            .join()
            .expect("server thread panicked")
            .expect("run failed")
    }

    /// Shuts down through the handle and waits for `run` to return.
    pub fn stop(mut self) -> RunSummary {
        self.handle.shutdown();
        self.join()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.handle.shutdown();
        }
    }
}

/// A blocking RESP client over `std::net::TcpStream`.
pub struct Client {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

/// Encodes a request as a multibulk frame.
pub fn frame(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Splits a command line on spaces (test convenience; no quoting).
pub fn words(line: &str) -> Vec<&[u8]> {
    line.split(' ')
        .filter(|w| !w.is_empty())
        .map(str::as_bytes)
        .collect()
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    pub fn send(&mut self, args: &[&[u8]]) {
        self.send_raw(&frame(args));
    }

    /// Reads one reply and returns its exact bytes.
    pub fn read_reply_bytes(&mut self) -> Vec<u8> {
        loop {
            match parse_reply(&self.buf, &Limits::default()).expect("malformed reply") {
                Some((_, used)) => return self.buf.drain(..used).collect(),
                None => {
                    let mut chunk = [0u8; 65536];
                    let n = self.stream.read(&mut chunk).expect("read reply");
                    assert!(
                        n > 0,
                        "connection closed while waiting for a reply: {:?}",
                        String::from_utf8_lossy(&self.buf)
                    );
                    self.buf.extend_from_slice(&chunk[..n]);
                }
            }
        }
    }

    /// Reads one reply.
    pub fn read_reply(&mut self) -> Reply {
        let bytes = self.read_reply_bytes();
        parse_reply(&bytes, &Limits::default()).unwrap().unwrap().0
    }

    /// Sends a command (words split on spaces) and returns the reply's bytes.
    pub fn call(&mut self, line: &str) -> Vec<u8> {
        self.send(&words(line));
        self.read_reply_bytes()
    }

    /// Sends a command given as separate arguments and returns the reply's bytes.
    pub fn call_args(&mut self, args: &[&[u8]]) -> Vec<u8> {
        self.send(args);
        self.read_reply_bytes()
    }

    /// Reads until the server closes the connection; returns everything read (after any
    /// buffered bytes). Panics if the connection stays open past the guard timeout.
    pub fn read_to_close(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        let mut chunk = [0u8; 65536];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return out,
                Ok(n) => out.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return out,
                Err(e) => panic!("waiting for close: {e}"),
            }
        }
    }
}

/// Shows reply bytes readably in assertion messages.
pub fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).replace("\r\n", "\\r\\n")
}

/// Asserts that `line` gets exactly `expected` back.
#[track_caller]
pub fn expect(client: &mut Client, line: &str, expected: &str) {
    let got = client.call(line);
    assert_eq!(show(&got), show(expected.as_bytes()), "command: {line}");
}

/// Every command the server implements, lower case.
pub const COMMANDS: &[&str] = &[
    "ping",
    "echo",
    "select",
    "quit",
    "hello",
    "client",
    "command",
    "config",
    "get",
    "set",
    "del",
    "exists",
    "mget",
    "mset",
    "incr",
    "decr",
    "incrby",
    "decrby",
    "append",
    "strlen",
    "hset",
    "hmset",
    "hget",
    "hmget",
    "hgetall",
    "hdel",
    "zadd",
    "zrem",
    "zrangebyscore",
    "type",
    "dbsize",
    "flushall",
    "scan",
    "info",
    "save",
    "shutdown",
    // The keys, strings and hashes families.
    "copy",
    "expire",
    "expireat",
    "expiretime",
    "flushdb",
    "keys",
    "move",
    "object",
    "persist",
    "pexpire",
    "pexpireat",
    "pexpiretime",
    "pttl",
    "randomkey",
    "rename",
    "renamenx",
    "swapdb",
    "touch",
    "ttl",
    "unlink",
    "bitcount",
    "bitop",
    "bitpos",
    "getbit",
    "getdel",
    "getex",
    "getrange",
    "getset",
    "incrbyfloat",
    "lcs",
    "msetnx",
    "psetex",
    "setbit",
    "setex",
    "setnx",
    "setrange",
    "substr",
    "hexists",
    "hincrby",
    "hincrbyfloat",
    "hkeys",
    "hlen",
    "hrandfield",
    "hscan",
    "hsetnx",
    "hstrlen",
    "hvals",
];
