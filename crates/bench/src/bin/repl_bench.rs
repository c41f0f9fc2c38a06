//! Replication benchmark (issue 7): the Kavach log replicated to 1, 2 or 3 backups over loopback
//! TCP (`crates/replication`), against the same log with no redundancy (0 backups, no mirror),
//! all in one process, on pool files in `--dir` (tmpfs: `/dev/shm`). `bench/replication/run.sh`
//! runs it group by group and summarizes.
//!
//! Every backup is a thread running `replication::tcp::serve_backup` on 127.0.0.1 (port chosen
//! by the kernel) with a `FileHost` in its own directory. The primary is a log copy in a pool file
//! (`host::create_copy_file`), `TcpPeers` to the backups, `recover()` (which fills the empty
//! backups), then a `Replicator` installed as the log's mirror. Phases:
//!
//! - `floor`: a bare TCP round trip over loopback per record size (request of the record's size
//!   plus a 32-byte header, 16-byte answer, `TCP_NODELAY`, blocking sockets): the transport's
//!   share of a replicated force, without the protocol, copies, CRCs or persistence.
//! - `lat`: one group per backup count B in `--backups`: B backups and a replicated primary, and
//!   in the same process an unreplicated log (the anchor). Per record size, cells run in the
//!   order anchor, anchor with a 0-backup `Replicator` installed (the mirror path's own cost;
//!   `--skip-mirror0` drops it), then each flush order (`Replicator::set_order`, no new
//!   recovery); the order of the cells is reversed for every other size. Each cell: untimed
//!   warm-up, then single-thread `append(payload, Sync)` with one clock read around every append
//!   (p10, p25, median, p75, p90, p99, p99.9, max, mean of the per-append times), then appends timed in batches
//!   of 64 for the throughput (ops/s, payload MB/s). Before every batch the ring is emptied with
//!   `cleanup_all` if the batch might not fit (clock stopped; with a mirror this ships a
//!   superline). Ratios are to the anchor cell of the same size in the same group.
//! - `mt`: the same groups, `--mt-threads` writer threads appending for `--seconds` per force
//!   policy (`--mt-modes`) and size (`--mt-sizes`), anchor and `--mt-orders`; the run is cut into
//!   segments that fit the ring, emptied between segments with the clock stopped.
//! - `recov`: per backup count in `--recov-backups` and record size in `--recov-sizes`: a primary
//!   with a `--recov-mib` log region, filled with records until the ring is full (forced every
//!   ~1 MiB), closed; then `--recov-reps` times: (1) intact: reopen the pool file, `Copy::new`,
//!   `recover()`, iterate every record; (2) lost: delete the primary's pool file, create an
//!   empty copy file of the same size (`create_copy_file`, the log's UUID), `recover()` (which
//!   rebuilds the local copy from a backup and repairs the others), iterate every record. Each
//!   step is timed separately; the record count is checked. A read-only `Log::open` of the
//!   rebuilt copy is timed too (one walk of the log, for scale), and per rep two floors: a
//!   memcpy of the region's size and the same bytes over a bare loopback TCP connection.
//!
//! Every cell also reports the CPU the process used (`self_cpu`, in cores: the run time of its
//! threads from `/proc/self/task/*/schedstat`) and the CPU everything else on the machine used
//! meanwhile (`other_cpu`: busy time from `/proc/stat` minus this process's), so a cell disturbed
//! by other work can be told apart.
//!
//! Output: one JSON object per cell, appended to `--json FILE` (if given), and a table on stdout
//! at the end; progress on stderr. Files live in a temporary directory under `--dir`, removed on
//! exit, also on an error, a panic, or SIGINT/SIGTERM/SIGHUP. Benchmarks are not tests: nothing
//! here runs in `cargo test`.
//!
//! Exit codes: 0 ok, 2 bad arguments, 1 runtime failure.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions as FsOpenOptions};
use std::io::{BufRead, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use clap::{Parser, ValueEnum};
use log::layout::record_footprint;
use log::{ForcePolicy, Log, LogError, LogOptions};
use pmem::{Mapping, Medium, OpenOptions, Pool, Uuid};
use replication::host::{FileHost, REGION, create_copy_file};
use replication::peers::call;
use replication::tcp::{TcpPeers, serve_backup};
use replication::{
    Copy, FlushOrder, Quorum, RecoverOptions, Recovered, Replicator, Request, Response, recover,
};
use serde_json::{Map, Value};

type KLog = Log<Arc<Mapping>>;
type Rep = Replicator<TcpPeers>;

/// Appends per timed batch (throughput) and per room check (latency).
const BATCH: u64 = 64;
/// Assumed USER_HZ for `/proc/stat` (100 on every Linux this runs on).
const TICKS_PER_S: f64 = 100.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Phase {
    Floor,
    Lat,
    Mt,
    Recov,
}

/// Kavach replication benchmark: append + force over 0-3 backups on loopback, and recovery.
#[derive(Debug, Parser)]
#[command(
    name = "repl_bench",
    about = "Kavach replication benchmark (issue 7): append+force latency and throughput with 0-3 \
             backups over loopback TCP, the three flush orders, and recovery of a lost primary \
             copy; every cell's ratio is to the unreplicated log (0 backups) in the same run",
    after_help = "bench/replication/run.sh runs this group by group (one process per backup \
                  count) and writes the report; see bench/README.md."
)]
struct Args {
    /// Directory for the pool files (tmpfs: /dev/shm, emulated ADR domain: clwb + sfence). A
    /// temporary directory is made in it and removed on exit.
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
    /// Phases to run, in this order: floor (bare TCP round trip per size), lat (single-thread
    /// latency and throughput), mt (multi-thread throughput), recov (recovery of a full log).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "floor,lat,mt,recov"
    )]
    phases: Vec<Phase>,
    /// Backup counts, one group each for lat and mt (each group also runs the 0-backup anchor
    /// cells next to its own). A list of only 0 runs the anchor cells alone.
    #[arg(long, value_delimiter = ',', default_value = "0,1,2,3")]
    backups: Vec<usize>,
    /// Record payload sizes in bytes for floor and lat.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "64,256,1024,4096,16384,65536"
    )]
    sizes: Vec<usize>,
    /// Flush orders for the replicated cells: replicate-first (ship, wait for the quorum, then
    /// flush locally), parallel (ship, flush while the backups work, wait), flush-first.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "replicate-first,parallel,flush-first"
    )]
    orders: Vec<String>,
    /// Seconds of timed appends per measurement: a lat cell has two (per-append latency, then
    /// batched throughput), an mt cell one, a floor cell one [default: 1, --quick: 0.2].
    #[arg(long)]
    seconds: Option<f64>,
    /// Cap on the appends (or round trips) of one measurement; whichever of --seconds and --ops
    /// is reached first ends it [default: 2000000, --quick: 20000].
    #[arg(long)]
    ops: Option<u64>,
    /// Untimed warm-up seconds before every cell [default: 0.2, --quick: 0.05].
    #[arg(long)]
    warmup: Option<f64>,
    /// Do not run the anchor-with-0-backup-Replicator cell (mirror path cost) in lat groups.
    #[arg(long)]
    skip_mirror0: bool,
    /// Log region size (MiB) of every primary and backup copy in lat and mt.
    #[arg(long, default_value_t = 64)]
    pool_mib: u64,
    /// Write quorum W (backups that must acknowledge a force), capped at the group's backup
    /// count [default: a majority of the copies with the primary's: W = (B + 1) / 2, at least
    /// 1]. The TCP primary waits for every live backup's answer anyway, so W changes nothing
    /// while no backup fails.
    #[arg(long)]
    write_quorum: Option<usize>,
    /// How long the primary waits for a backup's answer (ms) before dropping it.
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
    /// Writer threads for mt.
    #[arg(long, default_value_t = 2)]
    mt_threads: usize,
    /// Force policies for mt (sync, frequency:F, group:G).
    #[arg(long, value_delimiter = ',', default_value = "sync,frequency:8")]
    mt_modes: Vec<String>,
    /// Payload sizes for mt.
    #[arg(long, value_delimiter = ',', default_value = "1024")]
    mt_sizes: Vec<usize>,
    /// Flush orders for the replicated mt cells.
    #[arg(long, value_delimiter = ',', default_value = "replicate-first")]
    mt_orders: Vec<String>,
    /// Backup counts for recov (each a separate primary and backups) [default: 1,2, --quick: 1].
    #[arg(long, value_delimiter = ',')]
    recov_backups: Option<Vec<usize>>,
    /// Record payload sizes for recov.
    #[arg(long, value_delimiter = ',', default_value = "1024,64")]
    recov_sizes: Vec<usize>,
    /// Log region (MiB) for recov: the log that is filled and recovered
    /// [default: 256, --quick: 32].
    #[arg(long)]
    recov_mib: Option<u64>,
    /// Intact + lost recoveries per filled log [default: 3, --quick: 1].
    #[arg(long)]
    recov_reps: Option<u64>,
    /// Round number to put in every result (run.sh counts its rounds with it).
    #[arg(long, default_value_t = 1)]
    round: u64,
    /// Smaller defaults for a smoke run (a few seconds per group): --seconds 0.2, --ops 20000,
    /// --warmup 0.05, recov 32 MiB, 1 rep, recov backups 1.
    #[arg(long)]
    quick: bool,
    /// Append one JSON object per cell to this file (created if missing).
    #[arg(long)]
    json: Option<PathBuf>,
}

