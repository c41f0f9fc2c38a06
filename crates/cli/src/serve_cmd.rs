//! `kavach serve`: the Redis-protocol server over a DStore in a pool file.

use std::net::{IpAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Args;
use dstore::{Config, ProtectOptions, Store, StoreError, StoreIntegrity};
use log::ForcePolicy;
use pmem::{Mapping, Medium};
use server::backend::{Backend, BackendError, BackendResult, InfoSection, SetOptions};

use crate::outcome::Outcome;

/// Serve a key-value store over the Redis protocol (RESP2), durable in a pool file.
///
/// Starts with no setup: creates its store under --dir if missing (a pool file
/// `kavach.pool`), recovers it if present, and prints where it listens. Every write is logged
/// to a persistent operation log before it runs and acknowledged only when the log record is
/// durable (--durability always); checkpoints in the background copy the DRAM state into the
/// pool without pausing clients. SIGTERM, SIGINT or the SHUTDOWN command stop it cleanly.
///
/// Works with redis-cli, redis-benchmark and Redis client libraries. Commands: PING, ECHO,
/// SELECT 0, HELLO, CLIENT, COMMAND, CONFIG GET, GET, SET [EX|PX] [NX|XX], DEL, EXISTS, MGET,
/// MSET, INCR, DECR, INCRBY, DECRBY, APPEND, STRLEN, TYPE, HSET, HMSET, HGET, HMGET, HGETALL,
/// HDEL, ZADD, ZREM, ZRANGEBYSCORE, DBSIZE, FLUSHALL, SCAN, INFO, SAVE, SHUTDOWN.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Directory of the store (created if missing).
    #[arg(long, default_value = "kavach-data")]
    dir: PathBuf,
    /// TCP port.
    #[arg(long, default_value_t = 6379)]
    port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// When a write is acknowledged: `always` (its log record is durable first) or
    /// `frequency:F` (the log is forced at every F-th record and every 10 ms, so up to F-1
    /// acknowledged writes, or 10 ms of them, can be lost in a power failure). Replicated
    /// nodes (--replicas, --role backup) take only `always`.
    #[arg(long, default_value = "always")]
    durability: String,
    /// With --durability always: `on` lets the writes a worker runs in one pass over its ready
    /// connections share one force of the log (group commit), and every reply, to a writer or
    /// to a reader of what was written, still leaves only after that force; `off` forces each
    /// write's record on its own. Replicated nodes force each write. Measured in
    /// docs/benchmarks.md (issue 27, eighth session).
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    group_commit: String,
    /// Worker threads serving connections, at least 1 (default: one fewer than the cores, at
    /// least 1: the core left over runs the checkpoint thread and the kernel's network work;
    /// more workers help pipelined clients on a busy machine, see docs/benchmarks.md).
    #[arg(long)]
    workers: Option<usize>,
    /// Microseconds a worker keeps polling for requests before it sleeps, when it was busy at
    /// least 3/4 of the last 2 ms (0..=10000; default 0: it sleeps at once, as Redis does).
    /// Near saturation this spares clients the CPU cost of waking it, at the price of the
    /// server's own CPU; a worker with idle time sleeps at once whatever this is. Measured in
    /// docs/benchmarks.md (issue 27, seventh session).
    #[arg(long, default_value_t = 0)]
    busy_poll_us: u64,
    /// Most client connections at once (at least 1).
    #[arg(long, default_value_t = 10_000)]
    maxclients: usize,
    /// New stores only: number of shards (operations on different shards run in parallel).
    #[arg(long, default_value_t = 64)]
    shards: usize,
    /// New stores only: MiB of each of the two operation logs (at least 1). A log bounds the
    /// writes between two checkpoints, and its ring (less 4 KiB) the largest single write.
    #[arg(long, default_value_t = 16)]
    log_mib: u64,
    /// New stores only: MiB of checkpoint image each of the two shadow slots holds to start
    /// with (default: the smallest for --shards, 9 MiB for 64 shards: each shard's image grows
    /// from 64 KiB). This is no ceiling: the images' pages live in page frames that the two
    /// slots share, added as the data grows, and the pool file grows with them (about 1.5 to 2
    /// times the data, docs/benchmarks.md). A new store's pool file starts at 2 x log + a 4 MiB
    /// data zone, two small slot tables and metadata (about 36 MiB with the defaults); a store
    /// made by an older Kavach (fixed slots) is made growable when opened.
    #[arg(long, value_name = "MIB")]
    slot_mib: Option<u64>,
    /// Refuse writes while the data takes more than this many bytes, with Redis's error `OOM
    /// command not allowed when used memory > 'maxmemory'.` (deletions and reads still run).
    /// Sizes as elsewhere: 4294967296, 4GiB or 4G (powers of 1024), 4GB (powers of 1000). 0
    /// (the default): no limit. The data is the bytes of allocated blocks in the shards
    /// (INFO's used_memory).
    #[arg(long, value_name = "BYTES", default_value = "0")]
    maxmemory: String,
    /// What happens at --maxmemory: `noeviction` (refuse writes, Redis's default). Redis's
    /// `allkeys-lru` and `volatile-ttl` are recognised and refused: eviction is not built yet.
    #[arg(long, value_name = "POLICY", default_value = "noeviction")]
    maxmemory_policy: String,
    /// Replication role: `primary` (the default; replicated when --replicas is given) or
    /// `backup` (keeps a copy of a primary's replication log, received on --listen, and
    /// answers reads of what is committed on --port; writes are refused until PROMOTE).
    #[arg(long, default_value = "primary", value_parser = ["primary", "backup"])]
    role: String,
    /// Backup only: address the primary connects to (host:port; port 0 picks a free one).
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Primary: the backups' --listen addresses (host:port,host:port,...). Every write is
    /// acknowledged only after --write-quorum backups persisted it. At start the primary
    /// recovers: it needs a majority of the copies (its own counts), takes a new epoch, repairs
    /// stale or damaged copies (its own too, rebuilding it from a backup if it was lost), and
    /// rebuilds the store from the replicated log.
    #[arg(long, value_name = "ADDR,ADDR")]
    replicas: Option<String>,
    /// Backups that must persist a write before it is acknowledged (default: enough for a
    /// majority of all copies, e.g. 1 of 2, 2 of 3).
    #[arg(long, value_name = "W")]
    write_quorum: Option<usize>,
    /// Milliseconds a backup may take to answer before it is dropped (its connection closed);
    /// with fewer than W backups left, writes fail until the primary is restarted.
    #[arg(long, default_value_t = 5000, value_name = "MS")]
    backup_timeout_ms: u64,
    /// New replicated logs only: MiB of the replication log (DIR/replica.pool). The primary
    /// trims it behind what its store and the live backups' stores applied, so it bounds how
    /// far a live backup may fall behind, not how much can be written (a backup dropped
    /// longer gets a snapshot when it returns). At least 1.
    #[arg(long, default_value_t = 256, value_name = "MIB")]
    repl_log_mib: u64,
    /// When the primary persists its own copy: replicate-first (default, Arcadia's choice),
    /// parallel, or flush-first.
    #[arg(long, default_value = "replicate-first", value_name = "ORDER")]
    flush_order: String,
    /// Redundancy over the store's regions (the operation logs, the page frames of the shadow
    /// images, the root and the data zone; docs/integrity.md, "Protected store"): `off`,
    /// `lazy` (write tracking and a pass every --redundancy-period-ms, Vilamb) or `eager`
    /// (every store write updates checksums and parity from its diff, reads are verified,
    /// TVARAK). Recorded in the pool: without this option a start keeps the recorded mode,
    /// and a store that never had redundancy starts with `off`.
    #[arg(long, value_name = "MODE", value_parser = ["off", "lazy", "eager"])]
    redundancy: Option<String>,
    /// Lazy redundancy's period in ms (100 to 60000; default: the recorded one, 1000 for new
    /// protection).
    #[arg(long, value_name = "MS")]
    redundancy_period_ms: Option<u32>,
    /// Background scrub rate over the protected regions, in 4 KiB pages per second (0: no
    /// background scrub; KAVACH SCRUB and `kavach scrub DIR --port` still scrub on demand).
    /// Damage the scrubber finds is repaired from parity when parity proves the page.
    #[arg(long, value_name = "N", default_value_t = 4096)]
    scrub_pages_per_sec: u64,
    /// New stores only: spread the pool over N member files (at least 3) with rotating
    /// parity, so that the store keeps serving when one of them is lost (docs/server.md,
    /// "A store on a pool set"). DIR/kavach.pool is then the set's description and the members
    /// DIR/kavach.pool.0 .. N-1. A store whose kavach.pool is a set description opens as a set
    /// without this option. Lazy redundancy is refused on a set (it tracks writes through a
    /// single mapping); eager and off work.
    #[arg(long, value_name = "N")]
    pool_files: Option<u64>,
    /// New pool sets only: bytes of a chunk, the unit of striping (4 KiB to 1 GiB, a power of
    /// two; sizes as for --maxmemory). Default 1 MiB.
    #[arg(long, value_name = "SIZE", requires = "pool_files")]
    pool_chunk: Option<String>,
    /// Checkpoint pacing: `on` spreads a checkpoint's replay and write-out over the time the
    /// log takes to fill half way to the next one (at least 4 MiB/s, at most 10 s), so that
    /// clients keep their throughput while it runs; `off` runs it at full speed (INFO
    /// persistence shows last_checkpoint_planned_ms, _paced_ms and _pacing_rate, and each
    /// step's time and the CPU time: _replay_us, _write_us, _root_us, _empty_us, _cpu_us).
    #[arg(long, default_value = "on", value_parser = ["on", "off"], value_name = "on|off")]
    checkpoint_pacing: String,
}

