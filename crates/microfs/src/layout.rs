//! Where things live in a namespace (a partition of a device), and the superblock.
//! `docs/format/microfs.md` documents these bytes; a test checks it against the constants.

use crate::codec::{Dec, Enc};
use crate::error::{FsError, Result};

/// Superblock magic.
pub const SUPERBLOCK_MAGIC: [u8; 8] = *b"KVMICRFS";
/// Format version.
pub const FORMAT_VERSION: u32 = 1;
/// The two superblock copies (the valid one with the higher sequence is in force).
pub const SUPERBLOCK_OFFSETS: [u64; 2] = [0, 4096];
/// Bytes of one superblock copy (CRC32C in the last 4).
pub const SUPERBLOCK_BYTES: usize = 512;
/// The two copies of the write-extent slot (open write runs, see coalescing).
pub const EXTENT_SLOT_OFFSETS: [u64; 2] = [8192, 12288];
/// Bytes of one write-extent slot copy (CRC32C in the last 4).
pub const EXTENT_SLOT_BYTES: usize = 4096;
/// Where the operation log's area starts.
pub const LOG_OFFSET: u64 = 16384;
/// Magic of the write-extent slot.
pub const EXTENT_SLOT_MAGIC: [u8; 8] = *b"KVCRRUNS";
/// Magic of a metadata checkpoint.
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"KVCRCKPT";
/// Smallest, default and largest hugeblock.
pub const HUGEBLOCK_MIN: u32 = 4096;
/// Default hugeblock: 32 KiB.
pub const HUGEBLOCK_DEFAULT: u32 = 32 * 1024;
/// Largest hugeblock: 1 MiB.
pub const HUGEBLOCK_MAX: u32 = 1 << 20;
/// Longest job name in the superblock.
pub const JOB_MAX: usize = 63;
/// Longest name component, in bytes (the rules are `codec::valid_name`'s).
pub use crate::codec::NAME_MAX;
/// The root directory's inode number.
pub const ROOT_INO: u64 = 1;
/// `active_slot` when no checkpoint was taken yet.
pub const NO_SLOT: u8 = 0xff;
/// Smallest log area.
pub const LOG_BYTES_MIN: u64 = 20 * 1024;
/// Default log area: 4 MiB.
pub const LOG_BYTES_DEFAULT: u64 = 4 << 20;

/// Log record kinds (first payload byte).
pub mod kinds {
    /// A file or directory was created.
    pub const CREATE: u8 = 1;
    /// A write run (one or more coalesced writes) to a file.
    pub const WRITE: u8 = 2;
    /// A file's length was set.
    pub const TRUNCATE: u8 = 3;
    /// A file (unlink) or an empty directory (rmdir) was removed.
    pub const REMOVE: u8 = 4;
    /// A rename.
    pub const RENAME: u8 = 5;
    /// Mode or times were set.
    pub const SETATTR: u8 = 6;
}

/// Directory-file entry operations.
pub mod dirent {
    /// A name was bound to an inode.
    pub const ADD: u8 = 1;
    /// A name was removed.
    pub const DEL: u8 = 2;
    /// Bytes of an entry's fixed part: op u8, kind u8, name length u16, CRC32C u32, ino u64.
    pub const HEADER_BYTES: usize = 16;
}

/// Inode kinds on the device.
pub const KIND_FILE: u8 = 1;
/// A directory.
pub const KIND_DIR: u8 = 2;

