//! The DIPPER engine: DRAM shards, the PM operation logs, quiescent-free checkpoints and
//! recovery.
//!
//! The state is split into shards, one [`Arena`] each, behind a reader-writer lock. An operation
//! names the shards it touches; operations on different shards run in parallel, operations on
//! a common shard run in the order of their log records (the shard's lock is held from the
//! append to the end of execution). That is DIPPER's observational equivalence with "same
//! shard" as the conflict relation (section 4.2.7).
//!
//! The write path of an operation:
//! 1. lock its shards (ascending order);
//! 2. append its record to the active log and force it by the durability policy;
//! 3. apply it to the DRAM shards with the machine's code;
//! 4. unlock.
//!
//! A record reaches the log only for a validated operation and its application cannot fail,
//! so a durable record is a committed operation: the log needs no separate commit flag. A
//! reader takes the shard's read lock, so with the `Sync` policy it never sees a change that is
//! not durable.
//!
//! With [`ForcePolicy::Caller`] step 2 only appends, and the caller forces with
//! [`Dipper::sync`] before anyone hears of the operation: group commit at the caller, which
//! knows when a batch ends (`kavach serve` syncs once before a pass of its worker writes
//! replies, so the operations of every connection served in that pass share one force). Then a
//! reader can see a change that is not durable yet, and must sync before it tells anyone what
//! it read; a crash loses only operations nobody heard of, and the durable records are still a
//! prefix of the log.
//!
//! A second write path, [`Dipper::apply_then_log`], serves transactions whose changes are
//! decided while they run (a later read in the transaction must see an earlier write):
//! 1. lock its shards (ascending order) for writing;
//! 2. the caller changes the DRAM shards with the machine's own code and returns the record
//!    that redoes exactly those changes (the machine applied to the state before step 2 reaches
//!    the state after it);
//! 3. append that record to the active log and force it by the durability policy (on a full
//!    log, waiting for the background checkpoint to swap the logs for as long as it runs);
//! 4. unlock.
//!
//! Readers wait on the shard locks, so with `Sync` they still never see a change that is not
//! durable, and operations on a common shard still reach the log in the order they ran. If
//! step 3 fails, the DRAM shards hold changes no log holds: the engine latches failed and
//! refuses everything until the store is reopened (which recovers the state before step 2).
//!
//! A checkpoint (when the active log is `checkpoint_at_percent` full, or on request):
//! 1. under the gate's write lock (it waits only for appends in progress, never for a
//!    checkpoint): empty the other log, force the active one, and persist a root saying "the
//!    other log is active, a checkpoint is running"; new operations now go to the other log;
//! 2. replay the archived log's records onto the mirror (a DRAM copy of the last shadow image)
//!    with the same machine code, on `replay_threads` threads, split by shard;
//! 3. write the mirror's changed pages into the slot that does not hold the current image, and
//!    persist them (with one fence at the end). Where that slot already holds an older copy of
//!    a page, only the 64-byte lines changed since that copy are written (the mirror records
//!    its writes by line: [`Arena::take_dirty_lines`]);
//! 4. persist a root pointing at that slot, state idle: this is the atomic switch;
//! 5. empty the archived log.
//!
//! Steps 2 and 3 are *paced* ([`Pacing`]): they run at a rate planned to finish when the new
//! active log has taken a share of what it may take before the next checkpoint is due (from
//! the rate the last log filled at, corrected while the checkpoint runs), never slower than a
//! floor, and sleep between chunks of work ahead of that plan, so that on a machine with few
//! cores the threads serving clients are not starved. The planned time is split between the
//! two steps by what each cost in the last paced checkpoint (CPU time, the replay's per byte of
//! log), so that both run at about the same CPU rate, and a paced replay runs on one thread. A
//! writer that finds the log full, or a close, ends the pacing: the rest runs at full speed.
//! [`CheckpointStats`] gives each step's duration and the checkpoint's CPU time.
//!
//! Recovery reads the root, loads the image it points at, redoes an interrupted checkpoint
//! (steps 2 to 5 again, from the same inputs), copies the result for the mirror, and replays
//! the active log onto the DRAM shards. It only ever writes a new image into the slot the root
//! does not point at, so it is idempotent: a crash during recovery leaves the same inputs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::arena::{Arena, PAGE};
use crate::error::{DipperError, Result};
use crate::frames::{self, Frames, TableGeometry};
use crate::layout::*;
use crate::root::Root;
use crate::slot::SlotWrite;
use crate::slot::{self, SlotGeometry, SlotMap};
use log::{ForcePolicy, Log, LogError, LogOptions};
use pmem::{Alignment, Medium, Pool, Uuid, kinds};

#[doc(hidden)]
#[path = "ablation.rs"]
pub mod ablation;

/// A deterministic state machine over sharded arenas: DIPPER's black box.
pub trait Machine: Send + Sync + 'static {
    /// What applying an operation produces (accumulated over its shards).
    type Output: Default + Send;

    /// Prepare the empty arena of shard `shard` of a new store.
    fn init(&self, shard: usize, arena: &mut Arena) -> Result<()>;

    /// Apply the part of operation `op` that concerns `shard`. It must depend only on the
    /// arena and `op` (no clock, no randomness): recovery and checkpoints run the same code on
    /// the same inputs and must reach an equivalent state.
    fn apply(
        &self,
        shard: usize,
        arena: &mut Arena,
        op: &[u8],
        out: &mut Self::Output,
    ) -> Result<()>;
}

/// Pages a slot must hold for an image of `arenas`: every page below each arena's top, and
/// at least a [`SLOT_ARENA_RATIO_MAX`]th of the arenas' pages (the loader's bound).
fn image_pages(arenas: &[Arena]) -> u64 {
    let used: u64 = arenas.iter().map(|a| a.used_pages() as u64).sum();
    let all: u64 = arenas.iter().map(|a| a.pages() as u64).sum();
    used.max(all.div_ceil(SLOT_ARENA_RATIO_MAX))
}

/// Whether a write that may grow the DRAM state is accepted when the shards' arenas hold
/// `arena_bytes` and a shadow slot holds `slot_capacity_bytes`: the state plus a sixteenth of
/// headroom (for the growth of the write itself) must fit in the slot; past that only writes
/// that do not grow it are accepted.
pub fn admits_growth(arena_bytes: u64, slot_capacity_bytes: u64) -> bool {
    arena_bytes.saturating_add(arena_bytes / 16) <= slot_capacity_bytes
}

/// The text after `OOM ` of Redis's refusal of a write past `maxmemory` (policy `noeviction`):
/// the engine refuses growing writes with [`DipperError::OutOfSpace`] carrying it.
pub const MAXMEMORY_REFUSAL: &str = "command not allowed when used memory > 'maxmemory'.";

/// Sizes of a new store.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// Bytes of each of the two operation logs.
    pub log_bytes: u64,
    /// Bytes of each of the two shadow slots to start with (in a growable pool a slot is moved
    /// to a larger region when an image outgrows it).
    pub slot_bytes: u64,
    /// Number of shards (1..=1024).
    pub shards: usize,
    /// A word for the state machine, kept in the root from creation on (0 for a machine that
    /// needs none); read it back with [`crate::root::Root::load`] before opening.
    pub machine: u32,
}

/// How a store runs.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// When a write is durable: `Sync` forces every record before it is applied.
    pub policy: ForcePolicy,
    /// Start a checkpoint when the active log has taken this share of its ring (1..=90).
    pub checkpoint_at_percent: u8,
    /// Threads that replay the archived log during a checkpoint that is not paced (a paced
    /// one replays on one thread: see [`Pacing`]).
    pub replay_threads: usize,
    /// Run checkpoints on a background thread (off: only [`Dipper::checkpoint`] runs them).
    pub background: bool,
    /// Take a checkpoint at close if the active log holds records, so a clean restart replays
    /// nothing.
    pub checkpoint_on_close: bool,
    /// How long a write waits for a running checkpoint when the active log is full.
    pub full_wait: Duration,
    /// With `Frequency` or `Group`: force the active log this often, so an acknowledged write
    /// is durable within this time even when no later write forces it. (`Sync` forces every
    /// record; under `Caller` nothing is acknowledged before the caller's [`Dipper::sync`].)
    pub flush_every: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            policy: ForcePolicy::Sync,
            checkpoint_at_percent: 50,
            replay_threads: 2,
            background: true,
            checkpoint_on_close: true,
            full_wait: Duration::from_secs(10),
            flush_every: Duration::from_millis(10),
        }
    }
}

/// What opening a store found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The pool was closed cleanly last time.
    pub clean_shutdown: bool,
    /// Checkpoint number of the image loaded (0: none, the store started empty).
    pub checkpoint: u64,
    /// A checkpoint was interrupted and has been redone.
    pub redone_checkpoint: bool,
    /// Records of the archived log replayed to redo it.
    pub archived_records: u64,
    /// Records of the active log replayed onto the DRAM shards.
    pub active_records: u64,
    /// Time to load the shadow image.
    pub load_ms: u64,
    /// Time to redo the checkpoint and replay the active log.
    pub replay_ms: u64,
    /// Time for the whole recovery.
    pub total_ms: u64,
}

/// What one checkpoint did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckpointStats {
    /// Its number.
    pub number: u64,
    /// Records replayed from the archived log.
    pub records: u64,
    /// Pages written to the slot (whole, or their changed lines).
    pub pages: u64,
    /// Bytes of pages written to the slot (whole pages, or the changed 64-byte lines of pages
    /// the slot or a spare frame already held a copy of).
    pub bytes: u64,
    /// Time the log swap held the gate.
    pub swap_us: u64,
    /// Time from start to the root switch.
    pub total_ms: u64,
    /// Time the pacing planned for the replay and the write-out (0: not paced).
    pub planned_ms: u64,
    /// Time the replay and the write-out slept to keep to that plan, summed over the replay
    /// threads and the write-out (so it can exceed `total_ms`).
    pub paced_ms: u64,
    /// Bytes per second the plan asked of the write-out when it started (its estimate of the
    /// changed lines over the time left, at least the floor; 0: not paced).
    pub pacing_rate: u64,
    /// Pacing was ended early (a writer found the log full, or the store closed).
    pub pacing_cut: bool,
    /// Wall-clock time it started, in milliseconds since the Unix epoch (to line its phases up
    /// with a client's timeline).
    pub started_unix_ms: u64,
    /// Time the replay of the archived log took (step 2).
    pub replay_us: u64,
    /// Time the write-out took (step 3: the changed pages or lines, the page table, the slot
    /// header, and for slots that grow the frame or table regions it added).
    pub write_us: u64,
    /// Time the root switch took (step 4).
    pub root_us: u64,
    /// Time emptying the archived log took (step 5).
    pub empty_us: u64,
    /// CPU time the checkpoint used, over its own thread and (when paced) its replay threads,
    /// from the kernel's per-thread accounting (0 where that is not readable).
    pub cpu_us: u64,
    /// Of `cpu_us`: the replay threads' (counted when paced).
    pub replay_cpu_us: u64,
    /// Of `cpu_us`: the write-out's (step 3, on the checkpoint's own thread).
    pub write_cpu_us: u64,
}

