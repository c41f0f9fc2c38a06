//! The byte encoding of effect lists (`docs/format/effects.md`).
//!
//! A list is a `u32` count, then each effect as a tag byte and its fields. Byte strings are a
//! `u32` length and the bytes, counts are `u32`, numbers little-endian, scores their IEEE-754
//! bits. Decoding checks every length against the input, every database number, kind tag and
//! score, so damaged bytes give a [`FieldError`], never a panic or a huge allocation.

use crate::{DATABASES, Db, Effect, Kind, Value};
use pmem::codec::{FieldError, Reader, Writer};

const STRUCTURE: &str = "effect list";

/// The tag byte of each effect in the encoding (`docs/format/effects.md`).
pub mod tags {
    /// [`crate::Effect::Del`].
    pub const DEL: u8 = 1;
    /// [`crate::Effect::Put`].
    pub const PUT: u8 = 2;
    /// [`crate::Effect::Expire`].
    pub const EXPIRE: u8 = 3;
    /// [`crate::Effect::HSet`].
    pub const HSET: u8 = 4;
    /// [`crate::Effect::HDel`].
    pub const HDEL: u8 = 5;
    /// [`crate::Effect::LPush`].
    pub const LPUSH: u8 = 6;
    /// [`crate::Effect::LPop`].
    pub const LPOP: u8 = 7;
    /// [`crate::Effect::LSet`].
    pub const LSET: u8 = 8;
    /// [`crate::Effect::LInsert`].
    pub const LINSERT: u8 = 9;
    /// [`crate::Effect::LRemAt`].
    pub const LREMAT: u8 = 10;
    /// [`crate::Effect::LTrim`].
    pub const LTRIM: u8 = 11;
    /// [`crate::Effect::SAdd`].
    pub const SADD: u8 = 12;
    /// [`crate::Effect::SRem`].
    pub const SREM: u8 = 13;
    /// [`crate::Effect::ZAdd`].
    pub const ZADD: u8 = 14;
    /// [`crate::Effect::ZRem`].
    pub const ZREM: u8 = 15;
    /// [`crate::Effect::FlushDb`].
    pub const FLUSHDB: u8 = 16;
    /// [`crate::Effect::FlushAll`].
    pub const FLUSHALL: u8 = 17;
    /// [`crate::Effect::SwapDb`].
    pub const SWAPDB: u8 = 18;

    /// Every tag with its constant's name, in tag order (for the format document's test).
    pub const ALL: [(&str, u8); 18] = [
        ("DEL", DEL),
        ("PUT", PUT),
        ("EXPIRE", EXPIRE),
        ("HSET", HSET),
        ("HDEL", HDEL),
        ("LPUSH", LPUSH),
        ("LPOP", LPOP),
        ("LSET", LSET),
        ("LINSERT", LINSERT),
        ("LREMAT", LREMAT),
        ("LTRIM", LTRIM),
        ("SADD", SADD),
        ("SREM", SREM),
        ("ZADD", ZADD),
        ("ZREM", ZREM),
        ("FLUSHDB", FLUSHDB),
        ("FLUSHALL", FLUSHALL),
        ("SWAPDB", SWAPDB),
    ];
}

fn list(w: &mut Writer, items: &[Vec<u8>]) {
    w.count(items.len());
    for i in items {
        w.len_bytes(i);
    }
}

fn pairs(w: &mut Writer, items: &[(Vec<u8>, Vec<u8>)]) {
    w.count(items.len());
    for (a, b) in items {
        w.len_bytes(a).len_bytes(b);
    }
}

fn scored(w: &mut Writer, items: &[(f64, Vec<u8>)]) {
    w.count(items.len());
    for (s, m) in items {
        w.u64(s.to_bits()).len_bytes(m);
    }
}

fn value(w: &mut Writer, v: &Value) {
    w.u8(v.kind().tag());
    match v {
        Value::String(s) => {
            w.len_bytes(s);
        }
        Value::Hash(p) => pairs(w, p),
        Value::List(l) | Value::Set(l) => list(w, l),
        Value::ZSet(z) => scored(w, z),
    }
}

/// Encode a list of effects.
pub fn encode_effects(effects: &[Effect]) -> Vec<u8> {
    // Room for a typical SET's effect at once (a writer grown from empty reallocates 4 times).
    let mut w = Writer::with_capacity(128);
    encode_into(&mut w, effects);
    w.into_bytes()
}

