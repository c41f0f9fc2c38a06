//! The protected region's handle, [`Protected`]: open, the thin calls into the engine, the
//! background threads, close.
//!
//! The engine is split by concern, each part an `impl Inner` block or functions over `Inner`:
//! `inner` (the shared state, addressing, checksums, the header, the lock order), `lazy` (the
//! update pass and its thread), `eager` (eager and txb-page writes, the verified read),
//! `rebuild` (resync, line rebuild, a page from parity), `open` (format, open's decision
//! table, carrying it out). Scrub and repair (`repair`) and statistics (`report`) build on
//! `Inner`; `Inner` names none of their types.
//!
//! Locking: the data pages are split into *groups* of 16 stripes (see
//! [`Geometry::group_pages`]); each group has a reader-writer lock. Eager and txb-page writes,
//! the update pass, repair and rebuilds take the group's write lock; eager reads and the
//! scrubber take its read lock. Lazy-mode writers take no lock at all: they store, and write
//! tracking notices. The order in which the locks are taken is stated beside `Inner`.

pub use crate::open::format;
pub use crate::options::{
    CreateOptions, Mode, OpenOptions, OpenReport, PAGES_LISTED_MAX, Placement, Progress,
};

// The paths these had before the engine was split, for code in the crate that names them so.
#[allow(unused_imports)]
pub(crate) use crate::inner::{Inner, Log};
#[allow(unused_imports)]
pub(crate) use crate::layout::Sums;

use crate::error::Result;
use crate::finding::{Finding, PassStats};
use crate::inner::PAGE;
use crate::layout::{Geometry, state};
use crate::report::Stats;
use crate::tracker::TrackerKind;
use pmem::Medium;
use std::sync::Arc;

