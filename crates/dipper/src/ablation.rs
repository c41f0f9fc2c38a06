//! DIPPER's ablation (dissertation section 4.5, Fig. 4.16): the designs DIPPER replaces, built
//! into the same engine so one benchmark can run them side by side. **For benchmarks only**:
//! nothing in the server or the CLI selects them, and the API is hidden from the docs.
//!
//! Three variants, each against DIPPER's own mirror-and-stream checkpoint with logical logging:
//!
//! - [`CheckpointStyle::CopyOnWrite`]: the checkpoint writes the DRAM state itself, not a
//!   replay of the log. At the log swap every shard is marked protected; the checkpoint then
//!   takes the shards one at a time, copies each one's image and writes its pages into the
//!   shadow slot. A writer that reaches a shard the checkpoint has not taken yet first copies
//!   the shard for it (and waits for nobody else), as a process that forked for its checkpoint
//!   pays a page copy on its first write to each page while the child writes the image. The
//!   unit of protection is a shard, not a 4 KiB page (no `mprotect`, no fault handler, no
//!   `unsafe`): the first write to a shard after the swap copies the whole shard.
//! - [`CheckpointStyle::Quiesce`]: the checkpoint holds every shard's write lock from the log
//!   swap until the root points at the new image; writers (and readers) wait for it.
//! - [`Physical`]: physical redo logging. A wrapper machine whose writes ([`execute_physical`])
//!   run the operation on the DRAM shards first, then log the bytes it changed (after-images
//!   of the 64-byte lines that differ from a copy of the shard kept for the purpose) through
//!   [`Dipper::apply_then_log`]; recovery and checkpoints copy those bytes back instead of
//!   running the operation. The checkpoint stays DIPPER's.
//!
//! Each variant recovers with the engine's ordinary recovery: the copy-on-write image is the
//! state at the swap, which is the previous image plus the archived log, exactly what DIPPER's
//! replay would have written; the quiescing checkpoint writes DIPPER's image; a physical record
//! redoes what its operation did. `crates/dipper/tests/ablation.rs` crashes each one at every
//! fence of a checkpoint on the persistence simulator.
//!
//! Limits: the copy-on-write checkpoint needs a store whose slots do not grow (a fixed-size
//! pool) and serves [`Dipper::execute`] writes only ([`Dipper::apply_then_log`] is refused while
//! it is selected: a change applied before its record is appended could land in the copy and
//! in the new log both). A checkpoint taken by [`Dipper::close`] is always DIPPER's (close
//! holds the shard locks already).

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock, RwLockWriteGuard};
use std::time::Instant;

use super::{CheckpointStats, Checkpointer, Dipper, Inner, Machine, poisoned};
use crate::arena::{Arena, PAGE};
use crate::error::{DipperError, Result};
use crate::layout::{SLOT_NONE, STATE_IDLE};
use crate::slot::{self, SlotMap};
use pmem::Medium;

/// How checkpoints run (benchmarks only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CheckpointStyle {
    /// DIPPER's: replay the archived log onto the mirror, write the changed pages; the frontend
    /// never waits.
    #[default]
    Dipper,
    /// Write the DRAM state as of the log swap, copying a shard on a writer's first write to
    /// it (fork-like copy-on-write, one shard per unit).
    CopyOnWrite,
    /// DIPPER's image, written while every shard's write lock is held.
    Quiesce,
}

impl CheckpointStyle {
    fn code(self) -> u8 {
        match self {
            CheckpointStyle::Dipper => 0,
            CheckpointStyle::CopyOnWrite => 1,
            CheckpointStyle::Quiesce => 2,
        }
    }
}

/// Counters of the ablation hooks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AblationStats {
    /// Shards a writer copied for a copy-on-write checkpoint before changing them.
    pub writer_copies: u64,
    /// Shards the copy-on-write checkpoint copied itself.
    pub checkpoint_copies: u64,
    /// Copy-on-write checkpoints completed.
    pub cow_checkpoints: u64,
    /// Quiescing checkpoints completed (every shard locked).
    pub quiesced_checkpoints: u64,
}

