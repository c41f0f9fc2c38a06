//! Scrub (verify what counts as clean, change nothing) and repair (rebuild from parity what it
//! can prove, report the rest).
//!
//! The rules:
//! - Scrub writes nothing, ever: not redundancy, not a header, not the reserved page. It runs
//!   on a read-only handle as well as on a read-write one.
//! - What a mismatch means depends on the trust open found ([`crate::trust`]): damage when
//!   the region is current or unverified; *unverifiable* (a write never covered, or damage)
//!   when it was not closed cleanly. An unverified region is never reported verified, however
//!   clean it looks, until a repair proves every stripe.
//! - Only *clean* pages are verified: not written since the last pass. A written page's
//!   checksum is old by design.
//! - Line checksums, when current (eager mode), are verified too: a wrong line checksum on a
//!   sound page is reported, and a damaged page names the lines that fail.
//! - Before alarming about a page, re-check that it is still clean and verify it again: a writer
//!   may have stored to it in between.
//! - A page is rebuilt from parity only when every other page of its stripe is clean and passes
//!   its checksum, the parity page passes its checksum, and the rebuilt page passes the damaged
//!   page's checksum. Anything else is reported as unrepairable, never guessed.
//! - Parity is never recomputed over a page that fails its checksum.

use crate::checksum::xor_into;
use crate::error::Result;
use crate::finding::{Finding, FindingKind};
use crate::inner::{Inner, leaf};
use crate::layout::{LINE_BYTES, LINES_PER_PAGE, SUMS_PER_BLOCK, Sums};
use crate::options::{Mode, Progress};
use crate::rebuild::{bit, read_parity, verified_parity, verified_peers_xor, written_in_stripe};
use crate::report::{RepairOutcome, RepairReport, ScrubReport};
use crate::trust::Basis;
use pmem::Medium;
use pmem::layout::PAGE_SIZE;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use crate::rebuild::rebuild_page;

/// Verify one lock group; the caller holds nothing. Appends findings to `out`.
fn scrub_group<M: Medium>(
    inner: &Inner<M>,
    group: u64,
    out: &mut ScrubReport,
    by: &'static str,
) -> Result<()> {
    let mut found = Vec::new();
    let lines = inner.lines_valid();
    scrub_group_into(inner, group, lines, out, &mut found, by)?;
    if out.trust.basis == Basis::Unclean {
        out.unverifiable.append(&mut found);
    } else {
        out.findings.append(&mut found);
    }
    Ok(())
}

/// The line slots of `page` (bytes `bytes`) whose stored line checksum differs, with the stored
/// and computed values.
fn line_mismatches<M: Medium>(inner: &Inner<M>, page: u64, bytes: &[u8]) -> Vec<(usize, u32, u32)> {
    let mut stored = vec![0u8; LINES_PER_PAGE * 4];
    inner.medium.read(inner.line_sum_at(page, 0), &mut stored);
    bytes
        .chunks_exact(LINE_BYTES)
        .enumerate()
        .filter_map(|(slot, line)| {
            let want = u32::from_le_bytes([
                stored[slot * 4],
                stored[slot * 4 + 1],
                stored[slot * 4 + 2],
                stored[slot * 4 + 3],
            ]);
            let have = inner.line_sum_of(page, slot, line);
            (want != have).then_some((slot, want, have))
        })
        .collect()
}

