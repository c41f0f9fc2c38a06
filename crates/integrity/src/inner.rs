//! The state of one protected region and the operations every mode shares: where things are,
//! checksums, small reads and writes, the header, findings, locks.
//!
//! The modes' own paths are elsewhere, each as another `impl Inner` block: the update pass in
//! `lazy`, eager and txb-page writes and verified reads in `eager`, rebuilding redundancy from
//! data (resync, line rebuild) and data from parity in `rebuild`, format and open in `open`.
//! Scrub, repair and statistics (`repair`, `report`) use this module; it names none of their
//! types.

use crate::checksum::{Tag, checksum};
use crate::error::{IntegrityError, Result};
use crate::finding::{Finding, Locate, PassStats};
use crate::header::Header;
use crate::layout::{
    Geometry, HEADER_BYTES, HEADER_COPY_OFFSETS, LINES_PER_PAGE, RETIRED_AT, RETIRED_BYTES,
    SUM_BLOCK_BYTES, SUMS_PER_BLOCK, Sums, flags,
};
use crate::options::{Mode, Placement};
use crate::tracker::{BATCH_WORDS, BatchBits, Tracker};
use crate::trust::Trust;
use pmem::layout::PAGE_SIZE;
use pmem::{Medium, Uuid};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

/// A page, in bytes, as the type offsets are computed in.
pub(crate) const PAGE: u64 = PAGE_SIZE as u64;

/// One cache line's share of a byte range of the data region: the page, the line's slot in
/// it, where the range starts within the line, how many bytes it takes from the line, and
/// where those bytes go in the caller's buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LineSpan {
    pub page: u64,
    pub slot: usize,
    pub lo: usize,
    pub n: usize,
    pub at: usize,
}

/// The lines `len` bytes at `offset` of the data region touch, in order.
pub(crate) fn line_spans(offset: u64, len: usize) -> impl Iterator<Item = LineSpan> {
    let line = crate::layout::LINE_BYTES;
    let mut at = 0usize;
    std::iter::from_fn(move || {
        if at >= len {
            return None;
        }
        let pos = offset + at as u64;
        let in_page = (pos % PAGE) as usize;
        let lo = in_page % line;
        let span = LineSpan {
            page: pos / PAGE,
            slot: in_page / line,
            lo,
            n: (line - lo).min(len - at),
            at,
        };
        at += span.n;
        Some(span)
    })
}
/// Findings kept in memory (the oldest are dropped; counters keep counting).
const FINDINGS_KEPT_MAX: usize = 4096;
/// Samples of the vulnerable-stripe count kept for `Stats`.
pub(crate) const SAMPLES_KEPT_MAX: usize = 256;

/// One protected region: what every handle, thread and module shares.
///
/// # Lock order
///
/// A thread that holds more than one of these locks took them in this order; no code path
/// takes them the other way round:
///
/// 1. `groups[g]`, the reader-writer lock of lock group `g` (16 stripes). Write: eager and
///    txb-page writes, the update pass, resync and line rebuilds, repair, a settle on the eager
///    read path. Read: eager reads, the scrubber. A thread that holds several holds
///    consecutive groups taken in ascending order (a pass's batch, a txb-page write's range,
///    a repair's final proof takes all of them). An eager read drops its read lock before it
///    takes the write lock to settle a line; nothing upgrades.
/// 2. The tracker's own locks (taken inside `collect`, `peek`, `mark`, `arm`), under group
///    locks or under none; a tracker never calls back into this type.
/// 3. `header`, `trust`, `log`: leaves. Each is held only for its own short section
///    (`write_header` and `lines_valid`; `trust` and `set_trust`; `note`, the end of a pass,
///    the background threads' records, `stats`), in which no other lock of this list is
///    taken; so they are never nested in one another and never held while a group lock or
///    the tracker is taken.
/// 4. `stop` (with `wake`): alone. The background threads wait on it between rounds, holding
///    nothing else; `Protected`'s shutdown sets it holding nothing else.
///
/// The medium's own locks (a simulated medium's) are taken inside its calls, below all of
/// these. Lazy-mode writers take no lock of this list except the tracker's.
///
/// Checked: by reading every site (each group lock is taken through [`Inner::lock_write`] or
/// [`Inner::lock_read`]; the sites holding several are the pass's batch, a txb-page write and
/// a repair's final proof, each over an ascending range), and, in debug builds (every test
/// run), at run time for rule 3: leaves are taken through [`leaf`], which counts them per
/// thread, and taking a leaf, a group lock or `stop` while holding a leaf panics.
pub(crate) struct Inner<M: Medium> {
    pub(crate) medium: M,
    pub(crate) uuid: Uuid,
    pub(crate) region: String,
    pub(crate) data_at: usize,
    pub(crate) meta_at: usize,
    pub(crate) geo: Geometry,
    pub(crate) mode: Mode,
    pub(crate) period_ms: u32,
    pub(crate) tracker: Box<dyn Tracker>,
    pub(crate) groups: Vec<RwLock<()>>,
    pub(crate) read_only: bool,
    pub(crate) header: Mutex<Header>,
    pub(crate) trust: Mutex<Trust>,
    pub(crate) log: Mutex<Log>,
    pub(crate) eager_writes: AtomicU64,
    pub(crate) repairs_on_read: AtomicU64,
    pub(crate) stop: Mutex<bool>,
    pub(crate) wake: Condvar,
    pub(crate) failed: AtomicBool,
}

