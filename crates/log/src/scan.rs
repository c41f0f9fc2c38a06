//! Walking the ring from the head: the three checks of Arcadia's recovery iterator (the LSN is
//! the one expected, the valid word is set for it, the CRC matches), plus bounds on every field
//! read from the medium.

use crate::format::{RecordHeader, crc_start, valid_word};
use crate::layout::{self, kinds, record as r, record_footprint};
use pmem::{Corruption, Medium};

/// Where a log's ring is and what bounds its records.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    /// Medium offset of the ring's first byte.
    pub ring: usize,
    /// Bytes in the ring.
    pub ring_bytes: u64,
    /// Largest payload.
    pub payload_max: u32,
    /// CRC seed (the log UUID's CRC).
    pub seed: u32,
}

impl Geometry {
    /// Medium offset of virtual ring position `pos`.
    pub fn at(&self, pos: u64) -> usize {
        self.ring + (pos % self.ring_bytes) as usize
    }
    /// Bytes from `pos` to the ring's end.
    pub fn room_to_end(&self, pos: u64) -> u64 {
        self.ring_bytes - pos % self.ring_bytes
    }
}

/// Why a walk stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// The next place holds no record with the expected LSN: the end of the log.
    Tail {
        /// The LSN field found there.
        found_lsn: u64,
    },
    /// The header carries the expected LSN but not its valid word: a record written in part.
    Incomplete {
        /// The valid word found.
        found_valid: u64,
    },
    /// The walk covered the whole ring.
    RingFull,
    /// A record whose LSN and valid word match failed a check: damage, or after an unclean
    /// shutdown possibly a record torn by the crash.
    Damaged(Corruption),
}

impl Stop {
    /// Short description for reports.
    pub fn describe(&self) -> String {
        match self {
            Stop::Tail { found_lsn: 0 } => "end of log (never-written space follows)".into(),
            Stop::Tail { found_lsn } => {
                format!("end of log (an older record, LSN {found_lsn}, follows)")
            }
            Stop::Incomplete { .. } => "end of log (a record written in part follows)".into(),
            Stop::RingFull => "end of log (the ring is full)".into(),
            Stop::Damaged(c) => format!("damaged record: {c}"),
        }
    }
}

/// One entry found by the walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub lsn: u64,
    pub kind: u16,
    /// Medium offset of the header.
    pub at: usize,
    pub length: u32,
    /// Ring bytes it occupies.
    pub footprint: u64,
    /// For a jump: the LSN that follows.
    pub jump_to: Option<u64>,
}

/// Header bytes the CRC covers (they precede the payload in the walk's buffer).
const PREFIX: usize = r::CRC_COVERED_BYTES;

/// Bytes the walk reads at a record's place in one access (fewer at the ring's end): the
/// header and, for payloads up to 96 bytes, the whole record.
const HEAD_READ: usize = 128;

/// How far ahead of the record it checks a walk asks for the ring's bytes (`Medium::prefetch`):
/// about four 1 KiB records. On an AMD EPYC (Zen 2) a CRC walk over 1 KiB records that were not
/// in the cache went from 160 to 115 ns per record with it (docs/benchmarks.md).
const PREFETCH_AHEAD: u64 = 4096;
/// Bytes a walk asks for at a time once it is [`PREFETCH_AHEAD`] ahead.
const PREFETCH_STEP: u64 = 1024;

/// Wanted payloads from this size are checked in place when the walk allows it
/// ([`Walker::check_in_place`]); smaller ones are copied out first and checked in the copy,
/// one medium access fewer per record.
pub(crate) const CHECK_IN_PLACE_MIN: usize = 256;

/// A walk over the ring.
#[derive(Debug)]
pub(crate) struct Walker<'m, M: Medium + ?Sized> {
    medium: &'m M,
    pub geo: Geometry,
    /// Virtual position of the next record.
    pub pos: u64,
    /// Ring bytes walked so far.
    pub walked: u64,
    /// LSN the next record must carry.
    pub expected: u64,
    /// LSN the walk started from (the head's).
    pub start_lsn: u64,
    buf: Vec<u8>,
    payload_len: usize,
    /// The last record's first [`HEAD_READ`] bytes, as read in one access.
    head: [u8; HEAD_READ],
    /// The payload lies in `head` (a record read whole with its header), not in `buf`.
    payload_in_head: bool,
    /// Data records with an LSN in `[trusted.0, trusted.1)` were checked by an earlier walk of
    /// this log (the opening one): their CRC is not computed again.
    pub trusted: (u64, u64),
    /// Wanted payloads are checked where they lie on the medium and copied out once they
    /// pass (the copy then reads from the cache), instead of copied out and checked in the
    /// copy. Only for a walk nothing writes under (the opening one): a payload changing between
    /// the check and the copy would be handed out unchecked.
    pub check_in_place: bool,
    /// Ring position up to which the walk has asked for the bytes ahead
    /// ([`PREFETCH_AHEAD`]).
    prefetched: u64,
}

