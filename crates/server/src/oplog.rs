//! Operation records: how a replicated `kavach serve` logs each write, so that a backup, or a
//! primary rebuilding its store, replays exactly what was acknowledged.
//!
//! `docs/format/replication-ops.md` documents the encoding; `tests/format_doc.rs` checks it.

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
}

fn put_bytes(b: &mut Vec<u8>, x: &[u8]) {
    b.extend_from_slice(&(x.len() as u32).to_le_bytes());
    b.extend_from_slice(x);
}

fn put_list(b: &mut Vec<u8>, xs: &[Bytes]) {
    b.extend_from_slice(&(xs.len() as u32).to_le_bytes());
    for x in xs {
        put_bytes(b, x);
    }
}

fn put_pairs(b: &mut Vec<u8>, xs: &[(Bytes, Bytes)]) {
    b.extend_from_slice(&(xs.len() as u32).to_le_bytes());
    for (k, v) in xs {
        put_bytes(b, k);
        put_bytes(b, v);
    }
}

impl Op {
    /// Encode as a log record payload.
    pub fn encode(&self) -> Vec<u8> {
        use op_tags::*;
        let mut b = Vec::new();
        match self {
            Op::Set { key, value, opts } => {
                b.push(SET);
                put_bytes(&mut b, key);
                put_bytes(&mut b, value);
                let flags = u8::from(opts.expire_at_ms.is_some())
                    | (u8::from(opts.only_if_absent) << 1)
                    | (u8::from(opts.only_if_present) << 2);
                b.push(flags);
                b.extend_from_slice(&opts.expire_at_ms.unwrap_or(0).to_le_bytes());
            }
            Op::MSet(p) => {
                b.push(MSET);
                put_pairs(&mut b, p);
            }
            Op::Del(k) => {
                b.push(DEL);
                put_list(&mut b, k);
            }
            Op::IncrBy(k, d) => {
                b.push(INCRBY);
                put_bytes(&mut b, k);
                b.extend_from_slice(&d.to_le_bytes());
            }
            Op::Append(k, v) => {
                b.push(APPEND);
                put_bytes(&mut b, k);
                put_bytes(&mut b, v);
            }
            Op::HSet(k, p) => {
                b.push(HSET);
                put_bytes(&mut b, k);
                put_pairs(&mut b, p);
            }
            Op::HDel(k, f) => {
                b.push(HDEL);
                put_bytes(&mut b, k);
                put_list(&mut b, f);
            }
            Op::ZAdd(k, m) => {
                b.push(ZADD);
                put_bytes(&mut b, k);
                b.extend_from_slice(&(m.len() as u32).to_le_bytes());
                for (s, x) in m {
                    b.extend_from_slice(&s.to_le_bytes());
                    put_bytes(&mut b, x);
                }
            }
            Op::ZRem(k, m) => {
                b.push(ZREM);
                put_bytes(&mut b, k);
                put_list(&mut b, m);
            }
            Op::FlushAll => b.push(FLUSHALL),
        }
        b
    }

    /// Decode a record payload; the error names the field, its offset, and what was wrong.
    pub fn decode(p: &[u8]) -> std::result::Result<Op, String> {
        use op_tags::*;
        let mut r = Reader { p, at: 0 };
        let tag = r.u8("tag")?;
        let op = match tag {
            SET => {
                let key = r.bytes("key")?;
                let value = r.bytes("value")?;
                let flags = r.u8("flags")?;
                if flags > 7 {
                    return Err(format!(
                        "flags at byte {}: expected 0..=7, found {flags}",
                        r.at - 1
                    ));
                }
                let exp = i64::from_le_bytes(r.array("expire_at_ms")?);
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
            MSET => Op::MSet(r.pairs()?),
            DEL => Op::Del(r.list()?),
            INCRBY => Op::IncrBy(r.bytes("key")?, i64::from_le_bytes(r.array("delta")?)),
            APPEND => Op::Append(r.bytes("key")?, r.bytes("value")?),
            HSET => Op::HSet(r.bytes("key")?, r.pairs()?),
            HDEL => Op::HDel(r.bytes("key")?, r.list()?),
            ZADD => {
                let k = r.bytes("key")?;
                let n = r.count()?;
                let mut m = Vec::with_capacity(n.min(1024));
                for _ in 0..n {
                    let s = f64::from_le_bytes(r.array("score")?);
                    if s.is_nan() {
                        return Err(format!("score at byte {}: NaN", r.at - 8));
                    }
                    m.push((s, r.bytes("member")?));
                }
                Op::ZAdd(k, m)
            }
            ZREM => Op::ZRem(r.bytes("key")?, r.list()?),
            FLUSHALL => Op::FlushAll,
            t => return Err(format!("tag at byte 0: expected 1..=10, found {t}")),
        };
        if r.at != p.len() {
            return Err(format!(
                "record: expected its end at byte {}, found {} more bytes",
                r.at,
                p.len() - r.at
            ));
        }
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

struct Reader<'a> {
    p: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, what: &str, n: usize) -> std::result::Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.p.len());
        let Some(end) = end else {
            return Err(format!(
                "{what} at byte {}: expected {n} bytes, found {}",
                self.at,
                self.p.len() - self.at
            ));
        };
        let s = &self.p[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self, what: &str) -> std::result::Result<u8, String> {
        Ok(self.take(what, 1)?[0])
    }
    fn array<const N: usize>(&mut self, what: &str) -> std::result::Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(what, N)?);
        Ok(a)
    }
    fn count(&mut self) -> std::result::Result<usize, String> {
        Ok(u32::from_le_bytes(self.array("count")?) as usize)
    }
    fn bytes(&mut self, what: &str) -> std::result::Result<Bytes, String> {
        let n = u32::from_le_bytes(self.array(what)?) as usize;
        Ok(self.take(what, n)?.to_vec())
    }
    fn list(&mut self) -> std::result::Result<Vec<Bytes>, String> {
        let n = self.count()?;
        let mut v = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            v.push(self.bytes("item")?);
        }
        Ok(v)
    }
    fn pairs(&mut self) -> std::result::Result<Vec<(Bytes, Bytes)>, String> {
        let n = self.count()?;
        let mut v = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            v.push((self.bytes("field")?, self.bytes("value")?));
        }
        Ok(v)
    }
}
