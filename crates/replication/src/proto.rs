//! The replication protocol's messages and their wire encoding.
//!
//! One request, one response, in order, on a connection. A frame is a 16-byte header
//! (`magic "KVRP"`, tag, three zero bytes, body length, CRC-32C of the body; little-endian)
//! followed by the body. `docs/format/replication.md` lists every message and field.

use std::io::{Read, Write};

use log::Extent;

use pmem::codec::{FieldError, Reader, Writer};

use crate::error::ProtoError;

/// Frame magic.
pub const FRAME_MAGIC: [u8; 4] = *b"KVRP";
/// Frame header bytes.
pub const FRAME_HEADER_BYTES: usize = 16;
/// Frame header fields.
pub const FRAME_FIELDS: [pmem::layout::Field; 5] = [
    pmem::layout::Field::new("magic", 0, 4),
    pmem::layout::Field::new("tag", 4, 1),
    pmem::layout::Field::new("reserved", 5, 3),
    pmem::layout::Field::new("body_length", 8, 4),
    pmem::layout::Field::new("body_crc32c", 12, 4),
];
/// Largest body accepted (a repair ships at most this much per message).
pub const FRAME_BODY_MAX: usize = 16 << 20;
/// Bytes of ring a repair ships per message.
pub const REPAIR_CHUNK_BYTES: usize = 4 << 20;

/// Message tags.
pub mod tags {
    /// Request: describe your copy.
    pub const PROBE: u8 = 1;
    /// Request: create an empty copy of a log.
    pub const INIT: u8 = 2;
    /// Request: promise an epoch.
    pub const PROMISE: u8 = 3;
    /// Request: write and persist extents.
    pub const WRITE: u8 = 4;
    /// Request: zero and persist a range.
    pub const ZERO: u8 = 5;
    /// Request: read a range.
    pub const READ: u8 = 6;
    /// Request: a piece of a store snapshot.
    pub const SNAPSHOT: u8 = 7;
    /// Response: a copy's description (or none).
    pub const INFO: u8 = 65;
    /// Response: done and durable.
    pub const ACK: u8 = 66;
    /// Response: bytes read.
    pub const DATA: u8 = 67;
    /// Response: refused, a higher epoch is promised.
    pub const FENCED: u8 = 68;
    /// Response: refused for another reason.
    pub const ERROR: u8 = 69;
    /// Response: done and durable, with the LSN the backup's store has applied.
    pub const APPLIED: u8 = 70;
}

/// What a copy holds, as its owner reads it (a read-only walk of the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CopyInfo {
    /// The log's UUID.
    pub uuid: [u8; 16],
    /// Bytes of the log region.
    pub region_len: u64,
    /// Bytes of its ring.
    pub ring_bytes: u64,
    /// Highest epoch the copy promised to follow (0: none).
    pub promised: u64,
    /// The superline's epoch: the primary whose history this copy holds.
    pub epoch: u64,
    /// Ring offset of the head.
    pub head: u64,
    /// LSN at the head.
    pub start_lsn: u64,
    /// LSN after the last valid record (where the walk stopped).
    pub next_lsn: u64,
    /// Ring bytes from the head to where the walk stopped.
    pub used: u64,
    /// The walk stopped at a record that failed its checks (the copy is good only before it).
    pub damaged: bool,
    /// A descriptor or superline copy failed its checks.
    pub meta_damaged: bool,
    /// Highest LSN the primary told this copy is acknowledged by a quorum.
    pub committed: u64,
}

impl CopyInfo {
    /// Ring offset where the walk stopped (the tail).
    pub fn tail(&self) -> u64 {
        (self.head + self.used) % self.ring_bytes.max(1)
    }
}

