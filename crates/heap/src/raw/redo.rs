//! Redo-mode transactions (DNV Memory's way): new bytes wait in a log in DRAM and the commit
//! writes them in place (`docs/format/redo-log.md`).
//!
//! Two guarantees, chosen per heap:
//!
//! - **Flush at commit** (no power-failure warning registered): the commit writes the log into
//!   the lane's redo area and fences (F1, the commit point), then writes the new bytes in
//!   place, flushes them, retires the log in the lane's state word and fences (F2). Two
//!   fences where an undo-mode overwrite takes three, and no fence per `write`.
//! - **Durability on demand** ([`RawHeap::enable_on_demand`], a warning source registered):
//!   the commit writes the new bytes in place with plain stores: no flush, no fence. Before
//!   the first such commit of a lane after a save, the lane's redo header says `UNSAVED`
//!   (persisted once). On a power-failure warning [`RawHeap::save`] stops the writers, copies
//!   the logs of transactions caught applying into their lanes' redo areas, writes back every
//!   line those commits dirtied (tracked in a bitmap), fences, and only then marks the lanes
//!   `SAVED` (a log to redo) or `EMPTY`. A save that runs out of its window leaves `UNSAVED`
//!   in place, and open refuses such a heap ([`HeapError::NotSaved`]) rather than open a
//!   state that may be torn.
//!
//! Admission: the save has to fit the warning window. Each registered thread may be caught
//! with one log of up to `redo_bytes` to copy, and the tracked dirty lines are bounded; a
//! thread whose registration would push the estimate past the window runs its transactions in
//! undo mode, and [`RawHeap::begin_mode`] returns the mode it got.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[allow(unused_imports)]
use super::*;

/// The new bytes of a redo transaction: disjoint segments, later writes over earlier ones,
/// sorted by offset, their bytes in one arena (a transaction's writes allocate nothing once
/// the lane has warmed up).
#[derive(Debug, Default)]
pub(super) struct RedoSet {
    /// (offset, position in `data`, length), sorted by offset, disjoint.
    segs: Vec<(u64, usize, usize)>,
    data: Vec<u8>,
}

impl RedoSet {
    pub(super) fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    pub(super) fn clear(&mut self) {
        self.segs.clear();
        self.data.clear();
    }

    /// Index of the first segment that ends after `off`.
    fn first_ending_after(&self, off: u64) -> usize {
        self.segs.partition_point(|&(s, _, l)| s + l as u64 <= off)
    }

    pub(super) fn insert(&mut self, off: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let end = off + data.len() as u64;
        let i = self.first_ending_after(off);
        // Segments i..k overlap [off, end).
        let mut k = i;
        while k < self.segs.len() && self.segs[k].0 < end {
            k += 1;
        }
        if k == i {
            let pos = self.data.len();
            self.data.extend_from_slice(data);
            self.segs.insert(i, (off, pos, data.len()));
            return;
        }
        if k == i + 1 {
            let (s, pos, len) = self.segs[i];
            if s <= off && end <= s + len as u64 {
                // Inside one segment: overwrite in place.
                let at = pos + (off - s) as usize;
                self.data[at..at + data.len()].copy_from_slice(data);
                return;
            }
        }
        let start = off.min(self.segs[i].0);
        let (ls, _, ll) = self.segs[k - 1];
        let stop = end.max(ls + ll as u64);
        let pos = self.data.len();
        self.data.resize(pos + (stop - start) as usize, 0);
        for j in i..k {
            let (s, p, l) = self.segs[j];
            let at = pos + (s - start) as usize;
            self.data.copy_within(p..p + l, at);
        }
        let at = pos + (off - start) as usize;
        self.data[at..at + data.len()].copy_from_slice(data);
        self.segs.drain(i + 1..k);
        self.segs[i] = (start, pos, (stop - start) as usize);
    }

    /// Lay the transaction's bytes over `buf`, which holds `[off, off + buf.len())` as stored.
    pub(super) fn overlay(&self, off: u64, buf: &mut [u8]) {
        let end = off + buf.len() as u64;
        let mut i = self.first_ending_after(off);
        while i < self.segs.len() && self.segs[i].0 < end {
            let (s, p, l) = self.segs[i];
            let lo = off.max(s);
            let hi = end.min(s + l as u64);
            buf[(lo - off) as usize..(hi - off) as usize]
                .copy_from_slice(&self.data[p + (lo - s) as usize..p + (hi - s) as usize]);
            i += 1;
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &[u8])> {
        self.segs.iter().map(|&(s, p, l)| (s, &self.data[p..p + l]))
    }

    /// Bytes the log's data entries take.
    fn entry_bytes(&self) -> u64 {
        self.segs
            .iter()
            .map(|&(_, _, l)| REDO_ENTRY_HEADER_BYTES + (l as u64).div_ceil(8) * 8)
            .sum()
    }
}

/// How long a save may take, and how its time is counted.
#[derive(Debug, Clone, Copy)]
pub struct SaveBudget {
    /// The warning window (residual energy) the save must fit in.
    pub window: Duration,
    /// Count time with this model instead of the clock (the simulator, where nothing takes
    /// real time).
    pub modeled: Option<SaveCost>,
}

/// The cost of a save: a fixed part, each line written back, each log byte copied.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct SaveCost {
    /// Nanoseconds whatever the save holds (stopping the writers, the fences).
    pub fixed_ns: f64,
    /// Nanoseconds per 64-byte line written back.
    pub line_ns: f64,
    /// Nanoseconds per log byte copied into a lane's redo area.
    pub byte_ns: f64,
}

impl SaveCost {
    /// Estimated nanoseconds to write back `lines` lines and copy `bytes` log bytes.
    pub fn estimate_ns(&self, lines: u64, bytes: u64) -> f64 {
        self.fixed_ns + lines as f64 * self.line_ns + bytes as f64 * self.byte_ns
    }
}

/// Durability on demand, as configured.
#[derive(Debug, Clone, Copy)]
pub struct OnDemandConfig {
    /// The warning window.
    pub window: Duration,
    /// Share of the window kept free (0.2: plan for 80 % of it).
    pub margin: f64,
    /// The cost model admission plans with.
    pub cost: SaveCost,
}

