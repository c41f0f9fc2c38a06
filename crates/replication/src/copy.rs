//! One copy of a log: a log region on a medium, plus the fence record that says which epoch
//! the copy follows. Backups serve requests on their copy; a primary reads and repairs its own
//! the same way.
//!
//! The fence record lives in the log region's first page, in bytes the log itself leaves
//! unused (after the descriptors and superlines), as two checksummed copies written in turn:
//! the valid copy with the higher sequence holds the promised epoch. A primary never ships
//! these bytes, so each copy keeps its own.

use log::{Extent, Log, LogOptions, Stop};
use pmem::layout::Field;
use pmem::{Medium, Uuid};

use crate::proto::{CopyInfo, Request, Response};

/// Region offsets of the two fence copies.
pub const FENCE_COPY_OFFSETS: [usize; 2] = [256, 320];
/// Bytes of a fence copy.
pub const FENCE_BYTES: usize = 64;
/// Fence magic.
pub const FENCE_MAGIC: [u8; 8] = *b"KVREPFNC";
/// Fence fields.
pub const FENCE_FIELDS: [Field; 5] = [
    Field::new("magic", 0, 8),
    Field::new("sequence", 8, 8),
    Field::new("promised", 16, 8),
    Field::new("reserved", 24, 36),
    Field::new("crc32c", 60, 4),
];
/// Region bytes a full repair ships from the start: both descriptors and both superlines.
pub const META_SHIPPED_BYTES: usize = 256;

/// The fence record: which epoch a copy follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fence {
    /// Write count; the copy written is `sequence % 2`.
    pub sequence: u64,
    /// Highest epoch promised.
    pub promised: u64,
}

impl Fence {
    /// Encode with the log's UUID in the checksum (a fence of another log never counts).
    pub fn encode(&self, uuid: &Uuid) -> [u8; FENCE_BYTES] {
        let mut b = [0u8; FENCE_BYTES];
        b[0..8].copy_from_slice(&FENCE_MAGIC);
        b[8..16].copy_from_slice(&self.sequence.to_le_bytes());
        b[16..24].copy_from_slice(&self.promised.to_le_bytes());
        let crc = fence_crc(uuid, &b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode one copy; `None` if it fails any check (never written, torn, damaged).
    pub fn decode(b: &[u8; FENCE_BYTES], uuid: &Uuid) -> Option<Fence> {
        let crc = u32::from_le_bytes([b[60], b[61], b[62], b[63]]);
        if b[0..8] != FENCE_MAGIC || crc != fence_crc(uuid, &b[..60]) {
            return None;
        }
        let u = |r: std::ops::Range<usize>| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[r]);
            u64::from_le_bytes(a)
        };
        Some(Fence {
            sequence: u(8..16),
            promised: u(16..24),
        })
    }
}

fn fence_crc(uuid: &Uuid, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&uuid.0), bytes)
}

/// A copy of a log in `[base, base + len)` of a medium.
///
/// A copy remembers its last walk of the log: every change it makes (a write, a zero, a
/// reload) bumps a change counter, and a walk is reused only while the counter still has the
/// value it had when the walk was made, so a probe of an unchanged copy (a rebuild probes its
/// source after every batch of reads) costs no walk. It also remembers whether everything it
/// holds is known to be durable: true after [`Copy::create`] and after persisting the live log,
/// kept by writes and zeros it persisted itself, false for a copy opened as found or reloaded
/// after someone else changed it.
#[derive(Debug)]
pub struct Copy<M: Medium> {
    medium: M,
    base: usize,
    len: usize,
    uuid: Option<Uuid>,
    fence: Fence,
    committed: u64,
    changes: u64,
    walked: Option<Box<Walked>>,
    persisted: bool,
}

