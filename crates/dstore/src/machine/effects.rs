//! The effects of `model` (`OP_EFFECTS` records) on a shard's keyspace, with databases.
//!
//! A keyspace entry's database is in bits 8..16 of its aux word (its type in bits 0..8); its
//! hash is the hash of the key alone, so `SWAPDB` only rewrites aux words. Per-database key
//! counts live in a block of 16 `u64`s whose offset is arena user word [`USER_DB_COUNTS`]
//! (0 until a key is first stored outside database 0): slot `d` counts database `d` for
//! `d >= 1`; database 0's count is the table's count minus the others, so the old operations,
//! which only touch database 0, keep every count right without knowing of it.
//!
//! [`apply_all`] runs one record's effects on one shard: each key effect on the shard of its
//! key, each database effect (`FlushDb`, `FlushAll`, `SwapDb`) on every shard. The live path
//! ([`crate::keyspace`]) runs [`apply`] on exactly the same inputs, after checking every
//! precondition, so an error here during replay means the log and the image disagree.

use super::{
    AUX_DB_SHIFT, AUX_TYPE_MASK, KEYSPACE_BUCKETS, Kv, NESTED_BUCKETS, TYPE_HASH, TYPE_LIST,
    TYPE_OBJECT, TYPE_SET, TYPE_STRING, TYPE_ZSET, USER_DB_COUNTS, USER_KEYSPACE, Z_CAP, Z_ITEMS,
    Z_LEN, db_of, expired, free_value, kind, list, object_of, zinsert, zremove,
};
use crate::table::{self, Entry, Found};
use dipper::{Arena, DipperError, Result};
use model::{DATABASES, Db, Effect, Kind, Value};

/// Bytes of the per-database count block.
pub const DB_COUNTS_BYTES: usize = 8 * DATABASES;

fn ks(a: &Arena) -> u64 {
    a.user(USER_KEYSPACE)
}

/// The aux word of a keyspace entry of type `ty` in database `db`.
pub fn aux(ty: u64, db: Db) -> u64 {
    ty | (u64::from(db) << AUX_DB_SHIFT)
}

/// The type tag of a model kind (the same numbers).
pub fn type_of(kind: Kind) -> u64 {
    u64::from(kind.tag())
}

/// The model kind of a type tag (`None` for objects and unknown tags).
pub fn kind_of(ty: u64) -> Option<Kind> {
    if ty == TYPE_OBJECT {
        return None;
    }
    u8::try_from(ty).ok().and_then(Kind::from_tag)
}

/// The type tag of a keyspace entry.
pub fn type_tag(a: &Arena, e: Entry) -> u64 {
    kind(a, e)
}

/// The database of a keyspace entry.
pub fn db(a: &Arena, e: Entry) -> Db {
    db_of(a, e)
}

/// Whether a keyspace entry is past its deadline at `now`.
pub fn is_expired(a: &Arena, e: Entry, now: i64) -> bool {
    expired(a, e, now)
}

/// Find `key` of database `db` (expired or not).
pub fn find(kv: &Kv, a: &Arena, db: Db, key: &[u8]) -> Option<Found> {
    table::find_where(a, ks(a), kv.hash(key), key, |e| db_of(a, e) == db)
}

/// Find a live key of database `db`.
pub fn lookup(kv: &Kv, a: &Arena, db: Db, key: &[u8], now: i64) -> Option<Entry> {
    let f = find(kv, a, db, key)?;
    (!expired(a, f.entry, now)).then_some(f.entry)
}

/// The count block, if any.
fn counts(a: &Arena) -> u64 {
    a.user(USER_DB_COUNTS)
}

/// Number of keys of database `db` in the shard (expired ones not yet removed included).
pub fn db_count(a: &Arena, db: Db) -> u64 {
    let c = counts(a);
    let at = |d: usize| {
        if c == 0 {
            0
        } else {
            a.get_u64(c as usize + 8 * d)
        }
    };
    if db == 0 {
        let others: u64 = (1..DATABASES).map(at).sum();
        table::count(a, ks(a)).saturating_sub(others)
    } else {
        at(db as usize)
    }
}

