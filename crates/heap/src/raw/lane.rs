//! Lanes: the per-transaction state, and which thread gets which lane.

#[allow(unused_imports)]
use super::*;

/// A lane held by one transaction (or one thread between transactions, in the C API).
pub type LaneGuard = ArcMutexGuard<RawMutex, Lane>;

/// Volatile state of one lane.
#[derive(Debug)]
pub struct Lane {
    pub(super) idx: usize,
    /// Last retired transaction number (the state word without its flag).
    pub(super) seq: u64,
    pub(super) depth: u32,
    pub(super) aborted: Option<String>,
    pub(super) undo_tail: u64,
    /// (offset, len, position of the entry in the undo area) per snapshot, in order.
    pub(super) snapshots: Vec<(u64, u64, u64)>,
    pub(super) ranges: RangeSet,
    /// Blocks allocated in this transaction: their ranges need no snapshot, only a flush.
    pub(super) allocs: Vec<Block>,
    pub(super) frees: Vec<Block>,
    pub(super) cache: Vec<Vec<u64>>,
    pub(super) scratch: Vec<u8>,
    /// An undo entry was flushed but no fence has ordered it yet.
    pub(super) unfenced: bool,
    /// Blocks reserved and given back within the transaction, released when it ends.
    pub(super) deferred: Vec<Block>,
    /// The open transaction's mode (set by the outermost begin).
    pub(super) mode: TxMode,
    /// A redo transaction of an admitted thread on a heap with durability on demand.
    pub(super) on_demand: bool,
    /// A redo transaction's new bytes.
    pub(super) redo: RedoSet,
    /// Buffer the redo log is encoded into.
    pub(super) logbuf: Vec<u8>,
    /// The STM state of an isolated transaction (borrowed by reads, which take `&Lane`).
    pub(super) stm_tx: std::cell::RefCell<crate::stm::StmTx>,
    /// Copies of blocks allocated in this transaction, taken as they were allocated, when the
    /// observer wants them ([`crate::CommitObserver::wants_fresh_old`]): (offset, bytes).
    pub(super) fresh_olds: Vec<(u64, Vec<u8>)>,
}

impl Lane {
    /// Is a transaction open on this lane?
    pub fn in_tx(&self) -> bool {
        self.depth > 0
    }
    /// Nesting depth (0 outside a transaction).
    pub fn depth(&self) -> u32 {
        self.depth
    }
    /// The lane's index.
    pub fn index(&self) -> usize {
        self.idx
    }
    /// Why the open transaction was marked aborted, if it was.
    pub fn abort_reason(&self) -> Option<&str> {
        self.aborted.as_deref()
    }
}

thread_local! {
    static LANE_HINT: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

impl RawHeap {
    /// Take a lane for a transaction (blocks if every lane is busy).
    pub fn lane(&self) -> LaneGuard {
        let n = self.lanes.len();
        let hint = LANE_HINT.with(|h| {
            if h.get() == usize::MAX {
                let id = std::thread::current().id();
                let mut x = format!("{id:?}")
                    .bytes()
                    .fold(0usize, |a, b| a.wrapping_mul(31).wrapping_add(b as usize));
                x ^= x >> 7;
                h.set(x);
            }
            h.get()
        });
        // Every lane busy: keep trying them all rather than block on one, which could be a
        // lane this very thread holds (a root made inside a transaction, say).
        for round in 0u32.. {
            for k in 0..n {
                let i = (hint + k) % n;
                if let Some(g) = self.lanes[i].try_lock_arc() {
                    if k != 0 {
                        LANE_HINT.with(|h| h.set(i));
                    }
                    return g;
                }
            }
            if round < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
        unreachable!("the loop above returns")
    }

    /// Begin a transaction in the heap's default mode ([`RawHeap::set_default_mode`]; undo
    /// unless set), or a nested level of the open one.
    pub fn begin(&self, lane: &mut Lane) {
        self.begin_mode(lane, self.default_mode());
    }

    /// Begin a transaction asking for `mode`, or a nested level of the open one (which keeps
    /// the outer level's mode). Returns the mode the transaction runs in: redo asked on a
    /// heap with durability on demand by a thread admission refused runs in undo mode.
    pub fn begin_mode(&self, lane: &mut Lane, mode: TxMode) -> TxMode {
        if lane.depth == 0 {
            lane.aborted = None;
            let (m, od) = self.effective_mode(mode);
            lane.mode = m;
            lane.on_demand = od;
            if m == TxMode::Isolated {
                self.stm.begin(lane.stm_tx.get_mut());
            }
        }
        lane.depth += 1;
        lane.mode
    }

    /// The mode of the open transaction on `lane`.
    pub fn tx_mode(&self, lane: &Lane) -> Option<TxMode> {
        (lane.depth > 0).then_some(lane.mode)
    }

    /// Read `buf.len()` bytes at `off` as the open transaction sees them (its own writes
    /// included); outside a transaction, as stored.
    pub fn read_tx(&self, lane: &Lane, off: u64, buf: &mut [u8]) -> Result<()> {
        if lane.depth > 0 && lane.mode == TxMode::Isolated {
            self.check_range(off, buf.len() as u64)?;
            let mut stx = lane.stm_tx.borrow_mut();
            let (medium, at) = (&self.medium, self.m(off));
            self.stm
                .read(&mut stx, off, buf.len() as u64, || medium.read(at, buf))
                .map_err(HeapError::Conflict)?;
        } else if lane.depth > 0
            && (lane.ranges.overlaps(off, off + buf.len() as u64)
                || lane
                    .allocs
                    .iter()
                    .any(|b| off < b.off() + b.len() && b.off() < off + buf.len() as u64))
        {
            // The transaction's own stores are not in the redundancy before its commit: read
            // them as stored.
            self.check_range(off, buf.len() as u64)?;
            self.medium.read(self.m(off), buf);
        } else {
            self.read(off, buf)?;
        }
        if lane.depth > 0 && lane.mode.is_redo() {
            lane.redo.overlay(off, buf);
        }
        Ok(())
    }

    pub(super) fn fail<T>(&self, lane: &mut Lane, e: HeapError) -> Result<T> {
        if lane.aborted.is_none() {
            lane.aborted = Some(e.to_string());
        }
        Err(e)
    }

    pub(super) fn need_tx(&self, lane: &Lane) -> Result<()> {
        if lane.depth == 0 {
            return Err(HeapError::TxState("this operation needs a transaction"));
        }
        if lane.aborted.is_some() {
            return Err(HeapError::Aborted);
        }
        Ok(())
    }
}
