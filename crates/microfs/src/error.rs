//! Errors of the file system, with the errno each maps to.

use crate::device::DeviceError;

/// What went wrong in a file-system call.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// No such file or directory.
    #[error("{path}: no such file or directory")]
    NotFound {
        /// The path (or `ino N`).
        path: String,
    },
    /// The name exists already.
    #[error("{path}: exists already")]
    Exists {
        /// The path.
        path: String,
    },
    /// A component used as a directory is not one.
    #[error("{path}: not a directory")]
    NotDir {
        /// The path.
        path: String,
    },
    /// A file operation on a directory.
    #[error("{path}: is a directory")]
    IsDir {
        /// The path.
        path: String,
    },
    /// A directory to remove or replace still has entries.
    #[error("{path}: directory not empty")]
    NotEmpty {
        /// The path.
        path: String,
    },
    /// Out of hugeblocks, inode numbers, checkpoint-slot room or log room.
    #[error("no space left: {what}")]
    NoSpace {
        /// What ran out.
        what: String,
    },
    /// A name component longer than 255 bytes.
    #[error("{name}: name too long ({len} bytes, at most {max})")]
    NameTooLong {
        /// The name (cut short).
        name: String,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// An argument the call cannot take.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// The argument.
        what: String,
        /// Why.
        reason: String,
    },
    /// The device holds no microfs namespace (its superblocks are blank: never formatted).
    #[error("{device}: no microfs namespace here (both superblock copies are blank)")]
    Unformatted {
        /// The device's label.
        device: String,
    },
    /// The namespace is held by another open instance, or the operation needs a writable one.
    #[error("busy: {what}")]
    Busy {
        /// What is busy.
        what: String,
    },
    /// A changing call on a namespace opened read-only.
    #[error("the namespace is open read-only")]
    ReadOnly,
    /// Bytes read from the device failed validation.
    #[error("damaged {what} at byte {at}: expected {expected}, found {found}")]
    Damage {
        /// The structure and field.
        what: String,
        /// Byte offset on the device (the partition).
        at: u64,
        /// What a valid structure holds.
        expected: String,
        /// What the device holds.
        found: String,
    },
    /// The device failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The operation log failed.
    #[error("operation log: {0}")]
    Log(#[from] log::LogError),
}

impl FsError {
    /// The errno a POSIX call reports for this error.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound { .. } => libc::ENOENT,
            FsError::Exists { .. } => libc::EEXIST,
            FsError::NotDir { .. } => libc::ENOTDIR,
            FsError::IsDir { .. } => libc::EISDIR,
            FsError::NotEmpty { .. } => libc::ENOTEMPTY,
            FsError::NoSpace { .. } => libc::ENOSPC,
            FsError::NameTooLong { .. } => libc::ENAMETOOLONG,
            FsError::Invalid { .. } => libc::EINVAL,
            FsError::Busy { .. } => libc::EBUSY,
            FsError::ReadOnly => libc::EROFS,
            FsError::Log(log::LogError::Full { .. }) => libc::ENOSPC,
            FsError::Unformatted { .. }
            | FsError::Damage { .. }
            | FsError::Device(_)
            | FsError::Log(_) => libc::EIO,
        }
    }

    pub(crate) fn damage(
        what: impl Into<String>,
        at: u64,
        expected: impl Into<String>,
        found: impl Into<String>,
    ) -> FsError {
        FsError::Damage {
            what: what.into(),
            at,
            expected: expected.into(),
            found: found.into(),
        }
    }

    pub(crate) fn invalid(what: impl Into<String>, reason: impl Into<String>) -> FsError {
        FsError::Invalid {
            what: what.into(),
            reason: reason.into(),
        }
    }
}

/// Results of this crate.
pub type Result<T> = std::result::Result<T, FsError>;