fn scrub_group_into<M: Medium>(
    inner: &Inner<M>,
    group: u64,
    lines: bool,
    out: &mut ScrubReport,
    found: &mut Vec<Finding>,
    by: &'static str,
) -> Result<()> {
    let g = inner.geo;
    let gp = g.group_pages();
    let first = group * gp;
    let end = (first + gp).min(g.data_pages);
    let _lock = inner.lock_read(group as usize);
    let written = inner.written(first, (end - first) as u32)?;
    let mut bad_blocks = Vec::new();
    for b in first / SUMS_PER_BLOCK..end.div_ceil(SUMS_PER_BLOCK) {
        out.blocks_checked += 1;
        let (stored, computed) = inner.block_check(Sums::Pages, b);
        if stored != computed {
            bad_blocks.push(b);
            found.push(Finding::block(inner, Sums::Pages, b, stored, computed, by));
        }
    }
    out.blocks_checked += 1;
    let (stored, computed) = inner.block_check(Sums::Parity, group);
    let parity_block_ok = stored == computed;
    if !parity_block_ok {
        found.push(Finding::block(
            inner,
            Sums::Parity,
            group,
            stored,
            computed,
            by,
        ));
    }
    let mut page = vec![0u8; PAGE_SIZE];
    for p in first..end {
        if bit(&written, p - first) {
            out.pages_skipped_written += 1;
            continue;
        }
        inner.read_page(p, &mut page);
        out.pages_checked += 1;
        let stored = inner.sum(Sums::Pages, p);
        let page_ok = stored == inner.page_sum_of(p, &page);
        let line_bad = if lines {
            out.lines_checked += LINES_PER_PAGE as u64;
            line_mismatches(inner, p, &page)
        } else {
            Vec::new()
        };
        if page_ok && line_bad.is_empty() || !page_ok && bad_blocks.contains(&(p / SUMS_PER_BLOCK))
        {
            continue;
        }
        // Re-check before alarming: still clean, and still wrong?
        if bit(&inner.written(p, 1)?, 0) {
            out.pages_skipped_written += 1;
            continue;
        }
        inner.read_page(p, &mut page);
        let computed = inner.page_sum_of(p, &page);
        let line_bad = if lines {
            line_mismatches(inner, p, &page)
        } else {
            Vec::new()
        };
        if computed != stored {
            if !bad_blocks.contains(&(p / SUMS_PER_BLOCK)) {
                let mut f = Finding::page(inner, p, stored, computed, by);
                f.lines = line_bad.iter().map(|l| l.0 as u32).collect();
                found.push(f);
            }
        } else {
            // The page is sound: each failing line has a damaged line checksum.
            for (slot, want, have) in line_bad {
                found.push(Finding::line(inner, p, slot, want, have, by));
            }
        }
    }
    if parity_block_ok {
        let k = g.stripe_pages as u64;
        for s in first / k..end.div_ceil(k) {
            page.copy_from_slice(&read_parity(inner, s));
            out.parity_checked += 1;
            let stored = inner.sum(Sums::Parity, s);
            let computed = inner.parity_sum_of(s, &page);
            if stored != computed {
                found.push(Finding::parity(inner, s, stored, computed, by));
            }
        }
    }
    Ok(())
}

/// Verify every clean page, both checksum arrays and every parity page.
pub(crate) fn scrub<M: Medium>(inner: &Inner<M>, progress: Progress<'_>) -> Result<ScrubReport> {
    if inner.mode == Mode::Off {
        // Nothing keeps the checksums current: every page written since would read as damage.
        return Err(crate::error::IntegrityError::invalid(
            "mode",
            format!(
                "region `{}` is open with redundancy off: there is nothing current to verify against",
                inner.region
            ),
        ));
    }
    let t = Instant::now();
    let mut report = ScrubReport {
        trust: inner.trust(),
        ..Default::default()
    };
    let gp = inner.geo.group_pages();
    for group in 0..inner.geo.groups() {
        scrub_group(inner, group, &mut report, "scrub")?;
        progress(
            ((group + 1) * gp).min(inner.geo.data_pages),
            inner.geo.data_pages,
        );
    }
    report.elapsed_ms = t.elapsed().as_millis() as u64;
    Ok(report)
}

/// The background scrubber: verify groups in turn at about `pages_per_sec`, noting findings.
pub(crate) fn scrubber<M: Medium>(inner: Arc<Inner<M>>, pages_per_sec: u64) {
    let gp = inner.geo.group_pages();
    let per_group = Duration::from_secs_f64(gp as f64 / pages_per_sec as f64);
    loop {
        for group in 0..inner.geo.groups() {
            let t = Instant::now();
            let mut report = ScrubReport {
                trust: inner.trust(),
                ..Default::default()
            };
            match scrub_group(&inner, group, &mut report, "scrub") {
                Ok(()) => report.findings.into_iter().for_each(|f| inner.note(f)),
                Err(e) => {
                    let mut log = leaf(&inner.log);
                    log.last_error = Some(format!("scrubber: {e}"));
                }
            }
            if inner.stop_requested(per_group.saturating_sub(t.elapsed())) {
                return;
            }
        }
        let mut log = leaf(&inner.log);
        log.scrub_passes += 1;
    }
}

