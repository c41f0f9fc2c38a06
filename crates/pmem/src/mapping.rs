//! A memory-mapped backing file: the one place that maps memory.
//!
//! Soundness rests on three rules, argued in `docs/unsafe.md`:
//! 1. The mapping lives exactly as long as its [`Mapping`]; nothing hands out references into it,
//!    only copies through raw pointers, so no Rust reference ever aliases mapped bytes.
//! 2. The file is locked (`flock`) for as long as it is mapped: exclusively for read-write, shared
//!    for read-only, so cooperating processes never map it for writing at the same time.
//! 3. The file is never shrunk while mapped by us; its size is checked against the header before
//!    any byte past the metadata is touched. Accesses are checked against `len`, the file's
//!    usable length, which grows only after the file has (a growable pool maps more address
//!    space than its file holds, and never touches the part past `len`).

use crate::cpu;
use crate::domain::{Backing, Domain};
use crate::error::{PmemError, Result};
use crate::medium::{Medium, check_range, check_word};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

const TMPFS_MAGIC: i64 = 0x0102_1994;

/// One mapping of one backing file.
#[derive(Debug)]
pub struct Mapping {
    file: File,
    path: PathBuf,
    base: *mut u8,
    /// Bytes of the file that may be accessed (it only grows, by [`Medium::grow`]).
    len: AtomicUsize,
    /// Bytes of address space mapped at `base` (at least `len`; past the file's end touching
    /// them would fault, and nothing does: every access is checked against `len`).
    map_len: usize,
    writable: bool,
    backing: Backing,
    domain: Domain,
    flush: cpu::FlushInstruction,
    failed: AtomicBool,
}

