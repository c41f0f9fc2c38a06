//! Reliable objects: heap objects whose every 8-byte word is stored beside an 8-byte check word
//! of the [`ecc`](crate::ecc) code, so that up to 6 flipped bits in any 16-byte pair (and most
//! patterns of 7) are corrected when the word is read, and what cannot be corrected is reported
//! as [`HeapError::Uncorrectable`] naming the object and the word (DNV Memory's "reliable
//! words"; `docs/dnv.md`, "Reliable objects"; layout in `docs/format/reliable.md`).
//!
//! # Layout
//!
//! A reliable object of `len` logical bytes is one heap block:
//!
//! | bytes            | content                                                         |
//! |------------------|-----------------------------------------------------------------|
//! | 0..8             | [`MAGIC`] (`"KVRELOBJ"`, little endian)                          |
//! | 8..16            | its check word, `ecc::encode(MAGIC)`                            |
//! | 16..24           | `len`, the logical length in bytes (1 ..)                       |
//! | 24..32           | its check word                                                  |
//! | 32 + 16 i .. +8  | logical word `i` (logical bytes `8 i .. 8 i + 8`, little endian) |
//! | 40 + 16 i .. +8  | its check word                                                  |
//!
//! for `i` in `0 .. ceil(len / 8)`; the bytes of the last word past `len` are zero. The
//! object's offset (what [`alloc_reliable`] returns and what the other functions take) is the
//! block's offset.
//!
//! # Reads and writes
//!
//! [`read_reliable`] checks every pair it reads (one CRC-32C instruction per word) and corrects
//! a damaged one; the corrected pair is written back through the transaction, so the repair
//! becomes durable when the transaction commits (and is rolled back with it). Every read
//! checks: a per-transaction "already checked" set would save one CRC per word on a second read
//! of the same word, less than the set lookup costs. [`write_reliable`] encodes the new words;
//! a write that covers only part of a word reads that word first, and the old word must check
//! or be corrected (otherwise the other bytes of the word are unknown and the write fails with
//! the same typed error).
//!
//! # Scrubbing and concurrency
//!
//! [`scrub`] walks every allocated block of a live heap; a block is a reliable object when its
//! first pair decodes (corrected if need be) to [`MAGIC`]. Any other block is never read past
//! its first pair and never written. With `repair`, corrected pairs are written back in a
//! transaction of the scrubber's own. The scrubber holds the heap lock keyed by the object's
//! offset while it checks and repairs one object (a lane first, then the lock: the order
//! transactions use). The typed API ([`Tx::rget`](crate::Tx::rget) and friends) takes the same
//! lock for the rest of the transaction, so a scrubber running beside typed transactions never
//! sees a half-written pair. The raw functions of this module and the C API take no lock: run
//! the scrubber beside them only when their callers hold that lock, or scrub a closed pool
//! (`kavach heap scrub`). [`scrub_medium`] is the read-only walk over a medium.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use pmem::Medium;
use serde::Serialize;

use crate::check::BlockInfo;
use crate::ecc::{self, EccError};
use crate::error::{HeapError, Result};
use crate::layout::{
    CHUNK_SIZE, CLASS_SIZES, ChunkWord, Geometry, RUN_BITMAP_BYTES, RUN_HEADER, blocks_per_run,
};
use crate::raw::{Lane, RawHeap, read_header};

/// The first data word of every reliable object: `"KVRELOBJ"` read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"KVRELOBJ");
/// Bytes of the object header: the magic pair and the length pair.
pub const HEADER_BYTES: u64 = 32;
/// Bytes of one stored pair.
const PAIR: u64 = ecc::PAIR_BYTES as u64;
/// Largest logical length accepted (the block must still fit the heap).
pub const MAX_LEN: u64 = 1 << 40;

/// Logical words of an object of `len` bytes.
pub fn words(len: u64) -> u64 {
    len.div_ceil(8)
}

/// Block bytes needed for an object of `len` logical bytes.
pub fn block_bytes(len: u64) -> u64 {
    HEADER_BYTES + words(len) * PAIR
}