/// Count a key of database `db` in (`added`) or out. Database 0 is counted by the table; a key
/// elsewhere was inserted by [`insert`], which made the count block first.
pub(super) fn count_key(a: &mut Arena, db: Db, added: bool) {
    if db == 0 {
        return;
    }
    let c = counts(a) as usize;
    assert!(c != 0, "a key outside database 0 without a count block");
    let at = c + 8 * db as usize;
    let n = a.get_u64(at);
    a.put_u64(at, if added { n + 1 } else { n - 1 });
}

/// Make the count block if it is missing.
fn ensure_counts(a: &mut Arena) -> Result<()> {
    if counts(a) == 0 {
        let c = a.alloc(DB_COUNTS_BYTES)?;
        a.zero(c as usize, DB_COUNTS_BYTES);
        a.set_user(USER_DB_COUNTS, c);
    }
    Ok(())
}

/// Link a new keyspace entry of database `db` and count it.
fn insert(a: &mut Arena, db: Db, e: Entry) -> Result<()> {
    if db != 0 {
        ensure_counts(a)?;
    }
    let t = ks(a);
    table::insert(a, t, e)?;
    count_key(a, db, true);
    Ok(())
}

/// Remove a found key and everything its value points at.
fn remove(a: &mut Arena, f: Found) {
    super::remove(a, f);
}

/// Find a key for writing: an expired one is removed first (so it is absent).
fn find_for_write(kv: &Kv, a: &mut Arena, db: Db, key: &[u8], now: i64) -> Option<Found> {
    let f = find(kv, a, db, key)?;
    if expired(a, f.entry, now) {
        remove(a, f);
        return None;
    }
    Some(f)
}

fn mismatch(a: &Arena, f: Found, want: u64) -> DipperError {
    DipperError::Corrupt {
        structure: "dstore effect",
        offset: f.entry.off,
        field: "type",
        expected: format!("a key of type {want} (or none)"),
        found: kind(a, f.entry).to_string(),
    }
}

/// An empty collection of type `ty` (hash, list, set or sorted set) under `key` of `db`.
fn create(kv: &Kv, a: &mut Arena, db: Db, key: &[u8], ty: u64) -> Result<Found> {
    let words = if ty == TYPE_ZSET { 2 } else { 1 };
    let e = table::new_entry(a, kv.hash(key), key, 8 * words, aux(ty, db))?;
    let v = e.value_at(a);
    match ty {
        TYPE_LIST => {
            let r = list::create(a, 0)?;
            a.put_u64(v, r);
        }
        _ => {
            let t = table::create(a, NESTED_BUCKETS)?;
            a.put_u64(v, t);
        }
    }
    if ty == TYPE_ZSET {
        let z = a.alloc(Z_ITEMS + 4 * 16)?;
        a.put_u64(z as usize + Z_CAP, 4);
        a.put_u64(z as usize + Z_LEN, 0);
        a.put_u64(v + 8, z);
    }
    insert(a, db, e)?;
    Ok(find(kv, a, db, key).expect("just inserted"))
}

/// The collection of type `ty` under `key` for writing: existing, created (with `create`), or
/// `None` when absent.
fn collection(
    kv: &Kv,
    a: &mut Arena,
    db: Db,
    key: &[u8],
    now: i64,
    ty: u64,
    make: bool,
) -> Result<Option<Found>> {
    match find_for_write(kv, a, db, key, now) {
        Some(f) if kind(a, f.entry) != ty => Err(mismatch(a, f, ty)),
        Some(f) => Ok(Some(f)),
        None if make => Ok(Some(create(kv, a, db, key, ty)?)),
        None => Ok(None),
    }
}

/// Number of members, fields or elements of a collection entry.
pub fn collection_len(a: &Arena, e: Entry) -> u64 {
    let v = e.value_at(a);
    match kind(a, e) {
        TYPE_HASH | TYPE_SET | TYPE_ZSET => table::count(a, a.get_u64(v)),
        TYPE_LIST => list::len(a, a.get_u64(v)),
        _ => 0,
    }
}

