//! The usage trap (`KV_OPEN_TRAP`): a pool opened with it hands C addresses in a reserved,
//! inaccessible staging range of the pool's size instead of addresses in the mapping. The
//! library translates a staged address back to a region offset (staged address - start of the
//! range) in `kv_tx_write`, `kv_tx_read`, `kv_oid_of`, `kv_tx_add_direct` and the `kv_mutex`
//! calls; a load or store through one faults at once. A SIGSEGV handler, installed once per
//! process when the first trapped pool opens, recognises a fault inside a staging range,
//! writes a message naming the API rule to standard error and lets the signal kill the process
//! with its default action; every other SIGSEGV goes to the handler that was there before.
//!
//! The staging ranges live in a fixed table of atomics ([`RANGES`]) so the handler can look
//! them up without locks or allocation. `docs/unsafe.md`, "The usage trap", argues the unsafe
//! code.

use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::Mutex;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{KV_EINVAL, KV_EIO, KvError};

/// How many trapped pools may be open at once in one process.
const SLOTS: usize = 64;

/// `(start, len)` of the staging range of each open trapped pool; `start == 0`: a free slot.
/// Writers (under [`REGISTER`]) store `len` before `start` and clear `start` first; the signal
/// handler reads `start` then `len`.
static RANGES: [(AtomicUsize, AtomicUsize); SLOTS] =
    [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; SLOTS];

/// Serialises registration (never taken by the signal handler).
static REGISTER: Mutex<()> = Mutex::new(());

/// The SIGSEGV disposition the handler replaced: `(sa_sigaction, sa_flags)`. Set once, before
/// the handler is installed.
static PREVIOUS: OnceLock<(usize, c_int)> = OnceLock::new();

/// The outcome of installing the handler (once per process).
static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();

/// A reserved, inaccessible address range of one trapped pool, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Staging {
    start: usize,
    len: usize,
    slot: usize,
}

impl Staging {
    /// Reserve `len` bytes of address space with no access (`PROT_NONE`, `MAP_NORESERVE`: no
    /// memory is committed), register them with the handler and install it if needed.
    pub(crate) fn reserve(len: u64) -> Result<Staging, KvError> {
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l > 0)
            .ok_or_else(|| {
                KvError::new(
                    KV_EINVAL,
                    format!("KV_OPEN_TRAP: cannot reserve a staging range of {len} bytes"),
                )
            })?;
        install()?;
        // SAFETY: an anonymous private mapping at an address the kernel picks, with no access:
        // it touches no existing memory.
        let at = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(KvError::new(
                KV_EIO,
                format!(
                    "KV_OPEN_TRAP: mmap of a {len}-byte staging range failed: {}",
                    std::io::Error::last_os_error()
                ),
            ));
        }
        let start = at.expose_provenance();
        let _held = REGISTER.lock().unwrap_or_else(|p| p.into_inner());
        let Some(slot) = RANGES
            .iter()
            .position(|(s, _)| s.load(Ordering::Relaxed) == 0)
        else {
            // SAFETY: the range mapped just above, not handed out to anyone.
            unsafe { libc::munmap(at, len) };
            return Err(KvError::new(
                KV_EINVAL,
                format!("KV_OPEN_TRAP: at most {SLOTS} trapped pools can be open at once"),
            ));
        };
        RANGES[slot].1.store(len, Ordering::SeqCst);
        RANGES[slot].0.store(start, Ordering::SeqCst);
        Ok(Staging { start, len, slot })
    }

    /// The first address of the range.
    pub(crate) fn start(&self) -> usize {
        self.start
    }

    /// The bytes of the range.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        {
            let _held = REGISTER.lock().unwrap_or_else(|p| p.into_inner());
            RANGES[self.slot].0.store(0, Ordering::SeqCst);
            RANGES[self.slot].1.store(0, Ordering::SeqCst);
        }
        // SAFETY: the range `reserve` mapped; only integers derived from it were handed out,
        // and nothing in the process can have accessed it (PROT_NONE).
        unsafe { libc::munmap(ptr::with_exposed_provenance_mut(self.start), self.len) };
    }
}

/// Install the SIGSEGV handler, once per process; later calls return the first outcome.
fn install() -> Result<(), KvError> {
    INSTALLED
        .get_or_init(|| {
            // SAFETY: a zeroed sigaction is a valid out-parameter; a null new action only reads
            // the current disposition.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: as above; `old` lives for the call.
            if unsafe { libc::sigaction(libc::SIGSEGV, ptr::null(), &mut old) } != 0 {
                return Err(format!(
                    "reading the SIGSEGV disposition: {}",
                    std::io::Error::last_os_error()
                ));
            }
            let _ = PREVIOUS.set((old.sa_sigaction, old.sa_flags));
            // SAFETY: a zeroed sigaction is a valid starting point (no flags, empty mask).
            let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
            action.sa_sigaction = on_sigsegv as extern "C" fn(_, _, _) as usize;
            // SA_ONSTACK: use the thread's alternate signal stack if it has one.
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            // SAFETY: installs `on_sigsegv`, async-signal-safe, with the SA_SIGINFO signature.
            if unsafe { libc::sigaction(libc::SIGSEGV, &action, ptr::null_mut()) } != 0 {
                return Err(format!(
                    "installing the SIGSEGV handler: {}",
                    std::io::Error::last_os_error()
                ));
            }
            Ok(())
        })
        .clone()
        .map_err(|e| KvError::new(KV_EIO, format!("KV_OPEN_TRAP: {e}")))
}

