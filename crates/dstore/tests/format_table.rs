//! The hash table's header, rehash block and growth constants in `docs/format/dstore-ops.md`
//! ("Hash table") against `crates/dstore/src/table.rs` and `machine.rs`.

mod common;

use dstore::machine::{KEYSPACE_BUCKETS, NESTED_BUCKETS};
use dstore::table::{
    BUCKETS_MAX, R_BYTES, R_NEXT, R_OLD, R_OLD_N, REHASH_INCREMENTAL_MIN, REHASH_STEP, T_BUCKETS,
    T_BYTES, T_COUNT, T_NBUCKETS, T_REHASH, TABLES_INCREMENTAL, USER_TABLE_FLAGS,
};
use pmem::format_doc::check_fields;
use pmem::layout::Field;

fn doc() -> String {
    common::format_doc("dstore-ops.md")
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
    let code: Vec<(&str, u64)> = vec![
        ("BUCKETS_MAX", BUCKETS_MAX),
        ("REHASH_STEP", REHASH_STEP),
        ("REHASH_INCREMENTAL_MIN", REHASH_INCREMENTAL_MIN),
        ("KEYSPACE_BUCKETS", KEYSPACE_BUCKETS),
        ("NESTED_BUCKETS", NESTED_BUCKETS),
        ("USER_TABLE_FLAGS", USER_TABLE_FLAGS as u64),
        ("TABLES_INCREMENTAL", TABLES_INCREMENTAL),
    ];
    common::check_constants(&md, "<!-- constants: table -->", "table constants", &code);
}
