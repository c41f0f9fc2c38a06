//! Redundancy kept from what a writer reports after the fact: TVARAK's diff applied to
//! transactions.
//!
//! A transactional heap stores into its objects directly and knows, at commit, every range it
//! changed and the bytes those ranges held before (its undo log, or the copy a redo commit
//! takes before applying). [`Protected::committed`] takes that list once the new bytes are in
//! the medium and brings the line checksums, page checksums and parity up to date from
//! `old ^ new`, under the same group locks as an eager [`Protected::write`]. A range whose old
//! bytes are unknown (a block the transaction allocated: its old contents were free space)
//! gets its pages recomputed instead, after the rest of each page and every other page of the
//! stripe is verified, so a recompute never folds damage into parity.
//!
//! [`Protected::recompute_pages`] is the txb-page baseline for such a writer (recompute whole
//! pages and their stripes' parity at commit), and [`Protected::verify_read`] is the check of
//! a transactional read: every line read is compared with its line checksum, and a line that
//! fails it (with a page that fails its page checksum) is refused with a typed error, never
//! served. It does not repair: a read may run beside transactions whose stores are not yet
//! reported, and a rebuild from parity would take those stores back. Scrub and repair do that,
//! with the writers quiet.

use std::collections::BTreeMap;

use crate::checksum::{page_delta, xor_into};
use crate::engine::{Mode, Protected, Sums};
use crate::error::{IntegrityError, Result};
use crate::inner::{LineSpan, line_spans};
use crate::layout::LINE_BYTES;
use crate::report::Finding;
use pmem::Medium;
use pmem::layout::PAGE_SIZE;

const PAGE: u64 = PAGE_SIZE as u64;

/// One range a writer changed, reported after its new bytes reached the medium.
#[derive(Debug, Clone, Copy)]
pub struct Changed<'a> {
    /// Offset of the range in the protected region (not the medium).
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// The bytes the range held before (`len` of them), or `None` if they are unknown.
    pub old: Option<&'a [u8]>,
}

/// What [`Protected::committed`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Lines updated from their diff.
    pub lines_diffed: u64,
    /// Lines whose redundancy was already current (stored twice, or reported twice), or, after
    /// a rollback, never took the stores undone.
    pub lines_current: u64,
    /// Lines updated from their diff without the old line verified: its stored line checksum
    /// matched neither the line before nor after this change, because another writer's stores
    /// in the same line are not reported yet (or the line is damaged; the scrubber sees that,
    /// the redundancy still describing the line as it should be).
    pub lines_unverified: u64,
    /// Pages recomputed whole (old bytes unknown, or txb-page).
    pub pages_recomputed: u64,
    /// Lines or stripes left as they were because something failed its check (each one is a
    /// finding; the scrubber reports it again).
    pub withheld: u64,
}

/// What the changes say about one line: the old bytes of its changed parts (`(start in the
/// line, bytes)`), and whether some changed part's old bytes are unknown.
#[derive(Default)]
struct LineImage<'a> {
    patches: Vec<(usize, &'a [u8])>,
    unknown: bool,
}

