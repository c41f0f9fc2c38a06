//! The synchronization primitives of the sequencer: std's, or loom's under `--cfg loom` so the
//! reserve / complete / force protocol can be model-checked.

#[cfg(loom)]
pub(crate) use loom::sync::Mutex;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use std::sync::Mutex;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

/// Let another thread run while waiting for an earlier record to complete.
pub(crate) fn backoff(round: &mut u32) {
    #[cfg(loom)]
    {
        let _ = round;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    {
        if *round < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
        *round = round.saturating_add(1);
    }
}
