//! The registry of save targets, admission control, and the bounded save.
//!
//! Lock order (outer first): `save_lock` -> `admit_lock` -> `state` -> `config`. `config` and
//! `state` are only held for short bookkeeping, never across a call into a target, except that
//! `try_register` holds `save_lock` and `admit_lock` while it asks the new target's estimate.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::window::ms;
use crate::{SaveCost, SaveError, SaveEstimate, SaveReport, SaveTarget, Window};

/// The registry: targets to save, the configured window and cost model, admissions granted.
/// Cloning gives another handle to the same registry.
#[derive(Clone)]
pub struct PowerFail {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for PowerFail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = lock(&self.inner.state);
        f.debug_struct("PowerFail")
            .field("targets", &st.targets.len())
            .field("reserved", &st.reserved)
            .field("holding", &st.holding)
            .finish()
    }
}

pub(crate) struct Inner {
    /// Serialises saves, registration and clearing.
    save_lock: Mutex<()>,
    /// Serialises admission decisions so two reservations cannot both squeeze into the budget.
    admit_lock: Mutex<()>,
    state: Mutex<State>,
    config: Mutex<(Window, SaveCost)>,
    next_id: AtomicU64,
    /// Live warning sources: id, description, and whether their save thread still runs.
    sources: Mutex<Vec<(u64, String, Arc<AtomicBool>)>>,
}

/// Keeps a warning source listed in [`PowerFail::sources`] while it lives.
pub(crate) struct SourceToken {
    inner: Arc<Inner>,
    id: u64,
}

impl Drop for SourceToken {
    fn drop(&mut self) {
        lock(&self.inner.sources).retain(|(id, _, _)| *id != self.id);
    }
}

#[derive(Default)]
struct State {
    targets: Vec<Entry>,
    /// Work reserved by live admissions.
    reserved: SaveEstimate,
    /// Writers stay stopped after a warning's save until [`PowerFail::clear`].
    holding: bool,
    /// Ids of targets whose writers the registry has stopped and not yet resumed.
    held: Vec<u64>,
}

#[derive(Clone)]
struct Entry {
    id: u64,
    target: Arc<dyn SaveTarget>,
}

/// Locks a mutex, taking the data even if a panicking thread poisoned it (the registry's
/// bookkeeping is updated in single steps, so it stays consistent).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs a target call, turning a panic into a message.
fn guarded<R>(what: &str, name: &str, f: impl FnOnce() -> R) -> Result<R, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic".into());
        format!("target '{name}' panicked in {what}: {msg}")
    })
}

/// A registered target; dropping it unregisters the target (a save already running may still
/// save it once more).
#[must_use = "dropping a Registration unregisters the target"]
pub struct Registration {
    inner: Arc<Inner>,
    id: u64,
    name: String,
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish()
    }
}

impl Registration {
    /// The registry's id for this target.
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let resume = {
            let mut st = lock(&self.inner.state);
            let pos = st.targets.iter().position(|e| e.id == self.id);
            let entry = pos.map(|p| st.targets.remove(p));
            let was_held = st
                .held
                .iter()
                .position(|&h| h == self.id)
                .map(|p| st.held.remove(p));
            entry.filter(|_| was_held.is_some())
        };
        // A target held stopped after a warning is let go as it leaves.
        if let Some(e) = resume {
            let _ = guarded("resume_writers", &self.name, || e.target.resume_writers());
        }
    }
}

/// Reserved save work (e.g. one thread's redo log); dropping it releases the reservation.
#[must_use = "dropping an Admission releases its reservation"]
pub struct Admission {
    inner: Arc<Inner>,
    amount: SaveEstimate,
}

impl fmt::Debug for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admission")
            .field("amount", &self.amount)
            .finish()
    }
}

impl Admission {
    /// The work this admission reserves.
    pub fn amount(&self) -> SaveEstimate {
        self.amount
    }

    /// Reserves `more` on top of this admission, or refuses and leaves it as it was.
    pub fn grow(&mut self, more: SaveEstimate) -> Result<(), Refused> {
        let extra = PowerFail {
            inner: self.inner.clone(),
        }
        .admit(more)?;
        self.amount += extra.amount;
        // The reservation now belongs to `self`; forget the temporary token without releasing.
        std::mem::forget(extra);
        Ok(())
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut st = lock(&self.inner.state);
        st.reserved = st.reserved.saturating_sub(self.amount);
    }
}

