//! The runner: spawning the program under ptrace, re-homing its memory into the image, the save
//! at a warning, and the resume.

use crate::elf;
use crate::error::{Result, WspError};
use crate::image::{self, FileEntry, Image, Meta, Segment, SegmentKind, SigAct, ThreadCtx};
use crate::layout::*;
use crate::signals::{self, Waker};
use crate::sys::{self, Mem, Regs, Status, nr};
use crate::{AfterSave, Event, ResumeOptions, RunConfig, RunEnd, SaveMode, SaveReport, WriteBack};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

const OPTIONS: i32 = libc::PTRACE_O_EXITKILL
    | libc::PTRACE_O_TRACECLONE
    | libc::PTRACE_O_TRACEEXEC
    | libc::PTRACE_O_TRACESECCOMP
    | libc::PTRACE_O_TRACESYSGOOD;

/// The main thread's stack is replaced by a mapping this large (ending where the stack ends).
const STACK_RESERVE: u64 = 8 << 20;
/// The flags glibc's pthread_create passes to clone, used when a thread's own were not seen.
const GLIBC_THREAD_FLAGS: u64 = 0x3d0f00;
const CLONE_CHILD_CLEARTID: u64 = 0x0020_0000;
const CLONE_SETTLS: u64 = 0x0008_0000;
const CLONE_PARENT_SETTID: u64 = 0x0010_0000;
const CLONE_CHILD_SETTID: u64 = 0x0100_0000;
const O_CLOEXEC_BIT: i32 = 0o2000000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Running,
    /// Stopped at a system call's entry (seccomp): the call has not run.
    Entry,
    /// Stopped anywhere else.
    Plain,
}

#[derive(Debug, Clone)]
enum Pending {
    /// `taken`: image pieces a MAP_FIXED mapping replaces (see `Image::take_range`).
    Mmap {
        len: u64,
        prot: u64,
        flags: u64,
        taken: Vec<(u64, u64, u64)>,
    },
    Munmap {
        taken: Vec<(u64, u64, u64)>,
    },
    Madvise {
        addr: u64,
        len: u64,
    },
    /// `req`: the break asked for; `taken`: the pieces a shrink unmaps.
    Brk {
        req: u64,
        taken: Vec<(u64, u64, u64)>,
    },
}

#[derive(Debug, Clone)]
struct Thread {
    ltid: i32,
    stop: Stop,
    pending: Option<Pending>,
    clone_flags: u64,
    clear_child_tid: u64,
    robust: (u64, u64),
    rseq: (u64, u32, u32),
}

impl Thread {
    fn new(ltid: i32) -> Thread {
        Thread {
            ltid,
            stop: Stop::Running,
            pending: None,
            clone_flags: 0,
            clear_child_tid: 0,
            robust: (0, 0),
            rseq: (0, 0, 0),
        }
    }
}

/// Kills the program if the runner leaves early (an error path).
struct Guard {
    pid: i32,
    armed: bool,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.armed {
            // SAFETY: kill/waitpid on our own child; the pid cannot have been reused while it is
            // unreaped.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            while let Ok(Some(_)) = sys::wait(-1, false) {}
        }
    }
}

struct Runner<'a> {
    pid: i32,
    mem: Mem,
    img: Image,
    mode: SaveMode,
    stub: u64,
    threads: BTreeMap<i32, Thread>,
    brk: u64,
    sigactions: BTreeMap<i32, SigAct>,
    meta: Meta,
    window: powerfail::Window,
    write_back: WriteBack,
    after_save: AfterSave,
    prog_inode: u64,
    img_inode: u64,
    /// The program's read-only mappings as exec made them (text, rodata): a later save skips
    /// exactly these, since every exec recreates them.
    fresh_ro: Vec<(u64, u64)>,
    /// A fatal signal the runner turned into SIGKILL (the program is pid 1 of its namespace,
    /// which the kernel would otherwise keep alive).
    fatal: Option<i32>,
    on_event: &'a mut dyn FnMut(&Event),
    waker: Waker,
    /// SIGPWR count at the start, or None when this run does not listen for SIGPWR.
    pwr_base: Option<u64>,
    warn_at: Option<u64>,
    guard: Guard,
    /// Write tracking (write_back = tracked, image mode).
    tracker: Option<crate::track::Tracker>,
    /// Image ranges the runner itself wrote since the program started (not seen by the
    /// tracker): written back by the first tracked save.
    runner_wrote: Vec<(u64, u64)>,
}

/// Everything the child needs, built before the fork (the child may not allocate).
struct ChildPlan {
    path: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    img_fd: i32,
    files: Vec<(CString, i32, u64, i32)>,
    filter: Vec<libc::sock_filter>,
}

fn bpf(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The seccomp filter: trace the memory and thread calls, refuse the ones the runtime cannot
/// follow, let everything else through.
fn filter() -> Vec<libc::sock_filter> {
    const LD_ABS: u16 = 0x20;
    const JEQ: u16 = 0x15;
    const JSET: u16 = 0x45;
    const RET: u16 = 0x06;
    const ALLOW: u32 = 0x7fff_0000;
    const TRACE: u32 = 0x7ff0_0000;
    const ERRNO: u32 = 0x0005_0000;
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    let mut f = vec![
        bpf(LD_ABS, 4, 0, 0),
        bpf(JEQ, AUDIT_ARCH_X86_64, 1, 0),
        bpf(RET, ALLOW, 0, 0),
        bpf(LD_ABS, 0, 0, 0),
    ];
    let rules: [(u64, u32); 14] = [
        (nr::MMAP, TRACE),
        (nr::MADVISE, TRACE),
        (nr::MUNMAP, TRACE),
        (nr::BRK, TRACE),
        (nr::RT_SIGACTION, TRACE),
        (nr::SET_TID_ADDRESS, TRACE),
        (nr::SET_ROBUST_LIST, TRACE),
        (nr::RSEQ, TRACE),
        (nr::CLONE3, TRACE),
        (nr::MREMAP, ERRNO | libc::ENOMEM as u32),
        (nr::FORK, ERRNO | libc::ENOSYS as u32),
        (nr::VFORK, ERRNO | libc::ENOSYS as u32),
        // execve: traced so the first one (the start) passes and later ones are refused.
        (nr::EXECVE, TRACE),
        (nr::EXECVEAT, TRACE),
    ];
    for (n, action) in rules {
        f.push(bpf(JEQ, n as u32, 0, 1));
        f.push(bpf(RET, action, 0, 0));
    }
    // clone: allowed for threads only.
    f.push(bpf(JEQ, nr::CLONE as u32, 0, 3));
    f.push(bpf(LD_ABS, 16, 0, 0));
    f.push(bpf(JSET, libc::CLONE_THREAD as u32, 1, 0));
    f.push(bpf(RET, ERRNO | libc::ENOSYS as u32, 0, 0));
    f.push(bpf(RET, ALLOW, 0, 0));
    f
}

fn cstr(what: &'static str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| WspError::Config {
        what,
        expected: "no NUL byte".into(),
        found: s.into(),
    })
}