/// The engine's side of the ablation: the checkpoint style and the copy-on-write state.
#[derive(Debug)]
pub(crate) struct Hooks {
    style: AtomicU8,
    /// A copy-on-write checkpoint is between its swap and its end.
    cow_running: AtomicBool,
    /// The log that became active at that swap.
    new_log: AtomicUsize,
    /// Per shard: not yet copied for the running copy-on-write checkpoint.
    protected: Vec<AtomicBool>,
    /// Per shard: the copy a writer made.
    copies: Vec<Mutex<Option<Arena>>>,
    writer_copies: AtomicU64,
    checkpoint_copies: AtomicU64,
    cow_checkpoints: AtomicU64,
    quiesced: AtomicU64,
}

impl Hooks {
    pub(crate) fn new(shards: usize) -> Hooks {
        Hooks {
            style: AtomicU8::new(0),
            cow_running: AtomicBool::new(false),
            new_log: AtomicUsize::new(0),
            protected: (0..shards).map(|_| AtomicBool::new(false)).collect(),
            copies: (0..shards).map(|_| Mutex::new(None)).collect(),
            writer_copies: AtomicU64::new(0),
            checkpoint_copies: AtomicU64::new(0),
            cow_checkpoints: AtomicU64::new(0),
            quiesced: AtomicU64::new(0),
        }
    }

    fn style(&self) -> u8 {
        self.style.load(Ordering::Acquire)
    }

    /// Whether the checkpoint about to start copies the DRAM state (not when closing).
    pub(crate) fn cow(&self, closing: bool) -> bool {
        !closing && self.style() == CheckpointStyle::CopyOnWrite.code()
    }

    /// Refuse the apply-then-log path while copy-on-write checkpoints are selected.
    pub(crate) fn check_apply_first(&self) -> Result<()> {
        if self.style() == CheckpointStyle::CopyOnWrite.code() {
            return Err(DipperError::Invalid {
                what: "write path",
                reason: "the copy-on-write checkpoint (ablation) serves Dipper::execute only"
                    .into(),
            });
        }
        Ok(())
    }

    /// At the log swap of a copy-on-write checkpoint (under the gate's write lock, so no
    /// append is in flight): every shard is to be copied, operations logged from now on in
    /// `new_log` must not reach the copy.
    pub(crate) fn at_swap(&self, new_log: usize) {
        self.new_log.store(new_log, Ordering::Release);
        for p in &self.protected {
            p.store(true, Ordering::Release);
        }
        self.cow_running.store(true, Ordering::Release);
    }

