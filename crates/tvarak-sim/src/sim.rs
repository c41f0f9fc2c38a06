//! The trace-driven simulator: configuration, counters, the report and the observer through
//! which a functional engine follows what the controller does to NVM lines.

use crate::cache::CacheGeom;
use crate::design::Design;
use crate::error::SimError;

// Until trace.rs has the agreed `Event`, a private copy of it (removed on merging the trace
// module).
mod pending_trace {
    /// One event of a trace (the agreed enum; see trace.rs once merged).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum Event {
        /// A load of `len` bytes at `addr`.
        Load { core: u16, addr: u64, len: u32 },
        /// A store of `len` bytes at `addr`, with its bytes when the trace carries data.
        Store {
            core: u16,
            addr: u64,
            data: Option<Vec<u8>>,
            len: u32,
        },
        /// A clwb/clflushopt of the line containing `addr`.
        Flush { core: u16, addr: u64 },
        /// A store fence.
        Fence { core: u16 },
        /// The start of a transaction.
        TxBegin { core: u16 },
        /// The commit of a transaction and the ranges it modified.
        TxCommit { core: u16, ranges: Vec<(u64, u32)> },
    }
}
pub use pending_trace::Event;

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
            nvm_read_ns: 60.0,
            nvm_write_ns: 150.0,
            nvm_read_nj: 1.6,
            nvm_write_nj: 9.0,
            ghz: 2.27,
            instrs_per_event: 4.0,
            ipc: 1.0,
            mlp: 10,
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
    /// LLC -> NVM writeback of a data line, with its current bytes.
    fn writeback(&mut self, line_addr: u64, data: &[u8; 64]);
    /// A transaction committed with these modified ranges.
    fn tx_commit(&mut self, ranges: &[(u64, u32)]) {
        let _ = ranges;
    }
}

/// Run `events` through the simulated machine under `design`.
pub fn simulate(
    cfg: &SimConfig,
    design: Design,
    events: impl Iterator<Item = Result<Event, SimError>>,
    observer: Option<&mut dyn Observer>,
) -> Result<Report, SimError> {
    let _ = (cfg, events, observer);
    Err(SimError::invalid(
        "simulate",
        "an implemented simulator",
        format!("the shell for {design}"),
    ))
}
