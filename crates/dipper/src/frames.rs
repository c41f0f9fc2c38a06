//! Page frames shared by the two checkpoint images (slot format 2, growable pools).
//!
//! In a growable pool opened for writing, a checkpoint image is not a full copy: its pages live
//! in *frames*, 4 KiB places in the frame regions `dipper.frames.0`, `dipper.frames.1`, ...
//! (numbered across the regions in that order; regions are only ever added), and a slot holds
//! only the slot header and a table whose entries name (shard, page, CRC, frame). A checkpoint
//! writes the pages that changed since the image in force into *free* frames (frames no entry of
//! the image in force names), copies the entries of the unchanged pages, writes the whole table
//! into the slot the root does not point at, and only then does the root switch. The frames that
//! only the old image named are free from then on. The image in force is never written, so a
//! crash at any point leaves it whole; which frames are free follows from it at open.
//!
//! The pool file is then about one image plus the pages changed between two checkpoints, instead
//! of two full images.

use crate::arena::{Arena, PAGE};
use crate::error::{DipperError, Result};
use crate::layout::*;
use crate::slot::{page_seed, read_header, write_header};
use pmem::codec::{FixedWriter, Reader};
use pmem::{Medium, Uuid};

/// The region holding frame region number `k`.
pub fn frame_region_name(k: usize) -> String {
    format!("{FRAME_REGION_PREFIX}{k}")
}

/// Where a format-2 slot (header and table) lives and how many entries it holds.
#[derive(Debug, Clone, Copy)]
pub struct TableGeometry {
    /// Slot index (0 or 1).
    pub index: u32,
    /// Medium offset of the region.
    pub base: u64,
    /// Entries the table holds.
    pub capacity: u64,
}

impl TableGeometry {
    /// The table of slot `index` in a region at `base` of `len` bytes.
    pub fn new(index: u32, base: u64, len: u64) -> Result<TableGeometry> {
        let capacity = len.saturating_sub(SLOT_TABLE_AT as u64) / SLOT_ENTRY_BYTES as u64;
        if capacity == 0 {
            return Err(DipperError::Invalid {
                what: "slot region",
                reason: format!("{len} bytes cannot hold a slot header and a table"),
            });
        }
        Ok(TableGeometry {
            index,
            base,
            capacity,
        })
    }
}

/// Region bytes of a slot whose table holds `pages` entries and an eighth more (and one spare
/// page, so the region is also a valid format-1 slot of one page).
pub fn table_bytes_for(pages: u64) -> u64 {
    let want = pages.saturating_add(pages / 8).saturating_add(16);
    (SLOT_TABLE_AT as u64)
        .saturating_add(
            want.saturating_mul(SLOT_ENTRY_BYTES as u64)
                .next_multiple_of(PAGE as u64),
        )
        .saturating_add(PAGE as u64)
}

/// Frames a new frame region gets when `short` more are needed and `total` exist: what is
/// needed, and at least a quarter of the total and 256 (1 MiB), so regions are few (the pool's
/// directory holds 63) and the file grows by a quarter at most past what the images need.
pub fn frames_to_add(short: u64, total: u64) -> u64 {
    short.max(total / 4).max(FRAME_REGION_FRAMES_MIN)
}

/// Frames the last frame region grows by in place when `short` more are needed and `total`
/// exist: what is needed, and at least a sixteenth of the total (no directory entry is spent).
pub fn frames_to_extend(short: u64, total: u64) -> u64 {
    short.max(total / 16)
}

/// What a format-2 write produced, to install once the root points at it.
#[derive(Debug)]
pub struct Pending {
    in_force: Vec<u64>,
    map: Vec<Vec<(u32, u32)>>,
    /// Per shard, per page: its spare (see [`Frames`]) once this image is in force.
    spare: Vec<Vec<(u32, u64)>>,
    /// Frames written whole, and the page (packed by `owner_key`) each holds now.
    owners: Vec<(u32, u64)>,
}

