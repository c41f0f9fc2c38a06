//! The strings commands, the bit commands on strings among them.

use super::keys::wrongtype;
use super::{
    Action, CommandError, CommandResult, Ctx, READ, READ_FAST, Spec, WRITE, WRITE_SLOW, is, ok,
    parse_int,
};
use crate::resp::{
    parse_strict_i64, write_array_header, write_bulk, write_integer, write_map_header, write_null,
    write_optional,
};
use model::{Bytes, Db, Effect, Kind, Value, View};

/// This family's commands, sorted by name.
pub(super) static SPECS: &[Spec] = &[
    spec!("append", 3, WRITE, 1, 1, 1, cmd_append),
    spec!("bitcount", -2, READ, 1, 1, 1, cmd_bitcount),
    spec!("bitop", -4, WRITE_SLOW, 2, -1, 1, cmd_bitop),
    spec!("bitpos", -3, READ, 1, 1, 1, cmd_bitpos),
    spec!("decr", 2, WRITE, 1, 1, 1, cmd_decr),
    spec!("decrby", 3, WRITE, 1, 1, 1, cmd_decrby),
    spec!("get", 2, READ_FAST, 1, 1, 1, cmd_get),
    spec!("getbit", 3, READ_FAST, 1, 1, 1, cmd_getbit),
    spec!("getdel", 2, &["write", "fast"], 1, 1, 1, cmd_getdel),
    spec!("getex", -2, &["write", "fast"], 1, 1, 1, cmd_getex),
    spec!("getrange", 4, READ, 1, 1, 1, cmd_getrange),
    spec!("getset", 3, WRITE, 1, 1, 1, cmd_getset),
    spec!("incr", 2, WRITE, 1, 1, 1, cmd_incr),
    spec!("incrby", 3, WRITE, 1, 1, 1, cmd_incrby),
    spec!("incrbyfloat", 3, WRITE, 1, 1, 1, cmd_incrbyfloat),
    spec!("lcs", -3, READ, 1, 2, 1, cmd_lcs),
    spec!("mget", -2, READ_FAST, 1, -1, 1, cmd_mget),
    spec!("mset", -3, WRITE_SLOW, 1, -1, 2, cmd_mset),
    spec!("msetnx", -3, WRITE_SLOW, 1, -1, 2, cmd_msetnx),
    spec!("psetex", 4, WRITE_SLOW, 1, 1, 1, cmd_psetex),
    spec!("set", -3, WRITE_SLOW, 1, 1, 1, cmd_set),
    spec!("setbit", 4, WRITE_SLOW, 1, 1, 1, cmd_setbit),
    spec!("setex", 4, WRITE_SLOW, 1, 1, 1, cmd_setex),
    spec!("setnx", 3, WRITE, 1, 1, 1, cmd_setnx),
    spec!("setrange", 4, WRITE_SLOW, 1, 1, 1, cmd_setrange),
    spec!("strlen", 2, READ_FAST, 1, 1, 1, cmd_strlen),
    spec!("substr", 4, READ, 1, 1, 1, cmd_substr),
];

/// The largest string a command may build (Redis's default `proto-max-bulk-len`, 512 MiB).
pub(super) const STRING_MAX: u64 = 512 << 20;

const TOO_BIG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";

/// A string key's bytes: `None` if absent, WRONGTYPE if it holds another kind.
pub(super) fn string_at<V: View + ?Sized>(
    t: &V,
    db: Db,
    key: &[u8],
) -> Result<Option<Bytes>, CommandError> {
    match t.kind(db, key) {
        None => Ok(None),
        Some(Kind::String) => Ok(t.string(db, key)),
        Some(_) => Err(wrongtype()),
    }
}

fn put(db: Db, key: &[u8], value: Bytes, expire_at_ms: i64) -> Effect {
    Effect::Put {
        db,
        key: key.to_vec(),
        value: Value::String(value),
        expire_at_ms,
    }
}

/// Checks that `len + extra` bytes stay within [`STRING_MAX`].
fn check_length(len: u64, extra: u64) -> Result<(), CommandError> {
    match len.checked_add(extra) {
        Some(total) if total <= STRING_MAX => Ok(()),
        _ => Err(CommandError::Other(TOO_BIG.into())),
    }
}

fn int_reply(out: &mut Vec<u8>, n: i64) -> CommandResult {
    write_integer(out, n);
    Ok(Action::Continue)
}

fn len_reply(out: &mut Vec<u8>, n: usize) -> CommandResult {
    int_reply(out, i64::try_from(n).unwrap_or(i64::MAX))
}

// ---------------------------------------------------------------------------------------------
// GET, SET and kin
// ---------------------------------------------------------------------------------------------

fn cmd_get(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let key = &args[1];
    let value = ctx.read(&[key], |t| string_at(t, db, key))?;
    write_optional(out, value.as_deref(), ctx.resp3());
    Ok(Action::Continue)
}

/// A deadline option: milliseconds (already converted from seconds), relative to now or not.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Deadline {
    ms: i64,
    relative: bool,
}

impl Deadline {
    /// The absolute deadline, or the invalid-expire error on overflow.
    fn at(self, now: i64, name: &'static str) -> Result<i64, CommandError> {
        if self.relative {
            self.ms
                .checked_add(now)
                .ok_or(CommandError::InvalidExpire(name))
        } else {
            Ok(self.ms)
        }
    }
}

/// Parses a positive expire amount as Redis's `getExpireMillisecondsOrReply` does.
fn parse_deadline(
    arg: &[u8],
    seconds: bool,
    relative: bool,
    name: &'static str,
) -> Result<Deadline, CommandError> {
    let n = parse_int(arg)?;
    let invalid = CommandError::InvalidExpire(name);
    if n <= 0 {
        return Err(invalid);
    }
    let ms = if seconds {
        n.checked_mul(1000).ok_or(invalid)?
    } else {
        n
    };
    Ok(Deadline { ms, relative })
}

/// The options of SET (`set`) or GETEX.
#[derive(Debug, Default, Clone, PartialEq)]
struct StringOptions {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    persist: bool,
    /// The time option, checked (SET reports its error at once, GETEX only after it found a
    /// string under the key, as Redis does).
    deadline: Option<Result<Deadline, CommandError>>,
}

