//! Findings and pass statistics: plain data, below the engine.
//!
//! The engine notes findings and returns pass statistics; scrub, repair and the report types
//! build on them. This module names no engine type: a finding is placed through [`Locate`],
//! which the engine's `Inner` implements, so the dependency runs one way (engine -> findings).

use crate::layout::{SUMS_PER_BLOCK, Sums};

/// Where the objects a finding can name are, as byte offsets in the pool.
pub(crate) trait Locate {
    /// A data page.
    fn page_at(&self, page: u64) -> usize;
    /// The parity page of a stripe.
    fn parity_at(&self, stripe: u64) -> usize;
    /// Entry `index` of a checksum array.
    fn sum_at(&self, which: Sums, index: u64) -> usize;
    /// The line checksum of line `slot` of `page`.
    fn line_sum_at(&self, page: u64, slot: usize) -> usize;
}

/// A shared handle places as what it holds (so `Finding::page(&arc, ..)` reads as it did when
/// the constructors took the engine's type and the handle deref-coerced to it).
impl<T: Locate + ?Sized> Locate for std::sync::Arc<T> {
    fn page_at(&self, page: u64) -> usize {
        (**self).page_at(page)
    }
    fn parity_at(&self, stripe: u64) -> usize {
        (**self).parity_at(stripe)
    }
    fn sum_at(&self, which: Sums, index: u64) -> usize {
        (**self).sum_at(which, index)
    }
    fn line_sum_at(&self, page: u64, slot: usize) -> usize {
        (**self).line_sum_at(page, slot)
    }
}

/// What kind of damage a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// A clean data page does not match its checksum.
    DataPage,
    /// A block of the page checksum array does not match its block checksum.
    ChecksumBlock,
    /// A parity page does not match its checksum.
    ParityPage,
    /// A block of the parity checksum array does not match its block checksum.
    ParityChecksumBlock,
    /// A line checksum (eager mode) did not match a line whose page is sound.
    LineChecksum,
    /// A stripe whose data, parity and checksums could not be proven to agree (a repair of an
    /// unverified region proves every stripe).
    Stripe,
}

impl FindingKind {
    /// A short human name.
    pub fn describe(self) -> &'static str {
        match self {
            FindingKind::DataPage => "data page fails its checksum",
            FindingKind::ChecksumBlock => "page-checksum block fails its block checksum",
            FindingKind::ParityPage => "parity page fails its checksum",
            FindingKind::ParityChecksumBlock => "parity-checksum block fails its block checksum",
            FindingKind::LineChecksum => "line checksum is wrong (the page is sound)",
            FindingKind::Stripe => "stripe not proven (data, parity and checksums disagree)",
        }
    }
}

/// One piece of damage: what, where, expected and found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// What is damaged.
    pub kind: FindingKind,
    /// Data page, stripe, or block number (by kind).
    pub index: u64,
    /// Byte offset in the pool of the damaged object.
    pub offset: u64,
    /// The checksum the stored bytes should have.
    pub expected: String,
    /// The checksum they have.
    pub found: String,
    /// Who found it: `scrub`, `pass`, `read`, `write`, `open`, `repair`.
    pub by: &'static str,
    /// For a data page with current line checksums: the lines (0..64) that fail theirs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<u32>,
}

impl Finding {
    pub(crate) fn page(
        inner: &impl Locate,
        page: u64,
        stored: u32,
        computed: u32,
        by: &'static str,
    ) -> Finding {
        Finding {
            kind: FindingKind::DataPage,
            index: page,
            offset: inner.page_at(page) as u64,
            expected: format!("{stored:#010x}"),
            found: format!("{computed:#010x}"),
            by,
            lines: Vec::new(),
        }
    }
    pub(crate) fn parity(
        inner: &impl Locate,
        stripe: u64,
        stored: u32,
        computed: u32,
        by: &'static str,
    ) -> Finding {
        Finding {
            kind: FindingKind::ParityPage,
            index: stripe,
            offset: inner.parity_at(stripe) as u64,
            expected: format!("{stored:#010x}"),
            found: format!("{computed:#010x}"),
            by,
            lines: Vec::new(),
        }
    }
    pub(crate) fn block(
        inner: &impl Locate,
        which: Sums,
        block: u64,
        stored: u32,
        computed: u32,
        by: &'static str,
    ) -> Finding {
        Finding {
            kind: match which {
                Sums::Pages => FindingKind::ChecksumBlock,
                Sums::Parity => FindingKind::ParityChecksumBlock,
            },
            index: block,
            offset: inner.sum_at(which, block * SUMS_PER_BLOCK) as u64,
            expected: format!("{stored:#010x}"),
            found: format!("{computed:#010x}"),
            by,
            lines: Vec::new(),
        }
    }

