//! The keys commands: the ones that work on a key whatever its kind (existence, expiry,
//! renaming, copying, moving between databases, scanning, flushing).

use std::collections::HashSet;

use super::{
    Action, CommandError, CommandResult, Ctx, READ, READ_FAST, SCAN_COUNT_DEFAULT, SCAN_COUNT_MAX,
    Spec, WRITE_NO_OOM, WRITE_SLOW, is, ok, parse_int, quote, sub_arity,
};
use crate::backend::BackendError;
use crate::glob::glob_match;
use crate::resp::{
    write_array_header, write_bulk, write_integer, write_null, write_optional, write_simple,
};
use model::{DATABASES, Db, Effect, Kind, Scope, Value};

/// This family's commands, sorted by name.
pub(super) static SPECS: &[Spec] = &[
    spec!("copy", -3, WRITE_SLOW, 1, 2, 1, cmd_copy),
    spec!("dbsize", 1, READ_FAST, 0, 0, 0, cmd_dbsize),
    spec!("del", -2, &["write"], 1, -1, 1, cmd_del),
    spec!("exists", -2, READ_FAST, 1, -1, 1, cmd_exists),
    spec!("expire", -3, WRITE_NO_OOM, 1, 1, 1, cmd_expire),
    spec!("expireat", -3, WRITE_NO_OOM, 1, 1, 1, cmd_expireat),
    spec!("expiretime", 2, READ_FAST, 1, 1, 1, cmd_expiretime),
    spec!("flushall", -1, &["write"], 0, 0, 0, cmd_flushall),
    spec!("flushdb", -1, &["write"], 0, 0, 0, cmd_flushdb),
    spec!("keys", 2, READ, 0, 0, 0, cmd_keys),
    spec!("memory", -2, READ, 0, 0, 0, cmd_memory),
    spec!("move", 3, WRITE_NO_OOM, 1, 1, 1, cmd_move),
    spec!("object", -2, &[], 0, 0, 0, cmd_object),
    spec!("persist", 2, WRITE_NO_OOM, 1, 1, 1, cmd_persist),
    spec!("pexpire", -3, WRITE_NO_OOM, 1, 1, 1, cmd_pexpire),
    spec!("pexpireat", -3, WRITE_NO_OOM, 1, 1, 1, cmd_pexpireat),
    spec!("pexpiretime", 2, READ_FAST, 1, 1, 1, cmd_pexpiretime),
    spec!("pttl", 2, READ_FAST, 1, 1, 1, cmd_pttl),
    spec!("randomkey", 1, READ, 0, 0, 0, cmd_randomkey),
    spec!("rename", 3, &["write"], 1, 2, 1, cmd_rename),
    spec!("renamenx", 3, WRITE_NO_OOM, 1, 2, 1, cmd_renamenx),
    spec!("scan", -2, READ, 0, 0, 0, cmd_scan),
    spec!("swapdb", 3, &["write", "fast"], 0, 0, 0, cmd_swapdb),
    spec!("touch", -2, READ_FAST, 1, -1, 1, cmd_touch),
    spec!("ttl", 2, READ_FAST, 1, 1, 1, cmd_ttl),
    spec!("type", 2, READ_FAST, 1, 1, 1, cmd_type),
    spec!("unlink", -2, WRITE_NO_OOM, 1, -1, 1, cmd_unlink),
];

/// The WRONGTYPE error.
pub(super) fn wrongtype() -> CommandError {
    CommandError::Backend(BackendError::WrongType)
}

fn int_reply(out: &mut Vec<u8>, n: i64) -> CommandResult {
    write_integer(out, n);
    Ok(Action::Continue)
}

fn count_reply(out: &mut Vec<u8>, n: usize) -> CommandResult {
    int_reply(out, i64::try_from(n).unwrap_or(i64::MAX))
}

fn arg_keys(args: &[Vec<u8>]) -> Vec<&[u8]> {
    args.iter().map(Vec::as_slice).collect()
}

// ---------------------------------------------------------------------------------------------
// Existence and deletion
// ---------------------------------------------------------------------------------------------

