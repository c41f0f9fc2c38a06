//! The exported C functions. Each one decides from its path (resolved against the working
//! directory or its dirfd), descriptor, `DIR*` or `FILE*` whether the call is ours; ours go to
//! [`crate::core`], everything else to the next definition (libc's) found with
//! `dlsym(RTLD_NEXT)`.
//!
//! Variadic functions: stable Rust cannot define a C-variadic function, so `open`, `openat`,
//! `fcntl` and their variants are defined with the fixed x86-64 System V argument list, the
//! optional argument taken as one more integer register argument (`mode` in the third/fourth
//! register, `fcntl`'s `arg` in the third). A caller passing fewer arguments leaves garbage in
//! that register; we read it only when O_CREAT/O_TMPFILE is set or the fcntl command takes an
//! argument, as libc does. This is correct on x86-64 (and aarch64 Linux) only.
//!
//! Reentrancy: the shim's own code (Rust std, the device IO of microfs) calls `open64`,
//! `pread64` ... which resolve to these symbols. A thread-local flag is set while the shim
//! works; any call made while it is set goes straight to libc. No panic crosses into C: each
//! entry runs under `catch_unwind` and a panic becomes EIO.

use crate::core::{self, Guard, Loc, R, Target, busy};
use crate::sys::{self, Sym};
use libc::{c_char, c_int, c_uint, c_void, mode_t, off_t, size_t, ssize_t};
use std::collections::BTreeSet;
use std::ffi::{CStr, CString};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, OnceLock};

/// What an entry decided: the kernel's (with a rewritten path, perhaps) or done by us.
enum Go<T> {
    Kernel(Option<CString>),
    Done(R<T>),
}

/// Runs `f` inside the shim (guard set, panics caught).
fn run<T, F: FnOnce() -> R<Go<T>>>(f: F) -> Go<T> {
    if busy() {
        return Go::Kernel(None);
    }
    let _g = Guard::enter();
    let go = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(g)) => g,
        Ok(Err(e)) => Go::Done(Err(e)),
        Err(_) => Go::Done(Err(libc::EIO)),
    };
    if matches!(go, Go::Done(_)) {
        trace(std::any::type_name::<F>());
    }
    go
}

/// With KAVACH_CR_TRACE set, the first call of each entry that the shim served (not passed to
/// libc) is named on standard error: which calls a program needs.
pub(crate) fn trace(closure: &'static str) {
    static ON: OnceLock<bool> = OnceLock::new();
    static SEEN: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    if !*ON.get_or_init(|| std::env::var_os("KAVACH_CR_TRACE").is_some()) {
        return;
    }
    if SEEN.lock().is_ok_and(|mut s| s.insert(closure)) {
        sys::warn(&format!("served {closure}"));
    }
}

/// Runs `op` on the namespace path when `path` (relative to `dirfd`) is ours.
fn on_path<T>(dirfd: c_int, path: Option<&[u8]>, op: impl FnOnce(&str) -> R<T>) -> Go<T> {
    let Some(path) = path else {
        return Go::Kernel(None);
    };
    if !path.starts_with(b"/") && dirfd != libc::AT_FDCWD && !core::is_ours(dirfd) {
        return Go::Kernel(None);
    }
    run(|| match core::locate(dirfd, path)? {
        Loc::Kernel(sub) => Ok(Go::Kernel(sub)),
        Loc::Ours(rel) => Ok(Go::Done(op(&rel))),
    })
}

/// Runs `op` when `fd` is ours.
fn on_fd<T>(fd: c_int, op: impl FnOnce() -> R<T>) -> Go<T> {
    if !core::is_ours(fd) {
        return Go::Kernel(None);
    }
    run(|| Ok(Go::Done(op())))
}

/// The bytes of a C string, None for null.
///
/// # Safety
/// `p` is null or a NUL-terminated string valid for the call.
unsafe fn cstr<'a>(p: *const c_char) -> Option<&'a [u8]> {
    if p.is_null() {
        None
    } else {
        // SAFETY: non-null and NUL-terminated (the caller's promise).
        Some(unsafe { CStr::from_ptr(p) }.to_bytes())
    }
}

fn sub_or(p: *const c_char, sub: &Option<CString>) -> *const c_char {
    sub.as_ref().map_or(p, |c| c.as_ptr())
}

fn ret_int(r: R<c_int>) -> c_int {
    r.unwrap_or_else(|e| {
        sys::set_errno(e);
        -1
    })
}

fn ret0(r: R<()>) -> c_int {
    ret_int(r.map(|_| 0))
}

fn ret_size(r: R<usize>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => {
            sys::set_errno(e);
            -1
        }
    }
}

/// The real (next) definition of a function, as a function pointer of the given type.
macro_rules! real {
    ($name:literal, $ty:ty) => {{
        static S: Sym = Sym::new();
        let name = CStr::from_bytes_with_nul(concat!($name, "\0").as_bytes()).expect("literal");
        match S.get(name) {
            // SAFETY: the symbol is libc's function of this name, whose C signature is $ty.
            Some(p) => unsafe { std::mem::transmute::<usize, $ty>(p) },
            None => {
                sys::warn(concat!("libc has no ", $name));
                std::process::abort()
            }
        }
    }};
}

type OpenFn = unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int;
type OpenatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, ...) -> c_int;
type FcntlFn = unsafe extern "C" fn(c_int, c_int, ...) -> c_int;

fn needs_mode(flags: c_int) -> bool {
    flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE
}

// ---------------------------------------------------------------------------------------------
// open and friends

fn do_openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    let mode = if needs_mode(flags) { mode } else { 0 };
    // SAFETY: path is the caller's C string (or null).
    let p = unsafe { cstr(path) };
    match on_path(dirfd, p, |rel| core::open(rel, flags, mode)) {
        Go::Kernel(sub) => {
            let f = real!("openat", OpenatFn);
            // SAFETY: libc's openat with the caller's arguments (mode as an unsigned int).
            unsafe { f(dirfd, sub_or(path, &sub), flags, mode as c_uint) }
        }
        Go::Done(r) => ret_int(r),
    }
}

/// `open(path, flags, ...)`: see the module comment on variadic arguments.
///
/// # Safety
/// C's contract for open.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    if busy() {
        let f = real!("open", OpenFn);
        // SAFETY: libc's open with the caller's arguments.
        return unsafe {
            f(
                path,
                flags,
                if needs_mode(flags) { mode } else { 0 } as c_uint,
            )
        };
    }
    do_openat(libc::AT_FDCWD, path, flags, mode)
}

/// # Safety
/// C's contract for open64.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: same contract.
    unsafe { open(path, flags, mode) }
}

/// # Safety
/// C's contract for openat.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    do_openat(dirfd, path, flags, mode)
}

/// # Safety
/// C's contract for openat64.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    do_openat(dirfd, path, flags, mode)
}

/// # Safety
/// C's contract for __open_2 (open without a mode, from _FORTIFY_SOURCE).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    do_openat(libc::AT_FDCWD, path, flags & !libc::O_CREAT, 0)
}

/// # Safety
/// C's contract for __open64_2.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    do_openat(libc::AT_FDCWD, path, flags & !libc::O_CREAT, 0)
}

/// # Safety
/// C's contract for __openat_2.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    do_openat(dirfd, path, flags & !libc::O_CREAT, 0)
}

/// # Safety
/// C's contract for __openat64_2.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    do_openat(dirfd, path, flags & !libc::O_CREAT, 0)
}

/// # Safety
/// C's contract for creat.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    do_openat(
        libc::AT_FDCWD,
        path,
        libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
        mode,
    )
}

/// # Safety
/// C's contract for creat64.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    do_openat(
        libc::AT_FDCWD,
        path,
        libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
        mode,
    )
}

/// # Safety
/// C's contract for close.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if core::is_ours(fd) && !busy() {
        let _g = Guard::enter();
        trace("close");
        let _ = catch_unwind(|| {
            core::file_forget_fd(fd);
            core::forget(fd)
        });
    }
    let f = real!("close", unsafe extern "C" fn(c_int) -> c_int);
    // SAFETY: libc's close; for our descriptors it closes the placeholder.
    unsafe { f(fd) }
}

// ---------------------------------------------------------------------------------------------
// data

/// # Safety
/// C's contract for read.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    match on_fd(fd, || {
        // SAFETY: the caller gives n writable bytes at buf.
        let b = unsafe { slice_mut(buf, n) };
        core::read(fd, b, None)
    }) {
        Go::Kernel(_) => {
            let f = real!(
                "read",
                unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t
            );
            // SAFETY: libc's read with the caller's arguments.
            unsafe { f(fd, buf, n) }
        }
        Go::Done(r) => ret_size(r),
    }
}

/// # Safety
/// `p` is valid for `n` bytes of writes (or n is 0).
unsafe fn slice_mut<'a>(p: *mut c_void, n: usize) -> &'a mut [u8] {
    if n == 0 || p.is_null() {
        &mut []
    } else {
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(p.cast(), n) }
    }
}

