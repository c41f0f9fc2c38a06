//! The hash table's header, rehash block and growth constants in `docs/format/dstore-ops.md`
//! ("Hash table") against `crates/dstore/src/table.rs` and `machine.rs`.

use dstore::machine::{KEYSPACE_BUCKETS, NESTED_BUCKETS};
use dstore::table::{
    BUCKETS_MAX, R_BYTES, R_NEXT, R_OLD, R_OLD_N, REHASH_INCREMENTAL_MIN, REHASH_STEP, T_BUCKETS,
    T_BYTES, T_COUNT, T_NBUCKETS, T_REHASH, TABLES_INCREMENTAL, USER_TABLE_FLAGS,
};
use pmem::format_doc::{check_fields, compare_constants, named_rows, verdict};
use pmem::layout::Field;
use std::path::PathBuf;

fn doc() -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/format/dstore-ops.md");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn table_header_layout_matches_the_code() {
    let fields = [
        Field::new("buckets_at", T_BUCKETS, 8),
        Field::new("buckets", T_NBUCKETS, 8),
        Field::new("count", T_COUNT, 8),
        Field::new("rehash", T_REHASH, 8),
    ];
    assert_eq!(T_REHASH + 8, T_BYTES, "the header is four words");
    check_fields(&doc(), "table header", &fields).unwrap();
}

#[test]
fn rehash_block_layout_matches_the_code() {
    let fields = [
        Field::new("old_at", R_OLD, 8),
        Field::new("old_buckets", R_OLD_N, 8),
        Field::new("next", R_NEXT, 8),
        Field::new("zero", R_NEXT + 8, 8),
    ];
    assert_eq!(R_NEXT + 16, R_BYTES, "the block is four words");
    check_fields(&doc(), "rehash block", &fields).unwrap();
}

#[test]
fn table_constants_match_the_code() {
    let md = doc();
    let rows = named_rows(
        &md,
        "<!-- constants: table -->",
        "| constant | value | meaning |",
        0,
    )
    .unwrap();
    let doc: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            (
                r.name.to_string(),
                r.cells[1]
                    .parse()
                    .unwrap_or_else(|e| panic!("{}: {e}", r.line)),
            )
        })
        .collect();
    let code: Vec<(&str, u64)> = vec![
        ("BUCKETS_MAX", BUCKETS_MAX),
        ("REHASH_STEP", REHASH_STEP),
        ("REHASH_INCREMENTAL_MIN", REHASH_INCREMENTAL_MIN),
        ("KEYSPACE_BUCKETS", KEYSPACE_BUCKETS),
        ("NESTED_BUCKETS", NESTED_BUCKETS),
        ("USER_TABLE_FLAGS", USER_TABLE_FLAGS as u64),
        ("TABLES_INCREMENTAL", TABLES_INCREMENTAL),
    ];
    let required: Vec<&str> = code.iter().map(|c| c.0).collect();
    verdict("table constants", compare_constants(&doc, &code, &required)).unwrap();
}
