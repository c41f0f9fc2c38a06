//! Replicated serving (what `kavach serve --replicas` and `--role backup` start): a primary whose writes are acknowledged after W backups persisted
//! them, and backups that hold a copy of the replication log and answer reads of what it holds.
//!
//! The replication log (`DIR/replica.pool`) is the truth: every write is encoded as an
//! operation record, appended and forced through the [`Replicator`] (the backups persist it,
//! then the primary), and applied to the local store in the same store transaction as the
//! store's applied mark ([`crate::store`]). Each node keeps its store across restarts
//! and replays only the records after its mark. The log is trimmed behind the lowest mark of
//! the primary and its live backups, so its size bounds the writes a backup may fall behind,
//! not the total; a backup whose mark is below the trimmed records gets a snapshot of the
//! primary's store. A backup that was dropped is taken back when it answers again (the primary
//! recovers with it, repairing its copy), and a primary that lost its write quorum refuses
//! writes until enough backups are back, then resumes by itself.
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

use crate::store::{self as rs, BackupStore, Mark};

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
    /// A primary whose replication stopped (write quorum lost, a backup fenced it, a failed
    /// trim): writes are refused with the reason until the keeper recovers with enough
    /// backups.
    Waiting(String),
    Backup(BackupState),
    Stopped,
}

/// A store whose writes go through the replicated log first.
pub struct Replicated {
    inner: Arc<dyn Backend>,
    mode: RwLock<Mode>,
    order: Mutex<()>,
    /// The configuration in force (a PROMOTE brings its own backups and quorum).
    cfg: Mutex<ReplConfig>,
    applied: Arc<AtomicU64>,
    apply_error: Arc<Mutex<Option<String>>>,
    /// Set when a transaction's effects were applied to the store but could not be logged:
    /// the store is ahead of the replicated log, so everything is refused until a restart
    /// rebuilds it from the log.
    diverged: Mutex<Option<String>>,
    /// What the keeper did last (trims, recoveries, snapshots), for INFO.
    keeper: Mutex<KeeperStats>,
    keeper_stop: Arc<AtomicBool>,
    keeper_thread: Mutex<Option<JoinHandle<()>>>,
    /// While a snapshot is sent with writes going on: the keys the writes touched since it
    /// started (see [`Replicated::snapshot_online`]).
    touched: Mutex<Option<Touched>>,
    tracking: AtomicBool,
}

/// Keys written while an online snapshot scans the store.
#[derive(Debug, Default)]
struct Touched {
    keys: std::collections::HashSet<(model::Db, Bytes)>,
    /// A write over the whole keyspace (FLUSHALL, SWAPDB, ...) ran: the scan is void.
    all: bool,
}

/// The keeper's counters.
#[derive(Debug, Default, Clone)]
struct KeeperStats {
    trims: u64,
    trimmed_through: u64,
    recoveries: u64,
    snapshots_sent: u64,
    last_error: Option<String>,
    /// The store cannot follow the log, or another primary took over (see [`STUCK`]): no
    /// more recoveries.
    stuck: bool,
    /// The epoch this node last served as primary.
    epoch: u64,
}

impl std::fmt::Debug for Replicated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let role = match &*self.mode.read().unwrap_or_else(|p| p.into_inner()) {
            Mode::Primary(_) => "primary",
            Mode::Waiting(_) => "primary (waiting for backups)",
            Mode::Backup(_) => "backup",
            Mode::Stopped => "stopped",
        };
        f.debug_struct("Replicated")
            .field("role", &role)
            .field("applied", &self.applied.load(Ordering::Acquire))
            .finish()
    }
}

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn kv(name: &str, value: impl ToString) -> (String, String) {
    (name.to_string(), value.to_string())
}

/// Check that `dir` may hold a replicated node's store: a directory with a store but no
/// replication log copy holds a standalone store, refused (its keys are not in any replicated
/// log, and a replicated node would serve them as if they were).
pub fn check_store_dir(dir: &Path) -> Result<()> {
    let store = dir.join(dstore::POOL_FILE);
    if store.exists() && !dir.join(REPLICA_FILE).exists() {
        return Err(anyhow::anyhow!(
            "{} holds a standalone store ({}) and no replication log copy ({REPLICA_FILE}): \
             its keys are in no replicated log; use another --dir (or move the store away if \
             it is expendable)",
            dir.display(),
            store.display()
        ));
    }
    Ok(())
}

/// How errors that only an operator can resolve begin (the keeper stops retrying).
const STUCK: &str = "store cannot follow the log";

/// What replaying the log into the store did.
struct Replayed {
    /// The store's mark before (`None`: it had none it could use, and was emptied).
    from: Option<u64>,
    applied: u64,
    /// Records the store refused, with the first refusal. Most were refused when written too
    /// (the client got the error); near the store's capacity a rebuilt store can also refuse a
    /// few it accepted then.
    refused: u64,
    first_refusal: Option<String>,
    /// The last LSN applied (the mark now).
    last: u64,
}

