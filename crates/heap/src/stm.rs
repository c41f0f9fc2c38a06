//! Word-based software transactional memory: the concurrency control behind the heap's isolated
//! transactions (issue 20, "Isolation"). It serialises transactions without user locks.
//!
//! This module knows nothing about the heap. It guards *offsets* (any `u64` address space, in
//! practice heap offsets), never memory: the caller performs every load and every store, and this
//! module tells it whether the load was consistent and when the buffered stores may be applied.
//! It is shaped for a write-back (redo) transaction that buffers its writes in DRAM and applies
//! them at commit, as TinySTM's write-back mode with commit-time locking, or TL2, does.
//!
//! # State
//!
//! - A global version clock, an `AtomicU64` that counts update commits.
//! - A table of `2^k` versioned lock stripes (`AtomicU64`). The 8-byte word at offset `off`
//!   belongs to stripe `(off >> 3) & (2^k - 1)`. A stripe word is `version << 1 | locked`. A
//!   locked stripe keeps the version it had when it was locked. Words whose indexes agree modulo
//!   `2^k` share a stripe; that only makes false conflicts, never missed ones.
//! - Per transaction ([`StmTx`], reusable): the read version `rv`, the read set (offset and stripe
//!   word seen, one entry per stripe a read touched), the write set (the stripes the buffered
//!   writes will touch) and, while committing, the stripes it holds with their old words.
//!
//! # Algorithm
//!
//! - **Begin**: `rv = clock`.
//! - **Read** ([`Stm::read`], [`Stm::read_word`]): for every stripe the range touches, load the
//!   stripe word; if it is locked, conflict; if its version is above `rv`, try to *extend* the
//!   snapshot (read the clock again as `now`, check that every stripe of the read set still has the
//!   word it had, then `rv = now`), and conflict if the read set changed. Then run the caller's
//!   load, then load every stripe word again: any change means a writer ran during the load, a
//!   conflict. Otherwise the words seen go into the read set and the value is returned.
//! - **Write** ([`Stm::note_write`]): the caller buffers the bytes; this records the stripes.
//! - **Commit** ([`Stm::commit`]): a transaction with no writes is done (nothing to lock, every
//!   read was already checked against `rv`). Otherwise: lock the write stripes in ascending index
//!   order, each by compare-and-swap with a bounded spin, a conflict when the spin runs out (the
//!   locks taken so far are given back with their old words); `wv = clock.fetch_add(1) + 1`;
//!   validate the read set (each stripe still has the word seen, or is locked by this
//!   transaction over that word), which can be skipped when `wv == rv + 1`, because then no
//!   other transaction committed since the snapshot; run the caller's `apply`, which stores the
//!   buffered words in place; release every write stripe with version `wv`.
//! - **Abort** ([`Stm::abort`]): forget the sets and release whatever is still held. A
//!   transaction that conflicted is doomed: until it is aborted (or begun again), every read,
//!   write note, validation and commit returns that same conflict.
//!
//! # Why it is correct
//!
//! *Serializable.* An update transaction is serialised at its `wv`. Each stripe it read had, at
//! validation time, the same word it had when read, while the transaction held all of its write
//! stripes; so nothing it read changed between the read and the point where the writes become
//! visible, and its writes are invisible to others until release (readers see the lock and
//! conflict). A read-only transaction is serialised at its `rv`: see below.
//!
//! *Opaque* (every transaction, including one that will abort, only ever sees a consistent
//! snapshot). Every value a read returns was loaded while its stripes were unlocked, unchanged,
//! and at a version `<= rv`. A writer locks its stripes *before* it takes `wv` from the clock, so
//! a writer with `wv <= rv` had its stripes locked before `rv` was read: a reader sees either its
//! lock or its new version, and never the old value as if it were current. A writer with
//! `wv > rv` makes every stripe it writes newer than `rv`, so a later read of those stripes
//! conflicts or extends the snapshot, and extension only succeeds when nothing read before has
//! changed. So all values returned to one transaction belong to the state as of its current `rv`.
//! A transaction never acts on an inconsistent state, which is why a read-only transaction needs
//! no commit-time work.
//!
//! *Memory ordering* (the seqlock argument). A writer locks with an acquire compare-and-swap and
//! issues a release fence before `apply`; a reader runs its load, then an acquire fence, then
//! loads the stripe word again. If the reader's load saw any store of `apply`, the fences
//! synchronise, the writer's lock is visible to the second stripe load, and the read conflicts.
//! The clock is read with acquire and advanced with acquire-release, which is what makes the lock
//! taken before `wv` visible to a reader whose `rv >= wv`.
//!
//! # Rules for the caller
//!
//! - The `load` closure of a read may run concurrently with a writer's `apply`; it must read the
//!   memory with atomic (or volatile-like) loads and must not act on what it loaded (no pointer
//!   chasing, no allocation sized by it): the value is only trustworthy after the read returns
//!   `Ok`. The caller reads its own buffered writes from its buffer, not through this module;
//!   a read that only partly overlaps the buffer reads the range through [`Stm::read`] and lays
//!   the buffered bytes over the result. Locks are taken only at commit, so a transaction never
//!   holds a stripe while it reads, and needs no read-through of its own locks.
//! - `apply` runs with the write stripes locked. It must not start, read in or commit another
//!   transaction of the same [`Stm`] (that could wait on stripes it holds; with the bounded spin
//!   it would conflict rather than deadlock, but it is a misuse).
//! - If `apply` panics, the stripes stay locked (readers conflict, so nobody sees the half-applied
//!   state as consistent) until [`Stm::abort`] or the next [`Stm::begin`] on that transaction
//!   releases them, with the new version `wv`: the partial writes become visible as committed.
//!
//! # Lock order
//!
//! Stripes are the only locks here. A transaction acquires only its write stripes, only inside
//! [`Stm::commit`], in ascending stripe index, and holds no other lock of this module while
//! doing so. It never waits for a stripe without bound (a bounded spin, then a conflict), so there
//! is no deadlock even if that order were broken. Callers must not hold a stripe (be inside
//! `apply`) while taking a lock that another thread may hold while it waits in a commit; the
//! heap's lane lock is held around a whole transaction and is per-thread, which is fine.
//!
//! # Counters
//!
//! [`Stm::stats`]: update and read-only commits, commits that skipped validation, snapshot
//! extensions, conflicts by [`ConflictReason`], voluntary aborts, and [`Stm::run`] calls that
//! gave up. The clock equals update commits plus validation failures (each took a `wv`).
//!
//! # Tests
//!
//! Interleavings driven from one thread (a read or commit run inside another transaction's
//! `load` or `apply`) are the unit tests below; `crates/heap/tests/stm_model.rs` checks random
//! interleavings of three transactions against the definitions of opacity and
//! serializability; `crates/heap/tests/stm.rs` runs threads over an in-DRAM word array (bank
//! transfers with snapshots, exact counters, write skew, torn records, disjoint writers, the
//! retry bound).
//!
//! # Progress
//!
//! Blocking, not lock-free: a committer that is preempted while holding stripes makes readers and
//! committers of those stripes conflict until it resumes. Conflicts are reported, never waited
//! out; [`Stm::run`] re-runs a transaction with randomised exponential backoff up to a bound and
//! then returns [`StmError::TooManyConflicts`]. Livelock and starvation are possible in principle
//! and are turned into that error by the bound.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering, fence};

