//! Where the redundancy of one protected region lives, defined once.
//!
//! A protected data region has a companion *integrity region* (kind
//! [`pmem::kinds::INTEGRITY`]) holding, in page-aligned sections:
//!
//! ```text
//! page 0      header, two copies (at 0 and 2048), the newer valid one in force
//! page 1      reserved (earlier versions kept a shadow batch record here; ignored)
//! pagesums    one CRC-32C per data page
//! pageblocks  one CRC-32C per 64-byte block (16 entries) of `pagesums`
//! paritysums  one CRC-32C per parity page
//! parityblocks one CRC-32C per 64-byte block of `paritysums`
//! linesums    one CRC-32C per 64-byte line of data (eager mode's read check)
//! parity      one XOR parity page per stripe of K data pages
//! ```
//!
//! `docs/format/integrity.md` carries the same tables; `tests/format_doc.rs` checks the two
//! agree. The header records every section's offset, and a `parity_device` field that is 0 (this
//! region) today, so parity can move to another backing file without a new header layout.

use pmem::layout::{Field, PAGE_SIZE};

/// `KVINTEG1`, little-endian.
pub const META_MAGIC: u64 = u64::from_le_bytes(*b"KVINTEG1");
/// Format version this code writes and reads.
pub const META_VERSION: u32 = 1;
/// Offsets of the two header copies in the integrity region.
pub const HEADER_COPY_OFFSETS: [usize; 2] = [0, 2048];
/// Size of one header copy.
pub const HEADER_BYTES: usize = 256;
/// Offset of the retired bytes: page 1 is reserved, and its first [`RETIRED_BYTES`] are where
/// earlier writers of version 1 kept a shadow batch record. Nothing reads them; a read-write
/// open zeroes them if they are not zero (`docs/format/integrity.md`, "Reserved page").
pub const RETIRED_AT: usize = PAGE_SIZE;
/// Size of the retired shadow batch record.
pub const RETIRED_BYTES: usize = 128;
/// Offset of the first section (after the header page and the reserved page).
pub const SECTIONS_AT: usize = 2 * PAGE_SIZE;

/// Checksum entries per checksum block (one 64-byte cache line of u32s).
pub const SUMS_PER_BLOCK: u64 = 16;
/// Bytes of a checksum block.
pub const SUM_BLOCK_BYTES: usize = 64;
/// Bytes of one data line (eager mode checks reads per line).
pub const LINE_BYTES: usize = 64;
/// Lines per page.
pub const LINES_PER_PAGE: usize = PAGE_SIZE / LINE_BYTES;
/// Smallest and largest stripe width (data pages per parity page).
pub const STRIPE_PAGES_MIN: u32 = 2;
/// See [`STRIPE_PAGES_MIN`].
pub const STRIPE_PAGES_MAX: u32 = 32;
/// Default stripe width.
pub const STRIPE_PAGES_DEFAULT: u32 = 4;
/// Default, smallest and largest update period of `lazy` mode, in milliseconds.
pub const PERIOD_MS_DEFAULT: u32 = 1000;
/// See [`PERIOD_MS_DEFAULT`].
pub const PERIOD_MS_MIN: u32 = 100;
/// See [`PERIOD_MS_DEFAULT`].
pub const PERIOD_MS_MAX: u32 = 60_000;

/// Mode values of the header's `mode` field.
pub mod mode {
    /// No redundancy is kept.
    pub const OFF: u32 = 0;
    /// Vilamb: a background pass updates the redundancy of written pages every period.
    pub const LAZY: u32 = 1;
    /// TVARAK in software: every write through the API updates redundancy from its diff.
    pub const EAGER: u32 = 2;
    /// Baseline: every write recomputes its pages' checksums and stripes' parity whole.
    pub const TXB_PAGE: u32 = 3;
}

/// Values of the header's `state` field.
pub mod state {
    /// Closed cleanly: every checksum and parity page is current.
    pub const CLEAN: u32 = 1;
    /// Open in a mode that keeps redundancy: after a crash it is stale somewhere.
    pub const OPEN: u32 = 2;
    /// Redundancy is not kept (mode `off` was used) or a rebuild did not finish.
    pub const STALE: u32 = 3;
}

