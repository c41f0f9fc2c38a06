//! The pool, region and fault commands never make a pool worse: a command that fails leaves the
//! file byte for byte as it found it (clean flag included), `pool repair` rebuilds what a good
//! copy proves, protected regions are not removed by accident, and sizes, domains and offsets
//! mean what they say.

mod common;

use common::{Scratch, assert_code, kavach, stderr, stdout};
use std::path::Path;

fn bytes(p: &str) -> Vec<u8> {
    std::fs::read(p).unwrap()
}

fn ok(args: &[&str]) -> String {
    let o = kavach(args);
    assert_code(&o, 0);
    stdout(&o)
}

/// `args` fails (a non-zero exit, one error line, no panic) and leaves `pool` byte for byte as it
/// was.
// Could not run: exit 2 (the exit-code contract in docs/design.md).
fn fails_unchanged(pool: &str, args: &[&str], needle: &str) {
    let before = bytes(pool);
    let o = kavach(args);
    let err = stderr(&o);
    assert!(
        o.status.code() == Some(2),
        "{args:?}: exit {:?}, stderr {err}",
        o.status.code()
    );
    assert!(
        !err.contains("panicked") && !err.contains("internal error"),
        "{err}"
    );
    assert!(
        err.contains(needle),
        "{args:?}: stderr lacks `{needle}`: {err}"
    );
    assert!(
        bytes(pool) == before,
        "{args:?} failed but changed {pool}: {err}"
    );
}

fn clean_flag(pool: &str) -> bool {
    let o = kavach(&["pool", "info", pool, "--json"]);
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["clean_shutdown"].as_bool().unwrap()
}

/// Case 1 of issue 17: a region create that fails for want of space used to leave the log pool
/// marked unclean (and the next `log append` then took damage for a torn tail).
#[test]
fn a_failed_region_create_or_remove_leaves_the_pool_as_it_was() {
    let s = Scratch::new("region");
    let l = s.path("L");
    ok(&["log", "create", &l, "--size", "1MiB"]);
    ok(&[
        "log", "append", &l, "--data", "one", "--data", "two", "--data", "three", "--data", "four",
    ]);
    assert!(clean_flag(&l));
    fails_unchanged(
        &l,
        &["region", "create", &l, "scratch", "--size", "4KiB"],
        "no space",
    );
    assert!(clean_flag(&l), "the failed create left the pool unclean");
    fails_unchanged(&l, &["region", "remove", &l, "nothing"], "no region named");
    fails_unchanged(
        &l,
        &["region", "create", &l, &"x".repeat(40), "--size", "4KiB"],
        "region name",
    );
    // The log's own region: a layer owns it.
    fails_unchanged(&l, &["region", "remove", &l, "log"], "--force");
    assert!(clean_flag(&l));
    let o = kavach(&["log", "dump", &l, "--payload", "text"]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("four"), "{}", stdout(&o));

    // The same on a pool a crash left unclean: still unclean, byte for byte.
    let p = s.path("p.pool");
    ok(&["pool", "create", &p, "--size", "64KiB"]);
    ok(&["region", "create", &p, "a", "--size", "8KiB"]);
    fails_unchanged(
        &p,
        &["region", "create", &p, "a", "--size", "4KiB"],
        "already exists",
    );
    fails_unchanged(
        &p,
        &["region", "create", &p, "b", "--size", "1MiB"],
        "no space",
    );
    assert!(clean_flag(&p));
}

