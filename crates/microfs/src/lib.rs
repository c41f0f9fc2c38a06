//! `microfs`: NVMe-CR's micro file system for checkpoint/restart.
//!
//! One [`Fs`] is one private namespace on one device (a partition of a PM region, a file, or
//! a remote target's namespace): data in hugeblocks from a circular free pool, written straight
//! to the device; metadata (inodes, a per-directory B-tree index, block ownership) in DRAM,
//! made durable by a compact operation log on the device (Kavach's log) and checkpointed to one
//! of two slots. `docs/format/microfs.md` documents the bytes.

#![deny(unsafe_code)]

pub mod balance;
mod codec;
pub mod device;
mod error;
mod fs;
pub mod instance;
pub mod label;
pub mod layout;
mod logdev;
mod state;

pub use error::{FsError, Result};
pub use fs::{
    CheckReport, DirEntry, Finding, Fs, FsOptions, FsStats, Ino, Kind, NamespaceId, Provenance,
    Recovery, Stat,
};
