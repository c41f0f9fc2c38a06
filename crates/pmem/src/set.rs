//! Pools over several backing files that survive the loss of any one of them: a striped set
//! with rotating parity (RAID-5, left-symmetric), as a [`Medium`].
//!
//! The logical address space (the pool) is cut into chunks of `chunk` bytes (a power of two,
//! at least 4 KiB). With `n` members, a *row* is `n` chunks at the same offset in every member:
//! `n - 1` data chunks and one parity chunk, the XOR of the others. The parity chunk of row `r`
//! is on member `n - 1 - (r mod n)`, and data chunk `d` of the row on member
//! `(parity + 1 + d) mod n`, so parity rotates and logical chunks go round the members in turn.
//! Each member starts with a member header page (`docs/format/pool-set.md` byte by byte) and
//! keeps its chunks after it.
//!
//! Writes keep parity current: under the row's lock, `parity ^= old ^ new`; flushing a logical
//! range flushes the data and the parity lines under it, so both are durable after the next
//! fence, as on one medium. The RAID-5 write hole (power lost after a data line reached the
//! media but not its parity line, or the other way round) is closed by the clean flag in the
//! member headers: before the first store the set is marked open, and an open that finds the mark
//! recomputes every row's parity from its data (resync) before anything else.
//!
//! With one member lost (missing, unreadable, a wrong or stale header, or dropped while running
//! by [`StripedSet::mark_lost`]), the set runs *degraded*: a read of a lost chunk is the XOR of
//! the rest of its row, and a write to it lives in the row's parity. The survivors' headers
//! record which member is lost under a new generation, so the lost file, should it come back,
//! is known to be stale. [`StripedSet::rebuild`] rebuilds the lost member into a new medium
//! while the set stays open and written. Two members lost: the set cannot serve reads, and
//! opening it is a typed error ([`SetError::TooManyLost`]).

use crate::domain::{Backing, Domain};
use crate::error::{Corruption, PmemError, Result};
use crate::header::Uuid;
use crate::layout::{Field, PAGE_SIZE};
use crate::mapping::Mapping;
use crate::medium::{Medium, check_range, check_word};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Magic at the start of every member header.
pub const MEMBER_MAGIC: [u8; 8] = *b"KAVACHSM";
/// Member header format version this build writes and reads.
pub const MEMBER_VERSION: u32 = 1;
/// Bytes of the member header, its CRC included.
pub const MEMBER_HEADER_BYTES: usize = 128;
/// Where a member's chunks start (the header page comes first).
pub const MEMBER_DATA_OFFSET: usize = PAGE_SIZE;
/// Fewest members a set has.
pub const MEMBERS_MIN: u32 = 3;
/// Most members a set has.
pub const MEMBERS_MAX: u32 = 64;
/// Smallest chunk.
pub const CHUNK_MIN: u64 = PAGE_SIZE as u64;
/// Largest chunk (1 GiB).
pub const CHUNK_MAX: u64 = 1 << 30;
/// The chunk `kavach pool create --files` uses unless told (1 MiB).
pub const CHUNK_DEFAULT: u64 = 1 << 20;
/// `lost_member` when no member is lost.
pub const NO_MEMBER: u32 = u32::MAX;
/// Member flag: the set was stored to since it was opened (or last closed cleanly), and has not
/// been closed cleanly since.
pub const MEMBER_FLAG_OPEN: u32 = 1;
/// Member flags this build knows.
pub const MEMBER_FLAGS_KNOWN: u32 = MEMBER_FLAG_OPEN;

/// The member header's fields (`docs/format/pool-set.md`, table `member`).
pub mod member {
    use crate::layout::Field;
    /// `MEMBER_MAGIC`.
    pub const MAGIC: Field = Field::new("magic", 0, 8);
    /// `MEMBER_VERSION`.
    pub const VERSION: Field = Field::new("version", 8, 4);
    /// This member's place in the set, 0-based.
    pub const MEMBER_INDEX: Field = Field::new("member_index", 12, 4);
    /// Members in the set.
    pub const MEMBER_COUNT: Field = Field::new("member_count", 16, 4);
    /// `MEMBER_FLAG_*` bits.
    pub const FLAGS: Field = Field::new("flags", 20, 4);
    /// Chunk size in bytes.
    pub const CHUNK_SIZE: Field = Field::new("chunk_size", 24, 8);
    /// Rows in the set.
    pub const ROWS: Field = Field::new("rows", 32, 8);
    /// Membership generation.
    pub const GENERATION: Field = Field::new("generation", 40, 8);
    /// The set's UUID.
    pub const SET_UUID: Field = Field::new("set_uuid", 48, 16);
    /// The member lost at this generation, or `NO_MEMBER`.
    pub const LOST_MEMBER: Field = Field::new("lost_member", 64, 4);
    /// Zero.
    pub const PAD: Field = Field::new("pad", 68, 4);
    /// Which header write this is: the valid copy with the higher sequence is in force.
    pub const SEQUENCE: Field = Field::new("sequence", 72, 8);
    /// Zero.
    pub const RESERVED: Field = Field::new("reserved", 80, 44);
    /// CRC-32C of bytes 0..124.
    pub const CRC32C: Field = Field::new("crc32c", 124, 4);
    /// Every field in order.
    pub const ALL: &[Field] = &[
        MAGIC,
        VERSION,
        MEMBER_INDEX,
        MEMBER_COUNT,
        FLAGS,
        CHUNK_SIZE,
        ROWS,
        GENERATION,
        SET_UUID,
        LOST_MEMBER,
        PAD,
        SEQUENCE,
        RESERVED,
        CRC32C,
    ];
}

/// Errors of sets, beyond the medium's own.
#[derive(Debug, thiserror::Error)]
pub enum SetError {
    /// The medium failed.
    #[error(transparent)]
    Pmem(#[from] PmemError),
    /// An argument or a set description is out of range or malformed.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// What.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// More than one member is lost: the set cannot be read. Nothing was written.
    #[error("{} of the set's members are lost, and a set survives the loss of one: {}", .lost.len(), list_faults(.lost))]
    TooManyLost {
        /// The lost members.
        lost: Vec<MemberFault>,
    },
    /// The set was not closed cleanly and a member is lost: rows written at the crash may
    /// reconstruct wrongly (the write hole). Refused unless the open forces it.
    #[error(
        "the set was not closed cleanly and member {} is lost ({}): chunks of rows being written at the crash could be rebuilt wrong; open with force to accept that",
        .0.index, .0.reason
    )]
    UncleanDegraded(MemberFault),
    /// `rebuild` on a set with no lost member.
    #[error("no member of the set is lost: nothing to rebuild")]
    NotDegraded,
    /// The set failed while running (a second member lost, or a write to a member failed).
    #[error("the set has failed: {0}")]
    Failed(String),
}

fn list_faults(f: &[MemberFault]) -> String {
    f.iter()
        .map(|m| format!("member {} ({}): {}", m.index, m.label.display(), m.reason))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Result alias for sets.
pub type SetResult<T> = std::result::Result<T, SetError>;

/// A member that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MemberFault {
    /// Its place in the set.
    pub index: usize,
    /// Its path (or a description).
    pub label: PathBuf,
    /// Why it is lost.
    pub reason: String,
}

/// A decoded member header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberHeader {
    /// Place in the set.
    pub index: u32,
    /// Members in the set.
    pub count: u32,
    /// `MEMBER_FLAG_*`.
    pub flags: u32,
    /// Chunk size.
    pub chunk: u64,
    /// Rows.
    pub rows: u64,
    /// Membership generation.
    pub generation: u64,
    /// Set UUID.
    pub set_uuid: Uuid,
    /// Member lost at this generation.
    pub lost: Option<u32>,
    /// Header write sequence number: of two valid copies, the higher is in force.
    pub sequence: u64,
}

/// Is `chunk` a valid chunk size?
pub fn validate_chunk(chunk: u64) -> SetResult<()> {
    if !chunk.is_power_of_two() || !(CHUNK_MIN..=CHUNK_MAX).contains(&chunk) {
        return Err(SetError::Invalid {
            what: "chunk size",
            reason: format!(
                "{chunk} bytes; expected a power of two from {CHUNK_MIN} to {CHUNK_MAX} bytes"
            ),
        });
    }
    Ok(())
}