/// The superblock: the namespace's identity and geometry, and the checkpoint in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    /// Bumped on every update; the copy written is `sequence % 2`.
    pub sequence: u64,
    /// Hugeblock bytes.
    pub hugeblock: u32,
    /// Job name.
    pub job: String,
    /// Rank (or partition) that owns the namespace.
    pub rank: u32,
    /// Epoch of the last writer that checkpointed or opened it.
    pub epoch: u64,
    /// Bytes of the partition the layout was made for.
    pub capacity: u64,
    /// Log area: offset and bytes.
    pub log_offset: u64,
    /// Log area bytes.
    pub log_bytes: u64,
    /// Offsets of the two checkpoint slots.
    pub slot_offsets: [u64; 2],
    /// Bytes of one slot.
    pub slot_bytes: u64,
    /// Offset of hugeblock 0.
    pub data_offset: u64,
    /// Hugeblocks.
    pub blocks: u64,
    /// Slot holding the checkpoint in force, or [`NO_SLOT`].
    pub active_slot: u8,
    /// Checkpoints taken.
    pub checkpoint_seq: u64,
    /// Every log record with an LSN up to this is in the checkpoint.
    pub checkpoint_lsn: u64,
    /// Bytes of the checkpoint in the active slot.
    pub checkpoint_len: u64,
    /// CRC32C of those bytes.
    pub checkpoint_crc: u32,
    /// 1 when the last writer closed the namespace cleanly.
    pub clean: u8,
}

impl Superblock {
    /// The encoded copy (exactly [`SUPERBLOCK_BYTES`]).
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        e.bytes(&SUPERBLOCK_MAGIC)
            .u32(FORMAT_VERSION)
            .u32(self.hugeblock)
            .u64(self.sequence);
        let mut job = [0u8; 64];
        let j = self.job.as_bytes();
        let n = j.len().min(JOB_MAX);
        job[0] = n as u8;
        job[1..1 + n].copy_from_slice(&j[..n]);
        e.bytes(&job)
            .u32(self.rank)
            .u64(self.epoch)
            .u64(self.capacity)
            .u64(self.log_offset)
            .u64(self.log_bytes)
            .u64(self.slot_offsets[0])
            .u64(self.slot_offsets[1])
            .u64(self.slot_bytes)
            .u64(self.data_offset)
            .u64(self.blocks)
            .u8(self.active_slot)
            .u8(self.clean)
            .u64(self.checkpoint_seq)
            .u64(self.checkpoint_lsn)
            .u64(self.checkpoint_len)
            .u32(self.checkpoint_crc);
        let mut b = e.buf;
        b.resize(SUPERBLOCK_BYTES - 4, 0);
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode copy `copy` read from `bytes`; `Ok(None)` for a blank (all-zero) copy.
    pub fn decode(bytes: &[u8], copy: usize) -> Result<Option<Superblock>> {
        let at = SUPERBLOCK_OFFSETS[copy];
        let what = format!("superblock copy {copy}");
        if bytes.len() != SUPERBLOCK_BYTES {
            return Err(FsError::damage(
                &what,
                at,
                format!("{SUPERBLOCK_BYTES} bytes"),
                bytes.len().to_string(),
            ));
        }
        // Blank, or a format that did not get to write the magic (it goes last, in one word).
        if bytes[..8].iter().all(|&b| b == 0) {
            return Ok(None);
        }
        if bytes[..8] != SUPERBLOCK_MAGIC {
            return Err(FsError::damage(
                format!("{what} (magic)"),
                at,
                format!("{:?}", String::from_utf8_lossy(&SUPERBLOCK_MAGIC)),
                format!("{:02x?}", &bytes[..8]),
            ));
        }
        let stored = u32::from_le_bytes(bytes[SUPERBLOCK_BYTES - 4..].try_into().unwrap_or([0; 4]));
        let crc = crc32c::crc32c(&bytes[..SUPERBLOCK_BYTES - 4]);
        if stored != crc {
            return Err(FsError::damage(
                format!("{what} (crc32c)"),
                at + SUPERBLOCK_BYTES as u64 - 4,
                format!("{crc:#010x}"),
                format!("{stored:#010x}"),
            ));
        }
        let mut d = Dec::new(&bytes[8..], at + 8, &what);
        let version = d.u32("version")?;
        if version != FORMAT_VERSION {
            return Err(FsError::damage(
                format!("{what} (version)"),
                at + 8,
                FORMAT_VERSION.to_string(),
                version.to_string(),
            ));
        }
        let hugeblock = d.u32("hugeblock")?;
        let sequence = d.u64("sequence")?;
        let job_at = d.at();
        let job = d.bytes(64, "job")?;
        let n = job[0] as usize;
        let job = if n <= JOB_MAX {
            std::str::from_utf8(&job[1..1 + n]).ok()
        } else {
            None
        }
        .ok_or_else(|| {
            FsError::damage(
                format!("{what} (job)"),
                job_at,
                "a UTF-8 name of at most 63 bytes",
                format!("length {n}"),
            )
        })?
        .to_string();
        let sb = Superblock {
            sequence,
            hugeblock,
            job,
            rank: d.u32("rank")?,
            epoch: d.u64("epoch")?,
            capacity: d.u64("capacity")?,
            log_offset: d.u64("log offset")?,
            log_bytes: d.u64("log bytes")?,
            slot_offsets: [d.u64("slot 0 offset")?, d.u64("slot 1 offset")?],
            slot_bytes: d.u64("slot bytes")?,
            data_offset: d.u64("data offset")?,
            blocks: d.u64("blocks")?,
            active_slot: d.u8("active slot")?,
            clean: d.u8("clean")?,
            checkpoint_seq: d.u64("checkpoint sequence")?,
            checkpoint_lsn: d.u64("checkpoint lsn")?,
            checkpoint_len: d.u64("checkpoint length")?,
            checkpoint_crc: d.u32("checkpoint crc")?,
        };
        Ok(Some(sb))
    }

