//! `kavach serve` on a pool set of three member files: a member file deleted while clients
//! write loses no acknowledged write; the server keeps serving, degraded, and says so in INFO
//! and once on stderr; the pool read through the degraded set is byte-identical to the pool
//! after an offline rebuild; after a restart every key is there with the same digest of all
//! keys and values; a second member deleted while serving is rebuilt online (KAVACH REBUILD)
//! and the set is healthy again. Also: what a set refuses (fewer than three files, lazy
//! redundancy, two members lost) exits 2 and writes nothing.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Scratch, assert_code, json, kavach};
use sha2::{Digest, Sha256};

/// Small logs and few shards: a small pool, so rebuilds and digests are quick.
const STORE_ARGS: &[&str] = &["--shards", "8", "--log-mib", "1"];

/// A reply from the server.
#[derive(Debug, PartialEq)]
enum Reply {
    Line(Vec<u8>),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Reply>),
    Error(String),
}

struct Client {
    stream: BufReader<TcpStream>,
}

impl Client {
    fn connect(port: u16) -> Client {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Client {
            stream: BufReader::new(s),
        }
    }

    fn send(&mut self, args: &[&[u8]]) {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.stream.get_mut().write_all(&out).expect("send");
    }

    fn read(&mut self) -> Reply {
        let mut line = String::new();
        self.stream.read_line(&mut line).expect("reply");
        let line = line.trim_end();
        let rest = line.get(1..).unwrap_or("");
        match line.as_bytes().first() {
            Some(b'+') | Some(b':') => Reply::Line(rest.as_bytes().to_vec()),
            Some(b'-') => Reply::Error(rest.to_string()),
            Some(b'$') => {
                let n: i64 = rest.parse().expect("bulk length");
                if n < 0 {
                    return Reply::Bulk(None);
                }
                let mut b = vec![0; n as usize + 2];
                self.stream.read_exact(&mut b).expect("bulk");
                b.truncate(n as usize);
                Reply::Bulk(Some(b))
            }
            Some(b'*') => {
                let n: usize = rest.parse().expect("array length");
                Reply::Array((0..n).map(|_| self.read()).collect())
            }
            _ => panic!("unexpected reply {line:?}"),
        }
    }

    fn call(&mut self, args: &[&[u8]]) -> Reply {
        self.send(args);
        self.read()
    }

    fn get(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        match self.call(&[b"GET", key]) {
            Reply::Bulk(v) => v,
            r => panic!("GET {}: {r:?}", String::from_utf8_lossy(key)),
        }
    }

    fn info_field(&mut self, section: &str, name: &str) -> String {
        let Reply::Bulk(Some(text)) = self.call(&[b"INFO", section.as_bytes()]) else {
            panic!("INFO {section}");
        };
        let text = String::from_utf8(text).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no {name} in INFO {section}: {text}"))
            .to_string()
    }

    /// Every key (SCAN to the end), with its value, sorted by key.
    fn all(&mut self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut keys = Vec::new();
        let mut cursor = b"0".to_vec();
        loop {
            let Reply::Array(parts) = self.call(&[b"SCAN", &cursor, b"COUNT", b"500"]) else {
                panic!("SCAN");
            };
            let [Reply::Bulk(Some(next)), Reply::Array(batch)] = &parts[..] else {
                panic!("SCAN reply {parts:?}");
            };
            for k in batch {
                let Reply::Bulk(Some(k)) = k else {
                    panic!("SCAN key {k:?}")
                };
                keys.push(k.clone());
            }
            cursor = next.clone();
            if cursor == b"0" {
                break;
            }
        }
        keys.sort();
        keys.dedup();
        keys.into_iter()
            .map(|k| {
                let v = self.get(&k).expect("a scanned key has a value");
                (k, v)
            })
            .collect()
    }
}

