//! Reading the tables of a format document (`docs/format/*.md`) so a test can hold them against
//! the code's [`Field`] tables.
//!
//! Each crate with an on-media format has a `tests/format_doc.rs` that uses this module to check
//! that its document and its `layout` module say the same thing: `kavach-pmem` for
//! `docs/format/pool.md`, `kavach-log` for `docs/format/log.md`. The field tables are read and
//! compared here ([`check_fields`]); a constants table is read row by row here
//! ([`named_rows`]) and compared here ([`compare_constants`]), but each crate parses the value
//! cells itself, since the crates write their constants differently. Other checks (magics,
//! checksums) stay in each crate's test.
//!
//! The conventions the documents follow:
//! - a table is introduced by a marker line, an HTML comment such as `<!-- fields: slot -->`, that
//!   appears exactly once; blank lines may follow it, then the table's header row, its separator
//!   row (`| --- | ---: |`), and one or more body rows, up to the first line not starting with `|`;
//! - every body row has as many cells as the header row, none of them empty, and names its item
//!   (a field, a constant) in backticks in a fixed column;
//! - a field table is introduced by `<!-- fields: X -->` (X names the structure), its header row
//!   is [`FIELDS_HEADER_ROW`], and its cells are the decimal offset, the decimal size, the field's
//!   name in backticks and its meaning.
//!
//! Nothing here panics on malformed markdown: a table that does not follow the conventions is an
//! `Err` naming the line at fault.

use crate::layout::Field;
use std::fmt::Debug;

/// The header row of every field table.
pub const FIELDS_HEADER_ROW: &str = "| offset | size | field | meaning |";

/// One field as a document lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocField {
    /// Offset from the start of the structure, in bytes.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
    /// The name between the backticks.
    pub name: String,
}

/// The cells of a table row, trimmed, without the outer pipes.
pub fn cells(line: &str) -> Vec<&str> {
    let inner = line.trim();
    let inner = inner.strip_prefix('|').unwrap_or(inner);
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    inner.split('|').map(str::trim).collect()
}

/// Whether `line` is a table's separator row: every cell made of `-` and `:` only.
pub fn is_separator(line: &str) -> bool {
    let c = cells(line);
    !c.is_empty()
        && c.iter()
            .all(|cell| !cell.is_empty() && cell.chars().all(|ch| matches!(ch, '-' | ':')))
}

/// The text of a cell written as one non-empty code span (`` `name` ``), or `None`.
pub fn backticked(cell: &str) -> Option<&str> {
    cell.strip_prefix('`')
        .and_then(|c| c.strip_suffix('`'))
        .filter(|c| !c.is_empty() && !c.contains('`'))
}

/// The body rows of the table introduced by the line `marker`, which must appear exactly once,
/// after checking that the table's header row is `header_row` and that a separator row follows.
/// A table without body rows is an error too.
pub fn table_rows<'a>(md: &'a str, marker: &str, header_row: &str) -> Result<Vec<&'a str>, String> {
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

/// A cell holding a decimal number; `what` and `row` only go into the error.
pub fn parse_decimal(cell: &str, what: &str, row: &str) -> Result<u64, String> {
    cell.parse::<u64>()
        .map_err(|_| format!("{what} `{cell}` is not a decimal number in row `{row}`"))
}

/// A body row of a table whose rows each name one item in backticks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedRow<'a> {
    /// The whole line, for error messages.
    pub line: &'a str,
    /// The item's name, between the backticks.
    pub name: &'a str,
    /// All the row's cells, trimmed, the name's cell included.
    pub cells: Vec<&'a str>,
}

/// The body rows of the table introduced by `marker` (see [`table_rows`]), each naming its item
/// in backticks in cell `name_column`. Every row must have as many cells as `header_row`, none
/// of them empty.
pub fn named_rows<'a>(
    md: &'a str,
    marker: &str,
    header_row: &str,
    name_column: usize,
) -> Result<Vec<NamedRow<'a>>, String> {
    let headers = cells(header_row);
    let Some(&what) = headers.get(name_column) else {
        return Err(format!(
            "the header row `{header_row}` has no column {name_column} to hold the names"
        ));
    };
    table_rows(md, marker, header_row)?
        .into_iter()
        .map(|line| {
            let c = cells(line);
            if c.len() != headers.len() {
                return Err(format!(
                    "row `{line}` has {} cells, expected {}",
                    c.len(),
                    headers.len()
                ));
            }
            let name = backticked(c[name_column]).ok_or_else(|| {
                format!(
                    "{what} `{}` is not in backticks in row `{line}`",
                    c[name_column]
                )
            })?;
            if let Some(i) = c.iter().position(|cell| cell.is_empty()) {
                return Err(format!(
                    "{what} `{name}` has no {} in row `{line}`",
                    headers[i]
                ));
            }
            Ok(NamedRow {
                line,
                name,
                cells: c,
            })
        })
        .collect()
}

