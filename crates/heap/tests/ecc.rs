//! The reliable-word code (`heap::ecc`): its CRC form, exhaustive single and double flips, random
//! flips of 1 to 8 bits at a reduced count (the full campaign is `ecc_campaign` in kavach-bench),
//! the minimum distance that the guarantees rest on, and the buffer helpers.

use heap::ecc::{
    self, Ambiguity, EccError, MAX_FLIPS, PAIR_BYTES, check, correct, correct_within, crc32c_raw,
    decode_from, encode, encode_into, first_damaged,
};

/// SplitMix64: a small deterministic generator, so every run injects the same patterns.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// `k` distinct bit positions among the 128 of a pair, as (data mask, check mask).
    fn flips(&mut self, k: u32) -> (u64, u64) {
        let mut mask = 0u128;
        while mask.count_ones() < k {
            mask |= 1u128 << self.below(128);
        }
        (mask as u64, (mask >> 64) as u64)
    }
}

fn flip(word: u64, check: u64, bits: (u64, u64)) -> (u64, u64) {
    (word ^ bits.0, check ^ bits.1)
}

fn sample_words(rng: &mut Rng) -> Vec<u64> {
    let mut words = vec![0, u64::MAX, 1, 1 << 63, 0x5555_5555_AAAA_AAAA];
    words.extend((0..5).map(|_| rng.next()));
    words
}

#[test]
fn zero_pair_is_a_codeword() {
    assert_eq!(crc32c_raw(0), 0);
    assert_eq!(encode(0), 0);
    assert!(check(0, 0));
    let fix = correct(0, 0).unwrap();
    assert_eq!((fix.word, fix.check, fix.flipped_bits()), (0, 0, 0));
}

#[test]
fn crc_is_the_raw_linear_form_of_crc32c() {
    // The standard CRC-32C starts from all ones and inverts at the end; over 8 bytes that only
    // adds a constant, the standard CRC of eight zero bytes.
    let offset = crc32c::crc32c(&[0u8; 8]);
    let mut rng = Rng(1);
    for _ in 0..10_000 {
        let w = rng.next();
        assert_eq!(
            crc32c_raw(w) ^ offset,
            crc32c::crc32c(&w.to_le_bytes()),
            "{w:#x}"
        );
        let v = rng.next();
        assert_eq!(crc32c_raw(w ^ v), crc32c_raw(w) ^ crc32c_raw(v));
        assert_eq!(encode(w ^ v), encode(w) ^ encode(v));
        assert_eq!(
            crc32c_raw(w),
            ecc::crc32c_raw_portable(w),
            "hardware and table disagree at {w:#x}"
        );
    }
}

#[test]
fn check_word_layout() {
    // E = C || D with D = crc(W) and C = A ^ B ^ D, A the high half of W.
    let mut rng = Rng(2);
    for _ in 0..1000 {
        let w = rng.next();
        let e = encode(w);
        let d = crc32c_raw(w);
        assert_eq!(e as u32, d);
        assert_eq!((e >> 32) as u32, (w >> 32) as u32 ^ w as u32 ^ d);
        assert!(check(w, e));
        assert!(!check(w, e ^ 1));
    }
}

#[test]
fn every_single_and_double_flip_is_corrected() {
    let mut rng = Rng(3);
    for w in sample_words(&mut rng) {
        let e = encode(w);
        for i in 0..128u32 {
            let one = if i < 64 {
                (1u64 << i, 0)
            } else {
                (0, 1u64 << (i - 64))
            };
            let (sw, se) = flip(w, e, one);
            assert!(!check(sw, se));
            let fix = correct(sw, se).unwrap_or_else(|err| panic!("bit {i} of {w:#x}: {err}"));
            assert_eq!((fix.word, fix.check, fix.flipped_bits()), (w, e, 1));
            assert_eq!((fix.data_flips, fix.check_flips), one);
            for j in i + 1..128u32 {
                let two = if j < 64 {
                    (one.0 | 1u64 << j, one.1)
                } else {
                    (one.0, one.1 | 1u64 << (j - 64))
                };
                let (sw, se) = flip(w, e, two);
                let fix =
                    correct(sw, se).unwrap_or_else(|err| panic!("bits {i},{j} of {w:#x}: {err}"));
                assert_eq!((fix.word, fix.check), (w, e), "bits {i},{j} of {w:#x}");
                assert_eq!(fix.flipped_bits(), 2);
            }
        }
    }
}

