//! Media fault injection, behind the back of every layer above the medium.
//!
//! The faults are the ones device ECC does not catch (see `docs/media-assumptions.md`): bit
//! flips, a lost write (the page keeps an older version), and a misdirected write (a page's new
//! contents land on another page, which loses its own). Each goes through [`Medium::inject`], so
//! it is durable at once and no write tracking sees it.
//!
//! One fault changes no stored byte: a *misdirected read* (Vilamb's and TVARAK's fault models),
//! where a read of page A returns page B's bytes while A holds its own contents intact. It is a
//! fault of the read path, so it is modelled by a wrapper, [`MisdirectedReads`], through which
//! the layers above read; the medium underneath stays as it was.

use crate::domain::{Backing, Domain};
use crate::error::{PmemError, Result};
use crate::layout::PAGE_SIZE;
use crate::medium::Medium;
use crate::rng::SplitMix64;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// One page whose reads go astray.
#[derive(Debug, Clone, Copy)]
struct Redirect {
    /// The page whose bytes those reads return.
    source: u64,
    /// Reads still to misdirect; `None`: every read until cleared.
    left: Option<u64>,
}

/// A medium whose reads of chosen pages return the bytes of other pages (misdirected reads).
///
/// Writes, flushes, fences and injections go to the medium underneath unchanged; a read that
/// touches a redirected page takes the bytes at the same offsets within the source page
/// instead, for as many reads as asked (a transient fault) or until cleared (a persistent one,
/// such as a wrong address mapping). Nothing stored changes: once the redirect ends, the page
/// reads right again.
#[derive(Debug)]
pub struct MisdirectedReads<M: Medium> {
    medium: M,
    redirects: Mutex<HashMap<u64, Redirect>>,
    misdirected: AtomicU64,
}

impl<M: Medium> MisdirectedReads<M> {
    /// `medium`, with no read misdirected yet.
    pub fn new(medium: M) -> Self {
        MisdirectedReads {
            medium,
            redirects: Mutex::new(HashMap::new()),
            misdirected: AtomicU64::new(0),
        }
    }

    /// The medium underneath (its reads are never misdirected).
    pub fn underlying(&self) -> &M {
        &self.medium
    }

    /// From now on, reads that touch page `page` return page `source`'s bytes: the next `reads`
    /// of them, or every one until [`Self::clear`] when `reads` is `None`. Replaces an earlier
    /// redirect of `page`.
    pub fn misdirect(&self, page: u64, source: u64, reads: Option<u64>) -> Result<()> {
        page_range(&self.medium, page)?;
        page_range(&self.medium, source)?;
        if page == source {
            return Err(PmemError::Invalid {
                what: "misdirected read",
                reason: format!("page {page} would be read from itself"),
            });
        }
        if reads == Some(0) {
            return Err(PmemError::Invalid {
                what: "misdirected read",
                reason: "zero reads to misdirect".into(),
            });
        }
        self.table().insert(
            page,
            Redirect {
                source,
                left: reads,
            },
        );
        Ok(())
    }

    /// Reads of `page` go right again.
    pub fn clear(&self, page: u64) {
        self.table().remove(&page);
    }