/// Is `n` a valid member count?
pub fn validate_members(n: u64) -> SetResult<()> {
    if !(MEMBERS_MIN as u64..=MEMBERS_MAX as u64).contains(&n) {
        return Err(SetError::Invalid {
            what: "member count",
            reason: format!("{n}; expected {MEMBERS_MIN} to {MEMBERS_MAX} files"),
        });
    }
    Ok(())
}

fn put(b: &mut [u8], f: Field, v: &[u8]) {
    b[f.offset..f.end()].copy_from_slice(v);
}
fn get<const N: usize>(b: &[u8], f: Field) -> [u8; N] {
    b[f.offset..f.end()].try_into().expect("field size")
}

impl MemberHeader {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; MEMBER_HEADER_BYTES] {
        use member as m;
        let mut b = [0u8; MEMBER_HEADER_BYTES];
        put(&mut b, m::MAGIC, &MEMBER_MAGIC);
        put(&mut b, m::VERSION, &MEMBER_VERSION.to_le_bytes());
        put(&mut b, m::MEMBER_INDEX, &self.index.to_le_bytes());
        put(&mut b, m::MEMBER_COUNT, &self.count.to_le_bytes());
        put(&mut b, m::FLAGS, &self.flags.to_le_bytes());
        put(&mut b, m::CHUNK_SIZE, &self.chunk.to_le_bytes());
        put(&mut b, m::ROWS, &self.rows.to_le_bytes());
        put(&mut b, m::GENERATION, &self.generation.to_le_bytes());
        put(&mut b, m::SET_UUID, &self.set_uuid.0);
        put(
            &mut b,
            m::LOST_MEMBER,
            &self.lost.unwrap_or(NO_MEMBER).to_le_bytes(),
        );
        put(&mut b, m::SEQUENCE, &self.sequence.to_le_bytes());
        let crc = crc32c::crc32c(&b[..m::CRC32C.offset]);
        put(&mut b, m::CRC32C, &crc.to_le_bytes());
        b
    }

    /// Decode and validate a header from the first bytes of a member.
    pub fn decode(b: &[u8]) -> std::result::Result<MemberHeader, Corruption> {
        use member as m;
        let bad = |f: Field, expected: String, found: String| Corruption {
            structure: "set member header".into(),
            offset: f.offset as u64,
            field: f.name,
            expected,
            found,
        };
        if b.len() < MEMBER_HEADER_BYTES {
            return Err(bad(
                m::MAGIC,
                format!("a header of {MEMBER_HEADER_BYTES} bytes"),
                format!("{} bytes", b.len()),
            ));
        }
        let magic: [u8; 8] = get(b, m::MAGIC);
        if magic != MEMBER_MAGIC {
            return Err(bad(
                m::MAGIC,
                format!("{:?}", String::from_utf8_lossy(&MEMBER_MAGIC)),
                format!("{:02x?}", magic),
            ));
        }
        let crc = u32::from_le_bytes(get(b, m::CRC32C));
        let want = crc32c::crc32c(&b[..m::CRC32C.offset]);
        if crc != want {
            return Err(bad(
                m::CRC32C,
                format!("{want:#010x}"),
                format!("{crc:#010x}"),
            ));
        }
        let version = u32::from_le_bytes(get(b, m::VERSION));
        if version != MEMBER_VERSION {
            return Err(bad(
                m::VERSION,
                MEMBER_VERSION.to_string(),
                version.to_string(),
            ));
        }
        let count = u32::from_le_bytes(get(b, m::MEMBER_COUNT));
        if validate_members(count as u64).is_err() {
            return Err(bad(
                m::MEMBER_COUNT,
                format!("{MEMBERS_MIN} to {MEMBERS_MAX}"),
                count.to_string(),
            ));
        }
        let index = u32::from_le_bytes(get(b, m::MEMBER_INDEX));
        if index >= count {
            return Err(bad(
                m::MEMBER_INDEX,
                format!("below {count}"),
                index.to_string(),
            ));
        }
        let flags = u32::from_le_bytes(get(b, m::FLAGS));
        if flags & !MEMBER_FLAGS_KNOWN != 0 {
            return Err(bad(
                m::FLAGS,
                format!("only bits {MEMBER_FLAGS_KNOWN:#x}"),
                format!("{flags:#x}"),
            ));
        }
        let chunk = u64::from_le_bytes(get(b, m::CHUNK_SIZE));
        if validate_chunk(chunk).is_err() {
            return Err(bad(
                m::CHUNK_SIZE,
                format!("a power of two from {CHUNK_MIN} to {CHUNK_MAX}"),
                chunk.to_string(),
            ));
        }
        let rows = u64::from_le_bytes(get(b, m::ROWS));
        let max_rows = crate::layout::POOL_SIZE_MAX / chunk;
        if rows == 0 || rows > max_rows {
            return Err(bad(m::ROWS, format!("1 to {max_rows}"), rows.to_string()));
        }
        let lost = u32::from_le_bytes(get(b, m::LOST_MEMBER));
        if lost != NO_MEMBER && lost >= count {
            return Err(bad(
                m::LOST_MEMBER,
                format!("below {count}, or {NO_MEMBER:#x}"),
                lost.to_string(),
            ));
        }
        for f in [m::PAD, m::RESERVED] {
            if b[f.offset..f.end()].iter().any(|&x| x != 0) {
                return Err(bad(f, "zero".into(), "non-zero bytes".into()));
            }
        }
        Ok(MemberHeader {
            index,
            count,
            flags,
            chunk,
            rows,
            generation: u64::from_le_bytes(get(b, m::GENERATION)),
            set_uuid: Uuid(get(b, m::SET_UUID)),
            lost: (lost != NO_MEMBER).then_some(lost),
            sequence: u64::from_le_bytes(get(b, m::SEQUENCE)),
        })
    }
}

/// Where one logical piece (inside one chunk) lives.
#[derive(Debug, Clone, Copy)]
struct Piece {
    row: u64,
    data: usize,
    parity: usize,
    /// Offset in every member of the row.
    at: usize,
    len: usize,
    /// Offset of the piece in the caller's buffer.
    buf: usize,
}

/// The shape of a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Geometry {
    /// Members.
    pub members: usize,
    /// Chunk size in bytes.
    pub chunk: usize,
}

impl Geometry {
    /// Bytes of pool one row holds.
    pub fn row_bytes(&self) -> usize {
        (self.members - 1) * self.chunk
    }
    /// Length of each member holding `rows` rows.
    pub fn member_len(&self, rows: u64) -> usize {
        MEMBER_DATA_OFFSET + rows as usize * self.chunk
    }
    /// The member holding row `row`'s parity.
    pub fn parity_member(&self, row: u64) -> usize {
        self.members - 1 - (row % self.members as u64) as usize
    }
    /// The member holding data chunk `d` of row `row`.
    pub fn data_member(&self, row: u64, d: usize) -> usize {
        (self.parity_member(row) + 1 + d) % self.members
    }
    /// Rows needed for a pool of at least `bytes`.
    pub fn rows_for(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.row_bytes() as u64).max(1)
    }
    fn pieces(&self, offset: usize, len: usize) -> impl Iterator<Item = Piece> + '_ {
        let mut pos = offset;
        let end = offset + len;
        std::iter::from_fn(move || {
            if pos >= end {
                return None;
            }
            let chunk_no = pos / self.chunk;
            let within = pos % self.chunk;
            let row = (chunk_no / (self.members - 1)) as u64;
            let d = chunk_no % (self.members - 1);
            let n = (self.chunk - within).min(end - pos);
            let p = Piece {
                row,
                data: self.data_member(row, d),
                parity: self.parity_member(row),
                at: MEMBER_DATA_OFFSET + row as usize * self.chunk + within,
                len: n,
                buf: pos - offset,
            };
            pos += n;
            Some(p)
        })
    }
}