struct Cfg {
    args: Args,
    seconds: f64,
    ops: u64,
    warmup: f64,
    orders: Vec<FlushOrder>,
    mt_orders: Vec<FlushOrder>,
    mt_modes: Vec<ForcePolicy>,
    recov_backups: Vec<usize>,
    recov_bytes: u64,
    recov_reps: u64,
    timeout: Duration,
}

fn check_args(args: Args) -> Result<Cfg, String> {
    let q = args.quick;
    let seconds = args.seconds.unwrap_or(if q { 0.2 } else { 1.0 });
    let ops = args.ops.unwrap_or(if q { 20_000 } else { 2_000_000 });
    let warmup = args.warmup.unwrap_or(if q { 0.05 } else { 0.2 });
    let recov_mib = args.recov_mib.unwrap_or(if q { 32 } else { 256 });
    let recov_reps = args.recov_reps.unwrap_or(if q { 1 } else { 3 });
    let recov_backups = args
        .recov_backups
        .clone()
        .unwrap_or_else(|| if q { vec![1] } else { vec![1, 2] });
    let parse_orders = |l: &[String]| -> Result<Vec<FlushOrder>, String> {
        l.iter().map(|s| FlushOrder::parse(s)).collect()
    };
    let orders = parse_orders(&args.orders)?;
    let mt_orders = parse_orders(&args.mt_orders)?;
    let mt_modes = args
        .mt_modes
        .iter()
        .map(|s| ForcePolicy::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    if !(seconds > 0.0 && seconds.is_finite() && warmup >= 0.0 && warmup.is_finite()) {
        return Err("--seconds must be positive and --warmup not negative".into());
    }
    if ops == 0 || recov_reps == 0 || args.timeout_ms == 0 {
        return Err("--ops, --recov-reps and --timeout-ms must be positive".into());
    }
    if args.pool_mib < 4 || recov_mib < 4 {
        return Err("log regions need at least 4 MiB".into());
    }
    if args.backups.iter().chain(&recov_backups).any(|&b| b > 16) {
        return Err("backup counts must be at most 16".into());
    }
    if recov_backups.contains(&0) {
        return Err("--recov-backups: recovery from a backup needs at least 1 backup".into());
    }
    if args.mt_threads == 0 || args.mt_threads > 64 {
        return Err("--mt-threads must be in [1, 64]".into());
    }
    if args.write_quorum == Some(0) {
        return Err("--write-quorum must be at least 1".into());
    }
    for &s in args.sizes.iter().chain(&args.mt_sizes) {
        if s == 0 || s as u64 > (args.pool_mib << 20) / 16 || s > 1 << 20 {
            return Err(format!(
                "payload size {s} must be in [1, min(1 MiB, --pool-mib / 16)]"
            ));
        }
    }
    for &s in &args.recov_sizes {
        if s == 0 || s as u64 > (recov_mib << 20) / 16 || s > 1 << 20 {
            return Err(format!(
                "recovery payload size {s} must be in [1, min(1 MiB, --recov-mib / 16)]"
            ));
        }
    }
    Ok(Cfg {
        seconds,
        ops,
        warmup,
        orders,
        mt_orders,
        mt_modes,
        recov_backups,
        recov_bytes: recov_mib << 20,
        recov_reps,
        timeout: Duration::from_millis(args.timeout_ms),
        args,
    })
}

// --- output -----------------------------------------------------------------------------------

/// Collects results: JSON lines to the file, rows for the final table.
struct Out {
    file: Option<File>,
    round: u64,
    rows: Vec<Map<String, Value>>,
}

impl Out {
    fn emit(&mut self, kind: &str, fields: Vec<(&str, Value)>) -> anyhow::Result<()> {
        let mut m = Map::new();
        m.insert("kind".into(), kind.into());
        m.insert("round".into(), self.round.into());
        for (k, v) in fields {
            m.insert(k.into(), v);
        }
        if let Some(f) = self.file.as_mut() {
            writeln!(f, "{}", Value::Object(m.clone())).context("cannot write the JSON file")?;
            f.flush()?;
        }
        self.rows.push(m);
        Ok(())
    }
}

fn f(x: f64) -> Value {
    serde_json::Number::from_f64((x * 1000.0).round() / 1000.0)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

fn num(m: &Map<String, Value>, k: &str) -> f64 {
    m.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

fn text<'a>(m: &'a Map<String, Value>, k: &str) -> &'a str {
    m.get(k).and_then(Value::as_str).unwrap_or("")
}

// --- temporary files --------------------------------------------------------------------------

/// Directories alive now, removed by the signal thread if SIGINT, SIGTERM or SIGHUP ends the run.
static LIVE_DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn live_dirs() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    LIVE_DIRS.lock().unwrap_or_else(|p| p.into_inner())
}

