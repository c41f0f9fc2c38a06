//! Thin wrappers over ptrace, waiting, `/proc/PID/{maps,mem,fd}` and system-call injection.

use crate::error::{Result, WspError};
use std::fs::File;
use std::os::unix::fs::FileExt;

/// x86-64 system call numbers the runtime uses or watches.
pub(crate) mod nr {
    pub const MMAP: u64 = 9;
    pub const MPROTECT: u64 = 10;
    pub const MUNMAP: u64 = 11;
    pub const BRK: u64 = 12;
    pub const RT_SIGACTION: u64 = 13;
    pub const MREMAP: u64 = 25;
    pub const MADVISE: u64 = 28;
    pub const CLONE: u64 = 56;
    pub const FORK: u64 = 57;
    pub const VFORK: u64 = 58;
    pub const FCNTL: u64 = 72;
    pub const SET_TID_ADDRESS: u64 = 218;
    pub const SET_ROBUST_LIST: u64 = 273;
    pub const RSEQ: u64 = 334;
    pub const CLONE3: u64 = 435;
    pub const EXECVE: u64 = 59;
    pub const EXECVEAT: u64 = 322;
}

pub(crate) const PTRACE_EVENT_STOP: i32 = 128;
const PTRACE_GETSIGMASK: libc::c_uint = 0x420a;
const PTRACE_SETSIGMASK: libc::c_uint = 0x420b;
const NT_X86_XSTATE: usize = 0x202;
/// Room for the XSAVE area (the kernel fills what the CPU has; AVX-512 needs about 2.7 KiB).
const XSTATE_MAX: usize = 16384;

/// `struct user_regs_struct` of x86-64, in the kernel's order.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Regs {
    pub r15: u64,
    pub r14: u64,
    pub r13: u64,
    pub r12: u64,
    pub rbp: u64,
    pub rbx: u64,
    pub r11: u64,
    pub r10: u64,
    pub r9: u64,
    pub r8: u64,
    pub rax: u64,
    pub rcx: u64,
    pub rdx: u64,
    pub rsi: u64,
    pub rdi: u64,
    pub orig_rax: u64,
    pub rip: u64,
    pub cs: u64,
    pub eflags: u64,
    pub rsp: u64,
    pub ss: u64,
    pub fs_base: u64,
    pub gs_base: u64,
    pub ds: u64,
    pub es: u64,
    pub fs: u64,
    pub gs: u64,
}

/// Number of 64-bit words in [`Regs`].
pub(crate) const REGS_WORDS: usize = 27;

impl Regs {
    pub fn to_words(self) -> Vec<u64> {
        // SAFETY: Regs is repr(C) and made of exactly REGS_WORDS u64 fields, no padding.
        let w: [u64; REGS_WORDS] = unsafe { std::mem::transmute(self) };
        w.to_vec()
    }

    pub fn from_words(w: &[u64]) -> Option<Regs> {
        let a: [u64; REGS_WORDS] = w.try_into().ok()?;
        // SAFETY: as in to_words: any bit pattern is a valid Regs.
        Some(unsafe { std::mem::transmute::<[u64; REGS_WORDS], Regs>(a) })
    }
}

fn ptrace_raw(req: libc::c_uint, tid: i32, addr: usize, data: usize) -> libc::c_long {
    // SAFETY: ptrace with integer/pointer arguments the callers build to match `req`; the kernel
    // validates the tid and checks every user pointer it is given.
    unsafe {
        libc::ptrace(
            req,
            tid,
            addr as *mut libc::c_void,
            data as *mut libc::c_void,
        )
    }
}

fn ptrace_ok(what: &str, req: libc::c_uint, tid: i32, addr: usize, data: usize) -> Result<()> {
    if ptrace_raw(req, tid, addr, data) == -1 {
        return Err(WspError::errno(what, tid));
    }
    Ok(())
}

