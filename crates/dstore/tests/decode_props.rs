//! Property tests of DStore's operation records: arbitrary bytes and damaged real encodings
//! decode to a record or a typed corruption, never a panic; every operation round-trips. And a
//! damaged store opens to a typed corruption, not a message string.

#[path = "../../pmem/tests/props/mod.rs"]
mod props;

use std::sync::Arc;

use dipper::DipperError;
use dstore::op::{self, Op, Record, SET_NX, SET_XX};
use dstore::{Config, Store, StoreError};
use model::{Effect, Value};
use pmem::{Domain, OpenOptions, Pool, SimConfig, SimMedium};
use proptest::prelude::*;

const DIR: &str = env!("CARGO_MANIFEST_DIR");

fn samples() -> Vec<(&'static str, Op<'static>)> {
    vec![
        (
            "set",
            Op::Set {
                key: b"k",
                value: b"value",
                flags: SET_NX,
                expire_at: 99,
            },
        ),
        ("mset", Op::MSet(vec![(b"a", b"1"), (b"b", b"")])),
        ("del", Op::Del(vec![b"a", b"b"])),
        (
            "incrby",
            Op::IncrBy {
                key: b"n",
                delta: -5,
            },
        ),
        (
            "append",
            Op::Append {
                key: b"s",
                value: b"xyz",
            },
        ),
        (
            "hset",
            Op::HSet {
                key: b"h",
                pairs: vec![(b"f", b"v")],
            },
        ),
        (
            "hdel",
            Op::HDel {
                key: b"h",
                fields: vec![b"f", b"g"],
            },
        ),
        (
            "zadd",
            Op::ZAdd {
                key: b"z",
                members: vec![(1.5, b"m"), (f64::NEG_INFINITY, b"n")],
            },
        ),
        (
            "zrem",
            Op::ZRem {
                key: b"z",
                members: vec![b"m"],
            },
        ),
        ("flushall", Op::FlushAll),
        ("noop", Op::Noop(b"obj")),
        (
            "owrite",
            Op::OWrite {
                key: b"o",
                size: 9000,
                blocks: vec![(0, 7), (2, 3)],
            },
        ),
        ("effects", Op::Effects(every_effect())),
        (
            "effects_set",
            Op::Effects(vec![Effect::Put {
                db: 3,
                key: v("key:000042"),
                value: Value::String(v("a value of the usual kind")),
                expire_at_ms: 1_700_000_060_000,
            }]),
        ),
    ]
}

