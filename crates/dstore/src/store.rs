//! The store: DStore's key-value interface over a DIPPER engine.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use crate::error::{StoreError, StoreResult};
use crate::machine::{self, Kv, Outcome, read};
use crate::op::{self, Op, SET_NX, SET_XX};
use crate::protect::{Guarded, ProtectOptions, Protection};
use dipper::{Dipper, DipperError, ForcePolicy, Layout, Options, RecoveryReport};
use pmem::set::{SetOpenOptions, StripedSet};
use pmem::{Corruption, CreateOptions, Mapping, Medium, OpenOptions, Pool};

/// Run `f`, which reads the pool on this thread, and fail with [`StoreError::Integrity`] if
/// the integrity layer refused one of its reads (see [`crate::protect::Guarded`]).
fn verified_reads<R>(f: impl FnOnce() -> StoreResult<R>) -> StoreResult<R> {
    // A record left by an earlier read outside a checked operation is not this one's.
    let _ = crate::protect::take_refused_read();
    let out = f();
    match crate::protect::take_refused_read() {
        Some(r) => Err(r.into()),
        None => out,
    }
}

/// A key and its type name, as SCAN returns them.
pub type KeyAndType = (Vec<u8>, &'static str);

/// Sizes and policies of a store.
#[derive(Debug, Clone)]
pub struct Config {
    /// Shards (fixed at creation).
    pub shards: usize,
    /// Bytes of each operation log (fixed at creation).
    pub log_bytes: u64,
    /// Bytes of each shadow slot at creation; 0: the smallest for `shards`
    /// ([`Config::slot_bytes_min`]). With `grow`, a slot is moved to a larger region when an
    /// image outgrows it; without, this is the store's ceiling.
    pub slot_bytes: u64,
    /// The pool grows with the data (new stores are made growable, and `open_dir` turns a
    /// fixed-size store growable). Off: a fixed-size pool of [`Config::pool_bytes`], as stores
    /// were made before growth existed.
    pub grow: bool,
    /// Writes that may grow the data are refused with Redis's `maxmemory` error while the
    /// bytes in allocated blocks are above this (0: no limit). Changeable while open
    /// ([`Store::set_maxmemory`]).
    pub maxmemory_bytes: u64,
    /// Durability of writes.
    pub policy: ForcePolicy,
    /// Checkpoint when the active log is this full (percent).
    pub checkpoint_at_percent: u8,
    /// Run checkpoints in the background.
    pub background: bool,
    /// Largest key or value accepted.
    pub value_bytes_max: usize,
    /// Bytes of the data zone holding object data (fixed at creation, also in a growable
    /// store).
    pub data_bytes: u64,
    /// A directory (on an SSD) for the object data file (`kavach.objects`): object data
    /// written from now on goes there, out of the pool; `None`: objects stay in the data zone.
    /// A store that has object data in the file must be opened with it.
    pub object_dir: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            shards: 64,
            log_bytes: 16 << 20,
            slot_bytes: 0,
            grow: true,
            maxmemory_bytes: 0,
            policy: ForcePolicy::Sync,
            checkpoint_at_percent: 50,
            background: true,
            value_bytes_max: 64 << 20,
            data_bytes: 4 << 20,
            object_dir: None,
        }
    }
}

impl Config {
    /// Pool bytes a fixed-size store of this configuration needs (regions, headers and
    /// slack). A growable store starts at the smallest pool and grows region by region to
    /// about `2 * log_bytes + 2 * slot + data_bytes` plus the metadata.
    pub fn pool_bytes(&self) -> u64 {
        2 * self.log_bytes + 2 * self.slot_bytes + self.data_bytes + (16 << 20)
    }

    /// Bytes of the pool file of a new growable store: its regions (root, logs, slots, data
    /// zone) one after the other past the metadata.
    pub fn pool_bytes_at_create(&self) -> StoreResult<u64> {
        let page = pmem::layout::PAGE_SIZE as u64;
        let pages = |b: u64| b.next_multiple_of(page);
        Ok(pmem::layout::METADATA_BYTES as u64
            + pages(dipper::layout::ROOT_REGION_BYTES)
            + 2 * pages(self.log_bytes)
            + 2 * self.slot_region_bytes_at_create()?
            + pages(self.data_bytes.max(BLOCK_BYTES)))
    }

    /// Bytes of each slot region of a new store: in a growable pool a table of page frames for
    /// the image a slot of [`Config::slot_bytes_at_create`] would hold (the images' pages live
    /// in frame regions added as the data grows); otherwise the slot itself.
    pub fn slot_region_bytes_at_create(&self) -> StoreResult<u64> {
        let slot = self.slot_bytes_at_create()?;
        if !self.grow {
            return Ok(slot.next_multiple_of(pmem::layout::PAGE_SIZE as u64));
        }
        let pages = dipper::layout::slot_geometry(slot).map_or(1, |(pages, _)| pages);
        Ok(dipper::frames::table_bytes_for(pages))
    }

    /// Bytes of each shadow slot of a new store: `slot_bytes`, or the smallest when it is 0.
    pub fn slot_bytes_at_create(&self) -> StoreResult<u64> {
        if self.slot_bytes == 0 {
            Self::slot_bytes_min(self.shards)
        } else {
            Ok(self.slot_bytes)
        }
    }

    /// The smallest shadow slot (bytes of its region) for a new store of `shards` shards, from
    /// the layout: the slot must hold the image of the empty store after a write on every
    /// shard (each arena grown once, as the arena grows), and the engine must accept writes
    /// into the empty store ([`dipper::engine::admits_growth`]). A smaller slot makes a store
    /// that refuses every write, or whose first checkpoint cannot be written, so that it cannot
    /// be closed or reopened.
    pub fn slot_bytes_min(shards: usize) -> StoreResult<u64> {
        use dipper::Machine;
        let page = dipper::arena::PAGE as u64;
        let mut arena = dipper::Arena::new();
        Kv::new(0, shards).init(0, &mut arena)?;
        let empty = arena.len();
        // Grow it once, as writes do: small blocks until the arena has to extend. Each takes
        // at least 64 bytes of the `empty` ones, so this ends within `empty / 64` blocks.
        for _ in 0..=empty / 64 {
            if arena.len() > empty {
                break;
            }
            arena.alloc(64)?;
        }
        assert!(arena.len() > empty, "an arena grows when it is full");
        let shards = shards as u64;
        let grown_image = shards * arena.len() as u64;
        let empty_image = shards * empty as u64;
        let mut capacity = grown_image.next_multiple_of(page);
        while !dipper::engine::admits_growth(empty_image, capacity) {
            capacity += page;
        }
        let pages = capacity / page;
        let mut len = dipper::layout::SLOT_HEADER_BYTES as u64 + pages * page;
        while dipper::layout::slot_geometry(len).is_none_or(|(cap, _)| cap < pages) {
            len += page;
        }
        Ok(len)
    }

    fn options(&self) -> Options {
        Options {
            policy: self.policy,
            checkpoint_at_percent: self.checkpoint_at_percent,
            replay_threads: 2,
            background: self.background,
            checkpoint_on_close: true,
            full_wait: Duration::from_secs(10),
            flush_every: Duration::from_millis(10),
        }
    }
}

/// A clock in milliseconds since the Unix epoch (injectable for tests).
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    })
}

/// A key-value store on DIPPER.
pub struct Store<M: Medium + Clone + Send + Sync + 'static> {
    engine: Dipper<M, Kv>,
    zone: Zone,
    kv: Kv,
    clock: Clock,
    config: Config,
    report: RecoveryReport,
    opened: Instant,
    path: Option<PathBuf>,
    /// Flush on fail: the medium, the pool's ranges (regions and metadata) and the record's
    /// offset, for the clean close's write-back and marker.
    fof: Option<FofPool<M>>,
    /// The object data file, when objects live out of the pool.
    files: Option<crate::zone::FileObjects>,
    /// Object locks (`olock`, and the short hold of every object write).
    pub(crate) locks: crate::locks::Locks,
    /// Where the active-expiry walk stands (`Keyspace::expired`).
    pub(crate) expiry: std::sync::Mutex<ExpiryPass>,
}

