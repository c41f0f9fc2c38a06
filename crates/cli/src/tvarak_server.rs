//! `kavach tvarak-sim record server`: a trace of the Redis-protocol server under a YCSB-like
//! load. The server is the one `kavach serve` runs (`server::Server` over [`StoreBackend`]),
//! bound to 127.0.0.1, over a store whose pool lives on a simulated medium wrapped in a
//! [`TracingMedium`]: every load, store, flush and fence the store makes while serving is
//! recorded, on the cores of the threads that made it (the server's workers, the store's
//! checkpoint thread, the thread that creates and closes the store), folded onto `--cores`.
//! Each fence that ends a run of flushes is followed by a `TxCommit` of the flushed lines, so
//! the simulator's TxB designs see where each write became durable.
//!
//! Two drivers:
//! - built in (the default): `--clients` TCP connections speaking RESP2; each owns a slice of
//!   `--keys` keys, loads it with SET, then makes `--ops` requests, `--read-percent` of them
//!   GETs, the rest SETs, on keys drawn from YCSB's scrambled zipfian distribution (constant
//!   0.99) over its slice. Every reply is checked against what that client last wrote; a wrong
//!   one stops the run (exit 2, no trace).
//! - `--listen PORT`: the server waits for outside clients (redis-benchmark, YCSB through
//!   Jedis) until SHUTDOWN, SIGINT or SIGTERM.
//!
//! The store is sized from `--keys` and `--value` (a fixed-size pool, as the simulator needs a
//! fixed traced range) and its `maxmemory` is set to that size, so outside clients that write
//! more get Redis's OOM error instead of filling the store.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use server::backend::Backend;
use server::resp::{Limits, Reply, parse_reply};
use sha2::{Digest, Sha256};
use tvarak_sim::record::TracingMedium;
use tvarak_sim::trace::MAX_CORES;

use crate::outcome::{Outcome, check_output_path, print_json, refused};
use crate::serve_cmd::StoreBackend;

/// The options only `record server` takes (the rest it shares with the other workloads).
#[derive(Debug, Args, Clone, Default)]
pub struct ServerOpts {
    /// Server: client connections of the built-in driver, each on its own slice of the keys
    /// (default 4).
    #[arg(long)]
    clients: Option<u16>,
    /// Server: cores of the trace; the server's worker threads and the store's threads share
    /// them (default 4).
    #[arg(long)]
    cores: Option<u16>,
    /// Server: worker threads of the server (default: --cores).
    #[arg(long)]
    workers: Option<usize>,
    /// Server: no built-in driver; serve on 127.0.0.1:PORT (0 picks a free port, printed on
    /// stderr as `listening on ADDR`) until SHUTDOWN, SIGINT or SIGTERM, then write the trace.
    /// The store is sized for --keys keys of --value bytes (a YCSB record of 10 fields of 100
    /// B: --value 2048); writes past that get Redis's OOM error.
    #[arg(long, value_name = "PORT")]
    listen: Option<u16>,
}

impl ServerOpts {
    /// Refuse the server's options for another workload.
    pub fn refuse_for(&self, workload: &str) -> Result<()> {
        for (given, flag) in [
            (self.clients.is_some(), "--clients"),
            (self.cores.is_some(), "--cores"),
            (self.workers.is_some(), "--workers"),
            (self.listen.is_some(), "--listen"),
        ] {
            if given {
                return Err(refused(format!(
                    "{flag} is an option of `record server`, not of `record {workload}`"
                )));
            }
        }
        Ok(())
    }
}

/// The options `record server` shares with the other recorded workloads.
#[derive(Debug)]
pub struct Common<'a> {
    pub keys: u64,
    pub ops: u64,
    pub read_percent: u8,
    pub value: u32,
    pub seed: u64,
    pub address_only: bool,
    /// Work events at this simulated clock (MHz); 0: none.
    pub work_mhz: u32,
    pub output: &'a Path,
    pub json: bool,
}

/// The largest simulated pool (it is held in memory, with a copy of what is durable).
const POOL_BYTES_MAX: u64 = 1 << 30;
/// The most requests the built-in driver makes in all (loads and operations).
const REQUESTS_MAX: u64 = 20_000_000;
/// The largest trace the built-in driver's run may be estimated to write.
const TRACE_BYTES_MAX: u64 = 8 << 30;
/// With --listen: the most events recorded before the server is stopped and the run refused
/// (the outside clients decide how much is written).
const LISTEN_EVENTS_MAX: u64 = 50_000_000;
/// Key bytes: `user` and ten digits.
const KEY_BYTES: u64 = 14;
/// Bytes a key-value pair takes in a shard's arena beyond its key and value (a generous
/// bound on the entry, its block header and the table slot).
const ENTRY_OVERHEAD: u64 = 128;
const MIB: u64 = 1 << 20;

