//! Shadow slots: where checkpoints leave their images.
//!
//! A slot holds one image of every shard's arena as of one checkpoint. Pages are placed through
//! a page table, so a checkpoint rewrites only the pages that changed since that slot was last
//! written, and a shard's arena can grow without moving the others. Each page carries a CRC-32C
//! bound to the pool, the slot, the shard and the page number, so a page that lands in the
//! wrong place, or rots, is caught when the image is loaded.

use crate::arena::{Arena, PAGE};
use crate::error::{DipperError, Result};
use crate::layout::*;
use pmem::codec::{FixedWriter, Reader};
use pmem::{Medium, Uuid};

/// Where a slot lives and how big it is.
#[derive(Debug, Clone, Copy)]
pub struct SlotGeometry {
    /// Slot index (0 or 1).
    pub index: u32,
    /// Medium offset of the region.
    pub base: u64,
    /// Page capacity.
    pub capacity: u64,
    /// Medium offset of the first page (relative to `base`).
    pub first_page: u64,
}

impl SlotGeometry {
    /// The geometry of slot `index` in a region at `base` of `len` bytes.
    pub fn new(index: u32, base: u64, len: u64) -> Result<SlotGeometry> {
        let (capacity, first_page) = slot_geometry(len).ok_or_else(|| DipperError::Invalid {
            what: "slot region",
            reason: format!("{len} bytes cannot hold a slot header, a table and one page"),
        })?;
        Ok(SlotGeometry {
            index,
            base,
            capacity,
            first_page,
        })
    }

    /// Bytes of arena image the slot can hold.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity * PAGE as u64
    }
}

/// Where each arena page sits in a slot (known after loading or writing it).
#[derive(Debug, Clone, Default)]
pub struct SlotMap {
    /// `map[shard][page]` = slot page + 1, or 0 when the page is not in the slot.
    map: Vec<Vec<u32>>,
    /// Slot pages in use.
    used: u64,
}

impl SlotMap {
    /// An empty map for `shards` shards.
    pub fn empty(shards: usize) -> SlotMap {
        SlotMap {
            map: vec![Vec::new(); shards],
            used: 0,
        }
    }

    /// Slot pages in use.
    pub fn used(&self) -> u64 {
        self.used
    }
}

pub(crate) fn page_seed(uuid: &Uuid, slot: u32, shard: u32, page: u32) -> u32 {
    let mut s = crc32c::crc32c(&uuid.0);
    for v in [slot, shard, page] {
        s = crc32c::crc32c_append(s, &v.to_le_bytes());
    }
    s
}

fn header_crc(uuid: &Uuid, slot: u32, fixed: &[u8], lengths: &[u8]) -> u32 {
    let s = crc32c::crc32c_append(crc32c::crc32c(&uuid.0), &slot.to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c_append(s, fixed), lengths)
}

/// What writing a slot did.
#[derive(Debug, Clone, Copy, Default)]
pub struct SlotWrite {
    /// Pages written (in whole or in part).
    pub pages: u64,
    /// Bytes of pages written (whole pages, or the changed lines of pages the slot holds).
    pub bytes: u64,
    /// Slot pages in use afterwards.
    pub used: u64,
}

