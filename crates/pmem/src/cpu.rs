//! Cache-line write-back, fences and non-temporal copies, chosen once at run time.
//!
//! Stable Rust has intrinsics for `clflush`, `sfence` and the streaming stores, but not for
//! `clwb` or `clflushopt`, so those two are issued with inline assembly after CPUID says the
//! processor has them. Every function here takes raw addresses: the callers (the mapping) check
//! that the range lies inside memory they own.

/// Size of a cache line: the unit of write-back and of the simulator.
pub const CACHE_LINE: usize = 64;

/// The write-back instruction in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FlushInstruction {
    /// Write back, keep the line cached; weakly ordered (needs `sfence`).
    Clwb,
    /// Write back and invalidate; weakly ordered (needs `sfence`).
    Clflushopt,
    /// Write back and invalidate; ordered with other `clflush`es (the fence is then harmless).
    Clflush,
    /// No instruction: each line the loop would write back, each fence and each store of a
    /// non-temporal copy is reported to the persistence simulator behind a
    /// [`crate::recorded::Recorded`] medium. Never chosen by detection.
    Recorded,
}

impl FlushInstruction {
    /// Name as the instruction's mnemonic.
    pub const fn name(self) -> &'static str {
        match self {
            FlushInstruction::Clwb => "clwb",
            FlushInstruction::Clflushopt => "clflushopt",
            FlushInstruction::Clflush => "clflush",
            FlushInstruction::Recorded => "recorded",
        }
    }
}

/// The write-back instruction in force: the one [`crate::tune::current`] chose (the best this
/// CPU has unless a calibration, the cache or an override said otherwise).
/// `KAVACH_FLUSH=clflush|clflushopt|clwb` (or `KAVACH_TUNE=flush=...`) forces one; a request for
/// an instruction the CPU lacks falls back to the best it has.
#[inline]
pub fn flush_instruction() -> FlushInstruction {
    crate::tune::current().flush
}

/// Copy `src` into `dst` (of the same length) and make it durable, timed by the calibration in
/// [`crate::tune`]: with `nontemporal`, streaming stores (head and tail written back with
/// `kind`) then a fence; else ordinary stores, every line written back with `kind`, a fence.
///
/// # Panics
/// If the lengths differ, or `kind` is [`FlushInstruction::Recorded`] (a calibration runs on
/// real memory only).
pub fn copy_and_persist(kind: FlushInstruction, dst: &mut [u8], src: &[u8], nontemporal: bool) {
    assert_eq!(dst.len(), src.len(), "copy_and_persist: lengths differ");
    assert_ne!(
        kind,
        FlushInstruction::Recorded,
        "copy_and_persist on real memory only"
    );
    // SAFETY: `dst` is a live exclusive slice and `src` a live shared one of the same length,
    // so they do not overlap and every access stays inside them; `kind` is a real instruction
    // (the caller took it from CPUID through `tune`).
    unsafe {
        if nontemporal {
            copy_nontemporal_with(kind, dst.as_mut_ptr(), src.as_ptr(), src.len());
        } else {
            std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr(), src.len());
            flush_range_with(kind, dst.as_ptr(), dst.len());
        }
    }
    store_fence();
}

#[cfg(not(target_arch = "x86_64"))]
compile_error!("kavach-pmem supports x86-64 only for now");

/// Write back every cache line that overlaps `[addr, addr + len)`. Does not fence.
///
/// # Safety
/// The range must lie inside one mapping that stays mapped for the duration of the call.
#[inline]
pub unsafe fn flush_range(addr: *const u8, len: usize) {
    // SAFETY: the caller's guarantee is passed on unchanged.
    unsafe { flush_range_with(flush_instruction(), addr, len) }
}

