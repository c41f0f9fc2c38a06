//! Replicated `kavach serve`: a primary whose writes are acknowledged after W backups persisted
//! them, and backups that hold a copy of the replication log and answer reads of what it holds.
//!
//! The replication log (`DIR/replica.pool`) is the truth: every write is encoded as an
//! operation record, appended and forced through the [`Replicator`] (the backups persist it,
//! then the primary), and only then applied to the local store and acknowledged. At start (and
//! after PROMOTE) the store is emptied and rebuilt by replaying the log, so a primary whose
//! copy was repaired never keeps a write the chosen history does not have. A backup applies
//! the records its primary says are committed, so its reads never show a write that could
//! still be lost.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use log::{Follower, ForcePolicy, Log};
use pmem::{Mapping, Uuid};
use replication::host::{FileHost, REPLICA_FILE, create_copy_file};
use replication::tcp::{TcpPeers, serve_backup};
use replication::{
    Copy, FlushOrder, Host, Quorum, RecoverOptions, Recovered, Repair, Replicator, Request,
    Response,
};
use server::backend::{Backend, BackendError, BackendResult, Bytes, InfoSection, SetOptions};
use server::oplog::Op;

type M = Arc<Mapping>;

/// Replication settings of `kavach serve`.
#[derive(Debug, Clone)]
pub struct ReplConfig {
    /// Backup addresses (primary) — empty for a backup until promoted.
    pub replicas: Vec<String>,
    /// W.
    pub write_quorum: Option<usize>,
    /// How long a backup may take to answer before it is dropped.
    pub timeout: Duration,
    /// Region size of a new replication log.
    pub log_bytes: u64,
    /// Flush order.
    pub order: FlushOrder,
    /// The store's directory (the log copy is `DIR/replica.pool`).
    pub dir: PathBuf,
}

/// The default write quorum: enough backups that an acknowledged write is on a majority of
/// the copies (the primary's included).
pub fn default_write_quorum(backups: usize) -> usize {
    (backups.div_ceil(2)).max(usize::from(backups > 0))
}

/// Parse `host:port,host:port`.
pub fn parse_replicas(s: &str) -> Result<Vec<String>> {
    let v: Vec<String> = s
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(String::from)
        .collect();
    for a in &v {
        if !a.contains(':') {
            bail!("replica address `{a}` must be host:port");
        }
    }
    if v.is_empty() {
        bail!("--replicas needs at least one host:port");
    }
    Ok(v)
}

// ---------------------------------------------------------------------------------------------
// The replicated backend.

struct PrimaryState {
    log: Log<M>,
    rep: Arc<Replicator<TcpPeers>>,
    recovered: Recovered,
    heartbeat: Heartbeat,
    /// Keeps the pool of the log copy open.
    _pool: PoolHold,
}

