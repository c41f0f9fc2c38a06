//! Protected heaps: a heap region kept with page checksums and parity (`integrity`).
//!
//! The mode is chosen when the heap is created and recorded in the integrity region's header;
//! every open ([`open_heap`], [`crate::HeapFile::open`], the C API, the CLI) opens the
//! protection again in that mode before the heap recovers, so recovery's own stores are
//! covered.
//!
//! - `off`: no integrity region.
//! - `lazy` (Vilamb): write tracking (userfaultfd write-protect, or mprotect) sees every store
//!   into the mapping; a background pass every period brings checksums and parity up to date.
//! - `eager` (TVARAK for transactions): the heap's own stores (undo and redo logs, lane states,
//!   allocator words) go through [`GuardMedium`], which keeps redundancy on every store as
//!   TVARAK's controller does; the stores into objects (transactional writes, fresh blocks,
//!   rollbacks) go straight to the medium, and at commit [`Guard`] hands each changed range
//!   with its old bytes (from the undo log, the copy a redo commit takes, or the copy of a
//!   fresh block taken when it was allocated) to [`integrity::Protected::committed`], which
//!   updates line checksums, page checksums and parity from `old ^ new`. Reads through the
//!   heap ([`RawHeap::read`], [`crate::Tx::get`], [`crate::Heap::get`]) verify each line.
//! - `txb-page` (baseline): stores are not followed one by one; at commit every page the
//!   transaction or the heap's own stores touched is recomputed with its stripe's parity.
//!
//! A program that stores into an object outside a transaction (a direct pointer, with no
//! `tx_add_range`) leaves that object's redundancy stale in eager and txb-page modes: the
//! scrubber reports it. Scrub and repair are meant for a quiet heap (no transaction open):
//! a transaction's stores are not in the redundancy before its commit.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use integrity::{Changed, CreateOptions, Mode, OpenOptions, OpenReport, Protected, Tracker};
use pmem::{Medium, Pool, Region};

use crate::error::{HeapError, Result};
use crate::raw::{Change, CommitObserver, RawHeap};

/// How a heap's redundancy is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Redundancy {
    /// None.
    Off,
    /// Write tracking and a background pass (Vilamb).
    Lazy,
    /// From each commit's diff, and on every store of the heap's own (TVARAK).
    Eager,
    /// Each commit recomputes the pages it touched and their parity (baseline).
    TxbPage,
}

impl Redundancy {
    /// Every mode, in the order the CLI lists them.
    pub const ALL: [Redundancy; 4] = [
        Redundancy::Off,
        Redundancy::Lazy,
        Redundancy::Eager,
        Redundancy::TxbPage,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Redundancy::Off => "off",
            Redundancy::Lazy => "lazy",
            Redundancy::Eager => "eager",
            Redundancy::TxbPage => "txb-page",
        }
    }

    /// Parse a name.
    pub fn parse(name: &str) -> Option<Redundancy> {
        Self::ALL.into_iter().find(|r| r.name() == name)
    }

    /// The integrity mode behind it (`None` for off).
    pub fn mode(self) -> Option<Mode> {
        match self {
            Redundancy::Off => None,
            Redundancy::Lazy => Some(Mode::Lazy),
            Redundancy::Eager => Some(Mode::Eager),
            Redundancy::TxbPage => Some(Mode::TxbPage),
        }
    }

    fn of_mode(mode: Mode) -> Redundancy {
        match mode {
            Mode::Off => Redundancy::Off,
            Mode::Lazy => Redundancy::Lazy,
            Mode::Eager => Redundancy::Eager,
            Mode::TxbPage => Redundancy::TxbPage,
        }
    }
}

/// A heap region's protection as recorded in its pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Recorded {
    /// The mode.
    pub redundancy: Redundancy,
    /// Lazy mode's period in milliseconds (0 when there is no integrity region).
    pub period_ms: u32,
}

/// Give the heap region `region` of `pool` redundancy in mode `redundancy` (nothing for off):
/// its integrity region is created and computed from the region's current contents, with the
/// mode (and `period_ms` for lazy) recorded for later opens.
pub fn protect<M: Medium>(
    pool: &mut Pool<M>,
    region: &str,
    redundancy: Redundancy,
    period_ms: Option<u32>,
) -> Result<()> {
    let Some(mode) = redundancy.mode() else {
        return Ok(());
    };
    let mut opts = CreateOptions {
        mode,
        ..CreateOptions::default()
    };
    if let Some(p) = period_ms {
        opts.period_ms = p;
    }
    integrity::create_in_pool(pool, region, &opts, &mut |_, _| {})?;
    Ok(())
}