/// Pass history, findings and samples.
#[derive(Debug, Default)]
pub(crate) struct Log {
    pub(crate) passes: u64,
    pub(crate) last: PassStats,
    pub(crate) pages_updated_total: u64,
    pub(crate) pass_us_total: u64,
    pub(crate) tracking_us_total: u64,
    pub(crate) coverage_ms_max: u64,
    pub(crate) last_pass_start: Option<Instant>,
    pub(crate) samples: std::collections::VecDeque<u64>,
    pub(crate) findings: std::collections::VecDeque<Finding>,
    pub(crate) findings_total: u64,
    pub(crate) last_error: Option<String>,
    pub(crate) scrub_passes: u64,
}

impl<M: Medium> Inner<M> {
    // ---------- addressing ----------

    pub(crate) fn page_at(&self, page: u64) -> usize {
        self.data_at + (page * PAGE) as usize
    }
    pub(crate) fn meta(&self, offset: u64) -> usize {
        self.meta_at + offset as usize
    }
    pub(crate) fn parity_at(&self, stripe: u64) -> usize {
        self.meta(self.geo.parity_at + stripe * PAGE)
    }
    pub(crate) fn sums_layout(&self, which: Sums) -> (u64, u64, u64, Tag, Tag) {
        let g = &self.geo;
        match which {
            Sums::Pages => (
                g.pagesums_at,
                g.pageblocks_at,
                g.data_pages,
                Tag::PageBlock,
                Tag::DataPage,
            ),
            Sums::Parity => (
                g.paritysums_at,
                g.parityblocks_at,
                g.stripes,
                Tag::ParityBlock,
                Tag::ParityPage,
            ),
        }
    }
    pub(crate) fn sum_at(&self, which: Sums, index: u64) -> usize {
        self.meta(self.sums_layout(which).0 + 4 * index)
    }
    pub(crate) fn block_sum_at(&self, which: Sums, block: u64) -> usize {
        self.meta(self.sums_layout(which).1 + 4 * block)
    }
    pub(crate) fn line_sum_at(&self, page: u64, slot: usize) -> usize {
        self.meta(self.geo.linesums_at + 4 * (page * LINES_PER_PAGE as u64 + slot as u64))
    }
    pub(crate) fn lines_valid(&self) -> bool {
        leaf(&self.header).flags & flags::LINES_VALID != 0
    }
    pub(crate) fn trust(&self) -> Trust {
        leaf(&self.trust).clone()
    }
    pub(crate) fn set_trust(&self, t: Trust) {
        *leaf(&self.trust) = t;
    }