/// Bring the store up to the end of the recovered log: replay the records after its applied
/// mark. A store with no usable mark (none, another log's, or past the log's end) is emptied
/// and rebuilt from the whole log, which works only while nothing was trimmed; otherwise the
/// node cannot serve as primary (start it as a backup: it gets a snapshot).
fn catch_up_store(inner: &dyn Backend, log: &Log<M>, len: usize) -> Result<Replayed> {
    let uuid = log.descriptor().log_uuid.0;
    let stats = log.stats();
    let (head, next) = (stats.head_lsn, stats.next_lsn);
    let mut out = Replayed {
        from: None,
        applied: 0,
        refused: 0,
        first_refusal: None,
        last: 0,
    };
    let medium = log.medium();
    let mut f = Follower::new(medium, log.base(), len).context("cannot read the log copy")?;
    let recs = f
        .read(medium, u64::MAX)
        .context("cannot read the log copy")?;
    let from = match inner.keyspace() {
        Some(ks) => {
            let mark = rs::read_mark(ks).map_err(|e| anyhow::anyhow!("{e}"))?;
            // A mark at or past the head must name a record of the log: one that names no
            // record is a write applied here that the chosen history does not hold.
            let held = |m: &Mark| m.lsn + 1 == head || recs.iter().any(|r| r.lsn == m.lsn);
            match mark {
                Some(m) if m.uuid == uuid && m.lsn + 1 >= head && m.lsn < next && held(&m) => {
                    out.from = Some(m.lsn);
                    m.lsn
                }
                _ if head <= 1 => {
                    rs::empty(ks).map_err(|e| anyhow::anyhow!("{e}"))?;
                    0
                }
                m => {
                    return Err(anyhow::anyhow!(
                        "{STUCK}: this node's store {} but the replicated log was trimmed \
                         through LSN {}: it cannot be brought up to date as primary; start it \
                         as a backup (the primary sends it a snapshot) and serve from another \
                         node",
                        match m {
                            Some(m) if m.uuid != uuid => "follows another replicated log".into(),
                            Some(m) if m.lsn + 1 < head =>
                                format!("holds the records up to LSN {}", m.lsn),
                            Some(m) => format!(
                                "holds a write (LSN {}) the recovered history does not",
                                m.lsn
                            ),
                            None => "has no applied mark (it was lost or never written)".into(),
                        },
                        head - 1
                    ));
                }
            }
        }
        None => {
            inner
                .flushall()
                .map_err(|e| anyhow::anyhow!("cannot empty the store: {e}"))?;
            0
        }
    };
    out.last = from;
    for r in recs {
        if r.lsn <= from {
            continue;
        }
        let mark = Mark { uuid, lsn: r.lsn };
        // A store that refuses for want of room may find it after a checkpoint (a replay
        // runs faster than the checkpoints that reclaim space did when the writes came in).
        let applied = rs::apply_record(inner, mark, &r.payload).or_else(|_| {
            inner
                .save()
                .map_err(|e| e.to_string())
                .and_then(|()| rs::apply_record(inner, mark, &r.payload))
        });
        match applied {
            Ok(()) => out.applied += 1,
            Err(e) => {
                out.refused += 1;
                out.first_refusal.get_or_insert(e);
            }
        }
        out.last = r.lsn;
    }
    Ok(out)
}