/// A request from a primary to a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Describe your copy.
    Probe,
    /// Create an empty copy of the log with this UUID and region size (only where there is no
    /// readable copy).
    Init {
        /// The log's UUID.
        uuid: [u8; 16],
        /// Bytes of the log region.
        region_len: u64,
    },
    /// Promise to follow `epoch` and refuse every lower one; answered with [`Response::Info`].
    Promise {
        /// The epoch.
        epoch: u64,
    },
    /// Write and persist these extents (offsets from the region's start), then acknowledge.
    Write {
        /// The sender's epoch (must equal the promised one).
        epoch: u64,
        /// Highest LSN acknowledged by a quorum so far.
        committed: u64,
        /// The bytes.
        extents: Vec<Extent>,
    },
    /// Zero and persist `[offset, offset + len)` of the region.
    Zero {
        /// The sender's epoch.
        epoch: u64,
        /// Start.
        offset: u64,
        /// Length.
        len: u64,
    },
    /// Read `[offset, offset + len)` of the region.
    Read {
        /// Start.
        offset: u64,
        /// Length.
        len: u64,
    },
    /// One piece of a snapshot of the primary's store as of LSN `lsn`, for a backup whose
    /// store is too far behind to catch up from the log (its records were trimmed). Pieces
    /// come in order from `seq` 0; the first empties the backup's store, the `last` one makes
    /// it current at `lsn`. `data` is opaque to the protocol (the store's encoding).
    Snapshot {
        /// The sender's epoch (must equal the promised one).
        epoch: u64,
        /// The LSN the snapshot is current at.
        lsn: u64,
        /// Piece number, from 0.
        seq: u64,
        /// This piece ends the snapshot.
        last: bool,
        /// The piece.
        data: Vec<u8>,
    },
}

/// A copy's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// The copy (or `None`: no readable copy here).
    Info(Option<CopyInfo>),
    /// Done and durable.
    Ack,
    /// Bytes read.
    Data(Vec<u8>),
    /// Refused: this epoch is promised.
    Fenced {
        /// The promised epoch.
        promised: u64,
    },
    /// Refused.
    Error(String),
    /// Done and durable (as [`Response::Ack`]); the backup's store has applied every record
    /// up to `applied` (durably), so the primary may trim the log up to there.
    Applied {
        /// The LSN.
        applied: u64,
    },
}

impl Response {
    /// Done and durable: [`Response::Ack`] or [`Response::Applied`].
    pub fn is_ack(&self) -> bool {
        matches!(self, Response::Ack | Response::Applied { .. })
    }
}

impl Request {
    /// A short name for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Probe => "probe",
            Request::Init { .. } => "init",
            Request::Promise { .. } => "promise",
            Request::Write { .. } => "write",
            Request::Zero { .. } => "zero",
            Request::Read { .. } => "read",
            Request::Snapshot { .. } => "snapshot",
        }
    }

    /// Encode into a frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Writer::new();
        let tag = match self {
            Request::Probe => tags::PROBE,
            Request::Init { uuid, region_len } => {
                b.bytes(uuid).u64(*region_len);
                tags::INIT
            }
            Request::Promise { epoch } => {
                b.u64(*epoch);
                tags::PROMISE
            }
            Request::Write {
                epoch,
                committed,
                extents,
            } => {
                b.u64(*epoch).u64(*committed).count(extents.len());
                for e in extents {
                    b.u64(e.offset).len_bytes(&e.bytes);
                }
                tags::WRITE
            }
            Request::Zero { epoch, offset, len } => {
                b.u64(*epoch).u64(*offset).u64(*len);
                tags::ZERO
            }
            Request::Read { offset, len } => {
                b.u64(*offset).u64(*len);
                tags::READ
            }
            Request::Snapshot {
                epoch,
                lsn,
                seq,
                last,
                data,
            } => {
                b.u64(*epoch)
                    .u64(*lsn)
                    .u64(*seq)
                    .u8(u8::from(*last))
                    .bytes(data);
                tags::SNAPSHOT
            }
        };
        frame(tag, b.into_bytes())
    }

    /// Decode a frame's tag and body.
    pub fn decode(tag: u8, body: &[u8]) -> Result<Request, ProtoError> {
        let mut r = body_reader(body);
        let req = match tag {
            tags::PROBE => Request::Probe,
            tags::INIT => Request::Init {
                uuid: r.array("uuid")?,
                region_len: r.u64("region_len")?,
            },
            tags::PROMISE => Request::Promise {
                epoch: r.u64("epoch")?,
            },
            tags::WRITE => {
                let epoch = r.u64("epoch")?;
                let committed = r.u64("committed")?;
                let n = r.count("extent count", 12)?;
                let mut extents = Vec::with_capacity(n);
                for _ in 0..n {
                    let offset = r.u64("extent offset")?;
                    let len = r.u32("extent length")? as usize;
                    extents.push(Extent {
                        offset,
                        bytes: r.bytes("extent bytes", len)?.to_vec(),
                    });
                }
                Request::Write {
                    epoch,
                    committed,
                    extents,
                }
            }
            tags::ZERO => Request::Zero {
                epoch: r.u64("epoch")?,
                offset: r.u64("offset")?,
                len: r.u64("len")?,
            },
            tags::READ => Request::Read {
                offset: r.u64("offset")?,
                len: r.u64("len")?,
            },
            tags::SNAPSHOT => {
                let epoch = r.u64("epoch")?;
                let lsn = r.u64("lsn")?;
                let seq = r.u64("seq")?;
                let at = r.pos();
                let last = match r.u8("last")? {
                    0 => false,
                    1 => true,
                    other => return Err(r.invalid("last", at, "0 or 1", other).into()),
                };
                Request::Snapshot {
                    epoch,
                    lsn,
                    seq,
                    last,
                    data: r.rest().to_vec(),
                }
            }
            other => return Err(bad("tag", 4, "a request tag (1..=7)", other)),
        };
        end_of_body(&r)?;
        Ok(req)
    }
}

