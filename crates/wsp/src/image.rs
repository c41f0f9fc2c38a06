//! The image file: header, marker, metadata, and the extent allocator for segment data.

use crate::error::{Result, WspError};
use crate::layout::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// The program an image belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramId {
    /// Canonical path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, ns since the epoch.
    pub mtime_ns: i64,
    /// CRC-32C of the whole file.
    pub crc32c: u32,
}

/// How a segment is kept in the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SegmentKind {
    /// The program's memory *is* this extent of the image (a shared mapping of it).
    Image,
    /// The save copied the memory's bytes into this extent.
    Copied,
    /// An inaccessible reservation (PROT_NONE): nothing stored, recreated empty.
    Reserve,
}

/// One saved range of the program's address space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// Start address.
    pub addr: u64,
    /// Length in bytes (page multiple).
    pub len: u64,
    /// Protection as in /proc/PID/maps (`rw-`, `r--`, `---`, ...).
    pub prot: String,
    /// How it is kept.
    pub kind: SegmentKind,
    /// Offset of its bytes in the image (0 for a reservation).
    pub offset: u64,
    /// What /proc/PID/maps called the mapping when it was first seen or saved.
    pub name: String,
}

/// One open descriptor of the saved program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// The descriptor number.
    pub fd: i32,
    /// The path it was opened at.
    pub path: String,
    /// `open` flags (access mode, O_APPEND, ...), as fdinfo reports them.
    pub flags: i32,
    /// The file offset.
    pub offset: u64,
    /// Whether FD_CLOEXEC was set.
    pub cloexec: bool,
    /// `file` (reopened at its offset), `char` (a character device, reopened by path) or
    /// `inherited` (descriptors 0-2 that are not files: the resumer's own are used).
    pub kind: String,
}

/// One thread's saved state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ThreadCtx {
    pub tid: i32,
    pub regs: Vec<u64>,
    pub xstate: String,
    pub sigmask: u64,
    pub clear_child_tid: u64,
    pub robust_head: u64,
    pub robust_len: u64,
    pub rseq_ptr: u64,
    pub rseq_len: u32,
    pub rseq_sig: u32,
    pub clone_flags: u64,
    /// Words the kernel overwrites when the saved process dies (the clear_child_tid word and the
    /// futex words of the robust list), with their values at the save: written back on resume.
    #[serde(default)]
    pub exit_words: Vec<(u64, u32)>,
}

/// A handler the program installed with rt_sigaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SigAct {
    pub sig: i32,
    pub handler: u64,
    pub flags: u64,
    pub restorer: u64,
    pub mask: u64,
}

/// The metadata area's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Meta {
    pub program: ProgramId,
    pub args: Vec<String>,
    pub env: Vec<String>,
    pub kernel: String,
    pub counter: u64,
    pub brk: u64,
    pub threads: Vec<ThreadCtx>,
    pub segments: Vec<Segment>,
    pub files: Vec<FileEntry>,
    pub sigactions: Vec<SigAct>,
    pub not_restorable: Vec<String>,
    pub exit: Option<i32>,
}

/// The decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub mode: u32,
    pub state: u32,
    pub counter: u64,
    pub meta_len: u64,
    pub meta_crc: u32,
    pub exit_status: i32,
}

