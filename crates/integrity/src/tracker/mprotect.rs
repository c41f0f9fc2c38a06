//! The portable fallback: `mprotect` and a SIGSEGV handler.
//!
//! `arm` makes the whole range read-only. The first store to a page faults; the process-wide
//! SIGSEGV handler finds the tracker that owns the address, sets the page's bit and makes that
//! one page writable again, and the store is retried. `collect` re-protects the pages it reports
//! and clears their bits.
//!
//! # The protocol between the handler and `collect`
//!
//! Invariant, per page: **if the page is writable, its bit is set.** A store can only land
//! while the page is writable, so a store that lands before `collect` re-protects the page is
//! covered by a set bit that this `collect` reports, and a store after it faults and sets the
//! bit again for a later `collect`. Both sides keep the invariant by ordering their two steps
//! and by holding the lock of the page's group (512 pages, aligned) for both:
//!
//! - handler: lock; set the bit; make the page writable; unlock;
//! - `collect`: lock the groups of the batch; read the bits; make those pages read-only; clear
//!   those bits; unlock;
//! - `arm`: lock every group; make the whole range read-only; clear every bit; unlock.
//!
//! Without the lock the handler's two steps could interleave with the collector's: the collector
//! re-protects a page, a store faults, the handler sets the (still set) bit and unprotects, then
//! the collector clears the bit, leaving a writable page with a clear bit whose later stores
//! would never be reported.
//!
//! The lock is a spin lock on an `AtomicU32`: lock-free atomics, `mprotect` and `sched_yield` are
//! everything the handler uses, so it is async-signal-safe (no allocation, no mutex, no stdio).
//! It cannot deadlock against its own thread: the handler blocks every signal while it runs
//! (`sa_mask` is full), and `collect`, `arm` and `drop` block every signal on their thread while
//! they hold group locks, so no signal handler can fault into the tracked range on a thread
//! that already holds the lock it needs. Nothing holding a group lock touches tracked memory.
//!
//! # Known limits
//!
//! - **VMA count.** Every isolated writable page splits the mapping's VMA in three; with the
//!   default `vm.max_map_count` (65530) `mprotect` fails with `ENOMEM` after about 32,750
//!   isolated dirty pages (measured; fewer if the process has other mappings). The handler then
//!   falls back to making the page's whole 512-page group writable with all its bits set
//!   (reported as written: conservative, never a miss), then the whole range; if even that fails
//!   the fault is passed on as a real SIGSEGV. [`MprotectTracker::fallbacks`] counts these. Every
//!   second page of 1 GiB written: 385 group fallbacks, 229,632 pages reported for 131,072
//!   written. `collect` and `arm` return a [`TrackError`] when their `mprotect` fails, leaving
//!   the bits set.
//! - **Kernel writes** into a read-only page (`read(2)`, `recv(2)` into the range) fail with
//!   `EFAULT` instead of faulting: the kernel does not raise SIGSEGV for its own accesses. Do not
//!   let system calls write into a tracked range.
//! - **Cost**: a first store to a page per epoch costs a signal delivery and an `mprotect`:
//!   4.5-7 µs measured here, against about 0.8 µs for the userfaultfd backend.
//! - **Other SIGSEGV users.** The handler is installed once, on the first tracker, and chains
//!   to the handler it replaced for faults outside every tracker. Code that installs its own
//!   SIGSEGV handler later without chaining breaks this tracker. At most [`MAX_TRACKERS`]
//!   trackers exist at once.
//! - `fork` while another thread holds a group lock leaves the child's copy of that lock held.

use super::{
    BATCH_PAGES, BatchBits, PAGE_BYTES, TrackError, Tracker, TrackerKind, check_batch,
    check_mapping_range, gather_bits, set_bits,
};
use std::ptr;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

const KIND: &str = "mprotect";

/// Most trackers that can exist at once (slots of the handler's registry).
pub const MAX_TRACKERS: usize = 64;

