//! The shim's state and the file operations on it, in safe Rust: which paths and descriptors are
//! ours, the namespace instance, the descriptor table (fd -> shared open file description) and
//! the directory streams. Every function returns `Err(errno)` for the caller to hand to C.

use crate::sys;
use microfs::{Fs, Ino, Kind};
use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, OnceLock, RwLock};

pub(crate) type R<T> = Result<T, i32>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

thread_local! {
    static BUSY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks this thread as inside the shim until dropped: while it is set, every intercepted call
/// (the shim's own device IO through Rust std, say) goes straight to libc.
#[derive(Debug)]
pub(crate) struct Guard(bool);

impl Guard {
    pub(crate) fn enter() -> Guard {
        Guard(BUSY.with(|b| b.replace(true)))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        BUSY.with(|b| b.set(self.0));
    }
}

/// True while this thread is inside the shim.
pub(crate) fn busy() -> bool {
    BUSY.with(|b| b.get())
}

// ---------------------------------------------------------------------------------------------
// The checkpoint directory

/// The checkpoint directory: the absolute, lexically normalised KAVACH_CR_DIR (and its
/// canonical form when it exists on the kernel's file system and differs).
#[derive(Debug)]
pub(crate) struct Root {
    pub(crate) dir: String,
    canon: Option<String>,
    pub(crate) dev: u64,
}

static ROOT: RwLock<Option<Arc<Root>>> = RwLock::new(None);
static ROOT_SET: OnceLock<()> = OnceLock::new();

fn make_root(dir: &str) -> Option<Root> {
    if dir.is_empty() {
        return None;
    }
    let abs = if dir.starts_with('/') {
        dir.to_string()
    } else {
        format!("{}/{dir}", sys::real_getcwd()?)
    };
    let dir = format!("/{}", normalise(&abs).join("/"));
    let canon = std::fs::canonicalize(&dir)
        .ok()
        .and_then(|p| p.to_str().map(str::to_string))
        .filter(|c| *c != dir);
    // A device number of our own so that (st_dev, st_ino) never equals a kernel file's.
    let h = dir.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let dev = libc::makedev(0xfe0, (h & 0xf_ffff) as u32);
    Some(Root { dir, canon, dev })
}

pub(crate) fn root() -> Option<Arc<Root>> {
    ROOT_SET.get_or_init(|| {
        let r = std::env::var("KAVACH_CR_DIR")
            .ok()
            .and_then(|d| make_root(&d));
        *ROOT.write().unwrap_or_else(|p| p.into_inner()) = r.map(Arc::new);
    });
    ROOT.read().unwrap_or_else(|p| p.into_inner()).clone()
}

fn set_root(dir: &str) {
    let _ = root();
    *ROOT.write().unwrap_or_else(|p| p.into_inner()) = make_root(dir).map(Arc::new);
}

/// Lexical normalisation: components without "", "." and "..", ".." popping its parent (never
/// above "/").
pub(crate) fn normalise(path: &str) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

fn strip_root<'a>(comps: &[&'a str], root: &str) -> Option<Vec<&'a str>> {
    let rc = normalise(root);
    (comps.len() >= rc.len() && comps[..rc.len()] == rc[..]).then(|| comps[rc.len()..].to_vec())
}

/// Where a path names a file.
#[derive(Debug)]
pub(crate) enum Loc {
    /// The kernel's; Some(path) when the path must be handed to libc rewritten (a relative path
    /// while the working directory is inside the checkpoint directory).
    Kernel(Option<CString>),
    /// Ours: the namespace path ("" = root, "a/b").
    Ours(String),
}

/// The working directory inside the namespace after chdir into it (None: the kernel's).
static VCWD: Mutex<Option<String>> = Mutex::new(None);
/// The kernel's working directory, cached until the next chdir/fchdir.
static CWD: Mutex<Option<String>> = Mutex::new(None);

fn kernel_cwd() -> R<String> {
    let mut c = lock(&CWD);
    if c.is_none() {
        *c = sys::real_getcwd();
    }
    c.clone().ok_or(libc::ENOENT)
}

/// The environment variables that hand a working directory inside the namespace to programs
/// started with exec: the namespace path, and the kernel's working directory it applies to
/// (a program whose kernel working directory differs ignores them).
const ENV_CWD: &CStr = c"KAVACH_CR_CWD";
const ENV_CWD_BASE: &CStr = c"KAVACH_CR_CWD_BASE";
static VCWD_INIT: Once = Once::new();

