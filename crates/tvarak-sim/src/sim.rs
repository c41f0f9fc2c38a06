//! The trace-driven simulator: configuration, counters, the report, the observer through
//! which a functional engine follows what the controller does to NVM lines, and [`simulate`].
//!
//! # The machine
//! Each core has a private L1 and L2 (write-back, write-allocate, LRU; L2 does not enforce
//! inclusion of L1). The LLC is shared, banked ([`crate::cache::bank_of`]) and inclusive: when
//! its application partition evicts a line, every private copy is removed and, if any copy was
//! dirty, the line is written back. An L1 dirty victim goes to L2; an L2 dirty victim makes the
//! LLC line dirty — the moment TVARAK forms a diff. The LLC ways are split per design: all
//! ways hold data for Baseline, Naive, cl and the software designs; `red_ways` go to redundancy
//! for cl-cache and TVARAK, and `diff_ways` to diffs for TVARAK. Each bank's controller has a
//! `ctl_cache_bytes` cache inclusive within the redundancy partition (a redundancy line lives in
//! the partition of its own home bank; a controller reaches it through its own cache).
//!
//! # The designs at the controller (data lines only)
//! - fill: Naive reads the 64 lines of the page and the page's system-checksum line; cl reads
//!   the line and its CL-checksum line; cl-cache and TVARAK fetch the CL-checksum line through
//!   controller cache -> redundancy partition -> NVM, then read the line.
//! - writeback: Naive reads old data, system-checksum and parity and writes all three; cl adds
//!   the CL-checksum (4 R + 4 W); cl-cache reads old data and updates the three redundancy lines
//!   in the caches (written to NVM when the partition evicts them or at the drain); TVARAK does
//!   the same without the old-data read. A diff-partition victim is written back early and
//!   its LLC line marked clean.
//! - TxB-Object / TxB-Page: at each `TxCommit`, on the committing core, through its caches:
//!   object: load the object's lines, CRC its bytes, store its checksum (8 B per 64 B-aligned
//!   object start), and for every modified line load the parity peers and store the parity
//!   line; page: load all 64 lines of each modified page, CRC 4 KB, store the page checksum,
//!   and recompute the parity of the modified lines as object does. No read verification.
//! - Vilamb-like: every `period_writes` store events (and once at the end), a background core
//!   (one extra private L1/L2) re-reads each page dirtied since the last sweep, CRCs it, stores
//!   its checksum and recomputes the parity of all 64 lines from the peers. No read
//!   verification.
//! - Coherence among the private caches of data lines, and MESI among the controllers'
//!   caches, are not modelled (the traces are of mostly independent threads; a controller
//!   writes redundancy into the partition, which every controller reads through).
//! - `Flush` and `Fence` cost only their event's instructions: like the paper, every design
//!   assumes backup power flushes the caches on power loss, so durability flushes are dropped.
//!
//! # The runtime model (an estimate, not a cycle-accurate core)
//! Each core accumulates cycles: `instrs_per_event / ipc` per trace event for its non-memory
//! work (a `Work` event instead charges exactly the cycles it states), plus, per line access that misses L1, the stall `(L2 latency [+ LLC latency + fill
//! wait]) / mlp` — the `mlp` cap is the number of misses an out-of-order core overlaps. A fill's
//! wait is the controller's range match and CRC cycles, its cache lookups, and the NVM reads it
//! waits for: reads to different DIMMs overlap, and one DIMM serves `nvm_banks` reads at a time
//! (so Naive's 65 reads of one page cost ceil(65 / 8) = 9 read latencies, a line and its
//! CL-checksum one). Writebacks are off the critical path. Every NVM access also keeps one bank
//! of its DIMM busy for its latency (60 ns read, 150 ns write); the runtime estimate is the
//! larger of the slowest core's time and the busiest DIMM's busy time divided by its banks (the
//! bandwidth bound, which dominates when many cores stream or write at random).
//! The software designs' CRC costs `sw_crc_cycles_per_8b` cycles per 8 bytes on the core, and
//! each of their line accesses one instruction plus its stall.
//!
//! # Energy
//! Table III's per-access energies: hits and misses of L1, L2, LLC (both partitions) and the
//! controller caches, 1.6 nJ per NVM read and 9 nJ per NVM write.

use std::collections::{BTreeSet, HashMap};

use crate::cache::{CacheGeom, SetAssoc, bank_of};
use crate::design::Design;
use crate::error::SimError;
use crate::nvm::{LINE, LINES_PER_PAGE, Layout, LineKind, MAX_ADDR, Nvm, NvmTiming, kind};

pub use crate::trace::Event;

