//! Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH.
//!
//! MULTI starts queueing a connection's commands (see [`super::execute`]); EXEC runs the queue
//! inside ONE store transaction over the whole keyspace, so every effect of it is durable as one
//! unit and no other client sees a state between two of its commands. WATCH follows keys'
//! versions ([`crate::notify::Notifier::watch`]); EXEC answers a null array, running nothing,
//! when one of them was written since, or expired, or is gone.

use super::{Action, CommandError, CommandResult, Ctx, Spec, lookup, ok};
use crate::resp::{Reply, write_array_header, write_error};
use crate::server::Shared;
use model::{Scope, Txn};

/// Bytes of queued arguments one transaction may hold; a command that would pass it is refused
/// (and the EXEC then fails).
pub(crate) const QUEUE_BYTES_MAX: usize = 512 << 20;

/// Commands a transaction may hold.
pub(crate) const QUEUE_COMMANDS_MAX: usize = 1 << 20;

const NO_OOM: &[&str] = &["noscript", "loading", "stale", "fast", "allow_busy"];

/// This family's commands, sorted by name.
pub(super) static SPECS: &[Spec] = &[
    spec!("discard", 1, NO_OOM, 0, 0, 0, cmd_discard),
    spec!(
        "exec",
        1,
        &["noscript", "loading", "stale", "skip_slowlog"],
        0,
        0,
        0,
        cmd_exec
    ),
    spec!("multi", 1, NO_OOM, 0, 0, 0, cmd_multi),
    spec!("unwatch", 1, NO_OOM, 0, 0, 0, cmd_unwatch),
    spec!("watch", -2, NO_OOM, 1, -1, 1, cmd_watch),
];

/// A connection's open transaction.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    commands: Vec<Vec<Vec<u8>>>,
    bytes: usize,
    /// A command was refused while queueing: EXEC fails with EXECABORT.
    failed: bool,
}

impl Queue {
    /// Commands queued.
    pub(crate) fn len(&self) -> usize {
        self.commands.len()
    }
}

/// Whether a command runs at once inside MULTI instead of being queued.
pub(super) fn runs_inside_multi(name: &str) -> bool {
    matches!(
        name,
        "exec" | "discard" | "multi" | "watch" | "quit" | "reset"
    )
}

/// Commands a transaction may not hold (Redis 7.0's `no-multi`): refused when queued, and the
/// EXEC then fails. A checkpoint or a shutdown inside the EXEC's transaction would wait for
/// the locks that transaction holds.
pub(super) fn refused_inside_multi(name: &str) -> bool {
    matches!(name, "save" | "shutdown" | "sync" | "psync")
}

/// A command was refused while the connection is in MULTI: the EXEC will fail.
pub(super) fn flag_error(session: &mut super::Session) {
    if let Some(q) = session.multi.as_mut() {
        q.failed = true;
    }
}

/// Queues a command (the caller checked that the connection is in MULTI).
pub(super) fn queue(session: &mut super::Session, args: &[Vec<u8>], out: &mut Vec<u8>) {
    let Some(q) = session.multi.as_mut() else {
        return;
    };
    let bytes: usize = args.iter().map(|a| a.len() + 16).sum();
    if q.commands.len() >= QUEUE_COMMANDS_MAX || q.bytes + bytes > QUEUE_BYTES_MAX {
        q.failed = true;
        write_error(out, b"ERR the transaction holds too many commands");
        return;
    }
    q.bytes += bytes;
    q.commands.push(args.to_vec());
    out.extend_from_slice(b"+QUEUED\r\n");
}

fn cmd_multi(ctx: &mut Ctx<'_>, _: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    if ctx.session.multi.is_some() {
        return Err(CommandError::Other(
            "ERR MULTI calls can not be nested".into(),
        ));
    }
    ctx.session.multi = Some(Queue::default());
    ok(out)
}

/// Ends a connection's transaction and WATCH (EXEC, DISCARD, RESET).
pub(super) fn end(shared: &Shared, session: &mut super::Session) {
    session.multi = None;
    shared
        .notifier
        .unwatch(&std::mem::take(&mut session.watched));
}

fn cmd_discard(ctx: &mut Ctx<'_>, _: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    if ctx.session.multi.is_none() {
        return Err(CommandError::Other("ERR DISCARD without MULTI".into()));
    }
    end(ctx.shared, ctx.session);
    ok(out)
}

