//! Kavach side of the log benchmark (`bench/log/run.sh` runs it against PMDK's libpmemlog, whose
//! harness is `bench/log/pmemlog_bench.c`; the two take the same options and print the same
//! lines). Phases:
//!
//! - `lat`: single-thread `append(data, Sync)` latency per payload size. Timed in batches of
//!   `--batch` appends (one clock read per batch, not per append); prints the median, p99 and
//!   mean of the per-batch ns/append. Before a batch that might not fit, the ring is emptied
//!   with `cleanup_all` outside the timed region.
//! - `floor`: the pieces an append is made of, on a plain mapping in the same domain: a bare 64 B
//!   persist; per latency size the record CRC, the stores and fence of a streamed record (what
//!   a `Sync` append issues when the tuning streams such records), the same with the record CRC
//!   computed alongside (the fused copy a streamed append runs), and the cache path's
//!   stores, flushes and fence (below the non-temporal threshold: ordinary stores, the lines
//!   flushed; above it: streamed payload, header line stored and flushed), without the locks,
//!   the sequencer or the CRC; per recovery size, the floor of a walk over the mapping: copying
//!   each payload out (libpmemlog's walk), and running the CRC over each record in place (the
//!   least a checked walk does), with and without the walk's prefetch.
//! - `tput`: appends/s with T writer threads per force policy and payload size. The run is cut
//!   into segments that fit the ring; between segments (all writers parked on a barrier, clock
//!   stopped) the ring is emptied with `cleanup_all`.
//! - `vuln`: as `tput`, and after each append the writer samples `lsn - durable_lsn()`
//!   (records reserved up to its own that are not yet durable; 0 if durable).
//! - `recov`: fill a fresh log of `--recov-mib` MiB with records until it is full, close it,
//!   then time `LogFile::open` (which validates every record to find the tail) and iterating
//!   `records()` (which validates and copies every record). Each repetition also times the
//!   one-pass recovery, `LogFile::open_replaying` handing every record to a callback from the
//!   walk that checks it (`recov1` lines, the same fields, `walk_ms` 0); the two alternate
//!   which goes first.
//!
//! Output: one line per result, `KIND kavach FIELDS...` (see `bench/log/summarize.py`), or one
//! JSON object per line with `--json`. Files live in `--dir` and are removed on exit, also on an
//! error, a panic, or SIGINT/SIGTERM/SIGHUP.
//!
//! Exit codes: 0 ok, 2 bad arguments, 1 runtime failure.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use log::layout::record_footprint;
use log::{ForcePolicy, Log, LogError, LogFile};
use pmem::{Domain, Mapping, Medium};
use serde_json::{Map, Value};

const SIDE: &str = "kavach";
const REGION: &str = "log";
const WARMUP_APPENDS: u64 = 1000;
const HIST_BUCKETS: usize = 1 << 16;
const HEADER: usize = log::layout::RECORD_HEADER_BYTES;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Phase {
    Lat,
    Floor,
    Tput,
    Vuln,
    Recov,
}

