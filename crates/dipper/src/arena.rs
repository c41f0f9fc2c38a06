//! The arena: a growable byte image whose pointers are offsets.
//!
//! A DIPPER data structure lives entirely inside one arena. Its pointers are offsets from the
//! arena's start, and the allocator's state (the bump pointer and one free list per size class)
//! is stored in the arena's own header. So the bytes of an arena mean the same thing wherever
//! they are: in DRAM, where the frontend works on them; in a shadow slot in PM, where a
//! checkpoint leaves them; and back in DRAM after recovery copies them in. Copying an arena
//! copies the allocator with it, which is what DIPPER's checkpoint needs (section 4.2.3).
//!
//! An arena can record which 64-byte lines ([`DIRTY_LINE`]) changed since the last
//! [`Arena::take_dirty_lines`] (or, by page, [`Arena::take_dirty`]), so a checkpoint writes
//! only those lines to its slot.
//!
//! Growing an arena costs about what the allocation that needs the room costs: the image is
//! extended to the end of that block rounded up to [`GROW_QUANTUM`]. A new arena's buffer is
//! [`ARENA_RESERVE`] bytes of zeros asked of the system allocator as zeroed memory (`calloc`,
//! which for a buffer this large is a fresh anonymous mapping whose pages the kernel zeroes when
//! they are first touched), and the image is a prefix of it: extending the image inside the
//! buffer writes nothing, and each page is faulted in by the first write that lands on it, one
//! page at a time, not 16 at once by the allocation that crossed a 64 KiB boundary. Past the
//! buffer (an arena larger than the reserve, or one rebuilt by [`Arena::from_image`] from an
//! exact-size image), the buffer grows geometrically and is moved by the system allocator
//! remapping it, not by copying, and the extension is written with zeros (safe Rust cannot
//! know that remapped pages are zero). (Before, an image grew by half its size at a time, up to
//! 256 MiB of zeros written under the shard's lock in one allocation;
//! `crates/dipper/examples/arena_growth.rs` measures both.)
//!
//! Layout of the header (all little-endian `u64`), see `docs/format/dipper.md`:
//!
//! | offset | field |
//! | --- | --- |
//! | 0 | magic [`ARENA_MAGIC`] |
//! | 8 | top: the bump pointer, the end of the highest block ever handed out |
//! | 16 | live: bytes in allocated blocks (class sizes) |
//! | 24 | blocks: number of allocated blocks |
//! | 32..96 | eight user words for the data structure's roots |
//! | 96.. | one free-list head per size class ([`CLASSES`] of them) |

use crate::error::{DipperError, Result};

/// Page size of arenas and shadow slots.
pub const PAGE: usize = 4096;
/// Grain of dirty tracking: a write marks the 64-byte lines it touches (one bit each, one
/// `u64` of bits per page).
pub const DIRTY_LINE: usize = 64;
const _: () = assert!(PAGE / DIRTY_LINE == 64);
/// Magic in an arena's first word (`KVARENA1`).
pub const ARENA_MAGIC: u64 = u64::from_le_bytes(*b"KVARENA1");
/// Offset of the bump pointer.
pub const ARENA_TOP: usize = 8;
/// Offset of the live-bytes counter.
pub const ARENA_LIVE: usize = 16;
/// Offset of the block counter.
pub const ARENA_BLOCKS: usize = 24;
/// Offset of the first user word.
pub const ARENA_USER: usize = 32;
/// Number of user words.
pub const ARENA_USER_WORDS: usize = 8;
/// Offset of the first free-list head.
pub const ARENA_FREE: usize = 96;
/// Number of size classes: 16 classes of 16 B steps up to 256 B, then four per doubling up to
/// [`BLOCK_BYTES_MAX`].
pub const CLASSES: usize = 96;
/// Bytes of the header; the first block starts here.
pub const ARENA_HEADER: usize = 1024;
/// The largest block an arena hands out (256 MiB).
pub const BLOCK_BYTES_MAX: usize = 1 << 28;
/// The largest arena (64 GiB): offsets stay far from overflow.
pub const ARENA_BYTES_MAX: usize = 1 << 36;
/// Smallest arena image.
pub const ARENA_BYTES_MIN: usize = 64 * 1024;
/// An arena's image grows to the end of the block that needs room, rounded up to this.
pub const GROW_QUANTUM: usize = 64 * 1024;
/// Bytes of the zeroed buffer a new arena gets (address space, not memory: its pages are
/// touched only as the image grows into them and data is written there). A buffer this large is
/// a mapping of its own, never a piece of the allocator's heap, so it comes zeroed without being
/// written, and growing it later moves the mapping (mremap) instead of copying the image.
pub const ARENA_RESERVE: usize = 64 << 20;