/// Check the header of a slot (format `magic`) at `base` holding checkpoint `checkpoint` of
/// `shards` shards with `capacity` entries; return its entries in use and a zeroed image of
/// each arena at its recorded length.
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_header<M: Medium>(
    medium: &M,
    uuid: &Uuid,
    index: u32,
    base: u64,
    magic: u64,
    capacity: u64,
    checkpoint: u64,
    shards: usize,
) -> Result<(u64, Vec<Vec<u8>>)> {
    let mut head = vec![0u8; SLOT_LENGTHS_AT + 8 * shards];
    medium.read(base as usize, &mut head);
    let hd = Reader::new("slot header", &head).at(base);
    let checks: [(&'static str, usize, u64, u64); 5] = [
        (
            "magic",
            SLOT_MAGIC_AT,
            magic,
            hd.u64_at("magic", SLOT_MAGIC_AT)?,
        ),
        (
            "checkpoint",
            SLOT_CHECKPOINT_AT,
            checkpoint,
            hd.u64_at("checkpoint", SLOT_CHECKPOINT_AT)?,
        ),
        (
            "index",
            SLOT_INDEX_AT,
            index as u64,
            hd.u32_at("index", SLOT_INDEX_AT)? as u64,
        ),
        (
            "shards",
            SLOT_SHARDS_AT,
            shards as u64,
            hd.u32_at("shards", SLOT_SHARDS_AT)? as u64,
        ),
        (
            "capacity",
            SLOT_CAPACITY_AT,
            capacity,
            hd.u64_at("capacity", SLOT_CAPACITY_AT)?,
        ),
    ];
    for (field, at, want, got) in checks {
        if want != got {
            return Err(hd.invalid(field, at, want, got).into());
        }
    }
    let want = header_crc(
        uuid,
        index,
        hd.slice_at("crc-covered bytes", 0, SLOT_CRC_AT)?,
        hd.slice_at("arena length", SLOT_LENGTHS_AT, 8 * shards)?,
    );
    let got = hd.u32_at("crc", SLOT_CRC_AT)?;
    if want != got {
        return Err(hd
            .invalid(
                "crc",
                SLOT_CRC_AT,
                format!("{want:#010x}"),
                format!("{got:#010x}"),
            )
            .into());
    }
    let used = hd.u64_at("used", SLOT_USED_AT)?;
    if used > capacity {
        return Err(hd
            .invalid("used", SLOT_USED_AT, format!("at most {capacity}"), used)
            .into());
    }
    let mut images = Vec::with_capacity(shards);
    let mut total_pages = 0u64;
    for s in 0..shards {
        let at = SLOT_LENGTHS_AT + 8 * s;
        let len = hd.u64_at("arena length", at)?;
        let pages = len / PAGE as u64;
        if len == 0 || len % PAGE as u64 != 0 || len > crate::arena::ARENA_BYTES_MAX as u64 {
            return Err(hd
                .invalid(
                    "arena length",
                    at,
                    format!("a non-zero multiple of {PAGE}"),
                    format!("{len} (shard {s})"),
                )
                .into());
        }
        total_pages += pages;
        let most = capacity.saturating_mul(SLOT_ARENA_RATIO_MAX);
        if total_pages > most {
            return Err(hd
                .invalid(
                    "arena length",
                    at,
                    format!("arenas totalling at most {most} pages"),
                    format!("{total_pages} pages by shard {s}"),
                )
                .into());
        }
        images.push(vec![0u8; len as usize]);
    }
    Ok((used, images))
}

/// Write and flush (no fence) the header of a slot (format `magic`) at `base`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_header<M: Medium>(
    medium: &M,
    uuid: &Uuid,
    index: u32,
    base: u64,
    magic: u64,
    capacity: u64,
    checkpoint: u64,
    arenas: &[Arena],
    used: u64,
) -> Result<()> {
    let mut head = vec![0u8; SLOT_LENGTHS_AT + 8 * arenas.len()];
    let mut w = FixedWriter::new(&mut head);
    w.u64_at(SLOT_MAGIC_AT, magic)
        .u64_at(SLOT_CHECKPOINT_AT, checkpoint)
        .u32_at(SLOT_INDEX_AT, index)
        .u32_at(SLOT_SHARDS_AT, arenas.len() as u32)
        .u64_at(SLOT_USED_AT, used)
        .u64_at(SLOT_CAPACITY_AT, capacity);
    for (s, a) in arenas.iter().enumerate() {
        w.u64_at(SLOT_LENGTHS_AT + 8 * s, a.len() as u64);
    }
    let crc = header_crc(uuid, index, &head[..SLOT_CRC_AT], &head[SLOT_LENGTHS_AT..]);
    FixedWriter::new(&mut head).u32_at(SLOT_CRC_AT, crc);
    medium.write(base as usize, &head);
    medium.flush(base as usize, head.len())?;
    Ok(())
}

