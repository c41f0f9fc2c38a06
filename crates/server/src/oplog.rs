//! Operation records: how a replicated `kavach serve` logs each write, so that a backup, or a
//! primary rebuilding its store, replays exactly what was acknowledged.
//!
//! `docs/format/replication-ops.md` documents the encoding; `tests/format_doc.rs` checks it.

use pmem::codec::{FieldError, Reader, Writer};

use crate::backend::{Backend, BackendError, BackendResult, Bytes, SetOptions};

/// A write, as logged.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// SET.
    Set {
        /// Key.
        key: Bytes,
        /// Value.
        value: Bytes,
        /// Options (absolute expiry, NX, XX).
        opts: SetOptions,
    },
    /// MSET.
    MSet(Vec<(Bytes, Bytes)>),
    /// DEL.
    Del(Vec<Bytes>),
    /// INCRBY and friends.
    IncrBy(Bytes, i64),
    /// APPEND.
    Append(Bytes, Bytes),
    /// HSET.
    HSet(Bytes, Vec<(Bytes, Bytes)>),
    /// HDEL.
    HDel(Bytes, Vec<Bytes>),
    /// ZADD.
    ZAdd(Bytes, Vec<(f64, Bytes)>),
    /// ZREM.
    ZRem(Bytes, Vec<Bytes>),
    /// FLUSHALL.
    FlushAll,
    /// What a command of the data model did: its effects, applied as one unit.
    Effects(Vec<model::Effect>),
}

/// Operation tags.
pub mod op_tags {
    /// SET.
    pub const SET: u8 = 1;
    /// MSET.
    pub const MSET: u8 = 2;
    /// DEL.
    pub const DEL: u8 = 3;
    /// INCRBY.
    pub const INCRBY: u8 = 4;
    /// APPEND.
    pub const APPEND: u8 = 5;
    /// HSET.
    pub const HSET: u8 = 6;
    /// HDEL.
    pub const HDEL: u8 = 7;
    /// ZADD.
    pub const ZADD: u8 = 8;
    /// ZREM.
    pub const ZREM: u8 = 9;
    /// FLUSHALL.
    pub const FLUSHALL: u8 = 10;
    /// A list of data-model effects (`docs/format/effects.md`).
    pub const EFFECTS: u8 = 11;
}

fn put_list(w: &mut Writer, xs: &[Bytes]) {
    w.count(xs.len());
    for x in xs {
        w.len_bytes(x);
    }
}

fn put_pairs(w: &mut Writer, xs: &[(Bytes, Bytes)]) {
    w.count(xs.len());
    for (k, v) in xs {
        w.len_bytes(k).len_bytes(v);
    }
}

/// Why an operation record failed to decode: the field, its offset in the record, and what
/// was wrong (see [`pmem::codec`]).
pub type DecodeError = FieldError;

impl Op {
    /// Encode as a log record payload.
    pub fn encode(&self) -> Vec<u8> {
        use op_tags::*;
        let mut w = Writer::new();
        match self {
            Op::Set { key, value, opts } => {
                let flags = u8::from(opts.expire_at_ms.is_some())
                    | (u8::from(opts.only_if_absent) << 1)
                    | (u8::from(opts.only_if_present) << 2);
                w.u8(SET)
                    .len_bytes(key)
                    .len_bytes(value)
                    .u8(flags)
                    .i64(opts.expire_at_ms.unwrap_or(0));
            }
            Op::MSet(p) => put_pairs(w.u8(MSET), p),
            Op::Del(k) => put_list(w.u8(DEL), k),
            Op::IncrBy(k, d) => {
                w.u8(INCRBY).len_bytes(k).i64(*d);
            }
            Op::Append(k, v) => {
                w.u8(APPEND).len_bytes(k).len_bytes(v);
            }
            Op::HSet(k, p) => put_pairs(w.u8(HSET).len_bytes(k), p),
            Op::HDel(k, f) => put_list(w.u8(HDEL).len_bytes(k), f),
            Op::ZAdd(k, m) => {
                w.u8(ZADD).len_bytes(k).count(m.len());
                for (s, x) in m {
                    w.u64(s.to_bits()).len_bytes(x);
                }
            }
            Op::ZRem(k, m) => put_list(w.u8(ZREM).len_bytes(k), m),
            Op::FlushAll => {
                w.u8(FLUSHALL);
            }
            Op::Effects(effects) => {
                w.u8(EFFECTS).bytes(&model::encode_effects(effects));
            }
        }
        w.into_bytes()
    }

