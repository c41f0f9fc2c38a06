//! `docs/format/pool.md` against `pmem::layout`: the field tables and the constants table in the
//! document must say exactly what the code says.
//!
//! Conventions the document follows (and this test parses):
//! - a line `<!-- fields: X -->` (X is `header`, `slot`, `directory` or `entry`) right before a
//!   field table, as `pmem::format_doc` describes and parses it;
//! - a line `<!-- constants -->` right before a table `| constant | value |` whose rows hold a
//!   constant's name in backticks and its decimal value.

use pmem::format_doc::{check_fields, compare_constants, named_rows, parse_decimal, verdict};
use pmem::layout::{self, Field};
use std::path::PathBuf;

const CONSTANTS_HEADER_ROW: &str = "| constant | value |";

/// The constants the document must list.
const REQUIRED_CONSTANTS: &[&str] = &[
    "PAGE_SIZE",
    "HUGE_PAGE_SIZE",
    "SLOT_OFFSET_IN_PAGE",
    "METADATA_BYTES",
    "POOL_SIZE_MIN",
    "POOL_SIZE_MAX",
    "FORMAT_VERSION",
    "HEADER_BYTES",
    "SLOT_BYTES",
    "DIRECTORY_HEADER_BYTES",
    "DIRECTORY_ENTRY_BYTES",
    "DIRECTORY_ENTRIES_MAX",
    "REGION_NAME_BYTES_MAX",
];

/// Every constant the document may name, with its value in the code.
fn code_constants() -> Vec<(&'static str, u64)> {
    vec![
        ("PAGE_SIZE", layout::PAGE_SIZE as u64),
        ("HUGE_PAGE_SIZE", layout::HUGE_PAGE_SIZE as u64),
        ("SLOT_OFFSET_IN_PAGE", layout::SLOT_OFFSET_IN_PAGE as u64),
        ("METADATA_BYTES", layout::METADATA_BYTES as u64),
        ("POOL_SIZE_MIN", layout::POOL_SIZE_MIN),
        ("POOL_SIZE_MAX", layout::POOL_SIZE_MAX),
        ("FORMAT_VERSION", layout::FORMAT_VERSION as u64),
        ("HEADER_BYTES", layout::HEADER_BYTES as u64),
        ("SLOT_BYTES", layout::SLOT_BYTES as u64),
        (
            "DIRECTORY_HEADER_BYTES",
            layout::DIRECTORY_HEADER_BYTES as u64,
        ),
        (
            "DIRECTORY_ENTRY_BYTES",
            layout::DIRECTORY_ENTRY_BYTES as u64,
        ),
        (
            "DIRECTORY_ENTRIES_MAX",
            layout::DIRECTORY_ENTRIES_MAX as u64,
        ),
        (
            "REGION_NAME_BYTES_MAX",
            layout::REGION_NAME_BYTES_MAX as u64,
        ),
        ("SLOT_FLAG_CLEAN_SHUTDOWN", layout::SLOT_FLAG_CLEAN_SHUTDOWN),
        ("FEATURES_COMPAT_KNOWN", layout::FEATURES_COMPAT_KNOWN),
        ("FEATURES_RO_COMPAT_KNOWN", layout::FEATURES_RO_COMPAT_KNOWN),
        ("FEATURES_INCOMPAT_KNOWN", layout::FEATURES_INCOMPAT_KNOWN),
        (
            "FEATURES_INCOMPAT_GROWABLE",
            layout::FEATURES_INCOMPAT_GROWABLE,
        ),
    ]
}

fn doc_path() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/format/pool.md"
    ))
}

fn read_doc() -> String {
    let path = doc_path();
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Parse the `<!-- constants -->` table into (name, value) rows.
fn parse_constants(md: &str) -> Result<Vec<(String, u64)>, String> {
    named_rows(md, "<!-- constants -->", CONSTANTS_HEADER_ROW, 0)?
        .into_iter()
        .map(|r| {
            Ok((
                r.name.to_string(),
                parse_decimal(r.cells[1], "value", r.line)?,
            ))
        })
        .collect()
}

/// Every difference between the documented constants and the code's. Empty means equal.
fn constants_diff(doc: &[(String, u64)]) -> Vec<String> {
    compare_constants(doc, &code_constants(), REQUIRED_CONSTANTS)
}

fn assert_structure(structure: &str, code: &[Field]) {
    if let Err(e) = check_fields(&read_doc(), structure, code) {
        panic!("{} against pmem::layout: {e}", doc_path().display());
    }
}

#[test]
fn header_table_matches_layout() {
    assert_structure("header", layout::header::ALL);
}

#[test]
fn slot_table_matches_layout() {
    assert_structure("slot", layout::slot::ALL);
}

#[test]
fn directory_table_matches_layout() {
    assert_structure("directory", layout::directory::ALL);
}

#[test]
fn entry_table_matches_layout() {
    assert_structure("entry", layout::entry::ALL);
}

#[test]
fn constants_table_matches_layout() {
    let checked = parse_constants(&read_doc())
        .map_err(|e| format!("cannot parse the constants table: {e}"))
        .and_then(|doc| verdict("constants", constants_diff(&doc)));
    if let Err(e) = checked {
        panic!("{} against pmem::layout: {e}", doc_path().display());
    }
}

#[test]
fn magics_are_spelled_out() {
    let md = read_doc();
    for magic in [layout::HEADER_MAGIC, layout::DIRECTORY_MAGIC] {
        let text = std::str::from_utf8(&magic).expect("magics are ASCII");
        assert!(
            md.contains(&format!("`{text}`")),
            "{} does not spell out the magic `{text}`",
            doc_path().display()
        );
    }
}

// The constants comparison must be able to fail. (The field-table parser and comparison are
// tested in `pmem::format_doc`.)

const SAMPLE: &str = "\
# sample

<!-- constants -->
| constant | value |
| --- | ---: |
| `PAGE_SIZE` | 4096 |
| `SLOT_BYTES` | 65 |
";

#[test]
fn wrong_and_missing_constants_are_reported() {
    let doc = parse_constants(SAMPLE).expect("the sample parses");
    assert_eq!(
        doc,
        vec![("PAGE_SIZE".into(), 4096), ("SLOT_BYTES".into(), 65)]
    );
    let diff = constants_diff(&doc);
    assert!(
        diff.iter()
            .any(|d| d.contains("`SLOT_BYTES`: the document says 65, the code says 64")),
        "{diff:?}"
    );
    assert!(
        diff.iter()
            .any(|d| d.contains("`HUGE_PAGE_SIZE` is missing")),
        "{diff:?}"
    );
    assert!(!diff.iter().any(|d| d.contains("`PAGE_SIZE`")), "{diff:?}");
}

#[test]
fn constant_values_are_decimal() {
    let hex = SAMPLE.replace("| 4096 |", "| 0x1000 |");
    assert!(parse_constants(&hex).is_err());
    let three_cells = SAMPLE.replace("| 4096 |", "| 4096 | page |");
    assert!(parse_constants(&three_cells).is_err());
}
