//! The file system: one private namespace on one device (a partition).
//!
//! Calls run to completion under one lock (an instance serves one process; NVMe-CR's
//! run-to-completion pipeline). Data goes straight to the device; metadata lives in DRAM and
//! each change is a compact record in the operation log, forced before the call returns.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use log::{ForcePolicy, Log, LogOptions};

use crate::codec::{Dec, Enc, valid_name};
use crate::device::Device;
use crate::error::{FsError, Result};
use crate::layout::{
    self, CHECKPOINT_MAGIC, EXTENT_SLOT_BYTES, EXTENT_SLOT_MAGIC, EXTENT_SLOT_OFFSETS, LOG_OFFSET,
    NAME_MAX, NO_SLOT, ROOT_INO, SUPERBLOCK_BYTES, SUPERBLOCK_OFFSETS, Superblock, dirent,
};
use crate::logdev::LogMedium;
use crate::state::{Grow, Inode, Op, State};
pub use crate::state::{Kind, Provenance};

/// An inode number.
pub type Ino = u64;

/// How to format and run a namespace.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FsOptions {
    /// Hugeblock bytes (format only; an existing namespace keeps its own): a power of two in
    /// 4 KiB..=1 MiB, default 32 KiB.
    pub hugeblock: u32,
    /// Bytes of the operation-log area (format only), default 4 MiB.
    pub log_bytes: u64,
    /// Coalesce consecutive writes to one file into one log record.
    pub coalesce: bool,
    /// Open write runs kept at once (files written in turn without a record each), 1..=16.
    pub window: usize,
    /// Run metadata checkpoints on a background thread.
    pub background_checkpoint: bool,
    /// Log fill (0..1) from which a checkpoint runs when no file is open.
    pub checkpoint_log_fill: f64,
    /// The writer named in every log record.
    pub provenance: Provenance,
}

impl Default for FsOptions {
    fn default() -> Self {
        FsOptions {
            hugeblock: layout::HUGEBLOCK_DEFAULT,
            log_bytes: layout::LOG_BYTES_DEFAULT,
            coalesce: true,
            window: 4,
            background_checkpoint: true,
            checkpoint_log_fill: 0.5,
            provenance: Provenance::default(),
        }
    }
}

/// Who a namespace belongs to (kept in the superblock).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct NamespaceId {
    /// The job (at most 63 bytes).
    pub job: String,
    /// The rank or partition.
    pub rank: u32,
}

/// What `stat` says.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Stat {
    /// Inode number.
    pub ino: Ino,
    /// File or directory.
    pub kind: Kind,
    /// Bytes (a directory: its directory file's).
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Links: 1 for a file, 2 + subdirectories for a directory.
    pub nlink: u32,
    /// Times, ns since the Unix epoch.
    pub mtime_ns: i64,
    /// Last access set by `set_times` (reads do not update it).
    pub atime_ns: i64,
    /// Last change.
    pub ctime_ns: i64,
    /// 512-byte units allocated (hugeblocks x hugeblock / 512).
    pub blocks: u64,
}

/// A directory entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DirEntry {
    /// Name.
    pub name: String,
    /// Inode.
    pub ino: Ino,
    /// Kind.
    pub kind: Kind,
}

/// What opening a namespace did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Recovery {
    /// The namespace was made fresh (by `instance::open`).
    pub formatted: bool,
    /// Superblock copy in force and its sequence.
    pub superblock_copy: usize,
    /// Its sequence.
    pub superblock_sequence: u64,
    /// The previous writer closed the namespace cleanly.
    pub clean: bool,
    /// Checkpoint loaded: slot (None: none taken yet), sequence, LSN.
    pub checkpoint_slot: Option<u8>,
    /// Checkpoint sequence.
    pub checkpoint_seq: u64,
    /// Records up to this LSN were in the checkpoint.
    pub checkpoint_lsn: u64,
    /// Log records replayed after the checkpoint.
    pub records_replayed: u64,
    /// Log records skipped (already in the checkpoint).
    pub records_skipped: u64,
    /// Open write runs taken from the write-extent slot.
    pub runs_applied: u64,
    /// The log ended at a record a crash tore (or a damaged one): what and where.
    pub torn_tail: Option<String>,
    /// The writers named in the replayed records.
    pub writers: Vec<Provenance>,
    /// Other observations (a bad superblock or slot copy passed over, ...).
    pub notes: Vec<String>,
}

/// Counters.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct FsStats {
    /// Log records appended.
    pub records_written: u64,
    /// Writes absorbed into an open write run instead of a record of their own.
    pub writes_coalesced: u64,
    /// `write_at` calls that wrote bytes.
    pub writes: u64,
    /// Write runs folded into records.
    pub runs_folded: u64,
    /// Write-extent slot updates.
    pub slot_writes: u64,
    /// Metadata checkpoints taken.
    pub checkpoints: u64,
    /// Directory files rewritten without their removed names (at checkpoints).
    pub dirs_compacted: u64,
    /// Log ring bytes in use and in all.
    pub log_used_bytes: u64,
    /// Log ring bytes.
    pub log_ring_bytes: u64,
    /// Hugeblocks in all, and free.
    pub blocks_total: u64,
    /// Free hugeblocks.
    pub blocks_free: u64,
    /// Hugeblock bytes.
    pub hugeblock: u32,
    /// Files and directories.
    pub files: u64,
    /// Directories (with the root).
    pub dirs: u64,
    /// Files open (by `opened`).
    pub open_files: u64,
    /// Bytes written and read.
    pub bytes_written: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// The last background or inline checkpoint failure.
    pub last_error: Option<String>,
}

/// One thing `check` found wrong.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// The structure.
    pub what: String,
    /// Byte offset in the partition (0 when it is about DRAM structures).
    pub at: u64,
    /// What should be there.
    pub expected: String,
    /// What is.
    pub found: String,
}

/// What `check` found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CheckReport {
    /// Problems (empty: the namespace is consistent).
    pub findings: Vec<Finding>,
    /// Observations that are not damage (a tail torn by a crash).
    pub notes: Vec<String>,
    /// Files, directories, bytes in files.
    pub files: u64,
    /// Directories.
    pub dirs: u64,
    /// Bytes in files.
    pub bytes: u64,
    /// Hugeblocks used and free.
    pub blocks_used: u64,
    /// Free.
    pub blocks_free: u64,
}

/// An open write run: consecutive writes to one file, kept in the write-extent slot until a
/// different operation folds it into one log record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Run {
    id: u64,
    ino: u64,
    start: u64,
    end: u64,
    size: u64,
    mtime: i64,
    /// New hugeblocks as extents (index, block, count): a sequential run stays one extent,
    /// so updating the slot costs the same at the 2000th write as at the first.
    extents: Vec<(u64, u32, u32)>,
}

impl Run {
    fn blocks(&self) -> Vec<(u64, u32)> {
        self.extents
            .iter()
            .flat_map(|&(i, b, n)| (0..n).map(move |k| (i + k as u64, b + k)))
            .collect()
    }

    fn add(&mut self, new: &[(u64, u32)]) {
        for &(i, b) in new {
            if let Some((si, sb, n)) = self.extents.last_mut()
                && *si + *n as u64 == i
                && *sb as u64 + *n as u64 == b as u64
            {
                *n += 1;
            } else {
                self.extents.push((i, b, 1));
            }
        }
    }

    fn op(&self) -> Op {
        Op::Write {
            run: self.id,
            start: self.start,
            end: self.end,
            mtime: self.mtime,
            grow: Grow {
                ino: self.ino,
                size: self.size,
                blocks: self.blocks(),
            },
        }
    }
}

fn encode_runs(seq: u64, runs: &[Run]) -> Vec<u8> {
    let mut body = Enc::new();
    body.u32(runs.len() as u32);
    for r in runs {
        body.u64(r.id)
            .u64(r.ino)
            .u64(r.start)
            .u64(r.end)
            .u64(r.size)
            .i64(r.mtime);
        body.u32(r.extents.len() as u32);
        for &(i, b, n) in &r.extents {
            body.u64(i).u32(b).u32(n);
        }
    }
    let mut e = Enc::new();
    e.bytes(&EXTENT_SLOT_MAGIC)
        .u64(seq)
        .u32(body.buf.len() as u32)
        .u32(crc32c::crc32c(&body.buf))
        .bytes(&body.buf);
    e.buf
}