/// Default stripe count: 2^16 stripes, 512 KiB of lock words.
pub const DEFAULT_STRIPES: usize = 1 << 16;
/// The most stripes a table may have (2^26, 512 MiB of lock words).
pub const MAX_STRIPES: usize = 1 << 26;
/// How many times a commit tries a busy stripe before it gives up with a conflict.
/// How many times a read re-checks a stripe a committer holds (yielding every 64th) before it
/// reports [`ConflictReason::ReadLocked`].
pub const READ_WAIT: u32 = 512;

pub const LOCK_SPINS: u32 = 128;

/// Bytes per guarded word (the shift of the stripe hash).
const WORD_SHIFT: u32 = 3;
const LOCKED: u64 = 1;

static NEXT_STM_ID: AtomicU64 = AtomicU64::new(1);

/// Why a transaction conflicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConflictReason {
    /// A read found the stripe locked by a committing writer.
    ReadLocked,
    /// A stripe changed while the caller's load ran.
    ReadChanged,
    /// A read found a version newer than the snapshot, and the snapshot could not be extended
    /// because something read earlier has changed.
    ReadTooNew,
    /// A commit could not lock a write stripe within the bounded spin.
    LockBusy,
    /// Commit-time validation found a stripe of the read set changed or locked by another.
    Validate,
}

impl std::fmt::Display for ConflictReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ConflictReason::ReadLocked => "read found the stripe locked by a committing writer",
            ConflictReason::ReadChanged => "stripe changed while the value was being loaded",
            ConflictReason::ReadTooNew => {
                "stripe newer than the snapshot, and an earlier read changed"
            }
            ConflictReason::LockBusy => "write stripe stayed locked by another commit",
            ConflictReason::Validate => "a stripe read earlier changed before commit",
        })
    }
}

/// A conflict: the transaction must be aborted and may be retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conflict {
    /// Why.
    pub reason: ConflictReason,
    /// The offset whose stripe conflicted.
    pub off: u64,
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "conflict at offset {:#x}: {}", self.off, self.reason)
    }
}

/// Errors of the STM.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StmError {
    /// The transaction conflicted with another and was not committed; retry it.
    #[error("{0}")]
    Conflict(Conflict),
    /// [`Stm::run`] gave up.
    #[error(
        "transaction gave up after {attempts} attempts, each ending in a conflict; the last at offset {last_conflict_at:#x}: {last_reason}"
    )]
    TooManyConflicts {
        /// Attempts made (the first run plus the retries).
        attempts: u32,
        /// The offset of the last conflict.
        last_conflict_at: u64,
        /// The reason of the last conflict.
        last_reason: ConflictReason,
    },
    /// An operation needed an open transaction.
    #[error("stm {op}: the transaction is not open (begin it first)")]
    NotActive {
        /// The operation.
        op: &'static str,
    },
    /// The transaction was begun on another [`Stm`].
    #[error("stm {op}: the transaction belongs to stm #{found}, not to stm #{expected}")]
    ForeignTx {
        /// The operation.
        op: &'static str,
        /// The id of the stm the operation was called on.
        expected: u64,
        /// The id of the stm the transaction was begun on.
        found: u64,
    },
    /// A byte range wraps around the end of the address space.
    #[error("stm {op}: range at {off:#x} of {len} bytes runs past the end of the u64 offset space")]
    BadRange {
        /// The operation.
        op: &'static str,
        /// Start of the range.
        off: u64,
        /// Its length.
        len: u64,
    },
    /// A configuration value is out of range.
    #[error("stm configuration: {what} must be {expected}, found {found}")]
    Config {
        /// The setting.
        what: &'static str,
        /// What is accepted.
        expected: &'static str,
        /// What was given.
        found: u64,
    },
}

impl From<Conflict> for StmError {
    fn from(c: Conflict) -> Self {
        StmError::Conflict(c)
    }
}

/// Errors that may carry an STM conflict, so that [`Stm::run`] can tell a conflict (retry) from
/// any other error (give up at once). Implement it for the caller's error type if that type wraps
/// [`StmError`].
pub trait AsConflict {
    /// The conflict this error is, if it is one.
    fn as_conflict(&self) -> Option<Conflict>;
}

impl AsConflict for StmError {
    fn as_conflict(&self) -> Option<Conflict> {
        match self {
            StmError::Conflict(c) => Some(*c),
            _ => None,
        }
    }
}

impl AsConflict for Conflict {
    fn as_conflict(&self) -> Option<Conflict> {
        Some(*self)
    }
}

/// The retry policy of [`Stm::run`]: how many retries after the first attempt, and the
/// randomised exponential backoff between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Retries after the first attempt; `max_retries + 1` attempts in all.
    pub max_retries: u32,
    /// The backoff window before the first retry, in spin-loop iterations; doubles per retry.
    pub min_spins: u32,
    /// The largest backoff window.
    pub max_spins: u32,
    /// From this retry on, the thread also yields its time slice before retrying (a committer
    /// holding the contended stripes may be waiting for a core).
    pub yield_after: u32,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            max_retries: 1000,
            min_spins: 16,
            max_spins: 1 << 14,
            yield_after: 3,
        }
    }
}

/// Counters of an [`Stm`] (relaxed; a snapshot taken while transactions run is approximate).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StmStats {
    /// Update transactions committed.
    pub commits: u64,
    /// Read-only transactions committed.
    pub read_only_commits: u64,
    /// Commits that skipped validation because no one committed since their snapshot.
    pub validations_skipped: u64,
    /// Successful snapshot extensions.
    pub extensions: u64,
    /// Conflicts of each reason.
    pub read_locked: u64,
    /// See [`ConflictReason::ReadChanged`].
    pub read_changed: u64,
    /// See [`ConflictReason::ReadTooNew`].
    pub read_too_new: u64,
    /// See [`ConflictReason::LockBusy`].
    pub lock_busy: u64,
    /// See [`ConflictReason::Validate`].
    pub validate: u64,
    /// Aborts of open transactions that had not conflicted (the caller gave up).
    pub user_aborts: u64,
    /// [`Stm::run`] calls that ended in [`StmError::TooManyConflicts`].
    pub gave_up: u64,
}

