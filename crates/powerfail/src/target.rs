//! What a save target implements.

use std::fmt;
use std::time::Instant;

use crate::SaveEstimate;

/// Something that must be made durable when power fails: a heap's redo logs and dirty lines, a
/// whole-system image, a simulator.
///
/// The registry calls, in this order and never concurrently for one save:
/// `stop_writers` on every target, then `save` on each, then (unless writers are held until the
/// warning clears) `resume_writers` on each. Calls to `stop_writers` and `resume_writers` are
/// paired: the registry never stops a target twice without resuming it in between.
///
/// Rules for implementors:
/// - No method may call back into the [`PowerFail`](crate::PowerFail) registry (register,
///   unregister, admit): the save holds the registry's save lock.
/// - `estimate` may be called from any thread at any time, including while writers are stopped
///   and from inside [`PowerFail::admit`](crate::PowerFail::admit); it must be cheap and must not
///   wait for writers.
/// - `estimate` reports work *not* already covered by an [`Admission`](crate::Admission) the
///   target's users hold (e.g. a heap reports its dirty lines and takes one admission per
///   redo-mode thread for that thread's log), so nothing is counted twice.
pub trait SaveTarget: Send + Sync {
    /// A name for reports.
    fn name(&self) -> String;
    /// The work a save of this target would do now.
    fn estimate(&self) -> SaveEstimate;
    /// Stops the writers at a safe point and returns once none is between safe points.
    fn stop_writers(&self);
    /// Makes the target durable, aiming to finish by `deadline` (the window's budget). A target
    /// may stop early at the deadline and say so with [`SaveError::Incomplete`].
    fn save(&self, deadline: Instant) -> Result<SaveReport, SaveError>;
    /// Lets the writers run again.
    fn resume_writers(&self);
}

/// What one target's save did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SaveReport {
    /// Bytes copied into persistent memory.
    pub bytes_copied: u64,
    /// Cache lines written back.
    pub lines_written_back: u64,
}

impl fmt::Display for SaveReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} B copied, {} lines written back",
            self.bytes_copied, self.lines_written_back
        )
    }
}

/// Why one target's save did not finish.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaveError {
    /// The target stopped at its deadline with work left.
    #[error("stopped at the deadline after {done}; left: {left}")]
    Incomplete {
        /// What was done.
        done: SaveReport,
        /// What was left.
        left: SaveEstimate,
    },
    /// The target could not save.
    #[error("save failed: {reason}")]
    Failed {
        /// Why.
        reason: String,
    },
}