/// The 32 header bytes of an object of `len` bytes.
pub fn header_bytes(len: u64) -> [u8; HEADER_BYTES as usize] {
    let mut h = [0u8; HEADER_BYTES as usize];
    h[0..8].copy_from_slice(&MAGIC.to_le_bytes());
    h[8..16].copy_from_slice(&ecc::encode(MAGIC).to_le_bytes());
    h[16..24].copy_from_slice(&len.to_le_bytes());
    h[24..32].copy_from_slice(&ecc::encode(len).to_le_bytes());
    h
}

/// Region offset of the pair of logical word `i` of the object at `obj`.
pub fn pair_offset(obj: u64, i: u64) -> u64 {
    obj + HEADER_BYTES + i * PAIR
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

fn need_tx(heap: &RawHeap, lane: &Lane) -> Result<()> {
    if heap.tx_mode(lane).is_none() {
        return Err(HeapError::TxState(
            "reliable objects are read and written inside a transaction",
        ));
    }
    Ok(())
}

/// Allocate a reliable object of `len` logical bytes (all zero) in the open transaction on
/// `lane`; returns its offset. The allocation takes effect at commit.
pub fn alloc_reliable(heap: &RawHeap, lane: &mut Lane, len: u64) -> Result<u64> {
    need_tx(heap, lane)?;
    if len == 0 || len > MAX_LEN {
        return Err(HeapError::invalid(
            "reliable object length",
            format!("{len} bytes (expected 1 to {MAX_LEN})"),
        ));
    }
    // Zeroed: the all-zero pair is a valid codeword, so only the header needs encoding.
    let obj = heap.alloc(lane, block_bytes(len), true)?;
    heap.write(lane, obj, &header_bytes(len))?;
    Ok(obj)
}

/// What a header pair held, decoded.
enum HeaderWord {
    Clean(u64),
    Fixed(ecc::Corrected),
    Bad(ecc::Uncorrectable),
}

fn decode_pair(w: u64, e: u64) -> HeaderWord {
    match ecc::correct(w, e) {
        Ok(c) if c.flipped_bits() == 0 => HeaderWord::Clean(c.word),
        Ok(c) => HeaderWord::Fixed(c),
        Err(u) => HeaderWord::Bad(u),
    }
}

/// Does this first pair say "reliable object"? (After correction, if need be.)
fn is_magic(pair: &[u8]) -> Option<Option<ecc::Corrected>> {
    match decode_pair(u64_at(pair, 0), u64_at(pair, 8)) {
        HeaderWord::Clean(w) if w == MAGIC => Some(None),
        HeaderWord::Fixed(c) if c.word == MAGIC => Some(Some(c)),
        _ => None,
    }
}

/// The header of the object at `obj` as the transaction sees it: its logical length. Header
/// pairs that were corrected are written back through the transaction.
fn object_len(heap: &RawHeap, lane: &mut Lane, obj: u64) -> Result<u64> {
    // The block's size, when the allocator knows it: a block allocated by this very
    // transaction is not published yet, and then only the zone bounds the object.
    let size = heap.usable_size(obj);
    heap.check_range(obj, HEADER_BYTES + PAIR)?;
    if let Some(size) = size
        && size < HEADER_BYTES + PAIR
    {
        return Err(HeapError::invalid(
            "reliable object",
            format!(
                "the block at {obj:#x} holds {size} bytes, too few for a reliable object (at least {})",
                HEADER_BYTES + PAIR
            ),
        ));
    }
    let mut h = [0u8; HEADER_BYTES as usize];
    heap.read_tx(lane, obj, &mut h)?;
    let Some(magic_fix) = is_magic(&h[..16]) else {
        return Err(HeapError::corrupt(
            format!("reliable object at {obj:#x}"),
            heap.base() + obj,
            "magic",
            format!("{MAGIC:#018x} with its check word (\"KVRELOBJ\")"),
            format!(
                "{:#018x} / {:#018x} (not a reliable object, or its header is damaged beyond correction)",
                u64_at(&h, 0),
                u64_at(&h, 8)
            ),
        ));
    };
    let len = match decode_pair(u64_at(&h, 16), u64_at(&h, 24)) {
        HeaderWord::Clean(l) => l,
        HeaderWord::Fixed(c) => {
            let mut p = [0u8; 16];
            p[..8].copy_from_slice(&c.word.to_le_bytes());
            p[8..].copy_from_slice(&c.check.to_le_bytes());
            heap.write(lane, obj + 16, &p)?;
            c.word
        }
        HeaderWord::Bad(u) => {
            return Err(HeapError::corrupt(
                format!("reliable object at {obj:#x}"),
                heap.base() + obj + 16,
                "length",
                "a length pair that checks or can be corrected",
                u.to_string(),
            ));
        }
    };
    if magic_fix.is_some() {
        heap.write(lane, obj, &header_bytes(len)[..16])?;
    }
    let fits = match size {
        Some(size) => block_bytes(len) <= size,
        None => heap.check_range(obj, block_bytes(len)).is_ok(),
    };
    if len == 0 || len > MAX_LEN || !fits {
        let room = match size {
            Some(size) => format!("the block holds {size} bytes"),
            None => "the object must end inside the data zone".to_string(),
        };
        return Err(HeapError::corrupt(
            format!("reliable object at {obj:#x}"),
            heap.base() + obj + 16,
            "length",
            format!("1 to {MAX_LEN} bytes, stored in {room}"),
            len,
        ));
    }
    Ok(len)
}

/// The logical length of the reliable object at `obj`.
pub fn len_reliable(heap: &RawHeap, lane: &mut Lane, obj: u64) -> Result<u64> {
    need_tx(heap, lane)?;
    object_len(heap, lane, obj)
}

fn check_span(obj: u64, len: u64, off: u64, n: usize) -> Result<()> {
    if off.checked_add(n as u64).is_none_or(|end| end > len) {
        return Err(HeapError::invalid(
            "reliable object range",
            format!(
                "bytes {off}..{} of the object at {obj:#x}, which holds {len} bytes",
                off.saturating_add(n as u64)
            ),
        ));
    }
    Ok(())
}

fn uncorrectable(heap: &RawHeap, obj: u64, word: u64, detail: String) -> HeapError {
    HeapError::Uncorrectable {
        object: obj,
        word,
        medium_offset: heap.base() + pair_offset(obj, word),
        detail,
    }
}

/// Run `f` on a zeroed scratch buffer of `n` bytes: on the stack when small (the common case,
/// objects of a few words), on the heap otherwise.
fn scratch<R>(n: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    const SMALL: usize = 512;
    if n <= SMALL {
        let mut b = [0u8; SMALL];
        f(&mut b[..n])
    } else {
        f(&mut vec![0u8; n])
    }
}

/// Decode logical words `first .. first + data.len() / 8` of `obj` into `data`, as the
/// transaction sees them, writing corrected pairs back through it. Returns how many words were
/// corrected.
fn read_words(
    heap: &RawHeap,
    lane: &mut Lane,
    obj: u64,
    first: u64,
    data: &mut [u8],
) -> Result<usize> {
    scratch(data.len() * 2, |pairs| {
        heap.read_tx(lane, pair_offset(obj, first), pairs)?;
        match ecc::decode_from(pairs, data) {
            Ok(rep) => {
                for r in &rep.repairs {
                    let at = pair_offset(obj, first + r.index as u64);
                    heap.write(lane, at, &r.pair_bytes())?;
                }
                Ok(rep.repairs.len())
            }
            Err(EccError::Uncorrectable { index, source, .. }) => Err(uncorrectable(
                heap,
                obj,
                first + index as u64,
                source.to_string(),
            )),
            Err(e) => Err(HeapError::invalid("reliable read", e.to_string())),
        }
    })
}

/// Read `buf.len()` logical bytes at byte `off` of the reliable object at `obj`, as the open
/// transaction on `lane` sees them. Every word read is checked; a damaged one is corrected and
/// the corrected pair written back through the transaction. Returns how many words were
/// corrected. A word that cannot be corrected is [`HeapError::Uncorrectable`].
pub fn read_reliable(
    heap: &RawHeap,
    lane: &mut Lane,
    obj: u64,
    off: u64,
    buf: &mut [u8],
) -> Result<usize> {
    need_tx(heap, lane)?;
    let len = object_len(heap, lane, obj)?;
    check_span(obj, len, off, buf.len())?;
    if buf.is_empty() {
        return Ok(0);
    }
    let first = off / 8;
    let last = (off + buf.len() as u64 - 1) / 8;
    let count = last - first + 1;
    if off % 8 == 0 && buf.len() % 8 == 0 {
        return read_words(heap, lane, obj, first, buf);
    }
    scratch((count * 8) as usize, |data| {
        let fixed = read_words(heap, lane, obj, first, data)?;
        let skip = (off - first * 8) as usize;
        buf.copy_from_slice(&data[skip..skip + buf.len()]);
        Ok(fixed)
    })
}

/// Write `data` at logical byte `off` of the reliable object at `obj` in the open transaction
/// on `lane`, re-encoding every word it touches. A partly covered word is read (and checked)
/// first; if it cannot be corrected the write fails with [`HeapError::Uncorrectable`].
pub fn write_reliable(
    heap: &RawHeap,
    lane: &mut Lane,
    obj: u64,
    off: u64,
    data: &[u8],
) -> Result<()> {
    need_tx(heap, lane)?;
    let len = object_len(heap, lane, obj)?;
    check_span(obj, len, off, data.len())?;
    if data.is_empty() {
        return Ok(());
    }
    let end = off + data.len() as u64;
    let first = off / 8;
    let last = (end - 1) / 8;
    let count = last - first + 1;
    let n = (count * 8) as usize;
    scratch(n * 3, |b| {
        let (words_buf, pairs) = b.split_at_mut(n);
        if off % 8 != 0 {
            read_words(heap, lane, obj, first, &mut words_buf[..8])?;
        }
        if end % 8 != 0 && (last != first || off % 8 == 0) {
            read_words(heap, lane, obj, last, &mut words_buf[n - 8..])?;
        }
        let skip = (off - first * 8) as usize;
        words_buf[skip..skip + data.len()].copy_from_slice(data);
        ecc::encode_into(words_buf, pairs)
            .map_err(|e| HeapError::invalid("reliable write", e.to_string()))?;
        heap.write(lane, pair_offset(obj, first), pairs)
    })
}

/// Free the reliable object at `obj` at commit (after checking it is one).
pub fn free_reliable(heap: &RawHeap, lane: &mut Lane, obj: u64) -> Result<()> {
    need_tx(heap, lane)?;
    object_len(heap, lane, obj)?;
    heap.free(lane, obj)
}

// ---- scrubbing ----------------------------------------------------------------------------------

/// Which pair of an object a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    /// The magic pair of the header.
    Magic,
    /// The length pair of the header.
    Length,
    /// Logical word `n` (bytes `8 n .. 8 n + 8`).
    Word(u64),
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Part::Magic => write!(f, "header magic"),
            Part::Length => write!(f, "header length"),
            Part::Word(n) => write!(f, "word {n} (bytes {}..{})", n * 8, n * 8 + 8),
        }
    }
}

