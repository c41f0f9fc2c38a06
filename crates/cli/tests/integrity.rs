//! The integrity commands as a user drives them: `pool create --redundancy`, `debug fill`,
//! `debug digest`, `inject bitflip|lost-write|misdirected-write`, `scrub`, `repair` and the
//! integrity facts of `pool info`. The loop a user runs to test the machinery: fill, digest,
//! inject, scrub finds it (exit 1) and names the page, repair fixes it (exit 0), scrub is clean,
//! and the digest is back to what it should be. Small pools on /dev/shm keep it quick.

mod common;

use common::{Scratch, assert_code, assert_refused, kavach, run_json, run_ok};
use std::sync::Arc;

fn digest(p: &str) -> String {
    let v = run_json(&["debug", "digest", p], 0);
    let sha = v["sha256"].as_str().expect("sha256").to_string();
    assert_eq!(sha.len(), 64);
    assert!(sha.chars().all(|c| c.is_ascii_hexdigit()));
    sha
}

/// A new 4 MiB pool with redundancy in `mode` (stripes of 4), filled from seed 1.
fn filled_pool(s: &Scratch, name: &str, mode: &str) -> String {
    let p = s.path(name);
    let v = run_json(
        &["pool", "create", &p, "--size", "4MiB", "--redundancy", mode],
        0,
    );
    let data = &v["regions"][0];
    assert_eq!(data["name"], "data");
    assert_eq!(data["integrity"]["mode"], mode);
    assert_eq!(data["integrity"]["state"], "clean");
    assert_eq!(data["integrity"]["stripe_pages"], 4);
    assert_eq!(v["regions"][1]["name"], "data.integrity");
    assert_eq!(
        v["free_bytes"], 0,
        "data and integrity regions fill the pool"
    );
    let f = run_json(&["debug", "fill", &p, "--seed", "1"], 0);
    assert_eq!(f["mode"], mode);
    assert_eq!(f["pages"], data["integrity"]["data_pages"]);
    p
}

/// Data page numbers named by `scrub --json`, sorted.
fn damaged_pages(p: &str) -> Vec<u64> {
    let v = run_json(&["scrub", p], 1);
    assert_eq!(v["clean"], false);
    let mut pages: Vec<u64> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            assert_eq!(f["kind"], "data-page", "{f}");
            for field in ["offset", "expected", "found", "description"] {
                assert!(!f[field].is_null(), "finding lacks {field}: {f}");
            }
            f["index"].as_u64().unwrap()
        })
        .collect();
    pages.sort_unstable();
    pages
}

/// Scrub finds exactly `pages` (exit 1, named in the human output too), repair fixes all of
/// them (exit 0), and the next scrub is clean (exit 0).
fn find_and_repair(p: &str, pages: &[u64]) {
    assert_eq!(damaged_pages(p), pages);
    let text = run_ok(&["scrub", p], 1);
    for page in pages {
        assert!(text.contains(&format!("data page {page} ")), "{text}");
    }
    let v = run_json(&["repair", p], 0);
    assert_eq!(v["all_repaired"], true);
    assert_eq!(v["repaired"], pages.len());
    assert_eq!(v["unrepaired"], 0);
    for o in v["outcomes"].as_array().unwrap() {
        assert_eq!(o["repaired"], true);
        assert!(o["how"].as_str().unwrap().contains("parity"), "{o}");
    }
    let v = run_json(&["scrub", p], 0);
    assert_eq!(v["clean"], true);
    assert!(v["findings"].as_array().unwrap().is_empty());
    assert!(v["pages_checked"].as_u64().unwrap() > 0);
    assert!(run_ok(&["repair", p], 0).contains("nothing to repair"));
}