fn remove_files_on_signal() -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .context("cannot install signal handlers")?;
    thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            for p in live_dirs().iter() {
                let _ = std::fs::remove_dir_all(p);
            }
            std::process::exit(128 + sig);
        }
    });
    Ok(())
}

/// A directory removed (with everything in it) when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(parent: &Path, what: &str) -> anyhow::Result<TempDir> {
        let p = parent.join(format!("kavach-replbench-{}-{what}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).with_context(|| format!("cannot create {}", p.display()))?;
        live_dirs().push(p.clone());
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        live_dirs().retain(|p| p != &self.0);
    }
}

// --- CPU accounting ---------------------------------------------------------------------------

/// CPU time of this process's threads (ns, exact) and busy time of the whole machine (ticks).
#[derive(Clone, Copy)]
struct CpuSample {
    me_ns: u64,
    busy: u64,
    at: Instant,
}

/// Sum of the run time of this process's live threads (`/proc/self/task/*/schedstat`, ns).
/// Callers sample while every thread they measure is alive: a thread's time leaves the sum when
/// it exits. (`/proc/self/stat`'s utime + stime come in lumps of tenths of a second.)
fn self_ns() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    dir.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn cpu_sample() -> CpuSample {
    let busy = std::fs::File::open("/proc/stat")
        .ok()
        .and_then(|f| {
            let mut line = String::new();
            std::io::BufReader::new(f).read_line(&mut line).ok()?;
            let v: Vec<u64> = line
                .split_whitespace()
                .skip(1)
                .map(|x| x.parse().unwrap_or(0))
                .collect();
            // user nice system idle iowait irq softirq steal: busy is all but idle and iowait.
            Some(v.iter().take(8).sum::<u64>() - v.get(3)? - v.get(4)?)
        })
        .unwrap_or(0);
    CpuSample {
        me_ns: self_ns(),
        busy,
        at: Instant::now(),
    }
}

/// (cores this process used, cores everything else used) since `a`.
fn cpu_since(a: CpuSample) -> (f64, f64) {
    let b = cpu_sample();
    let secs = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
    let me = b.me_ns.saturating_sub(a.me_ns) as f64 / 1e9 / secs;
    let all = b.busy.saturating_sub(a.busy) as f64 / TICKS_PER_S / secs;
    (me, (all - me).max(0.0))
}

// --- backups and primaries --------------------------------------------------------------------

/// A backup server thread with its copy in its own directory.
struct Backup {
    addr: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<std::io::Result<()>>>,
}

