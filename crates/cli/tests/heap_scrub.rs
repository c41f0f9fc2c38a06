//! `kavach heap scrub` on heaps holding reliable objects that a program (this test, through the
//! `heap` library) made: a clean heap exits 0; flipped bits written into the file are reported
//! naming the object and the word (exit 1) and written back with --repair; a word beyond
//! correction is always exit 1; a scrub that cannot run exits 2 and leaves the file unchanged.

mod common;

use common::{Scratch, assert_code, assert_refused, json, kavach, run_json, run_ok};
use heap::HeapFile;
use heap::reliable::{alloc_reliable, pair_offset, write_reliable};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

fn new_heap(s: &Scratch, name: &str) -> String {
    let p = s.path(name);
    run_json(
        &[
            "heap",
            "create",
            &p,
            "--size",
            "16MiB",
            "--lanes",
            "4",
            "--lane-size",
            "64KiB",
        ],
        0,
    );
    p
}

/// Make two reliable objects (64 and 1000 bytes) and a plain block; returns the pool byte of
/// the heap region and the objects' heap offsets.
fn fill(p: &str) -> (u64, u64, u64, u64) {
    let _exclusive = common::exclusive();
    let hf = HeapFile::open(Path::new(p), "heap").expect("open the heap");
    let raw = hf.raw().clone();
    let (root, _) = raw.root(64).expect("root");
    let mut lane = raw.lane();
    raw.begin(&mut lane);
    let a = alloc_reliable(&raw, &mut lane, 64).unwrap();
    write_reliable(&raw, &mut lane, a, 0, &[0x5Au8; 64]).unwrap();
    let b = alloc_reliable(&raw, &mut lane, 1000).unwrap();
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    write_reliable(&raw, &mut lane, b, 0, &data).unwrap();
    let plain = raw.alloc(&mut lane, 128, true).unwrap();
    raw.write(&mut lane, plain, &[0xC3u8; 128]).unwrap();
    let mut links = Vec::new();
    for o in [a, b, plain] {
        links.extend_from_slice(&o.to_le_bytes());
    }
    raw.write(&mut lane, root, &links).unwrap();
    raw.commit(&mut lane).unwrap();
    drop(lane);
    let base = hf.region().offset;
    drop(raw);
    hf.close().expect("close the heap");
    (base, a, b, plain)
}

fn peek(p: &str, at: u64, n: usize) -> Vec<u8> {
    let mut f = std::fs::File::open(p).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    let mut b = vec![0u8; n];
    f.read_exact(&mut b).unwrap();
    b
}

fn poke(p: &str, at: u64, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(bytes).unwrap();
}

/// XOR `mask` into the 8 bytes at pool byte `at`.
fn flip(p: &str, at: u64, mask: u64) {
    let w = u64::from_le_bytes(peek(p, at, 8).try_into().unwrap()) ^ mask;
    poke(p, at, &w.to_le_bytes());
}

#[test]
fn help_answers_what_scrub_does_and_the_exit_codes() {
    let out = run_ok(&["heap", "scrub", "--help"], 0);
    for needle in [
        "Usage: kavach heap scrub",
        "--repair",
        "read-only",
        "6 flipped bits",
        "never read past",
        "0 every pair checked clean",
        "1 damage found",
        "2 could not run",
    ] {
        assert!(out.contains(needle), "`{needle}` missing from:\n{out}");
    }
}

