//! DStore's state machine: the keyspace of a shard and the operations on it.
//!
//! Each shard's arena holds a keyspace table (user word 0). A key's entry carries its type in
//! the aux word and its expiry; a string's bytes are the entry's value; a hash's value is the
//! offset of a nested table of fields; a sorted set's value is the offsets of a nested table
//! of members (score in each member's aux word) and of a score-ordered array of
//! `(score, member entry)` pairs.
//!
//! A keyspace entry's aux word holds its type in bits 0..8 and its database (`SELECT`) in bits
//! 8..16, so a store written before databases existed (everything in database 0) reads the
//! same. Lists and sets, and the effects of `model` (`OP_EFFECTS`), are in [`effects`] and
//! [`list`].
//!
//! Every function here is deterministic in the arena and its arguments: the live path, the
//! checkpoint and recovery all run it.

pub mod effects;
pub mod list;

use crate::op::{self, Op, SET_NX, SET_XX};
use crate::table::{self, Entry, Found};
use dipper::{Arena, Machine, Result};
use std::cmp::Ordering;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// Arena user word holding the keyspace table.
pub const USER_KEYSPACE: usize = 0;
/// Buckets of a new shard's keyspace.
pub const KEYSPACE_BUCKETS: u64 = 64;
/// Buckets of a new hash or sorted-set member table.
pub const NESTED_BUCKETS: u64 = 4;

/// Type tag of a string.
pub const TYPE_STRING: u64 = 1;
/// Type tag of a hash.
pub const TYPE_HASH: u64 = 2;
/// Type tag of a sorted set.
pub const TYPE_ZSET: u64 = 3;
/// Type tag of an object: the value is its size (u64) and one data-zone block number (u32)
/// per 4 KiB of it, [`HOLE`] for a block never written (reads as zeros).
pub const TYPE_OBJECT: u64 = 4;
/// Type tag of a list: the value is the offset of its ring of element offsets ([`list`]).
pub const TYPE_LIST: u64 = 5;
/// Type tag of a set: the value is the offset of a nested table of members (empty values).
pub const TYPE_SET: u64 = 6;
/// Arena user word holding the offset of the per-database key counts (0: every key is in
/// database 0), see [`effects`].
pub const USER_DB_COUNTS: usize = 1;
/// Bits of the aux word holding the type.
pub const AUX_TYPE_MASK: u64 = 0xff;
/// Shift of the database number in the aux word (8 bits).
pub const AUX_DB_SHIFT: u32 = 8;
/// A block of an object that was never written.
pub const HOLE: u32 = u32::MAX;

/// Sorted array header: capacity, length; then `(score bits, member entry)` pairs.
const Z_CAP: usize = 0;
const Z_LEN: usize = 8;
const Z_ITEMS: usize = 16;

/// Why an operation had no effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpError {
    /// The key holds another type.
    WrongType,
    /// The value is not an integer.
    NotInteger,
    /// The increment overflows.
    Overflow,
}

/// What an operation did (summed over the shards it touched).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Keys or fields added or removed, or a new length.
    pub count: u64,
    /// A new integer value (INCRBY).
    pub int: i64,
    /// SET was carried out (NX/XX did not prevent it).
    pub done: bool,
    /// The operation had no effect because of this.
    pub error: Option<OpError>,
}

/// Bit of the DIPPER root's machine word: keys are placed in shards by [`PLACEMENT_SEED`], not
/// by the store's own seed. Every store made since has it; a store made before has not.
pub const MACHINE_FIXED_PLACEMENT: u32 = 1;
/// Bit of the DIPPER root's machine word: the store's tables rehash incrementally (each shard's
/// arena has [`table::TABLES_INCREMENTAL`]), so a table may hold a rehash block. Every store made
/// since has it. Binaries from before incremental rehash know only [`MACHINE_FIXED_PLACEMENT`]
/// and refuse to open a store with this bit, which they would misread; a store without it keeps
/// doubling its tables in one step, and stays readable by them.
pub const MACHINE_INCREMENTAL_REHASH: u32 = 2;
/// The machine-word bits this code knows.
pub const MACHINE_KNOWN: u32 = MACHINE_FIXED_PLACEMENT | MACHINE_INCREMENTAL_REHASH;
/// Hash seed of the key-to-shard placement of stores with [`MACHINE_FIXED_PLACEMENT`]: the same
/// in every store, so that any two stores with the same number of shards put each key in the
/// same shard, and one rebuilt from the operations of another grows each shard exactly as the
/// other did (the bucket hash inside a shard keeps the store's own seed).
pub const PLACEMENT_SEED: u64 = 0x6b61_7661_6368_2d31;

