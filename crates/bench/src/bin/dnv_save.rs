//! How long the bounded save of durability on demand takes on a real pool file, against the
//! size of the tracked dirty set and the number of writer threads, and what share of saves
//! would have fit a 1, 33 or 70 ms warning window (issue 20).
//!
//! Setup: a heap pool file (normally on /dev/shm), redo mode by default, durability on demand
//! turned on directly with `RawHeap::enable_on_demand` and a window so large (60 s) that
//! admission neither refuses a thread nor caps the dirty set: the sweep sets the dirty bytes.
//! One root object fills most of the heap; writers commit redo transactions that each store
//! `--write-bytes` (64 or 1024, line-aligned) at a random place in it.
//!
//! Per cell (W writer threads, D dirty bytes), `--reps` times: wait until the heap's tracked
//! dirty set holds at least D bytes while W writers keep committing, call
//! `RawHeap::save(SaveBudget { window: 10 s, .. })` (the save itself: stop the writers at the
//! gate, copy the logs of commits caught applying, write back every tracked dirty line, fence,
//! mark the lanes), record its time, then `resume_writers`. The save is called directly, not
//! through a `powerfail` warning source, so the wake-up of the save thread is not in the
//! figures. The window given to the save is 10 s so that every save does all its work; the
//! shares inside 1/33/70 ms are computed from the measured times.
//!
//! The alternative, "write back every line of the pool", is timed in the same state (dirty set
//! at D, writers running): stop the writers, flush the whole heap region with the medium's
//! `flush`, fence. Then a real save and a resume put the heap back in order (not timed).
//!
//! W = 0 is a baseline: one writer fills the dirty set and is parked before the save, so no
//! commit runs beside it.
//!
//! Also reported: the calibrated `SaveCost` (`RawHeap::calibrate_save`), the model's estimate
//! for each cell's median save, the admission plan (`plan_on_demand`) for 1, 33 and 70 ms
//! windows with a 20 % margin, and the write-back cost per line of lines just stored to, in
//! one run, at random places, from another thread, and with an atomic swap after each line
//! (what the save's dirty bitmap costs when it is sparse).

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use clap::Parser;
use heap::raw::{OnDemandConfig, SaveBudget, SaveCost};
use heap::{HeapFile, HeapOptions, RawHeap, TxMode};
use serde_json::json;

#[derive(Parser, Debug)]
#[command(about = "Time the bounded save of durability on demand (see the source's header)")]
struct Args {
    /// Pool file to create (must not exist; removed afterwards).
    #[arg(long, default_value = "/dev/shm/kavach-dnv-save.pool")]
    path: PathBuf,
    /// Pool size in MiB.
    #[arg(long, default_value_t = 256)]
    pool_mib: u64,
    /// Size of the object the writers store into, in MiB (0: five eighths of the pool).
    #[arg(long, default_value_t = 0)]
    object_mib: u64,
    /// Writer thread counts, comma-separated. 0 is a baseline: one writer fills the dirty set
    /// and is parked before the save, so the save runs with no writer committing.
    #[arg(long, default_value = "0,1,2,4", value_delimiter = ',')]
    threads: Vec<usize>,
    /// Dirty-set sizes, comma-separated, with K or M suffixes (bytes otherwise).
    #[arg(long, default_value = "64K,1M,4M,16M,64M", value_delimiter = ',')]
    dirty: Vec<String>,
    /// Bytes each transaction stores: 64 or 1024.
    #[arg(long, default_value_t = 64)]
    write_bytes: u64,
    /// Saves per cell.
    #[arg(long, default_value_t = 30)]
    reps: usize,
    /// Whole-pool write-backs per cell.
    #[arg(long, default_value_t = 3)]
    whole_reps: usize,
    /// Stop a cell's saves after this many seconds (the cell then has fewer than `--reps`).
    #[arg(long, default_value_t = 12.0)]
    cell_secs: f64,
    /// A small run: 64 MiB pool, threads 1,2, dirty 64K,1M,4M, 5 saves per cell.
    #[arg(long)]
    quick: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write the JSON (with every sample) to this file.
    #[arg(long)]
    json_file: Option<PathBuf>,
}

fn parse_size(s: &str) -> anyhow::Result<u64> {
    let s = s.trim();
    let (num, mul) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1u64 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1u64 << 30),
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .with_context(|| format!("dirty size `{s}`: expected a number with K, M or G"))?;
    n.checked_mul(mul)
        .with_context(|| format!("dirty size `{s}` overflows"))
}