/// The fields listed by the `<!-- fields: {structure} -->` table of `md`, in document order.
pub fn parse_fields(md: &str, structure: &str) -> Result<Vec<DocField>, String> {
    let marker = format!("<!-- fields: {structure} -->");
    named_rows(md, &marker, FIELDS_HEADER_ROW, 2)?
        .into_iter()
        .map(|r| {
            Ok(DocField {
                offset: parse_decimal(r.cells[0], "offset", r.line)?,
                size: parse_decimal(r.cells[1], "size", r.line)?,
                name: r.name.to_string(),
            })
        })
        .collect()
}

/// Every difference between the fields a document lists for `structure` and the code's, row by
/// row in order, then the rows only one side has. Empty means they agree.
pub fn compare_fields(structure: &str, doc: &[DocField], code: &[Field]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, (d, c)) in doc.iter().zip(code).enumerate() {
        if d.name != c.name || d.offset != c.offset as u64 || d.size != c.size as u64 {
            out.push(format!(
                "{structure} row {i}: the document says `{}` at offset {} size {}, \
                 the code says `{}` at offset {} size {}",
                d.name, d.offset, d.size, c.name, c.offset, c.size
            ));
        }
    }
    for d in doc.iter().skip(code.len()) {
        out.push(format!(
            "{structure}: the document lists `{}` (offset {}, size {}) that the code does not have",
            d.name, d.offset, d.size
        ));
    }
    for c in code.iter().skip(doc.len()) {
        out.push(format!(
            "{structure}: the code has `{}` (offset {}, size {}) that the document does not list",
            c.name, c.offset, c.size
        ));
    }
    out
}

/// Every difference between the constants a document lists, as (name, value), and the code's:
/// a name the code does not know, a value that differs, a name listed twice, and a name in
/// `required` that the document does not list. Empty means they agree.
pub fn compare_constants<V: PartialEq + Debug>(
    doc: &[(String, V)],
    code: &[(&str, V)],
    required: &[&str],
) -> Vec<String> {
    let mut out = Vec::new();
    for (name, value) in doc {
        match code.iter().find(|(n, _)| n == name) {
            None => out.push(format!(
                "constant `{name}` in the document is unknown to this test (add it to the test's \
                 list of constants)"
            )),
            Some((_, real)) if real != value => out.push(format!(
                "constant `{name}`: the document says {value:?}, the code says {real:?}"
            )),
            Some(_) => {}
        }
        if doc.iter().filter(|(n, _)| n == name).count() > 1 {
            out.push(format!("constant `{name}` is listed more than once"));
        }
    }
    for name in required {
        if !doc.iter().any(|(n, _)| n == name) {
            out.push(format!(
                "constant `{name}` is missing from the constants table"
            ));
        }
    }
    out
}

/// `Ok` if `diff` (from a `compare_` function) is empty, otherwise one message naming `table`
/// and listing every difference.
pub fn verdict(table: &str, diff: Vec<String>) -> Result<(), String> {
    if diff.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the {table} table disagrees with the code:\n{}",
            diff.join("\n")
        ))
    }
}

/// Parse the `structure` table of `md` and compare it with `code`: `Ok` if they agree, otherwise
/// one message saying why the table could not be read or listing every difference.
pub fn check_fields(md: &str, structure: &str, code: &[Field]) -> Result<(), String> {
    let doc = parse_fields(md, structure)
        .map_err(|e| format!("cannot parse the `{structure}` table: {e}"))?;
    verdict(
        &format!("`{structure}`"),
        compare_fields(structure, &doc, code),
    )
}

#[cfg(test)]
mod tests {
    //! The parser and the comparison must be able to fail; run here once on a sample table
    //! against `layout::slot`, rather than in each crate's document test.

    use super::*;
    use crate::layout::slot;

    const SAMPLE: &str = "\
# sample

<!-- fields: slot -->
| offset | size | field | meaning |
| ---: | ---: | --- | --- |
| 0 | 8 | `sequence` | write counter |
| 8 | 8 | `flags` | bit 0: clean shutdown |
| 24 | 8 | `directory_generation` | current directory |
| 24 | 8 | `pool_size` | size of a growable pool |
| 32 | 28 | `reserved` | zero |
| 60 | 4 | `crc32c` | checksum |

text after the table
";

