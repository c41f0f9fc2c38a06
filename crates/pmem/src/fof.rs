//! The flush-on-fail record: the pool's "valid marker" (WSP, `docs/format/fof.md`).
//!
//! A pool running flush on fail skips cache-line write-backs on its critical path
//! ([`crate::Domain::Eadr`] on a mapping, [`crate::SimDomain::FlushOnFail`] in the simulator) and
//! relies on a save at the power-failure warning to write every dirty line back. This record
//! tells the next open which of the two fates the image had:
//!
//! - [`FofState::Armed`]: the pool was running flush on fail and no save completed since: the
//!   window was missed (or the process died without a warning). Lines not written back may be
//!   lost or torn; each layer recovers from its own checksums or refuses.
//! - [`FofState::Saved`]: a save stopped the writers at a safe point, wrote every dirty line
//!   back and then, last, this record (with the layers' resume hints). The image is whole.
//! - [`FofState::None`]: flush on fail is off (or was turned off cleanly).
//!
//! The record is two 128-byte copies, each with a sequence number and a CRC. A write goes to
//! the copy not in force (the one with the lower sequence), then is written back with
//! [`Medium::write_back`] (never skipped) and fenced: a power failure while it is written
//! leaves the other copy in force, so the record is failure-atomic. The copy in force is the
//! valid one with the higher sequence.

use crate::error::{Corruption, PmemError, Result};
use crate::layout::Field;
use crate::medium::Medium;

/// Bytes of one copy.
pub const COPY_BYTES: usize = 128;
/// Bytes of the record: two copies.
pub const RECORD_BYTES: usize = 2 * COPY_BYTES;
/// Resume hints a record can hold.
pub const HINTS_MAX: usize = 8;
/// The magic at the start of each copy: "KVFOFREC".
pub const MAGIC: u64 = u64::from_le_bytes(*b"KVFOFREC");
/// The format version.
pub const VERSION: u32 = 1;
/// Bytes covered by a copy's CRC (all but the CRC itself).
pub const CRC_COVERED: usize = 124;

/// The fields of one copy, as `docs/format/fof.md` lists them.
pub const FIELDS: &[Field] = &[
    Field::new("magic", 0, 8),
    Field::new("version", 8, 4),
    Field::new("state", 12, 4),
    Field::new("sequence", 16, 8),
    Field::new("save_count", 24, 8),
    Field::new("saved_at_ns", 32, 8),
    Field::new("hint_count", 40, 4),
    Field::new("reserved", 44, 4),
    Field::new("hints", 48, 64),
    Field::new("reserved2", 112, 12),
    Field::new("crc", 124, 4),
];

/// What the record says about the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FofState {
    /// Flush on fail is off.
    None,
    /// Running flush on fail, no completed save since: a crash image is a missed window.
    Armed,
    /// A save completed: every line was written back before this record.
    Saved,
}

impl FofState {
    /// The code stored in the `state` field.
    pub const fn code(self) -> u32 {
        match self {
            FofState::None => 0,
            FofState::Armed => 1,
            FofState::Saved => 2,
        }
    }

    /// Inverse of [`FofState::code`].
    pub const fn from_code(code: u32) -> Option<FofState> {
        match code {
            0 => Some(FofState::None),
            1 => Some(FofState::Armed),
            2 => Some(FofState::Saved),
            _ => None,
        }
    }

    /// A name for reports.
    pub const fn name(self) -> &'static str {
        match self {
            FofState::None => "none",
            FofState::Armed => "armed-unsaved",
            FofState::Saved => "saved",
        }
    }
}

/// One copy of the record, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FofRecord {
    /// The state.
    pub state: FofState,
    /// Bumped by every write; the valid copy with the higher one is in force.
    pub sequence: u64,
    /// Completed saves so far.
    pub save_count: u64,
    /// When the last completed save wrote the record (ns since the Unix epoch; 0: never).
    pub saved_at_ns: u64,
    /// The layers' resume hints, written by the save (empty unless `Saved`).
    pub hints: Vec<u64>,
}

