//! The functional redundancy engine: real bytes, real checksums, real parity.
//!
//! The timing simulator (`sim`) counts what TVARAK's controller does; this engine does it. It
//! holds the data lines as the DIMMs hold them, and the redundancy the controller keeps for
//! them, and follows the controller's operations:
//!
//! - **writeback** of a data line (LLC -> NVM): the diff against the line's previous contents
//!   (the controller's own image, which the LLC's diff partition stands for) moves the page
//!   checksum by the CRC of the diff carried to the end of the page
//!   ([`integrity::checksum::page_delta`]), the line checksum by the CRC of the diff, and the
//!   stripe's parity line by the diff itself. No page is re-read.
//! - **fill** of a data line (NVM -> LLC, [`Engine::read_line`]): the line read from the DIMM is
//!   checked against its line checksum; a mismatch is [`Detected`].
//! - **recovery** ([`Engine::recover_line`]): the line is rebuilt from the stripe's parity and
//!   the peer pages, each peer page (and the parity page) verified against its page checksum
//!   first, the result verified against the line checksum.
//!
//! Two layouts:
//!
//! - [`Engine::kavach_layout`]: exactly the `integrity` crate's eager mode for a region of
//!   `pages` data pages: page checksums, their 64-byte blocks' checksums, parity page checksums
//!   and their blocks' checksums, line checksums and parity pages over stripes of K consecutive
//!   pages, every checksum seeded with the pool UUID, what it covers and its number
//!   ([`integrity::checksum::seed`]). [`Engine::redundancy`] returns these arrays in the bytes
//!   the integrity region stores them, so the two can be compared byte for byte.
//! - [`Engine::paper_layout`]: the paper's: page-striped RAID-5 over `dimms` DIMMs with
//!   rotating parity, a checksum region per DIMM holding plain CRC-32C of the pages on that
//!   DIMM, and a line-checksum (DAX-CL-checksum) buffer.
//!
//! Faults ([`Fault`]) are injected at the DIMM, on data lines only: redundancy
//! (checksums, parity) is held outside the fault model. The engine also models device ECC: a
//! code stored with each line, written and read in the same device operation as the line, able
//! to correct one flipped bit and detect more.

use crate::error::SimError;
use integrity::checksum::{Tag, checksum, page_delta, xor_into};
use integrity::layout::{Geometry, LINE_BYTES, LINES_PER_PAGE, SUM_BLOCK_BYTES, SUMS_PER_BLOCK};
use pmem::Uuid;
use pmem::layout::PAGE_SIZE;
use std::collections::BTreeSet;

/// A fault injected at the DIMM. Addresses are byte addresses of 64-byte lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Fault {
    /// The next write of `line` is acknowledged and not applied.
    LostWrite {
        /// The line whose next write is lost.
        line: u64,
    },
    /// The next write of `line` is applied to `to` instead.
    MisdirectedWrite {
        /// The line written.
        line: u64,
        /// Where the bytes land.
        to: u64,
    },
    /// The next read of `line` returns the bytes (and ECC) of `from`.
    MisdirectedRead {
        /// The line read.
        line: u64,
        /// Whose bytes come back.
        from: u64,
    },
    /// Bit `bit` (0..512) of `line` flips at rest.
    BitFlip {
        /// The line.
        line: u64,
        /// The bit, 0..512 (taken modulo 512).
        bit: u16,
    },
}

/// Bytes of a data line.
pub const LINE: usize = LINE_BYTES;
/// Bytes of a page.
pub const PAGE: usize = PAGE_SIZE;
/// The most data pages an engine holds (1 GiB of data): it keeps two images of the data.
pub const PAGES_MAX: u64 = 1 << 18;
/// Detections an engine keeps from Observer fills.
pub const DETECTIONS_KEPT: usize = 64;
/// The slot whose carry to the end of the page is the identity: `page_delta` of this slot is
/// the plain CRC register of a 64-byte diff, i.e. how a line checksum moves.
const LAST_SLOT: usize = LINES_PER_PAGE - 1;

fn invalid(what: &str, expected: String, found: String) -> SimError {
    SimError::Invalid {
        what: what.into(),
        expected,
        found,
    }
}

/// CRC-32C (Castagnoli, reflected, initial and final inversion) of `bytes`, computed bytewise
/// from a table: the paper's plain system checksum, without Kavach's identity seed.
pub fn crc32c_plain(bytes: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, e) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    (c >> 1) ^ 0x82f6_3b78
                } else {
                    c >> 1
                };
            }
            *e = c;
        }
        t
    });
    let mut c = u32::MAX;
    for &b in bytes {
        c = table[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

/// What a verified read found wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Detected {
    /// Device ECC found more damage than it can correct.
    #[error(
        "line {line:#x}: device ECC {stored:#010x} stored, {computed:#010x} computed, not correctable"
    )]
    DeviceEcc {
        /// Byte address of the line.
        line: u64,
        /// ECC read with the line.
        stored: u32,
        /// ECC of the bytes read.
        computed: u32,
    },
    /// The line does not match its line checksum (TVARAK's check on fill).
    #[error("line {line:#x}: line checksum {stored:#010x} stored, {computed:#010x} computed")]
    LineChecksum {
        /// Byte address of the line.
        line: u64,
        /// The line checksum the controller holds.
        stored: u32,
        /// The checksum of the bytes read.
        computed: u32,
    },
    /// The address is not a line of the protected range.
    #[error("address {addr:#x}: expected a 64-byte aligned line address below {bytes:#x}")]
    OutOfRange {
        /// The address asked for.
        addr: u64,
        /// Bytes protected.
        bytes: u64,
    },
}

