//! Reliable words: an 8-byte check word beside every 8-byte data word, able to find and repair
//! several flipped bits in the 16-byte pair (the error-correcting code of DNV Memory, SYSTOR '18,
//! section 3.2; `docs/dnv.md`, "Reliable words (ECC)").
//!
//! # The code
//!
//! A data word `W` (64 bits) is read as two 32-bit halves, `A` (bits 63..32) and `B` (bits
//! 31..0). Its check word `E` has two halves as well:
//!
//! - `D` (bits 31..0 of `E`) is the CRC-32C (Castagnoli polynomial) of the eight little-endian
//!   bytes of `W`, started from 0 and with no final inversion. This is exactly what the SSE4.2
//!   `crc32` instruction computes from a zero accumulator. Without the usual start value and final
//!   inversion the CRC is linear over XOR: `crc(x ^ y) == crc(x) ^ crc(y)`, and `crc(0) == 0`.
//! - `C` (bits 63..32 of `E`) is `A ^ B ^ D`, a parity over the other three halves, bit column
//!   by bit column (as RAID 5 does across disks).
//!
//! Because the CRC is linear and `crc(0) == 0`, the all-zero pair is a valid codeword: freshly
//! zeroed persistent memory needs no encoding pass. The code is linear as a whole, so the XOR of
//! two codewords is a codeword, and the guarantees below follow from its minimum distance.
//!
//! # Finding the error
//!
//! A stored pair that fails the check is corrected by searching for the lightest error pattern
//! that explains it. Two 32-bit quantities describe what is wrong:
//!
//! - the *syndrome* `S = crc(W) ^ D`: any error pattern `(eW, eD)` that turns the stored pair
//!   into a codeword must satisfy `crc(eW) ^ eD == S`. By linearity `crc(eW)` is the XOR of the
//!   CRCs of its single bits, 64 values computed once at compile time, so testing a candidate
//!   costs a few XORs and no CRC computation;
//! - the *column parity* `F = A ^ B ^ C ^ D`. In bit column `p` the four error bits
//!   `(eA_p, eB_p, eC_p, eD_p)` must have odd weight where `F_p` is set (1 or 3 flips: 8
//!   choices) and even weight where it is clear (0, 2 or 4 flips: 8 choices). So every
//!   candidate has `f + 2u` flips in all, where `f` is the number of set bits of `F`.
//!
//! The search deepens level by level: first every pattern of exactly `f` flips, then `f + 2`,
//! `f + 4`, `f + 6`, never beyond [`MAX_FLIPS`] = 7. At the first level holding any pattern with
//! the right syndrome the search stops: exactly one such pattern is applied; two or more mean the
//! pair is ambiguous and is reported as uncorrectable. Two shortcuts keep the search short
//! without changing what it finds: the last one or two columns outside `F` are not enumerated
//! but looked up in tables keyed by the syndrome still unexplained, and the first level (one
//! flip in each column of `F`) splits those columns in two halves that meet in the middle.
//!
//! # What it guarantees, and what it does not
//!
//! The lightest nonzero codeword of this code has 14 set bits (an exhaustive search over every
//! pattern of at most 12 bits finds none; `tests/ecc.rs` repeats that search, and
//! `ecc_campaign --distance` in kavach-bench lists the 14-bit ones). From that:
//!
//! - every pattern of up to 6 flipped bits anywhere in the 128-bit pair is corrected, and a
//!   correction is never wrong for up to 7 flipped bits;
//! - 7 flipped bits are corrected except when they form half of a 14-bit codeword; then two
//!   7-bit patterns explain the pair equally well and it is reported as uncorrectable. There are
//!   335 codewords of 14 bits, so this happens to 1,149,720 of the C(128, 7) possible 7-bit
//!   patterns, 1.2163 in 10^5 (the paper saw 12,163 failures in 10^9 injections);
//! - every pattern of up to 13 flipped bits is *detected* (the pair fails [`check`]), but with
//!   the default limit of 7 a pattern of 8 or more flips can sit 6 or 7 bits away from a
//!   different codeword and is then "corrected" into that wrong codeword. For 8 flips this needs
//!   all 8 to lie inside one 14-bit codeword: 7.04 in 10^7 of random 8-bit patterns. It
//!   cannot be avoided while every 6-bit pattern is corrected: the two patterns are the same
//!   stored pair. A caller that prefers certain detection over correction passes a lower limit
//!   to [`correct_within`]: with limit `t`, every pattern of up to `13 - t` flips is either
//!   corrected (when it has at most `t` flips) or reported, never miscorrected (limit 5: corrects
//!   5, detects all of 8);
//! - a stray whole-word write is almost always reported: to be miscorrected the damaged pair
//!   would have to land within 7 bits of some codeword (odds about 5 in 10^9).
//!
//! Repair time grows steeply with the number of flips (see the table in `docs/dnv.md`); the
//! clean check is one `crc32` instruction and a compare.
//!
//! # Storage
//!
//! [`encode_into`] and [`decode_from`] work on interleaved buffers: data word 0 (8 bytes, little
//! endian), its check word (8 bytes, little endian), data word 1, its check word, and so on, 16
//! bytes per pair. A 64-byte cache line holds four data words and their check words.

