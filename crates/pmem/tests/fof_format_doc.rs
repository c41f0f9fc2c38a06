//! `docs/format/fof.md` against `pmem::fof`: the field table, the constants and the magic.

use pmem::fof;
use pmem::format_doc::{check_fields, compare_constants, named_rows, parse_decimal, verdict};
use std::path::PathBuf;

fn read_doc() -> String {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/format/fof.md"
    ));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

#[test]
fn copy_table_matches_the_code() {
    if let Err(e) = check_fields(&read_doc(), "copy", fof::FIELDS) {
        panic!("docs/format/fof.md against pmem::fof: {e}");
    }
}

#[test]
fn fields_tile_one_copy() {
    let mut at = 0;
    for f in fof::FIELDS {
        assert_eq!(
            f.offset, at,
            "field `{}` does not follow the one before",
            f.name
        );
        at = f.end();
    }
    assert_eq!(at, fof::COPY_BYTES);
    let crc = fof::FIELDS.iter().find(|f| f.name == "crc").expect("crc");
    assert_eq!(crc.offset, fof::CRC_COVERED);
}

#[test]
fn constants_table_matches_the_code() {
    let code = [
        ("COPY_BYTES", fof::COPY_BYTES as u64),
        ("RECORD_BYTES", fof::RECORD_BYTES as u64),
        ("HINTS_MAX", fof::HINTS_MAX as u64),
        ("VERSION", u64::from(fof::VERSION)),
        ("CRC_COVERED", fof::CRC_COVERED as u64),
    ];
    let required: Vec<&str> = code.iter().map(|(n, _)| *n).collect();
    let checked = named_rows(&read_doc(), "<!-- constants -->", "| constant | value |", 0)
        .and_then(|rows| {
            rows.into_iter()
                .map(|r| {
                    Ok((
                        r.name.to_string(),
                        parse_decimal(r.cells[1], "value", r.line)?,
                    ))
                })
                .collect::<Result<Vec<_>, String>>()
        })
        .and_then(|doc| verdict("constants", compare_constants(&doc, &code, &required)));
    if let Err(e) = checked {
        panic!("docs/format/fof.md against pmem::fof: {e}");
    }
}

#[test]
fn magic_is_spelled_out() {
    let md = read_doc();
    let hex = format!("{:#018x}", fof::MAGIC);
    assert!(
        md.contains(&hex),
        "the document does not give the magic as {hex}"
    );
    assert!(md.contains("`KVFOFREC`"));
    let rec = fof::FofRecord {
        state: fof::FofState::Saved,
        sequence: 3,
        save_count: 1,
        saved_at_ns: 9,
        hints: vec![1, 2],
    };
    let b = rec.encode();
    assert_eq!(&b[..8], b"KVFOFREC");
    assert_eq!(fof::FofRecord::decode(&b, 0), Ok(rec));
}
