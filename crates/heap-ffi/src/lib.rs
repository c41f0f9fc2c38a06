//! `kavach`: the C interface to Kavach's persistent heap, `include/kavach.h`.
//!
//! Built as `libkavach.a` and `libkavach.so` (and an rlib for Rust tests). Every function of
//! the header is an `extern "C"` function in `c_api.rs`, a thin layer over [`heap::HeapFile`] and
//! [`heap::RawHeap`]:
//!
//! - A `kv_pool *` is a `Box<KvPool>` handed out by `kv_pool_create` / `kv_pool_open` and taken
//!   back by `kv_pool_close`. It caches what the hot calls need (pool id, base address, the data
//!   zone's bounds) so `kv_direct` is a few comparisons and an addition.
//! - Transactions are per (thread, pool): a thread-local list of `Slot`s, one per pool the
//!   thread has used, each holding the lane of the thread's open transaction on that pool (if
//!   any) and the first error that aborted it. With one pool the lookup is one comparison.
//! - Errors are `KV_E*` codes; `kv_errormsg` returns the calling thread's last message.
//! - No panic crosses the boundary: every body runs under `catch_unwind`, and a panic (a bug)
//!   becomes `KV_EIO` (or a null result) with a message.
//!
//! The soundness argument (what the C caller must guarantee) is in `docs/unsafe.md`, section
//! "The C interface".

#![deny(unsafe_code)]

use std::cell::RefCell;
use std::ffi::{CStr, OsStr, c_char, c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use heap::file::DEFAULT_REGION;
use heap::raw::LaneGuard;
use heap::{HeapError, HeapFile, HeapOptions, RawHeap, TxMode};
use pmem::PmemError;

/// Success.
pub const KV_OK: c_int = 0;
/// A bad argument (null pointer, zero size, wrong pool).
pub const KV_EINVAL: c_int = 1;
/// The heap has no block of that size.
pub const KV_ENOMEM: c_int = 2;
/// The call needs a transaction and the thread has none.
pub const KV_ENOTX: c_int = 3;
/// The transaction was aborted (by `kv_tx_abort` or an earlier error).
pub const KV_EABORTED: c_int = 4;
/// The transaction's undo or redo log is full.
pub const KV_ETXTOOBIG: c_int = 5;
/// The medium failed (flush, msync, I/O).
pub const KV_EIO: c_int = 6;
/// Damaged metadata was found.
pub const KV_ECORRUPT: c_int = 7;
/// Free of something that is not an allocated block.
pub const KV_EBADFREE: c_int = 8;
/// `kv_pool_create`: the file exists.
pub const KV_EEXIST: c_int = 9;
/// The pool is locked by another process (or another open handle).
pub const KV_EBUSY: c_int = 10;
/// Open: on-demand commits ran and no save finished; the heap may be torn and is not opened.
pub const KV_ENOTSAVED: c_int = 12;
/// An isolated transaction met a concurrent commit (abort it and run it again).
pub const KV_ECONFLICT: c_int = 13;

/// `kv_tx_begin_mode`: undo logging (old bytes to the lane's log in PM before each change).
pub const KV_TX_UNDO: c_int = 0;
/// `kv_tx_begin_mode`: redo logging (new bytes to a log in DRAM, applied at commit).
pub const KV_TX_REDO: c_int = 1;
/// `kv_tx_begin_mode`: redo logging isolated by the heap's STM (no user locks; a conflict
/// fails the transaction with `KV_ECONFLICT`: run it again).
pub const KV_TX_ISOLATED: c_int = 2;
/// `kv_pool_open_flags` / `kv_pool_create_flags`: the usage trap (see [`trap`]).
pub const KV_OPEN_TRAP: c_int = 1;

/// The flags `kv_pool_*_flags` knows.
const OPEN_FLAGS: c_int = KV_OPEN_TRAP;
/// `kv_pool_create_flags`: the heap gets lazy redundancy (write tracking, a background pass).
pub const KV_CREATE_LAZY: c_int = 2;
/// `kv_pool_create_flags`: eager redundancy (each commit's diff, TVARAK for transactions).
pub const KV_CREATE_EAGER: c_int = 4;
/// `kv_pool_create_flags`: txb-page redundancy (each commit recomputes its pages).
pub const KV_CREATE_TXB_PAGE: c_int = 8;
/// `kv_pool_create_flags`: txb-object redundancy (a checksum per object a commit changed,
/// verified by kv_tx_read; detection only).
pub const KV_CREATE_TXB_OBJECT: c_int = 16;
/// The redundancy flags (at most one).
const REDUNDANCY_FLAGS: c_int =
    KV_CREATE_LAZY | KV_CREATE_EAGER | KV_CREATE_TXB_PAGE | KV_CREATE_TXB_OBJECT;
/// A verified read found damage (a line and its page fail their checksums): refused, not
/// served; a scrub and repair rebuild it from parity.
pub const KV_EREFUSED: c_int = 14;

/// Bytes of a `kv_mutex`.
const MUTEX_BYTES: u64 = std::mem::size_of::<KvMutex>() as u64;

/// First field of every live [`KvPool`]: a cheap sanity check of the pointers C passes in.
const POOL_MAGIC: u64 = u64::from_le_bytes(*b"KVCPOOL1");

/// An open pool: what `kv_pool *` points to (opaque to C).
#[derive(Debug)]
pub struct KvPool {
    magic: u64,
    /// What `kv_oid.pool_id` holds for this pool.
    pool_id: u64,
    /// Address of heap region offset 0 (exposed provenance of the mapping's base).
    base: usize,
    /// The data zone `[zone_start, zone_end)` in region offsets: where oids may point.
    zone_start: u64,
    zone_end: u64,
    /// Unique per open handle in this process (never reused, unlike the address), the key of
    /// the thread-local transaction slots.
    key: u64,
    raw: Arc<RawHeap>,
    /// `KV_OPEN_TRAP`: the staging range `kv_direct` hands addresses in.
    staging: Option<trap::Staging>,
    /// Durability on demand, once `kv_pool_on_demand` turned it on (dropped before close).
    on_demand: std::sync::Mutex<Option<heap::ondemand::OnDemand>>,
    file: HeapFile,
}

// `kv_pool *` is shared by every thread of the C program.
const _: () = {
    const fn shared_by_threads<T: Send + Sync>() {}
    shared_by_threads::<KvPool>();
};

/// A persistent pointer, `kv_oid`: the pool's id and a region offset; null when `off == 0`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvOid {
    /// Low 64 bits of the pool's UUID.
    pub pool_id: u64,
    /// Byte offset inside the heap region.
    pub off: u64,
}