/// The protection recorded for heap region `region` of `pool`: off if it has no integrity
/// region, else the mode in the integrity header's copy in force.
pub fn recorded<M: Medium>(pool: &Pool<M>, region: &str) -> Result<Recorded> {
    let place = match integrity::placement(pool, region) {
        Ok(p) => p,
        Err(integrity::IntegrityError::NotProtected(..)) => {
            return Ok(Recorded {
                redundancy: Redundancy::Off,
                period_ms: 0,
            });
        }
        Err(e) => return Err(e.into()),
    };
    let mut best: Option<integrity::header::Header> = None;
    let mut damage = Vec::new();
    for off in integrity::layout::HEADER_COPY_OFFSETS {
        let at = place.meta_offset as usize + off;
        let mut b = [0u8; integrity::layout::HEADER_BYTES];
        pool.medium().read(at, &mut b);
        match integrity::header::Header::decode(&b, &place.uuid, at as u64) {
            Ok(h) if best.as_ref().is_none_or(|b| h.seq > b.seq) => best = Some(h),
            Ok(_) => {}
            Err(c) => damage.push(c),
        }
    }
    let Some(h) = best else {
        return Err(HeapError::Corrupt(
            damage
                .into_iter()
                .next()
                .unwrap_or_else(|| pmem::Corruption {
                    structure: "integrity header".into(),
                    offset: place.meta_offset,
                    field: "magic",
                    expected: "a header".into(),
                    found: "none".into(),
                }),
        ));
    };
    let mode = Mode::from_code(h.mode).ok_or_else(|| {
        HeapError::corrupt(
            "integrity header",
            place.meta_offset,
            "mode",
            "a known mode code",
            h.mode,
        )
    })?;
    Ok(Recorded {
        redundancy: Redundancy::of_mode(mode),
        period_ms: h.period_ms,
    })
}

/// How to open a protected heap.
#[derive(Debug, Default)]
pub struct OpenProtection {
    /// Write tracking for lazy mode (required for it: a store into the mapping is seen only
    /// through it). Build it with [`integrity::tracker::best_for`] over the heap region.
    pub tracker: Option<Box<dyn Tracker>>,
    /// Run lazy mode's pass on a background thread every period (otherwise call
    /// [`Guard::protected`]`.run_pass()`).
    pub background: bool,
    /// Change lazy mode's period (recorded).
    pub period_ms: Option<u32>,
}

/// An open heap and its protection.
#[derive(Debug)]
pub struct Opened<M: Medium + Clone + 'static> {
    /// The heap (recovered).
    pub heap: RawHeap,
    /// The protection, `None` for off.
    pub guard: Option<Arc<Guard<M>>>,
    /// What opening the protection found and did (a resync after an unclean shutdown).
    pub report: Option<OpenReport>,
    /// The mode.
    pub redundancy: Redundancy,
}

/// Open the protection of heap region `region` of `pool` in its recorded mode, then the heap
/// on it (recovering interrupted transactions, whose stores the protection sees).
pub fn open_heap<M: Medium + Clone + 'static>(
    pool: &Pool<M>,
    region: &Region,
    opts: OpenProtection,
) -> Result<Opened<M>> {
    let rec = recorded(pool, &region.name)?;
    let plain: Arc<dyn Medium> = Arc::new(pool.medium().clone());
    let Some(mode) = rec.redundancy.mode() else {
        let heap = RawHeap::open(plain, region.offset, region.length)?;
        return Ok(Opened {
            heap,
            guard: None,
            report: None,
            redundancy: Redundancy::Off,
        });
    };
    if mode == Mode::Lazy && opts.tracker.is_none() {
        return Err(HeapError::invalid(
            "tracker",
            "a lazy-mode heap needs write tracking to open (stores into the mapping are seen only through it)",
        ));
    }
    let (prot, report) = integrity::open_in_pool(
        pool,
        &region.name,
        OpenOptions {
            mode: Some(mode),
            period_ms: opts.period_ms,
            tracker: opts.tracker,
            background: opts.background && mode == Mode::Lazy,
            ..OpenOptions::default()
        },
        &mut |_, _| {},
    )?;
    let guard = Arc::new(Guard {
        prot,
        redundancy: rec.redundancy,
        data_at: region.offset,
        data_len: region.length,
        dirty: Mutex::new(BTreeSet::new()),
        error: Mutex::new(None),
    });
    let heap = match mode {
        Mode::Lazy | Mode::Off => RawHeap::open(plain, region.offset, region.length)?,
        Mode::Eager | Mode::TxbPage => {
            let wrapped: Arc<dyn Medium> = Arc::new(GuardMedium {
                inner: pool.medium().clone(),
                guard: guard.clone(),
            });
            let mut heap = RawHeap::open(wrapped, region.offset, region.length)?;
            heap.set_data_medium(Some(plain));
            // Recovery's stores in txb-page mode were noted, not yet recomputed.
            guard.settle(&[])?;
            heap.set_observer(Some(guard.clone() as Arc<dyn CommitObserver>));
            heap
        }
    };
    Ok(Opened {
        heap,
        guard: Some(guard),
        report: Some(report),
        redundancy: rec.redundancy,
    })
}

