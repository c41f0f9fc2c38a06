//! DIPPER: DRAM data structures made durable by a PM operation log and shadow copies that a
//! background checkpoint brings up to date without ever stopping the frontend.
//!
//! A store is a [`Machine`]: deterministic code over sharded [`Arena`]s. Every mutating
//! operation is logged (and forced) before it runs on the DRAM shards; checkpoints replay the
//! logged operations onto a copy of the last shadow image and switch the root to the new image
//! atomically; recovery loads the image and replays the log. See [`engine`] for the protocol
//! and `docs/format/dipper.md` for the bytes.
#![forbid(unsafe_code)]

pub mod arena;
pub mod engine;
pub mod error;
pub mod fof;
pub mod frames;
pub mod layout;
pub mod root;
pub mod slot;

pub use arena::Arena;
#[doc(hidden)]
pub use engine::ablation;
pub use engine::{
    CheckpointStats, Dipper, Layout, Locked, Machine, Options, Pacing, RecoveryReport, Stats,
};
pub use error::{DipperError, Result};
pub use log::ForcePolicy;
