//! `kavach serve`: the Redis-protocol server over a DStore in a pool file.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Args;
use dstore::{Config, Store, StoreError};
use log::ForcePolicy;
use pmem::{Mapping, Medium};
use server::backend::{
    Backend, BackendError, BackendResult, Bytes, InfoSection, ScoreBound, SetOptions,
};

use crate::Outcome;

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
    /// acknowledged writes, or 10 ms of them, can be lost in a power failure).
    #[arg(long, default_value = "always")]
    durability: String,
    /// Worker threads serving connections (default: the number of cores).
    #[arg(long)]
    workers: Option<usize>,
    /// Most client connections at once.
    #[arg(long, default_value_t = 10_000)]
    maxclients: usize,
    /// New stores only: number of shards (operations on different shards run in parallel).
    #[arg(long, default_value_t = 64)]
    shards: usize,
    /// New stores only: MiB of each of the two operation logs.
    #[arg(long, default_value_t = 64)]
    log_mib: u64,
    /// New stores only: MiB of each of the two shadow slots. The DRAM state must fit in one
    /// (writes that would grow it past about 94% are refused with an OOM error). The pool file
    /// is about 2 x log + 2 x slot, allocated up front.
    #[arg(long, default_value_t = 512)]
    slot_mib: u64,
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
    /// New replicated logs only: MiB of the replication log (DIR/replica.pool). It keeps every
    /// write, so it bounds how much can be written; a full log refuses writes with OOM.
    #[arg(long, default_value_t = 256, value_name = "MIB")]
    repl_log_mib: u64,
    /// When the primary persists its own copy: replicate-first (default, Arcadia's choice),
    /// parallel, or flush-first.
    #[arg(long, default_value = "replicate-first", value_name = "ORDER")]
    flush_order: String,
}

/// The store as the server's backend.
pub(crate) struct StoreBackend {
    store: Store<Arc<Mapping>>,
    durability: String,
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
    }
}

fn kv(name: &str, value: impl ToString) -> (String, String) {
    (name.to_string(), value.to_string())
}

