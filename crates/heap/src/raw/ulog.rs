//! The undo log of a lane: snapshots and allocator entries, the scan that finds them, and
//! rolling them back (`docs/format/undo-log.md`).

#[allow(unused_imports)]
use super::*;

/// A sorted set of disjoint byte ranges `[start, end)`.
#[derive(Debug, Default)]
pub(super) struct RangeSet(pub(super) Vec<(u64, u64)>);

impl RangeSet {
    pub(super) fn covers(&self, start: u64, end: u64) -> bool {
        let i = self.0.partition_point(|r| r.0 <= start);
        i > 0 && self.0[i - 1].1 >= end
    }

    pub(super) fn insert(&mut self, mut start: u64, mut end: u64) {
        let mut i = self.0.partition_point(|r| r.1 < start);
        while i < self.0.len() && self.0[i].0 <= end {
            start = start.min(self.0[i].0);
            end = end.max(self.0[i].1);
            self.0.remove(i);
        }
        i = self.0.partition_point(|r| r.0 < start);
        self.0.insert(i, (start, end));
    }

    pub(super) fn overlaps(&self, start: u64, end: u64) -> bool {
        let i = self.0.partition_point(|r| r.1 <= start);
        i < self.0.len() && self.0[i].0 < end
    }

    pub(super) fn clear(&mut self) {
        self.0.clear();
    }
}

pub(super) fn in_fresh(lane: &Lane, off: u64, len: u64) -> bool {
    // Blocks allocated in this transaction need no snapshot: on abort they return to the
    // free space, whatever they hold.
    lane.allocs
        .iter()
        .any(|b| off >= b.off() && off + len <= b.off() + b.len())
}

pub(crate) fn undo_crc(head: &[u8], data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(head), data)
}

/// What an undo entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UndoKind {
    /// The old bytes of a range.
    Snapshot,
    /// An allocation will OR the mask into a run bitmap word; undo clears those bits.
    BitOr,
    /// A free will clear the mask's bits; undo sets them.
    BitAndNot,
}

/// A valid undo entry found by [`scan_undo`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UndoEntry {
    /// What it records.
    pub kind: UndoKind,
    /// Region offset of the snapshotted range or of the bitmap word.
    pub offset: u64,
    /// Bytes of the payload (the snapshot's length; 8 for a bit entry's mask).
    pub len: u64,
    /// Region offset of the payload in the log.
    pub data_at: u64,
}

/// The valid undo entries of transaction `seq` in lane `i`, in log order (the scan stops at
/// the first entry that is torn, of another transaction, or out of bounds).
pub fn scan_undo(
    medium: &dyn Medium,
    base: u64,
    g: &Geometry,
    i: usize,
    seq: u64,
) -> Vec<UndoEntry> {
    let start = g.undo(i);
    let end = start + g.undo_bytes();
    let mut pos = start;
    let mut out = Vec::new();
    let mut data = Vec::new();
    while pos + UNDO_HEADER_BYTES <= end {
        let mut h = [0u8; UNDO_HEADER_BYTES as usize];
        medium.read((base + pos) as usize, &mut h);
        let Ok(UndoHeader {
            seq: eseq,
            offset: off,
            len: field,
            crc,
        }) = UndoHeader::decode(&h, pos)
        else {
            break;
        };
        let (kind, len) = match field {
            UNDO_BIT_OR => (UndoKind::BitOr, 8),
            UNDO_BIT_ANDNOT => (UndoKind::BitAndNot, 8),
            n => (UndoKind::Snapshot, u64::from(n)),
        };
        if eseq != seq || len == 0 || pos + UNDO_HEADER_BYTES + len > end {
            break;
        }
        data.resize(len as usize, 0);
        medium.read((base + pos + UNDO_HEADER_BYTES) as usize, &mut data);
        if undo_crc(&h[..UNDO_CRC_COVERED_BYTES], &data) != crc {
            break;
        }
        out.push(UndoEntry {
            kind,
            offset: off,
            len,
            data_at: pos + UNDO_HEADER_BYTES,
        });
        pos += (UNDO_HEADER_BYTES + len).div_ceil(UNDO_ALIGN) * UNDO_ALIGN;
    }
    out
}