/// Apply `--checkpoint-pacing` to the opened store's engine.
fn set_pacing<M: pmem::Medium + Clone + Send + Sync + 'static, S: dipper::Machine>(
    a: &ServeArgs,
    engine: &dipper::Dipper<M, S>,
) -> Result<()> {
    let pacing = if a.checkpoint_pacing == "off" {
        dipper::Pacing::off()
    } else {
        dipper::Pacing::default()
    };
    engine
        .set_pacing(pacing)
        .map_err(|e| crate::outcome::CommandFailed(anyhow::anyhow!("{e}")).into())
}

/// How often a store on a pool set checks that its member files are still there.
const MEMBER_CHECK_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

/// A store's pool set, watched: a thread checks every [`MEMBER_CHECK_PERIOD`] that each member
/// path still names the file the set has mapped (an unlinked file stays readable through its
/// mapping, so nothing else would notice), and logs each change of the set's state once.
pub(crate) struct SetWatch {
    set: dstore::store::SetMedium,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Held by a rebuild: one at a time.
    rebuilding: std::sync::Mutex<()>,
    /// The member paths after an online rebuild (the set keeps the names it opened with).
    renamed: std::sync::Mutex<Option<Vec<PathBuf>>>,
}

impl SetWatch {
    fn start(set: dstore::store::SetMedium) -> Arc<SetWatch> {
        use std::sync::atomic::Ordering;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, watched) = (Arc::clone(&stop), Arc::clone(&set));
        let thread = std::thread::Builder::new()
            .name("kavach-set-watch".into())
            .spawn(move || {
                let mut last = watched.status().state;
                if last != "healthy" {
                    say_set_state(&watched.status());
                }
                let step = std::time::Duration::from_millis(50);
                'watch: loop {
                    if let Err(e) = watched.check_members() {
                        server::say!("kavach: warning: pool set member check failed: {e}");
                    }
                    let st = watched.status();
                    if st.state != last {
                        last = st.state;
                        say_set_state(&st);
                    }
                    let mut slept = std::time::Duration::ZERO;
                    while slept < MEMBER_CHECK_PERIOD {
                        if s.load(Ordering::Acquire) {
                            break 'watch;
                        }
                        std::thread::sleep(step);
                        slept += step;
                    }
                }
            })
            .ok();
        if thread.is_none() {
            server::say!("kavach: warning: cannot start the pool set's member watch");
        }
        Arc::new(SetWatch {
            set,
            stop,
            thread: std::sync::Mutex::new(thread),
            rebuilding: std::sync::Mutex::new(()),
            renamed: std::sync::Mutex::new(None),
        })
    }

    /// Stop the watch (before the store closes).
    fn stop(&self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        let t = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = t {
            let _ = t.join();
        }
    }

    fn info(&self) -> Vec<(String, String)> {
        let st = self.set.status();
        let mut out = vec![
            kv("pool_kind", "set"),
            kv("pool_members", st.geometry.members),
            kv("pool_chunk_bytes", st.geometry.chunk),
            kv("pool_rows", st.rows),
            kv("pool_generation", st.generation),
            kv("pool_state", st.state),
        ];
        match &st.lost {
            Some(f) => {
                out.push(kv("pool_lost_member", f.index));
                out.push(kv("pool_lost_reason", one_line(&f.reason)));
            }
            None => out.push(kv("pool_lost_member", "none")),
        }
        if let Some(done) = st.rebuilt_rows {
            out.push(kv("pool_rebuilt_rows", done));
        }
        let renamed = self.renamed.lock().ok().and_then(|r| r.clone());
        for (i, m) in renamed.as_ref().unwrap_or(&st.members).iter().enumerate() {
            let lost = st.lost.as_ref().is_some_and(|f| f.index == i)
                || st.also_lost.iter().any(|f| f.index == i);
            out.push(kv(
                &format!("pool_member{i}"),
                format!("{},{}", if lost { "lost" } else { "ok" }, m.display()),
            ));
        }
        out
    }

    /// Rebuild the lost member into `new` (created, or the lost member's own path if the
    /// file is back), naming it in the set's description first, as `kavach pool rebuild` does.
    fn rebuild(&self, new: &[u8]) -> BackendResult<String> {
        use std::os::unix::ffi::OsStrExt;
        let refuse = |m: String| BackendError::Refused(format!("KAVACH REBUILD: {m}"));
        let Ok(_one) = self.rebuilding.try_lock() else {
            return Err(refuse("a rebuild is already running".into()));
        };
        if new.is_empty() || new.contains(&0) {
            return Err(refuse("NEWPATH must be a non-empty path".into()));
        }
        let new = PathBuf::from(std::ffi::OsStr::from_bytes(new));
        let abs =
            |p: &Path| std::path::absolute(p).map_err(|e| refuse(format!("{}: {e}", p.display())));
        let st = self.set.status();
        let Some(lost) = st.lost.clone() else {
            return Err(refuse(format!(
                "the pool set is {}: no member is lost",
                st.state
            )));
        };
        if st.rebuilt_rows.is_some() {
            return Err(refuse("a rebuild is already running".into()));
        }
        let description = self.set.label();
        let listed = pmem::set::read_description(&description)
            .map_err(|e| refuse(format!("cannot read {}: {e}", description.display())))?;
        let Some(old) = listed.get(lost.index) else {
            return Err(refuse(format!(
                "{} lists {} members; the lost one is {}",
                description.display(),
                listed.len(),
                lost.index
            )));
        };
        let in_place = abs(&new)? == abs(old)?;
        let need = st.geometry.member_len(st.rows) as u64;
        let target = if in_place {
            let mut m = Mapping::open(&new, true)
                .map_err(|e| refuse(format!("cannot open {}: {e}", new.display())))?;
            if (m.len() as u64) < need {
                return Err(refuse(format!(
                    "{} has {} bytes; a member of this set needs {need}",
                    new.display(),
                    m.len()
                )));
            }
            m.reserve(pmem::pool::GROW_RESERVE_BYTES as usize)
                .map_err(|e| refuse(format!("{}: {e}", new.display())))?;
            m
        } else {
            if new.exists() {
                return Err(refuse(format!(
                    "{} exists; name a new file (or the lost member's own path)",
                    new.display()
                )));
            }
            let mut m = Mapping::create(&new, need)
                .map_err(|e| refuse(format!("cannot create {}: {e}", new.display())))?;
            if let Err(e) = m.reserve(pmem::pool::GROW_RESERVE_BYTES as usize) {
                drop(m);
                let _ = std::fs::remove_file(&new);
                return Err(refuse(format!("{}: {e}", new.display())));
            }
            m
        };
        let mut paths = st.members.clone();
        if let Some(r) = self.renamed.lock().ok().and_then(|r| r.clone()) {
            paths = r;
        }
        if let Some(p) = paths.get_mut(lost.index) {
            *p = new.clone();
        }
        let mut names = listed.clone();
        names[lost.index] = new.clone();
        let names: Vec<PathBuf> = names
            .iter()
            .map(|p| pmem::set::listed_name(&description, p))
            .collect();
        pmem::set::write_description(&description, &names, false).map_err(|e| {
            BackendError::Failed(format!("cannot rewrite {}: {e}", description.display()))
        })?;
        server::say!(
            "kavach: rebuilding pool set member {} into {}",
            lost.index,
            new.display()
        );
        let started = std::time::Instant::now();
        self.set.rebuild(target, |_, _| {}).map_err(|e| {
            BackendError::Failed(format!(
                "rebuild of member {} into {} failed, the set is still degraded: {e}",
                lost.index,
                new.display()
            ))
        })?;
        if let Ok(mut r) = self.renamed.lock() {
            *r = Some(paths);
        }
        let after = self.set.status();
        let line = format!(
            "rebuilt member {} into {} ({} rows in {:.2} s); the set is {}",
            lost.index,
            new.display(),
            after.rows,
            started.elapsed().as_secs_f64(),
            after.state
        );
        server::say!("kavach: {line}");
        Ok(line)
    }
}

