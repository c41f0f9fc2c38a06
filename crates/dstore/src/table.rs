//! A chained hash table inside an arena, with offsets for pointers.
//!
//! The keyspace of a shard is one such table; a hash value and a sorted set's member index are
//! nested tables in the same arena. Entries carry their key and value inline:
//!
//! | offset | field |
//! | --- | --- |
//! | 0 | next entry in the bucket (0: none) |
//! | 8 | 64-bit hash of the key |
//! | 16 | expiry, milliseconds since the Unix epoch (0: none) |
//! | 24 | aux: value type (keyspace) or score bits (sorted-set members) |
//! | 32 | key length (u32) |
//! | 36 | value length (u32) |
//! | 40 | key bytes, then value bytes |
//!
//! The table header block holds the bucket array's offset, the bucket count (a power of two),
//! the entry count and the offset of a rehash block (0 when none). When the table holds as many
//! entries as buckets it gets a bucket array twice as large, but it does not move its entries
//! there in one step: the rehash block remembers the old array, its bucket count and the next old
//! bucket to move, and every insert, replace or unlink moves [`REHASH_STEP`] old buckets (a
//! bounded amount of work per operation, as Redis's dict does) until the old array is empty and
//! freed. A table of fewer than [`REHASH_INCREMENTAL_MIN`] buckets moves them all at once.
//!
//! Only the tables of an arena whose user word [`USER_TABLE_FLAGS`] has [`TABLES_INCREMENTAL`]
//! rehash incrementally (DStore sets it in the shards of a store whose DIPPER root says so, a
//! store that binaries from before incremental rehash refuse to open). In any other arena a
//! table doubles in one step, as before, and a rehash found running (left by a build that
//! rehashed such stores incrementally) is finished by the next write to that table.
//!
//! While a table rehashes, where an entry lives follows from its hash alone: in old bucket
//! `i = hash & (old - 1)` if `i` is not yet moved (`i >= next`), else in new bucket
//! `hash & (new - 1)`. So a lookup reads one chain, as when no rehash runs. The new array is not
//! zeroed when it is allocated: new buckets `i` and `i + old` are zeroed when old bucket `i` is
//! moved, the first moment they can hold an entry, and the rest are never read.

use dipper::{Arena, DipperError, Result};

/// Entry field offsets.
pub const E_NEXT: usize = 0;
/// Hash.
pub const E_HASH: usize = 8;
/// Expiry.
pub const E_EXPIRE: usize = 16;
/// Aux word.
pub const E_AUX: usize = 24;
/// Key length.
pub const E_KLEN: usize = 32;
/// Value length.
pub const E_VLEN: usize = 36;
/// Start of the key bytes.
pub const E_KEY: usize = 40;

/// Table header field: bucket array offset.
pub const T_BUCKETS: usize = 0;
/// Table header field: bucket count.
pub const T_NBUCKETS: usize = 8;
/// Table header field: entry count.
pub const T_COUNT: usize = 16;
/// Table header field: offset of the rehash block (0: no rehash in progress).
pub const T_REHASH: usize = 24;
/// Bytes of a table header.
pub const T_BYTES: usize = 32;

/// Rehash block field: offset of the old (smaller) bucket array.
pub const R_OLD: usize = 0;
/// Rehash block field: bucket count of the old array (half the header's bucket count).
pub const R_OLD_N: usize = 8;
/// Rehash block field: the next old bucket to move (old buckets below it are empty and dead).
pub const R_NEXT: usize = 16;
/// Bytes of a rehash block (the last word is zero).
pub const R_BYTES: usize = 32;

/// Old buckets moved by each insert, replace or unlink while a table rehashes. At least one per
/// insert is what makes a rehash end before the table can need the next doubling (that takes as
/// many net inserts as the old array has buckets); the step in `replace` makes a table written
/// only by replacing values finish its rehash too.
pub const REHASH_STEP: u64 = 4;

/// Tables of fewer buckets double in one step (their whole rehash is about as much work as a
/// few steps of a large one), so a hash's or a set's small field table never carries a rehash
/// block and an old array between operations.
pub const REHASH_INCREMENTAL_MIN: u64 = 64;