/// The active-expiry walk's passes over the keyspace, so that a keyspace without deadlines is
/// not walked again and again: a pass (cursor 0 back to 0, each call taking up where the last
/// stopped) that saw no deadline while no deadline was written (`Kv::deadline_writes`
/// unchanged) marks the keyspace idle; it stays idle until
/// that count moves. Redis walks only its `expires` dictionary; this store keeps no such set.
#[derive(Debug, Default)]
pub(crate) struct ExpiryPass {
    /// The cursor the walk's last call returned.
    pub next: u64,
    /// The deadline-write count when the current pass began.
    pub writes_at_start: u64,
    /// The current pass began at cursor 0 and every call continued the one before.
    pub whole: bool,
    /// The current pass saw a key with a deadline.
    pub saw_deadline: bool,
    /// The deadline-write count of the last pass that found none: while the count is still
    /// this, a new pass is skipped.
    pub idle_at: Option<u64>,
    /// Buckets walked and passes skipped since the store opened.
    pub buckets_walked: u64,
    pub passes_skipped: u64,
}

/// A flush-on-fail pool: its medium, its ranges (offset, length) and its record's offset.
type FofPool<M> = (M, Vec<(usize, usize)>, usize);

impl<M: Medium + Clone + Send + Sync + 'static> std::fmt::Debug for Store<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

fn seed_of(uuid: &pmem::Uuid) -> u64 {
    let b = uuid.0;
    u64::from_le_bytes(b[..8].try_into().expect("8"))
        ^ u64::from_le_bytes(b[8..].try_into().expect("8")).rotate_left(17)
}

/// Name of the pool file in a store directory.
pub const POOL_FILE: &str = "kavach.pool";

/// What [`Store::open_dir`] did.
#[derive(Debug, Clone)]
pub struct Opened {
    /// The pool file.
    pub path: PathBuf,
    /// It was created now.
    pub created: bool,
    /// What recovery did.
    pub recovery: RecoveryReport,
}

impl Store<Arc<Mapping>> {
    /// Open the store in `dir`, creating the directory and the pool if missing.
    pub fn open_dir(dir: &Path, config: Config) -> StoreResult<(Self, Opened)> {
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::Failed(format!("cannot create {}: {e}", dir.display())))?;
        let path = dir.join(POOL_FILE);
        let created = !path.exists();
        let store = if created {
            let config = Config {
                slot_bytes: config.slot_bytes_at_create()?,
                ..config
            };
            let made = if config.grow {
                // The smallest pool: creating the regions grows it to what they need.
                Pool::create_growable(
                    &path,
                    &CreateOptions {
                        size: pmem::layout::POOL_SIZE_MIN,
                        domain: None,
                    },
                )
            } else {
                Pool::create(
                    &path,
                    &CreateOptions {
                        size: config.pool_bytes(),
                        domain: None,
                    },
                )
            };
            let pool = made.map_err(|e| {
                StoreError::Failed(format!("cannot create {}: {e}", path.display()))
            })?;
            match Self::create(pool.map_medium(Arc::new), config) {
                Ok(s) => s,
                Err(e) => {
                    let _ = std::fs::remove_file(&path);
                    return Err(e);
                }
            }
        } else {
            Self::open(open_pool_file(&path, &config)?.map_medium(Arc::new), config)?
        };
        let mut store = store;
        store.path = Some(path.clone());
        let recovery = store.report.clone();
        Ok((
            store,
            Opened {
                path,
                created,
                recovery,
            },
        ))
    }
}

/// Open the pool file of an existing store (making a fixed-size store's pool growable when
/// `config.grow` says so).
fn open_pool_file(path: &Path, config: &Config) -> StoreResult<Pool<Mapping>> {
    let mut pool = Pool::open(path, &OpenOptions::default())
        .map_err(|e| StoreError::Failed(format!("cannot open {}: {e}", path.display())))?;
    // A store made with fixed-size slots: from now on its pool grows (a header feature
    // bit; builds without growth then refuse the pool). Only a pool that holds a store.
    if config.grow
        && !pool.growable()
        && pool.region(dipper::layout::ROOT_REGION).is_some()
        && pool.region(DATA_REGION).is_some()
        && let Err(e) = pool.make_growable_file()
    {
        let _ = pool.close_unchanged();
        return Err(StoreError::Failed(format!(
            "cannot make {} growable: {e}",
            path.display()
        )));
    }
    Ok(pool)
}

/// A store opened with [`Store::open_dir_protected`]: the medium under it routes covered
/// writes through the integrity layer in eager mode, and only forwards otherwise.
pub type GuardedStore = Store<Guarded<Arc<Mapping>>>;

/// What [`Store::open_protected`] returns: the store, its protection (`None`: mode off) and
/// what a user must know.
pub type ProtectedParts<M> = (Store<Guarded<M>>, Option<Arc<Protection<M>>>, Vec<String>);

/// What [`Store::open_dir_protected`] opened besides the store.
#[derive(Debug)]
pub struct ProtectedOpened {
    /// What `open_dir` reports.
    pub opened: Opened,
    /// The protection in force (`None`: mode off).
    pub protection: Option<Arc<Protection<Arc<Mapping>>>>,
    /// What laying out and opening the protection did that a user must know.
    pub notes: Vec<String>,
}

impl GuardedStore {
    /// Open the store in `dir` (creating it if missing) with its regions protected by the
    /// integrity layer as `protect` says (see [`crate::protect`]). The protection is opened
    /// before the store, so that recovery's writes are covered.
    pub fn open_dir_protected(
        dir: &Path,
        config: Config,
        protect: &ProtectOptions,
    ) -> StoreResult<(Self, ProtectedOpened)> {
        let path = dir.join(POOL_FILE);
        let created = !path.exists();
        if created {
            let (made, _) = Store::<Arc<Mapping>>::open_dir(dir, config.clone())?;
            made.close()?;
            drop(made);
        }
        let pool = open_pool_file(&path, &config)?.map_medium(Arc::new);
        let mapping = pool.medium().clone();
        let tracker = |offset: u64, len: u64| {
            integrity::tracker::best_for(Arc::clone(&mapping), offset as usize, len as usize)
                .map_err(|e| {
                    StoreError::Failed(format!(
                        "cannot track writes to pool bytes {offset:#x}+{len:#x}: {e}"
                    ))
                })
        };
        let (mut store, protection, notes) =
            Store::open_protected(pool, config, protect, &tracker)?;
        store.path = Some(path.clone());
        let recovery = store.report.clone();
        Ok((
            store,
            ProtectedOpened {
                opened: Opened {
                    path,
                    created,
                    recovery,
                },
                protection,
                notes,
            },
        ))
    }
}

/// The medium of a store on a pool set: the set, shared with whoever watches or rebuilds it.
pub type SetMedium = Arc<StripedSet<Mapping>>;

/// A store on a pool set, its writes routed through the integrity layer when eager.
pub type SetStore = Store<Guarded<SetMedium>>;

/// Does `dir` hold a store on a pool set (its `kavach.pool` is a set description)?
pub fn is_set_dir(dir: &Path) -> bool {
    pmem::set::is_description(&dir.join(POOL_FILE))
}

/// How to make a new store on a pool set.
#[derive(Debug, Clone, Copy)]
pub struct SetLayout {
    /// Member files (at least 3).
    pub members: usize,
    /// Bytes of a chunk (the unit of striping).
    pub chunk: u64,
}

/// What [`Store::open_dir_set`] opened besides the store.
#[derive(Debug)]
pub struct SetOpened {
    /// What `open_dir` reports (`path` is the set description).
    pub opened: Opened,
    /// The set under the pool.
    pub set: SetMedium,
    /// The protection in force (`None`: mode off).
    pub protection: Option<Arc<Protection<SetMedium>>>,
    /// What laying out and opening the protection did that a user must know.
    pub notes: Vec<String>,
}

fn set_failed(path: &Path, e: impl std::fmt::Display) -> StoreError {
    StoreError::Failed(format!("pool set {}: {e}", path.display()))
}

/// Make the members and description of a new set at `path` and an empty pool on it.
fn create_set_pool(path: &Path, config: &Config, layout: SetLayout) -> StoreResult<()> {
    pmem::set::validate_members(layout.members as u64).map_err(|e| set_failed(path, e))?;
    pmem::set::validate_chunk(layout.chunk).map_err(|e| set_failed(path, e))?;
    let paths = pmem::set::default_member_paths(path, layout.members);
    if let Some(p) = paths.iter().find(|p| p.exists()) {
        return Err(set_failed(
            path,
            format!("member file {} exists already", p.display()),
        ));
    }
    let size = if config.grow {
        pmem::layout::POOL_SIZE_MIN
    } else {
        config.pool_bytes()
    };
    let made = StripedSet::create_files(path, &paths, size, layout.chunk)
        .map_err(|e| set_failed(path, format!("cannot create: {e}")))?;
    let domain = made.domain();
    let formatted = if config.grow {
        Pool::format_growable(made, domain)
    } else {
        Pool::format(made, domain)
    };
    match formatted.map(|s| s.close()) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) | Err(e) => {
            remove_set_files(path, &paths);
            Err(set_failed(path, format!("cannot format: {e}")))
        }
    }
}