/// How a checkpoint spreads its work over time (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacing {
    /// Off: checkpoints run at full speed.
    pub enabled: bool,
    /// Finish when the active log has taken this share (percent, 10..=100) of what it may
    /// take before the next checkpoint is due (`checkpoint_at_percent` of its ring).
    pub finish_at_percent: u8,
    /// Never slower than this many bytes of work per second (archived log replayed plus bytes
    /// written to the slot).
    pub floor_bytes_per_sec: u64,
    /// Never plan a checkpoint longer than this.
    pub max_duration: Duration,
    /// Work done before the first pause (a small checkpoint is not paced at all).
    pub burst_bytes: u64,
}

impl Default for Pacing {
    fn default() -> Self {
        Pacing {
            enabled: true,
            finish_at_percent: 50,
            // Both bound a checkpoint when the log fills slowly (its plan is otherwise a share
            // of the time the log takes to fill); the longer, the lower its CPU rate. With 5 s,
            // every checkpoint of a YCSB timeline (100k records, 256 MiB log) was planned at
            // the cap while the log was far from full.
            floor_bytes_per_sec: 4 << 20,
            max_duration: Duration::from_secs(10),
            burst_bytes: 1 << 20,
        }
    }
}

impl Pacing {
    /// A checkpoint at full speed.
    pub fn off() -> Pacing {
        Pacing {
            enabled: false,
            ..Pacing::default()
        }
    }

    fn check(&self) -> Result<()> {
        let bad = |reason: String| {
            Err(DipperError::Invalid {
                what: "checkpoint pacing",
                reason,
            })
        };
        if !(10..=100).contains(&self.finish_at_percent) {
            return bad(format!(
                "finish_at_percent {} (allowed: 10..=100)",
                self.finish_at_percent
            ));
        }
        if self.floor_bytes_per_sec < 1 << 20 {
            return bad(format!(
                "floor_bytes_per_sec {} (at least 1 MiB/s)",
                self.floor_bytes_per_sec
            ));
        }
        if self.max_duration > Duration::from_secs(600) {
            return bad(format!(
                "max_duration {:?} (at most 600 s)",
                self.max_duration
            ));
        }
        Ok(())
    }
}

/// Share of a paced checkpoint's planned time given to the replay (the rest: the write-out)
/// when no earlier paced checkpoint says what each phase costs.
const REPLAY_SHARE_PERCENT: u32 = 40;
/// The replay's share never goes below this (percent of the planned time)...
const REPLAY_SHARE_MIN_PERCENT: u32 = 20;
/// ...nor above this.
const REPLAY_SHARE_MAX_PERCENT: u32 = 90;

/// What the phases of the last paced checkpoint cost, for the next one's plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PhaseCost {
    /// CPU nanoseconds of the replay, and the archived log bytes it replayed.
    replay_cpu_ns: u64,
    archived_bytes: u64,
    /// CPU nanoseconds of the write-out.
    write_cpu_ns: u64,
}

/// Share (0..1) of a paced checkpoint's planned time to give the replay of `archived_bytes`
/// of log, so that both phases run at about the same CPU rate: the replay's CPU time is
/// estimated from the last paced checkpoint's cost per archived byte, the write-out's as that
/// checkpoint's. Within [`REPLAY_SHARE_MIN_PERCENT`]..=[`REPLAY_SHARE_MAX_PERCENT`]; without a
/// usable last cost, [`REPLAY_SHARE_PERCENT`].
///
/// A fixed share starved or flooded a phase: on a store whose updates rewrite a few lines of
/// many pages, the replay of the archived log took about 85% of a checkpoint's CPU time, so at
/// a 40% share it ran at twice the checkpoint's average CPU rate, and the seconds it covered
/// were the slow ones of a timeline.
fn replay_share(last: Option<PhaseCost>, archived_bytes: u64) -> f64 {
    let fixed = REPLAY_SHARE_PERCENT as f64 / 100.0;
    let Some(c) = last else { return fixed };
    if c.archived_bytes == 0 || c.replay_cpu_ns == 0 {
        return fixed;
    }
    let replay = c.replay_cpu_ns as f64 * archived_bytes as f64 / c.archived_bytes as f64;
    let total = replay + c.write_cpu_ns as f64;
    if total <= 0.0 {
        return fixed;
    }
    (replay / total).clamp(
        REPLAY_SHARE_MIN_PERCENT as f64 / 100.0,
        REPLAY_SHARE_MAX_PERCENT as f64 / 100.0,
    )
}
/// A paced phase looks at its schedule after each this much work.
const PACE_CHUNK: u64 = 256 << 10;
/// The longest single pause (the phase then looks again at its schedule and urgency).
const PACE_SLEEP_MAX: Duration = Duration::from_millis(20);

/// The schedule of one phase (replay or write-out) of a paced checkpoint.
struct Pacer<'a> {
    signal: &'a Mutex<Signal>,
    start: Instant,
    /// Finish the phase by then, unless `end_by` says earlier.
    deadline: Instant,
    /// A later estimate of when the checkpoint must end (the log filling faster than planned).
    end_by: &'a (dyn Fn() -> Option<Instant> + Sync),
    /// Units of work in the phase (bytes).
    total: u64,
    floor: u64,
    burst: u64,
    /// Microseconds slept, over the phase's threads.
    slept_us: &'a AtomicU64,
    /// Pacing was ended (urgency).
    cut: &'a AtomicBool,
    /// CPU nanoseconds the phase's threads used (added as their ticks end).
    cpu_ns: &'a AtomicU64,
}

impl Pacer<'_> {
    fn tick(&self) -> Tick<'_> {
        Tick {
            pacer: self,
            done: 0,
            next: self.burst,
            cpu_at_start: thread_cpu_ns(),
        }
    }

    /// Work `done` so far: sleep until the schedule reaches it.
    fn wait(&self, done: u64) {
        loop {
            if self.cut.load(Ordering::Relaxed) {
                return;
            }
            let urgent = self
                .signal
                .lock()
                .map(|s| s.urgent || s.stop || s.failed)
                .unwrap_or(true);
            if urgent {
                self.cut.store(true, Ordering::Relaxed);
                return;
            }
            let deadline = match (self.end_by)() {
                Some(t) if t < self.deadline => t,
                _ => self.deadline,
            };
            let paced = done.saturating_sub(self.burst);
            let span = deadline.saturating_duration_since(self.start);
            let total = self.total.saturating_sub(self.burst).max(1);
            let by_plan = span.mul_f64((paced as f64 / total as f64).min(1.0));
            let by_floor = Duration::from_secs_f64(paced as f64 / self.floor as f64);
            let due = self.start + by_plan.min(by_floor);
            let now = Instant::now();
            if due <= now {
                return;
            }
            let nap = (due - now).min(PACE_SLEEP_MAX);
            std::thread::sleep(nap);
            self.slept_us
                .fetch_add(nap.as_micros() as u64, Ordering::Relaxed);
        }
    }
}

/// One thread's progress through a paced phase.
struct Tick<'a> {
    pacer: &'a Pacer<'a>,
    done: u64,
    next: u64,
    /// The thread's CPU time when it started the phase (added to the pacer's `cpu_ns` when
    /// the tick is dropped).
    cpu_at_start: u64,
}

impl Drop for Tick<'_> {
    fn drop(&mut self) {
        let used = thread_cpu_ns().saturating_sub(self.cpu_at_start);
        self.pacer.cpu_ns.fetch_add(used, Ordering::Relaxed);
    }
}

/// CPU time of the calling thread in nanoseconds, from the first field of
/// `/proc/thread-self/schedstat` (time on a CPU); 0 where that file cannot be read.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

impl Tick<'_> {
    fn add(&mut self, n: u64) {
        self.done += n;
        if self.done >= self.next {
            self.next = self.done + PACE_CHUNK;
            self.pacer.wait(self.done);
        }
    }
}

/// Counters for INFO.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Shards.
    pub shards: usize,
    /// Checkpoints completed since open.
    pub checkpoints: u64,
    /// A checkpoint is running now.
    pub checkpoint_running: bool,
    /// Log swaps (checkpoints started) since open.
    pub log_swaps: u64,
    /// The last checkpoint.
    pub last_checkpoint: CheckpointStats,
    /// How checkpoints are paced.
    pub pacing: Pacing,
    /// Number of the image the root points at.
    pub image: u64,
    /// Operations logged since open.
    pub operations: u64,
    /// Active log: ring bytes and bytes in use.
    pub log_ring_bytes: u64,
    /// Active log bytes in use.
    pub log_used_bytes: u64,
    /// Every record up to this LSN of the active log is durable.
    pub log_durable_lsn: u64,
    /// Next LSN of the active log.
    pub log_next_lsn: u64,
    /// Sum of the shards' arena lengths.
    pub arena_bytes: u64,
    /// Bytes in allocated arena blocks.
    pub live_bytes: u64,
    /// Bytes the smaller shadow slot can hold now.
    pub slot_capacity_bytes: u64,
    /// The slots grow with the state (the pool is growable).
    pub slots_grow: bool,
    /// Bytes in allocated blocks that writes may not grow past (0: no limit).
    pub memory_max_bytes: u64,
    /// Appends that found the active log full and waited for a checkpoint to swap the logs.
    pub log_full_waits: u64,
    /// Microseconds those appends waited, summed.
    pub log_full_wait_us: u64,
    /// Why the store refuses writes, if it does.
    pub failed: Option<String>,
}

#[derive(Debug)]
struct Checkpointer {
    root: Root,
    geo: [SlotGeometry; 2],
    /// Equal to the image the root points at.
    mirror: Vec<Arena>,
    /// Page maps of the slots; `None` when unknown (the next write of that slot is whole).
    maps: [Option<SlotMap>; 2],
    /// Per slot, per shard, per page: the 64-byte lines changed since that slot was last
    /// written (one mask per page).
    dirty_since: [Vec<Vec<u64>>; 2],
    /// When the logs were last swapped (the pacing's estimate of the log's fill rate).
    last_swap: Option<Instant>,
    /// What the phases of the last paced checkpoint cost (the next plan's split).
    last_cost: Option<PhaseCost>,
    /// Format 2 (slots that grow): the tables of the two slots.
    tables: [TableGeometry; 2],
    /// Format 2: the frames, and which the image in force names.
    frames: Frames,
}

#[derive(Debug, Default)]
struct Signal {
    requested: bool,
    stop: bool,
    completed: u64,
    running: bool,
    urgent: bool,
    swaps: u64,
    failed: bool,
    last: CheckpointStats,
}

