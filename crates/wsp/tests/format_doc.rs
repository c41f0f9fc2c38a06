//! `docs/format/wsp-image.md` against the code: its field tables, its constants table and its
//! list of limits must say what `wsp::layout` and `wsp::LIMITS` say.

use pmem::format_doc::{ConstValue, check_fields, compare_constants, doc_constants, verdict};
use std::path::PathBuf;
use wsp::layout::*;

fn doc() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/format/wsp-image.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn field_tables_match_the_code() {
    let md = doc();
    let mut errors = Vec::new();
    for (name, fields) in [("header", HEADER_FIELDS), ("marker", MARKER_FIELDS)] {
        if let Err(e) = check_fields(&md, name, fields) {
            errors.push(e);
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn field_tables_are_contiguous_and_fit() {
    for (fields, size) in [(HEADER_FIELDS, HEADER_SIZE), (MARKER_FIELDS, MARKER_SIZE)] {
        let mut at = 0;
        for f in fields {
            assert_eq!(
                f.offset, at,
                "{} starts where the previous field ends",
                f.name
            );
            at += f.size;
        }
        assert_eq!(at, size);
    }
    assert!(HEADER_SIZE as u64 <= MARKER_OFFSET);
    assert_eq!(MARKER_OFFSET % 64, 0, "the marker has its own cache line");
    assert!(MARKER_OFFSET + MARKER_SIZE as u64 <= META_OFFSET);
    assert_eq!(DATA_OFFSET, META_OFFSET + META_CAPACITY);
    assert_eq!(DATA_OFFSET % 4096, 0);
}

#[test]
fn constants_table_matches_the_code() {
    let md = doc();
    let doc = doc_constants(&md).unwrap_or_else(|e| panic!("{e}"));
    let n = ConstValue::number;
    let code = [
        ("MAGIC", ConstValue::Bytes(MAGIC.to_vec())),
        ("MARKER_VALID", ConstValue::Bytes(MARKER_VALID.to_vec())),
        ("VERSION", n(VERSION as u64)),
        ("HEADER_SIZE", n(HEADER_SIZE as u64)),
        ("MARKER_OFFSET", n(MARKER_OFFSET)),
        ("MARKER_SIZE", n(MARKER_SIZE as u64)),
        ("META_OFFSET", n(META_OFFSET)),
        ("META_CAPACITY", n(META_CAPACITY)),
        ("DATA_OFFSET", n(DATA_OFFSET)),
        ("IMAGE_FD", n(IMAGE_FD as u64)),
    ];
    let names: Vec<&str> = code.iter().map(|(n, _)| *n).collect();
    if let Err(e) = verdict("constants", compare_constants(&doc, &code, &names)) {
        panic!("{e}");
    }
}

#[test]
fn limits_list_matches_the_code() {
    let md = doc();
    let start = md
        .lines()
        .position(|l| l.trim() == "<!-- limits -->")
        .expect("a `<!-- limits -->` line");
    let listed: Vec<&str> = md
        .lines()
        .skip(start + 1)
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| l.starts_with("- "))
        .map(|l| &l[2..])
        .collect();
    assert_eq!(
        listed,
        wsp::LIMITS,
        "docs/format/wsp-image.md `Limits` against wsp::LIMITS"
    );
}
