//! DIPPER's ablation (issue 27; dissertation Fig. 4.16, Fig. 4.14 and Table 4.6), in one run:
//! the same store with DIPPER's mirror-and-stream checkpoint and logical logging, with a
//! copy-on-write checkpoint, with a quiescing checkpoint and with physical (redo) logging
//! (`dipper::ablation`), under a YCSB-like zipfian workload driven in-process.
//!
//! Each variant, in turn (rounds alternate the order: A B C D, then D C B A): a new pool file,
//! a load phase (every key written once), then a timed run phase in which `--threads` threads
//! read or update keys drawn from a scrambled zipfian distribution (theta 0.99, YCSB's). The
//! log is sized so that checkpoints come every second or two. Measured per variant and round:
//! operations per `--bucket-ms` bucket (with whether a checkpoint ran during it), latency
//! histograms of reads and updates (overall, and updates that started while a checkpoint ran),
//! checkpoints taken.
//!
//! Output (`--out DIR`): `summary.csv`, `timeline.csv`, `summary.md` (the table printed, with
//! the dissertation's figures beside) and `timeline.png` (throughput over time, first round).
//!
//! ```text
//! cargo run --release -p kavach-dipper --example ablation -- --help
//! ```

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dipper::ablation::{CheckpointStyle, Physical, execute_physical};
use dipper::arena::Arena;
use dipper::{Dipper, DipperError, ForcePolicy, Layout, Machine, Options, Result};
use pmem::rng::SplitMix64;
use pmem::{CreateOptions, Domain, Mapping, Pool};

const HELP: &str = "\
DIPPER's ablation benchmark: mirror-and-stream + logical logging (DIPPER) against a
copy-on-write checkpoint, a quiescing checkpoint and physical (redo) logging, one run.

Usage: ablation [OPTIONS]

Options (defaults in brackets):
  --records N        keys loaded before the run [100000]
  --value-bytes N    bytes of each value [1000]
  --threads N        client threads [8]
  --seconds N        run phase per variant and round [15]
  --read-percent N   share of reads, the rest updates (YCSB A: 50) [50]
  --shards N         shards of the store (also the copy-on-write unit) [256]
  --log-mib N        MiB of each of the two operation logs [64]
  --bucket-ms N      throughput bucket [100]
  --rounds N         rounds (alternating order) [2]
  --variants LIST    comma list of dipper,cow,quiesce,physical [all four]
  --dir DIR          where pool files go (one at a time) [/dev/shm/dipper-ablation]
  --out DIR          where results go [bench/dipper-ablation/results]
  -h, --help         this text

Exit status: 0 done, 2 could not run (bad option, pool or store error).";

#[derive(Debug, Clone)]
struct Args {
    records: u64,
    value_bytes: usize,
    threads: usize,
    seconds: u64,
    read_percent: u64,
    shards: usize,
    log_mib: u64,
    bucket_ms: u64,
    rounds: usize,
    variants: Vec<Variant>,
    dir: PathBuf,
    out: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Dipper,
    Cow,
    Quiesce,
    Physical,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Dipper => "dipper",
            Variant::Cow => "cow",
            Variant::Quiesce => "quiesce",
            Variant::Physical => "physical",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Variant::Dipper => "DIPPER: mirror-and-stream checkpoint, logical log",
            Variant::Cow => "copy-on-write checkpoint, logical log",
            Variant::Quiesce => "quiescing checkpoint, logical log",
            Variant::Physical => "DIPPER checkpoint, physical (redo) log",
        }
    }

    fn parse(s: &str) -> Option<Variant> {
        [
            Variant::Dipper,
            Variant::Cow,
            Variant::Quiesce,
            Variant::Physical,
        ]
        .into_iter()
        .find(|v| v.name() == s)
    }
}

