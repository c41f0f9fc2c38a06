//! The real-time controller: tenants' jobs wait in per-tenant queues, a controller thread
//! grants them by the arbiter (see [`crate::arbiter`]) whenever a device unit is free, and
//! worker threads (one per unit) run them.
//!
//! # Why units
//!
//! A command is granted only when a unit is free. That is what lets commands pile up in the
//! queues, so the arbiter has a choice to make; a controller that started every command at
//! once (the flaw the dissertation found in the stock emulator) would have no backlog and no
//! QoS.
//!
//! # Emulated service time
//!
//! With a [`ServiceModel`], the device has `service.units` units (and `workers` is not used),
//! and a command holds its unit for the longer of its emulated service time,
//! `base_us + bytes / bytes_per_us`, and the time its job ran. Times are kept on a virtual
//! clock per unit: a command that was already queued when its unit became free starts,
//! virtually, at that moment, even if the controller thread woke up later (sleeps overshoot
//! by tens of microseconds), and the delay before a worker thread gets to run a job is not
//! charged to the device. So the emulated rate does not drift with the scheduler's wake-up
//! delays: over a backlogged stretch a unit completes commands back to back on its virtual
//! clock. The virtual start is never before the command was queued, and never more than
//! 10 ms behind the real clock (when the machine cannot keep up for longer than that, the
//! lost time is not made up, so the emulated device is then slower than modelled). A command
//! completes, for its submitter and the statistics, at the end of its virtual service or when
//! its job returned, whichever is later. The controller sleeps once, until the earliest
//! deadline. Without a service model, `workers` units run jobs as fast as the jobs go.
//!
//! # Queues
//!
//! [`Controller::queue`] gives the queue of tenant `name` in `class`: one queue per pair,
//! shared by all handles to it, made on first use. When the last handle is dropped the queue
//! is removed once it is empty (its queued jobs still run). Its statistics are kept after
//! that (for the most recent 256 removed queues) and continue if the same pair comes back.
//! Submitting to a full queue blocks until a command of that queue is granted
//! (backpressure: a tenant that floods only fills its own queue).
//!
//! # Shutdown
//!
//! [`Controller::shutdown`] refuses new submissions (submitters blocked on a full queue get
//! an error, their job is not run), runs every job already queued, and returns when the
//! controller and its workers have finished (unless called from inside a job, where it only
//! signals). Dropping the last `Controller` handle does the same. A job that panics does not
//! take its unit down; [`TenantQueue::run`] reports it as [`HaqError::JobFailed`].

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak, mpsc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::arbiter::{Arbiter, ArbiterConfig, Full, QueueId};
use crate::class::{Class, HaqError};
use crate::stats::{ControllerStats, TenantAcc};

/// A device's service time, emulated: `units` units in parallel, each command holds a unit for
/// `base_us + bytes / bytes_per_us` microseconds (at least as long as the real work took).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ServiceModel {
    /// Units working in parallel (at least 1).
    pub units: u32,
    /// Fixed time per command, microseconds (at least 0).
    pub base_us: f64,
    /// Transfer rate, bytes per microsecond (= MB/s with 1 MB = 10^6 bytes); above 0.
    pub bytes_per_us: f64,
}

/// The most units (and workers) a controller runs.
pub const MAX_UNITS: u32 = 1024;

impl ServiceModel {
    /// Check the ranges: 1..=1024 units, a finite `base_us` of at least 0, a finite
    /// `bytes_per_us` above 0.
    pub fn validate(&self) -> Result<(), HaqError> {
        if !(1..=MAX_UNITS).contains(&self.units) {
            return Err(HaqError::InvalidConfig {
                what: "service.units",
                expected: format!("1..={MAX_UNITS}"),
                found: self.units.to_string(),
            });
        }
        if !(self.base_us.is_finite() && self.base_us >= 0.0) {
            return Err(HaqError::InvalidConfig {
                what: "service.base_us",
                expected: "a finite number of microseconds >= 0".into(),
                found: self.base_us.to_string(),
            });
        }
        if !(self.bytes_per_us.is_finite() && self.bytes_per_us > 0.0) {
            return Err(HaqError::InvalidConfig {
                what: "service.bytes_per_us",
                expected: "a finite rate > 0 (MB/s)".into(),
                found: self.bytes_per_us.to_string(),
            });
        }
        Ok(())
    }

