//! stdio on our files: `fopen` of a path of ours (and `fdopen` of a descriptor of ours) makes a
//! `FILE*` with glibc's `fopencookie`, whose read/write/seek/close functions call the shim's
//! descriptor operations; fwrite, fread, fprintf, fgets, fseek, fflush and fclose then work
//! without being intercepted one by one. `fileno` of such a stream answers its descriptor (glibc
//! would say -1 for a cookie stream), so fsync(fileno(f)) works.

use crate::core;
use crate::core::Guard;
use crate::sys::{self, Sym};
use libc::{c_char, c_int, c_void, size_t, ssize_t};
use std::ffi::CStr;
use std::panic::catch_unwind;

/// glibc's `cookie_io_functions_t` (not in the libc crate).
#[repr(C)]
struct CookieFns {
    read: Option<extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t>,
    write: Option<extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t>,
    seek: Option<extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int>,
    close: Option<extern "C" fn(*mut c_void) -> c_int>,
}

unsafe extern "C" {
    /// glibc's fopencookie(3).
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, funcs: CookieFns) -> *mut libc::FILE;
}

fn cookie_fd(c: *mut c_void) -> c_int {
    c as usize as c_int
}

/// Runs a cookie operation inside the shim; a panic or error sets errno and yields `fail`.
fn guarded<T>(fail: T, op: impl FnOnce() -> core::R<T>) -> T {
    let _g = Guard::enter();
    match catch_unwind(std::panic::AssertUnwindSafe(op)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            sys::set_errno(e);
            fail
        }
        Err(_) => {
            sys::set_errno(libc::EIO);
            fail
        }
    }
}

extern "C" fn ck_read(c: *mut c_void, buf: *mut c_char, n: size_t) -> ssize_t {
    guarded(-1, || {
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: glibc hands us n writable bytes at buf.
        let b = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) };
        core::read(cookie_fd(c), b, None).map(|k| k as ssize_t)
    })
}

extern "C" fn ck_write(c: *mut c_void, buf: *const c_char, n: size_t) -> ssize_t {
    // glibc's contract for a cookie write: the count written, 0 on error.
    guarded(0, || {
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: glibc hands us n readable bytes at buf.
        let b = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) };
        core::write(cookie_fd(c), b, None).map(|k| k as ssize_t)
    })
}

extern "C" fn ck_seek(c: *mut c_void, off: *mut i64, whence: c_int) -> c_int {
    guarded(-1, || {
        // SAFETY: glibc hands us a valid off64_t to read and update.
        let o = unsafe { &mut *off };
        *o = core::seek(cookie_fd(c), *o, whence)?;
        Ok(0)
    })
}

extern "C" fn ck_close(c: *mut c_void) -> c_int {
    let fd = cookie_fd(c);
    guarded(-1, || {
        core::file_forget_fd(fd);
        core::forget(fd);
        Ok(0)
    });
    sys::real_close(fd)
}

/// A stream over our descriptor `fd` (owned by the stream from now on).
fn stream(fd: c_int, mode: *const c_char) -> core::R<*mut libc::FILE> {
    let funcs = CookieFns {
        read: Some(ck_read),
        write: Some(ck_write),
        seek: Some(ck_seek),
        close: Some(ck_close),
    };
    // SAFETY: mode is the caller's C string; the cookie is the descriptor number, not a pointer.
    let f = unsafe { fopencookie(fd as usize as *mut c_void, mode, funcs) };
    if f.is_null() {
        return Err(sys::errno());
    }
    core::file_add(f as usize, fd);
    Ok(f)
}