impl StmStats {
    /// All conflicts.
    pub fn conflicts(&self) -> u64 {
        self.read_locked + self.read_changed + self.read_too_new + self.lock_busy + self.validate
    }
}

#[derive(Debug, Default)]
struct Counters {
    commits: AtomicU64,
    read_only_commits: AtomicU64,
    validations_skipped: AtomicU64,
    extensions: AtomicU64,
    read_locked: AtomicU64,
    read_changed: AtomicU64,
    read_too_new: AtomicU64,
    lock_busy: AtomicU64,
    validate: AtomicU64,
    user_aborts: AtomicU64,
    gave_up: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Where a transaction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Active,
    /// Inside [`Stm::commit`] with the write stripes locked and `wv` taken (stays so only if
    /// `apply` panicked).
    Committing {
        wv: u64,
    },
}

/// One transaction's STM state. Reusable: [`Stm::begin`] clears it, keeping its allocations.
#[derive(Debug)]
pub struct StmTx {
    stm_id: u64,
    phase: Phase,
    rv: u64,
    /// (offset read, stripe word seen), one per stripe per read.
    reads: Vec<(u64, u64)>,
    /// (stripe, an offset of it) for every word the buffered writes touch.
    writes: Vec<(u32, u64)>,
    /// (stripe, word before locking), ascending by stripe, while committing.
    locked: Vec<(u32, u64)>,
    /// Scratch of a multi-stripe read: (stripe, offset, word seen before the load).
    scratch: Vec<(u32, u64, u64)>,
    rng: u64,
    /// The conflict that doomed the open transaction: every later operation but abort repeats it.
    conflicted: Option<Conflict>,
}

impl Default for StmTx {
    fn default() -> Self {
        Self::new()
    }
}

impl StmTx {
    /// A new idle transaction.
    pub fn new() -> Self {
        let mut h = RandomState::new().build_hasher();
        h.write_u64(0x9e37_79b9_7f4a_7c15);
        StmTx {
            stm_id: 0,
            phase: Phase::Idle,
            rv: 0,
            reads: Vec::new(),
            writes: Vec::new(),
            locked: Vec::new(),
            scratch: Vec::new(),
            rng: h.finish() | 1,
            conflicted: None,
        }
    }

    /// Whether the transaction is open (begun, not yet committed or aborted).
    pub fn is_active(&self) -> bool {
        self.phase != Phase::Idle
    }

    /// The snapshot version (meaningful while open).
    pub fn read_version(&self) -> u64 {
        self.rv
    }

    /// Entries in the read set.
    pub fn read_set_len(&self) -> usize {
        self.reads.len()
    }

    /// Words recorded in the write set (before deduplication by stripe).
    pub fn write_set_len(&self) -> usize {
        self.writes.len()
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }
}

/// The STM: a version clock and a table of versioned lock stripes. Share it by reference (it is
/// `Sync`); one per heap.
#[derive(Debug)]
pub struct Stm {
    id: u64,
    /// Alone on its cache lines: every update commit of every thread touches it.
    clock: CacheLine<AtomicU64>,
    stripes: Box<[AtomicU64]>,
    mask: u64,
    counters: CacheLine<Counters>,
}

/// Keeps a hot shared value off the cache lines of its neighbours (128 bytes: adjacent-line
/// prefetching pairs lines on common x86 parts).
#[derive(Debug, Default)]
#[repr(align(128))]
struct CacheLine<T>(T);

impl<T> std::ops::Deref for CacheLine<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl Default for Stm {
    fn default() -> Self {
        Self::with_default_stripes()
    }
}

impl Stm {
    /// A table of `stripes` lock stripes: a power of two from 1 to [`MAX_STRIPES`].
    pub fn new(stripes: usize) -> Result<Stm, StmError> {
        if stripes == 0 || !stripes.is_power_of_two() || stripes > MAX_STRIPES {
            return Err(StmError::Config {
                what: "stripes",
                expected: "a power of two from 1 to 2^26",
                found: stripes as u64,
            });
        }
        Ok(Self::build(stripes))
    }

    fn build(stripes: usize) -> Stm {
        Stm {
            id: NEXT_STM_ID.fetch_add(1, Ordering::Relaxed),
            clock: CacheLine(AtomicU64::new(0)),
            stripes: (0..stripes).map(|_| AtomicU64::new(0)).collect(),
            mask: stripes as u64 - 1,
            counters: CacheLine::default(),
        }
    }

    /// A table of [`DEFAULT_STRIPES`] stripes.
    pub fn with_default_stripes() -> Stm {
        Self::build(DEFAULT_STRIPES)
    }

    /// This table's id (named in [`StmError::ForeignTx`]).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The number of stripes.
    pub fn stripe_count(&self) -> usize {
        self.stripes.len()
    }

    /// The stripe guarding the word at `off`.
    pub fn stripe_of(&self, off: u64) -> usize {
        ((off >> WORD_SHIFT) & self.mask) as usize
    }

