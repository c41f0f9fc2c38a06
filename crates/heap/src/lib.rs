//! `heap`: Kavach's persistent heap, the libpmemobj role.
//!
//! - [`raw::RawHeap`]: the engine. A size-class allocator (runs of 64 B to 64 KiB blocks with
//!   persistent bitmaps, whole 256 KiB chunks above that) with per-lane caches, undo-logged
//!   transactions on per-lane logs, an allocator redo log per lane, and recovery.
//! - [`typed`]: the Rust API. Persistent pointers carry their pool's type, values are plain
//!   bytes ([`bytemuck::Pod`]), and persistent data changes only through a transaction.
//! - [`file`]: heaps in pool files.
//! - [`check`]: the walk behind `kavach heap check` and `kavach heap stats`.
//! - [`reliable`]: reliable objects (every word beside an ECC check word) and their scrubber.
//!
//! Formats: `docs/format/heap.md`, `docs/format/undo-log.md`.
//!
//! The only unsafe code is the `Pod` implementations of [`typed`]'s persistent pointer and lock
//! types (`docs/unsafe.md`, "Typed access to the heap").

#![deny(unsafe_code)]

pub mod check;
pub mod ecc;
pub mod error;
pub mod file;
pub mod layout;
pub mod ondemand;
pub mod raw;
pub mod reliable;
pub mod stm;
// Unsafe: `unsafe impl Pod` for PPtr, RPtr, PMutex and PRwLock (their layouts have no padding).
#[allow(unsafe_code)]
pub mod typed;

pub use error::{HeapError, Result};
pub use file::HeapFile;
pub use raw::{Change, CommitObserver, HeapOptions, RawHeap, RecoveryReport, TxMode};
pub use typed::{Heap, PMutex, PPtr, PRwLock, PoolTag, RPtr, Tx};