fn remove_set_files(path: &Path, members: &[PathBuf]) {
    for p in members {
        let _ = std::fs::remove_file(p);
    }
    let _ = std::fs::remove_file(path);
}

/// Open the set at `path` read-write after a read-only look: a set that has failed (two
/// members lost) is refused before anything is written.
fn open_set(path: &Path) -> StoreResult<SetMedium> {
    let look = StripedSet::open_files(
        path,
        SetOpenOptions {
            read_only: true,
            force: false,
        },
    )
    .map_err(|e| set_failed(path, format!("cannot open: {e}")))?;
    let status = look.status();
    drop(look);
    if status.state == "failed" {
        let lost: Vec<String> = status
            .lost
            .iter()
            .chain(status.also_lost.iter())
            .map(|f| format!("member {} ({}): {}", f.index, f.label.display(), f.reason))
            .collect();
        return Err(set_failed(
            path,
            format!(
                "more members lost than parity covers ({}); the data cannot be served",
                lost.join("; ")
            ),
        ));
    }
    let set = StripedSet::open_files(
        path,
        SetOpenOptions {
            read_only: false,
            force: false,
        },
    )
    .map_err(|e| set_failed(path, format!("cannot open: {e}")))?;
    Ok(Arc::new(set))
}

impl SetStore {
    /// Open the store on the pool set in `dir` (its `kavach.pool` a set description), or, when
    /// `dir` holds no store and `create` is given, make a new set of `create.members` files
    /// (`kavach.pool.0` ...) and the store on it. Redundancy as `protect` says, except lazy,
    /// which needs a single mapping to track writes and is refused. A set with two members
    /// lost is refused before anything is written.
    pub fn open_dir_set(
        dir: &Path,
        config: Config,
        protect: &ProtectOptions,
        create: Option<SetLayout>,
    ) -> StoreResult<(Self, SetOpened)> {
        let path = dir.join(POOL_FILE);
        let created = !path.exists();
        if created {
            let Some(layout) = create else {
                return Err(StoreError::Failed(format!(
                    "{} holds no store and no set layout was given",
                    dir.display()
                )));
            };
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Failed(format!("cannot create {}: {e}", dir.display())))?;
            create_set_pool(&path, &config, layout)?;
            let made = (|| {
                let set = open_set(&path)?;
                let pool = Pool::open_medium(set, &OpenOptions::default())
                    .map_err(|e| set_failed(&path, format!("cannot open the pool: {e}")))?;
                let config = Config {
                    slot_bytes: config.slot_bytes_at_create()?,
                    ..config.clone()
                };
                let store = Store::create(pool, config)?;
                store.close()
            })();
            if let Err(e) = made {
                remove_set_files(
                    &path,
                    &pmem::set::default_member_paths(&path, layout.members),
                );
                return Err(e);
            }
        } else if !pmem::set::is_description(&path) {
            return Err(StoreError::Failed(format!(
                "{} is a single pool file, not a pool set description",
                path.display()
            )));
        }
        let set = open_set(&path)?;
        let pool = Pool::open_medium(Arc::clone(&set), &OpenOptions::default())
            .map_err(|e| set_failed(&path, format!("cannot open the pool: {e}")))?;
        let tracker = |offset: u64, len: u64| -> StoreResult<Box<dyn integrity::Tracker>> {
            Err(StoreError::Failed(format!(
                "lazy redundancy tracks writes through a single mapping; a pool set has none \
                 (pool bytes {offset:#x}+{len:#x}): use eager or off"
            )))
        };
        let (mut store, protection, notes) =
            Store::open_protected(pool, config, protect, &tracker)?;
        store.path = Some(path.clone());
        let recovery = store.report.clone();
        Ok((
            store,
            SetOpened {
                opened: Opened {
                    path,
                    created,
                    recovery,
                },
                set,
                protection,
                notes,
            },
        ))
    }
}

impl<M: Medium + Clone + Send + Sync + 'static> Store<Guarded<M>> {
    /// Open (recover) the store in `pool` with its regions protected as `protect` says: lay
    /// out protection where missing or out of date, open it (before the store, so recovery's
    /// writes are covered), route covered writes through it in eager mode, and start the
    /// background scrubber. `tracker` gives lazy mode's write tracker over a range (offset,
    /// bytes) of the pool. Returns the store, the protection (`None`: mode off) and what a
    /// user must know.
    pub fn open_protected(
        mut pool: Pool<M>,
        config: Config,
        protect: &ProtectOptions,
        tracker: &dyn Fn(u64, u64) -> StoreResult<Box<dyn integrity::Tracker>>,
    ) -> StoreResult<ProtectedParts<M>> {
        let recorded = crate::protect::recorded_mode(&pool);
        let mode = protect.mode.or(recorded).unwrap_or(integrity::Mode::Off);
        let mut notes = Vec::new();
        let opened = (|| {
            if mode == integrity::Mode::Off {
                if recorded.is_some_and(|m| m != integrity::Mode::Off) {
                    crate::protect::switch_off(&pool)?;
                    notes.push(
                        "redundancy switched off: the pool's checksums and parity are marked \
                         stale and made again when redundancy is switched on"
                            .to_string(),
                    );
                }
                return Ok(None);
            }
            let period = protect
                .period_ms
                .unwrap_or(integrity::layout::PERIOD_MS_DEFAULT);
            notes.extend(crate::protect::lay_out(&mut pool, mode, period)?);
            let p = Protection::open(
                &pool,
                mode,
                protect.period_ms,
                protect.scrub_pages_per_sec,
                tracker,
            )?;
            notes.extend(p.notes().iter().cloned());
            Ok::<_, StoreError>(Some(Arc::new(p)))
        })();
        let protection = match opened {
            Ok(p) => p,
            Err(e) => {
                // Left marked in use: the next open recovers, as after a crash.
                drop(pool);
                return Err(e);
            }
        };
        let guarded = match &protection {
            Some(p) => pool.map_medium(|m| Guarded::over(m, p)),
            None => pool.map_medium(Guarded::plain),
        };
        let _ = crate::protect::take_refused_read();
        let opened = Self::open(guarded, config);
        let _ = crate::protect::take_refused_read();
        let store = match opened {
            Ok(s) => s,
            // A refused read is the cause when the store's own checks then failed on what it
            // read in its place.
            Err(e) => {
                return Err(protection
                    .as_ref()
                    .and_then(|p| p.first_refused_read())
                    .map_or(e, Into::into));
            }
        };
        if let Some(p) = &protection {
            // Recovery read a page the integrity layer refused (on this thread or a replay
            // thread): what it recovered may rest on damaged bytes, so the store is not served.
            if let Some(r) = p.first_refused_read() {
                drop(store);
                return Err(r.into());
            }
            p.watch_regions(Box::new(store.engine.regions_watch()));
            p.start_scrubber()?;
        }
        Ok((store, protection, notes))
    }
}

