//! Commands for this crate's own tests only (feature `test-commands`): a few keyspace reads and
//! writes and a blocking pop, so the connection machinery (MULTI/EXEC, WATCH, blocking, active
//! expiry) is tested on the data model before the command families serve it. Names start with
//! `t.`, which no Redis command does.

use super::{Action, CommandError, CommandResult, Ctx, Spec, parse_int};
use crate::resp::{Reply, write_array_header, write_bulk, write_integer, write_optional};
use model::{Effect, Kind, Value};
use std::time::{Duration, Instant};

/// This family's commands, sorted by name.
pub(super) static SPECS: &[Spec] = &[
    spec!("t.bmove", 4, &["write"], 1, 2, 1, cmd_bmove),
    spec!("t.bpop", -3, &["write"], 1, -2, 1, cmd_bpop),
    spec!("t.get", 2, &["readonly"], 1, 1, 1, cmd_get),
    spec!("t.len", 2, &["readonly"], 1, 1, 1, cmd_len),
    spec!("t.pexpire", 3, &["write"], 1, 1, 1, cmd_pexpire),
    spec!("t.push", -3, &["write"], 1, 1, 1, cmd_push),
    spec!("t.set", 3, &["write"], 1, 1, 1, cmd_set),
];

fn wrong_type() -> CommandError {
    CommandError::Other("WRONGTYPE Operation against a key holding the wrong kind of value".into())
}

/// t.set key value: a string, no deadline.
fn cmd_set(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    ctx.write(&[&args[1]], |t| {
        t.apply(vec![Effect::Put {
            db,
            key: args[1].clone(),
            value: Value::String(args[2].clone()),
            expire_at_ms: 0,
        }])?;
        Ok(())
    })?;
    super::ok(out)
}

/// t.get key: the string, or null.
fn cmd_get(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let v = ctx.read(&[&args[1]], |t| Ok(t.string(db, &args[1])))?;
    write_optional(out, v.as_deref(), ctx.resp3());
    Ok(Action::Continue)
}

/// t.pexpire key ms: 1 if the key exists.
fn cmd_pexpire(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let ms = parse_int(&args[2])?;
    let done = ctx.write(&[&args[1]], |t| {
        if t.kind(db, &args[1]).is_none() {
            return Ok(false);
        }
        let at_ms = t.now_ms().saturating_add(ms);
        t.apply(vec![Effect::Expire {
            db,
            key: args[1].clone(),
            at_ms,
        }])?;
        Ok(true)
    })?;
    write_integer(out, i64::from(done));
    Ok(Action::Continue)
}

/// t.push key elem...: appends at the tail; the new length.
fn cmd_push(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let key = &args[1];
    let n = ctx.write(&[key], |t| {
        if t.kind(db, key).is_some_and(|k| k != Kind::List) {
            return Err(wrong_type());
        }
        t.apply(vec![Effect::LPush {
            db,
            key: key.clone(),
            left: false,
            elems: args[2..].to_vec(),
        }])?;
        Ok(t.list_len(db, key))
    })?;
    write_integer(out, n as i64);
    Ok(Action::Continue)
}

/// t.bpop key... timeout-ms: pops the head of the first non-empty list as `[key, elem]`, or
/// blocks (0: for ever); the null array when the time runs out (and inside EXEC).
fn cmd_bpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let keys = &args[1..args.len() - 1];
    let timeout_ms = parse_int(&args[args.len() - 1])?;
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let popped = ctx.write(&refs, |t| {
        for key in keys {
            if t.kind(db, key).is_some_and(|k| k != Kind::List) {
                return Err(wrong_type());
            }
            if let Some(elem) = t.list_range(db, key, 0, 1).pop() {
                t.apply(vec![Effect::LPop {
                    db,
                    key: key.clone(),
                    left: true,
                    count: 1,
                }])?;
                return Ok(Some((key.clone(), elem)));
            }
        }
        Ok(None)
    })?;
    match popped {
        Some((key, elem)) => {
            write_array_header(out, 2);
            write_bulk(out, &key);
            write_bulk(out, &elem);
            Ok(Action::Continue)
        }
        None if ctx.in_exec() => {
            Reply::NullArray.encode_as(out, ctx.resp3());
            Ok(Action::Continue)
        }
        None => Ok(Action::Block {
            keys: keys.iter().map(|k| (db, k.clone())).collect(),
            deadline: (timeout_ms > 0)
                .then(|| Instant::now() + Duration::from_millis(timeout_ms.unsigned_abs())),
        }),
    }
}

/// t.len key: a list's length.
fn cmd_len(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let n = ctx.read(&[&args[1]], |t| Ok(t.list_len(db, &args[1])))?;
    write_integer(out, n as i64);
    Ok(Action::Continue)
}

/// t.bmove src dst timeout-ms: moves the head of `src` to the tail of `dst` and replies it, or
/// blocks on `src`.
fn cmd_bmove(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let (src, dst) = (&args[1], &args[2]);
    let timeout_ms = parse_int(&args[3])?;
    let moved = ctx.write(&[src, dst], |t| {
        let Some(elem) = t.list_range(db, src, 0, 1).pop() else {
            return Ok(None);
        };
        t.apply(vec![
            Effect::LPop {
                db,
                key: src.clone(),
                left: true,
                count: 1,
            },
            Effect::LPush {
                db,
                key: dst.clone(),
                left: false,
                elems: vec![elem.clone()],
            },
        ])?;
        Ok(Some(elem))
    })?;
    match moved {
        Some(elem) => {
            write_bulk(out, &elem);
            Ok(Action::Continue)
        }
        None if ctx.in_exec() => {
            Reply::NullArray.encode_as(out, ctx.resp3());
            Ok(Action::Continue)
        }
        None => Ok(Action::Block {
            keys: vec![(db, src.clone())],
            deadline: (timeout_ms > 0)
                .then(|| Instant::now() + Duration::from_millis(timeout_ms.unsigned_abs())),
        }),
    }
}