/// Bits of the header's `flags` field.
pub mod flags {
    /// The line checksums are current (kept only in `eager` mode).
    pub const LINES_VALID: u32 = 1;
    /// The region is unverified: set by earlier writers of version 1 when a read-write open
    /// found the header clean but their shadow batch record damaged (or holding a batch). This
    /// version never sets it; it honours it (redundancy that looks right proves nothing) until
    /// a repair proves every stripe, or a resync.
    pub const UNVERIFIED: u32 = 2;
    /// Every flag this version knows.
    pub const KNOWN: u32 = LINES_VALID | UNVERIFIED;
}

/// Header field offsets.
pub mod header {
    #![allow(missing_docs)]
    pub const MAGIC_AT: usize = 0;
    pub const VERSION_AT: usize = 8;
    pub const MODE_AT: usize = 12;
    pub const SEQ_AT: usize = 16;
    pub const UUID_AT: usize = 24;
    pub const DATA_OFFSET_AT: usize = 40;
    pub const DATA_PAGES_AT: usize = 48;
    pub const STRIPE_PAGES_AT: usize = 56;
    pub const PERIOD_MS_AT: usize = 60;
    pub const STATE_AT: usize = 64;
    pub const FLAGS_AT: usize = 68;
    pub const PAGESUMS_AT: usize = 72;
    pub const PAGEBLOCKS_AT: usize = 80;
    pub const PARITYSUMS_AT: usize = 88;
    pub const PARITYBLOCKS_AT: usize = 96;
    pub const LINESUMS_AT: usize = 104;
    pub const PARITY_AT: usize = 112;
    pub const META_BYTES_AT: usize = 120;
    pub const PARITY_DEVICE_AT: usize = 128;
    pub const RESERVED_AT: usize = 132;
    pub const CRC_AT: usize = 252;
}

/// Fields of a header copy, as the format document lists them.
pub const HEADER_FIELDS: &[Field] = &[
    Field::new("magic", header::MAGIC_AT, 8),
    Field::new("version", header::VERSION_AT, 4),
    Field::new("mode", header::MODE_AT, 4),
    Field::new("seq", header::SEQ_AT, 8),
    Field::new("uuid", header::UUID_AT, 16),
    Field::new("data_offset", header::DATA_OFFSET_AT, 8),
    Field::new("data_pages", header::DATA_PAGES_AT, 8),
    Field::new("stripe_pages", header::STRIPE_PAGES_AT, 4),
    Field::new("period_ms", header::PERIOD_MS_AT, 4),
    Field::new("state", header::STATE_AT, 4),
    Field::new("flags", header::FLAGS_AT, 4),
    Field::new("pagesums_at", header::PAGESUMS_AT, 8),
    Field::new("pageblocks_at", header::PAGEBLOCKS_AT, 8),
    Field::new("paritysums_at", header::PARITYSUMS_AT, 8),
    Field::new("parityblocks_at", header::PARITYBLOCKS_AT, 8),
    Field::new("linesums_at", header::LINESUMS_AT, 8),
    Field::new("parity_at", header::PARITY_AT, 8),
    Field::new("meta_bytes", header::META_BYTES_AT, 8),
    Field::new("parity_device", header::PARITY_DEVICE_AT, 4),
    Field::new("reserved", header::RESERVED_AT, 120),
    Field::new("crc32c", header::CRC_AT, 4),
];

fn round_page(bytes: u64) -> Option<u64> {
    bytes.checked_next_multiple_of(PAGE_SIZE as u64)
}

/// Where each section of an integrity region starts, for `data_pages` pages in stripes of
/// `stripe_pages`. All offsets are from the start of the integrity region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Geometry {
    /// Data pages protected.
    pub data_pages: u64,
    /// Data pages per stripe (K).
    pub stripe_pages: u32,
    /// Stripes (= parity pages); the last may be short.
    pub stripes: u64,
    /// Offset of the page checksum array.
    pub pagesums_at: u64,
    /// Offset of the page checksum block array.
    pub pageblocks_at: u64,
    /// Offset of the parity checksum array.
    pub paritysums_at: u64,
    /// Offset of the parity checksum block array.
    pub parityblocks_at: u64,
    /// Offset of the line checksum array.
    pub linesums_at: u64,
    /// Offset of the parity pages.
    pub parity_at: u64,
    /// Bytes the integrity region needs.
    pub meta_bytes: u64,
}

