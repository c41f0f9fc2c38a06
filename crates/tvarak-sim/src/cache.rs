//! Set-associative LRU caches: the private L1 and L2 of each core, the banks of the shared
//! inclusive LLC with their way partitions, and the per-bank controller cache.
//!
//! A [`SetAssoc`] holds line identifiers (`u64`, see [`crate::nvm`] for how data and redundancy
//! lines are numbered) with a dirty bit each. A way
//! partition of the LLC is modelled as a separate `SetAssoc` with the partition's ways and the
//! bank's number of sets, so a line inserted into one partition can only evict a line of the
//! same partition, as the paper's partitions guarantee. The bank of a line is [`bank_of`] (a
//! 64-bit mix of the line number, then mod banks); its set is [`set_index`] mod sets (the
//! in-page offset below a mix of the page number).

/// The geometry and cost of one cache level.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct CacheGeom {
    /// Capacity in bytes (for the LLC: all banks together).
    pub bytes: u64,
    /// Associativity.
    pub ways: u16,
    /// Hit latency in core cycles.
    pub latency_cycles: u32,
    /// Energy per hit, picojoules.
    pub hit_pj: f64,
    /// Energy per miss, picojoules.
    pub miss_pj: f64,
}

/// SplitMix64's finaliser: a bijective 64-bit mix in which every input bit affects every output
/// bit (a plain multiplicative hash keeps arithmetic progressions, such as the same offset in
/// regions 512 MB apart, in lock step).
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The LLC bank of a line: SplitMix64's finaliser of the line number, mod `banks`.
pub fn bank_of(line: u64, banks: usize) -> usize {
    (mix(line) % banks as u64) as usize
}

/// The set-index source of a line: its in-page offset (6 bits) below a hash of its page number.
/// Traced addresses are offsets in a mapped range, not physical addresses; the hash stands in
/// for the scattering of physical page frames, so that regions that start at large powers of
/// two (as fio's per-thread regions do) do not all fall into the same sets, while the lines of
/// one page still occupy consecutive sets. A cache with `sets` sets uses this mod `sets`.
pub fn set_index(line: u64) -> u64 {
    let page = line >> 6;
    let h = mix(page ^ 0xD6E8_FEB8_6659_FD93) >> 8;
    (h << 6) | (line & 63)
}

const EMPTY: u64 = u64::MAX;

/// A line pushed out of a cache to make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Victim {
    /// The evicted line.
    pub line: u64,
    /// Whether it was dirty.
    pub dirty: bool,
}

/// A set-associative cache with true LRU replacement and a dirty bit per line.
#[derive(Debug, Clone)]
pub struct SetAssoc {
    sets: usize,
    ways: usize,
    tags: Vec<u64>,
    stamps: Vec<u64>,
    dirty: Vec<bool>,
    clock: u64,
}

impl SetAssoc {
    /// A cache of `lines` lines in `ways` ways (`lines / ways` sets, at least one).
    /// `ways` must be at least 1 (the caller validates).
    pub fn new(lines: usize, ways: usize) -> SetAssoc {
        let ways = ways.max(1);
        let sets = (lines / ways).max(1);
        SetAssoc {
            sets,
            ways,
            tags: vec![EMPTY; sets * ways],
            stamps: vec![0; sets * ways],
            dirty: vec![false; sets * ways],
            clock: 0,
        }
    }

    /// Number of sets.
    pub fn sets(&self) -> usize {
        self.sets
    }

    /// Capacity in lines.
    pub fn capacity(&self) -> usize {
        self.sets * self.ways
    }

    fn range(&self, line: u64) -> std::ops::Range<usize> {
        let set = (set_index(line) % self.sets as u64) as usize;
        set * self.ways..(set + 1) * self.ways
    }

    fn find(&self, line: u64) -> Option<usize> {
        self.range(line).find(|&i| self.tags[i] == line)
    }