/// Kavach log vs libpmemlog: the Kavach harness.
#[derive(Debug, Parser)]
#[command(
    name = "log_bench",
    about = "Kavach log vs libpmemlog: the Kavach harness (bench/log/run.sh runs both)"
)]
struct Args {
    /// Directory for the pool files (tmpfs: /dev/shm). Files are removed on exit.
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
    /// Phases to run, in this order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "lat,floor,tput,vuln,recov"
    )]
    phases: Vec<Phase>,
    /// Payload sizes (bytes) for the latency phase.
    #[arg(long, value_delimiter = ',', default_value = "64,256,1024,4096,65536")]
    sizes: Vec<usize>,
    /// Appends per size in the latency phase (fewer for big payloads: see --iter-bytes)
    /// [default: 200000, --quick: 20000].
    #[arg(long)]
    iters: Option<u64>,
    /// Cap on the payload bytes appended per size in the latency phase.
    #[arg(long, default_value_t = 2 << 30)]
    iter_bytes: u64,
    /// Appends per timed batch in the latency phase.
    #[arg(long, default_value_t = 64)]
    batch: u64,
    /// Pool size (MiB) for the latency, throughput and vulnerability phases.
    #[arg(long, default_value_t = 64)]
    pool_mib: u64,
    /// Writer thread counts for the throughput phase.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    threads: Vec<usize>,
    /// Payload sizes for the throughput phase.
    #[arg(long, value_delimiter = ',', default_value = "64,1024")]
    tput_sizes: Vec<usize>,
    /// Force policies for the throughput phase (sync, frequency:F, group:G).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "sync,frequency:8,group:128"
    )]
    modes: Vec<String>,
    /// Appends (all threads together) per throughput configuration
    /// [default: 400000, --quick: 50000].
    #[arg(long)]
    tput_ops: Option<u64>,
    /// Force policies for the vulnerability-window phase.
    #[arg(long, value_delimiter = ',', default_value = "frequency:8,group:128")]
    vuln_modes: Vec<String>,
    /// Writer thread counts for the vulnerability-window phase.
    #[arg(long, value_delimiter = ',', default_value = "2,4")]
    vuln_threads: Vec<usize>,
    /// Payload sizes for the vulnerability-window phase.
    #[arg(long, value_delimiter = ',', default_value = "64,1024")]
    vuln_sizes: Vec<usize>,
    /// Record sizes for the recovery phase.
    #[arg(long, value_delimiter = ',', default_value = "1024,64")]
    recov_sizes: Vec<usize>,
    /// Pool size (MiB) for the recovery phase [default: 256, --quick: 32].
    #[arg(long)]
    recov_mib: Option<u64>,
    /// Timed open + walk repetitions per filled log [default: 3, --quick: 1].
    #[arg(long)]
    recov_reps: Option<u64>,
    /// Round number to print (run.sh alternates the two harnesses round by round).
    #[arg(long, default_value_t = 1)]
    round: u64,
    /// Smaller defaults for a smoke run.
    #[arg(long)]
    quick: bool,
    /// Print one JSON object per line instead of space-separated fields.
    #[arg(long)]
    json: bool,
}

struct Cfg {
    args: Args,
    iters: u64,
    tput_ops: u64,
    recov_bytes: u64,
    recov_reps: u64,
    modes: Vec<ForcePolicy>,
    vuln_modes: Vec<ForcePolicy>,
}

fn check_args(args: Args) -> Result<Cfg, String> {
    let q = args.quick;
    let iters = args.iters.unwrap_or(if q { 20_000 } else { 200_000 });
    let tput_ops = args.tput_ops.unwrap_or(if q { 50_000 } else { 400_000 });
    let recov_mib = args.recov_mib.unwrap_or(if q { 32 } else { 256 });
    let recov_reps = args.recov_reps.unwrap_or(if q { 1 } else { 3 });
    let parse = |list: &[String]| -> Result<Vec<ForcePolicy>, String> {
        list.iter().map(|s| ForcePolicy::parse(s)).collect()
    };
    let modes = parse(&args.modes)?;
    let vuln_modes = parse(&args.vuln_modes)?;
    if iters == 0 || tput_ops == 0 || recov_reps == 0 || args.batch == 0 {
        return Err("--iters, --tput-ops, --recov-reps and --batch must be positive".into());
    }
    if args.pool_mib < 4 || recov_mib < 4 {
        return Err("pools need at least 4 MiB".into());
    }
    let all_sizes = args
        .sizes
        .iter()
        .chain(&args.tput_sizes)
        .chain(&args.vuln_sizes)
        .chain(&args.recov_sizes);
    for &s in all_sizes {
        if s == 0 || s as u64 > (args.pool_mib << 20) / 8 || s as u64 > (recov_mib << 20) / 8 {
            return Err(format!(
                "payload size {s} must be in [1, pool/8] for the pools given"
            ));
        }
    }
    if args
        .threads
        .iter()
        .chain(&args.vuln_threads)
        .any(|&t| t == 0 || t > 256)
    {
        return Err("thread counts must be in [1, 256]".into());
    }
    Ok(Cfg {
        iters,
        tput_ops,
        recov_bytes: recov_mib << 20,
        recov_reps,
        modes,
        vuln_modes,
        args,
    })
}

