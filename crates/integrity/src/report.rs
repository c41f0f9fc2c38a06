//! What the integrity layer reports: findings and pass statistics (defined in `finding`, below
//! the engine, and re-exported here), statistics, scrub and repair reports.

pub use crate::finding::{Finding, FindingKind, PassStats};

use crate::inner::Inner;
use crate::layout::Geometry;
use crate::options::Mode;
use crate::trust::{Basis, Trust};
use pmem::Medium;

/// Statistics of a protected region.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Stats {
    /// Mode in force.
    pub mode: Mode,
    /// Tracker in use (lazy mode).
    pub tracker: &'static str,
    /// Update period (lazy mode).
    pub period_ms: u32,
    /// Layout.
    pub geometry: Geometry,
    /// Passes run.
    pub passes: u64,
    /// The last pass.
    pub last_pass: PassStats,
    /// Pages updated by all passes.
    pub pages_updated_total: u64,
    /// Mean pages updated per pass.
    pub pages_per_pass_mean: f64,
    /// Mean pass duration.
    pub pass_ms_mean: f64,
    /// Mean time in the tracker per pass.
    pub tracking_ms_mean: f64,
    /// Stripes with a page written since the last pass, now (lazy mode; 0 otherwise).
    pub vulnerable_stripes_now: u64,
    /// Stripes each recent pass found vulnerable (written since the pass before), oldest first.
    pub vulnerable_stripes_sampled: Vec<u64>,
    /// Longest time between the start of one pass and the end of the next: how long a write
    /// can wait for redundancy.
    pub time_to_coverage_ms_max: u64,
    /// Writes through the eager path.
    pub eager_writes: u64,
    /// Lines repaired on the eager read or write path.
    pub repairs_on_read: u64,
    /// Findings noted so far (passes, reads, writes, background scrub).
    pub findings_total: u64,
    /// Background scrub rounds completed.
    pub scrub_passes: u64,
    /// The last error of the background pass, if any.
    pub last_error: Option<String>,
}

pub(crate) fn stats<M: Medium>(inner: &Inner<M>) -> Stats {
    let vulnerable = vulnerable_now(inner).unwrap_or(0);
    let log = crate::inner::leaf(&inner.log);
    let n = log.passes.max(1) as f64;
    Stats {
        mode: inner.mode,
        tracker: inner.tracker.kind().name(),
        period_ms: inner.period_ms,
        geometry: inner.geo,
        passes: log.passes,
        last_pass: log.last.clone(),
        pages_updated_total: log.pages_updated_total,
        pages_per_pass_mean: log.pages_updated_total as f64 / n,
        pass_ms_mean: log.pass_us_total as f64 / n / 1000.0,
        tracking_ms_mean: log.tracking_us_total as f64 / n / 1000.0,
        vulnerable_stripes_now: vulnerable,
        vulnerable_stripes_sampled: log.samples.iter().copied().collect(),
        time_to_coverage_ms_max: log.coverage_ms_max,
        eager_writes: inner
            .eager_writes
            .load(std::sync::atomic::Ordering::Relaxed),
        repairs_on_read: inner
            .repairs_on_read
            .load(std::sync::atomic::Ordering::Relaxed),
        findings_total: log.findings_total,
        scrub_passes: log.scrub_passes,
        last_error: log.last_error.clone(),
    }
}

/// Stripes with at least one page written since the last pass.
fn vulnerable_now<M: Medium>(inner: &Inner<M>) -> crate::Result<u64> {
    if inner.mode != Mode::Lazy {
        return Ok(0);
    }
    let g = inner.geo;
    let k = g.stripe_pages as u64;
    let batch = g.batch_pages();
    let mut stripes = 0;
    let mut first = 0;
    while first < g.data_pages {
        let count = batch.min(g.data_pages - first) as u32;
        let bits = inner.written(first, count)?;
        let mut last = u64::MAX;
        for i in 0..count as u64 {
            if bits[(i / 64) as usize] >> (i % 64) & 1 == 1 {
                let s = (first + i) / k;
                if s != last {
                    stripes += 1;
                    last = s;
                }
            }
        }
        first += count as u64;
    }
    Ok(stripes)
}

/// What a scrub found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ScrubReport {
    /// Data pages verified.
    pub pages_checked: u64,
    /// Data pages skipped because they were written since the last pass (their redundancy is
    /// not current, so a mismatch would mean nothing).
    pub pages_skipped_written: u64,
    /// Parity pages verified.
    pub parity_checked: u64,
    /// Checksum blocks verified (both arrays).
    pub blocks_checked: u64,
    /// Line checksums verified (when they are current: eager mode).
    pub lines_checked: u64,
    /// How far the stored redundancy could be trusted (see [`crate::trust`]).
    pub trust: Trust,
    /// The damage found: mismatches that can only be damage.
    pub findings: Vec<Finding>,
    /// Mismatches that may be damage or a write whose redundancy an update pass never
    /// computed (the region was not closed cleanly): nobody can tell which.
    pub unverifiable: Vec<Finding>,
    /// Wall time.
    pub elapsed_ms: u64,
}

impl ScrubReport {
    /// The region is verified: its redundancy was trusted and everything matched.
    pub fn verified(&self) -> bool {
        self.trust.basis == Basis::Current
            && self.findings.is_empty()
            && self.unverifiable.is_empty()
    }
}

/// What happened to one finding in a repair.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RepairOutcome {
    /// The damage.
    pub finding: Finding,
    /// Whether it was repaired (and verified after repair).
    pub repaired: bool,
    /// How it was repaired, or why it could not be.
    pub how: String,
}

/// What a repair did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RepairReport {
    /// The scrub that found the damage.
    pub scrub: ScrubReport,
    /// One outcome per finding.
    pub outcomes: Vec<RepairOutcome>,
    /// The region was unverified and this repair proved every stripe: the `unverified` flag
    /// is cleared.
    pub proved_all_stripes: bool,
    /// How far the redundancy can be trusted after the repair.
    pub trust_after: Option<Trust>,
}

impl RepairReport {
    /// Findings that could not be repaired.
    pub fn unrepaired(&self) -> impl Iterator<Item = &RepairOutcome> {
        self.outcomes.iter().filter(|o| !o.repaired)
    }
}
