//! Recording real runs: [`TracingMedium`] wraps any [`pmem::Medium`], forwards every call to
//! it, and writes what the layers above did (loads, stores with their bytes, flushes, fences)
//! into a trace; callers add transaction boundaries with [`TracingMedium::begin_tx`] and
//! [`TracingMedium::commit_tx`]. Then traced runs of Kavach's own workloads: the log appending
//! records ([`log_workload`]), a hash map of the heap's transactions ([`heap_workload`]) and
//! the key-value store (`dstore` on DIPPER) under YCSB-like GETs and SETs ([`kv_workload`]).
//!
//! What is recorded, per medium call (addresses are medium offsets; a trace covers the whole
//! medium as it was when tracing started, so `pm_bytes` is its length then):
//! - `read`, `load_u64`: one `Load` (split into pieces of at most [`MAX_ACCESS_LEN`] bytes);
//! - `write`, `store_u64`: one `Store` (split likewise), with the bytes in a trace with data;
//! - `write_nontemporal`: the `Store`s, then a `Flush` of every line they cover (a
//!   non-temporal store reaches memory without staying in the cache; the simulators have no
//!   event for it, and a store written back at once is the closest);
//! - `flush`, `write_back`: a `Flush` of every 64-byte line of the range, whatever the domain
//!   does with it (the trace is what the program asked for);
//! - `fence`: a `Fence`; `persist`: the flushes and the fence;
//! - `grow`, `discard`, `back`, `inject` and the queries: nothing;
//! - with [`TracingMedium::committing_fences`] (the log and the store use it), a `TxCommit` of
//!   the lines a thread flushed after each fence that ends them.
//!
//! The core of an event is a small index given to each thread the first time it touches the
//! medium (0, 1, ...); with [`TracingMedium::folding_threads`], threads beyond the header's
//! cores share them (`k % cores`). Every call is recorded and performed under one lock, so the trace's
//! order is the order in which the medium saw the calls. Recorded runs are not deterministic:
//! threads interleave differently from run to run, and the log and the store put random UUIDs
//! on the medium; the generators of [`crate::workload`] are the deterministic traces. A medium method cannot return an
//! error for a failed recording: the first failure (a writer error, more threads than cores, a
//! medium grown past the traced range) is kept, recording stops, and [`TracingMedium::finish`]
//! returns it.

use crate::error::SimError;
use crate::trace::{Event, MAX_ACCESS_LEN, TraceHeader, TraceWriter};
use pmem::{Backing, Domain, Medium};
use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::ThreadId;
use std::time::Duration;

/// Bytes per cache line: the unit of a `Flush`.
pub const LINE: u64 = 64;

struct State<W: Write> {
    writer: Option<TraceWriter<W>>,
    cores: HashMap<ThreadId, u16>,
    failed: Option<SimError>,
    /// With [`TracingMedium::committing_fences`]: per core, the lines flushed since its last
    /// fence, in order (a line flushed twice appears twice; the commit merges them).
    flushed: HashMap<u16, Vec<u64>>,
    /// With [`TracingMedium::measuring_work`]: the thread CPU time between the end of this
    /// thread's previous call and the start of the call holding the lock.
    work_before: Option<Duration>,
}

/// Source of [`TracingMedium`] ids (the key of [`LEFT`]).
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

thread_local! {
    /// Per traced medium (by id), the core this thread's calls are recorded on, when set by
    /// [`TracingMedium::set_core`].
    static CORE: std::cell::RefCell<HashMap<u64, u16>> =
        std::cell::RefCell::new(HashMap::new());
    /// Per traced medium (by id), this thread's CPU time when its last call on it returned,
    /// read after the lock was released (so waking a waiting thread is not counted as work).
    static LEFT: std::cell::RefCell<HashMap<u64, Duration>> =
        std::cell::RefCell::new(HashMap::new());
}

/// The locked state; on drop it unlocks, then notes when this thread left the medium.
struct Locked<'a, W: Write> {
    guard: Option<MutexGuard<'a, State<W>>>,
    id: u64,
    measure: bool,
}

impl<W: Write> std::ops::Deref for Locked<'_, W> {
    type Target = State<W>;
    fn deref(&self) -> &State<W> {
        self.guard.as_ref().expect("held until drop")
    }
}

impl<W: Write> std::ops::DerefMut for Locked<'_, W> {
    fn deref_mut(&mut self) -> &mut State<W> {
        self.guard.as_mut().expect("held until drop")
    }
}

impl<W: Write> Drop for Locked<'_, W> {
    fn drop(&mut self) {
        drop(self.guard.take());
        if self.measure {
            if let Ok(t) = cpu_time::ThreadTime::try_now() {
                let id = self.id;
                LEFT.with(|m| m.borrow_mut().insert(id, t.as_duration()));
            }
        }
    }
}

/// A medium that records what is done to it. See the module documentation.
pub struct TracingMedium<M: Medium, W: Write + Send = Vec<u8>> {
    inner: M,
    header: TraceHeader,
    commit_fences: bool,
    /// Simulated GHz and the cost of one clock read, with [`TracingMedium::measuring_work`].
    work: Option<(f64, Duration)>,
    /// This medium's key in [`LEFT`].
    id: u64,
    fold: bool,
    state: Mutex<State<W>>,
}

