//! CRC-32C of payloads: the `crc32c` crate's SSE4.2 loop for short inputs, `crc-fast`'s
//! carry-less-multiply folding (PCLMULQDQ / VPCLMULQDQ, chosen at run time) for long ones.
//! Both compute the same CRC-32C (Castagnoli, reflected, init and xorout 0xffffffff), so the
//! on-media value does not depend on which one ran.
//!
//! Measured on this machine (2026-11-22): 4 KiB in 73 ns against 171 ns, 64 KiB in 1.02 us
//! against 2.27 us; below 1 KiB the SSE4.2 loop is as fast and has no setup.

/// Inputs at least this long go to `crc-fast`.
const FOLDING_BYTES_MIN: usize = 1024;

/// Continue the CRC-32C `crc` over `data` (as `crc32c::crc32c_append` does).
#[inline]
pub fn append(crc: u32, data: &[u8]) -> u32 {
    if data.len() < FOLDING_BYTES_MIN {
        return crc32c::crc32c_append(crc, data);
    }
    // A finished CRC-32C is the register state complemented; start from that state.
    let mut digest =
        crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    digest.update(data);
    digest.finalize() as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmem::rng::SplitMix64;

    #[test]
    fn both_paths_give_the_crc32c_crate_value_for_every_length_and_seed() {
        let mut rng = SplitMix64::new(11);
        let data: Vec<u8> = (0..70_000).map(|_| rng.next_u64() as u8).collect();
        let lengths = (0..2100).chain([4095, 4096, 4097, 65_535, 65_536, 70_000]);
        for len in lengths {
            let seed = rng.next_u64() as u32;
            let start = rng.below(64) as usize;
            let end = (start + len).min(data.len());
            let slice = &data[start..end];
            assert_eq!(
                append(seed, slice),
                crc32c::crc32c_append(seed, slice),
                "length {}",
                slice.len()
            );
        }
    }
}