/// How the redundancy is kept up to date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upkeep {
    /// On every writeback, from its diff (TVARAK; also what TxB's commit-time updates produce).
    Eager,
    /// Vilamb-like: writebacks only mark their pages; a pass every `period_writes` writebacks
    /// recomputes the marked pages' checksums and their stripes' parity.
    Lazy {
        /// Writebacks between passes (at least 1).
        period_writes: u64,
        /// What the pass reads the marked pages from.
        reads: PassReads,
    },
}

/// Where a lazy pass finds the bytes it covers. The pass is software reading the pages with
/// ordinary loads: it sees a line's latest bytes while the line is in the CPU caches, and
/// what the DIMM holds once the line was written back and evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassReads {
    /// The DIMM: the lines were evicted before the pass; whatever a fault left there is
    /// covered as data.
    Dimm,
    /// The CPU caches (the controller's image): the lines were still cached at the pass, so
    /// it covers the bytes the program wrote.
    Cache,
}

/// What a read checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checks {
    /// Device ECC: corrects one flipped bit, detects more.
    pub device_ecc: bool,
    /// TVARAK's check on fill: the line against its line checksum.
    pub line_sums: bool,
}

/// Counts of what the engine did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct EngineStats {
    /// Line writebacks applied (with a non-zero or zero diff).
    pub writebacks: u64,
    /// Verified reads (fills).
    pub fills: u64,
    /// Reads that found damage.
    pub detected: u64,
    /// Single-bit errors corrected by device ECC.
    pub ecc_corrected: u64,
    /// Lines rebuilt from parity.
    pub recovered: u64,
    /// Lazy passes run.
    pub passes: u64,
    /// Observer calls that could not be applied (address outside the range).
    pub observer_errors: u64,
}

/// What [`Engine::rebuild_dimm`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DimmRebuild {
    /// Data pages rebuilt from parity.
    pub data_pages: u64,
    /// Parity pages recomputed from verified data.
    pub parity_pages: u64,
    /// Stripes refused: an input did not verify against its checksum.
    pub refused_stripes: Vec<u64>,
}

/// One named array of redundancy, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// What it is (`pagesums`, `parity`, `dimm2.pagesums`, ...).
    pub name: String,
    /// Its bytes (checksums little-endian).
    pub bytes: Vec<u8>,
}

/// Every array of redundancy an engine keeps, in the byte form its layout stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedundancyImage {
    /// The arrays, in a fixed order per layout.
    pub sections: Vec<Section>,
}

impl RedundancyImage {
    /// The section called `name`.
    pub fn section(&self, name: &str) -> Option<&[u8]> {
        self.sections
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.bytes.as_slice())
    }
}

#[derive(Debug, Clone, Copy)]
enum Layout {
    Kavach { uuid: Uuid, geo: Geometry },
    Paper { dimms: u16 },
}

/// The functional redundancy engine (see the module documentation).
#[derive(Debug, Clone)]
pub struct Engine {
    layout: Layout,
    pages: u64,
    /// Data pages per stripe.
    k: u64,
    stripes: u64,
    /// What the DIMMs hold.
    device: Vec<u8>,
    /// Device ECC of each line, stored with it.
    ecc: Vec<u32>,
    /// The controller's image: the contents it last wrote (or verified) per line; the diffs
    /// are taken against it.
    image: Vec<u8>,
    pagesums: Vec<u32>,
    pageblocks: Vec<u32>,
    paritysums: Vec<u32>,
    parityblocks: Vec<u32>,
    linesums: Vec<u32>,
    parity: Vec<u8>,
    upkeep: Upkeep,
    checks: Checks,
    dirty: BTreeSet<u64>,
    since_pass: u64,
    armed: Vec<Fault>,
    stats: EngineStats,
    first_error: Option<String>,
    detections: Vec<Detected>,
}

impl Engine {
    /// An engine whose layout and checksums are `integrity`'s eager mode for a region of
    /// `pages` data pages in stripes of `stripe_width` pages, seeds bound to `uuid`. `initial`
    /// is the data (at most `pages` pages; the rest is zeros). Reads check line checksums and
    /// device ECC; upkeep is eager.
    pub fn kavach_layout(
        uuid: Uuid,
        pages: u64,
        stripe_width: u32,
        initial: &[u8],
    ) -> Result<Self, SimError> {
        let geo = Geometry::new(pages, stripe_width).ok_or_else(|| {
            invalid(
                "kavach layout",
                "at least one page and a stripe width of 2..=32 pages".into(),
                format!("{pages} pages, stripe width {stripe_width}"),
            )
        })?;
        Engine::build(
            Layout::Kavach { uuid, geo },
            pages,
            stripe_width as u64,
            initial,
        )
    }

