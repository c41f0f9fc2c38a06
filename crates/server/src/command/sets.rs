//! The sets commands: membership, random picks, moves, the algebra (SINTER, SUNION, SDIFF and
//! their STORE forms, SINTERCARD) and SSCAN.
//!
//! SPOP and SRANDMEMBER choose at random here, in the command layer, and SPOP logs the members
//! it chose as an `SRem` effect, so a replica or a recovery replays exactly what happened.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use super::{
    Action, CommandError, CommandResult, Ctx, READ, READ_FAST, SCAN_COUNT_DEFAULT, SCAN_COUNT_MAX,
    Spec, WRITE, WRITE_NO_OOM, WRITE_SLOW, is, parse_int, write_count,
};
use crate::backend::BackendError;
use crate::glob::glob_match;
use crate::resp::{
    write_array_header, write_bulk, write_integer, write_optional, write_set_header,
};
use model::{Bytes, Db, Effect, Kind, Value, View};

const READ_MOVABLE: &[&str] = &["readonly", "movablekeys"];

/// This family's commands, sorted by name (flags, arity and key positions as Redis 7's
/// COMMAND INFO).
pub(super) static SPECS: &[Spec] = &[
    spec!("sadd", -3, WRITE, 1, 1, 1, cmd_sadd),
    spec!("scard", 2, READ_FAST, 1, 1, 1, cmd_scard),
    spec!("sdiff", -2, READ, 1, -1, 1, cmd_sdiff),
    spec!("sdiffstore", -3, WRITE_SLOW, 1, -1, 1, cmd_sdiffstore),
    spec!("sinter", -2, READ, 1, -1, 1, cmd_sinter),
    spec!("sintercard", -3, READ_MOVABLE, 0, 0, 0, cmd_sintercard),
    spec!("sinterstore", -3, WRITE_SLOW, 1, -1, 1, cmd_sinterstore),
    spec!("sismember", 3, READ_FAST, 1, 1, 1, cmd_sismember),
    spec!("smembers", 2, READ, 1, 1, 1, cmd_smembers),
    spec!("smismember", -3, READ_FAST, 1, 1, 1, cmd_smismember),
    spec!("smove", 4, WRITE_NO_OOM, 1, 2, 1, cmd_smove),
    spec!("spop", -2, WRITE_NO_OOM, 1, 1, 1, cmd_spop),
    spec!("srandmember", -2, READ, 1, 1, 1, cmd_srandmember),
    spec!("srem", -3, WRITE_NO_OOM, 1, 1, 1, cmd_srem),
    spec!("sscan", -3, READ, 1, 1, 1, cmd_sscan),
    spec!("sunion", -2, READ, 1, -1, 1, cmd_sunion),
    spec!("sunionstore", -3, WRITE_SLOW, 1, -1, 1, cmd_sunionstore),
];

/// About how many steps a full SSCAN of a large set takes at most (see [`scan_step`]).
const SSCAN_STEPS_MAX: usize = 64;

/// The most members SRANDMEMBER with a negative count repeats in one reply. Redis has no limit
/// (it would build a reply of any size); this one keeps a reply within a few hundred MiB.
pub(crate) const SRANDMEMBER_REPEAT_MAX: u64 = 1 << 24;

fn wrong_type() -> CommandError {
    CommandError::Backend(BackendError::WrongType)
}

fn err(text: &str) -> CommandError {
    CommandError::Other(text.to_string())
}

/// Whether `key` holds a set: `Ok(false)` if it is absent, WRONGTYPE if it holds another kind.
fn is_set<T: View + ?Sized>(t: &T, db: Db, key: &[u8]) -> Result<bool, CommandError> {
    match t.kind(db, key) {
        None => Ok(false),
        Some(Kind::Set) => Ok(true),
        Some(_) => Err(wrong_type()),
    }
}

fn write_members(out: &mut Vec<u8>, members: &[Bytes], as_set: bool, resp3: bool) {
    if as_set {
        write_set_header(out, members.len(), resp3);
    } else {
        write_array_header(out, members.len());
    }
    for m in members {
        write_bulk(out, m);
    }
}

