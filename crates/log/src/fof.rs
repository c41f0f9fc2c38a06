//! A log in a pool running flush on fail (`docs/format/fof.md`).
//!
//! While the pool runs flush on fail the log's flushes are skipped by the domain (`eadr` on a
//! mapping, `FlushOnFail` in the simulator); its forces still fence and still publish a durable
//! LSN, but what is durable across a power failure is decided by the save
//! (`powerfail::PoolTarget`) and its record:
//!
//! | record at open | what [`open`] does | what is skipped |
//! | --- | --- | --- |
//! | `saved`, hints fit | resumes: tail and next LSN from the record's hints | the walk of the ring from the head, the jump record, the superline's durable-LSN update |
//! | `saved`, hints do not fit (a sanity check: `next_lsn` not below the head's, the tail record-aligned and within one ring of the head, no record with `next_lsn` at the tail) | the ordinary walk, as after a clean shutdown (damage refuses): first read-only, then the record is armed, then the writable walk | nothing |
//! | `armed-unsaved` (missed window) | the ordinary walk after a crash with the superline's `durable_lsn` not trusted: the log ends at the first record failing its checksums (a checksummed prefix, possibly short of records whose force returned), and the claim is brought down to it | nothing; acknowledged records may be lost, which [`Opened::MissedWindow`] says |
//! | `none` | [`Log::open`] as asked | nothing |
//!
//! A writable open in flush-on-fail mode (the first three rows) then writes the log's region
//! back and arms the record again, durably, before it returns, so no append lands on a `saved`
//! image. No open writes anything while the record still says `saved` (the resume writes
//! nothing before the re-arm; the walk of a saved image arms first), so a power failure during
//! an open never leaves a `saved` record over half-written recovery. A refused open (a damaged record in a whole image, a descriptor or superline with no
//! good copy, a record with no good copy) writes nothing.

use std::sync::Arc;
use std::time::Instant;

use pmem::Medium;
use pmem::fof::{self, FofState};

use crate::error::Result;
use crate::log::{Log, LogOptions, Recovery};

/// What [`open`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// The save completed: the log resumed from its hints without walking the ring.
    Resumed {
        /// The tail's ring position.
        tail: u64,
        /// The next LSN.
        next_lsn: u64,
        /// Completed saves so far.
        save_count: u64,
    },
    /// The save completed but its hints did not fit: the ring was walked as after a clean
    /// shutdown.
    SavedWalked(Recovery),
    /// The window was missed: the log is the checksummed prefix the walk found. Records whose
    /// force returned may be missing (nothing was written back).
    MissedWindow(Recovery),
    /// The pool is not running flush on fail: an ordinary open.
    Off(Recovery),
}

/// Open the log in `[base, base + len)` of `medium`, whose pool's flush-on-fail record is at
/// `record` and whose hints start at `hint_at` in it (see the module documentation).
pub fn open<M: Medium>(
    medium: M,
    base: usize,
    len: usize,
    record: usize,
    hint_at: usize,
    opts: &LogOptions,
) -> Result<(Log<M>, Opened)> {
    let found = fof::read(&medium, record)?;
    let (log, opened) = match (found.state(), found.record) {
        (FofState::Saved, Some(r)) => {
            let Some(&[tail, next_lsn]) = r.hints.get(hint_at..hint_at + 2) else {
                let (log, rec) = walk_saved(medium, base, len, record, opts)?;
                return finish(log, Opened::SavedWalked(rec), len, record, opts);
            };
            match Log::open_resumed(medium, base, len, opts, tail, next_lsn)? {
                Ok(log) => (
                    log,
                    Opened::Resumed {
                        tail,
                        next_lsn,
                        save_count: r.save_count,
                    },
                ),
                Err(medium) => {
                    let (log, rec) = walk_saved(medium, base, len, record, opts)?;
                    (log, Opened::SavedWalked(rec))
                }
            }
        }
        (FofState::Armed, _) => {
            let walk = LogOptions {
                clean_shutdown: false,
                ..*opts
            };
            let (log, rec) = Log::open_inner(medium, base, len, &walk, true)?;
            (log, Opened::MissedWindow(rec))
        }
        _ => {
            let (log, rec) = Log::open(medium, base, len, opts)?;
            return Ok((log, Opened::Off(rec)));
        }
    };
    finish(log, opened, len, record, opts)
}

/// A saved image whose hints do not fit: the image is whole (the save completed), so it is
/// walked as after a clean shutdown (damage refuses). The walk is first made read-only (a
/// refusal writes nothing), then the record is armed before the first write (a power failure
/// during the recovery is then a missed window, never a `saved` record over half-written
/// recovery), then the real open.
fn walk_saved<M: Medium>(
    medium: M,
    base: usize,
    len: usize,
    record: usize,
    opts: &LogOptions,
) -> Result<(Log<M>, Recovery)> {
    let whole = LogOptions {
        clean_shutdown: true,
        ..*opts
    };
    if !opts.read_only {
        let look = LogOptions {
            read_only: true,
            ..whole
        };
        let (probe, rec) = Log::open(&medium, base, len, &look)?;
        drop(probe);
        if let Some(c) = rec.damaged.filter(|_| !opts.truncate_damaged) {
            return Err(crate::error::LogError::Corrupt(c));
        }
        fof::arm(&medium, record)?;
    }
    Log::open(medium, base, len, &whole)
}

fn finish<M: Medium>(
    log: Log<M>,
    opened: Opened,
    len: usize,
    record: usize,
    opts: &LogOptions,
) -> Result<(Log<M>, Opened)> {
    if !opts.read_only {
        rearm(&log, len, record)?;
    }
    Ok((log, opened))
}

/// The missed-window open alone, for a layer that keeps its own record handling (e.g. a
/// DIPPER store): [`Log::open`] after a crash with the superline's durable claim not trusted,
/// the log ending at the first record failing its checksums.
pub fn open_missed_window<M: Medium>(
    medium: M,
    base: usize,
    len: usize,
    opts: &LogOptions,
) -> Result<(Log<M>, Recovery)> {
    let walk = LogOptions {
        clean_shutdown: false,
        ..*opts
    };
    Log::open_inner(medium, base, len, &walk, true)
}

/// Write the log's region back and arm the record (durably): the log may append in
/// flush-on-fail mode from now on. Also how a log opened without flush on fail starts it.
pub fn rearm<M: Medium>(log: &Log<M>, len: usize, record: usize) -> Result<()> {
    log.keep_sync_records_in_cache();
    log.medium().write_back(log.base(), len)?;
    log.medium().fence()?;
    fof::arm(log.medium(), record)?;
    Ok(())
}

/// The log's part in a pool save: its hints (tail position and next LSN), refused unless the
/// log is at a safe point. The log's lines are written back by the pool's write-back.
#[derive(Debug)]
pub struct LogHook<M: Medium> {
    log: Arc<Log<M>>,
}

impl<M: Medium> LogHook<M> {
    /// The hook of `log`.
    pub fn new(log: Arc<Log<M>>) -> LogHook<M> {
        LogHook { log }
    }
}

impl<M: Medium + 'static> powerfail::LayerHook for LogHook<M> {
    fn name(&self) -> String {
        format!("log at {:#x}", self.log.base())
    }
    fn save(&self, _deadline: Instant) -> std::result::Result<Vec<u64>, String> {
        Ok(self.log.resume_hints()?.to_vec())
    }
}