    /// The service time of a command of `bytes` bytes, in microseconds.
    pub fn service_us(&self, bytes: u32) -> f64 {
        self.base_us + f64::from(bytes) / self.bytes_per_us
    }

    /// The service time of a command of `bytes` bytes.
    pub fn service_time(&self, bytes: u32) -> Duration {
        let us = self.service_us(bytes);
        if us.is_finite() && us > 0.0 {
            Duration::from_secs_f64((us / 1e6).min(1e9))
        } else {
            Duration::ZERO
        }
    }
}

impl fmt::Display for ServiceModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "units={},base-us={},mbps={}",
            self.units, self.base_us, self.bytes_per_us
        )
    }
}

impl FromStr for ServiceModel {
    type Err = HaqError;

    /// `units=N,base-us=F,mbps=F`, in any order; `units` defaults to 1 and `base-us` to 0,
    /// `mbps` (MB/s, 10^6 bytes per second, the same as bytes per microsecond) is required.
    /// `bytes-per-us` is accepted for `mbps`.
    fn from_str(s: &str) -> Result<ServiceModel, HaqError> {
        const EXPECTED: &str =
            "units=N,base-us=MICROSECONDS,mbps=MB_PER_S (e.g. units=4,base-us=50,mbps=400)";
        let bad = || HaqError::Parse {
            what: "service model",
            expected: EXPECTED,
            found: s.to_owned(),
        };
        let mut units = None;
        let mut base = None;
        let mut rate = None;
        for part in s.split(',') {
            let (k, v) = part.split_once('=').ok_or_else(bad)?;
            let v = v.trim();
            match k.trim() {
                "units" if units.is_none() => units = Some(v.parse::<u32>().map_err(|_| bad())?),
                "base-us" if base.is_none() => base = Some(v.parse::<f64>().map_err(|_| bad())?),
                "mbps" | "bytes-per-us" if rate.is_none() => {
                    rate = Some(v.parse::<f64>().map_err(|_| bad())?)
                }
                _ => return Err(bad()),
            }
        }
        let m = ServiceModel {
            units: units.unwrap_or(1),
            base_us: base.unwrap_or(0.0),
            bytes_per_us: rate.ok_or_else(bad)?,
        };
        m.validate()?;
        Ok(m)
    }
}

/// How a controller runs.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ControllerOptions {
    /// The arbitration.
    pub arbiter: ArbiterConfig,
    /// Device units executing commands (1..=1024), when there is no service model.
    pub workers: u32,
    /// `None`: jobs take as long as they take. `Some`: the emulated device, whose `units`
    /// replace `workers`.
    pub service: Option<ServiceModel>,
    /// The depth of each tenant queue (1..=65536).
    pub queue_depth: u32,
}

impl ControllerOptions {
    /// The number of device units: the service model's, else `workers`.
    pub fn units(&self) -> u32 {
        self.service.map_or(self.workers, |s| s.units)
    }

    /// Check every field's range.
    pub fn validate(&self) -> Result<(), HaqError> {
        self.arbiter.validate()?;
        if !(1..=MAX_UNITS).contains(&self.workers) {
            return Err(HaqError::InvalidConfig {
                what: "workers",
                expected: format!("1..={MAX_UNITS}"),
                found: self.workers.to_string(),
            });
        }
        if let Some(s) = &self.service {
            s.validate()?;
        }
        if !(1..=65536).contains(&self.queue_depth) {
            return Err(HaqError::InvalidConfig {
                what: "queue_depth",
                expected: "1..=65536".into(),
                found: self.queue_depth.to_string(),
            });
        }
        Ok(())
    }
}

/// A job: the work of one command.
pub type Job = Box<dyn FnOnce() + Send + 'static>;

