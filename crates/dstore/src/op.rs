//! Logical operation records: what DStore writes to DIPPER's log before it executes a change.
//!
//! A record is `[u8 code][i64 now_ms][body]`; byte strings are `u32 length + bytes`, counts are
//! `u32`, numbers little-endian. The clock reading travels in the record because expiry makes
//! some outcomes depend on it, and replay must reach the same outcome. Decoding validates
//! every length against the record, so a damaged record is an error, never a panic or a huge
//! allocation. `docs/format/dstore-ops.md` lists the codes.

use dipper::Result;
use pmem::codec::{Reader, Writer};

/// SET.
pub const OP_SET: u8 = 1;
/// MSET.
pub const OP_MSET: u8 = 2;
/// DEL.
pub const OP_DEL: u8 = 3;
/// INCRBY.
pub const OP_INCRBY: u8 = 4;
/// APPEND.
pub const OP_APPEND: u8 = 5;
/// HSET.
pub const OP_HSET: u8 = 6;
/// HDEL.
pub const OP_HDEL: u8 = 7;
/// ZADD.
pub const OP_ZADD: u8 = 8;
/// ZREM.
pub const OP_ZREM: u8 = 9;
/// FLUSHALL.
pub const OP_FLUSHALL: u8 = 10;
/// A lock or unlock of a name (DStore's NOOP records; they order, they change nothing).
pub const OP_NOOP: u8 = 11;

/// Object write: an object's new size and the blocks of the data zone that now hold some of its
/// block indices (the data was written and persisted before this record).
pub const OP_OWRITE: u8 = 12;
/// The effects of one keyspace transaction (`model::Effect`s, encoded by
/// `model::encode_effects`), all durable together; each applies on the shard of its key (a
/// database-wide effect on every shard).
pub const OP_EFFECTS: u8 = 13;
/// Bytes of a data-zone block.
pub const BLOCK_BYTES: u64 = 4096;

/// SET flag: only if absent (NX).
pub const SET_NX: u8 = 1;
/// SET flag: only if present (XX).
pub const SET_XX: u8 = 2;

