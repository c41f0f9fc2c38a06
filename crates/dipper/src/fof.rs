//! A DIPPER store in a pool running flush on fail (`docs/format/fof.md`).
//!
//! DIPPER's shard state lives in DRAM (arenas rebuilt at open from the newest checkpoint image
//! and the logs), so there is no image to resume without replay: a `saved` record means the
//! pool's bytes are whole, and the store opens by its ordinary crash recovery (checkpoint load
//! and log replay; nothing is skipped).
//!
//! An `armed-unsaved` record (a missed window) is refused with a typed error
//! ([`DipperError::Corrupt`] on structure `flush-on-fail record`, field `state`), before
//! anything is written. DIPPER's recovery rests on the order of its persists (a checkpoint
//! image before the root switch, the root before the old log is cleaned); a missed window
//! keeps or drops each line independently, so the checksums of the logs, the slots and the
//! root can all pass over a state no prefix of the operations produced (the crash test shows
//! one: a new log's records with the checkpoint they follow lost). Such an image is not
//! opened; it is the back end's to restore (WSP's fallback).
//!
//! A `saved` open first runs the recovery over a [`Scratch`] view (writes stay in memory): a
//! refusal there returns before anything touches the pool. Otherwise the record is armed again,
//! durably, before the first write (WSP clears its marker at startup: a power failure during
//! the recovery is then a missed window, refused at the next open), the real open follows, and
//! the lines it wrote (the dry run's, the same recovery) are written back before the store
//! takes writes.

use std::sync::Arc;

use pmem::fof::{self, FofState, Scratch};
use pmem::{Medium, OpenOptions, Pool};

use crate::engine::{Dipper, Machine, Options, RecoveryReport};
use crate::error::{DipperError, Result};

/// How the record said the store should open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FofOpened {
    /// The pool has no flush-on-fail record, or it says `none`: an ordinary open.
    Off,
    /// A save completed: the image is whole.
    Saved,
}

/// Open the DIPPER store of the pool on `medium` (see the module documentation).
pub fn open<M, S>(
    medium: M,
    machine: S,
    opts: Options,
) -> Result<(Dipper<M, S>, RecoveryReport, FofOpened)>
where
    M: Medium + Clone + Send + Sync + 'static,
    S: Machine + Clone,
{
    // Where the record is: the pool's directory, read through a scratch view.
    let probe = Pool::open_medium(
        Arc::new(Scratch::new(medium.clone())),
        &OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        },
    )?;
    let record = probe.region(fof::REGION_NAME).map(|r| r.offset as usize);
    drop(probe);
    let state = match record {
        Some(at) => fof::read(&medium, at)?.state(),
        None => FofState::None,
    };
    let record = match (record, state) {
        (Some(at), FofState::Saved) => at,
        (Some(at), FofState::Armed) => {
            return Err(DipperError::Corrupt {
                structure: "flush-on-fail record",
                offset: at as u64,
                field: "state",
                expected: "saved (a save completed in the window)".into(),
                found: "armed-unsaved: the window was missed, and a DIPPER store cannot show \
                        from its checksums alone that the lines that survived form a prefix \
                        of its operations; restore it from its back end"
                    .into(),
            });
        }
        _ => {
            let pool = Pool::open_medium(medium, &OpenOptions::default())?;
            let (d, rep) = Dipper::open(pool, machine, opts)?;
            return Ok((d, rep, FofOpened::Off));
        }
    };
    // The dry run: a refusal here has written nothing.
    let view = Arc::new(Scratch::new(medium.clone()));
    let dry_pool = Pool::open_medium(Arc::clone(&view), &OpenOptions::default())?;
    let dry_opts = Options {
        background: false,
        ..opts
    };
    let (dry, _) = Dipper::open(dry_pool, machine.clone(), dry_opts)?;
    drop(dry);
    let written = view.written_lines();
    // The marker is cleared (armed) before the first write, as WSP clears it at startup: a
    // power failure during the recovery below is a missed window, never a `saved` record over
    // bytes the recovery left half written.
    fof::arm(&medium, record)?;
    let pool = Pool::open_medium(medium.clone(), &OpenOptions::default())?;
    let (d, rep) = Dipper::open(pool, machine, opts)?;
    for l in written {
        medium.write_back(l, pmem::cpu::CACHE_LINE)?;
    }
    medium.write_back(0, pmem::layout::METADATA_BYTES.min(medium.len()))?;
    medium.fence()?;
    Ok((d, rep, FofOpened::Saved))
}