fn one_line(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}

fn say_set_state(st: &pmem::set::SetStatus) {
    match &st.lost {
        Some(f) => server::say!(
            "kavach: pool set {}: member {} ({}) lost: {}; reads and writes continue from \
             parity; replace it with KAVACH REBUILD NEWPATH, or after SHUTDOWN with `kavach \
             pool rebuild DIR/kavach.pool --replace OLD NEW`",
            st.state,
            f.index,
            f.label.display(),
            one_line(&f.reason)
        ),
        None => server::say!("kavach: pool set {}", st.state),
    }
}

/// The store as the server's backend, over any medium: `kavach serve` puts it on a mapped pool
/// file, `kavach tvarak-sim record server` on a traced medium.
pub(crate) struct StoreBackend<M: Medium + Clone + Send + Sync + 'static = Arc<Mapping>> {
    store: Store<M>,
    durability: String,
    /// The store was created by this start (nothing was recovered).
    created: bool,
    /// The integrity layer over the store's regions (`None`: redundancy off).
    integrity: Option<Arc<dyn StoreIntegrity>>,
    /// The pool set under the store (`None`: a single pool file).
    set: Option<Arc<SetWatch>>,
}

impl<M: Medium + Clone + Send + Sync + 'static> StoreBackend<M> {
    /// Serve `store`; `durability` is what INFO shows (`always` or `frequency:F`), `created`
    /// says the store is new (nothing was recovered).
    pub(crate) fn new(store: Store<M>, durability: &str, created: bool) -> Self {
        StoreBackend {
            store,
            durability: durability.to_string(),
            created,
            integrity: None,
            set: None,
        }
    }

    /// The store leaves forcing to [`Backend::sync`] (`ForcePolicy::Caller`: group commit).
    fn caller_forces(&self) -> bool {
        self.store.config().policy == ForcePolicy::Caller
    }

    /// The same, on a watched pool set.
    pub(crate) fn with_set(mut self, set: Option<Arc<SetWatch>>) -> Self {
        self.set = set;
        self
    }

    /// The same, with the integrity layer that protects the store's regions.
    pub(crate) fn with_integrity(mut self, integrity: Option<Arc<dyn StoreIntegrity>>) -> Self {
        self.integrity = integrity;
        self
    }
}

fn be(e: StoreError) -> BackendError {
    match e {
        StoreError::WrongType => BackendError::WrongType,
        StoreError::NotInteger => BackendError::NotInteger,
        StoreError::Overflow => BackendError::Overflow,
        StoreError::TooLarge(m) => BackendError::TooLarge(m),
        StoreError::OutOfSpace(m) => BackendError::OutOfSpace(m),
        StoreError::Failed(m) => BackendError::Failed(m),
        e @ StoreError::Corrupt(_) => BackendError::Failed(e.to_string()),
        StoreError::Closed => BackendError::Failed("the store is shut down".into()),
        e @ StoreError::Integrity { .. } => BackendError::Failed(e.to_string()),
    }
}

fn kv(name: &str, value: impl ToString) -> (String, String) {
    (name.to_string(), value.to_string())
}

