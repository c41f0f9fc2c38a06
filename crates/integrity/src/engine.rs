//! The protected region: its modes, the write and read paths, the update pass, resync.
//!
//! One [`Protected`] handle keeps the redundancy of one data region. Locking: the data pages are
//! split into *groups* of 16 stripes (see [`Geometry::group_pages`]); each group has a
//! reader-writer lock. Eager and txb-page writes, the update pass, repair and rebuilds take the
//! group's write lock; eager reads and the scrubber take its read lock. Lazy-mode writers take no
//! lock at all: they store, and write tracking notices.

use crate::checksum::{Tag, checksum, page_delta, xor_into};
use crate::error::{IntegrityError, Result};
use crate::header::Header;
use crate::layout::{
    self, Geometry, HEADER_BYTES, HEADER_COPY_OFFSETS, LINE_BYTES, LINES_PER_PAGE, RETIRED_AT,
    RETIRED_BYTES, SUM_BLOCK_BYTES, SUMS_PER_BLOCK, flags, state,
};
use crate::report::{Finding, PassStats, Stats};
use crate::tracker::{BATCH_WORDS, BatchBits, Tracker, TrackerKind, explicit::ExplicitTracker};
use crate::trust::{Basis, Trust};
use pmem::layout::PAGE_SIZE;
use pmem::{Medium, Uuid};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, RwLockWriteGuard};
use std::time::{Duration, Instant};

const PAGE: u64 = PAGE_SIZE as u64;
/// Findings kept in memory (the oldest are dropped; counters keep counting).
const FINDINGS_KEPT_MAX: usize = 4096;
/// Samples of the vulnerable-stripe count kept for `Stats`.
const SAMPLES_KEPT_MAX: usize = 256;
/// Pages named one by one in an [`OpenReport`] (the counts keep counting).
pub const PAGES_LISTED_MAX: usize = 64;

/// How a region's redundancy is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// None.
    Off,
    /// Vilamb: a background pass every period.
    Lazy,
    /// TVARAK's controller in software: on every write through the API, from the diff.
    Eager,
    /// Baseline: each write recomputes its pages' checksums and its stripes' parity whole.
    TxbPage,
}

impl Mode {
    /// The header's code.
    pub fn code(self) -> u32 {
        match self {
            Mode::Off => layout::mode::OFF,
            Mode::Lazy => layout::mode::LAZY,
            Mode::Eager => layout::mode::EAGER,
            Mode::TxbPage => layout::mode::TXB_PAGE,
        }
    }
    /// The mode for a header code.
    pub fn from_code(code: u32) -> Option<Mode> {
        [Mode::Off, Mode::Lazy, Mode::Eager, Mode::TxbPage]
            .into_iter()
            .find(|m| m.code() == code)
    }
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Lazy => "lazy",
            Mode::Eager => "eager",
            Mode::TxbPage => "txb-page",
        }
    }
    /// Parse a name.
    pub fn parse(name: &str) -> Option<Mode> {
        [Mode::Off, Mode::Lazy, Mode::Eager, Mode::TxbPage]
            .into_iter()
            .find(|m| m.name() == name)
    }
}

/// How a new protected region is set up.
#[derive(Debug, Clone, Copy)]
pub struct CreateOptions {
    /// Mode recorded in the header (the default for later opens).
    pub mode: Mode,
    /// Data pages per stripe, 2..=32.
    pub stripe_pages: u32,
    /// Lazy mode's period, 100..=60000 ms.
    pub period_ms: u32,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            mode: Mode::Lazy,
            stripe_pages: layout::STRIPE_PAGES_DEFAULT,
            period_ms: layout::PERIOD_MS_DEFAULT,
        }
    }
}

/// How to open a protected region.
#[derive(Debug, Default)]
pub struct OpenOptions {
    /// Switch to this mode (recorded in the header); `None` keeps the recorded one.
    pub mode: Option<Mode>,
    /// Change lazy mode's period (recorded); `None` keeps it.
    pub period_ms: Option<u32>,
    /// Write tracking for lazy mode; `None` means explicit marking (writes through the API).
    pub tracker: Option<Box<dyn Tracker>>,
    /// Run lazy mode's update pass on a background thread every period.
    pub background: bool,
    /// Run the scrubber on a background thread at this many pages per second (0: off).
    pub scrub_pages_per_sec: u64,
    /// Open without changing anything (scrub only; no resync, no writes).
    pub read_only: bool,
}

/// Push `page` onto a list kept to [`PAGES_LISTED_MAX`] entries.
fn list_page(list: &mut Vec<u64>, page: u64) {
    if list.len() < PAGES_LISTED_MAX {
        list.push(page);
    }
}