fn human(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes % (1 << 10) == 0 {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
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
        .unwrap_or_else(|| "unknown".into())
}

/// splitmix64: a small, fast generator for the writers' offsets.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Writer threads that live for the whole run; the first `active` of them commit.
struct Writers {
    active: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    commits: Arc<AtomicU64>,
    error: Arc<Mutex<Option<String>>>,
    handles: Vec<JoinHandle<()>>,
}

impl Writers {
    fn spawn(h: &Arc<RawHeap>, n: usize, obj: u64, obj_len: u64, wb: u64) -> Writers {
        let active = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let commits = Arc::new(AtomicU64::new(0));
        let error = Arc::new(Mutex::new(None));
        let slots = obj_len / wb;
        let handles = (0..n)
            .map(|i| {
                let (h, active, stop, commits, error) = (
                    h.clone(),
                    active.clone(),
                    stop.clone(),
                    commits.clone(),
                    error.clone(),
                );
                std::thread::spawn(move || {
                    let mut rng = 0x5eed_0000 + i as u64 * 7919;
                    let mut data = vec![0u8; wb as usize];
                    while !stop.load(Ordering::Relaxed) {
                        if i >= active.load(Ordering::Relaxed) {
                            std::thread::sleep(Duration::from_micros(200));
                            continue;
                        }
                        let r = next(&mut rng);
                        let at = obj + (r % slots) * wb;
                        data[..8].copy_from_slice(&r.to_le_bytes());
                        let done = (|| -> heap::Result<()> {
                            let mut lane = h.lane();
                            h.begin(&mut lane);
                            h.write(&mut lane, at, &data)?;
                            h.commit(&mut lane)
                        })();
                        match done {
                            Ok(()) => {
                                commits.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => {
                                *error.lock().expect("error slot") =
                                    Some(format!("writer {i}: {e}"));
                                stop.store(true, Ordering::Relaxed);
                            }
                        }
                    }
                })
            })
            .collect();
        Writers {
            active,
            stop,
            commits,
            error,
            handles,
        }
    }

    fn check(&self) -> anyhow::Result<()> {
        if let Some(e) = self.error.lock().expect("error slot").clone() {
            bail!("{e}");
        }
        Ok(())
    }

    fn finish(self) -> anyhow::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles {
            if h.join().is_err() {
                bail!("a writer thread panicked");
            }
        }
        if let Some(e) = self.error.lock().expect("error slot").clone() {
            bail!("{e}");
        }
        Ok(())
    }
}

/// Wait until the tracked dirty set holds at least `lines` lines.
fn fill(h: &RawHeap, w: &Writers, lines: u64) -> anyhow::Result<()> {
    let t = Instant::now();
    while h.on_demand_stats().dirty_lines < lines {
        w.check()?;
        ensure!(
            t.elapsed() < Duration::from_secs(60),
            "the dirty set did not reach {lines} lines in 60 s (it holds {})",
            h.on_demand_stats().dirty_lines
        );
        std::thread::yield_now();
    }
    Ok(())
}

#[derive(Debug, Clone, Copy)]
enum LinePattern {
    /// One run of lines, stored to by this thread.
    Contiguous,
    /// Lines at random places of the object, stored to by this thread.
    Random,
    /// Lines at random places of the object, stored to by another thread.
    RandomOtherThread,
    /// As `Random`, with an atomic swap of a word after each line's write-back (the save
    /// swaps one word of its dirty bitmap per 64 lines; when the dirty set is sparse that is
    /// one swap per line, and a locked instruction waits for earlier write-backs).
    RandomSwapEach,
}

impl LinePattern {
    fn describe(self) -> &'static str {
        match self {
            LinePattern::Contiguous => "one run, this thread",
            LinePattern::Random => "random places, this thread",
            LinePattern::RandomOtherThread => "random places, another thread",
            LinePattern::RandomSwapEach => "random places, an atomic swap after each",
        }
    }
}

