//! `pmem`: the medium Kavach stands on.
//!
//! - [`Medium`]: read, write, flush, fence, persist, atomic 8-byte stores and non-temporal copies,
//!   implemented by [`Mapping`] (a memory-mapped file) and [`SimMedium`] (the persistence
//!   simulator), so every layer above runs on both.
//! - [`Pool`]: a backing file with a two-copy header, two alternating mutable slots and a
//!   crash-atomic region directory.
//! - [`Domain`]: what persisting means here (`adr`, `eadr`, `msync`, `sim`).
//! - [`fault`]: media faults injected behind the layers' backs.
//! - [`check`]: the read-only checker behind `kavach pool check`.
//! - [`repair`]: `kavach pool repair`, which rebuilds damaged metadata from a good copy.
//!
//! Unsafe code lives in [`mapping`] and [`cpu`], plus one `flock` call in [`check`];
//! `docs/unsafe.md` argues its soundness.

#![deny(unsafe_code)]

// Unsafe: one `flock(LOCK_SH | LOCK_NB)` system call (is a writer holding the pool?).
#[allow(unsafe_code)]
pub mod check;
pub mod codec;
// Unsafe: cache-line flush and fence instructions and streaming stores on raw addresses.
#[allow(unsafe_code)]
pub mod cpu;
pub mod directory;
pub mod domain;
pub mod error;
pub mod fault;
pub mod fof;
pub mod format_doc;
pub mod header;
pub mod layout;
// Unsafe: mmap/munmap/msync/flock system calls and copies through the mapping's raw pointer.
#[allow(unsafe_code)]
pub mod mapping;
pub mod medium;
pub mod pool;
pub mod recorded;
pub mod repair;
pub mod rng;
pub mod sched;
pub mod set;
pub mod sim;
pub mod tune;

pub use directory::{Alignment, Region, RegionKind, kinds};
pub use domain::{Backing, Domain};
pub use error::{Corruption, PmemError, Result};
pub use header::Uuid;
pub use mapping::Mapping;
pub use medium::Medium;
pub use pool::{CreateOptions, OpenOptions, Pool, PoolInfo};
pub use sim::{CrashPlan, Fate, SimConfig, SimDomain, SimMedium};