fn key_of(i: u64) -> Vec<u8> {
    format!("user{i:010}").into_bytes()
}

type Traced = TracingMedium<pmem::SimMedium, BufWriter<File>>;

/// The store's configuration and sizes for `keys` keys of `value` bytes.
struct Sizing {
    config: dstore::Config,
    pool_bytes: u64,
}

fn sizing(keys: u64, value: u32) -> Result<Sizing> {
    let shards = 4;
    let data = keys
        .checked_mul(KEY_BYTES + value as u64 + ENTRY_OVERHEAD)
        .filter(|&d| d <= POOL_BYTES_MAX)
        .ok_or_else(|| too_big(keys, value, u64::MAX))?;
    let slot_min = dstore::Config::slot_bytes_min(shards)
        .map_err(|e| refused(format!("cannot size a shadow slot: {e}")))?;
    // The image of the shards' arenas must fit a slot: a slot of twice the memory limit leaves
    // room for the arenas' growth and the engine's headroom. The limit is twice the data, and
    // at least 2 MiB, so that the store's own structures never reach it.
    let maxmemory = 2 * data.max(MIB);
    let slot = (slot_min + 2 * maxmemory).next_multiple_of(MIB);
    let config = dstore::Config {
        shards,
        log_bytes: MIB,
        slot_bytes: slot,
        grow: false,
        maxmemory_bytes: maxmemory,
        background: true,
        value_bytes_max: 1 << 16,
        data_bytes: MIB,
        ..dstore::Config::default()
    };
    let pool_bytes = config.pool_bytes();
    if pool_bytes > POOL_BYTES_MAX {
        return Err(too_big(keys, value, pool_bytes));
    }
    Ok(Sizing { config, pool_bytes })
}

fn too_big(keys: u64, value: u32, pool: u64) -> anyhow::Error {
    let need = if pool == u64::MAX {
        "more than".to_string()
    } else {
        format!("{} MiB, more than", pool.div_ceil(MIB))
    };
    refused(format!(
        "--keys {keys} of --value {value} B: the store's simulated PM (held in this process's \
         memory) would be {need} the largest, {} MiB; use fewer keys or smaller values",
        POOL_BYTES_MAX / MIB
    ))
}

/// Everything checked before anything is made.
struct Plan {
    clients: u16,
    cores: u16,
    workers: usize,
    listen: Option<u16>,
    sizing: Sizing,
}

fn plan(o: &ServerOpts, c: &Common) -> Result<Plan> {
    check_output_path("-o", c.output, false)?;
    let clients = o.clients.unwrap_or(4);
    let cores = o.cores.unwrap_or(4);
    if !(1..MAX_CORES).contains(&cores) {
        return Err(refused(format!(
            "--cores: expected 1..={}, found {cores}",
            MAX_CORES - 1
        )));
    }
    let workers = o.workers.unwrap_or(cores as usize);
    if !(1..=64).contains(&workers) {
        return Err(refused(format!(
            "--workers: expected 1..=64, found {workers}"
        )));
    }
    if o.listen.is_some() && o.clients.is_some() {
        return Err(refused(
            "--clients drives the built-in load; with --listen the clients are outside",
        ));
    }
    if !(1..=64).contains(&clients) {
        return Err(refused(format!(
            "--clients: expected 1..=64, found {clients}"
        )));
    }
    if c.keys < clients as u64 {
        return Err(refused(format!(
            "--keys {}: each of the {clients} clients needs at least one key of its own",
            c.keys
        )));
    }
    if c.ops == 0 {
        return Err(refused("--ops: expected at least 1, found 0"));
    }
    if c.value == 0 || c.value > 4096 {
        return Err(refused(format!(
            "--value: expected 1..=4096 bytes, found {}",
            c.value
        )));
    }
    if c.read_percent > 100 {
        return Err(refused(format!(
            "--read-percent: expected 0..=100, found {}",
            c.read_percent
        )));
    }
    // The store first: without it nothing runs.
    let sizing = sizing(c.keys, c.value)?;
    if o.listen.is_none() {
        let requests = (clients as u64)
            .checked_mul(c.ops)
            .and_then(|n| n.checked_add(c.keys))
            .filter(|&n| n <= REQUESTS_MAX)
            .ok_or_else(|| {
                refused(format!(
                    "--keys {} and --clients {clients} x --ops {}: more than {REQUESTS_MAX} \
                     requests in all",
                    c.keys, c.ops
                ))
            })?;
        // A SET's bytes reach the medium about three times (the log record, the checkpoint's
        // page, the pool's own metadata); a trace with data carries them all.
        let per = if c.address_only {
            64
        } else {
            4 * (c.value as u64 + KEY_BYTES + 64)
        };
        let bytes = requests * per;
        if bytes > TRACE_BYTES_MAX {
            return Err(refused(format!(
                "--keys {} and --clients {clients} x --ops {} of --value {} B: the trace would \
                 take about {} MiB, more than {} MiB; use fewer requests, smaller values or \
                 --address-only",
                c.keys,
                c.ops,
                c.value,
                bytes / MIB,
                TRACE_BYTES_MAX / MIB
            )));
        }
    }
    Ok(Plan {
        clients,
        cores,
        workers,
        listen: o.listen,
        sizing,
    })
}

