//! On-media layout of a heap region (`docs/format/heap.md`, `docs/format/undo-log.md`).
//!
//! All offsets here are relative to the start of the heap region; persistent pointers hold
//! such offsets. Integers are little-endian.

use crate::error::{HeapError, Result};
use pmem::codec::{FieldError, FixedWriter, Reader};

/// First eight bytes of the header: `KVHEAP` then format version 1 as two bytes.
pub const HEAP_MAGIC: u64 = u64::from_le_bytes(*b"KVHEAP\x00\x01");
/// Format version.
pub const HEAP_VERSION: u32 = 1;
/// Bytes at the start of the region holding the header copies and the root line.
pub const HEADER_AREA: u64 = 4096;
/// Offset of header copy 0 (copy 1 is at [`HEADER_COPY_1`]).
pub const HEADER_COPY_0: u64 = 0;
/// Offset of header copy 1.
pub const HEADER_COPY_1: u64 = 1024;
/// Bytes of a header copy covered by its CRC (the CRC field follows them).
pub const HEADER_CRC_AT: usize = 92;
/// Offset of the root line: root object offset (u64) and size (u64), changed only in
/// transactions.
pub const ROOT_LINE: u64 = 3072;

/// Bytes per chunk, the unit of the data zone.
pub const CHUNK_SIZE: u64 = 256 * 1024;
/// Bytes at the start of a run chunk holding its allocation bitmap.
pub const RUN_HEADER: u64 = 1024;
/// Bytes of the bitmap inside [`RUN_HEADER`].
pub const RUN_BITMAP_BYTES: u64 = 512;

/// Bytes of a lane's state line (the state word is its first 8 bytes).
pub const LANE_STATE_BYTES: u64 = 64;
/// Default bytes of a lane's redo area, reserved for redo-mode (DNV) transactions.
pub const DEFAULT_REDO_BYTES: u32 = 16 * 1024;
/// Bytes of an undo entry's header: seq u64, offset u64, len u32, crc u32.
pub const UNDO_HEADER_BYTES: u64 = 24;
/// Undo entries start on this alignment.
pub const UNDO_ALIGN: u64 = 8;
/// An undo entry's `len` holding this marks a bit entry for an allocation: the transaction
/// ORs the entry's 8-byte mask into the run bitmap word at `offset` at commit.
pub const UNDO_BIT_OR: u32 = 0xffff_ffff;
/// An undo entry's `len` holding this marks a bit entry for a free: the transaction clears
/// the mask's bits at commit.
pub const UNDO_BIT_ANDNOT: u32 = 0xffff_fffe;
/// Default number of lanes.
pub const DEFAULT_LANES: u32 = 64;
/// Default bytes per lane (state, redo and undo areas).
pub const DEFAULT_LANE_BYTES: u32 = 256 * 1024;

/// Chunk-table word type: free (the whole word is zero).
pub const CHUNK_FREE: u8 = 0;
/// Chunk-table word type: a run of one size class.
pub const CHUNK_RUN: u8 = 1;
/// Chunk-table word type: the first chunk of a large block (span in the high half).
pub const CHUNK_LARGE: u8 = 2;

/// Block sizes of the size classes, smallest first. Requests above the last go to whole
/// chunks.
pub const CLASS_SIZES: [u32; 40] = [
    64, 128, 192, 256, 320, 384, 448, 512, 576, 640, 704, 768, 832, 896, 960, 1024, 1280, 1536,
    1792, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 10240, 12288, 14336, 16384, 20480,
    24576, 28672, 32768, 40960, 49152, 57344, 65536,
];

/// Largest request served from a run.
pub const MAX_RUN_BLOCK: u64 = 65536;

/// The class serving `size` bytes, or `None` if it needs whole chunks.
pub fn class_for(size: u64) -> Option<usize> {
    if size > MAX_RUN_BLOCK {
        return None;
    }
    let size = size.max(1) as u32;
    if size <= 1024 {
        return Some((size.div_ceil(64) - 1) as usize);
    }
    Some(CLASS_SIZES.partition_point(|&c| c < size))
}

/// Blocks in a run of class `class`.
pub fn blocks_per_run(class: usize) -> u64 {
    (CHUNK_SIZE - RUN_HEADER) / u64::from(CLASS_SIZES[class])
}

/// A decoded chunk-table word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkWord {
    /// Not in use (or covered by a large block's span).
    Free,
    /// A run of this class.
    Run(usize),
    /// The head of a large block spanning this many chunks.
    Large(u32),
}