#[derive(Debug, Default)]
struct Tally {
    corrected: u32,
    uncorrectable: u32,
    miscorrected: u32,
    undetected: u32,
}

fn campaign(k: u32, trials: u32, seed: u64, limit: u32) -> Tally {
    let mut rng = Rng(seed);
    let mut t = Tally::default();
    for _ in 0..trials {
        let w = rng.next();
        let e = encode(w);
        let (sw, se) = flip(w, e, rng.flips(k));
        if check(sw, se) {
            t.undetected += 1;
            continue;
        }
        match correct_within(sw, se, limit) {
            Ok(fix) if (fix.word, fix.check) == (w, e) => t.corrected += 1,
            Ok(fix) => {
                // Whatever comes back must at least be a codeword close to what was stored.
                assert!(check(fix.word, fix.check));
                assert!(fix.flipped_bits() <= limit);
                t.miscorrected += 1;
            }
            Err(_) => t.uncorrectable += 1,
        }
    }
    t
}

const TRIALS: u32 = 10_000;

#[test]
fn random_flips_up_to_six_are_all_corrected() {
    for k in 1..=6 {
        let t = campaign(k, TRIALS, 100 + u64::from(k), MAX_FLIPS);
        assert_eq!(t.corrected, TRIALS, "k = {k}: {t:?}");
    }
}

#[test]
fn seven_flips_are_mostly_corrected_and_never_wrongly() {
    let t = campaign(7, TRIALS, 107, MAX_FLIPS);
    assert_eq!((t.undetected, t.miscorrected), (0, 0), "{t:?}");
    // Expected about 1e-5 uncorrectable; allow a generous margin.
    assert!(t.corrected >= TRIALS - 10, "{t:?}");
}

#[test]
fn eight_flips_are_always_detected_and_rarely_if_ever_corrected() {
    let t = campaign(8, TRIALS, 108, MAX_FLIPS);
    assert_eq!((t.undetected, t.corrected), (0, 0), "{t:?}");
    // A wrong correction needs all 8 flips inside one 14-bit codeword (about 1 in 10^6).
    assert!(t.miscorrected <= 1, "{t:?}");
}

#[test]
fn a_lower_limit_never_miscorrects_up_to_thirteen_minus_the_limit() {
    for limit in [3u32, 5] {
        for k in 1..=(13 - limit) {
            let t = campaign(k, 2_000, 200 + u64::from(k), limit);
            assert_eq!(
                (t.undetected, t.miscorrected),
                (0, 0),
                "limit {limit} k {k}: {t:?}"
            );
            if k <= limit {
                assert_eq!(t.corrected, 2_000, "limit {limit} k {k}: {t:?}");
            } else {
                assert_eq!(t.uncorrectable, 2_000, "limit {limit} k {k}: {t:?}");
            }
        }
    }
}

#[test]
fn uncorrectable_reasons() {
    // A pair with no pattern of at most 7 flips: a whole data word overwritten.
    let mut rng = Rng(5);
    let w = rng.next();
    let e = encode(w);
    let stray = rng.next();
    let err = correct(stray, e).unwrap_err();
    assert_eq!(err.word, stray);
    assert_eq!(err.check, e);
    assert_eq!(err.expected_check, encode(stray));
    assert!(
        matches!(err.reason, Ambiguity::NoPattern { limit: 7 }),
        "{err}"
    );
    assert!(err.to_string().contains("no pattern of at most 7"), "{err}");
    // The limit is capped at MAX_FLIPS.
    let err = correct_within(stray, e, 100).unwrap_err();
    assert!(matches!(err.reason, Ambiguity::NoPattern { limit: 7 }));
}