/// A small pseudo-random generator (splitmix64), seeded from the clock and a process-wide
/// counter so two picks in the same nanosecond differ. Not for secrets.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        static SEQUENCE: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let seq = SEQUENCE.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        Rng(nanos ^ seq)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// `count` distinct members of `members` (all of them, in their order, if there are no
    /// more than `count`).
    fn sample(&mut self, mut members: Vec<Bytes>, count: usize) -> Vec<Bytes> {
        if count >= members.len() {
            return members;
        }
        // A partial Fisher-Yates shuffle: the first `count` places end up a uniform sample.
        for i in 0..count {
            let j = i + self.below(members.len() - i);
            members.swap(i, j);
        }
        members.truncate(count);
        members
    }
}

// ---------------------------------------------------------------------------------------------
// Members
// ---------------------------------------------------------------------------------------------

fn cmd_sadd(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let key = args[1].as_slice();
    let added = ctx.write(&[key], |t| {
        is_set(t, db, key)?;
        let mut seen = HashSet::new();
        let new: Vec<Bytes> = args[2..]
            .iter()
            .filter(|m| !t.set_contains(db, key, m) && seen.insert(m.as_slice()))
            .cloned()
            .collect();
        let n = new.len() as u64;
        if n > 0 {
            t.apply(vec![Effect::SAdd {
                db,
                key: key.to_vec(),
                members: new,
            }])?;
        }
        Ok(n)
    })?;
    write_count(out, added)
}

fn cmd_srem(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let key = args[1].as_slice();
    let removed = ctx.write(&[key], |t| {
        if !is_set(t, db, key)? {
            return Ok(0);
        }
        let mut seen = HashSet::new();
        let gone: Vec<Bytes> = args[2..]
            .iter()
            .filter(|m| t.set_contains(db, key, m) && seen.insert(m.as_slice()))
            .cloned()
            .collect();
        let n = gone.len() as u64;
        if n > 0 {
            t.apply(vec![Effect::SRem {
                db,
                key: key.to_vec(),
                members: gone,
            }])?;
        }
        Ok(n)
    })?;
    write_count(out, removed)
}

fn cmd_scard(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let key = args[1].as_slice();
    let n = ctx.read(&[key], |t| {
        is_set(t, db, key)?;
        Ok(t.set_len(db, key))
    })?;
    write_count(out, n)
}

fn cmd_sismember(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let key = args[1].as_slice();
    let found = ctx.read(&[key], |t| {
        is_set(t, db, key)?;
        Ok(t.set_contains(db, key, &args[2]))
    })?;
    write_integer(out, i64::from(found));
    Ok(Action::Continue)
}

fn cmd_smismember(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let key = args[1].as_slice();
    let found = ctx.read(&[key], |t| {
        is_set(t, db, key)?;
        Ok(args[2..]
            .iter()
            .map(|m| t.set_contains(db, key, m))
            .collect::<Vec<_>>())
    })?;
    write_array_header(out, found.len());
    for f in found {
        write_integer(out, i64::from(f));
    }
    Ok(Action::Continue)
}

fn cmd_smembers(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let key = args[1].as_slice();
    let members = ctx.read(&[key], |t| {
        is_set(t, db, key)?;
        Ok(t.set_members(db, key))
    })?;
    write_members(out, &members, true, ctx.resp3());
    Ok(Action::Continue)
}

fn cmd_smove(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let src = args[1].as_slice();
    let dst = args[2].as_slice();
    let member = &args[3];
    let moved = ctx.write(&[src, dst], |t| {
        // An absent source answers 0 before the destination's kind is looked at.
        if !is_set(t, db, src)? {
            return Ok(false);
        }
        is_set(t, db, dst)?;
        if !t.set_contains(db, src, member) {
            return Ok(false);
        }
        if src == dst {
            return Ok(true);
        }
        let mut effects = vec![Effect::SRem {
            db,
            key: src.to_vec(),
            members: vec![member.clone()],
        }];
        // A destination that has the member already is not written (so a WATCH on it stands,
        // as in Redis).
        if !t.set_contains(db, dst, member) {
            effects.push(Effect::SAdd {
                db,
                key: dst.to_vec(),
                members: vec![member.clone()],
            });
        }
        t.apply(effects)?;
        Ok(true)
    })?;
    write_integer(out, i64::from(moved));
    Ok(Action::Continue)
}

