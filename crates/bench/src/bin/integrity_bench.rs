//! Integrity benchmark (issue 3): the cost of keeping page checksums and parity for a 2 GiB pool
//! region in modes `lazy` (Vilamb: a background pass every period, writes found by userfaultfd
//! write tracking), `eager` (TVARAK in software: diff-based updates on every write, verified
//! reads) and `txb-page` (recompute the page checksum and the stripe's parity on every write),
//! each against `off` in the same run, on the same pool. `bench/integrity/run.sh` runs it.
//!
//! One process, one pool file in `--dir` (tmpfs: `/dev/shm`; domain `adr`, emulated), one
//! `data` region of `--data-gib` GiB, pre-faulted (every page written once) and protected
//! (`create_in_pool`) before anything is measured. Then:
//!
//! - `firstwrite`: the cost of the first store to a page in a fresh tracking epoch. Lazy mode
//!   with the uffd tracker and no background thread: `run_pass` (re-arms every page), evict the
//!   caches (read 64 MiB elsewhere), write one 64 B line to each of `--fw-pages` distinct random
//!   pages (timed: *first*), write another line of the same pages (timed: *rewrite*, no fault),
//!   then `run_pass` (timed: an isolated pass over exactly those pages). Mode `off` does the same
//!   writes on the same pages. (lazy first − off first) / pages is the write-protect fault.
//!   `--fw-reps` alternations of the two opens, `--fw-rounds` rounds per open.
//! - `cells`: per workload (randwrite, seqwrite, randread, seqread; 64 B operations through
//!   `Protected::write` / `Protected::read`, single-threaded; every write persists, in every
//!   mode), every configuration for a fixed time: `off` first, then the others (forward order
//!   for the 1st and 3rd workload, reversed for the 2nd and 4th), then `off` again, so drift
//!   shows as a difference between the two `off` runs; ratios are against their mean. Each
//!   cell opens the region in its mode (a resync when the mode needs one, untimed), warms up
//!   with 10,000 operations, runs for `--seconds` (lazy write cells: for at least
//!   `--lazy-periods` periods, so that passes happen even at 60 s), takes the statistics and
//!   closes (the final pass is untimed). With `--rounds R` the whole sequence runs R times per
//!   workload (alternating its direction); each cell's ratio is against its own round's two
//!   `off` runs, and the report gives the median and range of those ratios over rounds.
//!   After every lazy open the harness stores once to every page, untimed
//!   ([`Bench::restore_write_access`]): unregistering the userfaultfd range leaves the pages
//!   read-only, and the next cell would otherwise pay a fault per page.
//!
//! Output: a human report on stdout (markdown tables), progress on stderr, and with `--json`
//! one JSON document with every measurement.
//!
//! Exit codes: 0 ok, 2 bad arguments, 1 runtime failure.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use integrity::{Mode, Protected, Stats, TrackerKind};
use pmem::rng::SplitMix64;
use pmem::{Mapping, Medium, Pool};
use serde_json::{Value, json};

type M = Arc<Mapping>;

const PAGE: u64 = 4096;
const LINE: u64 = 64;
const GIB: f64 = (1u64 << 30) as f64;
/// Operations between two clock reads in a timed loop.
const CHUNK: u64 = 256;
/// Untimed operations before each cell's clock starts.
const WARMUP_OPS: u64 = 10_000;
/// Bytes read to evict the caches before a first-write loop.
const EVICT_BYTES: u64 = 64 << 20;
/// Name of the background pass thread as /proc shows it (15 characters).
const PASS_THREAD_COMM: &str = "kavach-integrit";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Workload {
    Randwrite,
    Seqwrite,
    Randread,
    Seqread,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Randwrite => "randwrite",
            Workload::Seqwrite => "seqwrite",
            Workload::Randread => "randread",
            Workload::Seqread => "seqread",
        }
    }
    fn writes(self) -> bool {
        matches!(self, Workload::Randwrite | Workload::Seqwrite)
    }
    fn random(self) -> bool {
        matches!(self, Workload::Randwrite | Workload::Randread)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Phase {
    Firstwrite,
    Cells,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TrackerArg {
    Uffd,
    Mprotect,
}

/// Integrity modes against `off`: the Kavach harness for issue 3.
#[derive(Debug, Parser)]
#[command(
    name = "integrity_bench",
    about = "Integrity modes (lazy, eager, txb-page) against off on one pool (bench/integrity/run.sh)"
)]
struct Args {
    /// Directory for the pool file (tmpfs: /dev/shm). The file is removed on exit.
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
    /// Size of the protected data region in GiB.
    #[arg(long, default_value_t = 2, conflicts_with = "data_mib")]
    data_gib: u64,
    /// Size of the protected data region in MiB (for smoke runs; overrides --data-gib).
    #[arg(long)]
    data_mib: Option<u64>,
    /// Seconds per (config, workload) cell.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Lazy write cells last at least this many periods (so that passes happen at 60 s).
    #[arg(long, default_value_t = 2.5)]
    lazy_periods: f64,
    /// Workloads, in this order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "randwrite,seqwrite,randread,seqread"
    )]
    workloads: Vec<Workload>,
    /// Configurations: off, lazy-<N>s or lazy-<N>ms, eager, txb-page. `off` is added if missing
    /// and always runs first and last for each workload.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "off,lazy-1s,lazy-10s,lazy-60s,eager,txb-page"
    )]
    configs: Vec<String>,
    /// Phases to run.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "firstwrite,cells"
    )]
    phases: Vec<Phase>,
    /// Write tracker for the lazy configurations.
    #[arg(long, value_enum, default_value = "uffd")]
    tracker: TrackerArg,
    /// Data pages per stripe (K).
    #[arg(long, default_value_t = 4)]
    stripe_pages: u32,
    /// Distinct pages written in each first-write loop.
    #[arg(long, default_value_t = 65536)]
    fw_pages: u64,
    /// First-write rounds per open.
    #[arg(long, default_value_t = 5)]
    fw_rounds: u64,
    /// Alternations of (lazy, off) opens in the first-write phase.
    #[arg(long, default_value_t = 2)]
    fw_reps: u64,
    /// Rounds: the whole sequence (off, the others, off) is run this many times per workload,
    /// in alternating order; the report gives medians over rounds of the per-round ratios.
    #[arg(long, default_value_t = 1)]
    rounds: u64,
    /// Seed of the random offsets (the same sequence for every configuration).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write the whole report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One configuration: a mode and, for lazy, a period.