/// [`flush_range`] with the instruction chosen by the caller (a mapping caches
/// [`flush_instruction`] so the hot path skips the lookup).
///
/// # Safety
/// As for [`flush_range`]; `kind` must be an instruction this CPU has (one returned by
/// [`flush_instruction`]), or [`FlushInstruction::Recorded`] inside a recording call.
#[inline(always)]
pub unsafe fn flush_range_with(kind: FlushInstruction, addr: *const u8, len: usize) {
    match kind {
        FlushInstruction::Clwb => each_line(addr, len, |line| {
            // SAFETY: `line` is inside the caller's mapping (rounded down to its cache line,
            // which is mapped too since mappings are page-granular); clwb only writes back.
            unsafe {
                std::arch::asm!("clwb [{0}]", in(reg) line, options(nostack, preserves_flags))
            }
        }),
        FlushInstruction::Clflushopt => each_line(addr, len, |line| {
            // SAFETY: as above; clflushopt writes back and invalidates, contents unchanged.
            unsafe {
                std::arch::asm!("clflushopt [{0}]", in(reg) line, options(nostack, preserves_flags))
            }
        }),
        FlushInstruction::Clflush => each_line(addr, len, |line| {
            // SAFETY: as above; clflush is architecturally always available on x86-64.
            unsafe { std::arch::x86_64::_mm_clflush(line as *const u8) }
        }),
        FlushInstruction::Recorded => each_line(addr, len, crate::recorded::line),
    }
}

/// The write-back loop shared by every instruction (and by the recorded medium, so the simulator
/// sees exactly the lines this rounding produces): `issue` once per cache line overlapping
/// `[addr, addr + len)`, in address order.
#[inline(always)]
fn each_line(addr: *const u8, len: usize, mut issue: impl FnMut(usize)) {
    if len == 0 {
        return;
    }
    let start = addr as usize & !(CACHE_LINE - 1);
    let end = addr as usize + len;
    #[cfg(feature = "canary")]
    let end = if crate::recorded::canary::active(crate::recorded::canary::Mutation::SkipLastLine) {
        end & !(CACHE_LINE - 1)
    } else {
        end
    };
    let mut line = start;
    while line < end {
        issue(line);
        line += CACHE_LINE;
    }
}

/// Order all earlier write-backs and non-temporal stores before later stores.
#[inline]
pub fn store_fence() {
    // SAFETY: sfence has no memory operands and is always available on x86-64 (SSE).
    unsafe { std::arch::x86_64::_mm_sfence() }
}

/// [`store_fence`] for a mapping whose write-backs go through `kind`: under
/// [`FlushInstruction::Recorded`] the fence is also reported to the simulator, whose answer (a
/// simulated power failure) is returned.
#[inline(always)]
pub fn fence_with(kind: FlushInstruction) -> crate::error::Result<()> {
    store_fence();
    if kind == FlushInstruction::Recorded {
        return crate::recorded::fence();
    }
    Ok(())
}

/// Ask for the cache lines of `addr..addr + len` to be loaded (`prefetcht0` per line). A
/// prefetch never faults and changes no memory, so any address is allowed; callers pass
/// ranges of their own mapping.
#[inline]
pub fn prefetch_range(addr: *const u8, len: usize) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    let mut line = (addr as usize) & !(CACHE_LINE - 1);
    let end = (addr as usize).saturating_add(len);
    while line < end {
        // SAFETY: a prefetch is only a hint: it does not fault on any address and writes
        // nothing (SSE is part of x86_64's baseline).
        unsafe { _mm_prefetch(line as *const i8, _MM_HINT_T0) };
        line += CACHE_LINE;
    }
}

/// Copy `len` bytes from `src` to `dst` with non-temporal stores for every whole cache line;
/// the partial lines at the head and tail are copied normally and written back. The caller
/// fences.
///
/// # Safety
/// `dst..dst+len` must be writable mapped memory and `src..src+len` readable; they must not
/// overlap.
pub unsafe fn copy_nontemporal(dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: the caller's guarantee is passed on unchanged; the instruction came from detection.
    unsafe { copy_nontemporal_with(flush_instruction(), dst, src, len) }
}

/// Stream the 64-byte line at `$s` to the line-aligned `$d` with four 16-byte non-temporal
/// stores (loads may be unaligned). Expands inside an `unsafe` block that vouches for both.
macro_rules! stream_line_16 {
    ($s:expr, $d:expr) => {{
        use std::arch::x86_64::{_mm_loadu_si128, _mm_stream_si128};
        let (s, d) = ($s, $d);
        for q in 0..4 {
            _mm_stream_si128(d.add(16 * q).cast(), _mm_loadu_si128(s.add(16 * q).cast()));
        }
    }};
}