/// Every pool, region and fault command that opens a pool writable and fails leaves it as it was.
#[test]
fn every_failing_writable_command_leaves_the_pool_as_it_was() {
    let s = Scratch::new("writable");
    let p = s.path("p.pool");
    ok(&[
        "pool",
        "create",
        &p,
        "--size",
        "1MiB",
        "--redundancy",
        "lazy",
    ]);
    ok(&["debug", "fill", &p, "--seed", "1"]);
    let snap = s.path("snap");
    let missing = s.path("missing");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["pool", "create", &p, "--size", "1MiB"], "exists"),
        (
            vec!["region", "create", &p, "more", "--size", "1GiB"],
            "no space",
        ),
        (
            vec!["region", "create", &p, "data", "--size", "4KiB"],
            "already exists",
        ),
        (vec!["region", "remove", &p, "nothing"], "no region named"),
        (vec!["region", "remove", &p, "data"], "--force"),
        (vec!["region", "remove", &p, "data.integrity"], "--force"),
        (
            vec!["fault", "flip", &p, "--offset", "1MiB", "--len", "8"],
            "outside",
        ),
        (
            vec![
                "fault", "flip", &p, "--offset", "0", "--len", "1", "--bits", "9",
            ],
            "cannot be flipped",
        ),
        (
            vec!["fault", "snapshot", &p, "--page", "256", "--out", &snap],
            "outside",
        ),
        (
            vec!["fault", "lost-write", &p, "--page", "3", "--from", &snap],
            "cannot read saved page",
        ),
        (
            vec!["fault", "misdirect", &p, "--page", "3", "--onto", "3"],
            "same page",
        ),
        (
            vec!["fault", "misdirect", &p, "--page", "3", "--onto", "999"],
            "outside",
        ),
        (vec!["inject", "bitflip", &p, "--page", "99999"], "outside"),
        (
            vec![
                "inject", "bitflip", &p, "--page", "1", "--region", "nothing",
            ],
            "no region",
        ),
        (
            vec!["debug", "fill", &p, "--region", "nothing"],
            "no region",
        ),
        (
            vec!["inject", "lost-write", &p, "--page", "99999"],
            "outside",
        ),
        (
            vec!["inject", "misdirected-write", &p, "--page", "99999"],
            "outside",
        ),
        (vec!["scrub", &p, "--region", "nothing"], "no region"),
        (vec!["repair", &p, "--region", "nothing"], "no region"),
        (vec!["pool", "repair", &missing], "cannot repair"),
    ];
    for (args, needle) in cases {
        fails_unchanged(&p, &args, needle);
    }
    assert!(!Path::new(&snap).exists());
    assert!(clean_flag(&p));
}

/// `fault snapshot` writes its page to a new file; an existing one is refused and kept.
#[test]
fn fault_snapshot_keeps_an_existing_file() {
    let s = Scratch::new("snapshot");
    let p = s.path("p.pool");
    ok(&["pool", "create", &p, "--size", "64KiB"]);
    let out = s.path("out");
    std::fs::write(&out, b"precious").unwrap();
    fails_unchanged(
        &p,
        &["fault", "snapshot", &p, "--page", "4", "--out", &out],
        "cannot create",
    );
    assert_eq!(bytes(&out), b"precious");
}