/// The state of a set, for reports.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SetStatus {
    /// Members and chunk.
    pub geometry: Geometry,
    /// Rows.
    pub rows: u64,
    /// Logical size in bytes.
    pub size: u64,
    /// Membership generation.
    pub generation: u64,
    /// Set UUID.
    pub set_uuid: String,
    /// `healthy`, `degraded`, `rebuilding` or `failed`.
    pub state: &'static str,
    /// The lost member, if any.
    pub lost: Option<MemberFault>,
    /// A member lost beyond the one the set survives (the set has failed).
    pub also_lost: Vec<MemberFault>,
    /// Rebuild in progress: rows done.
    pub rebuilt_rows: Option<u64>,
    /// The open found the set not closed cleanly.
    pub unclean_at_open: bool,
    /// Rows whose parity the open recomputed (after an unclean shutdown).
    pub resynced_rows: u64,
    /// Each member's label.
    pub members: Vec<PathBuf>,
}

/// A rebuild in progress: the new member and how many rows it holds.
#[derive(Debug)]
struct Spare<M> {
    index: usize,
    medium: M,
    /// Rows below this are rebuilt and kept current by writes.
    done: AtomicU64,
}

#[derive(Debug)]
struct Members<M> {
    slots: Vec<Option<M>>,
    labels: Vec<PathBuf>,
    lost: Option<MemberFault>,
    also_lost: Vec<MemberFault>,
    generation: u64,
    spare: Option<Spare<M>>,
    /// One bit per row stored to since the open (in memory): the rows a clean close writes
    /// back.
    dirty: Vec<AtomicU64>,
}

fn dirty_words(rows: u64) -> Vec<AtomicU64> {
    (0..rows.div_ceil(64)).map(|_| AtomicU64::new(0)).collect()
}

impl<M: Medium> Members<M> {
    fn mark_dirty(&self, row: u64) {
        if let Some(w) = self.dirty.get((row / 64) as usize) {
            let bit = 1u64 << (row % 64);
            if w.load(Ordering::Relaxed) & bit == 0 {
                w.fetch_or(bit, Ordering::Relaxed);
            }
        }
    }

    fn dirty_rows(&self) -> Vec<u64> {
        let mut out = Vec::new();
        for (i, w) in self.dirty.iter().enumerate() {
            let mut bits = w.load(Ordering::Relaxed);
            while bits != 0 {
                out.push(i as u64 * 64 + bits.trailing_zeros() as u64);
                bits &= bits - 1;
            }
        }
        out
    }

    /// The medium holding member `i` for row `row`: the member, or the spare once the rebuild
    /// has passed the row.
    fn get(&self, i: usize, row: u64) -> Option<&M> {
        if let Some(m) = &self.slots[i] {
            return Some(m);
        }
        match &self.spare {
            Some(s) if s.index == i && row < s.done.load(Ordering::Acquire) => Some(&s.medium),
            _ => None,
        }
    }
}

/// How to open a set.
#[derive(Debug, Clone, Copy, Default)]
pub struct SetOpenOptions {
    /// Write nothing (no open mark, no resync, no generation change).
    pub read_only: bool,
    /// Open even if the set was not closed cleanly while a member is lost.
    pub force: bool,
}

/// Row-lock stripes (rows hash onto them).
const ROW_LOCKS: usize = 1024;

/// A pool's medium spread over `n >= 3` members with rotating parity. See the module docs.
#[derive(Debug)]
pub struct StripedSet<M: Medium> {
    geo: Geometry,
    uuid: Uuid,
    rows: AtomicU64,
    len: AtomicUsize,
    members: RwLock<Members<M>>,
    row_locks: Box<[Mutex<()>]>,
    failed: AtomicBool,
    read_only: bool,
    domain: Domain,
    backing: Backing,
    label: PathBuf,
    unclean_at_open: bool,
    resynced_rows: u64,
    /// The last header write's sequence number.
    sequence: AtomicU64,
    /// The headers say `MEMBER_FLAG_OPEN`: set before the first store since the open (or the
    /// last clean close), cleared by a clean close.
    marked: AtomicBool,
    /// Serialises setting the mark.
    mark_lock: Mutex<()>,
}

/// Offsets of the two member header copies in the header page.
pub const MEMBER_HEADER_COPIES: [usize; 2] = [0, 2048];

/// The member header in force: the valid copy with the higher sequence number.
fn header_of<M: Medium>(m: &M) -> std::result::Result<MemberHeader, String> {
    if m.len() < MEMBER_DATA_OFFSET {
        return Err(format!(
            "{} bytes long, shorter than a member header page",
            m.len()
        ));
    }
    let copies = MEMBER_HEADER_COPIES.map(|at| {
        let mut b = [0u8; MEMBER_HEADER_BYTES];
        m.read(at, &mut b);
        MemberHeader::decode(&b).map_err(|mut c| {
            c.structure = format!("set member header copy {}", at / 2048);
            c.offset += at as u64;
            c
        })
    });
    match copies {
        [Ok(a), Ok(b)] => Ok(if b.sequence > a.sequence { b } else { a }),
        [Ok(a), Err(_)] | [Err(_), Ok(a)] => Ok(a),
        [Err(a), Err(b)] => Err(format!("no valid member header: {a}; {b}")),
    }
}

/// Write header `h` over the copy of `m` not in force (an invalid one, else the one with the
/// lower sequence) and persist it, so a torn write leaves the copy in force as it was.
fn put_header<M: Medium>(m: &M, h: &MemberHeader) -> Result<()> {
    let seq = |at: usize| {
        let mut b = [0u8; MEMBER_HEADER_BYTES];
        m.read(at, &mut b);
        MemberHeader::decode(&b).ok().map(|h| h.sequence)
    };
    let target = match MEMBER_HEADER_COPIES.map(seq) {
        [Some(a), Some(b)] if b < a => 1,
        [Some(_), Some(_)] => 0,
        [None, _] => 0,
        [Some(_), None] => 1,
    };
    let at = MEMBER_HEADER_COPIES[target];
    m.write(at, &h.encode());
    m.persist(at, MEMBER_HEADER_BYTES)
}

/// Zero both header copies of `m` (it is no member of any set then).
fn clear_headers<M: Medium>(m: &M) -> Result<()> {
    for at in MEMBER_HEADER_COPIES {
        m.write(at, &[0u8; MEMBER_HEADER_BYTES]);
        m.flush(at, MEMBER_HEADER_BYTES)?;
    }
    m.fence()
}

impl<M: Medium> StripedSet<M> {
    /// Format a new set over `media` (their old contents are forgotten): each must hold at
    /// least one row; the set gets as many rows as the shortest allows. The set comes back
    /// open for writing (marked open at its first store).
    pub fn create(media: Vec<M>, chunk: u64, labels: Vec<PathBuf>) -> SetResult<StripedSet<M>> {
        Self::create_inner(media, chunk, labels, false)
    }

    fn create_inner(
        media: Vec<M>,
        chunk: u64,
        labels: Vec<PathBuf>,
        zeroed: bool,
    ) -> SetResult<StripedSet<M>> {
        validate_members(media.len() as u64)?;
        validate_chunk(chunk)?;
        let geo = Geometry {
            members: media.len(),
            chunk: chunk as usize,
        };
        let shortest = media.iter().map(|m| m.len()).min().unwrap_or(0);
        if shortest < geo.member_len(1) {
            return Err(SetError::Invalid {
                what: "member size",
                reason: format!(
                    "the shortest member has {shortest} bytes; a member needs at least {} (a header page and one chunk)",
                    geo.member_len(1)
                ),
            });
        }
        let rows = ((shortest - MEMBER_DATA_OFFSET) / geo.chunk) as u64;
        let uuid = Uuid::random().map_err(|e| PmemError::io("cannot read", "/dev/urandom", e))?;
        // Zero every member's chunks (parity of zeros is zero), then write the headers last,
        // so a crash before the end leaves members that are not part of a set.
        let zero = vec![0u8; geo.chunk.min(1 << 20)];
        for m in &media {
            clear_headers(m)?;
            let end = if zeroed { 0 } else { geo.member_len(rows) };
            let mut at = MEMBER_DATA_OFFSET;
            while at < end {
                let n = zero.len().min(end - at);
                m.write(at, &zero[..n]);
                m.flush(at, n)?;
                at += n;
            }
            m.fence()?;
        }
        let labels = if labels.len() == media.len() {
            labels
        } else {
            media.iter().map(|m| m.label()).collect()
        };
        let set = StripedSet::assembled(
            geo,
            uuid,
            rows,
            media.into_iter().map(Some).collect(),
            labels,
            1,
            None,
            false,
            false,
            0,
        );
        set.write_headers(&set.lock_members_mut(), 0)?;
        Ok(set)
    }

