//! The checksums and the arithmetic that updates them from a diff.
//!
//! Every checksum is a CRC-32C that starts from a *seed* binding identity: the pool UUID, what
//! the bytes are (a data page, a parity page, a line, a checksum block) and their number. A page
//! written to the wrong place, or a checksum block copied over another, fails its check.
//!
//! CRC-32C is affine in its input: for two messages `a` and `b` of the same length continued
//! from the same seed, `crc(a) ^ crc(b)` depends only on `a ^ b`. So when one 64-byte line of a
//! page changes, the page checksum moves by the CRC of the line's diff (started from a zero
//! register) carried across the zero bytes that follow the line to the end of the page. That
//! carry is a linear map of the 32-bit register, one per line slot, precomputed here as 32
//! column vectors. This is how eager mode keeps page checksums without re-reading pages
//! (TVARAK, section III-B).

use crate::layout::{LINE_BYTES, LINES_PER_PAGE};
use pmem::Uuid;
use pmem::layout::PAGE_SIZE;
use std::sync::OnceLock;

/// What a checksum covers; the tag is part of its seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Tag {
    /// A data page (number = data page index).
    DataPage = b'D',
    /// A parity page (number = stripe index).
    ParityPage = b'P',
    /// A line of a data page (number = page index * 64 + line).
    Line = b'L',
    /// A block of the page checksum array (number = block index).
    PageBlock = b'B',
    /// A block of the parity checksum array.
    ParityBlock = b'Q',
    /// A header copy (number = copy; 2 was the retired shadow record's).
    Meta = b'M',
}

/// The seed for the checksum of object `number` of kind `tag` in pool `uuid`.
pub fn seed(uuid: &Uuid, tag: Tag, number: u64) -> u32 {
    let mut id = [0u8; 25];
    id[..16].copy_from_slice(&uuid.0);
    id[16] = tag as u8;
    id[17..].copy_from_slice(&number.to_le_bytes());
    crc32c::crc32c(&id)
}

/// The checksum of `bytes` as object `number` of kind `tag`.
pub fn checksum(uuid: &Uuid, tag: Tag, number: u64, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(seed(uuid, tag, number), bytes)
}

/// The CRC register after `bytes`, started from zero and without the final inversion: the
/// linear part of CRC-32C.
fn register_of(bytes: &[u8]) -> u32 {
    !crc32c::crc32c_append(u32::MAX, bytes)
}

/// The register after carrying `state` across `zeros` zero bytes.
fn carry(state: u32, zeros: usize) -> u32 {
    static ZEROS: [u8; PAGE_SIZE] = [0; PAGE_SIZE];
    !crc32c::crc32c_append(!state, &ZEROS[..zeros])
}

/// For each line slot, the 32 columns of the linear map "carry to the end of the page".
fn slot_maps() -> &'static [[u32; 32]; LINES_PER_PAGE] {
    static MAPS: OnceLock<Box<[[u32; 32]; LINES_PER_PAGE]>> = OnceLock::new();
    MAPS.get_or_init(|| {
        let mut maps = Box::new([[0u32; 32]; LINES_PER_PAGE]);
        for (slot, map) in maps.iter_mut().enumerate() {
            let zeros = PAGE_SIZE - LINE_BYTES * (slot + 1);
            for (bit, col) in map.iter_mut().enumerate() {
                *col = carry(1 << bit, zeros);
            }
        }
        maps
    })
}

/// How a page checksum changes when the line at `slot` changes by `diff` (old XOR new): XOR
/// the result into the old checksum. Holds for data and parity pages alike.
pub fn page_delta(slot: usize, diff: &[u8; LINE_BYTES]) -> u32 {
    let map = &slot_maps()[slot];
    let mut reg = register_of(diff);
    let mut out = 0u32;
    while reg != 0 {
        let bit = reg.trailing_zeros();
        out ^= map[bit as usize];
        reg &= reg - 1;
    }
    out
}

/// XOR `src` into `dst` (same length), eight bytes at a time.
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len());
    let mut d = dst.chunks_exact_mut(8);
    let mut s = src.chunks_exact(8);
    for (a, b) in (&mut d).zip(&mut s) {
        let x = u64::from_ne_bytes(a.try_into().unwrap_or([0; 8]))
            ^ u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]));
        a.copy_from_slice(&x.to_ne_bytes());
    }
    for (a, b) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *a ^= b;
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
    fn the_delta_of_a_line_moves_the_page_checksum_exactly() {
        let uuid = Uuid([7; 16]);
        let mut rng = SplitMix64::new(1);
        let mut page = vec![0u8; PAGE_SIZE];
        random(&mut rng, &mut page);
        let mut sum = checksum(&uuid, Tag::DataPage, 42, &page);
        for _ in 0..500 {
            let slot = rng.below(LINES_PER_PAGE as u64) as usize;
            let mut new = [0u8; LINE_BYTES];
            random(&mut rng, &mut new);
            // Sometimes change only a few bytes, as a small store would.
            if rng.chance(500_000) {
                new.copy_from_slice(&page[slot * 64..slot * 64 + 64]);
                new[rng.below(64) as usize] ^= 1 << rng.below(8);
            }
            let mut diff = [0u8; LINE_BYTES];
            diff.copy_from_slice(&page[slot * 64..slot * 64 + 64]);
            xor_into(&mut diff, &new);
            sum ^= page_delta(slot, &diff);
            page[slot * 64..slot * 64 + 64].copy_from_slice(&new);
            assert_eq!(
                sum,
                checksum(&uuid, Tag::DataPage, 42, &page),
                "slot {slot}"
            );
        }
    }

    #[test]
    fn seeds_bind_identity() {
        let a = Uuid([1; 16]);
        let b = Uuid([2; 16]);
        let page = vec![9u8; PAGE_SIZE];
        let base = checksum(&a, Tag::DataPage, 3, &page);
        assert_ne!(base, checksum(&b, Tag::DataPage, 3, &page), "pool");
        assert_ne!(base, checksum(&a, Tag::DataPage, 4, &page), "page number");
        assert_ne!(base, checksum(&a, Tag::ParityPage, 3, &page), "kind");
    }

    #[test]
    fn xor_handles_any_length() {
        let mut a = vec![0xf0u8; 21];
        let b = vec![0x0fu8; 21];
        xor_into(&mut a, &b);
        assert!(a.iter().all(|&x| x == 0xff));
    }
}
