//! Traces: the load/store/flush/fence stream of a run over a range of persistent memory, in a
//! compact binary file (format: `docs/format/tvarak-trace.md`).
//!
//! A trace file is a fixed header ([`header`]), the trace's name, then one raw deflate stream
//! holding the events. Each event is an op byte, the core that issued it, and for accesses the
//! address as a zigzag varint *delta* from where that core's previous access ended, then the
//! length, then (in a trace with data) the stored bytes. The stream ends with an end op and the
//! number of events, so a cut-off file is told from a complete one.
//!
//! Every byte read is validated: a bad magic or version, a truncated file or body, an unknown op,
//! a core beyond the header's count, a length over its limit or an access past `pm_bytes` is a
//! [`SimError::Trace`] naming where (header byte or event index), what, what was expected and what was
//! found. Nothing read from a file can make the reader panic or allocate more than
//! [`MAX_ACCESS_LEN`] (or [`MAX_TX_RANGES`] ranges) at once.

use flate2::write::DeflateEncoder;
use flate2::{Compression, Decompress, FlushDecompress, Status};
use pmem::layout::Field;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

use crate::error::SimError;

/// One event of a trace. Addresses are byte addresses in the traced PM range (offset from its
/// start); `core` says which thread (simulated core) did it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A load of `len` bytes at `addr`.
    Load { core: u16, addr: u64, len: u32 },
    /// A store of `len` bytes at `addr`; `data` holds them in a trace with data, and is `None`
    /// in an address-only trace.
    Store {
        core: u16,
        addr: u64,
        data: Option<Vec<u8>>,
        len: u32,
    },
    /// A write-back (clwb/clflushopt) of the cache line holding `addr`.
    Flush { core: u16, addr: u64 },
    /// A store fence: earlier flushes are durable after it.
    Fence { core: u16 },
    /// A transaction starts on `core`.
    TxBegin { core: u16 },
    /// The transaction on `core` commits; `ranges` are the (address, length) ranges it modified.
    TxCommit { core: u16, ranges: Vec<(u64, u32)> },
    /// `cycles` cycles of work on `core` that touch no traced memory (a generator's estimate of
    /// the instructions between accesses, such as fio's own bookkeeping per I/O). Version 2.
    Work { core: u16, cycles: u32 },
}

impl Event {
    /// The core that issued the event.
    pub fn core(&self) -> u16 {
        match *self {
            Event::Load { core, .. }
            | Event::Store { core, .. }
            | Event::Flush { core, .. }
            | Event::Fence { core }
            | Event::TxBegin { core }
            | Event::TxCommit { core, .. }
            | Event::Work { core, .. } => core,
        }
    }
}

/// What a trace says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceHeader {
    /// A name for messages and tables (UTF-8, at most [`MAX_NAME_BYTES`] bytes).
    pub name: String,
    /// Size of the traced PM range: every access lies inside `[0, pm_bytes)`.
    pub pm_bytes: u64,
    /// Number of cores (threads): every event's core is below it.
    pub cores: u16,
    /// True if stores carry their bytes.
    pub with_data: bool,
}

/// The file's first bytes.
pub const MAGIC: [u8; 8] = *b"KAVTRACE";
/// The format version this code writes (it reads `MIN_VERSION..=VERSION`).
pub const VERSION: u16 = 2;
/// The oldest version this code reads: version 1 is version 2 without the `WORK` op.
pub const MIN_VERSION: u16 = 1;
/// Bytes of the fixed header (the name follows it).
pub const HEADER_BYTES: usize = 24;
/// Longest name, in bytes.
pub const MAX_NAME_BYTES: u16 = 256;
/// Largest `pm_bytes` (256 TiB).
pub const MAX_PM_BYTES: u64 = 1 << 48;
/// Most cores.
pub const MAX_CORES: u16 = 4096;
/// Longest single load or store, in bytes (a recorder splits longer accesses).
pub const MAX_ACCESS_LEN: u32 = 1 << 20;
/// Most ranges in one `TxCommit`.
pub const MAX_TX_RANGES: u32 = 65_536;
/// Header flag: stores carry their bytes.
pub const FLAG_WITH_DATA: u16 = 1;