/// The keyspace machine.
#[derive(Debug, Clone)]
pub struct Kv {
    /// Hash seed of this store (the buckets of its tables).
    pub seed: u64,
    /// Number of shards.
    pub shards: usize,
    /// Keys are placed in shards by [`PLACEMENT_SEED`] (a store made before
    /// [`MACHINE_FIXED_PLACEMENT`] places them by `seed`).
    pub fixed_placement: bool,
    /// The store's tables rehash incrementally ([`MACHINE_INCREMENTAL_REHASH`]).
    pub incremental_rehash: bool,
    /// Deadline writes (a key given a non-zero deadline) by this machine and its clones (the
    /// store's, the engine's, the checkpoint's), counted after the write. The active-expiry
    /// walk stops walking a keyspace where a whole pass found no deadline while this count
    /// stood still ([`crate::store::Store`]'s `expired`). Kept in DRAM only.
    pub(crate) deadline_writes: Arc<AtomicU64>,
}

impl Kv {
    /// The machine of a new store with hash seed `seed`: keys placed by [`PLACEMENT_SEED`].
    pub fn new(seed: u64, shards: usize) -> Kv {
        Kv {
            seed,
            shards,
            fixed_placement: true,
            incremental_rehash: true,
            deadline_writes: Arc::default(),
        }
    }

    /// The machine of a store with hash seed `seed` whose DIPPER root holds machine word
    /// `word`, or why the word cannot be this machine's.
    pub fn with_word(seed: u64, shards: usize, word: u32) -> std::result::Result<Kv, String> {
        if word & !MACHINE_KNOWN != 0 {
            return Err(format!(
                "{word:#x}: bits {:#x} are not known to this version",
                word & !MACHINE_KNOWN
            ));
        }
        Ok(Kv {
            seed,
            shards,
            fixed_placement: word & MACHINE_FIXED_PLACEMENT != 0,
            incremental_rehash: word & MACHINE_INCREMENTAL_REHASH != 0,
            deadline_writes: Arc::default(),
        })
    }

    /// The machine word a store of this machine keeps in its DIPPER root.
    pub fn word(&self) -> u32 {
        let mut w = 0;
        if self.fixed_placement {
            w |= MACHINE_FIXED_PLACEMENT;
        }
        if self.incremental_rehash {
            w |= MACHINE_INCREMENTAL_REHASH;
        }
        w
    }

    /// Hash of a key.
    pub fn hash(&self, key: &[u8]) -> u64 {
        table::hash(self.seed, key)
    }

    /// Shard of a key.
    pub fn shard_of(&self, key: &[u8]) -> u16 {
        let seed = if self.fixed_placement {
            PLACEMENT_SEED
        } else {
            self.seed
        };
        ((table::hash(seed, key) >> 40) % self.shards as u64) as u16
    }
}

fn ks(a: &Arena) -> u64 {
    a.user(USER_KEYSPACE)
}

fn kind(a: &Arena, e: Entry) -> u64 {
    e.aux(a) & 0xff
}

/// The database of a keyspace entry.
fn db_of(a: &Arena, e: Entry) -> u8 {
    (e.aux(a) >> AUX_DB_SHIFT) as u8
}

fn expired(a: &Arena, e: Entry, now: i64) -> bool {
    let x = e.expire(a);
    x != 0 && x <= now
}

/// Find a live (unexpired) key of database 0 for reading.
pub fn lookup(kv: &Kv, a: &Arena, key: &[u8], now: i64) -> Option<Entry> {
    let f = effects::find(kv, a, 0, key)?;
    (!expired(a, f.entry, now)).then_some(f.entry)
}

