//! `docs/format/dstore-ops.md` against the code: op codes, flags, types and the entry layout.

use dstore::machine::{HOLE, TYPE_HASH, TYPE_OBJECT, TYPE_STRING, TYPE_ZSET, USER_KEYSPACE};
use dstore::op::*;
use dstore::table::{E_AUX, E_EXPIRE, E_HASH, E_KEY, E_KLEN, E_NEXT, E_VLEN};
use pmem::format_doc::{check_fields, compare_constants, named_rows, verdict};
use pmem::layout::Field;
use std::path::PathBuf;

fn doc() -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/format/dstore-ops.md");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn constants_match_the_code() {
    let md = doc();
    let rows = named_rows(
        &md,
        "<!-- constants -->",
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
        ("OP_SET", OP_SET as u64),
        ("OP_MSET", OP_MSET as u64),
        ("OP_DEL", OP_DEL as u64),
        ("OP_INCRBY", OP_INCRBY as u64),
        ("OP_APPEND", OP_APPEND as u64),
        ("OP_HSET", OP_HSET as u64),
        ("OP_HDEL", OP_HDEL as u64),
        ("OP_ZADD", OP_ZADD as u64),
        ("OP_ZREM", OP_ZREM as u64),
        ("OP_FLUSHALL", OP_FLUSHALL as u64),
        ("OP_NOOP", OP_NOOP as u64),
        ("OP_OWRITE", OP_OWRITE as u64),
        ("SET_NX", SET_NX as u64),
        ("SET_XX", SET_XX as u64),
        ("TYPE_STRING", TYPE_STRING),
        ("TYPE_HASH", TYPE_HASH),
        ("TYPE_ZSET", TYPE_ZSET),
        ("TYPE_OBJECT", TYPE_OBJECT),
        ("HOLE", HOLE as u64),
        ("BLOCK_BYTES", BLOCK_BYTES),
        ("USER_KEYSPACE", USER_KEYSPACE as u64),
    ];
    let required: Vec<&str> = code.iter().map(|c| c.0).collect();
    verdict("constants", compare_constants(&doc, &code, &required)).unwrap();
}

#[test]
fn entry_layout_matches_the_code() {
    let fields = [
        Field::new("next", E_NEXT, 8),
        Field::new("hash", E_HASH, 8),
        Field::new("expire", E_EXPIRE, 8),
        Field::new("aux", E_AUX, 8),
        Field::new("key_len", E_KLEN, 4),
        Field::new("value_len", E_VLEN, 4),
    ];
    assert_eq!(E_VLEN + 4, E_KEY, "the key follows the header");
    check_fields(&doc(), "entry", &fields).unwrap();
}
