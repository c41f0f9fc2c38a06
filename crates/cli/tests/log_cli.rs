//! `kavach log ...` as a user drives it: create, append (--data, --file, --stdin-lines), dump,
//! verify; damage found and named; bad inputs refused with one line and exit 2.

mod common;

use common::{Scratch, assert_refused, kavach, kavach_in, kavach_stdin, stderr, stdout};
use std::path::Path;
use std::process::Output;

fn assert_ok(o: &Output) {
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(o));
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

/// The data entries of `dump --json --payload text` as (LSN, payload text).
fn dumped(p: &str) -> Vec<(u64, String)> {
    let o = kavach(&["log", "dump", p, "--json", "--payload", "text"]);
    assert_ok(&o);
    json(&o)["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "data")
        .map(|e| {
            (
                e["lsn"].as_u64().unwrap(),
                e["payload_text"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Pool offset of the header of the record with `lsn`, from `dump --json`.
fn record_offset(p: &str, lsn: u64) -> u64 {
    let o = kavach(&["log", "dump", p, "--json"]);
    let v = json(&o);
    v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["lsn"] == lsn)
        .unwrap_or_else(|| panic!("no entry with LSN {lsn}: {v}"))["offset"]
        .as_u64()
        .unwrap()
}

/// Overwrite one byte of the file at `path`, behind Kavach's back.
fn poke(path: &str, offset: u64, byte: u8) {
    let mut b = std::fs::read(path).unwrap();
    b[offset as usize] ^= byte;
    std::fs::write(path, b).unwrap();
}

/// End the pool's last use without a clean shutdown, as a crash would.
fn mark_unclean(path: &str) {
    let _exclusive = common::exclusive();
    let pool = pmem::Pool::open(Path::new(path), &pmem::OpenOptions::default()).unwrap();
    assert!(pool.was_clean_shutdown());
    drop(pool);
}

#[test]
fn every_log_command_has_help_with_exit_codes_and_an_example() {
    let o = kavach(&["log", "--help"]);
    assert_ok(&o);
    let top = stdout(&o);
    for word in [
        "Arcadia",
        "LSN",
        "sync",
        "frequency:F",
        "group:G",
        "cache-line",
    ] {
        assert!(
            top.contains(word),
            "`kavach log --help` lacks {word}: {top}"
        );
    }
    for c in ["create", "append", "dump", "verify", "salvage"] {
        let o = kavach(&["log", c, "--help"]);
        assert_ok(&o);
        let h = stdout(&o);
        assert!(h.contains("Usage: kavach log"), "{c}: {h}");
        assert!(h.contains("Exit status: 0"), "{c}: {h}");
        assert!(h.contains("Example"), "{c}: {h}");
        assert!(h.contains(&format!("kavach log {c} ")), "{c}: {h}");
    }
    assert!(stdout(&kavach(&["log", "verify", "--help"])).contains("1 damage found"));
    assert!(stdout(&kavach(&["--help"])).contains("log"));
}

#[test]
fn create_append_dump_verify_as_a_new_user() {
    let s = Scratch::new("happy");
    let p = s.path("app.log");

    let o = kavach(&["log", "create", &p, "--size", "1MiB"]);
    assert_ok(&o);
    let out = stdout(&o);
    assert!(out.contains(&p) && out.contains("ring") && out.contains("max payload"));

    let o = kavach(&[
        "log",
        "append",
        &p,
        "--data",
        "hello",
        "--data",
        "wörld\ttab",
    ]);
    assert_ok(&o);
    assert!(stdout(&o).contains("lsn 1 durable"), "{}", stdout(&o));
    assert!(stdout(&o).contains("lsn 2 durable"));

    let o = kavach_stdin(
        &["log", "append", &p, "--stdin-lines", "--json"],
        Some(b"alpha\nbeta\r\n\ngamma"),
    );
    assert_ok(&o);
    let v = json(&o);
    let lsns: Vec<u64> = v["appended"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["lsn"].as_u64().unwrap())
        .collect();
    assert_eq!(lsns, [3, 4, 5, 6]);
    assert_eq!(v["policy"], "sync");
    assert!(
        v["appended"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["durable"] == true)
    );

    let file = s.path("blob");
    std::fs::write(&file, b"\x00\x01binary\xff").unwrap();
    assert_ok(&kavach(&[
        "log",
        "append",
        &p,
        "--file",
        &file,
        "--policy",
        "frequency:4",
    ]));

    let want: Vec<(u64, String)> = [
        "hello",
        "wörld\ttab",
        "alpha",
        "beta",
        "",
        "gamma",
        "\u{0}\u{1}binary\u{fffd}",
    ]
    .iter()
    .enumerate()
    .map(|(i, t)| (i as u64 + 1, t.to_string()))
    .collect();
    assert_eq!(dumped(&p), want);

    // Text dump: a header, one line per entry in LSN order, a summary.
    let o = kavach(&["log", "dump", &p, "--payload", "text"]);
    assert_ok(&o);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1 + 7 + 1, "{out}");
    assert!(lines[0].contains("LSN") && lines[0].contains("CHECK"));
    for (i, line) in lines[1..8].iter().enumerate() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols[0], (i + 1).to_string(), "{line}");
        assert_eq!(cols[1], "data", "{line}");
        assert_eq!(cols[4], "ok", "{line}");
    }
    assert!(lines[1].ends_with("\"hello\""), "{}", lines[1]);
    assert!(lines[2].ends_with("\"wörld\\ttab\""), "{}", lines[2]);
    assert!(lines[8].starts_with("7 record(s)"), "{}", lines[8]);
    assert!(lines[8].contains("start LSN 1, next LSN 8"), "{}", lines[8]);
    assert!(lines[8].contains("end of log"), "{}", lines[8]);

    // --from, --limit, hex payloads with a bounded prefix.
    let o = kavach(&[
        "log",
        "dump",
        &p,
        "--from",
        "3",
        "--limit",
        "2",
        "--payload",
        "hex",
        "--payload-bytes",
        "3",
    ]);
    assert_ok(&o);
    let out = stdout(&o);
    let rows: Vec<&str> = out.lines().skip(1).take(2).collect();
    assert!(rows[0].trim_start().starts_with("3 ") && rows[0].ends_with("616c70... (5 bytes)"));
    assert!(rows[1].trim_start().starts_with("4 ") && rows[1].ends_with("626574... (4 bytes)"));
    assert_eq!(out.lines().count(), 4, "{out}");

    // dump --json: entries, stats, stop.
    let v = json(&kavach(&["log", "dump", &p, "--json"]));
    assert_eq!(v["entries"].as_array().unwrap().len(), 7);
    assert_eq!(v["entries"][0]["check"], "ok");
    assert_eq!(v["stats"]["next_lsn"], 8);
    assert_eq!(v["stats"]["durable_lsn"], 7);
    assert_eq!(v["records"], 7);
    assert_eq!(v["stop"]["reason"], "tail");
    assert_eq!(v["damaged"], serde_json::Value::Null);

    // verify: healthy, text and JSON.
    let o = kavach(&["log", "verify", &p]);
    assert_ok(&o);
    assert!(stdout(&o).contains("healthy"), "{}", stdout(&o));
    assert!(stdout(&o).contains("7 good record(s) (LSN 1..=7)"));
    let o = kavach(&["log", "verify", &p, "--json"]);
    assert_ok(&o);
    let v = json(&o);
    assert_eq!(v["healthy"], true);
    assert_eq!(v["records"], 7);
    assert_eq!(v["last_lsn"], 7);
    assert_eq!(v["clean_shutdown"], true);

    // create --json, and the pool is a pool like any other.
    let q = s.path("other.log");
    let o = kavach(&[
        "log", "create", &q, "--size", "1M", "--region", "journal", "--json",
    ]);
    assert_ok(&o);
    let v = json(&o);
    assert_eq!(v["region"]["name"], "journal");
    assert!(v["payload_bytes_max"].as_u64().unwrap() < v["ring_bytes"].as_u64().unwrap());
    assert_eq!(kavach(&["pool", "check", &q]).status.code(), Some(0));
    assert_ok(&kavach(&["log", "verify", &q, "--region", "journal"]));
}

#[test]
fn create_refuses_an_existing_file_and_changes_nothing() {
    let s = Scratch::new("exists");
    let p = s.path("app.log");
    assert_ok(&kavach(&["log", "create", &p, "--size", "1M"]));
    assert_ok(&kavach(&["log", "append", &p, "--data", "keep me"]));
    let before = std::fs::read(&p).unwrap();
    assert_refused(
        &kavach(&["log", "create", &p, "--size", "2M"]),
        2,
        "already exists",
    );
    assert!(std::fs::read(&p).unwrap() == before, "the file was changed");
    let other = s.path("notes.txt");
    std::fs::write(&other, "notes\n").unwrap();
    assert_refused(
        &kavach(&["log", "create", &other]),
        2,
        "nothing was changed",
    );
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "notes\n");
    // A bad size: refused, and no file left behind.
    let bad = s.path("bad.log");
    assert_refused(
        &kavach(&["log", "create", &bad, "--size", "100000"]),
        2,
        "not a multiple",
    );
    assert!(!Path::new(&bad).exists());
}

#[test]
fn a_damaged_record_is_named_by_verify_and_dump_with_exit_1() {
    let s = Scratch::new("damage");
    let p = s.path("app.log");
    assert_ok(&kavach(&["log", "create", &p, "--size", "1M"]));
    assert_ok(&kavach(&[
        "log", "append", &p, "--data", "one", "--data", "two", "--data", "three",
    ]));
    let at = record_offset(&p, 2);
    // A byte of the second record's payload (the payload follows a 32-byte header).
    poke(&p, at + 32, 0x10);

    let o = kavach(&["log", "verify", &p]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("record LSN 2"), "{out}");
    assert!(out.contains(&format!("header at byte {at:#x}")), "{out}");
    assert!(
        out.contains("payload_crc") && out.contains("expected"),
        "{out}"
    );
    assert!(
        out.contains("DAMAGED") && out.contains("1 good record(s)"),
        "{out}"
    );
    assert!(out.contains("shut down cleanly"), "{out}");

    let o = kavach(&["log", "verify", &p, "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v = json(&o);
    assert_eq!(v["healthy"], false);
    assert_eq!(v["damaged"]["lsn"], 2);
    assert_eq!(v["damaged"]["record_offset"], at);
    assert_eq!(v["damaged"]["field"], "payload_crc");
    assert_eq!(v["stop"]["reason"], "damaged");

    let o = kavach(&["log", "dump", &p]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    let bad = out
        .lines()
        .find(|l| l.contains("CRC BAD"))
        .unwrap_or_else(|| panic!("no CRC BAD line: {out}"));
    assert!(bad.trim_start().starts_with("2 "), "{bad}");
    assert!(bad.contains(&format!("{at:#x}")), "{bad}");
    let v = json(&kavach(&["log", "dump", &p, "--json"]));
    assert_eq!(v["damaged"]["lsn"], 2);
    assert_eq!(v["entries"].as_array().unwrap().len(), 1);

    // After a clean shutdown a writable open refuses the damaged log, and changes nothing.
    let before = std::fs::read(&p).unwrap();
    assert_refused(
        &kavach(&["log", "append", &p, "--data", "four"]),
        2,
        "LSN 2",
    );
    assert!(
        std::fs::read(&p).unwrap() == before,
        "a refused append changed the file"
    );

    // The same damage after a crash (issue 17, case 1): the close recorded records 1..3 as
    // durable, so record 2 is damage, not a record the crash tore. Verify says so, append
    // refuses and changes nothing, whatever the clean-shutdown flag says.
    mark_unclean(&p);
    let o = kavach(&["log", "verify", &p]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(
        out.contains("record LSN 2") && out.contains("not a record torn"),
        "{out}"
    );
    let before = std::fs::read(&p).unwrap();
    assert_refused(
        &kavach(&["log", "append", &p, "--data", "after the crash"]),
        2,
        "LSN 2",
    );
    assert!(
        std::fs::read(&p).unwrap() == before,
        "a refused append changed the file"
    );
    assert_eq!(
        json(&kavach(&["pool", "info", &p, "--json"]))["clean_shutdown"],
        false,
        "the pool is left as it was found: unclean"
    );
    // Salvage keeps record 1, saves 2 and 3 to the side file, and the log takes appends again.
    let o = kavach(&["log", "salvage", &p, "--json"]);
    assert_ok(&o);
    let v = json(&o);
    assert_eq!(v["kept_records"], 1);
    assert_eq!(v["damaged"], true);
    let cut: Vec<(String, u64)> = v["cut"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_string(),
                c["lsn"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        cut,
        [("stopped".to_string(), 2), ("whole".to_string(), 3)],
        "{v}"
    );
    assert!(Path::new(&format!("{p}.salvage")).exists());
    assert_ok(&kavach(&["log", "verify", &p]));
    let o = kavach(&["log", "append", &p, "--data", "after the salvage", "--json"]);
    assert_ok(&o);
    let lsn = json(&o)["appended"][0]["lsn"].as_u64().unwrap();
    assert!(lsn > 3, "LSNs jump past every cut record: {lsn}");
    assert_ok(&kavach(&["log", "verify", &p]));
    assert_eq!(
        dumped(&p),
        [
            (1, "one".to_string()),
            (lsn, "after the salvage".to_string())
        ]
    );
}

/// Issue 17, case 1, as reported: four records, one bit flipped in record 2's payload, the pool
/// then marked unclean (there by a failed command; here as a crash leaves it). The next append
/// must refuse, not drop "two", "three" and "four".
#[test]
fn damage_in_an_unclean_pool_is_refused_not_taken_for_a_torn_tail() {
    let s = Scratch::new("unclean");
    let p = s.path("L");
    assert_ok(&kavach(&["log", "create", &p, "--size", "1MiB"]));
    assert_ok(&kavach(&[
        "log", "append", &p, "--data", "one", "--data", "two", "--data", "three", "--data", "four",
    ]));
    let at = record_offset(&p, 2);
    assert_eq!(
        at + 32,
        20576,
        "the reproduction's offset is record 2's payload"
    );
    assert_ok(&kavach(&[
        "fault", "flip", &p, "--offset", "20576", "--len", "3", "--bits", "1",
    ]));
    assert_refused(
        &kavach(&["log", "append", &p, "--data", "five"]),
        2,
        "LSN 2",
    );
    mark_unclean(&p);
    let before = std::fs::read(&p).unwrap();
    assert_refused(
        &kavach(&["log", "append", &p, "--data", "five"]),
        2,
        &format!("{:#x}", at + 16),
    );
    assert!(
        std::fs::read(&p).unwrap() == before,
        "a refused append changed the file"
    );
    let o = kavach(&["log", "verify", &p, "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v = json(&o);
    assert_eq!(
        (v["damaged"]["lsn"].as_u64(), v["healthy"].as_bool()),
        (Some(2), Some(false))
    );
    assert_eq!(v["damaged"]["field"], "payload_crc");
    let o = kavach(&["log", "dump", &p, "--payload", "text"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(!stdout(&o).contains("torn by the crash"), "{}", stdout(&o));
}

/// Issue 17, case 2: one flipped bit in record 2's LSN field. Verify said "healthy" (an older
/// record follows) and the next append interleaved histories (1 one, 2 TWO, 3 three, 4 four).
#[test]
fn a_flipped_lsn_bit_is_damage_named_by_verify_and_refused_by_append() {
    let s = Scratch::new("lsnflip");
    let p = s.path("L");
    assert_ok(&kavach(&["log", "create", &p, "--size", "1MiB"]));
    assert_ok(&kavach(&[
        "log", "append", &p, "--data", "one", "--data", "two", "--data", "three", "--data", "four",
    ]));
    let at = record_offset(&p, 2);
    poke(&p, at, 0x01); // LSN 2 becomes 3
    let o = kavach(&["log", "verify", &p]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let out = stdout(&o);
    assert!(
        out.contains("record LSN 2") && out.contains("`lsn`"),
        "{out}"
    );
    assert!(out.contains("expected 2, found 3"), "{out}");
    let v = json(&kavach(&["log", "verify", &p, "--json"]));
    assert_eq!(v["damaged"]["lsn"], 2);
    assert_eq!(v["damaged"]["record_offset"], at);
    assert_eq!(kavach(&["log", "dump", &p]).status.code(), Some(1));
    let before = std::fs::read(&p).unwrap();
    assert_refused(&kavach(&["log", "append", &p, "--data", "TWO"]), 2, "LSN 2");
    assert!(
        std::fs::read(&p).unwrap() == before,
        "a refused append changed the file"
    );

    // Salvage: refused while the side file exists (nothing changes), then done elsewhere.
    let side = s.path("cut.bin");
    std::fs::write(&side, b"keep me").unwrap();
    assert_refused(
        &kavach(&["log", "salvage", &p, "--output", &side]),
        2,
        "exists",
    );
    assert!(
        std::fs::read(&p).unwrap() == before,
        "a refused salvage changed the log"
    );
    assert_eq!(std::fs::read(&side).unwrap(), b"keep me");
    let o = kavach(&["log", "salvage", &p, "--output", &side, "--overwrite"]);
    assert_ok(&o);
    let out = stdout(&o);
    assert!(out.contains("kept 1 record(s), LSN 1..=1"), "{out}");
    for lsn in 2..=4 {
        assert!(out.contains(&format!("LSN {lsn}")), "{out}");
    }
    assert!(out.contains(&format!("cut: {at:#x}, 64 bytes")), "{out}");
    // The side file holds each cut record's bytes as they were in the pool.
    let cut = log::salvage::read_side_file(&std::fs::read(&side).unwrap()).expect("side file");
    assert_eq!(cut.cut.len(), 3);
    for (c, lsn) in cut.cut.iter().zip(2u64..) {
        assert_eq!((c.lsn, c.bytes.len()), (lsn, 64));
        let o = c.offset as usize;
        assert_eq!(c.bytes, before[o..o + 64]);
    }
    assert_ok(&kavach(&["log", "verify", &p]));
    assert_ok(&kavach(&["log", "append", &p, "--data", "TWO"]));
    let got: Vec<String> = dumped(&p).into_iter().map(|(_, t)| t).collect();
    assert_eq!(got, ["one", "TWO"]);
}

/// Salvage of a healthy log changes nothing and writes no side file.
#[test]
fn salvage_of_a_healthy_log_changes_nothing() {
    let s = Scratch::new("healthy");
    let p = s.path("L");
    assert_ok(&kavach(&["log", "create", &p, "--size", "1MiB"]));
    assert_ok(&kavach(&["log", "append", &p, "--data", "one"]));
    let before = std::fs::read(&p).unwrap();
    let o = kavach(&["log", "salvage", &p]);
    assert_ok(&o);
    assert!(stdout(&o).contains("nothing to salvage"), "{}", stdout(&o));
    assert!(!Path::new(&format!("{p}.salvage")).exists());
    assert!(std::fs::read(&p).unwrap() == before);
    assert_refused(
        &kavach(&["log", "salvage", &s.path("missing")]),
        2,
        "missing",
    );
}

#[test]
fn damage_via_fault_flip_is_found_too() {
    let s = Scratch::new("flip");
    let p = s.path("app.log");
    assert_ok(&kavach(&["log", "create", &p, "--size", "1M"]));
    assert_ok(&kavach_stdin(
        &["log", "append", &p, "--stdin-lines"],
        Some(b"a\nb\nc\nd\n"),
    ));
    let at = record_offset(&p, 3);
    assert_ok(&kavach(&[
        "fault",
        "flip",
        &p,
        "--offset",
        &(at + 32).to_string(),
        "--len",
        "1",
    ]));
    let v = json(&kavach(&["log", "verify", &p, "--json"]));
    assert_eq!(v["damaged"]["lsn"], 3);
    assert_eq!(v["records"], 2);
    assert_eq!(kavach(&["log", "verify", &p]).status.code(), Some(1));
}

#[test]
fn a_clean_log_after_a_crash_verifies_and_appends() {
    let s = Scratch::new("crash");
    let p = s.path("app.log");
    assert_ok(&kavach(&["log", "create", &p, "--size", "1M"]));
    assert_ok(&kavach(&["log", "append", &p, "--data", "x"]));
    mark_unclean(&p);
    let o = kavach(&["log", "verify", &p]);
    assert_ok(&o);
    assert!(stdout(&o).contains("unclean shutdown"), "{}", stdout(&o));
    let o = kavach(&["log", "append", &p, "--data", "y"]);
    assert_ok(&o);
    assert!(
        stdout(&o).contains("not shut down cleanly"),
        "{}",
        stdout(&o)
    );
    assert_eq!(dumped(&p).len(), 2);
}

#[test]
fn bad_inputs_exit_2_with_one_line() {
    let s = Scratch::new("bad");
    let p = s.path("app.log");
    assert_ok(&kavach(&["log", "create", &p, "--size", "64KiB"]));

    // Not a pool, no file, no region, a region that is not a log.
    let text = s.path("notes.txt");
    std::fs::write(&text, "just some notes\n".repeat(5000)).unwrap();
    for cmd in ["dump", "verify"] {
        assert_refused(&kavach(&["log", cmd, &text]), 2, "not a Kavach pool");
        assert_refused(
            &kavach(&["log", cmd, &s.path("missing.log")]),
            2,
            "No such file",
        );
        assert_refused(
            &kavach(&["log", cmd, &p, "--region", "nope"]),
            2,
            "no region named `nope`",
        );
    }
    assert_eq!(
        std::fs::read_to_string(&text).unwrap(),
        "just some notes\n".repeat(5000)
    );
    assert_refused(
        &kavach(&["log", "append", &text, "--data", "x"]),
        2,
        "not a Kavach pool",
    );
    let raw = s.path("raw.pool");
    assert_ok(&kavach(&["pool", "create", &raw, "--size", "1M"]));
    assert_ok(&kavach(&["region", "create", &raw, "log", "--size", "64k"]));
    assert_refused(&kavach(&["log", "verify", &raw]), 2, "not a log");
    assert_refused(&kavach(&["log", "dump", &raw]), 2, "not a log");
    // A refused append leaves the pool as it found it: cleanly shut down.
    assert_refused(
        &kavach(&["log", "append", &raw, "--data", "x"]),
        2,
        "not a log",
    );
    assert_refused(
        &kavach(&["log", "append", &p, "--region", "nope", "--data", "x"]),
        2,
        "no region named",
    );
    for pool in [&raw, &p] {
        let v = json(&kavach(&["pool", "info", pool, "--json"]));
        assert_eq!(v["clean_shutdown"], true, "{pool}");
    }

    // Policies: clap's own message (exit 2), naming what is wrong.
    for (policy, needle) in [
        ("frequency:0", "not a count"),
        ("bogus", "unknown force policy"),
        ("group:x", "not a count"),
    ] {
        let o = kavach(&["log", "append", &p, "--policy", policy, "--data", "x"]);
        assert_eq!(o.status.code(), Some(2), "{policy}");
        assert!(stderr(&o).contains(needle), "{policy}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"));
    }
    // No input, or two kinds of input.
    assert_eq!(kavach(&["log", "append", &p]).status.code(), Some(2));
    assert_eq!(
        kavach(&["log", "append", &p, "--data", "x", "--stdin-lines"])
            .status
            .code(),
        Some(2)
    );

    // Payloads over the limit name it; --data and --file append nothing.
    let max = json(&kavach(&["log", "dump", &p, "--json"]))["stats"]["payload_bytes_max"]
        .as_u64()
        .unwrap();
    let big = "z".repeat(max as usize + 1);
    let limit = format!("limit of {max} bytes");
    let o = kavach(&["log", "append", &p, "--data", "ok", "--data", &big]);
    assert_refused(&o, 2, &limit);
    assert!(stderr(&o).contains("--data value 2") && stderr(&o).contains("nothing was appended"));
    let file = s.path("big");
    std::fs::write(&file, &big).unwrap();
    assert_refused(&kavach(&["log", "append", &p, "--file", &file]), 2, &limit);
    assert!(dumped(&p).is_empty());
    let mut lines = b"first\nsecond\n".to_vec();
    lines.extend_from_slice(big.as_bytes());
    lines.extend_from_slice(b"\nnever\n");
    let o = kavach_stdin(&["log", "append", &p, "--stdin-lines"], Some(&lines));
    assert_refused(&o, 2, &limit);
    assert!(stderr(&o).contains("line 3"), "{}", stderr(&o));
    assert_eq!(
        dumped(&p),
        [(1, "first".to_string()), (2, "second".to_string())]
    );
    assert_refused(
        &kavach(&["log", "append", &p, "--file", &s.path("none")]),
        2,
        "cannot read",
    );
    // The log is still healthy and cleanly closed after every refusal.
    assert_ok(&kavach(&["log", "verify", &p]));
    assert_eq!(kavach(&["pool", "check", &p]).status.code(), Some(0));
}

#[test]
fn damaged_log_metadata_is_reported_and_a_lost_log_does_not_open() {
    let s = Scratch::new("meta");
    let p = s.path("app.log");
    let o = kavach(&["log", "create", &p, "--size", "1M", "--json"]);
    assert_ok(&o);
    let base = json(&o)["region"]["offset"].as_u64().unwrap();
    assert_ok(&kavach(&["log", "append", &p, "--data", "a"]));
    // Descriptor copies live at the region's bytes 0 and 64.
    poke(&p, base + 64 + 20, 0x04);
    let o = kavach(&["log", "verify", &p]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("descriptor copy 1"), "{}", stdout(&o));
    assert!(stdout(&o).contains("a good copy remains"));
    let v = json(&kavach(&["log", "verify", &p, "--json"]));
    assert_eq!(v["opens"], true);
    assert_eq!(v["records"], 1);
    assert_eq!(v["metadata_damage"].as_array().unwrap().len(), 1);
    assert_eq!(kavach(&["log", "dump", &p]).status.code(), Some(1));
    // Both copies: the log no longer opens; verify says so (exit 1), dump cannot run (exit 2).
    poke(&p, base + 20, 0x04);
    let o = kavach(&["log", "verify", &p]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("does NOT open"), "{}", stdout(&o));
    assert_eq!(
        json(&kavach(&["log", "verify", &p, "--json"]))["opens"],
        false
    );
    assert_refused(&kavach(&["log", "dump", &p]), 2, "descriptor copy 0");
}

#[test]
fn a_record_left_incomplete_after_a_clean_close_is_damage() {
    let s = Scratch::new("valid");
    let p = s.path("app.log");
    assert_ok(&kavach(&["log", "create", &p, "--size", "1M"]));
    assert_ok(&kavach(&[
        "log", "append", &p, "--data", "a", "--data", "b",
    ]));
    // The valid word is the header's last 8 bytes (offset 24).
    let at = record_offset(&p, 2);
    poke(&p, at + 24, 0x01);
    let o = kavach(&["log", "verify", &p]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stdout(&o).contains("record LSN 2") && stdout(&o).contains("`valid`"));
    let o = kavach(&["log", "dump", &p]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("BAD valid"), "{}", stdout(&o));
    assert_refused(&kavach(&["log", "append", &p, "--data", "c"]), 2, "LSN 2");
    assert_eq!(
        json(&kavach(&["pool", "info", &p, "--json"]))["clean_shutdown"],
        true
    );
}

/// Issue 17, case 9: the demo described its new, empty log as "0 records (LSN 1..1)".
#[test]
fn the_demo_describes_an_empty_log_in_words() {
    let s = Scratch::new("demo");
    let o = kavach_in(&s.0, &["demo", "--crashes", "2"]);
    assert_ok(&o);
    let out = stdout(&o);
    assert!(!out.contains("(LSN 1..1)"), "{out}");
    assert!(
        out.contains("holds no records (the next one gets LSN 1)"),
        "{out}"
    );
}