/// Is stripe `s` provably consistent: every page clean, parity sound, and the XOR of the data
/// equal to the parity? Then its data is right even where checksums disagree.
fn stripe_consistent<M: Medium>(inner: &Inner<M>, s: u64) -> Result<Vec<Vec<u8>>, String> {
    if let Some(q) = written_in_stripe(inner, s, None)?.first() {
        return Err(format!("page {q} was written since the last update pass"));
    }
    let parity = verified_parity(inner, s)?;
    let mut acc = vec![0u8; PAGE_SIZE];
    let mut pages = Vec::new();
    for q in inner.geo.stripe_pages_range(s) {
        let mut page = vec![0u8; PAGE_SIZE];
        inner.read_page(q, &mut page);
        xor_into(&mut acc, &page);
        pages.push(page);
    }
    if acc != parity {
        return Err(format!("stripe {s}'s data does not match its parity"));
    }
    Ok(pages)
}

/// Repair page-checksum block `b`: entries that disagree with data proven right by parity are
/// rewritten; pages proven wrong are rebuilt.
fn fix_page_block<M: Medium>(inner: &Inner<M>, b: u64) -> Result<String, String> {
    let g = inner.geo;
    let first = b * SUMS_PER_BLOCK;
    let end = (first + SUMS_PER_BLOCK).min(g.data_pages);
    let k = g.stripe_pages as u64;
    let mut entries = 0;
    let mut rebuilt = Vec::new();
    let mut page = vec![0u8; PAGE_SIZE];
    for s in first / k..end.div_ceil(k) {
        let written = written_in_stripe(inner, s, None)?;
        let mut mismatched = Vec::new();
        for p in g.stripe_pages_range(s).filter(|p| (first..end).contains(p)) {
            inner.read_page(p, &mut page);
            let sum = inner.page_sum_of(p, &page);
            if sum == inner.sum(Sums::Pages, p) {
                continue;
            }
            if written.contains(&p) {
                // Its checksum is due for recomputation anyway; take the current one.
                inner
                    .set_sum(Sums::Pages, p, sum)
                    .map_err(|e| e.to_string())?;
                continue;
            }
            mismatched.push((p, sum));
        }
        if mismatched.is_empty() {
            continue;
        }
        match stripe_consistent(inner, s) {
            Ok(_) => {
                for &(p, sum) in &mismatched {
                    inner
                        .set_sum(Sums::Pages, p, sum)
                        .map_err(|e| e.to_string())?;
                    if inner.lines_valid() {
                        // The data is proven: its line checksums follow it.
                        inner.write_lines(p).map_err(|e| e.to_string())?;
                    }
                    entries += 1;
                }
            }
            Err(why) => {
                // One mismatch, whose parity view matches its stored entry: the data is wrong.
                if let [(p, _)] = mismatched[..] {
                    let mut view = verified_parity(inner, s)?;
                    xor_into(&mut view, &verified_peers_xor(inner, s, Some(p))?);
                    if inner.page_sum_of(p, &view) == inner.sum(Sums::Pages, p) {
                        rebuilt.push(p);
                        continue;
                    }
                }
                let pages: Vec<u64> = mismatched.iter().map(|m| m.0).collect();
                return Err(format!(
                    "cannot tell whether pages {pages:?} or their checksums are damaged: {why}"
                ));
            }
        }
    }
    inner.reseal(Sums::Pages, b).map_err(|e| e.to_string())?;
    for &p in &rebuilt {
        rebuild_page(inner, p)?;
    }
    Ok(format!(
        "{entries} checksum entries recomputed from data proven by parity, {} pages rebuilt, block resealed",
        rebuilt.len()
    ))
}

