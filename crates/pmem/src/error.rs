//! Errors of the medium layer.
//!
//! Corruption is a value of its own ([`Corruption`]): which structure, where, what was expected
//! and what was found, so a caller (or `kavach pool check`) can say exactly what is wrong.

use std::fmt;
use std::path::PathBuf;

/// A structure read from the medium failed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    /// The structure, e.g. `"pool header copy 1"` or `"region directory copy 0 entry 3"`.
    pub structure: String,
    /// Byte offset in the pool where the bad field starts.
    pub offset: u64,
    /// The field that failed, e.g. `"crc32c"` or `"magic"`.
    pub field: &'static str,
    /// What a valid structure holds there.
    pub expected: String,
    /// What the medium holds there.
    pub found: String,
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at byte {:#x}: field `{}` expected {}, found {}",
            self.structure, self.offset, self.field, self.expected, self.found
        )
    }
}

/// Everything that can go wrong in `pmem`.
#[derive(Debug, thiserror::Error)]
pub enum PmemError {
    /// An operating-system call failed.
    #[error("{what} {path}: {error}")]
    Io {
        /// What we were doing.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error (part of the message, so not also a `source`).
        error: std::io::Error,
    },
    /// Another process (or another handle in this one) holds the pool open.
    #[error("pool {0} is in use by another process (it holds the pool's lock); close it first")]
    Locked(PathBuf),
    /// The path exists but does not hold a Kavach pool.
    #[error("{path} is not a Kavach pool: {reason}")]
    NotAPool {
        /// The file.
        path: PathBuf,
        /// Why we think so.
        reason: String,
    },
    /// The backing file is shorter (or longer) than its header says.
    #[error("pool {path} is truncated or resized: header says {expected} bytes, file has {found}")]
    SizeMismatch {
        /// The file.
        path: PathBuf,
        /// The size in the header.
        expected: u64,
        /// The size of the file.
        found: u64,
    },
    /// A structure failed validation and no good copy is left.
    #[error("corrupt {0}")]
    Corrupt(Corruption),
    /// The pool uses a feature this build does not know.
    #[error("pool needs {kind} features {bits:#x} that this version of Kavach does not support")]
    UnsupportedFeature {
        /// `incompatible` or `read-only-compatible`.
        kind: &'static str,
        /// The unknown bits.
        bits: u64,
    },
    /// An argument was out of range (size, name, alignment...).
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// The argument.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// A region with this name already exists.
    #[error("region `{0}` already exists")]
    RegionExists(String),
    /// No region with this name.
    #[error("no region named `{0}`")]
    NoSuchRegion(String),
    /// Not enough contiguous free space, or the directory is full.
    #[error("no space: {0}")]
    NoSpace(String),
    /// A mutation was attempted on a pool opened read-only.
    #[error("pool is open read-only")]
    ReadOnly,
    /// An earlier persist failed; the handle refuses further work until the pool is reopened.
    #[error("an earlier persist failed; reopen the pool")]
    Failed,
    /// The persistence simulator cut power here. Only the simulator returns this.
    #[error("simulated power failure")]
    SimulatedCrash,
}

impl PmemError {
    pub(crate) fn corrupt(
        structure: impl Into<String>,
        offset: u64,
        field: &'static str,
        expected: impl fmt::Display,
        found: impl fmt::Display,
    ) -> Self {
        PmemError::Corrupt(Corruption {
            structure: structure.into(),
            offset,
            field,
            expected: expected.to_string(),
            found: found.to_string(),
        })
    }

    /// An I/O error on `path` while doing `what`.
    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        PmemError::Io {
            what,
            path: path.into(),
            error: source,
        }
    }

    /// The corruption inside, if this is a corruption error.
    pub fn corruption(&self) -> Option<&Corruption> {
        match self {
            PmemError::Corrupt(c) => Some(c),
            _ => None,
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = PmemError> = std::result::Result<T, E>;
