//! Errors of replication.

use log::LogError;
use pmem::PmemError;

/// Everything that can go wrong in replication.
#[derive(Debug, thiserror::Error)]
pub enum ReplError {
    /// The local log failed.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The local medium failed.
    #[error(transparent)]
    Pmem(#[from] PmemError),
    /// Too few copies answered or took part for the quorum the operation needs.
    #[error("{what}: needs {needed} of {total} copies, only {got} {how}")]
    Quorum {
        /// The step that needed a quorum.
        what: &'static str,
        /// Copies needed.
        needed: usize,
        /// Copies there are (the primary's and its backups).
        total: usize,
        /// Copies that did.
        got: usize,
        /// What they did ("answered", "acknowledged", ...).
        how: &'static str,
    },
    /// A copy has promised a higher epoch: another primary took over.
    #[error("fenced: copy {copy} has promised epoch {promised}, this primary holds {ours}")]
    Fenced {
        /// Which copy.
        copy: String,
        /// The epoch it promised.
        promised: u64,
        /// Ours.
        ours: u64,
    },
    /// The copies are not copies of one log.
    #[error("copy {copy} is not a copy of this log: {reason}")]
    Foreign {
        /// Which copy.
        copy: String,
        /// How it differs.
        reason: String,
    },
    /// A message failed validation.
    #[error(transparent)]
    Proto(#[from] ProtoError),
    /// A peer answered with an error.
    #[error("copy {copy} refused: {reason}")]
    Refused {
        /// Which copy.
        copy: String,
        /// Its reason.
        reason: String,
    },
    /// A parameter out of range.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// Which parameter.
        what: &'static str,
        /// Why.
        reason: String,
    },
}

/// A malformed replication message: what, where, expected and found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad replication message: {field} at byte {offset:#x}: expected {expected}, found {found}")]
pub struct ProtoError {
    /// The field.
    pub field: &'static str,
    /// Byte offset in the frame.
    pub offset: usize,
    /// What was expected.
    pub expected: String,
    /// What was found.
    pub found: String,
}

/// Result of replication.
pub type Result<T, E = ReplError> = std::result::Result<T, E>;
