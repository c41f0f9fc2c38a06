//! `log`: Arcadia's concurrent persistent log.
//!
//! A log lives in a region of a pool (or any range of a [`pmem::Medium`]): two descriptor
//! copies, a superline kept with the atomicity primitive (two checksummed copies, the newer
//! valid one in force; head, start LSN and epoch, no tail pointer), and a ring of cache-line
//! aligned records, each `{lsn, length, kind, payload CRC, valid}` with the LSN as the header's
//! integrity check.
//!
//! - [`Log::reserve`] (serialized) hands out an LSN and a place in the ring;
//!   [`Reservation::copy`] writes the payload in place, [`Reservation::complete`] seals it;
//!   both run in parallel across threads.
//! - [`Log::force`] (serialized) waits for every earlier record to complete and persists them
//!   first, so durable records are always a prefix; with a frequency F it only persists at
//!   LSNs that are multiples of F ([`ForcePolicy`]).
//! - [`Log::cleanup`] frees the reclaimable prefix; [`Log::records`] is the recovery iterator.
//! - [`LogFile`] keeps a log in a pool file.
//!
//! - [`fof`]: the log in a pool running flush on fail (resume from a save's hints, or recover
//!   the checksummed prefix after a missed window).
//!
//! `docs/format/log.md` documents the bytes; the crate README says what is guaranteed.

#![forbid(unsafe_code)]

pub mod checksum;
pub mod error;
pub mod file;
pub mod fof;
pub mod format;
pub mod layout;
#[allow(clippy::module_inception)]
mod log;
pub mod mirror;
pub mod salvage;
mod scan;
pub mod sequencer;
mod sync;

pub use error::{LogError, Result};
pub use file::LogFile;
pub use format::{Descriptor, Superline};
pub use log::{
    Appended, Entries, Entry, Follow, Follower, ForcePolicy, Log, LogOptions, LogStats,
    NONTEMPORAL_BYTES_MIN, Record, RecordRef, Records, Recovery, Reservation,
};
pub use mirror::{Extent, Mirror};
pub use salvage::{Cut, CutKind, SalvagePlan};
pub use scan::Stop;
