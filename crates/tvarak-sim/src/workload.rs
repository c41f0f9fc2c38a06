//! Synthetic workloads as event streams: fio-like streams of small accesses and the STREAM
//! kernels, as the paper runs them (its Table II), with every size a parameter so they can be
//! scaled down.
//!
//! Both are deterministic: the same parameters (and seed) give the same events. Threads are
//! interleaved one access (fio) or one line-sized step (stream) at a time, round robin, as if
//! they ran in lock step; each thread is one core.

use crate::error::SimError;
use crate::trace::{Event, MAX_ACCESS_LEN, MAX_CORES, MAX_PM_BYTES, TraceHeader};
use pmem::rng::SplitMix64;
use std::str::FromStr;

/// Order of the accesses within each stream's region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// One after the other from the region's start.
    Seq,
    /// A seeded random order in which no access slot is used twice.
    Rand,
}

/// Loads or stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rw {
    /// Every access is a load.
    Read,
    /// Every access is a store.
    Write,
}

impl FromStr for Pattern {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Self, SimError> {
        match s {
            "seq" => Ok(Pattern::Seq),
            "rand" => Ok(Pattern::Rand),
            _ => Err(SimError::invalid("fio pattern", "seq or rand", s)),
        }
    }
}

impl FromStr for Rw {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Self, SimError> {
        match s {
            "read" => Ok(Rw::Read),
            "write" => Ok(Rw::Write),
            _ => Err(SimError::invalid("fio direction", "read or write", s)),
        }
    }
}

/// A fio-like run: `streams` threads, each accessing `bytes_per_stream` bytes in `access`-byte
/// pieces inside its own `region_bytes` region (region `i` starts at `i * region_bytes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FioParams {
    /// Sequential or random.
    pub pattern: Pattern,
    /// Loads or stores.
    pub rw: Rw,
    /// Threads (one core each).
    pub streams: u16,
    /// Bytes each thread accesses (a multiple of `access`).
    pub bytes_per_stream: u64,
    /// Size of each thread's region (a multiple of `access`, at least `bytes_per_stream`).
    pub region_bytes: u64,
    /// Bytes per access.
    pub access: u32,
    /// Stores carry (seeded, random) bytes.
    pub with_data: bool,
    /// Seed of the random order and of the data.
    pub seed: u64,
    /// Cycles of the I/O engine's own work per access, as a `Work` event before it (0: none).
    pub work_cycles: u32,
    /// Writes: a `TxCommit` of each access after it, the point where a program using a TxB
    /// library (Pangolin, Mojim) says its write is complete; fio's libpmem engine persists each
    /// write, so each is one. Reads never commit.
    pub tx: bool,
}

/// fio's own work per 64 B I/O, in cycles: fio 3.33's libpmem engine reading 64 B sequentially
/// from a file on /dev/shm, one job, did 5.25-5.36 M I/O per second (187-190 ns each) on a
/// 2.3 GHz Xeon; sequential reads from DRAM are served by the prefetched cache, so that time is
/// the engine's bookkeeping, about 435 cycles. (`fio --name=t --ioengine=libpmem
/// --filename=/dev/shm/f --size=512m --bs=64 --rw=read --time_based --runtime=4`, 2026-11-27.)
pub const FIO_WORK_CYCLES: u32 = 435;

impl FioParams {
    /// The paper's parameters: 64 B accesses, 12 threads, 32 MiB each, each in its own 512 MiB
    /// region, no line accessed twice.
    pub fn paper(pattern: Pattern, rw: Rw) -> FioParams {
        FioParams {
            pattern,
            rw,
            streams: 12,
            bytes_per_stream: 32 << 20,
            region_bytes: 512 << 20,
            access: 64,
            with_data: false,
            seed: 1,
            work_cycles: FIO_WORK_CYCLES,
            tx: rw == Rw::Write,
        }
    }

