//! `target`: the devices the checkpoint/restart runtime (`microfs`) writes to, behind one
//! interface ([`Device`]): a local file ([`FileDevice`], `O_DIRECT` where the backing allows),
//! a range of a pool medium ([`MediumDevice`]), memory ([`MemDevice`], for tests), or a
//! namespace of a block target reached over TCP ([`RemoteDevice`], served by
//! [`server::TargetServer`]): the role NVMe-oF plays in NVMe-CR.
//!
//! Every device gives the same guarantees: a write is durable when it returns, the requests of
//! one handle complete in order, and a claim on a byte range keeps other handles out of it for
//! the handle's lifetime.

#![deny(unsafe_code)]

mod device;
mod error;
mod file;
// fcntl(F_OFD_SETLK) has no safe wrapper in std; one call with a plain struct.
#[allow(unsafe_code)]
mod lock;
pub mod proto;
mod remote;
pub mod server;
mod spec;

pub use device::{Device, MediumDevice, MemDevice, Partition};
pub use error::{DeviceError, Result};
pub use file::{BUFFERED_BLOCK, DIRECT_ALIGN, Direct, FileDevice, FileOptions};
pub use proto::{Hello, Tenant};
pub use remote::{RemoteDevice, fetch_stats};
pub use spec::{Spec, open_spec, parse_spec};

/// The longest job (namespace) name.
pub const JOB_NAME_MAX: usize = 64;

/// Check a job name: 1 to [`JOB_NAME_MAX`] characters of `[A-Za-z0-9._-]`, and not `.` or
/// `..` (it names a file `<dir>/<job>.ns` on the target).
pub fn validate_job(job: &str) -> Result<()> {
    let ok = !job.is_empty()
        && job.len() <= JOB_NAME_MAX
        && job
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
        && job != "."
        && job != "..";
    if ok {
        Ok(())
    } else {
        Err(DeviceError::Invalid {
            what: "job name".into(),
            expected: format!("1 to {JOB_NAME_MAX} characters of [A-Za-z0-9._-], not . or .."),
            found: format!("{job:?}"),
        })
    }
}