impl<M: Medium + Clone + Send + Sync + 'static> Store<M> {
    /// Make a new store in `pool`.
    pub fn create(pool: Pool<M>, config: Config) -> StoreResult<Self> {
        let file = object_file_of(&config)?;
        Self::create_with_object_file(pool, config, file)
    }

    /// Make a new store in `pool` whose object data goes to `file` (`None`: the data zone),
    /// whatever `config.object_dir` says (crash tests pass a [`crate::zone::MemFile`]).
    pub fn create_with_object_file(
        mut pool: Pool<M>,
        config: Config,
        file: Option<Arc<dyn ObjectFile>>,
    ) -> StoreResult<Self> {
        let r = pool
            .create_region(
                DATA_REGION,
                kinds::RAW,
                config.data_bytes.max(BLOCK_BYTES),
                Alignment::Page,
            )
            .map_err(|e| StoreError::Failed(format!("cannot make the data zone: {e}")))?;
        let zone = Zone::new(r.offset as usize, r.length / BLOCK_BYTES);
        let kv = Kv::new(seed_of(&pool.uuid()), config.shards);
        let layout = Layout {
            log_bytes: config.log_bytes,
            slot_bytes: config.slot_bytes_at_create()?,
            shards: config.shards,
            machine: kv.word(),
        };
        let (engine, report) = Dipper::create(pool, &layout, kv.clone(), config.options())?;
        let mut store = Self::assemble(engine, zone, kv, config, report);
        store.attach_object_file(file, &[])?;
        Ok(store)
    }

    /// Open (recover) the store in `pool`. The shard count comes from the store itself.
    pub fn open(pool: Pool<M>, config: Config) -> StoreResult<Self> {
        let file = object_file_of(&config)?;
        Self::open_with_object_file(pool, config, file)
    }

    /// Open (recover) the store in `pool` with its object data in `file` (`None`: no object
    /// data file), whatever `config.object_dir` says.
    pub fn open_with_object_file(
        pool: Pool<M>,
        config: Config,
        file: Option<Arc<dyn ObjectFile>>,
    ) -> StoreResult<Self> {
        let uuid = pool.uuid();
        // Checks that read only: a pool that is not a store, or whose root is damaged, is handed
        // back exactly as it was found (clean-shutdown flag included) before the error returns.
        let checked = (|| {
            // Flush on fail (`docs/format/fof.md`): a missed window is refused here, before
            // anything is written. The store rests on the order of DIPPER's persists, which a
            // missed window does not keep (see `dipper::fof`); its checksums cannot show that
            // the surviving lines form a prefix of its operations.
            let fof = match pool.region(pmem::fof::REGION_NAME) {
                Some(f) => {
                    let at = f.offset as usize;
                    match pmem::fof::read(pool.medium(), at)
                        .map_err(DipperError::from)?
                        .state()
                    {
                        pmem::fof::FofState::Armed => {
                            return Err(StoreError::Corrupt(Corruption {
                                structure: "flush-on-fail record".into(),
                                offset: at as u64,
                                field: "state",
                                expected: "saved (a save completed in the window)".into(),
                                found: "armed-unsaved: the window was missed; restore the store \
                                        from its back end"
                                    .into(),
                            }));
                        }
                        pmem::fof::FofState::Saved => Some(at),
                        pmem::fof::FofState::None => None,
                    }
                }
                None => None,
            };
            let r = pool.region(dipper::layout::ROOT_REGION).ok_or_else(|| {
                StoreError::Failed("the pool holds no DStore (no dipper.root region)".into())
            })?;
            let (root, _) = dipper::root::Root::load(pool.medium(), r.offset as usize, &uuid)?;
            // Which placement the store's keys follow: the DIPPER root's machine word.
            let kv = Kv::with_word(seed_of(&uuid), root.shards as usize, root.machine).map_err(
                |why| {
                    StoreError::Corrupt(Corruption {
                        structure: "DIPPER root".into(),
                        offset: r.offset
                            + (dipper::layout::ROOT_COPY_OFFSETS[(root.seq % 2) as usize]
                                + dipper::layout::ROOT_MACHINE_AT)
                                as u64,
                        field: "machine",
                        expected: format!(
                            "a DStore machine word (bits {:#x} at most)",
                            crate::machine::MACHINE_KNOWN
                        ),
                        found: why,
                    })
                },
            )?;
            let data = pool.region(DATA_REGION).ok_or_else(|| {
                StoreError::Failed(format!("the pool has no `{DATA_REGION}` region"))
            })?;
            Ok::<_, StoreError>((kv, data, fof))
        })();
        let (kv, r, fof) = match checked {
            Ok(found) => found,
            Err(e) => {
                // Nothing was written since the open; if putting it back fails, the error that
                // stopped the open is still the one to report.
                let _ = pool.close_unchanged();
                return Err(e);
            }
        };
        let zone = Zone::new(r.offset as usize, r.length / BLOCK_BYTES);
        // A saved flush-on-fail image: the recovery is first run over a scratch view (a
        // refusal there leaves the pool as found), then the record is armed again before the
        // first write (a power failure during the recovery is a missed window), the ordinary
        // recovery runs over the whole bytes, and every region is written back before the
        // store takes writes.
        let rearm = match fof {
            Some(at) => {
                let mut ranges: Vec<(usize, usize)> = pool
                    .regions()
                    .iter()
                    .map(|g| (g.offset as usize, g.length as usize))
                    .collect();
                ranges.push((0, pmem::layout::METADATA_BYTES));
                let medium = pool.medium().clone();
                let dry = Pool::open_medium(
                    Arc::new(pmem::fof::Scratch::new(medium.clone())),
                    &OpenOptions::default(),
                )
                .map_err(DipperError::from)
                .and_then(|p| {
                    let opts = Options {
                        background: false,
                        ..config.options()
                    };
                    Dipper::open(p, kv.clone(), opts)
                });
                if let Err(e) = dry {
                    let _ = pool.close_unchanged();
                    return Err(e.into());
                }
                pmem::fof::arm(&medium, at).map_err(DipperError::from)?;
                Some((medium, ranges, at))
            }
            None => None,
        };
        let (engine, report) = Dipper::open(pool, kv.clone(), config.options())?;
        if let Some((medium, ranges, _)) = &rearm {
            write_back_all(medium, ranges).map_err(DipperError::from)?;
        }
        let config = Config {
            shards: kv.shards,
            ..config
        };
        let mut store = Self::assemble(engine, zone, kv, config, report);
        store.fof = rearm;
        // Which blocks are in use follows from the recovered objects.
        let mut in_file = Vec::new();
        for s in 0..store.engine.shards() {
            let blocks = store.engine.read(s, |a| {
                let mut out = Vec::new();
                for e in table::entries(a, a.user(machine::USER_KEYSPACE)) {
                    if let Ok((_, b)) = machine::object_of(a, e) {
                        out.extend(b.into_iter().filter(|&b| b != HOLE));
                    }
                }
                out
            })?;
            for b in blocks {
                if crate::zone::is_file_block(b) {
                    in_file.push(b & !FILE_BLOCK_FLAG);
                } else {
                    store.zone.claim(b)?;
                }
            }
        }
        store.attach_object_file(file, &in_file)?;
        Ok(store)
    }

    fn assemble(
        engine: Dipper<M, Kv>,
        zone: Zone,
        kv: Kv,
        config: Config,
        report: RecoveryReport,
    ) -> Self {
        engine.set_memory_max(config.maxmemory_bytes);
        Store {
            engine,
            zone,
            kv,
            clock: system_clock(),
            config,
            report,
            opened: Instant::now(),
            path: None,
            fof: None,
            files: None,
            locks: crate::locks::Locks::new(),
            expiry: std::sync::Mutex::new(ExpiryPass::default()),
        }
    }

    /// The active-expiry walk since the store opened: buckets walked, and passes skipped
    /// because the last whole pass found no deadline and none was written since.
    pub fn expiry_walk_stats(&self) -> (u64, u64) {
        let p = self.expiry.lock().unwrap_or_else(|e| e.into_inner());
        (p.buckets_walked, p.passes_skipped)
    }

    /// The keyspace machine (key placement).
    pub(crate) fn kv(&self) -> &Kv {
        &self.kv
    }

    /// Change the `maxmemory` limit (0: none); see [`Config::maxmemory_bytes`].
    pub fn set_maxmemory(&self, bytes: u64) {
        self.engine.set_memory_max(bytes);
    }

    /// The `maxmemory` limit in force (0: none).
    pub fn maxmemory(&self) -> u64 {
        self.engine.memory_max()
    }

    /// Bytes the data takes: allocated blocks in the shards' arenas (Redis's `used_memory`
    /// here, what `maxmemory` limits).
    pub fn used_memory(&self) -> u64 {
        self.engine.live_bytes()
    }

    /// Replace the clock (tests).
    pub fn set_clock(&mut self, clock: Clock) {
        self.clock = clock;
    }

    /// What recovery did when the store was opened.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.report
    }

    /// The engine (statistics, checkpoints).
    pub fn engine(&self) -> &Dipper<M, Kv> {
        &self.engine
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The pool file, if the store lives in one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Time since open.
    pub fn uptime(&self) -> Duration {
        self.opened.elapsed()
    }

    pub(crate) fn now(&self) -> i64 {
        (self.clock)()
    }

    fn check_len(&self, what: &str, n: usize) -> StoreResult<()> {
        if n > self.config.value_bytes_max {
            return Err(StoreError::TooLarge(format!(
                "{what} of {n} bytes is larger than the limit of {} bytes",
                self.config.value_bytes_max
            )));
        }
        Ok(())
    }

    fn shards_of<'k>(&self, keys: impl Iterator<Item = &'k [u8]>) -> Vec<u16> {
        let mut s: Vec<u16> = keys.map(|k| self.kv.shard_of(k)).collect();
        s.sort_unstable();
        s.dedup();
        s
    }

    fn run(&self, shards: Option<&[u16]>, op: &Op<'_>, grows: bool) -> StoreResult<Outcome> {
        let bytes = op::encode(self.now(), op);
        // Hand the encoded record over as is (`execute` would copy it).
        let out = self
            .engine
            .execute_with(shards, grows, |_| Ok::<_, StoreError>(bytes))??;
        if let Some(e) = out.error {
            return Err(e.into());
        }
        Ok(out)
    }

    fn run_key(&self, key: &[u8], op: &Op<'_>, grows: bool) -> StoreResult<Outcome> {
        self.check_len("a key", key.len())?;
        let s = [self.kv.shard_of(key)];
        self.run(Some(&s), op, grows)
    }

    fn with_key<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(&Arena, Option<table::Entry>) -> R,
    ) -> StoreResult<R> {
        let now = self.now();
        let shard = self.kv.shard_of(key) as usize;
        Ok(self
            .engine
            .read(shard, |a| f(a, machine::lookup(&self.kv, a, key, now)))?)
    }

    /// GET.
    pub fn get(&self, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        self.with_key(key, |a, e| match e {
            None => Ok(None),
            Some(e) => read::string(a, e)
                .map(|v| Some(v.to_vec()))
                .map_err(Into::into),
        })?
    }

    /// SET with NX/XX and an absolute expiry. Returns whether it was carried out.
    pub fn set(
        &self,
        key: &[u8],
        value: &[u8],
        nx: bool,
        xx: bool,
        expire_at_ms: Option<i64>,
    ) -> StoreResult<bool> {
        self.check_len("a value", value.len())?;
        if nx && xx {
            return Err(StoreError::TooLarge("NX and XX together".into()));
        }
        let flags = if nx {
            SET_NX
        } else if xx {
            SET_XX
        } else {
            0
        };
        let op = Op::Set {
            key,
            value,
            flags,
            expire_at: expire_at_ms.unwrap_or(0).max(0),
        };
        Ok(self.run_key(key, &op, true)?.done)
    }

    /// MGET.
    pub fn mget(&self, keys: &[&[u8]]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        let shards = self.shards_of(keys.iter().copied());
        let now = self.now();
        Ok(self.engine.read_many(&shards, |arenas| {
            keys.iter()
                .map(|k| {
                    let s = self.kv.shard_of(k);
                    let a = arenas[shards.binary_search(&s).expect("locked")];
                    machine::lookup(&self.kv, a, k, now)
                        .and_then(|e| read::string(a, e).ok())
                        .map(|v| v.to_vec())
                })
                .collect()
        })?)
    }

    /// MSET, atomically (refused whole if a key is an object).
    pub fn mset(&self, pairs: &[(&[u8], &[u8])]) -> StoreResult<()> {
        for (k, v) in pairs {
            self.check_len("a key", k.len())?;
            self.check_len("a value", v.len())?;
        }
        let shards = self.shards_of(pairs.iter().map(|p| p.0));
        let now = self.now();
        let op = op::encode(now, &Op::MSet(pairs.to_vec()));
        self.engine.execute_with(Some(&shards), true, |arenas| {
            for (k, _) in pairs {
                let a = arenas[shards.binary_search(&self.kv.shard_of(k)).expect("locked")];
                if machine::lookup(&self.kv, a, k, now)
                    .is_some_and(|e| machine::object_of(a, e).is_ok())
                {
                    return Err(StoreError::WrongType);
                }
            }
            Ok(op)
        })??;
        Ok(())
    }

    /// DEL: keys removed.
    pub fn del(&self, keys: &[&[u8]]) -> StoreResult<u64> {
        let shards = self.shards_of(keys.iter().copied());
        let now = self.now();
        let op = op::encode(now, &Op::Del(keys.to_vec()));
        let mut freed = Vec::new();
        let out = self.engine.execute_with(Some(&shards), false, |arenas| {
            for k in keys {
                let a = arenas[shards.binary_search(&self.kv.shard_of(k)).expect("locked")];
                if let Some(e) = machine::lookup(&self.kv, a, k, now)
                    && let Ok((_, b)) = machine::object_of(a, e)
                {
                    freed.extend(b.into_iter().filter(|&b| b != HOLE));
                }
            }
            Ok::<_, StoreError>(op)
        })??;
        self.release(&freed);
        Ok(out.count)
    }

    pub(crate) fn release(&self, blocks: &[u32]) {
        if blocks.is_empty() {
            return;
        }
        let swaps = self.engine.log_swaps();
        let (in_file, in_zone): (Vec<u32>, Vec<u32>) =
            blocks.iter().partition(|&&b| crate::zone::is_file_block(b));
        if !in_zone.is_empty() {
            let durable = matches!(self.config.policy, ForcePolicy::Sync);
            self.zone.release(&in_zone, durable, swaps);
        }
        if let Some(f) = &self.files
            && !in_file.is_empty()
        {
            // Reused once a checkpoint that began after the freeing record has completed.
            let raw: Vec<u32> = in_file.iter().map(|b| b & !FILE_BLOCK_FLAG).collect();
            f.zone.release(&raw, false, swaps);
        }
    }

    /// EXISTS: how many of the keys exist (repeats count).
    pub fn exists(&self, keys: &[&[u8]]) -> StoreResult<u64> {
        let mut n = 0;
        for k in keys {
            if self.with_key(k, |_, e| e.is_some())? {
                n += 1;
            }
        }
        Ok(n)
    }

    /// INCRBY: the new value.
    pub fn incr_by(&self, key: &[u8], delta: i64) -> StoreResult<i64> {
        // Refuse what would fail before logging it.
        self.with_key(key, |a, e| match e {
            None => Ok(()),
            Some(e) => {
                let v = read::string(a, e)?;
                let n = machine::parse_int(v).ok_or(StoreError::NotInteger)?;
                n.checked_add(delta).map(|_| ()).ok_or(StoreError::Overflow)
            }
        })??;
        Ok(self.run_key(key, &Op::IncrBy { key, delta }, true)?.int)
    }

    /// APPEND: the new length.
    pub fn append(&self, key: &[u8], value: &[u8]) -> StoreResult<u64> {
        let cur = self.strlen(key)?;
        self.check_len("the appended value", cur as usize + value.len())?;
        Ok(self.run_key(key, &Op::Append { key, value }, true)?.count)
    }

    /// STRLEN.
    pub fn strlen(&self, key: &[u8]) -> StoreResult<u64> {
        self.with_key(key, |a, e| match e {
            None => Ok(0),
            Some(e) => Ok(read::string(a, e)?.len() as u64),
        })?
    }

    /// TYPE.
    pub fn key_type(&self, key: &[u8]) -> StoreResult<&'static str> {
        self.with_key(key, |a, e| e.map_or("none", |e| read::type_name(a, e)))
    }

    /// HSET: fields added.
    pub fn hset(&self, key: &[u8], pairs: &[(&[u8], &[u8])]) -> StoreResult<u64> {
        for (f, v) in pairs {
            self.check_len("a field", f.len())?;
            self.check_len("a value", v.len())?;
        }
        self.with_key(key, |a, e| match e {
            Some(e) => read::hash_table(a, e).map(|_| ()).map_err(StoreError::from),
            None => Ok(()),
        })??;
        Ok(self
            .run_key(
                key,
                &Op::HSet {
                    key,
                    pairs: pairs.to_vec(),
                },
                true,
            )?
            .count)
    }

    /// HGET.
    pub fn hget(&self, key: &[u8], field: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        Ok(self.hmget(key, &[field])?.pop().flatten())
    }

    /// HMGET.
    pub fn hmget(&self, key: &[u8], fields: &[&[u8]]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        self.with_key(key, |a, e| match e {
            None => Ok(vec![None; fields.len()]),
            Some(e) => {
                let t = read::hash_table(a, e)?;
                Ok(fields
                    .iter()
                    .map(|f| read::field(&self.kv, a, t, f).map(<[u8]>::to_vec))
                    .collect())
            }
        })?
    }

    /// HGETALL.
    pub fn hgetall(&self, key: &[u8]) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        self.with_key(key, |a, e| match e {
            None => Ok(Vec::new()),
            Some(e) => Ok(read::fields(a, read::hash_table(a, e)?)),
        })?
    }

    /// HDEL: fields removed.
    pub fn hdel(&self, key: &[u8], fields: &[&[u8]]) -> StoreResult<u64> {
        let present = self.with_key(key, |a, e| match e {
            Some(e) => read::hash_table(a, e)
                .map(|_| true)
                .map_err(StoreError::from),
            None => Ok(false),
        })??;
        if !present {
            return Ok(0);
        }
        Ok(self
            .run_key(
                key,
                &Op::HDel {
                    key,
                    fields: fields.to_vec(),
                },
                false,
            )?
            .count)
    }

    /// ZADD: members added.
    pub fn zadd(&self, key: &[u8], members: &[(f64, &[u8])]) -> StoreResult<u64> {
        for (s, m) in members {
            self.check_len("a member", m.len())?;
            if s.is_nan() {
                return Err(StoreError::TooLarge("a score is not a number".into()));
            }
        }
        Ok(self
            .run_key(
                key,
                &Op::ZAdd {
                    key,
                    members: members.to_vec(),
                },
                true,
            )?
            .count)
    }

    /// ZREM: members removed.
    pub fn zrem(&self, key: &[u8], members: &[&[u8]]) -> StoreResult<u64> {
        Ok(self
            .run_key(
                key,
                &Op::ZRem {
                    key,
                    members: members.to_vec(),
                },
                false,
            )?
            .count)
    }

    /// ZRANGEBYSCORE.
    #[allow(clippy::too_many_arguments)]
    pub fn zrange_by_score(
        &self,
        key: &[u8],
        min: f64,
        min_excl: bool,
        max: f64,
        max_excl: bool,
        offset: usize,
        count: Option<usize>,
    ) -> StoreResult<Vec<(Vec<u8>, f64)>> {
        self.with_key(key, |a, e| match e {
            None => Ok(Vec::new()),
            Some(e) => {
                read::zrange(a, e, min, min_excl, max, max_excl, offset, count).map_err(Into::into)
            }
        })?
    }

    /// DBSIZE.
    pub fn dbsize(&self) -> StoreResult<u64> {
        let mut n = 0;
        for s in 0..self.engine.shards() {
            n += self.engine.read(s, read::count)?;
        }
        Ok(n)
    }

    /// FLUSHALL (objects too).
    pub fn flushall(&self) -> StoreResult<()> {
        let op = op::encode(self.now(), &Op::FlushAll);
        let mut freed = Vec::new();
        self.engine.execute_with(None, false, |arenas| {
            for a in arenas {
                for e in table::entries(a, a.user(machine::USER_KEYSPACE)) {
                    if let Ok((_, b)) = machine::object_of(a, e) {
                        freed.extend(b.into_iter().filter(|&b| b != HOLE));
                    }
                }
            }
            Ok::<_, StoreError>(op)
        })??;
        self.release(&freed);
        Ok(())
    }

    /// Open an object (DStore's `oopen`): with `create`, an absent object is created empty
    /// (a logged operation); without, an absent object is `Ok(None)`.
    pub fn open_object(&self, name: &[u8], create: bool) -> StoreResult<Option<Object<'_, M>>> {
        self.check_len("an object name", name.len())?;
        let exists = self.with_key(name, |a, e| match e {
            None => Ok(false),
            Some(e) => machine::object_of(a, e)
                .map(|_| true)
                .map_err(StoreError::from),
        })??;
        if !exists {
            if !create {
                return Ok(None);
            }
            self.owrite(name, 0, &[])?;
        }
        Ok(Some(Object {
            store: self,
            name: name.to_vec(),
        }))
    }

    /// Size of an object, `None` if absent.
    pub fn object_size(&self, name: &[u8]) -> StoreResult<Option<u64>> {
        self.with_key(name, |a, e| match e {
            None => Ok(None),
            Some(e) => machine::object_of(a, e)
                .map(|(s, _)| Some(s))
                .map_err(StoreError::from),
        })?
    }

    /// Write `data` at `offset` of object `name` (created if absent; a gap reads as zeros).
    /// The touched blocks go to new data-zone blocks, persisted before the record that points
    /// at them is logged; the old blocks are freed once that record is durable. Returns the
    /// object's size afterwards.
    ///
    /// With an object data file ([`Config::object_dir`]) the touched blocks go to new blocks of
    /// the file instead: written, synced (`fdatasync`, grouped with concurrent writers), and
    /// only then is the record logged; the old blocks are reused after a checkpoint that began
    /// after the record has completed. A write waits while another context holds the object's
    /// [`olock`](crate::api::Context::olock).
    pub fn owrite(&self, name: &[u8], offset: u64, data: &[u8]) -> StoreResult<u64> {
        let owner = self.locks.anonymous();
        self.owrite_as(owner, name, offset, data, &mut Vec::new())
    }

    /// [`Store::owrite`] on behalf of lock owner `owner`, with a scratch buffer.
    pub(crate) fn owrite_as(
        &self,
        owner: u64,
        name: &[u8],
        offset: u64,
        data: &[u8],
        scratch: &mut Vec<u8>,
    ) -> StoreResult<u64> {
        self.check_len("an object name", name.len())?;
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= OBJECT_BYTES_MAX)
            .ok_or_else(|| {
                StoreError::TooLarge(format!("objects end at {OBJECT_BYTES_MAX} bytes"))
            })?;
        match &self.files {
            Some(f) => self.owrite_file(owner, f, name, offset, data, end, scratch),
            None => {
                let _hold = self.locks.hold(name, owner)?;
                self.owrite_zone(name, offset, data, end)
            }
        }
    }

    /// An object write into the data zone (no object data file).
    fn owrite_zone(&self, name: &[u8], offset: u64, data: &[u8], end: u64) -> StoreResult<u64> {
        let shard = [self.kv.shard_of(name)];
        let now = self.now();
        let swaps = self.engine.log_swaps();
        let (mut allocated, mut freed) = (Vec::new(), Vec::new());
        let mut size_after = 0;
        let medium = self.engine.medium();
        let r = self.engine.execute_with(Some(&shard), true, |arenas| {
            let a = arenas[0];
            let (size, list) = match machine::lookup(&self.kv, a, name, now) {
                None => (0, Vec::new()),
                Some(e) => machine::object_of(a, e)?,
            };
            size_after = size.max(end);
            let mut pairs = Vec::new();
            if !data.is_empty() {
                let (first, last) = (offset / BLOCK_BYTES, (end - 1) / BLOCK_BYTES);
                allocated = self.zone.alloc((last - first + 1) as usize, swaps)?;
                let mut buf = vec![0u8; BLOCK_BYTES as usize];
                for (idx, &nb) in (first..=last).zip(&allocated) {
                    let bstart = idx * BLOCK_BYTES;
                    let old = list.get(idx as usize).copied().filter(|&b| b != HOLE);
                    buf.fill(0);
                    if let Some(ob) = old {
                        let _ = crate::protect::take_refused_read();
                        medium.read(
                            self.zone.base + ob as usize * BLOCK_BYTES as usize,
                            &mut buf,
                        );
                        // The old block's bytes are copied into the new one: a read the
                        // integrity layer refused fails the write before anything is logged.
                        if let Some(r) = crate::protect::take_refused_read() {
                            return Err(r.into());
                        }
                        freed.push(ob);
                    }
                    let from = offset.max(bstart);
                    let to = end.min(bstart + BLOCK_BYTES);
                    buf[(from - bstart) as usize..(to - bstart) as usize]
                        .copy_from_slice(&data[(from - offset) as usize..(to - offset) as usize]);
                    medium.write_nontemporal(
                        self.zone.base + nb as usize * BLOCK_BYTES as usize,
                        &buf,
                    );
                    pairs.push((idx as u32, nb));
                }
                medium.fence().map_err(|e| {
                    StoreError::Failed(format!("persisting object data failed: {e}"))
                })?;
            }
            Ok::<_, StoreError>(op::encode(
                now,
                &Op::OWrite {
                    key: name,
                    size: size_after,
                    blocks: pairs,
                },
            ))
        });
        match r {
            Ok(Ok(_)) => {
                self.release(&freed);
                Ok(size_after)
            }
            Ok(Err(e)) => {
                self.zone.release(&allocated, true, swaps);
                Err(e)
            }
            Err(e) => {
                self.zone.release(&allocated, true, swaps);
                Err(e.into())
            }
        }
    }

    /// Read block `b` of an object's list (a hole, a data-zone block or a file block) into
    /// `buf` (4 KiB).
    fn read_block(&self, b: u32, buf: &mut [u8]) -> StoreResult<()> {
        if b == HOLE {
            buf.fill(0);
        } else if crate::zone::is_file_block(b) {
            let f = self.files.as_ref().ok_or_else(|| no_object_file(1))?;
            f.file
                .read_at((b & !FILE_BLOCK_FLAG) as u64 * BLOCK_BYTES, buf)
                .map_err(|e| file_failed(f, "read", e))?;
        } else {
            let _ = crate::protect::take_refused_read();
            self.engine
                .medium()
                .read(self.zone.base + b as usize * BLOCK_BYTES as usize, buf);
            if let Some(r) = crate::protect::take_refused_read() {
                return Err(r.into());
            }
        }
        Ok(())
    }

    /// An object write into the object data file: data first (written to new blocks and
    /// synced, holding no lock, so concurrent writers of one object share a sync), then the
    /// record, logged while holding the object's lock (so it waits for another context's
    /// `olock`). The record's preparation checks that the blocks merged into partial blocks are
    /// still the object's, and starts over if a concurrent write or delete replaced them.
    #[allow(clippy::too_many_arguments)]
    fn owrite_file(
        &self,
        owner: u64,
        f: &crate::zone::FileObjects,
        name: &[u8],
        offset: u64,
        data: &[u8],
        end: u64,
        scratch: &mut Vec<u8>,
    ) -> StoreResult<u64> {
        let shard = self.kv.shard_of(name);
        let bs = BLOCK_BYTES as usize;
        for attempt in 0..64 {
            // After a conflict, the retry holds the object's lock throughout, so writers of
            // the object cannot keep invalidating each other's merged blocks.
            let _whole = if attempt > 0 {
                Some(self.locks.hold(name, owner)?)
            } else {
                None
            };
            let now = self.now();
            let (_, list) = self.engine.read(shard as usize, |a| {
                match machine::lookup(&self.kv, a, name, now) {
                    None => Ok((0, Vec::new())),
                    Some(e) => machine::object_of(a, e).map_err(StoreError::from),
                }
            })??;
            let mut pairs = Vec::new();
            // (block index, the block merged from) for partial blocks.
            let mut merged = Vec::new();
            let mut allocated = Vec::new();
            if !data.is_empty() {
                let (first, last) = (offset / BLOCK_BYTES, (end - 1) / BLOCK_BYTES);
                let swaps = self.engine.log_swaps();
                allocated = f.zone.alloc((last - first + 1) as usize, swaps)?;
                let written = (|| {
                    for (idx, &nb) in (first..=last).zip(&allocated) {
                        let bstart = idx * BLOCK_BYTES;
                        let from = offset.max(bstart);
                        let to = end.min(bstart + BLOCK_BYTES);
                        let at = nb as u64 * BLOCK_BYTES;
                        let src = &data[(from - offset) as usize..(to - offset) as usize];
                        if to - from == BLOCK_BYTES {
                            f.file
                                .write_at(at, src)
                                .map_err(|e| file_failed(f, "write", e))?;
                        } else {
                            let old = list.get(idx as usize).copied().unwrap_or(HOLE);
                            scratch.resize(bs, 0);
                            self.read_block(old, scratch)?;
                            // The tail past the object's end reads as zeros.
                            merged.push((idx as u32, old));
                            scratch[(from - bstart) as usize..(to - bstart) as usize]
                                .copy_from_slice(src);
                            f.file
                                .write_at(at, scratch)
                                .map_err(|e| file_failed(f, "write", e))?;
                        }
                        pairs.push((idx as u32, nb | FILE_BLOCK_FLAG));
                    }
                    f.sync
                        .sync(&*f.file)
                        .map_err(|e| file_failed(f, "sync (fdatasync)", e))
                })();
                if let Err(e) = written {
                    f.zone.release(&allocated, true, 0);
                    return Err(e);
                }
            }
            let mut freed = Vec::new();
            let mut size_after = 0;
            let mut stale = false;
            let hold = match self.locks.hold(name, owner) {
                Ok(h) => h,
                Err(e) => {
                    f.zone.release(&allocated, true, 0);
                    return Err(e);
                }
            };
            let r = self.engine.execute_with(Some(&[shard]), true, |arenas| {
                let a = arenas[0];
                let (size, cur) = match machine::lookup(&self.kv, a, name, now) {
                    None => (0, Vec::new()),
                    Some(e) => machine::object_of(a, e)?,
                };
                let at = |i: u32| cur.get(i as usize).copied().unwrap_or(HOLE);
                if merged.iter().any(|&(i, old)| at(i) != old) {
                    stale = true;
                    return Err(StoreError::Failed("the object changed meanwhile".into()));
                }
                for &(i, _) in &pairs {
                    if at(i) != HOLE {
                        freed.push(at(i));
                    }
                }
                // The data was written and synced above: the record may now point at it.
                size_after = size.max(end);
                Ok::<_, StoreError>(op::encode(
                    now,
                    &Op::OWrite {
                        key: name,
                        size: size_after,
                        blocks: pairs.clone(),
                    },
                ))
            });
            drop(hold);
            match r {
                Ok(Ok(_)) => {
                    self.release(&freed);
                    return Ok(size_after);
                }
                Ok(Err(_)) if stale => {
                    f.zone.release(&allocated, true, 0);
                }
                Ok(Err(e)) => {
                    f.zone.release(&allocated, true, 0);
                    return Err(e);
                }
                Err(e) => {
                    // Not logged (or the engine failed): no record points at the new blocks.
                    f.zone.release(&allocated, true, 0);
                    return Err(e.into());
                }
            }
        }
        Err(StoreError::Failed(format!(
            "object `{}`: replaced by deletes or flushes 64 times while this write waited",
            String::from_utf8_lossy(name)
        )))
    }

    /// Attach the object data file (or none): check or write its header, claim the blocks the
    /// recovered objects hold in it.
    fn attach_object_file(
        &mut self,
        file: Option<Arc<dyn ObjectFile>>,
        claimed: &[u32],
    ) -> StoreResult<()> {
        let Some(file) = file else {
            if claimed.is_empty() {
                return Ok(());
            }
            return Err(no_object_file(claimed.len()));
        };
        let label = file.label();
        let failed = |what: &str, e: std::io::Error| {
            StoreError::Failed(format!("object data file {label}: {what} failed: {e}"))
        };
        let mut header = vec![0u8; BLOCK_BYTES as usize];
        file.read_at(0, &mut header)
            .map_err(|e| failed("reading the header", e))?;
        let uuid = self.engine.uuid();
        if !crate::zone::check_object_file_header(&header, &uuid, &label)? {
            if !claimed.is_empty() {
                return Err(StoreError::Corrupt(Corruption {
                    structure: format!("object data file header ({label})"),
                    offset: 0,
                    field: "magic",
                    expected: format!(
                        "a header: the store's objects hold {} blocks of this file",
                        claimed.len()
                    ),
                    found: "zeros (no header)".into(),
                }));
            }
            file.write_at(0, &crate::zone::object_file_header(&uuid))
                .and_then(|()| file.sync())
                .map_err(|e| failed("writing the header", e))?;
        }
        let len = file.len().map_err(|e| failed("reading the size", e))?;
        let zone = crate::zone::FileZone::new(len);
        for &b in claimed {
            zone.claim(b)?;
        }
        self.files = Some(crate::zone::FileObjects {
            file,
            zone,
            sync: crate::zone::GroupSync::default(),
        });
        Ok(())
    }

    /// Blocks of the object data file in use (freed ones waiting for a checkpoint included);
    /// `None` without an object data file.
    pub fn object_file_blocks_in_use(&self) -> Option<u64> {
        self.files.as_ref().map(|f| f.zone.in_use())
    }

    /// Does this store keep new object data in an object data file?
    pub fn has_object_file(&self) -> bool {
        self.files.is_some()
    }

    /// Read object `name` from `offset` into `buf`: the bytes read (short at the object's
    /// end), `None` if there is no such object. No allocation: file blocks are read straight
    /// into `buf`.
    pub fn oread_into(
        &self,
        name: &[u8],
        offset: u64,
        buf: &mut [u8],
    ) -> StoreResult<Option<usize>> {
        verified_reads(|| {
            self.with_key(name, |a, e| {
                let Some(e) = e else { return Ok(None) };
                let (size, list) = machine::object_of(a, e)?;
                let end = size.min(offset.saturating_add(buf.len() as u64));
                let mut pos = offset;
                while pos < end {
                    let idx = pos / BLOCK_BYTES;
                    let within = pos % BLOCK_BYTES;
                    let take = (BLOCK_BYTES - within).min(end - pos) as usize;
                    let out = &mut buf[(pos - offset) as usize..(pos - offset) as usize + take];
                    self.read_part(list[idx as usize], within, out)?;
                    pos += take as u64;
                }
                Ok(Some(end.saturating_sub(offset) as usize))
            })?
        })
    }

    /// Read `out.len()` bytes at `within` of block `b` (hole, data zone or file).
    fn read_part(&self, b: u32, within: u64, out: &mut [u8]) -> StoreResult<()> {
        if b == HOLE {
            out.fill(0);
        } else if crate::zone::is_file_block(b) {
            let f = self.files.as_ref().ok_or_else(|| no_object_file(1))?;
            f.file
                .read_at((b & !FILE_BLOCK_FLAG) as u64 * BLOCK_BYTES + within, out)
                .map_err(|e| file_failed(f, "read", e))?;
        } else {
            // A data-zone block is read whole, as before the file existed: a protected pool
            // verifies (and may refuse) the whole block, whichever bytes were asked for.
            let mut block = [0u8; BLOCK_BYTES as usize];
            self.engine.medium().read(
                self.zone.base + b as usize * BLOCK_BYTES as usize,
                &mut block,
            );
            out.copy_from_slice(&block[within as usize..within as usize + out.len()]);
        }
        Ok(())
    }

    /// Read up to `len` bytes of object `name` from `offset` (`None` if absent; short at the
    /// end of the object).
    pub fn oread(&self, name: &[u8], offset: u64, len: usize) -> StoreResult<Option<Vec<u8>>> {
        let medium = self.engine.medium();
        verified_reads(|| self.oread_unverified(medium, name, offset, len))
    }

    fn oread_unverified(
        &self,
        medium: &M,
        name: &[u8],
        offset: u64,
        len: usize,
    ) -> StoreResult<Option<Vec<u8>>> {
        self.with_key(name, |a, e| {
            let Some(e) = e else { return Ok(None) };
            let (size, list) = machine::object_of(a, e)?;
            let end = size.min(offset.saturating_add(len as u64));
            let mut out = vec![0u8; end.saturating_sub(offset) as usize];
            let mut pos = offset;
            while pos < end {
                let idx = pos / BLOCK_BYTES;
                let within = pos % BLOCK_BYTES;
                let take = (BLOCK_BYTES - within).min(end - pos) as usize;
                let at = (pos - offset) as usize;
                self.read_part(list[idx as usize], within, &mut out[at..at + take])?;
                pos += take as u64;
            }
            let _ = medium;
            Ok(Some(out))
        })?
    }

    /// Data-zone blocks in use.
    pub fn zone_blocks_in_use(&self) -> u64 {
        self.zone.in_use()
    }

    /// Lock or unlock a name: a NOOP record that orders operations on it (DStore's olock).
    pub fn lock_name(&self, name: &[u8]) -> StoreResult<()> {
        self.run_key(name, &Op::Noop(name), false)?;
        Ok(())
    }

    /// One SCAN step: the cursor packs the shard (high bits) and the reverse-binary bucket
    /// cursor within it (low 40 bits).
    pub fn scan(&self, cursor: u64, count: usize) -> StoreResult<(u64, Vec<KeyAndType>)> {
        const LOW: u64 = (1 << 40) - 1;
        let shards = self.engine.shards() as u64;
        let mut shard = cursor >> 40;
        let mut v = cursor & LOW;
        let mut out = Vec::new();
        let now = self.now();
        let want = count.max(1);
        while shard < shards && out.len() < want {
            let next = self
                .engine
                .read(shard as usize, |a| read::scan(a, v, now, &mut out))?;
            if next == 0 || next > LOW {
                shard += 1;
                v = 0;
            } else {
                v = next;
            }
        }
        let cursor = if shard >= shards {
            0
        } else {
            (shard << 40) | v
        };
        Ok((cursor, out))
    }

    /// Make every write applied so far durable ([`Dipper::sync`]). A store opened with
    /// [`ForcePolicy::Caller`] needs this before a write is acknowledged, or before a value read
    /// from it is shown to anyone: the writes since the last call share one force (group commit
    /// across the callers). Cheap when nothing was written since. A failure latches the store
    /// failed.
    pub fn sync(&self) -> StoreResult<()> {
        Ok(self.engine.sync()?)
    }

    /// Take a checkpoint now.
    pub fn save(&self) -> StoreResult<dipper::CheckpointStats> {
        Ok(self.engine.checkpoint()?)
    }

    /// Check every shard's structures (after load or in tests); returns the number of keys.
    pub fn validate(&self) -> StoreResult<u64> {
        let mut n = 0;
        for s in 0..self.engine.shards() {
            n += self.engine.read(s, read::validate)??;
        }
        Ok(n)
    }

    /// Close cleanly.
    pub fn close(&self) -> StoreResult<()> {
        self.engine.close()?;
        // Flush on fail: a clean close writes every line back, then marks the record saved
        // (the image is whole), last.
        if let Some((medium, ranges, at)) = &self.fof {
            write_back_all(medium, ranges)
                .and_then(|()| {
                    pmem::fof::mark_saved(medium, *at, pmem::fof::now_ns(), &[]).map(|_| ())
                })
                .map_err(DipperError::from)?;
        }
        Ok(())
    }
}