/// The fixed header's fields (all little-endian).
pub mod header {
    use super::Field;
    /// `MAGIC`.
    pub const MAGIC: Field = Field::new("magic", 0, 8);
    /// `VERSION`.
    pub const VERSION: Field = Field::new("version", 8, 2);
    /// Flags: bit 0 is `FLAG_WITH_DATA`; the others are zero.
    pub const FLAGS: Field = Field::new("flags", 10, 2);
    /// Number of cores.
    pub const CORES: Field = Field::new("cores", 12, 2);
    /// Length of the name that follows the header.
    pub const NAME_LEN: Field = Field::new("name_len", 14, 2);
    /// Size of the traced range.
    pub const PM_BYTES: Field = Field::new("pm_bytes", 16, 8);
    /// All of them, in order.
    pub const FIELDS: [Field; 6] = [MAGIC, VERSION, FLAGS, CORES, NAME_LEN, PM_BYTES];
}

/// The op bytes of the event stream.
pub mod op {
    /// `Load`: core, address delta, length.
    pub const LOAD: u8 = 1;
    /// `Store`: core, address delta, length, and the bytes in a trace with data.
    pub const STORE: u8 = 2;
    /// `Flush`: core, address delta.
    pub const FLUSH: u8 = 3;
    /// `Fence`: core.
    pub const FENCE: u8 = 4;
    /// `TxBegin`: core.
    pub const TX_BEGIN: u8 = 5;
    /// `TxCommit`: core, range count, then per range its address and length.
    pub const TX_COMMIT: u8 = 6;
    /// `Work`: core, cycles (version 2 and later).
    pub const WORK: u8 = 7;
    /// End of the stream: the number of events follows.
    pub const END: u8 = 0xFF;
    /// Every op, named as in the format document.
    pub const ALL: [(&str, u8); 8] = [
        ("LOAD", LOAD),
        ("STORE", STORE),
        ("FLUSH", FLUSH),
        ("FENCE", FENCE),
        ("TX_BEGIN", TX_BEGIN),
        ("TX_COMMIT", TX_COMMIT),
        ("WORK", WORK),
        ("END", END),
    ];
}

/// Where in a trace a problem is: it becomes [`SimError::Trace`]'s `at` (a header byte or an
/// event index) and the start of its `what`.
#[derive(Debug, Clone, Copy)]
enum Loc {
    /// Byte offset from the start of the file (header and name).
    Header(u64),
    /// An event being read: its index and its offset in the decompressed body.
    Event { index: u64, byte: u64 },
    /// An event given to the writer: its index.
    Push(u64),
}

impl std::fmt::Display for Loc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Loc::Header(b) => write!(f, "header byte {b}"),
            Loc::Event { index, byte } => {
                write!(f, "event {index} (decompressed body byte {byte})")
            }
            Loc::Push(i) => write!(f, "event {i} given to the writer"),
        }
    }
}

/// Results of this module.
pub type Result<T> = std::result::Result<T, SimError>;

fn invalid(
    loc: Loc,
    what: impl std::fmt::Display,
    expected: impl std::fmt::Display,
    found: impl std::fmt::Display,
) -> SimError {
    let at = match loc {
        Loc::Header(b) => b,
        Loc::Event { index, .. } | Loc::Push(index) => index,
    };
    SimError::Trace {
        at,
        what: format!("{loc}: {what}"),
        expected: expected.to_string(),
        found: found.to_string(),
    }
}

fn io_err(what: impl Into<String>, source: io::Error) -> SimError {
    SimError::Io {
        what: what.into(),
        source,
    }
}

