//! `integrity`: redundancy for chosen regions of a pool, that programs do not have to call on
//! every store.
//!
//! A protected data region gets a CRC-32C per 4 KiB page (bound to the page number and the pool
//! UUID), XOR parity over stripes of K pages kept in a separate integrity region, a checksum
//! over each 64-byte block of each checksum array, and a header saying whether it was closed
//! cleanly (after an unclean shutdown, a read-write open resyncs). Four modes, chosen per region and switchable at each open:
//!
//! - `off`: nothing is kept.
//! - `lazy` (Vilamb): a background pass every period finds the pages written since the last
//!   pass through write tracking ([`tracker`]) and updates their checksums and their stripes'
//!   parity.
//! - `eager` (TVARAK's controller, in software): each write through [`Protected::write`] updates
//!   the page checksum from the diff, parity by `parity ^= old ^ new`, and a checksum per 64-byte
//!   line; each [`Protected::read`] verifies the lines it touches and repairs on a mismatch.
//! - `txb-page`: each write recomputes its pages' checksums and stripes' parity (a baseline).
//!
//! [`Protected::scrub`] verifies what counts as clean; [`Protected::repair`] rebuilds from parity
//! only what it can prove. The bytes are documented in `docs/format/integrity.md`.
//!
//! Unsafe code lives only in two write-tracking backends, [`tracker::uffd`] and
//! [`tracker::mprotect`]; `docs/unsafe.md` ("Write tracking") argues its soundness.

#![deny(unsafe_code)]

pub mod checksum;
mod eager;
pub mod engine;
pub mod error;
mod finding;
pub mod fof;
pub mod header;
mod inner;
pub mod layout;
mod lazy;
mod notify;
mod open;
mod options;
mod pool;
mod rebuild;
mod repair;
pub mod report;
pub mod tracker;
pub mod trust;

pub use engine::{
    CreateOptions, Mode, OpenOptions, OpenReport, Placement, Progress, Protected, format,
};
pub use error::{IntegrityError, Result};
pub use layout::Geometry;
pub use notify::{Changed, CommitStats};
pub use pool::{create_in_pool, meta_region_name, open_in_pool, placement};
pub use report::{
    Finding, FindingKind, PassStats, RepairOutcome, RepairReport, ScrubReport, Stats,
};
pub use tracker::{Tracker, TrackerKind};
pub use trust::{Basis, Trust};
