//! `docs/format/pool-set.md` against `pmem::set`: the member header's field table, the
//! constants table and the magic.

use pmem::format_doc::{check_fields, compare_constants, named_rows, parse_decimal, verdict};
use pmem::set;
use std::path::PathBuf;

fn read_doc() -> String {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/format/pool-set.md"
    ));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

#[test]
fn member_table_matches_the_code() {
    if let Err(e) = check_fields(&read_doc(), "member", set::member::ALL) {
        panic!("docs/format/pool-set.md against pmem::set: {e}");
    }
}

#[test]
fn member_fields_tile_the_header() {
    let mut at = 0;
    for f in set::member::ALL {
        assert_eq!(
            f.offset, at,
            "field `{}` does not follow the one before",
            f.name
        );
        at = f.end();
    }
    assert_eq!(at, set::MEMBER_HEADER_BYTES);
}

fn code_constants() -> Vec<(&'static str, u64)> {
    vec![
        ("MEMBER_VERSION", set::MEMBER_VERSION as u64),
        ("MEMBER_HEADER_BYTES", set::MEMBER_HEADER_BYTES as u64),
        ("MEMBER_DATA_OFFSET", set::MEMBER_DATA_OFFSET as u64),
        ("MEMBERS_MIN", set::MEMBERS_MIN as u64),
        ("MEMBERS_MAX", set::MEMBERS_MAX as u64),
        ("CHUNK_MIN", set::CHUNK_MIN),
        ("CHUNK_MAX", set::CHUNK_MAX),
        ("CHUNK_DEFAULT", set::CHUNK_DEFAULT),
        ("NO_MEMBER", set::NO_MEMBER as u64),
        ("MEMBER_FLAG_OPEN", set::MEMBER_FLAG_OPEN as u64),
    ]
}

#[test]
fn constants_table_matches_the_code() {
    let all: Vec<&str> = code_constants().iter().map(|(n, _)| *n).collect();
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
        .and_then(|doc| {
            verdict(
                "constants",
                compare_constants(&doc, &code_constants(), &all),
            )
        });
    if let Err(e) = checked {
        panic!("docs/format/pool-set.md against pmem::set: {e}");
    }
}

#[test]
fn magic_and_description_line_are_spelled_out() {
    let md = read_doc();
    let magic = std::str::from_utf8(&set::MEMBER_MAGIC).expect("ASCII");
    assert!(
        md.contains(&format!("`{magic}`")),
        "the magic `{magic}` is not in the document"
    );
    assert!(
        md.contains(&format!("`{}`", set::DESCRIPTION_MAGIC)),
        "the description's first line is not in the document"
    );
    // The copy offsets the document names.
    for at in set::MEMBER_HEADER_COPIES {
        assert!(
            md.contains(&format!("`[{at}, {})`", at + set::MEMBER_HEADER_BYTES)),
            "copy at {at}"
        );
    }
}

#[test]
fn header_round_trips_and_every_field_is_checked() {
    let h = set::MemberHeader {
        index: 2,
        count: 3,
        flags: set::MEMBER_FLAG_OPEN,
        chunk: 65536,
        rows: 10,
        generation: 7,
        set_uuid: pmem::Uuid([5; 16]),
        lost: Some(1),
        sequence: 9,
    };
    let b = h.encode();
    assert_eq!(set::MemberHeader::decode(&b), Ok(h));
    // Any one byte flipped anywhere in the header: refused, never a different header.
    for i in 0..set::MEMBER_HEADER_BYTES {
        let mut c = b;
        c[i] ^= 0x10;
        assert!(
            set::MemberHeader::decode(&c).is_err(),
            "byte {i} flipped decodes"
        );
    }
    // Out-of-range values with a good CRC are refused by field.
    let bad = |f: pmem::layout::Field, v: &[u8]| {
        let mut c = b;
        c[f.offset..f.offset + v.len()].copy_from_slice(v);
        let crc = crc32c::crc32c(&c[..124]);
        c[124..].copy_from_slice(&crc.to_le_bytes());
        set::MemberHeader::decode(&c)
            .expect_err("out of range")
            .field
    };
    use set::member as m;
    assert_eq!(bad(m::MEMBER_COUNT, &2u32.to_le_bytes()), "member_count");
    assert_eq!(bad(m::MEMBER_INDEX, &3u32.to_le_bytes()), "member_index");
    assert_eq!(bad(m::CHUNK_SIZE, &6000u64.to_le_bytes()), "chunk_size");
    assert_eq!(bad(m::ROWS, &0u64.to_le_bytes()), "rows");
    assert_eq!(bad(m::LOST_MEMBER, &3u32.to_le_bytes()), "lost_member");
    assert_eq!(bad(m::FLAGS, &2u32.to_le_bytes()), "flags");
    assert_eq!(bad(m::PAD, &1u32.to_le_bytes()), "pad");
    assert_eq!(bad(m::VERSION, &2u32.to_le_bytes()), "version");
}