fn report_replay(r: &Replayed) {
    match r.from {
        Some(l) => server::say!(
            "kavach: store kept (applied through LSN {l}); {} newer replicated records replayed",
            r.applied
        ),
        None => server::say!(
            "kavach: store rebuilt from {} replicated records",
            r.applied
        ),
    }
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
        return Err(anyhow::anyhow!(
            "no local log copy in {} and backup(s) {} did not answer: a new replicated log is \
             created only when every backup answers (with no log); start them and retry",
            cfg.dir.display(),
            silent.join(", ")
        ));
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
    fn with_mode(
        inner: Arc<dyn Backend>,
        cfg: ReplConfig,
        mode: Mode,
        applied: Arc<AtomicU64>,
        apply_error: Arc<Mutex<Option<String>>>,
    ) -> Replicated {
        Replicated {
            inner,
            mode: RwLock::new(mode),
            order: Mutex::new(()),
            cfg: Mutex::new(cfg),
            applied,
            apply_error,
            diverged: Mutex::new(None),
            keeper: Mutex::new(KeeperStats::default()),
            keeper_stop: Arc::new(AtomicBool::new(false)),
            keeper_thread: Mutex::new(None),
            touched: Mutex::new(None),
            tracking: AtomicBool::new(false),
        }
    }

    /// Start as the primary of `cfg.replicas`: open or create `DIR/replica.pool`, recover,
    /// open the store (`open_store`), bring it up to the log's end, and send snapshots to
    /// backups too far behind.
    pub fn primary(
        cfg: ReplConfig,
        open_store: &mut dyn FnMut() -> Result<Arc<dyn Backend>>,
    ) -> Result<Replicated> {
        let (pool, mut copy) = open_or_create_copy(&cfg)?;
        let st = become_primary(&mut copy, &cfg, PoolHold::Pool(Box::new(pool)))?;
        // The store is opened only once the log recovered: a start that cannot recover leaves
        // it as it was.
        let inner = match open_store() {
            Ok(b) => b,
            Err(e) => {
                if let Err(c) = st.close() {
                    server::say!("kavach: warning: closing the log copy: {c}");
                }
                return Err(e);
            }
        };
        let r = match catch_up_store(inner.as_ref(), &st.log, copy.len()) {
            Ok(r) => r,
            Err(e) => {
                if let Err(c) = st.close() {
                    server::say!("kavach: warning: closing the log copy: {c}");
                }
                return Err(e);
            }
        };
        report_replay(&r);
        let me = Replicated::with_mode(
            inner,
            cfg,
            Mode::Stopped,
            Arc::new(AtomicU64::new(r.last)),
            Arc::new(Mutex::new(None)),
        );
        me.snapshot_laggards(&st);
        guard(&me.keeper).epoch = st.recovered.epoch;
        *me.mode.write().unwrap_or_else(|p| p.into_inner()) = Mode::Primary(Box::new(st));
        Ok(me)
    }

    /// Start as a backup: serve the replication protocol on `listener` (bound by the caller
    /// before any file was opened) with the copy in `DIR/replica.pool`, and apply committed
    /// records to the store for reads. The store is kept if its applied mark names the log of
    /// the copy here; otherwise it is emptied (the log or a snapshot fills it).
    pub fn backup(
        inner: Arc<dyn Backend>,
        cfg: ReplConfig,
        listener: TcpListener,
    ) -> Result<Replicated> {
        let listen = listener.local_addr().map(|a| a.to_string())?;
        let mut host = FileHost::open(&cfg.dir).map_err(|e| anyhow::anyhow!("{e}"))?;
        let applied = Arc::new(AtomicU64::new(0));
        let store = Arc::new(BackupStore::new(Arc::clone(&inner), Arc::clone(&applied)));
        let uuid = host.copy().and_then(|c| c.uuid()).map(|u| u.0);
        if let Some(ks) = inner.keyspace() {
            let checked = rs::read_mark(ks).and_then(|mark| match (mark, uuid) {
                (Some(m), Some(u)) if m.uuid == u => {
                    applied.store(m.lsn, Ordering::Release);
                    server::say!("kavach: backup: store kept (applied through LSN {})", m.lsn);
                    Ok(())
                }
                _ => rs::empty(ks),
            });
            if let Err(e) = checked {
                let _ = host.close();
                bail!("{e}");
            }
        } else if let Err(e) = inner.flushall() {
            let _ = host.close();
            bail!("cannot empty the store: {e}");
        }
        host.set_store(Arc::clone(&store) as Arc<dyn replication::host::StoreSink>);
        let host = Arc::new(Mutex::new(host));
        let stop = Arc::new(AtomicBool::new(false));
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
            let (store, err) = (Arc::clone(&store), Arc::clone(&apply_error));
            std::thread::Builder::new()
                .name("kv-backup-apply".into())
                .spawn(move || apply_loop(host, inner, store, stop, err))
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
        Ok(Replicated::with_mode(
            inner,
            cfg,
            Mode::Backup(BackupState {
                host,
                stop,
                listen,
                threads: vec![server, applier],
            }),
            applied,
            apply_error,
        ))
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
                let a = p
                    .log
                    .append(&op.encode(), ForcePolicy::Sync)
                    .map_err(|e| match e {
                        log::LogError::Full { .. } => {
                            BackendError::OutOfSpace(format!("the replication log is full: {e}"))
                        }
                        e => BackendError::Failed(format!(
                            "{e}; writes are refused until this primary recovers with enough \
                             backups (it retries every second)"
                        )),
                    })?;
                let r = apply(self.inner.as_ref());
                // Records of this kind are applied, then marked (a store without the data
                // model keeps no mark and is rebuilt at every start).
                if let Some(ks) = self.inner.keyspace() {
                    let mark = Mark {
                        uuid: p.log.descriptor().log_uuid.0,
                        lsn: a.lsn,
                    };
                    if rs::set_mark(ks, Some(mark)).is_ok() {
                        self.applied.store(a.lsn, Ordering::Release);
                    }
                }
                r
            }
            Mode::Waiting(why) => Err(BackendError::Failed(why.clone())),
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
                    kv("backup_timeout_ms", self.cfg().timeout.as_millis()),
                    kv("committed_lsn", s.committed),
                    kv("log_next_lsn", ls.next_lsn),
                    kv("log_used_bytes", ls.used_bytes),
                    kv("log_ring_bytes", ls.ring_bytes),
                    kv("forces", s.forces),
                    kv("recovered_from", &p.recovered.source),
                    kv("replication_failed", s.failed.as_deref().unwrap_or("no")),
                    kv("applied_lsn", self.applied.load(Ordering::Acquire)),
                    kv("log_head_lsn", ls.head_lsn),
                ];
                v.extend(self.keeper_info());
                for (i, b) in s.backups.iter().enumerate() {
                    v.push(kv(
                        &format!("backup{i}"),
                        format!(
                            "addr={},state={},live={},acked_lsn={},applied_lsn={},lag={},error={}",
                            b.name,
                            if b.live { "live" } else { "dropped" },
                            u8::from(b.live),
                            b.acked_lsn,
                            b.applied_lsn,
                            s.committed.saturating_sub(b.acked_lsn),
                            b.last_error.as_deref().unwrap_or("none").replace(',', ";")
                        ),
                    ));
                }
                v
            }
            Mode::Waiting(why) => {
                let mut v = vec![
                    kv("role", "master"),
                    kv("connected_slaves", 0),
                    kv("kavach_role", "primary"),
                    kv("kavach_state", "waiting for backups"),
                    kv("replication_failed", why),
                    kv("applied_lsn", self.applied.load(Ordering::Acquire)),
                ];
                v.extend(self.keeper_info());
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
                        "kavach_state",
                        if info.is_some_and(|i| applied + 1 < i.start_lsn) {
                            "waiting for a snapshot"
                        } else {
                            "following"
                        },
                    ),
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

