//! `kavach pool tune` and the tuning lines of `kavach pool info`: the choices in force and
//! where each came from, overrides honoured, a bad override or cache file warned about and
//! never fatal.

mod common;

use common::Scratch;
use std::process::{Command, Output};

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kavach"));
    c.args(args)
        .env_remove("KAVACH_TUNE")
        .env_remove("KAVACH_FLUSH");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run kavach")
}

fn json(o: &Output) -> serde_json::Value {
    assert_eq!(
        o.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&o.stdout)))
}

#[test]
fn tune_shows_overrides_as_overrides() {
    let o = run(
        &["pool", "tune", "--json"],
        &[
            (
                "KAVACH_TUNE",
                "nt_min=4096,crc_fold_min=never,flush=clflush,stream_sync=off",
            ),
            ("KAVACH_TUNE_CACHE", "off"),
        ],
    );
    let v = json(&o);
    assert_eq!(v["nt_min"], 4096);
    assert_eq!(v["nt_min_source"], "override");
    assert_eq!(v["crc_fold_min"], serde_json::Value::Null, "never");
    assert_eq!(v["flush"], "clflush");
    assert_eq!(v["flush_source"], "override");
    assert_eq!(v["stream_sync"], false);
    assert_eq!(v["stream_sync_source"], "override");
    assert!(v["cpu"]["vendor"].is_string());
    // The same in words: a strategy no size uses is "never", not "from never".
    let o = run(
        &["pool", "tune"],
        &[
            (
                "KAVACH_TUNE",
                "nt_min=never,crc_fold_min=never,stream_sync=on",
            ),
            ("KAVACH_TUNE_CACHE", "off"),
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("non-temporal copies: never (override); folding CRC: never (override)"),
        "{out}"
    );
    assert!(
        out.contains("; streamed sync records: yes (override)"),
        "{out}"
    );
    assert!(!out.contains("from never"), "{out}");
}

#[test]
fn off_gives_the_defaults_and_kavach_flush_still_counts() {
    let v = json(&run(
        &["pool", "tune", "--json"],
        &[("KAVACH_TUNE", "off"), ("KAVACH_FLUSH", "clflush")],
    ));
    assert_eq!(v["nt_min"], 1024);
    assert_eq!(v["nt_min_source"], "default");
    // Every x86-64 has SSE2, so the default streams records forced at once.
    assert_eq!(v["stream_sync"], true);
    assert_eq!(v["stream_sync_source"], "default");
    assert_eq!(v["flush"], "clflush");
    assert_eq!(v["flush_source"], "override");
}

#[test]
fn a_garbled_cache_file_is_warned_about_recalibrated_and_rewritten() {
    let s = Scratch::new("tune-cache");
    let cache = s.path("tune");
    std::fs::write(&cache, "kavach-tune 1\nnonsense\n").expect("garble");
    let o = run(
        &["pool", "tune", "--json"],
        &[("KAVACH_TUNE_CACHE", &cache)],
    );
    let v = json(&o);
    assert_eq!(v["nt_min_source"], "calibrated");
    let warnings = v["warnings"].as_array().expect("warnings");
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap_or("").contains("line 2")),
        "{warnings:?}"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("warning"));
    let text = std::fs::read_to_string(&cache).expect("rewritten");
    assert!(text.starts_with("kavach-tune 2\n"), "{text}");
    // The next process takes the file.
    let v = json(&run(
        &["pool", "tune", "--json"],
        &[("KAVACH_TUNE_CACHE", &cache)],
    ));
    assert_eq!(v["nt_min_source"], "cached");
    assert_eq!(v["warnings"].as_array().map(Vec::len), Some(0));
}