    /// The sample with its one wrong offset put right.
    fn fixed_sample() -> String {
        SAMPLE.replace(
            "| 24 | 8 | `directory_generation`",
            "| 16 | 8 | `directory_generation`",
        )
    }

    #[test]
    fn cells_backticks_and_separators() {
        assert_eq!(cells("| 0 | 8 | `a` | x |"), vec!["0", "8", "`a`", "x"]);
        assert_eq!(cells("  0 | 8  "), vec!["0", "8"]);
        assert_eq!(backticked("`name`"), Some("name"));
        assert_eq!(backticked("name"), None);
        assert_eq!(backticked("``"), None);
        assert_eq!(backticked("`a` `b`"), None);
        assert!(is_separator("| ---: | :--- | --- |"));
        assert!(!is_separator("| --- | |"));
        assert!(!is_separator("| offset | size |"));
    }

    #[test]
    fn the_sample_parses_in_order() {
        let doc = parse_fields(SAMPLE, "slot").expect("the sample parses");
        assert_eq!(doc.len(), 6);
        assert_eq!(
            doc[1],
            DocField {
                offset: 8,
                size: 8,
                name: "flags".into()
            }
        );
        assert_eq!(doc[5].name, "crc32c");
    }

    #[test]
    fn a_wrong_offset_is_reported() {
        let doc = parse_fields(SAMPLE, "slot").expect("the sample parses");
        let diff = compare_fields("slot", &doc, slot::ALL);
        assert_eq!(diff.len(), 1, "{diff:?}");
        assert!(
            diff[0].contains("`directory_generation` at offset 24")
                && diff[0].contains("offset 16"),
            "{}",
            diff[0]
        );
        let err = check_fields(SAMPLE, "slot", slot::ALL).expect_err("the offset is wrong");
        assert!(err.contains("disagrees") && err.contains(&diff[0]), "{err}");
        assert_eq!(check_fields(&fixed_sample(), "slot", slot::ALL), Ok(()));
    }

    #[test]
    fn missing_extra_renamed_and_resized_fields_are_reported() {
        let mut doc = parse_fields(SAMPLE, "slot").expect("the sample parses");
        doc[2].offset = 16;
        assert!(compare_fields("slot", &doc, slot::ALL).is_empty());
        doc[1].name = "flag".into();
        assert_eq!(compare_fields("slot", &doc, slot::ALL).len(), 1);
        doc[1].name = "flags".into();
        doc[3].size = 40;
        assert_eq!(compare_fields("slot", &doc, slot::ALL).len(), 1);
        doc[3].size = 8;
        let last = doc.pop().expect("six rows");
        let diff = compare_fields("slot", &doc, slot::ALL);
        assert!(
            diff.len() == 1 && diff[0].contains("does not list"),
            "{diff:?}"
        );
        doc.push(last.clone());
        doc.push(last);
        let diff = compare_fields("slot", &doc, slot::ALL);
        assert!(
            diff.len() == 1 && diff[0].contains("does not have"),
            "{diff:?}"
        );
    }

    #[test]
    fn malformed_tables_are_refused() {
        let refused = |md: &str| {
            let parsed = parse_fields(md, "slot");
            assert!(parsed.is_err(), "{parsed:?} from:\n{md}");
            assert!(check_fields(md, "slot", slot::ALL).is_err());
        };
        let fine = fixed_sample();
        assert!(parse_fields(&fine, "header").is_err(), "no header table");
        refused(&fine.replace("| 8 | 8 | `flags`", "| 0x8 | 8 | `flags`"));
        refused(&fine.replace("| 8 | 8 | `flags`", "| 8 | eight | `flags`"));
        refused(&fine.replace("| 8 | 8 | `flags`", "| -8 | 8 | `flags`"));
        refused(&fine.replace("`flags`", "flags"));
        refused(&fine.replace("| `flags` | bit 0: clean shutdown |", "| `flags` | |"));
        refused(&fine.replace("| `flags` | bit 0: clean shutdown |", "| `flags` |"));
        refused(&fine.replace("| `flags` | bit 0: clean shutdown |", "| `flags` | a | b |"));
        refused(&fine.replace(FIELDS_HEADER_ROW, "| offset | size | name | meaning |"));
        refused(&fine.replace("| ---: | ---: | --- | --- |\n", ""));
        refused(&format!("{fine}\n{fine}"));
        refused(
            "<!-- fields: slot -->\n| offset | size | field | meaning |\n| --- | --- | --- | --- |\n",
        );
        refused("<!-- fields: slot -->\n| offset | size | field | meaning |");
        refused("<!-- fields: slot -->");
        refused("");
    }

