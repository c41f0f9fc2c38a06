//! `docs/format/pool.md` against `pmem::layout`: the field tables and the constants table in the
//! document must say exactly what the code says.
//!
//! Conventions the document follows (and this test parses):
//! - a line `<!-- fields: X -->` (X is `header`, `slot`, `directory` or `entry`) right before a
//!   table whose header row is `| offset | size | field | meaning |`, then the separator row,
//!   then one row per field: decimal offset, decimal size, the field name in backticks;
//! - a line `<!-- constants -->` right before a table `| constant | value |` whose rows hold a
//!   constant's name in backticks and its decimal value.

use pmem::layout::{self, Field};
use std::path::PathBuf;

const FIELDS_HEADER_ROW: &str = "| offset | size | field | meaning |";
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

/// The real value of a constant the document may name.
fn constant_value(name: &str) -> Option<u64> {
    Some(match name {
        "PAGE_SIZE" => layout::PAGE_SIZE as u64,
        "HUGE_PAGE_SIZE" => layout::HUGE_PAGE_SIZE as u64,
        "SLOT_OFFSET_IN_PAGE" => layout::SLOT_OFFSET_IN_PAGE as u64,
        "METADATA_BYTES" => layout::METADATA_BYTES as u64,
        "POOL_SIZE_MIN" => layout::POOL_SIZE_MIN,
        "POOL_SIZE_MAX" => layout::POOL_SIZE_MAX,
        "FORMAT_VERSION" => layout::FORMAT_VERSION as u64,
        "HEADER_BYTES" => layout::HEADER_BYTES as u64,
        "SLOT_BYTES" => layout::SLOT_BYTES as u64,
        "DIRECTORY_HEADER_BYTES" => layout::DIRECTORY_HEADER_BYTES as u64,
        "DIRECTORY_ENTRY_BYTES" => layout::DIRECTORY_ENTRY_BYTES as u64,
        "DIRECTORY_ENTRIES_MAX" => layout::DIRECTORY_ENTRIES_MAX as u64,
        "REGION_NAME_BYTES_MAX" => layout::REGION_NAME_BYTES_MAX as u64,
        "SLOT_FLAG_CLEAN_SHUTDOWN" => layout::SLOT_FLAG_CLEAN_SHUTDOWN,
        "FEATURES_COMPAT_KNOWN" => layout::FEATURES_COMPAT_KNOWN,
        "FEATURES_RO_COMPAT_KNOWN" => layout::FEATURES_RO_COMPAT_KNOWN,
        "FEATURES_INCOMPAT_KNOWN" => layout::FEATURES_INCOMPAT_KNOWN,
        _ => return None,
    })
}

/// One documented field: offset, size, name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DocField {
    offset: u64,
    size: u64,
    name: String,
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

/// The cells of a table row, trimmed, without the outer pipes.
fn cells(line: &str) -> Vec<&str> {
    let inner = line.trim();
    let inner = inner.strip_prefix('|').unwrap_or(inner);
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    inner.split('|').map(str::trim).collect()
}

fn is_separator(line: &str) -> bool {
    let c = cells(line);
    !c.is_empty()
        && c.iter()
            .all(|cell| !cell.is_empty() && cell.chars().all(|ch| matches!(ch, '-' | ':')))
}

fn backticked(cell: &str) -> Option<&str> {
    cell.strip_prefix('`')
        .and_then(|c| c.strip_suffix('`'))
        .filter(|c| !c.is_empty() && !c.contains('`'))
}

/// The body rows of the table introduced by the marker line `marker` (exactly one must exist),
/// after checking its header row and separator.
fn table_rows<'a>(md: &'a str, marker: &str, header_row: &str) -> Result<Vec<&'a str>, String> {
    let lines: Vec<&str> = md.lines().collect();
    let at: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.trim() == marker)
        .map(|(i, _)| i)
        .collect();
    let start = match at.as_slice() {
        [one] => *one,
        [] => return Err(format!("no `{marker}` line")),
        many => return Err(format!("`{marker}` appears {} times", many.len())),
    };
    let mut rest = lines[start + 1..]
        .iter()
        .skip_while(|l| l.trim().is_empty());
    match rest.next() {
        Some(l) if l.trim() == header_row => {}
        other => {
            return Err(format!(
                "after `{marker}` expected the header row `{header_row}`, found {other:?}"
            ));
        }
    }
    match rest.next() {
        Some(l) if is_separator(l) => {}
        other => {
            return Err(format!(
                "after the header row of `{marker}` expected a separator row, found {other:?}"
            ));
        }
    }
    let rows: Vec<&str> = rest
        .take_while(|l| l.trim_start().starts_with('|'))
        .copied()
        .collect();
    if rows.is_empty() {
        return Err(format!("the table after `{marker}` has no rows"));
    }
    Ok(rows)
}

