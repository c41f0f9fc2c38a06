//! Waking the runner: SIGCHLD (a tracee stopped) and SIGPWR (a power-failure warning) write a
//! byte to every registered pipe; the handler does nothing else (async-signal-safe).

use std::sync::Once;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

const SLOTS: usize = 64;
static WAKE: [AtomicI32; SLOTS] = [const { AtomicI32::new(-1) }; SLOTS];
static PWR_COUNT: AtomicU64 = AtomicU64::new(0);
static PWR_NS: AtomicU64 = AtomicU64::new(0);
static CHLD: Once = Once::new();
static PWR: Once = Once::new();

extern "C" fn on_signal(sig: libc::c_int) {
    // SAFETY: __errno_location is the calling thread's errno slot; saved and restored so the
    // interrupted code sees no change.
    let errno = unsafe { *libc::__errno_location() };
    if sig == libc::SIGPWR {
        PWR_NS.store(crate::sys::monotonic_ns(), Ordering::SeqCst);
        PWR_COUNT.fetch_add(1, Ordering::SeqCst);
    }
    for slot in &WAKE {
        let fd = slot.load(Ordering::SeqCst);
        if fd >= 0 {
            let b = 1u8;
            // SAFETY: write(2) is async-signal-safe; the pipe is non-blocking, a full pipe
            // already means "wake up".
            unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

fn install(sig: i32) {
    // SAFETY: a zeroed sigaction with our handler and SA_RESTART (not SA_NOCLDSTOP: ptrace stops
    // must wake us); sigaction copies the struct.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

/// Number of SIGPWRs seen by this process, and the monotonic time of the last.
pub(crate) fn pwr_seen() -> (u64, u64) {
    (
        PWR_COUNT.load(Ordering::SeqCst),
        PWR_NS.load(Ordering::SeqCst),
    )
}

/// A registered wake-up pipe.
#[derive(Debug)]
pub(crate) struct Waker {
    rfd: i32,
    wfd: i32,
    slot: usize,
}

impl Waker {
    pub fn new(sigpwr: bool) -> std::io::Result<Waker> {
        CHLD.call_once(|| install(libc::SIGCHLD));
        if sigpwr {
            PWR.call_once(|| install(libc::SIGPWR));
        }
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 writes two descriptors into our array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        for (i, s) in WAKE.iter().enumerate() {
            if s.compare_exchange(-1, fds[1], Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return Ok(Waker {
                    rfd: fds[0],
                    wfd: fds[1],
                    slot: i,
                });
            }
        }
        // No slot: still usable, woken by the poll timeout only.
        Ok(Waker {
            rfd: fds[0],
            wfd: fds[1],
            slot: usize::MAX,
        })
    }

    /// Sleep until a signal wrote to the pipe or `timeout_ms` passed; drains the pipe.
    pub fn wait(&self, timeout_ms: i32) {
        let mut p = libc::pollfd {
            fd: self.rfd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one pollfd we own.
        unsafe { libc::poll(&mut p, 1, timeout_ms) };
        let mut buf = [0u8; 64];
        // SAFETY: non-blocking read into our buffer.
        while unsafe { libc::read(self.rfd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
    }
}

impl Drop for Waker {
    fn drop(&mut self) {
        if self.slot < SLOTS {
            WAKE[self.slot].store(-1, Ordering::SeqCst);
        }
        // The write end stays open on purpose: a handler running on another thread may have
        // read the slot just before it was cleared, and must not write into a reused number.
        let _ = self.wfd;
        // SAFETY: closing our own read end once.
        unsafe { libc::close(self.rfd) };
    }
}