impl FofRecord {
    /// The bytes of this record as copy `sequence % 2`.
    pub fn encode(&self) -> [u8; COPY_BYTES] {
        let mut b = [0u8; COPY_BYTES];
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.state.code().to_le_bytes());
        b[16..24].copy_from_slice(&self.sequence.to_le_bytes());
        b[24..32].copy_from_slice(&self.save_count.to_le_bytes());
        b[32..40].copy_from_slice(&self.saved_at_ns.to_le_bytes());
        let n = self.hints.len().min(HINTS_MAX);
        b[40..44].copy_from_slice(&(n as u32).to_le_bytes());
        for (i, h) in self.hints.iter().take(n).enumerate() {
            b[48 + 8 * i..56 + 8 * i].copy_from_slice(&h.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b[..CRC_COVERED]);
        b[CRC_COVERED..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode a copy found at medium offset `at`.
    pub fn decode(b: &[u8], at: u64) -> std::result::Result<FofRecord, Corruption> {
        let bad = |field: &'static str, expected: String, found: String| Corruption {
            structure: "flush-on-fail record".into(),
            offset: at,
            field,
            expected,
            found,
        };
        if b.len() != COPY_BYTES {
            return Err(bad(
                "length",
                format!("{COPY_BYTES} bytes"),
                format!("{} bytes", b.len()),
            ));
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        if u64_at(0) != MAGIC {
            return Err(bad(
                "magic",
                format!("{MAGIC:#018x}"),
                format!("{:#018x}", u64_at(0)),
            ));
        }
        let crc = crc32c::crc32c(&b[..CRC_COVERED]);
        if u32_at(CRC_COVERED) != crc {
            return Err(bad(
                "crc",
                format!("{crc:#010x}"),
                format!("{:#010x}", u32_at(CRC_COVERED)),
            ));
        }
        if u32_at(8) != VERSION {
            return Err(bad("version", VERSION.to_string(), u32_at(8).to_string()));
        }
        let state = FofState::from_code(u32_at(12))
            .ok_or_else(|| bad("state", "0, 1 or 2".into(), u32_at(12).to_string()))?;
        let n = u32_at(40) as usize;
        if n > HINTS_MAX {
            return Err(bad(
                "hint_count",
                format!("at most {HINTS_MAX}"),
                n.to_string(),
            ));
        }
        if u32_at(44) != 0 || b[112..CRC_COVERED].iter().any(|&x| x != 0) {
            return Err(bad("reserved", "zero".into(), "non-zero bytes".into()));
        }
        Ok(FofRecord {
            state,
            sequence: u64_at(16),
            save_count: u64_at(24),
            saved_at_ns: u64_at(32),
            hints: (0..n).map(|i| u64_at(48 + 8 * i)).collect(),
        })
    }
}

/// What reading a record found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The copy in force; `None` if both copies are blank (never written).
    pub record: Option<FofRecord>,
    /// A copy that is neither blank nor valid (a write torn by a power failure, or damage);
    /// the other copy is in force.
    pub bad_copy: Option<Corruption>,
}

impl Found {
    /// The state in force ([`FofState::None`] for a blank record).
    pub fn state(&self) -> FofState {
        self.record.as_ref().map_or(FofState::None, |r| r.state)
    }
}

fn check_place<M: Medium>(medium: &M, base: usize) -> Result<()> {
    if base % crate::cpu::CACHE_LINE != 0
        || base
            .checked_add(RECORD_BYTES)
            .is_none_or(|e| e > medium.len())
    {
        return Err(PmemError::Invalid {
            what: "flush-on-fail record place",
            reason: format!(
                "[{base:#x}, +{RECORD_BYTES}) is not a cache-line aligned range of the {}-byte \
                 medium",
                medium.len()
            ),
        });
    }
    Ok(())
}

/// Read the record at `base`. Refuses (typed corruption) when neither copy is valid and at
/// least one is not blank: nothing says which fate the image had.
pub fn read<M: Medium>(medium: &M, base: usize) -> Result<Found> {
    check_place(medium, base)?;
    let mut copies = Vec::with_capacity(2);
    let mut bad = None;
    let mut blank = 0;
    for c in 0..2 {
        let at = base + c * COPY_BYTES;
        let mut b = [0u8; COPY_BYTES];
        medium.read(at, &mut b);
        if b.iter().all(|&x| x == 0) {
            blank += 1;
            continue;
        }
        match FofRecord::decode(&b, at as u64) {
            Ok(r) => copies.push(r),
            Err(e) => bad = Some(e),
        }
    }
    let record = copies.into_iter().max_by_key(|r| r.sequence);
    if record.is_none() && blank == 0 {
        // Both copies written once and neither valid: nothing says which fate this was.
        return Err(PmemError::Corrupt(
            bad.expect("a copy neither blank nor valid"),
        ));
    }
    // One blank copy and one invalid: the very first write (of `arm`, which writes both
    // copies before any flush-on-fail write) was torn: flush on fail never started.
    Ok(Found {
        record,
        bad_copy: bad,
    })
}

/// Write `next` (its `sequence` is set to one past the copy in force) into the copy not in
/// force, written back and fenced: durable when this returns, in every domain.
pub fn write<M: Medium>(medium: &M, base: usize, mut next: FofRecord) -> Result<FofRecord> {
    let found = read(medium, base)?;
    next.sequence = found.record.as_ref().map_or(1, |r| r.sequence + 1);
    let at = base + (next.sequence % 2) as usize * COPY_BYTES;
    medium.write(at, &next.encode());
    medium.write_back(at, COPY_BYTES)?;
    medium.fence()?;
    Ok(next)
}

/// Arm the record: the pool runs flush on fail from now on (and a crash image is a missed
/// window until a save completes). Counters are kept; hints are cleared. The caller has made
/// everything before this durable. A blank record gets both copies written (one after the
/// other), so that from then on damage to one copy leaves the other in force.
pub fn arm<M: Medium>(medium: &M, base: usize) -> Result<FofRecord> {
    let cur = read(medium, base)?.record;
    let armed = FofRecord {
        state: FofState::Armed,
        sequence: 0,
        save_count: cur.as_ref().map_or(0, |r| r.save_count),
        saved_at_ns: cur.as_ref().map_or(0, |r| r.saved_at_ns),
        hints: Vec::new(),
    };
    if cur.is_none() {
        write(medium, base, armed.clone())?;
    }
    write(medium, base, armed)
}

/// Mark the record saved, with `hints`: the last step of a completed save, after every dirty
/// line was written back and fenced.
pub fn mark_saved<M: Medium>(
    medium: &M,
    base: usize,
    saved_at_ns: u64,
    hints: &[u64],
) -> Result<FofRecord> {
    if hints.len() > HINTS_MAX {
        return Err(PmemError::Invalid {
            what: "flush-on-fail resume hints",
            reason: format!("{} hints, at most {HINTS_MAX}", hints.len()),
        });
    }
    let cur = read(medium, base)?.record;
    write(
        medium,
        base,
        FofRecord {
            state: FofState::Saved,
            sequence: 0,
            save_count: cur.as_ref().map_or(0, |r| r.save_count) + 1,
            saved_at_ns,
            hints: hints.to_vec(),
        },
    )
}

/// Turn flush on fail off: the caller has written everything back (or runs in a domain that
/// flushes at commit from now on).
pub fn disarm<M: Medium>(medium: &M, base: usize) -> Result<FofRecord> {
    let cur = read(medium, base)?.record;
    write(
        medium,
        base,
        FofRecord {
            state: FofState::None,
            sequence: 0,
            save_count: cur.as_ref().map_or(0, |r| r.save_count),
            saved_at_ns: cur.as_ref().map_or(0, |r| r.saved_at_ns),
            hints: Vec::new(),
        },
    )
}

/// Now, in ns since the Unix epoch (0 if the clock is before it).
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The simulator's completed-save image with the save's last step applied: the record at
/// `record` marked saved (with `hints`), as `powerfail::PoolTarget` does after its write-back.
/// A crash image of the [`crate::sim::Fate::Saved`] fate keeps every store (the write-back);
/// this adds the marker. Refused (typed) unless the record there is armed.
pub fn with_saved_marker(image: Vec<u8>, record: usize, hints: &[u64]) -> Result<Vec<u8>> {
    let m = crate::sim::SimMedium::from_image(image, crate::sim::SimConfig::default());
    let found = read(&m, record)?;
    if found.state() != FofState::Armed {
        return Err(PmemError::Invalid {
            what: "flush-on-fail marker",
            reason: format!(
                "a save marks an armed record; this one is {}",
                found.state().name()
            ),
        });
    }
    mark_saved(&m, record, now_ns(), hints)?;
    Ok(m.durable_image())
}

/// The name of the pool region that holds the record.
pub const REGION_NAME: &str = "fof";

/// The pool's flush-on-fail record: the offset of region [`REGION_NAME`], created (one page,
/// blank) if the pool has none.
pub fn pool_record<M: Medium>(pool: &mut crate::Pool<M>) -> Result<usize> {
    if let Some(r) = pool.region(REGION_NAME) {
        if (r.length as usize) < RECORD_BYTES {
            return Err(PmemError::Invalid {
                what: "flush-on-fail region",
                reason: format!("{} bytes, at least {RECORD_BYTES} needed", r.length),
            });
        }
        return Ok(r.offset as usize);
    }
    let r = pool.create_region(
        REGION_NAME,
        crate::kinds::FOF,
        crate::layout::PAGE_SIZE as u64,
        crate::Alignment::Page,
    )?;
    Ok(r.offset as usize)
}

/// An explicit write tracker: one bit per page of a medium, set by the layers for every page
/// they store to while running flush on fail, taken (and cleared) by the save, which then
/// writes back only those pages. Marking is one atomic OR per page touched.
#[derive(Debug)]
pub struct DirtyPages {
    words: Vec<std::sync::atomic::AtomicU64>,
    pages: usize,
}

impl DirtyPages {
    /// A clean tracker for a medium of `len` bytes.
    pub fn new(len: usize) -> DirtyPages {
        let pages = len.div_ceil(crate::layout::PAGE_SIZE);
        DirtyPages {
            words: (0..pages.div_ceil(64))
                .map(|_| std::sync::atomic::AtomicU64::new(0))
                .collect(),
            pages,
        }
    }