/// Fork into a new pid namespace, seize, and let the child exec; returns at the exec stop.
fn spawn(plan: &ChildPlan) -> Result<i32> {
    let mut argv: Vec<*const libc::c_char> = plan.argv.iter().map(|c| c.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = plan.envp.iter().map(|c| c.as_ptr()).collect();
    envp.push(std::ptr::null());
    let prog = libc::sock_fprog {
        len: plan.filter.len() as u16,
        filter: plan.filter.as_ptr() as *mut libc::sock_filter,
    };
    let mut sync = [0i32; 2];
    // SAFETY: pipe2 fills our array.
    if unsafe { libc::pipe2(sync.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(WspError::errno("pipe2", 0));
    }
    // SAFETY: a raw clone with only CLONE_NEWPID|SIGCHLD behaves like fork; the child runs only
    // async-signal-safe system calls on data prepared above, then execs or _exits.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_NEWPID | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if pid == 0 {
        // SAFETY: see child(); never returns.
        unsafe { child(plan, sync, &argv, &envp, &prog) }
    }
    // SAFETY: closing our copy of the read end.
    unsafe { libc::close(sync[0]) };
    if pid < 0 {
        // SAFETY: closing the write end.
        unsafe { libc::close(sync[1]) };
        return Err(WspError::errno("clone(CLONE_NEWPID)", 0));
    }
    let pid = pid as i32;
    let seized = sys::seize(pid, OPTIONS);
    let b = 1u8;
    // SAFETY: releasing the child (or, on failure, letting it see EOF and exit).
    unsafe {
        if seized.is_ok() {
            libc::write(sync[1], (&b as *const u8).cast(), 1);
        }
        libc::close(sync[1]);
    }
    if let Err(e) = seized {
        // SAFETY: reaping our child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let _ = sys::wait(pid, false);
        return Err(e);
    }
    loop {
        match sys::wait(pid, false)? {
            Some((_, Status::Stopped { event, .. })) if event == libc::PTRACE_EVENT_EXEC => {
                // The exec stop is inside execve, whose return value would overwrite an injected
                // call's number: go on to the call's exit stop first.
                sys::cont_syscall(pid)?;
                loop {
                    match sys::wait(pid, false)? {
                        Some((_, Status::Stopped { sig, .. })) if sig == (libc::SIGTRAP | 0x80) => {
                            return Ok(pid);
                        }
                        Some((_, Status::Stopped { .. })) => sys::cont_syscall(pid)?,
                        other => {
                            return Err(WspError::ptrace(
                                "start the program",
                                pid,
                                format!("after exec: {other:?}"),
                            ));
                        }
                    }
                }
            }
            Some((_, Status::Stopped { .. })) => sys::cont(pid, 0)?,
            Some((_, Status::Exited(c))) => {
                return Err(WspError::ptrace(
                    "start the program",
                    pid,
                    match c {
                        126 => "a file to reopen could not be opened at its offset".to_string(),
                        125 => "the seccomp filter or personality was refused".to_string(),
                        _ => format!("the child exited with {c} before exec (exec failed)"),
                    },
                ));
            }
            Some((_, Status::Signaled(s))) => {
                return Err(WspError::ptrace(
                    "start the program",
                    pid,
                    format!("killed by signal {s}"),
                ));
            }
            None => return Err(WspError::ptrace("start the program", pid, "no child")),
        }
    }
}

/// The child between fork and exec.
///
/// # Safety
/// Called once in the fresh child; uses only async-signal-safe calls on prepared data.
unsafe fn child(
    plan: &ChildPlan,
    sync: [i32; 2],
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    prog: &libc::sock_fprog,
) -> ! {
    // SAFETY: plain system calls on our own descriptors and prepared buffers.
    unsafe {
        libc::close(sync[1]);
        let mut b = 0u8;
        if libc::read(sync[0], (&mut b as *mut u8).cast(), 1) != 1 {
            libc::_exit(124);
        }
        if libc::dup2(plan.img_fd, IMAGE_FD) != IMAGE_FD {
            libc::_exit(123);
        }
        libc::syscall(436, 3u32, (IMAGE_FD - 1) as u32, 4u32); // close_range(.., CLOEXEC)
        libc::syscall(436, (IMAGE_FD + 1) as u32, u32::MAX, 4u32);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        // Rust runtimes ignore SIGPIPE, and an ignored signal stays ignored across exec.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        for (path, flags, off, fd) in &plan.files {
            let got = libc::open(path.as_ptr(), *flags);
            if got < 0 {
                libc::_exit(126);
            }
            if *off != 0 && libc::lseek(got, *off as i64, libc::SEEK_SET) < 0 {
                libc::_exit(126);
            }
            if got != *fd {
                if libc::dup2(got, *fd) != *fd {
                    libc::_exit(126);
                }
                libc::close(got);
            }
        }
        if libc::personality(libc::ADDR_NO_RANDOMIZE as libc::c_ulong) == -1 {
            libc::_exit(125);
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            libc::_exit(125);
        }
        if libc::syscall(libc::SYS_seccomp, 1, 0, prog as *const libc::sock_fprog) != 0 {
            libc::_exit(125);
        }
        libc::execve(plan.path.as_ptr(), argv.as_ptr(), envp.as_ptr());
        libc::_exit(127)
    }
}

fn start_brk(pid: i32) -> Result<u64> {
    let p = format!("/proc/{pid}/stat");
    let s = std::fs::read_to_string(&p).map_err(|e| WspError::io("read", &p, e))?;
    let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    rest.split_ascii_whitespace()
        .nth(44)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| WspError::ptrace("start_brk from /proc stat", pid, "field 47 missing"))
}

fn elapsed(t0: u64) -> u64 {
    sys::monotonic_ns().saturating_sub(t0)
}

/// Copy `[addr, addr+dst.len())` of the program into `dst`, page by page where a page does not
/// read (it stays zero).
fn copy_out(mem: &Mem, addr: u64, dst: &mut [u8]) {
    if mem.read(addr, dst).is_ok() {
        return;
    }
    for (i, page) in dst.chunks_mut(4096).enumerate() {
        if mem.read(addr + i as u64 * 4096, page).is_err() {
            page.fill(0);
        }
    }
}

/// Copy `[addr, addr+len)` of process `pid` into the image file at `off`: process_vm_readv
/// into a bounce buffer, then pwrite (no page faults in the runner's mapping), falling back to
/// `copy_out` for a chunk that does not read in one go.
fn copy_to_image(
    pid: i32,
    mem: &Mem,
    addr: u64,
    len: u64,
    img: &mut Image,
    off: u64,
) -> Result<()> {
    use std::os::unix::fs::FileExt;
    const CHUNK: u64 = 4 << 20;
    let mut buf = vec![0u8; CHUNK.min(len) as usize];
    let mut done = 0;
    while done < len {
        let n = CHUNK.min(len - done) as usize;
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: n,
        };
        let remote = libc::iovec {
            iov_base: (addr + done) as *mut libc::c_void,
            iov_len: n,
        };
        // SAFETY: reads another process's memory into our buffer of at least n bytes.
        let got = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        if got != n as isize {
            copy_out(mem, addr + done, &mut buf[..n]);
        }
        img.file
            .write_all_at(&buf[..n], off + done)
            .map_err(|e| WspError::io("write image", &img.path, e))?;
        done += n as u64;
    }
    Ok(())
}

pub(crate) fn run(cfg: &RunConfig, on_event: &mut dyn FnMut(&Event)) -> Result<RunEnd> {
    let program = elf::identify(&cfg.program)?;
    let mut args = Vec::new();
    for a in &cfg.args {
        args.push(
            a.to_str()
                .map(str::to_string)
                .ok_or_else(|| WspError::Config {
                    what: "args",
                    expected: "valid UTF-8".into(),
                    found: a.to_string_lossy().into_owned(),
                })?,
        );
    }
    let env: Vec<String> = std::env::vars_os()
        .filter_map(|(k, v)| Some(format!("{}={}", k.to_str()?, v.to_str()?)))
        .collect();
    let mode = cfg.save;
    let mut img = Image::create(
        &cfg.image,
        cfg.image_size,
        if mode == SaveMode::Image {
            MODE_IMAGE
        } else {
            MODE_HIBERNATE
        },
    )?;
    let meta = Meta {
        program,
        args,
        env,
        kernel: elf::kernel_release(),
        counter: 0,
        brk: 0,
        threads: vec![],
        segments: vec![],
        files: vec![],
        sigactions: vec![],
        not_restorable: vec![],
        exit: None,
    };
    img.commit(&meta, STATE_RUNNING, 0)?;
    let plan = plan_for(&meta, &img, vec![])?;
    let waker = Waker::new(cfg.sigpwr).map_err(|e| WspError::io("wake pipe", "pipe2", e))?;
    let pwr_base = cfg.sigpwr.then(|| signals::pwr_seen().0);
    let pid = spawn(&plan)?;
    let mut r = Runner::new(
        pid,
        img,
        meta,
        mode,
        cfg.window,
        cfg.write_back,
        cfg.after_save,
        on_event,
        waker,
        pwr_base,
    )?;
    r.warn_at = cfg
        .warn_after
        .map(|d| sys::monotonic_ns() + d.as_nanos() as u64);
    let regs = sys::get_regs(pid)?;
    r.stub = regs.rip;
    r.brk = start_brk(pid)?;
    if mode == SaveMode::Image {
        r.rehome_initial()?;
        if cfg.write_back == WriteBack::Tracked {
            r.start_tracking()?;
        }
    }
    (r.on_event)(&Event::Started { pid });
    sys::cont(pid, 0)?;
    r.threads.entry(pid).or_insert_with(|| Thread::new(1)).stop = Stop::Running;
    r.supervise()
}