/// Prints result lines: `KIND kavach v1 v2 ...`, or JSON objects with the field names.
struct Out {
    json: bool,
}

impl Out {
    fn emit(&self, kind: &str, fields: &[(&str, Value)]) {
        if self.json {
            let mut m = Map::new();
            m.insert("kind".into(), kind.into());
            m.insert("side".into(), SIDE.into());
            for (k, v) in fields {
                m.insert((*k).into(), v.clone());
            }
            println!("{}", Value::Object(m));
        } else {
            let mut line = format!("{kind} {SIDE}");
            for (_, v) in fields {
                match v {
                    Value::String(s) => line.push_str(&format!(" {s}")),
                    Value::Number(n) if n.is_f64() => {
                        line.push_str(&format!(" {:.3}", n.as_f64().unwrap_or(f64::NAN)))
                    }
                    other => line.push_str(&format!(" {other}")),
                }
            }
            println!("{line}");
        }
    }
}

fn f(x: f64) -> Value {
    serde_json::Number::from_f64((x * 1000.0).round() / 1000.0)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

/// Pool files alive now, removed by the signal thread if SIGINT, SIGTERM or SIGHUP ends the run.
static LIVE_FILES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn live_files() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    LIVE_FILES.lock().unwrap_or_else(|p| p.into_inner())
}

/// On SIGINT, SIGTERM or SIGHUP: remove the live pool files and exit with 128 + the signal.
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

/// Removes its file when dropped (also on an error or a panic; on a signal, see
/// [`remove_files_on_signal`]).
struct TempFile(PathBuf);

