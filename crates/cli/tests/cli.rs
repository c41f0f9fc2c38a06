//! The `kavach` binary as a new user meets it: every command's help, the happy paths, and every
//! bad input the foundation issue lists. Each bad input must give one clear line on stderr, a
//! non-zero exit, and never a panic or a backtrace.

mod common;

use common::{Scratch, assert_refused, kavach, kavach_in, stderr, stdout};
use std::path::Path;

#[test]
fn every_command_has_help() {
    let commands: &[&[&str]] = &[
        &[],
        &["pool"],
        &["pool", "create"],
        &["pool", "info"],
        &["pool", "check"],
        &["region"],
        &["region", "create"],
        &["region", "remove"],
        &["region", "list"],
        &["fault"],
        &["fault", "flip"],
        &["fault", "snapshot"],
        &["fault", "lost-write"],
        &["fault", "misdirect"],
        &["demo"],
    ];
    for c in commands {
        let mut args = c.to_vec();
        args.push("--help");
        let o = kavach(&args);
        assert!(o.status.success(), "{c:?} --help failed: {}", stderr(&o));
        assert!(stdout(&o).contains("Usage: kavach"), "{c:?}");
    }
    assert!(stdout(&kavach(&["pool", "check", "--help"])).contains("2 the check could not run"));
}