/// What admission allows under an [`OnDemandConfig`].
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct OnDemandPlan {
    /// Threads that may run redo transactions without flushing (each may be caught with one
    /// log of `redo_bytes`).
    pub threads: usize,
    /// Lines commits may leave dirty before one of them writes them back.
    pub dirty_budget_lines: u64,
    /// The save's estimate with every admitted thread caught and the dirty set full.
    pub estimated_save_ns: f64,
    /// The window planned for (after the margin).
    pub planned_window_ns: f64,
}

/// What one save did.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SaveReport {
    /// Lanes whose transaction was caught applying and whose log was saved.
    pub logs_saved: usize,
    /// Log bytes written into redo areas.
    pub log_bytes: u64,
    /// Lines written back.
    pub lines_written_back: u64,
    /// Lanes marked (saved or empty) at the end.
    pub lanes_marked: usize,
    /// Wall-clock nanoseconds the save took.
    pub elapsed_ns: u64,
    /// Nanoseconds by the budget's model, when it has one.
    pub modeled_ns: Option<f64>,
    /// Whether the save finished inside its window and marked the lanes. When false, the
    /// heap still says `UNSAVED` and will refuse to open after a power failure.
    pub completed: bool,
}

/// Which guarantee a redo-mode commit gives on this heap now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Durability {
    /// Every commit is durable when it returns (redo: log, fence, apply, fence).
    FlushAtCommit,
    /// Commits are durable if a save runs inside the warning window before power is lost.
    OnDemand,
}

static NEXT_UID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// Admission of this thread, per heap: (heap uid, admitted).
    static REGISTERED: RefCell<Vec<(u64, bool)>> = const { RefCell::new(Vec::new()) };
}

/// The volatile state of durability on demand.
#[derive(Debug)]
pub(super) struct OnDemand {
    uid: u64,
    enabled: AtomicBool,
    /// Set by a save: no commit starts applying until it is lifted.
    gate: AtomicBool,
    gate_mx: Mutex<()>,
    gate_cv: Condvar,
    /// Per lane: the encoded log of the lane's last on-demand commit. A save reads it (under
    /// the lock) only while `applying` says that commit is still applying.
    slots: Vec<Mutex<Vec<u8>>>,
    /// Per lane: set under the slot's lock when a commit publishes its log and finds the gate
    /// open; cleared when its apply is done.
    applying: Vec<AtomicBool>,
    /// Per lane: its redo header says `UNSAVED` (or `SAVED`) on the medium.
    marked: Vec<AtomicBool>,
    /// One bit per line of the region written by on-demand commits and not written back.
    dirty: Vec<AtomicU64>,
    dirty_lines: AtomicU64,
    budget_lines: AtomicU64,
    admit: AtomicUsize,
    registered: AtomicUsize,
    refused: AtomicU64,
    saves: AtomicU64,
    config: Mutex<Option<(OnDemandConfig, OnDemandPlan)>>,
    /// Serialises saves, resumes and write-backs of the whole dirty set.
    save_mx: Mutex<()>,
}

impl OnDemand {
    pub(super) fn new(lanes: usize, region_len: u64) -> Self {
        let lines = region_len.div_ceil(64);
        OnDemand {
            uid: NEXT_UID.fetch_add(1, Ordering::Relaxed),
            enabled: AtomicBool::new(false),
            gate: AtomicBool::new(false),
            gate_mx: Mutex::new(()),
            gate_cv: Condvar::new(),
            slots: (0..lanes).map(|_| Mutex::new(Vec::new())).collect(),
            applying: (0..lanes).map(|_| AtomicBool::new(false)).collect(),
            marked: (0..lanes).map(|_| AtomicBool::new(false)).collect(),
            dirty: (0..lines.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            dirty_lines: AtomicU64::new(0),
            budget_lines: AtomicU64::new(0),
            admit: AtomicUsize::new(0),
            registered: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            saves: AtomicU64::new(0),
            config: Mutex::new(None),
            save_mx: Mutex::new(()),
        }
    }
}

/// Counters of durability on demand.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct OnDemandStats {
    /// Threads admitted so far.
    pub threads_admitted: usize,
    /// Transactions that asked for redo mode and ran in undo mode because their thread was
    /// refused.
    pub refused_transactions: u64,
    /// Lines dirty now (written by on-demand commits, not yet written back).
    pub dirty_lines: u64,
    /// Saves run.
    pub saves: u64,
}

impl RawHeap {
    /// The guarantee redo-mode commits give now.
    pub fn durability(&self) -> Durability {
        if self.od.enabled.load(Ordering::Acquire) {
            Durability::OnDemand
        } else {
            Durability::FlushAtCommit
        }
    }

    /// The admission plan in force, if durability on demand is on.
    pub fn on_demand_plan(&self) -> Option<(OnDemandConfig, OnDemandPlan)> {
        *self.od.config.lock()
    }

    /// Counters of durability on demand.
    pub fn on_demand_stats(&self) -> OnDemandStats {
        OnDemandStats {
            threads_admitted: self.od.registered.load(Ordering::Relaxed),
            refused_transactions: self.od.refused.load(Ordering::Relaxed),
            dirty_lines: self.od.dirty_lines.load(Ordering::Relaxed),
            saves: self.od.saves.load(Ordering::Relaxed),
        }
    }

