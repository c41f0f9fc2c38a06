//! Lazy mode (Vilamb): the update pass, which brings the redundancy of every page written since
//! the last pass up to date (Vilamb's Algorithm 1, corrected: one decision per stripe), and
//! the background thread that runs it every period.

use crate::checksum::xor_into;
use crate::error::{IntegrityError, Result};
use crate::finding::{Finding, PassStats};
use crate::inner::{Inner, SAMPLES_KEPT_MAX, leaf};
use crate::layout::{SUMS_PER_BLOCK, Sums};
use crate::options::Mode;
use crate::tracker::BATCH_WORDS;
use pmem::Medium;
use pmem::layout::PAGE_SIZE;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl<M: Medium> Inner<M> {
    /// Bring stripe `stripe` up to date: `dirty` has bit `i` set for its `i`-th page if that
    /// page was written. Dirty pages get new checksums. Clean pages are verified first; parity
    /// is recomputed only if all of them pass (never over a page that fails its checksum).
    /// Returns the number of pages whose checksum was rewritten.
    pub(crate) fn update_stripe(
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
        let mut log = leaf(&self.log);
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
}

/// The background update thread of lazy mode: a pass every period, start to start, until
/// asked to stop; an error of the medium ends it and marks the region failed.
pub(crate) fn updater<M: Medium>(inner: Arc<Inner<M>>) {
    let period = Duration::from_millis(inner.period_ms as u64);
    let mut next = Instant::now() + period;
    loop {
        let wait = next.saturating_duration_since(Instant::now());
        if inner.stop_requested(wait) {
            return;
        }
        next += period;
        if let Err(e) = inner.run_pass() {
            let mut log = leaf(&inner.log);
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