    /// Copy, for the running copy-on-write checkpoint, each of the shards `ids` (write-locked,
    /// `arenas`) it has not copied yet, before an operation changes them. Called twice per
    /// operation: right after the shards are locked (`log` = `None`), and after its record is
    /// appended to log `log`.
    ///
    /// - At locking: a shard still protected means the swap has happened (the flags are set
    ///   after it, under the gate's write lock), so the operation's record goes to the new log
    ///   and must not reach the copy. Copying here, before the append, also means that a writer
    ///   waiting for room in a full log never holds a shard the checkpoint still needs (the
    ///   checkpoint takes a writer's copy without the shard's lock), so the checkpoint, and the
    ///   swap the writer waits for, can always finish.
    /// - After the append: the swap may have come between locking and appending; an operation
    ///   logged in the new log copies what is still protected, one logged before the swap
    ///   belongs in the copy and copies nothing.
    pub(crate) fn before_apply(
        &self,
        log: Option<usize>,
        ids: &[u16],
        arenas: &[RwLockWriteGuard<'_, Arena>],
    ) {
        if !self.cow_running.load(Ordering::Acquire) {
            return;
        }
        if log.is_some_and(|l| l != self.new_log.load(Ordering::Acquire)) {
            return;
        }
        for (&id, a) in ids.iter().zip(arenas) {
            let id = id as usize;
            // The shard's write lock is held: the checkpoint cannot be copying it now.
            if self.protected[id].load(Ordering::Acquire) {
                let copy = Arena::clone(a);
                if let Ok(mut slot) = self.copies[id].lock() {
                    *slot = Some(copy);
                }
                self.protected[id].store(false, Ordering::Release);
                self.writer_copies.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The copy of shard `id` for the running copy-on-write checkpoint: the writer's, or one
    /// made now under the shard's read lock.
    fn take_copy(&self, id: usize, shard: &RwLock<Arena>) -> Result<Arena> {
        // Copied by a writer already: its lock may be held by that writer for a while (waiting
        // for room in the log), and is not needed.
        if self.protected[id].load(Ordering::Acquire) {
            let g = shard.read().map_err(|_| poisoned())?;
            if self.protected[id].swap(false, Ordering::AcqRel) {
                self.checkpoint_copies.fetch_add(1, Ordering::Relaxed);
                return Ok(g.clone());
            }
        }
        self.copies[id]
            .lock()
            .map_err(|_| poisoned())?
            .take()
            .ok_or_else(|| {
                DipperError::Failed(format!(
                    "copy-on-write checkpoint: shard {id} was neither protected nor copied"
                ))
            })
    }

    /// End of a copy-on-write checkpoint (or its failure): nothing stays protected.
    fn cow_end(&self) {
        self.cow_running.store(false, Ordering::Release);
        for (p, c) in self.protected.iter().zip(&self.copies) {
            p.store(false, Ordering::Release);
            if let Ok(mut c) = c.lock() {
                *c = None;
            }
        }
    }

    /// For a quiescing checkpoint (not when closing, which holds the locks already): every
    /// shard's write lock, held by the caller until the root switch.
    pub(crate) fn quiesce<'a>(
        &self,
        shards: &'a [RwLock<Arena>],
        closing: bool,
    ) -> Result<Vec<RwLockWriteGuard<'a, Arena>>> {
        if closing || self.style() != CheckpointStyle::Quiesce.code() {
            return Ok(Vec::new());
        }
        let guards = shards
            .iter()
            .map(|s| s.write().map_err(|_| poisoned()))
            .collect::<Result<Vec<_>>>()?;
        self.quiesced.fetch_add(1, Ordering::Relaxed);
        Ok(guards)
    }

    fn stats(&self) -> AblationStats {
        AblationStats {
            writer_copies: self.writer_copies.load(Ordering::Relaxed),
            checkpoint_copies: self.checkpoint_copies.load(Ordering::Relaxed),
            cow_checkpoints: self.cow_checkpoints.load(Ordering::Relaxed),
            quiesced_checkpoints: self.quiesced.load(Ordering::Relaxed),
        }
    }
}

impl<M: Medium + Clone + Send + Sync + 'static, S: Machine> Dipper<M, S> {
    /// Select how checkpoints run (benchmarks only; see [`crate::ablation`]). Waits for a
    /// running checkpoint. Copy-on-write is refused for a store whose slots grow. Meant to be
    /// called once, before the store takes writes: an apply-first write already past its
    /// check when copy-on-write is selected is not refused.
    #[doc(hidden)]
    pub fn set_checkpoint_style(&self, style: CheckpointStyle) -> Result<()> {
        if style == CheckpointStyle::CopyOnWrite && self.inner.slots_grow {
            return Err(DipperError::Invalid {
                what: "checkpoint style",
                reason: "the copy-on-write checkpoint (ablation) needs slots that do not grow \
                         (a fixed-size pool)"
                    .into(),
            });
        }
        let _ck = self.inner.ckpt.lock().map_err(|_| poisoned())?;
        self.inner
            .ablation
            .style
            .store(style.code(), Ordering::Release);
        Ok(())
    }

    /// Counters of the ablation hooks (benchmarks only).
    #[doc(hidden)]
    pub fn ablation_stats(&self) -> AblationStats {
        self.inner.ablation.stats()
    }
}

impl<M: Medium + Clone + Send + Sync + 'static, S: Machine> Inner<M, S> {
    /// Steps 2 to 5 of a copy-on-write checkpoint, after the swap: each shard's copy (the
    /// writer's, or one made now) written whole into the slot the root does not point at, the
    /// root switch, the archived log emptied. The copies become the mirror.
    pub(crate) fn cow_checkpoint(
        &self,
        ck: &mut Checkpointer,
        old: usize,
        swap_us: u64,
        start: Instant,
    ) -> Result<CheckpointStats> {
        let r = self.cow_write(ck, old, swap_us, start);
        self.ablation.cow_end();
        r
    }