/// Append the encoding of `effects` to `w`.
pub(crate) fn encode_into(w: &mut Writer, effects: &[Effect]) {
    use tags::*;
    w.count(effects.len());
    for e in effects {
        let head = |w: &mut Writer, tag: u8, db: Db, key: &[u8]| {
            w.u8(tag).u8(db).len_bytes(key);
        };
        match e {
            Effect::Del { db, key } => head(w, DEL, *db, key),
            Effect::Put {
                db,
                key,
                value: v,
                expire_at_ms,
            } => {
                head(w, PUT, *db, key);
                w.i64(*expire_at_ms);
                value(w, v);
            }
            Effect::Expire { db, key, at_ms } => {
                head(w, EXPIRE, *db, key);
                w.i64(*at_ms);
            }
            Effect::HSet { db, key, pairs: p } => {
                head(w, HSET, *db, key);
                pairs(w, p);
            }
            Effect::HDel { db, key, fields } => {
                head(w, HDEL, *db, key);
                list(w, fields);
            }
            Effect::LPush {
                db,
                key,
                left,
                elems,
            } => {
                head(w, LPUSH, *db, key);
                w.u8(u8::from(*left));
                list(w, elems);
            }
            Effect::LPop {
                db,
                key,
                left,
                count,
            } => {
                head(w, LPOP, *db, key);
                w.u8(u8::from(*left)).u64(*count);
            }
            Effect::LSet {
                db,
                key,
                index,
                elem,
            } => {
                head(w, LSET, *db, key);
                w.u64(*index).len_bytes(elem);
            }
            Effect::LInsert {
                db,
                key,
                index,
                elem,
            } => {
                head(w, LINSERT, *db, key);
                w.u64(*index).len_bytes(elem);
            }
            Effect::LRemAt { db, key, indices } => {
                head(w, LREMAT, *db, key);
                w.count(indices.len());
                for i in indices {
                    w.u64(*i);
                }
            }
            Effect::LTrim {
                db,
                key,
                start,
                end,
            } => {
                head(w, LTRIM, *db, key);
                w.u64(*start).u64(*end);
            }
            Effect::SAdd { db, key, members } => {
                head(w, SADD, *db, key);
                list(w, members);
            }
            Effect::SRem { db, key, members } => {
                head(w, SREM, *db, key);
                list(w, members);
            }
            Effect::ZAdd { db, key, members } => {
                head(w, ZADD, *db, key);
                scored(w, members);
            }
            Effect::ZRem { db, key, members } => {
                head(w, ZREM, *db, key);
                list(w, members);
            }
            Effect::FlushDb { db } => {
                w.u8(FLUSHDB).u8(*db);
            }
            Effect::FlushAll => {
                w.u8(FLUSHALL);
            }
            Effect::SwapDb { a, b } => {
                w.u8(SWAPDB).u8(*a).u8(*b);
            }
        }
    }
}

fn db(r: &mut Reader<'_>) -> Result<Db, FieldError> {
    let at = r.pos();
    let d = r.u8("db")?;
    if d as usize >= DATABASES {
        return Err(r.invalid("db", at, format!("below {DATABASES}"), d));
    }
    Ok(d)
}

fn bytes(r: &mut Reader<'_>, field: &'static str) -> Result<Vec<u8>, FieldError> {
    Ok(r.len_bytes(field)?.to_vec())
}

fn read_list(r: &mut Reader<'_>, field: &'static str) -> Result<Vec<Vec<u8>>, FieldError> {
    let n = r.count(field, 4)?;
    (0..n).map(|_| bytes(r, field)).collect()
}

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

fn read_pairs(r: &mut Reader<'_>) -> Result<Pairs, FieldError> {
    let n = r.count("pairs", 8)?;
    (0..n)
        .map(|_| Ok((bytes(r, "field")?, bytes(r, "value")?)))
        .collect()
}

fn score(r: &mut Reader<'_>) -> Result<f64, FieldError> {
    let at = r.pos();
    let s = f64::from_bits(r.u64("score")?);
    if s.is_nan() {
        return Err(r.invalid("score", at, "a number (not NaN)", "NaN"));
    }
    Ok(s)
}

fn read_scored(r: &mut Reader<'_>) -> Result<Vec<(f64, Vec<u8>)>, FieldError> {
    let n = r.count("members", 12)?;
    (0..n)
        .map(|_| Ok((score(r)?, bytes(r, "member")?)))
        .collect()
}

fn flag(r: &mut Reader<'_>, field: &'static str) -> Result<bool, FieldError> {
    let at = r.pos();
    match r.u8(field)? {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(r.invalid(field, at, "0 or 1", other)),
    }
}