impl KvOid {
    /// The null oid `{0, 0}`.
    pub const NULL: KvOid = KvOid { pool_id: 0, off: 0 };
}

/// `kv_mutex`: 64 bytes in persistent memory. Its bytes are never read or written; the lock
/// lives in DRAM, keyed by the mutex's region offset.
#[repr(C)]
#[derive(Debug)]
pub struct KvMutex {
    /// Unused storage.
    pub opaque: [u64; 8],
}

/// Next [`KvPool::key`].
static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

/// Addresses of the live `KvPool` boxes, so `kv_pool_close` never frees a pointer twice.
static LIVE: Mutex<Vec<usize>> = Mutex::new(Vec::new());

fn live_pools() -> std::sync::MutexGuard<'static, Vec<usize>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

// ------------------------------------------------------------------------------- errors

/// A failure on its way to C: the code the function returns and the text for `kv_errormsg`.
#[derive(Debug, Clone)]
struct KvError {
    code: c_int,
    msg: String,
}

impl KvError {
    fn new(code: c_int, msg: impl Into<String>) -> Self {
        KvError {
            code,
            msg: msg.into(),
        }
    }
}

impl From<HeapError> for KvError {
    fn from(e: HeapError) -> Self {
        KvError {
            code: heap_code(&e),
            msg: e.to_string(),
        }
    }
}

/// The `KV_E*` code of a heap error.
fn heap_code(e: &HeapError) -> c_int {
    match e {
        HeapError::Pmem(p) => pmem_code(p),
        HeapError::Corrupt(_) => KV_ECORRUPT,
        HeapError::Invalid { .. } | HeapError::BadPointer { .. } | HeapError::Lock(_) => KV_EINVAL,
        HeapError::BadFree { .. } => KV_EBADFREE,
        HeapError::OutOfSpace(_) => KV_ENOMEM,
        HeapError::TxTooLarge(_) => KV_ETXTOOBIG,
        HeapError::Aborted => KV_EABORTED,
        HeapError::TxState(_) => KV_ENOTX,
        HeapError::Uncorrectable { .. } => KV_EUNCORRECTABLE,
        HeapError::NotSaved { .. } => KV_ENOTSAVED,
        HeapError::Conflict(_) => KV_ECONFLICT,
        HeapError::Integrity(e) => integrity_code(e),
        HeapError::ObjectChecksum { .. } => KV_EREFUSED,
    }
}