/// Pages per lock group: one batch, aligned.
const GROUP_PAGES: u64 = BATCH_PAGES as u64;

/// How many faults in the range of a dropped tracker the handler retries before it treats one as
/// a real SIGSEGV (see [`Slot::stale_budget`]).
const STALE_RETRIES: u32 = 1024;

/// `si_code` of a SIGSEGV raised by a permission fault on a mapped page.
const SEGV_ACCERR: libc::c_int = 2;

/// What the handler and the tracker share: the bits and the group locks.
struct Shared {
    /// First address of the range (page-aligned). Only handed to `mprotect`.
    start: usize,
    /// One past the last address.
    end: usize,
    pages: u64,
    /// One bit per page: set while the page is (or may be) writable.
    words: Box<[AtomicU64]>,
    /// One spin lock per group of [`GROUP_PAGES`] pages: 0 free, 1 held.
    locks: Box<[AtomicU32]>,
    /// How often the handler had to open more than one page (`mprotect` refused a split).
    fallbacks: AtomicU64,
    /// Tests: the handler's `mprotect` calls shorter than this many bytes fail, as if the
    /// kernel had refused to split the VMA.
    #[cfg(test)]
    refuse_opening_below: AtomicUsize,
}

/// One entry of the handler's registry.
struct Slot {
    /// `[start, end)` of the tracker registered here, or of the last one if none is now: a
    /// hint the handler checks before it touches `state`. Written only under [`REGISTRY_LOCK`].
    start: AtomicUsize,
    end: AtomicUsize,
    /// The live tracker's state, or null.
    state: AtomicPtr<Shared>,
    /// Handlers currently between reading `state` and their last use of it.
    active: AtomicUsize,
    /// Faults in the range of the dropped tracker that the handler may still retry. A thread
    /// can fault on a read-only page, be preempted before its handler runs, and find its
    /// tracker gone: `drop` has made the range writable again, so retrying the store is right.
    /// The budget bounds the retries in case the fault was real after all.
    stale_budget: AtomicU32,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            state: AtomicPtr::new(ptr::null_mut()),
            active: AtomicUsize::new(0),
            stale_budget: AtomicU32::new(0),
        }
    }
}

static REGISTRY: [Slot; MAX_TRACKERS] = [const { Slot::new() }; MAX_TRACKERS];
/// One past the highest slot ever used: the handler scans `REGISTRY[..SLOTS_USED]`.
static SLOTS_USED: AtomicUsize = AtomicUsize::new(0);
/// Serializes registration and retirement (never taken by the handler).
static REGISTRY_LOCK: Mutex<()> = Mutex::new(());
/// The SIGSEGV disposition our handler replaced: `sa_sigaction` and `sa_flags`.
static PREVIOUS_HANDLER: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
static PREVIOUS_FLAGS: AtomicI32 = AtomicI32::new(0);
/// Whether the handler is installed (`Err(errno)` if installing failed).
static INSTALLED: OnceLock<Result<(), i32>> = OnceLock::new();

/// Tracks a range with `mprotect` and a SIGSEGV handler. See the module documentation for the
/// protocol and its limits.
pub struct MprotectTracker {
    shared: Arc<Shared>,
    slot: usize,
    /// The mapping, when made by [`MprotectTracker::for_mapping`]: keeps the range mapped.
    _owner: Option<Arc<pmem::Mapping>>,
}