/// What the built-in driver did.
#[derive(Debug, Default)]
struct Driven {
    gets: u64,
    sets: u64,
    /// Every key the clients set, with the value it was last set to.
    last: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// SHA-256 over the keys in order, each as its length (u32 little-endian), its bytes, then its
/// value's length and bytes: what a store rebuilt from the trace must hold.
fn state_digest<'a>(pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> String {
    let mut h = Sha256::new();
    for (k, v) in pairs {
        h.update((k.len() as u32).to_le_bytes());
        h.update(k);
        h.update((v.len() as u32).to_le_bytes());
        h.update(v);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// `kavach tvarak-sim record server`.
pub fn record(o: &ServerOpts, c: &Common) -> Result<Outcome> {
    let plan = plan(o, c)?;
    let tmp = crate::tvarak_files::temp_beside(c.output);
    let file =
        File::create(&tmp).map_err(|e| refused(format!("-o {}: {e}", c.output.display())))?;
    let result = serve_and_trace(&plan, c, BufWriter::new(file));
    let (header, driven, summary) = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    crate::tvarak_files::publish(&tmp, c.output)?;
    // Count the events from the file: what the trace says.
    let s = match crate::tvarak_files::check_trace(c.output)? {
        Ok(s) => s,
        Err((s, what)) => return crate::tvarak_files::report_damage(&what, c.json, &s),
    };
    let bytes = std::fs::metadata(c.output).map(|m| m.len()).unwrap_or(0);
    let digest = driven
        .as_ref()
        .map(|d| state_digest(d.last.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))));
    if c.json {
        print_json(&serde_json::json!({
            "trace": c.output,
            "name": header.name,
            "events": s.events,
            "loads": s.loads,
            "stores": s.stores,
            "flushes": s.flushes,
            "fences": s.fences,
            "tx_commits": s.tx_commits,
            "pm_bytes": header.pm_bytes,
            "cores": header.cores,
            "with_data": header.with_data,
            "file_bytes": bytes,
            "workers": plan.workers,
            "connections": summary.0,
            "commands": summary.1,
            "driver": if driven.is_some() { "built-in" } else { "listen" },
            "gets": driven.as_ref().map(|d| d.gets),
            "sets": driven.as_ref().map(|d| d.sets),
            "keys_set": driven.as_ref().map(|d| d.last.len()),
            "state_sha256": digest,
        }))?;
    } else {
        println!(
            "wrote {}: {} ({} events, {} cores, {} B of PM, {bytes} B on disk)",
            c.output.display(),
            header.name,
            s.events,
            header.cores,
            header.pm_bytes
        );
        println!(
            "server: {} commands on {} connections, {} workers",
            summary.1, summary.0, plan.workers
        );
        if let (Some(d), Some(digest)) = (&driven, &digest) {
            println!(
                "clients: {} GETs and {} SETs checked; {} keys set, state sha256 {digest}",
                d.gets,
                d.sets,
                d.last.len()
            );
        }
    }
    Ok(Outcome::Ok)
}

type Served = (tvarak_sim::trace::TraceHeader, Option<Driven>, (u64, u64));

