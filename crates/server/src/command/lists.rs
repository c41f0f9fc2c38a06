//! The lists commands: pushes and pops at either end, ranges, edits by position or by value,
//! moves between lists, and the blocking pops (BLPOP and kin).
//!
//! A blocking command tries once, like its non-blocking twin. When there is nothing to take it
//! writes no reply and returns [`Action::Block`] with its keys and deadline; the server parks the
//! connection and runs the same command again when one of the keys is written. Inside EXEC a
//! blocking command never blocks: it answers at once as a timeout, as Redis does.

use std::time::{Duration, Instant};

use super::{
    Action, CommandError, CommandResult, Ctx, READ, READ_FAST, Spec, WRITE, WRITE_NO_OOM,
    WRITE_SLOW, is, ok, parse_int, write_count,
};
use crate::backend::BackendError;
use crate::resp::{
    write_array_header, write_bulk, write_integer, write_null, write_null_array, write_optional,
};
use model::{Bytes, Db, Effect, Kind, Txn, View};

const WRITE_ONLY: &[&str] = &["write"];
const WRITE_MOVABLE: &[&str] = &["write", "movablekeys"];
const BLOCKING: &[&str] = &["write", "noscript", "blocking"];
const BLOCKING_GROWS: &[&str] = &["write", "denyoom", "noscript", "blocking"];
const BLOCKING_MOVABLE: &[&str] = &["write", "blocking", "movablekeys"];

/// This family's commands, sorted by name (flags, arity and key positions as Redis 7's
/// COMMAND INFO; commands with a key count argument have 0 0 0 and `movablekeys`).
pub(super) static SPECS: &[Spec] = &[
    spec!("blmove", 6, BLOCKING_GROWS, 1, 2, 1, cmd_blmove),
    spec!("blmpop", -5, BLOCKING_MOVABLE, 0, 0, 0, cmd_blmpop),
    spec!("blpop", -3, BLOCKING, 1, -2, 1, cmd_blpop),
    spec!("brpop", -3, BLOCKING, 1, -2, 1, cmd_brpop),
    spec!("brpoplpush", 4, BLOCKING_GROWS, 1, 2, 1, cmd_brpoplpush),
    spec!("lindex", 3, READ, 1, 1, 1, cmd_lindex),
    spec!("linsert", 5, WRITE_SLOW, 1, 1, 1, cmd_linsert),
    spec!("llen", 2, READ_FAST, 1, 1, 1, cmd_llen),
    spec!("lmove", 5, WRITE_SLOW, 1, 2, 1, cmd_lmove),
    spec!("lmpop", -4, WRITE_MOVABLE, 0, 0, 0, cmd_lmpop),
    spec!("lpop", -2, WRITE_NO_OOM, 1, 1, 1, cmd_lpop),
    spec!("lpos", -3, READ, 1, 1, 1, cmd_lpos),
    spec!("lpush", -3, WRITE, 1, 1, 1, cmd_lpush),
    spec!("lpushx", -3, WRITE, 1, 1, 1, cmd_lpushx),
    spec!("lrange", 4, READ, 1, 1, 1, cmd_lrange),
    spec!("lrem", 4, WRITE_ONLY, 1, 1, 1, cmd_lrem),
    spec!("lset", 4, WRITE_SLOW, 1, 1, 1, cmd_lset),
    spec!("ltrim", 4, WRITE_ONLY, 1, 1, 1, cmd_ltrim),
    spec!("rpop", -2, WRITE_NO_OOM, 1, 1, 1, cmd_rpop),
    spec!("rpoplpush", 3, WRITE_SLOW, 1, 2, 1, cmd_rpoplpush),
    spec!("rpush", -3, WRITE, 1, 1, 1, cmd_rpush),
    spec!("rpushx", -3, WRITE, 1, 1, 1, cmd_rpushx),
];

/// The longest timeout argument Redis's `string2ld` reads.
const TIMEOUT_TEXT_MAX: usize = 5 * 1024;

fn wrong_type() -> CommandError {
    CommandError::Backend(BackendError::WrongType)
}

fn err(text: &str) -> CommandError {
    CommandError::Other(text.to_string())
}

/// Whether `key` holds a list: `Ok(false)` if it is absent, WRONGTYPE if it holds another kind.
fn is_list<T: View + ?Sized>(t: &T, db: Db, key: &[u8]) -> Result<bool, CommandError> {
    match t.kind(db, key) {
        None => Ok(false),
        Some(Kind::List) => Ok(true),
        Some(_) => Err(wrong_type()),
    }
}

/// `LEFT` (true) or `RIGHT` (false), else a syntax error.
fn parse_end(arg: &[u8]) -> Result<bool, CommandError> {
    if is(arg, "left") {
        Ok(true)
    } else if is(arg, "right") {
        Ok(false)
    } else {
        Err(CommandError::Syntax)
    }
}

/// An integer >= 0; anything else (not a number, negative) is the error `text`.
fn parse_non_negative(arg: &[u8], text: &str) -> Result<u64, CommandError> {
    parse_int(arg)
        .ok()
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| err(text))
}