    /// The paper's shape divided by `factor` (sizes only; streams and access size stay).
    pub fn scaled(pattern: Pattern, rw: Rw, factor: u64) -> FioParams {
        let p = FioParams::paper(pattern, rw);
        let f = factor.max(1);
        let round = |b: u64| (b / f).max(64) / 64 * 64;
        FioParams {
            bytes_per_stream: round(p.bytes_per_stream),
            region_bytes: round(p.region_bytes),
            ..p
        }
    }

    fn validate(&self) -> Result<(), SimError> {
        let a = self.access as u64;
        if self.streams == 0 || self.streams > MAX_CORES {
            return Err(SimError::invalid(
                "fio streams",
                format!("1 to {MAX_CORES}"),
                self.streams,
            ));
        }
        if a == 0 || self.access > MAX_ACCESS_LEN {
            return Err(SimError::invalid(
                "fio access size",
                format!("1 to {MAX_ACCESS_LEN}"),
                self.access,
            ));
        }
        if self.bytes_per_stream % a != 0 || self.region_bytes % a != 0 {
            return Err(SimError::invalid(
                "fio sizes",
                format!("multiples of the access size {a}"),
                format!("{} and {}", self.bytes_per_stream, self.region_bytes),
            ));
        }
        if self.bytes_per_stream == 0 || self.bytes_per_stream > self.region_bytes {
            return Err(SimError::invalid(
                "fio bytes per stream",
                format!("1 to the region size {}", self.region_bytes),
                self.bytes_per_stream,
            ));
        }
        match self.region_bytes.checked_mul(self.streams as u64) {
            Some(t) if t <= MAX_PM_BYTES => Ok(()),
            _ => Err(SimError::invalid(
                "fio footprint (streams x region)",
                format!("at most {MAX_PM_BYTES}"),
                format!("{} x {}", self.streams, self.region_bytes),
            )),
        }
    }

    /// The header of this run's trace.
    pub fn header(&self) -> TraceHeader {
        let p = match self.pattern {
            Pattern::Seq => "seq",
            Pattern::Rand => "rand",
        };
        let rw = match self.rw {
            Rw::Read => "read",
            Rw::Write => "write",
        };
        TraceHeader {
            name: format!("fio-{p}-{rw}"),
            pm_bytes: self.region_bytes * self.streams as u64,
            cores: self.streams,
            with_data: self.with_data && self.rw == Rw::Write,
        }
    }
}

/// A seeded permutation of `[0, n)`: a 4-round Feistel network over the next even power of two,
/// walking the cycle until the value falls inside `[0, n)`.
#[derive(Debug, Clone)]
struct Permutation {
    n: u64,
    half_bits: u32,
    keys: [u64; 4],
}

impl Permutation {
    fn new(n: u64, seed: u64) -> Self {
        let bits = 64 - n.saturating_sub(1).leading_zeros();
        let half_bits = bits.div_ceil(2).max(1);
        let mut r = SplitMix64::new(seed);
        Permutation {
            n,
            half_bits,
            keys: [r.next_u64(), r.next_u64(), r.next_u64(), r.next_u64()],
        }
    }

    fn round(&self, x: u64) -> u64 {
        let mask = (1u64 << (2 * self.half_bits)) - 1;
        let hmask = (1u64 << self.half_bits) - 1;
        let (mut l, mut r) = (x >> self.half_bits, x & hmask);
        for k in self.keys {
            let f = SplitMix64::new(r ^ k).next_u64() & hmask;
            (l, r) = (r, l ^ f);
        }
        ((l << self.half_bits) | r) & mask
    }

    fn get(&self, i: u64) -> u64 {
        let mut x = self.round(i);
        while x >= self.n {
            x = self.round(x);
        }
        x
    }
}