#[test]
fn every_integrity_command_has_help_with_exit_codes() {
    let commands: &[&[&str]] = &[
        &["debug"],
        &["debug", "fill"],
        &["debug", "digest"],
        &["inject"],
        &["inject", "bitflip"],
        &["inject", "lost-write"],
        &["inject", "misdirected-write"],
        &["scrub"],
        &["repair"],
        &["pool", "create"],
    ];
    for c in commands {
        let mut args = c.to_vec();
        args.push("--help");
        let out = run_ok(&args, 0);
        assert!(out.contains("Usage: kavach"), "{c:?}");
        if c.len() == 2 && c[0] != "pool" || c[0] == "scrub" || c[0] == "repair" {
            assert!(out.contains("Exit status"), "{c:?} --help: {out}");
        }
    }
    let scrub = run_ok(&["scrub", "--help"], 0);
    assert!(scrub.contains("1 damage found") && scrub.contains("2 the scrub could not run"));
    let repair = run_ok(&["repair", "--help"], 0);
    assert!(repair.contains("1 some damage could not be repaired"));
    assert!(run_ok(&["inject", "lost-write", "--help"], 0).contains("acknowledged"));
    assert!(run_ok(&["pool", "create", "--help"], 0).contains("txb-page"));
}

#[test]
fn each_fault_is_found_repaired_and_the_digest_comes_back() {
    let s = Scratch::new("loop");
    for mode in ["lazy", "eager", "txb-page"] {
        let p = filled_pool(&s, &format!("{mode}.pool"), mode);
        let d = digest(&p);
        assert_eq!(run_json(&["scrub", &p], 0)["clean"], true, "{mode}");

        // One bit, then 64 bits of another page.
        let v = run_json(&["inject", "bitflip", &p, "--page", "5"], 0);
        assert_eq!(v["bits"].as_array().unwrap().len(), 1);
        assert_eq!(v["digest_intended"], d.as_str());
        let at = v["offset"].as_u64().unwrap();
        let bit = &v["bits"][0];
        assert!((at..at + 4096).contains(&bit["offset"].as_u64().unwrap()));
        assert!(bit["bit"].as_u64().unwrap() < 8);
        assert_ne!(digest(&p), d, "{mode}: the flip changed the data");
        find_and_repair(&p, &[5]);
        assert_eq!(digest(&p), d, "{mode}: bitflip 1");
        let v = run_json(
            &[
                "inject", "bitflip", &p, "--page", "9", "--bits", "64", "--seed", "3",
            ],
            0,
        );
        assert_eq!(v["bits"].as_array().unwrap().len(), 64);
        find_and_repair(&p, &[9]);
        assert_eq!(digest(&p), d, "{mode}: bitflip 64");

        // A lost write: the page holds its previous contents again (so the digest is the one
        // before), but redundancy covers the new contents, which repair brings back.
        let v = run_json(
            &["inject", "lost-write", &p, "--page", "7", "--seed", "2"],
            0,
        );
        let intended = v["digest_intended"].as_str().unwrap().to_string();
        assert_ne!(intended, d);
        assert_eq!(v["page"], 7);
        assert_eq!(digest(&p), d, "{mode}: the write never landed");
        find_and_repair(&p, &[7]);
        assert_eq!(digest(&p), intended, "{mode}: lost write");

        // A misdirected write to the same page of the next stripe.
        let d = intended;
        let v = run_json(&["inject", "misdirected-write", &p, "--page", "100"], 0);
        assert_eq!(v["to"], 104);
        assert_eq!(v["same_stripe"], false);
        assert_eq!(
            v["to_offset"].as_u64().unwrap() - v["offset"].as_u64().unwrap(),
            4 * 4096
        );
        let intended = v["digest_intended"].as_str().unwrap().to_string();
        assert_ne!(intended, d);
        find_and_repair(&p, &[100, 104]);
        assert_eq!(digest(&p), intended, "{mode}: misdirected write");

        // Wrapping: the last stripe's pages land on the first stripe.
        let pages = run_json(&["pool", "info", &p], 0)["regions"][0]["integrity"]["data_pages"]
            .as_u64()
            .unwrap();
        let last = (pages - 1).to_string();
        let v = run_json(&["inject", "misdirected-write", &p, "--page", &last], 0);
        assert_eq!(v["to"], 3);
        let intended = v["digest_intended"].as_str().unwrap().to_string();
        find_and_repair(&p, &[3, pages - 1]);
        assert_eq!(digest(&p), intended, "{mode}: misdirected write, wrapped");

        let info = run_ok(&["pool", "info", &p], 0);
        assert!(
            info.contains(&format!("mode {mode}, state clean, stripes of 4 pages")),
            "{info}"
        );
    }
}

