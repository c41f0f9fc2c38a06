//! Dirty tracking for `write_back = tracked`: the program's image mappings are registered with a
//! userfaultfd in asynchronous write-protect mode (the kernel only clears a page's write-protect
//! bit on its first write, no fault reaches anyone), and the save asks `PAGEMAP_SCAN` which
//! pages were written. The userfaultfd is created inside the program by an injected system
//! call, copied to the runner with `pidfd_getfd`, and closed in the program.

use crate::error::{Result, WspError};
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const UFFDIO_API: u64 = 0xc018_aa3f;
const UFFDIO_REGISTER: u64 = 0xc020_aa00;
const UFFDIO_WRITEPROTECT: u64 = 0xc018_aa06;
const UFFD_API: u64 = 0xaa;
const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1;
const PAGEMAP_SCAN: u64 = 0xc060_6610;
const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;
const PAGE_IS_WRITTEN: u64 = 1 << 1;

/// The runner's handle on the program's write tracking.
#[derive(Debug)]
pub(crate) struct Tracker {
    uffd: OwnedFd,
    pagemap: File,
}

fn ioctl(fd: i32, req: u64, arg: *mut u64, what: &str) -> Result<()> {
    // SAFETY: `arg` points at a live, correctly sized structure for `req`.
    if unsafe { libc::ioctl(fd, req as _, arg) } != 0 {
        return Err(WspError::Unsupported {
            what: format!(
                "write_back=tracked: {what}: {}",
                std::io::Error::last_os_error()
            ),
        });
    }
    Ok(())
}

impl Tracker {
    /// Take the program's userfaultfd `remote_fd` (a descriptor number in process `pid`).
    pub fn adopt(pid: i32, remote_fd: i32) -> Result<Tracker> {
        // SAFETY: pidfd_open/pidfd_getfd return new descriptors we own, or -1.
        let pidfd = unsafe { libc::syscall(434, pid, 0) } as i32;
        if pidfd < 0 {
            return Err(WspError::errno("pidfd_open", pid));
        }
        // SAFETY: as above.
        let fd = unsafe { libc::syscall(438, pidfd, remote_fd, 0) } as i32;
        // SAFETY: our pidfd, closed once.
        unsafe { libc::close(pidfd) };
        if fd < 0 {
            return Err(WspError::errno("pidfd_getfd of the userfaultfd", pid));
        }
        // SAFETY: fd is a fresh descriptor we own.
        let uffd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut api = [
            UFFD_API,
            UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED,
            0,
        ];
        ioctl(
            uffd.as_raw_fd(),
            UFFDIO_API,
            api.as_mut_ptr(),
            "UFFDIO_API (asynchronous write-protect)",
        )?;
        let p = format!("/proc/{pid}/pagemap");
        let pagemap = File::open(&p).map_err(|e| WspError::io("open", &p, e))?;
        Ok(Tracker { uffd, pagemap })
    }

    /// Track writes to `[addr, addr+len)` from now on.
    pub fn watch(&self, addr: u64, len: u64) -> Result<()> {
        let mut reg = [addr, len, UFFDIO_REGISTER_MODE_WP, 0];
        ioctl(
            self.uffd.as_raw_fd(),
            UFFDIO_REGISTER,
            reg.as_mut_ptr(),
            "UFFDIO_REGISTER",
        )?;
        let mut wp = [addr, len, UFFDIO_WRITEPROTECT_MODE_WP];
        ioctl(
            self.uffd.as_raw_fd(),
            UFFDIO_WRITEPROTECT,
            wp.as_mut_ptr(),
            "UFFDIO_WRITEPROTECT",
        )
    }

    /// The ranges of `[addr, addr+len)` written since they were watched.
    pub fn written(&self, addr: u64, len: u64) -> Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        let mut vec = vec![[0u64; 3]; 512];
        let end = addr + len;
        let mut start = addr;
        while start < end {
            let mut arg: [u64; 12] = [
                96,
                PM_SCAN_CHECK_WPASYNC,
                start,
                end,
                0,
                vec.as_mut_ptr() as u64,
                vec.len() as u64,
                0,
                0,
                PAGE_IS_WRITTEN,
                0,
                PAGE_IS_WRITTEN,
            ];
            // SAFETY: arg is a pm_scan_arg (12 u64), vec has vec_len page_regions (3 u64 each).
            let n = unsafe {
                libc::ioctl(
                    self.pagemap.as_raw_fd(),
                    PAGEMAP_SCAN as _,
                    arg.as_mut_ptr(),
                )
            };
            if n < 0 {
                return Err(WspError::Unsupported {
                    what: format!(
                        "write_back=tracked: PAGEMAP_SCAN: {}",
                        std::io::Error::last_os_error()
                    ),
                });
            }
            for r in &vec[..n as usize] {
                out.push((r[0], r[1] - r[0]));
            }
            let walk_end = arg[4];
            if walk_end <= start {
                break;
            }
            start = walk_end;
        }
        Ok(out)
    }
}
