//! Errors of the heap.

use pmem::{Corruption, PmemError};

/// Everything that can go wrong in the heap.
#[derive(Debug, thiserror::Error)]
pub enum HeapError {
    /// The medium or the pool failed (I/O, lock, pool-level corruption, simulated crash).
    #[error(transparent)]
    Pmem(#[from] PmemError),
    /// Heap metadata failed validation: what, where, expected and found.
    #[error("corrupt {0}")]
    Corrupt(Corruption),
    /// An argument was out of range.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// The argument.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// A persistent pointer does not point into this heap's data zone.
    #[error(
        "bad pointer: offset {offset:#x} + {len} bytes is not inside the heap's data zone [{zone_start:#x}, {zone_end:#x})"
    )]
    BadPointer {
        /// The offset.
        offset: u64,
        /// The length of the access.
        len: u64,
        /// First valid offset.
        zone_start: u64,
        /// End of the zone.
        zone_end: u64,
    },
    /// A free of something that is not an allocated block.
    #[error("bad free of offset {offset:#x}: {reason}")]
    BadFree {
        /// The offset.
        offset: u64,
        /// Why.
        reason: String,
    },
    /// No free block of this size.
    #[error("out of space: no free block of {0} bytes")]
    OutOfSpace(u64),
    /// The transaction's undo or redo log is full.
    #[error("transaction too large: {0}")]
    TxTooLarge(String),
    /// The transaction was aborted (explicitly or by an earlier error), and rolled back.
    #[error("transaction aborted")]
    Aborted,
    /// A word of a reliable object failed its check and could not be corrected (`reliable`).
    #[error(
        "uncorrectable word {word} (bytes {}..{}) of the reliable object at {object:#x} (pair at medium offset {medium_offset:#x}): {detail}",
        word * 8,
        word * 8 + 8
    )]
    Uncorrectable {
        /// Offset of the object (its block) in the heap region.
        object: u64,
        /// Index of the word in the object's logical bytes (byte `8 * word`).
        word: u64,
        /// Medium offset of the stored pair (data word, then check word).
        medium_offset: u64,
        /// The stored pair and why it cannot be corrected.
        detail: String,
    },
    /// An operation that needs a transaction ran outside one, or the reverse.
    #[error("{0}")]
    TxState(&'static str),
    /// Redo-mode commits relied on a save at a power-failure warning, and no save finished:
    /// the heap may hold part of a transaction, so it is not opened.
    #[error(
        "lane {lane}'s redo area says UNSAVED: durability-on-demand commits ran and no save finished before the heap was last closed or power was lost, so the heap may hold part of a transaction and is not opened"
    )]
    NotSaved {
        /// The first lane found unsaved.
        lane: usize,
    },
    /// An isolated transaction met a concurrent commit (run it again), or gave up after its
    /// retries.
    #[error("transaction conflict: {0}")]
    Conflict(crate::stm::StmError),
    /// The heap's redundancy (`integrity`) refused a read, or could not be kept or opened.
    #[error(transparent)]
    Integrity(integrity::IntegrityError),
    /// A verified read found an object whose bytes do not match its checksum (txb-object
    /// redundancy): refused, not served.
    #[error(
        "read refused: the object at {object:#x} ({len} bytes) fails its checksum ({stored:#010x} stored, {computed:#010x} computed)"
    )]
    ObjectChecksum {
        /// Offset of the object (its block) in the heap region.
        object: u64,
        /// Its length.
        len: u64,
        /// The checksum in the side table.
        stored: u32,
        /// The checksum of its bytes now.
        computed: u32,
    },
    /// A lock operation was wrong (unlock of a lock the thread does not hold).
    #[error("lock misuse: {0}")]
    Lock(String),
}

impl From<integrity::IntegrityError> for HeapError {
    /// A failure of the medium stays one (a simulated crash is still recognised as such).
    fn from(e: integrity::IntegrityError) -> Self {
        match e {
            integrity::IntegrityError::Pmem(p) => HeapError::Pmem(p),
            e => HeapError::Integrity(e),
        }
    }
}

/// Results of the heap.
pub type Result<T, E = HeapError> = std::result::Result<T, E>;

impl HeapError {
    pub(crate) fn corrupt(
        structure: impl Into<String>,
        offset: u64,
        field: &'static str,
        expected: impl std::fmt::Display,
        found: impl std::fmt::Display,
    ) -> Self {
        HeapError::Corrupt(Corruption {
            structure: structure.into(),
            offset,
            field,
            expected: expected.to_string(),
            found: found.to_string(),
        })
    }

    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        HeapError::Invalid {
            what,
            reason: reason.into(),
        }
    }

    /// Is this the simulator's power failure?
    pub fn is_simulated_crash(&self) -> bool {
        matches!(self, HeapError::Pmem(PmemError::SimulatedCrash))
    }
}