/// DEL and UNLINK: the number of keys that existed (a key named twice counts once).
fn delete_keys(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let keys = arg_keys(&args[1..]);
    let n = ctx.write(&keys, |t| {
        let mut effects = Vec::new();
        let mut gone: HashSet<&[u8]> = HashSet::new();
        for &key in &keys {
            if t.kind(db, key).is_some() && gone.insert(key) {
                effects.push(Effect::Del {
                    db,
                    key: key.to_vec(),
                });
            }
        }
        if !effects.is_empty() {
            t.apply(effects)?;
        }
        Ok(gone.len())
    })?;
    count_reply(out, n)
}

fn cmd_del(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    delete_keys(ctx, args, out)
}

fn cmd_unlink(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    delete_keys(ctx, args, out)
}

/// EXISTS and TOUCH: how many of the named keys exist (a key named twice counts twice).
fn count_existing(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let keys = arg_keys(&args[1..]);
    let n = ctx.read(&keys, |t| {
        Ok(keys.iter().filter(|k| t.kind(db, k).is_some()).count())
    })?;
    count_reply(out, n)
}

fn cmd_exists(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    count_existing(ctx, args, out)
}

fn cmd_touch(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    count_existing(ctx, args, out)
}

fn cmd_type(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let key = &args[1];
    let kind = ctx.read(&[key], |t| Ok(t.kind(db, key)))?;
    write_simple(out, kind.map_or("none", Kind::name).as_bytes());
    Ok(Action::Continue)
}

// ---------------------------------------------------------------------------------------------
// Renaming, copying, moving
// ---------------------------------------------------------------------------------------------

/// RENAME (`nx` false) and RENAMENX: the source's value and deadline move to the destination.
fn rename(ctx: &mut Ctx<'_>, args: &[Vec<u8>], nx: bool) -> Result<bool, CommandError> {
    let db = ctx.db();
    let (src, dst) = (&args[1], &args[2]);
    ctx.write(&[src, dst], |t| {
        let Some(value) = t.value(db, src) else {
            return Err(CommandError::Other("ERR no such key".into()));
        };
        if src == dst {
            return Ok(!nx);
        }
        if nx && t.kind(db, dst).is_some() {
            return Ok(false);
        }
        let expire_at_ms = t.expire_at(db, src).unwrap_or(0);
        t.apply(vec![
            Effect::Del {
                db,
                key: src.clone(),
            },
            Effect::Put {
                db,
                key: dst.clone(),
                value,
                expire_at_ms,
            },
        ])?;
        Ok(true)
    })
}

fn cmd_rename(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    rename(ctx, args, false)?;
    ok(out)
}

fn cmd_renamenx(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let done = rename(ctx, args, true)?;
    int_reply(out, i64::from(done))
}

/// A 32-bit integer argument, with Redis's `getIntFromObjectOrReply` errors.
fn parse_c_int(arg: &[u8]) -> Result<i64, CommandError> {
    let n = parse_int(arg)?;
    if i32::try_from(n).is_err() {
        return Err(CommandError::Other(
            "ERR value is out of range, value must between -2147483648 and 2147483647".into(),
        ));
    }
    Ok(n)
}

fn db_in_range(n: i64) -> Result<Db, CommandError> {
    if (0..DATABASES as i64).contains(&n) {
        Ok(n as Db)
    } else {
        Err(CommandError::Other("ERR DB index is out of range".into()))
    }
}

const SAME_OBJECT: &str = "ERR source and destination objects are the same";

/// COPY source destination [DB destination-db] [REPLACE].
fn cmd_copy(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let (src, dst) = (&args[1], &args[2]);
    let mut replace = false;
    let mut dst_db = db;
    let mut i = 3;
    while i < args.len() {
        if is(&args[i], "replace") {
            replace = true;
        } else if is(&args[i], "db") && i + 1 < args.len() {
            dst_db = db_in_range(parse_c_int(&args[i + 1])?)?;
            i += 1;
        } else {
            return Err(CommandError::Syntax);
        }
        i += 1;
    }
    if dst_db == db && src == dst {
        return Err(CommandError::Other(SAME_OBJECT.into()));
    }
    let scope = [(db, src.as_slice()), (dst_db, dst.as_slice())];
    let done = ctx.run(Scope::Keys(&scope), true, |t| {
        let Some(value) = t.value(db, src) else {
            return Ok(false);
        };
        if t.kind(dst_db, dst).is_some() && !replace {
            return Ok(false);
        }
        let expire_at_ms = t.expire_at(db, src).unwrap_or(0);
        t.apply(vec![Effect::Put {
            db: dst_db,
            key: dst.clone(),
            value,
            expire_at_ms,
        }])?;
        Ok(true)
    })?;
    int_reply(out, i64::from(done))
}