    #[allow(clippy::too_many_arguments)]
    fn assembled(
        geo: Geometry,
        uuid: Uuid,
        rows: u64,
        slots: Vec<Option<M>>,
        labels: Vec<PathBuf>,
        generation: u64,
        lost: Option<MemberFault>,
        read_only: bool,
        unclean_at_open: bool,
        resynced_rows: u64,
    ) -> StripedSet<M> {
        let first = slots.iter().flatten().next();
        let domain = first.map_or(Domain::Sim, |m| m.domain());
        let backing = first.map_or(Backing::Simulated, |m| m.backing());
        let label = labels
            .first()
            .map(|l| l.with_extension("set"))
            .unwrap_or_else(|| PathBuf::from("<set>"));
        StripedSet {
            geo,
            uuid,
            rows: AtomicU64::new(rows),
            len: AtomicUsize::new(rows as usize * geo.row_bytes()),
            members: RwLock::new(Members {
                slots,
                labels,
                lost,
                also_lost: Vec::new(),
                generation,
                spare: None,
                dirty: dirty_words(rows),
            }),
            row_locks: (0..ROW_LOCKS).map(|_| Mutex::new(())).collect(),
            failed: AtomicBool::new(false),
            read_only,
            domain,
            backing,
            label,
            unclean_at_open,
            resynced_rows,
            sequence: AtomicU64::new(0),
            marked: AtomicBool::new(false),
            mark_lock: Mutex::new(()),
        }
    }