use std::fmt;

/// Bytes in a data word.
pub const WORD_BYTES: usize = 8;
/// Bytes in a stored pair: the data word followed by its check word.
pub const PAIR_BYTES: usize = 16;
/// The most flipped bits [`correct`] will search for.
pub const MAX_FLIPS: u32 = 7;

/// CRC-32C (Castagnoli), bit-reflected form of 0x1EDC6F41.
const POLY: u32 = 0x82F6_3B78;

const fn byte_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

const BYTE_TABLE: [u32; 256] = byte_table();

/// CRC-32C of `bytes` continued from accumulator `crc`, with no inversion at either end.
const fn crc_bytes(mut crc: u32, bytes: &[u8]) -> u32 {
    let mut i = 0;
    while i < bytes.len() {
        crc = BYTE_TABLE[((crc ^ bytes[i] as u32) & 0xFF) as usize] ^ (crc >> 8);
        i += 1;
    }
    crc
}

/// The table-driven CRC used where SSE4.2 is missing (and to build the tables below).
const fn crc_portable(word: u64) -> u32 {
    crc_bytes(0, &word.to_le_bytes())
}

// Calling a `#[target_feature(enable = "sse4.2")]` function takes an unsafe block, after a
// run-time check that the CPU has SSE4.2. Nothing else in this file is unsafe.
#[allow(unsafe_code)]
mod hw {
    //! The SSE4.2 `crc32` instruction, behind a run-time check of the CPU. Each function returns
    //! `None` (or `false`) when the instruction is not available, and the caller falls back to
    //! the table.

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "sse4.2")]
    fn crc_sse42(word: u64) -> u32 {
        // The instruction's result fits in 32 bits; the upper half is always zero.
        std::arch::x86_64::_mm_crc32_u64(0, word) as u32
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "sse4.2")]
    fn scan_sse42(pairs: &[u8], from: usize) -> Option<usize> {
        super::scan_with(pairs, from, |w| crc_sse42(w))
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "sse4.2")]
    fn encode_sse42(data: &[u8], out: &mut [u8]) {
        super::encode_with(data, out, |w| crc_sse42(w))
    }

    #[cfg(target_arch = "x86_64")]
    fn available() -> bool {
        std::arch::is_x86_feature_detected!("sse4.2")
    }

    /// The raw CRC of `word`, if the CPU has the instruction.
    #[inline]
    pub(super) fn crc(word: u64) -> Option<u32> {
        #[cfg(target_arch = "x86_64")]
        if available() {
            // SAFETY: crc_sse42 needs only SSE4.2, which the CPU was just found to have.
            return Some(unsafe { crc_sse42(word) });
        }
        let _ = word;
        None
    }

    /// `super::scan_with` with the instruction, if the CPU has it.
    pub(super) fn scan(pairs: &[u8], from: usize) -> Option<Option<usize>> {
        #[cfg(target_arch = "x86_64")]
        if available() {
            // SAFETY: scan_sse42 needs only SSE4.2, which the CPU was just found to have.
            return Some(unsafe { scan_sse42(pairs, from) });
        }
        let _ = (pairs, from);
        None
    }

    /// `super::encode_with` with the instruction, if the CPU has it; `false` when not done.
    pub(super) fn encode(data: &[u8], out: &mut [u8]) -> bool {
        #[cfg(target_arch = "x86_64")]
        if available() {
            // SAFETY: encode_sse42 needs only SSE4.2, which the CPU was just found to have.
            unsafe { encode_sse42(data, out) };
            return true;
        }
        let _ = (data, out);
        false
    }
}

/// The CRC-32C of the eight little-endian bytes of `word`, from a zero start and without the
/// final inversion (the raw, linear form; the standard CRC-32C of the same bytes is this value
/// XOR the standard CRC-32C of eight zero bytes). Uses the SSE4.2 instruction when the CPU has
/// it, a table otherwise; both give the same value.
pub fn crc32c_raw(word: u64) -> u32 {
    hw::crc(word).unwrap_or_else(|| crc_portable(word))
}

/// The portable CRC, exposed so tests can compare it with the hardware one.
#[doc(hidden)]
pub fn crc32c_raw_portable(word: u64) -> u32 {
    crc_portable(word)
}

/// The check word of `word` from its CRC `d`.
#[inline(always)]
const fn assemble(word: u64, d: u32) -> u64 {
    let a = (word >> 32) as u32;
    let b = word as u32;
    let c = a ^ b ^ d;
    ((c as u64) << 32) | d as u64
}

/// The check word `E = C || D` of data word `word`. `encode(0) == 0`.
pub fn encode(word: u64) -> u64 {
    assemble(word, crc32c_raw(word))
}

