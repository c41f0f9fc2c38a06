//! `docs/format/dstore-ops.md` against the code: op codes, flags, types, the entry and list
//! layouts; `docs/format/effects.md` against `model`'s effect and kind tags.

mod common;

use dstore::keyspace::ZSET_LEN_MAX;
use dstore::machine::effects::DB_COUNTS_BYTES;
use dstore::machine::list::{L_CAP, L_HEAD, L_LEN, L_SLOTS, LIST_CAP_MIN, LIST_LEN_MAX};
use dstore::machine::{
    AUX_DB_SHIFT, AUX_TYPE_MASK, HOLE, MACHINE_FIXED_PLACEMENT, MACHINE_INCREMENTAL_REHASH,
    PLACEMENT_SEED, TYPE_HASH, TYPE_LIST, TYPE_OBJECT, TYPE_SET, TYPE_STRING, TYPE_ZSET,
    USER_DB_COUNTS, USER_KEYSPACE,
};
use dstore::op::*;
use dstore::table::{E_AUX, E_EXPIRE, E_HASH, E_KEY, E_KLEN, E_NEXT, E_VLEN};
use model::Kind;
use pmem::format_doc::{check_fields, compare_constants, named_rows, verdict};
use pmem::layout::Field;

fn doc() -> String {
    common::format_doc("dstore-ops.md")
}

#[test]
fn constants_match_the_code() {
    let md = doc();
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
        ("OP_EFFECTS", OP_EFFECTS as u64),
        ("SET_NX", SET_NX as u64),
        ("SET_XX", SET_XX as u64),
        ("TYPE_STRING", TYPE_STRING),
        ("TYPE_HASH", TYPE_HASH),
        ("TYPE_ZSET", TYPE_ZSET),
        ("TYPE_OBJECT", TYPE_OBJECT),
        ("TYPE_LIST", TYPE_LIST),
        ("TYPE_SET", TYPE_SET),
        ("AUX_TYPE_MASK", AUX_TYPE_MASK),
        ("AUX_DB_SHIFT", AUX_DB_SHIFT as u64),
        ("HOLE", HOLE as u64),
        ("BLOCK_BYTES", BLOCK_BYTES),
        ("USER_KEYSPACE", USER_KEYSPACE as u64),
        ("USER_DB_COUNTS", USER_DB_COUNTS as u64),
        ("DB_COUNTS_BYTES", DB_COUNTS_BYTES as u64),
        ("LIST_CAP_MIN", LIST_CAP_MIN),
        ("LIST_LEN_MAX", LIST_LEN_MAX),
        ("ZSET_LEN_MAX", ZSET_LEN_MAX),
        ("MACHINE_FIXED_PLACEMENT", MACHINE_FIXED_PLACEMENT as u64),
        (
            "MACHINE_INCREMENTAL_REHASH",
            MACHINE_INCREMENTAL_REHASH as u64,
        ),
        ("PLACEMENT_SEED", PLACEMENT_SEED),
    ];
    common::check_constants(&md, "<!-- constants -->", "constants", &code);
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

#[test]
fn list_ring_layout_matches_the_code() {
    let fields = [
        Field::new("capacity", L_CAP, 8),
        Field::new("head", L_HEAD, 8),
        Field::new("length", L_LEN, 8),
        Field::new("slots", L_SLOTS, 8),
    ];
    check_fields(&doc(), "list ring", &fields).unwrap();
}

#[test]
fn the_model_kinds_are_dstore_types() {
    for (kind, ty) in [
        (Kind::String, TYPE_STRING),
        (Kind::Hash, TYPE_HASH),
        (Kind::List, TYPE_LIST),
        (Kind::Set, TYPE_SET),
        (Kind::ZSet, TYPE_ZSET),
    ] {
        assert_eq!(u64::from(kind.tag()), ty, "{kind:?}");
    }
    assert!(
        Kind::from_tag(TYPE_OBJECT as u8).is_none(),
        "4 is DStore's object"
    );
}

fn effects_doc() -> String {
    common::format_doc("effects.md")
}