impl<M: Medium + Clone + Send + Sync + 'static> Backend for StoreBackend<M> {
    fn set(&self, key: &[u8], value: &[u8], opts: &SetOptions) -> BackendResult<bool> {
        self.store
            .set(
                key,
                value,
                opts.only_if_absent,
                opts.only_if_present,
                opts.expire_at_ms,
            )
            .map_err(be)
    }
    fn mset(&self, pairs: &[(&[u8], &[u8])]) -> BackendResult<()> {
        self.store.mset(pairs).map_err(be)
    }
    fn del(&self, keys: &[&[u8]]) -> BackendResult<u64> {
        self.store.del(keys).map_err(be)
    }
    fn incr_by(&self, key: &[u8], delta: i64) -> BackendResult<i64> {
        self.store.incr_by(key, delta).map_err(be)
    }
    fn append(&self, key: &[u8], value: &[u8]) -> BackendResult<u64> {
        self.store.append(key, value).map_err(be)
    }
    fn hset(&self, key: &[u8], pairs: &[(&[u8], &[u8])]) -> BackendResult<u64> {
        self.store.hset(key, pairs).map_err(be)
    }
    fn hdel(&self, key: &[u8], fields: &[&[u8]]) -> BackendResult<u64> {
        self.store.hdel(key, fields).map_err(be)
    }
    fn zadd(&self, key: &[u8], members: &[(f64, &[u8])]) -> BackendResult<u64> {
        self.store.zadd(key, members).map_err(be)
    }
    fn zrem(&self, key: &[u8], members: &[&[u8]]) -> BackendResult<u64> {
        self.store.zrem(key, members).map_err(be)
    }
    fn flushall(&self) -> BackendResult<()> {
        self.store.flushall().map_err(be)
    }
    fn save(&self) -> BackendResult<()> {
        self.store.save().map(drop).map_err(be)
    }
    fn sync(&self) -> BackendResult<()> {
        if self.caller_forces() {
            self.store.sync().map_err(be)
        } else {
            Ok(())
        }
    }
    fn info(&self) -> Vec<InfoSection> {
        let st = self.store.engine().stats();
        let rec = self.store.recovery();
        let path = self
            .store
            .path()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let persistence = vec![
            kv("loading", 0),
            kv("pool_file", path),
            kv("pool_domain", self.store.engine().medium().domain().name()),
            kv("durability", &self.durability),
            kv(
                "durability_window",
                if self.durability == "always" {
                    "none: a write is acknowledged after its log record is durable".to_string()
                } else {
                    "up to F-1 acknowledged writes or 10 ms, whichever is less".to_string()
                },
            ),
            kv(
                "group_commit",
                if self.caller_forces() { "yes" } else { "no" },
            ),
            kv("checkpoint_in_progress", u8::from(st.checkpoint_running)),
            kv("checkpoints", st.checkpoints),
            kv("checkpoint_image", st.image),
            kv("last_checkpoint_records", st.last_checkpoint.records),
            kv("last_checkpoint_pages", st.last_checkpoint.pages),
            kv("last_checkpoint_bytes", st.last_checkpoint.bytes),
            kv(
                "checkpoint_pacing",
                if st.pacing.enabled { "on" } else { "off" },
            ),
            kv("last_checkpoint_planned_ms", st.last_checkpoint.planned_ms),
            kv("last_checkpoint_paced_ms", st.last_checkpoint.paced_ms),
            kv(
                "last_checkpoint_pacing_rate",
                st.last_checkpoint.pacing_rate,
            ),
            kv("last_checkpoint_ms", st.last_checkpoint.total_ms),
            kv("last_checkpoint_swap_us", st.last_checkpoint.swap_us),
            kv(
                "last_checkpoint_started_unix_ms",
                st.last_checkpoint.started_unix_ms,
            ),
            kv("last_checkpoint_replay_us", st.last_checkpoint.replay_us),
            kv("last_checkpoint_write_us", st.last_checkpoint.write_us),
            kv("last_checkpoint_root_us", st.last_checkpoint.root_us),
            kv("last_checkpoint_empty_us", st.last_checkpoint.empty_us),
            kv("last_checkpoint_cpu_us", st.last_checkpoint.cpu_us),
            kv(
                "last_checkpoint_replay_cpu_us",
                st.last_checkpoint.replay_cpu_us,
            ),
            kv(
                "last_checkpoint_write_cpu_us",
                st.last_checkpoint.write_cpu_us,
            ),
            kv("log_ring_bytes", st.log_ring_bytes),
            kv("log_used_bytes", st.log_used_bytes),
            kv("log_next_lsn", st.log_next_lsn),
            kv("log_durable_lsn", st.log_durable_lsn),
            kv("log_full_waits", st.log_full_waits),
            kv("log_full_wait_ms", st.log_full_wait_us / 1000),
            kv(
                "recovery",
                if self.created {
                    "new"
                } else if rec.clean_shutdown {
                    "after_clean_shutdown"
                } else {
                    "after_crash"
                },
            ),
            kv(
                "recovered_after_clean_shutdown",
                u8::from(!self.created && rec.clean_shutdown),
            ),
            kv(
                "recovery_redone_checkpoint",
                u8::from(rec.redone_checkpoint),
            ),
            kv(
                "recovery_replayed_records",
                rec.active_records + rec.archived_records,
            ),
            kv("recovery_ms", rec.total_ms),
            kv("store_failed", st.failed.as_deref().unwrap_or("no")),
        ];
        let integrity = match &self.integrity {
            Some(i) => i.info(),
            None => vec![
                kv("redundancy", "off"),
                kv(
                    "note",
                    "no page checksums or parity over the pool (start with --redundancy lazy \
                     or eager); log records and shadow pages carry CRC-32C checked on recovery",
                ),
            ],
        };
        let store = vec![
            kv("shards", st.shards),
            kv("operations_logged", st.operations),
            kv("arena_bytes", st.arena_bytes),
            kv("live_bytes", st.live_bytes),
            kv("slot_capacity_bytes", st.slot_capacity_bytes),
            kv("slots_grow", u8::from(st.slots_grow)),
            kv("pool_file_bytes", self.store.engine().medium().len()),
            kv("used_memory", self.store.used_memory()),
            kv("maxmemory", self.store.maxmemory()),
            kv("maxmemory_policy", "noeviction"),
            kv("log_swaps", st.log_swaps),
            kv("data_zone_blocks_in_use", self.store.zone_blocks_in_use()),
        ];
        // The Keyspace section comes from the server, which reads every database through the
        // data model (and leaves it out inside EXEC, whose transaction holds the store's locks).
        let pool = match &self.set {
            Some(w) => w.info(),
            None => vec![kv("pool_kind", "file"), kv("pool_members", 1)],
        };
        vec![
            ("Persistence".into(), persistence),
            ("Pool".into(), pool),
            ("Integrity".into(), integrity),
            ("Store".into(), store),
        ]
    }
    fn shutdown(&self) -> BackendResult<()> {
        if let Some(w) = &self.set {
            w.stop();
        }
        self.store.close().map_err(be)?;
        match &self.integrity {
            Some(i) => i.close().map_err(be),
            None => Ok(()),
        }
    }
    fn integrity_check(&self, repair: bool) -> BackendResult<String> {
        let Some(i) = &self.integrity else {
            return Err(BackendError::Refused(
                "this server's store keeps no redundancy (start it with --redundancy lazy or \
                 eager)"
                    .into(),
            ));
        };
        let s = i.check(repair);
        let clean = s.findings == 0
            && s.unverifiable == 0
            && s.errors.is_empty()
            && (repair || s.unrepaired.is_empty());
        let all_repaired = s.unrepaired.is_empty() && s.errors.is_empty();
        let doc = serde_json::json!({
            "mode": i.mode().name(),
            "repair": repair,
            "clean": clean,
            "all_repaired": all_repaired,
            "report": s,
        });
        Ok(doc.to_string())
    }
    fn keyspace(&self) -> Option<&dyn model::Keyspace> {
        Some(&self.store)
    }
    fn rebuild_member(&self, new: &[u8]) -> BackendResult<String> {
        match &self.set {
            Some(w) => w.rebuild(new),
            None => Err(BackendError::Refused(
                "KAVACH REBUILD: this server's store is one pool file, not a pool set (start a \
                 new store with --pool-files N)"
                    .into(),
            )),
        }
    }
    /// CONFIG SET maxmemory: the store's limit changes at once; `noeviction` is the only
    /// policy (Kavach does not evict keys).
    fn set_memory_limit(&self, bytes: u64, policy: &str) -> BackendResult<()> {
        if policy != "noeviction" {
            return Err(BackendError::Refused(format!(
                "maxmemory-policy {policy} is not supported (Kavach does not evict keys); use \
                 noeviction"
            )));
        }
        self.store.set_maxmemory(bytes);
        Ok(())
    }
}