impl std::fmt::Debug for MprotectTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MprotectTracker")
            .field("start", &format_args!("{:#x}", self.shared.start))
            .field("pages", &self.shared.pages)
            .field("slot", &self.slot)
            .field("fallbacks", &self.shared.fallbacks.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl MprotectTracker {
    /// Track `[base, base + len)`, armed (every page clean, so read-only). Installs the
    /// process-wide SIGSEGV handler on first use.
    ///
    /// # Safety
    ///
    /// `base` is page-aligned, `len` a non-zero multiple of 4096, and `[base, base + len)` is
    /// part of live `MAP_SHARED` mappings that are readable and writable, and stay mapped until
    /// the tracker is dropped. While the tracker lives it owns the range's protection: nothing
    /// else may `mprotect`, `mremap` or unmap it. Dropping the tracker makes the range readable
    /// and writable again. Stores into the range are fine from any thread (that is the point);
    /// the kernel's own stores into it (`read(2)` and the like) fail with `EFAULT`.
    pub unsafe fn new(base: *mut u8, len: usize) -> Result<MprotectTracker, TrackError> {
        let start = base as usize;
        if len == 0 || start % PAGE_BYTES != 0 || len % PAGE_BYTES != 0 {
            return Err(TrackError::invalid(
                KIND,
                format!("range {start:#x}+{len:#x} is empty or not page-aligned"),
            ));
        }
        let end = start
            .checked_add(len)
            .ok_or_else(|| TrackError::invalid(KIND, "range wraps around"))?;
        if let Err(errno) = INSTALLED.get_or_init(install_handler) {
            return Err(TrackError {
                kind: KIND,
                what: "install the SIGSEGV handler".into(),
                error: std::io::Error::from_raw_os_error(*errno),
            });
        }
        let pages = (len / PAGE_BYTES) as u64;
        let shared = Arc::new(Shared {
            start,
            end,
            pages,
            // Not armed yet: every page writable, every bit set (the invariant holds).
            words: (0..pages.div_ceil(64))
                .map(|_| AtomicU64::new(u64::MAX))
                .collect(),
            locks: (0..pages.div_ceil(GROUP_PAGES))
                .map(|_| AtomicU32::new(0))
                .collect(),
            fallbacks: AtomicU64::new(0),
            #[cfg(test)]
            refuse_opening_below: AtomicUsize::new(0),
        });
        let slot = register(&shared)?;
        let tracker = MprotectTracker {
            shared,
            slot,
            _owner: None,
        };
        // Dropping `tracker` from here on retires the slot and makes the range writable.
        tracker.arm()?;
        Ok(tracker)
    }

    /// Track `[offset, offset + len)` of `mapping` (page-aligned, inside the mapping, which must
    /// be writable), keeping the mapping alive as long as the tracker.
    pub fn for_mapping(
        mapping: Arc<pmem::Mapping>,
        offset: usize,
        len: usize,
    ) -> Result<MprotectTracker, TrackError> {
        check_mapping_range(KIND, &mapping, offset, len)?;
        // SAFETY: the range lies inside the mapping (checked above), a readable and writable
        // MAP_SHARED mapping made by `pmem::Mapping`, which never changes its protection or
        // remaps it; the tracker holds an `Arc` of it, so it stays mapped until the tracker is
        // dropped.
        let mut tracker = unsafe { MprotectTracker::new(mapping.base_ptr().add(offset), len)? };
        tracker._owner = Some(mapping);
        Ok(tracker)
    }

    /// How often the handler had to make more than the faulting page writable because the
    /// kernel refused to split the mapping further (each time, the pages it opened are reported
    /// as written).
    pub fn fallbacks(&self) -> u64 {
        self.shared.fallbacks.load(Ordering::Relaxed)
    }
}

impl Shared {
    /// The pages of `group`: first page and count.
    fn group_pages(&self, group: u64) -> (u64, u64) {
        let first = group * GROUP_PAGES;
        (first, GROUP_PAGES.min(self.pages - first))
    }

    /// The handler's work for a permission fault at `addr` (inside the range): set the page's
    /// bit and make the page writable. Async-signal-safe. Returns false if the page could not
    /// be made writable.
    fn on_fault(&self, addr: usize) -> bool {
        let page = ((addr - self.start) / PAGE_BYTES) as u64;
        let group = page / GROUP_PAGES;
        let lock = &self.locks[group as usize];
        spin_lock(lock);
        set_bits(&self.words, page, 1);
        let mut opened = self.open(self.start + page as usize * PAGE_BYTES, PAGE_BYTES);
        if !opened {
            // Splitting the VMA failed (most likely the map count limit): open the whole group,
            // which merges the writable pieces inside it, reporting every page of it as written.
            self.fallbacks.fetch_add(1, Ordering::Relaxed);
            let (first, count) = self.group_pages(group);
            set_bits(&self.words, first, count);
            opened = self.open(
                self.start + first as usize * PAGE_BYTES,
                count as usize * PAGE_BYTES,
            );
        }
        spin_unlock(lock);
        if !opened {
            // Last resort: open the whole range, which merges into its neighbours (normally
            // one VMA again), every page reported.
            for lock in self.locks.iter() {
                spin_lock(lock);
            }
            set_bits(&self.words, 0, self.pages);
            opened = self.open(self.start, self.end - self.start);
            for lock in self.locks.iter() {
                spin_unlock(lock);
            }
        }
        opened
    }

    /// The handler's `mprotect(PROT_READ | PROT_WRITE)`; true on success. Async-signal-safe.
    fn open(&self, start: usize, len: usize) -> bool {
        #[cfg(test)]
        if len < self.refuse_opening_below.load(Ordering::Relaxed) {
            return false;
        }
        protect(start, len, libc::PROT_READ | libc::PROT_WRITE)
    }

    /// Lock groups `[first, last]` in ascending order (the only order anyone takes more than
    /// one), with every signal blocked on this thread until the guard is dropped.
    fn lock_groups(&self, first: u64, last: u64) -> GroupsLocked<'_> {
        let signals = SignalsBlocked::new();
        for group in first..=last {
            spin_lock(&self.locks[group as usize]);
        }
        GroupsLocked {
            shared: self,
            first,
            last,
            _signals: signals,
        }
    }
}