/// What opening found and did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct OpenReport {
    /// The header said the region was closed cleanly with current redundancy.
    pub clean_at_open: bool,
    /// The recorded state: `clean`, `open` (a crash) or `stale` (mode off was used).
    pub previous_state: &'static str,
    /// Damage to one header copy (the other was used).
    pub header_damage: Vec<String>,
    /// The retired page of the integrity region (where earlier versions kept a shadow batch
    /// record) held bytes, and this read-write open wrote zeros there (see
    /// `docs/format/integrity.md`); its contents were not used for anything.
    pub retired_bytes_cleared: bool,
    /// Pages whose checksums were rebuilt by a full resync (0 if none was needed; a resync runs
    /// only in a read-write open of an unclean region).
    pub resync_pages: u64,
    /// Of those, pages whose stored checksum did not match (written after the last pass, or
    /// damaged at rest: a resync cannot tell which).
    pub resync_pages_changed: u64,
    /// Time the resync took.
    pub resync_ms: u64,
    /// The first [`PAGES_LISTED_MAX`] of those pages: each one's current contents were taken
    /// as the data.
    pub resync_pages_changed_list: Vec<u64>,
    /// How far the stored redundancy could be trusted when open read it, before doing
    /// anything (see [`crate::trust`]).
    pub trust: Trust,
    /// Pages whose line checksums were computed because they were not current (a switch to
    /// eager mode); only pages that pass their page checksum get them.
    pub lines_rebuilt_pages: u64,
    /// Pages that failed their page checksum, so their line checksums were not computed from
    /// them (every read of them goes through the page checksum and parity); first
    /// [`PAGES_LISTED_MAX`].
    pub lines_refused_pages: Vec<u64>,
}

/// Progress of a long operation: (done, total) in pages.
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

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
    header: Mutex<Header>,
    trust: Mutex<Trust>,
    pub(crate) log: Mutex<Log>,
    pub(crate) eager_writes: AtomicU64,
    pub(crate) repairs_on_read: AtomicU64,
    stop: Mutex<bool>,
    wake: Condvar,
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

/// Which checksum array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sums {
    /// One per data page.
    Pages,
    /// One per parity page.
    Parity,
}

impl<M: Medium> Inner<M> {
    // ---------- addressing ----------