    /// Measure this medium's save costs, `rounds` times, keeping the slowest: write-back of
    /// lines dirtied at scattered places of the data zone (each line's first word is stored
    /// back unchanged; every lane is held meanwhile, so no transaction runs: call it with no
    /// lane held), a fence, and copying log bytes.
    pub fn calibrate_save(&self, rounds: u32) -> Result<SaveCost> {
        let _held: Vec<_> = self.lanes.iter().map(|l| l.lock()).collect();
        let zone_lines = (self.geo.zone_end() - self.geo.zone_off) / 64;
        let lines = 4096u64.min(zone_lines);
        let (mut line_ns, mut byte_ns, mut fixed_ns) = (0f64, 0f64, 0f64);
        let src = vec![0x5au8; 1 << 16];
        let mut dst = vec![0u8; 1 << 16];
        let at = |k: u64| self.geo.zone_off + (k.wrapping_mul(2_654_435_761) % zone_lines) * 64;
        for _ in 0..rounds.max(1) {
            for k in 0..lines {
                let off = self.m(at(k));
                let v = self.medium.load_u64(off);
                self.medium.store_u64(off, v);
            }
            let t = Instant::now();
            for k in 0..lines {
                self.medium.write_back(self.m(at(k)), 64)?;
            }
            self.medium.fence()?;
            line_ns = line_ns.max(t.elapsed().as_nanos() as f64 / lines.max(1) as f64);
            let t = Instant::now();
            self.medium.fence()?;
            fixed_ns = fixed_ns.max(t.elapsed().as_nanos() as f64);
            let t = Instant::now();
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&dst);
            byte_ns = byte_ns.max(t.elapsed().as_nanos() as f64 / src.len() as f64);
        }
        // A save also reads every word of the dirty bitmap, dirty or not.
        let t = Instant::now();
        let mut any = 0u64;
        for w in &self.od.dirty {
            any |= w.load(Ordering::Acquire);
        }
        std::hint::black_box(any);
        let scan_ns = t.elapsed().as_nanos() as f64;
        Ok(SaveCost {
            fixed_ns: fixed_ns + scan_ns + 50_000.0,
            line_ns,
            byte_ns,
        })
    }

    /// Plan what a save inside `cfg.window` can hold (without turning anything on).
    pub fn plan_on_demand(&self, cfg: &OnDemandConfig) -> OnDemandPlan {
        let window_ns = cfg.window.as_nanos() as f64;
        let usable = window_ns * (1.0 - cfg.margin.clamp(0.0, 0.95)) - cfg.cost.fixed_ns;
        let redo = u64::from(self.geo.redo_bytes);
        let per_thread = cfg.cost.estimate_ns(redo / 64, redo) - cfg.cost.fixed_ns;
        let (threads, budget) = if usable <= 0.0 || per_thread <= 0.0 {
            (0, 0)
        } else {
            let threads = ((usable / 2.0) / per_thread).floor() as usize;
            let threads = threads.min(self.lanes.len());
            let left = usable - threads as f64 * per_thread;
            let budget = if cfg.cost.line_ns > 0.0 {
                (left / cfg.cost.line_ns).floor() as u64
            } else {
                u64::MAX / 2
            };
            (threads, budget)
        };
        OnDemandPlan {
            threads,
            dirty_budget_lines: budget,
            estimated_save_ns: cfg
                .cost
                .estimate_ns(budget + threads as u64 * (redo / 64), threads as u64 * redo),
            planned_window_ns: usable.max(0.0) + cfg.cost.fixed_ns,
        }
    }

    /// Turn durability on demand on: from now on, redo commits of admitted threads neither
    /// flush nor fence, and a [`RawHeap::save`] must run on every power-failure warning.
    /// Returns the admission plan.
    pub fn enable_on_demand(&self, cfg: OnDemandConfig) -> OnDemandPlan {
        let plan = self.plan_on_demand(&cfg);
        self.od.admit.store(plan.threads, Ordering::Release);
        self.od
            .budget_lines
            .store(plan.dirty_budget_lines, Ordering::Release);
        *self.od.config.lock() = Some((cfg, plan));
        self.od.enabled.store(true, Ordering::Release);
        plan
    }

    /// Turn durability on demand off: everything it left dirty is written back, the lanes'
    /// marks are cleared, and redo commits flush again.
    pub fn disable_on_demand(&self) -> Result<()> {
        self.od.enabled.store(false, Ordering::Release);
        let _s = self.od.save_mx.lock();
        self.wait_appliers();
        self.make_durable()
    }

    /// Is this thread admitted to on-demand commits (registering it on first use)?
    fn admitted(&self) -> bool {
        let uid = self.od.uid;
        REGISTERED.with(|r| {
            let mut r = r.borrow_mut();
            if let Some(&(_, ok)) = r.iter().find(|(u, _)| *u == uid) {
                return ok;
            }
            let admit = self.od.admit.load(Ordering::Acquire);
            let ok = self
                .od
                .registered
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < admit).then_some(n + 1)
                })
                .is_ok();
            r.push((uid, ok));
            ok
        })
    }

    /// The mode a transaction asking for `mode` gets on this thread.
    pub(super) fn effective_mode(&self, mode: TxMode) -> (TxMode, bool) {
        if mode == TxMode::Undo {
            return (TxMode::Undo, false);
        }
        if !self.od.enabled.load(Ordering::Acquire) {
            return (mode, false);
        }
        match (self.admitted(), mode) {
            (true, m) => (m, true),
            // Isolation is kept: a refused isolated transaction flushes at commit instead.
            (false, TxMode::Isolated) => (TxMode::Isolated, false),
            (false, _) => {
                self.od.refused.fetch_add(1, Ordering::Relaxed);
                (TxMode::Undo, false)
            }
        }
    }

    /// A transactional store in redo mode: into a block allocated by this transaction
    /// directly (nobody else can see it before commit), anywhere else into the log.
    pub(super) fn redo_write(&self, lane: &mut Lane, off: u64, data: &[u8]) -> Result<()> {
        self.need_tx(lane)?;
        if let Err(e) = self.check_range(off, data.len() as u64) {
            return self.fail(lane, e);
        }
        if in_fresh(lane, off, data.len() as u64) {
            self.data().write(self.m(off), data);
            if lane.on_demand {
                self.mark_dirty(off, data.len() as u64);
            }
            return Ok(());
        }
        lane.redo.insert(off, data);
        Ok(())
    }

    pub(super) fn mark_dirty(&self, off: u64, len: u64) {
        if len == 0 {
            return;
        }
        let (first, last) = (off / 64, (off + len - 1) / 64);
        let mut newly = 0;
        for l in first..=last {
            let bit = 1u64 << (l % 64);
            let word = &self.od.dirty[(l / 64) as usize];
            // A line written again before a write-back is marked already: no locked RMW.
            if word.load(Ordering::Acquire) & bit != 0 {
                continue;
            }
            if word.fetch_or(bit, Ordering::AcqRel) & bit == 0 {
                newly += 1;
            }
        }
        if newly > 0 {
            self.od.dirty_lines.fetch_add(newly, Ordering::AcqRel);
        }
    }

    /// Flush every tracked dirty line (no fence); returns how many.
    ///
    /// All bitmap words are taken first and the lines written back after: a locked swap
    /// between write-backs waits for the write-backs before it, which made a sparse dirty set
    /// cost a round trip per line (134-160 ns against 10-15 ns, `docs/dnv.md`, "Save time").
    /// A line a committer marks again after its word was taken stays marked for the next
    /// write-back; what it wrote before the mark was taken is written back here.
    fn flush_dirty(&self) -> Result<u64> {
        let mut taken = Vec::new();
        for (w, word) in self.od.dirty.iter().enumerate() {
            if word.load(Ordering::Acquire) == 0 {
                continue;
            }
            let bits = word.swap(0, Ordering::AcqRel);
            if bits != 0 {
                taken.push((w as u64, bits));
            }
        }
        let mut n = 0;
        for (w, mut bits) in taken {
            while bits != 0 {
                let b = u64::from(bits.trailing_zeros());
                bits &= bits - 1;
                self.medium.write_back(self.m((w * 64 + b) * 64), 64)?;
                n += 1;
            }
        }
        self.od.dirty_lines.fetch_sub(n, Ordering::AcqRel);
        Ok(n)
    }

    /// The encoded log of the transaction on `lane` (header line first), or `None` if it
    /// would not fit the lane's redo area.
    fn encode_log(&self, lane: &mut Lane, kind: u8, seq: u64) -> Option<Vec<u8>> {
        if REDO_HEADER_BYTES + lane.redo.entry_bytes() > u64::from(self.geo.redo_bytes) {
            return None;
        }
        let mut out = std::mem::take(&mut lane.logbuf);
        out.clear();
        out.resize(REDO_HEADER_BYTES as usize, 0);
        let mut count = 0u32;
        let mut entry = |out: &mut Vec<u8>, off: u64, tag: u32, payload: &[u8]| {
            out.extend_from_slice(&off.to_le_bytes());
            out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            out.extend_from_slice(&tag.to_le_bytes());
            out.extend_from_slice(payload);
            out.resize(out.len().div_ceil(8) * 8, 0);
            count += 1;
        };
        for (off, data) in lane.redo.iter() {
            entry(&mut out, off, REDO_DATA, data);
        }
        let ops = lane
            .allocs
            .iter()
            .map(|b| (b, true))
            .chain(lane.frees.iter().map(|b| (b, false)));
        let mut tmp = Vec::new();
        // A saved log needs no FRESH entries: a save writes back every line of a fresh block
        // before it marks the lane, so the block's bytes are there whenever the log counts.
        let fresh = if kind == REDO_SAVED {
            &[][..]
        } else {
            &lane.allocs[..]
        };
        for b in fresh {
            tmp.resize(b.len() as usize, 0);
            self.medium.read(self.m(b.off()), &mut tmp);
            let mut p = [0u8; 16];
            p[..8].copy_from_slice(&b.len().to_le_bytes());
            p[8..12].copy_from_slice(&crc32c::crc32c(&tmp).to_le_bytes());
            entry(&mut out, b.off(), REDO_FRESH, &p);
        }
        for (b, alloc) in ops {
            match *b {
                Block::Small { chunk, bit, .. } => {
                    let word = self.geo.chunk(u64::from(chunk)) + u64::from(bit / 64) * 8;
                    let mask = 1u64 << (bit % 64);
                    let tag = if alloc { REDO_BIT_OR } else { REDO_BIT_ANDNOT };
                    entry(&mut out, word, tag, &mask.to_le_bytes());
                }
                Block::Large { chunk, span, .. } => {
                    let head = self.geo.chunk_word(u64::from(chunk));
                    let v = if alloc {
                        ChunkWord::Large(span).encode(u64::from(chunk))
                    } else {
                        0
                    };
                    entry(&mut out, head, REDO_WORD, &v.to_le_bytes());
                    if alloc {
                        for c in chunk + 1..chunk + span {
                            let at = self.geo.chunk_word(u64::from(c));
                            if self.medium.load_u64(self.m(at)) != 0 {
                                entry(&mut out, at, REDO_WORD, &0u64.to_le_bytes());
                            }
                        }
                    }
                }
            }
        }
        if out.len() as u64 > u64::from(self.geo.redo_bytes) {
            lane.logbuf = out;
            return None;
        }
        let len = out.len() as u64 - REDO_HEADER_BYTES;
        let state = (u64::from(kind) << 56) | (seq & REDO_SEQ_MASK);
        out[0..8].copy_from_slice(&state.to_le_bytes());
        out[8..12].copy_from_slice(&(len as u32).to_le_bytes());
        out[12..16].copy_from_slice(&count.to_le_bytes());
        if kind != REDO_SAVED {
            // A log for a save gets its CRC when a save copies it, which is rare.
            let crc = redo_crc(&out[..16], &out[REDO_HEADER_BYTES as usize..]);
            out[16..20].copy_from_slice(&crc.to_le_bytes());
        }
        Some(out)
    }

    /// Commit a redo transaction (outermost level, not aborted, something to do).
    pub(super) fn commit_redo(&self, lane: &mut Lane) -> Result<()> {
        // (An isolated transaction gets here inside the STM's commit, its stripes held.)
        if lane.redo.is_empty() && lane.allocs.is_empty() && lane.frees.is_empty() {
            self.finish(lane);
            return Ok(());
        }
        if lane.on_demand && self.od.enabled.load(Ordering::Acquire) {
            if let Some(log) = self.encode_log(lane, REDO_SAVED, 0) {
                return self.commit_on_demand(lane, log);
            }
        }
        let seq = lane.seq + 1;
        let Some(log) = self.encode_log(lane, REDO_COMMITTED, seq) else {
            return self.commit_redo_as_undo(lane);
        };
        if self.od.marked[lane.idx].load(Ordering::Acquire) {
            // This lane's redo area says UNSAVED for on-demand commits made on it before; the
            // log below replaces that mark, so what those commits left dirty goes first (under
            // the save lock: a save must not mark this lane EMPTY over the log).
            let _s = self.od.save_mx.lock();
            self.flush_dirty()?;
            self.fence()?;
            self.od.marked[lane.idx].store(false, Ordering::Release);
        }
        // F1: the log (with its state word, under the CRC) and the blocks written directly.
        let at = self.m(self.geo.redo(lane.idx));
        // Cached stores and a write-back: non-temporal stores were measured slower here for a
        // log of a few lines (985 against 663 ns per 64 B overwrite, Intel Xeon VM).
        self.medium.write(at, &log);
        self.pflush(at, log.len())?;
        for b in &lane.allocs {
            self.pflush(self.m(b.off()), b.len() as usize)?;
        }
        lane.logbuf = log;
        self.flush_pending_retires()?;
        self.fence()?;
        // From here the transaction is committed: recovery redoes the log.
        let olds = self.olds_for_observer(lane);
        for (off, data) in lane.redo.iter() {
            self.data().write(self.m(off), data);
            self.pflush(self.m(off), data.len())?;
        }
        self.apply_blocks(lane, true)?;
        self.fence()?; // F2: in place.
        // Retire the log. Not fenced here: the next commit point of any lane (or close)
        // makes it durable first, so no later transaction can become durable while a crash
        // could still replay this log over it; until then recovery redoes it, which is
        // harmless (its bytes are in place).
        let state = self.m(self.geo.lane(lane.idx));
        self.medium.store_u64(state, seq << 1);
        self.pending_retire.lock().push(lane.idx);
        self.retire_pending.store(true, Ordering::Release);
        lane.seq = seq;
        self.after_commit(lane, olds)
    }

    /// A log too large for the redo area: snapshot the current bytes of every segment into
    /// the undo log (the bytes in place are still the old ones) and commit as undo.
    fn commit_redo_as_undo(&self, lane: &mut Lane) -> Result<()> {
        let segs: Vec<(u64, Vec<u8>)> = lane.redo.iter().map(|(o, d)| (o, d.to_vec())).collect();
        for b in lane.allocs.clone() {
            self.log_block(lane, &b, true)?;
        }
        for b in lane.frees.clone() {
            self.log_block(lane, &b, false)?;
        }
        for (off, data) in &segs {
            let len = data.len() as u64;
            let medium = &self.medium;
            let base = self.base;
            let pos = self.log_entry(lane, *off, len as u32, len, |buf| {
                medium.read((base + off) as usize, buf)
            })?;
            lane.snapshots.push((*off, len, pos));
            lane.ranges.insert(*off, off + len);
        }
        self.fence()?;
        lane.unfenced = false;
        for (off, data) in &segs {
            self.data().write(self.m(*off), data);
        }
        lane.redo.clear();
        self.commit_outer(lane)
    }

    fn olds_for_observer(&self, lane: &Lane) -> Option<Vec<(u64, Vec<u8>)>> {
        if !self.has_observer.load(Ordering::Acquire) {
            return None;
        }
        self.observer.read().as_ref()?;
        Some(
            lane.redo
                .iter()
                .map(|(off, d)| {
                    let mut buf = vec![0u8; d.len()];
                    self.medium.read(self.m(off), &mut buf);
                    (off, buf)
                })
                .collect(),
        )
    }

    fn after_commit(&self, lane: &mut Lane, olds: Option<Vec<(u64, Vec<u8>)>>) -> Result<()> {
        let mut told = Ok(());
        if let Some(olds) = olds
            && let Some(obs) = self.observer.read().clone()
        {
            told = self.tell(&*obs, &olds, lane);
        }
        self.publish(lane);
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        self.finish(lane);
        told
    }

    /// Wait while a save holds the gate.
    fn wait_gate(&self) {
        let mut g = self.od.gate_mx.lock();
        while self.od.gate.load(Ordering::SeqCst) {
            self.od.gate_cv.wait(&mut g);
        }
    }

    fn commit_on_demand(&self, lane: &mut Lane, log: Vec<u8>) -> Result<()> {
        let i = lane.idx;
        if !self.od.marked[i].load(Ordering::Acquire) {
            self.wait_gate();
            let at = self.m(self.geo.redo(i));
            self.medium.store_u64(
                at,
                u64::from(REDO_UNSAVED) << 56 | (lane.seq & REDO_SEQ_MASK),
            );
            self.medium.write_back(at, 8)?;
            self.fence()?;
            self.od.marked[i].store(true, Ordering::Release);
        }
        // Publish the log and look at the gate under the slot's lock. A save closes the gate
        // before it takes any slot's lock: if it took ours first, we see the gate closed and
        // wait; if we took it first, the save finds `applying` set and copies our log.
        let mut log = log;
        loop {
            let open = {
                let mut slot = self.od.slots[i].lock();
                std::mem::swap(&mut *slot, &mut log);
                if self.od.gate.load(Ordering::SeqCst) {
                    std::mem::swap(&mut *slot, &mut log);
                    false
                } else {
                    self.od.applying[i].store(true, Ordering::Relaxed);
                    true
                }
            };
            if open {
                break;
            }
            self.wait_gate();
        }
        lane.logbuf = log;
        let olds = self.olds_for_observer(lane);
        for (off, data) in lane.redo.iter() {
            self.data().write(self.m(off), data);
            self.mark_dirty(off, data.len() as u64);
        }
        let applied = self.apply_blocks(lane, false);
        for b in &lane.allocs {
            self.mark_block_words_dirty(b);
            // A fresh block may have been written directly (through a translated pointer).
            self.mark_dirty(b.off(), b.len());
        }
        for b in &lane.frees {
            self.mark_block_words_dirty(b);
        }
        // Done applying, whatever happened: a save or a close waits for this.
        self.od.applying[i].store(false, Ordering::Release);
        applied?;
        if self.od.dirty_lines.load(Ordering::Acquire)
            > self.od.budget_lines.load(Ordering::Acquire)
        {
            // The dirty set would make the save overrun its window: write it back now.
            if let Some(_s) = self.od.save_mx.try_lock() {
                self.flush_dirty()?;
                self.fence()?;
            }
        }
        self.after_commit(lane, olds)
    }

    /// The write-back of a commit that does not go through durability on demand (undo, and redo
    /// flushed at commit). While on-demand mode is on, a save path is registered and the pool
    /// may be running flush on fail (domain `eadr` with that save path): then a refused
    /// thread's commit must not rely on the save, which writes back only the lines on-demand
    /// commits marked, so it uses the write-back no domain skips. Otherwise the domain's
    /// `flush` (skipped in `eadr`, where the caches are persistent).
    pub(super) fn pflush(&self, off: usize, len: usize) -> Result<()> {
        if self.od.enabled.load(Ordering::Acquire) {
            self.medium.write_back(off, len)?;
        } else {
            self.medium.flush(off, len)?;
        }
        Ok(())
    }

    /// Flush the state words of logs retired since the last commit point (no fence: the
    /// caller's fence follows).
    pub(super) fn flush_pending_retires(&self) -> Result<()> {
        self.retire_words(false)
    }

    /// [`Self::flush_pending_retires`] with a write-back no domain skips: the save and the
    /// close of on-demand mode, which a flush-on-fail pool relies on.
    fn write_back_pending_retires(&self) -> Result<()> {
        self.retire_words(true)
    }

    fn retire_words(&self, always: bool) -> Result<()> {
        if !self.retire_pending.load(Ordering::Acquire) {
            return Ok(());
        }
        let lanes = {
            let mut p = self.pending_retire.lock();
            self.retire_pending.store(false, Ordering::Release);
            std::mem::take(&mut *p)
        };
        for i in lanes {
            let at = self.m(self.geo.lane(i));
            if always {
                self.medium.write_back(at, 8)?;
            } else {
                self.pflush(at, 8)?;
            }
        }
        Ok(())
    }

    fn mark_block_words_dirty(&self, b: &Block) {
        match *b {
            Block::Small { chunk, bit, .. } => {
                let word = self.geo.chunk(u64::from(chunk)) + u64::from(bit / 64) * 8;
                self.mark_dirty(word, 8);
            }
            Block::Large { chunk, span, .. } => {
                let first = self.geo.chunk_word(u64::from(chunk));
                self.mark_dirty(first, u64::from(span) * 8);
            }
        }
    }

    fn wait_appliers(&self) {
        for a in &self.od.applying {
            while a.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
        }
    }

    /// Everything on-demand commits left dirty is written back and every lane mark cleared
    /// (close, or turning on-demand off). Call with `save_mx` held and no applier running.
    pub(super) fn make_durable(&self) -> Result<()> {
        self.write_back_pending_retires()?;
        self.flush_dirty()?;
        self.medium.fence()?;
        let mut any = false;
        for (i, m) in self.od.marked.iter().enumerate() {
            if m.load(Ordering::Acquire) {
                let at = self.m(self.geo.redo(i));
                self.medium.store_u64(at, 0);
                self.medium.write_back(at, 8)?;
                any = true;
            }
        }
        if any {
            self.medium.fence()?;
            for m in &self.od.marked {
                m.store(false, Ordering::Release);
            }
        }
        Ok(())
    }

    /// The bounded save on a power-failure warning: stop commits from starting to apply, copy
    /// the logs of those caught applying into their lanes' redo areas, write back every dirty
    /// line, fence, and then mark the lanes (`SAVED` with a log, `EMPTY` without). Writers
    /// stay stopped until [`RawHeap::resume_writers`]. A save that finds its window exceeded
    /// before the marks leaves the lanes `UNSAVED` and says so in its report.
    pub fn save(&self, budget: SaveBudget) -> Result<SaveReport> {
        let t0 = Instant::now();
        let _s = self.od.save_mx.lock();
        self.od.gate.store(true, Ordering::SeqCst);
        let mut rep = SaveReport::default();
        let mut saved = Vec::new();
        for (i, slot) in self.od.slots.iter().enumerate() {
            let s = slot.lock();
            if self.od.applying[i].load(Ordering::Acquire) {
                let log = &*s;
                // Everything but the state word now; the state word last, after the fence.
                let h = REDO_HEADER_BYTES as usize;
                let mut head = [0u8; REDO_HEADER_BYTES as usize];
                head.copy_from_slice(&log[..h]);
                let crc = redo_crc(&head[..16], &log[h..]);
                head[16..20].copy_from_slice(&crc.to_le_bytes());
                let at = self.m(self.geo.redo(i));
                self.medium.write(at + 8, &head[8..]);
                self.medium.write(at + h, &log[h..]);
                self.medium.write_back(at + 8, log.len() - 8)?;
                rep.logs_saved += 1;
                rep.log_bytes += log.len() as u64;
                saved.push(i);
            }
        }
        self.write_back_pending_retires()?;
        rep.lines_written_back = self.flush_dirty()?;
        self.medium.fence()?;
        rep.modeled_ns = budget
            .modeled
            .map(|c| c.estimate_ns(rep.lines_written_back, rep.log_bytes));
        let used = rep
            .modeled_ns
            .unwrap_or_else(|| t0.elapsed().as_nanos() as f64);
        if used > budget.window.as_nanos() as f64 {
            rep.elapsed_ns = t0.elapsed().as_nanos() as u64;
            self.od.saves.fetch_add(1, Ordering::Relaxed);
            return Ok(rep);
        }
        for (i, m) in self.od.marked.iter().enumerate() {
            let at = self.m(self.geo.redo(i));
            if saved.contains(&i) {
                self.medium.store_u64(at, u64::from(REDO_SAVED) << 56);
            } else if m.load(Ordering::Acquire) {
                self.medium.store_u64(at, 0);
            } else {
                continue;
            }
            self.medium.write_back(at, 8)?;
            rep.lanes_marked += 1;
        }
        self.medium.fence()?;
        for (i, m) in self.od.marked.iter().enumerate() {
            m.store(saved.contains(&i), Ordering::Release);
        }
        rep.completed = true;
        rep.elapsed_ns = t0.elapsed().as_nanos() as u64;
        self.od.saves.fetch_add(1, Ordering::Relaxed);
        Ok(rep)
    }

    /// Stop commits from starting to apply (the first step of a save; [`RawHeap::save`]
    /// does it too). Commits caught applying finish.
    pub fn stop_writers(&self) {
        self.od.gate.store(true, Ordering::SeqCst);
    }

    /// Let writers go on after a save (a warning that was called off): commits caught
    /// applying finish, what they wrote is written back, the lanes' marks are cleared, and
    /// the gate opens.
    pub fn resume_writers(&self) -> Result<()> {
        {
            let _s = self.od.save_mx.lock();
            self.wait_appliers();
            self.make_durable()?;
        }
        let _g = self.od.gate_mx.lock();
        self.od.gate.store(false, Ordering::SeqCst);
        self.od.gate_cv.notify_all();
        Ok(())
    }

    /// Recovery of lane `i`'s redo area at open: redo a saved log, or a committed log of the
    /// lane's next transaction; refuse a lane whose on-demand commits were never saved.
    /// Returns the lane's sequence number afterwards.
    pub(super) fn recover_redo(&mut self, i: usize, seq: u64) -> Result<u64> {
        let at = self.geo.redo(i);
        let (kind, lseq) = redo_state(&*self.medium, self.base, &self.geo, i)?;
        match kind {
            // (`redo_state` returns kinds 0 to 3 only.)
            REDO_UNSAVED => Err(HeapError::NotSaved { lane: i }),
            REDO_SAVED | REDO_COMMITTED => {
                if kind == REDO_COMMITTED && lseq != seq + 1 {
                    return Ok(seq); // retired, or an older number: dead
                }
                let entries = match self.read_log(i) {
                    Ok(e) => e,
                    Err(_) if kind == REDO_COMMITTED => {
                        // A torn log of a commit that never reached its commit point: clear
                        // it, or the lane's next transaction (which gets the same number)
                        // could one day find it whole.
                        self.medium.store_u64(self.m(at), 0);
                        self.medium.persist(self.m(at), 8)?;
                        return Ok(seq);
                    }
                    Err(e) => return Err(e),
                };
                if let Some(bad) = entries
                    .iter()
                    .find(|e| !fresh_holds(&*self.medium, self.base, &self.geo, e))
                {
                    if kind == REDO_COMMITTED {
                        // The block's bytes did not all reach the medium before the crash,
                        // so neither did the commit point. Cleared as above.
                        self.medium.store_u64(self.m(at), 0);
                        self.medium.persist(self.m(at), 8)?;
                        return Ok(seq);
                    }
                    return Err(HeapError::corrupt(
                        format!("lane {i} saved redo log"),
                        self.base + bad.offset,
                        "fresh block",
                        "the bytes whose CRC the log holds",
                        "other bytes",
                    ));
                }
                for e in &entries {
                    self.redo_one(i, e)?;
                }
                self.medium.fence()?;
                self.recovery.redone += 1;
                self.recovery.redo_entries += entries.len();
                if kind == REDO_SAVED {
                    self.medium.store_u64(self.m(at), 0);
                    self.medium.persist(self.m(at), 8)?;
                    Ok(seq)
                } else {
                    let st = self.m(self.geo.lane(i));
                    self.medium.store_u64(st, lseq << 1);
                    self.medium.persist(st, 8)?;
                    Ok(lseq)
                }
            }
            _ => Ok(seq), // empty
        }
    }

    /// Lane `i`'s redo area as open finds it, checked without changing anything.
    pub(super) fn precheck_redo(&self, i: usize) -> Result<()> {
        match redo_state(&*self.medium, self.base, &self.geo, i)?.0 {
            REDO_UNSAVED => Err(HeapError::NotSaved { lane: i }),
            REDO_SAVED => self.read_log(i).map(|_| ()),
            _ => Ok(()), // empty or committed
        }
    }

    fn read_log(&self, i: usize) -> Result<Vec<RedoEntry>> {
        read_redo_log(&*self.medium, self.base, &self.geo, i)
    }

    fn redo_one(&self, lane: usize, e: &RedoEntry) -> Result<()> {
        if e.tag == REDO_FRESH {
            return Ok(());
        }
        let g = self.geo;
        let ok = match e.tag {
            REDO_DATA => self.check_range(e.offset, e.data.len() as u64).is_ok(),
            REDO_BIT_OR | REDO_BIT_ANDNOT => {
                e.data.len() == 8
                    && e.offset % 8 == 0
                    && e.offset >= g.zone_off
                    && e.offset < g.zone_end()
                    && (e.offset - g.zone_off) % CHUNK_SIZE < RUN_BITMAP_BYTES
            }
            _ => {
                e.data.len() == 8
                    && e.offset % 8 == 0
                    && e.offset >= g.chunk_table_off
                    && e.offset < g.chunk_table_off + g.chunk_count * 8
            }
        };
        if !ok {
            return Err(HeapError::corrupt(
                format!("lane {lane} redo entry"),
                self.base + e.at,
                "offset",
                "data in the zone, a run bitmap word or a chunk-table word",
                format!("tag {} at {:#x} + {}", e.tag, e.offset, e.data.len()),
            ));
        }
        let at = self.m(e.offset);
        match e.tag {
            REDO_DATA => self.medium.write(at, &e.data),
            _ => {
                let v = u64::from_le_bytes(e.data[..8].try_into().expect("8"));
                let old = self.medium.load_u64(at);
                let new = match e.tag {
                    REDO_BIT_OR => old | v,
                    REDO_BIT_ANDNOT => old & !v,
                    _ => v,
                };
                self.medium.store_u64(at, new);
            }
        }
        self.pflush(at, e.data.len())?;
        Ok(())
    }
}