impl Response {
    /// Encode into a frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Writer::new();
        let tag = match self {
            Response::Info(None) => {
                b.u8(0);
                tags::INFO
            }
            Response::Info(Some(i)) => {
                b.u8(1).bytes(&i.uuid);
                for v in [
                    i.region_len,
                    i.ring_bytes,
                    i.promised,
                    i.epoch,
                    i.head,
                    i.start_lsn,
                    i.next_lsn,
                    i.used,
                    i.committed,
                ] {
                    b.u64(v);
                }
                b.u8(u8::from(i.damaged) | (u8::from(i.meta_damaged) << 1));
                tags::INFO
            }
            Response::Ack => tags::ACK,
            Response::Data(d) => {
                b.bytes(d);
                tags::DATA
            }
            Response::Fenced { promised } => {
                b.u64(*promised);
                tags::FENCED
            }
            Response::Error(s) => {
                b.bytes(s.as_bytes());
                tags::ERROR
            }
            Response::Applied { applied } => {
                b.u64(*applied);
                tags::APPLIED
            }
        };
        frame(tag, b.into_bytes())
    }

    /// Decode a frame's tag and body.
    pub fn decode(tag: u8, body: &[u8]) -> Result<Response, ProtoError> {
        let mut r = body_reader(body);
        let resp = match tag {
            tags::INFO => match r.u8("present")? {
                0 => Response::Info(None),
                1 => {
                    let uuid = r.array("uuid")?;
                    let mut v = [0u64; 9];
                    for (x, name) in v.iter_mut().zip([
                        "region_len",
                        "ring_bytes",
                        "promised",
                        "epoch",
                        "head",
                        "start_lsn",
                        "next_lsn",
                        "used",
                        "committed",
                    ]) {
                        *x = r.u64(name)?;
                    }
                    let at = r.pos();
                    let flags = r.u8("flags")?;
                    if flags > 3 {
                        return Err(r.invalid("flags", at, "0..=3", flags).into());
                    }
                    Response::Info(Some(CopyInfo {
                        uuid,
                        region_len: v[0],
                        ring_bytes: v[1],
                        promised: v[2],
                        epoch: v[3],
                        head: v[4],
                        start_lsn: v[5],
                        next_lsn: v[6],
                        used: v[7],
                        committed: v[8],
                        damaged: flags & 1 != 0,
                        meta_damaged: flags & 2 != 0,
                    }))
                }
                other => return Err(r.invalid("present", 0, "0 or 1", other).into()),
            },
            tags::ACK => Response::Ack,
            tags::DATA => Response::Data(r.rest().to_vec()),
            tags::FENCED => Response::Fenced {
                promised: r.u64("promised")?,
            },
            tags::ERROR => Response::Error(String::from_utf8_lossy(r.rest()).into_owned()),
            tags::APPLIED => Response::Applied {
                applied: r.u64("applied")?,
            },
            other => return Err(bad("tag", 4, "a response tag (65..=70)", other)),
        };
        end_of_body(&r)?;
        Ok(resp)
    }
}