/// Held group locks; unlocks them, then restores the signal mask.
struct GroupsLocked<'a> {
    shared: &'a Shared,
    first: u64,
    last: u64,
    _signals: SignalsBlocked,
}

impl Drop for GroupsLocked<'_> {
    fn drop(&mut self) {
        for group in self.first..=self.last {
            spin_unlock(&self.shared.locks[group as usize]);
        }
    }
}

/// Every signal blocked on this thread until dropped.
struct SignalsBlocked {
    previous: libc::sigset_t,
}

impl SignalsBlocked {
    fn new() -> SignalsBlocked {
        // SAFETY: sigset_t is plain data; sigfillset initializes `all` and pthread_sigmask writes
        // `previous`; both are locals that live for the calls. pthread_sigmask cannot fail with
        // valid arguments.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut previous: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut previous);
            SignalsBlocked { previous }
        }
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask `new` saved; the guard is only ever a local (or a field of
        // one), so this runs on the thread that blocked the signals.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, ptr::null_mut()) };
    }
}

fn spin_lock(lock: &AtomicU32) {
    let mut spins = 0u32;
    while lock
        .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            // The holder may be preempted (two cores): let it run. sched_yield is a plain
            // system call, safe in a signal handler.
            // SAFETY: no arguments, no memory touched.
            unsafe { libc::sched_yield() };
        }
    }
}

fn spin_unlock(lock: &AtomicU32) {
    lock.store(0, Ordering::Release);
}

/// `mprotect` a page-aligned range of a tracked mapping; true on success. Async-signal-safe.
fn protect(start: usize, len: usize, prot: libc::c_int) -> bool {
    // SAFETY: the range lies inside a tracked range, which the contract of `new` keeps mapped
    // and lets the tracker re-protect; changing protection never changes contents.
    unsafe { libc::mprotect(start as *mut libc::c_void, len, prot) == 0 }
}