impl Backup {
    fn start(dir: &Path) -> anyhow::Result<Backup> {
        let host = FileHost::open(dir).map_err(|e| anyhow!("backup in {}: {e}", dir.display()))?;
        let listener = TcpListener::bind("127.0.0.1:0").context("cannot bind 127.0.0.1:0")?;
        let addr = listener.local_addr()?.to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let host = Arc::new(Mutex::new(host));
        let s = Arc::clone(&stop);
        let thread = thread::Builder::new()
            .name("kv-backup".into())
            .spawn(move || serve_backup(listener, host, s))?;
        Ok(Backup {
            addr,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Backup {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start_backups(dir: &Path, n: usize) -> anyhow::Result<Vec<Backup>> {
    (0..n)
        .map(|i| Backup::start(&dir.join(format!("backup{i}"))))
        .collect()
}

fn quorum(cfg: &Cfg, backups: usize) -> anyhow::Result<Quorum> {
    let w = if backups == 0 {
        0
    } else {
        cfg.args
            .write_quorum
            .unwrap_or(backups.div_ceil(2))
            .clamp(1, backups)
    };
    Ok(Quorum::new(backups, w)?)
}

fn recover_opts() -> RecoverOptions {
    RecoverOptions {
        full_wait: Duration::ZERO,
        ..RecoverOptions::default()
    }
}

/// A primary: its pool, its open log, the replicator (not yet installed), what recovery did.
struct Primary {
    log: KLog,
    rep: Arc<Rep>,
    rec: Recovered,
    uuid: Uuid,
    _pool: Pool<Arc<Mapping>>,
}

fn new_primary(
    path: &Path,
    region_len: u64,
    backups: &[Backup],
    q: Quorum,
    timeout: Duration,
) -> anyhow::Result<Primary> {
    let uuid = Uuid::random().context("cannot read /dev/urandom")?;
    let (pool, mut copy) =
        create_copy_file(path, uuid, region_len).map_err(|e| anyhow!("primary copy: {e}"))?;
    let mut peers = TcpPeers::new(backups.iter().map(|b| b.addr.clone()).collect(), timeout);
    let (log, rec) = recover(&mut copy, &mut peers, q, &recover_opts())
        .with_context(|| format!("recovery of a new primary with {} backups", backups.len()))?;
    if rec.live.len() != backups.len() {
        bail!("recovery left backups out: {:?}", rec.repairs);
    }
    let rep = Arc::new(Replicator::new(peers, q, FlushOrder::ReplicateFirst, &rec));
    Ok(Primary {
        log,
        rep,
        rec,
        uuid,
        _pool: pool,
    })
}

/// Fails if replication stopped or dropped a backup (a cell would then measure fewer backups).
fn check_rep(rep: &Rep) -> anyhow::Result<()> {
    let st = rep.stats();
    if let Some(why) = &st.failed {
        bail!("replication failed: {why}");
    }
    if let Some(b) = st.backups.iter().find(|b| !b.live) {
        bail!(
            "backup {} was dropped: {}",
            b.name,
            b.last_error.as_deref().unwrap_or("?")
        );
    }
    Ok(())
}

// --- appends ----------------------------------------------------------------------------------

fn payload(size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (i as u8).wrapping_mul(31) ^ 0x5a)
        .collect()
}

/// Empty the ring unless `need` more bytes fit (callers keep it out of their clocks).
fn ensure_room(log: &KLog, need: u64) -> anyhow::Result<()> {
    let s = log.stats();
    if s.ring_bytes - s.used_bytes < need {
        log.cleanup_all()?;
    }
    Ok(())
}

/// Touch every page of the ring once (64 KiB appends until full), then empty it.
fn prefault(log: &KLog) -> anyhow::Result<()> {
    let chunk = payload(64 << 10);
    let fp = record_footprint(chunk.len()) as u64;
    let ring = log.stats().ring_bytes;
    for _ in 0..ring / fp {
        log.append(&chunk, ForcePolicy::Frequency(16))?;
    }
    log.cleanup_all()?;
    Ok(())
}

fn append_sync(log: &KLog, data: &[u8]) -> anyhow::Result<()> {
    let r = log.append(std::hint::black_box(data), ForcePolicy::Sync)?;
    if !r.durable {
        bail!("append with Sync returned before the record was durable");
    }
    Ok(())
}

fn warm_up(log: &KLog, data: &[u8], secs: f64) -> anyhow::Result<()> {
    let fp = record_footprint(data.len()) as u64;
    let t0 = Instant::now();
    let mut n = 0u64;
    while n < 100 || t0.elapsed().as_secs_f64() < secs {
        ensure_room(log, (BATCH + 1) * fp)?;
        for _ in 0..16 {
            append_sync(log, data)?;
        }
        n += 16;
    }
    Ok(())
}

/// Per-append latency: one clock read before and after each append (room checks outside).
fn measure_latency(log: &KLog, data: &[u8], secs: f64, max_ops: u64) -> anyhow::Result<Vec<u64>> {
    let fp = record_footprint(data.len()) as u64;
    let mut times = Vec::with_capacity(max_ops.min(1 << 20) as usize);
    let start = Instant::now();
    while (times.len() as u64) < max_ops && start.elapsed().as_secs_f64() < secs {
        ensure_room(log, (BATCH + 1) * fp)?;
        for _ in 0..BATCH.min(max_ops - times.len() as u64) {
            let t0 = Instant::now();
            append_sync(log, data)?;
            times.push(t0.elapsed().as_nanos() as u64);
        }
    }
    Ok(times)
}

/// Throughput: batches of 64 appends, one clock read per batch; (appends, timed seconds).
fn measure_tput(log: &KLog, data: &[u8], secs: f64, max_ops: u64) -> anyhow::Result<(u64, f64)> {
    let fp = record_footprint(data.len()) as u64;
    let mut ops = 0u64;
    let mut timed = Duration::ZERO;
    while ops < max_ops && timed.as_secs_f64() < secs {
        ensure_room(log, (BATCH + 1) * fp)?;
        let t0 = Instant::now();
        for _ in 0..BATCH {
            append_sync(log, data)?;
        }
        timed += t0.elapsed();
        ops += BATCH;
    }
    Ok((ops, timed.as_secs_f64()))
}

/// Nearest-rank percentile of sorted values.
fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64
}

fn latency_fields(times: &mut [u64]) -> Vec<(&'static str, Value)> {
    times.sort_unstable();
    let mean = times.iter().map(|&t| t as f64).sum::<f64>() / times.len().max(1) as f64;
    vec![
        ("lat_ops", (times.len() as u64).into()),
        ("median_ns", f(pct(times, 0.5))),
        ("p10_ns", f(pct(times, 0.1))),
        ("p25_ns", f(pct(times, 0.25))),
        ("p75_ns", f(pct(times, 0.75))),
        ("p90_ns", f(pct(times, 0.9))),
        ("p99_ns", f(pct(times, 0.99))),
        ("p999_ns", f(pct(times, 0.999))),
        ("max_ns", f(times.last().copied().unwrap_or(0) as f64)),
        ("mean_ns", f(mean)),
    ]
}

/// `threads` writers appending `data` under `policy` for about `secs` timed seconds, in segments
/// that fit the ring (emptied between segments, clock stopped); (appends, timed seconds).
fn run_mt(
    log: &KLog,
    data: &[u8],
    threads: usize,
    policy: ForcePolicy,
    secs: f64,
    max_ops: u64,
) -> anyhow::Result<(u64, f64, (f64, f64))> {
    let t = threads as u64;
    let fp = record_footprint(data.len()) as u64;
    let ring = log.stats().ring_bytes;
    let seg = (ring * 8 / 10 / fp / t).clamp(1, 20_000);
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(threads + 1);
    let error: Mutex<Option<LogError>> = Mutex::new(None);
    let failed = AtomicBool::new(false);
    let mut elapsed = Duration::ZERO;
    let mut ops = 0u64;
    let mut cpu = None;
    let mut used = (0.0, 0.0);
    thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    barrier.wait();
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    for _ in 0..seg {
                        if failed.load(Ordering::Relaxed) {
                            break;
                        }
                        if let Err(e) = log.append(data, policy) {
                            failed.store(true, Ordering::Relaxed);
                            error
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .get_or_insert(e);
                        }
                    }
                    barrier.wait();
                }
            });
        }
        loop {
            if let Err(e) = log.cleanup_all() {
                failed.store(true, Ordering::Relaxed);
                error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(e);
            }
            if failed.load(Ordering::Relaxed) || elapsed.as_secs_f64() >= secs || ops >= max_ops {
                // The workers are parked on the barrier, alive: their time still counts.
                if let Some(c) = cpu {
                    used = cpu_since(c);
                }
                stop.store(true, Ordering::Release);
                barrier.wait();
                break;
            }
            cpu.get_or_insert_with(cpu_sample);
            barrier.wait();
            let t0 = Instant::now();
            barrier.wait();
            elapsed += t0.elapsed();
            ops += seg * t;
        }
    });
    if let Some(e) = error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e.into());
    }
    log.cleanup_all()?;
    Ok((ops, elapsed.as_secs_f64(), used))
}

// --- phases -----------------------------------------------------------------------------------

