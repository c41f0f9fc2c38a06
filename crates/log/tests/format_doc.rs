//! `docs/format/log.md` against the code: the field tables and the constants table must say
//! exactly what `log::layout` (and the few constants kept elsewhere) say, and the checksum and
//! size formulas the document states must be the ones the code computes.
//!
//! Conventions the document follows (and this test parses):
//! - a line `<!-- fields: X -->` (X is `descriptor`, `superline` or `record`) right before a
//!   field table, as `pmem::format_doc` describes and parses it;
//! - a line `<!-- constants -->` right before a table `| constant | value | meaning |` whose
//!   rows hold a constant's name in backticks, its value (a decimal or `0x` number, a
//!   comma-separated list of numbers, or a magic's ASCII bytes in backticks) and a meaning.

use log::format::{self, Descriptor, RecordHeader, Superline};
use log::layout::{self, Field, kinds};
use pmem::Uuid;
use pmem::format_doc::{backticked, check_fields, compare_constants, named_rows, verdict};
use std::path::PathBuf;

const CONSTANTS_HEADER_ROW: &str = "| constant | value | meaning |";

/// A constant's value as the document writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    /// One number, or a list of them (the copy offsets).
    Numbers(Vec<u64>),
    /// The bytes of a magic.
    Bytes(Vec<u8>),
}

fn one(n: u64) -> Value {
    Value::Numbers(vec![n])
}

fn offsets(list: [usize; 2]) -> Value {
    Value::Numbers(list.iter().map(|&n| n as u64).collect())
}

/// Every constant the document must list, with its value in the code.
fn code_constants() -> Vec<(&'static str, Value)> {
    vec![
        ("RECORD_ALIGN", one(layout::RECORD_ALIGN as u64)),
        (
            "DESCRIPTOR_COPY_OFFSETS",
            offsets(layout::DESCRIPTOR_COPY_OFFSETS),
        ),
        ("DESCRIPTOR_BYTES", one(layout::DESCRIPTOR_BYTES as u64)),
        (
            "SUPERLINE_COPY_OFFSETS",
            offsets(layout::SUPERLINE_COPY_OFFSETS),
        ),
        ("SUPERLINE_BYTES", one(layout::SUPERLINE_BYTES as u64)),
        ("RING_OFFSET", one(layout::RING_OFFSET as u64)),
        ("NEW_LOG_EPOCH", one(layout::NEW_LOG_EPOCH)),
        ("RING_BYTES_MIN", one(layout::RING_BYTES_MIN)),
        ("RING_BYTES_MAX", one(layout::RING_BYTES_MAX)),
        ("PAYLOAD_BYTES_MAX", one(layout::PAYLOAD_BYTES_MAX as u64)),
        (
            "RECORD_HEADER_BYTES",
            one(layout::RECORD_HEADER_BYTES as u64),
        ),
        (
            "record::CRC_COVERED_BYTES",
            one(layout::record::CRC_COVERED_BYTES as u64),
        ),
        ("FORMAT_VERSION", one(layout::FORMAT_VERSION as u64)),
        (
            "FEATURES_INCOMPAT_KNOWN",
            one(layout::FEATURES_INCOMPAT_KNOWN as u64),
        ),
        (
            "features::DURABLE_LSN",
            one(layout::features::DURABLE_LSN as u64),
        ),
        ("VALID_KEY", one(layout::VALID_KEY)),
        (
            "DESCRIPTOR_MAGIC",
            Value::Bytes(layout::DESCRIPTOR_MAGIC.to_vec()),
        ),
        (
            "SUPERLINE_MAGIC",
            Value::Bytes(layout::SUPERLINE_MAGIC.to_vec()),
        ),
        ("kinds::DATA", one(kinds::DATA as u64)),
        ("kinds::PADDING", one(kinds::PADDING as u64)),
        ("kinds::JUMP", one(kinds::JUMP as u64)),
        ("kinds::VOID", one(kinds::VOID as u64)),
        ("LSN_MAX", one(format::LSN_MAX)),
        (
            "NONTEMPORAL_BYTES_MIN",
            one(log::NONTEMPORAL_BYTES_MIN as u64),
        ),
    ]
}

fn doc_path() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/format/log.md"
    ))
}

fn read_doc() -> String {
    let path = doc_path();
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// A decimal number, or a `0x` hexadecimal one.
fn parse_number(cell: &str, what: &str, row: &str) -> Result<u64, String> {
    let parsed = match cell.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => cell.parse::<u64>().ok(),
    };
    parsed.ok_or_else(|| format!("{what} `{cell}` is not a decimal or 0x number in row `{row}`"))
}