    /// Reads (of one page each) misdirected so far.
    pub fn misdirected(&self) -> u64 {
        self.misdirected.load(Ordering::Relaxed)
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Redirect>> {
        self.redirects.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where a read of `page` takes its bytes from now (counting the read).
    fn source_of(&self, page: u64) -> u64 {
        let mut table = self.table();
        let Some(r) = table.get_mut(&page) else {
            return page;
        };
        let source = r.source;
        match &mut r.left {
            Some(1) => {
                table.remove(&page);
            }
            Some(n) => *n -= 1,
            None => {}
        }
        self.misdirected.fetch_add(1, Ordering::Relaxed);
        source
    }
}

impl<M: Medium> Medium for MisdirectedReads<M> {
    fn len(&self) -> usize {
        self.medium.len()
    }
    fn domain(&self) -> Domain {
        self.medium.domain()
    }
    fn backing(&self) -> Backing {
        self.medium.backing()
    }
    fn label(&self) -> std::path::PathBuf {
        self.medium.label()
    }
    fn read(&self, offset: usize, buf: &mut [u8]) {
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done;
            let page = (at / PAGE_SIZE) as u64;
            let in_page = at % PAGE_SIZE;
            let n = (PAGE_SIZE - in_page).min(buf.len() - done);
            let from = self.source_of(page) as usize * PAGE_SIZE + in_page;
            self.medium.read(from, &mut buf[done..done + n]);
            done += n;
        }
    }
    fn write(&self, offset: usize, data: &[u8]) {
        self.medium.write(offset, data)
    }
    fn write_nontemporal(&self, offset: usize, data: &[u8]) {
        self.medium.write_nontemporal(offset, data)
    }
    fn load_u64(&self, offset: usize) -> u64 {
        let mut b = [0u8; 8];
        self.read(offset, &mut b);
        u64::from_le_bytes(b)
    }
    fn store_u64(&self, offset: usize, value: u64) {
        self.medium.store_u64(offset, value)
    }
    fn flush(&self, offset: usize, len: usize) -> Result<()> {
        self.medium.flush(offset, len)
    }
    fn write_back(&self, offset: usize, len: usize) -> Result<()> {
        self.medium.write_back(offset, len)
    }
    fn fence(&self) -> Result<()> {
        self.medium.fence()
    }
    fn persist(&self, offset: usize, len: usize) -> Result<()> {
        self.medium.persist(offset, len)
    }
    fn grow(&self, len: usize) -> Result<()> {
        self.medium.grow(len)
    }
    fn discard(&self, offset: usize, len: usize) -> Result<()> {
        self.medium.discard(offset, len)
    }
    fn back(&self, offset: usize, len: usize) -> Result<()> {
        self.medium.back(offset, len)
    }
    fn inject(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.medium.inject(offset, data)
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

    fn pages(fill: &[u8]) -> SimMedium {
        let sim = SimMedium::new(fill.len() * PAGE_SIZE, SimConfig::default());
        for (i, &b) in fill.iter().enumerate() {
            sim.write(i * PAGE_SIZE, &[b; PAGE_SIZE]);
        }
        sim.persist(0, fill.len() * PAGE_SIZE).unwrap();
        sim
    }

    #[test]
    fn a_misdirected_read_returns_the_source_page_and_changes_nothing_stored() {
        let m = MisdirectedReads::new(pages(&[10, 11, 12, 13]));
        let before = m.underlying().durable_image();
        m.misdirect(1, 3, None).unwrap();
        // A read spanning pages 0..3: page 1's part comes from page 3, at the same offsets.
        let mut buf = vec![0u8; 3 * PAGE_SIZE - 200];
        m.read(100, &mut buf);
        let split = PAGE_SIZE - 100;
        assert!(buf[..split].iter().all(|&b| b == 10));
        assert!(buf[split..split + PAGE_SIZE].iter().all(|&b| b == 13));
        assert!(buf[split + PAGE_SIZE..].iter().all(|&b| b == 12));
        assert_eq!(m.load_u64(PAGE_SIZE + 64), u64::from_le_bytes([13; 8]));
        assert_eq!(m.misdirected(), 2);
        // Persistent until cleared; the underlying medium is untouched and reads right.
        let mut one = [0u8; 16];
        m.read(PAGE_SIZE + 8, &mut one);
        assert_eq!(one, [13; 16]);
        assert_eq!(m.underlying().durable_image(), before);
        m.clear(1);
        m.read(PAGE_SIZE + 8, &mut one);
        assert_eq!(one, [11; 16]);
        assert_eq!(m.misdirected(), 3);
    }

    #[test]
    fn a_transient_misdirection_ends_after_its_reads() {
        let m = MisdirectedReads::new(pages(&[1, 2, 3]));
        m.misdirect(0, 2, Some(2)).unwrap();
        let mut b = [0u8; 4];
        for want in [3, 3, 1, 1] {
            m.read(10, &mut b);
            assert_eq!(b, [want; 4]);
        }
        assert_eq!(m.misdirected(), 2);
        // Writes go to the addressed page whatever reads do.
        m.misdirect(0, 1, None).unwrap();
        m.write(0, &[9; 4]);
        m.persist(0, 4).unwrap();
        assert_eq!(&m.underlying().durable_image()[..4], &[9; 4]);
        assert_eq!(
            &m.underlying().durable_image()[PAGE_SIZE..PAGE_SIZE + 4],
            &[2; 4]
        );
    }

    #[test]
    fn misdirections_are_validated() {
        let m = MisdirectedReads::new(pages(&[0, 0]));
        assert!(m.misdirect(0, 0, None).is_err(), "a page onto itself");
        assert!(
            m.misdirect(0, 2, None).is_err(),
            "source outside the medium"
        );
        assert!(m.misdirect(2, 0, None).is_err(), "page outside the medium");
        assert!(m.misdirect(0, 1, Some(0)).is_err(), "zero reads");
        assert_eq!(m.misdirected(), 0);
    }
}