/// Put `shared` in a free registry slot so the handler finds it.
fn register(shared: &Arc<Shared>) -> Result<usize, TrackError> {
    let _guard = REGISTRY_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // Prefer never-used slots, so a recently retired one keeps tolerating stale faults.
    let never_used = REGISTRY.iter().position(|s| {
        s.state.load(Ordering::Acquire).is_null() && s.end.load(Ordering::Relaxed) == 0
    });
    let index = match never_used.or_else(|| {
        REGISTRY
            .iter()
            .position(|s| s.state.load(Ordering::Acquire).is_null())
    }) {
        Some(index) => index,
        None => {
            return Err(TrackError {
                kind: KIND,
                what: format!("more than {MAX_TRACKERS} trackers at once"),
                error: std::io::ErrorKind::OutOfMemory.into(),
            });
        }
    };
    let slot = &REGISTRY[index];
    // The slot is free and stays free until `state` is published below, and no tracker's pages
    // are read-only yet, so no handler acts on the intermediate values.
    slot.stale_budget.store(0, Ordering::SeqCst);
    slot.end.store(0, Ordering::SeqCst);
    slot.start.store(shared.start, Ordering::SeqCst);
    slot.end.store(shared.end, Ordering::SeqCst);
    SLOTS_USED.fetch_max(index + 1, Ordering::SeqCst);
    slot.state
        .store(Arc::as_ptr(shared).cast_mut(), Ordering::SeqCst);
    Ok(index)
}

/// Take a tracker out of the registry and wait until no handler uses its state.
fn retire(index: usize) {
    let _guard = REGISTRY_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let slot = &REGISTRY[index];
    slot.stale_budget.store(STALE_RETRIES, Ordering::SeqCst);
    slot.state.store(ptr::null_mut(), Ordering::SeqCst);
    // A handler increments `active` before it loads `state` (both SeqCst). Either its increment
    // comes first in the single order of SeqCst operations, and we see it here and wait, or our
    // store of null comes first, and it sees null. Either way no handler uses the state after
    // we return.
    while slot.active.load(Ordering::SeqCst) != 0 {
        std::thread::yield_now();
    }
}

fn install_handler() -> Result<(), i32> {
    // SAFETY: sigaction with a null new action only reads the current one into `old`.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::sigaction(libc::SIGSEGV, ptr::null(), &mut old) } != 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    // Recorded before ours is installed, so the handler never sees it unset.
    PREVIOUS_HANDLER.store(old.sa_sigaction, Ordering::SeqCst);
    PREVIOUS_FLAGS.store(old.sa_flags, Ordering::SeqCst);
    // SAFETY: a zeroed sigaction is a valid starting point (no flags, empty mask).
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_sigsegv as extern "C" fn(_, _, _) as usize;
    // SA_ONSTACK: run on the thread's alternate stack if it has one, as the standard library's
    // stack-overflow handler (to which we chain) expects.
    action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
    // SAFETY: fills the mask in our local action.
    unsafe { libc::sigfillset(&mut action.sa_mask) };
    // SAFETY: installs `on_sigsegv`, an async-signal-safe handler with the SA_SIGINFO signature.
    if unsafe { libc::sigaction(libc::SIGSEGV, &action, ptr::null_mut()) } != 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    Ok(())
}

/// The SIGSEGV handler. Async-signal-safe: atomics, `mprotect`, `sched_yield`, `sigaction`.
extern "C" fn on_sigsegv(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: errno is this thread's; the location is valid for the thread's life.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler; for SIGSEGV the
    // fault address is the active member.
    let (addr, code) = unsafe { ((*info).si_addr() as usize, (*info).si_code) };
    let handled = code == SEGV_ACCERR && handle_fault(addr);
    if !handled {
        chain(signal, info, context);
    }
    // SAFETY: as above; the interrupted code must see the errno it had.
    unsafe { *libc::__errno_location() = errno };
}