impl<M: Medium, W: Write + Send> std::fmt::Debug for TracingMedium<M, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TracingMedium")
            .field("inner", &self.inner)
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

/// What a finished recording gives back.
#[derive(Debug)]
pub struct Recording<W> {
    /// The trace's header.
    pub header: TraceHeader,
    /// Events recorded.
    pub events: u64,
    /// Bytes of the event stream before compression.
    pub raw_bytes: u64,
    /// The writer the trace went to.
    pub writer: W,
}

impl<M: Medium, W: Write + Send> TracingMedium<M, W> {
    /// Trace `inner` into `out`: a trace named `name` of `inner.len()` bytes for at most
    /// `cores` threads, with stored bytes if `with_data`.
    pub fn new(
        inner: M,
        out: W,
        name: &str,
        cores: u16,
        with_data: bool,
    ) -> Result<Self, SimError> {
        let header = TraceHeader {
            name: name.to_string(),
            pm_bytes: inner.len() as u64,
            cores,
            with_data,
        };
        let writer = TraceWriter::new(out, header.clone())?;
        Ok(TracingMedium {
            inner,
            header,
            fold: false,
            commit_fences: false,
            work: None,
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            state: Mutex::new(State {
                writer: Some(writer),
                cores: HashMap::new(),
                failed: None,
                flushed: HashMap::new(),
                work_before: None,
            }),
        })
    }

    /// Let more threads than cores use the medium: the thread first seen `k`-th gets core
    /// `k % cores` (for layers that start helper threads of their own). Without it a thread
    /// beyond the cores stops the recording with an error.
    pub fn folding_threads(mut self) -> Self {
        self.fold = true;
        self
    }

    /// Treat every fence that follows flushes as the end of a transaction: after the `Fence`,
    /// record a `TxCommit` naming the lines this thread flushed since its previous fence (a
    /// `persist` is flushes and a fence, so it commits its range). This is the point at which a
    /// program using a TxB-style library (Pangolin, Mojim) would tell the library that its
    /// write is complete, and it lets the simulator's `txb-object` and `txb-page` designs run on
    /// layers that have no transactions of their own (the log, the store, the server). A fence
    /// with no flush before it commits nothing.
    pub fn committing_fences(mut self) -> Self {
        self.commit_fences = true;
        self
    }

    /// Record the program's own work between a thread's medium calls: before each call, a
    /// `Work` event of the thread's CPU time since its previous call returned (the hashing,
    /// allocation, DRAM accesses and locking of the layers above, which the loads and stores
    /// do not show), converted to cycles at `ghz` (the simulated core's clock: the work is
    /// assumed to take as long there as here). The time inside the calls (the medium and the
    /// recording) is not counted, and neither is the cost of reading the clock, measured once
    /// here. Errors if the thread CPU clock cannot be read. Meaningful for a release build
    /// only: a debug build's own work is many times slower.
    pub fn measuring_work(mut self, ghz: f64) -> Result<Self, SimError> {
        let clock_err =
            |e: std::io::Error| SimError::invalid("thread CPU clock", "readable", e.to_string());
        if !(ghz.is_finite() && ghz > 0.0) {
            return Err(SimError::invalid("work clock GHz", "> 0", ghz));
        }
        const READS: u32 = 2000;
        let start = cpu_time::ThreadTime::try_now().map_err(clock_err)?;
        for _ in 0..READS {
            cpu_time::ThreadTime::try_now().map_err(clock_err)?;
        }
        let cost = start.try_elapsed().map_err(clock_err)? / READS;
        self.work = Some((ghz, cost));
        Ok(self)
    }

    /// Record this thread's next calls on `core` (below the header's cores), or, with `None`,
    /// on the core given to the thread as usual. One thread can then stand for several
    /// simulated cores: a workload of independent single-threaded instances runs them in turn
    /// on one thread, so its trace is deterministic and the work measured between calls is not
    /// inflated by threads waiting for each other on a machine with fewer cores than
    /// instances. A core out of range stops the recording with an error.
    pub fn set_core(&self, core: Option<u16>) {
        CORE.with(|m| {
            let mut m = m.borrow_mut();
            match core {
                Some(c) => m.insert(self.id, c),
                None => m.remove(&self.id),
            }
        });
    }

    /// The traced medium.
    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// The trace's header.
    pub fn header(&self) -> &TraceHeader {
        &self.header
    }