/// The `KV_E*` code of a redundancy error.
fn integrity_code(e: &integrity::IntegrityError) -> c_int {
    use integrity::IntegrityError as I;
    match e {
        I::Pmem(p) => pmem_code(p),
        I::Refused { .. } | I::Unrepairable { .. } => KV_EREFUSED,
        I::Corrupt(_) => KV_ECORRUPT,
        I::Track(_) => KV_EIO,
        _ => KV_EINVAL,
    }
}

/// The redundancy `kv_pool_create_flags` asks for, and the other flags.
fn create_flags(flags: c_int) -> Result<(c_int, heap::Redundancy), KvError> {
    let red = flags & REDUNDANCY_FLAGS;
    let mode = match red {
        0 => heap::Redundancy::Off,
        KV_CREATE_LAZY => heap::Redundancy::Lazy,
        KV_CREATE_EAGER => heap::Redundancy::Eager,
        KV_CREATE_TXB_PAGE => heap::Redundancy::TxbPage,
        KV_CREATE_TXB_OBJECT => heap::Redundancy::TxbObject,
        _ => {
            return Err(KvError::new(
                KV_EINVAL,
                format!("pool flags {flags:#x} ask for more than one redundancy mode"),
            ));
        }
    };
    Ok((open_flags(flags & !REDUNDANCY_FLAGS)?, mode))
}

/// The `KV_CREATE_*` flag of a heap's redundancy (0 for off).
fn redundancy_flag(r: heap::Redundancy) -> c_int {
    match r {
        heap::Redundancy::Off => 0,
        heap::Redundancy::Lazy => KV_CREATE_LAZY,
        heap::Redundancy::Eager => KV_CREATE_EAGER,
        heap::Redundancy::TxbPage => KV_CREATE_TXB_PAGE,
        heap::Redundancy::TxbObject => KV_CREATE_TXB_OBJECT,
    }
}

/// The `KV_E*` code of a pool error.
fn pmem_code(e: &PmemError) -> c_int {
    match e {
        PmemError::Io { error, .. } if error.kind() == std::io::ErrorKind::AlreadyExists => {
            KV_EEXIST
        }
        PmemError::Io { .. } | PmemError::Failed | PmemError::SimulatedCrash => KV_EIO,
        PmemError::Locked(_) => KV_EBUSY,
        PmemError::Corrupt(_) | PmemError::SizeMismatch { .. } => KV_ECORRUPT,
        PmemError::NoSpace(_) => KV_ENOMEM,
        PmemError::NotAPool { .. }
        | PmemError::UnsupportedFeature { .. }
        | PmemError::Invalid { .. }
        | PmemError::RegionExists(_)
        | PmemError::NoSuchRegion(_)
        | PmemError::ReadOnly => KV_EINVAL,
    }
}

thread_local! {
    /// The calling thread's last error message, NUL-terminated (empty: none yet).
    static LAST_ERROR: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Record `msg` as the calling thread's last error.
#[cold]
fn set_error(msg: &str) {
    let _ = LAST_ERROR.try_with(|b| {
        if let Ok(mut b) = b.try_borrow_mut() {
            b.clear();
            b.extend(msg.bytes().map(|c| if c == 0 { b'?' } else { c }));
            b.push(0);
        }
    });
}

/// Record `e` and return its code.
#[cold]
fn fail(e: KvError) -> c_int {
    set_error(&e.msg);
    e.code
}

fn status(r: Result<(), KvError>) -> c_int {
    match r {
        Ok(()) => KV_OK,
        Err(e) => fail(e),
    }
}

/// Run an FFI body; a panic (a bug) becomes `on_panic` and a message instead of unwinding
/// into C.
fn guard<T>(on_panic: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            // Dropping a payload can itself panic; that must not unwind into C either.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
            set_error(&format!(
                "internal error in the Kavach library (a bug, please report it): {what}"
            ));
            on_panic
        }
    }
}

// ------------------------------------------------------------------------------- transactions

/// The calling thread's state for one pool.
struct Slot {
    /// [`KvPool::key`] of the pool.
    key: u64,
    /// The pool's engine, to roll back an open transaction when the thread exits.
    heap: Weak<RawHeap>,
    /// The lane of the open transaction, `None` between transactions.
    lane: Option<LaneGuard>,
    /// The first error of the open transaction: once set, the transaction is aborted.
    failed: Option<KvError>,
    /// The mode the outermost level of the open transaction was begun in.
    mode: TxMode,
}