impl TraceHeader {
    fn validate(&self) -> Result<()> {
        if self.name.len() > MAX_NAME_BYTES as usize {
            return Err(invalid(
                Loc::Header(header::NAME_LEN.offset as u64),
                "name length",
                format!("at most {MAX_NAME_BYTES} bytes"),
                self.name.len(),
            ));
        }
        if self.pm_bytes == 0 || self.pm_bytes > MAX_PM_BYTES {
            return Err(invalid(
                Loc::Header(header::PM_BYTES.offset as u64),
                "pm_bytes",
                format!("1 to {MAX_PM_BYTES}"),
                self.pm_bytes,
            ));
        }
        if self.cores == 0 || self.cores > MAX_CORES {
            return Err(invalid(
                Loc::Header(header::CORES.offset as u64),
                "cores",
                format!("1 to {MAX_CORES}"),
                self.cores,
            ));
        }
        Ok(())
    }

    /// The header's bytes as they start a file (fixed part, then the name).
    pub fn encode(&self) -> Result<Vec<u8>> {
        self.validate()?;
        let mut b = Vec::with_capacity(HEADER_BYTES + self.name.len());
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        let flags = if self.with_data { FLAG_WITH_DATA } else { 0 };
        b.extend_from_slice(&flags.to_le_bytes());
        b.extend_from_slice(&self.cores.to_le_bytes());
        b.extend_from_slice(&(self.name.len() as u16).to_le_bytes());
        b.extend_from_slice(&self.pm_bytes.to_le_bytes());
        debug_assert_eq!(b.len(), HEADER_BYTES);
        b.extend_from_slice(self.name.as_bytes());
        Ok(b)
    }

    /// Read and validate a header from the start of `r`.
    pub fn decode<R: Read>(r: &mut R) -> Result<TraceHeader> {
        Self::decode_versioned(r).map(|(h, _)| h)
    }

    /// [`TraceHeader::decode`], also giving the file's format version.
    pub fn decode_versioned<R: Read>(r: &mut R) -> Result<(TraceHeader, u16)> {
        let mut fixed = [0u8; HEADER_BYTES];
        read_exact(r, &mut fixed, Loc::Header(0), "header")?;
        let u16_at = |f: Field| u16::from_le_bytes([fixed[f.offset], fixed[f.offset + 1]]);
        if fixed[..8] != MAGIC {
            return Err(invalid(
                Loc::Header(0),
                "magic",
                format!("{:?}", String::from_utf8_lossy(&MAGIC)),
                format!("{:?}", String::from_utf8_lossy(&fixed[..8])),
            ));
        }
        let version = u16_at(header::VERSION);
        if !(MIN_VERSION..=VERSION).contains(&version) {
            return Err(invalid(
                Loc::Header(8),
                "version",
                format!("{MIN_VERSION} to {VERSION}"),
                version,
            ));
        }
        let flags = u16_at(header::FLAGS);
        if flags & !FLAG_WITH_DATA != 0 {
            return Err(invalid(
                Loc::Header(10),
                "flags",
                format!("only bit 0 ({FLAG_WITH_DATA:#x})"),
                format!("{flags:#x}"),
            ));
        }
        let cores = u16_at(header::CORES);
        if cores == 0 || cores > MAX_CORES {
            return Err(invalid(
                Loc::Header(12),
                "cores",
                format!("1 to {MAX_CORES}"),
                cores,
            ));
        }
        let name_len = u16_at(header::NAME_LEN);
        if name_len > MAX_NAME_BYTES {
            return Err(invalid(
                Loc::Header(14),
                "name_len",
                format!("at most {MAX_NAME_BYTES}"),
                name_len,
            ));
        }
        let mut pm = [0u8; 8];
        pm.copy_from_slice(&fixed[16..24]);
        let pm_bytes = u64::from_le_bytes(pm);
        if pm_bytes == 0 || pm_bytes > MAX_PM_BYTES {
            return Err(invalid(
                Loc::Header(16),
                "pm_bytes",
                format!("1 to {MAX_PM_BYTES}"),
                pm_bytes,
            ));
        }
        let mut name = vec![0u8; name_len as usize];
        read_exact(r, &mut name, Loc::Header(HEADER_BYTES as u64), "name")?;
        let name = String::from_utf8(name).map_err(|e| {
            invalid(
                Loc::Header((HEADER_BYTES + e.utf8_error().valid_up_to()) as u64),
                "name",
                "UTF-8",
                "invalid UTF-8",
            )
        })?;
        Ok((
            TraceHeader {
                name,
                pm_bytes,
                cores,
                with_data: flags & FLAG_WITH_DATA != 0,
            },
            version,
        ))
    }
}

