//! Errors of the integrity layer.

use crate::tracker::TrackError;
use pmem::{Corruption, PmemError};

/// Everything that can go wrong in `integrity`.
#[derive(Debug, thiserror::Error)]
pub enum IntegrityError {
    /// The medium failed (I/O, a persist, the pool's own checks).
    #[error(transparent)]
    Pmem(#[from] PmemError),
    /// Write tracking could not be set up or read.
    #[error(transparent)]
    Track(#[from] TrackError),
    /// The integrity metadata itself is damaged beyond use (both header copies invalid).
    #[error("corrupt {0}")]
    Corrupt(Corruption),
    /// Data read through the API failed its check and could not be rebuilt from parity.
    #[error("data page {page} of region `{region}` is corrupt and cannot be repaired: {reason}")]
    Unrepairable {
        /// The data region.
        region: String,
        /// The data page (from the start of the region).
        page: u64,
        /// Why parity could not rebuild it.
        reason: String,
    },
    /// A verified read found a line that fails its check, in a page that fails its own: the
    /// read is refused (scrub and repair rebuild the page from parity).
    #[error(
        "read refused: line {line} of data page {page} of region `{region}` fails its check: {reason}"
    )]
    Refused {
        /// The data region.
        region: String,
        /// The data page (from the start of the region).
        page: u64,
        /// The line within the page.
        line: u32,
        /// What was stored and computed.
        reason: String,
    },
    /// An argument was out of range.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// The argument.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The region is open read-only.
    #[error("the protected region is open read-only")]
    ReadOnly,
    /// The region has no integrity metadata.
    #[error(
        "region `{0}` has no redundancy (no integrity region `{1}`); create it with a redundancy mode"
    )]
    NotProtected(String, String),
}

impl IntegrityError {
    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        IntegrityError::Invalid {
            what,
            reason: reason.into(),
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = IntegrityError> = std::result::Result<T, E>;