fn v(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// One of every effect, with values of every kind.
fn every_effect() -> Vec<Effect> {
    vec![
        Effect::Del { db: 0, key: v("a") },
        Effect::Put {
            db: 1,
            key: v("s"),
            value: Value::String(v("v")),
            expire_at_ms: 42,
        },
        Effect::Put {
            db: 2,
            key: v("h"),
            value: Value::Hash(vec![(v("f"), v("v"))]),
            expire_at_ms: 0,
        },
        Effect::Put {
            db: 3,
            key: v("l"),
            value: Value::List(vec![v("x"), v("y")]),
            expire_at_ms: 0,
        },
        Effect::Put {
            db: 4,
            key: v("st"),
            value: Value::Set(vec![v("m")]),
            expire_at_ms: 0,
        },
        Effect::Put {
            db: 15,
            key: v("z"),
            value: Value::ZSet(vec![(1.5, v("m")), (f64::INFINITY, v("n"))]),
            expire_at_ms: -1,
        },
        Effect::Expire {
            db: 0,
            key: v("a"),
            at_ms: 7,
        },
        Effect::HSet {
            db: 0,
            key: v("h"),
            pairs: vec![(v("f"), v("v"))],
        },
        Effect::HDel {
            db: 0,
            key: v("h"),
            fields: vec![v("f")],
        },
        Effect::LPush {
            db: 0,
            key: v("l"),
            left: true,
            elems: vec![v("a"), v("b")],
        },
        Effect::LPop {
            db: 0,
            key: v("l"),
            left: false,
            count: 3,
        },
        Effect::LSet {
            db: 0,
            key: v("l"),
            index: 1,
            elem: v("q"),
        },
        Effect::LInsert {
            db: 0,
            key: v("l"),
            index: 0,
            elem: v("q"),
        },
        Effect::LRemAt {
            db: 0,
            key: v("l"),
            indices: vec![0, 2, 5],
        },
        Effect::LTrim {
            db: 0,
            key: v("l"),
            start: 1,
            end: 4,
        },
        Effect::SAdd {
            db: 0,
            key: v("s"),
            members: vec![v("a")],
        },
        Effect::SRem {
            db: 0,
            key: v("s"),
            members: vec![v("a")],
        },
        Effect::ZAdd {
            db: 0,
            key: v("z"),
            members: vec![(-0.5, v("a"))],
        },
        Effect::ZRem {
            db: 0,
            key: v("z"),
            members: vec![v("a")],
        },
        Effect::FlushDb { db: 9 },
        Effect::FlushAll,
        Effect::SwapDb { a: 0, b: 15 },
    ]
}

fn op_corpus() -> Vec<Vec<u8>> {
    let real: Vec<(&str, Vec<u8>)> = samples()
        .into_iter()
        .map(|(name, op)| (name, op::encode(1_700_000_000_000, &op)))
        .collect();
    props::seeds(&props::corpus(DIR, "op", &real))
}

fn check(b: &[u8]) {
    // What the in-place reading of a lone string PUT must give: exactly what the full decode
    // gives for such a record, and nothing for any other record or any damaged one.
    let mut lone = None;
    match op::decode(b) {
        Ok(Record { now_ms, op }) => {
            assert_eq!(op::encode(now_ms, &op), b, "accepted bytes");
            if let Op::Effects(list) = &op
                && let [
                    Effect::Put {
                        db,
                        key,
                        value: Value::String(s),
                        expire_at_ms,
                    },
                ] = list.as_slice()
            {
                lone = Some((*db, key.clone(), s.clone(), *expire_at_ms));
            }
        }
        Err(DipperError::Corrupt {
            structure, offset, ..
        }) => {
            assert_eq!(structure, "dstore op record");
            assert!(offset <= b.len() as u64);
        }
        Err(e) => panic!("not a corruption: {e}"),
    }
    let read = op::lone_string_put(b).map(|(d, k, s, x)| (d, k.to_vec(), s.to_vec(), x));
    assert_eq!(read, lone, "the in-place reading of a lone string PUT");
}

fn bytes_list() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..8), 0..4)
}

/// What [`build`] makes an operation from: clock, code, byte strings, scores, a number, an
/// object size and block pairs.
type OpParts = (i64, u8, Vec<Vec<u8>>, Vec<f64>, i64, u64, Vec<(u32, u32)>);

/// Any operation the store logs.
fn any_op() -> impl Strategy<Value = OpParts> {
    (
        any::<i64>(),
        1u8..=13,
        bytes_list(),
        prop::collection::vec(any::<f64>().prop_filter("a number", |f| !f.is_nan()), 0..3),
        any::<i64>(),
        0u64..100_000,
        prop::collection::vec((any::<u32>(), 0u32..u32::MAX), 0..3),
    )
}