/// Case 8: a stray write in unused header bytes kept `pool check` at 1 forever.
#[test]
fn pool_repair_clears_stray_bytes_in_unused_header_space() {
    let s = Scratch::new("stray");
    let p = s.path("p.pool");
    ok(&["pool", "create", &p, "--size", "1MiB"]);
    ok(&["region", "create", &p, "a", "--size", "8KiB"]);
    let good = bytes(&p);
    ok(&[
        "fault", "flip", &p, "--offset", "0x1300", "--len", "16", "--bits", "3",
    ]);
    assert_code(&kavach(&["pool", "check", &p]), 1);
    let out = ok(&["pool", "repair", &p]);
    assert!(out.contains("repaired: at byte 0x13"), "{out}");
    assert!(out.contains("the pool checks healthy"), "{out}");
    assert!(ok(&["pool", "check", &p]).contains("healthy"));
    assert!(bytes(&p) == good);
    let again = ok(&["pool", "repair", &p, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&again).unwrap();
    assert_eq!(v["healthy"], true);
    assert_eq!(v["repaired"].as_array().unwrap().len(), 0);
}

/// Case 8: one bad bit in the directory copy in force made the pool unopenable. It now opens
/// from the mirror in the other copy, and `pool repair` rebuilds the copy in force.
#[test]
fn pool_repair_rebuilds_the_directory_copy_in_force_from_its_mirror() {
    let s = Scratch::new("dir");
    let p = s.path("p.pool");
    ok(&["pool", "create", &p, "--size", "1MiB"]);
    ok(&["region", "create", &p, "a", "--size", "8KiB"]); // generation 2: copy 0 (0x2000)
    let good = bytes(&p);
    ok(&[
        "fault", "flip", &p, "--offset", "0x2050", "--len", "1", "--bits", "1",
    ]);
    let o = kavach(&["pool", "check", &p]);
    assert_code(&o, 1);
    assert!(stdout(&o).contains("mirror"), "{}", stdout(&o));
    let info = ok(&["pool", "info", &p]);
    assert!(info.contains("region directory copy 0"), "{info}");
    assert!(bytes(&p) != good);
    let out = ok(&["pool", "repair", &p]);
    assert!(out.contains("rebuilt from its mirror"), "{out}");
    assert_code(&kavach(&["pool", "check", &p]), 0);
    assert!(bytes(&p) == good);

    // Both copies damaged: nothing proves the regions; refused, exit 1, nothing written.
    ok(&[
        "fault", "flip", &p, "--offset", "0x2050", "--len", "1", "--bits", "1",
    ]);
    ok(&[
        "fault", "flip", &p, "--offset", "0x3050", "--len", "1", "--bits", "1",
    ]);
    let before = bytes(&p);
    let o = kavach(&["pool", "repair", &p]);
    assert_code(&o, 1);
    assert!(stdout(&o).contains("NOT repaired"), "{}", stdout(&o));
    assert!(stdout(&o).contains("does NOT open"), "{}", stdout(&o));
    assert!(bytes(&p) == before);
}

#[test]
fn pool_repair_rebuilds_a_header_copy_and_cannot_run_on_a_non_pool() {
    let s = Scratch::new("header");
    let p = s.path("p.pool");
    ok(&["pool", "create", &p, "--size", "1MiB"]);
    let good = bytes(&p);
    ok(&[
        "fault", "flip", &p, "--offset", "0x1030", "--len", "8", "--bits", "2",
    ]);
    assert_code(&kavach(&["pool", "check", &p]), 1);
    let o = kavach(&["pool", "repair", &p, "--json"]);
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["repaired"][0]["offset"], 0x1000);
    assert_code(&kavach(&["pool", "check", &p]), 0);
    assert!(bytes(&p) == good);

    let junk = s.path("junk");
    std::fs::write(&junk, vec![0x5a; 65536]).unwrap();
    fails_unchanged(&junk, &["pool", "repair", &junk], "not a Kavach pool");
    assert_code(&kavach(&["pool", "repair", &junk]), 2);
    assert_code(&kavach(&["pool", "repair", &s.path("missing")]), 2);
}

/// Case 8: removing a protected region's data (or its redundancy) needs --force.
#[test]
fn protected_regions_are_removed_only_with_force() {
    let s = Scratch::new("protected");
    let p = s.path("p.pool");
    ok(&[
        "pool",
        "create",
        &p,
        "--size",
        "1MiB",
        "--redundancy",
        "lazy",
    ]);
    fails_unchanged(
        &p,
        &["region", "remove", &p, "data"],
        "integrity layer protects it",
    );
    fails_unchanged(
        &p,
        &["region", "remove", &p, "data.integrity"],
        "checksums and parity",
    );
    let out = ok(&["region", "remove", &p, "data.integrity", "--force"]);
    assert!(out.contains("removed region `data.integrity`"), "{out}");
    // A plain region with nothing protecting it goes without --force.
    ok(&["region", "remove", &p, "data"]);
}