/// Parse a constant's value cell.
fn parse_value(cell: &str, row: &str) -> Result<Value, String> {
    if let Some(text) = backticked(cell) {
        if !text.is_ascii() {
            return Err(format!("magic `{text}` is not ASCII in row `{row}`"));
        }
        return Ok(Value::Bytes(text.as_bytes().to_vec()));
    }
    cell.split(',')
        .map(|n| parse_number(n.trim(), "value", row))
        .collect::<Result<Vec<u64>, String>>()
        .map(Value::Numbers)
}

/// Parse the `<!-- constants -->` table into (name, value) rows.
fn parse_constants(md: &str) -> Result<Vec<(String, Value)>, String> {
    named_rows(md, "<!-- constants -->", CONSTANTS_HEADER_ROW, 0)?
        .into_iter()
        .map(|r| Ok((r.name.to_string(), parse_value(r.cells[1], r.line)?)))
        .collect()
}

/// Every difference between the documented constants and the code's (all of which the document
/// must list). Empty means equal.
fn constants_diff(doc: &[(String, Value)]) -> Vec<String> {
    let code = code_constants();
    let required: Vec<&str> = code.iter().map(|(name, _)| *name).collect();
    compare_constants(doc, &code, &required)
}

fn assert_structure(structure: &str, code: &[Field]) {
    if let Err(e) = check_fields(&read_doc(), structure, code) {
        panic!("{} against log::layout: {e}", doc_path().display());
    }
}

#[test]
fn descriptor_table_matches_layout() {
    assert_structure("descriptor", &layout::descriptor::ALL);
}

#[test]
fn superline_table_matches_layout() {
    assert_structure("superline", &layout::superline::ALL);
}

#[test]
fn record_table_matches_layout() {
    assert_structure("record", &layout::record::ALL);
}

#[test]
fn constants_table_matches_the_code() {
    let checked = parse_constants(&read_doc())
        .map_err(|e| format!("cannot parse the constants table: {e}"))
        .and_then(|doc| verdict("constants", constants_diff(&doc)));
    if let Err(e) = checked {
        panic!("{}: {e}", doc_path().display());
    }
}

#[test]
fn every_kind_is_named_in_the_kinds_table() {
    let md = read_doc();
    for kind in [kinds::DATA, kinds::PADDING, kinds::JUMP, kinds::VOID] {
        let row = format!("| {} ({kind}) |", kinds::name(kind));
        assert!(
            md.contains(&row),
            "{} has no kinds row starting `{row}`",
            doc_path().display()
        );
    }
}

// The formulas the document states ("Constants", "Checksum coverage"), recomputed here from
// first principles and compared with what the code writes.

const UUID: Uuid = Uuid([0x5a; 16]);

fn crc_of(parts: &[&[u8]]) -> u32 {
    crc32c::crc32c(&parts.concat())
}

#[test]
fn footprint_and_payload_limit_are_as_documented() {
    for n in [0usize, 1, 31, 32, 33, 95, 96, 97, 1000, 4096, 1 << 20] {
        assert_eq!(
            layout::record_footprint(n),
            (32 + n).div_ceil(64) * 64,
            "footprint of {n}"
        );
    }
    for ring in [
        layout::RING_BYTES_MIN,
        layout::RING_BYTES_MIN + 64,
        1 << 31,
        (1 << 31) + 64,
        layout::RING_BYTES_MAX,
    ] {
        assert_eq!(
            u64::from(format::payload_max_for(ring)),
            (ring / 2 - 32).min(1 << 30),
            "payload limit of a {ring}-byte ring"
        );
    }
    let d = Descriptor::for_region(UUID, 4096 + 100_000).expect("a region");
    assert_eq!(d.ring_bytes, 100_000 / 64 * 64);
    assert_eq!(d.payload_bytes_max, format::payload_max_for(d.ring_bytes));
}