    fn lock(&self) -> Locked<'_, W> {
        let mut work = None;
        if let Some((_, cost)) = self.work {
            // A clock that cannot be read gives no work for this call.
            let entered = cpu_time::ThreadTime::try_now().ok();
            let left = LEFT.with(|m| m.borrow().get(&self.id).copied());
            if let (Some(e), Some(l)) = (entered, left) {
                work = Some(e.as_duration().saturating_sub(l).saturating_sub(cost));
            }
        }
        // A panic while recording leaves the state consistent enough to finish (at worst an
        // event is missing, and finish still reports the stream as it is).
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.work_before = work;
        Locked {
            guard: Some(st),
            id: self.id,
            measure: self.work.is_some(),
        }
    }

    /// Record the events `make` builds for this thread's core (nothing once recording failed).
    fn record(&self, st: &mut State<W>, make: impl FnOnce(u16, &mut Vec<Event>)) {
        let header = &self.header;
        if st.failed.is_some() || st.writer.is_none() {
            return;
        }
        let next = st.cores.len();
        let id = std::thread::current().id();
        let set = CORE.with(|m| m.borrow().get(&self.id).copied());
        let core = match (set, st.cores.get(&id)) {
            (Some(c), _) if c < header.cores => c,
            (Some(c), _) => {
                st.failed = Some(SimError::invalid(
                    "core set for a thread",
                    format!("below {} (the trace's cores)", header.cores),
                    c,
                ));
                return;
            }
            (None, Some(&c)) => c,
            (None, None) if next < header.cores as usize || self.fold => {
                let c = (next % header.cores as usize) as u16;
                st.cores.insert(id, c);
                c
            }
            (None, None) => {
                st.failed = Some(SimError::invalid(
                    "threads using the traced medium",
                    format!("at most {} (the trace's cores)", header.cores),
                    next + 1,
                ));
                return;
            }
        };
        let mut events = Vec::new();
        if let (Some((ghz, _)), Some(work)) = (self.work, st.work_before.take()) {
            let cycles = (work.as_nanos() as f64 * ghz)
                .round()
                .min(f64::from(u32::MAX)) as u32;
            if cycles > 0 {
                events.push(Event::Work { core, cycles });
            }
        }
        make(core, &mut events);
        if self.commit_fences {
            events = Self::add_commits(st, core, events);
        }
        let w = st.writer.as_mut().expect("checked above");
        for e in &events {
            if let Err(e) = w.push(e) {
                st.failed = Some(e);
                return;
            }
        }
    }

    /// Note the flushes among `events` and put a `TxCommit` after each `Fence` that ends a run
    /// of them (see [`TracingMedium::committing_fences`]).
    fn add_commits(st: &mut State<W>, core: u16, events: Vec<Event>) -> Vec<Event> {
        let mut out = Vec::with_capacity(events.len() + 1);
        for e in events {
            match e {
                Event::Flush { addr, .. } => {
                    st.flushed.entry(core).or_default().push(addr / LINE);
                    out.push(e);
                }
                Event::Fence { .. } => {
                    out.push(e);
                    let mut lines = st.flushed.remove(&core).unwrap_or_default();
                    lines.sort_unstable();
                    lines.dedup();
                    let mut ranges: Vec<(u64, u32)> = Vec::new();
                    for l in lines {
                        match ranges.last_mut() {
                            Some((a, n))
                                if *a + u64::from(*n) == l * LINE
                                    && u64::from(*n) + LINE <= u64::from(MAX_ACCESS_LEN) =>
                            {
                                *n += LINE as u32
                            }
                            _ => ranges.push((l * LINE, LINE as u32)),
                        }
                    }
                    for chunk in ranges.chunks(crate::trace::MAX_TX_RANGES as usize) {
                        out.push(Event::TxCommit {
                            core,
                            ranges: chunk.to_vec(),
                        });
                    }
                }
                e => out.push(e),
            }
        }
        out
    }

    fn accesses(
        core: u16,
        offset: usize,
        data: &[u8],
        store: bool,
        with_data: bool,
        out: &mut Vec<Event>,
    ) {
        for (k, piece) in data.chunks(MAX_ACCESS_LEN as usize).enumerate() {
            let addr = offset as u64 + k as u64 * MAX_ACCESS_LEN as u64;
            let len = piece.len() as u32;
            out.push(if store {
                Event::Store {
                    core,
                    addr,
                    len,
                    data: with_data.then(|| piece.to_vec()),
                }
            } else {
                Event::Load { core, addr, len }
            });
        }
    }

    fn lines(core: u16, offset: usize, len: usize, out: &mut Vec<Event>) {
        if len == 0 {
            return;
        }
        let first = offset as u64 / LINE;
        let last = (offset as u64 + len as u64 - 1) / LINE;
        for l in first..=last {
            out.push(Event::Flush {
                core,
                addr: l * LINE,
            });
        }
    }

    /// Record the start of a transaction on this thread's core.
    pub fn begin_tx(&self) {
        let mut st = self.lock();
        self.record(&mut st, |core, out| out.push(Event::TxBegin { core }));
    }

    /// Record the commit of this thread's transaction, which modified `ranges` (medium
    /// offset, length).
    pub fn commit_tx(&self, ranges: &[(u64, u32)]) {
        let mut st = self.lock();
        self.record(&mut st, |core, out| {
            out.push(Event::TxCommit {
                core,
                ranges: ranges.to_vec(),
            })
        });
    }

    /// Events recorded so far.
    pub fn events(&self) -> u64 {
        self.lock().writer.as_ref().map_or(0, |w| w.events())
    }

    /// End the trace and hand back what was written. Later calls on the medium are forwarded
    /// but no longer recorded; a second `finish` is an error.
    pub fn finish(&self) -> Result<Recording<W>, SimError> {
        let mut st = self.lock();
        if let Some(e) = st.failed.take() {
            st.writer = None;
            return Err(e);
        }
        let w = st.writer.take().ok_or_else(|| {
            SimError::invalid("trace recording", "one still open", "already finished")
        })?;
        let (events, raw_bytes) = (w.events(), w.raw_bytes());
        let writer = w.finish()?;
        Ok(Recording {
            header: self.header.clone(),
            events,
            raw_bytes,
            writer,
        })
    }
}