    /// The paper's layout: page-striped RAID-5 over `dimms` DIMMs (3..=64), `dimms - 1` data
    /// pages and one parity page per stripe, the parity page rotating (stripe `s` keeps it on
    /// DIMM `dimms - 1 - s % dimms`), plain CRC-32C page checksums in a region per DIMM, and
    /// plain CRC-32C line checksums. Reads check line checksums and device ECC.
    pub fn paper_layout(dimms: u16, pages: u64, initial: &[u8]) -> Result<Self, SimError> {
        if !(3..=64).contains(&dimms) {
            return Err(invalid(
                "paper layout",
                "3 to 64 DIMMs".into(),
                format!("{dimms}"),
            ));
        }
        Engine::build(Layout::Paper { dimms }, pages, dimms as u64 - 1, initial)
    }

    fn build(layout: Layout, pages: u64, k: u64, initial: &[u8]) -> Result<Self, SimError> {
        if pages == 0 || pages > PAGES_MAX {
            return Err(invalid(
                "engine size",
                format!("1 to {PAGES_MAX} pages"),
                format!("{pages}"),
            ));
        }
        let bytes = pages as usize * PAGE;
        if initial.len() > bytes {
            return Err(invalid(
                "initial data",
                format!("at most {bytes} bytes ({pages} pages)"),
                format!("{} bytes", initial.len()),
            ));
        }
        let mut device = vec![0u8; bytes];
        device[..initial.len()].copy_from_slice(initial);
        let stripes = pages.div_ceil(k);
        let mut e = Engine {
            layout,
            pages,
            k,
            stripes,
            ecc: device.chunks_exact(LINE).map(crc32c_plain).collect(),
            image: device.clone(),
            device,
            pagesums: vec![0; pages as usize],
            pageblocks: vec![0; pages.div_ceil(SUMS_PER_BLOCK) as usize],
            paritysums: vec![0; stripes as usize],
            parityblocks: vec![0; stripes.div_ceil(SUMS_PER_BLOCK) as usize],
            linesums: vec![0; pages as usize * LINES_PER_PAGE],
            parity: vec![0u8; stripes as usize * PAGE],
            upkeep: Upkeep::Eager,
            checks: Checks {
                device_ecc: true,
                line_sums: true,
            },
            dirty: BTreeSet::new(),
            since_pass: 0,
            armed: Vec::new(),
            stats: EngineStats::default(),
            first_error: None,
            detections: Vec::new(),
        };
        for s in 0..stripes {
            e.recompute_stripe(s, PassReads::Dimm);
        }
        Ok(e)
    }

    /// Change what reads check.
    pub fn with_checks(mut self, checks: Checks) -> Self {
        self.checks = checks;
        self
    }

    /// Change how redundancy is kept (from the current state, which is current).
    pub fn with_upkeep(mut self, upkeep: Upkeep) -> Result<Self, SimError> {
        if let Upkeep::Lazy {
            period_writes: 0, ..
        } = upkeep
        {
            return Err(invalid(
                "lazy period",
                "at least 1 writeback".into(),
                "0".into(),
            ));
        }
        self.upkeep = upkeep;
        Ok(self)
    }

    /// Data pages protected.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// Bytes protected (`pages * 4096`).
    pub fn bytes(&self) -> u64 {
        self.pages * PAGE as u64
    }

    /// `integrity`'s geometry of the region (Kavach layout only): where each array lives in
    /// an integrity region.
    pub fn geometry(&self) -> Option<Geometry> {
        match self.layout {
            Layout::Kavach { geo, .. } => Some(geo),
            Layout::Paper { .. } => None,
        }
    }

    /// Data pages per stripe.
    pub fn stripe_pages(&self) -> u64 {
        self.k
    }

    /// What the engine did so far.
    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// What fills made through the Observer found (the first [`DETECTIONS_KEPT`]; the count of
    /// all is [`EngineStats::detected`]).
    pub fn detections(&self) -> &[Detected] {
        &self.detections
    }

    /// The first Observer call that could not be applied, if any.
    pub fn first_error(&self) -> Option<&str> {
        self.first_error.as_deref()
    }

    /// What the DIMMs hold (data pages in order).
    pub fn device_data(&self) -> &[u8] {
        &self.device
    }

    /// The controller's image of the data: what it last wrote.
    pub fn intended_data(&self) -> &[u8] {
        &self.image
    }

    /// The DIMM holding data page `page` (0 for the Kavach layout, one device).
    pub fn dimm_of_page(&self, page: u64) -> u16 {
        match self.layout {
            Layout::Kavach { .. } => 0,
            Layout::Paper { .. } => {
                let s = page / self.k;
                let j = page % self.k;
                let pd = self.parity_dimm(s);
                if j < pd as u64 {
                    j as u16
                } else {
                    j as u16 + 1
                }
            }
        }
    }

    /// The DIMM holding the parity page of `stripe` (0 for the Kavach layout).
    pub fn parity_dimm(&self, stripe: u64) -> u16 {
        match self.layout {
            Layout::Kavach { .. } => 0,
            Layout::Paper { dimms } => dimms - 1 - (stripe % dimms as u64) as u16,
        }
    }

    // ---------- checksums ----------

    fn sum_of(&self, tag: Tag, number: u64, bytes: &[u8]) -> u32 {
        match self.layout {
            Layout::Kavach { uuid, .. } => checksum(&uuid, tag, number, bytes),
            Layout::Paper { .. } => crc32c_plain(bytes),
        }
    }

    fn line_sum_of(&self, line: u64, bytes: &[u8]) -> u32 {
        self.sum_of(Tag::Line, line, bytes)
    }