    pub(crate) fn page_at(&self, page: u64) -> usize {
        self.data_at + (page * PAGE) as usize
    }
    fn meta(&self, offset: u64) -> usize {
        self.meta_at + offset as usize
    }
    pub(crate) fn parity_at(&self, stripe: u64) -> usize {
        self.meta(self.geo.parity_at + stripe * PAGE)
    }
    fn sums_layout(&self, which: Sums) -> (u64, u64, u64, Tag, Tag) {
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
        self.header.lock().unwrap_or_else(|e| e.into_inner()).flags & flags::LINES_VALID != 0
    }
    pub(crate) fn trust(&self) -> Trust {
        self.trust.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    fn set_trust(&self, t: Trust) {
        *self.trust.lock().unwrap_or_else(|e| e.into_inner()) = t;
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
    fn write_u32(&self, at: usize, v: u32) -> Result<()> {
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
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
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
        self.groups[group]
            .write()
            .unwrap_or_else(|e| e.into_inner())
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

    fn check_range(&self, offset: u64, len: usize) -> Result<()> {
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

    fn write_header(&self, change: impl FnOnce(&mut Header)) -> Result<()> {
        let mut h = self.header.lock().unwrap_or_else(|e| e.into_inner());
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
    fn clear_retired(&self) -> Result<bool> {
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

    // ---------- rebuilding redundancy ----------

    /// Recompute everything for lock group `group` from the data as it is: page checksums,
    /// parity, parity checksums, block checksums, and line checksums when `lines`. Returns the
    /// number of pages whose stored checksum changed. The caller holds the group's lock (or no
    /// one else can run).
    fn rebuild_group(&self, group: u64, lines: bool, listed: &mut Vec<u64>) -> Result<u64> {
        let g = &self.geo;
        let k = g.stripe_pages as u64;
        let first_stripe = group * SUMS_PER_BLOCK;
        let last_stripe = (first_stripe + SUMS_PER_BLOCK).min(g.stripes);
        let mut page = vec![0u8; PAGE_SIZE];
        let mut parity = vec![0u8; PAGE_SIZE];
        let mut changed = 0;
        let mut line_sums = vec![0u8; LINES_PER_PAGE * 4];
        for s in first_stripe..last_stripe {
            parity.fill(0);
            for p in g.stripe_pages_range(s) {
                self.read_page(p, &mut page);
                let sum = self.page_sum_of(p, &page);
                if self.sum(Sums::Pages, p) != sum {
                    changed += 1;
                    list_page(listed, p);
                    self.set_sum(Sums::Pages, p, sum)?;
                }
                xor_into(&mut parity, &page);
                if lines {
                    for (slot, line) in page.chunks_exact(LINE_BYTES).enumerate() {
                        let v = self.line_sum_of(p, slot, line);
                        line_sums[slot * 4..slot * 4 + 4].copy_from_slice(&v.to_le_bytes());
                    }
                    let at = self.line_sum_at(p, 0);
                    self.medium.write(at, &line_sums);
                    self.medium.flush(at, line_sums.len())?;
                }
            }
            let sum = self.write_parity(s, &parity)?;
            self.set_sum(Sums::Parity, s, sum)?;
        }
        // Whole blocks, including the zero padding of a short last block.
        let first_page = first_stripe * k;
        let end_page = (last_stripe * k).min(g.data_pages);
        for b in first_page / SUMS_PER_BLOCK..end_page.div_ceil(SUMS_PER_BLOCK) {
            for i in b * SUMS_PER_BLOCK..(b + 1) * SUMS_PER_BLOCK {
                if i >= g.data_pages {
                    self.set_sum(Sums::Pages, i, 0)?;
                }
            }
            self.reseal(Sums::Pages, b)?;
        }
        for i in last_stripe..(group + 1) * SUMS_PER_BLOCK {
            self.set_sum(Sums::Parity, i, 0)?;
        }
        self.reseal(Sums::Parity, group)?;
        self.medium.fence()?;
        Ok(changed)
    }

    /// Rebuild every group (a RAID resync). Returns (pages, pages whose checksum changed, the
    /// first of those).
    fn resync(&self, lines: bool, progress: Progress<'_>) -> Result<(u64, u64, Vec<u64>)> {
        let mut changed = 0;
        let mut listed = Vec::new();
        for group in 0..self.geo.groups() {
            let _g = self.lock_write(group as usize);
            changed += self.rebuild_group(group, lines, &mut listed)?;
            progress(
                ((group + 1) * self.geo.group_pages()).min(self.geo.data_pages),
                self.geo.data_pages,
            );
        }
        Ok((self.geo.data_pages, changed, listed))
    }

    /// Compute the line checksums of every page that passes its page checksum; a page that
    /// fails it gets line checksums that cannot match (the complement), so every read of it
    /// goes through the page checksum and parity, and is reported. Page checksums and parity
    /// are not touched: a line rebuild never takes damage for data. Returns (pages given line
    /// checksums, the first pages refused, pages refused).
    fn rebuild_lines_verified(&self, progress: Progress<'_>) -> Result<(u64, Vec<u64>, u64)> {
        let mut page = vec![0u8; PAGE_SIZE];
        let mut sums = vec![0u8; LINES_PER_PAGE * 4];
        let (mut rebuilt, mut refused, mut listed) = (0, 0, Vec::new());
        let gp = self.geo.group_pages();
        for group in 0..self.geo.groups() {
            let _g = self.lock_write(group as usize);
            for p in group * gp..((group + 1) * gp).min(self.geo.data_pages) {
                self.read_page(p, &mut page);
                let stored = self.sum(Sums::Pages, p);
                let computed = self.page_sum_of(p, &page);
                let poison = if stored == computed {
                    rebuilt += 1;
                    0
                } else {
                    refused += 1;
                    list_page(&mut listed, p);
                    self.note(Finding::page(self, p, stored, computed, "open"));
                    u32::MAX
                };
                for (slot, line) in page.chunks_exact(LINE_BYTES).enumerate() {
                    let v = self.line_sum_of(p, slot, line) ^ poison;
                    sums[slot * 4..slot * 4 + 4].copy_from_slice(&v.to_le_bytes());
                }
                let at = self.line_sum_at(p, 0);
                self.medium.write(at, &sums);
                self.medium.flush(at, sums.len())?;
            }
            self.medium.fence()?;
            progress(
                ((group + 1) * gp).min(self.geo.data_pages),
                self.geo.data_pages,
            );
        }
        Ok((rebuilt, listed, refused))
    }

    // ---------- the update pass (Vilamb's Algorithm 1, corrected) ----------

    /// Bring stripe `stripe` up to date: `dirty` has bit `i` set for its `i`-th page if that
    /// page was written. Dirty pages get new checksums. Clean pages are verified first; parity
    /// is recomputed only if all of them pass (never over a page that fails its checksum).
    /// Returns the number of pages whose checksum was rewritten.
    fn update_stripe(
        &self,
        stripe: u64,
        dirty: u64,
        buf: &mut [u8],
        by: &'static str,
    ) -> Result<u64> {
        let range = self.geo.stripe_pages_range(stripe);
        let mut parity = vec![0u8; PAGE_SIZE];
        let mut new_sums = Vec::with_capacity(range.clone().count());
        let mut withhold = false;
        for (i, p) in range.clone().enumerate() {
            let page = &mut buf[..PAGE_SIZE];
            self.read_page(p, page);
            let sum = self.page_sum_of(p, page);
            if dirty >> i & 1 == 1 {
                new_sums.push((p, sum));
            } else {
                let stored = self.sum(Sums::Pages, p);
                // A lazy-mode writer takes no lock: a page clean at the collect may have been
                // stored to since. Tracking says so (the store marks it before it lands); then
                // it is not damage, and the next pass covers it.
                if stored != sum && self.written(p, 1)?[0] & 1 == 0 {
                    withhold = true;
                    let block = p / SUMS_PER_BLOCK;
                    if self.block_ok(Sums::Pages, block) {
                        self.note(Finding::page(self, p, stored, sum, by));
                    } else {
                        let (s, c) = self.block_check(Sums::Pages, block);
                        self.note(Finding::block(self, Sums::Pages, block, s, c, by));
                    }
                }
            }
            xor_into(&mut parity, page);
        }
        self.update_sums(Sums::Pages, &new_sums, by)?;
        if !withhold {
            let sum = self.write_parity(stripe, &parity)?;
            self.update_sums(Sums::Parity, &[(stripe, sum)], by)?;
        }
        Ok(new_sums.len() as u64)
    }

    /// One update pass over every batch. Returns what it did.
    pub(crate) fn run_pass(&self) -> Result<PassStats> {
        self.check_usable()?;
        let started = Instant::now();
        let mut st = PassStats::default();
        if self.mode != Mode::Lazy {
            return Ok(st);
        }
        let g = self.geo;
        let batch = g.batch_pages();
        let gp = g.group_pages();
        let k = g.stripe_pages as u64;
        let mut buf = vec![0u8; PAGE_SIZE];
        let mut first = 0;
        while first < g.data_pages {
            let count = batch.min(g.data_pages - first) as u32;
            // Hold every group of the batch from before the collect until its new redundancy
            // is durable: no scrubber can see a page that tracking calls clean while its
            // redundancy is still old. (Vilamb also persists the batch's dirty bits before
            // changing redundancy and clears them after, so that a battery-backed recovery can
            // finish the batch; here an unclean shutdown resyncs every page, since tracking of
            // the pages written after the batch is lost anyway, so such a record would name
            // nothing that recovery needs: see `docs/integrity.md`, "No battery".)
            let locks: Vec<_> = (first / gp..(first + count as u64).div_ceil(gp))
                .map(|grp| self.lock_write(grp as usize))
                .collect();
            let t = Instant::now();
            let mut bits = [0u64; BATCH_WORDS];
            self.tracker.collect(first, count, &mut bits)?;
            st.tracking_us += t.elapsed().as_micros() as u64;
            if bits.iter().any(|&w| w != 0) {
                st.dirty_batches += 1;
                let mut s = first / k;
                while s * k < first + count as u64 {
                    let range = g.stripe_pages_range(s);
                    let mut dirty = 0u64;
                    for (i, p) in range.enumerate() {
                        let bit = p - first;
                        dirty |= (bits[(bit / 64) as usize] >> (bit % 64) & 1) << i;
                    }
                    // The fix to Algorithm 1: one decision per stripe, from all its pages.
                    if dirty != 0 {
                        st.pages_updated += self.update_stripe(s, dirty, &mut buf, "pass")?;
                        st.stripes_updated += 1;
                    }
                    s += 1;
                }
                // The redundancy is durable before the locks are released.
                self.medium.fence()?;
            }
            drop(locks);
            first += count as u64;
        }
        st.duration_us = started.elapsed().as_micros() as u64;
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(prev) = log.last_pass_start {
            let coverage = (Instant::now() - prev).as_millis() as u64;
            log.coverage_ms_max = log.coverage_ms_max.max(coverage);
        }
        log.last_pass_start = Some(started);
        log.passes += 1;
        log.pages_updated_total += st.pages_updated;
        log.pass_us_total += st.duration_us;
        log.tracking_us_total += st.tracking_us;
        if log.samples.len() >= SAMPLES_KEPT_MAX {
            log.samples.pop_front();
        }
        log.samples.push_back(st.stripes_updated);
        log.last = st.clone();
        Ok(st)
    }

    // ---------- eager and txb-page writes ----------

    /// Verify the line at (`page`, `slot`) against its line checksum; on a mismatch, sort out
    /// whether the line checksum or the data is wrong, repairing the data from parity. The
    /// caller holds the group's write lock.
    fn settle_line(
        &self,
        page: u64,
        slot: usize,
        line: &mut [u8; LINE_BYTES],
        by: &'static str,
    ) -> Result<()> {
        let stored = self.read_u32(self.line_sum_at(page, slot));
        let sum = self.line_sum_of(page, slot, line);
        if stored == sum {
            return Ok(());
        }
        let mut bytes = vec![0u8; PAGE_SIZE];
        self.read_page(page, &mut bytes);
        let want = self.sum(Sums::Pages, page);
        let have = self.page_sum_of(page, &bytes);
        if want == have {
            // The data is right; a line checksum was damaged.
            self.note(Finding::line(self, page, slot, stored, sum, by));
        } else {
            self.note(Finding::page(self, page, want, have, by));
            crate::repair::rebuild_page(self, page).map_err(|reason| {
                IntegrityError::Unrepairable {
                    region: self.region.clone(),
                    page,
                    reason,
                }
            })?;
            self.repairs_on_read.fetch_add(1, Ordering::Relaxed);
        }
        self.write_lines(page)?;
        self.medium.fence()?;
        self.medium
            .read(self.page_at(page) + slot * LINE_BYTES, &mut line[..]);
        Ok(())
    }

    /// Store and flush the parity page of `stripe`; returns its checksum, for the caller to
    /// record (directly, or through its checksum block).
    pub(crate) fn write_parity(&self, stripe: u64, parity: &[u8]) -> Result<u32> {
        let at = self.parity_at(stripe);
        self.medium.write(at, parity);
        self.medium.flush(at, PAGE_SIZE)?;
        Ok(self.parity_sum_of(stripe, parity))
    }

    /// Recompute and store all line checksums of `page`.
    pub(crate) fn write_lines(&self, page: u64) -> Result<()> {
        let mut bytes = vec![0u8; PAGE_SIZE];
        self.read_page(page, &mut bytes);
        let mut sums = vec![0u8; LINES_PER_PAGE * 4];
        for (slot, line) in bytes.chunks_exact(LINE_BYTES).enumerate() {
            sums[slot * 4..slot * 4 + 4]
                .copy_from_slice(&self.line_sum_of(page, slot, line).to_le_bytes());
        }
        let at = self.line_sum_at(page, 0);
        self.medium.write(at, &sums);
        self.medium.flush(at, sums.len())?;
        Ok(())
    }

    /// Eager write of part of one line: `lo..lo + bytes.len()` within the line at (`page`,
    /// `slot`). The caller holds the group's write lock and fences afterwards.
    fn eager_line(&self, page: u64, slot: usize, lo: usize, bytes: &[u8]) -> Result<()> {
        let line_at = self.page_at(page) + slot * LINE_BYTES;
        let mut old = [0u8; LINE_BYTES];
        self.medium.read(line_at, &mut old);
        // TVARAK verifies a line when it is filled; the old bytes are about to be folded into
        // parity, so they must be right.
        self.settle_line(page, slot, &mut old, "write")?;
        let mut new = old;
        new[lo..lo + bytes.len()].copy_from_slice(bytes);
        let mut diff = old;
        xor_into(&mut diff, &new);
        if diff.iter().all(|&b| b == 0) {
            return Ok(());
        }
        self.medium.write(line_at + lo, bytes);
        self.medium.flush(line_at, LINE_BYTES)?;
        let delta = page_delta(slot, &diff);
        let stripe = self.geo.stripe_of(page);
        // Parity += diff, at the same slot of the stripe's parity page.
        let par_at = self.parity_at(stripe) + slot * LINE_BYTES;
        let mut par = [0u8; LINE_BYTES];
        self.medium.read(par_at, &mut par);
        xor_into(&mut par, &diff);
        self.medium.write(par_at, &par);
        self.medium.flush(par_at, LINE_BYTES)?;
        let ls = self.line_sum_of(page, slot, &new);
        self.write_u32(self.line_sum_at(page, slot), ls)?;
        let ps = self.sum(Sums::Pages, page) ^ delta;
        self.update_sums(Sums::Pages, &[(page, ps)], "write")?;
        let qs = self.sum(Sums::Parity, stripe) ^ delta;
        self.update_sums(Sums::Parity, &[(stripe, qs)], "write")?;
        Ok(())
    }

    /// The txb-page baseline: recompute the checksum of each page in `pages` and the parity of
    /// each of their stripes. The caller holds the groups' write locks and fences afterwards.
    fn txb_commit(&self, pages: std::ops::Range<u64>) -> Result<()> {
        let k = self.geo.stripe_pages as u64;
        let mut buf = vec![0u8; PAGE_SIZE];
        let mut s = pages.start / k;
        while s * k < pages.end {
            let range = self.geo.stripe_pages_range(s);
            let mut dirty = 0u64;
            for (i, p) in range.enumerate() {
                if pages.contains(&p) {
                    dirty |= 1 << i;
                }
            }
            self.update_stripe(s, dirty, &mut buf, "write")?;
            s += 1;
        }
        Ok(())
    }

    pub(crate) fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.check_usable()?;
        self.check_range(offset, data.len())?;
        if data.is_empty() {
            return Ok(());
        }
        let at = self.data_at + offset as usize;
        let first_page = offset / PAGE;
        let end_page = (offset + data.len() as u64).div_ceil(PAGE);
        match self.mode {
            Mode::Off => {
                self.medium.write(at, data);
                self.medium.persist(at, data.len())?;
            }
            Mode::Lazy => {
                // Before the store, so a scrubber never takes the page for clean while it
                // changes; after it too, so a collect that ran between the first mark and the
                // store (and reported the page with its old bytes) cannot lose the store. The
                // backends that see stores ignore both.
                self.tracker.mark(first_page, end_page - first_page);
                self.medium.write(at, data);
                self.tracker.mark(first_page, end_page - first_page);
                self.medium.persist(at, data.len())?;
            }
            Mode::Eager => {
                let mut done = 0usize;
                while done < data.len() {
                    let pos = offset + done as u64;
                    let page = pos / PAGE;
                    let in_page = (pos % PAGE) as usize;
                    let slot = in_page / LINE_BYTES;
                    let lo = in_page % LINE_BYTES;
                    let n = (LINE_BYTES - lo).min(data.len() - done);
                    let _g = self.lock_write(self.group_of(page));
                    if let Err(e) = self.eager_line(page, slot, lo, &data[done..done + n]) {
                        // The lines before this one were flushed by this thread: fence them
                        // here, since no other thread's fence (a close's) drains them.
                        self.medium.fence()?;
                        return Err(e);
                    }
                    done += n;
                }
                self.medium.fence()?;
                self.eager_writes.fetch_add(1, Ordering::Relaxed);
            }
            Mode::TxbPage => {
                let gp = self.geo.group_pages();
                let _locks: Vec<_> = (first_page / gp..(end_page).div_ceil(gp))
                    .map(|g| self.lock_write(g as usize))
                    .collect();
                self.medium.write(at, data);
                self.medium.flush(at, data.len())?;
                self.txb_commit(first_page..end_page)?;
                self.medium.fence()?;
            }
        }
        Ok(())
    }

    pub(crate) fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check_range(offset, buf.len())?;
        if self.mode != Mode::Eager || buf.is_empty() {
            self.medium.read(self.data_at + offset as usize, buf);
            return Ok(());
        }
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let page = pos / PAGE;
            let in_page = (pos % PAGE) as usize;
            let slot = in_page / LINE_BYTES;
            let lo = in_page % LINE_BYTES;
            let n = (LINE_BYTES - lo).min(buf.len() - done);
            let group = self.group_of(page);
            let mut line = [0u8; LINE_BYTES];
            let line_at = self.page_at(page) + slot * LINE_BYTES;
            let ok = {
                let _g = self.groups[group].read().unwrap_or_else(|e| e.into_inner());
                self.medium.read(line_at, &mut line);
                self.read_u32(self.line_sum_at(page, slot)) == self.line_sum_of(page, slot, &line)
            };
            if !ok {
                self.check_usable()?;
                let _g = self.lock_write(group);
                self.medium.read(line_at, &mut line);
                self.settle_line(page, slot, &mut line, "read")?;
            }
            buf[done..done + n].copy_from_slice(&line[lo..lo + n]);
            done += n;
        }
        Ok(())
    }

    pub(crate) fn stop_requested(&self, wait: Duration) -> bool {
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

/// A protected data region: its redundancy, kept in the chosen mode.
#[derive(Debug)]
pub struct Protected<M: Medium + 'static> {
    pub(crate) inner: Arc<Inner<M>>,
    threads: Vec<std::thread::JoinHandle<()>>,
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

/// Where a protected region's pieces are on the medium.
#[derive(Debug, Clone)]
pub struct Placement {
    /// The data region's name (for messages).
    pub region: String,
    /// Pool offset of the data region.
    pub data_offset: u64,
    /// Length of the data region in bytes.
    pub data_bytes: u64,
    /// Pool offset of the integrity region.
    pub meta_offset: u64,
    /// Length of the integrity region in bytes.
    pub meta_bytes: u64,
    /// The pool's UUID.
    pub uuid: Uuid,
}

fn build<M: Medium>(
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

fn check_placement<M: Medium>(medium: &M, place: &Placement) -> Result<()> {
    let ends = [
        place.data_offset.checked_add(place.data_bytes),
        place.meta_offset.checked_add(place.meta_bytes),
    ];
    if ends
        .iter()
        .any(|e| e.is_none_or(|e| e > medium.len() as u64))
        || place.data_bytes % PAGE != 0
        || place.data_offset % PAGE != 0
        || place.meta_offset % PAGE != 0
    {
        return Err(IntegrityError::invalid(
            "placement",
            format!(
                "data region `{}` at {:#x} (+{:#x}) and its integrity region at {:#x} (+{:#x}) \
                 do not fit a medium of {:#x} bytes, or are not page-aligned",
                place.region,
                place.data_offset,
                place.data_bytes,
                place.meta_offset,
                place.meta_bytes,
                medium.len()
            ),
        ));
    }
    Ok(())
}

fn validate_period(period_ms: u32) -> Result<()> {
    if !(layout::PERIOD_MS_MIN..=layout::PERIOD_MS_MAX).contains(&period_ms) {
        return Err(IntegrityError::invalid(
            "period",
            format!(
                "{period_ms} ms; the update period is {} ms to {} s",
                layout::PERIOD_MS_MIN,
                layout::PERIOD_MS_MAX / 1000
            ),
        ));
    }
    Ok(())
}

/// Format the integrity region of `place` and compute the redundancy of the data as it is.
/// The region must be at least `Geometry::new(pages, stripe).meta_bytes` long. Crash-safe in
/// the sense that a crash leaves a header in state `stale`, which the next open rebuilds.
pub fn format<M: Medium>(
    medium: M,
    place: &Placement,
    opts: &CreateOptions,
    progress: Progress<'_>,
) -> Result<Geometry> {
    check_placement(&medium, place)?;
    validate_period(opts.period_ms)?;
    let geo = Geometry::new(place.data_bytes / PAGE, opts.stripe_pages).ok_or_else(|| {
        IntegrityError::invalid(
            "stripe",
            format!(
                "{} data pages in stripes of {} (2..=32 pages per stripe)",
                place.data_bytes / PAGE,
                opts.stripe_pages
            ),
        )
    })?;
    if geo.meta_bytes > place.meta_bytes {
        return Err(IntegrityError::invalid(
            "integrity region",
            format!(
                "{} bytes; {} data pages need {}",
                place.meta_bytes, geo.data_pages, geo.meta_bytes
            ),
        ));
    }
    let header = Header {
        mode: opts.mode.code(),
        seq: 0,
        uuid: place.uuid,
        data_offset: place.data_offset,
        geometry: geo,
        period_ms: opts.period_ms,
        state: state::STALE,
        flags: 0,
    };
    let pages = geo.data_pages;
    let inner = build(
        medium,
        place,
        header,
        Mode::Off,
        opts.period_ms,
        Box::new(ExplicitTracker::new(pages)),
        false,
    );
    // Both header copies, state stale, before anything else: a crash from here on leaves a
    // region that the next open rebuilds.
    for copy in HEADER_COPY_OFFSETS {
        inner
            .medium
            .write(inner.meta(copy as u64), &[0; HEADER_BYTES]);
    }
    inner.write_header(|_| {})?;
    inner.write_header(|_| {})?;
    inner
        .medium
        .write(inner.meta(RETIRED_AT as u64), &[0; RETIRED_BYTES]);
    inner
        .medium
        .persist(inner.meta(RETIRED_AT as u64), RETIRED_BYTES)?;
    inner.resync(true, progress)?;
    inner.write_header(|h| {
        h.state = state::CLEAN;
        h.flags = flags::LINES_VALID;
    })?;
    Ok(geo)
}

/// The read-write part of open, by the table of [`crate::trust`]: record the session (state
/// open, or stale in mode off) before anything else is written; then recover an unclean region (a resync: the only place damage
/// can be taken as data, and the report names the pages), or, for a
/// region trusted as it is, compute missing line checksums only from pages that pass their
/// page checksum.
fn open_read_write<M: Medium>(
    inner: &Inner<M>,
    trust: &Trust,
    prior_flags: u32,
    report: &mut OpenReport,
    progress: Progress<'_>,
) -> Result<()> {
    let mode = inner.mode;
    let eager = mode == Mode::Eager;
    let recover = trust.basis == Basis::Unclean && mode != Mode::Off;
    let lines_ok = prior_flags & flags::LINES_VALID != 0 && !recover;
    inner.write_header(|h| {
        h.mode = mode.code();
        h.period_ms = inner.period_ms;
        h.state = if mode == Mode::Off {
            state::STALE
        } else {
            state::OPEN
        };
        // Line checksums are kept only in eager mode: any other mode may change data without
        // them, so they stop counting from now on (and while they are being rebuilt).
        if !(eager && lines_ok) {
            h.flags &= !flags::LINES_VALID;
        }
    })?;
    report.retired_bytes_cleared = inner.clear_retired()?;
    if recover {
        let t = Instant::now();
        let (pages, changed, listed) = inner.resync(eager, progress)?;
        report.resync_pages = pages;
        report.resync_pages_changed = changed;
        report.resync_pages_changed_list = listed;
        report.resync_ms = t.elapsed().as_millis() as u64;
        inner.write_header(|h| {
            h.flags &= !flags::UNVERIFIED;
            if eager {
                h.flags |= flags::LINES_VALID;
            }
        })?;
        inner.set_trust(Trust::current());
    } else if eager && !lines_ok {
        let (rebuilt, listed, _) = inner.rebuild_lines_verified(progress)?;
        report.lines_rebuilt_pages = rebuilt;
        report.lines_refused_pages = listed;
        inner.write_header(|h| h.flags |= flags::LINES_VALID)?;
    }
    Ok(())
}

impl<M: Medium + 'static> Protected<M> {
    /// Open the protected region at `place`: check the header, resync after an unclean
    /// shutdown, switch mode if asked, arm tracking and start the
    /// background threads.
    pub fn open(
        medium: M,
        place: &Placement,
        mut opts: OpenOptions,
        progress: Progress<'_>,
    ) -> Result<(Protected<M>, OpenReport)> {
        check_placement(&medium, place)?;
        let mut report = OpenReport::default();
        let mut copies = Vec::new();
        let mut first_damage = None;
        for (i, off) in HEADER_COPY_OFFSETS.iter().enumerate() {
            let at = place.meta_offset as usize + off;
            let mut b = [0u8; HEADER_BYTES];
            medium.read(at, &mut b);
            match Header::decode(&b, &place.uuid, at as u64) {
                Ok(h) => copies.push(h),
                Err(c) => {
                    report.header_damage.push(format!("copy {i}: {c}"));
                    first_damage.get_or_insert(c);
                }
            }
        }
        let header = match copies.into_iter().max_by_key(|h| h.seq) {
            Some(h) => h,
            None => {
                return Err(IntegrityError::Corrupt(first_damage.unwrap_or_else(|| {
                    pmem::Corruption {
                        structure: "integrity header".into(),
                        offset: place.meta_offset,
                        field: "magic",
                        expected: "a header".into(),
                        found: "none".into(),
                    }
                })));
            }
        };
        if report.header_damage.len() == 2 {
            report.header_damage.clear();
        }
        let geo = header.geometry;
        if header.data_offset != place.data_offset || geo.data_pages * PAGE != place.data_bytes {
            return Err(IntegrityError::Corrupt(pmem::Corruption {
                structure: "integrity header".into(),
                offset: place.meta_offset,
                field: "data_offset/data_pages",
                expected: format!(
                    "the data region: offset {:#x}, {} pages",
                    place.data_offset,
                    place.data_bytes / PAGE
                ),
                found: format!("offset {:#x}, {} pages", header.data_offset, geo.data_pages),
            }));
        }
        if geo.meta_bytes > place.meta_bytes {
            return Err(IntegrityError::Corrupt(pmem::Corruption {
                structure: "integrity header".into(),
                offset: place.meta_offset,
                field: "meta_bytes",
                expected: format!("at most the region's {} bytes", place.meta_bytes),
                found: geo.meta_bytes.to_string(),
            }));
        }
        let recorded = Mode::from_code(header.mode).unwrap_or(Mode::Off);
        let mode = opts.mode.unwrap_or(recorded);
        let period_ms = opts.period_ms.unwrap_or(header.period_ms);
        validate_period(period_ms)?;
        report.clean_at_open = header.state == state::CLEAN;
        report.previous_state = match header.state {
            state::CLEAN => "clean",
            state::OPEN => "open",
            _ => "stale",
        };
        let tracker = opts
            .tracker
            .take()
            .unwrap_or_else(|| Box::new(ExplicitTracker::new(geo.data_pages)));
        if tracker.pages() != geo.data_pages {
            return Err(IntegrityError::invalid(
                "tracker",
                format!(
                    "it tracks {} pages; the region has {}",
                    tracker.pages(),
                    geo.data_pages
                ),
            ));
        }
        let prior_flags = header.flags;
        let trust =
            crate::trust::decide(!report.header_damage.is_empty(), header.state, header.flags);
        report.trust = trust.clone();
        let inner = build(
            medium,
            place,
            header,
            mode,
            period_ms,
            tracker,
            opts.read_only,
        );
        inner.set_trust(trust.clone());
        if !opts.read_only {
            open_read_write(&inner, &trust, prior_flags, &mut report, progress)?;
            if mode == Mode::Lazy {
                inner.tracker.arm()?;
            }
        }
        let inner = Arc::new(inner);
        let mut threads = Vec::new();
        if !opts.read_only && mode == Mode::Lazy && opts.background {
            let me = Arc::clone(&inner);
            threads.push(
                std::thread::Builder::new()
                    .name("kavach-integrity-pass".into())
                    .spawn(move || updater(me))
                    .map_err(|e| {
                        pmem::PmemError::io("cannot start the update thread", "<thread>", e)
                    })?,
            );
        }
        if opts.scrub_pages_per_sec > 0 {
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
        let log = self.inner.log.lock().unwrap_or_else(|e| e.into_inner());
        log.findings.iter().cloned().collect()
    }

    fn stop_threads(&mut self) {
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

fn updater<M: Medium>(inner: Arc<Inner<M>>) {
    let period = Duration::from_millis(inner.period_ms as u64);
    let mut next = Instant::now() + period;
    loop {
        let wait = next.saturating_duration_since(Instant::now());
        if inner.stop_requested(wait) {
            return;
        }
        next += period;
        if let Err(e) = inner.run_pass() {
            let mut log = inner.log.lock().unwrap_or_else(|e| e.into_inner());
            log.last_error = Some(e.to_string());
            if matches!(e, IntegrityError::Pmem(_)) {
                inner.failed.store(true, Ordering::Release);
                return;
            }
        }
        // Start to start; after an overrun, start again at once but do not pile up.
        let now = Instant::now();
        if next < now {
            next = now;
        }
    }
}
