//! [`PoolTarget`]: a pool running flush on fail, as a save target.
//!
//! The pool's layers store without writing lines back (the `eadr` domain of a mapping, the
//! simulator's `FlushOnFail`) and pass a [`WriterGate`] at their safe points. At a warning the
//! target closes the gate (and asks each [`LayerHook`] to stop), runs the hooks' save steps (an
//! integrity pass, a heap's save; they return resume hints), writes back every dirty line (all
//! lines of the pool's ranges, or only the pages a [`DirtyPages`] tracker marked, whichever
//! the measured cost says is cheaper), fences, and LAST writes the pool's flush-on-fail record `saved` with the hints
//! (`docs/format/fof.md`), unless the deadline has passed: a save that overruns leaves the
//! record `armed-unsaved`, so the next open treats the image as a missed window. When writers
//! resume (the warning cleared), the record goes back to `armed`, durably, before the gate
//! opens.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pmem::Medium;
use pmem::fof::{self, DirtyPages, FofState};
use pmem::layout::PAGE_SIZE;

use crate::{SaveError, SaveEstimate, SaveReport, SaveTarget, WriterGate};

const LINE: usize = 64;
/// Lines written back between two looks at the clock.
const CHUNK: usize = 16 * 1024;

/// A layer's part in a pool's save.
pub trait LayerHook: Send + Sync {
    /// A name for reports.
    fn name(&self) -> String;
    /// The writers are being stopped (after the pool's gate closed): reach a safe point.
    fn stop(&self) {}
    /// The writers may run again (the record is armed again).
    fn resume(&self) {}
    /// Runs with the writers stopped, before the pool's write-back (then the record): bring
    /// the layer's own state up to date, mark what it wrote in the target's tracker (or write
    /// it back itself with [`Medium::write_back`]), and return its resume hints (empty if
    /// none). A hook that errs fails the save (the record stays armed).
    fn save(&self, deadline: Instant) -> Result<Vec<u64>, String>;
}

/// Any [`SaveTarget`] run as a layer hook of a pool's save (e.g. a heap's on-demand target,
/// `heap::ondemand::HeapTarget`, when its heap lives in the pool): its writers are stopped with
/// the pool's, its save runs before the pool's write-back and marker (so the marker covers
/// it), and it is resumed with the pool. Register it here instead of with the registry, or it
/// would be saved twice.
pub struct TargetHook(pub Arc<dyn SaveTarget>);

impl fmt::Debug for TargetHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TargetHook({})", self.0.name())
    }
}

impl LayerHook for TargetHook {
    fn name(&self) -> String {
        self.0.name()
    }
    fn stop(&self) {
        self.0.stop_writers();
    }
    fn resume(&self) {
        self.0.resume_writers();
    }
    fn save(&self, deadline: Instant) -> Result<Vec<u64>, String> {
        self.0
            .save(deadline)
            .map(|_| Vec::new())
            .map_err(|e| e.to_string())
    }
}

/// How the save finds the lines to write back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteBack {
    /// Every line of the pool's ranges.
    All,
    /// The pages the tracker marked.
    Tracked,
    /// Whichever the measured cost ([`WriteBackCost`]) says is cheaper now.
    Cheaper,
}

/// Measured costs of the two ways to write back ([`PoolTarget::calibrate`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WriteBackCost {
    /// Writing back a line that holds no new store.
    pub clean_line: Duration,
    /// Writing back a line just stored to.
    pub dirty_line: Duration,
    /// Taking one word of the tracker's bitmap.
    pub bitmap_word: Duration,
}

impl Default for WriteBackCost {
    /// Figures of the order measured on this machine (see `docs/crash-testing.md`), until
    /// [`PoolTarget::calibrate`] runs.
    fn default() -> Self {
        WriteBackCost {
            clean_line: Duration::from_nanos(5),
            dirty_line: Duration::from_nanos(20),
            bitmap_word: Duration::from_nanos(3),
        }
    }
}

