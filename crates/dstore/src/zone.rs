//! The data zone: a pool region of 4 KiB blocks holding object data (DStore's data plane).
//!
//! Which blocks are in use is not persisted: it follows from the objects' block lists, so it is
//! rebuilt at open from the recovered state. A block freed by an operation is reused only once
//! that operation's record is durable (at once with synchronous durability; after the next log
//! swap otherwise), so a crash can never leave a recovered object pointing at a block that a
//! later, lost operation overwrote.

use std::sync::Mutex;

use crate::error::StoreError;
use crate::op::BLOCK_BYTES;
use pmem::Corruption;

/// The region holding the data zone.
pub const DATA_REGION: &str = "dstore.data";

#[derive(Debug, Default)]
struct State {
    used: Vec<u64>,
    in_use: u64,
    cursor: u64,
    /// Freed blocks waiting for the log swap after `.0`.
    pending: Vec<(u64, u32)>,
}

/// Block allocator of the data zone.
#[derive(Debug)]
pub struct Zone {
    /// Medium offset of block 0.
    pub base: usize,
    /// Number of blocks.
    pub blocks: u64,
    state: Mutex<State>,
}

impl Zone {
    /// A zone of `blocks` blocks at `base`, all free.
    pub fn new(base: usize, blocks: u64) -> Zone {
        Zone {
            base,
            blocks,
            state: Mutex::new(State {
                used: vec![0; blocks.div_ceil(64) as usize],
                ..State::default()
            }),
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, State>, StoreError> {
        self.state
            .lock()
            .map_err(|_| StoreError::Failed("the data zone's lock is poisoned".into()))
    }

    /// Mark `block` in use (rebuilding at open). Fails on a block out of range or used twice.
    pub fn claim(&self, block: u32) -> Result<(), StoreError> {
        let mut s = self.lock()?;
        let b = block as u64;
        let damaged = |expected: String, found: String| {
            StoreError::Corrupt(Corruption {
                structure: "object block list".into(),
                offset: self.base as u64 + b * BLOCK_BYTES,
                field: "block",
                expected,
                found,
            })
        };
        if b >= self.blocks {
            return Err(damaged(
                format!("a block of the data zone (below {})", self.blocks),
                format!("block {b}"),
            ));
        }
        let (w, bit) = ((b / 64) as usize, 1u64 << (b % 64));
        if s.used[w] & bit != 0 {
            return Err(damaged(
                "a block owned by one object".into(),
                format!("block {b} owned by two objects"),
            ));
        }
        s.used[w] |= bit;
        s.in_use += 1;
        Ok(())
    }

    /// Allocate `n` free blocks. `swaps` is the engine's log-swap count now: pending frees from
    /// before an earlier swap are released first.
    pub fn alloc(&self, n: usize, swaps: u64) -> Result<Vec<u32>, StoreError> {
        let mut s = self.lock()?;
        let ready: Vec<u32> = s
            .pending
            .iter()
            .filter(|p| p.0 < swaps)
            .map(|p| p.1)
            .collect();
        s.pending.retain(|p| p.0 >= swaps);
        for b in ready {
            Self::clear(&mut s, b);
        }
        if s.in_use + n as u64 > self.blocks {
            return Err(StoreError::OutOfSpace(format!(
                "the data zone is full: {} of {} blocks in use, {n} more needed",
                s.in_use, self.blocks
            )));
        }
        let mut out = Vec::with_capacity(n);
        let mut b = s.cursor;
        while out.len() < n {
            let (w, bit) = ((b / 64) as usize, 1u64 << (b % 64));
            if s.used[w] & bit == 0 {
                s.used[w] |= bit;
                out.push(b as u32);
            }
            b = (b + 1) % self.blocks;
        }
        s.cursor = b;
        s.in_use += n as u64;
        Ok(out)
    }

    fn clear(s: &mut State, b: u32) {
        let (w, bit) = ((b / 64) as usize, 1u64 << (b % 64));
        if s.used[w] & bit != 0 {
            s.used[w] &= !bit;
            s.in_use -= 1;
        }
    }

    /// Return blocks no record points at any more: now if `durable` (the freeing record is
    /// durable), else after the log swap that follows `swaps`.
    pub fn release(&self, blocks: &[u32], durable: bool, swaps: u64) {
        if let Ok(mut s) = self.state.lock() {
            for &b in blocks {
                if durable {
                    Self::clear(&mut s, b);
                } else {
                    s.pending.push((swaps, b));
                }
            }
        }
    }

    /// Blocks in use.
    pub fn in_use(&self) -> u64 {
        self.state.lock().map(|s| s.in_use).unwrap_or(0)
    }
}

// ---------------------------------------------------------------------------------------------
// The object data file: object data out of the pool, on a file (an SSD in DStore's design).
// ---------------------------------------------------------------------------------------------

/// Set in a block number of an object's block list: the block is in the object data file
/// (block `b & !FILE_BLOCK_FLAG` of it), not in the data zone. [`crate::machine::HOLE`] has it
/// set too and stays a hole.
pub const FILE_BLOCK_FLAG: u32 = 1 << 31;
/// The largest file block number (the flag's bits below [`crate::machine::HOLE`]).
pub const FILE_BLOCK_MAX: u32 = !FILE_BLOCK_FLAG - 1;
/// The object data file's name inside `Config::object_dir`.
pub const OBJECT_FILE: &str = "kavach.objects";
/// Magic at the start of the object data file.
pub const OBJECT_FILE_MAGIC: [u8; 8] = *b"KVOBJDAT";
/// Version of the object data file's layout.
pub const OBJECT_FILE_VERSION: u32 = 1;
/// Header field offsets (block 0 of the file).
pub const OF_MAGIC: usize = 0;
/// Layout version (u32).
pub const OF_VERSION: usize = 8;
/// Block size (u32).
pub const OF_BLOCK: usize = 12;
/// The owning store's pool UUID (16 bytes).
pub const OF_UUID: usize = 16;
/// CRC32C of bytes 0..32 (u32).
pub const OF_CRC: usize = 32;
/// Header bytes covered by the checksum.
pub const OF_CRC_COVERS: usize = 32;

/// Is `b` (from an object's block list) a block of the object data file?
pub fn is_file_block(b: u32) -> bool {
    b != crate::machine::HOLE && b & FILE_BLOCK_FLAG != 0
}

/// Where the object data file keeps its bytes: a real file ([`DiskFile`]) or, in crash tests, a
/// file in memory that loses unsynced writes at a crash ([`MemFile`]).
pub trait ObjectFile: Send + Sync + std::fmt::Debug {
    /// Read `buf.len()` bytes at `offset`; bytes past the end of the file read as zeros.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()>;
    /// Write `data` at `offset` (extending the file). Not durable until [`ObjectFile::sync`].
    fn write_at(&self, offset: u64, data: &[u8]) -> std::io::Result<()>;
    /// Make every write that returned before this call durable (`fdatasync`).
    fn sync(&self) -> std::io::Result<()>;
    /// Bytes in the file.
    fn len(&self) -> std::io::Result<u64>;
    /// Is the file empty?
    fn is_empty(&self) -> std::io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// A name for messages.
    fn label(&self) -> String;
}

/// The object data file on a file system: `pwrite` and `fdatasync`.
#[derive(Debug)]
pub struct DiskFile {
    file: std::fs::File,
    path: std::path::PathBuf,
}

impl DiskFile {
    /// Open (creating if missing) `dir/kavach.objects`, creating `dir` if missing.
    pub fn open_in(dir: &std::path::Path) -> std::io::Result<DiskFile> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(OBJECT_FILE);
        let created = !path.exists();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        if created {
            // The new name is durable before anything points into the file.
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(DiskFile { file, path })
    }
}

impl ObjectFile for DiskFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => {
                    buf[done..].fill(0);
                    break;
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(data, offset)
    }

    fn sync(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }

    fn len(&self) -> std::io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn label(&self) -> String {
        self.path.display().to_string()
    }
}

/// Writes not yet synced: (offset, bytes), in order.
type Pending = Vec<(u64, Vec<u8>)>;

#[derive(Debug, Default, Clone)]
struct MemState {
    durable: Vec<u8>,
    /// Writes since the last sync, in order.
    pending: Pending,
    /// The state when the crash gate first said "crashed": later calls change nothing.
    at_crash: Option<(Vec<u8>, Pending)>,
}

/// A crash gate: returns true once the machine has crashed (the simulated PM said so).
pub type CrashGate = Box<dyn Fn() -> bool + Send + Sync>;

/// An object data file in memory for crash tests: writes stay pending (lost at a crash) until
/// [`ObjectFile::sync`]. With a crash gate (the PM simulator's `crashed`), the file freezes at
/// the first call after the crash, as a machine that lost power does.
pub struct MemFile {
    state: Mutex<MemState>,
    gate: Option<CrashGate>,
}

impl std::fmt::Debug for MemFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemFile").finish_non_exhaustive()
    }
}

