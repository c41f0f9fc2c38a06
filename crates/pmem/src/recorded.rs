//! The recorded medium: the production [`Mapping`] code run under the persistence simulator.
//!
//! [`SimMedium`] judges what survives a crash from the flushes and fences it is told about; on
//! its own it assumes that `flush(range)` writes back every line of the range and that a
//! non-temporal copy is durable at the next fence. [`Recorded`] removes that assumption: it is a
//! real [`Mapping`] of a real file (on `/dev/shm` in the tests), and the mapping's own code (the
//! write-back loop with its line rounding, `persist`'s fast path, the head, body and tail of the
//! non-temporal copy, the page rounding of `msync`, the fences) runs unchanged, except that at
//! the one place where it would execute a write-back instruction it reports the line to the
//! simulator instead ([`crate::cpu::FlushInstruction::Recorded`]):
//!
//! | the real code | the simulator is told |
//! | --- | --- |
//! | `write`, `store_u64` (by this wrapper) | `write`, `store_u64` of the same bytes |
//! | a cache line written back by `flush_range_with` | `flush(line - base, 64)` |
//! | `sfence` in `fence` or `persist` | `fence()`; its error comes out of `fence`/`persist` |
//! | the ordinary stores of a non-temporal copy's head and tail | `write` of exactly those bytes |
//! | the streaming stores of its body | `write_nontemporal` of exactly the streamed range |
//! | `msync` of a page range (msync domain) | `flush` of exactly those pages, then `fence()` |
//!
//! In the msync domain a line write-back reaches only the page cache, so it is traced but not
//! reported as a flush, and streamed bytes are reported as ordinary stores: only `msync` makes
//! bytes durable there. The crash image is the simulator's ([`SimMedium::crash_image`],
//! [`SimMedium::power_fail`]); reads come from the real mapping.
//!
//! The reports go through a thread-local context that each call of [`Recorded`] sets for its
//! duration, so a report is issued on the thread that executed the instruction (the simulator's
//! per-thread pending state sees it as that thread's). A production mapping never has the
//! recorded instruction, so its only extra cost is a comparison of a field it already reads in
//! `fence`, `persist` and the non-temporal copy.

use crate::cpu::CACHE_LINE;
use crate::domain::{Backing, Domain};
use crate::error::{PmemError, Result};
use crate::layout::PAGE_SIZE;
use crate::mapping::Mapping;
use crate::medium::Medium;
use crate::sim::SimMedium;
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One thing the real mapping code did, as the recorded medium reported it (offsets from the
/// start of the medium).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Ordinary stores: `write`/`store_u64`, or the head or tail of a non-temporal copy.
    Store {
        /// First byte.
        offset: usize,
        /// Bytes stored.
        len: usize,
    },
    /// The streamed body of a non-temporal copy.
    Stream {
        /// First byte (16-byte aligned).
        offset: usize,
        /// Bytes streamed (a multiple of 16).
        len: usize,
    },
    /// One cache line written back.
    Line(usize),
    /// A store fence.
    Fence,
    /// An `msync` of whole pages.
    Msync {
        /// First byte of the first page.
        offset: usize,
        /// Bytes (whole pages, clipped to the medium's end).
        len: usize,
    },
}

#[derive(Debug)]
struct Shared {
    sim: Arc<SimMedium>,
    base: usize,
    domain: Domain,
    trace: Option<Mutex<Vec<Event>>>,
}

impl Shared {
    fn note(&self, e: Event) {
        if let Some(t) = &self.trace {
            t.lock().unwrap_or_else(|p| p.into_inner()).push(e);
        }
    }
}

/// The recording context of the current thread: the medium whose call is running, and the
/// first error a report got back from the simulator during that call.
#[derive(Default)]
struct Context {
    shared: Option<Arc<Shared>>,
    error: Option<PmemError>,
}

thread_local! {
    static CURRENT: RefCell<Context> = RefCell::new(Context::default());
}

/// Restores the thread's previous context when a call ends (or unwinds).
struct Enter {
    prev: Option<Context>,
}

impl Drop for Enter {
    fn drop(&mut self) {
        let prev = self.prev.take().unwrap_or_default();
        CURRENT.with(|c| *c.borrow_mut() = prev);
    }
}

fn with_shared<R>(f: impl FnOnce(&Shared) -> R) -> R {
    let shared = CURRENT.with(|c| c.borrow().shared.clone());
    let shared = shared.expect("a recorded instruction outside a call of the recorded medium");
    f(&shared)
}