/// Write back every range (clipped to the medium) and fence.
fn write_back_all<M: Medium>(medium: &M, ranges: &[(usize, usize)]) -> pmem::Result<()> {
    for &(o, l) in ranges {
        medium.write_back(o, l.min(medium.len().saturating_sub(o)))?;
    }
    medium.fence()
}

use dipper::Arena;

use crate::machine::HOLE;
use crate::op::BLOCK_BYTES;
use crate::table;
use crate::zone::{DATA_REGION, Zone};
use pmem::{Alignment, kinds};

use crate::zone::{FILE_BLOCK_FLAG, ObjectFile};

/// The object data file `config.object_dir` names, opened (created if missing).
fn object_file_of(config: &Config) -> StoreResult<Option<Arc<dyn ObjectFile>>> {
    match &config.object_dir {
        None => Ok(None),
        Some(dir) => {
            let f = crate::zone::DiskFile::open_in(dir).map_err(|e| {
                StoreError::Failed(format!(
                    "cannot open the object data file {}: {e}",
                    dir.join(crate::zone::OBJECT_FILE).display()
                ))
            })?;
            Ok(Some(Arc::new(f)))
        }
    }
}

fn no_object_file(blocks: usize) -> StoreError {
    StoreError::Failed(format!(
        "the store keeps {blocks} object blocks in an object data file ({}); open it with \
         Config::object_dir naming the directory that holds that file (the kavach command \
         line has no option for it yet)",
        crate::zone::OBJECT_FILE
    ))
}