/// Arena user word holding the table flags of the arena's tables (0 in an arena written before
/// it existed). DStore's own user words are 0 and 1 (`machine::USER_KEYSPACE`,
/// `machine::USER_DB_COUNTS`).
pub const USER_TABLE_FLAGS: usize = 2;

/// Bit of [`USER_TABLE_FLAGS`]: the arena's tables of [`REHASH_INCREMENTAL_MIN`] buckets or more
/// rehash incrementally. Without it every table doubles in one step.
pub const TABLES_INCREMENTAL: u64 = 1;

/// The most buckets a table may have (the bucket array is one arena block).
pub const BUCKETS_MAX: u64 = 1 << 25;

/// Seeded 64-bit hash of a byte string (multiply-rotate over 8-byte words, then a 64-bit
/// finalizer). Deterministic for a given seed, which is stored with the store.
pub fn hash(seed: u64, key: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = seed ^ (key.len() as u64).wrapping_mul(K);
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().expect("8"));
        h = (h ^ w).wrapping_mul(K).rotate_left(29);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut b = [0u8; 8];
        b[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(b)).wrapping_mul(K).rotate_left(29);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// A view of one entry.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// Its offset.
    pub off: u64,
}

impl Entry {
    /// Key length.
    pub fn klen(self, a: &Arena) -> usize {
        a.get_u32(self.off as usize + E_KLEN) as usize
    }
    /// Value length.
    pub fn vlen(self, a: &Arena) -> usize {
        a.get_u32(self.off as usize + E_VLEN) as usize
    }
    /// Key bytes.
    pub fn key(self, a: &Arena) -> &[u8] {
        a.bytes(self.off as usize + E_KEY, self.klen(a))
    }
    /// Value bytes.
    pub fn value(self, a: &Arena) -> &[u8] {
        let k = self.klen(a);
        a.bytes(self.off as usize + E_KEY + k, self.vlen(a))
    }
    /// Offset of the value bytes.
    pub fn value_at(self, a: &Arena) -> usize {
        self.off as usize + E_KEY + self.klen(a)
    }
    /// Expiry (0: none).
    pub fn expire(self, a: &Arena) -> i64 {
        a.get_u64(self.off as usize + E_EXPIRE) as i64
    }
    /// Aux word.
    pub fn aux(self, a: &Arena) -> u64 {
        a.get_u64(self.off as usize + E_AUX)
    }
    /// Hash.
    pub fn hash(self, a: &Arena) -> u64 {
        a.get_u64(self.off as usize + E_HASH)
    }
    /// Bytes of the entry block.
    pub fn size(self, a: &Arena) -> usize {
        E_KEY + self.klen(a) + self.vlen(a)
    }
}

/// Where an entry was found: the word that points at it, and the entry.
#[derive(Debug, Clone, Copy)]
pub struct Found {
    /// Offset of the bucket slot or the previous entry's `next` field.
    pub link: usize,
    /// The entry.
    pub entry: Entry,
}

/// Make an empty table with `buckets` buckets (a power of two).
pub fn create(a: &mut Arena, buckets: u64) -> Result<u64> {
    debug_assert!(buckets.is_power_of_two());
    let t = a.alloc(T_BYTES)?;
    let b = a.alloc(buckets as usize * 8)?;
    a.zero(b as usize, buckets as usize * 8);
    a.put_u64(t as usize + T_BUCKETS, b);
    a.put_u64(t as usize + T_NBUCKETS, buckets);
    a.put_u64(t as usize + T_COUNT, 0);
    a.put_u64(t as usize + T_REHASH, 0);
    Ok(t)
}

/// Number of entries.
pub fn count(a: &Arena, t: u64) -> u64 {
    a.get_u64(t as usize + T_COUNT)
}

/// Number of buckets.
pub fn buckets(a: &Arena, t: u64) -> u64 {
    a.get_u64(t as usize + T_NBUCKETS)
}

