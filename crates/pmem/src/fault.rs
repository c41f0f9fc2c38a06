//! Media fault injection, behind the back of every layer above the medium.
//!
//! The faults are the ones device ECC does not catch (see `docs/media-assumptions.md`): bit
//! flips, a lost write (the page keeps an older version), and a misdirected write (a page's new
//! contents land on another page, which loses its own). Each goes through [`Medium::inject`], so
//! it is durable at once and no write tracking sees it.

use crate::error::{PmemError, Result};
use crate::layout::PAGE_SIZE;
use crate::medium::Medium;
use crate::rng::SplitMix64;
use std::collections::HashMap;

/// Most bits one [`flip_bits`] call flips (the positions are returned in memory).
pub const FLIP_BITS_MAX: u32 = 1 << 24;

/// Flip `bits` distinct bits, chosen from `seed`, in `[offset, offset + len)`. Returns the bit
/// positions flipped, ascending (bit `i` is bit `i % 8` of byte `offset + i / 8`).
///
/// Linear in `bits` (expected): positions are drawn from the seed and a set skips repeats; when
/// more than half the range's bits are to flip, the bits to leave alone are drawn instead.
pub fn flip_bits<M: Medium + ?Sized>(
    medium: &M,
    offset: usize,
    len: usize,
    bits: u32,
    seed: u64,
) -> Result<Vec<u64>> {
    let end = offset
        .checked_add(len)
        .filter(|&e| e <= medium.len() && len > 0);
    if end.is_none() {
        return Err(PmemError::Invalid {
            what: "fault range",
            reason: format!(
                "[{offset:#x}, +{len:#x}) is empty or outside the {:#x} bytes of the medium",
                medium.len()
            ),
        });
    }
    let span = len as u64 * 8;
    if bits == 0 || bits as u64 > span {
        return Err(PmemError::Invalid {
            what: "bit count",
            reason: format!("{bits} bits cannot be flipped in a {len}-byte range"),
        });
    }
    if bits > FLIP_BITS_MAX {
        return Err(PmemError::Invalid {
            what: "bit count",
            reason: format!("{bits} bits is more than the {FLIP_BITS_MAX} one call flips"),
        });
    }
    let chosen = distinct_positions(span, u64::from(bits), seed);
    let mut bytes = vec![0u8; len];
    medium.read(offset, &mut bytes);
    for &b in &chosen {
        bytes[(b / 8) as usize] ^= 1 << (b % 8);
    }
    medium.inject(offset, &bytes)?;
    Ok(chosen)
}

/// `count` distinct positions in `[0, span)` chosen from `seed`, ascending. `count <= span`,
/// and `count <= FLIP_BITS_MAX`.
fn distinct_positions(span: u64, count: u64, seed: u64) -> Vec<u64> {
    use std::collections::HashSet;
    let draw = |n: u64| {
        let mut rng = SplitMix64::new(seed);
        let mut set = HashSet::with_capacity(n as usize);
        // Each draw is new with probability at least 1/2 (n <= span / 2 below): about 2n draws.
        while (set.len() as u64) < n {
            set.insert(rng.below(span));
        }
        set
    };
    let mut chosen: Vec<u64> = if count <= span / 2 {
        draw(count).into_iter().collect()
    } else {
        // More than half: leave `span - count` positions alone (span < 2 * count here).
        let keep = draw(span - count);
        (0..span).filter(|b| !keep.contains(b)).collect()
    };
    chosen.sort_unstable();
    chosen
}

/// Remembers old page versions, so a later write can be "lost" or "misdirected".
#[derive(Debug, Default)]
pub struct PageHistory {
    old: HashMap<u64, Vec<u8>>,
}

fn page_range<M: Medium + ?Sized>(medium: &M, page: u64) -> Result<usize> {
    let at = (page as usize)
        .checked_mul(PAGE_SIZE)
        .filter(|&o| o + PAGE_SIZE <= medium.len());
    at.ok_or_else(|| PmemError::Invalid {
        what: "page",
        reason: format!(
            "page {page} is outside the medium's {} pages",
            medium.len() / PAGE_SIZE
        ),
    })
}

impl PageHistory {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Remember `page` as it is now: the version a lost write will leave behind.
    pub fn snapshot<M: Medium + ?Sized>(&mut self, medium: &M, page: u64) -> Result<()> {
        let at = page_range(medium, page)?;
        let mut buf = vec![0u8; PAGE_SIZE];
        medium.read(at, &mut buf);
        self.old.insert(page, buf);
        Ok(())
    }

    /// The remembered version of `page`, if any.
    pub fn version(&self, page: u64) -> Option<&[u8]> {
        self.old.get(&page).map(Vec::as_slice)
    }

    /// Lost write: the media never took the writes to `page` since its snapshot; it holds the old
    /// version again.
    pub fn lose_write<M: Medium + ?Sized>(&self, medium: &M, page: u64) -> Result<()> {
        let at = page_range(medium, page)?;
        let old = self.old.get(&page).ok_or_else(|| PmemError::Invalid {
            what: "lost write",
            reason: format!("page {page} has no snapshot to fall back to"),
        })?;
        medium.inject(at, old)
    }

