//! The replication protocol's messages and their wire encoding.
//!
//! One request, one response, in order, on a connection. A frame is a 16-byte header
//! (`magic "KVRP"`, tag, three zero bytes, body length, CRC-32C of the body; little-endian)
//! followed by the body. `docs/format/replication.md` lists every message and field.

use std::io::{Read, Write};

use log::Extent;

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
        }
    }

    /// Encode into a frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        let tag = match self {
            Request::Probe => tags::PROBE,
            Request::Init { uuid, region_len } => {
                b.extend_from_slice(uuid);
                put(&mut b, *region_len);
                tags::INIT
            }
            Request::Promise { epoch } => {
                put(&mut b, *epoch);
                tags::PROMISE
            }
            Request::Write {
                epoch,
                committed,
                extents,
            } => {
                put(&mut b, *epoch);
                put(&mut b, *committed);
                b.extend_from_slice(&(extents.len() as u32).to_le_bytes());
                for e in extents {
                    put(&mut b, e.offset);
                    b.extend_from_slice(&(e.bytes.len() as u32).to_le_bytes());
                    b.extend_from_slice(&e.bytes);
                }
                tags::WRITE
            }
            Request::Zero { epoch, offset, len } => {
                put(&mut b, *epoch);
                put(&mut b, *offset);
                put(&mut b, *len);
                tags::ZERO
            }
            Request::Read { offset, len } => {
                put(&mut b, *offset);
                put(&mut b, *len);
                tags::READ
            }
        };
        frame(tag, b)
    }

    /// Decode a frame's tag and body.
    pub fn decode(tag: u8, body: &[u8]) -> Result<Request, ProtoError> {
        let mut r = Body::new(body);
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
                let n = r.u32("extent count")? as usize;
                let mut extents = Vec::with_capacity(n.min(1024));
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
            other => return Err(bad("tag", 4, "a request tag (1..=6)", other)),
        };
        r.end()?;
        Ok(req)
    }
}

impl Response {
    /// Encode into a frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        let tag = match self {
            Response::Info(None) => {
                b.push(0);
                tags::INFO
            }
            Response::Info(Some(i)) => {
                b.push(1);
                b.extend_from_slice(&i.uuid);
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
                    put(&mut b, v);
                }
                b.push(u8::from(i.damaged) | (u8::from(i.meta_damaged) << 1));
                tags::INFO
            }
            Response::Ack => tags::ACK,
            Response::Data(d) => {
                b.extend_from_slice(d);
                tags::DATA
            }
            Response::Fenced { promised } => {
                put(&mut b, *promised);
                tags::FENCED
            }
            Response::Error(s) => {
                b.extend_from_slice(s.as_bytes());
                tags::ERROR
            }
        };
        frame(tag, b)
    }

    /// Decode a frame's tag and body.
    pub fn decode(tag: u8, body: &[u8]) -> Result<Response, ProtoError> {
        let mut r = Body::new(body);
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
                    let flags = r.u8("flags")?;
                    if flags > 3 {
                        return Err(bad("flags", r.at - 1, "0..=3", flags));
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
                other => return Err(bad("present", r.at - 1, "0 or 1", other)),
            },
            tags::ACK => Response::Ack,
            tags::DATA => Response::Data(r.rest().to_vec()),
            tags::FENCED => Response::Fenced {
                promised: r.u64("promised")?,
            },
            tags::ERROR => Response::Error(String::from_utf8_lossy(r.rest()).into_owned()),
            other => return Err(bad("tag", 4, "a response tag (65..=69)", other)),
        };
        r.end()?;
        Ok(resp)
    }
}

fn put(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_le_bytes());
}

fn frame(tag: u8, body: Vec<u8>) -> Vec<u8> {
    let mut f = Vec::with_capacity(FRAME_HEADER_BYTES + body.len());
    f.extend_from_slice(&FRAME_MAGIC);
    f.extend_from_slice(&[tag, 0, 0, 0]);
    f.extend_from_slice(&(body.len() as u32).to_le_bytes());
    f.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    f.extend_from_slice(&body);
    f
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
    if h[0..4] != FRAME_MAGIC {
        return Err(bad("magic", 0, "\"KVRP\"", format!("{:02x?}", &h[0..4])));
    }
    if h[5..8] != [0, 0, 0] {
        return Err(bad("reserved", 5, "zero", format!("{:02x?}", &h[5..8])));
    }
    let len = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
    if len > FRAME_BODY_MAX {
        return Err(bad(
            "body length",
            8,
            &format!("at most {FRAME_BODY_MAX}"),
            len,
        ));
    }
    let crc = u32::from_le_bytes([h[12], h[13], h[14], h[15]]);
    Ok((h[4], len, crc))
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

struct Body<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Body<'a> {
    fn new(b: &'a [u8]) -> Self {
        Body { b, at: 0 }
    }
    fn bytes(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], ProtoError> {
        let off = FRAME_HEADER_BYTES + self.at;
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or_else(|| {
            bad(
                field,
                off,
                &format!("{n} bytes"),
                format!("{} left", self.b.len() - self.at),
            )
        })?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self, field: &'static str) -> Result<u8, ProtoError> {
        Ok(self.bytes(field, 1)?[0])
    }
    fn u32(&mut self, field: &'static str) -> Result<u32, ProtoError> {
        let s = self.bytes(field, 4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self, field: &'static str) -> Result<u64, ProtoError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.bytes(field, 8)?);
        Ok(u64::from_le_bytes(a))
    }
    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], ProtoError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(field, N)?);
        Ok(a)
    }
    fn rest(&mut self) -> &'a [u8] {
        let s = &self.b[self.at..];
        self.at = self.b.len();
        s
    }
    fn end(&self) -> Result<(), ProtoError> {
        if self.at != self.b.len() {
            return Err(bad(
                "body",
                FRAME_HEADER_BYTES + self.at,
                "end of message",
                format!("{} more bytes", self.b.len() - self.at),
            ));
        }
        Ok(())
    }
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