/// Every nonzero codeword has at least 14 set bits, and some have exactly 14: the fact the
/// guarantees rest on.
///
/// A codeword has an even number of flips in every bit column (its column parity is zero), so a
/// codeword of at most 12 bits touches at most 6 columns and splits into two groups of at most 3
/// columns with equal syndromes. Listing every group of 1 to 3 columns with every nonzero even
/// column pattern (about 1.7 million) and comparing syndromes therefore finds every codeword of
/// at most 12 bits.
#[test]
fn minimum_distance_is_at_least_fourteen() {
    // (syndrome, data bits, check bits) of each even pattern of each column.
    let patterns: [(bool, bool, bool, bool); 7] = [
        (true, true, false, false),
        (true, false, true, false),
        (true, false, false, true),
        (false, true, true, false),
        (false, true, false, true),
        (false, false, true, true),
        (true, true, true, true),
    ];
    let mut items = Vec::new();
    for col in 0..32u32 {
        let mut per_col = Vec::new();
        for &(a, b, c, d) in &patterns {
            let data = (u64::from(a) << (32 + col)) | (u64::from(b) << col);
            let chk = (u64::from(c) << (32 + col)) | (u64::from(d) << col);
            let syn = crc32c_raw(data) ^ chk as u32;
            per_col.push((syn, data, chk));
        }
        items.push(per_col);
    }
    let mut groups: Vec<(u32, u64, u64)> = Vec::with_capacity(1_800_000);
    for (c1, col1) in items.iter().enumerate() {
        for &x in col1 {
            groups.push(x);
            for (c2, col2) in items.iter().enumerate().skip(c1 + 1) {
                for &y in col2 {
                    let xy = (x.0 ^ y.0, x.1 ^ y.1, x.2 ^ y.2);
                    groups.push(xy);
                    for col3 in items.iter().skip(c2 + 1) {
                        for &z in col3 {
                            groups.push((xy.0 ^ z.0, xy.1 ^ z.1, xy.2 ^ z.2));
                        }
                    }
                }
            }
        }
    }
    assert_eq!(groups.len(), 32 * 7 + 496 * 49 + 4960 * 343);
    groups.sort_unstable_by_key(|g| g.0);
    let weight = |d: u64, c: u64| d.count_ones() + c.count_ones();
    let mut lightest = u32::MAX;
    for g in &groups {
        if g.0 == 0 {
            lightest = lightest.min(weight(g.1, g.2));
        }
    }
    for run in groups.chunk_by(|a, b| a.0 == b.0) {
        for (i, x) in run.iter().enumerate() {
            for y in &run[i + 1..] {
                let (d, c) = (x.1 ^ y.1, x.2 ^ y.2);
                if (d, c) != (0, 0) {
                    assert!(
                        check(d, c),
                        "XOR of equal-syndrome groups must be a codeword"
                    );
                    lightest = lightest.min(weight(d, c));
                }
            }
        }
    }
    assert!(lightest >= 14, "a codeword of {lightest} bits exists");
    // And 14 is reached (with a four-flip column among six), so 7 flips is the most that can
    // ever be corrected unambiguously.
    assert_eq!(lightest, 14);
}

fn encoded(words: &[u64]) -> (Vec<u8>, Vec<u8>) {
    let data: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let mut pairs = vec![0u8; data.len() * 2];
    encode_into(&data, &mut pairs).unwrap();
    (data, pairs)
}