    fn has_blocks(&self) -> bool {
        matches!(self.layout, Layout::Kavach { .. })
    }

    fn block_bytes(sums: &[u32], block: usize) -> [u8; SUM_BLOCK_BYTES] {
        let mut b = [0u8; SUM_BLOCK_BYTES];
        let per = SUMS_PER_BLOCK as usize;
        for (i, v) in sums.iter().skip(block * per).take(per).enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// Recompute the page checksum (and its block's) of every page of `stripe`, its line
    /// checksums, its parity page and that page's checksum, from the DIMM contents (the
    /// controller's image takes them) or from the controller's image.
    fn recompute_stripe(&mut self, stripe: u64, from: PassReads) {
        let first = stripe * self.k;
        let end = ((stripe + 1) * self.k).min(self.pages);
        let mut par = vec![0u8; PAGE];
        for p in first..end {
            let src = match from {
                PassReads::Dimm => &self.device,
                PassReads::Cache => &self.image,
            };
            let bytes = src[p as usize * PAGE..(p as usize + 1) * PAGE].to_vec();
            xor_into(&mut par, &bytes);
            self.pagesums[p as usize] = self.sum_of(Tag::DataPage, p, &bytes);
            for (slot, l) in bytes.chunks_exact(LINE).enumerate() {
                let n = p * LINES_PER_PAGE as u64 + slot as u64;
                self.linesums[n as usize] = self.line_sum_of(n, l);
            }
            self.image[p as usize * PAGE..(p as usize + 1) * PAGE].copy_from_slice(&bytes);
        }
        self.paritysums[stripe as usize] = self.sum_of(Tag::ParityPage, stripe, &par);
        self.parity[stripe as usize * PAGE..(stripe as usize + 1) * PAGE].copy_from_slice(&par);
        if self.has_blocks() {
            for p in (first..end)
                .map(|p| p / SUMS_PER_BLOCK)
                .collect::<BTreeSet<_>>()
            {
                let b = Engine::block_bytes(&self.pagesums, p as usize);
                self.pageblocks[p as usize] = self.sum_of(Tag::PageBlock, p, &b);
            }
            let qb = stripe / SUMS_PER_BLOCK;
            let b = Engine::block_bytes(&self.paritysums, qb as usize);
            self.parityblocks[qb as usize] = self.sum_of(Tag::ParityBlock, qb, &b);
        }
    }

    /// XOR `delta` into entry `index` of a checksum array and move its block's checksum by the
    /// CRC of the block's diff (incremental, as for a line).
    fn move_sum(sums: &mut [u32], blocks: Option<&mut [u32]>, index: usize, delta: u32) {
        sums[index] ^= delta;
        if let Some(blocks) = blocks {
            let per = SUMS_PER_BLOCK as usize;
            let mut diff = [0u8; SUM_BLOCK_BYTES];
            let at = (index % per) * 4;
            diff[at..at + 4].copy_from_slice(&delta.to_le_bytes());
            blocks[index / per] ^= page_delta(LAST_SLOT, &diff);
        }
    }

    // ---------- addressing ----------

    fn line_index(&self, addr: u64) -> Option<u64> {
        (addr % LINE as u64 == 0 && addr < self.bytes()).then_some(addr / LINE as u64)
    }

    fn check_line(&self, addr: u64) -> Result<u64, SimError> {
        self.line_index(addr).ok_or_else(|| {
            invalid(
                "line address",
                format!("a 64-byte aligned address below {:#x}", self.bytes()),
                format!("{addr:#x}"),
            )
        })
    }

    fn at(n: u64) -> std::ops::Range<usize> {
        n as usize * LINE..(n as usize + 1) * LINE
    }

    fn line_of(buf: &[u8], n: u64) -> [u8; LINE] {
        let mut l = [0u8; LINE];
        l.copy_from_slice(&buf[Engine::at(n)]);
        l
    }

    // ---------- the DIMM, where faults act ----------

    /// A read of line `n` at the DIMM: bytes and the ECC stored with them.
    pub(crate) fn dimm_read(&mut self, n: u64) -> ([u8; LINE], u32) {
        let addr = n * LINE as u64;
        let mut from = n;
        if let Some(i) = self
            .armed
            .iter()
            .position(|f| matches!(f, Fault::MisdirectedRead { line, .. } if *line == addr))
            && let Fault::MisdirectedRead { from: src, .. } = self.armed.remove(i)
            && let Some(src) = self.line_index(src)
        {
            from = src;
        }
        (Engine::line_of(&self.device, from), self.ecc[from as usize])
    }

    /// A write of line `n` at the DIMM, with its ECC.
    fn dimm_write(&mut self, n: u64, bytes: &[u8; LINE]) {
        let addr = n * LINE as u64;
        let mut to = Some(n);
        if let Some(i) = self.armed.iter().position(|f| match f {
            Fault::LostWrite { line } | Fault::MisdirectedWrite { line, .. } => *line == addr,
            _ => false,
        }) {
            to = match self.armed.remove(i) {
                Fault::MisdirectedWrite { to, .. } => self.line_index(to),
                _ => None,
            };
        }
        if let Some(t) = to {
            self.device[Engine::at(t)].copy_from_slice(bytes);
            self.ecc[t as usize] = crc32c_plain(bytes);
        }
    }

    /// Device ECC on `bytes` read with `stored`: the bytes, corrected if one bit was flipped,
    /// or `None` if more is wrong.
    fn ecc_correct(bytes: &[u8; LINE], stored: u32) -> Option<[u8; LINE]> {
        if crc32c_plain(bytes) == stored {
            return Some(*bytes);
        }
        (0..LINE * 8).find_map(|bit| {
            let mut t = *bytes;
            t[bit / 8] ^= 1 << (bit % 8);
            (crc32c_plain(&t) == stored).then_some(t)
        })
    }

    /// Inject a fault at the DIMM: a bit flip happens now, at rest (the ECC stored with the
    /// line is not updated); the others are armed and act on the next write (lost,
    /// misdirected write) or read (misdirected read) of their line.
    pub fn inject(&mut self, f: Fault) {
        match f {
            Fault::BitFlip { line, bit } => {
                if let Some(n) = self.line_index(line) {
                    let b = bit as usize % (LINE * 8);
                    self.device[n as usize * LINE + b / 8] ^= 1 << (b % 8);
                }
            }
            other => self.armed.push(other),
        }
    }

    /// Faults armed and not yet triggered.
    pub fn armed(&self) -> &[Fault] {
        &self.armed
    }

    // ---------- the controller's operations ----------

    /// A writeback of the line at byte address `line_addr` with its new contents: the
    /// redundancy moves by the diff against the controller's image (eager upkeep) or the page
    /// is marked (lazy upkeep), then the line is written to the DIMM.
    pub fn writeback(&mut self, line_addr: u64, new: &[u8; LINE]) -> Result<(), SimError> {
        let n = self.check_line(line_addr)?;
        self.stats.writebacks += 1;
        let page = n / LINES_PER_PAGE as u64;
        let slot = (n % LINES_PER_PAGE as u64) as usize;
        let mut diff = Engine::line_of(&self.image, n);
        xor_into(&mut diff, new);
        self.image[Engine::at(n)].copy_from_slice(new);
        match self.upkeep {
            Upkeep::Eager => {
                if diff.iter().any(|&b| b != 0) {
                    let delta = page_delta(slot, &diff);
                    let stripe = page / self.k;
                    let blocks = self.has_blocks();
                    Engine::move_sum(
                        &mut self.pagesums,
                        blocks.then_some(&mut self.pageblocks[..]),
                        page as usize,
                        delta,
                    );
                    Engine::move_sum(
                        &mut self.paritysums,
                        blocks.then_some(&mut self.parityblocks[..]),
                        stripe as usize,
                        delta,
                    );
                    self.linesums[n as usize] ^= page_delta(LAST_SLOT, &diff);
                    let p = stripe as usize * PAGE + slot * LINE;
                    xor_into(&mut self.parity[p..p + LINE], &diff);
                }
                self.dimm_write(n, new);
            }
            Upkeep::Lazy { period_writes, .. } => {
                self.dirty.insert(page);
                self.dimm_write(n, new);
                self.since_pass += 1;
                if self.since_pass >= period_writes {
                    self.pass();
                }
            }
        }
        Ok(())
    }

    /// Lazy upkeep's pass: recompute the redundancy of every stripe with a page written since
    /// the last pass, from where [`PassReads`] says. Nothing to do under eager upkeep.
    pub fn pass(&mut self) {
        let from = match self.upkeep {
            Upkeep::Lazy { reads, .. } => reads,
            Upkeep::Eager => PassReads::Dimm,
        };
        let stripes: BTreeSet<u64> = self.dirty.iter().map(|p| p / self.k).collect();
        for s in stripes {
            self.recompute_stripe(s, from);
        }
        self.dirty.clear();
        self.since_pass = 0;
        self.stats.passes += 1;
    }

    /// Pages written since the last pass (lazy upkeep), whose redundancy is not current.
    pub fn dirty_pages(&self) -> impl Iterator<Item = u64> + '_ {
        self.dirty.iter().copied()
    }