/// An integer >= 1; anything else is the error `text`.
fn parse_positive(arg: &[u8], text: &str) -> Result<u64, CommandError> {
    parse_non_negative(arg, text)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| err(text))
}

/// Redis's range rule (LRANGE, LTRIM): the inclusive `start..=stop`, negative indices counted
/// from the end, clamped to a list of `len`, as a half-open range; `None` when it is empty.
fn clamp_range(start: i64, stop: i64, len: u64) -> Option<(u64, u64)> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let from_end = |i: i64| if i < 0 { i.saturating_add(len) } else { i };
    let start = from_end(start).max(0);
    let stop = from_end(stop);
    if start > stop || start >= len {
        return None;
    }
    let stop = stop.min(len - 1);
    Some((start as u64, stop as u64 + 1))
}

/// The position `index` names in a list of `len` (negative: from the end), if it is inside.
fn position(index: i64, len: u64) -> Option<u64> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let i = if index < 0 {
        index.saturating_add(len)
    } else {
        index
    };
    (0..len).contains(&i).then_some(i as u64)
}

/// Removes up to `count` elements from the head (`left`) or tail of the list at `key` (which
/// the caller checked is a list) and returns them in the order they left.
fn pop<T: Txn + ?Sized>(
    t: &mut T,
    db: Db,
    key: &[u8],
    left: bool,
    count: u64,
) -> Result<Vec<Bytes>, CommandError> {
    let len = t.list_len(db, key);
    let n = count.min(len);
    if n == 0 {
        return Ok(Vec::new());
    }
    let elems = if left {
        t.list_range(db, key, 0, n)
    } else {
        let mut tail = t.list_range(db, key, len - n, len);
        tail.reverse();
        tail
    };
    t.apply(vec![Effect::LPop {
        db,
        key: key.to_vec(),
        left,
        count: n,
    }])?;
    Ok(elems)
}

/// The RESP2 null array (`*-1`), or RESP3's null.
fn write_null_list(out: &mut Vec<u8>, resp3: bool) {
    if resp3 {
        write_null(out, true);
    } else {
        write_null_array(out);
    }
}

fn write_elems(out: &mut Vec<u8>, elems: &[Bytes]) {
    write_array_header(out, elems.len());
    for e in elems {
        write_bulk(out, e);
    }
}

// ---------------------------------------------------------------------------------------------
// Pushes and pops
// ---------------------------------------------------------------------------------------------

fn cmd_lpush(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    push(ctx, args, out, true, false)
}

fn cmd_rpush(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    push(ctx, args, out, false, false)
}

fn cmd_lpushx(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    push(ctx, args, out, true, true)
}

fn cmd_rpushx(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    push(ctx, args, out, false, true)
}

/// LPUSH, RPUSH and their X forms (`existing_only`: only onto a list that exists).
fn push(
    ctx: &mut Ctx<'_>,
    args: &[Vec<u8>],
    out: &mut Vec<u8>,
    left: bool,
    existing_only: bool,
) -> CommandResult {
    let db = ctx.db();
    let key = args[1].as_slice();
    let len = ctx.write(&[key], |t| {
        if !is_list(t, db, key)? && existing_only {
            return Ok(0);
        }
        t.apply(vec![Effect::LPush {
            db,
            key: key.to_vec(),
            left,
            elems: args[2..].to_vec(),
        }])?;
        Ok(t.list_len(db, key))
    })?;
    write_count(out, len)
}

fn cmd_lpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    pop_command(ctx, args, out, true)
}

fn cmd_rpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    pop_command(ctx, args, out, false)
}

/// LPOP and RPOP: one element (a bulk string or null), or with a count an array (a null array
/// when the key is absent, as Redis 7).
fn pop_command(
    ctx: &mut Ctx<'_>,
    args: &[Vec<u8>],
    out: &mut Vec<u8>,
    left: bool,
) -> CommandResult {
    if args.len() > 3 {
        let name = if left { "lpop" } else { "rpop" };
        return Err(CommandError::Arity(name.into()));
    }
    let count = match args.get(2) {
        Some(arg) => Some(parse_non_negative(
            arg,
            "ERR value is out of range, must be positive",
        )?),
        None => None,
    };
    let db = ctx.db();
    let key = args[1].as_slice();
    let popped = ctx.write(&[key], |t| {
        if !is_list(t, db, key)? {
            return Ok(None);
        }
        pop(t, db, key, left, count.unwrap_or(1)).map(Some)
    })?;
    let resp3 = ctx.resp3();
    match (count, popped) {
        (None, popped) => write_optional(
            out,
            popped.as_ref().and_then(|v| v.first()).map(Vec::as_slice),
            resp3,
        ),
        (Some(_), None) => write_null_list(out, resp3),
        (Some(_), Some(elems)) => write_elems(out, &elems),
    }
    Ok(Action::Continue)
}

/// LMPOP and BLMPOP's arguments after the key count.
#[derive(Debug)]
struct MultiPop<'a> {
    keys: &'a [Vec<u8>],
    left: bool,
    count: u64,
}

