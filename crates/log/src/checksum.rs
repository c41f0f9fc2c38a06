//! CRC-32C of payloads: the `crc32c` crate's SSE4.2 loop for short inputs, `crc-fast`'s
//! carry-less-multiply folding (PCLMULQDQ / VPCLMULQDQ, chosen at run time) for long ones, from
//! the size [`pmem::tune`] chose for this machine (`crc_fold_min`: calibrated, cached or
//! overridden with `KAVACH_TUNE`). Both compute the same CRC-32C (Castagnoli, reflected, init
//! and xorout 0xffffffff), so the on-media value does not depend on which one ran.

/// Inputs at least this long go to the folding implementation.
#[inline]
pub fn fold_min() -> usize {
    pmem::tune::crc32c_fold_min()
}

/// Continue the CRC-32C `crc` over `data` (as `crc32c::crc32c_append` does).
#[inline]
pub fn append(crc: u32, data: &[u8]) -> u32 {
    pmem::tune::crc32c_append_tuned(crc, data)
}

/// [`append`] with the folding threshold given: every threshold gives the same value.
#[inline]
pub fn append_with(fold_min: usize, crc: u32, data: &[u8]) -> u32 {
    pmem::tune::crc32c_append_with(fold_min, crc, data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmem::rng::SplitMix64;

    #[test]
    fn every_threshold_gives_the_crc32c_crate_value_for_every_length_and_seed() {
        let mut rng = SplitMix64::new(11);
        let data: Vec<u8> = (0..70_000).map(|_| rng.next_u64() as u8).collect();
        let lengths = (0..2100).chain([4095, 4096, 4097, 65_535, 65_536, 70_000]);
        for len in lengths {
            let seed = rng.next_u64() as u32;
            let start = rng.below(64) as usize;
            let end = (start + len).min(data.len());
            let slice = &data[start..end];
            let want = crc32c::crc32c_append(seed, slice);
            assert_eq!(append(seed, slice), want, "length {}", slice.len());
            for t in [0, 64, 1024, 4096, usize::MAX] {
                assert_eq!(
                    append_with(t, seed, slice),
                    want,
                    "length {} at {t}",
                    slice.len()
                );
            }
        }
    }
}