#[test]
fn damage_is_named_and_repaired() {
    let s = Scratch::new("scrub");
    let p = new_heap(&s, "r.heap");
    let (base, a, b, plain) = fill(&p);
    // Clean: exit 0, both objects seen, the plain block is not one.
    let v = run_json(&["heap", "scrub", &p], 0);
    assert_eq!(v["clean"], true);
    assert_eq!(v["objects"], 2);
    assert_eq!(v["pairs_checked"], 2 * 2 + 8 + 125);
    // Three flips in b's word 70 (two in the data word, one in the check word), one in a's
    // length pair.
    let b70 = base + pair_offset(b, 70);
    flip(&p, b70, 1 << 3 | 1 << 60);
    flip(&p, b70 + 8, 1 << 17);
    flip(&p, base + a + 16, 1 << 40);
    let damaged = std::fs::read(&p).unwrap();
    let o = kavach(&["heap", "scrub", &p]);
    assert_code(&o, 1);
    let text = common::stdout(&o);
    assert!(
        text.contains(&format!(
            "object at heap offset {b:#x}, word 70 (bytes 560..568)"
        )),
        "{text}"
    );
    assert!(
        text.contains("2 flipped bit(s) in the data word, 1 in the check word"),
        "{text}"
    );
    assert!(text.contains("header length"), "{text}");
    assert!(text.contains("--repair"), "{text}");
    assert_eq!(
        std::fs::read(&p).unwrap(),
        damaged,
        "a scrub without --repair wrote"
    );
    let v = run_json(&["heap", "scrub", &p], 1);
    let fixes = v["corrected"].as_array().unwrap();
    assert_eq!(fixes.len(), 2);
    assert_eq!(fixes[1]["object"], b);
    assert_eq!(fixes[1]["part"]["word"], 70);
    assert_eq!(fixes[1]["medium_offset"], b70);
    // Repair: exit 1 (damage was found), the pairs are clean afterwards.
    let o = kavach(&["heap", "scrub", &p, "--repair"]);
    assert_code(&o, 1);
    assert!(
        common::stdout(&o).contains("2 pair(s) corrected and written back"),
        "{}",
        common::stdout(&o)
    );
    let v = run_json(&["heap", "scrub", &p], 0);
    assert_eq!(v["clean"], true);
    assert_eq!(
        peek(&p, base + plain, 128),
        vec![0xC3u8; 128],
        "plain block untouched"
    );
    // A stray whole-word write into a's word 2: uncorrectable, exit 1 with or without repair,
    // and the word is left as it is.
    let a2 = base + pair_offset(a, 2);
    poke(&p, a2, &0x0123_4567_89AB_CDEFu64.to_le_bytes());
    for args in [
        &["heap", "scrub", &p][..],
        &["heap", "scrub", &p, "--repair"],
    ] {
        let o = kavach(args);
        assert_code(&o, 1);
        let text = common::stdout(&o);
        assert!(
            text.contains(&format!(
                "UNCORRECTABLE: object at heap offset {a:#x}, word 2 (bytes 16..24)"
            )),
            "{text}"
        );
        assert!(text.contains("1 uncorrectable word(s)"), "{text}");
    }
    assert_eq!(peek(&p, a2, 8), 0x0123_4567_89AB_CDEFu64.to_le_bytes());
    let v = run_json(&["heap", "scrub", &p], 1);
    assert_eq!(v["uncorrectable"][0]["object"], a);
    assert_eq!(v["uncorrectable"][0]["part"]["word"], 2);
}

#[test]
fn a_scrub_that_cannot_run_exits_2_and_changes_nothing() {
    let s = Scratch::new("scrub-refused");
    let missing = s.path("missing.heap");
    let o = kavach(&["heap", "scrub", &missing]);
    assert_refused(&o, 2, "cannot open pool");
    let p = new_heap(&s, "r.heap");
    fill(&p);
    let before = std::fs::read(&p).unwrap();
    for repair in [false, true] {
        let mut args = vec!["heap", "scrub", &p, "--region", "nope"];
        if repair {
            args.push("--repair");
        }
        let o = kavach(&args);
        assert_refused(&o, 2, "no region `nope`");
        assert_eq!(std::fs::read(&p).unwrap(), before, "repair {repair}");
    }
    // A clean scrub with --repair exits 0.
    let o = kavach(&["heap", "scrub", &p, "--repair", "--json"]);
    assert_code(&o, 0);
    assert_eq!(json(&o)["repaired"], true);
}
