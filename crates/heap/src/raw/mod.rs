//! The untyped heap: allocator, lanes, undo-logged transactions and recovery.
//!
//! Offsets are relative to the heap region; `base` turns them into medium offsets.
//!
//! A transaction runs on a lane (one per concurrent transaction). Its persistence protocol
//! (`docs/format/undo-log.md`):
//!
//! 1. `add_range`: append `{seq, offset, len, crc}` and the old bytes to the lane's undo area,
//!    flush, fence. Only then may the caller store into the range.
//! 2. `alloc` / `free`: append a bit entry (`{word, mask, OR or ANDNOT}` for a run block) or a
//!    snapshot of the chunk-table word (a large block) and flush it; no fence of its own: the
//!    next snapshot's fence, or the commit, orders it before the change it describes.
//! 3. `commit`: fence if an entry is still unfenced; apply the allocator changes in place
//!    (bitmap bits under the chunk's lock, chunk words), flush them, every added range and
//!    every block allocated in the transaction; fence (F1).
//! 4. Store the lane state word `seq << 1` and persist it (F2). This is the commit point: the
//!    undo entries of `seq` are dead from here on.
//!
//! Recovery, per lane: roll back every valid undo entry of `seq + 1` in reverse order (a
//! snapshot restores its bytes, a bit entry applies its inverse to its own bits only, which no
//! other transaction can own at the same time) and retire them by storing `(seq + 1) << 1`.
//! Three fences for an overwrite (snapshot, F1, F2), and three for an allocation linked into
//! an existing object.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::lock_api::ArcMutexGuard;
use parking_lot::{Condvar, Mutex, RawMutex, RwLock};
use pmem::Medium;

use crate::error::{HeapError, Result};
use crate::layout::*;

mod lane;
mod locks;
mod open;
mod palloc;
mod redo;
mod tx;
mod ulog;

#[allow(unused_imports)]
use self::{lane::*, locks::*, open::*, palloc::*, redo::*, tx::*, ulog::*};

pub use lane::{Lane, LaneGuard};
pub use open::{decode_header_copy, read_header};
pub use redo::{
    Durability, OnDemandConfig, OnDemandPlan, OnDemandStats, REDO_SEQ_MASK, RedoEntry, SaveBudget,
    SaveCost, SaveReport, fresh_holds, read_redo_log, redo_crc, redo_state,
};
pub use tx::{Change, CommitObserver, TxMode};
pub use ulog::{UndoEntry, UndoKind, scan_undo};

/// Options for formatting a heap.
#[derive(Debug, Clone, Copy)]
pub struct HeapOptions {
    /// Lanes: the most transactions that run at once.
    pub lanes: u32,
    /// Bytes per lane (state line, redo and undo areas).
    pub lane_bytes: u32,
    /// Bytes of each lane's redo area (redo-mode transactions, `docs/format/redo-log.md`).
    pub redo_bytes: u32,
}

impl Default for HeapOptions {
    fn default() -> Self {
        HeapOptions {
            lanes: DEFAULT_LANES,
            lane_bytes: DEFAULT_LANE_BYTES,
            redo_bytes: DEFAULT_REDO_BYTES,
        }
    }
}

impl HeapOptions {
    /// Small lanes for tests on the simulator.
    pub fn small() -> Self {
        HeapOptions {
            lanes: 4,
            lane_bytes: 32 * 1024,
            redo_bytes: 4096,
        }
    }
}

/// Counters since open.
#[derive(Debug, Default)]
pub struct Counters {
    /// Transactions committed (with at least one change).
    pub commits: AtomicU64,
    /// Transactions aborted.
    pub aborts: AtomicU64,
    /// Blocks allocated by committed transactions.
    pub allocs: AtomicU64,
    /// Blocks freed by committed transactions.
    pub frees: AtomicU64,
    /// Fences issued by transactions.
    pub fences: AtomicU64,
}