/// # Safety
/// `p` is valid for `n` bytes of reads (or n is 0).
unsafe fn slice<'a>(p: *const c_void, n: usize) -> &'a [u8] {
    if n == 0 || p.is_null() {
        &[]
    } else {
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts(p.cast(), n) }
    }
}

/// # Safety
/// C's contract for write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    match on_fd(fd, || {
        // SAFETY: the caller gives n readable bytes at buf.
        let b = unsafe { slice(buf, n) };
        core::write(fd, b, None)
    }) {
        Go::Kernel(_) => {
            let f = real!(
                "write",
                unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t
            );
            // SAFETY: libc's write with the caller's arguments.
            unsafe { f(fd, buf, n) }
        }
        Go::Done(r) => ret_size(r),
    }
}

fn do_pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    match on_fd(fd, || {
        // SAFETY: the caller gives n writable bytes at buf.
        let b = unsafe { slice_mut(buf, n) };
        core::read(fd, b, Some(off))
    }) {
        Go::Kernel(_) => {
            let f = real!(
                "pread",
                unsafe extern "C" fn(c_int, *mut c_void, size_t, off_t) -> ssize_t
            );
            // SAFETY: libc's pread with the caller's arguments.
            unsafe { f(fd, buf, n, off) }
        }
        Go::Done(r) => ret_size(r),
    }
}

fn do_pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    match on_fd(fd, || {
        // SAFETY: the caller gives n readable bytes at buf.
        let b = unsafe { slice(buf, n) };
        core::write(fd, b, Some(off))
    }) {
        Go::Kernel(_) => {
            let f = real!(
                "pwrite",
                unsafe extern "C" fn(c_int, *const c_void, size_t, off_t) -> ssize_t
            );
            // SAFETY: libc's pwrite with the caller's arguments.
            unsafe { f(fd, buf, n, off) }
        }
        Go::Done(r) => ret_size(r),
    }
}

/// # Safety
/// C's contract for pread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    do_pread(fd, buf, n, off)
}

/// # Safety
/// C's contract for pread64.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    do_pread(fd, buf, n, off)
}

/// # Safety
/// C's contract for pwrite.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    do_pwrite(fd, buf, n, off)
}

/// # Safety
/// C's contract for pwrite64.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    do_pwrite(fd, buf, n, off)
}

/// The iovec array as slices.
///
/// # Safety
/// `iov` points to `cnt` iovecs whose buffers are valid.
unsafe fn iovecs<'a>(iov: *const libc::iovec, cnt: c_int) -> R<&'a [libc::iovec]> {
    if !(0..=libc::UIO_MAXIOV).contains(&cnt) {
        return Err(libc::EINVAL);
    }
    if cnt == 0 || iov.is_null() {
        return Ok(&[]);
    }
    // SAFETY: the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts(iov, cnt as usize) })
}

fn do_readv(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: Option<off_t>) -> R<usize> {
    // SAFETY: the caller's iovecs.
    let v = unsafe { iovecs(iov, cnt)? };
    let total: usize = v.iter().map(|x| x.iov_len).sum();
    let mut tmp = vec![0u8; total];
    let n = core::read(fd, &mut tmp, off)?;
    let mut done = 0;
    for x in v {
        if done >= n {
            break;
        }
        let k = x.iov_len.min(n - done);
        // SAFETY: each iovec buffer is writable for its length (the caller's promise).
        let dst = unsafe { slice_mut(x.iov_base, k) };
        dst.copy_from_slice(&tmp[done..done + k]);
        done += k;
    }
    Ok(n)
}

fn do_writev(fd: c_int, iov: *const libc::iovec, cnt: c_int, off: Option<off_t>) -> R<usize> {
    // SAFETY: the caller's iovecs.
    let v = unsafe { iovecs(iov, cnt)? };
    let mut tmp = Vec::new();
    for x in v {
        // SAFETY: each iovec buffer is readable for its length.
        tmp.extend_from_slice(unsafe { slice(x.iov_base, x.iov_len) });
    }
    core::write(fd, &tmp, off)
}

type VecFn = unsafe extern "C" fn(c_int, *const libc::iovec, c_int) -> ssize_t;
type PVecFn = unsafe extern "C" fn(c_int, *const libc::iovec, c_int, off_t) -> ssize_t;

/// # Safety
/// C's contract for readv.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
    match on_fd(fd, || do_readv(fd, iov, cnt, None)) {
        Go::Kernel(_) => {
            let f = real!("readv", VecFn);
            // SAFETY: libc's readv with the caller's arguments.
            unsafe { f(fd, iov, cnt) }
        }
        Go::Done(r) => ret_size(r),
    }
}

/// # Safety
/// C's contract for writev.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
    match on_fd(fd, || do_writev(fd, iov, cnt, None)) {
        Go::Kernel(_) => {
            let f = real!("writev", VecFn);
            // SAFETY: libc's writev with the caller's arguments.
            unsafe { f(fd, iov, cnt) }
        }
        Go::Done(r) => ret_size(r),
    }
}

/// # Safety
/// C's contract for preadv.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn preadv(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off_t,
) -> ssize_t {
    match on_fd(fd, || do_readv(fd, iov, cnt, Some(off))) {
        Go::Kernel(_) => {
            let f = real!("preadv", PVecFn);
            // SAFETY: libc's preadv with the caller's arguments.
            unsafe { f(fd, iov, cnt, off) }
        }
        Go::Done(r) => ret_size(r),
    }
}

/// # Safety
/// C's contract for preadv64.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn preadv64(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off_t,
) -> ssize_t {
    // SAFETY: same contract.
    unsafe { preadv(fd, iov, cnt, off) }
}

/// # Safety
/// C's contract for pwritev.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwritev(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off_t,
) -> ssize_t {
    match on_fd(fd, || do_writev(fd, iov, cnt, Some(off))) {
        Go::Kernel(_) => {
            let f = real!("pwritev", PVecFn);
            // SAFETY: libc's pwritev with the caller's arguments.
            unsafe { f(fd, iov, cnt, off) }
        }
        Go::Done(r) => ret_size(r),
    }
}

/// # Safety
/// C's contract for pwritev64.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwritev64(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: off_t,
) -> ssize_t {
    // SAFETY: same contract.
    unsafe { pwritev(fd, iov, cnt, off) }
}

fn do_lseek(fd: c_int, off: off_t, whence: c_int) -> off_t {
    match on_fd(fd, || core::seek(fd, off, whence)) {
        Go::Kernel(_) => {
            let f = real!("lseek", unsafe extern "C" fn(c_int, off_t, c_int) -> off_t);
            // SAFETY: libc's lseek with the caller's arguments.
            unsafe { f(fd, off, whence) }
        }
        Go::Done(Ok(o)) => o,
        Go::Done(Err(e)) => {
            sys::set_errno(e);
            -1
        }
    }
}

/// # Safety
/// C's contract for lseek.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lseek(fd: c_int, off: off_t, whence: c_int) -> off_t {
    do_lseek(fd, off, whence)
}

/// # Safety
/// C's contract for lseek64.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lseek64(fd: c_int, off: off_t, whence: c_int) -> off_t {
    do_lseek(fd, off, whence)
}

macro_rules! fd_only {
    ($(#[$m:meta])* $name:ident, $lit:literal, ($($a:ident : $t:ty),*), $op:expr) => {
        $(#[$m])*
        /// # Safety
        /// C's contract for this function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int $(, $a: $t)*) -> c_int {
            match on_fd(fd, || $op(fd $(, $a)*)) {
                Go::Kernel(_) => {
                    let f = real!($lit, unsafe extern "C" fn(c_int $(, $t)*) -> c_int);
                    // SAFETY: libc's function with the caller's arguments.
                    unsafe { f(fd $(, $a)*) }
                }
                Go::Done(r) => ret0(r),
            }
        }
    };
}

fd_only!(fsync, "fsync", (), core::fsync);
fd_only!(fdatasync, "fdatasync", (), core::fsync);
fd_only!(syncfs, "syncfs", (), |fd| core::fstat(fd).map(|_| ()));
fd_only!(ftruncate, "ftruncate", (len: off_t), core::ftruncate);
fd_only!(ftruncate64, "ftruncate", (len: off_t), core::ftruncate);
fd_only!(fchmod, "fchmod", (mode: mode_t), |fd, mode| core::chmod(Target::Fd(fd), mode));
fd_only!(fchown, "fchown", (uid: libc::uid_t, gid: libc::gid_t), |fd, _u, _g| core::chown(Target::Fd(fd)));
fd_only!(fallocate, "fallocate", (mode: c_int, off: off_t, len: off_t), core::allocate);
fd_only!(fallocate64, "fallocate", (mode: c_int, off: off_t, len: off_t), core::allocate);

/// posix_fadvise and posix_fallocate return the error number instead of setting errno.
macro_rules! fd_errnum {
    ($name:ident, $lit:literal, ($($a:ident : $t:ty),*), $op:expr) => {
        /// # Safety
        /// C's contract for this function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int $(, $a: $t)*) -> c_int {
            match on_fd(fd, || $op(fd $(, $a)*)) {
                Go::Kernel(_) => {
                    let f = real!($lit, unsafe extern "C" fn(c_int $(, $t)*) -> c_int);
                    // SAFETY: libc's function with the caller's arguments.
                    unsafe { f(fd $(, $a)*) }
                }
                Go::Done(Ok(())) => 0,
                Go::Done(Err(e)) => e,
            }
        }
    };
}