/// Remove the key if its collection is empty (Redis keeps no empty collections).
fn drop_if_empty(kv: &Kv, a: &mut Arena, db: Db, key: &[u8]) {
    if let Some(f) = find(kv, a, db, key)
        && kind(a, f.entry) != TYPE_STRING
        && kind(a, f.entry) != TYPE_OBJECT
        && collection_len(a, f.entry) == 0
    {
        remove(a, f);
    }
}

fn hset(kv: &Kv, a: &mut Arena, t: u64, field: &[u8], value: &[u8]) -> Result<()> {
    let h = kv.hash(field);
    let old = table::find(a, t, h, field);
    let e = table::new_entry(a, h, field, value.len(), 0)?;
    let at = e.value_at(a);
    a.write(at, value);
    match old {
        Some(o) => table::replace(a, t, o, e),
        None => table::insert(a, t, e)?,
    }
    Ok(())
}

fn table_remove(kv: &Kv, a: &mut Arena, t: u64, member: &[u8]) -> Option<Entry> {
    let o = table::find(a, t, kv.hash(member), member)?;
    table::unlink(a, t, o);
    Some(o.entry)
}

fn sadd(kv: &Kv, a: &mut Arena, t: u64, member: &[u8]) -> Result<()> {
    let h = kv.hash(member);
    if table::find(a, t, h, member).is_none() {
        let e = table::new_entry(a, h, member, 0, 0)?;
        table::insert(a, t, e)?;
    }
    Ok(())
}

/// Add or rescore a member of the sorted set whose value starts at `v`.
fn zadd(kv: &Kv, a: &mut Arena, v: usize, score: f64, member: &[u8]) -> Result<()> {
    // -0.0 and 0.0 are one score, as in Redis; store one of them.
    let score = if score == 0.0 { 0.0 } else { score };
    let t = a.get_u64(v);
    let h = kv.hash(member);
    match table::find(a, t, h, member) {
        Some(o) => {
            let old = f64::from_bits(o.entry.aux(a));
            if old.to_bits() != score.to_bits() {
                let z = a.get_u64(v + 8) as usize;
                zremove(a, z, old, member);
                a.put_u64(o.entry.off as usize + table::E_AUX, score.to_bits());
                zinsert(a, v + 8, score, o.entry)?;
            }
        }
        None => {
            let e = table::new_entry(a, h, member, 0, score.to_bits())?;
            table::insert(a, t, e)?;
            zinsert(a, v + 8, score, e)?;
        }
    }
    Ok(())
}

fn zrem(kv: &Kv, a: &mut Arena, v: usize, member: &[u8]) {
    let t = a.get_u64(v);
    if let Some(o) = table::find(a, t, kv.hash(member), member) {
        let z = a.get_u64(v + 8) as usize;
        zremove(a, z, f64::from_bits(o.entry.aux(a)), member);
        table::unlink(a, t, o);
        table::free_entry(a, o.entry);
    }
}

/// Replace whatever `key` of `db` holds with `value` and the deadline `expire`.
fn put(kv: &Kv, a: &mut Arena, db: Db, key: &[u8], value: &Value, expire: i64) -> Result<()> {
    let old = find(kv, a, db, key);
    put_found(kv, a, db, key, value, expire, old)
}