fn read_value(r: &mut Reader<'_>) -> Result<Value, FieldError> {
    let at = r.pos();
    let tag = r.u8("kind")?;
    let Some(kind) = Kind::from_tag(tag) else {
        return Err(r.invalid("kind", at, "a kind tag (1, 2, 3, 5, 6)", tag));
    };
    Ok(match kind {
        Kind::String => Value::String(bytes(r, "string")?),
        Kind::Hash => Value::Hash(read_pairs(r)?),
        Kind::List => Value::List(read_list(r, "elements")?),
        Kind::Set => Value::Set(read_list(r, "members")?),
        Kind::ZSet => Value::ZSet(read_scored(r)?),
    })
}

/// Decode an effect list that fills `bytes` exactly.
pub fn decode_effects(bytes: &[u8]) -> Result<Vec<Effect>, FieldError> {
    let mut r = Reader::new(STRUCTURE, bytes);
    let effects = decode_from(&mut r)?;
    r.finish()?;
    Ok(effects)
}

/// The one effect of `bytes` when the list is exactly one [`Effect::Put`] of a string, read in
/// place as `(db, key, value, expire_at_ms)`: the common write, which a replay can then apply
/// without decoding it into owned buffers. `None` for any other list, and for one that
/// [`decode_effects`] would refuse (the caller decodes those in full and reports the damage).
pub fn lone_string_put(bytes: &[u8]) -> Option<(Db, &[u8], &[u8], i64)> {
    let mut r = Reader::new(STRUCTURE, bytes);
    if r.count("effects", 1).ok()? != 1 || r.u8("tag").ok()? != tags::PUT {
        return None;
    }
    // The fields in `decode_from`'s order for a PUT: db, key, expiry, then the value's kind
    // and bytes; nothing may follow.
    let d = db(&mut r).ok()?;
    let key = r.len_bytes("key").ok()?;
    let expire_at_ms = r.i64("expire_at_ms").ok()?;
    if r.u8("kind").ok()? != Kind::String.tag() {
        return None;
    }
    let value = r.len_bytes("string").ok()?;
    r.finish().ok()?;
    Some((d, key, value, expire_at_ms))
}