impl TempFile {
    fn new(dir: &Path, what: &str) -> TempFile {
        let p = dir.join(format!("kavach-logbench-{}-{what}", std::process::id()));
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

type KLog = Log<Arc<Mapping>>;

/// Nearest-rank percentile of sorted values.
fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn payload(size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (i as u8).wrapping_mul(31) ^ 0x5a)
        .collect()
}

/// Empty the ring unless `need` more bytes fit (untimed: callers keep it out of their clocks).
fn ensure_room(log: &KLog, need: u64) -> anyhow::Result<()> {
    let s = log.stats();
    if s.ring_bytes - s.used_bytes < need {
        log.cleanup_all()?;
    }
    Ok(())
}

/// Touch every page of the ring once (64 KiB appends until full), then empty it, as the C side
/// does, so neither side pays first-touch page faults in a timed loop.
fn prefault(log: &KLog) -> anyhow::Result<()> {
    let chunk = payload(64 << 10);
    loop {
        match log.append(&chunk, ForcePolicy::Frequency(64)) {
            Ok(_) => {}
            Err(LogError::Full { .. }) => break,
            Err(e) => return Err(e.into()),
        }
    }
    log.cleanup_all()?;
    Ok(())
}

fn phase_lat(cfg: &Cfg, out: &Out) -> anyhow::Result<()> {
    let a = &cfg.args;
    let file = TempFile::new(&a.dir, "lat");
    let lf = LogFile::create(&file.0, a.pool_mib << 20, REGION, None, Duration::ZERO)?;
    let log = lf.log();
    eprintln!(
        "log_bench: backing {}, domain {}, flush instruction {}, ring {} bytes",
        log.medium().backing().name(),
        log.medium().domain(),
        pmem::cpu::flush_instruction().name(),
        log.stats().ring_bytes
    );
    let t = pmem::tune::current();
    eprintln!(
        "log_bench: cpu {} ({}), tuning {}; the log's non-temporal threshold {}",
        t.cpu.brand,
        t.cpu.key(),
        t.summary(),
        log.nontemporal_bytes_min()
    );
    prefault(log)?;
    for &size in &a.sizes {
        let data = payload(size);
        let fp = record_footprint(size) as u64;
        let ops = cfg
            .iters
            .min(a.iter_bytes / size as u64)
            .max(a.batch)
            .next_multiple_of(a.batch);
        let batches = ops / a.batch;
        ensure_room(log, (WARMUP_APPENDS.min(ops) + 1) * fp)?;
        for _ in 0..WARMUP_APPENDS.min(ops) {
            let r = log.append(&data, ForcePolicy::Sync)?;
            if !r.durable {
                bail!("append with Sync returned before the record was durable");
            }
        }
        let mut per_op = Vec::with_capacity(batches as usize);
        let mut total_ns = 0u128;
        for _ in 0..batches {
            ensure_room(log, (a.batch + 1) * fp)?;
            let t0 = Instant::now();
            for _ in 0..a.batch {
                log.append(std::hint::black_box(&data), ForcePolicy::Sync)?;
            }
            let ns = t0.elapsed().as_nanos();
            total_ns += ns;
            per_op.push(ns as f64 / a.batch as f64);
        }
        per_op.sort_by(f64::total_cmp);
        out.emit(
            "lat",
            &[
                ("size", size.into()),
                ("round", a.round.into()),
                ("ops", ops.into()),
                ("batch", a.batch.into()),
                ("median_ns", f(pct(&per_op, 0.5))),
                ("p99_ns", f(pct(&per_op, 0.99))),
                ("mean_ns", f(total_ns as f64 / ops as f64)),
            ],
        );
    }
    lf.close()?;
    Ok(())
}

/// Time `iters` calls of `op(i, offset)` walking a mapping in `stride` steps; ns per call.
fn floor_loop(iters: u64, stride: usize, len: usize, mut op: impl FnMut(u64, usize)) -> f64 {
    fn walk(n: u64, stride: usize, len: usize, op: &mut impl FnMut(u64, usize)) {
        let mut off = 0;
        for i in 0..n {
            op(i, off);
            off += stride;
            if off + stride > len {
                off = 0;
            }
        }
    }
    walk(iters.min(WARMUP_APPENDS), stride, len, &mut op);
    let t0 = Instant::now();
    walk(iters, stride, len, &mut op);
    t0.elapsed().as_nanos() as f64 / iters as f64
}

fn phase_floor(cfg: &Cfg, out: &Out) -> anyhow::Result<()> {
    let a = &cfg.args;
    let len = (a.pool_mib << 20) as usize;
    let file = TempFile::new(&a.dir, "floor");
    let mut m = Mapping::create(&file.0, len as u64)?;
    m.set_domain(Domain::Adr);
    m.write(0, &vec![0u8; len]); // prefault
    let seed = log::format::crc_seed(&pmem::Uuid([7; 16]));
    let hdr = [0x11u8; HEADER];
    let mut failed = None;
    let mut check = |r: pmem::Result<()>| {
        if let Err(e) = r {
            failed.get_or_insert(e);
        }
    };
    let mut results = vec![(
        "persist64".to_string(),
        cfg.iters,
        floor_loop(cfg.iters, 128, len, |i, off| {
            m.store_u64(off, i);
            check(m.persist(off, 64));
        }),
    )];
    for &size in &a.sizes {
        let data = payload(size);
        let fp = record_footprint(size);
        let iters = cfg.iters.min(a.iter_bytes / size as u64).max(1);
        // The record CRC: seed, 16 header bytes, payload.
        let crc = floor_loop(iters, fp, len, |i, _| {
            let c = log::format::crc_start(seed, i, size as u32, 1);
            std::hint::black_box(log::checksum::append(c, std::hint::black_box(&data)));
        });
        results.push((format!("crc{size}"), iters, crc));
        // What a Sync append stores when the tuning streams such records (`stream_sync`): the
        // header's line (header and the first payload bytes), the payload's whole lines and a
        // last, zero-padded line, all with non-temporal stores, then one fence.
        let mut line0 = [0u8; 64];
        line0[..HEADER].copy_from_slice(&hdr);
        let first = size.min(64 - HEADER);
        line0[HEADER..HEADER + first].copy_from_slice(&data[..first]);
        let whole = (size - first) / 64 * 64;
        let mut last = [0u8; 64];
        let rest = size - first - whole;
        last[..rest].copy_from_slice(&data[first + whole..]);
        let ns = floor_loop(iters, fp, len, |_, off| {
            m.write_nontemporal(off, std::hint::black_box(&line0));
            if whole > 0 {
                m.write_nontemporal(off + 64, std::hint::black_box(&data[first..first + whole]));
            }
            if rest > 0 {
                m.write_nontemporal(off + 64 + whole, std::hint::black_box(&last));
            }
            check(m.fence());
        });
        results.push((format!("stream{size}"), iters, ns));
        // The same stores with the record CRC computed alongside, as a streamed append does:
        // the header's line and the last line (their CRC alone), the whole lines between
        // by the fused copy, one fence. Against `stream`, what the CRC adds to the copy;
        // against `crc` and `stream`, how much of it the overlap hides.
        let ns = floor_loop(iters, fp, len, |i, off| {
            let mut c = log::format::crc_start(seed, i, size as u32, 1);
            c = log::checksum::append(c, &data[..first]);
            if whole > 0 {
                c = m.write_nontemporal_crc32c(
                    off + 64,
                    std::hint::black_box(&data[first..first + whole]),
                    c,
                );
            }
            if rest > 0 {
                c = log::checksum::append(c, &last[..rest]);
                m.write_nontemporal(off + 64 + whole, std::hint::black_box(&last));
            }
            m.write_nontemporal(off, std::hint::black_box(&line0));
            std::hint::black_box(c);
            check(m.fence());
        });
        results.push((format!("fused{size}"), iters, ns));
        if size < pmem::tune::current().choices().nt_min {
            // The cache path of a small record (a record forced later, or every record when
            // the tuning does not stream): header and payload with ordinary stores, then one
            // flush of the record's lines and one fence.
            let ns = floor_loop(iters, fp, len, |_, off| {
                m.write(off, &hdr);
                m.write(off + HEADER, std::hint::black_box(&data));
                check(m.persist(off, fp));
            });
            results.push((format!("store{size}"), iters, ns));
        } else {
            // Before the header's line was streamed too: non-temporal payload, the header
            // stored, its line flushed, one fence.
            let ns = floor_loop(iters, fp, len, |_, off| {
                m.write_nontemporal(off + HEADER, std::hint::black_box(&data));
                m.write(off, &hdr);
                check(m.flush(off, 64));
                check(m.fence());
            });
            results.push((format!("store{size}"), iters, ns));
        }
    }
    // The floor of a recovery walk over records of each recovery size, on the whole mapping
    // (larger than the last-level cache, so each walk reads from memory): what libpmemlog's
    // walk does per record (copy the payload out), and what the least a checked walk does
    // (the CRC over header and payload, reading the bytes where they lie; with the log's
    // prefetch 4 KiB ahead, and without).
    for &size in &a.recov_sizes {
        let fp = record_footprint(size);
        let n = len / fp;
        let mut out_buf = vec![0u8; size];
        let mut sink = 0u32;
        let mut walk = |what: &str, op: &mut dyn FnMut(usize)| {
            for k in 0..n {
                op(k * fp); // warm the page tables, untimed
            }
            let t0 = Instant::now();
            for k in 0..n {
                op(k * fp);
            }
            results.push((
                format!("{what}{size}"),
                n as u64,
                t0.elapsed().as_nanos() as f64 / n as f64,
            ));
        };
        walk("walkcopy", &mut |off| {
            m.read(off + HEADER, &mut out_buf);
            sink ^= u32::from(std::hint::black_box(out_buf[size / 2]));
        });
        walk("walkcrc", &mut |off| {
            sink ^= m.crc32c(off, size + 16, 7);
        });
        walk("walkcrcpf", &mut |off| {
            if off + 4096 + fp <= len {
                m.prefetch(off + 4096, fp);
            }
            sink ^= m.crc32c(off, size + 16, 7);
        });
        std::hint::black_box(sink);
    }
    if let Some(e) = failed {
        return Err(e.into());
    }
    for (what, iters, ns) in results {
        out.emit(
            "floor",
            &[
                ("what", what.into()),
                ("round", a.round.into()),
                ("iters", iters.into()),
                ("ns", f(ns)),
            ],
        );
    }
    drop(m);
    Ok(())
}

/// Window samples: counts of `lsn - durable_lsn()` values.
struct Hist {
    counts: Vec<u64>,
    max: u64,
    sum: u128,
    n: u64,
}

impl Hist {
    fn new(sample: bool) -> Hist {
        Hist {
            counts: if sample {
                vec![0; HIST_BUCKETS]
            } else {
                Vec::new()
            },
            max: 0,
            sum: 0,
            n: 0,
        }
    }
    #[inline]
    fn add(&mut self, v: u64) {
        self.counts[(v as usize).min(HIST_BUCKETS - 1)] += 1;
        self.max = self.max.max(v);
        self.sum += u128::from(v);
        self.n += 1;
    }
    fn merge(&mut self, o: &Hist) {
        if self.counts.is_empty() {
            self.counts = o.counts.clone();
        } else {
            for (a, b) in self.counts.iter_mut().zip(&o.counts) {
                *a += b;
            }
        }
        self.max = self.max.max(o.max);
        self.sum += o.sum;
        self.n += o.n;
    }
    /// Smallest value v with at least p of the samples <= v (the last bucket means ">= it").
    fn pct(&self, p: f64) -> u64 {
        let want = ((p * self.n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (v, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return v as u64;
            }
        }
        self.max
    }
}

/// `total` appends of `data` by `threads` writers under `policy`; returns the timed seconds
/// and (with `sample`) the window histogram. Segments that fit the ring are timed from the
/// barrier that starts them to the barrier where the last writer is done; the ring is emptied
/// between segments, clock stopped.
fn run_appends(
    log: &KLog,
    policy: ForcePolicy,
    data: &[u8],
    threads: usize,
    total: u64,
    sample: bool,
) -> anyhow::Result<(f64, u64, Hist)> {
    let t = threads as u64;
    let per_thread = (total / t).max(1);
    let fp = record_footprint(data.len()) as u64;
    let ring = log.stats().ring_bytes;
    let seg = (ring * 9 / 10 / fp / t).clamp(1, per_thread);
    let segments = per_thread.div_ceil(seg);
    let barrier = Barrier::new(threads + 1);
    let failed = AtomicBool::new(false);
    let error: Mutex<Option<LogError>> = Mutex::new(None);
    let mut elapsed = Duration::ZERO;
    let mut hist = Hist::new(sample);
    std::thread::scope(|s| -> anyhow::Result<()> {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut h = Hist::new(sample);
                    let mut left = per_thread;
                    for _ in 0..segments {
                        barrier.wait();
                        let n = left.min(seg);
                        left -= n;
                        for _ in 0..n {
                            if failed.load(Ordering::Relaxed) {
                                break;
                            }
                            match log.append(data, policy) {
                                Ok(r) if sample => h.add(r.lsn.saturating_sub(log.durable_lsn())),
                                Ok(_) => {}
                                Err(e) => {
                                    failed.store(true, Ordering::Relaxed);
                                    error
                                        .lock()
                                        .unwrap_or_else(|p| p.into_inner())
                                        .get_or_insert(e);
                                }
                            }
                        }
                        barrier.wait();
                    }
                    h
                })
            })
            .collect();
        for _ in 0..segments {
            if let Err(e) = log.cleanup_all() {
                failed.store(true, Ordering::Relaxed);
                error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(e);
            }
            barrier.wait();
            let t0 = Instant::now();
            barrier.wait();
            elapsed += t0.elapsed();
        }
        for w in workers {
            let h = w
                .join()
                .map_err(|_| anyhow::anyhow!("a writer thread panicked"))?;
            hist.merge(&h);
        }
        Ok(())
    })?;
    if let Some(e) = error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e.into());
    }
    log.cleanup_all()?;
    Ok((elapsed.as_secs_f64(), per_thread * t, hist))
}