/// Tells idle backups the committed LSN every [`HEARTBEAT`], and notices dead ones.
struct Heartbeat {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// How often an idle primary tells its backups what is committed.
const HEARTBEAT: Duration = Duration::from_millis(200);

impl Heartbeat {
    fn start(rep: &Arc<Replicator<TcpPeers>>) -> Heartbeat {
        let stop = Arc::new(AtomicBool::new(false));
        let (r, s) = (Arc::clone(rep), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("kv-heartbeat".into())
            .spawn(move || {
                while !s.load(Ordering::Acquire) {
                    std::thread::sleep(HEARTBEAT);
                    r.heartbeat();
                }
            })
            .ok();
        Heartbeat { stop, thread }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

enum PoolHold {
    Pool(#[allow(dead_code)] Box<pmem::Pool<M>>),
    Host(#[allow(dead_code)] Box<FileHost>),
}

impl PoolHold {
    /// Close the log copy's pool cleanly.
    fn close(self) -> std::result::Result<(), String> {
        match self {
            PoolHold::Pool(pool) => pool.close().map(drop).map_err(|e| e.to_string()),
            PoolHold::Host(h) => h.close(),
        }
    }
}

impl PrimaryState {
    /// Stop the heartbeat, close the log and its pool; the first error.
    fn close(self) -> std::result::Result<(), String> {
        let PrimaryState {
            log,
            _pool,
            heartbeat,
            ..
        } = self;
        drop(heartbeat);
        let closed = log.close().map(drop).map_err(|e| e.to_string());
        let pool = _pool.close();
        closed.and(pool)
    }
}

/// Close a backup's host if nothing else holds it (a start that failed).
fn close_host(host: Arc<Mutex<FileHost>>) {
    if let Ok(m) = Arc::try_unwrap(host)
        && let Err(e) = m.into_inner().unwrap_or_else(|p| p.into_inner()).close()
    {
        server::say!("kavach: warning: closing the log copy: {e}");
    }
}

struct BackupState {
    host: Arc<Mutex<FileHost>>,
    stop: Arc<AtomicBool>,
    listen: String,
    threads: Vec<JoinHandle<()>>,
}

enum Mode {
    Primary(Box<PrimaryState>),
    Backup(BackupState),
    Stopped,
}

/// A store whose writes go through the replicated log first.
pub struct Replicated {
    inner: Arc<dyn Backend>,
    mode: RwLock<Mode>,
    order: Mutex<()>,
    cfg: ReplConfig,
    applied: Arc<AtomicU64>,
    apply_error: Arc<Mutex<Option<String>>>,
    /// Set when a transaction's effects were applied to the store but could not be logged:
    /// the store is ahead of the replicated log, so everything is refused until a restart
    /// rebuilds it from the log.
    diverged: Mutex<Option<String>>,
}

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn kv(name: &str, value: impl ToString) -> (String, String) {
    (name.to_string(), value.to_string())
}

/// Where [`fresh_store`] moves the old store view until the new one serves (then it is
/// removed; a start that fails puts it back).
pub const STORE_VIEW_ASIDE: &str = "kavach.pool.previous";

/// Prepare `dir` for a replicated role: the store there is only a view of the replicated log
/// (rebuilt from it at every start), so a new, empty one is created. Emptying it in place
/// (FLUSHALL) would keep its DRAM arenas at their high-water size, and a store that once came
/// near its capacity could then not take the replay. The old view is moved to
/// [`STORE_VIEW_ASIDE`] (returns whether it was), so that a start that fails can put it back.
///
/// A directory with a store but no replication log copy holds a standalone store: refused,
/// since its keys would be dropped.
pub fn fresh_store(dir: &Path) -> Result<bool> {
    let store = dir.join(dstore::POOL_FILE);
    if !store.exists() {
        return Ok(false);
    }
    if !dir.join(REPLICA_FILE).exists() {
        return Err(crate::outcome::CommandFailed(anyhow::anyhow!(
            "{} holds a standalone store ({}) and no replication log copy ({REPLICA_FILE}): a \
             replicated server rebuilds its store from the replicated log and would drop its \
             keys; use another --dir (or move the store away if it is expendable)",
            dir.display(),
            store.display()
        ))
        .into());
    }
    let aside = dir.join(STORE_VIEW_ASIDE);
    std::fs::rename(&store, &aside).map_err(|e| {
        crate::outcome::CommandFailed(anyhow::anyhow!(
            "cannot move the old store view {} to {}: {e}",
            store.display(),
            aside.display()
        ))
    })?;
    Ok(true)
}

/// What replaying the log into the store did.
struct Replayed {
    applied: u64,
    /// Records the store refused, with the first refusal. Most were refused when written too
    /// (the client got the error); near the store's capacity a fresh store can also refuse a
    /// few it accepted then (its shard hash is seeded differently).
    refused: u64,
    first_refusal: Option<String>,
}

/// Empty the store and replay every record of the log copy into it.
fn rebuild_store(
    inner: &dyn Backend,
    copy_medium: &M,
    base: usize,
    len: usize,
) -> Result<Replayed> {
    inner
        .flushall()
        .map_err(|e| anyhow::anyhow!("cannot empty the store: {e}"))?;
    let mut f = Follower::new(copy_medium, base, len).context("cannot read the log copy")?;
    let mut out = Replayed {
        applied: 0,
        refused: 0,
        first_refusal: None,
    };
    let recs = f
        .read(copy_medium, u64::MAX)
        .context("cannot read the log copy")?;
    for r in recs {
        let op =
            Op::decode(&r.payload).map_err(|e| anyhow::anyhow!("log record LSN {}: {e}", r.lsn))?;
        // A store that refuses for want of room may find it after a checkpoint (a replay
        // runs faster than the checkpoints that reclaim space did when the writes came in).
        let applied = op
            .apply(inner)
            .or_else(|_| inner.save().and_then(|()| op.apply(inner)));
        match applied {
            Ok(()) => out.applied += 1,
            Err(e) => {
                out.refused += 1;
                out.first_refusal
                    .get_or_insert_with(|| format!("LSN {}: {e}", r.lsn));
            }
        }
    }
    Ok(out)
}

fn report_replay(r: &Replayed) {
    server::say!(
        "kavach: store rebuilt from {} replicated records",
        r.applied
    );
    if let Some(first) = &r.first_refusal {
        server::say!(
            "kavach: warning: the store refused {} replicated records; they stay in the log but \
             are not readable here (first: {first})",
            r.refused
        );
    }
}

fn open_pool(path: &Path) -> Result<(pmem::Pool<M>, pmem::Region)> {
    let pool = pmem::Pool::open(
        path,
        &pmem::OpenOptions {
            read_only: false,
            domain: None,
        },
    )
    .with_context(|| format!("cannot open {}", path.display()))?
    .map_medium(Arc::new);
    let region = pool
        .region(replication::host::REGION)
        .cloned()
        .with_context(|| format!("{} has no log region", path.display()))?;
    Ok((pool, region))
}

/// Recover as primary over `copy`, install the replicator, and return the state.
fn become_primary(copy: &mut Copy<M>, cfg: &ReplConfig, hold: PoolHold) -> Result<PrimaryState> {
    let n = cfg.replicas.len();
    let w = cfg.write_quorum.unwrap_or_else(|| default_write_quorum(n));
    let q = Quorum::new(n, w).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut peers = TcpPeers::new(cfg.replicas.clone(), cfg.timeout);
    let t = Instant::now();
    let (log, rec) = match replication::recover(copy, &mut peers, q, &RecoverOptions::default()) {
        Ok(r) => r,
        Err(e) => {
            // Leave the copy closed as it was found (clean flag included), not in use.
            if let Err(c) = hold.close() {
                server::say!("kavach: warning: closing the log copy: {c}");
            }
            return Err(anyhow::anyhow!("{e}").context("replication recovery failed"));
        }
    };
    server::say!(
        "kavach: replication recovered in {} ms: epoch {}, history from {}{}, {} of {} backups live",
        t.elapsed().as_millis(),
        rec.epoch,
        rec.source,
        if rec.rebuilt_local {
            format!(" (local copy rebuilt, {} bytes fetched)", rec.fetched_bytes)
        } else {
            String::new()
        },
        rec.live.len(),
        n
    );
    for (name, r) in &rec.repairs {
        match r {
            Repair::Delta { bytes } => server::say!("kavach:   {name}: caught up ({bytes} bytes)"),
            Repair::Full { bytes } => server::say!("kavach:   {name}: rebuilt ({bytes} bytes)"),
            Repair::Failed { reason } => server::say!("kavach:   {name}: not live: {reason}"),
        }
    }
    let rep = Arc::new(Replicator::new(peers, q, cfg.order, &rec));
    log.set_mirror(Some(rep.clone()));
    Ok(PrimaryState {
        heartbeat: Heartbeat::start(&rep),
        log,
        rep,
        recovered: rec,
        _pool: hold,
    })
}

/// With no local copy: the log's identity (UUID, region length) from the first backup that
/// holds a copy, or `None` (a new log) when every backup answers that it holds none. An error
/// if none holds one and some did not answer: this may be a primary that lost its disk while
/// the backups holding its log are down, and a new log would take their place.
fn probe_backups(cfg: &ReplConfig) -> Result<Option<(Uuid, u64)>> {
    let mut peers = TcpPeers::new(cfg.replicas.clone(), cfg.timeout);
    let mut silent = Vec::new();
    for i in 0..cfg.replicas.len() {
        match replication::peers::call(&mut peers, i, &Request::Probe) {
            Some(Response::Info(Some(info))) => {
                return Ok(Some((Uuid(info.uuid), info.region_len)));
            }
            Some(Response::Info(None)) => {}
            _ => silent.push(cfg.replicas[i].clone()),
        }
    }
    if !silent.is_empty() {
        return Err(crate::outcome::CommandFailed(anyhow::anyhow!(
            "no local log copy in {} and backup(s) {} did not answer: a new replicated log is \
             created only when every backup answers (with no log); start them and retry",
            cfg.dir.display(),
            silent.join(", ")
        ))
        .into());
    }
    Ok(None)
}

/// Open `DIR/replica.pool`, or create it (see [`probe_backups`]): with a backup's log identity
/// (recovery then rebuilds the local copy from the backups), or as a new log.
fn open_or_create_copy(cfg: &ReplConfig) -> Result<(pmem::Pool<M>, Copy<M>)> {
    let path = cfg.dir.join(REPLICA_FILE);
    if path.exists() {
        let (pool, region) = open_pool(&path)?;
        let copy = Copy::new(
            Arc::clone(pool.medium()),
            region.offset as usize,
            region.length as usize,
        );
        return Ok((pool, copy));
    }
    let (uuid, len) = match probe_backups(cfg)? {
        Some(f) => {
            server::say!(
                "kavach: no local log copy; rebuilding it from the backups ({} bytes)",
                f.1
            );
            f
        }
        None => (
            Uuid::random().context("cannot read /dev/urandom")?,
            cfg.log_bytes,
        ),
    };
    create_copy_file(&path, uuid, len).map_err(|e| anyhow::anyhow!("{e}"))
}

impl Replicated {
    /// Start as the primary of `cfg.replicas`: open or create `DIR/replica.pool`, recover, and
    /// rebuild the store from the log.
    pub fn primary(inner: Arc<dyn Backend>, cfg: ReplConfig) -> Result<Replicated> {
        let (pool, mut copy) = open_or_create_copy(&cfg)?;
        let st = become_primary(&mut copy, &cfg, PoolHold::Pool(Box::new(pool)))?;
        let r = match rebuild_store(inner.as_ref(), st.log.medium(), st.log.base(), copy.len()) {
            Ok(r) => r,
            Err(e) => {
                if let Err(c) = st.close() {
                    server::say!("kavach: warning: closing the log copy: {c}");
                }
                return Err(e);
            }
        };
        report_replay(&r);
        Ok(Replicated {
            inner,
            mode: RwLock::new(Mode::Primary(Box::new(st))),
            order: Mutex::new(()),
            applied: Arc::new(AtomicU64::new(0)),
            apply_error: Arc::new(Mutex::new(None)),
            diverged: Mutex::new(None),
            cfg,
        })
    }

    /// Start as a backup: serve the replication protocol on `listener` (bound by the caller
    /// before any file was opened) with the copy in `DIR/replica.pool`, and apply committed
    /// records to the store for reads.
    pub fn backup(
        inner: Arc<dyn Backend>,
        cfg: ReplConfig,
        listener: TcpListener,
    ) -> Result<Replicated> {
        let listen = listener.local_addr().map(|a| a.to_string())?;
        inner
            .flushall()
            .map_err(|e| anyhow::anyhow!("cannot empty the store: {e}"))?;
        let host = FileHost::open(&cfg.dir).map_err(|e| anyhow::anyhow!("{e}"))?;
        let host = Arc::new(Mutex::new(host));
        let stop = Arc::new(AtomicBool::new(false));
        let applied = Arc::new(AtomicU64::new(0));
        let apply_error = Arc::new(Mutex::new(None));
        let server = {
            let (host, stop) = (Arc::clone(&host), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("kv-backup-listen".into())
                .spawn(move || {
                    if let Err(e) = serve_backup(listener, host, stop) {
                        server::say!("kavach: backup listener failed: {e}");
                    }
                })
        };
        let server = match server {
            Ok(t) => t,
            Err(e) => {
                close_host(host);
                return Err(e.into());
            }
        };
        let applier = {
            let (host, stop, inner) = (Arc::clone(&host), Arc::clone(&stop), Arc::clone(&inner));
            let (applied, err) = (Arc::clone(&applied), Arc::clone(&apply_error));
            std::thread::Builder::new()
                .name("kv-backup-apply".into())
                .spawn(move || apply_loop(host, inner, stop, applied, err))
        };
        let applier = match applier {
            Ok(t) => t,
            Err(e) => {
                let host = Self::stop_backup(BackupState {
                    host,
                    stop,
                    listen,
                    threads: vec![server],
                });
                close_host(host);
                return Err(e.into());
            }
        };
        server::say!("kavach: backup: replication protocol on {listen}");
        Ok(Replicated {
            inner,
            mode: RwLock::new(Mode::Backup(BackupState {
                host,
                stop,
                listen,
                threads: vec![server, applier],
            })),
            order: Mutex::new(()),
            applied,
            apply_error,
            diverged: Mutex::new(None),
            cfg,
        })
    }

    fn write<T>(
        &self,
        op: Op,
        apply: impl FnOnce(&dyn Backend) -> BackendResult<T>,
    ) -> BackendResult<T> {
        let _order = guard(&self.order);
        let mode = self.mode.read().unwrap_or_else(|p| p.into_inner());
        match &*mode {
            Mode::Primary(p) => {
                p.log
                    .append(&op.encode(), ForcePolicy::Sync)
                    .map_err(|e| match e {
                        log::LogError::Full { .. } => {
                            BackendError::OutOfSpace(format!("the replication log is full: {e}"))
                        }
                        e => BackendError::Failed(format!(
                            "{e}; restart this primary to recover (writes are refused until then)"
                        )),
                    })?;
                apply(self.inner.as_ref())
            }
            Mode::Backup(b) => Err(BackendError::ReadOnly(format!(
                "You can't write against a backup (replication on {}); write to the primary, \
                 or PROMOTE this one",
                b.listen
            ))),
            Mode::Stopped => Err(BackendError::Failed("the server is shutting down".into())),
        }
    }

    fn replication_info(&self) -> Vec<(String, String)> {
        let mode = self.mode.read().unwrap_or_else(|p| p.into_inner());
        match &*mode {
            Mode::Primary(p) => {
                let s = p.rep.stats();
                let live = s.backups.iter().filter(|b| b.live).count();
                let ls = p.log.stats();
                let mut v = vec![
                    kv("role", "master"),
                    kv("connected_slaves", live),
                    kv("kavach_role", "primary"),
                    kv("epoch", s.epoch),
                    kv("backups", s.backups.len()),
                    kv("backups_live", live),
                    kv("write_quorum", s.quorum.write()),
                    kv("read_quorum", s.quorum.read()),
                    kv("flush_order", s.order.name()),
                    kv("backup_timeout_ms", self.cfg.timeout.as_millis()),
                    kv("committed_lsn", s.committed),
                    kv("log_next_lsn", ls.next_lsn),
                    kv("log_used_bytes", ls.used_bytes),
                    kv("log_ring_bytes", ls.ring_bytes),
                    kv("forces", s.forces),
                    kv("recovered_from", &p.recovered.source),
                    kv("replication_failed", s.failed.as_deref().unwrap_or("no")),
                ];
                for (i, b) in s.backups.iter().enumerate() {
                    v.push(kv(
                        &format!("backup{i}"),
                        format!(
                            "addr={},live={},acked_lsn={},lag={},error={}",
                            b.name,
                            u8::from(b.live),
                            b.acked_lsn,
                            s.committed.saturating_sub(b.acked_lsn),
                            b.last_error.as_deref().unwrap_or("none").replace(',', ";")
                        ),
                    ));
                }
                v
            }
            Mode::Backup(b) => {
                let mut h = guard(&b.host);
                let info = h.copy().and_then(|c| c.info());
                let applied = self.applied.load(Ordering::Acquire);
                let committed = info.map(|i| i.committed).unwrap_or(0);
                vec![
                    kv("role", "slave"),
                    kv("kavach_role", "backup"),
                    kv("listen", &b.listen),
                    kv("has_copy", u8::from(info.is_some())),
                    kv("promised_epoch", info.map(|i| i.promised).unwrap_or(0)),
                    kv("epoch", info.map(|i| i.epoch).unwrap_or(0)),
                    kv("copy_next_lsn", info.map(|i| i.next_lsn).unwrap_or(0)),
                    kv("committed_lsn", committed),
                    kv("applied_lsn", applied),
                    kv("lag", committed.saturating_sub(applied)),
                    kv(
                        "apply_error",
                        guard(&self.apply_error).as_deref().unwrap_or("none"),
                    ),
                ]
            }
            Mode::Stopped => vec![kv("role", "stopped")],
        }
    }

    /// Stop a backup's threads and return its host. The connection threads `serve_backup`
    /// starts are not joined, but each holds a clone of the host until it notices `stop`
    /// (within its idle poll, 200 ms) or its primary disconnects: wait for them (up to 5 s),
    /// or PROMOTE with a primary still connected fails with "the backup host is still in use".
    fn stop_backup(b: BackupState) -> Arc<Mutex<FileHost>> {
        b.stop.store(true, Ordering::Release);
        for t in b.threads {
            let _ = t.join();
        }
        let until = Instant::now() + Duration::from_secs(5);
        while Arc::strong_count(&b.host) > 1 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        b.host
    }
}

/// A backup's applier: every few milliseconds, apply the records up to the LSN the primary
/// says is committed.
fn apply_loop(
    host: Arc<Mutex<FileHost>>,
    inner: Arc<dyn Backend>,
    stop: Arc<AtomicBool>,
    applied: Arc<AtomicU64>,
    err: Arc<Mutex<Option<String>>>,
) {
    let mut follower: Option<Follower> = None;
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(10));
        let batch = {
            let mut h = guard(&host);
            let Some(c) = h.copy() else { continue };
            let committed = c.committed();
            if committed == 0 {
                continue;
            }
            if follower.is_none() {
                follower = Follower::new(c.medium(), c.base(), c.len()).ok();
            }
            let Some(f) = follower.as_mut() else { continue };
            match f.read(c.medium(), committed) {
                Ok(b) => b,
                Err(e) => {
                    *guard(&err) = Some(e.to_string());
                    follower = None;
                    continue;
                }
            }
        };
        for r in batch {
            match Op::decode(&r.payload) {
                Ok(op) => {
                    if let Err(e) = op.apply(inner.as_ref()) {
                        *guard(&err) = Some(format!("LSN {}: {e}", r.lsn));
                    }
                }
                Err(e) => *guard(&err) = Some(format!("LSN {}: {e}", r.lsn)),
            }
            applied.store(r.lsn, Ordering::Release);
        }
    }
}

/// A transaction of the store that keeps what it applied, for the replicated log.
struct Capture<'t> {
    inner: &'t mut dyn model::Txn,
    effects: Vec<model::Effect>,
}

model::forward_view!(Capture<'_>, inner);

impl model::Txn for Capture<'_> {
    fn apply(&mut self, effects: Vec<model::Effect>) -> model::ModelResult<()> {
        self.inner.apply(effects.clone())?;
        self.effects.extend(effects);
        Ok(())
    }
}

impl model::Keyspace for Replicated {
    /// Reads go to the store. A write runs in the store's transaction (its locks held), and
    /// before the transaction ends, what it applied is appended to the replicated log as one
    /// EFFECTS record and forced (acknowledged by the write quorum): a backup, and a primary
    /// rebuilding its store, replay the whole transaction or none of it.
    fn transact(
        &self,
        scope: model::Scope<'_>,
        write: bool,
        body: &mut dyn FnMut(&mut dyn model::Txn) -> model::ModelResult<()>,
    ) -> model::ModelResult<()> {
        use model::ModelError;
        if let Some(why) = guard(&self.diverged).clone() {
            return Err(ModelError::Failed(why));
        }
        let inner = self.inner.keyspace().ok_or_else(|| {
            ModelError::Failed("the store behind replication has no data model".into())
        })?;
        if !write {
            return inner.transact(scope, false, body);
        }
        let _order = guard(&self.order);
        let mode = self.mode.read().unwrap_or_else(|p| p.into_inner());
        let log = match &*mode {
            Mode::Primary(p) => &p.log,
            Mode::Backup(b) => {
                return Err(ModelError::ReadOnly(format!(
                    "You can't write against a backup (replication on {}); write to the \
                     primary, or PROMOTE this one",
                    b.listen
                )));
            }
            Mode::Stopped => return Err(ModelError::Failed("the server is shutting down".into())),
        };
        let mut logged: model::ModelResult<()> = Ok(());
        inner.transact(scope, true, &mut |t| {
            let mut cap = Capture {
                inner: t,
                effects: Vec::new(),
            };
            let result = body(&mut cap);
            if !cap.effects.is_empty() {
                let record = Op::Effects(std::mem::take(&mut cap.effects)).encode();
                if let Err(e) = log.append(&record, ForcePolicy::Sync) {
                    let why = format!(
                        "a write was applied but not replicated ({e}); restart this primary \
                         to rebuild its store from the replicated log (everything is refused \
                         until then)"
                    );
                    *guard(&self.diverged) = Some(why.clone());
                    logged = Err(match e {
                        log::LogError::Full { .. } => {
                            ModelError::OutOfSpace(format!("the replication log is full: {e}"))
                        }
                        _ => ModelError::Failed(why),
                    });
                }
            }
            result
        })?;
        logged
    }
    fn scan(
        &self,
        db: model::Db,
        cursor: u64,
        count: usize,
    ) -> model::ModelResult<(u64, Vec<model::KeyInfo>)> {
        self.data()?.scan(db, cursor, count)
    }
    fn dbsize(&self, db: model::Db) -> model::ModelResult<u64> {
        self.data()?.dbsize(db)
    }
    fn random_key(&self, db: model::Db) -> model::ModelResult<Option<Bytes>> {
        self.data()?.random_key(db)
    }
    fn expired(
        &self,
        cursor: u64,
        limit: usize,
    ) -> model::ModelResult<(u64, Vec<(model::Db, Bytes)>)> {
        self.data()?.expired(cursor, limit)
    }
    fn used_bytes(&self) -> u64 {
        self.inner.keyspace().map_or(0, |k| k.used_bytes())
    }
}

impl Replicated {
    /// The store's data model, unless a failed write left it ahead of the replicated log.
    fn data(&self) -> model::ModelResult<&dyn model::Keyspace> {
        if let Some(why) = guard(&self.diverged).clone() {
            return Err(model::ModelError::Failed(why));
        }
        self.inner.keyspace().ok_or_else(|| {
            model::ModelError::Failed("the store behind replication has no data model".into())
        })
    }
}

impl Backend for Replicated {
    /// WAIT: the backups whose acknowledged LSN covers every record logged before the call,
    /// polled until `replicas` of them do or the timeout passes (a backup gets each force as
    /// it happens, so the first look usually answers).
    fn wait_replicas(&self, replicas: u64, timeout: Option<Duration>) -> BackendResult<u64> {
        let started = Instant::now();
        let target = {
            let mode = self.mode.read().unwrap_or_else(|p| p.into_inner());
            match &*mode {
                Mode::Primary(p) => p.log.stats().next_lsn.saturating_sub(1),
                _ => return Ok(0),
            }
        };
        loop {
            let held = {
                let mode = self.mode.read().unwrap_or_else(|p| p.into_inner());
                let Mode::Primary(p) = &*mode else {
                    return Ok(0);
                };
                p.rep
                    .stats()
                    .backups
                    .iter()
                    .filter(|b| b.live && b.acked_lsn >= target)
                    .count() as u64
            };
            if held >= replicas || timeout.is_some_and(|t| started.elapsed() >= t) {
                return Ok(held);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    fn keyspace(&self) -> Option<&dyn model::Keyspace> {
        // Only when the store has one (a test backend may not).
        self.inner.keyspace().map(|_| self as &dyn model::Keyspace)
    }
    fn set(&self, key: &[u8], value: &[u8], opts: &SetOptions) -> BackendResult<bool> {
        let op = Op::Set {
            key: key.to_vec(),
            value: value.to_vec(),
            opts: opts.clone(),
        };
        self.write(op, |b| b.set(key, value, opts))
    }
    fn mset(&self, pairs: &[(&[u8], &[u8])]) -> BackendResult<()> {
        let op = Op::MSet(
            pairs
                .iter()
                .map(|(k, v)| (k.to_vec(), v.to_vec()))
                .collect(),
        );
        self.write(op, |b| b.mset(pairs))
    }
    fn del(&self, keys: &[&[u8]]) -> BackendResult<u64> {
        let op = Op::Del(keys.iter().map(|k| k.to_vec()).collect());
        self.write(op, |b| b.del(keys))
    }
    fn incr_by(&self, key: &[u8], delta: i64) -> BackendResult<i64> {
        self.write(Op::IncrBy(key.to_vec(), delta), |b| b.incr_by(key, delta))
    }
    fn append(&self, key: &[u8], value: &[u8]) -> BackendResult<u64> {
        self.write(Op::Append(key.to_vec(), value.to_vec()), |b| {
            b.append(key, value)
        })
    }
    fn hset(&self, key: &[u8], pairs: &[(&[u8], &[u8])]) -> BackendResult<u64> {
        let p = pairs
            .iter()
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect();
        self.write(Op::HSet(key.to_vec(), p), |b| b.hset(key, pairs))
    }
    fn hdel(&self, key: &[u8], fields: &[&[u8]]) -> BackendResult<u64> {
        let f = fields.iter().map(|x| x.to_vec()).collect();
        self.write(Op::HDel(key.to_vec(), f), |b| b.hdel(key, fields))
    }
    fn zadd(&self, key: &[u8], members: &[(f64, &[u8])]) -> BackendResult<u64> {
        let m = members.iter().map(|(s, x)| (*s, x.to_vec())).collect();
        self.write(Op::ZAdd(key.to_vec(), m), |b| b.zadd(key, members))
    }
    fn zrem(&self, key: &[u8], members: &[&[u8]]) -> BackendResult<u64> {
        let m = members.iter().map(|x| x.to_vec()).collect();
        self.write(Op::ZRem(key.to_vec(), m), |b| b.zrem(key, members))
    }
    fn flushall(&self) -> BackendResult<()> {
        self.write(Op::FlushAll, |b| b.flushall())
    }
    fn save(&self) -> BackendResult<()> {
        self.inner.save()
    }
    fn info(&self) -> Vec<InfoSection> {
        let mut v = self.inner.info();
        v.push(("Replication".into(), self.replication_info()));
        v
    }
    fn shutdown(&self) -> BackendResult<()> {
        let _order = guard(&self.order);
        let old = std::mem::replace(
            &mut *self.mode.write().unwrap_or_else(|p| p.into_inner()),
            Mode::Stopped,
        );
        let mut first_err = None;
        match old {
            Mode::Primary(p) => {
                if let Err(e) = p.close() {
                    first_err = Some(e);
                }
            }
            Mode::Backup(b) => {
                let host = Self::stop_backup(b);
                if let Ok(m) = Arc::try_unwrap(host) {
                    if let Err(e) = m.into_inner().unwrap_or_else(|p| p.into_inner()).close() {
                        first_err = Some(e);
                    }
                }
            }
            Mode::Stopped => {}
        }
        let r = self.inner.shutdown();
        match first_err {
            Some(e) => Err(BackendError::Failed(format!("closing the log copy: {e}"))),
            None => r,
        }
    }
    fn promote(&self, args: &[&[u8]]) -> BackendResult<String> {
        let _order = guard(&self.order);
        let mut mode = self.mode.write().unwrap_or_else(|p| p.into_inner());
        if !matches!(&*mode, Mode::Backup(_)) {
            return Err(BackendError::Refused(
                "PROMOTE: this server is not a backup".into(),
            ));
        }
        let text = |a: &[u8]| String::from_utf8_lossy(a).into_owned();
        let mut cfg = self.cfg.clone();
        if let Some(r) = args.first() {
            cfg.replicas = parse_replicas(&text(r))
                .map_err(|e| BackendError::Refused(format!("PROMOTE: {e}")))?;
        }
        if let Some(w) = args.get(1) {
            cfg.write_quorum = Some(text(w).parse().map_err(|_| {
                BackendError::Refused(format!(
                    "PROMOTE: write quorum `{}` is not a number",
                    text(w)
                ))
            })?);
        }
        if args.len() > 2 {
            return Err(BackendError::Refused(
                "PROMOTE takes at most two arguments: replicas (host:port,...) and the write quorum"
                    .into(),
            ));
        }
        // Refuse what would surely fail while this node can still stay a backup (a failed
        // promotion leaves it stopped): too few copies answer for recovery, or, on a backup no
        // primary ever served (a cluster's first election), a new log would need every backup
        // to answer with none.
        let refuse = |e: String| BackendError::Refused(format!("PROMOTE: {e}; still a backup"));
        let n = cfg.replicas.len();
        let q = Quorum::new(
            n,
            cfg.write_quorum.unwrap_or_else(|| default_write_quorum(n)),
        )
        .map_err(|e| refuse(e.to_string()))?;
        let mut peers = TcpPeers::new(cfg.replicas.clone(), cfg.timeout);
        let answering = (0..n)
            .filter(|&i| {
                matches!(
                    replication::peers::call(&mut peers, i, &Request::Probe),
                    Some(Response::Info(_))
                )
            })
            .count();
        if answering + 1 < q.read() {
            return Err(refuse(format!(
                "{answering} of {n} backups answer; recovery needs {} of {} copies",
                q.read(),
                q.copies()
            )));
        }
        if let Mode::Backup(b) = &*mode
            && guard(&b.host).copy().is_none()
        {
            probe_backups(&cfg).map_err(|e| refuse(format!("{e:#}")))?;
        }
        let Mode::Backup(b) = std::mem::replace(&mut *mode, Mode::Stopped) else {
            unreachable!("checked above");
        };
        let listen = b.listen.clone();
        let host = Self::stop_backup(b);
        let result = (|| -> Result<PrimaryState> {
            let mut h = Arc::try_unwrap(host)
                .map_err(|_| anyhow::anyhow!("the backup host is still in use"))?
                .into_inner()
                .unwrap_or_else(|p| p.into_inner());
            let (mut copy, hold) = match h.copy() {
                Some(c) => (
                    Copy::new(Arc::clone(c.medium()), c.base(), c.len()),
                    PoolHold::Host(Box::new(h)),
                ),
                None => {
                    // Never served by a primary (a cluster's first election): the same rule as
                    // a primary started with no copy, a new log only if no backup holds one.
                    h.close().map_err(|e| anyhow::anyhow!("{e}"))?;
                    let (pool, copy) = open_or_create_copy(&cfg)?;
                    (copy, PoolHold::Pool(Box::new(pool)))
                }
            };
            let st = become_primary(&mut copy, &cfg, hold)?;
            let r = rebuild_store(
                self.inner.as_ref(),
                st.log.medium(),
                st.log.base(),
                copy.len(),
            )?;
            server::say!("kavach: promoted");
            report_replay(&r);
            Ok(st)
        })();
        match result {
            Ok(st) => {
                let line = format!(
                    "promoted: epoch {}, history from {}, {} of {} backups live",
                    st.recovered.epoch,
                    st.recovered.source,
                    st.recovered.live.len(),
                    cfg.replicas.len()
                );
                *mode = Mode::Primary(Box::new(st));
                Ok(line)
            }
            Err(e) => {
                // Serving nothing is safer than serving a copy that is half promoted: the
                // operator restarts this node (as backup or primary) after fixing the cause.
                Err(BackendError::Failed(format!(
                    "PROMOTE failed ({e:#}); replication stopped on {listen}, restart this node"
                )))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// `kavach promote`.

/// Make a running backup the primary (manual failover).
///
/// Sends PROMOTE to the backup's RESP port. The backup stops taking replication traffic,
/// recovers as primary with the given backups (it needs a majority of all copies, its own
/// included), takes a new epoch so that the old primary's writes are refused everywhere, repairs
/// the other copies, rebuilds its store from the log, and starts accepting writes. Stop the old
/// primary first, or at least make sure clients stop writing to it: its writes fail once a
/// majority follows the new epoch.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example (backups on 7001 and 7002, RESP ports 6380 and 6381):\n  \
    kavach promote --port 6380 --replicas 127.0.0.1:7002 --write-quorum 1"
)]
pub struct PromoteArgs {
    /// The backup's RESP host.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// The backup's RESP port.
    #[arg(long)]
    port: u16,
    /// The new primary's backups (their --listen addresses): usually the other backups, and
    /// the old primary once it is restarted as a backup.
    #[arg(long, value_name = "ADDR,ADDR")]
    replicas: Option<String>,
    /// Backups that must persist each write.
    #[arg(long, value_name = "W")]
    write_quorum: Option<usize>,
    /// Seconds to wait for the answer (recovery may copy the whole log), at least 1.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    timeout: u64,
    /// Print the answer as JSON.
    #[arg(long)]
    json: bool,
}

/// Run `kavach promote`.
pub fn run_promote(a: &PromoteArgs) -> Result<crate::outcome::Outcome> {
    let mut args: Vec<String> = vec!["PROMOTE".into()];
    if let Some(r) = &a.replicas {
        args.push(parse_replicas(r)?.join(","));
    }
    if let Some(w) = a.write_quorum {
        if a.replicas.is_none() {
            bail!("--write-quorum needs --replicas");
        }
        args.push(w.to_string());
    }
    let addr = format!("{}:{}", a.host, a.port);
    let answer = resp_call(&addr, &args, Duration::from_secs(a.timeout))?;
    let (ok, text) = match &answer {
        Ok(t) => (true, t.as_str()),
        Err(t) => (false, t.as_str()),
    };
    if a.json {
        crate::outcome::print_json(
            &serde_json::json!({ "ok": ok, "server": addr, "answer": text }),
        )?;
    } else if ok {
        println!("{addr}: {text}");
    }
    if !ok {
        return Err(
            crate::outcome::CommandFailed(anyhow::anyhow!("{addr} refused: {text}")).into(),
        );
    }
    Ok(crate::outcome::Outcome::Ok)
}

/// Send one RESP command to `addr` and read its answer: `Ok` with a simple or bulk string,
/// `Err` with an error reply's text. Connection failures are `CommandFailed`.
pub(crate) fn resp_call(
    addr: &str,
    args: &[String],
    timeout: Duration,
) -> Result<std::result::Result<String, String>> {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| {
        crate::outcome::CommandFailed(anyhow::anyhow!("cannot connect to {addr}: {e}"))
    })?;
    s.set_read_timeout(Some(timeout))?;
    let mut req = format!("*{}\r\n", args.len());
    for x in args {
        req.push_str(&format!("${}\r\n{x}\r\n", x.len()));
    }
    s.write_all(req.as_bytes())?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line)
        .with_context(|| format!("no answer from {addr}"))?;
    let line = line.trim_end();
    Ok(match line.split_at_checked(1) {
        Some(("+", t)) => Ok(t.to_string()),
        Some(("-", t)) => Err(t.to_string()),
        Some(("$", n)) => {
            let n: usize = n
                .parse()
                .map_err(|_| anyhow::anyhow!("{addr}: bad bulk length `{n}`"))?;
            if n > 64 << 20 {
                bail!("{addr}: an answer of {n} bytes");
            }
            let mut b = vec![0; n + 2];
            r.read_exact(&mut b)
                .with_context(|| format!("{addr}: short answer"))?;
            b.truncate(n);
            Ok(String::from_utf8_lossy(&b).into_owned())
        }
        _ => Err(format!("unexpected answer `{line}`")),
    })
}