fn frame(tag: u8, body: Vec<u8>) -> Vec<u8> {
    let mut f = Writer::with_capacity(FRAME_HEADER_BYTES + body.len());
    f.bytes(&FRAME_MAGIC)
        .u8(tag)
        .bytes(&[0, 0, 0])
        .count(body.len())
        .u32(crc32c::crc32c(&body))
        .bytes(&body);
    f.into_bytes()
}

/// A reader over a frame's body; offsets in its errors are from the frame's start.
fn body_reader(body: &[u8]) -> Reader<'_> {
    Reader::new("replication message", body).at(FRAME_HEADER_BYTES as u64)
}

/// Bytes after a message's last field are an error naming the `body`.
fn end_of_body(r: &Reader<'_>) -> Result<(), ProtoError> {
    r.finish()
        .map_err(|e| FieldError { field: "body", ..e }.into())
}

impl From<FieldError> for ProtoError {
    fn from(e: FieldError) -> ProtoError {
        ProtoError {
            field: e.field,
            offset: usize::try_from(e.offset).unwrap_or(usize::MAX),
            expected: e.problem.expected(),
            found: e.problem.found(),
        }
    }
}

fn bad(field: &'static str, offset: usize, expected: &str, found: impl ToString) -> ProtoError {
    ProtoError {
        field,
        offset,
        expected: expected.to_string(),
        found: found.to_string(),
    }
}

/// Check a frame header; returns the tag and body length.
pub fn parse_header(h: &[u8; FRAME_HEADER_BYTES]) -> Result<(u8, usize, u32), ProtoError> {
    let r = Reader::new("replication frame header", h);
    let [magic, tag, reserved, length, crc] = FRAME_FIELDS;
    let found = r.field(magic)?;
    if found != FRAME_MAGIC {
        return Err(bad("magic", 0, "\"KVRP\"", format!("{found:02x?}")));
    }
    let tag = r.u8_at(tag.name, tag.offset)?;
    let zeros = r.field(reserved)?;
    if zeros != [0, 0, 0] {
        return Err(bad("reserved", 5, "zero", format!("{zeros:02x?}")));
    }
    let len = r.field_u32(length)? as usize;
    if len > FRAME_BODY_MAX {
        return Err(bad(
            "body length",
            8,
            &format!("at most {FRAME_BODY_MAX}"),
            len,
        ));
    }
    let crc = r.field_u32(crc)?;
    Ok((tag, len, crc))
}

/// Why reading a frame failed.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The connection failed or closed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The bytes are not a valid frame.
    #[error(transparent)]
    Proto(#[from] ProtoError),
}

/// Read one frame: its tag and verified body.
pub fn read_frame(r: &mut impl Read) -> Result<(u8, Vec<u8>), FrameError> {
    let mut h = [0u8; FRAME_HEADER_BYTES];
    r.read_exact(&mut h)?;
    let (tag, len, crc) = parse_header(&h)?;
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    let found = crc32c::crc32c(&body);
    if found != crc {
        return Err(bad(
            "body crc32c",
            12,
            &format!("{crc:#010x}"),
            format!("{found:#010x}"),
        )
        .into());
    }
    Ok((tag, body))
}

