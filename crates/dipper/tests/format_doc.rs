//! `docs/format/dipper.md` against the code: its field tables and constants table must say
//! what `dipper::layout` and `dipper::arena` say, and the slot geometry formula it states must
//! be the one the code computes.

use dipper::arena;
use dipper::layout::{self, *};
use pmem::format_doc::{ConstValue, check_fields, compare_constants, doc_constants, verdict};
use std::path::PathBuf;

fn doc() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/format/dipper.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn field_tables_match_the_code() {
    let md = doc();
    let mut errors = Vec::new();
    for (name, fields) in [
        ("root", ROOT_FIELDS),
        ("slot header", SLOT_HEADER_FIELDS),
        ("slot entry", SLOT_ENTRY_FIELDS),
        ("arena", ARENA_FIELDS),
    ] {
        if let Err(e) = check_fields(&md, name, fields) {
            errors.push(e);
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn field_tables_are_contiguous() {
    for fields in [ROOT_FIELDS, SLOT_ENTRY_FIELDS, ARENA_FIELDS] {
        let mut at = 0;
        for f in fields {
            assert_eq!(
                f.offset, at,
                "{} starts where the previous field ends",
                f.name
            );
            at += f.size;
        }
    }
    assert_eq!(
        ROOT_FIELDS.last().map(|f| f.offset + f.size),
        Some(ROOT_BYTES)
    );
    assert_eq!(
        ARENA_FIELDS.last().map(|f| f.offset + f.size),
        Some(arena::ARENA_HEADER)
    );
    assert_eq!(
        SLOT_ENTRY_FIELDS.last().map(|f| f.offset + f.size),
        Some(SLOT_ENTRY_BYTES)
    );
}

#[test]
fn constants_table_matches_the_code() {
    let md = doc();
    let doc = doc_constants(&md).unwrap_or_else(|e| panic!("the constants table: {e}"));
    let code = vec![
        ("ROOT_REGION_BYTES", ConstValue::number(ROOT_REGION_BYTES)),
        (
            "ROOT_COPY_OFFSETS",
            ConstValue::Numbers(ROOT_COPY_OFFSETS.iter().map(|&o| o as u64).collect()),
        ),
        ("ROOT_BYTES", ConstValue::number(ROOT_BYTES as u64)),
        ("ROOT_MAGIC", ConstValue::magic(ROOT_MAGIC)),
        ("STATE_IDLE", ConstValue::number(STATE_IDLE as u64)),
        (
            "STATE_CHECKPOINTING",
            ConstValue::number(STATE_CHECKPOINTING as u64),
        ),
        ("SLOT_NONE", ConstValue::number(SLOT_NONE as u64)),
        ("SHARDS_MAX", ConstValue::number(SHARDS_MAX as u64)),
        ("SLOT_MAGIC", ConstValue::magic(SLOT_MAGIC)),
        (
            "SLOT_HEADER_BYTES",
            ConstValue::number(SLOT_HEADER_BYTES as u64),
        ),
        ("SLOT_TABLE_AT", ConstValue::number(SLOT_TABLE_AT as u64)),
        (
            "SLOT_ENTRY_BYTES",
            ConstValue::number(SLOT_ENTRY_BYTES as u64),
        ),
        ("ALL_SHARDS", ConstValue::number(ALL_SHARDS as u64)),
        ("PAGE", ConstValue::number(arena::PAGE as u64)),
        ("ARENA_MAGIC", ConstValue::magic(arena::ARENA_MAGIC)),
        (
            "ARENA_HEADER",
            ConstValue::number(arena::ARENA_HEADER as u64),
        ),
        ("CLASSES", ConstValue::number(arena::CLASSES as u64)),
        (
            "BLOCK_BYTES_MAX",
            ConstValue::number(arena::BLOCK_BYTES_MAX as u64),
        ),
        (
            "ARENA_BYTES_MIN",
            ConstValue::number(arena::ARENA_BYTES_MIN as u64),
        ),
        (
            "SLOT_ARENA_RATIO_MAX",
            ConstValue::number(dipper::layout::SLOT_ARENA_RATIO_MAX),
        ),
        (
            "SLOT2_MAGIC",
            ConstValue::magic(dipper::layout::SLOT2_MAGIC),
        ),
        (
            "ENTRY_FRAME_AT",
            ConstValue::number(dipper::layout::ENTRY_FRAME_AT as u64),
        ),
        (
            "FRAME_REGION_FRAMES_MIN",
            ConstValue::number(dipper::layout::FRAME_REGION_FRAMES_MIN),
        ),
        (
            "ARENA_BYTES_MAX",
            ConstValue::number(arena::ARENA_BYTES_MAX as u64),
        ),
    ];
    let required: Vec<&str> = code.iter().map(|(n, _)| *n).collect();
    verdict("constants", compare_constants(&doc, &code, &required)).unwrap();
}

#[test]
fn slot_geometry_follows_the_documented_formula() {
    for len in [16384 + 4096 + 4096, 1 << 20, (3 << 30) + 12345, 512 * 1024] {
        let (cap, first) = layout::slot_geometry(len).unwrap();
        let first_of = |n: u64| 16384 + (16 * n).div_ceil(4096) * 4096;
        assert_eq!(first, first_of(cap));
        assert!(first_of(cap) + 4096 * cap <= len);
        assert!(
            first_of(cap + 1) + 4096 * (cap + 1) > len,
            "capacity is the largest that fits"
        );
    }
    assert!(layout::slot_geometry(16384).is_none());
}
