//! DStore: an object and key-value store on DIPPER.
//!
//! The index (key to metadata and value), the value structures and the allocator state live
//! in DRAM arenas with offset pointers; DIPPER logs every change before it runs and keeps
//! shadow images in PM. See `README.md` for the guarantees.
#![forbid(unsafe_code)]

pub mod keyspace;
pub mod machine;
pub mod op;
pub mod store;
pub mod table;
pub mod zone;

pub use store::{
    Clock, Config, OBJECT_BYTES_MAX, Object, Opened, POOL_FILE, Store, StoreError, StoreResult,
    system_clock,
};