impl Drop for Slot {
    /// A thread that exits inside a transaction: roll it back and free its lane, so the lane
    /// is not handed to another thread in the middle of a dead transaction.
    fn drop(&mut self) {
        let (Some(mut lane), Some(raw)) = (self.lane.take(), self.heap.upgrade()) else {
            return;
        };
        for _ in 0..lane.depth() {
            if raw.abort(&mut lane).is_err() {
                break;
            }
        }
    }
}

thread_local! {
    /// One slot per pool this thread has used (stale ones are dropped when a new one is made).
    static TXS: RefCell<Vec<Slot>> = const { RefCell::new(Vec::new()) };
}

fn with_slots<T>(f: impl FnOnce(&mut Vec<Slot>) -> Result<T, KvError>) -> Result<T, KvError> {
    TXS.try_with(|s| match s.try_borrow_mut() {
        Ok(mut slots) => f(&mut slots),
        Err(_) => Err(KvError::new(KV_EIO, "kv_* re-entered on one thread")),
    })
    .unwrap_or_else(|_| {
        Err(KvError::new(
            KV_EIO,
            "the thread is exiting: no transactions any more",
        ))
    })
}

fn no_tx(what: &str) -> KvError {
    KvError::new(
        KV_ENOTX,
        format!("{what}: the calling thread has no transaction on this pool"),
    )
}

fn aborted(first: &KvError) -> KvError {
    KvError::new(
        KV_EABORTED,
        format!("the transaction is aborted (first error: {})", first.msg),
    )
}

/// Run `op` in the calling thread's open transaction on `p`. A failure marks the transaction
/// aborted; an aborted transaction runs nothing and returns `KV_EABORTED`.
fn tx_op<T>(
    p: &KvPool,
    what: &str,
    op: impl FnOnce(&RawHeap, &mut LaneGuard) -> Result<T, KvError>,
) -> Result<T, KvError> {
    with_slots(|slots| {
        let Some(Slot {
            lane: Some(lane),
            failed,
            ..
        }) = slots.iter_mut().find(|s| s.key == p.key)
        else {
            return Err(no_tx(what));
        };
        if let Some(first) = failed {
            return Err(aborted(first));
        }
        op(&p.raw, lane).inspect_err(|e| *failed = Some(e.clone()))
    })
}

/// The `TxMode` of a `KV_TX_*` value.
fn tx_mode(mode: c_int) -> Result<TxMode, KvError> {
    match mode {
        KV_TX_UNDO => Ok(TxMode::Undo),
        KV_TX_REDO => Ok(TxMode::Redo),
        KV_TX_ISOLATED => Ok(TxMode::Isolated),
        _ => Err(KvError::new(
            KV_EINVAL,
            format!(
                "kv_tx_begin_mode: mode {mode} is not KV_TX_UNDO ({KV_TX_UNDO}), \
                 KV_TX_REDO ({KV_TX_REDO}) or KV_TX_ISOLATED ({KV_TX_ISOLATED})"
            ),
        )),
    }
}

/// Begin a transaction in `mode` (a `KV_TX_*` value), or a nested level of the open one (which
/// keeps the outer level's mode). A bad mode inside a transaction aborts it, like every failed
/// call there.
fn tx_begin(p: &KvPool, mode: c_int) -> Result<(), KvError> {
    with_slots(|slots| {
        let slot = match slots.iter().position(|s| s.key == p.key) {
            Some(i) => &mut slots[i],
            None => {
                // Slots of pools closed since (by any thread) go now.
                slots.retain(|s| s.lane.is_some() || s.heap.strong_count() > 0);
                slots.push(Slot {
                    key: p.key,
                    heap: Arc::downgrade(&p.raw),
                    lane: None,
                    failed: None,
                    mode: TxMode::Undo,
                });
                slots.last_mut().expect("just pushed")
            }
        };
        let mode = match (tx_mode(mode), &slot.lane) {
            (Ok(m), _) => m,
            (Err(e), None) => return Err(e),
            (Err(e), Some(_)) => {
                if slot.failed.is_none() {
                    slot.failed = Some(e.clone());
                }
                return Err(e);
            }
        };
        let lane = match &mut slot.lane {
            Some(lane) => {
                if let Some(first) = &slot.failed {
                    // Opens no level: the caller ends the levels it has.
                    return Err(aborted(first));
                }
                lane
            }
            None => {
                slot.failed = None;
                slot.mode = mode;
                slot.lane.insert(p.raw.lane())
            }
        };
        // A nested level keeps the outer level's mode.
        p.raw.begin_mode(lane, slot.mode);
        Ok(())
    })
}