impl<'m, M: Medium + ?Sized> Walker<'m, M> {
    pub fn new(medium: &'m M, geo: Geometry, head: u64, start_lsn: u64) -> Self {
        Walker {
            medium,
            geo,
            pos: head,
            walked: 0,
            expected: start_lsn,
            start_lsn,
            buf: Vec::new(),
            payload_len: 0,
            head: [0; HEAD_READ],
            payload_in_head: false,
            trusted: (0, 0),
            check_in_place: false,
            prefetched: head,
        }
    }

    fn damaged(&self, at: usize, field: layout::Field, expected: String, found: String) -> Stop {
        Stop::Damaged(Corruption {
            structure: format!("log record LSN {}", self.expected),
            offset: (at + field.offset) as u64,
            field: field.name,
            expected,
            found,
        })
    }

    /// The payload of the record just returned by `step` with `want_payload`.
    pub fn payload(&self) -> &[u8] {
        if self.payload_in_head {
            let at = layout::RECORD_HEADER_BYTES;
            return &self.head[at..at + self.payload_len];
        }
        &self.buf[PREFIX..PREFIX + self.payload_len]
    }

    /// Validate the next record and move past it. With `want_payload`, a data record's payload
    /// is left in [`Walker::payload`].
    pub fn step(&mut self, want_payload: bool) -> Result<Found, Stop> {
        let geo = self.geo;
        if self.walked + layout::RECORD_ALIGN as u64 > geo.ring_bytes {
            return Err(Stop::RingFull);
        }
        let at = geo.at(self.pos);
        // One read brings the header and, for a small record, its whole payload, which the
        // walk then lends from there (`payload_in_head`) rather than copying it again.
        let got =
            (geo.room_to_end(self.pos) as usize).clamp(layout::RECORD_HEADER_BYTES, HEAD_READ);
        self.medium.read(at, &mut self.head[..got]);
        self.payload_in_head = false;
        let head = &self.head;
        let mut hdr = [0u8; layout::RECORD_HEADER_BYTES];
        hdr.copy_from_slice(&head[..layout::RECORD_HEADER_BYTES]);
        let (h, valid, reserved, reserved2) = RecordHeader::parse(&hdr);
        if h.lsn != self.expected {
            return Err(Stop::Tail { found_lsn: h.lsn });
        }
        if valid != valid_word(h.lsn) {
            return Err(Stop::Incomplete { found_valid: valid });
        }
        if reserved != 0 || reserved2 != 0 {
            let (f, v) = if reserved != 0 {
                (r::RESERVED, reserved as u64)
            } else {
                (r::RESERVED2, reserved2 as u64)
            };
            return Err(self.damaged(at, f, "0".into(), v.to_string()));
        }
        let room = geo.room_to_end(self.pos).min(geo.ring_bytes - self.walked);
        let footprint = match h.kind {
            kinds::PADDING => {
                let want = geo.room_to_end(self.pos) - layout::RECORD_HEADER_BYTES as u64;
                if h.length as u64 != want
                    || geo.ring_bytes - self.walked < geo.room_to_end(self.pos)
                {
                    return Err(self.damaged(
                        at,
                        r::LENGTH,
                        want.to_string(),
                        h.length.to_string(),
                    ));
                }
                geo.room_to_end(self.pos)
            }
            kinds::DATA | kinds::JUMP | kinds::VOID => {
                let fp = record_footprint(h.length as usize) as u64;
                if h.length > geo.payload_max
                    || fp > room
                    || (h.kind == kinds::JUMP && h.length != 8)
                {
                    return Err(self.damaged(
                        at,
                        r::LENGTH,
                        format!(
                            "at most {} and inside the ring ({room} bytes left)",
                            geo.payload_max.min(room as u32)
                        ),
                        h.length.to_string(),
                    ));
                }
                fp
            }
            other => {
                return Err(self.damaged(
                    at,
                    r::KIND,
                    format!("one of {}..={}", kinds::DATA, kinds::VOID),
                    other.to_string(),
                ));
            }
        };
        // Keep the bytes a few KiB ahead coming into the cache while this record is checked (the
        // CRC's dependent loads would otherwise wait on memory line by line), asked for in
        // 1 KiB steps. Only next to records of [`CHECK_IN_PLACE_MIN`] bytes or more: behind small
        // ones the hardware's own prefetch keeps up, and asking cost time (64-byte records).
        if footprint >= CHECK_IN_PLACE_MIN as u64 && self.prefetched < self.pos + PREFETCH_AHEAD {
            let from = self.prefetched.max(self.pos + layout::RECORD_ALIGN as u64);
            let len = (self.pos + PREFETCH_AHEAD + PREFETCH_STEP - from).min(geo.room_to_end(from));
            self.medium.prefetch(geo.at(from), len as usize);
            self.prefetched = from + len;
        }
        // The CRC: over the header's first 16 bytes and (for data and jumps) the payload.
        let trusted = h.kind == kinds::DATA && h.lsn >= self.trusted.0 && h.lsn < self.trusted.1;
        let mut jump_to = None;
        if trusted {
            // Checked by the opening walk: only the bytes, if wanted.
            let len = h.length as usize;
            if want_payload {
                if layout::RECORD_HEADER_BYTES + len <= got {
                    self.payload_in_head = true;
                } else {
                    if self.buf.len() < PREFIX + len {
                        self.buf.resize(PREFIX + len, 0);
                    }
                    self.medium.read(
                        at + layout::RECORD_HEADER_BYTES,
                        &mut self.buf[PREFIX..PREFIX + len],
                    );
                }
            }
            self.payload_len = len;
            self.pos += footprint;
            self.walked += footprint;
            self.expected = h.lsn + 1;
            return Ok(Found {
                lsn: h.lsn,
                kind: h.kind,
                at,
                length: h.length,
                footprint,
                jump_to,
            });
        }
        let crc = if h.kind == kinds::DATA || h.kind == kinds::JUMP {
            let len = h.length as usize;
            let payload_at = at + layout::RECORD_HEADER_BYTES;
            let in_place = self.check_in_place && len >= CHECK_IN_PLACE_MIN;
            let need_bytes = want_payload || h.kind == kinds::JUMP;
            let end = layout::RECORD_HEADER_BYTES + len;
            if end <= got {
                // The whole record came with the header's read.
                let p = &head[layout::RECORD_HEADER_BYTES..end];
                let crc = pmem::cpu::crc32c_append(geo.seed, &hdr[..PREFIX]);
                if need_bytes {
                    self.payload_in_head = true;
                    self.payload_len = len;
                }
                pmem::cpu::crc32c_append(crc, p)
            } else if (want_payload && !in_place) || h.kind == kinds::JUMP {
                // The payload goes to `buf[PREFIX..]`, right after a copy of the header's
                // covered bytes (its first 16, the reserved ones checked zero above, so exactly
                // what `crc_start` encodes): the CRC then runs over one contiguous run, and the
                // caller reads the bytes the CRC just brought into the cache. The buffer only
                // grows, so a walk allocates (and zeroes) it once.
                if self.buf.len() < PREFIX + len {
                    self.buf.resize(PREFIX + len, 0);
                }
                self.buf[..PREFIX].copy_from_slice(&hdr[..PREFIX]);
                self.medium
                    .read(payload_at, &mut self.buf[PREFIX..PREFIX + len]);
                self.payload_len = len;
                crate::checksum::append(geo.seed, &self.buf[..PREFIX + len])
            } else {
                // Checked where the bytes lie (a mapping copies nothing for the CRC); a wanted
                // payload that passes is then copied out, from the cache the CRC filled.
                let crc = pmem::cpu::crc32c_append(geo.seed, &hdr[..PREFIX]);
                let crc = self.medium.crc32c(payload_at, len, crc);
                if want_payload && crc == h.payload_crc {
                    if self.buf.len() < PREFIX + len {
                        self.buf.resize(PREFIX + len, 0);
                    }
                    self.medium
                        .read(payload_at, &mut self.buf[PREFIX..PREFIX + len]);
                    self.payload_len = len;
                }
                crc
            }
        } else {
            crc_start(geo.seed, h.lsn, h.length, h.kind)
        };
        if crc != h.payload_crc {
            return Err(self.damaged(
                at,
                r::PAYLOAD_CRC,
                format!("{crc:#010x}"),
                format!("{:#010x}", h.payload_crc),
            ));
        }
        if h.kind == kinds::JUMP {
            let to =
                u64::from_le_bytes(self.payload()[..8].try_into().expect("8-byte jump payload"));
            if to <= h.lsn || to > crate::format::LSN_MAX {
                return Err(self.damaged(
                    at,
                    r::LSN,
                    format!("a jump past {}", h.lsn),
                    to.to_string(),
                ));
            }
            jump_to = Some(to);
        }
        self.pos += footprint;
        self.walked += footprint;
        // Padding carries the LSN of the record after it (at the ring's start).
        self.expected = match h.kind {
            kinds::PADDING => h.lsn,
            _ => jump_to.unwrap_or(h.lsn + 1),
        };
        Ok(Found {
            lsn: h.lsn,
            kind: h.kind,
            at,
            length: h.length,
            footprint,
            jump_to,
        })
    }
}