fn plan_for(meta: &Meta, img: &Image, files: Vec<(CString, i32, u64, i32)>) -> Result<ChildPlan> {
    let mut argv = vec![cstr("program", &meta.program.path)?];
    for a in &meta.args {
        argv.push(cstr("args", a)?);
    }
    let envp = meta
        .env
        .iter()
        .map(|e| cstr("env", e))
        .collect::<Result<Vec<_>>>()?;
    Ok(ChildPlan {
        path: cstr("program", &meta.program.path)?,
        argv,
        envp,
        img_fd: img.file.as_raw_fd(),
        files,
        filter: filter(),
    })
}

pub(crate) fn resume(
    path: &Path,
    opts: &ResumeOptions,
    on_event: &mut dyn FnMut(&Event),
) -> Result<RunEnd> {
    let t0 = sys::monotonic_ns();
    let loaded = image::load(path)?;
    if !loaded.marker_valid {
        // A header saying saved without its marker: the save was cut short, i.e. missed.
        let state = if loaded.header.state == STATE_SAVED {
            "missed".to_string()
        } else {
            crate::state_name(loaded.header.state).to_string()
        };
        return Err(WspError::NotSaved {
            image: path.into(),
            state,
        });
    }
    let meta = loaded.meta;
    elf::same_program(&meta.program)?;
    let kernel = elf::kernel_release();
    if kernel != meta.kernel {
        return Err(WspError::KernelChanged {
            expected: meta.kernel.clone(),
            found: kernel,
        });
    }
    if !meta.not_restorable.is_empty() && !opts.drop_not_restorable {
        return Err(WspError::NotRestorable {
            objects: meta.not_restorable.clone(),
        });
    }
    if !meta.threads.iter().any(|t| t.tid == 1) {
        return Err(WspError::NotRestorable {
            objects: vec!["the main thread (tid 1) is not among the saved threads".into()],
        });
    }
    let mut files = Vec::new();
    let mut missing = Vec::new();
    for f in &meta.files {
        if f.kind == "inherited" {
            continue;
        }
        if std::fs::metadata(&f.path).is_err() {
            missing.push(format!("fd {}: {} no longer exists", f.fd, f.path));
            continue;
        }
        let flags = (f.flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | O_CLOEXEC_BIT))
            | libc::O_NOCTTY;
        let off = if f.kind == "file" { f.offset } else { 0 };
        files.push((cstr("file path", &f.path)?, flags, off, f.fd));
    }
    if !missing.is_empty() {
        return Err(WspError::NotRestorable { objects: missing });
    }
    let mode = if loaded.header.mode == MODE_IMAGE {
        SaveMode::Image
    } else {
        SaveMode::Hibernate
    };
    let used: Vec<(u64, u64, u64)> = if mode == SaveMode::Image {
        meta.segments
            .iter()
            .filter(|s| s.kind != SegmentKind::Reserve)
            .map(|s| (s.addr, s.len, s.offset))
            .collect()
    } else {
        // The copies are read back below and then no longer needed.
        vec![]
    };
    let img = Image::open(path, loaded.header.mode, &used)?;
    let plan = plan_for(&meta, &img, files)?;
    let waker = Waker::new(opts.sigpwr).map_err(|e| WspError::io("wake pipe", "pipe2", e))?;
    let pwr_base = opts.sigpwr.then(|| signals::pwr_seen().0);
    let pid = spawn(&plan)?;
    let mut r = Runner::new(
        pid,
        img,
        meta,
        mode,
        opts.window.unwrap_or_default(),
        opts.write_back.unwrap_or_default(),
        opts.after_save,
        on_event,
        waker,
        pwr_base,
    )?;
    let regs = sys::get_regs(pid)?;
    r.stub = regs.rip;
    let nthreads = r.restore(pid)?;
    if mode == SaveMode::Image && r.write_back == WriteBack::Tracked {
        r.start_tracking()?;
    }
    r.warn_at = opts
        .warn_after
        .map(|d| sys::monotonic_ns() + d.as_nanos() as u64);
    let counter = r.meta.counter;
    // The marker is cleared (persisted) before the program runs again.
    r.img.clear_marker();
    let meta = r.meta.clone();
    r.img.commit(&meta, STATE_RUNNING, 0)?;
    let tids: Vec<i32> = r.threads.keys().copied().collect();
    for t in tids {
        sys::cont(t, 0)?;
        if let Some(th) = r.threads.get_mut(&t) {
            th.stop = Stop::Running;
        }
    }
    (r.on_event)(&Event::Started { pid });
    (r.on_event)(&Event::Resumed {
        counter,
        threads: nthreads,
        ns: elapsed(t0),
    });
    r.supervise()
}