fn chunk_check(body: u64, index: u64) -> u64 {
    let mut bytes = [0u8; 16];
    FixedWriter::new(&mut bytes)
        .u64_at(0, body)
        .u64_at(8, index);
    u64::from(crc32c::crc32c(&bytes) & 0xffff)
}

impl ChunkWord {
    /// The word stored in the chunk table for chunk `index`.
    pub fn encode(self, index: u64) -> u64 {
        let body = match self {
            ChunkWord::Free => return 0,
            ChunkWord::Run(class) => u64::from(CHUNK_RUN) | (class as u64) << 8,
            ChunkWord::Large(span) => u64::from(CHUNK_LARGE) | u64::from(span) << 32,
        };
        body | chunk_check(body, index) << 16
    }

    /// Decode chunk `index`'s word, checking its check field and ranges.
    pub fn decode(word: u64, index: u64, chunk_count: u64, at: u64) -> Result<ChunkWord> {
        if word == 0 {
            return Ok(ChunkWord::Free);
        }
        let body = word & !(0xffff << 16);
        let check = (word >> 16) & 0xffff;
        let want = chunk_check(body, index);
        let bad = |field, expected: String, found: String| {
            HeapError::corrupt(
                format!("chunk table entry {index}"),
                at,
                field,
                expected,
                found,
            )
        };
        if check != want {
            return Err(bad(
                "check",
                format!("{want:#06x}"),
                format!("{check:#06x} (word {word:#018x})"),
            ));
        }
        match (word & 0xff) as u8 {
            CHUNK_RUN => {
                let class = ((word >> 8) & 0xff) as usize;
                if class >= CLASS_SIZES.len() || word >> 32 != 0 {
                    return Err(bad(
                        "class",
                        format!("a class below {}", CLASS_SIZES.len()),
                        format!("{class}"),
                    ));
                }
                Ok(ChunkWord::Run(class))
            }
            CHUNK_LARGE => {
                let span = (word >> 32) as u32;
                if span == 0 || index + u64::from(span) > chunk_count || (word >> 8) & 0xff != 0 {
                    return Err(bad(
                        "span",
                        format!("1..={}", chunk_count - index),
                        format!("{span}"),
                    ));
                }
                Ok(ChunkWord::Large(span))
            }
            t => Err(bad("type", "1 (run) or 2 (large)".into(), format!("{t}"))),
        }
    }
}

/// Where everything is in a heap region of a given size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes of the region.
    pub region_len: u64,
    /// Number of lanes.
    pub lane_count: u32,
    /// Bytes per lane.
    pub lane_bytes: u32,
    /// Bytes of each lane's redo area.
    pub redo_bytes: u32,
    /// Offset of lane 0.
    pub lanes_off: u64,
    /// Offset of the chunk table.
    pub chunk_table_off: u64,
    /// Offset of chunk 0.
    pub zone_off: u64,
    /// Chunks in the zone.
    pub chunk_count: u64,
}

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

impl Geometry {
    /// Lay out a region of `region_len` bytes.
    pub fn plan(
        region_len: u64,
        lane_count: u32,
        lane_bytes: u32,
        redo_bytes: u32,
    ) -> Result<Self> {
        if !(1..=1024).contains(&lane_count) {
            return Err(HeapError::invalid(
                "lane count",
                format!("{lane_count} is not in 1..=1024"),
            ));
        }
        if lane_bytes % 4096 != 0 || redo_bytes % 64 != 0 || redo_bytes < 1024 {
            return Err(HeapError::invalid(
                "lane size",
                format!(
                    "lanes of {lane_bytes} bytes with {redo_bytes} redo bytes: lanes are whole 4 KiB pages and the redo area whole lines of at least 1 KiB"
                ),
            ));
        }
        let undo = u64::from(lane_bytes).saturating_sub(LANE_STATE_BYTES + u64::from(redo_bytes));
        if undo < 4096 {
            return Err(HeapError::invalid(
                "lane size",
                format!(
                    "{lane_bytes} bytes leaves {undo} bytes of undo log; at least 4096 are needed"
                ),
            ));
        }
        let lanes_off = HEADER_AREA;
        let lanes_end = lanes_off + u64::from(lane_count) * u64::from(lane_bytes);
        let chunk_table_off = lanes_end;
        // Chunks that fit once the table (8 bytes each, page-rounded) is subtracted.
        let after = region_len.saturating_sub(chunk_table_off);
        let mut chunks = after / CHUNK_SIZE;
        while chunks > 0 && round_up(chunks * 8, 4096) + chunks * CHUNK_SIZE > after {
            chunks -= 1;
        }
        if chunks == 0 {
            return Err(HeapError::invalid(
                "heap size",
                format!(
                    "{region_len} bytes holds no {CHUNK_SIZE}-byte chunk after {chunk_table_off} bytes of header and lanes"
                ),
            ));
        }
        let zone_off = chunk_table_off + round_up(chunks * 8, 4096);
        Ok(Geometry {
            region_len,
            lane_count,
            lane_bytes,
            redo_bytes,
            lanes_off,
            chunk_table_off,
            zone_off,
            chunk_count: chunks,
        })
    }