fn put(buf: &mut [u8], i: usize, v: &[u8]) {
    buf[at(HEADER_FIELDS, i)..at(HEADER_FIELDS, i) + v.len()].copy_from_slice(v);
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut b = [0u8; HEADER_SIZE];
        put(&mut b, 0, &MAGIC);
        put(&mut b, 1, &VERSION.to_le_bytes());
        put(&mut b, 2, &self.mode.to_le_bytes());
        put(&mut b, 3, &self.state.to_le_bytes());
        put(&mut b, 5, &self.counter.to_le_bytes());
        put(&mut b, 6, &META_OFFSET.to_le_bytes());
        put(&mut b, 7, &META_CAPACITY.to_le_bytes());
        put(&mut b, 8, &self.meta_len.to_le_bytes());
        put(&mut b, 9, &self.meta_crc.to_le_bytes());
        put(&mut b, 10, &self.exit_status.to_le_bytes());
        let crc = crc32c::crc32c(&b);
        put(&mut b, 4, &crc.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Header> {
        let f = |i: usize| &b[at(HEADER_FIELDS, i)..at(HEADER_FIELDS, i) + HEADER_FIELDS[i].size];
        let u32_at = |i: usize| u32::from_le_bytes(f(i).try_into().unwrap_or([0; 4]));
        let u64_at = |i: usize| u64::from_le_bytes(f(i).try_into().unwrap_or([0; 8]));
        let damaged = |i: usize, expected: String, found: String| WspError::Damaged {
            what: HEADER_FIELDS[i].name,
            offset: HEADER_FIELDS[i].offset as u64,
            expected,
            found,
        };
        if b.len() < HEADER_SIZE {
            return Err(WspError::Damaged {
                what: "header",
                offset: 0,
                expected: format!("{HEADER_SIZE} bytes"),
                found: format!("{} bytes", b.len()),
            });
        }
        if f(0) != MAGIC {
            let shown = |b: &[u8]| format!("\"{}\"", b.escape_ascii());
            return Err(damaged(0, shown(&MAGIC[..]), shown(f(0))));
        }
        if u32_at(1) != VERSION {
            return Err(damaged(1, VERSION.to_string(), u32_at(1).to_string()));
        }
        let mut zeroed = [0u8; HEADER_SIZE];
        zeroed.copy_from_slice(&b[..HEADER_SIZE]);
        zeroed[at(HEADER_FIELDS, 4)..at(HEADER_FIELDS, 4) + 4].fill(0);
        let crc = crc32c::crc32c(&zeroed);
        if crc != u32_at(4) {
            return Err(damaged(
                4,
                format!("{crc:#010x}"),
                format!("{:#010x}", u32_at(4)),
            ));
        }
        let mode = u32_at(2);
        if mode != MODE_IMAGE && mode != MODE_HIBERNATE {
            return Err(damaged(2, "1 or 2".into(), mode.to_string()));
        }
        let state = u32_at(3);
        if !(STATE_RUNNING..=STATE_ENDED).contains(&state) {
            return Err(damaged(3, "1..=4".into(), state.to_string()));
        }
        if u64_at(6) != META_OFFSET {
            return Err(damaged(6, META_OFFSET.to_string(), u64_at(6).to_string()));
        }
        if u64_at(7) != META_CAPACITY {
            return Err(damaged(7, META_CAPACITY.to_string(), u64_at(7).to_string()));
        }
        let meta_len = u64_at(8);
        if meta_len > META_CAPACITY {
            return Err(damaged(
                8,
                format!("<= {META_CAPACITY}"),
                meta_len.to_string(),
            ));
        }
        Ok(Header {
            mode,
            state,
            counter: u64_at(5),
            meta_len,
            meta_crc: u32_at(9),
            exit_status: i32::from_le_bytes(f(10).try_into().unwrap_or([0; 4])),
        })
    }

    pub fn crc_of(enc: &[u8; HEADER_SIZE]) -> u32 {
        u32::from_le_bytes(
            enc[at(HEADER_FIELDS, 4)..at(HEADER_FIELDS, 4) + 4]
                .try_into()
                .unwrap_or([0; 4]),
        )
    }
}

/// The marker's bytes for a save with this counter over this header.
pub(crate) fn marker_bytes(counter: u64, header_crc: u32) -> [u8; MARKER_SIZE] {
    let mut m = [0u8; MARKER_SIZE];
    m[0..8].copy_from_slice(&MARKER_VALID);
    m[8..16].copy_from_slice(&counter.to_le_bytes());
    m[16..20].copy_from_slice(&header_crc.to_le_bytes());
    let c = crc32c::crc32c(&m[..20]);
    m[20..24].copy_from_slice(&c.to_le_bytes());
    m
}

/// Whether `m` is the valid marker of this header (a clear or stale marker is not).
pub(crate) fn marker_matches(m: &[u8], header: &[u8; HEADER_SIZE], counter: u64) -> bool {
    m.len() >= MARKER_SIZE && m[..MARKER_SIZE] == marker_bytes(counter, Header::crc_of(header))
}

/// Everything `info` and `resume` read from an image, checked.
#[derive(Debug, Clone)]
pub(crate) struct Loaded {
    pub header: Header,
    pub marker_valid: bool,
    pub meta: Meta,
}

/// Read and check an image's header, marker and metadata.
pub(crate) fn load(path: &Path) -> Result<Loaded> {
    let f = File::open(path).map_err(|e| WspError::io("open image", path, e))?;
    let mut head = vec![0u8; 4096];
    let n = read_full(&f, &mut head, 0).map_err(|e| WspError::io("read image", path, e))?;
    if n < MARKER_OFFSET as usize + MARKER_SIZE {
        return Err(WspError::Damaged {
            what: "file",
            offset: 0,
            expected: format!("at least {} bytes", DATA_OFFSET),
            found: format!("{n} bytes"),
        });
    }
    let header = Header::decode(&head)?;
    let mut enc = [0u8; HEADER_SIZE];
    enc.copy_from_slice(&head[..HEADER_SIZE]);
    let marker_valid = header.state == STATE_SAVED
        && marker_matches(&head[MARKER_OFFSET as usize..], &enc, header.counter);
    let mut meta = vec![0u8; header.meta_len as usize];
    let got =
        read_full(&f, &mut meta, META_OFFSET).map_err(|e| WspError::io("read image", path, e))?;
    if got != meta.len() {
        return Err(WspError::Damaged {
            what: "metadata",
            offset: META_OFFSET,
            expected: format!("{} bytes", meta.len()),
            found: format!("{got} bytes (file too short)"),
        });
    }
    let crc = crc32c::crc32c(&meta);
    if crc != header.meta_crc && !marker_valid {
        // No valid marker: the tables were being written when the power went (a save cut
        // short), not damaged. There is no saved state, which is all a reader needs to know.
        return Err(WspError::NotSaved {
            image: path.into(),
            state: if header.state == STATE_SAVED {
                "missed".into()
            } else {
                crate::state_name(header.state).into()
            },
        });
    }
    if crc != header.meta_crc {
        return Err(WspError::Damaged {
            what: "metadata crc",
            offset: META_OFFSET,
            expected: format!("{:#010x} (header meta_crc)", header.meta_crc),
            found: format!("{crc:#010x}"),
        });
    }
    let meta: Meta = serde_json::from_slice(&meta).map_err(|e| WspError::Damaged {
        what: "metadata",
        offset: META_OFFSET + e.column() as u64,
        expected: "the metadata JSON of docs/format/wsp-image.md".into(),
        found: e.to_string(),
    })?;
    Ok(Loaded {
        header,
        marker_valid,
        meta,
    })
}

fn read_full(f: &File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        let r = f.read_at(&mut buf[n..], off + n as u64)?;
        if r == 0 {
            break;
        }
        n += r;
    }
    Ok(n)
}