impl<M: Medium, W: Write + Send> Medium for TracingMedium<M, W> {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn domain(&self) -> Domain {
        self.inner.domain()
    }
    fn backing(&self) -> Backing {
        self.inner.backing()
    }
    fn label(&self) -> std::path::PathBuf {
        self.inner.label()
    }
    fn read(&self, offset: usize, buf: &mut [u8]) {
        let mut st = self.lock();
        self.inner.read(offset, buf);
        self.record(&mut st, |c, out| {
            Self::accesses(c, offset, buf, false, false, out)
        });
    }
    fn write(&self, offset: usize, data: &[u8]) {
        let mut st = self.lock();
        self.inner.write(offset, data);
        let d = self.header.with_data;
        self.record(&mut st, |c, out| {
            Self::accesses(c, offset, data, true, d, out)
        });
    }
    fn write_nontemporal(&self, offset: usize, data: &[u8]) {
        let mut st = self.lock();
        self.inner.write_nontemporal(offset, data);
        let d = self.header.with_data;
        self.record(&mut st, |c, out| {
            Self::accesses(c, offset, data, true, d, out);
            Self::lines(c, offset, data.len(), out);
        });
    }
    fn load_u64(&self, offset: usize) -> u64 {
        let mut st = self.lock();
        let v = self.inner.load_u64(offset);
        self.record(&mut st, |c, out| {
            out.push(Event::Load {
                core: c,
                addr: offset as u64,
                len: 8,
            })
        });
        v
    }
    fn store_u64(&self, offset: usize, value: u64) {
        let mut st = self.lock();
        self.inner.store_u64(offset, value);
        let d = self.header.with_data;
        self.record(&mut st, |c, out| {
            out.push(Event::Store {
                core: c,
                addr: offset as u64,
                len: 8,
                data: d.then(|| value.to_le_bytes().to_vec()),
            })
        });
    }
    fn flush(&self, offset: usize, len: usize) -> pmem::Result<()> {
        let mut st = self.lock();
        let r = self.inner.flush(offset, len);
        self.record(&mut st, |c, out| Self::lines(c, offset, len, out));
        r
    }
    fn write_back(&self, offset: usize, len: usize) -> pmem::Result<()> {
        let mut st = self.lock();
        let r = self.inner.write_back(offset, len);
        self.record(&mut st, |c, out| Self::lines(c, offset, len, out));
        r
    }
    fn fence(&self) -> pmem::Result<()> {
        let mut st = self.lock();
        let r = self.inner.fence();
        self.record(&mut st, |c, out| out.push(Event::Fence { core: c }));
        r
    }
    fn persist(&self, offset: usize, len: usize) -> pmem::Result<()> {
        let mut st = self.lock();
        let r = self.inner.persist(offset, len);
        self.record(&mut st, |c, out| {
            Self::lines(c, offset, len, out);
            out.push(Event::Fence { core: c });
        });
        r
    }
    fn grow(&self, len: usize) -> pmem::Result<()> {
        self.inner.grow(len)
    }
    fn discard(&self, offset: usize, len: usize) -> pmem::Result<()> {
        self.inner.discard(offset, len)
    }
    fn back(&self, offset: usize, len: usize) -> pmem::Result<()> {
        self.inner.back(offset, len)
    }
    fn inject(&self, offset: usize, data: &[u8]) -> pmem::Result<()> {
        self.inner.inject(offset, data)
    }
}

/// Apply a trace's stores to `image` (the traced range's bytes before the run): what the range
/// holds after it. Errors if the trace has no data or a store falls outside `image`.
pub fn apply_stores(
    image: &mut [u8],
    events: impl IntoIterator<Item = Result<Event, SimError>>,
) -> Result<u64, SimError> {
    let mut n = 0;
    for e in events {
        if let Event::Store {
            addr, len, data, ..
        } = e?
        {
            let d = data.ok_or_else(|| {
                SimError::invalid("trace", "stores with their bytes", "an address-only trace")
            })?;
            let end = addr
                .checked_add(len as u64)
                .filter(|&e| e <= image.len() as u64);
            let Some(end) = end else {
                return Err(SimError::invalid(
                    "store address",
                    format!("inside the {}-byte image", image.len()),
                    format!("[{addr:#x}, +{len:#x})"),
                ));
            };
            image[addr as usize..end as usize].copy_from_slice(&d);
            n += 1;
        }
    }
    Ok(n)
}