/// Make the traced store, serve it, drive it (or wait for outside clients), close it and end
/// the trace, flushed and synced to `out`.
fn serve_and_trace(plan: &Plan, c: &Common, out: BufWriter<File>) -> Result<Served> {
    // Bind first: a port in use is refused before anything is made.
    let config = server::Config {
        port: plan.listen.unwrap_or(0),
        workers: plan.workers,
        max_clients: 1000,
        maxmemory_bytes: plan.sizing.config.maxmemory_bytes,
        ..server::Config::default()
    };
    let listener = server::Listener::bind(config).map_err(|e| {
        refused(format!(
            "cannot listen on 127.0.0.1:{}: {e}",
            plan.listen.unwrap_or(0)
        ))
    })?;
    let len = plan.sizing.pool_bytes as usize;
    let sim = pmem::SimMedium::new(len, pmem::SimConfig::default());
    let name = match plan.listen {
        None => format!(
            "server-{}x{}-r{}-{}B",
            plan.clients, c.ops, c.read_percent, c.value
        ),
        Some(_) => format!("server-listen-{}B", c.value),
    };
    let mut medium = TracingMedium::new(sim, out, &name, plan.cores, !c.address_only)
        .map_err(|e| refused(format!("record: {e}")))?;
    if c.work_mhz > 0 {
        medium = medium
            .measuring_work(f64::from(c.work_mhz) / 1000.0)
            .map_err(|e| refused(format!("record: {e}")))?;
    }
    let traced: Arc<Traced> = Arc::new(medium.folding_threads().committing_fences());
    let failed = |what: &str| {
        let what = what.to_string();
        move |e: &dyn std::fmt::Display| refused(format!("record server: {what}: {e}"))
    };
    let m = pmem::Pool::format(traced.clone(), pmem::Domain::Sim)
        .map_err(|e| failed("pool format")(&e))?;
    let pool = pmem::Pool::open_medium(m, &pmem::OpenOptions::default())
        .map_err(|e| failed("pool open")(&e))?;
    let store = dstore::Store::create(pool, plan.sizing.config.clone())
        .map_err(|e| failed("store create")(&e))?;
    let backend: Arc<dyn Backend> = Arc::new(StoreBackend::new(store, "always", true));
    let srv = listener.into_server(backend);
    let addr = srv.local_addr();
    let handle = srv.handle();
    // SIGINT and SIGTERM shut the server down: with --listen that ends the recording; under
    // the built-in clients it cuts them off, and the run fails without a trace.
    server::install_signal_handlers(&handle)
        .map_err(|e| refused(format!("cannot install signal handlers: {e}")))?;
    let (summary, driven) = if plan.listen.is_some() {
        eprintln!("listening on {addr}");
        // Outside clients decide how much is written: past the cap, stop the server.
        let over = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watch = {
            let (traced, handle, over) = (traced.clone(), handle.clone(), over.clone());
            std::thread::Builder::new()
                .name("kavach-trace-cap".into())
                .spawn(move || {
                    while !handle.is_shutdown_requested() {
                        if traced.events() > LISTEN_EVENTS_MAX {
                            over.store(true, std::sync::atomic::Ordering::SeqCst);
                            handle.shutdown();
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                })
                .map_err(|e| refused(format!("cannot start the trace's watcher: {e}")))?
        };
        let s = srv.run();
        handle.shutdown();
        let _ = watch.join();
        let s = s.map_err(|e| refused(format!("the server failed: {e}")))?;
        if over.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(refused(format!(
                "the trace passed {LISTEN_EVENTS_MAX} events, the most with --listen: the \
                 server was stopped and no trace written; record a shorter run"
            )));
        }
        (s, None)
    } else {
        let running = std::thread::Builder::new()
            .name("kavach-traced-server".into())
            .spawn(move || srv.run())
            .map_err(|e| refused(format!("cannot start the server: {e}")))?;
        let driven = drive(addr, plan, c);
        handle.shutdown();
        let s = match running.join() {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(refused(format!("the server failed: {e}"))),
            Err(_) => return Err(refused("the server's thread panicked")),
        };
        (s, Some(driven?))
    };
    if summary.worker_panics > 0 {
        return Err(refused(format!(
            "{} of the server's workers panicked",
            summary.worker_panics
        )));
    }
    if let Err(e) = &summary.backend_shutdown {
        return Err(refused(format!("the store did not close cleanly: {e}")));
    }
    let rec = traced
        .finish()
        .map_err(|e| refused(format!("record: {e}")))?;
    let f = rec
        .writer
        .into_inner()
        .map_err(|e| refused(format!("writing {}: {}", c.output.display(), e.error())))?;
    f.sync_all()
        .map_err(|e| refused(format!("syncing {}: {e}", c.output.display())))?;
    Ok((
        rec.header,
        driven,
        (summary.connections_accepted, summary.commands_processed),
    ))
}

/// The built-in driver: one thread and one connection per client. The first failure (a
/// connection error, a wrong reply) is the run's error.
fn drive(addr: SocketAddr, plan: &Plan, c: &Common) -> Result<Driven> {
    let n = plan.clients as u64;
    let results: Vec<Result<Driven, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|t| {
                let (first, end) = (t * c.keys / n, (t + 1) * c.keys / n);
                s.spawn(move || client(addr, t, first, end, c))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a client thread panicked".into()))
            })
            .collect()
    });
    let mut all = Driven::default();
    for (t, r) in results.into_iter().enumerate() {
        let d = r.map_err(|e| refused(format!("record server: client {t}: {e}")))?;
        all.gets += d.gets;
        all.sets += d.sets;
        all.last.extend(d.last);
    }
    // Every key is there, once: the server's count must agree.
    let mut conn = Conn::connect(addr).map_err(|e| refused(format!("record server: {e}")))?;
    match conn.call(&[b"DBSIZE"]) {
        Ok(Reply::Integer(k)) if k as u64 == all.last.len() as u64 => Ok(all),
        Ok(r) => Err(refused(format!(
            "record server: DBSIZE answered {r:?}, expected {} keys",
            all.last.len()
        ))),
        Err(e) => Err(refused(format!("record server: DBSIZE: {e}"))),
    }
}