/// Case 9: `--size 64MB` was 64 MiB. The decimal units are powers of 1000, as in coreutils.
#[test]
fn decimal_size_units_are_powers_of_1000() {
    let s = Scratch::new("units");
    let p = s.path("p.pool");
    let o = kavach(&["pool", "create", &p, "--size", "4096KB", "--json"]);
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["size"], 4_096_000);
    let q = s.path("q.pool");
    let o = kavach(&["pool", "create", &q, "--size", "64MB", "--json"]);
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["size"], 64_000_000);
    // 1 MB is not a whole number of pages: refused, nothing created.
    let r = s.path("r.pool");
    let o = kavach(&["pool", "create", &r, "--size", "1MB"]);
    assert!(
        stderr(&o).contains("1000000 bytes is not a multiple"),
        "{}",
        stderr(&o)
    );
    assert!(!Path::new(&r).exists());
    let o = kavach(&["pool", "create", "--help"]);
    assert!(stdout(&o).contains("powers of 1000"), "{}", stdout(&o));
}

/// Case 9: `fault flip` was quadratic in --bits. It flips exactly that many distinct bits.
#[test]
fn fault_flip_flips_exactly_that_many_distinct_bits() {
    let s = Scratch::new("flip");
    let p = s.path("p.pool");
    ok(&["pool", "create", &p, "--size", "256KiB"]);
    let before = bytes(&p);
    let o = kavach(&[
        "fault", "flip", &p, "--offset", "0x4000", "--len", "100000", "--bits", "600000", "--seed",
        "3", "--json",
    ]);
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let flipped = v["flipped_bits"].as_array().unwrap();
    assert_eq!(flipped.len(), 600_000);
    let after = bytes(&p);
    let changed: u32 = before
        .iter()
        .zip(&after)
        .map(|(a, b)| (a ^ b).count_ones())
        .sum();
    assert_eq!(changed, 600_000);
    assert!(before[..0x4000] == after[..0x4000]);
    assert!(before[0x4000 + 100_000..] == after[0x4000 + 100_000..]);
    // Offsets are printed in hex.
    let out = ok(&["fault", "flip", &p, "--offset", "20576", "--bits", "1"]);
    assert!(out.contains("byte 0x50"), "{out}");
}

/// Case 9: a domain the file cannot run in is refused, not printed and then replaced.
#[test]
fn a_domain_the_file_cannot_run_in_is_refused() {
    let s = Scratch::new("domain");
    let p = s.path("p.pool");
    let o = kavach(&["pool", "create", &p, "--size", "1MiB", "--json"]);
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let backing = v["backing"].as_str().unwrap().to_string();
    let wrong = if backing == "page-cache" {
        "adr"
    } else {
        "msync"
    };
    let q = s.path("q.pool");
    let o = kavach(&["pool", "create", &q, "--size", "1MiB", "--domain", wrong]);
    assert_ne!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("runs `"), "{}", stderr(&o));
    assert!(!Path::new(&q).exists(), "a refused create leaves no file");
    // What the file can run in is accepted, and create and info say the same.
    let right = if backing == "page-cache" {
        "msync"
    } else {
        "adr"
    };
    let o = kavach(&["pool", "create", &q, "--size", "1MiB", "--domain", right]);
    assert_code(&o, 0);
    assert!(
        stdout(&o).contains(&format!("domain {right}")),
        "{}",
        stdout(&o)
    );
    let info = ok(&["pool", "info", &q]);
    assert!(
        info.contains(&format!("domain      {right} (recorded {right};")),
        "{info}"
    );
}

/// The same on a file in the page cache (not tmpfs, no DAX), when the build directory is one.
#[test]
fn adr_on_a_page_cache_file_is_refused() {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("pool-safety-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("p.pool").to_string_lossy().into_owned();
    let o = kavach(&["pool", "create", &p, "--size", "1MiB", "--json"]);
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let backing = v["backing"].as_str().unwrap().to_string();
    let q = dir.join("q.pool").to_string_lossy().into_owned();
    let o = kavach(&["pool", "create", &q, "--size", "1MiB", "--domain", "adr"]);
    let _ = std::fs::remove_dir_all(&dir);
    if backing != "page-cache" {
        println!(
            "SKIPPED: {} is on {backing}, not a page-cache file system",
            dir.display()
        );
        return;
    }
    assert_ne!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("page cache"), "{}", stderr(&o));
}