/// Admission refused: the estimated save would not fit in the window's budget.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "refused: the save would take an estimated {estimated_ms:.3} ms ({work}), over the budget of \
     {budget_ms:.3} ms (window {window_ms:.3} ms less its margin)"
)]
pub struct Refused {
    /// The estimated save time with the extra work, in ms.
    pub estimated_ms: f64,
    /// The whole window, in ms.
    pub window_ms: f64,
    /// The window less its margin, in ms: what the estimate had to fit in.
    pub budget_ms: f64,
    /// All the work the estimate covered.
    pub work: SaveEstimate,
}

/// How a save went, judged against the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every target saved, inside the budget.
    Inside,
    /// Every target saved, after the budget but inside the window (the margin was used).
    InsideMargin,
    /// Finished inside the window, but some target failed or stopped incomplete.
    Failed,
    /// The save finished after the window had ended: on a real power cut it would not have
    /// finished.
    Overrun,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Inside => "saved inside the budget",
            Verdict::InsideMargin => "saved inside the window, using its margin",
            Verdict::Failed => "FAILED: a target did not save",
            Verdict::Overrun => "OVERRUN: the save outlasted the window",
        })
    }
}

/// One target's part of a save.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetOutcome {
    /// The target's name.
    pub name: String,
    /// Its estimate just before saving.
    pub estimate: SaveEstimate,
    /// The cost model's time for that estimate.
    pub estimated: Duration,
    /// When its save began, from the warning (the save's origin).
    pub began: Duration,
    /// How long its save took.
    pub elapsed: Duration,
    /// What it reported; a panic in the target is reported as [`SaveError::Failed`].
    pub result: Result<SaveReport, SaveError>,
}

/// The report of one bounded save.
#[derive(Debug, Clone, PartialEq)]
pub struct SaveOutcome {
    /// The window the save ran in.
    pub window: Window,
    /// From the warning to the start of the save (the save thread's wake-up); zero for a save
    /// started directly with [`PowerFail::run_save`].
    pub latency: Duration,
    /// From the warning until every writer was stopped.
    pub stopped: Duration,
    /// From the warning until the last target's save returned.
    pub elapsed: Duration,
    /// Per target, in registration order.
    pub targets: Vec<TargetOutcome>,
    /// Problems outside `save` (a target panicking in `stop_writers`).
    pub problems: Vec<String>,
    /// Whether the writers were resumed after the save (false: held until the warning clears).
    pub resumed: bool,
    /// The judgement.
    pub verdict: Verdict,
}

impl SaveOutcome {
    /// True if every target saved and the save ended inside the window.
    pub fn is_durable(&self) -> bool {
        matches!(self.verdict, Verdict::Inside | Verdict::InsideMargin)
    }

    /// Total bytes copied and lines written back by the targets that reported success.
    pub fn saved(&self) -> SaveReport {
        let mut r = SaveReport::default();
        for t in &self.targets {
            if let Ok(s) = &t.result {
                r.bytes_copied += s.bytes_copied;
                r.lines_written_back += s.lines_written_back;
            }
        }
        r
    }
}

impl fmt::Display for SaveOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: {:.3} ms of a {} window (wake-up {:.3} ms, writers stopped at {:.3} ms, {})",
            self.verdict,
            ms(self.elapsed),
            self.window,
            ms(self.latency),
            ms(self.stopped),
            if self.resumed {
                "writers resumed"
            } else {
                "writers held"
            },
        )?;
        for t in &self.targets {
            write!(
                f,
                "  {}: began {:.3} ms, took {:.3} ms (estimated {:.3} ms for {}): ",
                t.name,
                ms(t.began),
                ms(t.elapsed),
                ms(t.estimated),
                t.estimate
            )?;
            match &t.result {
                Ok(r) => writeln!(f, "{r}")?,
                Err(e) => writeln!(f, "{e}")?,
            }
        }
        for p in &self.problems {
            writeln!(f, "  problem: {p}")?;
        }
        Ok(())
    }
}