/// Parses SET's `[NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]` or GETEX's
/// `[EX s|PX ms|EXAT s|PXAT ms|PERSIST]` with Redis's rules: an option may repeat, options
/// that conflict are a syntax error, and the time is checked after the whole list is read.
fn parse_string_options(
    options: &[Vec<u8>],
    set: bool,
    name: &'static str,
) -> Result<StringOptions, CommandError> {
    let mut o = StringOptions::default();
    // Which time option was given (0 none, 1 EX, 2 PX, 3 EXAT, 4 PXAT) and its argument.
    let mut unit = 0u8;
    let mut amount: Option<&[u8]> = None;
    let mut i = 0;
    while i < options.len() {
        let arg = &options[i];
        let next = options.get(i + 1);
        let time_word = ["ex", "px", "exat", "pxat"]
            .iter()
            .position(|w| is(arg, w))
            .map(|p| p as u8 + 1);
        if set && is(arg, "nx") && !o.xx {
            o.nx = true;
        } else if set && is(arg, "xx") && !o.nx {
            o.xx = true;
        } else if set && is(arg, "get") {
            o.get = true;
        } else if set && is(arg, "keepttl") && !o.persist && unit == 0 {
            o.keepttl = true;
        } else if !set && is(arg, "persist") && unit == 0 && !o.keepttl {
            o.persist = true;
        } else if let (Some(word), Some(value)) = (time_word, next)
            && !o.keepttl
            && !o.persist
            && (unit == 0 || unit == word)
        {
            unit = word;
            amount = Some(value);
            i += 1;
        } else {
            return Err(CommandError::Syntax);
        }
        i += 1;
    }
    if let Some(amount) = amount {
        let seconds = unit == 1 || unit == 3;
        let relative = unit <= 2;
        o.deadline = Some(parse_deadline(amount, seconds, relative, name));
    }
    Ok(o)
}

/// SET key value [NX|XX] [GET] [EX|PX|EXAT|PXAT time|KEEPTTL].
fn cmd_set(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let o = parse_string_options(&args[3..], true, "set")?;
    let deadline = o.deadline.clone().transpose()?;
    let db = ctx.db();
    let (key, value) = (&args[1], &args[2]);
    // (did it write, the old value for GET)
    let (written, old) = ctx.write(&[key], |t| {
        let now = t.now_ms();
        let at = deadline.map(|d| d.at(now, "set")).transpose()?;
        let old = if o.get { string_at(t, db, key)? } else { None };
        // Only NX and XX look at whether the key exists (a plain SET needs no lookup).
        if (o.nx || o.xx) && (t.kind(db, key).is_some() == o.nx) {
            return Ok((false, old));
        }
        let effect = match at {
            Some(at) if at <= now => Effect::Del {
                db,
                key: key.clone(),
            },
            Some(at) => put(db, key, value.clone(), at),
            None if o.keepttl => put(db, key, value.clone(), t.expire_at(db, key).unwrap_or(0)),
            None => put(db, key, value.clone(), 0),
        };
        t.apply(vec![effect])?;
        Ok((true, old))
    })?;
    if o.get {
        write_optional(out, old.as_deref(), ctx.resp3());
    } else if written {
        return ok(out);
    } else {
        write_null(out, ctx.resp3());
    }
    Ok(Action::Continue)
}

/// SETEX and PSETEX.
fn set_with_deadline(
    ctx: &mut Ctx<'_>,
    args: &[Vec<u8>],
    out: &mut Vec<u8>,
    seconds: bool,
    name: &'static str,
) -> CommandResult {
    let deadline = parse_deadline(&args[2], seconds, true, name)?;
    let db = ctx.db();
    let (key, value) = (&args[1], &args[3]);
    ctx.write(&[key], |t| {
        let at = deadline.at(t.now_ms(), name)?;
        t.apply(vec![put(db, key, value.clone(), at)])?;
        Ok(())
    })?;
    ok(out)
}

fn cmd_setex(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    set_with_deadline(ctx, args, out, true, "setex")
}

fn cmd_psetex(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    set_with_deadline(ctx, args, out, false, "psetex")
}

fn cmd_setnx(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let (key, value) = (&args[1], &args[2]);
    let done = ctx.write(&[key], |t| {
        if t.kind(db, key).is_some() {
            return Ok(false);
        }
        t.apply(vec![put(db, key, value.clone(), 0)])?;
        Ok(true)
    })?;
    int_reply(out, i64::from(done))
}

fn cmd_getset(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let (key, value) = (&args[1], &args[2]);
    let old = ctx.write(&[key], |t| {
        let old = string_at(t, db, key)?;
        t.apply(vec![put(db, key, value.clone(), 0)])?;
        Ok(old)
    })?;
    write_optional(out, old.as_deref(), ctx.resp3());
    Ok(Action::Continue)
}

fn cmd_getdel(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let key = &args[1];
    let old = ctx.write(&[key], |t| {
        let old = string_at(t, db, key)?;
        if old.is_some() {
            t.apply(vec![Effect::Del {
                db,
                key: key.clone(),
            }])?;
        }
        Ok(old)
    })?;
    write_optional(out, old.as_deref(), ctx.resp3());
    Ok(Action::Continue)
}

/// GETEX key [EX|PX|EXAT|PXAT time|PERSIST].
fn cmd_getex(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let o = parse_string_options(&args[2..], false, "getex")?;
    let db = ctx.db();
    let key = &args[1];
    let value = ctx.write(&[key], |t| {
        let now = t.now_ms();
        let Some(value) = string_at(t, db, key)? else {
            return Ok(None);
        };
        let at = match &o.deadline {
            Some(d) => Some(d.clone()?.at(now, "getex")?),
            None => None,
        };
        let key = key.clone();
        let effect = match at {
            Some(at) if at <= now => Some(Effect::Del { db, key }),
            Some(at) => Some(Effect::Expire { db, key, at_ms: at }),
            None if o.persist && t.expire_at(db, &key).is_some() => {
                Some(Effect::Expire { db, key, at_ms: 0 })
            }
            None => None,
        };
        if let Some(effect) = effect {
            t.apply(vec![effect])?;
        }
        Ok(Some(value))
    })?;
    write_optional(out, value.as_deref(), ctx.resp3());
    Ok(Action::Continue)
}

fn cmd_mget(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let keys: Vec<&[u8]> = args[1..].iter().map(Vec::as_slice).collect();
    let values = ctx.read(&keys, |t| {
        Ok(keys.iter().map(|k| t.string(db, k)).collect::<Vec<_>>())
    })?;
    write_array_header(out, values.len());
    for v in &values {
        write_optional(out, v.as_deref(), ctx.resp3());
    }
    Ok(Action::Continue)
}