/// A whole record found past the place a walk stopped, carrying a later LSN than the walk
/// expected there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Later {
    /// Its LSN.
    pub lsn: u64,
    /// Virtual ring position of its header (at or after the stop's).
    pub pos: u64,
    /// Medium offset of its header.
    pub at: usize,
    /// Ring bytes it occupies.
    pub footprint: u64,
    /// Its kind.
    pub kind: u16,
}

/// Whole records past the stop of a walk at virtual position `stop_pos` (having walked
/// `walked` ring bytes, expecting `expected`), with LSNs above `expected` and below
/// `expected + ring_bytes / 64 + 1` (no record of the current lap can carry a higher one),
/// found by trying every 64-byte line of the ring the walk has not covered. At most `max`.
///
/// Nothing a clean history leaves past the tail passes: records of earlier laps and records
/// lost before a jump carry lower LSNs, free space is zeros. So after a clean shutdown such a
/// record is evidence that the walk stopped at damage, not at the end. After a crash, records
/// completed after the last force may lie there too: there it proves nothing.
pub(crate) fn later_records<M: Medium + ?Sized>(
    medium: &M,
    geo: Geometry,
    stop_pos: u64,
    walked: u64,
    expected: u64,
    max: usize,
) -> Vec<Later> {
    let line = layout::RECORD_ALIGN as u64;
    let lsn_limit = expected.saturating_add(geo.ring_bytes / line);
    let mut found = Vec::new();
    let mut offset = line;
    while walked + offset + line <= geo.ring_bytes && found.len() < max {
        let pos = stop_pos + offset;
        let mut hdr = [0u8; layout::RECORD_HEADER_BYTES];
        medium.read(geo.at(pos), &mut hdr);
        let (h, valid, _, _) = RecordHeader::parse(&hdr);
        if h.lsn > expected && h.lsn <= lsn_limit && valid == valid_word(h.lsn) {
            let mut w = Walker::new(medium, geo, pos, h.lsn);
            w.walked = walked + offset;
            if let Ok(f) = w.step(false) {
                found.push(Later {
                    lsn: f.lsn,
                    pos,
                    at: f.at,
                    footprint: f.footprint,
                    kind: f.kind,
                });
                offset += f.footprint;
                continue;
            }
        }
        offset += line;
    }
    found
}

