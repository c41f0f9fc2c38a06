//! Salvage: keep the longest proven prefix of a damaged log, and hand back every byte cut from
//! it, so a caller can write them to a side file before the log changes.
//!
//! The protocol (`kavach log salvage` follows it):
//!
//! 1. Open the log read-only and call [`Log::salvage_plan`]: the records kept (those the walk
//!    accepted, from the head to where it stopped) and what is cut: the record the walk
//!    stopped at (damaged, or torn by a crash), every whole record with a later LSN found past
//!    it, and any bytes between those, in ring order.
//! 2. Write the cut entries somewhere durable (the side file format is [`write_side_file`]'s,
//!    documented in `docs/format/log.md`), and persist them.
//! 3. Open writable with `truncate_damaged` ([`crate::LogFile::salvage`] re-plans first and
//!    refuses if anything changed): the log ends where the walk stopped, a jump record is
//!    written there, past every LSN a cut record holds, and the superline records the new
//!    durable LSN. Nothing else is written.

use std::io::Write;

use crate::format::RecordHeader;
use crate::layout::{self, kinds, record_footprint};
use crate::log::{Log, Recovery};
use crate::scan::{Geometry, Stop, later_records};
use pmem::codec::{Reader, Writer};
use pmem::{Corruption, Medium, Uuid};

/// What an entry cut from a log is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutKind {
    /// The record the walk stopped at: it failed a check (or carries another LSN).
    Stopped = 1,
    /// A whole record (LSN, valid word, CRC all right) past the stop, with a later LSN.
    Whole = 2,
    /// Bytes between the entries above that no check recognises.
    Unrecognized = 3,
}

impl CutKind {
    /// Name for reports.
    pub fn name(self) -> &'static str {
        match self {
            CutKind::Stopped => "stopped",
            CutKind::Whole => "whole",
            CutKind::Unrecognized => "unrecognized",
        }
    }
    fn from_code(code: u32) -> Option<CutKind> {
        match code {
            1 => Some(CutKind::Stopped),
            2 => Some(CutKind::Whole),
            3 => Some(CutKind::Unrecognized),
            _ => None,
        }
    }
}

/// One run of bytes cut from the ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// What it is.
    pub kind: CutKind,
    /// For `Stopped`: the LSN the walk expected there. For `Whole`: the record's LSN. For
    /// `Unrecognized`: 0.
    pub lsn: u64,
    /// For `Whole`: the record's kind (`layout::kinds`); otherwise 0.
    pub record_kind: u16,
    /// Medium (pool) offset of the first byte.
    pub offset: u64,
    /// The bytes, as they were in the ring (never more than the ring's end).
    pub bytes: Vec<u8>,
}

/// What a salvage keeps and cuts; see [`Log::salvage_plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SalvagePlan {
    /// The log's UUID.
    pub log_uuid: Uuid,
    /// Data records kept.
    pub kept_records: u64,
    /// LSN of the first record kept (the head's).
    pub start_lsn: u64,
    /// The LSN the walk expected where it stopped: every LSN below it is kept.
    pub stop_lsn: u64,
    /// Medium offset where the walk stopped (where the jump record will go).
    pub stop_offset: u64,
    /// Why the log ends there: the check that failed, if one did.
    pub failure: Option<Corruption>,
    /// The failure is proven damage (not a record a crash may have torn).
    pub damaged: bool,
    /// The pool was not shut down cleanly (a writable open also writes a jump record then).
    pub unclean: bool,
    /// Everything cut, in ring order from the stop.
    pub cut: Vec<Cut>,
}

impl SalvagePlan {
    /// Ring bytes cut.
    pub fn cut_bytes(&self) -> u64 {
        self.cut.iter().map(|c| c.bytes.len() as u64).sum()
    }
}