fn build<'a>(
    code: u8,
    items: &'a [Vec<u8>],
    scores: &[f64],
    n: i64,
    size: u64,
    blocks: &[(u32, u32)],
) -> Op<'a> {
    let key: &[u8] = items.first().map_or(b"key", Vec::as_slice);
    let refs: Vec<&[u8]> = items.iter().map(Vec::as_slice).collect();
    let pairs: Vec<(&[u8], &[u8])> = refs.chunks_exact(2).map(|c| (c[0], c[1])).collect();
    let nblocks = size.div_ceil(op::BLOCK_BYTES).max(1);
    match code {
        op::OP_SET => Op::Set {
            key,
            value: refs.get(1).copied().unwrap_or(b""),
            flags: [0, SET_NX, SET_XX][(n.unsigned_abs() % 3) as usize],
            expire_at: n,
        },
        op::OP_MSET => Op::MSet(pairs),
        op::OP_DEL => Op::Del(refs),
        op::OP_INCRBY => Op::IncrBy { key, delta: n },
        op::OP_APPEND => Op::Append {
            key,
            value: refs.last().copied().unwrap_or(b""),
        },
        op::OP_HSET => Op::HSet { key, pairs },
        op::OP_HDEL => Op::HDel { key, fields: refs },
        op::OP_ZADD => Op::ZAdd {
            key,
            members: scores.iter().map(|&s| (s, key)).collect(),
        },
        op::OP_ZREM => Op::ZRem { key, members: refs },
        op::OP_FLUSHALL => Op::FlushAll,
        op::OP_NOOP => Op::Noop(key),
        op::OP_EFFECTS => Op::Effects(
            vec![
                Effect::Del {
                    db: (n.unsigned_abs() % 16) as u8,
                    key: key.to_vec(),
                },
                Effect::Put {
                    db: 0,
                    key: key.to_vec(),
                    value: Value::List(items.to_vec()),
                    expire_at_ms: n,
                },
                Effect::ZAdd {
                    db: 1,
                    key: key.to_vec(),
                    members: scores.iter().map(|&s| (s, key.to_vec())).collect(),
                },
                Effect::LPop {
                    db: 2,
                    key: key.to_vec(),
                    left: n < 0,
                    count: size,
                },
                Effect::SwapDb {
                    a: (size % 16) as u8,
                    b: 3,
                },
            ]
            .into_iter()
            .take(1 + (size % 5) as usize)
            .collect(),
        ),
        _ => Op::OWrite {
            key,
            size: nblocks * op::BLOCK_BYTES,
            blocks: blocks
                .iter()
                .map(|&(i, b)| ((u64::from(i) % nblocks) as u32, b))
                .collect(),
        },
    }
}

/// A damaged `OP_EFFECTS` record is a corruption of the record naming the effect field and its
/// offset in the record: a bad tag, database, kind, flag, score, index order or count, a
/// truncation anywhere, a byte too many.
#[test]
fn damaged_effect_records_name_the_field() {
    let at_effect = 1 + 8 + 4; // code, clock, effect count
    let del = op::encode(5, &Op::Effects(vec![Effect::Del { db: 0, key: v("k") }]));
    let lpush = op::encode(
        5,
        &Op::Effects(vec![Effect::LPush {
            db: 0,
            key: v("k"),
            left: true,
            elems: vec![v("e")],
        }]),
    );
    let zadd = op::encode(
        5,
        &Op::Effects(vec![Effect::ZAdd {
            db: 0,
            key: v("k"),
            members: vec![(1.0, v("m"))],
        }]),
    );
    let put = op::encode(
        5,
        &Op::Effects(vec![Effect::Put {
            db: 0,
            key: v("k"),
            value: Value::String(v("v")),
            expire_at_ms: 0,
        }]),
    );
    let remat = op::encode(
        5,
        &Op::Effects(vec![Effect::LRemAt {
            db: 0,
            key: v("k"),
            indices: vec![1, 2],
        }]),
    );
    let head = at_effect + 1 + 1 + 4 + 1; // tag, db, key length, key
    let cases: Vec<(&str, Vec<u8>, usize, Vec<u8>)> = vec![
        ("tag", del.clone(), at_effect, vec![99]),
        ("tag", del.clone(), at_effect, vec![0]),
        ("db", del.clone(), at_effect + 1, vec![16]),
        ("key", del.clone(), at_effect + 2, vec![9, 0, 0, 0]),
        ("effects", del.clone(), 9, vec![0xff, 0xff, 0xff, 0x7f]),
        ("left", lpush.clone(), head, vec![2]),
        ("elements", lpush, head + 1, vec![0xff, 0xff, 0, 0]),
        (
            "score",
            zadd,
            head + 4,
            f64::NAN.to_bits().to_le_bytes().to_vec(),
        ),
        ("kind", put.clone(), head + 8, vec![4]),
        ("kind", put, head + 8, vec![7]),
        ("index", remat, head + 4 + 8, 1u64.to_le_bytes().to_vec()),
    ];
    for (field, good, at, bytes) in cases {
        let mut b = good.clone();
        b[at..at + bytes.len()].copy_from_slice(&bytes);
        match op::decode(&b) {
            Err(DipperError::Corrupt {
                structure,
                field: f,
                offset,
                ..
            }) => {
                assert_eq!(structure, "dstore op record", "{field}");
                assert_eq!(f, field, "damage at {at}");
                assert!(
                    offset >= at_effect as u64 - 4 && offset <= b.len() as u64,
                    "{field}: offset {offset} inside the effect list"
                );
            }
            other => panic!("{field} damaged at {at}: {other:?}"),
        }
    }
    let b = op::encode(5, &Op::Effects(every_effect()));
    for cut in 0..b.len() {
        assert!(
            matches!(op::decode(&b[..cut]), Err(DipperError::Corrupt { .. })),
            "cut at {cut}"
        );
    }
    let mut longer = b.clone();
    longer.push(0);
    assert!(matches!(
        op::decode(&longer),
        Err(DipperError::Corrupt { field: "end", .. })
    ));
}

