//! The log: reserve, copy, complete, force, cleanup, and recovery.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use crate::error::{LogError, Result};
use crate::format::{Descriptor, LSN_MAX, RecordHeader, Superline, crc_seed, crc_start};
use crate::layout::{self, kinds, record as r, record_footprint};
use crate::mirror::{Extent, Mirror};
use crate::scan::{Found, Geometry, Judged, Stop, Verdict, Walker, judge};
use crate::sequencer::{Cursor, Sequencer};
use pmem::{Corruption, Medium, Uuid};

/// The built-in threshold: payloads of at least this many bytes are streamed (every line with
/// non-temporal stores) and persisted by the thread that completes them (one fence); smaller
/// ones are stored normally and flushed whole by the forcer, which fences once for all of them,
/// unless they were reserved for a `Sync` commit where the log streams such records
/// ([`Log::reserve_for`]). A log on a real mapping uses the threshold [`pmem::tune`] chose for the machine
/// ([`Log::nontemporal_bytes_min`]); a log on the persistence simulator uses this one, so crash
/// tests take the same paths on every machine.
pub const NONTEMPORAL_BYTES_MIN: usize = 1024;

/// Slots of the table of records their completing thread persisted (see `Log::self_persisted`).
const SELF_PERSISTED_SLOTS: usize = 4096;
/// Bits of a self-persisted slot that hold the record's footprint in lines.
const SELF_PERSISTED_LINE_BITS: u32 = 28;

/// How `append` (and `commit`) make a record durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForcePolicy {
    /// Force every record before returning.
    Sync,
    /// Force when the record's LSN is a multiple of F (Arcadia's frequency policy): at most
    /// F x T completed records are at risk with T writer threads.
    Frequency(u64),
    /// Group commit: force when G records have been appended since the last force (a shared
    /// counter; kept to compare against).
    Group(u64),
    /// Never force in `append`: the caller forces ([`Log::force`]) before it tells anyone the
    /// record is durable, so a batch of records gathered from many writers shares one force
    /// (group commit at the caller, as `kavach serve` does once per pass of a worker). Records
    /// are written with ordinary stores below the non-temporal threshold and written back by
    /// that force. Not accepted by [`ForcePolicy::parse`]: a caller that never forces would
    /// lose every record.
    Caller,
}

impl ForcePolicy {
    /// Parse `sync`, `frequency:F` or `group:G`.
    pub fn parse(s: &str) -> std::result::Result<ForcePolicy, String> {
        let number = |v: &str| {
            v.parse::<u64>()
                .ok()
                .filter(|&n| (1..=1 << 20).contains(&n))
                .ok_or_else(|| format!("`{v}` is not a count in 1..=1048576"))
        };
        match s.split_once(':') {
            None if s == "sync" => Ok(ForcePolicy::Sync),
            Some(("frequency", v)) => Ok(ForcePolicy::Frequency(number(v)?)),
            Some(("group", v)) => Ok(ForcePolicy::Group(number(v)?)),
            _ => Err(format!(
                "unknown force policy `{s}`: use sync, frequency:F or group:G"
            )),
        }
    }
}

impl std::fmt::Display for ForcePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ForcePolicy::Sync => write!(f, "sync"),
            ForcePolicy::Frequency(n) => write!(f, "frequency:{n}"),
            ForcePolicy::Group(n) => write!(f, "group:{n}"),
            ForcePolicy::Caller => write!(f, "caller"),
        }
    }
}

/// How to open a log.
#[derive(Debug, Clone, Copy)]
pub struct LogOptions {
    /// Open for reading only: nothing is written, not even recovery's jump record.
    pub read_only: bool,
    /// The previous session closed the log cleanly (its pool's clean-shutdown flag). Then no
    /// record can be torn, and a record failing its checks is damage: opening refuses (unless
    /// `truncate_damaged`). After an unclean shutdown the first failing record is taken for a
    /// record the crash tore, and the log ends before it.
    pub clean_shutdown: bool,
    /// Open for writing even over a damaged record after a clean shutdown, dropping it and
    /// everything after it.
    pub truncate_damaged: bool,
    /// How long `reserve` waits for `cleanup` when the ring is full before it fails.
    pub full_wait: Duration,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            read_only: false,
            clean_shutdown: false,
            truncate_damaged: false,
            full_wait: Duration::from_millis(1000),
        }
    }
}

/// What opening a log found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// Data records found between the head and the tail.
    pub records: u64,
    /// Ring bytes they (with padding and jumps) occupy.
    pub ring_bytes_used: u64,
    /// LSN of the oldest record (the superline's start LSN).
    pub start_lsn: u64,
    /// LSN the next record will carry.
    pub next_lsn: u64,
    /// Why the walk stopped.
    pub stop: Stop,
    /// The record the log ends before because it failed a check: one taken for a record torn
    /// by a crash (unclean shutdown), or a damaged one (then also in `damaged`). A writable
    /// open dropped it (and wrote a jump record over it); a read-only open only reports it.
    pub dropped: Option<Corruption>,
    /// A record recovery proved damaged rather than torn: it failed a check after a clean
    /// shutdown, or its LSN is at or below the superline's `durable_lsn`, or a whole record
    /// with a later LSN follows the place the walk ended. A writable open refuses such a log
    /// unless `truncate_damaged`; a read-only open, or `truncate_damaged`, reports it here.
    pub damaged: Option<Corruption>,
    /// Recovery wrote a jump record: LSNs continue from this one, past any a lost record holds.
    pub jumped_to: Option<u64>,
    /// A descriptor or superline copy failed its checks (and was rewritten, if writable).
    pub repaired: Vec<Corruption>,
    /// The replication epoch.
    pub epoch: u64,
    /// Ring offset of the head (the oldest live record), from the superline.
    pub head: u64,
}

/// A record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its LSN.
    pub lsn: u64,
    /// Medium offset of its header.
    pub offset: u64,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// What `append` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// LSN of the record.
    pub lsn: u64,
    /// The record (and every earlier one) was durable when `append` returned.
    pub durable: bool,
}

/// Counters, for INFO and benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LogStats {
    /// Bytes in the ring.
    pub ring_bytes: u64,
    /// Ring bytes between head and tail.
    pub used_bytes: u64,
    /// Oldest live LSN.
    pub head_lsn: u64,
    /// Next LSN to hand out.
    pub next_lsn: u64,
    /// Every LSN up to this one is durable.
    pub durable_lsn: u64,
    /// Replication epoch.
    pub epoch: u64,
    /// Largest payload.
    pub payload_bytes_max: u32,
}

#[derive(Debug)]
struct Tail {
    next_lsn: u64,
    pos: u64,
}

#[derive(Debug)]
struct Head {
    pos: u64,
    lsn: u64,
    reclaimable: BTreeSet<u64>,
    /// Every record up to this LSN is reclaimable ([`Log::cleanup_through`]).
    reclaim_through: u64,
    superline: Superline,
}

/// Arcadia's log on a region of a medium.
///
/// `reserve` and `force` are serialized; `copy` and `complete` run in parallel on different
/// records. Every method takes `&self`: share the log between threads by reference or `Arc`.
#[derive(Debug)]
pub struct Log<M: Medium> {
    medium: M,
    base: usize,
    desc: Descriptor,
    geo: Geometry,
    read_only: bool,
    failed: AtomicBool,
    tail: Mutex<Tail>,
    next_lsn: AtomicU64,
    head_pos: AtomicU64,
    head: Mutex<Head>,
    space: Mutex<()>,
    space_freed: Condvar,
    seq: Sequencer,
    group_pending: AtomicU64,
    full_wait: Duration,
    mirror: RwLock<Option<Arc<dyn Mirror>>>,
    /// Payloads of at least this many bytes take the non-temporal path.
    nt_min: usize,
    /// Records that a `Sync` append will force at once are streamed whole (every line with
    /// non-temporal stores, one fence by the completing thread) whatever their size: on
    /// flushed domains this is one write-back round trip and no read of the lines first.
    stream_sync: AtomicBool,
    /// Records whose completing thread persisted them itself (streamed, fenced), by LSN modulo
    /// [`SELF_PERSISTED_SLOTS`]: each slot holds the LSN's low 36 bits and the record's
    /// footprint in lines. The forcer consumes a slot that names the LSN it is at: it then has
    /// nothing to flush for the record and need not read its header back (streamed lines are
    /// no longer in the cache). A slot that names another LSN tells nothing: the forcer reads
    /// the header and writes back as usual.
    self_persisted: Box<[AtomicU64]>,
    /// The opening walk checked every record with an LSN in `[checked.0, checked.1)` (none
    /// before a walk): the recovery iterator does not check their CRCs again.
    checked: (u64, u64),
}

/// Rings of at least this many bytes have their pages mapped by a second thread while the
/// opening walk reads them ([`Medium::populate`]); on a smaller one the thread's start costs
/// more than the faults it saves.
const POPULATE_RING_MIN: u64 = 8 << 20;

/// Ring bytes populated per call: the most the walk waits for once it is done.
const POPULATE_STEP: u64 = 1 << 20;

/// Populate the ring's pages in walk order from virtual position `head`, until all of the ring
/// is done or `done` is set.
fn populate_ring<M: Medium>(medium: &M, geo: Geometry, head: u64, done: &AtomicBool) {
    let mut covered = 0u64;
    while covered < geo.ring_bytes && !done.load(Ordering::Relaxed) {
        let pos = head + covered;
        let n = POPULATE_STEP
            .min(geo.room_to_end(pos))
            .min(geo.ring_bytes - covered);
        medium.populate(geo.at(pos), n as usize);
        covered += n;
    }
}

/// The non-temporal threshold for a log on `medium`: the tuned one, or the built-in one on the
/// simulator.
fn nt_threshold<M: Medium>(medium: &M) -> usize {
    if medium.domain() == pmem::Domain::Sim || medium.backing() == pmem::Backing::Simulated {
        NONTEMPORAL_BYTES_MIN
    } else {
        pmem::tune::current().choices().nt_min
    }
}