/// A damaged pair that was (or, without repair, can be) corrected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Correction {
    /// The object's offset in the heap region.
    pub object: u64,
    /// Which pair.
    pub part: Part,
    /// Medium offset of the pair.
    pub medium_offset: u64,
    /// Flipped bits found in the data word.
    pub data_flips: u32,
    /// Flipped bits found in the check word.
    pub check_flips: u32,
}

/// A pair that cannot be corrected, or a header that makes no sense.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Damage {
    /// The object's offset in the heap region.
    pub object: u64,
    /// Which pair.
    pub part: Part,
    /// Medium offset of the pair.
    pub medium_offset: u64,
    /// What is wrong.
    pub detail: String,
}

/// What a scrub found (and, with repair, did).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ScrubReport {
    /// Allocated blocks looked at.
    pub blocks: u64,
    /// Reliable objects among them.
    pub objects: u64,
    /// Pairs checked (header pairs included).
    pub pairs_checked: u64,
    /// Damaged pairs that are correctable.
    pub corrected: Vec<Correction>,
    /// Whether the corrections were written back.
    pub repaired: bool,
    /// Pairs that cannot be corrected and headers that make no sense.
    pub uncorrectable: Vec<Damage>,
    /// Chunks skipped because their chunk-table word is damaged (`kavach heap check` says more).
    pub skipped_chunks: Vec<u64>,
}