/// Whether `check` is the check word of `word` (no flipped bit that the code can see).
pub fn check(word: u64, check: u64) -> bool {
    encode(word) == check
}

/// A pair made valid again: the corrected words and the bits that were flipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrected {
    /// The corrected data word.
    pub word: u64,
    /// The corrected check word.
    pub check: u64,
    /// The bits of the stored data word that were flipped (XOR with the stored word to repair).
    pub data_flips: u64,
    /// The bits of the stored check word that were flipped.
    pub check_flips: u64,
}

impl Corrected {
    /// How many bits of the pair were repaired (0 when the pair was already valid).
    pub fn flipped_bits(&self) -> u32 {
        self.data_flips.count_ones() + self.check_flips.count_ones()
    }
}

/// Why a pair could not be corrected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ambiguity {
    /// No pattern of at most `limit` flipped bits explains the pair.
    NoPattern {
        /// The largest number of flipped bits searched.
        limit: u32,
    },
    /// At least two patterns of `flips` flipped bits (the fewest that explain the pair at all)
    /// explain it, so the original cannot be told apart.
    Ties {
        /// The number of flipped bits of the tied patterns.
        flips: u32,
    },
}

/// A pair that fails its check and cannot be corrected. The stored words are left as they were.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uncorrectable {
    /// The stored data word.
    pub word: u64,
    /// The stored check word.
    pub check: u64,
    /// The check word the stored data word should have.
    pub expected_check: u64,
    /// Why no single correction was chosen.
    pub reason: Ambiguity,
}

impl fmt::Display for Uncorrectable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "data word {:#018x} has check word {:#018x}, expected {:#018x}; ",
            self.word, self.check, self.expected_check
        )?;
        match self.reason {
            Ambiguity::NoPattern { limit } => {
                write!(f, "no pattern of at most {limit} flipped bits explains it")
            }
            Ambiguity::Ties { flips } => write!(
                f,
                "two or more patterns of {flips} flipped bits explain it equally well"
            ),
        }
    }
}

impl std::error::Error for Uncorrectable {}

/// Checks the pair `(word, check)` and corrects up to [`MAX_FLIPS`] flipped bits in it.
///
/// A valid pair comes back unchanged with no flips. `Err` means the pair is damaged beyond what
/// the code can repair unambiguously; see the module documentation for the exact limits.
pub fn correct(word: u64, check: u64) -> Result<Corrected, Uncorrectable> {
    correct_within(word, check, MAX_FLIPS)
}

/// As [`correct`], searching only patterns of at most `limit` flipped bits (`limit` above
/// [`MAX_FLIPS`] is treated as [`MAX_FLIPS`]). A smaller limit trades correction for detection:
/// with limit `t`, no pattern of at most `13 - t` flips is ever miscorrected.
pub fn correct_within(word: u64, check: u64, limit: u32) -> Result<Corrected, Uncorrectable> {
    let limit = limit.min(MAX_FLIPS);
    let crc = crc32c_raw(word);
    let d = check as u32;
    let c = (check >> 32) as u32;
    let a = (word >> 32) as u32;
    let b = word as u32;
    let syndrome = crc ^ d;
    let parity = a ^ b ^ c ^ d;
    if syndrome == 0 && parity == 0 {
        return Ok(Corrected {
            word,
            check,
            data_flips: 0,
            check_flips: 0,
        });
    }
    let mut search = Search::new(parity);
    let f = parity.count_ones();
    let mut flips = f;
    while flips <= limit {
        search.run(syndrome, (flips - f) / 2);
        match search.found {
            0 => flips += 2,
            1 => {
                let (data_flips, check_flips) = search.hit;
                return Ok(Corrected {
                    word: word ^ data_flips,
                    check: check ^ check_flips,
                    data_flips,
                    check_flips,
                });
            }
            _ => {
                return Err(Uncorrectable {
                    word,
                    check,
                    expected_check: assemble(word, crc),
                    reason: Ambiguity::Ties { flips },
                });
            }
        }
    }
    Err(Uncorrectable {
        word,
        check,
        expected_check: assemble(word, crc),
        reason: Ambiguity::NoPattern { limit },
    })
}

// ---- the candidate search ----------------------------------------------------------------------

/// Pattern bits within a bit column: which of the halves A, B, C, D are flipped there.
const PAT_A: usize = 1;
const PAT_B: usize = 2;
const PAT_C: usize = 4;
const PAT_D: usize = 8;

/// Column patterns by weight.
const ODD_ONE: [usize; 4] = [PAT_A, PAT_B, PAT_C, PAT_D];
const ODD_THREE: [usize; 4] = [
    PAT_A | PAT_B | PAT_C,
    PAT_A | PAT_B | PAT_D,
    PAT_A | PAT_C | PAT_D,
    PAT_B | PAT_C | PAT_D,
];
const EVEN_TWO: [usize; 6] = [
    PAT_A | PAT_B,
    PAT_A | PAT_C,
    PAT_A | PAT_D,
    PAT_B | PAT_C,
    PAT_B | PAT_D,
    PAT_C | PAT_D,
];
const EVEN_FOUR: usize = PAT_A | PAT_B | PAT_C | PAT_D;