/// A walk of a copy's log and when it was made.
#[derive(Debug, Clone)]
struct Walked {
    /// The change counter when it was made.
    at: u64,
    /// What the walk found.
    rec: log::Recovery,
    /// The description it gives (`promised` and `committed` are filled in when answered).
    info: Option<CopyInfo>,
    /// Region offset of the ring.
    ring_offset: u64,
}

fn read_only() -> LogOptions {
    LogOptions {
        read_only: true,
        clean_shutdown: false,
        ..LogOptions::default()
    }
}

impl<M: Medium> Copy<M> {
    /// The copy in `[base, base + len)` of `medium`, as it is (it may hold no readable log).
    pub fn new(medium: M, base: usize, len: usize) -> Copy<M> {
        let mut c = Copy {
            medium,
            base,
            len,
            uuid: None,
            fence: Fence::default(),
            committed: 0,
            changes: 0,
            walked: None,
            persisted: false,
        };
        c.reload();
        c
    }

    /// Write a new, empty log with `uuid` over the region (epoch 1: the empty history) and
    /// clear the fence.
    pub fn create(medium: M, base: usize, len: usize, uuid: Uuid) -> log::Result<Copy<M>> {
        let zero = [0u8; 2 * FENCE_BYTES];
        medium.write(base + FENCE_COPY_OFFSETS[0], &zero);
        medium.persist(base + FENCE_COPY_OFFSETS[0], zero.len())?;
        let log = Log::create_with_uuid(&medium, base, len, uuid, std::time::Duration::ZERO)?;
        log.close()?;
        let mut c = Copy::new(medium, base, len);
        // Everything `create` wrote it persisted.
        c.persisted = true;
        Ok(c)
    }

    /// Re-read the descriptor and fence after the region changed underneath. What changed is
    /// not known to be durable, so the next promise persists the live log again.
    pub fn reload(&mut self) {
        self.reread();
        self.persisted = false;
    }

    /// Re-read the descriptor and fence: the log's metadata only, not its ring (a log is
    /// readable exactly when its descriptor and superline are; see [`Log::peek`]). Forgets the
    /// last walk.
    fn reread(&mut self) {
        self.changed();
        self.uuid = Log::peek(&self.medium, self.base, self.len)
            .ok()
            .map(|(d, _)| d.log_uuid);
        self.fence = match &self.uuid {
            Some(uuid) => FENCE_COPY_OFFSETS
                .iter()
                .filter_map(|&o| {
                    let mut b = [0u8; FENCE_BYTES];
                    self.medium.read(self.base + o, &mut b);
                    Fence::decode(&b, uuid)
                })
                .max_by_key(|f| f.sequence)
                .unwrap_or_default(),
            None => Fence::default(),
        };
    }

    /// Note a change of the region: the last walk no longer describes it.
    fn changed(&mut self) {
        self.changes += 1;
        self.walked = None;
    }

    /// How many changes this copy has seen (writes, zeros, reloads); a walk is reused only
    /// while this stays the same.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Forget the last walk and the durability of what the copy holds: its owner wrote the
    /// region without it (a primary opening its log over it, a rebuild).
    pub fn invalidate(&mut self) {
        self.changed();
        self.persisted = false;
    }

    /// The medium.
    pub fn medium(&self) -> &M {
        &self.medium
    }

    /// Offset of the region in the medium.
    pub fn base(&self) -> usize {
        self.base
    }

    /// Bytes of the region.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty region (never for a real copy).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The log's UUID, if the copy holds a readable log.
    pub fn uuid(&self) -> Option<Uuid> {
        self.uuid
    }

    /// The epoch this copy follows.
    pub fn promised(&self) -> u64 {
        self.fence.promised
    }

    /// Highest LSN a primary said is acknowledged by a quorum (not persisted: 0 after restart).
    pub fn committed(&self) -> u64 {
        self.committed
    }

    /// Take the medium back.
    pub fn into_medium(self) -> M {
        self.medium
    }

