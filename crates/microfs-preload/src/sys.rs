//! The few raw libc services the shim needs for itself: finding the real functions behind its
//! own symbols (`dlsym(RTLD_NEXT)`), `errno`, the placeholder descriptors that reserve our fd
//! numbers, the real working directory and the umask.

use std::ffi::{CStr, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The address of the next definition of `name` after this library (libc's, normally), or
/// null. `name` must end in a NUL byte.
pub(crate) fn next_symbol(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym only reads the NUL-terminated name; RTLD_NEXT is a valid pseudo-handle.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) }
}

/// A cache for one looked-up symbol address (0 = not looked up yet, 1 = not found).
#[derive(Debug)]
pub(crate) struct Sym(AtomicUsize);

impl Sym {
    pub(crate) const fn new() -> Sym {
        Sym(AtomicUsize::new(0))
    }
    /// The address of the real `name`, looked up once; None when libc has none.
    pub(crate) fn get(&self, name: &CStr) -> Option<usize> {
        let mut p = self.0.load(Ordering::Relaxed);
        if p == 0 {
            let found = next_symbol(name) as usize;
            p = if found == 0 { 1 } else { found };
            self.0.store(p, Ordering::Relaxed);
        }
        (p != 1).then_some(p)
    }
}

/// The real definition of `name` as a function pointer of type `F` (what the MPI wrappers use
/// to reach `PMPI_*` and the libc functions the shim overrides).
///
/// # Safety
/// `F` must be a function-pointer type whose signature is the C signature of `name`.
#[allow(dead_code)] // used by the MPI wrappers
pub(crate) unsafe fn real<F: Copy>(name: &CStr) -> Option<F> {
    assert_eq!(
        size_of::<F>(),
        size_of::<usize>(),
        "real::<F>: F must be a function pointer"
    );
    let p = next_symbol(name);
    if p.is_null() {
        return None;
    }
    // SAFETY: F is a function pointer of the symbol's signature (the caller's promise) and has
    // the size of a pointer (checked above); p is that function's non-null address.
    Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

pub(crate) fn set_errno(e: i32) {
    // SAFETY: __errno_location returns this thread's errno slot, always valid to write.
    unsafe { *libc::__errno_location() = e }
}

pub(crate) fn errno() -> i32 {
    // SAFETY: as in set_errno, the slot is valid to read.
    unsafe { *libc::__errno_location() }
}

static OPEN: Sym = Sym::new();
static CLOSE: Sym = Sym::new();
static DUP3: Sym = Sym::new();
static FCNTL: Sym = Sym::new();
static GETCWD: Sym = Sym::new();

type OpenFn = unsafe extern "C" fn(*const libc::c_char, libc::c_int, ...) -> libc::c_int;
type FcntlFn = unsafe extern "C" fn(libc::c_int, libc::c_int, ...) -> libc::c_int;

/// A new kernel descriptor that reserves a number for one of our open files: an `O_PATH`
/// descriptor of /dev/null. Calls that reach the kernel on it fail with EBADF (read, write,
/// ioctl, fchmod, fsetxattr, mmap) instead of touching anything.
pub(crate) fn placeholder(cloexec: bool) -> Result<i32, i32> {
    let Some(p) = OPEN.get(c"open") else {
        return Err(libc::ENOSYS);
    };
    let flags = libc::O_PATH | if cloexec { libc::O_CLOEXEC } else { 0 };
    // SAFETY: p is libc's open (variadic, declared so); the path is a NUL-terminated literal.
    let fd = unsafe {
        let f: OpenFn = std::mem::transmute::<usize, OpenFn>(p);
        f(c"/dev/null".as_ptr(), flags, 0 as libc::c_uint)
    };
    if fd < 0 { Err(errno()) } else { Ok(fd) }
}

/// A copy of placeholder `fd` at the lowest free number >= `min` (F_DUPFD semantics).
pub(crate) fn dup_from(fd: i32, min: i32, cloexec: bool) -> Result<i32, i32> {
    let Some(p) = FCNTL.get(c"fcntl") else {
        return Err(libc::ENOSYS);
    };
    let cmd = if cloexec {
        libc::F_DUPFD_CLOEXEC
    } else {
        libc::F_DUPFD
    };
    // SAFETY: p is libc's fcntl; F_DUPFD takes an int third argument.
    let r = unsafe {
        let f: FcntlFn = std::mem::transmute::<usize, FcntlFn>(p);
        f(fd, cmd, min)
    };
    if r < 0 { Err(errno()) } else { Ok(r) }
}

/// Sets or clears FD_CLOEXEC on a kernel descriptor.
pub(crate) fn set_cloexec(fd: i32, on: bool) {
    if let Some(p) = FCNTL.get(c"fcntl") {
        // SAFETY: p is libc's fcntl; F_SETFD takes an int third argument.
        unsafe {
            let f: FcntlFn = std::mem::transmute::<usize, FcntlFn>(p);
            f(fd, libc::F_SETFD, if on { libc::FD_CLOEXEC } else { 0 });
        }
    }
}

/// Closes a kernel descriptor with libc's close.
pub(crate) fn real_close(fd: i32) -> i32 {
    let Some(p) = CLOSE.get(c"close") else {
        return -1;
    };
    // SAFETY: p is libc's close(int).
    unsafe {
        let f = std::mem::transmute::<usize, unsafe extern "C" fn(i32) -> i32>(p);
        f(fd)
    }
}

/// dup3 with libc (flags 0 or O_CLOEXEC).
pub(crate) fn real_dup3(old: i32, new: i32, flags: i32) -> Result<i32, i32> {
    let Some(p) = DUP3.get(c"dup3") else {
        return Err(libc::ENOSYS);
    };
    // SAFETY: p is libc's dup3(int, int, int).
    let r = unsafe {
        let f = std::mem::transmute::<usize, unsafe extern "C" fn(i32, i32, i32) -> i32>(p);
        f(old, new, flags)
    };
    if r < 0 { Err(errno()) } else { Ok(r) }
}

/// The kernel's working directory of this process.
pub(crate) fn real_getcwd() -> Option<String> {
    let p = GETCWD.get(c"getcwd")?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: p is libc's getcwd; buf is writable for its whole length.
    let r = unsafe {
        let f = std::mem::transmute::<
            usize,
            unsafe extern "C" fn(*mut libc::c_char, usize) -> *mut libc::c_char,
        >(p);
        f(buf.as_mut_ptr().cast(), buf.len())
    };
    if r.is_null() {
        return None;
    }
    let n = buf.iter().position(|&b| b == 0)?;
    buf.truncate(n);
    String::from_utf8(buf).ok()
}

/// The process's umask (read by setting and restoring it; another thread changing the umask at
/// the same moment could be undone).
pub(crate) fn umask() -> u32 {
    // SAFETY: umask has no memory effects.
    unsafe {
        let old = libc::umask(0o022);
        libc::umask(old);
        old
    }
}

pub(crate) fn euid_egid() -> (u32, u32) {
    // SAFETY: geteuid and getegid cannot fail and touch no memory of ours.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// Writes a line to standard error with libc's write (never through the shim).
pub(crate) fn warn(msg: &str) {
    static WRITE: Sym = Sym::new();
    let line = format!("kavach-cr: {msg}\n");
    if let Some(p) = WRITE.get(c"write") {
        // SAFETY: p is libc's write; the buffer is valid for its length.
        unsafe {
            let f = std::mem::transmute::<
                usize,
                unsafe extern "C" fn(i32, *const c_void, usize) -> isize,
            >(p);
            f(2, line.as_ptr().cast(), line.len());
        }
    }
}

/// setenv(3) on this process's environment (other threads reading it at the same moment is the
/// usual hazard of setenv; the shim calls it only from chdir).
pub(crate) fn setenv(key: &CStr, value: &CStr) {
    // SAFETY: both are NUL-terminated strings; setenv copies them.
    unsafe { libc::setenv(key.as_ptr(), value.as_ptr(), 1) };
}

/// unsetenv(3), with the same hazard.
pub(crate) fn unsetenv(key: &CStr) {
    // SAFETY: a NUL-terminated name.
    unsafe { libc::unsetenv(key.as_ptr()) };
}

/// Registers `prepare` to run in the parent before every fork() (pthread_atfork).
/// Registers `f` to run at a normal process exit (`exit` or a return from `main`), before
/// glibc flushes and closes its streams.
pub(crate) fn at_exit(f: extern "C" fn()) {
    // SAFETY: f is a plain function that lives as long as the library (never unloaded).
    unsafe { libc::atexit(f) };
}

/// Flushes every stdio stream of the process (`fflush(NULL)`).
pub(crate) fn flush_all_streams() {
    // SAFETY: fflush with a null stream flushes all open output streams; no pointer is kept.
    unsafe { libc::fflush(std::ptr::null_mut()) };
}

pub(crate) fn at_fork(prepare: extern "C" fn()) {
    // SAFETY: prepare is a plain function that lives as long as the library.
    unsafe { libc::pthread_atfork(Some(prepare), None, None) };
}
