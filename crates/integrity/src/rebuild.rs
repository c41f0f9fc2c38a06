//! Rebuilding: redundancy from the data (a resync, line checksums at a switch to eager mode) and
//! a data page from its stripe's parity. The update pass, the eager paths, open and repair use
//! these; the rules for when a rebuild may take place are in `repair` and `docs/integrity.md`.

use crate::checksum::xor_into;
use crate::error::Result;
use crate::finding::Finding;
use crate::inner::Inner;
use crate::layout::{LINE_BYTES, LINES_PER_PAGE, SUMS_PER_BLOCK, Sums};
use crate::options::{Progress, list_page};
use pmem::Medium;
use pmem::layout::PAGE_SIZE;

impl<M: Medium> Inner<M> {
    /// Recompute everything for lock group `group` from the data as it is: page checksums,
    /// parity, parity checksums, block checksums, and line checksums when `lines`. Returns the
    /// number of pages whose stored checksum changed. The caller holds the group's lock (or no
    /// one else can run).
    pub(crate) fn rebuild_group(
        &self,
        group: u64,
        lines: bool,
        listed: &mut Vec<u64>,
    ) -> Result<u64> {
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
    pub(crate) fn resync(
        &self,
        lines: bool,
        progress: Progress<'_>,
    ) -> Result<(u64, u64, Vec<u64>)> {
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
    pub(crate) fn rebuild_lines_verified(
        &self,
        progress: Progress<'_>,
    ) -> Result<(u64, Vec<u64>, u64)> {
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
}

/// Bit `i` of a tracker bitmap.
pub(crate) fn bit(bits: &[u64], i: u64) -> bool {
    bits[(i / 64) as usize] >> (i % 64) & 1 == 1
}

/// The parity page of `stripe` as stored (not verified).
pub(crate) fn read_parity<M: Medium>(inner: &Inner<M>, stripe: u64) -> Vec<u8> {
    let mut b = vec![0u8; PAGE_SIZE];
    inner.medium.read(inner.parity_at(stripe), &mut b);
    b
}

/// Pages of stripe `s` (other than `skip`) that were written since the last pass.
pub(crate) fn written_in_stripe<M: Medium>(
    inner: &Inner<M>,
    s: u64,
    skip: Option<u64>,
) -> Result<Vec<u64>, String> {
    let range = inner.geo.stripe_pages_range(s);
    let bits = inner
        .written(range.start, (range.end - range.start) as u32)
        .map_err(|e| e.to_string())?;
    Ok(range
        .clone()
        .filter(|&p| Some(p) != skip && bit(&bits, p - range.start))
        .collect())
}

/// Read every page of stripe `s` except `skip`, requiring each to be clean and to pass its
/// checksum (and its checksum block to be sound); returns their XOR.
pub(crate) fn verified_peers_xor<M: Medium>(
    inner: &Inner<M>,
    s: u64,
    skip: Option<u64>,
) -> Result<Vec<u8>, String> {
    let written = written_in_stripe(inner, s, skip)?;
    if let Some(q) = written.first() {
        return Err(format!(
            "page {q} of the same stripe was written since the last update pass, so parity is not current"
        ));
    }
    let mut acc = vec![0u8; PAGE_SIZE];
    let mut page = vec![0u8; PAGE_SIZE];
    for q in inner.geo.stripe_pages_range(s) {
        if Some(q) == skip {
            continue;
        }
        if !inner.block_ok(Sums::Pages, q / SUMS_PER_BLOCK) {
            return Err(format!(
                "the checksum block holding page {q}'s checksum is damaged"
            ));
        }
        inner.read_page(q, &mut page);
        if inner.page_sum_of(q, &page) != inner.sum(Sums::Pages, q) {
            return Err(format!(
                "page {q} of the same stripe also fails its checksum"
            ));
        }
        xor_into(&mut acc, &page);
    }
    Ok(acc)
}

/// The parity page of stripe `s`, required to pass its checksum.
pub(crate) fn verified_parity<M: Medium>(inner: &Inner<M>, s: u64) -> Result<Vec<u8>, String> {
    if !inner.block_ok(Sums::Parity, s / SUMS_PER_BLOCK) {
        return Err(format!(
            "the checksum block holding stripe {s}'s parity checksum is damaged"
        ));
    }
    let parity = read_parity(inner, s);
    if inner.parity_sum_of(s, &parity) != inner.sum(Sums::Parity, s) {
        return Err(format!("the parity page of stripe {s} fails its checksum"));
    }
    Ok(parity)
}

/// Rebuild data page `p` from parity, only when every other page of its stripe is clean and
/// passes its checksum, the parity page passes its checksum, and the rebuilt page passes
/// `p`'s recorded checksum (the rules in `repair`). The caller holds its group's
/// write lock. Does not fence.
pub(crate) fn rebuild_page<M: Medium>(inner: &Inner<M>, p: u64) -> Result<String, String> {
    let s = inner.geo.stripe_of(p);
    if !inner.block_ok(Sums::Pages, p / SUMS_PER_BLOCK) {
        return Err("its checksum block is damaged".into());
    }
    let mut rebuilt = verified_parity(inner, s)?;
    xor_into(&mut rebuilt, &verified_peers_xor(inner, s, Some(p))?);
    let want = inner.sum(Sums::Pages, p);
    let got = inner.page_sum_of(p, &rebuilt);
    if got != want {
        return Err(format!(
            "parity rebuilds a page with checksum {got:#010x}, not the recorded {want:#010x}"
        ));
    }
    let at = inner.page_at(p);
    inner.medium.write(at, &rebuilt);
    inner
        .medium
        .flush(at, PAGE_SIZE)
        .map_err(|e| e.to_string())?;
    // Read it back before anything is derived from it: a read that returns other bytes than
    // the page holds (a misdirected read, a failing read path) looks like damage, and
    // rewriting the page does not cure it. Line checksums recomputed from such a read would
    // bless the wrong bytes, and the reader would be served them.
    let mut back = vec![0u8; PAGE_SIZE];
    inner.read_page(p, &mut back);
    if back != rebuilt {
        let stored_to = inner
            .written(p, 1)
            .map(|w| bit(&w, 0))
            .map_err(|e| e.to_string())?;
        if !stored_to {
            return Err(format!(
                "page {p} was rewritten with what parity rebuilds but reads back other bytes: \
                 reads of it do not return what it holds (a misdirected or failing read), so \
                 it cannot be repaired by writing it"
            ));
        }
        // A lazy-mode writer stored to it since (no lock keeps one out): its bytes are new
        // data, which the next update pass covers.
    }
    if inner.lines_valid() {
        inner.write_lines(p).map_err(|e| e.to_string())?;
    }
    Ok(format!(
        "rebuilt from the parity of stripe {s} and its {} other pages",
        inner.geo.stripe_pages_range(s).count() - 1
    ))
}
