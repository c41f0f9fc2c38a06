//! `heap`: Kavach's persistent heap, the libpmemobj role, with DNV Memory's transactions.
//!
//! - [`raw::RawHeap`]: the engine, one module per concern (`raw/`: open and recovery, lanes,
//!   the undo log, the redo log, the allocator, transactions, the lock table; the lock order is
//!   written beside `RawHeap`). A size-class allocator (runs of 64 B to 64 KiB blocks with
//!   persistent bitmaps, whole 256 KiB chunks above that) with per-lane caches; transactions in
//!   undo mode (old bytes to the lane's undo log), redo mode (new bytes in DRAM, applied at
//!   commit: two fences, or none with durability on demand) or isolated mode (redo under
//!   [`stm`]); recovery of both logs.
//! - [`ondemand`]: durability on demand driven by `powerfail`'s warnings and bounded save.
//! - [`ecc`]: the reliable-word code (an 8-byte check word per 8-byte word).
//! - [`stm`]: the word-based STM behind isolated transactions.
//! - [`typed`]: the Rust API. Persistent pointers carry their pool's type, values are plain
//!   bytes ([`bytemuck::Pod`]), and persistent data changes only through a transaction.
//! - [`file`]: heaps in pool files.
//! - [`check`]: the walk behind `kavach heap check` and `kavach heap stats`.
//! - [`reliable`]: reliable objects (every word beside an ECC check word) and their scrubber.
//!
//! Formats: `docs/format/heap.md`, `docs/format/undo-log.md`, `docs/format/redo-log.md`.
//! DNV Memory's parts and their measurements: `docs/dnv.md`.
//!
//! Unsafe code: the `Pod` implementations of [`typed`]'s persistent pointer and lock types,
//! and the SSE4.2 CRC instruction in `ecc::hw` (`docs/unsafe.md`).

#![deny(unsafe_code)]

pub mod check;
pub mod ecc;
pub mod error;
pub mod file;
pub mod layout;
pub mod ondemand;
pub mod protect;
pub mod raw;
pub mod reliable;
pub mod stm;
// Unsafe: `unsafe impl Pod` for PPtr, RPtr, PMutex and PRwLock (their layouts have no padding).
#[allow(unsafe_code)]
pub mod typed;

pub use error::{HeapError, Result};
pub use file::HeapFile;
pub use protect::Redundancy;
pub use raw::{Change, CommitObserver, HeapOptions, RawHeap, RecoveryReport, TxMode};
pub use typed::{Heap, PMutex, PPtr, PRwLock, PoolTag, RPtr, Tx};