/// One error pattern within one bit column: the bits it flips and its share of the syndrome.
#[derive(Clone, Copy)]
struct Flip {
    syndrome: u32,
    data: u64,
    check: u64,
}

const fn column_flip(col: usize, pat: usize) -> Flip {
    let mut data = 0u64;
    let mut check = 0u64;
    if pat & PAT_A != 0 {
        data |= 1 << (32 + col);
    }
    if pat & PAT_B != 0 {
        data |= 1 << col;
    }
    if pat & PAT_C != 0 {
        check |= 1 << (32 + col);
    }
    if pat & PAT_D != 0 {
        check |= 1 << col;
    }
    // A flip in D changes the stored CRC directly; a flip in C does not enter the syndrome.
    Flip {
        syndrome: crc_portable(data) ^ (check as u32),
        data,
        check,
    }
}

const fn flip_table() -> [[Flip; 16]; 32] {
    let empty = Flip {
        syndrome: 0,
        data: 0,
        check: 0,
    };
    let mut t = [[empty; 16]; 32];
    let mut col = 0;
    while col < 32 {
        let mut pat = 0;
        while pat < 16 {
            t[col][pat] = column_flip(col, pat);
            pat += 1;
        }
        col += 1;
    }
    t
}

static FLIPS: [[Flip; 16]; 32] = flip_table();

/// Open-addressed table from syndrome to the two-flip column patterns that produce it, for the
/// last step of the search.
const LOOKUP_SLOTS: usize = 1024;

#[derive(Clone, Copy)]
struct Slot {
    syndrome: u32,
    /// Column in bits 0..5, index into `EVEN_TWO` in bits 8..11; `EMPTY` when free.
    entry: u16,
}

const EMPTY: u16 = u16::MAX;

const fn slot_of(syndrome: u32) -> usize {
    (syndrome.wrapping_mul(0x9E37_79B1) >> 22) as usize
}

const fn lookup_table() -> [Slot; LOOKUP_SLOTS] {
    let mut t = [Slot {
        syndrome: 0,
        entry: EMPTY,
    }; LOOKUP_SLOTS];
    let mut col = 0;
    while col < 32 {
        let mut k = 0;
        while k < EVEN_TWO.len() {
            let s = column_flip(col, EVEN_TWO[k]).syndrome;
            let mut i = slot_of(s);
            while t[i].entry != EMPTY {
                i = (i + 1) % LOOKUP_SLOTS;
            }
            t[i] = Slot {
                syndrome: s,
                entry: (col | (k << 8)) as u16,
            };
            k += 1;
        }
        col += 1;
    }
    t
}

static LOOKUP: [Slot; LOOKUP_SLOTS] = lookup_table();

/// Open-addressed table from syndrome to the ways of placing two pairs of flips in even columns:
/// two columns with a two-flip pattern each (17,856 ways) or one column with all four flipped
/// (32 ways). Built on first use (256 KiB).
const PAIR_SLOTS: usize = 1 << 15;

#[derive(Clone, Copy)]
struct PairSlot {
    syndrome: u32,
    /// First column in bits 0..5, its pattern in bits 8..11 (index into `EVEN_TWO`, or 6 for
    /// the four-flip pattern), second column in bits 16..21, its pattern in bits 24..27 (the
    /// second half repeats the first for a four-flip column); `PAIR_EMPTY` when free.
    entry: u32,
}

const PAIR_EMPTY: u32 = u32::MAX;
const FOUR: u32 = 6;

fn pair_slot_of(syndrome: u32) -> usize {
    (syndrome.wrapping_mul(0x9E37_79B1) >> 17) as usize
}

fn pattern_of(index: u32) -> usize {
    if index == FOUR {
        EVEN_FOUR
    } else {
        EVEN_TWO[index as usize]
    }
}

fn pair_table() -> &'static [PairSlot] {
    static TABLE: std::sync::OnceLock<Vec<PairSlot>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = vec![
            PairSlot {
                syndrome: 0,
                entry: PAIR_EMPTY,
            };
            PAIR_SLOTS
        ];
        let mut put = |syndrome: u32, entry: u32| {
            let mut i = pair_slot_of(syndrome);
            while t[i].entry != PAIR_EMPTY {
                i = (i + 1) % PAIR_SLOTS;
            }
            t[i] = PairSlot { syndrome, entry };
        };
        for c1 in 0..32u32 {
            let four = FLIPS[c1 as usize][EVEN_FOUR].syndrome;
            put(four, c1 | FOUR << 8 | c1 << 16 | FOUR << 24);
            for (k1, &p1) in EVEN_TWO.iter().enumerate() {
                let s1 = FLIPS[c1 as usize][p1].syndrome;
                for c2 in c1 + 1..32 {
                    for (k2, &p2) in EVEN_TWO.iter().enumerate() {
                        let s2 = FLIPS[c2 as usize][p2].syndrome;
                        put(
                            s1 ^ s2,
                            c1 | (k1 as u32) << 8 | c2 << 16 | (k2 as u32) << 24,
                        );
                    }
                }
            }
        }
        t
    })
}