fn file_failed(f: &crate::zone::FileObjects, what: &str, e: std::io::Error) -> StoreError {
    StoreError::Failed(format!(
        "object data file {}: {what} failed: {e}",
        f.file.label()
    ))
}

/// Largest object (64 MiB).
pub const OBJECT_BYTES_MAX: u64 = 64 << 20;

/// An open object (DStore's OBJECT handle): reads and writes by name, no server-side state.
/// Closing it (`oclose`) is dropping it.
#[derive(Debug)]
pub struct Object<'s, M: Medium + Clone + Send + Sync + 'static> {
    store: &'s Store<M>,
    name: Vec<u8>,
}

impl<M: Medium + Clone + Send + Sync + 'static> Object<'_, M> {
    /// `oread`: up to `len` bytes from `offset`.
    pub fn read(&self, offset: u64, len: usize) -> StoreResult<Vec<u8>> {
        Ok(self
            .store
            .oread(&self.name, offset, len)?
            .unwrap_or_default())
    }

    /// `owrite`: write `data` at `offset`; returns the size afterwards.
    pub fn write(&self, offset: u64, data: &[u8]) -> StoreResult<u64> {
        self.store.owrite(&self.name, offset, data)
    }

    /// The object's size (0 if it was deleted meanwhile).
    pub fn size(&self) -> StoreResult<u64> {
        Ok(self.store.object_size(&self.name)?.unwrap_or(0))
    }
}