    fn cow_write(
        &self,
        ck: &mut Checkpointer,
        old: usize,
        swap_us: u64,
        start: Instant,
    ) -> Result<CheckpointStats> {
        let target = if ck.root.slot == SLOT_NONE {
            0
        } else {
            1 - ck.root.slot as usize
        };
        let geo = ck.geo[target];
        let number = ck.root.checkpoint + 1;
        let n = self.shards.len();
        // Shards not copied yet stand in as new arenas: the slot's header is rewritten with
        // each shard and is right once the last one is in (the root points elsewhere till then).
        let mut image: Vec<Arena> = (0..n).map(|_| Arena::new()).collect();
        let mut lists: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut map = SlotMap::empty(n);
        let mut pages = 0u64;
        for s in 0..n {
            let mut a = self.ablation.take_copy(s, &self.shards[s])?;
            let used = a.used_pages();
            if map.used() + used as u64 > geo.capacity {
                return Err(DipperError::OutOfSpace(format!(
                    "the copy-on-write image has outgrown shadow slot {target} ({} pages) at \
                     shard {s}; the operation logs keep every acknowledged write",
                    geo.capacity
                )));
            }
            // Whatever page tracking the copy carries is the frontend's, not the mirror's.
            a.stop_tracking();
            a.track_dirty();
            image[s] = a;
            lists[s] = (0..used).collect();
            let w = slot::write(
                &self.medium,
                &self.uuid,
                &geo,
                number,
                &image,
                Some(&lists),
                &mut map,
            )?;
            pages += w.pages;
            lists[s].clear();
        }
        ck.mirror = image;
        // The other slot's map says nothing about the new mirror: its next write is whole.
        ck.maps = [None, None];
        ck.maps[target] = Some(map);
        for bits in ck.dirty_since.iter_mut().flatten() {
            bits.clear();
        }
        ck.root.slot = target as u32;
        ck.root.checkpoint = number;
        ck.root.state = STATE_IDLE;
        ck.root.store(&self.medium, self.root_base, &self.uuid)?;
        self.logs[old].cleanup_all()?;
        self.ablation
            .cow_checkpoints
            .fetch_add(1, Ordering::Relaxed);
        Ok(CheckpointStats {
            number,
            records: 0,
            pages,
            bytes: pages * PAGE as u64,
            swap_us,
            total_ms: start.elapsed().as_millis() as u64,
            ..CheckpointStats::default()
        })
    }
}

/// Magic at the start of a physical record's operation bytes.
pub const PHYSICAL_MAGIC: [u8; 8] = *b"KVPHYS01";
/// Lines compared and logged by physical logging.
pub const LINE: usize = 64;

/// Physical (redo) logging over machine `S` (benchmarks only): see the module comment. Its
/// operations beginning with [`PHYSICAL_MAGIC`] are after-images; any other operation is
/// `S`'s, run as `S` runs it (so `S`'s operations must not begin with those eight bytes).
///
/// A physical record's operation bytes: the magic, a `u16` count of shard sections, and per
/// section a `u16` shard, the `u64` arena length after the operation, a `u32` count of ranges
/// and per range a `u64` offset, a `u32` length and the bytes (all little-endian).
#[derive(Debug)]
pub struct Physical<S> {
    inner: S,
    /// Per shard: the arena as the log describes it so far (what a write's changes are
    /// compared with).
    shadows: Vec<Mutex<Option<Arena>>>,
    logged: AtomicU64,
    records: AtomicU64,
}

impl<S: Machine> Physical<S> {
    /// Wrap `inner` for a store of `shards` shards.
    pub fn new(inner: S, shards: usize) -> Physical<S> {
        Physical {
            inner,
            shadows: (0..shards).map(|_| Mutex::new(None)).collect(),
            logged: AtomicU64::new(0),
            records: AtomicU64::new(0),
        }
    }