/// How many more times a write waits for room in a full replicated log (each wait is the log's
/// full_wait, 1 s) before it fails.
const FULL_RETRIES: usize = 10;

/// How often the keeper trims.
const KEEPER_TICK: Duration = Duration::from_millis(200);
/// How often it looks for dropped backups that answer again.
const REJOIN_EVERY: Duration = Duration::from_secs(1);

impl Replicated {
    /// Start the keeper thread: on a primary it trims the replicated log behind the stores
    /// every [`KEEPER_TICK`] (once half the ring is in use: each trim makes every backup re-read its copy), and every
    /// [`REJOIN_EVERY`] takes back dropped backups that answer again, or recovers a primary
    /// that lost its write quorum once enough backups answer. On a backup it waits (a
    /// PROMOTE makes it a primary).
    pub fn start_keeper(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let stop = Arc::clone(&self.keeper_stop);
        let t = std::thread::Builder::new()
            .name("kv-repl-keeper".into())
            .spawn(move || {
                let mut last_rejoin = Instant::now();
                while !stop.load(Ordering::Acquire) {
                    std::thread::sleep(KEEPER_TICK);
                    let Some(me) = weak.upgrade() else { break };
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    me.trim();
                    if last_rejoin.elapsed() >= REJOIN_EVERY {
                        me.rejoin();
                        last_rejoin = Instant::now();
                    }
                }
            })
            .ok();
        *guard(&self.keeper_thread) = t;
    }

    fn cfg(&self) -> ReplConfig {
        guard(&self.cfg).clone()
    }

    fn stop_keeper(&self) {
        self.keeper_stop.store(true, Ordering::Release);
        let t = guard(&self.keeper_thread).take();
        if let Some(t) = t
            && t.thread().id() != std::thread::current().id()
        {
            let _ = t.join();
        }
    }

    fn keeper_info(&self) -> Vec<(String, String)> {
        let k = guard(&self.keeper).clone();
        vec![
            kv("log_trims", k.trims),
            kv("log_trimmed_through", k.trimmed_through),
            kv("recoveries", k.recoveries),
            kv("snapshots_sent", k.snapshots_sent),
            kv(
                "keeper_error",
                k.last_error.as_deref().unwrap_or("none").replace(',', ";"),
            ),
        ]
    }

    /// Trim the log up to the lowest applied LSN of this store and the live backups' stores.
    fn trim(&self) {
        let mode = self.mode.read().unwrap_or_else(|p| p.into_inner());
        let Mode::Primary(p) = &*mode else { return };
        let s = p.rep.stats();
        if s.failed.is_some() {
            return;
        }
        let mine = self.applied.load(Ordering::Acquire);
        let through = match p.rep.applied_by_live() {
            Some(b) => mine.min(b),
            None if s.backups.is_empty() => mine,
            None => return,
        };
        let ls = p.log.stats();
        if through < ls.head_lsn || through >= ls.next_lsn || ls.used_bytes < ls.ring_bytes / 2 {
            return;
        }
        let r = p.log.cleanup_through(through);
        let mut k = guard(&self.keeper);
        match r {
            Ok(()) => {
                k.trims += 1;
                k.trimmed_through = through;
            }
            Err(e) => k.last_error = Some(format!("trim through LSN {through}: {e}")),
        }
    }

    /// Take back dropped backups that answer again, or resume a primary that lost its write
    /// quorum: recover again (a new epoch; the returning backups' copies are repaired from the
    /// log, and their stores get a snapshot if the log was trimmed past them). Writes wait
    /// while it runs.
    fn rejoin(&self) {
        if guard(&self.keeper).stuck {
            return;
        }
        let mut epoch = guard(&self.keeper).epoch;
        let out: Vec<usize> = {
            let mode = self.mode.read().unwrap_or_else(|p| p.into_inner());
            match &*mode {
                Mode::Primary(p) => {
                    let s = p.rep.stats();
                    epoch = s.epoch;
                    if s.failed.is_some() {
                        (0..s.backups.len()).collect()
                    } else {
                        (0..s.backups.len())
                            .filter(|&i| !s.backups[i].live)
                            .collect()
                    }
                }
                Mode::Waiting(_) => (0..self.cfg().replicas.len()).collect(),
                _ => return,
            }
        };
        if out.is_empty() {
            return;
        }
        let cfg = self.cfg();
        let mut peers = TcpPeers::new(cfg.replicas.clone(), cfg.timeout);
        let mut answering = 0;
        for &i in &out {
            if let Some(Response::Info(info)) =
                replication::peers::call(&mut peers, i, &Request::Probe)
            {
                // A copy that promised a newer epoch follows another primary (a PROMOTE
                // or an election happened while this one was cut off): recovering now
                // would take the cluster back from it. This node stops for good.
                if let Some(info) = info
                    && info.promised > epoch
                {
                    let why = format!(
                        "{STUCK}: backup {} promised epoch {} (this primary held {epoch}): \
                         another primary took over; restart this node as a backup",
                        cfg.replicas[i], info.promised
                    );
                    let _order = guard(&self.order);
                    let mut mode = self.mode.write().unwrap_or_else(|p| p.into_inner());
                    if let Mode::Primary(p) = std::mem::replace(&mut *mode, Mode::Stopped)
                        && let Err(e) = p.close()
                    {
                        server::say!("kavach: warning: closing the log copy: {e}");
                    }
                    server::say!("kavach: error: {why}");
                    let mut k = guard(&self.keeper);
                    k.stuck = true;
                    k.last_error = Some(why.clone());
                    *mode = Mode::Waiting(why);
                    return;
                }
                answering += 1;
            }
        }
        drop(peers);
        let n = cfg.replicas.len();
        let w = cfg.write_quorum.unwrap_or_else(|| default_write_quorum(n));
        let waiting = out.len() == n;
        // Recover only when it can succeed: a backup back, or (replication stopped) enough
        // backups for a majority and the write quorum; each recovery takes a new epoch.
        let needed = if waiting { w.max(n.div_ceil(2)) } else { 1 };
        if answering < needed.max(1) {
            return;
        }
        self.recover_again();
        self.snapshot_online();
    }