#[derive(Debug, Clone)]
struct Config {
    name: String,
    mode: Mode,
    period_ms: Option<u32>,
}

fn parse_config(s: &str) -> Result<Config, String> {
    let s = s.trim();
    let mode_only = |mode| {
        Ok(Config {
            name: s.to_string(),
            mode,
            period_ms: None,
        })
    };
    match s {
        "off" => return mode_only(Mode::Off),
        "eager" => return mode_only(Mode::Eager),
        "txb-page" => return mode_only(Mode::TxbPage),
        _ => {}
    }
    let period = s
        .strip_prefix("lazy-")
        .ok_or_else(|| format!("unknown configuration `{s}` (off, lazy-<N>s, eager, txb-page)"))?;
    let ms = if let Some(n) = period.strip_suffix("ms") {
        n.parse::<u32>().ok()
    } else if let Some(n) = period.strip_suffix('s') {
        n.parse::<u32>().ok().and_then(|n| n.checked_mul(1000))
    } else {
        None
    };
    let ms = ms.ok_or_else(|| format!("`{s}`: the period is <N>s or <N>ms"))?;
    if !(100..=60_000).contains(&ms) {
        return Err(format!("`{s}`: the period must be 100 ms to 60 s"));
    }
    Ok(Config {
        name: s.to_string(),
        mode: Mode::Lazy,
        period_ms: Some(ms),
    })
}

struct Cfg {
    args: Args,
    data_bytes: u64,
    configs: Vec<Config>,
}

fn check_args(args: Args) -> Result<Cfg, String> {
    let data_bytes = match args.data_mib {
        Some(mib) => mib << 20,
        None => args.data_gib << 30,
    };
    if !((64 << 20)..=(64 << 30)).contains(&data_bytes) {
        return Err("the data region must be 64 MiB to 64 GiB".into());
    }
    if !(args.seconds > 0.0 && args.seconds <= 3600.0) {
        return Err("--seconds must be in (0, 3600]".into());
    }
    if !(args.lazy_periods >= 0.0 && args.lazy_periods <= 100.0) {
        return Err("--lazy-periods must be in [0, 100]".into());
    }
    if !(2..=32).contains(&args.stripe_pages) {
        return Err("--stripe-pages must be in 2..=32".into());
    }
    let pages = data_bytes / PAGE;
    if args.phases.contains(&Phase::Firstwrite) && (args.fw_pages == 0 || args.fw_pages > pages / 2)
    {
        return Err(format!("--fw-pages must be in [1, {}]", pages / 2));
    }
    if args.fw_rounds == 0 || args.fw_reps == 0 || args.rounds == 0 || args.rounds > 1000 {
        return Err("--fw-rounds, --fw-reps and --rounds must be positive".into());
    }
    let mut configs = Vec::new();
    for c in &args.configs {
        let c = parse_config(c)?;
        if configs.iter().any(|o: &Config| o.name == c.name) {
            return Err(format!("configuration `{}` given twice", c.name));
        }
        configs.push(c);
    }
    configs.retain(|c| c.mode != Mode::Off);
    Ok(Cfg {
        args,
        data_bytes,
        configs,
    })
}

// ---------- the pool file ----------

/// Pool files alive now, removed by the signal thread if SIGINT, SIGTERM or SIGHUP ends the run.
static LIVE_FILES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn live_files() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    LIVE_FILES.lock().unwrap_or_else(|p| p.into_inner())
}

fn remove_files_on_signal() -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .context("cannot install signal handlers")?;
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            for p in live_files().iter() {
                let _ = std::fs::remove_file(p);
            }
            std::process::exit(128 + sig);
        }
    });
    Ok(())
}

/// Removes its file when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(dir: &Path) -> TempFile {
        let p = dir.join(format!(
            "kavach-integrity-bench-{}.pool",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&p);
        live_files().push(p.clone());
        TempFile(p)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        live_files().retain(|p| p != &self.0);
    }
}

/// Free bytes of the file system holding `dir`, from `df` (None if it cannot tell).
fn free_bytes(dir: &Path) -> Option<u64> {
    let out = std::process::Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(dir)
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

// ---------- /proc readings ----------

/// CPU and fault counters of one thread.
#[derive(Debug, Clone, Copy, Default)]
struct TaskCpu {
    /// On-CPU time (schedstat), ns.
    run_ns: u64,
    /// User and system time (stat, 1/100 s).
    utime: u64,
    stime: u64,
    /// Minor page faults.
    minflt: u64,
    /// Involuntary context switches (preempted while runnable).
    nonvol: u64,
}

impl TaskCpu {
    fn read(tid: &str) -> Option<TaskCpu> {
        let dir = format!("/proc/self/task/{tid}");
        let sched = std::fs::read_to_string(format!("{dir}/schedstat")).ok()?;
        let run_ns = sched.split_whitespace().next()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("{dir}/stat")).ok()?;
        let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        // Fields after the command: state(3) ... minflt(10) ... utime(14) stime(15).
        let field = |n: usize| rest.get(n - 3).and_then(|v| v.parse::<u64>().ok());
        let status = std::fs::read_to_string(format!("{dir}/status")).ok()?;
        let nonvol = status
            .lines()
            .find_map(|l| l.strip_prefix("nonvoluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        Some(TaskCpu {
            run_ns,
            utime: field(14)?,
            stime: field(15)?,
            minflt: field(10)?,
            nonvol,
        })
    }
    fn main() -> TaskCpu {
        TaskCpu::read(&std::process::id().to_string()).unwrap_or_default()
    }
    fn minus(self, o: TaskCpu) -> TaskCpu {
        TaskCpu {
            run_ns: self.run_ns.saturating_sub(o.run_ns),
            utime: self.utime.saturating_sub(o.utime),
            stime: self.stime.saturating_sub(o.stime),
            minflt: self.minflt.saturating_sub(o.minflt),
            nonvol: self.nonvol.saturating_sub(o.nonvol),
        }
    }
    fn json(self, secs: f64) -> Value {
        let ticks = (self.utime + self.stime).max(1) as f64;
        json!({
            "cpu_s": r3(self.run_ns as f64 / 1e9),
            "cpu_pct": r3(self.run_ns as f64 / 1e9 / secs * 100.0),
            "sys_share": r3(self.stime as f64 / ticks),
            "minflt": self.minflt,
            "nonvoluntary_switches": self.nonvol,
        })
    }
}