/// Load the image of checkpoint `checkpoint` from a slot: one arena per shard, and the map.
pub fn load<M: Medium>(
    medium: &M,
    uuid: &Uuid,
    geo: &SlotGeometry,
    checkpoint: u64,
    shards: usize,
) -> Result<(Vec<Arena>, SlotMap)> {
    let base = geo.base as usize;
    let (used, mut images) = read_header(
        medium,
        uuid,
        geo.index,
        geo.base,
        SLOT_MAGIC,
        geo.capacity,
        checkpoint,
        shards,
    )?;
    let mut map = SlotMap::empty(shards);
    for (s, img) in images.iter().enumerate() {
        map.map[s] = vec![0; img.len() / PAGE];
    }
    let mut table = vec![0u8; used as usize * SLOT_ENTRY_BYTES];
    medium.read(base + SLOT_TABLE_AT, &mut table);
    for i in 0..used as usize {
        let at = geo.base + (SLOT_TABLE_AT + i * SLOT_ENTRY_BYTES) as u64;
        let entry = Reader::new("slot page entry", &table)
            .at(geo.base + SLOT_TABLE_AT as u64)
            .slice_at("entry", i * SLOT_ENTRY_BYTES, SLOT_ENTRY_BYTES)?;
        let e = Reader::new("slot page entry", entry).at(at);
        let shard = e.u32_at("shard", ENTRY_SHARD_AT)?;
        let page = e.u32_at("page", ENTRY_PAGE_AT)?;
        let crc = e.u32_at("crc", ENTRY_CRC_AT)?;
        let reserved = e.u32_at("reserved", ENTRY_RESERVED_AT)?;
        if reserved != 0 {
            return Err(e
                .invalid("reserved", ENTRY_RESERVED_AT, "0", reserved)
                .into());
        }
        if shard as usize >= shards {
            return Err(e
                .invalid("shard", ENTRY_SHARD_AT, format!("below {shards}"), shard)
                .into());
        }
        let slots = &mut map.map[shard as usize];
        if page as usize >= slots.len() {
            return Err(e
                .invalid(
                    "page",
                    ENTRY_PAGE_AT,
                    format!("below {} (shard {shard})", slots.len()),
                    page,
                )
                .into());
        }
        if slots[page as usize] != 0 {
            return Err(e
                .invalid(
                    "page",
                    ENTRY_PAGE_AT,
                    "each page once",
                    format!("shard {shard} page {page} again"),
                )
                .into());
        }
        slots[page as usize] = i as u32 + 1;
        let dst = &mut images[shard as usize][page as usize * PAGE..(page as usize + 1) * PAGE];
        let pat = geo.first_page + (i * PAGE) as u64;
        medium.read(base + pat as usize, dst);
        let want = crc32c::crc32c_append(page_seed(uuid, geo.index, shard, page), dst);
        if want != crc {
            return Err(DipperError::Corrupt {
                structure: "slot page",
                offset: geo.base + pat,
                field: "crc",
                expected: format!("{crc:#010x} (shard {shard} page {page})"),
                found: format!("{want:#010x}"),
            });
        }
    }
    map.used = used;
    let arenas = images
        .into_iter()
        .map(Arena::from_image)
        .collect::<Result<Vec<_>>>()?;
    Ok((arenas, map))
}

/// Write checkpoint `checkpoint`'s image into a slot: the listed pages of each arena (`None`:
/// every page, and the map starts over), the table entries for them, then the header; flushed,
/// one fence at the end. The slot must not be the one the root points to.
pub fn write<M: Medium>(
    medium: &M,
    uuid: &Uuid,
    geo: &SlotGeometry,
    checkpoint: u64,
    arenas: &[Arena],
    pages: Option<&[Vec<usize>]>,
    map: &mut SlotMap,
) -> Result<SlotWrite> {
    let whole: Option<Vec<Vec<(usize, u64)>>> = pages.map(|p| {
        p.iter()
            .map(|l| l.iter().map(|&q| (q, u64::MAX)).collect())
            .collect()
    });
    write_lines(medium, uuid, geo, checkpoint, arenas, whole.as_deref(), map)
}

/// [`write`] with, for each listed page, the mask of its [`crate::arena::DIRTY_LINE`]-byte
/// lines that differ from the slot's copy of it (the lines changed since this slot was last
/// written). A page the slot holds gets only those lines (its CRC is of the whole page); a page
/// it does not hold yet is written whole. The image's meaning on the medium is the same as with
/// [`write`]: every page the table names holds the arena's page.
pub fn write_lines<M: Medium>(
    medium: &M,
    uuid: &Uuid,
    geo: &SlotGeometry,
    checkpoint: u64,
    arenas: &[Arena],
    pages: Option<&[Vec<(usize, u64)>]>,
    map: &mut SlotMap,
) -> Result<SlotWrite> {
    write_paced(
        medium,
        uuid,
        geo,
        checkpoint,
        arenas,
        pages,
        map,
        &mut |_| {},
    )
}