fn parse_durability(s: &str) -> Result<ForcePolicy> {
    match s {
        "always" => Ok(ForcePolicy::Sync),
        _ => match s.strip_prefix("frequency:").map(str::parse::<u64>) {
            Some(Ok(f)) if f >= 1 => Ok(ForcePolicy::Frequency(f)),
            _ => Err(refused(format!(
                "--durability must be `always` or `frequency:F` with F >= 1, not `{s}`"
            ))),
        },
    }
}

/// An error after which `kavach serve` could not start (exit 2).
fn refused(message: String) -> anyhow::Error {
    crate::outcome::CommandFailed(anyhow::anyhow!(message)).into()
}

const MIB: u64 = 1 << 20;

/// The smallest `--log-mib` and `--repl-log-mib`: a log region holds its metadata and the
/// smallest ring the log accepts, in whole MiB.
fn log_mib_min() -> u64 {
    (log::layout::RING_OFFSET as u64 + log::layout::RING_BYTES_MIN).div_ceil(MIB)
}

/// `mib` MiB in bytes, refused (naming `option`) below `min` MiB or past the largest pool.
fn mib_option(option: &str, mib: u64, min: u64, why_min: &str) -> Result<u64> {
    let max = pmem::layout::POOL_SIZE_MAX / MIB;
    if mib < min {
        return Err(refused(format!(
            "{option} {mib} is too small: the minimum is {min} MiB ({why_min})"
        )));
    }
    if mib > max {
        return Err(refused(format!(
            "{option} {mib} is more than the largest pool ({max} MiB)"
        )));
    }
    Ok(mib * MIB)
}

/// Everything `kavach serve` was asked for, checked before anything is bound or opened.
struct Plan {
    config: Config,
    protect: ProtectOptions,
    server: server::Config,
    repl: replicated::serve::ReplConfig,
    backup: bool,
    replicated: bool,
    /// A new store goes on a pool set of this layout.
    set_layout: Option<dstore::store::SetLayout>,
}

/// Largest `--busy-poll-us` (10 ms: polling longer than a scheduler's time slice only takes
/// the CPU from other threads).
const BUSY_POLL_US_MAX: u64 = 10_000;