/// Whether a log on `medium` streams the records of `Sync` appends whole: where each line is
/// written back and fenced (a mapping in the ADR domain, and the simulator, so crash tests take
/// the path) and the tuning did not turn it off. Under eADR a fence alone persists ordinary
/// stores, and under msync the page cache does the writing.
fn streams_sync<M: Medium>(medium: &M) -> bool {
    match medium.domain() {
        pmem::Domain::Sim => true,
        _ if medium.backing() == pmem::Backing::Simulated => true,
        pmem::Domain::Adr => pmem::tune::current().choices().stream_sync,
        pmem::Domain::Eadr | pmem::Domain::Msync => false,
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A fresh log UUID from the operating system.
pub(crate) fn random_uuid() -> Result<Uuid> {
    Uuid::random().map_err(|e| pmem::PmemError::io("cannot read", "/dev/urandom", e).into())
}

/// A walk of a log whose ring is being written in order from its head, as when a copy is
/// rebuilt from another: each record is checked (LSN, valid word, CRC) as soon as all its bytes
/// are in place, so checking runs alongside the copying, and [`Follow::finish`] gives what a
/// read-only open would find, for [`Log::open_walked`].
#[derive(Debug)]
pub struct Follow<'m, M: Medium> {
    medium: &'m M,
    base: usize,
    desc: Descriptor,
    walker: Walker<'m, M>,
    records: u64,
    stop: Option<Stop>,
}

impl<'m, M: Medium> Follow<'m, M> {
    /// A walk of the log described by `desc` (its ring, record bounds and CRC seed) in the
    /// region at `base` of `medium`, from ring position `head` expecting `start_lsn`.
    pub fn new(medium: &'m M, base: usize, desc: &Descriptor, head: u64, start_lsn: u64) -> Self {
        let geo = Geometry {
            ring: base + desc.ring_offset as usize,
            ring_bytes: desc.ring_bytes,
            payload_max: desc.payload_bytes_max,
            seed: crc_seed(&desc.log_uuid),
        };
        Follow {
            medium,
            base,
            desc: *desc,
            walker: Walker::new(medium, geo, head, start_lsn),
            records: 0,
            stop: None,
        }
    }

    /// Check every record lying wholly in the first `avail` ring bytes from the head (the
    /// bytes in place, which must not change any more), calling `visit(ring offset, LSN)` for
    /// each entry accepted. A record not wholly in place is left for a later call.
    pub fn advance(&mut self, avail: u64, visit: &mut dyn FnMut(u64, u64)) {
        let geo = self.walker.geo;
        while self.stop.is_none() {
            let walked = self.walker.walked;
            if walked + layout::RECORD_HEADER_BYTES as u64 > avail {
                return;
            }
            let mut hdr = [0u8; layout::RECORD_HEADER_BYTES];
            self.medium.read(geo.at(self.walker.pos), &mut hdr);
            let (h, _, _, _) = RecordHeader::parse(&hdr);
            // Bytes the step reads: the header, and the payload of a record whose header
            // could pass (an impossible length is refused from the header alone).
            let need = match h.kind {
                kinds::DATA | kinds::JUMP | kinds::VOID if h.length <= geo.payload_max => {
                    record_footprint(h.length as usize) as u64
                }
                kinds::PADDING => geo.room_to_end(self.walker.pos),
                _ => layout::RECORD_HEADER_BYTES as u64,
            };
            if walked + need > avail {
                return;
            }
            self.step(visit);
        }
    }

    fn step(&mut self, visit: &mut dyn FnMut(u64, u64)) {
        match self.walker.step(false) {
            Ok(found) => {
                self.records += u64::from(found.kind == kinds::DATA);
                visit((found.at - self.walker.geo.ring) as u64, found.lsn);
            }
            Err(stop) => self.stop = Some(stop),
        }
    }

    /// Once every byte of the region is in place (the ring, then the descriptors and
    /// superlines): walk on to the end and return what a read-only open (with
    /// `clean_shutdown` false) of the `len`-byte region finds. `None` if the region's
    /// metadata does not describe the log this walk followed (another geometry, head or start
    /// LSN): then walk it anew.
    pub fn finish(mut self, len: usize, visit: &mut dyn FnMut(u64, u64)) -> Option<Recovery> {
        let mut repaired = Vec::new();
        check_region(self.medium, self.base, len).ok()?;
        let desc = read_descriptor(self.medium, self.base, len as u64, true, &mut repaired).ok()?;
        let superline = read_superline(self.medium, self.base, &desc, true, &mut repaired).ok()?;
        let same = desc.ring_offset == self.desc.ring_offset
            && desc.ring_bytes == self.desc.ring_bytes
            && desc.payload_bytes_max == self.desc.payload_bytes_max
            && desc.log_uuid == self.desc.log_uuid
            && desc.keeps_durable_lsn() == self.desc.keeps_durable_lsn();
        let w = &self.walker;
        let started_here = w.pos - w.walked == superline.head;
        if !same || !started_here || self.walker_start_lsn() != superline.start_lsn {
            return None;
        }
        while self.stop.is_none() {
            self.step(visit);
        }
        let stop = self.stop.take()?;
        let opts = LogOptions {
            read_only: true,
            clean_shutdown: false,
            ..LogOptions::default()
        };
        let geo = self.walker.geo;
        let (damaged, dropped) = Log::<M>::verdict(
            self.medium,
            geo,
            &desc,
            &superline,
            &opts,
            false,
            &self.walker,
            &stop,
        )
        .ok()?;
        Some(Recovery {
            records: self.records,
            ring_bytes_used: self.walker.walked,
            start_lsn: superline.start_lsn,
            next_lsn: self.walker.expected,
            stop,
            dropped,
            damaged,
            jumped_to: None,
            repaired,
            epoch: superline.epoch,
            head: superline.head,
        })
    }

    fn walker_start_lsn(&self) -> u64 {
        self.walker.start_lsn
    }
}

/// Where an open gets its walk of the ring from.
pub(crate) enum Walk<'a> {
    /// Walk now, telling the visitor (if any) every entry accepted.
    Fresh(Option<&'a mut dyn FnMut(u64, u64)>),
    /// Take this earlier read-only walk (see [`Log::open_walked`]).
    Reuse(&'a Recovery),
    /// Walk now, handing every data record accepted, with its payload, to the replayer (see
    /// [`Log::open_replaying`]).
    Replay(&'a mut dyn FnMut(RecordRef<'_>)),
}

/// True if `w`, an earlier walk, still describes the log whose superline is `sl`: the same
/// head, start LSN and epoch, a stop the walk could have made, and at its tail still no record
/// carrying the LSN it ended expecting (a record appended since would stand there).
fn reusable<M: Medium>(medium: &M, geo: Geometry, sl: &Superline, w: &Recovery) -> bool {
    if w.head != sl.head || w.start_lsn != sl.start_lsn || w.epoch != sl.epoch {
        return false;
    }
    if w.ring_bytes_used > geo.ring_bytes || w.jumped_to.is_some() {
        return false;
    }
    if w.ring_bytes_used + layout::RECORD_ALIGN as u64 > geo.ring_bytes {
        return true;
    }
    let mut lsn = [0u8; 8];
    medium.read(
        geo.at(sl.head + w.ring_bytes_used) + r::LSN.offset,
        &mut lsn,
    );
    let found = u64::from_le_bytes(lsn);
    match &w.stop {
        Stop::Tail { found_lsn } => found == *found_lsn && found != w.next_lsn,
        _ => found == w.next_lsn,
    }
}

fn check_region<M: Medium>(medium: &M, base: usize, len: usize) -> Result<()> {
    let fits = base.checked_add(len).is_some_and(|end| end <= medium.len());
    if !fits || base % pmem::layout::PAGE_SIZE != 0 {
        return Err(LogError::Invalid {
            what: "log region",
            reason: format!(
                "[{base}, +{len}) is not a page-aligned range of the {}-byte medium",
                medium.len()
            ),
        });
    }
    // The metadata (descriptor and superline copies) is read before the descriptor can say
    // how long the ring is: a shorter region cannot hold a log.
    if len < layout::RING_OFFSET {
        return Err(LogError::Invalid {
            what: "log region",
            reason: format!(
                "{len} bytes cannot hold a log: its metadata alone takes {} bytes",
                layout::RING_OFFSET
            ),
        });
    }
    Ok(())
}

impl<M: Medium> Log<M> {
    /// Write a new, empty log over `[base, base + len)` of `medium` and open it.
    pub fn create(medium: M, base: usize, len: usize, full_wait: Duration) -> Result<Log<M>> {
        Self::create_with_uuid(medium, base, len, random_uuid()?, full_wait)
    }

    /// [`Log::create`] with a given log UUID (a backup takes its primary's).
    pub fn create_with_uuid(
        medium: M,
        base: usize,
        len: usize,
        uuid: Uuid,
        full_wait: Duration,
    ) -> Result<Log<M>> {
        Ok(Self::create_recovered(medium, base, len, uuid, full_wait)?.0)
    }

    /// [`Log::create_with_uuid`], with what the opening walk of the new log found.
    pub(crate) fn create_recovered(
        medium: M,
        base: usize,
        len: usize,
        uuid: Uuid,
        full_wait: Duration,
    ) -> Result<(Log<M>, Recovery)> {
        check_region(&medium, base, len)?;
        let desc =
            Descriptor::for_region(uuid, len as u64).map_err(|reason| LogError::Invalid {
                what: "log region",
                reason,
            })?;
        // First the old descriptors go, durably: an earlier log in this region (with the same
        // UUID, as when a backup is re-created from its primary) would otherwise accept the new
        // superlines below over a ring not yet zeroed, and show its records as the new log's.
        // Then the superlines (both, so no stale copy can win) and the zeroed ring, then the
        // descriptors: until those are durable, the region is not a log.
        let desc_end = layout::DESCRIPTOR_COPY_OFFSETS[1] + layout::DESCRIPTOR_BYTES;
        medium.write(
            base,
            &[0u8; layout::DESCRIPTOR_COPY_OFFSETS[1] + layout::DESCRIPTOR_BYTES],
        );
        medium.persist(base, desc_end)?;
        let mut meta = [0u8; layout::RING_OFFSET];
        for copy in 0..2 {
            let sl = Superline {
                sequence: 1 + copy as u64,
                head: 0,
                start_lsn: 1,
                epoch: layout::NEW_LOG_EPOCH,
                durable_lsn: 0,
            };
            let at = layout::SUPERLINE_COPY_OFFSETS[sl.copy()];
            meta[at..at + layout::SUPERLINE_BYTES].copy_from_slice(&sl.encode(&uuid));
        }
        medium.write(base, &meta);
        medium.flush(base, layout::RING_OFFSET)?;
        // Zero the ring: a record of an earlier log in this region could otherwise carry the
        // LSN a new record is expected to have (its CRC would fail, and read as damage).
        let zeros = vec![0u8; 1 << 20];
        let ring_end = base + desc.ring_offset as usize + desc.ring_bytes as usize;
        let mut at = base + desc.ring_offset as usize;
        while at < ring_end {
            let n = (ring_end - at).min(zeros.len());
            medium.write(at, &zeros[..n]);
            medium.flush(at, n)?;
            at += n;
        }
        medium.fence()?;
        for copy in 0..2 {
            let at = base + layout::DESCRIPTOR_COPY_OFFSETS[copy];
            medium.write(at, &desc.encode(copy));
            medium.flush(at, layout::DESCRIPTOR_BYTES)?;
        }
        medium.fence()?;
        let opts = LogOptions {
            clean_shutdown: true,
            full_wait,
            ..LogOptions::default()
        };
        Self::open(medium, base, len, &opts)
    }

    /// Open the log in `[base, base + len)` of `medium` and recover it: choose the descriptor
    /// and superline, walk the ring from the head to the tail, and (when writable) make sure no
    /// record lost in a crash can ever be taken for a new one.
    pub fn open(
        medium: M,
        base: usize,
        len: usize,
        opts: &LogOptions,
    ) -> Result<(Log<M>, Recovery)> {
        Self::open_with(medium, base, len, opts, false, Walk::Fresh(None))
    }

    /// [`Log::open`], calling `visit(ring offset, LSN)` for every entry the walk accepts (data,
    /// padding, jump and void records, in ring order from the head), so a caller that needs
    /// the places of the entries gets them from the one walk that checks them.
    pub fn open_visiting(
        medium: M,
        base: usize,
        len: usize,
        opts: &LogOptions,
        visit: &mut dyn FnMut(u64, u64),
    ) -> Result<(Log<M>, Recovery)> {
        Self::open_with(medium, base, len, opts, false, Walk::Fresh(Some(visit)))
    }

    /// [`Log::open`] handing every data record to `replay` from the walk that checks it, in
    /// LSN order, with its payload borrowed for the call: recovery in one pass over the ring
    /// (the CRC reads each payload into the cache and `replay` finds it there), where
    /// [`Log::open`] then [`Log::records`] read the ring twice.
    ///
    /// `replay` sees exactly the records [`Log::records`] would yield after the open, each
    /// already checked (LSN, valid word, CRC). It runs before the open decides, so when the
    /// open fails (a damaged log opened writable without `truncate_damaged`), `replay` has
    /// seen the intact records before the damage; the error then says where the damage is.
    pub fn open_replaying(
        medium: M,
        base: usize,
        len: usize,
        opts: &LogOptions,
        replay: &mut dyn FnMut(RecordRef<'_>),
    ) -> Result<(Log<M>, Recovery)> {
        Self::open_with(medium, base, len, opts, false, Walk::Replay(replay))
    }

    /// [`Log::open`] without walking the ring again: `walked` is what a read-only open (with
    /// `clean_shutdown` false) of the same region found, or a [`Follow`] of it, and nothing in
    /// the log may have been written since (bytes outside the descriptors, superlines and
    /// ring, such as a replication fence, do not count). Every record was checked by that
    /// walk; this open takes its result and, when writable, does what recovery writes after a
    /// walk (the jump record, the repaired metadata copies, the durable LSN).
    ///
    /// The metadata is read and checked again. The medium comes back (`Ok(Err(medium))`,
    /// nothing written) when the walk cannot be taken: `opts.clean_shutdown` is set (the
    /// walk's verdict depends on it), the superline no longer has the head, start LSN and
    /// epoch `walked` names, or its tail no longer holds what the walk stopped at. Then open
    /// it with a walk.
    #[allow(clippy::type_complexity)]
    pub fn open_walked(
        medium: M,
        base: usize,
        len: usize,
        opts: &LogOptions,
        walked: &Recovery,
    ) -> Result<std::result::Result<(Log<M>, Recovery), M>> {
        if opts.clean_shutdown {
            return Ok(Err(medium));
        }
        let (desc, superline) = Self::peek(&medium, base, len)?;
        let geo = Geometry {
            ring: base + desc.ring_offset as usize,
            ring_bytes: desc.ring_bytes,
            payload_max: desc.payload_bytes_max,
            seed: crc_seed(&desc.log_uuid),
        };
        if !reusable(&medium, geo, &superline, walked) {
            return Ok(Err(medium));
        }
        Self::open_with(medium, base, len, opts, false, Walk::Reuse(walked)).map(Ok)
    }

    /// Read and check a log's descriptor and superline without walking the ring: `Ok` exactly
    /// when a read-only [`Log::open`] of the region would succeed (that open fails only on the
    /// region's bounds and these two structures). Writes nothing.
    pub fn peek(medium: &M, base: usize, len: usize) -> Result<(Descriptor, Superline)> {
        check_region(medium, base, len)?;
        let mut repaired = Vec::new();
        let desc = read_descriptor(medium, base, len as u64, true, &mut repaired)?;
        let superline = read_superline(medium, base, &desc, true, &mut repaired)?;
        Ok((desc, superline))
    }

    /// [`Log::open`]; with `void_durable`, the superline's `durable_lsn` is not trusted (a
    /// flush-on-fail log after a missed window: it may have reached the medium before the
    /// records it names) and the log ends at the first record failing its checks, the
    /// checksummed prefix; the superline's claim is then brought down to what was found.
    pub(crate) fn open_inner(
        medium: M,
        base: usize,
        len: usize,
        opts: &LogOptions,
        void_durable: bool,
    ) -> Result<(Log<M>, Recovery)> {
        Self::open_with(medium, base, len, opts, void_durable, Walk::Fresh(None))
    }

    /// [`Log::open_inner`] with the walk's source.
    fn open_with(
        medium: M,
        base: usize,
        len: usize,
        opts: &LogOptions,
        void_durable: bool,
        walk: Walk<'_>,
    ) -> Result<(Log<M>, Recovery)> {
        check_region(&medium, base, len)?;
        // Read the metadata without writing: a bad copy is rewritten only once the walk has not
        // refused the log (a refused open writes nothing).
        let mut repaired = Vec::new();
        let desc = read_descriptor(&medium, base, len as u64, true, &mut repaired)?;
        let superline = read_superline(&medium, base, &desc, true, &mut repaired)?;
        let geo = Geometry {
            ring: base + desc.ring_offset as usize,
            ring_bytes: desc.ring_bytes,
            payload_max: desc.payload_bytes_max,
            seed: crc_seed(&desc.log_uuid),
        };
        // A walk made before is taken only if the log it walked is still the one here.
        let reused = match walk {
            Walk::Reuse(w) if !void_durable && reusable(&medium, geo, &superline, w) => Some(w),
            _ => None,
        };
        let (records, stop, tail_pos, walked, expected, damaged, dropped) = match reused {
            Some(w) => {
                if let Some(c) = &w.damaged {
                    if !opts.truncate_damaged && !opts.read_only {
                        return Err(LogError::Corrupt(c.clone()));
                    }
                }
                (
                    w.records,
                    w.stop.clone(),
                    superline.head + w.ring_bytes_used,
                    w.ring_bytes_used,
                    w.next_lsn,
                    w.damaged.clone(),
                    w.dropped.clone(),
                )
            }
            None => {
                let populated = AtomicBool::new(false);
                std::thread::scope(|scope| -> Result<_> {
                    // Another thread maps the ring's pages ahead of the walk, which then takes no
                    // page faults of its own on a large ring (docs/benchmarks.md).
                    if geo.ring_bytes >= POPULATE_RING_MIN
                        && std::thread::available_parallelism().is_ok_and(|n| n.get() > 1)
                    {
                        let (m, done) = (&medium, &populated);
                        let _ = std::thread::Builder::new()
                            .name("kavach-log-populate".into())
                            .spawn_scoped(scope, move || {
                                populate_ring(m, geo, superline.head, done)
                            });
                    }
                    let (mut visit, mut replay) = match walk {
                        Walk::Fresh(v) => (v, None),
                        Walk::Reuse(_) => (None, None),
                        Walk::Replay(r) => (None, Some(r)),
                    };
                    let mut walker = Walker::new(&medium, geo, superline.head, superline.start_lsn);
                    let mut records = 0u64;
                    let want_payload = replay.is_some();
                    // Nothing writes the ring before the open returns.
                    walker.check_in_place = true;
                    let stop = loop {
                        match walker.step(want_payload) {
                            Ok(found) => {
                                let data = found.kind == kinds::DATA;
                                records += u64::from(data);
                                if let Some(v) = visit.as_mut() {
                                    v((found.at - geo.ring) as u64, found.lsn);
                                }
                                if let (true, Some(r)) = (data, replay.as_mut()) {
                                    r(RecordRef {
                                        lsn: found.lsn,
                                        offset: found.at as u64,
                                        payload: walker.payload(),
                                    });
                                }
                            }
                            Err(stop) => break stop,
                        }
                    };
                    populated.store(true, Ordering::Relaxed);
                    let (damaged, dropped) = Self::verdict(
                        &medium,
                        geo,
                        &desc,
                        &superline,
                        opts,
                        void_durable,
                        &walker,
                        &stop,
                    )?;
                    Ok((
                        records,
                        stop,
                        walker.pos,
                        walker.walked,
                        walker.expected,
                        damaged,
                        dropped,
                    ))
                })?
            }
        };
        if !opts.read_only && !repaired.is_empty() {
            // The same choices again, now writing: rewrite each bad copy from the good one.
            read_descriptor(&medium, base, len as u64, false, &mut Vec::new())?;
            read_superline(&medium, base, &desc, false, &mut Vec::new())?;
        }
        let (mut tail_pos, mut next_lsn) = (tail_pos, expected);
        let mut recovery = Recovery {
            records,
            ring_bytes_used: walked,
            start_lsn: superline.start_lsn,
            next_lsn,
            stop,
            dropped,
            damaged,
            jumped_to: None,
            repaired,
            epoch: superline.epoch,
            head: superline.head,
        };
        // After an unclean shutdown, records reserved before the crash may lie past the tail,
        // some of them whole. A jump record moves the LSNs on past any of them, so none can
        // ever pass for a record written later. A full ring has no room for such records.
        // A dropped record (torn, or damaged and truncated on request) may have whole records
        // after it too.
        let jump = !opts.clean_shutdown || recovery.dropped.is_some();
        if !opts.read_only && jump && walked < desc.ring_bytes {
            let to = next_lsn + desc.ring_bytes / layout::RECORD_ALIGN as u64 + 1;
            write_jump(&medium, &geo, tail_pos, next_lsn, to)?;
            tail_pos += layout::RECORD_ALIGN as u64;
            next_lsn = to;
            recovery.jumped_to = Some(to);
            recovery.next_lsn = to;
        }
        let mut log = Self::assemble(medium, base, desc, geo, superline, tail_pos, next_lsn, opts);
        // Every record the walk accepted passed its checks: the recovery iterator takes them
        // as checked (one validation pass per open).
        log.checked = (superline.start_lsn, expected);
        if void_durable && !opts.read_only && superline.durable_lsn >= next_lsn {
            // The claim named records the missed window lost: bring it down to the prefix.
            let mut h = lock(&log.head);
            let sl = Superline {
                durable_lsn: next_lsn - 1,
                ..h.superline
            };
            log.write_superline(&mut h, sl)?;
        }
        // Every record the walk accepted (and the jump) is durable: say so in the superline, so
        // that damage to any of them is never taken for a tail torn by a later crash.
        if !opts.read_only && next_lsn > 1 {
            log.record_durable(next_lsn - 1)?;
        }
        Ok((log, recovery))
    }

    /// What recovery makes of the place a walk stopped (see `judge`): the damaged and the
    /// dropped record. A damaged log is refused here when writable and not `truncate_damaged`.
    #[allow(clippy::too_many_arguments)]
    fn verdict(
        medium: &M,
        geo: Geometry,
        desc: &Descriptor,
        superline: &Superline,
        opts: &LogOptions,
        void_durable: bool,
        walker: &Walker<'_, M>,
        stop: &Stop,
    ) -> Result<(Option<Corruption>, Option<Corruption>)> {
        let expected = walker.expected;
        let stop_at = geo.at(walker.pos);
        let durable_known = if desc.keeps_durable_lsn() && !void_durable {
            superline.durable_lsn
        } else {
            0
        };
        let recorded_end = desc.keeps_durable_lsn() && expected == durable_known + 1;
        let later = if opts.clean_shutdown
            && matches!(stop, Stop::Tail { .. })
            && expected > durable_known
            && !recorded_end
        {
            crate::scan::later_records(medium, geo, walker.pos, walker.walked, expected, 1)
                .into_iter()
                .next()
        } else {
            None
        };
        let verdict = judge(&Judged {
            stop,
            expected,
            stop_at,
            clean_shutdown: opts.clean_shutdown,
            durable_lsn: durable_known,
            later: later.as_ref(),
        });
        Ok(match verdict {
            Verdict::End => (None, None),
            Verdict::Torn(c) => (None, Some(c)),
            Verdict::Damage(c) => {
                if !opts.truncate_damaged && !opts.read_only {
                    return Err(LogError::Corrupt(c));
                }
                (Some(c.clone()), Some(c))
            }
        })
    }

    /// The log object over a recovered (or resumed) state; writes nothing.
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        medium: M,
        base: usize,
        desc: Descriptor,
        geo: Geometry,
        superline: Superline,
        tail_pos: u64,
        next_lsn: u64,
        opts: &LogOptions,
    ) -> Log<M> {
        let seq = Sequencer::new(
            desc.ring_bytes / layout::RECORD_ALIGN as u64,
            next_lsn,
            tail_pos,
        );
        Log {
            nt_min: nt_threshold(&medium),
            stream_sync: AtomicBool::new(streams_sync(&medium)),
            self_persisted: (0..SELF_PERSISTED_SLOTS)
                .map(|_| AtomicU64::new(0))
                .collect(),
            checked: (0, 0),
            seq,
            medium,
            base,
            desc,
            geo,
            read_only: opts.read_only,
            failed: AtomicBool::new(false),
            tail: Mutex::new(Tail {
                next_lsn,
                pos: tail_pos,
            }),
            next_lsn: AtomicU64::new(next_lsn),
            head_pos: AtomicU64::new(superline.head),
            head: Mutex::new(Head {
                pos: superline.head,
                lsn: superline.start_lsn,
                reclaimable: BTreeSet::new(),
                reclaim_through: 0,
                superline,
            }),
            space: Mutex::new(()),
            space_freed: Condvar::new(),
            group_pending: AtomicU64::new(0),
            full_wait: opts.full_wait,
            mirror: RwLock::new(None),
        }
    }

    /// Resume a log from a flush-on-fail image whose save completed: the tail comes from the
    /// save's hints (`tail_pos`, `next_lsn`), the ring is not walked, nothing is written.
    /// The medium back when the hints do not fit the log found (the caller walks instead): the next
    /// LSN below the head's (or past the largest), a tail outside one ring from the head or
    /// not record-aligned, or a record with the next LSN already at the tail.
    pub(crate) fn open_resumed(
        medium: M,
        base: usize,
        len: usize,
        opts: &LogOptions,
        tail_pos: u64,
        next_lsn: u64,
    ) -> Result<std::result::Result<Log<M>, M>> {
        check_region(&medium, base, len)?;
        let mut repaired = Vec::new();
        let desc = read_descriptor(&medium, base, len as u64, true, &mut repaired)?;
        let superline = read_superline(&medium, base, &desc, true, &mut repaired)?;
        if !repaired.is_empty() {
            // A bad copy in a saved image is damage: let the walk (and its checks) decide.
            return Ok(Err(medium));
        }
        let geo = Geometry {
            ring: base + desc.ring_offset as usize,
            ring_bytes: desc.ring_bytes,
            payload_max: desc.payload_bytes_max,
            seed: crc_seed(&desc.log_uuid),
        };
        let used = tail_pos.wrapping_sub(superline.head);
        let fits = next_lsn >= superline.start_lsn
            && tail_pos >= superline.head
            && used <= desc.ring_bytes
            && tail_pos % layout::RECORD_ALIGN as u64 == 0
            && next_lsn <= LSN_MAX;
        if !fits {
            return Ok(Err(medium));
        }
        if used < desc.ring_bytes {
            let mut lsn = [0u8; 8];
            medium.read(geo.at(tail_pos) + r::LSN.offset, &mut lsn);
            if u64::from_le_bytes(lsn) == next_lsn {
                return Ok(Err(medium));
            }
        }
        Ok(Ok(Self::assemble(
            medium, base, desc, geo, superline, tail_pos, next_lsn, opts,
        )))
    }

    /// The save's resume hints: the tail's ring position and the next LSN. Refused unless the
    /// log is at a safe point: every reserved record complete (no append between `reserve`
    /// and `complete`, which the writers' gate guarantees).
    pub fn resume_hints(&self) -> std::result::Result<[u64; 2], String> {
        let t = lock(&self.tail);
        if !self.seq.complete_through(t.next_lsn) {
            return Err(format!(
                "not at a safe point: a record below LSN {} is reserved but not complete",
                t.next_lsn
            ));
        }
        Ok([t.pos, t.next_lsn])
    }

    /// The medium.
    pub fn medium(&self) -> &M {
        &self.medium
    }

    pub(crate) fn geometry(&self) -> Geometry {
        self.geo
    }

    /// The descriptor.
    pub fn descriptor(&self) -> &Descriptor {
        &self.desc
    }

    /// Medium offset of the log region.
    pub fn base(&self) -> usize {
        self.base
    }

    /// Payloads of at least this many bytes are copied with non-temporal stores (the threshold
    /// [`pmem::tune`] chose for this machine; [`NONTEMPORAL_BYTES_MIN`] on the simulator;
    /// `usize::MAX`: never).
    pub fn nontemporal_bytes_min(&self) -> usize {
        self.nt_min
    }

    /// Largest payload a record may have.
    pub fn payload_bytes_max(&self) -> u32 {
        self.desc.payload_bytes_max
    }

    /// Whether an earlier persist failed, latching the log: every write is refused until it
    /// is opened again.
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    fn writable(&self) -> Result<()> {
        if self.read_only {
            return Err(LogError::ReadOnly);
        }
        if self.failed.load(Ordering::Acquire) {
            return Err(LogError::Failed);
        }
        Ok(())
    }

    /// Ship everything this log makes durable from now on through `mirror` (replication).
    /// Install it before the first write that must be replicated.
    pub fn set_mirror(&self, mirror: Option<Arc<dyn Mirror>>) {
        *self.mirror.write().unwrap_or_else(|p| p.into_inner()) = mirror;
    }

    fn mirror(&self) -> Option<Arc<dyn Mirror>> {
        self.mirror
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Persist locally with `flush_local`, through the mirror if there is one. A failure of
    /// either latches the log failed.
    fn persist_through_mirror(
        &self,
        extents: &[Extent],
        last_lsn: u64,
        flush_local: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()> {
        let r = match self.mirror() {
            Some(m) => m.replicate(extents, last_lsn, flush_local),
            None => flush_local(),
        };
        if r.is_err() {
            self.failed.store(true, Ordering::Release);
        }
        r
    }

    fn extent(&self, at: usize, len: usize) -> Extent {
        let mut bytes = vec![0u8; len];
        self.medium.read(at, &mut bytes);
        Extent {
            offset: (at - self.base) as u64,
            bytes,
        }
    }

    fn latch<T>(&self, r: pmem::Result<T>) -> Result<T> {
        r.map_err(|e| {
            self.failed.store(true, Ordering::Release);
            LogError::Pmem(e)
        })
    }

    /// Reserve a record of `length` payload bytes: its LSN and its place in the ring. Waits up
    /// to the configured time for `cleanup` when the ring is full, then fails with
    /// [`LogError::Full`].
    pub fn reserve(&self, length: usize) -> Result<Reservation<'_, M>> {
        self.reserve_streamed(length, length >= self.nt_min)
    }

    /// [`Log::reserve`] for a record that will be committed with `policy`: a record that a
    /// [`ForcePolicy::Sync`] commit forces at once is streamed whole and persisted by
    /// [`Reservation::complete`] itself (where the log streams such records: see
    /// [`Log::streams_sync_records`]), so the force that follows has nothing left to flush.
    pub fn reserve_for(&self, length: usize, policy: ForcePolicy) -> Result<Reservation<'_, M>> {
        let streamed = length >= self.nt_min
            || (policy == ForcePolicy::Sync && self.stream_sync.load(Ordering::Relaxed));
        self.reserve_streamed(length, streamed)
    }

    /// Whether records reserved for a [`ForcePolicy::Sync`] commit are streamed whole
    /// ([`Log::reserve_for`]).
    pub fn streams_sync_records(&self) -> bool {
        self.stream_sync.load(Ordering::Relaxed)
    }

    /// Stop streaming the records of `Sync` appends whole: in flush on fail the caches are
    /// written back at a power failure, so ordinary stores, unflushed, are the cheaper path
    /// (as under eADR).
    pub(crate) fn keep_sync_records_in_cache(&self) {
        self.stream_sync.store(false, Ordering::Relaxed);
    }

    fn reserve_streamed(&self, length: usize, streamed: bool) -> Result<Reservation<'_, M>> {
        self.writable()?;
        if length > self.desc.payload_bytes_max as usize {
            return Err(LogError::TooLarge {
                length: length as u64,
                max: self.desc.payload_bytes_max,
            });
        }
        let footprint = record_footprint(length) as u64;
        let ring = self.desc.ring_bytes;
        let mut started: Option<Instant> = None;
        loop {
            let mut tail = lock(&self.tail);
            let to_end = self.geo.room_to_end(tail.pos);
            let pad = if footprint > to_end { to_end } else { 0 };
            let needed = pad + footprint;
            let head = self.head_pos.load(Ordering::Acquire);
            let used = tail.pos - head;
            if used + needed <= ring {
                if tail.next_lsn + 2 >= LSN_MAX {
                    return Err(LogError::Invalid {
                        what: "LSN",
                        reason: "the log has handed out every LSN".into(),
                    });
                }
                if pad > 0 {
                    // The padding carries the LSN of the record after it and needs no
                    // completion of its own: it is written before that record is reserved.
                    self.write_padding(tail.pos, tail.next_lsn, pad);
                    tail.pos += pad;
                }
                let lsn = tail.next_lsn;
                let at = self.geo.at(tail.pos);
                tail.next_lsn += 1;
                tail.pos += footprint;
                self.next_lsn.store(tail.next_lsn, Ordering::Release);
                drop(tail);
                return Ok(Reservation {
                    log: self,
                    lsn,
                    at,
                    length,
                    crc: crc_start(self.geo.seed, lsn, length as u32, kinds::DATA),
                    crc_upto: 0,
                    nontemporal: streamed,
                    mixed: false,
                    line0: [0; layout::RECORD_ALIGN],
                    pending: [0; layout::RECORD_ALIGN],
                    pending_line: 0,
                    completed: false,
                });
            }
            drop(tail);
            let start = *started.get_or_insert_with(Instant::now);
            let waited = start.elapsed();
            if waited >= self.full_wait {
                return Err(LogError::Full {
                    needed,
                    free: ring - used,
                    ring,
                    waited_ms: waited.as_millis() as u64,
                });
            }
            let guard = lock(&self.space);
            if self.head_pos.load(Ordering::Acquire) == head {
                let _ = self
                    .space_freed
                    .wait_timeout(guard, self.full_wait - waited)
                    .unwrap_or_else(|p| p.into_inner());
            }
        }
    }

    fn write_padding(&self, pos: u64, lsn: u64, pad: u64) {
        let length = (pad - layout::RECORD_HEADER_BYTES as u64) as u32;
        let header = RecordHeader {
            lsn,
            length,
            kind: kinds::PADDING,
            payload_crc: crc_start(self.geo.seed, lsn, length, kinds::PADDING),
        };
        self.medium.write(self.geo.at(pos), &header.encode());
    }

    /// Make every record up to `lsn` durable if `lsn` is a multiple of `freq` (with `freq` 1:
    /// always). Waits for every earlier record to be completed and persists them first, so the
    /// durable records are always a prefix. Returns whether the records are durable now.
    pub fn force(&self, lsn: u64, freq: u64) -> Result<bool> {
        if freq == 0 {
            return Err(LogError::Invalid {
                what: "force frequency",
                reason: "0 (use 1 to force every record)".into(),
            });
        }
        self.reserved(lsn)?;
        if freq > 1 && lsn % freq != 0 {
            return Ok(self.seq.durable() >= lsn);
        }
        self.force_now(lsn)?;
        Ok(true)
    }

    /// Refuse an LSN no reservation has handed out yet.
    fn reserved(&self, lsn: u64) -> Result<()> {
        if lsn >= self.next_lsn() {
            return Err(LogError::BadLsn {
                lsn,
                reason: "not reserved yet".into(),
            });
        }
        Ok(())
    }

    fn force_now(&self, lsn: u64) -> Result<()> {
        self.writable()?;
        self.seq
            .force(lsn, |cursor, last| self.persist_records(cursor, last))
            .map(|_| ())
    }

    /// Group commit: count this record; when G have gathered, force them all.
    pub fn force_group(&self, lsn: u64, group: u64) -> Result<bool> {
        let pending = self.group_pending.fetch_add(1, Ordering::AcqRel) + 1;
        if pending < group.max(1) {
            return Ok(self.seq.durable() >= lsn);
        }
        self.group_pending.store(0, Ordering::Release);
        self.force(lsn, 1)
    }

    /// Force by policy.
    pub fn commit(&self, lsn: u64, policy: ForcePolicy) -> Result<bool> {
        match policy {
            ForcePolicy::Sync => self.force(lsn, 1),
            ForcePolicy::Frequency(f) => self.force(lsn, f),
            ForcePolicy::Group(g) => self.force_group(lsn, g),
            ForcePolicy::Caller => {
                self.reserved(lsn)?;
                Ok(self.seq.durable() >= lsn)
            }
        }
    }

    /// Note that the completing thread persisted record `lsn`, of `footprint` bytes, itself
    /// (streamed and fenced).
    fn mark_self_persisted(&self, lsn: u64, footprint: usize) {
        let lines = (footprint / layout::RECORD_ALIGN) as u64;
        if lines == 0 || lines >= 1 << SELF_PERSISTED_LINE_BITS {
            return;
        }
        let slot = &self.self_persisted[(lsn % SELF_PERSISTED_SLOTS as u64) as usize];
        slot.store((lsn << SELF_PERSISTED_LINE_BITS) | lines, Ordering::Release);
    }

    /// The footprint of record `lsn` if its completing thread persisted it, and its slot.
    fn self_persisted(&self, lsn: u64) -> Option<(u64, &AtomicU64, u64)> {
        let slot = &self.self_persisted[(lsn % SELF_PERSISTED_SLOTS as u64) as usize];
        let v = slot.load(Ordering::Acquire);
        let lines = v & ((1 << SELF_PERSISTED_LINE_BITS) - 1);
        let named = v >> SELF_PERSISTED_LINE_BITS;
        let ours = (lsn << SELF_PERSISTED_LINE_BITS) >> SELF_PERSISTED_LINE_BITS;
        (lines != 0 && named == ours).then_some((lines * layout::RECORD_ALIGN as u64, slot, v))
    }

    /// The forcer's work: flush what `complete` left in the cache for records
    /// `cursor.next..=last`, then one fence; with a mirror, ship the records' bytes too.
    fn persist_records(&self, cursor: &mut Cursor, last: u64) -> Result<()> {
        let mut pos = cursor.pos;
        let mut lsn = cursor.next;
        let mirrored = self.mirror().is_some();
        // Without a mirror, coalesced ranges are written back as they are found (one open run,
        // no allocation); with one, they are kept to write back after the records ship, and
        // every forced byte is kept to ship.
        let mut open: Option<(usize, usize)> = None;
        let mut runs: Vec<(usize, usize)> = Vec::new();
        let mut ship: Vec<(usize, usize)> = Vec::new();
        let push = |v: &mut Vec<(usize, usize)>, at: usize, len: usize| match v.last_mut() {
            Some((_, e)) if *e == at => *e += len,
            _ => v.push((at, at + len)),
        };
        while lsn <= last {
            let at = self.geo.at(pos);
            let persisted = self.self_persisted(lsn);
            // A record its writer persisted is skipped unread; one that did not fit before the
            // ring's end has padding here first (same LSN), which the header read below handles.
            if let Some((fp, slot, v)) = persisted
                && !mirrored
                && fp <= self.geo.room_to_end(pos)
            {
                let _ = slot.compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed);
                pos += fp;
                lsn += 1;
                continue;
            }
            let mut hdr = [0u8; layout::RECORD_HEADER_BYTES];
            self.medium.read(at, &mut hdr);
            let (h, _, _, _) = RecordHeader::parse(&hdr);
            if h.lsn != lsn {
                // Something wrote over a completed record before it was forced.
                self.failed.store(true, Ordering::Release);
                return Err(LogError::Corrupt(Corruption {
                    structure: "log record being forced".into(),
                    offset: at as u64,
                    field: layout::record::LSN.name,
                    expected: lsn.to_string(),
                    found: h.lsn.to_string(),
                }));
            }
            // What is still only in the cache: padding, its header line (the record after it,
            // with the same LSN, is at the ring's start); a record its completing thread
            // persisted (streamed), nothing; a small record, every line; a large void record,
            // its header line. A mirror needs every byte but padding's body.
            let (footprint, dirty, shipped, next) = if h.kind == kinds::PADDING {
                let room = self.geo.room_to_end(pos);
                (room, layout::RECORD_ALIGN, layout::RECORD_ALIGN, lsn)
            } else {
                let fp = record_footprint(h.length as usize);
                let dirty = if let Some((_, slot, v)) = persisted {
                    let _ = slot.compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed);
                    0
                } else {
                    match (h.kind, h.length as usize >= self.nt_min) {
                        (_, false) => fp,
                        (kinds::DATA, true) => 0,
                        (_, true) => layout::RECORD_ALIGN,
                    }
                };
                (fp as u64, dirty, fp, lsn + 1)
            };
            if dirty > 0 {
                if mirrored {
                    push(&mut runs, at, dirty);
                } else {
                    match &mut open {
                        Some((_, e)) if *e == at => *e += dirty,
                        _ => {
                            if let Some((s, e)) = open.replace((at, at + dirty)) {
                                self.latch(self.medium.flush(s, e - s))?;
                            }
                        }
                    }
                }
            }
            if mirrored {
                push(&mut ship, at, shipped);
            }
            pos += footprint;
            lsn = next;
        }
        if !mirrored {
            // Anything written back is fenced once, for all of it.
            if let Some((s, e)) = open {
                self.latch(self.medium.flush(s, e - s))?;
                self.latch(self.medium.fence())?;
            }
            cursor.pos = pos;
            return Ok(());
        }
        let extents: Vec<Extent> = ship.iter().map(|&(s, e)| self.extent(s, e - s)).collect();
        let mut flush_local = || -> Result<()> {
            for &(s, e) in &runs {
                self.latch(self.medium.flush(s, e - s))?;
            }
            if !runs.is_empty() {
                self.latch(self.medium.fence())?;
            }
            Ok(())
        };
        self.persist_through_mirror(&extents, last, &mut flush_local)?;
        cursor.pos = pos;
        Ok(())
    }

    /// Reserve, copy, complete and force by `policy`.
    pub fn append(&self, payload: &[u8], policy: ForcePolicy) -> Result<Appended> {
        let mut r = self.reserve_for(payload.len(), policy)?;
        r.copy(0, payload)?;
        let lsn = r.complete()?;
        let durable = self.commit(lsn, policy)?;
        Ok(Appended { lsn, durable })
    }

    /// Every LSN up to this one is durable.
    pub fn durable_lsn(&self) -> u64 {
        self.seq.durable()
    }

    /// The LSN the next reservation gets.
    pub fn next_lsn(&self) -> u64 {
        self.next_lsn.load(Ordering::Acquire)
    }

    /// Counters.
    pub fn stats(&self) -> LogStats {
        let (head_lsn, epoch) = {
            let h = lock(&self.head);
            (h.lsn, h.superline.epoch)
        };
        let tail = lock(&self.tail);
        LogStats {
            ring_bytes: self.desc.ring_bytes,
            used_bytes: tail.pos - self.head_pos.load(Ordering::Acquire),
            head_lsn,
            next_lsn: tail.next_lsn,
            durable_lsn: self.seq.durable(),
            epoch,
            payload_bytes_max: self.desc.payload_bytes_max,
        }
    }

    /// The replication epoch.
    pub fn epoch(&self) -> u64 {
        lock(&self.head).superline.epoch
    }

    /// Record a new replication epoch in the superline (crash-atomic).
    pub fn set_epoch(&self, epoch: u64) -> Result<()> {
        self.writable()?;
        if epoch == 0 {
            return Err(LogError::Invalid {
                what: "epoch",
                reason: "epochs start at 1".into(),
            });
        }
        let mut h = lock(&self.head);
        let sl = Superline {
            epoch,
            ..h.superline
        };
        self.write_superline(&mut h, sl)
    }

    fn write_superline(&self, h: &mut Head, next: Superline) -> Result<()> {
        // The durable LSN only grows, and is kept only where the format has the field.
        let durable_lsn = if self.desc.keeps_durable_lsn() {
            next.durable_lsn.max(self.seq.durable())
        } else {
            0
        };
        let sl = Superline {
            sequence: h.superline.sequence + 1,
            durable_lsn,
            ..next
        };
        let at = self.base + layout::SUPERLINE_COPY_OFFSETS[sl.copy()];
        self.medium.write(at, &sl.encode(&self.desc.log_uuid));
        let extents = match self.mirror() {
            Some(_) => vec![self.extent(at, layout::SUPERLINE_BYTES)],
            None => Vec::new(),
        };
        // Written back even where the domain skips flushes (flush on fail): with both copies
        // only in the caches, a missed window could tear both and leave no head to walk from.
        // One line per head move (cleanup, open, close); the same as `persist` elsewhere.
        self.persist_through_mirror(&extents, 0, &mut || {
            self.latch(
                self.medium
                    .write_back(at, layout::SUPERLINE_BYTES)
                    .and_then(|()| self.medium.fence()),
            )
        })?;
        h.superline = sl;
        Ok(())
    }

    /// Mark the record with `lsn` reclaimable (forcing it first if it is not durable) and move
    /// the head over the reclaimable prefix, which frees ring space.
    pub fn cleanup(&self, lsn: u64) -> Result<()> {
        let Some(mut h) = self.head_for_cleanup(lsn)? else {
            return Ok(());
        };
        h.reclaimable.insert(lsn);
        self.advance_head(&mut h)
    }

    /// Check `lsn` for a cleanup and force it; the head, unless `lsn` is already behind it.
    fn head_for_cleanup(&self, lsn: u64) -> Result<Option<MutexGuard<'_, Head>>> {
        self.writable()?;
        self.reserved(lsn)?;
        self.force_now(lsn)?;
        let h = lock(&self.head);
        Ok((lsn >= h.lsn).then_some(h))
    }

    /// Mark every record up to `lsn` reclaimable (forcing them first) and move the head over
    /// them: one superline write for the whole prefix, however many records it holds. A
    /// replicated log trims this way behind the checkpoints of the stores that applied it.
    pub fn cleanup_through(&self, lsn: u64) -> Result<()> {
        let Some(mut h) = self.head_for_cleanup(lsn)? else {
            return Ok(());
        };
        h.reclaim_through = h.reclaim_through.max(lsn);
        self.advance_head(&mut h)
    }

    fn advance_head(&self, h: &mut Head) -> Result<()> {
        let durable = self.seq.durable();
        let (start_pos, start_lsn) = (h.pos, h.lsn);
        // The head stops right after the last data record it reclaims, never past padding,
        // jumps or voids that follow it: then `start_lsn - 1` is exactly the last data record
        // cleaned up, and a reader that applied every record up to L knows the log still holds
        // everything after L when `L + 1 >= start_lsn` (LSNs jump at recovery, so the LSN after
        // a jump says nothing about what was cleaned up before it).
        let mut stop = (h.pos, h.lsn);
        while h.lsn <= durable {
            let at = self.geo.at(h.pos);
            let mut hdr = [0u8; layout::RECORD_HEADER_BYTES];
            self.medium.read(at, &mut hdr);
            let (rec, _, _, _) = RecordHeader::parse(&hdr);
            if rec.lsn != h.lsn {
                return Err(LogError::Corrupt(Corruption {
                    structure: "log record at the head".into(),
                    offset: at as u64,
                    field: "lsn",
                    expected: h.lsn.to_string(),
                    found: rec.lsn.to_string(),
                }));
            }
            let (footprint, next) = match rec.kind {
                kinds::PADDING => (self.geo.room_to_end(h.pos), h.lsn),
                kinds::JUMP => {
                    let mut to = [0u8; 8];
                    self.medium.read(at + layout::RECORD_HEADER_BYTES, &mut to);
                    (layout::RECORD_ALIGN as u64, u64::from_le_bytes(to))
                }
                kinds::VOID => (record_footprint(rec.length as usize) as u64, h.lsn + 1),
                _ => {
                    if !h.reclaimable.remove(&h.lsn) && h.lsn > h.reclaim_through {
                        break;
                    }
                    h.pos += record_footprint(rec.length as usize) as u64;
                    h.lsn += 1;
                    stop = (h.pos, h.lsn);
                    continue;
                }
            };
            h.pos += footprint;
            h.lsn = next;
        }
        (h.pos, h.lsn) = stop;
        // Marks for records the head has passed (padding, void, already reclaimed) go.
        let keep = h.reclaimable.split_off(&h.lsn);
        h.reclaimable = keep;
        if (h.pos, h.lsn) == (start_pos, start_lsn) {
            return Ok(());
        }
        let sl = Superline {
            head: h.pos % self.desc.ring_bytes,
            start_lsn: h.lsn,
            ..h.superline
        };
        self.write_superline(h, sl)?;
        self.publish_head(h.pos);
        Ok(())
    }

    fn publish_head(&self, pos: u64) {
        self.head_pos.store(pos, Ordering::Release);
        let _guard = lock(&self.space);
        self.space_freed.notify_all();
    }

    /// Reclaim every record: force all reserved records (waiting for their `complete`), then
    /// move the head to the tail.
    pub fn cleanup_all(&self) -> Result<()> {
        self.writable()?;
        let tail = lock(&self.tail);
        if tail.next_lsn > 1 {
            self.force_now(tail.next_lsn - 1)?;
        }
        let mut h = lock(&self.head);
        h.reclaimable.clear();
        h.pos = tail.pos;
        h.lsn = tail.next_lsn;
        let sl = Superline {
            head: h.pos % self.desc.ring_bytes,
            start_lsn: h.lsn,
            ..h.superline
        };
        self.write_superline(&mut h, sl)?;
        self.publish_head(h.pos);
        Ok(())
    }

    /// The durable records from the head, in LSN order (data records only). Stops at the first
    /// record failing a check, with [`LogError::Corrupt`] for a damaged one.
    pub fn records(&self) -> Records<'_, M> {
        let h = lock(&self.head);
        let mut walker = Walker::new(&self.medium, self.geo, h.pos, h.lsn);
        walker.trusted = self.checked;
        Records {
            walker,
            last: self.seq.durable(),
            done: false,
        }
    }

    /// [`Log::records`] checking every record's CRC again, even those the opening walk checked
    /// (a scrub, or a reader that suspects the medium changed behind the log's back).
    pub fn records_rechecked(&self) -> Records<'_, M> {
        let mut r = self.records();
        r.walker.trusted = (0, 0);
        r
    }

    /// Every entry from the head (data, padding, jump and void records) with its place and
    /// size, for dumps; [`Entries::stop`] then says why the walk ended.
    pub fn entries(&self) -> Entries<'_, M> {
        let h = lock(&self.head);
        Entries {
            walker: Walker::new(&self.medium, self.geo, h.pos, h.lsn),
            stop: None,
        }
    }

    /// Force everything, record the durable LSN in the superline, and hand the medium back.
    pub fn close(self) -> Result<M> {
        if !self.read_only && !self.failed.load(Ordering::Acquire) {
            let next = self.next_lsn();
            if next > 1 && self.seq.durable() < next - 1 {
                self.force_now(next - 1)?;
            }
            self.record_durable(self.seq.durable())?;
        }
        Ok(self.medium)
    }

    /// Write a superline whose `durable_lsn` is `lsn`, if the log keeps the field and it holds
    /// less. `lsn` must be durable already.
    fn record_durable(&self, lsn: u64) -> Result<()> {
        let mut h = lock(&self.head);
        if !self.desc.keeps_durable_lsn() || h.superline.durable_lsn >= lsn {
            return Ok(());
        }
        self.writable()?;
        let sl = Superline {
            durable_lsn: lsn,
            ..h.superline
        };
        self.write_superline(&mut h, sl)
    }
}