pub(crate) fn seize(pid: i32, options: i32) -> Result<()> {
    ptrace_ok("PTRACE_SEIZE", libc::PTRACE_SEIZE, pid, 0, options as usize)
}

/// Stop a running thread (it reports a `PTRACE_EVENT_STOP`). `Ok(false)` if the thread is gone.
pub(crate) fn interrupt(tid: i32) -> Result<bool> {
    if ptrace_raw(libc::PTRACE_INTERRUPT, tid, 0, 0) == -1 {
        if std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
            return Ok(false);
        }
        return Err(WspError::errno("PTRACE_INTERRUPT", tid));
    }
    Ok(true)
}

pub(crate) fn cont(tid: i32, sig: i32) -> Result<()> {
    ptrace_ok("PTRACE_CONT", libc::PTRACE_CONT, tid, 0, sig as usize)
}

pub(crate) fn cont_syscall(tid: i32) -> Result<()> {
    ptrace_ok("PTRACE_SYSCALL", libc::PTRACE_SYSCALL, tid, 0, 0)
}

pub(crate) fn get_regs(tid: i32) -> Result<Regs> {
    let mut r = Regs::default();
    ptrace_ok(
        "PTRACE_GETREGS",
        libc::PTRACE_GETREGS,
        tid,
        0,
        &mut r as *mut Regs as usize,
    )?;
    Ok(r)
}

pub(crate) fn set_regs(tid: i32, r: &Regs) -> Result<()> {
    ptrace_ok(
        "PTRACE_SETREGS",
        libc::PTRACE_SETREGS,
        tid,
        0,
        r as *const Regs as usize,
    )
}

pub(crate) fn event_msg(tid: i32) -> Result<u64> {
    let mut v: libc::c_ulong = 0;
    ptrace_ok(
        "PTRACE_GETEVENTMSG",
        libc::PTRACE_GETEVENTMSG,
        tid,
        0,
        &mut v as *mut libc::c_ulong as usize,
    )?;
    Ok(v)
}

pub(crate) fn get_xstate(tid: i32) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; XSTATE_MAX];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    ptrace_ok(
        "PTRACE_GETREGSET NT_X86_XSTATE",
        libc::PTRACE_GETREGSET,
        tid,
        NT_X86_XSTATE,
        &mut iov as *mut libc::iovec as usize,
    )?;
    buf.truncate(iov.iov_len);
    Ok(buf)
}

pub(crate) fn set_xstate(tid: i32, x: &[u8]) -> Result<()> {
    let mut copy = x.to_vec();
    let mut iov = libc::iovec {
        iov_base: copy.as_mut_ptr().cast(),
        iov_len: copy.len(),
    };
    ptrace_ok(
        "PTRACE_SETREGSET NT_X86_XSTATE",
        libc::PTRACE_SETREGSET,
        tid,
        NT_X86_XSTATE,
        &mut iov as *mut libc::iovec as usize,
    )
}

pub(crate) fn get_sigmask(tid: i32) -> Result<u64> {
    let mut m: u64 = 0;
    ptrace_ok(
        "PTRACE_GETSIGMASK",
        PTRACE_GETSIGMASK,
        tid,
        8,
        &mut m as *mut u64 as usize,
    )?;
    Ok(m)
}

pub(crate) fn set_sigmask(tid: i32, m: u64) -> Result<()> {
    ptrace_ok(
        "PTRACE_SETSIGMASK",
        PTRACE_SETSIGMASK,
        tid,
        8,
        &m as *const u64 as usize,
    )
}

/// A wait status, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Exited(i32),
    Signaled(i32),
    /// A ptrace stop: the signal number (with 0x80 for syscall stops) and the event.
    Stopped {
        sig: i32,
        event: i32,
    },
}

