//! `haq`: quality of service between tenants that share a device, after HAQ (Chapter 6 of the
//! NVMe-CR dissertation): per-tenant submission queues in four classes (urgent, high, medium,
//! low), an arbiter that serves them by round robin, NVMe weighted round robin (cost 1 per
//! command) or deficit round robin (cost = bytes), the queueing model of Eq. 6.1-6.3 with
//! admission control, a deterministic discrete-event simulator of a device behind the arbiter,
//! and a real-time controller thread that the block target (`target`) runs every request
//! through.

#![deny(unsafe_code)]

pub mod arbiter;
pub mod calibrate;
pub mod class;
// ioprio_get(2) has no wrapper in std or libc: one raw system call with integer arguments.
#[allow(unsafe_code)]
pub mod ioprio;
pub mod model;
pub mod runtime;
pub mod scenario;
pub mod sim;
pub mod stats;

pub use arbiter::{Arbiter, ArbiterConfig, Full, Grant, Policy, QueueId, Weights};
pub use class::{Class, HaqError};
pub use ioprio::IoPrio;
pub use runtime::{Controller, ControllerOptions, Job, ServiceModel, TenantQueue};
pub use stats::{ControllerStats, Histogram, TenantStats};