fn do_fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    static REAL: Sym = Sym::new();
    let ours = (!path.is_null() && !mode.is_null()).then(|| {
        let _g = Guard::enter();
        catch_unwind(|| -> core::R<Option<*mut libc::FILE>> {
            // SAFETY: path and mode are the caller's non-null C strings.
            let (p, m) = unsafe {
                (
                    CStr::from_ptr(path).to_bytes(),
                    CStr::from_ptr(mode).to_bytes(),
                )
            };
            match core::locate(libc::AT_FDCWD, p)? {
                core::Loc::Kernel(_) => Ok(None),
                core::Loc::Ours(rel) => {
                    crate::ffi::trace("fopen");
                    let fd = core::open(&rel, core::fopen_flags(m)?, 0o666)?;
                    match stream(fd, mode) {
                        Ok(f) => Ok(Some(f)),
                        Err(e) => {
                            core::forget(fd);
                            sys::real_close(fd);
                            Err(e)
                        }
                    }
                }
            }
        })
        .unwrap_or(Err(libc::EIO))
    });
    match ours {
        Some(Ok(Some(f))) => f,
        Some(Err(e)) => {
            sys::set_errno(e);
            std::ptr::null_mut()
        }
        _ => {
            // Kernel paths (a relative one while the working directory is ours goes through open,
            // which fopen calls internally without passing through us: we rewrite it here).
            let sub = if path.is_null() {
                None
            } else {
                let _g = Guard::enter();
                // SAFETY: non-null caller's C string.
                let p = unsafe { CStr::from_ptr(path).to_bytes() };
                match core::locate(libc::AT_FDCWD, p) {
                    Ok(core::Loc::Kernel(s)) => s,
                    _ => None,
                }
            };
            let Some(r) = REAL.get(c"fopen") else {
                sys::set_errno(libc::ENOSYS);
                return std::ptr::null_mut();
            };
            // SAFETY: libc's fopen with the caller's arguments.
            unsafe {
                let f = std::mem::transmute::<
                    usize,
                    unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE,
                >(r);
                f(sub.as_ref().map_or(path, |c| c.as_ptr()), mode)
            }
        }
    }
}

/// # Safety
/// C's contract for fopen.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    do_fopen(path, mode)
}

/// # Safety
/// C's contract for fopen64.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    do_fopen(path, mode)
}

/// # Safety
/// C's contract for fdopen.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    static REAL: Sym = Sym::new();
    if core::is_ours(fd) && !mode.is_null() {
        let _g = Guard::enter();
        crate::ffi::trace("fdopen");
        return match catch_unwind(|| stream(fd, mode)).unwrap_or(Err(libc::EIO)) {
            Ok(f) => f,
            Err(e) => {
                sys::set_errno(e);
                std::ptr::null_mut()
            }
        };
    }
    let Some(r) = REAL.get(c"fdopen") else {
        sys::set_errno(libc::ENOSYS);
        return std::ptr::null_mut();
    };
    // SAFETY: libc's fdopen with the caller's arguments.
    unsafe {
        let f = std::mem::transmute::<
            usize,
            unsafe extern "C" fn(c_int, *const c_char) -> *mut libc::FILE,
        >(r);
        f(fd, mode)
    }
}

fn do_fileno(f: *mut libc::FILE, unlocked: bool) -> c_int {
    static REAL: Sym = Sym::new();
    static REAL_U: Sym = Sym::new();
    if let Some(fd) = core::file_fd(f as usize) {
        let _g = Guard::enter();
        crate::ffi::trace("fileno");
        return fd;
    }
    let r = if unlocked {
        REAL_U.get(c"fileno_unlocked")
    } else {
        REAL.get(c"fileno")
    };
    let Some(r) = r else {
        sys::set_errno(libc::EBADF);
        return -1;
    };
    // SAFETY: libc's fileno with the caller's stream.
    unsafe {
        let g = std::mem::transmute::<usize, unsafe extern "C" fn(*mut libc::FILE) -> c_int>(r);
        g(f)
    }
}

/// # Safety
/// C's contract for fileno.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fileno(f: *mut libc::FILE) -> c_int {
    do_fileno(f, false)
}

/// # Safety
/// C's contract for fileno_unlocked.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fileno_unlocked(f: *mut libc::FILE) -> c_int {
    do_fileno(f, true)
}