/// Parses `numkeys key... LEFT|RIGHT [COUNT count]` starting at `args[at]`.
fn parse_multi_pop(args: &[Vec<u8>], at: usize) -> Result<MultiPop<'_>, CommandError> {
    let numkeys = parse_positive(&args[at], "ERR numkeys should be greater than 0")?;
    let end_at = usize::try_from(numkeys)
        .ok()
        .and_then(|n| n.checked_add(at + 1))
        .filter(|&i| i < args.len())
        .ok_or(CommandError::Syntax)?;
    let left = parse_end(&args[end_at])?;
    let mut count = None;
    let mut i = end_at + 1;
    while i < args.len() {
        if count.is_none() && is(&args[i], "count") && i + 1 < args.len() {
            count = Some(parse_positive(
                &args[i + 1],
                "ERR count should be greater than 0",
            )?);
            i += 2;
        } else {
            return Err(CommandError::Syntax);
        }
    }
    Ok(MultiPop {
        keys: &args[at + 1..end_at],
        left,
        count: count.unwrap_or(1),
    })
}

/// Pops from the first of `keys` that holds a list (WRONGTYPE for a key of another kind met
/// before one): the key and what left it.
fn multi_pop<T: Txn + ?Sized>(
    t: &mut T,
    db: Db,
    spec: &MultiPop<'_>,
) -> Result<Option<(Bytes, Vec<Bytes>)>, CommandError> {
    for key in spec.keys {
        if is_list(t, db, key)? {
            let elems = pop(t, db, key, spec.left, spec.count)?;
            return Ok(Some((key.clone(), elems)));
        }
    }
    Ok(None)
}

fn write_key_and_elems(out: &mut Vec<u8>, key: &[u8], elems: &[Bytes]) {
    write_array_header(out, 2);
    write_bulk(out, key);
    write_elems(out, elems);
}

fn cmd_lmpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let spec = parse_multi_pop(args, 1)?;
    let db = ctx.db();
    let keys: Vec<&[u8]> = spec.keys.iter().map(Vec::as_slice).collect();
    match ctx.write(&keys, |t| multi_pop(t, db, &spec))? {
        Some((key, elems)) => write_key_and_elems(out, &key, &elems),
        None => write_null_list(out, ctx.resp3()),
    }
    Ok(Action::Continue)
}

// ---------------------------------------------------------------------------------------------
// Reads
// ---------------------------------------------------------------------------------------------

fn cmd_llen(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let key = args[1].as_slice();
    let len = ctx.read(&[key], |t| {
        is_list(t, db, key)?;
        Ok(t.list_len(db, key))
    })?;
    write_count(out, len)
}

fn cmd_lrange(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let start = parse_int(&args[2])?;
    let stop = parse_int(&args[3])?;
    let db = ctx.db();
    let key = args[1].as_slice();
    let elems = ctx.read(&[key], |t| {
        if !is_list(t, db, key)? {
            return Ok(Vec::new());
        }
        Ok(match clamp_range(start, stop, t.list_len(db, key)) {
            Some((from, to)) => t.list_range(db, key, from, to),
            None => Vec::new(),
        })
    })?;
    write_elems(out, &elems);
    Ok(Action::Continue)
}

fn cmd_lindex(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let key = args[1].as_slice();
    // As Redis: the key is looked up (absent: nil, another kind: WRONGTYPE) before the index
    // is parsed.
    let elem =
        ctx.read(&[key], |t| {
            if !is_list(t, db, key)? {
                return Ok(None);
            }
            let index = parse_int(&args[2])?;
            Ok(position(index, t.list_len(db, key))
                .and_then(|i| t.list_range(db, key, i, i + 1).pop()))
        })?;
    write_optional(out, elem.as_deref(), ctx.resp3());
    Ok(Action::Continue)
}