/// SHA-256 over every key and value (length-prefixed, in key order).
fn kv_digest(all: &[(Vec<u8>, Vec<u8>)]) -> String {
    let mut h = Sha256::new();
    for (k, v) in all {
        h.update((k.len() as u64).to_le_bytes());
        h.update(k);
        h.update((v.len() as u64).to_le_bytes());
        h.update(v);
    }
    format!("{:x}", h.finalize())
}

/// SHA-256 of every byte of the pool as the set presents it (read-only; a lost member's
/// chunks are reconstructed from parity).
fn pool_digest(description: &str) -> (String, &'static str) {
    use pmem::Medium;
    let set = pmem::set::StripedSet::open_files(
        std::path::Path::new(description),
        pmem::set::SetOpenOptions {
            read_only: true,
            force: false,
        },
    )
    .expect("open the set read-only");
    let state = set.status().state;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < set.len() {
        let n = buf.len().min(set.len() - at);
        set.read(at, &mut buf[..n]);
        h.update(&buf[..n]);
        at += n;
    }
    (format!("{:x}", h.finalize()), state)
}

/// A server whose stderr is kept, line by line.
struct Server {
    child: Child,
    port: u16,
    lines: Arc<Mutex<Vec<String>>>,
}

fn spawn(dir: &str, args: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kavach"))
        .args(["serve", "--dir", dir, "--port", "0"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kavach serve");
    let err = BufReader::new(child.stderr.take().unwrap());
    let lines = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let kept = Arc::clone(&lines);
    std::thread::spawn(move || {
        for line in err.lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.split("listening on ").nth(1) {
                let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                let _ = tx.send(addr);
            }
            kept.lock().unwrap().push(line);
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("kavach serve did not listen: {:?}", lines.lock().unwrap()));
    let port = addr.rsplit(':').next().unwrap().parse().expect("port");
    Server { child, port, lines }
}

impl Server {
    fn shut_down(mut self) -> Vec<String> {
        let mut c = Client::connect(self.port);
        c.send(&[b"SHUTDOWN"]);
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "the server shut down cleanly: {status}");
        self.lines.lock().unwrap().clone()
    }

    fn stderr_count(&self, needle: &str) -> usize {
        let l = self.lines.lock().unwrap();
        l.iter().filter(|l| l.contains(needle)).count()
    }
}

fn wait_for_state(c: &mut Client, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let state = c.info_field("pool", "pool_state");
        if state == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "INFO pool_state {state}, not {want}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn value_of(t: usize, i: usize) -> Vec<u8> {
    let fill = char::from(b'a' + (i % 26) as u8);
    format!("{t}:{i}:{}", fill.to_string().repeat(10 + (i * 37) % 700)).into_bytes()
}

const WRITERS: usize = 4;

/// A writer's acknowledged (key, value) pairs, in order, and its failed writes.
type Written = (Vec<(Vec<u8>, Vec<u8>)>, Vec<String>);

/// Writers on connections of their own, each SET acknowledged with +OK recorded (key, value);
/// any other reply is counted as a failure.
struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
    threads: Vec<std::thread::JoinHandle<Written>>,
}

fn start_load(port: u16) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicUsize::new(0));
    let threads = (0..WRITERS)
        .map(|t| {
            let (stop, acked) = (Arc::clone(&stop), Arc::clone(&acked));
            std::thread::spawn(move || {
                let mut c = Client::connect(port);
                let (mut done, mut failed) = (Vec::new(), Vec::new());
                let mut i = 0;
                while !stop.load(Ordering::Acquire) {
                    // Keys are rewritten now and then: the last acknowledged value counts.
                    let key = format!("w{t}:k{}", i % 3000).into_bytes();
                    let value = value_of(t, i);
                    match c.call(&[b"SET", &key, &value]) {
                        Reply::Line(l) if l == b"OK" => {
                            done.push((key, value));
                            acked.fetch_add(1, Ordering::Relaxed);
                        }
                        r => failed.push(format!("SET: {r:?}")),
                    }
                    i += 1;
                }
                (done, failed)
            })
        })
        .collect();
    Load {
        stop,
        acked,
        threads,
    }
}

