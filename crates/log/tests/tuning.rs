//! The per-machine tuning reaches the log: the non-temporal threshold a log on a pool file uses
//! is the one `pmem::tune` reports (an override included), the simulator keeps the built-in
//! one, and the recovery iterator's shortcuts (records the opening walk checked, borrowed
//! payloads) hand out exactly what a full second check does.

use std::process::Command;
use std::time::Duration;

use log::{ForcePolicy, Log, LogFile, LogOptions, NONTEMPORAL_BYTES_MIN};
use pmem::{Medium, SimConfig, SimMedium};

mod common;
use common::Dir;

/// A log on a pool file: its threshold, and which reservations take the non-temporal path.
fn threshold_on_a_file(dir: &Dir) -> (usize, Vec<(usize, bool)>) {
    let lf =
        LogFile::create(&dir.0.join("p"), 4 << 20, "log", None, Duration::ZERO).expect("create");
    let log = lf.log();
    let mut paths = Vec::new();
    for len in [64usize, 255, 256, 1023, 1024, 4096, 65_536] {
        let r = log.reserve(len).expect("reserve");
        paths.push((len, r.is_nontemporal()));
        drop(r);
    }
    (log.nontemporal_bytes_min(), paths)
}

#[test]
fn a_log_on_a_file_uses_the_threshold_the_tuning_reports() {
    let dir = Dir::new("tuning", "inproc");
    let (min, paths) = threshold_on_a_file(&dir);
    assert_eq!(min, pmem::tune::current().choices().nt_min);
    for (len, nt) in paths {
        assert_eq!(nt, len >= min, "{len} bytes with threshold {min}");
    }
}

#[test]
fn a_log_on_the_simulator_keeps_the_built_in_threshold() {
    let len = 1 << 20;
    let log = Log::create(
        SimMedium::new(len, SimConfig::default()),
        0,
        len,
        Duration::ZERO,
    )
    .expect("create");
    assert_eq!(log.nontemporal_bytes_min(), NONTEMPORAL_BYTES_MIN);
    let r = log.reserve(NONTEMPORAL_BYTES_MIN).expect("reserve");
    assert!(r.is_nontemporal());
}

/// Run in a child process with `KAVACH_TUNE` set (see the test below); does nothing otherwise.
#[test]
fn child_reports_its_threshold() {
    if std::env::var_os("KAVACH_LOG_TUNING_CHILD").is_none() {
        return;
    }
    let dir = Dir::new("tuning", "child");
    let (min, paths) = threshold_on_a_file(&dir);
    let t = pmem::tune::current();
    println!(
        "THRESHOLD {min} SOURCE {} PATHS {:?}",
        t.nt_min_source.name(),
        paths
    );
}

fn child(tune: &str) -> String {
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "child_reports_its_threshold", "--nocapture"])
        .env("KAVACH_LOG_TUNING_CHILD", "1")
        .env("KAVACH_TUNE", tune)
        .env("KAVACH_TUNE_CACHE", "off")
        .output()
        .expect("run the child");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // On one CPU the harness runs tests on one thread and prints `test NAME ... ` before the
    // test's own output, on the same line.
    text.lines()
        .find_map(|l| l.find("THRESHOLD ").map(|at| l[at..].to_string()))
        .unwrap_or_else(|| panic!("no report in {text}"))
}

#[test]
fn an_override_in_the_environment_sets_the_threshold_a_log_uses() {
    let line = child("nt_min=256,crc_fold_min=never,flush=clflushopt");
    assert!(line.starts_with("THRESHOLD 256 SOURCE override"), "{line}");
    assert!(
        line.contains("(255, false)") && line.contains("(256, true)"),
        "{line}"
    );
    let line = child("nt_min=never,crc_fold_min=64,flush=clwb");
    assert!(
        line.starts_with(&format!("THRESHOLD {} SOURCE override", usize::MAX)),
        "{line}"
    );
    assert!(line.contains("(65536, false)"), "{line}");
    let line = child("off");
    assert!(
        line.starts_with(&format!("THRESHOLD {NONTEMPORAL_BYTES_MIN} SOURCE default")),
        "{line}"
    );
}

/// A closed log on the simulator holding records of several sizes, its region length.
fn filled() -> (Vec<u8>, usize) {
    let len = 512 << 10;
    let m = SimMedium::new(len, SimConfig::default());
    let log = Log::create(&m, 0, len, Duration::ZERO).expect("create");
    for i in 0..150usize {
        let n = [0, 1, 64, 300, 1000, 1024, 5000][i % 7];
        let payload: Vec<u8> = (0..n).map(|j| (i * 7 + j) as u8).collect();
        log.append(&payload, ForcePolicy::Sync).expect("append");
    }
    log.close().expect("close");
    let mut img = vec![0u8; len];
    m.read(0, &mut img);
    (img, len)
}

#[test]
fn the_iterator_after_open_gives_what_a_full_second_check_gives() {
    let (img, len) = filled();
    let m = SimMedium::from_image(img, SimConfig::default());
    let (log, rec) = Log::open(&m, 0, len, &LogOptions::default()).expect("open");
    assert_eq!(rec.records, 150);
    let trusted: Vec<_> = log.records().map(|r| r.expect("record")).collect();
    let rechecked: Vec<_> = log
        .records_rechecked()
        .map(|r| r.expect("record"))
        .collect();
    assert_eq!(trusted.len(), 150);
    assert_eq!(trusted, rechecked);
    let mut borrowed = Vec::new();
    let mut it = log.records();
    while let Some(r) = it.next_ref() {
        borrowed.push(r.expect("record").to_record());
    }
    assert_eq!(borrowed, rechecked);
    // Records appended after the open are checked by the iterator as before.
    log.append(b"after the open", ForcePolicy::Sync)
        .expect("append");
    let all: Vec<_> = log.records().map(|r| r.expect("record")).collect();
    assert_eq!(all.len(), 151);
    assert_eq!(all[150].payload, b"after the open");
}

#[test]
fn damage_before_the_open_is_still_found_and_a_recheck_finds_damage_after_it() {
    let (img, len) = filled();
    let m = SimMedium::from_image(img.clone(), SimConfig::default());
    let (log, _) = Log::open(&m, 0, len, &LogOptions::default()).expect("open");
    let victim = log.records().nth(40).expect("41 records").expect("record");
    drop(log);
    // Damage one payload byte of the 41st record before opening: the opening walk ends there.
    let mut bad = img;
    let at = victim.offset as usize + 40;
    bad[at] ^= 0x40;
    let m = SimMedium::from_image(bad.clone(), SimConfig::default());
    let opts = LogOptions {
        read_only: true,
        ..LogOptions::default()
    };
    let (log, rec) = Log::open(&m, 0, len, &opts).expect("open");
    assert_eq!(rec.records, 40, "{rec:?}");
    assert_eq!(log.records().count(), 40);
    // Damage after an open is a recheck's to find.
    let m = SimMedium::from_image(filled().0, SimConfig::default());
    let (log, _) = Log::open(&m, 0, len, &opts).expect("open");
    m.inject(at, &[bad[at]]).expect("inject");
    let err = log
        .records_rechecked()
        .find_map(|r| r.err())
        .expect("the recheck reports the damaged record");
    assert!(matches!(err, log::LogError::Corrupt(_)), "{err}");
}