fn cmd_lpos(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let mut rank: i64 = 1;
    let mut count: Option<u64> = None;
    let mut maxlen: u64 = 0;
    let mut i = 3;
    while i < args.len() {
        let Some(value) = args.get(i + 1) else {
            return Err(CommandError::Syntax);
        };
        if is(&args[i], "rank") {
            rank = parse_int(value)?;
            if rank == 0 {
                return Err(err(
                    "ERR RANK can't be zero: use 1 to start from the first match, 2 from the \
                     second ... or use negative to start from the end of the list",
                ));
            }
        } else if is(&args[i], "count") {
            count = Some(parse_non_negative(value, "ERR COUNT can't be negative")?);
        } else if is(&args[i], "maxlen") {
            maxlen = parse_non_negative(value, "ERR MAXLEN can't be negative")?;
        } else {
            return Err(CommandError::Syntax);
        }
        i += 2;
    }
    let from_tail = rank < 0;
    // Redis negates a negative rank in a C long, so the lowest one stays negative: every match
    // qualifies (from the tail), and its COUNT test never stops the search.
    let lowest = rank == i64::MIN;
    let rank = if lowest { 1 } else { rank.unsigned_abs() };
    // How many positions to report: COUNT 0 means all of them.
    let wanted = match count {
        None => 1,
        Some(_) if lowest => u64::MAX,
        Some(0) => u64::MAX,
        Some(c) => c,
    };
    let db = ctx.db();
    let key = args[1].as_slice();
    let element = args[2].as_slice();
    let found = ctx.read(&[key], |t| {
        if !is_list(t, db, key)? {
            return Ok(Vec::new());
        }
        let len = t.list_len(db, key);
        let elems = t.list_range(db, key, 0, len);
        let mut found = Vec::new();
        let mut matches: u64 = 0;
        let scan = if maxlen == 0 { len } else { maxlen.min(len) };
        for k in 0..scan {
            let at = if from_tail { len - 1 - k } else { k };
            if elems.get(at as usize).map(Vec::as_slice) != Some(element) {
                continue;
            }
            matches += 1;
            if matches >= rank {
                found.push(at);
                if found.len() as u64 >= wanted {
                    break;
                }
            }
        }
        Ok(found)
    })?;
    if count.is_some() {
        write_array_header(out, found.len());
        for at in found {
            write_count(out, at)?;
        }
    } else {
        match found.first() {
            Some(&at) => write_integer(out, i64::try_from(at).unwrap_or(i64::MAX)),
            None => write_null(out, ctx.resp3()),
        }
    }
    Ok(Action::Continue)
}

// ---------------------------------------------------------------------------------------------
// Edits
// ---------------------------------------------------------------------------------------------

fn cmd_lset(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let key = args[1].as_slice();
    ctx.write(&[key], |t| {
        // Redis looks the key up before it reads the index.
        if !is_list(t, db, key)? {
            return Err(err("ERR no such key"));
        }
        let index = parse_int(&args[2])?;
        let index =
            position(index, t.list_len(db, key)).ok_or_else(|| err("ERR index out of range"))?;
        t.apply(vec![Effect::LSet {
            db,
            key: key.to_vec(),
            index,
            elem: args[3].clone(),
        }])?;
        Ok(())
    })?;
    ok(out)
}

fn cmd_lrem(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let count = parse_int(&args[2])?;
    let db = ctx.db();
    let key = args[1].as_slice();
    let element = args[3].as_slice();
    let removed = ctx.write(&[key], |t| {
        if !is_list(t, db, key)? {
            return Ok(0);
        }
        let len = t.list_len(db, key);
        let elems = t.list_range(db, key, 0, len);
        let limit = if count == 0 {
            usize::MAX
        } else {
            usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX)
        };
        let matching = |(i, e): (usize, &Bytes)| (e.as_slice() == element).then_some(i as u64);
        let mut indices: Vec<u64> = if count >= 0 {
            elems
                .iter()
                .enumerate()
                .filter_map(matching)
                .take(limit)
                .collect()
        } else {
            let mut v: Vec<u64> = elems
                .iter()
                .enumerate()
                .rev()
                .filter_map(matching)
                .take(limit)
                .collect();
            v.reverse();
            v
        };
        indices.dedup();
        let n = indices.len() as u64;
        if n > 0 {
            t.apply(vec![Effect::LRemAt {
                db,
                key: key.to_vec(),
                indices,
            }])?;
        }
        Ok(n)
    })?;
    write_count(out, removed)
}

fn cmd_ltrim(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let start = parse_int(&args[2])?;
    let stop = parse_int(&args[3])?;
    let db = ctx.db();
    let key = args[1].as_slice();
    ctx.write(&[key], |t| {
        if !is_list(t, db, key)? {
            return Ok(());
        }
        // An empty range empties (and so deletes) the list.
        let (start, end) = clamp_range(start, stop, t.list_len(db, key)).unwrap_or((0, 0));
        t.apply(vec![Effect::LTrim {
            db,
            key: key.to_vec(),
            start,
            end,
        }])?;
        Ok(())
    })?;
    ok(out)
}

fn cmd_linsert(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let after = if is(&args[2], "before") {
        false
    } else if is(&args[2], "after") {
        true
    } else {
        return Err(CommandError::Syntax);
    };
    let db = ctx.db();
    let key = args[1].as_slice();
    let pivot = args[3].as_slice();
    let reply = ctx.write(&[key], |t| {
        if !is_list(t, db, key)? {
            return Ok(0);
        }
        let len = t.list_len(db, key);
        let Some(at) = t
            .list_range(db, key, 0, len)
            .iter()
            .position(|e| e.as_slice() == pivot)
        else {
            return Ok(-1);
        };
        t.apply(vec![Effect::LInsert {
            db,
            key: key.to_vec(),
            index: at as u64 + u64::from(after),
            elem: args[4].clone(),
        }])?;
        Ok(i64::try_from(t.list_len(db, key)).unwrap_or(i64::MAX))
    })?;
    write_integer(out, reply);
    Ok(Action::Continue)
}

// ---------------------------------------------------------------------------------------------
// Moves
// ---------------------------------------------------------------------------------------------