/// A traced medium for a workload, measuring work if `work_mhz` says so.
fn traced_medium<W: Write + Send>(
    sim: pmem::SimMedium,
    out: W,
    name: &str,
    cores: u16,
    with_data: bool,
    work_mhz: Option<u32>,
) -> Result<TracingMedium<pmem::SimMedium, W>, SimError> {
    let t = TracingMedium::new(sim, out, name, cores, with_data)?;
    match work_mhz {
        Some(mhz) => t.measuring_work(f64::from(mhz) / 1000.0),
        None => Ok(t),
    }
}

/// Parameters of [`log_workload`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogParams {
    /// Threads appending (one core each; the thread that creates and closes the log is one
    /// more, core 0).
    pub threads: u16,
    /// Records each thread appends.
    pub records_per_thread: u64,
    /// Payload bytes per record (at least 8). At [`log::NONTEMPORAL_BYTES_MIN`] and above the
    /// log copies with non-temporal stores.
    pub payload: u32,
    /// How records are forced.
    pub policy: log::ForcePolicy,
    /// Stores carry their bytes.
    pub with_data: bool,
    /// Seed of the payload bytes.
    pub seed: u64,
    /// Record the work between calls ([`TracingMedium::measuring_work`]) at this simulated
    /// clock, in MHz (`None`: no `Work` events).
    pub work_mhz: Option<u32>,
}

impl LogParams {
    /// A small default: 4 threads x 1000 records of 128 bytes, forced every record.
    pub fn small() -> LogParams {
        LogParams {
            threads: 4,
            records_per_thread: 1000,
            payload: 128,
            policy: log::ForcePolicy::Sync,
            with_data: true,
            seed: 1,
            work_mhz: None,
        }
    }
}

/// A traced run of the log: a log created over a fresh simulated medium, then `threads`
/// threads appending their records. Returns the recording (the trace in `out`) and the
/// medium's bytes at the end (what the trace's stores rebuild from zeros).
pub fn log_workload<W: Write + Send>(
    p: &LogParams,
    out: W,
) -> Result<(Recording<W>, Vec<u8>), SimError> {
    if p.threads == 0
        || p.threads >= crate::trace::MAX_CORES
        || p.records_per_thread == 0
        || p.payload < 8
        || p.payload > 1 << 20
    {
        return Err(SimError::invalid(
            "log workload",
            "threads >= 1, records >= 1, payload 8 to 1048576 bytes",
            format!("{p:?}"),
        ));
    }
    // Room for every record (header and padding included) twice over: no cleanup needed.
    let rec = (p.payload as u64 + 64).div_ceil(64) * 64;
    let total = rec
        .checked_mul(p.records_per_thread)
        .and_then(|b| b.checked_mul(p.threads as u64 * 2))
        .filter(|&b| b <= 1 << 32)
        .ok_or_else(|| SimError::invalid("log workload size", "at most 4 GiB", format!("{p:?}")))?;
    let len = ((total + (1 << 20)).div_ceil(4096) * 4096) as usize;
    let sim = pmem::SimMedium::new(len, pmem::SimConfig::default());
    let name = format!(
        "log-{}x{}-{}B-{}",
        p.threads, p.records_per_thread, p.payload, p.policy
    );
    let traced = Arc::new(
        traced_medium(sim, out, &name, p.threads + 1, p.with_data, p.work_mhz)?.committing_fences(),
    );
    let lg = log::Log::create(traced.clone(), 0, len, std::time::Duration::from_millis(10))
        .map_err(|e| SimError::invalid("log create", "success", e))?;
    let errors: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..p.threads)
            .map(|t| {
                let lg = &lg;
                s.spawn(move || -> Result<(), String> {
                    let mut r = pmem::rng::SplitMix64::new(p.seed ^ ((t as u64) << 40));
                    let mut payload = vec![0u8; p.payload as usize];
                    for _ in 0..p.records_per_thread {
                        for c in payload.chunks_mut(8) {
                            let w = r.next_u64().to_le_bytes();
                            c.copy_from_slice(&w[..c.len()]);
                        }
                        lg.append(&payload, p.policy).map_err(|e| e.to_string())?;
                    }
                    Ok(())
                })
            })
            .collect();
        failures(hs, "an appending thread panicked")
    });
    if let Some(e) = errors.first() {
        return Err(SimError::invalid("log append", "success", e));
    }
    lg.close()
        .map_err(|e| SimError::invalid("log close", "success", e))?;
    let rec = traced.finish()?;
    let image = traced.inner().working_image();
    Ok((rec, image))
}

/// Parameters of [`heap_workload`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeapParams {
    /// Instances, each a hash map of its own on a core of its own (independent single-threaded
    /// instances, as in the paper); setting up is one more core (core 0). They run in turn on
    /// the calling thread, one operation each (see [`TracingMedium::set_core`]).
    pub threads: u16,
    /// Operations per thread.
    pub ops_per_thread: u64,
    /// Buckets per map.
    pub buckets: u64,
    /// Keys are drawn from `[0, keys)`.
    pub keys: u64,
    /// Percent of operations that are lookups (the rest insert or update): 0 is insert-only.
    pub read_percent: u8,
    /// Value bytes per entry (a multiple of 8).
    pub value: u32,
    /// Stores carry their bytes.
    pub with_data: bool,
    /// Seed of the keys and values.
    pub seed: u64,
    /// As [`LogParams::work_mhz`].
    pub work_mhz: Option<u32>,
}