/// Bare loopback TCP round trips: `size + 32` bytes out, 16 back.
fn phase_floor(cfg: &Cfg, out: &mut Out) -> anyhow::Result<()> {
    for &size in &cfg.args.sizes {
        let req_len = size + 32;
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let server = thread::spawn(move || -> std::io::Result<()> {
            let (mut s, _) = listener.accept()?;
            s.set_nodelay(true)?;
            let mut buf = vec![0u8; req_len];
            let ans = [7u8; 16];
            loop {
                match s.read_exact(&mut buf) {
                    Ok(()) => s.write_all(&ans)?,
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                    Err(e) => return Err(e),
                }
            }
        });
        let mut c = TcpStream::connect(addr)?;
        c.set_nodelay(true)?;
        let req = payload(req_len);
        let mut ans = [0u8; 16];
        let mut rtt = |c: &mut TcpStream| -> std::io::Result<()> {
            c.write_all(&req)?;
            c.read_exact(&mut ans)
        };
        let t0 = Instant::now();
        while t0.elapsed().as_secs_f64() < cfg.warmup.max(0.02) {
            rtt(&mut c)?;
        }
        let cpu = cpu_sample();
        let mut times = Vec::new();
        let t0 = Instant::now();
        while (times.len() as u64) < cfg.ops && t0.elapsed().as_secs_f64() < cfg.seconds {
            let t = Instant::now();
            rtt(&mut c)?;
            times.push(t.elapsed().as_nanos() as u64);
        }
        let (me, other) = cpu_since(cpu);
        drop(c);
        server
            .join()
            .map_err(|_| anyhow!("the echo thread panicked"))??;
        let mut fields = vec![("size", size.into())];
        fields.extend(latency_fields(&mut times));
        fields.extend([("self_cpu", f(me)), ("other_cpu", f(other))]);
        eprintln!(
            "repl_bench: floor {size} B: median {:.1} us",
            num(&to_map(&fields), "median_ns") / 1e3
        );
        out.emit("floor", fields)?;
    }
    Ok(())
}

fn to_map(fields: &[(&str, Value)]) -> Map<String, Value> {
    fields
        .iter()
        .map(|(k, v)| ((*k).to_string(), v.clone()))
        .collect()
}

/// One cell's mirror: none (the anchor), a 0-backup replicator, or the group's in an order.
#[derive(Clone, Copy)]
enum Mode {
    Anchor,
    Mirror0,
    Order(FlushOrder),
}

impl Mode {
    fn name(&self) -> &'static str {
        match self {
            Mode::Anchor => "none",
            Mode::Mirror0 => "mirror0",
            Mode::Order(o) => o.name(),
        }
    }
}

/// The logs of one group: the anchor (with its 0-backup replicator) and, for B > 0, the
/// replicated primary with its backups.
struct Group {
    b: usize,
    anchor: Primary,
    repl: Option<(Primary, Vec<Backup>)>,
    _dir: TempDir,
}

impl Group {
    fn new(cfg: &Cfg, b: usize) -> anyhow::Result<Group> {
        let dir = TempDir::new(&cfg.args.dir, &format!("group{b}"))?;
        let region = cfg.args.pool_mib << 20;
        let anchor = new_primary(
            &dir.0.join("anchor.pool"),
            region,
            &[],
            quorum(cfg, 0)?,
            cfg.timeout,
        )?;
        prefault(&anchor.log)?;
        let repl = if b > 0 {
            let backups = start_backups(&dir.0, b)?;
            let p = new_primary(
                &dir.0.join("primary.pool"),
                region,
                &backups,
                quorum(cfg, b)?,
                cfg.timeout,
            )?;
            p.log.set_mirror(Some(p.rep.clone()));
            prefault(&p.log)?;
            check_rep(&p.rep)?;
            Some((p, backups))
        } else {
            None
        };
        Ok(Group {
            b,
            anchor,
            repl,
            _dir: dir,
        })
    }

    /// The log a mode runs on, with its mirror set.
    fn log(&self, mode: Mode) -> &KLog {
        match mode {
            Mode::Anchor => {
                self.anchor.log.set_mirror(None);
                &self.anchor.log
            }
            Mode::Mirror0 => {
                self.anchor
                    .log
                    .set_mirror(Some(self.anchor.rep.clone() as Arc<dyn log::Mirror>));
                &self.anchor.log
            }
            Mode::Order(o) => {
                let (p, _) = self.repl.as_ref().expect("a replicated mode needs backups");
                p.rep.set_order(o);
                &p.log
            }
        }
    }

    fn backups_of(&self, mode: Mode) -> usize {
        match mode {
            Mode::Order(_) => self.b,
            _ => 0,
        }
    }

    fn check(&self) -> anyhow::Result<()> {
        if let Some((p, _)) = &self.repl {
            check_rep(&p.rep)?;
        }
        check_rep(&self.anchor.rep)
    }

    fn describe(&self) -> Value {
        match &self.repl {
            Some((p, _)) => {
                let st = p.rep.stats();
                serde_json::json!({
                    "epoch": p.rec.epoch,
                    "write_quorum": st.quorum.write(),
                    "backups": st.backups.iter().map(|b| b.name.clone()).collect::<Vec<_>>(),
                })
            }
            None => Value::Null,
        }
    }
}

fn modes_for(b: usize, orders: &[FlushOrder], mirror0: bool) -> Vec<Mode> {
    let mut v = vec![Mode::Anchor];
    if mirror0 {
        v.push(Mode::Mirror0);
    }
    if b > 0 {
        v.extend(orders.iter().map(|&o| Mode::Order(o)));
    }
    v
}

fn phase_lat(cfg: &Cfg, out: &mut Out, b: usize) -> anyhow::Result<()> {
    let g = Group::new(cfg, b)?;
    eprintln!(
        "repl_bench: group {b}: backing {}, domain {}, flush {}, ring {} bytes, {}",
        g.anchor.log.medium().backing().name(),
        g.anchor.log.medium().domain(),
        pmem::cpu::flush_instruction().name(),
        g.anchor.log.stats().ring_bytes,
        g.describe()
    );
    let base_modes = modes_for(b, &cfg.orders, !cfg.args.skip_mirror0);
    for (si, &size) in cfg.args.sizes.iter().enumerate() {
        let data = payload(size);
        let mut modes = base_modes.clone();
        if si % 2 == 1 {
            modes.reverse();
        }
        for (pos, &mode) in modes.iter().enumerate() {
            let log = g.log(mode);
            warm_up(log, &data, cfg.warmup)?;
            let cpu = cpu_sample();
            let mut times = measure_latency(log, &data, cfg.seconds, cfg.ops)?;
            let (ops, secs) = measure_tput(log, &data, cfg.seconds, cfg.ops)?;
            let (me, other) = cpu_since(cpu);
            g.check()?;
            let mut fields = vec![
                ("group", b.into()),
                ("backups", g.backups_of(mode).into()),
                ("order", mode.name().into()),
                ("size", size.into()),
                ("position", pos.into()),
            ];
            fields.extend(latency_fields(&mut times));
            fields.extend([
                ("tput_ops", ops.into()),
                ("tput_s", f(secs)),
                ("ops_per_s", f(ops as f64 / secs)),
                ("mb_per_s", f(ops as f64 * size as f64 / secs / 1e6)),
                ("self_cpu", f(me)),
                ("other_cpu", f(other)),
            ]);
            let m = to_map(&fields);
            eprintln!(
                "repl_bench: lat B={} {:<15} {:>6} B: median {:>9.2} us, p99 {:>9.2} us, \
                 {:>10.0} ops/s (cpu {me:.2}, others {other:.2})",
                g.backups_of(mode),
                mode.name(),
                size,
                num(&m, "median_ns") / 1e3,
                num(&m, "p99_ns") / 1e3,
                num(&m, "ops_per_s"),
            );
            out.emit("lat", fields)?;
        }
    }
    g.anchor.log.set_mirror(None);
    Ok(())
}

