//! The error type of every device.

/// What went wrong with a device request, naming the device, the place and, where there is
/// one, what was expected and what was found.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// A system call failed (open, pread, pwrite, fcntl, a socket).
    #[error("{what}: {source}")]
    Io {
        /// The operation and the device.
        what: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// A request outside the device.
    #[error("request [{offset}, +{len}) lies outside the device's {capacity} bytes")]
    Range {
        /// First byte asked for.
        offset: u64,
        /// Bytes asked for.
        len: u64,
        /// The device's size.
        capacity: u64,
    },
    /// Another handle holds a claim on the range.
    #[error("busy: {what}")]
    Busy {
        /// The device and the range.
        what: String,
    },
    /// The other end of a connection broke the protocol, or a reply does not fit the request.
    #[error("protocol error: {what}: expected {expected}, found {found}")]
    Protocol {
        /// Where.
        what: String,
        /// What the protocol says.
        expected: String,
        /// What came.
        found: String,
    },
    /// The device (or the target) refused the request: no such namespace, a namespace too
    /// small, too many connections, O_DIRECT asked for where the file system has none.
    #[error("refused: {what}")]
    Refused {
        /// What and why.
        what: String,
    },
    /// A bad argument: a job name, a device spec, a size.
    #[error("invalid {what}: expected {expected}, found {found}")]
    Invalid {
        /// The argument.
        what: String,
        /// What is accepted.
        expected: String,
        /// What was given.
        found: String,
    },
}

/// The result of a device request.
pub type Result<T> = std::result::Result<T, DeviceError>;

impl DeviceError {
    /// The `errno` a POSIX call failing with this error reports: the system's own for `Io`,
    /// `EINVAL` for `Range` and `Invalid`, `EBUSY`, `EPROTO`, `EACCES` for `Refused`.
    pub fn errno(&self) -> i32 {
        match self {
            DeviceError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            DeviceError::Range { .. } | DeviceError::Invalid { .. } => libc::EINVAL,
            DeviceError::Busy { .. } => libc::EBUSY,
            DeviceError::Protocol { .. } => libc::EPROTO,
            DeviceError::Refused { .. } => libc::EACCES,
        }
    }

    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> DeviceError {
        DeviceError::Io {
            what: what.into(),
            source,
        }
    }
}

/// `Err(Range)` unless `[offset, offset + len)` lies inside `capacity` bytes.
pub(crate) fn check_range(offset: u64, len: u64, capacity: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= capacity => Ok(()),
        _ => Err(DeviceError::Range {
            offset,
            len,
            capacity,
        }),
    }
}