/// Store to `n` lines of the object at medium offset `at` (`len` bytes) as `pattern` says, then
/// write them back one line at a time in address order (as a save does) and fence: nanoseconds
/// per line, the median of 5 rounds.
fn dirtied_write_back(
    medium: &Arc<dyn pmem::Medium>,
    at: u64,
    len: u64,
    n: u64,
    pattern: LinePattern,
) -> anyhow::Result<f64> {
    let mut per_line = Vec::new();
    let mut rng = 0xfeed_u64;
    for round in 0..5u8 {
        let mut lines: Vec<u64> = match pattern {
            LinePattern::Contiguous => (0..n).collect(),
            _ => (0..n).map(|_| next(&mut rng) % (len / 64)).collect(),
        };
        lines.sort_unstable();
        lines.dedup();
        let store = move |m: &Arc<dyn pmem::Medium>, lines: &[u64]| {
            for &l in lines {
                m.write((at + l * 64) as usize, &[round; 8]);
            }
        };
        match pattern {
            LinePattern::RandomOtherThread => {
                let (m, ls) = (medium.clone(), lines.clone());
                std::thread::spawn(move || store(&m, &ls))
                    .join()
                    .map_err(|_| anyhow::anyhow!("the storing thread panicked"))?;
            }
            _ => store(medium, &lines),
        }
        let word = AtomicU64::new(0);
        let swap = matches!(pattern, LinePattern::RandomSwapEach);
        let t = Instant::now();
        for &l in &lines {
            medium.flush((at + l * 64) as usize, 64)?;
            if swap {
                std::hint::black_box(word.swap(l, Ordering::AcqRel));
            }
        }
        medium.fence()?;
        per_line.push(t.elapsed().as_nanos() as f64 / lines.len().max(1) as f64);
    }
    per_line.sort_by(f64::total_cmp);
    Ok(per_line[per_line.len() / 2])
}

/// Park every writer and wait until none is inside a transaction (the commit counter stands
/// still for 2 ms, longer than a parked writer's 200 us nap).
fn park(w: &Writers) -> anyhow::Result<()> {
    w.active.store(0, Ordering::Relaxed);
    let mut last = w.commits.load(Ordering::Relaxed);
    loop {
        std::thread::sleep(Duration::from_millis(2));
        w.check()?;
        let now = w.commits.load(Ordering::Relaxed);
        if now == last {
            return Ok(());
        }
        last = now;
    }
}

#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Sample {
    save_ns: u64,
    lines: u64,
    logs: usize,
    log_bytes: u64,
    completed: bool,
    resume_ns: u64,
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    // Nearest rank.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