    /// Offset of lane `i`.
    pub fn lane(&self, i: usize) -> u64 {
        self.lanes_off + i as u64 * u64::from(self.lane_bytes)
    }
    /// Offset of lane `i`'s redo header.
    pub fn redo(&self, i: usize) -> u64 {
        self.lane(i) + LANE_STATE_BYTES
    }
    /// Offset of lane `i`'s undo area.
    pub fn undo(&self, i: usize) -> u64 {
        self.redo(i) + u64::from(self.redo_bytes)
    }
    /// Bytes of each lane's undo area.
    pub fn undo_bytes(&self) -> u64 {
        u64::from(self.lane_bytes) - LANE_STATE_BYTES - u64::from(self.redo_bytes)
    }
    /// Offset of chunk `i`.
    pub fn chunk(&self, i: u64) -> u64 {
        self.zone_off + i * CHUNK_SIZE
    }
    /// Offset of chunk `i`'s table word.
    pub fn chunk_word(&self, i: u64) -> u64 {
        self.chunk_table_off + i * 8
    }
    /// End of the data zone.
    pub fn zone_end(&self) -> u64 {
        self.zone_off + self.chunk_count * CHUNK_SIZE
    }
    /// The chunk holding zone offset `off` (which must be inside the zone).
    pub fn chunk_of(&self, off: u64) -> u64 {
        (off - self.zone_off) / CHUNK_SIZE
    }
}

/// The immutable part of the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The pool's UUID (persistent pointers carry its low 64 bits).
    pub uuid: [u8; 16],
    /// The geometry.
    pub geo: Geometry,
}

impl Header {
    /// The header copy as bytes (`HEADER_CRC_AT` bytes plus the CRC).
    pub fn encode(&self) -> [u8; HEADER_CRC_AT + 4] {
        let mut b = [0u8; HEADER_CRC_AT + 4];
        let g = &self.geo;
        FixedWriter::new(&mut b)
            .u64_at(0, HEAP_MAGIC)
            .u32_at(8, HEAP_VERSION)
            .u32_at(12, (HEADER_CRC_AT + 4) as u32)
            .bytes_at(16, &self.uuid)
            .u64_at(32, g.region_len)
            .u32_at(40, g.lane_count)
            .u32_at(44, g.lane_bytes)
            .u64_at(48, g.lanes_off)
            .u64_at(56, g.chunk_table_off)
            .u64_at(64, g.zone_off)
            .u64_at(72, g.chunk_count)
            .u64_at(80, CHUNK_SIZE)
            .u32_at(88, g.redo_bytes);
        let crc = crc32c::crc32c(&b[..HEADER_CRC_AT]);
        FixedWriter::new(&mut b).u32_at(HEADER_CRC_AT, crc);
        b
    }

