//! `docs/format/dstore-objects.md` against the code: the constants and the header's fields,
//! and a header the code writes read back through the documented offsets.

mod common;

use dstore::op::BLOCK_BYTES;
use dstore::zone::*;
use pmem::format_doc::check_fields;
use pmem::layout::Field;

fn doc() -> String {
    common::format_doc("dstore-objects.md")
}

#[test]
fn constants_match_the_code() {
    let md = doc();
    let code: Vec<(&str, u64)> = vec![
        ("FILE_BLOCK_FLAG", FILE_BLOCK_FLAG as u64),
        ("FILE_BLOCK_MAX", FILE_BLOCK_MAX as u64),
        ("OBJECT_FILE_VERSION", OBJECT_FILE_VERSION as u64),
        ("BLOCK_BYTES", BLOCK_BYTES),
    ];
    common::check_constants(&md, "<!-- constants -->", "constants", &code);
    assert_eq!(FILE_BLOCK_MAX | FILE_BLOCK_FLAG, dstore::machine::HOLE - 1);
}

#[test]
fn header_layout_matches_the_code() {
    let fields = [
        Field::new("magic", OF_MAGIC, 8),
        Field::new("version", OF_VERSION, 4),
        Field::new("block_bytes", OF_BLOCK, 4),
        Field::new("pool_uuid", OF_UUID, 16),
        Field::new("crc32c", OF_CRC, 4),
    ];
    check_fields(&doc(), "object file header", &fields).unwrap();
    assert_eq!(OF_CRC_COVERS, OF_CRC);
    let uuid = pmem::Uuid([7; 16]);
    let h = object_file_header(&uuid);
    assert_eq!(h.len() as u64, BLOCK_BYTES);
    assert_eq!(&h[0..8], b"KVOBJDAT");
    assert_eq!(u32::from_le_bytes(h[8..12].try_into().unwrap()), 1);
    assert_eq!(u32::from_le_bytes(h[12..16].try_into().unwrap()), 4096);
    assert_eq!(&h[16..32], &[7; 16]);
    assert_eq!(
        u32::from_le_bytes(h[32..36].try_into().unwrap()),
        crc32c::crc32c(&h[..32])
    );
    assert!(h[36..].iter().all(|&b| b == 0));
    assert!(check_object_file_header(&h, &uuid, "test").unwrap());
}