/// An image open for writing, mapped shared into the runner.
#[derive(Debug)]
pub(crate) struct Image {
    pub path: PathBuf,
    pub file: File,
    map: *mut u8,
    map_len: u64,
    /// Free extents of the data area: offset -> length.
    free: BTreeMap<u64, u64>,
    /// The program's image-backed ranges: address -> (length, offset).
    pub segs: BTreeMap<u64, (u64, u64)>,
    pub mode: u32,
}

impl Drop for Image {
    fn drop(&mut self) {
        // SAFETY: map/map_len describe the mapping made in `map_file` and nothing borrows it now.
        unsafe { libc::munmap(self.map.cast(), self.map_len as usize) };
    }
}

fn map_file(file: &File, len: u64, path: &Path) -> Result<*mut u8> {
    // SAFETY: a fresh shared mapping of our own open file; the kernel picks the address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(WspError::io(
            "map image",
            path,
            std::io::Error::last_os_error(),
        ));
    }
    Ok(p.cast())
}

/// Take the image's exclusive lock. The traced program shares the lock's open file (its
/// descriptor 1000 is a dup), so the lock is free only once the previous program is entirely
/// gone, after the kernel's last writes into its memory at exit. A dying program gets a few
/// seconds; a live one makes this fail.
fn lock(file: &File, path: &Path) -> Result<()> {
    for _ in 0..500 {
        // SAFETY: flock on our own descriptor.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Err(WspError::io(
        "lock image (another runner or a live program holds it)",
        path,
        std::io::Error::last_os_error(),
    ))
}