/// Low 56 bits of a redo header's state word: the transaction number.
pub const REDO_SEQ_MASK: u64 = (1 << 56) - 1;

/// CRC-32C over a redo header's first 16 bytes ‖ its entries.
pub fn redo_crc(head: &[u8], entries: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(head), entries)
}

/// Lane `i`'s redo header state word as (kind, transaction number); an unknown kind is damage
/// naming the word.
pub fn redo_state(medium: &dyn Medium, base: u64, geo: &Geometry, i: usize) -> Result<(u8, u64)> {
    let at = geo.redo(i);
    let state = medium.load_u64((base + at) as usize);
    let kind = (state >> 56) as u8;
    if kind > REDO_COMMITTED {
        return Err(HeapError::corrupt(
            format!("lane {i} redo header"),
            base + at,
            "state",
            "kind 0 (empty), 1 (unsaved), 2 (saved) or 3 (committed)",
            kind,
        ));
    }
    Ok((kind, state & REDO_SEQ_MASK))
}

/// Does a `FRESH` entry's block hold the bytes whose CRC it names (any other entry: true)?
/// A committed log counts only if every one does.
pub fn fresh_holds(medium: &dyn Medium, base: u64, geo: &Geometry, e: &RedoEntry) -> bool {
    if e.tag != REDO_FRESH {
        return true;
    }
    let len = u64::from_le_bytes(e.data[..8].try_into().expect("16-byte payload"));
    let crc = u32::from_le_bytes(e.data[8..12].try_into().expect("16-byte payload"));
    if e.offset < geo.zone_off
        || e.offset
            .checked_add(len)
            .is_none_or(|end| end > geo.zone_end())
    {
        return false;
    }
    let mut buf = vec![0u8; len as usize];
    medium.read((base + e.offset) as usize, &mut buf);
    crc32c::crc32c(&buf) == crc
}