fn parse_number(cell: &str, what: &str, row: &str) -> Result<u64, String> {
    cell.parse::<u64>()
        .map_err(|_| format!("{what} `{cell}` is not a decimal number in row `{row}`"))
}

/// Parse the `<!-- fields: X -->` table.
fn parse_fields(md: &str, structure: &str) -> Result<Vec<DocField>, String> {
    let marker = format!("<!-- fields: {structure} -->");
    let rows = table_rows(md, &marker, FIELDS_HEADER_ROW)?;
    rows.into_iter()
        .map(|row| {
            let c = cells(row);
            if c.len() < 4 {
                return Err(format!("row `{row}` has {} cells, expected 4", c.len()));
            }
            let name = backticked(c[2])
                .ok_or_else(|| format!("field `{}` is not in backticks in row `{row}`", c[2]))?;
            if c[3].is_empty() {
                return Err(format!("field `{name}` has no meaning in row `{row}`"));
            }
            Ok(DocField {
                offset: parse_number(c[0], "offset", row)?,
                size: parse_number(c[1], "size", row)?,
                name: name.to_string(),
            })
        })
        .collect()
}

/// Parse the `<!-- constants -->` table into (name, value) rows.
fn parse_constants(md: &str) -> Result<Vec<(String, u64)>, String> {
    let rows = table_rows(md, "<!-- constants -->", CONSTANTS_HEADER_ROW)?;
    rows.into_iter()
        .map(|row| {
            let c = cells(row);
            if c.len() != 2 {
                return Err(format!("row `{row}` has {} cells, expected 2", c.len()));
            }
            let name = backticked(c[0])
                .ok_or_else(|| format!("constant `{}` is not in backticks in row `{row}`", c[0]))?;
            Ok((name.to_string(), parse_number(c[1], "value", row)?))
        })
        .collect()
}

/// Every difference between the documented fields and the code's, in order. Empty means equal.
fn compare_fields(structure: &str, doc: &[DocField], code: &[Field]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, pair) in doc.iter().zip(code).enumerate() {
        let (d, c) = pair;
        if d.name != c.name || d.offset != c.offset as u64 || d.size != c.size as u64 {
            out.push(format!(
                "{structure} row {i}: the document says `{}` at offset {} size {}, \
                 layout.rs says `{}` at offset {} size {}",
                d.name, d.offset, d.size, c.name, c.offset, c.size
            ));
        }
    }
    for d in doc.iter().skip(code.len()) {
        out.push(format!(
            "{structure}: the document lists `{}` (offset {}, size {}) that layout.rs does not have",
            d.name, d.offset, d.size
        ));
    }
    for c in code.iter().skip(doc.len()) {
        out.push(format!(
            "{structure}: layout.rs has `{}` (offset {}, size {}) that the document does not list",
            c.name, c.offset, c.size
        ));
    }
    out
}

/// Every difference between the documented constants and the code's. Empty means equal.
fn compare_constants(doc: &[(String, u64)]) -> Vec<String> {
    let mut out = Vec::new();
    for (name, value) in doc {
        match constant_value(name) {
            None => out.push(format!(
                "constant `{name}` in the document is unknown to this test (add it to constant_value)"
            )),
            Some(real) if real != *value => out.push(format!(
                "constant `{name}`: the document says {value}, layout.rs says {real}"
            )),
            Some(_) => {}
        }
        if doc.iter().filter(|(n, _)| n == name).count() > 1 {
            out.push(format!("constant `{name}` is listed more than once"));
        }
    }
    for name in REQUIRED_CONSTANTS {
        if !doc.iter().any(|(n, _)| n == name) {
            out.push(format!(
                "constant `{name}` is missing from the constants table"
            ));
        }
    }
    out
}