/// [`stream_line_16`] with two 32-byte stores; only in code compiled with AVX2 enabled.
macro_rules! stream_line_32 {
    ($s:expr, $d:expr) => {{
        use std::arch::x86_64::{_mm256_loadu_si256, _mm256_stream_si256};
        let (s, d) = ($s, $d);
        let v0 = _mm256_loadu_si256(s.cast());
        let v1 = _mm256_loadu_si256(s.add(32).cast());
        _mm256_stream_si256(d.cast(), v0);
        _mm256_stream_si256(d.add(32).cast(), v1);
    }};
}

/// Stream `len` bytes (a multiple of 64) from `src` to the line-aligned `dst` with 16-byte
/// non-temporal stores, a line per step.
///
/// # Safety
/// `dst..dst+len` writable and 64-byte aligned, `src..src+len` readable, no overlap.
unsafe fn stream_lines_sse2(dst: *mut u8, src: *const u8, len: usize) {
    let mut off = 0;
    while off < len {
        // SAFETY: `off + 64 <= len`; the stores are 16-byte aligned (`dst` is line-aligned),
        // the loads may be unaligned.
        unsafe { stream_line_16!(src.add(off), dst.add(off)) }
        off += CACHE_LINE;
    }
}

/// [`stream_lines_sse2`] with 32-byte stores, four lines per step while four remain: half the
/// store instructions, so the store queue holds twice the bytes (on a Zen 3, one process
/// alternating the two in batches: a 4 KiB copy 397-416 ns against 412-439, 64 KiB 2-3% faster).
///
/// # Safety
/// As for [`stream_lines_sse2`], and the CPU has AVX2.
#[target_feature(enable = "avx2")]
unsafe fn stream_lines_avx2(dst: *mut u8, src: *const u8, len: usize) {
    use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_stream_si256};
    let mut off = 0;
    while off + 4 * CACHE_LINE <= len {
        // SAFETY: `off + 256 <= len`; the stores are 32-byte aligned (`dst` is line-aligned),
        // the loads may be unaligned.
        unsafe {
            let (s, d) = (src.add(off), dst.add(off));
            let v: [__m256i; 8] = std::array::from_fn(|q| _mm256_loadu_si256(s.add(32 * q).cast()));
            for (q, x) in v.into_iter().enumerate() {
                _mm256_stream_si256(d.add(32 * q).cast(), x);
            }
        }
        off += 4 * CACHE_LINE;
    }
    while off < len {
        // SAFETY: `off + 64 <= len`, aligned as above.
        unsafe { stream_line_32!(src.add(off), dst.add(off)) }
        off += CACHE_LINE;
    }
}

/// [`copy_nontemporal`] writing back the head and tail with `kind`. Under
/// [`FlushInstruction::Recorded`] the ordinary stores of the head and tail and the streamed body
/// are also reported to the simulator, each right after the real store.
///
/// # Safety
/// As for [`copy_nontemporal`] and [`flush_range_with`].
pub unsafe fn copy_nontemporal_with(
    kind: FlushInstruction,
    dst: *mut u8,
    src: *const u8,
    len: usize,
) {
    // Only whole cache lines are streamed: a line that ordinary stores also write (the head
    // and tail, which callers such as the log share with a header) would otherwise be
    // evicted from the write-combining buffer in part and read back for the ordinary store.
    const CHUNK: usize = CACHE_LINE;
    let recorded = kind == FlushInstruction::Recorded;
    let head = (dst as usize).wrapping_neg() & (CHUNK - 1);
    if len < head + CHUNK {
        // SAFETY: the caller guarantees both ranges; they do not overlap. `src..src+len` is
        // readable and nothing writes it during the call, so it may be viewed as a slice.
        unsafe {
            std::ptr::copy_nonoverlapping(src, dst, len);
            if recorded {
                crate::recorded::stored(dst as usize, std::slice::from_raw_parts(src, len));
            }
            flush_range_with(kind, dst, len);
        }
        return;
    }
    let body = (len - head) & !(CHUNK - 1);
    let tail = len - head - body;
    // SAFETY: head, body and tail partition [0, len), so every access stays inside the ranges the
    // caller vouched for; `dst + head` is 64-byte aligned and `body` a multiple of 64, as the
    // line streamers require; AVX2 is used only when the CPU has it. The slices handed to the
    // recorder are parts of `src..src+len`, readable and unchanged during the call.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, head);
        if recorded {
            crate::recorded::stored(dst as usize, std::slice::from_raw_parts(src, head));
        }
        flush_range_with(kind, dst, head);
        if std::arch::is_x86_feature_detected!("avx2") {
            stream_lines_avx2(dst.add(head), src.add(head), body);
        } else {
            stream_lines_sse2(dst.add(head), src.add(head), body);
        }
        let off = head + body;
        if recorded {
            crate::recorded::streamed(
                dst.add(head) as usize,
                std::slice::from_raw_parts(src.add(head), body),
            );
        }
        std::ptr::copy_nonoverlapping(src.add(off), dst.add(off), tail);
        if recorded {
            crate::recorded::stored(
                dst.add(off) as usize,
                std::slice::from_raw_parts(src.add(off), tail),
            );
        }
        #[cfg(feature = "canary")]
        if crate::recorded::canary::active(crate::recorded::canary::Mutation::TailNotFlushed) {
            return;
        }
        flush_range_with(kind, dst.add(off), tail);
    }
}