struct Inner<M: Medium, S: Machine> {
    machine: S,
    medium: M,
    uuid: Uuid,
    root_base: usize,
    shards: Vec<RwLock<Arena>>,
    logs: [Log<M>; 2],
    /// Index of the active log. Appends hold it for reading, the swap for writing.
    gate: RwLock<usize>,
    appended: AtomicU64,
    threshold: u64,
    /// Appends that found the active log full and waited for a checkpoint's swap, and the
    /// microseconds they waited (INFO: why a write's latency can reach milliseconds).
    full_waits: AtomicU64,
    full_wait_us: AtomicU64,
    arena_bytes: AtomicU64,
    /// Bytes in allocated arena blocks, over all shards (what `memory_max` limits).
    live_bytes: AtomicU64,
    /// Limit on `live_bytes` for writes that grow the state (0: none).
    memory_max: AtomicU64,
    operations: AtomicU64,
    /// Pages of the smaller slot, in bytes.
    slot_capacity: AtomicU64,
    /// Slots are replaced by larger ones when an image outgrows them (growable pool, opened
    /// for writing).
    slots_grow: bool,
    ckpt: Mutex<Checkpointer>,
    signal: Mutex<Signal>,
    cond: Condvar,
    failed: Mutex<Option<String>>,
    /// Set with `failed` (read without a lock): readers refuse a failed store, whose DRAM state
    /// may be ahead of its logs.
    failed_flag: AtomicBool,
    closed: AtomicBool,
    pool: Mutex<Option<Pool<M>>>,
    opts: Options,
    /// Benchmark-only checkpoint styles ([`ablation`]).
    ablation: ablation::Hooks,
    pacing: Mutex<Pacing>,
}

/// A DIPPER store over a pool.
pub struct Dipper<M: Medium + Clone + Send + Sync + 'static, S: Machine> {
    inner: Arc<Inner<M, S>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl<M: Medium + Clone + Send + Sync + 'static, S: Machine> std::fmt::Debug for Dipper<M, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dipper")
            .field("shards", &self.inner.shards.len())
            .finish_non_exhaustive()
    }
}

fn poisoned() -> DipperError {
    DipperError::Failed("a thread panicked while holding a shard".into())
}

/// Encode an op record for `shards` (`None`: every shard).
fn encode_record(shards: Option<&[u16]>, op: &[u8]) -> Vec<u8> {
    let head = head_len(shards);
    let mut p = vec![0u8; head + op.len()];
    write_head(shards, &mut p[..head]);
    p[head..].copy_from_slice(op);
    p
}

/// Bytes of an op record's head (the shard count, or [`ALL_SHARDS`], then the ids).
fn head_len(shards: Option<&[u16]>) -> usize {
    2 + 2 * shards.map_or(0, <[u16]>::len)
}

/// Write an op record's head into `out`, which is [`head_len`] bytes.
fn write_head(shards: Option<&[u16]>, out: &mut [u8]) {
    match shards {
        None => out[..2].copy_from_slice(&ALL_SHARDS.to_le_bytes()),
        Some(s) => {
            out[..2].copy_from_slice(&(s.len() as u16).to_le_bytes());
            for (i, id) in s.iter().enumerate() {
                out[2 + 2 * i..4 + 2 * i].copy_from_slice(&id.to_le_bytes());
            }
        }
    }
}

/// The shard ids of an op record, as its bytes (2 little-endian bytes each, checked ascending
/// and below the shard count by [`decode_record`]): read in place, no allocation per record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ShardIds<'a>(&'a [u8]);

impl ShardIds<'_> {
    fn iter(self) -> impl Iterator<Item = u16> {
        self.0
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
    }

    #[cfg(test)]
    fn to_vec(self) -> Vec<u16> {
        self.iter().collect()
    }
}

/// Shard lists of up to this many ids are encoded on the stack.
const HEAD_IDS_INLINE: usize = 15;

/// The start of an op record ([`encode_record`]'s layout): the shard count (or
/// [`ALL_SHARDS`]) and the ids, built on the stack for short lists.
enum RecordHead {
    Inline([u8; 2 + 2 * HEAD_IDS_INLINE], usize),
    Heap(Vec<u8>),
}

impl RecordHead {
    fn new(shards: Option<&[u16]>) -> RecordHead {
        match shards {
            Some(s) if s.len() > HEAD_IDS_INLINE => RecordHead::Heap(encode_record(shards, &[])),
            _ => {
                let mut b = [0u8; 2 + 2 * HEAD_IDS_INLINE];
                let n = head_len(shards);
                write_head(shards, &mut b[..n]);
                RecordHead::Inline(b, n)
            }
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            RecordHead::Inline(b, n) => &b[..*n],
            RecordHead::Heap(v) => v,
        }
    }
}

/// Decode an op record: which shards (`None`: all) and the op bytes.
fn decode_record(payload: &[u8], shards: usize, lsn: u64) -> Result<(Option<ShardIds<'_>>, &[u8])> {
    let bad = |field: &'static str, expected: String, found: String| DipperError::Corrupt {
        structure: "op record",
        offset: lsn,
        field,
        expected,
        found,
    };
    if payload.len() < 2 {
        return Err(bad(
            "length",
            "at least 2".into(),
            payload.len().to_string(),
        ));
    }
    let n = u16::from_le_bytes([payload[0], payload[1]]);
    if n == ALL_SHARDS {
        return Ok((None, &payload[2..]));
    }
    let n = n as usize;
    if n == 0 || n > shards || payload.len() < 2 + 2 * n {
        return Err(bad(
            "shard count",
            format!("1..={shards} with room for the ids"),
            n.to_string(),
        ));
    }
    let ids = ShardIds(&payload[2..2 + 2 * n]);
    let mut last: Option<u16> = None;
    for id in ids.iter() {
        if id as usize >= shards || last.is_some_and(|l| l >= id) {
            return Err(bad(
                "shard id",
                format!("ascending, below {shards}"),
                id.to_string(),
            ));
        }
        last = Some(id);
    }
    Ok((Some(ids), &payload[2 + 2 * n..]))
}

/// Replay every record of `log` onto `arenas`, splitting the shards among `threads` threads.
/// Returns the number of records.
fn replay<M: Medium, S: Machine>(
    machine: &S,
    log: &Log<M>,
    arenas: &mut [Arena],
    threads: usize,
    pacer: Option<&Pacer<'_>>,
) -> Result<u64> {
    let shards = arenas.len();
    let threads = threads.clamp(1, shards);
    let per = shards.div_ceil(threads);
    let counts: Vec<Result<u64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = arenas
            .chunks_mut(per)
            .enumerate()
            .map(|(t, chunk)| {
                let lo = t * per;
                scope.spawn(move || -> Result<u64> {
                    let hi = lo + chunk.len();
                    let mut n = 0;
                    let mut tick = pacer.map(Pacer::tick);
                    // Payloads are lent by the walk (no copy, no allocation per record).
                    let mut records = log.records();
                    while let Some(rec) = records.next_ref() {
                        let rec = rec?;
                        n += 1;
                        if let Some(t) = tick.as_mut() {
                            t.add(rec.payload.len() as u64 + 64);
                        }
                        let (ids, op) = decode_record(rec.payload, shards, rec.lsn)?;
                        match ids {
                            None => {
                                let mut out = S::Output::default();
                                for (i, a) in chunk.iter_mut().enumerate() {
                                    machine.apply(lo + i, a, op, &mut out)?;
                                }
                            }
                            Some(ids) => {
                                // Most records name one shard: the other threads skip them
                                // without building an output.
                                let mut out: Option<S::Output> = None;
                                for id in ids.iter() {
                                    let id = id as usize;
                                    if (lo..hi).contains(&id) {
                                        let out = out.get_or_insert_with(S::Output::default);
                                        machine.apply(id, &mut chunk[id - lo], op, out)?;
                                    }
                                }
                            }
                        }
                    }
                    Ok(n)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(poisoned())))
            .collect()
    });
    let mut n = 0;
    for c in counts {
        n = c?;
    }
    Ok(n)
}

/// Add the changed lines `lines` ((page, mask), from [`Arena::take_dirty_lines`]) to the
/// per-page masks `masks`.
fn merge_lines(masks: &mut Vec<u64>, lines: &[(usize, u64)]) {
    for &(p, m) in lines {
        if masks.len() <= p {
            masks.resize(p + 1, 0);
        }
        masks[p] |= m;
    }
}

/// The pages with changed lines in `masks`, ascending, with their masks.
fn masks_to_lines(masks: &[u64]) -> Vec<(usize, u64)> {
    masks
        .iter()
        .enumerate()
        .filter(|(_, m)| **m != 0)
        .map(|(p, &m)| (p, m))
        .collect()
}