/// MOVE key db: 1 if moved, 0 if the key is absent here or present there.
fn cmd_move(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let key = &args[1];
    let dst_db = db_in_range(parse_c_int(&args[2])?)?;
    if dst_db == db {
        return Err(CommandError::Other(SAME_OBJECT.into()));
    }
    let scope = [(db, key.as_slice()), (dst_db, key.as_slice())];
    let done = ctx.run(Scope::Keys(&scope), true, |t| {
        let Some(value) = t.value(db, key) else {
            return Ok(false);
        };
        if t.kind(dst_db, key).is_some() {
            return Ok(false);
        }
        let expire_at_ms = t.expire_at(db, key).unwrap_or(0);
        t.apply(vec![
            Effect::Del {
                db,
                key: key.clone(),
            },
            Effect::Put {
                db: dst_db,
                key: key.clone(),
                value,
                expire_at_ms,
            },
        ])?;
        Ok(true)
    })?;
    int_reply(out, i64::from(done))
}

/// SWAPDB a b.
fn cmd_swapdb(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let index = |arg: &[u8], which: &str| {
        parse_int(arg)
            .ok()
            .filter(|n| i32::try_from(*n).is_ok())
            .ok_or_else(|| CommandError::Other(format!("ERR invalid {which} DB index")))
    };
    let a = index(&args[1], "first")?;
    let b = index(&args[2], "second")?;
    let (a, b) = (db_in_range(a)?, db_in_range(b)?);
    if a != b {
        ctx.run(Scope::All, true, |t| {
            t.apply(vec![Effect::SwapDb { a, b }])?;
            Ok(())
        })?;
    }
    ok(out)
}

// ---------------------------------------------------------------------------------------------
// Whole databases
// ---------------------------------------------------------------------------------------------

/// Every live key of `db` as the EXEC's transaction sees it. Inside EXEC the transaction holds
/// the whole keyspace, so the commands that read all of a database (DBSIZE, KEYS, SCAN,
/// RANDOMKEY) read through it rather than wait on their own transaction's locks.
fn keys_in_exec(ctx: &mut Ctx<'_>, db: model::Db) -> Result<Vec<model::KeyInfo>, CommandError> {
    ctx.run(Scope::All, false, |t| {
        t.db_keys(db).ok_or_else(|| {
            CommandError::Other("ERR internal: EXEC's transaction cannot list keys".into())
        })
    })
}

fn cmd_dbsize(ctx: &mut Ctx<'_>, _: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let n = if ctx.in_exec() {
        ctx.run(Scope::All, false, |t| {
            t.db_len(db).ok_or_else(|| {
                CommandError::Other("ERR internal: EXEC's transaction cannot count keys".into())
            })
        })?
    } else {
        ctx.keyspace()?.dbsize(db)?
    };
    int_reply(out, i64::try_from(n).unwrap_or(i64::MAX))
}

/// FLUSHDB/FLUSHALL's optional ASYNC or SYNC (both do the same here).
fn flush_mode(args: &[Vec<u8>]) -> Result<(), CommandError> {
    match args.len() {
        1 => Ok(()),
        2 if is(&args[1], "async") || is(&args[1], "sync") => Ok(()),
        _ => Err(CommandError::Syntax),
    }
}

fn cmd_flushdb(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    flush_mode(args)?;
    let db = ctx.db();
    ctx.run(Scope::All, true, |t| {
        t.apply(vec![Effect::FlushDb { db }])?;
        Ok(())
    })?;
    ok(out)
}