    /// Whether `line` is present (no LRU update).
    pub fn contains(&self, line: u64) -> bool {
        self.find(line).is_some()
    }

    /// Look `line` up; on a hit make it most recently used. Returns whether it hit.
    pub fn touch(&mut self, line: u64) -> bool {
        match self.find(line) {
            Some(i) => {
                self.clock += 1;
                self.stamps[i] = self.clock;
                true
            }
            None => false,
        }
    }

    /// Insert `line` (which must not be present) as most recently used; returns the line it
    /// displaced, if the set was full.
    pub fn insert(&mut self, line: u64, dirty: bool) -> Option<Victim> {
        debug_assert!(line != EMPTY && !self.contains(line));
        let r = self.range(line);
        let slot = match r.clone().find(|&i| self.tags[i] == EMPTY) {
            Some(i) => i,
            None => r
                .min_by_key(|&i| self.stamps[i])
                .unwrap_or_else(|| unreachable!("a set has at least one way")),
        };
        let victim = (self.tags[slot] != EMPTY).then(|| Victim {
            line: self.tags[slot],
            dirty: self.dirty[slot],
        });
        self.clock += 1;
        self.tags[slot] = line;
        self.stamps[slot] = self.clock;
        self.dirty[slot] = dirty;
        victim
    }

    /// Remove `line`; returns its dirty bit if it was present.
    pub fn remove(&mut self, line: u64) -> Option<bool> {
        let i = self.find(line)?;
        self.tags[i] = EMPTY;
        Some(std::mem::take(&mut self.dirty[i]))
    }

    /// Set the dirty bit of `line`; returns false if it is not present.
    pub fn set_dirty(&mut self, line: u64, dirty: bool) -> bool {
        match self.find(line) {
            Some(i) => {
                self.dirty[i] = dirty;
                true
            }
            None => false,
        }
    }

    /// The dirty bit of `line`, if present.
    pub fn is_dirty(&self, line: u64) -> Option<bool> {
        self.find(line).map(|i| self.dirty[i])
    }

    /// Every dirty line, in slot order (deterministic).
    pub fn dirty_lines(&self) -> Vec<u64> {
        (0..self.tags.len())
            .filter(|&i| self.tags[i] != EMPTY && self.dirty[i])
            .map(|i| self.tags[i])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_least_recently_used_and_reports_dirty() {
        let mut c = SetAssoc::new(2, 2); // one set, two ways
        assert_eq!(c.insert(1, true), None);
        assert_eq!(c.insert(2, false), None);
        assert!(c.touch(1));
        assert_eq!(
            c.insert(3, false),
            Some(Victim {
                line: 2,
                dirty: false
            })
        );
        assert_eq!(
            c.insert(4, false),
            Some(Victim {
                line: 1,
                dirty: true
            })
        );
        assert!(!c.contains(1) && c.contains(3) && c.contains(4));
        assert_eq!(c.remove(3), Some(false));
        assert_eq!(c.remove(3), None);
    }

    #[test]
    fn lines_of_a_page_take_consecutive_sets_and_pages_scatter() {
        let mut c = SetAssoc::new(64, 1); // 64 sets, direct mapped
        for l in 0..64 {
            assert_eq!(c.insert(l, false), None, "line {l}");
        }
        // a line of another page at the same offset conflicts with exactly that offset's line
        let v = c.insert(64 + 5, true);
        assert_eq!(v.map(|v| v.line), Some(5));
        assert_eq!(c.dirty_lines(), vec![69]);
        // pages at the same offset of 512 MB regions spread over the sets of a big cache
        let sets: std::collections::BTreeSet<u64> =
            (0..12u64).map(|k| set_index(k << 23) % 2048).collect();
        assert!(sets.len() >= 10, "{sets:?}");
    }

    #[test]
    fn banks_spread_consecutive_lines() {
        let mut seen = [0u32; 12];
        for l in 0..1200 {
            seen[bank_of(l, 12)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "{seen:?}");
    }
}
