//! `docs/format/heap.md`, `docs/format/undo-log.md` and `docs/format/redo-log.md` against
//! the code.
//!
//! - Their field tables must be the tables of `heap::layout`, and each documented field must
//!   hold, at its documented offset and size, what the code really writes: a header from
//!   `Header::encode` and from `RawHeap::format`, chunk-table words and run bitmaps after real
//!   allocations, the root line, and undo entries (snapshots, bit entries, chunk-word
//!   snapshots) left by real transactions on the simulator, read after commit and from crash
//!   images; and recovery from those images does what the document says.
//! - Their constants tables must list every constant of `heap::layout`, with its value.
//! - The size-class table, the geometry examples and formula, the chunk-word examples and the
//!   order of the header checks must be what the code does.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use heap::layout::*;
use heap::raw::scan_undo;
use heap::{Heap, HeapOptions, PPtr, RawHeap};
use pmem::format_doc::{
    self, ConstValue, DocField, cells, check_fields, compare_constants, named_rows, parse_fields,
    table_rows, verdict,
};
use pmem::{CrashPlan, Medium, SimConfig, SimMedium};

const LEN: u64 = 4 << 20;

fn read_doc(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/format")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn heap_md() -> String {
    read_doc("heap.md")
}

fn undo_md() -> String {
    read_doc("undo-log.md")
}

fn redo_md() -> String {
    read_doc("redo-log.md")
}

/// The fields the document lists for `structure`.
fn doc_fields(md: &str, structure: &str) -> Vec<DocField> {
    parse_fields(md, structure).unwrap_or_else(|e| panic!("the `{structure}` table: {e}"))
}

/// The documented field `name` of `structure`.
fn field<'a>(fields: &'a [DocField], structure: &str, name: &str) -> &'a DocField {
    fields
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("the `{structure}` table has no field `{name}`"))
}

/// The bytes of a documented field.
fn bytes_of<'a>(b: &'a [u8], f: &DocField) -> &'a [u8] {
    &b[f.offset as usize..(f.offset + f.size) as usize]
}

/// A documented field of at most 8 bytes, as a little-endian number.
fn num(b: &[u8], f: &DocField) -> u64 {
    assert!(
        f.size <= 8,
        "`{}` is {} bytes, not a number",
        f.name,
        f.size
    );
    let mut w = [0u8; 8];
    w[..f.size as usize].copy_from_slice(bytes_of(b, f));
    u64::from_le_bytes(w)
}

/// The bytes at region offset `off` of a medium holding a heap at 0.
fn read_at(m: &dyn Medium, off: u64, len: u64) -> Vec<u8> {
    let mut b = vec![0u8; len as usize];
    m.read(off as usize, &mut b);
    b
}

fn fresh(opts: &HeapOptions) -> Arc<SimMedium> {
    let sim = Arc::new(SimMedium::new(LEN as usize, SimConfig::default()));
    RawHeap::format(&*sim, 0, LEN, [0x5a; 16], opts).unwrap();
    sim
}

fn sim_from(image: Vec<u8>, crash: CrashPlan) -> Arc<SimMedium> {
    Arc::new(SimMedium::from_image(
        image,
        SimConfig {
            seed: 7,
            crash,
            evict_per_million: 0,
            ..SimConfig::default()
        },
    ))
}

// ------------------------------------------------------------------------ field tables

const HEAP_TABLES: [(&str, &[pmem::layout::Field]); 4] = [
    ("header", HEADER_FIELDS),
    ("root line", ROOT_LINE_FIELDS),
    ("chunk word", CHUNK_WORD_FIELDS),
    ("run header", RUN_HEADER_FIELDS),
];

const REDO_TABLES: [(&str, &[pmem::layout::Field]); 2] = [
    ("redo header", REDO_HEADER_FIELDS),
    ("redo entry", REDO_ENTRY_FIELDS),
];

const LANE_TABLES: [(&str, &[pmem::layout::Field]); 2] = [
    ("lane state", LANE_STATE_FIELDS),
    ("undo entry", UNDO_ENTRY_FIELDS),
];

