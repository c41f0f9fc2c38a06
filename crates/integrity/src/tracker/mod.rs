//! Write tracking: which pages of a protected region were written since they were last
//! collected.
//!
//! This is what Vilamb's `getDirtyBits`/`clearDirtyBits` system calls did with PTE dirty bits.
//! Every backend answers the same question for a batch of at most [`BATCH_PAGES`] pages, as a
//! bitmap: bit `i` of word `i / 64` stands for page `first + i`.
//!
//! - [`Tracker::collect`] reports the written pages *and re-arms exactly those*, atomically per
//!   page: a store that lands after a page was reported is reported by a later `collect`. This is
//!   Algorithm 1's lines 2 and 6 in one step.
//! - [`Tracker::peek`] reports without re-arming (the scrubber's cleanliness check).
//!
//! Page numbers are relative to the start of the tracked range.

/// Most pages one `collect` or `peek` covers (Vilamb's batch: one page-table page, 2 MiB).
pub const BATCH_PAGES: u32 = 512;

/// Words of a batch bitmap.
pub const BATCH_WORDS: usize = (BATCH_PAGES / 64) as usize;

/// A batch bitmap: bit `i` of word `i / 64` is page `first + i`.
pub type BatchBits = [u64; BATCH_WORDS];

/// Which backend a tracker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TrackerKind {
    /// userfaultfd write-protect in async mode, read and re-armed with `PAGEMAP_SCAN`.
    Uffd,
    /// `mprotect` plus a SIGSEGV handler (fallback for kernels without the above).
    Mprotect,
    /// The caller marks pages before it writes them.
    Explicit,
}

impl TrackerKind {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            TrackerKind::Uffd => "uffd",
            TrackerKind::Mprotect => "mprotect",
            TrackerKind::Explicit => "explicit",
        }
    }
}

/// A tracker failed (a system call refused, usually at setup).
#[derive(Debug, thiserror::Error)]
#[error("write tracking ({kind}): {what}: {error}")]
pub struct TrackError {
    /// The backend.
    pub kind: &'static str,
    /// What it was doing.
    pub what: String,
    /// The OS error.
    pub error: std::io::Error,
}

/// Finds the pages written since they were last collected.
pub trait Tracker: Send + Sync + std::fmt::Debug {
    /// Which backend this is.
    fn kind(&self) -> TrackerKind;
    /// Number of 4 KiB pages tracked.
    fn pages(&self) -> u64;
    /// Start (or restart) tracking with every page clean: a page counts as written only after a
    /// store that lands after this call.
    fn arm(&self) -> Result<(), TrackError>;
    /// Report the pages of `[first, first + count)` written since they were last collected (or
    /// since `arm`), and re-arm exactly those, atomically per page. `count <= BATCH_PAGES`;
    /// bits at and past `count` are zero on return.
    fn collect(&self, first: u64, count: u32, out: &mut BatchBits) -> Result<(), TrackError>;
    /// Report like `collect`, but change nothing.
    fn peek(&self, first: u64, count: u32, out: &mut BatchBits) -> Result<(), TrackError>;
    /// Record that the caller is about to store to `[first, first + count)`. Required before
    /// the store for [`TrackerKind::Explicit`]; a no-op for the backends that see stores.
    fn mark(&self, first: u64, count: u64);
}

pub mod explicit;
// Unsafe: mprotect and a SIGSEGV handler over a range of a mapping (docs/unsafe.md).
#[allow(unsafe_code)]
pub mod mprotect;
// Unsafe: userfaultfd and PAGEMAP_SCAN ioctls on a range of a mapping (docs/unsafe.md).
#[allow(unsafe_code)]
pub mod uffd;

pub use explicit::ExplicitTracker;
pub use mprotect::MprotectTracker;
pub use uffd::UffdTracker;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Size of the pages every backend tracks.
pub const PAGE_BYTES: usize = 4096;

/// A tracker of `kind` over `[offset, offset + len)` of `mapping`, which it keeps alive.
/// `offset` and `len` must be multiples of [`PAGE_BYTES`] and the mapping writable.
pub fn for_mapping(
    kind: TrackerKind,
    mapping: Arc<pmem::Mapping>,
    offset: usize,
    len: usize,
) -> Result<Box<dyn Tracker>, TrackError> {
    Ok(match kind {
        TrackerKind::Uffd => Box::new(UffdTracker::for_mapping(mapping, offset, len)?),
        TrackerKind::Mprotect => Box::new(MprotectTracker::for_mapping(mapping, offset, len)?),
        TrackerKind::Explicit => {
            check_mapping_range("explicit", &mapping, offset, len)?;
            Box::new(ExplicitTracker::new((len / PAGE_BYTES) as u64))
        }
    })
}

/// The best tracker this kernel offers for `[offset, offset + len)` of `mapping`:
/// [`UffdTracker`] where [`uffd::supported`], otherwise [`MprotectTracker`].
pub fn best_for(
    mapping: Arc<pmem::Mapping>,
    offset: usize,
    len: usize,
) -> Result<Box<dyn Tracker>, TrackError> {
    let kind = if uffd::supported() {
        TrackerKind::Uffd
    } else {
        TrackerKind::Mprotect
    };
    for_mapping(kind, mapping, offset, len)
}

impl TrackError {
    /// An error from the OS error left by the last failed system call.
    pub(crate) fn last_os(kind: &'static str, what: impl Into<String>) -> TrackError {
        TrackError {
            kind,
            what: what.into(),
            error: std::io::Error::last_os_error(),
        }
    }