/// Takes over the working directory inside the namespace from the program that exec'ed us.
fn vcwd_init() {
    VCWD_INIT.call_once(|| {
        let (Ok(rel), Ok(base)) = (
            std::env::var("KAVACH_CR_CWD"),
            std::env::var("KAVACH_CR_CWD_BASE"),
        ) else {
            return;
        };
        if root().is_some() && kernel_cwd().is_ok_and(|c| c == base) {
            *lock(&VCWD) = Some(normalise(&rel).join("/"));
        } else {
            // Stale (the kernel working directory moved on): not for our children either.
            sys::unsetenv(ENV_CWD);
            sys::unsetenv(ENV_CWD_BASE);
        }
    });
}

pub(crate) fn forget_cwd() {
    vcwd_init();
    *lock(&CWD) = None;
    if lock(&VCWD).take().is_some() {
        sys::unsetenv(ENV_CWD);
        sys::unsetenv(ENV_CWD_BASE);
    }
}

fn set_vcwd(rel: &str) -> R<()> {
    vcwd_init();
    let base = kernel_cwd()?;
    let (Ok(r), Ok(b)) = (CString::new(rel), CString::new(base)) else {
        return Err(libc::EINVAL);
    };
    *lock(&VCWD) = Some(rel.to_string());
    sys::setenv(ENV_CWD, &r);
    sys::setenv(ENV_CWD_BASE, &b);
    Ok(())
}

/// The entries to add to the environment of an exec while the working directory is inside
/// the namespace ("NAME=value").
pub(crate) fn exec_env() -> Option<Vec<CString>> {
    vcwd_init();
    let rel = lock(&VCWD).clone()?;
    let base = kernel_cwd().ok()?;
    Some(vec![
        CString::new(format!("KAVACH_CR_CWD={rel}")).ok()?,
        CString::new(format!("KAVACH_CR_CWD_BASE={base}")).ok()?,
    ])
}

/// Resolves `path` (relative to `dirfd` or the working directory) to ours or the kernel's.
pub(crate) fn locate(dirfd: i32, path: &[u8]) -> R<Loc> {
    let Some(root) = root() else {
        return Ok(Loc::Kernel(None));
    };
    if path.is_empty() {
        return Ok(Loc::Kernel(None));
    }
    let path = String::from_utf8_lossy(path);
    vcwd_init();
    let mut via_vcwd = false;
    let full = if path.starts_with('/') {
        path.to_string()
    } else if dirfd == libc::AT_FDCWD {
        let v = lock(&VCWD).clone();
        match v {
            Some(rel) => {
                via_vcwd = true;
                format!("{}/{rel}/{path}", root.dir)
            }
            None => format!("{}/{path}", kernel_cwd()?),
        }
    } else if is_ours(dirfd) {
        let ofd = ofd(dirfd)?;
        if !ofd.dir {
            return Err(libc::ENOTDIR);
        }
        via_vcwd = true;
        format!("{}/{}/{path}", root.dir, ofd.path)
    } else {
        return Ok(Loc::Kernel(None));
    };
    let comps = normalise(&full);
    let rel = strip_root(&comps, &root.dir)
        .or_else(|| root.canon.as_deref().and_then(|c| strip_root(&comps, c)));
    match rel {
        Some(rel) => Ok(Loc::Ours(rel.join("/"))),
        // A path that leaves the namespace through ".." reaches the kernel normalised (the
        // kernel could not walk through the checkpoint directory, which need not exist there).
        None if via_vcwd || crosses(&full, &root) => Ok(Loc::Kernel(Some(
            CString::new(format!("/{}", comps.join("/"))).map_err(|_| libc::EINVAL)?,
        ))),
        None => Ok(Loc::Kernel(None)),
    }
}

fn crosses(full: &str, root: &Root) -> bool {
    let under = |r: &str| full.starts_with(r) && full.as_bytes().get(r.len()) == Some(&b'/');
    under(&root.dir) || root.canon.as_deref().is_some_and(under)
}

pub(crate) fn chdir_ours(rel: &str) -> R<()> {
    let inst = inst()?;
    let ino = inst.fs.lookup(rel).map_err(|e| e.errno())?;
    if inst.stat(ino)?.kind != Kind::Dir {
        return Err(libc::ENOTDIR);
    }
    set_vcwd(rel)
}

pub(crate) fn fchdir_ours(fd: i32) -> R<()> {
    let o = ofd(fd)?;
    if !o.dir {
        return Err(libc::ENOTDIR);
    }
    set_vcwd(&o.path)
}

/// The working directory when it is inside the checkpoint directory.
pub(crate) fn virtual_cwd() -> Option<String> {
    vcwd_init();
    let rel = lock(&VCWD).clone()?;
    let root = root()?;
    Some(if rel.is_empty() {
        root.dir.clone()
    } else {
        format!("{}/{rel}", root.dir)
    })
}

// ---------------------------------------------------------------------------------------------
// The instance

/// One namespace, owned by the process that opened it.
pub(crate) struct Inst {
    pub(crate) fs: Fs,
    pid: u32,
    /// Opened lazily from the environment (not by MPI_Init): closed again before a fork when
    /// idle, so that the child can open it.
    lazy: bool,
}