/// Whether a rehash is in progress (its moves are not finished).
pub fn rehashing(a: &Arena, t: u64) -> bool {
    a.get_u64(t as usize + T_REHASH) != 0
}

/// Whether the tables of this arena rehash incrementally ([`TABLES_INCREMENTAL`]).
pub fn incremental(a: &Arena) -> bool {
    a.user(USER_TABLE_FLAGS) & TABLES_INCREMENTAL != 0
}

/// Let the tables of this arena rehash incrementally (a new arena of a store whose format says
/// so; see [`TABLES_INCREMENTAL`]).
pub fn set_incremental(a: &mut Arena) {
    let f = a.user(USER_TABLE_FLAGS);
    a.set_user(USER_TABLE_FLAGS, f | TABLES_INCREMENTAL);
}

/// Old buckets a write moves while a rehash runs: [`REHASH_STEP`], or all of them in an arena
/// whose tables do not rehash incrementally.
fn step_of(a: &Arena) -> u64 {
    if incremental(a) {
        REHASH_STEP
    } else {
        u64::MAX
    }
}

/// The bucket arrays of a table as they are at one moment.
#[derive(Debug, Clone, Copy)]
struct Shape {
    /// The current (new, while rehashing) array and its bucket count.
    new_b: usize,
    new_n: u64,
    /// While rehashing: the rehash block, the old array, its bucket count and the next old
    /// bucket to move.
    old: Option<(usize, usize, u64, u64)>,
}

impl Shape {
    fn of(a: &Arena, t: u64) -> Shape {
        let r = a.get_u64(t as usize + T_REHASH) as usize;
        Shape {
            new_b: a.get_u64(t as usize + T_BUCKETS) as usize,
            new_n: buckets(a, t),
            old: (r != 0).then(|| {
                (
                    r,
                    a.get_u64(r + R_OLD) as usize,
                    a.get_u64(r + R_OLD_N),
                    a.get_u64(r + R_NEXT),
                )
            }),
        }
    }

    /// The word heading the chain an entry with hash `h` belongs to.
    fn slot(&self, h: u64) -> usize {
        if let Some((_, old_b, old_n, next)) = self.old {
            let i = h & (old_n - 1);
            if i >= next {
                return old_b + i as usize * 8;
            }
        }
        self.new_b + (h & (self.new_n - 1)) as usize * 8
    }

    /// Every bucket word that heads a live chain, with the mask its entries' hashes satisfy
    /// (`hash & mask == index`) as (word, index, mask).
    fn live(&self) -> impl Iterator<Item = (usize, u64, u64)> + '_ {
        let (old_part, new_ranges) = match self.old {
            None => (0..0, [(0, self.new_n), (0, 0)]),
            Some((_, _, old_n, next)) => (next..old_n, [(0, next), (old_n, old_n + next)]),
        };
        let old = self.old.map_or((0, 1), |(_, b, n, _)| (b, n));
        let new_mask = self.new_n - 1;
        old_part
            .map(move |i| (old.0 + i as usize * 8, i, old.1 - 1))
            .chain(
                new_ranges
                    .into_iter()
                    .flat_map(|(lo, hi)| lo..hi)
                    .map(move |j| (self.new_b + j as usize * 8, j, new_mask)),
            )
    }
}

fn slot(a: &Arena, t: u64, h: u64) -> usize {
    Shape::of(a, t).slot(h)
}

/// Find `key` (with hash `h`).
pub fn find(a: &Arena, t: u64, h: u64, key: &[u8]) -> Option<Found> {
    let mut link = slot(a, t, h);
    loop {
        let e = a.get_u64(link);
        if e == 0 {
            return None;
        }
        let entry = Entry { off: e };
        if entry.hash(a) == h && entry.key(a) == key {
            return Some(Found { link, entry });
        }
        link = e as usize + E_NEXT;
    }
}

