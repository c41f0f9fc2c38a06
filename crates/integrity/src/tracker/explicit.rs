//! The cooperative backend: the caller marks the pages it writes.
//!
//! Exact and fault-free, but it sees only the stores its callers announce (Vilamb's
//! non-restrictive model is lost: a raw store without a `mark` is missed).
//!
//! **Order of mark and store.** `collect` takes a page's bit atomically, but it cannot know
//! whether the store the bit announced has landed yet. If a `collect` runs between a `mark` and
//! the store it announced, the page is reported (and its redundancy recomputed) *before* the
//! store, and nothing reports the store afterwards. A caller that needs every store reported
//! by a `collect` that starts after the store lands must therefore mark again after the store
//! (or mark only after it); marking before as well keeps the page dirty while the store is in
//! flight, which is what a checker reading dirty bits with `peek` needs.

use super::{BatchBits, TrackError, Tracker, TrackerKind, check_batch, gather_bits, set_bits};
use std::sync::atomic::{AtomicU64, Ordering};

const KIND: &str = "explicit";

/// A bitmap of pages the caller marked, one atomic bit per page.
pub struct ExplicitTracker {
    pages: u64,
    words: Box<[AtomicU64]>,
}

impl ExplicitTracker {
    /// A tracker of `pages` pages, armed (every page clean).
    pub fn new(pages: u64) -> ExplicitTracker {
        let words = usize::try_from(pages.div_ceil(64)).expect("page count fits in memory");
        ExplicitTracker {
            pages,
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl std::fmt::Debug for ExplicitTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExplicitTracker")
            .field("pages", &self.pages)
            .finish_non_exhaustive()
    }
}

impl Tracker for ExplicitTracker {
    fn kind(&self) -> TrackerKind {
        TrackerKind::Explicit
    }

    fn pages(&self) -> u64 {
        self.pages
    }

    fn arm(&self) -> Result<(), TrackError> {
        for word in self.words.iter() {
            word.store(0, Ordering::Release);
        }
        Ok(())
    }

    fn collect(&self, first: u64, count: u32, out: &mut BatchBits) -> Result<(), TrackError> {
        check_batch(KIND, self.pages, first, count)?;
        gather_bits(
            &self.words,
            first,
            count,
            |word, mask| {
                if mask == u64::MAX {
                    word.swap(0, Ordering::AcqRel)
                } else {
                    word.fetch_and(!mask, Ordering::AcqRel)
                }
            },
            out,
        );
        Ok(())
    }

    fn peek(&self, first: u64, count: u32, out: &mut BatchBits) -> Result<(), TrackError> {
        check_batch(KIND, self.pages, first, count)?;
        gather_bits(
            &self.words,
            first,
            count,
            |word, _| word.load(Ordering::Acquire),
            out,
        );
        Ok(())
    }

    /// Pages outside the tracker are ignored.
    fn mark(&self, first: u64, count: u64) {
        debug_assert!(
            first.saturating_add(count) <= self.pages,
            "mark {first}+{count} outside {} pages",
            self.pages
        );
        set_bits(
            &self.words,
            first,
            count.min(self.pages.saturating_sub(first)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::{BATCH_PAGES, BATCH_WORDS};

    fn pages_of(bits: &BatchBits) -> Vec<u64> {
        (0..BATCH_PAGES as u64)
            .filter(|i| bits[(i / 64) as usize] >> (i % 64) & 1 == 1)
            .collect()
    }

    #[test]
    fn marks_are_collected_once_and_peek_keeps_them() {
        let t = ExplicitTracker::new(1000);
        let mut out = [0; BATCH_WORDS];
        t.collect(0, 512, &mut out).unwrap();
        assert_eq!(pages_of(&out), Vec::<u64>::new());
        t.mark(3, 1);
        t.mark(60, 10);
        t.mark(600, 1);
        t.peek(0, 512, &mut out).unwrap();
        assert_eq!(pages_of(&out), [vec![3], (60..70).collect()].concat());
        t.collect(0, 512, &mut out).unwrap();
        assert_eq!(pages_of(&out), [vec![3], (60..70).collect()].concat());
        t.collect(0, 512, &mut out).unwrap();
        assert!(pages_of(&out).is_empty());
        // An unaligned batch at the end of the tracker.
        t.collect(590, 410, &mut out).unwrap();
        assert_eq!(pages_of(&out), vec![10]);
    }

    #[test]
    fn arm_clears_and_bad_batches_are_errors() {
        let t = ExplicitTracker::new(100);
        t.mark(0, 100);
        t.arm().unwrap();
        let mut out = [0; BATCH_WORDS];
        t.peek(0, 100, &mut out).unwrap();
        assert_eq!(out, [0; BATCH_WORDS]);
        assert!(t.collect(50, 51, &mut out).is_err());
        assert!(t.peek(0, BATCH_PAGES + 1, &mut out).is_err());
    }
}