/// Check every option. Refuses values that cannot work (0 workers, a slot too small to hold
/// the empty store, a pool past the largest size) instead of adjusting them silently.
fn plan(a: &ServeArgs) -> Result<Plan> {
    let policy = parse_durability(&a.durability)?;
    let order =
        replication::FlushOrder::parse(&a.flush_order).map_err(|e| refused(e.to_string()))?;
    let replicas = match &a.replicas {
        Some(r) => crate::replica_cmd::parse_replicas(r).map_err(|e| refused(format!("{e:#}")))?,
        None => Vec::new(),
    };
    let backup = a.role == "backup";
    if backup && a.listen.is_none() {
        return Err(refused(
            "--role backup needs --listen ADDR (the address its primary connects to)".into(),
        ));
    }
    if !backup && a.listen.is_some() {
        return Err(refused(
            "--listen is for --role backup; a primary connects to its --replicas".into(),
        ));
    }
    if backup && a.replicas.is_some() {
        return Err(refused(
            "--replicas is for a primary; a backup learns its peers at PROMOTE".into(),
        ));
    }
    if (backup || !replicas.is_empty()) && !matches!(policy, ForcePolicy::Sync) {
        return Err(refused(format!(
            "--durability {} is for a standalone server: a replicated node's store must hold \
             every write it applied before it says so, because the replicated log is trimmed \
             behind what the stores applied (use --durability always, the default)",
            a.durability
        )));
    }
    // A standalone server with `always` groups its forces: the worker syncs before replies
    // leave (`Backend::sync`). A replicated node's backend acknowledges through the replicated
    // log and keeps a force per write.
    let policy = if policy == ForcePolicy::Sync
        && a.group_commit == "on"
        && !backup
        && replicas.is_empty()
    {
        ForcePolicy::Caller
    } else {
        policy
    };
    if a.write_quorum.is_some() && replicas.is_empty() {
        return Err(refused("--write-quorum needs --replicas".into()));
    }
    if let Some(w) = a.write_quorum {
        replication::Quorum::new(replicas.len(), w).map_err(|e| refused(format!("{e}")))?;
    }
    if a.backup_timeout_ms == 0 {
        return Err(refused("--backup-timeout-ms must be at least 1".into()));
    }
    if a.workers == Some(0) {
        return Err(refused("--workers must be at least 1".into()));
    }
    if a.busy_poll_us > BUSY_POLL_US_MAX {
        return Err(refused(format!(
            "--busy-poll-us must be in 0..={BUSY_POLL_US_MAX}, not {}",
            a.busy_poll_us
        )));
    }
    if a.maxclients == 0 {
        return Err(refused("--maxclients must be at least 1".into()));
    }
    if a.shards == 0 || a.shards > dipper::layout::SHARDS_MAX {
        return Err(refused(format!(
            "--shards must be in 1..={}, not {}",
            dipper::layout::SHARDS_MAX,
            a.shards
        )));
    }
    let log_min = log_mib_min();
    let log_why = "a log region holds its metadata and the smallest ring";
    let log_bytes = mib_option("--log-mib", a.log_mib, log_min, log_why)?;
    let repl_log_bytes = mib_option("--repl-log-mib", a.repl_log_mib, log_min, log_why)?;
    let slot_min = Config::slot_bytes_min(a.shards)
        .map_err(|e| refused(format!("cannot size a shadow slot: {e}")))?
        .div_ceil(MIB);
    let slot_why = format!(
        "for {} shards: a slot holds the image of every shard's arena after a write; or use \
         fewer --shards",
        a.shards
    );
    let slot_bytes = match a.slot_mib {
        Some(mib) => mib_option("--slot-mib", mib, slot_min, &slot_why)?,
        // The smallest slot, exactly (the store computes it).
        None => 0,
    };
    let maxmemory_bytes =
        crate::units::parse_size(&a.maxmemory).map_err(|e| refused(format!("--maxmemory: {e}")))?;
    match a.maxmemory_policy.as_str() {
        "noeviction" => {}
        p @ ("allkeys-lru" | "volatile-ttl") => {
            return Err(refused(format!(
                "--maxmemory-policy {p} is not supported yet (Kavach does not evict keys); use \
                 noeviction: writes past --maxmemory are refused with Redis's OOM error"
            )));
        }
        other => {
            return Err(refused(format!(
                "--maxmemory-policy {other}: unknown policy (noeviction is supported; \
                 allkeys-lru and volatile-ttl are not yet)"
            )));
        }
    }
    let config = Config {
        shards: a.shards,
        log_bytes,
        slot_bytes,
        policy,
        maxmemory_bytes,
        ..Config::default()
    };
    let pool_bytes = config
        .pool_bytes_at_create()
        .map_err(|e| refused(e.to_string()))?;
    if pool_bytes > pmem::layout::POOL_SIZE_MAX {
        return Err(refused(format!(
            "the new pool would be {} MiB (2 x log + {} MiB), more than the largest pool ({} \
             MiB)",
            pool_bytes / MIB,
            pool_overhead_bytes() / MIB,
            pmem::layout::POOL_SIZE_MAX / MIB
        )));
    }
    let protect = ProtectOptions {
        mode: a.redundancy.as_deref().map(|m| match m {
            "lazy" => integrity::Mode::Lazy,
            "eager" => integrity::Mode::Eager,
            _ => integrity::Mode::Off,
        }),
        period_ms: a.redundancy_period_ms,
        scrub_pages_per_sec: a.scrub_pages_per_sec,
    };
    if let Some(ms) = a.redundancy_period_ms {
        let (lo, hi) = (
            integrity::layout::PERIOD_MS_MIN,
            integrity::layout::PERIOD_MS_MAX,
        );
        if !(lo..=hi).contains(&ms) {
            return Err(refused(format!(
                "--redundancy-period-ms must be in {lo}..={hi}, not {ms}"
            )));
        }
    }
    let set_layout = match a.pool_files {
        Some(n) => {
            pmem::set::validate_members(n)
                .map_err(|e| refused(format!("--pool-files {n}: {e}")))?;
            let chunk = match &a.pool_chunk {
                Some(c) => crate::units::parse_size(c)
                    .map_err(|e| refused(format!("--pool-chunk: {e}")))?,
                None => pmem::set::CHUNK_DEFAULT,
            };
            pmem::set::validate_chunk(chunk)
                .map_err(|e| refused(format!("--pool-chunk {chunk}: {e}")))?;
            Some(dstore::store::SetLayout {
                members: n as usize,
                chunk,
            })
        }
        None => None,
    };
    let repl = replicated::serve::ReplConfig {
        replicas: replicas.clone(),
        write_quorum: a.write_quorum,
        timeout: std::time::Duration::from_millis(a.backup_timeout_ms),
        log_bytes: repl_log_bytes,
        order,
        dir: a.dir.clone(),
    };
    let mut server = server::Config {
        bind: a.bind,
        port: a.port,
        max_clients: a.maxclients,
        durability: a.durability.clone(),
        // CONFIG GET maxmemory reports what the store enforces.
        maxmemory_bytes,
        maxmemory_policy: a.maxmemory_policy.clone(),
        busy_poll: std::time::Duration::from_micros(a.busy_poll_us),
        ..server::Config::default()
    };
    if let Some(w) = a.workers {
        server.workers = w;
    }
    Ok(Plan {
        config,
        protect,
        server,
        replicated: !replicas.is_empty(),
        repl,
        backup,
        set_layout,
    })
}

/// Is the store in `--dir` (existing, or about to be made) on a pool set? Refuses what a set
/// cannot do: lazy redundancy, --pool-files on a single-file store or with another count.
fn check_set_dir(a: &ServeArgs, plan: &Plan) -> Result<bool> {
    let path = a.dir.join(dstore::POOL_FILE);
    let on_set = if path.exists() {
        if dstore::store::is_set_dir(&a.dir) {
            let listed = pmem::set::read_description(&path)
                .map_err(|e| refused(format!("cannot read {}: {e}", path.display())))?;
            if let Some(l) = plan.set_layout
                && l.members != listed.len()
            {
                return Err(refused(format!(
                    "--pool-files {}: the store in {} is on a set of {} members already",
                    l.members,
                    a.dir.display(),
                    listed.len()
                )));
            }
            true
        } else {
            if plan.set_layout.is_some() {
                return Err(refused(format!(
                    "--pool-files is for a new store: {} is a single pool file",
                    path.display()
                )));
            }
            false
        }
    } else {
        plan.set_layout.is_some()
    };
    if on_set && plan.protect.mode == Some(integrity::Mode::Lazy) {
        return Err(refused(
            "--redundancy lazy is not available on a pool set: lazy mode tracks writes \
             through a single file mapping, and a set's pool is spread over several (use \
             --redundancy eager, or off; the set's own parity already survives a lost member)"
                .into(),
        ));
    }
    Ok(on_set)
}

/// Bytes of a new store's pool besides its two logs (the data zone, the slot tables and
/// metadata).
fn pool_overhead_bytes() -> u64 {
    let c = Config::default();
    c.pool_bytes_at_create().expect("the default pool") - 2 * c.log_bytes
}

/// What a start found in `--dir`, so that a start that fails leaves it as it was: no new
/// directory, store or log copy, and a replicated node's store view back in place.
#[derive(Debug)]
struct Undo {
    dir: PathBuf,
    /// The directories of `dir`'s path that did not exist, deepest first (the start makes
    /// them).
    dirs_made: Vec<PathBuf>,
    store_existed: bool,
    replica_existed: bool,
    /// Member files a new pool set would have (removed by a failed start that made them).
    set_members: Vec<PathBuf>,
}