impl ScrubReport {
    /// Nothing damaged at all.
    pub fn is_clean(&self) -> bool {
        self.corrected.is_empty() && self.uncorrectable.is_empty()
    }

    fn merge(&mut self, o: ScrubReport) {
        self.blocks += o.blocks;
        self.objects += o.objects;
        self.pairs_checked += o.pairs_checked;
        self.corrected.extend(o.corrected);
        self.uncorrectable.extend(o.uncorrectable);
    }
}

/// Every allocated block recorded in the persistent chunk table and run bitmaps of the heap in
/// `[base, base + len)`, and the chunks skipped because their table word is damaged.
pub fn allocated_blocks(
    medium: &dyn Medium,
    base: u64,
    len: u64,
) -> Result<(Vec<BlockInfo>, Vec<u64>)> {
    let g = read_header(medium, base, len)?.geo;
    Ok(blocks_of(medium, base, &g))
}

fn blocks_of(medium: &dyn Medium, base: u64, g: &Geometry) -> (Vec<BlockInfo>, Vec<u64>) {
    let mut blocks = Vec::new();
    let mut skipped = Vec::new();
    let mut i = 0;
    while i < g.chunk_count {
        let at = g.chunk_word(i);
        let word = medium.load_u64((base + at) as usize);
        match ChunkWord::decode(word, i, g.chunk_count, base + at) {
            Err(_) => skipped.push(i),
            Ok(ChunkWord::Free) => {}
            Ok(ChunkWord::Run(class)) => {
                let size = u64::from(CLASS_SIZES[class]);
                let mut bm = [0u8; RUN_BITMAP_BYTES as usize];
                medium.read((base + g.chunk(i)) as usize, &mut bm);
                for b in 0..blocks_per_run(class) {
                    if bm[(b / 8) as usize] >> (b % 8) & 1 == 1 {
                        blocks.push(BlockInfo {
                            offset: g.chunk(i) + RUN_HEADER + b * size,
                            size,
                        });
                    }
                }
            }
            Ok(ChunkWord::Large(span)) => {
                blocks.push(BlockInfo {
                    offset: g.chunk(i),
                    size: u64::from(span) * CHUNK_SIZE,
                });
                i += u64::from(span.max(1));
                continue;
            }
        }
        i += 1;
    }
    (blocks, skipped)
}