/// Free what a key's value points at (nested tables, sorted arrays).
fn free_value(a: &mut Arena, e: Entry) {
    let v = e.value_at(a);
    match kind(a, e) {
        TYPE_HASH => {
            let t = a.get_u64(v);
            table::destroy(a, t, |_, _| {});
        }
        TYPE_ZSET => {
            let t = a.get_u64(v);
            let z = a.get_u64(v + 8);
            table::destroy(a, t, |_, _| {});
            let cap = a.get_u64(z as usize + Z_CAP) as usize;
            a.free(z, Z_ITEMS + cap * 16);
        }
        TYPE_SET => {
            let t = a.get_u64(v);
            table::destroy(a, t, |_, _| {});
        }
        TYPE_LIST => list::destroy(a, a.get_u64(v)),
        _ => {}
    }
}

/// Remove a found key entirely.
fn remove(a: &mut Arena, f: Found) {
    let t = ks(a);
    effects::count_key(a, db_of(a, f.entry), false);
    table::unlink(a, t, f);
    free_value(a, f.entry);
    table::free_entry(a, f.entry);
}

/// Find a key for writing; an expired key is removed first (so it counts as absent).
fn find_for_write(kv: &Kv, a: &mut Arena, key: &[u8], now: i64) -> Option<Found> {
    let f = effects::find(kv, a, 0, key)?;
    if expired(a, f.entry, now) {
        remove(a, f);
        return None;
    }
    Some(f)
}