impl Undo {
    fn new(dir: &Path, set_layout: Option<dstore::store::SetLayout>) -> Undo {
        let dirs_made = dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
            .map(Path::to_path_buf)
            .collect();
        Undo {
            dir: dir.to_path_buf(),
            dirs_made,
            store_existed: dir.join(dstore::POOL_FILE).exists(),
            replica_existed: dir.join(replication::host::REPLICA_FILE).exists(),
            set_members: match set_layout {
                Some(l) if !dir.join(dstore::POOL_FILE).exists() => {
                    pmem::set::default_member_paths(&dir.join(dstore::POOL_FILE), l.members)
                        .into_iter()
                        .filter(|p| !p.exists())
                        .collect()
                }
                _ => Vec::new(),
            },
        }
    }

    /// The start failed: remove what it made and put back what it moved. Best effort: a
    /// failure here is reported, and the start's own error is the one returned.
    fn roll_back(&self) {
        let store = self.dir.join(dstore::POOL_FILE);
        let undo = |what: &str, r: std::io::Result<()>| {
            if let Err(e) = r
                && e.kind() != std::io::ErrorKind::NotFound
            {
                server::say!("kavach: warning: cannot undo the failed start ({what}): {e}");
            }
        };
        if !self.store_existed {
            undo("remove the new store", std::fs::remove_file(&store));
            for m in &self.set_members {
                undo("remove a new pool set member", std::fs::remove_file(m));
            }
        }
        if !self.replica_existed {
            let replica = self.dir.join(replication::host::REPLICA_FILE);
            undo("remove the new log copy", std::fs::remove_file(&replica));
        }
        for made in &self.dirs_made {
            // Only if empty: anything else in it is not ours.
            if std::fs::remove_dir(made).is_err() {
                break;
            }
        }
    }
}

/// Open (or create) the store and wrap it for its replication role. A primary recovers the
/// replicated log first and opens its store only then: a start that cannot recover (too few
/// backups) leaves the store file untouched.
fn open_backend(
    a: &ServeArgs,
    plan: &Plan,
    repl_listener: Option<TcpListener>,
) -> Result<Arc<dyn Backend>> {
    if plan.backup || plan.replicated {
        replicated::serve::check_store_dir(&a.dir)?;
    }
    let repl = plan.repl.clone();
    let replicated = match repl_listener {
        Some(listener) => {
            replicated::serve::Replicated::backup(open_store(a, plan)?, repl, listener)?
        }
        None if plan.replicated => {
            // The log copy goes in first (a failed start removes the directories it made).
            std::fs::create_dir_all(&a.dir)
                .with_context(|| format!("cannot create {}", a.dir.display()))?;
            replicated::serve::Replicated::primary(repl, &mut || open_store(a, plan))?
        }
        None => return open_store(a, plan),
    };
    let replicated = Arc::new(replicated);
    replicated.start_keeper();
    Ok(replicated)
}

/// Open (or create) the store on a pool set in `--dir`.
fn open_set_store(a: &ServeArgs, plan: &Plan) -> Result<Arc<dyn Backend>> {
    let (store, sopened) = dstore::store::SetStore::open_dir_set(
        &a.dir,
        plan.config.clone(),
        &plan.protect,
        plan.set_layout,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))
    .with_context(|| format!("cannot open the store in {}", a.dir.display()))
    .map_err(crate::outcome::CommandFailed)?;
    set_pacing(a, store.engine())?;
    for note in &sopened.notes {
        server::say!("kavach: integrity: {note}");
    }
    match &sopened.protection {
        Some(p) => server::say!(
            "kavach: redundancy {} over {} regions; background scrub {} pages/s",
            p.mode().name(),
            p.covered().len(),
            plan.protect.scrub_pages_per_sec
        ),
        None => server::say!("kavach: redundancy off"),
    }
    let st = sopened.set.status();
    let opened = &sopened.opened;
    server::say!(
        "kavach: {} {} (pool set: {} members, chunk {} bytes, {} rows, {}), {} keys",
        if opened.created {
            "created"
        } else {
            "recovered"
        },
        opened.path.display(),
        st.geometry.members,
        st.geometry.chunk,
        st.rows,
        st.state,
        store.dbsize().unwrap_or(0)
    );
    let watch = SetWatch::start(Arc::clone(&sopened.set));
    let integrity = sopened
        .protection
        .clone()
        .map(|p| p as Arc<dyn StoreIntegrity>);
    Ok(Arc::new(
        StoreBackend::new(store, &a.durability, opened.created)
            .with_integrity(integrity)
            .with_set(Some(watch)),
    ))
}

/// Open (or create) the store in `--dir`.
fn open_store(a: &ServeArgs, plan: &Plan) -> Result<Arc<dyn Backend>> {
    server::say!("kavach: opening the store in {}", a.dir.display());
    if plan.set_layout.is_some() || dstore::store::is_set_dir(&a.dir) {
        return open_set_store(a, plan);
    }
    let (store, popened) = Store::open_dir_protected(&a.dir, plan.config.clone(), &plan.protect)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("cannot open the store in {}", a.dir.display()))
        .map_err(crate::outcome::CommandFailed)?;
    set_pacing(a, store.engine())?;
    for note in &popened.notes {
        server::say!("kavach: integrity: {note}");
    }
    match &popened.protection {
        Some(p) => server::say!(
            "kavach: redundancy {}{} over {} regions ({} pages); background scrub {} pages/s",
            p.mode().name(),
            if p.mode() == integrity::Mode::Lazy {
                format!(" (period {} ms)", p.period_ms())
            } else {
                String::new()
            },
            p.covered().len(),
            p.covered().iter().map(|c| c.len / 4096).sum::<u64>(),
            plan.protect.scrub_pages_per_sec
        ),
        None => server::say!("kavach: redundancy off"),
    }
    let opened = &popened.opened;
    let r = &opened.recovery;
    if opened.created {
        let c = store.config();
        let file = std::fs::metadata(&opened.path).map_or(0, |m| m.len());
        server::say!(
            "kavach: created {} ({:.1} MiB: 2 x {} MiB logs, a data zone, slot tables and \
             metadata; it grows with the data)",
            opened.path.display(),
            file as f64 / MIB as f64,
            c.log_bytes / MIB,
        );
    } else {
        server::say!(
            "kavach: recovered {} ({} shutdown): image {}, {} records replayed{}, {} keys, in {} ms",
            opened.path.display(),
            if r.clean_shutdown { "clean" } else { "unclean" },
            r.checkpoint,
            r.active_records + r.archived_records,
            if r.redone_checkpoint {
                ", an interrupted checkpoint redone"
            } else {
                ""
            },
            store.dbsize().unwrap_or(0),
            r.total_ms
        );
    }
    let integrity = popened
        .protection
        .clone()
        .map(|p| p as Arc<dyn StoreIntegrity>);
    Ok(Arc::new(
        StoreBackend::new(store, &a.durability, opened.created).with_integrity(integrity),
    ))
}