/// The simulated machine. `Default` is the paper's Table III.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SimConfig {
    /// Cores (each with a private L1 and L2); trace core ids must be below this.
    pub cores: u16,
    /// Private L1 data cache of each core.
    pub l1: CacheGeom,
    /// Private L2 of each core.
    pub l2: CacheGeom,
    /// The shared LLC, all banks together.
    pub llc: CacheGeom,
    /// LLC banks (one redundancy controller each).
    pub llc_banks: u16,
    /// LLC ways reserved for redundancy (designs with redundancy caching).
    pub red_ways: u16,
    /// LLC ways reserved for data diffs (TVARAK).
    pub diff_ways: u16,
    /// Bytes of each bank controller's redundancy cache.
    pub ctl_cache_bytes: u32,
    /// Associativity of the controller cache (the paper does not say; 4 by default).
    pub ctl_ways: u16,
    /// Controller cache hit latency, cycles.
    pub ctl_latency_cycles: u32,
    /// Controller cache energy per hit, pJ.
    pub ctl_hit_pj: f64,
    /// Controller cache energy per miss, pJ.
    pub ctl_miss_pj: f64,
    /// NVM DIMMs (RAID-5 over all of them: `dimms - 1` data pages and one parity page a stripe).
    pub dimms: u16,
    /// Banks per DIMM that serve accesses in parallel (the paper does not say; 8, as a DDR
    /// rank has).
    pub nvm_banks: u16,
    /// NVM read latency, ns.
    pub nvm_read_ns: f64,
    /// NVM write latency, ns.
    pub nvm_write_ns: f64,
    /// NVM energy per read, nJ.
    pub nvm_read_nj: f64,
    /// NVM energy per write, nJ.
    pub nvm_write_nj: f64,
    /// Core clock, GHz.
    pub ghz: f64,
    /// Instructions of non-memory work the runtime model charges per trace event.
    pub instrs_per_event: f64,
    /// Instructions per cycle of that non-memory work.
    pub ipc: f64,
    /// Memory-level parallelism: misses a core overlaps (a cap on outstanding misses).
    pub mlp: u32,
    /// Cycles of the controller's address-range match on a fill or writeback.
    pub range_match_cycles: u32,
    /// Cycles per checksum or parity computation or verification in the controller.
    pub crc_cycles: u32,
    /// Software CRC cost on a core, cycles per 8 bytes (SSE4.2 crc32 throughput).
    pub sw_crc_cycles_per_8b: f64,
}

impl Default for SimConfig {
    fn default() -> SimConfig {
        SimConfig {
            cores: 12,
            l1: CacheGeom {
                bytes: 32 << 10,
                ways: 8,
                latency_cycles: 4,
                hit_pj: 15.0,
                miss_pj: 33.0,
            },
            l2: CacheGeom {
                bytes: 256 << 10,
                ways: 8,
                latency_cycles: 7,
                hit_pj: 46.0,
                miss_pj: 94.0,
            },
            llc: CacheGeom {
                bytes: 24 << 20,
                ways: 16,
                latency_cycles: 27,
                hit_pj: 240.0,
                miss_pj: 500.0,
            },
            llc_banks: 12,
            red_ways: 2,
            diff_ways: 1,
            ctl_cache_bytes: 4096,
            ctl_ways: 4,
            ctl_latency_cycles: 1,
            ctl_hit_pj: 15.0,
            ctl_miss_pj: 33.0,
            dimms: 4,
            nvm_banks: 8,
            nvm_read_ns: 60.0,
            nvm_write_ns: 150.0,
            nvm_read_nj: 1.6,
            nvm_write_nj: 9.0,
            ghz: 2.27,
            instrs_per_event: 4.0,
            ipc: 1.0,
            mlp: 4,
            range_match_cycles: 2,
            crc_cycles: 1,
            sw_crc_cycles_per_8b: 1.0,
        }
    }
}

/// What happened, counted. NVM accesses are 64-byte line accesses.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// NVM reads of data lines.
    pub nvm_data_reads: u64,
    /// NVM writes of data lines.
    pub nvm_data_writes: u64,
    /// NVM reads of redundancy lines (checksums, parity).
    pub nvm_red_reads: u64,
    /// NVM writes of redundancy lines.
    pub nvm_red_writes: u64,
    /// L1 hits (all cores).
    pub l1_hits: u64,
    /// L1 misses.
    pub l1_misses: u64,
    /// L2 hits.
    pub l2_hits: u64,
    /// L2 misses.
    pub l2_misses: u64,
    /// LLC hits (application partition).
    pub llc_hits: u64,
    /// LLC misses (application partition).
    pub llc_misses: u64,
    /// LLC redundancy-partition hits.
    pub llc_red_hits: u64,
    /// LLC redundancy-partition misses.
    pub llc_red_misses: u64,
    /// Controller cache hits.
    pub ctl_hits: u64,
    /// Controller cache misses.
    pub ctl_misses: u64,
    /// Diffs created in the diff partition.
    pub diffs_created: u64,
    /// Diffs evicted from the diff partition (each forces an early writeback).
    pub diffs_evicted: u64,
    /// Data lines filled from NVM into the LLC.
    pub fills: u64,
    /// Data lines written back from the LLC to NVM.
    pub writebacks: u64,
    /// LLC evictions that back-invalidated a line in some L1/L2.
    pub back_invalidations: u64,
    /// Checksum computations or verifications (controller: per line; software: per object/page).
    pub crc_ops: u64,
    /// Parity XOR updates (per line).
    pub xor_ops: u64,
    /// Bytes the software designs ran through CRC on the cores.
    pub sw_crc_bytes: u64,
    /// Line accesses the software designs made on the cores (loads and stores of redundancy
    /// work).
    pub sw_line_accesses: u64,
    /// Transaction commits seen.
    pub tx_commits: u64,
    /// Vilamb-like sweeps run.
    pub sweeps: u64,
    /// Application loads in the trace.
    pub loads: u64,
    /// Application stores in the trace.
    pub stores: u64,
}