/// What recovery did at open.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RecoveryReport {
    /// Lanes whose interrupted transaction was rolled back.
    pub rolled_back: usize,
    /// Undo entries applied.
    pub undo_entries: usize,
    /// Lanes whose redo log (committed, or saved on a power-failure warning) was redone.
    pub redone: usize,
    /// Redo entries applied.
    pub redo_entries: usize,
}

/// The untyped heap.
///
/// One module per concern: `open` (format, open, recovery of the lanes), `lane` (which
/// thread runs on which lane), `ulog` (the undo log), `redo` (the redo log), `palloc` (the
/// allocator), `tx` (write, commit, abort, the root), `locks` (the table behind `PMutex` and
/// `PRwLock`).
///
/// # Lock order
///
/// Take these in this order, never the other way round; a thread holds at most one of each
/// kind except where said:
///
/// 1. `root`, only inside [`RawHeap::root`], which then takes a lane.
/// 2. a lane (`lanes[i]`): held for a whole transaction. A thread may hold more than one lane
///    (a root made inside a transaction); it never *waits* for one: [`RawHeap::lane`] tries
///    every lane without blocking and yields between rounds.
/// 3. `observer` (read) during a commit, which calls the observer with the lane held.
/// 4. `global` (free chunks, partial runs), then
/// 5. one `shadows[c]` at a time, taken alone or under `global` (refill, release, make_run).
///    Never `global` while a shadow is held.
///
/// A protected heap ([`crate::protect`]) adds the integrity layer's group locks below all of
/// these: its medium takes one group's lock inside a store (under whatever the store's caller
/// holds, a shadow or `global` included), and the observer takes them during a commit; the
/// integrity layer never calls back into the heap, so they are leaves.
///
/// The lock table is apart: `locks` (the map), then one cell's `st`; neither is held while
/// any lock above is taken, and a thread waiting for a persistent lock holds only that
/// cell's `st` (released by the wait).
pub struct RawHeap {
    medium: Arc<dyn Medium>,
    base: u64,
    geo: Geometry,
    uuid: [u8; 16],
    shadows: Vec<Mutex<Shadow>>,
    global: Mutex<Global>,
    lanes: Vec<Arc<Mutex<Lane>>>,
    locks: Mutex<HashMap<u64, Arc<LockCell>>>,
    root: Mutex<()>,
    observer: RwLock<Option<Arc<dyn CommitObserver>>>,
    /// `observer` is set (read without its lock on every redo commit).
    has_observer: AtomicBool,
    /// The observer wants copies of fresh blocks.
    fresh_old: AtomicBool,
    /// Where transactional stores to objects go, when not `medium` (see
    /// [`RawHeap::set_data_medium`]).
    plain: Option<Arc<dyn Medium>>,
    counters: Counters,
    recovery: RecoveryReport,
    od: OnDemand,
    /// Lanes whose redo log was retired by a state word not yet flushed.
    pending_retire: Mutex<Vec<usize>>,
    retire_pending: AtomicBool,
    default_mode: std::sync::atomic::AtomicU8,
    /// Concurrency control of isolated transactions.
    stm: crate::stm::Stm,
}

impl std::fmt::Debug for RawHeap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawHeap")
            .field("base", &self.base)
            .field("geometry", &self.geo)
            .finish_non_exhaustive()
    }
}

impl RawHeap {
    /// The geometry.
    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// Medium offset of the region.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The medium.
    pub fn medium(&self) -> &Arc<dyn Medium> {
        &self.medium
    }

    /// The pool UUID recorded in the header.
    pub fn uuid(&self) -> [u8; 16] {
        self.uuid
    }

    /// The id persistent pointers carry.
    pub fn pool_id(&self) -> u64 {
        pool_id(&self.uuid)
    }