    /// The wrapped machine.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Physical records logged since open and their operation bytes.
    pub fn logged(&self) -> (u64, u64) {
        (
            self.records.load(Ordering::Relaxed),
            self.logged.load(Ordering::Relaxed),
        )
    }
}

fn corrupt(field: &'static str, expected: String, found: String) -> DipperError {
    DipperError::Corrupt {
        structure: "physical record",
        offset: 0,
        field,
        expected,
        found,
    }
}

/// A little-endian reader over a physical record with typed errors.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(corrupt(
                field,
                format!("{n} bytes at {}", self.at),
                format!("{} bytes left", self.b.len().saturating_sub(self.at)),
            ));
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u16(&mut self, field: &'static str) -> Result<u16> {
        let s = self.take(2, field)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }

    fn u32(&mut self, field: &'static str) -> Result<u32> {
        let s = self.take(4, field)?;
        Ok(u32::from_le_bytes(s.try_into().map_err(|_| poisoned())?))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64> {
        let s = self.take(8, field)?;
        Ok(u64::from_le_bytes(s.try_into().map_err(|_| poisoned())?))
    }
}

/// Give `arena` the length `len` (an operation grew or emptied it), keeping the bytes both
/// lengths have; with page tracking on, every page counts as written.
fn set_length(arena: &mut Arena, len: usize, ranges: &[(usize, &[u8])]) -> Result<()> {
    let mut bytes = vec![0u8; len];
    let keep = len.min(arena.len());
    bytes[..keep].copy_from_slice(&arena.image()[..keep]);
    // The ranges go in before the header is checked: they carry the header's new words.
    for &(off, data) in ranges {
        bytes[off..off + data.len()].copy_from_slice(data);
    }
    let tracked = !arena.take_dirty().is_empty() || {
        // `take_dirty` is empty both without tracking and with nothing written: tell them
        // apart by writing a word to itself.
        let w = arena.get_u64(0);
        arena.put_u64(0, w);
        !arena.take_dirty().is_empty()
    };
    let mut fresh = Arena::from_image(bytes)?;
    if tracked {
        fresh.track_dirty();
        let all = fresh.image().to_vec();
        fresh.write(0, &all);
    }
    *arena = fresh;
    Ok(())
}

/// Apply the section of physical record `op` for `shard` to `arena`.
fn apply_physical(shard: usize, arena: &mut Arena, op: &[u8]) -> Result<()> {
    let mut c = Cursor {
        b: op,
        at: PHYSICAL_MAGIC.len(),
    };
    let sections = c.u16("section count")?;
    for _ in 0..sections {
        let id = c.u16("shard")? as usize;
        let len = c.u64("arena length")? as usize;
        let count = c.u32("range count")? as usize;
        if len % PAGE != 0 || len == 0 || len > crate::arena::ARENA_BYTES_MAX {
            return Err(corrupt(
                "arena length",
                format!("a non-zero multiple of {PAGE}"),
                len.to_string(),
            ));
        }
        let mut ranges = Vec::with_capacity(count.min(1 << 16));
        for _ in 0..count {
            let off = c.u64("range offset")? as usize;
            let n = c.u32("range length")? as usize;
            let data = c.take(n, "range bytes")?;
            if off.checked_add(n).is_none_or(|e| e > len) {
                return Err(corrupt(
                    "range",
                    format!("within the arena's {len} bytes"),
                    format!("{n} bytes at {off}"),
                ));
            }
            ranges.push((off, data));
        }
        if id != shard {
            continue;
        }
        if arena.len() != len {
            set_length(arena, len, &ranges)?;
        } else {
            for (off, data) in ranges {
                arena.write(off, data);
            }
        }
    }
    if c.at != op.len() {
        return Err(corrupt(
            "length",
            format!("{} bytes", c.at),
            op.len().to_string(),
        ));
    }
    Ok(())
}

impl<S: Machine> Machine for Physical<S> {
    type Output = S::Output;