// ---------------------------------------------------------------------------------------------
// Random members
// ---------------------------------------------------------------------------------------------

fn cmd_spop(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    if args.len() > 3 {
        return Err(CommandError::Syntax);
    }
    let count = match args.get(2) {
        Some(arg) => Some(
            parse_int(arg)
                .ok()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| err("ERR value is out of range, must be positive"))?,
        ),
        None => None,
    };
    let db = ctx.db();
    let key = args[1].as_slice();
    let popped = ctx.write(&[key], |t| {
        if !is_set(t, db, key)? {
            return Ok(Vec::new());
        }
        let members = t.set_members(db, key);
        let chosen = Rng::new().sample(members, count.unwrap_or(1));
        if !chosen.is_empty() {
            t.apply(vec![Effect::SRem {
                db,
                key: key.to_vec(),
                members: chosen.clone(),
            }])?;
        }
        Ok(chosen)
    })?;
    let resp3 = ctx.resp3();
    match count {
        None => write_optional(out, popped.first().map(Vec::as_slice), resp3),
        Some(_) => write_members(out, &popped, true, resp3),
    }
    Ok(Action::Continue)
}

fn cmd_srandmember(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    if args.len() > 3 {
        return Err(CommandError::Syntax);
    }
    let count = match args.get(2) {
        Some(arg) => {
            let n = parse_int(arg)?;
            if n == i64::MIN {
                return Err(err(
                    "ERR value is out of range, value must between -9223372036854775807 and \
                     9223372036854775807",
                ));
            }
            Some(n)
        }
        None => None,
    };
    let db = ctx.db();
    let key = args[1].as_slice();
    let picked = ctx.read(&[key], |t| {
        if !is_set(t, db, key)? {
            return Ok(Vec::new());
        }
        let members = t.set_members(db, key);
        let mut rng = Rng::new();
        match count {
            None => Ok(rng.sample(members, 1)),
            Some(n) if n >= 0 => Ok(rng.sample(members, usize::try_from(n).unwrap_or(usize::MAX))),
            Some(n) => {
                // A negative count repeats members: |n| independent picks.
                let times = n.unsigned_abs();
                if times > SRANDMEMBER_REPEAT_MAX {
                    return Err(err(&format!(
                        "ERR value is out of range, SRANDMEMBER repeats at most \
                         {SRANDMEMBER_REPEAT_MAX} members"
                    )));
                }
                Ok((0..times)
                    .filter_map(|_| members.get(rng.below(members.len())).cloned())
                    .collect())
            }
        }
    })?;
    match count {
        None => write_optional(out, picked.first().map(Vec::as_slice), ctx.resp3()),
        Some(_) => write_members(out, &picked, false, false),
    }
    Ok(Action::Continue)
}

// ---------------------------------------------------------------------------------------------
// The algebra
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SetOp {
    Inter,
    Union,
    Diff,
}