/// Format 2: make the table of slot `target` (which holds no image in force) hold `entries`,
/// replacing its region by a larger one, or by a smaller one when it is more than twice the
/// size needed (a format-1 slot of an older store), and add a frame region if fewer than
/// `frames_needed` frames are free. The pool grows for either.
fn prepare_format2<M: Medium>(
    pool: &mut Pool<M>,
    tables: &mut [TableGeometry; 2],
    fr: &mut Frames,
    target: usize,
    entries: u64,
    frames_needed: u64,
) -> Result<()> {
    let want = frames::table_bytes_for(entries);
    let len = pool.region(SLOT_REGIONS[target]).map_or(0, |r| r.length);
    if tables[target].capacity < entries || (len > 2 * want && len > 1 << 20) {
        let r = pool.replace_region(SLOT_REGIONS[target], want)?;
        tables[target] = TableGeometry::new(target as u32, r.offset, r.length)?;
    }
    assert!(
        tables[target].capacity >= entries,
        "the table holds the image"
    );
    let free = fr.free();
    if frames_needed > free {
        let short = frames_needed - free;
        // The last frame region grows in place if nothing follows it (a sixteenth at least);
        // else a new region (a quarter at least, one directory entry).
        let mut extended = false;
        if let Some(last) = fr.regions().checked_sub(1).map(frames::frame_region_name)
            && let Some(r) = pool.region(&last).cloned()
        {
            let add = frames::frames_to_extend(short, fr.total()) * PAGE as u64;
            match pool.extend_region(&last, r.length + add) {
                Ok(r) => {
                    fr.extend_last(r.length)?;
                    extended = true;
                }
                Err(pmem::PmemError::NoSpace(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if !extended {
            let add = frames::frames_to_add(short, fr.total());
            let name = frames::frame_region_name(fr.regions());
            let r = pool.create_region(&name, kinds::DIPPER, add * PAGE as u64, Alignment::Page)?;
            fr.add_region(r.offset, r.length)?;
        }
    }
    assert!(
        fr.free() >= frames_needed,
        "the frames hold the changed pages"
    );
    Ok(())
}

fn region_of<M: Medium>(pool: &Pool<M>, name: &str, kind: u32) -> Result<(usize, usize)> {
    let r = pool
        .region(name)
        .ok_or_else(|| DipperError::NotAStore(format!("the pool has no region `{name}`")))?;
    if r.kind != kind {
        return Err(DipperError::NotAStore(format!(
            "region `{name}` holds {} data, not {}",
            kinds::name(r.kind),
            kinds::name(kind)
        )));
    }
    Ok((r.offset as usize, r.length as usize))
}

impl<M: Medium + Clone + Send + Sync + 'static, S: Machine> Dipper<M, S> {
    /// Make a new, empty store in `pool` (which must not hold one) and open it.
    pub fn create(
        mut pool: Pool<M>,
        layout: &Layout,
        machine: S,
        opts: Options,
    ) -> Result<(Self, RecoveryReport)> {
        if layout.shards == 0 || layout.shards > SHARDS_MAX {
            return Err(DipperError::Invalid {
                what: "shards",
                reason: format!("{} (allowed: 1..={SHARDS_MAX})", layout.shards),
            });
        }
        let root = pool.create_region(
            ROOT_REGION,
            kinds::DIPPER,
            ROOT_REGION_BYTES,
            Alignment::Page,
        )?;
        for name in LOG_REGIONS {
            let r = pool.create_region(name, kinds::LOG, layout.log_bytes, Alignment::Page)?;
            let log = Log::create(
                pool.medium().clone(),
                r.offset as usize,
                r.length as usize,
                Duration::ZERO,
            )?;
            drop(log.close()?);
        }
        // In a growable pool the slots are tables of frames (`frames`): sized for the image
        // a slot of `slot_bytes` would hold; they grow with it.
        let slot_bytes = if pool.growable() {
            let pages = slot_geometry(layout.slot_bytes).map_or(1, |(pages, _)| pages);
            frames::table_bytes_for(pages)
        } else {
            layout.slot_bytes
        };
        for (i, name) in SLOT_REGIONS.iter().enumerate() {
            let r = pool.create_region(name, kinds::DIPPER, slot_bytes, Alignment::Page)?;
            SlotGeometry::new(i as u32, r.offset, r.length)?;
        }
        let mut r = Root {
            seq: 0,
            active: 0,
            state: STATE_IDLE,
            slot: SLOT_NONE,
            shards: layout.shards as u32,
            checkpoint: 0,
            machine: layout.machine,
        };
        r.store(pool.medium(), root.offset as usize, &pool.uuid())?;
        Self::open(pool, machine, opts)
    }

    /// Open the store in `pool`: recover it and start serving.
    pub fn open(mut pool: Pool<M>, machine: S, opts: Options) -> Result<(Self, RecoveryReport)> {
        if !(1..=90).contains(&opts.checkpoint_at_percent) {
            return Err(DipperError::Invalid {
                what: "checkpoint_at_percent",
                reason: format!("{} (allowed: 1..=90)", opts.checkpoint_at_percent),
            });
        }
        let start = Instant::now();
        let medium = pool.medium().clone();
        let uuid = pool.uuid();
        let clean = pool.was_clean_shutdown();
        let (root_base, _) = region_of(&pool, ROOT_REGION, kinds::DIPPER)?;
        let (mut root, _other_copy_damage) = Root::load(&medium, root_base, &uuid)?;
        let shards = root.shards as usize;
        let log_opts = LogOptions {
            read_only: pool.read_only(),
            clean_shutdown: clean,
            truncate_damaged: false,
            full_wait: Duration::ZERO,
        };
        let mut logs = Vec::with_capacity(2);
        let mut ring = 0;
        for name in LOG_REGIONS {
            let (base, len) = region_of(&pool, name, kinds::LOG)?;
            let (log, _) = Log::open(medium.clone(), base, len, &log_opts)?;
            ring = len as u64;
            logs.push(log);
        }
        let logs: [Log<M>; 2] = logs.try_into().map_err(|_| poisoned())?;
        let mut geo = Vec::with_capacity(2);
        for (i, name) in SLOT_REGIONS.iter().enumerate() {
            let (base, len) = region_of(&pool, name, kinds::DIPPER)?;
            geo.push(SlotGeometry::new(i as u32, base as u64, len as u64)?);
        }
        let geo: [SlotGeometry; 2] = [geo[0], geo[1]];
        let slots_grow = pool.growable() && !pool.read_only();
        let region_len = |i: usize| pool.region(SLOT_REGIONS[i]).map_or(0, |r| r.length);
        let mut tables = [
            TableGeometry::new(0, geo[0].base, region_len(0))?,
            TableGeometry::new(1, geo[1].base, region_len(1))?,
        ];
        let mut fr = Frames::default();
        for k in 0.. {
            let name = frames::frame_region_name(k);
            if pool.region(&name).is_none() {
                break;
            }
            let (base, len) = region_of(&pool, &name, kinds::DIPPER)?;
            fr.add_region(base as u64, len as u64)?;
        }
        let mut report = RecoveryReport {
            clean_shutdown: clean,
            checkpoint: root.checkpoint,
            ..RecoveryReport::default()
        };
        let mut maps: [Option<SlotMap>; 2] = [None, None];
        let mut arenas = if root.slot == SLOT_NONE {
            let mut v = Vec::with_capacity(shards);
            for s in 0..shards {
                let mut a = Arena::new();
                machine.init(s, &mut a)?;
                v.push(a);
            }
            v
        } else if frames::is_format2(&medium, geo[root.slot as usize].base) {
            let s = root.slot as usize;
            fr.load(&medium, &uuid, &tables[s], root.checkpoint, shards)?
        } else {
            let s = root.slot as usize;
            let (arenas, map) = slot::load(&medium, &uuid, &geo[s], root.checkpoint, shards)?;
            maps[s] = Some(map);
            arenas
        };
        report.load_ms = start.elapsed().as_millis() as u64;
        let replay_start = Instant::now();
        let archived = 1 - root.active as usize;
        let target = if root.slot == SLOT_NONE {
            0
        } else {
            1 - root.slot as usize
        };
        if root.state == STATE_CHECKPOINTING && slots_grow {
            // Which pages the archived log changes: the redo writes only those (format 2).
            for a in &mut arenas {
                a.track_dirty();
            }
        }
        if root.state == STATE_CHECKPOINTING {
            report.archived_records = replay(
                &machine,
                &logs[archived],
                &mut arenas,
                opts.replay_threads,
                None,
            )?;
        }
        if root.state == STATE_CHECKPOINTING && slots_grow {
            // Redo the checkpoint in format 2: the changed pages into free frames (the slot
            // the root does not point at gets the table), then the root switch.
            let changed: Vec<Vec<usize>> = arenas
                .iter_mut()
                .map(|a| {
                    let d = a.take_dirty();
                    a.stop_tracking();
                    d
                })
                .collect();
            report.redone_checkpoint = true;
            let (need, entries) = fr.needs(&arenas, &changed);
            prepare_format2(
                &mut pool,
                &mut tables,
                &mut fr,
                target,
                entries.max(image_pages(&arenas)),
                need,
            )?;
            let (_, pending) = fr.write(
                &medium,
                &uuid,
                &tables[target],
                root.checkpoint + 1,
                &arenas,
                &changed,
            )?;
            root.slot = target as u32;
            root.checkpoint += 1;
            root.state = STATE_IDLE;
            root.store(&medium, root_base, &uuid)?;
            fr.commit(pending);
            maps = [None, None];
            logs[archived].cleanup_all()?;
            report.checkpoint = root.checkpoint;
        } else if root.state == STATE_CHECKPOINTING && image_pages(&arenas) > geo[target].capacity {
            // The interrupted checkpoint's image has outgrown the slots: it cannot be redone.
            // The root and both logs stay as they are, so the store opens from the image and
            // both logs, every time, and takes no checkpoint (see `checkpoint_locked`).
        } else if root.state == STATE_CHECKPOINTING {
            report.redone_checkpoint = true;
            let mut map = SlotMap::empty(shards);
            slot::write(
                &medium,
                &uuid,
                &geo[target],
                root.checkpoint + 1,
                &arenas,
                None,
                &mut map,
            )?;
            // The other slot holds the image from before the redo: its page map no longer
            // says which pages differ from the mirror, so its next write must be whole.
            maps = [None, None];
            maps[target] = Some(map);
            root.slot = target as u32;
            root.checkpoint += 1;
            root.state = STATE_IDLE;
            root.store(&medium, root_base, &uuid)?;
            logs[archived].cleanup_all()?;
            report.checkpoint = root.checkpoint;
        } else if !pool.read_only() && logs[archived].records().next().is_some() {
            // The last checkpoint switched the root but did not get to empty its log: those
            // records are in the image.
            logs[archived].cleanup_all()?;
        }
        let mut mirror = arenas.clone();
        for a in &mut mirror {
            a.track_dirty();
        }
        let active = root.active as usize;
        report.active_records = replay(
            &machine,
            &logs[active],
            &mut arenas,
            opts.replay_threads,
            None,
        )?;
        report.replay_ms = replay_start.elapsed().as_millis() as u64;
        report.total_ms = start.elapsed().as_millis() as u64;
        let arena_bytes = arenas.iter().map(|a| a.len() as u64).sum();
        let live_bytes = arenas.iter().map(|a| a.live_bytes()).sum();
        let pool_read_only = pool.read_only();
        let inner = Arc::new(Inner {
            machine,
            medium,
            uuid,
            root_base,
            shards: arenas.into_iter().map(RwLock::new).collect(),
            threshold: ring * opts.checkpoint_at_percent as u64 / 100,
            appended: AtomicU64::new(logs[active].stats().used_bytes),
            full_waits: AtomicU64::new(0),
            full_wait_us: AtomicU64::new(0),
            logs,
            gate: RwLock::new(active),
            arena_bytes: AtomicU64::new(arena_bytes),
            live_bytes: AtomicU64::new(live_bytes),
            memory_max: AtomicU64::new(0),
            operations: AtomicU64::new(0),
            slot_capacity: AtomicU64::new(if slots_grow {
                tables[0].capacity.min(tables[1].capacity) * PAGE as u64
            } else {
                geo[0].capacity_bytes().min(geo[1].capacity_bytes())
            }),
            slots_grow,
            ckpt: Mutex::new(Checkpointer {
                root,
                geo,
                mirror,
                maps,
                dirty_since: [vec![Vec::new(); shards], vec![Vec::new(); shards]],
                last_swap: None,
                last_cost: None,
                tables,
                frames: fr,
            }),
            signal: Mutex::new(Signal::default()),
            cond: Condvar::new(),
            failed: Mutex::new(None),
            failed_flag: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            pool: Mutex::new(Some(pool)),
            opts,
            ablation: ablation::Hooks::new(shards),
            pacing: Mutex::new(Pacing::default()),
        });
        let mut threads = Vec::new();
        let spawn = |name: &str, f: fn(&Inner<M, S>)| {
            let inner = Arc::clone(&inner);
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || f(&inner))
                .map_err(|e| DipperError::Failed(format!("cannot start thread {name}: {e}")))
        };
        if opts.background {
            threads.push(spawn("dipper-checkpoint", Inner::checkpoint_loop)?);
        }
        if matches!(
            opts.policy,
            ForcePolicy::Frequency(_) | ForcePolicy::Group(_)
        ) && !pool_read_only
        {
            threads.push(spawn("dipper-flush", Inner::flush_loop)?);
        }
        Ok((
            Dipper {
                inner,
                threads: Mutex::new(threads),
            },
            report,
        ))
    }

    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.inner.shards.len()
    }

    /// The machine.
    pub fn machine(&self) -> &S {
        &self.inner.machine
    }

    /// The pool's UUID.
    pub fn uuid(&self) -> Uuid {
        self.inner.uuid
    }

    /// Log, force and apply an operation on `shards` (ascending, no duplicates; `None`: every
    /// shard). `grows`: the operation may need more arena space (writes that only remove pass
    /// `false`, so they still run when the store is full).
    pub fn execute(&self, shards: Option<&[u16]>, op: &[u8], grows: bool) -> Result<S::Output> {
        self.inner
            .execute(shards, grows, |_| {
                Ok::<_, std::convert::Infallible>(op.to_vec())
            })?
            .map_err(|never| match never {})
    }

    /// Like [`Dipper::execute`], but the operation's bytes come from `prepare`, which runs
    /// under the shards' write locks before anything is logged and sees their arenas (in the
    /// order of `shards`). It can check the state, write data the record will point at (and
    /// persist it), or refuse with its own error, in which case nothing is logged.
    pub fn execute_with<E>(
        &self,
        shards: Option<&[u16]>,
        grows: bool,
        prepare: impl FnOnce(&[&Arena]) -> std::result::Result<Vec<u8>, E>,
    ) -> Result<std::result::Result<S::Output, E>> {
        self.inner.execute(shards, grows, prepare)
    }

    /// Apply, then log (the second write path in the module comment): run `body` with the
    /// arenas of `shards` (ascending, no duplicates; `None`: every shard) locked for writing.
    /// `body` changes them with the machine's own code and returns its result and the record
    /// to log: the shards it concerns (a subset of `shards`, ascending; `None`: every shard)
    /// and the operation bytes whose replay redoes exactly its changes; `None` if it changed
    /// nothing. The record is appended and forced by the policy before the locks are released.
    /// If that fails, the engine latches failed (its DRAM state is ahead of its logs) and
    /// returns the error; the store must be reopened. `body` checks
    /// [`Locked::admits_growth`] before it grows the state.
    pub fn apply_then_log<R>(
        &self,
        shards: Option<&[u16]>,
        body: impl FnOnce(&mut Locked<'_>) -> (R, Option<(Option<Vec<u16>>, Vec<u8>)>),
    ) -> Result<R> {
        self.inner.apply_then_log(shards, body)
    }

    /// The largest operation (bytes) a record can carry; a longer one is refused by the log.
    pub fn operation_bytes_max(&self) -> usize {
        let header = 2 + 2 * self.inner.shards.len();
        (self.inner.logs[0].payload_bytes_max() as usize).saturating_sub(header)
    }

    /// Refuse writes that may grow the state while the bytes in allocated arena blocks (over all
    /// shards) are above `bytes` (0: no limit), with Redis's `maxmemory` error text
    /// ([`MAXMEMORY_REFUSAL`]). Writes that only remove still run.
    pub fn set_memory_max(&self, bytes: u64) {
        self.inner.memory_max.store(bytes, Ordering::Relaxed);
    }

    /// The limit set by [`Dipper::set_memory_max`] (0: none).
    pub fn memory_max(&self) -> u64 {
        self.inner.memory_max.load(Ordering::Relaxed)
    }

    /// Bytes in allocated arena blocks over all shards (what [`Dipper::set_memory_max`] limits).
    pub fn live_bytes(&self) -> u64 {
        self.inner.live_bytes.load(Ordering::Relaxed)
    }

    /// Log swaps (checkpoints started) since open; cheap.
    pub fn log_swaps(&self) -> u64 {
        self.inner.signal.lock().map(|s| s.swaps).unwrap_or(0)
    }

    /// A function that lists the pool's regions as they are when it is called (a growable pool
    /// adds and extends regions while the store serves). It does not keep the store alive:
    /// once the store is dropped or closed it returns `None`.
    pub fn regions_watch(&self) -> impl Fn() -> Option<Vec<pmem::Region>> + Send + Sync + 'static {
        let inner = Arc::downgrade(&self.inner);
        move || {
            let inner = inner.upgrade()?;
            let pool = inner.pool.lock().ok()?;
            pool.as_ref().map(|p| p.regions().to_vec())
        }
    }

    /// The medium the store lives on (for data placed beside it, such as DStore's data zone).
    pub fn medium(&self) -> &M {
        &self.inner.medium
    }

    /// Run `f` on shard `shard` under its read lock.
    /// Refused once the engine has failed.
    pub fn read<R>(&self, shard: usize, f: impl FnOnce(&Arena) -> R) -> Result<R> {
        self.inner.check_readable()?;
        let g = self.inner.shards[shard].read().map_err(|_| poisoned())?;
        Ok(f(&g))
    }

    /// Run `f` on several shards (ascending, no duplicates) under their read locks at once.
    /// Refused once the engine has failed.
    pub fn read_many<R>(&self, shards: &[u16], f: impl FnOnce(&[&Arena]) -> R) -> Result<R> {
        self.inner.check_readable()?;
        let mut guards: Vec<RwLockReadGuard<'_, Arena>> = Vec::with_capacity(shards.len());
        for &s in shards {
            guards.push(
                self.inner.shards[s as usize]
                    .read()
                    .map_err(|_| poisoned())?,
            );
        }
        let refs: Vec<&Arena> = guards.iter().map(|g| &**g).collect();
        Ok(f(&refs))
    }

    /// Set how checkpoints are paced (from the next checkpoint on; [`Pacing::default`] at
    /// open). Refused with [`DipperError::Invalid`] naming the field out of range.
    pub fn set_pacing(&self, pacing: Pacing) -> Result<()> {
        pacing.check()?;
        *self.inner.pacing.lock().map_err(|_| poisoned())? = pacing;
        Ok(())
    }

    /// How checkpoints are paced now.
    pub fn pacing(&self) -> Pacing {
        self.inner
            .pacing
            .lock()
            .map(|p| *p)
            .unwrap_or_else(|_| Pacing::off())
    }

    /// Take a checkpoint now, on this thread, and return when the root points at it.
    pub fn checkpoint(&self) -> Result<CheckpointStats> {
        self.inner.checkpoint_now(true)
    }

    /// Make every operation applied so far durable: force the active log through its last
    /// record. Under [`ForcePolicy::Caller`] this is the caller's half of the bargain: call it
    /// before anyone learns of an operation's effect (its acknowledgement, or a read of what
    /// it wrote), and the operations gathered since the last call share one force. Under the
    /// other policies it forces early. A failed force latches the engine failed (the DRAM
    /// state may hold operations no durable record holds) and returns the error.
    pub fn sync(&self) -> Result<()> {
        self.inner
            .force_active()
            .map_err(|e| self.inner.latch(format!("forcing the log failed: {e}")))
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// Why the store refuses writes, if it does.
    pub fn failure(&self) -> Option<String> {
        self.inner.failure()
    }

    /// Stop the checkpoint thread, take a final checkpoint (if configured), force the log and
    /// mark the pool cleanly closed. Later operations fail with [`DipperError::Closed`].
    pub fn close(&self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        {
            let mut s = self.inner.signal.lock().map_err(|_| poisoned())?;
            s.stop = true;
            self.inner.cond.notify_all();
        }
        for t in self.threads.lock().map_err(|_| poisoned())?.drain(..) {
            let _ = t.join();
        }
        if let Some(why) = self.inner.failure() {
            return Err(DipperError::Failed(why));
        }
        // Wait for writers in flight: they hold shard locks.
        let _all: Vec<RwLockWriteGuard<'_, Arena>> = self
            .inner
            .shards
            .iter()
            .map(|s| s.write().map_err(|_| poisoned()))
            .collect::<Result<_>>()?;
        if self.inner.opts.checkpoint_on_close {
            self.inner.checkpoint_now(false)?;
        }
        {
            let gate = self.inner.gate.read().map_err(|_| poisoned())?;
            let log = &self.inner.logs[*gate];
            let next = log.next_lsn();
            if next > 1 && log.durable_lsn() < next - 1 {
                log.force(next - 1, 1)?;
            }
        }
        if let Some(pool) = self.inner.pool.lock().map_err(|_| poisoned())?.take() {
            pool.close()?;
        }
        Ok(())
    }
}

/// Shards locked for writing by [`Dipper::apply_then_log`].
pub struct Locked<'a> {
    ids: Vec<u16>,
    guards: Vec<RwLockWriteGuard<'a, Arena>>,
    /// Each locked arena's (length, live bytes) when it was locked.
    before: Vec<(usize, u64)>,
    arena_bytes: u64,
    slot_capacity: u64,
    slots_grow: bool,
    /// Live bytes over all shards when the shards were locked.
    live_bytes: u64,
    /// The memory limit (0: none).
    memory_max: u64,
    failed: Option<String>,
}

impl std::fmt::Debug for Locked<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locked")
            .field("ids", &self.ids)
            .finish_non_exhaustive()
    }
}