fn read_exact<R: Read>(r: &mut R, buf: &mut [u8], loc: Loc, what: &str) -> Result<()> {
    r.read_exact(buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            invalid(
                loc,
                format!("{what} (truncated file)"),
                format!("{} bytes", buf.len()),
                "end of file",
            )
        } else {
            io_err(format!("reading {loc}"), e)
        }
    })
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

/// Where each core's previous access ended: the base of its next address delta.
#[derive(Debug)]
struct Cursors(Vec<u64>);

impl Cursors {
    fn new(cores: u16) -> Self {
        Cursors(vec![0; cores as usize])
    }
}

/// Check an event against a header: the one set of rules the writer and the reader share.
fn check_event(h: &TraceHeader, e: &Event, at: &dyn Fn() -> Loc) -> Result<()> {
    let core = e.core();
    if core >= h.cores {
        return Err(invalid(at(), "core", format!("below {}", h.cores), core));
    }
    let range = |addr: u64, len: u64| -> Result<()> {
        if addr > h.pm_bytes || len > h.pm_bytes - addr {
            return Err(invalid(
                at(),
                "address",
                format!("a range inside [0, {:#x})", h.pm_bytes),
                format!("[{addr:#x}, +{len:#x})"),
            ));
        }
        Ok(())
    };
    let length = |len: u32| -> Result<()> {
        if len == 0 || len > MAX_ACCESS_LEN {
            return Err(invalid(
                at(),
                "length",
                format!("1 to {MAX_ACCESS_LEN}"),
                len,
            ));
        }
        Ok(())
    };
    match e {
        Event::Load { addr, len, .. } => {
            length(*len)?;
            range(*addr, *len as u64)
        }
        Event::Store {
            addr, len, data, ..
        } => {
            length(*len)?;
            range(*addr, *len as u64)?;
            match (h.with_data, data) {
                (true, Some(d)) if d.len() == *len as usize => Ok(()),
                (true, Some(d)) => Err(invalid(at(), "store data", *len, d.len())),
                (true, None) => Err(invalid(at(), "store data", "bytes", "none")),
                (false, None) => Ok(()),
                (false, Some(_)) => Err(invalid(
                    at(),
                    "store data",
                    "none (address-only trace)",
                    "bytes",
                )),
            }
        }
        Event::Flush { addr, .. } => range(*addr, 1),
        Event::Fence { .. } | Event::TxBegin { .. } | Event::Work { .. } => Ok(()),
        Event::TxCommit { ranges, .. } => {
            if ranges.len() > MAX_TX_RANGES as usize {
                return Err(invalid(
                    at(),
                    "range count",
                    format!("at most {MAX_TX_RANGES}"),
                    ranges.len(),
                ));
            }
            for &(a, l) in ranges {
                range(a, l as u64)?;
            }
            Ok(())
        }
    }
}

/// Encoded events gathered before they go to the compressor.
const BATCH_BYTES: usize = 64 * 1024;

/// Writes a trace: the header at once, then events as they are pushed, compressed.
pub struct TraceWriter<W: Write> {
    header: TraceHeader,
    enc: DeflateEncoder<W>,
    cursors: Cursors,
    buf: Vec<u8>,
    events: u64,
    raw_bytes: u64,
}

impl<W: Write> std::fmt::Debug for TraceWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceWriter")
            .field("header", &self.header)
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
}