/// MSET (`nx` false) and MSETNX: whether the pairs were written.
fn mset(ctx: &mut Ctx<'_>, args: &[Vec<u8>], nx: bool) -> Result<bool, CommandError> {
    if args.len() % 2 == 0 {
        let name = if nx { "msetnx" } else { "mset" };
        return Err(CommandError::Arity(name.into()));
    }
    let db = ctx.db();
    let keys: Vec<&[u8]> = args[1..].iter().step_by(2).map(Vec::as_slice).collect();
    ctx.write(&keys, |t| {
        if nx && keys.iter().any(|k| t.kind(db, k).is_some()) {
            return Ok(false);
        }
        let effects = args[1..]
            .chunks_exact(2)
            .map(|p| put(db, &p[0], p[1].clone(), 0))
            .collect();
        t.apply(effects)?;
        Ok(true)
    })
}

fn cmd_mset(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    mset(ctx, args, false)?;
    ok(out)
}

fn cmd_msetnx(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let done = mset(ctx, args, true)?;
    int_reply(out, i64::from(done))
}

// ---------------------------------------------------------------------------------------------
// Counters
// ---------------------------------------------------------------------------------------------

/// Adds `delta` to the integer in `key` (0 if absent), keeping its deadline.
fn incr_by(ctx: &mut Ctx<'_>, key: &[u8], delta: i64) -> Result<i64, CommandError> {
    let db = ctx.db();
    ctx.write(&[key], |t| {
        let current = match string_at(t, db, key)? {
            None => 0,
            Some(s) => parse_strict_i64(&s).ok_or(CommandError::NotInteger)?,
        };
        let next = current.checked_add(delta).ok_or_else(|| {
            CommandError::Other("ERR increment or decrement would overflow".into())
        })?;
        let at = t.expire_at(db, key).unwrap_or(0);
        t.apply(vec![put(db, key, next.to_string().into_bytes(), at)])?;
        Ok(next)
    })
}

fn cmd_incr(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let n = incr_by(ctx, &args[1], 1)?;
    int_reply(out, n)
}

fn cmd_decr(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let n = incr_by(ctx, &args[1], -1)?;
    int_reply(out, n)
}

fn cmd_incrby(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let delta = parse_int(&args[2])?;
    let n = incr_by(ctx, &args[1], delta)?;
    int_reply(out, n)
}

fn cmd_decrby(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let delta = parse_int(&args[2])?;
    let negated = delta
        .checked_neg()
        .ok_or_else(|| CommandError::Other("ERR decrement would overflow".into()))?;
    let n = incr_by(ctx, &args[1], negated)?;
    int_reply(out, n)
}

/// INCRBYFLOAT key increment, in Redis's long double arithmetic and formatting.
fn cmd_incrbyfloat(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let key = &args[1];
    let text = ctx.write(&[key], |t| {
        let current = string_at(t, db, key)?;
        let value = match &current {
            None => Some(longdouble::Num::ZERO),
            Some(s) => longdouble::parse_or_infinite(s).ok_or(CommandError::NotFloat)?,
        };
        let incr = longdouble::parse_or_infinite(&args[2]).ok_or(CommandError::NotFloat)?;
        // An infinite operand (`inf` parses) makes the sum infinite or NaN.
        let sum = value
            .zip(incr)
            .and_then(|(a, b)| longdouble::add(a, b))
            .ok_or_else(|| {
                CommandError::Other("ERR increment would produce NaN or Infinity".into())
            })?;
        let text = longdouble::format_human(sum).into_bytes();
        let at = t.expire_at(db, key).unwrap_or(0);
        t.apply(vec![put(db, key, text.clone(), at)])?;
        Ok(text)
    })?;
    write_bulk(out, &text);
    Ok(Action::Continue)
}

// ---------------------------------------------------------------------------------------------
// Ranges, lengths, LCS
// ---------------------------------------------------------------------------------------------

fn cmd_append(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let (key, tail) = (&args[1], &args[2]);
    let n = ctx.write(&[key], |t| {
        let (mut value, at) = match string_at(t, db, key)? {
            None => (Vec::new(), 0),
            Some(v) => (v, t.expire_at(db, key).unwrap_or(0)),
        };
        check_length(value.len() as u64, tail.len() as u64)?;
        value.extend_from_slice(tail);
        let n = value.len();
        t.apply(vec![put(db, key, value, at)])?;
        Ok(n)
    })?;
    len_reply(out, n)
}

fn cmd_strlen(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let key = &args[1];
    let n = ctx.read(&[key], |t| {
        string_at(t, db, key)?;
        Ok(t.string_len(db, key))
    })?;
    int_reply(out, i64::try_from(n).unwrap_or(i64::MAX))
}

/// The inclusive byte range `start..=end` of a string of `len` bytes, Redis's rules for
/// negative indices; `None` when empty.
fn clamp_range(start: i64, end: i64, len: i64) -> Option<(usize, usize)> {
    if start < 0 && end < 0 && start > end {
        return None;
    }
    let start = if start < 0 { len + start } else { start }.max(0);
    let end = if end < 0 { len + end } else { end }.max(0).min(len - 1);
    if start > end || len == 0 {
        return None;
    }
    Some((start as usize, end as usize))
}

fn getrange(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let start = parse_int(&args[2])?;
    let end = parse_int(&args[3])?;
    let db = ctx.db();
    let key = &args[1];
    let value = ctx
        .read(&[key], |t| string_at(t, db, key))?
        .unwrap_or_default();
    match clamp_range(start, end, value.len() as i64) {
        Some((s, e)) => write_bulk(out, &value[s..=e]),
        None => write_bulk(out, b""),
    }
    Ok(Action::Continue)
}

fn cmd_getrange(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    getrange(ctx, args, out)
}

fn cmd_substr(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    getrange(ctx, args, out)
}