/// Decode a slot copy: `Ok(None)` when blank, `Err` when it fails its checks.
fn decode_runs(bytes: &[u8], at: u64) -> Result<Option<(u64, Vec<Run>)>> {
    if bytes[..8].iter().all(|&b| b == 0) {
        return Ok(None);
    }
    let mut d = Dec::new(bytes, at, "write-extent slot");
    let magic = d.bytes(8, "magic")?;
    if magic != EXTENT_SLOT_MAGIC {
        return Err(FsError::damage(
            "write-extent slot (magic)",
            at,
            "KVCRRUNS",
            format!("{magic:02x?}"),
        ));
    }
    let seq = d.u64("sequence")?;
    let len = d.u32("length")? as usize;
    let crc = d.u32("crc32c")?;
    if len > d.remaining() {
        return Err(FsError::damage(
            "write-extent slot (length)",
            at + 16,
            format!("at most {}", d.remaining()),
            len.to_string(),
        ));
    }
    let body = d.bytes(len, "body")?;
    let found = crc32c::crc32c(body);
    if found != crc {
        return Err(FsError::damage(
            "write-extent slot (crc32c)",
            at + 20,
            format!("{found:#010x}"),
            format!("{crc:#010x}"),
        ));
    }
    let mut d = Dec::new(body, at + 24, "write-extent slot");
    let n = d.count("runs", 52)?;
    let mut runs = Vec::new();
    for _ in 0..n {
        let id = d.u64("run id")?;
        let ino = d.u64("ino")?;
        let start = d.u64("start")?;
        let end = d.u64("end")?;
        let size = d.u64("size")?;
        let mtime = d.i64("mtime")?;
        let ne = d.count("extents", 16)?;
        let mut blocks = Vec::new();
        for _ in 0..ne {
            let eat = d.at();
            let i = d.u64("extent index")?;
            let b = d.u32("extent block")?;
            let c = d.u32("extent length")?;
            if c == 0
                || i.checked_add(c as u64).is_none()
                || b as u64 + c as u64 > u32::MAX as u64
                || blocks.len() + c as usize > 1 << 20
            {
                return Err(FsError::damage(
                    "write-extent slot (extent)",
                    eat,
                    "a valid extent",
                    format!("{i}/{b}/{c}"),
                ));
            }
            for k in 0..c {
                blocks.push((i + k as u64, b + k));
            }
        }
        let mut run = Run {
            id,
            ino,
            start,
            end,
            size,
            mtime,
            extents: Vec::new(),
        };
        run.add(&blocks);
        runs.push(run);
    }
    d.expect_end()?;
    Ok(Some((seq, runs)))
}

struct Mut {
    st: State,
    sb: Superblock,
    runs: Vec<Run>,
    next_run: u64,
    slot_seq: u64,
    stats: FsStats,
    open: HashMap<u64, u32>,
    sb_notes: Vec<Finding>,
    log_notes: Vec<String>,
    log_damage: Option<Finding>,
}

struct Inner {
    dev: Arc<dyn Device>,
    log: Log<LogMedium>,
    m: Mutex<Mut>,
    opts: FsOptions,
    read_only: bool,
    open_count: AtomicU64,
    stop: AtomicBool,
}

/// A microfs namespace. `Send + Sync`; calls are serialized inside.
pub struct Fs {
    inner: Arc<Inner>,
    bg: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Fs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fs({})", self.inner.dev.label())
    }
}

pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

fn components(path: &str) -> Result<Vec<&str>> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    path.split('/')
        .map(|c| {
            if c.len() > NAME_MAX {
                Err(FsError::NameTooLong {
                    name: c.chars().take(32).collect(),
                    len: c.len(),
                    max: NAME_MAX,
                })
            } else if !valid_name(c) {
                Err(FsError::invalid("path", format!("{path:?}: component {c:?} (paths are normalised: no empty, '.' or '..' parts)")))
            } else {
                Ok(c)
            }
        })
        .collect()
}

fn lock(m: &Mutex<Mut>) -> MutexGuard<'_, Mut> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A directory's names as its directory file says: name -> (inode, kind).
pub(crate) type DirMap = std::collections::BTreeMap<String, (u64, Kind)>;

/// Parse a directory file into its entries; errors name the byte of the file.
pub(crate) fn parse_dir_file(bytes: &[u8]) -> std::result::Result<DirMap, (u64, String, String)> {
    let mut map = std::collections::BTreeMap::new();
    let mut pos = 0usize;
    while pos < bytes.len() {
        if bytes.len() - pos < dirent::HEADER_BYTES {
            return Err((
                pos as u64,
                "a whole entry header".into(),
                format!("{} bytes", bytes.len() - pos),
            ));
        }
        let h = &bytes[pos..pos + dirent::HEADER_BYTES];
        let op = h[0];
        let kind = match h[1] {
            layout::KIND_FILE => Kind::File,
            layout::KIND_DIR => Kind::Dir,
            k => return Err((pos as u64, "kind 1 or 2".into(), k.to_string())),
        };
        let nlen = u16::from_le_bytes([h[2], h[3]]) as usize;
        let crc = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
        let ino = u64::from_le_bytes(h[8..16].try_into().unwrap_or([0; 8]));
        let end = pos + dirent::HEADER_BYTES + nlen;
        if end > bytes.len() {
            return Err((
                pos as u64,
                format!("{nlen} name bytes"),
                format!("{}", bytes.len() - pos - dirent::HEADER_BYTES),
            ));
        }
        let mut copy = bytes[pos..end].to_vec();
        copy[4..8].fill(0);
        let want = crc32c::crc32c(&copy);
        if want != crc {
            return Err((
                pos as u64 + 4,
                format!("crc32c {want:#010x}"),
                format!("{crc:#010x}"),
            ));
        }
        let name = std::str::from_utf8(&bytes[pos + dirent::HEADER_BYTES..end])
            .ok()
            .filter(|n| valid_name(n))
            .ok_or_else(|| {
                (
                    pos as u64,
                    "a valid name".to_string(),
                    "bytes that are not one".to_string(),
                )
            })?;
        match op {
            dirent::ADD => {
                map.insert(name.to_string(), (ino, kind));
            }
            dirent::DEL => {
                if map.remove(name).is_none() {
                    return Err((
                        pos as u64,
                        format!("{name:?} present before its removal"),
                        "absent".into(),
                    ));
                }
            }
            o => return Err((pos as u64, "op 1 (add) or 2 (remove)".into(), o.to_string())),
        }
        pos = end;
    }
    Ok(map)
}

