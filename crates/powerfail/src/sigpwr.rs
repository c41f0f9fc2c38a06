//! The SIGPWR warning source.
//!
//! The handler is async-signal-safe: it reads `CLOCK_MONOTONIC` (`clock_gettime` is on the POSIX
//! list of async-signal-safe functions), stores the time and a pending flag in lock-free atomics,
//! writes one byte to the save thread's non-blocking wake-up pipe (`write` is async-signal-safe;
//! a full pipe only means wake-ups are already pending), chains to a previous handler if that was
//! a function, and restores `errno`. It allocates nothing, takes no lock and never runs the save:
//! the save thread wakes on the byte and does the work.
//!
//! One `Sigpwr` can be installed per process at a time. Dropping it restores the previous action.
//! A previous action of `SIG_DFL` (terminate, for SIGPWR) or `SIG_IGN` is not chained.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::registry::SourceToken;
use crate::warning::{SaveThread, Shared, WAKE_SIGNAL};
use crate::{PowerFailError, Window};

/// Set by the handler, taken by the save thread.
pub(crate) static SIG_PENDING: AtomicBool = AtomicBool::new(false);
/// CLOCK_MONOTONIC nanoseconds of the earliest signal not yet taken (0: none).
static SIG_AT_NS: AtomicU64 = AtomicU64::new(0);
/// The wake-up pipe's write end (-1: none).
static SIG_FD: AtomicI32 = AtomicI32::new(-1);
/// Signals seen by the handler since the process started.
static SIG_COUNT: AtomicU64 = AtomicU64::new(0);
/// The previous handler to chain to (0: none) and whether it takes three arguments.
static OLD_HANDLER: AtomicUsize = AtomicUsize::new(0);
static OLD_SIGINFO: AtomicBool = AtomicBool::new(false);
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Handlers currently between reading SIG_FD and finishing their write.
static IN_WRITE: AtomicUsize = AtomicUsize::new(0);

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into a valid timespec; it is async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
        .max(1)
}

/// The instant of the pending signal (Rust's `Instant` is CLOCK_MONOTONIC on Linux), or now if
/// the time was already taken.
pub(crate) fn take_signal_instant() -> Instant {
    let at = SIG_AT_NS.swap(0, Ordering::AcqRel);
    // Read the raw clock before `Instant::now()`: a delay between the two reads then makes the
    // result later than the signal, never earlier, so it stays between the signal and now.
    let mono = monotonic_ns();
    let now = Instant::now();
    if at == 0 {
        return now;
    }
    let ago = mono.saturating_sub(at);
    now.checked_sub(Duration::from_nanos(ago)).unwrap_or(now)
}

extern "C" fn on_sigpwr(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: __errno_location returns this thread's errno slot, valid for the thread's life.
    let errno = unsafe { *libc::__errno_location() };
    let _ = SIG_AT_NS.compare_exchange(0, monotonic_ns(), Ordering::AcqRel, Ordering::Relaxed);
    SIG_COUNT.fetch_add(1, Ordering::Relaxed);
    SIG_PENDING.store(true, Ordering::Release);
    IN_WRITE.fetch_add(1, Ordering::SeqCst);
    let fd = SIG_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        let b = WAKE_SIGNAL;
        // SAFETY: one byte from a valid stack location; write(2) is async-signal-safe, and the
        // descriptor stays open while IN_WRITE counts us (Sigpwr::drop waits for it to drain).
        let _ = unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    }
    IN_WRITE.fetch_sub(1, Ordering::SeqCst);
    let old = OLD_HANDLER.load(Ordering::Acquire);
    if old != 0 {
        if OLD_SIGINFO.load(Ordering::Acquire) {
            // SAFETY: `old` was the sa_sigaction of a previous SA_SIGINFO action, i.e. a function
            // with this signature; the arguments are the ones the kernel gave us.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(old) };
            f(sig, info, ctx);
        } else {
            // SAFETY: `old` was the sa_handler of a previous action without SA_SIGINFO.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(old) };
            f(sig);
        }
    }
    // SAFETY: as above; restoring errno keeps the interrupted code's view intact.
    unsafe { *libc::__errno_location() = errno };
}