/// What a format-2 write wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FramesWrite {
    /// Pages written (whole or their changed lines).
    pub pages: u64,
    /// Bytes of pages written.
    pub bytes: u64,
}

fn owner_key(s: usize, p: usize) -> u64 {
    ((s as u64) << 32 | p as u64) + 1
}

/// The frames and which of them the image in force names.
#[derive(Debug, Default, Clone)]
pub struct Frames {
    /// (medium offset, frames) of each frame region, in order.
    extents: Vec<(u64, u64)>,
    total: u64,
    /// Frames the image in force names (bitset).
    in_force: Vec<u64>,
    /// Per shard, per page of the image in force: (frame + 1, CRC), (0, 0) when the page is not
    /// in it (zero). `None`: the image in force is not in frames (a format-1 slot, or none), so
    /// the next write writes every page.
    map: Option<Vec<Vec<(u32, u32)>>>,
    /// Per shard, per page: a free frame that holds an older copy of the page, (frame + 1,
    /// mask of the [`crate::arena::DIRTY_LINE`]-byte lines where that copy differs from the
    /// page of the image in force), or (0, 0). A checkpoint that changes the page writes
    /// only the lines of that mask and of the page's new changes into its spare, instead of a
    /// whole page into another frame. Kept in DRAM only: none after open.
    spare: Vec<Vec<(u32, u64)>>,
    /// Per frame: the page (`owner_key`) whose copy it holds, 0 if unknown. A spare is used
    /// only if its frame still holds that page's copy (no other page was written into it).
    owner: Vec<u64>,
    /// Spare frames (bitset): other pages take them only when no other frame is free.
    reserved: Vec<u64>,
    /// The next write writes every changed page whole and ignores the spares (after a write
    /// that failed half way, or an arena emptied by [`Arena::reset`]).
    whole_next: bool,
}

fn bit(bits: &[u64], f: u64) -> bool {
    bits.get((f / 64) as usize)
        .is_some_and(|w| w & (1 << (f % 64)) != 0)
}

fn set(bits: &mut Vec<u64>, f: u64) {
    let w = (f / 64) as usize;
    if bits.len() <= w {
        bits.resize(w + 1, 0);
    }
    bits[w] |= 1 << (f % 64);
}

impl Frames {
    /// Add the frame region at `base` of `len` bytes (the next in order).
    pub fn add_region(&mut self, base: u64, len: u64) -> Result<()> {
        let frames = len / PAGE as u64;
        let total = self.total + frames;
        if total > u32::MAX as u64 {
            return Err(DipperError::OutOfSpace(format!(
                "{total} frames: a table entry names at most {} (16 TiB)",
                u32::MAX
            )));
        }
        self.extents.push((base, frames));
        self.total = total;
        Ok(())
    }

    /// The last frame region grew in place to `len` bytes (its frames keep their numbers).
    pub fn extend_last(&mut self, len: u64) -> Result<()> {
        let Some(last) = self.extents.last_mut() else {
            return Err(DipperError::Invalid {
                what: "frame region",
                reason: "no frame region to extend".into(),
            });
        };
        let frames = len / PAGE as u64;
        assert!(frames >= last.1, "a frame region only grows");
        let total = self.total + (frames - last.1);
        if total > u32::MAX as u64 {
            return Err(DipperError::OutOfSpace(format!(
                "{total} frames: a table entry names at most {} (16 TiB)",
                u32::MAX
            )));
        }
        last.1 = frames;
        self.total = total;
        Ok(())
    }

    /// Frame regions.
    pub fn regions(&self) -> usize {
        self.extents.len()
    }

    /// Frames in all regions.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Frames the image in force does not name.
    pub fn free(&self) -> u64 {
        let used: u64 = self.in_force.iter().map(|w| w.count_ones() as u64).sum();
        self.total - used
    }

    /// The image in force is not in frames (a format-1 slot was loaded, or none).
    pub fn forget(&mut self) {
        self.in_force.clear();
        self.map = None;
        self.distrust();
    }

