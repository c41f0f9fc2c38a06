//! Why a store call failed: [`StoreError`], shared by the store, its object data (`zone`), its
//! integrity layer (`protect`), its lock table (`locks`) and the library API (`api`). It depends
//! on nothing of theirs (only on the machine's `OpError`), so they all depend on it one way.

use dipper::DipperError;
use pmem::Corruption;

use crate::machine::OpError;

/// Why a store call failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum StoreError {
    /// The key holds a value of another type.
    #[error("the key holds a value of another type")]
    WrongType,
    /// The value is not a 64-bit integer.
    #[error("the value is not an integer or out of range")]
    NotInteger,
    /// The increment would overflow.
    #[error("increment or decrement would overflow")]
    Overflow,
    /// A request above a limit.
    #[error("{0}")]
    TooLarge(String),
    /// No room left.
    #[error("{0}")]
    OutOfSpace(String),
    /// The store failed (or could not open).
    #[error("{0}")]
    Failed(String),
    /// Bytes read from the store's pool failed validation: which structure, where, which field,
    /// what was expected and what was found.
    #[error("store damaged: {0}")]
    Corrupt(Corruption),
    /// The store is closed.
    #[error("the store is closed")]
    Closed,
    /// A read of the store's pool was refused by the integrity layer (eager redundancy): the
    /// page failed its checksums and parity could not rebuild it. The operation that read it
    /// failed; nothing it read was returned.
    #[error(
        "integrity: page {page} of region `{region}` refused ({why}); `kavach repair DIR` \
         checks the store offline"
    )]
    Integrity {
        /// The covered region.
        region: String,
        /// The data page (from the start of the region).
        page: u64,
        /// Why the integrity layer refused it.
        why: String,
    },
}

impl From<DipperError> for StoreError {
    fn from(e: DipperError) -> Self {
        match e {
            DipperError::TooLarge { .. } => StoreError::TooLarge(e.to_string()),
            DipperError::OutOfSpace(m) => StoreError::OutOfSpace(m),
            DipperError::Closed => StoreError::Closed,
            DipperError::Corrupt {
                structure,
                offset,
                field,
                expected,
                found,
            } => StoreError::Corrupt(Corruption {
                structure: structure.to_string(),
                offset,
                field,
                expected,
                found,
            }),
            DipperError::Pmem(p) => match p.corruption() {
                Some(c) => StoreError::Corrupt(c.clone()),
                None => StoreError::Failed(p.to_string()),
            },
            DipperError::Log(l) => match l.corruption() {
                Some(c) => StoreError::Corrupt(c.clone()),
                None => StoreError::Failed(l.to_string()),
            },
            other => StoreError::Failed(other.to_string()),
        }
    }
}

impl From<OpError> for StoreError {
    fn from(e: OpError) -> Self {
        match e {
            OpError::WrongType => StoreError::WrongType,
            OpError::NotInteger => StoreError::NotInteger,
            OpError::Overflow => StoreError::Overflow,
        }
    }
}

/// Result alias.
pub type StoreResult<T> = Result<T, StoreError>;