/// Run the server until it is shut down.
///
/// The order makes a failed start change nothing: check every option, bind the RESP port (and
/// a backup's `--listen`), install the signal handlers, and only then open or create the
/// store. If that or the replicated start fails, what the start made is removed and what it
/// moved is put back ([`Undo`]).
pub fn run(a: &ServeArgs) -> Result<Outcome> {
    let plan = plan(a)?;
    if a.dir.exists() && !a.dir.is_dir() {
        return Err(refused(format!(
            "--dir {} exists and is not a directory (the store is a directory holding {})",
            a.dir.display(),
            dstore::POOL_FILE
        )));
    }
    check_set_dir(a, &plan)?;
    let listener = server::Listener::bind(plan.server.clone())
        .map_err(|e| refused(format!("cannot listen on {}:{}: {e}", a.bind, a.port)))?;
    let repl_listener = match (&a.listen, plan.backup) {
        (Some(listen), true) => Some(
            TcpListener::bind(listen)
                .map_err(|e| refused(format!("cannot listen on {listen} (--listen): {e}")))?,
        ),
        _ => None,
    };
    server::install_signal_handlers(&listener.handle())
        .map_err(|e| refused(format!("cannot install signal handlers: {e}")))?;
    let undo = Undo::new(&a.dir, plan.set_layout);
    let backend = match open_backend(a, &plan, repl_listener) {
        Ok(backend) => backend,
        Err(e) => {
            undo.roll_back();
            // The server could not start: exit 2.
            return Err(if e.is::<crate::outcome::CommandFailed>() {
                e
            } else {
                crate::outcome::CommandFailed(e).into()
            });
        }
    };
    let srv = listener.into_server(backend);
    server::say!(
        "kavach: listening on {} (durability {}); stop with Ctrl-C, SIGTERM or SHUTDOWN",
        srv.local_addr(),
        a.durability
    );
    let summary = srv.run().context("the server failed")?;
    match &summary.backend_shutdown {
        Ok(()) => server::say!(
            "kavach: shut down cleanly after {} commands on {} connections",
            summary.commands_processed,
            summary.connections_accepted
        ),
        Err(e) => bail!("the store did not close cleanly: {e}"),
    }
    Ok(Outcome::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches, Parser};

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    /// `--help`'s sizes are the ones the code uses.
    #[test]
    fn help_states_the_true_pool_size() {
        let help = Cli::command().render_long_help().to_string();
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        let cmd = Cli::command();
        let defaults = Cli::from_arg_matches(&cmd.get_matches_from(["serve"])).unwrap();
        let plan = plan(&defaults.serve).unwrap();
        let start = plan.config.pool_bytes_at_create().unwrap() as f64 / MIB as f64;
        let total = format!("about {start:.0} MiB with the defaults");
        assert!(help.contains(&total), "{total} not in: {help}");
        let shards = defaults.serve.shards;
        let slot_min = Config::slot_bytes_min(shards).unwrap().div_ceil(MIB);
        let min = format!("{slot_min} MiB for {shards} shards");
        assert!(help.contains(&min), "{min} not in: {help}");
        let data = format!("a {} MiB data zone", plan.config.data_bytes / MIB);
        assert!(help.contains(&data), "{data} not in: {help}");
        assert!(
            pool_overhead_bytes() < 5 * MIB,
            "data zone, tables and metadata"
        );
    }

    fn plan_of(args: &[&str]) -> Result<Plan> {
        let cmd = Cli::command();
        let argv = std::iter::once("serve").chain(args.iter().copied());
        let a = Cli::from_arg_matches(&cmd.get_matches_from(argv)).unwrap();
        plan(&a.serve)
    }

    #[test]
    fn maxmemory_takes_sizes_and_only_noeviction() {
        assert_eq!(plan_of(&[]).unwrap().config.maxmemory_bytes, 0);
        for (text, bytes) in [("1000000", 1_000_000), ("64MiB", 64 << 20), ("2G", 2 << 30)] {
            let p = plan_of(&["--maxmemory", text]).unwrap();
            assert_eq!(p.config.maxmemory_bytes, bytes, "{text}");
        }
        let e = plan_of(&["--maxmemory", "lots"]).err().unwrap().to_string();
        assert!(e.contains("--maxmemory"), "{e}");
        assert!(plan_of(&["--maxmemory-policy", "noeviction"]).is_ok());
        for p in ["allkeys-lru", "volatile-ttl"] {
            let e = plan_of(&["--maxmemory-policy", p])
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains("not supported yet"), "{e}");
        }
        let e = plan_of(&["--maxmemory-policy", "random"])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("unknown policy"), "{e}");
    }

    #[test]
    fn redundancy_options_are_parsed_and_checked() {
        let p = plan_of(&[]).unwrap();
        assert_eq!(p.protect.mode, None, "the recorded mode is kept");
        assert_eq!(p.protect.period_ms, None);
        let p = plan_of(&["--redundancy", "lazy", "--redundancy-period-ms", "5000"]).unwrap();
        assert_eq!(p.protect.mode, Some(integrity::Mode::Lazy));
        assert_eq!(p.protect.period_ms, Some(5000));
        let p = plan_of(&["--redundancy", "eager", "--scrub-pages-per-sec", "0"]).unwrap();
        assert_eq!(p.protect.mode, Some(integrity::Mode::Eager));
        assert_eq!(p.protect.scrub_pages_per_sec, 0);
        assert_eq!(
            plan_of(&["--redundancy", "off"]).unwrap().protect.mode,
            Some(integrity::Mode::Off)
        );
        for ms in ["50", "60001"] {
            let e = plan_of(&["--redundancy-period-ms", ms])
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains("--redundancy-period-ms"), "{e}");
        }
    }

    #[test]
    fn pool_set_options_are_parsed_and_checked() {
        assert!(
            plan_of(&[]).unwrap().set_layout.is_none(),
            "one file by default"
        );
        let l = plan_of(&["--pool-files", "4"]).unwrap().set_layout.unwrap();
        assert_eq!((l.members, l.chunk), (4, pmem::set::CHUNK_DEFAULT));
        let l = plan_of(&["--pool-files", "3", "--pool-chunk", "64KiB"])
            .unwrap()
            .set_layout
            .unwrap();
        assert_eq!((l.members, l.chunk), (3, 64 << 10));
        for (args, needle) in [
            (&["--pool-files", "2"][..], "--pool-files 2"),
            (&["--pool-files", "65"][..], "--pool-files 65"),
            (
                &["--pool-files", "3", "--pool-chunk", "3000"][..],
                "--pool-chunk",
            ),
            (
                &["--pool-files", "3", "--pool-chunk", "2GiB"][..],
                "--pool-chunk",
            ),
            (
                &["--pool-files", "3", "--pool-chunk", "big"][..],
                "--pool-chunk",
            ),
        ] {
            let e = plan_of(args).err().unwrap().to_string();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
    }

    #[test]
    fn slot_mib_is_optional_and_still_checked() {
        assert_eq!(plan_of(&[]).unwrap().config.slot_bytes, 0, "the smallest");
        assert_eq!(
            plan_of(&["--slot-mib", "64"]).unwrap().config.slot_bytes,
            64 * MIB
        );
        assert!(plan_of(&["--slot-mib", "1"]).is_err());
    }
}
