//! Claims on byte ranges of a file: open-file-description (OFD) `fcntl` locks.
//!
//! An OFD lock belongs to the open file description, not to the process: two handles that
//! opened the same file separately (in one process or two) conflict, while a handle never
//! conflicts with itself. The lock goes away when the description is closed, that is when the
//! handle is dropped or its process dies.

use crate::error::{DeviceError, Result};
use std::fs::File;
use std::os::fd::AsRawFd;

/// Take a write lock on `[offset, offset + len)` of `file` without waiting. `Busy` naming the
/// range and `label` if another description holds an overlapping lock. `len == 0` claims
/// nothing (for `fcntl` it would mean "to the end of the file").
pub(crate) fn claim(file: &File, label: &str, offset: u64, len: u64) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    let too_big = |v: u64, what: &str| DeviceError::Invalid {
        what: format!("claim {what} on {label}"),
        expected: format!("at most {}", i64::MAX),
        found: v.to_string(),
    };
    let start = libc::off_t::try_from(offset).map_err(|_| too_big(offset, "offset"))?;
    let l_len = libc::off_t::try_from(len).map_err(|_| too_big(len, "length"))?;
    // SAFETY: `flock` is a plain C struct of integers; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start;
    fl.l_len = l_len;
    fl.l_pid = 0; // OFD locks require 0.
    loop {
        // SAFETY: fcntl on a descriptor we own, with a pointer to a live, initialised
        // `flock` that the call only reads (F_OFD_SETLK) for its duration.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
        if rc == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) | Some(libc::EACCES) => {
                return Err(DeviceError::Busy {
                    what: format!(
                        "bytes [{offset}, {}) of {label} are claimed by another open handle",
                        offset.saturating_add(len)
                    ),
                });
            }
            _ => {
                return Err(DeviceError::io(
                    format!("cannot claim bytes [{offset}, +{len}) of {label} (fcntl F_OFD_SETLK)"),
                    e,
                ));
            }
        }
    }
}