    /// A fill of the line at `line_addr`: read it from the DIMM and check it as configured
    /// (device ECC, then the line checksum).
    pub fn read_line(&mut self, line_addr: u64) -> Result<[u8; LINE], Detected> {
        let n = self.line_index(line_addr).ok_or(Detected::OutOfRange {
            addr: line_addr,
            bytes: self.bytes(),
        })?;
        self.stats.fills += 1;
        let (mut bytes, stored) = self.dimm_read(n);
        if self.checks.device_ecc {
            match Engine::ecc_correct(&bytes, stored) {
                Some(fixed) => {
                    if fixed != bytes {
                        self.stats.ecc_corrected += 1;
                        bytes = fixed;
                    }
                }
                None => {
                    self.stats.detected += 1;
                    return Err(Detected::DeviceEcc {
                        line: line_addr,
                        stored,
                        computed: crc32c_plain(&bytes),
                    });
                }
            }
        }
        if self.checks.line_sums {
            let computed = self.line_sum_of(n, &bytes);
            let stored = self.linesums[n as usize];
            if computed != stored {
                self.stats.detected += 1;
                return Err(Detected::LineChecksum {
                    line: line_addr,
                    stored,
                    computed,
                });
            }
        }
        Ok(bytes)
    }

    fn page_bytes(&self, page: u64) -> &[u8] {
        &self.device[page as usize * PAGE..(page as usize + 1) * PAGE]
    }