impl<M: Medium> Log<M> {
    /// What a salvage of this log would keep and cut, from `recovery` (this open's; the log
    /// must be open read-only, so the walk's stop is where the log ends). Reads only.
    pub fn salvage_plan(&self, recovery: &Recovery, clean_shutdown: bool) -> SalvagePlan {
        let geo = self.geometry();
        let walked = recovery.ring_bytes_used;
        let stop_pos = recovery.head + walked;
        let expected = recovery.next_lsn;
        let medium = self.medium();
        let mut cut = Vec::new();
        let room = geo.ring_bytes - walked;
        if !matches!(recovery.stop, Stop::RingFull) && room >= layout::RECORD_ALIGN as u64 {
            let max = (geo.ring_bytes / layout::RECORD_ALIGN as u64) as usize;
            let later = later_records(medium, geo, stop_pos, walked, expected, max);
            let failing = recovery.dropped.is_some() || matches!(recovery.stop, Stop::Damaged(_));
            // The stopped record: as long as its header says, when that is plausible, else one
            // line; never into the first later record.
            let mut pos = stop_pos;
            let line = layout::RECORD_ALIGN as u64;
            if failing {
                let len = stopped_footprint(medium, geo, stop_pos, room);
                let end = later
                    .first()
                    .map_or(stop_pos + len, |l| l.pos.min(stop_pos + len));
                push_range(
                    medium,
                    geo,
                    &mut cut,
                    CutKind::Stopped,
                    expected,
                    0,
                    pos,
                    end,
                );
                pos = end;
            } else if !clean_shutdown && (!later.is_empty() || !line_is_zero(medium, geo, pos)) {
                // The jump record recovery writes at the tail replaces this line.
                push_range(
                    medium,
                    geo,
                    &mut cut,
                    CutKind::Unrecognized,
                    0,
                    0,
                    pos,
                    pos + line,
                );
                pos += line;
            }
            for l in &later {
                push_range(
                    medium,
                    geo,
                    &mut cut,
                    CutKind::Unrecognized,
                    0,
                    0,
                    pos,
                    l.pos,
                );
                push_range(
                    medium,
                    geo,
                    &mut cut,
                    CutKind::Whole,
                    l.lsn,
                    l.kind,
                    l.pos,
                    l.pos + l.footprint,
                );
                pos = l.pos + l.footprint;
            }
        }
        SalvagePlan {
            log_uuid: self.descriptor().log_uuid,
            kept_records: recovery.records,
            start_lsn: recovery.start_lsn,
            stop_lsn: expected,
            stop_offset: geo.at(stop_pos) as u64,
            failure: recovery.dropped.clone().or_else(|| match &recovery.stop {
                Stop::Damaged(c) => Some(c.clone()),
                _ => None,
            }),
            damaged: recovery.damaged.is_some() || (clean_shutdown && recovery.dropped.is_some()),
            unclean: !clean_shutdown,
            cut,
        }
    }
}

fn line_is_zero<M: Medium + ?Sized>(medium: &M, geo: Geometry, pos: u64) -> bool {
    let mut line = [0u8; layout::RECORD_ALIGN];
    medium.read(geo.at(pos), &mut line);
    line.iter().all(|&b| b == 0)
}

/// Ring bytes the record at `pos` claims, if its header is plausible (a known kind, a length
/// that fits); one line otherwise.
fn stopped_footprint<M: Medium + ?Sized>(medium: &M, geo: Geometry, pos: u64, room: u64) -> u64 {
    let mut hdr = [0u8; layout::RECORD_HEADER_BYTES];
    medium.read(geo.at(pos), &mut hdr);
    let (h, _, _, _) = RecordHeader::parse(&hdr);
    let to_end = geo.room_to_end(pos);
    let claimed = match h.kind {
        kinds::PADDING => to_end,
        kinds::DATA | kinds::JUMP | kinds::VOID if h.length <= geo.payload_max => {
            record_footprint(h.length as usize) as u64
        }
        _ => layout::RECORD_ALIGN as u64,
    };
    if claimed > to_end || claimed > room {
        layout::RECORD_ALIGN as u64
    } else {
        claimed
    }
}

/// Cut `[from, to)` (virtual ring positions), split where it crosses the ring's end.
#[allow(clippy::too_many_arguments)]
fn push_range<M: Medium + ?Sized>(
    medium: &M,
    geo: Geometry,
    cut: &mut Vec<Cut>,
    kind: CutKind,
    lsn: u64,
    record_kind: u16,
    mut from: u64,
    to: u64,
) {
    while from < to {
        let n = (to - from).min(geo.room_to_end(from));
        let mut bytes = vec![0u8; n as usize];
        medium.read(geo.at(from), &mut bytes);
        cut.push(Cut {
            kind,
            lsn,
            record_kind,
            offset: geo.at(from) as u64,
            bytes,
        });
        from += n;
    }
}

/// Magic of a salvage side file.
pub const SIDE_FILE_MAGIC: [u8; 8] = *b"KVLOGCUT";
/// Version of the side file format.
pub const SIDE_FILE_VERSION: u32 = 1;
/// Bytes of the side file's header.
pub const SIDE_FILE_HEADER_BYTES: usize = 64;
/// Bytes of each entry's header (its bytes follow it).
pub const SIDE_ENTRY_HEADER_BYTES: usize = 32;