fn phase_tput(cfg: &Cfg, out: &Out, vuln: bool) -> anyhow::Result<()> {
    let a = &cfg.args;
    let file = TempFile::new(&a.dir, if vuln { "vuln" } else { "tput" });
    let lf = LogFile::create(&file.0, a.pool_mib << 20, REGION, None, Duration::ZERO)?;
    let log = lf.log();
    prefault(log)?;
    let (modes, sizes, threads) = if vuln {
        (&cfg.vuln_modes, &a.vuln_sizes, &a.vuln_threads)
    } else {
        (&cfg.modes, &a.tput_sizes, &a.threads)
    };
    for &size in sizes {
        let data = payload(size);
        for &policy in modes {
            for &t in threads {
                // Untimed warm-up of the threads and the ring.
                run_appends(log, policy, &data, t, WARMUP_APPENDS * t as u64, false)?;
                let (secs, ops, h) = run_appends(log, policy, &data, t, cfg.tput_ops, vuln)?;
                let mut fields = vec![
                    ("mode", policy.to_string().into()),
                    ("size", size.into()),
                    ("threads", t.into()),
                    ("round", a.round.into()),
                ];
                if vuln {
                    let bound = match policy {
                        ForcePolicy::Frequency(n) => n * t as u64,
                        ForcePolicy::Sync => 0,
                        ForcePolicy::Group(_) => 0,
                        // Not accepted by `ForcePolicy::parse`, so never measured here.
                        ForcePolicy::Caller => 0,
                    };
                    fields.extend([
                        ("samples", h.n.into()),
                        ("p50", h.pct(0.50).into()),
                        ("p90", h.pct(0.90).into()),
                        ("p99", h.pct(0.99).into()),
                        ("p999", h.pct(0.999).into()),
                        ("max", h.max.into()),
                        ("mean", f(h.sum as f64 / h.n.max(1) as f64)),
                        ("bound", bound.into()),
                        ("ops_per_s", f(ops as f64 / secs)),
                    ]);
                    out.emit("vuln", &fields);
                } else {
                    fields.extend([
                        ("ops", ops.into()),
                        ("seconds", f(secs)),
                        ("ops_per_s", f(ops as f64 / secs)),
                    ]);
                    out.emit("tput", &fields);
                }
            }
        }
    }
    lf.close()?;
    Ok(())
}