impl Locked<'_> {
    /// The locked shards, ascending.
    pub fn ids(&self) -> &[u16] {
        &self.ids
    }

    /// The arena of the `i`th locked shard (`ids()[i]`).
    pub fn arena(&self, i: usize) -> &Arena {
        &self.guards[i]
    }

    /// The arena of the `i`th locked shard, for changing.
    pub fn arena_mut(&mut self, i: usize) -> &mut Arena {
        &mut self.guards[i]
    }

    /// Bytes the locked arenas grew by since they were locked.
    fn growth(&self) -> u64 {
        self.guards
            .iter()
            .zip(&self.before)
            .map(|(g, &(len, _))| g.len().saturating_sub(len) as u64)
            .sum()
    }

    /// Live bytes over all shards now (the count at locking plus what this transaction
    /// changed).
    fn live_now(&self) -> u64 {
        self.guards
            .iter()
            .zip(&self.before)
            .fold(self.live_bytes, |n, (g, &(_, live))| {
                n.saturating_add(g.live_bytes()).saturating_sub(live)
            })
    }

    /// Report that the arenas were left in a state no record describes (a change failed half
    /// way): the engine latches failed when the body returns, and logs nothing.
    pub fn fail(&mut self, why: String) {
        self.failed.get_or_insert(why);
    }

    /// Whether a change that grows the state is accepted now (the rule of
    /// [`Dipper::execute`]'s `grows`, counting what this transaction did already).
    pub fn admits_growth(&self) -> bool {
        self.growth_refusal().is_none()
    }

    /// Why a change that grows the state is refused now, or `None` if it is accepted: the
    /// memory limit is passed ([`MAXMEMORY_REFUSAL`]), or, in a store whose slots cannot grow,
    /// the state is near their capacity.
    pub fn growth_refusal(&self) -> Option<String> {
        if self.memory_max != 0 && self.live_now() > self.memory_max {
            return Some(MAXMEMORY_REFUSAL.into());
        }
        let used = self.arena_bytes.saturating_add(self.growth());
        if !self.slots_grow && !admits_growth(used, self.slot_capacity) {
            return Some(format!(
                "the DRAM state ({used} bytes) is near the shadow slots' capacity ({} bytes); \
                 only deletions are accepted",
                self.slot_capacity
            ));
        }
        None
    }
}

