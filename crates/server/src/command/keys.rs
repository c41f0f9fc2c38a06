//! The keys commands: the ones that work on a key whatever its kind (expiry, renaming,
//! copying, moving between databases, scanning).

use super::{Action, CommandResult, Ctx, READ_FAST, Spec, WRITE};
use crate::resp::write_integer;
use model::Effect;

/// This family's commands, sorted by name.
pub(super) static SPECS: &[Spec] = &[
    spec!("persist", 2, WRITE, 1, 1, 1, cmd_persist),
    spec!("pttl", 2, READ_FAST, 1, 1, 1, cmd_pttl),
    spec!("ttl", 2, READ_FAST, 1, 1, 1, cmd_ttl),
];

/// TTL and PTTL: -2 if absent, -1 if persistent, else the time left (`unit_ms` per unit,
/// rounded as Redis does: TTL rounds to the nearest second).
fn time_left(ctx: &mut Ctx<'_>, key: &[u8], unit_ms: i64) -> Result<i64, super::CommandError> {
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
    write_integer(out, n);
    Ok(Action::Continue)
}

fn cmd_pttl(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let n = time_left(ctx, &args[1], 1)?;
    write_integer(out, n);
    Ok(Action::Continue)
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
    write_integer(out, i64::from(done));
    Ok(Action::Continue)
}
