//! The hashes commands.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};

use super::keys::{parse_cursor, parse_scan_options, wrongtype};
use super::strings::longdouble;
use super::{
    Action, CommandError, CommandResult, Ctx, READ, READ_FAST, Spec, WRITE, WRITE_NO_OOM, ok,
    parse_int,
};
use crate::glob::glob_match;
use crate::resp::{
    parse_strict_i64, write_array_header, write_bulk, write_integer, write_map_header, write_null,
    write_optional,
};
use model::{Bytes, Db, Effect, Kind, View};

/// This family's commands, sorted by name.
pub(super) static SPECS: &[Spec] = &[
    spec!("hdel", -3, WRITE_NO_OOM, 1, 1, 1, cmd_hdel),
    spec!("hexists", 3, READ_FAST, 1, 1, 1, cmd_hexists),
    spec!("hget", 3, READ_FAST, 1, 1, 1, cmd_hget),
    spec!("hgetall", 2, READ, 1, 1, 1, cmd_hgetall),
    spec!("hincrby", 4, WRITE, 1, 1, 1, cmd_hincrby),
    spec!("hincrbyfloat", 4, WRITE, 1, 1, 1, cmd_hincrbyfloat),
    spec!("hkeys", 2, READ, 1, 1, 1, cmd_hkeys),
    spec!("hlen", 2, READ_FAST, 1, 1, 1, cmd_hlen),
    spec!("hmget", -3, READ_FAST, 1, 1, 1, cmd_hmget),
    spec!("hmset", -4, WRITE, 1, 1, 1, cmd_hmset),
    spec!("hrandfield", -2, READ, 1, 1, 1, cmd_hrandfield),
    spec!("hscan", -3, READ, 1, 1, 1, cmd_hscan),
    spec!("hset", -4, WRITE, 1, 1, 1, cmd_hset),
    spec!("hsetnx", 4, WRITE, 1, 1, 1, cmd_hsetnx),
    spec!("hstrlen", 3, READ_FAST, 1, 1, 1, cmd_hstrlen),
    spec!("hvals", 2, READ, 1, 1, 1, cmd_hvals),
];

/// Fails with WRONGTYPE unless `key` is absent or a hash; whether it exists.
fn check_hash<V: View + ?Sized>(t: &V, db: Db, key: &[u8]) -> Result<bool, CommandError> {
    match t.kind(db, key) {
        None => Ok(false),
        Some(Kind::Hash) => Ok(true),
        Some(_) => Err(wrongtype()),
    }
}

fn int_reply(out: &mut Vec<u8>, n: i64) -> CommandResult {
    write_integer(out, n);
    Ok(Action::Continue)
}

fn len_reply(out: &mut Vec<u8>, n: u64) -> CommandResult {
    int_reply(out, i64::try_from(n).unwrap_or(i64::MAX))
}

/// Runs `f` on the hash at `args[1]` (empty if absent), WRONGTYPE for another kind.
fn read_hash<R>(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    f: impl FnOnce(&dyn View, Db) -> R,
) -> Result<R, CommandError> {
    let db = ctx.db();
    ctx.read(&[key], |t| {
        check_hash(t, db, key)?;
        Ok(f(t, db))
    })
}

// ---------------------------------------------------------------------------------------------
// Writes
// ---------------------------------------------------------------------------------------------

/// HSET and HMSET: the number of fields that are new.
fn hset(ctx: &mut Ctx<'_>, args: &[Vec<u8>], name: &str) -> Result<u64, CommandError> {
    if args.len() % 2 != 0 {
        return Err(CommandError::Arity(name.into()));
    }
    let db = ctx.db();
    let key = &args[1];
    ctx.write(&[key], |t| {
        check_hash(t, db, key)?;
        // HSET only adds or replaces fields, so the new ones are what the count grew by (a
        // field named twice counts once on both sides; no lookup, no copy of old values).
        let before = t.hash_len(db, key);
        let pairs = args[2..]
            .chunks_exact(2)
            .map(|p| (p[0].clone(), p[1].clone()))
            .collect();
        t.apply(vec![Effect::HSet {
            db,
            key: key.clone(),
            pairs,
        }])?;
        Ok(t.hash_len(db, key).saturating_sub(before))
    })
}