#[test]
fn two_damaged_pages_in_one_stripe_are_named_and_left_alone() {
    let s = Scratch::new("two");
    let p = filled_pool(&s, "p.pool", "lazy");
    run_ok(&["inject", "bitflip", &p, "--page", "8"], 0);
    run_ok(&["inject", "bitflip", &p, "--page", "10", "--seed", "5"], 0);
    let before = digest(&p);
    let text = run_ok(&["repair", &p], 1);
    assert!(text.contains("NOT repaired: data page 8 "), "{text}");
    assert!(text.contains("NOT repaired: data page 10 "), "{text}");
    assert!(
        text.contains("page 10 of the same stripe also fails its checksum"),
        "{text}"
    );
    let v = run_json(&["repair", &p], 1);
    assert_eq!(v["all_repaired"], false);
    assert_eq!(v["unrepaired"], 2);
    let named: Vec<u64> = v["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["repaired"] == false)
        .map(|o| o["index"].as_u64().unwrap())
        .collect();
    assert_eq!(named, vec![8, 10]);
    assert_eq!(digest(&p), before, "nothing guessed");
    // A misdirected write inside one stripe is the same case, and the command says so.
    let s2 = filled_pool(&s, "q.pool", "eager");
    let text = run_ok(
        &[
            "inject",
            "misdirected-write",
            &s2,
            "--page",
            "12",
            "--to",
            "13",
        ],
        0,
    );
    assert!(text.contains("same stripe"), "{text}");
    assert_eq!(damaged_pages(&s2), vec![12, 13]);
    run_ok(&["repair", &s2], 1);
}

#[test]
fn bad_input_is_refused_with_one_clear_line() {
    let s = Scratch::new("bad");
    let missing = s.path("missing.pool");
    for cmd in ["scrub", "repair"] {
        assert_refused(&kavach(&[cmd, &missing]), 2, "No such file");
        assert_refused(&kavach(&[cmd, &missing, "--json"]), 2, "No such file");
    }
    assert_refused(
        &kavach(&["inject", "bitflip", &missing, "--page", "0"]),
        2,
        "No such file",
    );
    assert_refused(&kavach(&["debug", "digest", &missing]), 2, "No such file");
    assert_refused(
        &kavach(&["debug", "fill", &missing, "--seed", "1"]),
        2,
        "No such file",
    );

    // Not a pool.
    let junk = s.path("junk");
    std::fs::write(&junk, vec![7u8; 100_000]).unwrap();
    assert_refused(&kavach(&["scrub", &junk]), 2, "not a Kavach pool");

    // A pool without redundancy: no region `data`, then a `data` region not protected.
    let plain = s.path("plain.pool");
    run_ok(&["pool", "create", &plain, "--size", "1MiB"], 0);
    for cmd in ["scrub", "repair"] {
        assert_refused(&kavach(&[cmd, &plain]), 2, "has no region `data`");
    }
    run_ok(&["region", "create", &plain, "data", "--size", "64KiB"], 0);
    for cmd in ["scrub", "repair"] {
        assert_refused(&kavach(&[cmd, &plain]), 2, "has no redundancy");
    }
    assert_refused(
        &kavach(&["inject", "lost-write", &plain, "--page", "1"]),
        2,
        "has no redundancy",
    );

    // Redundancy mode off: nothing to check against.
    let off = s.path("off.pool");
    run_ok(
        &[
            "pool",
            "create",
            &off,
            "--size",
            "1MiB",
            "--redundancy",
            "off",
        ],
        0,
    );
    for cmd in ["scrub", "repair"] {
        assert_refused(&kavach(&[cmd, &off]), 2, "mode off");
    }

    // Page and bit counts out of range, named with the range.
    let p = filled_pool(&s, "p.pool", "lazy");
    let pages = run_json(&["pool", "info", &p], 0)["regions"][0]["integrity"]["data_pages"]
        .as_u64()
        .unwrap();
    let range = format!("0 to {}", pages - 1);
    let past = pages.to_string();
    for fault in ["bitflip", "lost-write", "misdirected-write"] {
        assert_refused(&kavach(&["inject", fault, &p, "--page", &past]), 2, &range);
    }
    assert_refused(
        &kavach(&[
            "inject",
            "misdirected-write",
            &p,
            "--page",
            "1",
            "--to",
            &past,
        ]),
        2,
        &range,
    );
    assert_refused(
        &kavach(&[
            "inject",
            "misdirected-write",
            &p,
            "--page",
            "1",
            "--to",
            "1",
        ]),
        2,
        "--to 1",
    );
    for bits in ["0", "32769"] {
        assert_refused(
            &kavach(&["inject", "bitflip", &p, "--page", "1", "--bits", bits]),
            2,
            "1 to 32768",
        );
    }
    assert_refused(
        &kavach(&["scrub", &p, "--region", "nope"]),
        2,
        "no region `nope` (it has `data`, `data.integrity`",
    );
    assert_refused(
        &kavach(&["debug", "digest", &p, "--region", "nope"]),
        2,
        "no region `nope`",
    );
    // Nothing above changed the data.
    assert_eq!(run_json(&["scrub", &p], 0)["clean"], true);

    // A refused command leaves the file byte for byte as it was (no record of a read-write
    // open, clean flag included).
    let unchanged = |path: &str, args: &[&str], needle: &str| {
        let before = std::fs::read(path).unwrap();
        assert_refused(&kavach(args), 2, needle);
        assert!(
            std::fs::read(path).unwrap() == before,
            "{args:?} changed {path}"
        );
    };
    unchanged(&p, &["repair", &p, "--region", "nope"], "no region `nope`");
    unchanged(
        &p,
        &["debug", "fill", &p, "--region", "nope"],
        "no region `nope`",
    );
    unchanged(&p, &["inject", "lost-write", &p, "--page", &past], &range);
    unchanged(
        &p,
        &[
            "inject",
            "misdirected-write",
            &p,
            "--page",
            "1",
            "--to",
            &past,
        ],
        &range,
    );
    unchanged(&plain, &["repair", &plain], "has no redundancy");
    unchanged(&plain, &["debug", "fill", &plain], "has no redundancy");
    unchanged(
        &plain,
        &["inject", "misdirected-write", &plain, "--page", "1"],
        "has no redundancy",
    );
    unchanged(&off, &["repair", &off], "mode off");

    // Out-of-range options of pool create are refused by the parser (exit 2), and a pool too
    // small for the stripe asked for is refused with nothing left behind.
    let x = s.path("x.pool");
    for bad in [
        &["--redundancy", "lazy", "--stripe", "1"][..],
        &["--redundancy", "lazy", "--stripe", "33"],
        &["--redundancy", "lazy", "--period-ms", "99"],
        &["--redundancy", "sometimes"],
        &["--stripe", "4"],
    ] {
        let mut args = vec!["pool", "create", &x, "--size", "1MiB"];
        args.extend_from_slice(bad);
        let o = kavach(&args);
        assert_code(&o, 2);
        assert!(!std::path::Path::new(&x).exists(), "{bad:?}");
    }
    let o = kavach(&[
        "pool",
        "create",
        &x,
        "--size",
        "64KiB",
        "--redundancy",
        "lazy",
        "--stripe",
        "32",
    ]);
    assert_refused(&o, 2, "make the pool larger");
    assert!(!std::path::Path::new(&x).exists());
}

/// Where things are in a protected pool: (data region offset, integrity region offset, line
/// checksums section offset within the integrity region).
fn layout_of(p: &str) -> (u64, u64, u64) {
    let v = run_json(&["pool", "info", p], 0);
    let data = &v["regions"][0];
    let meta = &v["regions"][1];
    assert_eq!(meta["name"], "data.integrity");
    (
        data["offset"].as_u64().unwrap(),
        meta["offset"].as_u64().unwrap(),
        data["integrity"]["geometry"]["linesums_at"]
            .as_u64()
            .unwrap(),
    )
}

/// Flip bit `bit` of byte `at` of the file, behind every layer's back.
fn flip(p: &str, at: u64, bit: u8) {
    let mut bytes = std::fs::read(p).unwrap();
    bytes[at as usize] ^= 1 << bit;
    std::fs::write(p, bytes).unwrap();
}

/// Offset of the reserved page (where earlier versions kept a shadow record) in the integrity
/// region (docs/format/integrity.md).
const RETIRED_AT: u64 = 4096;

/// Set the `unverified` flag of the integrity region at `meta`, as an earlier version did when
/// it found its shadow record damaged: the header copy in force, rewritten as the next header
/// write would be (the other copy, `seq` + 1).
fn mark_unverified(p: &str, meta: u64) {
    use integrity::header::Header;
    use integrity::layout::{HEADER_BYTES, HEADER_COPY_OFFSETS, flags, header::UUID_AT};
    let mut bytes = std::fs::read(p).unwrap();
    let meta = meta as usize;
    let uuid = pmem::Uuid(
        bytes[meta + UUID_AT..meta + UUID_AT + 16]
            .try_into()
            .unwrap(),
    );
    let mut h = HEADER_COPY_OFFSETS
        .iter()
        .filter_map(|&off| {
            let at = meta + off;
            let b: [u8; HEADER_BYTES] = bytes[at..at + HEADER_BYTES].try_into().unwrap();
            Header::decode(&b, &uuid, at as u64).ok()
        })
        .max_by_key(|h| h.seq)
        .unwrap();
    h.flags |= flags::UNVERIFIED;
    h.seq += 1;
    let at = meta + HEADER_COPY_OFFSETS[(h.seq % 2) as usize];
    bytes[at..at + HEADER_BYTES].copy_from_slice(&h.encode());
    std::fs::write(p, bytes).unwrap();
}

/// Run `scrub` (JSON and text) on a file made read-only (mode 0444) while this process holds
/// the pool open read-only (a shared lock: a scrub that opened the file for writing would be
/// refused, even as root, whom the mode does not stop), and check that not one byte changed;
/// returns the report. `code` is the exit status expected.
fn scrub_read_only(p: &str, code: i32) -> serde_json::Value {
    use std::os::unix::fs::PermissionsExt;
    let before = std::fs::read(p).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o444)).unwrap();
    let exclusive = common::exclusive();
    let reader = pmem::Pool::open(
        std::path::Path::new(p),
        &pmem::OpenOptions {
            read_only: true,
            domain: None,
        },
    )
    .unwrap();
    let o = exclusive.kavach(&["scrub", p, "--json"]);
    let text = exclusive.kavach(&["scrub", p]);
    drop(reader);
    drop(exclusive);
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_code(&o, code);
    assert_code(&text, code);
    assert!(
        std::fs::read(p).unwrap() == before,
        "scrub changed the pool file"
    );
    common::json(&o)
}