fn fadvise(fd: c_int, _off: off_t, len: off_t, advice: c_int) -> R<()> {
    let st = core::fstat(fd)?;
    if len < 0 || !(0..=5).contains(&advice) {
        return Err(libc::EINVAL);
    }
    let _ = st;
    Ok(())
}

fd_errnum!(posix_fadvise, "posix_fadvise", (off: off_t, len: off_t, advice: c_int), fadvise);
fd_errnum!(posix_fadvise64, "posix_fadvise", (off: off_t, len: off_t, advice: c_int), fadvise);
fd_errnum!(posix_fallocate, "posix_fallocate", (off: off_t, len: off_t), |fd, o, l| core::allocate(fd, 0, o, l));
fd_errnum!(posix_fallocate64, "posix_fallocate", (off: off_t, len: off_t), |fd, o, l| core::allocate(fd, 0, o, l));

/// copy_file_range with one of our descriptors: EXDEV (they are on different file systems as
/// far as the kernel knows), on which cp and cat fall back to read and write.
///
/// # Safety
/// C's contract for copy_file_range.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut i64,
    fd_out: c_int,
    off_out: *mut i64,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    if core::is_ours(fd_in) || core::is_ours(fd_out) {
        trace("copy_file_range");
        sys::set_errno(libc::EXDEV);
        return -1;
    }
    let f = real!(
        "copy_file_range",
        unsafe extern "C" fn(c_int, *mut i64, c_int, *mut i64, size_t, c_uint) -> ssize_t
    );
    // SAFETY: libc's copy_file_range with the caller's arguments.
    unsafe { f(fd_in, off_in, fd_out, off_out, len, flags) }
}

/// sendfile with one of our descriptors: EINVAL (as for an input that cannot be mapped), on
/// which callers fall back to read and write.
///
/// # Safety
/// C's contract for sendfile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile(
    out: c_int,
    inp: c_int,
    off: *mut off_t,
    count: size_t,
) -> ssize_t {
    if core::is_ours(out) || core::is_ours(inp) {
        trace("sendfile");
        sys::set_errno(libc::EINVAL);
        return -1;
    }
    let f = real!(
        "sendfile",
        unsafe extern "C" fn(c_int, c_int, *mut off_t, size_t) -> ssize_t
    );
    // SAFETY: libc's sendfile with the caller's arguments.
    unsafe { f(out, inp, off, count) }
}

/// # Safety
/// C's contract for sendfile64.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile64(
    out: c_int,
    inp: c_int,
    off: *mut off_t,
    count: size_t,
) -> ssize_t {
    // SAFETY: same contract.
    unsafe { sendfile(out, inp, off, count) }
}

// ---------------------------------------------------------------------------------------------
// stat

fn split_ns(ns: i64) -> (i64, i64) {
    (ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000))
}

fn type_bits(st: &microfs::Stat) -> u32 {
    if st.kind == microfs::Kind::Dir {
        libc::S_IFDIR
    } else {
        libc::S_IFREG
    }
}

fn blocks(size: u64) -> u64 {
    size.div_ceil(4096) * 8
}

fn fill_stat(st: &microfs::Stat, out: *mut libc::stat) -> R<()> {
    if out.is_null() {
        return Err(libc::EFAULT);
    }
    let dev = core::root().map_or(0, |r| r.dev);
    let (uid, gid) = sys::euid_egid();
    // SAFETY: struct stat is plain integers; all-zero is a valid value.
    let mut s: libc::stat = unsafe { std::mem::zeroed() };
    s.st_dev = dev;
    s.st_ino = st.ino;
    s.st_nlink = st.nlink as u64;
    s.st_mode = type_bits(st) | (st.mode & 0o7777);
    s.st_uid = uid;
    s.st_gid = gid;
    s.st_size = st.size as i64;
    s.st_blksize = 4096;
    s.st_blocks = blocks(st.size) as i64;
    (s.st_atime, s.st_atime_nsec) = split_ns(st.atime_ns);
    (s.st_mtime, s.st_mtime_nsec) = split_ns(st.mtime_ns);
    (s.st_ctime, s.st_ctime_nsec) = split_ns(st.ctime_ns);
    // SAFETY: out is the caller's non-null struct stat.
    unsafe { out.write(s) };
    Ok(())
}

fn fill_statx(st: &microfs::Stat, out: *mut libc::statx) -> R<()> {
    if out.is_null() {
        return Err(libc::EFAULT);
    }
    let dev = core::root().map_or(0, |r| r.dev);
    let (uid, gid) = sys::euid_egid();
    // SAFETY: struct statx is plain integers; all-zero is a valid value.
    let mut s: libc::statx = unsafe { std::mem::zeroed() };
    s.stx_mask = libc::STATX_BASIC_STATS;
    s.stx_blksize = 4096;
    s.stx_nlink = st.nlink;
    s.stx_uid = uid;
    s.stx_gid = gid;
    s.stx_mode = (type_bits(st) | (st.mode & 0o7777)) as u16;
    s.stx_ino = st.ino;
    s.stx_size = st.size;
    s.stx_blocks = blocks(st.size);
    let ts = |t: &mut libc::statx_timestamp, ns: i64| {
        let (sec, nsec) = split_ns(ns);
        t.tv_sec = sec;
        t.tv_nsec = nsec as u32;
    };
    ts(&mut s.stx_atime, st.atime_ns);
    ts(&mut s.stx_mtime, st.mtime_ns);
    ts(&mut s.stx_ctime, st.ctime_ns);
    s.stx_dev_major = libc::major(dev);
    s.stx_dev_minor = libc::minor(dev);
    // SAFETY: out is the caller's non-null struct statx.
    unsafe { out.write(s) };
    Ok(())
}

type StatFn = unsafe extern "C" fn(*const c_char, *mut libc::stat) -> c_int;

fn do_stat(name_lit: u8, path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: path is the caller's C string.
    let p = unsafe { cstr(path) };
    match on_path(libc::AT_FDCWD, p, |rel| fill_stat(&core::stat(rel)?, buf)) {
        Go::Kernel(sub) => {
            let f = if name_lit == b's' {
                real!("stat", StatFn)
            } else {
                real!("lstat", StatFn)
            };
            // SAFETY: libc's stat/lstat with the caller's arguments.
            unsafe { f(sub_or(path, &sub), buf) }
        }
        Go::Done(r) => ret0(r),
    }
}

/// # Safety
/// C's contract for stat.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn stat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    do_stat(b's', path, buf)
}

/// # Safety
/// C's contract for stat64.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn stat64(path: *const c_char, buf: *mut libc::stat) -> c_int {
    do_stat(b's', path, buf)
}

/// # Safety
/// C's contract for lstat (we have no symbolic links: as stat).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lstat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    do_stat(b'l', path, buf)
}

/// # Safety
/// C's contract for lstat64.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lstat64(path: *const c_char, buf: *mut libc::stat) -> c_int {
    do_stat(b'l', path, buf)
}

fn do_fstat(fd: c_int, buf: *mut libc::stat) -> c_int {
    match on_fd(fd, || fill_stat(&core::fstat(fd)?, buf)) {
        Go::Kernel(_) => {
            let f = real!(
                "fstat",
                unsafe extern "C" fn(c_int, *mut libc::stat) -> c_int
            );
            // SAFETY: libc's fstat with the caller's arguments.
            unsafe { f(fd, buf) }
        }
        Go::Done(r) => ret0(r),
    }
}

/// # Safety
/// C's contract for fstat.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fstat(fd: c_int, buf: *mut libc::stat) -> c_int {
    do_fstat(fd, buf)
}

/// # Safety
/// C's contract for fstat64.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fstat64(fd: c_int, buf: *mut libc::stat) -> c_int {
    do_fstat(fd, buf)
}

fn do_fstatat(dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int {
    // SAFETY: path is the caller's C string.
    let p = unsafe { cstr(path) };
    let go = if flags & libc::AT_EMPTY_PATH != 0 && p.is_some_and(|p| p.is_empty()) {
        on_fd(dirfd, || fill_stat(&core::fstat(dirfd)?, buf))
    } else {
        on_path(dirfd, p, |rel| fill_stat(&core::stat(rel)?, buf))
    };
    match go {
        Go::Kernel(sub) => {
            let f = real!(
                "fstatat",
                unsafe extern "C" fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int
            );
            let d = if sub.is_some() { libc::AT_FDCWD } else { dirfd };
            // SAFETY: libc's fstatat with the caller's arguments.
            unsafe { f(d, sub_or(path, &sub), buf, flags) }
        }
        Go::Done(r) => ret0(r),
    }
}

/// # Safety
/// C's contract for fstatat.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fstatat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    do_fstatat(dirfd, path, buf, flags)
}