/// Repair parity-checksum block `b` (stripes `16b..16b+16`).
fn fix_parity_block<M: Medium>(inner: &Inner<M>, b: u64) -> Result<String, String> {
    let mut fixed = 0;
    for s in b * SUMS_PER_BLOCK..((b + 1) * SUMS_PER_BLOCK).min(inner.geo.stripes) {
        let parity = read_parity(inner, s);
        let sum = inner.parity_sum_of(s, &parity);
        if sum == inner.sum(Sums::Parity, s) {
            continue;
        }
        let data = verified_peers_xor(inner, s, None)
            .map_err(|why| format!("stripe {s}'s parity cannot be checked: {why}"))?;
        let sum = inner.write_parity(s, &data).map_err(|e| e.to_string())?;
        inner
            .set_sum(Sums::Parity, s, sum)
            .map_err(|e| e.to_string())?;
        fixed += 1;
    }
    inner.reseal(Sums::Parity, b).map_err(|e| e.to_string())?;
    Ok(format!(
        "{fixed} parity checksums recomputed from parity rebuilt over verified data, block resealed"
    ))
}

/// Recompute the parity of stripe `s` from its verified data.
fn fix_parity<M: Medium>(inner: &Inner<M>, s: u64) -> Result<String, String> {
    let data = verified_peers_xor(inner, s, None)?;
    let sum = inner.write_parity(s, &data).map_err(|e| e.to_string())?;
    inner
        .update_sums(Sums::Parity, &[(s, sum)], "repair")
        .map_err(|e| e.to_string())?;
    Ok("parity recomputed from the stripe's verified data pages".into())
}

/// Scrub, then repair each finding that parity can prove.
pub(crate) fn repair<M: Medium>(inner: &Inner<M>, progress: Progress<'_>) -> Result<RepairReport> {
    inner.check_usable()?;
    let scrub = scrub(inner, progress)?;
    let mut findings = scrub.findings.clone();
    let rank = |k: FindingKind| match k {
        FindingKind::ChecksumBlock => 0,
        FindingKind::ParityChecksumBlock => 1,
        FindingKind::DataPage => 2,
        FindingKind::ParityPage => 3,
        FindingKind::LineChecksum => 4,
        FindingKind::Stripe => 5,
    };
    findings.sort_by_key(|f| (rank(f.kind), f.index));
    let gp = inner.geo.group_pages();
    let k = inner.geo.stripe_pages as u64;
    let mut outcomes = Vec::new();
    for f in findings {
        let group = match f.kind {
            FindingKind::ChecksumBlock => f.index * SUMS_PER_BLOCK / gp,
            FindingKind::ParityChecksumBlock => f.index,
            FindingKind::DataPage => f.index / gp,
            FindingKind::ParityPage => f.index * k / gp,
            FindingKind::LineChecksum => f.index / 64 / gp,
            FindingKind::Stripe => f.index * k / gp,
        } as usize;
        let result = {
            let _lock = inner.lock_write(group);
            let r = match f.kind {
                FindingKind::ChecksumBlock => fix_page_block(inner, f.index),
                FindingKind::ParityChecksumBlock => fix_parity_block(inner, f.index),
                FindingKind::DataPage => rebuild_page(inner, f.index),
                FindingKind::ParityPage => fix_parity(inner, f.index),
                FindingKind::LineChecksum => fix_lines(inner, f.index / 64),
                FindingKind::Stripe => prove_stripe(inner, f.index).map(|()| "proven".into()),
            };
            inner.medium.fence()?;
            r
        };
        outcomes.push(match result {
            Ok(how) => RepairOutcome {
                finding: f,
                repaired: true,
                how,
            },
            Err(why) => RepairOutcome {
                finding: f,
                repaired: false,
                how: why,
            },
        });
    }
    let mut proved_all_stripes = false;
    if inner.trust().basis == Basis::Unverified {
        proved_all_stripes = prove_every_stripe(inner, &mut outcomes)?;
    }
    Ok(RepairReport {
        scrub,
        outcomes,
        proved_all_stripes,
        trust_after: Some(inner.trust()),
    })
}