impl Backend for StoreBackend {
    fn get(&self, key: &[u8]) -> BackendResult<Option<Bytes>> {
        self.store.get(key).map_err(be)
    }
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
    fn mget(&self, keys: &[&[u8]]) -> BackendResult<Vec<Option<Bytes>>> {
        self.store.mget(keys).map_err(be)
    }
    fn mset(&self, pairs: &[(&[u8], &[u8])]) -> BackendResult<()> {
        self.store.mset(pairs).map_err(be)
    }
    fn del(&self, keys: &[&[u8]]) -> BackendResult<u64> {
        self.store.del(keys).map_err(be)
    }
    fn exists(&self, keys: &[&[u8]]) -> BackendResult<u64> {
        self.store.exists(keys).map_err(be)
    }
    fn incr_by(&self, key: &[u8], delta: i64) -> BackendResult<i64> {
        self.store.incr_by(key, delta).map_err(be)
    }
    fn append(&self, key: &[u8], value: &[u8]) -> BackendResult<u64> {
        self.store.append(key, value).map_err(be)
    }
    fn strlen(&self, key: &[u8]) -> BackendResult<u64> {
        self.store.strlen(key).map_err(be)
    }
    fn hset(&self, key: &[u8], pairs: &[(&[u8], &[u8])]) -> BackendResult<u64> {
        self.store.hset(key, pairs).map_err(be)
    }
    fn hget(&self, key: &[u8], field: &[u8]) -> BackendResult<Option<Bytes>> {
        self.store.hget(key, field).map_err(be)
    }
    fn hmget(&self, key: &[u8], fields: &[&[u8]]) -> BackendResult<Vec<Option<Bytes>>> {
        self.store.hmget(key, fields).map_err(be)
    }
    fn hgetall(&self, key: &[u8]) -> BackendResult<Vec<(Bytes, Bytes)>> {
        self.store.hgetall(key).map_err(be)
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
    fn zrange_by_score(
        &self,
        key: &[u8],
        min: ScoreBound,
        max: ScoreBound,
        offset: usize,
        count: Option<usize>,
    ) -> BackendResult<Vec<(Bytes, f64)>> {
        self.store
            .zrange_by_score(
                key,
                min.score,
                min.exclusive,
                max.score,
                max.exclusive,
                offset,
                count,
            )
            .map_err(be)
    }
    fn dbsize(&self) -> BackendResult<u64> {
        self.store.dbsize().map_err(be)
    }
    fn flushall(&self) -> BackendResult<()> {
        self.store.flushall().map_err(be)
    }
    fn scan(&self, cursor: u64, count: usize) -> BackendResult<(u64, Vec<(Bytes, &'static str)>)> {
        self.store.scan(cursor, count).map_err(be)
    }
    fn key_type(&self, key: &[u8]) -> BackendResult<&'static str> {
        self.store.key_type(key).map_err(be)
    }
    fn save(&self) -> BackendResult<()> {
        self.store.save().map(drop).map_err(be)
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
            kv("checkpoint_in_progress", u8::from(st.checkpoint_running)),
            kv("checkpoints", st.checkpoints),
            kv("checkpoint_image", st.image),
            kv("last_checkpoint_records", st.last_checkpoint.records),
            kv("last_checkpoint_pages", st.last_checkpoint.pages),
            kv("last_checkpoint_ms", st.last_checkpoint.total_ms),
            kv("last_checkpoint_swap_us", st.last_checkpoint.swap_us),
            kv("log_ring_bytes", st.log_ring_bytes),
            kv("log_used_bytes", st.log_used_bytes),
            kv("log_next_lsn", st.log_next_lsn),
            kv("log_durable_lsn", st.log_durable_lsn),
            kv(
                "recovered_after_clean_shutdown",
                u8::from(rec.clean_shutdown),
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
        let integrity = vec![
            kv("redundancy", "none"),
            kv(
                "note",
                "page checksums, parity and scrubbing come with the integrity layer (not built \
                 yet); log records and shadow pages carry CRC-32C checked on recovery",
            ),
        ];
        let store = vec![
            kv("shards", st.shards),
            kv("operations_logged", st.operations),
            kv("arena_bytes", st.arena_bytes),
            kv("live_bytes", st.live_bytes),
            kv("slot_capacity_bytes", st.slot_capacity_bytes),
            kv("log_swaps", st.log_swaps),
            kv("data_zone_blocks_in_use", self.store.zone_blocks_in_use()),
        ];
        let keys = self.store.dbsize().unwrap_or(0);
        let mut keyspace = Vec::new();
        if keys > 0 {
            keyspace.push(kv("db0", format!("keys={keys},expires=0,avg_ttl=0")));
        }
        vec![
            ("Persistence".into(), persistence),
            ("Integrity".into(), integrity),
            ("Store".into(), store),
            ("Keyspace".into(), keyspace),
        ]
    }
    fn shutdown(&self) -> BackendResult<()> {
        self.store.close().map_err(be)
    }
}

fn parse_durability(s: &str) -> Result<ForcePolicy> {
    match s {
        "always" => Ok(ForcePolicy::Sync),
        _ => match s.strip_prefix("frequency:").map(str::parse::<u64>) {
            Some(Ok(f)) if f >= 1 => Ok(ForcePolicy::Frequency(f)),
            _ => bail!("--durability must be `always` or `frequency:F` with F >= 1, not `{s}`"),
        },
    }
}

/// Run the server until it is shut down.
pub fn run(a: &ServeArgs) -> Result<Outcome> {
    let policy = parse_durability(&a.durability)?;
    let order = replication::FlushOrder::parse(&a.flush_order).map_err(|e| anyhow::anyhow!(e))?;
    let replicas = match &a.replicas {
        Some(r) => crate::replica_cmd::parse_replicas(r)?,
        None => Vec::new(),
    };
    let backup = a.role == "backup";
    if backup && a.listen.is_none() {
        bail!("--role backup needs --listen ADDR (the address its primary connects to)");
    }
    if !backup && a.listen.is_some() {
        bail!("--listen is for --role backup; a primary connects to its --replicas");
    }
    if backup && a.replicas.is_some() {
        bail!("--replicas is for a primary; a backup learns its peers at PROMOTE");
    }
    if a.write_quorum.is_some() && replicas.is_empty() {
        bail!("--write-quorum needs --replicas");
    }
    if let Some(w) = a.write_quorum {
        replication::Quorum::new(replicas.len(), w).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    if a.backup_timeout_ms == 0 {
        bail!("--backup-timeout-ms must be at least 1");
    }
    let repl = crate::replica_cmd::ReplConfig {
        replicas: replicas.clone(),
        write_quorum: a.write_quorum,
        timeout: std::time::Duration::from_millis(a.backup_timeout_ms),
        log_bytes: a.repl_log_mib.max(1) << 20,
        order,
        dir: a.dir.clone(),
    };
    if a.shards == 0 || a.shards > dipper::layout::SHARDS_MAX {
        bail!("--shards must be in 1..={}", dipper::layout::SHARDS_MAX);
    }
    let config = Config {
        shards: a.shards,
        log_bytes: a.log_mib.max(1) << 20,
        slot_bytes: a.slot_mib.max(1) << 20,
        policy,
        ..Config::default()
    };
    if backup || !replicas.is_empty() {
        crate::replica_cmd::fresh_store(&a.dir)?;
    }
    eprintln!("kavach: opening the store in {}", a.dir.display());
    let (store, opened) = Store::open_dir(&a.dir, config)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("cannot open the store in {}", a.dir.display()))?;
    let r = &opened.recovery;
    if opened.created {
        eprintln!("kavach: created {}", opened.path.display());
    } else {
        eprintln!(
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
    let store_backend: Arc<dyn Backend> = Arc::new(StoreBackend {
        store,
        durability: a.durability.clone(),
    });
    let backend: Arc<dyn Backend> = if backup {
        let listen = a.listen.as_deref().unwrap_or_default();
        Arc::new(crate::replica_cmd::Replicated::backup(
            store_backend,
            repl,
            listen,
        )?)
    } else if !replicas.is_empty() {
        Arc::new(crate::replica_cmd::Replicated::primary(
            store_backend,
            repl,
        )?)
    } else {
        store_backend
    };
    let mut cfg = server::Config {
        bind: a.bind,
        port: a.port,
        max_clients: a.maxclients.max(1),
        durability: a.durability.clone(),
        ..server::Config::default()
    };
    if let Some(w) = a.workers {
        cfg.workers = w.max(1);
    }
    let srv = server::Server::bind(cfg, backend.clone())
        .with_context(|| format!("cannot listen on {}:{}", a.bind, a.port))?;
    server::install_signal_handlers(&srv.handle()).context("cannot install signal handlers")?;
    eprintln!(
        "kavach: listening on {} (durability {}); stop with Ctrl-C, SIGTERM or SHUTDOWN",
        srv.local_addr(),
        a.durability
    );
    let summary = srv.run().context("the server failed")?;
    match &summary.backend_shutdown {
        Ok(()) => eprintln!(
            "kavach: shut down cleanly after {} commands on {} connections",
            summary.commands_processed, summary.connections_accepted
        ),
        Err(e) => bail!("the store did not close cleanly: {e}"),
    }
    Ok(Outcome::Ok)
}