impl Image {
    /// Create a new image of `size` bytes (sparse), header in state running.
    pub fn create(path: &Path, size: u64, mode: u32) -> Result<Image> {
        let min = DATA_OFFSET + (16 << 20);
        if size < min {
            return Err(WspError::Config {
                what: "image_size",
                expected: format!(">= {min} bytes"),
                found: size.to_string(),
            });
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    WspError::Exists { path: path.into() }
                } else {
                    WspError::io("create image", path, e)
                }
            })?;
        // Held by this runner and, through its descriptor, by the program: a resume of the
        // image waits until both are gone (a held program killed later would otherwise write
        // its exit words into a resumed one's memory).
        lock(&file, path)?;
        file.set_len(size)
            .map_err(|e| WspError::io("size image", path, e))?;
        let map = map_file(&file, size, path)?;
        let mut free = BTreeMap::new();
        free.insert(DATA_OFFSET, size - DATA_OFFSET);
        Ok(Image {
            path: path.into(),
            file,
            map,
            map_len: size,
            free,
            segs: BTreeMap::new(),
            mode,
        })
    }

    /// Open an existing image for a resume; the allocator's used extents are `used`.
    pub fn open(path: &Path, mode: u32, used: &[(u64, u64, u64)]) -> Result<Image> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| WspError::io("open image", path, e))?;
        lock(&file, path)?;
        let len = file
            .metadata()
            .map_err(|e| WspError::io("stat image", path, e))?
            .len();
        let map = map_file(&file, len, path)?;
        let mut img = Image {
            path: path.into(),
            file,
            map,
            map_len: len,
            free: BTreeMap::new(),
            segs: BTreeMap::new(),
            mode,
        };
        // Every extent the metadata names must lie in the data area of this file: the mapping
        // and the program's MAP_FIXED mappings are made from these offsets.
        for &(a, l, o) in used {
            if o < DATA_OFFSET || o.checked_add(l).is_none_or(|end| end > len) {
                return Err(WspError::Damaged {
                    what: "segment extent",
                    offset: DATA_OFFSET,
                    expected: format!(
                        "an extent inside the data area [{DATA_OFFSET}, {len}) of the image"
                    ),
                    found: format!("{l} bytes at offset {o} for address {a:#x}"),
                });
            }
        }
        // Free = the data area less the used extents.
        let mut ext: Vec<(u64, u64)> = used.iter().map(|&(_, l, o)| (o, l)).collect();
        ext.sort();
        let mut at = DATA_OFFSET;
        for (o, l) in ext {
            if o > at {
                img.free.insert(at, o - at);
            }
            at = at.max(o + l);
        }
        if len > at {
            img.free.insert(at, len - at);
        }
        for &(a, l, o) in used {
            img.segs.insert(a, (l, o));
        }
        Ok(img)
    }

    pub fn len(&self) -> u64 {
        self.map_len
    }

    /// Take `len` bytes (page multiple) from the data area, growing the file if needed.
    pub fn alloc(&mut self, len: u64) -> Result<u64> {
        let len = crate::sys::page_up(len.max(1));
        loop {
            if let Some((&o, &l)) = self.free.iter().find(|&(_, &l)| l >= len) {
                self.free.remove(&o);
                if l > len {
                    self.free.insert(o + len, l - len);
                }
                return Ok(o);
            }
            self.grow(len)?;
        }
    }

    fn grow(&mut self, need: u64) -> Result<()> {
        let old = self.map_len;
        let new = (old * 2).max(old + need + (64 << 20));
        self.file
            .set_len(new)
            .map_err(|e| WspError::io("grow image", &self.path, e))?;
        let map = map_file(&self.file, new, &self.path)?;
        // SAFETY: the old mapping is ours and nothing borrows it across this call.
        unsafe { libc::munmap(self.map.cast(), old as usize) };
        self.map = map;
        self.map_len = new;
        self.release(old, new - old, false);
        Ok(())
    }

    /// Give an extent back (its pages are punched out so it reads as zeros again).
    pub fn release(&mut self, off: u64, len: u64, punch: bool) {
        if len == 0 {
            return;
        }
        if punch {
            // SAFETY: fallocate on our own descriptor; failure only leaves the bytes in place,
            // and every user of a fresh extent either overwrites it or needs zeros, so:
            let r = unsafe {
                libc::fallocate(
                    self.file.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    off as i64,
                    len as i64,
                )
            };
            if r != 0 {
                // Zero it by hand instead.
                self.bytes_mut(off, len).fill(0);
            }
        }
        let (mut o, mut l) = (off, len);
        if let Some((&po, &pl)) = self.free.range(..o).next_back()
            && po + pl == o
        {
            self.free.remove(&po);
            o = po;
            l += pl;
        }
        if let Some(&nl) = self.free.get(&(o + l)) {
            self.free.remove(&(o + l));
            l += nl;
        }
        self.free.insert(o, l);
    }

    /// Take the image-backed pieces of `[addr, addr+len)` out of the table without freeing
    /// their extents: (address, length, offset) each. A system call that is about to unmap
    /// them takes them at its entry and frees them ([`Image::release_taken`]) at its exit, or
    /// puts them back ([`Image::restore_taken`]) if it failed; so another thread's mapping made
    /// in between can never be freed by mistake, nor be given an extent still mapped.
    pub fn take_range(&mut self, addr: u64, len: u64) -> Vec<(u64, u64, u64)> {
        let end = addr + len;
        let hit: Vec<(u64, u64, u64)> = self
            .segs
            .range(..end)
            .filter(|&(&a, &(l, _))| a + l > addr)
            .map(|(&a, &(l, o))| (a, l, o))
            .collect();
        let mut taken = Vec::new();
        for (a, l, o) in hit {
            self.segs.remove(&a);
            let (cut_a, cut_e) = (a.max(addr), (a + l).min(end));
            if a < cut_a {
                self.segs.insert(a, (cut_a - a, o));
            }
            if cut_e < a + l {
                self.segs.insert(cut_e, (a + l - cut_e, o + (cut_e - a)));
            }
            taken.push((cut_a, cut_e - cut_a, o + (cut_a - a)));
        }
        taken
    }

    /// Drop table entries overlapping `[addr, addr+len)` without freeing their extents (a
    /// leak at worst, never an extent handed out twice).
    pub fn forget_range(&mut self, addr: u64, len: u64) {
        let _ = self.take_range(addr, len);
    }

    /// Free pieces taken by [`Image::take_range`] (their pages are punched out).
    pub fn release_taken(&mut self, taken: &[(u64, u64, u64)]) {
        for &(_, l, o) in taken {
            self.release(o, l, true);
        }
    }

    /// Put pieces taken by [`Image::take_range`] back into the table.
    pub fn restore_taken(&mut self, taken: &[(u64, u64, u64)]) {
        for &(a, l, o) in taken {
            self.segs.insert(a, (l, o));
        }
    }

    /// Make the image-backed pages of `[addr, addr+len)` read as zeros again (what
    /// MADV_DONTNEED does to anonymous memory), keeping them mapped.
    pub fn zero_range(&mut self, addr: u64, len: u64) {
        let end = addr + len;
        let hit: Vec<(u64, u64, u64)> = self
            .segs
            .range(..end)
            .filter(|&(&a, &(l, _))| a + l > addr)
            .map(|(&a, &(l, o))| (a, l, o))
            .collect();
        for (a, l, o) in hit {
            let (cut_a, cut_e) = (a.max(addr), (a + l).min(end));
            let (off, n) = (o + (cut_a - a), cut_e - cut_a);
            // SAFETY: fallocate on our own descriptor; on failure the bytes are zeroed by hand.
            let r = unsafe {
                libc::fallocate(
                    self.file.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    off as i64,
                    n as i64,
                )
            };
            if r != 0 {
                self.bytes_mut(off, n).fill(0);
            }
        }
    }

    /// The runner's view of `[off, off+len)`.
    pub fn bytes_mut(&mut self, off: u64, len: u64) -> &mut [u8] {
        assert!(off + len <= self.map_len, "image range inside the mapping");
        // SAFETY: the range lies inside our mapping (asserted), which lives as long as self.
        unsafe { std::slice::from_raw_parts_mut(self.map.add(off as usize), len as usize) }
    }

    pub fn ptr(&self, off: u64) -> *mut u8 {
        // SAFETY: callers pass offsets inside the mapping; only the address is computed.
        unsafe { self.map.add(off as usize) }
    }

    /// Write back `[off, off+len)` from the caches (no fence).
    pub fn flush(&self, off: u64, len: u64) {
        if off + len <= self.map_len {
            // SAFETY: the range lies inside our live mapping.
            unsafe { pmem::cpu::flush_range(self.ptr(off), len as usize) }
        }
    }

    pub fn write_header(&mut self, h: &Header) -> [u8; HEADER_SIZE] {
        let enc = h.encode();
        self.bytes_mut(0, HEADER_SIZE as u64).copy_from_slice(&enc);
        self.flush(0, HEADER_SIZE as u64);
        enc
    }

    /// Write the metadata; returns (len, crc) or an error when it does not fit.
    pub fn write_meta(&mut self, meta: &Meta) -> Result<(u64, u32)> {
        let bytes = serde_json::to_vec(meta).map_err(|e| WspError::Config {
            what: "metadata",
            expected: "serialisable".into(),
            found: e.to_string(),
        })?;
        if bytes.len() as u64 > META_CAPACITY {
            return Err(WspError::Config {
                what: "metadata size",
                expected: format!("<= {META_CAPACITY} bytes"),
                found: bytes.len().to_string(),
            });
        }
        self.bytes_mut(META_OFFSET, bytes.len() as u64)
            .copy_from_slice(&bytes);
        self.flush(META_OFFSET, bytes.len() as u64);
        Ok((bytes.len() as u64, crc32c::crc32c(&bytes)))
    }

    /// Write the metadata and a header in `state` (marker untouched), fenced.
    pub fn commit(
        &mut self,
        meta: &Meta,
        state: u32,
        exit_status: i32,
    ) -> Result<[u8; HEADER_SIZE]> {
        let (meta_len, meta_crc) = self.write_meta(meta)?;
        pmem::cpu::store_fence();
        let enc = self.write_header(&Header {
            mode: self.mode,
            state,
            counter: meta.counter,
            meta_len,
            meta_crc,
            exit_status,
        });
        pmem::cpu::store_fence();
        Ok(enc)
    }

    pub fn set_marker(&mut self, counter: u64, header: &[u8; HEADER_SIZE]) {
        let m = marker_bytes(counter, Header::crc_of(header));
        self.bytes_mut(MARKER_OFFSET, MARKER_SIZE as u64)
            .copy_from_slice(&m);
        self.flush(MARKER_OFFSET, MARKER_SIZE as u64);
        pmem::cpu::store_fence();
    }

    pub fn clear_marker(&mut self) {
        self.bytes_mut(MARKER_OFFSET, MARKER_SIZE as u64).fill(0);
        self.flush(MARKER_OFFSET, MARKER_SIZE as u64);
        pmem::cpu::store_fence();
    }

    /// The populated (non-hole) parts of `[off, off+len)`, via SEEK_DATA/SEEK_HOLE.
    pub fn data_ranges(&self, off: u64, len: u64) -> Vec<(u64, u64)> {
        let fd = self.file.as_raw_fd();
        let end = off + len;
        let mut out = Vec::new();
        let mut at = off;
        while at < end {
            // SAFETY: lseek on our own descriptor; the offset is just queried.
            let d = unsafe { libc::lseek(fd, at as i64, libc::SEEK_DATA) };
            if d < 0 || d as u64 >= end {
                break;
            }
            // SAFETY: as above.
            let h = unsafe { libc::lseek(fd, d, libc::SEEK_HOLE) };
            let h = if h < 0 { end } else { (h as u64).min(end) };
            out.push((d as u64, h - d as u64));
            at = h;
        }
        out
    }
}