/// One entry of the ring, as [`Log::entries`] finds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Entry {
    /// Its LSN.
    pub lsn: u64,
    /// `data`, `padding`, `jump` or `void`.
    pub kind: &'static str,
    /// Medium offset of its header.
    pub offset: u64,
    /// Payload bytes.
    pub length: u32,
    /// Ring bytes it occupies.
    pub footprint: u64,
    /// For a jump: the LSN after it.
    pub jump_to: Option<u64>,
}

/// Walk of every entry; see [`Log::entries`].
#[derive(Debug)]
pub struct Entries<'l, M: Medium> {
    walker: Walker<'l, M>,
    stop: Option<Stop>,
}

impl<M: Medium> Entries<'_, M> {
    /// Why the walk ended (after the iterator returned `None`).
    pub fn stop(&self) -> Option<&Stop> {
        self.stop.as_ref()
    }
}

impl<M: Medium> Iterator for Entries<'_, M> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        if self.stop.is_some() {
            return None;
        }
        match self.walker.step(false) {
            Ok(f) => Some(Entry {
                lsn: f.lsn,
                kind: kinds::name(f.kind),
                offset: f.at as u64,
                length: f.length,
                footprint: f.footprint,
                jump_to: f.jump_to,
            }),
            Err(stop) => {
                self.stop = Some(stop);
                None
            }
        }
    }
}