impl std::fmt::Debug for Inst {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Inst(pid {})", self.pid)
    }
}

impl Inst {
    fn owned(&self) -> bool {
        self.pid == std::process::id()
    }
    pub(crate) fn stat(&self, ino: Ino) -> R<microfs::Stat> {
        self.fs.stat(ino).map_err(|e| e.errno())
    }
}

static INST: Mutex<Option<Arc<Inst>>> = Mutex::new(None);

/// The process the library was loaded into (set by the library's constructor; a child of
/// fork() inherits its parent's value until it calls exec).
static LOADED_IN: AtomicU32 = AtomicU32::new(0);

pub(crate) fn loaded() {
    LOADED_IN.store(std::process::id(), Ordering::Relaxed);
}

/// True in a child of fork() that has not called exec: it never opens a namespace (the parent
/// may hold it, or open it again; a child that is only on its way to exec must not take it
/// from its siblings).
fn forked_child() -> bool {
    let l = LOADED_IN.load(Ordering::Relaxed);
    l != 0 && l != std::process::id()
}
static WARNED: AtomicBool = AtomicBool::new(false);

/// This process's instance, opened from the environment at the first use. A child of fork()
/// gets EBUSY: the namespace belongs to the process that opened it.
pub(crate) fn inst() -> R<Arc<Inst>> {
    let mut g = lock(&INST);
    if let Some(i) = g.as_ref() {
        return if i.owned() {
            Ok(i.clone())
        } else {
            Err(libc::EBUSY)
        };
    }
    if forked_child() {
        return Err(libc::EBUSY);
    }
    let cfg = match microfs::instance::Config::from_env() {
        Ok(Some(cfg)) => cfg,
        Ok(None) => return Err(libc::ENOENT),
        Err(e) => {
            warn_once(&format!("bad checkpoint settings: {e}"));
            return Err(e.errno());
        }
    };
    let i = open_inst(&cfg)?;
    *g = Some(i.clone());
    Ok(i)
}

fn warn_once(msg: &str) {
    if !WARNED.swap(true, Ordering::Relaxed) {
        sys::warn(msg);
    }
}

fn open_inst(cfg: &microfs::instance::Config) -> R<Arc<Inst>> {
    match microfs::instance::open(cfg) {
        Ok((fs, _recovery)) => {
            static HOOK: Once = Once::new();
            HOOK.call_once(|| {
                sys::at_fork(before_fork);
                sys::at_exit(at_exit_close);
            });
            Ok(Arc::new(Inst {
                fs,
                pid: std::process::id(),
                lazy: true,
            }))
        }
        Err(e) => {
            warn_once(&format!(
                "cannot open the checkpoint namespace of {}: {e}",
                cfg.dir.display()
            ));
            Err(e.errno())
        }
    }
}

/// Runs in the parent before fork(): a lazily opened instance with no descriptor or directory
/// stream open is checkpointed and closed, releasing its claim on the device, so that the
/// child (a command run by a shell that did `cd` into the checkpoint directory, say) can open
/// the namespace. The parent opens it again at its next call. An instance with open files
/// stays; the child then gets EBUSY.
extern "C" fn before_fork() {
    let _g = Guard::enter();
    let _ = std::panic::catch_unwind(|| {
        if !lock(&FDS).is_empty() || ANY_DIRS.load(Ordering::Relaxed) > 0 {
            return;
        }
        let mut g = lock(&INST);
        let Some(i) = g.take() else {
            return;
        };
        if !i.owned() || !i.lazy {
            *g = Some(i);
            return;
        }
        match Arc::try_unwrap(i) {
            Ok(inst) => {
                if let Err(e) = inst.fs.checkpoint().and_then(|()| inst.fs.close()) {
                    warn_once(&format!("closing the namespace before fork: {e}"));
                }
            }
            Err(shared) => *g = Some(shared),
        }
    });
}

/// Runs at a normal exit of a process that opened a namespace lazily: streams of ours are
/// flushed, descriptors still open are dropped (the process is ending; the kernel closes their
/// placeholders), and the namespace is checkpointed and closed, so the next process opens a
/// cleanly closed namespace without replaying a log. A process killed by a signal skips this;
/// its next opener recovers from the log as after any crash.
extern "C" fn at_exit_close() {
    let _g = Guard::enter();
    let _ = std::panic::catch_unwind(|| {
        let owned_lazy = lock(&INST).as_ref().is_some_and(|i| i.owned() && i.lazy);
        if !owned_lazy {
            return;
        }
        sys::flush_all_streams();
        lock(&FDS).clear();
        if let Err(e) = instance_finish() {
            warn_once(&format!("closing the namespace at exit: {e}"));
        }
    });
}

