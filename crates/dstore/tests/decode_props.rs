//! Property tests of DStore's operation records: arbitrary bytes and damaged real encodings
//! decode to a record or a typed corruption, never a panic; every operation round-trips. And a
//! damaged store opens to a typed corruption, not a message string.

#[path = "../../pmem/tests/props/mod.rs"]
mod props;

use std::sync::Arc;

use dipper::DipperError;
use dstore::op::{self, Op, Record, SET_NX, SET_XX};
use dstore::{Config, Store, StoreError};
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
    match op::decode(b) {
        Ok(Record { now_ms, op }) => assert_eq!(op::encode(now_ms, &op), b, "accepted bytes"),
        Err(DipperError::Corrupt {
            structure, offset, ..
        }) => {
            assert_eq!(structure, "dstore op record");
            assert!(offset <= b.len() as u64);
        }
        Err(e) => panic!("not a corruption: {e}"),
    }
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
        1u8..=12,
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
    fn every_op_round_trips((now, code, items, scores, n, size, blocks) in any_op()) {
        let op = build(code, &items, &scores, n, size, &blocks);
        let b = op::encode(now, &op);
        let back = op::decode(&b).expect("a record just encoded");
        prop_assert_eq!(back.now_ms, now);
        prop_assert_eq!(back.op, op);
    }
}