/// Removed queues whose statistics are kept.
const RETIRED_KEPT: usize = 256;
/// The most a virtual start may lag the real clock.
const CATCH_UP: Duration = Duration::from_millis(10);

thread_local! {
    /// Set on the controller's own threads, where waiting for it to finish would deadlock.
    static ON_CONTROLLER_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Submitters waiting for room in one queue.
struct Space {
    cv: Condvar,
    waiters: AtomicU32,
}

/// Called by the controller when a command completes (its emulated time included).
type OnComplete = Box<dyn FnOnce() + Send + 'static>;

struct Cmd {
    job: Job,
    on_complete: Option<OnComplete>,
    tenant: u64,
    submitted: Instant,
    space: Arc<Space>,
}

struct Running {
    tenant: u64,
    bytes: u32,
    submitted: Instant,
    started: Instant,
    /// When the command started on the unit's virtual clock.
    vstart: Instant,
    /// The end of its emulated service time (`started` without a service model).
    deadline: Instant,
    /// When the job returned, and how long it ran on its worker.
    done_at: Option<(Instant, Duration)>,
    on_complete: Option<OnComplete>,
}

enum Unit {
    Idle { vfree: Instant },
    Busy(Running),
}

type Key = (String, Class);

struct Entry {
    qid: QueueId,
    tenant: u64,
    handle: Weak<TenantInner>,
    space: Arc<Space>,
}

struct State {
    arbiter: Arbiter<Cmd>,
    units: Vec<Unit>,
    idle_units: u32,
    registry: HashMap<Key, Entry>,
    /// Queues whose handles are gone, removed when they run empty.
    orphans: HashMap<QueueId, Key>,
    tenants: HashMap<u64, TenantAcc>,
    retired: HashMap<Key, u64>,
    retired_order: VecDeque<Key>,
    next_tenant: u64,
    shutdown: bool,
    finished: bool,
    ctl_sleeping: bool,
    /// One sender per unit's worker; emptied when the controller finishes, which ends the
    /// workers.
    senders: Vec<mpsc::Sender<Job>>,
}

struct Shared {
    opts: ControllerOptions,
    state: Mutex<State>,
    /// Wakes the controller thread.
    ctl: Condvar,
    /// Signalled when the controller thread has finished.
    done: Condvar,
    started: Instant,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The lock is never held across a job, so a poisoned lock means a bug of ours in a
        // few lines of bookkeeping; the state is still consistent enough to shut down.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Refuse new work, wake every blocked submitter and the controller.
    fn signal_shutdown(&self) {
        let mut st = self.lock();
        st.shutdown = true;
        for e in st.registry.values() {
            e.space.cv.notify_all();
        }
        self.ctl.notify_one();
    }

    /// Wait until the controller thread has run every queued job and exited, then join the
    /// threads. Does nothing on the controller's own threads.
    fn wait_finished(&self) {
        if ON_CONTROLLER_THREAD.with(|f| f.get()) {
            return;
        }
        let mut st = self.lock();
        while !st.finished {
            st = self.done.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        drop(st);
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

/// Shuts the controller down when the last `Controller` handle goes.
struct Owner {
    shared: Arc<Shared>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.shared.signal_shutdown();
        self.shared.wait_finished();
    }
}

/// A running controller; a cheap, clonable handle.
#[derive(Clone)]
pub struct Controller {
    shared: Arc<Shared>,
    _owner: Arc<Owner>,
}

impl fmt::Debug for Controller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("options", &self.shared.opts)
            .finish_non_exhaustive()
    }
}

impl Controller {
    /// Start the controller thread and one worker thread per unit.
    pub fn start(opts: ControllerOptions) -> Result<Controller, HaqError> {
        opts.validate()?;
        let n = opts.units();
        let now = Instant::now();
        let state = State {
            arbiter: Arbiter::new(opts.arbiter)?,
            units: (0..n).map(|_| Unit::Idle { vfree: now }).collect(),
            idle_units: n,
            registry: HashMap::new(),
            orphans: HashMap::new(),
            tenants: HashMap::new(),
            retired: HashMap::new(),
            retired_order: VecDeque::new(),
            next_tenant: 0,
            shutdown: false,
            finished: false,
            ctl_sleeping: false,
            senders: Vec::new(),
        };
        let shared = Arc::new(Shared {
            opts,
            state: Mutex::new(state),
            ctl: Condvar::new(),
            done: Condvar::new(),
            started: now,
            threads: Mutex::new(Vec::new()),
        });
        let mut senders = Vec::new();
        let mut threads = Vec::new();
        let spawn_err = |e: std::io::Error| HaqError::Io {
            what: "start a HAQ controller thread".into(),
            source: e,
        };
        for u in 0..n as usize {
            let (tx, rx) = mpsc::channel::<Job>();
            senders.push(tx);
            let sh = shared.clone();
            let t = thread::Builder::new()
                .name(format!("haq-unit-{u}"))
                .spawn(move || worker(sh, u, rx));
            match t {
                Ok(t) => threads.push(t),
                Err(e) => {
                    drop(senders);
                    for t in threads {
                        let _ = t.join();
                    }
                    return Err(spawn_err(e));
                }
            }
        }
        shared.lock().senders = senders;
        let sh = shared.clone();
        let ctl = thread::Builder::new()
            .name("haq-controller".into())
            .spawn(move || control(sh));
        match ctl {
            Ok(t) => threads.push(t),
            Err(e) => {
                // Dropping the senders ends the workers.
                shared.lock().senders.clear();
                for t in threads {
                    let _ = t.join();
                }
                return Err(spawn_err(e));
            }
        }
        *shared.threads.lock().unwrap_or_else(|e| e.into_inner()) = threads;
        Ok(Controller {
            _owner: Arc::new(Owner {
                shared: shared.clone(),
            }),
            shared,
        })
    }

    /// The queue of tenant `name` in `class`: the same pair gets the same queue (shared by
    /// all its handles); made on first use, removed when its last handle is gone and it is
    /// empty.
    pub fn queue(&self, name: &str, class: Class) -> TenantQueue {
        let sh = &self.shared;
        let mut st = sh.lock();
        let key: Key = (name.to_owned(), class);
        if let Some(e) = st.registry.get(&key) {
            if let Some(inner) = e.handle.upgrade() {
                return TenantQueue { inner };
            }
        }
        let revived = st
            .registry
            .get(&key)
            .map(|e| (e.qid, e.tenant, e.space.clone()));
        let (qid, tenant, space) = match revived {
            Some((qid, tenant, space)) => {
                st.orphans.remove(&qid);
                (qid, tenant, space)
            }
            None => {
                let qid = st.arbiter.add_queue(class, sh.opts.queue_depth);
                let tenant = match st.retired.remove(&key) {
                    Some(t) => {
                        st.retired_order.retain(|k| k != &key);
                        t
                    }
                    None => {
                        let t = st.next_tenant;
                        st.next_tenant += 1;
                        st.tenants
                            .insert(t, TenantAcc::new(name, class, sh.started));
                        t
                    }
                };
                let space = Arc::new(Space {
                    cv: Condvar::new(),
                    waiters: AtomicU32::new(0),
                });
                (qid, tenant, space)
            }
        };
        let inner = Arc::new(TenantInner {
            shared: sh.clone(),
            key: key.clone(),
            qid,
            tenant,
            space: space.clone(),
        });
        st.registry.insert(
            key,
            Entry {
                qid,
                tenant,
                handle: Arc::downgrade(&inner),
                space,
            },
        );
        TenantQueue { inner }
    }

    /// Per-tenant statistics now.
    pub fn stats(&self) -> ControllerStats {
        let sh = &self.shared;
        let st = sh.lock();
        let now = Instant::now();
        let mut tenants = Vec::new();
        for e in st.registry.values() {
            if let Some(acc) = st.tenants.get(&e.tenant) {
                let queued = u32::try_from(st.arbiter.queued(e.qid)).unwrap_or(u32::MAX);
                tenants.push(acc.report(queued, now));
            }
        }
        for t in st.retired.values() {
            if let Some(acc) = st.tenants.get(t) {
                tenants.push(acc.report(0, now));
            }
        }
        tenants.sort_by(|a, b| (a.class, &a.name).cmp(&(b.class, &b.name)));
        ControllerStats {
            policy: sh.opts.arbiter.policy,
            weights: sh.opts.arbiter.weights,
            tenants,
            uptime_s: now.duration_since(sh.started).as_secs_f64(),
        }
    }

    /// The options the controller runs with.
    pub fn options(&self) -> &ControllerOptions {
        &self.shared.opts
    }

    /// Refuse new submissions, run what is queued, and return when done (see the module
    /// documentation). Calling it again, or from several handles, is harmless.
    pub fn shutdown(&self) {
        self.shared.signal_shutdown();
        self.shared.wait_finished();
    }

    /// Whether [`Controller::shutdown`] was called (or the last handle dropped).
    pub fn is_shut_down(&self) -> bool {
        self.shared.lock().shutdown
    }
}

struct TenantInner {
    shared: Arc<Shared>,
    key: Key,
    qid: QueueId,
    tenant: u64,
    space: Arc<Space>,
}

impl Drop for TenantInner {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        let ours = st
            .registry
            .get(&self.key)
            .is_some_and(|e| e.qid == self.qid && e.handle.upgrade().is_none());
        if !ours {
            return;
        }
        if st.arbiter.queued(self.qid) == 0 {
            remove_queue(&mut st, self.qid, &self.key);
        } else {
            st.orphans.insert(self.qid, self.key.clone());
        }
    }
}