/// Case 3 of issue 17: a damaged shadow record made `scrub` rebuild all redundancy from the
/// data, taking a damaged page for good (exit 0, "clean", damage permanent). The record is
/// retired now: damage to its bytes decides nothing (scrub changes nothing, reports page 5 as
/// damage, exit 1). A region an earlier version marked unverified (because it found its record
/// damaged) is reported unverified with the damage named, and only a repair that proves every
/// stripe makes it verified again; the repair's open zeroes the legacy bytes.
#[test]
fn a_damaged_legacy_shadow_record_decides_nothing_and_an_unverified_mark_holds_until_repair() {
    let s = Scratch::new("shadow");
    let p = filled_pool(&s, "p.pool", "lazy");
    let (_, meta, _) = layout_of(&p);
    let v = run_json(&["inject", "bitflip", &p, "--page", "5", "--bits", "4"], 0);
    let intended = v["digest_intended"].as_str().unwrap().to_string();
    flip(&p, meta + RETIRED_AT + 20, 3);
    let pages_of = |v: &serde_json::Value| -> Vec<u64> {
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["index"].as_u64().unwrap())
            .collect()
    };
    let v = scrub_read_only(&p, 1);
    assert_eq!(v["trust"]["basis"], "current", "{v}");
    assert_eq!(pages_of(&v), vec![5], "{v}");
    mark_unverified(&p, meta);
    for _ in 0..2 {
        let v = scrub_read_only(&p, 1);
        assert_eq!(v["verified"], false);
        assert_eq!(v["trust"]["basis"], "unverified");
        assert_eq!(pages_of(&v), vec![5], "{v}");
    }
    let text = run_ok(&["scrub", &p], 1);
    assert!(
        text.contains("NOT verified") && text.contains("marked unverified"),
        "{text}"
    );
    assert!(text.contains("data page 5 at byte 0x"), "{text}");
    assert_ne!(digest(&p), intended, "nothing was repaired or rebuilt");
    let info = run_ok(&["pool", "info", &p], 0);
    assert!(
        info.contains("redundancy unverified: the region is marked unverified"),
        "{info}"
    );

    // A repair rebuilds page 5 from parity, proves every stripe, and clears the mark.
    let v = run_json(&["repair", &p], 0);
    assert_eq!(v["proved_all_stripes"], true, "{v}");
    assert_eq!(v["trust_after"]["basis"], "current");
    assert_eq!(v["repaired"], 1);
    assert_eq!(digest(&p), intended);
    let v = scrub_read_only(&p, 0);
    assert_eq!(v["verified"], true);
    let bytes = std::fs::read(&p).unwrap();
    let at = (meta + RETIRED_AT) as usize;
    assert!(
        bytes[at..at + 128].iter().all(|&b| b == 0),
        "the legacy bytes were zeroed"
    );
}