/// Replaces the instance by one opened from `cfg` (the MPI wrapper's MPI_Init).
pub(crate) fn instance_start(cfg: microfs::instance::Config) -> Result<(), String> {
    let _guard = Guard::enter();
    instance_finish()?;
    let dir = cfg
        .dir
        .to_str()
        .ok_or("the checkpoint directory is not UTF-8")?
        .to_string();
    let i = match microfs::instance::open(&cfg) {
        Ok((fs, _)) => Arc::new(Inst {
            fs,
            pid: std::process::id(),
            lazy: false,
        }),
        Err(e) => return Err(format!("cannot open the namespace of {dir}: {e}")),
    };
    set_root(&dir);
    *lock(&INST) = Some(i);
    Ok(())
}

/// Checkpoints and closes the instance (MPI_Finalize). Descriptors still open keep it alive:
/// then it is only checkpointed.
pub(crate) fn instance_finish() -> Result<(), String> {
    let _guard = Guard::enter();
    let Some(i) = lock(&INST).take() else {
        return Ok(());
    };
    if !i.owned() {
        return Ok(());
    }
    match Arc::try_unwrap(i) {
        Ok(inst) => {
            inst.fs
                .checkpoint()
                .map_err(|e| format!("checkpoint: {e}"))?;
            inst.fs.close().map_err(|e| format!("close: {e}"))
        }
        Err(shared) => {
            let r = shared
                .fs
                .checkpoint()
                .map_err(|e| format!("checkpoint: {e}"));
            *lock(&INST) = Some(shared);
            r
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Descriptors

/// An open file description: shared by dup'ed descriptors (offset and status flags).
#[derive(Debug)]
pub(crate) struct Ofd {
    pub(crate) inst: Arc<Inst>,
    pub(crate) ino: Ino,
    pub(crate) dir: bool,
    /// The namespace path at open time (directories: the base of *at calls).
    pub(crate) path: String,
    flags: AtomicI32,
    off: Mutex<u64>,
}

impl Drop for Ofd {
    fn drop(&mut self) {
        if self.inst.owned() {
            self.inst.fs.closed(self.ino);
        }
    }
}

#[derive(Debug)]
struct Entry {
    ofd: Arc<Ofd>,
    cloexec: bool,
}

const MAX_FD: usize = 1 << 16;
static OURS: [AtomicBool; MAX_FD] = [const { AtomicBool::new(false) }; MAX_FD];
static FDS: Mutex<BTreeMap<i32, Entry>> = Mutex::new(BTreeMap::new());

/// Whether `fd` is one of ours (lock-free: every call on every descriptor asks).
pub(crate) fn is_ours(fd: i32) -> bool {
    fd >= 0 && (fd as usize) < MAX_FD && OURS[fd as usize].load(Ordering::Acquire)
}

pub(crate) fn ofd(fd: i32) -> R<Arc<Ofd>> {
    lock(&FDS)
        .get(&fd)
        .map(|e| e.ofd.clone())
        .ok_or(libc::EBADF)
}

fn live(fd: i32) -> R<Arc<Ofd>> {
    let o = ofd(fd)?;
    if !o.inst.owned() {
        return Err(libc::EBUSY);
    }
    Ok(o)
}

fn install(fd: i32, ofd: Arc<Ofd>, cloexec: bool) -> R<()> {
    if fd < 0 || fd as usize >= MAX_FD {
        sys::real_close(fd);
        return Err(libc::EMFILE);
    }
    let old = lock(&FDS).insert(fd, Entry { ofd, cloexec });
    OURS[fd as usize].store(true, Ordering::Release);
    drop(old);
    Ok(())
}

/// Forgets `fd` (the kernel descriptor is the caller's business). True when it was ours.
pub(crate) fn forget(fd: i32) -> bool {
    if !is_ours(fd) {
        return false;
    }
    let old = lock(&FDS).remove(&fd);
    OURS[fd as usize].store(false, Ordering::Release);
    let was = old.is_some();
    drop(old); // may call Fs::closed, outside the table's lock
    was
}

fn new_fd(ofd: Ofd, cloexec: bool) -> R<i32> {
    let fd = sys::placeholder(cloexec)?;
    install(fd, Arc::new(ofd), cloexec)?;
    Ok(fd)
}

const ACC: i32 = libc::O_ACCMODE;
const SETTABLE: i32 =
    libc::O_APPEND | libc::O_NONBLOCK | libc::O_ASYNC | libc::O_DIRECT | libc::O_NOATIME;

fn umasked(mode: u32) -> u32 {
    mode & 0o7777 & !sys::umask()
}

pub(crate) fn open(rel: &str, flags: i32, mode: u32) -> R<i32> {
    if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        return Err(libc::EOPNOTSUPP);
    }
    let inst = inst()?;
    let fs = &inst.fs;
    let acc = flags & ACC;
    let writable = acc == libc::O_WRONLY || acc == libc::O_RDWR;
    let ino = match fs.lookup(rel) {
        Ok(ino) => {
            if flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0 {
                return Err(libc::EEXIST);
            }
            let st = inst.stat(ino)?;
            if st.kind == Kind::Dir {
                if writable || flags & libc::O_CREAT != 0 {
                    return Err(libc::EISDIR);
                }
            } else {
                if flags & libc::O_DIRECTORY != 0 {
                    return Err(libc::ENOTDIR);
                }
                if flags & libc::O_TRUNC != 0 && writable && st.size != 0 {
                    fs.truncate(ino, 0).map_err(|e| e.errno())?;
                }
            }
            ino
        }
        Err(e) if e.errno() == libc::ENOENT && flags & libc::O_CREAT != 0 => {
            if flags & libc::O_DIRECTORY != 0 {
                return Err(libc::EINVAL);
            }
            fs.create(
                rel,
                umasked(mode),
                flags & libc::O_EXCL != 0,
                flags & libc::O_TRUNC != 0,
            )
            .map_err(|e| e.errno())?
        }
        Err(e) => return Err(e.errno()),
    };
    let dir = inst.stat(ino)?.kind == Kind::Dir;
    fs.opened(ino);
    let ofd = Ofd {
        inst: inst.clone(),
        ino,
        dir,
        path: rel.to_string(),
        flags: AtomicI32::new(flags & (ACC | SETTABLE)),
        off: Mutex::new(0),
    };
    new_fd(ofd, flags & libc::O_CLOEXEC != 0)
}

fn readable(o: &Ofd) -> R<()> {
    if o.dir {
        return Err(libc::EISDIR);
    }
    if o.flags.load(Ordering::Relaxed) & ACC == libc::O_WRONLY {
        return Err(libc::EBADF);
    }
    Ok(())
}

fn writable(o: &Ofd) -> R<()> {
    let acc = o.flags.load(Ordering::Relaxed) & ACC;
    if acc != libc::O_WRONLY && acc != libc::O_RDWR {
        return Err(libc::EBADF);
    }
    Ok(())
}

/// Reads into `buf` at `at` (None: the descriptor's offset, advanced).
pub(crate) fn read(fd: i32, buf: &mut [u8], at: Option<i64>) -> R<usize> {
    let o = live(fd)?;
    readable(&o)?;
    let fs = &o.inst.fs;
    match at {
        Some(off) if off < 0 => Err(libc::EINVAL),
        Some(off) => fs.read_at(o.ino, off as u64, buf).map_err(|e| e.errno()),
        None => {
            let mut off = lock(&o.off);
            let n = fs.read_at(o.ino, *off, buf).map_err(|e| e.errno())?;
            *off += n as u64;
            Ok(n)
        }
    }
}

/// Writes `data` at `at` (None: the descriptor's offset, advanced; O_APPEND: the end).
pub(crate) fn write(fd: i32, data: &[u8], at: Option<i64>) -> R<usize> {
    let o = live(fd)?;
    writable(&o)?;
    let fs = &o.inst.fs;
    let append = o.flags.load(Ordering::Relaxed) & libc::O_APPEND != 0;
    if data.is_empty() {
        return Ok(0);
    }
    match at {
        Some(off) if off < 0 => Err(libc::EINVAL),
        // Linux: pwrite on an O_APPEND descriptor appends.
        Some(off) => {
            let off = if append {
                o.inst.stat(o.ino)?.size
            } else {
                off as u64
            };
            fs.write_at(o.ino, off, data).map_err(|e| e.errno())
        }
        None => {
            let mut off = lock(&o.off);
            if append {
                *off = o.inst.stat(o.ino)?.size;
            }
            let n = fs.write_at(o.ino, *off, data).map_err(|e| e.errno())?;
            *off += n as u64;
            Ok(n)
        }
    }
}

pub(crate) fn seek(fd: i32, off: i64, whence: i32) -> R<i64> {
    let o = live(fd)?;
    let mut cur = lock(&o.off);
    let size = || -> R<i64> { Ok(o.inst.stat(o.ino)?.size as i64) };
    let new = match whence {
        libc::SEEK_SET => off,
        libc::SEEK_CUR => (*cur as i64).checked_add(off).ok_or(libc::EOVERFLOW)?,
        libc::SEEK_END => size()?.checked_add(off).ok_or(libc::EOVERFLOW)?,
        // No holes: data everywhere below the size, one hole at the end.
        libc::SEEK_DATA => {
            if off < 0 || off >= size()? {
                return Err(libc::ENXIO);
            }
            off
        }
        libc::SEEK_HOLE => {
            let s = size()?;
            if off < 0 || off >= s {
                return Err(libc::ENXIO);
            }
            s
        }
        _ => return Err(libc::EINVAL),
    };
    if new < 0 {
        return Err(libc::EINVAL);
    }
    *cur = new as u64;
    Ok(new)
}

pub(crate) fn fsync(fd: i32) -> R<()> {
    let o = live(fd)?;
    o.inst.fs.fsync(o.ino).map_err(|e| e.errno())
}

pub(crate) fn ftruncate(fd: i32, len: i64) -> R<()> {
    let o = live(fd)?;
    if len < 0 || o.dir || writable(&o).is_err() {
        return Err(libc::EINVAL);
    }
    o.inst.fs.truncate(o.ino, len as u64).map_err(|e| e.errno())
}

/// posix_fallocate / fallocate mode 0: make the file at least off+len long.
pub(crate) fn allocate(fd: i32, mode: i32, off: i64, len: i64) -> R<()> {
    let o = live(fd)?;
    if off < 0 || len <= 0 {
        return Err(libc::EINVAL);
    }
    if mode != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    writable(&o)?;
    if o.dir {
        return Err(libc::ENODEV);
    }
    let end = off.checked_add(len).ok_or(libc::EFBIG)? as u64;
    if o.inst.stat(o.ino)?.size < end {
        o.inst.fs.truncate(o.ino, end).map_err(|e| e.errno())?;
    }
    Ok(())
}

pub(crate) fn fstat(fd: i32) -> R<microfs::Stat> {
    let o = live(fd)?;
    o.inst.stat(o.ino)
}

pub(crate) fn stat(rel: &str) -> R<microfs::Stat> {
    let inst = inst()?;
    let ino = inst.fs.lookup(rel).map_err(|e| e.errno())?;
    inst.stat(ino)
}

pub(crate) fn truncate(rel: &str, len: i64) -> R<()> {
    let inst = inst()?;
    if len < 0 {
        return Err(libc::EINVAL);
    }
    let ino = inst.fs.lookup(rel).map_err(|e| e.errno())?;
    if inst.stat(ino)?.kind == Kind::Dir {
        return Err(libc::EISDIR);
    }
    inst.fs.truncate(ino, len as u64).map_err(|e| e.errno())
}

pub(crate) fn unlink(rel: &str) -> R<()> {
    let inst = inst()?;
    inst.fs.unlink(rel).map_err(|e| e.errno())
}

pub(crate) fn rmdir(rel: &str) -> R<()> {
    let inst = inst()?;
    if rel.is_empty() {
        return Err(libc::EBUSY);
    }
    inst.fs.rmdir(rel).map_err(|e| e.errno())
}

pub(crate) fn mkdir(rel: &str, mode: u32) -> R<()> {
    let inst = inst()?;
    if rel.is_empty() {
        return Err(libc::EEXIST);
    }
    inst.fs
        .mkdir(rel, umasked(mode))
        .map(|_| ())
        .map_err(|e| e.errno())
}

pub(crate) fn rename(from: &str, to: &str, noreplace: bool) -> R<()> {
    let inst = inst()?;
    if from.is_empty() || to.is_empty() {
        return Err(libc::EBUSY);
    }
    if to.starts_with(&format!("{from}/")) {
        return Err(libc::EINVAL);
    }
    if noreplace {
        inst.fs.lookup(from).map_err(|e| e.errno())?;
        if inst.fs.lookup(to).is_ok() {
            return Err(libc::EEXIST);
        }
    }
    inst.fs.rename(from, to).map_err(|e| e.errno())
}

pub(crate) fn access(rel: &str, mode: i32) -> R<()> {
    let st = stat(rel)?;
    if mode & !(libc::R_OK | libc::W_OK | libc::X_OK) != 0 {
        return Err(libc::EINVAL);
    }
    // We answer as the kernel does for root: read and write always, execute when a directory
    // or any execute bit is set; for other users the owner's bits.
    let (euid, _) = sys::euid_egid();
    let ok = |bit: i32, perm: u32| mode & bit == 0 || euid == 0 || st.mode & perm != 0;
    let x_ok = mode & libc::X_OK == 0 || st.kind == Kind::Dir || st.mode & 0o111 != 0;
    if ok(libc::R_OK, 0o400) && ok(libc::W_OK, 0o200) && x_ok {
        Ok(())
    } else {
        Err(libc::EACCES)
    }
}

/// The inode a path or descriptor names, for the calls that change attributes.
pub(crate) enum Target<'a> {
    Path(&'a str),
    Fd(i32),
}

fn target_ino(t: &Target) -> R<(Arc<Inst>, Ino)> {
    match t {
        Target::Path(rel) => {
            let inst = inst()?;
            let ino = inst.fs.lookup(rel).map_err(|e| e.errno())?;
            Ok((inst, ino))
        }
        Target::Fd(fd) => {
            let o = live(*fd)?;
            Ok((o.inst.clone(), o.ino))
        }
    }
}

pub(crate) fn chmod(t: Target, mode: u32) -> R<()> {
    let (inst, ino) = target_ino(&t)?;
    inst.fs.set_mode(ino, mode & 0o7777).map_err(|e| e.errno())
}

/// chown: accepted (the namespace belongs to one user), the file must exist.
pub(crate) fn chown(t: Target) -> R<()> {
    target_ino(&t).map(|_| ())
}

/// A time argument of utimensat: None = leave, Some(None) = now, Some(Some(ns)) = that time.
pub(crate) fn utimens(t: Target, atime: Option<Option<i64>>, mtime: Option<Option<i64>>) -> R<()> {
    let (inst, ino) = target_ino(&t)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0);
    let a = atime.map(|t| t.unwrap_or(now));
    let m = mtime.map(|t| t.unwrap_or(now));
    inst.fs.set_times(ino, a, m).map_err(|e| e.errno())
}

// fcntl and the dup family

/// The status flags as F_GETFL reports them (the kernel adds O_LARGEFILE on 64-bit).
pub(crate) fn getfl(fd: i32) -> R<i32> {
    let o = ofd(fd)?;
    Ok(o.flags.load(Ordering::Relaxed) | 0o100000)
}

pub(crate) fn setfl(fd: i32, flags: i32) -> R<()> {
    let o = ofd(fd)?;
    let old = o.flags.load(Ordering::Relaxed);
    o.flags
        .store((old & !SETTABLE) | (flags & SETTABLE), Ordering::Relaxed);
    Ok(())
}

pub(crate) fn getfd(fd: i32) -> R<i32> {
    lock(&FDS)
        .get(&fd)
        .map(|e| if e.cloexec { libc::FD_CLOEXEC } else { 0 })
        .ok_or(libc::EBADF)
}

pub(crate) fn setfd(fd: i32, v: i32) -> R<()> {
    let on = v & libc::FD_CLOEXEC != 0;
    lock(&FDS).get_mut(&fd).ok_or(libc::EBADF)?.cloexec = on;
    sys::set_cloexec(fd, on);
    Ok(())
}

/// F_DUPFD / dup: a new descriptor >= `min` sharing the description.
pub(crate) fn dup(fd: i32, min: i32, cloexec: bool) -> R<i32> {
    let o = ofd(fd)?;
    let new = sys::dup_from(fd, min, cloexec)?;
    install(new, o, cloexec)?;
    Ok(new)
}

/// dup2/dup3 with `old` ours: the kernel placeholder is duplicated onto `new`, which then
/// shares old's description.
pub(crate) fn dup_onto(old: i32, new: i32, cloexec: bool) -> R<i32> {
    let o = ofd(old)?;
    if old == new {
        return Ok(new);
    }
    sys::real_dup3(old, new, if cloexec { libc::O_CLOEXEC } else { 0 })?;
    forget(new);
    install(new, o, cloexec)?;
    Ok(new)
}

// ---------------------------------------------------------------------------------------------
// Directory streams

/// One entry of a directory stream.
#[derive(Debug, Clone)]
pub(crate) struct Ent {
    pub(crate) name: String,
    pub(crate) ino: u64,
    pub(crate) dir: bool,
}

/// A directory stream of ours: its descriptor and a snapshot of the entries.
#[derive(Debug)]
pub(crate) struct DirStream {
    pub(crate) fd: i32,
    pub(crate) ents: Vec<Ent>,
    pub(crate) pos: usize,
    pub(crate) dirent: libc::dirent64,
}

/// The open directory streams, by the address handed out as `DIR*`.
pub(crate) static DIRS: Mutex<BTreeMap<usize, Box<DirStream>>> = Mutex::new(BTreeMap::new());
pub(crate) static ANY_DIRS: AtomicI32 = AtomicI32::new(0);

/// The entries of directory descriptor `fd`: ".", ".." and the children.
pub(crate) fn entries(fd: i32) -> R<Vec<Ent>> {
    let o = live(fd)?;
    if !o.dir {
        return Err(libc::ENOTDIR);
    }
    let fs = &o.inst.fs;
    let parent = match o.path.rfind('/') {
        Some(i) => &o.path[..i],
        None => "",
    };
    let pino = if o.path.is_empty() {
        0
    } else {
        fs.lookup(parent).unwrap_or(0)
    };
    let mut v = vec![
        Ent {
            name: ".".into(),
            ino: o.ino,
            dir: true,
        },
        Ent {
            name: "..".into(),
            ino: pino,
            dir: true,
        },
    ];
    for e in fs.readdir(o.ino).map_err(|e| e.errno())? {
        v.push(Ent {
            name: e.name,
            ino: e.ino,
            dir: e.kind == Kind::Dir,
        });
    }
    Ok(v)
}

/// Opens a directory stream on our directory descriptor `fd`; returns its handle address.
pub(crate) fn dir_open(fd: i32) -> R<usize> {
    let ents = entries(fd)?;
    // Filled in by dir_next before C sees it.
    let dirent = libc::dirent64 {
        d_ino: 0,
        d_off: 0,
        d_reclen: 0,
        d_type: 0,
        d_name: [0; 256],
    };
    let b = Box::new(DirStream {
        fd,
        ents,
        pos: 0,
        dirent,
    });
    let key = &*b as *const DirStream as usize;
    lock(&DIRS).insert(key, b);
    ANY_DIRS.fetch_add(1, Ordering::Relaxed);
    Ok(key)
}

pub(crate) fn is_our_dir(key: usize) -> bool {
    ANY_DIRS.load(Ordering::Relaxed) > 0 && lock(&DIRS).contains_key(&key)
}

/// Fills the stream's dirent with the next entry; false at the end.
pub(crate) fn dir_next(key: usize) -> R<Option<*mut libc::dirent64>> {
    let mut g = lock(&DIRS);
    let d = g.get_mut(&key).ok_or(libc::EBADF)?;
    let Some(e) = d.ents.get(d.pos).cloned() else {
        return Ok(None);
    };
    d.pos += 1;
    let name = e.name.as_bytes();
    let n = name.len().min(255);
    d.dirent.d_ino = e.ino;
    d.dirent.d_off = d.pos as i64;
    d.dirent.d_type = if e.dir { libc::DT_DIR } else { libc::DT_REG };
    d.dirent.d_reclen = (19 + n + 1).next_multiple_of(8) as u16;
    for (dst, &src) in d.dirent.d_name.iter_mut().zip(name[..n].iter()) {
        *dst = src as libc::c_char;
    }
    d.dirent.d_name[n] = 0;
    Ok(Some(&mut d.dirent as *mut libc::dirent64))
}

pub(crate) fn dir_rewind(key: usize) -> R<()> {
    let fd = lock(&DIRS).get(&key).ok_or(libc::EBADF)?.fd;
    let ents = entries(fd)?;
    if let Some(d) = lock(&DIRS).get_mut(&key) {
        d.ents = ents;
        d.pos = 0;
    }
    Ok(())
}

pub(crate) fn dir_tell(key: usize) -> R<i64> {
    lock(&DIRS)
        .get(&key)
        .map(|d| d.pos as i64)
        .ok_or(libc::EBADF)
}

pub(crate) fn dir_seek(key: usize, pos: i64) -> R<()> {
    let mut g = lock(&DIRS);
    let d = g.get_mut(&key).ok_or(libc::EBADF)?;
    d.pos = pos.max(0) as usize;
    Ok(())
}

pub(crate) fn dir_fd(key: usize) -> R<i32> {
    lock(&DIRS).get(&key).map(|d| d.fd).ok_or(libc::EBADF)
}

/// Closes the stream and its descriptor.
pub(crate) fn dir_close(key: usize) -> R<()> {
    let d = lock(&DIRS).remove(&key).ok_or(libc::EBADF)?;
    ANY_DIRS.fetch_sub(1, Ordering::Relaxed);
    forget(d.fd);
    sys::real_close(d.fd);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// stdio streams: FILE* -> fd, for fileno()

pub(crate) static FILES: Mutex<BTreeMap<usize, i32>> = Mutex::new(BTreeMap::new());
pub(crate) static ANY_FILES: AtomicI32 = AtomicI32::new(0);

pub(crate) fn file_fd(key: usize) -> Option<i32> {
    if ANY_FILES.load(Ordering::Relaxed) == 0 {
        return None;
    }
    lock(&FILES).get(&key).copied()
}

pub(crate) fn file_add(key: usize, fd: i32) {
    lock(&FILES).insert(key, fd);
    ANY_FILES.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn file_forget_fd(fd: i32) {
    let mut g = lock(&FILES);
    let before = g.len();
    g.retain(|_, v| *v != fd);
    ANY_FILES.fetch_sub((before - g.len()) as i32, Ordering::Relaxed);
}

/// Parses an fopen mode into open flags.
pub(crate) fn fopen_flags(mode: &[u8]) -> R<i32> {
    let (mut flags, rest) = match mode.first() {
        Some(b'r') => (libc::O_RDONLY, &mode[1..]),
        Some(b'w') => (libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, &mode[1..]),
        Some(b'a') => (libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND, &mode[1..]),
        _ => return Err(libc::EINVAL),
    };
    for &c in rest {
        match c {
            b'+' => flags = (flags & !ACC) | libc::O_RDWR,
            b'x' => flags |= libc::O_EXCL,
            b'e' => flags |= libc::O_CLOEXEC,
            b',' => break,
            _ => {}
        }
    }
    Ok(flags)
}