    /// Every stripe was proven: clear the `unverified` flag. The caller holds every group's
    /// write lock or is alone.
    pub(crate) fn mark_verified(&self) -> Result<()> {
        self.check_usable()?;
        self.medium.fence()?;
        self.write_header(|h| h.flags &= !flags::UNVERIFIED)?;
        self.set_trust(Trust::current());
        Ok(())
    }

    // ---------- small reads and writes ----------

    pub(crate) fn read_u32(&self, at: usize) -> u32 {
        let mut b = [0u8; 4];
        self.medium.read(at, &mut b);
        u32::from_le_bytes(b)
    }
    pub(crate) fn write_u32(&self, at: usize, v: u32) -> Result<()> {
        self.medium.write(at, &v.to_le_bytes());
        self.medium.flush(at, 4)?;
        Ok(())
    }
    pub(crate) fn sum(&self, which: Sums, index: u64) -> u32 {
        self.read_u32(self.sum_at(which, index))
    }
    pub(crate) fn set_sum(&self, which: Sums, index: u64, v: u32) -> Result<()> {
        self.write_u32(self.sum_at(which, index), v)
    }
    pub(crate) fn page_sum_of(&self, page: u64, bytes: &[u8]) -> u32 {
        checksum(&self.uuid, Tag::DataPage, page, bytes)
    }
    pub(crate) fn parity_sum_of(&self, stripe: u64, bytes: &[u8]) -> u32 {
        checksum(&self.uuid, Tag::ParityPage, stripe, bytes)
    }
    pub(crate) fn line_sum_of(&self, page: u64, slot: usize, line: &[u8]) -> u32 {
        checksum(
            &self.uuid,
            Tag::Line,
            page * LINES_PER_PAGE as u64 + slot as u64,
            line,
        )
    }
    pub(crate) fn read_page(&self, page: u64, buf: &mut [u8]) {
        self.medium.read(self.page_at(page), &mut buf[..PAGE_SIZE]);
    }

    /// The stored checksum of checksum block `block` and the one its contents give.
    pub(crate) fn block_check(&self, which: Sums, block: u64) -> (u32, u32) {
        let (entries_at, _, _, tag, _) = self.sums_layout(which);
        let mut b = [0u8; SUM_BLOCK_BYTES];
        self.medium.read(
            self.meta(entries_at + block * SUM_BLOCK_BYTES as u64),
            &mut b,
        );
        let computed = checksum(&self.uuid, tag, block, &b);
        (self.read_u32(self.block_sum_at(which, block)), computed)
    }
    pub(crate) fn block_ok(&self, which: Sums, block: u64) -> bool {
        let (stored, computed) = self.block_check(which, block);
        stored == computed
    }
    /// Recompute and store the checksum of checksum block `block`.
    pub(crate) fn reseal(&self, which: Sums, block: u64) -> Result<()> {
        let (_, computed) = self.block_check(which, block);
        self.write_u32(self.block_sum_at(which, block), computed)
    }

    /// Set checksum entries, keeping their blocks' checksums: a block that was sound before is
    /// resealed after; a block that was already damaged is left failing its check (resealing
    /// would hide the damage) and reported.
    pub(crate) fn update_sums(
        &self,
        which: Sums,
        entries: &[(u64, u32)],
        by: &'static str,
    ) -> Result<()> {
        let mut i = 0;
        while i < entries.len() {
            let block = entries[i].0 / SUMS_PER_BLOCK;
            let ok = self.block_ok(which, block);
            while i < entries.len() && entries[i].0 / SUMS_PER_BLOCK == block {
                self.set_sum(which, entries[i].0, entries[i].1)?;
                i += 1;
            }
            if ok {
                self.reseal(which, block)?;
            } else {
                let (stored, computed) = self.block_check(which, block);
                self.note(Finding::block(self, which, block, stored, computed, by));
            }
        }
        Ok(())
    }

    pub(crate) fn note(&self, f: Finding) {
        let mut log = leaf(&self.log);
        log.findings_total += 1;
        if log.findings.len() >= FINDINGS_KEPT_MAX {
            log.findings.pop_front();
        }
        log.findings.push_back(f);
    }

    // ---------- locks and cleanliness ----------