fn phase_recov(cfg: &Cfg, out: &Out) -> anyhow::Result<()> {
    let a = &cfg.args;
    for &size in &a.recov_sizes {
        let file = TempFile::new(&a.dir, &format!("recov{size}"));
        let data = payload(size);
        let lf = LogFile::create(&file.0, cfg.recov_bytes, REGION, None, Duration::ZERO)?;
        let mut filled = 0u64;
        loop {
            match lf.log().append(&data, ForcePolicy::Frequency(1024)) {
                Ok(_) => filled += 1,
                Err(LogError::Full { .. }) => break,
                Err(e) => return Err(e.into()),
            }
        }
        lf.close()?;
        for rep in 1..=cfg.recov_reps {
            if rep % 2 == 1 {
                recov_one_pass(cfg, out, &file.0, size, rep, filled)?;
            }
            let t0 = Instant::now();
            let lf = LogFile::open(&file.0, REGION, false, Duration::ZERO)?;
            let t_open = t0.elapsed();
            let mut n = 0u64;
            let mut bytes = 0u64;
            // Borrowed payloads (the iterator's buffer), as libpmemlog's walk hands out chunks.
            let mut records = lf.log().records();
            while let Some(r) = records.next_ref() {
                let r = r?;
                n += 1;
                bytes += std::hint::black_box(r.payload).len() as u64;
            }
            let t_total = t0.elapsed();
            if n != filled || lf.recovery().records != filled {
                bail!(
                    "recovery found {n} records ({} at open), {filled} were appended",
                    lf.recovery().records
                );
            }
            lf.close()?;
            out.emit(
                "recov",
                &[
                    ("size", size.into()),
                    ("round", a.round.into()),
                    ("rep", rep.into()),
                    ("records", n.into()),
                    ("bytes", bytes.into()),
                    ("open_ms", f(t_open.as_secs_f64() * 1e3)),
                    ("walk_ms", f((t_total - t_open).as_secs_f64() * 1e3)),
                ],
            );
            if rep % 2 == 0 {
                recov_one_pass(cfg, out, &file.0, size, rep, filled)?;
            }
        }
    }
    Ok(())
}

