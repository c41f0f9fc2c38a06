//! `powerfail`: power-failure warnings, the window of residual energy they leave, and a bounded
//! save of every registered target inside that window.
//!
//! - [`Window`]: how long the machine lasts after a warning (a deadline, or hold-up energy
//!   `1/2 C (V0^2 - Vmin^2) / P`), less a safety margin.
//! - [`SaveTarget`]: what a pool (or a whole-system image) implements: estimate, stop writers,
//!   save by a deadline, resume writers. [`WriterGate`] is a ready-made stop/resume for writers
//!   that pass safe points.
//! - [`PowerFail`]: the registry. [`PowerFail::run_save`] stops every target's writers, saves
//!   each, and reports per-target time and bytes and whether the save ended inside the window
//!   ([`Verdict::Overrun`] otherwise). [`PowerFail::admit`] refuses work whose estimated save, by
//!   the measured [`SaveCost`], would not fit in the window's budget.
//! - Warning sources: [`Sigpwr`] (an async-signal-safe handler that only wakes the save thread),
//!   [`UpsSocket`] (a Unix socket for NUT's `upsmon` NOTIFYCMD), and [`Manual`]. Each delivers
//!   a [`Warning`] to a [`SaveThread`], which runs the save.
//!
//! [`PoolTarget`] is the save target of a pool running flush on fail (`docs/format/fof.md`).
//!
//! Nothing here knows about heaps; see `README.md` for what a user-space save can and cannot
//! promise.

#![deny(unsafe_code)]

mod cost;
mod error;
mod gate;
mod pool;
mod registry;
// Unsafe: sigaction and the async-signal-safe handler (clock read, pipe write, chaining).
#[allow(unsafe_code)]
mod sigpwr;
mod target;
// Unsafe: one shutdown(2) on the listening socket to wake its accept loop at drop.
#[allow(unsafe_code)]
mod ups;
// Unsafe: pipe2, read and write of the save thread's wake-up pipe.
#[allow(unsafe_code)]
mod warning;
mod window;

pub use cost::{SaveCost, SaveEstimate, measure_copy_bandwidth};
pub use error::PowerFailError;
pub use gate::{GateGuard, WriterGate};
pub use pool::{LayerHook, Plan, PoolTarget, TargetHook, WriteBack, WriteBackCost};
pub use registry::{
    Admission, PowerFail, Refused, Registration, SaveOutcome, TargetOutcome, Verdict,
};
pub use sigpwr::Sigpwr;
pub use target::{SaveError, SaveReport, SaveTarget};
pub use ups::{IDLE_TIMEOUT, MAX_CONNECTIONS, MAX_LINE, UpsConfig, UpsEvent, UpsSocket};
pub use warning::{HoldPolicy, Manual, Record, SaveThread, Source, Warning, WarningSink};
pub use window::{HoldUp, Window, WindowKind};