impl<W: Write> TraceWriter<W> {
    /// Start a trace on `w`: validates and writes the header.
    pub fn new(mut w: W, header: TraceHeader) -> Result<Self> {
        let bytes = header.encode()?;
        w.write_all(&bytes)
            .map_err(|e| io_err("writing the trace header", e))?;
        Ok(TraceWriter {
            cursors: Cursors::new(header.cores),
            header,
            enc: DeflateEncoder::new(w, Compression::default()),
            buf: Vec::with_capacity(BATCH_BYTES + 64),
            events: 0,
            raw_bytes: 0,
        })
    }

    /// The header this trace was started with.
    pub fn header(&self) -> &TraceHeader {
        &self.header
    }

    /// Events pushed so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Bytes of the event stream before compression, so far.
    pub fn raw_bytes(&self) -> u64 {
        self.raw_bytes
    }

    /// Append one event. An event the header does not allow (core, address, length, data
    /// present or not) is refused and nothing is written.
    pub fn push(&mut self, e: &Event) -> Result<()> {
        let index = self.events;
        check_event(&self.header, e, &|| Loc::Push(index))?;
        // Events gather in `buf` and go to the compressor in batches.
        let b = &mut self.buf;
        let start = b.len();
        let core = e.core();
        let cur = &mut self.cursors.0[core as usize];
        let delta = |cur: u64, addr: u64| zigzag(addr.wrapping_sub(cur) as i64);
        match e {
            Event::Load { addr, len, .. } => {
                b.push(op::LOAD);
                put_varint(b, core as u64);
                put_varint(b, delta(*cur, *addr));
                put_varint(b, *len as u64);
                *cur = addr + *len as u64;
            }
            Event::Store {
                addr, len, data, ..
            } => {
                b.push(op::STORE);
                put_varint(b, core as u64);
                put_varint(b, delta(*cur, *addr));
                put_varint(b, *len as u64);
                if let Some(d) = data {
                    b.extend_from_slice(d);
                }
                *cur = addr + *len as u64;
            }
            Event::Flush { addr, .. } => {
                b.push(op::FLUSH);
                put_varint(b, core as u64);
                put_varint(b, delta(*cur, *addr));
                *cur = *addr;
            }
            Event::Fence { .. } => {
                b.push(op::FENCE);
                put_varint(b, core as u64);
            }
            Event::TxBegin { .. } => {
                b.push(op::TX_BEGIN);
                put_varint(b, core as u64);
            }
            Event::Work { cycles, .. } => {
                b.push(op::WORK);
                put_varint(b, core as u64);
                put_varint(b, u64::from(*cycles));
            }
            Event::TxCommit { ranges, .. } => {
                b.push(op::TX_COMMIT);
                put_varint(b, core as u64);
                put_varint(b, ranges.len() as u64);
                for &(a, l) in ranges {
                    put_varint(b, a);
                    put_varint(b, l as u64);
                }
            }
        }
        self.raw_bytes += (b.len() - start) as u64;
        self.events += 1;
        if b.len() >= BATCH_BYTES {
            self.enc
                .write_all(b)
                .map_err(|e| io_err(format!("writing events up to {index}"), e))?;
            b.clear();
        }
        Ok(())
    }

    /// End the stream (end op, event count), finish compression and hand back the writer.
    pub fn finish(mut self) -> Result<W> {
        let b = &mut self.buf;
        b.push(op::END);
        put_varint(b, self.events);
        self.enc
            .write_all(b)
            .map_err(|e| io_err("writing the end of the trace", e))?;
        let mut w = self
            .enc
            .finish()
            .map_err(|e| io_err("finishing the compressed body", e))?;
        w.flush().map_err(|e| io_err("flushing the trace", e))?;
        Ok(w)
    }
}

/// A raw-deflate reader that knows whether the stream really ended (a final block was seen)
/// and whether bytes follow it, which `flate2::read::DeflateDecoder` does not say.
struct Inflater<R: Read> {
    r: R,
    d: Decompress,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    eof: bool,
    finished: bool,
}

impl<R: Read> Inflater<R> {
    fn new(r: R) -> Self {
        Inflater {
            r,
            d: Decompress::new(false),
            buf: vec![0; 32 * 1024],
            pos: 0,
            end: 0,
            eof: false,
            finished: false,
        }
    }