    fn init(&self, shard: usize, arena: &mut Arena) -> Result<()> {
        self.inner.init(shard, arena)
    }

    fn apply(&self, shard: usize, arena: &mut Arena, op: &[u8], out: &mut S::Output) -> Result<()> {
        if op.starts_with(&PHYSICAL_MAGIC) {
            apply_physical(shard, arena, op)
        } else {
            self.inner.apply(shard, arena, op, out)
        }
    }
}

/// Append to `rec` the ranges of `after` (pages `pages`) whose 64-byte lines differ from
/// `before`, and bring `before` up to date; returns the number of ranges.
fn diff_into(before: &mut Arena, after: &Arena, pages: &[usize], rec: &mut Vec<u8>) -> u32 {
    let mut count = 0u32;
    let mut push = |rec: &mut Vec<u8>, off: usize, bytes: &[u8]| {
        rec.extend_from_slice(&(off as u64).to_le_bytes());
        rec.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        rec.extend_from_slice(bytes);
        count += 1;
    };
    let same_len = before.len() == after.len();
    for &p in pages {
        let base = p * PAGE;
        let new = after.page(p);
        let old = (same_len || base + PAGE <= before.len()).then(|| before.page(p));
        let mut run: Option<usize> = None;
        for l in 0..PAGE / LINE {
            let differs = match old {
                Some(o) => o[l * LINE..(l + 1) * LINE] != new[l * LINE..(l + 1) * LINE],
                None => true,
            };
            match (differs, run) {
                (true, None) => run = Some(l),
                (false, Some(s)) => {
                    push(rec, base + s * LINE, &new[s * LINE..l * LINE]);
                    run = None;
                }
                _ => {}
            }
        }
        if let Some(s) = run {
            push(rec, base + s * LINE, &new[s * LINE..]);
        }
    }
    if same_len {
        for &p in pages {
            before.write(p * PAGE, after.page(p));
        }
    } else {
        *before = after.clone();
        before.stop_tracking();
    }
    count
}