/// Levels with one flip per odd column and nothing else are searched by meeting in the middle
/// when there are this many odd columns (fewer are cheap to enumerate; more exceed the limit).
const MEET_FROM: usize = 3;
const MEET_UP_TO: usize = MAX_FLIPS as usize;

/// The search over one level (one total number of flips) of candidate patterns.
struct Search {
    /// The bit columns where `F` is set, in increasing order.
    odd_cols: [u8; 32],
    odd_count: usize,
    /// `F` itself: columns that must get an odd pattern.
    odd_mask: u32,
    /// Valid candidates found at this level (counting stops at 2).
    found: u32,
    /// The first valid candidate: (data flips, check flips).
    hit: (u64, u64),
}

impl Search {
    fn new(parity: u32) -> Search {
        let mut odd_cols = [0u8; 32];
        let mut odd_count = 0;
        for col in 0..32u8 {
            if parity >> col & 1 == 1 {
                odd_cols[odd_count] = col;
                odd_count += 1;
            }
        }
        Search {
            odd_cols,
            odd_count,
            odd_mask: parity,
            found: 0,
            hit: (0, 0),
        }
    }

    /// Counts the candidates with `f + 2 * extra` flips whose syndrome is `syndrome`.
    fn run(&mut self, syndrome: u32, extra: u32) {
        self.found = 0;
        if extra == 0 && (MEET_FROM..=MEET_UP_TO).contains(&self.odd_count) {
            self.meet_in_the_middle(syndrome);
        } else {
            self.odd_stage(0, syndrome, extra, 0, 0);
        }
    }

    /// The level of exactly `f` flips (one flip in each odd column, nothing elsewhere) with the
    /// odd columns split in two: every assignment of the last `f / 2` columns is listed by
    /// syndrome, and each assignment of the first ones looks up the rest it needs. For `f = 7`
    /// that is 4^4 + 4^3 steps instead of 4^7.
    fn meet_in_the_middle(&mut self, syndrome: u32) {
        let tail_cols = self.odd_count / 2;
        let head_cols = self.odd_count - tail_cols;
        let assignment = |cols: &[u8], mut digits: usize| {
            let (mut syn, mut data, mut check) = (0u32, 0u64, 0u64);
            for &col in cols {
                let fl = FLIPS[col as usize][ODD_ONE[digits % 4]];
                digits /= 4;
                syn ^= fl.syndrome;
                data ^= fl.data;
                check ^= fl.check;
            }
            (syn, data, check)
        };
        let cols = self.odd_cols;
        let (head, tail) = cols[..self.odd_count].split_at(head_cols);
        let mut table = [(0u32, 0u64, 0u64); 1 << (2 * (MEET_UP_TO / 2))];
        let table = &mut table[..1 << (2 * tail_cols)];
        for (digits, slot) in table.iter_mut().enumerate() {
            *slot = assignment(tail, digits);
        }
        table.sort_unstable_by_key(|t| t.0);
        for digits in 0..1usize << (2 * head_cols) {
            let (syn, data, check) = assignment(head, digits);
            let want = syndrome ^ syn;
            let first = table.partition_point(|t| t.0 < want);
            for &(_, tail_data, tail_check) in table[first..].iter().take_while(|t| t.0 == want) {
                self.record(data ^ tail_data, check ^ tail_check);
                if self.found >= 2 {
                    return;
                }
            }
        }
    }

    fn record(&mut self, data: u64, check: u64) {
        if self.found == 0 {
            self.hit = (data, check);
        }
        self.found += 1;
    }

    /// Gives odd column `i` (and the ones after it) a one- or three-flip pattern. `rest` is the
    /// syndrome not yet explained, `extra` the pairs of flips still to place.
    fn odd_stage(&mut self, i: usize, rest: u32, extra: u32, data: u64, check: u64) {
        if i == self.odd_count {
            self.even_stage(0, rest, extra, data, check);
            return;
        }
        let col = &FLIPS[self.odd_cols[i] as usize];
        for pat in ODD_ONE {
            let fl = col[pat];
            self.odd_stage(
                i + 1,
                rest ^ fl.syndrome,
                extra,
                data ^ fl.data,
                check ^ fl.check,
            );
            if self.found >= 2 {
                return;
            }
        }
        if extra > 0 {
            for pat in ODD_THREE {
                let fl = col[pat];
                self.odd_stage(
                    i + 1,
                    rest ^ fl.syndrome,
                    extra - 1,
                    data ^ fl.data,
                    check ^ fl.check,
                );
                if self.found >= 2 {
                    return;
                }
            }
        }
    }