/// Inputs shorter than this go through [`crc32c_append`]'s own loop; longer ones to the
/// `crc32c` crate's three-way loop.
const CRC_SHORT_MAX: usize = 512;

/// CRC-32C `crc` continued over `data`, as `crc32c::crc32c_append(crc, data)`: short inputs
/// (a record header's 16 bytes, a small payload) by a plain SSE4.2 loop without the crate's
/// set-up, long ones by the crate.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    if data.len() < CRC_SHORT_MAX && std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE4.2 (checked just above).
        return unsafe { crc32c_short(crc, data) };
    }
    crc32c::crc32c_append(crc, data)
}

/// # Safety
/// The CPU has SSE4.2.
#[target_feature(enable = "sse4.2")]
unsafe fn crc32c_short(crc: u32, data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u8, _mm_crc32_u64};
    let mut reg = u64::from(!crc);
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        reg = _mm_crc32_u64(reg, u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    let mut r = reg as u32;
    for &b in words.remainder() {
        r = _mm_crc32_u8(r, b);
    }
    !r
}

/// Bytes per lane of the fused copy + CRC: each block streams three lanes while three
/// independent CRC-32C chains run over them, then joins the chains.
const LANE: usize = 1024;

/// Bytes per lane of the short blocks of [`crc32c_raw`] and of the fused copy + CRC.
const SHORT_LANE: usize = 128;

/// Bytes per lane of the fused copy + CRC's last block: one line per lane, so a whole-line
/// copy leaves at most two lines to the unfused path (4,032 bytes, a 4 KiB record's whole lines:
/// before, the last 192 went through a plain copy and one serial CRC chain).
const LINE_LANE: usize = 64;

/// Shift table of one lane length: see [`lane_shift_table`].
type ShiftTable = [[u32; 256]; 4];

/// `t[k][b]`: the CRC-32C register `b << 8k` after `LANE` zero bytes (the register is linear in
/// its start value, so any register shifts by `LANE` bytes with four lookups).
fn lane_shift_table() -> &'static ShiftTable {
    static T: std::sync::OnceLock<Box<ShiftTable>> = std::sync::OnceLock::new();
    T.get_or_init(|| shift_table(LANE))
}

/// [`lane_shift_table`] for `SHORT_LANE`.
fn short_lane_shift_table() -> &'static ShiftTable {
    static T: std::sync::OnceLock<Box<ShiftTable>> = std::sync::OnceLock::new();
    T.get_or_init(|| shift_table(SHORT_LANE))
}

/// [`lane_shift_table`] for `LINE_LANE`.
fn line_lane_shift_table() -> &'static ShiftTable {
    static T: std::sync::OnceLock<Box<ShiftTable>> = std::sync::OnceLock::new();
    T.get_or_init(|| shift_table(LINE_LANE))
}

fn shift_table(lane: usize) -> Box<ShiftTable> {
    // Linear: each entry is the XOR of the shifted single bits it holds.
    let basis: Vec<u32> = (0..32).map(|bit| crc32c_zeros(1 << bit, lane)).collect();
    let mut t = Box::new([[0u32; 256]; 4]);
    for (k, row) in t.iter_mut().enumerate() {
        for (b, cell) in row.iter_mut().enumerate() {
            *cell = (0..8)
                .filter(|j| b & (1 << j) != 0)
                .fold(0, |acc, j| acc ^ basis[8 * k + j]);
        }
    }
    t
}