    /// Forget the spares: what their frames hold is not known any more (a write into them
    /// failed half way). The next write writes the pages it changes whole.
    pub fn distrust(&mut self) {
        self.spare.clear();
        self.owner.clear();
        self.reserved.clear();
        self.whole_next = true;
    }

    /// The spare of page `p` of shard `s` usable by the write being made (`taken`: frames it
    /// took already): its frame and mask.
    fn spare_of(&self, taken: &[u64], s: usize, p: usize) -> Option<(u64, u64)> {
        if self.whole_next {
            return None;
        }
        let &(f1, mask) = self.spare.get(s)?.get(p)?;
        let f = (f1 as u64).checked_sub(1)?;
        let ok = f < self.total
            && !bit(&self.in_force, f)
            && !bit(taken, f)
            && self.owner.get(f as usize) == Some(&owner_key(s, p));
        ok.then_some((f, mask))
    }

    /// Medium offset of frame `f` (below `total`).
    fn at(&self, f: u64) -> u64 {
        let mut first = 0;
        for &(base, n) in &self.extents {
            if f < first + n {
                return base + (f - first) * PAGE as u64;
            }
            first += n;
        }
        unreachable!("frame {f} checked below {}", self.total)
    }

    /// Does page `p` of shard `s` go to a new frame, given the pages changed since the image in
    /// force (`changed[s]`, as a bitset)?
    fn is_new(&self, changed: &[Vec<u64>], s: usize, p: usize) -> bool {
        self.map.is_none() || self.whole_next || bit(&changed[s], p as u64)
    }

    fn changed_bits(changed: &[Vec<usize>]) -> Vec<Vec<u64>> {
        changed
            .iter()
            .map(|pages| {
                let mut b = Vec::new();
                for &p in pages {
                    set(&mut b, p as u64);
                }
                b
            })
            .collect()
    }

    /// Frames and table entries a write of `arenas` needs, `changed[s]` being the pages of
    /// shard `s` changed since the image in force.
    pub fn needs(&self, arenas: &[Arena], changed: &[Vec<usize>]) -> (u64, u64) {
        let bits = Self::changed_bits(changed);
        let (mut frames, mut entries) = (0, 0);
        for (s, a) in arenas.iter().enumerate() {
            for p in 0..a.used_pages() {
                if self.is_new(&bits, s, p) {
                    frames += 1;
                    entries += 1;
                } else if self.old(s, p).0 != 0 {
                    entries += 1;
                }
            }
        }
        (frames, entries)
    }

    fn old(&self, s: usize, p: usize) -> (u32, u32) {
        self.map
            .as_ref()
            .and_then(|m| m.get(s))
            .and_then(|m| m.get(p))
            .copied()
            .unwrap_or((0, 0))
    }