    /// The global version clock (update commits so far).
    pub fn clock(&self) -> u64 {
        self.clock.load(Ordering::Acquire)
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> StmStats {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StmStats {
            commits: l(&c.commits),
            read_only_commits: l(&c.read_only_commits),
            validations_skipped: l(&c.validations_skipped),
            extensions: l(&c.extensions),
            read_locked: l(&c.read_locked),
            read_changed: l(&c.read_changed),
            read_too_new: l(&c.read_too_new),
            lock_busy: l(&c.lock_busy),
            validate: l(&c.validate),
            user_aborts: l(&c.user_aborts),
            gave_up: l(&c.gave_up),
        }
    }

    /// Open `tx` on this table: take the snapshot version, clear the sets. A transaction left
    /// open is aborted first (releasing stripes a panicked `apply` left locked).
    pub fn begin(&self, tx: &mut StmTx) {
        if tx.is_active() && tx.stm_id == self.id {
            self.abort(tx);
        }
        // A transaction still holding stripes of another table cannot be released through this
        // one; those stripes stay locked there (its owner's readers conflict, boundedly).
        tx.reads.clear();
        tx.writes.clear();
        tx.locked.clear();
        tx.scratch.clear();
        tx.conflicted = None;
        tx.stm_id = self.id;
        tx.rv = self.clock.load(Ordering::Acquire);
        tx.phase = Phase::Active;
    }

    fn check_open(&self, tx: &StmTx, op: &'static str) -> Result<(), StmError> {
        if tx.phase != Phase::Active {
            return Err(StmError::NotActive { op });
        }
        if tx.stm_id != self.id {
            return Err(StmError::ForeignTx {
                op,
                expected: self.id,
                found: tx.stm_id,
            });
        }
        match tx.conflicted {
            Some(c) => Err(StmError::Conflict(c)),
            None => Ok(()),
        }
    }

    fn conflict(&self, tx: &mut StmTx, reason: ConflictReason, off: u64) -> StmError {
        let c = &self.counters;
        bump(match reason {
            ConflictReason::ReadLocked => &c.read_locked,
            ConflictReason::ReadChanged => &c.read_changed,
            ConflictReason::ReadTooNew => &c.read_too_new,
            ConflictReason::LockBusy => &c.lock_busy,
            ConflictReason::Validate => &c.validate,
        });
        let c = Conflict { reason, off };
        tx.conflicted = Some(c);
        StmError::Conflict(c)
    }

    /// The words of `[off, off + len)`, at most one full lap of the stripe table: (first word
    /// index, word count).
    fn words(&self, op: &'static str, off: u64, len: u64) -> Result<(u64, u64), StmError> {
        if len == 0 {
            return Ok((off >> WORD_SHIFT, 0));
        }
        let last = off
            .checked_add(len - 1)
            .ok_or(StmError::BadRange { op, off, len })?;
        let first = off >> WORD_SHIFT;
        let n = (last >> WORD_SHIFT) - first + 1;
        Ok((first, n.min(self.stripes.len() as u64)))
    }

    /// Read the 8-byte word at `off` (any alignment inside the word) with the caller's `load`.
    /// Same as [`Stm::read`] with a length of 8 bytes from the word's start.
    pub fn read_word<T>(
        &self,
        tx: &mut StmTx,
        off: u64,
        load: impl FnOnce() -> T,
    ) -> Result<T, StmError> {
        self.check_open(tx, "read")?;
        let s = self.stripe_of(off);
        let w1 = self.stable_word(tx, s, off)?;
        let v = load();
        fence(Ordering::Acquire);
        let w2 = self.stripes[s].load(Ordering::Relaxed);
        if w2 != w1 {
            return Err(self.conflict(tx, ConflictReason::ReadChanged, off));
        }
        tx.reads.push((off, w1));
        Ok(v)
    }

    /// Read `len` bytes at `off` with the caller's `load`, consistently with everything this
    /// transaction read before. A conflict means the transaction must be aborted.
    pub fn read<T>(
        &self,
        tx: &mut StmTx,
        off: u64,
        len: u64,
        load: impl FnOnce() -> T,
    ) -> Result<T, StmError> {
        self.check_open(tx, "read")?;
        let (first, n) = self.words("read", off, len)?;
        let mut scratch = std::mem::take(&mut tx.scratch);
        scratch.clear();
        let mut result = Ok(());
        for i in 0..n {
            let word_off = (first + i) << WORD_SHIFT;
            let s = self.stripe_of(word_off);
            match self.stable_word(tx, s, word_off) {
                Ok(w) => scratch.push((s as u32, word_off, w)),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if let Err(e) = result {
            tx.scratch = scratch;
            return Err(e);
        }
        let v = load();
        fence(Ordering::Acquire);
        for &(s, word_off, w1) in &scratch {
            if self.stripes[s as usize].load(Ordering::Relaxed) != w1 {
                tx.scratch = scratch;
                return Err(self.conflict(tx, ConflictReason::ReadChanged, word_off));
            }
        }
        tx.reads
            .extend(scratch.iter().map(|&(_, word_off, w)| (word_off, w)));
        tx.scratch = scratch;
        Ok(v)
    }

    /// The stripe word of `s`, unlocked and no newer than the snapshot (extending it if needed).
    fn stable_word(&self, tx: &mut StmTx, s: usize, off: u64) -> Result<u64, StmError> {
        let mut waited = 0u32;
        loop {
            let w = self.stripes[s].load(Ordering::Acquire);
            if w & LOCKED != 0 {
                // A committer holds it for the length of its apply: wait a little (it holds no
                // lock a reader could be holding, so this cannot deadlock), then give up.
                if waited < READ_WAIT {
                    waited += 1;
                    if waited % 64 == 0 {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                    continue;
                }
                return Err(self.conflict(tx, ConflictReason::ReadLocked, off));
            }
            if w >> 1 <= tx.rv {
                return Ok(w);
            }
            // Newer than the snapshot: move the snapshot forward if the read set allows it.
            let now = self.clock.load(Ordering::Acquire);
            if self.first_changed_read(tx).is_some() {
                return Err(self.conflict(tx, ConflictReason::ReadTooNew, off));
            }
            tx.rv = now;
            bump(&self.counters.extensions);
        }
    }

    /// Check, in the middle of a transaction, that everything it read is still current (for
    /// a caller about to do something expensive with what it read). Reads are already mutually
    /// consistent without this; commit validates anyway.
    pub fn validate(&self, tx: &mut StmTx) -> Result<(), StmError> {
        self.check_open(tx, "validate")?;
        match self.first_changed_read(tx) {
            None => Ok(()),
            Some(off) => Err(self.conflict(tx, ConflictReason::Validate, off)),
        }
    }

    /// The offset of the first read whose stripe no longer holds the word seen (a stripe locked
    /// by this transaction over that word counts as unchanged).
    fn first_changed_read(&self, tx: &StmTx) -> Option<u64> {
        for &(off, seen) in &tx.reads {
            let s = self.stripe_of(off);
            let cur = self.stripes[s].load(Ordering::Acquire);
            if cur == seen {
                continue;
            }
            let mine = cur == seen | LOCKED
                && tx
                    .locked
                    .binary_search_by_key(&(s as u32), |&(ls, _)| ls)
                    .is_ok_and(|i| tx.locked[i].1 == seen);
            if !mine {
                return Some(off);
            }
        }
        None
    }

    /// Record that the transaction's buffered writes cover `[off, off + len)`.
    pub fn note_write(&self, tx: &mut StmTx, off: u64, len: u64) -> Result<(), StmError> {
        self.check_open(tx, "note_write")?;
        let (first, n) = self.words("note_write", off, len)?;
        tx.writes.extend((0..n).map(|i| {
            let word_off = (first + i) << WORD_SHIFT;
            (self.stripe_of(word_off) as u32, word_off)
        }));
        Ok(())
    }

    /// Commit: lock the write stripes, take the write version, validate the read set, run
    /// `apply` (the caller stores its buffered writes in place), release the stripes with the new
    /// version. On a conflict nothing was applied, the transaction is closed, and `apply` was not
    /// called. A transaction with no writes commits without locking and without calling `apply`
    /// under any lock (it is still called, to keep one code path for the caller).
    pub fn commit<R>(&self, tx: &mut StmTx, apply: impl FnOnce() -> R) -> Result<R, StmError> {
        self.check_open(tx, "commit")?;
        if tx.writes.is_empty() {
            tx.phase = Phase::Idle;
            bump(&self.counters.read_only_commits);
            return Ok(apply());
        }
        tx.writes.sort_unstable();
        tx.writes.dedup_by_key(|&mut (s, _)| s);
        // Lock in ascending stripe order.
        tx.locked.clear();
        let mut busy = None;
        for &(s, off) in &tx.writes {
            match self.try_lock(s as usize) {
                Some(old) => tx.locked.push((s, old)),
                None => {
                    busy = Some(off);
                    break;
                }
            }
        }
        if let Some(off) = busy {
            self.unlock_restoring(tx);
            tx.phase = Phase::Idle;
            return Err(self.conflict(tx, ConflictReason::LockBusy, off));
        }
        let wv = self.clock.fetch_add(1, Ordering::AcqRel) + 1;
        if wv == tx.rv + 1 {
            bump(&self.counters.validations_skipped);
        } else if let Some(off) = self.first_changed_read(tx) {
            self.unlock_restoring(tx);
            tx.phase = Phase::Idle;
            return Err(self.conflict(tx, ConflictReason::Validate, off));
        }
        tx.phase = Phase::Committing { wv };
        // Order the locks before the stores of `apply` for readers (see the module doc).
        fence(Ordering::Release);
        let r = apply();
        self.unlock_with(tx, wv);
        tx.phase = Phase::Idle;
        bump(&self.counters.commits);
        Ok(r)
    }

    /// Lock stripe `s` with a bounded spin: its word before locking, or `None` if it stayed busy.
    fn try_lock(&self, s: usize) -> Option<u64> {
        let stripe = &self.stripes[s];
        for _ in 0..LOCK_SPINS {
            let w = stripe.load(Ordering::Relaxed);
            if w & LOCKED == 0
                && stripe
                    .compare_exchange_weak(w, w | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return Some(w);
            }
            std::hint::spin_loop();
        }
        None
    }

    fn unlock_restoring(&self, tx: &mut StmTx) {
        for &(s, old) in &tx.locked {
            self.stripes[s as usize].store(old, Ordering::Release);
        }
        tx.locked.clear();
    }

    fn unlock_with(&self, tx: &mut StmTx, wv: u64) {
        for &(s, _) in &tx.locked {
            self.stripes[s as usize].store(wv << 1, Ordering::Release);
        }
        tx.locked.clear();
    }

    /// Close `tx` without committing, releasing anything it holds. Idempotent; a no-op on an
    /// idle transaction. Stripes left locked by a panicked `apply` are released with that
    /// commit's version (its partial writes are visible from then on).
    pub fn abort(&self, tx: &mut StmTx) {
        match tx.phase {
            Phase::Idle => return,
            Phase::Active => {
                if tx.conflicted.is_none() {
                    bump(&self.counters.user_aborts);
                }
            }
            Phase::Committing { wv } => {
                if tx.stm_id == self.id {
                    self.unlock_with(tx, wv);
                }
            }
        }
        tx.phase = Phase::Idle;
        tx.reads.clear();
        tx.writes.clear();
        tx.locked.clear();
    }

    /// Run a transaction: begin `tx`, call `attempt` (which reads, buffers and notes writes, and
    /// commits), and on a conflict abort and run it again after a randomised exponential backoff,
    /// up to `retry.max_retries` times; then [`StmError::TooManyConflicts`] (converted into `E`).
    /// Any other error is returned at once, after aborting. If `attempt` returns `Ok` with the
    /// transaction still open (it chose not to commit), the transaction is aborted.
    pub fn run<R, E>(
        &self,
        tx: &mut StmTx,
        retry: &Retry,
        mut attempt: impl FnMut(&mut StmTx) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: AsConflict + From<StmError>,
    {
        let mut attempts: u32 = 0;
        loop {
            self.begin(tx);
            attempts = attempts.saturating_add(1);
            let out = attempt(tx);
            if tx.is_active() {
                self.abort(tx);
            }
            let c = match out {
                Ok(r) => return Ok(r),
                Err(e) => match e.as_conflict() {
                    Some(c) => c,
                    None => return Err(e),
                },
            };
            if attempts > retry.max_retries {
                bump(&self.counters.gave_up);
                return Err(E::from(StmError::TooManyConflicts {
                    attempts,
                    last_conflict_at: c.off,
                    last_reason: c.reason,
                }));
            }
            self.backoff(tx, retry, attempts - 1);
        }
    }

    /// Wait before retry number `retry_no` (0-based): a random number of spins below a window
    /// that doubles per retry, plus a yield from `yield_after` on.
    fn backoff(&self, tx: &mut StmTx, retry: &Retry, retry_no: u32) {
        let window = u64::from(retry.min_spins.max(1))
            .checked_shl(retry_no.min(32))
            .unwrap_or(u64::MAX)
            .min(u64::from(retry.max_spins.max(1)));
        let spins = tx.next_random() % window;
        for _ in 0..spins {
            std::hint::spin_loop();
        }
        if retry_no >= retry.yield_after {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stm(n: usize) -> Stm {
        Stm::new(n).expect("valid stripe count")
    }

    #[test]
    fn config_rejects_bad_stripe_counts() {
        for bad in [0usize, 3, 100, MAX_STRIPES * 2] {
            match Stm::new(bad) {
                Err(StmError::Config { what, found, .. }) => {
                    assert_eq!(what, "stripes");
                    assert_eq!(found, bad as u64);
                }
                other => panic!("{bad} stripes accepted: {other:?}"),
            }
        }
        assert_eq!(stm(1).stripe_count(), 1);
        assert_eq!(stm(1024).stripe_count(), 1024);
    }

    #[test]
    fn stripe_hash_is_word_granular_and_wraps() {
        let s = stm(16);
        assert_eq!(s.stripe_of(0), 0);
        assert_eq!(s.stripe_of(7), 0);
        assert_eq!(s.stripe_of(8), 1);
        assert_eq!(s.stripe_of(15 * 8), 15);
        assert_eq!(s.stripe_of(16 * 8), 0);
        assert_eq!(s.stripe_of(u64::MAX), 15);
    }

    #[test]
    fn operations_on_idle_or_foreign_transactions_are_typed_errors() {
        let a = stm(16);
        let b = stm(16);
        let mut tx = StmTx::new();
        assert_eq!(
            a.read_word(&mut tx, 0, || 1u64),
            Err(StmError::NotActive { op: "read" })
        );
        assert_eq!(
            a.note_write(&mut tx, 0, 8),
            Err(StmError::NotActive { op: "note_write" })
        );
        assert_eq!(
            a.commit(&mut tx, || ()),
            Err(StmError::NotActive { op: "commit" })
        );
        b.begin(&mut tx);
        assert_eq!(
            a.read(&mut tx, 0, 8, || ()),
            Err(StmError::ForeignTx {
                op: "read",
                expected: a.id(),
                found: b.id()
            })
        );
        assert!(matches!(
            a.commit(&mut tx, || ()),
            Err(StmError::ForeignTx { op: "commit", .. })
        ));
        // The transaction is still usable on its own table.
        assert_eq!(b.read_word(&mut tx, 0, || 5u64), Ok(5));
        assert_eq!(b.commit(&mut tx, || 6u64), Ok(6));
    }

    #[test]
    fn wrapping_range_is_a_typed_error() {
        let s = stm(16);
        let mut tx = StmTx::new();
        s.begin(&mut tx);
        assert_eq!(
            s.note_write(&mut tx, u64::MAX - 3, 8),
            Err(StmError::BadRange {
                op: "note_write",
                off: u64::MAX - 3,
                len: 8
            })
        );
        assert!(matches!(
            s.read(&mut tx, u64::MAX, 2, || ()),
            Err(StmError::BadRange { op: "read", .. })
        ));
        // The last word itself is fine, and a zero-length range touches nothing.
        s.note_write(&mut tx, u64::MAX - 7, 8).unwrap();
        s.note_write(&mut tx, 40, 0).unwrap();
        assert_eq!(tx.write_set_len(), 1);
    }

    #[test]
    fn huge_ranges_cover_each_stripe_once() {
        let s = stm(8);
        let mut tx = StmTx::new();
        s.begin(&mut tx);
        s.note_write(&mut tx, 4, 1 << 40).unwrap();
        assert_eq!(tx.write_set_len(), 8);
        s.read(&mut tx, 0, 1 << 20, || ()).unwrap();
        assert_eq!(tx.read_set_len(), 8);
        s.commit(&mut tx, || ()).unwrap();
        assert_eq!(s.stats().commits, 1);
    }

    #[test]
    fn unaligned_range_touches_both_words() {
        let s = stm(16);
        let mut tx = StmTx::new();
        s.begin(&mut tx);
        s.note_write(&mut tx, 6, 4).unwrap(); // bytes 6..10: words 0 and 1
        assert_eq!(tx.write_set_len(), 2);
        s.read(&mut tx, 15, 2, || ()).unwrap(); // bytes 15..17: words 1 and 2
        assert_eq!(tx.read_set_len(), 2);
    }

    #[test]
    fn commit_advances_clock_and_versions_only_for_updates() {
        let s = stm(16);
        let mut tx = StmTx::new();
        s.begin(&mut tx);
        assert_eq!(s.read_word(&mut tx, 8, || 1u8), Ok(1));
        assert_eq!(s.commit(&mut tx, || "ro"), Ok("ro"));
        assert!(!tx.is_active());
        assert_eq!(s.clock(), 0);

        s.begin(&mut tx);
        s.note_write(&mut tx, 8, 8).unwrap();
        s.note_write(&mut tx, 8, 8).unwrap();
        assert_eq!(s.commit(&mut tx, || 7), Ok(7));
        assert_eq!(s.clock(), 1);
        assert_eq!(s.stripes[1].load(Ordering::Relaxed), 1 << 1);
        assert_eq!(s.stripes[0].load(Ordering::Relaxed), 0);
        let st = s.stats();
        assert_eq!((st.commits, st.read_only_commits), (1, 1));
        assert_eq!(st.validations_skipped, 1);
        assert_eq!(st.conflicts(), 0);
    }

    /// Two transactions read both accounts; the first withdraws from one and commits; the
    /// second, which withdraws from the other, must fail validation (write skew).
    #[test]
    fn write_skew_is_caught_by_validation() {
        let s = stm(16);
        let (a, b) = (0u64, 8u64);
        let mut t1 = StmTx::new();
        let mut t2 = StmTx::new();
        // Make the clock move between the snapshots so that the fast path does not apply.
        s.begin(&mut t1);
        s.note_write(&mut t1, 64, 8).unwrap();
        s.commit(&mut t1, || ()).unwrap();

        s.begin(&mut t1);
        s.begin(&mut t2);
        for t in [&mut t1, &mut t2] {
            s.read_word(t, a, || ()).unwrap();
            s.read_word(t, b, || ()).unwrap();
        }
        s.note_write(&mut t1, a, 8).unwrap();
        s.commit(&mut t1, || ()).unwrap();
        s.note_write(&mut t2, b, 8).unwrap();
        let mut applied = false;
        assert_eq!(
            s.commit(&mut t2, || applied = true),
            Err(StmError::Conflict(Conflict {
                reason: ConflictReason::Validate,
                off: a
            }))
        );
        assert!(
            !applied,
            "apply ran for a transaction that failed validation"
        );
        assert!(!t2.is_active());
        // Its lock on b was given back with the old version.
        assert_eq!(s.stripes[1].load(Ordering::Relaxed), 0);
        assert_eq!(s.stats().validate, 1);
    }

    /// Same shape, but the second transaction's snapshot is taken after the first commits
    /// (wv == rv + 1 would be wrong to skip if anything committed in between; here nothing did).
    #[test]
    fn validation_fast_path_only_when_nothing_committed_since_the_snapshot() {
        let s = stm(16);
        let mut t1 = StmTx::new();
        let mut t2 = StmTx::new();
        s.begin(&mut t1);
        s.begin(&mut t2);
        s.read_word(&mut t1, 0, || ()).unwrap();
        s.read_word(&mut t2, 0, || ()).unwrap();
        s.note_write(&mut t1, 0, 8).unwrap();
        s.note_write(&mut t2, 0, 8).unwrap();
        s.commit(&mut t1, || ()).unwrap(); // wv 1 == rv 0 + 1: skipped
        assert_eq!(s.stats().validations_skipped, 1);
        // t2 has rv 0 and gets wv 2: it must validate and see that word 0 changed.
        assert!(matches!(
            s.commit(&mut t2, || ()),
            Err(StmError::Conflict(Conflict {
                reason: ConflictReason::Validate,
                ..
            }))
        ));
    }

    #[test]
    fn read_of_a_stripe_written_by_this_transaction_validates() {
        let s = stm(16);
        let mut t1 = StmTx::new();
        let mut other = StmTx::new();
        s.begin(&mut t1);
        s.read_word(&mut t1, 16, || ()).unwrap();
        // Someone else commits elsewhere so that t1 cannot skip validation.
        s.begin(&mut other);
        s.note_write(&mut other, 0, 8).unwrap();
        s.commit(&mut other, || ()).unwrap();
        s.note_write(&mut t1, 16, 8).unwrap();
        s.commit(&mut t1, || ()).unwrap();
        assert_eq!(s.stats().validations_skipped, 1); // only `other`'s
        assert_eq!(s.stripes[2].load(Ordering::Relaxed), 2 << 1);
    }

    /// A stripe of the read set that another committer holds locked, still over the version
    /// this transaction saw, fails validation: the other may be writing it right now.
    #[test]
    fn validation_rejects_a_read_stripe_locked_by_another() {
        let s = stm(16);
        let mut t1 = StmTx::new();
        let mut t2 = StmTx::new();
        s.begin(&mut t1);
        s.begin(&mut t2);
        s.read_word(&mut t1, 0, || ()).unwrap();
        s.note_write(&mut t1, 8, 8).unwrap();
        s.note_write(&mut t2, 0, 8).unwrap();
        // t2 takes wv 1 and holds stripe 0; inside its apply, t1 commits with wv 2 != rv + 1.
        let inner = s.commit(&mut t2, || s.commit(&mut t1, || ())).unwrap();
        assert_eq!(
            inner,
            Err(StmError::Conflict(Conflict {
                reason: ConflictReason::Validate,
                off: 0
            }))
        );
        assert_eq!(
            s.stripes[1].load(Ordering::Relaxed),
            0,
            "t1's lock not given back"
        );
    }

    #[test]
    fn explicit_validation_reports_the_changed_read() {
        let s = stm(16);
        let mut r = StmTx::new();
        let mut w = StmTx::new();
        s.begin(&mut r);
        s.read_word(&mut r, 0, || ()).unwrap();
        s.read_word(&mut r, 24, || ()).unwrap();
        assert_eq!(s.validate(&mut r), Ok(()));
        s.begin(&mut w);
        s.note_write(&mut w, 24, 8).unwrap();
        s.commit(&mut w, || ()).unwrap();
        assert_eq!(
            s.validate(&mut r),
            Err(StmError::Conflict(Conflict {
                reason: ConflictReason::Validate,
                off: 24
            }))
        );
        s.abort(&mut r);
        assert_eq!(
            s.validate(&mut r),
            Err(StmError::NotActive { op: "validate" })
        );
        assert_eq!(
            s.stats().user_aborts,
            0,
            "an abort after a conflict is not voluntary"
        );
    }

    #[test]
    fn read_during_a_commit_sees_the_lock() {
        let s = stm(16);
        let mut w = StmTx::new();
        let mut r = StmTx::new();
        s.begin(&mut w);
        s.note_write(&mut w, 24, 8).unwrap();
        s.begin(&mut r);
        let seen = s.commit(&mut w, || s.read_word(&mut r, 24, || ())).unwrap();
        assert_eq!(
            seen,
            Err(StmError::Conflict(Conflict {
                reason: ConflictReason::ReadLocked,
                off: 24
            }))
        );
        assert_eq!(s.stats().read_locked, 1);
    }

    #[test]
    fn commit_during_a_commit_gets_lock_busy_not_a_deadlock() {
        let s = stm(16);
        let mut w = StmTx::new();
        let mut v = StmTx::new();
        s.begin(&mut w);
        s.note_write(&mut w, 8, 16).unwrap(); // stripes 1 and 2
        s.begin(&mut v);
        s.note_write(&mut v, 40, 8).unwrap(); // stripe 5
        s.note_write(&mut v, 0, 8).unwrap(); // stripe 0
        s.note_write(&mut v, 16, 8).unwrap(); // stripe 2, held by w
        let inner = s.commit(&mut w, || s.commit(&mut v, || ())).unwrap();
        assert_eq!(
            inner,
            Err(StmError::Conflict(Conflict {
                reason: ConflictReason::LockBusy,
                off: 16
            }))
        );
        // v had locked stripe 0 (lower) and gave it back with its old word; stripe 5 (higher)
        // it never reached; w released its own.
        assert_eq!(s.stripes[0].load(Ordering::Relaxed), 0);
        assert_eq!(s.stripes[5].load(Ordering::Relaxed), 0);
        assert_eq!(s.stripes[1].load(Ordering::Relaxed), 1 << 1);
        assert_eq!(s.stripes[2].load(Ordering::Relaxed), 1 << 1);
        assert_eq!(s.stats().lock_busy, 1);
    }

    #[test]
    fn writer_during_the_load_is_detected() {
        let s = stm(16);
        let mut r = StmTx::new();
        let mut w = StmTx::new();
        s.begin(&mut r);
        let got = s.read_word(&mut r, 32, || {
            s.begin(&mut w);
            s.note_write(&mut w, 32, 8).unwrap();
            s.commit(&mut w, || ()).unwrap();
        });
        assert_eq!(
            got,
            Err(StmError::Conflict(Conflict {
                reason: ConflictReason::ReadChanged,
                off: 32
            }))
        );
        // Multi-word read: the change is on the second word.
        s.begin(&mut r);
        let got = s.read(&mut r, 24, 16, || {
            s.begin(&mut w);
            s.note_write(&mut w, 32, 8).unwrap();
            s.commit(&mut w, || ()).unwrap();
        });
        assert_eq!(
            got,
            Err(StmError::Conflict(Conflict {
                reason: ConflictReason::ReadChanged,
                off: 32
            }))
        );
        assert_eq!(s.stats().read_changed, 2);
    }

    /// A transaction that conflicted is doomed: a caller that ignores the error cannot commit
    /// it (not even as read-only), and gets the same conflict again, without a second count.
    #[test]
    fn a_conflicted_transaction_cannot_go_on() {
        let s = stm(16);
        let mut r = StmTx::new();
        let mut w = StmTx::new();
        s.begin(&mut r);
        s.read_word(&mut r, 0, || ()).unwrap();
        s.begin(&mut w);
        s.note_write(&mut w, 0, 16).unwrap();
        s.commit(&mut w, || ()).unwrap();
        let first = s.read_word(&mut r, 8, || ()).unwrap_err();
        assert!(matches!(
            first,
            StmError::Conflict(Conflict {
                reason: ConflictReason::ReadTooNew,
                off: 8
            })
        ));
        assert_eq!(s.read_word(&mut r, 64, || ()), Err(first.clone()));
        assert_eq!(s.note_write(&mut r, 64, 8), Err(first.clone()));
        let mut applied = false;
        assert_eq!(s.commit(&mut r, || applied = true), Err(first.clone()));
        assert!(!applied);
        assert_eq!(s.stats().conflicts(), 1);
        s.abort(&mut r);
        assert_eq!(s.stats().user_aborts, 0);
        s.begin(&mut r);
        assert_eq!(s.read_word(&mut r, 8, || 1), Ok(1));
    }

    #[test]
    fn snapshot_extends_when_the_read_set_is_intact() {
        let s = stm(16);
        let mut r = StmTx::new();
        let mut w = StmTx::new();
        s.begin(&mut r);
        s.read_word(&mut r, 0, || ()).unwrap();
        s.begin(&mut w);
        s.note_write(&mut w, 8, 8).unwrap();
        s.commit(&mut w, || ()).unwrap();
        // Word 8 is now newer than r's snapshot, but word 0 is unchanged: extend.
        assert_eq!(r.read_version(), 0);
        s.read_word(&mut r, 8, || ()).unwrap();
        assert_eq!(r.read_version(), 1);
        assert_eq!(s.stats().extensions, 1);
    }

    #[test]
    fn snapshot_cannot_extend_over_a_changed_read() {
        let s = stm(16);
        let mut r = StmTx::new();
        let mut w = StmTx::new();
        s.begin(&mut r);
        s.read_word(&mut r, 0, || ()).unwrap();
        s.begin(&mut w);
        s.note_write(&mut w, 0, 16).unwrap();
        s.commit(&mut w, || ()).unwrap();
        // Word 8 is newer, and word 0 (read before) changed: the old snapshot is lost.
        assert_eq!(
            s.read_word(&mut r, 8, || ()),
            Err(StmError::Conflict(Conflict {
                reason: ConflictReason::ReadTooNew,
                off: 8
            }))
        );
        assert_eq!(r.read_version(), 0);
    }

    #[test]
    fn abort_releases_and_counts_only_voluntary_aborts() {
        let s = stm(16);
        let mut tx = StmTx::new();
        s.abort(&mut tx); // idle: no-op
        s.begin(&mut tx);
        s.note_write(&mut tx, 0, 8).unwrap();
        s.abort(&mut tx);
        s.abort(&mut tx);
        assert!(!tx.is_active());
        assert_eq!(s.stats().user_aborts, 1);
        assert_eq!(s.clock(), 0);
    }

    #[test]
    fn panicking_apply_keeps_stripes_locked_until_abort() {
        let s = stm(16);
        let mut tx = StmTx::new();
        s.begin(&mut tx);
        s.note_write(&mut tx, 8, 8).unwrap();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = s.commit(&mut tx, || panic!("apply failed"));
        }));
        assert!(caught.is_err());
        assert!(tx.is_active());
        let mut r = StmTx::new();
        s.begin(&mut r);
        assert!(matches!(
            s.read_word(&mut r, 8, || ()),
            Err(StmError::Conflict(Conflict {
                reason: ConflictReason::ReadLocked,
                ..
            }))
        ));
        s.abort(&mut tx);
        assert_eq!(s.stripes[1].load(Ordering::Relaxed), 1 << 1);
        s.begin(&mut r);
        assert_eq!(s.read_word(&mut r, 8, || 3), Ok(3));
    }

    #[test]
    fn run_gives_up_with_the_typed_error_after_the_bound() {
        let s = stm(16);
        let mut tx = StmTx::new();
        let mut w = StmTx::new();
        let retry = Retry {
            max_retries: 4,
            min_spins: 1,
            max_spins: 4,
            yield_after: 2,
        };
        let mut calls = 0;
        let out: Result<(), StmError> = s.run(&mut tx, &retry, |tx| {
            calls += 1;
            // A writer always commits to word 48 while this transaction loads it.
            s.read_word(tx, 48, || {
                s.begin(&mut w);
                s.note_write(&mut w, 48, 8).unwrap();
                s.commit(&mut w, || ()).unwrap();
            })?;
            s.commit(tx, || ())
        });
        assert_eq!(
            out,
            Err(StmError::TooManyConflicts {
                attempts: 5,
                last_conflict_at: 48,
                last_reason: ConflictReason::ReadChanged
            })
        );
        assert_eq!(calls, 5);
        assert!(!tx.is_active());
        assert_eq!(s.stats().gave_up, 1);
    }

    #[test]
    fn run_retries_conflicts_and_passes_other_errors_through() {
        let s = stm(16);
        let mut tx = StmTx::new();
        let mut w = StmTx::new();
        let mut calls = 0;
        let out: Result<u32, StmError> = s.run(&mut tx, &Retry::default(), |tx| {
            calls += 1;
            s.read_word(tx, 0, || {
                if calls < 3 {
                    s.begin(&mut w);
                    s.note_write(&mut w, 0, 8).unwrap();
                    s.commit(&mut w, || ()).unwrap();
                }
            })?;
            s.commit(tx, || calls)
        });
        assert_eq!(out, Ok(3));

        #[derive(Debug, PartialEq)]
        enum AppError {
            Stm(StmError),
            Broke,
        }
        impl From<StmError> for AppError {
            fn from(e: StmError) -> Self {
                AppError::Stm(e)
            }
        }
        impl AsConflict for AppError {
            fn as_conflict(&self) -> Option<Conflict> {
                match self {
                    AppError::Stm(e) => e.as_conflict(),
                    AppError::Broke => None,
                }
            }
        }
        let mut calls = 0;
        let out: Result<(), AppError> = s.run(&mut tx, &Retry::default(), |tx| {
            calls += 1;
            s.note_write(tx, 0, 8)?;
            Err(AppError::Broke)
        });
        assert_eq!(out, Err(AppError::Broke));
        assert_eq!(calls, 1);
        assert!(!tx.is_active());
        // A misuse error is not retried either.
        let other = stm(16);
        let mut calls = 0;
        let out: Result<(), StmError> = s.run(&mut tx, &Retry::default(), |tx| {
            calls += 1;
            other.read_word(tx, 0, || ())
        });
        assert!(matches!(out, Err(StmError::ForeignTx { .. })));
        assert_eq!(calls, 1);
    }
}