/// # Safety
/// C's contract for fstatat64.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fstatat64(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    do_fstatat(dirfd, path, buf, flags)
}

/// # Safety
/// C's contract for newfstatat (glibc does not export it; defined for callers that use it).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn newfstatat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    do_fstatat(dirfd, path, buf, flags)
}

/// # Safety
/// C's contract for statx.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    buf: *mut libc::statx,
) -> c_int {
    // SAFETY: path is the caller's C string.
    let p = unsafe { cstr(path) };
    let go = if flags & libc::AT_EMPTY_PATH != 0 && p.is_some_and(|p| p.is_empty()) {
        on_fd(dirfd, || fill_statx(&core::fstat(dirfd)?, buf))
    } else {
        on_path(dirfd, p, |rel| fill_statx(&core::stat(rel)?, buf))
    };
    match go {
        Go::Kernel(sub) => {
            let f = real!(
                "statx",
                unsafe extern "C" fn(
                    c_int,
                    *const c_char,
                    c_int,
                    c_uint,
                    *mut libc::statx,
                ) -> c_int
            );
            let d = if sub.is_some() { libc::AT_FDCWD } else { dirfd };
            // SAFETY: libc's statx with the caller's arguments.
            unsafe { f(d, sub_or(path, &sub), flags, mask, buf) }
        }
        Go::Done(r) => ret0(r),
    }
}

// ---------------------------------------------------------------------------------------------
// names

/// A path call: ours -> `op`, else libc's `$lit` with the same arguments (the path rewritten
/// when the working directory is ours).
macro_rules! path_call {
    ($name:ident, $lit:literal, (path $(, $a:ident : $t:ty)*), $op:expr) => {
        /// # Safety
        /// C's contract for this function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char $(, $a: $t)*) -> c_int {
            // SAFETY: path is the caller's C string.
            let p = unsafe { cstr(path) };
            match on_path(libc::AT_FDCWD, p, |rel| $op(rel $(, $a)*)) {
                Go::Kernel(sub) => {
                    let f = real!($lit, unsafe extern "C" fn(*const c_char $(, $t)*) -> c_int);
                    // SAFETY: libc's function with the caller's arguments.
                    unsafe { f(sub_or(path, &sub) $(, $a)*) }
                }
                Go::Done(r) => ret0(r),
            }
        }
    };
}

/// The same for *at calls.
macro_rules! at_call {
    ($name:ident, $lit:literal, (dirfd, path $(, $a:ident : $t:ty)*), $op:expr) => {
        /// # Safety
        /// C's contract for this function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char $(, $a: $t)*) -> c_int {
            // SAFETY: path is the caller's C string.
            let p = unsafe { cstr(path) };
            match on_path(dirfd, p, |rel| $op(rel $(, $a)*)) {
                Go::Kernel(sub) => {
                    let f = real!($lit, unsafe extern "C" fn(c_int, *const c_char $(, $t)*) -> c_int);
                    let d = if sub.is_some() { libc::AT_FDCWD } else { dirfd };
                    // SAFETY: libc's function with the caller's arguments.
                    unsafe { f(d, sub_or(path, &sub) $(, $a)*) }
                }
                Go::Done(r) => ret0(r),
            }
        }
    };
}

path_call!(unlink, "unlink", (path), core::unlink);
path_call!(rmdir, "rmdir", (path), core::rmdir);
path_call!(mkdir, "mkdir", (path, mode: mode_t), core::mkdir);
path_call!(truncate, "truncate", (path, len: off_t), core::truncate);
path_call!(truncate64, "truncate", (path, len: off_t), core::truncate);
path_call!(access, "access", (path, mode: c_int), core::access);
path_call!(euidaccess, "euidaccess", (path, mode: c_int), core::access);
path_call!(eaccess, "eaccess", (path, mode: c_int), core::access);
path_call!(chmod, "chmod", (path, mode: mode_t), |rel, m| core::chmod(Target::Path(rel), m));
path_call!(chown, "chown", (path, uid: libc::uid_t, gid: libc::gid_t), |rel, _u, _g| core::chown(Target::Path(rel)));
path_call!(lchown, "lchown", (path, uid: libc::uid_t, gid: libc::gid_t), |rel, _u, _g| core::chown(Target::Path(rel)));

fn unlinkat_op(rel: &str, flags: c_int) -> R<()> {
    if flags & !libc::AT_REMOVEDIR != 0 {
        return Err(libc::EINVAL);
    }
    if flags & libc::AT_REMOVEDIR != 0 {
        core::rmdir(rel)
    } else {
        core::unlink(rel)
    }
}

at_call!(unlinkat, "unlinkat", (dirfd, path, flags: c_int), unlinkat_op);
at_call!(mkdirat, "mkdirat", (dirfd, path, mode: mode_t), core::mkdir);
at_call!(faccessat, "faccessat", (dirfd, path, mode: c_int, flags: c_int), |rel, m, _f| core::access(rel, m));
at_call!(fchmodat, "fchmodat", (dirfd, path, mode: mode_t, flags: c_int), |rel, m, _f| core::chmod(Target::Path(rel), m));
at_call!(
    fchownat,
    "fchownat",
    (dirfd, path, uid: libc::uid_t, gid: libc::gid_t, flags: c_int),
    |rel, _u, _g, _f| core::chown(Target::Path(rel))
);

// We have no links of either kind: EPERM for a new one in the namespace, EINVAL (not a
// symbolic link) for readlink.
fn no_link(_rel: &str) -> R<()> {
    Err(libc::EPERM)
}

/// # Safety
/// C's contract for symlink (the new name is the second argument).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn symlink(target: *const c_char, link: *const c_char) -> c_int {
    // SAFETY: link is the caller's C string.
    let p = unsafe { cstr(link) };
    match on_path(libc::AT_FDCWD, p, no_link) {
        Go::Kernel(sub) => {
            let f = real!(
                "symlink",
                unsafe extern "C" fn(*const c_char, *const c_char) -> c_int
            );
            // SAFETY: libc's symlink with the caller's arguments.
            unsafe { f(target, sub_or(link, &sub)) }
        }
        Go::Done(r) => ret0(r),
    }
}

/// # Safety
/// C's contract for symlinkat.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn symlinkat(
    target: *const c_char,
    dirfd: c_int,
    link: *const c_char,
) -> c_int {
    // SAFETY: link is the caller's C string.
    let p = unsafe { cstr(link) };
    match on_path(dirfd, p, no_link) {
        Go::Kernel(sub) => {
            let f = real!(
                "symlinkat",
                unsafe extern "C" fn(*const c_char, c_int, *const c_char) -> c_int
            );
            let d = if sub.is_some() { libc::AT_FDCWD } else { dirfd };
            // SAFETY: libc's symlinkat with the caller's arguments.
            unsafe { f(target, d, sub_or(link, &sub)) }
        }
        Go::Done(r) => ret0(r),
    }
}

/// # Safety
/// C's contract for readlink.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readlink(path: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t {
    // SAFETY: readlinkat with AT_FDCWD has the same contract.
    unsafe { readlinkat(libc::AT_FDCWD, path, buf, n) }
}

/// # Safety
/// C's contract for readlinkat.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readlinkat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    n: size_t,
) -> ssize_t {
    // SAFETY: path is the caller's C string.
    let p = unsafe { cstr(path) };
    match on_path(dirfd, p, |rel| {
        core::stat(rel).and(Err::<usize, i32>(libc::EINVAL))
    }) {
        Go::Kernel(sub) => {
            let f = real!(
                "readlinkat",
                unsafe extern "C" fn(c_int, *const c_char, *mut c_char, size_t) -> ssize_t
            );
            let d = if sub.is_some() { libc::AT_FDCWD } else { dirfd };
            // SAFETY: libc's readlinkat with the caller's arguments.
            unsafe { f(d, sub_or(path, &sub), buf, n) }
        }
        Go::Done(r) => ret_size(r),
    }
}

fn link_two(
    olddirfd: c_int,
    old: *const c_char,
    newdirfd: c_int,
    new: *const c_char,
    op: impl FnOnce(&str, &str) -> R<()>,
) -> Go<()> {
    // SAFETY: both are the caller's C strings.
    let (o, n) = unsafe { (cstr(old), cstr(new)) };
    let (Some(o), Some(n)) = (o, n) else {
        return Go::Kernel(None);
    };
    run(|| {
        let a = core::locate(olddirfd, o)?;
        let b = core::locate(newdirfd, n)?;
        match (a, b) {
            (Loc::Ours(a), Loc::Ours(b)) => Ok(Go::Done(op(&a, &b))),
            (Loc::Kernel(_), Loc::Kernel(_)) => Ok(Go::Kernel(None)),
            // One side ours, one the kernel's: different file systems.
            _ => Ok(Go::Done(Err(libc::EXDEV))),
        }
    })
}