/// Moves one element from the head (`from_left`) or tail of `src` to the head (`to_left`) or
/// tail of `dst` and returns it; `None` if `src` is absent. WRONGTYPE if either key holds
/// another kind (the destination is checked only when there is something to move).
fn move_one<T: Txn + ?Sized>(
    t: &mut T,
    db: Db,
    src: &[u8],
    dst: &[u8],
    from_left: bool,
    to_left: bool,
) -> Result<Option<Bytes>, CommandError> {
    if !is_list(t, db, src)? {
        return Ok(None);
    }
    is_list(t, db, dst)?;
    let len = t.list_len(db, src);
    let at = if from_left { 0 } else { len.saturating_sub(1) };
    let Some(elem) = t.list_range(db, src, at, at + 1).pop() else {
        return Ok(None);
    };
    let effects = if src == dst && len == 1 {
        // Rotating a one-element list changes nothing; popping it would delete the key (and
        // its deadline) before the push made it anew. Rewrite the element in place instead, so
        // the write is still seen.
        vec![Effect::LSet {
            db,
            key: src.to_vec(),
            index: 0,
            elem: elem.clone(),
        }]
    } else {
        vec![
            Effect::LPop {
                db,
                key: src.to_vec(),
                left: from_left,
                count: 1,
            },
            Effect::LPush {
                db,
                key: dst.to_vec(),
                left: to_left,
                elems: vec![elem.clone()],
            },
        ]
    };
    t.apply(effects)?;
    Ok(Some(elem))
}

fn lmove(
    ctx: &mut Ctx<'_>,
    src: &[u8],
    dst: &[u8],
    from_left: bool,
    to_left: bool,
) -> Result<Option<Bytes>, CommandError> {
    let db = ctx.db();
    ctx.write(&[src, dst], |t| {
        move_one(t, db, src, dst, from_left, to_left)
    })
}

fn cmd_lmove(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let from_left = parse_end(&args[3])?;
    let to_left = parse_end(&args[4])?;
    let moved = lmove(ctx, &args[1], &args[2], from_left, to_left)?;
    write_optional(out, moved.as_deref(), ctx.resp3());
    Ok(Action::Continue)
}

fn cmd_rpoplpush(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let moved = lmove(ctx, &args[1], &args[2], false, true)?;
    write_optional(out, moved.as_deref(), ctx.resp3());
    Ok(Action::Continue)
}

// ---------------------------------------------------------------------------------------------
// Blocking commands
// ---------------------------------------------------------------------------------------------

/// Parses a blocking command's timeout in seconds as Redis 7.0's `getTimeoutFromObjectOrReply`
/// does: a float (strtold grammar, no leading space, no NaN) times 1000, truncated to whole
/// milliseconds. 0 (also any timeout under a millisecond) means forever. A value whose
/// milliseconds do not fit a 64-bit integer (`inf`, `1e30`) is "negative", because that is what
/// the C conversion makes of it.
fn parse_timeout(arg: &[u8]) -> Result<u64, CommandError> {
    let not_float = || err("ERR timeout is not a float or out of range");
    let text = std::str::from_utf8(arg).map_err(|_| not_float())?;
    if text.is_empty()
        || text.len() >= TIMEOUT_TEXT_MAX
        || text.starts_with(|c: char| c.is_ascii_whitespace() || c == '\x0b')
    {
        return Err(not_float());
    }
    let seconds: f64 = match parse_hex_float(text) {
        Some(v) => v,
        None => text.parse().map_err(|_| not_float())?,
    };
    if seconds.is_nan() {
        return Err(not_float());
    }
    let ms = (seconds * 1000.0).trunc();
    // i64's range as f64: [-2^63, 2^63).
    if !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&ms) || ms < 0.0 {
        return Err(err("ERR timeout is negative"));
    }
    Ok(ms as u64)
}