/// What recovery makes of the place its walk stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The end of the log.
    End,
    /// A record the crash may have torn: the log ends before it.
    Torn(Corruption),
    /// Damage: never taken for an end or a torn record.
    Damage(Corruption),
}

/// The facts `judge` decides on.
#[derive(Debug)]
pub(crate) struct Judged<'a> {
    pub stop: &'a Stop,
    /// LSN the walk expected where it stopped.
    pub expected: u64,
    /// Medium offset of the header there.
    pub stop_at: usize,
    pub clean_shutdown: bool,
    /// The superline's `durable_lsn` (0 when the log does not keep it).
    pub durable_lsn: u64,
    /// A whole record with a later LSN past the stop, where it was looked for (after a clean
    /// shutdown, at a `Tail` the durable LSN does not explain).
    pub later: Option<&'a Later>,
}

/// The recovery decision at the walk's stop, as a table (`durable` is `expected <=
/// durable_lsn`: the superline says the record there was durable):
///
/// | stop       | clean | durable | later record | verdict |
/// | ---        | ---   | ---     | ---          | ---     |
/// | RingFull   | any   | any     | any          | end     |
/// | Tail       | any   | yes     | any          | damage (field `lsn`) |
/// | Tail       | yes   | no      | yes          | damage (field `lsn`) |
/// | Tail       | yes   | no      | no           | end     |
/// | Tail       | no    | no      | any          | end     |
/// | Incomplete | yes   | any     | any          | damage (field `valid`) |
/// | Incomplete | no    | yes     | any          | damage (field `valid`) |
/// | Incomplete | no    | no      | any          | torn    |
/// | Damaged    | yes   | any     | any          | damage  |
/// | Damaged    | no    | yes     | any          | damage  |
/// | Damaged    | no    | no      | any          | torn    |
///
/// A clean flag never turns damage into a torn record: only a record past every LSN known
/// durable, after an unclean shutdown, may be one the crash tore.
pub(crate) fn judge(j: &Judged<'_>) -> Verdict {
    let durable = j.expected <= j.durable_lsn;
    let plain = format!("log record LSN {}", j.expected);
    // Why this is damage and not a tail, in the structure's name, so every report carries it.
    let why_durable = || {
        format!(
            " (durable: the superline records every LSN through {} as durable, so this is \
             damage, not a torn record)",
            j.durable_lsn
        )
    };
    match j.stop {
        Stop::RingFull => Verdict::End,
        Stop::Tail { found_lsn } => {
            let reason = if durable {
                why_durable()
            } else if let Some(l) = j.later.filter(|_| j.clean_shutdown) {
                format!(
                    " (not the end of the log: a whole record with the later LSN {} follows at \
                     {:#x}, so this is damage)",
                    l.lsn, l.at
                )
            } else {
                return Verdict::End;
            };
            Verdict::Damage(Corruption {
                structure: format!("{plain}{reason}"),
                offset: (j.stop_at + r::LSN.offset) as u64,
                field: r::LSN.name,
                expected: j.expected.to_string(),
                found: found_lsn.to_string(),
            })
        }
        Stop::Incomplete { found_valid } => {
            let c = Corruption {
                structure: if durable {
                    format!("{plain}{}", why_durable())
                } else {
                    plain
                },
                offset: (j.stop_at + r::VALID.offset) as u64,
                field: r::VALID.name,
                expected: format!("{:#018x}", valid_word(j.expected)),
                found: format!("{found_valid:#018x}"),
            };
            if j.clean_shutdown || durable {
                Verdict::Damage(c)
            } else {
                Verdict::Torn(c)
            }
        }
        Stop::Damaged(c) => {
            let mut c = c.clone();
            if durable {
                c.structure.push_str(&why_durable());
                Verdict::Damage(c)
            } else if j.clean_shutdown {
                Verdict::Damage(c)
            } else {
                Verdict::Torn(c)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corruption() -> Corruption {
        Corruption {
            structure: "log record LSN 7".into(),
            offset: 0x1010,
            field: "payload_crc",
            expected: "0x00000001".into(),
            found: "0x00000002".into(),
        }
    }

    /// Every row of `judge`'s table, each combination of its inputs.
    #[test]
    fn recovery_decision_table() {
        let later = Later {
            lsn: 9,
            pos: 128,
            at: 0x1080,
            footprint: 64,
            kind: kinds::DATA,
        };
        let stops = [
            Stop::RingFull,
            Stop::Tail { found_lsn: 3 },
            Stop::Incomplete { found_valid: 5 },
            Stop::Damaged(corruption()),
        ];
        for stop in &stops {
            for clean in [false, true] {
                for durable_lsn in [0, 6, 7, 100] {
                    for later in [None, Some(&later)] {
                        let durable = 7 <= durable_lsn;
                        let v = judge(&Judged {
                            stop,
                            expected: 7,
                            stop_at: 0x1000,
                            clean_shutdown: clean,
                            durable_lsn,
                            later,
                        });
                        let want = match stop {
                            Stop::RingFull => "end",
                            Stop::Tail { .. } if durable || (clean && later.is_some()) => "damage",
                            Stop::Tail { .. } => "end",
                            _ if clean || durable => "damage",
                            _ => "torn",
                        };
                        let got = match &v {
                            Verdict::End => "end",
                            Verdict::Torn(_) => "torn",
                            Verdict::Damage(_) => "damage",
                        };
                        let case = format!("{stop:?} clean {clean} durable_lsn {durable_lsn}");
                        assert_eq!(got, want, "{case}: {v:?}");
                        if let Verdict::Damage(c) | Verdict::Torn(c) = &v {
                            assert!(c.structure.starts_with("log record LSN 7"), "{case}");
                            assert!((0x1000..0x1040).contains(&c.offset), "{case}: {c}");
                            assert_eq!(durable, c.structure.contains("(durable:"), "{case}");
                        }
                    }
                }
            }
        }
    }
}