impl Geometry {
    /// The layout for `data_pages` pages in stripes of `stripe_pages`, or `None` if the
    /// arguments are out of range (no pages, a stripe width outside 2..=32, an overflow).
    pub fn new(data_pages: u64, stripe_pages: u32) -> Option<Geometry> {
        if data_pages == 0 || !(STRIPE_PAGES_MIN..=STRIPE_PAGES_MAX).contains(&stripe_pages) {
            return None;
        }
        let stripes = data_pages.div_ceil(stripe_pages as u64);
        let sums = |n: u64| n.checked_mul(4).and_then(round_page);
        let blocks = |n: u64| sums(n.div_ceil(SUMS_PER_BLOCK));
        let pagesums_at = SECTIONS_AT as u64;
        let pageblocks_at = pagesums_at.checked_add(sums(data_pages)?)?;
        let paritysums_at = pageblocks_at.checked_add(blocks(data_pages)?)?;
        let parityblocks_at = paritysums_at.checked_add(sums(stripes)?)?;
        let linesums_at = parityblocks_at.checked_add(blocks(stripes)?)?;
        let parity_at =
            linesums_at.checked_add(data_pages.checked_mul((LINES_PER_PAGE * 4) as u64)?)?;
        let parity_at = round_page(parity_at)?;
        let meta_bytes = parity_at.checked_add(stripes.checked_mul(PAGE_SIZE as u64)?)?;
        Some(Geometry {
            data_pages,
            stripe_pages,
            stripes,
            pagesums_at,
            pageblocks_at,
            paritysums_at,
            parityblocks_at,
            linesums_at,
            parity_at,
            meta_bytes,
        })
    }

    /// The most data pages whose data and integrity regions fit together in `bytes`, with stripes
    /// of `stripe_pages` (used to split a new pool). `None` if not even one stripe fits.
    pub fn largest_fitting(bytes: u64, stripe_pages: u32) -> Option<Geometry> {
        let fits = |pages: u64| {
            Geometry::new(pages, stripe_pages)
                .filter(|g| {
                    pages
                        .checked_mul(PAGE_SIZE as u64)
                        .and_then(|d| d.checked_add(g.meta_bytes))
                        .is_some_and(|t| t <= bytes)
                })
                .is_some()
        };
        let (mut lo, mut hi) = (0u64, bytes / PAGE_SIZE as u64);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(mid) { lo = mid } else { hi = mid - 1 }
        }
        // Whole stripes only: a short last stripe is allowed but wasteful for a new pool.
        let pages = lo / stripe_pages as u64 * stripe_pages as u64;
        if pages == 0 {
            return None;
        }
        Geometry::new(pages, stripe_pages)
    }

    /// The stripe holding data page `page`.
    pub fn stripe_of(&self, page: u64) -> u64 {
        page / self.stripe_pages as u64
    }

    /// The data pages of stripe `stripe`: `[first, end)`.
    pub fn stripe_pages_range(&self, stripe: u64) -> std::ops::Range<u64> {
        let k = self.stripe_pages as u64;
        stripe * k..((stripe + 1) * k).min(self.data_pages)
    }

    /// Pages per lock group: 16 stripes, so one group holds whole page-checksum blocks, whole
    /// stripes and one whole parity-checksum block.
    pub fn group_pages(&self) -> u64 {
        SUMS_PER_BLOCK * self.stripe_pages as u64
    }

    /// Number of lock groups.
    pub fn groups(&self) -> u64 {
        self.data_pages.div_ceil(self.group_pages())
    }

    /// Pages per update batch: the most whole groups that fit in
    /// [`crate::tracker::BATCH_PAGES`].
    pub fn batch_pages(&self) -> u64 {
        let g = self.group_pages();
        (crate::tracker::BATCH_PAGES as u64 / g).max(1) * g
    }
}

/// Which checksum array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sums {
    /// One per data page.
    Pages,
    /// One per parity page.
    Parity,
}