impl Counters {
    /// All NVM line accesses.
    pub fn nvm_accesses(&self) -> u64 {
        self.nvm_data_reads + self.nvm_data_writes + self.nvm_red_reads + self.nvm_red_writes
    }

    /// All cache accesses (L1, L2, LLC both partitions, controller caches).
    pub fn cache_accesses(&self) -> u64 {
        self.l1_hits
            + self.l1_misses
            + self.l2_hits
            + self.l2_misses
            + self.llc_hits
            + self.llc_misses
            + self.llc_red_hits
            + self.llc_red_misses
            + self.ctl_hits
            + self.ctl_misses
    }

    /// NVM reads per data line filled (read amplification).
    pub fn read_amplification(&self) -> f64 {
        if self.fills == 0 {
            return 0.0;
        }
        (self.nvm_data_reads + self.nvm_red_reads) as f64 / self.fills as f64
    }
}

/// The result of one simulation.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Report {
    /// The design simulated.
    pub design: Design,
    /// The counters.
    pub counters: Counters,
    /// Energy of caches, controller and NVM, nanojoules.
    pub energy_nj: f64,
    /// Runtime estimate, nanoseconds (see the model in this module's docs).
    pub runtime_ns: f64,
    /// Trace events consumed.
    pub events: u64,
}

/// What the simulated controller does to NVM lines, for a functional engine to follow.
pub trait Observer {
    /// NVM -> LLC fill of a data line.
    fn fill(&mut self, line_addr: u64);
    /// LLC -> NVM writeback of a data line, with its current bytes (the bytes of the stores
    /// seen so far merged into the line `current` gave; zeros where neither said anything, as
    /// in an address-only trace).
    fn writeback(&mut self, line_addr: u64, data: &[u8; 64]);
    /// A transaction committed with these modified ranges.
    fn tx_commit(&mut self, ranges: &[(u64, u32)]) {
        let _ = ranges;
    }
    /// The bytes NVM holds for a data line, asked the first time a store with data touches a
    /// line the simulator has no bytes for, so a partial-line store can be merged into the
    /// right line image. `None` (the default) means zeros.
    fn current(&mut self, line_addr: u64) -> Option<[u8; 64]> {
        let _ = line_addr;
        None
    }
}

struct Core {
    l1: SetAssoc,
    l2: SetAssoc,
    cycles: f64,
}

struct Bank {
    app: SetAssoc,
    red: Option<SetAssoc>,
    diff: Option<SetAssoc>,
    ctl: Option<SetAssoc>,
}

struct Machine<'o> {
    cfg: SimConfig,
    design: Design,
    cores: Vec<Core>,
    banks: Vec<Bank>,
    nvm: Nvm,
    c: Counters,
    bytes: HashMap<u64, [u8; 64]>,
    observer: Option<&'o mut dyn Observer>,
    stores_since_sweep: u64,
    dirty_pages: BTreeSet<u64>,
}

/// Most cores a configuration may have.
pub const MAX_CORES: u16 = 1024;
/// Largest cache level a configuration may have, bytes (the simulator allocates its tags).
pub const MAX_CACHE_BYTES: u64 = 1 << 30;

fn geom_lines(g: &CacheGeom) -> usize {
    (g.bytes / LINE) as usize
}

fn check(ok: bool, what: &str, expected: &str, found: impl ToString) -> Result<(), SimError> {
    if ok {
        Ok(())
    } else {
        Err(SimError::invalid(what, expected, found))
    }
}