    /// Pages tracked.
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// Bitmap words (what a save scans).
    pub fn words(&self) -> usize {
        self.words.len()
    }

    /// Mark the pages under `[offset, offset + len)` dirty (a range past the end is clipped).
    pub fn mark(&self, offset: usize, len: usize) {
        if len == 0 {
            return;
        }
        let first = offset / crate::layout::PAGE_SIZE;
        let last =
            ((offset + len - 1) / crate::layout::PAGE_SIZE).min(self.pages.saturating_sub(1));
        for p in first..=last {
            self.words[p / 64].fetch_or(1 << (p % 64), std::sync::atomic::Ordering::AcqRel);
        }
    }

    /// Dirty pages now (a scan of the bitmap, nothing cleared).
    pub fn count(&self) -> usize {
        self.words
            .iter()
            .map(|w| w.load(std::sync::atomic::Ordering::Acquire).count_ones() as usize)
            .sum()
    }

    /// Take the dirty pages (their indices, ascending) and clear their bits.
    pub fn take(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for (i, w) in self.words.iter().enumerate() {
            if w.load(std::sync::atomic::Ordering::Acquire) == 0 {
                continue;
            }
            let mut bits = w.swap(0, std::sync::atomic::Ordering::AcqRel);
            while bits != 0 {
                out.push(i * 64 + bits.trailing_zeros() as usize);
                bits &= bits - 1;
            }
        }
        out
    }