/// Absolute forms of both paths when the working directory is ours (else the originals).
fn kernel_paths(
    olddirfd: c_int,
    old: *const c_char,
    newdirfd: c_int,
    new: *const c_char,
) -> (c_int, Option<CString>, c_int, Option<CString>) {
    let one = |d: c_int, p: *const c_char| {
        // SAFETY: the caller's C string.
        let b = unsafe { cstr(p) };
        match on_path::<()>(d, b, |_| Ok(())) {
            Go::Kernel(Some(s)) => (libc::AT_FDCWD, Some(s)),
            _ => (d, None),
        }
    };
    let (a, sa) = one(olddirfd, old);
    let (b, sb) = one(newdirfd, new);
    (a, sa, b, sb)
}

fn do_renameat2(
    olddirfd: c_int,
    old: *const c_char,
    newdirfd: c_int,
    new: *const c_char,
    flags: c_uint,
) -> c_int {
    let go = link_two(olddirfd, old, newdirfd, new, |a, b| {
        if flags & !libc::RENAME_NOREPLACE != 0 {
            return Err(libc::EINVAL);
        }
        core::rename(a, b, flags & libc::RENAME_NOREPLACE != 0)
    });
    match go {
        Go::Kernel(_) => {
            let (a, sa, b, sb) = kernel_paths(olddirfd, old, newdirfd, new);
            let f = real!(
                "renameat2",
                unsafe extern "C" fn(c_int, *const c_char, c_int, *const c_char, c_uint) -> c_int
            );
            // SAFETY: libc's renameat2 with the caller's arguments.
            unsafe { f(a, sub_or(old, &sa), b, sub_or(new, &sb), flags) }
        }
        Go::Done(r) => ret0(r),
    }
}

/// # Safety
/// C's contract for rename.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rename(old: *const c_char, new: *const c_char) -> c_int {
    do_renameat2(libc::AT_FDCWD, old, libc::AT_FDCWD, new, 0)
}

/// # Safety
/// C's contract for renameat.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn renameat(
    olddirfd: c_int,
    old: *const c_char,
    newdirfd: c_int,
    new: *const c_char,
) -> c_int {
    do_renameat2(olddirfd, old, newdirfd, new, 0)
}

/// # Safety
/// C's contract for renameat2.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn renameat2(
    olddirfd: c_int,
    old: *const c_char,
    newdirfd: c_int,
    new: *const c_char,
    flags: c_uint,
) -> c_int {
    do_renameat2(olddirfd, old, newdirfd, new, flags)
}

fn do_linkat(
    olddirfd: c_int,
    old: *const c_char,
    newdirfd: c_int,
    new: *const c_char,
    flags: c_int,
) -> c_int {
    match link_two(olddirfd, old, newdirfd, new, |_, _| Err(libc::EPERM)) {
        Go::Kernel(_) => {
            let (a, sa, b, sb) = kernel_paths(olddirfd, old, newdirfd, new);
            let f = real!(
                "linkat",
                unsafe extern "C" fn(c_int, *const c_char, c_int, *const c_char, c_int) -> c_int
            );
            // SAFETY: libc's linkat with the caller's arguments.
            unsafe { f(a, sub_or(old, &sa), b, sub_or(new, &sb), flags) }
        }
        Go::Done(r) => ret0(r),
    }
}

/// # Safety
/// C's contract for link (hard links are not supported in the namespace: EPERM).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn link(old: *const c_char, new: *const c_char) -> c_int {
    do_linkat(libc::AT_FDCWD, old, libc::AT_FDCWD, new, 0)
}

/// # Safety
/// C's contract for linkat.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn linkat(
    olddirfd: c_int,
    old: *const c_char,
    newdirfd: c_int,
    new: *const c_char,
    flags: c_int,
) -> c_int {
    do_linkat(olddirfd, old, newdirfd, new, flags)
}

// ---------------------------------------------------------------------------------------------
// extended attributes: the namespace has none (ls -l asks for ACLs and SELinux labels, cp -a
// and tar --xattrs copy them). Reads answer "no such attribute" / an empty list, writes
// "not supported", which is what callers expect of a file system without them.

fn no_xattr(rel: &str) -> R<usize> {
    core::stat(rel).and(Err(libc::ENODATA))
}

fn no_xattr_fd(fd: c_int) -> R<usize> {
    core::fstat(fd).and(Err(libc::ENODATA))
}

fn xattr_list(rel: &str) -> R<usize> {
    core::stat(rel).map(|_| 0)
}

fn xattr_list_fd(fd: c_int) -> R<usize> {
    core::fstat(fd).map(|_| 0)
}

fn xattr_unsupported(rel: &str) -> R<usize> {
    core::stat(rel).and(Err(libc::EOPNOTSUPP))
}

fn xattr_unsupported_fd(fd: c_int) -> R<usize> {
    core::fstat(fd).and(Err(libc::EOPNOTSUPP))
}

/// A path-based xattr call (ssize_t for get/list, int for set/remove; our results are 0 or -1).
macro_rules! xattr_path {
    ($name:ident, $lit:literal, ($($a:ident : $t:ty),*) -> $ret:ty, $op:expr) => {
        /// # Safety
        /// C's contract for this function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char $(, $a: $t)*) -> $ret {
            // SAFETY: path is the caller's C string.
            let p = unsafe { cstr(path) };
            match on_path(libc::AT_FDCWD, p, $op) {
                Go::Kernel(sub) => {
                    let f = real!($lit, unsafe extern "C" fn(*const c_char $(, $t)*) -> $ret);
                    // SAFETY: libc's function with the caller's arguments.
                    unsafe { f(sub_or(path, &sub) $(, $a)*) }
                }
                Go::Done(r) => ret_size(r) as $ret,
            }
        }
    };
}

/// A descriptor-based xattr call, the same way.
macro_rules! xattr_fd {
    ($name:ident, $lit:literal, ($($a:ident : $t:ty),*) -> $ret:ty, $op:expr) => {
        /// # Safety
        /// C's contract for this function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int $(, $a: $t)*) -> $ret {
            match on_fd(fd, || $op(fd)) {
                Go::Kernel(_) => {
                    let f = real!($lit, unsafe extern "C" fn(c_int $(, $t)*) -> $ret);
                    // SAFETY: libc's function with the caller's arguments.
                    unsafe { f(fd $(, $a)*) }
                }
                Go::Done(r) => ret_size(r) as $ret,
            }
        }
    };
}

type Name = *const c_char;
type Buf = *mut c_void;
type Val = *const c_void;

xattr_path!(getxattr, "getxattr", (name: Name, value: Buf, size: size_t) -> ssize_t, no_xattr);
xattr_path!(lgetxattr, "lgetxattr", (name: Name, value: Buf, size: size_t) -> ssize_t, no_xattr);
xattr_fd!(fgetxattr, "fgetxattr", (name: Name, value: Buf, size: size_t) -> ssize_t, no_xattr_fd);
xattr_path!(listxattr, "listxattr", (list: *mut c_char, size: size_t) -> ssize_t, xattr_list);
xattr_path!(llistxattr, "llistxattr", (list: *mut c_char, size: size_t) -> ssize_t, xattr_list);
xattr_fd!(flistxattr, "flistxattr", (list: *mut c_char, size: size_t) -> ssize_t, xattr_list_fd);
xattr_path!(setxattr, "setxattr", (name: Name, value: Val, size: size_t, flags: c_int) -> c_int, xattr_unsupported);
xattr_path!(lsetxattr, "lsetxattr", (name: Name, value: Val, size: size_t, flags: c_int) -> c_int, xattr_unsupported);
xattr_fd!(fsetxattr, "fsetxattr", (name: Name, value: Val, size: size_t, flags: c_int) -> c_int, xattr_unsupported_fd);
xattr_path!(removexattr, "removexattr", (name: Name) -> c_int, xattr_unsupported);
xattr_path!(lremovexattr, "lremovexattr", (name: Name) -> c_int, xattr_unsupported);
xattr_fd!(fremovexattr, "fremovexattr", (name: Name) -> c_int, xattr_unsupported_fd);

// ---------------------------------------------------------------------------------------------
// times

/// One time of utimensat: None = omit, Some(None) = now, Some(Some(ns)) = that time.
type TimeArg = Option<Option<i64>>;

/// Reads utimensat's times argument: (atime, mtime), each None = omit, Some(None) = now.
///
/// # Safety
/// `times` is null or points to two timespecs.
unsafe fn times_arg(times: *const libc::timespec) -> R<(TimeArg, TimeArg)> {
    if times.is_null() {
        return Ok((Some(None), Some(None)));
    }
    // SAFETY: two timespecs (the caller's promise).
    let t = unsafe { std::slice::from_raw_parts(times, 2) };
    let one = |ts: &libc::timespec| -> R<TimeArg> {
        match ts.tv_nsec {
            libc::UTIME_OMIT => Ok(None),
            libc::UTIME_NOW => Ok(Some(None)),
            n if (0..1_000_000_000).contains(&n) => Ok(Some(Some(
                ts.tv_sec.saturating_mul(1_000_000_000).saturating_add(n),
            ))),
            _ => Err(libc::EINVAL),
        }
    };
    Ok((one(&t[0])?, one(&t[1])?))
}