/// Seeded bytes for the store at `addr` (the same address always gets the same bytes).
fn bytes_for(seed: u64, addr: u64, len: u32) -> Vec<u8> {
    let mut r = SplitMix64::new(seed ^ addr.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut out = Vec::with_capacity(len as usize);
    while out.len() < len as usize {
        let w = r.next_u64().to_le_bytes();
        let take = (len as usize - out.len()).min(8);
        out.extend_from_slice(&w[..take]);
    }
    out
}

/// The events of a fio-like run: `streams x bytes_per_stream / access` loads or stores,
/// thread after thread, one access each in turn; before each, a `Work` of `work_cycles` (if
/// any), and after each store a `TxCommit` of it (if `tx`).
pub fn fio(p: &FioParams) -> Result<impl Iterator<Item = Event> + use<>, SimError> {
    p.validate()?;
    let p = p.clone();
    let per = p.bytes_per_stream / p.access as u64;
    let slots = p.region_bytes / p.access as u64;
    let perms: Vec<Permutation> = (0..p.streams as u64)
        .map(|s| Permutation::new(slots, p.seed.wrapping_add(s)))
        .collect();
    let data = p.with_data && p.rw == Rw::Write;
    Ok((0..per * p.streams as u64).flat_map(move |k| {
        let s = k % p.streams as u64;
        let j = k / p.streams as u64;
        let slot = match p.pattern {
            Pattern::Seq => j,
            Pattern::Rand => perms[s as usize].get(j),
        };
        let addr = s * p.region_bytes + slot * p.access as u64;
        let core = s as u16;
        let mut ev = Vec::with_capacity(3);
        if p.work_cycles > 0 {
            ev.push(Event::Work {
                core,
                cycles: p.work_cycles,
            });
        }
        match p.rw {
            Rw::Read => ev.push(Event::Load {
                core,
                addr,
                len: p.access,
            }),
            Rw::Write => {
                ev.push(Event::Store {
                    core,
                    addr,
                    len: p.access,
                    data: data.then(|| bytes_for(p.seed, addr, p.access)),
                });
                if p.tx {
                    ev.push(Event::TxCommit {
                        core,
                        ranges: vec![(addr, p.access)],
                    });
                }
            }
        }
        ev
    }))
}

/// A STREAM kernel (McCalpin): `a`, `b`, `c` are arrays of doubles, `q` a scalar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// `c[i] = a[i]`
    Copy,
    /// `b[i] = q * c[i]`
    Scale,
    /// `c[i] = a[i] + b[i]`
    Add,
    /// `a[i] = b[i] + q * c[i]`
    Triad,
}

impl FromStr for Kernel {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Self, SimError> {
        match s {
            "copy" => Ok(Kernel::Copy),
            "scale" => Ok(Kernel::Scale),
            "add" => Ok(Kernel::Add),
            "triad" => Ok(Kernel::Triad),
            _ => Err(SimError::invalid(
                "stream kernel",
                "copy, scale, add or triad",
                s,
            )),
        }
    }
}

impl Kernel {
    /// (sources, destination) as array indexes: a = 0, b = 1, c = 2.
    fn arrays(self) -> (&'static [usize], usize) {
        match self {
            Kernel::Copy => (&[0], 2),
            Kernel::Scale => (&[2], 1),
            Kernel::Add => (&[0, 1], 2),
            Kernel::Triad => (&[1, 2], 0),
        }
    }
}

/// The scalar of Scale and Triad (STREAM's).
pub const STREAM_SCALAR: f64 = 3.0;

/// One pass of a STREAM kernel over three arrays of `array_bytes` each (a at 0, b after it, c
/// after b), split into contiguous chunks across `threads` (as even as whole pieces allow); each step of a thread loads one
/// `access`-byte piece of each source array and stores the piece of the destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamParams {
    /// The kernel.
    pub kernel: Kernel,
    /// Threads (one core each).
    pub threads: u16,
    /// Bytes per array (a multiple of `access`).
    pub array_bytes: u64,
    /// Bytes per load and store (a multiple of 8: whole doubles).
    pub access: u32,
    /// Stores carry the computed doubles (from seeded initial arrays; see
    /// [`StreamParams::initial_image`]).
    pub with_data: bool,
    /// Seed of the initial arrays.
    pub seed: u64,
    /// After each step's store, a `TxCommit` per element it wrote (each double is one write
    /// the program completes, and one object to a TxB library; see [`FioParams::tx`]).
    pub tx: bool,
}