    /// Mark `pages` (indices) dirty again (a save that did not finish puts back what it took).
    pub fn put_back(&self, pages: &[usize]) {
        for &p in pages.iter().filter(|&&p| p < self.pages) {
            self.words[p / 64].fetch_or(1 << (p % 64), std::sync::atomic::Ordering::AcqRel);
        }
    }
}

/// A medium that marks every page it stores to in a [`DirtyPages`] tracker, and forwards
/// everything to the medium under it: a layer opened on it feeds a pool save's tracked
/// write-back without knowing about it (one atomic OR per page a store touches).
#[derive(Debug)]
pub struct Tracked<M: Medium> {
    inner: M,
    dirty: std::sync::Arc<DirtyPages>,
}

impl<M: Medium> Tracked<M> {
    /// `inner`, marking its stores in `dirty`.
    pub fn new(inner: M, dirty: std::sync::Arc<DirtyPages>) -> Tracked<M> {
        Tracked { inner, dirty }
    }

    /// The medium under the tracking.
    pub fn inner(&self) -> &M {
        &self.inner
    }
}

impl<M: Medium> Medium for Tracked<M> {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn prefetch(&self, offset: usize, len: usize) {
        self.inner.prefetch(offset, len)
    }
    fn populate(&self, offset: usize, len: usize) {
        self.inner.populate(offset, len)
    }
    fn domain(&self) -> crate::Domain {
        self.inner.domain()
    }
    fn backing(&self) -> crate::Backing {
        self.inner.backing()
    }
    fn label(&self) -> std::path::PathBuf {
        self.inner.label()
    }
    fn read(&self, offset: usize, buf: &mut [u8]) {
        self.inner.read(offset, buf)
    }
    fn write(&self, offset: usize, data: &[u8]) {
        self.inner.write(offset, data);
        self.dirty.mark(offset, data.len());
    }
    fn write_nontemporal(&self, offset: usize, data: &[u8]) {
        self.inner.write_nontemporal(offset, data);
        self.dirty.mark(offset, data.len());
    }
    fn load_u64(&self, offset: usize) -> u64 {
        self.inner.load_u64(offset)
    }
    fn store_u64(&self, offset: usize, value: u64) {
        self.inner.store_u64(offset, value);
        self.dirty.mark(offset, 8);
    }
    fn flush(&self, offset: usize, len: usize) -> Result<()> {
        self.inner.flush(offset, len)
    }
    fn write_back(&self, offset: usize, len: usize) -> Result<()> {
        self.inner.write_back(offset, len)
    }
    fn fence(&self) -> Result<()> {
        self.inner.fence()
    }
    fn persist(&self, offset: usize, len: usize) -> Result<()> {
        self.inner.persist(offset, len)
    }
    fn grow(&self, len: usize) -> Result<()> {
        self.inner.grow(len)
    }
    fn discard(&self, offset: usize, len: usize) -> Result<()> {
        self.inner.discard(offset, len)
    }
    fn back(&self, offset: usize, len: usize) -> Result<()> {
        self.inner.back(offset, len)
    }
    fn inject(&self, offset: usize, data: &[u8]) -> Result<()> {
        // Behind every layer's back: not tracked, as a firmware fault would not be.
        self.inner.inject(offset, data)
    }
}

/// A scratch view of a medium for a dry run: reads see the medium under whatever was written
/// through the view; writes stay in the view (in memory, by cache line) and never reach the
/// medium; flushes and fences do nothing. A layer that must refuse a missed-window image
/// without writing to it opens the image through a view first, and opens it for real only if
/// that succeeded.
#[derive(Debug)]
pub struct Scratch<M: Medium> {
    base: M,
    lines: std::sync::Mutex<std::collections::BTreeMap<usize, [u8; crate::cpu::CACHE_LINE]>>,
}

impl<M: Medium> Scratch<M> {
    /// A view of `base` with nothing written yet.
    pub fn new(base: M) -> Scratch<M> {
        Scratch {
            base,
            lines: std::sync::Mutex::new(std::collections::BTreeMap::new()),
        }
    }