/// # Safety
/// C's contract for utimensat.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn utimensat(
    dirfd: c_int,
    path: *const c_char,
    times: *const libc::timespec,
    flags: c_int,
) -> c_int {
    // SAFETY: path is the caller's C string.
    let p = unsafe { cstr(path) };
    let op = |t: Target| {
        // SAFETY: times is the caller's (null or two timespecs).
        let (a, m) = unsafe { times_arg(times)? };
        core::utimens(t, a, m)
    };
    let go = match p {
        // Linux: a null path applies to dirfd itself.
        None => on_fd(dirfd, || op(Target::Fd(dirfd))),
        Some(b) if b.is_empty() && flags & libc::AT_EMPTY_PATH != 0 => {
            on_fd(dirfd, || op(Target::Fd(dirfd)))
        }
        Some(_) => on_path(dirfd, p, |rel| op(Target::Path(rel))),
    };
    match go {
        Go::Kernel(sub) => {
            let f = real!(
                "utimensat",
                unsafe extern "C" fn(c_int, *const c_char, *const libc::timespec, c_int) -> c_int
            );
            let d = if sub.is_some() { libc::AT_FDCWD } else { dirfd };
            // SAFETY: libc's utimensat with the caller's arguments.
            unsafe { f(d, sub_or(path, &sub), times, flags) }
        }
        Go::Done(r) => ret0(r),
    }
}

/// # Safety
/// C's contract for futimens.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn futimens(fd: c_int, times: *const libc::timespec) -> c_int {
    match on_fd(fd, || {
        // SAFETY: times is the caller's (null or two timespecs).
        let (a, m) = unsafe { times_arg(times)? };
        core::utimens(Target::Fd(fd), a, m)
    }) {
        Go::Kernel(_) => {
            let f = real!(
                "futimens",
                unsafe extern "C" fn(c_int, *const libc::timespec) -> c_int
            );
            // SAFETY: libc's futimens with the caller's arguments.
            unsafe { f(fd, times) }
        }
        Go::Done(r) => ret0(r),
    }
}

// ---------------------------------------------------------------------------------------------
// descriptors: dup, fcntl

/// # Safety
/// C's contract for dup.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    match on_fd(fd, || core::dup(fd, 0, false)) {
        Go::Kernel(_) => {
            let f = real!("dup", unsafe extern "C" fn(c_int) -> c_int);
            // SAFETY: libc's dup.
            unsafe { f(fd) }
        }
        Go::Done(r) => ret_int(r),
    }
}

fn do_dup3(old: c_int, new: c_int, flags: c_int, is_dup2: bool) -> c_int {
    if !is_dup2 && (old == new || flags & !libc::O_CLOEXEC != 0) {
        sys::set_errno(libc::EINVAL);
        return -1;
    }
    let cloexec = flags & libc::O_CLOEXEC != 0;
    if core::is_ours(old) {
        trace("dup2/dup3");
        return match run(|| Ok(Go::Done(core::dup_onto(old, new, cloexec)))) {
            Go::Done(r) => ret_int(r),
            Go::Kernel(_) => {
                sys::set_errno(libc::EBUSY);
                -1
            }
        };
    }
    let r = if is_dup2 {
        let f = real!("dup2", unsafe extern "C" fn(c_int, c_int) -> c_int);
        // SAFETY: libc's dup2.
        unsafe { f(old, new) }
    } else {
        let f = real!("dup3", unsafe extern "C" fn(c_int, c_int, c_int) -> c_int);
        // SAFETY: libc's dup3.
        unsafe { f(old, new, flags) }
    };
    if r >= 0 && old != new && core::is_ours(new) {
        // The kernel replaced our placeholder at `new`.
        let _g = Guard::enter();
        let _ = catch_unwind(|| {
            core::file_forget_fd(new);
            core::forget(new)
        });
    }
    r
}

/// # Safety
/// C's contract for dup2.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    do_dup3(old, new, 0, true)
}

/// # Safety
/// C's contract for dup3.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    do_dup3(old, new, flags, false)
}

fn our_fcntl(fd: c_int, cmd: c_int, arg: usize) -> R<c_int> {
    match cmd {
        libc::F_GETFL => core::getfl(fd),
        libc::F_SETFL => core::setfl(fd, arg as c_int).map(|_| 0),
        libc::F_GETFD => core::getfd(fd),
        libc::F_SETFD => core::setfd(fd, arg as c_int).map(|_| 0),
        libc::F_DUPFD => core::dup(fd, arg as c_int, false),
        libc::F_DUPFD_CLOEXEC => core::dup(fd, arg as c_int, true),
        // Locks: the namespace is private to this process, so every lock is granted.
        libc::F_SETLK | libc::F_SETLKW | libc::F_OFD_SETLK | libc::F_OFD_SETLKW => {
            core::getfl(fd).map(|_| 0)
        }
        libc::F_GETLK | libc::F_OFD_GETLK => {
            core::getfl(fd)?;
            let p = arg as *mut libc::flock;
            if p.is_null() {
                return Err(libc::EFAULT);
            }
            // SAFETY: F_GETLK's argument is the caller's struct flock.
            unsafe { (*p).l_type = libc::F_UNLCK as libc::c_short };
            Ok(0)
        }
        _ => {
            core::getfl(fd)?;
            Err(libc::EINVAL)
        }
    }
}

fn do_fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    match on_fd(fd, || our_fcntl(fd, cmd, arg)) {
        Go::Kernel(_) => {
            let f = real!("fcntl", FcntlFn);
            // SAFETY: libc's fcntl with the caller's arguments (the third passed on as it came).
            unsafe { f(fd, cmd, arg) }
        }
        Go::Done(r) => ret_int(r),
    }
}

/// `fcntl(fd, cmd, ...)`: see the module comment on variadic arguments.
///
/// # Safety
/// C's contract for fcntl.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    do_fcntl(fd, cmd, arg)
}

/// # Safety
/// C's contract for fcntl64.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    do_fcntl(fd, cmd, arg)
}

// ---------------------------------------------------------------------------------------------
// directory streams

fn dir_ptr(key: usize) -> *mut libc::DIR {
    key as *mut libc::DIR
}

/// # Safety
/// C's contract for opendir.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut libc::DIR {
    // SAFETY: path is the caller's C string.
    let p = unsafe { cstr(path) };
    let go = on_path(libc::AT_FDCWD, p, |rel| {
        let fd = core::open(rel, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC, 0)?;
        core::dir_open(fd).inspect_err(|_| {
            core::forget(fd);
            sys::real_close(fd);
        })
    });
    match go {
        Go::Kernel(sub) => {
            let f = real!(
                "opendir",
                unsafe extern "C" fn(*const c_char) -> *mut libc::DIR
            );
            // SAFETY: libc's opendir.
            unsafe { f(sub_or(path, &sub)) }
        }
        Go::Done(Ok(k)) => dir_ptr(k),
        Go::Done(Err(e)) => {
            sys::set_errno(e);
            std::ptr::null_mut()
        }
    }
}

/// # Safety
/// C's contract for fdopendir.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut libc::DIR {
    match on_fd(fd, || core::dir_open(fd)) {
        Go::Kernel(_) => {
            let f = real!("fdopendir", unsafe extern "C" fn(c_int) -> *mut libc::DIR);
            // SAFETY: libc's fdopendir.
            unsafe { f(fd) }
        }
        Go::Done(Ok(k)) => dir_ptr(k),
        Go::Done(Err(e)) => {
            sys::set_errno(e);
            std::ptr::null_mut()
        }
    }
}

fn on_dir<T>(d: *mut libc::DIR, op: impl FnOnce(usize) -> R<T>) -> Go<T> {
    let key = d as usize;
    if d.is_null() || busy() || !core::is_our_dir(key) {
        return Go::Kernel(None);
    }
    run(|| Ok(Go::Done(op(key))))
}

fn do_readdir(d: *mut libc::DIR) -> *mut libc::dirent64 {
    match on_dir(d, core::dir_next) {
        Go::Kernel(_) => {
            let f = real!(
                "readdir64",
                unsafe extern "C" fn(*mut libc::DIR) -> *mut libc::dirent64
            );
            // SAFETY: libc's readdir on libc's DIR.
            unsafe { f(d) }
        }
        Go::Done(Ok(Some(p))) => p,
        Go::Done(Ok(None)) => std::ptr::null_mut(),
        Go::Done(Err(e)) => {
            sys::set_errno(e);
            std::ptr::null_mut()
        }
    }
}

/// # Safety
/// C's contract for readdir (struct dirent and dirent64 are the same on x86-64).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readdir(d: *mut libc::DIR) -> *mut libc::dirent64 {
    do_readdir(d)
}