/// A protected heap's redundancy: the commit observer of eager and txb-page modes, and the
/// handle to the region's [`Protected`] (scrub, repair, statistics).
pub struct Guard<M: Medium + 'static> {
    prot: Protected<M>,
    redundancy: Redundancy,
    data_at: u64,
    data_len: u64,
    /// Pages (of the region) the heap's own stores touched since the last commit (txb-page).
    dirty: Mutex<BTreeSet<u64>>,
    /// The first failure of a store through [`GuardMedium`] (which cannot return one),
    /// reported by the next commit.
    error: Mutex<Option<HeapError>>,
}

impl<M: Medium + 'static> std::fmt::Debug for Guard<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("redundancy", &self.redundancy)
            .field("data_at", &self.data_at)
            .finish_non_exhaustive()
    }
}

impl<M: Medium + 'static> Guard<M> {
    /// The region's protection.
    pub fn protected(&self) -> &Protected<M> {
        &self.prot
    }

    /// The mode.
    pub fn redundancy(&self) -> Redundancy {
        self.redundancy
    }

    /// Stop the protection's threads, run the final pass and record a clean shutdown. The
    /// heap must be closed (dropped) first.
    pub fn close(self) -> Result<()> {
        self.prot.close()?;
        Ok(())
    }

    fn region_range(&self, medium_offset: u64, len: u64) -> Option<u64> {
        (medium_offset >= self.data_at && medium_offset + len <= self.data_at + self.data_len)
            .then(|| medium_offset - self.data_at)
    }

    fn failed(&self, err: HeapError) {
        let mut e = self.error.lock().unwrap_or_else(|e| e.into_inner());
        e.get_or_insert(err);
    }

    /// A store of the heap's own, in eager mode: redundancy kept on the store.
    fn store(&self, inner: &M, at: usize, data: &[u8]) {
        let Some(off) = self.region_range(at as u64, data.len() as u64) else {
            inner.write(at, data);
            return;
        };
        match self.redundancy {
            Redundancy::Eager => {
                if let Err(e) = self.prot.write(off, data) {
                    // The heap's store must happen whatever the redundancy says.
                    let mut now = vec![0u8; data.len()];
                    inner.read(at, &mut now);
                    if now != data {
                        inner.write(at, data);
                    }
                    self.failed(e.into());
                }
            }
            _ => {
                inner.write(at, data);
                self.note_dirty(off, data.len() as u64);
            }
        }
    }

    /// Pages of `[off, off + len)` (region offsets) were stored to (txb-page).
    fn note_dirty(&self, off: u64, len: u64) {
        let page = pmem::layout::PAGE_SIZE as u64;
        let mut d = self.dirty.lock().unwrap_or_else(|e| e.into_inner());
        d.extend(off / page..(off + len).div_ceil(page));
    }

    /// Bring the redundancy up to date with `changes` (and, in txb-page mode, with the pages
    /// the heap's own stores touched).
    fn settle(&self, changes: &[Change<'_>]) -> Result<()> {
        // A store of the heap's own that could not keep its redundancy (the store itself
        // happened): its error comes back here.
        if let Some(e) = self.error.lock().unwrap_or_else(|e| e.into_inner()).take() {
            return Err(e);
        }
        let mut ranges = Vec::with_capacity(changes.len());
        for c in changes {
            let off = self.region_range(c.medium_offset, c.len).ok_or_else(|| {
                HeapError::invalid(
                    "change",
                    format!(
                        "{:#x} (+{}) is outside the heap region",
                        c.medium_offset, c.len
                    ),
                )
            })?;
            ranges.push(Changed {
                offset: off,
                len: c.len,
                old: c.old,
            });
        }
        match self.redundancy {
            Redundancy::TxbPage => {
                let page = pmem::layout::PAGE_SIZE as u64;
                let mut pages: BTreeSet<u64> =
                    std::mem::take(&mut *self.dirty.lock().unwrap_or_else(|e| e.into_inner()));
                for r in &ranges {
                    if r.len > 0 {
                        pages.extend(r.offset / page..(r.offset + r.len).div_ceil(page));
                    }
                }
                let pages: Vec<u64> = pages.into_iter().collect();
                self.prot.recompute_pages(&pages)?;
            }
            Redundancy::Eager => {
                self.prot.committed(&ranges)?;
            }
            Redundancy::Off | Redundancy::Lazy => {}
        }
        Ok(())
    }
}