    /// Check the geometry against the partition: every area inside it, in order, no overlap.
    pub fn validate(&self, capacity: u64) -> Result<()> {
        let bad = |field: &str, expected: String, found: String| {
            Err(FsError::damage(
                format!("superblock ({field})"),
                SUPERBLOCK_OFFSETS[(self.sequence % 2) as usize],
                expected,
                found,
            ))
        };
        if !self.hugeblock.is_power_of_two()
            || !(HUGEBLOCK_MIN..=HUGEBLOCK_MAX).contains(&self.hugeblock)
        {
            return bad(
                "hugeblock",
                "a power of two in 4096..=1048576".into(),
                self.hugeblock.to_string(),
            );
        }
        if self.capacity > capacity {
            return bad(
                "capacity",
                format!("at most the partition's {capacity} bytes"),
                self.capacity.to_string(),
            );
        }
        if self.log_offset != LOG_OFFSET
            || self.log_bytes < LOG_BYTES_MIN
            || self.log_bytes % 4096 != 0
        {
            return bad(
                "log area",
                format!("offset {LOG_OFFSET}, at least {LOG_BYTES_MIN} bytes in pages"),
                format!("offset {}, {} bytes", self.log_offset, self.log_bytes),
            );
        }
        let log_end = LOG_OFFSET.saturating_add(self.log_bytes);
        let s0_end = self.slot_offsets[0].saturating_add(self.slot_bytes);
        let s1_end = self.slot_offsets[1].saturating_add(self.slot_bytes);
        if self.slot_offsets[0] != log_end || self.slot_offsets[1] != s0_end || self.slot_bytes == 0
        {
            return bad(
                "slots",
                format!("slot 0 at {log_end}, slot 1 right after it"),
                format!(
                    "slot 0 at {}, slot 1 at {}, {} bytes each",
                    self.slot_offsets[0], self.slot_offsets[1], self.slot_bytes
                ),
            );
        }
        let data_end = self
            .blocks
            .checked_mul(self.hugeblock as u64)
            .and_then(|b| b.checked_add(self.data_offset));
        if self.data_offset < s1_end
            || self.data_offset % self.hugeblock as u64 != 0
            || data_end.is_none_or(|e| e > self.capacity)
            || self.blocks > u32::MAX as u64
        {
            return bad(
                "data area",
                format!(
                    "hugeblock-aligned, after {s1_end}, inside {} bytes",
                    self.capacity
                ),
                format!("{} blocks at {}", self.blocks, self.data_offset),
            );
        }
        if self.active_slot > 1 && self.active_slot != NO_SLOT {
            return bad(
                "active slot",
                "0, 1 or 255".into(),
                self.active_slot.to_string(),
            );
        }
        if self.active_slot != NO_SLOT && self.checkpoint_len > self.slot_bytes {
            return bad(
                "checkpoint length",
                format!("at most {}", self.slot_bytes),
                self.checkpoint_len.to_string(),
            );
        }
        Ok(())
    }
}