    /// Decode and validate a header copy read from offset `at` of a region of `region_len`
    /// bytes. A short input is an error naming the first field it cuts.
    pub fn decode(b: &[u8], at: u64, region_len: u64) -> Result<Header> {
        let name = if at == HEADER_COPY_0 {
            "heap header copy 0"
        } else {
            "heap header copy 1"
        };
        let rd = Reader::new(name, b).at(at);
        let magic = rd.u64_at("magic", 0).map_err(corrupt)?;
        if magic != HEAP_MAGIC {
            return Err(corrupt(rd.invalid(
                "magic",
                0,
                format!("{HEAP_MAGIC:#018x}"),
                format!("{magic:#018x}"),
            )));
        }
        let stored = rd.u32_at("crc32c", HEADER_CRC_AT).map_err(corrupt)?;
        let crc = crc32c::crc32c(&b[..HEADER_CRC_AT]);
        if stored != crc {
            return Err(corrupt(rd.invalid(
                "crc32c",
                HEADER_CRC_AT,
                format!("{crc:#010x}"),
                format!("{stored:#010x}"),
            )));
        }
        let version = rd.u32_at("version", 8).map_err(corrupt)?;
        if version != HEAP_VERSION {
            return Err(corrupt(rd.invalid("version", 8, HEAP_VERSION, version)));
        }
        let chunk_size = rd.u64_at("chunk_size", 80).map_err(corrupt)?;
        if chunk_size != CHUNK_SIZE {
            return Err(corrupt(rd.invalid(
                "chunk_size",
                80,
                CHUNK_SIZE,
                chunk_size,
            )));
        }
        let stored_len = rd.u64_at("region_len", 32).map_err(corrupt)?;
        if stored_len != region_len {
            return Err(corrupt(rd.invalid(
                "region_len",
                32,
                region_len,
                stored_len,
            )));
        }
        let lane_count = rd.u32_at("lane_count", 40).map_err(corrupt)?;
        let lane_bytes = rd.u32_at("lane_bytes", 44).map_err(corrupt)?;
        let redo_bytes = rd.u32_at("redo_bytes", 88).map_err(corrupt)?;
        let geo = Geometry::plan(region_len, lane_count, lane_bytes, redo_bytes)
            .map_err(|e| corrupt(rd.invalid("lane geometry", 40, "a valid lane geometry", e)))?;
        let stored = (
            rd.u64_at("lanes_off", 48).map_err(corrupt)?,
            rd.u64_at("chunk_table_off", 56).map_err(corrupt)?,
            rd.u64_at("zone_off", 64).map_err(corrupt)?,
            rd.u64_at("chunk_count", 72).map_err(corrupt)?,
        );
        let planned = (
            geo.lanes_off,
            geo.chunk_table_off,
            geo.zone_off,
            geo.chunk_count,
        );
        if stored != planned {
            return Err(corrupt(rd.invalid(
                "layout",
                48,
                format!("{planned:?} (lanes, chunk table, zone, chunks)"),
                format!("{stored:?}"),
            )));
        }
        let uuid = rd.array_at("uuid", 16).map_err(corrupt)?;
        Ok(Header { uuid, geo })
    }
}

fn corrupt(e: FieldError) -> HeapError {
    HeapError::Corrupt(e.into())
}

/// The header of an undo entry (`undo-log.md`, table `undo entry`); its payload follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UndoHeader {
    /// Sequence number of the transaction that wrote the entry.
    pub seq: u64,
    /// Region offset of the snapshotted range or of the bitmap word.
    pub offset: u64,
    /// Payload length, or [`UNDO_BIT_OR`] / [`UNDO_BIT_ANDNOT`] for a bit entry.
    pub len: u32,
    /// CRC-32C over the first 20 header bytes and the payload.
    pub crc: u32,
}

/// Bytes of an undo entry's header the CRC covers (every field before `crc`).
pub(crate) const UNDO_CRC_COVERED_BYTES: usize = 20;

impl UndoHeader {
    /// Write the header into the first [`UNDO_HEADER_BYTES`] of `b`.
    pub fn write(&self, b: &mut [u8]) {
        FixedWriter::new(&mut b[..UNDO_HEADER_BYTES as usize])
            .u64_at(0, self.seq)
            .u64_at(8, self.offset)
            .u32_at(16, self.len)
            .u32_at(UNDO_CRC_COVERED_BYTES, self.crc);
    }

    /// Read an undo entry's header found at region offset `at`, without judging it (the scan
    /// decides, from the sequence number and the CRC, whether the entry belongs to the log).
    pub fn decode(b: &[u8], at: u64) -> Result<UndoHeader> {
        let rd = Reader::new("heap undo entry", b).at(at);
        Ok(UndoHeader {
            seq: rd.u64_at("seq", 0).map_err(corrupt)?,
            offset: rd.u64_at("offset", 8).map_err(corrupt)?,
            len: rd.u32_at("len", 16).map_err(corrupt)?,
            crc: rd
                .u32_at("crc32c", UNDO_CRC_COVERED_BYTES)
                .map_err(corrupt)?,
        })
    }
}