/// Remove an empty queue; keep its statistics among the retired.
fn remove_queue(st: &mut State, qid: QueueId, key: &Key) {
    let _ = st.arbiter.remove_queue(qid);
    st.orphans.remove(&qid);
    if let Some(e) = st.registry.remove(key) {
        st.retired.insert(key.clone(), e.tenant);
        st.retired_order.push_back(key.clone());
        while st.retired_order.len() > RETIRED_KEPT {
            if let Some(old) = st.retired_order.pop_front() {
                if let Some(t) = st.retired.remove(&old) {
                    st.tenants.remove(&t);
                }
            }
        }
    }
}

/// A tenant's queue; a cheap, clonable handle.
#[derive(Clone)]
pub struct TenantQueue {
    inner: Arc<TenantInner>,
}

impl fmt::Debug for TenantQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TenantQueue")
            .field("name", &self.inner.key.0)
            .field("class", &self.inner.key.1)
            .field("queue", &self.inner.qid)
            .finish()
    }
}

impl TenantQueue {
    /// The tenant's name.
    pub fn name(&self) -> &str {
        &self.inner.key.0
    }

    /// The queue's class.
    pub fn class(&self) -> Class {
        self.inner.key.1
    }

    /// Commands waiting in the queue now.
    pub fn queued(&self) -> usize {
        self.inner.shared.lock().arbiter.queued(self.inner.qid)
    }