    /// Places `extra` pairs of flips in even columns numbered `from` or higher (each chosen
    /// column gets a two-flip pattern, one pair, or the four-flip one, two pairs).
    fn even_stage(&mut self, from: usize, rest: u32, extra: u32, data: u64, check: u64) {
        match extra {
            0 => {
                if rest == 0 {
                    self.record(data, check);
                }
            }
            1 => {
                // One two-flip column left: look up which ones produce `rest`.
                let mut i = slot_of(rest);
                loop {
                    let slot = LOOKUP[i];
                    if slot.entry == EMPTY {
                        break;
                    }
                    if slot.syndrome == rest {
                        let col = (slot.entry & 0xFF) as usize;
                        let pat = EVEN_TWO[(slot.entry >> 8) as usize];
                        if col >= from && self.odd_mask >> col & 1 == 0 {
                            let fl = FLIPS[col][pat];
                            self.record(data ^ fl.data, check ^ fl.check);
                            if self.found >= 2 {
                                return;
                            }
                        }
                    }
                    i = (i + 1) % LOOKUP_SLOTS;
                }
            }
            2 => {
                // Two pairs of flips left: look up the column placements that produce `rest`.
                let table = pair_table();
                let mut i = pair_slot_of(rest);
                loop {
                    let slot = table[i];
                    if slot.entry == PAIR_EMPTY {
                        break;
                    }
                    if slot.syndrome == rest {
                        let c1 = (slot.entry & 0xFF) as usize;
                        let c2 = (slot.entry >> 16 & 0xFF) as usize;
                        let free = |c: usize| c >= from && self.odd_mask >> c & 1 == 0;
                        if free(c1) && free(c2) {
                            let f1 = FLIPS[c1][pattern_of(slot.entry >> 8 & 0xF)];
                            let (mut d, mut c) = (data ^ f1.data, check ^ f1.check);
                            if c2 != c1 {
                                let f2 = FLIPS[c2][pattern_of(slot.entry >> 24 & 0xF)];
                                d ^= f2.data;
                                c ^= f2.check;
                            }
                            self.record(d, c);
                            if self.found >= 2 {
                                return;
                            }
                        }
                    }
                    i = (i + 1) % PAIR_SLOTS;
                }
            }
            _ => {
                for (col, column) in FLIPS.iter().enumerate().skip(from) {
                    if self.odd_mask >> col & 1 == 1 {
                        continue;
                    }
                    for pat in EVEN_TWO {
                        let fl = column[pat];
                        self.even_stage(
                            col + 1,
                            rest ^ fl.syndrome,
                            extra - 1,
                            data ^ fl.data,
                            check ^ fl.check,
                        );
                        if self.found >= 2 {
                            return;
                        }
                    }
                    let fl = column[EVEN_FOUR];
                    self.even_stage(
                        col + 1,
                        rest ^ fl.syndrome,
                        extra - 2,
                        data ^ fl.data,
                        check ^ fl.check,
                    );
                    if self.found >= 2 {
                        return;
                    }
                }
            }
        }
    }
}

// ---- buffers of interleaved pairs --------------------------------------------------------------

/// A problem with a buffer of pairs: a length that does not fit, or a word that cannot be
/// corrected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EccError {
    /// The data buffer is not a whole number of 8-byte words.
    #[error("data buffer of {len} bytes is not a whole number of 8-byte words")]
    DataLength {
        /// Its length in bytes.
        len: usize,
    },
    /// The pair buffer is not twice the size of the data buffer.
    #[error(
        "pair buffer of {pairs_len} bytes does not match a data buffer of {data_len} bytes \
         (expected {expected} bytes: 16 per data word)"
    )]
    PairLength {
        /// Length of the pair buffer in bytes.
        pairs_len: usize,
        /// Length of the data buffer in bytes.
        data_len: usize,
        /// The pair buffer length that would fit.
        expected: usize,
    },
    /// A pair buffer that is not a whole number of 16-byte pairs.
    #[error("pair buffer of {len} bytes is not a whole number of 16-byte pairs")]
    PairsLength {
        /// Its length in bytes.
        len: usize,
    },
    /// Word `index` (at byte `index * 16` of the pair buffer) cannot be corrected.
    #[error("word {index} (pair at byte offset {offset}) cannot be corrected: {source}")]
    Uncorrectable {
        /// The index of the word, counting data words from 0.
        index: usize,
        /// Byte offset of its pair in the pair buffer.
        offset: usize,
        /// Words before it that were repaired (their repairs are lost with this error).
        repaired_before: usize,
        /// The stored pair and why it cannot be corrected.
        source: Uncorrectable,
    },
}

/// A word that [`decode_from`] repaired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repair {
    /// The index of the word, counting data words from 0.
    pub index: usize,
    /// The corrected pair and the flipped bits.
    pub fix: Corrected,
}