impl PowerFail {
    /// A registry planning saves for `window` with the cost model `cost`.
    pub fn new(window: Window, cost: SaveCost) -> PowerFail {
        PowerFail {
            inner: Arc::new(Inner {
                save_lock: Mutex::new(()),
                admit_lock: Mutex::new(()),
                state: Mutex::new(State::default()),
                config: Mutex::new((window, cost)),
                next_id: AtomicU64::new(1),
                sources: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The window admission control plans for.
    pub fn window(&self) -> Window {
        lock(&self.inner.config).0
    }

    /// The cost model.
    pub fn cost(&self) -> SaveCost {
        lock(&self.inner.config).1
    }

    /// Changes the planned window (admissions already granted stay granted).
    pub fn set_window(&self, window: Window) {
        lock(&self.inner.config).0 = window;
    }

    /// Changes the cost model (admissions already granted stay granted).
    pub fn set_cost(&self, cost: SaveCost) {
        lock(&self.inner.config).1 = cost;
    }

    /// Registers a target without admission control. Waits for a save in progress to finish;
    /// if writers are being held after a warning, the new target's writers are stopped at once.
    pub fn register(&self, target: Arc<dyn SaveTarget>) -> Registration {
        let _s = lock(&self.inner.save_lock);
        self.add(target)
    }

    /// Registers a target if the estimated save, with its current estimate added, fits in the
    /// window's budget.
    pub fn try_register(&self, target: Arc<dyn SaveTarget>) -> Result<Registration, Refused> {
        let _s = lock(&self.inner.save_lock);
        let _a = lock(&self.inner.admit_lock);
        self.check(target.estimate(), 1)?;
        Ok(self.add(target))
    }

    fn add(&self, target: Arc<dyn SaveTarget>) -> Registration {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let name = target.name();
        let holding = {
            let mut st = lock(&self.inner.state);
            st.targets.push(Entry {
                id,
                target: target.clone(),
            });
            if st.holding {
                st.held.push(id);
            }
            st.holding
        };
        if holding {
            if let Err(p) = guarded("stop_writers", &name, || target.stop_writers()) {
                eprintln!("powerfail: {p}");
            }
        }
        Registration {
            inner: self.inner.clone(),
            id,
            name,
        }
    }

    /// Number of registered targets.
    pub fn targets(&self) -> usize {
        lock(&self.inner.state).targets.len()
    }

    /// The work a save would do now (every target's estimate plus the reservations) and the
    /// cost model's time for it.
    pub fn estimated(&self) -> (SaveEstimate, Duration) {
        let (entries, reserved) = self.snapshot();
        let mut work = reserved;
        for e in &entries {
            work += e.target.estimate();
        }
        (work, self.cost().time(work, entries.len()))
    }

    /// Reserves `extra` save work if the estimated save with it still fits in the window's
    /// budget; the reservation lasts as long as the returned [`Admission`].
    pub fn admit(&self, extra: SaveEstimate) -> Result<Admission, Refused> {
        let _a = lock(&self.inner.admit_lock);
        self.check(extra, 0)?;
        lock(&self.inner.state).reserved += extra;
        Ok(Admission {
            inner: self.inner.clone(),
            amount: extra,
        })
    }

    /// Whether `extra` (and `more_targets` new targets) fit; caller holds `admit_lock`.
    fn check(&self, extra: SaveEstimate, more_targets: usize) -> Result<(), Refused> {
        let (entries, reserved) = self.snapshot();
        let mut work = reserved + extra;
        for e in &entries {
            work += e.target.estimate();
        }
        let (window, cost) = *lock(&self.inner.config);
        let est = cost.time(work, entries.len() + more_targets);
        if est > window.budget() {
            return Err(Refused {
                estimated_ms: ms(est),
                window_ms: ms(window.total()),
                budget_ms: ms(window.budget()),
                work,
            });
        }
        Ok(())
    }

    fn snapshot(&self) -> (Vec<Entry>, SaveEstimate) {
        let st = lock(&self.inner.state);
        (st.targets.clone(), st.reserved)
    }

    /// Runs a bounded save now within `window`, and resumes the writers after it.
    pub fn run_save(&self, window: Window) -> SaveOutcome {
        self.inner.save(Instant::now(), window, false)
    }

    /// Runs a bounded save for a warning raised at `origin` (the window counts from there);
    /// with `hold`, the writers stay stopped until [`PowerFail::clear`].
    pub fn run_save_from(&self, origin: Instant, window: Window, hold: bool) -> SaveOutcome {
        self.inner.save(origin, window, hold)
    }

    pub(crate) fn arm(&self, name: String, thread_alive: Arc<AtomicBool>) -> SourceToken {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.inner.sources).push((id, name, thread_alive));
        SourceToken {
            inner: self.inner.clone(),
            id,
        }
    }

    /// The live warning sources feeding this registry, each with whether its save thread still
    /// runs.
    pub fn sources(&self) -> Vec<(String, bool)> {
        lock(&self.inner.sources)
            .iter()
            .map(|(_, name, alive)| (name.clone(), alive.load(Ordering::Acquire)))
            .collect()
    }

    /// Whether some warning source with a running save thread can start a save. Without one, a
    /// target relying on a save at power failure (e.g. a heap's redo mode) must make its commits
    /// durable itself.
    pub fn armed(&self) -> bool {
        lock(&self.inner.sources)
            .iter()
            .any(|(_, _, alive)| alive.load(Ordering::Acquire))
    }

    /// Whether writers are being held stopped after a warning's save.
    pub fn holding(&self) -> bool {
        lock(&self.inner.state).holding
    }

    /// The warning is over (power is back): resumes writers held since a save. Returns how many
    /// targets were resumed.
    pub fn clear(&self) -> usize {
        let _s = lock(&self.inner.save_lock);
        let resume: Vec<Entry> = {
            let mut st = lock(&self.inner.state);
            st.holding = false;
            let held = std::mem::take(&mut st.held);
            st.targets
                .iter()
                .filter(|e| held.contains(&e.id))
                .cloned()
                .collect()
        };
        for e in &resume {
            if let Err(p) = guarded("resume_writers", &e.target.name(), || {
                e.target.resume_writers()
            }) {
                eprintln!("powerfail: {p}");
            }
        }
        resume.len()
    }
}

impl Inner {
    fn save(self: &Arc<Inner>, origin: Instant, window: Window, hold: bool) -> SaveOutcome {
        let _s = lock(&self.save_lock);
        let start = Instant::now();
        let budget_end = origin + window.budget();
        let (entries, already_held) = {
            let st = lock(&self.state);
            let already: Vec<bool> = st.targets.iter().map(|e| st.held.contains(&e.id)).collect();
            (st.targets.clone(), already)
        };
        let cost = lock(&self.config).1;
        let mut problems = Vec::new();
        let names: Vec<String> = entries.iter().map(|e| e.target.name()).collect();

        // 1. Stop every writer before saving anything, so no target changes under another's save.
        let mut stopped_by_us = vec![false; entries.len()];
        for (i, e) in entries.iter().enumerate() {
            if !already_held[i] {
                if let Err(p) = guarded("stop_writers", &names[i], || e.target.stop_writers()) {
                    problems.push(p);
                }
                stopped_by_us[i] = true;
            }
        }
        let stopped = Instant::now();
        // 2. Save each target against the budget's deadline.
        let mut targets = Vec::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            let estimate = e.target.estimate();
            let began = Instant::now();
            let result = guarded("save", &names[i], || e.target.save(budget_end))
                .unwrap_or_else(|reason| Err(SaveError::Failed { reason }));
            let done = Instant::now();
            targets.push(TargetOutcome {
                name: names[i].clone(),
                estimate,
                estimated: cost.time(estimate, 1),
                began: began.saturating_duration_since(origin),
                elapsed: done.saturating_duration_since(began),
                result,
            });
        }
        let end = Instant::now();

        // 3. With `hold`, targets still registered stay stopped until `clear`; the rest of what
        //    this save stopped (all of it without `hold`) is resumed.
        if hold {
            let mut st = lock(&self.state);
            for (i, e) in entries.iter().enumerate() {
                if stopped_by_us[i] && st.targets.iter().any(|t| t.id == e.id) {
                    st.held.push(e.id);
                    stopped_by_us[i] = false;
                }
            }
            st.holding = true;
        }
        for (i, e) in entries.iter().enumerate() {
            if stopped_by_us[i] {
                if let Err(p) = guarded("resume_writers", &names[i], || e.target.resume_writers()) {
                    problems.push(p);
                }
            }
        }

        let elapsed = end.saturating_duration_since(origin);
        let failed = !problems.is_empty() || targets.iter().any(|t| t.result.is_err());
        let verdict = if elapsed > window.total() {
            Verdict::Overrun
        } else if failed {
            Verdict::Failed
        } else if elapsed > window.budget() {
            Verdict::InsideMargin
        } else {
            Verdict::Inside
        };
        SaveOutcome {
            window,
            latency: start.saturating_duration_since(origin),
            stopped: stopped.saturating_duration_since(origin),
            elapsed,
            targets,
            problems,
            resumed: !hold,
            verdict,
        }
    }
}