/// [`write_lines`], calling `pace` with the bytes of each page written (for a checkpoint that
/// spreads its writes over time).
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_paced<M: Medium>(
    medium: &M,
    uuid: &Uuid,
    geo: &SlotGeometry,
    checkpoint: u64,
    arenas: &[Arena],
    pages: Option<&[Vec<(usize, u64)>]>,
    map: &mut SlotMap,
    pace: &mut dyn FnMut(u64),
) -> Result<SlotWrite> {
    let base = geo.base as usize;
    // An arena that shrank ([`Arena::reset`]) leaves entries for pages it no longer has: the
    // loader would refuse them, and their slot pages would never be given back. The image is
    // then written whole, the map started over.
    let shrank = map.map.iter().zip(arenas).any(|(m, a)| m.len() > a.pages());
    let pages = if shrank { None } else { pages };
    if pages.is_none() {
        *map = SlotMap::empty(arenas.len());
    }
    let mut lines: Vec<usize> = Vec::new();
    let mut written = 0u64;
    let mut bytes_written = 0u64;
    for (s, arena) in arenas.iter().enumerate() {
        let slots = &mut map.map[s];
        if slots.len() < arena.pages() {
            slots.resize(arena.pages(), 0);
        }
        let all: Vec<(usize, u64)>;
        let list: &[(usize, u64)] = match pages {
            Some(p) => &p[s],
            None => {
                // The pages above the top are zero and need no slot page.
                all = (0..arena.used_pages()).map(|q| (q, u64::MAX)).collect();
                &all
            }
        };
        for &(page, mask) in list {
            if page >= arena.pages() || mask == 0 {
                continue;
            }
            let (sp, mask) = match slots[page] {
                0 => {
                    if map.used >= geo.capacity {
                        return Err(DipperError::OutOfSpace(format!(
                            "shadow slot {} is full ({} pages); the store has outgrown its pool",
                            geo.index, geo.capacity
                        )));
                    }
                    map.used += 1;
                    slots[page] = map.used as u32;
                    (map.used - 1, u64::MAX)
                }
                n => (n as u64 - 1, mask),
            };
            let bytes = arena.page(page);
            let at = base + (geo.first_page + sp * PAGE as u64) as usize;
            let n = write_masked(medium, at, bytes, mask);
            bytes_written += n;
            pace(n);
            let crc =
                crc32c::crc32c_append(page_seed(uuid, geo.index, s as u32, page as u32), bytes);
            let mut e = [0u8; SLOT_ENTRY_BYTES];
            FixedWriter::new(&mut e)
                .u32_at(ENTRY_SHARD_AT, s as u32)
                .u32_at(ENTRY_PAGE_AT, page as u32)
                .u32_at(ENTRY_CRC_AT, crc);
            let eat = base + SLOT_TABLE_AT + sp as usize * SLOT_ENTRY_BYTES;
            medium.write(eat, &e);
            lines.push(eat / 64);
            written += 1;
        }
    }
    lines.sort_unstable();
    lines.dedup();
    let mut i = 0;
    while i < lines.len() {
        let mut j = i + 1;
        while j < lines.len() && lines[j] == lines[j - 1] + 1 {
            j += 1;
        }
        medium.flush(lines[i] * 64, (j - i) * 64)?;
        i = j;
    }
    write_header(
        medium,
        uuid,
        geo.index,
        geo.base,
        SLOT_MAGIC,
        geo.capacity,
        checkpoint,
        arenas,
        map.used,
    )?;
    medium.fence()?;
    Ok(SlotWrite {
        pages: written,
        bytes: bytes_written,
        used: map.used,
    })
}

/// Write the lines of `page` (a whole page's bytes) that `mask` names to `at` on the medium,
/// non-temporal, one write per run of consecutive lines; flushed by the non-temporal stores,
/// fenced by the caller. Returns the bytes written.
pub(crate) fn write_masked<M: Medium>(medium: &M, at: usize, page: &[u8], mask: u64) -> u64 {
    if mask == u64::MAX {
        medium.write_nontemporal(at, page);
        return page.len() as u64;
    }
    let line = crate::arena::DIRTY_LINE;
    let mut m = mask;
    let mut n = 0;
    while m != 0 {
        let lo = m.trailing_zeros() as usize;
        let run = (m >> lo).trailing_ones() as usize;
        let (from, len) = (lo * line, run * line);
        medium.write_nontemporal(at + from, &page[from..from + len]);
        n += len as u64;
        m = if lo + run >= 64 {
            0
        } else {
            m & (u64::MAX << (lo + run))
        };
    }
    n
}