    /// Lines written through the view.
    pub fn lines_written(&self) -> usize {
        self.lock().len()
    }

    /// The offsets of the lines written through the view, ascending.
    pub fn written_lines(&self) -> Vec<usize> {
        self.lock().keys().copied().collect()
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<usize, [u8; crate::cpu::CACHE_LINE]>>
    {
        self.lines.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<M: Medium> Medium for Scratch<M> {
    fn len(&self) -> usize {
        self.base.len()
    }
    fn domain(&self) -> crate::Domain {
        self.base.domain()
    }
    fn backing(&self) -> crate::Backing {
        self.base.backing()
    }
    fn label(&self) -> std::path::PathBuf {
        self.base.label()
    }
    fn read(&self, offset: usize, buf: &mut [u8]) {
        crate::medium::check_range(offset, buf.len(), self.len());
        self.base.read(offset, buf);
        let lines = self.lock();
        const L: usize = crate::cpu::CACHE_LINE;
        for (&l, bytes) in lines.range(offset / L * L..offset + buf.len()) {
            let (from, to) = (l.max(offset), (l + L).min(offset + buf.len()));
            buf[from - offset..to - offset].copy_from_slice(&bytes[from - l..to - l]);
        }
    }
    fn write(&self, offset: usize, data: &[u8]) {
        crate::medium::check_range(offset, data.len(), self.len());
        const L: usize = crate::cpu::CACHE_LINE;
        let mut at = offset;
        while at < offset + data.len() {
            let l = at / L * L;
            let mut line = [0u8; L];
            self.read(l, &mut line);
            let to = (l + L).min(offset + data.len());
            line[at - l..to - l].copy_from_slice(&data[at - offset..to - offset]);
            self.lock().insert(l, line);
            at = to;
        }
    }
    fn write_nontemporal(&self, offset: usize, data: &[u8]) {
        self.write(offset, data)
    }
    fn load_u64(&self, offset: usize) -> u64 {
        crate::medium::check_word(offset, self.len());
        let mut b = [0u8; 8];
        self.read(offset, &mut b);
        u64::from_le_bytes(b)
    }
    fn store_u64(&self, offset: usize, value: u64) {
        crate::medium::check_word(offset, self.len());
        self.write(offset, &value.to_le_bytes())
    }
    fn flush(&self, offset: usize, len: usize) -> Result<()> {
        crate::medium::check_range(offset, len, self.len());
        Ok(())
    }
    fn write_back(&self, offset: usize, len: usize) -> Result<()> {
        crate::medium::check_range(offset, len, self.len());
        Ok(())
    }
    fn fence(&self) -> Result<()> {
        Ok(())
    }
    fn inject(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.write(offset, data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{CrashPlan, Fate, SimConfig, SimDomain, SimMedium};

    fn fof_sim(len: usize) -> SimMedium {
        SimMedium::new(
            len,
            SimConfig {
                domain: SimDomain::FlushOnFail,
                ..SimConfig::default()
            },
        )
    }

    #[test]
    fn blank_arm_save_rearm_round_trip() {
        let m = fof_sim(4096);
        assert_eq!(read(&m, 512).unwrap().state(), FofState::None);
        let a = arm(&m, 512).unwrap();
        assert_eq!((a.state, a.sequence, a.save_count), (FofState::Armed, 2, 0));
        // Durable at once even though the domain skips flushes.
        let img = m.durable_image();
        let d = SimMedium::from_image(img, SimConfig::default());
        assert_eq!(read(&d, 512).unwrap().state(), FofState::Armed);
        let s = mark_saved(&m, 512, 77, &[5, 6]).unwrap();
        assert_eq!((s.sequence, s.save_count, s.saved_at_ns), (3, 1, 77));
        let f = read(&m, 512).unwrap();
        assert_eq!(f.record.as_ref().unwrap().hints, vec![5, 6]);
        assert_eq!(f.state(), FofState::Saved);
        let r = arm(&m, 512).unwrap();
        assert_eq!(
            (r.state, r.sequence, r.save_count, r.hints.len()),
            (FofState::Armed, 4, 1, 0)
        );
        assert_eq!(disarm(&m, 512).unwrap().state, FofState::None);
        assert!(mark_saved(&m, 512, 1, &[0; 9]).is_err());
        assert!(read(&m, 4000).is_err(), "a record past the end");
        assert!(read(&m, 8).is_err(), "an unaligned record");
    }

    #[test]
    fn a_power_failure_while_the_record_is_written_leaves_a_state_in_force() {
        // Crash at each fence of "arm (two writes), then mark saved": no image of either fate
        // is refused, and each reads as one of the states the writes so far allow.
        use FofState::*;
        let allowed: [(&[FofState], &[FofState]); 3] = [
            // (missed window, completed save) at fences 1, 2, 3
            (&[None, Armed], &[Armed]),
            (&[Armed], &[Armed]),
            (&[Armed, Saved], &[Saved]),
        ];
        let mut seen = std::collections::HashSet::new();
        for n in 1..=3u64 {
            let m = SimMedium::new(
                4096,
                SimConfig {
                    seed: n,
                    domain: SimDomain::FlushOnFail,
                    crash: CrashPlan::AtFence(n),
                    images_per_crash: 64,
                    ..SimConfig::default()
                },
            );
            let saved = arm(&m, 0).is_ok() && mark_saved(&m, 0, 1, &[9]).is_ok();
            assert!(!saved, "fence {n} never came");
            for (fate, img) in m.crash_state().unwrap().fates() {
                let d = SimMedium::from_image(img, SimConfig::default());
                let st = read(&d, 0).unwrap().state();
                let (missed, done) = allowed[n as usize - 1];
                let ok = match fate {
                    Fate::MissedWindow => missed,
                    Fate::Saved => done,
                };
                assert!(ok.contains(&st), "fence {n} {fate:?}: {st:?}");
                seen.insert((n, st));
            }
        }
        assert!(seen.contains(&(1, None)) && seen.contains(&(3, Armed)));
        // Damage to both copies refuses; to one, reads the other.
        let m = fof_sim(4096);
        arm(&m, 0).unwrap();
        mark_saved(&m, 0, 3, &[]).unwrap();
        let mut img = m.durable_image();
        img[20] ^= 1; // copy 0 (sequence 2, armed)
        let d = SimMedium::from_image(img.clone(), SimConfig::default());
        let f = read(&d, 0).unwrap();
        assert_eq!(f.state(), Saved);
        assert_eq!(f.bad_copy.unwrap().field, "crc");
        img[COPY_BYTES + 20] ^= 1;
        let d = SimMedium::from_image(img, SimConfig::default());
        let e = read(&d, 0).unwrap_err();
        assert_eq!(e.corruption().unwrap().structure, "flush-on-fail record");
    }

    #[test]
    fn a_scratch_view_reads_its_writes_and_never_writes_through() {
        let m = SimMedium::new(4096, SimConfig::default());
        m.write(0, &[1; 300]);
        let v = Scratch::new(&m);
        v.write(60, &[2; 10]); // across a line boundary
        v.store_u64(128, 7);
        let mut b = [0u8; 80];
        v.read(0, &mut b);
        assert_eq!(&b[..60], &[1; 60][..]);
        assert_eq!(&b[60..70], &[2; 10][..]);
        assert_eq!(&b[70..80], &[1; 10][..]);
        assert_eq!(v.load_u64(128), 7);
        v.persist(0, 4096).unwrap();
        assert_eq!(v.lines_written(), 3);
        let mut w = [0u8; 300];
        m.read(0, &mut w);
        assert_eq!(w, [1; 300], "the view wrote through");
    }

    #[test]
    fn a_tracked_medium_marks_the_pages_of_every_store() {
        let m = SimMedium::new(8 * 4096, SimConfig::default());
        let d = std::sync::Arc::new(DirtyPages::new(m.len()));
        let t = Tracked::new(&m, d.clone());
        t.write(4090, &[1; 10]); // pages 0 and 1
        t.store_u64(3 * 4096, 5);
        t.write_nontemporal(6 * 4096, &[2; 64]);
        t.inject(7 * 4096, &[3; 8]).unwrap();
        t.persist(0, 64).unwrap();
        assert_eq!(d.take(), vec![0, 1, 3, 6]);
        assert_eq!(m.load_u64(3 * 4096), 5, "forwarded");
    }

    #[test]
    fn dirty_pages_mark_take_and_put_back() {
        let d = DirtyPages::new(100 * 4096 + 1);
        assert_eq!((d.pages(), d.words()), (101, 2));
        d.mark(4095, 2); // pages 0 and 1
        d.mark(70 * 4096, 1);
        d.mark(100 * 4096, 4096); // clipped to the last page
        d.mark(5, 0);
        assert_eq!(d.count(), 4);
        let t = d.take();
        assert_eq!(t, vec![0, 1, 70, 100]);
        assert_eq!(d.count(), 0);
        d.put_back(&t);
        assert_eq!(d.take(), t);
    }
}
