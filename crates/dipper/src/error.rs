//! Errors of DIPPER.

use log::LogError;
use pmem::PmemError;

/// Everything that can go wrong in DIPPER.
#[derive(Debug, thiserror::Error)]
pub enum DipperError {
    /// The medium below failed.
    #[error(transparent)]
    Pmem(#[from] PmemError),
    /// The operation log failed.
    #[error(transparent)]
    Log(#[from] LogError),
    /// Bytes read from the medium failed validation.
    #[error(
        "{structure} damaged at offset {offset:#x}: {field} should be {expected}, found {found}"
    )]
    Corrupt {
        /// Which structure (root, slot header, slot page, arena header, op record, ...).
        structure: &'static str,
        /// Medium offset (or arena offset for arena structures).
        offset: u64,
        /// Which field.
        field: &'static str,
        /// What a valid value looks like.
        expected: String,
        /// What was there.
        found: String,
    },
    /// A request larger than a limit.
    #[error("{what} of {bytes} bytes is larger than the limit of {max} bytes")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// No room: the shadow slots cannot hold the state, or the log stayed full.
    #[error("out of space: {0}")]
    OutOfSpace(String),
    /// An earlier failure (a persist, a checkpoint) latched the store; reopen it.
    #[error("the store failed earlier and refuses writes until reopened: {0}")]
    Failed(String),
    /// The pool does not hold a DIPPER store, or holds one this code cannot read.
    #[error("not a DIPPER store: {0}")]
    NotAStore(String),
    /// A parameter out of range.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// Which parameter.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The store is closed.
    #[error("the store is closed")]
    Closed,
}

impl From<pmem::codec::FieldError> for DipperError {
    fn from(e: pmem::codec::FieldError) -> Self {
        DipperError::Corrupt {
            structure: e.structure,
            offset: e.offset,
            field: e.field,
            expected: e.problem.expected(),
            found: e.problem.found(),
        }
    }
}

/// Result alias of DIPPER.
pub type Result<T, E = DipperError> = std::result::Result<T, E>;