fn tag_table(md: &str, marker: &str, header: &str) -> Vec<(String, u64)> {
    named_rows(md, marker, header, 0)
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.name.to_string(),
                r.cells[1]
                    .parse()
                    .unwrap_or_else(|e| panic!("{}: {e}", r.line)),
            )
        })
        .collect()
}

#[test]
fn effect_tags_match_the_model() {
    let md = effects_doc();
    let doc = tag_table(
        &md,
        "<!-- effect tags -->",
        "| tag | value | fields after the tag | meaning |",
    );
    let code: Vec<(&str, u64)> = model::effect_tags::ALL
        .iter()
        .map(|&(n, t)| (n, u64::from(t)))
        .collect();
    let required: Vec<&str> = code.iter().map(|c| c.0).collect();
    verdict("effect tags", compare_constants(&doc, &code, &required)).unwrap();
    // Every effect has a tag in that list: encode one of each and read its tag byte.
    let k = || b"k".to_vec();
    let every = [
        model::Effect::Del { db: 0, key: k() },
        model::Effect::Put {
            db: 0,
            key: k(),
            value: model::Value::String(k()),
            expire_at_ms: 0,
        },
        model::Effect::Expire {
            db: 0,
            key: k(),
            at_ms: 0,
        },
        model::Effect::HSet {
            db: 0,
            key: k(),
            pairs: vec![],
        },
        model::Effect::HDel {
            db: 0,
            key: k(),
            fields: vec![],
        },
        model::Effect::LPush {
            db: 0,
            key: k(),
            left: true,
            elems: vec![],
        },
        model::Effect::LPop {
            db: 0,
            key: k(),
            left: true,
            count: 0,
        },
        model::Effect::LSet {
            db: 0,
            key: k(),
            index: 0,
            elem: k(),
        },
        model::Effect::LInsert {
            db: 0,
            key: k(),
            index: 0,
            elem: k(),
        },
        model::Effect::LRemAt {
            db: 0,
            key: k(),
            indices: vec![],
        },
        model::Effect::LTrim {
            db: 0,
            key: k(),
            start: 0,
            end: 0,
        },
        model::Effect::SAdd {
            db: 0,
            key: k(),
            members: vec![],
        },
        model::Effect::SRem {
            db: 0,
            key: k(),
            members: vec![],
        },
        model::Effect::ZAdd {
            db: 0,
            key: k(),
            members: vec![],
        },
        model::Effect::ZRem {
            db: 0,
            key: k(),
            members: vec![],
        },
        model::Effect::FlushDb { db: 0 },
        model::Effect::FlushAll,
        model::Effect::SwapDb { a: 0, b: 1 },
    ];
    let mut seen: Vec<u8> = every
        .iter()
        .map(|e| model::encode_effects(std::slice::from_ref(e))[4])
        .collect();
    seen.sort_unstable();
    let mut listed: Vec<u8> = model::effect_tags::ALL.iter().map(|t| t.1).collect();
    listed.sort_unstable();
    assert_eq!(seen, listed, "one tag per effect, each listed");
}

#[test]
fn kind_tags_match_the_model() {
    let md = effects_doc();
    let doc = tag_table(
        &md,
        "<!-- kind tags -->",
        "| kind | tag | contents after the tag |",
    );
    let kinds = [Kind::String, Kind::Hash, Kind::List, Kind::Set, Kind::ZSet];
    // The array lists every kind once: a new kind fails to compile here until it is added.
    let position = |k: Kind| match k {
        Kind::String => 0,
        Kind::Hash => 1,
        Kind::List => 2,
        Kind::Set => 3,
        Kind::ZSet => 4,
    };
    for (i, k) in kinds.iter().enumerate() {
        assert_eq!(position(*k), i);
    }
    let code: Vec<(&str, u64)> = kinds
        .iter()
        .map(|k| (k.name(), u64::from(k.tag())))
        .collect();
    let required: Vec<&str> = code.iter().map(|c| c.0).collect();
    verdict("kind tags", compare_constants(&doc, &code, &required)).unwrap();
    for t in 0..=255u8 {
        assert_eq!(
            Kind::from_tag(t).is_some(),
            code.iter().any(|c| c.1 == u64::from(t)),
            "tag {t}"
        );
    }
}