fn cmd_hset(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let n = hset(ctx, args, "hset")?;
    len_reply(out, n)
}

fn cmd_hmset(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    hset(ctx, args, "hmset")?;
    ok(out)
}

fn cmd_hsetnx(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let (key, field, value) = (&args[1], &args[2], &args[3]);
    let done = ctx.write(&[key], |t| {
        check_hash(t, db, key)?;
        if t.hash_get(db, key, field).is_some() {
            return Ok(false);
        }
        t.apply(vec![Effect::HSet {
            db,
            key: key.clone(),
            pairs: vec![(field.clone(), value.clone())],
        }])?;
        Ok(true)
    })?;
    int_reply(out, i64::from(done))
}

fn cmd_hdel(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let key = &args[1];
    let n = ctx.write(&[key], |t| {
        if !check_hash(t, db, key)? {
            return Ok(0);
        }
        let mut seen: HashSet<&[u8]> = HashSet::new();
        let mut gone: Vec<&[u8]> = Vec::new();
        for field in &args[2..] {
            if t.hash_get(db, key, field).is_some() && seen.insert(field) {
                gone.push(field);
            }
        }
        if !gone.is_empty() {
            t.apply(vec![Effect::HDel {
                db,
                key: key.clone(),
                fields: gone.iter().map(|f| f.to_vec()).collect(),
            }])?;
        }
        Ok(gone.len() as u64)
    })?;
    len_reply(out, n)
}

/// HINCRBY key field increment.
fn cmd_hincrby(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let delta = parse_int(&args[3])?;
    let db = ctx.db();
    let (key, field) = (&args[1], &args[2]);
    let n = ctx.write(&[key], |t| {
        check_hash(t, db, key)?;
        let current = match t.hash_get(db, key, field) {
            None => 0,
            Some(v) => parse_strict_i64(&v)
                .ok_or_else(|| CommandError::Other("ERR hash value is not an integer".into()))?,
        };
        let next = current.checked_add(delta).ok_or_else(|| {
            CommandError::Other("ERR increment or decrement would overflow".into())
        })?;
        t.apply(vec![Effect::HSet {
            db,
            key: key.clone(),
            pairs: vec![(field.clone(), next.to_string().into_bytes())],
        }])?;
        Ok(next)
    })?;
    int_reply(out, n)
}

/// HINCRBYFLOAT key field increment, in Redis's long double arithmetic.
fn cmd_hincrbyfloat(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let incr = longdouble::parse_or_infinite(&args[3])
        .ok_or(CommandError::NotFloat)?
        .ok_or_else(|| CommandError::Other("ERR value is NaN or Infinity".into()))?;
    let db = ctx.db();
    let (key, field) = (&args[1], &args[2]);
    let text = ctx.write(&[key], |t| {
        check_hash(t, db, key)?;
        let current = match t.hash_get(db, key, field) {
            None => Some(longdouble::Num::ZERO),
            Some(v) => longdouble::parse_or_infinite(&v)
                .ok_or_else(|| CommandError::Other("ERR hash value is not a float".into()))?,
        };
        let sum = current
            .and_then(|c| longdouble::add(c, incr))
            .ok_or_else(|| {
                CommandError::Other("ERR increment would produce NaN or Infinity".into())
            })?;
        let text = longdouble::format_human(sum).into_bytes();
        t.apply(vec![Effect::HSet {
            db,
            key: key.clone(),
            pairs: vec![(field.clone(), text.clone())],
        }])?;
        Ok(text)
    })?;
    write_bulk(out, &text);
    Ok(Action::Continue)
}

// ---------------------------------------------------------------------------------------------
// Reads
// ---------------------------------------------------------------------------------------------

fn cmd_hget(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let field = &args[2];
    let value = read_hash(ctx, &args[1], |t, db| t.hash_get(db, &args[1], field))?;
    write_optional(out, value.as_deref(), ctx.resp3());
    Ok(Action::Continue)
}