#[test]
fn every_corpus_file_decodes() {
    for b in op_corpus() {
        check(&b);
    }
}

/// A store whose two root copies are both damaged opens to `StoreError::Corrupt`, naming the
/// root, not to a `Failed` string.
#[test]
fn a_damaged_store_opens_to_a_typed_corruption() {
    let config = Config {
        shards: 2,
        log_bytes: 4096 + 16 * 1024,
        slot_bytes: 512 * 1024,
        data_bytes: 256 * 1024,
        ..Config::default()
    };
    let sim = Arc::new(SimMedium::new(2 << 20, SimConfig::default()));
    let m = Pool::format(Arc::clone(&sim), Domain::Sim).expect("format");
    let pool = Pool::open_medium(m, &OpenOptions::default()).expect("open");
    let store = Store::create(pool, config.clone()).expect("create");
    store.close().expect("close");
    drop(store);
    let root_at = Pool::open_medium(Arc::clone(&sim), &OpenOptions::default())
        .expect("reopen")
        .region(dipper::layout::ROOT_REGION)
        .expect("a root region")
        .offset;
    let mut image = sim.durable_image();
    for copy in dipper::layout::ROOT_COPY_OFFSETS {
        image[root_at as usize + copy + 9] ^= 0x20;
    }
    let sim = Arc::new(SimMedium::from_image(image, SimConfig::default()));
    let pool = Pool::open_medium(sim, &OpenOptions::default()).expect("the pool opens");
    match Store::open(pool, config) {
        Err(StoreError::Corrupt(c)) => {
            assert_eq!(c.structure, "root", "{c}");
            assert!(
                c.offset >= root_at && c.offset < root_at + 128,
                "{c} (root at {root_at:#x})"
            );
        }
        Err(e) => panic!("not a typed corruption: {e:?}"),
        Ok(_) => panic!("a store with both root copies damaged opened"),
    }
}

proptest! {
    #![proptest_config(props::config(256))]

    #[test]
    fn arbitrary_bytes(b in props::bytes(64)) {
        check(&b);
    }

    #[test]
    fn damaged_records(b in props::mutated(op_corpus())) {
        check(&b);
    }

    #[test]
    fn lone_string_puts_are_read_in_place(
        now in any::<i64>(),
        db in 0u8..16,
        key in prop::collection::vec(any::<u8>(), 0..24),
        value in prop::collection::vec(any::<u8>(), 0..300),
        expire_at_ms in any::<i64>(),
    ) {
        let put = Effect::Put {
            db,
            key: key.clone(),
            value: Value::String(value.clone()),
            expire_at_ms,
        };
        let b = op::encode(now, &Op::Effects(vec![put]));
        let read = op::lone_string_put(&b).map(|(d, k, s, x)| (d, k.to_vec(), s.to_vec(), x));
        prop_assert_eq!(read, Some((db, key, value, expire_at_ms)));
        check(&b);
        // One byte more, or one less, and it is no longer read in place.
        let mut longer = b.clone();
        longer.push(0);
        prop_assert!(op::lone_string_put(&longer).is_none());
        prop_assert!(op::lone_string_put(&b[..b.len() - 1]).is_none());
    }

    #[test]
    fn every_op_round_trips((now, code, items, scores, n, size, blocks) in any_op()) {
        let op = build(code, &items, &scores, n, size, &blocks);
        let b = op::encode(now, &op);
        let back = op::decode(&b).expect("a record just encoded");
        prop_assert_eq!(back.now_ms, now);
        prop_assert_eq!(back.op, op);
    }
}