/// `op` over the sets at `keys` (an absent key is an empty set; WRONGTYPE if any key holds
/// another kind, whatever the others hold). `limit` (0: none) stops an intersection early.
fn combine<T: View + ?Sized>(
    t: &T,
    db: Db,
    keys: &[&[u8]],
    op: SetOp,
    limit: usize,
) -> Result<Vec<Bytes>, CommandError> {
    let mut present = Vec::with_capacity(keys.len());
    for key in keys {
        present.push(is_set(t, db, key)?);
    }
    let limit = if limit == 0 { usize::MAX } else { limit };
    Ok(match op {
        SetOp::Inter => {
            if present.contains(&false) || keys.is_empty() {
                return Ok(Vec::new());
            }
            // Walk the smallest set and probe the others.
            let smallest = keys
                .iter()
                .copied()
                .min_by_key(|k| t.set_len(db, k))
                .unwrap_or(keys[0]);
            let mut out = Vec::new();
            for m in t.set_members(db, smallest) {
                if out.len() >= limit {
                    break;
                }
                if keys.iter().all(|k| t.set_contains(db, k, &m)) {
                    out.push(m);
                }
            }
            out
        }
        SetOp::Union => {
            let mut seen = HashSet::new();
            let mut out = Vec::new();
            for (key, _) in keys.iter().zip(&present).filter(|(_, p)| **p) {
                for m in t.set_members(db, key) {
                    if seen.insert(m.clone()) {
                        out.push(m);
                    }
                }
            }
            out
        }
        SetOp::Diff => {
            if !present.first().copied().unwrap_or(false) {
                return Ok(Vec::new());
            }
            let others: Vec<&[u8]> = keys[1..]
                .iter()
                .zip(&present[1..])
                .filter(|(_, p)| **p)
                .map(|(k, _)| *k)
                .collect();
            t.set_members(db, keys[0])
                .into_iter()
                .filter(|m| !others.iter().any(|k| t.set_contains(db, k, m)))
                .collect()
        }
    })
}

/// SINTER, SUNION, SDIFF: the result as a set.
fn set_op(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>, op: SetOp) -> CommandResult {
    let db = ctx.db();
    let keys: Vec<&[u8]> = args[1..].iter().map(Vec::as_slice).collect();
    let members = ctx.read(&keys, |t| combine(t, db, &keys, op, 0))?;
    write_members(out, &members, true, ctx.resp3());
    Ok(Action::Continue)
}

/// SINTERSTORE, SUNIONSTORE, SDIFFSTORE: the result replaces the destination (without a
/// deadline); an empty result deletes it.
fn set_op_store(
    ctx: &mut Ctx<'_>,
    args: &[Vec<u8>],
    out: &mut Vec<u8>,
    op: SetOp,
) -> CommandResult {
    let db = ctx.db();
    let dst = args[1].as_slice();
    let srcs: Vec<&[u8]> = args[2..].iter().map(Vec::as_slice).collect();
    let locked: Vec<&[u8]> = args[1..].iter().map(Vec::as_slice).collect();
    let n = ctx.write(&locked, |t| {
        let members = combine(t, db, &srcs, op, 0)?;
        let n = members.len() as u64;
        if members.is_empty() {
            if t.kind(db, dst).is_some() {
                t.apply(vec![Effect::Del {
                    db,
                    key: dst.to_vec(),
                }])?;
            }
        } else {
            t.apply(vec![Effect::Put {
                db,
                key: dst.to_vec(),
                value: Value::Set(members),
                expire_at_ms: 0,
            }])?;
        }
        Ok(n)
    })?;
    write_count(out, n)
}

fn cmd_sinter(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    set_op(ctx, args, out, SetOp::Inter)
}

fn cmd_sunion(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    set_op(ctx, args, out, SetOp::Union)
}

fn cmd_sdiff(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    set_op(ctx, args, out, SetOp::Diff)
}

fn cmd_sinterstore(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    set_op_store(ctx, args, out, SetOp::Inter)
}

fn cmd_sunionstore(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    set_op_store(ctx, args, out, SetOp::Union)
}

fn cmd_sdiffstore(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    set_op_store(ctx, args, out, SetOp::Diff)
}

fn cmd_sintercard(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let numkeys = parse_int(&args[1])
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| err("ERR numkeys should be greater than 0"))?;
    let keys_end = usize::try_from(numkeys)
        .ok()
        .and_then(|n| n.checked_add(2))
        .filter(|&end| end <= args.len())
        .ok_or_else(|| err("ERR Number of keys can't be greater than number of args"))?;
    let mut limit: usize = 0;
    let mut i = keys_end;
    while i < args.len() {
        if is(&args[i], "limit") && i + 1 < args.len() {
            limit = parse_int(&args[i + 1])
                .ok()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| err("ERR LIMIT can't be negative"))?;
            i += 2;
        } else {
            return Err(CommandError::Syntax);
        }
    }
    let db = ctx.db();
    let keys: Vec<&[u8]> = args[2..keys_end].iter().map(Vec::as_slice).collect();
    let members = ctx.read(&keys, |t| combine(t, db, &keys, SetOp::Inter, limit))?;
    write_count(out, members.len() as u64)
}

