//! Transactions: writes, commit, abort and the root object.

#[allow(unused_imports)]
use super::*;

/// How a transaction makes its changes atomic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TxMode {
    /// Old bytes go to the lane's undo log in PM before each change (libpmemobj's way).
    #[default]
    Undo,
    /// New bytes go to a redo log in DRAM; commit applies them in place.
    Redo,
    /// Redo mode isolated by the heap's word-based STM ([`crate::stm`]): reads are validated
    /// against concurrent commits, a conflict fails the transaction with
    /// [`HeapError::Conflict`] (run it again; [`crate::Heap::atomically`] does), and no user
    /// lock is needed. Isolation holds among isolated transactions only.
    Isolated,
}

impl TxMode {
    /// Does a transaction in this mode keep its new bytes in a redo log?
    pub fn is_redo(self) -> bool {
        matches!(self, TxMode::Redo | TxMode::Isolated)
    }
}

/// One range a commit changed, for redundancy maintenance.
#[derive(Debug, Clone, Copy)]
pub struct Change<'a> {
    /// Offset of the range in the medium (not the region).
    pub medium_offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// The bytes before the transaction (from the undo log), or `None` for a block allocated
    /// in the transaction (its old contents were free space).
    pub old: Option<&'a [u8]>,
}

/// Told of every commit's changed ranges after the commit point (for `eager` redundancy:
/// the undo log already holds the old bytes, so the diff costs no extra read of the medium).
///
/// An error from [`CommitObserver::committed`] comes back from the commit, but the
/// transaction is committed all the same (the observer runs after the commit point).
pub trait CommitObserver: Send + Sync {
    /// The ranges of one committed transaction.
    fn committed(&self, changes: &[Change<'_>]) -> Result<()>;

    /// Should the heap copy each block a transaction allocates, as it allocates it, and
    /// report that copy as the block's `old` bytes (at commit and at abort)? With it the
    /// heap also stores a zeroed allocation's zeros through [`RawHeap::set_data_medium`]'s
    /// medium. Default: no (`old: None` for fresh blocks).
    fn wants_fresh_old(&self) -> bool {
        false
    }

    /// The ranges of an aborted transaction after its rollback: each snapshot range with the
    /// bytes it held before the rollback restored it, and each block the transaction allocated
    /// (with its copy from [`CommitObserver::wants_fresh_old`], or `None`). Default: nothing.
    fn rolled_back(&self, changes: &[Change<'_>]) -> Result<()> {
        let _ = changes;
        Ok(())
    }

    /// Read `buf.len()` bytes at `medium_offset` with a check of the observer's own (a
    /// verified read), or `None` to let the heap read them as stored. Default: `None`.
    fn verified_read(&self, medium_offset: u64, buf: &mut [u8]) -> Option<Result<()>> {
        let _ = (medium_offset, buf);
        None
    }

    /// Should commits and aborts report whole allocation blocks (every block a changed range
    /// touches, with `old: None`) instead of the ranges, and reads go through
    /// [`CommitObserver::verified_block_read`]? (Per-object checksums.) Default: no.
    fn wants_blocks(&self) -> bool {
        false
    }

    /// A read of `buf.len()` bytes at `medium_offset`, inside the allocation block at
    /// `block` (`(medium offset, length)`); `None` to read them as stored. Default: `None`.
    fn verified_block_read(
        &self,
        block: (u64, u64),
        medium_offset: u64,
        buf: &mut [u8],
    ) -> Option<Result<()>> {
        let _ = (block, medium_offset, buf);
        None
    }
}

impl RawHeap {
    /// Tell `obs` what a commit changed: the ranges whose old bytes are in `olds`, and every
    /// block the transaction allocated (old bytes: free space).
    pub(super) fn tell(
        &self,
        obs: &dyn CommitObserver,
        olds: &[(u64, Vec<u8>)],
        lane: &Lane,
    ) -> Result<()> {
        let mut changes: Vec<Change<'_>> = olds
            .iter()
            .map(|(off, buf)| Change {
                medium_offset: self.base + off,
                len: buf.len() as u64,
                old: Some(buf),
            })
            .collect();
        self.push_fresh(&mut changes, lane);
        if obs.wants_blocks() {
            return obs.committed(&self.whole_blocks(&changes));
        }
        obs.committed(&changes)
    }

    /// The allocation blocks `changes` touch, each once, as changes with unknown old bytes.
    pub(super) fn whole_blocks(&self, changes: &[Change<'_>]) -> Vec<Change<'static>> {
        let mut blocks: Vec<(u64, u64)> = Vec::new();
        for c in changes {
            let (mut at, end) = (
                c.medium_offset - self.base,
                c.medium_offset - self.base + c.len,
            );
            while at < end {
                match self.block_of(at) {
                    Some((off, len)) => {
                        blocks.push((off, len));
                        at = off + len;
                    }
                    None => at = (at / 64 + 1) * 64,
                }
            }
        }
        blocks.sort_unstable();
        blocks.dedup();
        blocks
            .into_iter()
            .map(|(off, len)| Change {
                medium_offset: self.base + off,
                len,
                old: None,
            })
            .collect()
    }

    /// Every block `lane` allocated, with its copy if one was taken.
    pub(super) fn push_fresh<'a>(&self, changes: &mut Vec<Change<'a>>, lane: &'a Lane) {
        for b in &lane.allocs {
            let old = lane
                .fresh_olds
                .iter()
                .find(|(off, _)| *off == b.off())
                .map(|(_, v)| &v[..]);
            changes.push(Change {
                medium_offset: self.base + b.off(),
                len: b.len(),
                old,
            });
        }
    }

    /// A transactional store of `data` at `off`: in undo mode after snapshotting the range,
    /// in redo mode into the transaction's log (read it back with [`RawHeap::read_tx`]).
    pub fn write(&self, lane: &mut Lane, off: u64, data: &[u8]) -> Result<()> {
        if lane.mode.is_redo() && lane.depth > 0 {
            if lane.mode == TxMode::Isolated {
                let r = self
                    .stm
                    .note_write(lane.stm_tx.get_mut(), off, data.len() as u64);
                if let Err(e) = r {
                    return self.fail(lane, HeapError::Conflict(e));
                }
            }
            return self.redo_write(lane, off, data);
        }
        self.add_range(lane, off, data.len() as u64)?;
        self.data().write(self.m(off), data);
        Ok(())
    }

    /// Commit (outermost level) or leave a nested level.
    pub fn commit(&self, lane: &mut Lane) -> Result<()> {
        if lane.depth == 0 {
            return Err(HeapError::TxState("commit without a transaction"));
        }
        if lane.depth > 1 {
            lane.depth -= 1;
            return if lane.aborted.is_some() {
                Err(HeapError::Aborted)
            } else {
                Ok(())
            };
        }
        if lane.aborted.is_some() {
            self.abort(lane)?;
            return Err(HeapError::Aborted);
        }
        let r = if lane.mode == TxMode::Isolated {
            let mut stx = std::mem::take(lane.stm_tx.get_mut());
            let r = self.stm.commit(&mut stx, || self.commit_redo(lane));
            *lane.stm_tx.get_mut() = stx;
            match r {
                Ok(inner) => inner,
                Err(e) => {
                    lane.aborted = Some(e.to_string());
                    self.abort(lane)?;
                    return Err(HeapError::Conflict(e));
                }
            }
        } else if lane.mode == TxMode::Redo {
            self.commit_redo(lane)
        } else {
            self.commit_outer(lane)
        };
        match r {
            Ok(()) => Ok(()),
            Err(e) if e.is_simulated_crash() => Err(e),
            // Past the commit point (the observer failed): committed, nothing to roll back.
            Err(e) if lane.depth == 0 => Err(e),
            Err(e) => {
                // The commit point was not reached: roll back.
                lane.aborted = Some(e.to_string());
                self.abort(lane)?;
                Err(e)
            }
        }
    }

    pub(super) fn commit_outer(&self, lane: &mut Lane) -> Result<()> {
        if lane.undo_tail == 0 && lane.allocs.is_empty() && lane.frees.is_empty() {
            self.finish(lane);
            return Ok(());
        }
        let seq = lane.seq + 1;
        if lane.unfenced {
            // Bit entries written since the last snapshot must be durable before the bits.
            self.fence()?;
            lane.unfenced = false;
        }
        self.apply_blocks(lane, true)?;
        for &(s, e) in &lane.ranges.0 {
            self.pflush(self.m(s), (e - s) as usize)?;
        }
        for b in &lane.allocs {
            self.pflush(self.m(b.off()), b.len() as usize)?;
        }
        self.flush_pending_retires()?;
        self.fence()?; // F1: data and allocator changes durable.
        let state = self.m(self.geo.lane(lane.idx));
        self.medium.store_u64(state, seq << 1);
        self.pflush(state, 8)?;
        self.fence()?; // F2: the commit point.
        lane.seq = seq;
        let told = match self.observer.read().clone() {
            Some(obs) => self.notify(&*obs, lane),
            None => Ok(()),
        };
        self.publish(lane);
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        self.finish(lane);
        told
    }

    pub(super) fn notify(&self, obs: &dyn CommitObserver, lane: &Lane) -> Result<()> {
        let mut olds = Vec::new();
        for &(off, len, pos) in &lane.snapshots {
            let mut buf = vec![0u8; len as usize];
            let at = self.geo.undo(lane.idx) + pos + UNDO_HEADER_BYTES;
            self.medium.read(self.m(at), &mut buf);
            olds.push((off, buf));
        }
        self.tell(obs, &olds, lane)
    }

    pub(super) fn finish(&self, lane: &mut Lane) {
        for b in std::mem::take(&mut lane.deferred) {
            self.unreserve(lane, b);
        }
        lane.depth = 0;
        lane.undo_tail = 0;
        lane.snapshots.clear();
        lane.ranges.clear();
        lane.allocs.clear();
        lane.frees.clear();
        lane.redo.clear();
        lane.fresh_olds.clear();
    }

    /// Abort: roll back every snapshot (outermost level), or mark the transaction aborted so
    /// the outermost commit rolls it back (nested level).
    pub fn abort(&self, lane: &mut Lane) -> Result<()> {
        if lane.depth == 0 {
            return Err(HeapError::TxState("abort without a transaction"));
        }
        if lane.aborted.is_none() {
            lane.aborted = Some("aborted by the caller".into());
        }
        if lane.depth > 1 {
            lane.depth -= 1;
            return Ok(());
        }
        if lane.stm_tx.get_mut().is_active() {
            self.stm.abort(lane.stm_tx.get_mut());
        }
        // Whatever the medium says, the lane leaves the transaction: a failed rollback is
        // finished by recovery at the next open.
        let obs = if self.has_observer.load(Ordering::Acquire) {
            self.observer.read().clone()
        } else {
            None
        };
        let rolled = if lane.undo_tail > 0 {
            self.roll_back(lane, obs.is_some())
        } else {
            Ok(Vec::new())
        };
        let rolled = match (rolled, obs) {
            (Ok(before), Some(obs)) => {
                let mut changes: Vec<Change<'_>> = before
                    .iter()
                    .map(|(off, buf)| Change {
                        medium_offset: self.base + off,
                        len: buf.len() as u64,
                        old: Some(buf),
                    })
                    .collect();
                self.push_fresh(&mut changes, lane);
                if obs.wants_blocks() {
                    obs.rolled_back(&self.whole_blocks(&changes))
                } else {
                    obs.rolled_back(&changes)
                }
            }
            (r, _) => r.map(|_| ()),
        };
        for b in std::mem::take(&mut lane.allocs) {
            self.unreserve(lane, b);
        }
        for b in std::mem::take(&mut lane.frees) {
            self.clear_pending(b);
        }
        self.counters.aborts.fetch_add(1, Ordering::Relaxed);
        self.finish(lane);
        rolled
    }

    /// The root object: `(offset, size)`, allocated zeroed on first use with `size` bytes.
    pub fn root(&self, size: u64) -> Result<(u64, u64)> {
        let _g = self.root.lock();
        let (off, have) = self.root_line();
        if off != 0 {
            if size > have {
                return Err(HeapError::invalid(
                    "root size",
                    format!("the root object has {have} bytes; {size} were asked for"),
                ));
            }
            return Ok((off, have));
        }
        if size == 0 {
            return Err(HeapError::invalid("root size", "0 bytes"));
        }
        let mut lane = self.lane();
        // The root line is not in the zone a redo log may name: always undo.
        self.begin_mode(&mut lane, TxMode::Undo);
        let r = (|| -> Result<u64> {
            let off = self.alloc(&mut lane, size, true)?;
            self.snapshot(&mut lane, ROOT_LINE, 16)?;
            let mut line = [0u8; 16];
            line[..8].copy_from_slice(&off.to_le_bytes());
            line[8..].copy_from_slice(&size.to_le_bytes());
            self.data().write(self.m(ROOT_LINE), &line);
            Ok(off)
        })();
        match r {
            Ok(off) => {
                self.commit(&mut lane)?;
                Ok((off, size))
            }
            Err(e) => {
                if !e.is_simulated_crash() {
                    self.abort(&mut lane)?;
                }
                Err(e)
            }
        }
    }

    /// The root line as stored: `(offset, size)`, `(0, 0)` if none.
    pub fn root_line(&self) -> (u64, u64) {
        (
            self.medium.load_u64(self.m(ROOT_LINE)),
            self.medium.load_u64(self.m(ROOT_LINE + 8)),
        )
    }
}