impl Load {
    fn wait_acked(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.acked.load(Ordering::Relaxed) < n {
            assert!(Instant::now() < deadline, "writers stalled");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stop; the last acknowledged value of every key written.
    fn finish(self) -> std::collections::BTreeMap<Vec<u8>, Vec<u8>> {
        self.stop.store(true, Ordering::Release);
        let mut last = std::collections::BTreeMap::new();
        let mut failures = Vec::new();
        for t in self.threads {
            let (done, failed) = t.join().expect("writer");
            failures.extend(failed);
            for (k, v) in done {
                last.insert(k, v);
            }
        }
        assert!(
            failures.is_empty(),
            "writes failed: {:?}",
            &failures[..failures.len().min(5)]
        );
        last
    }
}

fn check_acked(c: &mut Client, acked: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>) {
    for (k, v) in acked {
        assert_eq!(
            c.get(k).as_ref(),
            Some(v),
            "acknowledged write of {} lost",
            String::from_utf8_lossy(k)
        );
    }
}

fn set_info(description: &str) -> serde_json::Value {
    let o = kavach(&["pool", "info", description, "--json"]);
    assert_code(&o, 0);
    json(&o)["set"].clone()
}

#[test]
fn a_member_deleted_under_load_loses_no_acknowledged_write_and_rebuilds() {
    let s = Scratch::new("serve-set");
    let dir = s.path("store");
    let desc = format!("{dir}/kavach.pool");
    let mut args = vec!["--pool-files", "3", "--pool-chunk", "64KiB"];
    args.extend_from_slice(STORE_ARGS);
    let srv = spawn(&dir, &args);
    let mut c = Client::connect(srv.port);
    assert_eq!(c.info_field("pool", "pool_kind"), "set");
    assert_eq!(c.info_field("pool", "pool_members"), "3");
    assert_eq!(c.info_field("pool", "pool_state"), "healthy");

    // Writers run; a member file is deleted under them.
    let load = start_load(srv.port);
    load.wait_acked(3000);
    let member1 = format!("{dir}/kavach.pool.1");
    std::fs::remove_file(&member1).unwrap();
    wait_for_state(&mut c, "degraded");
    let before = load.acked.load(Ordering::Relaxed);
    load.wait_acked(before + 3000);
    let acked = load.finish();
    assert_eq!(c.info_field("pool", "pool_lost_member"), "1");
    assert!(c.info_field("pool", "pool_member1").starts_with("lost,"));
    assert!(
        c.info_field("pool", "pool_lost_reason")
            .contains("kavach.pool.1"),
        "the reason names the file"
    );

    // Served degraded: every acknowledged write reads back.
    check_acked(&mut c, &acked);
    let all = c.all();
    assert_eq!(all.len(), acked.len(), "no key besides the ones written");
    let digest = kv_digest(&all);
    drop(c);
    assert_eq!(
        srv.stderr_count("pool set degraded: member 1"),
        1,
        "logged once"
    );
    srv.shut_down();

    // Offline: the pool through the degraded set is the pool after the rebuild, byte for byte.
    let info = set_info(&desc);
    assert_eq!(info["state"], "degraded", "{info}");
    assert_eq!(info["unclean_at_open"], false, "closed cleanly: {info}");
    let (degraded_digest, state) = pool_digest(&desc);
    assert_eq!(state, "degraded");
    let new1 = format!("{dir}/new1");
    let o = kavach(&["pool", "rebuild", &desc, "--replace", &member1, &new1]);
    assert_code(&o, 0);
    let (rebuilt_digest, state) = pool_digest(&desc);
    assert_eq!(state, "healthy");
    assert_eq!(
        rebuilt_digest, degraded_digest,
        "the rebuild restored the same pool"
    );
    assert_code(&kavach(&["pool", "check", &desc]), 0);

    // Restart (no --pool-files: the description says it is a set).
    let srv = spawn(&dir, STORE_ARGS);
    let mut c = Client::connect(srv.port);
    assert_eq!(c.info_field("pool", "pool_state"), "healthy");
    assert!(c.info_field("pool", "pool_member1").ends_with("new1"));
    check_acked(&mut c, &acked);
    assert_eq!(kv_digest(&c.all()), digest, "every key and value as before");

    // Online: another member deleted while serving, rebuilt through KAVACH REBUILD.
    let load = start_load(srv.port);
    load.wait_acked(1000);
    let member0 = format!("{dir}/kavach.pool.0");
    std::fs::remove_file(&member0).unwrap();
    wait_for_state(&mut c, "degraded");
    assert_eq!(c.info_field("pool", "pool_lost_member"), "0");
    let new0 = format!("{dir}/new0");
    match c.call(&[b"KAVACH", b"REBUILD", new0.as_bytes()]) {
        Reply::Line(l) => {
            let l = String::from_utf8(l).unwrap();
            assert!(
                l.contains("rebuilt member 0") && l.ends_with("healthy"),
                "{l}"
            );
        }
        r => panic!("KAVACH REBUILD: {r:?}"),
    }
    let before = load.acked.load(Ordering::Relaxed);
    load.wait_acked(before + 500);
    let acked2 = load.finish();
    assert_eq!(c.info_field("pool", "pool_state"), "healthy");
    assert!(c.info_field("pool", "pool_member0").ends_with("new0"));
    // Nothing left to rebuild: refused.
    let r = c.call(&[b"KAVACH", b"REBUILD", format!("{dir}/new9").as_bytes()]);
    assert!(
        matches!(&r, Reply::Error(e) if e.contains("no member is lost")),
        "{r:?}"
    );
    check_acked(&mut c, &acked2);
    let all2 = c.all();
    drop(c);
    srv.shut_down();
    let info = set_info(&desc);
    assert_eq!(info["state"], "healthy", "{info}");
    assert_eq!(info["unclean_at_open"], false, "{info}");
    assert_code(&kavach(&["pool", "check", &desc]), 0);

    // And once more from the rebuilt files.
    let srv = spawn(&dir, STORE_ARGS);
    let mut c = Client::connect(srv.port);
    assert_eq!(kv_digest(&c.all()), kv_digest(&all2));
    drop(c);
    srv.shut_down();
}

fn listing(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = match std::fs::read_dir(dir) {
        Ok(r) => r
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

fn serve_refused(dir: &str, args: &[&str], needle: &str) {
    let o = Command::new(env!("CARGO_BIN_EXE_kavach"))
        .args(["serve", "--dir", dir, "--port", "0"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run kavach serve");
    assert_code(&o, 2);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(needle), "{needle} not in {err}");
}

#[test]
fn what_a_set_cannot_do_is_refused_and_writes_nothing() {
    let s = Scratch::new("serve-set-refused");
    let dir = s.path("store");
    serve_refused(&dir, &["--pool-files", "2"], "--pool-files 2");
    assert!(!std::path::Path::new(&dir).exists(), "nothing made");
    serve_refused(
        &dir,
        &["--pool-files", "3", "--redundancy", "lazy"],
        "--redundancy lazy is not available on a pool set",
    );
    assert!(!std::path::Path::new(&dir).exists(), "nothing made");
    serve_refused(
        &dir,
        &["--pool-files", "3", "--pool-chunk", "5000"],
        "--pool-chunk",
    );

    // A set with two members lost.
    let mut args = vec!["--pool-files", "3", "--pool-chunk", "64KiB"];
    args.extend_from_slice(STORE_ARGS);
    let srv = spawn(&dir, &args);
    let mut c = Client::connect(srv.port);
    assert_eq!(c.call(&[b"SET", b"k", b"v"]), Reply::Line(b"OK".to_vec()));
    drop(c);
    srv.shut_down();
    let d = std::path::Path::new(&dir);
    std::fs::remove_file(d.join("kavach.pool.0")).unwrap();
    std::fs::remove_file(d.join("kavach.pool.2")).unwrap();
    let before = listing(d);
    let stamp = std::fs::metadata(d.join("kavach.pool.1"))
        .unwrap()
        .modified()
        .unwrap();
    let bytes = std::fs::read(d.join("kavach.pool.1")).unwrap();
    serve_refused(&dir, STORE_ARGS, "a set survives the loss of one");
    assert_eq!(listing(d), before);
    assert_eq!(
        std::fs::read(d.join("kavach.pool.1")).unwrap(),
        bytes,
        "nothing written"
    );
    assert_eq!(
        std::fs::metadata(d.join("kavach.pool.1"))
            .unwrap()
            .modified()
            .unwrap(),
        stamp
    );

    // --pool-files on a single-file store.
    let single = s.path("single");
    let srv = spawn(&single, STORE_ARGS);
    srv.shut_down();
    serve_refused(&single, &["--pool-files", "3"], "single pool file");
    // KAVACH REBUILD on a single-file store is refused.
    let srv = spawn(&single, STORE_ARGS);
    let mut c = Client::connect(srv.port);
    let r = c.call(&[b"KAVACH", b"REBUILD", b"/nonexistent/x"]);
    assert!(
        matches!(&r, Reply::Error(e) if e.contains("not a pool set")),
        "{r:?}"
    );
    assert_eq!(c.info_field("pool", "pool_kind"), "file");
    drop(c);
    srv.shut_down();
}

/// Eager redundancy stacks on a set: the page checksums inside the pool stay clean while the
/// set serves degraded, and the store keeps its mode across a restart.
#[test]
fn eager_redundancy_on_a_degraded_set_scrubs_clean() {
    let s = Scratch::new("serve-set-eager");
    let dir = s.path("store");
    let mut args = vec!["--pool-files", "3", "--redundancy", "eager"];
    args.extend_from_slice(STORE_ARGS);
    let srv = spawn(&dir, &args);
    let mut c = Client::connect(srv.port);
    assert_eq!(c.info_field("integrity", "redundancy"), "eager");
    for i in 0..300 {
        let key = format!("k{i}");
        assert_eq!(
            c.call(&[b"SET", key.as_bytes(), &value_of(0, i)]),
            Reply::Line(b"OK".to_vec())
        );
    }
    std::fs::remove_file(format!("{dir}/kavach.pool.2")).unwrap();
    wait_for_state(&mut c, "degraded");
    for i in 300..600 {
        let key = format!("k{i}");
        assert_eq!(
            c.call(&[b"SET", key.as_bytes(), &value_of(0, i)]),
            Reply::Line(b"OK".to_vec())
        );
    }
    let Reply::Bulk(Some(report)) = c.call(&[b"KAVACH", b"SCRUB"]) else {
        panic!("KAVACH SCRUB");
    };
    let report: serde_json::Value = serde_json::from_slice(&report).unwrap();
    assert_eq!(report["clean"], true, "{report}");
    assert!(
        report["report"]["pages_checked"].as_u64().unwrap() > 0,
        "{report}"
    );
    drop(c);
    srv.shut_down();
    let srv = spawn(&dir, STORE_ARGS);
    let mut c = Client::connect(srv.port);
    assert_eq!(c.info_field("integrity", "redundancy"), "eager");
    assert_eq!(c.info_field("pool", "pool_state"), "degraded");
    for i in 0..600 {
        assert_eq!(
            c.get(format!("k{i}").as_bytes()),
            Some(value_of(0, i)),
            "k{i}"
        );
    }
    drop(c);
    srv.shut_down();
}