    /// Misdirected write: the current contents of `intended` land on `victim` instead, and
    /// `intended` keeps its snapshot (older) version.
    pub fn misdirect_write<M: Medium + ?Sized>(
        &self,
        medium: &M,
        intended: u64,
        victim: u64,
    ) -> Result<()> {
        let from = page_range(medium, intended)?;
        let to = page_range(medium, victim)?;
        if intended == victim {
            return Err(PmemError::Invalid {
                what: "misdirected write",
                reason: "the two pages are the same".into(),
            });
        }
        let mut new = vec![0u8; PAGE_SIZE];
        medium.read(from, &mut new);
        medium.inject(to, &new)?;
        self.lose_write(medium, intended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{SimConfig, SimMedium};

    #[test]
    fn flips_exactly_k_distinct_bits_durably() {
        let sim = SimMedium::new(4 * PAGE_SIZE, SimConfig::default());
        let flipped = flip_bits(&sim, 100, 16, 7, 99).unwrap();
        assert_eq!(flipped.len(), 7);
        let img = sim.power_fail();
        let ones: u32 = img.iter().map(|b| b.count_ones()).sum();
        assert_eq!(ones, 7);
        assert!(img[..100].iter().chain(&img[116..]).all(|&b| b == 0));
        assert!(flip_bits(&sim, 100, 1, 9, 0).is_err());
        assert!(flip_bits(&sim, 4 * PAGE_SIZE - 1, 2, 1, 0).is_err());
        assert!(flip_bits(&sim, 0, 0, 1, 0).is_err());
    }

    #[test]
    fn many_bits_are_exactly_that_many_distinct_bits() {
        let len = 100_000;
        let sim = SimMedium::new(32 * PAGE_SIZE, SimConfig::default());
        // 600,000 of 800,000 bits (the complement path) and 300,000 (the direct one).
        for (bits, seed) in [(600_000u32, 5u64), (300_000, 6)] {
            let before = sim.durable_image();
            let flipped = flip_bits(&sim, 4096, len, bits, seed).unwrap();
            assert_eq!(flipped.len(), bits as usize);
            assert!(
                flipped.windows(2).all(|w| w[0] < w[1]),
                "distinct, ascending"
            );
            assert!(*flipped.last().unwrap() < len as u64 * 8);
            let after = sim.durable_image();
            let changed: u32 = before
                .iter()
                .zip(&after)
                .map(|(a, b)| (a ^ b).count_ones())
                .sum();
            assert_eq!(changed, bits, "exactly {bits} bits changed");
            for &b in &flipped {
                let at = 4096 + (b / 8) as usize;
                assert_ne!((before[at] ^ after[at]) & (1 << (b % 8)), 0);
            }
            assert_eq!(
                flip_bits(&sim, 4096, len, bits, seed).unwrap(),
                flipped,
                "same seed"
            );
        }
        let all = flip_bits(&sim, 0, 2, 16, 1).unwrap();
        assert_eq!(all, (0..16).collect::<Vec<u64>>());
        assert!(flip_bits(&sim, 0, 32 * PAGE_SIZE, FLIP_BITS_MAX + 1, 0).is_err());
    }

    #[test]
    fn lost_and_misdirected_writes_put_back_old_versions() {
        let sim = SimMedium::new(4 * PAGE_SIZE, SimConfig::default());
        let mut h = PageHistory::new();
        sim.write(PAGE_SIZE, &[1; PAGE_SIZE]);
        sim.persist(PAGE_SIZE, PAGE_SIZE).unwrap();
        h.snapshot(&sim, 1).unwrap();
        sim.write(PAGE_SIZE, &[2; PAGE_SIZE]);
        sim.persist(PAGE_SIZE, PAGE_SIZE).unwrap();
        h.lose_write(&sim, 1).unwrap();
        assert!(
            sim.durable_image()[PAGE_SIZE..2 * PAGE_SIZE]
                .iter()
                .all(|&b| b == 1)
        );

        sim.write(PAGE_SIZE, &[3; PAGE_SIZE]);
        sim.persist(PAGE_SIZE, PAGE_SIZE).unwrap();
        h.misdirect_write(&sim, 1, 3).unwrap();
        let img = sim.durable_image();
        assert!(
            img[PAGE_SIZE..2 * PAGE_SIZE].iter().all(|&b| b == 1),
            "intended page keeps the old version"
        );
        assert!(
            img[3 * PAGE_SIZE..].iter().all(|&b| b == 3),
            "victim page got the new contents"
        );
        assert!(h.lose_write(&sim, 2).is_err(), "no snapshot of page 2");
        assert!(h.misdirect_write(&sim, 1, 4).is_err());
        assert!(h.misdirect_write(&sim, 1, 1).is_err());
    }
}