impl HeapParams {
    /// A small default: 4 maps of 256 buckets, 500 operations each over 1000 keys, insert-only,
    /// 32-byte values.
    pub fn small() -> HeapParams {
        HeapParams {
            threads: 4,
            ops_per_thread: 500,
            buckets: 256,
            keys: 1000,
            read_percent: 0,
            value: 32,
            with_data: true,
            seed: 1,
            work_mhz: None,
        }
    }
}

/// Entry layout in the heap: key (8), next (8), value.
const ENTRY_HEAD: u64 = 16;

/// Heap size for a workload: 16 MiB is enough for the small runs; larger runs grow it.
fn heap_len(p: &HeapParams) -> Option<u64> {
    let entry = ENTRY_HEAD + p.value as u64;
    let data = p
        .ops_per_thread
        .checked_mul(p.threads as u64)?
        .checked_mul(entry + 64)?
        .checked_add(p.buckets.checked_mul(8 * p.threads as u64)?)?;
    Some(((data * 4).max(16 << 20)).div_ceil(1 << 20) << 20).filter(|&l| l <= 1 << 32)
}

struct TxRanges<M: Medium + 'static, W: Write + Send + 'static>(Arc<TracingMedium<M, W>>);

impl<M: Medium, W: Write + Send> heap::CommitObserver for TxRanges<M, W> {
    fn committed(&self, changes: &[heap::Change<'_>]) -> heap::Result<()> {
        let mut ranges = Vec::new();
        for c in changes {
            let mut off = c.medium_offset;
            let mut left = c.len;
            while left > 0 {
                let n = left.min(u32::MAX as u64);
                ranges.push((off, n as u32));
                off += n;
                left -= n;
            }
        }
        self.0.commit_tx(&ranges);
        Ok(())
    }
}

/// A traced run of the heap's transactions: per instance a chained hash map in the heap (a
/// bucket array in the root object, entries allocated in transactions), driven by inserts,
/// updates and lookups. Each insert or update is one undo-log transaction, recorded between a
/// `TxBegin` and a `TxCommit` naming the ranges the heap says it changed. The instances take
/// turns, so the trace is the same from run to run apart from its `Work` events. Returns the
/// recording and the medium's bytes at the end.
pub fn heap_workload<W: Write + Send + 'static>(
    p: &HeapParams,
    out: W,
) -> Result<(Recording<W>, Vec<u8>), SimError> {
    let bad = |why: &str| SimError::invalid("heap workload", why.to_string(), format!("{p:?}"));
    if p.threads == 0
        || p.threads >= crate::trace::MAX_CORES
        || p.ops_per_thread == 0
        || p.buckets == 0
        || p.keys == 0
    {
        return Err(bad("threads, operations, buckets and keys all >= 1"));
    }
    if p.value == 0 || p.value % 8 != 0 || p.value > 4096 || p.read_percent > 100 {
        return Err(bad(
            "value a multiple of 8 up to 4096, read percent at most 100",
        ));
    }
    let len = heap_len(p).ok_or_else(|| bad("a heap of at most 4 GiB"))?;
    let sim = pmem::SimMedium::new(len as usize, pmem::SimConfig::default());
    let name = format!(
        "heap-hashmap-{}x{}-r{}",
        p.threads, p.ops_per_thread, p.read_percent
    );
    let traced = Arc::new(traced_medium(
        sim,
        out,
        &name,
        p.threads + 1,
        p.with_data,
        p.work_mhz,
    )?);
    let herr = |what: &str| {
        let what = what.to_string();
        move |e: heap::HeapError| SimError::invalid(what.clone(), "success", e)
    };
    heap::RawHeap::format(&*traced, 0, len, [7; 16], &heap::HeapOptions::small())
        .map_err(herr("heap format"))?;
    let raw = heap::RawHeap::open(traced.clone(), 0, len).map_err(herr("heap open"))?;
    raw.set_observer(Some(Arc::new(TxRanges(traced.clone()))));
    // Making the root object is a transaction of the heap's own (the observer records its
    // commit); bracket it too.
    traced.begin_tx();
    let (root, _) = raw
        .root(8 * p.buckets * p.threads as u64)
        .map_err(herr("heap root"))?;
    // The instances take turns on this thread, one operation each, each recorded on its own
    // core (1..=threads; setting up was core 0): see `TracingMedium::set_core`.
    let mut rngs: Vec<pmem::rng::SplitMix64> = (0..p.threads as u64)
        .map(|t| pmem::rng::SplitMix64::new(p.seed ^ (t << 40)))
        .collect();
    let mut value = vec![0u8; p.value as usize];
    let mut one_op = |t: u64| -> Result<(), String> {
        let r = &mut rngs[t as usize];
        let table = root + t * 8 * p.buckets;
        let key = r.below(p.keys);
        let bucket = table + 8 * (key % p.buckets);
        // Walk the chain (loads).
        let mut w = [0u8; 8];
        raw.read(bucket, &mut w).map_err(|e| e.to_string())?;
        let head = u64::from_le_bytes(w);
        let mut at = head;
        let mut found = 0;
        while at != 0 {
            let mut kn = [0u8; 16];
            raw.read(at, &mut kn).map_err(|e| e.to_string())?;
            if u64::from_le_bytes(kn[..8].try_into().unwrap()) == key {
                found = at;
                break;
            }
            at = u64::from_le_bytes(kn[8..].try_into().unwrap());
        }
        if r.below(100) < p.read_percent as u64 {
            if found != 0 {
                raw.read(found + ENTRY_HEAD, &mut value)
                    .map_err(|e| e.to_string())?;
            }
            return Ok(());
        }
        for c in value.chunks_mut(8) {
            c.copy_from_slice(&r.next_u64().to_le_bytes());
        }
        let mut lane = raw.lane();
        traced.begin_tx();
        raw.begin(&mut lane);
        let res = (|| -> heap::Result<()> {
            if found != 0 {
                raw.write(&mut lane, found + ENTRY_HEAD, &value)?;
            } else {
                let e = raw.alloc(&mut lane, ENTRY_HEAD + p.value as u64, false)?;
                let mut entry = Vec::with_capacity(16 + value.len());
                entry.extend_from_slice(&key.to_le_bytes());
                entry.extend_from_slice(&head.to_le_bytes());
                entry.extend_from_slice(&value);
                raw.write(&mut lane, e, &entry)?;
                raw.write(&mut lane, bucket, &e.to_le_bytes())?;
            }
            Ok(())
        })();
        match res {
            Ok(()) => raw.commit(&mut lane).map_err(|e| e.to_string()),
            Err(e) => {
                let _ = raw.abort(&mut lane);
                Err(e.to_string())
            }
        }
    };
    let mut errors = Vec::new();
    'ops: for _ in 0..p.ops_per_thread {
        for t in 0..p.threads as u64 {
            traced.set_core(Some(t as u16 + 1));
            if let Err(e) = one_op(t) {
                errors.push(e);
                break 'ops;
            }
        }
    }
    traced.set_core(None);
    if let Some(e) = errors.first() {
        return Err(SimError::invalid("heap transaction", "success", e));
    }
    raw.set_observer(None);
    drop(raw);
    let rec = traced.finish()?;
    let image = traced.inner().working_image();
    Ok((rec, image))
}

