//! `docs/format/integrity.md` against the code: its field tables and constants table must say
//! what `integrity::layout` says, and the section formula it states must be the one
//! `Geometry::new` computes.

use integrity::layout::{self, *};
use integrity::tracker::BATCH_PAGES;
use pmem::format_doc::{ConstValue, check_fields, compare_constants, doc_constants, verdict};
use std::path::PathBuf;

fn doc() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/format/integrity.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn field_tables_match_the_code() {
    let md = doc();
    let mut errors = Vec::new();
    for (name, fields) in [("header", HEADER_FIELDS)] {
        if let Err(e) = check_fields(&md, name, fields) {
            errors.push(e);
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    for (fields, bytes) in [(HEADER_FIELDS, HEADER_BYTES)] {
        let mut at = 0;
        for f in fields {
            assert_eq!(
                f.offset, at,
                "{} starts where the previous field ends",
                f.name
            );
            at += f.size;
        }
        assert_eq!(at, bytes);
    }
}

#[test]
fn constants_table_matches_the_code() {
    let md = doc();
    let doc = doc_constants(&md).unwrap_or_else(|e| panic!("the constants table: {e}"));
    let code = vec![
        ("META_MAGIC", ConstValue::magic(META_MAGIC)),
        ("META_VERSION", ConstValue::number(META_VERSION as u64)),
        (
            "HEADER_COPY_OFFSETS",
            ConstValue::Numbers(HEADER_COPY_OFFSETS.iter().map(|&o| o as u64).collect()),
        ),
        ("HEADER_BYTES", ConstValue::number(HEADER_BYTES as u64)),
        ("RETIRED_AT", ConstValue::number(RETIRED_AT as u64)),
        ("RETIRED_BYTES", ConstValue::number(RETIRED_BYTES as u64)),
        ("SECTIONS_AT", ConstValue::number(SECTIONS_AT as u64)),
        ("SUMS_PER_BLOCK", ConstValue::number(SUMS_PER_BLOCK)),
        (
            "SUM_BLOCK_BYTES",
            ConstValue::number(SUM_BLOCK_BYTES as u64),
        ),
        ("LINE_BYTES", ConstValue::number(LINE_BYTES as u64)),
        (
            "STRIPE_PAGES_MIN",
            ConstValue::number(STRIPE_PAGES_MIN as u64),
        ),
        (
            "STRIPE_PAGES_MAX",
            ConstValue::number(STRIPE_PAGES_MAX as u64),
        ),
        (
            "STRIPE_PAGES_DEFAULT",
            ConstValue::number(STRIPE_PAGES_DEFAULT as u64),
        ),
        ("PERIOD_MS_MIN", ConstValue::number(PERIOD_MS_MIN as u64)),
        ("PERIOD_MS_MAX", ConstValue::number(PERIOD_MS_MAX as u64)),
        (
            "PERIOD_MS_DEFAULT",
            ConstValue::number(PERIOD_MS_DEFAULT as u64),
        ),
        ("BATCH_PAGES", ConstValue::number(BATCH_PAGES as u64)),
    ];
    let required: Vec<&str> = code.iter().map(|(n, _)| *n).collect();
    verdict("constants", compare_constants(&doc, &code, &required)).unwrap();
}

#[test]
fn sections_follow_the_documented_formula() {
    let r = |x: u64| x.next_multiple_of(4096);
    for (pages, k) in [(1, 2), (64, 4), (1000, 3), (262_144, 4), (12_345, 32)] {
        let g = layout::Geometry::new(pages, k).unwrap();
        let s = pages.div_ceil(k as u64);
        assert_eq!(g.stripes, s);
        assert_eq!(g.pagesums_at, 8192);
        assert_eq!(g.pageblocks_at, g.pagesums_at + r(4 * pages));
        assert_eq!(g.paritysums_at, g.pageblocks_at + r(4 * pages.div_ceil(16)));
        assert_eq!(g.parityblocks_at, g.paritysums_at + r(4 * s));
        assert_eq!(g.linesums_at, g.parityblocks_at + r(4 * s.div_ceil(16)));
        assert_eq!(g.parity_at, r(g.linesums_at + 256 * pages));
        assert_eq!(g.meta_bytes, g.parity_at + 4096 * s);
        assert!(g.group_pages() == 16 * k as u64 && g.batch_pages() <= BATCH_PAGES as u64);
    }
    assert!(layout::Geometry::new(0, 4).is_none());
    assert!(layout::Geometry::new(10, 1).is_none());
    assert!(layout::Geometry::new(10, 33).is_none());
}