fn keep_error(r: Result<()>) {
    if let Err(e) = r {
        CURRENT.with(|c| {
            let mut c = c.borrow_mut();
            if c.error.is_none() {
                c.error = Some(e);
            }
        });
    }
}

/// The write-back loop reached the line at address `line`.
#[cold]
pub(crate) fn line(line: usize) {
    with_shared(|s| {
        let offset = line - s.base;
        s.note(Event::Line(offset));
        if s.domain != Domain::Msync {
            // An executed write-back instruction: durable at the fence in every simulated
            // domain that has caches (the flush-on-fail domain skips only `flush` calls).
            keep_error(s.sim.write_back(offset, CACHE_LINE));
        }
    })
}

/// Ordinary stores of `bytes` at address `addr` (a non-temporal copy's head or tail).
#[cold]
pub(crate) fn stored(addr: usize, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    with_shared(|s| {
        let offset = addr - s.base;
        s.note(Event::Store {
            offset,
            len: bytes.len(),
        });
        s.sim.write(offset, bytes);
    })
}

/// Streaming stores of `bytes` at address `addr` (a non-temporal copy's body).
#[cold]
pub(crate) fn streamed(addr: usize, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    with_shared(|s| {
        let offset = addr - s.base;
        s.note(Event::Stream {
            offset,
            len: bytes.len(),
        });
        if s.domain == Domain::Msync {
            s.sim.write(offset, bytes);
        } else {
            s.sim.write_nontemporal(offset, bytes);
        }
    })
}

/// A store fence was executed.
#[cold]
pub(crate) fn fence() -> Result<()> {
    with_shared(|s| {
        s.note(Event::Fence);
        s.sim.fence()
    })
}

/// `msync(addr, len)` returned success: the kernel wrote back every page overlapping the range.
#[cold]
pub(crate) fn msynced(addr: usize, len: usize) -> Result<()> {
    with_shared(|s| {
        let offset = addr - s.base;
        let size = s.sim.len();
        let first = offset & !(PAGE_SIZE - 1);
        let end = (offset + len).div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let end = end.min(size);
        if first >= end {
            return Ok(());
        }
        s.note(Event::Msync {
            offset: first,
            len: end - first,
        });
        // Durable when msync returns: a write-back of the pages, ordered at once.
        s.sim.flush(first, end - first)?;
        s.sim.fence()
    })
}

/// A real mapping of a file whose write-backs, fences, non-temporal copies and msyncs are
/// reported to a [`SimMedium`] (see the module documentation). The file is created by
/// [`Recorded::create`] and removed when the medium is dropped.
#[derive(Debug)]
pub struct Recorded {
    map: Mapping,
    shared: Arc<Shared>,
    path: PathBuf,
}

impl Recorded {
    /// Create `path` (which must not exist) as a copy of `sim`'s working image, map it in
    /// `domain` (`adr`, `eadr` or `msync`: the code path of the real mapping that runs) and
    /// report to `sim` from then on. The simulator's own domain should match (`SimDomain`).
    pub fn create(path: &Path, sim: Arc<SimMedium>, domain: Domain) -> Result<Recorded> {
        if domain == Domain::Sim {
            return Err(PmemError::Invalid {
                what: "domain",
                reason: "the recorded medium runs a real mapping's domain (adr, eadr, msync)"
                    .into(),
            });
        }
        let mut map = Mapping::create(path, sim.len() as u64)?;
        map.set_domain(domain);
        map.record();
        map.write(0, &sim.working_image());
        let shared = Arc::new(Shared {
            sim,
            base: map.base_ptr() as usize,
            domain,
            trace: None,
        });
        Ok(Recorded {
            map,
            shared,
            path: path.to_path_buf(),
        })
    }

    /// Keep a list of every event reported from now on ([`Recorded::take_trace`]).
    pub fn traced(mut self) -> Recorded {
        let shared = Arc::get_mut(&mut self.shared).expect("not shared before the first call");
        shared.trace = Some(Mutex::new(Vec::new()));
        self
    }

    /// The events reported since the last call (empty unless [`Recorded::traced`]).
    pub fn take_trace(&self) -> Vec<Event> {
        match &self.shared.trace {
            Some(t) => std::mem::take(&mut *t.lock().unwrap_or_else(|p| p.into_inner())),
            None => Vec::new(),
        }
    }