    /// Load the image of checkpoint `checkpoint` from a format-2 slot; the frames it names are
    /// the ones in force from now on.
    pub fn load<M: Medium>(
        &mut self,
        medium: &M,
        uuid: &Uuid,
        geo: &TableGeometry,
        checkpoint: u64,
        shards: usize,
    ) -> Result<Vec<Arena>> {
        let (used, mut images) = read_header(
            medium,
            uuid,
            geo.index,
            geo.base,
            SLOT2_MAGIC,
            geo.capacity,
            checkpoint,
            shards,
        )?;
        let mut map: Vec<Vec<(u32, u32)>> = images
            .iter()
            .map(|i| vec![(0, 0); i.len() / PAGE])
            .collect();
        let mut in_force = Vec::new();
        let mut owner = Vec::new();
        let table_at = geo.base + SLOT_TABLE_AT as u64;
        let mut table = vec![0u8; used as usize * SLOT_ENTRY_BYTES];
        medium.read(table_at as usize, &mut table);
        let t = Reader::new("slot page entry", &table).at(table_at);
        for i in 0..used as usize {
            let e = Reader::new(
                "slot page entry",
                t.slice_at("entry", i * SLOT_ENTRY_BYTES, SLOT_ENTRY_BYTES)?,
            )
            .at(table_at + (i * SLOT_ENTRY_BYTES) as u64);
            let shard = e.u32_at("shard", ENTRY_SHARD_AT)?;
            let page = e.u32_at("page", ENTRY_PAGE_AT)?;
            let crc = e.u32_at("crc", ENTRY_CRC_AT)?;
            let frame = e.u32_at("frame", ENTRY_FRAME_AT)?;
            if shard as usize >= shards {
                return Err(e
                    .invalid("shard", ENTRY_SHARD_AT, format!("below {shards}"), shard)
                    .into());
            }
            let pages = map[shard as usize].len();
            if page as usize >= pages {
                return Err(e
                    .invalid(
                        "page",
                        ENTRY_PAGE_AT,
                        format!("below {pages} (shard {shard})"),
                        page,
                    )
                    .into());
            }
            if map[shard as usize][page as usize].0 != 0 {
                return Err(e
                    .invalid(
                        "page",
                        ENTRY_PAGE_AT,
                        "each page once",
                        format!("shard {shard} page {page} again"),
                    )
                    .into());
            }
            if frame as u64 >= self.total || bit(&in_force, frame as u64) {
                return Err(e
                    .invalid(
                        "frame",
                        ENTRY_FRAME_AT,
                        format!("below {}, each frame once", self.total),
                        frame,
                    )
                    .into());
            }
            set(&mut in_force, frame as u64);
            map[shard as usize][page as usize] = (frame + 1, crc);
            if owner.len() <= frame as usize {
                owner.resize(frame as usize + 1, 0);
            }
            owner[frame as usize] = owner_key(shard as usize, page as usize);
            let at = self.at(frame as u64);
            let dst = &mut images[shard as usize][page as usize * PAGE..(page as usize + 1) * PAGE];
            medium.read(at as usize, dst);
            let want = crc32c::crc32c_append(page_seed(uuid, frame, shard, page), dst);
            if want != crc {
                return Err(DipperError::Corrupt {
                    structure: "frame",
                    offset: at,
                    field: "crc",
                    expected: format!("{crc:#010x} (shard {shard} page {page} frame {frame})"),
                    found: format!("{want:#010x}"),
                });
            }
        }
        let arenas = images
            .into_iter()
            .map(Arena::from_image)
            .collect::<Result<Vec<_>>>()?;
        self.in_force = in_force;
        self.map = Some(map);
        self.spare.clear();
        self.reserved.clear();
        self.owner = owner;
        self.whole_next = false;
        Ok(arenas)
    }

    /// Write checkpoint `checkpoint`'s image of `arenas` into the format-2 slot `geo`: the
    /// changed pages (`changed[s]` for shard `s`; every page below the top when the image in
    /// force is not in frames) into free frames, the whole table, then the header; flushed and
    /// fenced. The caller made sure of the frames and entries ([`Frames::needs`]). Returns the
    /// pages written and what to [`Frames::commit`] once the root points at this slot.
    #[allow(clippy::too_many_arguments)]
    pub fn write<M: Medium>(
        &self,
        medium: &M,
        uuid: &Uuid,
        geo: &TableGeometry,
        checkpoint: u64,
        arenas: &[Arena],
        changed: &[Vec<usize>],
    ) -> Result<(u64, Pending)> {
        let lines: Vec<Vec<(usize, u64)>> = changed
            .iter()
            .map(|c| c.iter().map(|&p| (p, u64::MAX)).collect())
            .collect();
        let (w, pending) = self.write_lines(medium, uuid, geo, checkpoint, arenas, &lines)?;
        Ok((w.pages, pending))
    }