fn phase_mt(cfg: &Cfg, out: &mut Out, b: usize) -> anyhow::Result<()> {
    let g = Group::new(cfg, b)?;
    let base_modes = modes_for(b, &cfg.mt_orders, false);
    let mut k = 0;
    for &size in &cfg.args.mt_sizes {
        let data = payload(size);
        for &policy in &cfg.mt_modes {
            let mut modes = base_modes.clone();
            if k % 2 == 1 {
                modes.reverse();
            }
            k += 1;
            for &mode in &modes {
                let log = g.log(mode);
                let t = cfg.args.mt_threads;
                run_mt(log, &data, t, policy, cfg.warmup.max(0.01), cfg.ops)?;
                let (ops, secs, (me, other)) = run_mt(log, &data, t, policy, cfg.seconds, cfg.ops)?;
                g.check()?;
                eprintln!(
                    "repl_bench: mt B={} {:<15} {size} B {policy} x{t}: {:.0} ops/s",
                    g.backups_of(mode),
                    mode.name(),
                    ops as f64 / secs
                );
                out.emit(
                    "mt",
                    vec![
                        ("group", b.into()),
                        ("backups", g.backups_of(mode).into()),
                        ("order", mode.name().into()),
                        ("size", size.into()),
                        ("mode", policy.to_string().into()),
                        ("threads", t.into()),
                        ("ops", ops.into()),
                        ("seconds", f(secs)),
                        ("ops_per_s", f(ops as f64 / secs)),
                        ("mb_per_s", f(ops as f64 * size as f64 / secs / 1e6)),
                        ("self_cpu", f(me)),
                        ("other_cpu", f(other)),
                    ],
                )?;
            }
        }
    }
    g.anchor.log.set_mirror(None);
    Ok(())
}

/// Walk every record; (records, payload bytes).
fn walk(log: &KLog) -> anyhow::Result<(u64, u64)> {
    let mut n = 0u64;
    let mut bytes = 0u64;
    for r in log.records() {
        let r = r?;
        n += 1;
        bytes += std::hint::black_box(r.payload).len() as u64;
    }
    Ok((n, bytes))
}

fn ms(d: Duration) -> Value {
    f(d.as_secs_f64() * 1e3)
}

fn repairs(rec: &Recovered) -> Value {
    Value::Array(
        rec.repairs
            .iter()
            .map(|(_, r)| serde_json::to_value(r).unwrap_or(Value::Null))
            .collect(),
    )
}

/// A one-line read from backup 0 on a new connection, then again on the same connection (ms):
/// what connecting costs the first request of a recovery (the backup's accept loop polls).
fn connect_rtts(backups: &[Backup], timeout: Duration) -> anyhow::Result<(f64, f64)> {
    let mut peers = TcpPeers::new(vec![backups[0].addr.clone()], timeout);
    let mut one = || -> anyhow::Result<f64> {
        let t = Instant::now();
        match call(&mut peers, 0, &Request::Read { offset: 0, len: 64 }) {
            Some(Response::Data(d)) if d.len() == 64 => Ok(t.elapsed().as_secs_f64() * 1e3),
            other => bail!("a read from the backup answered {other:?}"),
        }
    };
    let first = one()?;
    let second = one()?;
    Ok((first, second))
}

/// Floors for a recovery that moves `bytes`, on this machine now (ms): one memcpy of `bytes`
/// between two buffers touched before (the least a rebuild costs the primary: its fetched bytes
/// are stored once), and `bytes` sent over a new loopback TCP connection in 4 MiB writes to a
/// thread that reads and drops them (moving them with no protocol, no copy in or out of a
/// medium, no CRC).
fn recov_floors(bytes: usize) -> anyhow::Result<(f64, f64)> {
    let src = vec![0x5au8; bytes];
    let mut dst = vec![0u8; bytes];
    // Touched first: the timed copy measures the copy, not the page faults of a new buffer.
    dst.copy_from_slice(&src);
    let t = Instant::now();
    dst.copy_from_slice(&src);
    let memcpy = t.elapsed().as_secs_f64() * 1e3;
    std::hint::black_box(&dst);
    drop(dst);
    let listener = TcpListener::bind("127.0.0.1:0").context("bind for the TCP floor")?;
    let addr = listener.local_addr()?;
    let reader = thread::spawn(move || -> std::io::Result<usize> {
        let (mut s, _) = listener.accept()?;
        let mut buf = vec![0u8; 4 << 20];
        let mut got = 0;
        loop {
            match s.read(&mut buf)? {
                0 => return Ok(got),
                n => got += n,
            }
        }
    });
    let mut s = TcpStream::connect(addr).context("connect for the TCP floor")?;
    s.set_nodelay(true)?;
    let t = Instant::now();
    for chunk in src.chunks(4 << 20) {
        s.write_all(chunk)?;
    }
    s.shutdown(std::net::Shutdown::Write)?;
    let got = reader
        .join()
        .map_err(|_| anyhow!("the TCP floor's reader panicked"))??;
    let tcp = t.elapsed().as_secs_f64() * 1e3;
    if got != bytes {
        bail!("the TCP floor's reader got {got} of {bytes} bytes");
    }
    Ok((memcpy, tcp))
}