impl SimConfig {
    /// Check the configuration for `design`: sizes, ways, partitions and costs.
    pub fn validate(&self, design: Design) -> Result<(), SimError> {
        check(
            (1..=MAX_CORES).contains(&self.cores),
            "cores",
            format!("1..={MAX_CORES}").as_str(),
            self.cores,
        )?;
        for (name, g) in [("l1", &self.l1), ("l2", &self.l2), ("llc", &self.llc)] {
            check(g.ways >= 1, &format!("{name} ways"), ">= 1", g.ways)?;
            check(
                g.bytes >= LINE * u64::from(g.ways)
                    && g.bytes % LINE == 0
                    && g.bytes <= MAX_CACHE_BYTES,
                &format!("{name} bytes"),
                format!("a multiple of 64 holding at least one set, <= {MAX_CACHE_BYTES}").as_str(),
                g.bytes,
            )?;
            check(
                g.hit_pj.is_finite()
                    && g.hit_pj >= 0.0
                    && g.miss_pj.is_finite()
                    && g.miss_pj >= 0.0,
                &format!("{name} energy"),
                "finite, >= 0",
                format!("{}/{}", g.hit_pj, g.miss_pj),
            )?;
        }
        check(self.llc_banks >= 1, "llc_banks", ">= 1", self.llc_banks)?;
        let bank_lines = self.llc.bytes / LINE / u64::from(self.llc_banks);
        check(
            bank_lines >= u64::from(self.llc.ways),
            "llc bytes per bank",
            "at least one set per bank",
            bank_lines * LINE,
        )?;
        let (red, diff) = self.partition(design);
        check(
            red + diff < self.llc.ways,
            "red_ways + diff_ways",
            format!("< llc ways ({})", self.llc.ways).as_str(),
            red + diff,
        )?;
        if matches!(design, Design::ClCache | Design::Tvarak) {
            check(
                self.red_ways >= 1,
                "red_ways",
                ">= 1 for this design",
                self.red_ways,
            )?;
            check(self.ctl_ways >= 1, "ctl_ways", ">= 1", self.ctl_ways)?;
            check(
                self.ctl_cache_bytes == 0
                    || (u64::from(self.ctl_cache_bytes) >= LINE * u64::from(self.ctl_ways)
                        && u64::from(self.ctl_cache_bytes) % LINE == 0),
                "ctl_cache_bytes",
                "0 (no controller cache) or a multiple of 64 holding at least one set",
                self.ctl_cache_bytes,
            )?;
        }
        if design == Design::Tvarak {
            check(
                self.diff_ways >= 1,
                "diff_ways",
                ">= 1 for tvarak",
                self.diff_ways,
            )?;
        }
        check(
            (3..=1024).contains(&self.dimms),
            "dimms",
            "3..=1024 (RAID-5)",
            self.dimms,
        )?;
        check(
            u64::from(self.ctl_cache_bytes) <= MAX_CACHE_BYTES,
            "ctl_cache_bytes",
            format!("<= {MAX_CACHE_BYTES}").as_str(),
            self.ctl_cache_bytes,
        )?;
        for (what, v) in [
            ("nvm_read_ns", self.nvm_read_ns),
            ("nvm_write_ns", self.nvm_write_ns),
            ("nvm_read_nj", self.nvm_read_nj),
            ("nvm_write_nj", self.nvm_write_nj),
            ("instrs_per_event", self.instrs_per_event),
            ("sw_crc_cycles_per_8b", self.sw_crc_cycles_per_8b),
            ("ctl_hit_pj", self.ctl_hit_pj),
            ("ctl_miss_pj", self.ctl_miss_pj),
        ] {
            check(v.is_finite() && v >= 0.0, what, "finite, >= 0", v)?;
        }
        for (what, v) in [("ghz", self.ghz), ("ipc", self.ipc)] {
            check(v.is_finite() && v > 0.0, what, "finite, > 0", v)?;
        }
        check(self.mlp >= 1, "mlp", ">= 1", self.mlp)?;
        check(
            (1..=1024).contains(&self.nvm_banks),
            "nvm_banks",
            "1..=1024",
            self.nvm_banks,
        )?;
        Ok(())
    }

    /// (redundancy ways, diff ways) the design takes from the LLC.
    fn partition(&self, design: Design) -> (u16, u16) {
        match design {
            Design::ClCache => (self.red_ways, 0),
            Design::Tvarak => (self.red_ways, self.diff_ways),
            _ => (0, 0),
        }
    }
}

fn lines_of(addr: u64, len: u32) -> std::ops::RangeInclusive<u64> {
    let last = addr + u64::from(len.max(1)) - 1;
    addr / LINE..=last / LINE
}

