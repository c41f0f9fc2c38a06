//! `kavach target serve` as a process: clients write through `target::RemoteDevice`, the server
//! is killed with SIGKILL, restarted, and every acknowledged write is read back; SIGTERM stops
//! it cleanly (the listening and stopped lines on stdout, text or JSON); a second server on the
//! same directory is refused.

mod common;

use common::{Scratch, stderr};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};
use target::{Device, Hello, RemoteDevice, Tenant};

/// Start `kavach target serve --dir DIR --listen 127.0.0.1:0` (with `--json` if `json`); the
/// child (its stdout open after the first line) and the address its first stdout line names.
fn start_with(dir: &str, json: bool) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kavach"))
        .args(["target", "serve", "--dir", dir, "--listen", "127.0.0.1:0"])
        .args(if json { &["--json"][..] } else { &[] })
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kavach target serve");
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || for _ in BufReader::new(err).lines() {});
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let addr = if json {
        let event: serde_json::Value = serde_json::from_str(&first).expect("a JSON line");
        assert_eq!(event["event"], "listening", "{first}");
        event["listen"].as_str().expect("listen").to_string()
    } else {
        let rest = first
            .split("listening on ")
            .nth(1)
            .unwrap_or_else(|| panic!("no `listening on` in {first:?}"));
        rest.split_whitespace().next().unwrap().to_string()
    };
    assert!(
        addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"),
        "{addr}"
    );
    child.stdout = Some(out.into_inner());
    (child, addr)
}

fn start(dir: &str) -> (Child, String) {
    start_with(dir, true)
}

fn hello(job: &str, len: u64, create: bool) -> Hello {
    Hello {
        job: job.into(),
        len,
        create,
        tenant: Tenant::default(),
    }
}

const BLOCK: usize = 32 << 10;

fn block(i: u64) -> Vec<u8> {
    (0..BLOCK)
        .map(|k| (i.wrapping_mul(131) ^ (k as u64).wrapping_mul(7)) as u8)
        .collect()
}

#[test]
fn acknowledged_writes_survive_kill_9_of_the_server() {
    let s = Scratch::new("kill9");
    let dir = s.path("ns");
    std::fs::create_dir(&dir).unwrap();
    let (mut child, addr) = start(&dir);
    let blocks = 512u64;
    let dev = RemoteDevice::connect(&addr, &hello("kill9", blocks * BLOCK as u64, true))
        .expect("connect");
    assert!(dev.created());
    // A writer writes block after block and notes the last one acknowledged.
    let acked = Arc::new(AtomicI64::new(-1));
    let writer = {
        let acked = acked.clone();
        std::thread::spawn(move || {
            for i in 0..blocks {
                // Unaligned every third block: bounced and read-modify-written on the server.
                let at = i * BLOCK as u64 + if i % 3 == 2 { 1 } else { 0 };
                let data = block(i);
                let data = if i % 3 == 2 {
                    &data[..BLOCK - 1]
                } else {
                    &data[..]
                };
                if dev.write_at(at, data).is_err() {
                    return;
                }
                acked.store(i as i64, Ordering::SeqCst);
            }
        })
    };
    let start_wait = Instant::now();
    while acked.load(Ordering::SeqCst) < 40 {
        assert!(
            start_wait.elapsed() < Duration::from_secs(60),
            "the writer made no progress"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    writer.join().unwrap();
    let last = acked.load(Ordering::SeqCst);
    assert!(last >= 40);
    // Restart on the same directory: the lock died with the process.
    let (mut child, addr) = start_with(&dir, false);
    let dev = RemoteDevice::connect(&addr, &hello("kill9", 0, false)).expect("reconnect");
    assert!(!dev.created());
    assert_eq!(dev.capacity(), blocks * BLOCK as u64);
    for i in 0..=last as u64 {
        let want = block(i);
        let mut got = vec![0u8; BLOCK];
        dev.read_at(i * BLOCK as u64, &mut got).unwrap();
        let ok = if i % 3 == 2 {
            // Byte 0 of this block was written by no one (block i-1 ends before it).
            got[0] == 0 && got[1..] == want[..BLOCK - 1]
        } else {
            got == want
        };
        assert!(
            ok,
            "acknowledged block {i} of {last} is not what was written"
        );
    }
    // Blocks after the one in flight were never written.
    let mut got = vec![0u8; BLOCK];
    for i in (last as u64 + 2)..blocks {
        dev.read_at(i * BLOCK as u64, &mut got).unwrap();
        assert!(got.iter().all(|&b| b == 0), "block {i} was never written");
    }
    drop(dev);
    stop(&mut child, false);
}

/// SIGTERM, then the exit status and the last line of a clean stop (JSON or text).
fn stop(child: &mut Child, json: bool) {
    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "SIGTERM did not stop the target");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(0));
    let mut rest = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut rest).unwrap();
    if json {
        let event: serde_json::Value = serde_json::from_str(rest.trim()).expect("a JSON line");
        assert_eq!(event["event"], "stopped");
    } else {
        assert!(
            rest.starts_with("kavach: target stopped after "),
            "{rest:?}"
        );
    }
}

#[test]
fn sigterm_stops_it_cleanly_with_clients_connected_and_a_second_server_is_refused() {
    let s = Scratch::new("term");
    let dir = s.path("ns");
    std::fs::create_dir(&dir).unwrap();
    let (mut child, addr) = start(&dir);
    let dev = RemoteDevice::connect(&addr, &hello("t", 1 << 20, true)).unwrap();
    dev.write_at(0, b"before the stop").unwrap();
    let second = Command::new(env!("CARGO_BIN_EXE_kavach"))
        .args(["target", "serve", "--dir", &dir, "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(2), "{}", stderr(&second));
    assert!(
        stderr(&second).contains("another target serves"),
        "{}",
        stderr(&second)
    );
    stop(&mut child, true);
    // The connected client sees its connection end.
    assert!(dev.read_at(0, &mut [0u8; 4]).is_err());
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.contains(&"t.ns".to_string()), "{names:?}");
}
