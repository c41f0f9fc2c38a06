//! The write paths of eager (TVARAK in software) and txb-page modes, and the verified read of
//! eager mode. Off and lazy writes are here too (a store and a persist; lazy marks the tracker
//! around it), so that `Inner::write` is one match over the mode.

use crate::checksum::{page_delta, xor_into};
use crate::error::{IntegrityError, Result};
use crate::finding::Finding;
use crate::inner::{Inner, LineSpan, PAGE, line_spans};
use crate::layout::{LINE_BYTES, Sums};
use crate::options::Mode;
use crate::rebuild::rebuild_page;
use pmem::Medium;
use pmem::layout::PAGE_SIZE;
use std::sync::atomic::Ordering;

impl<M: Medium> Inner<M> {
    /// Verify the line at (`page`, `slot`) against its line checksum; on a mismatch, sort out
    /// whether the line checksum or the data is wrong, repairing the data from parity. The
    /// caller holds the group's write lock.
    pub(crate) fn settle_line(
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
            rebuild_page(self, page).map_err(|reason| IntegrityError::Unrepairable {
                region: self.region.clone(),
                page,
                reason,
            })?;
            self.repairs_on_read.fetch_add(1, Ordering::Relaxed);
        }
        self.write_lines(page)?;
        self.medium.fence()?;
        self.medium
            .read(self.page_at(page) + slot * LINE_BYTES, &mut line[..]);
        Ok(())
    }

    /// Eager write of part of one line: `lo..lo + bytes.len()` within the line at (`page`,
    /// `slot`). The caller holds the group's write lock and fences afterwards.
    pub(crate) fn eager_line(&self, page: u64, slot: usize, lo: usize, bytes: &[u8]) -> Result<()> {
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
    pub(crate) fn txb_commit(&self, pages: std::ops::Range<u64>) -> Result<()> {
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
        for LineSpan {
            page,
            slot,
            lo,
            n,
            at,
        } in line_spans(offset, buf.len())
        {
            let group = self.group_of(page);
            let mut line = [0u8; LINE_BYTES];
            let line_at = self.page_at(page) + slot * LINE_BYTES;
            let ok = {
                let _g = self.lock_read(group);
                self.medium.read(line_at, &mut line);
                self.read_u32(self.line_sum_at(page, slot)) == self.line_sum_of(page, slot, &line)
            };
            if !ok {
                self.check_usable()?;
                let _g = self.lock_write(group);
                self.medium.read(line_at, &mut line);
                self.settle_line(page, slot, &mut line, "read")?;
            }
            buf[at..at + n].copy_from_slice(&line[lo..lo + n]);
        }
        Ok(())
    }
}