    fn fill(&mut self) -> io::Result<()> {
        if self.pos == self.end && !self.eof {
            loop {
                match self.r.read(&mut self.buf) {
                    Ok(n) => {
                        self.pos = 0;
                        self.end = n;
                        self.eof = n == 0;
                        return Ok(());
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// After the stream ended: are there bytes after it?
    fn trailing(&mut self) -> io::Result<bool> {
        self.fill()?;
        Ok(self.pos < self.end)
    }
}

impl<R: Read> Read for Inflater<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        loop {
            if self.finished {
                return Ok(0);
            }
            self.fill()?;
            let (in0, out0) = (self.d.total_in(), self.d.total_out());
            let flush = if self.eof {
                FlushDecompress::Finish
            } else {
                FlushDecompress::None
            };
            let status = self
                .d
                .decompress(&self.buf[self.pos..self.end], out, flush)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            let used = (self.d.total_in() - in0) as usize;
            let made = (self.d.total_out() - out0) as usize;
            self.pos += used;
            if status == Status::StreamEnd {
                self.finished = true;
            }
            if made > 0 {
                return Ok(made);
            }
            if self.finished {
                return Ok(0);
            }
            if self.eof && used == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the compressed stream stops before its final block",
                ));
            }
            if used == 0 && self.pos < self.end {
                // Input left and neither consumed nor turned into output: never happens on a
                // stream the writer made; refuse rather than spin.
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the compressed stream makes no progress",
                ));
            }
        }
    }
}

/// Reads a trace: the header at once, then the events as an iterator. After the first error
/// (or the end), the iterator yields nothing more.
pub struct TraceReader<R: Read> {
    header: TraceHeader,
    version: u16,
    body: BufReader<Inflater<R>>,
    cursors: Cursors,
    events: u64,
    offset: u64,
    done: bool,
}

impl<R: Read> std::fmt::Debug for TraceReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceReader")
            .field("header", &self.header)
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
}

impl<R: Read> TraceReader<R> {
    /// Read and validate the header of the trace on `r`.
    pub fn new(mut r: R) -> Result<Self> {
        let (header, version) = TraceHeader::decode_versioned(&mut r)?;
        Ok(TraceReader {
            cursors: Cursors::new(header.cores),
            header,
            version,
            body: BufReader::with_capacity(64 * 1024, Inflater::new(r)),
            events: 0,
            offset: 0,
            done: false,
        })
    }

    /// The trace's header.
    pub fn header(&self) -> &TraceHeader {
        &self.header
    }

    /// The file's format version.
    pub fn version(&self) -> u16 {
        self.version
    }

    fn at(&self) -> Loc {
        Loc::Event {
            index: self.events,
            byte: self.offset,
        }
    }

    fn bytes(&mut self, buf: &mut [u8], what: &str) -> Result<()> {
        let mut got = 0;
        while got < buf.len() {
            match self.body.read(&mut buf[got..]) {
                Ok(0) => {
                    return Err(invalid(
                        self.at(),
                        format!("{what} (truncated body)"),
                        format!("{} more bytes", buf.len() - got),
                        "end of the compressed stream",
                    ));
                }
                Ok(n) => {
                    got += n;
                    self.offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::InvalidData
                            | io::ErrorKind::InvalidInput
                            | io::ErrorKind::UnexpectedEof
                    ) =>
                {
                    return Err(invalid(
                        self.at(),
                        format!("{what}: compressed body"),
                        "a valid deflate stream",
                        e,
                    ));
                }
                Err(e) => return Err(io_err(format!("reading {}", self.at()), e)),
            }
        }
        Ok(())
    }

    fn byte(&mut self, what: &str) -> Result<u8> {
        let mut b = [0u8; 1];
        self.bytes(&mut b, what)?;
        Ok(b[0])
    }