fn cmd_setrange(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let offset = parse_int(&args[2])?;
    if offset < 0 {
        return Err(CommandError::Other("ERR offset is out of range".into()));
    }
    let offset = offset as u64;
    let db = ctx.db();
    let (key, patch) = (&args[1], &args[3]);
    let n = ctx.write(&[key], |t| {
        let current = string_at(t, db, key)?;
        if patch.is_empty() {
            return Ok(current.map_or(0, |v| v.len()));
        }
        check_length(offset, patch.len() as u64)?;
        let at = if current.is_some() {
            t.expire_at(db, key).unwrap_or(0)
        } else {
            0
        };
        let mut value = current.unwrap_or_default();
        let offset = offset as usize;
        let end = offset + patch.len();
        if value.len() < end {
            value.resize(end, 0);
        }
        value[offset..end].copy_from_slice(patch);
        let n = value.len();
        t.apply(vec![put(db, key, value, at)])?;
        Ok(n)
    })?;
    len_reply(out, n)
}

/// LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN].
fn cmd_lcs(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let (ka, kb) = (&args[1], &args[2]);
    let (a, b) = ctx.read(&[ka, kb], |t| {
        let of = |k: &[u8]| match t.kind(db, k) {
            None => Ok(Vec::new()),
            Some(Kind::String) => Ok(t.string(db, k).unwrap_or_default()),
            Some(_) => Err(CommandError::Other(
                "ERR The specified keys must contain string values".into(),
            )),
        };
        Ok((of(ka)?, of(kb)?))
    })?;
    let (mut idx, mut len, mut with_len, mut min_len) = (false, false, false, 0i64);
    let mut i = 3;
    while i < args.len() {
        let arg = &args[i];
        if is(arg, "idx") {
            idx = true;
        } else if is(arg, "len") {
            len = true;
        } else if is(arg, "withmatchlen") {
            with_len = true;
        } else if is(arg, "minmatchlen") && i + 1 < args.len() {
            min_len = parse_int(&args[i + 1])?.max(0);
            i += 1;
        } else {
            return Err(CommandError::Syntax);
        }
        i += 1;
    }
    if idx && len {
        return Err(CommandError::Other(
            "ERR If you want both the length and indexes, please just use IDX.".into(),
        ));
    }
    let cells = (a.len() as u64 + 1).saturating_mul(b.len() as u64 + 1);
    if cells.saturating_mul(4) > STRING_MAX {
        return Err(CommandError::Other(
            "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len".into(),
        ));
    }
    let lcs = Lcs::new(&a, &b);
    if len && !idx {
        return len_reply(out, lcs.len());
    }
    let (common, ranges) = lcs.walk();
    if !idx {
        write_bulk(out, &common);
        return Ok(Action::Continue);
    }
    let ranges: Vec<_> = ranges
        .into_iter()
        .filter(|r| min_len == 0 || r.len as i64 >= min_len)
        .collect();
    let resp3 = ctx.resp3();
    write_map_header(out, 2, resp3);
    write_bulk(out, b"matches");
    write_array_header(out, ranges.len());
    for r in &ranges {
        write_array_header(out, 2 + usize::from(with_len));
        write_array_header(out, 2);
        write_integer(out, r.a.0 as i64);
        write_integer(out, r.a.1 as i64);
        write_array_header(out, 2);
        write_integer(out, r.b.0 as i64);
        write_integer(out, r.b.1 as i64);
        if with_len {
            write_integer(out, r.len as i64);
        }
    }
    write_bulk(out, b"len");
    len_reply(out, lcs.len())
}

/// The longest-common-subsequence table of two strings.
struct Lcs<'a> {
    a: &'a [u8],
    b: &'a [u8],
    /// `(a.len()+1) x (b.len()+1)`, row-major: the LCS length of `a[..i]` and `b[..j]`.
    table: Vec<u32>,
}

/// One matching run, as LCS IDX reports it (inclusive ranges in each string).
struct Match {
    a: (usize, usize),
    b: (usize, usize),
    len: usize,
}

impl<'a> Lcs<'a> {
    fn new(a: &'a [u8], b: &'a [u8]) -> Self {
        let w = b.len() + 1;
        let mut table = vec![0u32; (a.len() + 1) * w];
        for i in 1..=a.len() {
            for j in 1..=b.len() {
                table[i * w + j] = if a[i - 1] == b[j - 1] {
                    table[(i - 1) * w + j - 1] + 1
                } else {
                    table[(i - 1) * w + j].max(table[i * w + j - 1])
                };
            }
        }
        Lcs { a, b, table }
    }

    fn at(&self, i: usize, j: usize) -> u32 {
        self.table[i * (self.b.len() + 1) + j]
    }

    fn len(&self) -> usize {
        self.at(self.a.len(), self.b.len()) as usize
    }

    /// The common subsequence and its matching runs, found walking back from the ends as
    /// Redis does (so the runs come last first).
    fn walk(&self) -> (Vec<u8>, Vec<Match>) {
        let mut common = vec![0u8; self.len()];
        let mut k = common.len();
        let mut ranges = Vec::new();
        let (mut i, mut j) = (self.a.len(), self.b.len());
        // The run being built: (a start, a end, b start, b end).
        let mut run: Option<(usize, usize, usize, usize)> = None;
        while i > 0 && j > 0 {
            let mut emit = false;
            if self.a[i - 1] == self.b[j - 1] {
                k -= 1;
                common[k] = self.a[i - 1];
                run = Some(match run {
                    None => (i - 1, i - 1, j - 1, j - 1),
                    Some((_, ae, _, be)) => (i - 1, ae, j - 1, be),
                });
                if i == 1 || j == 1 {
                    emit = true;
                }
                i -= 1;
                j -= 1;
            } else {
                if self.at(i - 1, j) > self.at(i, j - 1) {
                    i -= 1;
                } else {
                    j -= 1;
                }
                emit = run.is_some();
            }
            if emit && let Some((a_start, a_end, b_start, b_end)) = run.take() {
                ranges.push(Match {
                    a: (a_start, a_end),
                    b: (b_start, b_end),
                    len: a_end - a_start + 1,
                });
            }
        }
        (common, ranges)
    }
}

// ---------------------------------------------------------------------------------------------
// Bits
// ---------------------------------------------------------------------------------------------

const BIT_OFFSET_ERROR: &str = "ERR bit offset is not an integer or out of range";

/// A bit offset argument: 0 up to (but excluding) 512 MiB worth of bits.
fn parse_bit_offset(arg: &[u8]) -> Result<u64, CommandError> {
    parse_strict_i64(arg)
        .filter(|&n| n >= 0 && ((n as u64) >> 3) < STRING_MAX)
        .map(|n| n as u64)
        .ok_or_else(|| CommandError::Other(BIT_OFFSET_ERROR.into()))
}