    /// Open a set from its members in order: `Err(reason)` for a member that could not be
    /// opened at all. Decides which members are usable (see "Opening" in
    /// `docs/format/pool-set.md`), refuses when two or more are lost, resyncs parity after an
    /// unclean shutdown, and (unless read-only) marks the set open and records a newly lost
    /// member under a new generation.
    pub fn open(
        media: Vec<std::result::Result<M, String>>,
        labels: Vec<PathBuf>,
        opts: SetOpenOptions,
    ) -> SetResult<StripedSet<M>> {
        validate_members(media.len() as u64)?;
        let n = media.len();
        let labels: Vec<PathBuf> = (0..n)
            .map(|i| {
                labels.get(i).cloned().unwrap_or_else(|| match &media[i] {
                    Ok(m) => m.label(),
                    Err(_) => PathBuf::from(format!("<member {i}>")),
                })
            })
            .collect();
        let mut faults: Vec<Option<String>> = vec![None; n];
        let mut headers: Vec<Option<MemberHeader>> = vec![None; n];
        for (i, m) in media.iter().enumerate() {
            match m.as_ref().map_err(|e| e.clone()).and_then(header_of) {
                Ok(h) => headers[i] = Some(h),
                Err(e) => faults[i] = Some(e),
            }
        }
        // The set's identity: the (uuid, count, chunk) most members agree on.
        let mut groups: Vec<((Uuid, u32, u64), usize)> = Vec::new();
        for h in headers.iter().flatten() {
            let key = (h.set_uuid, h.count, h.chunk);
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, c)) => *c += 1,
                None => groups.push((key, 1)),
            }
        }
        groups.sort_by_key(|(_, c)| std::cmp::Reverse(*c));
        let Some(&((uuid, count, chunk), votes)) = groups.first() else {
            return Err(SetError::TooManyLost {
                lost: fault_list(&faults, &labels),
            });
        };
        if groups.get(1).is_some_and(|(_, c)| *c == votes) {
            return Err(SetError::Invalid {
                what: "set",
                reason: "the members' headers name different sets in equal numbers".into(),
            });
        }
        if count as usize != n {
            return Err(SetError::Invalid {
                what: "set description",
                reason: format!("it lists {n} members, their headers say the set has {count}"),
            });
        }
        let geo = Geometry {
            members: n,
            chunk: chunk as usize,
        };
        let newest = headers
            .iter()
            .flatten()
            .filter(|h| (h.set_uuid, h.count, h.chunk) == (uuid, count, chunk))
            .max_by_key(|h| h.generation)
            .copied()
            .expect("the group has a member");
        let gen_top = newest.generation;
        for i in 0..n {
            let Some(h) = headers[i] else { continue };
            let why = if (h.set_uuid, h.count, h.chunk) != (uuid, count, chunk) {
                Some(format!(
                    "its header names set {} ({} members, chunk {}), not set {uuid}",
                    h.set_uuid, h.count, h.chunk
                ))
            } else if h.index as usize != i {
                Some(format!("its header says it is member {}, not {i}", h.index))
            } else if newest.lost == Some(i as u32) && h.generation < gen_top {
                Some(format!(
                    "stale: lost at generation {gen_top} (its header has generation {})",
                    h.generation
                ))
            } else if h.generation + 1 < gen_top {
                Some(format!(
                    "stale: generation {} while the set is at {gen_top}",
                    h.generation
                ))
            } else {
                None
            };
            if let Some(w) = why {
                faults[i] = Some(w);
                headers[i] = None;
            }
        }
        let rows = headers.iter().flatten().map(|h| h.rows).min().unwrap_or(0);
        let mut slots: Vec<Option<M>> = Vec::with_capacity(n);
        for (i, m) in media.into_iter().enumerate() {
            match (m, headers[i]) {
                (Ok(m), Some(_)) if m.len() < geo.member_len(rows) => {
                    faults[i] = Some(format!(
                        "{} bytes long, the set's {rows} rows need {}",
                        m.len(),
                        geo.member_len(rows)
                    ));
                    slots.push(None);
                }
                (Ok(m), Some(_)) => slots.push(Some(m)),
                _ => slots.push(None),
            }
        }
        let lost = fault_list(&faults, &labels);
        if lost.len() > 1 {
            return Err(SetError::TooManyLost { lost });
        }
        let unclean = headers
            .iter()
            .flatten()
            .any(|h| h.flags & MEMBER_FLAG_OPEN != 0);
        let lost = lost.into_iter().next();
        if unclean && !opts.read_only && !opts.force {
            if let Some(f) = &lost {
                return Err(SetError::UncleanDegraded(f.clone()));
            }
        }
        // A member newly found lost is recorded under a new generation.
        let generation = match &lost {
            Some(f) if newest.lost != Some(f.index as u32) && !opts.read_only => gen_top + 1,
            _ => gen_top,
        };
        let mut set = StripedSet::assembled(
            geo,
            uuid,
            rows,
            slots,
            labels,
            generation,
            lost,
            opts.read_only,
            unclean,
            0,
        );
        let top_sequence = headers
            .iter()
            .flatten()
            .map(|h| h.sequence)
            .max()
            .unwrap_or(0);
        set.sequence.store(top_sequence, Ordering::Release);
        if !opts.read_only {
            if unclean && set.lock_members().lost.is_none() {
                set.resynced_rows = set.resync()?;
            } else if unclean {
                // Forced open of an unclean degraded set: parity was not made consistent, so
                // the mark stays until a clean close.
                set.marked.store(true, Ordering::Release);
            }
            set.write_headers(&set.lock_members_mut(), set.flag())?;
        }
        Ok(set)
    }

    fn lock_members(&self) -> RwLockReadGuard<'_, Members<M>> {
        self.members.read().unwrap_or_else(|p| p.into_inner())
    }
    fn lock_members_mut(&self) -> RwLockWriteGuard<'_, Members<M>> {
        self.members.write().unwrap_or_else(|p| p.into_inner())
    }
    fn row_lock(&self, row: u64) -> MutexGuard<'_, ()> {
        self.row_locks[(row % ROW_LOCKS as u64) as usize]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The flags the headers carry now.
    fn flag(&self) -> u32 {
        if self.marked.load(Ordering::Acquire) {
            MEMBER_FLAG_OPEN
        } else {
            0
        }
    }

    /// Before a store: make sure the headers say the set is open (persisted), so a crash from
    /// now on is seen as unclean. False (and the set failed) if the headers cannot be written:
    /// the store must not happen.
    fn ensure_marked(&self, st: &Members<M>) -> bool {
        if self.marked.load(Ordering::Acquire) {
            return true;
        }
        let _g = self.mark_lock.lock().unwrap_or_else(|p| p.into_inner());
        if self.marked.load(Ordering::Acquire) {
            return true;
        }
        if self.read_only || self.write_headers(st, MEMBER_FLAG_OPEN).is_err() {
            self.failed.store(true, Ordering::Release);
            return false;
        }
        self.marked.store(true, Ordering::Release);
        true
    }

    /// Write every present member's header with `flags`, each persisted in turn (a rebuilt
    /// member's first, since it is the one whose header makes it usable).
    fn write_headers(&self, st: &Members<M>, flags: u32) -> Result<()> {
        let order: Vec<usize> = (0..self.geo.members).collect();
        self.write_headers_in(st, flags, &order)
    }

    /// Write the headers of the present members among `order`, in that order.
    fn write_headers_in(&self, st: &Members<M>, flags: u32, order: &[usize]) -> Result<()> {
        let lost = st.lost.as_ref().map(|f| f.index as u32);
        let sequence = self.sequence.fetch_add(1, Ordering::AcqRel) + 1;
        for &i in order {
            let Some(m) = &st.slots[i] else { continue };
            let h = MemberHeader {
                index: i as u32,
                count: self.geo.members as u32,
                flags,
                chunk: self.geo.chunk as u64,
                rows: self.rows.load(Ordering::Acquire),
                generation: st.generation,
                set_uuid: self.uuid,
                lost,
                sequence,
            };
            put_header(m, &h)?;
        }
        Ok(())
    }

    /// The set's shape.
    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// The set's UUID.
    pub fn set_uuid(&self) -> Uuid {
        self.uuid
    }

    /// Rows.
    pub fn rows(&self) -> u64 {
        self.rows.load(Ordering::Acquire)
    }

    /// The lost member, if any.
    pub fn lost(&self) -> Option<MemberFault> {
        self.lock_members().lost.clone()
    }

    /// Has the set failed (two members lost while running)?
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Where the set stands.
    pub fn status(&self) -> SetStatus {
        let st = self.lock_members();
        let rebuilt_rows = st.spare.as_ref().map(|s| s.done.load(Ordering::Acquire));
        SetStatus {
            geometry: self.geo,
            rows: self.rows(),
            size: self.len() as u64,
            generation: st.generation,
            set_uuid: self.uuid.to_string(),
            state: if self.failed() {
                "failed"
            } else if rebuilt_rows.is_some() {
                "rebuilding"
            } else if st.lost.is_some() {
                "degraded"
            } else {
                "healthy"
            },
            lost: st.lost.clone(),
            also_lost: st.also_lost.clone(),
            rebuilt_rows,
            unclean_at_open: self.unclean_at_open,
            resynced_rows: self.resynced_rows,
            members: st.labels.clone(),
        }
    }

    /// Stop using member `index` (it is gone or cannot be trusted): the set goes on degraded,
    /// and the survivors' headers record the loss under a new generation before this returns.
    /// A second member lost fails the set: reads of chunks no longer reconstructible come back
    /// as zeros and every later flush and fence fails, so no layer above acknowledges a write.
    pub fn mark_lost(&self, index: usize, reason: &str) -> SetResult<()> {
        if index >= self.geo.members {
            return Err(SetError::Invalid {
                what: "member index",
                reason: format!("{index}; the set has {} members", self.geo.members),
            });
        }
        let mut st = self.lock_members_mut();
        let fault = MemberFault {
            index,
            label: st.labels[index].clone(),
            reason: reason.to_string(),
        };
        if st.lost.as_ref().is_some_and(|f| f.index == index) {
            return Ok(());
        }
        if st.spare.as_ref().is_some_and(|s| s.index == index) {
            // The rebuild target itself failed: the rebuild will notice and stop.
            st.spare = None;
            return Ok(());
        }
        if st.lost.is_some() {
            self.failed.store(true, Ordering::Release);
            st.slots[index] = None;
            st.also_lost.push(fault.clone());
            return Err(SetError::Failed(format!(
                "{}; member {} was already lost",
                list_faults(&[fault]),
                st.lost.as_ref().map_or(0, |f| f.index)
            )));
        }
        st.slots[index] = None;
        st.lost = Some(fault);
        st.generation += 1;
        if !self.read_only {
            self.write_headers(&st, self.flag())?;
        }
        Ok(())
    }

    /// Recompute every row's parity from its data (after an unclean shutdown). Needs every
    /// member. Returns the rows done.
    pub fn resync(&self) -> SetResult<u64> {
        let st = self.lock_members();
        if st.lost.is_some() {
            return Err(SetError::Failed(
                "parity cannot be recomputed with a member lost".into(),
            ));
        }
        let rows = self.rows();
        let c = self.geo.chunk;
        let mut acc = vec![0u8; c];
        let mut buf = vec![0u8; c];
        for row in 0..rows {
            let _g = self.row_lock(row);
            let at = MEMBER_DATA_OFFSET + row as usize * c;
            let p = self.geo.parity_member(row);
            acc.fill(0);
            for (i, m) in st.slots.iter().enumerate() {
                if i == p {
                    continue;
                }
                let m = m.as_ref().expect("no member lost");
                m.read(at, &mut buf);
                xor_into(&mut acc, &buf);
            }
            let pm = st.slots[p].as_ref().expect("no member lost");
            pm.write(at, &acc);
            pm.flush(at, c)?;
        }
        self.fence_all(&st)?;
        Ok(rows)
    }

    /// Check every row's parity against its data: the rows that disagree (empty when the set is
    /// consistent). Needs every member.
    pub fn verify_parity(&self) -> SetResult<Vec<u64>> {
        let st = self.lock_members();
        if st.lost.is_some() {
            return Err(SetError::Failed(
                "parity cannot be checked with a member lost".into(),
            ));
        }
        let c = self.geo.chunk;
        let mut acc = vec![0u8; c];
        let mut buf = vec![0u8; c];
        let mut bad = Vec::new();
        for row in 0..self.rows() {
            let _g = self.row_lock(row);
            let at = MEMBER_DATA_OFFSET + row as usize * c;
            acc.fill(0);
            for m in st.slots.iter() {
                m.as_ref().expect("no member lost").read(at, &mut buf);
                xor_into(&mut acc, &buf);
            }
            if acc.iter().any(|&b| b != 0) {
                bad.push(row);
            }
        }
        Ok(bad)
    }

    /// Rebuild the lost member into `new` while the set stays open: row by row, each under its
    /// row lock, the lost chunk is reconstructed from the others and written to `new`; writes to
    /// rows already rebuilt go to `new` as well. At the end `new` takes the lost member's place
    /// and every header records a new generation with no member lost. `progress(done, total)`
    /// is called after each row. Interrupted (an error, a crash), `new` has a zeroed header and
    /// is not a member: the set stays degraded and the rebuild can start again.
    pub fn rebuild(&self, new: M, mut progress: impl FnMut(u64, u64)) -> SetResult<()> {
        if self.read_only {
            return Err(PmemError::ReadOnly.into());
        }
        let index = {
            let mut st = self.lock_members_mut();
            let Some(f) = &st.lost else {
                return Err(SetError::NotDegraded);
            };
            if self.failed() {
                return Err(SetError::Failed("the set has failed".into()));
            }
            if st.spare.is_some() {
                return Err(SetError::Invalid {
                    what: "rebuild",
                    reason: "a rebuild is already running".into(),
                });
            }
            let need = self.geo.member_len(self.rows());
            if new.len() < need {
                return Err(SetError::Invalid {
                    what: "replacement member",
                    reason: format!(
                        "{} has {} bytes; the set's members need {need}",
                        new.label().display(),
                        new.len()
                    ),
                });
            }
            clear_headers(&new)?;
            let index = f.index;
            st.spare = Some(Spare {
                index,
                medium: new,
                done: AtomicU64::new(0),
            });
            index
        };
        let result = self.rebuild_rows(index, &mut progress);
        let mut st = self.lock_members_mut();
        let spare = st.spare.take();
        result?;
        let Some(spare) = spare else {
            return Err(SetError::Failed(
                "the replacement member was lost during the rebuild".into(),
            ));
        };
        if self.failed() {
            return Err(SetError::Failed("the set failed during the rebuild".into()));
        }
        spare.medium.fence()?;
        st.slots[index] = Some(spare.medium);
        st.lost = None;
        st.generation += 1;
        // The rebuilt member's header first: once any header says "nothing lost" at the new
        // generation, the rebuilt member must be valid.
        let order: Vec<usize> = std::iter::once(index)
            .chain((0..self.geo.members).filter(|&i| i != index))
            .collect();
        self.write_headers_in(&st, self.flag(), &order)?;
        Ok(())
    }

    fn rebuild_rows(&self, index: usize, progress: &mut impl FnMut(u64, u64)) -> SetResult<()> {
        let c = self.geo.chunk;
        let mut acc = vec![0u8; c];
        let mut buf = vec![0u8; c];
        let total = self.rows();
        for row in 0..total {
            let st = self.lock_members();
            let _g = self.row_lock(row);
            let Some(spare) = st.spare.as_ref() else {
                return Err(SetError::Failed(
                    "the replacement member was lost during the rebuild".into(),
                ));
            };
            if self.failed() {
                return Err(SetError::Failed("the set failed during the rebuild".into()));
            }
            let at = MEMBER_DATA_OFFSET + row as usize * c;
            acc.fill(0);
            for (i, m) in st.slots.iter().enumerate() {
                if i == index {
                    continue;
                }
                let Some(m) = m else {
                    return Err(SetError::Failed(format!(
                        "member {i} was lost during the rebuild"
                    )));
                };
                m.read(at, &mut buf);
                xor_into(&mut acc, &buf);
            }
            spare.medium.write(at, &acc);
            spare.medium.flush(at, c)?;
            spare.medium.fence()?;
            spare.done.store(row + 1, Ordering::Release);
            drop(_g);
            drop(st);
            progress(row + 1, total);
        }
        Ok(())
    }

    /// Close cleanly: persist everything and clear the open mark in every header. (Dropping
    /// the set does the same, ignoring errors.)
    pub fn close(self) -> Result<()> {
        self.close_ref()
    }

    fn close_ref(&self) -> Result<()> {
        if self.read_only || self.failed() {
            return Ok(());
        }
        let st = self.lock_members();
        if st.spare.is_some() {
            return Ok(());
        }
        // Every line of every row stored to since the open, written back on every member: a
        // store never flushed by the layers above could otherwise reach the media after the
        // clean mark without its parity line.
        let c = self.geo.chunk;
        for row in st.dirty_rows() {
            let at = MEMBER_DATA_OFFSET + row as usize * c;
            for m in st.slots.iter().flatten() {
                m.flush(at, c)?;
            }
        }
        self.fence_all(&st)?;
        self.write_headers(&st, 0)?;
        self.marked.store(false, Ordering::Release);
        Ok(())
    }

    fn fence_all(&self, st: &Members<M>) -> Result<()> {
        for m in st.slots.iter().flatten() {
            m.fence()?;
        }
        if let Some(s) = &st.spare {
            s.medium.fence()?;
        }
        Ok(())
    }

    /// XOR of member `skip`'s neighbours in `row` at `[at, at + buf.len())`, into `buf`.
    /// False (and `buf` zeroed) if another member is missing too.
    fn reconstruct(
        &self,
        st: &Members<M>,
        row: u64,
        skip: usize,
        at: usize,
        buf: &mut [u8],
    ) -> bool {
        buf.fill(0);
        with_scratch(buf.len(), |tmp, _| {
            for i in 0..self.geo.members {
                if i == skip {
                    continue;
                }
                let Some(m) = st.get(i, row) else {
                    buf.fill(0);
                    self.failed.store(true, Ordering::Release);
                    return false;
                };
                m.read(at, tmp);
                xor_into(buf, tmp);
            }
            true
        })
    }

    fn check_live(&self) -> Result<()> {
        if self.failed() {
            Err(PmemError::Failed)
        } else {
            Ok(())
        }
    }

    fn store_piece(&self, p: Piece, data: &[u8], nt: bool) {
        let st = self.lock_members();
        if !self.ensure_marked(&st) {
            return;
        }
        st.mark_dirty(p.row);
        let _g = self.row_lock(p.row);
        let dm = st.get(p.data, p.row);
        let pm = st.get(p.parity, p.row);
        with_scratch(p.len, |old, par| {
            match dm {
                Some(m) => m.read(p.at, old),
                None => {
                    self.reconstruct(&st, p.row, p.data, p.at, old);
                }
            }
            if let Some(m) = dm {
                if nt {
                    m.write_nontemporal(p.at, data);
                } else {
                    m.write(p.at, data);
                }
            }
            if let Some(m) = pm {
                m.read(p.at, par);
                xor_into(par, old);
                xor_into(par, data);
                if nt {
                    m.write_nontemporal(p.at, par);
                } else {
                    m.write(p.at, par);
                }
            }
        });
    }

    fn each_copy(
        &self,
        offset: usize,
        len: usize,
        f: impl Fn(&M, usize, usize) -> Result<()>,
    ) -> Result<()> {
        self.check_live()?;
        check_range(offset, len, self.len());
        let st = self.lock_members();
        for p in self.geo.pieces(offset, len) {
            for i in [p.data, p.parity] {
                if let Some(m) = st.get(i, p.row) {
                    f(m, p.at, p.len)?;
                }
            }
        }
        Ok(())
    }
}