/// `rw-` style protection string for a prot value, and back.
pub(crate) fn prot_str(prot: i32) -> String {
    format!(
        "{}{}{}",
        if prot & libc::PROT_READ != 0 {
            'r'
        } else {
            '-'
        },
        if prot & libc::PROT_WRITE != 0 {
            'w'
        } else {
            '-'
        },
        if prot & libc::PROT_EXEC != 0 {
            'x'
        } else {
            '-'
        }
    )
}

pub(crate) fn prot_parse(s: &str) -> Option<i32> {
    let b = s.as_bytes();
    if b.len() != 3 {
        return None;
    }
    let mut p = 0;
    for (i, (&c, (ch, bit))) in b
        .iter()
        .zip([
            (b'r', libc::PROT_READ),
            (b'w', libc::PROT_WRITE),
            (b'x', libc::PROT_EXEC),
        ])
        .enumerate()
    {
        let _ = i;
        if c == ch {
            p |= bit;
        } else if c != b'-' {
            return None;
        }
    }
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_damage_is_named() {
        let h = Header {
            mode: MODE_IMAGE,
            state: STATE_SAVED,
            counter: 3,
            meta_len: 100,
            meta_crc: 0xdead,
            exit_status: -1,
        };
        let enc = h.encode();
        assert_eq!(Header::decode(&enc).unwrap(), h);
        let mut bad = enc;
        bad[24] ^= 1;
        match Header::decode(&bad) {
            Err(WspError::Damaged { what, .. }) => assert_eq!(what, "header_crc"),
            other => panic!("{other:?}"),
        }
        let mut bad = enc;
        bad[0] = b'X';
        assert!(matches!(
            Header::decode(&bad),
            Err(WspError::Damaged { what: "magic", .. })
        ));
        assert!(Header::decode(&enc[..10]).is_err());
    }

    #[test]
    fn marker_binds_counter_and_header() {
        let h = Header {
            mode: MODE_IMAGE,
            state: STATE_SAVED,
            counter: 5,
            meta_len: 1,
            meta_crc: 1,
            exit_status: 0,
        }
        .encode();
        let m = marker_bytes(5, Header::crc_of(&h));
        assert!(marker_matches(&m, &h, 5));
        assert!(!marker_matches(&m, &h, 6));
        assert!(!marker_matches(&[0u8; MARKER_SIZE], &h, 5));
        let h2 = Header {
            mode: MODE_IMAGE,
            state: STATE_SAVED,
            counter: 5,
            meta_len: 2,
            meta_crc: 1,
            exit_status: 0,
        }
        .encode();
        assert!(!marker_matches(&m, &h2, 5));
    }

    #[test]
    fn extents_are_never_handed_out_twice() {
        let path = std::env::temp_dir().join(format!("wsp-extents-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut img = Image::create(&path, DATA_OFFSET + (16 << 20), MODE_IMAGE).unwrap();
        let a = img.alloc(3 * 4096).unwrap();
        let b = img.alloc(4096).unwrap();
        assert_eq!((a, b), (DATA_OFFSET, DATA_OFFSET + 3 * 4096));
        img.segs.insert(0x10000, (3 * 4096, a));
        img.segs.insert(0x20000, (4096, b));
        // Unmapping the middle page of the first segment splits it.
        let taken = img.take_range(0x11000, 4096);
        assert_eq!(taken, vec![(0x11000, 4096, a + 4096)]);
        assert_eq!(img.segs.get(&0x10000), Some(&(4096, a)));
        assert_eq!(img.segs.get(&0x12000), Some(&(4096, a + 2 * 4096)));
        // Taken but not yet released: not reusable.
        let c = img.alloc(4096).unwrap();
        assert_ne!(c, a + 4096);
        img.restore_taken(&taken);
        assert_eq!(img.segs.len(), 4);
        let taken = img.take_range(0x11000, 4096);
        img.release_taken(&taken);
        assert_eq!(img.alloc(4096).unwrap(), a + 4096, "released, then reused");
        // Growing past the file.
        let big = img.alloc(32 << 20).unwrap();
        assert!(big + (32 << 20) <= img.len());
        drop(img);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn prot_strings() {
        for p in 0..8 {
            assert_eq!(prot_parse(&prot_str(p)), Some(p));
        }
        assert_eq!(prot_parse("rwz"), None);
    }
}