fn cmd_setbit(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let offset = parse_bit_offset(&args[2])?;
    let on = match parse_strict_i64(&args[3]) {
        Some(0) => false,
        Some(1) => true,
        _ => {
            return Err(CommandError::Other(
                "ERR bit is not an integer or out of range".into(),
            ));
        }
    };
    let db = ctx.db();
    let key = &args[1];
    let old = ctx.write(&[key], |t| {
        let current = string_at(t, db, key)?;
        let at = if current.is_some() {
            t.expire_at(db, key).unwrap_or(0)
        } else {
            0
        };
        let mut value = current.unwrap_or_default();
        let byte = (offset >> 3) as usize;
        if value.len() <= byte {
            value.resize(byte + 1, 0);
        }
        let mask = 1u8 << (7 - (offset & 7));
        let old = value[byte] & mask != 0;
        if on {
            value[byte] |= mask;
        } else {
            value[byte] &= !mask;
        }
        t.apply(vec![put(db, key, value, at)])?;
        Ok(old)
    })?;
    int_reply(out, i64::from(old))
}

fn cmd_getbit(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let offset = parse_bit_offset(&args[2])?;
    let db = ctx.db();
    let key = &args[1];
    let value = ctx
        .read(&[key], |t| string_at(t, db, key))?
        .unwrap_or_default();
    let bit = value
        .get((offset >> 3) as usize)
        .is_some_and(|b| b & (1 << (7 - (offset & 7))) != 0);
    int_reply(out, i64::from(bit))
}

/// A range of a string in bits, inclusive, from BITCOUNT's or BITPOS's `start end [BYTE|BIT]`.
/// `None` when it is empty.
fn bit_range(start: i64, end: i64, len: u64, bits: bool) -> Option<(u64, u64)> {
    let total = if bits { len as i64 * 8 } else { len as i64 };
    let start = if start < 0 { total + start } else { start }.max(0);
    let end = if end < 0 { total + end } else { end }
        .max(0)
        .min(total - 1);
    if start > end {
        return None;
    }
    let (start, end) = (start as u64, end as u64);
    Some(if bits {
        (start, end)
    } else {
        (start * 8, end * 8 + 7)
    })
}

/// Parses a BYTE|BIT unit word.
fn parse_unit(arg: &[u8]) -> Result<bool, CommandError> {
    if is(arg, "bit") {
        Ok(true)
    } else if is(arg, "byte") {
        Ok(false)
    } else {
        Err(CommandError::Syntax)
    }
}

fn bit_at(value: &[u8], pos: u64) -> bool {
    value[(pos >> 3) as usize] & (1 << (7 - (pos & 7))) != 0
}

/// BITCOUNT key [start end [BYTE|BIT]].
fn cmd_bitcount(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let key = &args[1];
    let Some(value) = ctx.read(&[key], |t| string_at(t, db, key))? else {
        return int_reply(out, 0);
    };
    let range = match args.len() {
        2 => bit_range(0, -1, value.len() as u64, false),
        4 | 5 => {
            let start = parse_int(&args[2])?;
            let end = parse_int(&args[3])?;
            let bits = match args.get(4) {
                Some(unit) => parse_unit(unit)?,
                None => false,
            };
            if start < 0 && end < 0 && start > end {
                None
            } else {
                bit_range(start, end, value.len() as u64, bits)
            }
        }
        _ => return Err(CommandError::Syntax),
    };
    let n = range.map_or(0, |(s, e)| count_bits(&value, s, e));
    int_reply(out, n as i64)
}

/// Set bits in the inclusive bit range `s..=e`.
fn count_bits(value: &[u8], s: u64, e: u64) -> u64 {
    let (first, last) = ((s >> 3) as usize, (e >> 3) as usize);
    let mut n: u64 = value[first..=last]
        .iter()
        .map(|b| u64::from(b.count_ones()))
        .sum();
    // Take away the bits of the edge bytes outside the range.
    let before = !(0xffu8 >> (s & 7));
    n -= u64::from((value[first] & before).count_ones());
    n -= u64::from((value[last] & ((1u16 << (7 - (e & 7))) - 1) as u8).count_ones());
    n
}

/// BITPOS key bit [start [end [BYTE|BIT]]].
fn cmd_bitpos(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let bit = match parse_int(&args[2])? {
        0 => false,
        1 => true,
        _ => {
            return Err(CommandError::Other(
                "ERR The bit argument must be 1 or 0.".into(),
            ));
        }
    };
    let db = ctx.db();
    let key = &args[1];
    let Some(value) = ctx.read(&[key], |t| string_at(t, db, key))? else {
        return int_reply(out, if bit { -1 } else { 0 });
    };
    let len = value.len() as u64;
    let (range, end_given) = match args.len() {
        3 => (bit_range(0, -1, len, false), false),
        4..=6 => {
            let start = parse_int(&args[3])?;
            let bits = match args.get(5) {
                Some(unit) => parse_unit(unit)?,
                None => false,
            };
            let end = match args.get(4) {
                Some(e) => parse_int(e)?,
                None => -1,
            };
            (bit_range(start, end, len, bits), args.len() >= 5)
        }
        _ => return Err(CommandError::Syntax),
    };
    let Some((s, e)) = range else {
        return int_reply(out, -1);
    };
    let skip = if bit { 0x00 } else { 0xff };
    let mut pos = s;
    let found = loop {
        if pos > e {
            break None;
        }
        // Whole bytes that cannot hold the bit are skipped at once.
        if pos & 7 == 0 && pos + 7 <= e && value[(pos >> 3) as usize] == skip {
            pos += 8;
            continue;
        }
        if bit_at(&value, pos) == bit {
            break Some(pos);
        }
        pos += 1;
    };
    let n = match found {
        Some(p) => p as i64,
        None if bit || end_given => -1,
        // Looking for a clear bit with no end: the string is padded with zeros on the right.
        None => (e + 1) as i64,
    };
    int_reply(out, n)
}