/// The unverified mark survives the update passes of other commands, and a stripe repair
/// cannot prove keeps the region unverified and exits 1.
#[test]
fn an_unverified_region_stays_unverified_until_every_stripe_is_proven() {
    let s = Scratch::new("unproven");
    let p = filled_pool(&s, "p.pool", "lazy");
    let (data, meta, _) = layout_of(&p);
    mark_unverified(&p, meta);
    // A read-write command that runs an update pass: it keeps the mark and says so.
    let text = run_ok(
        &["inject", "lost-write", &p, "--page", "20", "--seed", "4"],
        0,
    );
    assert!(text.contains("marked unverified"), "{text}");
    let v = scrub_read_only(&p, 1);
    assert_eq!(v["trust"]["basis"], "unverified");
    assert!(
        v["trust"]["reason"]
            .as_str()
            .unwrap()
            .contains("earlier open"),
        "{v}"
    );
    // Stripe 2 (pages 8..12): its parity page damaged, and page 9 too: nothing proves it.
    let v = run_json(&["pool", "info", &p], 0);
    let parity_at = v["regions"][0]["integrity"]["geometry"]["parity_at"]
        .as_u64()
        .unwrap();
    flip(&p, meta + parity_at + 2 * 4096 + 100, 1);
    flip(&p, data + 9 * 4096 + 7, 6);
    let v = run_json(&["repair", &p], 1);
    assert_eq!(v["proved_all_stripes"], false);
    assert_eq!(v["trust_after"]["basis"], "unverified");
    // Page 20's lost write is repaired; page 9 and stripe 2's parity are not.
    let unrepaired: Vec<(String, u64)> = v["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["repaired"] == false)
        .map(|o| {
            (
                o["kind"].as_str().unwrap().to_string(),
                o["index"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(unrepaired.contains(&("data-page".into(), 9)), "{v}");
    assert_eq!(scrub_read_only(&p, 1)["trust"]["basis"], "unverified");
}

/// A region left open by a crash: scrub changes nothing and names the pages whose checksums do
/// not match as unverifiable (a write the lost pass never covered, or damage), exit 1; the
/// read-write open of `repair` resyncs, names the page it took as data, and scrub is clean.
#[test]
fn an_unclean_region_is_reported_by_scrub_and_resynced_visibly_by_repair() {
    let s = Scratch::new("unclean");
    let p = filled_pool(&s, "p.pool", "lazy");
    {
        // Write one page and "crash": drop the handles without closing them.
        let _exclusive = common::exclusive();
        let pool = pmem::Pool::open(std::path::Path::new(&p), &pmem::OpenOptions::default())
            .unwrap()
            .map_medium(Arc::new);
        let (prot, _) =
            integrity::open_in_pool(&pool, "data", Default::default(), &mut |_, _| {}).unwrap();
        prot.write(3 * 4096, &[0xa5; 100]).unwrap();
        drop(prot);
        drop(pool);
    }
    let v = run_json(&["pool", "info", &p], 0);
    assert_eq!(v["clean_shutdown"], false);
    assert_eq!(v["regions"][0]["integrity"]["state"], "open");
    let v = scrub_read_only(&p, 1);
    assert_eq!(v["trust"]["basis"], "unclean");
    assert_eq!(v["open"]["resync_pages"], 0, "scrub never resyncs");
    assert!(v["findings"].as_array().unwrap().is_empty());
    let pages: Vec<u64> = v["unverifiable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["index"].as_u64().unwrap())
        .collect();
    assert_eq!(pages, vec![3], "{v}");
    let text = run_ok(&["scrub", &p], 1);
    assert!(
        text.contains("unverifiable: data page 3 at byte 0x"),
        "{text}"
    );
    assert!(text.contains("not closed cleanly"), "{text}");

    let text = run_ok(&["repair", &p], 0);
    assert!(
        text.contains("resynced") && text.contains("cannot tell which"),
        "{text}"
    );
    assert!(
        text.contains("3 (0x"),
        "the page taken as data is named: {text}"
    );
    // Closed cleanly now: the next scrub verifies the region.
    let v = scrub_read_only(&p, 0);
    assert_eq!(v["verified"], true);
    let v = run_json(&["pool", "info", &p], 0);
    assert_eq!(v["regions"][0]["integrity"]["state"], "clean");
}

/// Eager mode keeps a checksum per 64-byte line: scrub verifies them too. A damaged line
/// checksum (the page, its page checksum and the parity all sound) is found only by them.
#[test]
fn eager_scrub_verifies_the_line_checksums() {
    let s = Scratch::new("lines");
    let p = filled_pool(&s, "p.pool", "eager");
    let (data, meta, linesums_at) = layout_of(&p);
    let v = scrub_read_only(&p, 0);
    assert!(v["lines_checked"].as_u64().unwrap() > 0);
    // Line 17 of page 6: its line checksum.
    flip(&p, meta + linesums_at + 4 * (6 * 64 + 17) + 2, 5);
    let v = scrub_read_only(&p, 1);
    let f = &v["findings"][0];
    assert_eq!(v["findings"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(f["kind"], "line-checksum", "{v}");
    assert_eq!(f["index"], 6 * 64 + 17);
    let text = run_ok(&["scrub", &p], 1);
    assert!(text.contains("page 6, line 17) at byte 0x"), "{text}");
    let v = run_json(&["repair", &p], 0);
    assert_eq!(v["repaired"], 1);
    scrub_read_only(&p, 0);
    // Damaged data: the finding names the lines that fail.
    flip(&p, data + 11 * 4096 + 64 * 40 + 3, 2);
    let v = scrub_read_only(&p, 1);
    let f = &v["findings"][0];
    assert_eq!(f["kind"], "data-page");
    assert_eq!(f["index"], 11);
    assert_eq!(f["lines"], serde_json::json!([40]));
    assert!(f["description"].as_str().unwrap().contains("line(s) 40"));
    find_and_repair(&p, &[11]);
}