fn apply_write(bytes: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let end = offset as usize + data.len();
    if bytes.len() < end {
        bytes.resize(end, 0);
    }
    bytes[offset as usize..end].copy_from_slice(data);
}

impl MemFile {
    /// A file holding `durable` (nothing pending), without a crash gate.
    pub fn new(durable: Vec<u8>) -> MemFile {
        MemFile {
            state: Mutex::new(MemState {
                durable,
                ..MemState::default()
            }),
            gate: None,
        }
    }

    /// A file holding `durable` that freezes once `gate` returns true.
    pub fn with_gate(durable: Vec<u8>, gate: CrashGate) -> MemFile {
        MemFile {
            gate: Some(gate),
            ..MemFile::new(durable)
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, MemState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Has the machine crashed? Freezes the state at the first call that sees it.
    fn frozen(&self, s: &mut MemState) -> bool {
        if s.at_crash.is_some() {
            return true;
        }
        if self.gate.as_ref().is_some_and(|g| g()) {
            s.at_crash = Some((s.durable.clone(), s.pending.clone()));
            return true;
        }
        false
    }

    /// The synced bytes now.
    pub fn durable(&self) -> Vec<u8> {
        self.state().durable.clone()
    }

    /// The files a crash could leave (at the crash if the gate saw one, else now): the synced
    /// bytes only; those and every pending write; those and a subset of the pending writes
    /// picked by `seed` (each write whole or not at all, any order of survival).
    pub fn crash_images(&self, seed: u64) -> Vec<Vec<u8>> {
        let mut s = self.state();
        self.frozen(&mut s);
        let (durable, pending) = s
            .at_crash
            .clone()
            .unwrap_or_else(|| (s.durable.clone(), s.pending.clone()));
        let mut out = vec![durable.clone()];
        if !pending.is_empty() {
            let mut all = durable.clone();
            for (o, d) in &pending {
                apply_write(&mut all, *o, d);
            }
            out.push(all);
            let mut some = durable;
            let mut x = seed | 1;
            for (o, d) in &pending {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if x & 1 == 0 {
                    apply_write(&mut some, *o, d);
                }
            }
            out.push(some);
        }
        out
    }
}

impl ObjectFile for MemFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let s = self.state();
        // What the running program sees: the synced bytes with its pending writes on top.
        buf.fill(0);
        let (from, to) = (offset as usize, offset as usize + buf.len());
        let mut overlay = |bytes: &[u8], at: usize| {
            let (lo, hi) = (from.max(at), to.min(at + bytes.len()));
            if lo < hi {
                buf[lo - from..hi - from].copy_from_slice(&bytes[lo - at..hi - at]);
            }
        };
        overlay(&s.durable, 0);
        for (o, d) in &s.pending {
            overlay(d, *o as usize);
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        let mut s = self.state();
        if self.frozen(&mut s) {
            return Err(std::io::Error::other("the simulated machine has crashed"));
        }
        s.pending.push((offset, data.to_vec()));
        Ok(())
    }

    fn sync(&self) -> std::io::Result<()> {
        let mut s = self.state();
        if self.frozen(&mut s) {
            return Err(std::io::Error::other("the simulated machine has crashed"));
        }
        let pending = std::mem::take(&mut s.pending);
        for (o, d) in pending {
            apply_write(&mut s.durable, o, &d);
        }
        Ok(())
    }

    fn len(&self) -> std::io::Result<u64> {
        let s = self.state();
        let end = s
            .pending
            .iter()
            .map(|(o, d)| *o as usize + d.len())
            .fold(s.durable.len(), usize::max);
        Ok(end as u64)
    }

    fn label(&self) -> String {
        "an object file in memory".into()
    }
}

/// The object data file's header (block 0) for the store of pool `uuid`.
pub fn object_file_header(uuid: &pmem::Uuid) -> Vec<u8> {
    let mut h = vec![0u8; BLOCK_BYTES as usize];
    h[OF_MAGIC..OF_MAGIC + 8].copy_from_slice(&OBJECT_FILE_MAGIC);
    h[OF_VERSION..OF_VERSION + 4].copy_from_slice(&OBJECT_FILE_VERSION.to_le_bytes());
    h[OF_BLOCK..OF_BLOCK + 4].copy_from_slice(&(BLOCK_BYTES as u32).to_le_bytes());
    h[OF_UUID..OF_UUID + 16].copy_from_slice(&uuid.0);
    let crc = crc32c::crc32c(&h[..OF_CRC_COVERS]);
    h[OF_CRC..OF_CRC + 4].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Check a header read from the object data file against the store of pool `uuid`. `Ok(false)`:
/// the header was never written (all zeros: a crash while the file was made).
pub fn check_object_file_header(
    h: &[u8],
    uuid: &pmem::Uuid,
    label: &str,
) -> Result<bool, StoreError> {
    if h.iter().all(|&b| b == 0) {
        return Ok(false);
    }
    let bad = |at: usize, field: &'static str, expected: String, found: String| {
        StoreError::Corrupt(Corruption {
            structure: format!("object data file header ({label})"),
            offset: at as u64,
            field,
            expected,
            found,
        })
    };
    let u32_at = |at: usize| u32::from_le_bytes(h[at..at + 4].try_into().unwrap_or([0; 4]));
    if h[OF_MAGIC..OF_MAGIC + 8] != OBJECT_FILE_MAGIC {
        return Err(bad(
            OF_MAGIC,
            "magic",
            format!("{:02x?}", OBJECT_FILE_MAGIC),
            format!("{:02x?}", &h[OF_MAGIC..OF_MAGIC + 8]),
        ));
    }
    let crc = crc32c::crc32c(&h[..OF_CRC_COVERS]);
    if u32_at(OF_CRC) != crc {
        return Err(bad(
            OF_CRC,
            "crc32c",
            format!("{crc:#010x}"),
            format!("{:#010x}", u32_at(OF_CRC)),
        ));
    }
    if u32_at(OF_VERSION) != OBJECT_FILE_VERSION {
        return Err(bad(
            OF_VERSION,
            "version",
            format!("{OBJECT_FILE_VERSION} (this build reads no other)"),
            u32_at(OF_VERSION).to_string(),
        ));
    }
    if u32_at(OF_BLOCK) != BLOCK_BYTES as u32 {
        return Err(bad(
            OF_BLOCK,
            "block_bytes",
            BLOCK_BYTES.to_string(),
            u32_at(OF_BLOCK).to_string(),
        ));
    }
    if h[OF_UUID..OF_UUID + 16] != uuid.0 {
        return Err(bad(
            OF_UUID,
            "pool_uuid",
            format!("{:02x?} (this store's pool)", uuid.0),
            format!(
                "{:02x?} (another store's data file)",
                &h[OF_UUID..OF_UUID + 16]
            ),
        ));
    }
    Ok(true)
}

#[derive(Debug, Default)]
struct FileState {
    used: Vec<u64>,
    in_use: u64,
    /// Blocks the file has (block 0, the header, included).
    blocks: u64,
    cursor: u64,
    /// Freed blocks waiting for the checkpoint after log swap `.0` to complete.
    pending: Vec<(u64, u32)>,
}

/// Block allocator of the object data file. Block 0 is the header; which blocks are in use
/// follows from the objects' block lists (rebuilt at open). A freed block is reused only after
/// a checkpoint that started after the freeing record was logged has finished (see
/// [`FileZone::alloc`]), so the image no longer points at it and no record in a log replays
/// onto it.
#[derive(Debug)]
pub struct FileZone {
    state: Mutex<FileState>,
}

impl FileZone {
    /// An allocator for a file of `bytes` bytes, all blocks past the header free.
    pub fn new(bytes: u64) -> FileZone {
        let blocks = bytes.div_ceil(BLOCK_BYTES).max(1);
        let mut used = vec![0u64; blocks.div_ceil(64) as usize];
        used[0] = 1; // the header
        FileZone {
            state: Mutex::new(FileState {
                used,
                in_use: 0,
                blocks,
                cursor: 1,
                pending: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, FileState>, StoreError> {
        self.state
            .lock()
            .map_err(|_| StoreError::Failed("the object file's allocator is poisoned".into()))
    }

    fn set(s: &mut FileState, b: u64) {
        let w = (b / 64) as usize;
        if s.used.len() <= w {
            s.used.resize(w + 1, 0);
        }
        s.used[w] |= 1 << (b % 64);
    }

    fn is_set(s: &FileState, b: u64) -> bool {
        s.used
            .get((b / 64) as usize)
            .is_some_and(|w| w & (1 << (b % 64)) != 0)
    }

    /// Mark file block `block` (without the flag) in use at open. Fails on block 0 or a block
    /// used twice.
    pub fn claim(&self, block: u32) -> Result<(), StoreError> {
        let mut s = self.lock()?;
        let b = block as u64;
        let damaged = |expected: &str, found: String| {
            StoreError::Corrupt(Corruption {
                structure: "object block list (object data file)".into(),
                offset: b * BLOCK_BYTES,
                field: "block",
                expected: expected.into(),
                found,
            })
        };
        if b == 0 {
            return Err(damaged(
                "a data block of the file (block 0 is its header)",
                "block 0".into(),
            ));
        }
        if Self::is_set(&s, b) {
            return Err(damaged(
                "a block owned by one object",
                format!("block {b} owned by two objects"),
            ));
        }
        Self::set(&mut s, b);
        s.in_use += 1;
        s.blocks = s.blocks.max(b + 1);
        Ok(())
    }

    /// Allocate `n` blocks (numbers without the flag). `swaps_now` is the engine's log-swap
    /// count: a block freed by a record logged when the count was `k` is reused once it
    /// reaches `k + 2`. A checkpoint swaps the logs at its start under the engine's checkpoint
    /// lock, so swap `k + 2` begins only after the checkpoint of swap `k + 1` (which began
    /// after the freeing record) has finished; a checkpoint that fails leaves the root
    /// checkpointing (or the engine failed) and no further swap happens. Its image holds the
    /// new block list, and no log replays a record naming the old block.
    pub fn alloc(&self, n: usize, swaps_now: u64) -> Result<Vec<u32>, StoreError> {
        let mut s = self.lock()?;
        if s.pending.iter().any(|p| swaps_now >= p.0 + 2) {
            let ready: Vec<u32> = s
                .pending
                .iter()
                .filter(|p| swaps_now >= p.0 + 2)
                .map(|p| p.1)
                .collect();
            s.pending.retain(|p| swaps_now < p.0 + 2);
            for b in ready {
                let (w, bit) = ((b / 64) as usize, 1u64 << (b % 64));
                if s.used[w] & bit != 0 {
                    s.used[w] &= !bit;
                    s.in_use -= 1;
                }
            }
        }
        let mut out = Vec::with_capacity(n);
        let free = (s.blocks - 1).saturating_sub(s.in_use);
        if free > 0 {
            // Reuse freed blocks first (an overwrite in place syncs faster than an append).
            let mut b = s.cursor.max(1);
            let mut looked = 0;
            while out.len() < n && looked < s.blocks {
                if b >= s.blocks {
                    b = 1;
                }
                // Skip whole words in use.
                if b % 64 == 0 && s.used.get((b / 64) as usize) == Some(&u64::MAX) {
                    b += 64;
                    looked += 64;
                    continue;
                }
                if !Self::is_set(&s, b) {
                    Self::set(&mut s, b);
                    out.push(b as u32);
                }
                b += 1;
                looked += 1;
            }
            s.cursor = b;
        }
        while out.len() < n {
            let b = s.blocks;
            if b > FILE_BLOCK_MAX as u64 {
                for &b in &out {
                    let (w, bit) = ((b / 64) as usize, 1u64 << (b % 64));
                    s.used[w] &= !bit;
                }
                return Err(StoreError::OutOfSpace(format!(
                    "the object data file is full: {} blocks of 4 KiB",
                    FILE_BLOCK_MAX
                )));
            }
            Self::set(&mut s, b);
            s.blocks += 1;
            out.push(b as u32);
        }
        s.in_use += n as u64;
        Ok(out)
    }

    /// Give back blocks no record points at: now if `now` (they were never pointed at by a
    /// logged record), else once the log-swap count reaches `swaps + 2` (`swaps` read after the
    /// freeing record was logged).
    pub fn release(&self, blocks: &[u32], now: bool, swaps: u64) {
        if let Ok(mut s) = self.state.lock() {
            for &b in blocks {
                if now {
                    let (w, bit) = ((b / 64) as usize, 1u64 << (b % 64));
                    if s.used.get(w).is_some_and(|x| x & bit != 0) {
                        s.used[w] &= !bit;
                        s.in_use -= 1;
                    }
                } else {
                    s.pending.push((swaps, b));
                }
            }
        }
    }

    /// Blocks in use (those waiting for a checkpoint included).
    pub fn in_use(&self) -> u64 {
        self.state.lock().map(|s| s.in_use).unwrap_or(0)
    }

    /// Freed blocks waiting for a checkpoint.
    pub fn pending(&self) -> usize {
        self.state.lock().map(|s| s.pending.len()).unwrap_or(0)
    }
}

/// Group commit of the object data file's syncs: a writer's `sync` returns once a sync that
/// began after its write returned has completed; one thread syncs for every writer waiting.
#[derive(Debug, Default)]
pub struct GroupSync {
    written: std::sync::atomic::AtomicU64,
    /// (writes covered by the last completed sync, a sync is running)
    state: Mutex<(u64, bool)>,
    done: std::sync::Condvar,
}

impl GroupSync {
    /// Make durable every write to `file` that returned before this call.
    pub fn sync(&self, file: &dyn ObjectFile) -> std::io::Result<()> {
        use std::sync::atomic::Ordering;
        let ticket = self.written.fetch_add(1, Ordering::SeqCst) + 1;
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if g.0 >= ticket {
                return Ok(());
            }
            if g.1 {
                g = self.done.wait(g).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            g.1 = true;
            // Every ticket up to here belongs to a write that had returned.
            let target = self.written.load(Ordering::SeqCst);
            drop(g);
            let r = file.sync();
            g = self.state.lock().unwrap_or_else(|p| p.into_inner());
            g.1 = false;
            if r.is_ok() {
                g.0 = g.0.max(target);
            }
            self.done.notify_all();
            r?;
        }
    }
}

/// The object data file of a store: the file, its allocator and its group sync.
#[derive(Debug)]
pub struct FileObjects {
    /// The file.
    pub file: std::sync::Arc<dyn ObjectFile>,
    /// Its blocks.
    pub zone: FileZone,
    /// Its syncs.
    pub sync: GroupSync,
}