impl<M: Medium + Clone + Send + Sync + 'static, S: Machine> Drop for Dipper<M, S> {
    fn drop(&mut self) {
        // Without close() the pool stays marked in use: the next open recovers as after a
        // crash. Only stop the thread.
        if let Ok(mut s) = self.inner.signal.lock() {
            s.stop = true;
            self.inner.cond.notify_all();
        }
        if let Ok(mut t) = self.threads.lock() {
            for t in t.drain(..) {
                let _ = t.join();
            }
        }
    }
}

impl<M: Medium + Clone + Send + Sync + 'static, S: Machine> Inner<M, S> {
    fn failure(&self) -> Option<String> {
        // The flag is set after the reason (latch), so an engine that never failed answers
        // without taking the lock every write would otherwise take.
        if !self.failed_flag.load(Ordering::Acquire) {
            return None;
        }
        self.failed
            .lock()
            .map(|f| f.clone())
            .unwrap_or_else(|_| Some("poisoned".into()))
    }

    fn latch(&self, why: String) -> DipperError {
        if let Ok(mut f) = self.failed.lock()
            && f.is_none()
        {
            *f = Some(why.clone());
        }
        self.failed_flag.store(true, Ordering::Release);
        // Wake writers waiting for a checkpoint that will not come.
        if let Ok(mut s) = self.signal.lock() {
            s.failed = true;
            self.cond.notify_all();
        }
        DipperError::Failed(why)
    }

    /// Whether a background checkpoint thread runs and has neither stopped nor failed.
    fn checkpointer_alive(&self) -> bool {
        self.opts.background
            && self
                .signal
                .lock()
                .map(|s| !s.stop && !s.failed)
                .unwrap_or(false)
    }

    fn check_readable(&self) -> Result<()> {
        if self.failed_flag.load(Ordering::Acquire) {
            return Err(DipperError::Failed(
                self.failure().unwrap_or_else(|| "failed".into()),
            ));
        }
        Ok(())
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(DipperError::Closed);
        }
        if let Some(why) = self.failure() {
            return Err(DipperError::Failed(why));
        }
        Ok(())
    }

    fn execute<E>(
        &self,
        shards: Option<&[u16]>,
        grows: bool,
        prepare: impl FnOnce(&[&Arena]) -> std::result::Result<Vec<u8>, E>,
    ) -> Result<std::result::Result<S::Output, E>> {
        self.check_open()?;
        if grows {
            self.admit_growth()?;
        }
        let (ids, mut guards) = self.lock_shards(shards)?;
        self.ablation.before_apply(None, &ids, &guards);
        let op = {
            let refs: Vec<&Arena> = guards.iter().map(|g| &**g).collect();
            match prepare(&refs) {
                Ok(op) => op,
                Err(e) => return Ok(Err(e)),
            }
        };
        let op = &op[..];
        let log = self.append(shards, op, false)?;
        self.ablation.before_apply(Some(log), &ids, &guards);
        self.operations.fetch_add(1, Ordering::Relaxed);
        let mut out = S::Output::default();
        for (g, &i) in guards.iter_mut().zip(&ids) {
            let before = (g.len(), g.live_bytes());
            if let Err(e) = self.machine.apply(i as usize, g, op, &mut out) {
                return Err(self.latch(format!("applying a logged operation failed: {e}")));
            }
            self.account(before, g);
        }
        Ok(Ok(out))
    }

    /// The shards `shards` names (ascending, no duplicates; `None`: every shard), each locked
    /// for writing, in that order.
    #[allow(clippy::type_complexity)]
    fn lock_shards(
        &self,
        shards: Option<&[u16]>,
    ) -> Result<(Vec<u16>, Vec<RwLockWriteGuard<'_, Arena>>)> {
        let ids: Vec<u16> = match shards {
            Some(s) => {
                assert!(
                    s.windows(2).all(|w| w[0] < w[1])
                        && s.iter().all(|&i| (i as usize) < self.shards.len()),
                    "shard list must be ascending, unique and in range"
                );
                s.to_vec()
            }
            None => (0..self.shards.len() as u16).collect(),
        };
        let mut guards = Vec::with_capacity(ids.len());
        for &i in &ids {
            guards.push(self.shards[i as usize].write().map_err(|_| poisoned())?);
        }
        Ok((ids, guards))
    }

    fn apply_then_log<R>(
        &self,
        shards: Option<&[u16]>,
        body: impl FnOnce(&mut Locked<'_>) -> (R, Option<(Option<Vec<u16>>, Vec<u8>)>),
    ) -> Result<R> {
        self.check_open()?;
        self.ablation.check_apply_first()?;
        let (ids, guards) = self.lock_shards(shards)?;
        // 1. Locked. A failure latched by another writer while this one waited for the locks
        // must not be built on.
        self.check_open()?;
        let before = guards.iter().map(|g| (g.len(), g.live_bytes())).collect();
        let mut locked = Locked {
            ids,
            guards,
            before,
            arena_bytes: self.arena_bytes.load(Ordering::Relaxed),
            slot_capacity: self.slot_capacity.load(Ordering::Relaxed),
            slots_grow: self.slots_grow,
            live_bytes: self.live_bytes.load(Ordering::Relaxed),
            memory_max: self.memory_max.load(Ordering::Relaxed),
            failed: None,
        };
        // 2. Apply.
        let (out, record) = body(&mut locked);
        for (g, &before) in locked.guards.iter().zip(&locked.before) {
            self.account(before, g);
        }
        if let Some(why) = locked.failed.take() {
            return Err(self.latch(why));
        }
        let Some((record_shards, op)) = record else {
            return Ok(out);
        };
        if let Some(r) = &record_shards {
            assert!(
                r.windows(2).all(|w| w[0] < w[1])
                    && r.iter().all(|i| locked.ids.binary_search(i).is_ok()),
                "a record names only locked shards, ascending"
            );
        } else {
            assert_eq!(
                locked.ids.len(),
                self.shards.len(),
                "a record for every shard locks every shard"
            );
        }
        // 3. Log. The DRAM shards already hold the change: any failure here leaves them ahead
        // of the logs, so the engine stops.
        if let Err(e) = self.append(record_shards.as_deref(), &op, true) {
            return Err(self.latch(format!(
                "a transaction changed the DRAM state but its record could not be logged ({e}); \
                 reopen the store to recover the state before it"
            )));
        }
        self.operations.fetch_add(1, Ordering::Relaxed);
        // 4. Unlock (the guards drop here).
        drop(locked);
        Ok(out)
    }

    /// May a write that can grow the state run now? No while the allocated bytes are above
    /// the memory limit (Redis's `maxmemory` check, made before the command runs); in a store
    /// whose slots cannot grow, no when the state is near the slots' capacity.
    fn admit_growth(&self) -> Result<()> {
        let max = self.memory_max.load(Ordering::Relaxed);
        if max != 0 && self.live_bytes.load(Ordering::Relaxed) > max {
            return Err(DipperError::OutOfSpace(MAXMEMORY_REFUSAL.into()));
        }
        if !self.slots_grow {
            let used = self.arena_bytes.load(Ordering::Relaxed);
            let capacity = self.slot_capacity.load(Ordering::Relaxed);
            if !admits_growth(used, capacity) {
                return Err(DipperError::OutOfSpace(format!(
                    "the DRAM state ({used} bytes) is near the shadow slots' capacity \
                     ({capacity} bytes); only deletions are accepted"
                )));
            }
        }
        Ok(())
    }

    /// Count the change an operation made to a shard's arena, `before` being its (length,
    /// live bytes) before the operation ran.
    fn account(&self, before: (usize, u64), arena: &Arena) {
        let (len, live) = (arena.len(), arena.live_bytes());
        // An arena shrinks only when the machine empties it ([`Arena::reset`]).
        if len > before.0 {
            self.arena_bytes
                .fetch_add((len - before.0) as u64, Ordering::Relaxed);
        } else if len < before.0 {
            self.arena_bytes
                .fetch_sub((before.0 - len) as u64, Ordering::Relaxed);
        }
        if live >= before.1 {
            self.live_bytes
                .fetch_add(live - before.1, Ordering::Relaxed);
        } else {
            self.live_bytes
                .fetch_sub(before.1 - live, Ordering::Relaxed);
        }
    }

    /// Append and force by policy. On a full log, ask for a checkpoint and wait (up to
    /// `full_wait`) until it has swapped the logs, then try again. `patient` (a record whose
    /// change is already applied, which must be logged): past `full_wait`, keep waiting as long
    /// as the background checkpoint thread runs and has not failed, since it will swap the logs
    /// (a record is at most half a log, so it fits the emptied one) or latch a failure.
    /// Returns the index of the log that took the record.
    fn append(&self, shards: Option<&[u16]>, op: &[u8], patient: bool) -> Result<usize> {
        // Read the clock only once the log is found full (not on every append).
        let mut deadline: Option<Instant> = None;
        // The record is the shard list then the op (see [`encode_record`]), copied into the
        // reservation in two pieces: no payload buffer is built per operation.
        let head = RecordHead::new(shards);
        let head = head.bytes();
        let length = head.len() + op.len();
        loop {
            let (r, used) = {
                let gate = self.gate.read().map_err(|_| poisoned())?;
                let log = &self.logs[*gate];
                let r = log
                    .reserve_for(length, self.opts.policy)
                    .and_then(|mut res| {
                        res.copy(0, head)?;
                        res.copy(head.len(), op)?;
                        let lsn = res.complete()?;
                        log.commit(lsn, self.opts.policy)
                    });
                (r, *gate)
            };
            match r {
                Ok(_) => {
                    let total = self
                        .appended
                        .fetch_add(length as u64 + 64, Ordering::Relaxed);
                    if total >= self.threshold {
                        self.request(false);
                    }
                    return Ok(used);
                }
                Err(LogError::Full { .. })
                    if Instant::now()
                        < *deadline.get_or_insert_with(|| Instant::now() + self.opts.full_wait)
                        || (patient && self.checkpointer_alive()) =>
                {
                    let s = self.signal.lock().map_err(|_| poisoned())?;
                    let seen = s.swaps;
                    drop(s);
                    if *self.gate.read().map_err(|_| poisoned())? != used {
                        continue; // swapped meanwhile
                    }
                    self.request(true);
                    let s = self.signal.lock().map_err(|_| poisoned())?;
                    let deadline = deadline.unwrap_or_else(Instant::now);
                    let wait = match deadline.saturating_duration_since(Instant::now()) {
                        Duration::ZERO => self.opts.full_wait,
                        left => left,
                    };
                    let waited = Instant::now();
                    let _ = self
                        .cond
                        .wait_timeout_while(s, wait, |s| s.swaps == seen && !s.stop && !s.failed)
                        .map_err(|_| poisoned())?;
                    self.full_waits.fetch_add(1, Ordering::Relaxed);
                    self.full_wait_us
                        .fetch_add(waited.elapsed().as_micros() as u64, Ordering::Relaxed);
                    self.check_open()?;
                }
                Err(LogError::Full { needed, free, .. }) => {
                    return Err(DipperError::OutOfSpace(format!(
                        "the operation log is full ({needed} bytes needed, {free} free) and no \
                         checkpoint emptied it within {} ms",
                        self.opts.full_wait.as_millis()
                    )));
                }
                Err(LogError::TooLarge { length, max }) => {
                    return Err(DipperError::TooLarge {
                        what: "operation record",
                        bytes: length as usize,
                        max: max as usize,
                    });
                }
                Err(e) => {
                    return Err(self.latch(format!("appending to the operation log failed: {e}")));
                }
            }
        }
    }

    /// Ask the background thread for a checkpoint. `urgent`: a writer found the log full (run
    /// one even if the log is under the threshold by the time the thread looks).
    fn request(&self, urgent: bool) {
        if let Ok(mut s) = self.signal.lock()
            && (!s.requested || (urgent && !s.urgent))
        {
            s.requested = true;
            s.urgent |= urgent;
            self.cond.notify_all();
        }
    }

    /// Force the active log every `flush_every` (policies that do not force every record).
    fn flush_loop(&self) {
        loop {
            {
                let Ok(s) = self.signal.lock() else { return };
                let Ok((s, _)) = self
                    .cond
                    .wait_timeout_while(s, self.opts.flush_every, |s| !s.stop)
                else {
                    return;
                };
                if s.stop || s.failed {
                    return;
                }
            }
            if let Err(e) = self.force_active() {
                self.latch(format!("the periodic log flush failed: {e}"));
                return;
            }
        }
    }

    /// Force the active log through its last reserved record (waiting for records still being
    /// written). Records of the other log need nothing: the swap that archived it forced it.
    fn force_active(&self) -> Result<()> {
        let gate = self.gate.read().map_err(|_| poisoned())?;
        let log = &self.logs[*gate];
        let next = log.next_lsn();
        if next > 1 && log.durable_lsn() < next - 1 {
            log.force(next - 1, 1)?;
        }
        Ok(())
    }

    fn checkpoint_loop(&self) {
        loop {
            {
                let Ok(s) = self.signal.lock() else { return };
                let Ok(mut s) = self.cond.wait_while(s, |s| !s.requested && !s.stop) else {
                    return;
                };
                if s.stop {
                    return;
                }
                s.requested = false;
                let urgent = std::mem::take(&mut s.urgent);
                // A request made before the last swap may be stale: the log it saw filling is
                // the archived one now.
                if !urgent && self.appended.load(Ordering::Relaxed) < self.threshold {
                    continue;
                }
            }
            if let Err(e) = self.checkpoint_now(false) {
                self.latch(format!("checkpoint failed: {e}"));
                return;
            }
        }
    }

    fn checkpoint_now(&self, forced: bool) -> Result<CheckpointStats> {
        if let Some(why) = self.failure() {
            return Err(DipperError::Failed(why));
        }
        let mut ck = self.ckpt.lock().map_err(|_| poisoned())?;
        {
            let mut s = self.signal.lock().map_err(|_| poisoned())?;
            s.running = true;
        }
        let r = self.checkpoint_locked(&mut ck, forced);
        let mut s = self.signal.lock().map_err(|_| poisoned())?;
        s.running = false;
        if let Ok(st) = &r {
            s.completed += 1;
            s.last = *st;
        }
        self.cond.notify_all();
        drop(s);
        r
    }

    fn checkpoint_locked(&self, ck: &mut Checkpointer, forced: bool) -> Result<CheckpointStats> {
        let start = Instant::now();
        let started_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let cpu_start = thread_cpu_ns();
        if ck.root.state == STATE_CHECKPOINTING {
            // Left so by an open that could not redo it (its image does not fit a slot).
            return Err(DipperError::OutOfSpace(
                "the store has outgrown its shadow slots: an interrupted checkpoint cannot be \
                 finished; the operation logs keep every acknowledged write"
                    .into(),
            ));
        }
        // 1. Swap the logs.
        let closing = self.closed.load(Ordering::Acquire);
        let cow = self.ablation.cow(closing);
        let swap_start = Instant::now();
        let old = {
            let mut gate = self.gate.write().map_err(|_| poisoned())?;
            // A write admitted below the slot's capacity can grow the state past it (an arena
            // grows by half its size at a time). Its image would not fit: a checkpoint started
            // now could neither finish nor be redone at the next open, and the store could not
            // be opened again. Refuse before the root changes: the logs keep every change and
            // the store opens from its last image and its log.
            // (A store whose slots grow gives the target slot a larger region below instead.)
            let image = self.arena_bytes.load(Ordering::Relaxed);
            let capacity = self.slot_capacity.load(Ordering::Relaxed);
            if !self.slots_grow && image > capacity {
                return Err(DipperError::OutOfSpace(format!(
                    "the DRAM state ({image} bytes) has outgrown the shadow slots ({capacity} \
                     bytes): no checkpoint can hold it; the operation log keeps every \
                     acknowledged write"
                )));
            }
            let old = *gate;
            let log = &self.logs[old];
            let next = log.next_lsn();
            let empty = log.records().next().is_none() && log.durable_lsn() + 1 >= next;
            if empty && ck.root.slot != SLOT_NONE && !forced {
                self.appended.store(0, Ordering::Relaxed);
                return Ok(CheckpointStats {
                    number: ck.root.checkpoint,
                    ..CheckpointStats::default()
                });
            }
            let new = 1 - old;
            self.logs[new].cleanup_all()?;
            if next > 1 && log.durable_lsn() < next - 1 {
                log.force(next - 1, 1)?;
            }
            ck.root.active = new as u32;
            ck.root.state = STATE_CHECKPOINTING;
            ck.root.store(&self.medium, self.root_base, &self.uuid)?;
            *gate = new;
            if cow {
                self.ablation.at_swap(new);
            }
            self.appended.store(0, Ordering::Relaxed);
            if let Ok(mut s) = self.signal.lock() {
                s.swaps += 1;
                self.cond.notify_all();
            }
            old
        };
        let swap_us = swap_start.elapsed().as_micros() as u64;
        if cow {
            return self.cow_checkpoint(ck, old, swap_us, start);
        }
        let quiesced = self.ablation.quiesce(&self.shards, closing)?;
        // The plan: finish steps 2 and 3 when the new log has taken `finish_at_percent` of
        // what it may take before the next checkpoint is due, at the rate the archived log
        // filled (from the previous swap to this one), within `max_duration`; corrected while
        // the checkpoint runs by the rate the new log fills at.
        // A quiescing checkpoint (ablation) holds every shard: it must not sleep.
        let pacing = if quiesced.is_empty() {
            self.pacing
                .lock()
                .map(|p| *p)
                .unwrap_or_else(|_| Pacing::off())
        } else {
            Pacing::off()
        };
        let swapped = Instant::now();
        let archived_bytes = self.logs[old].stats().used_bytes;
        let previous = ck.last_swap.replace(swapped);
        let share = pacing.finish_at_percent as f64 / 100.0;
        let mut plan = pacing.max_duration;
        if let Some(prev) = previous {
            let took = swapped.duration_since(prev).as_secs_f64();
            if archived_bytes > 0 && took > 0.0 {
                let fill = archived_bytes as f64 / took;
                let to_threshold = Duration::from_secs_f64(self.threshold as f64 / fill);
                plan = plan.min(to_threshold.mul_f64(share));
            }
        }
        let end = swapped + plan;
        let threshold = self.threshold;
        let appended = &self.appended;
        let end_by = move || -> Option<Instant> {
            let elapsed = swapped.elapsed();
            let used = appended.load(Ordering::Relaxed);
            if elapsed < Duration::from_millis(50) || used == 0 {
                return None;
            }
            let fill = used as f64 / elapsed.as_secs_f64();
            let to_threshold =
                elapsed + Duration::from_secs_f64(threshold.saturating_sub(used) as f64 / fill);
            Some(swapped + to_threshold.mul_f64(share))
        };
        let slept_us = AtomicU64::new(0);
        let cut = AtomicBool::new(false);
        // The replay threads' CPU time; the write-out runs on this thread, counted as a whole.
        let replay_cpu_ns = AtomicU64::new(0);
        let write_cpu_ns = AtomicU64::new(0);
        let pacer = |start: Instant, deadline: Instant, total: u64, cpu_ns| Pacer {
            signal: &self.signal,
            start,
            deadline,
            end_by: &end_by,
            total,
            floor: pacing.floor_bytes_per_sec,
            burst: pacing.burst_bytes,
            slept_us: &slept_us,
            cut: &cut,
            cpu_ns,
        };
        // 2. Replay the archived log onto the mirror. Paced, on one thread: the plan leaves
        // time enough for one, and one never takes every CPU of a small machine at once (each
        // of several threads walks the whole log and wakes on its own schedule).
        let replay_part = replay_share(ck.last_cost, archived_bytes);
        let replay_end = swapped + plan.mul_f64(replay_part);
        let replay_pacer = pacer(swapped, replay_end, archived_bytes, &replay_cpu_ns);
        let records = replay(
            &self.machine,
            &self.logs[old],
            &mut ck.mirror,
            if pacing.enabled {
                1
            } else {
                self.opts.replay_threads
            },
            pacing.enabled.then_some(&replay_pacer),
        )?;
        // 3. Write the changed lines into the other slot.
        let target = if ck.root.slot == SLOT_NONE {
            0
        } else {
            1 - ck.root.slot as usize
        };
        // Writes in flight at the swap can still have grown the image past the slot. Written
        // in part, it would be an image the loader refuses; stop here instead (the next open
        // leaves it unfinished, see `open`), before the mirror's record of changes is taken.
        let pages = image_pages(&ck.mirror);
        if !self.slots_grow && pages > ck.geo[target].capacity {
            return Err(DipperError::OutOfSpace(format!(
                "the checkpoint image ({pages} pages) has outgrown shadow slot {target} ({} \
                 pages); the operation logs keep every acknowledged write",
                ck.geo[target].capacity
            )));
        }
        let changed: Vec<Vec<(usize, u64)>> =
            ck.mirror.iter_mut().map(Arena::take_dirty_lines).collect();
        let reset = ck.mirror.iter_mut().fold(false, |r, a| a.take_reset() | r);
        let replay_us = swapped.elapsed().as_micros() as u64;
        let write_start = Instant::now();
        let write_cpu_start = thread_cpu_ns();
        let estimate: u64 = changed
            .iter()
            .flatten()
            .map(|&(_, m)| m.count_ones() as u64 * crate::arena::DIRTY_LINE as u64)
            .sum();
        let write_pacer = pacer(write_start, end.max(write_start), estimate, &write_cpu_ns);
        let mut tick = write_pacer.tick();
        let mut pace = |n: u64| {
            if pacing.enabled {
                tick.add(n)
            }
        };
        let (write_us, root_us, write_cpu);
        let w = if self.slots_grow {
            let number = ck.root.checkpoint + 1;
            let r = self.write_format2(ck, target, pages, &changed, reset, &mut pace);
            if r.is_err() {
                // What the frames hold is no longer known: the next image is written whole.
                ck.frames.distrust();
            }
            let w = r?;
            write_us = write_start.elapsed().as_micros() as u64;
            write_cpu = thread_cpu_ns().saturating_sub(write_cpu_start);
            // 4. Switch the root.
            let root_start = Instant::now();
            ck.root.slot = target as u32;
            ck.root.checkpoint = number;
            ck.root.state = STATE_IDLE;
            ck.root.store(&self.medium, self.root_base, &self.uuid)?;
            ck.frames.commit(w.1);
            root_us = root_start.elapsed().as_micros() as u64;
            w.0
        } else {
            for (s, lines) in changed.iter().enumerate() {
                merge_lines(&mut ck.dirty_since[0][s], lines);
                merge_lines(&mut ck.dirty_since[1][s], lines);
            }
            if reset {
                // An emptied arena: each slot's copy of it is stale beyond what was written
                // since, so each slot is next written whole (no map: every page, a new map).
                ck.maps = [None, None];
            }
            let lines: Option<Vec<Vec<(usize, u64)>>> = ck.maps[target].as_ref().map(|_| {
                ck.dirty_since[target]
                    .iter()
                    .map(|m| masks_to_lines(m))
                    .collect()
            });
            let mut map = ck.maps[target]
                .take()
                .unwrap_or_else(|| SlotMap::empty(ck.mirror.len()));
            let number = ck.root.checkpoint + 1;
            let w = slot::write_paced(
                &self.medium,
                &self.uuid,
                &ck.geo[target],
                number,
                &ck.mirror,
                lines.as_deref(),
                &mut map,
                &mut pace,
            )?;
            ck.maps[target] = Some(map);
            for b in &mut ck.dirty_since[target] {
                b.clear();
            }
            write_us = write_start.elapsed().as_micros() as u64;
            write_cpu = thread_cpu_ns().saturating_sub(write_cpu_start);
            // 4. Switch the root.
            let root_start = Instant::now();
            ck.root.slot = target as u32;
            ck.root.checkpoint = number;
            ck.root.state = STATE_IDLE;
            ck.root.store(&self.medium, self.root_base, &self.uuid)?;
            root_us = root_start.elapsed().as_micros() as u64;
            w
        };
        // 5. Empty the archived log.
        let empty_start = Instant::now();
        self.logs[old].cleanup_all()?;
        let empty_us = empty_start.elapsed().as_micros() as u64;
        let cpu_ns =
            thread_cpu_ns().saturating_sub(cpu_start) + replay_cpu_ns.load(Ordering::Relaxed);
        if pacing.enabled && !cut.load(Ordering::Relaxed) {
            ck.last_cost = Some(PhaseCost {
                replay_cpu_ns: replay_cpu_ns.load(Ordering::Relaxed),
                archived_bytes,
                write_cpu_ns: write_cpu,
            });
        }
        let write_span = end.saturating_duration_since(write_start).as_secs_f64();
        Ok(CheckpointStats {
            number: ck.root.checkpoint,
            records,
            pages: w.pages,
            bytes: w.bytes,
            swap_us,
            total_ms: start.elapsed().as_millis() as u64,
            planned_ms: if pacing.enabled {
                plan.as_millis() as u64
            } else {
                0
            },
            paced_ms: slept_us.load(Ordering::Relaxed) / 1000,
            pacing_rate: if pacing.enabled && write_span > 0.0 {
                ((estimate as f64 / write_span) as u64).max(pacing.floor_bytes_per_sec)
            } else {
                0
            },
            pacing_cut: cut.load(Ordering::Relaxed),
            started_unix_ms,
            replay_us,
            write_us,
            root_us,
            empty_us,
            cpu_us: cpu_ns / 1000,
            replay_cpu_us: replay_cpu_ns.load(Ordering::Relaxed) / 1000,
            write_cpu_us: write_cpu / 1000,
        })
    }

    /// Step 3 of a checkpoint in format 2 (slots that grow): the changed lines of the replayed
    /// pages into their spare frames, or whole pages into free frames (a frame region added if
    /// too few are free), and the whole table into the target slot (its region replaced if too
    /// small). Returns what was written and what to commit once the root points at it.
    fn write_format2(
        &self,
        ck: &mut Checkpointer,
        target: usize,
        pages: u64,
        changed: &[Vec<(usize, u64)>],
        reset: bool,
        pace: &mut dyn FnMut(u64),
    ) -> Result<(SlotWrite, frames::Pending)> {
        if reset {
            // An emptied arena: pages it lost and grew again are zeros it never wrote; the
            // image is written whole.
            ck.frames.distrust();
        }
        let changed_pages: Vec<Vec<usize>> = changed
            .iter()
            .map(|c| c.iter().map(|&(p, _)| p).collect())
            .collect();
        let (need, entries) = ck.frames.needs(&ck.mirror, &changed_pages);
        {
            let mut pool = self.pool.lock().map_err(|_| poisoned())?;
            let pool = pool.as_mut().ok_or(DipperError::Closed)?;
            prepare_format2(
                pool,
                &mut ck.tables,
                &mut ck.frames,
                target,
                entries.max(pages),
                need,
            )?;
        }
        self.slot_capacity.store(
            ck.tables[0].capacity.min(ck.tables[1].capacity) * PAGE as u64,
            Ordering::Relaxed,
        );
        let number = ck.root.checkpoint + 1;
        let (w, pending) = ck.frames.write_paced(
            &self.medium,
            &self.uuid,
            &ck.tables[target],
            number,
            &ck.mirror,
            changed,
            pace,
        )?;
        Ok((
            SlotWrite {
                pages: w.pages,
                bytes: w.bytes,
                used: 0,
            },
            pending,
        ))
    }

    fn stats(&self) -> Stats {
        let (checkpoints, running, last, swaps) = self
            .signal
            .lock()
            .map(|s| (s.completed, s.running, s.last, s.swaps))
            .unwrap_or_default();
        let active = self.gate.read().map(|g| *g).unwrap_or(0);
        let ls = self.logs[active].stats();
        let live = self
            .shards
            .iter()
            .filter_map(|s| s.try_read().ok().map(|a| a.live_bytes()))
            .sum();
        let image = self
            .ckpt
            .try_lock()
            .map(|c| c.root.checkpoint)
            .unwrap_or(last.number);
        Stats {
            shards: self.shards.len(),
            checkpoints,
            checkpoint_running: running,
            log_swaps: swaps,
            last_checkpoint: last,
            pacing: self
                .pacing
                .lock()
                .map(|p| *p)
                .unwrap_or_else(|_| Pacing::off()),
            image,
            operations: self.operations.load(Ordering::Relaxed),
            log_ring_bytes: ls.ring_bytes,
            log_used_bytes: ls.used_bytes,
            log_durable_lsn: ls.durable_lsn,
            log_next_lsn: ls.next_lsn,
            arena_bytes: self.arena_bytes.load(Ordering::Relaxed),
            live_bytes: live,
            slot_capacity_bytes: self.slot_capacity.load(Ordering::Relaxed),
            slots_grow: self.slots_grow,
            memory_max_bytes: self.memory_max.load(Ordering::Relaxed),
            log_full_waits: self.full_waits.load(Ordering::Relaxed),
            log_full_wait_us: self.full_wait_us.load(Ordering::Relaxed),
            failed: self.failure(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replay_share_follows_what_each_phase_cost_last_time() {
        let fixed = REPLAY_SHARE_PERCENT as f64 / 100.0;
        assert_eq!(replay_share(None, 100), fixed);
        let cost = |replay_cpu_ns, archived_bytes, write_cpu_ns| {
            Some(PhaseCost {
                replay_cpu_ns,
                archived_bytes,
                write_cpu_ns,
            })
        };
        // Nothing measured (no per-thread CPU accounting, or an empty log): the fixed share.
        assert_eq!(replay_share(cost(0, 1000, 50), 1000), fixed);
        assert_eq!(replay_share(cost(300, 0, 50), 1000), fixed);
        // Replay 300, write-out 100 over the same log: 3/4 of the time to the replay.
        assert!((replay_share(cost(300, 1000, 100), 1000) - 0.75).abs() < 1e-9);
        // Twice the log to replay now: 600 against 100.
        assert!((replay_share(cost(300, 1000, 100), 2000) - 6.0 / 7.0).abs() < 1e-9);
        // Half the log: 150 against 100.
        assert!((replay_share(cost(300, 1000, 100), 500) - 0.6).abs() < 1e-9);
        // Bounded both ways.
        let max = REPLAY_SHARE_MAX_PERCENT as f64 / 100.0;
        let min = REPLAY_SHARE_MIN_PERCENT as f64 / 100.0;
        assert_eq!(replay_share(cost(1000, 1000, 1), 1000), max);
        assert_eq!(replay_share(cost(300, 1000, 0), 1000), max);
        assert_eq!(replay_share(cost(1, 1000, 1000), 1000), min);
        assert_eq!(replay_share(cost(300, 1000, 100), 0), min);
    }

    #[test]
    fn record_heads_are_the_encoded_records_start() {
        let many: Vec<u16> = (0..40).collect();
        for shards in [
            None,
            Some(&[3u16][..]),
            Some(&many[..HEAD_IDS_INLINE]),
            Some(&many[..HEAD_IDS_INLINE + 1]),
            Some(&many[..]),
        ] {
            let whole = encode_record(shards, b"the op");
            let head = RecordHead::new(shards);
            assert_eq!(head.bytes(), &whole[..whole.len() - 6], "{shards:?}");
            let (ids, op) = decode_record(&whole, 64, 1).unwrap();
            assert_eq!(ids.map(ShardIds::to_vec).as_deref(), shards);
            assert_eq!(op, b"the op");
        }
    }

    #[test]
    fn op_records_round_trip_and_bad_ones_are_named() {
        let p = encode_record(Some(&[1, 5]), b"op");
        let (ids, op) = decode_record(&p, 8, 3).unwrap();
        assert_eq!(ids.map(ShardIds::to_vec), Some(vec![1, 5]));
        assert_eq!(op, b"op");
        let p = encode_record(None, b"x");
        assert_eq!(decode_record(&p, 8, 3).unwrap(), (None, &b"x"[..]));
        for (bytes, field) in [
            (vec![1u8], "length"),
            (vec![0, 0], "shard count"),
            (vec![9, 0, 0, 0], "shard count"),
            (vec![1, 0, 8, 0], "shard id"),
            (vec![2, 0, 3, 0, 3, 0], "shard id"),
        ] {
            match decode_record(&bytes, 8, 7) {
                Err(DipperError::Corrupt {
                    field: f,
                    offset: 7,
                    ..
                }) => assert_eq!(f, field),
                other => panic!("{bytes:?}: {other:?}"),
            }
        }
    }
}