/// The recovery iterator: durable data records from the head.
#[derive(Debug)]
pub struct Records<'l, M: Medium> {
    walker: Walker<'l, M>,
    last: u64,
    done: bool,
}

impl<M: Medium> Records<'_, M> {
    /// LSN the next record must carry.
    pub fn expected_lsn(&self) -> u64 {
        self.walker.expected
    }
}

/// A record read back, its payload borrowed from the iterator ([`Records::next_ref`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// Its LSN.
    pub lsn: u64,
    /// Medium offset of its header.
    pub offset: u64,
    /// Its payload, valid until the next call.
    pub payload: &'a [u8],
}

impl RecordRef<'_> {
    /// An owned copy.
    pub fn to_record(&self) -> Record {
        Record {
            lsn: self.lsn,
            offset: self.offset,
            payload: self.payload.to_vec(),
        }
    }
}

impl<M: Medium> Records<'_, M> {
    /// The next record with its payload borrowed from the iterator's buffer (no allocation per
    /// record); `None` at the end. The same records, in the same order, as the iterator.
    pub fn next_ref(&mut self) -> Option<Result<RecordRef<'_>>> {
        while !self.done {
            if self.walker.expected > self.last {
                self.done = true;
                break;
            }
            match self.walker.step(true) {
                Ok(Found { kind, lsn, at, .. }) if kind == kinds::DATA => {
                    return Some(Ok(RecordRef {
                        lsn,
                        offset: at as u64,
                        payload: self.walker.payload(),
                    }));
                }
                Ok(_) => continue,
                Err(Stop::Damaged(c)) => {
                    self.done = true;
                    return Some(Err(LogError::Corrupt(c)));
                }
                Err(_) => self.done = true,
            }
        }
        None
    }
}