pub(crate) fn decode(status: i32) -> Status {
    if libc::WIFEXITED(status) {
        Status::Exited(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        Status::Signaled(libc::WTERMSIG(status))
    } else {
        Status::Stopped {
            sig: libc::WSTOPSIG(status),
            event: (status >> 16) & 0xffff,
        }
    }
}

/// `waitpid(pid, __WALL | __WNOTHREAD [| WNOHANG])`: only this thread's children and tracees, so
/// other children of the calling process (another test's compiler, say) are never reaped here.
pub(crate) fn wait(pid: i32, nohang: bool) -> Result<Option<(i32, Status)>> {
    let mut st: libc::c_int = 0;
    let flags = libc::__WALL | libc::__WNOTHREAD | if nohang { libc::WNOHANG } else { 0 };
    loop {
        // SAFETY: waitpid writes the status into our local integer.
        let r = unsafe { libc::waitpid(pid, &mut st, flags) };
        if r == -1 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            if e.raw_os_error() == Some(libc::ECHILD) {
                return Ok(None);
            }
            return Err(WspError::ptrace("waitpid", pid, e.to_string()));
        }
        if r == 0 {
            return Ok(None);
        }
        return Ok(Some((r, decode(st))));
    }
}

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MapLine {
    pub start: u64,
    pub end: u64,
    pub read: bool,
    pub write: bool,
    pub exec: bool,
    pub shared: bool,
    pub offset: u64,
    pub inode: u64,
    pub path: String,
}

impl MapLine {
    pub fn prot(&self) -> i32 {
        (if self.read { libc::PROT_READ } else { 0 })
            | (if self.write { libc::PROT_WRITE } else { 0 })
            | (if self.exec { libc::PROT_EXEC } else { 0 })
    }
    pub fn special(&self) -> bool {
        self.path.starts_with("[v")
    }
}

pub(crate) fn parse_maps(text: &str) -> Vec<MapLine> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut it = line.split_ascii_whitespace();
        let (Some(range), Some(perms), Some(off), Some(_dev), Some(inode)) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        let path = it.collect::<Vec<_>>().join(" ");
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(offset), Ok(inode)) = (
            u64::from_str_radix(a, 16),
            u64::from_str_radix(b, 16),
            u64::from_str_radix(off, 16),
            inode.parse::<u64>(),
        ) else {
            continue;
        };
        let p = perms.as_bytes();
        if p.len() < 4 {
            continue;
        }
        out.push(MapLine {
            start,
            end,
            read: p[0] == b'r',
            write: p[1] == b'w',
            exec: p[2] == b'x',
            shared: p[3] == b's',
            offset,
            inode,
            path,
        });
    }
    out
}

pub(crate) fn read_maps(pid: i32) -> Result<Vec<MapLine>> {
    let p = format!("/proc/{pid}/maps");
    let text = std::fs::read_to_string(&p).map_err(|e| WspError::io("read", &p, e))?;
    Ok(parse_maps(&text))
}

/// The thread's id inside its pid namespace (the last number of `NSpid:`).
pub(crate) fn ns_tid(tid: i32) -> Result<i32> {
    let p = format!("/proc/{tid}/status");
    let text = std::fs::read_to_string(&p).map_err(|e| WspError::io("read", &p, e))?;
    text.lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|rest| rest.split_ascii_whitespace().last())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| WspError::ptrace("NSpid in /proc status", tid, "no NSpid line"))
}

/// `/proc/PID/mem`, opened once per process.
#[derive(Debug)]
pub(crate) struct Mem {
    file: File,
    pid: i32,
}

impl Mem {
    pub fn open(pid: i32) -> Result<Mem> {
        let p = format!("/proc/{pid}/mem");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .map_err(|e| WspError::io("open", &p, e))?;
        Ok(Mem { file, pid })
    }

    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        self.file.read_exact_at(buf, addr).map_err(|e| {
            WspError::ptrace(format!("read memory at {addr:#x}"), self.pid, e.to_string())
        })
    }

    pub fn write(&self, addr: u64, buf: &[u8]) -> Result<()> {
        self.file.write_all_at(buf, addr).map_err(|e| {
            WspError::ptrace(
                format!("write memory at {addr:#x}"),
                self.pid,
                e.to_string(),
            )
        })
    }
}