impl Repair {
    /// Byte offset of the pair in the pair buffer.
    pub fn offset(&self) -> usize {
        self.index * PAIR_BYTES
    }

    /// The 16 bytes to write back at [`Repair::offset`] to repair the stored pair.
    pub fn pair_bytes(&self) -> [u8; PAIR_BYTES] {
        let mut out = [0u8; PAIR_BYTES];
        out[..WORD_BYTES].copy_from_slice(&self.fix.word.to_le_bytes());
        out[WORD_BYTES..].copy_from_slice(&self.fix.check.to_le_bytes());
        out
    }
}

/// What [`decode_from`] did: how many words it read and which ones it had to repair.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecodeReport {
    /// Words decoded.
    pub words: usize,
    /// Words whose stored pair was damaged and has been corrected in the output (the stored pair
    /// is still damaged until the caller writes [`Repair::pair_bytes`] back).
    pub repairs: Vec<Repair>,
}

#[inline(always)]
fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

/// Writes each word of `data` followed by its check word into `out` (16 bytes per word).
///
/// `data.len()` must be a multiple of 8 and `out.len()` exactly twice `data.len()`.
pub fn encode_into(data: &[u8], out: &mut [u8]) -> Result<(), EccError> {
    check_lengths(data.len(), out.len())?;
    if !hw::encode(data, out) {
        encode_with(data, out, crc_portable);
    }
    Ok(())
}

/// Reads the data words out of the interleaved `pairs` into `data`, checking each against its
/// check word and correcting those that fail (up to [`MAX_FLIPS`] bits each).
///
/// On success `data` holds every (corrected) word and the report lists the repairs, so the
/// caller can write them back to the stored pairs. On an uncorrectable word the error names it;
/// `data` is then filled only up to that word.
pub fn decode_from(pairs: &[u8], data: &mut [u8]) -> Result<DecodeReport, EccError> {
    check_lengths(data.len(), pairs.len())?;
    let words = data.len() / WORD_BYTES;
    let mut report = DecodeReport {
        words,
        repairs: Vec::new(),
    };
    let mut next = 0;
    while next < words {
        let bad = scan(pairs, next).unwrap_or(words);
        for i in next..bad {
            let w = read_u64(pairs, i * PAIR_BYTES);
            data[i * WORD_BYTES..(i + 1) * WORD_BYTES].copy_from_slice(&w.to_le_bytes());
        }
        if bad == words {
            break;
        }
        let at = bad * PAIR_BYTES;
        let w = read_u64(pairs, at);
        let e = read_u64(pairs, at + WORD_BYTES);
        match correct(w, e) {
            Ok(fix) => {
                data[bad * WORD_BYTES..(bad + 1) * WORD_BYTES]
                    .copy_from_slice(&fix.word.to_le_bytes());
                report.repairs.push(Repair { index: bad, fix });
            }
            Err(source) => {
                return Err(EccError::Uncorrectable {
                    index: bad,
                    offset: at,
                    repaired_before: report.repairs.len(),
                    source,
                });
            }
        }
        next = bad + 1;
    }
    Ok(report)
}

/// The index of the first pair in `pairs` whose check fails, or `None` when all pass. This is
/// the clean check of a whole buffer; nothing is corrected.
pub fn first_damaged(pairs: &[u8]) -> Result<Option<usize>, EccError> {
    if pairs.len() % PAIR_BYTES != 0 {
        return Err(EccError::PairsLength { len: pairs.len() });
    }
    Ok(scan(pairs, 0))
}

fn check_lengths(data_len: usize, pairs_len: usize) -> Result<(), EccError> {
    if data_len % WORD_BYTES != 0 {
        return Err(EccError::DataLength { len: data_len });
    }
    let expected = data_len.saturating_mul(2);
    if pairs_len != expected {
        return Err(EccError::PairLength {
            pairs_len,
            data_len,
            expected,
        });
    }
    Ok(())
}

/// First failing pair at or after pair `from` (the buffer length is a multiple of 16).
fn scan(pairs: &[u8], from: usize) -> Option<usize> {
    hw::scan(pairs, from).unwrap_or_else(|| scan_with(pairs, from, crc_portable))
}

#[inline(always)]
fn scan_with(pairs: &[u8], from: usize, crc: impl Fn(u64) -> u32) -> Option<usize> {
    let tail = pairs.get(from * PAIR_BYTES..)?;
    for (k, pair) in tail.chunks_exact(PAIR_BYTES).enumerate() {
        let w = read_u64(pair, 0);
        let e = read_u64(pair, WORD_BYTES);
        if assemble(w, crc(w)) != e {
            return Some(from + k);
        }
    }
    None
}

