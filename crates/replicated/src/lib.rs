//! Replicated serving as a library. So far: the failover elector (`kavach elect`) as a state
//! machine ([`elect`]) over a small coordination trait ([`coord::Coordinator`]), with two
//! coordinators: etcd through its JSON gateway ([`etcd`]) and a deterministic in-memory one
//! with a simulated clock and partitions ([`mem`]) that the simulation in `tests/sim.rs` drives.
//! The command-line crate only starts it.

#![forbid(unsafe_code)]

pub mod coord;
pub mod elect;
pub mod etcd;
pub mod mem;

pub use coord::{CoordError, CoordOp, Coordinator, KeyValue};
pub use elect::{
    ElectError, Elector, ElectorConfig, Event, Next, Node, NodeRole, Phase, Promotion, Step,
};
pub use etcd::Etcd;
pub use mem::{Link, MemClient, MemCoordinator};