fn parse_args() -> std::result::Result<Option<Args>, String> {
    let mut a = Args {
        records: 100_000,
        value_bytes: 1000,
        threads: 8,
        seconds: 15,
        read_percent: 50,
        shards: 256,
        log_mib: 64,
        bucket_ms: 100,
        rounds: 2,
        variants: vec![
            Variant::Dipper,
            Variant::Cow,
            Variant::Quiesce,
            Variant::Physical,
        ],
        dir: PathBuf::from("/dev/shm/dipper-ablation"),
        out: PathBuf::from("bench/dipper-ablation/results"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            return Ok(None);
        }
        let value = it
            .next()
            .ok_or_else(|| format!("option {flag} needs a value"))?;
        let num = |what: &str| -> std::result::Result<u64, String> {
            value
                .parse::<u64>()
                .map_err(|_| format!("{what}: expected a whole number, found `{value}`"))
        };
        match flag.as_str() {
            "--records" => a.records = num("--records")?,
            "--value-bytes" => a.value_bytes = num("--value-bytes")? as usize,
            "--threads" => a.threads = num("--threads")? as usize,
            "--seconds" => a.seconds = num("--seconds")?,
            "--read-percent" => a.read_percent = num("--read-percent")?,
            "--shards" => a.shards = num("--shards")? as usize,
            "--log-mib" => a.log_mib = num("--log-mib")?,
            "--bucket-ms" => a.bucket_ms = num("--bucket-ms")?,
            "--rounds" => a.rounds = num("--rounds")? as usize,
            "--variants" => {
                a.variants = value
                    .split(',')
                    .map(|s| {
                        Variant::parse(s.trim()).ok_or_else(|| {
                            format!(
                                "--variants: expected dipper, cow, quiesce or physical, found `{s}`"
                            )
                        })
                    })
                    .collect::<std::result::Result<_, _>>()?
            }
            "--dir" => a.dir = PathBuf::from(value),
            "--out" => a.out = PathBuf::from(value),
            other => return Err(format!("unknown option {other} (see --help)")),
        }
    }
    let checks = [
        (a.records >= 1, "--records must be at least 1"),
        (
            (1..=65_536).contains(&a.value_bytes),
            "--value-bytes must be 1..=65536",
        ),
        ((1..=256).contains(&a.threads), "--threads must be 1..=256"),
        (a.seconds >= 1, "--seconds must be at least 1"),
        (a.read_percent <= 100, "--read-percent must be 0..=100"),
        ((1..=1024).contains(&a.shards), "--shards must be 1..=1024"),
        (a.log_mib >= 1, "--log-mib must be at least 1"),
        (a.bucket_ms >= 1, "--bucket-ms must be at least 1"),
        (a.rounds >= 1, "--rounds must be at least 1"),
        (!a.variants.is_empty(), "--variants names none"),
    ];
    for (ok, why) in checks {
        if !ok {
            return Err(why.into());
        }
    }
    Ok(Some(a))
}

/// A hash table per shard: user word 0 is the bucket array (16 bytes a bucket: key + 1, value
/// block), user word 1 the bucket count; a value block is `[u32 length][bytes]`. The one
/// operation, `[1][key u64][value]`, replaces a key's value (a new block, the old one freed).
#[derive(Debug, Clone)]
struct Kv {
    buckets: u64,
}

const PUT: u8 = 1;

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

fn shard_of(key: u64, shards: usize) -> u16 {
    (mix(key) % shards as u64) as u16
}

/// The bucket holding `key` in `a`, or the empty one where it would go.
fn probe(a: &Arena, key: u64) -> Option<(usize, bool)> {
    let table = a.user(0) as usize;
    let n = a.user(1);
    let mut i = (mix(key) >> 20) & (n - 1);
    for _ in 0..n {
        let at = table + i as usize * 16;
        match a.get_u64(at) {
            0 => return Some((at, false)),
            k if k == key + 1 => return Some((at, true)),
            _ => i = (i + 1) & (n - 1),
        }
    }
    None
}

impl Machine for Kv {
    type Output = ();

    fn init(&self, _shard: usize, arena: &mut Arena) -> Result<()> {
        let bytes = self.buckets as usize * 16;
        let t = arena.alloc(bytes)?;
        arena.zero(t as usize, bytes);
        arena.set_user(0, t);
        arena.set_user(1, self.buckets);
        Ok(())
    }