impl StreamParams {
    /// The paper's parameters: 12 threads, 128 MiB per array, line-sized (64 B) steps.
    pub fn paper(kernel: Kernel) -> StreamParams {
        StreamParams {
            kernel,
            threads: 12,
            array_bytes: 128 << 20,
            access: 64,
            with_data: false,
            seed: 1,
            tx: true,
        }
    }

    fn validate(&self) -> Result<(), SimError> {
        if self.threads == 0 || self.threads > MAX_CORES {
            return Err(SimError::invalid(
                "stream threads",
                format!("1 to {MAX_CORES}"),
                self.threads,
            ));
        }
        if self.access == 0 || self.access % 8 != 0 || self.access > MAX_ACCESS_LEN {
            return Err(SimError::invalid(
                "stream access size",
                format!("a multiple of 8 up to {MAX_ACCESS_LEN}"),
                self.access,
            ));
        }
        let unit = self.access as u64;
        if self.array_bytes == 0 || self.array_bytes % unit != 0 {
            return Err(SimError::invalid(
                "stream array size",
                format!("a non-zero multiple of the access size {unit}"),
                self.array_bytes,
            ));
        }
        if self.array_bytes > MAX_PM_BYTES / 3 {
            return Err(SimError::invalid(
                "stream array size",
                format!("at most {}", MAX_PM_BYTES / 3),
                self.array_bytes,
            ));
        }
        Ok(())
    }

    /// The header of this run's trace.
    pub fn header(&self) -> TraceHeader {
        let k = match self.kernel {
            Kernel::Copy => "copy",
            Kernel::Scale => "scale",
            Kernel::Add => "add",
            Kernel::Triad => "triad",
        };
        TraceHeader {
            name: format!("stream-{k}"),
            pm_bytes: 3 * self.array_bytes,
            cores: self.threads,
            with_data: self.with_data,
        }
    }

    /// The three arrays before the kernel runs, as the bytes of the traced range (seeded
    /// doubles). Meant for small runs: it allocates `3 * array_bytes`.
    pub fn initial_image(&self) -> Result<Vec<u8>, SimError> {
        self.validate()?;
        let n = self.array_bytes / 8;
        let mut out = Vec::with_capacity(3 * self.array_bytes as usize);
        for a in 0..3 {
            for i in 0..n {
                out.extend_from_slice(&initial(self.seed, a, i).to_le_bytes());
            }
        }
        Ok(out)
    }
}

/// Element `i` of array `a` before the kernel: a seeded value in [1, 2).
fn initial(seed: u64, a: usize, i: u64) -> f64 {
    let r = SplitMix64::new(seed ^ ((a as u64) << 56) ^ i.wrapping_mul(0xD1B5_4A32_D192_ED03))
        .next_u64();
    1.0 + (r >> 11) as f64 / (1u64 << 53) as f64
}