/// Run `op` (an operation of `S`) on `shards` with physical logging: applied to the DRAM
/// shards under their write locks, then the bytes it changed logged and forced, then the
/// locks released (see [`Dipper::apply_then_log`]). A machine error leaves the arenas in a
/// state no record describes: the engine latches failed.
pub fn execute_physical<M, S>(
    d: &Dipper<M, Physical<S>>,
    shards: Option<&[u16]>,
    op: &[u8],
) -> Result<S::Output>
where
    M: Medium + Clone + Send + Sync + 'static,
    S: Machine,
{
    let phys = d.machine();
    d.apply_then_log(shards, |locked| {
        let mut out = S::Output::default();
        let mut rec = Vec::with_capacity(op.len() + 64);
        rec.extend_from_slice(&PHYSICAL_MAGIC);
        rec.extend_from_slice(&0u16.to_le_bytes());
        let mut sections = 0u16;
        let mut ids = Vec::new();
        for i in 0..locked.ids().len() {
            let id = locked.ids()[i];
            let Ok(mut shadow) = phys.shadows[id as usize].lock() else {
                locked.fail("a physical-logging shadow lock is poisoned".into());
                return (Err(poisoned()), None);
            };
            let a = locked.arena_mut(i);
            if shadow.is_none() {
                let mut copy = a.clone();
                copy.stop_tracking();
                *shadow = Some(copy);
            }
            a.track_dirty();
            let _ = a.take_dirty();
            if let Err(e) = phys.inner.apply(id as usize, a, op, &mut out) {
                // The shadow no longer matches what the arena may hold; the engine stops.
                *shadow = None;
                locked.fail(format!("applying an operation failed: {e}"));
                return (Err(e), None);
            }
            let pages = a.take_dirty();
            let Some(before) = shadow.as_mut() else {
                continue;
            };
            let head = rec.len();
            let resized = before.len() != a.len();
            rec.extend_from_slice(&id.to_le_bytes());
            rec.extend_from_slice(&(a.len() as u64).to_le_bytes());
            rec.extend_from_slice(&0u32.to_le_bytes());
            let ranges = diff_into(before, a, &pages, &mut rec);
            if ranges == 0 && !resized {
                rec.truncate(head);
                continue;
            }
            rec[head + 10..head + 14].copy_from_slice(&ranges.to_le_bytes());
            sections += 1;
            ids.push(id);
        }
        if sections == 0 {
            return (Ok(out), None);
        }
        rec[8..10].copy_from_slice(&sections.to_le_bytes());
        phys.records.fetch_add(1, Ordering::Relaxed);
        phys.logged.fetch_add(rec.len() as u64, Ordering::Relaxed);
        (Ok(out), Some((Some(ids), rec)))
    })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_logs_changed_lines_and_replays_to_the_same_bytes() {
        let mut before = Arena::new();
        let x = before.alloc_copy(&[7u8; 300]).expect("alloc");
        let mut after = before.clone();
        let mut shadow = before.clone();
        after.track_dirty();
        after.write(x as usize + 10, b"changed");
        let y = after
            .alloc_copy(&[9u8; 5000])
            .expect("alloc (grows the arena? no: 64 KiB)");
        after.set_user(1, y);
        let pages = after.take_dirty();
        let mut rec = Vec::new();
        rec.extend_from_slice(&PHYSICAL_MAGIC);
        rec.extend_from_slice(&1u16.to_le_bytes());
        rec.extend_from_slice(&0u16.to_le_bytes());
        rec.extend_from_slice(&(after.len() as u64).to_le_bytes());
        rec.extend_from_slice(&0u32.to_le_bytes());
        let n = diff_into(&mut shadow, &after, &pages, &mut rec);
        rec[20..24].copy_from_slice(&n.to_le_bytes());
        assert!(n >= 2, "the changed value and the new block at least: {n}");
        assert!(
            rec.len() < 5000 + 300 + 64 * 8,
            "lines, not pages: {} bytes",
            rec.len()
        );
        assert_eq!(shadow.image(), after.image(), "the shadow follows");
        let mut replayed = before.clone();
        apply_physical(0, &mut replayed, &rec).expect("apply");
        assert_eq!(replayed.image(), after.image());
        // Another shard's section changes nothing here.
        let mut other = before.clone();
        apply_physical(1, &mut other, &rec).expect("apply");
        assert_eq!(other.image(), before.image());
    }

    #[test]
    fn growth_and_bad_records_are_handled() {
        let mut before = Arena::new();
        let mut after = before.clone();
        after.track_dirty();
        let big = after.alloc_copy(&vec![3u8; 200_000]).expect("alloc");
        assert!(after.len() > before.len(), "grew");
        after.set_user(0, big);
        let pages = after.take_dirty();
        let mut rec = PHYSICAL_MAGIC.to_vec();
        rec.extend_from_slice(&1u16.to_le_bytes());
        rec.extend_from_slice(&0u16.to_le_bytes());
        rec.extend_from_slice(&(after.len() as u64).to_le_bytes());
        rec.extend_from_slice(&0u32.to_le_bytes());
        let n = diff_into(&mut before.clone(), &after, &pages, &mut rec);
        rec[20..24].copy_from_slice(&n.to_le_bytes());
        let mut tracked = before.clone();
        tracked.track_dirty();
        apply_physical(0, &mut tracked, &rec).expect("apply");
        assert_eq!(tracked.image(), after.image());
        assert_eq!(
            tracked.take_dirty().len(),
            after.pages(),
            "a tracked arena that changed length counts every page as written"
        );
        apply_physical(0, &mut before, &rec).expect("untracked");
        assert_eq!(before.image(), after.image());
        for cut in [9, 12, 20, rec.len() - 1] {
            let mut a = Arena::new();
            match apply_physical(0, &mut a, &rec[..cut]) {
                Err(DipperError::Corrupt { structure, .. }) => {
                    assert_eq!(structure, "physical record")
                }
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
        let mut long = rec.clone();
        long.push(0);
        assert!(apply_physical(0, &mut Arena::new(), &long).is_err());
    }
}