    /// Does data page `page`, as the DIMM holds it, match its page checksum?
    pub fn page_ok(&self, page: u64) -> bool {
        page < self.pages
            && self.sum_of(Tag::DataPage, page, self.page_bytes(page))
                == self.pagesums[page as usize]
    }

    /// Does the line at `line_addr`, as the DIMM holds it, match its line checksum?
    pub fn line_ok(&self, line_addr: u64) -> bool {
        self.line_index(line_addr).is_some_and(|n| {
            self.line_sum_of(n, &self.device[Engine::at(n)]) == self.linesums[n as usize]
        })
    }

    /// Does the line at `line_addr`, as the DIMM holds it, match the ECC stored with it?
    pub fn ecc_ok(&self, line_addr: u64) -> bool {
        self.line_index(line_addr)
            .is_some_and(|n| crc32c_plain(&self.device[Engine::at(n)]) == self.ecc[n as usize])
    }

    /// Patrol-scrub correction by device ECC: if the line at `line_addr` has one flipped bit
    /// at rest, fix it in place. True if the line now matches its ECC.
    pub fn ecc_repair(&mut self, line_addr: u64) -> bool {
        let Some(n) = self.line_index(line_addr) else {
            return false;
        };
        let bytes = Engine::line_of(&self.device, n);
        match Engine::ecc_correct(&bytes, self.ecc[n as usize]) {
            Some(fixed) => {
                if fixed != bytes {
                    self.device[Engine::at(n)].copy_from_slice(&fixed);
                    self.stats.ecc_corrected += 1;
                }
                true
            }
            None => false,
        }
    }

    fn parity_ok(&self, stripe: u64) -> bool {
        let p = &self.parity[stripe as usize * PAGE..(stripe as usize + 1) * PAGE];
        self.sum_of(Tag::ParityPage, stripe, p) == self.paritysums[stripe as usize]
    }

    /// Rebuild the line at `line_addr` from its stripe's parity and the peer pages' lines at
    /// the same offset, after verifying every peer page and the parity page against their
    /// page checksums (read from the DIMMs, not from the controller's image); the result must
    /// match the line checksum. It is written back to the DIMM and returned.
    pub fn recover_line(&mut self, line_addr: u64) -> Result<[u8; LINE], SimError> {
        let n = self.check_line(line_addr)?;
        let page = n / LINES_PER_PAGE as u64;
        let slot = (n % LINES_PER_PAGE as u64) as usize;
        let good = self.rebuild(page)?;
        let mut line = [0u8; LINE];
        line.copy_from_slice(&good[slot * LINE..(slot + 1) * LINE]);
        let want = self.linesums[n as usize];
        let got = self.line_sum_of(n, &line);
        if got != want {
            return Err(invalid(
                "rebuilt line",
                format!("line {line_addr:#x} matching its line checksum {want:#010x}"),
                format!("{got:#010x}"),
            ));
        }
        self.device[Engine::at(n)].copy_from_slice(&line);
        self.ecc[n as usize] = crc32c_plain(&line);
        self.stats.recovered += 1;
        Ok(line)
    }

    /// Rebuild data page `page` whole from parity and its verified peers; it must match its
    /// page checksum. Written back to the DIMM (with fresh ECC).
    pub fn recover_page(&mut self, page: u64) -> Result<(), SimError> {
        if page >= self.pages {
            return Err(invalid(
                "page",
                format!("below {}", self.pages),
                format!("{page}"),
            ));
        }
        let good = self.rebuild(page)?;
        let want = self.pagesums[page as usize];
        let got = self.sum_of(Tag::DataPage, page, &good);
        if got != want {
            return Err(invalid(
                "rebuilt page",
                format!("page {page} matching its checksum {want:#010x}"),
                format!("{got:#010x}"),
            ));
        }
        self.device[page as usize * PAGE..(page as usize + 1) * PAGE].copy_from_slice(&good);
        for slot in 0..LINES_PER_PAGE {
            let n = page * LINES_PER_PAGE as u64 + slot as u64;
            self.ecc[n as usize] = crc32c_plain(&good[slot * LINE..(slot + 1) * LINE]);
        }
        self.stats.recovered += 1;
        Ok(())
    }

    /// A whole DIMM dies (paper layout): every page it holds, data or parity, reads as
    /// garbage (0xdb bytes with ECC that does not match). The Kavach layout has a single
    /// device, and losing it loses everything: an error.
    pub fn fail_dimm(&mut self, dimm: u16) -> Result<(), SimError> {
        let Layout::Paper { dimms } = self.layout else {
            return Err(invalid(
                "failed DIMM",
                "the paper layout (the Kavach layout has one device)".into(),
                "the Kavach layout".into(),
            ));
        };
        if dimm >= dimms {
            return Err(invalid(
                "failed DIMM",
                format!("below {dimms}"),
                format!("{dimm}"),
            ));
        }
        let pages: Vec<u64> = (0..self.pages)
            .filter(|&p| self.dimm_of_page(p) == dimm)
            .collect();
        for p in pages {
            self.device[p as usize * PAGE..(p as usize + 1) * PAGE].fill(0xdb);
            for n in p * LINES_PER_PAGE as u64..(p + 1) * LINES_PER_PAGE as u64 {
                self.ecc[n as usize] = 0;
            }
        }
        let stripes: Vec<u64> = (0..self.stripes)
            .filter(|&s| self.parity_dimm(s) == dimm)
            .collect();
        for s in stripes {
            self.parity[s as usize * PAGE..(s as usize + 1) * PAGE].fill(0xdb);
        }
        Ok(())
    }