/// Check one block as stored (`read` reads region offsets). Returns the report and the pairs
/// to write back (region offset, 16 bytes) to repair what is correctable.
fn scrub_block(
    base: u64,
    b: BlockInfo,
    read: &dyn Fn(u64, &mut [u8]),
) -> (ScrubReport, Vec<(u64, [u8; 16])>) {
    let mut rep = ScrubReport {
        blocks: 1,
        ..ScrubReport::default()
    };
    let mut fixes = Vec::new();
    let obj = b.offset;
    if b.size < HEADER_BYTES + PAIR {
        return (rep, fixes);
    }
    let mut h = [0u8; HEADER_BYTES as usize];
    read(obj, &mut h);
    let Some(magic_fix) = is_magic(&h[..16]) else {
        return (rep, fixes);
    };
    rep.objects = 1;
    rep.pairs_checked = 2;
    let pair_of = |c: &ecc::Corrected| {
        let mut p = [0u8; 16];
        p[..8].copy_from_slice(&c.word.to_le_bytes());
        p[8..].copy_from_slice(&c.check.to_le_bytes());
        p
    };
    let mut note = |rep: &mut ScrubReport, part: Part, at: u64, c: &ecc::Corrected| {
        rep.corrected.push(Correction {
            object: obj,
            part,
            medium_offset: base + at,
            data_flips: c.data_flips.count_ones(),
            check_flips: c.check_flips.count_ones(),
        });
        fixes.push((at, pair_of(c)));
    };
    if let Some(c) = magic_fix {
        note(&mut rep, Part::Magic, obj, &c);
    }
    let len = match decode_pair(u64_at(&h, 16), u64_at(&h, 24)) {
        HeaderWord::Clean(l) => l,
        HeaderWord::Fixed(c) => {
            note(&mut rep, Part::Length, obj + 16, &c);
            c.word
        }
        HeaderWord::Bad(u) => {
            rep.uncorrectable.push(Damage {
                object: obj,
                part: Part::Length,
                medium_offset: base + obj + 16,
                detail: u.to_string(),
            });
            return (rep, fixes);
        }
    };
    if len == 0 || len > MAX_LEN || block_bytes(len) > b.size {
        rep.uncorrectable.push(Damage {
            object: obj,
            part: Part::Length,
            medium_offset: base + obj + 16,
            detail: format!(
                "length {len} does not fit the block of {} bytes (at most {} logical bytes)",
                b.size,
                (b.size - HEADER_BYTES) / PAIR * 8
            ),
        });
        return (rep, fixes);
    }
    // Pairs are checked a slice at a time so a big object needs no big buffer.
    const STEP: u64 = 256;
    let n = words(len);
    let mut pairs = Vec::new();
    let mut i = 0;
    while i < n {
        let k = STEP.min(n - i);
        pairs.resize((k * PAIR) as usize, 0);
        read(pair_offset(obj, i), &mut pairs);
        rep.pairs_checked += k;
        let mut from = 0usize;
        while let Ok(Some(rel)) = ecc::first_damaged(&pairs[from * ecc::PAIR_BYTES..]) {
            let j = from + rel;
            let at = j * ecc::PAIR_BYTES;
            let word = i + j as u64;
            match ecc::correct(u64_at(&pairs, at), u64_at(&pairs, at + 8)) {
                Ok(c) => note(&mut rep, Part::Word(word), pair_offset(obj, word), &c),
                Err(u) => rep.uncorrectable.push(Damage {
                    object: obj,
                    part: Part::Word(word),
                    medium_offset: base + pair_offset(obj, word),
                    detail: u.to_string(),
                }),
            }
            from = j + 1;
        }
        i += k;
    }
    (rep, fixes)
}