/// The CRC-32C `crc` continued over the `len` bytes at `src`, read through the raw pointer
/// (8-byte unaligned loads; no reference to the bytes is formed), as
/// `crc32c::crc32c_append(crc, src..src+len)` would give. Three independent CRC chains run over
/// three lanes of each block (1 KiB lanes, then 128-byte lanes), joined by table shifts; the
/// rest runs on one chain. `None` when the CPU lacks SSE4.2 (read the bytes out instead).
///
/// # Safety
/// `src..src+len` must be readable.
pub unsafe fn crc32c_raw(crc: u32, src: *const u8, len: usize) -> Option<u32> {
    if !std::arch::is_x86_feature_detected!("sse4.2") {
        return None;
    }
    let (long, short) = (lane_shift_table(), short_lane_shift_table());
    // SAFETY: the caller vouches for the range; the CPU has SSE4.2 (checked above).
    Some(!unsafe { crc32c_raw_sse42(!crc, src, len, long, short) })
}

/// # Safety
/// As for [`crc32c_raw`], and the CPU has SSE4.2.
#[target_feature(enable = "sse4.2")]
unsafe fn crc32c_raw_sse42(
    mut reg: u32,
    src: *const u8,
    len: usize,
    long: &ShiftTable,
    short: &ShiftTable,
) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u8, _mm_crc32_u64};
    let mut off = 0;
    for (lane, t) in [(LANE, long), (SHORT_LANE, short)] {
        while len - off >= 3 * lane {
            let (mut a, mut b, mut c) = (u64::from(reg), 0u64, 0u64);
            let mut i = 0;
            while i < lane {
                // SAFETY: `off + 2 * lane + i + 8 <= off + 3 * lane <= len`: inside the range.
                unsafe {
                    let p = src.add(off + i);
                    a = _mm_crc32_u64(a, std::ptr::read_unaligned(p.cast::<u64>()));
                    b = _mm_crc32_u64(b, std::ptr::read_unaligned(p.add(lane).cast::<u64>()));
                    c = _mm_crc32_u64(c, std::ptr::read_unaligned(p.add(2 * lane).cast::<u64>()));
                }
                i += 8;
            }
            reg = lane_shift(t, lane_shift(t, a as u32) ^ b as u32) ^ c as u32;
            off += 3 * lane;
        }
    }
    let mut r = u64::from(reg);
    while len - off >= 8 {
        // SAFETY: `off + 8 <= len`.
        r = _mm_crc32_u64(r, unsafe {
            std::ptr::read_unaligned(src.add(off).cast::<u64>())
        });
        off += 8;
    }
    let mut reg = r as u32;
    while off < len {
        // SAFETY: `off < len`.
        reg = _mm_crc32_u8(reg, unsafe { *src.add(off) });
        off += 1;
    }
    reg
}

/// The raw CRC-32C register `reg` after `n` zero bytes (bit by bit: for tables only).
fn crc32c_zeros(mut reg: u32, n: usize) -> u32 {
    const POLY: u32 = 0x82f6_3b78; // Castagnoli, reflected
    for _ in 0..n * 8 {
        reg = if reg & 1 != 0 {
            (reg >> 1) ^ POLY
        } else {
            reg >> 1
        };
    }
    reg
}

#[inline(always)]
fn lane_shift(t: &[[u32; 256]; 4], r: u32) -> u32 {
    t[0][(r & 0xff) as usize]
        ^ t[1][((r >> 8) & 0xff) as usize]
        ^ t[2][((r >> 16) & 0xff) as usize]
        ^ t[3][(r >> 24) as usize]
}

