//! Durability on demand wired to a power-failure warning: a heap registered with a
//! [`powerfail::PowerFail`] registry, saved by its save thread when a warning comes.
//!
//! ```text
//! let pf = PowerFail::new(Window::default(), cost);      // 33 ms unless configured
//! let saver = SaveThread::spawn(&pf, HoldPolicy::HoldUntilClear)?;
//! let _sig = Sigpwr::install(&saver, Window::default())?; // or UpsSocket, or a manual source
//! let od = ondemand::enable(&heap, &pf)?;                 // redo commits stop flushing
//! ```
//!
//! Without a live warning source nothing changes: redo commits keep flushing at commit.

use std::sync::Arc;
use std::time::Instant;

use powerfail::{PowerFail, Registration, SaveError, SaveEstimate, SaveReport, SaveTarget};

use crate::error::{HeapError, Result};
use crate::raw::{OnDemandConfig, OnDemandPlan, RawHeap, SaveBudget};

/// A heap as a save target.
#[derive(Debug)]
pub struct HeapTarget {
    heap: Arc<RawHeap>,
}

impl SaveTarget for HeapTarget {
    fn name(&self) -> String {
        format!("heap {:016x}", self.heap.pool_id())
    }

    fn estimate(&self) -> SaveEstimate {
        let redo = u64::from(self.heap.geometry().redo_bytes);
        let threads = self
            .heap
            .on_demand_plan()
            .map(|(_, p)| p.threads as u64)
            .unwrap_or(0);
        let dirty = self.heap.on_demand_stats().dirty_lines;
        SaveEstimate::new(threads * redo, dirty + threads * redo / 64)
    }

    fn stop_writers(&self) {
        self.heap.stop_writers();
    }

    fn save(&self, deadline: Instant) -> std::result::Result<SaveReport, SaveError> {
        let budget = SaveBudget {
            window: deadline.saturating_duration_since(Instant::now()),
            modeled: None,
        };
        match self.heap.save(budget) {
            Ok(r) => {
                let done = SaveReport {
                    bytes_copied: r.log_bytes,
                    lines_written_back: r.lines_written_back,
                };
                if r.completed {
                    Ok(done)
                } else {
                    Err(SaveError::Incomplete {
                        done,
                        left: SaveEstimate::new(0, 0),
                    })
                }
            }
            Err(e) => Err(SaveError::Failed {
                reason: e.to_string(),
            }),
        }
    }

    fn resume_writers(&self) {
        // A resume that fails leaves the gate shut: writers wait rather than commit without
        // a save behind them.
        let _ = self.heap.resume_writers();
    }
}

/// Durability on demand in force for a heap; dropping it turns it off (everything left dirty
/// is written back, the lanes' marks cleared) and unregisters the heap.
#[derive(Debug)]
pub struct OnDemand {
    heap: Arc<RawHeap>,
    plan: OnDemandPlan,
    registration: Option<Registration>,
}

impl OnDemand {
    /// The admission plan: threads admitted, dirty lines allowed, the save's estimate.
    pub fn plan(&self) -> OnDemandPlan {
        self.plan
    }
}

impl Drop for OnDemand {
    fn drop(&mut self) {
        self.registration.take();
        let _ = self.heap.disable_on_demand();
    }
}

/// Turn on durability on demand for `heap`, saved by `pf` on every warning. Refused (and
/// nothing changed) when `pf` has no live warning source: then redo mode keeps flushing at
/// commit, which is the only guarantee that holds.
pub fn enable(heap: &Arc<RawHeap>, pf: &PowerFail) -> Result<OnDemand> {
    if !pf.armed() {
        return Err(HeapError::invalid(
            "durability on demand",
            "no power-failure warning source is live (SIGPWR, a UPS socket or the simulator); \
             redo transactions flush at commit instead",
        ));
    }
    let cost = heap.calibrate_save(3)?;
    let window = pf.window();
    let plan = heap.enable_on_demand(OnDemandConfig {
        window: window.total(),
        margin: window.margin(),
        cost,
    });
    let registration = pf.register(Arc::new(HeapTarget { heap: heap.clone() }));
    Ok(OnDemand {
        heap: heap.clone(),
        plan,
        registration: Some(registration),
    })
}