// SAFETY: `base` points to a shared file mapping that is valid for `len` bytes until drop; the
// mapping is not tied to the creating thread, and all access goes through raw copies and atomics
// (see docs/unsafe.md for why concurrent access from several threads is the layers' contract).
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` only exposes copies, atomic word accesses and cache-line flushes.
unsafe impl Sync for Mapping {}

fn last_os_error(what: &'static str, path: &Path) -> PmemError {
    PmemError::io(what, path, std::io::Error::last_os_error())
}

impl Mapping {
    /// Map an existing file. `writable` takes an exclusive lock, otherwise a shared one.
    pub fn open(path: &Path, writable: bool) -> Result<Mapping> {
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(|e| PmemError::io("cannot open", path, e))?;
        Self::from_file(file, path, writable)
    }

    /// Create a new file of `size` bytes (it must not exist), reserve its space and map it.
    pub fn create(path: &Path, size: u64) -> Result<Mapping> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| PmemError::io("cannot create", path, e))?;
        let reserve = || -> Result<Mapping> {
            lock(&file, path, true)?;
            file.set_len(size)
                .map_err(|e| PmemError::io("cannot size", path, e))?;
            // Reserve the blocks now: on tmpfs a store to a page that cannot be allocated later
            // raises SIGBUS, which we could not turn into an error.
            let len = libc::off_t::try_from(size).map_err(|_| PmemError::Invalid {
                what: "size",
                reason: format!("{size} does not fit in off_t"),
            })?;
            // SAFETY: plain system call on a descriptor we own.
            let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
            if rc != 0 && rc != libc::EOPNOTSUPP && rc != libc::EINVAL {
                return Err(PmemError::io(
                    "cannot reserve space for",
                    path,
                    std::io::Error::from_raw_os_error(rc),
                ));
            }
            Self::from_file(
                file.try_clone()
                    .map_err(|e| PmemError::io("cannot dup", path, e))?,
                path,
                true,
            )
        };
        match reserve() {
            Ok(m) => Ok(m),
            Err(e) => {
                let _ = std::fs::remove_file(path);
                Err(e)
            }
        }
    }

    fn from_file(file: File, path: &Path, writable: bool) -> Result<Mapping> {
        let meta = regular_file_metadata(&file, path)?;
        lock(&file, path, writable)?;
        let len = usize::try_from(meta.len()).map_err(|_| PmemError::Invalid {
            what: "file size",
            reason: format!("{} bytes does not fit in memory", meta.len()),
        })?;
        if len == 0 {
            return Err(PmemError::NotAPool {
                path: path.into(),
                reason: "the file is empty".into(),
            });
        }
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        let fd = file.as_raw_fd();
        let mut backing = Backing::Dax;
        // SAFETY: mapping a file we hold open, at a kernel-chosen address; the result is checked.
        let mut base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            // No DAX: an ordinary shared mapping.
            backing = if on_tmpfs(&file) {
                Backing::Tmpfs
            } else {
                Backing::PageCache
            };
            // SAFETY: as above.
            base = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0) };
            if base == libc::MAP_FAILED {
                return Err(last_os_error("cannot map", path));
            }
        }
        Ok(Mapping {
            file,
            path: path.into(),
            base: base.cast(),
            len: AtomicUsize::new(len),
            map_len: len,
            writable,
            backing,
            domain: backing.detected_domain(),
            flush: cpu::flush_instruction(),
            failed: AtomicBool::new(false),
        })
    }

    /// Map `bytes` of address space (at least the file's length) so that the file can later
    /// grow up to that size in place ([`Medium::grow`]) without moving the mapping. The old
    /// mapping is replaced by a new one of the same file; with `&mut self` no copy in flight
    /// uses it.
    pub fn reserve(&mut self, bytes: usize) -> Result<()> {
        if bytes <= self.map_len {
            return Ok(());
        }
        let prot = if self.writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        let flags = if self.backing == Backing::Dax {
            libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC
        } else {
            libc::MAP_SHARED
        };
        // SAFETY: a new shared mapping of the file we hold open, at a kernel-chosen address,
        // checked below; the old mapping stays valid until it is unmapped after this succeeds.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                prot,
                flags,
                self.file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(last_os_error(
                "cannot reserve address space for",
                &self.path,
            ));
        }
        // SAFETY: `base`/`map_len` are exactly what the earlier mmap returned, and `&mut self`
        // means no access through it is in flight (rule 1: nothing refers into it).
        unsafe { libc::munmap(self.base.cast(), self.map_len) };
        self.base = base.cast();
        self.map_len = bytes;
        Ok(())
    }

    /// Bytes of address space reserved for growth.
    pub fn reserved(&self) -> usize {
        self.map_len
    }

    /// Choose the persistence domain (the pool does this after reading its header).
    pub fn set_domain(&mut self, domain: Domain) {
        assert!(
            domain != Domain::Sim,
            "a file mapping cannot run in the simulator's domain"
        );
        self.domain = domain;
    }

    /// Send every write-back, fence, non-temporal copy and msync of this mapping to the
    /// recorded medium's simulator (only [`crate::recorded::Recorded`] does this).
    pub(crate) fn record(&mut self) {
        self.flush = cpu::FlushInstruction::Recorded;
    }

    /// The backing file (held open, and locked, for as long as it is mapped).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The backing file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Was the file mapped for writing?
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// Base address, for layers that must hand the mapping to the kernel (write tracking).
    /// Dereferencing it is the caller's unsafe business.
    pub fn base_ptr(&self) -> *mut u8 {
        self.base
    }

    /// Ask the kernel not to back `[offset, offset + len)` with huge pages, so write tracking
    /// works per 4 KiB page. The range is widened to whole pages.
    pub fn advise_no_huge_pages(&self, offset: usize, len: usize) -> Result<()> {
        check_range(offset, len, self.len());
        let start = offset & !(crate::layout::PAGE_SIZE - 1);
        // SAFETY: the range lies inside our mapping; madvise does not change its contents.
        let rc = unsafe {
            libc::madvise(
                self.base.add(start).cast(),
                offset + len - start,
                libc::MADV_NOHUGEPAGE,
            )
        };
        if rc != 0 {
            return Err(last_os_error(
                "madvise(MADV_NOHUGEPAGE) failed on",
                &self.path,
            ));
        }
        Ok(())
    }

    /// `msync(MS_SYNC)` the pages under `[offset, offset + len)`. A failure latches the mapping:
    /// the kernel may have dropped the pages it could not write, so nothing after it is trusted.
    fn msync_range(&self, offset: usize, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let start = offset & !(crate::layout::PAGE_SIZE - 1);
        let length = offset + len - start;
        #[cfg(feature = "canary")]
        let length =
            if crate::recorded::canary::active(crate::recorded::canary::Mutation::MsyncShort) {
                len
            } else {
                length
            };
        // SAFETY: a page-aligned sub-range of our mapping (callers checked the range).
        let rc = unsafe { libc::msync(self.base.add(start).cast(), length, libc::MS_SYNC) };
        if rc != 0 {
            self.failed.store(true, Ordering::Release);
            return Err(last_os_error("msync failed on", &self.path));
        }
        if self.flush == cpu::FlushInstruction::Recorded {
            // The recorded medium: the simulator writes back exactly the pages just synced (and
            // may fail that msync, or cut power there), latching as a real failure would.
            let synced = crate::recorded::msynced(self.base as usize + start, length);
            if synced.is_err() {
                self.failed.store(true, Ordering::Release);
            }
            return synced;
        }
        Ok(())
    }
}

/// The file's metadata, or `NotAPool` if it is not a regular file (a directory, a device...).
pub(crate) fn regular_file_metadata(file: &File, path: &Path) -> Result<std::fs::Metadata> {
    let meta = file
        .metadata()
        .map_err(|e| PmemError::io("cannot stat", path, e))?;
    if !meta.is_file() {
        return Err(PmemError::NotAPool {
            path: path.into(),
            reason: "not a regular file".into(),
        });
    }
    Ok(meta)
}

fn lock(file: &File, path: &Path, exclusive: bool) -> Result<()> {
    let op = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    } | libc::LOCK_NB;
    // SAFETY: flock on a descriptor we own; released when the file is closed.
    if unsafe { libc::flock(file.as_raw_fd(), op) } != 0 {
        let err = std::io::Error::last_os_error();
        return Err(if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            PmemError::Locked(path.into())
        } else {
            PmemError::io("cannot lock", path, err)
        });
    }
    Ok(())
}

fn on_tmpfs(file: &File) -> bool {
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: fstatfs fills the struct on success; we read it only then.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), st.as_mut_ptr()) };
    // SAFETY: rc == 0 means the kernel initialised `st`.
    rc == 0 && unsafe { st.assume_init() }.f_type == TMPFS_MAGIC
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly what mmap returned; no references into the mapping
        // exist (rule 1), so unmapping cannot leave one dangling.
        unsafe { libc::munmap(self.base.cast(), self.map_len) };
    }
}

impl Medium for Mapping {
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
        self.path.clone()
    }
    #[inline]
    fn read(&self, offset: usize, buf: &mut [u8]) {
        check_range(offset, buf.len(), self.len());
        // SAFETY: the source range is inside the live mapping (checked above) and cannot overlap
        // `buf`, which is ordinary memory.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.add(offset), buf.as_mut_ptr(), buf.len())
        };
    }
    #[inline]
    fn write(&self, offset: usize, data: &[u8]) {
        check_range(offset, data.len(), self.len());
        assert!(
            self.writable,
            "write to a read-only mapping of {}",
            self.path.display()
        );
        // SAFETY: the destination is inside the live, writable mapping; `data` is ordinary memory.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.add(offset), data.len()) };
    }
    fn write_nontemporal(&self, offset: usize, data: &[u8]) {
        check_range(offset, data.len(), self.len());
        assert!(
            self.writable,
            "write to a read-only mapping of {}",
            self.path.display()
        );
        // SAFETY: as for `write`; copy_nontemporal stays inside the two ranges, and `self.flush`
        // came from detection (or is the recorded medium's).
        unsafe {
            cpu::copy_nontemporal_with(self.flush, self.base.add(offset), data.as_ptr(), data.len())
        };
        if self.domain == Domain::Msync {
            // Non-temporal stores reach the page cache, not the disk: msync now, so the copy is
            // durable by the next fence as the trait promises. A failure latches the mapping and
            // that fence reports it.
            // The error is latched; the next fence reports it.
            let _ = self.msync_range(offset, data.len());
        }
    }
    fn write_nontemporal_crc32c(&self, offset: usize, data: &[u8], crc: u32) -> u32 {
        if self.domain == Domain::Msync {
            self.write_nontemporal(offset, data);
            return crc32c::crc32c_append(crc, data);
        }
        check_range(offset, data.len(), self.len());
        assert!(
            self.writable,
            "write to a read-only mapping of {}",
            self.path.display()
        );
        // SAFETY: as for `write_nontemporal`.
        unsafe {
            cpu::copy_nontemporal_crc32c_with(
                self.flush,
                self.base.add(offset),
                data.as_ptr(),
                data.len(),
                crc,
            )
        }
    }
    fn crc32c(&self, offset: usize, len: usize, crc: u32) -> u32 {
        check_range(offset, len, self.len());
        // SAFETY: the range is inside the live mapping (checked above), which stays mapped for
        // as long as `self` is borrowed; `crc32c_raw` only loads through the raw pointer (no
        // reference to mapped bytes is formed), as `read` copies through it.
        match unsafe { cpu::crc32c_raw(crc, self.base.add(offset), len) } {
            Some(c) => c,
            None => crate::medium::crc32c_by_reads(self, offset, len, crc),
        }
    }
    #[inline]
    fn prefetch(&self, offset: usize, len: usize) {
        if offset.checked_add(len).is_none_or(|end| end > self.len()) {
            return;
        }
        cpu::prefetch_range(self.base.wrapping_add(offset), len);
    }
    fn populate(&self, offset: usize, len: usize) {
        if len == 0 || offset.checked_add(len).is_none_or(|end| end > self.len()) {
            return;
        }
        /// `MADV_POPULATE_READ` (Linux 5.14); older kernels refuse it with `EINVAL`, and the
        /// reads then fault as before.
        const MADV_POPULATE_READ: libc::c_int = 22;
        let start = offset & !(crate::layout::PAGE_SIZE - 1);
        // SAFETY: the range lies inside our live mapping; populating page tables for reading
        // changes no byte of it. A failure (an old kernel, no memory) only leaves the faults.
        let _ = unsafe {
            libc::madvise(
                self.base.add(start).cast(),
                offset + len - start,
                MADV_POPULATE_READ,
            )
        };
    }
    #[inline]
    fn load_u64(&self, offset: usize) -> u64 {
        check_word(offset, self.len());
        // SAFETY: in range and 8-byte aligned (the mapping is page aligned); the word is only
        // accessed atomically or by whole-range copies; only a relaxed load touches it, which is
        // allowed on read-only memory.
        let v =
            unsafe { AtomicU64::from_ptr(self.base.add(offset).cast()) }.load(Ordering::Relaxed);
        // A relaxed load is what the standard library allows on read-only mappings; the fence
        // gives it acquire semantics.
        std::sync::atomic::fence(Ordering::Acquire);
        v
    }
    #[inline]
    fn store_u64(&self, offset: usize, value: u64) {
        check_word(offset, self.len());
        assert!(
            self.writable,
            "write to a read-only mapping of {}",
            self.path.display()
        );
        // SAFETY: as for `load_u64`, and the mapping is writable.
        unsafe { AtomicU64::from_ptr(self.base.add(offset).cast()) }.store(value, Ordering::Release)
    }
    #[inline]
    fn flush(&self, offset: usize, len: usize) -> Result<()> {
        check_range(offset, len, self.len());
        match self.domain {
            // SAFETY: the range is inside the live mapping; `self.flush` came from detection.
            Domain::Adr => unsafe { cpu::flush_range_with(self.flush, self.base.add(offset), len) },
            Domain::Eadr | Domain::Sim => {}
            Domain::Msync => {
                if self.failed.load(Ordering::Acquire) {
                    return Err(PmemError::Failed);
                }
                self.msync_range(offset, len)?;
            }
        }
        Ok(())
    }
    fn write_back(&self, offset: usize, len: usize) -> Result<()> {
        check_range(offset, len, self.len());
        match self.domain {
            // The write-back the critical path skips in eadr (flush on fail): the save path and
            // its marker need the lines in the medium even when the caches' energy runs out.
            Domain::Adr | Domain::Eadr => {
                // SAFETY: the range is inside the live mapping; `self.flush` came from detection.
                unsafe { cpu::flush_range_with(self.flush, self.base.add(offset), len) }
            }
            Domain::Sim => {}
            Domain::Msync => {
                if self.failed.load(Ordering::Acquire) {
                    return Err(PmemError::Failed);
                }
                self.msync_range(offset, len)?;
            }
        }
        Ok(())
    }
    #[inline]
    fn fence(&self) -> Result<()> {
        match self.domain {
            Domain::Adr | Domain::Eadr => cpu::fence_with(self.flush)?,
            Domain::Msync | Domain::Sim => {
                if self.failed.load(Ordering::Acquire) {
                    return Err(PmemError::Failed);
                }
            }
        }
        Ok(())
    }
    #[inline]
    fn persist(&self, offset: usize, len: usize) -> Result<()> {
        // The hot path of every layer: one range check and one domain dispatch.
        if self.domain == Domain::Adr {
            check_range(offset, len, self.len());
            // SAFETY: the range is inside the live mapping; `self.flush` came from detection.
            unsafe { cpu::flush_range_with(self.flush, self.base.add(offset), len) };
            return cpu::fence_with(self.flush);
        }
        self.flush(offset, len)?;
        self.fence()
    }
    fn grow(&self, len: usize) -> Result<()> {
        let old = self.len();
        if len <= old {
            return Ok(());
        }
        if !self.writable {
            return Err(PmemError::ReadOnly);
        }
        if len > self.map_len {
            return Err(PmemError::NoSpace(format!(
                "{} cannot grow to {len} bytes: {} bytes of address space are reserved for it",
                self.path.display(),
                self.map_len
            )));
        }
        let found = regular_file_metadata(&self.file, &self.path)?.len();
        if found < len as u64 {
            self.file
                .set_len(len as u64)
                .map_err(|e| PmemError::io("cannot grow", &self.path, e))?;
        }
        // Reserve the new blocks (see `create`: a store to an unbacked page on tmpfs raises
        // SIGBUS), then make the new size durable before any layer writes past the old end.
        let (at, more) = (old as libc::off_t, (len - old) as libc::off_t);
        // SAFETY: plain system call on a descriptor we own.
        let rc = unsafe { libc::posix_fallocate(self.file.as_raw_fd(), at, more) };
        if rc != 0 && rc != libc::EOPNOTSUPP && rc != libc::EINVAL {
            return Err(PmemError::io(
                "cannot reserve space for",
                &self.path,
                std::io::Error::from_raw_os_error(rc),
            ));
        }
        self.file
            .sync_all()
            .map_err(|e| PmemError::io("cannot sync the new size of", &self.path, e))?;
        self.len.store(len, Ordering::Release);
        Ok(())
    }
    fn discard(&self, offset: usize, len: usize) -> Result<()> {
        check_range(offset, len, self.len());
        if !self.writable || len == 0 {
            return Ok(());
        }
        // SAFETY: plain system call on a descriptor we own; the range is in the file, and the
        // caller promises nothing of value is there (no reference into the mapping exists at
        // all, rule 1), so pages reading as zero afterwards break nothing.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        // A file system that cannot punch holes keeps the blocks: only space is lost.
        let _ = rc;
        Ok(())
    }
    fn back(&self, offset: usize, len: usize) -> Result<()> {
        check_range(offset, len, self.len());
        if !self.writable || len == 0 {
            return Ok(());
        }
        // SAFETY: plain system call on a descriptor we own (see `create` for why blocks are
        // reserved before stores reach them).
        let rc = unsafe {
            libc::posix_fallocate(
                self.file.as_raw_fd(),
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if rc != 0 && rc != libc::EOPNOTSUPP && rc != libc::EINVAL {
            return Err(PmemError::io(
                "cannot reserve space for",
                &self.path,
                std::io::Error::from_raw_os_error(rc),
            ));
        }
        Ok(())
    }
    fn inject(&self, offset: usize, data: &[u8]) -> Result<()> {
        assert!(self.writable, "fault injection needs a writable mapping");
        check_range(offset, data.len(), self.len());
        // Through the file, not through our mapping: the kernel copies into the shared page
        // without going through this process's page tables, so write tracking (userfaultfd,
        // mprotect) does not see the store, as a firmware fault would not be seen. The mapping
        // shows the new bytes at once (same page).
        use std::os::unix::fs::FileExt;
        self.file
            .write_all_at(data, offset as u64)
            .map_err(|e| PmemError::io("fault injection: cannot write", &self.path, e))?;
        if self.backing == Backing::PageCache {
            self.file
                .sync_data()
                .map_err(|e| PmemError::io("fault injection: cannot sync", &self.path, e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_path(tag: &str) -> PathBuf {
        let dir = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        dir.join(format!("kavach-mapping-{tag}-{}", std::process::id()))
    }

    #[test]
    fn second_writer_is_refused_and_reader_waits_for_writer() {
        let p = temp_path("lock");
        let _ = std::fs::remove_file(&p);
        let m = Mapping::create(&p, 1 << 16).unwrap();
        assert!(matches!(Mapping::open(&p, true), Err(PmemError::Locked(_))));
        assert!(matches!(
            Mapping::open(&p, false),
            Err(PmemError::Locked(_))
        ));
        drop(m);
        let r1 = Mapping::open(&p, false).unwrap();
        let r2 = Mapping::open(&p, false).unwrap();
        assert!(matches!(Mapping::open(&p, true), Err(PmemError::Locked(_))));
        drop((r1, r2));
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn bytes_written_through_one_mapping_are_in_the_file() {
        let p = temp_path("rw");
        let _ = std::fs::remove_file(&p);
        let m = Mapping::create(&p, 1 << 16).unwrap();
        m.write(4096, b"hello");
        m.persist(4096, 5).unwrap();
        m.store_u64(8192, 0xdead_beef);
        m.write_nontemporal(100, &[7u8; 300]);
        m.fence().unwrap();
        assert_eq!(m.load_u64(8192), 0xdead_beef);
        m.advise_no_huge_pages(4096, 8192).unwrap();
        drop(m);
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[4096..4101], b"hello");
        assert!(bytes[100..400].iter().all(|&b| b == 7));
        assert!(matches!(
            Mapping::create(&p, 1 << 16),
            Err(PmemError::Io { .. })
        ));
        assert!(
            p.exists(),
            "a failed create must not remove someone else's file"
        );
        std::fs::remove_file(&p).unwrap();
    }

    /// Populating pages is a hint: the contents stay, ranges past the end or of no length are
    /// ignored, and writes after it land as usual.
    #[test]
    fn populate_changes_nothing_and_ignores_ranges_outside() {
        let p = temp_path("populate");
        let _ = std::fs::remove_file(&p);
        let m = Mapping::create(&p, 1 << 16).unwrap();
        m.write(5000, b"kept");
        m.persist(5000, 4).unwrap();
        m.populate(0, 1 << 16);
        m.populate(4097, 10);
        m.populate(1 << 16, 1);
        m.populate(100, usize::MAX);
        m.populate(0, 0);
        let mut b = [0u8; 4];
        m.read(5000, &mut b);
        assert_eq!(&b, b"kept");
        m.write(60_000, b"after");
        m.persist(60_000, 5).unwrap();
        drop(m);
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[5000..5004], b"kept");
        assert_eq!(&bytes[60_000..60_005], b"after");
        assert!(bytes[..5000].iter().all(|&x| x == 0));
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn msync_domain_makes_nontemporal_copies_and_flushes_reach_the_file() {
        // A file in the page cache of a disk (not tmpfs), as the msync domain expects.
        let p = std::env::temp_dir().join(format!("kavach-mapping-msync-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        let mut m = Mapping::create(&p, 1 << 16).unwrap();
        m.set_domain(Domain::Msync);
        m.write_nontemporal(5000, &[9u8; 3000]);
        m.fence().unwrap();
        m.write(100, b"msync");
        m.persist(100, 5).unwrap();
        drop(m);
        let bytes = std::fs::read(&p).unwrap();
        assert!(bytes[5000..8000].iter().all(|&b| b == 9));
        assert_eq!(&bytes[100..105], b"msync");
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn empty_files_and_directories_are_not_pools() {
        let p = temp_path("empty");
        std::fs::write(&p, b"").unwrap();
        assert!(matches!(
            Mapping::open(&p, false),
            Err(PmemError::NotAPool { .. })
        ));
        std::fs::remove_file(&p).unwrap();
        assert!(matches!(
            Mapping::open(Path::new("/"), false),
            Err(PmemError::NotAPool { .. })
        ));
    }
}