/// A decoded operation.
#[derive(Debug, Clone, PartialEq)]
pub enum Op<'a> {
    /// SET key value, with NX/XX flags and an absolute expiry (0: none).
    Set {
        /// Key.
        key: &'a [u8],
        /// Value.
        value: &'a [u8],
        /// [`SET_NX`] | [`SET_XX`].
        flags: u8,
        /// Expiry in ms since the epoch, 0 for none.
        expire_at: i64,
    },
    /// MSET.
    MSet(Vec<(&'a [u8], &'a [u8])>),
    /// DEL.
    Del(Vec<&'a [u8]>),
    /// INCRBY.
    IncrBy {
        /// Key.
        key: &'a [u8],
        /// Delta.
        delta: i64,
    },
    /// APPEND.
    Append {
        /// Key.
        key: &'a [u8],
        /// Bytes to append.
        value: &'a [u8],
    },
    /// HSET.
    HSet {
        /// Key.
        key: &'a [u8],
        /// Field/value pairs.
        pairs: Vec<(&'a [u8], &'a [u8])>,
    },
    /// HDEL.
    HDel {
        /// Key.
        key: &'a [u8],
        /// Fields.
        fields: Vec<&'a [u8]>,
    },
    /// ZADD.
    ZAdd {
        /// Key.
        key: &'a [u8],
        /// Score/member pairs.
        members: Vec<(f64, &'a [u8])>,
    },
    /// ZREM.
    ZRem {
        /// Key.
        key: &'a [u8],
        /// Members.
        members: Vec<&'a [u8]>,
    },
    /// FLUSHALL.
    FlushAll,
    /// Lock or unlock (no effect).
    Noop(&'a [u8]),
    /// Object write (creates the object if absent).
    OWrite {
        /// Object name.
        key: &'a [u8],
        /// Size after the write.
        size: u64,
        /// `(block index in the object, data-zone block)` pairs now in force.
        blocks: Vec<(u32, u32)>,
    },
    /// The effects of a keyspace transaction, in the order they were applied.
    Effects(Vec<model::Effect>),
}

/// An operation with the clock reading it was logged with.
#[derive(Debug, Clone, PartialEq)]
pub struct Record<'a> {
    /// Milliseconds since the epoch when the operation was logged.
    pub now_ms: i64,
    /// The operation.
    pub op: Op<'a>,
}

/// Encode a record.
pub fn encode(now_ms: i64, op: &Op<'_>) -> Vec<u8> {
    let mut w = Writer::with_capacity(64);
    let code = match op {
        Op::Set { .. } => OP_SET,
        Op::MSet(_) => OP_MSET,
        Op::Del(_) => OP_DEL,
        Op::IncrBy { .. } => OP_INCRBY,
        Op::Append { .. } => OP_APPEND,
        Op::HSet { .. } => OP_HSET,
        Op::HDel { .. } => OP_HDEL,
        Op::ZAdd { .. } => OP_ZADD,
        Op::ZRem { .. } => OP_ZREM,
        Op::FlushAll => OP_FLUSHALL,
        Op::Noop(_) => OP_NOOP,
        Op::OWrite { .. } => OP_OWRITE,
        Op::Effects(_) => OP_EFFECTS,
    };
    w.u8(code).i64(now_ms);
    match op {
        Op::Set {
            key,
            value,
            flags,
            expire_at,
        } => {
            w.len_bytes(key).len_bytes(value).u8(*flags).i64(*expire_at);
        }
        Op::MSet(pairs) => {
            w.count(pairs.len());
            for (k, v) in pairs {
                w.len_bytes(k).len_bytes(v);
            }
        }
        Op::Del(keys) => {
            w.count(keys.len());
            for k in keys {
                w.len_bytes(k);
            }
        }
        Op::IncrBy { key, delta } => {
            w.len_bytes(key).i64(*delta);
        }
        Op::Append { key, value } => {
            w.len_bytes(key).len_bytes(value);
        }
        Op::HSet { key, pairs } => {
            w.len_bytes(key).count(pairs.len());
            for (f, v) in pairs {
                w.len_bytes(f).len_bytes(v);
            }
        }
        Op::HDel { key, fields }
        | Op::ZRem {
            key,
            members: fields,
        } => {
            w.len_bytes(key).count(fields.len());
            for f in fields {
                w.len_bytes(f);
            }
        }
        Op::ZAdd { key, members } => {
            w.len_bytes(key).count(members.len());
            for (s, m) in members {
                w.u64(s.to_bits()).len_bytes(m);
            }
        }
        Op::FlushAll => {}
        Op::Noop(name) => {
            w.len_bytes(name);
        }
        Op::OWrite { key, size, blocks } => {
            w.len_bytes(key).u64(*size).count(blocks.len());
            for (i, b) in blocks {
                w.u32(*i).u32(*b);
            }
        }
        Op::Effects(effects) => {
            w.bytes(&model::encode_effects(effects));
        }
    }
    w.into_bytes()
}

/// An `OP_EFFECTS` record from effects already encoded one list at a time: `count` effects
/// whose encodings (each list of `model::encode_effects` without its leading count) are
/// concatenated in `encoded`. Equal to `encode(now_ms, &Op::Effects(all of them))`.
pub fn effects_record(now_ms: i64, count: usize, encoded: &[u8]) -> Vec<u8> {
    let mut w = Writer::with_capacity(13 + encoded.len());
    w.u8(OP_EFFECTS).i64(now_ms).count(count).bytes(encoded);
    w.into_bytes()
}

/// An `OP_EFFECTS` record whose list is one string PUT, read in place (see
/// [`model::lone_string_put`]): `(db, key, value, expire_at_ms)`. `None` for every other
/// record, damaged ones included: [`decode`] reads those and names what is wrong.
pub fn lone_string_put(b: &[u8]) -> Option<(model::Db, &[u8], &[u8], i64)> {
    let mut r = Reader::new("dstore op record", b);
    if r.u8("code").ok()? != OP_EFFECTS {
        return None;
    }
    r.i64("now").ok()?;
    model::lone_string_put(r.rest())
}

/// Decode a record, validating every length.
pub fn decode(b: &[u8]) -> Result<Record<'_>> {
    let mut r = Reader::new("dstore op record", b);
    let code = r.u8("code")?;
    let now_ms = r.i64("now")?;
    let op = match code {
        OP_SET => {
            let key = r.len_bytes("key")?;
            let value = r.len_bytes("value")?;
            let at = r.pos();
            let flags = r.u8("flags")?;
            if flags & !(SET_NX | SET_XX) != 0 || flags == SET_NX | SET_XX {
                return Err(r.invalid("flags", at, "NX, XX or neither", flags).into());
            }
            let expire_at = r.i64("expiry")?;
            Op::Set {
                key,
                value,
                flags,
                expire_at,
            }
        }
        OP_MSET => {
            let n = r.count("pair count", 8)?;
            let mut pairs = Vec::with_capacity(n);
            for _ in 0..n {
                pairs.push((r.len_bytes("key")?, r.len_bytes("value")?));
            }
            Op::MSet(pairs)
        }
        OP_DEL => {
            let n = r.count("key count", 4)?;
            let mut keys = Vec::with_capacity(n);
            for _ in 0..n {
                keys.push(r.len_bytes("key")?);
            }
            Op::Del(keys)
        }
        OP_INCRBY => Op::IncrBy {
            key: r.len_bytes("key")?,
            delta: r.i64("delta")?,
        },
        OP_APPEND => Op::Append {
            key: r.len_bytes("key")?,
            value: r.len_bytes("value")?,
        },
        OP_HSET => {
            let key = r.len_bytes("key")?;
            let n = r.count("pair count", 8)?;
            let mut pairs = Vec::with_capacity(n);
            for _ in 0..n {
                pairs.push((r.len_bytes("field")?, r.len_bytes("value")?));
            }
            Op::HSet { key, pairs }
        }
        OP_HDEL | OP_ZREM => {
            let key = r.len_bytes("key")?;
            let n = r.count("item count", 4)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(r.len_bytes("item")?);
            }
            if code == OP_HDEL {
                Op::HDel { key, fields: items }
            } else {
                Op::ZRem {
                    key,
                    members: items,
                }
            }
        }
        OP_ZADD => {
            let key = r.len_bytes("key")?;
            let n = r.count("member count", 12)?;
            let mut members = Vec::with_capacity(n);
            for _ in 0..n {
                let at = r.pos();
                let s = f64::from_bits(r.u64("score")?);
                if s.is_nan() {
                    return Err(r.invalid("score", at, "a number", "NaN").into());
                }
                members.push((s, r.len_bytes("member")?));
            }
            Op::ZAdd { key, members }
        }
        OP_FLUSHALL => Op::FlushAll,
        OP_NOOP => Op::Noop(r.len_bytes("name")?),
        OP_OWRITE => {
            let key = r.len_bytes("key")?;
            let size = r.u64("size")?;
            let n = r.count("block count", 8)?;
            let nblocks = size.div_ceil(BLOCK_BYTES);
            let mut blocks = Vec::with_capacity(n);
            for _ in 0..n {
                let at = r.pos();
                let i = r.u32("block index")?;
                let b = r.u32("block")?;
                if i as u64 >= nblocks || b == u32::MAX {
                    return Err(r
                        .invalid(
                            "block index",
                            at,
                            format!("below {nblocks}, with a real block"),
                            format!("index {i}, block {b}"),
                        )
                        .into());
                }
                blocks.push((i, b));
            }
            Op::OWrite { key, size, blocks }
        }
        OP_EFFECTS => {
            // The effect list runs to the end of the record; its errors name the record and
            // the offset in it.
            let at = r.pos();
            let effects = model::decode_effects(r.rest()).map_err(|e| {
                let mut e = e;
                e.structure = r.structure();
                e.offset = e.offset.saturating_add(at as u64);
                e
            })?;
            Op::Effects(effects)
        }
        other => {
            return Err(r
                .invalid("code", 0, format!("1..={OP_EFFECTS}"), other)
                .into());
        }
    };
    r.finish()?;
    Ok(Record { now_ms, op })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dipper::DipperError;

    fn samples() -> Vec<Op<'static>> {
        vec![
            Op::Set {
                key: b"k",
                value: b"v",
                flags: SET_NX,
                expire_at: 99,
            },
            Op::MSet(vec![(b"a", b"1"), (b"b", b"")]),
            Op::Del(vec![b"a", b"b"]),
            Op::IncrBy {
                key: b"n",
                delta: -5,
            },
            Op::Append {
                key: b"s",
                value: b"xyz",
            },
            Op::HSet {
                key: b"h",
                pairs: vec![(b"f", b"v")],
            },
            Op::HDel {
                key: b"h",
                fields: vec![b"f", b"g"],
            },
            Op::ZAdd {
                key: b"z",
                members: vec![(1.5, b"m"), (f64::NEG_INFINITY, b"n")],
            },
            Op::ZRem {
                key: b"z",
                members: vec![b"m"],
            },
            Op::FlushAll,
            Op::Noop(b"obj"),
            Op::OWrite {
                key: b"o",
                size: 9000,
                blocks: vec![(0, 7), (2, 3)],
            },
        ]
    }

    #[test]
    fn every_op_round_trips() {
        for op in samples() {
            let b = encode(1234, &op);
            let r = decode(&b).unwrap();
            assert_eq!(r.now_ms, 1234);
            assert_eq!(r.op, op);
        }
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        for op in samples() {
            let b = encode(1, &op);
            for cut in 0..b.len() {
                assert!(decode(&b[..cut]).is_err(), "{op:?} cut at {cut}");
            }
            let mut longer = b.clone();
            longer.push(0);
            assert!(decode(&longer).is_err());
        }
    }

    #[test]
    fn bad_fields_are_named() {
        let mut b = encode(1, &samples()[0]);
        b[0] = 200;
        assert!(matches!(
            decode(&b),
            Err(DipperError::Corrupt { field: "code", .. })
        ));
        let b = encode(
            1,
            &Op::Set {
                key: b"k",
                value: b"v",
                flags: SET_NX | SET_XX,
                expire_at: 0,
            },
        );
        assert!(matches!(
            decode(&b),
            Err(DipperError::Corrupt { field: "flags", .. })
        ));
        // A huge count is refused before anything is allocated for it.
        let mut b = vec![OP_DEL];
        b.extend_from_slice(&0i64.to_le_bytes());
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode(&b),
            Err(DipperError::Corrupt {
                field: "key count",
                ..
            })
        ));
        let mut b = encode(
            1,
            &Op::ZAdd {
                key: b"z",
                members: vec![(1.0, b"m")],
            },
        );
        let at = 1 + 8 + 4 + 1 + 4;
        b[at..at + 8].copy_from_slice(&f64::NAN.to_bits().to_le_bytes());
        assert!(matches!(
            decode(&b),
            Err(DipperError::Corrupt { field: "score", .. })
        ));
    }
}