/// The events of one pass of a STREAM kernel.
pub fn stream(p: &StreamParams) -> Result<impl Iterator<Item = Event> + use<>, SimError> {
    p.validate()?;
    let p = p.clone();
    let (sources, dest) = p.kernel.arrays();
    // Thread t takes `base` pieces, one more if t < extra, starting where t - 1 stopped.
    let threads = p.threads as u64;
    let pieces = p.array_bytes / p.access as u64;
    let (base, extra) = (pieces / threads, pieces % threads);
    let first = move |t: u64| t * base + t.min(extra);
    let count = move |t: u64| base + u64::from(t < extra);
    Ok((0..(base + 1) * threads).flat_map(move |k| {
        let t = k % threads;
        let step = k / threads;
        if step >= count(t) {
            return Vec::new();
        }
        let off = (first(t) + step) * p.access as u64;
        let core = t as u16;
        let mut ev = Vec::with_capacity(3);
        for &s in sources {
            ev.push(Event::Load {
                core,
                addr: s as u64 * p.array_bytes + off,
                len: p.access,
            });
        }
        let data = p.with_data.then(|| {
            let mut d = Vec::with_capacity(p.access as usize);
            for e in 0..p.access as u64 / 8 {
                let i = off / 8 + e;
                let v = |a: usize| initial(p.seed, a, i);
                let x = match p.kernel {
                    Kernel::Copy => v(0),
                    Kernel::Scale => STREAM_SCALAR * v(2),
                    Kernel::Add => v(0) + v(1),
                    Kernel::Triad => v(1) + STREAM_SCALAR * v(2),
                };
                d.extend_from_slice(&x.to_le_bytes());
            }
            d
        });
        let addr = dest as u64 * p.array_bytes + off;
        ev.push(Event::Store {
            core,
            addr,
            len: p.access,
            data,
        });
        if p.tx {
            for e in 0..u64::from(p.access) / 8 {
                ev.push(Event::TxCommit {
                    core,
                    ranges: vec![(addr + 8 * e, 8)],
                });
            }
        }
        ev
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn the_permutation_is_one() {
        for n in [1u64, 2, 3, 7, 64, 1000, 4097] {
            let p = Permutation::new(n, 9);
            let seen: HashSet<u64> = (0..n).map(|i| p.get(i)).collect();
            assert_eq!(seen.len() as u64, n, "n = {n}");
            assert!(seen.iter().all(|&x| x < n));
        }
    }

    #[test]
    fn rand_fio_touches_each_slot_at_most_once_inside_its_region() {
        let mut p = FioParams::scaled(Pattern::Rand, Rw::Write, 1024);
        p.with_data = true;
        p.work_cycles = 0;
        p.tx = false;
        let h = p.header();
        let events: Vec<Event> = fio(&p).unwrap().collect();
        assert_eq!(events.len() as u64, 12 * p.bytes_per_stream / 64);
        let mut seen = HashSet::new();
        for e in &events {
            let Event::Store {
                core, addr, data, ..
            } = e
            else {
                panic!("{e:?}")
            };
            assert_eq!(*addr / p.region_bytes, *core as u64);
            assert!(seen.insert(*addr), "{addr:#x} twice");
            assert_eq!(data.as_ref().map(Vec::len), Some(64));
        }
        assert!(h.with_data);
        // Not sequential: some consecutive accesses of a stream are not adjacent.
        let s0: Vec<u64> = events
            .iter()
            .filter(|e| e.core() == 0)
            .map(|e| match e {
                Event::Store { addr, .. } => *addr,
                _ => unreachable!(),
            })
            .collect();
        assert!(s0.windows(2).any(|w| w[1] != w[0] + 64));
    }

    #[test]
    fn stream_triad_data_is_b_plus_q_c() {
        let p = StreamParams {
            kernel: Kernel::Triad,
            threads: 2,
            array_bytes: 1024,
            access: 64,
            with_data: true,
            seed: 5,
            tx: false,
        };
        let img = p.initial_image().unwrap();
        let f =
            |off: u64| f64::from_le_bytes(img[off as usize..off as usize + 8].try_into().unwrap());
        let ev: Vec<Event> = stream(&p).unwrap().collect();
        assert_eq!(ev.len(), 3 * 1024 / 64);
        let mut stored = 0;
        for e in &ev {
            if let Event::Store {
                addr,
                data: Some(d),
                ..
            } = e
            {
                assert!(*addr < 1024, "triad writes a");
                for (k, w) in d.chunks(8).enumerate() {
                    let o = addr + 8 * k as u64;
                    let want = f(1024 + o) + STREAM_SCALAR * f(2048 + o);
                    assert_eq!(f64::from_le_bytes(w.try_into().unwrap()), want);
                }
                stored += 1;
            }
        }
        assert_eq!(stored, 1024 / 64);
    }

    #[test]
    fn each_fio_write_is_its_work_its_store_and_its_commit() {
        let p = FioParams::scaled(Pattern::Rand, Rw::Write, 4096);
        let ev: Vec<Event> = fio(&p).unwrap().collect();
        let n = 12 * p.bytes_per_stream / 64;
        assert_eq!(ev.len() as u64, 3 * n);
        for c in ev.chunks(3) {
            let core = c[0].core();
            assert_eq!(
                c[0],
                Event::Work {
                    core,
                    cycles: FIO_WORK_CYCLES
                }
            );
            let Event::Store { addr, len, .. } = c[1] else {
                panic!("not a store: {:?}", c[1]);
            };
            assert_eq!(c[1].core(), core);
            assert_eq!(
                c[2],
                Event::TxCommit {
                    core,
                    ranges: vec![(addr, len)]
                }
            );
        }
        // Reads do the work but never commit.
        let p = FioParams::scaled(Pattern::Seq, Rw::Read, 4096);
        let ev: Vec<Event> = fio(&p).unwrap().collect();
        assert_eq!(ev.len() as u64, 2 * n);
        assert!(!ev.iter().any(|e| matches!(e, Event::TxCommit { .. })));
    }

    #[test]
    fn an_uneven_stream_split_stores_every_piece_once_in_contiguous_chunks() {
        // The paper's 128 MiB over 12 threads does not divide evenly; a smaller case that
        // does not either: 100 pieces over 12 threads (4 threads take 9, 8 take 8).
        let mut p = StreamParams::paper(Kernel::Copy);
        p.array_bytes = 100 * 64;
        let mut by_core: Vec<Vec<u64>> = vec![Vec::new(); 12];
        for e in stream(&p).unwrap() {
            if let Event::Store { core, addr, .. } = e {
                by_core[core as usize].push(addr - 2 * p.array_bytes);
            }
        }
        let mut all: Vec<u64> = by_core.iter().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..100).map(|i| i * 64).collect::<Vec<_>>());
        for (t, a) in by_core.iter().enumerate() {
            assert_eq!(a.len(), if t < 4 { 9 } else { 8 }, "thread {t}");
            assert!(a.windows(2).all(|w| w[1] == w[0] + 64), "thread {t}: {a:?}");
        }
        assert!(StreamParams::paper(Kernel::Copy).validate().is_ok());
    }

    #[test]
    fn a_stream_step_commits_what_it_stored() {
        let mut p = StreamParams::paper(Kernel::Add);
        p.threads = 2;
        p.array_bytes = 2048;
        let ev: Vec<Event> = stream(&p).unwrap().collect();
        // Add: two loads, a store of c and a commit per double stored, per 64 B step.
        assert_eq!(ev.len(), 11 * 2048 / 64);
        for c in ev.chunks(11) {
            let Event::Store {
                addr, len, core, ..
            } = c[2]
            else {
                panic!("not a store: {:?}", c[2]);
            };
            assert_eq!(len, 64);
            assert!((4096..6144).contains(&addr), "add writes c");
            for (e, commit) in c[3..].iter().enumerate() {
                assert_eq!(
                    *commit,
                    Event::TxCommit {
                        core,
                        ranges: vec![(addr + 8 * e as u64, 8)]
                    }
                );
            }
        }
    }

    #[test]
    fn bad_parameters_are_refused() {
        let mut p = FioParams::paper(Pattern::Seq, Rw::Read);
        p.bytes_per_stream = p.region_bytes + 64;
        assert!(fio(&p).is_err());
        p.bytes_per_stream = 100;
        assert!(fio(&p).is_err());
        let mut s = StreamParams::paper(Kernel::Add);
        s.array_bytes = 1000;
        assert!(stream(&s).is_err());
        assert!("dance".parse::<Kernel>().is_err());
    }
}