impl<M: Medium> Iterator for Records<'_, M> {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Result<Record>> {
        while !self.done {
            if self.walker.expected > self.last {
                self.done = true;
                break;
            }
            match self.walker.step(true) {
                Ok(Found { kind, lsn, at, .. }) if kind == kinds::DATA => {
                    return Some(Ok(Record {
                        lsn,
                        offset: at as u64,
                        payload: self.walker.payload().to_vec(),
                    }));
                }
                Ok(_) => continue,
                Err(Stop::Damaged(c)) => {
                    self.done = true;
                    return Some(Err(LogError::Corrupt(c)));
                }
                Err(_) => self.done = true,
            }
        }
        None
    }
}

/// A reserved record: write its payload with [`Reservation::copy`], then
/// [`Reservation::complete`] it. Dropping it without completing leaves a void record that
/// readers skip, so later records can still be forced.
#[derive(Debug)]
pub struct Reservation<'l, M: Medium> {
    log: &'l Log<M>,
    lsn: u64,
    at: usize,
    length: usize,
    crc: u32,
    crc_upto: usize,
    /// Streamed: every line of the record goes out with non-temporal stores, and `complete`
    /// persists the record itself (one fence), so the forcer has nothing to flush for it.
    nontemporal: bool,
    /// A streamed record that was copied out of order: from then on it took ordinary stores,
    /// and `complete` writes back every line of it before its fence.
    mixed: bool,
    /// The record's first line, header and the first payload bytes: streamed by `complete`
    /// once the CRC is known.
    line0: [u8; layout::RECORD_ALIGN],
    /// The line in-order copies have reached, while only partly filled: line `pending_line` of
    /// the record (0: none).
    pending: [u8; layout::RECORD_ALIGN],
    pending_line: usize,
    completed: bool,
}