/// strtold's hexadecimal form (`0x10`, `-0x1.8p3`, `0x.8P-1`), which Redis's timeouts take;
/// `None` if `text` is not one.
fn parse_hex_float(text: &str) -> Option<f64> {
    let (negative, rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let rest = rest
        .strip_prefix("0x")
        .or_else(|| rest.strip_prefix("0X"))?;
    let (mantissa, exponent) = match rest.find(['p', 'P']) {
        Some(at) => (&rest[..at], Some(&rest[at + 1..])),
        None => (rest, None),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    let mut value = 0.0f64;
    for c in int_part.chars() {
        value = value * 16.0 + f64::from(c.to_digit(16)?);
    }
    let mut scale = 1.0 / 16.0;
    for c in frac_part.chars() {
        value += f64::from(c.to_digit(16)?) * scale;
        scale /= 16.0;
    }
    if let Some(exponent) = exponent {
        let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        // Past +-100000 the result is 0 or infinite anyway.
        let e: i32 = exponent.parse().unwrap_or(if exponent.starts_with('-') {
            -100_000
        } else {
            100_000
        });
        value *= 2f64.powi(e.clamp(-100_000, 100_000));
    }
    Some(if negative { -value } else { value })
}

/// Parks the connection on `keys` of `db` until `timeout_ms` after `now` (0: forever).
fn park(db: Db, keys: &[Vec<u8>], timeout_ms: u64, now: Instant) -> Action {
    let deadline = if timeout_ms == 0 {
        None
    } else {
        // A deadline past what `Instant` can hold is as good as never.
        now.checked_add(Duration::from_millis(timeout_ms))
    };
    Action::Block {
        keys: keys.iter().map(|k| (db, k.clone())).collect(),
        deadline,
    }
}

/// How a blocking command's context answers when there is nothing to take.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    /// Inside EXEC: never block.
    in_exec: bool,
    resp3: bool,
    db: Db,
}

impl Waiting {
    fn of(ctx: &Ctx<'_>) -> Waiting {
        Waiting {
            in_exec: ctx.in_exec(),
            resp3: ctx.resp3(),
            db: ctx.db(),
        }
    }

    /// Inside EXEC: answer at once as a timeout (a null array, or a null for the moves when
    /// `null_array` is false) and go on. Else write nothing and park on `keys`.
    fn nothing_to_take(
        self,
        keys: &[Vec<u8>],
        timeout_ms: u64,
        null_array: bool,
        out: &mut Vec<u8>,
    ) -> Action {
        if self.in_exec {
            if null_array {
                write_null_list(out, self.resp3);
            } else {
                write_null(out, self.resp3);
            }
            return Action::Continue;
        }
        park(self.db, keys, timeout_ms, Instant::now())
    }
}

fn cmd_blpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    blocking_pop(ctx, args, out, true)
}

fn cmd_brpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    blocking_pop(ctx, args, out, false)
}

/// BLPOP and BRPOP: `[key, element]` from the first key that holds a list.
fn blocking_pop(
    ctx: &mut Ctx<'_>,
    args: &[Vec<u8>],
    out: &mut Vec<u8>,
    left: bool,
) -> CommandResult {
    let last = args.len() - 1;
    let timeout_ms = parse_timeout(&args[last])?;
    let ready = ctx.ready_keys(&args[1..last], Kind::List)?;
    if ready.as_ref().is_some_and(Vec::is_empty) {
        return Ok(Waiting::of(ctx).nothing_to_take(&args[1..last], timeout_ms, true, out));
    }
    let spec = MultiPop {
        keys: ready.as_deref().unwrap_or(&args[1..last]),
        left,
        count: 1,
    };
    let db = ctx.db();
    let keys: Vec<&[u8]> = spec.keys.iter().map(Vec::as_slice).collect();
    match ctx.write(&keys, |t| multi_pop(t, db, &spec))? {
        Some((key, elems)) => {
            write_array_header(out, 2);
            write_bulk(out, &key);
            write_bulk(out, elems.first().map_or(&[][..], Vec::as_slice));
            Ok(Action::Continue)
        }
        None => Ok(Waiting::of(ctx).nothing_to_take(&args[1..last], timeout_ms, true, out)),
    }
}

fn cmd_blmpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    // Redis reads the keys and options before the timeout.
    let mut spec = parse_multi_pop(args, 2)?;
    let timeout_ms = parse_timeout(&args[1])?;
    let all = spec.keys;
    let ready = ctx.ready_keys(all, Kind::List)?;
    if ready.as_ref().is_some_and(Vec::is_empty) {
        return Ok(Waiting::of(ctx).nothing_to_take(all, timeout_ms, true, out));
    }
    if let Some(ready) = &ready {
        spec.keys = ready;
    }
    let db = ctx.db();
    let keys: Vec<&[u8]> = spec.keys.iter().map(Vec::as_slice).collect();
    match ctx.write(&keys, |t| multi_pop(t, db, &spec))? {
        Some((key, elems)) => {
            write_key_and_elems(out, &key, &elems);
            Ok(Action::Continue)
        }
        None => Ok(Waiting::of(ctx).nothing_to_take(all, timeout_ms, true, out)),
    }
}

fn cmd_blmove(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let from_left = parse_end(&args[3])?;
    let to_left = parse_end(&args[4])?;
    blocking_move(ctx, args, out, from_left, to_left, &args[5])
}

fn cmd_brpoplpush(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    blocking_move(ctx, args, out, false, true, &args[3])
}