fn cmd_hmget(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let values = read_hash(ctx, &args[1], |t, db| {
        args[2..]
            .iter()
            .map(|f| t.hash_get(db, &args[1], f))
            .collect::<Vec<_>>()
    })?;
    write_array_header(out, values.len());
    for v in &values {
        write_optional(out, v.as_deref(), ctx.resp3());
    }
    Ok(Action::Continue)
}

fn cmd_hexists(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let found = read_hash(ctx, &args[1], |t, db| {
        t.hash_get(db, &args[1], &args[2]).is_some()
    })?;
    int_reply(out, i64::from(found))
}

fn cmd_hlen(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let n = read_hash(ctx, &args[1], |t, db| t.hash_len(db, &args[1]))?;
    len_reply(out, n)
}

fn cmd_hstrlen(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let n = read_hash(ctx, &args[1], |t, db| {
        t.hash_get(db, &args[1], &args[2]).map_or(0, |v| v.len())
    })?;
    len_reply(out, n as u64)
}

fn all_pairs(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Vec<(Bytes, Bytes)>, CommandError> {
    read_hash(ctx, key, |t, db| t.hash_all(db, key))
}

/// What [`write_fields`] puts in the reply of each field.
#[derive(Clone, Copy, PartialEq)]
enum Part {
    /// Field and value (HGETALL: a map in RESP3).
    Both,
    /// The field (HKEYS).
    Field,
    /// The value (HVALS).
    Value,
}

/// The reply of HGETALL, HKEYS or HVALS, written from the store's bytes as they are walked (no
/// copy of the hash). The header, which needs the count, goes in front once the walk is done.
fn write_fields(ctx: &mut Ctx<'_>, key: &[u8], part: Part, out: &mut Vec<u8>) -> CommandResult {
    let resp3 = ctx.resp3();
    let start = out.len();
    let walked = read_hash(ctx, key, |t, db| {
        t.hash_each(db, key, &mut |field, value| {
            if part != Part::Value {
                write_bulk(out, field);
            }
            if part != Part::Field {
                write_bulk(out, value);
            }
        })
    });
    let n = match walked {
        Ok(n) => n,
        Err(e) => {
            out.truncate(start);
            return Err(e);
        }
    };
    let mut head = Vec::with_capacity(24);
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    match part {
        Part::Both => write_map_header(&mut head, n, resp3),
        Part::Field | Part::Value => write_array_header(&mut head, n),
    }
    out.splice(start..start, head);
    Ok(Action::Continue)
}

fn cmd_hgetall(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    write_fields(ctx, &args[1], Part::Both, out)
}

fn cmd_hkeys(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    write_fields(ctx, &args[1], Part::Field, out)
}

fn cmd_hvals(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    write_fields(ctx, &args[1], Part::Value, out)
}

/// Whether Redis 7.0 keeps these pairs as a listpack (128 entries of at most 64 bytes).
fn is_small(pairs: &[(Bytes, Bytes)]) -> bool {
    pairs.len() <= 128 && pairs.iter().all(|(f, v)| f.len() <= 64 && v.len() <= 64)
}

/// FNV-1a of a field: the fixed order HSCAN walks a large hash in.
fn field_hash(field: &[u8]) -> u64 {
    field.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// HSCAN key cursor [MATCH pattern] [COUNT count]. A hash Redis would keep as a listpack is
/// returned whole, as Redis does. A larger one is walked in the order of a fixed hash of its
/// fields: the cursor is the hash to resume from, and a step ends after all the fields that
/// share its last hash, so a field present for the whole scan is returned at least once
/// whatever else changes.
fn cmd_hscan(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let cursor = parse_cursor(&args[2])?;
    let db = ctx.db();
    let key = &args[1];
    let pairs = ctx.read(&[key], |t| {
        if !check_hash(t, db, key)? {
            return Ok(None);
        }
        Ok(Some(t.hash_all(db, key)))
    })?;
    let Some(pairs) = pairs else {
        write_array_header(out, 2);
        write_bulk(out, b"0");
        write_array_header(out, 0);
        return Ok(Action::Continue);
    };
    let opts = parse_scan_options(&args[3..], false)?;
    let (step, next): (Vec<&(Bytes, Bytes)>, u64) = if is_small(&pairs) {
        (pairs.iter().collect(), 0)
    } else {
        let mut order: Vec<(u64, &(Bytes, Bytes))> = pairs
            .iter()
            .map(|p| (field_hash(&p.0), p))
            .filter(|(h, _)| *h >= cursor)
            .collect();
        order.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.0.cmp(&b.1.0)));
        let mut taken = order.len().min(opts.count);
        while taken > 0 && taken < order.len() && order[taken].0 == order[taken - 1].0 {
            taken += 1;
        }
        let next = if taken == order.len() {
            0
        } else {
            order[taken - 1].0.wrapping_add(1)
        };
        (order[..taken].iter().map(|(_, p)| *p).collect(), next)
    };
    let found: Vec<_> = step
        .into_iter()
        .filter(|(f, _)| opts.pattern.is_none_or(|p| glob_match(p, f)))
        .collect();
    write_array_header(out, 2);
    write_bulk(out, next.to_string().as_bytes());
    write_array_header(out, found.len() * 2);
    for (f, v) in found {
        write_bulk(out, f);
        write_bulk(out, v);
    }
    Ok(Action::Continue)
}