/// Write a whole frame.
pub fn write_frame(w: &mut impl Write, frame: &[u8]) -> std::io::Result<()> {
    w.write_all(frame)?;
    w.flush()
}

/// Split a frame produced by `encode` into tag and body (for in-process transports and tests).
pub fn split_frame(frame: &[u8]) -> Result<(u8, &[u8]), ProtoError> {
    let h: &[u8; FRAME_HEADER_BYTES] = frame
        .get(..FRAME_HEADER_BYTES)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(|| bad("header", 0, "16 bytes", frame.len()))?;
    let (tag, len, crc) = parse_header(h)?;
    let body = &frame[FRAME_HEADER_BYTES..];
    if body.len() != len {
        return Err(bad("body length", 8, &len.to_string(), body.len()));
    }
    if crc32c::crc32c(body) != crc {
        return Err(bad("body crc32c", 12, &format!("{crc:#010x}"), "mismatch"));
    }
    Ok((tag, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_req(r: Request) {
        let f = r.encode();
        let (tag, body) = split_frame(&f).expect("frame");
        assert_eq!(Request::decode(tag, body).expect("decode"), r);
    }

    #[test]
    fn requests_and_responses_round_trip() {
        round_req(Request::Probe);
        round_req(Request::Init {
            uuid: [7; 16],
            region_len: 1 << 20,
        });
        round_req(Request::Promise { epoch: 9 });
        round_req(Request::Write {
            epoch: 3,
            committed: 17,
            extents: vec![
                Extent {
                    offset: 4096,
                    bytes: vec![1, 2, 3],
                },
                Extent {
                    offset: 128,
                    bytes: vec![9; 64],
                },
            ],
        });
        round_req(Request::Zero {
            epoch: 2,
            offset: 8192,
            len: 100,
        });
        round_req(Request::Read { offset: 1, len: 2 });
        round_req(Request::Snapshot {
            epoch: 3,
            lsn: 99,
            seq: 0,
            last: false,
            data: vec![1, 2, 3],
        });
        round_req(Request::Snapshot {
            epoch: 3,
            lsn: 99,
            seq: 1,
            last: true,
            data: Vec::new(),
        });
        let info = CopyInfo {
            uuid: [1; 16],
            region_len: 2,
            ring_bytes: 3,
            promised: 4,
            epoch: 5,
            head: 6,
            start_lsn: 7,
            next_lsn: 8,
            used: 9,
            damaged: true,
            meta_damaged: false,
            committed: 10,
        };
        for r in [
            Response::Info(None),
            Response::Info(Some(info)),
            Response::Ack,
            Response::Data(vec![5; 10]),
            Response::Fenced { promised: 4 },
            Response::Error("no".into()),
            Response::Applied { applied: 77 },
        ] {
            let f = r.encode();
            let (tag, body) = split_frame(&f).expect("frame");
            assert_eq!(Response::decode(tag, body).expect("decode"), r);
        }
    }

    #[test]
    fn damaged_frames_are_typed_errors_naming_the_field() {
        let mut f = Request::Promise { epoch: 5 }.encode();
        f[FRAME_HEADER_BYTES] ^= 1;
        assert_eq!(split_frame(&f).unwrap_err().field, "body crc32c");
        let mut f = Request::Probe.encode();
        f[0] = b'X';
        assert_eq!(split_frame(&f).unwrap_err().field, "magic");
        // A write whose extent claims more bytes than the body holds.
        let f = Request::Write {
            epoch: 1,
            committed: 0,
            extents: vec![Extent {
                offset: 0,
                bytes: vec![0; 8],
            }],
        }
        .encode();
        let (tag, body) = split_frame(&f).expect("frame");
        let e = Request::decode(tag, &body[..body.len() - 1]).unwrap_err();
        assert_eq!(e.field, "extent bytes");
        assert_eq!(Request::decode(99, &[]).unwrap_err().field, "tag");
        let e = Request::decode(tags::PROMISE, &[0; 9]).unwrap_err();
        assert_eq!(e.field, "body");
    }
}