/// The thread id of the background pass thread, if one is running.
fn pass_thread() -> Option<String> {
    for e in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let tid = e.file_name().to_string_lossy().into_owned();
        if std::fs::read_to_string(e.path().join("comm"))
            .is_ok_and(|c| c.trim_end() == PASS_THREAD_COMM)
        {
            return Some(tid);
        }
    }
    None
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// UTC time as `YYYY-MM-DDTHH:MM:SSZ`.
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = ((secs / 86400) as i64, secs % 86400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn r3(x: f64) -> Value {
    if x.is_finite() {
        serde_json::Number::from_f64((x * 1000.0).round() / 1000.0)
            .map(Value::Number)
            .unwrap_or(Value::Null)
    } else {
        Value::Null
    }
}

// ---------- opening the region ----------

struct Bench {
    cfg: Cfg,
    pool: Pool<M>,
    data_offset: u64,
    lines: u64,
    pages: u64,
    /// Run-wide write counter: every write stores a value never stored before.
    counter: u64,
}

impl Bench {
    fn tracker_kind(&self) -> TrackerKind {
        match self.cfg.args.tracker {
            TrackerArg::Uffd => TrackerKind::Uffd,
            TrackerArg::Mprotect => TrackerKind::Mprotect,
        }
    }

    /// Open the region in `mode`; returns the handle and the milliseconds the open took.
    fn open(
        &self,
        mode: Mode,
        period_ms: Option<u32>,
        background: bool,
    ) -> anyhow::Result<(Protected<M>, Value)> {
        let tracker = if mode == Mode::Lazy {
            Some(
                integrity::tracker::for_mapping(
                    self.tracker_kind(),
                    Arc::clone(self.pool.medium()),
                    self.data_offset as usize,
                    self.cfg.data_bytes as usize,
                )
                .context("cannot set up write tracking")?,
            )
        } else {
            None
        };
        let t = Instant::now();
        let (prot, report) = integrity::open_in_pool(
            &self.pool,
            "data",
            integrity::OpenOptions {
                mode: Some(mode),
                period_ms,
                tracker,
                background,
                ..Default::default()
            },
            &mut |_, _| {},
        )
        .with_context(|| format!("cannot open the region in mode {}", mode.name()))?;
        let open = json!({
            "open_ms": r3(t.elapsed().as_secs_f64() * 1000.0),
            "previous_state": report.previous_state,
            "resync_pages": report.resync_pages,
            "resync_ms": report.resync_ms,
        });
        Ok((prot, open))
    }

    /// After a lazy session: give every data page its write access back, untimed. Unregistering
    /// the userfaultfd range leaves the pages that were write-protected read-only in the page
    /// table, so the first store to each would take a minor fault in whatever cell comes next
    /// (about as costly as the tracking fault itself). Stores the value each page already
    /// holds, so no redundancy changes. Returns (ms, faults taken).
    fn restore_write_access(&self) -> (f64, u64) {
        let m = self.pool.medium();
        let c0 = TaskCpu::main();
        let t = Instant::now();
        for p in 0..self.pages {
            let at = (self.data_offset + p * PAGE) as usize;
            m.store_u64(at, m.load_u64(at));
        }
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        (ms, TaskCpu::main().minus(c0).minflt)
    }

    fn next_value(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }
}

// ---------- the timed loops ----------

/// What one timed loop did.
struct Run {
    ops: u64,
    secs: f64,
    /// (seconds since the start, operations done) at each whole second crossed.
    marks: Vec<(f64, u64)>,
}

/// Run `w` on `prot` for `dur` (or `ops_max` operations, whichever comes first).
fn run_loop(
    b: &mut Bench,
    prot: &Protected<M>,
    w: Workload,
    rng: &mut SplitMix64,
    pos: &mut u64,
    dur: Duration,
    ops_max: u64,
) -> anyhow::Result<Run> {
    let lines = b.lines;
    let mut buf = [0u8; LINE as usize];
    buf[8..16].copy_from_slice(&0x6b61_7661_6368_u64.to_le_bytes());
    let mut acc = 0u64;
    let mut ops = 0u64;
    let mut marks = Vec::new();
    let start = Instant::now();
    let writes = w.writes();
    let random = w.random();
    loop {
        for _ in 0..CHUNK {
            let line = if random {
                rng.below(lines)
            } else {
                let l = *pos;
                *pos = if l + 1 == lines { 0 } else { l + 1 };
                l
            };
            if writes {
                let v = b.next_value();
                buf[..8].copy_from_slice(&v.to_le_bytes());
                prot.write(line * LINE, &buf)?;
            } else {
                prot.read(line * LINE, &mut buf)?;
                acc = acc.wrapping_add(u64::from(buf[(line & 63) as usize]));
            }
        }
        ops += CHUNK;
        let t = start.elapsed();
        let t_s = t.as_secs_f64();
        if t_s as usize > marks.len() {
            marks.push((t_s, ops));
        }
        if t >= dur || ops >= ops_max {
            std::hint::black_box(acc);
            return Ok(Run {
                ops,
                secs: t_s,
                marks,
            });
        }
    }
}

/// Write one line to each page in `pages` at line `slot`; ns per page.
fn write_pages(
    b: &mut Bench,
    prot: &Protected<M>,
    pages: &[u64],
    slot: u64,
) -> anyhow::Result<f64> {
    let mut buf = [0u8; LINE as usize];
    let t = Instant::now();
    for &p in pages {
        let v = b.next_value();
        buf[..8].copy_from_slice(&v.to_le_bytes());
        prot.write(p * PAGE + slot * LINE, &buf)?;
    }
    Ok(t.elapsed().as_nanos() as f64 / pages.len() as f64)
}

/// Read `EVICT_BYTES` of the region starting at page `from` (wrapping), to push the pages
/// about to be written out of the caches.
fn evict(b: &Bench, prot: &Protected<M>, from: u64) -> anyhow::Result<()> {
    let mut chunk = vec![0u8; 1 << 20];
    let span = EVICT_BYTES.min(b.cfg.data_bytes / 2);
    let mut at = (from * PAGE) % b.cfg.data_bytes;
    let mut done = 0;
    let mut acc = 0u64;
    while done < span {
        if at + chunk.len() as u64 > b.cfg.data_bytes {
            at = 0;
        }
        prot.read(at, &mut chunk)?;
        acc = acc.wrapping_add(u64::from(chunk[4095]));
        at += chunk.len() as u64;
        done += chunk.len() as u64;
    }
    std::hint::black_box(acc);
    Ok(())
}

/// The slowest 1-second interval over the median one (1 if there are fewer than 3).
fn min_over_median(per_sec: &[Value]) -> f64 {
    let mut v: Vec<f64> = per_sec.iter().filter_map(Value::as_f64).collect();
    if v.len() < 3 {
        return 1.0;
    }
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    min / median(&mut v)
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

// ---------- phase: first write to a page ----------

fn phase_firstwrite(b: &mut Bench) -> anyhow::Result<Value> {
    let a = &b.cfg.args;
    let (n, rounds, reps) = (a.fw_pages, a.fw_rounds, a.fw_reps);
    // n distinct random pages (a partial Fisher-Yates shuffle).
    let mut rng = SplitMix64::new(a.seed ^ 0xf1_75f0);
    let mut all: Vec<u32> = (0..b.pages as u32).collect();
    for i in 0..n as usize {
        let j = i + rng.below(b.pages - i as u64) as usize;
        all.swap(i, j);
    }
    let pages: Vec<u64> = all[..n as usize].iter().map(|&p| u64::from(p)).collect();
    drop(all);
    eprintln!(
        "integrity_bench: firstwrite: {n} pages, {rounds} rounds per open, {reps} x (lazy, off)"
    );
    let mut samples = Vec::new();
    for rep in 0..reps {
        let order = if rep % 2 == 0 {
            [Mode::Lazy, Mode::Off]
        } else {
            [Mode::Off, Mode::Lazy]
        };
        for mode in order {
            let (prot, open) = b.open(mode, Some(1000), false)?;
            for round in 0..rounds {
                let slot = (2 * (rep * rounds + round)) % 64;
                if mode == Mode::Lazy {
                    prot.run_pass()?; // a fresh epoch: every page write-protected again
                }
                evict(b, &prot, pages[0] + b.pages / 2)?;
                let c0 = TaskCpu::main();
                let first = write_pages(b, &prot, &pages, slot)?;
                let c1 = TaskCpu::main();
                let rewrite = write_pages(b, &prot, &pages, slot + 1)?;
                let c2 = TaskCpu::main();
                let pass = if mode == Mode::Lazy {
                    let st = prot.run_pass()?;
                    json!({
                        "pages_updated": st.pages_updated,
                        "stripes_updated": st.stripes_updated,
                        "duration_ms": r3(st.duration_us as f64 / 1000.0),
                        "tracking_ms": r3(st.tracking_us as f64 / 1000.0),
                        "ms_per_gib": r3(st.duration_us as f64 / 1000.0
                            / (st.pages_updated.max(1) * PAGE) as f64 * GIB),
                    })
                } else {
                    Value::Null
                };
                samples.push(json!({
                    "mode": mode.name(),
                    "rep": rep,
                    "round": round,
                    "first_ns_per_page": r3(first),
                    "rewrite_ns_per_page": r3(rewrite),
                    "first_minflt": c1.minus(c0).minflt,
                    "rewrite_minflt": c2.minus(c1).minflt,
                    "pass": pass,
                }));
            }
            let st = prot.stats();
            prot.close()?;
            let (restore_ms, restore_faults) = if mode == Mode::Lazy {
                b.restore_write_access()
            } else {
                (0.0, 0)
            };
            eprintln!(
                "integrity_bench: firstwrite rep {rep} {}: open {} ms, passes {}, write access restored in {restore_ms:.0} ms ({restore_faults} faults)",
                mode.name(),
                open["open_ms"],
                st.passes
            );
        }
    }
    let pick = |mode: &str, key: &str| -> Vec<f64> {
        samples
            .iter()
            .filter(|s| s["mode"] == mode)
            .filter_map(|s| s[key].as_f64())
            .collect()
    };
    let lazy_first = median(&mut pick("lazy", "first_ns_per_page"));
    let lazy_re = median(&mut pick("lazy", "rewrite_ns_per_page"));
    let off_first = median(&mut pick("off", "first_ns_per_page"));
    let off_re = median(&mut pick("off", "rewrite_ns_per_page"));
    let faults = median(
        &mut samples
            .iter()
            .filter(|s| s["mode"] == "lazy")
            .filter_map(|s| s["first_minflt"].as_f64())
            .collect::<Vec<_>>(),
    );
    let mut pass_ms_gib: Vec<f64> = samples
        .iter()
        .filter_map(|s| s["pass"]["ms_per_gib"].as_f64())
        .collect();
    let mut pass_ms: Vec<f64> = samples
        .iter()
        .filter_map(|s| s["pass"]["duration_ms"].as_f64())
        .collect();
    let mut track_ms: Vec<f64> = samples
        .iter()
        .filter_map(|s| s["pass"]["tracking_ms"].as_f64())
        .collect();
    let mut stripes: Vec<f64> = samples
        .iter()
        .filter_map(|s| s["pass"]["stripes_updated"].as_f64())
        .collect();
    Ok(json!({
        "pages": n,
        "rounds": rounds,
        "reps": reps,
        "tracker": b.tracker_kind().name(),
        "median": {
            "lazy_first_ns_per_page": r3(lazy_first),
            "lazy_rewrite_ns_per_page": r3(lazy_re),
            "off_first_ns_per_page": r3(off_first),
            "off_rewrite_ns_per_page": r3(off_re),
            "fault_ns_per_page": r3(lazy_first - off_first),
            "fault_ns_per_page_within_lazy": r3(lazy_first - lazy_re),
            "lazy_first_minflt_per_page": r3(faults / n as f64),
            "isolated_pass_ms": r3(median(&mut pass_ms)),
            "isolated_pass_tracking_ms": r3(median(&mut track_ms)),
            "isolated_pass_stripes": r3(median(&mut stripes)),
            "isolated_pass_ms_per_gib_dirty": r3(median(&mut pass_ms_gib)),
        },
        "samples": samples,
    }))
}

// ---------- phase: the cells ----------

fn cell_secs(a: &Args, c: &Config, w: Workload) -> f64 {
    match c.period_ms {
        Some(ms) if w.writes() => a.seconds.max(a.lazy_periods * ms as f64 / 1000.0),
        _ => a.seconds,
    }
}

/// The lazy-mode figures of a cell: the difference of the statistics before and after.
fn lazy_figures(before: &Stats, after: &Stats, data_bytes: u64, stripes: u64) -> Value {
    let passes = after.passes - before.passes;
    let total = |s: &Stats, mean: f64| mean * s.passes as f64;
    let pass_ms = total(after, after.pass_ms_mean) - total(before, before.pass_ms_mean);
    let track_ms = total(after, after.tracking_ms_mean) - total(before, before.tracking_ms_mean);
    let pages = after.pages_updated_total - before.pages_updated_total;
    let n = passes.max(1) as f64;
    let new = (passes as usize).min(after.vulnerable_stripes_sampled.len());
    let sampled = &after.vulnerable_stripes_sampled[after.vulnerable_stripes_sampled.len() - new..];
    let vmean = sampled.iter().sum::<u64>() as f64 / new.max(1) as f64;
    let vmax = sampled.iter().copied().max().unwrap_or(0);
    json!({
        "passes": passes,
        "pages_updated": pages,
        "pages_per_pass": r3(pages as f64 / n),
        "dirty_fraction_per_pass": r3(pages as f64 / n / (data_bytes / PAGE) as f64),
        "pass_ms_mean": r3(pass_ms / n),
        "tracking_ms_mean": r3(track_ms / n),
        "pass_ms_per_gib_dirty": if pages > 0 {
            r3(pass_ms / (pages * PAGE) as f64 * GIB)
        } else {
            Value::Null
        },
        "vulnerable_stripes_mean": r3(vmean),
        "vulnerable_stripes_max": vmax,
        "vulnerable_fraction_max": r3(vmax as f64 / stripes as f64),
        "time_to_coverage_ms_max": after.time_to_coverage_ms_max,
        "last_error": after.last_error,
    })
}

fn run_cell(b: &mut Bench, c: &Config, w: Workload, which: &str, wi: u64) -> anyhow::Result<Value> {
    let secs = cell_secs(&b.cfg.args, c, w);
    let load_before = loadavg();
    let started = utc_now();
    let (prot, open) = b.open(c.mode, c.period_ms, c.mode == Mode::Lazy)?;
    // The same offsets for every configuration of a workload.
    let mut rng = SplitMix64::new(b.cfg.args.seed.wrapping_add(wi));
    let mut pos = 0u64;
    run_loop(b, &prot, w, &mut rng, &mut pos, Duration::MAX, WARMUP_OPS)?;
    let before = prot.stats();
    let main0 = TaskCpu::main();
    let pass_tid = pass_thread();
    let pass0 = pass_tid.as_deref().and_then(TaskCpu::read);
    let run = run_loop(
        b,
        &prot,
        w,
        &mut rng,
        &mut pos,
        Duration::from_secs_f64(secs),
        u64::MAX,
    )?;
    let main = TaskCpu::main().minus(main0);
    let pass_cpu = match (pass_tid.as_deref().and_then(TaskCpu::read), pass0) {
        (Some(p1), Some(p0)) => p1.minus(p0).json(run.secs),
        _ => Value::Null,
    };
    let after = prot.stats();
    let t = Instant::now();
    prot.close()?;
    let close_ms = t.elapsed().as_secs_f64() * 1000.0;
    let (restore_ms, restore_faults) = if c.mode == Mode::Lazy {
        b.restore_write_access()
    } else {
        (0.0, 0)
    };
    let ops_s = run.ops as f64 / run.secs;
    let mut per_sec = Vec::new();
    let mut prev = (0.0, 0u64);
    for &(t, o) in &run.marks {
        per_sec.push(r3((o - prev.1) as f64 / (t - prev.0)));
        prev = (t, o);
    }
    let lazy = if c.mode == Mode::Lazy {
        lazy_figures(&before, &after, b.cfg.data_bytes, after.geometry.stripes)
    } else {
        Value::Null
    };
    eprintln!(
        "integrity_bench: {:<9} {:<9} {which:<5} {:>7.1} s  {:>12.0} ops/s  open {} ms  load {}",
        w.name(),
        c.name,
        run.secs,
        ops_s,
        open["open_ms"],
        loadavg()
    );
    Ok(json!({
        "workload": w.name(),
        "config": c.name,
        "which": which,
        "mode": c.mode.name(),
        "period_ms": c.period_ms,
        "seconds": r3(run.secs),
        "ops": run.ops,
        "ops_per_s": r3(ops_s),
        "ns_per_op": r3(run.secs * 1e9 / run.ops as f64),
        "per_second_ops": per_sec,
        "open": open,
        "close_ms": r3(close_ms),
        "restore_write_access": json!({"ms": r3(restore_ms), "faults": restore_faults}),
        "per_second_min_over_median": r3(min_over_median(&per_sec)),
        "main_thread": main.json(run.secs),
        "minflt_per_op": r3(main.minflt as f64 / run.ops as f64),
        "pass_thread": pass_cpu,
        "lazy": lazy,
        "eager_writes": after.eager_writes - before.eager_writes,
        "repairs_on_read": after.repairs_on_read,
        "findings_total": after.findings_total,
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "started": started,
        "finished": utc_now(),
    }))
}

fn phase_cells(b: &mut Bench) -> anyhow::Result<Vec<Value>> {
    let off = parse_config("off").map_err(anyhow::Error::msg)?;
    let mut cells = Vec::new();
    let workloads = b.cfg.args.workloads.clone();
    let configs = b.cfg.configs.clone();
    for round in 0..b.cfg.args.rounds {
        for (wi, &w) in workloads.iter().enumerate() {
            let mut order: Vec<&Config> = configs.iter().collect();
            if (wi as u64 + round) % 2 == 1 {
                order.reverse();
            }
            let from = cells.len();
            cells.push(run_cell(b, &off, w, "first", wi as u64)?);
            for c in order {
                cells.push(run_cell(b, c, w, "-", wi as u64)?);
            }
            cells.push(run_cell(b, &off, w, "last", wi as u64)?);
            // Each cell against the mean of this round's two off runs.
            let group = &mut cells[from..];
            let base = (group[0]["ops_per_s"].as_f64().unwrap_or(f64::NAN)
                + group[group.len() - 1]["ops_per_s"]
                    .as_f64()
                    .unwrap_or(f64::NAN))
                / 2.0;
            for c in group.iter_mut() {
                c["round"] = round.into();
                c["ratio_to_off"] = r3(c["ops_per_s"].as_f64().unwrap_or(f64::NAN) / base);
            }
        }
    }
    Ok(cells)
}

// ---------- the report ----------

/// One row of a workload's summary: a configuration (or `off` first / last) over the rounds.
#[derive(Debug, Clone, Copy)]
struct Agg {
    /// Median ops/s over rounds.
    ops: f64,
    /// Median, minimum and maximum over rounds of the ratio to that round's off mean.
    ratio: f64,
    min: f64,
    max: f64,
    rounds: usize,
}

fn agg(cells: &[Value], w: &str, config: &str, which: Option<&str>) -> Option<Agg> {
    let sel: Vec<&Value> = cells
        .iter()
        .filter(|c| {
            c["workload"] == w && c["config"] == config && which.is_none_or(|x| c["which"] == x)
        })
        .collect();
    if sel.is_empty() {
        return None;
    }
    let mut ops: Vec<f64> = sel.iter().filter_map(|c| c["ops_per_s"].as_f64()).collect();
    let mut ratios: Vec<f64> = sel
        .iter()
        .filter_map(|c| c["ratio_to_off"].as_f64())
        .collect();
    let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let max = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some(Agg {
        ops: median(&mut ops),
        ratio: median(&mut ratios),
        min,
        max,
        rounds: sel.len(),
    })
}

/// A ratio, with its range over rounds when there is more than one.
fn fmt_ratio(a: &Agg) -> String {
    if a.rounds > 1 {
        format!("{:.3} ({:.3}–{:.3})", a.ratio, a.min, a.max)
    } else {
        format!("{:.3}", a.ratio)
    }
}

fn fmt_ops(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

fn fmt_pct(r: f64) -> String {
    format!("{:+.1}%", (r - 1.0) * 100.0)
}

/// The paper's targets against the measured ratios.
fn targets(cells: &[Value]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut add = |target: &str, config: &str, w: &str, min_ratio: f64| {
        if let Some(a) = agg(cells, w, config, None) {
            out.push(json!({
                "target": target,
                "config": config,
                "workload": w,
                "ratio": r3(a.ratio),
                "ratio_min": r3(a.min),
                "ratio_max": r3(a.max),
                "rounds": a.rounds,
                "change_pct": r3((a.ratio - 1.0) * 100.0),
                "met": a.ratio >= min_ratio,
            }));
        }
    };
    add(
        "random writes at most -56% at 1 s",
        "lazy-1s",
        "randwrite",
        0.44,
    );
    add(
        "lazy at 10 s within 10% of off on random writes",
        "lazy-10s",
        "randwrite",
        0.90,
    );
    add(
        "random writes about -10% at 60 s (at most -10%)",
        "lazy-60s",
        "randwrite",
        0.90,
    );
    for config in ["lazy-1s", "lazy-10s", "lazy-60s"] {
        for w in ["randread", "seqread"] {
            add("reads at most -3%", config, w, 0.97);
        }
    }
    out
}

fn print_report(meta: &Value, fw: Option<&Value>, cells: &[Value], b: &Bench) -> Value {
    let workloads = &b.cfg.args.workloads;
    println!("# Integrity: lazy, eager and txb-page against off\n");
    for (k, v) in meta.as_object().into_iter().flatten() {
        println!(
            "- {k}: {}",
            v.as_str().map_or_else(|| v.to_string(), String::from)
        );
    }
    let mut summary_json = json!({});
    if !cells.is_empty() {
        let rounds = b.cfg.args.rounds;
        println!(
            "\n## Throughput (64 B operations, one thread), ratio to off (mean of first and last{})\n",
            if rounds > 1 {
                format!("; medians over {rounds} rounds, range in brackets")
            } else {
                String::new()
            }
        );
        let mut head = "| config |".to_string();
        let mut rule = "| --- |".to_string();
        for w in workloads {
            head.push_str(&format!(" {} ops/s | × off |", w.name()));
            rule.push_str(" ---: | ---: |");
        }
        println!("{head}\n{rule}");
        let mut rows: Vec<(String, Option<&str>)> = vec![("off".into(), Some("first"))];
        rows.extend(b.cfg.configs.iter().map(|c| (c.name.clone(), None)));
        rows.push(("off".into(), Some("last")));
        let mut ratios = serde_json::Map::new();
        for (config, which) in &rows {
            let label = match which {
                Some(x) => format!("off ({x})"),
                None => config.clone(),
            };
            let mut line = format!("| {label} |");
            let mut per = serde_json::Map::new();
            for w in workloads {
                match agg(cells, w.name(), config, *which) {
                    Some(a) => {
                        line.push_str(&format!(" {} | {} |", fmt_ops(a.ops), fmt_ratio(&a)));
                        per.insert(
                            w.name().into(),
                            json!({"ops_per_s": r3(a.ops), "ratio": r3(a.ratio),
                                   "ratio_min": r3(a.min), "ratio_max": r3(a.max),
                                   "rounds": a.rounds}),
                        );
                    }
                    None => line.push_str(" — | — |"),
                }
            }
            println!("{line}");
            ratios.insert(label, Value::Object(per));
        }
        println!("\n## Lazy passes during the write cells\n");
        println!(
            "| workload | config | cell s | passes | pages/pass | dirty | pass ms | tracking ms | ms per GiB dirty | vulnerable stripes mean (max) | coverage ms max | pass thread CPU | writer faults/op | writer sys share | worst 1 s / median |"
        );
        println!(
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        );
        for c in cells.iter().filter(|c| c["mode"] == "lazy") {
            let l = &c["lazy"];
            let n = |v: &Value| v.as_f64().map_or("—".to_string(), |x| format!("{x:.1}"));
            println!(
                "| {} | {} | {:.0} | {} | {:.0} | {:.1}% | {} | {} | {} | {:.0} ({}) | {} | {} | {:.4} | {:.2} | {:.2} |",
                c["workload"].as_str().unwrap_or(""),
                c["config"].as_str().unwrap_or(""),
                c["seconds"].as_f64().unwrap_or(0.0),
                l["passes"],
                l["pages_per_pass"].as_f64().unwrap_or(0.0),
                l["dirty_fraction_per_pass"].as_f64().unwrap_or(0.0) * 100.0,
                n(&l["pass_ms_mean"]),
                n(&l["tracking_ms_mean"]),
                n(&l["pass_ms_per_gib_dirty"]),
                l["vulnerable_stripes_mean"].as_f64().unwrap_or(0.0),
                l["vulnerable_stripes_max"],
                l["time_to_coverage_ms_max"],
                c["pass_thread"]["cpu_pct"]
                    .as_f64()
                    .map_or("—".into(), |x| format!("{x:.1}%")),
                c["minflt_per_op"].as_f64().unwrap_or(0.0),
                c["main_thread"]["sys_share"].as_f64().unwrap_or(0.0),
                c["per_second_min_over_median"].as_f64().unwrap_or(f64::NAN),
            );
        }
        println!("\n## Every cell\n");
        println!(
            "| workload | round | config | run | s | ops/s | ns/op | × off | writer CPU | writer sys share | faults/op | open ms | load before → after |"
        );
        println!(
            "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
        );
        for c in cells {
            let w = c["workload"].as_str().unwrap_or("");
            let x = c["ops_per_s"].as_f64().unwrap_or(f64::NAN);
            println!(
                "| {w} | {} | {} | {} | {:.1} | {} | {:.1} | {:.3} | {:.0}% | {:.2} | {:.4} | {} | {} → {} |",
                c["round"],
                c["config"].as_str().unwrap_or(""),
                c["which"].as_str().unwrap_or(""),
                c["seconds"].as_f64().unwrap_or(0.0),
                fmt_ops(x),
                c["ns_per_op"].as_f64().unwrap_or(0.0),
                c["ratio_to_off"].as_f64().unwrap_or(f64::NAN),
                c["main_thread"]["cpu_pct"].as_f64().unwrap_or(0.0),
                c["main_thread"]["sys_share"].as_f64().unwrap_or(0.0),
                c["minflt_per_op"].as_f64().unwrap_or(0.0),
                c["open"]["open_ms"],
                c["loadavg_before"].as_str().unwrap_or(""),
                c["loadavg_after"].as_str().unwrap_or(""),
            );
        }
        let t = targets(cells);
        println!("\n## The paper's targets\n");
        println!("| target | config | workload | change vs off | verdict |");
        println!("| --- | --- | --- | ---: | --- |");
        for x in &t {
            let range = if x["rounds"].as_u64().unwrap_or(1) > 1 {
                format!(
                    " ({} to {})",
                    fmt_pct(x["ratio_min"].as_f64().unwrap_or(f64::NAN)),
                    fmt_pct(x["ratio_max"].as_f64().unwrap_or(f64::NAN))
                )
            } else {
                String::new()
            };
            println!(
                "| {} | {} | {} | {}{range} | {} |",
                x["target"].as_str().unwrap_or(""),
                x["config"].as_str().unwrap_or(""),
                x["workload"].as_str().unwrap_or(""),
                fmt_pct(x["ratio"].as_f64().unwrap_or(f64::NAN)),
                if x["met"] == true { "met" } else { "NOT met" }
            );
        }
        // Drift: each round's off last over its off first.
        println!("\n## Drift of the anchor (off last / off first, per round)\n");
        let mut drift = Vec::new();
        for w in workloads {
            let firsts: Vec<&Value> = cells
                .iter()
                .filter(|c| c["workload"] == w.name() && c["which"] == "first")
                .collect();
            let mut per_round = Vec::new();
            for f in firsts {
                let last = cells.iter().find(|c| {
                    c["workload"] == w.name() && c["which"] == "last" && c["round"] == f["round"]
                });
                if let Some(l) = last {
                    let q = l["ops_per_s"].as_f64().unwrap_or(f64::NAN)
                        / f["ops_per_s"].as_f64().unwrap_or(f64::NAN);
                    per_round.push(q);
                }
            }
            println!(
                "- {}: {}",
                w.name(),
                per_round
                    .iter()
                    .map(|q| format!("{q:.3}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            drift.push(json!({"workload": w.name(), "last_over_first": per_round.iter().map(|&q| r3(q)).collect::<Vec<_>>()}));
        }
        summary_json = json!({"ratios": ratios, "targets": t, "off_drift": drift});
    }
    if let Some(fw) = fw {
        let m = &fw["median"];
        let g = |k: &str| m[k].as_f64().unwrap_or(f64::NAN);
        println!(
            "\n## First write to a page in a fresh epoch ({} distinct random pages, one 64 B line each; medians of {} rounds x {} opens per mode)\n",
            fw["pages"], fw["rounds"], fw["reps"]
        );
        println!("| | ns/page |");
        println!("| --- | ---: |");
        println!("| off, first line | {:.1} |", g("off_first_ns_per_page"));
        println!("| off, second line | {:.1} |", g("off_rewrite_ns_per_page"));
        println!(
            "| lazy ({}), first line (write-protect fault) | {:.1} |",
            fw["tracker"].as_str().unwrap_or(""),
            g("lazy_first_ns_per_page")
        );
        println!(
            "| lazy, second line (no fault) | {:.1} |",
            g("lazy_rewrite_ns_per_page")
        );
        println!(
            "| **cost per first write** (lazy first − off first) | **{:.1}** |",
            g("fault_ns_per_page")
        );
        println!(
            "| the same within lazy (first − second line) | {:.1} |",
            g("fault_ns_per_page_within_lazy")
        );
        println!(
            "\nMinor faults per page in lazy's first loop: {:.3}. Isolated pass over those pages (no writer running): {:.1} ms ({:.1} ms tracking, {:.0} stripes), {:.1} ms per GiB of dirty pages.",
            g("lazy_first_minflt_per_page"),
            g("isolated_pass_ms"),
            g("isolated_pass_tracking_ms"),
            g("isolated_pass_stripes"),
            g("isolated_pass_ms_per_gib_dirty")
        );
    }
    summary_json
}

// ---------- main ----------

fn run(cfg: Cfg) -> anyhow::Result<()> {
    remove_files_on_signal()?;
    let a = &cfg.args;
    let data_bytes = cfg.data_bytes;
    let geo = integrity::Geometry::new(data_bytes / PAGE, a.stripe_pages)
        .context("no geometry for these sizes")?;
    let pool_bytes = (data_bytes + geo.meta_bytes + (16 << 20)).next_multiple_of(PAGE);
    if let Some(free) = free_bytes(&a.dir) {
        if free < pool_bytes + (256 << 20) {
            bail!(
                "{} has {} MiB free; the pool needs {} MiB (and 256 MiB to spare)",
                a.dir.display(),
                free >> 20,
                pool_bytes >> 20
            );
        }
    }
    if a.tracker == TrackerArg::Uffd && !integrity::tracker::uffd::supported() {
        bail!(
            "this kernel has no userfaultfd asynchronous write-protection with PAGEMAP_SCAN (Linux 6.7+); try --tracker mprotect"
        );
    }
    let started = utc_now();
    let load_start = loadavg();
    let file = TempFile::new(&a.dir);
    eprintln!(
        "integrity_bench: pool {} ({} MiB: data {} MiB, integrity {} MiB, K = {})",
        file.0.display(),
        pool_bytes >> 20,
        data_bytes >> 20,
        geo.meta_bytes >> 20,
        a.stripe_pages
    );
    let pool = Pool::create(
        &file.0,
        &pmem::CreateOptions {
            size: pool_bytes,
            domain: None,
        },
    )?;
    let mut pool = pool.map_medium(Arc::new);
    let region = pool.create_region("data", pmem::kinds::RAW, data_bytes, pmem::Alignment::Page)?;
    // Pre-fault: write every page of the data region once (a seeded pattern).
    let t = Instant::now();
    let mut chunk = vec![0u8; 1 << 20];
    let mut rng = SplitMix64::new(a.seed ^ 0x5eed);
    let mut at = 0u64;
    while at < data_bytes {
        for w in chunk.chunks_exact_mut(8) {
            w.copy_from_slice(&rng.next_u64().to_le_bytes());
        }
        pool.medium().write((region.offset + at) as usize, &chunk);
        at += chunk.len() as u64;
    }
    let prefault_ms = t.elapsed().as_secs_f64() * 1000.0;
    let t = Instant::now();
    integrity::create_in_pool(
        &mut pool,
        "data",
        &integrity::CreateOptions {
            mode: Mode::Off,
            stripe_pages: a.stripe_pages,
            period_ms: 1000,
        },
        &mut |_, _| {},
    )?;
    let create_ms = t.elapsed().as_secs_f64() * 1000.0;
    let medium = pool.medium();
    eprintln!(
        "integrity_bench: backing {}, domain {}, flush {}; prefault {prefault_ms:.0} ms, protect (full resync with line checksums) {create_ms:.0} ms",
        medium.backing().name(),
        medium.domain(),
        pmem::cpu::flush_instruction().name()
    );
    let meta = json!({
        "started": started,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        "cpu": format!("{} ({} cpus online)", cpu_model(), std::thread::available_parallelism().map_or(0, |n| n.get())),
        "pool": format!("{} ({} MiB)", file.0.display(), pool_bytes >> 20),
        "persistence_domain": format!(
            "{} (backing {}: PM emulated in DRAM, not durable across reboot); flush {} + sfence",
            medium.domain(),
            medium.backing().name(),
            pmem::cpu::flush_instruction().name()
        ),
        "data_region": format!("{} MiB, {} pages, stripes of {} pages + 1 parity page", data_bytes >> 20, data_bytes / PAGE, a.stripe_pages),
        "tracker": format!("{:?}", a.tracker).to_lowercase(),
        "seconds_per_cell": a.seconds,
        "lazy_write_cells": format!("max(seconds, {} x period)", a.lazy_periods),
        "prefault_ms": format!("{prefault_ms:.0}"),
        "protect_ms": format!("{create_ms:.0} (create_in_pool: full resync with line checksums)"),
        "loadavg_start": load_start,
    });
    let mut b = Bench {
        data_offset: region.offset,
        lines: data_bytes / LINE,
        pages: data_bytes / PAGE,
        pool,
        cfg,
        counter: 0,
    };
    let fw = if b.cfg.args.phases.contains(&Phase::Firstwrite) {
        Some(phase_firstwrite(&mut b)?)
    } else {
        None
    };
    let cells = if b.cfg.args.phases.contains(&Phase::Cells) {
        phase_cells(&mut b)?
    } else {
        Vec::new()
    };
    let mut meta = meta;
    meta["finished"] = utc_now().into();
    meta["loadavg_end"] = loadavg().into();
    let summary = print_report(&meta, fw.as_ref(), &cells, &b);
    if let Some(path) = &b.cfg.args.json {
        let doc = json!({
            "meta": meta,
            "firstwrite": fw,
            "cells": cells,
            "summary": summary,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("integrity_bench: wrote {}", path.display());
    }
    let Bench { pool, .. } = b;
    pool.close()?;
    drop(file);
    Ok(())
}

fn main() -> ExitCode {
    let cfg = match check_args(Args::parse()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("integrity_bench: {e}");
            return ExitCode::from(2);
        }
    };
    match run(cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("integrity_bench: {e:#}");
            ExitCode::from(1)
        }
    }
}