    fn recover_again(&self) {
        let _order = guard(&self.order);
        let mut mode = self.mode.write().unwrap_or_else(|p| p.into_inner());
        match std::mem::replace(&mut *mode, Mode::Stopped) {
            Mode::Primary(p) => {
                if let Err(e) = p.close() {
                    server::say!("kavach: warning: closing the log copy: {e}");
                }
            }
            Mode::Waiting(_) => {}
            other => {
                *mode = other;
                return;
            }
        }
        let result = (|| -> Result<PrimaryState> {
            let cfg = self.cfg();
            let (pool, mut copy) = open_or_create_copy(&cfg)?;
            let st = become_primary(&mut copy, &cfg, PoolHold::Pool(Box::new(pool)))?;
            let live = st.rep.stats().backups.iter().filter(|b| b.live).count();
            let w = st.rep.stats().quorum.write();
            let r = if live < w {
                Err(anyhow::anyhow!(
                    "{live} of the {w} backups the write quorum needs are live"
                ))
            } else {
                catch_up_store(self.inner.as_ref(), &st.log, copy.len())
            };
            match r {
                Ok(r) => {
                    report_replay(&r);
                    self.applied.store(r.last, Ordering::Release);
                    *guard(&self.diverged) = None;
                    Ok(st)
                }
                Err(e) => {
                    if let Err(c) = st.close() {
                        server::say!("kavach: warning: closing the log copy: {c}");
                    }
                    Err(e)
                }
            }
        })();
        match result {
            Ok(st) => {
                let mut k = guard(&self.keeper);
                k.recoveries += 1;
                k.epoch = st.recovered.epoch;
                drop(k);
                *mode = Mode::Primary(Box::new(st));
            }
            Err(e) if format!("{e:#}").contains(STUCK) => {
                let why = format!("{e:#}");
                let mut k = guard(&self.keeper);
                k.last_error = Some(why.clone());
                k.stuck = true;
                server::say!("kavach: error: {why}");
                *mode = Mode::Waiting(why);
            }
            Err(e) => {
                let why = format!(
                    "NOREPLICAS not enough backups to write: {e:#}; writes resume by \
                     themselves when enough backups answer"
                );
                guard(&self.keeper).last_error = Some(why.clone());
                *mode = Mode::Waiting(why);
            }
        }
    }

    /// Send a snapshot of the store to every live backup whose store is behind the log's head
    /// (the records it needs were trimmed). Writes must be kept out (the order lock, or
    /// before serving), so the snapshot is the store at its applied LSN.
    fn snapshot_laggards(&self, st: &PrimaryState) {
        let Some(ks) = self.inner.keyspace() else {
            return;
        };
        st.rep.heartbeat();
        let s = st.rep.stats();
        let head = st.log.stats().head_lsn;
        let lsn = self.applied.load(Ordering::Acquire);
        for (i, b) in s.backups.iter().enumerate() {
            if !b.live || b.applied_lsn + 1 >= head {
                continue;
            }
            let t = Instant::now();
            let mut seq = 0;
            let mut bytes = 0;
            let sent = rs::make_snapshot(ks, &mut |data| {
                bytes += data.len();
                let req = Request::Snapshot {
                    epoch: s.epoch,
                    lsn,
                    seq,
                    last: data.is_empty(),
                    data,
                };
                seq += 1;
                st.rep.call(i, &mut std::iter::once(req))
            });
            match sent {
                Ok(keys) => {
                    guard(&self.keeper).snapshots_sent += 1;
                    server::say!(
                        "kavach:   {}: snapshot sent ({keys} keys, {bytes} bytes, LSN {lsn}, {} ms): \
                         its store was at LSN {}, the log starts at {head}",
                        b.name,
                        t.elapsed().as_millis(),
                        b.applied_lsn
                    );
                }
                Err(e) => {
                    server::say!("kavach:   {}: snapshot failed: {e}", b.name);
                    guard(&self.keeper).last_error = Some(format!("snapshot to {}: {e}", b.name));
                }
            }
        }
    }
}