    /// Rebuild every page a failed DIMM held onto its replacement: a data page from parity
    /// and its peers ([`Engine::recover_page`]: the parity page and every peer verified
    /// first), a parity page from the stripe's data pages, each verified against its page
    /// checksum first, the result verified against the parity page's checksum. A stripe whose
    /// inputs do not verify is refused and listed, never rebuilt from unverified bytes.
    pub fn rebuild_dimm(&mut self, dimm: u16) -> Result<DimmRebuild, SimError> {
        if !matches!(self.layout, Layout::Paper { dimms } if dimm < dimms) {
            return Err(invalid(
                "DIMM to rebuild",
                "a DIMM of the paper layout".into(),
                format!("{dimm}"),
            ));
        }
        let mut out = DimmRebuild::default();
        for s in 0..self.stripes {
            let pages = s * self.k..((s + 1) * self.k).min(self.pages);
            if self.parity_dimm(s) == dimm {
                let mut par = vec![0u8; PAGE];
                let mut ok = true;
                for p in pages {
                    ok &= self.page_ok(p);
                    xor_into(&mut par, self.page_bytes(p));
                }
                if ok && self.sum_of(Tag::ParityPage, s, &par) == self.paritysums[s as usize] {
                    self.parity[s as usize * PAGE..(s as usize + 1) * PAGE].copy_from_slice(&par);
                    out.parity_pages += 1;
                } else {
                    out.refused_stripes.push(s);
                }
            } else if let Some(p) = pages.clone().find(|&p| self.dimm_of_page(p) == dimm) {
                match self.recover_page(p) {
                    Ok(()) => out.data_pages += 1,
                    Err(_) => out.refused_stripes.push(s),
                }
            }
        }
        Ok(out)
    }

    /// Parity XOR the verified peers of `page`: the page as the redundancy says it should be.
    fn rebuild(&self, page: u64) -> Result<Vec<u8>, SimError> {
        let stripe = page / self.k;
        if self.dirty.iter().any(|p| p / self.k == stripe) {
            return Err(invalid(
                "stripe",
                format!("stripe {stripe} with current parity"),
                "a page written since the last pass (its parity is not current)".into(),
            ));
        }
        if !self.parity_ok(stripe) {
            return Err(invalid(
                "parity page",
                format!("stripe {stripe}'s parity matching its checksum"),
                "a mismatch".into(),
            ));
        }
        let mut out = self.parity[stripe as usize * PAGE..(stripe as usize + 1) * PAGE].to_vec();
        for q in stripe * self.k..((stripe + 1) * self.k).min(self.pages) {
            if q == page {
                continue;
            }
            if !self.page_ok(q) {
                return Err(invalid(
                    "peer page",
                    format!("page {q} (peer of page {page}) matching its page checksum"),
                    "a mismatch: it cannot be used to rebuild".into(),
                ));
            }
            xor_into(&mut out, self.page_bytes(q));
        }
        Ok(out)
    }

    /// Every array of redundancy, in its layout's stored form.
    ///
    /// Kavach layout, each as `integrity`'s integrity region stores it (little-endian u32s):
    /// `pagesums` (padded with zeros to whole 64-byte blocks), `pageblocks`, `paritysums`
    /// (padded likewise), `parityblocks`, `linesums`, `parity` (one page per stripe).
    ///
    /// Paper layout: `dimm{d}.pagesums` for each DIMM (entry `s` is the checksum of the page
    /// of stripe `s` on that DIMM, data or parity), `linesums` (the DAX-CL-checksum buffer)
    /// and `dimm{d}.parity` (the parity pages that DIMM holds, in stripe order).
    pub fn redundancy(&self) -> RedundancyImage {
        let le = |v: &[u32], pad: bool| {
            let mut b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            if pad {
                b.resize(b.len().next_multiple_of(SUM_BLOCK_BYTES), 0);
            }
            b
        };
        let sec = |name: &str, bytes: Vec<u8>| Section {
            name: name.into(),
            bytes,
        };
        match self.layout {
            Layout::Kavach { .. } => RedundancyImage {
                sections: vec![
                    sec("pagesums", le(&self.pagesums, true)),
                    sec("pageblocks", le(&self.pageblocks, false)),
                    sec("paritysums", le(&self.paritysums, true)),
                    sec("parityblocks", le(&self.parityblocks, false)),
                    sec("linesums", le(&self.linesums, false)),
                    sec("parity", self.parity.clone()),
                ],
            },
            Layout::Paper { dimms } => {
                let mut sections = Vec::new();
                for d in 0..dimms {
                    let mut sums = Vec::with_capacity(self.stripes as usize);
                    for s in 0..self.stripes {
                        let v = if self.parity_dimm(s) == d {
                            self.paritysums[s as usize]
                        } else {
                            (s * self.k..((s + 1) * self.k).min(self.pages))
                                .find(|&p| self.dimm_of_page(p) == d)
                                .map_or(0, |p| self.pagesums[p as usize])
                        };
                        sums.push(v);
                    }
                    sections.push(sec(&format!("dimm{d}.pagesums"), le(&sums, true)));
                }
                sections.push(sec("linesums", le(&self.linesums, false)));
                for d in 0..dimms {
                    let mut par = Vec::new();
                    for s in (0..self.stripes).filter(|&s| self.parity_dimm(s) == d) {
                        par.extend_from_slice(
                            &self.parity[s as usize * PAGE..(s as usize + 1) * PAGE],
                        );
                    }
                    sections.push(sec(&format!("dimm{d}.parity"), par));
                }
                RedundancyImage { sections }
            }
        }
    }