/// Find `key` (with hash `h`) among the entries that `want` accepts (the keyspace keeps the same
/// key once per database).
pub fn find_where(
    a: &Arena,
    t: u64,
    h: u64,
    key: &[u8],
    want: impl Fn(Entry) -> bool,
) -> Option<Found> {
    let mut link = slot(a, t, h);
    loop {
        let e = a.get_u64(link);
        if e == 0 {
            return None;
        }
        let entry = Entry { off: e };
        if entry.hash(a) == h && entry.key(a) == key && want(entry) {
            return Some(Found { link, entry });
        }
        link = e as usize + E_NEXT;
    }
}

/// Unlink every entry that `keep` refuses and hand it to `dropped` (which frees it), then move
/// some buckets if a rehash runs, as one write. Returns how many were dropped.
pub fn retain(
    a: &mut Arena,
    t: u64,
    mut keep: impl FnMut(&Arena, Entry) -> bool,
    mut dropped: impl FnMut(&mut Arena, Entry),
) -> u64 {
    let shape = Shape::of(a, t);
    let mut gone = 0;
    for (head, _, _) in shape.live() {
        let mut link = head;
        loop {
            let e = a.get_u64(link);
            if e == 0 {
                break;
            }
            let entry = Entry { off: e };
            if keep(a, entry) {
                link = e as usize + E_NEXT;
            } else {
                let next = a.get_u64(e as usize + E_NEXT);
                a.put_u64(link, next);
                let c = count(a, t);
                a.put_u64(t as usize + T_COUNT, c - 1);
                dropped(a, entry);
                gone += 1;
            }
        }
    }
    rehash_step(a, t, step_of(a));
    gone
}

/// Allocate an entry for `key` with room for `vlen` value bytes (uninitialized) and no expiry.
pub fn new_entry(a: &mut Arena, h: u64, key: &[u8], vlen: usize, aux: u64) -> Result<Entry> {
    let bytes = E_KEY + key.len() + vlen;
    let off = a.alloc(bytes)?;
    let o = off as usize;
    a.put_u64(o + E_NEXT, 0);
    a.put_u64(o + E_HASH, h);
    a.put_u64(o + E_EXPIRE, 0);
    a.put_u64(o + E_AUX, aux);
    a.put_u32(o + E_KLEN, key.len() as u32);
    a.put_u32(o + E_VLEN, vlen as u32);
    a.write(o + E_KEY, key);
    Ok(Entry { off })
}

/// Free an entry block (it must be unlinked).
pub fn free_entry(a: &mut Arena, e: Entry) {
    let size = e.size(a);
    a.free(e.off, size);
}

/// Link a new entry (its key must not be in the table), growing the table if needed.
pub fn insert(a: &mut Arena, t: u64, e: Entry) -> Result<()> {
    rehash_step(a, t, step_of(a));
    let n = buckets(a, t);
    if count(a, t) >= n && n < BUCKETS_MAX {
        // A rehash still running here would mean the steps fell behind the inserts (they
        // cannot: see REHASH_STEP); finish it rather than stack a second one on it.
        rehash_step(a, t, u64::MAX);
        start_rehash(a, t)?;
        if n < REHASH_INCREMENTAL_MIN || !incremental(a) {
            rehash_step(a, t, n);
        }
    }
    let s = slot(a, t, e.hash(a));
    let head = a.get_u64(s);
    a.put_u64(e.off as usize + E_NEXT, head);
    a.put_u64(s, e.off);
    a.put_u64(t as usize + T_COUNT, count(a, t) + 1);
    Ok(())
}

/// Put `new` where `old` was in its chain of table `t` (same key), and free `old`; then move
/// some buckets if a rehash runs (so a table written only by replacing values finishes it).
pub fn replace(a: &mut Arena, t: u64, found: Found, new: Entry) {
    let next = a.get_u64(found.entry.off as usize + E_NEXT);
    a.put_u64(new.off as usize + E_NEXT, next);
    a.put_u64(found.link, new.off);
    free_entry(a, found.entry);
    rehash_step(a, t, step_of(a));
}