    pub(crate) fn group_of(&self, page: u64) -> usize {
        (page / self.geo.group_pages()) as usize
    }
    pub(crate) fn lock_write(&self, group: usize) -> RwLockWriteGuard<'_, ()> {
        assert_no_leaf_held("a group's write lock");
        self.groups[group]
            .write()
            .unwrap_or_else(|e| e.into_inner())
    }
    /// Group `group`'s read lock (eager reads, the scrubber).
    pub(crate) fn lock_read(&self, group: usize) -> RwLockReadGuard<'_, ()> {
        assert_no_leaf_held("a group's read lock");
        self.groups[group].read().unwrap_or_else(|e| e.into_inner())
    }

    /// Pages of `[first, first + count)` written since the last pass (lazy mode only; the other
    /// modes never leave a page with stale redundancy while no lock is held).
    pub(crate) fn written(&self, first: u64, count: u32) -> Result<BatchBits> {
        let mut bits = [0u64; BATCH_WORDS];
        if self.mode == Mode::Lazy {
            self.tracker.peek(first, count, &mut bits)?;
        }
        Ok(bits)
    }

    pub(crate) fn check_usable(&self) -> Result<()> {
        if self.read_only {
            return Err(IntegrityError::ReadOnly);
        }
        if self.failed.load(Ordering::Acquire) {
            return Err(pmem::PmemError::Failed.into());
        }
        Ok(())
    }

    pub(crate) fn check_range(&self, offset: u64, len: usize) -> Result<()> {
        let size = self.geo.data_pages * PAGE;
        if offset.checked_add(len as u64).is_none_or(|e| e > size) {
            return Err(IntegrityError::invalid(
                "range",
                format!("[{offset:#x}, +{len:#x}) is outside the region's {size:#x} bytes"),
            ));
        }
        Ok(())
    }

    // ---------- header ----------

    pub(crate) fn write_header(&self, change: impl FnOnce(&mut Header)) -> Result<()> {
        let mut h = leaf(&self.header);
        let mut next = h.clone();
        change(&mut next);
        next.seq = h.seq + 1;
        let at = self.meta(HEADER_COPY_OFFSETS[(next.seq % 2) as usize] as u64);
        self.medium.write(at, &next.encode());
        // Written back even where the domain skips flushes (eadr run as flush on fail, whose
        // save may miss its window): the `open` state must be durable before any data write,
        // or a missed window could leave `clean` over data the passes never covered.
        self.medium.write_back(at, HEADER_BYTES)?;
        self.medium.fence()?;
        *h = next;
        Ok(())
    }

    /// Zero the bytes where earlier versions kept the shadow batch record, if anything is
    /// there. Nothing reads them any more; an earlier version that opens the region after this
    /// one must not take a record left over from its own crash for a batch in flight. Returns
    /// whether it wrote.
    pub(crate) fn clear_retired(&self) -> Result<bool> {
        let at = self.meta(RETIRED_AT as u64);
        let mut b = [0u8; RETIRED_BYTES];
        self.medium.read(at, &mut b);
        if b.iter().all(|&x| x == 0) {
            return Ok(false);
        }
        self.medium.write(at, &[0; RETIRED_BYTES]);
        self.medium.persist(at, RETIRED_BYTES)?;
        Ok(true)
    }

    pub(crate) fn stop_requested(&self, wait: Duration) -> bool {
        assert_no_leaf_held("the stop lock");
        let stop = self.stop.lock().unwrap_or_else(|e| e.into_inner());
        if *stop {
            return true;
        }
        let (stop, _) = self
            .wake
            .wait_timeout(stop, wait)
            .unwrap_or_else(|e| e.into_inner());
        *stop
    }
}

impl<M: Medium + 'static> std::fmt::Debug for Inner<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("region", &self.region)
            .field("mode", &self.mode)
            .field("geometry", &self.geo)
            .finish_non_exhaustive()
    }
}

