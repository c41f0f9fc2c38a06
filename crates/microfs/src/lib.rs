//! `microfs`: NVMe-CR's micro file system for checkpoint/restart.
//!
//! One [`Fs`] is one private namespace on one device (a partition of a PM region, a file, or
//! a remote target's namespace): data in hugeblocks from a circular free pool, written straight
//! to the device; metadata (inodes, a per-directory B-tree index, block ownership) in DRAM,
//! made durable by a compact operation log on the device (Kavach's log) and checkpointed to one
//! of two slots. `docs/format/microfs.md` documents the bytes.
//!
//! The index (the dissertation's DRAM B+tree from names to inodes) is one `BTreeMap` (a B-tree)
//! per directory, from names to inode numbers, rather than one map over full paths: a rename of
//! a directory is then one removal and one insertion instead of a rewrite of every path below
//! it; each map is exactly what the directory's file on the device lists, so `check` compares
//! them one to one; and a lookup costs a B-tree search per path component, a handful for
//! checkpoint paths. Writes are coalesced through a write-extent slot on the device updated in
//! place (see the format document): each write is durable when it returns, and a run of
//! writes to one file becomes one log record when another call comes.

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
