//! DStore: an object and key-value store on DIPPER.
//!
//! The index (key to metadata and value), the value structures and the allocator state live
//! in DRAM arenas with offset pointers; DIPPER logs every change before it runs and keeps
//! shadow images in PM. See `README.md` for the guarantees. [`api`] is DStore's library API
//! (the dissertation's Table 4.3): per-thread contexts, objects, `olock`/`ounlock`.
#![forbid(unsafe_code)]

pub mod api;
pub mod error;
pub mod keyspace;
mod locks;
pub mod machine;
pub mod op;
pub mod protect;
pub mod store;
pub mod table;
pub mod zone;

pub use api::{Context, ObjectHandle, OpenMode};
pub use protect::{Guarded, ProtectOptions, Protection, ScrubSummary, StoreIntegrity};
pub use store::{
    Clock, Config, GuardedStore, OBJECT_BYTES_MAX, Object, Opened, POOL_FILE, ProtectedOpened,
    Store, StoreError, StoreResult, system_clock,
};
