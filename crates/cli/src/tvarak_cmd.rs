//! `kavach tvarak-sim`: TVARAK's controller simulator (`tvarak_sim`): traces in, per-design
//! tables and figures out.
//!
//! Exit status, the same for every subcommand: 0 done; 1 the trace is damaged (its header is a
//! trace's, but its body fails the reader's checks: cut short, a bad event, an access outside
//! the traced range); 2 could not run (a bad argument, a file that is not a trace at all, an
//! output that exists, a PNG that cannot be written, a workload that failed).

use std::cell::RefCell;
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};
use plot::{Chart, Series};
use tvarak_sim::design::Design;
use tvarak_sim::error::SimError;
use tvarak_sim::record;
use tvarak_sim::sim::{self, Report, SimConfig};
use tvarak_sim::trace::{self, TraceHeader};
use tvarak_sim::workload::{self, FioParams, Kernel, Pattern, Rw, StreamParams};

use crate::outcome::{Outcome, check_output_path, print_json, refused};
use crate::tvarak_files::{
    TraceSummary, check_trace, open_trace, publish, report_damage, temp_beside,
};

#[derive(Debug, Subcommand)]
pub enum TvarakCommand {
    /// Simulate a trace under designs: NVM and cache accesses, energy, runtime, overheads.
    ///
    /// Per design: the NVM accesses (data and redundancy, reads and writes), the cache
    /// accesses (L1, L2, LLC, controller cache), energy, the runtime estimate, and the
    /// overhead against Baseline (the paper's Fig. 8 panels).
    ///
    /// Designs: baseline, naive, cl, cl-cache, tvarak (the ablation steps), txb-object,
    /// txb-page, vilamb[:N], or all. Baseline is always simulated, for the overheads. The
    /// machine is the paper's Table III unless changed with the options below.
    #[command(after_help = "Examples:\n  \
        kavach tvarak-sim run fio-rw.trace\n  \
        kavach tvarak-sim run triad.trace --design all --png triad.png\n  \
        kavach tvarak-sim run heap.trace --design tvarak,txb-object --red-ways 4 --json\n\n\
        Exit status: 0 simulated; 1 the trace is damaged (a trace's header, but its body fails \
        the checks); 2 could not run (a bad argument, not a trace, a PNG that cannot be written).")]
    Run(RunArgs),
    /// Print a trace's header and its events counted by kind, checking every event.
    #[command(after_help = "Examples:\n  \
        kavach tvarak-sim info fio-rw.trace\n  \
        kavach tvarak-sim info heap.trace --json\n\n\
        Exit status: 0 the trace reads to its end; 1 the trace is damaged (named on stderr); 2 \
        could not run (no such file, not a trace).")]
    Info(InfoArgs),
    /// Generate a synthetic trace: fio-like 64 B accesses or a stream kernel.
    #[command(subcommand)]
    Gen(GenCommand),
    /// Record a trace of a real Kavach workload.
    ///
    /// The workload runs on an emulated PM medium whose loads, stores, flushes and fences are
    /// recorded.
    #[command(after_help = "Examples:\n  \
        kavach tvarak-sim record log -o log.trace\n  \
        kavach tvarak-sim record log --threads 8 --ops 5000 --policy group:8 -o log-g8.trace\n  \
        kavach tvarak-sim record heap --ops 20000 --read-percent 50 -o heap.trace\n  \
        kavach tvarak-sim record store --threads 2 --keys 400 --ops 500 --read-percent 50 --value 100 -o kv.trace\n  \
        kavach tvarak-sim record server --clients 4 --keys 2000 --ops 2000 --read-percent 50 --value 100 -o server.trace\n  \
        kavach tvarak-sim record server --listen 6390 --keys 2000 --value 2048 -o ycsb.trace\n\n\
        Exit status: 0 recorded; 2 could not run (a bad argument, an output that exists, the \
        workload failed).")]
    Record(RecordArgs),
    /// Sensitivity (Fig. 10): overheads as one parameter varies.
    ///
    /// One parameter over a list of values, each design's overhead against Baseline at each.
    ///
    /// Give exactly one of --red-ways, --diff-ways, --ctl-cache-kib. Baseline is simulated
    /// once on the machine without the change (it uses no partitions or controller cache).
    #[command(after_help = "Examples:\n  \
        kavach tvarak-sim sweep triad.trace --red-ways 1,2,4,8 --png red-ways.png\n  \
        kavach tvarak-sim sweep fio-rw.trace --ctl-cache-kib 1,2,4,8,16 --json\n\n\
        Exit status: 0 swept; 1 the trace is damaged; 2 could not run (a bad argument, not a \
        trace, a PNG that cannot be written).")]
    Sweep(SweepArgs),
    /// The ablation (Fig. 9): naive, +cl-checksums, +caching, +diffs.
    ///
    /// Naive, + DAX-CL-checksums, + redundancy caching, + diffs (= TVARAK): read
    /// amplification (NVM reads per data line filled) and overheads against Baseline at each
    /// step.
    #[command(after_help = "Examples:\n  \
        kavach tvarak-sim ablation triad.trace\n  \
        kavach tvarak-sim ablation fio-rw.trace --json --png ablation.png\n\n\
        Exit status: 0 done; 1 the trace is damaged; 2 could not run (a bad argument, not a \
        trace, a PNG that cannot be written).")]
    Ablation(AblationArgs),
    /// The fault-coverage matrix: faults at a DIMM against each design.
    ///
    /// Faults injected at a DIMM (lost write, misdirected write, misdirected read, bit flip)
    /// against each design: detected on first read, by a scrub, or not, and corrected or not.
    #[command(after_help = "Examples:\n  \
        kavach tvarak-sim faults\n  \
        kavach tvarak-sim faults --trials 100 --seed 7 --json\n\n\
        Exit status: 0 printed (whatever the matrix says: it measures designs, not a device); \
        2 could not run (a bad argument).")]
    Faults(FaultsArgs),
    /// `kavach tvarak-sim TRACE [OPTIONS]` is `kavach tvarak-sim run TRACE [OPTIONS]`.
    #[command(external_subcommand)]
    Trace(Vec<OsString>),
}

/// `run`'s arguments on their own, for `kavach tvarak-sim TRACE ...`.
#[derive(Debug, clap::Parser)]
#[command(name = "kavach tvarak-sim", no_binary_name = true)]
struct RunShorthand {
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum GenCommand {
    /// fio's libpmem engine as the paper ran it: 64 B accesses, one stream per thread in a
    /// region of its own, no line touched twice.
    #[command(after_help = "Examples:\n  \
        kavach tvarak-sim gen fio --pattern rand-write -o fio-rw.trace\n  \
        kavach tvarak-sim gen fio --pattern seq-read --threads 12 --bytes-per-thread 4MiB -o fio-sr.trace\n\n\
        Exit status: 0 written; 2 could not run (a bad argument, an output that exists).")]
    Fio(FioArgs),
    /// A stream kernel over three arrays in PM, split between threads.
    #[command(after_help = "Examples:\n  \
        kavach tvarak-sim gen stream --kernel triad -o triad.trace\n  \
        kavach tvarak-sim gen stream --kernel copy --array-bytes 8MiB --threads 12 -o copy.trace\n\n\
        Exit status: 0 written; 2 could not run (a bad argument, an output that exists).")]
    Stream(StreamArgs),
}

/// The simulated machine, on top of the paper's Table III.
#[derive(Debug, Args, Clone)]
pub struct MachineArgs {
    /// LLC size in MiB (default 24: 12 banks of 2 MiB).
    #[arg(long)]
    llc_mib: Option<u64>,
    /// LLC ways (of 16) for the redundancy partition (default 2).
    #[arg(long)]
    red_ways: Option<u16>,
    /// LLC ways for the diff partition (default 1).
    #[arg(long)]
    diff_ways: Option<u16>,
    /// The controller cache of each bank, KiB (default 4; 0: none, the LLC's redundancy
    /// partition serves the controller directly).
    #[arg(long)]
    ctl_cache_kib: Option<u32>,
    /// Cores (default: 12, or the trace's cores if it has more).
    #[arg(long)]
    cores: Option<u16>,
    /// NVM DIMMs (default 4).
    #[arg(long)]
    dimms: Option<u16>,
    /// NVM read latency, ns (default 60).
    #[arg(long)]
    nvm_read_ns: Option<f64>,
    /// NVM write latency, ns (default 150).
    #[arg(long)]
    nvm_write_ns: Option<f64>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The trace file.
    trace: PathBuf,
    /// Designs, comma separated, or all.
    #[arg(long, default_value = "baseline,tvarak,txb-object,txb-page")]
    design: String,
    #[command(flatten)]
    machine: MachineArgs,
    /// Write a figure: each design's runtime, energy, NVM and cache accesses relative to
    /// Baseline.
    #[arg(long)]
    png: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct InfoArgs {
    /// The trace file.
    trace: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FioPattern {
    SeqRead,
    SeqWrite,
    RandRead,
    RandWrite,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StreamKernel {
    Copy,
    Scale,
    Add,
    Triad,
}

#[derive(Debug, Args)]
pub struct FioArgs {
    /// The access pattern.
    #[arg(long, value_enum)]
    pattern: FioPattern,
    /// Threads (one stream and one region each).
    #[arg(long, default_value_t = 12)]
    threads: u16,
    /// Bytes each thread accesses (the paper: 32MiB).
    #[arg(long, default_value = "1MiB")]
    bytes_per_thread: String,
    /// Each thread's region (default: 16 times --bytes-per-thread, the paper's 512 MiB
    /// for 32 MiB).
    #[arg(long)]
    region_bytes: Option<String>,
    /// Stores carry (seeded) bytes, for the functional engine.
    #[arg(long)]
    with_data: bool,
    /// Cycles of fio's own work per I/O, a Work event before each access (default: 435,
    /// measured from fio 3.33's libpmem engine; 0: none).
    #[arg(long, default_value_t = workload::FIO_WORK_CYCLES)]
    work_cycles: u32,
    /// Writes: no transaction commit after each write (the TxB designs then do nothing).
    #[arg(long)]
    no_tx: bool,
    /// Seed of the random patterns and the data.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The trace to write (must not exist).
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct StreamArgs {
    /// The kernel.
    #[arg(long, value_enum)]
    kernel: StreamKernel,
    /// Bytes of each array (the paper: 128MiB).
    #[arg(long, default_value = "2MiB")]
    array_bytes: String,
    /// Threads, each on its own slice of the arrays.
    #[arg(long, default_value_t = 12)]
    threads: u16,
    /// Stores carry the computed values, for the functional engine.
    #[arg(long)]
    with_data: bool,
    /// No transaction commit after each step's store (the TxB designs then do nothing).
    #[arg(long)]
    no_tx: bool,
    /// Seed of the initial arrays.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The trace to write (must not exist).
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RecordWorkload {
    /// Threads appending records to Arcadia's log (`log::Log`), forced by --policy.
    Log,
    /// Per instance (--threads of them, each on its own core, taking turns on one thread) a
    /// chained hash map in the heap, each insert or update one undo-log transaction
    /// (recorded with the ranges it changed).
    Heap,
    /// The key-value store (dstore on DIPPER) under a YCSB-like mix with high skew (90% of
    /// the operations on 10% of the keys): --keys loaded first, then --ops per client
    /// (--threads of them, each on its own core, taking turns on one thread), --read-percent
    /// of them GETs.
    Store,
    /// The Redis-protocol server of `kavach serve` over a traced store, driven over TCP by
    /// --clients built-in clients (YCSB's zipfian key choice) or, with --listen, by outside
    /// clients such as redis-benchmark or YCSB.
    Server,
}

#[derive(Debug, Args)]
pub struct RecordArgs {
    /// What to run.
    #[arg(value_enum)]
    workload: RecordWorkload,
    /// Log: appending threads; heap: instances; store: clients (each one core of the trace;
    /// setting up is one more, core 0) [default: 4]. Not for server (--clients, --cores).
    #[arg(long)]
    threads: Option<u16>,
    /// Operations per thread, instance or client: records appended (log), inserts, updates
    /// and lookups (heap), GETs and SETs (store, server).
    #[arg(long, default_value_t = 1000)]
    ops: u64,
    /// Log: payload bytes per record (8..=1048576).
    #[arg(long, default_value_t = 128)]
    payload: u32,
    /// Log: force policy, sync, frequency:F or group:G.
    #[arg(long, default_value = "sync")]
    policy: String,
    /// Heap, store and server: percent of operations that are lookups or GETs (0: updates
    /// only).
    #[arg(long, default_value_t = 0)]
    read_percent: u8,
    /// Heap: keys drawn from 0..KEYS; store and server: keys loaded before the operations.
    #[arg(long, default_value_t = 1000)]
    keys: u64,
    /// Heap: buckets per map.
    #[arg(long, default_value_t = 256)]
    buckets: u64,
    /// Heap, store and server: value bytes (heap: a multiple of 8, up to 4096).
    #[arg(long, default_value_t = 32)]
    value: u32,
    /// Record addresses only (stores without their bytes): smaller, but no functional engine.
    #[arg(long)]
    address_only: bool,
    /// Record each thread's own work between its PM accesses (its CPU time, as cycles of a
    /// core at this clock, MHz; the paper's cores run at 2270) as Work events; 0: none. Use a
    /// release build: a debug build's work is many times slower.
    #[arg(long, default_value_t = 2270)]
    work_mhz: u32,
    /// Seed of the payloads, keys and values.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The trace to write (must not exist).
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: crate::tvarak_server::ServerOpts,
}

#[derive(Debug, Args)]
pub struct SweepArgs {
    /// The trace file.
    trace: PathBuf,
    /// Redundancy-partition ways to try, comma separated.
    #[arg(long)]
    red_ways: Option<String>,
    /// Diff-partition ways to try, comma separated.
    #[arg(long)]
    diff_ways: Option<String>,
    /// Controller cache sizes (KiB) to try, comma separated (0: no controller cache).
    #[arg(long)]
    ctl_cache_kib: Option<String>,
    /// The designs swept (hardware designs use the partitions and the controller cache).
    #[arg(long, default_value = "tvarak")]
    design: String,
    /// Write the overheads against the swept value as a figure.
    #[arg(long)]
    png: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct AblationArgs {
    /// The trace file.
    trace: PathBuf,
    #[command(flatten)]
    machine: MachineArgs,
    /// Write read amplification and overheads per step as a figure.
    #[arg(long)]
    png: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct FaultsArgs {
    /// Seed of the trials.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Seeded trials per fault and design.
    #[arg(long, default_value_t = 20)]
    trials: u32,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(c: TvarakCommand) -> Result<Outcome> {
    match c {
        TvarakCommand::Run(a) => run_cmd(&a),
        TvarakCommand::Info(a) => info_cmd(&a),
        TvarakCommand::Gen(GenCommand::Fio(a)) => gen_fio(&a),
        TvarakCommand::Gen(GenCommand::Stream(a)) => gen_stream(&a),
        TvarakCommand::Record(a) => record_cmd(&a),
        TvarakCommand::Sweep(a) => sweep_cmd(&a),
        TvarakCommand::Ablation(a) => ablation_cmd(&a),
        TvarakCommand::Faults(a) => faults_cmd(&a),
        TvarakCommand::Trace(args) => {
            let first = args.first().cloned().unwrap_or_default();
            if !Path::new(&first).exists() {
                return Err(refused(format!(
                    "{}: not a subcommand (run, info, gen, record, sweep, ablation, faults) \
                     and no such trace file",
                    first.to_string_lossy()
                )));
            }
            match <RunShorthand as clap::Parser>::try_parse_from(args) {
                Ok(a) => run_cmd(&a.run),
                Err(e) => {
                    let msg = e.to_string();
                    let first = msg.lines().next().unwrap_or_default();
                    Err(refused(format!(
                        "{} (see kavach tvarak-sim run --help)",
                        first.strip_prefix("error: ").unwrap_or(first)
                    )))
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Simulating trace files.

/// Why one design's simulation stopped.
enum SimFailure {
    /// The trace's body failed a check during this pass (it was fine on the checking pass: the
    /// file changed under us, or the reader disagrees with itself).
    Damage(String),
    /// The simulator refused (a bad configuration, an event it cannot take).
    Refused(anyhow::Error),
}

/// Simulate the trace at `path` under `design`, streaming it from the file.
fn simulate_file(
    path: &Path,
    cfg: &SimConfig,
    design: Design,
) -> std::result::Result<Report, SimFailure> {
    let r = open_trace(path).map_err(SimFailure::Refused)?;
    // The reader's own errors are damage; the simulator's are refusals: note which.
    let damage: Rc<RefCell<Option<String>>> = Rc::new(RefCell::new(None));
    let seen = Rc::clone(&damage);
    let events = r.inspect(move |e| {
        if let Err(err) = e {
            *seen.borrow_mut() = Some(err.to_string());
        }
    });
    match sim::simulate(cfg, design, events, None) {
        Ok(r) => Ok(r),
        Err(e) => {
            if let Some(t) = damage.borrow_mut().take() {
                return Err(SimFailure::Damage(format!("{}: {t}", path.display())));
            }
            Err(SimFailure::Refused(refused(format!(
                "simulating {} under {design}: {e}",
                path.display()
            ))))
        }
    }
}

/// Simulate every design; on damage, the message.
fn simulate_all(
    path: &Path,
    cfg: &SimConfig,
    designs: &[Design],
) -> Result<std::result::Result<Vec<Report>, String>> {
    let mut out = Vec::with_capacity(designs.len());
    for &d in designs {
        match simulate_file(path, cfg, d) {
            Ok(r) => out.push(r),
            Err(SimFailure::Damage(m)) => return Ok(Err(m)),
            Err(SimFailure::Refused(e)) => return Err(e),
        }
    }
    Ok(Ok(out))
}

// ---------------------------------------------------------------------------------------------
// Arguments.

fn parse_designs(text: &str) -> Result<Vec<Design>> {
    let mut out: Vec<Design> = Vec::new();
    if text.trim().eq_ignore_ascii_case("all") {
        return Ok(Design::ALL.to_vec());
    }
    for part in text.split(',') {
        let d: Design = part
            .parse()
            .map_err(|e: SimError| refused(format!("--design: {e}")))?;
        if !out.contains(&d) {
            out.push(d);
        }
    }
    // Baseline first: every overhead is against it.
    out.retain(|d| *d != Design::Baseline);
    out.insert(0, Design::Baseline);
    Ok(out)
}

fn parse_list<T: std::str::FromStr + PartialOrd + Copy + std::fmt::Display>(
    flag: &str,
    text: &str,
    min: T,
    max: T,
) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for part in text.split(',') {
        let v: T = part.trim().parse().map_err(|_| {
            refused(format!(
                "{flag}: expected numbers {min}..={max} separated by commas, found {part:?}"
            ))
        })?;
        if v < min || v > max {
            return Err(refused(format!(
                "{flag}: expected each value in {min}..={max}, found {v}"
            )));
        }
        out.push(v);
    }
    if out.len() > 32 {
        return Err(refused(format!(
            "{flag}: expected at most 32 values, found {}",
            out.len()
        )));
    }
    Ok(out)
}

/// The simulated machine: Table III with the changes asked for, checked.
fn machine(m: &MachineArgs, trace_cores: u16) -> Result<SimConfig> {
    let mut cfg = SimConfig::default();
    cfg.cores = m.cores.unwrap_or(cfg.cores.max(trace_cores));
    if cfg.cores == 0 || cfg.cores < trace_cores {
        return Err(refused(format!(
            "--cores: expected at least the trace's {trace_cores} cores, found {}",
            cfg.cores
        )));
    }
    if let Some(mib) = m.llc_mib {
        if !(1..=1024).contains(&mib) {
            return Err(refused(format!(
                "--llc-mib: expected 1..=1024, found {mib}"
            )));
        }
        cfg.llc.bytes = mib << 20;
    }
    if let Some(w) = m.red_ways {
        cfg.red_ways = w;
    }
    if let Some(w) = m.diff_ways {
        cfg.diff_ways = w;
    }
    let ways = cfg.llc.ways;
    if u32::from(cfg.red_ways) + u32::from(cfg.diff_ways) >= u32::from(ways) {
        return Err(refused(format!(
            "--red-ways/--diff-ways: expected together fewer than the LLC's {ways} ways, \
             found {} + {}",
            cfg.red_ways, cfg.diff_ways
        )));
    }
    if let Some(k) = m.ctl_cache_kib {
        if k > 1024 {
            return Err(refused(format!(
                "--ctl-cache-kib: expected 0..=1024, found {k}"
            )));
        }
        cfg.ctl_cache_bytes = k << 10;
    }
    if let Some(d) = m.dimms {
        if !(2..=64).contains(&d) {
            return Err(refused(format!(
                "--dimms: expected 2..=64 (parity needs two), found {d}"
            )));
        }
        cfg.dimms = d;
    }
    for (flag, v, slot) in [
        ("--nvm-read-ns", m.nvm_read_ns, &mut cfg.nvm_read_ns),
        ("--nvm-write-ns", m.nvm_write_ns, &mut cfg.nvm_write_ns),
    ] {
        if let Some(v) = v {
            if !(v.is_finite() && v > 0.0 && v <= 1e6) {
                return Err(refused(format!(
                    "{flag}: expected 0 < ns <= 1000000, found {v}"
                )));
            }
            *slot = v;
        }
    }
    Ok(cfg)
}

// ---------------------------------------------------------------------------------------------
// Overheads and tables.

/// `x` against `base` as a percentage; 0 when both are 0.
fn overhead(x: f64, base: f64) -> f64 {
    if base == 0.0 {
        if x == 0.0 { 0.0 } else { f64::INFINITY }
    } else {
        (x / base - 1.0) * 100.0
    }
}

#[derive(Debug, serde::Serialize)]
struct Overheads {
    runtime_pct: Option<f64>,
    nvm_accesses_pct: Option<f64>,
    energy_pct: Option<f64>,
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

fn overheads(r: &Report, base: &Report) -> Overheads {
    Overheads {
        runtime_pct: finite(overhead(r.runtime_ns, base.runtime_ns)),
        nvm_accesses_pct: finite(overhead(
            r.counters.nvm_accesses() as f64,
            base.counters.nvm_accesses() as f64,
        )),
        energy_pct: finite(overhead(r.energy_nj, base.energy_nj)),
    }
}

fn pct(x: Option<f64>) -> String {
    match x {
        Some(v) => format!("{v:+.1}%"),
        None => "n/a".into(),
    }
}

#[derive(Debug, serde::Serialize)]
struct DesignRow {
    design: String,
    counters: sim::Counters,
    energy_nj: f64,
    runtime_ns: f64,
    events: u64,
    #[serde(skip)]
    report: Report,
    nvm_accesses: u64,
    cache_accesses: u64,
    read_amplification: f64,
    vs_baseline: Overheads,
}

fn rows(reports: &[Report]) -> Vec<DesignRow> {
    let base = &reports[0];
    reports
        .iter()
        .map(|r| DesignRow {
            design: r.design.to_string(),
            counters: r.counters.clone(),
            energy_nj: r.energy_nj,
            runtime_ns: r.runtime_ns,
            events: r.events,
            nvm_accesses: r.counters.nvm_accesses(),
            cache_accesses: r.counters.cache_accesses(),
            read_amplification: r.counters.read_amplification(),
            vs_baseline: overheads(r, base),
            report: r.clone(),
        })
        .collect()
}

fn print_table(rows: &[DesignRow]) {
    println!(
        "{:<12} {:>10} {:>10} {:>10} {:>10} {:>11} {:>11} {:>11} {:>9} {:>11} {:>11} {:>9} {:>9} {:>9}",
        "design",
        "data R",
        "data W",
        "red R",
        "red W",
        "L1",
        "L2",
        "LLC",
        "ctl",
        "energy uJ",
        "runtime us",
        "runtime",
        "NVM acc",
        "energy"
    );
    for r in rows {
        let c = &r.report.counters;
        println!(
            "{:<12} {:>10} {:>10} {:>10} {:>10} {:>11} {:>11} {:>11} {:>9} {:>11.1} {:>11.1} {:>9} {:>9} {:>9}",
            r.design,
            c.nvm_data_reads,
            c.nvm_data_writes,
            c.nvm_red_reads,
            c.nvm_red_writes,
            c.l1_hits + c.l1_misses,
            c.l2_hits + c.l2_misses,
            c.llc_hits + c.llc_misses + c.llc_red_hits + c.llc_red_misses,
            c.ctl_hits + c.ctl_misses,
            r.report.energy_nj / 1e3,
            r.report.runtime_ns / 1e3,
            pct(r.vs_baseline.runtime_pct),
            pct(r.vs_baseline.nvm_accesses_pct),
            pct(r.vs_baseline.energy_pct),
        );
    }
    println!(
        "(NVM accesses are 64 B lines; L1/L2/LLC/ctl are accesses, hits and misses; the last \
         three columns are overheads against baseline.)"
    );
}

/// A design's name cut short for a figure's axis label.
fn short_name(d: &str) -> &str {
    match d {
        "baseline" => "base",
        "txb-object" => "txb-o",
        "txb-page" => "txb-p",
        "cl-cache" => "cl-c",
        other if other.starts_with("vilamb") => "vil",
        other => other,
    }
}

fn write_chart(c: Chart, p: &Path) -> Result<()> {
    c.with_size(900, 520)
        .write_png(p)
        .map_err(|e| refused(format!("{e}")))
}

// ---------------------------------------------------------------------------------------------
// The subcommands.

/// A checked trace's summary, the machine simulated and a report per design.
type Simulated = (TraceSummary, SimConfig, Vec<Report>);

/// What `run` and `ablation` share: check the PNG path and the trace, then simulate `designs`
/// on the machine `m` describes: the trace's summary, the machine and the reports.
/// `Ok(Err(outcome))`: the trace is damaged, reported.
fn check_and_simulate(
    trace: &Path,
    m: &MachineArgs,
    designs: &[Design],
    png: Option<&PathBuf>,
    json: bool,
) -> Result<std::result::Result<Simulated, Outcome>> {
    if let Some(p) = png {
        check_output_path("--png", p, true)?;
    }
    let summary = match check_trace(trace)? {
        Ok(s) => s,
        Err((s, what)) => return report_damage(&what, json, &s).map(Err),
    };
    let cfg = machine(m, summary.cores)?;
    match simulate_all(trace, &cfg, designs)? {
        Ok(r) => Ok(Ok((summary, cfg, r))),
        Err(what) => report_damage(&what, json, &summary).map(Err),
    }
}

fn run_cmd(a: &RunArgs) -> Result<Outcome> {
    let designs = parse_designs(&a.design)?;
    let checked = check_and_simulate(&a.trace, &a.machine, &designs, a.png.as_ref(), a.json)?;
    let (summary, cfg, reports) = match checked {
        Ok(r) => r,
        Err(outcome) => return Ok(outcome),
    };
    let rows = rows(&reports);
    if let Some(p) = &a.png {
        let xs = |f: &dyn Fn(&DesignRow) -> f64| -> Vec<(f64, f64)> {
            rows.iter()
                .enumerate()
                .map(|(i, r)| (i as f64, f(r)))
                .collect()
        };
        let base = &rows[0];
        let ratio = |x: f64, b: f64| if b == 0.0 { 0.0 } else { x / b };
        let legend: Vec<String> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| format!("{i}={}", short_name(&r.design)))
            .collect();
        let chart = Chart {
            title: format!("{}: relative to baseline", summary.name),
            x_label: legend.join(" "),
            y_label: "x baseline".into(),
            series: vec![
                Series::new(
                    "runtime",
                    xs(&|r| ratio(r.report.runtime_ns, base.report.runtime_ns)),
                ),
                Series::new(
                    "energy",
                    xs(&|r| ratio(r.report.energy_nj, base.report.energy_nj)),
                ),
                Series::new(
                    "NVM accesses",
                    xs(&|r| ratio(r.nvm_accesses as f64, base.nvm_accesses as f64)),
                ),
                Series::new(
                    "cache accesses",
                    xs(&|r| ratio(r.cache_accesses as f64, base.cache_accesses as f64)),
                ),
            ],
            y_min: Some(0.0),
            ..Default::default()
        }
        .hline(1.0, "baseline");
        write_chart(chart, p)?;
    }
    if a.json {
        print_json(&serde_json::json!({
            "trace": summary,
            "config": cfg,
            "designs": rows,
            "png": a.png,
        }))?;
    } else {
        println!(
            "trace {}: {} events ({} loads, {} stores), {} cores, {} B of PM",
            summary.name,
            summary.events,
            summary.loads,
            summary.stores,
            summary.cores,
            summary.pm_bytes
        );
        print_table(&rows);
        if let Some(p) = &a.png {
            println!("figure: {}", p.display());
        }
    }
    Ok(Outcome::Ok)
}

fn info_cmd(a: &InfoArgs) -> Result<Outcome> {
    let s = match check_trace(&a.trace)? {
        Ok(s) => s,
        Err((s, what)) => return report_damage(&what, a.json, &s),
    };
    if a.json {
        print_json(&s)?;
    } else {
        println!("name        {}", s.name);
        println!("version     {}", s.version);
        println!("pm bytes    {}", s.pm_bytes);
        println!("cores       {}", s.cores);
        println!("with data   {}", if s.with_data { "yes" } else { "no" });
        println!("events      {}", s.events);
        println!("loads       {} ({} B)", s.loads, s.load_bytes);
        println!("stores      {} ({} B)", s.stores, s.store_bytes);
        println!("flushes     {}", s.flushes);
        println!("fences      {}", s.fences);
        println!("tx begin    {}", s.tx_begins);
        println!("tx commit   {}", s.tx_commits);
        println!("work        {} ({} cycles)", s.work_events, s.work_cycles);
    }
    Ok(Outcome::Ok)
}

fn size_arg(flag: &str, text: &str, min: u64, max: u64) -> Result<u64> {
    let v = crate::units::parse_size(text).map_err(|e| refused(format!("{flag}: {e}")))?;
    if v < min || v > max || v % 64 != 0 {
        return Err(refused(format!(
            "{flag}: expected a multiple of 64 B in {min}..={max} B, found {v}"
        )));
    }
    Ok(v)
}

/// Write `events` as a trace at `out`, which must not exist: into a temporary file beside it,
/// renamed into place at the end, so a failure leaves nothing behind.
fn write_trace(
    out: &Path,
    header: &TraceHeader,
    events: impl Iterator<Item = trace::Event>,
) -> Result<u64> {
    let tmp = temp_beside(out);
    let n = match trace::write_file(&tmp, header, events) {
        Ok(n) => n,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(refused(format!("writing {}: {e}", out.display())));
        }
    };
    publish(&tmp, out)?;
    Ok(n)
}

fn print_written(out: &Path, h: &TraceHeader, events: u64, json: bool) -> Result<()> {
    let bytes = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    if json {
        print_json(&serde_json::json!({
            "trace": out,
            "name": h.name,
            "events": events,
            "pm_bytes": h.pm_bytes,
            "cores": h.cores,
            "with_data": h.with_data,
            "file_bytes": bytes,
        }))
    } else {
        println!(
            "wrote {}: {} ({events} events, {} cores, {} B of PM, {bytes} B on disk)",
            out.display(),
            h.name,
            h.cores,
            h.pm_bytes
        );
        Ok(())
    }
}

fn gen_fio(a: &FioArgs) -> Result<Outcome> {
    check_output_path("-o", &a.output, false)?;
    let bytes = size_arg("--bytes-per-thread", &a.bytes_per_thread, 64, 1 << 30)?;
    let region = match &a.region_bytes {
        Some(t) => size_arg("--region-bytes", t, 64, 1 << 40)?,
        None => bytes * 16,
    };
    let (pattern, rw) = match a.pattern {
        FioPattern::SeqRead => (Pattern::Seq, Rw::Read),
        FioPattern::SeqWrite => (Pattern::Seq, Rw::Write),
        FioPattern::RandRead => (Pattern::Rand, Rw::Read),
        FioPattern::RandWrite => (Pattern::Rand, Rw::Write),
    };
    let p = FioParams {
        pattern,
        rw,
        streams: a.threads,
        bytes_per_stream: bytes,
        region_bytes: region,
        access: 64,
        with_data: a.with_data,
        seed: a.seed,
        work_cycles: a.work_cycles,
        tx: rw == Rw::Write && !a.no_tx,
    };
    let events = workload::fio(&p).map_err(|e| refused(format!("gen fio: {e}")))?;
    let h = p.header();
    let n = write_trace(&a.output, &h, events)?;
    print_written(&a.output, &h, n, a.json)?;
    Ok(Outcome::Ok)
}

fn gen_stream(a: &StreamArgs) -> Result<Outcome> {
    check_output_path("-o", &a.output, false)?;
    let bytes = size_arg("--array-bytes", &a.array_bytes, 64, 1 << 34)?;
    let p = StreamParams {
        kernel: match a.kernel {
            StreamKernel::Copy => Kernel::Copy,
            StreamKernel::Scale => Kernel::Scale,
            StreamKernel::Add => Kernel::Add,
            StreamKernel::Triad => Kernel::Triad,
        },
        threads: a.threads,
        array_bytes: bytes,
        access: 64,
        with_data: a.with_data,
        seed: a.seed,
        tx: !a.no_tx,
    };
    let events = workload::stream(&p).map_err(|e| refused(format!("gen stream: {e}")))?;
    let h = p.header();
    let n = write_trace(&a.output, &h, events)?;
    print_written(&a.output, &h, n, a.json)?;
    Ok(Outcome::Ok)
}

fn record_cmd(a: &RecordArgs) -> Result<Outcome> {
    if a.work_mhz > 100_000 {
        return Err(refused(format!(
            "--work-mhz: expected 0 (none) to 100000, found {}",
            a.work_mhz
        )));
    }
    if a.workload == RecordWorkload::Server {
        if a.threads.is_some() {
            return Err(refused(
                "--threads: not for record server (its clients are --clients, its cores \
                 --cores)",
            ));
        }
        return crate::tvarak_server::record(
            &a.server,
            &crate::tvarak_server::Common {
                keys: a.keys,
                ops: a.ops,
                read_percent: a.read_percent,
                value: a.value,
                seed: a.seed,
                address_only: a.address_only,
                work_mhz: a.work_mhz,
                output: &a.output,
                json: a.json,
            },
        );
    }
    a.server
        .refuse_for(&format!("{:?}", a.workload).to_lowercase())?;
    check_output_path("-o", &a.output, false)?;
    let threads = a.threads.unwrap_or(4);
    if !(1..=64).contains(&threads) {
        return Err(refused(format!(
            "--threads: expected 1..=64, found {threads}"
        )));
    }
    if !(1..=10_000_000).contains(&a.ops) {
        return Err(refused(format!(
            "--ops: expected 1..=10000000, found {}",
            a.ops
        )));
    }
    let policy =
        log::ForcePolicy::parse(&a.policy).map_err(|e| refused(format!("--policy: {e}")))?;
    let tmp = temp_beside(&a.output);
    let file =
        File::create(&tmp).map_err(|e| refused(format!("-o {}: {e}", a.output.display())))?;
    let out = std::io::BufWriter::new(file);
    let recorded = match a.workload {
        RecordWorkload::Log => record::log_workload(
            &record::LogParams {
                threads,
                records_per_thread: a.ops,
                payload: a.payload,
                policy,
                with_data: !a.address_only,
                seed: a.seed,
                work_mhz: (a.work_mhz > 0).then_some(a.work_mhz),
            },
            out,
        ),
        RecordWorkload::Heap => record::heap_workload(
            &record::HeapParams {
                threads,
                ops_per_thread: a.ops,
                buckets: a.buckets,
                keys: a.keys,
                read_percent: a.read_percent,
                value: a.value,
                with_data: !a.address_only,
                seed: a.seed,
                work_mhz: (a.work_mhz > 0).then_some(a.work_mhz),
            },
            out,
        ),
        RecordWorkload::Store => record::kv_workload(
            &record::KvParams {
                threads,
                records: a.keys,
                ops_per_thread: a.ops,
                read_percent: a.read_percent,
                value: a.value,
                with_data: !a.address_only,
                seed: a.seed,
                work_mhz: (a.work_mhz > 0).then_some(a.work_mhz),
            },
            out,
        ),
        // Served by `tvarak_server` before the output is made; never reached.
        RecordWorkload::Server => Err(SimError::invalid(
            "record workload",
            "log, heap or store here",
            "server",
        )),
    };
    let finish = |r: Result<(record::Recording<std::io::BufWriter<File>>, Vec<u8>), SimError>| -> Result<TraceHeader> {
        let (rec, _image) = r.map_err(|e| refused(format!("record: {e}")))?;
        let f = rec
            .writer
            .into_inner()
            .map_err(|e| refused(format!("writing {}: {}", a.output.display(), e.error())))?;
        f.sync_all()
            .map_err(|e| refused(format!("syncing {}: {e}", a.output.display())))?;
        Ok(rec.header)
    };
    let header = match finish(recorded) {
        Ok(h) => h,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    publish(&tmp, &a.output)?;
    // Count the events from the file: what the trace says, not what the recorder hoped.
    let events = match check_trace(&a.output)? {
        Ok(s) => s.events,
        Err((s, what)) => return report_damage(&what, a.json, &s),
    };
    print_written(&a.output, &header, events, a.json)?;
    Ok(Outcome::Ok)
}

#[derive(Debug, serde::Serialize)]
struct SweepPoint {
    value: u64,
    design: String,
    runtime_pct: Option<f64>,
    nvm_accesses_pct: Option<f64>,
    energy_pct: Option<f64>,
    nvm_red_accesses: u64,
    report: Report,
}

fn sweep_cmd(a: &SweepArgs) -> Result<Outcome> {
    let (param, values): (&str, Vec<u64>) = match (&a.red_ways, &a.diff_ways, &a.ctl_cache_kib) {
        (Some(t), None, None) => (
            "red-ways",
            parse_list::<u16>("--red-ways", t, 1, 14)?
                .into_iter()
                .map(u64::from)
                .collect(),
        ),
        (None, Some(t), None) => (
            "diff-ways",
            parse_list::<u16>("--diff-ways", t, 0, 13)?
                .into_iter()
                .map(u64::from)
                .collect(),
        ),
        (None, None, Some(t)) => (
            "ctl-cache-kib",
            parse_list::<u32>("--ctl-cache-kib", t, 0, 1024)?
                .into_iter()
                .map(u64::from)
                .collect(),
        ),
        _ => {
            return Err(refused(
                "sweep: expected exactly one of --red-ways, --diff-ways, --ctl-cache-kib",
            ));
        }
    };
    let mut designs = parse_designs(&a.design)?;
    designs.retain(|d| *d != Design::Baseline);
    if designs.is_empty() {
        return Err(refused(
            "--design: expected at least one design besides baseline",
        ));
    }
    if let Some(p) = &a.png {
        check_output_path("--png", p, true)?;
    }
    let summary = match check_trace(&a.trace)? {
        Ok(s) => s,
        Err((s, what)) => return report_damage(&what, a.json, &s),
    };
    let base_cfg = machine(&MachineArgs::blank(), summary.cores)?;
    let base = match simulate_all(&a.trace, &base_cfg, &[Design::Baseline])? {
        Ok(mut r) => r.remove(0),
        Err(what) => return report_damage(&what, a.json, &summary),
    };
    let mut points = Vec::new();
    for &v in &values {
        let mut m = MachineArgs::blank();
        match param {
            "red-ways" => m.red_ways = Some(v as u16),
            "diff-ways" => m.diff_ways = Some(v as u16),
            _ => m.ctl_cache_kib = Some(v as u32),
        }
        let cfg = machine(&m, summary.cores)?;
        let reports = match simulate_all(&a.trace, &cfg, &designs)? {
            Ok(r) => r,
            Err(what) => return report_damage(&what, a.json, &summary),
        };
        for r in reports {
            let o = overheads(&r, &base);
            points.push(SweepPoint {
                value: v,
                design: r.design.to_string(),
                runtime_pct: o.runtime_pct,
                nvm_accesses_pct: o.nvm_accesses_pct,
                energy_pct: o.energy_pct,
                nvm_red_accesses: r.counters.nvm_red_reads + r.counters.nvm_red_writes,
                report: r,
            });
        }
    }
    if let Some(p) = &a.png {
        let mut series = Vec::new();
        for d in &designs {
            let name = d.to_string();
            let pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|q| q.design == name)
                .map(|q| (q.value as f64, q.runtime_pct.unwrap_or(0.0)))
                .collect();
            series.push(Series::new(format!("{name} runtime"), pts));
            let pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|q| q.design == name)
                .map(|q| (q.value as f64, q.nvm_accesses_pct.unwrap_or(0.0)))
                .collect();
            series.push(Series::new(format!("{name} NVM accesses"), pts));
        }
        let chart = Chart {
            title: format!("{}: sensitivity to {param}", summary.name),
            x_label: param.to_string(),
            y_label: "overhead vs baseline, %".into(),
            series,
            ..Default::default()
        };
        write_chart(chart, p)?;
    }
    if a.json {
        print_json(&serde_json::json!({
            "trace": summary,
            "parameter": param,
            "baseline": base,
            "points": points,
        }))?;
    } else {
        println!(
            "trace {}: {} events; baseline runtime {:.1} us, {} NVM accesses",
            summary.name,
            summary.events,
            base.runtime_ns / 1e3,
            base.counters.nvm_accesses()
        );
        println!(
            "{:>14} {:<12} {:>9} {:>9} {:>9} {:>12} {:>10} {:>10}",
            param, "design", "runtime", "NVM acc", "energy", "red NVM acc", "ctl hits", "ctl miss"
        );
        for q in &points {
            println!(
                "{:>14} {:<12} {:>9} {:>9} {:>9} {:>12} {:>10} {:>10}",
                q.value,
                q.design,
                pct(q.runtime_pct),
                pct(q.nvm_accesses_pct),
                pct(q.energy_pct),
                q.nvm_red_accesses,
                q.report.counters.ctl_hits,
                q.report.counters.ctl_misses
            );
        }
        if let Some(p) = &a.png {
            println!("figure: {}", p.display());
        }
    }
    Ok(Outcome::Ok)
}

impl MachineArgs {
    fn blank() -> MachineArgs {
        MachineArgs {
            llc_mib: None,
            red_ways: None,
            diff_ways: None,
            ctl_cache_kib: None,
            cores: None,
            dimms: None,
            nvm_read_ns: None,
            nvm_write_ns: None,
        }
    }
}

const ABLATION: [Design; 5] = [
    Design::Baseline,
    Design::Naive,
    Design::ClCsums,
    Design::ClCache,
    Design::Tvarak,
];

fn ablation_cmd(a: &AblationArgs) -> Result<Outcome> {
    let checked = check_and_simulate(&a.trace, &a.machine, &ABLATION, a.png.as_ref(), a.json)?;
    let (summary, cfg, reports) = match checked {
        Ok(r) => r,
        Err(outcome) => return Ok(outcome),
    };
    let rows = rows(&reports);
    if let Some(p) = &a.png {
        let steps = &rows[1..];
        let chart = Chart {
            title: format!(
                "{}: ablation (1=naive 2=+cl 3=+cache 4=+diffs)",
                summary.name
            ),
            x_label: "step".into(),
            y_label: "x baseline / NVM reads per fill".into(),
            series: vec![
                Series::new(
                    "read amplification",
                    steps
                        .iter()
                        .enumerate()
                        .map(|(i, r)| ((i + 1) as f64, r.read_amplification))
                        .collect(),
                ),
                Series::new(
                    "runtime x baseline",
                    steps
                        .iter()
                        .enumerate()
                        .map(|(i, r)| {
                            (
                                (i + 1) as f64,
                                1.0 + r.vs_baseline.runtime_pct.unwrap_or(0.0) / 100.0,
                            )
                        })
                        .collect(),
                ),
                Series::new(
                    "NVM accesses x baseline",
                    steps
                        .iter()
                        .enumerate()
                        .map(|(i, r)| {
                            (
                                (i + 1) as f64,
                                1.0 + r.vs_baseline.nvm_accesses_pct.unwrap_or(0.0) / 100.0,
                            )
                        })
                        .collect(),
                ),
            ],
            y_min: Some(0.0),
            ..Default::default()
        };
        write_chart(chart, p)?;
    }
    if a.json {
        print_json(&serde_json::json!({
            "trace": summary,
            "config": cfg,
            "steps": rows,
        }))?;
    } else {
        println!(
            "trace {}: {} events ({} loads, {} stores)",
            summary.name, summary.events, summary.loads, summary.stores
        );
        println!(
            "{:<10} {:>14} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "step", "read ampl.", "fills", "red R", "runtime", "NVM acc", "energy"
        );
        for r in &rows {
            let c = &r.report.counters;
            println!(
                "{:<10} {:>13.2}x {:>10} {:>10} {:>10} {:>10} {:>10}",
                r.design,
                r.read_amplification,
                c.fills,
                c.nvm_red_reads,
                pct(r.vs_baseline.runtime_pct),
                pct(r.vs_baseline.nvm_accesses_pct),
                pct(r.vs_baseline.energy_pct)
            );
        }
        println!("(read amplification: NVM reads, data and redundancy, per data line filled)");
        if let Some(p) = &a.png {
            println!("figure: {}", p.display());
        }
    }
    Ok(Outcome::Ok)
}

fn faults_cmd(a: &FaultsArgs) -> Result<Outcome> {
    if !(1..=10_000).contains(&a.trials) {
        return Err(refused(format!(
            "--trials: expected 1..=10000, found {}",
            a.trials
        )));
    }
    let m = tvarak_sim::fault::fault_matrix(a.seed, a.trials)
        .map_err(|e| refused(format!("faults: {e}")))?;
    if a.json {
        print_json(&m)?;
    } else {
        println!(
            "Fault coverage, {} seeded trials per cell (seed {}), faults injected at a DIMM \
             of the paper's layout:",
            m.trials, a.seed
        );
        print!("{}", m.table());
        println!(
            "(yes: every damaged line in every trial; no: none; partly: some lines in every \
             trial; otherwise trials with all/some/none of the lines.)"
        );
    }
    Ok(Outcome::Ok)
}