    fn varint(&mut self, what: &str) -> Result<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.byte(what)?;
            if i == 9 && b > 1 {
                return Err(invalid(
                    self.at(),
                    what,
                    "a varint of at most 64 bits",
                    "a longer one",
                ));
            }
            v |= ((b & 0x7F) as u64) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(invalid(
            self.at(),
            what,
            "a varint of at most 10 bytes",
            "more",
        ))
    }

    fn bounded(&mut self, what: &str, max: u64) -> Result<u64> {
        let v = self.varint(what)?;
        if v > max {
            return Err(invalid(self.at(), what, format!("at most {max}"), v));
        }
        Ok(v)
    }

    fn next_event(&mut self) -> Result<Option<Event>> {
        let opcode = self.byte("op")?;
        if opcode == op::END {
            let n = self.varint("event count")?;
            if n != self.events {
                return Err(invalid(self.at(), "event count", self.events, n));
            }
            let mut extra = [0u8; 1];
            return match self.body.read(&mut extra) {
                Ok(0) => match self.body.get_mut().trailing() {
                    Ok(false) => Ok(None),
                    Ok(true) => Err(invalid(
                        self.at(),
                        "bytes after the compressed body",
                        "end of file",
                        "more bytes",
                    )),
                    Err(e) => Err(io_err(format!("reading {}", self.at()), e)),
                },
                Ok(_) => Err(invalid(self.at(), "bytes after the end op", "none", "more")),
                Err(e) => Err(invalid(
                    self.at(),
                    "end of the compressed body",
                    "a complete deflate stream",
                    e,
                )),
            };
        }
        let last = if self.version >= 2 {
            op::WORK
        } else {
            op::TX_COMMIT
        };
        if !(op::LOAD..=last).contains(&opcode) {
            return Err(invalid(
                self.at(),
                "op",
                format!("1 to {last} or 255 (format version {})", self.version),
                format!("{opcode:#x}"),
            ));
        }
        let core = self.bounded("core", self.header.cores as u64 - 1)? as u16;
        let cur = self.cursors.0[core as usize];
        let addr_from = |z: u64| cur.wrapping_add(unzigzag(z) as u64);
        let event = match opcode {
            op::LOAD | op::STORE => {
                let addr = addr_from(self.varint("address delta")?);
                let len = self.bounded("length", MAX_ACCESS_LEN as u64)? as u32;
                // Check address and length before reading (and allocating) any data.
                let probe = Event::Load { core, addr, len };
                check_event(&self.header, &probe, &|| self.at())?;
                self.cursors.0[core as usize] = addr + len as u64;
                if opcode == op::LOAD {
                    probe
                } else {
                    let data = if self.header.with_data {
                        let mut d = vec![0u8; len as usize];
                        self.bytes(&mut d, "store data")?;
                        Some(d)
                    } else {
                        None
                    };
                    Event::Store {
                        core,
                        addr,
                        data,
                        len,
                    }
                }
            }
            op::FLUSH => {
                let addr = addr_from(self.varint("address delta")?);
                let e = Event::Flush { core, addr };
                check_event(&self.header, &e, &|| self.at())?;
                self.cursors.0[core as usize] = addr;
                e
            }
            op::FENCE => Event::Fence { core },
            op::TX_BEGIN => Event::TxBegin { core },
            op::WORK => Event::Work {
                core,
                cycles: self.bounded("work cycles", u64::from(u32::MAX))? as u32,
            },
            _ => {
                let n = self.bounded("range count", MAX_TX_RANGES as u64)?;
                let mut ranges = Vec::new();
                for _ in 0..n {
                    let a = self.varint("range address")?;
                    let l = self.bounded("range length", u32::MAX as u64)? as u32;
                    ranges.push((a, l));
                }
                let e = Event::TxCommit { core, ranges };
                check_event(&self.header, &e, &|| self.at())?;
                e
            }
        };
        self.events += 1;
        Ok(Some(event))
    }
}

impl<R: Read> Iterator for TraceReader<R> {
    type Item = Result<Event>;