/// A protected data region: its redundancy, kept in the chosen mode.
#[derive(Debug)]
pub struct Protected<M: Medium + 'static> {
    pub(crate) inner: Arc<Inner<M>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl<M: Medium + 'static> Protected<M> {
    /// Open the protected region at `place`: check the header, decide what to do (the table
    /// "What open does" in `docs/integrity.md`), resync after an unclean shutdown, switch mode
    /// if asked, arm tracking and start the background threads.
    pub fn open(
        medium: M,
        place: &Placement,
        mut opts: OpenOptions,
        progress: Progress<'_>,
    ) -> Result<(Protected<M>, OpenReport)> {
        let (inner, report, plan) = crate::open::open_region(medium, place, &mut opts, progress)?;
        let inner = Arc::new(inner);
        let mut threads = Vec::new();
        if plan.updater {
            let me = Arc::clone(&inner);
            threads.push(
                std::thread::Builder::new()
                    .name("kavach-integrity-pass".into())
                    .spawn(move || crate::lazy::updater(me))
                    .map_err(|e| {
                        pmem::PmemError::io("cannot start the update thread", "<thread>", e)
                    })?,
            );
        }
        if plan.scrubber {
            let me = Arc::clone(&inner);
            let rate = opts.scrub_pages_per_sec;
            threads.push(
                std::thread::Builder::new()
                    .name("kavach-integrity-scrub".into())
                    .spawn(move || crate::repair::scrubber(me, rate))
                    .map_err(|e| pmem::PmemError::io("cannot start the scrubber", "<thread>", e))?,
            );
        }
        Ok((Protected { inner, threads }, report))
    }

    /// The mode in force.
    pub fn mode(&self) -> Mode {
        self.inner.mode
    }
    /// The layout.
    pub fn geometry(&self) -> Geometry {
        self.inner.geo
    }
    /// The tracker's kind (lazy mode).
    pub fn tracker_kind(&self) -> TrackerKind {
        self.inner.tracker.kind()
    }
    /// The medium.
    pub fn medium(&self) -> &M {
        &self.inner.medium
    }
    /// Pool offset of the data region's first byte.
    pub fn data_offset(&self) -> u64 {
        self.inner.data_at as u64
    }

    /// Write `data` at byte `offset` of the region and persist it, keeping redundancy as the
    /// mode says. In lazy mode a program may instead store straight into the mapping; tracking
    /// sees it (unless the tracker is explicit, in which case it must call [`Self::mark`]
    /// first).
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.inner.write(offset, data)
    }
    /// Read bytes at `offset`. In eager mode every line read is verified, and repaired from
    /// parity on a mismatch; an unrepairable line is an error, never wrong data.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read(offset, buf)
    }
    /// Tell an explicit tracker that `[offset, offset + len)` is stored to: call it both
    /// before the store (so the scrubber does not verify the page while it changes) and after
    /// it (so an update pass that collected the page in between does not miss the store).
    pub fn mark(&self, offset: u64, len: u64) {
        if len > 0 {
            let first = offset / PAGE;
            let end = (offset + len).div_ceil(PAGE);
            self.inner.tracker.mark(first, end - first);
        }
    }
    /// Run one update pass now (lazy mode; a no-op otherwise).
    pub fn run_pass(&self) -> Result<PassStats> {
        self.inner.run_pass()
    }
    /// The last pass before power is lost: bring every written page's redundancy up to date.
    /// The power-failure path calls this; `close` does too.
    pub fn final_pass(&self) -> Result<PassStats> {
        self.inner.run_pass()
    }
    /// The layer's part in a flush-on-fail save, with the writers stopped: the final pass,
    /// every line of the data and the redundancy written back and fenced, then the header's
    /// state `clean`, as a clean close leaves it. Whatever the pool's record says afterwards,
    /// the header is true: the next open trusts the redundancy and skips the resync. Call
    /// [`Protected::unseal`] before a writer stores again.
    pub fn seal(&self) -> Result<PassStats> {
        if self.inner.read_only {
            return Ok(PassStats::default());
        }
        let stats = self.inner.run_pass()?;
        if self.inner.mode != Mode::Off {
            let i = &self.inner;
            i.medium
                .write_back(i.data_at, (i.geo.data_pages * PAGE) as usize)?;
            i.medium.write_back(i.meta_at, i.geo.meta_bytes as usize)?;
            i.medium.fence()?;
            i.write_header(|h| h.state = state::CLEAN)?;
        }
        Ok(stats)
    }
    /// Writers may store again after [`Protected::seal`]: the header's state goes back to
    /// `open`, durably, first.
    pub fn unseal(&self) -> Result<()> {
        if self.inner.read_only || self.inner.mode == Mode::Off {
            return Ok(());
        }
        self.inner.write_header(|h| h.state = state::OPEN)
    }
    /// Verify every clean page, checksum block, parity page and (when current) line checksum;
    /// change nothing, on a read-only handle as on a read-write one. Whether a mismatch is
    /// damage or unverifiable, and whether the region can count as verified, follows the trust
    /// open found ([`crate::trust`]).
    pub fn scrub(&self, progress: Progress<'_>) -> Result<crate::report::ScrubReport> {
        crate::repair::scrub(&self.inner, progress)
    }
    /// Scrub, then repair what parity can; for an unverified region, prove every stripe and
    /// clear the mark only if all are proven.
    pub fn repair(&self, progress: Progress<'_>) -> Result<crate::report::RepairReport> {
        crate::repair::repair(&self.inner, progress)
    }
    /// Statistics (see [`Stats`]).
    pub fn stats(&self) -> Stats {
        crate::report::stats(&self.inner)
    }
    /// Findings noted by passes, eager reads and writes and the background scrubber.
    pub fn findings(&self) -> Vec<Finding> {
        let log = crate::inner::leaf(&self.inner.log);
        log.findings.iter().cloned().collect()
    }

    fn stop_threads(&mut self) {
        crate::inner::assert_no_leaf_held("the stop lock");
        *self.inner.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.inner.wake.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    /// Stop the background threads, run the final pass and record a clean shutdown.
    pub fn close(mut self) -> Result<()> {
        self.stop_threads();
        if self.inner.read_only {
            return Ok(());
        }
        self.inner.run_pass()?;
        if self.inner.mode != Mode::Off {
            // Where flushes may be skipped (eadr, which flush on fail runs as, and the
            // simulator), the `clean` state must not be durable before the redundancy the
            // final pass wrote: write the region back first.
            if matches!(
                self.inner.medium.domain(),
                pmem::Domain::Eadr | pmem::Domain::Sim
            ) {
                let i = &self.inner;
                i.medium
                    .write_back(i.data_at, (i.geo.data_pages * PAGE) as usize)?;
                i.medium.write_back(i.meta_at, i.geo.meta_bytes as usize)?;
            }
            self.inner.medium.fence()?;
            self.inner.write_header(|h| h.state = state::CLEAN)?;
        }
        Ok(())
    }
}

impl<M: Medium + 'static> Drop for Protected<M> {
    fn drop(&mut self) {
        // Without `close` the header stays `open`: the next open resyncs.
        self.stop_threads();
    }
}
