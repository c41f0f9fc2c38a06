//! Reading a thread's Linux I/O priority (`ioprio_get(2)`), the one system call of this crate.
//!
//! `ionice` sets a process's (a thread's) I/O priority: a class (0 NONE, 1 RT, 2 BE, 3 IDLE)
//! and a level 0..=7 within it. The kernel packs them into one integer: the class in the bits
//! from 13 up, 13 bits of data below it, of which the lowest 3 are the level (newer kernels
//! keep I/O hints in data bits 3..=12; they are ignored here). Neither `std` nor `libc` wraps
//! the call, so it is made with `libc::syscall` and integer arguments only.

use std::io;

/// `IOPRIO_WHO_PROCESS`: the `who` argument naming one thread (a process id or thread id;
/// 0 is the calling thread).
const IOPRIO_WHO_PROCESS: libc::c_long = 1;
/// The class sits above this many bits of data.
const IOPRIO_CLASS_SHIFT: u32 = 13;
/// The level is the data's low 3 bits.
const IOPRIO_LEVEL_MASK: libc::c_long = 0x7;

/// A Linux I/O priority: `class` 0 (NONE), 1 (RT), 2 (BE) or 3 (IDLE), `level` 0..=7.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IoPrio {
    /// The scheduling class.
    pub class: u8,
    /// The level within the class (0 is the highest).
    pub level: u8,
}

impl IoPrio {
    /// Split the kernel's packed value. Values that do not fit (a negative value, a class
    /// above 255) are an `InvalidData` error naming the value.
    pub fn decode(v: libc::c_long) -> io::Result<IoPrio> {
        if v < 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("ioprio_get returned {v}: expected a non-negative priority"),
            ));
        }
        let class = u8::try_from(v >> IOPRIO_CLASS_SHIFT).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "ioprio_get returned {v}: class {} does not fit 8 bits",
                    v >> IOPRIO_CLASS_SHIFT
                ),
            )
        })?;
        // The mask keeps 3 bits, so the cast cannot truncate.
        let level = (v & IOPRIO_LEVEL_MASK) as u8;
        Ok(IoPrio { class, level })
    }
}

/// The I/O priority of thread or process `pid` (`IOPRIO_WHO_PROCESS`); 0 is the calling
/// thread. A pid above `i32::MAX` is an `InvalidInput` error; the kernel's errors (`ESRCH`
/// for no such thread, `EPERM`) are returned as they are.
pub fn ioprio_get_process(pid: u32) -> io::Result<IoPrio> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("pid {pid}: expected at most {}", libc::pid_t::MAX),
        )
    })?;
    // SAFETY: ioprio_get(which, who) takes two integers and returns an integer; it reads
    // no memory of ours, so no argument can make it touch our address space.
    let v = unsafe {
        libc::syscall(
            libc::SYS_ioprio_get,
            IOPRIO_WHO_PROCESS,
            libc::c_long::from(pid),
        )
    };
    if v == -1 {
        return Err(io::Error::last_os_error());
    }
    IoPrio::decode(v)
}

/// The I/O priority of the calling thread. Under `ionice -cN prog` every thread of `prog`
/// inherits the priority; a thread can also be given its own with `ionice -p TID`.
pub fn ioprio_get_self() -> io::Result<IoPrio> {
    ioprio_get_process(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command, Stdio};

    /// A `sleep` started under `ionice ARGS`, killed when dropped.
    struct Sleeper(Child);

    impl Drop for Sleeper {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn sleeper(args: &[&str]) -> Sleeper {
        let child = Command::new("ionice")
            .args(args)
            .args(["sleep", "30"])
            .stdin(Stdio::null())
            .spawn()
            .expect("ionice (util-linux) must be installed");
        let s = Sleeper(child);
        // ionice sets the priority and then execs sleep under the same pid; wait for the
        // exec, so the priority read is the one ionice set (it is set before the exec, so
        // this only guards against reading before ionice ran at all).
        let pid = s.0.id();
        for _ in 0..500 {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim() == "sleep" {
                return s;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        panic!("pid {pid} never became sleep");
    }

    #[test]
    fn decode_splits_class_and_level() {
        assert_eq!(IoPrio::decode(0).unwrap(), IoPrio { class: 0, level: 0 });
        assert_eq!(
            IoPrio::decode((2 << 13) | 6).unwrap(),
            IoPrio { class: 2, level: 6 }
        );
        // Hint bits (3..=12 of the data) are not part of the level.
        assert_eq!(
            IoPrio::decode((3 << 13) | (5 << 3) | 1).unwrap(),
            IoPrio { class: 3, level: 1 }
        );
        assert!(IoPrio::decode(-1).is_err());
        assert!(IoPrio::decode(256 << 13).is_err());
    }

    #[test]
    fn reads_what_ionice_set_on_other_processes() {
        let idle = sleeper(&["-c3"]);
        let be6 = sleeper(&["-c2", "-n", "6"]);
        let rt2 = sleeper(&["-c1", "-n", "2"]);
        // The idle class has no levels; this kernel reports level 7 for it, others 0.
        assert_eq!(ioprio_get_process(idle.0.id()).unwrap().class, 3);
        assert_eq!(
            ioprio_get_process(be6.0.id()).unwrap(),
            IoPrio { class: 2, level: 6 }
        );
        assert_eq!(
            ioprio_get_process(rt2.0.id()).unwrap(),
            IoPrio { class: 1, level: 2 }
        );
    }

    #[test]
    fn reads_the_calling_threads_own_priority() {
        // A fresh thread is given BE level 6 by ionice -p (its thread id) and then reads
        // its own priority; the test's other threads are not touched.
        let got = std::thread::spawn(|| {
            let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
            let tid = link
                .file_name()
                .and_then(|n| n.to_str())
                .expect("tid")
                .to_owned();
            let st = Command::new("ionice")
                .args(["-c2", "-n", "6", "-p", &tid])
                .status()
                .expect("ionice");
            assert!(st.success());
            let by_tid = ioprio_get_process(tid.parse().unwrap()).unwrap();
            (ioprio_get_self().unwrap(), by_tid)
        })
        .join()
        .unwrap();
        assert_eq!(got.0, IoPrio { class: 2, level: 6 });
        assert_eq!(got.1, got.0);
    }

    #[test]
    fn errors_for_missing_and_impossible_pids() {
        assert!(ioprio_get_process(u32::MAX).is_err());
        // pid_max is at most 2^22 on Linux, so this pid cannot exist.
        let e = ioprio_get_process((1 << 22) + 7).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ESRCH));
    }
}