/// BITOP AND|OR|XOR|NOT destkey key [key ...]: the length of the string stored.
fn cmd_bitop(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let op = &args[1];
    let op = ["and", "or", "xor", "not"]
        .into_iter()
        .find(|w| is(op, w))
        .ok_or(CommandError::Syntax)?;
    if op == "not" && args.len() != 4 {
        return Err(CommandError::Other(
            "ERR BITOP NOT must be called with a single source key.".into(),
        ));
    }
    let db = ctx.db();
    let dest = &args[2];
    let mut keys: Vec<&[u8]> = vec![dest];
    keys.extend(args[3..].iter().map(Vec::as_slice));
    let n = ctx.write(&keys, |t| {
        let mut sources = Vec::with_capacity(args.len() - 3);
        for k in &args[3..] {
            sources.push(string_at(t, db, k)?.unwrap_or_default());
        }
        let width = sources.iter().map(Vec::len).max().unwrap_or(0);
        let byte = |s: &[u8], j: usize| s.get(j).copied().unwrap_or(0);
        let result: Vec<u8> = (0..width)
            .map(|j| {
                let first = byte(&sources[0], j);
                sources[1..].iter().fold(
                    if op == "not" { !first } else { first },
                    |acc, s| match op {
                        "and" => acc & byte(s, j),
                        "or" => acc | byte(s, j),
                        _ => acc ^ byte(s, j),
                    },
                )
            })
            .collect();
        if result.is_empty() {
            if t.kind(db, dest).is_some() {
                t.apply(vec![Effect::Del {
                    db,
                    key: dest.clone(),
                }])?;
            }
        } else {
            t.apply(vec![put(db, dest, result, 0)])?;
        }
        Ok(width)
    })?;
    len_reply(out, n)
}

// ---------------------------------------------------------------------------------------------
// Long double arithmetic
// ---------------------------------------------------------------------------------------------

/// The x87 80-bit `long double` that Redis's INCRBYFLOAT and HINCRBYFLOAT compute in: numbers
/// parse like glibc's `strtold` (correctly rounded, decimal and hexadecimal), add with one
/// rounding to a 64-bit mantissa (to nearest, ties to even), and print like `%.17Lf` with the
/// trailing zeros removed, which is what those commands store and reply.
pub(super) mod longdouble {
    use std::cmp::Ordering;

    /// Smallest exponent of a mantissa unit (subnormals included): 2^-16445.
    const EXP_MIN: i64 = -16445;
    /// Largest exponent of the unit of a normalized 64-bit mantissa (values below 2^16384).
    const EXP_MAX: i64 = 16384 - 64;
    /// Redis refuses longer numbers (`MAX_LONG_DOUBLE_CHARS`).
    const CHARS_MAX: usize = 5 * 1024;