impl<M: Medium> Drop for StripedSet<M> {
    fn drop(&mut self) {
        let _ = self.close_ref();
    }
}

fn fault_list(faults: &[Option<String>], labels: &[PathBuf]) -> Vec<MemberFault> {
    faults
        .iter()
        .enumerate()
        .filter_map(|(i, f)| {
            f.as_ref().map(|r| MemberFault {
                index: i,
                label: labels[i].clone(),
                reason: r.clone(),
            })
        })
        .collect()
}

/// Two scratch buffers of `len` bytes: on the stack when small, so a small write allocates
/// nothing.
fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [u8], &mut [u8]) -> R) -> R {
    const SMALL: usize = 1024;
    if len <= SMALL {
        let (mut a, mut b) = ([0u8; SMALL], [0u8; SMALL]);
        f(&mut a[..len], &mut b[..len])
    } else {
        let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
        f(&mut a, &mut b)
    }
}

fn xor_into(acc: &mut [u8], src: &[u8]) {
    let (a8, at) = acc.split_at_mut(acc.len() / 8 * 8);
    let (s8, st) = src.split_at(a8.len());
    for (a, s) in a8.chunks_exact_mut(8).zip(s8.chunks_exact(8)) {
        let x = u64::from_ne_bytes(a.try_into().expect("8"))
            ^ u64::from_ne_bytes(s.try_into().expect("8"));
        a.copy_from_slice(&x.to_ne_bytes());
    }
    for (a, s) in at.iter_mut().zip(st) {
        *a ^= s;
    }
}