fn cmd_flushall(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    flush_mode(args)?;
    ctx.run(Scope::All, true, |t| {
        t.apply(vec![Effect::FlushAll])?;
        Ok(())
    })?;
    ok(out)
}

fn cmd_randomkey(ctx: &mut Ctx<'_>, _: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let key = if ctx.in_exec() {
        let keys = keys_in_exec(ctx, db)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let pick = now.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 16;
        let n = keys.len() as u64;
        (n > 0).then(|| keys[(pick % n.max(1)) as usize].key.clone())
    } else {
        ctx.keyspace()?.random_key(db)?
    };
    write_optional(out, key.as_deref(), ctx.resp3());
    Ok(Action::Continue)
}

/// KEYS pattern: every live key of the database that matches.
fn cmd_keys(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let pattern = &args[1];
    let all = pattern.as_slice() == b"*";
    let mut keys = Vec::new();
    if ctx.in_exec() {
        keys.extend(
            keys_in_exec(ctx, db)?
                .into_iter()
                .filter(|k| all || glob_match(pattern, &k.key))
                .map(|k| k.key),
        );
    }
    let mut cursor = 0;
    while !ctx.in_exec() {
        let ks = ctx.keyspace()?;
        let (next, batch) = ks.scan(db, cursor, SCAN_COUNT_MAX)?;
        keys.extend(
            batch
                .into_iter()
                .filter(|k| all || glob_match(pattern, &k.key))
                .map(|k| k.key),
        );
        if next == 0 {
            break;
        }
        cursor = next;
    }
    // A scan may return a key twice; KEYS lists each once.
    keys.sort_unstable();
    keys.dedup();
    write_array_header(out, keys.len());
    for k in &keys {
        write_bulk(out, k);
    }
    Ok(Action::Continue)
}

/// Parses a SCAN cursor as Redis does (`strtoul`): an optional sign, decimal digits, no spaces,
/// no overflow; a `-` wraps (`-1` is the largest cursor), and the empty string is 0.
pub(super) fn parse_cursor(arg: &[u8]) -> Result<u64, CommandError> {
    let invalid = || CommandError::Other("ERR invalid cursor".into());
    let (negative, digits) = match arg.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, arg),
    };
    if arg.is_empty() {
        return Ok(0);
    }
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(invalid());
    }
    let mut n: u64 = 0;
    for &d in digits {
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(d - b'0')))
            .ok_or_else(invalid)?;
    }
    Ok(if negative { n.wrapping_neg() } else { n })
}

/// SCAN's and HSCAN's options: MATCH, COUNT and (SCAN only, `with_type`) TYPE.
pub(super) struct ScanOptions<'a> {
    /// The MATCH pattern (`None` for none or `*`).
    pub(super) pattern: Option<&'a [u8]>,
    /// COUNT, clamped to [`SCAN_COUNT_MAX`].
    pub(super) count: usize,
    /// TYPE.
    pub(super) kind: Option<&'a [u8]>,
}

pub(super) fn parse_scan_options(
    args: &[Vec<u8>],
    with_type: bool,
) -> Result<ScanOptions<'_>, CommandError> {
    let mut opts = ScanOptions {
        pattern: None,
        count: SCAN_COUNT_DEFAULT,
        kind: None,
    };
    let mut i = 0;
    while i < args.len() {
        let Some(value) = args.get(i + 1) else {
            return Err(CommandError::Syntax);
        };
        if is(&args[i], "count") {
            let n = parse_int(value)?;
            if n < 1 {
                return Err(CommandError::Syntax);
            }
            opts.count = usize::try_from(n).unwrap_or(usize::MAX).min(SCAN_COUNT_MAX);
        } else if is(&args[i], "match") {
            opts.pattern = (value.as_slice() != b"*").then_some(value.as_slice());
        } else if with_type && is(&args[i], "type") {
            opts.kind = Some(value);
        } else {
            return Err(CommandError::Syntax);
        }
        i += 2;
    }
    Ok(opts)
}