impl Replicated {
    /// Send a snapshot to every live backup whose store is behind the log's head, while writes
    /// go on: scan the store without the order lock (each key as the scan finds it), then,
    /// holding the order lock for as long as it takes to read them, send the keys the writes
    /// touched since the scan began as they are now, and mark the snapshot at the applied LSN
    /// of that moment. A key no write touched holds the same value at the start and at the end,
    /// so the backup ends up with the store at that LSN. Checked: the keys the backup gets
    /// must number as many as the store holds (a key the scan missed would show); if not, or
    /// if a write over the whole keyspace ran meanwhile, the snapshot is sent again with writes
    /// held.
    fn snapshot_online(&self) {
        let Some(ks) = self.inner.keyspace() else {
            return;
        };
        let (targets, epoch, head) = {
            let mode = self.mode.read().unwrap_or_else(|p| p.into_inner());
            let Mode::Primary(p) = &*mode else { return };
            p.rep.heartbeat();
            let s = p.rep.stats();
            let head = p.log.stats().head_lsn;
            let t: Vec<(String, u64)> = s
                .backups
                .iter()
                .filter(|b| b.live && b.applied_lsn + 1 < head)
                .map(|b| (b.name.clone(), b.applied_lsn))
                .collect();
            (t, s.epoch, head)
        };
        let timeout = self.cfg().timeout;
        for (name, was) in targets {
            let t = Instant::now();
            let mut peers = TcpPeers::new(vec![name.clone()], timeout);
            let seq = std::cell::Cell::new(0u64);
            let bytes = std::cell::Cell::new(0usize);
            let mut send = |data: Vec<u8>, lsn: u64, last: bool| -> Result<(), String> {
                bytes.set(bytes.get() + data.len());
                let req = Request::Snapshot {
                    epoch,
                    lsn,
                    seq: seq.get(),
                    last,
                    data,
                };
                seq.set(seq.get() + 1);
                match replication::peers::call(&mut peers, 0, &req) {
                    Some(r) if r.is_ack() => Ok(()),
                    Some(Response::Error(e)) => Err(e),
                    Some(Response::Fenced { promised }) => Err(format!(
                        "promised epoch {promised}: another primary took over"
                    )),
                    Some(_) => Err("unexpected answer".into()),
                    None => Err("no answer".into()),
                }
            };
            {
                let _order = guard(&self.order);
                *guard(&self.touched) = Some(Touched::default());
                self.tracking.store(true, Ordering::Release);
            }
            let mut names = std::collections::HashSet::new();
            let scanned = rs::scan_pieces(ks, Some(&mut names), &mut |d| send(d, 0, false));
            let _order = guard(&self.order);
            self.tracking.store(false, Ordering::Release);
            let touched = guard(&self.touched).take().unwrap_or_default();
            let lsn = self.applied.load(Ordering::Acquire);
            let result = scanned.and_then(|keys| {
                let mut fixed = Vec::new();
                if !touched.all {
                    let list: Vec<(model::Db, &[u8])> = touched
                        .keys
                        .iter()
                        .filter(|(_, k)| !rs::is_mark(k))
                        .map(|(db, k)| (*db, k.as_slice()))
                        .collect();
                    fixed = rs::current_values(ks, &list, true)?;
                    for e in &fixed {
                        match e {
                            model::Effect::Put { db, key, .. } => {
                                names.insert((*db, key.clone()));
                            }
                            model::Effect::Del { db, key } => {
                                names.remove(&(*db, key.clone()));
                            }
                            _ => {}
                        }
                    }
                }
                let held = rs::key_count(ks)?;
                if touched.all || names.len() as u64 != held {
                    // Again from piece 0 (the backup starts over), with writes held.
                    seq.set(0);
                    server::say!(
                        "kavach:   {name}: the online snapshot does not add up ({} keys sent, \
                         {held} held{}); sending it again with writes held",
                        names.len(),
                        if touched.all {
                            ", a whole-keyspace write ran"
                        } else {
                            ""
                        }
                    );
                    let keys = rs::scan_pieces(ks, None, &mut |d| send(d, 0, false))?;
                    send(Vec::new(), lsn, true)?;
                    return Ok((keys, true));
                }
                rs::send_pieces(fixed, &mut |d| send(d, lsn, false))?;
                send(Vec::new(), lsn, true)?;
                Ok((keys, false))
            });
            drop(_order);
            match result {
                Ok((keys, held)) => {
                    guard(&self.keeper).snapshots_sent += 1;
                    server::say!(
                        "kavach:   {name}: snapshot sent ({keys} keys, {} touched meanwhile, \
                         {} bytes, LSN {lsn}, {} ms{}): its store was at LSN {was}, the log \
                         starts at {head}",
                        touched.keys.len(),
                        bytes.get(),
                        t.elapsed().as_millis(),
                        if held {
                            ", writes held"
                        } else {
                            ", writes went on"
                        }
                    );
                }
                Err(e) => {
                    server::say!("kavach:   {name}: snapshot failed: {e}");
                    guard(&self.keeper).last_error = Some(format!("snapshot to {name}: {e}"));
                }
            }
        }
    }
}