/// Parameters of [`kv_workload`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvParams {
    /// Clients, each on a core of its own (creating, checkpointing and closing the store is
    /// core 0; the store has no background thread). They take turns on the calling thread, one
    /// request each (see [`TracingMedium::set_core`]), and core 0 checkpoints after each half
    /// operation log's worth of requests.
    pub threads: u16,
    /// Keys loaded (SET) before the measured operations, split among the threads.
    pub records: u64,
    /// Measured operations per thread.
    pub ops_per_thread: u64,
    /// Percent of the measured operations that are GETs (the rest are SETs of existing keys).
    pub read_percent: u8,
    /// Value bytes.
    pub value: u32,
    /// Stores carry their bytes.
    pub with_data: bool,
    /// Seed of the key choice and the values.
    pub seed: u64,
    /// As [`LogParams::work_mhz`].
    pub work_mhz: Option<u32>,
}

impl KvParams {
    /// A small YCSB-like default: 2 clients, 400 records of 100 bytes, 500 operations each,
    /// 50% GETs (YCSB A).
    pub fn small() -> KvParams {
        KvParams {
            threads: 2,
            records: 400,
            ops_per_thread: 500,
            read_percent: 50,
            value: 100,
            with_data: true,
            seed: 1,
            work_mhz: None,
        }
    }
}