impl<M: Medium> Reservation<'_, M> {
    /// The record's LSN.
    pub fn lsn(&self) -> u64 {
        self.lsn
    }

    /// Payload bytes reserved.
    pub fn len(&self) -> usize {
        self.length
    }

    /// True for an empty payload.
    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    /// Whether [`Reservation::copy`] uses non-temporal stores for this record.
    pub fn is_nontemporal(&self) -> bool {
        self.nontemporal
    }

    /// Medium offset of the payload: the record lives in place, with no staging copy.
    pub fn payload_offset(&self) -> usize {
        self.at + layout::RECORD_HEADER_BYTES
    }

    /// Copy `data` into the payload at `offset` (non-temporal stores for large records). May be
    /// called any number of times; copies in order let `complete` skip reading the payload
    /// back for its CRC.
    pub fn copy(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        if offset
            .checked_add(data.len())
            .is_none_or(|end| end > self.length)
        {
            return Err(LogError::Invalid {
                what: "copy range",
                reason: format!(
                    "[{offset}, +{}) is outside the {}-byte record",
                    data.len(),
                    self.length
                ),
            });
        }
        let at = self.payload_offset() + offset;
        if self.nontemporal && !self.mixed {
            if offset == self.crc_upto {
                self.stream_in_order(data);
                return Ok(());
            }
            self.unstream();
        }
        self.log.medium.write(at, data);
        if offset == self.crc_upto {
            self.crc = crate::checksum::append(self.crc, data);
            self.crc_upto += data.len();
        } else {
            self.crc_upto = usize::MAX;
        }
        Ok(())
    }

    /// Stream `data`, the payload bytes from `crc_upto` on, continuing the CRC: bytes of the
    /// first line go to `line0`, bytes of a partly filled line to `pending` (streamed once the
    /// line is full, or by `complete`), whole lines straight to the ring with the CRC computed
    /// alongside.
    fn stream_in_order(&mut self, data: &[u8]) {
        const LINE: usize = layout::RECORD_ALIGN;
        let mut crc = self.crc;
        let mut rest = data;
        let mut pos = layout::RECORD_HEADER_BYTES + self.crc_upto;
        if pos < LINE && !rest.is_empty() {
            let n = (LINE - pos).min(rest.len());
            self.line0[pos..pos + n].copy_from_slice(&rest[..n]);
            crc = crate::checksum::append(crc, &rest[..n]);
            rest = &rest[n..];
            pos += n;
        }
        if pos % LINE != 0 && pos > LINE && !rest.is_empty() {
            debug_assert_eq!(self.pending_line, pos / LINE);
            let o = pos % LINE;
            let n = (LINE - o).min(rest.len());
            self.pending[o..o + n].copy_from_slice(&rest[..n]);
            crc = crate::checksum::append(crc, &rest[..n]);
            rest = &rest[n..];
            pos += n;
            if pos % LINE == 0 {
                let line_at = self.at + self.pending_line * LINE;
                self.log.medium.write_nontemporal(line_at, &self.pending);
                self.pending = [0; LINE];
                self.pending_line = 0;
            }
        }
        let whole = rest.len() / LINE * LINE;
        if whole > 0 {
            crc = self
                .log
                .medium
                .write_nontemporal_crc32c(self.at + pos, &rest[..whole], crc);
            rest = &rest[whole..];
            pos += whole;
        }
        if !rest.is_empty() {
            self.pending_line = pos / LINE;
            self.pending[..rest.len()].copy_from_slice(rest);
            crc = crate::checksum::append(crc, rest);
            pos += rest.len();
        }
        self.crc = crc;
        self.crc_upto = pos - layout::RECORD_HEADER_BYTES;
    }

    /// Leave streaming for ordinary stores: write out the payload bytes still held in
    /// `line0` and `pending`; `complete` will write back every line before its fence.
    fn unstream(&mut self) {
        const LINE: usize = layout::RECORD_ALIGN;
        let upto = layout::RECORD_HEADER_BYTES + self.crc_upto.min(self.length);
        let first = upto.min(LINE);
        if first > layout::RECORD_HEADER_BYTES {
            self.log.medium.write(
                self.payload_offset(),
                &self.line0[layout::RECORD_HEADER_BYTES..first],
            );
        }
        if self.pending_line != 0 {
            let line_at = self.at + self.pending_line * LINE;
            self.log
                .medium
                .write(line_at, &self.pending[..upto - self.pending_line * LINE]);
            self.pending_line = 0;
        }
        self.mixed = true;
    }

    /// Seal the record: payload CRC and valid word. Returns its LSN. Not yet durable: see
    /// [`Log::force`].
    pub fn complete(mut self) -> Result<u64> {
        let crc = if self.crc_upto == self.length {
            self.crc
        } else {
            if self.nontemporal && !self.mixed {
                // Bytes held back for streaming must be in the ring before it is read.
                self.unstream();
            }
            let mut crc = crc_start(self.log.geo.seed, self.lsn, self.length as u32, kinds::DATA);
            let mut chunk = vec![0u8; self.length.min(64 * 1024)];
            let mut done = 0;
            while done < self.length {
                let n = (self.length - done).min(chunk.len());
                self.log
                    .medium
                    .read(self.payload_offset() + done, &mut chunk[..n]);
                crc = crate::checksum::append(crc, &chunk[..n]);
                done += n;
            }
            crc
        };
        self.seal(kinds::DATA, crc)?;
        Ok(self.lsn)
    }

    fn seal(&mut self, kind: u16, crc: u32) -> Result<()> {
        self.completed = true;
        if self.nontemporal {
            // Streamed: the header's line (and a last, partly filled line) go out now, and this
            // thread's fence drains its write-combining buffers: the record is persisted here,
            // and the forcer has nothing left to do for it.
            let at = self.at;
            let r = if self.mixed {
                self.write_header(kind, crc);
                self.log.medium.flush(at, record_footprint(self.length))
            } else {
                let header = self.header(kind, crc);
                self.line0[..layout::RECORD_HEADER_BYTES].copy_from_slice(&header);
                self.log.medium.write_nontemporal(at, &self.line0);
                if self.pending_line != 0 {
                    let line_at = at + self.pending_line * layout::RECORD_ALIGN;
                    self.log.medium.write_nontemporal(line_at, &self.pending);
                }
                Ok(())
            };
            let r = r.and_then(|()| self.log.medium.fence());
            if let Err(e) = self.log.latch(r) {
                // Still complete the record (as void, which the forcer flushes) so forcers do not
                // wait for it forever; the log is failed from now on anyway.
                let void = crc_start(self.log.geo.seed, self.lsn, self.length as u32, kinds::VOID);
                self.write_header(kinds::VOID, void);
                self.log.seq.complete(self.lsn);
                return Err(e);
            }
            self.log
                .mark_self_persisted(self.lsn, record_footprint(self.length));
        } else {
            self.write_header(kind, crc);
        }
        self.log.seq.complete(self.lsn);
        Ok(())
    }

    /// The record's header bytes.
    fn header(&self, kind: u16, crc: u32) -> [u8; layout::RECORD_HEADER_BYTES] {
        RecordHeader {
            lsn: self.lsn,
            length: self.length as u32,
            kind,
            payload_crc: crc,
        }
        .encode()
    }

    fn write_header(&self, kind: u16, crc: u32) {
        self.log.medium.write(self.at, &self.header(kind, crc));
    }
}