fn tx_commit(p: &KvPool) -> Result<(), KvError> {
    with_slots(|slots| {
        let Some(slot) = slots.iter_mut().find(|s| s.key == p.key) else {
            return Err(no_tx("kv_tx_commit"));
        };
        let Some(lane) = &mut slot.lane else {
            return Err(no_tx("kv_tx_commit"));
        };
        let depth = lane.depth();
        if let Some(first) = &slot.failed {
            let first = first.clone();
            if depth > 1 {
                // Leave the level; the outermost commit rolls back.
                let _ = p.raw.commit(lane);
                return Err(first);
            }
            let rolled_back = p.raw.abort(lane);
            slot.lane = None;
            slot.failed = None;
            rolled_back.map_err(|e| {
                KvError::new(
                    heap_code(&e),
                    format!(
                        "rolling back the aborted transaction failed: {e} (it was aborted by: {})",
                        first.msg
                    ),
                )
            })?;
            return Err(KvError::new(
                first.code,
                format!("the transaction was rolled back: {}", first.msg),
            ));
        }
        let r = p.raw.commit(lane);
        if depth <= 1 {
            // Committed or rolled back by the engine: the transaction is over.
            slot.lane = None;
        }
        r.map_err(|e| {
            let e = KvError::from(e);
            if depth > 1 {
                slot.failed = Some(e.clone());
            }
            e
        })
    })
}

fn tx_abort(p: &KvPool, err: c_int) -> Result<(), KvError> {
    with_slots(|slots| {
        let Some(slot) = slots.iter_mut().find(|s| s.key == p.key) else {
            return Err(no_tx("kv_tx_abort"));
        };
        let Some(lane) = &mut slot.lane else {
            return Err(no_tx("kv_tx_abort"));
        };
        let depth = lane.depth();
        if slot.failed.is_none() {
            let code = if err == KV_OK { KV_EABORTED } else { err };
            slot.failed = Some(KvError::new(
                code,
                format!("aborted by kv_tx_abort (error {err})"),
            ));
        }
        let r = p.raw.abort(lane);
        if depth <= 1 {
            slot.lane = None;
            slot.failed = None;
        }
        r.map_err(KvError::from)
    })
}

/// The `KV_TX_*` mode of the calling thread's open transaction on `p`, `None` without one.
fn tx_mode_of(p: &KvPool) -> Option<c_int> {
    with_slots(|slots| {
        Ok(slots
            .iter()
            .find(|s| s.key == p.key && s.lane.as_ref().is_some_and(|l| l.in_tx()))
            // The mode the heap gave the transaction (admission may have turned redo into
            // undo), else the one asked for.
            .map(|s| {
                match s
                    .lane
                    .as_ref()
                    .and_then(|l| p.raw.tx_mode(l))
                    .unwrap_or(s.mode)
                {
                    TxMode::Undo => KV_TX_UNDO,
                    TxMode::Redo => KV_TX_REDO,
                    TxMode::Isolated => KV_TX_ISOLATED,
                }
            }))
    })
    .unwrap_or(None)
}

/// Run `op` with the calling thread's open transaction on `p` if it has one (as `tx_op`: a
/// failure aborts it, an aborted one runs nothing), else `outside`.
fn tx_or_not<T>(
    p: &KvPool,
    op: impl FnOnce(&RawHeap, &mut LaneGuard) -> Result<T, KvError>,
    outside: impl FnOnce(&RawHeap) -> Result<T, KvError>,
) -> Result<T, KvError> {
    with_slots(|slots| {
        let Some(Slot {
            lane: Some(lane),
            failed,
            ..
        }) = slots.iter_mut().find(|s| s.key == p.key)
        else {
            return outside(&p.raw);
        };
        if let Some(first) = failed {
            return Err(aborted(first));
        }
        op(&p.raw, lane).inspect_err(|e| *failed = Some(e.clone()))
    })
}

fn tx_active(p: &KvPool) -> bool {
    with_slots(|slots| {
        Ok(slots
            .iter()
            .any(|s| s.key == p.key && s.lane.as_ref().is_some_and(|l| l.in_tx())))
    })
    .unwrap_or(false)
}

