//! The untyped heap: allocator, lanes, undo-logged transactions and recovery.
//!
//! Offsets are relative to the heap region; `base` turns them into medium offsets.
//!
//! A transaction runs on a lane (one per concurrent transaction). Its persistence protocol
//! (`docs/format/undo-log.md`):
//!
//! 1. `add_range`: append `{seq, offset, len, crc}` and the old bytes to the lane's undo area,
//!    flush, fence. Only then may the caller store into the range.
//! 2. `alloc` / `free`: append a bit entry (`{word, mask, OR or ANDNOT}` for a run block) or a
//!    snapshot of the chunk-table word (a large block) and flush it; no fence of its own: the
//!    next snapshot's fence, or the commit, orders it before the change it describes.
//! 3. `commit`: fence if an entry is still unfenced; apply the allocator changes in place
//!    (bitmap bits under the chunk's lock, chunk words), flush them, every added range and
//!    every block allocated in the transaction; fence (F1).
//! 4. Store the lane state word `seq << 1` and persist it (F2). This is the commit point: the
//!    undo entries of `seq` are dead from here on.
//!
//! Recovery, per lane: roll back every valid undo entry of `seq + 1` in reverse order (a
//! snapshot restores its bytes, a bit entry applies its inverse to its own bits only, which no
//! other transaction can own at the same time) and retire them by storing `(seq + 1) << 1`.
//! Three fences for an overwrite (snapshot, F1, F2), and three for an allocation linked into
//! an existing object.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::lock_api::ArcMutexGuard;
use parking_lot::{Condvar, Mutex, RawMutex, RwLock};
use pmem::Medium;

use crate::error::{HeapError, Result};
use crate::layout::*;

/// A lane held by one transaction (or one thread between transactions, in the C API).
pub type LaneGuard = ArcMutexGuard<RawMutex, Lane>;

/// Options for formatting a heap.
#[derive(Debug, Clone, Copy)]
pub struct HeapOptions {
    /// Lanes: the most transactions that run at once.
    pub lanes: u32,
    /// Bytes per lane (state line, redo and undo areas).
    pub lane_bytes: u32,
    /// Bytes of each lane's redo area, reserved for redo-mode (DNV) transactions; undo mode
    /// does not use it.
    pub redo_bytes: u32,
}

impl Default for HeapOptions {
    fn default() -> Self {
        HeapOptions {
            lanes: DEFAULT_LANES,
            lane_bytes: DEFAULT_LANE_BYTES,
            redo_bytes: DEFAULT_REDO_BYTES,
        }
    }
}

impl HeapOptions {
    /// Small lanes for tests on the simulator.
    pub fn small() -> Self {
        HeapOptions {
            lanes: 4,
            lane_bytes: 32 * 1024,
            redo_bytes: 4096,
        }
    }
}

/// A block as the allocator sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Small {
        off: u64,
        chunk: u32,
        bit: u32,
        size: u32,
    },
    Large {
        off: u64,
        chunk: u32,
        span: u32,
    },
}

impl Block {
    fn off(&self) -> u64 {
        match *self {
            Block::Small { off, .. } | Block::Large { off, .. } => off,
        }
    }

    fn len(&self) -> u64 {
        match *self {
            Block::Small { size, .. } => u64::from(size),
            Block::Large { span, .. } => u64::from(span) * CHUNK_SIZE,
        }
    }
}

/// A sorted set of disjoint byte ranges `[start, end)`.
#[derive(Debug, Default)]
struct RangeSet(Vec<(u64, u64)>);

impl RangeSet {
    fn covers(&self, start: u64, end: u64) -> bool {
        let i = self.0.partition_point(|r| r.0 <= start);
        i > 0 && self.0[i - 1].1 >= end
    }

    fn insert(&mut self, mut start: u64, mut end: u64) {
        let mut i = self.0.partition_point(|r| r.1 < start);
        while i < self.0.len() && self.0[i].0 <= end {
            start = start.min(self.0[i].0);
            end = end.max(self.0[i].1);
            self.0.remove(i);
        }
        i = self.0.partition_point(|r| r.0 < start);
        self.0.insert(i, (start, end));
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

/// How a transaction makes its changes atomic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TxMode {
    /// Old bytes go to the lane's undo log in PM before each change (libpmemobj's way).
    #[default]
    Undo,
    /// New bytes go to a redo log in DRAM; commit applies them in place.
    Redo,
}

/// Volatile state of one lane.
#[derive(Debug)]
pub struct Lane {
    idx: usize,
    /// Last retired transaction number (the state word without its flag).
    seq: u64,
    depth: u32,
    aborted: Option<String>,
    undo_tail: u64,
    /// (offset, len, position of the entry in the undo area) per snapshot, in order.
    snapshots: Vec<(u64, u64, u64)>,
    ranges: RangeSet,
    /// Blocks allocated in this transaction: their ranges need no snapshot, only a flush.
    allocs: Vec<Block>,
    frees: Vec<Block>,
    cache: Vec<Vec<u64>>,
    scratch: Vec<u8>,
    /// An undo entry was flushed but no fence has ordered it yet.
    unfenced: bool,
    /// Blocks reserved and given back within the transaction, released when it ends.
    deferred: Vec<Block>,
}

impl Lane {
    /// Is a transaction open on this lane?
    pub fn in_tx(&self) -> bool {
        self.depth > 0
    }
    /// Nesting depth (0 outside a transaction).
    pub fn depth(&self) -> u32 {
        self.depth
    }
    /// The lane's index.
    pub fn index(&self) -> usize {
        self.idx
    }
    /// Why the open transaction was marked aborted, if it was.
    pub fn abort_reason(&self) -> Option<&str> {
        self.aborted.as_deref()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Free,
    Run(usize),
    Large(u32),
    Cont,
}

/// Volatile state of one chunk.
#[derive(Debug)]
struct Shadow {
    kind: Kind,
    /// Mirror of the persistent bitmap (runs), set after a commit retires.
    allocated: Vec<u64>,
    /// Free blocks not handed to any lane cache.
    available: Vec<u64>,
    /// Blocks freed by a transaction not yet retired.
    pending_free: Vec<u64>,
    /// Large head only: a free is pending.
    large_pending: bool,
}

impl Shadow {
    fn new(kind: Kind) -> Self {
        Shadow {
            kind,
            allocated: Vec::new(),
            available: Vec::new(),
            pending_free: Vec::new(),
            large_pending: false,
        }
    }
}

fn bit(v: &[u64], i: u32) -> bool {
    v[(i / 64) as usize] >> (i % 64) & 1 == 1
}
fn set_bit(v: &mut [u64], i: u32, on: bool) {
    let w = &mut v[(i / 64) as usize];
    if on {
        *w |= 1 << (i % 64);
    } else {
        *w &= !(1 << (i % 64));
    }
}

#[derive(Debug, Default)]
struct Global {
    free_chunks: BTreeSet<u32>,
    /// Per class, chunks that may have available blocks (stale entries are skipped).
    partial: Vec<Vec<u32>>,
}

/// Counters since open.
#[derive(Debug, Default)]
pub struct Counters {
    /// Transactions committed (with at least one change).
    pub commits: AtomicU64,
    /// Transactions aborted.
    pub aborts: AtomicU64,
    /// Blocks allocated by committed transactions.
    pub allocs: AtomicU64,
    /// Blocks freed by committed transactions.
    pub frees: AtomicU64,
    /// Fences issued by transactions.
    pub fences: AtomicU64,
}

/// One range a commit changed, for redundancy maintenance.
#[derive(Debug, Clone, Copy)]
pub struct Change<'a> {
    /// Offset of the range in the medium (not the region).
    pub medium_offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// The bytes before the transaction (from the undo log), or `None` for a block allocated
    /// in the transaction (its old contents were free space).
    pub old: Option<&'a [u8]>,
}

/// Told of every commit's changed ranges after the commit point (for `eager` redundancy:
/// the undo log already holds the old bytes, so the diff costs no extra read of the medium).
pub trait CommitObserver: Send + Sync {
    /// The ranges of one committed transaction.
    fn committed(&self, changes: &[Change<'_>]) -> Result<()>;
}

/// What recovery did at open.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RecoveryReport {
    /// Lanes whose interrupted transaction was rolled back.
    pub rolled_back: usize,
    /// Undo entries applied.
    pub undo_entries: usize,
}

#[derive(Debug)]
struct LockState {
    writer: Option<std::thread::ThreadId>,
    readers: u32,
}

#[derive(Debug)]
struct LockCell {
    st: Mutex<LockState>,
    cv: Condvar,
}

/// The untyped heap.
pub struct RawHeap {
    medium: Arc<dyn Medium>,
    base: u64,
    geo: Geometry,
    uuid: [u8; 16],
    shadows: Vec<Mutex<Shadow>>,
    global: Mutex<Global>,
    lanes: Vec<Arc<Mutex<Lane>>>,
    locks: Mutex<HashMap<u64, Arc<LockCell>>>,
    root: Mutex<()>,
    observer: RwLock<Option<Arc<dyn CommitObserver>>>,
    counters: Counters,
    recovery: RecoveryReport,
}

impl std::fmt::Debug for RawHeap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawHeap")
            .field("base", &self.base)
            .field("geometry", &self.geo)
            .finish_non_exhaustive()
    }
}