/// Write the deadline word of entry `e` (0: none). A non-zero deadline is counted in
/// [`Kv::deadline_writes`] after the write, which wakes a resting active-expiry walk.
pub(crate) fn put_deadline(kv: &Kv, a: &mut Arena, e: Entry, expire: u64) {
    a.put_u64(e.off as usize + table::E_EXPIRE, expire);
    if expire != 0 {
        kv.deadline_writes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Store a string value for `key`, replacing whatever was there.
fn put_string(
    kv: &Kv,
    a: &mut Arena,
    key: &[u8],
    value: &[u8],
    expire: i64,
    old: Option<Found>,
) -> Result<()> {
    let e = table::new_entry(a, kv.hash(key), key, value.len(), TYPE_STRING)?;
    let at = e.value_at(a);
    a.write(at, value);
    put_deadline(kv, a, e, expire as u64);
    match old {
        Some(f) => {
            free_value(a, f.entry);
            table::replace(a, ks(a), f, e);
        }
        None => table::insert(a, ks(a), e)?,
    }
    Ok(())
}

/// Parse a Redis integer: optional '-', digits, no leading zeros, no spaces.
pub fn parse_int(b: &[u8]) -> Option<i64> {
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    let s = std::str::from_utf8(b).ok()?;
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    if digits.len() > 1 && digits.starts_with('0') || s == "-0" {
        return None;
    }
    s.parse().ok()
}

fn zcmp(a: &Arena, s1: f64, m1: &[u8], item: usize) -> Ordering {
    let s2 = f64::from_bits(a.get_u64(item));
    let e2 = Entry {
        off: a.get_u64(item + 8),
    };
    s1.partial_cmp(&s2)
        .unwrap_or(Ordering::Equal)
        .then_with(|| m1.cmp(e2.key(a)))
}

/// Index of the first item not less than `(score, member)`.
fn zsearch(a: &Arena, z: usize, score: f64, member: &[u8]) -> usize {
    let (mut lo, mut hi) = (0usize, a.get_u64(z + Z_LEN) as usize);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if zcmp(a, score, member, z + Z_ITEMS + mid * 16) == Ordering::Greater {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

fn zinsert(a: &mut Arena, zslot: usize, score: f64, e: Entry) -> Result<()> {
    let mut z = a.get_u64(zslot) as usize;
    let (cap, len) = (a.get_u64(z + Z_CAP) as usize, a.get_u64(z + Z_LEN) as usize);
    if len == cap {
        let ncap = cap * 2;
        let nz = a.alloc(Z_ITEMS + ncap * 16)? as usize;
        a.put_u64(nz + Z_CAP, ncap as u64);
        a.put_u64(nz + Z_LEN, len as u64);
        a.copy_within(z + Z_ITEMS, len * 16, nz + Z_ITEMS);
        a.free(z as u64, Z_ITEMS + cap * 16);
        a.put_u64(zslot, nz as u64);
        z = nz;
    }
    let i = zsearch(a, z, score, e.key(a));
    let at = z + Z_ITEMS + i * 16;
    a.copy_within(at, (len - i) * 16, at + 16);
    a.put_u64(at, score.to_bits());
    a.put_u64(at + 8, e.off);
    a.put_u64(z + Z_LEN, len as u64 + 1);
    Ok(())
}

fn zremove(a: &mut Arena, z: usize, score: f64, member: &[u8]) {
    let len = a.get_u64(z + Z_LEN) as usize;
    let i = zsearch(a, z, score, member);
    assert!(i < len, "sorted-set member missing from its score array");
    let at = z + Z_ITEMS + i * 16;
    a.copy_within(at + 16, (len - i - 1) * 16, at);
    a.put_u64(z + Z_LEN, len as u64 - 1);
}

/// Create an empty value of `ty` under `key`.
fn create_nested(kv: &Kv, a: &mut Arena, key: &[u8], ty: u64) -> Result<Found> {
    let words = if ty == TYPE_ZSET { 2 } else { 1 };
    let e = table::new_entry(a, kv.hash(key), key, 8 * words, ty)?;
    let t = table::create(a, NESTED_BUCKETS)?;
    let v = e.value_at(a);
    a.put_u64(v, t);
    if ty == TYPE_ZSET {
        let z = a.alloc(Z_ITEMS + 4 * 16)?;
        a.put_u64(z as usize + Z_CAP, 4);
        a.put_u64(z as usize + Z_LEN, 0);
        a.put_u64(v + 8, z);
    }
    let ks = ks(a);
    table::insert(a, ks, e)?;
    Ok(effects::find(kv, a, 0, key).expect("just inserted"))
}

/// A nested value of type `ty` for writing: existing, created, or a type error.
fn nested_for_write(
    kv: &Kv,
    a: &mut Arena,
    key: &[u8],
    ty: u64,
    now: i64,
    create: bool,
) -> Result<Option<std::result::Result<Found, OpError>>> {
    match find_for_write(kv, a, key, now) {
        Some(f) if kind(a, f.entry) != ty => Ok(Some(Err(OpError::WrongType))),
        Some(f) => Ok(Some(Ok(f))),
        None if create => Ok(Some(Ok(create_nested(kv, a, key, ty)?))),
        None => Ok(None),
    }
}

/// Is `key` a live object? Key-value writes refuse objects (they would orphan its blocks).
fn is_object(kv: &Kv, a: &Arena, key: &[u8], now: i64) -> bool {
    lookup(kv, a, key, now).is_some_and(|e| kind(a, e) == TYPE_OBJECT)
}

/// An object's size and blocks.
pub fn object_of(a: &Arena, e: Entry) -> std::result::Result<(u64, Vec<u32>), OpError> {
    if kind(a, e) != TYPE_OBJECT {
        return Err(OpError::WrongType);
    }
    let v = e.value_at(a);
    let size = a.get_u64(v);
    let n = size.div_ceil(op::BLOCK_BYTES) as usize;
    Ok((size, (0..n).map(|i| a.get_u32(v + 8 + 4 * i)).collect()))
}

impl Kv {
    /// The nested value of type `ty` under `key` for writing (created if `create`), or `None`
    /// with `out.error` set on a type clash (or nothing to do).
    fn nested(
        &self,
        a: &mut Arena,
        key: &[u8],
        ty: u64,
        now: i64,
        create: bool,
        out: &mut Outcome,
    ) -> Result<Option<Found>> {
        Ok(match nested_for_write(self, a, key, ty, now, create)? {
            Some(Ok(f)) => Some(f),
            Some(Err(e)) => {
                out.error = Some(e);
                None
            }
            None => None,
        })
    }

    fn apply_op(
        &self,
        shard: usize,
        a: &mut Arena,
        rec: &op::Record<'_>,
        out: &mut Outcome,
    ) -> Result<()> {
        let now = rec.now_ms;
        let mine = |k: &[u8]| self.shard_of(k) as usize == shard;
        let object_keys: Vec<&[u8]> = match &rec.op {
            Op::Set { key, .. }
            | Op::IncrBy { key, .. }
            | Op::Append { key, .. }
            | Op::HSet { key, .. }
            | Op::ZAdd { key, .. } => vec![key],
            Op::MSet(pairs) => pairs.iter().map(|p| p.0).collect(),
            _ => Vec::new(),
        };
        if object_keys
            .iter()
            .any(|k| mine(k) && is_object(self, a, k, now))
        {
            out.error = Some(OpError::WrongType);
            return Ok(());
        }
        match &rec.op {
            Op::Set {
                key,
                value,
                flags,
                expire_at,
            } => {
                if !mine(key) {
                    return Ok(());
                }
                let f = find_for_write(self, a, key, now);
                if (flags & SET_NX != 0 && f.is_some()) || (flags & SET_XX != 0 && f.is_none()) {
                    return Ok(());
                }
                put_string(self, a, key, value, *expire_at, f)?;
                out.done = true;
            }
            Op::MSet(pairs) => {
                for (k, v) in pairs.iter().filter(|(k, _)| mine(k)) {
                    let f = find_for_write(self, a, k, now);
                    put_string(self, a, k, v, 0, f)?;
                }
                out.done = true;
            }
            Op::Del(keys) => {
                for k in keys.iter().filter(|k| mine(k)) {
                    if let Some(f) = find_for_write(self, a, k, now) {
                        remove(a, f);
                        out.count += 1;
                    }
                }
            }
            Op::IncrBy { key, delta } => {
                if !mine(key) {
                    return Ok(());
                }
                let f = find_for_write(self, a, key, now);
                let (cur, expire) = match f {
                    None => (0, 0),
                    Some(f) if kind(a, f.entry) != TYPE_STRING => {
                        out.error = Some(OpError::WrongType);
                        return Ok(());
                    }
                    Some(f) => match parse_int(f.entry.value(a)) {
                        Some(v) => (v, f.entry.expire(a)),
                        None => {
                            out.error = Some(OpError::NotInteger);
                            return Ok(());
                        }
                    },
                };
                let Some(new) = cur.checked_add(*delta) else {
                    out.error = Some(OpError::Overflow);
                    return Ok(());
                };
                put_string(self, a, key, new.to_string().as_bytes(), expire, f)?;
                out.int = new;
            }
            Op::Append { key, value } => {
                if !mine(key) {
                    return Ok(());
                }
                let f = find_for_write(self, a, key, now);
                let mut joined = Vec::new();
                let mut expire = 0;
                if let Some(f) = f {
                    if kind(a, f.entry) != TYPE_STRING {
                        out.error = Some(OpError::WrongType);
                        return Ok(());
                    }
                    joined.extend_from_slice(f.entry.value(a));
                    expire = f.entry.expire(a);
                }
                joined.extend_from_slice(value);
                put_string(self, a, key, &joined, expire, f)?;
                out.count = joined.len() as u64;
            }
            Op::HSet { key, pairs } => {
                if !mine(key) {
                    return Ok(());
                }
                let Some(f) = self.nested(a, key, TYPE_HASH, now, true, out)? else {
                    return Ok(());
                };
                let t = a.get_u64(f.entry.value_at(a));
                for (field, value) in pairs {
                    let h = self.hash(field);
                    let old = table::find(a, t, h, field);
                    let e = table::new_entry(a, h, field, value.len(), 0)?;
                    let at = e.value_at(a);
                    a.write(at, value);
                    match old {
                        Some(o) => table::replace(a, t, o, e),
                        None => {
                            table::insert(a, t, e)?;
                            out.count += 1;
                        }
                    }
                }
            }
            Op::HDel { key, fields } => {
                if !mine(key) {
                    return Ok(());
                }
                let Some(f) = self.nested(a, key, TYPE_HASH, now, false, out)? else {
                    return Ok(());
                };
                let t = a.get_u64(f.entry.value_at(a));
                for field in fields {
                    if let Some(o) = table::find(a, t, self.hash(field), field) {
                        table::unlink(a, t, o);
                        table::free_entry(a, o.entry);
                        out.count += 1;
                    }
                }
                if table::count(a, t) == 0 {
                    remove(a, f);
                }
            }
            Op::ZAdd { key, members } => {
                if !mine(key) {
                    return Ok(());
                }
                let Some(f) = self.nested(a, key, TYPE_ZSET, now, true, out)? else {
                    return Ok(());
                };
                let v = f.entry.value_at(a);
                let t = a.get_u64(v);
                for (score, member) in members {
                    let h = self.hash(member);
                    match table::find(a, t, h, member) {
                        Some(o) => {
                            let old = f64::from_bits(o.entry.aux(a));
                            if old != *score || old.to_bits() != score.to_bits() {
                                let z = a.get_u64(v + 8) as usize;
                                zremove(a, z, old, member);
                                a.put_u64(o.entry.off as usize + table::E_AUX, score.to_bits());
                                zinsert(a, v + 8, *score, o.entry)?;
                            }
                        }
                        None => {
                            let e = table::new_entry(a, h, member, 0, score.to_bits())?;
                            table::insert(a, t, e)?;
                            zinsert(a, v + 8, *score, e)?;
                            out.count += 1;
                        }
                    }
                }
            }
            Op::ZRem { key, members } => {
                if !mine(key) {
                    return Ok(());
                }
                let Some(f) = self.nested(a, key, TYPE_ZSET, now, false, out)? else {
                    return Ok(());
                };
                let v = f.entry.value_at(a);
                let t = a.get_u64(v);
                for member in members {
                    if let Some(o) = table::find(a, t, self.hash(member), member) {
                        let z = a.get_u64(v + 8) as usize;
                        zremove(a, z, f64::from_bits(o.entry.aux(a)), member);
                        table::unlink(a, t, o);
                        table::free_entry(a, o.entry);
                        out.count += 1;
                    }
                }
                if table::count(a, t) == 0 {
                    remove(a, f);
                }
            }
            Op::FlushAll => {
                effects::flush_all(a, &mut Vec::new())?;
                out.done = true;
            }
            Op::Effects(list) => {
                effects::apply_all(self, shard, a, list, now, &mut Vec::new())?;
                out.done = true;
            }
            Op::Noop(_) => {}
            Op::OWrite { key, size, blocks } => {
                if !mine(key) {
                    return Ok(());
                }
                let f = find_for_write(self, a, key, now);
                let mut list = match f {
                    None => Vec::new(),
                    Some(f) => match object_of(a, f.entry) {
                        Ok((_, b)) => b,
                        Err(e) => {
                            out.error = Some(e);
                            return Ok(());
                        }
                    },
                };
                list.resize(size.div_ceil(op::BLOCK_BYTES) as usize, HOLE);
                for &(i, b) in blocks {
                    list[i as usize] = b;
                }
                let e = table::new_entry(a, self.hash(key), key, 8 + 4 * list.len(), TYPE_OBJECT)?;
                let v = e.value_at(a);
                a.put_u64(v, *size);
                for (i, b) in list.iter().enumerate() {
                    a.put_u32(v + 8 + 4 * i, *b);
                }
                match f {
                    Some(f) => table::replace(a, ks(a), f, e),
                    None => table::insert(a, ks(a), e)?,
                }
                out.done = true;
            }
        }
        Ok(())
    }
}

impl Machine for Kv {
    type Output = Outcome;

    fn init(&self, _shard: usize, arena: &mut Arena) -> Result<()> {
        if self.incremental_rehash {
            table::set_incremental(arena);
        }
        let t = table::create(arena, KEYSPACE_BUCKETS)?;
        arena.set_user(USER_KEYSPACE, t);
        Ok(())
    }

    fn apply(&self, shard: usize, arena: &mut Arena, op: &[u8], out: &mut Outcome) -> Result<()> {
        // The common record, a lone string PUT (what a SET logs), applies from the record's
        // bytes: the same steps as `Op::Effects` below, without decoding it into owned buffers
        // (a checkpoint's replay spent about a fifth of its time on that decode and on
        // allocating and freeing them: perf, SET P16).
        if let Some((db, key, value, expire)) = op::lone_string_put(op) {
            if self.shard_of(key) as usize == shard {
                effects::put_string(self, arena, db, key, value, expire)?;
            }
            out.done = true;
            return Ok(());
        }
        let rec = op::decode(op)?;
        self.apply_op(shard, arena, &rec, out)
    }
}

/// Read-side helpers over one shard's arena.
pub mod read {
    use super::*;

    /// The type name of a key.
    pub fn type_name(a: &Arena, e: Entry) -> &'static str {
        match kind(a, e) {
            TYPE_STRING => "string",
            TYPE_HASH => "hash",
            TYPE_ZSET => "zset",
            TYPE_LIST => "list",
            TYPE_SET => "set",
            TYPE_OBJECT => "object",
            _ => "none",
        }
    }

    /// A string's bytes, or `WrongType`.
    pub fn string(a: &Arena, e: Entry) -> std::result::Result<&[u8], OpError> {
        if kind(a, e) == TYPE_STRING {
            Ok(e.value(a))
        } else {
            Err(OpError::WrongType)
        }
    }

    /// A hash's field table, or `WrongType`.
    pub fn hash_table(a: &Arena, e: Entry) -> std::result::Result<u64, OpError> {
        if kind(a, e) == TYPE_HASH {
            Ok(a.get_u64(e.value_at(a)))
        } else {
            Err(OpError::WrongType)
        }
    }

    /// A field of a hash table.
    pub fn field<'a>(kv: &Kv, a: &'a Arena, t: u64, field: &[u8]) -> Option<&'a [u8]> {
        table::find(a, t, kv.hash(field), field).map(|f| f.entry.value(a))
    }

    /// Every field and value of a hash table.
    pub fn fields(a: &Arena, t: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
        table::entries(a, t)
            .into_iter()
            .map(|e| (e.key(a).to_vec(), e.value(a).to_vec()))
            .collect()
    }

    /// Members of a sorted set with `min <= score <= max` (bounds exclusive when flagged),
    /// skipping `offset`, at most `count`.
    #[allow(clippy::too_many_arguments)]
    pub fn zrange(
        a: &Arena,
        e: Entry,
        min: f64,
        min_excl: bool,
        max: f64,
        max_excl: bool,
        offset: usize,
        count: Option<usize>,
    ) -> std::result::Result<Vec<(Vec<u8>, f64)>, OpError> {
        if kind(a, e) != TYPE_ZSET {
            return Err(OpError::WrongType);
        }
        let z = a.get_u64(e.value_at(a) + 8) as usize;
        let len = a.get_u64(z + Z_LEN) as usize;
        // First index with score >= min (or > min).
        let (mut lo, mut hi) = (0, len);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let s = f64::from_bits(a.get_u64(z + Z_ITEMS + mid * 16));
            if s < min || (min_excl && s == min) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let mut out = Vec::new();
        let mut skipped = 0;
        for i in lo..len {
            let item = z + Z_ITEMS + i * 16;
            let s = f64::from_bits(a.get_u64(item));
            if s > max || (max_excl && s == max) {
                break;
            }
            if skipped < offset {
                skipped += 1;
                continue;
            }
            if count.is_some_and(|c| out.len() >= c) {
                break;
            }
            let m = Entry {
                off: a.get_u64(item + 8),
            };
            out.push((m.key(a).to_vec(), s));
        }
        Ok(out)
    }

    /// Number of keys of database 0 in the shard (expired ones not yet removed included).
    pub fn count(a: &Arena) -> u64 {
        effects::db_count(a, 0)
    }

    /// One SCAN step over the shard: live keys with their types, and the next cursor.
    pub fn scan(a: &Arena, v: u64, now: i64, out: &mut Vec<(Vec<u8>, &'static str)>) -> u64 {
        let mut found = Vec::new();
        let next = table::scan_step(a, ks(a), v, &mut found);
        for e in found {
            if db_of(a, e) == 0 && !expired(a, e, now) {
                out.push((e.key(a).to_vec(), type_name(a, e)));
            }
        }
        next
    }

    /// Check every structure of a shard; returns the number of keys.
    pub fn validate(a: &Arena) -> Result<u64> {
        let t = ks(a);
        let n = table::validate(a, t, "keyspace table")?;
        let all = table::entries(a, t);
        effects::validate(a, &all)?;
        for e in all {
            match kind(a, e) {
                TYPE_STRING => {}
                TYPE_SET => {
                    table::validate(a, a.get_u64(e.value_at(a)), "set table")?;
                }
                TYPE_LIST => {
                    list::validate(a, a.get_u64(e.value_at(a)))?;
                }
                TYPE_HASH => {
                    table::validate(a, a.get_u64(e.value_at(a)), "hash table")?;
                }
                TYPE_ZSET => {
                    let m = table::validate(a, a.get_u64(e.value_at(a)), "sorted-set table")?;
                    let z = a.get_u64(e.value_at(a) + 8) as usize;
                    let len = a.get_u64(z + Z_LEN);
                    if len != m || len > a.get_u64(z + Z_CAP) {
                        return Err(dipper::DipperError::Corrupt {
                            structure: "sorted-set array",
                            offset: z as u64,
                            field: "length",
                            expected: format!("{m} members within capacity"),
                            found: len.to_string(),
                        });
                    }
                }
                TYPE_OBJECT => {
                    let size = if e.vlen(a) >= 8 {
                        a.get_u64(e.value_at(a))
                    } else {
                        u64::MAX
                    };
                    let want = 8 + 4 * size.div_ceil(op::BLOCK_BYTES);
                    if e.vlen(a) < 8 || want != e.vlen(a) as u64 {
                        return Err(dipper::DipperError::Corrupt {
                            structure: "object entry",
                            offset: e.off,
                            field: "value length",
                            expected: "8 + 4 per 4 KiB of the size".into(),
                            found: e.vlen(a).to_string(),
                        });
                    }
                }
                other => {
                    return Err(dipper::DipperError::Corrupt {
                        structure: "keyspace entry",
                        offset: e.off,
                        field: "type",
                        expected: "1 (string), 2 (hash), 3 (sorted set), 4 (object), 5 (list) \
                                   or 6 (set)"
                            .into(),
                        found: other.to_string(),
                    });
                }
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::{Effect, Value};

    fn put(db: u8, key: &str, value: &str, expire_at_ms: i64) -> Effect {
        Effect::Put {
            db,
            key: key.as_bytes().to_vec(),
            value: Value::String(value.as_bytes().to_vec()),
            expire_at_ms,
        }
    }

    /// A lone string PUT, applied from the record's bytes, leaves the arena byte for byte as
    /// the decoded path leaves it for the same PUT (here behind a DEL of a key that is absent,
    /// which changes nothing and makes the record take the decoded path): new keys, same-length
    /// overwrites, other lengths, deadlines set, kept and removed, a string over a hash, a
    /// second database, and keys of the other shard, which neither path touches.
    #[test]
    fn a_lone_string_put_applies_in_place_as_decoded() {
        let kv = Kv::new(7, 2);
        let (mut fast, mut slow) = (Arena::new(), Arena::new());
        kv.init(0, &mut fast).expect("init");
        kv.init(0, &mut slow).expect("init");
        let hash = Effect::HSet {
            db: 0,
            key: b"h".to_vec(),
            pairs: vec![(b"f".to_vec(), b"v".to_vec())],
        };
        for a in [&mut fast, &mut slow] {
            let rec = op::encode(1, &Op::Effects(vec![hash.clone()]));
            kv.apply(0, a, &rec, &mut Outcome::default()).expect("hset");
        }
        let mut steps = vec![
            put(0, "a", "one", 0),
            put(0, "a", "two", 0),
            put(0, "a", "a longer value", 5_000),
            put(0, "a", "a longer value", 5_000),
            put(0, "a", "a longer value", 0),
            put(3, "a", "other db", 0),
            put(0, "h", "over a hash", 0),
            put(0, "b", "", 9_000),
        ];
        steps.extend(["c", "d", "e", "f"].map(|k| put(0, k, k, 0)));
        let shards: Vec<u16> = steps
            .iter()
            .filter_map(|p| p.key())
            .map(|(_, k)| kv.shard_of(k))
            .collect();
        assert!(
            shards.contains(&0) && shards.contains(&1),
            "the keys cover both shards: {shards:?}"
        );
        for (i, p) in steps.iter().enumerate() {
            let lone = op::encode(1_000, &Op::Effects(vec![p.clone()]));
            assert!(
                op::lone_string_put(&lone).is_some(),
                "step {i} is read in place"
            );
            let behind = Effect::Del {
                db: 0,
                key: b"absent".to_vec(),
            };
            let decoded = op::encode(1_000, &Op::Effects(vec![behind, p.clone()]));
            assert!(op::lone_string_put(&decoded).is_none());
            let (mut o1, mut o2) = (Outcome::default(), Outcome::default());
            kv.apply(0, &mut fast, &lone, &mut o1).expect("in place");
            kv.apply(0, &mut slow, &decoded, &mut o2).expect("decoded");
            assert_eq!(o1.done, o2.done, "step {i}");
            assert!(fast.image() == slow.image(), "step {i}: the arenas differ");
        }
    }
}