/// Unlink a found entry without freeing it (then move some buckets if a rehash runs).
pub fn unlink(a: &mut Arena, t: u64, found: Found) {
    let next = a.get_u64(found.entry.off as usize + E_NEXT);
    a.put_u64(found.link, next);
    a.put_u64(t as usize + T_COUNT, count(a, t) - 1);
    rehash_step(a, t, step_of(a));
}

/// Begin doubling a table that is not rehashing: allocate the new array (not zeroed, see the
/// module notes) and the rehash block. No entry moves yet.
fn start_rehash(a: &mut Arena, t: u64) -> Result<()> {
    let old_n = buckets(a, t);
    let old_b = a.get_u64(t as usize + T_BUCKETS);
    let new_n = old_n * 2;
    let r = a.alloc(R_BYTES)?;
    let new_b = match a.alloc(new_n as usize * 8) {
        Ok(b) => b,
        Err(e) => {
            a.free(r, R_BYTES);
            return Err(e);
        }
    };
    a.put_u64(r as usize + R_OLD, old_b);
    a.put_u64(r as usize + R_OLD_N, old_n);
    a.put_u64(r as usize + R_NEXT, 0);
    a.put_u64(r as usize + 24, 0);
    a.put_u64(t as usize + T_BUCKETS, new_b);
    a.put_u64(t as usize + T_NBUCKETS, new_n);
    a.put_u64(t as usize + T_REHASH, r);
    Ok(())
}

/// Move up to `steps` old buckets of a rehashing table to the new array; when the last one has
/// moved, free the old array and the rehash block. Nothing happens if no rehash runs. How much
/// moves depends only on `steps` and the table's sizes, never on the keys' hashes.
pub fn rehash_step(a: &mut Arena, t: u64, steps: u64) {
    let shape = Shape::of(a, t);
    let Some((r, old_b, old_n, mut next)) = shape.old else {
        return;
    };
    let new_mask = shape.new_n - 1;
    let end = next.saturating_add(steps).min(old_n);
    while next < end {
        a.put_u64(shape.new_b + next as usize * 8, 0);
        a.put_u64(shape.new_b + (next + old_n) as usize * 8, 0);
        let mut e = a.get_u64(old_b + next as usize * 8);
        a.put_u64(old_b + next as usize * 8, 0);
        while e != 0 {
            let after = a.get_u64(e as usize + E_NEXT);
            let h = a.get_u64(e as usize + E_HASH);
            let s = shape.new_b + (h & new_mask) as usize * 8;
            a.put_u64(e as usize + E_NEXT, a.get_u64(s));
            a.put_u64(s, e);
            e = after;
        }
        next += 1;
    }
    if next == old_n {
        a.free(old_b as u64, old_n as usize * 8);
        a.free(r as u64, R_BYTES);
        a.put_u64(t as usize + T_REHASH, 0);
    } else {
        a.put_u64(r + R_NEXT, next);
    }
}

/// Calls `f` with every entry, in [`entries`]'s order, without collecting them.
pub fn for_each(a: &Arena, t: u64, mut f: impl FnMut(Entry)) {
    for (head, _, _) in Shape::of(a, t).live() {
        let mut e = a.get_u64(head);
        while e != 0 {
            f(Entry { off: e });
            e = a.get_u64(e as usize + E_NEXT);
        }
    }
}

/// Every entry (in bucket order when no rehash runs).
pub fn entries(a: &Arena, t: u64) -> Vec<Entry> {
    let mut out = Vec::with_capacity(count(a, t) as usize);
    for (head, _, _) in Shape::of(a, t).live() {
        let mut e = a.get_u64(head);
        while e != 0 {
            out.push(Entry { off: e });
            e = a.get_u64(e as usize + E_NEXT);
        }
    }
    out
}