#[inline(always)]
fn encode_with(data: &[u8], out: &mut [u8], crc: impl Fn(u64) -> u32) {
    for (word, pair) in data
        .chunks_exact(WORD_BYTES)
        .zip(out.chunks_exact_mut(PAIR_BYTES))
    {
        let w = read_u64(word, 0);
        pair[..WORD_BYTES].copy_from_slice(word);
        pair[WORD_BYTES..].copy_from_slice(&assemble(w, crc(w)).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The standard CRC-32C (start and final inversion) of a byte string, through the same table.
    fn standard(bytes: &[u8]) -> u32 {
        !crc_bytes(!0, bytes)
    }

    #[test]
    fn table_matches_published_check_values() {
        // The catalogue check value of CRC-32C and the iSCSI vectors of RFC 3720, B.4.
        assert_eq!(standard(b"123456789"), 0xE306_9283);
        assert_eq!(standard(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(standard(&[0xFFu8; 32]), 0x62A8_AB43);
        let ascending: Vec<u8> = (0u8..32).collect();
        assert_eq!(standard(&ascending), 0x46DD_794E);
    }

    #[test]
    fn hardware_and_table_agree() {
        let mut x = 0x0123_4567_89AB_CDEFu64;
        for _ in 0..10_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            assert_eq!(crc32c_raw(x), crc_portable(x), "word {x:#x}");
        }
        for bit in 0..64 {
            assert_eq!(crc32c_raw(1 << bit), crc_portable(1 << bit));
        }
    }

    #[test]
    fn lookup_table_finds_every_two_flip_column() {
        for (col, column) in FLIPS.iter().enumerate() {
            for (k, &pat) in EVEN_TWO.iter().enumerate() {
                let s = column[pat].syndrome;
                let mut i = slot_of(s);
                let mut seen = false;
                while LOOKUP[i].entry != EMPTY {
                    seen |= LOOKUP[i].syndrome == s && LOOKUP[i].entry == (col | (k << 8)) as u16;
                    i = (i + 1) % LOOKUP_SLOTS;
                }
                assert!(seen, "column {col} pattern {pat:#b}");
            }
        }
    }

    #[test]
    fn pair_table_finds_every_placement_of_two_pairs() {
        let table = pair_table();
        let present = |syndrome: u32, entry: u32| {
            let mut i = pair_slot_of(syndrome);
            while table[i].entry != PAIR_EMPTY {
                if table[i].syndrome == syndrome && table[i].entry == entry {
                    return true;
                }
                i = (i + 1) % PAIR_SLOTS;
            }
            false
        };
        let used = table.iter().filter(|s| s.entry != PAIR_EMPTY).count();
        assert_eq!(used, 32 + 496 * 36);
        for c1 in 0..32u32 {
            let four = FLIPS[c1 as usize][EVEN_FOUR].syndrome;
            assert!(present(four, c1 | FOUR << 8 | c1 << 16 | FOUR << 24));
            for k1 in 0..6u32 {
                for c2 in c1 + 1..32 {
                    for k2 in 0..6u32 {
                        let s = FLIPS[c1 as usize][pattern_of(k1)].syndrome
                            ^ FLIPS[c2 as usize][pattern_of(k2)].syndrome;
                        assert!(present(s, c1 | k1 << 8 | c2 << 16 | k2 << 24));
                    }
                }
            }
        }
    }

    #[test]
    fn meeting_in_the_middle_finds_what_enumeration_finds() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut hits = 0;
        for trial in 0..20_000 {
            // A parity with 3 to 7 ones; half the time a syndrome that some pattern explains.
            let mut parity = 0u32;
            let f = 3 + (trial % 5);
            while parity.count_ones() < f {
                parity |= 1 << (next() % 32);
            }
            let syndrome = if trial % 2 == 0 {
                next() as u32
            } else {
                let mut s = 0;
                for (col, column) in FLIPS.iter().enumerate() {
                    if parity >> col & 1 == 1 {
                        s ^= column[ODD_ONE[(next() % 4) as usize]].syndrome;
                    }
                }
                s
            };
            let mut fast = Search::new(parity);
            fast.run(syndrome, 0);
            let mut slow = Search::new(parity);
            slow.odd_stage(0, syndrome, 0, 0, 0);
            assert_eq!(fast.found.min(2), slow.found.min(2), "parity {parity:#x}");
            if slow.found == 1 {
                assert_eq!(fast.hit, slow.hit);
                hits += 1;
            }
        }
        assert!(hits > 5_000, "{hits}");
    }

    #[test]
    fn portable_buffers_match_hardware_buffers() {
        let data: Vec<u8> = (0..512u32).map(|i| (i * 37 + 11) as u8).collect();
        let mut a = vec![0u8; 1024];
        let mut b = vec![0u8; 1024];
        encode_into(&data, &mut a).unwrap();
        encode_with(&data, &mut b, crc_portable);
        assert_eq!(a, b);
        b[16 * 7 + 3] ^= 0x10;
        assert_eq!(scan_with(&b, 0, crc_portable), Some(7));
        assert_eq!(scan(&b, 0), Some(7));
        assert_eq!(scan(&b, 8), None);
    }
}