impl RawHeap {
    /// Snapshot `[off, off + len)` before the caller changes it.
    pub fn add_range(&self, lane: &mut Lane, off: u64, len: u64) -> Result<()> {
        self.need_tx(lane)?;
        if let Err(e) = self.check_range(off, len) {
            return self.fail(lane, e);
        }
        self.snapshot(lane, off, len)
    }

    pub(super) fn snapshot(&self, lane: &mut Lane, off: u64, len: u64) -> Result<()> {
        if len == 0 || lane.ranges.covers(off, off + len) || in_fresh(lane, off, len) {
            return Ok(());
        }
        let medium = &self.medium;
        let base = self.base;
        let pos = match self.log_entry(lane, off, len as u32, len, |buf| {
            medium.read((base + off) as usize, buf)
        }) {
            Ok(pos) => pos,
            Err(e) => return self.fail(lane, e),
        };
        if let Err(e) = self.fence() {
            return self.fail(lane, e);
        }
        lane.unfenced = false;
        lane.snapshots.push((off, len, pos));
        lane.ranges.insert(off, off + len);
        Ok(())
    }

    /// Append an undo entry of transaction `lane.seq + 1`: the header, then `payload_len`
    /// bytes that `fill` writes; flush it (no fence). Returns its position in the undo area.
    pub(super) fn log_entry(
        &self,
        lane: &mut Lane,
        off: u64,
        len_field: u32,
        payload_len: u64,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<u64> {
        let entry = UNDO_HEADER_BYTES + payload_len;
        let padded = entry.div_ceil(UNDO_ALIGN) * UNDO_ALIGN;
        if lane.undo_tail + padded > self.geo.undo_bytes() {
            return Err(HeapError::TxTooLarge(format!(
                "the undo log of a lane holds {} bytes; this entry of {entry} bytes needs {} more",
                self.geo.undo_bytes(),
                lane.undo_tail + padded - self.geo.undo_bytes()
            )));
        }
        let seq = lane.seq + 1;
        let mut buf = std::mem::take(&mut lane.scratch);
        buf.clear();
        buf.resize(entry as usize, 0);
        fill(&mut buf[UNDO_HEADER_BYTES as usize..]);
        let mut head = UndoHeader {
            seq,
            offset: off,
            len: len_field,
            crc: 0,
        };
        head.write(&mut buf);
        head.crc = undo_crc(
            &buf[..UNDO_CRC_COVERED_BYTES],
            &buf[UNDO_HEADER_BYTES as usize..],
        );
        head.write(&mut buf);
        let pos = lane.undo_tail;
        let at = self.m(self.geo.undo(lane.idx) + pos);
        self.medium.write(at, &buf);
        lane.scratch = buf;
        self.pflush(at, entry as usize)?;
        lane.undo_tail += padded;
        lane.unfenced = true;
        Ok(pos)
    }

    /// Log the allocator change `b` will make at commit (`alloc`: true for an allocation).
    pub(super) fn log_block(&self, lane: &mut Lane, b: &Block, alloc: bool) -> Result<()> {
        match *b {
            Block::Small { chunk, bit, .. } => {
                let word = self.geo.chunk(u64::from(chunk)) + u64::from(bit / 64) * 8;
                let mask = 1u64 << (bit % 64);
                let tag = if alloc { UNDO_BIT_OR } else { UNDO_BIT_ANDNOT };
                self.log_entry(lane, word, tag, 8, |b| {
                    b.copy_from_slice(&mask.to_le_bytes())
                })?;
            }
            Block::Large { chunk, span, .. } => {
                // The head word, and (for an allocation) any stale word inside the span, such
                // as that of an empty run reclaimed at open.
                let last = if alloc { chunk + span } else { chunk + 1 };
                for c in chunk..last {
                    let at = self.geo.chunk_word(u64::from(c));
                    let old = self.medium.load_u64(self.m(at));
                    if c == chunk || old != 0 {
                        self.log_entry(lane, at, 8, 8, |b| b.copy_from_slice(&old.to_le_bytes()))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Undo one entry: restore a snapshot, or apply a bit entry's inverse to its own bits.
    /// A snapshot's bytes are stored through `data`.
    pub(super) fn undo_one(&self, e: &UndoEntry, data: &dyn Medium) -> Result<()> {
        match e.kind {
            UndoKind::Snapshot => {
                let mut buf = vec![0u8; e.len as usize];
                self.medium.read(self.m(e.data_at), &mut buf);
                data.write(self.m(e.offset), &buf);
                self.pflush(self.m(e.offset), e.len as usize)?;
            }
            UndoKind::BitOr | UndoKind::BitAndNot => {
                let mask = self.medium.load_u64(self.m(e.data_at));
                let at = self.m(e.offset);
                let old = self.medium.load_u64(at);
                let new = if e.kind == UndoKind::BitOr {
                    old & !mask
                } else {
                    old | mask
                };
                if new != old {
                    self.medium.store_u64(at, new);
                }
                self.pflush(at, 8)?;
            }
        }
        Ok(())
    }

    pub(super) fn check_undo_target(&self, lane: usize, e: &UndoEntry) -> Result<()> {
        let g = self.geo;
        let (off, len) = (e.offset, e.len);
        let ok = match e.kind {
            UndoKind::Snapshot => {
                let root = off >= ROOT_LINE && off + len <= ROOT_LINE + 16;
                let table = off >= g.chunk_table_off
                    && off + len <= g.chunk_table_off + g.chunk_count * 8
                    && off % 8 == 0
                    && len == 8;
                root || table || self.check_range(off, len).is_ok()
            }
            UndoKind::BitOr | UndoKind::BitAndNot => {
                off % 8 == 0
                    && off >= g.zone_off
                    && off < g.zone_end()
                    && (off - g.zone_off) % CHUNK_SIZE < RUN_BITMAP_BYTES
            }
        };
        if ok {
            return Ok(());
        }
        Err(HeapError::corrupt(
            format!("lane {lane} undo entry"),
            self.base + e.data_at - UNDO_HEADER_BYTES,
            "offset",
            "a range inside the data zone, the root line, a chunk-table word or a run bitmap word",
            format!("{:?} at {off:#x} + {len}", e.kind),
        ))
    }

    /// Undo what the log of the open transaction records, from the log itself (so an
    /// allocator change a failed commit already made in place is undone too), then retire it.
    /// With `report`, returns each snapshot range with the bytes it held before the rollback.
    pub(super) fn roll_back(&self, lane: &mut Lane, report: bool) -> Result<Vec<(u64, Vec<u8>)>> {
        let entries = scan_undo(&*self.medium, self.base, &self.geo, lane.idx, lane.seq + 1);
        let mut before = Vec::new();
        if report {
            for e in entries.iter().filter(|e| e.kind == UndoKind::Snapshot) {
                let mut buf = vec![0u8; e.len as usize];
                self.medium.read(self.m(e.offset), &mut buf);
                before.push((e.offset, buf));
            }
        }
        for e in entries.iter().rev() {
            self.undo_one(e, self.data())?;
        }
        self.fence()?;
        let seq = lane.seq + 1;
        let state = self.m(self.geo.lane(lane.idx));
        self.medium.store_u64(state, seq << 1);
        self.pflush(state, 8)?;
        self.fence()?;
        lane.seq = seq;
        lane.unfenced = false;
        Ok(before)
    }
}