impl<M: Medium + 'static> Protected<M> {
    fn check_span(&self, offset: u64, len: u64) -> Result<()> {
        let size = self.inner.geo.data_pages * PAGE;
        if offset.checked_add(len).is_none_or(|e| e > size) {
            return Err(IntegrityError::Invalid {
                what: "range",
                reason: format!("[{offset:#x}, +{len:#x}) is outside the region's {size:#x} bytes"),
            });
        }
        Ok(())
    }

    /// Bring the redundancy up to date with `changes`, whose new bytes are already in the
    /// medium (and durable, as far as the writer's protocol needs). In eager mode each line
    /// whose stored line checksum matches its old bytes is updated from `old ^ new` (line
    /// checksum, page checksum by its CRC delta, parity by the diff, parity checksum); a line
    /// that matches neither its old nor its new bytes is a finding and is left for the
    /// scrubber. In txb-page mode the touched pages are recomputed; in lazy mode they are
    /// marked (only an explicit tracker needs it); off does nothing.
    pub fn committed(&self, changes: &[Changed<'_>]) -> Result<CommitStats> {
        self.settle(changes, true)
    }

    /// [`Protected::committed`] for the ranges of an aborted transaction after its rollback:
    /// `old` is what each range held before the rollback (the transaction's own stores). A
    /// line whose redundancy never took those stores (they went straight to the medium) is
    /// current, or, with another writer's unreported stores in it, left alone; only a line
    /// whose redundancy did take them (stores kept eagerly) gets the diff back.
    pub fn rolled_back(&self, changes: &[Changed<'_>]) -> Result<CommitStats> {
        self.settle(changes, false)
    }

    /// `committed` (`blind`: a line that cannot be verified still gets its diff) or
    /// `rolled_back` (it does not).
    fn settle(&self, changes: &[Changed<'_>], blind: bool) -> Result<CommitStats> {
        let inner = &self.inner;
        inner.check_usable()?;
        for c in changes {
            self.check_span(c.offset, c.len)?;
            if let Some(old) = c.old
                && old.len() as u64 != c.len
            {
                return Err(IntegrityError::Invalid {
                    what: "old bytes",
                    reason: format!(
                        "{} old bytes for a change of {} at {:#x}",
                        old.len(),
                        c.len,
                        c.offset
                    ),
                });
            }
        }
        match inner.mode {
            Mode::Off => return Ok(CommitStats::default()),
            Mode::Lazy => {
                for c in changes {
                    self.mark(c.offset, c.len);
                }
                return Ok(CommitStats::default());
            }
            Mode::TxbPage => {
                let mut pages: Vec<u64> = changes
                    .iter()
                    .filter(|c| c.len > 0)
                    .flat_map(|c| c.offset / PAGE..(c.offset + c.len).div_ceil(PAGE))
                    .collect();
                pages.sort_unstable();
                pages.dedup();
                return self.recompute_pages(&pages);
            }
            Mode::Eager => {}
        }
        // Every line touched, with its old image built from all the changes in it (two
        // changes may share a line).
        let mut lines: BTreeMap<(u64, usize), LineImage> = BTreeMap::new();
        for c in changes {
            let mut done = 0u64;
            while done < c.len {
                let pos = c.offset + done;
                let page = pos / PAGE;
                let in_page = (pos % PAGE) as usize;
                let slot = in_page / LINE_BYTES;
                let lo = in_page % LINE_BYTES;
                let n = (LINE_BYTES - lo).min((c.len - done) as usize);
                let img = lines.entry((page, slot)).or_default();
                match c.old {
                    Some(old) => img
                        .patches
                        .push((lo, &old[done as usize..done as usize + n])),
                    None => img.unknown = true,
                }
                done += n as u64;
            }
        }
        // Pages with any unknown old byte are recomputed whole (after the known lines).
        let mut unknown_pages: Vec<u64> = lines
            .iter()
            .filter(|(_, img)| img.unknown)
            .map(|(&(p, _), _)| p)
            .collect();
        unknown_pages.dedup();
        let mut st = CommitStats::default();
        let mut held: Option<(usize, std::sync::RwLockWriteGuard<'_, ()>)> = None;
        for (&(page, slot), img) in &lines {
            if unknown_pages.binary_search(&page).is_ok() {
                continue;
            }
            let group = inner.group_of(page);
            if held.as_ref().is_none_or(|(g, _)| *g != group) {
                drop(held.take());
                held = Some((group, inner.lock_write(group)));
            }
            let line_at = inner.page_at(page) + slot * LINE_BYTES;
            let mut new = [0u8; LINE_BYTES];
            inner.medium.read(line_at, &mut new);
            let stored = inner.read_u32(inner.line_sum_at(page, slot));
            let new_sum = inner.line_sum_of(page, slot, &new);
            if stored == new_sum {
                st.lines_current += 1;
                continue;
            }
            // The line before: as it is now, with every change's old bytes put back (read
            // under the lock, so the parts no change names are the current ones).
            let mut old = new;
            for &(lo, bytes) in &img.patches {
                old[lo..lo + bytes.len()].copy_from_slice(bytes);
            }
            let old_sum = inner.line_sum_of(page, slot, &old);
            if stored == old_sum {
                // TVARAK's case: the old line is verified, the diff applies to it.
                self.apply_diff(page, slot, &old, &new, new_sum, "commit")?;
                st.lines_diffed += 1;
                continue;
            }
            if !blind {
                // After a rollback: this line's redundancy never took the stores undone.
                st.lines_current += 1;
                continue;
            }
            // The line holds stores of another writer not reported yet (a concurrent
            // transaction on other bytes of the same line), or damage: the old line cannot be
            // verified. Apply this change's own diff to what the redundancy describes (line and
            // page checksums are affine in the data, parity linear), so each writer's diff
            // lands once whatever the order; damage stays a mismatch for the scrubber.
            let mut diff = [0u8; LINE_BYTES];
            for &(lo, bytes) in &img.patches {
                for (k, b) in bytes.iter().enumerate() {
                    diff[lo + k] = b ^ new[lo + k];
                }
            }
            let zero = [0u8; LINE_BYTES];
            let sum = stored
                ^ inner.line_sum_of(page, slot, &diff)
                ^ inner.line_sum_of(page, slot, &zero);
            self.apply_diff(page, slot, &zero, &diff, sum, "commit")?;
            st.lines_unverified += 1;
        }
        drop(held);
        inner.medium.fence()?;
        if !unknown_pages.is_empty() {
            // Lines of these pages that no change touched must still match their line
            // checksums: they are the part of the page a recompute would take on trust.
            let touched = |p: u64, s: usize| lines.contains_key(&(p, s));
            let r = self.recompute_inner(&unknown_pages, &touched, true)?;
            st.pages_recomputed += r.pages_recomputed;
            st.withheld += r.withheld;
        }
        inner
            .eager_writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(st)
    }

    /// Line (`page`, `slot`) went from `old` to `new` (already in the medium; `new_sum` is its
    /// line checksum): parity, line, page and parity checksums follow from the diff. The
    /// caller holds the group's write lock and fences afterwards.
    fn apply_diff(
        &self,
        page: u64,
        slot: usize,
        old: &[u8; LINE_BYTES],
        new: &[u8; LINE_BYTES],
        new_sum: u32,
        by: &'static str,
    ) -> Result<()> {
        let inner = &self.inner;
        let mut diff = *old;
        xor_into(&mut diff, new);
        if diff.iter().all(|&b| b == 0) {
            return Ok(());
        }
        let delta = page_delta(slot, &diff);
        let stripe = inner.geo.stripe_of(page);
        let par_at = inner.parity_at(stripe) + slot * LINE_BYTES;
        let mut par = [0u8; LINE_BYTES];
        inner.medium.read(par_at, &mut par);
        xor_into(&mut par, &diff);
        inner.medium.write(par_at, &par);
        inner.medium.flush(par_at, LINE_BYTES)?;
        let sum_at = inner.line_sum_at(page, slot);
        inner.medium.write(sum_at, &new_sum.to_le_bytes());
        inner.medium.flush(sum_at, 4)?;
        let ps = inner.sum(Sums::Pages, page) ^ delta;
        inner.update_sums(Sums::Pages, &[(page, ps)], by)?;
        let qs = inner.sum(Sums::Parity, stripe) ^ delta;
        inner.update_sums(Sums::Parity, &[(stripe, qs)], by)?;
        Ok(())
    }

    /// An atomic 8-byte store at `offset` (8-aligned) with its redundancy kept as an eager
    /// [`Protected::write`] keeps it: the old line is verified first (a line that fails its
    /// checksum is a finding, and the store still happens: the writer's protocol needs it;
    /// the redundancy of that line is then left for the scrubber), and the store itself is
    /// one `store_u64`, so it stays failure-atomic. Other modes store and, in lazy mode,
    /// mark the page.
    pub fn store_word(&self, offset: u64, value: u64) -> Result<()> {
        let inner = &self.inner;
        inner.check_usable()?;
        self.check_span(offset, 8)?;
        if offset % 8 != 0 {
            return Err(IntegrityError::Invalid {
                what: "word offset",
                reason: format!("{offset:#x} is not 8-byte aligned"),
            });
        }
        let at = inner.data_at + offset as usize;
        match inner.mode {
            Mode::Eager => {}
            Mode::Lazy => {
                self.mark(offset, 8);
                inner.medium.store_u64(at, value);
                self.mark(offset, 8);
                return Ok(());
            }
            Mode::Off | Mode::TxbPage => {
                inner.medium.store_u64(at, value);
                return Ok(());
            }
        }
        let page = offset / PAGE;
        let slot = (offset % PAGE) as usize / LINE_BYTES;
        let lo = (offset % PAGE) as usize % LINE_BYTES;
        let _g = inner.lock_write(inner.group_of(page));
        let line_at = inner.page_at(page) + slot * LINE_BYTES;
        let mut old = [0u8; LINE_BYTES];
        inner.medium.read(line_at, &mut old);
        let stored = inner.read_u32(inner.line_sum_at(page, slot));
        let old_sum = inner.line_sum_of(page, slot, &old);
        inner.medium.store_u64(at, value);
        let mut new = old;
        new[lo..lo + 8].copy_from_slice(&value.to_le_bytes());
        if stored != old_sum {
            inner.note(Finding::line(inner, page, slot, stored, old_sum, "write"));
            return Err(IntegrityError::Refused {
                region: inner.region.clone(),
                page,
                line: slot as u32,
                reason: format!(
                    "the line failed its checksum before an 8-byte store ({stored:#010x} \
                     stored, {old_sum:#010x} computed); its redundancy was left as it was"
                ),
            });
        }
        let new_sum = inner.line_sum_of(page, slot, &new);
        self.apply_diff(page, slot, &old, &new, new_sum, "write")?;
        inner.medium.fence()?;
        Ok(())
    }

    /// The txb-page baseline for a writer that stores first and reports after: recompute the
    /// checksums of `pages` (sorted, no repeats) and the parity of their stripes, from the
    /// data as it is. The other pages of such a stripe are not verified (they may hold
    /// another writer's stores, reported at its own commit): like any recompute, this folds
    /// whatever the stripe holds into parity.
    pub fn recompute_pages(&self, pages: &[u64]) -> Result<CommitStats> {
        self.inner.check_usable()?;
        if let Some(&last) = pages.last() {
            self.check_span(last * PAGE, PAGE)?;
        }
        if self.inner.mode == Mode::Off || pages.is_empty() {
            return Ok(CommitStats::default());
        }
        self.recompute_inner(pages, &|_, _| true, false)
    }

    /// Recompute `pages` (sorted). `touched(page, slot)` says which of their lines changed;
    /// the others are verified against their line checksums when those are current. With
    /// `verify_others`, every other page of each stripe is verified against its checksum
    /// first and the stripe withheld on a mismatch; without (txb-page, whose writers may have
    /// unreported stores in any page), parity is recomputed from the stripe as it is and each
    /// page's own commit brings its checksum along later.
    fn recompute_inner(
        &self,
        pages: &[u64],
        touched: &dyn Fn(u64, usize) -> bool,
        verify_others: bool,
    ) -> Result<CommitStats> {
        let inner = &self.inner;
        let geo = inner.geo;
        let lines = inner.lines_valid();
        let mut st = CommitStats::default();
        let mut buf = vec![0u8; PAGE_SIZE];
        let mut parity = vec![0u8; PAGE_SIZE];
        let mut i = 0;
        while i < pages.len() {
            let stripe = geo.stripe_of(pages[i]);
            let mut mine = Vec::new();
            while i < pages.len() && geo.stripe_of(pages[i]) == stripe {
                mine.push(pages[i]);
                i += 1;
            }
            let _g = inner.lock_write(inner.group_of(mine[0]));
            parity.fill(0);
            let mut sums = Vec::new();
            let mut withhold = false;
            for p in geo.stripe_pages_range(stripe) {
                inner.read_page(p, &mut buf);
                if mine.contains(&p) {
                    if lines {
                        for (slot, line) in buf.chunks_exact(LINE_BYTES).enumerate() {
                            if touched(p, slot) {
                                continue;
                            }
                            let stored = inner.read_u32(inner.line_sum_at(p, slot));
                            let have = inner.line_sum_of(p, slot, line);
                            if stored != have {
                                inner.note(Finding::line(inner, p, slot, stored, have, "commit"));
                                withhold = true;
                            }
                        }
                    }
                    sums.push((p, inner.page_sum_of(p, &buf)));
                } else if verify_others {
                    let stored = inner.sum(Sums::Pages, p);
                    let sum = inner.page_sum_of(p, &buf);
                    if stored != sum {
                        inner.note(Finding::page(inner, p, stored, sum, "commit"));
                        withhold = true;
                    }
                }
                xor_into(&mut parity, &buf);
            }
            if withhold {
                st.withheld += 1;
                continue;
            }
            inner.update_sums(Sums::Pages, &sums, "commit")?;
            if lines {
                for &(p, _) in &sums {
                    inner.write_lines(p)?;
                }
            }
            let q = inner.write_parity(stripe, &parity)?;
            inner.update_sums(Sums::Parity, &[(stripe, q)], "commit")?;
            st.pages_recomputed += sums.len() as u64;
        }
        inner.medium.fence()?;
        Ok(st)
    }

    /// Read `buf.len()` bytes at `offset` of the region, verified in eager mode: each line
    /// read must match its line checksum, or its page its page checksum (a damaged line
    /// checksum over good data); otherwise the read is refused with
    /// [`IntegrityError::Refused`] and a finding is noted. Other modes read as stored.
    pub fn verify_read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let inner = &self.inner;
        self.check_span(offset, buf.len() as u64)?;
        if inner.mode != Mode::Eager || buf.is_empty() {
            inner.medium.read(inner.data_at + offset as usize, buf);
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
            let group = inner.group_of(page);
            let mut line = [0u8; LINE_BYTES];
            let line_at = inner.page_at(page) + slot * LINE_BYTES;
            let _g = inner.lock_read(group);
            inner.medium.read(line_at, &mut line);
            let stored = inner.read_u32(inner.line_sum_at(page, slot));
            let have = inner.line_sum_of(page, slot, &line);
            if stored != have {
                let mut bytes = vec![0u8; PAGE_SIZE];
                inner.read_page(page, &mut bytes);
                let want = inner.sum(Sums::Pages, page);
                let got = inner.page_sum_of(page, &bytes);
                if want != got {
                    inner.note(Finding::page(inner, page, want, got, "read"));
                    return Err(IntegrityError::Refused {
                        region: inner.region.clone(),
                        page,
                        line: slot as u32,
                        reason: format!(
                            "line checksum {stored:#010x} stored, {have:#010x} computed; page \
                             checksum {want:#010x} stored, {got:#010x} computed"
                        ),
                    });
                }
                // The data is right; its line checksum is not.
                inner.note(Finding::line(inner, page, slot, stored, have, "read"));
            }
            buf[at..at + n].copy_from_slice(&line[lo..lo + n]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! `committed`, `recompute_pages`, `verify_read` and `store_word` on a region of the
    //! persistence simulator: after each, a scrub (page, parity, block and line checksums)
    //! must find the redundancy current; a report whose old bytes are wrong must be withheld
    //! and found, never folded into parity.

    use super::*;
    use crate::{CreateOptions, OpenOptions};
    use pmem::{Domain, Pool, SimConfig, SimMedium, kinds};
    use std::sync::Arc;

    type Sim = Arc<SimMedium>;
    const PAGES: u64 = 32;

    fn region(mode: Mode) -> (Pool<Sim>, Protected<Sim>, usize) {
        let sim = Arc::new(SimMedium::new(2 << 20, SimConfig::default()));
        let sim = Pool::format(sim, Domain::Sim).unwrap();
        let mut pool = Pool::open_medium(sim, &pmem::OpenOptions::default()).unwrap();
        let data = pool
            .create_region("data", kinds::RAW, PAGES * PAGE, pmem::Alignment::Page)
            .unwrap();
        for p in 0..PAGES {
            let b: Vec<u8> = (0..PAGE).map(|i| (i * 7 + p * 13) as u8).collect();
            pool.medium()
                .write(data.offset as usize + (p * PAGE) as usize, &b);
        }
        let opts = CreateOptions {
            mode,
            stripe_pages: 4,
            period_ms: 1000,
        };
        crate::create_in_pool(&mut pool, "data", &opts, &mut |_, _| {}).unwrap();
        let (prot, _) =
            crate::open_in_pool(&pool, "data", OpenOptions::default(), &mut |_, _| {}).unwrap();
        (pool, prot, data.offset as usize)
    }

    fn clean(prot: &Protected<Sim>) -> bool {
        prot.scrub(&mut |_, _| {}).unwrap().findings.is_empty()
    }

    /// Store `new` at `off` behind the layer's back and return the old bytes.
    fn store(pool: &Pool<Sim>, at: usize, off: u64, new: &[u8]) -> Vec<u8> {
        let mut old = vec![0u8; new.len()];
        pool.medium().read(at + off as usize, &mut old);
        pool.medium().write(at + off as usize, new);
        old
    }

    #[test]
    fn a_commit_diff_keeps_every_checksum_and_parity_current() {
        let (pool, prot, at) = region(Mode::Eager);
        assert!(clean(&prot));
        // Two changes in one line, one across a page boundary, one long.
        let o1 = store(&pool, at, 100, &[1; 8]);
        let o2 = store(&pool, at, 120, &[2; 4]);
        let o3 = store(&pool, at, 2 * PAGE - 30, &[3; 60]);
        let o4 = store(&pool, at, 9 * PAGE + 5, &vec![4; 5000]);
        let changes = [
            Changed {
                offset: 100,
                len: 8,
                old: Some(&o1),
            },
            Changed {
                offset: 120,
                len: 4,
                old: Some(&o2),
            },
            Changed {
                offset: 2 * PAGE - 30,
                len: 60,
                old: Some(&o3),
            },
            Changed {
                offset: 9 * PAGE + 5,
                len: 5000,
                old: Some(&o4),
            },
        ];
        assert!(!clean(&prot), "unreported stores are seen");
        let st = prot.committed(&changes).unwrap();
        assert_eq!(st.withheld, 0);
        assert!(st.lines_diffed > 80, "{st:?}");
        assert!(clean(&prot));
        // Reported again: nothing left to do.
        let again = prot.committed(&changes).unwrap();
        assert_eq!(again.lines_diffed, 0);
        assert!(clean(&prot));
        // Unknown old bytes: the pages are recomputed.
        store(&pool, at, 20 * PAGE + 64, &[9; 128]);
        let st = prot
            .committed(&[Changed {
                offset: 20 * PAGE + 64,
                len: 128,
                old: None,
            }])
            .unwrap();
        assert_eq!(st.pages_recomputed, 1, "{st:?}");
        assert!(clean(&prot));
        let mut b = vec![0u8; 5000];
        prot.verify_read(9 * PAGE + 5, &mut b).unwrap();
        assert_eq!(b, vec![4; 5000]);
    }

    #[test]
    fn wrong_old_bytes_are_found_never_hidden() {
        let (pool, prot, at) = region(Mode::Eager);
        store(&pool, at, 300, &[7; 16]);
        let st = prot
            .committed(&[Changed {
                offset: 300,
                len: 16,
                old: Some(&[0xee; 16]),
            }])
            .unwrap();
        assert_eq!(st.lines_unverified, 1, "{st:?}");
        assert_eq!(st.lines_diffed, 0);
        assert!(
            !clean(&prot),
            "the mismatch is still there for the scrubber"
        );
        // A page with unknown old bytes beside damage in another line is not recomputed.
        pool.medium()
            .write(at + 5 * PAGE as usize + 4000, &[0x55; 8]);
        store(&pool, at, 5 * PAGE, &[1; 64]);
        let st = prot
            .committed(&[Changed {
                offset: 5 * PAGE,
                len: 64,
                old: None,
            }])
            .unwrap();
        assert_eq!(st.pages_recomputed, 0);
        assert_eq!(st.withheld, 1);
    }

    #[test]
    fn two_writers_in_one_line_each_land_their_diff_once() {
        for first_a in [true, false] {
            let (pool, prot, at) = region(Mode::Eager);
            // Both store before either reports (two transactions on one line).
            let a = store(&pool, at, 4 * PAGE + 64, &[0xa1; 8]);
            let b = store(&pool, at, 4 * PAGE + 80, &[0xb2; 16]);
            let ca = [Changed {
                offset: 4 * PAGE + 64,
                len: 8,
                old: Some(&a),
            }];
            let cb = [Changed {
                offset: 4 * PAGE + 80,
                len: 16,
                old: Some(&b),
            }];
            let (x, y) = if first_a { (&ca, &cb) } else { (&cb, &ca) };
            let s1 = prot.committed(x).unwrap();
            assert_eq!(s1.lines_unverified, 1, "{s1:?}");
            let s2 = prot.committed(y).unwrap();
            assert_eq!(s2.lines_diffed, 1, "the second one verifies: {s2:?}");
            assert!(clean(&prot));
        }
    }

    #[test]
    fn a_rollback_beside_another_writer_changes_nothing() {
        let (pool, prot, at) = region(Mode::Eager);
        let a = store(&pool, at, 7 * PAGE, &[0x11; 8]);
        let b = store(&pool, at, 7 * PAGE + 32, &[0x22; 8]);
        // B aborts: its bytes go back, and it reports what they were before the rollback.
        let b_new = store(&pool, at, 7 * PAGE + 32, &b);
        let st = prot
            .rolled_back(&[Changed {
                offset: 7 * PAGE + 32,
                len: 8,
                old: Some(&b_new),
            }])
            .unwrap();
        assert_eq!((st.lines_diffed, st.lines_unverified), (0, 0), "{st:?}");
        // Reported as a commit instead, the same diff would land unverified: wrong.
        prot.committed(&[Changed {
            offset: 7 * PAGE,
            len: 8,
            old: Some(&a),
        }])
        .unwrap();
        assert!(clean(&prot));
    }

    #[test]
    fn a_verified_read_refuses_damage() {
        let (pool, prot, at) = region(Mode::Eager);
        let mut b = [0u8; 64];
        prot.verify_read(6 * PAGE, &mut b).unwrap();
        pool.medium()
            .write(at + 6 * PAGE as usize + 10, &[b[10] ^ 1]);
        let e = prot.verify_read(6 * PAGE, &mut b).unwrap_err();
        assert!(
            matches!(
                e,
                IntegrityError::Refused {
                    page: 6,
                    line: 0,
                    ..
                }
            ),
            "{e}"
        );
        // A damaged line checksum over good data is served (the page checksum proves it).
        pool.medium().write(at + 6 * PAGE as usize + 10, &[b[10]]);
        prot.verify_read(6 * PAGE, &mut b).unwrap();
    }

    #[test]
    fn an_eager_word_store_is_atomic_and_kept() {
        let (pool, prot, at) = region(Mode::Eager);
        prot.store_word(8 * PAGE + 16, 0x1122_3344_5566_7788)
            .unwrap();
        assert_eq!(
            pool.medium().load_u64(at + 8 * PAGE as usize + 16),
            0x1122_3344_5566_7788
        );
        assert!(clean(&prot));
        assert!(prot.store_word(8 * PAGE + 3, 1).is_err(), "unaligned");
    }

    #[test]
    fn txb_page_recomputes_touched_pages() {
        let (pool, prot, at) = region(Mode::TxbPage);
        store(&pool, at, 3 * PAGE + 7, &[5; 300]);
        store(&pool, at, 17 * PAGE, &[6; 4096]);
        let st = prot
            .committed(&[
                Changed {
                    offset: 3 * PAGE + 7,
                    len: 300,
                    old: None,
                },
                Changed {
                    offset: 17 * PAGE,
                    len: 4096,
                    old: None,
                },
            ])
            .unwrap();
        assert_eq!(st.pages_recomputed, 2);
        assert!(clean(&prot));
    }
}