impl<M: Medium> Drop for Reservation<'_, M> {
    fn drop(&mut self) {
        if !self.completed {
            self.completed = true;
            let crc = crc_start(self.log.geo.seed, self.lsn, self.length as u32, kinds::VOID);
            self.write_header(kinds::VOID, crc);
            self.log.seq.complete(self.lsn);
        }
    }
}

/// Write a jump record with `lsn` at ring position `pos`, durable before it returns.
fn write_jump<M: Medium>(medium: &M, geo: &Geometry, pos: u64, lsn: u64, to: u64) -> Result<()> {
    let at = geo.at(pos);
    let payload = to.to_le_bytes();
    let crc = crate::checksum::append(crc_start(geo.seed, lsn, 8, kinds::JUMP), &payload);
    let header = RecordHeader {
        lsn,
        length: 8,
        kind: kinds::JUMP,
        payload_crc: crc,
    };
    let mut bytes = [0u8; layout::RECORD_ALIGN];
    bytes[..layout::RECORD_HEADER_BYTES].copy_from_slice(&header.encode());
    bytes[layout::RECORD_HEADER_BYTES..layout::RECORD_HEADER_BYTES + 8].copy_from_slice(&payload);
    medium.write(at, &bytes);
    medium.persist(at, bytes.len())?;
    Ok(())
}