/// [`Effect::Put`] of `key` in database `db` where `old` is what [`find`] gives for it in `a`
/// as it is now (a caller that has just looked the key up, with nothing changed since, saves
/// the second walk of its chain).
pub fn put_found(
    kv: &Kv,
    a: &mut Arena,
    db: Db,
    key: &[u8],
    value: &Value,
    expire: i64,
    old: Option<Found>,
) -> Result<()> {
    if let Value::String(s) = value {
        return put_string_found(kv, a, db, key, s, expire, old);
    }
    if let Some(f) = old {
        remove(a, f);
    }
    if value.is_empty_collection() {
        return Ok(());
    }
    let f = match value {
        // Handled above.
        Value::String(_) => return Ok(()),
        Value::Hash(pairs) => {
            let f = create(kv, a, db, key, TYPE_HASH)?;
            let t = a.get_u64(f.entry.value_at(a));
            for (k, v) in pairs {
                hset(kv, a, t, k, v)?;
            }
            f
        }
        Value::Set(members) => {
            let f = create(kv, a, db, key, TYPE_SET)?;
            let t = a.get_u64(f.entry.value_at(a));
            for m in members {
                sadd(kv, a, t, m)?;
            }
            f
        }
        Value::List(elems) => {
            let f = create(kv, a, db, key, TYPE_LIST)?;
            let slot = f.entry.value_at(a);
            for x in elems {
                list::push(a, slot, false, x)?;
            }
            f
        }
        Value::ZSet(members) => {
            let f = create(kv, a, db, key, TYPE_ZSET)?;
            let v = f.entry.value_at(a);
            for (s, m) in members {
                zadd(kv, a, v, *s, m)?;
            }
            f
        }
    };
    super::put_deadline(kv, a, f.entry, expire.max(0) as u64);
    Ok(())
}

/// [`put`] of a string value, from borrowed bytes: the same lookup, then
/// [`put_string_found`].
pub fn put_string(kv: &Kv, a: &mut Arena, db: Db, key: &[u8], s: &[u8], expire: i64) -> Result<()> {
    let old = find(kv, a, db, key);
    put_string_found(kv, a, db, key, s, expire, old)
}

/// [`put_found`] of a string value, from borrowed bytes: what a replay of a lone string PUT
/// ([`crate::op::lone_string_put`]) applies without decoding the record into an [`Effect`].
pub fn put_string_found(
    kv: &Kv,
    a: &mut Arena,
    db: Db,
    key: &[u8],
    s: &[u8],
    expire: i64,
    old: Option<Found>,
) -> Result<()> {
    // The most common write (SET of a string over a string of the same length, as in a
    // benchmark or a counter): the bytes are overwritten in the entry that holds them, no
    // block is allocated or freed and the chain is not touched. The entry ends up with the
    // same key, database, type, value and expiry as a new one would.
    if let Some(f) = old
        && f.entry.aux(a) == aux(TYPE_STRING, db)
        && f.entry.vlen(a) == s.len()
    {
        let at = f.entry.value_at(a);
        a.write(at, s);
        let expire = expire.max(0) as u64;
        if f.entry.expire(a) as u64 != expire {
            super::put_deadline(kv, a, f.entry, expire);
        }
        return Ok(());
    }
    // Otherwise a new entry takes the old one's place in its chain, with one lookup (the
    // database's count does not change when it replaces).
    let e = table::new_entry(a, kv.hash(key), key, s.len(), aux(TYPE_STRING, db))?;
    let at = e.value_at(a);
    a.write(at, s);
    super::put_deadline(kv, a, e, expire.max(0) as u64);
    match old {
        Some(f) => {
            super::free_value(a, f.entry);
            table::replace(a, ks(a), f, e);
        }
        None => insert(a, db, e)?,
    }
    Ok(())
}

/// Remove every key that `drop` selects, noting the data-zone blocks of removed objects.
fn remove_where(a: &mut Arena, drop: impl Fn(Db) -> bool, freed: &mut Vec<u32>) {
    let t = ks(a);
    table::retain(
        a,
        t,
        |a, e| !drop(db_of(a, e)),
        |a, e| {
            if let Ok((_, blocks)) = object_of(a, e) {
                freed.extend(blocks.into_iter().filter(|&b| b != super::HOLE));
            }
            count_key(a, db_of(a, e), false);
            free_value(a, e);
            table::free_entry(a, e);
        },
    );
}