/// Write `plan`'s cut entries to `out` in the side file format (`docs/format/log.md`,
/// "Salvage side file"): a 64-byte header, then per entry a 32-byte header and its bytes.
pub fn write_side_file(plan: &SalvagePlan, out: &mut dyn Write) -> std::io::Result<()> {
    let mut h = Writer::with_capacity(SIDE_FILE_HEADER_BYTES);
    h.bytes(&SIDE_FILE_MAGIC)
        .u32(SIDE_FILE_VERSION)
        .u32(plan.cut.len() as u32)
        .bytes(&plan.log_uuid.0)
        .u64(plan.stop_lsn)
        .u64(plan.stop_offset)
        .u64(plan.kept_records)
        .u32(0);
    let mut h = h.into_bytes();
    let crc = crc32c::crc32c(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(h.len(), SIDE_FILE_HEADER_BYTES);
    out.write_all(&h)?;
    for c in &plan.cut {
        let mut e = Writer::with_capacity(SIDE_ENTRY_HEADER_BYTES);
        e.u32(c.kind as u32)
            .u16(c.record_kind)
            .u16(0)
            .u64(c.lsn)
            .u64(c.offset)
            .u32(c.bytes.len() as u32);
        let mut e = e.into_bytes();
        let crc = crc32c::crc32c_append(crc32c::crc32c(&e), &c.bytes);
        e.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(e.len(), SIDE_ENTRY_HEADER_BYTES);
        out.write_all(&e)?;
        out.write_all(&c.bytes)?;
    }
    Ok(())
}

/// A side file read back: the header's fields and the entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideFile {
    /// The log's UUID.
    pub log_uuid: Uuid,
    /// Every LSN below this one was kept in the log.
    pub stop_lsn: u64,
    /// Medium offset where the log was cut.
    pub stop_offset: u64,
    /// Data records kept.
    pub kept_records: u64,
    /// The entries.
    pub cut: Vec<Cut>,
}

/// Read a side file written by [`write_side_file`]; every check failure names the byte.
pub fn read_side_file(bytes: &[u8]) -> Result<SideFile, Corruption> {
    let rd = Reader::new("log salvage side file", bytes);
    let magic = rd.slice_at("magic", 0, 8)?;
    if magic != SIDE_FILE_MAGIC {
        return Err(rd
            .invalid("magic", 0, "KVLOGCUT", format!("{magic:?}"))
            .into());
    }
    let header = rd.slice_at("header", 0, SIDE_FILE_HEADER_BYTES)?;
    let crc = crc32c::crc32c(&header[..60]);
    let stored = rd.u32_at("crc32c", 60)?;
    if crc != stored {
        return Err(rd
            .invalid(
                "crc32c",
                60,
                format!("{crc:#010x}"),
                format!("{stored:#010x}"),
            )
            .into());
    }
    let version = rd.u32_at("version", 8)?;
    if version != SIDE_FILE_VERSION {
        return Err(rd.invalid("version", 8, SIDE_FILE_VERSION, version).into());
    }
    let count = rd.u32_at("count", 12)?;
    let uuid = rd.array_at("log_uuid", 16)?;
    let mut at = SIDE_FILE_HEADER_BYTES;
    let mut cut = Vec::new();
    for _ in 0..count {
        let e = rd.slice_at("entry", at, SIDE_ENTRY_HEADER_BYTES)?;
        let code = rd.u32_at("kind", at)?;
        let kind =
            CutKind::from_code(code).ok_or_else(|| rd.invalid("kind", at, "1, 2 or 3", code))?;
        let len = rd.u32_at("length", at + 24)? as usize;
        let body = at + SIDE_ENTRY_HEADER_BYTES;
        let data = rd.slice_at("entry bytes", body, len)?;
        let crc = crc32c::crc32c_append(crc32c::crc32c(&e[..28]), data);
        let stored = rd.u32_at("crc32c", at + 28)?;
        if crc != stored {
            return Err(rd
                .invalid(
                    "crc32c",
                    at + 28,
                    format!("{crc:#010x}"),
                    format!("{stored:#010x}"),
                )
                .into());
        }
        cut.push(Cut {
            kind,
            record_kind: rd.u16_at("record_kind", at + 4)?,
            lsn: rd.u64_at("lsn", at + 8)?,
            offset: rd.u64_at("offset", at + 16)?,
            bytes: data.to_vec(),
        });
        at = body + len;
    }
    if at != bytes.len() {
        let found = format!("{} more bytes", bytes.len() - at);
        return Err(rd.invalid("end", at, "the end of the file", found).into());
    }
    Ok(SideFile {
        log_uuid: Uuid(uuid),
        stop_lsn: rd.u64_at("stop_lsn", 32)?,
        stop_offset: rd.u64_at("stop_offset", 40)?,
        kept_records: rd.u64_at("kept_records", 48)?,
        cut,
    })
}
