//! Replicated serving as a library; the command-line crate only starts it.
//!
//! - [`serve`]: the replicated store backend (primary and backup), the backup's apply loop,
//!   promotion, the keeper that trims the log behind the stores and takes dropped backups
//!   back, and snapshots for backups the log was trimmed past.
//! - [`store`]: what a replicated node keeps in its store besides the data (the applied mark),
//!   applying records and snapshots, and making snapshots.
//! - [`elect`]: the failover elector (`kavach elect`) as a state machine over a small
//!   coordination trait ([`coord::Coordinator`]), with two coordinators: etcd through its JSON
//!   gateway ([`etcd`]) and a deterministic in-memory one with a simulated clock and partitions
//!   ([`mem`]) that the simulation in `tests/sim.rs` drives.

#![forbid(unsafe_code)]

pub mod coord;
pub mod elect;
pub mod etcd;
pub mod mem;
pub mod serve;
pub mod store;

pub use coord::{CoordError, CoordOp, Coordinator, KeyValue};
pub use elect::{
    ElectError, Elector, ElectorConfig, Event, Next, Node, NodeRole, Phase, Promotion, Step,
};
pub use etcd::Etcd;
pub use mem::{Link, MemClient, MemCoordinator};