    /// What the copy holds: a read-only walk of its log. `None` if it holds no readable log.
    pub fn info(&self) -> Option<CopyInfo> {
        let (log, rec) = Log::open(&self.medium, self.base, self.len, &read_only()).ok()?;
        self.describe(&log, &rec)
    }

    /// [`Copy::info`], from the last walk if nothing changed since it was made (then no walk).
    pub fn current_info(&mut self) -> Option<CopyInfo> {
        if self.walked.as_ref().is_none_or(|w| w.at != self.changes) {
            self.walk(None);
        }
        self.answer()
    }

    /// Walk the log now (whatever was walked before), telling `visit` the ring offset and LSN
    /// of every entry accepted, and keep the walk. Returns what [`Copy::info`] returns.
    pub fn walk_visiting(&mut self, visit: &mut dyn FnMut(u64, u64)) -> Option<CopyInfo> {
        self.walk(Some(visit));
        self.answer()
    }

    /// What the kept walk found, if it still describes the copy (for [`Log::open_walked`]).
    pub fn walked(&self) -> Option<&log::Recovery> {
        self.walked
            .as_ref()
            .filter(|w| w.at == self.changes)
            .map(|w| &w.rec)
    }

    fn walk(&mut self, visit: Option<&mut dyn FnMut(u64, u64)>) {
        let opened = match visit {
            Some(v) => Log::open_visiting(&self.medium, self.base, self.len, &read_only(), v),
            None => Log::open(&self.medium, self.base, self.len, &read_only()),
        };
        self.walked = opened.ok().map(|(log, rec)| {
            Box::new(Walked {
                at: self.changes,
                info: self.describe(&log, &rec),
                ring_offset: log.descriptor().ring_offset,
                rec,
            })
        });
    }

    /// The kept walk's description with the current promise and committed LSN.
    fn answer(&self) -> Option<CopyInfo> {
        let info = self.walked.as_ref()?.info?;
        Some(CopyInfo {
            promised: self.fence.promised,
            committed: self.committed,
            ..info
        })
    }

    /// [`Copy::info`] from a walk already made.
    fn describe(&self, log: &Log<&M>, rec: &log::Recovery) -> Option<CopyInfo> {
        let uuid = self.uuid?;
        Some(CopyInfo {
            uuid: uuid.0,
            region_len: self.len as u64,
            ring_bytes: log.descriptor().ring_bytes,
            promised: self.fence.promised,
            epoch: rec.epoch,
            head: rec.head,
            start_lsn: rec.start_lsn,
            next_lsn: rec.next_lsn,
            used: rec.ring_bytes_used,
            damaged: matches!(rec.stop, Stop::Damaged(_)),
            meta_damaged: !rec.repaired.is_empty(),
            committed: self.committed,
        })
    }

    /// Promise to follow `epoch`: refused (with the promised epoch) unless it is higher than
    /// every epoch promised so far. What the copy holds is made durable first (see
    /// [`Copy::persist_live`]), unless it is known to be (everything in it was written by
    /// this copy's own persisted requests since it was created or last persisted). Returns
    /// [`Copy::info`] after the promise, from the last walk if nothing changed since (the
    /// fence is not part of the log).
    pub fn promise(&mut self, epoch: u64) -> Result<Option<CopyInfo>, u64> {
        let Some(uuid) = self.uuid else {
            return Err(0);
        };
        if epoch <= self.fence.promised {
            return Err(self.fence.promised);
        }
        let info = self.current_info();
        if !self.persisted {
            self.persisted = self.persist_walked().map_err(|_| self.fence.promised)?;
        }
        let next = Fence {
            sequence: self.fence.sequence + 1,
            promised: epoch,
        };
        let at = self.base + FENCE_COPY_OFFSETS[(next.sequence % 2) as usize];
        self.medium.write(at, &next.encode(&uuid));
        self.medium
            .persist(at, FENCE_BYTES)
            .map_err(|_| self.fence.promised)?;
        self.fence = next;
        Ok(info.map(|i| CopyInfo {
            promised: epoch,
            ..i
        }))
    }