/// A handle on the region at `place` with the header `header` in force; nothing is read or
/// written.
pub(crate) fn build<M: Medium>(
    medium: M,
    place: &Placement,
    header: Header,
    mode: Mode,
    period_ms: u32,
    tracker: Box<dyn Tracker>,
    read_only: bool,
) -> Inner<M> {
    let geo = header.geometry;
    Inner {
        medium,
        uuid: place.uuid,
        region: place.region.clone(),
        data_at: place.data_offset as usize,
        meta_at: place.meta_offset as usize,
        geo,
        mode,
        period_ms,
        tracker,
        groups: (0..geo.groups()).map(|_| RwLock::new(())).collect(),
        read_only,
        header: Mutex::new(header),
        trust: Mutex::new(Trust::current()),
        log: Mutex::new(Log::default()),
        eager_writes: AtomicU64::new(0),
        repairs_on_read: AtomicU64::new(0),
        stop: Mutex::new(false),
        wake: Condvar::new(),
        failed: AtomicBool::new(false),
    }
}

// ---------- checking the lock order (debug builds) ----------

#[cfg(debug_assertions)]
thread_local! {
    /// Leaf locks (`header`, `trust`, `log`) this thread holds now.
    static LEAVES_HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// In debug builds, panic if this thread holds a leaf lock: `what` may not be taken under one
/// (rule 3 of the lock order beside [`Inner`]).
pub(crate) fn assert_no_leaf_held(what: &str) {
    #[cfg(debug_assertions)]
    LEAVES_HELD.with(|n| {
        assert!(
            n.get() == 0,
            "lock order: {what} taken while this thread holds a leaf lock (header, trust or log)"
        );
    });
    #[cfg(not(debug_assertions))]
    let _ = what;
}

/// A guard on a leaf lock. Debug builds count it per thread, so that taking another leaf or a
/// group lock while it is held panics (see [`assert_no_leaf_held`]).
pub(crate) struct Leaf<'a, T> {
    guard: MutexGuard<'a, T>,
}

/// Take leaf lock `lock` (`header`, `trust` or `log`), checking the lock order in debug builds.
pub(crate) fn leaf<T>(lock: &Mutex<T>) -> Leaf<'_, T> {
    assert_no_leaf_held("a leaf lock");
    let guard = lock.lock().unwrap_or_else(|e| e.into_inner());
    #[cfg(debug_assertions)]
    LEAVES_HELD.with(|n| n.set(n.get() + 1));
    Leaf { guard }
}

impl<T> std::ops::Deref for Leaf<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for Leaf<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

impl<T> Drop for Leaf<'_, T> {
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        LEAVES_HELD.with(|n| n.set(n.get() - 1));
    }
}

impl<M: Medium> Locate for Inner<M> {
    fn page_at(&self, page: u64) -> usize {
        Inner::page_at(self, page)
    }
    fn parity_at(&self, stripe: u64) -> usize {
        Inner::parity_at(self, stripe)
    }
    fn sum_at(&self, which: Sums, index: u64) -> usize {
        Inner::sum_at(self, which, index)
    }
    fn line_sum_at(&self, page: u64, slot: usize) -> usize {
        Inner::line_sum_at(self, page, slot)
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;
    use std::panic::{AssertUnwindSafe, catch_unwind};

    /// The run-time check of the lock order catches a leaf taken under a leaf and a group lock
    /// (or the stop lock) under a leaf, and counts leaves back down when they are released.
    #[test]
    fn the_lock_order_check_catches_nesting_under_a_leaf() {
        let header = Mutex::new(1u32);
        let log = Mutex::new(2u32);
        {
            let h = leaf(&header);
            assert_eq!(*h, 1);
            let nested = catch_unwind(AssertUnwindSafe(|| {
                let _l = leaf(&log);
            }));
            assert!(nested.is_err(), "a leaf under a leaf");
            let group = catch_unwind(|| assert_no_leaf_held("a group's write lock"));
            assert!(group.is_err(), "a group lock under a leaf");
        }
        // Released: both may be taken again, one after the other, and a group lock is fine.
        *leaf(&log) += 1;
        let h = *leaf(&header);
        let l = *leaf(&log);
        assert_eq!(h + l, 4);
        assert_no_leaf_held("a group's write lock");
    }
}