impl Fs {
    /// Make a fresh namespace on `dev` (whatever it held is gone) and open it.
    pub fn format(dev: Arc<dyn Device>, opts: &FsOptions, id: &NamespaceId) -> Result<Fs> {
        let hb = opts.hugeblock;
        if !hb.is_power_of_two() || !(layout::HUGEBLOCK_MIN..=layout::HUGEBLOCK_MAX).contains(&hb) {
            return Err(FsError::invalid(
                "hugeblock",
                format!("{hb}: a power of two from 4096 to 1048576 bytes"),
            ));
        }
        if id.job.len() > layout::JOB_MAX {
            return Err(FsError::invalid(
                "job name",
                format!("{} bytes, at most {}", id.job.len(), layout::JOB_MAX),
            ));
        }
        check_opts(opts)?;
        let log_bytes = opts.log_bytes.max(layout::LOG_BYTES_MIN).div_ceil(4096) * 4096;
        let cap = dev.capacity();
        let slot_bytes = layout::slot_bytes_for(cap, hb);
        let slot0 = LOG_OFFSET + log_bytes;
        let slot1 = slot0 + slot_bytes;
        let data_offset = (slot1 + slot_bytes).div_ceil(hb as u64) * hb as u64;
        let blocks = cap.saturating_sub(data_offset) / hb as u64;
        if blocks < 2 || blocks > u32::MAX as u64 {
            return Err(FsError::NoSpace {
                what: format!(
                    "{} has {cap} bytes; a namespace with a {log_bytes}-byte log and {hb}-byte hugeblocks needs at least {} (and at most 2^32 hugeblocks)",
                    dev.label(),
                    data_offset + 2 * hb as u64
                ),
            });
        }
        // The superblocks go first: until the new one is written, the device holds no namespace.
        dev.write_at(0, &vec![0u8; LOG_OFFSET as usize])?;
        let medium = LogMedium::blank(dev.clone(), LOG_OFFSET, log_bytes as usize);
        let log = Log::create(medium, 0, log_bytes as usize, Duration::from_millis(10))?;
        let sb = Superblock {
            sequence: 1,
            hugeblock: hb,
            job: id.job.clone(),
            rank: id.rank,
            epoch: opts.provenance.epoch,
            capacity: cap,
            log_offset: LOG_OFFSET,
            log_bytes,
            slot_offsets: [slot0, slot1],
            slot_bytes,
            data_offset,
            blocks,
            active_slot: NO_SLOT,
            checkpoint_seq: 0,
            checkpoint_lsn: 0,
            checkpoint_len: 0,
            checkpoint_crc: 0,
            clean: 0,
        };
        // The magic last, in one 8-byte write: a format cut short leaves a copy without it,
        // which reads as no namespace (not as damage).
        let bytes = sb.encode();
        dev.write_at(SUPERBLOCK_OFFSETS[1] + 8, &bytes[8..])?;
        dev.write_at(SUPERBLOCK_OFFSETS[1], &bytes[..8])?;
        let st = State::new(blocks, hb, now_ns());
        Ok(Self::assemble(
            dev,
            log,
            st,
            sb,
            opts,
            false,
            1,
            1,
            Vec::new(),
            Vec::new(),
            None,
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        dev: Arc<dyn Device>,
        log: Log<LogMedium>,
        st: State,
        sb: Superblock,
        opts: &FsOptions,
        read_only: bool,
        next_run: u64,
        slot_seq: u64,
        sb_notes: Vec<Finding>,
        log_notes: Vec<String>,
        log_damage: Option<Finding>,
    ) -> Fs {
        let stats = FsStats {
            hugeblock: sb.hugeblock,
            ..FsStats::default()
        };
        let inner = Arc::new(Inner {
            dev,
            log,
            m: Mutex::new(Mut {
                st,
                sb,
                runs: Vec::new(),
                next_run,
                slot_seq,
                stats,
                open: HashMap::new(),
                sb_notes,
                log_notes,
                log_damage,
            }),
            opts: opts.clone(),
            read_only,
            open_count: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let bg = if opts.background_checkpoint && !read_only {
            let i = inner.clone();
            std::thread::Builder::new()
                .name("microfs-checkpoint".into())
                .spawn(move || background(i))
                .ok()
        } else {
            None
        };
        Fs { inner, bg }
    }

    /// Open the namespace on `dev` and recover it: the newest valid checkpoint, then the log
    /// after it, then the open write runs of the write-extent slot.
    pub fn open(dev: Arc<dyn Device>, opts: &FsOptions) -> Result<(Fs, Recovery)> {
        Self::open_inner(dev, opts, false)
    }

    /// Open without writing anything to the device: recovery happens in DRAM only, and every
    /// changing call fails with [`FsError::ReadOnly`]. For inspection (`kavach cr`).
    pub fn open_read_only(dev: Arc<dyn Device>, opts: &FsOptions) -> Result<(Fs, Recovery)> {
        let opts = FsOptions {
            background_checkpoint: false,
            ..opts.clone()
        };
        Self::open_inner(dev, &opts, true)
    }

    fn open_inner(
        dev: Arc<dyn Device>,
        opts: &FsOptions,
        read_only: bool,
    ) -> Result<(Fs, Recovery)> {
        check_opts(opts)?;
        let mut rec = Recovery::default();
        let cap = dev.capacity();
        if cap < LOG_OFFSET + layout::LOG_BYTES_MIN {
            return Err(FsError::invalid(
                "device",
                format!(
                    "{}: {cap} bytes is too small to hold a namespace",
                    dev.label()
                ),
            ));
        }
        let (sb, copy, sb_notes) = read_superblock(dev.as_ref())?;
        sb.validate(cap)?;
        rec.superblock_copy = copy;
        rec.superblock_sequence = sb.sequence;
        rec.clean = sb.clean == 1;
        rec.notes.extend(sb_notes.iter().map(|f| {
            format!(
                "superblock copy passed over: {} at {}: expected {}, found {}",
                f.what, f.at, f.expected, f.found
            )
        }));
        // After an unclean end, a bad copy is the one a crash tore while it was written; after
        // a clean close both copies were whole, so a bad one is damage. A writable open
        // rewrites it (the next sequence goes to that copy).
        let sb_notes = if sb.clean == 1 && read_only {
            sb_notes
        } else {
            Vec::new()
        };
        let mut st = if sb.active_slot == NO_SLOT {
            State::new(sb.blocks, sb.hugeblock, 0)
        } else {
            rec.checkpoint_slot = Some(sb.active_slot);
            rec.checkpoint_seq = sb.checkpoint_seq;
            rec.checkpoint_lsn = sb.checkpoint_lsn;
            load_checkpoint(dev.as_ref(), &sb)?
        };
        let medium = LogMedium::load(
            dev.clone(),
            sb.log_offset,
            sb.log_bytes as usize,
            !read_only,
        )?;
        let lopts = LogOptions {
            read_only,
            clean_shutdown: sb.clean == 1,
            truncate_damaged: false,
            full_wait: Duration::from_millis(10),
        };
        let (log, lrec) = Log::open(medium, 0, sb.log_bytes as usize, &lopts)?;
        let mut log_notes = Vec::new();
        let mut log_damage = None;
        if let Some(c) = &lrec.dropped {
            let s = format!(
                "log record at byte {} of the log area ({}): expected {}, found {}",
                c.offset, c.field, c.expected, c.found
            );
            rec.torn_tail = Some(s.clone());
            log_notes.push(format!("the log ends at a record a crash tore: {s}"));
        }
        if let Some(c) = &lrec.damaged {
            log_damage = Some(Finding {
                what: format!("log record ({})", c.field),
                at: sb.log_offset + c.offset,
                expected: c.expected.clone(),
                found: c.found.clone(),
            });
        }
        st.replaying = true;
        for r in log.records() {
            let r = r?;
            if r.lsn <= sb.checkpoint_lsn {
                rec.records_skipped += 1;
                continue;
            }
            let at = sb.log_offset + r.offset;
            let (prov, op) = Op::decode(&r.payload, at)?;
            st.apply(&op).map_err(|e| match e {
                FsError::Damage {
                    what,
                    expected,
                    found,
                    ..
                } => FsError::Damage {
                    what: format!("log record {} ({what})", r.lsn),
                    at,
                    expected,
                    found,
                },
                e => e,
            })?;
            if !rec.writers.contains(&prov) {
                rec.writers.push(prov);
            }
            rec.records_replayed += 1;
        }
        // The open write runs: those not folded into the log yet, in order.
        let (slot_seq, runs, slot_notes) = read_extent_slot(dev.as_ref())?;
        rec.notes.extend(slot_notes);
        let mut max_run = st.folded_run;
        let mut pending = Vec::new();
        for r in runs {
            max_run = max_run.max(r.id);
            if r.id > st.folded_run {
                pending.push(r);
            }
        }
        pending.sort_by_key(|r| r.id);
        for r in &pending {
            st.apply(&r.op()).map_err(|e| match e {
                FsError::Damage {
                    what,
                    expected,
                    found,
                    ..
                } => FsError::Damage {
                    what: format!("write run {} ({what})", r.id),
                    at: EXTENT_SLOT_OFFSETS[(slot_seq % 2) as usize],
                    expected,
                    found,
                },
                e => e,
            })?;
            rec.runs_applied += 1;
        }
        st.replaying = false;
        st.rebuild_free();
        let mut sb = sb;
        let fs = Self::assemble(
            dev,
            log,
            st,
            sb.clone(),
            opts,
            read_only,
            max_run + 1,
            slot_seq + 1,
            sb_notes,
            log_notes,
            log_damage,
        );
        if !read_only {
            let inner = &fs.inner;
            let mut m = lock(&inner.m);
            // Fold the runs just applied, so that the log alone says what they did.
            for r in &pending {
                inner.log_op(&mut m, &r.op())?;
                m.stats.runs_folded += 1;
            }
            sb.sequence += 1;
            sb.clean = 0;
            sb.epoch = sb.epoch.max(opts.provenance.epoch);
            inner.write_sb(&mut m, sb)?;
        }
        Ok((fs, rec))
    }

    /// The inode at `path` ("" is the root).
    pub fn lookup(&self, path: &str) -> Result<Ino> {
        let m = lock(&self.inner.m);
        lookup(&m.st, path)
    }

    /// Attributes of an inode.
    pub fn stat(&self, ino: Ino) -> Result<Stat> {
        let m = lock(&self.inner.m);
        let i = inode(&m.st, ino)?;
        let subdirs = i
            .entries
            .values()
            .filter(|c| m.st.get(**c).is_some_and(|c| c.kind == Kind::Dir))
            .count() as u32;
        Ok(Stat {
            ino,
            kind: i.kind,
            size: i.size,
            mode: i.mode,
            nlink: if i.kind == Kind::Dir { 2 + subdirs } else { 1 },
            mtime_ns: i.mtime,
            atime_ns: i.atime,
            ctime_ns: i.ctime,
            blocks: i.blocks.len() as u64 * m.st.hugeblock as u64 / 512,
        })
    }

    /// Create (or open) a file. `excl`: fail if the name exists; `truncate`: cut an existing
    /// file to 0 bytes.
    pub fn create(&self, path: &str, mode: u32, excl: bool, truncate: bool) -> Result<Ino> {
        self.make(path, mode, Kind::File, excl, truncate)
    }

    /// Make a directory.
    pub fn mkdir(&self, path: &str, mode: u32) -> Result<Ino> {
        self.make(path, mode, Kind::Dir, true, false)
    }

    fn make(&self, path: &str, mode: u32, kind: Kind, excl: bool, truncate: bool) -> Result<Ino> {
        let inner = &*self.inner;
        let mut m = inner.writable()?;
        let (parent, name) = parent_of(&m.st, path)?;
        if let Some(&existing) = m.st.get(parent).and_then(|p| p.entries.get(name)) {
            let ek = m.st.get(existing).map(|i| i.kind);
            if excl || kind == Kind::Dir {
                return Err(FsError::Exists { path: path.into() });
            }
            if ek == Some(Kind::Dir) {
                return Err(FsError::IsDir { path: path.into() });
            }
            if truncate && m.st.get(existing).is_some_and(|i| i.size > 0) {
                inner.fold_all(&mut m)?;
                let op = Op::Truncate {
                    ino: existing,
                    len: 0,
                    time: now_ns(),
                };
                inner.commit(&mut m, op)?;
            }
            return Ok(existing);
        }
        inner.fold_all(&mut m)?;
        let ino = m.st.next_ino;
        let time = now_ns();
        let dir = inner.append_dir(
            &mut m,
            parent,
            &layout::dirent_bytes(dirent::ADD, kind, name, ino),
        )?;
        let op = Op::Create {
            parent,
            ino,
            kind,
            mode: mode & 0o7777,
            time,
            name: name.to_string(),
            dir,
        };
        inner.commit(&mut m, op)?;
        Ok(ino)
    }

    /// Remove an empty directory.
    pub fn rmdir(&self, path: &str) -> Result<()> {
        self.remove(path, Kind::Dir)
    }

    /// Remove a file (its hugeblocks go back to the pool at once).
    pub fn unlink(&self, path: &str) -> Result<()> {
        self.remove(path, Kind::File)
    }

    fn remove(&self, path: &str, want: Kind) -> Result<()> {
        let inner = &*self.inner;
        let mut m = inner.writable()?;
        if path.is_empty() {
            return Err(FsError::Busy {
                what: "the root directory cannot be removed".into(),
            });
        }
        let (parent, name) = parent_of(&m.st, path)?;
        let ino = *m
            .st
            .get(parent)
            .and_then(|p| p.entries.get(name))
            .ok_or_else(|| FsError::NotFound { path: path.into() })?;
        let i = inode(&m.st, ino)?;
        match (want, i.kind) {
            (Kind::File, Kind::Dir) => return Err(FsError::IsDir { path: path.into() }),
            (Kind::Dir, Kind::File) => return Err(FsError::NotDir { path: path.into() }),
            (Kind::Dir, Kind::Dir) if !i.entries.is_empty() => {
                return Err(FsError::NotEmpty { path: path.into() });
            }
            _ => {}
        }
        let kind = i.kind;
        inner.fold_all(&mut m)?;
        let dir = inner.append_dir(
            &mut m,
            parent,
            &layout::dirent_bytes(dirent::DEL, kind, name, ino),
        )?;
        let op = Op::Remove {
            parent,
            name: name.to_string(),
            ino,
            time: now_ns(),
            dir,
        };
        // An open count of the removed file stays until `closed`: the runtime closes it later.
        inner.commit(&mut m, op)?;
        Ok(())
    }

    /// Rename with POSIX semantics: an existing target is replaced atomically (a file by a
    /// file, an empty directory by a directory).
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        let inner = &*self.inner;
        let mut m = inner.writable()?;
        if from.is_empty() || to.is_empty() {
            return Err(FsError::Busy {
                what: "the root directory cannot be renamed".into(),
            });
        }
        let (fp, fname) = parent_of(&m.st, from)?;
        let src = *m
            .st
            .get(fp)
            .and_then(|p| p.entries.get(fname))
            .ok_or_else(|| FsError::NotFound { path: from.into() })?;
        let (tp, tname) = parent_of(&m.st, to)?;
        let skind = inode(&m.st, src)?.kind;
        let old = m.st.get(tp).and_then(|p| p.entries.get(tname)).copied();
        if old == Some(src) {
            return Ok(());
        }
        if let Some(o) = old {
            let oi = inode(&m.st, o)?;
            match (skind, oi.kind) {
                (Kind::File, Kind::Dir) => return Err(FsError::IsDir { path: to.into() }),
                (Kind::Dir, Kind::File) => return Err(FsError::NotDir { path: to.into() }),
                (Kind::Dir, Kind::Dir) if !oi.entries.is_empty() => {
                    return Err(FsError::NotEmpty { path: to.into() });
                }
                _ => {}
            }
        }
        if skind == Kind::Dir {
            // Not into itself or below.
            let mut d = tp;
            for _ in 0..=m.st.inodes.len() {
                if d == src {
                    return Err(FsError::invalid(
                        "rename",
                        format!("{from:?} into its own subtree {to:?}"),
                    ));
                }
                if d == ROOT_INO {
                    break;
                }
                d = m.st.get(d).map(|i| i.parent).unwrap_or(ROOT_INO);
            }
        }
        inner.fold_all(&mut m)?;
        let okind = old.and_then(|o| m.st.get(o).map(|i| i.kind));
        let mut to_bytes = Vec::new();
        if let (Some(o), Some(k)) = (old, okind) {
            to_bytes.extend(layout::dirent_bytes(dirent::DEL, k, tname, o));
        }
        to_bytes.extend(layout::dirent_bytes(dirent::ADD, skind, tname, src));
        let from_bytes = layout::dirent_bytes(dirent::DEL, skind, fname, src);
        let dirs = if fp == tp {
            let mut b = from_bytes;
            b.extend(to_bytes);
            vec![inner.append_dir(&mut m, fp, &b)?]
        } else {
            let a = inner.append_dir(&mut m, fp, &from_bytes)?;
            match inner.append_dir(&mut m, tp, &to_bytes) {
                Ok(b) => vec![a, b],
                Err(e) => {
                    unpop(&mut m.st, &a.blocks);
                    return Err(e);
                }
            }
        };
        let op = Op::Rename {
            from_parent: fp,
            from_name: fname.to_string(),
            to_parent: tp,
            to_name: tname.to_string(),
            time: now_ns(),
            dirs,
        };
        inner.commit(&mut m, op)?;
        Ok(())
    }

    /// Read up to `buf.len()` bytes at `off`; holes read as zeros. Returns bytes read (0 at
    /// or past the end).
    pub fn read_at(&self, ino: Ino, off: u64, buf: &mut [u8]) -> Result<usize> {
        let inner = &*self.inner;
        let mut m = lock(&inner.m);
        let i = inode(&m.st, ino)?;
        if i.kind == Kind::Dir {
            return Err(FsError::IsDir {
                path: format!("inode {ino}"),
            });
        }
        if off >= i.size || buf.is_empty() {
            return Ok(0);
        }
        let n = ((i.size - off).min(buf.len() as u64)) as usize;
        inner.read_blocks(&m.sb, i, off, &mut buf[..n])?;
        m.stats.bytes_read += n as u64;
        Ok(n)
    }

    /// Write `data` at `off` (growing the file; a gap reads as zeros). Data and metadata are
    /// durable when this returns.
    pub fn write_at(&self, ino: Ino, off: u64, data: &[u8]) -> Result<usize> {
        let inner = &*self.inner;
        let mut m = inner.writable()?;
        let i = inode(&m.st, ino)?;
        if i.kind == Kind::Dir {
            return Err(FsError::IsDir {
                path: format!("inode {ino}"),
            });
        }
        if data.is_empty() {
            return Ok(0);
        }
        let end = off
            .checked_add(data.len() as u64)
            .filter(|e| e / m.st.hugeblock as u64 <= u32::MAX as u64 * 16)
            .ok_or_else(|| {
                FsError::invalid(
                    "write",
                    format!(
                        "offset {off} + {} bytes is past the largest file",
                        data.len()
                    ),
                )
            })?;
        let size = i.size.max(end);
        if off > i.size {
            inner.clear_tail(&m, ino, off)?;
        }
        let new = inner.place(&mut m, ino, off, data, true)?;
        let mtime = now_ns();
        let res = if inner.opts.coalesce {
            inner.coalesce(&mut m, ino, off, end, size, mtime, &new)
        } else {
            let id = m.next_run;
            let op = Op::Write {
                run: id,
                start: off,
                end,
                mtime,
                grow: Grow {
                    ino,
                    size,
                    blocks: new.clone(),
                },
            };
            inner.log_op(&mut m, &op).map(|()| {
                m.next_run += 1;
                m.st.folded_run = id;
                m.stats.runs_folded += 1;
            })
        };
        if let Err(e) = res {
            unpop(&mut m.st, &new);
            return Err(e);
        }
        let grow = Grow {
            ino,
            size,
            blocks: new,
        };
        m.st.apply_write(&grow, mtime);
        m.stats.writes += 1;
        m.stats.bytes_written += data.len() as u64;
        inner.after_op(&mut m);
        Ok(data.len())
    }

    /// Set a file's length (shrinking frees its hugeblocks past the end).
    pub fn truncate(&self, ino: Ino, len: u64) -> Result<()> {
        let inner = &*self.inner;
        let mut m = inner.writable()?;
        let i = inode(&m.st, ino)?;
        if i.kind == Kind::Dir {
            return Err(FsError::IsDir {
                path: format!("inode {ino}"),
            });
        }
        if len / m.st.hugeblock as u64 > u32::MAX as u64 * 16 {
            return Err(FsError::invalid(
                "length",
                format!("{len} is past the largest file"),
            ));
        }
        // Shrinking leaves the bytes past the new end in its last block as they are: whatever
        // extends the file again clears them first (`clear_tail`), so a crash between the
        // clearing and the record cannot show a shorter file's bytes as zeros.
        if len > i.size {
            inner.clear_tail(&m, ino, len)?;
        }
        inner.fold_all(&mut m)?;
        inner.commit(
            &mut m,
            Op::Truncate {
                ino,
                len,
                time: now_ns(),
            },
        )
    }

    /// Everything is durable when each call returns: this only checks the inode.
    pub fn fsync(&self, ino: Ino) -> Result<()> {
        let m = lock(&self.inner.m);
        inode(&m.st, ino).map(|_| ())
    }

    /// A directory's entries, by name.
    pub fn readdir(&self, ino: Ino) -> Result<Vec<DirEntry>> {
        let m = lock(&self.inner.m);
        let i = inode(&m.st, ino)?;
        if i.kind != Kind::Dir {
            return Err(FsError::NotDir {
                path: format!("inode {ino}"),
            });
        }
        Ok(i.entries
            .iter()
            .map(|(n, &c)| DirEntry {
                name: n.clone(),
                ino: c,
                kind: m.st.get(c).map(|i| i.kind).unwrap_or(Kind::File),
            })
            .collect())
    }

    /// Set the permission bits.
    pub fn set_mode(&self, ino: Ino, mode: u32) -> Result<()> {
        self.setattr(ino, Some(mode & 0o7777), None, None)
    }

    /// Set access and modification times (ns since the epoch).
    pub fn set_times(&self, ino: Ino, atime_ns: Option<i64>, mtime_ns: Option<i64>) -> Result<()> {
        self.setattr(ino, None, atime_ns, mtime_ns)
    }

    fn setattr(
        &self,
        ino: Ino,
        mode: Option<u32>,
        atime: Option<i64>,
        mtime: Option<i64>,
    ) -> Result<()> {
        let inner = &*self.inner;
        let mut m = inner.writable()?;
        inode(&m.st, ino)?;
        inner.fold_all(&mut m)?;
        inner.commit(
            &mut m,
            Op::SetAttr {
                ino,
                mode,
                atime,
                mtime,
                time: now_ns(),
            },
        )
    }

    /// A file was opened (the count drives the background checkpoint).
    pub fn opened(&self, ino: Ino) {
        let mut m = lock(&self.inner.m);
        *m.open.entry(ino).or_insert(0) += 1;
        self.inner.open_count.fetch_add(1, Ordering::AcqRel);
    }

    /// A file was closed.
    pub fn closed(&self, ino: Ino) {
        let mut m = lock(&self.inner.m);
        if let Some(n) = m.open.get_mut(&ino) {
            *n -= 1;
            if *n == 0 {
                m.open.remove(&ino);
            }
            self.inner.open_count.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Take a metadata checkpoint now.
    pub fn checkpoint(&self) -> Result<()> {
        let mut m = self.inner.writable()?;
        self.inner.checkpoint(&mut m)
    }

    /// Checkpoint, mark the namespace cleanly closed, and stop.
    pub fn close(mut self) -> Result<()> {
        self.stop_background();
        if self.inner.read_only {
            return Ok(());
        }
        let inner = &*self.inner;
        let mut m = lock(&inner.m);
        inner.checkpoint(&mut m)?;
        let mut sb = m.sb.clone();
        sb.sequence += 1;
        sb.clean = 1;
        inner.write_sb(&mut m, sb)
    }

    /// Counters.
    pub fn stats(&self) -> FsStats {
        let m = lock(&self.inner.m);
        let l = self.inner.log.stats();
        let mut s = m.stats.clone();
        s.log_used_bytes = l.used_bytes;
        s.log_ring_bytes = l.ring_bytes;
        s.blocks_total = m.st.blocks();
        s.blocks_free = m.st.free.len() as u64;
        s.dirs = m.st.inodes.values().filter(|i| i.kind == Kind::Dir).count() as u64;
        s.files = m.st.inodes.len() as u64 - s.dirs;
        s.open_files = self.inner.open_count.load(Ordering::Acquire);
        s
    }

    /// The namespace's identity and geometry (its superblock in force).
    pub fn superblock(&self) -> Superblock {
        lock(&self.inner.m).sb.clone()
    }

    /// Verify the namespace: superblock copies, the log, every directory file against the
    /// index, block ownership and the free pool. Reads only.
    pub fn check(&self) -> Result<CheckReport> {
        let inner = &*self.inner;
        let m = lock(&inner.m);
        let mut r = CheckReport::default();
        r.findings.extend(m.sb_notes.iter().cloned());
        r.notes.extend(m.log_notes.iter().cloned());
        if let Some(f) = &m.log_damage {
            r.findings.push(f.clone());
        }
        let hb = m.st.hugeblock as u64;
        let mut owned = vec![0u64; m.st.owner.len()];
        let mut inos: Vec<&u64> = m.st.inodes.keys().collect();
        inos.sort_unstable();
        for &ino in inos {
            let i = &m.st.inodes[&ino];
            match i.kind {
                Kind::File => {
                    r.files += 1;
                    r.bytes += i.size;
                }
                Kind::Dir => r.dirs += 1,
            }
            for (&idx, &blk) in &i.blocks {
                let Some(o) = owned.get_mut(blk as usize) else {
                    r.findings.push(Finding {
                        what: format!("inode {ino} block {idx}"),
                        at: 0,
                        expected: format!("a hugeblock below {}", m.st.blocks()),
                        found: blk.to_string(),
                    });
                    continue;
                };
                if *o != 0 {
                    r.findings.push(Finding {
                        what: format!("hugeblock {blk}"),
                        at: m.sb.data_offset + blk as u64 * hb,
                        expected: "one owner".into(),
                        found: format!("inodes {} and {ino}", *o),
                    });
                }
                *o = ino;
                if idx.saturating_mul(hb) >= i.size.max(1) {
                    r.findings.push(Finding {
                        what: format!("inode {ino} block {idx}"),
                        at: 0,
                        expected: format!("blocks only below the size {}", i.size),
                        found: format!("hugeblock {blk} at index {idx}"),
                    });
                }
            }
            if i.kind == Kind::Dir {
                if i.size > i.blocks.len() as u64 * hb {
                    r.findings.push(Finding {
                        what: format!("directory file of inode {ino}"),
                        at: 0,
                        expected: format!(
                            "at most {} bytes in its hugeblocks",
                            i.blocks.len() as u64 * hb
                        ),
                        found: i.size.to_string(),
                    });
                    continue;
                }
                let mut bytes = vec![0u8; i.size as usize];
                if let Err(e) = inner.read_blocks(&m.sb, i, 0, &mut bytes) {
                    r.findings.push(Finding {
                        what: format!("directory file of inode {ino}"),
                        at: 0,
                        expected: "readable".into(),
                        found: e.to_string(),
                    });
                    continue;
                }
                for (idx, _) in (0..i.size.div_ceil(hb)).map(|x| (x, ())) {
                    if !i.blocks.contains_key(&idx) {
                        r.findings.push(Finding {
                            what: format!("directory file of inode {ino}"),
                            at: 0,
                            expected: format!("block {idx} mapped"),
                            found: "a hole".into(),
                        });
                    }
                }
                match parse_dir_file(&bytes) {
                    Err((pos, exp, found)) => {
                        let at = i
                            .blocks
                            .get(&(pos / hb))
                            .map(|&b| m.sb.data_offset + b as u64 * hb + pos % hb)
                            .unwrap_or(0);
                        r.findings.push(Finding {
                            what: format!("directory file of inode {ino}, entry at byte {pos}"),
                            at,
                            expected: exp,
                            found,
                        });
                    }
                    Ok(map) => {
                        let want: std::collections::BTreeMap<String, (u64, Kind)> = i
                            .entries
                            .iter()
                            .map(|(n, &c)| {
                                (
                                    n.clone(),
                                    (c, m.st.get(c).map(|x| x.kind).unwrap_or(Kind::File)),
                                )
                            })
                            .collect();
                        if map != want {
                            let missing: Vec<&String> =
                                want.keys().filter(|k| !map.contains_key(*k)).collect();
                            let extra: Vec<&String> =
                                map.keys().filter(|k| !want.contains_key(*k)).collect();
                            r.findings.push(Finding {
                                what: format!("directory file of inode {ino}"),
                                at: i.blocks.get(&0).map(|&b| m.sb.data_offset + b as u64 * hb).unwrap_or(0),
                                expected: format!("the index's {} entries", want.len()),
                                found: format!("{} entries; missing {missing:?}, extra {extra:?}, others differ in inode or kind", map.len()),
                            });
                        }
                    }
                }
            }
        }
        for (b, (&o, &own)) in owned.iter().zip(m.st.owner.iter()).enumerate() {
            if o != own {
                r.findings.push(Finding {
                    what: format!("hugeblock {b} ownership"),
                    at: 0,
                    expected: format!("owner {o} (from the inodes)"),
                    found: format!("owner {own}"),
                });
            }
        }
        let mut in_ring = vec![false; owned.len()];
        for &b in &m.st.free {
            match in_ring.get_mut(b as usize) {
                Some(x) if !*x && owned[b as usize] == 0 => *x = true,
                _ => r.findings.push(Finding {
                    what: format!("free pool entry {b}"),
                    at: 0,
                    expected: "a free hugeblock, once".into(),
                    found: "used, repeated or out of range".into(),
                }),
            }
        }
        let free = owned.iter().filter(|&&o| o == 0).count() as u64;
        if free != m.st.free.len() as u64 {
            r.findings.push(Finding {
                what: "free pool".into(),
                at: 0,
                expected: format!("{free} free hugeblocks"),
                found: m.st.free.len().to_string(),
            });
        }
        r.blocks_free = free;
        r.blocks_used = owned.len() as u64 - free;
        Ok(r)
    }

    fn stop_background(&mut self) {
        self.inner.stop.store(true, Ordering::Release);
        if let Some(h) = self.bg.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

impl Drop for Fs {
    fn drop(&mut self) {
        self.stop_background();
    }
}

fn background(inner: Arc<Inner>) {
    while !inner.stop.load(Ordering::Acquire) {
        std::thread::park_timeout(Duration::from_millis(20));
        if inner.stop.load(Ordering::Acquire) {
            break;
        }
        if inner.open_count.load(Ordering::Acquire) != 0 {
            continue;
        }
        let mut m = lock(&inner.m);
        if inner.fill() >= inner.opts.checkpoint_log_fill
            && inner.open_count.load(Ordering::Acquire) == 0
            && let Err(e) = inner.checkpoint(&mut m)
        {
            m.stats.last_error = Some(e.to_string());
        }
    }
}

fn check_opts(opts: &FsOptions) -> Result<()> {
    if !(1..=16).contains(&opts.window) {
        return Err(FsError::invalid(
            "window",
            format!("{}: 1..=16 open write runs", opts.window),
        ));
    }
    if !(opts.checkpoint_log_fill > 0.0 && opts.checkpoint_log_fill <= 1.0) {
        return Err(FsError::invalid(
            "checkpoint_log_fill",
            format!("{}: a fraction in (0, 1]", opts.checkpoint_log_fill),
        ));
    }
    Ok(())
}

fn inode(st: &State, ino: Ino) -> Result<&Inode> {
    st.get(ino).ok_or_else(|| FsError::NotFound {
        path: format!("inode {ino}"),
    })
}

fn lookup(st: &State, path: &str) -> Result<Ino> {
    let mut cur = ROOT_INO;
    for c in components(path)? {
        let i = inode(st, cur)?;
        if i.kind != Kind::Dir {
            return Err(FsError::NotDir { path: path.into() });
        }
        cur = *i
            .entries
            .get(c)
            .ok_or_else(|| FsError::NotFound { path: path.into() })?;
    }
    Ok(cur)
}

/// The directory that holds `path`'s last component, and that component.
fn parent_of<'p>(st: &State, path: &'p str) -> Result<(Ino, &'p str)> {
    let comps = components(path)?;
    let Some((&last, dirs)) = comps.split_last() else {
        return Err(FsError::invalid("path", "the root has no parent"));
    };
    let mut cur = ROOT_INO;
    for c in dirs {
        cur = *inode(st, cur)?
            .entries
            .get(*c)
            .ok_or_else(|| FsError::NotFound { path: path.into() })?;
    }
    if inode(st, cur)?.kind != Kind::Dir {
        return Err(FsError::NotDir { path: path.into() });
    }
    Ok((cur, last))
}

/// Give popped blocks back to the front of the pool (a failed call).
fn unpop(st: &mut State, blocks: &[(u64, u32)]) {
    for &(_, b) in blocks.iter().rev() {
        st.free.push_front(b);
    }
}

impl Inner {
    fn writable(&self) -> Result<MutexGuard<'_, Mut>> {
        if self.read_only {
            return Err(FsError::ReadOnly);
        }
        Ok(lock(&self.m))
    }

    fn fill(&self) -> f64 {
        let s = self.log.stats();
        s.used_bytes as f64 / s.ring_bytes.max(1) as f64
    }

    fn write_sb(&self, m: &mut Mut, sb: Superblock) -> Result<()> {
        let copy = (sb.sequence % 2) as usize;
        self.dev.write_at(SUPERBLOCK_OFFSETS[copy], &sb.encode())?;
        m.sb = sb;
        Ok(())
    }

    fn log_op(&self, m: &mut Mut, op: &Op) -> Result<()> {
        let payload = op.encode(self.opts.provenance);
        self.log.append(&payload, ForcePolicy::Sync)?;
        m.stats.records_written += 1;
        Ok(())
    }

    /// Log `op` (durable on return), apply it, maybe checkpoint.
    fn commit(&self, m: &mut Mut, op: Op) -> Result<()> {
        if let Err(e) = self.log_op(m, &op) {
            let popped: Vec<(u64, u32)> = match &op {
                Op::Create { dir, .. } | Op::Remove { dir, .. } => dir.blocks.clone(),
                Op::Rename { dirs, .. } => dirs.iter().flat_map(|d| d.blocks.clone()).collect(),
                _ => Vec::new(),
            };
            unpop(&mut m.st, &popped);
            return Err(e);
        }
        m.st.apply(&op)?;
        self.after_op(m);
        Ok(())
    }

    fn after_op(&self, m: &mut Mut) {
        let fill = self.fill();
        let idle = self.open_count.load(Ordering::Acquire) == 0;
        let due = fill >= 0.85
            || (!self.opts.background_checkpoint && idle && fill >= self.opts.checkpoint_log_fill);
        if due && let Err(e) = self.checkpoint(m) {
            m.stats.last_error = Some(e.to_string());
        }
    }

    /// Pop hugeblocks for the unmapped indices of `[off, off + data.len())` of `ino` and write
    /// the data (a new block whole: zeros around the data, so holes read as zeros).
    fn place(
        &self,
        m: &mut Mut,
        ino: u64,
        off: u64,
        data: &[u8],
        zero_new: bool,
    ) -> Result<Vec<(u64, u32)>> {
        let hb = m.st.hugeblock as u64;
        let end = off + data.len() as u64;
        let (first, last) = (off / hb, (end - 1) / hb);
        let mut new = Vec::new();
        let mut targets = Vec::new();
        for idx in first..=last {
            let mapped = m.st.get(ino).and_then(|i| i.blocks.get(&idx).copied());
            let blk = match mapped {
                Some(b) => b,
                None => match m.st.free.pop_front() {
                    Some(b) => {
                        new.push((idx, b));
                        b
                    }
                    None => {
                        unpop(&mut m.st, &new);
                        return Err(FsError::NoSpace {
                            what: format!(
                                "no free hugeblock on {} ({} in all)",
                                self.dev.label(),
                                m.st.blocks()
                            ),
                        });
                    }
                },
            };
            targets.push((idx, blk, mapped.is_none()));
        }
        let res = (|| -> Result<()> {
            // Runs of consecutive hugeblocks the data covers whole go in one device write.
            let mut run: Option<(u64, usize, usize)> = None; // (device offset, data start, len)
            let flush = |run: &mut Option<(u64, usize, usize)>| -> Result<()> {
                if let Some((at, s, n)) = run.take() {
                    self.dev.write_at(at, &data[s..s + n])?;
                }
                Ok(())
            };
            for &(idx, blk, fresh) in &targets {
                let bstart = idx * hb;
                let s = off.max(bstart);
                let e = end.min(bstart + hb);
                let dev_at = m.sb.data_offset + blk as u64 * hb;
                let ds = (s - off) as usize;
                let n = (e - s) as usize;
                let whole = s == bstart && e == bstart + hb;
                if whole {
                    match &mut run {
                        Some((at, rs, rn)) if *at + *rn as u64 == dev_at && *rs + *rn == ds => {
                            *rn += n
                        }
                        _ => {
                            flush(&mut run)?;
                            run = Some((dev_at, ds, n));
                        }
                    }
                    continue;
                }
                flush(&mut run)?;
                if fresh && zero_new {
                    let mut b = vec![0u8; hb as usize];
                    b[(s - bstart) as usize..(e - bstart) as usize]
                        .copy_from_slice(&data[ds..ds + n]);
                    self.dev.write_at(dev_at, &b)?;
                } else {
                    self.dev
                        .write_at(dev_at + (s - bstart), &data[ds..ds + n])?;
                }
            }
            flush(&mut run)
        })();
        if let Err(e) = res {
            unpop(&mut m.st, &new);
            return Err(e);
        }
        Ok(new)
    }

    /// Before a file grows from its size to `to`: zero the bytes past the size in the block
    /// that holds the end (a truncate left them as they were).
    fn clear_tail(&self, m: &Mut, ino: u64, to: u64) -> Result<()> {
        let hb = m.st.hugeblock as u64;
        let Some(i) = m.st.get(ino) else {
            return Ok(());
        };
        if i.size % hb == 0 {
            return Ok(());
        }
        let idx = i.size / hb;
        if let Some(&blk) = i.blocks.get(&idx) {
            let upto = ((idx + 1) * hb).min(to);
            if upto > i.size {
                let zeros = vec![0u8; (upto - i.size) as usize];
                self.dev
                    .write_at(m.sb.data_offset + blk as u64 * hb + i.size % hb, &zeros)?;
            }
        }
        Ok(())
    }

    /// Append bytes to a directory file; the grow goes into the caller's record.
    fn append_dir(&self, m: &mut Mut, dir: u64, bytes: &[u8]) -> Result<Grow> {
        let off = inode(&m.st, dir)?.size;
        let new = self.place(m, dir, off, bytes, false)?;
        Ok(Grow {
            ino: dir,
            size: off + bytes.len() as u64,
            blocks: new,
        })
    }

    fn read_blocks(&self, sb: &Superblock, i: &Inode, off: u64, buf: &mut [u8]) -> Result<()> {
        let hb = sb.hugeblock as u64;
        let mut pos = 0usize;
        while pos < buf.len() {
            let at = off + pos as u64;
            let idx = at / hb;
            let within = at % hb;
            let n = ((hb - within) as usize).min(buf.len() - pos);
            // Consecutive hugeblocks are read in one device call.
            let mut len = n;
            match i.blocks.get(&idx) {
                Some(&b) => {
                    let mut next = idx + 1;
                    let mut nb = b;
                    while pos + len < buf.len() && i.blocks.get(&next) == Some(&(nb + 1)) {
                        len += (hb as usize).min(buf.len() - pos - len);
                        next += 1;
                        nb += 1;
                    }
                    self.dev.read_at(
                        sb.data_offset + b as u64 * hb + within,
                        &mut buf[pos..pos + len],
                    )?;
                }
                None => buf[pos..pos + n].fill(0),
            }
            pos += len;
        }
        Ok(())
    }

    /// Coalescing: add a write to an open run (or open one) and rewrite the write-extent slot.
    #[allow(clippy::too_many_arguments)]
    fn coalesce(
        &self,
        m: &mut Mut,
        ino: u64,
        off: u64,
        end: u64,
        size: u64,
        mtime: i64,
        new: &[(u64, u32)],
    ) -> Result<()> {
        let mut runs = m.runs.clone();
        let mut coalesced = false;
        match runs.iter().position(|r| r.ino == ino) {
            Some(p) if off <= runs[p].end && end >= runs[p].start => {
                let r = &mut runs[p];
                r.start = r.start.min(off);
                r.end = r.end.max(end);
                r.size = r.size.max(size);
                r.mtime = mtime;
                r.add(new);
                coalesced = true;
            }
            Some(_) => {
                // Not adjacent: runs fold in id order, so everything goes.
                self.fold_all(m)?;
                runs.clear();
            }
            None => {}
        }
        if !coalesced {
            while runs.len() >= self.opts.window {
                let r = runs.remove(0);
                self.fold(m, &r)?;
                m.runs.retain(|x| x.id != r.id);
            }
            runs.push(Run {
                id: m.next_run,
                ino,
                start: off,
                end,
                size,
                mtime,
                extents: Vec::new(),
            });
            if let Some(r) = runs.last_mut() {
                r.add(new);
            }
            m.next_run += 1;
        }
        loop {
            let bytes = encode_runs(m.slot_seq, &runs);
            if bytes.len() <= EXTENT_SLOT_BYTES {
                self.dev
                    .write_at(EXTENT_SLOT_OFFSETS[(m.slot_seq % 2) as usize], &bytes)?;
                m.slot_seq += 1;
                m.stats.slot_writes += 1;
                break;
            }
            // Too many extents for the slot: fold the oldest run into the log.
            let r = runs.remove(0);
            self.fold(m, &r)?;
            m.runs.retain(|x| x.id != r.id);
            if runs.is_empty() {
                break;
            }
        }
        m.runs = runs;
        if coalesced {
            m.stats.writes_coalesced += 1;
        }
        Ok(())
    }

    /// Write one run's record (its writes are in DRAM already).
    fn fold(&self, m: &mut Mut, r: &Run) -> Result<()> {
        self.log_op(m, &r.op())?;
        m.st.folded_run = m.st.folded_run.max(r.id);
        m.stats.runs_folded += 1;
        Ok(())
    }

    fn fold_all(&self, m: &mut Mut) -> Result<()> {
        while !m.runs.is_empty() {
            let r = m.runs[0].clone();
            self.fold(m, &r)?;
            m.runs.remove(0);
        }
        Ok(())
    }

    /// The metadata checkpoint: state to the inactive slot, the superblock flipped to it, then
    /// the log emptied.
    fn checkpoint(&self, m: &mut Mut) -> Result<()> {
        self.fold_all(m)?;
        let undo = self.compact_dirs(m)?;
        match self.write_checkpoint(m) {
            Ok(()) => {
                // The old directory-file blocks are free only now that no state names them.
                for (_, old, _, _) in undo {
                    for &b in old.values() {
                        m.st.free.push_back(b);
                    }
                }
                m.stats.checkpoints += 1;
                // The records are all in the checkpoint now; if emptying the log fails, the
                // next recovery skips them by their LSN.
                self.log.cleanup_all()?;
                Ok(())
            }
            Err(e) => {
                for (ino, old, size, new) in undo.into_iter().rev() {
                    for &b in new.values() {
                        m.st.owner[b as usize] = 0;
                        m.st.free.push_front(b);
                    }
                    for &b in old.values() {
                        m.st.owner[b as usize] = ino;
                    }
                    if let Some(i) = m.st.inodes.get_mut(&ino) {
                        i.blocks = old;
                        i.size = size;
                    }
                }
                Err(e)
            }
        }
    }

    /// Rewrite every directory file that is mostly removed names (over a hugeblock, at least
    /// twice its live entries) into fresh hugeblocks, holding only its live entries. Only
    /// DRAM and free blocks change: the checkpoint that follows makes it durable, and until
    /// its superblock is written the old blocks stay as they were. Returns what to undo (or,
    /// once the checkpoint is durable, the old blocks to free): (ino, old blocks, old size,
    /// new blocks).
    #[allow(clippy::type_complexity)]
    fn compact_dirs(
        &self,
        m: &mut Mut,
    ) -> Result<
        Vec<(
            u64,
            std::collections::BTreeMap<u64, u32>,
            u64,
            std::collections::BTreeMap<u64, u32>,
        )>,
    > {
        let hb = m.st.hugeblock as u64;
        let mut dirs: Vec<u64> =
            m.st.inodes
                .iter()
                .filter(|(_, i)| i.kind == Kind::Dir && i.size > hb)
                .map(|(&n, _)| n)
                .collect();
        dirs.sort_unstable();
        let mut undo = Vec::new();
        for ino in dirs {
            let i = &m.st.inodes[&ino];
            let mut bytes = Vec::new();
            for (name, &child) in &i.entries {
                let kind = m.st.get(child).map(|c| c.kind).unwrap_or(Kind::File);
                bytes.extend(layout::dirent_bytes(dirent::ADD, kind, name, child));
            }
            if (bytes.len() as u64) * 2 > i.size {
                continue;
            }
            let need = (bytes.len() as u64).div_ceil(hb) as usize;
            if m.st.free.len() < need {
                continue;
            }
            let new: std::collections::BTreeMap<u64, u32> = (0..need as u64)
                .map(|idx| (idx, m.st.free.pop_front().unwrap_or(0)))
                .collect();
            let mut res = Ok(());
            for (&idx, &b) in &new {
                let s = (idx * hb) as usize;
                let e = (s + hb as usize).min(bytes.len());
                res = self
                    .dev
                    .write_at(m.sb.data_offset + b as u64 * hb, &bytes[s..e])
                    .map_err(FsError::from);
                if res.is_err() {
                    break;
                }
            }
            if let Err(e) = res {
                for &b in new.values().rev() {
                    m.st.free.push_front(b);
                }
                return Err(e);
            }
            for &b in new.values() {
                m.st.owner[b as usize] = ino;
            }
            let i = m.st.inodes.get_mut(&ino).expect("listed above");
            for &b in i.blocks.values() {
                m.st.owner[b as usize] = 0;
            }
            let old = std::mem::replace(&mut i.blocks, new.clone());
            let size = std::mem::replace(&mut i.size, bytes.len() as u64);
            undo.push((ino, old, size, new));
            m.stats.dirs_compacted += 1;
        }
        Ok(undo)
    }

    fn write_checkpoint(&self, m: &mut Mut) -> Result<()> {
        let lsn = self.log.next_lsn().saturating_sub(1);
        let body = m.st.encode();
        let mut e = Enc::new();
        e.bytes(&CHECKPOINT_MAGIC)
            .u64(m.sb.checkpoint_seq + 1)
            .u64(lsn)
            .u64(body.len() as u64)
            .u32(crc32c::crc32c(&body))
            .bytes(&body);
        let bytes = e.buf;
        if bytes.len() as u64 > m.sb.slot_bytes {
            return Err(FsError::NoSpace {
                what: format!(
                    "the metadata checkpoint takes {} bytes, a slot holds {}",
                    bytes.len(),
                    m.sb.slot_bytes
                ),
            });
        }
        let slot = if m.sb.active_slot == 0 { 1u8 } else { 0u8 };
        self.dev
            .write_at(m.sb.slot_offsets[slot as usize], &bytes)?;
        let mut sb = m.sb.clone();
        sb.sequence += 1;
        sb.active_slot = slot;
        sb.checkpoint_seq += 1;
        sb.checkpoint_lsn = lsn;
        sb.checkpoint_len = bytes.len() as u64;
        sb.checkpoint_crc = crc32c::crc32c(&bytes);
        sb.epoch = sb.epoch.max(self.opts.provenance.epoch);
        self.write_sb(m, sb)
    }
}

/// Read both superblock copies; the valid one with the higher sequence wins. The other, if it
/// fails its checks, is returned as a finding.
pub(crate) fn read_superblock(dev: &dyn Device) -> Result<(Superblock, usize, Vec<Finding>)> {
    let mut best: Option<(Superblock, usize)> = None;
    let mut bad = Vec::new();
    let mut errs = Vec::new();
    for (copy, &at) in SUPERBLOCK_OFFSETS.iter().enumerate() {
        let mut b = vec![0u8; SUPERBLOCK_BYTES];
        dev.read_at(at, &mut b)?;
        match Superblock::decode(&b, copy) {
            Ok(Some(sb)) => {
                if best.as_ref().is_none_or(|(x, _)| sb.sequence > x.sequence) {
                    best = Some((sb, copy));
                }
            }
            Ok(None) => {}
            Err(FsError::Damage {
                what,
                at,
                expected,
                found,
            }) => {
                bad.push(Finding {
                    what: what.clone(),
                    at,
                    expected: expected.clone(),
                    found: found.clone(),
                });
                errs.push(FsError::Damage {
                    what,
                    at,
                    expected,
                    found,
                });
            }
            Err(e) => return Err(e),
        }
    }
    match best {
        Some((sb, copy)) => Ok((sb, copy, bad)),
        None if errs.is_empty() => Err(FsError::Unformatted {
            device: dev.label(),
        }),
        None => Err(errs.remove(0)),
    }
}

fn load_checkpoint(dev: &dyn Device, sb: &Superblock) -> Result<State> {
    let at = sb.slot_offsets[sb.active_slot as usize];
    let mut b = vec![0u8; sb.checkpoint_len as usize];
    dev.read_at(at, &mut b)?;
    let crc = crc32c::crc32c(&b);
    if crc != sb.checkpoint_crc {
        return Err(FsError::damage(
            format!(
                "metadata checkpoint in slot {} (crc32c named by the superblock)",
                sb.active_slot
            ),
            at,
            format!("{:#010x}", sb.checkpoint_crc),
            format!("{crc:#010x}"),
        ));
    }
    let mut d = Dec::new(&b, at, "metadata checkpoint");
    let magic = d.bytes(8, "magic")?;
    if magic != CHECKPOINT_MAGIC {
        return Err(FsError::damage(
            "metadata checkpoint (magic)",
            at,
            "KVCRCKPT",
            format!("{magic:02x?}"),
        ));
    }
    let seq = d.u64("sequence")?;
    let lsn = d.u64("lsn")?;
    if seq != sb.checkpoint_seq || lsn != sb.checkpoint_lsn {
        return Err(FsError::damage(
            "metadata checkpoint (sequence, lsn)",
            at + 8,
            format!(
                "{}, {} (the superblock's)",
                sb.checkpoint_seq, sb.checkpoint_lsn
            ),
            format!("{seq}, {lsn}"),
        ));
    }
    let len = d.u64("length")?;
    let bcrc = d.u32("crc32c")?;
    let body_at = d.at();
    if len != d.remaining() as u64 {
        return Err(FsError::damage(
            "metadata checkpoint (length)",
            at + 24,
            d.remaining().to_string(),
            len.to_string(),
        ));
    }
    let body = d.bytes(len as usize, "body")?;
    if crc32c::crc32c(body) != bcrc {
        return Err(FsError::damage(
            "metadata checkpoint (body crc32c)",
            at + 32,
            format!("{bcrc:#010x}"),
            format!("{:#010x}", crc32c::crc32c(body)),
        ));
    }
    State::decode(body, body_at, sb.blocks, sb.hugeblock)
}

/// The newest valid write-extent slot copy: (its sequence, its runs, notes on a bad copy).
fn read_extent_slot(dev: &dyn Device) -> Result<(u64, Vec<Run>, Vec<String>)> {
    let mut best: Option<(u64, Vec<Run>)> = None;
    let mut notes = Vec::new();
    for (copy, &at) in EXTENT_SLOT_OFFSETS.iter().enumerate() {
        let mut b = vec![0u8; EXTENT_SLOT_BYTES];
        dev.read_at(at, &mut b)?;
        match decode_runs(&b, at) {
            Ok(Some((seq, runs))) => {
                if best.as_ref().is_none_or(|(s, _)| seq > *s) {
                    best = Some((seq, runs));
                }
            }
            Ok(None) => {}
            Err(e) => notes.push(format!(
                "write-extent slot copy {copy} passed over (torn by a crash, or damaged): {e}"
            )),
        }
    }
    Ok(best
        .map(|(s, r)| (s, r, notes.clone()))
        .unwrap_or((0, Vec::new(), notes)))
}