    pub(crate) fn line(
        inner: &impl Locate,
        page: u64,
        slot: usize,
        stored: u32,
        computed: u32,
        by: &'static str,
    ) -> Finding {
        Finding {
            kind: FindingKind::LineChecksum,
            index: page * crate::layout::LINES_PER_PAGE as u64 + slot as u64,
            offset: inner.line_sum_at(page, slot) as u64,
            expected: format!("{computed:#010x}"),
            found: format!("{stored:#010x}"),
            by,
            lines: Vec::new(),
        }
    }
    pub(crate) fn stripe(inner: &impl Locate, stripe: u64, by: &'static str) -> Finding {
        Finding {
            kind: FindingKind::Stripe,
            index: stripe,
            offset: inner.parity_at(stripe) as u64,
            expected: "data, parity and checksums that agree".into(),
            found: "no proof".into(),
            by,
            lines: Vec::new(),
        }
    }

    /// One line for people.
    pub fn describe(&self) -> String {
        let what = match self.kind {
            FindingKind::DataPage => format!("data page {}", self.index),
            FindingKind::ChecksumBlock => format!(
                "page-checksum block {} (pages {}..{})",
                self.index,
                self.index * SUMS_PER_BLOCK,
                (self.index + 1) * SUMS_PER_BLOCK
            ),
            FindingKind::ParityPage => format!("parity page of stripe {}", self.index),
            FindingKind::ParityChecksumBlock => format!(
                "parity-checksum block {} (stripes {}..{})",
                self.index,
                self.index * SUMS_PER_BLOCK,
                (self.index + 1) * SUMS_PER_BLOCK
            ),
            FindingKind::LineChecksum => format!(
                "line checksum {} (page {}, line {})",
                self.index,
                self.index / 64,
                self.index % 64
            ),
            FindingKind::Stripe => format!("stripe {}", self.index),
        };
        let lines = if self.lines.is_empty() {
            String::new()
        } else {
            format!(
                "; line(s) {} fail their line checksums",
                ranges(&self.lines)
            )
        };
        format!(
            "{what} at byte {:#x}: {}; checksum expected {}, found {}{lines} (found by {})",
            self.offset,
            self.kind.describe(),
            self.expected,
            self.found,
            self.by
        )
    }
}

/// Sorted numbers as ranges: `0-3, 7, 9-10`.
fn ranges(sorted: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        out.push(if j == i {
            sorted[i].to_string()
        } else {
            format!("{}-{}", sorted[i], sorted[j])
        });
        i = j + 1;
    }
    out.join(", ")
}

/// What one update pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PassStats {
    /// Pages whose checksum was recomputed.
    pub pages_updated: u64,
    /// Stripes whose parity was recomputed.
    pub stripes_updated: u64,
    /// Batches with at least one written page.
    pub dirty_batches: u64,
    /// Wall time of the pass.
    pub duration_us: u64,
    /// Of which, time in the tracker (collect and re-arm).
    pub tracking_us: u64,
}

#[cfg(test)]
mod tests {
    #[test]
    fn line_lists_read_as_ranges() {
        assert_eq!(super::ranges(&[0, 1, 2, 3, 7, 9, 10]), "0-3, 7, 9-10");
        assert_eq!(super::ranges(&[40]), "40");
        assert_eq!(super::ranges(&(0..64).collect::<Vec<_>>()), "0-63");
    }
}