// ---------------------------------------------------------------------------------------------
// SSCAN
// ---------------------------------------------------------------------------------------------

// SSCAN's cursor parses as SCAN's (C's strtoul, as Redis's `parseScanCursorOrReply`).
use super::keys::parse_cursor;

/// Where a member sits in the scan order: a fixed 48-bit hash of its bytes (FNV-1a, then a
/// mixer), so a member keeps its place while the set changes around it. 48 bits keep cursors
/// exact for clients that read them as a JavaScript number.
fn scan_position(member: &[u8]) -> u64 {
    let mut h = member.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    h = (h ^ (h >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    (h ^ (h >> 33)) >> 16
}

/// One scan step over `members`: those whose position is at least `cursor`, about `count` of
/// them in position order (members sharing a position are never split between steps), and the
/// cursor of the next step (0 when done). A member present for the whole scan is returned by
/// exactly one step, whatever else changes.
///
/// A step reads the whole set (the store offers no cheaper way), so on a large set a step
/// returns at least 1/[`SSCAN_STEPS_MAX`] of it: a full scan costs a bounded number of reads
/// of the set, not one per COUNT members. COUNT is a hint in Redis too (small sets come back
/// whole).
fn scan_step(members: Vec<Bytes>, cursor: u64, count: usize) -> (u64, Vec<Bytes>) {
    let count = count.max(members.len() / SSCAN_STEPS_MAX);
    let mut rest: Vec<(u64, Bytes)> = members
        .into_iter()
        .map(|m| (scan_position(&m), m))
        .filter(|(p, _)| *p >= cursor)
        .collect();
    let count = count.max(1);
    if rest.len() <= count {
        return (0, rest.into_iter().map(|(_, m)| m).collect());
    }
    rest.select_nth_unstable_by_key(count, |(p, _)| *p);
    let pivot = rest[count].0;
    let (mut page, later): (Vec<_>, Vec<_>) = rest.into_iter().partition(|(p, _)| *p < pivot);
    let next = if page.is_empty() {
        // Every one of the first `count` shares the pivot's position: take that whole group.
        let (group, after): (Vec<_>, Vec<_>) = later.into_iter().partition(|(p, _)| *p == pivot);
        page = group;
        after.iter().map(|(p, _)| *p).min().unwrap_or(0)
    } else {
        pivot
    };
    page.sort_unstable_by_key(|(p, _)| *p);
    (next, page.into_iter().map(|(_, m)| m).collect())
}

fn cmd_sscan(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let cursor = parse_cursor(&args[2])?;
    let db = ctx.db();
    let key = args[1].as_slice();
    let (next, members) = ctx.read(&[key], |t| {
        // Redis answers an absent key before it reads the options.
        if !is_set(t, db, key)? {
            return Ok((0, Vec::new()));
        }
        let mut pattern: Option<&[u8]> = None;
        let mut count = SCAN_COUNT_DEFAULT;
        let mut i = 3;
        while i < args.len() {
            let Some(value) = args.get(i + 1) else {
                return Err(CommandError::Syntax);
            };
            if is(&args[i], "count") {
                let n = parse_int(value)?;
                if n < 1 {
                    return Err(CommandError::Syntax);
                }
                count = usize::try_from(n).unwrap_or(usize::MAX).min(SCAN_COUNT_MAX);
            } else if is(&args[i], "match") {
                pattern = (value.as_slice() != b"*").then_some(value.as_slice());
            } else {
                return Err(CommandError::Syntax);
            }
            i += 2;
        }
        let (next, mut page) = scan_step(t.set_members(db, key), cursor, count);
        if let Some(p) = pattern {
            page.retain(|m| glob_match(p, m));
        }
        Ok((next, page))
    })?;
    write_array_header(out, 2);
    write_bulk(out, next.to_string().as_bytes());
    write_members(out, &members, false, false);
    Ok(Action::Continue)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: usize) -> Vec<Bytes> {
        (0..n).map(|i| format!("m{i}").into_bytes()).collect()
    }

    #[test]
    fn cursors_parse_like_strtoul() {
        assert_eq!(parse_cursor(b"0"), Ok(0));
        assert_eq!(parse_cursor(b""), Ok(0));
        assert_eq!(parse_cursor(b"+7"), Ok(7));
        assert_eq!(parse_cursor(b"-1"), Ok(u64::MAX));
        assert_eq!(parse_cursor(b"18446744073709551615"), Ok(u64::MAX));
        for bad in [
            &b"18446744073709551616"[..],
            b" 0",
            b"x",
            b"-",
            b"+",
            b"1x",
            b"0x1",
        ] {
            assert_eq!(parse_cursor(bad), Err(err("ERR invalid cursor")), "{bad:?}");
        }
    }

    /// A full scan returns every member once, in steps of about COUNT, and a member present
    /// throughout is returned even when others come and go between steps.
    #[test]
    fn scan_steps_cover_the_set() {
        let all = members(1000);
        let mut seen = Vec::new();
        let mut cursor = 0;
        let mut steps = 0;
        loop {
            let (next, page) = scan_step(all.clone(), cursor, 10);
            // COUNT 10, or 1/64 of the set when that is more.
            assert!(
                page.len() <= 1000 / SSCAN_STEPS_MAX,
                "step of {}",
                page.len()
            );
            seen.extend(page);
            steps += 1;
            if next == 0 {
                break;
            }
            assert!(next > cursor, "the cursor moves forward");
            cursor = next;
        }
        assert!(steps >= 1000 / (1000 / SSCAN_STEPS_MAX), "{steps} steps");

        // A large set takes a bounded number of steps whatever COUNT says.
        let large = members(20_000);
        let (mut cursor, mut steps, mut total) = (0, 0, 0);
        loop {
            let (next, page) = scan_step(large.clone(), cursor, 10);
            total += page.len();
            steps += 1;
            if next == 0 {
                break;
            }
            cursor = next;
        }
        assert_eq!(total, 20_000);
        assert!(steps <= SSCAN_STEPS_MAX + 1, "{steps} steps");
        seen.sort();
        let mut want = all.clone();
        want.sort();
        assert_eq!(seen, want);

        // Members removed and added while scanning: the ones kept throughout all show up.
        let mut set: Vec<Bytes> = members(300);
        let mut seen = HashSet::new();
        let mut cursor = 0;
        let mut round = 0;
        loop {
            let (next, page) = scan_step(set.clone(), cursor, 7);
            seen.extend(page);
            round += 1;
            set.retain(|m| !m.ends_with(format!("{}", round % 10).as_bytes()) || m.len() > 3);
            set.push(format!("new{round}").into_bytes());
            if next == 0 {
                break;
            }
            cursor = next;
        }
        for m in &set {
            if !m.starts_with(b"new") {
                assert!(seen.contains(m), "{:?} missed", String::from_utf8_lossy(m));
            }
        }
    }

    #[test]
    fn samples_are_distinct_members() {
        let mut rng = Rng::new();
        let all = members(50);
        for count in [0, 1, 10, 49, 50, 80] {
            let picked = rng.sample(all.clone(), count);
            assert_eq!(picked.len(), count.min(50));
            let distinct: HashSet<_> = picked.iter().collect();
            assert_eq!(distinct.len(), picked.len());
            assert!(picked.iter().all(|m| all.contains(m)));
        }
        // Every member can be picked.
        let mut hit = HashSet::new();
        for _ in 0..2000 {
            hit.extend(rng.sample(all.clone(), 1));
        }
        assert_eq!(hit.len(), 50);
    }
}