/// What a plan or a save chose.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    /// The way chosen.
    pub mode: WriteBack,
    /// Lines of the pool's ranges.
    pub all_lines: u64,
    /// Lines of the pages the tracker marks now.
    pub tracked_lines: u64,
    /// Estimated time writing back every line.
    pub all: Duration,
    /// Estimated time scanning the bitmap and writing back the tracked pages.
    pub tracked: Duration,
}

/// A pool in flush-on-fail mode as a save target (see the module documentation).
pub struct PoolTarget<M: Medium> {
    name: String,
    medium: M,
    ranges: Vec<(usize, usize)>,
    record: usize,
    gate: Arc<WriterGate>,
    dirty: Option<Arc<DirtyPages>>,
    hooks: Mutex<Vec<Arc<dyn LayerHook>>>,
    policy: WriteBack,
    cost: Mutex<WriteBackCost>,
    last: Mutex<Option<Plan>>,
}

impl<M: Medium> fmt::Debug for PoolTarget<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolTarget")
            .field("name", &self.name)
            .field("ranges", &self.ranges)
            .field("record", &self.record)
            .field("policy", &self.policy)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<M: Medium> PoolTarget<M> {
    /// A target for the pool on `medium` whose regions are `ranges` (offset, length), whose
    /// record is at `record`, whose writers pass `gate`, and whose layers mark `dirty` (if
    /// any; without it the save writes back every line).
    pub fn new(
        name: impl Into<String>,
        medium: M,
        ranges: Vec<(usize, usize)>,
        record: usize,
        gate: Arc<WriterGate>,
        dirty: Option<Arc<DirtyPages>>,
        policy: WriteBack,
    ) -> Result<PoolTarget<M>, pmem::PmemError> {
        for &(o, l) in &ranges {
            if o.checked_add(l).is_none_or(|e| e > medium.len()) {
                return Err(pmem::PmemError::Invalid {
                    what: "pool save target range",
                    reason: format!(
                        "[{o:#x}, +{l:#x}) is outside the {}-byte medium",
                        medium.len()
                    ),
                });
            }
        }
        if policy == WriteBack::Tracked && dirty.is_none() {
            return Err(pmem::PmemError::Invalid {
                what: "pool save target",
                reason: "tracked write-back needs a dirty-page tracker".into(),
            });
        }
        fof::read(&medium, record)?;
        Ok(PoolTarget {
            name: name.into(),
            medium,
            ranges,
            record,
            gate,
            dirty,
            hooks: Mutex::new(Vec::new()),
            policy,
            cost: Mutex::new(WriteBackCost::default()),
            last: Mutex::new(None),
        })
    }

    /// The medium.
    pub fn medium(&self) -> &M {
        &self.medium
    }

    /// Adds a layer hook (saved, and asked for hints, in the order added).
    pub fn add_hook(&self, hook: Arc<dyn LayerHook>) {
        lock(&self.hooks).push(hook);
    }

    /// The pool starts running flush on fail: every line of its ranges is written back and
    /// fenced, then the record is armed, durably.
    pub fn arm(&self) -> pmem::Result<()> {
        for &(o, l) in &self.ranges {
            self.medium.write_back(o, l)?;
        }
        self.medium.fence()?;
        if let Some(d) = &self.dirty {
            d.take();
        }
        fof::arm(&self.medium, self.record)?;
        Ok(())
    }

    /// The state the record says now.
    pub fn state(&self) -> pmem::Result<FofState> {
        Ok(fof::read(&self.medium, self.record)?.state())
    }

    /// Measures the write-back costs on this medium: `rounds` passes over the ranges with
    /// nothing stored (clean lines), over a sample of lines just stored to (each rewritten
    /// with its own contents: nothing changes), and over the tracker's bitmap (not cleared).
    /// Writers must be stopped (the calibration rewrites lines in place).
    pub fn calibrate(&self, rounds: u32) -> pmem::Result<WriteBackCost> {
        let rounds = rounds.max(1);
        let all_lines: usize = self.ranges.iter().map(|&(_, l)| l.div_ceil(LINE)).sum();
        let mut clean = Duration::MAX;
        let mut dirty = Duration::MAX;
        let mut word = Duration::MAX;
        let mut buf = [0u8; LINE];
        for _ in 0..rounds {
            let t = Instant::now();
            for &(o, l) in &self.ranges {
                self.medium.write_back(o, l)?;
            }
            self.medium.fence()?;
            clean = clean.min(t.elapsed() / all_lines.max(1) as u32);
            // A sample of up to 4096 lines, stored to (same bytes), then written back (only
            // the write-back is timed).
            let mut sample = Vec::with_capacity(4096);
            'ranges: for &(o, l) in &self.ranges {
                let mut at = o;
                while at + LINE <= o + l {
                    self.medium.read(at, &mut buf);
                    self.medium.write(at, &buf);
                    sample.push(at);
                    if sample.len() == 4096 {
                        break 'ranges;
                    }
                    at += LINE;
                }
            }
            let t = Instant::now();
            for &at in &sample {
                self.medium.write_back(at, LINE)?;
            }
            self.medium.fence()?;
            let sample = sample.len() as u32;
            dirty = dirty.min(t.elapsed() / sample.max(1));
            if let Some(d) = &self.dirty {
                let t = Instant::now();
                std::hint::black_box(d.count());
                word = word.min(t.elapsed() / d.words().max(1) as u32);
            }
        }
        let c = WriteBackCost {
            clean_line: clean,
            dirty_line: dirty.max(clean),
            bitmap_word: if word == Duration::MAX {
                Duration::ZERO
            } else {
                word
            },
        };
        *lock(&self.cost) = c;
        Ok(c)
    }

    /// The costs in use.
    pub fn cost(&self) -> WriteBackCost {
        *lock(&self.cost)
    }

    /// Sets the costs (e.g. measured once by [`PoolTarget::calibrate`] on another target of
    /// the same medium).
    pub fn set_cost(&self, cost: WriteBackCost) {
        *lock(&self.cost) = cost;
    }

    /// What a save would do now.
    pub fn plan(&self) -> Plan {
        let c = self.cost();
        let all_lines: u64 = self
            .ranges
            .iter()
            .map(|&(_, l)| l.div_ceil(LINE) as u64)
            .sum();
        let (tracked_lines, words) = match &self.dirty {
            Some(d) => ((d.count() * PAGE_SIZE / LINE) as u64, d.words() as u64),
            None => (all_lines, 0),
        };
        let dirty_lines = tracked_lines.min(all_lines);
        let all = times(c.dirty_line, dirty_lines) + times(c.clean_line, all_lines - dirty_lines);
        let tracked = times(c.bitmap_word, words) + times(c.dirty_line, tracked_lines);
        let mode = match (self.policy, &self.dirty) {
            (WriteBack::All, _) | (_, None) => WriteBack::All,
            (WriteBack::Tracked, Some(_)) => WriteBack::Tracked,
            (WriteBack::Cheaper, Some(_)) if tracked <= all => WriteBack::Tracked,
            (WriteBack::Cheaper, Some(_)) => WriteBack::All,
        };
        Plan {
            mode,
            all_lines,
            tracked_lines,
            all,
            tracked,
        }
    }

    /// What the last save chose.
    pub fn last_plan(&self) -> Option<Plan> {
        *lock(&self.last)
    }

    /// Write back `[o, o + l)` in chunks, looking at the clock between them.
    fn write_back_range(
        &self,
        o: usize,
        l: usize,
        deadline: Instant,
        lines: &mut u64,
    ) -> Result<(), SaveError> {
        let mut at = o;
        while at < o + l {
            if Instant::now() >= deadline {
                return Err(self.incomplete(*lines));
            }
            let n = (o + l - at).min(CHUNK * LINE);
            self.medium.write_back(at, n).map_err(failed)?;
            *lines += n.div_ceil(LINE) as u64;
            at += n;
        }
        Ok(())
    }

    fn incomplete(&self, lines: u64) -> SaveError {
        SaveError::Incomplete {
            done: SaveReport {
                bytes_copied: 0,
                lines_written_back: lines,
            },
            left: self.work(),
        }
    }

    /// The lines a save would write back now (the record's copy included).
    pub fn work(&self) -> SaveEstimate {
        let p = self.plan();
        let lines = match p.mode {
            WriteBack::Tracked => p.tracked_lines,
            _ => p.all_lines,
        };
        SaveEstimate::new(0, lines + (fof::COPY_BYTES / LINE) as u64)
    }

    fn write_back_dirty(&self, plan: &Plan, deadline: Instant) -> Result<u64, SaveError> {
        let mut lines = 0u64;
        match (plan.mode, &self.dirty) {
            (WriteBack::Tracked, Some(d)) => {
                let pages = d.take();
                let len = self.medium.len();
                for (i, &p) in pages.iter().enumerate() {
                    let o = p * PAGE_SIZE;
                    if o >= len {
                        continue;
                    }
                    if let Err(e) =
                        self.write_back_range(o, PAGE_SIZE.min(len - o), deadline, &mut lines)
                    {
                        // Not written back: still dirty for the next save.
                        d.put_back(&pages[i..]);
                        return Err(e);
                    }
                }
            }
            _ => {
                let taken = self.dirty.as_ref().map(|d| d.take());
                for &(o, l) in &self.ranges {
                    if let Err(e) = self.write_back_range(o, l, deadline, &mut lines) {
                        if let (Some(d), Some(t)) = (&self.dirty, &taken) {
                            d.put_back(t);
                        }
                        return Err(e);
                    }
                }
            }
        }
        Ok(lines)
    }
}