/// FLUSHALL: an empty keyspace, no count block. Notes the blocks of removed objects. The arena
/// is emptied to the image of a new shard ([`Arena::reset`]), not only its blocks freed: a
/// shard keeps no trace of the most it ever held, so the operations that follow lay it out
/// exactly as in a new store (see `docs/format/dstore-ops.md`).
pub fn flush_all(a: &mut Arena, freed: &mut Vec<u32>) -> Result<()> {
    for e in table::entries(a, ks(a)) {
        if let Ok((_, blocks)) = object_of(a, e) {
            freed.extend(blocks.into_iter().filter(|&b| b != super::HOLE));
        }
    }
    // The table flags say how this store's tables grow: they outlive the flush.
    let flags = a.user(table::USER_TABLE_FLAGS);
    a.reset();
    a.set_user(table::USER_TABLE_FLAGS, flags);
    let t = table::create(a, KEYSPACE_BUCKETS)?;
    a.set_user(USER_KEYSPACE, t);
    Ok(())
}

fn swap_db(a: &mut Arena, x: Db, y: Db) -> Result<()> {
    if x == y {
        return Ok(());
    }
    let mut n: Vec<u64> = (0..DATABASES as u8).map(|d| db_count(a, d)).collect();
    let t = ks(a);
    for e in table::entries(a, t) {
        let d = db_of(a, e);
        if d == x || d == y {
            let other = if d == x { y } else { x };
            let ty = e.aux(a) & AUX_TYPE_MASK;
            a.put_u64(e.off as usize + table::E_AUX, aux(ty, other));
        }
    }
    n.swap(x as usize, y as usize);
    if counts(a) != 0 || n[1..].iter().any(|&c| c != 0) {
        ensure_counts(a)?;
        let c = counts(a) as usize;
        for (d, &k) in n.iter().enumerate().skip(1) {
            a.put_u64(c + 8 * d, k);
        }
    }
    Ok(())
}

/// Whether `e` changes shard `shard`.
pub fn concerns(kv: &Kv, e: &Effect, shard: usize) -> bool {
    match e.key() {
        Some((_, key)) => kv.shard_of(key) as usize == shard,
        None => true,
    }
}

/// Apply the effects of one record that concern `shard`, in order.
pub fn apply_all(
    kv: &Kv,
    shard: usize,
    a: &mut Arena,
    effects: &[Effect],
    now: i64,
    freed: &mut Vec<u32>,
) -> Result<()> {
    for e in effects.iter().filter(|e| concerns(kv, e, shard)) {
        apply(kv, a, e, now, freed)?;
    }
    Ok(())
}

fn bad_index(what: &str, index: u64, len: u64) -> DipperError {
    DipperError::Corrupt {
        structure: "dstore effect",
        offset: index,
        field: "index",
        expected: format!("{what} within a list of {len}"),
        found: index.to_string(),
    }
}