#[test]
fn a_cache_file_without_stream_sync_is_recalibrated_and_rewritten_without_a_warning() {
    let s = Scratch::new("tune-old-cache");
    let cache = s.path("tune");
    let env = [("KAVACH_TUNE_CACHE", cache.as_str())];
    let o = run(&["pool", "tune", "--recalibrate"], &env);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    // The file as a build from before stream_sync wrote it: format 1, ending at `flush`.
    let text = std::fs::read_to_string(&cache).expect("written");
    let old: String = text
        .replace("kavach-tune 2\n", "kavach-tune 1\n")
        .lines()
        .filter(|l| !l.starts_with("stream_sync "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(old.starts_with("kavach-tune 1\n"), "{old}");
    assert_ne!(old, text, "{text}");
    assert!(
        old.trim_end()
            .lines()
            .last()
            .unwrap_or("")
            .starts_with("flush "),
        "{old}"
    );
    std::fs::write(&cache, &old).expect("old file");
    let o = run(&["pool", "tune", "--json"], &env);
    let v = json(&o);
    assert_eq!(v["stream_sync_source"], "calibrated");
    assert_eq!(v["nt_min_source"], "calibrated");
    assert_eq!(v["warnings"].as_array().map(Vec::len), Some(0), "{v}");
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("warning"),
        "{o:?}"
    );
    let text = std::fs::read_to_string(&cache).expect("rewritten");
    assert!(text.contains("\nstream_sync "), "{text}");
    let v = json(&run(&["pool", "tune", "--json"], &env));
    assert_eq!(v["stream_sync_source"], "cached");
}

#[test]
fn another_builds_entry_is_kept_beside_this_builds() {
    let s = Scratch::new("tune-two-builds");
    let cache = s.path("tune");
    let env = [("KAVACH_TUNE_CACHE", cache.as_str())];
    let o = run(&["pool", "tune", "--recalibrate"], &env);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    // Only another build's entry for this CPU (as a release binary finds a test run's).
    let text = std::fs::read_to_string(&cache).expect("written");
    let version = text
        .lines()
        .find(|l| l.starts_with("version "))
        .expect("a version line")
        .to_string();
    let other = text
        .replace(&version, "version 9.9.9-other")
        .replace("\nnt_min ", "\nnt_min 64\n# was ");
    std::fs::write(&cache, &other).expect("the other build's file");
    let v = json(&run(&["pool", "tune", "--json"], &env));
    assert_eq!(v["nt_min_source"], "calibrated", "no entry for this build");
    assert_eq!(v["warnings"].as_array().map(Vec::len), Some(0), "{v}");
    // Both entries now, this build's first; each build finds its own from now on.
    let both = std::fs::read_to_string(&cache).expect("rewritten");
    assert_eq!(both.matches("\ncpu ").count(), 2, "{both}");
    let mine = both
        .find(&format!("\n{version}\n"))
        .expect("this build's entry");
    let theirs = both
        .find("\nversion 9.9.9-other\nnt_min 64\n")
        .expect("the other's");
    assert!(mine < theirs, "{both}");
    let v = json(&run(&["pool", "tune", "--json"], &env));
    assert_eq!(v["nt_min_source"], "cached");
}

#[test]
fn a_bad_stream_sync_override_is_a_warning_like_the_others() {
    let o = run(
        &["pool", "tune", "--json"],
        &[
            ("KAVACH_TUNE", "flush=clflush,stream_sync=maybe"),
            ("KAVACH_TUNE_CACHE", "off"),
        ],
    );
    let v = json(&o);
    let warnings = v["warnings"].as_array().expect("warnings");
    assert!(
        warnings.iter().any(|w| {
            let w = w.as_str().unwrap_or("");
            w.contains("KAVACH_TUNE: item 2") && w.contains("stream_sync=on or off")
        }),
        "{warnings:?}"
    );
    // The whole of KAVACH_TUNE is ignored, as for the other keys' bad values.
    assert_eq!(v["flush_source"], "calibrated");
    assert_eq!(v["stream_sync_source"], "calibrated");
    assert!(String::from_utf8_lossy(&o.stderr).contains("stream_sync=maybe"));
}

#[test]
fn a_bad_override_is_ignored_with_a_warning_naming_it() {
    let o = run(
        &["pool", "tune"],
        &[("KAVACH_TUNE", "nt_min=lots"), ("KAVACH_TUNE_CACHE", "off")],
    );
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("KAVACH_TUNE: item 1"), "{out}");
    // The calibration decides the words after it ("from N bytes" or ": never").
    assert!(out.contains("tuning      non-temporal copies"), "{out}");
}