/// A small random number generator (SplitMix64) seeded per call from a global counter and the
/// clock, for HRANDFIELD.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        static SEED: AtomicU64 = AtomicU64::new(0x853c_49e6_748f_ea9b);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Rng(SEED.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed) ^ nanos)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Most fields a negative HRANDFIELD count may ask for (Redis has no limit and builds the whole
/// reply; here a larger count is refused rather than exhausting memory).
const RANDOM_REPLY_MAX: u64 = 10_000_000;

/// HRANDFIELD key [count [WITHVALUES]].
fn cmd_hrandfield(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let resp3 = ctx.resp3();
    let key = &args[1];
    if args.len() == 2 {
        let pairs = all_pairs(ctx, key)?;
        if pairs.is_empty() {
            write_null(out, resp3);
        } else {
            let pick = Rng::new().below(pairs.len());
            write_bulk(out, &pairs[pick].0);
        }
        return Ok(Action::Continue);
    }
    let count = parse_int(&args[2])?;
    if count == i64::MIN {
        return Err(CommandError::Other(
            "ERR value is out of range, value must between -9223372036854775807 and \
             9223372036854775807"
                .into(),
        ));
    }
    let with_values = match args.get(3) {
        None => false,
        Some(w) if args.len() == 4 && super::is(w, "withvalues") => true,
        Some(_) => return Err(CommandError::Syntax),
    };
    if with_values && !(-i64::MAX / 2..=i64::MAX / 2).contains(&count) {
        return Err(CommandError::Other("ERR value is out of range".into()));
    }
    let pairs = all_pairs(ctx, key)?;
    if pairs.is_empty() || count == 0 {
        write_array_header(out, 0);
        return Ok(Action::Continue);
    }
    let mut rng = Rng::new();
    let chosen: Vec<usize> = if count < 0 {
        if count.unsigned_abs() > RANDOM_REPLY_MAX {
            return Err(CommandError::Other("ERR value is out of range".into()));
        }
        // Repeats allowed: `-count` independent draws.
        let n = count.unsigned_abs();
        (0..n).map(|_| rng.below(pairs.len())).collect()
    } else if count as u64 >= pairs.len() as u64 {
        (0..pairs.len()).collect()
    } else {
        // Distinct fields: a partial Fisher-Yates shuffle.
        let mut order: Vec<usize> = (0..pairs.len()).collect();
        let n = count as usize;
        for i in 0..n {
            let j = i + rng.below(order.len() - i);
            order.swap(i, j);
        }
        order.truncate(n);
        order
    };
    let per = if with_values && !resp3 { 2 } else { 1 };
    write_array_header(out, chosen.len() * per);
    for i in chosen {
        let (f, v) = &pairs[i];
        if with_values && resp3 {
            write_array_header(out, 2);
        }
        write_bulk(out, f);
        if with_values {
            write_bulk(out, v);
        }
    }
    Ok(Action::Continue)
}