/// One client: load keys `first..end` (its own), then `c.ops` GETs and SETs on them.
fn client(addr: SocketAddr, t: u64, first: u64, end: u64, c: &Common) -> Result<Driven, String> {
    let mut conn = Conn::connect(addr)?;
    let mut r = pmem::rng::SplitMix64::new(c.seed ^ (t << 40) ^ 0x5e7);
    let mut d = Driven::default();
    let mut last: HashMap<u64, Vec<u8>> = HashMap::new();
    for i in first..end {
        set(&mut conn, &mut r, i, c.value, &mut last, &mut d)?;
    }
    let zipf = Zipfian::new(end - first);
    for _ in 0..c.ops {
        let i = first + zipf.scrambled(&mut r);
        if r.below(100) < c.read_percent as u64 {
            let key = key_of(i);
            let want = last.get(&i).cloned();
            let got = conn.call(&[b"GET", &key])?;
            match (&got, &want) {
                (Reply::Bulk(v), Some(w)) if v == w => {}
                _ => {
                    return Err(format!(
                        "GET {}: answered {}, expected the {}-byte value it last set",
                        show(&key),
                        brief(&got),
                        want.map_or(0, |w| w.len())
                    ));
                }
            }
            d.gets += 1;
        } else {
            set(&mut conn, &mut r, i, c.value, &mut last, &mut d)?;
        }
    }
    d.last = last.into_iter().map(|(i, v)| (key_of(i), v)).collect();
    Ok(d)
}

/// SET key `i` to a new value of `len` bytes, checking the reply, and note it.
fn set(
    conn: &mut Conn,
    r: &mut pmem::rng::SplitMix64,
    i: u64,
    len: u32,
    last: &mut HashMap<u64, Vec<u8>>,
    d: &mut Driven,
) -> Result<(), String> {
    let value = fill(r, len as usize);
    let key = key_of(i);
    match conn.call(&[b"SET", &key, &value])? {
        Reply::Simple(s) if s == b"OK" => {}
        other => return Err(format!("SET {}: answered {}", show(&key), brief(&other))),
    }
    d.sets += 1;
    last.insert(i, value);
    Ok(())
}

fn fill(r: &mut pmem::rng::SplitMix64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    for c in v.chunks_mut(8) {
        let w = r.next_u64().to_le_bytes();
        c.copy_from_slice(&w[..c.len()]);
    }
    v
}

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn brief(r: &Reply) -> String {
    match r {
        Reply::Bulk(v) => format!("a {}-byte value that differs", v.len()),
        Reply::Error(e) => format!("the error `{}`", show(e)),
        other => format!("{other:?}"),
    }
}