fn phase_recov(cfg: &Cfg, out: &mut Out) -> anyhow::Result<()> {
    for &b in &cfg.recov_backups {
        for &size in &cfg.args.recov_sizes {
            let dir = TempDir::new(&cfg.args.dir, &format!("recov{b}-{size}"))?;
            let backups = start_backups(&dir.0, b)?;
            let q = quorum(cfg, b)?;
            let path = dir.0.join("primary.pool");
            let region = cfg.recov_bytes;
            // Fill: force about every MiB, until the next record would not fit (a few KiB are
            // left for the jump record each recovery writes).
            let p = new_primary(&path, region, &backups, q, cfg.timeout)?;
            p.log.set_mirror(Some(p.rep.clone()));
            let data = payload(size);
            let fp = record_footprint(size) as u64;
            let freq = ((1u64 << 20) / fp).max(1);
            let ring = p.log.stats().ring_bytes;
            let t_fill = Instant::now();
            let mut filled = 0u64;
            while p.log.stats().used_bytes + fp + (16 << 10) <= ring {
                p.log.append(&data, ForcePolicy::Frequency(freq))?;
                filled += 1;
            }
            let Primary {
                log,
                rep,
                uuid,
                _pool: pool,
                ..
            } = p;
            log.close()?;
            check_rep(&rep)?;
            let fill = t_fill.elapsed();
            drop(rep);
            drop(pool);
            eprintln!(
                "repl_bench: recov B={b} {size} B: filled {filled} records ({:.1} MiB of \
                 {:.1} MiB ring) in {:.2} s through replication",
                (filled * fp) as f64 / (1 << 20) as f64,
                ring as f64 / (1 << 20) as f64,
                fill.as_secs_f64()
            );
            for rep_i in 1..=cfg.recov_reps {
                let (memcpy_ms, tcp_ms) = recov_floors(region as usize)?;
                for case in ["intact", "lost"] {
                    let (conn_ms, rtt_ms) = connect_rtts(&backups, cfg.timeout)?;
                    let cpu = cpu_sample();
                    let t0 = Instant::now();
                    let (pool, mut copy) = if case == "intact" {
                        let pool = Pool::open(
                            &path,
                            &OpenOptions {
                                read_only: false,
                                domain: None,
                            },
                        )?
                        .map_medium(Arc::new);
                        let r = pool
                            .region(REGION)
                            .cloned()
                            .ok_or_else(|| anyhow!("no `{REGION}` region"))?;
                        let copy = Copy::new(
                            Arc::clone(pool.medium()),
                            r.offset as usize,
                            r.length as usize,
                        );
                        (pool, copy)
                    } else {
                        std::fs::remove_file(&path)
                            .with_context(|| format!("cannot remove {}", path.display()))?;
                        create_copy_file(&path, uuid, region)
                            .map_err(|e| anyhow!("empty copy: {e}"))?
                    };
                    let t_open = t0.elapsed();
                    let mut peers = TcpPeers::new(
                        backups.iter().map(|b| b.addr.clone()).collect(),
                        cfg.timeout,
                    );
                    let t1 = Instant::now();
                    let (log, rec) = recover(&mut copy, &mut peers, q, &recover_opts())
                        .with_context(|| format!("{case} recovery"))?;
                    let t_recover = t1.elapsed();
                    let t2 = Instant::now();
                    let (n, bytes) = walk(&log)?;
                    let t_walk = t2.elapsed();
                    let (me, other) = cpu_since(cpu);
                    if n != filled {
                        bail!("{case} recovery found {n} records, {filled} were appended");
                    }
                    if rec.rebuilt_local != (case == "lost") || rec.live.len() != b {
                        bail!("{case} recovery did not do what was expected: {rec:?}");
                    }
                    // One read-only walk of the same copy, for scale.
                    let t3 = Instant::now();
                    let (_, one) = Log::open(
                        Arc::clone(pool.medium()),
                        copy.base(),
                        copy.len(),
                        &LogOptions {
                            read_only: true,
                            ..LogOptions::default()
                        },
                    )?;
                    let t_one = t3.elapsed();
                    if one.records != filled {
                        bail!("a read-only open found {} records", one.records);
                    }
                    drop(log);
                    drop(peers);
                    pool.close()?;
                    let total = t_open + t_recover + t_walk;
                    eprintln!(
                        "repl_bench: recov B={b} {size} B rep {rep_i} {case}: open {:.1} ms, \
                         recover {:.1} ms, iterate {:.1} ms, total {:.1} ms (one walk {:.1} ms; \
                         fetched {} bytes from {}; a read on a new connection {conn_ms:.2} ms, \
                         then {rtt_ms:.3} ms; memcpy of the region {memcpy_ms:.1} ms, over TCP \
                         {tcp_ms:.1} ms)",
                        t_open.as_secs_f64() * 1e3,
                        t_recover.as_secs_f64() * 1e3,
                        t_walk.as_secs_f64() * 1e3,
                        total.as_secs_f64() * 1e3,
                        t_one.as_secs_f64() * 1e3,
                        rec.fetched_bytes,
                        rec.source
                    );
                    out.emit(
                        "recov",
                        vec![
                            ("backups", b.into()),
                            ("size", size.into()),
                            ("case", case.into()),
                            ("rep", rep_i.into()),
                            ("region_mib", (region >> 20).into()),
                            ("records", n.into()),
                            ("payload_bytes", bytes.into()),
                            ("fill_s", f(fill.as_secs_f64())),
                            ("open_ms", ms(t_open)),
                            ("recover_ms", ms(t_recover)),
                            ("walk_ms", ms(t_walk)),
                            ("total_ms", ms(total)),
                            ("one_walk_ms", ms(t_one)),
                            ("memcpy_ms", f(memcpy_ms)),
                            ("tcp_ms", f(tcp_ms)),
                            ("new_conn_read_ms", f(conn_ms)),
                            ("read_ms", f(rtt_ms)),
                            ("fetched_bytes", rec.fetched_bytes.into()),
                            ("source", rec.source.clone().into()),
                            ("epoch", rec.epoch.into()),
                            ("repairs", repairs(&rec)),
                            ("self_cpu", f(me)),
                            ("other_cpu", f(other)),
                        ],
                    )?;
                }
            }
            drop(backups);
        }
    }
    Ok(())
}

// --- the table --------------------------------------------------------------------------------