#[test]
fn create_info_check_as_a_new_user() {
    let s = Scratch::new("happy");
    let p = s.path("a.pool");
    let o = kavach(&["pool", "create", &p, "--size", "4MiB"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("created"));
    let o = kavach(&[
        "region", "create", &p, "log", "--size", "102401", "--align", "2m",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = kavach(&["pool", "info", &p, "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("info --json is JSON");
    assert_eq!(v["size"], 4 << 20);
    assert_eq!(v["clean_shutdown"], true);
    assert_eq!(v["regions"][0]["name"], "log");
    assert_eq!(v["regions"][0]["offset"], 2 << 20);
    assert_eq!(
        v["regions"][0]["length"],
        26 * 4096,
        "rounded up to whole pages"
    );
    assert!(["adr", "msync"].contains(&v["domain"].as_str().unwrap()));
    let o = kavach(&["pool", "info", &p]);
    for field in ["uuid", "size", "domain", "regions", "shutdown    clean"] {
        assert!(
            stdout(&o).contains(field),
            "info lacks {field}: {}",
            stdout(&o)
        );
    }
    let o = kavach(&["pool", "check", &p]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("healthy"));
    let o = kavach(&["region", "remove", &p, "log"]);
    assert!(o.status.success());
    let o = kavach(&[
        "pool",
        "create",
        &s.path("e.pool"),
        "--size",
        "1M",
        "--domain",
        "eadr",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["recorded_domain"], "eadr");
}

#[test]
fn bad_inputs_get_one_line_and_a_nonzero_exit() {
    let s = Scratch::new("bad");
    let good = s.path("good.pool");
    assert!(
        kavach(&["pool", "create", &good, "--size", "1M"])
            .status
            .success()
    );

    // Sizes: too small, not a multiple of the page size.
    assert_refused(
        &kavach(&["pool", "create", &s.path("x.pool"), "--size", "4096"]),
        2,
        "too small",
    );
    assert_refused(
        &kavach(&["pool", "create", &s.path("x.pool"), "--size", "100000"]),
        2,
        "not a multiple",
    );
    assert!(!Path::new(&s.path("x.pool")).exists());
    // An existing file is not overwritten.
    assert_refused(
        &kavach(&["pool", "create", &good, "--size", "1M"]),
        2,
        "File exists",
    );
    // A missing file.
    assert_refused(
        &kavach(&["pool", "info", &s.path("missing.pool")]),
        2,
        "No such file",
    );
    assert_refused(
        &kavach(&["pool", "check", &s.path("missing.pool")]),
        2,
        "No such file",
    );
    // A file that is not a pool.
    let text = s.path("notes.txt");
    std::fs::write(&text, "just some notes\n".repeat(5000)).unwrap();
    assert_refused(&kavach(&["pool", "info", &text]), 2, "not a Kavach pool");
    assert_refused(&kavach(&["pool", "check", &text]), 2, "not a Kavach pool");
    assert_eq!(
        std::fs::read_to_string(&text).unwrap(),
        "just some notes\n".repeat(5000)
    );
    // A truncated pool.
    let trunc = s.path("trunc.pool");
    std::fs::copy(&good, &trunc).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&trunc)
        .unwrap()
        .set_len(300_000)
        .unwrap();
    assert_refused(&kavach(&["pool", "info", &trunc]), 2, "truncated");
    let o = kavach(&["pool", "check", &trunc]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("truncated") && stdout(&o).contains("does NOT open"));
    // Both header slots corrupt.
    let slots = s.path("slots.pool");
    std::fs::copy(&good, &slots).unwrap();
    for off in ["2048", "6144"] {
        assert!(
            kavach(&[
                "fault", "flip", &slots, "--offset", off, "--len", "64", "--bits", "3"
            ])
            .status
            .success()
        );
    }
    assert_refused(
        &kavach(&["pool", "info", &slots]),
        2,
        "mutable header slots",
    );
    assert_eq!(kavach(&["pool", "check", &slots]).status.code(), Some(1));
    // Bad flags: clap's own message, exit 2, still no panic.
    for args in [
        vec!["pool", "create", &good, "--size", "lots"],
        vec!["pool", "create", &good, "--size", "1M", "--domain", "pmem"],
        vec!["pool", "frobnicate"],
    ] {
        let o = kavach(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(!stderr(&o).contains("panicked"));
    }
    // Bad region and fault requests.
    assert_refused(
        &kavach(&["region", "create", &good, &"n".repeat(40), "--size", "4k"]),
        2,
        "at most 32 bytes",
    );
    assert_refused(
        &kavach(&["region", "create", &good, "r", "--size", "2G"]),
        2,
        "no space",
    );
    assert_refused(
        &kavach(&["region", "remove", &good, "nothing"]),
        2,
        "no region named",
    );
    assert_refused(
        &kavach(&["fault", "flip", &good, "--offset", "1G"]),
        2,
        "outside",
    );
    assert_refused(
        &kavach(&["fault", "lost-write", &good, "--page", "1", "--from", &text]),
        2,
        "exactly 4096",
    );
    assert_refused(
        &kavach(&["fault", "misdirect", &good, "--page", "9999", "--onto", "1"]),
        2,
        "outside",
    );
}

#[test]
fn one_damaged_slot_is_reported_with_exit_1_and_the_pool_still_opens() {
    let s = Scratch::new("slot");
    let p = s.path("p.pool");
    assert!(
        kavach(&["pool", "create", &p, "--size", "1M"])
            .status
            .success()
    );
    assert!(
        kavach(&["fault", "flip", &p, "--offset", "6150", "--bits", "2"])
            .status
            .success()
    );
    let o = kavach(&["pool", "check", &p, "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["healthy"], false);
    assert_eq!(v["opens"], true);
    assert!(
        v["findings"][0]["message"]
            .as_str()
            .unwrap()
            .contains("slot 1")
    );
    let o = kavach(&["pool", "info", &p, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["damage"].as_array().unwrap().len(), 1);
    // A read-write open and close heals it.
    assert!(
        kavach(&["region", "create", &p, "r", "--size", "4k"])
            .status
            .success()
    );
    assert_eq!(kavach(&["pool", "check", &p]).status.code(), Some(0));
}

#[test]
fn a_second_opener_is_told_the_pool_is_in_use() {
    let s = Scratch::new("lock");
    let p = s.path("p.pool");
    assert!(
        kavach(&["pool", "create", &p, "--size", "1M"])
            .status
            .success()
    );
    let exclusive = common::exclusive();
    let held = pmem::Pool::open(Path::new(&p), &pmem::OpenOptions::default()).unwrap();
    assert_refused(&exclusive.kavach(&["pool", "info", &p]), 2, "in use");
    assert_refused(&exclusive.kavach(&["pool", "check", &p]), 2, "in use");
    assert_refused(
        &exclusive.kavach(&["fault", "flip", &p, "--offset", "0"]),
        2,
        "in use",
    );
    held.close().unwrap();
}

/// Fill page `page` of the file at `path` with `byte`, as an application's write would.
fn fill_page(path: &str, page: usize, byte: u8) {
    let mut b = std::fs::read(path).unwrap();
    b[page * 4096..(page + 1) * 4096].fill(byte);
    std::fs::write(path, b).unwrap();
}

#[test]
fn lost_and_misdirected_writes_from_the_command_line() {
    let s = Scratch::new("faults");
    let p = s.path("p.pool");
    let snap = s.path("page4");
    assert!(
        kavach(&["pool", "create", &p, "--size", "1M"])
            .status
            .success()
    );
    fill_page(&p, 4, 1);
    assert!(
        kavach(&["fault", "snapshot", &p, "--page", "4", "--out", &snap])
            .status
            .success()
    );
    fill_page(&p, 4, 2);
    assert!(
        kavach(&[
            "fault",
            "misdirect",
            &p,
            "--page",
            "4",
            "--onto",
            "6",
            "--old",
            &snap
        ])
        .status
        .success()
    );
    let b = std::fs::read(&p).unwrap();
    assert!(b[4 * 4096..5 * 4096].iter().all(|&x| x == 1));
    assert!(b[6 * 4096..7 * 4096].iter().all(|&x| x == 2));
    assert!(
        kavach(&["fault", "lost-write", &p, "--page", "6", "--from", &snap])
            .status
            .success()
    );
    assert!(
        std::fs::read(&p).unwrap()[6 * 4096..7 * 4096]
            .iter()
            .all(|&x| x == 1)
    );
}

#[test]
fn demo_runs_twice_in_a_fresh_directory() {
    let s = Scratch::new("demo");
    let o = kavach_in(&s.0, &["demo", "--crashes", "50"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("created kavach-data/demo.pool"), "{out}");
    assert!(out.contains("run counter in `demo` is now 1"));
    assert!(out.contains("0 in between or unopenable"));
    assert!(out.contains("healthy"));
    let o = kavach_in(&s.0, &["demo", "--crashes", "10"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("now 2"));
    assert!(stdout(&o).contains("last shutdown clean"));
}
