//! `replication`: Arcadia's quorum replication of the Kavach log.
//!
//! A primary holds its own copy of a log and ships every range `force` makes durable to N
//! backups in parallel; `force` succeeds when W of them acknowledged that the bytes are
//! persistent ([`Replicator`], installed as the log's [`log::Mirror`]). A backup that does not
//! answer in time is dropped; with fewer than W left, `force` fails and the log refuses writes
//! until recovery.
//!
//! - **Epochs.** Each copy records in a fence the highest epoch it promised to follow, and in
//!   its superline the epoch of the primary whose history it holds. Recovery ([`recover`])
//!   reads the copies, needs a read quorum, takes the highest epoch plus one, gets a majority
//!   to promise it (so two primaries never share an epoch, and an old primary's writes are
//!   refused), chooses the copy with the highest superline epoch and the longest valid log,
//!   rebuilds the primary's own copy from it if needed, repairs every other copy (stale,
//!   damaged or empty), and only then serves.
//! - **Copies** ([`Copy`]) are byte-identical images of the log region; a backup only writes
//!   what it is sent, persists it, and answers.
//! - **Transport**: [`Peers`], with TCP ([`tcp`]) for real use and an in-process
//!   implementation in the deterministic simulation test.
//!
//! `docs/replication.md` explains the protocol and how to run it; `docs/format/replication.md`
//! documents the fence record and the messages.

#![forbid(unsafe_code)]

pub mod copy;
pub mod error;
pub mod host;
pub mod mem;
pub mod peers;
pub mod primary;
pub mod proto;
pub mod tcp;

pub use copy::{Copy, Fence, Host};
pub use error::{ProtoError, ReplError, Result};
pub use peers::Peers;
pub use primary::{
    BackupState, FlushOrder, Quorum, RecoverOptions, Recovered, Repair, ReplStats, Replicator,
    recover,
};
pub use proto::{CopyInfo, Request, Response};