    /// What recovery did at open.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// Counters since open.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Install (or remove) the commit observer.
    pub fn set_observer(&self, observer: Option<Arc<dyn CommitObserver>>) {
        let mut o = self.observer.write();
        self.has_observer
            .store(observer.is_some(), Ordering::Release);
        self.fresh_old.store(
            observer.as_ref().is_some_and(|o| o.wants_fresh_old()),
            Ordering::Release,
        );
        *o = observer;
    }

    /// Store objects' bytes in transactions (transactional writes, rollbacks of snapshots,
    /// the root line, a redo commit's applied bytes, zeroed allocations) through `plain`
    /// instead of the medium the heap was opened on; everything else (logs, lane states,
    /// allocator words) still goes through that medium. A protected heap opens on a medium
    /// that keeps redundancy on every store, and lets its commit observer bring the objects'
    /// redundancy up to date from the diff instead. Set it before any transaction runs.
    pub fn set_data_medium(&mut self, plain: Option<Arc<dyn Medium>>) {
        self.plain = plain;
    }

    /// The medium objects' bytes are stored through.
    pub(super) fn data(&self) -> &dyn Medium {
        match &self.plain {
            Some(p) => &**p,
            None => &*self.medium,
        }
    }

    fn m(&self, off: u64) -> usize {
        (self.base + off) as usize
    }

    fn fence(&self) -> Result<()> {
        self.counters.fences.fetch_add(1, Ordering::Relaxed);
        self.medium.fence()?;
        Ok(())
    }

    /// Check that `[off, off + len)` lies in the data zone.
    pub fn check_range(&self, off: u64, len: u64) -> Result<()> {
        let (s, e) = (self.geo.zone_off, self.geo.zone_end());
        if off < s || off.checked_add(len).is_none_or(|end| end > e) {
            return Err(HeapError::BadPointer {
                offset: off,
                len,
                zone_start: s,
                zone_end: e,
            });
        }
        Ok(())
    }

    /// Read `buf.len()` bytes at region offset `off` (checked against the zone).
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        self.check_range(off, buf.len() as u64)?;
        if self.has_observer.load(Ordering::Acquire)
            && let Some(obs) = self.observer.read().clone()
        {
            if obs.wants_blocks() {
                if let Some((b, len)) = self.block_of(off)
                    && off + buf.len() as u64 <= b + len
                    && let Some(r) =
                        obs.verified_block_read((self.base + b, len), self.base + off, buf)
                {
                    return r;
                }
            } else if let Some(r) = obs.verified_read(self.base + off, buf) {
                return r;
            }
        }
        self.medium.read(self.m(off), buf);
        Ok(())
    }

    /// Check no transaction is open and make durable whatever on-demand commits left
    /// dirty (used at close).
    pub fn quiesce(&self) -> Result<()> {
        let held: Vec<_> = self.lanes.iter().map(|l| l.try_lock()).collect();
        for g in &held {
            match g {
                Some(g) if !g.in_tx() => {}
                _ => return Err(HeapError::TxState("a transaction is still open")),
            }
        }
        self.make_durable()
    }

    /// The mode [`RawHeap::begin`] gives transactions (undo unless set).
    pub fn default_mode(&self) -> TxMode {
        match self.default_mode.load(Ordering::Relaxed) {
            1 => TxMode::Redo,
            2 => TxMode::Isolated,
            _ => TxMode::Undo,
        }
    }

    /// Set the mode [`RawHeap::begin`] gives transactions (the per-pool choice; a
    /// transaction may still ask for another with [`RawHeap::begin_mode`]).
    pub fn set_default_mode(&self, mode: TxMode) {
        let v = match mode {
            TxMode::Undo => 0,
            TxMode::Redo => 1,
            TxMode::Isolated => 2,
        };
        self.default_mode.store(v, Ordering::Relaxed);
    }

    /// Counters of the STM behind isolated transactions.
    pub fn stm_stats(&self) -> crate::stm::StmStats {
        self.stm.stats()
    }
}