impl KvPool {
    /// The handle of an open pool; with `KV_OPEN_TRAP` in `flags`, its staging range is
    /// reserved (if that fails, the pool is closed again).
    fn new(file: HeapFile, flags: c_int) -> Result<KvPool, KvError> {
        let raw = Arc::clone(file.raw());
        let geo = raw.geometry();
        let staging = if flags & KV_OPEN_TRAP != 0 {
            match trap::Staging::reserve(geo.zone_end()) {
                Ok(s) => Some(s),
                Err(e) => {
                    drop(raw);
                    let _ = file.close();
                    return Err(e);
                }
            }
        } else {
            None
        };
        Ok(KvPool {
            magic: POOL_MAGIC,
            pool_id: raw.pool_id(),
            base: file.base_ptr().expose_provenance(),
            zone_start: geo.zone_off,
            zone_end: geo.zone_end(),
            key: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
            raw,
            staging,
            on_demand: std::sync::Mutex::new(None),
            file,
        })
    }

    /// Turn durability on demand on, saved on SIGPWR within `window_ms` by the process's one
    /// save thread (started, with its SIGPWR source, on first use).
    fn on_demand(&self, window_ms: f64) -> Result<(), KvError> {
        use powerfail::{HoldPolicy, PowerFail, SaveCost, SaveThread, Sigpwr, Window};
        type Saver = (PowerFail, SaveThread, Sigpwr);
        static SAVER: std::sync::Mutex<Option<Saver>> = std::sync::Mutex::new(None);
        let bad =
            |e: &dyn std::fmt::Display| KvError::new(KV_EINVAL, format!("kv_pool_on_demand: {e}"));
        let window = Window::deadline_ms(window_ms).map_err(|e| bad(&e))?;
        let mut g = SAVER.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            let cost = SaveCost::measure(
                1 << 20,
                std::time::Duration::from_nanos(100),
                std::time::Duration::from_micros(50),
            )
            .map_err(|e| bad(&e))?;
            let pf = PowerFail::new(window, cost);
            let saver = SaveThread::spawn(&pf, HoldPolicy::HoldUntilClear).map_err(|e| bad(&e))?;
            let sig = Sigpwr::install(&saver, window).map_err(|e| bad(&e))?;
            *g = Some((pf, saver, sig));
        }
        let (pf, _, _) = g.as_ref().expect("set above");
        pf.set_window(window);
        let od = heap::ondemand::enable(&self.raw, pf)
            .map_err(|e| KvError::new(heap_code(&e), format!("kv_pool_on_demand: {e}")))?;
        *self.on_demand.lock().unwrap_or_else(|p| p.into_inner()) = Some(od);
        Ok(())
    }

    /// The address C sees for region offset `off` (in the zone): in the staging range for a
    /// trapped pool, else in the mapping.
    fn addr_of(&self, off: u64) -> usize {
        match &self.staging {
            Some(s) => s.start() + off as usize,
            None => self.base + off as usize,
        }
    }

    /// Does `[addr, addr + len)` share a byte with the data zone, through the mapping or the
    /// staging range?
    fn overlaps(&self, addr: usize, len: usize) -> bool {
        let hits = |base: usize| {
            let (zs, ze) = (
                base + self.zone_start as usize,
                base + self.zone_end as usize,
            );
            addr < ze && addr.saturating_add(len) > zs
        };
        hits(self.base) || self.staging.as_ref().is_some_and(|s| hits(s.start()))
    }

    /// `[addr, addr + len)` as a region offset if it lies in the data zone (through the
    /// staging range of a trapped pool, or the mapping).
    fn locate(&self, addr: usize, len: u64) -> Option<u64> {
        let off = self.offset_of(addr);
        (addr != 0 && self.in_zone(off, len)).then_some(off)
    }

    /// `[off, off + len)` lies in the data zone.
    fn in_zone(&self, off: u64, len: u64) -> bool {
        off >= self.zone_start && off.checked_add(len).is_some_and(|end| end <= self.zone_end)
    }

    /// The region offset of address `addr` (wrapping: check it with `in_zone`). For a trapped
    /// pool, an address in its staging range translates from there.
    fn offset_of(&self, addr: usize) -> u64 {
        match &self.staging {
            Some(s) if addr.wrapping_sub(s.start()) < s.len() => (addr - s.start()) as u64,
            _ => addr.wrapping_sub(self.base) as u64,
        }
    }

    fn oid(&self, off: u64) -> KvOid {
        KvOid {
            pool_id: self.pool_id,
            off,
        }
    }

    /// `oid`'s offset if it is a non-null oid of this pool.
    fn own(&self, oid: KvOid) -> Result<u64, KvError> {
        if oid.off == 0 {
            return Err(KvError::new(KV_EINVAL, "the null oid"));
        }
        if oid.pool_id != self.pool_id {
            return Err(KvError::new(
                KV_EINVAL,
                format!(
                    "oid {{{:#x}, {:#x}}} belongs to another pool (this one is {:#x})",
                    oid.pool_id, oid.off, self.pool_id
                ),
            ));
        }
        Ok(oid.off)
    }

    /// The region offset of the mutex at `m`.
    fn mutex_key(&self, m: *mut KvMutex) -> Result<u64, KvError> {
        if m.is_null() {
            return Err(KvError::new(KV_EINVAL, "the mutex pointer is null"));
        }
        let off = self.offset_of(m.addr());
        if !self.in_zone(off, MUTEX_BYTES) {
            return Err(KvError::new(
                KV_EINVAL,
                format!("the mutex at {m:p} is not inside the pool's heap"),
            ));
        }
        Ok(off)
    }
}

