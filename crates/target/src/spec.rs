//! Device specs: the strings that name a device in the environment and on command lines.

use crate::device::{Device, MediumDevice};
use crate::error::{DeviceError, Result};
use crate::file::{FileDevice, FileOptions};
use crate::proto::{Hello, Tenant};
use crate::remote::RemoteDevice;
use std::path::PathBuf;
use std::sync::Arc;

/// What a spec names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    /// `tcp://HOST:PORT/JOB`: a namespace of a block target.
    Remote {
        /// `HOST:PORT`.
        addr: String,
        /// The namespace.
        job: String,
    },
    /// `pmem:PATH`: a file mapped as a pool medium.
    Pmem(PathBuf),
    /// Anything else: a file or block device.
    File(PathBuf),
}

/// Parse a device spec (see [`open_spec`]).
pub fn parse_spec(spec: &str) -> Result<Spec> {
    let bad = |expected: &str| DeviceError::Invalid {
        what: "device spec".into(),
        expected: expected.into(),
        found: format!("{spec:?}"),
    };
    if let Some(rest) = spec.strip_prefix("tcp://") {
        let (addr, job) = rest
            .rsplit_once('/')
            .ok_or_else(|| bad("tcp://HOST:PORT/JOB"))?;
        if addr.is_empty() || !addr.contains(':') || addr.contains('/') {
            return Err(bad("tcp://HOST:PORT/JOB"));
        }
        crate::validate_job(job)?;
        return Ok(Spec::Remote {
            addr: addr.into(),
            job: job.into(),
        });
    }
    if let Some(path) = spec.strip_prefix("pmem:") {
        if path.is_empty() {
            return Err(bad("pmem:PATH"));
        }
        return Ok(Spec::Pmem(path.into()));
    }
    if spec.is_empty() {
        return Err(bad("a path, pmem:PATH or tcp://HOST:PORT/JOB"));
    }
    Ok(Spec::File(spec.into()))
}

/// Open the device `spec` names:
/// - `tcp://HOST:PORT/JOB`: a [`RemoteDevice`] on namespace JOB, created with `create_len`
///   bytes if given and absent; its tenant is the calling thread's I/O priority (what `ionice`
///   set; [`Tenant::resolve`](crate::Tenant::resolve));
/// - `pmem:PATH`: a [`MediumDevice`] over the whole file mapped (created with `create_len`
///   bytes if given and absent), claims as OFD locks on it;
/// - anything else: a [`FileDevice`] (`Direct::Auto`), created or extended to `create_len`.
pub fn open_spec(spec: &str, create_len: Option<u64>) -> Result<Arc<dyn Device>> {
    match parse_spec(spec)? {
        Spec::Remote { addr, job } => {
            let hello = Hello {
                job,
                len: create_len.unwrap_or(0),
                create: create_len.is_some(),
                tenant: Tenant::default(),
            };
            Ok(Arc::new(RemoteDevice::connect(&addr, &hello)?))
        }
        Spec::Pmem(path) => {
            let label = path.display().to_string();
            let pm = |e: pmem::PmemError| {
                DeviceError::io(
                    format!("cannot map {label}"),
                    std::io::Error::other(e.to_string()),
                )
            };
            let mapping = if path.exists() {
                pmem::Mapping::open(&path, true).map_err(pm)?
            } else if let Some(len) = create_len {
                pmem::Mapping::create(&path, len).map_err(pm)?
            } else {
                return Err(DeviceError::io(
                    format!("cannot open {label}"),
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                ));
            };
            let file = mapping
                .file()
                .try_clone()
                .map_err(|e| DeviceError::io(format!("cannot dup {label}"), e))?;
            let len = pmem::Medium::len(&mapping);
            Ok(Arc::new(
                MediumDevice::new(mapping, 0, len)?.with_claims(file, label),
            ))
        }
        Spec::File(path) => Ok(Arc::new(FileDevice::open(
            &path,
            &FileOptions {
                create_len,
                ..FileOptions::default()
            },
        )?)),
    }
}
