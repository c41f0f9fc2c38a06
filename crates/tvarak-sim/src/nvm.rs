//! The NVM DIMMs, the paper's page-striped RAID-5 layout and the addresses of the redundancy
//! that protects a data line.
//!
//! Line numbering. A data line is its byte address in the traced range divided by 64 (tag 0).
//! Redundancy lines carry a kind tag in bits 56..63 so that they can sit in the same caches:
//! - system-checksum line (tag 1): per DIMM, the CRC-32C of 16 consecutive pages *of that DIMM*
//!   (the page's checksum lives on the page's own DIMM);
//! - DAX-CL-checksum line (tag 2): 16 consecutive data lines' CRC-32C (the DAX-CL-checksum
//!   buffer, placed round-robin over the DIMMs; it need not share a DIMM with its data);
//! - parity line (tag 3): the line at the same in-page offset of the stripe's parity page;
//! - object-checksum line (tag 4): the software TxB-Object design's checksum table, 8 B per
//!   64 B-aligned object start.
//!
//! Layout. Data page `p` (byte address / 4096) is in stripe `s = p / (dimms - 1)` at index
//! `k = p mod (dimms - 1)`. Each DIMM holds one page of each stripe (page `s` of the DIMM). The
//! parity page of stripe `s` is on DIMM `dimms - 1 - (s mod dimms)` (parity rotates from the
//! last DIMM downwards); data index `k` goes to the `k`-th of the other DIMMs in order.

/// Bytes of a line.
pub const LINE: u64 = 64;
/// Lines of a page.
pub const LINES_PER_PAGE: u64 = 64;
/// Checksums (4 B) in one 64 B line.
pub const CSUMS_PER_LINE: u64 = 16;

const TAG_SHIFT: u32 = 56;
const INDEX_MASK: u64 = (1 << TAG_SHIFT) - 1;

/// What a line number stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    /// Application data.
    Data,
    /// A line of a DIMM's system (page) checksum region.
    SysCsum,
    /// A line of the DAX-CL-checksum buffer.
    ClCsum,
    /// A parity line.
    Parity,
    /// A line of the software per-object checksum table.
    ObjCsum,
}

impl LineKind {
    /// True for everything but application data.
    pub fn is_redundancy(self) -> bool {
        self != LineKind::Data
    }
}

/// The kind of a line number.
pub fn kind(line: u64) -> LineKind {
    match line >> TAG_SHIFT {
        0 => LineKind::Data,
        1 => LineKind::SysCsum,
        2 => LineKind::ClCsum,
        3 => LineKind::Parity,
        _ => LineKind::ObjCsum,
    }
}

fn tagged(tag: u64, index: u64) -> u64 {
    (tag << TAG_SHIFT) | (index & INDEX_MASK)
}

/// Largest traced byte address the simulator accepts (4 PiB; well below where data lines, their
/// stripe peers and parity indices would reach the kind tags).
pub const MAX_ADDR: u64 = (1 << 52) - 1;

/// The page-striped RAID-5 layout over `dimms` DIMMs (at least 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    dimms: u64,
}

impl Layout {
    /// A layout over `dimms` DIMMs; `dimms` must be at least 3 (the caller validates).
    pub fn new(dimms: u16) -> Layout {
        Layout {
            dimms: u64::from(dimms.max(3)),
        }
    }

    /// DIMMs.
    pub fn dimms(&self) -> u64 {
        self.dimms
    }

    /// Data pages per stripe.
    pub fn data_per_stripe(&self) -> u64 {
        self.dimms - 1
    }

    /// The DIMM holding stripe `s`'s parity page.
    pub fn parity_dimm(&self, stripe: u64) -> u64 {
        self.dimms - 1 - stripe % self.dimms
    }

    /// (stripe, DIMM) of data page `page`.
    pub fn place(&self, page: u64) -> (u64, u64) {
        let s = page / self.data_per_stripe();
        let k = page % self.data_per_stripe();
        let p = self.parity_dimm(s);
        (s, if k < p { k } else { k + 1 })
    }

    /// The system-checksum line covering data line `line`'s page (on the page's DIMM).
    pub fn syscs_line(&self, line: u64) -> u64 {
        let (s, d) = self.place(line / LINES_PER_PAGE);
        // Region of DIMM d: index = d + dimms * (page-of-DIMM / 16), DIMM recoverable mod dimms.
        tagged(1, d + self.dimms * (s / CSUMS_PER_LINE))
    }

    /// The DAX-CL-checksum line of data line `line`.
    pub fn clcs_line(&self, line: u64) -> u64 {
        tagged(2, line / CSUMS_PER_LINE)
    }

    /// The parity line protecting data line `line`.
    pub fn parity_line(&self, line: u64) -> u64 {
        let s = line / LINES_PER_PAGE / self.data_per_stripe();
        tagged(3, s * LINES_PER_PAGE + line % LINES_PER_PAGE)
    }

    /// The software object-checksum line for an object starting at byte `addr`.
    pub fn objcs_line(&self, addr: u64) -> u64 {
        tagged(4, (addr / LINE) / 8)
    }

    /// The other data lines of `line`'s stripe at the same in-page offset (parity peers).
    pub fn peers(&self, line: u64) -> impl Iterator<Item = u64> {
        let page = line / LINES_PER_PAGE;
        let off = line % LINES_PER_PAGE;
        let w = self.data_per_stripe();
        let first = page / w * w;
        (first..first + w)
            .filter(move |&p| p != page)
            .map(move |p| p * LINES_PER_PAGE + off)
    }