/// Check every reliable object of the heap in `[base, base + len)` of `medium` without writing
/// anything (the corrections are reported as correctable, not made).
pub fn scrub_medium(medium: &dyn Medium, base: u64, len: u64) -> Result<ScrubReport> {
    let (blocks, skipped) = allocated_blocks(medium, base, len)?;
    let mut rep = ScrubReport {
        skipped_chunks: skipped,
        ..ScrubReport::default()
    };
    let read = |off: u64, buf: &mut [u8]| medium.read((base + off) as usize, buf);
    for b in blocks {
        rep.merge(scrub_block(base, b, &read).0);
    }
    Ok(rep)
}

/// Check every reliable object of an open heap; with `repair`, write the corrections back, one
/// transaction per damaged object. Each object is checked holding a lane and then the heap
/// lock keyed by its offset, which typed transactions on it hold too (see the module
/// documentation).
pub fn scrub(heap: &RawHeap, repair: bool) -> Result<ScrubReport> {
    let (blocks, skipped) = blocks_of(&**heap.medium(), heap.base(), &heap.geometry());
    let mut rep = ScrubReport {
        skipped_chunks: skipped,
        repaired: repair,
        ..ScrubReport::default()
    };
    let read = |off: u64, buf: &mut [u8]| {
        heap.medium().read((heap.base() + off) as usize, buf);
    };
    for b in blocks {
        let mut lane = heap.lane();
        heap.lock_exclusive(b.offset)?;
        // Freed or never committed meanwhile: not ours to look at.
        let live = heap.usable_size(b.offset) == Some(b.size);
        let (r, fixes) = if live {
            scrub_block(heap.base(), b, &read)
        } else {
            (ScrubReport::default(), Vec::new())
        };
        let written = if repair && !fixes.is_empty() {
            heap.begin(&mut lane);
            let w = (|| {
                for (at, p) in &fixes {
                    heap.write(&mut lane, *at, p)?;
                }
                heap.commit(&mut lane)
            })();
            if w.is_err() && heap.tx_mode(&lane).is_some() {
                let _ = heap.abort(&mut lane);
            }
            w
        } else {
            Ok(())
        };
        heap.unlock_exclusive(b.offset)?;
        drop(lane);
        written?;
        rep.merge(r);
    }
    Ok(rep)
}