impl<M: Medium> Medium for StripedSet<M> {
    fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }
    fn domain(&self) -> Domain {
        self.domain
    }
    fn backing(&self) -> Backing {
        self.backing
    }
    fn label(&self) -> PathBuf {
        self.label.clone()
    }
    fn read(&self, offset: usize, buf: &mut [u8]) {
        check_range(offset, buf.len(), self.len());
        let st = self.lock_members();
        for p in self.geo.pieces(offset, buf.len()) {
            let out = &mut buf[p.buf..p.buf + p.len];
            match st.get(p.data, p.row) {
                Some(m) => m.read(p.at, out),
                None => {
                    let _g = self.row_lock(p.row);
                    self.reconstruct(&st, p.row, p.data, p.at, out);
                }
            }
        }
    }
    fn write(&self, offset: usize, data: &[u8]) {
        check_range(offset, data.len(), self.len());
        for p in self.geo.pieces(offset, data.len()) {
            self.store_piece(p, &data[p.buf..p.buf + p.len], false);
        }
    }
    fn write_nontemporal(&self, offset: usize, data: &[u8]) {
        check_range(offset, data.len(), self.len());
        for p in self.geo.pieces(offset, data.len()) {
            self.store_piece(p, &data[p.buf..p.buf + p.len], true);
        }
    }
    fn load_u64(&self, offset: usize) -> u64 {
        check_word(offset, self.len());
        let p = self.geo.pieces(offset, 8).next().expect("one piece");
        let st = self.lock_members();
        match st.get(p.data, p.row) {
            Some(m) => m.load_u64(p.at),
            None => {
                let _g = self.row_lock(p.row);
                let mut b = [0u8; 8];
                self.reconstruct(&st, p.row, p.data, p.at, &mut b);
                u64::from_le_bytes(b)
            }
        }
    }
    fn store_u64(&self, offset: usize, value: u64) {
        check_word(offset, self.len());
        let p = self.geo.pieces(offset, 8).next().expect("one piece");
        let st = self.lock_members();
        if !self.ensure_marked(&st) {
            return;
        }
        st.mark_dirty(p.row);
        let _g = self.row_lock(p.row);
        let old = match st.get(p.data, p.row) {
            Some(m) => m.load_u64(p.at),
            None => {
                let mut b = [0u8; 8];
                self.reconstruct(&st, p.row, p.data, p.at, &mut b);
                u64::from_le_bytes(b)
            }
        };
        if let Some(m) = st.get(p.data, p.row) {
            m.store_u64(p.at, value);
        }
        if let Some(m) = st.get(p.parity, p.row) {
            let par = m.load_u64(p.at);
            m.store_u64(p.at, par ^ old ^ value);
        }
    }
    fn flush(&self, offset: usize, len: usize) -> Result<()> {
        self.each_copy(offset, len, |m, at, n| m.flush(at, n))
    }
    fn write_back(&self, offset: usize, len: usize) -> Result<()> {
        self.each_copy(offset, len, |m, at, n| m.write_back(at, n))
    }
    fn fence(&self) -> Result<()> {
        self.check_live()?;
        let st = self.lock_members();
        self.fence_all(&st)
    }
    /// Grows every member (zero-filled: the parity of zero rows is zero), then records the new
    /// row count in every header. The set grows by whole rows, so it may end up longer than
    /// `len`. Refused while a rebuild runs.
    fn grow(&self, len: usize) -> Result<()> {
        if len <= self.len() {
            return Ok(());
        }
        self.check_live()?;
        if self.read_only {
            return Err(PmemError::ReadOnly);
        }
        let mut st = self.lock_members_mut();
        if st.spare.is_some() {
            return Err(PmemError::Invalid {
                what: "set size",
                reason: "the set cannot grow while a member is rebuilt".into(),
            });
        }
        let rows = self.geo.rows_for(len as u64);
        if rows > crate::layout::POOL_SIZE_MAX / self.geo.chunk as u64 {
            return Err(PmemError::NoSpace(format!(
                "{len} bytes is more than a set member may hold"
            )));
        }
        let member_len = self.geo.member_len(rows);
        for m in st.slots.iter().flatten() {
            m.grow(member_len)?;
        }
        self.rows.store(rows, Ordering::Release);
        let words = rows.div_ceil(64) as usize;
        while st.dirty.len() < words {
            st.dirty.push(AtomicU64::new(0));
        }
        self.write_headers(&st, self.flag())?;
        self.len
            .store(rows as usize * self.geo.row_bytes(), Ordering::Release);
        Ok(())
    }
    /// Puts the bytes on the data member only, leaving parity as it was: a media fault under
    /// the set.
    fn inject(&self, offset: usize, data: &[u8]) -> Result<()> {
        check_range(offset, data.len(), self.len());
        let st = self.lock_members();
        for p in self.geo.pieces(offset, data.len()) {
            if let Some(m) = st.get(p.data, p.row) {
                m.inject(p.at, &data[p.buf..p.buf + p.len])?;
            }
        }
        Ok(())
    }
}

/// A window `[base, base + len)` of another medium, as a medium of its own: several members of
/// a set on one simulated medium, so one crash cuts power to all of them at once. It can grow
/// up to `cap` bytes (the caller leaves that room, zeroed, after it).
#[derive(Debug)]
pub struct Window<M: Medium> {
    inner: M,
    base: usize,
    len: AtomicUsize,
    cap: usize,
}

impl<M: Medium> Window<M> {
    /// The window `[base, base + len)` of `inner`, growable to `cap` bytes.
    pub fn new(inner: M, base: usize, len: usize, cap: usize) -> Window<M> {
        assert!(
            len <= cap && base + cap <= inner.len(),
            "window outside its medium"
        );
        Window {
            inner,
            base,
            len: AtomicUsize::new(len),
            cap,
        }
    }
}

impl<M: Medium> Medium for Window<M> {
    fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }
    fn domain(&self) -> Domain {
        self.inner.domain()
    }
    fn backing(&self) -> Backing {
        self.inner.backing()
    }
    fn label(&self) -> PathBuf {
        PathBuf::from(format!("<window at {:#x}>", self.base))
    }
    fn prefetch(&self, o: usize, l: usize) {
        if o.checked_add(l).is_some_and(|end| end <= self.len()) {
            self.inner.prefetch(self.base + o, l)
        }
    }
    fn populate(&self, o: usize, l: usize) {
        if o.checked_add(l).is_some_and(|end| end <= self.len()) {
            self.inner.populate(self.base + o, l)
        }
    }
    fn read(&self, o: usize, b: &mut [u8]) {
        check_range(o, b.len(), self.len());
        self.inner.read(self.base + o, b)
    }
    fn write(&self, o: usize, d: &[u8]) {
        check_range(o, d.len(), self.len());
        self.inner.write(self.base + o, d)
    }
    fn write_nontemporal(&self, o: usize, d: &[u8]) {
        check_range(o, d.len(), self.len());
        self.inner.write_nontemporal(self.base + o, d)
    }
    fn load_u64(&self, o: usize) -> u64 {
        check_word(o, self.len());
        self.inner.load_u64(self.base + o)
    }
    fn store_u64(&self, o: usize, v: u64) {
        check_word(o, self.len());
        self.inner.store_u64(self.base + o, v)
    }
    fn flush(&self, o: usize, l: usize) -> Result<()> {
        check_range(o, l, self.len());
        self.inner.flush(self.base + o, l)
    }
    fn write_back(&self, o: usize, l: usize) -> Result<()> {
        check_range(o, l, self.len());
        self.inner.write_back(self.base + o, l)
    }
    fn fence(&self) -> Result<()> {
        self.inner.fence()
    }
    fn grow(&self, len: usize) -> Result<()> {
        if len > self.cap {
            return Err(PmemError::NoSpace(format!(
                "a window of {} bytes cannot grow to {len}",
                self.cap
            )));
        }
        self.len.fetch_max(len, Ordering::AcqRel);
        Ok(())
    }
    fn inject(&self, o: usize, d: &[u8]) -> Result<()> {
        check_range(o, d.len(), self.len());
        self.inner.inject(self.base + o, d)
    }
}

// ---------------------------------------------------------------------------------------------
// Sets of files.

/// First line of a set description file.
pub const DESCRIPTION_MAGIC: &str = "kavach-pool-set 1";

/// The member paths a set description file lists (relative paths are taken from the file's
/// directory).
pub fn read_description(path: &Path) -> SetResult<Vec<PathBuf>> {
    let text = std::fs::read(path).map_err(|e| PmemError::io("cannot read", path, e))?;
    parse_description(&text, path)
}