    /// A finite long double: `(-1)^neg * m * 2^e`.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub(crate) struct Num {
        neg: bool,
        m: u64,
        e: i64,
    }

    impl Num {
        /// Zero.
        pub(crate) const ZERO: Num = Num {
            neg: false,
            m: 0,
            e: 0,
        };
    }

    /// A non-negative big integer, little-endian 32-bit limbs, no high zero limbs.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Big(Vec<u32>);

    impl Big {
        fn from_u64(n: u64) -> Big {
            let mut b = Big(vec![n as u32, (n >> 32) as u32]);
            b.trim();
            b
        }

        fn trim(&mut self) {
            while self.0.last() == Some(&0) {
                self.0.pop();
            }
        }

        fn is_zero(&self) -> bool {
            self.0.is_empty()
        }

        fn bits(&self) -> u64 {
            match self.0.last() {
                None => 0,
                Some(top) => (self.0.len() as u64 - 1) * 32 + u64::from(32 - top.leading_zeros()),
            }
        }

        fn bit(&self, i: u64) -> bool {
            self.0
                .get((i / 32) as usize)
                .is_some_and(|limb| limb >> (i % 32) & 1 == 1)
        }

        /// Whether any bit below `i` is set.
        fn any_below(&self, i: u64) -> bool {
            let full = ((i / 32) as usize).min(self.0.len());
            if self.0[..full].iter().any(|&l| l != 0) {
                return true;
            }
            let rem = i % 32;
            rem != 0
                && self
                    .0
                    .get(full)
                    .is_some_and(|&l| l & ((1u32 << rem) - 1) != 0)
        }

        fn mul_small(&mut self, m: u32) {
            let mut carry = 0u64;
            for limb in &mut self.0 {
                let v = u64::from(*limb) * u64::from(m) + carry;
                *limb = v as u32;
                carry = v >> 32;
            }
            if carry != 0 {
                self.0.push(carry as u32);
            }
        }

        fn add_small(&mut self, a: u32) {
            let mut carry = u64::from(a);
            for limb in &mut self.0 {
                if carry == 0 {
                    return;
                }
                let v = u64::from(*limb) + carry;
                *limb = v as u32;
                carry = v >> 32;
            }
            if carry != 0 {
                self.0.push(carry as u32);
            }
        }

        fn mul_pow10(&mut self, mut k: u64) {
            while k >= 9 {
                self.mul_small(1_000_000_000);
                k -= 9;
            }
            self.mul_small(10u32.pow(k as u32));
            self.trim();
        }

        fn shl(&self, n: u64) -> Big {
            if self.is_zero() {
                return self.clone();
            }
            let (limbs, rem) = ((n / 32) as usize, n % 32);
            let mut out = vec![0u32; limbs];
            let mut carry = 0u32;
            for &l in &self.0 {
                if rem == 0 {
                    out.push(l);
                } else {
                    out.push((l << rem) | carry);
                    carry = l >> (32 - rem);
                }
            }
            if carry != 0 {
                out.push(carry);
            }
            let mut b = Big(out);
            b.trim();
            b
        }

        fn shr(&self, n: u64) -> Big {
            let (limbs, rem) = ((n / 32) as usize, n % 32);
            if limbs >= self.0.len() {
                return Big(Vec::new());
            }
            let src = &self.0[limbs..];
            let mut out = Vec::with_capacity(src.len());
            for (i, &l) in src.iter().enumerate() {
                let high = src.get(i + 1).copied().unwrap_or(0);
                out.push(if rem == 0 {
                    l
                } else {
                    (l >> rem) | (high << (32 - rem))
                });
            }
            let mut b = Big(out);
            b.trim();
            b
        }

        fn cmp(&self, other: &Big) -> Ordering {
            self.0
                .len()
                .cmp(&other.0.len())
                .then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
        }

        fn add(&self, other: &Big) -> Big {
            let mut out = Vec::with_capacity(self.0.len().max(other.0.len()) + 1);
            let mut carry = 0u64;
            for i in 0..self.0.len().max(other.0.len()) {
                let v = u64::from(self.0.get(i).copied().unwrap_or(0))
                    + u64::from(other.0.get(i).copied().unwrap_or(0))
                    + carry;
                out.push(v as u32);
                carry = v >> 32;
            }
            out.push(carry as u32);
            let mut b = Big(out);
            b.trim();
            b
        }

        /// `self - other`, for `self >= other`.
        fn sub(&self, other: &Big) -> Big {
            let mut out = Vec::with_capacity(self.0.len());
            let mut borrow = 0i64;
            for i in 0..self.0.len() {
                let mut v =
                    i64::from(self.0[i]) - i64::from(other.0.get(i).copied().unwrap_or(0)) - borrow;
                borrow = 0;
                if v < 0 {
                    v += 1 << 32;
                    borrow = 1;
                }
                out.push(v as u32);
            }
            let mut b = Big(out);
            b.trim();
            b
        }

        /// `(self / d, whether the remainder is not zero)`, by shifting and subtracting.
        fn div(&self, d: &Big) -> (Big, bool) {
            let n = self.bits();
            let mut q = Big(vec![0u32; self.0.len()]);
            let mut r = Big(Vec::new());
            for i in (0..n).rev() {
                r = r.shl(1);
                if self.bit(i) {
                    r.add_small(1);
                }
                if r.cmp(d) != Ordering::Less {
                    r = r.sub(d);
                    q.0[(i / 32) as usize] |= 1 << (i % 32);
                }
            }
            q.trim();
            (q, !r.is_zero())
        }

        fn div_small(&mut self, d: u32) -> u32 {
            let mut rem = 0u64;
            for limb in self.0.iter_mut().rev() {
                let v = (rem << 32) | u64::from(*limb);
                *limb = (v / u64::from(d)) as u32;
                rem = v % u64::from(d);
            }
            self.trim();
            rem as u32
        }

        fn to_u64(&self) -> u64 {
            u64::from(self.0.first().copied().unwrap_or(0))
                | (u64::from(self.0.get(1).copied().unwrap_or(0)) << 32)
        }

        fn to_decimal(&self) -> String {
            if self.is_zero() {
                return "0".into();
            }
            let mut n = self.clone();
            let mut chunks = Vec::new();
            while !n.is_zero() {
                chunks.push(n.div_small(1_000_000_000));
            }
            let mut s = chunks.pop().unwrap_or(0).to_string();
            for c in chunks.iter().rev() {
                s.push_str(&format!("{c:09}"));
            }
            s
        }

        /// `self >> k` rounded to nearest, ties to even.
        fn shr_round(&self, k: u64) -> Big {
            if k == 0 {
                return self.clone();
            }
            let mut q = self.shr(k);
            let half = self.bit(k - 1);
            if half && (self.any_below(k - 1) || q.bit(0)) {
                q.add_small(1);
            }
            q
        }
    }

    /// The long double nearest to `n * 2^e`: `None` when it overflows; zero when it underflows.
    fn round(n: &Big, e: i64, neg: bool) -> Option<Num> {
        if n.is_zero() {
            return Some(Num { neg, m: 0, e: 0 });
        }
        let len = n.bits() as i64;
        let mut shift = len - 64;
        if e + shift < EXP_MIN {
            shift = EXP_MIN - e;
        }
        let (mut m, mut exp) = if shift <= 0 {
            (n.shl(shift.unsigned_abs()).to_u64() as u128, e + shift)
        } else if shift > len + 1 {
            (0, e + shift)
        } else {
            let q = n.shr_round(shift as u64);
            let m = if q.bits() > 64 {
                1u128 << 64
            } else {
                u128::from(q.to_u64())
            };
            (m, e + shift)
        };
        if m == 1 << 64 {
            m >>= 1;
            exp += 1;
        }
        if m == 0 {
            return Some(Num { neg, m: 0, e: 0 });
        }
        if exp > EXP_MAX {
            return None;
        }
        Some(Num {
            neg,
            m: m as u64,
            e: exp,
        })
    }

    fn digit_value(b: u8, hex: bool) -> Option<u32> {
        match b {
            b'0'..=b'9' => Some(u32::from(b - b'0')),
            b'a'..=b'f' if hex => Some(u32::from(b - b'a' + 10)),
            b'A'..=b'F' if hex => Some(u32::from(b - b'A' + 10)),
            _ => None,
        }
    }

    /// Parses a number as Redis's `string2ld`: the whole string (no spaces, at most 5 KiB), the
    /// grammar of `strtold`; NaN, overflow and underflow to zero are refused. `Some(Err(neg))`
    /// is an infinity (`inf`, `-infinity`).
    fn parse_any(s: &[u8]) -> Option<Result<Num, bool>> {
        if s.is_empty() || s.len() >= CHARS_MAX || s[0].is_ascii_whitespace() || s[0] == 0x0b {
            return None;
        }
        let (neg, body) = match s[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        if body.eq_ignore_ascii_case(b"inf") || body.eq_ignore_ascii_case(b"infinity") {
            return Some(Err(neg));
        }
        let (hex, body) = match body {
            [b'0', b'x' | b'X', rest @ ..] => (true, rest),
            _ => (false, body),
        };
        let radix = if hex { 16 } else { 10 };
        let mut n = Big(Vec::new());
        let mut digits = 0usize;
        let mut frac_digits = 0i64;
        let mut seen_dot = false;
        let mut i = 0;
        while i < body.len() {
            match body[i] {
                b'.' if !seen_dot => seen_dot = true,
                b => match digit_value(b, hex) {
                    Some(d) => {
                        n.mul_small(radix);
                        n.add_small(d);
                        digits += 1;
                        if seen_dot {
                            frac_digits += 1;
                        }
                    }
                    None => break,
                },
            }
            i += 1;
        }
        if digits == 0 {
            return None;
        }
        let mut exp = 0i64;
        if i < body.len() {
            let marker = body[i].to_ascii_lowercase();
            if marker != if hex { b'p' } else { b'e' } {
                return None;
            }
            let rest = &body[i + 1..];
            let (eneg, edigits) = match rest.first() {
                Some(b'-') => (true, &rest[1..]),
                Some(b'+') => (false, &rest[1..]),
                _ => (false, rest),
            };
            if edigits.is_empty() || !edigits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            for &d in edigits {
                exp = (exp * 10 + i64::from(d - b'0')).min(1 << 40);
            }
            if eneg {
                exp = -exp;
            }
        }
        n.trim();
        if n.is_zero() {
            return Some(Ok(Num { neg, m: 0, e: 0 }));
        }
        let value = if hex {
            round(&n, exp - 4 * frac_digits, neg)?
        } else {
            let k = exp - frac_digits;
            // n has between floor((bits-1) log10 2) + 1 and ceil(bits log10 2) digits.
            let bits = n.bits() as i64;
            let lowest = (bits - 1) * 30_103 / 100_000 + k;
            let highest = (bits * 30_103 + 99_999) / 100_000 + k;
            // Long doubles stay below 1.19e4932; below 1.8e-4951 they round to zero.
            if lowest > 4933 || highest < -4951 {
                return None;
            }
            if k >= 0 {
                n.mul_pow10(k as u64);
                round(&n, 0, neg)?
            } else {
                let mut d = Big::from_u64(1);
                d.mul_pow10(k.unsigned_abs());
                let s = (67 + d.bits() as i64 - n.bits() as i64).max(0) as u64;
                let (q, inexact) = n.shl(s).div(&d);
                // A sticky bit below the quotient keeps the rounding exact.
                let mut q = q.shl(1);
                if inexact {
                    q.add_small(1);
                }
                round(&q, -(s as i64) - 1, neg)?
            }
        };
        if value.m == 0 {
            return None;
        }
        Some(Ok(value))
    }

    /// A finite number, or `None` (also for infinities).
    #[cfg(test)]
    fn parse(s: &[u8]) -> Option<Num> {
        parse_any(s)?.ok()
    }

    /// Whether `s` is a number an increment may take, infinities included (they then make
    /// the result infinite: the caller's error).
    pub(crate) fn parse_or_infinite(s: &[u8]) -> Option<Option<Num>> {
        Some(parse_any(s)?.ok())
    }

    /// `a + b` rounded once; `None` if it overflows.
    pub(crate) fn add(a: Num, b: Num) -> Option<Num> {
        if a.m == 0 {
            return Some(b);
        }
        if b.m == 0 {
            return Some(a);
        }
        let top = |x: Num| x.e + i64::from(64 - x.m.leading_zeros());
        if top(a) - top(b) > 140 {
            return Some(a);
        }
        if top(b) - top(a) > 140 {
            return Some(b);
        }
        let e = a.e.min(b.e);
        let ba = Big::from_u64(a.m).shl((a.e - e) as u64);
        let bb = Big::from_u64(b.m).shl((b.e - e) as u64);
        if a.neg == b.neg {
            return round(&ba.add(&bb), e, a.neg);
        }
        match ba.cmp(&bb) {
            Ordering::Equal => Some(Num::ZERO),
            Ordering::Greater => round(&ba.sub(&bb), e, a.neg),
            Ordering::Less => round(&bb.sub(&ba), e, b.neg),
        }
    }

    /// `%.17Lf` with the trailing zeros (and a bare point) removed, `-0` shown as `0`.
    pub(crate) fn format_human(x: Num) -> String {
        let mut p = Big::from_u64(x.m);
        p.mul_pow10(17);
        let scaled = if x.e >= 0 {
            p.shl(x.e as u64)
        } else if x.e.unsigned_abs() > p.bits() + 1 {
            Big(Vec::new())
        } else {
            p.shr_round(x.e.unsigned_abs())
        };
        let mut digits = scaled.to_decimal();
        if digits.len() < 18 {
            digits = format!("{}{digits}", "0".repeat(18 - digits.len()));
        }
        let (int_part, frac) = digits.split_at(digits.len() - 17);
        let frac = frac.trim_end_matches('0');
        let mut s = String::new();
        if x.neg {
            s.push('-');
        }
        s.push_str(int_part);
        if !frac.is_empty() {
            s.push('.');
            s.push_str(frac);
        }
        if s == "-0" { "0".into() } else { s }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn incr(a: &str, b: &str) -> Option<String> {
            let a = parse(a.as_bytes())?;
            let b = parse(b.as_bytes())?;
            add(a, b).map(format_human)
        }

        #[test]
        fn sums_print_like_redis() {
            // Each expectation was read from Redis 7.0.15 (INCRBYFLOAT).
            let cases = [
                ("1000", "0.1", "1000.09999999999999998"),
                ("10.5", "0.1", "10.6"),
                ("123456.789", "0.001", "123456.78999999999999915"),
                ("123456.78999999999999915", "1e20", "100000000000000123456"),
                ("3", "1.1", "4.1"),
                ("0", "5.0e3", "5000"),
                ("0.1", "0.2", "0.3"),
                ("0", "1e-20", "0"),
                ("0", "0x10", "16"),
                ("17179869184", "1.5", "17179869185.5"),
                ("1", "-1.1", "-0.1"),
                ("-1e-20", "0", "0"),
            ];
            for (a, b, want) in cases {
                assert_eq!(incr(a, b).as_deref(), Some(want), "{a} + {b}");
            }
            let max = "179769313486231569995921046774104434048386446944329178485314420765176628\
                       5231243963547018686083870855644287934194255206893087083634511360553578\
                       9727802647761707349897768628839483561816329404559443492953744729062748\
                       0669417384648879122776218333598953852832103282504751611691208117720159\
                       985926376802466863339536384";
            assert_eq!(
                incr("0", "1.7976931348623157e308").as_deref(),
                Some(max),
                "DBL_MAX"
            );
        }

        #[test]
        fn parsing_refuses_what_redis_refuses() {
            for bad in [
                "", " 1", "1 ", "nan", "-nan", "1e", "0x", "1e99999", "1e-99999", "abc", "1.2.3",
                "--1", "1\u{0}2", "e5", ".",
            ] {
                assert!(parse_any(bad.as_bytes()).is_none(), "{bad:?}");
            }
            for good in [
                "1", "-1.5", "+2", ".5", "5.", "1E3", "0x1p3", "0X.8", "0e99999",
            ] {
                assert!(parse(good.as_bytes()).is_some(), "{good:?}");
            }
            assert_eq!(parse_or_infinite(b"-inf"), Some(None));
            assert_eq!(parse_or_infinite(b"Infinity"), Some(None));
            assert_eq!(
                incr("1e4000", "1e4000").as_deref().map(str::len),
                Some(4001)
            );
            assert!(incr("1e4932", "1e4932").is_none(), "overflow");
        }
    }
}
