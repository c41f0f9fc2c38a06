//! Errors of the log.

use pmem::{Corruption, PmemError};

/// Everything that can go wrong in the log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The medium below failed (I/O, lock, a simulated crash, ...).
    #[error(transparent)]
    Pmem(#[from] PmemError),
    /// No room in the ring for a record, even after waiting for `cleanup` to free some.
    #[error(
        "log is full: a record needs {needed} bytes of ring, {free} of {ring} are free \
         (waited {waited_ms} ms for cleanup to free more)"
    )]
    Full {
        /// Ring bytes the record needs (its footprint, plus padding to the ring's end if it
        /// would straddle it).
        needed: u64,
        /// Ring bytes free when the wait ended.
        free: u64,
        /// Size of the ring.
        ring: u64,
        /// How long `reserve` waited.
        waited_ms: u64,
    },
    /// A payload larger than this log takes.
    #[error("a record payload of {length} bytes is larger than this log's limit of {max} bytes")]
    TooLarge {
        /// Asked for.
        length: u64,
        /// The log's limit (half the ring, at most 1 GiB).
        max: u32,
    },
    /// Bytes read from the medium failed validation.
    #[error("log damaged: {0}")]
    Corrupt(Corruption),
    /// An LSN this log has not handed out, or one already reclaimed.
    #[error("LSN {lsn}: {reason}")]
    BadLsn {
        /// The LSN given.
        lsn: u64,
        /// Why it is refused.
        reason: String,
    },
    /// A persist failed earlier; the log refuses further writes until it is reopened.
    #[error(
        "an earlier persist of this log failed; reopen it (recovery keeps every forced record)"
    )]
    Failed,
    /// The log was opened read-only.
    #[error("the log is open read-only")]
    ReadOnly,
    /// The mirror (replication) could not make a forced range durable on enough copies; the log
    /// refuses further writes until it is reopened and recovered.
    #[error("replication failed: {0}")]
    Replication(String),
    /// A parameter out of range.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// Which parameter.
        what: &'static str,
        /// Why.
        reason: String,
    },
}

impl LogError {
    /// The corruption behind this error, if it is one.
    pub fn corruption(&self) -> Option<&Corruption> {
        match self {
            LogError::Corrupt(c) => Some(c),
            LogError::Pmem(p) => p.corruption(),
            _ => None,
        }
    }
}

/// Result alias of the log.
pub type Result<T, E = LogError> = std::result::Result<T, E>;
