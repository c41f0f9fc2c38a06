//! `docs/format/replication-ops.md` against `server::oplog`: the tag constants, and encodings
//! of every operation decoded back and checked at the documented places.

use std::path::PathBuf;

use pmem::format_doc::{ConstValue, compare_constants, doc_constants, verdict};
use server::backend::SetOptions;
use server::oplog::{Op, op_tags};

fn doc() -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/format/replication-ops.md");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn tags_match_the_code() {
    let code: Vec<(&str, ConstValue)> = [
        ("SET", op_tags::SET),
        ("MSET", op_tags::MSET),
        ("DEL", op_tags::DEL),
        ("INCRBY", op_tags::INCRBY),
        ("APPEND", op_tags::APPEND),
        ("HSET", op_tags::HSET),
        ("HDEL", op_tags::HDEL),
        ("ZADD", op_tags::ZADD),
        ("ZREM", op_tags::ZREM),
        ("FLUSHALL", op_tags::FLUSHALL),
        ("EFFECTS", op_tags::EFFECTS),
    ]
    .into_iter()
    .map(|(n, v)| (n, ConstValue::number(v.into())))
    .collect();
    let required: Vec<&str> = code.iter().map(|c| c.0).collect();
    let docs = doc_constants(&doc()).expect("constants table");
    verdict("tags", compare_constants(&docs, &code, &required)).expect("tags");
}

#[test]
fn every_operation_round_trips_and_set_is_laid_out_as_documented() {
    let b = |s: &str| s.as_bytes().to_vec();
    let ops = vec![
        Op::Set {
            key: b("k"),
            value: b("vv"),
            opts: SetOptions {
                expire_at_ms: Some(1_700_000_000_000),
                only_if_absent: true,
                only_if_present: false,
            },
        },
        Op::MSet(vec![(b("a"), b("1")), (b("b"), b("2"))]),
        Op::Del(vec![b("a"), b("b")]),
        Op::IncrBy(b("n"), -5),
        Op::Append(b("k"), b("x")),
        Op::HSet(b("h"), vec![(b("f"), b("v"))]),
        Op::HDel(b("h"), vec![b("f")]),
        Op::ZAdd(b("z"), vec![(1.5, b("m")), (f64::NEG_INFINITY, b("n"))]),
        Op::ZRem(b("z"), vec![b("m")]),
        Op::FlushAll,
        Op::Effects(vec![
            model::Effect::LPush {
                db: 3,
                key: b("l"),
                left: true,
                elems: vec![b("x")],
            },
            model::Effect::FlushDb { db: 2 },
        ]),
    ];
    for op in &ops {
        assert_eq!(Op::decode(&op.encode()).as_ref(), Ok(op));
    }
    let set = ops[0].encode();
    let mut want = vec![op_tags::SET];
    want.extend_from_slice(&1u32.to_le_bytes());
    want.extend_from_slice(b"k");
    want.extend_from_slice(&2u32.to_le_bytes());
    want.extend_from_slice(b"vv");
    want.push(0b011);
    want.extend_from_slice(&1_700_000_000_000i64.to_le_bytes());
    assert_eq!(set, want);
    // EFFECTS: the tag, then the effect list exactly as `model` encodes it.
    let effects = ops.last().expect("effects op").encode();
    assert_eq!(effects[0], op_tags::EFFECTS);
    let Op::Effects(list) = ops.last().expect("effects op") else {
        unreachable!("the last op is the effects one")
    };
    assert_eq!(&effects[1..], model::encode_effects(list).as_slice());
}

#[test]
fn malformed_records_are_refused_naming_the_field() {
    let set = Op::Set {
        key: b"k".to_vec(),
        value: b"v".to_vec(),
        opts: SetOptions::default(),
    }
    .encode();
    let e = Op::decode(&set[..set.len() - 1]).unwrap_err();
    assert_eq!(e.field, "expire_at_ms", "{e}");
    assert!(e.is_truncated(), "{e}");
    let mut extra = set.clone();
    extra.push(0);
    let e = Op::decode(&extra).unwrap_err();
    assert!(e.to_string().contains("1 more bytes follow"), "{e}");
    let mut flags = set.clone();
    flags[11] = 8;
    let e = Op::decode(&flags).unwrap_err();
    assert_eq!((e.field, e.offset), ("flags", 11), "{e}");
    assert!(e.to_string().contains("at byte 0xb"), "{e}");
    assert!(
        Op::decode(&[99])
            .unwrap_err()
            .to_string()
            .contains("found 99")
    );
    assert_eq!(Op::decode(&[]).unwrap_err().field, "tag");
    let mut nan = vec![op_tags::ZADD, 1, 0, 0, 0, b'z', 1, 0, 0, 0];
    nan.extend_from_slice(&f64::NAN.to_le_bytes());
    nan.extend_from_slice(&[1, 0, 0, 0, b'm']);
    let e = Op::decode(&nan).unwrap_err();
    assert_eq!(e.field, "score");
    assert!(e.to_string().contains("NaN"), "{e}");
}