    fn label(&self) -> String {
        format!("{}/{}", self.inner.key.0, self.inner.key.1)
    }

    /// Queue `job`, costing `bytes`; blocks while the queue is full. Err once the controller
    /// is shut down (then `job` is dropped without running).
    pub fn submit(&self, bytes: u32, job: Job) -> Result<(), HaqError> {
        self.submit_inner(bytes, job, None)
    }

    fn submit_inner(
        &self,
        bytes: u32,
        job: Job,
        on_complete: Option<OnComplete>,
    ) -> Result<(), HaqError> {
        let inner = &self.inner;
        let sh = &inner.shared;
        let mut st = sh.lock();
        let mut cmd = Cmd {
            job,
            on_complete,
            tenant: inner.tenant,
            submitted: Instant::now(),
            space: inner.space.clone(),
        };
        loop {
            if st.shutdown {
                return Err(HaqError::ShutDown {
                    what: format!("submit to queue {}", self.label()),
                });
            }
            if st.arbiter.class_of(inner.qid).is_none() {
                // Cannot happen while a handle lives; never wait for room that cannot come.
                return Err(HaqError::ShutDown {
                    what: format!("submit to removed queue {}", self.label()),
                });
            }
            cmd.submitted = Instant::now();
            match st.arbiter.submit(inner.qid, bytes, cmd) {
                Ok(()) => {
                    let queued = u32::try_from(st.arbiter.queued(inner.qid)).unwrap_or(u32::MAX);
                    if let Some(acc) = st.tenants.get_mut(&inner.tenant) {
                        acc.max_queued = acc.max_queued.max(queued);
                    }
                    if st.ctl_sleeping && st.idle_units > 0 {
                        sh.ctl.notify_one();
                    }
                    return Ok(());
                }
                Err(Full(c)) => {
                    cmd = c;
                    inner.space.waiters.fetch_add(1, Ordering::Relaxed);
                    st = inner.space.cv.wait(st).unwrap_or_else(|e| e.into_inner());
                    inner.space.waiters.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Submit `f` (costing `bytes`) and wait until the command completes (with a service
    /// model: until its emulated service time is over too; its statistics are counted by
    /// then); `f`'s result. Err if the controller is shut down before it was queued, or if
    /// `f` panicked.
    pub fn run<R: Send + 'static>(
        &self,
        bytes: u32,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, HaqError> {
        let f = match self.run_inline(bytes, f) {
            Ok(r) => return r,
            Err(f) => f,
        };
        let slot = Arc::new(Mutex::new(None));
        let out = slot.clone();
        let (tx, rx) = mpsc::sync_channel::<()>(1);
        self.submit_inner(
            bytes,
            Box::new(move || {
                let r = f();
                *out.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            }),
            Some(Box::new(move || {
                let _ = tx.send(());
            })),
        )?;
        let failed = || HaqError::JobFailed {
            queue: self.label(),
        };
        rx.recv().map_err(|_| failed())?;
        let r = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        r.ok_or_else(failed)
    }
}

impl TenantQueue {
    /// The fast path of [`TenantQueue::run`]: with no emulated time, no command queued
    /// anywhere and a unit idle, the arbiter would grant this command at once, so it runs
    /// here, on the caller's thread, holding that unit, instead of going through the
    /// controller and a worker (four thread switches). Gives `f` back when the path does not
    /// apply.
    fn run_inline<R, F: FnOnce() -> R>(&self, bytes: u32, f: F) -> Result<Result<R, HaqError>, F> {
        let inner = &self.inner;
        let sh = &inner.shared;
        if sh.opts.service.is_some() || ON_CONTROLLER_THREAD.with(|c| c.get()) {
            return Err(f);
        }
        let mut st = sh.lock();
        if st.shutdown || st.idle_units == 0 || st.arbiter.total_queued() > 0 {
            return Err(f);
        }
        let Some(u) = st.units.iter().position(|u| matches!(u, Unit::Idle { .. })) else {
            return Err(f);
        };
        let start = Instant::now();
        // Busy with no completion time: the controller neither releases this unit nor sleeps
        // for it; this thread gives it back.
        st.units[u] = Unit::Busy(Running {
            tenant: inner.tenant,
            bytes,
            submitted: start,
            started: start,
            vstart: start,
            deadline: start,
            done_at: None,
            on_complete: None,
        });
        st.idle_units -= 1;
        drop(st);
        let r = catch_unwind(AssertUnwindSafe(f));
        let mut st = sh.lock();
        let end = Instant::now();
        if let Some(acc) = st.tenants.get_mut(&inner.tenant) {
            acc.complete(
                bytes,
                Duration::ZERO,
                end.saturating_duration_since(start),
                end,
            );
        }
        st.units[u] = Unit::Idle { vfree: end };
        st.idle_units += 1;
        // Commands queued meanwhile wait for a unit; so does a shutdown.
        grant_here(&mut st, None, end);
        if st.shutdown && st.ctl_sleeping {
            sh.ctl.notify_one();
        }
        drop(st);
        Ok(r.map_err(|_| HaqError::JobFailed {
            queue: self.label(),
        }))
    }
}

/// A unit's worker: run each job handed to it, then report the unit's job done.
fn worker(sh: Arc<Shared>, unit: usize, rx: mpsc::Receiver<Job>) {
    ON_CONTROLLER_THREAD.with(|f| f.set(true));
    while let Ok(job) = rx.recv() {
        // A panicking job must not take the unit down; its panic is reported by the default
        // hook and, for `run`, by the missing result.
        let t = Instant::now();
        let _ = catch_unwind(AssertUnwindSafe(job));
        let ran = t.elapsed();
        let mut st = sh.lock();
        // The time is read under the lock: the controller decided how long to sleep under it
        // too, at an earlier time, so a deadline it saw as passed is passed here as well.
        let now = Instant::now();
        let mut wake = false;
        if let Some(Unit::Busy(r)) = st.units.get_mut(unit) {
            r.done_at = Some((now, ran));
            wake = r.deadline <= now;
        }
        if wake && sh.opts.service.is_none() {
            // Without emulated time a command is over when its job returns: complete it and
            // hand the next queued command out here, rather than wake the controller thread
            // for it (two fewer thread switches per command when the queues are backlogged).
            release(&mut st, now);
            grant_here(&mut st, None, now);
            wake = st.shutdown;
        }
        if wake && st.ctl_sleeping {
            sh.ctl.notify_one();
        }
    }
}

/// [`grant`] with the senders held in the state.
fn grant_here(st: &mut State, service: Option<ServiceModel>, now: Instant) {
    let senders = std::mem::take(&mut st.senders);
    grant(st, &senders, service, now);
    st.senders = senders;
}

/// The controller thread: release units whose command is over, grant commands to free
/// units, sleep until the next deadline or a wake-up.
fn control(sh: Arc<Shared>) {
    ON_CONTROLLER_THREAD.with(|f| f.set(true));
    let service = sh.opts.service;
    let mut st = sh.lock();
    loop {
        let now = Instant::now();
        release(&mut st, now);
        grant_here(&mut st, service, now);
        if st.shutdown && st.arbiter.total_queued() == 0 && st.idle_units as usize == st.units.len()
        {
            st.finished = true;
            sh.done.notify_all();
            break;
        }
        // Sleep until the earliest future deadline of a busy unit; a unit whose deadline has
        // passed is waiting for its job, whose worker will wake us.
        let now = Instant::now();
        let wake = st
            .units
            .iter()
            .filter_map(|u| match u {
                Unit::Busy(r) if r.deadline > now => Some(r.deadline),
                _ => None,
            })
            .min();
        let releasable = st
            .units
            .iter()
            .any(|u| matches!(u, Unit::Busy(r) if r.deadline <= now && r.done_at.is_some()));
        if releasable {
            continue;
        }
        st.ctl_sleeping = true;
        st = match wake {
            Some(d) => {
                sh.ctl
                    .wait_timeout(st, d - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            None => sh.ctl.wait(st).unwrap_or_else(|e| e.into_inner()),
        };
        st.ctl_sleeping = false;
    }
    st.senders.clear();
    drop(st);
}

/// Complete every command whose job is done and whose emulated time is over.
fn release(st: &mut State, now: Instant) {
    let State {
        units,
        tenants,
        idle_units,
        ..
    } = st;
    for u in units.iter_mut() {
        let Unit::Busy(r) = u else { continue };
        let Some((done, ran)) = r.done_at else {
            continue;
        };
        if r.deadline > now {
            continue;
        }
        // On the unit's virtual clock the command took the longer of its service time and
        // the time its job ran; the delay before a worker thread got to run it is the
        // emulator's, not the device's, and is not charged. It completes (for its submitter
        // and the statistics) no earlier than its job returned.
        let vend = r.deadline.max(r.vstart + ran);
        let end = vend.max(done);
        if let Some(acc) = tenants.get_mut(&r.tenant) {
            acc.complete(
                r.bytes,
                r.started.saturating_duration_since(r.submitted),
                end.saturating_duration_since(r.submitted),
                end,
            );
        }
        if let Some(f) = r.on_complete.take() {
            f();
        }
        *u = Unit::Idle { vfree: vend };
        *idle_units += 1;
    }
}

/// Grant queued commands to idle units.
fn grant(
    st: &mut State,
    workers: &[mpsc::Sender<Job>],
    service: Option<ServiceModel>,
    now: Instant,
) {
    for (u, tx) in workers.iter().enumerate() {
        if st.idle_units == 0 || st.arbiter.total_queued() == 0 {
            return;
        }
        let Unit::Idle { vfree } = st.units[u] else {
            continue;
        };
        let Some(g) = st.arbiter.next() else { return };
        let mut cmd = g.item;
        if cmd.space.waiters.load(Ordering::Relaxed) > 0 {
            cmd.space.cv.notify_one();
        }
        if st.arbiter.queued(g.queue) == 0 {
            if let Some(key) = st.orphans.get(&g.queue).cloned() {
                remove_queue(st, g.queue, &key);
            }
        }
        let (vstart, deadline) = match service {
            Some(m) => {
                let floor = now.checked_sub(CATCH_UP).unwrap_or(now);
                let vstart = vfree.max(cmd.submitted).max(floor).min(now);
                (vstart, vstart + m.service_time(g.bytes))
            }
            None => (now, now),
        };
        st.units[u] = Unit::Busy(Running {
            tenant: cmd.tenant,
            bytes: g.bytes,
            submitted: cmd.submitted,
            started: now,
            vstart,
            deadline,
            done_at: None,
            on_complete: cmd.on_complete.take(),
        });
        st.idle_units -= 1;
        if let Err(mpsc::SendError(job)) = tx.send(cmd.job) {
            // The worker is gone (it cannot be: jobs' panics are caught). Run nothing, free
            // the unit at its deadline.
            drop(job);
            if let Unit::Busy(r) = &mut st.units[u] {
                r.done_at = Some((now, Duration::ZERO));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_model_parses_and_validates() {
        let m: ServiceModel = "units=4,base-us=50,mbps=400".parse().unwrap();
        assert_eq!(
            m,
            ServiceModel {
                units: 4,
                base_us: 50.0,
                bytes_per_us: 400.0
            }
        );
        assert_eq!(m.to_string().parse::<ServiceModel>().unwrap(), m);
        assert!((m.service_us(4000) - 60.0).abs() < 1e-9);
        assert_eq!(m.service_time(4000), Duration::from_micros(60));
        let d: ServiceModel = "mbps=100".parse().unwrap();
        assert_eq!((d.units, d.base_us), (1, 0.0));
        for bad in [
            "",
            "units=4",
            "units=0,mbps=1",
            "units=4,mbps=0",
            "mbps=-1",
            "mbps=inf",
            "mbps=nan",
            "base-us=-1,mbps=1",
            "units=4,units=5,mbps=1",
            "speed=3,mbps=1",
            "units=x,mbps=1",
            "units=2000,mbps=1",
        ] {
            let e = bad.parse::<ServiceModel>();
            assert!(e.is_err(), "{bad:?} accepted");
        }
        let e = "units=4,mbps=0"
            .parse::<ServiceModel>()
            .unwrap_err()
            .to_string();
        assert!(e.contains("bytes_per_us") && e.contains('0'), "{e}");
    }

    #[test]
    fn options_validate() {
        let ok = ControllerOptions {
            arbiter: ArbiterConfig::dissertation_drr(),
            workers: 2,
            service: None,
            queue_depth: 16,
        };
        ok.validate().unwrap();
        assert_eq!(ok.units(), 2);
        let mut o = ok.clone();
        o.workers = 0;
        assert!(Controller::start(o).is_err());
        let mut o = ok.clone();
        o.queue_depth = 0;
        assert!(Controller::start(o).is_err());
        let mut o = ok.clone();
        o.service = Some(ServiceModel {
            units: 3,
            base_us: 1.0,
            bytes_per_us: f64::NAN,
        });
        assert!(Controller::start(o).is_err());
        let mut o = ok;
        o.service = Some(ServiceModel {
            units: 3,
            base_us: 1.0,
            bytes_per_us: 1.0,
        });
        assert_eq!(o.units(), 3);
    }
}