const _: () = assert!(ARENA_FREE + CLASSES * 8 <= ARENA_HEADER);
const _: () = assert!(ARENA_USER + ARENA_USER_WORDS * 8 == ARENA_FREE);

/// Size class of a request: its index and the block size handed out.
pub fn class_of(bytes: usize) -> Option<(usize, usize)> {
    let bytes = bytes.max(1);
    if bytes > BLOCK_BYTES_MAX {
        return None;
    }
    if bytes <= 256 {
        let idx = bytes.div_ceil(16) - 1;
        return Some((idx, (idx + 1) * 16));
    }
    // 2^p < bytes <= 2^(p+1); four classes in that doubling, steps of 2^(p-2).
    let p = (usize::BITS - 1 - (bytes - 1).leading_zeros()) as usize;
    let step = 1usize << (p - 2);
    let size = bytes.div_ceil(step) * step;
    let idx = 16 + (p - 8) * 4 + (size - (1usize << p)) / step - 1;
    Some((idx, size))
}

/// A growable byte image with an allocator inside it.
pub struct Arena {
    /// The image is `bytes[..len]`. Every byte of `bytes[len..]` is zero and was never written
    /// by the arena (a zeroed buffer's pages there cost nothing until the image grows into
    /// them and they are written).
    bytes: Vec<u8>,
    /// Length of the image (a multiple of [`PAGE`]).
    len: usize,
    /// One word per page, one bit per [`DIRTY_LINE`] of it written since the last
    /// `take_dirty`/`take_dirty_lines`, if tracking is on.
    dirty: Option<Vec<u64>>,
    /// With tracking on: [`Arena::reset`] ran since the last [`Arena::take_reset`].
    was_reset: bool,
}

impl Clone for Arena {
    /// A copy of the image in a buffer of its own, zeroed past the image as a new arena's is
    /// (only the image's bytes are copied).
    fn clone(&self) -> Arena {
        let mut bytes = zeroed(self.bytes.len().max(ARENA_RESERVE));
        bytes[..self.len].copy_from_slice(self.image());
        Arena {
            bytes,
            len: self.len,
            dirty: self.dirty.clone(),
            was_reset: self.was_reset,
        }
    }
}

/// `n` zero bytes from the allocator's zeroed allocation (`vec![0; n]` asks for zeroed memory,
/// which a large buffer gets from a fresh mapping without a byte written).
fn zeroed(n: usize) -> Vec<u8> {
    vec![0u8; n]
}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arena")
            .field("len", &self.len)
            .field("top", &self.top())
            .field("live", &self.live_bytes())
            .field("blocks", &self.blocks())
            .finish()
    }
}

impl Default for Arena {
    fn default() -> Self {
        Self::new()
    }
}

impl Arena {
    /// An empty arena with an initialized header.
    pub fn new() -> Arena {
        let mut a = Arena {
            bytes: zeroed(ARENA_RESERVE),
            len: ARENA_BYTES_MIN,
            dirty: None,
            was_reset: false,
        };
        a.put_u64(0, ARENA_MAGIC);
        a.put_u64(ARENA_TOP, ARENA_HEADER as u64);
        a
    }