/// The flags of a `kv_pool_*_flags` call, with `KAVACH_TRAP=1` in the environment adding
/// `KV_OPEN_TRAP`.
fn open_flags(flags: c_int) -> Result<c_int, KvError> {
    if flags & !OPEN_FLAGS != 0 {
        return Err(KvError::new(
            KV_EINVAL,
            format!("unknown pool flags {flags:#x} (known: KV_OPEN_TRAP = {KV_OPEN_TRAP:#x})"),
        ));
    }
    let env = std::env::var_os("KAVACH_TRAP").is_some_and(|v| v == "1");
    Ok(if env { flags | KV_OPEN_TRAP } else { flags })
}

fn handle(made: Result<HeapFile, HeapError>, flags: c_int) -> *mut KvPool {
    match made
        .map_err(KvError::from)
        .and_then(|file| KvPool::new(file, flags))
    {
        Ok(pool) => {
            let p = Box::into_raw(Box::new(pool));
            live_pools().push(p.addr());
            p
        }
        Err(e) => {
            fail(e);
            ptr::null_mut()
        }
    }
}

// The exported functions are in `c_api.rs`; `docs/unsafe.md` argues their soundness.
#[allow(unsafe_code)] // Unsafe: the FFI boundary (pointers and strings from C, no_mangle).
mod c_api;
// `docs/unsafe.md`, "The usage trap", argues its soundness.
#[allow(unsafe_code)] // Unsafe: mmap/munmap of the staging ranges and the SIGSEGV handler.
mod trap;
pub use c_api::*;

#[cfg(test)]
#[allow(unsafe_code)] // The tests call the exported functions, as C does.
mod tests {
    use super::*;

    /// The header's `#define KV_E*` values are the Rust constants.
    #[test]
    fn header_codes_match() {
        let h = include_str!("../include/kavach.h");
        let want = [
            ("KV_OK", KV_OK),
            ("KV_EINVAL", KV_EINVAL),
            ("KV_ENOMEM", KV_ENOMEM),
            ("KV_ENOTX", KV_ENOTX),
            ("KV_EABORTED", KV_EABORTED),
            ("KV_ETXTOOBIG", KV_ETXTOOBIG),
            ("KV_EIO", KV_EIO),
            ("KV_ECORRUPT", KV_ECORRUPT),
            ("KV_EBADFREE", KV_EBADFREE),
            ("KV_EEXIST", KV_EEXIST),
            ("KV_EBUSY", KV_EBUSY),
            ("KV_ENOTSAVED", KV_ENOTSAVED),
            ("KV_ECONFLICT", KV_ECONFLICT),
        ];
        let mut found = 0;
        for line in h.lines() {
            let mut w = line.split_whitespace();
            if w.next() != Some("#define") {
                continue;
            }
            let (Some(name), Some(value)) = (w.next(), w.next()) else {
                continue;
            };
            if let Some(&(_, code)) = want.iter().find(|(n, _)| *n == name) {
                assert_eq!(value.parse::<c_int>().ok(), Some(code), "{name}");
                found += 1;
            }
        }
        assert_eq!(found, want.len(), "every code is defined once in kavach.h");
    }