#[test]
fn checksums_cover_what_the_document_says() {
    // Descriptor: CRC-32C over bytes 0..59.
    let d = Descriptor::for_region(UUID, 1 << 20).expect("a region");
    for copy in 0..2 {
        let b = d.encode(copy);
        assert_eq!(b[..8], layout::DESCRIPTOR_MAGIC);
        // A new log keeps the superline's durable LSN.
        assert_eq!(b[12..16], layout::features::DURABLE_LSN.to_le_bytes());
        assert_eq!(b[52..56], (copy as u32).to_le_bytes());
        assert_eq!(b[60..64], crc_of(&[&b[..60]]).to_le_bytes());
    }
    // Superline: CRC-32C over the log UUID, the copy index as a u32, bytes 0..59.
    for sequence in [1u64, 2, 7] {
        let sl = Superline {
            sequence,
            head: 128,
            start_lsn: 9,
            epoch: 2,
            durable_lsn: 8,
        };
        let b = sl.encode(&UUID);
        let copy = (sequence % 2) as u32;
        assert_eq!(b[..8], layout::SUPERLINE_MAGIC);
        assert_eq!(b[40..48], 8u64.to_le_bytes());
        assert_eq!(
            b[60..64],
            crc_of(&[&UUID.0, &copy.to_le_bytes(), &b[..60]]).to_le_bytes()
        );
    }
    // Record: CRC-32C over the log UUID, header bytes 0..15, the payload; valid = key ^ lsn.
    let payload = b"a record payload";
    let (lsn, kind) = (77u64, kinds::DATA);
    let length = payload.len() as u32;
    let crc = crc32c::crc32c_append(
        format::crc_start(format::crc_seed(&UUID), lsn, length, kind),
        payload,
    );
    let h = RecordHeader {
        lsn,
        length,
        kind,
        payload_crc: crc,
    }
    .encode();
    assert_eq!(crc, crc_of(&[&UUID.0, &h[..16], payload]));
    assert_eq!(h[0..8], lsn.to_le_bytes());
    assert_eq!(h[8..12], length.to_le_bytes());
    assert_eq!(h[12..14], kind.to_le_bytes());
    assert_eq!(h[14..16], [0, 0]);
    assert_eq!(h[16..20], crc.to_le_bytes());
    assert_eq!(h[20..24], [0; 4]);
    assert_eq!(h[24..32], (layout::VALID_KEY ^ lsn).to_le_bytes());
    assert_eq!(format::valid_word(lsn), layout::VALID_KEY ^ lsn);
}

// The constants parser and comparison must be able to fail. (The field-table parser and
// comparison are tested in `pmem::format_doc`.)

const SAMPLE: &str = "\
# sample

<!-- constants -->
| constant | value | meaning |
| --- | ---: | --- |
| `RECORD_ALIGN` | 64 | line |
| `RING_OFFSET` | 4097 | ring |
| `SUPERLINE_COPY_OFFSETS` | 128, 192 | copies |
| `VALID_KEY` | 0x56414c49444b5643 | key |
| `DESCRIPTOR_MAGIC` | `KVLOGDSX` | magic |
";

#[test]
fn wrong_and_missing_constants_are_reported() {
    let doc = parse_constants(SAMPLE).expect("the sample parses");
    assert_eq!(doc[0], ("RECORD_ALIGN".into(), one(64)));
    assert_eq!(
        doc[2],
        (
            "SUPERLINE_COPY_OFFSETS".into(),
            Value::Numbers(vec![128, 192])
        )
    );
    let diff = constants_diff(&doc);
    let has = |s: &str| diff.iter().any(|d| d.contains(s));
    assert!(
        has("`RING_OFFSET`: the document says Numbers([4097])"),
        "{diff:?}"
    );
    assert!(has("`DESCRIPTOR_MAGIC`: the document says"), "{diff:?}");
    assert!(has("`kinds::JUMP` is missing"), "{diff:?}");
    assert!(!has("`RECORD_ALIGN`"), "{diff:?}");
    assert!(!has("`VALID_KEY`"), "{diff:?}");
    assert!(!has("`SUPERLINE_COPY_OFFSETS`"), "{diff:?}");
    let unknown = SAMPLE.replace("`RECORD_ALIGN`", "`RECORD_ALIGNMENT`");
    let diff = constants_diff(&parse_constants(&unknown).expect("parses"));
    assert!(
        diff.iter()
            .any(|d| d.contains("`RECORD_ALIGNMENT` in the document is unknown")),
        "{diff:?}"
    );
}

#[test]
fn constant_values_must_be_numbers_or_magics() {
    let bad_value = SAMPLE.replace("| 64 | line |", "| sixty-four | line |");
    assert!(parse_constants(&bad_value).is_err());
    let bad_list = SAMPLE.replace("| 128, 192 |", "| 128, |");
    assert!(parse_constants(&bad_list).is_err());
    let bad_hex = SAMPLE.replace("| 0x56414c49444b5643 |", "| 0x5641zz |");
    assert!(parse_constants(&bad_hex).is_err());
    let not_ascii = SAMPLE.replace("`KVLOGDSX`", "`KVLOGDSÉ`");
    assert!(parse_constants(&not_ascii).is_err());
    let two_cells = SAMPLE.replace("| 64 | line |", "| 64 |");
    assert!(parse_constants(&two_cells).is_err());
}