    /// Empty the arena as [`Arena::new`] makes it: the smallest image, a fresh header (user
    /// words zero, no blocks, no free lists), whatever it held before. An arena that grew keeps
    /// its length otherwise (freed blocks stay below the top), so a state machine that drops all
    /// of a shard's data calls this to give the space back: the shard's image is then the size
    /// of a new one, and what is written into it afterwards lays it out exactly as in a new
    /// arena. With page tracking on, every page counts as written.
    pub fn reset(&mut self) {
        self.bytes = zeroed(ARENA_RESERVE);
        self.len = ARENA_BYTES_MIN;
        if let Some(lines) = self.dirty.as_mut() {
            lines.clear();
            lines.resize(ARENA_BYTES_MIN / PAGE, u64::MAX);
            self.was_reset = true;
        }
        self.put_u64(0, ARENA_MAGIC);
        self.put_u64(ARENA_TOP, ARENA_HEADER as u64);
    }

    /// Rebuild an arena from an image (a shadow slot's pages), validating its header.
    ///
    /// The image must be page-sized, carry the magic, and have a bump pointer and free-list
    /// heads inside it. Blocks are not walked here: their owner validates its structures.
    pub fn from_image(bytes: Vec<u8>) -> Result<Arena> {
        let bad = |field: &'static str, expected: String, found: String| DipperError::Corrupt {
            structure: "arena header",
            offset: 0,
            field,
            expected,
            found,
        };
        let len = bytes.len();
        if len < ARENA_BYTES_MIN || len % PAGE != 0 || len > ARENA_BYTES_MAX {
            return Err(bad(
                "length",
                format!("a multiple of {PAGE} between {ARENA_BYTES_MIN} and {ARENA_BYTES_MAX}"),
                len.to_string(),
            ));
        }
        let mut a = Arena {
            bytes,
            len,
            dirty: None,
            was_reset: false,
        };
        if a.bytes.capacity() < ARENA_RESERVE {
            a.bytes.reserve_exact(ARENA_RESERVE - len);
        }
        if a.get_u64(0) != ARENA_MAGIC {
            return Err(bad(
                "magic",
                format!("{ARENA_MAGIC:#018x}"),
                format!("{:#018x}", a.get_u64(0)),
            ));
        }
        let top = a.top();
        if top < ARENA_HEADER || top > len || top % 16 != 0 {
            return Err(bad(
                "top",
                format!("16-aligned within {ARENA_HEADER}..={len}"),
                top.to_string(),
            ));
        }
        for idx in 0..CLASSES {
            let head = a.get_u64(ARENA_FREE + idx * 8) as usize;
            if head != 0 && (head < ARENA_HEADER || head >= top || head % 16 != 0) {
                return Err(bad(
                    "free-list head",
                    format!("0 or a 16-aligned block below top {top}"),
                    format!("{head} (class {idx})"),
                ));
            }
        }
        Ok(a)
    }

    /// Start (or keep) recording written lines.
    pub fn track_dirty(&mut self) {
        if self.dirty.is_none() {
            self.dirty = Some(vec![0; self.pages()]);
        }
    }

    /// Stop recording written pages.
    pub fn stop_tracking(&mut self) {
        self.dirty = None;
        self.was_reset = false;
    }

    /// Whether [`Arena::reset`] ran since the last call while pages were tracked, and clear
    /// that. A copy of the image kept page by page (a shadow slot) may then hold pages the
    /// arena no longer has, or old bytes where the emptied arena has zeros it never wrote:
    /// such a copy must be written whole.
    pub fn take_reset(&mut self) -> bool {
        std::mem::take(&mut self.was_reset)
    }

    /// Pages written since the last call (ascending), and clear the record (of their lines
    /// too). Empty if tracking is off.
    pub fn take_dirty(&mut self) -> Vec<usize> {
        self.take_dirty_lines()
            .into_iter()
            .map(|(p, _)| p)
            .collect()
    }

    /// Pages written since the last call (ascending), each with the mask of its
    /// [`DIRTY_LINE`]-byte lines written (bit `i`: bytes `64 * i..64 * (i + 1)` of the page;
    /// never 0), and clear the record. Empty if tracking is off.
    pub fn take_dirty_lines(&mut self) -> Vec<(usize, u64)> {
        let Some(lines) = self.dirty.as_mut() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (page, word) in lines.iter_mut().enumerate() {
            let m = std::mem::take(word);
            if m != 0 {
                out.push((page, m));
            }
        }
        out
    }

    /// Length of the image in bytes (a multiple of [`PAGE`]).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: an arena always holds its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Number of pages in the image.
    pub fn pages(&self) -> usize {
        self.len / PAGE
    }

    /// Pages below the bump pointer: the pages a block was ever handed out from. The pages
    /// above are zero (never written), so a slot need not hold them.
    pub fn used_pages(&self) -> usize {
        self.top().div_ceil(PAGE).clamp(1, self.pages())
    }

    /// The bytes of page `page`.
    pub fn page(&self, page: usize) -> &[u8] {
        &self.image()[page * PAGE..(page + 1) * PAGE]
    }

    /// The whole image.
    pub fn image(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// The whole image, to write (never the zeros past it).
    fn image_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[..self.len]
    }

    /// The bump pointer.
    pub fn top(&self) -> usize {
        self.get_u64(ARENA_TOP) as usize
    }

    /// Bytes in allocated blocks.
    pub fn live_bytes(&self) -> u64 {
        self.get_u64(ARENA_LIVE)
    }

    /// Number of allocated blocks.
    pub fn blocks(&self) -> u64 {
        self.get_u64(ARENA_BLOCKS)
    }

    /// User word `i` (a root of the data structure).
    pub fn user(&self, i: usize) -> u64 {
        assert!(i < ARENA_USER_WORDS);
        self.get_u64(ARENA_USER + i * 8)
    }

    /// Set user word `i`.
    pub fn set_user(&mut self, i: usize, v: u64) {
        assert!(i < ARENA_USER_WORDS);
        self.put_u64(ARENA_USER + i * 8, v)
    }

    /// Allocate a block of at least `bytes` bytes, 16-aligned. Its contents are unspecified.
    pub fn alloc(&mut self, bytes: usize) -> Result<u64> {
        let (idx, size) = class_of(bytes).ok_or(DipperError::TooLarge {
            what: "arena block",
            bytes,
            max: BLOCK_BYTES_MAX,
        })?;
        let head_at = ARENA_FREE + idx * 8;
        let head = self.get_u64(head_at);
        let off = if head != 0 {
            let next = self.get_u64(head as usize);
            self.put_u64(head_at, next);
            head
        } else {
            let top = self.top();
            let end = top + size;
            if end > ARENA_BYTES_MAX {
                return Err(DipperError::TooLarge {
                    what: "arena",
                    bytes: end,
                    max: ARENA_BYTES_MAX,
                });
            }
            self.ensure_len(end);
            self.put_u64(ARENA_TOP, end as u64);
            top as u64
        };
        self.put_u64(ARENA_LIVE, self.live_bytes() + size as u64);
        self.put_u64(ARENA_BLOCKS, self.blocks() + 1);
        Ok(off)
    }

    /// Return a block of `bytes` bytes (the size it was allocated with) to its class.
    pub fn free(&mut self, off: u64, bytes: usize) {
        let (idx, size) = class_of(bytes).expect("freeing a block no allocation could return");
        assert!(
            off as usize >= ARENA_HEADER && off as usize + size <= self.top() && off % 16 == 0,
            "freeing {off} (+{size}) outside the arena's blocks"
        );
        let head_at = ARENA_FREE + idx * 8;
        let head = self.get_u64(head_at);
        self.put_u64(off as usize, head);
        self.put_u64(head_at, off);
        self.put_u64(ARENA_LIVE, self.live_bytes() - size as u64);
        self.put_u64(ARENA_BLOCKS, self.blocks() - 1);
    }

    /// Allocate a block and copy `data` into it.
    pub fn alloc_copy(&mut self, data: &[u8]) -> Result<u64> {
        let off = self.alloc(data.len())?;
        self.write(off as usize, data);
        Ok(off)
    }

    fn ensure_len(&mut self, end: usize) {
        if end <= self.len {
            return;
        }
        // The image grows by what the allocation needs, rounded up to GROW_QUANTUM. Inside the
        // zeroed buffer that is all: the bytes are already zeros. Past it, the buffer is
        // extended with zeros written for the new part only (bounded by the allocation, not by
        // the image); the buffer behind it grows geometrically (Vec's amortized doubling), and
        // a large buffer is its own mapping, which the allocator moves with mremap, without
        // copying.
        let new_len = end.next_multiple_of(GROW_QUANTUM).min(ARENA_BYTES_MAX);
        if new_len > self.bytes.len() {
            self.bytes.resize(new_len, 0);
        }
        self.len = new_len;
        if let Some(lines) = self.dirty.as_mut() {
            lines.resize(new_len / PAGE, 0);
        }
    }

    fn mark(&mut self, off: usize, len: usize) {
        if let Some(lines) = self.dirty.as_mut()
            && len > 0
        {
            let (first, last) = (off / DIRTY_LINE, (off + len - 1) / DIRTY_LINE);
            let (p0, p1) = (first / 64, last / 64);
            for (page, word) in lines[p0..=p1].iter_mut().enumerate() {
                let lo = if page == 0 { first % 64 } else { 0 };
                let hi = if page == p1 - p0 { last % 64 } else { 63 };
                *word |= (u64::MAX >> (63 - hi)) & (u64::MAX << lo);
            }
        }
    }

    /// Read a little-endian `u64`.
    pub fn get_u64(&self, off: usize) -> u64 {
        u64::from_le_bytes(self.image()[off..off + 8].try_into().expect("8 bytes"))
    }

    /// Write a little-endian `u64`.
    pub fn put_u64(&mut self, off: usize, v: u64) {
        self.image_mut()[off..off + 8].copy_from_slice(&v.to_le_bytes());
        self.mark(off, 8);
    }

    /// Read a little-endian `u32`.
    pub fn get_u32(&self, off: usize) -> u32 {
        u32::from_le_bytes(self.image()[off..off + 4].try_into().expect("4 bytes"))
    }

    /// Write a little-endian `u32`.
    pub fn put_u32(&mut self, off: usize, v: u32) {
        self.image_mut()[off..off + 4].copy_from_slice(&v.to_le_bytes());
        self.mark(off, 4);
    }

    /// Borrow `len` bytes at `off`.
    pub fn bytes(&self, off: usize, len: usize) -> &[u8] {
        &self.image()[off..off + len]
    }

    /// Copy `data` to `off`.
    pub fn write(&mut self, off: usize, data: &[u8]) {
        self.image_mut()[off..off + data.len()].copy_from_slice(data);
        self.mark(off, data.len());
    }

    /// Move `len` bytes from `src` to `dst` (ranges may overlap).
    pub fn copy_within(&mut self, src: usize, len: usize, dst: usize) {
        self.image_mut().copy_within(src..src + len, dst);
        self.mark(dst, len);
    }

    /// Zero `len` bytes at `off`.
    pub fn zero(&mut self, off: usize, len: usize) {
        self.image_mut()[off..off + len].fill(0);
        self.mark(off, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_monotonic_and_cover_every_size() {
        let mut last = class_of(1).unwrap();
        for bytes in (1..=70_000).chain([BLOCK_BYTES_MAX - 1, BLOCK_BYTES_MAX]) {
            let (idx, size) = class_of(bytes).unwrap();
            assert!(size >= bytes && size % 16 == 0, "{bytes} -> {size}");
            assert!(idx < CLASSES);
            assert!(idx >= last.0 && size >= last.1);
            if idx == last.0 {
                assert_eq!(size, last.1, "one size per class");
            }
            // Waste is at most a quarter of the block (or 15 bytes for small blocks).
            assert!(size - bytes <= (bytes / 4).max(15), "{bytes} -> {size}");
            last = (idx, size);
        }
        assert_eq!(class_of(BLOCK_BYTES_MAX).unwrap().0, CLASSES - 1);
        assert!(class_of(BLOCK_BYTES_MAX + 1).is_none());
    }

    #[test]
    fn alloc_free_reuse_and_counters() {
        let mut a = Arena::new();
        let x = a.alloc(100).unwrap();
        let y = a.alloc(100).unwrap();
        assert_ne!(x, y);
        assert_eq!(a.blocks(), 2);
        assert_eq!(a.live_bytes(), 224);
        a.free(x, 100);
        assert_eq!(
            a.alloc(110).unwrap(),
            x,
            "same class reuses the freed block"
        );
        let big = a.alloc(1 << 20).unwrap();
        assert!(a.len() >= big as usize + (1 << 20));
        a.free(big, 1 << 20);
        a.free(y, 100);
        a.free(x, 110);
        assert_eq!(a.blocks(), 0);
        assert_eq!(a.live_bytes(), 0);
    }

    #[test]
    fn image_round_trip_keeps_the_allocator() {
        let mut a = Arena::new();
        let x = a.alloc_copy(b"hello").unwrap();
        a.set_user(3, x);
        let _ = a.alloc(48).unwrap();
        a.free(x, 5);
        let mut b = Arena::from_image(a.image().to_vec()).unwrap();
        assert_eq!(b.user(3), x);
        assert_eq!(b.alloc(5).unwrap(), x, "free list survives the copy");
    }

    #[test]
    fn damaged_headers_are_refused_with_the_field_named() {
        let good = Arena::new().image().to_vec();
        type Damage = Box<dyn Fn(&mut Vec<u8>)>;
        let cases: Vec<(Damage, &str)> = vec![
            (Box::new(|b| b[0] ^= 1), "magic"),
            (
                Box::new(|b| b[8..16].copy_from_slice(&8u64.to_le_bytes())),
                "top",
            ),
            (
                Box::new(|b| b[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes())),
                "top",
            ),
            (
                Box::new(|b| b[96..104].copy_from_slice(&5000u64.to_le_bytes())),
                "free-list head",
            ),
            (Box::new(|b| b.truncate(5000)), "length"),
        ];
        for (damage, field) in cases {
            let mut img = good.clone();
            damage(&mut img);
            match Arena::from_image(img) {
                Err(DipperError::Corrupt { field: f, .. }) => assert_eq!(f, field),
                other => panic!("expected {field} corruption, got {other:?}"),
            }
        }
    }

    #[test]
    fn reset_gives_back_the_image_of_a_new_arena() {
        let mut a = Arena::new();
        a.track_dirty();
        a.set_user(2, 7);
        for _ in 0..100 {
            a.alloc(1000).unwrap();
        }
        let x = a.alloc(48).unwrap();
        a.free(x, 48);
        assert!(a.len() > ARENA_BYTES_MIN);
        a.take_dirty();
        a.reset();
        assert_eq!(a.image(), Arena::new().image(), "byte for byte a new arena");
        assert_eq!(
            a.take_dirty(),
            (0..ARENA_BYTES_MIN / PAGE).collect::<Vec<_>>(),
            "every page of the emptied image counts as written"
        );
        assert!(
            a.take_reset() && !a.take_reset(),
            "the reset is reported once"
        );
        // The same allocations lay it out as in a new arena.
        let mut b = Arena::new();
        for n in [48, 1000, 70_000, 16] {
            assert_eq!(a.alloc(n).unwrap(), b.alloc(n).unwrap());
        }
        assert_eq!(a.image(), b.image());
    }

    #[test]
    fn the_image_grows_only_to_the_block_that_needs_room() {
        // No allocation extends the image by more than its block and a quantum of slack, at
        // any size (the old rule grew it by half its length at once).
        let mut a = Arena::new();
        a.track_dirty();
        let mut rng = 0x1234_5678_u64;
        for _ in 0..5_000 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let bytes = if rng >> 58 == 0 {
                (rng >> 20) as usize % (1 << 20)
            } else {
                (rng >> 32) as usize % 2000
            };
            let before = a.len();
            let off = a.alloc(bytes).unwrap() as usize;
            let (_, size) = class_of(bytes).unwrap();
            if a.len() != before {
                assert_eq!(a.len(), (off + size).next_multiple_of(GROW_QUANTUM));
            }
            assert!(a.len() >= off + size);
            a.write(off + size - 1, &[1]);
        }
        assert!(a.len() > 16 << 20, "grew to {}", a.len());
        assert_eq!(a.pages(), a.dirty.as_ref().unwrap().len());
        // An image read back grows the same way.
        let mut b = Arena::from_image(a.image().to_vec()).unwrap();
        let len = b.len();
        let off = b.alloc(100_000).unwrap() as usize;
        let (_, size) = class_of(100_000).unwrap();
        assert_eq!(
            b.len(),
            (off + size).next_multiple_of(GROW_QUANTUM).max(len)
        );
    }

    #[test]
    fn dirty_lines_are_the_lines_written() {
        let mut a = Arena::new();
        let off = a.alloc(3 * PAGE).unwrap() as usize;
        a.track_dirty();
        // One byte: one line. 100 bytes from byte 40 of a line: that line and the next two
        // (the block starts at 1024, a line boundary).
        a.write(off + 5, &[1]);
        a.write(off + PAGE + 40, &[2; 100]);
        // Across a page boundary: the last line of one page and the first of the next.
        let end = (off / PAGE + 2) * PAGE;
        a.write(end - 10, &[3; 20]);
        let d = a.take_dirty_lines();
        let line = |o: usize| (o / PAGE, 1u64 << ((o % PAGE) / DIRTY_LINE));
        let mut want: Vec<(usize, u64)> = Vec::new();
        for (p, m) in [
            line(off + 5),
            line(off + PAGE + 40),
            line(off + PAGE + 100),
            line(off + PAGE + 139),
            line(end - 10),
            line(end + 9),
        ] {
            match want.iter_mut().find(|(q, _)| *q == p) {
                Some(e) => e.1 |= m,
                None => want.push((p, m)),
            }
        }
        want.sort_unstable();
        assert_eq!(d, want);
        assert!(a.take_dirty_lines().is_empty(), "cleared");
        // A whole page written: every line of it.
        a.zero(end, PAGE);
        assert_eq!(a.take_dirty_lines(), vec![(end / PAGE, u64::MAX)]);
        // Growth keeps the record of the old pages and tracks the new ones.
        a.write(off, &[4]);
        let big = a.alloc(1 << 20).unwrap() as usize;
        a.write(big + 3 * PAGE + 64, &[5; 64]);
        let d = a.take_dirty_lines();
        let (p, m) = line(off);
        assert!(
            d.iter().any(|&(q, n)| q == p && n & m != 0),
            "the old page's line (with the header's, changed by the allocation): {d:?}"
        );
        assert_eq!(big % DIRTY_LINE, 0);
        assert!(
            d.contains(&line(big + 3 * PAGE + 64)),
            "one line of a new page: {d:?}"
        );
    }

    /// The three ways an image is held (a new arena's zeroed buffer, grown by moving its
    /// length; an arena rebuilt from an exact-size image, grown by writing zeros; a clone) give
    /// the same bytes as a plain `Vec` that is extended with zeros, through random allocations,
    /// frees, writes, moves, zeroing and resets, and none of them shows bytes past its image.
    #[test]
    fn every_way_of_holding_the_image_matches_a_zero_extended_vec() {
        let mut new = Arena::new();
        new.track_dirty();
        let mut rebuilt = Arena::from_image(Arena::new().image().to_vec()).unwrap();
        rebuilt.track_dirty();
        let mut model: Vec<u8> = Arena::new().image().to_vec();
        let mut clone: Option<Arena> = None;
        let mut live: Vec<(u64, usize)> = Vec::new();
        let mut rng = 0x2728_u64;
        let mut next = |n: u64| {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (rng >> 33) % n
        };
        for step in 0..6_000 {
            let op = next(100);
            fn all<'a>(
                n: &'a mut Arena,
                r: &'a mut Arena,
                c: &'a mut Option<Arena>,
            ) -> Vec<&'a mut Arena> {
                [Some(n), Some(r), c.as_mut()]
                    .into_iter()
                    .flatten()
                    .collect()
            }
            macro_rules! arenas {
                () => {
                    all(&mut new, &mut rebuilt, &mut clone)
                };
            }
            if op < 45 {
                let bytes = if next(50) == 0 {
                    next(300_000) as usize
                } else {
                    1 + next(1_500) as usize
                };
                let mut offs = Vec::new();
                for a in arenas!() {
                    offs.push(a.alloc(bytes).unwrap());
                }
                assert!(offs.windows(2).all(|w| w[0] == w[1]), "step {step}");
                let (_, size) = class_of(bytes).unwrap();
                let end = offs[0] as usize + size;
                if end > model.len() {
                    model.resize(end.next_multiple_of(GROW_QUANTUM), 0);
                }
                // The header moved (top, live, blocks, maybe a free-list head): take it over.
                model[..ARENA_HEADER].copy_from_slice(&new.image()[..ARENA_HEADER]);
                live.push((offs[0], bytes));
            } else if op < 60 && !live.is_empty() {
                let (off, bytes) = live.swap_remove(next(live.len() as u64) as usize);
                for a in arenas!() {
                    a.free(off, bytes);
                }
                model[..ARENA_HEADER].copy_from_slice(&new.image()[..ARENA_HEADER]);
                // The freed block's first word now links the free list.
                model[off as usize..off as usize + 8]
                    .copy_from_slice(&new.image()[off as usize..off as usize + 8]);
            } else if op < 85 && !live.is_empty() {
                let (off, bytes) = live[next(live.len() as u64) as usize];
                let n = 1 + next(bytes.max(1) as u64) as usize;
                let at = off as usize + next((bytes + 1 - n) as u64) as usize;
                let fill = vec![(step % 251) as u8 + 1; n];
                for a in arenas!() {
                    a.write(at, &fill);
                }
                model[at..at + n].copy_from_slice(&fill);
            } else if op < 92 && live.len() >= 2 {
                let (src, sb) = live[next(live.len() as u64) as usize];
                let (dst, db) = live[next(live.len() as u64) as usize];
                let n = sb.min(db);
                if src != dst {
                    for a in arenas!() {
                        a.copy_within(src as usize, n, dst as usize);
                    }
                    model.copy_within(src as usize..src as usize + n, dst as usize);
                }
            } else if op < 96 && !live.is_empty() {
                let (off, bytes) = live[next(live.len() as u64) as usize];
                for a in arenas!() {
                    a.zero(off as usize, bytes);
                }
                model[off as usize..off as usize + bytes].fill(0);
            } else if op < 98 {
                clone = Some(new.clone());
                assert_eq!(clone.as_ref().unwrap().image(), new.image());
            } else if next(4) == 0 {
                for a in arenas!() {
                    a.reset();
                }
                model = Arena::new().image().to_vec();
                live.clear();
            }
            for (what, a) in [("new", &new), ("rebuilt", &rebuilt)]
                .into_iter()
                .chain(clone.as_ref().map(|c| ("clone", c)))
            {
                assert_eq!(a.len(), model.len(), "{what} length, step {step}");
                assert!(a.image() == model.as_slice(), "{what} bytes, step {step}");
                assert_eq!(a.pages(), a.dirty.as_ref().unwrap().len(), "{what}");
            }
        }
        assert!(
            new.len() > ARENA_BYTES_MIN * 16,
            "the images grew: {}",
            new.len()
        );
    }

    #[test]
    fn reads_and_writes_past_the_image_are_refused_inside_the_buffer() {
        // The zeroed buffer is larger than the image; an access past the image must still fail
        // as it did when the buffer was exactly the image (a bad offset never reads zeros).
        let a = Arena::new();
        assert!(a.bytes.len() > a.len());
        let end = a.len();
        assert!(std::panic::catch_unwind(|| a.get_u64(end - 4)).is_err());
        assert!(std::panic::catch_unwind(|| a.bytes(end, 1).len()).is_err());
        let mut b = Arena::new();
        assert!(
            std::panic::catch_unwind(move || {
                b.write(end - 1, &[1, 2]);
            })
            .is_err()
        );
    }

    #[test]
    fn dirty_pages_are_recorded_and_cleared() {
        let mut a = Arena::new();
        a.track_dirty();
        assert!(a.take_dirty().is_empty());
        let off = a.alloc(3 * PAGE).unwrap() as usize;
        a.write(off + PAGE, &[1; 10]);
        let d = a.take_dirty();
        assert!(d.contains(&0), "header page (top moved)");
        assert!(d.contains(&((off + PAGE) / PAGE)));
        assert!(a.take_dirty().is_empty());
    }
}