    /// [`Copy::persist_live`] over what the kept walk found (the caller made it current).
    /// False if there was no walk to persist from (no readable log): nothing was persisted.
    fn persist_walked(&self) -> pmem::Result<bool> {
        let Some(w) = &self.walked else {
            return Ok(false);
        };
        let Some(info) = &w.info else {
            return Ok(false);
        };
        self.flush_live(w.ring_offset, info.ring_bytes, &w.rec)?;
        Ok(true)
    }

    /// Persist the descriptors, the superlines and the live ring: everything [`Copy::info`]
    /// describes.
    ///
    /// `info` reads the copy as the CPU sees it, which after a restart without a power failure
    /// (a process crash; a primary whose force failed stepping down, to serve as a backup or to
    /// recover again) can include bytes an earlier process wrote but never persisted: the
    /// records of a force whose replication failed (with `ReplicateFirst` the local flush never
    /// ran), a superline written while the mirror failed. Recovery chooses the history and
    /// plans each repair from what the promising copies report, so that must be durable: else
    /// a copy taken for a prefix of the new history gets only the rest of it (a jump record, new
    /// superlines), persists that, and a later power failure drops the records in between,
    /// cutting the copy short of everything after them; and a candidate's own copy loses them
    /// from under the jump record that opening writes after them.
    ///
    /// Returns the walk it made (`None`: no readable log, nothing persisted).
    pub fn persist_live(&self) -> pmem::Result<Option<(Log<&M>, log::Recovery)>> {
        let Ok((log, rec)) = Log::open(&self.medium, self.base, self.len, &read_only()) else {
            return Ok(None);
        };
        let d = log.descriptor();
        self.flush_live(d.ring_offset, d.ring_bytes, &rec)?;
        Ok(Some((log, rec)))
    }

    /// Flush the metadata before the ring and the live ring `rec` found, then fence.
    fn flush_live(&self, ring_offset: u64, ring: u64, rec: &log::Recovery) -> pmem::Result<()> {
        let ring_offset = ring_offset as usize;
        let head = rec.head % ring;
        let first = rec.ring_bytes_used.min(ring - head);
        let ring_at = self.base + ring_offset;
        self.medium.flush(self.base, ring_offset)?;
        self.medium.flush(ring_at + head as usize, first as usize)?;
        if rec.ring_bytes_used > first {
            self.medium
                .flush(ring_at, (rec.ring_bytes_used - first) as usize)?;
        }
        self.medium.fence()
    }

    fn check_range(&self, offset: u64, len: u64) -> Result<(usize, usize), String> {
        let end = offset.checked_add(len).filter(|&e| e <= self.len as u64);
        let Some(end) = end else {
            return Err(format!(
                "range [{offset}, +{len}) is outside the {}-byte log region",
                self.len
            ));
        };
        let meta = offset < META_SHIPPED_BYTES as u64 && end <= META_SHIPPED_BYTES as u64;
        let ring = offset >= log::layout::RING_OFFSET as u64;
        if !(meta || ring || len == 0) {
            return Err(format!(
                "range [{offset}, {end}) touches bytes a primary never ships \
                 (only [0, {META_SHIPPED_BYTES}) and the ring from {} are written)",
                log::layout::RING_OFFSET
            ));
        }
        Ok((self.base + offset as usize, len as usize))
    }

    pub(crate) fn fenced(&self, epoch: u64) -> Option<Response> {
        if self.uuid.is_none() {
            return Some(Response::Error("no log copy here".into()));
        }
        (epoch == 0 || epoch != self.fence.promised).then_some(Response::Fenced {
            promised: self.fence.promised,
        })
    }