#[test]
fn buffers_interleave_and_round_trip() {
    let mut rng = Rng(7);
    let words: Vec<u64> = (0..64).map(|_| rng.next()).collect();
    let (data, pairs) = encoded(&words);
    for (i, &w) in words.iter().enumerate() {
        let at = i * PAIR_BYTES;
        assert_eq!(pairs[at..at + 8], w.to_le_bytes());
        assert_eq!(pairs[at + 8..at + 16], encode(w).to_le_bytes());
    }
    assert_eq!(first_damaged(&pairs), Ok(None));
    let mut out = vec![0xAAu8; data.len()];
    let report = decode_from(&pairs, &mut out).unwrap();
    assert_eq!(out, data);
    assert_eq!(report.words, 64);
    assert!(report.repairs.is_empty());
}

#[test]
fn zeroed_memory_decodes_as_zero_words() {
    let pairs = vec![0u8; 4096];
    let mut out = vec![1u8; 2048];
    let report = decode_from(&pairs, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 0));
    assert!(report.repairs.is_empty());
}

#[test]
fn damaged_words_are_repaired_and_reported() {
    let mut rng = Rng(8);
    let words: Vec<u64> = (0..32).map(|_| rng.next()).collect();
    let (data, mut pairs) = encoded(&words);
    let damaged = [(3usize, 1u32), (4, 6), (17, 3), (31, 5)];
    for &(i, k) in &damaged {
        let (dm, cm) = rng.flips(k);
        let at = i * PAIR_BYTES;
        for b in 0..8 {
            pairs[at + b] ^= dm.to_le_bytes()[b];
            pairs[at + 8 + b] ^= cm.to_le_bytes()[b];
        }
    }
    assert_eq!(first_damaged(&pairs), Ok(Some(3)));
    let mut out = vec![0u8; data.len()];
    let report = decode_from(&pairs, &mut out).unwrap();
    assert_eq!(out, data);
    let found: Vec<(usize, u32)> = report
        .repairs
        .iter()
        .map(|r| (r.index, r.fix.flipped_bits()))
        .collect();
    assert_eq!(found, damaged);
    for r in &report.repairs {
        pairs[r.offset()..r.offset() + PAIR_BYTES].copy_from_slice(&r.pair_bytes());
    }
    assert_eq!(first_damaged(&pairs), Ok(None));
}

#[test]
fn an_uncorrectable_word_is_named() {
    let mut rng = Rng(9);
    let words: Vec<u64> = (0..16).map(|_| rng.next()).collect();
    let (data, mut pairs) = encoded(&words);
    pairs[2 * PAIR_BYTES] ^= 0x01; // word 2: one flip, repairable
    let stray = rng.next().to_le_bytes(); // word 9: overwritten
    pairs[9 * PAIR_BYTES..9 * PAIR_BYTES + 8].copy_from_slice(&stray);
    let mut out = vec![0u8; data.len()];
    match decode_from(&pairs, &mut out) {
        Err(EccError::Uncorrectable {
            index,
            offset,
            repaired_before,
            source,
        }) => {
            assert_eq!((index, offset, repaired_before), (9, 144, 1));
            assert_eq!(source.word, u64::from_le_bytes(stray));
            assert_eq!(source.check, encode(words[9]));
        }
        other => panic!("expected word 9 to be uncorrectable, got {other:?}"),
    }
    assert_eq!(out[..72], data[..72]);
}

#[test]
fn buffer_lengths_are_validated() {
    let mut pairs = vec![0u8; 32];
    assert_eq!(
        encode_into(&[0u8; 12], &mut pairs),
        Err(EccError::DataLength { len: 12 })
    );
    assert_eq!(
        encode_into(&[0u8; 8], &mut pairs),
        Err(EccError::PairLength {
            pairs_len: 32,
            data_len: 8,
            expected: 16
        })
    );
    let mut out = vec![0u8; 24];
    assert!(matches!(
        decode_from(&pairs, &mut out),
        Err(EccError::PairLength { expected: 48, .. })
    ));
    assert_eq!(
        first_damaged(&[0u8; 24]),
        Err(EccError::PairsLength { len: 24 })
    );
    let err = EccError::PairLength {
        pairs_len: 32,
        data_len: 8,
        expected: 16,
    };
    assert!(err.to_string().contains("expected 16 bytes"), "{err}");
}