/// # Safety
/// C's contract for readdir64.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readdir64(d: *mut libc::DIR) -> *mut libc::dirent64 {
    do_readdir(d)
}

/// # Safety
/// C's contract for closedir.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn closedir(d: *mut libc::DIR) -> c_int {
    match on_dir(d, core::dir_close) {
        Go::Kernel(_) => {
            let f = real!("closedir", unsafe extern "C" fn(*mut libc::DIR) -> c_int);
            // SAFETY: libc's closedir on libc's DIR.
            unsafe { f(d) }
        }
        Go::Done(r) => ret0(r),
    }
}

/// # Safety
/// C's contract for dirfd.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dirfd(d: *mut libc::DIR) -> c_int {
    match on_dir(d, core::dir_fd) {
        Go::Kernel(_) => {
            let f = real!("dirfd", unsafe extern "C" fn(*mut libc::DIR) -> c_int);
            // SAFETY: libc's dirfd on libc's DIR.
            unsafe { f(d) }
        }
        Go::Done(r) => ret_int(r),
    }
}

/// # Safety
/// C's contract for rewinddir.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rewinddir(d: *mut libc::DIR) {
    if let Go::Kernel(_) = on_dir(d, core::dir_rewind) {
        let f = real!("rewinddir", unsafe extern "C" fn(*mut libc::DIR));
        // SAFETY: libc's rewinddir on libc's DIR.
        unsafe { f(d) }
    }
}

/// # Safety
/// C's contract for telldir.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn telldir(d: *mut libc::DIR) -> libc::c_long {
    match on_dir(d, core::dir_tell) {
        Go::Kernel(_) => {
            let f = real!(
                "telldir",
                unsafe extern "C" fn(*mut libc::DIR) -> libc::c_long
            );
            // SAFETY: libc's telldir on libc's DIR.
            unsafe { f(d) }
        }
        Go::Done(Ok(p)) => p,
        Go::Done(Err(e)) => {
            sys::set_errno(e);
            -1
        }
    }
}

/// # Safety
/// C's contract for seekdir.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn seekdir(d: *mut libc::DIR, pos: libc::c_long) {
    if let Go::Kernel(_) = on_dir(d, |k| core::dir_seek(k, pos)) {
        let f = real!(
            "seekdir",
            unsafe extern "C" fn(*mut libc::DIR, libc::c_long)
        );
        // SAFETY: libc's seekdir on libc's DIR.
        unsafe { f(d, pos) }
    }
}

// ---------------------------------------------------------------------------------------------
// working directory

/// # Safety
/// C's contract for fchdir.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    match on_fd(fd, || core::fchdir_ours(fd)) {
        Go::Kernel(_) => {
            let f = real!("fchdir", unsafe extern "C" fn(c_int) -> c_int);
            // SAFETY: libc's fchdir.
            let r = unsafe { f(fd) };
            if r == 0 {
                let _g = Guard::enter();
                core::forget_cwd();
            }
            r
        }
        Go::Done(r) => ret0(r),
    }
}

/// # Safety
/// C's contract for chdir.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    // SAFETY: path is the caller's C string.
    let p = unsafe { cstr(path) };
    match on_path(libc::AT_FDCWD, p, core::chdir_ours) {
        Go::Kernel(sub) => {
            let f = real!("chdir", unsafe extern "C" fn(*const c_char) -> c_int);
            // SAFETY: libc's chdir.
            let r = unsafe { f(sub_or(path, &sub)) };
            if r == 0 {
                let _g = Guard::enter();
                core::forget_cwd();
            }
            r
        }
        Go::Done(r) => ret0(r),
    }
}

/// # Safety
/// C's contract for getcwd.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getcwd(buf: *mut c_char, size: size_t) -> *mut c_char {
    let v = if busy() {
        None
    } else {
        let _g = Guard::enter();
        catch_unwind(core::virtual_cwd).ok().flatten()
    };
    if v.is_some() {
        trace("getcwd");
    }
    let Some(cwd) = v else {
        let f = real!(
            "getcwd",
            unsafe extern "C" fn(*mut c_char, size_t) -> *mut c_char
        );
        // SAFETY: libc's getcwd with the caller's arguments.
        return unsafe { f(buf, size) };
    };
    let need = cwd.len() + 1;
    let out = if buf.is_null() {
        let n = if size == 0 { need } else { size };
        if n < need {
            sys::set_errno(libc::ERANGE);
            return std::ptr::null_mut();
        }
        // SAFETY: malloc of n bytes; the caller frees it (getcwd's contract for a null buf).
        let p = unsafe { libc::malloc(n) }.cast::<c_char>();
        if p.is_null() {
            sys::set_errno(libc::ENOMEM);
            return p;
        }
        p
    } else {
        if size < need {
            sys::set_errno(if size == 0 {
                libc::EINVAL
            } else {
                libc::ERANGE
            });
            return std::ptr::null_mut();
        }
        buf
    };
    // SAFETY: out has room for need bytes (checked above).
    unsafe {
        std::ptr::copy_nonoverlapping(cwd.as_ptr().cast::<c_char>(), out, cwd.len());
        *out.add(cwd.len()) = 0;
    }
    out
}

// ---------------------------------------------------------------------------------------------
// exec

/// execve: while the working directory is inside the namespace, the new program is told so in
/// its environment (KAVACH_CR_CWD and KAVACH_CR_CWD_BASE), so that a shell's `cd` into the
/// checkpoint directory carries over to the commands it runs. glibc's own exec functions
/// (execvp, execl, posix_spawn) call the kernel directly and see the environment as chdir left
/// it (chdir sets the same variables with setenv).
///
/// # Safety
/// C's contract for execve.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    type ExecFn =
        unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
    let f = real!("execve", ExecFn);
    let extra = if busy() {
        None
    } else {
        let _g = Guard::enter();
        catch_unwind(core::exec_env).ok().flatten()
    };
    let Some(extra) = extra else {
        // SAFETY: libc's execve with the caller's arguments.
        return unsafe { f(path, argv, envp) };
    };
    let mut env: Vec<*const c_char> = Vec::new();
    if !envp.is_null() {
        let mut i = 0;
        loop {
            // SAFETY: envp is a null-terminated array of C strings (execve's contract).
            let e = unsafe { *envp.add(i) };
            if e.is_null() {
                break;
            }
            // SAFETY: a C string of that array.
            let b = unsafe { CStr::from_ptr(e) }.to_bytes();
            if !b.starts_with(b"KAVACH_CR_CWD=") && !b.starts_with(b"KAVACH_CR_CWD_BASE=") {
                env.push(e);
            }
            i += 1;
        }
    }
    env.extend(extra.iter().map(|c| c.as_ptr()));
    env.push(std::ptr::null());
    // SAFETY: libc's execve; env is a null-terminated array of C strings that live until the
    // call returns (it returns only on failure).
    unsafe { f(path, argv, env.as_ptr()) }
}

/// The library's constructor: remembers which process loaded it (see `core::loaded`).
extern "C" fn on_load() {
    core::loaded();
}

// SAFETY: .init_array holds plain function pointers that the dynamic loader calls once, with no
// arguments, when the library is loaded; on_load only stores the process id.
#[used]
#[unsafe(link_section = ".init_array")]
static ON_LOAD: extern "C" fn() = on_load;

/// vfork is served by fork: fork runs the shim's fork hook (an idle namespace is closed so
/// that the child can open it), vfork would not. POSIX allows vfork to be fork; the child of a
/// vfork may only exec or _exit, which it can do as well after a fork.
///
/// # Safety
/// C's contract for vfork.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vfork() -> libc::pid_t {
    let f = real!("fork", unsafe extern "C" fn() -> libc::pid_t);
    // SAFETY: libc's fork.
    unsafe { f() }
}

// ---------------------------------------------------------------------------------------------
// realpath

/// The absolute name of an existing file of ours (the namespace has no symbolic links, so the
/// normalised path is the real one).
fn our_realpath(rel: &str) -> R<CString> {
    core::stat(rel)?;
    let root = core::root().ok_or(libc::ENOENT)?;
    let p = if rel.is_empty() {
        root.dir.clone()
    } else {
        format!("{}/{rel}", root.dir)
    };
    if p.len() >= libc::PATH_MAX as usize {
        return Err(libc::ENAMETOOLONG);
    }
    CString::new(p).map_err(|_| libc::EINVAL)
}