    /// The DIMM a line (data or redundancy) lives on.
    pub fn dimm_of(&self, line: u64) -> usize {
        let i = line & INDEX_MASK;
        let d = match kind(line) {
            LineKind::Data => self.place(line / LINES_PER_PAGE).1,
            LineKind::SysCsum => i % self.dimms,
            LineKind::ClCsum | LineKind::ObjCsum => i % self.dimms,
            LineKind::Parity => self.parity_dimm(i / LINES_PER_PAGE),
        };
        d as usize
    }
}

/// Latency and energy of the DIMMs (Table III: PCM numbers).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NvmTiming {
    /// Read latency, ns.
    pub read_ns: f64,
    /// Write latency, ns.
    pub write_ns: f64,
    /// Banks per DIMM serving accesses in parallel (at least 1).
    pub banks: u16,
}

/// The DIMMs: how long each has been busy, and what it served.
#[derive(Debug, Clone)]
pub struct Nvm {
    layout: Layout,
    timing: NvmTiming,
    busy_ns: Vec<f64>,
    /// Reads per DIMM issued on the current critical path (reset by the caller).
    critical_reads: Vec<u32>,
    critical: bool,
}

/// One NVM access, for the caller's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// The line accessed.
    pub line: u64,
    /// Whether it is redundancy.
    pub redundancy: bool,
}

impl Nvm {
    /// The DIMMs of `layout`.
    pub fn new(layout: Layout, timing: NvmTiming) -> Nvm {
        let n = layout.dimms() as usize;
        Nvm {
            layout,
            timing,
            busy_ns: vec![0.0; n],
            critical_reads: vec![0; n],
            critical: false,
        }
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Read `line`; returns whether it is redundancy.
    pub fn read(&mut self, line: u64) -> bool {
        let d = self.layout.dimm_of(line);
        self.busy_ns[d] += self.timing.read_ns;
        if self.critical {
            self.critical_reads[d] += 1;
        }
        kind(line).is_redundancy()
    }

    /// Write `line`; returns whether it is redundancy.
    pub fn write(&mut self, line: u64) -> bool {
        let d = self.layout.dimm_of(line);
        self.busy_ns[d] += self.timing.write_ns;
        kind(line).is_redundancy()
    }

    /// Start counting the reads a core waits for (a fill's critical path).
    pub fn begin_critical(&mut self) {
        self.critical = true;
        self.critical_reads.iter_mut().for_each(|r| *r = 0);
    }

    /// Stop counting; returns the wait: reads to different DIMMs overlap, a DIMM serves
    /// `banks` reads at a time, so the wait is ceil(largest per-DIMM count / banks) read
    /// latencies.
    pub fn end_critical(&mut self) -> f64 {
        self.critical = false;
        let most = self.critical_reads.iter().copied().max().unwrap_or(0);
        let banks = u32::from(self.timing.banks.max(1));
        f64::from(most.div_ceil(banks)) * self.timing.read_ns
    }

    /// The busiest DIMM's total busy time over its banks, ns (the bandwidth bound of the
    /// runtime model).
    pub fn max_busy_ns(&self) -> f64 {
        let most = self.busy_ns.iter().copied().fold(0.0, f64::max);
        most / f64::from(self.timing.banks.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raid5_rotation_and_peers() {
        let l = Layout::new(4);
        // stripe 0: parity on DIMM 3, data pages 0,1,2 on DIMMs 0,1,2
        assert_eq!(l.place(0), (0, 0));
        assert_eq!(l.place(2), (0, 2));
        // stripe 1: parity on DIMM 2, data pages 3,4,5 on DIMMs 0,1,3
        assert_eq!(l.parity_dimm(1), 2);
        assert_eq!(l.place(5), (1, 3));
        // every stripe uses every DIMM exactly once
        for s in 0..8u64 {
            let mut used: Vec<u64> = (0..3).map(|k| l.place(s * 3 + k).1).collect();
            used.push(l.parity_dimm(s));
            used.sort_unstable();
            assert_eq!(used, vec![0, 1, 2, 3]);
        }
        let line = 5 * 64 + 7; // page 5, offset 7
        let peers: Vec<u64> = l.peers(line).collect();
        assert_eq!(peers, vec![3 * 64 + 7, 4 * 64 + 7]);
        assert_eq!(l.parity_line(line), l.parity_line(peers[0]));
        assert_eq!(l.dimm_of(l.parity_line(line)), 2);
    }

    #[test]
    fn checksum_lines_cover_sixteen() {
        let l = Layout::new(4);
        assert_eq!(l.clcs_line(0), l.clcs_line(15));
        assert_ne!(l.clcs_line(15), l.clcs_line(16));
        // the system checksum of a page is on the page's DIMM
        for page in 0..200u64 {
            let line = page * 64;
            assert_eq!(l.dimm_of(l.syscs_line(line)), l.place(page).1 as usize);
        }
        // 16 pages of one DIMM share a system-checksum line: pages 0 and 48 are both DIMM 0's
        // (stripes 0 and 16 differ in line), pages 0 and 3*... of stripes 0..15 share
        assert_eq!(l.syscs_line(0), l.syscs_line(3 * 64)); // page 3: stripe 1, DIMM 0
        assert_ne!(l.syscs_line(0), l.syscs_line(48 * 64)); // page 48: stripe 16, DIMM 0
        assert_eq!(kind(l.syscs_line(0)), LineKind::SysCsum);
        assert_eq!(kind(l.clcs_line(0)), LineKind::ClCsum);
        assert_eq!(kind(l.parity_line(0)), LineKind::Parity);
        assert_eq!(kind(l.objcs_line(0)), LineKind::ObjCsum);
        assert_eq!(kind(100), LineKind::Data);
    }
}