    const CONSTANTS: &str = "\
<!-- constants -->
| constant | value | meaning |
| --- | ---: | --- |
| `A` | 1 | one |
| `B` | 2, 3 | two |
";

    #[test]
    fn named_rows_keep_the_line_the_name_and_the_cells() {
        let header = "| constant | value | meaning |";
        let rows =
            named_rows(CONSTANTS, "<!-- constants -->", header, 0).expect("the table parses");
        assert_eq!(
            rows[1],
            NamedRow {
                line: "| `B` | 2, 3 | two |",
                name: "B",
                cells: vec!["`B`", "2, 3", "two"],
            }
        );
        for (from, to, expected) in [
            ("| 1 | one |", "| 1 |", "has 2 cells, expected 3"),
            ("| 1 | one |", "| 1 | one | x |", "has 4 cells, expected 3"),
            ("| 1 | one |", "| 1 | |", "constant `A` has no meaning"),
            ("| 1 | one |", "|  | one |", "constant `A` has no value"),
            ("`A`", "A", "constant `A` is not in backticks"),
        ] {
            let md = CONSTANTS.replace(from, to);
            match named_rows(&md, "<!-- constants -->", header, 0) {
                Err(e) => assert!(e.contains(expected), "{e}"),
                Ok(rows) => panic!("{rows:?} from:\n{md}"),
            }
        }
        let no_such_column = named_rows(CONSTANTS, "<!-- constants -->", header, 3);
        assert!(no_such_column.is_err(), "{no_such_column:?}");
    }

    #[test]
    fn constants_that_differ_are_reported() {
        let doc: Vec<(String, u64)> = vec![
            ("A".into(), 1),
            ("B".into(), 5),
            ("C".into(), 0),
            ("A".into(), 1),
        ];
        let code: &[(&str, u64)] = &[("A", 1), ("B", 2), ("D", 4), ("E", 5)];
        let diff = compare_constants(&doc, code, &["A", "D"]);
        let has = |s: &str| diff.iter().filter(|d| d.contains(s)).count();
        assert_eq!(
            has("`B`: the document says 5, the code says 2"),
            1,
            "{diff:?}"
        );
        assert_eq!(has("`C` in the document is unknown"), 1, "{diff:?}");
        assert_eq!(has("`A` is listed more than once"), 2, "{diff:?}");
        assert_eq!(has("`D` is missing"), 1, "{diff:?}");
        assert_eq!(has("`E`"), 0, "not required: {diff:?}");
        assert_eq!(diff.len(), 5, "{diff:?}");
        assert!(compare_constants(&doc[..1], code, &["A"]).is_empty());
        assert_eq!(verdict("constants", Vec::new()), Ok(()));
        let err = verdict("constants", diff).expect_err("differences");
        assert!(
            err.starts_with("the constants table disagrees with the code:\n"),
            "{err}"
        );
    }
}

/// The value cell of a constants table: numbers (decimal or `0x` hex, comma-separated) or a
/// backticked byte string (a magic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConstValue {
    /// One or more numbers.
    Numbers(Vec<u64>),
    /// The bytes of a backticked string.
    Bytes(Vec<u8>),
}

impl ConstValue {
    /// One number.
    pub fn number(v: u64) -> ConstValue {
        ConstValue::Numbers(vec![v])
    }
    /// An 8-byte magic, as its little-endian bytes.
    pub fn magic(m: u64) -> ConstValue {
        ConstValue::Bytes(m.to_le_bytes().to_vec())
    }
}

/// The `<!-- constants -->` table of `md` (header `| constant | value | meaning |`): each
/// constant's name and parsed value, in document order.
pub fn doc_constants(md: &str) -> Result<Vec<(String, ConstValue)>, String> {
    named_rows(
        md,
        "<!-- constants -->",
        "| constant | value | meaning |",
        0,
    )?
    .iter()
    .map(|r| {
        parse_constant(r.cells[1])
            .map(|v| (r.name.to_string(), v))
            .map_err(|e| format!("{}: {e}", r.line))
    })
    .collect()
}

/// Parse the value cell of a constants table into a [`ConstValue`].
pub fn parse_constant(cell: &str) -> Result<ConstValue, String> {
    if let Some(b) = backticked(cell) {
        return Ok(ConstValue::Bytes(b.as_bytes().to_vec()));
    }
    cell.split(',')
        .map(|p| {
            let p = p.trim();
            match p.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => p.parse(),
            }
            .map_err(|e| format!("`{p}`: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(ConstValue::Numbers)
}