/// Find the tracker owning `addr` and let it handle the fault. True if the store should be
/// retried.
fn handle_fault(addr: usize) -> bool {
    let used = SLOTS_USED.load(Ordering::SeqCst).min(MAX_TRACKERS);
    let covers = |slot: &Slot| {
        addr >= slot.start.load(Ordering::SeqCst) && addr < slot.end.load(Ordering::SeqCst)
    };
    // Live trackers first, so a live tracker over the range of a dropped one is never shadowed.
    for slot in REGISTRY[..used].iter().filter(|slot| covers(slot)) {
        slot.active.fetch_add(1, Ordering::SeqCst);
        let state = slot.state.load(Ordering::SeqCst);
        let outcome = if state.is_null() {
            None
        } else {
            // SAFETY: a non-null `state` points to the `Shared` of a live tracker; `retire`
            // waits for `active` to drop to zero before the tracker releases it (argument in
            // `retire`), and `Shared` is only ever accessed through shared references.
            let shared = unsafe { &*state };
            (addr >= shared.start && addr < shared.end).then(|| shared.on_fault(addr))
        };
        slot.active.fetch_sub(1, Ordering::SeqCst);
        if let Some(opened) = outcome {
            return opened;
        }
    }
    // Then the ranges of dropped trackers, made writable by their `drop`: retry the store, a
    // bounded number of times per range.
    REGISTRY[..used].iter().any(|slot| {
        covers(slot)
            && slot.state.load(Ordering::SeqCst).is_null()
            && slot
                .stale_budget
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(1))
                .is_ok()
    })
}

/// Pass a fault that is not ours to the handler we replaced.
fn chain(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let handler = PREVIOUS_HANDLER.load(Ordering::SeqCst);
    let flags = PREVIOUS_FLAGS.load(Ordering::SeqCst);
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // Restore the default action and return: the faulting instruction runs again and the
        // kernel kills the process with SIGSEGV, as if we had never been installed.
        // SAFETY: a zeroed sigaction with SIG_DFL (0) is the default disposition; sigaction is
        // async-signal-safe.
        unsafe {
            let default: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGSEGV, &default, ptr::null_mut());
        }
        return;
    }
    if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous disposition was installed with SA_SIGINFO, so `handler` is a
        // function with this signature; we pass it our own arguments unchanged.
        let previous: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(handler) };
        previous(signal, info, context);
    } else {
        // SAFETY: without SA_SIGINFO the previous handler takes just the signal number.
        let previous: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        previous(signal);
    }
}

impl Tracker for MprotectTracker {
    fn kind(&self) -> TrackerKind {
        TrackerKind::Mprotect
    }

    fn pages(&self) -> u64 {
        self.shared.pages
    }

    fn arm(&self) -> Result<(), TrackError> {
        let shared = &*self.shared;
        let last_group = shared.locks.len() as u64 - 1;
        let _locked = shared.lock_groups(0, last_group);
        if !protect(shared.start, shared.end - shared.start, libc::PROT_READ) {
            // Some pages may be read-only now with their bits still set: allowed.
            return Err(TrackError::last_os(KIND, "mprotect(PROT_READ) the range"));
        }
        for word in shared.words.iter() {
            word.store(0, Ordering::Release);
        }
        Ok(())
    }