    #[test]
    fn error_codes() {
        let io = |kind| {
            HeapError::Pmem(PmemError::Io {
                what: "x",
                path: "p".into(),
                error: std::io::Error::from(kind),
            })
        };
        let table: Vec<(HeapError, c_int)> = vec![
            (io(std::io::ErrorKind::AlreadyExists), KV_EEXIST),
            (io(std::io::ErrorKind::NotFound), KV_EIO),
            (HeapError::Pmem(PmemError::Locked("p".into())), KV_EBUSY),
            (HeapError::Pmem(PmemError::Failed), KV_EIO),
            (
                HeapError::Pmem(PmemError::NotAPool {
                    path: "p".into(),
                    reason: "r".into(),
                }),
                KV_EINVAL,
            ),
            (
                HeapError::Invalid {
                    what: "w",
                    reason: "r".into(),
                },
                KV_EINVAL,
            ),
            (
                HeapError::BadPointer {
                    offset: 1,
                    len: 1,
                    zone_start: 2,
                    zone_end: 3,
                },
                KV_EINVAL,
            ),
            (HeapError::OutOfSpace(64), KV_ENOMEM),
            (HeapError::TxTooLarge("x".into()), KV_ETXTOOBIG),
            (HeapError::Aborted, KV_EABORTED),
            (HeapError::TxState("x"), KV_ENOTX),
            (
                HeapError::BadFree {
                    offset: 1,
                    reason: "r".into(),
                },
                KV_EBADFREE,
            ),
            (HeapError::Lock("x".into()), KV_EINVAL),
        ];
        for (e, code) in table {
            assert_eq!(heap_code(&e), code, "{e}");
        }
    }

    #[test]
    fn null_arguments_are_errors() {
        // SAFETY: null pool pointers and a null path are part of every function's contract.
        unsafe {
            assert!(kv_pool_create(ptr::null(), 1 << 30).is_null());
            assert!(kv_pool_open(ptr::null()).is_null());
            assert_eq!(kv_pool_close(ptr::null_mut()), KV_EINVAL);
            assert_eq!(kv_tx_begin(ptr::null_mut()), KV_EINVAL);
            assert_eq!(kv_tx_commit(ptr::null_mut()), KV_EINVAL);
            assert!(kv_direct(ptr::null(), KvOid { pool_id: 1, off: 1 }).is_null());
            assert_eq!(kv_root(ptr::null_mut(), 8), KvOid::NULL);
            assert_eq!(kv_tx_active(ptr::null()), 0);
            assert!(kv_pool_create_flags(ptr::null(), 1 << 30, KV_OPEN_TRAP).is_null());
            assert!(kv_pool_open_flags(ptr::null(), 0).is_null());
            assert_eq!(kv_tx_begin_mode(ptr::null_mut(), KV_TX_REDO), KV_EINVAL);
            assert_eq!(kv_tx_mode(ptr::null()), -1);
            let mut word = 0u64;
            let at = (&raw mut word).cast::<c_void>();
            assert_eq!(kv_tx_write(ptr::null_mut(), at, at, 8), KV_EINVAL);
            assert_eq!(kv_tx_read(ptr::null_mut(), at, at, 8), KV_EINVAL);
        }
        // SAFETY: kv_errormsg returns a NUL-terminated string valid until the next failure.
        let msg = unsafe { CStr::from_ptr(kv_errormsg()) };
        assert_eq!(msg.to_str().unwrap(), "the pool pointer is null");
    }

    #[test]
    fn modes_and_flags_are_checked() {
        assert!(matches!(tx_mode(KV_TX_UNDO), Ok(TxMode::Undo)));
        assert!(matches!(tx_mode(KV_TX_REDO), Ok(TxMode::Redo)));
        assert!(matches!(tx_mode(KV_TX_ISOLATED), Ok(TxMode::Isolated)));
        let e = tx_mode(3).expect_err("mode 3");
        assert_eq!(e.code, KV_EINVAL);
        assert!(e.msg.contains("mode 3"), "{}", e.msg);
        assert_eq!(open_flags(0).map_err(|e| e.code), Ok(env_trap()));
        assert_eq!(
            open_flags(KV_OPEN_TRAP).map_err(|e| e.code),
            Ok(KV_OPEN_TRAP)
        );
        assert_eq!(open_flags(4).map_err(|e| e.code), Err(KV_EINVAL));
    }

    /// `KV_OPEN_TRAP` if the environment of this test process asks for it.
    fn env_trap() -> c_int {
        if std::env::var_os("KAVACH_TRAP").is_some_and(|v| v == "1") {
            KV_OPEN_TRAP
        } else {
            0
        }
    }

    #[test]
    fn a_panic_becomes_an_error() {
        let r = guard(KV_EIO, || -> c_int { panic!("boom") });
        assert_eq!(r, KV_EIO);
        // SAFETY: as above.
        let msg = unsafe { CStr::from_ptr(kv_errormsg()) };
        assert!(msg.to_str().unwrap().contains("boom"), "{msg:?}");
    }
}