fn assert_structure(structure: &str, code: &[Field]) {
    let md = read_doc();
    let doc = parse_fields(&md, structure).unwrap_or_else(|e| {
        panic!(
            "{}: cannot parse the `{structure}` table: {e}",
            doc_path().display()
        )
    });
    let diff = compare_fields(structure, &doc, code);
    assert!(
        diff.is_empty(),
        "{} disagrees with pmem::layout:\n{}",
        doc_path().display(),
        diff.join("\n")
    );
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
    let md = read_doc();
    let doc = parse_constants(&md).unwrap_or_else(|e| {
        panic!(
            "{}: cannot parse the constants table: {e}",
            doc_path().display()
        )
    });
    let diff = compare_constants(&doc);
    assert!(
        diff.is_empty(),
        "{} disagrees with pmem::layout:\n{}",
        doc_path().display(),
        diff.join("\n")
    );
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

// The parser and the comparison must be able to fail.

const SAMPLE: &str = "\
# sample

<!-- fields: slot -->
| offset | size | field | meaning |
| ---: | ---: | --- | --- |
| 0 | 8 | `sequence` | write counter |
| 8 | 8 | `flags` | bit 0: clean shutdown |
| 24 | 8 | `directory_generation` | current directory |
| 24 | 36 | `reserved` | zero |
| 60 | 4 | `crc32c` | checksum |

text after the table

<!-- constants -->
| constant | value |
| --- | ---: |
| `PAGE_SIZE` | 4096 |
| `SLOT_BYTES` | 65 |
";

#[test]
fn a_wrong_offset_is_reported() {
    let doc = parse_fields(SAMPLE, "slot").expect("the sample parses");
    assert_eq!(doc.len(), 5);
    let diff = compare_fields("slot", &doc, layout::slot::ALL);
    assert_eq!(diff.len(), 1, "{diff:?}");
    assert!(
        diff[0].contains("`directory_generation` at offset 24") && diff[0].contains("offset 16"),
        "{}",
        diff[0]
    );
}

#[test]
fn missing_extra_and_renamed_fields_are_reported() {
    let mut doc = parse_fields(SAMPLE, "slot").expect("the sample parses");
    doc[2].offset = 16;
    assert!(compare_fields("slot", &doc, layout::slot::ALL).is_empty());
    doc[1].name = "flag".into();
    assert_eq!(compare_fields("slot", &doc, layout::slot::ALL).len(), 1);
    doc[1].name = "flags".into();
    let last = doc.pop().expect("five rows");
    let diff = compare_fields("slot", &doc, layout::slot::ALL);
    assert!(
        diff.len() == 1 && diff[0].contains("does not list"),
        "{diff:?}"
    );
    doc.push(last.clone());
    doc.push(last);
    let diff = compare_fields("slot", &doc, layout::slot::ALL);
    assert!(
        diff.len() == 1 && diff[0].contains("does not have"),
        "{diff:?}"
    );
}

#[test]
fn wrong_and_missing_constants_are_reported() {
    let doc = parse_constants(SAMPLE).expect("the sample parses");
    assert_eq!(
        doc,
        vec![("PAGE_SIZE".into(), 4096), ("SLOT_BYTES".into(), 65)]
    );
    let diff = compare_constants(&doc);
    assert!(
        diff.iter()
            .any(|d| d.contains("`SLOT_BYTES`: the document says 65, layout.rs says 64")),
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
fn malformed_tables_are_refused() {
    assert!(parse_fields(SAMPLE, "header").is_err(), "no header table");
    let bad_offset = SAMPLE.replace("| 8 | 8 | `flags`", "| 0x8 | 8 | `flags`");
    assert!(parse_fields(&bad_offset, "slot").is_err());
    let no_ticks = SAMPLE.replace("`flags`", "flags");
    assert!(parse_fields(&no_ticks, "slot").is_err());
    let wrong_header = SAMPLE.replace(FIELDS_HEADER_ROW, "| offset | size | name | meaning |");
    assert!(parse_fields(&wrong_header, "slot").is_err());
    let twice = format!("{SAMPLE}\n{SAMPLE}");
    assert!(parse_fields(&twice, "slot").is_err());
}