    /// Write and persist extents for the primary of `epoch`.
    pub fn write(&mut self, epoch: u64, committed: u64, extents: &[Extent]) -> Response {
        if let Some(r) = self.fenced(epoch) {
            return r;
        }
        let mut ranges = Vec::with_capacity(extents.len());
        for e in extents {
            match self.check_range(e.offset, e.bytes.len() as u64) {
                Ok(r) => ranges.push(r),
                Err(why) => return Response::Error(why),
            }
        }
        if !extents.iter().all(|e| e.bytes.is_empty()) {
            self.changed();
        }
        for (e, &(at, len)) in extents.iter().zip(&ranges) {
            self.medium.write(at, &e.bytes);
            if let Err(err) = self.medium.flush(at, len) {
                self.persisted = false;
                return Response::Error(err.to_string());
            }
        }
        if let Err(err) = self.medium.fence() {
            self.persisted = false;
            return Response::Error(err.to_string());
        }
        if extents.iter().any(|e| e.offset < META_SHIPPED_BYTES as u64) {
            // Persisted above: only the metadata is read again.
            self.reread();
        }
        self.committed = self.committed.max(committed);
        Response::Ack
    }

    /// Zero and persist a range for the primary of `epoch`.
    pub fn zero(&mut self, epoch: u64, offset: u64, len: u64) -> Response {
        if let Some(r) = self.fenced(epoch) {
            return r;
        }
        let (at, len) = match self.check_range(offset, len) {
            Ok(r) => r,
            Err(why) => return Response::Error(why),
        };
        if len > 0 {
            self.changed();
        }
        let zeros = vec![0u8; len.min(1 << 20)];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(zeros.len());
            self.medium.write(at + done, &zeros[..n]);
            if let Err(err) = self.medium.flush(at + done, n) {
                self.persisted = false;
                return Response::Error(err.to_string());
            }
            done += n;
        }
        match self.medium.fence() {
            Ok(()) => Response::Ack,
            Err(err) => {
                self.persisted = false;
                Response::Error(err.to_string())
            }
        }
    }

    /// Read a range of the region.
    pub fn read(&self, offset: u64, len: u64) -> Response {
        let end = offset.checked_add(len).filter(|&e| e <= self.len as u64);
        if end.is_none() || len > crate::proto::FRAME_BODY_MAX as u64 {
            return Response::Error(format!(
                "read [{offset}, +{len}) is outside the {}-byte region or too large",
                self.len
            ));
        }
        let mut buf = vec![0u8; len as usize];
        self.medium.read(self.base + offset as usize, &mut buf);
        Response::Data(buf)
    }

    /// [`Copy::read`]'s answer, encoded as a whole frame into `frame` (the same bytes as
    /// `self.read(offset, len).encode()`), reusing its allocation: a rebuild reads the whole
    /// log in a few MiB at a time, and a fresh buffer per read costs the page faults of
    /// zeroing it, and an encoded copy of it another.
    pub fn read_frame(&self, offset: u64, len: u64, frame: &mut Vec<u8>) {
        let end = offset.checked_add(len).filter(|&e| e <= self.len as u64);
        if end.is_none() || len > crate::proto::FRAME_BODY_MAX as u64 {
            *frame = self.read(offset, len).encode();
            return;
        }
        let body = crate::proto::FRAME_HEADER_BYTES;
        frame.resize(body + len as usize, 0);
        self.medium
            .read(self.base + offset as usize, &mut frame[body..]);
        let crc = crc32c::crc32c(&frame[body..]);
        frame[..4].copy_from_slice(&crate::proto::FRAME_MAGIC);
        frame[4] = crate::proto::tags::DATA;
        frame[5..8].copy_from_slice(&[0, 0, 0]);
        frame[8..12].copy_from_slice(&(len as u32).to_le_bytes());
        frame[12..16].copy_from_slice(&crc.to_le_bytes());
    }

    /// Serve one request (all but `Init`, which needs the host).
    pub fn handle(&mut self, req: &Request) -> Response {
        match req {
            Request::Probe => Response::Info(self.current_info()),
            Request::Init { .. } => Response::Error("init is the host's".into()),
            Request::Promise { epoch } => match self.promise(*epoch) {
                Ok(info) => Response::Info(info),
                Err(_) if self.uuid.is_none() => Response::Error("no log copy here".into()),
                Err(promised) => Response::Fenced { promised },
            },
            Request::Write {
                epoch,
                committed,
                extents,
            } => self.write(*epoch, *committed, extents),
            Request::Zero { epoch, offset, len } => self.zero(*epoch, *offset, *len),
            Request::Read { offset, len } => self.read(*offset, *len),
            Request::Snapshot { .. } => Response::Error("snapshots are the host's".into()),
        }
    }
}