fn print_table(rows: &[Map<String, Value>]) {
    let of = |k: &'static str| rows.iter().filter(move |r| text(r, "kind") == k);
    let floor: Vec<_> = of("floor").collect();
    if !floor.is_empty() {
        println!("\n## Loopback TCP round trip (no protocol), us\n");
        println!("| size | median | p99 |");
        println!("| ---: | ---: | ---: |");
        for r in floor {
            println!(
                "| {} | {:.2} | {:.2} |",
                num(r, "size"),
                num(r, "median_ns") / 1e3,
                num(r, "p99_ns") / 1e3
            );
        }
    }
    // Anchor per (round, group, size).
    let mut anchor: BTreeMap<(u64, u64, u64), (f64, f64)> = BTreeMap::new();
    for r in of("lat").filter(|r| text(r, "order") == "none") {
        anchor.insert(
            (
                num(r, "round") as u64,
                num(r, "group") as u64,
                num(r, "size") as u64,
            ),
            (num(r, "median_ns"), num(r, "ops_per_s")),
        );
    }
    let lat: Vec<_> = of("lat").collect();
    if !lat.is_empty() {
        println!(
            "\n## append(Sync) latency and throughput, one thread; x = ratio to the 0-backup \
             anchor of the same group and size\n"
        );
        println!(
            "| group | backups | order | size | median us | p99 us | x median | ops/s | MB/s | \
             x ops/s | cpu | others |"
        );
        println!(
            "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        );
        let mut lat = lat;
        lat.sort_by_key(|r| {
            (
                num(r, "round") as u64,
                num(r, "group") as u64,
                num(r, "size") as u64,
                num(r, "backups") as u64,
                text(r, "order").to_string(),
            )
        });
        for r in lat {
            let key = (
                num(r, "round") as u64,
                num(r, "group") as u64,
                num(r, "size") as u64,
            );
            let (am, at) = anchor.get(&key).copied().unwrap_or((f64::NAN, f64::NAN));
            println!(
                "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.0} | {:.1} | {:.3} | {:.2} | {:.2} |",
                num(r, "group"),
                num(r, "backups"),
                text(r, "order"),
                num(r, "size"),
                num(r, "median_ns") / 1e3,
                num(r, "p99_ns") / 1e3,
                num(r, "median_ns") / am,
                num(r, "ops_per_s"),
                num(r, "mb_per_s"),
                num(r, "ops_per_s") / at,
                num(r, "self_cpu"),
                num(r, "other_cpu"),
            );
        }
    }
    let mt: Vec<_> = of("mt").collect();
    if !mt.is_empty() {
        println!("\n## Multi-thread throughput; x = ratio to the anchor of the same group\n");
        println!(
            "| group | backups | order | size | policy | threads | ops/s | x | cpu | others |"
        );
        println!("| ---: | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |");
        let mut anchors: BTreeMap<(u64, u64, u64, String), f64> = BTreeMap::new();
        for r in mt.iter().filter(|r| text(r, "order") == "none") {
            anchors.insert(
                (
                    num(r, "round") as u64,
                    num(r, "group") as u64,
                    num(r, "size") as u64,
                    text(r, "mode").to_string(),
                ),
                num(r, "ops_per_s"),
            );
        }
        for r in mt {
            let key = (
                num(r, "round") as u64,
                num(r, "group") as u64,
                num(r, "size") as u64,
                text(r, "mode").to_string(),
            );
            println!(
                "| {} | {} | {} | {} | {} | {} | {:.0} | {:.3} | {:.2} | {:.2} |",
                num(r, "group"),
                num(r, "backups"),
                text(r, "order"),
                num(r, "size"),
                text(r, "mode"),
                num(r, "threads"),
                num(r, "ops_per_s"),
                num(r, "ops_per_s") / anchors.get(&key).copied().unwrap_or(f64::NAN),
                num(r, "self_cpu"),
                num(r, "other_cpu"),
            );
        }
    }
    let rec: Vec<_> = of("recov").collect();
    if !rec.is_empty() {
        println!("\n## Recovery of a full log (ms)\n");
        println!(
            "| backups | record | case | rep | records | open | recover | iterate | total | \
             one walk | memcpy | TCP | fetched MiB | others |"
        );
        println!(
            "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: \
             | ---: | ---: |"
        );
        for r in rec {
            println!(
                "| {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} \
                 | {:.1} | {:.2} |",
                num(r, "backups"),
                num(r, "size"),
                text(r, "case"),
                num(r, "rep"),
                num(r, "records"),
                num(r, "open_ms"),
                num(r, "recover_ms"),
                num(r, "walk_ms"),
                num(r, "total_ms"),
                num(r, "one_walk_ms"),
                num(r, "memcpy_ms"),
                num(r, "tcp_ms"),
                num(r, "fetched_bytes") / (1 << 20) as f64,
                num(r, "other_cpu"),
            );
        }
    }
}

fn run(cfg: &Cfg) -> anyhow::Result<()> {
    if !cfg.args.dir.is_dir() {
        bail!("--dir {} is not a directory", cfg.args.dir.display());
    }
    remove_files_on_signal()?;
    let file = match &cfg.args.json {
        Some(p) => Some(
            FsOpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("cannot open {}", p.display()))?,
        ),
        None => None,
    };
    let mut out = Out {
        file,
        round: cfg.args.round,
        rows: Vec::new(),
    };
    // The clock's own cost, for reading the anchor cells (each per-append time includes one
    // clock read).
    let t0 = Instant::now();
    let mut x = t0;
    for _ in 0..100_000 {
        x = std::hint::black_box(Instant::now());
    }
    let clock_ns = x.duration_since(t0).as_nanos() as f64 / 100_000.0;
    out.emit(
        "meta",
        vec![
            ("pid", std::process::id().into()),
            ("dir", cfg.args.dir.display().to_string().into()),
            ("flush", pmem::cpu::flush_instruction().name().into()),
            ("clock_read_ns", f(clock_ns)),
            ("seconds", f(cfg.seconds)),
            ("ops_cap", cfg.ops.into()),
            ("warmup_s", f(cfg.warmup)),
            ("pool_mib", cfg.args.pool_mib.into()),
            ("recov_mib", (cfg.recov_bytes >> 20).into()),
            ("timeout_ms", cfg.args.timeout_ms.into()),
        ],
    )?;
    let groups: Vec<usize> = {
        let nonzero: Vec<usize> = cfg
            .args
            .backups
            .iter()
            .copied()
            .filter(|&b| b > 0)
            .collect();
        if nonzero.is_empty() { vec![0] } else { nonzero }
    };
    for &phase in &cfg.args.phases {
        let r = match phase {
            Phase::Floor => phase_floor(cfg, &mut out),
            Phase::Lat => groups.iter().try_for_each(|&b| phase_lat(cfg, &mut out, b)),
            Phase::Mt => groups.iter().try_for_each(|&b| phase_mt(cfg, &mut out, b)),
            Phase::Recov => phase_recov(cfg, &mut out),
        };
        r.with_context(|| format!("phase {phase:?}"))?;
    }
    print_table(&out.rows);
    Ok(())
}

fn main() -> ExitCode {
    let cfg = match check_args(Args::parse()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("repl_bench: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("repl_bench: {e:#}");
            ExitCode::from(1)
        }
    }
}