/// Entries of the bucket that reverse-binary cursor `v` names, and the next cursor (0: the
/// walk is over). Every entry present for a whole walk is returned at least once, even if the
/// table grows in between (the Redis SCAN argument). While a rehash runs the cursor walks the
/// old (smaller) array's buckets: one step returns every entry whose hash falls in old bucket
/// `v & (old - 1)`, wherever it lives now (the old bucket, or the two new buckets it splits
/// into). The cursor it returns is then one of the smaller table's, which stays valid on the
/// larger one.
pub fn scan_step(a: &Arena, t: u64, v: u64, out: &mut Vec<Entry>) -> u64 {
    let shape = Shape::of(a, t);
    let mut chain = |head: usize| {
        let mut e = a.get_u64(head);
        while e != 0 {
            out.push(Entry { off: e });
            e = a.get_u64(e as usize + E_NEXT);
        }
    };
    let mask = match shape.old {
        None => {
            chain(shape.new_b + (v & (shape.new_n - 1)) as usize * 8);
            shape.new_n - 1
        }
        Some((_, old_b, old_n, next)) => {
            let i = v & (old_n - 1);
            if i >= next {
                chain(old_b + i as usize * 8);
            } else {
                chain(shape.new_b + i as usize * 8);
                chain(shape.new_b + (i + old_n) as usize * 8);
            }
            old_n - 1
        }
    };
    let mut v = v | !mask;
    v = v.reverse_bits().wrapping_add(1).reverse_bits();
    v
}

/// Free every entry (calling `each` first, so nested structures can be freed) and the table.
pub fn destroy(a: &mut Arena, t: u64, mut each: impl FnMut(&mut Arena, Entry)) {
    for e in entries(a, t) {
        each(a, e);
        free_entry(a, e);
    }
    let shape = Shape::of(a, t);
    if let Some((r, old_b, old_n, _)) = shape.old {
        a.free(old_b as u64, old_n as usize * 8);
        a.free(r as u64, R_BYTES);
    }
    a.free(shape.new_b as u64, shape.new_n as usize * 8);
    a.free(t, T_BYTES);
}