/// Defines a function that streams `blocks` blocks of `3 * L` bytes from `src` to the
/// line-aligned `dst` and runs the raw CRC-32C register `reg` over them (`t` shifts a register by
/// `L` bytes), returning the new register; `L` is a multiple of 64. Per 64-byte line, `$store`
/// streams the line from `$s` to `$d`; the two functions differ only in it.
macro_rules! stream_blocks_fn {
    ($(#[$doc:meta])* $name:ident, $features:literal, |$s:ident, $d:ident| $store:block) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        unsafe fn $name<const L: usize>(
            dst: *mut u8,
            src: *const u8,
            blocks: usize,
            mut reg: u32,
            t: &[[u32; 256]; 4],
        ) -> u32 {
            use std::arch::x86_64::_mm_crc32_u64;
            for blk in 0..blocks {
                let base = blk * 3 * L;
                let (mut a, mut b, mut c) = (u64::from(reg), 0u64, 0u64);
                let mut i = 0;
                while i < L {
                    // SAFETY: every offset is below `base + 3 * L`, inside both ranges; the
                    // stores go to line-aligned addresses (`dst` and L are multiples of 64);
                    // loads are unaligned.
                    unsafe {
                        for (lane, r) in [(0, &mut a), (L, &mut b), (2 * L, &mut c)] {
                            let $s = src.add(base + lane + i);
                            let $d = dst.add(base + lane + i);
                            $store
                            for w in 0..8 {
                                let x = std::ptr::read_unaligned($s.add(8 * w).cast::<u64>());
                                *r = _mm_crc32_u64(*r, x);
                            }
                        }
                    }
                    i += 64;
                }
                reg = lane_shift(t, lane_shift(t, a as u32) ^ b as u32) ^ c as u32;
            }
            reg
        }
    };
}

stream_blocks_fn!(
    /// Blocks of three lanes, streamed with 16-byte stores.
    ///
    /// # Safety
    /// `dst..dst + blocks * 3 * L` writable, 64-byte aligned; `src..` as long, readable; no
    /// overlap; the CPU has SSE4.2.
    stream_blocks_crc32c,
    "sse4.2",
    |s, d| { stream_line_16!(s, d) }
);

stream_blocks_fn!(
    /// Blocks of three lanes, streamed with 32-byte stores: half the store instructions per
    /// line, so the store queue holds twice as many lines ahead and the CRC chains beside it
    /// stall less (64 KiB on a Zen 2: 3.2 us against 3.5 us).
    ///
    /// # Safety
    /// As for [`stream_blocks_crc32c`], and the CPU has AVX2.
    stream_blocks_crc32c_avx2,
    "sse4.2,avx2",
    |s, d| { stream_line_32!(s, d) }
);

/// Stream as many blocks of three `L`-byte lanes as fit in `len - *done` bytes from `src +
/// *done` to `dst + *done`, continuing the raw CRC register `reg` over them (`t` shifts by `L`
/// bytes; 32-byte stores when `wide`); advances `*done` past them.
///
/// # Safety
/// `dst..dst+len` writable with `dst + *done` 64-byte aligned, `src..src+len` readable, no
/// overlap; the CPU has SSE4.2, and AVX2 when `wide`.
unsafe fn fused_blocks<const L: usize>(
    wide: bool,
    t: &ShiftTable,
    dst: *mut u8,
    src: *const u8,
    len: usize,
    done: &mut usize,
    reg: u32,
) -> u32 {
    let blocks = (len - *done) / (3 * L);
    // SAFETY: the blocks end at or before `len`, inside the caller's ranges; `L` is a multiple
    // of 64, so `dst + *done` stays line-aligned for the next call.
    unsafe {
        let (d, s) = (dst.add(*done), src.add(*done));
        let reg = if wide {
            stream_blocks_crc32c_avx2::<L>(d, s, blocks, reg, t)
        } else {
            stream_blocks_crc32c::<L>(d, s, blocks, reg, t)
        };
        *done += blocks * 3 * L;
        reg
    }
}

/// [`copy_nontemporal_with`] that also returns the CRC-32C `crc` continued over the bytes
/// copied (as `crc32c::crc32c_append(crc, src..src+len)` would), computed while the streaming
/// stores drain: for long copies the CRC costs little beyond the copy.
///
/// # Safety
/// As for [`copy_nontemporal_with`].
pub unsafe fn copy_nontemporal_crc32c_with(
    kind: FlushInstruction,
    dst: *mut u8,
    src: *const u8,
    len: usize,
    crc: u32,
) -> u32 {
    let wide = std::arch::is_x86_feature_detected!("avx2");
    // SAFETY: the caller's guarantee; `wide` only when the CPU has AVX2.
    unsafe { copy_nontemporal_crc32c_stores(kind, dst, src, len, crc, wide) }
}

