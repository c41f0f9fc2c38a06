//! Quality of service through the target, as processes: `kavach target serve --qos drr` with an
//! emulated device, and three `kavach target load` processes under `ionice -c1`, `-c2 -n0` and
//! `-c3`, which know nothing of tenants: their bandwidth comes out in the weights' ratio 4:2:1.
//! `kavach target stats` names the tenants and their classes.

mod common;

use common::{Scratch, ensure_tool};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Start `kavach target serve --dir DIR --listen 127.0.0.1:0 --json ARGS`: the child and its
/// address.
fn start(dir: &str, args: &[&str]) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kavach"))
        .args([
            "target",
            "serve",
            "--dir",
            dir,
            "--listen",
            "127.0.0.1:0",
            "--json",
        ])
        .args(args)
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
    let event: serde_json::Value =
        serde_json::from_str(&first).unwrap_or_else(|e| panic!("{e}: {first:?}"));
    assert_eq!(event["event"], "listening", "{first}");
    let addr = event["listen"].as_str().expect("listen").to_string();
    child.stdout = Some(out.into_inner());
    (child, addr)
}

/// SIGTERM and wait for a clean exit.
fn stop(mut child: Child) {
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
}

/// `ionice IONICE kavach target load ADDR --job JOB ... --start-at AT --json`, started (not
/// waited for).
fn load(ionice: &[&str], addr: &str, job: &str, seconds: &str, at: &str) -> Child {
    Command::new("ionice")
        .args(ionice)
        .arg(env!("CARGO_BIN_EXE_kavach"))
        .args(["target", "load", addr, "--job", job, "--size", "4k"])
        .args(["--depth", "8", "--seconds", seconds, "--read", "--json"])
        .args(["--start-at", at])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ionice kavach target load")
}

/// `kavach target stats ADDR --json`.
fn stats(addr: &str) -> serde_json::Value {
    let o = Command::new(env!("CARGO_BIN_EXE_kavach"))
        .args(["target", "stats", addr, "--json"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("stats JSON")
}

/// The tenant `name` of a STATS document.
fn tenant<'a>(stats: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    stats["tenants"]
        .as_array()
        .expect("tenants")
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tenant {name}: {stats}"))
}

fn report(child: Child, what: &str) -> serde_json::Value {
    let o = child.wait_with_output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{what}: {e}: {}", String::from_utf8_lossy(&o.stdout)))
}

#[test]
fn ionice_classes_get_bandwidth_in_the_configured_ratio_through_the_target() {
    ensure_tool("ionice", "util-linux");
    let s = Scratch::new("qos");
    let dir = s.path("ns");
    std::fs::create_dir(&dir).unwrap();
    // Two units of some 2 ms a request: about 1000 requests a second, far below what the
    // CPUs can carry, so the emulated device is the bottleneck the arbiter divides.
    let (server, addr) = start(
        &dir,
        &[
            "--qos",
            "drr",
            "--weights",
            "128k,64k,32k",
            "--emulate",
            "units=2,base-us=2000,mbps=100",
        ],
    );
    // The three start together: processes take a while to start on a busy machine, and a
    // tenant running alone has the whole device.
    let start_in = Duration::from_millis(1500);
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        + start_in;
    let at = format!("{:.3}", at.as_secs_f64());
    let begun = Instant::now();
    let seconds = "5";
    let hi = load(&["-c1"], &addr, "Hi", seconds, &at);
    let mid = load(&["-c2", "-n0"], &addr, "mid", seconds, &at);
    let lo = load(&["-c3"], &addr, "lo", seconds, &at);
    // While all three run: the target's own byte counts over three seconds in the middle,
    // and the tenants named with their classes.
    std::thread::sleep((start_in + Duration::from_secs(1)).saturating_sub(begun.elapsed()));
    let first = stats(&addr);
    std::thread::sleep(Duration::from_secs(3));
    let last = stats(&addr);
    assert_eq!(last["qos"], "on", "{last}");
    assert_eq!(last["policy"], "drr", "{last}");
    assert_eq!(tenant(&last, "Hi")["class"], "high");
    assert_eq!(tenant(&last, "mid")["class"], "medium");
    assert_eq!(tenant(&last, "lo")["class"], "low");
    let served: Vec<f64> = ["Hi", "mid", "lo"]
        .iter()
        .map(|n| {
            let b = |s: &serde_json::Value| tenant(s, n)["bytes"].as_u64().expect("bytes");
            (b(&last) - b(&first)) as f64
        })
        .collect();
    let o = Command::new(env!("CARGO_BIN_EXE_kavach"))
        .args(["target", "stats", &addr])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8_lossy(&o.stdout);
    // Tenant names as the client gave them (case kept).
    for needle in ["policy drr", "TENANT", "WAIT-P99", "Hi ", "mid ", "lo "] {
        assert!(text.contains(needle), "{needle:?} not in {text}");
    }
    let (hi, mid, lo) = (
        report(hi, "ionice -c1 load"),
        report(mid, "ionice -c2 load"),
        report(lo, "ionice -c3 load"),
    );
    stop(server);
    assert_eq!(hi["class"], "high");
    assert_eq!(mid["class"], "medium");
    assert_eq!(lo["class"], "low");
    let bw = |r: &serde_json::Value| r["bandwidth_bps"].as_f64().expect("bandwidth_bps");
    // What the target served while all three ran, and what each process saw over its run.
    for (what, h, m, l) in [
        ("served by the target", served[0], served[1], served[2]),
        ("reported by the loads", bw(&hi), bw(&mid), bw(&lo)),
    ] {
        let why = format!("{what}: high {h:.0}, medium {m:.0}, low {l:.0}");
        eprintln!("{why}: high:medium {:.3}, medium:low {:.3}", h / m, m / l);
        assert!(l > 0.0, "{why}");
        assert!(
            (1.7..=2.3).contains(&(h / m)),
            "high:medium, expected 2: {why}"
        );
        assert!(
            (1.7..=2.3).contains(&(m / l)),
            "medium:low, expected 2: {why}"
        );
    }
}

#[test]
fn stats_says_when_qos_is_off_and_serve_names_its_policy() {
    let s = Scratch::new("qos-off");
    let dir = s.path("ns");
    std::fs::create_dir(&dir).unwrap();
    let (server, addr) = start(&dir, &[]);
    let o = Command::new(env!("CARGO_BIN_EXE_kavach"))
        .args(["target", "stats", &addr])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("quality of service is off"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let o = Command::new(env!("CARGO_BIN_EXE_kavach"))
        .args(["target", "stats", &addr, "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v, serde_json::json!({ "qos": "off" }));
    stop(server);
}