    fn apply(&self, shard: usize, a: &mut Arena, op: &[u8], _out: &mut ()) -> Result<()> {
        if op.len() < 9 || op[0] != PUT {
            return Err(DipperError::Corrupt {
                structure: "benchmark op",
                offset: 0,
                field: "code",
                expected: "PUT with a key".into(),
                found: format!("{} bytes, code {:?}", op.len(), op.first()),
            });
        }
        let key = u64::from_le_bytes(op[1..9].try_into().expect("8 bytes"));
        let value = &op[9..];
        let Some((at, found)) = probe(a, key) else {
            return Err(DipperError::OutOfSpace(format!(
                "shard {shard}: the benchmark's table of {} buckets is full",
                a.user(1)
            )));
        };
        if found {
            let old = a.get_u64(at + 8);
            let len = a.get_u32(old as usize) as usize;
            a.free(old, len + 4);
        } else {
            a.put_u64(at, key + 1);
        }
        let blk = a.alloc(value.len() + 4)?;
        a.put_u32(blk as usize, value.len() as u32);
        a.write(blk as usize + 4, value);
        a.put_u64(at + 8, blk);
        Ok(())
    }
}

/// YCSB's zipfian generator (Gray et al.), scrambled over the key space.
#[derive(Debug)]
struct Zipf {
    n: u64,
    theta: f64,
    zetan: f64,
    alpha: f64,
    eta: f64,
}

impl Zipf {
    fn new(n: u64, theta: f64) -> Zipf {
        let zetan: f64 = (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum();
        let zeta2 = 1.0 + 0.5f64.powf(theta);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Zipf {
            n,
            theta,
            zetan,
            alpha: 1.0 / (1.0 - theta),
            eta,
        }
    }

    fn next(&self, rng: &mut SplitMix64) -> u64 {
        let u = rng.unit();
        let uz = u * self.zetan;
        let rank = if uz < 1.0 {
            0
        } else if uz < 1.0 + 0.5f64.powf(self.theta) {
            1
        } else {
            ((self.n as f64) * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
        };
        mix(rank.min(self.n - 1) ^ 0x9e37_79b9) % self.n
    }
}

/// Latency histogram in nanoseconds: 32 sub-buckets per power of two (about 3%).
#[derive(Debug, Clone)]
struct Hist {
    counts: Vec<u64>,
    total: u64,
    sum: u128,
}

const SUB: u64 = 32;

impl Hist {
    fn new() -> Hist {
        Hist {
            counts: vec![0; (SUB * 2 + 45 * SUB) as usize],
            total: 0,
            sum: 0,
        }
    }

    fn index(v: u64) -> usize {
        if v < 2 * SUB {
            return v as usize;
        }
        let e = 63 - v.leading_zeros() as u64; // >= 6
        let m = v >> (e - 5); // 32..=63
        ((2 * SUB) + (e - 6) * SUB + (m - SUB)) as usize
    }

    fn value(i: usize) -> u64 {
        let i = i as u64;
        if i < 2 * SUB {
            return i;
        }
        let e = (i - 2 * SUB) / SUB + 6;
        let m = (i - 2 * SUB) % SUB + SUB;
        // The middle of the bucket.
        (m << (e - 5)) + (1 << (e - 5)) / 2
    }

    fn record(&mut self, ns: u64) {
        let i = Hist::index(ns).min(self.counts.len() - 1);
        self.counts[i] += 1;
        self.total += 1;
        self.sum += ns as u128;
    }

    fn merge(&mut self, o: &Hist) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.total += o.total;
        self.sum += o.sum;
    }

    /// The `q` quantile in microseconds (0 when empty).
    fn quantile_us(&self, q: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Hist::value(i) as f64 / 1000.0;
            }
        }
        0.0
    }

    fn mean_us(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum as f64 / self.total as f64 / 1000.0
        }
    }
}