/// `d * n`, saturating.
fn times(d: Duration, n: u64) -> Duration {
    Duration::from_nanos(
        u64::try_from(d.as_nanos())
            .unwrap_or(u64::MAX)
            .saturating_mul(n),
    )
}

fn failed(e: pmem::PmemError) -> SaveError {
    SaveError::Failed {
        reason: e.to_string(),
    }
}

impl<M: Medium + 'static> SaveTarget for PoolTarget<M> {
    fn name(&self) -> String {
        format!("pool {}", self.name)
    }

    fn estimate(&self) -> SaveEstimate {
        self.work()
    }

    fn stop_writers(&self) {
        self.gate.close();
        for h in lock(&self.hooks).iter() {
            h.stop();
        }
    }

    fn save(&self, deadline: Instant) -> Result<SaveReport, SaveError> {
        // The hooks first (an integrity pass, a heap's on-demand save write lines the
        // write-back must then cover; they mark them in the tracker or write them back).
        let hooks: Vec<Arc<dyn LayerHook>> = lock(&self.hooks).clone();
        let mut hints = Vec::new();
        for h in &hooks {
            let mine = h.save(deadline).map_err(|reason| SaveError::Failed {
                reason: format!("{}: {reason}", h.name()),
            })?;
            hints.extend(mine);
        }
        let plan = self.plan();
        *lock(&self.last) = Some(plan);
        let mut lines = self.write_back_dirty(&plan, deadline)?;
        self.medium.fence().map_err(failed)?;
        // The marker, last, and never after the deadline: an overrun leaves it armed.
        if Instant::now() >= deadline {
            return Err(self.incomplete(lines));
        }
        fof::mark_saved(&self.medium, self.record, fof::now_ns(), &hints).map_err(failed)?;
        lines += (fof::COPY_BYTES / LINE) as u64;
        Ok(SaveReport {
            bytes_copied: 0,
            lines_written_back: lines,
        })
    }

    fn resume_writers(&self) {
        // Back to armed, durably, before any writer stores again; if that fails the gate
        // stays shut (writers wait rather than write over a `saved` image).
        match fof::read(&self.medium, self.record).map(|f| f.state()) {
            Ok(FofState::Armed) => {}
            Ok(_) => {
                if fof::arm(&self.medium, self.record).is_err() {
                    return;
                }
            }
            Err(_) => return,
        }
        for h in lock(&self.hooks).iter() {
            h.resume();
        }
        self.gate.open();
    }
}