const CACHE_MAX: usize = 128;

fn refill_batch(class: usize) -> usize {
    (8192 / CLASS_SIZES[class] as usize).clamp(2, 64)
}

thread_local! {
    static LANE_HINT: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

impl RawHeap {
    /// Write an empty heap into `[base, base + len)` of `medium` and persist it.
    pub fn format(
        medium: &dyn Medium,
        base: u64,
        len: u64,
        uuid: [u8; 16],
        opts: &HeapOptions,
    ) -> Result<Geometry> {
        let geo = Geometry::plan(len, opts.lanes, opts.lane_bytes, opts.redo_bytes)?;
        if base + len > medium.len() as u64 || base % 4096 != 0 {
            return Err(HeapError::invalid(
                "heap region",
                format!(
                    "[{base:#x}, +{len:#x}) is not a page-aligned range of the {}-byte medium",
                    medium.len()
                ),
            ));
        }
        // First the old headers go, durably: a heap formatted in place over an older one would
        // otherwise, after a crash in the middle, open as that heap over a half-zeroed chunk
        // table (damage where there was a whole heap or none). Then zero the header area, lanes
        // and chunk table; the zone needs nothing (a zero chunk word means free).
        for copy in [HEADER_COPY_0, HEADER_COPY_1] {
            medium.write((base + copy) as usize, &[0u8; 64]);
            medium.flush((base + copy) as usize, 64)?;
        }
        medium.fence()?;
        let zero = vec![0u8; 1 << 16];
        let mut off = 0;
        while off < geo.zone_off {
            let n = (geo.zone_off - off).min(zero.len() as u64);
            medium.write((base + off) as usize, &zero[..n as usize]);
            off += n;
        }
        medium.flush(base as usize, geo.zone_off as usize)?;
        medium.fence()?;
        let h = Header { uuid, geo }.encode();
        medium.write((base + HEADER_COPY_0) as usize, &h);
        medium.write((base + HEADER_COPY_1) as usize, &h);
        medium.persist(base as usize, HEADER_AREA as usize)?;
        Ok(geo)
    }

    /// Open the heap in `[base, base + len)`: validate the header, recover every lane, and
    /// rebuild the allocator's volatile state.
    pub fn open(medium: Arc<dyn Medium>, base: u64, len: u64) -> Result<RawHeap> {
        if base + len > medium.len() as u64 || base % 4096 != 0 {
            return Err(HeapError::invalid(
                "heap region",
                format!(
                    "[{base:#x}, +{len:#x}) is not a page-aligned range of the {}-byte medium",
                    medium.len()
                ),
            ));
        }
        let header = read_header(&*medium, base, len)?;
        let geo = header.geo;
        let mut heap = RawHeap {
            medium,
            base,
            geo,
            uuid: header.uuid,
            shadows: Vec::new(),
            global: Mutex::new(Global::default()),
            lanes: Vec::new(),
            locks: Mutex::new(HashMap::new()),
            root: Mutex::new(()),
            observer: RwLock::new(None),
            counters: Counters::default(),
            recovery: RecoveryReport::default(),
        };
        let mut seqs = Vec::new();
        for i in 0..geo.lane_count as usize {
            seqs.push(heap.recover_lane(i)?);
        }
        heap.rebuild()?;
        heap.lanes = seqs
            .into_iter()
            .enumerate()
            .map(|(idx, seq)| {
                Arc::new(Mutex::new(Lane {
                    idx,
                    seq,
                    depth: 0,
                    aborted: None,
                    undo_tail: 0,
                    snapshots: Vec::new(),
                    ranges: RangeSet::default(),
                    allocs: Vec::new(),
                    frees: Vec::new(),
                    cache: vec![Vec::new(); CLASS_SIZES.len()],
                    scratch: Vec::new(),
                    unfenced: false,
                    deferred: Vec::new(),
                }))
            })
            .collect();
        Ok(heap)
    }

    /// The geometry.
    pub fn geometry(&self) -> Geometry {
        self.geo
    }
    /// Medium offset of the region.
    pub fn base(&self) -> u64 {
        self.base
    }
    /// The medium.
    pub fn medium(&self) -> &Arc<dyn Medium> {
        &self.medium
    }
    /// The pool UUID recorded in the header.
    pub fn uuid(&self) -> [u8; 16] {
        self.uuid
    }
    /// The id persistent pointers carry.
    pub fn pool_id(&self) -> u64 {
        pool_id(&self.uuid)
    }
    /// What recovery did at open.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }
    /// Counters since open.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
    /// Install (or remove) the commit observer.
    pub fn set_observer(&self, observer: Option<Arc<dyn CommitObserver>>) {
        *self.observer.write() = observer;
    }

    fn m(&self, off: u64) -> usize {
        (self.base + off) as usize
    }

    fn fence(&self) -> Result<()> {
        self.counters.fences.fetch_add(1, Ordering::Relaxed);
        self.medium.fence()?;
        Ok(())
    }

    /// Check that `[off, off + len)` lies in the data zone.
    pub fn check_range(&self, off: u64, len: u64) -> Result<()> {
        let (s, e) = (self.geo.zone_off, self.geo.zone_end());
        if off < s || off.checked_add(len).is_none_or(|end| end > e) {
            return Err(HeapError::BadPointer {
                offset: off,
                len,
                zone_start: s,
                zone_end: e,
            });
        }
        Ok(())
    }

    /// Read `buf.len()` bytes at region offset `off` (checked against the zone).
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        self.check_range(off, buf.len() as u64)?;
        self.medium.read(self.m(off), buf);
        Ok(())
    }

    // ---------------------------------------------------------------- recovery

    fn recover_lane(&mut self, i: usize) -> Result<u64> {
        let g = self.geo;
        let at = g.lane(i);
        let state = self.medium.load_u64(self.m(at));
        if state & 1 == 1 {
            return Err(HeapError::corrupt(
                format!("lane {i} state word"),
                self.base + at,
                "flags",
                "bit 0 clear (reserved)",
                format!("{state:#018x}"),
            ));
        }
        let mut seq = state >> 1;
        let entries = scan_undo(&*self.medium, self.base, &g, i, seq + 1);
        if !entries.is_empty() {
            for e in entries.iter().rev() {
                self.check_undo_target(i, e)?;
                self.undo_one(e)?;
            }
            self.medium.fence()?;
            seq += 1;
            self.medium.store_u64(self.m(at), seq << 1);
            self.medium.persist(self.m(at), 8)?;
            self.recovery.rolled_back += 1;
            self.recovery.undo_entries += entries.len();
        }
        Ok(seq)
    }

    /// Undo one entry: restore a snapshot, or apply a bit entry's inverse to its own bits.
    fn undo_one(&self, e: &UndoEntry) -> Result<()> {
        match e.kind {
            UndoKind::Snapshot => {
                let mut buf = vec![0u8; e.len as usize];
                self.medium.read(self.m(e.data_at), &mut buf);
                self.medium.write(self.m(e.offset), &buf);
                self.medium.flush(self.m(e.offset), e.len as usize)?;
            }
            UndoKind::BitOr | UndoKind::BitAndNot => {
                let mask = self.medium.load_u64(self.m(e.data_at));
                let at = self.m(e.offset);
                let old = self.medium.load_u64(at);
                let new = if e.kind == UndoKind::BitOr {
                    old & !mask
                } else {
                    old | mask
                };
                if new != old {
                    self.medium.store_u64(at, new);
                }
                self.medium.flush(at, 8)?;
            }
        }
        Ok(())
    }

    fn check_undo_target(&self, lane: usize, e: &UndoEntry) -> Result<()> {
        let g = self.geo;
        let (off, len) = (e.offset, e.len);
        let ok = match e.kind {
            UndoKind::Snapshot => {
                let root = off >= ROOT_LINE && off + len <= ROOT_LINE + 16;
                let table = off >= g.chunk_table_off
                    && off + len <= g.chunk_table_off + g.chunk_count * 8
                    && off % 8 == 0
                    && len == 8;
                root || table || self.check_range(off, len).is_ok()
            }
            UndoKind::BitOr | UndoKind::BitAndNot => {
                off % 8 == 0
                    && off >= g.zone_off
                    && off < g.zone_end()
                    && (off - g.zone_off) % CHUNK_SIZE < RUN_BITMAP_BYTES
            }
        };
        if ok {
            return Ok(());
        }
        Err(HeapError::corrupt(
            format!("lane {lane} undo entry"),
            self.base + e.data_at - UNDO_HEADER_BYTES,
            "offset",
            "a range inside the data zone, the root line, a chunk-table word or a run bitmap word",
            format!("{:?} at {off:#x} + {len}", e.kind),
        ))
    }

    fn rebuild(&mut self) -> Result<()> {
        let g = self.geo;
        let mut shadows = Vec::with_capacity(g.chunk_count as usize);
        let mut global = Global {
            partial: vec![Vec::new(); CLASS_SIZES.len()],
            ..Global::default()
        };
        let mut i = 0u64;
        while i < g.chunk_count {
            let at = g.chunk_word(i);
            let word = ChunkWord::decode(
                self.medium.load_u64(self.m(at)),
                i,
                g.chunk_count,
                self.base + at,
            )?;
            match word {
                ChunkWord::Free => {
                    global.free_chunks.insert(i as u32);
                    shadows.push(Mutex::new(Shadow::new(Kind::Free)));
                }
                ChunkWord::Run(class) => {
                    let allocated = self.read_bitmap(i, class)?;
                    if allocated.iter().all(|w| *w == 0) {
                        // An empty run goes back to the free chunks (in DRAM only: the word
                        // is rewritten when the chunk is next used).
                        global.free_chunks.insert(i as u32);
                        shadows.push(Mutex::new(Shadow::new(Kind::Free)));
                    } else {
                        let mut sh = Shadow::new(Kind::Run(class));
                        sh.available = free_bits(&allocated, blocks_per_run(class));
                        sh.pending_free = vec![0; allocated.len()];
                        sh.allocated = allocated;
                        if sh.available.iter().any(|w| *w != 0) {
                            global.partial[class].push(i as u32);
                        }
                        shadows.push(Mutex::new(sh));
                    }
                }
                ChunkWord::Large(span) => {
                    shadows.push(Mutex::new(Shadow::new(Kind::Large(span))));
                    for _ in 1..span {
                        shadows.push(Mutex::new(Shadow::new(Kind::Cont)));
                    }
                    i += u64::from(span);
                    continue;
                }
            }
            i += 1;
        }
        self.shadows = shadows;
        self.global = Mutex::new(global);
        Ok(())
    }

    /// Chunk `i`'s bitmap as a run of `class`, checking no bit beyond the run's blocks is set.
    pub(crate) fn read_bitmap(&self, i: u64, class: usize) -> Result<Vec<u64>> {
        let at = self.geo.chunk(i);
        let mut bytes = [0u8; RUN_BITMAP_BYTES as usize];
        self.medium.read(self.m(at), &mut bytes);
        let words: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8")))
            .collect();
        let n = blocks_per_run(class);
        for (k, w) in words.iter().enumerate() {
            if w & !block_mask(k, n) != 0 {
                return Err(HeapError::corrupt(
                    format!("run bitmap of chunk {i} (class {class}, {n} blocks)"),
                    self.base + at + 8 * k as u64,
                    "bits",
                    format!("no bit beyond block {n}"),
                    format!("{w:#018x}"),
                ));
            }
        }
        Ok(words)
    }

    // ---------------------------------------------------------------- lanes

    /// Take a lane for a transaction (blocks if every lane is busy).
    pub fn lane(&self) -> LaneGuard {
        let n = self.lanes.len();
        let hint = LANE_HINT.with(|h| {
            if h.get() == usize::MAX {
                let id = std::thread::current().id();
                let mut x = format!("{id:?}")
                    .bytes()
                    .fold(0usize, |a, b| a.wrapping_mul(31).wrapping_add(b as usize));
                x ^= x >> 7;
                h.set(x);
            }
            h.get()
        });
        // Every lane busy: keep trying them all rather than block on one, which could be a
        // lane this very thread holds (a root made inside a transaction, say).
        for round in 0u32.. {
            for k in 0..n {
                let i = (hint + k) % n;
                if let Some(g) = self.lanes[i].try_lock_arc() {
                    if k != 0 {
                        LANE_HINT.with(|h| h.set(i));
                    }
                    return g;
                }
            }
            if round < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
        unreachable!("the loop above returns")
    }

    /// Begin a transaction in `mode` (a nested level keeps the outer level's mode).
    ///
    /// Redo mode is being built (issue 20); until it lands every mode runs as undo.
    pub fn begin_mode(&self, lane: &mut Lane, mode: TxMode) {
        let _ = mode;
        self.begin(lane)
    }

    /// Read `buf.len()` bytes at `off` as the open transaction sees them (its own writes
    /// included).
    pub fn read_tx(&self, lane: &Lane, off: u64, buf: &mut [u8]) -> Result<()> {
        let _ = lane;
        self.read(off, buf)
    }

    /// Begin a transaction, or a nested level of the open one.
    pub fn begin(&self, lane: &mut Lane) {
        if lane.depth == 0 {
            lane.aborted = None;
        }
        lane.depth += 1;
    }

    fn fail<T>(&self, lane: &mut Lane, e: HeapError) -> Result<T> {
        if lane.aborted.is_none() {
            lane.aborted = Some(e.to_string());
        }
        Err(e)
    }

    fn need_tx(&self, lane: &Lane) -> Result<()> {
        if lane.depth == 0 {
            return Err(HeapError::TxState("this operation needs a transaction"));
        }
        if lane.aborted.is_some() {
            return Err(HeapError::Aborted);
        }
        Ok(())
    }

    /// Snapshot `[off, off + len)` before the caller changes it.
    pub fn add_range(&self, lane: &mut Lane, off: u64, len: u64) -> Result<()> {
        self.need_tx(lane)?;
        if let Err(e) = self.check_range(off, len) {
            return self.fail(lane, e);
        }
        self.snapshot(lane, off, len)
    }

    fn snapshot(&self, lane: &mut Lane, off: u64, len: u64) -> Result<()> {
        if len == 0 || lane.ranges.covers(off, off + len) || in_fresh(lane, off, len) {
            return Ok(());
        }
        let medium = &self.medium;
        let base = self.base;
        let pos = match self.log_entry(lane, off, len as u32, len, |buf| {
            medium.read((base + off) as usize, buf)
        }) {
            Ok(pos) => pos,
            Err(e) => return self.fail(lane, e),
        };
        if let Err(e) = self.fence() {
            return self.fail(lane, e);
        }
        lane.unfenced = false;
        lane.snapshots.push((off, len, pos));
        lane.ranges.insert(off, off + len);
        Ok(())
    }

    /// Append an undo entry of transaction `lane.seq + 1`: the header, then `payload_len`
    /// bytes that `fill` writes; flush it (no fence). Returns its position in the undo area.
    fn log_entry(
        &self,
        lane: &mut Lane,
        off: u64,
        len_field: u32,
        payload_len: u64,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<u64> {
        let entry = UNDO_HEADER_BYTES + payload_len;
        let padded = entry.div_ceil(UNDO_ALIGN) * UNDO_ALIGN;
        if lane.undo_tail + padded > self.geo.undo_bytes() {
            return Err(HeapError::TxTooLarge(format!(
                "the undo log of a lane holds {} bytes; this entry of {entry} bytes needs {} more",
                self.geo.undo_bytes(),
                lane.undo_tail + padded - self.geo.undo_bytes()
            )));
        }
        let seq = lane.seq + 1;
        let mut buf = std::mem::take(&mut lane.scratch);
        buf.clear();
        buf.resize(entry as usize, 0);
        fill(&mut buf[UNDO_HEADER_BYTES as usize..]);
        let mut head = UndoHeader {
            seq,
            offset: off,
            len: len_field,
            crc: 0,
        };
        head.write(&mut buf);
        head.crc = undo_crc(
            &buf[..UNDO_CRC_COVERED_BYTES],
            &buf[UNDO_HEADER_BYTES as usize..],
        );
        head.write(&mut buf);
        let pos = lane.undo_tail;
        let at = self.m(self.geo.undo(lane.idx) + pos);
        self.medium.write(at, &buf);
        lane.scratch = buf;
        self.medium.flush(at, entry as usize)?;
        lane.undo_tail += padded;
        lane.unfenced = true;
        Ok(pos)
    }

    /// Log the allocator change `b` will make at commit (`alloc`: true for an allocation).
    fn log_block(&self, lane: &mut Lane, b: &Block, alloc: bool) -> Result<()> {
        match *b {
            Block::Small { chunk, bit, .. } => {
                let word = self.geo.chunk(u64::from(chunk)) + u64::from(bit / 64) * 8;
                let mask = 1u64 << (bit % 64);
                let tag = if alloc { UNDO_BIT_OR } else { UNDO_BIT_ANDNOT };
                self.log_entry(lane, word, tag, 8, |b| {
                    b.copy_from_slice(&mask.to_le_bytes())
                })?;
            }
            Block::Large { chunk, span, .. } => {
                // The head word, and (for an allocation) any stale word inside the span, such
                // as that of an empty run reclaimed at open.
                let last = if alloc { chunk + span } else { chunk + 1 };
                for c in chunk..last {
                    let at = self.geo.chunk_word(u64::from(c));
                    let old = self.medium.load_u64(self.m(at));
                    if c == chunk || old != 0 {
                        self.log_entry(lane, at, 8, 8, |b| b.copy_from_slice(&old.to_le_bytes()))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Make the allocator changes of the transaction in place and flush them.
    fn apply_blocks(&self, lane: &Lane) -> Result<()> {
        let ops = lane
            .allocs
            .iter()
            .map(|b| (b, true))
            .chain(lane.frees.iter().map(|b| (b, false)));
        for (b, alloc) in ops {
            match *b {
                Block::Small { chunk, bit, .. } => {
                    let at = self.m(self.geo.chunk(u64::from(chunk)) + u64::from(bit / 64) * 8);
                    let mask = 1u64 << (bit % 64);
                    let _sh = self.shadows[chunk as usize].lock();
                    let old = self.medium.load_u64(at);
                    let new = if alloc { old | mask } else { old & !mask };
                    self.medium.store_u64(at, new);
                    self.medium.flush(at, 8)?;
                }
                Block::Large { chunk, span, .. } => {
                    let head = self.m(self.geo.chunk_word(u64::from(chunk)));
                    let v = if alloc {
                        ChunkWord::Large(span).encode(u64::from(chunk))
                    } else {
                        0
                    };
                    self.medium.store_u64(head, v);
                    self.medium.flush(head, 8)?;
                    if alloc {
                        for c in chunk + 1..chunk + span {
                            let at = self.m(self.geo.chunk_word(u64::from(c)));
                            if self.medium.load_u64(at) != 0 {
                                self.medium.store_u64(at, 0);
                                self.medium.flush(at, 8)?;
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Store `data` at `off` after snapshotting it.
    pub fn write(&self, lane: &mut Lane, off: u64, data: &[u8]) -> Result<()> {
        self.add_range(lane, off, data.len() as u64)?;
        self.medium.write(self.m(off), data);
        Ok(())
    }

    /// Allocate `size` bytes in the transaction; returns the block's offset.
    pub fn alloc(&self, lane: &mut Lane, size: u64, zero: bool) -> Result<u64> {
        self.need_tx(lane)?;
        if size == 0 {
            return self.fail(lane, HeapError::invalid("allocation size", "0 bytes"));
        }
        let block = match class_for(size) {
            Some(class) => self.reserve_small(lane, class),
            None => self.reserve_large(size),
        };
        let block = match block {
            Ok(b) => b,
            Err(e) => return self.fail(lane, e),
        };
        if let Err(e) = self.log_block(lane, &block, true) {
            // Some of its entries may be in the log: keep it until the transaction ends.
            lane.deferred.push(block);
            return self.fail(lane, e);
        }
        if zero {
            let len = block.len();
            let zeros = [0u8; 4096];
            let mut o = 0;
            while o < len {
                let n = (len - o).min(4096);
                self.medium
                    .write(self.m(block.off() + o), &zeros[..n as usize]);
                o += n;
            }
        }
        lane.allocs.push(block);
        Ok(block.off())
    }

    fn reserve_small(&self, lane: &mut Lane, class: usize) -> Result<Block> {
        if lane.cache[class].is_empty() {
            self.refill(lane, class)?;
        }
        let off = lane.cache[class].pop().expect("refill leaves a block");
        let chunk = self.geo.chunk_of(off);
        let bit = (off - self.geo.chunk(chunk) - RUN_HEADER) / u64::from(CLASS_SIZES[class]);
        Ok(Block::Small {
            off,
            chunk: chunk as u32,
            bit: bit as u32,
            size: CLASS_SIZES[class],
        })
    }

    fn refill(&self, lane: &mut Lane, class: usize) -> Result<()> {
        let want = refill_batch(class);
        let mut g = self.global.lock();
        loop {
            while let Some(&c) = g.partial[class].last() {
                let mut sh = self.shadows[c as usize].lock();
                let mut got = 0;
                if sh.kind == Kind::Run(class) {
                    let base = self.geo.chunk(u64::from(c)) + RUN_HEADER;
                    let size = u64::from(CLASS_SIZES[class]);
                    for w in 0..sh.available.len() {
                        while sh.available[w] != 0 && got < want {
                            let b = sh.available[w].trailing_zeros();
                            sh.available[w] &= !(1 << b);
                            lane.cache[class].push(base + (w as u64 * 64 + u64::from(b)) * size);
                            got += 1;
                        }
                        if got == want {
                            break;
                        }
                    }
                }
                let empty = sh.kind != Kind::Run(class) || sh.available.iter().all(|w| *w == 0);
                drop(sh);
                if empty {
                    g.partial[class].pop();
                }
                if got > 0 {
                    // Hand out low addresses first.
                    lane.cache[class].reverse();
                    return Ok(());
                }
            }
            let c = *g
                .free_chunks
                .iter()
                .next()
                .ok_or(HeapError::OutOfSpace(u64::from(CLASS_SIZES[class])))?;
            self.make_run(c, class)?;
            g.free_chunks.remove(&c);
            g.partial[class].push(c);
        }
    }

    /// Turn free chunk `c` into an empty run: zero its bitmap, persist, then store its chunk
    /// word (one atomic 8-byte store) and persist. A crash between leaves it free.
    fn make_run(&self, c: u32, class: usize) -> Result<()> {
        let at = self.geo.chunk(u64::from(c));
        self.medium
            .write(self.m(at), &[0u8; RUN_BITMAP_BYTES as usize]);
        self.medium.flush(self.m(at), RUN_BITMAP_BYTES as usize)?;
        self.fence()?;
        let w = self.geo.chunk_word(u64::from(c));
        self.medium
            .store_u64(self.m(w), ChunkWord::Run(class).encode(u64::from(c)));
        self.medium.flush(self.m(w), 8)?;
        self.fence()?;
        let words = (RUN_BITMAP_BYTES / 8) as usize;
        let mut sh = self.shadows[c as usize].lock();
        *sh = Shadow::new(Kind::Run(class));
        sh.allocated = vec![0; words];
        sh.pending_free = vec![0; words];
        sh.available = free_bits(&sh.allocated, blocks_per_run(class));
        Ok(())
    }

    fn reserve_large(&self, size: u64) -> Result<Block> {
        let span = size.div_ceil(CHUNK_SIZE);
        let mut g = self.global.lock();
        // First fit over runs of consecutive free chunks.
        let mut start = None;
        let mut run_start = 0u32;
        let mut run_len = 0u64;
        let mut prev: Option<u32> = None;
        for &c in g.free_chunks.iter() {
            if prev == Some(c.wrapping_sub(1)) {
                run_len += 1;
            } else {
                run_start = c;
                run_len = 1;
            }
            prev = Some(c);
            if run_len == span {
                start = Some(run_start);
                break;
            }
        }
        let start = start.ok_or(HeapError::OutOfSpace(size))?;
        for c in start..start + span as u32 {
            g.free_chunks.remove(&c);
        }
        Ok(Block::Large {
            off: self.geo.chunk(u64::from(start)),
            chunk: start,
            span: span as u32,
        })
    }

    /// Free the block at `off` when the transaction commits.
    pub fn free(&self, lane: &mut Lane, off: u64) -> Result<()> {
        self.need_tx(lane)?;
        if let Some(i) = lane.allocs.iter().position(|b| b.off() == off) {
            // Allocated in this transaction: it goes back when the transaction ends. Not
            // before: its undo entries live until then, and rolling them back must not touch
            // a block another lane took in the meantime.
            let b = lane.allocs.swap_remove(i);
            lane.deferred.push(b);
            return Ok(());
        }
        let b = match self.block_at(off) {
            Ok(b) => b,
            Err(e) => return self.fail(lane, e),
        };
        if let Err(e) = self.log_block(lane, &b, false) {
            self.clear_pending(b);
            return self.fail(lane, e);
        }
        lane.frees.push(b);
        Ok(())
    }

    /// Validate that `off` is an allocated block no transaction is freeing, and mark it.
    fn block_at(&self, off: u64) -> Result<Block> {
        let bad = |reason: &str| HeapError::BadFree {
            offset: off,
            reason: reason.into(),
        };
        if off < self.geo.zone_off || off >= self.geo.zone_end() {
            return Err(bad("not inside the data zone"));
        }
        let chunk = self.geo.chunk_of(off);
        let mut sh = self.shadows[chunk as usize].lock();
        match sh.kind {
            Kind::Run(class) => {
                let rel = off - self.geo.chunk(chunk);
                let size = u64::from(CLASS_SIZES[class]);
                if rel < RUN_HEADER || (rel - RUN_HEADER) % size != 0 {
                    return Err(bad("not the start of a block"));
                }
                let b = ((rel - RUN_HEADER) / size) as u32;
                if u64::from(b) >= blocks_per_run(class) {
                    return Err(bad("past the last block of its run"));
                }
                if !bit(&sh.allocated, b) {
                    return Err(bad("the block is not allocated (double free?)"));
                }
                if bit(&sh.pending_free, b) {
                    return Err(bad("another open transaction frees this block"));
                }
                set_bit(&mut sh.pending_free, b, true);
                Ok(Block::Small {
                    off,
                    chunk: chunk as u32,
                    bit: b,
                    size: size as u32,
                })
            }
            Kind::Large(span) if off == self.geo.chunk(chunk) => {
                if sh.large_pending {
                    return Err(bad("another open transaction frees this block"));
                }
                sh.large_pending = true;
                Ok(Block::Large {
                    off,
                    chunk: chunk as u32,
                    span,
                })
            }
            _ => Err(bad("no allocated block starts here")),
        }
    }

    /// Usable size of the allocated block at `off`, if it is one.
    pub fn usable_size(&self, off: u64) -> Option<u64> {
        if off < self.geo.zone_off || off >= self.geo.zone_end() {
            return None;
        }
        let chunk = self.geo.chunk_of(off);
        let sh = self.shadows[chunk as usize].lock();
        match sh.kind {
            Kind::Run(class) => {
                let rel = off - self.geo.chunk(chunk);
                let size = u64::from(CLASS_SIZES[class]);
                if rel < RUN_HEADER || (rel - RUN_HEADER) % size != 0 {
                    return None;
                }
                let b = ((rel - RUN_HEADER) / size) as u32;
                (u64::from(b) < blocks_per_run(class) && bit(&sh.allocated, b)).then_some(size)
            }
            Kind::Large(span) if off == self.geo.chunk(chunk) => Some(u64::from(span) * CHUNK_SIZE),
            _ => None,
        }
    }

    fn unreserve(&self, lane: &mut Lane, b: Block) {
        match b {
            Block::Small {
                off, chunk, size, ..
            } => {
                let class = class_for(u64::from(size)).expect("a run block");
                self.release_small(lane, class, off, chunk);
            }
            Block::Large { chunk, span, .. } => {
                let mut g = self.global.lock();
                for c in chunk..chunk + span {
                    g.free_chunks.insert(c);
                }
            }
        }
    }

    fn release_small(&self, lane: &mut Lane, class: usize, off: u64, chunk: u32) {
        if lane.cache[class].len() < CACHE_MAX {
            lane.cache[class].push(off);
            return;
        }
        let b = ((off - self.geo.chunk(u64::from(chunk)) - RUN_HEADER)
            / u64::from(CLASS_SIZES[class])) as u32;
        let mut g = self.global.lock();
        let mut sh = self.shadows[chunk as usize].lock();
        let was_empty = sh.available.iter().all(|w| *w == 0);
        set_bit(&mut sh.available, b, true);
        if was_empty {
            g.partial[class].push(chunk);
        }
    }

    /// Commit (outermost level) or leave a nested level.
    pub fn commit(&self, lane: &mut Lane) -> Result<()> {
        if lane.depth == 0 {
            return Err(HeapError::TxState("commit without a transaction"));
        }
        if lane.depth > 1 {
            lane.depth -= 1;
            return if lane.aborted.is_some() {
                Err(HeapError::Aborted)
            } else {
                Ok(())
            };
        }
        if lane.aborted.is_some() {
            self.abort(lane)?;
            return Err(HeapError::Aborted);
        }
        match self.commit_outer(lane) {
            Ok(()) => Ok(()),
            Err(e) if e.is_simulated_crash() => Err(e),
            Err(e) => {
                // The commit point was not reached: roll back.
                lane.aborted = Some(e.to_string());
                self.abort(lane)?;
                Err(e)
            }
        }
    }

    fn commit_outer(&self, lane: &mut Lane) -> Result<()> {
        if lane.undo_tail == 0 && lane.allocs.is_empty() && lane.frees.is_empty() {
            self.finish(lane);
            return Ok(());
        }
        let seq = lane.seq + 1;
        if lane.unfenced {
            // Bit entries written since the last snapshot must be durable before the bits.
            self.fence()?;
            lane.unfenced = false;
        }
        self.apply_blocks(lane)?;
        for &(s, e) in &lane.ranges.0 {
            self.medium.flush(self.m(s), (e - s) as usize)?;
        }
        for b in &lane.allocs {
            self.medium.flush(self.m(b.off()), b.len() as usize)?;
        }
        self.fence()?; // F1: data and allocator changes durable.
        let state = self.m(self.geo.lane(lane.idx));
        self.medium.store_u64(state, seq << 1);
        self.medium.flush(state, 8)?;
        self.fence()?; // F2: the commit point.
        lane.seq = seq;
        if let Some(obs) = self.observer.read().clone() {
            self.notify(&*obs, lane)?;
        }
        self.publish(lane);
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        self.finish(lane);
        Ok(())
    }

    fn notify(&self, obs: &dyn CommitObserver, lane: &Lane) -> Result<()> {
        let mut olds = Vec::new();
        for &(off, len, pos) in &lane.snapshots {
            let mut buf = vec![0u8; len as usize];
            let at = self.geo.undo(lane.idx) + pos + UNDO_HEADER_BYTES;
            self.medium.read(self.m(at), &mut buf);
            olds.push((off, buf));
        }
        let mut changes: Vec<Change<'_>> = olds
            .iter()
            .map(|(off, buf)| Change {
                medium_offset: self.base + off,
                len: buf.len() as u64,
                old: Some(buf),
            })
            .collect();
        for b in &lane.allocs {
            changes.push(Change {
                medium_offset: self.base + b.off(),
                len: b.len(),
                old: None,
            });
        }
        obs.committed(&changes)
    }

    /// After F4: the volatile allocator state takes the committed allocations and frees.
    fn publish(&self, lane: &mut Lane) {
        let allocs = std::mem::take(&mut lane.allocs);
        for b in &allocs {
            match *b {
                Block::Small { chunk, bit, .. } => set_bit(
                    &mut self.shadows[chunk as usize].lock().allocated,
                    bit,
                    true,
                ),
                Block::Large { chunk, span, .. } => {
                    *self.shadows[chunk as usize].lock() = Shadow::new(Kind::Large(span));
                    for c in chunk + 1..chunk + span {
                        *self.shadows[c as usize].lock() = Shadow::new(Kind::Cont);
                    }
                }
            }
        }
        self.counters
            .allocs
            .fetch_add(allocs.len() as u64, Ordering::Relaxed);
        let frees = std::mem::take(&mut lane.frees);
        for b in &frees {
            match *b {
                Block::Small {
                    off, chunk, bit, ..
                } => {
                    let class = {
                        let mut sh = self.shadows[chunk as usize].lock();
                        set_bit(&mut sh.allocated, bit, false);
                        set_bit(&mut sh.pending_free, bit, false);
                        match sh.kind {
                            Kind::Run(c) => c,
                            _ => continue,
                        }
                    };
                    self.release_small(lane, class, off, chunk);
                }
                Block::Large { chunk, span, .. } => {
                    for c in chunk..chunk + span {
                        *self.shadows[c as usize].lock() = Shadow::new(Kind::Free);
                    }
                    let mut g = self.global.lock();
                    for c in chunk..chunk + span {
                        g.free_chunks.insert(c);
                    }
                }
            }
        }
        self.counters
            .frees
            .fetch_add(frees.len() as u64, Ordering::Relaxed);
        lane.allocs = allocs;
        lane.allocs.clear();
        lane.frees = frees;
        lane.frees.clear();
    }

    fn clear_pending(&self, b: Block) {
        match b {
            Block::Small { chunk, bit, .. } => set_bit(
                &mut self.shadows[chunk as usize].lock().pending_free,
                bit,
                false,
            ),
            Block::Large { chunk, .. } => self.shadows[chunk as usize].lock().large_pending = false,
        }
    }

    fn finish(&self, lane: &mut Lane) {
        for b in std::mem::take(&mut lane.deferred) {
            self.unreserve(lane, b);
        }
        lane.depth = 0;
        lane.undo_tail = 0;
        lane.snapshots.clear();
        lane.ranges.clear();
        lane.allocs.clear();
        lane.frees.clear();
    }

    /// Abort: roll back every snapshot (outermost level), or mark the transaction aborted so
    /// the outermost commit rolls it back (nested level).
    pub fn abort(&self, lane: &mut Lane) -> Result<()> {
        if lane.depth == 0 {
            return Err(HeapError::TxState("abort without a transaction"));
        }
        if lane.aborted.is_none() {
            lane.aborted = Some("aborted by the caller".into());
        }
        if lane.depth > 1 {
            lane.depth -= 1;
            return Ok(());
        }
        // Whatever the medium says, the lane leaves the transaction: a failed rollback is
        // finished by recovery at the next open.
        let rolled = if lane.undo_tail > 0 {
            self.roll_back(lane)
        } else {
            Ok(())
        };
        for b in std::mem::take(&mut lane.allocs) {
            self.unreserve(lane, b);
        }
        for b in std::mem::take(&mut lane.frees) {
            self.clear_pending(b);
        }
        self.counters.aborts.fetch_add(1, Ordering::Relaxed);
        self.finish(lane);
        rolled
    }

    /// Undo what the log of the open transaction records, from the log itself (so an
    /// allocator change a failed commit already made in place is undone too), then retire it.
    fn roll_back(&self, lane: &mut Lane) -> Result<()> {
        let entries = scan_undo(&*self.medium, self.base, &self.geo, lane.idx, lane.seq + 1);
        for e in entries.iter().rev() {
            self.undo_one(e)?;
        }
        self.fence()?;
        let seq = lane.seq + 1;
        let state = self.m(self.geo.lane(lane.idx));
        self.medium.store_u64(state, seq << 1);
        self.medium.flush(state, 8)?;
        self.fence()?;
        lane.seq = seq;
        lane.unfenced = false;
        Ok(())
    }

    // ---------------------------------------------------------------- root

    /// The root object: `(offset, size)`, allocated zeroed on first use with `size` bytes.
    pub fn root(&self, size: u64) -> Result<(u64, u64)> {
        let _g = self.root.lock();
        let (off, have) = self.root_line();
        if off != 0 {
            if size > have {
                return Err(HeapError::invalid(
                    "root size",
                    format!("the root object has {have} bytes; {size} were asked for"),
                ));
            }
            return Ok((off, have));
        }
        if size == 0 {
            return Err(HeapError::invalid("root size", "0 bytes"));
        }
        let mut lane = self.lane();
        self.begin(&mut lane);
        let r = (|| -> Result<u64> {
            let off = self.alloc(&mut lane, size, true)?;
            self.snapshot(&mut lane, ROOT_LINE, 16)?;
            let mut line = [0u8; 16];
            line[..8].copy_from_slice(&off.to_le_bytes());
            line[8..].copy_from_slice(&size.to_le_bytes());
            self.medium.write(self.m(ROOT_LINE), &line);
            Ok(off)
        })();
        match r {
            Ok(off) => {
                self.commit(&mut lane)?;
                Ok((off, size))
            }
            Err(e) => {
                if !e.is_simulated_crash() {
                    self.abort(&mut lane)?;
                }
                Err(e)
            }
        }
    }

    /// The root line as stored: `(offset, size)`, `(0, 0)` if none.
    pub fn root_line(&self) -> (u64, u64) {
        (
            self.medium.load_u64(self.m(ROOT_LINE)),
            self.medium.load_u64(self.m(ROOT_LINE + 8)),
        )
    }

    // ---------------------------------------------------------------- locks

    fn cell(&self, key: u64) -> Arc<LockCell> {
        self.locks
            .lock()
            .entry(key)
            .or_insert_with(|| {
                Arc::new(LockCell {
                    st: Mutex::new(LockState {
                        writer: None,
                        readers: 0,
                    }),
                    cv: Condvar::new(),
                })
            })
            .clone()
    }

    /// Lock the persistent lock at `key` (its offset) exclusively. Locks live in DRAM, keyed
    /// by offset, so every lock is free after the pool is opened.
    /// Locking a lock this thread already holds is an error (they are not recursive).
    pub fn lock_exclusive(&self, key: u64) -> Result<()> {
        let cell = self.cell(key);
        let me = std::thread::current().id();
        let mut st = cell.st.lock();
        if st.writer == Some(me) {
            return Err(HeapError::Lock(format!(
                "the lock at {key:#x} is already held by this thread (locks are not recursive)"
            )));
        }
        while st.writer.is_some() || st.readers > 0 {
            cell.cv.wait(&mut st);
        }
        st.writer = Some(me);
        Ok(())
    }

    /// Drop `key`'s cell from the table once nobody holds, waits for or looks at it, so
    /// the table holds only locks in use.
    fn forget(&self, key: u64, cell: Arc<LockCell>) {
        let mut map = self.locks.lock();
        let idle = {
            let st = cell.st.lock();
            st.writer.is_none() && st.readers == 0
        };
        // Two references: the table's and ours. A thread that fetched the cell holds a third.
        if idle && Arc::strong_count(&cell) == 2 {
            map.remove(&key);
        }
    }

    /// Lock `key` shared.
    pub fn lock_shared(&self, key: u64) {
        let cell = self.cell(key);
        let mut st = cell.st.lock();
        while st.writer.is_some() {
            cell.cv.wait(&mut st);
        }
        st.readers += 1;
    }

    /// Release an exclusive lock held by this thread.
    pub fn unlock_exclusive(&self, key: u64) -> Result<()> {
        let cell = self.cell(key);
        let mut st = cell.st.lock();
        if st.writer != Some(std::thread::current().id()) {
            return Err(HeapError::Lock(format!(
                "unlock of the lock at {key:#x}, which this thread does not hold"
            )));
        }
        st.writer = None;
        cell.cv.notify_all();
        drop(st);
        self.forget(key, cell);
        Ok(())
    }

    /// Release a shared lock.
    pub fn unlock_shared(&self, key: u64) -> Result<()> {
        let cell = self.cell(key);
        let mut st = cell.st.lock();
        if st.readers == 0 {
            return Err(HeapError::Lock(format!(
                "shared unlock of the lock at {key:#x}, which has no readers"
            )));
        }
        st.readers -= 1;
        if st.readers == 0 {
            cell.cv.notify_all();
        }
        drop(st);
        self.forget(key, cell);
        Ok(())
    }

    /// Flush the medium's view of everything (used at close).
    pub fn quiesce(&self) -> Result<()> {
        for l in &self.lanes {
            match l.try_lock() {
                Some(g) if !g.in_tx() => {}
                _ => return Err(HeapError::TxState("a transaction is still open")),
            }
        }
        Ok(())
    }
}

fn in_fresh(lane: &Lane, off: u64, len: u64) -> bool {
    // Blocks allocated in this transaction need no snapshot: on abort they return to the
    // free space, whatever they hold.
    lane.allocs
        .iter()
        .any(|b| off >= b.off() && off + len <= b.off() + b.len())
}

/// The bits of bitmap word `k` that stand for one of a run's `blocks` blocks.
fn block_mask(k: usize, blocks: u64) -> u64 {
    let lo = k as u64 * 64;
    if lo >= blocks {
        0
    } else if blocks - lo >= 64 {
        u64::MAX
    } else {
        (1u64 << (blocks - lo)) - 1
    }
}

fn free_bits(allocated: &[u64], blocks: u64) -> Vec<u64> {
    allocated
        .iter()
        .enumerate()
        .map(|(k, w)| !w & block_mask(k, blocks))
        .collect()
}

pub(crate) fn undo_crc(head: &[u8], data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(head), data)
}

/// What an undo entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UndoKind {
    /// The old bytes of a range.
    Snapshot,
    /// An allocation will OR the mask into a run bitmap word; undo clears those bits.
    BitOr,
    /// A free will clear the mask's bits; undo sets them.
    BitAndNot,
}

/// A valid undo entry found by [`scan_undo`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UndoEntry {
    /// What it records.
    pub kind: UndoKind,
    /// Region offset of the snapshotted range or of the bitmap word.
    pub offset: u64,
    /// Bytes of the payload (the snapshot's length; 8 for a bit entry's mask).
    pub len: u64,
    /// Region offset of the payload in the log.
    pub data_at: u64,
}

/// The valid undo entries of transaction `seq` in lane `i`, in log order (the scan stops at
/// the first entry that is torn, of another transaction, or out of bounds).
pub fn scan_undo(
    medium: &dyn Medium,
    base: u64,
    g: &Geometry,
    i: usize,
    seq: u64,
) -> Vec<UndoEntry> {
    let start = g.undo(i);
    let end = start + g.undo_bytes();
    let mut pos = start;
    let mut out = Vec::new();
    let mut data = Vec::new();
    while pos + UNDO_HEADER_BYTES <= end {
        let mut h = [0u8; UNDO_HEADER_BYTES as usize];
        medium.read((base + pos) as usize, &mut h);
        let Ok(UndoHeader {
            seq: eseq,
            offset: off,
            len: field,
            crc,
        }) = UndoHeader::decode(&h, pos)
        else {
            break;
        };
        let (kind, len) = match field {
            UNDO_BIT_OR => (UndoKind::BitOr, 8),
            UNDO_BIT_ANDNOT => (UndoKind::BitAndNot, 8),
            n => (UndoKind::Snapshot, u64::from(n)),
        };
        if eseq != seq || len == 0 || pos + UNDO_HEADER_BYTES + len > end {
            break;
        }
        data.resize(len as usize, 0);
        medium.read((base + pos + UNDO_HEADER_BYTES) as usize, &mut data);
        if undo_crc(&h[..UNDO_CRC_COVERED_BYTES], &data) != crc {
            break;
        }
        out.push(UndoEntry {
            kind,
            offset: off,
            len,
            data_at: pos + UNDO_HEADER_BYTES,
        });
        pos += (UNDO_HEADER_BYTES + len).div_ceil(UNDO_ALIGN) * UNDO_ALIGN;
    }
    out
}

/// Decode header copy `at` of the heap at medium offset `base`; a corruption names its medium
/// offset.
pub fn decode_header_copy(medium: &dyn Medium, base: u64, len: u64, at: u64) -> Result<Header> {
    let mut b = [0u8; HEADER_CRC_AT + 4];
    medium.read((base + at) as usize, &mut b);
    Header::decode(&b, at, len).map_err(|e| match e {
        HeapError::Corrupt(mut c) => {
            c.offset += base;
            HeapError::Corrupt(c)
        }
        e => e,
    })
}

/// Read and validate the header (copy 0, else copy 1). When both are bad, the error names
/// both.
pub fn read_header(medium: &dyn Medium, base: u64, len: u64) -> Result<Header> {
    match decode_header_copy(medium, base, len, HEADER_COPY_0) {
        Ok(h) => Ok(h),
        Err(e0) => match decode_header_copy(medium, base, len, HEADER_COPY_1) {
            Ok(h) => Ok(h),
            Err(HeapError::Corrupt(c1)) => match e0 {
                HeapError::Corrupt(mut c0) => {
                    c0.found = format!("{}; copy 1 is bad too: {c1}", c0.found);
                    Err(HeapError::Corrupt(c0))
                }
                e => Err(e),
            },
            Err(e) => Err(e),
        },
    }
}