/// Parse a set description (see [`read_description`]).
pub fn parse_description(text: &[u8], path: &Path) -> SetResult<Vec<PathBuf>> {
    let bad = |reason: String| SetError::Invalid {
        what: "set description",
        reason: format!("{}: {reason}", path.display()),
    };
    let text = std::str::from_utf8(text).map_err(|_| bad("not UTF-8 text".into()))?;
    let mut lines = text.lines();
    if lines.next() != Some(DESCRIPTION_MAGIC) {
        return Err(bad(format!("the first line is not `{DESCRIPTION_MAGIC}`")));
    }
    let dir = path.parent().unwrap_or(Path::new(""));
    let mut out = Vec::new();
    for (no, line) in lines.enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let Some(p) = line.strip_prefix("member ") else {
            return Err(bad(format!(
                "line {}: expected `member PATH`, found `{line}`",
                no + 2
            )));
        };
        if p.is_empty() {
            return Err(bad(format!("line {}: empty member path", no + 2)));
        }
        let p = Path::new(p);
        out.push(if p.is_absolute() {
            p.to_path_buf()
        } else {
            dir.join(p)
        });
    }
    validate_members(out.len() as u64).map_err(|e| bad(e.to_string()))?;
    Ok(out)
}

/// Write a set description naming `members` (written as given), atomically: a temporary file
/// in the same directory, synced, renamed over `path`, and the directory synced.
pub fn write_description(path: &Path, members: &[PathBuf], must_be_new: bool) -> SetResult<()> {
    use std::io::Write;
    let mut text = format!("{DESCRIPTION_MAGIC}\n");
    for m in members {
        let s = m.to_str().ok_or_else(|| SetError::Invalid {
            what: "member path",
            reason: format!("{} is not UTF-8", m.display()),
        })?;
        if s.contains('\n') || s.is_empty() {
            return Err(SetError::Invalid {
                what: "member path",
                reason: format!("{s:?} is empty or holds a line break"),
            });
        }
        text.push_str(&format!("member {s}\n"));
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| SetError::Invalid {
        what: "set path",
        reason: format!("{} names no file", path.display()),
    })?;
    let tmp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| PmemError::io("cannot create", &tmp, e))?;
    f.write_all(text.as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(|e| PmemError::io("cannot write", &tmp, e))?;
    if must_be_new {
        std::fs::hard_link(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            PmemError::io("cannot create", path, e)
        })?;
        let _ = std::fs::remove_file(&tmp);
    } else {
        std::fs::rename(&tmp, path).map_err(|e| PmemError::io("cannot replace", path, e))?;
    }
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The member paths `kavach pool create --files` uses for set `path`: `path.0`, `path.1`, ...
pub fn default_member_paths(path: &Path, n: usize) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let mut s = path.as_os_str().to_owned();
            s.push(format!(".{i}"));
            PathBuf::from(s)
        })
        .collect()
}

/// How a description at `description` names member `member`: its file name alone when the two
/// share a directory (the set can then move as a whole), else the path as given.
pub fn listed_name(description: &Path, member: &Path) -> PathBuf {
    match (description.parent(), member.parent(), member.file_name()) {
        (Some(a), Some(b), Some(name)) if a == b => PathBuf::from(name),
        _ => member.to_path_buf(),
    }
}

/// Does the file at `path` start like a set description?
pub fn is_description(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; DESCRIPTION_MAGIC.len()];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && head == *DESCRIPTION_MAGIC.as_bytes()
}

fn identity(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

impl StripedSet<Mapping> {
    /// Create a set of `paths.len()` new member files (none may exist), each holding
    /// `rows_for(size)` rows of `chunk`, and a description at `description`; growable members
    /// reserve address space to grow in place.
    pub fn create_files(
        description: &Path,
        paths: &[PathBuf],
        size: u64,
        chunk: u64,
    ) -> SetResult<StripedSet<Mapping>> {
        validate_members(paths.len() as u64)?;
        validate_chunk(chunk)?;
        crate::pool::validate_size(size)?;
        let geo = Geometry {
            members: paths.len(),
            chunk: chunk as usize,
        };
        let rows = geo.rows_for(size);
        let member_len = geo.member_len(rows) as u64;
        let mut made: Vec<Mapping> = Vec::new();
        let cleanup = |made: Vec<Mapping>, upto: usize| {
            drop(made);
            for p in &paths[..upto] {
                let _ = std::fs::remove_file(p);
            }
        };
        for (i, p) in paths.iter().enumerate() {
            match Mapping::create(p, member_len).and_then(|mut m| {
                m.reserve(crate::pool::GROW_RESERVE_BYTES as usize)?;
                Ok(m)
            }) {
                Ok(m) => made.push(m),
                Err(e) => {
                    cleanup(made, i);
                    return Err(e.into());
                }
            }
        }
        let listed: Vec<PathBuf> = paths.iter().map(|p| listed_name(description, p)).collect();
        if let Err(e) = write_description(description, &listed, true) {
            cleanup(made, paths.len());
            return Err(e);
        }
        match StripedSet::create_inner(made, chunk, paths.to_vec(), true) {
            Ok(s) => Ok(s.with_label(description)),
            Err(e) => {
                for p in paths {
                    let _ = std::fs::remove_file(p);
                }
                let _ = std::fs::remove_file(description);
                Err(e)
            }
        }
    }

    /// Open the set a description file names. A member that cannot be opened or mapped is
    /// lost, with the reason.
    pub fn open_files(description: &Path, opts: SetOpenOptions) -> SetResult<StripedSet<Mapping>> {
        let paths = read_description(description)?;
        let media = paths
            .iter()
            .map(|p| {
                Mapping::open(p, !opts.read_only)
                    .and_then(|mut m| {
                        if !opts.read_only {
                            m.reserve(crate::pool::GROW_RESERVE_BYTES as usize)?;
                        }
                        Ok(m)
                    })
                    .map_err(|e| e.to_string())
            })
            .collect();
        Ok(StripedSet::open(media, paths, opts)?.with_label(description))
    }

    fn with_label(mut self, l: &Path) -> Self {
        self.label = l.to_path_buf();
        self
    }

    /// Is each member's path still the file the set has mapped? A member whose path is gone,
    /// names another file, or cannot be opened for reading any more is marked lost (see
    /// [`StripedSet::mark_lost`]). An unlinked file stays readable through its mapping, so
    /// without this check a running set would never notice. Returns the member newly lost.
    pub fn check_members(&self) -> SetResult<Option<usize>> {
        let mut found = None;
        {
            let st = self.lock_members();
            for (i, m) in st.slots.iter().enumerate() {
                let Some(m) = m else { continue };
                let mapped = m.file().metadata().map(|md| identity(&md));
                let named = std::fs::File::open(m.path())
                    .and_then(|f| f.metadata())
                    .map(|md| identity(&md));
                let why = match (mapped, named) {
                    (Ok(a), Ok(b)) if a == b => None,
                    (Ok(_), Ok(_)) => {
                        Some(format!("{} now names another file", m.path().display()))
                    }
                    (_, Err(e)) => Some(format!("{} cannot be opened: {e}", m.path().display())),
                    (Err(e), _) => Some(format!("the mapped file cannot be examined: {e}")),
                };
                if let Some(w) = why {
                    found = Some((i, w));
                    break;
                }
            }
        }
        match found {
            Some((i, why)) => {
                self.mark_lost(i, &why)?;
                Ok(Some(i))
            }
            None => Ok(None),
        }
    }
}

/// A thread that runs [`StripedSet::check_members`] every `period` until dropped.
#[derive(Debug)]
pub struct MemberWatch {
    stop: std::sync::Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MemberWatch {
    /// Start watching `set`.
    pub fn start(
        set: std::sync::Arc<StripedSet<Mapping>>,
        period: std::time::Duration,
    ) -> MemberWatch {
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Acquire) {
                let _ = set.check_members();
                std::thread::sleep(period);
            }
        });
        MemberWatch {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for MemberWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