/// Low 64 bits of a UUID: the pool id persistent pointers carry.
pub fn pool_id(uuid: &[u8; 16]) -> u64 {
    let [a, b, c, d, e, f, g, h, ..] = *uuid;
    u64::from_le_bytes([a, b, c, d, e, f, g, h])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_every_size_with_the_smallest_fitting_block() {
        for size in 1..=MAX_RUN_BLOCK {
            let c = class_for(size).expect("a run class");
            assert!(u64::from(CLASS_SIZES[c]) >= size, "size {size} class {c}");
            if c > 0 {
                assert!(
                    u64::from(CLASS_SIZES[c - 1]) < size,
                    "size {size} class {c}"
                );
            }
        }
        assert_eq!(class_for(MAX_RUN_BLOCK + 1), None);
        assert!(CLASS_SIZES.windows(2).all(|w| w[0] < w[1]));
        assert!(CLASS_SIZES.iter().all(|s| s % 64 == 0));
        for c in 0..CLASS_SIZES.len() {
            assert!(blocks_per_run(c) <= RUN_BITMAP_BYTES * 8);
            assert!(blocks_per_run(c) >= 3);
        }
    }

    #[test]
    fn chunk_words_round_trip_and_reject_damage() {
        for (i, w) in [
            ChunkWord::Free,
            ChunkWord::Run(0),
            ChunkWord::Run(39),
            ChunkWord::Large(3),
        ]
        .into_iter()
        .enumerate()
        {
            let i = i as u64;
            let enc = w.encode(i);
            assert_eq!(ChunkWord::decode(enc, i, 10, 0).unwrap(), w);
            if w != ChunkWord::Free {
                for bit in 0..64 {
                    let d = ChunkWord::decode(enc ^ (1 << bit), i, 10, 0);
                    assert!(
                        d.is_err() || d.unwrap() != w,
                        "bit {bit} of {w:?} undetected"
                    );
                }
                // The same word in another chunk's slot (a misdirected write) is caught.
                assert!(ChunkWord::decode(enc, i + 1, 10, 0).is_err());
            }
        }
        assert!(ChunkWord::decode(ChunkWord::Large(5).encode(8), 8, 10, 0).is_err());
    }

    #[test]
    fn header_round_trips_and_detects_damage() {
        let geo = Geometry::plan(64 << 20, 8, 64 * 1024, DEFAULT_REDO_BYTES).unwrap();
        let h = Header { uuid: [7; 16], geo };
        let b = h.encode();
        assert_eq!(Header::decode(&b, 0, 64 << 20).unwrap(), h);
        for i in 0..b.len() {
            let mut d = b;
            d[i] ^= 0x10;
            assert!(Header::decode(&d, 0, 64 << 20).is_err(), "byte {i}");
        }
        assert!(Header::decode(&b, 0, 32 << 20).is_err());
    }

    #[test]
    fn geometry_fits_inside_the_region() {
        for len in [2u64 << 20, 3 << 20, 64 << 20, (1 << 30) + 12345] {
            let g = Geometry::plan(len, 4, 64 * 1024, DEFAULT_REDO_BYTES).unwrap();
            assert!(g.zone_end() <= len);
            assert!(g.chunk_table_off + g.chunk_count * 8 <= g.zone_off);
            assert!(len - g.zone_end() < CHUNK_SIZE + 4096 + 8 * (len / CHUNK_SIZE));
        }
        assert!(Geometry::plan(1 << 20, 64, DEFAULT_LANE_BYTES, DEFAULT_REDO_BYTES).is_err());
    }
}

// ------------------------------------------------------------------------------------------
// Field tables of the format documents (`docs/format/heap.md`, `docs/format/undo-log.md`),
// checked against the documents and against the real encoding by `tests/format_doc.rs`.

/// A header copy (`heap.md`, table `header`): [`HEADER_CRC_AT`] bytes and the CRC.
#[allow(clippy::items_after_test_module)]
pub const HEADER_FIELDS: &[pmem::layout::Field] = &[
    pmem::layout::Field::new("magic", 0, 8),
    pmem::layout::Field::new("version", 8, 4),
    pmem::layout::Field::new("header_bytes", 12, 4),
    pmem::layout::Field::new("uuid", 16, 16),
    pmem::layout::Field::new("region_len", 32, 8),
    pmem::layout::Field::new("lane_count", 40, 4),
    pmem::layout::Field::new("lane_bytes", 44, 4),
    pmem::layout::Field::new("lanes_off", 48, 8),
    pmem::layout::Field::new("chunk_table_off", 56, 8),
    pmem::layout::Field::new("zone_off", 64, 8),
    pmem::layout::Field::new("chunk_count", 72, 8),
    pmem::layout::Field::new("chunk_size", 80, 8),
    pmem::layout::Field::new("redo_bytes", 88, 4),
    pmem::layout::Field::new("crc32c", HEADER_CRC_AT, 4),
];