/// Apply one effect to the arena of the shard that owns its key (or, for a database effect, to
/// any shard). Blocks of objects it removes are added to `freed`.
pub fn apply(kv: &Kv, a: &mut Arena, e: &Effect, now: i64, freed: &mut Vec<u32>) -> Result<()> {
    match e {
        Effect::Del { db, key } => {
            if let Some(f) = find(kv, a, *db, key) {
                remove(a, f);
            }
        }
        Effect::Put {
            db,
            key,
            value,
            expire_at_ms,
        } => put(kv, a, *db, key, value, *expire_at_ms)?,
        Effect::Expire { db, key, at_ms } => {
            if let Some(f) = find_for_write(kv, a, *db, key, now) {
                super::put_deadline(kv, a, f.entry, (*at_ms).max(0) as u64);
            }
        }
        Effect::HSet { db, key, pairs } => {
            if let Some(f) = collection(kv, a, *db, key, now, TYPE_HASH, true)? {
                let t = a.get_u64(f.entry.value_at(a));
                for (k, v) in pairs {
                    hset(kv, a, t, k, v)?;
                }
            }
            drop_if_empty(kv, a, *db, key);
        }
        Effect::HDel { db, key, fields } => {
            if let Some(f) = collection(kv, a, *db, key, now, TYPE_HASH, false)? {
                let t = a.get_u64(f.entry.value_at(a));
                for k in fields {
                    if let Some(o) = table_remove(kv, a, t, k) {
                        table::free_entry(a, o);
                    }
                }
            }
            drop_if_empty(kv, a, *db, key);
        }
        Effect::LPush {
            db,
            key,
            left,
            elems,
        } => {
            if let Some(f) = collection(kv, a, *db, key, now, TYPE_LIST, true)? {
                let slot = f.entry.value_at(a);
                for x in elems {
                    list::push(a, slot, *left, x)?;
                }
            }
            drop_if_empty(kv, a, *db, key);
        }
        Effect::LPop {
            db,
            key,
            left,
            count,
        } => {
            if let Some(f) = collection(kv, a, *db, key, now, TYPE_LIST, false)? {
                list::pop(a, f.entry.value_at(a), *left, *count)?;
            }
            drop_if_empty(kv, a, *db, key);
        }
        Effect::LSet {
            db,
            key,
            index,
            elem,
        } => {
            let f = collection(kv, a, *db, key, now, TYPE_LIST, false)?;
            let Some(f) = f else {
                return Err(bad_index("an element", *index, 0));
            };
            let r = a.get_u64(f.entry.value_at(a));
            let n = list::len(a, r);
            if *index >= n {
                return Err(bad_index("an element", *index, n));
            }
            list::set(a, r, *index, elem)?;
        }
        Effect::LInsert {
            db,
            key,
            index,
            elem,
        } => {
            let n = match find_for_write(kv, a, *db, key, now) {
                Some(f) if kind(a, f.entry) == TYPE_LIST => {
                    list::len(a, a.get_u64(f.entry.value_at(a)))
                }
                _ => 0,
            };
            if *index > n {
                return Err(bad_index("a position", *index, n));
            }
            if let Some(f) = collection(kv, a, *db, key, now, TYPE_LIST, true)? {
                list::insert(a, f.entry.value_at(a), *index, elem)?;
            }
        }
        Effect::LRemAt { db, key, indices } => {
            if let Some(f) = collection(kv, a, *db, key, now, TYPE_LIST, false)? {
                let slot = f.entry.value_at(a);
                let n = list::len(a, a.get_u64(slot));
                if let Some(&last) = indices.last()
                    && (last >= n || indices.windows(2).any(|w| w[0] >= w[1]))
                {
                    return Err(bad_index("ascending indices", last, n));
                }
                list::remove_at(a, slot, indices)?;
            } else if let Some(&last) = indices.last() {
                return Err(bad_index("ascending indices", last, 0));
            }
            drop_if_empty(kv, a, *db, key);
        }
        Effect::LTrim {
            db,
            key,
            start,
            end,
        } => {
            if let Some(f) = collection(kv, a, *db, key, now, TYPE_LIST, false)? {
                list::trim(a, f.entry.value_at(a), *start, *end)?;
            }
            drop_if_empty(kv, a, *db, key);
        }
        Effect::SAdd { db, key, members } => {
            if let Some(f) = collection(kv, a, *db, key, now, TYPE_SET, true)? {
                let t = a.get_u64(f.entry.value_at(a));
                for m in members {
                    sadd(kv, a, t, m)?;
                }
            }
            drop_if_empty(kv, a, *db, key);
        }
        Effect::SRem { db, key, members } => {
            if let Some(f) = collection(kv, a, *db, key, now, TYPE_SET, false)? {
                let t = a.get_u64(f.entry.value_at(a));
                for m in members {
                    if let Some(o) = table_remove(kv, a, t, m) {
                        table::free_entry(a, o);
                    }
                }
            }
            drop_if_empty(kv, a, *db, key);
        }
        Effect::ZAdd { db, key, members } => {
            if let Some(f) = collection(kv, a, *db, key, now, TYPE_ZSET, true)? {
                let v = f.entry.value_at(a);
                for (s, m) in members {
                    zadd(kv, a, v, *s, m)?;
                }
            }
            drop_if_empty(kv, a, *db, key);
        }
        Effect::ZRem { db, key, members } => {
            if let Some(f) = collection(kv, a, *db, key, now, TYPE_ZSET, false)? {
                let v = f.entry.value_at(a);
                for m in members {
                    zrem(kv, a, v, m);
                }
            }
            drop_if_empty(kv, a, *db, key);
        }
        Effect::FlushDb { db } => {
            let d = *db;
            remove_where(a, |x| x == d, freed);
        }
        Effect::FlushAll => flush_all(a, freed)?,
        Effect::SwapDb { a: x, b: y } => swap_db(a, *x, *y)?,
    }
    Ok(())
}