/// Decode an effect list at the reader's cursor (for a structure that embeds one: errors name
/// that structure and offsets within it).
pub fn decode_from(r: &mut Reader<'_>) -> Result<Vec<Effect>, FieldError> {
    use tags::*;
    let n = r.count("effects", 1)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let at = r.pos();
        let tag = r.u8("tag")?;
        let e = match tag {
            FLUSHDB => Effect::FlushDb { db: db(r)? },
            FLUSHALL => Effect::FlushAll,
            SWAPDB => Effect::SwapDb {
                a: db(r)?,
                b: db(r)?,
            },
            DEL..=ZREM => {
                let d = db(r)?;
                let key = bytes(r, "key")?;
                match tag {
                    DEL => Effect::Del { db: d, key },
                    PUT => {
                        let expire_at_ms = r.i64("expire_at_ms")?;
                        Effect::Put {
                            db: d,
                            key,
                            value: read_value(r)?,
                            expire_at_ms,
                        }
                    }
                    EXPIRE => Effect::Expire {
                        db: d,
                        key,
                        at_ms: r.i64("at_ms")?,
                    },
                    HSET => Effect::HSet {
                        db: d,
                        key,
                        pairs: read_pairs(r)?,
                    },
                    HDEL => Effect::HDel {
                        db: d,
                        key,
                        fields: read_list(r, "fields")?,
                    },
                    LPUSH => Effect::LPush {
                        db: d,
                        key,
                        left: flag(r, "left")?,
                        elems: read_list(r, "elements")?,
                    },
                    LPOP => Effect::LPop {
                        db: d,
                        key,
                        left: flag(r, "left")?,
                        count: r.u64("count")?,
                    },
                    LSET => Effect::LSet {
                        db: d,
                        key,
                        index: r.u64("index")?,
                        elem: bytes(r, "element")?,
                    },
                    LINSERT => Effect::LInsert {
                        db: d,
                        key,
                        index: r.u64("index")?,
                        elem: bytes(r, "element")?,
                    },
                    LREMAT => {
                        let n = r.count("indices", 8)?;
                        let mut indices = Vec::with_capacity(n);
                        for _ in 0..n {
                            let at = r.pos();
                            let i = r.u64("index")?;
                            if indices.last().is_some_and(|&p| p >= i) {
                                return Err(r.invalid(
                                    "index",
                                    at,
                                    "indices in ascending order, no repeats",
                                    i,
                                ));
                            }
                            indices.push(i);
                        }
                        Effect::LRemAt {
                            db: d,
                            key,
                            indices,
                        }
                    }
                    LTRIM => Effect::LTrim {
                        db: d,
                        key,
                        start: r.u64("start")?,
                        end: r.u64("end")?,
                    },
                    SADD => Effect::SAdd {
                        db: d,
                        key,
                        members: read_list(r, "members")?,
                    },
                    SREM => Effect::SRem {
                        db: d,
                        key,
                        members: read_list(r, "members")?,
                    },
                    ZADD => Effect::ZAdd {
                        db: d,
                        key,
                        members: read_scored(r)?,
                    },
                    _ => Effect::ZRem {
                        db: d,
                        key,
                        members: read_list(r, "members")?,
                    },
                }
            }
            other => {
                return Err(r.invalid("tag", at, "an effect tag (1..=18)", other));
            }
        };
        out.push(e);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> Vec<u8> {
        s.as_bytes().to_vec()
    }

    /// One of every effect, with values of every kind.
    pub(crate) fn every_effect() -> Vec<Effect> {
        vec![
            Effect::Del { db: 0, key: k("a") },
            Effect::Put {
                db: 1,
                key: k("s"),
                value: Value::String(k("v")),
                expire_at_ms: 42,
            },
            Effect::Put {
                db: 2,
                key: k("h"),
                value: Value::Hash(vec![(k("f"), k("v"))]),
                expire_at_ms: 0,
            },
            Effect::Put {
                db: 3,
                key: k("l"),
                value: Value::List(vec![k("x"), k("y")]),
                expire_at_ms: 0,
            },
            Effect::Put {
                db: 4,
                key: k("st"),
                value: Value::Set(vec![k("m")]),
                expire_at_ms: 0,
            },
            Effect::Put {
                db: 15,
                key: k("z"),
                value: Value::ZSet(vec![(1.5, k("m")), (f64::INFINITY, k("n"))]),
                expire_at_ms: 0,
            },
            Effect::Expire {
                db: 0,
                key: k("a"),
                at_ms: 7,
            },
            Effect::HSet {
                db: 0,
                key: k("h"),
                pairs: vec![(k("f"), k("v"))],
            },
            Effect::HDel {
                db: 0,
                key: k("h"),
                fields: vec![k("f")],
            },
            Effect::LPush {
                db: 0,
                key: k("l"),
                left: true,
                elems: vec![k("a"), k("b")],
            },
            Effect::LPop {
                db: 0,
                key: k("l"),
                left: false,
                count: 3,
            },
            Effect::LSet {
                db: 0,
                key: k("l"),
                index: 1,
                elem: k("q"),
            },
            Effect::LInsert {
                db: 0,
                key: k("l"),
                index: 0,
                elem: k("q"),
            },
            Effect::LRemAt {
                db: 0,
                key: k("l"),
                indices: vec![0, 2, 5],
            },
            Effect::LTrim {
                db: 0,
                key: k("l"),
                start: 1,
                end: 4,
            },
            Effect::SAdd {
                db: 0,
                key: k("s"),
                members: vec![k("a")],
            },
            Effect::SRem {
                db: 0,
                key: k("s"),
                members: vec![k("a")],
            },
            Effect::ZAdd {
                db: 0,
                key: k("z"),
                members: vec![(-0.5, k("a"))],
            },
            Effect::ZRem {
                db: 0,
                key: k("z"),
                members: vec![k("a")],
            },
            Effect::FlushDb { db: 9 },
            Effect::FlushAll,
            Effect::SwapDb { a: 0, b: 15 },
        ]
    }

    #[test]
    fn every_effect_round_trips() {
        let all = every_effect();
        let bytes = encode_effects(&all);
        assert_eq!(decode_effects(&bytes).unwrap(), all);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = encode_effects(&every_effect());
        for n in 0..bytes.len() {
            assert!(decode_effects(&bytes[..n]).is_err(), "prefix of {n} bytes");
        }
    }

    #[test]
    fn bad_fields_are_named() {
        let put = |db: u8| encode_effects(&[Effect::Del { db, key: k("a") }]);
        let mut b = put(0);
        b[5] = 16;
        let e = decode_effects(&b).unwrap_err();
        assert!(e.to_string().contains("db"), "{e}");
        let mut b = put(0);
        b[4] = 99;
        let e = decode_effects(&b).unwrap_err();
        assert!(e.to_string().contains("tag"), "{e}");
        let nan = encode_effects(&[Effect::ZAdd {
            db: 0,
            key: k("z"),
            members: vec![(1.0, k("m"))],
        }]);
        let mut b = nan.clone();
        let at = 4 + 1 + 1 + 4 + 1 + 4;
        b[at..at + 8].copy_from_slice(&f64::NAN.to_bits().to_le_bytes());
        let e = decode_effects(&b).unwrap_err();
        assert!(e.to_string().contains("score"), "{e}");
    }
}