/// The store a backup keeps beside its copy, as the protocol sees it: how far it has applied
/// the log, and where snapshots go.
pub trait StoreSink: Send + Sync {
    /// Every record up to this LSN is durably applied to the store.
    fn applied(&self) -> u64;
    /// Take one piece of a snapshot (see [`Request::Snapshot`]) of the store that
    /// follows log `uuid`.
    fn snapshot(
        &self,
        uuid: [u8; 16],
        lsn: u64,
        seq: u64,
        last: bool,
        data: &[u8],
    ) -> Result<(), String>;
}

/// Where a backup keeps its copy: it can make a fresh one when it has none.
pub trait Host: Send {
    /// The medium copies live on.
    type M: Medium;
    /// The copy, if there is one.
    fn copy(&mut self) -> Option<&mut Copy<Self::M>>;
    /// Make a fresh, empty copy of the log `uuid` with a `region_len`-byte region, replacing an
    /// unreadable one.
    fn init(&mut self, uuid: Uuid, region_len: u64) -> Result<(), String>;
    /// The LSN up to which the store beside this copy has durably applied the log, if there is
    /// such a store: answers to writes then carry it ([`Response::Applied`]), and the primary
    /// trims the log no further than the lowest live backup's.
    fn applied(&self) -> Option<u64> {
        None
    }
    /// The store beside this copy, which takes snapshots of the primary's store
    /// ([`Request::Snapshot`]), if there is one.
    fn store(&self) -> Option<std::sync::Arc<dyn StoreSink>> {
        None
    }
}

/// Check a [`Request::Snapshot`] against the host (a copy promised to its epoch, a store to
/// take it) and return where it goes and the log's UUID; the answer to send otherwise. The
/// piece is then applied without the host's lock, so the primary's writes to this copy do not
/// wait for it.
pub fn snapshot_target<H: Host>(
    host: &mut H,
    epoch: u64,
) -> Result<(std::sync::Arc<dyn StoreSink>, [u8; 16]), Response> {
    let uuid = match host.copy() {
        Some(c) => {
            if let Some(r) = c.fenced(epoch) {
                return Err(r);
            }
            c.uuid().map(|u| u.0)
        }
        None => None,
    }
    .ok_or_else(|| Response::Error("no log copy here".into()))?;
    let store = host.store().ok_or_else(|| {
        Response::Error("this backup keeps no store to take a snapshot into".into())
    })?;
    Ok((store, uuid))
}

/// Apply a snapshot piece to the store [`snapshot_target`] found.
pub fn apply_snapshot(store: &dyn StoreSink, uuid: [u8; 16], req: &Request) -> Response {
    let Request::Snapshot {
        lsn,
        seq,
        last,
        data,
        ..
    } = req
    else {
        return Response::Error("not a snapshot".into());
    };
    match store.snapshot(uuid, *lsn, *seq, *last, data) {
        Ok(()) => Response::Ack,
        Err(e) => Response::Error(e),
    }
}