#[test]
fn field_tables_match_the_code() {
    let mut errors = Vec::new();
    for (md, tables) in [
        (heap_md(), &HEAP_TABLES[..]),
        (undo_md(), &LANE_TABLES[..]),
        (redo_md(), &REDO_TABLES[..]),
    ] {
        for &(name, fields) in tables {
            if let Err(e) = check_fields(&md, name, fields) {
                errors.push(e);
            }
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn field_tables_are_contiguous_and_fill_their_structures() {
    for (fields, bytes) in [
        (HEADER_FIELDS, HEADER_CRC_AT as u64 + 4),
        (ROOT_LINE_FIELDS, 16),
        (CHUNK_WORD_FIELDS, 8),
        (RUN_HEADER_FIELDS, RUN_HEADER),
        (LANE_STATE_FIELDS, LANE_STATE_BYTES),
        (UNDO_ENTRY_FIELDS, UNDO_HEADER_BYTES),
        (REDO_HEADER_FIELDS, REDO_HEADER_BYTES),
        (REDO_ENTRY_FIELDS, REDO_ENTRY_HEADER_BYTES),
    ] {
        let mut at = 0;
        for f in fields {
            assert_eq!(
                f.offset, at,
                "{} starts where the previous field ends",
                f.name
            );
            at += f.size;
        }
        assert_eq!(at as u64, bytes, "{fields:?}");
    }
    assert_eq!(
        RUN_HEADER_FIELDS[0].size as u64, RUN_BITMAP_BYTES,
        "the bitmap field is the bitmap"
    );
}

// ------------------------------------------------------------------------ constants

/// The names of the `pub const` items of `src/layout.rs`, except the field tables: every one
/// must be in one document's constants table.
fn layout_constants() -> BTreeSet<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/layout.rs");
    let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    src.lines()
        .filter_map(|l| l.trim_start().strip_prefix("pub const "))
        .filter_map(|rest| rest.split(':').next())
        .map(|n| n.trim().to_string())
        .filter(|n| !n.ends_with("_FIELDS"))
        .collect()
}

/// Every constant of `heap::layout` with its value, and the document that lists it.
fn code_constants() -> Vec<(&'static str, ConstValue, &'static str)> {
    let n = ConstValue::number;
    let heap = "heap.md";
    let lane = "undo-log.md";
    let redo = "redo-log.md";
    vec![
        ("HEAP_MAGIC", n(HEAP_MAGIC), heap),
        ("HEAP_VERSION", n(u64::from(HEAP_VERSION)), heap),
        ("HEADER_AREA", n(HEADER_AREA), heap),
        ("HEADER_COPY_0", n(HEADER_COPY_0), heap),
        ("HEADER_COPY_1", n(HEADER_COPY_1), heap),
        ("HEADER_CRC_AT", n(HEADER_CRC_AT as u64), heap),
        ("ROOT_LINE", n(ROOT_LINE), heap),
        ("CHUNK_SIZE", n(CHUNK_SIZE), heap),
        ("RUN_HEADER", n(RUN_HEADER), heap),
        ("RUN_BITMAP_BYTES", n(RUN_BITMAP_BYTES), heap),
        ("CHUNK_FREE", n(u64::from(CHUNK_FREE)), heap),
        ("CHUNK_RUN", n(u64::from(CHUNK_RUN)), heap),
        ("CHUNK_LARGE", n(u64::from(CHUNK_LARGE)), heap),
        ("MAX_RUN_BLOCK", n(MAX_RUN_BLOCK), heap),
        (
            "CLASS_SIZES",
            ConstValue::Numbers(CLASS_SIZES.iter().map(|&s| u64::from(s)).collect()),
            heap,
        ),
        ("LANE_STATE_BYTES", n(LANE_STATE_BYTES), lane),
        ("UNDO_HEADER_BYTES", n(UNDO_HEADER_BYTES), lane),
        ("UNDO_ALIGN", n(UNDO_ALIGN), lane),
        ("UNDO_BIT_OR", n(u64::from(UNDO_BIT_OR)), lane),
        ("UNDO_BIT_ANDNOT", n(u64::from(UNDO_BIT_ANDNOT)), lane),
        ("DEFAULT_LANES", n(u64::from(DEFAULT_LANES)), lane),
        ("DEFAULT_LANE_BYTES", n(u64::from(DEFAULT_LANE_BYTES)), lane),
        ("DEFAULT_REDO_BYTES", n(u64::from(DEFAULT_REDO_BYTES)), lane),
        ("REDO_HEADER_BYTES", n(REDO_HEADER_BYTES), redo),
        ("REDO_ENTRY_HEADER_BYTES", n(REDO_ENTRY_HEADER_BYTES), redo),
        ("REDO_EMPTY", n(u64::from(REDO_EMPTY)), redo),
        ("REDO_UNSAVED", n(u64::from(REDO_UNSAVED)), redo),
        ("REDO_SAVED", n(u64::from(REDO_SAVED)), redo),
        ("REDO_COMMITTED", n(u64::from(REDO_COMMITTED)), redo),
        ("REDO_DATA", n(u64::from(REDO_DATA)), redo),
        ("REDO_BIT_OR", n(u64::from(REDO_BIT_OR)), redo),
        ("REDO_BIT_ANDNOT", n(u64::from(REDO_BIT_ANDNOT)), redo),
        ("REDO_WORD", n(u64::from(REDO_WORD)), redo),
        ("REDO_FRESH", n(u64::from(REDO_FRESH)), redo),
    ]
}

fn doc_constants(md: &str) -> Vec<(String, ConstValue)> {
    format_doc::doc_constants(md).unwrap_or_else(|e| panic!("the constants table: {e}"))
}

#[test]
fn constants_tables_match_the_code() {
    let code = code_constants();
    let listed: BTreeSet<String> = code.iter().map(|c| c.0.to_string()).collect();
    assert_eq!(
        listed,
        layout_constants(),
        "this test's list of constants must be every `pub const` of src/layout.rs"
    );
    let values: Vec<(&str, ConstValue)> = code.iter().map(|(n, v, _)| (*n, v.clone())).collect();
    let mut errors = Vec::new();
    for (file, md) in [
        ("heap.md", heap_md()),
        ("undo-log.md", undo_md()),
        ("redo-log.md", redo_md()),
    ] {
        let required: Vec<&str> = code.iter().filter(|c| c.2 == file).map(|c| c.0).collect();
        let doc = doc_constants(&md);
        let mut diff = compare_constants(&doc, &values, &required);
        for (name, _) in &doc {
            if !required.contains(&name.as_str()) && listed.contains(name) {
                diff.push(format!(
                    "constant `{name}` belongs to the constants table of the other document"
                ));
            }
        }
        if let Err(e) = verdict(&format!("{file} constants"), diff) {
            errors.push(e);
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    assert_eq!(
        HEAP_MAGIC.to_le_bytes(),
        *b"KVHEAP\x00\x01",
        "the magic's bytes"
    );
}

// ------------------------------------------------------------------------ header

fn odd_geometry() -> Geometry {
    Geometry::plan((64 << 20) + 12_345, 7, 40_960, 2_048).unwrap()
}

fn odd_uuid() -> [u8; 16] {
    std::array::from_fn(|i| 0xa0 + i as u8)
}

#[test]
fn header_fields_hold_what_the_code_writes() {
    let md = heap_md();
    let fields = doc_fields(&md, "header");
    let geo = odd_geometry();
    let uuid = odd_uuid();
    let b = Header { uuid, geo }.encode();
    for f in &fields {
        let got = bytes_of(&b, f);
        let want: Vec<u8> = match f.name.as_str() {
            "magic" => HEAP_MAGIC.to_le_bytes().to_vec(),
            "version" => HEAP_VERSION.to_le_bytes().to_vec(),
            "header_bytes" => (b.len() as u32).to_le_bytes().to_vec(),
            "uuid" => uuid.to_vec(),
            "region_len" => geo.region_len.to_le_bytes().to_vec(),
            "lane_count" => geo.lane_count.to_le_bytes().to_vec(),
            "lane_bytes" => geo.lane_bytes.to_le_bytes().to_vec(),
            "lanes_off" => geo.lanes_off.to_le_bytes().to_vec(),
            "chunk_table_off" => geo.chunk_table_off.to_le_bytes().to_vec(),
            "zone_off" => geo.zone_off.to_le_bytes().to_vec(),
            "chunk_count" => geo.chunk_count.to_le_bytes().to_vec(),
            "chunk_size" => CHUNK_SIZE.to_le_bytes().to_vec(),
            "redo_bytes" => geo.redo_bytes.to_le_bytes().to_vec(),
            // The CRC covers every byte before it.
            "crc32c" => crc32c::crc32c(&b[..f.offset as usize])
                .to_le_bytes()
                .to_vec(),
            other => panic!("the header table lists `{other}`, which this test does not know"),
        };
        assert_eq!(got, &want[..], "header field `{}`", f.name);
    }
    let crc = field(&fields, "header", "crc32c");
    assert_eq!(crc.offset + crc.size, b.len() as u64);
    assert_eq!(crc.offset, HEADER_CRC_AT as u64);
    assert_eq!(
        Header::decode(&b, 0, geo.region_len).unwrap(),
        Header { uuid, geo }
    );
}

#[test]
fn format_writes_the_documented_header_area() {
    let sim = fresh(&HeapOptions::small());
    let img = sim.durable_image();
    let geo = Geometry::plan(LEN, 4, 32 * 1024, 4096).unwrap();
    let h = Header {
        uuid: [0x5a; 16],
        geo,
    }
    .encode();
    for at in [HEADER_COPY_0, HEADER_COPY_1] {
        assert_eq!(
            &img[at as usize..at as usize + h.len()],
            &h[..],
            "copy at {at}"
        );
    }
    // Everything else before the zone is zero: the rest of the header area, the root line, the
    // lanes and the chunk table.
    for (i, &byte) in img[..geo.zone_off as usize].iter().enumerate() {
        let i = i as u64;
        let in_copy = [HEADER_COPY_0, HEADER_COPY_1]
            .iter()
            .any(|&c| i >= c && i < c + h.len() as u64);
        assert!(in_copy || byte == 0, "byte {i} is {byte:#x}");
    }
    assert!(HEADER_COPY_1 + h.len() as u64 <= ROOT_LINE && ROOT_LINE + 16 <= HEADER_AREA);
}

/// Damage to a header copy, one kind per documented check.
fn damage(b: &mut [u8], check: &str, fields: &[DocField], geo: &Geometry) {
    let mut put = |name: &str, v: u64| {
        let f = field(fields, "header", name);
        let bytes = v.to_le_bytes();
        b[f.offset as usize..(f.offset + f.size) as usize]
            .copy_from_slice(&bytes[..f.size as usize]);
    };
    match check {
        "magic" => put("magic", HEAP_MAGIC ^ 1),
        "version" => put("version", u64::from(HEAP_VERSION) + 1),
        "chunk_size" => put("chunk_size", CHUNK_SIZE / 2),
        "lane geometry" => put("lane_count", 0),
        "layout" => put("zone_off", geo.zone_off + 4096),
        // Handled by the caller: the CRC is left stale, the region length passed differs.
        "crc32c" | "region_len" => {}
        other => panic!("the header checks table lists `{other}`, which this test does not know"),
    }
}

#[test]
fn header_checks_happen_in_the_documented_order() {
    let md = heap_md();
    let fields = doc_fields(&md, "header");
    let rows = named_rows(
        &md,
        "<!-- checks: header -->",
        "| order | field in the error | offset in the copy | rule |",
        1,
    )
    .unwrap();
    let geo = Geometry::plan(LEN, 4, 32 * 1024, 4096).unwrap();
    let good = Header {
        uuid: odd_uuid(),
        geo,
    }
    .encode();
    // The heap sits at a non-zero base: errors name medium offsets.
    let base = 8192u64;
    for (k, row) in rows.iter().enumerate() {
        assert_eq!(row.cells[0], (k + 1).to_string(), "{}", row.line);
        // Break this check and every later one, in both copies: the error must name this
        // check, in copy 0, and say that copy 1 is bad too.
        let mut b = good;
        let later: Vec<&str> = rows[k..].iter().map(|r| r.name).collect();
        for check in &later {
            damage(&mut b, check, &fields, &geo);
        }
        if !later.contains(&"crc32c") {
            let crc = crc32c::crc32c(&b[..HEADER_CRC_AT]);
            b[HEADER_CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        }
        let len = if later.contains(&"region_len") {
            geo.region_len + 4096
        } else {
            geo.region_len
        };
        let m = SimMedium::new(16384, SimConfig::default());
        for at in [HEADER_COPY_0, HEADER_COPY_1] {
            m.write((base + at) as usize, &b);
        }
        match heap::raw::read_header(&m, base, len) {
            Err(heap::HeapError::Corrupt(c)) => {
                assert_eq!(c.field, row.name, "{}: {c:?}", row.line);
                assert_eq!(c.structure, "heap header copy 0");
                assert_eq!(
                    c.offset,
                    base + HEADER_COPY_0 + row.cells[2].parse::<u64>().unwrap(),
                    "{}",
                    row.line
                );
                assert!(c.found.contains("copy 1 is bad too"), "{c:?}");
            }
            other => panic!("{}: {other:?}", row.line),
        }
        // With copy 1 intact, it serves.
        m.write((base + HEADER_COPY_1) as usize, &good);
        assert_eq!(
            heap::raw::read_header(&m, base, geo.region_len)
                .unwrap()
                .geo,
            geo
        );
    }
    assert_eq!(rows.len(), 7, "every check of Header::decode is listed");
}

#[test]
fn open_errors_name_medium_offsets() {
    let base = 8192u64;
    let setup = || {
        let sim = Arc::new(SimMedium::new((base + LEN) as usize, SimConfig::default()));
        RawHeap::format(&*sim, base, LEN, [1; 16], &HeapOptions::small()).unwrap();
        let h = RawHeap::open(sim.clone(), base, LEN).unwrap();
        let mut lane = h.lane();
        h.begin(&mut lane);
        let b = h.alloc(&mut lane, 64, false).unwrap();
        h.commit(&mut lane).unwrap();
        drop(lane);
        (sim, h.geometry(), b)
    };
    let fails = |sim: &SimMedium, structure: &str, field: &str, offset: u64| {
        let m = sim_from(sim.durable_image(), CrashPlan::Never);
        match RawHeap::open(m, base, LEN) {
            Err(heap::HeapError::Corrupt(c)) => {
                assert_eq!(
                    (c.structure.as_str(), c.field, c.offset),
                    (structure, field, offset)
                )
            }
            other => panic!("{other:?}"),
        }
    };
    // A chunk word with a wrong check.
    let (sim, g, b) = setup();
    let c = g.chunk_of(b);
    let at = base + g.chunk_word(c);
    sim.store_u64(at as usize, sim.load_u64(at as usize) ^ 1 << 16);
    sim.persist(at as usize, 8).unwrap();
    fails(&sim, &format!("chunk table entry {c}"), "check", at);
    // A bitmap bit beyond the run's last block (class 0: 4080 blocks, so word 63, bit 48).
    let (sim, g, b) = setup();
    let c = g.chunk_of(b);
    let at = base + g.chunk(c) + 8 * 63;
    sim.store_u64(at as usize, 1 << 48);
    sim.persist(at as usize, 8).unwrap();
    fails(
        &sim,
        &format!("run bitmap of chunk {c} (class 0, 4080 blocks)"),
        "bits",
        at,
    );
    // Bit 0 of a state word.
    let (sim, g, _) = setup();
    let at = base + g.lane(3);
    sim.store_u64(at as usize, 1);
    sim.persist(at as usize, 8).unwrap();
    fails(&sim, "lane 3 state word", "flags", at);
}

// ------------------------------------------------------------------------ geometry

/// The documented formula, computed here from the document's words.
fn documented_plan(len: u64, lanes: u64, lane_bytes: u64, redo_bytes: u64) -> Option<Geometry> {
    let r4k = |x: u64| x.div_ceil(4096) * 4096;
    if !(1..=1024).contains(&lanes)
        || lane_bytes % 4096 != 0
        || redo_bytes % 64 != 0
        || redo_bytes < 1024
        || lane_bytes < 64 + redo_bytes + 4096
    {
        return None;
    }
    let chunk_table_off = 4096 + lanes * lane_bytes;
    let a = len.saturating_sub(chunk_table_off);
    let n = (0..=a / 262_144)
        .rev()
        .find(|&n| r4k(8 * n) + 262_144 * n <= a)?;
    if n == 0 {
        return None;
    }
    Some(Geometry {
        region_len: len,
        lane_count: lanes as u32,
        lane_bytes: lane_bytes as u32,
        redo_bytes: redo_bytes as u32,
        lanes_off: 4096,
        chunk_table_off,
        zone_off: chunk_table_off + r4k(8 * n),
        chunk_count: n,
    })
}

#[test]
fn geometry_follows_the_documented_formula() {
    for len in [
        2 << 20,
        (3 << 20) + 1,
        LEN,
        64 << 20,
        (1 << 30) + 12_345,
        16_793_600 + 262_144 + 4096,
        16_793_600 + 262_144 + 4095,
    ] {
        for (lanes, lane_bytes, redo_bytes) in [
            (4, 32 * 1024, 4096),
            (1, 8192, 1024),
            (64, DEFAULT_LANE_BYTES, DEFAULT_REDO_BYTES),
            (1024, 8192, 1024),
            (0, 8192, 1024),
            (1025, 8192, 1024),
            (2, 8192 + 512, 1024),
            (2, 8192, 1000),
            (2, 8192, 960),
            (2, 8192, 4096),
            (2, 8192, 4032),
        ] {
            let code = Geometry::plan(len, lanes, lane_bytes, redo_bytes).ok();
            let doc = documented_plan(len, lanes.into(), lane_bytes.into(), redo_bytes.into());
            assert_eq!(
                code, doc,
                "{len} bytes, {lanes} lanes of {lane_bytes} ({redo_bytes} redo)"
            );
            if let Some(g) = code {
                assert_eq!(g.lane(1), g.lanes_off + u64::from(lane_bytes));
                assert_eq!(g.redo(0), g.lane(0) + LANE_STATE_BYTES);
                assert_eq!(g.undo(0), g.redo(0) + u64::from(redo_bytes));
                assert_eq!(g.undo(0) + g.undo_bytes(), g.lane(1));
                assert_eq!(g.chunk(2), g.zone_off + 2 * CHUNK_SIZE);
                assert_eq!(g.chunk_word(2), g.chunk_table_off + 16);
            }
        }
    }
}

#[test]
fn geometry_examples_are_what_plan_computes() {
    let md = heap_md();
    let rows = table_rows(
        &md,
        "<!-- geometry examples -->",
        "| len | lanes | lane_bytes | redo_bytes | chunk_table_off | zone_off | chunks |",
    )
    .unwrap();
    for row in rows {
        let v: Vec<u64> = cells(row)
            .iter()
            .map(|c| c.parse().unwrap_or_else(|_| panic!("`{c}` in {row}")))
            .collect();
        assert_eq!(v.len(), 7, "{row}");
        let g = Geometry::plan(v[0], v[1] as u32, v[2] as u32, v[3] as u32)
            .unwrap_or_else(|e| panic!("{row}: {e}"));
        assert_eq!(
            (g.chunk_table_off, g.zone_off, g.chunk_count),
            (v[4], v[5], v[6]),
            "{row}"
        );
    }
}

// ------------------------------------------------------------------------ chunk table, runs

/// Decode a chunk word through the documented fields: (type, class, check, span).
fn doc_word(fields: &[DocField], word: u64) -> (u64, u64, u64, u64) {
    let b = word.to_le_bytes();
    let f = |n| num(&b, field(fields, "chunk word", n));
    (f("type"), f("class"), f("check"), f("span"))
}

/// The documented check: low 16 bits of CRC-32C over the word with its check bytes zero, then
/// the chunk index, both as 8 little-endian bytes.
fn doc_check(fields: &[DocField], word: u64, index: u64) -> u64 {
    let mut body = word.to_le_bytes();
    let check = field(fields, "chunk word", "check");
    body[check.offset as usize..(check.offset + check.size) as usize].fill(0);
    let mut input = body.to_vec();
    input.extend_from_slice(&index.to_le_bytes());
    u64::from(crc32c::crc32c(&input) & 0xffff)
}

#[test]
fn chunk_words_are_encoded_as_documented() {
    let md = heap_md();
    let fields = doc_fields(&md, "chunk word");
    assert_eq!(ChunkWord::Free.encode(5), 0, "a free chunk's word is 0");
    for index in [0u64, 1, 7, 1000, u64::from(u32::MAX) + 3] {
        for class in [0usize, 1, 17, 39] {
            let w = ChunkWord::Run(class).encode(index);
            assert_eq!(
                doc_word(&fields, w),
                (
                    u64::from(CHUNK_RUN),
                    class as u64,
                    doc_check(&fields, w, index),
                    0
                ),
                "run of class {class} at {index}: {w:#018x}"
            );
        }
        for span in [1u32, 2, 77, u32::MAX] {
            let w = ChunkWord::Large(span).encode(index);
            assert_eq!(
                doc_word(&fields, w),
                (
                    u64::from(CHUNK_LARGE),
                    0,
                    doc_check(&fields, w, index),
                    u64::from(span)
                ),
                "large of {span} at {index}: {w:#018x}"
            );
        }
    }
}

#[test]
fn chunk_word_examples_are_what_encode_writes() {
    let md = heap_md();
    let rows = table_rows(
        &md,
        "<!-- chunk word examples -->",
        "| chunk | type | class | span | word |",
    )
    .unwrap();
    for row in rows {
        let c = cells(row);
        let n = |i: usize| -> u64 {
            c[i].parse()
                .unwrap_or_else(|_| panic!("`{}` in {row}", c[i]))
        };
        let word = u64::from_str_radix(c[4].trim_start_matches("0x"), 16)
            .unwrap_or_else(|_| panic!("`{}` in {row}", c[4]));
        let w = match n(1) as u8 {
            CHUNK_RUN => ChunkWord::Run(n(2) as usize),
            CHUNK_LARGE => ChunkWord::Large(n(3) as u32),
            t => panic!("type {t} in {row}"),
        };
        assert_eq!(w.encode(n(0)), word, "{row}");
        assert_eq!(
            ChunkWord::decode(word, n(0), 1 << 20, 0).unwrap(),
            w,
            "{row}"
        );
    }
}

#[test]
fn size_class_table_matches_the_code() {
    let md = heap_md();
    let rows = table_rows(
        &md,
        "<!-- classes -->",
        "| class | block size | blocks per run | requests |",
    )
    .unwrap();
    assert_eq!(rows.len(), CLASS_SIZES.len(), "one row per class");
    for (k, row) in rows.iter().enumerate() {
        let c = cells(row);
        let n = |s: &str| -> u64 { s.parse().unwrap_or_else(|_| panic!("`{s}` in {row}")) };
        assert_eq!(n(c[0]), k as u64, "{row}");
        assert_eq!(n(c[1]), u64::from(CLASS_SIZES[k]), "{row}");
        assert_eq!(n(c[2]), blocks_per_run(k), "{row}");
        assert_eq!(
            n(c[2]),
            (CHUNK_SIZE - RUN_HEADER) / n(c[1]),
            "the documented formula, {row}"
        );
        let (lo, hi) = c[3]
            .split_once("..=")
            .unwrap_or_else(|| panic!("requests `{}` in {row}", c[3]));
        let (lo, hi) = (n(lo), n(hi));
        assert_eq!(class_for(lo), Some(k), "{row}");
        assert_eq!(class_for(hi), Some(k), "{row}");
        if lo > 1 {
            assert_ne!(class_for(lo - 1), Some(k), "{row}");
        }
        assert_ne!(class_for(hi + 1), Some(k), "{row}");
        // The closed form the document gives for small requests.
        if hi <= 1024 {
            assert_eq!(lo.div_ceil(64) - 1, k as u64, "{row}");
        }
    }
    assert_eq!(class_for(MAX_RUN_BLOCK), Some(CLASS_SIZES.len() - 1));
    assert_eq!(
        class_for(MAX_RUN_BLOCK + 1),
        None,
        "large above MAX_RUN_BLOCK"
    );
}

#[test]
fn allocations_show_in_the_chunk_table_and_bitmaps_as_documented() {
    let md = heap_md();
    let words = doc_fields(&md, "chunk word");
    let run = doc_fields(&md, "run header");
    let sim = fresh(&HeapOptions::small());
    let h = RawHeap::open(sim.clone(), 0, LEN).unwrap();
    let g = h.geometry();
    let mut lane = h.lane();
    h.begin(&mut lane);
    let small: Vec<u64> = (0..70)
        .map(|_| h.alloc(&mut lane, 100, true).unwrap())
        .collect();
    let big = h.alloc(&mut lane, 2 * CHUNK_SIZE + 1, true).unwrap();
    h.commit(&mut lane).unwrap();
    drop(lane);

    // The large block: the head word, zero words inside the span, data from the chunk's start.
    let head = g.chunk_of(big);
    assert_eq!(big, g.chunk(head), "a large block starts at its head chunk");
    let w = sim.load_u64(g.chunk_word(head) as usize);
    assert_eq!(
        doc_word(&words, w),
        (u64::from(CHUNK_LARGE), 0, doc_check(&words, w, head), 3)
    );
    assert_eq!(h.usable_size(big), Some(3 * CHUNK_SIZE));
    for c in head + 1..head + 3 {
        assert_eq!(
            sim.load_u64(g.chunk_word(c) as usize),
            0,
            "chunk {c} in the span"
        );
    }

    // The run: its word, and one bitmap bit per block at the documented place.
    let class = class_for(100).unwrap();
    let size = u64::from(CLASS_SIZES[class]);
    let chunk = g.chunk_of(small[0]);
    let w = sim.load_u64(g.chunk_word(chunk) as usize);
    assert_eq!(
        doc_word(&words, w),
        (
            u64::from(CHUNK_RUN),
            class as u64,
            doc_check(&words, w, chunk),
            0
        )
    );
    let hdr = read_at(&*sim, g.chunk(chunk), RUN_HEADER);
    let bitmap = bytes_of(&hdr, field(&run, "run header", "bitmap"));
    let mut set = BTreeSet::new();
    for b in 0..bitmap.len() as u64 * 8 {
        if bitmap[(b / 8) as usize] >> (b % 8) & 1 == 1 {
            set.insert(g.chunk(chunk) + RUN_HEADER + b * size);
        }
    }
    let want: BTreeSet<u64> = small.iter().copied().collect();
    assert_eq!(
        set, want,
        "bit b is the block at chunk + RUN_HEADER + b * size"
    );
    for &s in &small {
        assert_eq!(h.usable_size(s), Some(size));
    }
}

// ------------------------------------------------------------------------ root, pointers

heap::pool_tag!(DocTag);

#[test]
fn root_line_and_pointers_are_as_documented() {
    let md = heap_md();
    let fields = doc_fields(&md, "root line");
    let sim = fresh(&HeapOptions::small());
    let raw = Arc::new(RawHeap::open(sim.clone(), 0, LEN).unwrap());
    let (off, size) = raw.root(40).unwrap();
    let line = read_at(&*sim, ROOT_LINE, 16);
    assert_eq!(num(&line, field(&fields, "root line", "root_off")), off);
    assert_eq!(num(&line, field(&fields, "root line", "root_size")), size);
    assert_eq!(size, 40);

    // A PPtr is the 8-byte offset; the pool id is the first 8 bytes of the UUID, little-endian.
    let heap = Heap::<DocTag>::new(raw.clone()).unwrap();
    let root = heap.root::<[u64; 5]>().unwrap();
    assert_eq!(root.offset(), off);
    let p: PPtr<u64, DocTag> = heap.transaction(|tx| tx.alloc(7u64)).unwrap();
    assert_eq!(bytemuck::bytes_of(&p), &p.offset().to_le_bytes());
    assert_eq!(std::mem::size_of::<PPtr<u64, DocTag>>(), 8);
    assert!(PPtr::<u64, DocTag>::null().is_null() && PPtr::<u64, DocTag>::null().offset() == 0);
    let uuid = odd_uuid();
    assert_eq!(
        pool_id(&uuid),
        u64::from_le_bytes(uuid[..8].try_into().unwrap())
    );
    let hdr = Header {
        uuid,
        geo: odd_geometry(),
    }
    .encode();
    let u = field(&doc_fields(&md, "header"), "header", "uuid").offset as usize;
    assert_eq!(
        pool_id(&uuid),
        u64::from_le_bytes(hdr[u..u + 8].try_into().unwrap()),
        "the pool id is the first 8 bytes of the header's uuid"
    );
}

// ------------------------------------------------------------------------ lanes: undo

/// A heap with one committed block of `pattern` bytes; returns the medium and the block.
fn heap_with_block(pattern: &[u8]) -> (Arc<SimMedium>, u64) {
    let sim = fresh(&HeapOptions::small());
    let h = RawHeap::open(sim.clone(), 0, LEN).unwrap();
    let mut lane = h.lane();
    h.begin(&mut lane);
    let off = h.alloc(&mut lane, pattern.len() as u64, false).unwrap();
    sim.write(off as usize, pattern);
    h.commit(&mut lane).unwrap();
    (sim, off)
}

fn pattern() -> Vec<u8> {
    (0..200u32).map(|i| (i * 7 + 3) as u8).collect()
}

/// The two snapshots the undo tests make: (offset in the block, new bytes).
fn changes() -> [(u64, Vec<u8>); 2] {
    [(3, vec![0xee; 13]), (100, vec![0xdd; 40])]
}

/// One transaction that changes the two ranges of `changes()`; returns the lane it ran on.
fn change_block(h: &RawHeap, block: u64) -> heap::Result<usize> {
    let mut lane = h.lane();
    let idx = lane.index();
    h.begin(&mut lane);
    for (at, data) in changes() {
        h.write(&mut lane, block + at, &data)?;
    }
    h.commit(&mut lane)?;
    Ok(idx)
}

#[test]
fn undo_entries_of_a_real_transaction_read_as_documented() {
    let md = undo_md();
    let state = doc_fields(&md, "lane state");
    let undo = doc_fields(&md, "undo entry");
    let old = pattern();
    let (sim, block) = heap_with_block(&old);
    let h = RawHeap::open(sim.clone(), 0, LEN).unwrap();
    let g = h.geometry();
    let idx = change_block(&h, block).unwrap();

    // After the commit the state word is n << 1 with no redo flag, and the entries (of n) stay
    // in the undo area.
    let line = read_at(&*sim, g.lane(idx), LANE_STATE_BYTES);
    let word = num(&line, field(&state, "lane state", "state"));
    assert_eq!(word & 1, 0, "no redo pending after commit");
    let n = word >> 1;
    assert!(n >= 1);
    assert!(
        bytes_of(&line, field(&state, "lane state", "unused"))
            .iter()
            .all(|&b| b == 0)
    );

    let f = |name| field(&undo, "undo entry", name);
    let mut pos = g.undo(idx);
    let mut found = Vec::new();
    for (at, data) in changes() {
        let hdr = read_at(&*sim, pos, UNDO_HEADER_BYTES);
        let len = num(&hdr, f("len"));
        assert_eq!(
            num(&hdr, f("seq")),
            n,
            "entry seq is the transaction's number"
        );
        assert_eq!(num(&hdr, f("offset")), block + at);
        assert_eq!(len, data.len() as u64);
        let saved = read_at(&*sim, pos + UNDO_HEADER_BYTES, len);
        assert_eq!(
            saved,
            old[at as usize..(at + len) as usize],
            "the old bytes follow"
        );
        let crc_f = f("crc32c");
        let mut input = hdr[..crc_f.offset as usize].to_vec();
        input.extend_from_slice(&saved);
        assert_eq!(
            num(&hdr, crc_f),
            u64::from(crc32c::crc32c(&input)),
            "CRC over bytes 0..20 then the old bytes"
        );
        found.push((block + at, len, pos + UNDO_HEADER_BYTES));
        pos = (pos + UNDO_HEADER_BYTES + len).div_ceil(UNDO_ALIGN) * UNDO_ALIGN;
    }
    // The documented scan finds the same entries for n, and none for n + 1.
    let scanned: Vec<(u64, u64, u64)> = scan_undo(&*sim, 0, &g, idx, n)
        .into_iter()
        .map(|e| (e.offset, e.len, e.data_at))
        .collect();
    assert_eq!(scanned, found);
    assert!(scan_undo(&*sim, 0, &g, idx, n + 1).is_empty());
}

#[test]
fn a_crash_before_the_commit_point_rolls_back_and_retires_n() {
    let old = pattern();
    let (sim, block) = heap_with_block(&old);
    let image = sim.durable_image();
    // Count the fences of open + the transaction, which are: one per snapshot, F1, F2.
    let dry = sim_from(image.clone(), CrashPlan::Never);
    let h = RawHeap::open(dry.clone(), 0, LEN).unwrap();
    let idx = change_block(&h, block).unwrap();
    let g = h.geometry();
    let n = dry.load_u64(g.lane(idx) as usize) >> 1;
    drop(h);
    let fences = dry.fences();
    assert!(fences >= 4);
    // Crash at F1 (the commit point F2 is the last fence): the state word still says n - 1.
    let crashed = sim_from(image, CrashPlan::AtFence(fences - 1));
    let h = RawHeap::open(crashed.clone(), 0, LEN).unwrap();
    assert!(change_block(&h, block).unwrap_err().is_simulated_crash());
    drop(h);
    let img = crashed.crash_image().unwrap();
    let state = u64::from_le_bytes(img[g.lane(idx) as usize..][..8].try_into().unwrap());
    assert_eq!(state, (n - 1) << 1, "before the commit point");

    // Recovery rolls the two entries back and stores (seq + 1) << 1; a crash inside recovery,
    // at any of its fences, changes nothing in the outcome.
    let mut k = 1;
    loop {
        let m = sim_from(img.clone(), CrashPlan::AtFence(k));
        let first = RawHeap::open(m.clone(), 0, LEN);
        let Some(again) = m.crash_image() else {
            let r = first.unwrap();
            assert_eq!(r.recovery().rolled_back, 1);
            assert_eq!(r.recovery().undo_entries, 2);
            break;
        };
        assert!(first.is_err());
        let m2 = sim_from(again, CrashPlan::Never);
        let r = RawHeap::open(m2.clone(), 0, LEN).unwrap();
        let mut got = vec![0u8; old.len()];
        r.read(block, &mut got).unwrap();
        assert_eq!(got, old, "rolled back after a crash at recovery fence {k}");
        assert_eq!(m2.load_u64(g.lane(idx) as usize), n << 1);
        k += 1;
    }
    let m = sim_from(img, CrashPlan::Never);
    let r = RawHeap::open(m.clone(), 0, LEN).unwrap();
    let mut got = vec![0u8; old.len()];
    r.read(block, &mut got).unwrap();
    assert_eq!(got, old);
    assert_eq!(
        m.load_u64(g.lane(idx) as usize),
        n << 1,
        "retired as (seq + 1) << 1"
    );
    assert!(scan_undo(&*m, 0, &g, idx, n + 1).is_empty());
}

// ------------------------------------------------------------------------ lanes: allocator

#[test]
fn undo_entry_kinds_table_matches_the_code() {
    let md = undo_md();
    let rows = table_rows(
        &md,
        "<!-- undo entry kinds -->",
        "| `len` | kind | payload | `offset` | commit does | rollback does |",
    )
    .unwrap();
    assert_eq!(rows.len(), 3, "snapshot, bit OR, bit AND-NOT");
    let hex = |t: &str| u64::from_str_radix(t.trim_start_matches("0x"), 16).unwrap();
    let first = cells(rows[0])[0];
    let (lo, hi) = first.split_once("..=").unwrap_or_else(|| panic!("{first}"));
    assert_eq!(lo.trim(), "1");
    assert_eq!(
        hex(hi.trim()),
        u64::from(UNDO_BIT_ANDNOT) - 1,
        "snapshot lengths end below the tags"
    );
    for (row, tag, name) in [
        (rows[1], UNDO_BIT_OR, "`UNDO_BIT_OR`"),
        (rows[2], UNDO_BIT_ANDNOT, "`UNDO_BIT_ANDNOT`"),
    ] {
        let c = cells(row)[0];
        let value = c.split_whitespace().next().unwrap();
        assert_eq!(hex(value), u64::from(tag), "{row}");
        assert!(c.contains(name), "{row}");
    }
    // No snapshot can be as long as a tag: the undo area of the largest lane is shorter.
    let largest_undo = 0xffff_f000u64 - LANE_STATE_BYTES - 1024;
    assert!(largest_undo < u64::from(UNDO_BIT_ANDNOT));
}

/// A committed heap with two small blocks (`keep`, `gone`) of 100 bytes; the next transaction
/// allocates a small block and a large block and frees `gone`.
fn alloc_setup() -> (Vec<u8>, u64) {
    let sim = fresh(&HeapOptions::small());
    let h = RawHeap::open(sim.clone(), 0, LEN).unwrap();
    let mut lane = h.lane();
    h.begin(&mut lane);
    let _keep = h.alloc(&mut lane, 100, true).unwrap();
    let gone = h.alloc(&mut lane, 100, true).unwrap();
    h.commit(&mut lane).unwrap();
    drop(lane);
    drop(h);
    (sim.durable_image(), gone)
}

/// The transaction: (lane, small block, large block).
fn alloc_and_free(h: &RawHeap, gone: u64) -> heap::Result<(usize, u64, u64)> {
    let mut lane = h.lane();
    let idx = lane.index();
    h.begin(&mut lane);
    let small = h.alloc(&mut lane, 100, true)?;
    let large = h.alloc(&mut lane, CHUNK_SIZE + 1, true)?;
    h.free(&mut lane, gone)?;
    h.commit(&mut lane)?;
    Ok((idx, small, large))
}

/// One undo entry as the document describes it: (seq, offset, len field, payload).
type DocEntry = (u64, u64, u32, Vec<u8>);

/// The first `count` undo entries of lane `idx` in `img`, read through the documented fields
/// and kinds, each checked against its documented CRC.
fn read_entries(md: &str, img: &[u8], g: &Geometry, idx: usize, count: usize) -> Vec<DocEntry> {
    let f = doc_fields(md, "undo entry");
    let f = |n| field(&f, "undo entry", n).clone();
    let (seq, offset, len, crc) = (f("seq"), f("offset"), f("len"), f("crc32c"));
    let mut pos = g.undo(idx) as usize;
    let mut out = Vec::new();
    for _ in 0..count {
        let hdr = &img[pos..pos + UNDO_HEADER_BYTES as usize];
        let len_field = num(hdr, &len) as u32;
        let payload_len = match len_field {
            UNDO_BIT_OR | UNDO_BIT_ANDNOT => 8,
            n => n as usize,
        };
        let at = pos + UNDO_HEADER_BYTES as usize;
        let payload = img[at..at + payload_len].to_vec();
        let mut input = hdr[..crc.offset as usize].to_vec();
        input.extend_from_slice(&payload);
        assert_eq!(
            num(hdr, &crc),
            u64::from(crc32c::crc32c(&input)),
            "CRC over bytes 0..20 then the payload"
        );
        out.push((num(hdr, &seq), num(hdr, &offset), len_field, payload));
        pos = (at + payload_len).div_ceil(UNDO_ALIGN as usize) * UNDO_ALIGN as usize;
    }
    out
}

/// The entries the document says the transaction logs, in order.
fn expected_entries(g: &Geometry, n: u64, small: u64, large: u64, gone: u64) -> Vec<DocEntry> {
    let size = u64::from(CLASS_SIZES[class_for(100).unwrap()]);
    let bit = |off: u64| {
        let c = g.chunk_of(off);
        let b = (off - g.chunk(c) - RUN_HEADER) / size;
        (
            g.chunk(c) + 8 * (b / 64),
            (1u64 << (b % 64)).to_le_bytes().to_vec(),
        )
    };
    let (w1, m1) = bit(small);
    let (w2, m2) = bit(gone);
    let head = g.chunk_of(large);
    vec![
        (n, w1, UNDO_BIT_OR, m1),
        (n, g.chunk_word(head), 8, 0u64.to_le_bytes().to_vec()),
        (n, w2, UNDO_BIT_ANDNOT, m2),
    ]
}

#[test]
fn allocator_entries_of_a_real_transaction_read_as_documented() {
    let md = undo_md();
    let (image, gone) = alloc_setup();
    let sim = sim_from(image, CrashPlan::Never);
    let h = RawHeap::open(sim.clone(), 0, LEN).unwrap();
    let g = h.geometry();
    let (idx, small, large) = alloc_and_free(&h, gone).unwrap();
    let state = sim.load_u64(g.lane(idx) as usize);
    assert_eq!(state & 1, 0, "bit 0 stays clear");
    let n = state >> 1;
    let img = sim.durable_image();
    assert_eq!(
        read_entries(&md, &img, &g, idx, 3),
        expected_entries(&g, n, small, large, gone),
        "the log keeps the last transaction's entries after its commit"
    );
    let kinds: Vec<_> = scan_undo(&*sim, 0, &g, idx, n)
        .iter()
        .map(|e| (e.offset, e.len))
        .collect();
    assert_eq!(kinds.len(), 3);
    // After the commit the words are changed in place.
    let head = g.chunk_of(large);
    assert_eq!(
        sim.load_u64(g.chunk_word(head) as usize),
        ChunkWord::Large(2).encode(head)
    );
    assert!(h.usable_size(small).is_some() && h.usable_size(gone).is_none());
}

/// The heap `image` holds after recovery: (small allocated, large allocated, gone allocated,
/// state word of lane `idx`).
fn outcome(
    image: Vec<u8>,
    idx: usize,
    small: u64,
    large: u64,
    gone: u64,
) -> (bool, bool, bool, u64) {
    let m = sim_from(image, CrashPlan::Never);
    let r = RawHeap::open(m.clone(), 0, LEN).unwrap();
    let g = r.geometry();
    let report = heap::check::walk(&*m, 0, LEN, false).unwrap();
    assert!(
        report.damage.is_empty() && report.double_allocated.is_empty(),
        "{report:?}"
    );
    (
        r.usable_size(small).is_some(),
        r.usable_size(large).is_some(),
        r.usable_size(gone).is_some(),
        m.load_u64(g.lane(idx) as usize),
    )
}

#[test]
fn a_crash_before_the_commit_point_undoes_the_allocator_entries() {
    let md = undo_md();
    let (image, gone) = alloc_setup();
    let dry = sim_from(image.clone(), CrashPlan::Never);
    let h = RawHeap::open(dry.clone(), 0, LEN).unwrap();
    let g = h.geometry();
    let (idx, small, large) = alloc_and_free(&h, gone).unwrap();
    let n = dry.load_u64(g.lane(idx) as usize) >> 1;
    drop(h);
    // F0, F1, F2: the entries are fenced first, then the words and data, then the state word.
    assert_eq!(
        dry.fences(),
        3,
        "an allocation and a free cost three fences"
    );
    // Rolled back: the blocks as before, and the state word n << 1 (retired as rolled back),
    // or still (n - 1) << 1 if no entry was durable. Committed: the new blocks, n << 1.
    let before = |got: (bool, bool, bool, u64)| {
        (got.0, got.1, got.2) == (false, false, true) && (got.3 == n << 1 || got.3 == (n - 1) << 1)
    };
    let after = (true, true, false, n << 1);
    for seed in 0..8 {
        for fence in 1..=3 {
            let crashed = Arc::new(SimMedium::from_image(
                image.clone(),
                SimConfig {
                    seed,
                    crash: CrashPlan::AtFence(fence),
                    evict_per_million: 0,
                    ..SimConfig::default()
                },
            ));
            let h = RawHeap::open(crashed.clone(), 0, LEN).unwrap();
            assert!(alloc_and_free(&h, gone).unwrap_err().is_simulated_crash());
            drop(h);
            let img = crashed.crash_image().unwrap();
            let state = u64::from_le_bytes(img[g.lane(idx) as usize..][..8].try_into().unwrap());
            if fence == 2 {
                // At F1 the entries are durable and the state word is still n - 1.
                assert_eq!(state, (n - 1) << 1);
                assert_eq!(
                    read_entries(&md, &img, &g, idx, 3),
                    expected_entries(&g, n, small, large, gone)
                );
            }
            let got = outcome(img.clone(), idx, small, large, gone);
            if fence == 2 {
                assert_eq!(
                    got,
                    (false, false, true, n << 1),
                    "crash at F1, seed {seed}"
                );
            } else if fence == 1 {
                assert!(before(got), "crash at F0, seed {seed}: {got:?}");
            } else {
                assert!(
                    before(got) || got == after,
                    "crash at F2, seed {seed}: {got:?}"
                );
            }
            // A crash inside recovery changes nothing in the outcome.
            if fence == 2 {
                for k in 1.. {
                    let m = sim_from(img.clone(), CrashPlan::AtFence(k));
                    let first = RawHeap::open(m.clone(), 0, LEN);
                    let Some(again) = m.crash_image() else {
                        assert_eq!(first.unwrap().recovery().undo_entries, 3);
                        break;
                    };
                    assert!(first.is_err());
                    assert_eq!(
                        outcome(again, idx, small, large, gone),
                        (false, false, true, n << 1),
                        "recovery crashed at its fence {k}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_large_allocation_zeroes_and_logs_stale_words_in_its_span() {
    let md = undo_md();
    let sim = fresh(&HeapOptions::small());
    let h = RawHeap::open(sim.clone(), 0, LEN).unwrap();
    let g = h.geometry();
    // Chunk 0 a large block, chunk 1 a run; free both, so chunk 1 is an empty run.
    let mut lane = h.lane();
    h.begin(&mut lane);
    let big = h.alloc(&mut lane, CHUNK_SIZE, false).unwrap();
    let small = h.alloc(&mut lane, 64, false).unwrap();
    h.commit(&mut lane).unwrap();
    assert_eq!((g.chunk_of(big), g.chunk_of(small)), (0, 1));
    h.begin(&mut lane);
    h.free(&mut lane, big).unwrap();
    h.free(&mut lane, small).unwrap();
    h.commit(&mut lane).unwrap();
    drop(lane);
    drop(h);
    let stale = sim.load_u64(g.chunk_word(1) as usize);
    assert_eq!(
        stale,
        ChunkWord::Run(0).encode(1),
        "the empty run keeps its word"
    );
    let image = sim.durable_image();

    // Reopened, the empty run is a free chunk; a two-chunk block covers chunks 0 and 1.
    let run = |m: Arc<SimMedium>| -> heap::Result<(usize, u64, u64)> {
        let h = RawHeap::open(m, 0, LEN)?;
        let mut lane = h.lane();
        let idx = lane.index();
        h.begin(&mut lane);
        let b = h.alloc(&mut lane, 2 * CHUNK_SIZE, false)?;
        h.commit(&mut lane)?;
        Ok((
            idx,
            b,
            h.counters()
                .commits
                .load(std::sync::atomic::Ordering::Relaxed),
        ))
    };
    let m = sim_from(image.clone(), CrashPlan::Never);
    let (idx, b, _) = run(m.clone()).unwrap();
    assert_eq!(g.chunk_of(b), 0);
    assert_eq!(
        m.load_u64(g.chunk_word(1) as usize),
        0,
        "zero inside the span"
    );
    let state = m.load_u64(g.lane(idx) as usize);
    let entries = read_entries(&md, &m.durable_image(), &g, idx, 2);
    assert_eq!(
        entries,
        vec![
            (state >> 1, g.chunk_word(0), 8, 0u64.to_le_bytes().to_vec()),
            (state >> 1, g.chunk_word(1), 8, stale.to_le_bytes().to_vec()),
        ]
    );
    // Crashed before its commit point, the words come back as they were.
    let crashed = sim_from(image, CrashPlan::AtFence(2));
    assert!(run(crashed.clone()).unwrap_err().is_simulated_crash());
    let img = crashed.crash_image().unwrap();
    let m = sim_from(img, CrashPlan::Never);
    let r = RawHeap::open(m.clone(), 0, LEN).unwrap();
    assert_eq!(r.recovery().undo_entries, 2);
    assert_eq!(m.load_u64(g.chunk_word(0) as usize), 0);
    assert_eq!(m.load_u64(g.chunk_word(1) as usize), stale);
}

// ------------------------------------------------------------------------ redo logs

/// A redo transaction crashed at its first fence (F1, the log's commit point) leaves a log
/// whose documented fields hold what the transaction did: kind `COMMITTED` and the lane's next
/// number in `state`, `len` and `count` of its entries, the documented CRC, a `DATA` entry with
/// the new bytes, a `FRESH` entry naming the new block by length and CRC, and a `BIT_OR` of its
/// bitmap bit. Recovery from that image redoes it and retires the lane as documented.
#[test]
fn redo_log_fields_hold_what_a_commit_writes() {
    let md = redo_md();
    let head = doc_fields(&md, "redo header");
    let entry = doc_fields(&md, "redo entry");
    let (m, blk) = heap_with_block(&[1u8; 100]);
    let image = m.power_fail();
    let run = |m: &Arc<SimMedium>| -> (u64, u64, u64) {
        let h = RawHeap::open(m.clone(), 0, LEN).unwrap();
        let mut lane = h.lane();
        h.begin_mode(&mut lane, heap::TxMode::Redo);
        h.write(&mut lane, blk + 8, &[0xabu8; 24]).unwrap();
        let fresh = h.alloc(&mut lane, 64, false).unwrap();
        h.write(&mut lane, fresh, &[0xcdu8; 64]).unwrap();
        let idx = lane.index() as u64;
        let before = m.fences();
        let r = h.commit(&mut lane);
        assert!(r.is_err() == m.crashed(), "{r:?}");
        (idx, fresh, before)
    };
    // The commit's first fence, counted on a run that does not crash.
    let (_, _, before) = run(&sim_from(image.clone(), CrashPlan::Never));
    let m = sim_from(image.clone(), CrashPlan::AtFence(before + 1));
    let (lane_idx, fresh, _) = run(&m);
    let img = m.crash_image().expect("crashed at F1");
    let geo = heap::raw::read_header(&*sim_from(img.clone(), CrashPlan::Never), 0, LEN)
        .unwrap()
        .geo;
    // The image where every line of F1 landed.
    let st = m.crash_state().unwrap();
    let imgs = st.images();
    let whole = imgs
        .iter()
        .find(|i| {
            heap::raw::read_redo_log(
                &*sim_from((*i).clone(), CrashPlan::Never),
                0,
                &geo,
                lane_idx as usize,
            )
            .is_ok()
        })
        .expect("an image with the whole log");
    let area = geo.redo(lane_idx as usize);
    let b = &whole[area as usize..(area + u64::from(geo.redo_bytes)) as usize];
    let state = num(b, field(&head, "redo header", "state"));
    let lane_state = u64::from_le_bytes(
        whole[geo.lane(lane_idx as usize) as usize..][..8]
            .try_into()
            .unwrap(),
    );
    assert_eq!(state >> 56, u64::from(REDO_COMMITTED));
    assert_eq!(
        state & ((1 << 56) - 1),
        (lane_state >> 1) + 1,
        "the lane's next number"
    );
    let len = num(b, field(&head, "redo header", "len"));
    let count = num(b, field(&head, "redo header", "count"));
    let crc = num(b, field(&head, "redo header", "crc32c")) as u32;
    let body = &b[REDO_HEADER_BYTES as usize..(REDO_HEADER_BYTES + len) as usize];
    let mut c = crc32c::crc32c(&b[..16]);
    c = crc32c::crc32c_append(c, body);
    assert_eq!(crc, c, "the documented CRC");
    // Walk the entries through the documented fields.
    let mut p = 0usize;
    let mut seen = Vec::new();
    for _ in 0..count {
        let e = &body[p..];
        let off = num(e, field(&entry, "redo entry", "offset"));
        let n = num(e, field(&entry, "redo entry", "len")) as usize;
        let tag = num(e, field(&entry, "redo entry", "tag")) as u32;
        let payload = &e[REDO_ENTRY_HEADER_BYTES as usize..][..n];
        seen.push((tag, off, payload.to_vec()));
        p += (REDO_ENTRY_HEADER_BYTES as usize + n).div_ceil(8) * 8;
    }
    assert_eq!(p as u64, len, "entries fill `len`");
    assert_eq!(
        seen[0],
        (REDO_DATA, blk + 8, vec![0xab; 24]),
        "the DATA entry"
    );
    let fresh_e = seen
        .iter()
        .find(|s| s.0 == REDO_FRESH)
        .expect("a FRESH entry");
    assert_eq!(fresh_e.1, fresh);
    assert_eq!(&fresh_e.2[..8], &64u64.to_le_bytes());
    assert_eq!(
        &fresh_e.2[8..12],
        &crc32c::crc32c(&[0xcdu8; 64]).to_le_bytes()
    );
    let bit = seen
        .iter()
        .find(|s| s.0 == REDO_BIT_OR)
        .expect("a BIT_OR entry");
    let chunk = geo.chunk_of(fresh);
    let k = (fresh - geo.chunk(chunk) - RUN_HEADER) / 64;
    assert_eq!(bit.1, geo.chunk(chunk) + (k / 64) * 8);
    assert_eq!(bit.2, (1u64 << (k % 64)).to_le_bytes().to_vec());
    // Recovery redoes it and retires the lane.
    let m2 = sim_from(whole.clone(), CrashPlan::Never);
    let h = RawHeap::open(m2.clone(), 0, LEN).unwrap();
    assert_eq!(h.recovery().redone, 1);
    let mut got = [0u8; 24];
    h.read(blk + 8, &mut got).unwrap();
    assert_eq!(got, [0xab; 24]);
    assert_eq!(h.usable_size(fresh), Some(64));
    let st2 = m2.load_u64(geo.lane(lane_idx as usize) as usize);
    assert_eq!(
        st2 >> 1,
        state & ((1 << 56) - 1),
        "retired to the log's number"
    );
    let _ = img;
}