/// The shared state of a [`Scrubber`].
#[derive(Debug, Default)]
struct Shared {
    stop: Mutex<bool>,
    wake: Condvar,
    rounds: AtomicU64,
    corrected: AtomicU64,
    uncorrectable: AtomicU64,
    failed: AtomicBool,
    last: Mutex<Option<std::result::Result<ScrubReport, String>>>,
}

/// A background thread that scrubs a heap's reliable objects (with repair) every `period`.
#[derive(Debug)]
pub struct Scrubber {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
}

impl Scrubber {
    /// Start scrubbing `heap` now and then every `period`, repairing what can be corrected.
    pub fn spawn(heap: Arc<RawHeap>, period: Duration) -> Scrubber {
        let shared = Arc::new(Shared::default());
        let s = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name("kavach-scrub".into())
            .spawn(move || {
                loop {
                    let r = scrub(&heap, true);
                    if let Ok(rep) = &r {
                        s.corrected
                            .fetch_add(rep.corrected.len() as u64, Ordering::Relaxed);
                        s.uncorrectable
                            .fetch_add(rep.uncorrectable.len() as u64, Ordering::Relaxed);
                    } else {
                        s.failed.store(true, Ordering::Relaxed);
                    }
                    *s.last.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(r.map_err(|e| e.to_string()));
                    s.rounds.fetch_add(1, Ordering::Release);
                    let stop = s.stop.lock().unwrap_or_else(|p| p.into_inner());
                    let (stop, _) = s
                        .wake
                        .wait_timeout_while(stop, period, |st| !*st)
                        .unwrap_or_else(|p| p.into_inner());
                    if *stop {
                        return;
                    }
                }
            })
            .ok();
        Scrubber { shared, handle }
    }

    /// Whether the thread could be started.
    pub fn is_running(&self) -> bool {
        self.handle.as_ref().is_some_and(|h| !h.is_finished())
    }

    /// Completed scrub rounds.
    pub fn rounds(&self) -> u64 {
        self.shared.rounds.load(Ordering::Acquire)
    }

    /// Corrections made so far, over all rounds.
    pub fn corrected(&self) -> u64 {
        self.shared.corrected.load(Ordering::Relaxed)
    }

    /// Uncorrectable findings so far, over all rounds (the same word counts once a round).
    pub fn uncorrectable(&self) -> u64 {
        self.shared.uncorrectable.load(Ordering::Relaxed)
    }

    /// The last round's report (or its error).
    pub fn last(&self) -> Option<std::result::Result<ScrubReport, String>> {
        self.shared
            .last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stop the thread and wait for it (a round under way finishes first).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        *self.shared.stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.shared.wake.notify_all();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Scrubber {
    fn drop(&mut self) {
        self.halt();
    }
}