fn cmd_watch(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    if ctx.session.multi.is_some() {
        return Err(CommandError::Other(
            "ERR WATCH inside MULTI is not allowed".into(),
        ));
    }
    let db = ctx.db();
    let shared = ctx.shared;
    let fresh: Vec<&[u8]> = {
        let mut fresh: Vec<&[u8]> = Vec::new();
        for key in &args[1..] {
            let known = ctx
                .session
                .watched
                .iter()
                .any(|w| w.db == db && w.key == *key);
            if !known && !fresh.contains(&key.as_slice()) {
                fresh.push(key);
            }
        }
        fresh
    };
    if !fresh.is_empty() {
        // Read each key's state and version with the keys locked, so no write slips between.
        let watched = ctx.read(&fresh, |t| {
            Ok(fresh
                .iter()
                .map(|key| shared.notifier.watch(db, key, t.kind(db, key).is_some()))
                .collect::<Vec<_>>())
        })?;
        ctx.session.watched.extend(watched);
    }
    ok(out)
}

fn cmd_unwatch(ctx: &mut Ctx<'_>, _: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let watched = std::mem::take(&mut ctx.session.watched);
    ctx.shared.notifier.unwatch(&watched);
    ok(out)
}

/// Whether a WATCHed key changed: written since WATCH (its version moved), or held a value
/// then and holds none now (it expired, which is no write but a change all the same).
fn watch_broken(shared: &Shared, watched: &[crate::notify::Watched], t: &dyn Txn) -> bool {
    watched
        .iter()
        .any(|w| shared.notifier.changed(w) || (w.live && t.kind(w.db, &w.key).is_none()))
}

fn cmd_exec(ctx: &mut Ctx<'_>, _: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let Some(queue) = ctx.session.multi.take() else {
        return Err(CommandError::Other("ERR EXEC without MULTI".into()));
    };
    let watched = std::mem::take(&mut ctx.session.watched);
    let shared = ctx.shared;
    if queue.failed {
        shared.notifier.unwatch(&watched);
        return Err(CommandError::Other(
            "EXECABORT Transaction discarded because of previous errors.".into(),
        ));
    }
    let resp3 = ctx.resp3();
    let mut action = Action::Continue;
    let result = match shared.backend.keyspace() {
        Some(ks) => {
            let session = &mut *ctx.session;
            let mut commands = Some(queue.commands);
            ks.transact(Scope::All, true, &mut |txn| {
                let Some(commands) = commands.take() else {
                    return Ok(());
                };
                if watch_broken(shared, &watched, txn) {
                    Reply::NullArray.encode_as(out, resp3);
                    return Ok(());
                }
                write_array_header(out, commands.len());
                for args in &commands {
                    let mut inner = Ctx {
                        shared,
                        session,
                        txn: Some(&mut *txn),
                    };
                    let done = run_queued(&mut inner, args, out);
                    if done != Action::Continue {
                        action = done;
                    }
                }
                Ok(())
            })
        }
        None => {
            // A store without the data model runs the queue command by command.
            if watched.iter().any(|w| shared.notifier.changed(w)) {
                Reply::NullArray.encode_as(out, resp3);
            } else {
                write_array_header(out, queue.commands.len());
                for args in &queue.commands {
                    let mut inner = Ctx {
                        shared,
                        session: &mut *ctx.session,
                        txn: None,
                    };
                    let done = run_queued(&mut inner, args, out);
                    if done != Action::Continue {
                        action = done;
                    }
                }
            }
            Ok(())
        }
    };
    shared.notifier.unwatch(&watched);
    result?;
    Ok(action)
}

/// Runs one queued command inside EXEC, its reply (or error) appended to `out`.
fn run_queued(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> Action {
    let Some(spec) = args.first().and_then(|name| lookup(name)) else {
        write_error(out, b"ERR internal: a queued command vanished");
        return Action::Continue;
    };
    let mark = out.len();
    match (spec.handler)(ctx, args, out) {
        Ok(Action::Block { .. }) => {
            // Blocking commands do not block inside EXEC; their handlers answer at once, but
            // one that asks to block gets its timeout reply.
            out.truncate(mark);
            Reply::NullArray.encode_as(out, ctx.resp3());
            Action::Continue
        }
        Ok(action) => action,
        Err(e) => {
            out.truncate(mark);
            write_error(out, e.to_string().as_bytes());
            Action::Continue
        }
    }
}