/// One timed `LogFile::open_replaying` of the full log at `path`: every record handed to the
/// callback (payload borrowed) from the walk that checks it.
fn recov_one_pass(
    cfg: &Cfg,
    out: &Out,
    path: &Path,
    size: usize,
    rep: u64,
    filled: u64,
) -> anyhow::Result<()> {
    let (mut n, mut bytes) = (0u64, 0u64);
    let opts = log::LogOptions {
        full_wait: Duration::ZERO,
        ..log::LogOptions::default()
    };
    let t0 = Instant::now();
    let lf = LogFile::open_replaying(path, REGION, &opts, &mut |r| {
        n += 1;
        bytes += std::hint::black_box(r.payload).len() as u64;
    })?;
    let t_open = t0.elapsed();
    if n != filled || lf.recovery().records != filled {
        bail!(
            "one-pass recovery found {n} records ({} at open), {filled} were appended",
            lf.recovery().records
        );
    }
    lf.close()?;
    out.emit(
        "recov1",
        &[
            ("size", size.into()),
            ("round", cfg.args.round.into()),
            ("rep", rep.into()),
            ("records", n.into()),
            ("bytes", bytes.into()),
            ("open_ms", f(t_open.as_secs_f64() * 1e3)),
            ("walk_ms", f(0.0)),
        ],
    );
    Ok(())
}

fn run(cfg: &Cfg) -> anyhow::Result<()> {
    let out = Out {
        json: cfg.args.json,
    };
    if !cfg.args.dir.is_dir() {
        bail!("--dir {} is not a directory", cfg.args.dir.display());
    }
    remove_files_on_signal()?;
    for &phase in &cfg.args.phases {
        let r = match phase {
            Phase::Lat => phase_lat(cfg, &out),
            Phase::Floor => phase_floor(cfg, &out),
            Phase::Tput => phase_tput(cfg, &out, false),
            Phase::Vuln => phase_tput(cfg, &out, true),
            Phase::Recov => phase_recov(cfg, &out),
        };
        r.with_context(|| format!("phase {phase:?}"))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let cfg = match check_args(Args::parse()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("log_bench: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("log_bench: {e:#}");
            ExitCode::from(1)
        }
    }
}