/// A backup's applier: every few milliseconds, apply the records after the store's mark up to
/// the LSN the primary says is committed, each with its mark. When the copy's head is past the
/// mark (the records between were trimmed), it waits for a snapshot from the primary.
fn apply_loop(
    host: Arc<Mutex<FileHost>>,
    inner: Arc<dyn Backend>,
    store: Arc<BackupStore>,
    stop: Arc<AtomicBool>,
    err: Arc<Mutex<Option<String>>>,
) {
    use replication::host::StoreSink;
    let mut follower: Option<Follower> = None;
    let mut uuid: Option<[u8; 16]> = None;
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(10));
        let (batch, log_uuid, start_lsn) = {
            let mut h = guard(&host);
            let Some(c) = h.copy() else { continue };
            let Some(u) = c.uuid().map(|u| u.0) else {
                continue;
            };
            let committed = c.committed();
            if committed == 0 {
                continue;
            }
            if uuid != Some(u) {
                // A new copy (the primary initialised one): a store following another log
                // is emptied.
                if uuid.is_some()
                    && let Some(ks) = inner.keyspace()
                {
                    match rs::read_mark(ks) {
                        Ok(Some(m)) if m.uuid == u => {}
                        _ => {
                            if let Err(e) = rs::empty(ks) {
                                *guard(&err) = Some(e);
                                continue;
                            }
                            store.set_applied(0);
                        }
                    }
                }
                uuid = Some(u);
                follower = None;
            }
            if follower.is_none() {
                let Ok(f) = Follower::new(c.medium(), c.base(), c.len()) else {
                    continue;
                };
                if store.applied() + 1 < f.next_lsn() {
                    // Trimmed past this store: only a snapshot brings it back.
                    continue;
                }
                follower = Some(f);
            }
            // Only while a snapshot is in (rare): where the log starts (a walk).
            let start = if store.in_snapshot() {
                Follower::new(c.medium(), c.base(), c.len()).map_or(u64::MAX, |f| f.next_lsn())
            } else {
                u64::MAX
            };
            let read = match follower.as_mut() {
                Some(f) => f.read(c.medium(), committed),
                None => Ok(Vec::new()),
            };
            match read {
                Ok(b) => (b, u, start),
                Err(e) => {
                    // The head may have moved past where the follower was (a repair or a
                    // snapshot): start again from the head.
                    *guard(&err) = Some(e.to_string());
                    follower = None;
                    continue;
                }
            }
        };
        // Records and snapshot pieces are never applied at once. (The host's lock is not held
        // here: a snapshot piece arrives with it held and then takes this one.)
        let mut snapshot = guard(&store.apply_lock);
        if snapshot.is_some() {
            // A snapshot is coming in, or was cut short (its primary failed). One that was cut
            // short is abandoned when the log itself starts at its first record: the store is
            // empty (the first piece emptied it) and the log fills it.
            if start_lsn <= 1 {
                if let Some(ks) = inner.keyspace()
                    && let Err(e) = rs::empty(ks)
                {
                    *guard(&err) = Some(e);
                    continue;
                }
                store.abandon_snapshot(&mut snapshot);
            } else {
                continue;
            }
        }
        let applied = store.applied();
        for r in batch {
            if r.lsn <= applied {
                continue;
            }
            let mark = Mark {
                uuid: log_uuid,
                lsn: r.lsn,
            };
            if let Err(e) = rs::apply_record(inner.as_ref(), mark, &r.payload) {
                *guard(&err) = Some(e);
            }
            store.set_applied(r.lsn);
        }
        drop(snapshot);
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
            Mode::Waiting(why) => return Err(ModelError::Failed(why.clone())),
            Mode::Backup(b) => {
                return Err(ModelError::ReadOnly(format!(
                    "You can't write against a backup (replication on {}); write to the \
                     primary, or PROMOTE this one",
                    b.listen
                )));
            }
            Mode::Stopped => return Err(ModelError::Failed("the server is shutting down".into())),
        };
        // Again under the order lock: a write that queued behind the one that failed must not
        // run its effects on the store when the log can no longer take them (its effects would
        // be in the store with no record to name them).
        if let Some(why) = guard(&self.diverged).clone() {
            return Err(ModelError::Failed(why));
        }
        if log.is_failed() {
            return Err(ModelError::Failed(
                "NOREPLICAS the replicated log stopped taking writes (a write quorum was lost or \
                 another primary took over); writes resume by themselves when this primary \
                 recovers with enough backups"
                    .into(),
            ));
        }
        if self.tracking.load(Ordering::Acquire)
            && let Some(t) = guard(&self.touched).as_mut()
        {
            match scope {
                model::Scope::Keys(keys) => {
                    t.keys.extend(keys.iter().map(|(db, k)| (*db, k.to_vec())));
                }
                model::Scope::All => t.all = true,
            }
        }
        let mut logged: model::ModelResult<()> = Ok(());
        let mut marked = None;
        let uuid = log.descriptor().log_uuid.0;
        // The mark is part of the store's transaction, so the applied mark and the effects are
        // durable together; a whole-keyspace write (FLUSHALL) is marked like any other.
        let with_mark: Vec<(model::Db, &[u8])>;
        let scope = match scope {
            model::Scope::Keys(keys) => {
                with_mark = keys
                    .iter()
                    .copied()
                    .chain(std::iter::once((0, rs::MARK_KEY)))
                    .collect();
                model::Scope::Keys(&with_mark)
            }
            all => all,
        };
        inner.transact(scope, true, &mut |t| {
            let mut cap = Capture {
                inner: t,
                effects: Vec::new(),
            };
            let result = body(&mut cap);
            if !cap.effects.is_empty() {
                let record = Op::Effects(std::mem::take(&mut cap.effects)).encode();
                // Under the order lock only this write reserves: it gets `expected`.
                let expected = log.next_lsn();
                let mut appended = log.append(&record, ForcePolicy::Sync);
                // A full log waits for the keeper's next trim (each try waits up to the log's
                // full_wait for room) rather than fail a write it already applied here.
                for _ in 0..FULL_RETRIES {
                    if !matches!(appended, Err(log::LogError::Full { .. })) {
                        break;
                    }
                    appended = log.append(&record, ForcePolicy::Sync);
                }
                match appended {
                    Ok(a) => {
                        rs::put_mark(cap.inner, Mark { uuid, lsn: a.lsn });
                        marked = Some(a.lsn);
                    }
                    Err(e) => {
                        let reserved = log.next_lsn() > expected;
                        let why = if reserved {
                            // The record is in the local copy but not acknowledged. The mark
                            // names it: the recovery that follows keeps this store only if
                            // the history it chooses holds the record.
                            rs::put_mark(
                                cap.inner,
                                Mark {
                                    uuid,
                                    lsn: expected,
                                },
                            );
                            format!(
                                "NOREPLICAS a write was applied here but its replication \
                                 failed ({e}); reads and writes are refused until this \
                                 primary recovers with enough backups (it retries every \
                                 second)"
                            )
                        } else {
                            // No record at all: the store is ahead of the log. Forget its
                            // mark, so the next start rebuilds it (or takes a snapshot as a
                            // backup) instead of trusting it.
                            let _ = cap.inner.apply(vec![rs::mark_del()]);
                            format!(
                                "a write was applied but not logged ({e}); restart this primary \
                                 to rebuild its store (everything is refused until then)"
                            )
                        };
                        *guard(&self.diverged) = Some(why.clone());
                        logged = Err(match e {
                            log::LogError::Full { .. } => {
                                ModelError::OutOfSpace(format!("the replication log is full: {e}"))
                            }
                            _ => ModelError::Failed(why),
                        });
                    }
                }
            }
            result
        })?;
        if let Some(lsn) = marked {
            self.applied.store(lsn, Ordering::Release);
        }
        logged
    }
    fn scan(
        &self,
        db: model::Db,
        cursor: u64,
        count: usize,
    ) -> model::ModelResult<(u64, Vec<model::KeyInfo>)> {
        let (next, mut keys) = self.data()?.scan(db, cursor, count)?;
        keys.retain(|k| !rs::is_mark(&k.key));
        Ok((next, keys))
    }
    fn dbsize(&self, db: model::Db) -> model::ModelResult<u64> {
        let ks = self.data()?;
        let n = ks.dbsize(db)?;
        let mut hidden = false;
        ks.transact(model::Scope::Keys(&[(db, rs::MARK_KEY)]), false, &mut |t| {
            hidden = t.kind(db, rs::MARK_KEY).is_some();
            Ok(())
        })?;
        Ok(n - u64::from(hidden && n > 0))
    }
    fn random_key(&self, db: model::Db) -> model::ModelResult<Option<Bytes>> {
        let ks = self.data()?;
        if self.dbsize(db)? == 0 {
            return Ok(None);
        }
        // The mark is one key among the rest: a few draws find another one.
        for _ in 0..64 {
            match ks.random_key(db)? {
                Some(k) if rs::is_mark(&k) => continue,
                other => return Ok(other),
            }
        }
        Ok(None)
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
    fn expiring(&self, max_keys: usize) -> model::ModelResult<[u64; model::DATABASES]> {
        // The applied mark has no deadline, so the store's count needs no correction.
        self.data()?.expiring(max_keys)
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
    fn integrity_check(&self, repair: bool) -> BackendResult<String> {
        self.inner.integrity_check(repair)
    }
    fn info(&self) -> Vec<InfoSection> {
        let mut v = self.inner.info();
        v.push(("Replication".into(), self.replication_info()));
        v
    }
    fn shutdown(&self) -> BackendResult<()> {
        self.stop_keeper();
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
            Mode::Waiting(_) | Mode::Stopped => {}
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
        let mut cfg = self.cfg();
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
            let r = match catch_up_store(self.inner.as_ref(), &st.log, copy.len()) {
                Ok(r) => r,
                Err(e) => {
                    if let Err(c) = st.close() {
                        server::say!("kavach: warning: closing the log copy: {c}");
                    }
                    return Err(e);
                }
            };
            server::say!("kavach: promoted");
            report_replay(&r);
            self.applied.store(r.last, Ordering::Release);
            self.snapshot_laggards(&st);
            guard(&self.keeper).epoch = st.recovered.epoch;
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
                *guard(&self.cfg) = cfg;
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