/// BLMOVE and BRPOPLPUSH: the moved element, or park on the source.
fn blocking_move(
    ctx: &mut Ctx<'_>,
    args: &[Vec<u8>],
    out: &mut Vec<u8>,
    from_left: bool,
    to_left: bool,
    timeout: &[u8],
) -> CommandResult {
    let timeout_ms = parse_timeout(timeout)?;
    if ctx
        .ready_keys(&args[1..2], Kind::List)?
        .is_some_and(|r| r.is_empty())
    {
        return Ok(Waiting::of(ctx).nothing_to_take(&args[1..2], timeout_ms, false, out));
    }
    match lmove(ctx, &args[1], &args[2], from_left, to_left)? {
        Some(elem) => {
            write_bulk(out, &elem);
            Ok(Action::Continue)
        }
        None => Ok(Waiting::of(ctx).nothing_to_take(&args[1..2], timeout_ms, false, out)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::{Keyspace, MemoryKeyspace, Scope};

    fn words(line: &str) -> Vec<Vec<u8>> {
        line.split(' ').map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn timeouts_parse_like_redis_7_0() {
        let ms = |s: &str| parse_timeout(s.as_bytes());
        assert_eq!(ms("0"), Ok(0));
        assert_eq!(ms("1"), Ok(1000));
        assert_eq!(ms("1.5"), Ok(1500));
        assert_eq!(ms(".25"), Ok(250));
        assert_eq!(ms("2e1"), Ok(20_000));
        // strtold's hexadecimal floats, as Redis takes them.
        assert_eq!(ms("0x10"), Ok(16_000));
        assert_eq!(ms("0X1.8p1"), Ok(3_000));
        assert_eq!(ms("0x.8"), Ok(500));
        assert_eq!(ms("-0x1"), Err(err("ERR timeout is negative")));
        assert_eq!(ms("0x1p2000"), Err(err("ERR timeout is negative")));
        // Under a millisecond truncates to 0: forever, as in Redis.
        assert_eq!(ms("0.0001"), Ok(0));
        assert_eq!(ms("-0.0001"), Ok(0));
        let not_float = Err(err("ERR timeout is not a float or out of range"));
        let negative = Err(err("ERR timeout is negative"));
        for bad in [
            "x", "", " 1", "1 ", "nan", "1e", "--1", "1.2.3", "0x", "0x.", "0xg", "0x1p", "0x1p+",
        ] {
            assert_eq!(ms(bad), not_float, "{bad:?}");
        }
        for neg in ["-1", "-0.5", "inf", "-inf", "1e30", "9223372036854775.808"] {
            assert_eq!(ms(neg), negative, "{neg:?}");
        }
        assert_eq!(parse_timeout(&[0xff]), not_float);
        assert_eq!(ms(&"1".repeat(TIMEOUT_TEXT_MAX)), not_float);
    }

    #[test]
    fn ranges_clamp_like_redis() {
        assert_eq!(clamp_range(0, -1, 5), Some((0, 5)));
        assert_eq!(clamp_range(-100, 100, 5), Some((0, 5)));
        assert_eq!(clamp_range(3, 1, 5), None);
        assert_eq!(clamp_range(5, 10, 5), None);
        assert_eq!(clamp_range(-2, -1, 5), Some((3, 5)));
        assert_eq!(clamp_range(0, -1, 0), None);
        assert_eq!(clamp_range(i64::MIN, i64::MAX, 3), Some((0, 3)));
        assert_eq!(clamp_range(i64::MAX, i64::MIN, 3), None);
        assert_eq!(position(-1, 3), Some(2));
        assert_eq!(position(-4, 3), None);
        assert_eq!(position(3, 3), None);
        assert_eq!(position(i64::MIN, 3), None);
    }

    #[test]
    fn parking_names_every_key_and_the_deadline() {
        let now = Instant::now();
        let keys = words("a b a");
        let Action::Block {
            keys: parked,
            deadline,
        } = park(3, &keys, 1500, now)
        else {
            panic!("not parked");
        };
        assert_eq!(
            parked,
            vec![(3, b"a".to_vec()), (3, b"b".to_vec()), (3, b"a".to_vec())]
        );
        assert_eq!(deadline, Some(now + Duration::from_millis(1500)));
        let Action::Block { deadline, .. } = park(0, &keys, 0, now) else {
            panic!("not parked");
        };
        assert_eq!(deadline, None, "timeout 0 waits forever");
        // The longest timeout (2^63 ms) must not overflow `Instant`: it parks, never panics.
        let Action::Block { deadline, .. } = park(0, &keys, 1 << 63, now) else {
            panic!("not parked");
        };
        assert!(deadline.is_none_or(|d| d > now));
    }

    /// Outside EXEC a blocking command that found nothing writes no reply and parks; inside it
    /// answers at once as Redis 7.0 does: a null array for the pops, a null for the moves.
    #[test]
    fn inside_exec_nothing_to_take_is_a_timeout_at_once() {
        let keys = words("k1 k2");
        for resp3 in [false, true] {
            let outside = Waiting {
                in_exec: false,
                resp3,
                db: 2,
            };
            let mut out = Vec::new();
            let action = outside.nothing_to_take(&keys, 0, true, &mut out);
            assert!(out.is_empty(), "a parked command writes no reply");
            assert_eq!(
                action,
                Action::Block {
                    keys: vec![(2, b"k1".to_vec()), (2, b"k2".to_vec())],
                    deadline: None
                }
            );
            let inside = Waiting {
                in_exec: true,
                ..outside
            };
            for (null_array, want2) in [(true, "*-1\r\n"), (false, "$-1\r\n")] {
                let mut out = Vec::new();
                let action = inside.nothing_to_take(&keys, 0, null_array, &mut out);
                assert_eq!(action, Action::Continue);
                let want = if resp3 { "_\r\n" } else { want2 };
                assert_eq!(String::from_utf8_lossy(&out), want);
            }
        }
    }

    /// The blocking pops find nothing on absent keys (so the handler parks) and take from the
    /// first list among their keys; a key of another kind met first is WRONGTYPE.
    #[test]
    fn blocking_pops_take_from_the_first_list() {
        let ks = MemoryKeyspace::new();
        let args = words("BLMPOP 0 3 none l2 l1 RIGHT COUNT 5");
        let spec = parse_multi_pop(&args, 2).unwrap();
        assert_eq!(spec.keys, &words("none l2 l1")[..]);
        let mut got = None;
        let run = |ks: &MemoryKeyspace, got: &mut Option<_>| {
            ks.transact(Scope::All, true, &mut |t| {
                *got = Some(multi_pop(t, 0, &spec));
                Ok(())
            })
            .unwrap();
        };
        run(&ks, &mut got);
        assert_eq!(got.take().unwrap(), Ok(None));
        ks.transact(Scope::All, true, &mut |t| {
            t.apply(vec![
                Effect::LPush {
                    db: 0,
                    key: b"l1".to_vec(),
                    left: false,
                    elems: words("a b c"),
                },
                Effect::SAdd {
                    db: 0,
                    key: b"s".to_vec(),
                    members: words("x"),
                },
            ])
        })
        .unwrap();
        run(&ks, &mut got);
        assert_eq!(
            got.take().unwrap(),
            Ok(Some((b"l1".to_vec(), words("c b a"))))
        );
        let args = words("BLMPOP 0 2 s l1 LEFT");
        let spec = parse_multi_pop(&args, 2).unwrap();
        ks.transact(Scope::All, true, &mut |t| {
            t.apply(vec![Effect::LPush {
                db: 0,
                key: b"l1".to_vec(),
                left: false,
                elems: words("a"),
            }])?;
            assert_eq!(multi_pop(t, 0, &spec), Err(wrong_type()));
            Ok(())
        })
        .unwrap();
    }

    /// LMOVE of a key onto itself rotates it and keeps its deadline, also when the list has
    /// one element (popping it would delete the key and its deadline with it).
    #[test]
    fn moving_onto_the_same_list_keeps_its_deadline() {
        let ks = MemoryKeyspace::new();
        ks.transact(Scope::All, true, &mut |t| {
            let at = t.now_ms() + 100_000;
            for (key, elems) in [("one", "x"), ("two", "a b")] {
                t.apply(vec![Effect::Put {
                    db: 0,
                    key: key.as_bytes().to_vec(),
                    value: model::Value::List(words(elems)),
                    expire_at_ms: at,
                }])?;
            }
            assert_eq!(
                move_one(t, 0, b"one", b"one", true, false),
                Ok(Some(b"x".to_vec()))
            );
            assert_eq!(t.list_range(0, b"one", 0, 10), words("x"));
            assert_eq!(t.expire_at(0, b"one"), Some(at));
            assert_eq!(
                move_one(t, 0, b"two", b"two", true, false),
                Ok(Some(b"a".to_vec()))
            );
            assert_eq!(t.list_range(0, b"two", 0, 10), words("b a"));
            assert_eq!(t.expire_at(0, b"two"), Some(at));
            assert_eq!(
                move_one(t, 0, b"two", b"two", false, true),
                Ok(Some(b"a".to_vec()))
            );
            assert_eq!(t.list_range(0, b"two", 0, 10), words("a b"));
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn multi_pop_arguments() {
        let parse =
            |line: &str| parse_multi_pop(&words(line), 1).map(|s| (s.keys.len(), s.left, s.count));
        assert_eq!(parse("LMPOP 2 a b LEFT"), Ok((2, true, 1)));
        assert_eq!(parse("LMPOP 1 a right count 7"), Ok((1, false, 7)));
        let numkeys = Err(err("ERR numkeys should be greater than 0"));
        assert_eq!(parse("LMPOP 0 a LEFT"), numkeys);
        assert_eq!(parse("LMPOP -1 a LEFT"), numkeys);
        assert_eq!(parse("LMPOP x a LEFT"), numkeys);
        assert_eq!(parse("LMPOP 2 a LEFT"), Err(CommandError::Syntax));
        assert_eq!(
            parse("LMPOP 9223372036854775807 a LEFT"),
            Err(CommandError::Syntax)
        );
        assert_eq!(parse("LMPOP 1 a UP"), Err(CommandError::Syntax));
        assert_eq!(parse("LMPOP 1 a LEFT COUNT"), Err(CommandError::Syntax));
        assert_eq!(
            parse("LMPOP 1 a LEFT COUNT 1 COUNT 1"),
            Err(CommandError::Syntax)
        );
        let count = Err(err("ERR count should be greater than 0"));
        assert_eq!(parse("LMPOP 1 a LEFT COUNT 0"), count);
        assert_eq!(parse("LMPOP 1 a LEFT COUNT x"), count);
    }
}