fn read_descriptor<M: Medium>(
    medium: &M,
    base: usize,
    region_bytes: u64,
    read_only: bool,
    repaired: &mut Vec<Corruption>,
) -> Result<Descriptor> {
    let mut found = [None, None];
    let mut errors = Vec::new();
    for (copy, slot) in found.iter_mut().enumerate() {
        let at = base + layout::DESCRIPTOR_COPY_OFFSETS[copy];
        let mut b = [0u8; layout::DESCRIPTOR_BYTES];
        medium.read(at, &mut b);
        match Descriptor::decode(&b, copy, at as u64, region_bytes) {
            Ok(d) => *slot = Some(d),
            Err(c) => errors.push((copy, c)),
        }
    }
    let desc = match found {
        [Some(a), Some(b)] if a != b => {
            return Err(LogError::Corrupt(Corruption {
                structure: "log descriptor copies".into(),
                offset: (base + layout::DESCRIPTOR_COPY_OFFSETS[1]) as u64,
                field: "log_uuid",
                expected: "the same descriptor in both copies".into(),
                found: "two valid copies that differ".into(),
            }));
        }
        [Some(d), _] | [None, Some(d)] => d,
        [None, None] => {
            let (_, first) = errors.swap_remove(0);
            return Err(LogError::Corrupt(first));
        }
    };
    for (copy, c) in errors {
        repaired.push(c);
        if !read_only {
            let at = base + layout::DESCRIPTOR_COPY_OFFSETS[copy];
            medium.write(at, &desc.encode(copy));
            medium.persist(at, layout::DESCRIPTOR_BYTES)?;
        }
    }
    Ok(desc)
}

fn read_superline<M: Medium>(
    medium: &M,
    base: usize,
    desc: &Descriptor,
    read_only: bool,
    repaired: &mut Vec<Corruption>,
) -> Result<Superline> {
    let mut best: Option<Superline> = None;
    let mut errors = Vec::new();
    for copy in 0..2 {
        let at = base + layout::SUPERLINE_COPY_OFFSETS[copy];
        let mut b = [0u8; layout::SUPERLINE_BYTES];
        medium.read(at, &mut b);
        let decoded = Superline::decode(&b, copy, at as u64, &desc.log_uuid, desc.ring_bytes)
            .and_then(|sl| {
                // Before the `DURABLE_LSN` feature the field was reserved: it must be zero.
                if sl.durable_lsn != 0 && !desc.keeps_durable_lsn() {
                    let f = layout::superline::DURABLE_LSN;
                    return Err(Corruption {
                        structure: format!("log superline copy {copy}"),
                        offset: (at + f.offset) as u64,
                        field: f.name,
                        expected: "0 (the log has no DURABLE_LSN feature)".into(),
                        found: sl.durable_lsn.to_string(),
                    });
                }
                Ok(sl)
            });
        match decoded {
            Ok(sl) if best.is_none_or(|b| sl.sequence > b.sequence) => best = Some(sl),
            Ok(_) => {}
            Err(c) => errors.push((copy, c)),
        }
    }
    let Some(sl) = best else {
        let (_, first) = errors.swap_remove(0);
        return Err(LogError::Corrupt(first));
    };
    // A superline copy torn by a crash is normal (the other copy is in force); rewriting it
    // with the current state, one sequence lower, keeps the pair whole.
    for (copy, c) in errors {
        repaired.push(c);
        if !read_only && copy != sl.copy() {
            let older = Superline {
                sequence: sl.sequence - 1,
                ..sl
            };
            if older.sequence > 0 {
                let at = base + layout::SUPERLINE_COPY_OFFSETS[copy];
                medium.write(at, &older.encode(&desc.log_uuid));
                medium.persist(at, layout::SUPERLINE_BYTES)?;
            }
        }
    }
    Ok(sl)
}

/// Follows a log that another party writes into a medium (a backup applying what its primary
/// ships): hands out data records up to a given LSN, resuming where the last call stopped.
#[derive(Debug, Clone, Copy)]
pub struct Follower {
    geo: Geometry,
    pos: u64,
    lsn: u64,
}

impl Follower {
    /// Start at the head of the log in `[base, base + len)` of `medium` (read-only).
    pub fn new<M: Medium>(medium: &M, base: usize, len: usize) -> Result<Follower> {
        let opts = LogOptions {
            read_only: true,
            ..LogOptions::default()
        };
        let (log, _) = Log::open(medium, base, len, &opts)?;
        let h = lock(&log.head);
        Ok(Follower {
            geo: log.geo,
            pos: h.pos,
            lsn: h.lsn,
        })
    }

    /// LSN of the next record to hand out.
    pub fn next_lsn(&self) -> u64 {
        self.lsn
    }

    /// The data records with LSNs up to `upto` that are valid now, from where the last call
    /// stopped. A record that is not (yet) there ends the batch; a damaged one is an error.
    pub fn read<M: Medium>(&mut self, medium: &M, upto: u64) -> Result<Vec<Record>> {
        let mut w = Walker::new(medium, self.geo, self.pos, self.lsn);
        let mut out = Vec::new();
        while w.expected <= upto {
            match w.step(true) {
                Ok(f) => {
                    if f.kind == kinds::DATA {
                        out.push(Record {
                            lsn: f.lsn,
                            offset: f.at as u64,
                            payload: w.payload().to_vec(),
                        });
                    }
                    self.pos = w.pos;
                    self.lsn = w.expected;
                }
                Err(Stop::Damaged(c)) => return Err(LogError::Corrupt(c)),
                Err(_) => break,
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod walk_reuse {
    use super::*;
    use pmem::{SimConfig, SimMedium};

    const LEN: usize = 256 << 10;

    fn read_only() -> LogOptions {
        LogOptions {
            read_only: true,
            ..LogOptions::default()
        }
    }

    fn image(m: &SimMedium) -> Vec<u8> {
        let mut b = vec![0u8; LEN];
        m.read(0, &mut b);
        b
    }

    /// A closed log holding records of several sizes (the ring never wrapped).
    fn filled() -> Vec<u8> {
        let m = SimMedium::new(LEN, SimConfig::default());
        let log = Log::create(&m, 0, LEN, Duration::ZERO).expect("create");
        for i in 0..60usize {
            let len = [1, 64, 300, 1000, 4000][i % 5];
            log.append(&vec![i as u8; len], ForcePolicy::Sync)
                .expect("append");
        }
        log.close().expect("close");
        image(&m)
    }

    fn walk(img: &[u8]) -> (Recovery, Vec<(u64, u64)>) {
        let m = SimMedium::from_image(img.to_vec(), SimConfig::default());
        let mut seen = Vec::new();
        let (_, rec) = Log::open_visiting(&m, 0, LEN, &read_only(), &mut |o, l| seen.push((o, l)))
            .expect("open");
        (rec, seen)
    }

    #[test]
    fn a_follow_of_a_copy_made_in_ring_order_finds_what_a_walk_finds() {
        let img = filled();
        let (want, want_seen) = walk(&img);
        let (desc, _) = Log::peek(
            &SimMedium::from_image(img.clone(), SimConfig::default()),
            0,
            LEN,
        )
        .expect("peek");
        let ring = desc.ring_offset as usize;
        let to = SimMedium::new(LEN, SimConfig::default());
        let mut f = Follow::new(&to, 0, &desc, want.head, want.start_lsn);
        let mut seen = Vec::new();
        // The live ring in pieces of odd sizes, records split across them.
        let (start, end) = (
            ring + want.head as usize,
            ring + (want.head + want.ring_bytes_used) as usize,
        );
        let mut at = start;
        while at < end {
            let n = (end - at).min(777);
            to.write(at, &img[at..at + n]);
            at += n;
            f.advance((at - start) as u64, &mut |o, l| seen.push((o, l)));
        }
        // Then the metadata, as a rebuild writes it last.
        to.write(0, &img[..ring]);
        let got = f
            .finish(LEN, &mut |o, l| seen.push((o, l)))
            .expect("same log");
        assert_eq!(got, want);
        assert_eq!(seen, want_seen);
    }

    #[test]
    fn a_follow_refuses_a_log_it_did_not_follow() {
        let img = filled();
        let (want, _) = walk(&img);
        let m = SimMedium::from_image(img.clone(), SimConfig::default());
        let (desc, _) = Log::peek(&m, 0, LEN).expect("peek");
        // Followed from another start LSN than the superline names.
        let f = Follow::new(&m, 0, &desc, want.head, want.start_lsn + 1);
        assert_eq!(f.finish(LEN, &mut |_, _| {}), None);
    }

    #[test]
    fn open_walked_takes_a_walk_only_while_the_log_is_unchanged() {
        let img = filled();
        let (walked, _) = walk(&img);
        let fresh = SimMedium::from_image(img.clone(), SimConfig::default());
        let (log_a, want) = Log::open(&fresh, 0, LEN, &LogOptions::default()).expect("open");
        let reused = SimMedium::from_image(img.clone(), SimConfig::default());
        let (log_b, got) = Log::open_walked(&reused, 0, LEN, &LogOptions::default(), &walked)
            .expect("open")
            .expect("the walk still holds");
        assert_eq!(got, want);
        assert_eq!(log_b.stats(), log_a.stats());
        drop((log_a, log_b));
        assert_eq!(
            image(&reused),
            image(&fresh),
            "both opens wrote the same bytes"
        );
        // A record appended after the walk: the walk is not taken.
        let changed = SimMedium::from_image(img, SimConfig::default());
        let (log, _) = Log::open(&changed, 0, LEN, &LogOptions::default()).expect("open");
        log.append(b"later", ForcePolicy::Sync).expect("append");
        log.close().expect("close");
        let back =
            Log::open_walked(&changed, 0, LEN, &LogOptions::default(), &walked).expect("open");
        assert!(
            back.is_err(),
            "a walk of the log before the append was taken"
        );
    }
}