#[test]
fn pool_info_shows_the_tuning_in_force() {
    let s = Scratch::new("tune-info");
    let p = s.path("a.pool");
    let env = [
        (
            "KAVACH_TUNE",
            "nt_min=2048,crc_fold_min=512,stream_sync=off",
        ),
        ("KAVACH_TUNE_CACHE", "off"),
    ];
    let o = run(&["pool", "create", &p, "--size", "1MiB"], &env);
    assert_eq!(o.status.code(), Some(0));
    let v = json(&run(&["pool", "info", &p, "--json"], &env));
    assert_eq!(v["tuning"]["nt_min"], 2048);
    assert_eq!(v["tuning"]["crc_fold_min"], 512);
    assert_eq!(v["tuning"]["crc_fold_min_source"], "override");
    assert_eq!(v["tuning"]["stream_sync"], false);
    assert_eq!(v["tuning"]["stream_sync_source"], "override");
    let o = run(&["pool", "info", &p], &env);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(
            "non-temporal copies from 2048 bytes (override); folding CRC from 512 bytes (override)"
        ),
        "{out}"
    );
    assert!(
        out.contains("streamed sync records: no (override)"),
        "{out}"
    );
}

#[test]
fn help_names_the_choices_and_the_exit_codes() {
    let o = run(&["pool", "tune", "--help"], &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    for want in [
        "nt_min",
        "crc_fold_min",
        "stream_sync",
        "KAVACH_TUNE=off",
        "Exit status",
        "--recalibrate",
    ] {
        assert!(out.contains(want), "{want} missing from:\n{out}");
    }
}

#[test]
fn recalibrate_exits_2_when_the_cache_cannot_be_written_and_0_when_it_can() {
    let s = Scratch::new("tune-recal");
    // A path under a regular file cannot be created.
    let file = s.path("plain");
    std::fs::write(&file, b"x").expect("file");
    let bad = format!("{file}/tune");
    let o = run(
        &["pool", "tune", "--recalibrate"],
        &[("KAVACH_TUNE_CACHE", &bad)],
    );
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot write the tuning cache"));
    let good = s.path("tune");
    let v = json(&run(
        &["pool", "tune", "--recalibrate", "--json"],
        &[("KAVACH_TUNE_CACHE", &good)],
    ));
    assert_eq!(v["cache_written"], true);
    assert_eq!(v["tuning"]["nt_min_source"], "calibrated");
    assert_eq!(
        v["measured_ns"]["copy_temporal_ns"]
            .as_array()
            .map(Vec::len),
        Some(11)
    );
    let rec = &v["measured_ns"]["record_streamed_ns"];
    assert_eq!(rec.as_array().map(Vec::len), Some(2), "{rec}");
    assert_eq!(v["record_payload_sizes"], serde_json::json!([64, 256]));
    assert!(v["tuning"]["stream_sync"].is_boolean());
    assert_eq!(v["tuning"]["stream_sync_source"], "calibrated");
    // In words: both record rows, at both payload sizes.
    let o = run(
        &["pool", "tune", "--recalibrate"],
        &[("KAVACH_TUNE_CACHE", &good)],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    for want in ["ordinary record+", "streamed record+fence", "payload bytes"] {
        assert!(out.contains(want), "{want} missing from:\n{out}");
    }
    assert!(
        std::fs::read_to_string(&good)
            .expect("written")
            .starts_with("kavach-tune 2\n")
    );
}