/// One entry of a redo log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedoEntry {
    /// Region offset of the entry's header.
    pub at: u64,
    /// Region offset the entry changes.
    pub offset: u64,
    /// `REDO_DATA`, `REDO_BIT_OR`, `REDO_BIT_ANDNOT` or `REDO_WORD`.
    pub tag: u32,
    /// The payload.
    pub data: Vec<u8>,
}

/// Read and check lane `i`'s redo log: header fields in range, CRC over the header's first 16
/// bytes and the entries, every entry inside the log. A typed error names what failed.
pub fn read_redo_log(
    medium: &dyn Medium,
    base: u64,
    geo: &Geometry,
    i: usize,
) -> Result<Vec<RedoEntry>> {
    let at = geo.redo(i);
    let mut head = [0u8; REDO_HEADER_BYTES as usize];
    medium.read((base + at) as usize, &mut head);
    let len = u64::from(u32::from_le_bytes(head[8..12].try_into().expect("4")));
    let count = u32::from_le_bytes(head[12..16].try_into().expect("4"));
    let crc = u32::from_le_bytes(head[16..20].try_into().expect("4"));
    let room = u64::from(geo.redo_bytes) - REDO_HEADER_BYTES;
    if len > room || len % 8 != 0 {
        return Err(HeapError::corrupt(
            format!("lane {i} redo header"),
            base + at + 8,
            "len",
            format!("a multiple of 8 up to {room}"),
            len,
        ));
    }
    let mut body = vec![0u8; len as usize];
    medium.read((base + at + REDO_HEADER_BYTES) as usize, &mut body);
    let found = redo_crc(&head[..16], &body);
    if found != crc {
        return Err(HeapError::corrupt(
            format!("lane {i} redo log"),
            base + at + 16,
            "crc32c",
            format!("{crc:#010x}"),
            format!("{found:#010x}"),
        ));
    }
    let mut out = Vec::with_capacity(count as usize);
    let mut p = 0usize;
    for k in 0..count {
        let bad = |what: String| {
            HeapError::corrupt(
                format!("lane {i} redo entry {k}"),
                base + at + REDO_HEADER_BYTES + p as u64,
                "len",
                "an entry inside the log",
                what,
            )
        };
        if p + REDO_ENTRY_HEADER_BYTES as usize > body.len() {
            return Err(bad(format!("header at byte {p} of {}", body.len())));
        }
        let offset = u64::from_le_bytes(body[p..p + 8].try_into().expect("8"));
        let n = u32::from_le_bytes(body[p + 8..p + 12].try_into().expect("4")) as usize;
        let tag = u32::from_le_bytes(body[p + 12..p + 16].try_into().expect("4"));
        let d = p + REDO_ENTRY_HEADER_BYTES as usize;
        let size_ok = match tag {
            REDO_DATA => true,
            REDO_FRESH => n == 16,
            REDO_BIT_OR | REDO_BIT_ANDNOT | REDO_WORD => n == 8,
            _ => false,
        };
        if d + n > body.len() || !size_ok {
            return Err(bad(format!("{n} bytes, tag {tag}")));
        }
        out.push(RedoEntry {
            at: at + REDO_HEADER_BYTES + p as u64,
            offset,
            tag,
            data: body[d..d + n].to_vec(),
        });
        p = (d + n).div_ceil(8) * 8;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::RedoSet;
    use proptest::prelude::*;

    proptest! {
        /// Any sequence of writes reads back as the same writes on a plain byte array would.
        #[test]
        fn redo_set_reads_back_like_memory(writes in proptest::collection::vec((0u64..200, 1usize..40, any::<u8>()), 1..40)) {
            let mut set = RedoSet::default();
            let mut model = [None::<u8>; 256];
            for (off, len, v) in writes {
                let data: Vec<u8> = (0..len).map(|k| v.wrapping_add(k as u8)).collect();
                set.insert(off, &data);
                for (k, b) in data.iter().enumerate() {
                    model[off as usize + k] = Some(*b);
                }
            }
            let mut buf = [0xeeu8; 256];
            set.overlay(0, &mut buf);
            for (k, m) in model.iter().enumerate() {
                prop_assert_eq!(buf[k], m.unwrap_or(0xee), "byte {}", k);
            }
            // Segments are sorted, disjoint, and hold exactly the written bytes.
            let mut last = 0;
            let mut live = 0;
            for (s, d) in set.iter() {
                prop_assert!(s >= last);
                last = s + d.len() as u64;
                live += d.len() as u64;
            }
            // Overlapping writes merge into their union, which has no hole.
            prop_assert_eq!(live, model.iter().filter(|m| m.is_some()).count() as u64);
            for start in [0u64, 17, 100] {
                let mut b = [0xeeu8; 50];
                set.overlay(start, &mut b);
                for k in 0..50 {
                    prop_assert_eq!(b[k], model[start as usize + k].unwrap_or(0xee));
                }
            }
        }
    }
}