/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type].
fn cmd_scan(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let cursor = parse_cursor(&args[1])?;
    let opts = parse_scan_options(&args[2..], true)?;
    let db = ctx.db();
    let (next, keys) = if ctx.in_exec() {
        // The whole database in one step (a cursor handed out before the EXEC ends the scan).
        let keys = if cursor == 0 {
            keys_in_exec(ctx, db)?
        } else {
            Vec::new()
        };
        (0, keys)
    } else {
        ctx.keyspace()?.scan(db, cursor, opts.count)?
    };
    let keys: Vec<_> = keys
        .into_iter()
        .filter(|k| {
            opts.pattern.is_none_or(|p| glob_match(p, &k.key))
                && opts
                    .kind
                    .is_none_or(|t| t.eq_ignore_ascii_case(k.kind.name().as_bytes()))
        })
        .collect();
    write_array_header(out, 2);
    write_bulk(out, next.to_string().as_bytes());
    write_array_header(out, keys.len());
    for k in &keys {
        write_bulk(out, &k.key);
    }
    Ok(Action::Continue)
}

// ---------------------------------------------------------------------------------------------
// Expiry
// ---------------------------------------------------------------------------------------------

/// TTL and PTTL: -2 if absent, -1 if persistent, else the time left (`unit_ms` per unit,
/// rounded as Redis does: TTL rounds to the nearest second).
fn time_left(ctx: &mut Ctx<'_>, key: &[u8], unit_ms: i64) -> Result<i64, CommandError> {
    let db = ctx.db();
    ctx.read(&[key], |t| {
        Ok(match (t.kind(db, key), t.expire_at(db, key)) {
            (None, _) => -2,
            (Some(_), None) => -1,
            (Some(_), Some(at)) => {
                let left = (at - t.now_ms()).max(0);
                (left + unit_ms / 2) / unit_ms
            }
        })
    })
}

fn cmd_ttl(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let n = time_left(ctx, &args[1], 1000)?;
    int_reply(out, n)
}

fn cmd_pttl(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let n = time_left(ctx, &args[1], 1)?;
    int_reply(out, n)
}

/// EXPIRETIME and PEXPIRETIME: -2 if absent, -1 if persistent, else the deadline.
fn deadline(ctx: &mut Ctx<'_>, key: &[u8], unit_ms: i64) -> Result<i64, CommandError> {
    let db = ctx.db();
    ctx.read(&[key], |t| {
        Ok(match (t.kind(db, key), t.expire_at(db, key)) {
            (None, _) => -2,
            (Some(_), None) => -1,
            (Some(_), Some(at)) => at / unit_ms,
        })
    })
}

fn cmd_expiretime(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let n = deadline(ctx, &args[1], 1000)?;
    int_reply(out, n)
}

fn cmd_pexpiretime(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let n = deadline(ctx, &args[1], 1)?;
    int_reply(out, n)
}

fn cmd_persist(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let key = &args[1];
    let done = ctx.write(&[key], |t| {
        if t.expire_at(db, key).is_none() {
            return Ok(false);
        }
        t.apply(vec![Effect::Expire {
            db,
            key: key.clone(),
            at_ms: 0,
        }])?;
        Ok(true)
    })?;
    int_reply(out, i64::from(done))
}

/// EXPIRE's condition flags.
#[derive(Default)]
struct ExpireFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

fn parse_expire_flags(args: &[Vec<u8>]) -> Result<ExpireFlags, CommandError> {
    let mut f = ExpireFlags::default();
    for arg in args {
        if is(arg, "nx") {
            f.nx = true;
        } else if is(arg, "xx") {
            f.xx = true;
        } else if is(arg, "gt") {
            f.gt = true;
        } else if is(arg, "lt") {
            f.lt = true;
        } else {
            return Err(CommandError::Other(format!(
                "ERR Unsupported option {}",
                quote(arg)
            )));
        }
    }
    if f.nx && (f.xx || f.gt || f.lt) {
        return Err(CommandError::Other(
            "ERR NX and XX, GT or LT options at the same time are not compatible".into(),
        ));
    }
    if f.gt && f.lt {
        return Err(CommandError::Other(
            "ERR GT and LT options at the same time are not compatible".into(),
        ));
    }
    Ok(f)
}

/// EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT: `seconds` when the argument is in seconds, `relative`
/// when it counts from now. A deadline not in the future deletes the key.
fn expire_generic(
    ctx: &mut Ctx<'_>,
    args: &[Vec<u8>],
    out: &mut Vec<u8>,
    name: &'static str,
    seconds: bool,
    relative: bool,
) -> CommandResult {
    let flags = parse_expire_flags(&args[3..])?;
    let amount = parse_int(&args[2])?;
    let invalid = || CommandError::InvalidExpire(name);
    let ms = if seconds {
        amount.checked_mul(1000).ok_or_else(invalid)?
    } else {
        amount
    };
    let db = ctx.db();
    let key = &args[1];
    let done = ctx.write(&[key], |t| {
        let base = if relative { t.now_ms() } else { 0 };
        let when = ms.checked_add(base).ok_or_else(invalid)?;
        if t.kind(db, key).is_none() {
            return Ok(false);
        }
        let current = t.expire_at(db, key);
        let refused = (flags.nx && current.is_some())
            || (flags.xx && current.is_none())
            || (flags.gt && current.is_none_or(|c| when <= c))
            || (flags.lt && current.is_some_and(|c| when >= c));
        if refused {
            return Ok(false);
        }
        let effect = if when <= t.now_ms() {
            Effect::Del {
                db,
                key: key.clone(),
            }
        } else {
            Effect::Expire {
                db,
                key: key.clone(),
                at_ms: when,
            }
        };
        t.apply(vec![effect])?;
        Ok(true)
    })?;
    int_reply(out, i64::from(done))
}

fn cmd_expire(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    expire_generic(ctx, args, out, "expire", true, true)
}

fn cmd_pexpire(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    expire_generic(ctx, args, out, "pexpire", false, true)
}

fn cmd_expireat(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    expire_generic(ctx, args, out, "expireat", true, false)
}

fn cmd_pexpireat(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    expire_generic(ctx, args, out, "pexpireat", false, false)
}

// ---------------------------------------------------------------------------------------------
// OBJECT
// ---------------------------------------------------------------------------------------------

const OBJECT_HELP: &[&str] = &[
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
    "HELP",
    "    Prints this help.",
];

const NO_LFU: &str = "ERR An LFU maxmemory policy is not selected, access frequency not \
                      tracked. Please note that when switching between policies at runtime LRU \
                      and LFU data will take some time to adjust.";

/// The longest string Redis keeps as `embstr`.
const EMBSTR_MAX: usize = 44;
const SHARED_INTEGERS: i64 = 10_000;

/// Whether Redis would keep `s` as an integer (`string2l` on at most 20 bytes).
fn is_int_string(s: &[u8]) -> bool {
    s.len() <= 20 && crate::resp::parse_strict_i64(s).is_some()
}

/// The encoding Redis 7.0 would show for a value built by ordinary commands, by its size and
/// the thresholds CONFIG holds.
fn encoding_of(value: &Value, e: &crate::server::Encoding) -> &'static str {
    let fits = |n: usize, limit: i64| i64::try_from(n).is_ok_and(|n| n <= limit);
    match value {
        Value::String(s) if is_int_string(s) => "int",
        Value::String(s) if s.len() <= EMBSTR_MAX => "embstr",
        Value::String(_) => "raw",
        Value::Hash(pairs) => {
            if fits(pairs.len(), e.hash_max_entries)
                && pairs.iter().all(|(f, v)| {
                    fits(f.len(), e.hash_max_value) && fits(v.len(), e.hash_max_value)
                })
            {
                "listpack"
            } else {
                "hashtable"
            }
        }
        Value::List(_) => "quicklist",
        Value::Set(members) => {
            if fits(members.len(), e.set_max_intset_entries)
                && members.iter().all(|m| is_int_string(m))
            {
                "intset"
            } else {
                "hashtable"
            }
        }
        Value::ZSet(members) => {
            if fits(members.len(), e.zset_max_entries)
                && members.iter().all(|(_, m)| fits(m.len(), e.zset_max_value))
            {
                "listpack"
            } else {
                "skiplist"
            }
        }
    }
}