impl<M: Medium + 'static> CommitObserver for Guard<M> {
    fn committed(&self, changes: &[Change<'_>]) -> Result<()> {
        self.settle(changes)
    }

    fn wants_fresh_old(&self) -> bool {
        self.redundancy == Redundancy::Eager
    }

    fn rolled_back(&self, changes: &[Change<'_>]) -> Result<()> {
        self.settle(changes)
    }

    fn verified_read(&self, medium_offset: u64, buf: &mut [u8]) -> Option<Result<()>> {
        if self.redundancy != Redundancy::Eager {
            return None;
        }
        let off = self.region_range(medium_offset, buf.len() as u64)?;
        Some(self.prot.verify_read(off, buf).map_err(HeapError::from))
    }
}

/// The medium a protected heap (eager, txb-page) is opened on: the pool's medium, with every
/// store into the heap region kept (eager) or noted (txb-page) by the [`Guard`]. Reads,
/// flushes and fences go straight through.
pub struct GuardMedium<M: Medium + 'static> {
    inner: M,
    guard: Arc<Guard<M>>,
}

impl<M: Medium + 'static> std::fmt::Debug for GuardMedium<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardMedium")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<M: Medium + 'static> Medium for GuardMedium<M> {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn domain(&self) -> pmem::Domain {
        self.inner.domain()
    }
    fn backing(&self) -> pmem::Backing {
        self.inner.backing()
    }
    fn label(&self) -> std::path::PathBuf {
        self.inner.label()
    }
    fn read(&self, offset: usize, buf: &mut [u8]) {
        self.inner.read(offset, buf)
    }
    fn write(&self, offset: usize, data: &[u8]) {
        self.guard.store(&self.inner, offset, data)
    }
    fn write_nontemporal(&self, offset: usize, data: &[u8]) {
        // Kept as a cached store plus a flush: the redundancy path stores through the cache.
        self.guard.store(&self.inner, offset, data);
        if let Err(e) = self.inner.flush(offset, data.len()) {
            self.guard.failed(e.into());
        }
    }
    fn load_u64(&self, offset: usize) -> u64 {
        self.inner.load_u64(offset)
    }
    fn store_u64(&self, offset: usize, value: u64) {
        match self.guard.region_range(offset as u64, 8) {
            Some(off) if self.guard.redundancy == Redundancy::Eager => {
                if let Err(e) = self.guard.prot.store_word(off, value) {
                    // `store_word` stores whatever it finds, unless it refused the range.
                    if self.inner.load_u64(offset) != value {
                        self.inner.store_u64(offset, value);
                    }
                    self.guard.failed(e.into());
                }
            }
            Some(off) => {
                self.inner.store_u64(offset, value);
                self.guard.note_dirty(off, 8);
            }
            None => self.inner.store_u64(offset, value),
        }
    }
    fn flush(&self, offset: usize, len: usize) -> pmem::Result<()> {
        self.inner.flush(offset, len)
    }
    fn write_back(&self, offset: usize, len: usize) -> pmem::Result<()> {
        self.inner.write_back(offset, len)
    }
    fn fence(&self) -> pmem::Result<()> {
        self.inner.fence()
    }
    fn persist(&self, offset: usize, len: usize) -> pmem::Result<()> {
        self.inner.persist(offset, len)
    }
    fn grow(&self, len: usize) -> pmem::Result<()> {
        self.inner.grow(len)
    }
    fn discard(&self, offset: usize, len: usize) -> pmem::Result<()> {
        self.inner.discard(offset, len)
    }
    fn back(&self, offset: usize, len: usize) -> pmem::Result<()> {
        self.inner.back(offset, len)
    }
    fn inject(&self, offset: usize, data: &[u8]) -> pmem::Result<()> {
        self.inner.inject(offset, data)
    }
}