    /// Decode a record payload; the error names the field, its offset, and what was wrong.
    pub fn decode(p: &[u8]) -> Result<Op, DecodeError> {
        use op_tags::*;
        let mut r = Reader::new("replication op record", p);
        let tag = r.u8("tag")?;
        let op = match tag {
            SET => {
                let key = r.len_bytes("key")?.to_vec();
                let value = r.len_bytes("value")?.to_vec();
                let at = r.pos();
                let flags = r.u8("flags")?;
                if flags > 7 {
                    return Err(r.invalid("flags", at, "0..=7", flags));
                }
                let exp = r.i64("expire_at_ms")?;
                Op::Set {
                    key,
                    value,
                    opts: SetOptions {
                        expire_at_ms: (flags & 1 != 0).then_some(exp),
                        only_if_absent: flags & 2 != 0,
                        only_if_present: flags & 4 != 0,
                    },
                }
            }
            MSET => Op::MSet(pairs(&mut r)?),
            DEL => Op::Del(list(&mut r)?),
            INCRBY => Op::IncrBy(r.len_bytes("key")?.to_vec(), r.i64("delta")?),
            APPEND => Op::Append(r.len_bytes("key")?.to_vec(), r.len_bytes("value")?.to_vec()),
            HSET => Op::HSet(r.len_bytes("key")?.to_vec(), pairs(&mut r)?),
            HDEL => Op::HDel(r.len_bytes("key")?.to_vec(), list(&mut r)?),
            ZADD => {
                let k = r.len_bytes("key")?.to_vec();
                let n = r.count("count", 12)?;
                let mut m = Vec::with_capacity(n);
                for _ in 0..n {
                    let at = r.pos();
                    let s = f64::from_bits(r.u64("score")?);
                    if s.is_nan() {
                        return Err(r.invalid("score", at, "a number", "NaN"));
                    }
                    m.push((s, r.len_bytes("member")?.to_vec()));
                }
                Op::ZAdd(k, m)
            }
            ZREM => Op::ZRem(r.len_bytes("key")?.to_vec(), list(&mut r)?),
            FLUSHALL => Op::FlushAll,
            EFFECTS => Op::Effects(model::decode_effects_from(&mut r)?),
            t => return Err(r.invalid("tag", 0, "1..=11", t)),
        };
        r.finish()?;
        Ok(op)
    }

    /// Apply to a store, ignoring the store's answer (replay: an operation that failed the
    /// first time, such as INCR on a hash, fails the same way again).
    pub fn apply(&self, b: &dyn Backend) -> BackendResult<()> {
        fn refs(v: &[Bytes]) -> Vec<&[u8]> {
            v.iter().map(Vec::as_slice).collect()
        }
        fn pair_refs(v: &[(Bytes, Bytes)]) -> Vec<(&[u8], &[u8])> {
            v.iter()
                .map(|(a, b)| (a.as_slice(), b.as_slice()))
                .collect()
        }
        let r = match self {
            Op::Set { key, value, opts } => b.set(key, value, opts).map(drop),
            Op::MSet(p) => b.mset(&pair_refs(p)),
            Op::Del(k) => b.del(&refs(k)).map(drop),
            Op::IncrBy(k, d) => b.incr_by(k, *d).map(drop),
            Op::Append(k, v) => b.append(k, v).map(drop),
            Op::HSet(k, p) => b.hset(k, &pair_refs(p)).map(drop),
            Op::HDel(k, f) => b.hdel(k, &refs(f)).map(drop),
            Op::ZAdd(k, m) => {
                let m: Vec<(f64, &[u8])> = m.iter().map(|(s, x)| (*s, x.as_slice())).collect();
                b.zadd(k, &m).map(drop)
            }
            Op::ZRem(k, m) => b.zrem(k, &refs(m)).map(drop),
            Op::FlushAll => b.flushall(),
            Op::Effects(effects) => {
                let Some(ks) = b.keyspace() else {
                    return Err(BackendError::Failed(
                        "an effects record for a store without the data model".into(),
                    ));
                };
                ks.transact(model::Scope::All, true, &mut |t| t.apply(effects.clone()))
                    .map_err(|e| match e {
                        model::ModelError::OutOfSpace(m) => BackendError::OutOfSpace(m),
                        other => BackendError::Failed(other.to_string()),
                    })
            }
        };
        match r {
            Err(
                BackendError::WrongType
                | BackendError::NotInteger
                | BackendError::Overflow
                | BackendError::TooLarge(_),
            ) => Ok(()),
            other => other,
        }
    }
}

fn list(r: &mut Reader<'_>) -> Result<Vec<Bytes>, DecodeError> {
    let n = r.count("count", 4)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(r.len_bytes("item")?.to_vec());
    }
    Ok(v)
}

fn pairs(r: &mut Reader<'_>) -> Result<Vec<(Bytes, Bytes)>, DecodeError> {
    let n = r.count("count", 8)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push((
            r.len_bytes("field")?.to_vec(),
            r.len_bytes("value")?.to_vec(),
        ));
    }
    Ok(v)
}