    /// The simulator the real code reports to.
    pub fn sim(&self) -> &SimMedium {
        &self.shared.sim
    }

    /// The real mapping underneath (for reading what the real code stored).
    pub fn mapping(&self) -> &Mapping {
        &self.map
    }

    /// Run `f` on the mapping with this medium's context set on the calling thread; returns its
    /// result and the first error a report got from the simulator.
    fn call<R>(&self, f: impl FnOnce(&Mapping) -> R) -> (R, Option<PmemError>) {
        let prev = CURRENT.with(|c| {
            std::mem::replace(
                &mut *c.borrow_mut(),
                Context {
                    shared: Some(self.shared.clone()),
                    error: None,
                },
            )
        });
        let _restore = Enter { prev: Some(prev) };
        let r = f(&self.map);
        let err = CURRENT.with(|c| c.borrow_mut().error.take());
        (r, err)
    }

    fn call_result(&self, f: impl FnOnce(&Mapping) -> Result<()>) -> Result<()> {
        let (r, err) = self.call(f);
        r?;
        err.map_or(Ok(()), Err)
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Medium for Recorded {
    fn len(&self) -> usize {
        self.map.len()
    }
    fn domain(&self) -> Domain {
        self.map.domain()
    }
    fn backing(&self) -> Backing {
        self.map.backing()
    }
    fn label(&self) -> PathBuf {
        self.map.label()
    }
    fn read(&self, offset: usize, buf: &mut [u8]) {
        self.map.read(offset, buf)
    }
    fn write(&self, offset: usize, data: &[u8]) {
        self.map.write(offset, data);
        self.shared.note(Event::Store {
            offset,
            len: data.len(),
        });
        self.shared.sim.write(offset, data);
    }
    fn write_nontemporal(&self, offset: usize, data: &[u8]) {
        // Errors (a crash reported mid-copy, a failed msync) are latched by the simulator and
        // the mapping; the next fence returns them, as the trait says.
        let _ = self.call(|m| m.write_nontemporal(offset, data));
    }
    fn load_u64(&self, offset: usize) -> u64 {
        self.map.load_u64(offset)
    }
    fn store_u64(&self, offset: usize, value: u64) {
        self.map.store_u64(offset, value);
        self.shared.note(Event::Store { offset, len: 8 });
        self.shared.sim.store_u64(offset, value);
    }
    fn flush(&self, offset: usize, len: usize) -> Result<()> {
        self.call_result(|m| m.flush(offset, len))
    }
    fn write_back(&self, offset: usize, len: usize) -> Result<()> {
        self.call_result(|m| m.write_back(offset, len))
    }
    fn fence(&self) -> Result<()> {
        self.call_result(|m| m.fence())
    }
    fn persist(&self, offset: usize, len: usize) -> Result<()> {
        self.call_result(|m| m.persist(offset, len))
    }
    /// The recorded medium does not grow (its mapping reserves no address space).
    fn grow(&self, len: usize) -> Result<()> {
        self.map.grow(len)
    }
    // `discard` keeps the default (a hint that may keep the bytes): punching a hole in the real
    // file would make it differ from the simulator's images.
    fn inject(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.map.inject(offset, data)?;
        self.shared.sim.inject(offset, data)
    }
}

/// Test-only mutations of the medium's own code (the `canary` feature, enabled only by this
/// crate's tests): a mutation is switched on for the calling thread and changes what the
/// production write-back code does, so a test can show the recorded medium catching it.
#[cfg(feature = "canary")]
#[doc(hidden)]
pub mod canary {
    use std::cell::Cell;

    /// A deliberate bug in the medium code.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Mutation {
        /// No mutation.
        None,
        /// The write-back loop rounds the end of the range down, so the last line of a range
        /// that ends inside a line is not written back.
        SkipLastLine,
        /// A non-temporal copy does not write back its unaligned tail.
        TailNotFlushed,
        /// `msync` is given the range's length from the rounded-down page start, so the end of a
        /// range that crosses into the next page is not synced.
        MsyncShort,
    }

    thread_local! {
        static ACTIVE: Cell<Mutation> = const { Cell::new(Mutation::None) };
    }

    /// Switch `m` on for the calling thread (`Mutation::None` switches it off).
    pub fn set(m: Mutation) {
        ACTIVE.with(|a| a.set(m));
    }

    /// Is `m` on for the calling thread?
    pub(crate) fn active(m: Mutation) -> bool {
        ACTIVE.with(|a| a.get() == m)
    }
}
