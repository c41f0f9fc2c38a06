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
    /// TxB-Object-Csums (baseline): a checksum per object a commit changed, in a side table,
    /// verified on transactional reads; no parity, so detection only.
    TxbObject,
}

impl Redundancy {
    /// Every mode, in the order the CLI lists them.
    pub const ALL: [Redundancy; 5] = [
        Redundancy::Off,
        Redundancy::Lazy,
        Redundancy::Eager,
        Redundancy::TxbObject,
        Redundancy::TxbPage,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Redundancy::Off => "off",
            Redundancy::Lazy => "lazy",
            Redundancy::Eager => "eager",
            Redundancy::TxbPage => "txb-page",
            Redundancy::TxbObject => "txb-object",
        }
    }

    /// Parse a name.
    pub fn parse(name: &str) -> Option<Redundancy> {
        Self::ALL.into_iter().find(|r| r.name() == name)
    }

    /// The integrity mode behind it (`None` for off and txb-object, which keep no pages).
    pub fn mode(self) -> Option<Mode> {
        match self {
            Redundancy::Off | Redundancy::TxbObject => None,
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
    if redundancy == Redundancy::TxbObject {
        return ObjTable::create(pool, region);
    }
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
    if pool.region(&objsums_name(region)?).is_some() {
        return Ok(Recorded {
            redundancy: Redundancy::TxbObject,
            period_ms: 0,
        });
    }
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
    if rec.redundancy == Redundancy::TxbObject {
        let table = ObjTable::open(pool, region)?;
        let heap = RawHeap::open(plain, region.offset, region.length)?;
        let guard = Arc::new(Guard {
            prot: None,
            objs: Some(table),
            redundancy: Redundancy::TxbObject,
            data_at: region.offset,
            data_len: region.length,
            dirty: Mutex::new(BTreeSet::new()),
            error: Mutex::new(None),
        });
        heap.set_observer(Some(guard.clone() as Arc<dyn CommitObserver>));
        return Ok(Opened {
            heap,
            guard: Some(guard),
            report: None,
            redundancy: Redundancy::TxbObject,
        });
    }
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
        prot: Some(prot),
        objs: None,
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
    prot: Option<Protected<M>>,
    /// The side table of txb-object mode.
    objs: Option<ObjTable<M>>,
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
    /// The region's page protection (`None` in txb-object mode, which has none).
    pub fn protected(&self) -> Option<&Protected<M>> {
        self.prot.as_ref()
    }

    /// The page protection, for the paths only the page modes take.
    fn prot(&self) -> Result<&Protected<M>> {
        self.prot.as_ref().ok_or_else(|| {
            HeapError::invalid("redundancy", "txb-object mode keeps no page redundancy")
        })
    }

    /// The mode.
    pub fn redundancy(&self) -> Redundancy {
        self.redundancy
    }

    /// Stop the protection's threads, run the final pass and record a clean shutdown. The
    /// heap must be closed (dropped) first.
    pub fn close(self) -> Result<()> {
        if let Some(p) = self.prot {
            p.close()?;
        }
        if let Some(t) = self.objs {
            t.set_state(OBJ_CLEAN)?;
        }
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
                if let Err(e) = self.prot().and_then(|p| Ok(p.write(off, data)?)) {
                    // The heap's store must happen whatever the redundancy says.
                    let mut now = vec![0u8; data.len()];
                    inner.read(at, &mut now);
                    if now != data {
                        inner.write(at, data);
                    }
                    self.failed(e);
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
        self.settle_as(changes, false)
    }

    /// [`Guard::settle`] for a commit, or (`rollback`) for an abort's rolled-back ranges.
    fn settle_as(&self, changes: &[Change<'_>], rollback: bool) -> Result<()> {
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
                self.prot()?.recompute_pages(&pages)?;
            }
            Redundancy::Eager if rollback => {
                self.prot()?.rolled_back(&ranges)?;
            }
            Redundancy::Eager => {
                self.prot()?.committed(&ranges)?;
            }
            Redundancy::TxbObject => {
                if let Some(t) = &self.objs {
                    for c in changes {
                        t.seal(c.medium_offset - self.data_at, c.len)?;
                    }
                    t.medium.fence()?;
                }
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
        self.settle_as(changes, true)
    }

    fn verified_read(&self, medium_offset: u64, buf: &mut [u8]) -> Option<Result<()>> {
        if self.redundancy != Redundancy::Eager {
            return None;
        }
        let off = self.region_range(medium_offset, buf.len() as u64)?;
        let prot = self.prot.as_ref()?;
        Some(prot.verify_read(off, buf).map_err(HeapError::from))
    }

    fn wants_blocks(&self) -> bool {
        self.redundancy == Redundancy::TxbObject
    }

    fn verified_block_read(
        &self,
        block: (u64, u64),
        medium_offset: u64,
        buf: &mut [u8],
    ) -> Option<Result<()>> {
        let t = self.objs.as_ref()?;
        let b = self.region_range(block.0, block.1)?;
        Some(t.verified_read(b, block.1, medium_offset - self.data_at, buf))
    }
}

/// The header of the txb-object side table, as documented in `docs/format/heap.md` (table
/// `object-checksum header`).
pub const OBJSUMS_HEADER_FIELDS: &[pmem::layout::Field] = &[
    pmem::layout::Field::new("magic", 0, 8),
    pmem::layout::Field::new("version", 8, 4),
    pmem::layout::Field::new("state", 12, 4),
    pmem::layout::Field::new("zone_off", 16, 8),
    pmem::layout::Field::new("units", 24, 8),
    pmem::layout::Field::new("crc", 32, 4),
];

/// Suffix of the side table's region: heap region `heap` keeps its object checksums in
/// `heap.objsums`.
const OBJSUMS_SUFFIX: &str = ".objsums";
/// First eight bytes of the side table's header.
const OBJ_MAGIC: [u8; 8] = *b"KVOBJCS\x01";
const OBJ_VERSION: u32 = 1;
/// Header state: in use (an open without a clean close since).
const OBJ_OPEN: u32 = 1;
/// Header state: closed cleanly, every entry current.
const OBJ_CLEAN: u32 = 2;
/// Bytes of the table's header page; the entries follow.
const OBJ_HEADER_PAGE: u64 = 4096;
/// Bytes of the header the CRC covers (the CRC follows).
const OBJ_HEADER_CRC_AT: usize = 32;
/// One entry per this many bytes of the data zone (the smallest block).
const OBJ_UNIT: u64 = 64;

/// The side table's region name for heap region `region`.
pub fn objsums_name(region: &str) -> Result<String> {
    let name = format!("{region}{OBJSUMS_SUFFIX}");
    pmem::directory::validate_name(&name).map_err(|reason| {
        HeapError::invalid(
            "region name",
            format!("`{region}` is too long for its object-checksum table `{name}`: {reason}"),
        )
    })?;
    Ok(name)
}

/// The txb-object side table (`docs/format/heap.md`, "Object checksums"): a header page, then
/// one little-endian u32 per 64 bytes of the heap's data zone, the checksum of the block that
/// starts there (0: none).
struct ObjTable<M: Medium> {
    medium: M,
    /// Medium offset of the table region.
    at: u64,
    /// Region offset of the heap's data zone.
    zone_off: u64,
    /// Entries.
    units: u64,
    /// Medium offset of the heap region.
    heap_at: u64,
}

impl<M: Medium> ObjTable<M> {
    fn bytes_for(units: u64) -> u64 {
        OBJ_HEADER_PAGE + (4 * units).div_ceil(4096) * 4096
    }

    fn header(zone_off: u64, units: u64, state: u32) -> [u8; OBJ_HEADER_CRC_AT + 4] {
        let mut h = [0u8; OBJ_HEADER_CRC_AT + 4];
        h[..8].copy_from_slice(&OBJ_MAGIC);
        h[8..12].copy_from_slice(&OBJ_VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&state.to_le_bytes());
        h[16..24].copy_from_slice(&zone_off.to_le_bytes());
        h[24..32].copy_from_slice(&units.to_le_bytes());
        let crc = crc32c::crc32c(&h[..OBJ_HEADER_CRC_AT]);
        h[OBJ_HEADER_CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Create the table of heap region `region` (formatted), every entry empty, closed clean.
    fn create(pool: &mut Pool<M>, region: &str) -> Result<()> {
        let r = crate::file::find_region(pool, region)?;
        let h = crate::raw::read_header(pool.medium(), r.offset, r.length)?;
        let units = h.geo.chunk_count * crate::layout::CHUNK_SIZE / OBJ_UNIT;
        let bytes = Self::bytes_for(units);
        let t = pool.create_region(
            &objsums_name(region)?,
            pmem::kinds::RAW,
            bytes,
            pmem::Alignment::Page,
        )?;
        let m = pool.medium();
        let zeros = vec![0u8; 1 << 16];
        let mut o = 0;
        while o < bytes {
            let n = (bytes - o).min(zeros.len() as u64) as usize;
            m.write((t.offset + o) as usize, &zeros[..n]);
            m.flush((t.offset + o) as usize, n)?;
            o += n as u64;
        }
        let head = Self::header(h.geo.zone_off, units, OBJ_CLEAN);
        m.write(t.offset as usize, &head);
        m.persist(t.offset as usize, head.len())?;
        Ok(())
    }

    fn set_state(&self, state: u32) -> Result<()> {
        let head = Self::header(self.zone_off, self.units, state);
        self.medium.write(self.at as usize, &head);
        self.medium.persist(self.at as usize, head.len())?;
        Ok(())
    }

    fn entry_at(&self, block: u64) -> Option<usize> {
        let i = block.checked_sub(self.zone_off)? / OBJ_UNIT;
        (i < self.units).then(|| (self.at + OBJ_HEADER_PAGE + 4 * i) as usize)
    }

    fn sum_of(block: u64, bytes: &[u8]) -> u32 {
        let s = crc32c::crc32c_append(crc32c::crc32c(&block.to_le_bytes()), bytes);
        if s == 0 { 1 } else { s }
    }

    /// Record the checksum of the block at region offset `block` (`len` bytes), flushed.
    fn seal(&self, block: u64, len: u64) -> Result<()> {
        let Some(at) = self.entry_at(block) else {
            return Ok(());
        };
        let mut bytes = vec![0u8; len as usize];
        self.medium
            .read((self.heap_at + block) as usize, &mut bytes);
        let s = Self::sum_of(block, &bytes);
        self.medium.write(at, &s.to_le_bytes());
        self.medium.flush(at, 4)?;
        Ok(())
    }

    /// Read `buf.len()` bytes at region offset `off` inside block `block` (`len` bytes),
    /// verified against the block's checksum when it has one.
    fn verified_read(&self, block: u64, len: u64, off: u64, buf: &mut [u8]) -> Result<()> {
        let mut bytes = vec![0u8; len as usize];
        self.medium
            .read((self.heap_at + block) as usize, &mut bytes);
        if let Some(at) = self.entry_at(block) {
            let mut e = [0u8; 4];
            self.medium.read(at, &mut e);
            let stored = u32::from_le_bytes(e);
            let computed = Self::sum_of(block, &bytes);
            if stored != 0 && stored != computed {
                return Err(HeapError::ObjectChecksum {
                    object: block,
                    len,
                    stored,
                    computed,
                });
            }
        }
        let from = (off - block) as usize;
        buf.copy_from_slice(&bytes[from..from + buf.len()]);
        Ok(())
    }
}

impl<M: Medium + Clone> ObjTable<M> {
    /// Open the table of heap region `heap`: check its header against the heap, and after an
    /// unclean shutdown empty every entry (a commit may have been cut between its commit point
    /// and its checksums: those objects are unverified until changed again), then mark it in
    /// use.
    fn open(pool: &Pool<M>, heap: &Region) -> Result<ObjTable<M>> {
        let name = objsums_name(&heap.name)?;
        let r = pool
            .region(&name)
            .cloned()
            .ok_or_else(|| pmem::PmemError::NoSuchRegion(name.clone()))?;
        let h = crate::raw::read_header(pool.medium(), heap.offset, heap.length)?;
        let units = h.geo.chunk_count * crate::layout::CHUNK_SIZE / OBJ_UNIT;
        let m = pool.medium().clone();
        let mut head = [0u8; OBJ_HEADER_CRC_AT + 4];
        if r.length < Self::bytes_for(units) {
            return Err(HeapError::corrupt(
                format!("object-checksum table `{name}`"),
                r.offset,
                "region length",
                Self::bytes_for(units),
                r.length,
            ));
        }
        m.read(r.offset as usize, &mut head);
        let crc = u32::from_le_bytes(head[OBJ_HEADER_CRC_AT..].try_into().unwrap_or([0; 4]));
        let state = u32::from_le_bytes(head[12..16].try_into().unwrap_or([0; 4]));
        let want = Self::header(h.geo.zone_off, units, state);
        let what = format!("object-checksum table `{name}` header");
        if head[..8] != OBJ_MAGIC {
            return Err(HeapError::corrupt(
                what,
                r.offset,
                "magic",
                "KVOBJCS 1",
                format!("{:02x?}", &head[..8]),
            ));
        }
        if crc != crc32c::crc32c(&head[..OBJ_HEADER_CRC_AT]) {
            return Err(HeapError::corrupt(
                what,
                r.offset + 32,
                "crc",
                "the CRC-32C of bytes 0..32",
                format!("{crc:#010x}"),
            ));
        }
        if head != want || !(state == OBJ_OPEN || state == OBJ_CLEAN) {
            return Err(HeapError::corrupt(
                what,
                r.offset + 8,
                "version/state/zone/units",
                format!(
                    "version {OBJ_VERSION}, state 1 or 2, zone at {:#x}, {units} entries",
                    h.geo.zone_off
                ),
                format!("{:02x?}", &head[8..32]),
            ));
        }
        let t = ObjTable {
            medium: m,
            at: r.offset,
            zone_off: h.geo.zone_off,
            units,
            heap_at: heap.offset,
        };
        if state != OBJ_CLEAN {
            let zeros = vec![0u8; 1 << 16];
            let bytes = 4 * units;
            let mut o = 0;
            while o < bytes {
                let n = (bytes - o).min(zeros.len() as u64) as usize;
                let at = (t.at + OBJ_HEADER_PAGE + o) as usize;
                t.medium.write(at, &zeros[..n]);
                t.medium.flush(at, n)?;
                o += n as u64;
            }
            t.medium.fence()?;
        }
        t.set_state(OBJ_OPEN)?;
        Ok(t)
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
                if let Err(e) = self
                    .guard
                    .prot()
                    .and_then(|p| Ok(p.store_word(off, value)?))
                {
                    // `store_word` stores whatever it finds, unless it refused the range.
                    if self.inner.load_u64(offset) != value {
                        self.inner.store_u64(offset, value);
                    }
                    self.guard.failed(e);
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