/// Check the database bits of every keyspace entry and the count block against the entries.
pub fn validate(a: &Arena, entries: &[Entry]) -> Result<()> {
    let mut n = [0u64; DATABASES];
    for &e in entries {
        let d = e.aux(a) >> AUX_DB_SHIFT;
        if d >= DATABASES as u64 {
            return Err(DipperError::Corrupt {
                structure: "keyspace entry",
                offset: e.off,
                field: "aux",
                expected: format!("a database below {DATABASES} in bits 8..16, zero above"),
                found: format!("{:#x}", e.aux(a)),
            });
        }
        n[d as usize] += 1;
    }
    let c = counts(a);
    if c == 0 && n[1..].iter().any(|&k| k != 0) {
        return Err(DipperError::Corrupt {
            structure: "database counts",
            offset: 0,
            field: "user word",
            expected: "a count block when a key is outside database 0".into(),
            found: "0".into(),
        });
    }
    if c != 0 {
        let top = a.top() as u64;
        if c < dipper::arena::ARENA_HEADER as u64 || c + DB_COUNTS_BYTES as u64 > top {
            return Err(DipperError::Corrupt {
                structure: "database counts",
                offset: c,
                field: "block",
                expected: format!("inside the arena (top {top})"),
                found: c.to_string(),
            });
        }
        for (d, &want) in n.iter().enumerate().skip(1) {
            let got = a.get_u64(c as usize + 8 * d);
            if got != want {
                return Err(DipperError::Corrupt {
                    structure: "database counts",
                    offset: c + 8 * d as u64,
                    field: "count",
                    expected: format!("{want} keys in database {d}"),
                    found: got.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// Reads of a sorted set's score array (for the keyspace's views).
pub mod zset {
    use super::super::{Z_ITEMS, Z_LEN, zsearch};
    use super::*;

    /// The score array of a sorted-set entry.
    pub fn array(a: &Arena, e: Entry) -> usize {
        a.get_u64(e.value_at(a) + 8) as usize
    }

    /// Number of members.
    pub fn len(a: &Arena, z: usize) -> u64 {
        a.get_u64(z + Z_LEN)
    }

    /// Member `i` (< length) in ascending `(score, member)` order.
    pub fn item(a: &Arena, z: usize, i: u64) -> (f64, &[u8]) {
        let at = z + Z_ITEMS + i as usize * 16;
        let m = Entry {
            off: a.get_u64(at + 8),
        };
        (f64::from_bits(a.get_u64(at)), m.key(a))
    }

    /// A member's score.
    pub fn score(kv: &Kv, a: &Arena, e: Entry, member: &[u8]) -> Option<f64> {
        let t = a.get_u64(e.value_at(a));
        table::find(a, t, kv.hash(member), member).map(|o| f64::from_bits(o.entry.aux(a)))
    }

    /// A member's rank.
    pub fn rank(kv: &Kv, a: &Arena, e: Entry, member: &[u8]) -> Option<u64> {
        let s = score(kv, a, e, member)?;
        Some(zsearch(a, array(a, e), s, member) as u64)
    }

    /// The number of leading members for which `below` holds (the order is sorted, so for a
    /// predicate that is monotone in it, these are exactly the members it accepts).
    pub fn partition(a: &Arena, z: usize, below: impl Fn(f64, &[u8]) -> bool) -> u64 {
        let (mut lo, mut hi) = (0u64, len(a, z));
        while lo < hi {
            let mid = (lo + hi) / 2;
            let (s, m) = item(a, z, mid);
            if below(s, m) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}