/// Serve one request on a host.
pub fn serve<H: Host>(host: &mut H, req: &Request) -> Response {
    if let Request::Init { uuid, region_len } = req {
        let existing = host
            .copy()
            .and_then(|c| c.uuid().map(|u| (u, c.len() as u64)));
        return match existing {
            Some((u, len)) if u.0 == *uuid && len == *region_len => Response::Ack,
            Some((u, len)) => Response::Error(format!(
                "this backup holds another log ({} bytes, UUID {}); refusing to overwrite it \
                 (move its directory away to reuse the backup)",
                len,
                hex(&u.0)
            )),
            None => match host.init(Uuid(*uuid), *region_len) {
                Ok(()) => Response::Ack,
                Err(e) => Response::Error(e),
            },
        };
    }
    if let Request::Snapshot { epoch, .. } = req {
        return match snapshot_target(host, *epoch) {
            Ok((store, uuid)) => apply_snapshot(store.as_ref(), uuid, req),
            Err(r) => r,
        };
    }
    let r = match host.copy() {
        Some(c) => c.handle(req),
        None if matches!(req, Request::Probe) => Response::Info(None),
        None => Response::Error("no log copy here".into()),
    };
    match (r, host.applied()) {
        (Response::Ack, Some(applied)) if matches!(req, Request::Write { .. }) => {
            Response::Applied { applied }
        }
        (r, _) => r,
    }
}

/// Lower-case hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmem::{SimConfig, SimMedium};

    const LEN: usize = 256 << 10;

    fn copy() -> Copy<SimMedium> {
        let m = SimMedium::new(LEN, SimConfig::default());
        let c = Copy::create(m, 0, LEN, Uuid([7; 16])).expect("create");
        let log = Log::open(c.medium(), 0, LEN, &LogOptions::default()).expect("open");
        for i in 0..40u32 {
            log.0
                .append(&i.to_le_bytes().repeat(50), log::ForcePolicy::Sync)
                .expect("append");
        }
        log.0.close().expect("close");
        c
    }

    #[test]
    fn a_read_frame_is_the_encoded_read_answer() {
        let c = copy();
        let mut frame = Vec::new();
        // Larger, then smaller, then larger again: the reused buffer never leaks old bytes.
        for (offset, len) in [(0, 4096), (4096, 100), (8000, 9000), (LEN as u64 - 10, 10)] {
            c.read_frame(offset, len, &mut frame);
            assert_eq!(frame, c.read(offset, len).encode(), "[{offset}, +{len})");
        }
        // Out of the region or too large: the same error answer as `read`.
        for (offset, len) in [(LEN as u64 - 10, 11), (u64::MAX, 2), (0, 1 << 40)] {
            c.read_frame(offset, len, &mut frame);
            assert_eq!(frame, c.read(offset, len).encode(), "[{offset}, +{len})");
            assert!(matches!(c.read(offset, len), Response::Error(_)));
        }
    }

    #[test]
    fn a_probe_walks_again_only_after_a_change() {
        let mut c = copy();
        let first = c.current_info().expect("readable");
        assert_eq!(Some(first), c.info());
        let changes = c.changes();
        assert_eq!(c.current_info(), Some(first));
        assert_eq!(c.changes(), changes, "a probe changes nothing");
        // A write through the copy moves the counter; the next probe sees what it wrote.
        let epoch = 5;
        assert!(c.promise(epoch).is_ok());
        let damage = vec![0xffu8; 64];
        let at = log::layout::RING_OFFSET as u64 + first.head;
        let r = c.write(
            epoch,
            0,
            &[Extent {
                offset: at,
                bytes: damage,
            }],
        );
        assert_eq!(r, Response::Ack);
        assert!(c.changes() > changes);
        let now = c.current_info().expect("readable");
        assert_eq!(
            Some(now),
            c.info(),
            "the probe after a change is a fresh walk"
        );
        assert_ne!(
            now.next_lsn, first.next_lsn,
            "the overwritten first record ends the log"
        );
    }
}