    /// [`Frames::write`] with the changed lines of each changed page (`changed[s]`: (page,
    /// mask of its [`crate::arena::DIRTY_LINE`]-byte lines changed since the image in force),
    /// ascending). A changed page whose spare is usable gets only its spare's lines and its
    /// changed ones, written into the spare; any other changed page is written whole into a
    /// free frame. The table and the CRCs are as [`Frames::write`] makes them.
    pub fn write_lines<M: Medium>(
        &self,
        medium: &M,
        uuid: &Uuid,
        geo: &TableGeometry,
        checkpoint: u64,
        arenas: &[Arena],
        changed: &[Vec<(usize, u64)>],
    ) -> Result<(FramesWrite, Pending)> {
        self.write_paced(medium, uuid, geo, checkpoint, arenas, changed, &mut |_| {})
    }

    /// [`Frames::write_lines`], calling `pace` with the bytes of each page written.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_paced<M: Medium>(
        &self,
        medium: &M,
        uuid: &Uuid,
        geo: &TableGeometry,
        checkpoint: u64,
        arenas: &[Arena],
        changed: &[Vec<(usize, u64)>],
        pace: &mut dyn FnMut(u64),
    ) -> Result<(FramesWrite, Pending)> {
        let mut new_bits: Vec<u64> = Vec::new();
        let mut map: Vec<Vec<(u32, u32)>> = Vec::with_capacity(arenas.len());
        let mut spares: Vec<Vec<(u32, u64)>> = Vec::with_capacity(arenas.len());
        let mut owners: Vec<(u32, u64)> = Vec::new();
        let mut table: Vec<u8> = Vec::new();
        // Free frames are taken in order, spares last (`cursor` skips them, `steal` not).
        let mut cursor = 0u64;
        let mut steal = 0u64;
        let mut out = FramesWrite::default();
        let no_lines: Vec<(usize, u64)> = Vec::new();
        for (s, a) in arenas.iter().enumerate() {
            let mut m = vec![(0u32, 0u32); a.pages()];
            let mut sp: Vec<(u32, u64)> = self.spare.get(s).cloned().unwrap_or_default();
            if self.whole_next {
                sp.clear();
            }
            sp.resize(a.pages(), (0, 0));
            let ch = changed.get(s).unwrap_or(&no_lines);
            let mut next = 0;
            for (p, slot) in m.iter_mut().enumerate().take(a.used_pages()) {
                while next < ch.len() && ch[next].0 < p {
                    next += 1;
                }
                let mask = match ch.get(next) {
                    Some(&(q, mask)) if q == p && mask != 0 => mask,
                    _ => 0,
                };
                let fresh = self.map.is_none() || self.whole_next || mask != 0;
                let (frame, crc) = if fresh {
                    let bytes = a.page(p);
                    let (f, lines) = match self.spare_of(&new_bits, s, p) {
                        Some((f, old)) if self.map.is_some() => (f, old | mask),
                        _ => {
                            while cursor < self.total
                                && (bit(&self.in_force, cursor)
                                    || bit(&new_bits, cursor)
                                    || bit(&self.reserved, cursor))
                            {
                                cursor += 1;
                            }
                            let f = if cursor < self.total {
                                cursor
                            } else {
                                while steal < self.total
                                    && (bit(&self.in_force, steal) || bit(&new_bits, steal))
                                {
                                    steal += 1;
                                }
                                if steal >= self.total {
                                    return Err(DipperError::OutOfSpace(format!(
                                        "no free frame among {} for checkpoint {checkpoint}",
                                        self.total
                                    )));
                                }
                                steal
                            };
                            owners.push((f as u32, owner_key(s, p)));
                            (f, u64::MAX)
                        }
                    };
                    let n = crate::slot::write_masked(medium, self.at(f) as usize, bytes, lines);
                    out.pages += 1;
                    out.bytes += n;
                    pace(n);
                    let crc =
                        crc32c::crc32c_append(page_seed(uuid, f as u32, s as u32, p as u32), bytes);
                    // The frame of the image in force becomes this page's spare: it differs
                    // from the new copy in the lines changed now.
                    // (Unknown after a failed write: its changes were not all recorded.)
                    sp[p] = match self.old(s, p) {
                        (f1, _) if f1 != 0 && !self.whole_next => (f1, mask),
                        _ => (0, 0),
                    };
                    (f as u32, crc)
                } else {
                    match self.old(s, p) {
                        (0, _) => continue,
                        (f1, crc) => (f1 - 1, crc),
                    }
                };
                set(&mut new_bits, frame as u64);
                *slot = (frame + 1, crc);
                let mut e = [0u8; SLOT_ENTRY_BYTES];
                FixedWriter::new(&mut e)
                    .u32_at(ENTRY_SHARD_AT, s as u32)
                    .u32_at(ENTRY_PAGE_AT, p as u32)
                    .u32_at(ENTRY_CRC_AT, crc)
                    .u32_at(ENTRY_FRAME_AT, frame);
                table.extend_from_slice(&e);
            }
            map.push(m);
            spares.push(sp);
        }
        let entries = (table.len() / SLOT_ENTRY_BYTES) as u64;
        if entries > geo.capacity {
            return Err(DipperError::OutOfSpace(format!(
                "slot {} holds {} entries, checkpoint {checkpoint} needs {entries}",
                geo.index, geo.capacity
            )));
        }
        let table_at = (geo.base + SLOT_TABLE_AT as u64) as usize;
        medium.write(table_at, &table);
        medium.flush(table_at, table.len())?;
        write_header(
            medium,
            uuid,
            geo.index,
            geo.base,
            SLOT2_MAGIC,
            geo.capacity,
            checkpoint,
            arenas,
            entries,
        )?;
        medium.fence()?;
        Ok((
            out,
            Pending {
                in_force: new_bits,
                map,
                spare: spares,
                owners,
            },
        ))
    }

    /// The root points at the image of `pending`: its frames are the ones in force.
    pub fn commit(&mut self, pending: Pending) {
        self.in_force = pending.in_force;
        self.map = Some(pending.map);
        for (f, key) in pending.owners {
            if self.owner.len() <= f as usize {
                self.owner.resize(f as usize + 1, 0);
            }
            self.owner[f as usize] = key;
        }
        self.spare = pending.spare;
        self.reserved.clear();
        for (s, sp) in self.spare.iter_mut().enumerate() {
            for (p, e) in sp.iter_mut().enumerate() {
                if e.0 == 0 {
                    continue;
                }
                let f = e.0 as u64 - 1;
                if bit(&self.in_force, f) || self.owner.get(f as usize) != Some(&owner_key(s, p)) {
                    *e = (0, 0); // another page was written into it
                } else {
                    set(&mut self.reserved, f);
                }
            }
        }
        self.whole_next = false;
    }
}

/// Is the slot at `base` a format-2 slot (its magic says so)?
pub fn is_format2<M: Medium>(medium: &M, base: u64) -> bool {
    let mut b = [0u8; 8];
    medium.read(base as usize + SLOT_MAGIC_AT, &mut b);
    u64::from_le_bytes(b) == SLOT2_MAGIC
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_hold_what_they_are_sized_for() {
        for pages in [0, 1, 255, 256, 10_000, 1 << 20] {
            let len = table_bytes_for(pages);
            let geo = TableGeometry::new(0, 0, len).unwrap();
            assert!(geo.capacity >= pages + pages / 8, "{pages}");
            assert!(crate::slot::SlotGeometry::new(0, 0, len).is_ok());
        }
        assert!(TableGeometry::new(0, 0, SLOT_TABLE_AT as u64).is_err());
    }

    #[test]
    fn frame_regions_grow_by_a_quarter_at_least() {
        assert_eq!(frames_to_add(10, 0), FRAME_REGION_FRAMES_MIN);
        assert_eq!(frames_to_add(10, 4000), 1000);
        assert_eq!(frames_to_add(5000, 4000), 5000);
    }
}