/// A traced YCSB-like run of the key-value store (`dstore` on DIPPER): a store created in a
/// pool formatted on a fresh simulated medium, `records` keys loaded, then per thread
/// `ops_per_thread` GETs and SETs with high skew (90% of the operations on 10% of the keys, as
/// the paper's N-Store runs), then a clean close. Each thread works on its own keys. Returns
/// the recording and the medium's bytes at the end.
pub fn kv_workload<W: Write + Send + 'static>(
    p: &KvParams,
    out: W,
) -> Result<(Recording<W>, Vec<u8>), SimError> {
    let bad = |why: &str| SimError::invalid("kv workload", why.to_string(), format!("{p:?}"));
    if p.threads == 0 || p.threads >= crate::trace::MAX_CORES || p.ops_per_thread == 0 {
        return Err(bad("threads and operations >= 1"));
    }
    if p.records < p.threads as u64 || p.records > 1 << 24 {
        return Err(bad("at least one record per thread, at most 16 Mi records"));
    }
    if p.value == 0 || p.value > 4096 || p.read_percent > 100 {
        return Err(bad("value 1 to 4096 bytes, read percent at most 100"));
    }
    // Each shadow slot holds the image of the shards' arenas: room for every record (key,
    // value and entry overhead) four times over, above the smallest slot.
    let slot_min = dstore::Config::slot_bytes_min(4)
        .map_err(|e| SimError::invalid("store slot size", "computable", e.to_string()))?;
    let slot = (slot_min + 4 * p.records * (p.value as u64 + 16 + 128)).next_multiple_of(1 << 20);
    let cfg = dstore::Config {
        shards: 4,
        log_bytes: 1 << 20,
        slot_bytes: slot,
        grow: false,
        background: false,
        value_bytes_max: 4096,
        data_bytes: ((p.records * (p.value as u64 + 64) * 2).div_ceil(1 << 20) << 20).max(1 << 20),
        ..dstore::Config::default()
    };
    let len = cfg.pool_bytes() as usize;
    let sim = pmem::SimMedium::new(len, pmem::SimConfig::default());
    let name = format!(
        "kv-{}x{}-r{}-{}B",
        p.threads, p.ops_per_thread, p.read_percent, p.value
    );
    // DIPPER replays its log with helper threads at create: they share the cores.
    let traced = Arc::new(
        traced_medium(sim, out, &name, p.threads + 1, p.with_data, p.work_mhz)?
            .folding_threads()
            .committing_fences(),
    );
    let fail = |what: &str| {
        let what = what.to_string();
        move |e: &dyn std::fmt::Display| SimError::invalid(what.clone(), "success", e.to_string())
    };
    let m = pmem::Pool::format(traced.clone(), Domain::Sim).map_err(|e| fail("pool format")(&e))?;
    let pool = pmem::Pool::open_medium(m, &pmem::OpenOptions::default())
        .map_err(|e| fail("pool open")(&e))?;
    let store = dstore::Store::create(pool, cfg).map_err(|e| fail("store create")(&e))?;
    let per = p.records / p.threads as u64;
    let key = |t: u64, i: u64| format!("user{t:02}-{i:010}").into_bytes();
    let fill = |r: &mut pmem::rng::SplitMix64, v: &mut Vec<u8>| {
        for c in v.chunks_mut(8) {
            let w = r.next_u64().to_le_bytes();
            c.copy_from_slice(&w[..c.len()]);
        }
    };
    // The clients take turns on this thread, one request each, each recorded on its own core
    // (1..=threads; creating the store was core 0): see `TracingMedium::set_core`.
    let mut rngs: Vec<pmem::rng::SplitMix64> = (0..p.threads as u64)
        .map(|t| pmem::rng::SplitMix64::new(p.seed ^ (t << 40)))
        .collect();
    let mut value = vec![0u8; p.value as usize];
    let hot = (per / 10).max(1);
    let mut errors = Vec::new();
    let mut run = |t: u64, load: Option<u64>| -> Result<(), String> {
        traced.set_core(Some(t as u16 + 1));
        let r = &mut rngs[t as usize];
        if let Some(i) = load {
            fill(r, &mut value);
            return store
                .set(&key(t, i), &value, false, false, None)
                .map(|_| ())
                .map_err(|e| e.to_string());
        }
        let i = if r.below(10) < 9 {
            r.below(hot)
        } else {
            r.below(per)
        };
        if r.below(100) < p.read_percent as u64 {
            store.get(&key(t, i)).map(|_| ()).map_err(|e| e.to_string())
        } else {
            fill(r, &mut value);
            store
                .set(&key(t, i), &value, false, false, None)
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    };
    // The store has no checkpoint thread here: core 0 checkpoints after every `every` rounds,
    // when about half an operation log has been written.
    let every = ((1u64 << 19) / (p.threads as u64 * (p.value as u64 + 128))).max(1);
    let checkpoint = || -> Result<(), String> {
        traced.set_core(Some(0));
        store
            .engine()
            .checkpoint()
            .map(|_| ())
            .map_err(|e| format!("checkpoint: {e}"))
    };
    let rounds = (0..per)
        .map(Some)
        .chain((0..p.ops_per_thread).map(|_| None));
    'rounds: for (n, load) in rounds.enumerate() {
        for t in 0..p.threads as u64 {
            if let Err(e) = run(t, load) {
                errors.push(e);
                break 'rounds;
            }
        }
        if n as u64 % every == every - 1 {
            if let Err(e) = checkpoint() {
                errors.push(e);
                break;
            }
        }
    }
    traced.set_core(None);
    if let Some(e) = errors.first() {
        return Err(SimError::invalid("kv operation", "success", e));
    }
    store.close().map_err(|e| fail("store close")(&e))?;
    drop(store);
    let rec = traced.finish()?;
    let image = traced.inner().working_image();
    Ok((rec, image))
}

/// Join a workload's threads; the message of each that failed (or `panicked` for one that
/// panicked), in thread order.
fn failures(
    hs: Vec<std::thread::ScopedJoinHandle<'_, Result<(), String>>>,
    panicked: &str,
) -> Vec<String> {
    hs.into_iter()
        .filter_map(|h| match h.join() {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(_) => Some(panicked.to_string()),
        })
        .collect()
}