fn do_realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    // SAFETY: path is the caller's C string.
    let p = unsafe { cstr(path) };
    match on_path(libc::AT_FDCWD, p, our_realpath) {
        Go::Kernel(sub) => {
            let f = real!(
                "realpath",
                unsafe extern "C" fn(*const c_char, *mut c_char) -> *mut c_char
            );
            // SAFETY: libc's realpath with the caller's arguments.
            unsafe { f(sub_or(path, &sub), resolved) }
        }
        Go::Done(Err(e)) => {
            sys::set_errno(e);
            std::ptr::null_mut()
        }
        Go::Done(Ok(c)) => {
            let b = c.as_bytes_with_nul();
            let out = if resolved.is_null() {
                // SAFETY: malloc of the string's length; the caller frees it (realpath's
                // contract for a null buffer).
                let m = unsafe { libc::malloc(b.len()) }.cast::<c_char>();
                if m.is_null() {
                    sys::set_errno(libc::ENOMEM);
                    return m;
                }
                m
            } else {
                resolved
            };
            // SAFETY: out has room for PATH_MAX bytes (the caller's buffer, by realpath's
            // contract) or b.len() (ours); b.len() <= PATH_MAX was checked.
            unsafe { std::ptr::copy_nonoverlapping(b.as_ptr().cast::<c_char>(), out, b.len()) };
            out
        }
    }
}

/// # Safety
/// C's contract for realpath.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    do_realpath(path, resolved)
}

/// # Safety
/// C's contract for canonicalize_file_name.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    do_realpath(path, std::ptr::null_mut())
}

// ---------------------------------------------------------------------------------------------
// statfs and statvfs: the namespace's own capacity (df, and programs that check free space
// before a checkpoint). glibc's statvfs calls the kernel's statfs internally, so both are here.

/// "KCRF": the f_type of the namespace.
const KCR_MAGIC: i64 = 0x4b43_5246;

fn fs_stats(t: Target) -> R<microfs::FsStats> {
    match t {
        Target::Path(rel) => {
            core::stat(rel)?;
            Ok(core::inst()?.fs.stats())
        }
        Target::Fd(fd) => {
            core::fstat(fd)?;
            Ok(core::ofd(fd)?.inst.fs.stats())
        }
    }
}

fn fill_statfs(st: &microfs::FsStats, out: *mut libc::statfs) -> R<()> {
    if out.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: struct statfs is plain integers; all-zero is a valid value.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    s.f_type = KCR_MAGIC;
    s.f_bsize = st.hugeblock as i64;
    s.f_frsize = st.hugeblock as i64;
    s.f_blocks = st.blocks_total;
    s.f_bfree = st.blocks_free;
    s.f_bavail = st.blocks_free;
    s.f_files = st.files + st.blocks_free;
    s.f_ffree = st.blocks_free;
    s.f_namelen = 255;
    // SAFETY: out is the caller's non-null struct statfs.
    unsafe { out.write(s) };
    Ok(())
}

fn fill_statvfs(st: &microfs::FsStats, out: *mut libc::statvfs) -> R<()> {
    if out.is_null() {
        return Err(libc::EFAULT);
    }
    let dev = core::root().map_or(0, |r| r.dev);
    // SAFETY: struct statvfs is plain integers; all-zero is a valid value.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    s.f_bsize = st.hugeblock as u64;
    s.f_frsize = st.hugeblock as u64;
    s.f_blocks = st.blocks_total;
    s.f_bfree = st.blocks_free;
    s.f_bavail = st.blocks_free;
    s.f_files = st.files + st.blocks_free;
    s.f_ffree = st.blocks_free;
    s.f_favail = st.blocks_free;
    s.f_fsid = dev;
    s.f_namemax = 255;
    // SAFETY: out is the caller's non-null struct statvfs.
    unsafe { out.write(s) };
    Ok(())
}

macro_rules! statfs_fns {
    ($path_fn:ident, $path64:ident, $fd_fn:ident, $fd64:ident, $lit:literal, $fdlit:literal, $ty:ty, $fill:ident) => {
        /// # Safety
        /// C's contract for this function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $path_fn(path: *const c_char, buf: *mut $ty) -> c_int {
            // SAFETY: path is the caller's C string.
            let p = unsafe { cstr(path) };
            match on_path(libc::AT_FDCWD, p, |rel| {
                $fill(&fs_stats(Target::Path(rel))?, buf)
            }) {
                Go::Kernel(sub) => {
                    let f = real!($lit, unsafe extern "C" fn(*const c_char, *mut $ty) -> c_int);
                    // SAFETY: libc's function with the caller's arguments.
                    unsafe { f(sub_or(path, &sub), buf) }
                }
                Go::Done(r) => ret0(r),
            }
        }

        /// # Safety
        /// C's contract for this function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $path64(path: *const c_char, buf: *mut $ty) -> c_int {
            // SAFETY: the same contract.
            unsafe { $path_fn(path, buf) }
        }

        /// # Safety
        /// C's contract for this function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $fd_fn(fd: c_int, buf: *mut $ty) -> c_int {
            match on_fd(fd, || $fill(&fs_stats(Target::Fd(fd))?, buf)) {
                Go::Kernel(_) => {
                    let f = real!($fdlit, unsafe extern "C" fn(c_int, *mut $ty) -> c_int);
                    // SAFETY: libc's function with the caller's arguments.
                    unsafe { f(fd, buf) }
                }
                Go::Done(r) => ret0(r),
            }
        }

        /// # Safety
        /// C's contract for this function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $fd64(fd: c_int, buf: *mut $ty) -> c_int {
            // SAFETY: the same contract.
            unsafe { $fd_fn(fd, buf) }
        }
    };
}

statfs_fns!(
    statfs,
    statfs64,
    fstatfs,
    fstatfs64,
    "statfs",
    "fstatfs",
    libc::statfs,
    fill_statfs
);
statfs_fns!(
    statvfs,
    statvfs64,
    fstatvfs,
    fstatvfs64,
    "statvfs",
    "fstatvfs",
    libc::statvfs,
    fill_statvfs
);

// ---------------------------------------------------------------------------------------------
// mmap of our files: a private copy. The bytes are read into anonymous memory at mmap time;
// a MAP_PRIVATE mapping behaves as the kernel's (writes stay private), a read-only MAP_SHARED
// mapping does not see later writes to the file, and a writable MAP_SHARED mapping is refused
// (ENODEV), since nothing would carry its stores to the file.

type MmapFn = unsafe extern "C" fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void;

fn our_mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> R<usize> {
    // The mapping type is the low bits (MAP_TYPE): MAP_SHARED 1, MAP_PRIVATE 2,
    // MAP_SHARED_VALIDATE 3.
    const MAP_TYPE: c_int = 0x0f;
    let kind = flags & MAP_TYPE;
    let shared = kind == libc::MAP_SHARED || kind == libc::MAP_SHARED_VALIDATE;
    if shared && prot & libc::PROT_WRITE != 0 {
        return Err(libc::ENODEV);
    }
    if len == 0 || off < 0 || off % 4096 != 0 {
        return Err(libc::EINVAL);
    }
    let st = core::fstat(fd)?;
    if st.kind == microfs::Kind::Dir {
        return Err(libc::ENODEV);
    }
    if core::getfl(fd)? & libc::O_ACCMODE == libc::O_WRONLY {
        return Err(libc::EACCES);
    }
    let anon_flags = (flags & !MAP_TYPE) | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    let f = real!("mmap", MmapFn);
    // SAFETY: an anonymous mapping with the caller's address hint and flags (MAP_FIXED
    // included: the caller asked to replace what is there).
    let p = unsafe {
        f(
            addr,
            len,
            prot | libc::PROT_READ | libc::PROT_WRITE,
            anon_flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(sys::errno());
    }
    let n = (st.size.saturating_sub(off as u64)).min(len as u64) as usize;
    // SAFETY: p is a fresh writable mapping of len >= n bytes.
    let dst = unsafe { slice_mut(p, n) };
    let mut done = 0;
    while done < n {
        match core::read(fd, &mut dst[done..], Some(off + done as i64)) {
            Ok(0) => break,
            Ok(k) => done += k,
            Err(e) => {
                // SAFETY: our own mapping, made above.
                unsafe { libc::munmap(p, len) };
                return Err(e);
            }
        }
    }
    if prot & libc::PROT_WRITE == 0 {
        // SAFETY: our own mapping; narrowing its protection to what the caller asked.
        if unsafe { libc::mprotect(p, len, prot) } != 0 {
            let e = sys::errno();
            // SAFETY: our own mapping.
            unsafe { libc::munmap(p, len) };
            return Err(e);
        }
    }
    Ok(p as usize)
}

fn do_mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    if flags & libc::MAP_ANONYMOUS != 0 {
        let f = real!("mmap", MmapFn);
        // SAFETY: libc's mmap with the caller's arguments.
        return unsafe { f(addr, len, prot, flags, fd, off) };
    }
    match on_fd(fd, || our_mmap(addr, len, prot, flags, fd, off)) {
        Go::Kernel(_) => {
            let f = real!("mmap", MmapFn);
            // SAFETY: libc's mmap with the caller's arguments.
            unsafe { f(addr, len, prot, flags, fd, off) }
        }
        Go::Done(Ok(p)) => p as *mut c_void,
        Go::Done(Err(e)) => {
            sys::set_errno(e);
            libc::MAP_FAILED
        }
    }
}

/// # Safety
/// C's contract for mmap.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    do_mmap(addr, len, prot, flags, fd, off)
}

/// # Safety
/// C's contract for mmap64.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    do_mmap(addr, len, prot, flags, fd, off)
}