/// `syscall; int3`: the injection stub written at the scratch address.
pub(crate) const STUB: [u8; 3] = [0x0f, 0x05, 0xcc];

/// Run one system call in thread `tid`, which must be in a ptrace stop that is not a
/// system-call-entry stop, with the stub already at `stub`. Returns the raw result; every
/// register is put back. Signals that arrive meanwhile are returned in `pending` for later
/// delivery.
pub(crate) fn inject(
    tid: i32,
    stub: u64,
    nr: u64,
    args: [u64; 6],
    pending: &mut Vec<i32>,
) -> Result<i64> {
    let saved = get_regs(tid)?;
    let mut r = saved;
    r.rip = stub;
    r.rax = nr;
    r.orig_rax = u64::MAX;
    r.rdi = args[0];
    r.rsi = args[1];
    r.rdx = args[2];
    r.r10 = args[3];
    r.r8 = args[4];
    r.r9 = args[5];
    set_regs(tid, &r)?;
    cont(tid, 0)?;
    loop {
        let Some((_, st)) = wait(tid, false)? else {
            return Err(WspError::Gone {
                detail: format!("thread {tid} vanished during an injected system call {nr}"),
            });
        };
        match st {
            Status::Stopped { sig, event } => {
                if event == 0 && sig == libc::SIGTRAP {
                    break;
                }
                if event != 0 {
                    // clone3/clone events of the injected call itself, or an interrupt: go on.
                    cont(tid, 0)?;
                    continue;
                }
                if sig != libc::SIGSTOP {
                    pending.push(sig);
                }
                cont(tid, 0)?;
            }
            Status::Exited(c) => {
                return Err(WspError::Gone {
                    detail: format!("exited with {c} during an injected system call {nr}"),
                });
            }
            Status::Signaled(s) => {
                return Err(WspError::Gone {
                    detail: format!("killed by signal {s} during an injected system call {nr}"),
                });
            }
        }
    }
    let after = get_regs(tid)?;
    set_regs(tid, &saved)?;
    Ok(after.rax as i64)
}

/// [`inject`] that treats a negative result (-errno) as an error naming the call.
pub(crate) fn inject_ok(
    tid: i32,
    stub: u64,
    what: &str,
    nr: u64,
    args: [u64; 6],
    pending: &mut Vec<i32>,
) -> Result<u64> {
    let r = inject(tid, stub, nr, args, pending)?;
    if (-4095..0).contains(&r) {
        return Err(WspError::ptrace(
            format!("injected {what}"),
            tid,
            std::io::Error::from_raw_os_error((-r) as i32).to_string(),
        ));
    }
    Ok(r as u64)
}

pub(crate) fn page_up(v: u64) -> u64 {
    (v + 4095) & !4095
}

pub(crate) fn page_down(v: u64) -> u64 {
    v & !4095
}

pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into our local timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_parse() {
        let m = parse_maps(
            "00400000-00401000 r--p 00000000 08:01 123 /bin/prog x\n\
             7ffff7ff9000-7ffff7ffd000 rw-s 00100000 00:1a 77 /dev/shm/i.img\n\
             bad line\n\
             7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0 [stack]\n",
        );
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].path, "/bin/prog x");
        assert!(m[1].shared && m[1].write && m[1].offset == 0x100000 && m[1].inode == 77);
        assert_eq!(m[2].prot(), libc::PROT_READ | libc::PROT_WRITE);
    }

    #[test]
    fn regs_round_trip_words() {
        let r = Regs {
            rip: 7,
            fs_base: 9,
            gs: 3,
            ..Regs::default()
        };
        let w = r.to_words();
        assert_eq!(w.len(), REGS_WORDS);
        assert_eq!(w[16], 7);
        assert_eq!(Regs::from_words(&w), Some(r));
        assert_eq!(Regs::from_words(&w[1..]), None);
    }
}