/// Check a table's structure against the arena's bounds: every offset inside the arena's
/// blocks, every entry in the bucket its hash names (the old or the new array's, while a rehash
/// runs), the count right, no cycle; a rehash block's old array half the new one and its next
/// bucket below the old count.
pub fn validate(a: &Arena, t: u64, what: &'static str) -> Result<u64> {
    let top = a.top() as u64;
    let bad = |field: &'static str, expected: String, found: String| DipperError::Corrupt {
        structure: what,
        offset: t,
        field,
        expected,
        found,
    };
    let inside = |off: u64, len: u64| {
        off >= dipper::arena::ARENA_HEADER as u64 && off.checked_add(len).is_some_and(|e| e <= top)
    };
    if !inside(t, T_BYTES as u64) {
        return Err(bad(
            "table",
            format!("inside the arena (top {top})"),
            t.to_string(),
        ));
    }
    let n = buckets(a, t);
    let b = a.get_u64(t as usize + T_BUCKETS);
    if !n.is_power_of_two() || n > BUCKETS_MAX || !inside(b, n * 8) {
        return Err(bad(
            "buckets",
            "a power of two inside the arena".into(),
            format!("{n} at {b}"),
        ));
    }
    let r = a.get_u64(t as usize + T_REHASH);
    if r != 0 {
        if !inside(r, R_BYTES as u64) {
            return Err(bad(
                "rehash block",
                format!("0 or inside the arena (top {top})"),
                r.to_string(),
            ));
        }
        let (old_b, old_n, next) = (
            a.get_u64(r as usize + R_OLD),
            a.get_u64(r as usize + R_OLD_N),
            a.get_u64(r as usize + R_NEXT),
        );
        if old_n.checked_mul(2) != Some(n) || !inside(old_b, old_n * 8) {
            return Err(bad(
                "old buckets",
                format!("{} inside the arena", n / 2),
                format!("{old_n} at {old_b}"),
            ));
        }
        if next >= old_n {
            return Err(bad(
                "rehash next",
                format!("below {old_n}"),
                next.to_string(),
            ));
        }
    }
    let want = count(a, t);
    let mut seen = 0u64;
    for (head, i, mask) in Shape::of(a, t).live() {
        let mut e = a.get_u64(head);
        while e != 0 {
            if !inside(e, E_KEY as u64) {
                return Err(bad("entry", "inside the arena".into(), e.to_string()));
            }
            let en = Entry { off: e };
            let len = E_KEY as u64 + en.klen(a) as u64 + en.vlen(a) as u64;
            if !inside(e, len) {
                return Err(bad(
                    "entry length",
                    "inside the arena".into(),
                    format!("{len} at {e}"),
                ));
            }
            if en.hash(a) & mask != i {
                return Err(bad(
                    "entry hash",
                    format!("bucket {i} of {}", mask + 1),
                    format!("{:#x}", en.hash(a)),
                ));
            }
            seen += 1;
            if seen > want {
                return Err(bad(
                    "count",
                    want.to_string(),
                    "more entries (or a cycle)".into(),
                ));
            }
            e = a.get_u64(e as usize + E_NEXT);
        }
    }
    if seen != want {
        return Err(bad("count", want.to_string(), seen.to_string()));
    }
    Ok(seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_find_grow_remove_and_validate() {
        let mut a = Arena::new();
        let t = create(&mut a, 4).unwrap();
        for i in 0..1000u32 {
            let k = format!("key{i}");
            let h = hash(7, k.as_bytes());
            let e = new_entry(&mut a, h, k.as_bytes(), 4, 0).unwrap();
            let at = e.value_at(&a);
            a.write(at, &i.to_le_bytes());
            insert(&mut a, t, e).unwrap();
        }
        assert_eq!(validate(&a, t, "t").unwrap(), 1000);
        assert!(buckets(&a, t) >= 1000);
        for i in (0..1000u32).step_by(2) {
            let k = format!("key{i}");
            let f = find(&a, t, hash(7, k.as_bytes()), k.as_bytes()).unwrap();
            assert_eq!(f.entry.value(&a), i.to_le_bytes());
            unlink(&mut a, t, f);
            free_entry(&mut a, f.entry);
        }
        assert_eq!(validate(&a, t, "t").unwrap(), 500);
        assert!(find(&a, t, hash(7, b"key2"), b"key2").is_none());
        assert!(find(&a, t, hash(7, b"key3"), b"key3").is_some());
    }

    #[test]
    fn scan_visits_every_entry_across_growth() {
        let mut a = Arena::new();
        let t = create(&mut a, 4).unwrap();
        let add = |a: &mut Arena, i: u32| {
            let k = format!("k{i}");
            let e = new_entry(a, hash(1, k.as_bytes()), k.as_bytes(), 0, 0).unwrap();
            insert(a, t, e).unwrap();
        };
        for i in 0..100 {
            add(&mut a, i);
        }
        let mut seen = std::collections::HashSet::new();
        let mut v = 0;
        let mut steps = 0;
        loop {
            let mut out = Vec::new();
            v = scan_step(&a, t, v, &mut out);
            for e in out {
                seen.insert(e.key(&a).to_vec());
            }
            steps += 1;
            if steps == 20 {
                for i in 100..400 {
                    add(&mut a, i);
                }
            }
            if v == 0 {
                break;
            }
        }
        for i in 0..100 {
            assert!(seen.contains(format!("k{i}").as_bytes()), "k{i} missed");
        }
    }

    #[test]
    fn damaged_tables_are_caught() {
        let mut a = Arena::new();
        let t = create(&mut a, 4).unwrap();
        let e = new_entry(&mut a, hash(1, b"x"), b"x", 0, 0).unwrap();
        insert(&mut a, t, e).unwrap();
        let mut b = a.clone();
        b.put_u64(t as usize + T_COUNT, 2);
        assert!(validate(&b, t, "t").is_err());
        let mut b = a.clone();
        b.put_u64(e.off as usize + E_HASH, e.hash(&a) ^ 1);
        assert!(validate(&b, t, "t").is_err());
        let mut b = a.clone();
        b.put_u64(e.off as usize + E_NEXT, e.off);
        assert!(validate(&b, t, "t").is_err(), "a cycle");
        let mut b = a.clone();
        b.put_u32(e.off as usize + E_KLEN, u32::MAX);
        assert!(validate(&b, t, "t").is_err());
    }
}