/// [`copy_nontemporal_crc32c_with`] streaming 32-byte stores when `wide`, 16-byte ones if not.
///
/// # Safety
/// As for [`copy_nontemporal_with`]; `wide` only on a CPU with AVX2.
unsafe fn copy_nontemporal_crc32c_stores(
    kind: FlushInstruction,
    dst: *mut u8,
    src: *const u8,
    len: usize,
    crc: u32,
    wide: bool,
) -> u32 {
    let head = (dst as usize).wrapping_neg() & (CACHE_LINE - 1);
    let fused = kind != FlushInstruction::Recorded
        && len >= head + 3 * SHORT_LANE
        && std::arch::is_x86_feature_detected!("sse4.2");
    // SAFETY: every range below is a part of `[0, len)` of the caller's ranges; `src` is
    // readable and unchanged during the call, so parts of it may be viewed as slices.
    unsafe {
        if !fused {
            copy_nontemporal_with(kind, dst, src, len);
            return crc32c_append(crc, std::slice::from_raw_parts(src, len));
        }
        copy_nontemporal_with(kind, dst, src, head);
        let crc = crc32c_append(crc, std::slice::from_raw_parts(src, head));
        // Blocks of three 1 KiB lanes, then of three 128-byte lanes, then of three lines, then
        // the rest (under three lines) unfused.
        let mut done = head;
        let mut reg = !crc;
        reg = fused_blocks::<LANE>(wide, lane_shift_table(), dst, src, len, &mut done, reg);
        let t = short_lane_shift_table();
        reg = fused_blocks::<SHORT_LANE>(wide, t, dst, src, len, &mut done, reg);
        let t = line_lane_shift_table();
        reg = fused_blocks::<LINE_LANE>(wide, t, dst, src, len, &mut done, reg);
        copy_nontemporal_with(kind, dst.add(done), src.add(done), len - done);
        crc32c_append(!reg, std::slice::from_raw_parts(src.add(done), len - done))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nontemporal_copy_copies_every_length_and_alignment() {
        let src: Vec<u8> = (0..2100u32).map(|i| (i * 7 + 3) as u8).collect();
        for offset in 0..17 {
            for len in [
                0, 1, 15, 16, 17, 31, 32, 33, 64, 100, 127, 128, 129, 200, 255, 256, 319, 320, 383,
                511, 512, 700, 1000, 2047, 2048, 2080,
            ] {
                let mut dst = vec![0u8; 2100];
                // SAFETY: both ranges are inside live vectors and do not overlap.
                unsafe { copy_nontemporal(dst.as_mut_ptr().add(offset), src.as_ptr(), len) };
                store_fence();
                assert_eq!(
                    &dst[offset..offset + len],
                    &src[..len],
                    "offset {offset} len {len}"
                );
                assert!(dst[..offset].iter().all(|&b| b == 0));
                assert!(dst[offset + len..].iter().all(|&b| b == 0));
            }
        }
    }

    #[test]
    fn both_line_streamers_copy_every_whole_line_count() {
        let src: Vec<u8> = (0..1300u32).map(|i| (i * 13 + 5) as u8).collect();
        // A line-aligned destination inside a larger buffer, to see nothing past it is written.
        let mut buf = vec![0u8; 1400 + 64];
        let at = buf.as_ptr().align_offset(64);
        for lines in 0..=20 {
            let len = lines * 64;
            for wide in [false, true] {
                if wide && !std::arch::is_x86_feature_detected!("avx2") {
                    continue;
                }
                buf.fill(0);
                // SAFETY: `at..at + len` lies inside `buf` and is line-aligned; `src` is longer
                // than `len`; the two do not overlap; AVX2 only where the CPU has it.
                unsafe {
                    let d = buf.as_mut_ptr().add(at);
                    if wide {
                        stream_lines_avx2(d, src.as_ptr(), len);
                    } else {
                        stream_lines_sse2(d, src.as_ptr(), len);
                    }
                }
                store_fence();
                assert_eq!(
                    &buf[at..at + len],
                    &src[..len],
                    "{lines} lines, wide {wide}"
                );
                assert!(buf[..at].iter().chain(&buf[at + len..]).all(|&b| b == 0));
            }
        }
    }

    #[test]
    fn the_fused_copy_copies_and_gives_the_crc32c_of_every_length() {
        let src: Vec<u8> = (0..80_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        // 16-byte stores always; 32-byte ones too where the CPU has AVX2.
        let widths: &[bool] = if std::arch::is_x86_feature_detected!("avx2") {
            &[false, true]
        } else {
            &[false]
        };
        for (&wide, offset) in widths
            .iter()
            .flat_map(|w| [0, 1, 31, 32, 63].map(|o| (w, o)))
        {
            for len in [
                0, 1, 100, 191, 192, 383, 384, 447, 448, 575, 576, 577, 1000, 3071, 3072, 3135,
                3136, 3137, 3263, 3264, 3265, 3527, 4032, 4048, 6144, 9300, 65_472, 65_536, 79_000,
            ] {
                let mut dst = vec![0u8; 80_100];
                let seed = len as u32 ^ 0xdead_beef;
                // SAFETY: both ranges are inside live vectors and do not overlap; `wide` only
                // with AVX2.
                let crc = unsafe {
                    copy_nontemporal_crc32c_stores(
                        flush_instruction(),
                        dst.as_mut_ptr().add(offset),
                        src.as_ptr(),
                        len,
                        seed,
                        wide,
                    )
                };
                store_fence();
                assert_eq!(
                    crc,
                    crc32c::crc32c_append(seed, &src[..len]),
                    "{wide} {offset} {len}"
                );
                assert_eq!(
                    &dst[offset..offset + len],
                    &src[..len],
                    "{wide} {offset} {len}"
                );
                assert!(dst[..offset].iter().all(|&b| b == 0));
                assert!(dst[offset + len..].iter().all(|&b| b == 0));
            }
        }
    }

    #[test]
    fn the_raw_crc_is_the_crates_at_every_length_and_alignment() {
        if !std::arch::is_x86_feature_detected!("sse4.2") {
            let v = [1u8; 10];
            // SAFETY: the range is a live array.
            let got = unsafe { crc32c_raw(0, v.as_ptr(), v.len()) };
            assert_eq!(got, None);
            return;
        }
        let mut rng = crate::rng::SplitMix64::new(5);
        let data: Vec<u8> = (0..20_000).map(|_| rng.next_u64() as u8).collect();
        let lengths = (0..1200).chain([3071, 3072, 3073, 3456, 6144, 6528, 10_000, 19_000]);
        for len in lengths {
            let start = rng.below(17) as usize;
            let seed = rng.next_u64() as u32;
            let slice = &data[start..start + len];
            // SAFETY: the range is part of a live vector.
            let got = unsafe { crc32c_raw(seed, slice.as_ptr(), len) };
            assert_eq!(
                got,
                Some(crc32c::crc32c_append(seed, slice)),
                "length {len}"
            );
        }
    }

    #[test]
    fn the_short_crc_is_the_crates_at_every_length_and_alignment() {
        let data: Vec<u8> = (0..1200u32).map(|i| (i * 37 + 11) as u8).collect();
        for start in 0..9 {
            for len in 0..700 {
                let d = &data[start..start + len];
                let seed = (start * 1000 + len) as u32;
                assert_eq!(
                    crc32c_append(seed, d),
                    crc32c::crc32c_append(seed, d),
                    "{start} {len}"
                );
            }
        }
    }

    #[test]
    fn the_lane_shift_is_lane_zero_bytes() {
        let t = lane_shift_table();
        for r in [1u32, 0x8000_0000, 0x1234_5678, u32::MAX] {
            assert_eq!(lane_shift(t, r), crc32c_zeros(r, LANE));
            // The same through the instruction's library: appending LANE zeros.
            let via_lib = !crc32c::crc32c_append(!r, &[0u8; LANE]);
            assert_eq!(lane_shift(t, r), via_lib);
        }
    }

    #[test]
    fn flush_of_any_range_keeps_contents() {
        let mut buf = vec![0xA5u8; 4096];
        buf[100] = 1;
        // SAFETY: the range is inside `buf`.
        unsafe { flush_range(buf.as_ptr().add(3), 4000) };
        store_fence();
        assert_eq!(buf[100], 1);
        assert_eq!(buf[4095], 0xA5);
        let _ = flush_instruction().name();
    }
}