impl<'a> Runner<'a> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        pid: i32,
        img: Image,
        meta: Meta,
        mode: SaveMode,
        window: powerfail::Window,
        write_back: WriteBack,
        after_save: AfterSave,
        on_event: &'a mut dyn FnMut(&Event),
        waker: Waker,
        pwr_base: Option<u64>,
    ) -> Result<Runner<'a>> {
        let guard = Guard { pid, armed: true };
        let mem = Mem::open(pid)?;
        let prog_inode = std::fs::metadata(&meta.program.path)
            .map_err(|e| WspError::io("stat program", &meta.program.path, e))?
            .ino();
        let img_inode = img
            .file
            .metadata()
            .map_err(|e| WspError::io("stat image", &img.path, e))?
            .ino();
        let mut threads = BTreeMap::new();
        let mut main = Thread::new(1);
        main.stop = Stop::Plain;
        threads.insert(pid, main);
        Ok(Runner {
            pid,
            mem,
            img,
            mode,
            stub: 0,
            threads,
            brk: 0,
            sigactions: BTreeMap::new(),
            meta,
            window,
            write_back,
            after_save,
            prog_inode,
            img_inode,
            fresh_ro: sys::read_maps(pid)?
                .iter()
                .filter(|m| !m.write && !m.shared && !m.special() && m.inode == prog_inode)
                .map(|m| (m.start, m.end))
                .collect(),
            fatal: None,
            on_event,
            waker,
            pwr_base,
            warn_at: None,
            guard,
            tracker: None,
            runner_wrote: Vec::new(),
        })
    }

    /// Run `f` with the injection stub written at the scratch address, then put the bytes back.
    fn with_stub<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        let mut orig = [0u8; 3];
        self.mem.read(self.stub, &mut orig)?;
        self.mem.write(self.stub, &sys::STUB)?;
        let r = f(self);
        let back = self.mem.write(self.stub, &orig);
        let v = r?;
        back?;
        Ok(v)
    }

    fn inject(&mut self, tid: i32, what: &str, n: u64, args: [u64; 6]) -> Result<u64> {
        let mut sigs = Vec::new();
        let r = sys::inject_ok(tid, self.stub, what, n, args, &mut sigs);
        for s in sigs {
            // Re-raise signals that arrived during the injection for ordinary delivery.
            // SAFETY: tgkill to our own tracee.
            unsafe { libc::syscall(libc::SYS_tgkill, self.pid, tid, s) };
        }
        r
    }

    /// Replace `[addr, addr+len)` of the program by a shared mapping of a fresh image extent,
    /// copying the bytes first when `copy`. Thread `tid` must be stopped (not at an entry).
    fn rehome(&mut self, tid: i32, addr: u64, len: u64, prot: i32, copy: bool) -> Result<()> {
        let off = self.img.alloc(len)?;
        if copy {
            let dst = self.img.bytes_mut(off, len);
            copy_out(&self.mem, addr, dst);
        }
        let res = self.with_stub(|r| {
            r.inject(
                tid,
                "mmap of the image",
                nr::MMAP,
                [
                    addr,
                    len,
                    prot as u64,
                    (libc::MAP_SHARED | libc::MAP_FIXED) as u64,
                    IMAGE_FD as u64,
                    off,
                ],
            )
        });
        match res {
            Ok(a) if a == addr => {
                self.img.segs.insert(addr, (len, off));
                if copy {
                    self.runner_wrote.push((off, len));
                }
                if let Some(t) = &self.tracker {
                    t.watch(addr, len)?;
                }
                Ok(())
            }
            Ok(a) => Err(WspError::ptrace(
                "mmap of the image",
                tid,
                format!("expected {addr:#x}, got {a:#x}"),
            )),
            Err(e) => {
                self.img.release(off, len, true);
                Err(e)
            }
        }
    }

    /// At the exec stop: every private writable mapping into the image.
    fn rehome_initial(&mut self) -> Result<()> {
        let maps = sys::read_maps(self.pid)?;
        for (i, m) in maps.iter().enumerate() {
            if m.special() || m.shared || !m.write {
                continue;
            }
            let (mut start, end) = (m.start, m.end);
            if m.path == "[stack]" {
                let floor = if i > 0 { maps[i - 1].end } else { 0 };
                let want = end.saturating_sub(STACK_RESERVE);
                if want >= floor && want < start {
                    start = want;
                }
                // Copy the live part; the reserve below it reads as zeros.
                let off = self.img.alloc(end - start)?;
                let live = m.end - m.start;
                let dst = self.img.bytes_mut(off + (m.start - start), live);
                copy_out(&self.mem, m.start, dst);
                let pid = self.pid;
                let res = self.with_stub(|r| {
                    r.inject(
                        pid,
                        "mmap of the stack",
                        nr::MMAP,
                        [
                            start,
                            end - start,
                            m.prot() as u64,
                            (libc::MAP_SHARED | libc::MAP_FIXED) as u64,
                            IMAGE_FD as u64,
                            off,
                        ],
                    )
                })?;
                if res != start {
                    return Err(WspError::ptrace(
                        "mmap of the stack",
                        pid,
                        format!("got {res:#x}"),
                    ));
                }
                self.img.segs.insert(start, (end - start, off));
                self.runner_wrote.push((off + (m.start - start), live));
                continue;
            }
            self.rehome(self.pid, start, end - start, m.prot(), true)?;
        }
        Ok(())
    }

    /// Start write tracking of every image segment (write_back = tracked, image mode).
    fn start_tracking(&mut self) -> Result<()> {
        let pid = self.pid;
        let remote = self.with_stub(|r| {
            r.inject(
                pid,
                "userfaultfd",
                323,
                [
                    (libc::O_CLOEXEC | libc::O_NONBLOCK | 1) as u64,
                    0,
                    0,
                    0,
                    0,
                    0,
                ],
            )
        })? as i32;
        let t = crate::track::Tracker::adopt(pid, remote);
        self.with_stub(|r| r.inject(pid, "close", 3, [remote as u64, 0, 0, 0, 0, 0]))?;
        let t = t?;
        for (&a, &(l, _)) in &self.img.segs {
            t.watch(a, l)?;
        }
        self.tracker = Some(t);
        Ok(())
    }

    fn warning_due(&self) -> Option<(u64, &'static str)> {
        let (n, at) = signals::pwr_seen();
        if self.pwr_base.is_some_and(|base| n > base) {
            return Some((at, "sigpwr"));
        }
        if let Some(w) = self.warn_at
            && sys::monotonic_ns() >= w
        {
            return Some((sys::monotonic_ns(), "injected"));
        }
        None
    }

    fn supervise(&mut self) -> Result<RunEnd> {
        loop {
            while let Some((tid, st)) = sys::wait(-1, true)? {
                if let Some(end) = self.handle(tid, st, false)? {
                    return Ok(end);
                }
            }
            if let Some((t0, source)) = self.warning_due() {
                return self.save(t0, source);
            }
            let timeout = match self.warn_at {
                Some(w) => (w.saturating_sub(sys::monotonic_ns()) / 1_000_000).min(100) as i32,
                None => 100,
            };
            self.waker.wait(timeout.max(1));
        }
    }

    fn thread(&mut self, tid: i32) -> &mut Thread {
        self.threads
            .entry(tid)
            .or_insert_with(|| Thread::new(sys::ns_tid(tid).unwrap_or(0)))
    }

    /// One wait status. `stopping`: a save is gathering the threads, so stops are kept.
    fn handle(&mut self, tid: i32, st: Status, stopping: bool) -> Result<Option<RunEnd>> {
        match st {
            Status::Exited(c) => {
                self.threads.remove(&tid);
                if tid == self.pid {
                    return self.ended(RunEnd::Exited(c), c).map(Some);
                }
            }
            Status::Signaled(s) => {
                self.threads.remove(&tid);
                if tid == self.pid {
                    let s = self.fatal.unwrap_or(s);
                    return self.ended(RunEnd::Killed(s), 128 + s).map(Some);
                }
            }
            Status::Stopped { sig, event } => {
                self.thread(tid);
                match event {
                    e if e == libc::PTRACE_EVENT_SECCOMP => {
                        if stopping {
                            self.thread(tid).stop = Stop::Entry;
                        } else {
                            self.on_seccomp(tid)?;
                        }
                    }
                    e if e == libc::PTRACE_EVENT_CLONE => {
                        let new = sys::event_msg(tid)? as i32;
                        let regs = sys::get_regs(tid)?;
                        let th = self.thread(new);
                        th.clone_flags = regs.rdi;
                        if regs.rdi & CLONE_CHILD_CLEARTID != 0 {
                            th.clear_child_tid = regs.r10;
                        }
                        sys::cont(tid, 0)?;
                        if stopping {
                            sys::interrupt(tid)?;
                        }
                    }
                    sys::PTRACE_EVENT_STOP => {
                        if stopping {
                            self.thread(tid).stop = Stop::Plain;
                        } else {
                            sys::cont(tid, 0)?;
                        }
                    }
                    0 if sig == (libc::SIGTRAP | 0x80) => {
                        self.on_sys_exit(tid)?;
                        if stopping {
                            self.thread(tid).stop = Stop::Plain;
                        } else {
                            sys::cont(tid, 0)?;
                        }
                    }
                    0 if self.kills(sig) => {
                        // What the kernel does to an ordinary process; pid 1 of a namespace would
                        // survive it (and a fault would repeat for ever).
                        self.fatal = Some(sig);
                        // SAFETY: killing our own tracee.
                        unsafe { libc::kill(self.pid, libc::SIGKILL) };
                        let _ = sys::cont(tid, 0);
                    }
                    0 => {
                        sys::cont(tid, sig)?;
                        if stopping {
                            sys::interrupt(tid)?;
                        }
                    }
                    _ => {
                        if stopping {
                            self.thread(tid).stop = Stop::Plain;
                        } else {
                            sys::cont(tid, 0)?;
                        }
                    }
                }
            }
        }
        Ok(None)
    }

    /// Whether `sig`, delivered now, ends the program: its default action is to terminate and
    /// the program installed no handler (faults end it even when ignored).
    fn kills(&self, sig: i32) -> bool {
        let handler = self.sigactions.get(&sig).map_or(0, |a| a.handler);
        let fault = matches!(
            sig,
            libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE
        );
        let default_ignores = matches!(
            sig,
            libc::SIGCHLD
                | libc::SIGCONT
                | libc::SIGSTOP
                | libc::SIGTSTP
                | libc::SIGTTIN
                | libc::SIGTTOU
                | libc::SIGURG
                | libc::SIGWINCH
        );
        (handler == 0 && !default_ignores) || (fault && handler == 1)
    }

    fn on_seccomp(&mut self, tid: i32) -> Result<()> {
        let mut regs = sys::get_regs(tid)?;
        let image = self.mode == SaveMode::Image;
        let mut trace_exit = None;
        match regs.orig_rax {
            nr::MMAP if image => {
                let fixed = regs.r10 as i32 & libc::MAP_FIXED != 0;
                trace_exit = Some(Pending::Mmap {
                    len: regs.rsi,
                    prot: regs.rdx,
                    flags: regs.r10,
                    taken: if fixed {
                        self.img
                            .take_range(sys::page_down(regs.rdi), sys::page_up(regs.rsi))
                    } else {
                        vec![]
                    },
                });
            }
            nr::MUNMAP if image => {
                let (addr, len) = (regs.rdi, regs.rsi);
                trace_exit = Some(Pending::Munmap {
                    taken: self
                        .img
                        .take_range(sys::page_down(addr), sys::page_up(len + (addr & 4095))),
                });
            }
            nr::MADVISE if image && matches!(regs.rdx, 4 | 9) => {
                // MADV_DONTNEED / MADV_REMOVE: anonymous memory reads as zeros afterwards; a
                // shared mapping would show the old bytes, so the image pages are punched out.
                trace_exit = Some(Pending::Madvise {
                    addr: regs.rdi,
                    len: regs.rsi,
                });
            }
            nr::BRK => {
                let req = regs.rdi;
                let taken = if image && req != 0 && self.brk != 0 && req < self.brk {
                    let (a, b) = (sys::page_up(req), sys::page_up(self.brk));
                    if b > a {
                        self.img.take_range(a, b - a)
                    } else {
                        vec![]
                    }
                } else {
                    vec![]
                };
                trace_exit = Some(Pending::Brk { req, taken });
            }
            nr::RT_SIGACTION => {
                let sig = regs.rdi as i32;
                if regs.rsi != 0 && (1..=64).contains(&sig) {
                    let mut b = [0u8; 32];
                    if self.mem.read(regs.rsi, &mut b).is_ok() {
                        let w = |i: usize| {
                            u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]))
                        };
                        self.sigactions.insert(
                            sig,
                            SigAct {
                                sig,
                                handler: w(0),
                                flags: w(1),
                                restorer: w(2),
                                mask: w(3),
                            },
                        );
                    }
                }
            }
            nr::SET_TID_ADDRESS => self.thread(tid).clear_child_tid = regs.rdi,
            nr::SET_ROBUST_LIST => self.thread(tid).robust = (regs.rdi, regs.rsi),
            nr::RSEQ => {
                self.thread(tid).rseq = if regs.rdx & 1 != 0 {
                    (0, 0, 0)
                } else {
                    (regs.rdi, regs.rsi as u32, regs.r10 as u32)
                };
            }
            nr::CLONE3 | nr::EXECVE | nr::EXECVEAT => {
                // Refused. clone3: glibc falls back to clone, whose arguments are in registers;
                // exec: the image would no longer describe the program.
                regs.orig_rax = u64::MAX;
                regs.rax = (-libc::ENOSYS) as i64 as u64;
                sys::set_regs(tid, &regs)?;
            }
            _ => {}
        }
        if let Some(p) = trace_exit {
            self.thread(tid).pending = Some(p);
            sys::cont_syscall(tid)
        } else {
            sys::cont(tid, 0)
        }
    }

    fn on_sys_exit(&mut self, tid: i32) -> Result<()> {
        let Some(p) = self.thread(tid).pending.take() else {
            return Ok(());
        };
        let regs = sys::get_regs(tid)?;
        let res = regs.rax as i64;
        match p {
            Pending::Mmap {
                len,
                prot,
                flags,
                taken,
            } => {
                if (-4095..0).contains(&res) {
                    self.img.restore_taken(&taken);
                    return Ok(());
                }
                self.img.release_taken(&taken);
                let addr = res as u64;
                let len = sys::page_up(len);
                let flags = flags as i32;
                let anon = flags & libc::MAP_ANONYMOUS != 0;
                let shared = flags & libc::MAP_SHARED != 0;
                // Nothing of ours can be here (the kernel found the range free, or a MAP_FIXED
                // took it above); an entry would be stale: dropped, its extent never reused.
                self.img.forget_range(addr, len);
                if anon || (!shared && prot as i32 & libc::PROT_WRITE != 0) {
                    // Best effort: a mapping left anonymous is copied by the save instead.
                    match self.rehome(tid, addr, len, prot as i32, !anon) {
                        Ok(()) => {}
                        Err(e @ WspError::Gone { .. }) => return Err(e),
                        Err(_) => {}
                    }
                }
            }
            Pending::Munmap { taken } => {
                if res == 0 {
                    self.img.release_taken(&taken);
                } else {
                    self.img.restore_taken(&taken);
                }
            }
            Pending::Madvise { addr, len } => {
                if res == 0 {
                    self.img
                        .zero_range(sys::page_down(addr), sys::page_up(len + (addr & 4095)));
                }
            }
            Pending::Brk { req, taken } => {
                let new = res as u64;
                let old = self.brk;
                if !taken.is_empty() {
                    if new == req {
                        self.img.release_taken(&taken);
                    } else {
                        self.img.restore_taken(&taken);
                    }
                }
                if self.mode == SaveMode::Image && old != 0 {
                    let (a, b) = (sys::page_up(old), sys::page_up(new));
                    if b > a {
                        match self.rehome(tid, a, b - a, libc::PROT_READ | libc::PROT_WRITE, false)
                        {
                            Ok(()) => {}
                            Err(e @ WspError::Gone { .. }) => return Err(e),
                            Err(_) => {}
                        }
                    }
                }
                self.brk = new;
            }
        }
        Ok(())
    }

    fn ended(&mut self, end: RunEnd, status: i32) -> Result<RunEnd> {
        self.guard.armed = false;
        // Reap whatever is left (threads already gone with the leader).
        while let Ok(Some(_)) = sys::wait(-1, true) {}
        let mut meta = self.meta.clone();
        meta.exit = Some(status);
        self.img.clear_marker();
        self.img.commit(&meta, STATE_ENDED, status)?;
        (self.on_event)(&Event::Exited(status));
        Ok(end)
    }

    /// The save: stop every thread, write contexts and tables, optionally write back, then the
    /// marker if still inside the window.
    fn save(&mut self, t0: u64, source: &str) -> Result<RunEnd> {
        (self.on_event)(&Event::Warning {
            source: source.into(),
        });
        let tids: Vec<i32> = self.threads.keys().copied().collect();
        for t in tids {
            if self.threads.get(&t).map(|th| th.stop) == Some(Stop::Running) && !sys::interrupt(t)?
            {
                self.threads.remove(&t);
            }
        }
        while self.threads.values().any(|t| t.stop == Stop::Running) {
            let Some((tid, st)) = sys::wait(-1, false)? else {
                return Err(WspError::Gone {
                    detail: "no tracee left while stopping for the save".into(),
                });
            };
            if let Some(end) = self.handle(tid, st, true)? {
                return Ok(end);
            }
        }
        let stop_ns = elapsed(t0);
        let mut report = self.write_state()?;
        report.stop_ns = stop_ns;
        report.context_ns = elapsed(t0);
        // Write-back of the program's memory (image mode; hibernate copies were flushed below).
        let mut wb = report.written_back_bytes;
        if self.write_back == WriteBack::Tracked && self.tracker.is_some() {
            let mut ranges = std::mem::take(&mut self.runner_wrote);
            if let Some(t) = &self.tracker {
                for (&a, &(l, o)) in &self.img.segs {
                    for (wa, wl) in t.written(a, l)? {
                        ranges.push((o + (wa - a), wl));
                    }
                }
            }
            for (o, l) in ranges {
                self.img.flush(o, l);
                wb += l;
            }
            pmem::cpu::store_fence();
        }
        if self.write_back == WriteBack::All {
            for s in &self.meta.segments {
                if s.kind == SegmentKind::Reserve {
                    continue;
                }
                for (o, l) in self.img.data_ranges(s.offset, s.len) {
                    self.img.flush(o, l);
                    wb += l;
                }
            }
            pmem::cpu::store_fence();
        }
        report.written_back_bytes = wb;
        let budget = self.window.budget().as_nanos() as u64;
        report.window_ns = self.window.total().as_nanos() as u64;
        let meta = self.meta.clone();
        let in_window = elapsed(t0) < budget;
        if in_window {
            let enc = self.img.commit(&meta, STATE_SAVED, 0)?;
            self.img.set_marker(meta.counter, &enc);
        } else {
            self.img.clear_marker();
            self.img.commit(&meta, STATE_MISSED, 0)?;
        }
        report.marker_ns = elapsed(t0);
        report.in_window = in_window;
        let ev = if in_window {
            Event::Saved(report.clone())
        } else {
            Event::Missed(report.clone())
        };
        (self.on_event)(&ev);
        self.after()?;
        Ok(if in_window {
            RunEnd::Saved(report)
        } else {
            RunEnd::Missed(report)
        })
    }

    /// Hold the stopped program until it is gone, or kill it.
    fn after(&mut self) -> Result<()> {
        if self.after_save == AfterSave::Kill {
            // SAFETY: killing our own tracee (the init of its namespace: all of it goes).
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
        }
        loop {
            match sys::wait(-1, false)? {
                None => break,
                Some((tid, Status::Exited(_) | Status::Signaled(_))) if tid == self.pid => break,
                Some(_) => {}
            }
        }
        while let Ok(Some(_)) = sys::wait(-1, true) {}
        self.guard.armed = false;
        Ok(())
    }

    /// Contexts, segments and descriptors into the metadata (not yet committed).
    fn write_state(&mut self) -> Result<SaveReport> {
        let mut threads = Vec::new();
        let gtids: Vec<i32> = self.threads.keys().copied().collect();
        for g in gtids {
            let th = self.threads[&g].clone();
            let mut regs = sys::get_regs(g)?;
            normalise(&mut regs, th.stop);
            let xstate = sys::get_xstate(g)?;
            let sigmask = sys::get_sigmask(g)?;
            threads.push(ThreadCtx {
                tid: th.ltid,
                regs: regs.to_words(),
                xstate: hex(&xstate),
                sigmask,
                clear_child_tid: th.clear_child_tid,
                robust_head: th.robust.0,
                robust_len: th.robust.1,
                rseq_ptr: th.rseq.0,
                rseq_len: th.rseq.1,
                rseq_sig: th.rseq.2,
                clone_flags: th.clone_flags,
                exit_words: self.exit_words(th.clear_child_tid, th.robust.0),
            });
        }
        threads.sort_by_key(|t| t.tid);
        let maps = sys::read_maps(self.pid)?;
        let mut segments = Vec::new();
        let mut not_restorable = Vec::new();
        let mut copied = 0u64;
        let mut image_bytes = 0u64;
        let img_path = self.img.path.to_string_lossy().into_owned();
        for m in &maps {
            if m.special() {
                continue;
            }
            let len = m.end - m.start;
            let is_image = m.inode == self.img_inode && m.inode != 0 && m.shared;
            if is_image {
                segments.push(Segment {
                    addr: m.start,
                    len,
                    prot: image::prot_str(m.prot()),
                    kind: SegmentKind::Image,
                    offset: m.offset,
                    name: String::new(),
                });
                image_bytes += len;
                continue;
            }
            if m.inode == self.prog_inode
                && !m.write
                && !m.shared
                && self
                    .fresh_ro
                    .iter()
                    .any(|&(a, b)| a <= m.start && m.end <= b)
            {
                continue;
            }
            if m.shared {
                not_restorable.push(format!(
                    "shared mapping of {} at {:#x}-{:#x}",
                    if m.path.is_empty() {
                        "anonymous memory"
                    } else {
                        &m.path
                    },
                    m.start,
                    m.end
                ));
                continue;
            }
            if m.read {
                let off = self.img.alloc(len)?;
                copy_to_image(self.pid, &self.mem, m.start, len, &mut self.img, off)?;
                copied += len;
                image_bytes += len;
                segments.push(Segment {
                    addr: m.start,
                    len,
                    prot: image::prot_str(m.prot()),
                    kind: SegmentKind::Copied,
                    offset: off,
                    name: m.path.clone(),
                });
            } else {
                segments.push(Segment {
                    addr: m.start,
                    len,
                    prot: image::prot_str(m.prot()),
                    kind: SegmentKind::Reserve,
                    offset: 0,
                    name: m.path.clone(),
                });
            }
        }
        let _ = img_path;
        // No two segments may share image bytes: if they did, the run has gone wrong and a
        // resume would corrupt the program, so the save names it and resume refuses.
        let mut by_off: Vec<(u64, u64, u64)> = segments
            .iter()
            .filter(|s| s.kind != SegmentKind::Reserve)
            .map(|s| (s.offset, s.len, s.addr))
            .collect();
        by_off.sort();
        for w in by_off.windows(2) {
            if w[0].0 + w[0].1 > w[1].0 {
                not_restorable.push(format!(
                    "image bytes at {:#x} are mapped at both {:#x} and {:#x}",
                    w[1].0, w[0].2, w[1].2
                ));
            }
        }
        if copied > 0 && self.mode == SaveMode::Hibernate {
            pmem::cpu::store_fence();
            // The baseline's fsync (a no-op on tmpfs, a real write on a disk file).
            self.img
                .file
                .sync_data()
                .map_err(|e| WspError::io("fsync image", &self.img.path, e))?;
        }
        let files = self.files(&mut not_restorable);
        self.meta.counter += 1;
        self.meta.brk = self.brk;
        self.meta.threads = threads;
        self.meta.segments = segments;
        self.meta.files = files;
        self.meta.sigactions = self.sigactions.values().cloned().collect();
        self.meta.not_restorable = not_restorable.clone();
        Ok(SaveReport {
            counter: self.meta.counter,
            threads: self.meta.threads.len(),
            image_bytes,
            written_back_bytes: if self.mode == SaveMode::Hibernate {
                copied
            } else {
                0
            },
            stop_ns: 0,
            context_ns: 0,
            marker_ns: 0,
            window_ns: 0,
            in_window: false,
            not_restorable,
            copied_bytes: copied,
        })
    }

    /// The words a dying thread's exit writes: its clear_child_tid word, and the futex word of
    /// every robust-list entry and of the pending one (at most 256 entries).
    fn exit_words(&self, clear_child_tid: u64, robust_head: u64) -> Vec<(u64, u32)> {
        let mut out = Vec::new();
        let word = |addr: u64, out: &mut Vec<(u64, u32)>| {
            let mut b = [0u8; 4];
            if addr != 0 && self.mem.read(addr, &mut b).is_ok() {
                out.push((addr, u32::from_le_bytes(b)));
            }
        };
        word(clear_child_tid, &mut out);
        if robust_head == 0 {
            return out;
        }
        let mut h = [0u8; 24];
        if self.mem.read(robust_head, &mut h).is_err() {
            return out;
        }
        let u = |b: &[u8], i: usize| {
            u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]))
        };
        let (mut next, offset, pending) = (u(&h, 0), u(&h, 1) as i64, u(&h, 2));
        let mut n = 0;
        while next != robust_head && next != 0 && n < 256 {
            word(next.wrapping_add_signed(offset), &mut out);
            let mut e = [0u8; 8];
            if self.mem.read(next, &mut e).is_err() {
                break;
            }
            next = u64::from_le_bytes(e);
            n += 1;
        }
        if pending != 0 {
            word(pending.wrapping_add_signed(offset), &mut out);
        }
        out
    }

    /// The descriptor table from /proc/PID/fd and fdinfo.
    fn files(&self, not_restorable: &mut Vec<String>) -> Vec<FileEntry> {
        let dir = format!("/proc/{}/fd", self.pid);
        let mut out = Vec::new();
        let Ok(rd) = std::fs::read_dir(&dir) else {
            not_restorable.push(format!("descriptor table ({dir} unreadable)"));
            return out;
        };
        let mut fds: Vec<i32> = rd
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        fds.sort();
        for fd in fds {
            if fd == IMAGE_FD {
                continue;
            }
            let link = std::fs::read_link(format!("{dir}/{fd}"))
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            let md = std::fs::metadata(format!("{dir}/{fd}"));
            let info = std::fs::read_to_string(format!("/proc/{}/fdinfo/{fd}", self.pid))
                .unwrap_or_default();
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.trim().to_string())
                    .unwrap_or_default()
            };
            let offset = field("pos:").parse::<u64>().unwrap_or(0);
            let flags = i32::from_str_radix(&field("flags:"), 8).unwrap_or(0);
            let deleted = link.ends_with(" (deleted)");
            let ft = md.as_ref().map(|m| m.file_type()).ok();
            use std::os::unix::fs::FileTypeExt;
            let kind = match ft {
                Some(t) if t.is_file() && !deleted && link.starts_with('/') => "file",
                Some(t) if t.is_char_device() && link.starts_with('/') && fd > 2 => "char",
                _ if fd <= 2 => "inherited",
                _ => {
                    not_restorable.push(format!("fd {fd}: {link}"));
                    continue;
                }
            };
            out.push(FileEntry {
                fd,
                path: link,
                flags: flags & !O_CLOEXEC_BIT,
                offset,
                cloexec: flags & O_CLOEXEC_BIT != 0,
                kind: kind.into(),
            });
        }
        out
    }

    /// At the exec stop of a resume: put memory, handlers and threads back. Returns the number
    /// of threads.
    fn restore(&mut self, pid: i32) -> Result<usize> {
        let meta = self.meta.clone();
        self.brk = if meta.brk != 0 {
            meta.brk
        } else {
            start_brk(pid)?
        };
        for s in &meta.sigactions {
            self.sigactions.insert(s.sig, s.clone());
        }
        self.with_stub(|r| r.restore_inner(pid, &meta))
    }

    fn restore_inner(&mut self, pid: i32, meta: &Meta) -> Result<usize> {
        if meta.brk != 0 {
            let got = self.inject(pid, "brk", nr::BRK, [meta.brk, 0, 0, 0, 0, 0])?;
            if got != meta.brk {
                return Err(WspError::ptrace(
                    "brk to the saved break",
                    pid,
                    format!("expected {:#x}, got {got:#x}", meta.brk),
                ));
            }
        }
        // Fresh writable mappings the saved segments do not cover go.
        let maps = sys::read_maps(pid)?;
        let mut covered: Vec<(u64, u64)> = meta
            .segments
            .iter()
            .map(|s| (s.addr, s.addr + s.len))
            .collect();
        covered.sort();
        for m in maps
            .iter()
            .filter(|m| !m.special() && (m.write || m.path == "[heap]" || m.path == "[stack]"))
        {
            let mut at = m.start;
            for &(a, b) in &covered {
                if b <= at || a >= m.end {
                    continue;
                }
                if a > at {
                    self.inject(pid, "munmap", nr::MUNMAP, [at, a - at, 0, 0, 0, 0])?;
                }
                at = at.max(b);
            }
            if at < m.end {
                self.inject(pid, "munmap", nr::MUNMAP, [at, m.end - at, 0, 0, 0, 0])?;
            }
        }
        for s in &meta.segments {
            let prot = image::prot_parse(&s.prot).ok_or_else(|| WspError::Damaged {
                what: "segment prot",
                offset: META_OFFSET,
                expected: "rwx-style protection".into(),
                found: s.prot.clone(),
            })? as u64;
            if s.len == 0 || s.len % 4096 != 0 || s.addr % 4096 != 0 {
                return Err(WspError::Damaged {
                    what: "segment",
                    offset: META_OFFSET,
                    expected: "page-aligned address and length".into(),
                    found: format!("{:#x}+{:#x}", s.addr, s.len),
                });
            }
            if s.kind != SegmentKind::Reserve && s.offset.saturating_add(s.len) > self.img.len() {
                return Err(WspError::Damaged {
                    what: "segment offset",
                    offset: META_OFFSET,
                    expected: format!("inside the image ({} bytes)", self.img.len()),
                    found: format!("{:#x}+{:#x}", s.offset, s.len),
                });
            }
            let fixed = libc::MAP_FIXED as u64;
            match (s.kind, self.mode) {
                (SegmentKind::Reserve, _) => {
                    self.inject(
                        pid,
                        "mmap of a reservation",
                        nr::MMAP,
                        [
                            s.addr,
                            s.len,
                            prot,
                            (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE) as u64
                                | fixed,
                            u64::MAX,
                            0,
                        ],
                    )?;
                }
                (_, SaveMode::Image) => {
                    let got = self.inject(
                        pid,
                        "mmap of a segment",
                        nr::MMAP,
                        [
                            s.addr,
                            s.len,
                            prot,
                            libc::MAP_SHARED as u64 | fixed,
                            IMAGE_FD as u64,
                            s.offset,
                        ],
                    )?;
                    if got != s.addr {
                        return Err(WspError::ptrace(
                            "mmap of a segment",
                            pid,
                            format!("got {got:#x}"),
                        ));
                    }
                }
                (_, SaveMode::Hibernate) => {
                    self.inject(
                        pid,
                        "mmap of a segment",
                        nr::MMAP,
                        [
                            s.addr,
                            s.len,
                            (libc::PROT_READ | libc::PROT_WRITE) as u64,
                            (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64 | fixed,
                            u64::MAX,
                            0,
                        ],
                    )?;
                    let bytes = self.img.bytes_mut(s.offset, s.len).to_vec();
                    self.mem.write(s.addr, &bytes)?;
                    if prot != (libc::PROT_READ | libc::PROT_WRITE) as u64 {
                        self.inject(
                            pid,
                            "mprotect",
                            nr::MPROTECT,
                            [s.addr, s.len, prot, 0, 0, 0],
                        )?;
                    }
                }
            }
        }
        // Undo what the saved process's death wrote into its (shared) memory.
        for t in &meta.threads {
            for &(addr, v) in &t.exit_words {
                self.mem.write(addr, &v.to_le_bytes())?;
                if let Some((&a, &(l, o))) = self.img.segs.range(..=addr).next_back()
                    && addr + 4 <= a + l
                {
                    self.runner_wrote.push((o + (addr - a), 4));
                }
            }
        }
        // A scratch page for the structures the injected calls read.
        let scr = self.inject(
            pid,
            "mmap of a scratch page",
            nr::MMAP,
            [
                0,
                4096,
                (libc::PROT_READ | libc::PROT_WRITE) as u64,
                (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64,
                u64::MAX,
                0,
            ],
        )?;
        for s in &meta.sigactions {
            let mut b = Vec::with_capacity(32);
            for w in [s.handler, s.flags, s.restorer, s.mask] {
                b.extend_from_slice(&w.to_le_bytes());
            }
            self.mem.write(scr, &b)?;
            self.inject(
                pid,
                "rt_sigaction",
                nr::RT_SIGACTION,
                [s.sig as u64, scr, 0, 8, 0, 0],
            )?;
        }
        let main_ctx = meta
            .threads
            .iter()
            .find(|t| t.tid == 1)
            .ok_or_else(|| WspError::NotRestorable {
                objects: vec!["main thread".into()],
            })?
            .clone();
        self.thread_kernel_state(pid, &main_ctx)?;
        {
            let th = self.thread(pid);
            th.ltid = 1;
            th.clone_flags = main_ctx.clone_flags;
        }
        for t in meta.threads.iter().filter(|t| t.tid != 1) {
            let flags = if t.clone_flags != 0 {
                t.clone_flags
            } else {
                GLIBC_THREAD_FLAGS
            } & !(CLONE_SETTLS | CLONE_PARENT_SETTID | CLONE_CHILD_SETTID);
            let args: [u64; 11] = [
                flags
                    | if t.clear_child_tid != 0 {
                        CLONE_CHILD_CLEARTID
                    } else {
                        0
                    },
                0,
                t.clear_child_tid,
                0,
                0,
                0,
                0,
                0,
                scr + 256,
                1,
                0,
            ];
            let mut b = Vec::with_capacity(88);
            for w in args {
                b.extend_from_slice(&w.to_le_bytes());
            }
            self.mem.write(scr + 64, &b)?;
            self.mem.write(scr + 256, &(t.tid as u64).to_le_bytes())?;
            let got = self.inject(
                pid,
                "clone3 with set_tid",
                nr::CLONE3,
                [scr + 64, 88, 0, 0, 0, 0],
            )?;
            if got != t.tid as u64 {
                return Err(WspError::ptrace(
                    "clone3 with set_tid",
                    pid,
                    format!("expected tid {}, got {got}", t.tid),
                ));
            }
            // The new thread reports its first stop.
            let gtid = loop {
                match sys::wait(-1, false)? {
                    Some((g, Status::Stopped { .. })) if !self.threads.contains_key(&g) => break g,
                    Some((g, Status::Stopped { .. })) => sys::cont(g, 0)?,
                    Some((_, st)) => {
                        return Err(WspError::Gone {
                            detail: format!("while recreating thread {}: {st:?}", t.tid),
                        });
                    }
                    None => {
                        return Err(WspError::Gone {
                            detail: "no child while recreating threads".into(),
                        });
                    }
                }
            };
            let mut th = Thread::new(t.tid);
            th.stop = Stop::Plain;
            th.clone_flags = t.clone_flags;
            th.clear_child_tid = t.clear_child_tid;
            self.threads.insert(gtid, th);
            self.thread_kernel_state(gtid, t)?;
            set_context(gtid, t)?;
        }
        for f in meta
            .files
            .iter()
            .filter(|f| f.cloexec && f.kind != "inherited")
        {
            self.inject(
                pid,
                "fcntl F_SETFD",
                nr::FCNTL,
                [
                    f.fd as u64,
                    libc::F_SETFD as u64,
                    libc::FD_CLOEXEC as u64,
                    0,
                    0,
                    0,
                ],
            )?;
        }
        self.inject(
            pid,
            "munmap of the scratch page",
            nr::MUNMAP,
            [scr, 4096, 0, 0, 0, 0],
        )?;
        set_context(pid, &main_ctx)?;
        Ok(meta.threads.len())
    }

    /// set_tid_address, set_robust_list and rseq of one thread, injected in it.
    fn thread_kernel_state(&mut self, gtid: i32, t: &ThreadCtx) -> Result<()> {
        if t.clear_child_tid != 0 {
            self.inject(
                gtid,
                "set_tid_address",
                nr::SET_TID_ADDRESS,
                [t.clear_child_tid, 0, 0, 0, 0, 0],
            )?;
        }
        if t.robust_head != 0 {
            self.inject(
                gtid,
                "set_robust_list",
                nr::SET_ROBUST_LIST,
                [t.robust_head, t.robust_len, 0, 0, 0, 0],
            )?;
        }
        if t.rseq_ptr != 0 {
            // A refused rseq leaves glibc's stale cpu id in place, which is harmless.
            let _ = self.inject(
                gtid,
                "rseq",
                nr::RSEQ,
                [t.rseq_ptr, t.rseq_len as u64, 0, t.rseq_sig as u64, 0, 0],
            );
        }
        let th = self.thread(gtid);
        th.clear_child_tid = t.clear_child_tid;
        th.robust = (t.robust_head, t.robust_len);
        th.rseq = (t.rseq_ptr, t.rseq_len, t.rseq_sig);
        Ok(())
    }
}

fn set_context(gtid: i32, t: &ThreadCtx) -> Result<()> {
    let mut regs = Regs::from_words(&t.regs).ok_or_else(|| WspError::Damaged {
        what: "thread regs",
        offset: META_OFFSET,
        expected: format!("{} words", sys::REGS_WORDS),
        found: format!("{} words", t.regs.len()),
    })?;
    regs.orig_rax = u64::MAX;
    let x = unhex(&t.xstate).ok_or_else(|| WspError::Damaged {
        what: "thread xstate",
        offset: META_OFFSET,
        expected: "hex digits".into(),
        found: format!("{} characters", t.xstate.len()),
    })?;
    sys::set_regs(gtid, &regs)?;
    sys::set_xstate(gtid, &x)?;
    sys::set_sigmask(gtid, t.sigmask)
}

/// Make a stopped thread's registers resumable: a system call that was about to run, or was
/// interrupted with a restart code, is re-issued (rip back over the 2-byte `syscall`).
fn normalise(regs: &mut Regs, stop: Stop) {
    let rax = regs.rax as i64;
    if stop == Stop::Entry
        || ((regs.orig_rax as i64) >= 0 && matches!(rax, -512 | -513 | -514 | -516))
    {
        regs.rax = regs.orig_rax;
        regs.rip -= 2;
    }
    regs.orig_rax = u64::MAX;
}

fn hex(b: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(D[(x >> 4) as usize] as char);
        s.push(D[(x & 15) as usize] as char);
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    let v = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    s.as_bytes()
        .chunks(2)
        .map(|p| Some(v(p[0])? << 4 | v(p[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(unhex(&hex(&b)).unwrap(), b);
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
    }

    #[test]
    fn normalise_reissues_interrupted_calls() {
        let mut r = Regs {
            rax: (-512i64) as u64,
            orig_rax: 202,
            rip: 0x1002,
            ..Regs::default()
        };
        normalise(&mut r, Stop::Plain);
        assert_eq!((r.rax, r.rip, r.orig_rax), (202, 0x1000, u64::MAX));
        let mut r = Regs {
            rax: 5,
            orig_rax: 1,
            rip: 0x1002,
            ..Regs::default()
        };
        normalise(&mut r, Stop::Plain);
        assert_eq!((r.rax, r.rip), (5, 0x1002));
        let mut r = Regs {
            rax: (-38i64) as u64,
            orig_rax: 9,
            rip: 0x1002,
            ..Regs::default()
        };
        normalise(&mut r, Stop::Entry);
        assert_eq!((r.rax, r.rip), (9, 0x1000));
    }

    #[test]
    fn filter_is_well_formed() {
        let f = filter();
        assert!(f.len() < 64);
        // Every jump lands inside the program.
        for (i, ins) in f.iter().enumerate() {
            if ins.code & 0x07 == 0x05 {
                assert!(i + 1 + (ins.jt as usize) < f.len());
                assert!(i + 1 + (ins.jf as usize) < f.len());
            }
        }
    }
}