impl<'o> Machine<'o> {
    fn new(cfg: &SimConfig, design: Design, observer: Option<&'o mut dyn Observer>) -> Machine<'o> {
        // One more core than configured: the Vilamb-like design's background thread.
        let cores = (0..=cfg.cores)
            .map(|_| Core {
                l1: SetAssoc::new(geom_lines(&cfg.l1), cfg.l1.ways.into()),
                l2: SetAssoc::new(geom_lines(&cfg.l2), cfg.l2.ways.into()),
                cycles: 0.0,
            })
            .collect();
        let banks_n = usize::from(cfg.llc_banks);
        let sets = geom_lines(&cfg.llc) / banks_n / usize::from(cfg.llc.ways);
        let (red, diff) = cfg.partition(design);
        let app_ways = usize::from(cfg.llc.ways - red - diff);
        let ctl_lines = (u64::from(cfg.ctl_cache_bytes) / LINE) as usize;
        let banks = (0..banks_n)
            .map(|_| Bank {
                app: SetAssoc::new(sets * app_ways, app_ways),
                red: (red > 0).then(|| SetAssoc::new(sets * usize::from(red), red.into())),
                diff: (diff > 0).then(|| SetAssoc::new(sets * usize::from(diff), diff.into())),
                ctl: (red > 0 && ctl_lines > 0)
                    .then(|| SetAssoc::new(ctl_lines, cfg.ctl_ways.into())),
            })
            .collect();
        let nvm = Nvm::new(
            Layout::new(cfg.dimms),
            NvmTiming {
                read_ns: cfg.nvm_read_ns,
                write_ns: cfg.nvm_write_ns,
                banks: cfg.nvm_banks,
            },
        );
        Machine {
            cfg: cfg.clone(),
            design,
            cores,
            banks,
            nvm,
            c: Counters::default(),
            bytes: HashMap::new(),
            observer,
            stores_since_sweep: 0,
            dirty_pages: BTreeSet::new(),
        }
    }

    fn layout(&self) -> Layout {
        *self.nvm.layout()
    }

    fn bank(&self, line: u64) -> usize {
        bank_of(line, self.banks.len())
    }

    // ---------------- NVM ----------------

    fn nvm_read(&mut self, line: u64) {
        if self.nvm.read(line) {
            self.c.nvm_red_reads += 1;
        } else {
            self.c.nvm_data_reads += 1;
        }
    }

    fn nvm_write(&mut self, line: u64) {
        if self.nvm.write(line) {
            self.c.nvm_red_writes += 1;
        } else {
            self.c.nvm_data_writes += 1;
        }
    }

    // ---------------- the controller's redundancy cache ----------------

    /// Fetch redundancy line `r` for the controller of bank `ctl_bank` through its cache and the
    /// LLC redundancy partition of `r`'s home bank; `update` marks it dirty (written back to
    /// NVM only when the partition evicts it). Returns the cycles the lookup took.
    fn red_get(&mut self, ctl_bank: usize, r: u64, update: bool) -> f64 {
        let home = self.bank(r);
        let has_ctl = self.banks[ctl_bank].ctl.is_some();
        let mut cycles = 0.0;
        let ctl_hit = self.banks[ctl_bank]
            .ctl
            .as_mut()
            .is_some_and(|ctl| ctl.touch(r));
        if has_ctl {
            cycles += f64::from(self.cfg.ctl_latency_cycles);
        }
        if ctl_hit {
            self.c.ctl_hits += 1;
        } else {
            if has_ctl {
                self.c.ctl_misses += 1;
            }
            cycles += f64::from(self.cfg.llc.latency_cycles);
            let red_hit = self.banks[home]
                .red
                .as_mut()
                .is_some_and(|red| red.touch(r));
            if red_hit {
                self.c.llc_red_hits += 1;
            } else {
                self.c.llc_red_misses += 1;
                self.nvm_read(r);
                let victim = self.banks[home]
                    .red
                    .as_mut()
                    .and_then(|red| red.insert(r, false));
                if let Some(v) = victim {
                    // The controller caches are inclusive within the partition.
                    for b in &mut self.banks {
                        if let Some(ctl) = b.ctl.as_mut() {
                            ctl.remove(v.line);
                        }
                    }
                    if v.dirty {
                        self.nvm_write(v.line);
                    }
                }
            }
            if let Some(ctl) = self.banks[ctl_bank].ctl.as_mut() {
                // A controller-cache victim needs nothing: its dirty state lives in the
                // partition, which still holds it.
                let _ = ctl.insert(r, false);
            }
        }
        if update {
            if let Some(red) = self.banks[home].red.as_mut() {
                red.set_dirty(r, true);
            }
        }
        cycles
    }

    // ---------------- fills and writebacks of data lines ----------------

    /// NVM -> LLC fill of `line` (absent from the LLC). Returns the cycles the requesting core
    /// waits (before the MLP division).
    fn fill(&mut self, line: u64) -> f64 {
        let l = self.layout();
        let bank = self.bank(line);
        let mut cycles = 0.0;
        self.nvm.begin_critical();
        if kind(line) == LineKind::Data {
            self.c.fills += 1;
            match self.design {
                Design::Naive => {
                    let first = line / LINES_PER_PAGE * LINES_PER_PAGE;
                    for x in first..first + LINES_PER_PAGE {
                        self.nvm_read(x);
                    }
                    self.nvm_read(l.syscs_line(line));
                    self.c.crc_ops += 1;
                }
                Design::ClCsums => {
                    self.nvm_read(line);
                    self.nvm_read(l.clcs_line(line));
                    self.c.crc_ops += 1;
                }
                Design::ClCache | Design::Tvarak => {
                    cycles += self.red_get(bank, l.clcs_line(line), false);
                    self.nvm_read(line);
                    self.c.crc_ops += 1;
                }
                _ => self.nvm_read(line),
            }
            if self.design.is_hardware() {
                cycles += f64::from(self.cfg.range_match_cycles + self.cfg.crc_cycles);
            }
            if let Some(o) = self.observer.as_deref_mut() {
                o.fill(line * LINE);
            }
        } else {
            self.nvm_read(line);
        }
        cycles += self.nvm.end_critical() * self.cfg.ghz;
        if let Some(v) = self.banks[bank].app.insert(line, false) {
            self.llc_evict(v);
        }
        cycles
    }

    /// The LLC application partition evicted `v`: back-invalidate the private copies
    /// (inclusion) and write it back if it or a private copy was dirty.
    fn llc_evict(&mut self, v: crate::cache::Victim) {
        let mut dirty = v.dirty;
        let mut found = false;
        for core in &mut self.cores {
            for c in [&mut core.l1, &mut core.l2] {
                if let Some(d) = c.remove(v.line) {
                    found = true;
                    dirty |= d;
                }
            }
        }
        if found {
            self.c.back_invalidations += 1;
        }
        if dirty {
            // A private dirty copy merges here with the old value still in the LLC, so the
            // diff is formed on the spot: no old-data read for TVARAK either way.
            self.writeback(v.line);
        }
    }

    /// LLC -> NVM writeback of `line` with the design's redundancy update.
    fn writeback(&mut self, line: u64) {
        let l = self.layout();
        if kind(line) != LineKind::Data {
            self.nvm_write(line);
            return;
        }
        let bank = self.bank(line);
        self.c.writebacks += 1;
        let red = [l.syscs_line(line), l.clcs_line(line), l.parity_line(line)];
        match self.design {
            Design::Naive | Design::ClCsums => {
                let red: &[u64] = if self.design == Design::Naive {
                    &[red[0], red[2]]
                } else {
                    &red
                };
                self.nvm_read(line);
                for &r in red {
                    self.nvm_read(r);
                }
                self.nvm_write(line);
                for &r in red {
                    self.nvm_write(r);
                }
                self.c.crc_ops += red.len() as u64 - 1;
                self.c.xor_ops += 1;
            }
            Design::ClCache | Design::Tvarak => {
                if self.design == Design::Tvarak {
                    // The diff (if the line has one) is consumed. TVARAK never reads the old data:
                    // it has the diff, or the old value is still in the inclusive LLC when a
                    // private dirty copy merges on eviction.
                    if let Some(d) = self.banks[bank].diff.as_mut() {
                        d.remove(line);
                    }
                } else {
                    self.nvm_read(line);
                }
                for r in red {
                    self.red_get(bank, r, true);
                }
                self.nvm_write(line);
                self.c.crc_ops += 2;
                self.c.xor_ops += 1;
            }
            _ => self.nvm_write(line),
        }
        if let Some(o) = self.observer.as_deref_mut() {
            let data = self.bytes.get(&line).copied().unwrap_or([0; 64]);
            o.writeback(line * LINE, &data);
        }
    }

    /// A dirty line comes down from a core's L1 or L2 into the LLC (which holds it: inclusion).
    fn llc_receive_dirty(&mut self, line: u64) {
        let bank = self.bank(line);
        if self.design == Design::Tvarak && kind(line) == LineKind::Data {
            let diff = self.banks[bank]
                .diff
                .as_mut()
                .unwrap_or_else(|| unreachable!("tvarak has a diff partition"));
            if !diff.touch(line) {
                self.c.diffs_created += 1;
                if let Some(v) = diff.insert(line, true) {
                    // Diff victim: write its line back now with the diff, keep it, mark clean.
                    self.c.diffs_evicted += 1;
                    self.writeback(v.line);
                    self.banks[bank].app.set_dirty(v.line, false);
                }
            }
        }
        let present = self.banks[bank].app.set_dirty(line, true);
        debug_assert!(present, "the LLC is inclusive");
    }

    // ---------------- core accesses ----------------

    /// One line access by `core`; returns the cycles the core stalls (already divided by MLP).
    fn access(&mut self, core: usize, line: u64, store: bool) -> f64 {
        if self.cores[core].l1.touch(line) {
            self.c.l1_hits += 1;
            if store {
                self.cores[core].l1.set_dirty(line, true);
            }
            return 0.0;
        }
        self.c.l1_misses += 1;
        let mut stall = f64::from(self.cfg.l2.latency_cycles);
        if self.cores[core].l2.touch(line) {
            self.c.l2_hits += 1;
        } else {
            self.c.l2_misses += 1;
            stall += f64::from(self.cfg.llc.latency_cycles);
            let bank = self.bank(line);
            if self.banks[bank].app.touch(line) {
                self.c.llc_hits += 1;
            } else {
                self.c.llc_misses += 1;
                stall += self.fill(line);
            }
            // The fill's evictions may have back-invalidated nothing of this core's copy of
            // `line` (it was absent); insert it into L2.
            if let Some(v) = self.cores[core].l2.insert(line, false) {
                if v.dirty {
                    self.llc_receive_dirty(v.line);
                }
            }
        }
        let victim = if self.cores[core].l1.contains(line) {
            // Only if an eviction above re-inserted it (cannot happen, kept for safety).
            self.cores[core].l1.set_dirty(line, store);
            None
        } else {
            self.cores[core].l1.insert(line, store)
        };
        if let Some(v) = victim {
            if v.dirty {
                self.l1_writeback(core, v.line);
            }
        }
        stall / f64::from(self.cfg.mlp)
    }

    /// A dirty L1 victim goes to L2 (inserted dirty if L2 no longer has it).
    fn l1_writeback(&mut self, core: usize, line: u64) {
        if self.cores[core].l2.set_dirty(line, true) {
            return;
        }
        if let Some(v) = self.cores[core].l2.insert(line, true) {
            if v.dirty {
                self.llc_receive_dirty(v.line);
            }
        }
    }

    fn charge(&mut self, core: usize, cycles: f64) {
        self.cores[core].cycles += cycles;
    }

    // ---------------- events ----------------

    fn event(&mut self, idx: u64, ev: Event) -> Result<(), SimError> {
        let bad_core = |core: u16| {
            SimError::invalid(
                format!("core of event {idx}"),
                format!("< {} (SimConfig.cores)", self.cfg.cores),
                core,
            )
        };
        let check_range = |addr: u64, len: u32| match addr.checked_add(u64::from(len)) {
            Some(end) if end <= MAX_ADDR => Ok(()),
            _ => Err(SimError::invalid(
                format!("address range of event {idx}"),
                format!("addr + len <= {MAX_ADDR}"),
                format!("{addr:#x} + {len}"),
            )),
        };
        let base = self.cfg.instrs_per_event / self.cfg.ipc;
        match ev {
            Event::Load { core, addr, len } => {
                if core >= self.cfg.cores {
                    return Err(bad_core(core));
                }
                check_range(addr, len)?;
                let core = usize::from(core);
                self.c.loads += 1;
                let mut stall = base;
                for line in lines_of(addr, len) {
                    stall += self.access(core, line, false);
                }
                self.charge(core, stall);
            }
            Event::Store {
                core,
                addr,
                data,
                len,
            } => {
                if core >= self.cfg.cores {
                    return Err(bad_core(core));
                }
                check_range(addr, len)?;
                if let Some(d) = &data {
                    if d.len() != len as usize {
                        return Err(SimError::invalid(
                            format!("data length of store event {idx}"),
                            format!("{len} (the store's len)"),
                            d.len(),
                        ));
                    }
                }
                let core = usize::from(core);
                self.c.stores += 1;
                if let Some(d) = data {
                    self.record_bytes(addr, &d);
                }
                let mut stall = base;
                for line in lines_of(addr, len) {
                    stall += self.access(core, line, true);
                    if let Design::Vilamb { .. } = self.design {
                        self.dirty_pages.insert(line / LINES_PER_PAGE);
                    }
                }
                self.charge(core, stall);
                if let Design::Vilamb { period_writes } = self.design {
                    self.stores_since_sweep += 1;
                    if self.stores_since_sweep >= period_writes {
                        self.sweep();
                    }
                }
            }
            Event::Flush { core, .. } | Event::Fence { core } | Event::TxBegin { core } => {
                // Backup power is assumed for every design (as in the paper), so durability
                // flushes and fences cost nothing beyond the event's own work.
                if core >= self.cfg.cores {
                    return Err(bad_core(core));
                }
                self.charge(usize::from(core), base);
            }
            Event::Work { core, cycles } => {
                // Only the stated cycles: the event stands for instructions, not an access.
                if core >= self.cfg.cores {
                    return Err(bad_core(core));
                }
                self.charge(usize::from(core), f64::from(cycles));
            }
            Event::TxCommit { core, ranges } => {
                if core >= self.cfg.cores {
                    return Err(bad_core(core));
                }
                for &(a, l) in &ranges {
                    check_range(a, l)?;
                }
                self.c.tx_commits += 1;
                let core = usize::from(core);
                self.charge(core, base);
                match self.design {
                    Design::TxbObject => self.txb_object(core, &ranges),
                    Design::TxbPage => self.txb_page(core, &ranges),
                    _ => {}
                }
                if let Some(o) = self.observer.as_deref_mut() {
                    o.tx_commit(&ranges);
                }
            }
        }
        Ok(())
    }

    fn record_bytes(&mut self, addr: u64, data: &[u8]) {
        let mut off = 0usize;
        while off < data.len() {
            let a = addr + off as u64;
            let line = a / LINE;
            let in_line = (a % LINE) as usize;
            let n = (64 - in_line).min(data.len() - off);
            if !self.bytes.contains_key(&line) {
                let init = self
                    .observer
                    .as_deref_mut()
                    .and_then(|o| o.current(line * LINE))
                    .unwrap_or([0; 64]);
                self.bytes.insert(line, init);
            }
            if let Some(b) = self.bytes.get_mut(&line) {
                b[in_line..in_line + n].copy_from_slice(&data[off..off + n]);
            }
            off += n;
        }
    }

    // ---------------- software redundancy ----------------

    /// Software CRC of `bytes` bytes on `core`.
    fn sw_crc(&mut self, core: usize, bytes: u64) {
        self.c.crc_ops += 1;
        self.c.sw_crc_bytes += bytes;
        let cycles = (bytes as f64 / 8.0).ceil() * self.cfg.sw_crc_cycles_per_8b;
        self.charge(core, cycles);
    }

    /// A load or store the redundancy code runs on `core` (through its caches).
    fn sw_access(&mut self, core: usize, line: u64, store: bool) {
        self.c.sw_line_accesses += 1;
        let s = self.access(core, line, store);
        self.charge(core, s + 1.0 / self.cfg.ipc);
    }

    /// Recompute the parity of data line `line` from scratch: read its peers, write parity
    /// (the line itself was just read or written by the caller).
    fn sw_parity(&mut self, core: usize, line: u64) {
        let l = self.layout();
        for p in l.peers(line) {
            self.sw_access(core, p, false);
        }
        self.c.xor_ops += 1;
        self.sw_access(core, l.parity_line(line), true);
    }

    fn txb_object(&mut self, core: usize, ranges: &[(u64, u32)]) {
        let l = self.layout();
        for &(addr, len) in ranges {
            let lines = lines_of(addr, len);
            for line in lines.clone() {
                self.sw_access(core, line, false);
            }
            self.sw_crc(core, u64::from(len));
            self.sw_access(core, l.objcs_line(addr), true);
            for line in lines {
                self.sw_parity(core, line);
            }
        }
    }

    fn txb_page(&mut self, core: usize, ranges: &[(u64, u32)]) {
        let l = self.layout();
        let mut pages = BTreeSet::new();
        let mut lines = BTreeSet::new();
        for &(addr, len) in ranges {
            for line in lines_of(addr, len) {
                pages.insert(line / LINES_PER_PAGE);
                lines.insert(line);
            }
        }
        for page in pages {
            let first = page * LINES_PER_PAGE;
            for x in first..first + LINES_PER_PAGE {
                self.sw_access(core, x, false);
            }
            self.sw_crc(core, LINES_PER_PAGE * LINE);
            self.sw_access(core, l.syscs_line(first), true);
        }
        for line in lines {
            self.sw_parity(core, line);
        }
    }

    /// The Vilamb-like sweep on the background core: checksum and parity of every page dirtied
    /// since the last sweep (whole pages: which lines changed is not tracked).
    fn sweep(&mut self) {
        let core = usize::from(self.cfg.cores);
        let l = self.layout();
        self.c.sweeps += 1;
        self.stores_since_sweep = 0;
        let pages = std::mem::take(&mut self.dirty_pages);
        for page in pages {
            let first = page * LINES_PER_PAGE;
            for x in first..first + LINES_PER_PAGE {
                self.sw_access(core, x, false);
            }
            self.sw_crc(core, LINES_PER_PAGE * LINE);
            self.sw_access(core, l.syscs_line(first), true);
            for x in first..first + LINES_PER_PAGE {
                self.sw_parity(core, x);
            }
        }
    }

    // ---------------- the end ----------------

    /// Write back everything dirty: private caches into the LLC, the LLC to NVM (with the
    /// design's redundancy updates), then the cached redundancy.
    fn drain(&mut self) {
        if let Design::Vilamb { .. } = self.design {
            if !self.dirty_pages.is_empty() {
                self.sweep();
            }
        }
        for core in 0..self.cores.len() {
            for level in 0..2 {
                let lines = if level == 0 {
                    self.cores[core].l1.dirty_lines()
                } else {
                    self.cores[core].l2.dirty_lines()
                };
                for line in lines {
                    let cache = if level == 0 {
                        &mut self.cores[core].l1
                    } else {
                        &mut self.cores[core].l2
                    };
                    cache.set_dirty(line, false);
                    self.llc_receive_dirty(line);
                }
            }
        }
        for b in 0..self.banks.len() {
            for line in self.banks[b].app.dirty_lines() {
                // An earlier writeback in this loop may have cleaned it (diff victim).
                if self.banks[b].app.is_dirty(line) == Some(true) {
                    self.writeback(line);
                    self.banks[b].app.set_dirty(line, false);
                }
            }
        }
        for b in 0..self.banks.len() {
            let lines = self.banks[b]
                .red
                .as_ref()
                .map(|r| r.dirty_lines())
                .unwrap_or_default();
            for r in lines {
                self.nvm_write(r);
                if let Some(red) = self.banks[b].red.as_mut() {
                    red.set_dirty(r, false);
                }
            }
        }
    }

    fn report(self, events: u64) -> Report {
        let cfg = &self.cfg;
        let c = &self.c;
        let pj = |h: u64, m: u64, g: &CacheGeom| h as f64 * g.hit_pj + m as f64 * g.miss_pj;
        let cache_pj = pj(c.l1_hits, c.l1_misses, &cfg.l1)
            + pj(c.l2_hits, c.l2_misses, &cfg.l2)
            + pj(
                c.llc_hits + c.llc_red_hits,
                c.llc_misses + c.llc_red_misses,
                &cfg.llc,
            )
            + c.ctl_hits as f64 * cfg.ctl_hit_pj
            + c.ctl_misses as f64 * cfg.ctl_miss_pj;
        let nvm_nj = (c.nvm_data_reads + c.nvm_red_reads) as f64 * cfg.nvm_read_nj
            + (c.nvm_data_writes + c.nvm_red_writes) as f64 * cfg.nvm_write_nj;
        let core_ns = self
            .cores
            .iter()
            .map(|k| k.cycles / cfg.ghz)
            .fold(0.0, f64::max);
        Report {
            design: self.design,
            counters: self.c.clone(),
            energy_nj: cache_pj / 1000.0 + nvm_nj,
            runtime_ns: core_ns.max(self.nvm.max_busy_ns()),
            events,
        }
    }
}

/// Run `events` through the simulated machine under `design`, drain every dirty line at the
/// end, and report. The observer sees every fill and writeback of a data line.
pub fn simulate(
    cfg: &SimConfig,
    design: Design,
    events: impl Iterator<Item = Result<Event, SimError>>,
    observer: Option<&mut dyn Observer>,
) -> Result<Report, SimError> {
    cfg.validate(design)?;
    let mut m = Machine::new(cfg, design, observer);
    let mut n = 0u64;
    for ev in events {
        m.event(n, ev?)?;
        n += 1;
    }
    m.drain();
    Ok(m.report(n))
}