    fn collect(&self, first: u64, count: u32, out: &mut BatchBits) -> Result<(), TrackError> {
        check_batch(KIND, self.shared.pages, first, count)?;
        out.fill(0);
        if count == 0 {
            return Ok(());
        }
        let shared = &*self.shared;
        let end = first + count as u64;
        let mut bits = [0; super::BATCH_WORDS];
        {
            let _locked = shared.lock_groups(first / GROUP_PAGES, (end - 1) / GROUP_PAGES);
            gather_bits(
                &shared.words,
                first,
                count,
                |word, _| word.load(Ordering::Acquire),
                &mut bits,
            );
            let lowest = bits
                .iter()
                .enumerate()
                .find(|(_, w)| **w != 0)
                .map(|(i, w)| i as u64 * 64 + w.trailing_zeros() as u64);
            let highest = bits
                .iter()
                .enumerate()
                .rfind(|(_, w)| **w != 0)
                .map(|(i, w)| i as u64 * 64 + 63 - w.leading_zeros() as u64);
            let (Some(lowest), Some(highest)) = (lowest, highest) else {
                return Ok(());
            };
            // One call from the lowest to the highest reported page. The clean pages between
            // them are read-only already (their bits are clear, so by the invariant they are
            // not writable), so this re-protects exactly the reported pages, and lets the
            // kernel merge the VMAs in between.
            let at = shared.start + ((first + lowest) as usize) * PAGE_BYTES;
            let len = (highest - lowest + 1) as usize * PAGE_BYTES;
            if !protect(at, len, libc::PROT_READ) {
                return Err(TrackError::last_os(
                    KIND,
                    "mprotect(PROT_READ) collected pages",
                ));
            }
            let mut cleared = [0; super::BATCH_WORDS];
            gather_bits(
                &shared.words,
                first,
                count,
                |word, mask| word.fetch_and(!mask, Ordering::AcqRel),
                &mut cleared,
            );
            // The handler cannot set bits while we hold the groups' locks.
            debug_assert_eq!(bits, cleared);
        }
        *out = bits;
        Ok(())
    }

    fn peek(&self, first: u64, count: u32, out: &mut BatchBits) -> Result<(), TrackError> {
        check_batch(KIND, self.shared.pages, first, count)?;
        gather_bits(
            &self.shared.words,
            first,
            count,
            |word, _| word.load(Ordering::Acquire),
            out,
        );
        Ok(())
    }

    /// Nothing to do: the handler sees the stores.
    fn mark(&self, _first: u64, _count: u64) {}
}