#[derive(Debug, Clone)]
struct Worker {
    read: Hist,
    update: Hist,
    /// Updates that started while a checkpoint ran, and the others.
    update_ckpt: Hist,
    update_quiet: Hist,
}

#[derive(Debug, Clone)]
struct RunResult {
    variant: Variant,
    round: usize,
    load_s: f64,
    ops: u64,
    seconds: f64,
    read: Hist,
    update: Hist,
    update_ckpt: Hist,
    update_quiet: Hist,
    /// (bucket start in s, operations, a checkpoint ran in it, fullest the active log was
    /// seen in it (percent), samples the monitor thread took in it)
    timeline: Vec<(f64, u64, bool, u64, u64)>,
    checkpoints: u64,
    last_checkpoint_ms: u64,
    writer_copies: u64,
    log_bytes_per_update: f64,
}

type Store = Dipper<Arc<Mapping>, Physical<Kv>>;

fn value_for(key: u64, version: u64, len: usize) -> Vec<u8> {
    let mut rng = SplitMix64::new(mix(key) ^ version);
    let mut v = vec![0u8; len];
    for chunk in v.chunks_mut(8) {
        let w = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
    v
}

fn put(store: &Store, v: Variant, shards: usize, key: u64, value: &[u8]) -> Result<()> {
    let mut op = Vec::with_capacity(9 + value.len());
    op.push(PUT);
    op.extend_from_slice(&key.to_le_bytes());
    op.extend_from_slice(value);
    let s = [shard_of(key, shards)];
    match v {
        Variant::Physical => execute_physical(store, Some(&s), &op),
        _ => store.execute(Some(&s), &op, true),
    }
}

fn get(store: &Store, shards: usize, key: u64, buf: &mut Vec<u8>) -> Result<bool> {
    store.read(shard_of(key, shards) as usize, |a| match probe(a, key) {
        Some((at, true)) => {
            let blk = a.get_u64(at + 8) as usize;
            let len = a.get_u32(blk) as usize;
            buf.clear();
            buf.extend_from_slice(a.bytes(blk + 4, len));
            true
        }
        _ => false,
    })
}

fn run_variant(a: &Args, v: Variant, round: usize) -> std::result::Result<RunResult, String> {
    std::fs::create_dir_all(&a.dir).map_err(|e| format!("{}: {e}", a.dir.display()))?;
    let path = a.dir.join(format!("pool-{}", v.name()));
    let _ = std::fs::remove_file(&path);
    let class = (a.value_bytes + 4).next_power_of_two() as u64;
    let per_shard = a.records.div_ceil(a.shards as u64);
    let buckets = (per_shard * 2 + 16).next_power_of_two();
    // State: values (rounded up to a power of two, an upper bound of their class) and tables,
    // with room for the arenas' growth by half.
    let state = a.records * class + a.shards as u64 * (buckets * 16 + 128 * 1024);
    let slot_bytes = (state * 2).next_multiple_of(1 << 20);
    let log_bytes = a.log_mib << 20;
    let size = 2 * log_bytes + 2 * slot_bytes + (64 << 20);
    let pool = Pool::create(
        &path,
        &CreateOptions {
            size,
            domain: Some(Domain::Adr),
        },
    )
    .map_err(|e| format!("create pool {}: {e}", path.display()))?
    .map_medium(Arc::new);
    let layout = Layout {
        log_bytes,
        slot_bytes,
        shards: a.shards,
        machine: 0,
    };
    let opts = Options {
        policy: ForcePolicy::Sync,
        checkpoint_on_close: false,
        ..Options::default()
    };
    let machine = Physical::new(Kv { buckets }, a.shards);
    let (store, _) =
        Dipper::create(pool, &layout, machine, opts).map_err(|e| format!("create store: {e}"))?;
    let style = match v {
        Variant::Dipper | Variant::Physical => CheckpointStyle::Dipper,
        Variant::Cow => CheckpointStyle::CopyOnWrite,
        Variant::Quiesce => CheckpointStyle::Quiesce,
    };
    store
        .set_checkpoint_style(style)
        .map_err(|e| format!("{e}"))?;
    let store = Arc::new(store);
    let shards = a.shards;

    // Load.
    let t = Instant::now();
    std::thread::scope(|sc| -> std::result::Result<(), String> {
        let hs: Vec<_> = (0..a.threads)
            .map(|w| {
                let store = Arc::clone(&store);
                sc.spawn(move || -> Result<()> {
                    let mut k = w as u64;
                    while k < a.records {
                        put(&store, v, shards, k, &value_for(k, 0, a.value_bytes))?;
                        k += a.threads as u64;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in hs {
            h.join()
                .map_err(|_| "a load thread panicked".to_string())?
                .map_err(|e| format!("load: {e}"))?;
        }
        Ok(())
    })?;
    let load_s = t.elapsed().as_secs_f64();
    // Start the run with an empty log: one checkpoint now.
    store.checkpoint().map_err(|e| format!("checkpoint: {e}"))?;
    let ck0 = store.stats().checkpoints;
    let log0 = store.machine().logged().1;
    let ops0 = store.stats().operations;

    // Run.
    let zipf = Zipf::new(a.records, 0.99);
    let buckets_n = (a.seconds * 1000 / a.bucket_ms + 2) as usize;
    let counts: Vec<AtomicU64> = (0..buckets_n).map(|_| AtomicU64::new(0)).collect();
    let ckpt_in: Vec<AtomicBool> = (0..buckets_n).map(|_| AtomicBool::new(false)).collect();
    let fill: Vec<AtomicU64> = (0..buckets_n).map(|_| AtomicU64::new(0)).collect();
    let samples: Vec<AtomicU64> = (0..buckets_n).map(|_| AtomicU64::new(0)).collect();
    let in_ckpt = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let end = start + Duration::from_secs(a.seconds);
    let bucket_of = |t: Instant| {
        ((t.duration_since(start).as_millis() as u64 / a.bucket_ms) as usize).min(buckets_n - 1)
    };
    let workers: Vec<Worker> = std::thread::scope(|sc| -> std::result::Result<_, String> {
        let monitor = sc.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let st = store.stats();
                let running = st.checkpoint_running;
                in_ckpt.store(running, Ordering::Relaxed);
                let b = bucket_of(Instant::now());
                if running {
                    ckpt_in[b].store(true, Ordering::Relaxed);
                }
                let pct = st.log_used_bytes * 100 / st.log_ring_bytes.max(1);
                fill[b].fetch_max(pct, Ordering::Relaxed);
                samples[b].fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        let hs: Vec<_> = (0..a.threads)
            .map(|w| {
                let store = Arc::clone(&store);
                let (zipf, counts, in_ckpt) = (&zipf, &counts, &in_ckpt);
                sc.spawn(move || -> Result<Worker> {
                    let mut rng = SplitMix64::new(0xab1a_7105 ^ (w as u64) << 32 ^ round as u64);
                    let mut me = Worker {
                        read: Hist::new(),
                        update: Hist::new(),
                        update_ckpt: Hist::new(),
                        update_quiet: Hist::new(),
                    };
                    let mut buf = Vec::new();
                    let mut version = 1u64 + ((w as u64) << 40);
                    loop {
                        let t0 = Instant::now();
                        if t0 >= end {
                            break;
                        }
                        let key = zipf.next(&mut rng);
                        if rng.below(100) < a.read_percent {
                            get(&store, shards, key, &mut buf)?;
                            let ns = t0.elapsed().as_nanos() as u64;
                            me.read.record(ns);
                        } else {
                            let during = in_ckpt.load(Ordering::Relaxed);
                            version += 1;
                            let value = value_for(key, version, a.value_bytes);
                            let t1 = Instant::now();
                            put(&store, v, shards, key, &value)?;
                            let ns = t1.elapsed().as_nanos() as u64;
                            me.update.record(ns);
                            if during {
                                me.update_ckpt.record(ns);
                            } else {
                                me.update_quiet.record(ns);
                            }
                        }
                        counts[bucket_of(Instant::now())].fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(me)
                })
            })
            .collect();
        let mut out = Vec::new();
        let mut err = None;
        for h in hs {
            match h.join() {
                Ok(Ok(w)) => out.push(w),
                Ok(Err(e)) => err = Some(format!("run: {e}")),
                Err(_) => err = Some("a client thread panicked".into()),
            }
        }
        stop.store(true, Ordering::Relaxed);
        let _ = monitor.join();
        err.map_or(Ok(out), Err)
    })?;
    let seconds = start.elapsed().as_secs_f64().min(a.seconds as f64);
    let st = store.stats();
    let ab = store.ablation_stats();
    let updates_logged = st.operations - ops0;
    let log_bytes_per_update = if v == Variant::Physical && updates_logged > 0 {
        (store.machine().logged().1 - log0) as f64 / updates_logged as f64
    } else {
        // Logical: the record is the operation (1 + 8 + value) plus the shard list (4).
        (1 + 8 + a.value_bytes + 4) as f64
    };
    let mut r = RunResult {
        variant: v,
        round,
        load_s,
        ops: 0,
        seconds,
        read: Hist::new(),
        update: Hist::new(),
        update_ckpt: Hist::new(),
        update_quiet: Hist::new(),
        timeline: Vec::new(),
        checkpoints: st.checkpoints - ck0,
        last_checkpoint_ms: st.last_checkpoint.total_ms,
        writer_copies: ab.writer_copies,
        log_bytes_per_update,
    };
    for w in &workers {
        r.read.merge(&w.read);
        r.update.merge(&w.update);
        r.update_ckpt.merge(&w.update_ckpt);
        r.update_quiet.merge(&w.update_quiet);
    }
    r.ops = r.read.total + r.update.total;
    let full = (a.seconds * 1000 / a.bucket_ms) as usize;
    r.timeline = (0..full)
        .map(|i| {
            (
                (i as u64 * a.bucket_ms) as f64 / 1000.0,
                counts[i].load(Ordering::Relaxed),
                ckpt_in[i].load(Ordering::Relaxed),
                fill[i].load(Ordering::Relaxed),
                samples[i].load(Ordering::Relaxed),
            )
        })
        .collect();
    drop(store);
    let _ = std::fs::remove_file(&path);
    Ok(r)
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let h = v.len() / 2;
    if v.len() % 2 == 0 {
        (v[h - 1] + v[h]) / 2.0
    } else {
        v[h]
    }
}

/// Buckets in which the active log was seen 95% full or more (writers about to wait for a
/// checkpoint to swap the logs).
fn full_buckets(r: &RunResult) -> f64 {
    r.timeline.iter().filter(|b| b.3 >= 95).count() as f64
}

/// Buckets not starved in which no operation completed.
fn empty_buckets(r: &RunResult) -> f64 {
    r.timeline
        .iter()
        .filter(|b| b.1 == 0 && !starved(b))
        .count() as f64
}

/// Buckets in which the process was starved of CPU.
fn starved_buckets(r: &RunResult) -> f64 {
    r.timeline.iter().filter(|b| starved(b)).count() as f64
}

/// A bucket in which the monitor thread (a 2 ms sleep between samples) took fewer than 5
/// samples: the process was starved of CPU by the machine, whatever the engine did.
fn starved(b: &(f64, u64, bool, u64, u64)) -> bool {
    b.4 < 5
}

/// Worst bucket over the median bucket (operations per bucket), among buckets not starved.
fn worst_over_median(r: &RunResult) -> f64 {
    let v: Vec<f64> = r
        .timeline
        .iter()
        .filter(|b| !starved(b))
        .map(|b| b.1 as f64)
        .collect();
    let m = median(v.clone());
    let worst = v.iter().copied().fold(f64::INFINITY, f64::min);
    if m > 0.0 { worst / m } else { 0.0 }
}

fn write_outputs(a: &Args, results: &[RunResult], header: &str) -> std::result::Result<(), String> {
    std::fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    let w = |name: &str, text: &str| {
        let p = a.out.join(name);
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))
    };
    let mut csv = String::from(
        "variant,round,ops_per_s,load_s,checkpoints,last_checkpoint_ms,writer_copies,\
         log_bytes_per_update,read_p50_us,read_p99_us,read_p9999_us,update_mean_us,\
         update_p50_us,update_p99_us,update_p999_us,update_p9999_us,update_ckpt_p999_us,\
         update_ckpt_p9999_us,update_quiet_p999_us,update_quiet_p9999_us,\
         worst_bucket_over_median\n",
    );
    let mut tl =
        String::from("variant,round,t_s,ops,ops_per_s,checkpoint,log_fill_pct,monitor_samples\n");
    for r in results {
        let _ = writeln!(
            csv,
            "{},{},{:.0},{:.2},{},{},{},{:.0},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.3}",
            r.variant.name(),
            r.round,
            r.ops as f64 / r.seconds,
            r.load_s,
            r.checkpoints,
            r.last_checkpoint_ms,
            r.writer_copies,
            r.log_bytes_per_update,
            r.read.quantile_us(0.5),
            r.read.quantile_us(0.99),
            r.read.quantile_us(0.9999),
            r.update.mean_us(),
            r.update.quantile_us(0.5),
            r.update.quantile_us(0.99),
            r.update.quantile_us(0.999),
            r.update.quantile_us(0.9999),
            r.update_ckpt.quantile_us(0.999),
            r.update_ckpt.quantile_us(0.9999),
            r.update_quiet.quantile_us(0.999),
            r.update_quiet.quantile_us(0.9999),
            worst_over_median(r),
        );
        for &(t, n, c, f, m) in &r.timeline {
            let _ = writeln!(
                tl,
                "{},{},{t:.3},{n},{:.0},{},{f},{m}",
                r.variant.name(),
                r.round,
                n as f64 * 1000.0 / a.bucket_ms as f64,
                u8::from(c)
            );
        }
    }
    w("summary.csv", &csv)?;
    w("timeline.csv", &tl)?;
    w("summary.md", header)?;
    let mut chart = plot::Chart::new(
        "DIPPER ablation: throughput over time (round 1)",
        "seconds",
        "operations per second",
    )
    .with_size(1000, 520)
    .with_y_range(Some(0.0), None);
    for r in results.iter().filter(|r| r.round == 1) {
        let pts = r
            .timeline
            .iter()
            .map(|&(t, n, ..)| (t, n as f64 * 1000.0 / a.bucket_ms as f64))
            .collect();
        chart = chart.with_series(plot::Series::new(r.variant.name(), pts));
    }
    chart
        .write_png(&a.out.join("timeline.png"))
        .map_err(|e| format!("timeline.png: {e}"))?;
    Ok(())
}

/// The table: per variant, the median over rounds and the spread (min-max), and the ratios to
/// DIPPER's of the same round.
fn summarize(a: &Args, results: &[RunResult]) -> String {
    let mut s = String::new();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let _ = writeln!(
        s,
        "CPU: {cpu}; load average at the end: {}; {} records x {} B, {} threads, {}% reads, \
         zipfian 0.99, {} shards, logs 2 x {} MiB, {} s per variant and round, {} rounds \
         (order alternating). Each cell: the median over the rounds (lowest..highest); \
         buckets of {} ms; \"in ckpt\": updates that started while a checkpoint ran; \
         a starved bucket is one in which the monitor thread (sampling every 2 ms) took fewer \
         than 5 samples: the machine, not the engine, stopped the process (the worst-bucket \
         ratio and the empty buckets leave those out).\n",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        a.records,
        a.value_bytes,
        a.threads,
        a.read_percent,
        a.shards,
        a.log_mib,
        a.seconds,
        a.rounds,
        a.bucket_ms
    );
    let _ = writeln!(
        s,
        "| variant | ops/s | checkpoints | update p50 us | update p99 us | update p99.9 us | \
         update p99.99 us | p99.99 / DIPPER's | update p99.9 in ckpt / outside | read p99.99 us | \
         worst bucket / median | empty buckets | starved buckets | buckets with the log >= 95% \
         full | log bytes per update |"
    );
    let _ = writeln!(
        s,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    let dipper_of = |round: usize| {
        results
            .iter()
            .find(|r| r.round == round && r.variant == Variant::Dipper)
    };
    for &v in &a.variants {
        let rs: Vec<&RunResult> = results.iter().filter(|r| r.variant == v).collect();
        let span = |f: &dyn Fn(&RunResult) -> f64, digits: usize| {
            let vals: Vec<f64> = rs.iter().map(|r| f(r)).collect();
            let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let m = median(vals.clone());
            if vals.len() > 1 {
                format!("{m:.digits$} ({lo:.digits$}..{hi:.digits$})")
            } else {
                format!("{m:.digits$}")
            }
        };
        let ratio = |r: &RunResult| {
            dipper_of(r.round).map_or(0.0, |d| {
                let base = d.update.quantile_us(0.9999);
                if base > 0.0 {
                    r.update.quantile_us(0.9999) / base
                } else {
                    0.0
                }
            })
        };
        let in_out = |r: &RunResult| {
            let q = r.update_quiet.quantile_us(0.999);
            if q > 0.0 {
                r.update_ckpt.quantile_us(0.999) / q
            } else {
                0.0
            }
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            v.describe(),
            span(&|r| r.ops as f64 / r.seconds, 0),
            span(&|r| r.checkpoints as f64, 0),
            span(&|r| r.update.quantile_us(0.5), 1),
            span(&|r| r.update.quantile_us(0.99), 1),
            span(&|r| r.update.quantile_us(0.999), 0),
            span(&|r| r.update.quantile_us(0.9999), 0),
            span(&ratio, 2),
            span(&in_out, 2),
            span(&|r| r.read.quantile_us(0.9999), 0),
            span(&worst_over_median, 2),
            span(&empty_buckets, 0),
            span(&starved_buckets, 0),
            span(&full_buckets, 0),
            span(&|r| r.log_bytes_per_update, 0),
        );
    }
    let _ = writeln!(
        s,
        "\nThe dissertation (DStore, 28 cores, Optane DCPMM, 4 KiB objects with their data on an \
         NVMe SSD; Table 4.6 and Fig. 4.16): p99.99 2,665 us for DStore against 16,863 us for \
         DStore with a copy-on-write checkpoint (6.3x), throughput SLO 252,832 against 119,685 \
         IOPS (2.1x); ablation from physical logging + copy-on-write: logical logging -21% \
         average and -15% p99.99, then DIPPER's checkpoint about 7.6x lower p99.99. No \
         quiescing variant is measured there."
    );
    s
}

fn main() {
    let a = match parse_args() {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{HELP}");
            return;
        }
        Err(e) => {
            eprintln!("ablation: {e}");
            std::process::exit(2);
        }
    };
    let mut results = Vec::new();
    for round in 1..=a.rounds {
        let mut order = a.variants.clone();
        if round % 2 == 0 {
            order.reverse();
        }
        for &v in &order {
            eprintln!("round {round}: {} ...", v.describe());
            match run_variant(&a, v, round) {
                Ok(r) => {
                    eprintln!(
                        "  {:.0} ops/s, {} checkpoints, update p99.99 {:.0} us",
                        r.ops as f64 / r.seconds,
                        r.checkpoints,
                        r.update.quantile_us(0.9999)
                    );
                    results.push(r);
                }
                Err(e) => {
                    eprintln!("ablation: {}: {e}", v.name());
                    let _ = std::fs::remove_file(a.dir.join(format!("pool-{}", v.name())));
                    std::process::exit(2);
                }
            }
        }
    }
    let table = summarize(&a, &results);
    println!("{table}");
    if let Err(e) = write_outputs(&a, &results, &table) {
        eprintln!("ablation: {e}");
        std::process::exit(2);
    }
    let _ = std::fs::remove_dir(&a.dir);
}