/// The region offset of `addr` if it lies in a registered staging range.
fn staged_offset(addr: usize) -> Option<usize> {
    RANGES.iter().find_map(|(s, l)| {
        let start = s.load(Ordering::SeqCst);
        let len = l.load(Ordering::SeqCst);
        (start != 0 && addr.wrapping_sub(start) < len).then(|| addr - start)
    })
}

/// `v` in hexadecimal with a `0x` prefix, into `buf`; returns the bytes used.
fn hex(v: usize, buf: &mut [u8; 18]) -> usize {
    buf[0] = b'0';
    buf[1] = b'x';
    let digits = (usize::BITS - v.leading_zeros()).div_ceil(4).max(1) as usize;
    for i in 0..digits {
        let nibble = (v >> (4 * (digits - 1 - i))) & 0xf;
        buf[2 + i] = b"0123456789abcdef"[nibble];
    }
    2 + digits
}

/// Write `bytes` to standard error with write(2) (async-signal-safe; errors are ignored).
fn write_stderr(bytes: &[u8]) {
    let mut rest = bytes;
    while !rest.is_empty() {
        // SAFETY: `rest` is a live byte slice; write(2) only reads it.
        let n = unsafe { libc::write(2, rest.as_ptr().cast::<c_void>(), rest.len()) };
        if n <= 0 {
            return;
        }
        rest = &rest[n as usize..];
    }
}

/// Restore the default SIGSEGV action (async-signal-safe).
fn default_action() {
    // SAFETY: a zeroed sigaction is SIG_DFL with no flags and an empty mask; sigaction is
    // async-signal-safe.
    unsafe {
        let default: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGSEGV, &default, ptr::null_mut());
    }
}

/// The SIGSEGV handler. Async-signal-safe: atomics, write(2), sigaction, raise.
///
/// Not exported (no `no_mangle`): `tests/header.rs` knows it as the one `extern "C" fn` that
/// is not part of `kavach.h`.
extern "C" fn on_sigsegv(signal: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler; for SIGSEGV si_addr
    // is the faulting address.
    let addr = unsafe { (*info).si_addr() }.addr();
    if let Some(off) = staged_offset(addr) {
        let mut a = [0u8; 18];
        let mut o = [0u8; 18];
        let na = hex(addr, &mut a);
        let no = hex(off, &mut o);
        write_stderr(b"kavach: load or store at ");
        write_stderr(&a[..na]);
        write_stderr(b" (pool offset ");
        write_stderr(&o[..no]);
        write_stderr(
            b") in the staging range of a pool opened with KV_OPEN_TRAP: the persistent memory \
              of a trapped pool is read and written only with kv_tx_read and kv_tx_write (inside \
              a transaction to change it); addresses from kv_direct must not be dereferenced\n",
        );
        default_action();
        // The signal is blocked while its handler runs: the re-raised one is delivered, with the
        // default action (termination), as soon as the handler returns.
        // SAFETY: raise is async-signal-safe.
        unsafe { libc::raise(libc::SIGSEGV) };
        return;
    }
    chain(signal, info, context);
}

/// Pass a fault that is not ours to the disposition the handler replaced.
fn chain(signal: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    let (handler, flags) = PREVIOUS.get().copied().unwrap_or((libc::SIG_DFL, 0));
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // Returning re-executes the faulting access, which now kills the process as usual.
        default_action();
        return;
    }
    if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: installed with SA_SIGINFO, so `handler` is a three-argument handler.
        let previous: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
            unsafe { std::mem::transmute(handler) };
        previous(signal, info, context);
    } else {
        // SAFETY: without SA_SIGINFO the handler takes the signal number only.
        let previous: extern "C" fn(c_int) = unsafe { std::mem::transmute(handler) };
        previous(signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_formats_addresses() {
        let mut b = [0u8; 18];
        let n = hex(0, &mut b);
        assert_eq!(&b[..n], b"0x0");
        let n = hex(0x7f12_3456_abcd, &mut b);
        assert_eq!(&b[..n], b"0x7f123456abcd");
        let n = hex(usize::MAX, &mut b);
        assert_eq!(&b[..n], b"0xffffffffffffffff");
    }

    #[test]
    fn ranges_are_registered_and_released() {
        let s = Staging::reserve(1 << 20).expect("reserve");
        assert_eq!(staged_offset(s.start()), Some(0));
        assert_eq!(staged_offset(s.start() + 4096), Some(4096));
        assert_eq!(staged_offset(s.start() + s.len()), None);
        let start = s.start();
        drop(s);
        assert_eq!(staged_offset(start), None);
        assert!(Staging::reserve(0).is_err());
    }
}