/// Bytes of one checkpoint slot for a partition of `capacity` bytes with hugeblocks of `hb`.
pub fn slot_bytes_for(capacity: u64, hb: u32) -> u64 {
    // Room for one file per hugeblock (an extent of 16 bytes, an inode of about 60 and a name
    // in the inode and its directory of up to 100), plus 256 KiB for empty files and directories.
    let blocks = capacity / hb as u64;
    (blocks * 176 + (256 << 10)).div_ceil(4096) * 4096
}

pub use pmem::layout::Field;

/// The superblock's fields (`docs/format/microfs.md`, table `superblock`).
pub const SUPERBLOCK_FIELDS: &[Field] = &[
    Field::new("magic", 0, 8),
    Field::new("version", 8, 4),
    Field::new("hugeblock", 12, 4),
    Field::new("sequence", 16, 8),
    Field::new("job", 24, 64),
    Field::new("rank", 88, 4),
    Field::new("epoch", 92, 8),
    Field::new("capacity", 100, 8),
    Field::new("log_offset", 108, 8),
    Field::new("log_bytes", 116, 8),
    Field::new("slot0_offset", 124, 8),
    Field::new("slot1_offset", 132, 8),
    Field::new("slot_bytes", 140, 8),
    Field::new("data_offset", 148, 8),
    Field::new("blocks", 156, 8),
    Field::new("active_slot", 164, 1),
    Field::new("clean", 165, 1),
    Field::new("checkpoint_seq", 166, 8),
    Field::new("checkpoint_lsn", 174, 8),
    Field::new("checkpoint_len", 182, 8),
    Field::new("checkpoint_crc", 190, 4),
    Field::new("reserved", 194, 314),
    Field::new("crc32c", 508, 4),
];

/// The write-extent slot copy's header (table `extent-slot`); the body follows.
pub const EXTENT_SLOT_FIELDS: &[Field] = &[
    Field::new("magic", 0, 8),
    Field::new("sequence", 8, 8),
    Field::new("length", 16, 4),
    Field::new("crc32c", 20, 4),
];

/// A metadata checkpoint's header (table `checkpoint`); the body follows.
pub const CHECKPOINT_FIELDS: &[Field] = &[
    Field::new("magic", 0, 8),
    Field::new("sequence", 8, 8),
    Field::new("lsn", 16, 8),
    Field::new("length", 24, 8),
    Field::new("crc32c", 32, 4),
];

/// A directory-file entry's fixed part (table `dirent`); the name follows.
pub const DIRENT_FIELDS: &[Field] = &[
    Field::new("op", 0, 1),
    Field::new("kind", 1, 1),
    Field::new("name_len", 2, 2),
    Field::new("crc32c", 4, 4),
    Field::new("ino", 8, 8),
];

/// The start of every log record payload (table `record`); the kind's fields follow.
pub const RECORD_FIELDS: &[Field] = &[
    Field::new("kind", 0, 1),
    Field::new("rank", 1, 4),
    Field::new("epoch", 5, 8),
];

/// The device label's fixed part (table `label`); the job name follows at 32.
pub const LABEL_FIELDS: &[Field] = &[
    Field::new("magic", 0, 8),
    Field::new("version", 8, 4),
    Field::new("parts", 12, 4),
    Field::new("segment", 16, 8),
    Field::new("first", 24, 8),
    Field::new("job_len", 32, 2),
    Field::new("crc32c", 508, 4),
];

/// A directory-file entry: the fixed part (table `dirent`) and the name.
pub fn dirent_bytes(op: u8, kind: crate::Kind, name: &str, ino: u64) -> Vec<u8> {
    let mut e = Enc::new();
    e.u8(op)
        .u8(kind.code())
        .u16(name.len() as u16)
        .u32(0)
        .u64(ino)
        .bytes(name.as_bytes());
    let crc = crc32c::crc32c(&e.buf);
    e.buf[4..8].copy_from_slice(&crc.to_le_bytes());
    e.buf
}