fn median_u64(v: &[u64]) -> u64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    pct(&s, 50.0)
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn main() -> anyhow::Result<()> {
    let mut a = Args::parse();
    if a.quick {
        a.pool_mib = 64;
        a.threads = vec![0, 1, 2];
        a.dirty = vec!["64K".into(), "1M".into(), "4M".into()];
        a.reps = 5;
        a.whole_reps = 1;
    }
    ensure!(
        a.write_bytes == 64 || a.write_bytes == 1024,
        "--write-bytes: expected 64 or 1024, found {}",
        a.write_bytes
    );
    ensure!(a.reps > 0, "--reps: expected at least 1, found 0");
    ensure!(
        a.threads.iter().all(|&t| t <= 64),
        "--threads: expected counts from 0 to 64, found {:?}",
        a.threads
    );
    ensure!(
        a.pool_mib >= 32,
        "--pool-mib: expected at least 32, found {}",
        a.pool_mib
    );
    let dirty: Vec<u64> = a
        .dirty
        .iter()
        .map(|s| parse_size(s))
        .collect::<anyhow::Result<_>>()?;
    let pool_bytes = a.pool_mib << 20;
    let obj_len = if a.object_mib == 0 {
        pool_bytes / 8 * 5
    } else {
        a.object_mib << 20
    };
    for &d in &dirty {
        ensure!(
            d >= 64 && d <= obj_len / 2,
            "dirty size {d} B: expected 64 B to half the object ({} B)",
            obj_len / 2
        );
    }

    let load_before = loadavg();
    let started = Instant::now();
    ensure!(
        !a.path.exists(),
        "{} exists: remove it or give another --path",
        a.path.display()
    );
    let file = HeapFile::create(&a.path, pool_bytes, &HeapOptions::default())
        .with_context(|| format!("creating {}", a.path.display()))?;
    let h = file.raw().clone();
    let region_off = h.base() as usize;
    let region_len = file.region().length as usize;
    let (obj, _) = h
        .root(obj_len)
        .with_context(|| format!("a root object of {obj_len} bytes"))?;
    let medium = h.medium().clone();
    let flush_insn = pmem::cpu::flush_instruction().name();
    let domain = format!("{:?}", medium.domain());
    let backing = format!("{:?}", medium.backing());

    let cost: SaveCost = h.calibrate_save(5)?;
    // The calibration writes back lines it did not change. A save writes back lines commits
    // just stored to, at random places, from other threads: time those cases too.
    let mut dirty_line_ns = Vec::new();
    for (n, pattern) in [
        (4096u64, LinePattern::Contiguous),
        (65536, LinePattern::Contiguous),
        (4096, LinePattern::Random),
        (65536, LinePattern::Random),
        (4096, LinePattern::RandomOtherThread),
        (65536, LinePattern::RandomOtherThread),
        (4096, LinePattern::RandomSwapEach),
        (65536, LinePattern::RandomSwapEach),
    ] {
        let n = n.min(obj_len / 64 / 4);
        let ns = dirtied_write_back(&medium, region_off as u64 + obj, obj_len, n, pattern)?;
        dirty_line_ns.push((n, pattern, ns));
    }
    let plans: Vec<_> = [1u64, 33, 70]
        .iter()
        .map(|&w| {
            let cfg = OnDemandConfig {
                window: Duration::from_millis(w),
                margin: 0.2,
                cost,
            };
            (w, h.plan_on_demand(&cfg))
        })
        .collect();

    h.set_default_mode(TxMode::Redo);
    let big = h.enable_on_demand(OnDemandConfig {
        window: Duration::from_secs(60),
        margin: 0.2,
        cost,
    });
    let max_threads = a.threads.iter().copied().max().unwrap_or(1).max(1);
    ensure!(
        big.threads >= max_threads,
        "admission with a 60 s window lets {} threads in; {max_threads} are needed",
        big.threads
    );
    let writers = Writers::spawn(&h, max_threads, obj, obj_len, a.write_bytes);
    let budget = SaveBudget {
        window: Duration::from_secs(10),
        modeled: None,
    };

    let mut cells = Vec::new();
    for &t in &a.threads {
        for &d in &dirty {
            let lines = d.div_ceil(64);
            let active = t.max(1);
            writers.active.store(active, Ordering::Relaxed);
            let c0 = writers.commits.load(Ordering::Relaxed);
            let cell_t = Instant::now();
            let mut samples = Vec::new();
            let mut fill_ns = 0u64;
            for _ in 0..a.reps {
                let f = Instant::now();
                fill(&h, &writers, lines)?;
                fill_ns += f.elapsed().as_nanos() as u64;
                if t == 0 {
                    park(&writers)?;
                }
                let rep = h.save(budget)?;
                let r = Instant::now();
                h.resume_writers()?;
                writers.active.store(active, Ordering::Relaxed);
                samples.push(Sample {
                    save_ns: rep.elapsed_ns,
                    lines: rep.lines_written_back,
                    logs: rep.logs_saved,
                    log_bytes: rep.log_bytes,
                    completed: rep.completed,
                    resume_ns: r.elapsed().as_nanos() as u64,
                });
                if cell_t.elapsed().as_secs_f64() > a.cell_secs {
                    break;
                }
            }
            let commits = writers.commits.load(Ordering::Relaxed) - c0;
            let mut whole = Vec::new();
            for _ in 0..a.whole_reps {
                fill(&h, &writers, lines)?;
                if t == 0 {
                    park(&writers)?;
                }
                let t0 = Instant::now();
                h.stop_writers();
                medium.flush(region_off, region_len)?;
                medium.fence()?;
                whole.push(t0.elapsed().as_nanos() as u64);
                h.save(budget)?;
                h.resume_writers()?;
                writers.active.store(active, Ordering::Relaxed);
            }
            let mut times: Vec<u64> = samples.iter().map(|s| s.save_ns).collect();
            times.sort_unstable();
            let n = times.len();
            let share = |lim_ms: u64| {
                times.iter().filter(|&&x| x <= lim_ms * 1_000_000).count() as f64 / n as f64
            };
            let med_lines = median_u64(&samples.iter().map(|s| s.lines).collect::<Vec<_>>());
            let med_log = median_u64(&samples.iter().map(|s| s.log_bytes).collect::<Vec<_>>());
            let logs_caught: usize = samples.iter().map(|s| s.logs).sum();
            cells.push(json!({
                "threads": t,
                "dirty_bytes": d,
                "saves": n,
                "median_ms": ms(pct(&times, 50.0)),
                "p99_ms": ms(pct(&times, 99.0)),
                "max_ms": ms(*times.last().unwrap_or(&0)),
                "within_1ms": share(1),
                "within_33ms": share(33),
                "within_70ms": share(70),
                "all_completed": samples.iter().all(|s| s.completed),
                "median_lines_written_back": med_lines,
                "median_log_bytes": med_log,
                "logs_caught_total": logs_caught,
                "saves_with_a_log": samples.iter().filter(|s| s.logs > 0).count(),
                "model_ms": cost.estimate_ns(med_lines, med_log) / 1e6,
                "median_resume_ms": ms(median_u64(&samples.iter().map(|s| s.resume_ns).collect::<Vec<_>>())),
                "mean_fill_ms": fill_ns as f64 / n as f64 / 1e6,
                "commits_per_s": commits as f64 / cell_t.elapsed().as_secs_f64(),
                "whole_pool_ms": whole.iter().map(|&x| ms(x)).collect::<Vec<_>>(),
                "samples": samples,
            }));
        }
    }
    writers.active.store(0, Ordering::Relaxed);
    writers.finish()?;
    let stats = h.on_demand_stats();
    h.disable_on_demand()?;
    drop(h);
    file.close()?;
    std::fs::remove_file(&a.path).with_context(|| format!("removing {}", a.path.display()))?;
    let load_after = loadavg();

    let out = json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "cpu": cpu_model(),
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "path": a.path,
        "pool_bytes": pool_bytes,
        "heap_region_bytes": region_len,
        "object_bytes": obj_len,
        "write_bytes": a.write_bytes,
        "flush_instruction": flush_insn,
        "domain": domain,
        "backing": backing,
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "seconds": started.elapsed().as_secs_f64(),
        "save_cost": cost,
        "dirtied_line_write_back_ns": dirty_line_ns.iter().map(|(n, p, ns)| json!({"lines": n, "pattern": format!("{p:?}"), "ns_per_line": ns})).collect::<Vec<_>>(),
        "plans": plans.iter().map(|(w, p)| json!({"window_ms": w, "margin": 0.2, "plan": p})).collect::<Vec<_>>(),
        "refused_transactions": stats.refused_transactions,
        "cells": cells,
    });
    if let Some(f) = &a.json_file {
        std::fs::write(f, serde_json::to_string_pretty(&out)?)
            .with_context(|| format!("writing {}", f.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "pool {} on {} ({backing}, domain {domain}, write-back {flush_insn} + sfence); object {}; \
         {} B per transaction; cpu {}",
        human(pool_bytes),
        a.path.display(),
        human(obj_len),
        a.write_bytes,
        out["cpu"].as_str().unwrap_or("?")
    );
    println!(
        "calibrated SaveCost: fixed {:.1} us, {:.2} ns/line, {:.3} ns/log byte",
        cost.fixed_ns / 1e3,
        cost.line_ns,
        cost.byte_ns
    );
    for (n, p, ns) in &dirty_line_ns {
        println!(
            "write-back of {n} lines just stored to ({}): {ns:.2} ns/line (median of 5)",
            p.describe()
        );
    }
    for (w, p) in &plans {
        println!(
            "plan for {w} ms (20% margin): {} threads, {} dirty lines ({}), estimate {:.2} ms",
            p.threads,
            p.dirty_budget_lines,
            human(p.dirty_budget_lines * 64),
            p.estimated_save_ns / 1e6
        );
    }
    println!();
    println!(
        "| W | dirty | saves | median ms | p99 ms | max ms | <=1 ms | <=33 ms | <=70 ms | lines (median) | saves with a log caught | model ms | whole pool ms | commits/s |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for c in &cells {
        let whole: Vec<String> = c["whole_pool_ms"]
            .as_array()
            .map(|v| {
                v.iter()
                    .map(|x| format!("{:.1}", x.as_f64().unwrap_or(0.0)))
                    .collect()
            })
            .unwrap_or_default();
        println!(
            "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.0}% | {:.0}% | {:.0}% | {} | {} | {:.3} | {} | {:.0} |",
            c["threads"],
            human(c["dirty_bytes"].as_u64().unwrap_or(0)),
            c["saves"],
            c["median_ms"].as_f64().unwrap_or(0.0),
            c["p99_ms"].as_f64().unwrap_or(0.0),
            c["max_ms"].as_f64().unwrap_or(0.0),
            100.0 * c["within_1ms"].as_f64().unwrap_or(0.0),
            100.0 * c["within_33ms"].as_f64().unwrap_or(0.0),
            100.0 * c["within_70ms"].as_f64().unwrap_or(0.0),
            c["median_lines_written_back"],
            c["saves_with_a_log"],
            c["model_ms"].as_f64().unwrap_or(0.0),
            whole.join(" / "),
            c["commits_per_s"].as_f64().unwrap_or(0.0),
        );
    }
    println!();
    println!(
        "load average before {load_before}, after {load_after}; {:.0} s; refused transactions {}",
        out["seconds"].as_f64().unwrap_or(0.0),
        stats.refused_transactions
    );
    Ok(())
}
