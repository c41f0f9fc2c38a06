//! `kavach heap create|check|stats` as a user drives them, with heaps that a program (this test,
//! through the `heap` library) filled: a clean heap checks clean, a block nothing points to is
//! reported as the one leak, an interrupted transaction shows as pending recovery, damage written
//! into the file is named by structure, and bad inputs are refused with exit 2 and one line.

mod common;

use common::{Scratch, assert_code, assert_refused, kavach, run_json, run_ok};
use heap::HeapFile;
use heap::layout::{CHUNK_SIZE, ChunkWord, Geometry, HEADER_COPY_0, HEADER_COPY_1};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

/// A new 16 MiB heap pool with 4 lanes of 64 KiB, made by the command.
fn new_heap(s: &Scratch, name: &str) -> String {
    let p = s.path(name);
    let v = run_json(
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
    assert_eq!(v["size"], 16 << 20);
    assert_eq!(v["region"]["name"], "heap");
    assert_eq!(v["geometry"]["lanes"], 4);
    assert_eq!(v["geometry"]["lane_bytes"], 64 * 1024);
    p
}

/// What a program left in a heap: its blocks, and where the heap lies in the pool.
struct Filled {
    /// Pool byte offset of the heap region.
    base: u64,
    geo: Geometry,
    root: u64,
    /// A 64-byte block the root points to.
    linked: u64,
    /// A 200-byte block (256-byte class) nothing points to.
    unlinked: u64,
    /// A large block (two chunks) the linked block points to.
    large: u64,
}

/// Allocate, in one transaction: a root, a block linked from the root, a large block linked
/// from that block, and a block nothing links to.
fn fill(p: &str) -> Filled {
    let _exclusive = common::exclusive();
    let hf = HeapFile::open(Path::new(p), "heap").expect("open the heap");
    let raw = hf.raw().clone();
    let (root, _) = raw.root(64).expect("root");
    let mut lane = raw.lane();
    raw.begin(&mut lane);
    let linked = raw.alloc(&mut lane, 64, true).unwrap();
    let unlinked = raw.alloc(&mut lane, 200, true).unwrap();
    let large = raw.alloc(&mut lane, CHUNK_SIZE + 4096, true).unwrap();
    raw.write(&mut lane, root + 8, &linked.to_le_bytes())
        .unwrap();
    raw.write(&mut lane, linked + 16, &large.to_le_bytes())
        .unwrap();
    raw.commit(&mut lane).unwrap();
    drop(lane);
    let f = Filled {
        base: hf.region().offset,
        geo: raw.geometry(),
        root,
        linked,
        unlinked,
        large,
    };
    drop(raw);
    hf.close().expect("close the heap");
    f
}

fn read_file(p: &str) -> Vec<u8> {
    std::fs::read(p).unwrap()
}

/// Write `bytes` at pool byte `at` of the file `p`.
fn poke(p: &str, at: u64, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(bytes).unwrap();
}

/// Read 8 bytes at pool byte `at` of the file `p`.
fn peek_u64(p: &str, at: u64) -> u64 {
    let mut f = std::fs::File::open(p).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    let mut b = [0u8; 8];
    f.read_exact(&mut b).unwrap();
    u64::from_le_bytes(b)
}

/// A copy of `p` named `name`.
fn copy(s: &Scratch, p: &str, name: &str) -> String {
    let q = s.path(name);
    std::fs::copy(p, &q).unwrap();
    q
}

/// The structures named by `heap check --json`.
fn structures(v: &serde_json::Value) -> Vec<String> {
    v["corruptions"]
        .as_array()
        .expect("corruptions")
        .iter()
        .map(|c| c["structure"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn help_answers_what_is_checked_and_the_exit_codes() {
    for c in [
        &["heap"][..],
        &["heap", "create"],
        &["heap", "check"],
        &["heap", "stats"],
    ] {
        let mut args = c.to_vec();
        args.push("--help");
        let out = run_ok(&args, 0);
        assert!(out.contains("Usage: kavach heap"), "{c:?}: {out}");
    }
    let check = run_ok(&["heap", "check", "--help"], 0);
    for needle in [
        "read-only",
        "conservative",
        "no pointer reaches",
        "double allocation",
        "Recovery pending",
        "0 no problem found",
        "1 problems found",
        "2 the check could not run",
        "--no-leaks",
    ] {
        assert!(check.contains(needle), "check --help lacks `{needle}`");
    }
    assert!(run_ok(&["heap", "stats", "--help"], 0).contains("Exit status"));
    assert!(run_ok(&["heap", "create", "--help"], 0).contains("--lane-size"));
}

#[test]
fn a_fresh_heap_is_empty_and_clean() {
    let s = Scratch::new("fresh");
    let p = new_heap(&s, "fresh.pool");
    let v = run_json(&["heap", "stats", &p], 0);
    let g = &v["geometry"];
    assert_eq!(g["lanes"], 4);
    assert_eq!(g["lane_bytes"], 65536);
    assert_eq!(g["redo_bytes_per_lane"], 16384);
    assert_eq!(g["undo_bytes_per_lane"], 65536 - 64 - 16384);
    assert_eq!(v["region"]["length"], g["region_bytes"]);
    let chunks = g["chunks"].as_u64().unwrap();
    assert!(chunks >= 50, "{chunks} chunks in 16 MiB");
    assert_eq!(v["chunks"]["free"], chunks);
    assert_eq!(v["chunks"]["run"], 0);
    assert_eq!(v["blocks"], 0);
    assert_eq!(v["allocated_bytes"], 0);
    assert!(v["root"].is_null());
    assert_eq!(v["pending"].as_array().unwrap().len(), 0);
    assert_eq!(v["classes"].as_array().unwrap().len(), 0);
    let out = run_ok(&["heap", "stats", &p], 0);
    for needle in ["region", "lanes", "chunks", "root        none", "CLASS"] {
        assert!(out.contains(needle), "stats lacks `{needle}`: {out}");
    }
    let out = run_ok(&["heap", "check", &p], 0);
    assert!(out.contains("healthy"), "{out}");
    let v = run_json(&["heap", "check", &p], 0);
    assert_eq!(v["clean"], true);
    assert_eq!(v["leaks_checked"], true);
    assert_eq!(v["recovery_pending"], false);
    // The pool layer agrees, and the heap is where the directory says.
    let info = run_json(&["pool", "info", &p], 0);
    assert_eq!(info["regions"][0]["name"], "heap");
    assert_eq!(info["regions"][0]["kind_name"], "heap");
}

#[test]
fn a_block_nothing_points_to_is_the_one_leak() {
    let s = Scratch::new("leak");
    let p = new_heap(&s, "leak.pool");
    let f = fill(&p);
    let before = read_file(&p);
    let v = run_json(&["heap", "check", &p], 1);
    assert_eq!(v["clean"], false);
    assert_eq!(v["leaks_checked"], true);
    assert_eq!(v["corruptions"].as_array().unwrap().len(), 0);
    assert_eq!(v["double_allocated"].as_array().unwrap().len(), 0);
    let leaked = v["leaked"].as_array().unwrap();
    assert_eq!(leaked.len(), 1, "{leaked:?}");
    assert_eq!(leaked[0]["offset"], f.unlinked);
    assert_eq!(leaked[0]["size"], 256);
    assert_eq!(v["blocks"], 4);
    assert_eq!(v["root"][0], f.root);
    let out = run_ok(&["heap", "check", &p], 1);
    assert!(out.contains("leak:"), "{out}");
    assert!(out.contains(&format!("{:#x}", f.unlinked)), "{out}");
    assert!(out.contains("problems found: 1 leaked"), "{out}");
    // Without the reachability walk, the same heap is clean.
    let v = run_json(&["heap", "check", &p, "--no-leaks"], 0);
    assert_eq!(v["leaks_checked"], false);
    // Stats: the root, the classes (64 B: root and linked; 256 B: unlinked) and the large block.
    let v = run_json(&["heap", "stats", &p], 0);
    assert_eq!(v["root"]["offset"], f.root);
    assert_eq!(v["root"]["size"], 64);
    assert_eq!(v["blocks"], 4);
    assert_eq!(v["allocated_bytes"], 64 + 64 + 256 + 2 * CHUNK_SIZE);
    assert_eq!(v["chunks"]["run"], 2);
    assert_eq!(v["chunks"]["large"], 2);
    assert_eq!(v["large"]["blocks"], 1);
    let classes = v["classes"].as_array().unwrap();
    assert_eq!(classes.len(), 2);
    assert_eq!(classes[0]["block_size"], 64);
    assert_eq!(classes[0]["allocated"], 2);
    assert_eq!(classes[0]["capacity"], (CHUNK_SIZE - 1024) / 64);
    assert_eq!(classes[1]["block_size"], 256);
    assert_eq!(classes[1]["allocated"], 1);
    let out = run_ok(&["heap", "stats", &p], 0);
    assert!(out.contains("large"), "{out}");
    assert!(out.contains(&format!("{:#x}", f.root)), "{out}");
    // Check and stats changed nothing.
    assert!(
        read_file(&p) == before,
        "a read-only command changed the file"
    );
    // Linking the leaked block from the root cures the leak.
    let exclusive = common::exclusive();
    let hf = HeapFile::open(Path::new(&p), "heap").unwrap();
    let raw = hf.raw().clone();
    let mut lane = raw.lane();
    raw.begin(&mut lane);
    raw.write(&mut lane, f.root + 24, &f.unlinked.to_le_bytes())
        .unwrap();
    raw.commit(&mut lane).unwrap();
    drop(lane);
    drop(raw);
    // While the program holds the pool, the check cannot run.
    assert_refused(&exclusive.kavach(&["heap", "check", &p]), 2, "in use");
    hf.close().unwrap();
    drop(exclusive);
    let v = run_json(&["heap", "check", &p], 0);
    assert_eq!(v["leaked"].as_array().unwrap().len(), 0);
    let _ = (f.linked, f.large);
}

#[test]
fn an_interrupted_transaction_is_pending_recovery() {
    let s = Scratch::new("pending");
    let p = new_heap(&s, "pending.pool");
    let f = fill(&p);
    {
        // A program dies in the middle of a transaction: its undo entries stay in the lane.
        let _exclusive = common::exclusive();
        let hf = HeapFile::open(Path::new(&p), "heap").unwrap();
        let raw = hf.raw().clone();
        let mut lane = raw.lane();
        raw.begin(&mut lane);
        raw.write(&mut lane, f.root + 8, &0u64.to_le_bytes())
            .unwrap();
        let _ = raw.alloc(&mut lane, 100, true).unwrap();
        // Dropped without commit or close.
    }
    let v = run_json(&["heap", "check", &p], 0);
    assert_eq!(v["recovery_pending"], true);
    assert_eq!(v["leaks_checked"], false);
    let pending = v["pending"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert!(pending[0]["undo_entries"].as_u64().unwrap() >= 1);
    let out = run_ok(&["heap", "check", &p], 0);
    assert!(out.contains("pending: lane"), "{out}");
    assert!(out.contains("recovery is pending"), "{out}");
    assert!(out.contains("so leaks were not checked"), "{out}");
    let v = run_json(&["heap", "stats", &p], 0);
    assert_eq!(v["pending"].as_array().unwrap().len(), 1);
    // Opening recovers: the root points to the linked block again, and the leak is back.
    common::in_process(|| {
        HeapFile::open(Path::new(&p), "heap")
            .unwrap()
            .close()
            .unwrap()
    });
    let v = run_json(&["heap", "check", &p], 1);
    assert_eq!(v["recovery_pending"], false);
    assert_eq!(v["leaked"].as_array().unwrap().len(), 1);
    assert_eq!(v["leaked"][0]["offset"], f.unlinked);
}

#[test]
fn damage_is_named_by_structure() {
    let s = Scratch::new("damage");
    let p = new_heap(&s, "base.pool");
    let f = fill(&p);
    let g = f.geo;
    let run_chunk = g.chunk_of(f.linked);
    let large_chunk = g.chunk_of(f.large);

    // A flipped bit in the chunk table word of a run in use (the 256-byte run, not the one
    // holding the root, whose loss would also make the root line point at no known block).
    let q = copy(&s, &p, "word.pool");
    let word_chunk = g.chunk_of(f.unlinked);
    assert_ne!(word_chunk, run_chunk);
    let at = f.base + g.chunk_word(word_chunk);
    let word = peek_u64(&q, at);
    assert_ne!(word, 0, "the run's chunk word");
    poke(&q, at, &(word ^ 1 << 20).to_le_bytes());
    let before = read_file(&q);
    let v = run_json(&["heap", "check", &q], 1);
    assert_eq!(
        structures(&v),
        [format!("chunk table entry {word_chunk}")],
        "{v}"
    );
    assert_eq!(v["corruptions"][0]["field"], "check");
    assert_eq!(v["leaks_checked"], false, "no leak check over damage");
    let out = run_ok(&["heap", "check", &q], 1);
    assert!(
        out.contains(&format!("damage: chunk table entry {word_chunk}")),
        "{out}"
    );
    assert!(out.contains("expected") && out.contains("found"), "{out}");
    assert!(read_file(&q) == before, "check changed a damaged file");
    // Stats still runs over damaged chunks and counts them.
    let v = run_json(&["heap", "stats", &q], 0);
    assert_eq!(v["damage"].as_array().unwrap().len(), 1);

    // A bit beyond the run's blocks in its bitmap (64-byte class: 4080 blocks of 4096 bits).
    let q = copy(&s, &p, "bitmap.pool");
    let at = f.base + g.chunk(run_chunk) + 511;
    poke(&q, at, &[0x80]);
    let v = run_json(&["heap", "check", &q], 1);
    assert_eq!(
        structures(&v),
        [format!("run bitmap of chunk {run_chunk} (class 0)")],
        "{v}"
    );
    assert_eq!(v["corruptions"][0]["offset"], at);
    assert!(
        v["corruptions"][0]["found"]
            .as_str()
            .unwrap()
            .contains("bit 4095")
    );

    // A damaged header copy 1: the heap still walks from copy 0.
    let q = copy(&s, &p, "header1.pool");
    poke(&q, f.base + HEADER_COPY_1 + 40, &[0xee]);
    let v = run_json(&["heap", "check", &q], 1);
    assert_eq!(structures(&v), ["heap header copy 1"], "{v}");
    assert_eq!(v["walked"], true);
    assert_eq!(v["blocks"], 4);

    // Both header copies damaged: the walk cannot start; check says so, stats cannot run.
    let q = copy(&s, &p, "headers.pool");
    poke(&q, f.base + HEADER_COPY_0, b"garbage!");
    poke(&q, f.base + HEADER_COPY_1, b"garbage!");
    let v = run_json(&["heap", "check", &q], 1);
    assert_eq!(v["walked"], false);
    assert_eq!(
        structures(&v),
        ["heap header copy 0", "heap header copy 1"],
        "{v}"
    );
    assert_eq!(v["corruptions"][0]["field"], "magic");
    assert_eq!(v["corruptions"][1]["field"], "magic");
    let out = run_ok(&["heap", "check", &q], 1);
    assert!(out.contains("no good header copy"), "{out}");
    assert_refused(&kavach(&["heap", "stats", &q]), 2, "heap header copy 0");

    // A chunk inside the large block's span claimed by a run: allocated twice.
    let q = copy(&s, &p, "double.pool");
    let inner = large_chunk + 1;
    poke(
        &q,
        f.base + g.chunk_word(inner),
        &ChunkWord::Run(3).encode(inner).to_le_bytes(),
    );
    let v = run_json(&["heap", "check", &q], 1);
    let doubles = v["double_allocated"].as_array().unwrap();
    assert_eq!(doubles.len(), 1, "{v}");
    assert_eq!(doubles[0]["offset"], g.chunk(inner));
    assert_eq!(
        structures(&v),
        [format!("chunk table entry {inner}")],
        "{v}"
    );
    let out = run_ok(&["heap", "check", &q], 1);
    assert!(out.contains("double allocation"), "{out}");

    // A lane state word with its reserved bit set.
    let q = copy(&s, &p, "lane.pool");
    let at = f.base + g.lane(2);
    let state = peek_u64(&q, at);
    poke(&q, at, &(state | 1).to_le_bytes());
    let v = run_json(&["heap", "check", &q], 1);
    assert_eq!(structures(&v), ["lane 2 state word"], "{v}");
    assert_eq!(v["corruptions"][0]["offset"], at);

    // The root line pointing at no block.
    let q = copy(&s, &p, "root.pool");
    poke(
        &q,
        f.base + heap::layout::ROOT_LINE,
        &(f.unlinked + 8).to_le_bytes(),
    );
    let v = run_json(&["heap", "check", &q], 1);
    assert_eq!(structures(&v), ["root line"], "{v}");
}

#[test]
fn bad_inputs_are_refused_without_a_panic() {
    let s = Scratch::new("bad");
    let missing = s.path("missing.pool");
    for cmd in ["check", "stats"] {
        assert_refused(
            &kavach(&["heap", cmd, &missing]),
            2,
            "No such file or directory",
        );
    }
    // A file of random bytes.
    let random = s.path("random.bin");
    let mut bytes = vec![0u8; 1 << 20];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for b in bytes.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    std::fs::write(&random, &bytes).unwrap();
    for cmd in ["check", "stats"] {
        assert_refused(&kavach(&["heap", cmd, &random]), 2, "not a Kavach pool");
    }
    // A pool with only a log region.
    let log = s.path("log.pool");
    run_ok(&["log", "create", &log, "--size", "4MiB"], 0);
    for cmd in ["check", "stats"] {
        assert_refused(&kavach(&["heap", cmd, &log]), 2, "no heap region");
        assert_refused(
            &kavach(&["heap", cmd, &log, "--region", "log"]),
            2,
            "is a log region, not a heap",
        );
        assert_refused(
            &kavach(&["heap", cmd, &log, "--region", "heap"]),
            2,
            "no region `heap`",
        );
    }
    // A raw region named like a heap.
    let rawp = s.path("raw.pool");
    run_ok(&["pool", "create", &rawp, "--size", "4MiB"], 0);
    run_ok(&["region", "create", &rawp, "heap", "--size", "1MiB"], 0);
    assert_refused(
        &kavach(&["heap", "check", &rawp, "--region", "heap"]),
        2,
        "is a raw region, not a heap",
    );
    // A truncated heap pool.
    let p = new_heap(&s, "h.pool");
    let t = copy(&s, &p, "truncated.pool");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&t)
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    for cmd in ["check", "stats"] {
        assert_refused(&kavach(&["heap", cmd, &t]), 2, "truncated");
    }
    // Create: an existing file is left alone; sizes that do not fit are refused.
    let before = read_file(&p);
    assert_refused(
        &kavach(&["heap", "create", &p, "--size", "16MiB"]),
        2,
        "already exists",
    );
    assert!(read_file(&p) == before);
    let small = s.path("small.pool");
    assert_refused(
        &kavach(&["heap", "create", &small, "--size", "4MiB"]),
        2,
        "--lanes",
    );
    assert!(!Path::new(&small).exists(), "a failed create left a file");
    assert_refused(
        &kavach(&[
            "heap",
            "create",
            &small,
            "--size",
            "16MiB",
            "--lane-size",
            "5000",
        ]),
        2,
        "--lane-size",
    );
    assert!(!Path::new(&small).exists());
    // Bad flags: clap's message, exit 2.
    for args in [
        vec!["heap", "create", &small, "--size", "lots"],
        vec!["heap", "create", &small, "--size", "16MiB", "--lanes", "0"],
        vec!["heap", "check"],
    ] {
        let o = kavach(&args);
        assert_code(&o, 2);
    }
}