/// Recompute the line checksums of `page`, only if the page passes its page checksum (then
/// its data is right and the line checksums were wrong).
fn fix_lines<M: Medium>(inner: &Inner<M>, page: u64) -> Result<String, String> {
    let mut bytes = vec![0u8; PAGE_SIZE];
    inner.read_page(page, &mut bytes);
    let want = inner.sum(Sums::Pages, page);
    let have = inner.page_sum_of(page, &bytes);
    if want != have {
        return Err(format!(
            "page {page} fails its page checksum too (expected {want:#010x}, found {have:#010x})"
        ));
    }
    inner.write_lines(page).map_err(|e| e.to_string())?;
    Ok("line checksums recomputed from the page, which passes its page checksum".into())
}

/// The stripes a finding is about.
fn stripes_of<M: Medium>(inner: &Inner<M>, f: &Finding) -> std::ops::Range<u64> {
    let k = inner.geo.stripe_pages as u64;
    let one = |s: u64| s..s + 1;
    match f.kind {
        FindingKind::DataPage => one(f.index / k),
        FindingKind::LineChecksum => one(f.index / LINES_PER_PAGE as u64 / k),
        FindingKind::ParityPage | FindingKind::Stripe => one(f.index),
        FindingKind::ChecksumBlock => {
            f.index * SUMS_PER_BLOCK / k..((f.index + 1) * SUMS_PER_BLOCK).div_ceil(k)
        }
        FindingKind::ParityChecksumBlock => {
            f.index * SUMS_PER_BLOCK..(f.index + 1) * SUMS_PER_BLOCK
        }
    }
}

/// Prove stripe `s`: no page written since the last pass, every checksum block holding its
/// entries sound, every page and the parity page passing their checksums, the line checksums
/// (when current) passing, and the XOR of the data equal to the parity. The caller holds the
/// stripe's group write lock.
fn prove_stripe<M: Medium>(inner: &Inner<M>, s: u64) -> Result<(), String> {
    let range = inner.geo.stripe_pages_range(s);
    for b in range.start / SUMS_PER_BLOCK..=(range.end - 1) / SUMS_PER_BLOCK {
        if !inner.block_ok(Sums::Pages, b) {
            return Err(format!("page-checksum block {b} fails its block checksum"));
        }
    }
    let pages = stripe_consistent(inner, s)?;
    let lines = inner.lines_valid();
    for (q, page) in range.zip(pages) {
        if inner.page_sum_of(q, &page) != inner.sum(Sums::Pages, q) {
            return Err(format!("page {q} fails its checksum"));
        }
        if lines {
            if let Some((slot, _, _)) = line_mismatches(inner, q, &page).first() {
                return Err(format!("line {slot} of page {q} fails its line checksum"));
            }
        }
    }
    Ok(())
}

/// An unverified region: prove every stripe; stripes that cannot be proven (and are not already
/// named by an unrepaired finding) are added to `outcomes` as not repaired. When every stripe
/// is proven, the region is marked verified (flag cleared).
fn prove_every_stripe<M: Medium>(
    inner: &Inner<M>,
    outcomes: &mut Vec<RepairOutcome>,
) -> Result<bool> {
    let g = inner.geo;
    let k = g.stripe_pages as u64;
    let named: Vec<std::ops::Range<u64>> = outcomes
        .iter()
        .filter(|o| !o.repaired)
        .map(|o| stripes_of(inner, &o.finding))
        .collect();
    let mut all = named.is_empty();
    let gp = g.group_pages();
    for group in 0..g.groups() {
        let _lock = inner.lock_write(group as usize);
        for s in group * gp / k..((group + 1) * gp).min(g.data_pages).div_ceil(k) {
            if let Err(why) = prove_stripe(inner, s) {
                all = false;
                if !named.iter().any(|r| r.contains(&s)) {
                    outcomes.push(RepairOutcome {
                        finding: Finding::stripe(inner, s, "repair"),
                        repaired: false,
                        how: format!("cannot prove stripe {s}: {why}"),
                    });
                }
            }
        }
    }
    if all {
        // Hold every group: no update pass may have a batch in flight while the flag is
        // cleared.
        let _locks: Vec<_> = (0..g.groups())
            .map(|grp| inner.lock_write(grp as usize))
            .collect();
        inner.mark_verified()?;
    }
    Ok(all)
}