    fn next(&mut self) -> Option<Result<Event>> {
        if self.done {
            return None;
        }
        match self.next_event() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Open the trace at `path` (buffered).
pub fn open_file(path: &Path) -> Result<TraceReader<BufReader<File>>> {
    let f = File::open(path).map_err(|e| io_err(format!("opening {}", path.display()), e))?;
    TraceReader::new(BufReader::new(f))
}

/// Read the whole trace at `path` into memory.
pub fn read_file(path: &Path) -> Result<(TraceHeader, Vec<Event>)> {
    let r = open_file(path)?;
    let h = r.header().clone();
    let events = r.collect::<Result<Vec<_>>>()?;
    Ok((h, events))
}

/// Write `events` as a trace at `path` (created or truncated). Returns the number of events.
pub fn write_file(
    path: &Path,
    header: &TraceHeader,
    events: impl IntoIterator<Item = Event>,
) -> Result<u64> {
    let f = File::create(path).map_err(|e| io_err(format!("creating {}", path.display()), e))?;
    let mut w = TraceWriter::new(BufWriter::new(f), header.clone())?;
    for e in events {
        w.push(&e)?;
    }
    let n = w.events();
    let bw = w.finish()?;
    let f = bw
        .into_inner()
        .map_err(|e| io_err(format!("writing {}", path.display()), e.into_error()))?;
    f.sync_all()
        .map_err(|e| io_err(format!("syncing {}", path.display()), e))?;
    Ok(n)
}

/// Encode `events` as a trace in memory.
pub fn to_bytes(header: &TraceHeader, events: &[Event]) -> Result<Vec<u8>> {
    let mut w = TraceWriter::new(Vec::new(), header.clone())?;
    for e in events {
        w.push(e)?;
    }
    w.finish()
}

/// Decode a whole trace from memory.
pub fn from_bytes(bytes: &[u8]) -> Result<(TraceHeader, Vec<Event>)> {
    let r = TraceReader::new(bytes)?;
    let h = r.header().clone();
    let events = r.collect::<Result<Vec<_>>>()?;
    Ok((h, events))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(with_data: bool) -> TraceHeader {
        TraceHeader {
            name: "t".into(),
            pm_bytes: 1 << 20,
            cores: 2,
            with_data,
        }
    }

    #[test]
    fn zigzag_round_trips() {
        for d in [0i64, 1, -1, 64, -64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(d)), d);
        }
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
    }

    #[test]
    fn sequential_accesses_cost_four_bytes_each() {
        let events: Vec<Event> = (0..100u64)
            .map(|i| Event::Load {
                core: 1,
                addr: 4096 + i * 64,
                len: 64,
            })
            .collect();
        let mut w = TraceWriter::new(Vec::new(), h(false)).unwrap();
        for e in &events {
            w.push(e).unwrap();
        }
        // The first has a large delta (3 bytes); the rest are op, core, delta 0, len 64.
        assert_eq!(w.raw_bytes(), 5 + 99 * 4);
        let bytes = w.finish().unwrap();
        assert_eq!(from_bytes(&bytes).unwrap().1, events);
    }

    #[test]
    fn the_writer_refuses_what_the_header_does_not_allow() {
        let mut w = TraceWriter::new(Vec::new(), h(false)).unwrap();
        let bad = [
            Event::Fence { core: 2 },
            Event::Load {
                core: 0,
                addr: (1 << 20) - 8,
                len: 9,
            },
            Event::Load {
                core: 0,
                addr: 0,
                len: 0,
            },
            Event::Store {
                core: 0,
                addr: 0,
                len: 1,
                data: Some(vec![1]),
            },
        ];
        for e in &bad {
            assert!(matches!(w.push(e), Err(SimError::Trace { .. })), "{e:?}");
        }
        assert_eq!(w.events(), 0);
    }

    #[test]
    fn a_cut_off_body_is_an_error_not_an_end() {
        let events = vec![
            Event::Store {
                core: 0,
                addr: 8,
                len: 4,
                data: Some(vec![1, 2, 3, 4]),
            };
            50
        ];
        let bytes = to_bytes(&h(true), &events).unwrap();
        for cut in HEADER_BYTES + 1..bytes.len() {
            assert!(from_bytes(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }
}