/// YCSB's zipfian generator (Gray et al., "Quickly generating billion-record synthetic
/// databases"; YCSB's `ZipfianGenerator`) with YCSB's constant 0.99, and its scrambled form
/// (`ScrambledZipfianGenerator`): the rank drawn is hashed (FNV-1a 64) onto the items, so that
/// the hot items are spread over the key space rather than being its first keys.
struct Zipfian {
    items: u64,
    zetan: f64,
    alpha: f64,
    eta: f64,
    half_pow_theta: f64,
}

const ZIPFIAN_CONSTANT: f64 = 0.99;

impl Zipfian {
    fn new(items: u64) -> Zipfian {
        let theta = ZIPFIAN_CONSTANT;
        let zeta = |n: u64| (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(items);
        let zeta2 = zeta(2.min(items));
        let eta = if items <= 1 {
            0.0
        } else {
            (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan)
        };
        Zipfian {
            items,
            zetan,
            alpha: 1.0 / (1.0 - theta),
            eta,
            half_pow_theta: 0.5f64.powf(theta),
        }
    }

    /// A rank in `0..items`, 0 the most popular.
    fn rank(&self, r: &mut pmem::rng::SplitMix64) -> u64 {
        let u = (r.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let uz = u * self.zetan;
        if uz < 1.0 || self.items <= 1 {
            return 0;
        }
        if uz < 1.0 + self.half_pow_theta {
            return 1;
        }
        let k = (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        k.min(self.items - 1)
    }

    /// An item in `0..items`: the rank, hashed onto the items.
    fn scrambled(&self, r: &mut pmem::rng::SplitMix64) -> u64 {
        fnv64(self.rank(r)) % self.items
    }
}

/// YCSB's `fnvhash64`: FNV-1a over the value's eight bytes, low byte first.
fn fnv64(mut v: u64) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for _ in 0..8 {
        h ^= v & 0xff;
        h = h.wrapping_mul(1_099_511_628_211);
        v >>= 8;
    }
    // YCSB takes the absolute value of the signed hash.
    (h as i64).unsigned_abs()
}

/// A RESP2 client on one connection: a request written, its reply read whole.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    limits: Limits,
}

impl Conn {
    fn connect(addr: SocketAddr) -> Result<Conn, String> {
        let stream =
            TcpStream::connect(addr).map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        // A server that stops answering ends the run instead of hanging it.
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .map_err(|e| e.to_string())?;
        let _ = stream.set_nodelay(true);
        Ok(Conn {
            stream,
            buf: Vec::new(),
            limits: Limits::default(),
        })
    }

    fn call(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        let mut req = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            req.extend_from_slice(a);
            req.extend_from_slice(b"\r\n");
        }
        self.stream
            .write_all(&req)
            .map_err(|e| format!("sending: {e}"))?;
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match parse_reply(&self.buf, &self.limits) {
                Ok(Some((reply, used))) => {
                    self.buf.drain(..used);
                    return Ok(reply);
                }
                Ok(None) => {}
                Err(e) => return Err(format!("a reply that is not RESP: {e}")),
            }
            let n = self
                .stream
                .read(&mut chunk)
                .map_err(|e| format!("reading a reply: {e}"))?;
            if n == 0 {
                return Err("the server closed the connection".into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipfian_ranks_are_in_range_and_skewed() {
        let z = Zipfian::new(1000);
        let mut r = pmem::rng::SplitMix64::new(3);
        let mut counts = vec![0u64; 1000];
        for _ in 0..20_000 {
            let k = z.rank(&mut r);
            counts[k as usize] += 1;
            assert!(z.scrambled(&mut r) < 1000);
        }
        // Rank 0 is the most popular by far; the top 10% of ranks take most draws.
        assert!(
            counts[0] > counts[10] && counts[0] > counts[999],
            "{counts:?}"
        );
        let top: u64 = counts[..100].iter().sum();
        assert!(top > 20_000 / 2, "top 10% drew {top}");
        let one = Zipfian::new(1);
        assert_eq!(one.scrambled(&mut r), 0);
    }

    #[test]
    fn sizing_refuses_a_store_past_the_largest_pool() {
        assert!(sizing(1000, 100).is_ok());
        let e = sizing(10_000_000, 4096).err().unwrap().to_string();
        assert!(e.contains("largest"), "{e}");
    }
}
