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
    let mut h = [0u8; SIDE_FILE_HEADER_BYTES];
    h[0..8].copy_from_slice(&SIDE_FILE_MAGIC);
    h[8..12].copy_from_slice(&SIDE_FILE_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(plan.cut.len() as u32).to_le_bytes());
    h[16..32].copy_from_slice(&plan.log_uuid.0);
    h[32..40].copy_from_slice(&plan.stop_lsn.to_le_bytes());
    h[40..48].copy_from_slice(&plan.stop_offset.to_le_bytes());
    h[48..56].copy_from_slice(&plan.kept_records.to_le_bytes());
    let crc = crc32c::crc32c(&h[..60]);
    h[60..64].copy_from_slice(&crc.to_le_bytes());
    out.write_all(&h)?;
    for c in &plan.cut {
        let mut e = [0u8; SIDE_ENTRY_HEADER_BYTES];
        e[0..4].copy_from_slice(&(c.kind as u32).to_le_bytes());
        e[4..6].copy_from_slice(&c.record_kind.to_le_bytes());
        e[8..16].copy_from_slice(&c.lsn.to_le_bytes());
        e[16..24].copy_from_slice(&c.offset.to_le_bytes());
        e[24..28].copy_from_slice(&(c.bytes.len() as u32).to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&e[..28]), &c.bytes);
        e[28..32].copy_from_slice(&crc.to_le_bytes());
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
    let bad = |offset: usize, field: &'static str, expected: String, found: String| Corruption {
        structure: "log salvage side file".into(),
        offset: offset as u64,
        field,
        expected,
        found,
    };
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let u64_at = |b: &[u8], at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(w)
    };
    if bytes.len() < SIDE_FILE_HEADER_BYTES || bytes[..8] != SIDE_FILE_MAGIC {
        let n = bytes.len().min(8);
        return Err(bad(
            0,
            "magic",
            "KVLOGCUT".into(),
            format!("{:?}", &bytes[..n]),
        ));
    }
    let crc = crc32c::crc32c(&bytes[..60]);
    if crc != u32_at(bytes, 60) {
        let found = format!("{:#010x}", u32_at(bytes, 60));
        return Err(bad(60, "crc32c", format!("{crc:#010x}"), found));
    }
    let version = u32_at(bytes, 8);
    if version != SIDE_FILE_VERSION {
        return Err(bad(8, "version", "1".into(), version.to_string()));
    }
    let count = u32_at(bytes, 12);
    let mut uuid = [0u8; 16];
    uuid.copy_from_slice(&bytes[16..32]);
    let mut at = SIDE_FILE_HEADER_BYTES;
    let mut cut = Vec::new();
    for i in 0..count {
        if bytes.len() - at < SIDE_ENTRY_HEADER_BYTES {
            let found = format!("{} bytes", bytes.len() - at);
            return Err(bad(at, "entry", format!("entry {i} of {count}"), found));
        }
        let e = &bytes[at..at + SIDE_ENTRY_HEADER_BYTES];
        let kind = CutKind::from_code(u32_at(e, 0))
            .ok_or_else(|| bad(at, "kind", "1, 2 or 3".into(), u32_at(e, 0).to_string()))?;
        let len = u32_at(e, 24) as usize;
        let body = at + SIDE_ENTRY_HEADER_BYTES;
        if bytes.len() - body < len {
            let found = format!("{} bytes left", bytes.len() - body);
            return Err(bad(at + 24, "length", format!("{len} bytes"), found));
        }
        let data = &bytes[body..body + len];
        let crc = crc32c::crc32c_append(crc32c::crc32c(&e[..28]), data);
        if crc != u32_at(e, 28) {
            let found = format!("{:#010x}", u32_at(e, 28));
            return Err(bad(at + 28, "crc32c", format!("{crc:#010x}"), found));
        }
        cut.push(Cut {
            kind,
            record_kind: u16::from_le_bytes([e[4], e[5]]),
            lsn: u64_at(e, 8),
            offset: u64_at(e, 16),
            bytes: data.to_vec(),
        });
        at = body + len;
    }
    if at != bytes.len() {
        let found = format!("{} more bytes", bytes.len() - at);
        return Err(bad(at, "end", "the end of the file".into(), found));
    }
    Ok(SideFile {
        log_uuid: Uuid(uuid),
        stop_lsn: u64_at(bytes, 32),
        stop_offset: u64_at(bytes, 40),
        kept_records: u64_at(bytes, 48),
        cut,
    })
}