/// The root line at [`ROOT_LINE`] (`heap.md`, table `root line`).
pub const ROOT_LINE_FIELDS: &[pmem::layout::Field] = &[
    pmem::layout::Field::new("root_off", 0, 8),
    pmem::layout::Field::new("root_size", 8, 8),
];

/// A chunk-table word, as the bytes of the little-endian u64 (`heap.md`, table `chunk word`).
pub const CHUNK_WORD_FIELDS: &[pmem::layout::Field] = &[
    pmem::layout::Field::new("type", 0, 1),
    pmem::layout::Field::new("class", 1, 1),
    pmem::layout::Field::new("check", 2, 2),
    pmem::layout::Field::new("span", 4, 4),
];

/// The first [`RUN_HEADER`] bytes of a run chunk (`heap.md`, table `run header`).
pub const RUN_HEADER_FIELDS: &[pmem::layout::Field] = &[
    pmem::layout::Field::new("bitmap", 0, RUN_BITMAP_BYTES as usize),
    pmem::layout::Field::new(
        "unused",
        RUN_BITMAP_BYTES as usize,
        (RUN_HEADER - RUN_BITMAP_BYTES) as usize,
    ),
];

/// A lane's state line (`undo-log.md`, table `lane state`).
pub const LANE_STATE_FIELDS: &[pmem::layout::Field] = &[
    pmem::layout::Field::new("state", 0, 8),
    pmem::layout::Field::new("unused", 8, LANE_STATE_BYTES as usize - 8),
];

/// An undo entry's header; its payload follows it (`undo-log.md`, table `undo entry`).
pub const UNDO_ENTRY_FIELDS: &[pmem::layout::Field] = &[
    pmem::layout::Field::new("seq", 0, 8),
    pmem::layout::Field::new("offset", 8, 8),
    pmem::layout::Field::new("len", 16, 4),
    pmem::layout::Field::new("crc32c", 20, 4),
];

/// Bytes of a redo log's header line, at the start of a lane's redo area (`redo-log.md`).
pub const REDO_HEADER_BYTES: u64 = 64;
/// Bytes of a redo entry's header; its payload follows, padded to 8 bytes.
pub const REDO_ENTRY_HEADER_BYTES: u64 = 16;
/// Redo area kinds, the top byte of the header's `state` word.
/// Empty: nothing to do at open.
pub const REDO_EMPTY: u8 = 0;
/// Commits since the last save relied on a save that has not happened (durability on demand).
pub const REDO_UNSAVED: u8 = 1;
/// The log of a transaction caught committing, saved on a power-failure warning.
pub const REDO_SAVED: u8 = 2;
/// The log of a committed transaction whose in-place writes may not be durable yet.
pub const REDO_COMMITTED: u8 = 3;
/// Redo entry tags.
/// Data: write the payload at `offset`.
pub const REDO_DATA: u32 = 0;
/// Set the bits of the 8-byte mask payload in the word at `offset`.
pub const REDO_BIT_OR: u32 = 1;
/// Clear the bits of the 8-byte mask payload in the word at `offset`.
pub const REDO_BIT_ANDNOT: u32 = 2;
/// Store the 8-byte payload as the word at `offset` (a chunk-table word).
pub const REDO_WORD: u32 = 3;
/// A block allocated by the transaction and written directly: the payload is its length
/// (u64) and the CRC-32C of its bytes (u32, then 4 zero bytes). The log counts only if the
/// block holds those bytes.
pub const REDO_FRESH: u32 = 4;

/// A redo log's header line (`redo-log.md`, table `redo header`).
pub const REDO_HEADER_FIELDS: &[pmem::layout::Field] = &[
    pmem::layout::Field::new("state", 0, 8),
    pmem::layout::Field::new("len", 8, 4),
    pmem::layout::Field::new("count", 12, 4),
    pmem::layout::Field::new("crc32c", 16, 4),
    pmem::layout::Field::new("unused", 20, REDO_HEADER_BYTES as usize - 20),
];

/// A redo entry's header (`redo-log.md`, table `redo entry`).
pub const REDO_ENTRY_FIELDS: &[pmem::layout::Field] = &[
    pmem::layout::Field::new("offset", 0, 8),
    pmem::layout::Field::new("len", 8, 4),
    pmem::layout::Field::new("tag", 12, 4),
];