impl Drop for MprotectTracker {
    fn drop(&mut self) {
        let shared = &*self.shared;
        {
            // Under every lock, so no handler is between its two steps; afterwards every page is
            // writable and no new fault can arise from the range.
            let _locked = shared.lock_groups(0, shared.locks.len() as u64 - 1);
            protect(
                shared.start,
                shared.end - shared.start,
                libc::PROT_READ | libc::PROT_WRITE,
            );
        }
        // Faults raised before the range became writable but handled after this find the slot
        // retired and retry.
        retire(self.slot);
        // `self.shared` (and with it the bits and locks) is released after this returns, when
        // no handler can reach it any more.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::BATCH_WORDS;

    /// An anonymous shared mapping, unmapped on drop.
    struct Scratch {
        base: *mut u8,
        len: usize,
    }

    impl Scratch {
        fn new(pages: usize) -> Scratch {
            let len = pages * PAGE_BYTES;
            // SAFETY: a new anonymous shared mapping at a kernel-chosen address.
            let base = unsafe {
                libc::mmap(
                    ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(base, libc::MAP_FAILED);
            Scratch {
                base: base.cast(),
                len,
            }
        }

        fn store(&self, page: usize, value: u64) {
            assert!(page * PAGE_BYTES < self.len);
            // SAFETY: an aligned word inside the mapping, accessed only atomically.
            let word = unsafe { AtomicU64::from_ptr(self.base.add(page * PAGE_BYTES).cast()) };
            word.store(value, Ordering::Release);
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            // SAFETY: exactly the mapping `new` made.
            unsafe { libc::munmap(self.base.cast(), self.len) };
        }
    }

    fn collected(tracker: &MprotectTracker, first: u64, count: u32) -> BatchBits {
        let mut bits = [0; BATCH_WORDS];
        tracker.collect(first, count, &mut bits).unwrap();
        bits
    }

    #[test]
    fn two_trackers_and_a_retired_range() {
        let a = Scratch::new(600);
        let b = Scratch::new(8);
        // SAFETY: live MAP_SHARED read-write mappings that outlive their trackers.
        let ta = unsafe { MprotectTracker::new(a.base, a.len).unwrap() };
        // SAFETY: as above.
        let tb = unsafe { MprotectTracker::new(b.base, b.len).unwrap() };
        a.store(599, 1);
        a.store(3, 1);
        b.store(7, 1);
        let bits = collected(&ta, 512, 88);
        assert_eq!(bits[1], 1 << (87 - 64));
        assert_eq!(collected(&ta, 0, 512)[0], 1 << 3);
        assert_eq!(collected(&tb, 0, 8)[0], 1 << 7);
        assert_eq!(collected(&tb, 0, 8)[0], 0);
        drop(ta);
        // The range is writable again without a tracker.
        a.store(5, 2);
        b.store(1, 1);
        assert_eq!(collected(&tb, 0, 8)[0], 1 << 1);
        assert_eq!(tb.fallbacks(), 0);
    }

    #[test]
    fn refused_splits_open_the_group_then_the_range() {
        let a = Scratch::new(1100);
        // SAFETY: a live MAP_SHARED read-write mapping that outlives the tracker.
        let t = unsafe { MprotectTracker::new(a.base, a.len).unwrap() };
        let all = |first: u64, count: u32| -> u64 {
            collected(&t, first, count)
                .iter()
                .map(|w| w.count_ones() as u64)
                .sum()
        };
        t.shared
            .refuse_opening_below
            .store(PAGE_BYTES + 1, Ordering::Relaxed);
        a.store(600, 1);
        assert_eq!(t.fallbacks(), 1);
        assert_eq!(all(0, 512), 0);
        assert_eq!(all(512, 512), 512);
        assert_eq!(all(1024, 76), 0);
        t.shared
            .refuse_opening_below
            .store(GROUP_PAGES as usize * PAGE_BYTES + 1, Ordering::Relaxed);
        a.store(3, 1);
        assert_eq!(t.fallbacks(), 2);
        assert_eq!(all(0, 512) + all(512, 512) + all(1024, 76), 1100);
        // Collected pages are protected again: with splits allowed, one page at a time.
        t.shared.refuse_opening_below.store(0, Ordering::Relaxed);
        a.store(1099, 1);
        assert_eq!(collected(&t, 1024, 76)[1], 1 << (75 - 64));
        assert_eq!(all(0, 512) + all(512, 512) + all(1024, 76), 0);
        assert_eq!(t.fallbacks(), 2);
    }

    #[test]
    fn kernel_writes_into_a_protected_page_fail() {
        let a = Scratch::new(2);
        // SAFETY: a live MAP_SHARED read-write mapping that outlives the tracker.
        let t = unsafe { MprotectTracker::new(a.base, a.len).unwrap() };
        let mut fds = [0; 2];
        // SAFETY: pipe writes two descriptors into the array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: plain write of a local buffer to our pipe.
        let sent = unsafe { libc::write(fds[1], b"abcd".as_ptr().cast(), 4) };
        assert_eq!(sent, 4);
        // SAFETY: read(2) into page 1 of the scratch mapping, which is read-only now.
        let n = unsafe { libc::read(fds[0], a.base.add(PAGE_BYTES).cast(), 4) };
        let error = std::io::Error::last_os_error();
        // SAFETY: closing the pipe descriptors we own.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        assert_eq!(n, -1);
        assert_eq!(error.raw_os_error(), Some(libc::EFAULT));
        assert_eq!(collected(&t, 0, 2)[0], 0);
    }

    #[test]
    fn a_new_tracker_over_a_dropped_ones_range() {
        let a = Scratch::new(16);
        for round in 0..3 {
            // SAFETY: a live MAP_SHARED read-write mapping that outlives the tracker.
            let t = unsafe { MprotectTracker::new(a.base, a.len).unwrap() };
            a.store(round, 1);
            assert_eq!(collected(&t, 0, 16)[0], 1 << round);
            assert_eq!(t.fallbacks(), 0);
        }
    }

    #[test]
    fn the_stale_budget_is_bounded() {
        let slot = Slot::new();
        slot.stale_budget.store(2, Ordering::SeqCst);
        let take = || {
            slot.stale_budget
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(1))
                .is_ok()
        };
        assert!(take());
        assert!(take());
        assert!(!take());
    }
}