/// The installed SIGPWR source; dropping it restores the previous action.
pub struct Sigpwr {
    shared: Arc<Shared>,
    _listed: SourceToken,
    old: libc::sigaction,
}

impl fmt::Debug for Sigpwr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sigpwr")
            .field("chained", &(OLD_HANDLER.load(Ordering::Relaxed) != 0))
            .finish()
    }
}

impl Sigpwr {
    /// Installs the SIGPWR handler for `thread`; its warnings carry `window`. Fails if another
    /// `Sigpwr` is installed in this process.
    pub fn install(thread: &SaveThread, window: Window) -> Result<Sigpwr, PowerFailError> {
        if INSTALLED
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(PowerFailError::SigpwrInstalled);
        }
        let shared = thread.shared().clone();
        *shared
            .sigpwr_window
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(window);
        let undo = |shared: &Shared| {
            *shared
                .sigpwr_window
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = None;
            SIG_FD.store(-1, Ordering::Release);
            OLD_HANDLER.store(0, Ordering::Release);
            INSTALLED.store(false, Ordering::Release);
        };

        // Read the current action first so the chain is in place before our handler can run.
        // SAFETY: sigaction is a plain C struct; all-zero is a valid value to be overwritten.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: querying the action with a null new action and a valid out pointer.
        if unsafe { libc::sigaction(libc::SIGPWR, std::ptr::null(), &mut old) } != 0 {
            let e = std::io::Error::last_os_error();
            undo(&shared);
            return Err(PowerFailError::io("sigaction(SIGPWR) query", e));
        }
        let prev = old.sa_sigaction;
        let chain = prev != libc::SIG_DFL && prev != libc::SIG_IGN;
        OLD_SIGINFO.store(old.sa_flags & libc::SA_SIGINFO != 0, Ordering::Release);
        OLD_HANDLER.store(if chain { prev } else { 0 }, Ordering::Release);
        SIG_FD.store(shared.pipe.write_fd(), Ordering::Release);

        // SAFETY: as above.
        let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
        new.sa_sigaction = on_sigpwr as *const () as usize;
        new.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        // SAFETY: sa_mask is a valid sigset_t inside `new`.
        unsafe { libc::sigemptyset(&mut new.sa_mask) };
        // SAFETY: installing a valid action whose handler is async-signal-safe (module docs).
        if unsafe { libc::sigaction(libc::SIGPWR, &new, std::ptr::null_mut()) } != 0 {
            let e = std::io::Error::last_os_error();
            undo(&shared);
            return Err(PowerFailError::io("sigaction(SIGPWR) install", e));
        }
        let listed = shared.arm("SIGPWR".into());
        Ok(Sigpwr {
            shared,
            _listed: listed,
            old,
        })
    }

    /// How many SIGPWR signals this crate's handler has seen in this process.
    pub fn signals_seen() -> u64 {
        SIG_COUNT.load(Ordering::Relaxed)
    }
}

impl Drop for Sigpwr {
    fn drop(&mut self) {
        // Restore the old action first, then unpublish the descriptor.
        // SAFETY: restoring the action sigaction gave us at install.
        unsafe { libc::sigaction(libc::SIGPWR, &self.old, std::ptr::null_mut()) };
        SIG_FD.store(-1, Ordering::SeqCst);
        // A handler that read the descriptor before it was unpublished finishes its write before
        // the pipe can be closed.
        while IN_WRITE.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
        OLD_HANDLER.store(0, Ordering::Release);
        *self
            .shared
            .sigpwr_window
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
        INSTALLED.store(false, Ordering::Release);
    }
}