    /// The redundancy recomputed from scratch over the controller's image: what
    /// [`Engine::redundancy`] must equal if every incremental update was right.
    pub fn recomputed_redundancy(&self) -> RedundancyImage {
        let mut fresh = self.clone();
        for s in 0..fresh.stripes {
            fresh.recompute_stripe(s, PassReads::Cache);
        }
        fresh.redundancy()
    }

    fn note_error(&mut self, e: impl std::fmt::Display) {
        self.stats.observer_errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e.to_string());
        }
    }
}

impl crate::sim::Observer for Engine {
    fn fill(&mut self, line_addr: u64) {
        // The timing model goes on either way; what the check found is kept for the caller.
        match self.read_line(line_addr) {
            Ok(_) => {}
            Err(Detected::OutOfRange { .. }) => self.note_error(format!(
                "fill of {line_addr:#x}: outside the engine's range"
            )),
            Err(d) => {
                if self.detections.len() < DETECTIONS_KEPT {
                    self.detections.push(d);
                }
            }
        }
    }

    fn writeback(&mut self, line_addr: u64, data: &[u8; 64]) {
        if let Err(e) = Engine::writeback(self, line_addr, data) {
            self.note_error(e);
        }
    }

    fn current(&mut self, line_addr: u64) -> Option<[u8; 64]> {
        self.line_index(line_addr)
            .map(|n| Engine::line_of(&self.image, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmem::rng::SplitMix64;

    fn random(rng: &mut SplitMix64, buf: &mut [u8]) {
        for b in buf.iter_mut() {
            *b = rng.next_u64() as u8;
        }
    }

    #[test]
    fn plain_crc_is_crc32c() {
        assert_eq!(crc32c_plain(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c_plain(b""), 0);
    }

    #[test]
    fn incremental_redundancy_equals_recomputed_in_both_layouts() {
        let mut rng = SplitMix64::new(5);
        let mut init = vec![0u8; 13 * PAGE];
        random(&mut rng, &mut init);
        for mut e in [
            Engine::kavach_layout(Uuid([3; 16]), 13, 4, &init).unwrap(),
            Engine::paper_layout(4, 13, &init).unwrap(),
        ] {
            for _ in 0..300 {
                let line = rng.below(13 * 64) * 64;
                let mut new = [0u8; LINE];
                random(&mut rng, &mut new);
                e.writeback(line, &new).unwrap();
            }
            assert_eq!(e.redundancy(), e.recomputed_redundancy());
            assert_eq!(e.device_data(), e.intended_data());
            for l in 0..13 * 64 {
                assert!(e.read_line(l * 64).is_ok());
            }
        }
    }

    #[test]
    fn paper_parity_rotates_over_the_dimms() {
        let e = Engine::paper_layout(4, 12, &[]).unwrap();
        let pd: Vec<u16> = (0..4).map(|s| e.parity_dimm(s)).collect();
        assert_eq!(pd, [3, 2, 1, 0]);
        for s in 0..4u64 {
            let mut dimms: Vec<u16> = (s * 3..s * 3 + 3).map(|p| e.dimm_of_page(p)).collect();
            dimms.push(e.parity_dimm(s));
            dimms.sort_unstable();
            assert_eq!(dimms, [0, 1, 2, 3], "stripe {s} uses every DIMM once");
        }
    }

    #[test]
    fn ecc_corrects_one_bit_and_detects_more() {
        let mut e = Engine::paper_layout(3, 2, &[7u8; 2 * PAGE])
            .unwrap()
            .with_checks(Checks {
                device_ecc: true,
                line_sums: false,
            });
        e.inject(Fault::BitFlip { line: 64, bit: 9 });
        assert_eq!(e.read_line(64).unwrap(), [7u8; LINE]);
        e.inject(Fault::BitFlip { line: 128, bit: 1 });
        e.inject(Fault::BitFlip {
            line: 128,
            bit: 300,
        });
        assert!(matches!(e.read_line(128), Err(Detected::DeviceEcc { .. })));
    }

    #[test]
    fn bad_arguments_are_errors() {
        assert!(Engine::kavach_layout(Uuid([0; 16]), 0, 4, &[]).is_err());
        assert!(Engine::kavach_layout(Uuid([0; 16]), 4, 1, &[]).is_err());
        assert!(Engine::paper_layout(2, 4, &[]).is_err());
        assert!(Engine::paper_layout(4, 1, &[0; PAGE + 1]).is_err());
        let mut e = Engine::paper_layout(4, 3, &[]).unwrap();
        assert!(e.writeback(3 * PAGE as u64, &[0; 64]).is_err());
        assert!(e.writeback(65, &[0; 64]).is_err());
        assert!(e.recover_line(1).is_err());
        assert!(matches!(
            e.read_line(3 * PAGE as u64),
            Err(Detected::OutOfRange { .. })
        ));
    }
}