    /// An error for arguments the backend cannot take.
    pub(crate) fn invalid(kind: &'static str, what: impl Into<String>) -> TrackError {
        TrackError {
            kind,
            what: what.into(),
            error: std::io::ErrorKind::InvalidInput.into(),
        }
    }
}

/// Check that `[offset, offset + len)` is a non-empty, page-aligned range of a writable
/// `mapping`.
pub(crate) fn check_mapping_range(
    kind: &'static str,
    mapping: &pmem::Mapping,
    offset: usize,
    len: usize,
) -> Result<(), TrackError> {
    use pmem::Medium;
    if !mapping.writable() {
        return Err(TrackError::invalid(kind, "the mapping is read-only"));
    }
    if len == 0 || offset % PAGE_BYTES != 0 || len % PAGE_BYTES != 0 {
        return Err(TrackError::invalid(
            kind,
            format!("range {offset:#x}+{len:#x} is empty or not page-aligned"),
        ));
    }
    if offset
        .checked_add(len)
        .is_none_or(|end| end > mapping.len())
    {
        return Err(TrackError::invalid(
            kind,
            format!(
                "range {offset:#x}+{len:#x} is outside the {:#x}-byte mapping",
                mapping.len()
            ),
        ));
    }
    Ok(())
}

/// Check a `collect`/`peek` request against a tracker of `pages` pages.
pub(crate) fn check_batch(
    kind: &'static str,
    pages: u64,
    first: u64,
    count: u32,
) -> Result<(), TrackError> {
    if count > BATCH_PAGES
        || first
            .checked_add(count as u64)
            .is_none_or(|end| end > pages)
    {
        return Err(TrackError::invalid(
            kind,
            format!("batch {first}+{count} is not within {pages} pages (at most {BATCH_PAGES})"),
        ));
    }
    Ok(())
}

/// Copy the bits of pages `[first, first + count)` of the page bitmap `words` into `out`
/// (bit 0 of `out` is page `first`), applying `take` to each word touched: it gets the word and
/// the mask of its bits inside the range, and returns the word's value (before any change it
/// makes). Bits of `out` at and past `count` are zero.
pub(crate) fn gather_bits(
    words: &[AtomicU64],
    first: u64,
    count: u32,
    mut take: impl FnMut(&AtomicU64, u64) -> u64,
    out: &mut BatchBits,
) {
    out.fill(0);
    let end = first + count as u64;
    let mut page = first;
    while page < end {
        let shift = (page % 64) as u32;
        let n = (64 - shift as u64).min(end - page) as u32;
        let mask = span_mask(shift, n);
        let bits = (take(&words[(page / 64) as usize], mask) & mask) >> shift;
        let at = page - first;
        let (word, bit) = ((at / 64) as usize, (at % 64) as u32);
        out[word] |= bits << bit;
        if bit != 0 && bit + n > 64 {
            out[word + 1] |= bits >> (64 - bit);
        }
        page += n as u64;
    }
}

/// Set the bits of pages `[first, first + count)` in the page bitmap `words` (clamped to it).
/// Lock-free and allocation-free, so a signal handler may call it.
pub(crate) fn set_bits(words: &[AtomicU64], first: u64, count: u64) {
    let end = first.saturating_add(count).min(words.len() as u64 * 64);
    let mut page = first;
    while page < end {
        let shift = (page % 64) as u32;
        let n = (64 - shift as u64).min(end - page) as u32;
        words[(page / 64) as usize].fetch_or(span_mask(shift, n), Ordering::AcqRel);
        page += n as u64;
    }
}

/// `n` one bits starting at bit `shift` (`shift + n <= 64`, `n >= 1`).
fn span_mask(shift: u32, n: u32) -> u64 {
    (u64::MAX >> (64 - n)) << shift
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bitmap(pages: u64) -> Vec<AtomicU64> {
        (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn gather_matches_bit_by_bit_for_unaligned_ranges() {
        let mut rng = pmem::rng::SplitMix64::new(7);
        for _ in 0..200 {
            let words = bitmap(1500);
            let mut truth = vec![false; 1500];
            for _ in 0..300 {
                let first = rng.below(1500);
                let count = rng.below(1500 - first).min(3) + 1;
                let count = count.min(1500 - first);
                set_bits(&words, first, count);
                for p in first..first + count {
                    truth[p as usize] = true;
                }
            }
            let first = rng.below(1500);
            let count = (rng.below(BATCH_PAGES as u64) + 1).min(1500 - first) as u32;
            let mut out = [u64::MAX; BATCH_WORDS];
            gather_bits(
                &words,
                first,
                count,
                |w, _| w.load(Ordering::Relaxed),
                &mut out,
            );
            for i in 0..BATCH_PAGES as u64 {
                let got = out[(i / 64) as usize] >> (i % 64) & 1 == 1;
                let want = i < count as u64 && truth[(first + i) as usize];
                assert_eq!(got, want, "page {} of batch {first}+{count}", first + i);
            }
        }
    }

    #[test]
    fn set_bits_clamps_to_the_bitmap() {
        let words = bitmap(128);
        set_bits(&words, 120, 1000);
        assert_eq!(words[1].load(Ordering::Relaxed), 0xff << 56);
        set_bits(&words, 500, 10);
        assert_eq!(words[0].load(Ordering::Relaxed), 0);
    }

    #[test]
    fn batch_checks() {
        assert!(check_batch("t", 1024, 512, 512).is_ok());
        assert!(check_batch("t", 1024, 513, 512).is_err());
        assert!(check_batch("t", 1024, 0, 513).is_err());
        assert!(check_batch("t", 1024, u64::MAX, 1).is_err());
        assert!(check_batch("t", 1024, 1024, 0).is_ok());
    }
}