/// Bytes a key takes in the store, estimated from its value: a keyspace entry (key, header and
/// value) and, for collections, a nested entry per element. Not Redis's figure (its encodings
/// differ), but it grows with the value as Redis's does.
fn memory_estimate(key: &[u8], value: &Value) -> u64 {
    const ENTRY: u64 = 48;
    let items = |n: usize, bytes: usize| n as u64 * ENTRY + bytes as u64;
    ENTRY
        + key.len() as u64
        + match value {
            Value::String(s) => s.len() as u64,
            Value::Hash(p) => items(p.len(), p.iter().map(|(f, v)| f.len() + v.len()).sum()),
            Value::List(l) => items(l.len(), l.iter().map(Vec::len).sum()),
            Value::Set(m) => items(m.len(), m.iter().map(Vec::len).sum()),
            Value::ZSet(z) => items(z.len(), z.iter().map(|(_, m)| m.len() + 16).sum()),
        }
}

const MEMORY_HELP: &[&str] = &[
    "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value (an estimate from the value's",
    "    size in Kavach's store). SAMPLES is accepted and ignored.",
    "HELP",
    "    Print this help.",
];

/// MEMORY USAGE key [SAMPLES count], MEMORY HELP; the other subcommands (allocator and
/// latency figures of Redis's own) are refused.
fn cmd_memory(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let sub = &args[1];
    if is(sub, "help") {
        sub_arity("memory", "help", 2, args.len())?;
        write_array_header(out, MEMORY_HELP.len());
        for line in MEMORY_HELP {
            write_simple(out, line.as_bytes());
        }
        return Ok(Action::Continue);
    }
    if !is(sub, "usage") {
        return Err(CommandError::Other(format!(
            "ERR MEMORY {} is not supported by Kavach (see docs/server.md)",
            quote(sub).to_ascii_uppercase()
        )));
    }
    match &args[2..] {
        [_] => {}
        [_, word, n] if is(word, "samples") => {
            if parse_int(n)? < 0 {
                return Err(CommandError::Syntax);
            }
        }
        _ => return Err(CommandError::Syntax),
    }
    let db = ctx.db();
    let key = &args[2];
    match ctx.read(&[key], |t| Ok(t.value(db, key)))? {
        Some(v) => write_integer(
            out,
            i64::try_from(memory_estimate(key, &v)).unwrap_or(i64::MAX),
        ),
        None => write_null(out, ctx.resp3()),
    }
    Ok(Action::Continue)
}

/// OBJECT ENCODING|FREQ|IDLETIME|REFCOUNT key, OBJECT HELP.
fn cmd_object(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let sub = &args[1];
    let name = ["encoding", "freq", "idletime", "refcount", "help"]
        .into_iter()
        .find(|n| is(sub, n))
        .ok_or_else(|| CommandError::UnknownSubcommand {
            command: "OBJECT",
            sub: quote(sub),
        })?;
    if name == "help" {
        sub_arity("object", name, 2, args.len())?;
        write_array_header(out, OBJECT_HELP.len());
        for line in OBJECT_HELP {
            write_simple(out, line.as_bytes());
        }
        return Ok(Action::Continue);
    }
    sub_arity("object", name, 3, args.len())?;
    let db = ctx.db();
    let key = &args[2];
    let Some(value) = ctx.read(&[key], |t| Ok(t.value(db, key)))? else {
        write_null(out, ctx.resp3());
        return Ok(Action::Continue);
    };
    match name {
        "encoding" => {
            let e = ctx
                .shared
                .settings
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .encoding;
            write_bulk(out, encoding_of(&value, &e).as_bytes())
        }
        "freq" => return Err(CommandError::Other(NO_LFU.into())),
        "idletime" => write_integer(out, 0),
        _ => {
            let shared = matches!(&value, Value::String(s)
                if is_int_string(s)
                    && crate::resp::parse_strict_i64(s)
                        .is_some_and(|n| (0..SHARED_INTEGERS).contains(&n)));
            write_integer(out, if shared { i64::from(i32::MAX) } else { 1 });
        }
    }
    Ok(Action::Continue)
}
