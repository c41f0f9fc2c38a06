//! The primary backend: userfaultfd write-protection in asynchronous mode, read and re-armed with
//! the `PAGEMAP_SCAN` ioctl (Linux 6.7 and later).
//!
//! `arm` write-protects every page of the range. The first store to a protected page takes a
//! minor fault that the kernel resolves by itself (asynchronous mode: no message, no handler
//! thread, no signal): it clears the page's protection, which from then on reads as
//! `PAGE_IS_WRITTEN`. `collect` asks `PAGEMAP_SCAN` for the written pages of a batch and, in the
//! same walk under the page-table lock, write-protects exactly the pages it reports
//! (`PM_SCAN_WP_MATCHING`). A store that lands after a page was reported faults again and is
//! reported by a later `collect`.
//!
//! What it sees: every store through any mapping of the range in this process, including the
//! kernel's own stores into it on our behalf (`read(2)` into a tracked page is reported). What
//! it does not see: writes to the file that do not go through this mapping (`pwrite(2)`, another
//! process, DMA). That is what fault injection relies on.
//!
//! Measured here (Linux 6.18 guest, 2 vCPUs, /dev/shm): first store to a page per epoch about
//! 0.8 µs, later stores free; `collect` of a clean 512-page batch 1.4 µs, of a fully written one
//! 24 µs (12 ms/GiB); `arm` about 20 ms/GiB.
//!
//! Granularity is the page-table entry: the range is advised `MADV_NOHUGEPAGE` so that it stays
//! 4 KiB. The kernel's UAPI headers on the build machine may predate 6.7, so the structures and
//! ioctl numbers are defined here; a unit test recomputes the numbers.

use super::{
    BATCH_PAGES, BatchBits, PAGE_BYTES, TrackError, Tracker, TrackerKind, check_batch,
    check_mapping_range,
};
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, OnceLock};

const KIND: &str = "uffd";

// ioctl request numbers: direction (2 bits) | argument size (14 bits) | type (8 bits) | number.
const IOC_WRITE: u64 = 1;
const IOC_READ: u64 = 2;

const fn ioc(dir: u64, ty: u8, nr: u8, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | ((ty as u64) << 8) | nr as u64
}

/// `linux/userfaultfd.h`: the API version handshake.
#[repr(C)]
#[derive(Debug, Default)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

/// `linux/userfaultfd.h`: an address range.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct UffdioRange {
    start: u64,
    len: u64,
}

/// `linux/userfaultfd.h`: register a range.
#[repr(C)]
#[derive(Debug, Default)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

/// `linux/userfaultfd.h`: set or clear write protection on a range.
#[repr(C)]
#[derive(Debug, Default)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

/// `linux/fs.h` (6.7): the `PAGEMAP_SCAN` request.
#[repr(C)]
#[derive(Debug, Default)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `linux/fs.h` (6.7): one run of pages with the same categories, `[start, end)`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

const UFFDIO: u8 = 0xAA;
const UFFDIO_API: u64 = ioc(IOC_READ | IOC_WRITE, UFFDIO, 0x3F, size_of::<UffdioApi>());
const UFFDIO_REGISTER: u64 = ioc(
    IOC_READ | IOC_WRITE,
    UFFDIO,
    0x00,
    size_of::<UffdioRegister>(),
);
const UFFDIO_UNREGISTER: u64 = ioc(IOC_READ, UFFDIO, 0x01, size_of::<UffdioRange>());
const UFFDIO_WRITEPROTECT: u64 = ioc(
    IOC_READ | IOC_WRITE,
    UFFDIO,
    0x06,
    size_of::<UffdioWriteprotect>(),
);
/// Bit of `UffdioRegister::ioctls` saying `UFFDIO_WRITEPROTECT` is allowed on the range.
const UFFDIO_WRITEPROTECT_BIT: u64 = 1 << 0x06;
const PAGEMAP_SCAN: u64 = ioc(IOC_READ | IOC_WRITE, b'f', 16, size_of::<PmScanArg>());

const UFFD_API: u64 = 0xAA;
/// `userfaultfd(2)` flag: handle only faults from user mode (allowed without privilege).
const UFFD_USER_MODE_ONLY: libc::c_int = 1;
const UFFD_FEATURE_WP_HUGETLBFS_SHMEM: u64 = 1 << 12;
const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
const FEATURES: u64 =
    UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED | UFFD_FEATURE_WP_HUGETLBFS_SHMEM;
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;

const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;
const PAGE_IS_WRITTEN: u64 = 1 << 1;

/// Regions one `PAGEMAP_SCAN` call can return for a batch: runs of written pages are separated
/// by clean ones, so a batch holds at most half as many runs as pages (rounded up). With this
/// many the vector never fills; the resume path exists for robustness and is unit-tested.
const REGIONS_PER_BATCH: usize = (BATCH_PAGES as usize).div_ceil(2);

/// Tracks a range with userfaultfd asynchronous write-protection and `PAGEMAP_SCAN`.
#[derive(Debug)]
pub struct UffdTracker {
    /// The userfaultfd the range is registered with.
    uffd: OwnedFd,
    /// `/proc/self/pagemap`, for `PAGEMAP_SCAN`.
    pagemap: File,
    /// First address of the range (page-aligned). Never dereferenced here: only handed to the
    /// kernel.
    start: u64,
    pages: u64,
    /// The mapping, when the tracker was made by [`UffdTracker::for_mapping`]: held so that the
    /// range stays mapped as long as the tracker exists.
    _owner: Option<Arc<pmem::Mapping>>,
}

impl UffdTracker {
    /// Track `[base, base + len)`, armed (every page clean).
    ///
    /// Fails with a [`TrackError`] when the kernel lacks asynchronous write-protection or
    /// `PAGEMAP_SCAN`, when the range is already registered with another userfaultfd, or when
    /// it is not page-aligned.
    ///
    /// # Safety
    ///
    /// `base` is page-aligned, `len` a non-zero multiple of 4096, and `[base, base + len)` is
    /// part of one or more live `MAP_SHARED` mappings (of tmpfs, a memfd, or a file system that
    /// allows asynchronous write-protection) that stay mapped, unchanged, until the tracker is
    /// dropped. The tracker only passes the range to the kernel; it never reads or writes it.
    /// (Unmapping early does not corrupt memory, but the tracker would then report and
    /// write-protect whatever is mapped there later.)
    pub unsafe fn new(base: *mut u8, len: usize) -> Result<UffdTracker, TrackError> {
        let start = base as usize;
        if len == 0 || start % PAGE_BYTES != 0 || len % PAGE_BYTES != 0 {
            return Err(TrackError::invalid(
                KIND,
                format!("range {start:#x}+{len:#x} is empty or not page-aligned"),
            ));
        }
        // SAFETY: advice on a range the caller guarantees is mapped; MADV_NOHUGEPAGE changes how
        // it is backed, never its contents.
        if unsafe { libc::madvise(base.cast(), len, libc::MADV_NOHUGEPAGE) } != 0 {
            return Err(TrackError::last_os(KIND, "madvise(MADV_NOHUGEPAGE)"));
        }
        // SAFETY: userfaultfd(2) takes only flags and returns a new descriptor or -1.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_userfaultfd,
                libc::O_CLOEXEC | libc::O_NONBLOCK | UFFD_USER_MODE_ONLY,
            )
        };
        if fd < 0 {
            return Err(TrackError::last_os(KIND, "userfaultfd"));
        }
        // SAFETY: `fd` is a descriptor the kernel just created for us and nothing else owns.
        let uffd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };

        let mut api = UffdioApi {
            api: UFFD_API,
            features: FEATURES,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_API reads and writes one `UffdioApi`, which lives for the call.
        if unsafe { libc::ioctl(uffd.as_raw_fd(), UFFDIO_API as libc::Ioctl, &mut api) } != 0 {
            return Err(TrackError::last_os(
                KIND,
                "UFFDIO_API with asynchronous write-protection",
            ));
        }
        if api.features & FEATURES != FEATURES {
            return Err(TrackError {
                kind: KIND,
                what: format!("UFFDIO_API granted features {:#x}", api.features),
                error: std::io::ErrorKind::Unsupported.into(),
            });
        }

        let range = UffdioRange {
            start: start as u64,
            len: len as u64,
        };
        let mut register = UffdioRegister {
            range,
            mode: UFFDIO_REGISTER_MODE_WP,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER reads and writes one `UffdioRegister`; registering changes how
        // the kernel resolves write faults in the range, not its contents.
        if unsafe {
            libc::ioctl(
                uffd.as_raw_fd(),
                UFFDIO_REGISTER as libc::Ioctl,
                &mut register,
            )
        } != 0
        {
            return Err(TrackError::last_os(KIND, "UFFDIO_REGISTER (write-protect)"));
        }
        let pagemap = match File::open("/proc/self/pagemap") {
            Ok(file) => file,
            Err(error) => {
                return Err(TrackError {
                    kind: KIND,
                    what: "open /proc/self/pagemap".into(),
                    error,
                });
            }
        };
        let tracker = UffdTracker {
            uffd,
            pagemap,
            start: start as u64,
            pages: (len / PAGE_BYTES) as u64,
            _owner: None,
        };
        // From here on, dropping `tracker` unregisters the range.
        if register.ioctls & UFFDIO_WRITEPROTECT_BIT == 0 {
            return Err(TrackError {
                kind: KIND,
                what: "the range does not allow UFFDIO_WRITEPROTECT".into(),
                error: std::io::ErrorKind::Unsupported.into(),
            });
        }
        tracker.arm()?;
        // Fail now, not at the first collect, if PAGEMAP_SCAN is missing or refuses the range.
        let mut bits = [0; super::BATCH_WORDS];
        tracker.peek(0, (tracker.pages.min(BATCH_PAGES as u64)) as u32, &mut bits)?;
        Ok(tracker)
    }

    /// Track `[offset, offset + len)` of `mapping` (page-aligned, inside the mapping, which must
    /// be writable), keeping the mapping alive as long as the tracker.
    pub fn for_mapping(
        mapping: Arc<pmem::Mapping>,
        offset: usize,
        len: usize,
    ) -> Result<UffdTracker, TrackError> {
        check_mapping_range(KIND, &mapping, offset, len)?;
        // SAFETY: the range lies inside the mapping (checked above), which is a MAP_SHARED
        // mapping of a whole file made by `pmem::Mapping`; the tracker holds an `Arc` of it, so
        // it stays mapped until the tracker is dropped, and `Mapping` never remaps it.
        let mut tracker = unsafe { UffdTracker::new(mapping.base_ptr().add(offset), len)? };
        tracker._owner = Some(mapping);
        Ok(tracker)
    }

    fn range(&self) -> UffdioRange {
        UffdioRange {
            start: self.start,
            len: self.pages * PAGE_BYTES as u64,
        }
    }

    /// `PAGEMAP_SCAN` for the written pages of `[first, first + count)` with `flags`, resuming
    /// at `walk_end` whenever the region vector fills. Sets the pages' bits in `out`.
    fn scan(
        &self,
        first: u64,
        count: u32,
        flags: u64,
        regions: &mut [PageRegion],
        out: &mut BatchBits,
    ) -> Result<(), TrackError> {
        out.fill(0);
        if count == 0 {
            return Ok(());
        }
        assert!(!regions.is_empty());
        let start = self.start + first * PAGE_BYTES as u64;
        let end = start + count as u64 * PAGE_BYTES as u64;
        let mut arg = PmScanArg {
            size: size_of::<PmScanArg>() as u64,
            flags,
            start,
            end,
            walk_end: 0,
            vec: regions.as_mut_ptr() as u64,
            vec_len: regions.len() as u64,
            max_pages: 0,
            category_inverted: 0,
            category_mask: PAGE_IS_WRITTEN,
            category_anyof_mask: 0,
            return_mask: PAGE_IS_WRITTEN,
        };
        // Each call either finishes the range or fills the vector, which takes at least one
        // page per call: at most `count` calls.
        for _ in 0..count {
            // SAFETY: PAGEMAP_SCAN reads `arg`, writes its `walk_end`, and writes at most
            // `vec_len` `PageRegion`s to `vec`, which points to `regions` (borrowed mutably for
            // the call). With PM_SCAN_WP_MATCHING it write-protects pages of our registered range;
            // that changes protection, never contents.
            let filled = unsafe {
                libc::ioctl(
                    self.pagemap.as_raw_fd(),
                    PAGEMAP_SCAN as libc::Ioctl,
                    &mut arg,
                )
            };
            if filled < 0 {
                return Err(TrackError::last_os(KIND, "PAGEMAP_SCAN"));
            }
            let filled = (filled as usize).min(regions.len());
            for region in &regions[..filled] {
                if region.start < arg.start
                    || region.end > end
                    || region.start >= region.end
                    || region.start % PAGE_BYTES as u64 != 0
                    || region.end % PAGE_BYTES as u64 != 0
                {
                    return Err(TrackError {
                        kind: KIND,
                        what: format!(
                            "PAGEMAP_SCAN returned region {:#x}..{:#x} outside {:#x}..{end:#x}",
                            region.start, region.end, arg.start
                        ),
                        error: std::io::ErrorKind::InvalidData.into(),
                    });
                }
                let from = (region.start - start) / PAGE_BYTES as u64;
                let to = (region.end - start) / PAGE_BYTES as u64;
                for page in from..to {
                    out[(page / 64) as usize] |= 1 << (page % 64);
                }
            }
            if arg.walk_end >= end {
                return Ok(());
            }
            if arg.walk_end <= arg.start || arg.walk_end % PAGE_BYTES as u64 != 0 {
                return Err(TrackError {
                    kind: KIND,
                    what: format!(
                        "PAGEMAP_SCAN stopped at {:#x} without progress from {:#x}",
                        arg.walk_end, arg.start
                    ),
                    error: std::io::ErrorKind::InvalidData.into(),
                });
            }
            arg.start = arg.walk_end;
        }
        Err(TrackError {
            kind: KIND,
            what: format!("PAGEMAP_SCAN did not finish {count} pages in {count} calls"),
            error: std::io::ErrorKind::InvalidData.into(),
        })
    }
}

impl Tracker for UffdTracker {
    fn kind(&self) -> TrackerKind {
        TrackerKind::Uffd
    }

    fn pages(&self) -> u64 {
        self.pages
    }

    fn arm(&self) -> Result<(), TrackError> {
        let mut protect = UffdioWriteprotect {
            range: self.range(),
            mode: UFFDIO_WRITEPROTECT_MODE_WP,
        };
        // SAFETY: UFFDIO_WRITEPROTECT reads one `UffdioWriteprotect` (and may write nothing
        // back); it write-protects our registered range, which changes protection, not contents.
        let rc = unsafe {
            libc::ioctl(
                self.uffd.as_raw_fd(),
                UFFDIO_WRITEPROTECT as libc::Ioctl,
                &mut protect,
            )
        };
        if rc != 0 {
            return Err(TrackError::last_os(KIND, "UFFDIO_WRITEPROTECT"));
        }
        Ok(())
    }

    fn collect(&self, first: u64, count: u32, out: &mut BatchBits) -> Result<(), TrackError> {
        check_batch(KIND, self.pages, first, count)?;
        let mut regions = [PageRegion::default(); REGIONS_PER_BATCH];
        self.scan(
            first,
            count,
            PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
            &mut regions,
            out,
        )
    }

    fn peek(&self, first: u64, count: u32, out: &mut BatchBits) -> Result<(), TrackError> {
        check_batch(KIND, self.pages, first, count)?;
        let mut regions = [PageRegion::default(); REGIONS_PER_BATCH];
        self.scan(first, count, PM_SCAN_CHECK_WPASYNC, &mut regions, out)
    }

    /// Nothing to do: the kernel sees the stores.
    fn mark(&self, _first: u64, _count: u64) {}
}

impl Drop for UffdTracker {
    fn drop(&mut self) {
        let mut range = self.range();
        // SAFETY: UFFDIO_UNREGISTER reads one `UffdioRange`; it removes our registration (and
        // with it the write-protection) from the range. An error (the range was unmapped
        // against the contract of `new`) leaves nothing to undo: closing the descriptor drops
        // whatever registration is left.
        unsafe {
            libc::ioctl(
                self.uffd.as_raw_fd(),
                UFFDIO_UNREGISTER as libc::Ioctl,
                &mut range,
            )
        };
    }
}

/// Does this kernel support the tracker? Answered once per process by tracking a scratch
/// two-page memfd mapping: register, write one page, check that `collect` reports exactly it.
pub fn supported() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(|| probe().is_ok())
}

/// A scratch shared mapping for [`probe`], unmapped on drop.
struct ScratchMapping {
    base: *mut u8,
    len: usize,
}

impl ScratchMapping {
    fn new(len: usize) -> Result<ScratchMapping, TrackError> {
        // SAFETY: memfd_create takes a NUL-terminated name and flags, returns a new descriptor.
        let fd = unsafe { libc::memfd_create(c"kavach-uffd-probe".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(TrackError::last_os(KIND, "memfd_create"));
        }
        // SAFETY: `fd` was just created and nothing else owns it.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(len as u64).map_err(|error| TrackError {
            kind: KIND,
            what: "size the probe memfd".into(),
            error,
        })?;
        // SAFETY: a new shared mapping of our memfd at an address the kernel picks; the result
        // is checked. The mapping keeps the memfd alive after `file` is closed.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(TrackError::last_os(KIND, "mmap the probe memfd"));
        }
        Ok(ScratchMapping {
            base: base.cast(),
            len,
        })
    }
}

impl Drop for ScratchMapping {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping `new` made; no reference into it exists.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

fn probe() -> Result<(), TrackError> {
    let scratch = ScratchMapping::new(2 * PAGE_BYTES)?;
    // SAFETY: the scratch mapping is a live MAP_SHARED memfd mapping, page-aligned, two pages
    // long, and outlives the tracker (declared after it, so dropped before it).
    let tracker = unsafe { UffdTracker::new(scratch.base, scratch.len)? };
    // SAFETY: byte 8 of page 1 lies inside the scratch mapping, which nothing else accesses.
    unsafe { scratch.base.add(PAGE_BYTES + 8).write_volatile(1) };
    let mut bits = [0; super::BATCH_WORDS];
    tracker.collect(0, 2, &mut bits)?;
    if bits[0] != 0b10 {
        return Err(TrackError {
            kind: KIND,
            what: format!("probe reported {:#b} instead of page 1", bits[0]),
            error: std::io::ErrorKind::Unsupported.into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::BATCH_WORDS;

    #[test]
    fn structures_and_ioctl_numbers_match_the_kernel() {
        assert_eq!(size_of::<UffdioApi>(), 24);
        assert_eq!(size_of::<UffdioRange>(), 16);
        assert_eq!(size_of::<UffdioRegister>(), 32);
        assert_eq!(size_of::<UffdioWriteprotect>(), 24);
        assert_eq!(size_of::<PmScanArg>(), 96);
        assert_eq!(size_of::<PageRegion>(), 24);
        // Values printed by a C program with the kernel's headers (`_IOWR` and friends).
        assert_eq!(UFFDIO_API, 0xc018_aa3f);
        assert_eq!(UFFDIO_REGISTER, 0xc020_aa00);
        assert_eq!(UFFDIO_UNREGISTER, 0x8010_aa01);
        assert_eq!(UFFDIO_WRITEPROTECT, 0xc018_aa06);
        assert_eq!(PAGEMAP_SCAN, 0xc060_6610);
    }

    fn written(tracker: &UffdTracker, first: u64, count: u32) -> BatchBits {
        let mut bits = [0; BATCH_WORDS];
        tracker.peek(first, count, &mut bits).unwrap();
        bits
    }

    #[test]
    #[cfg_attr(
        kavach_no_uffd_wp,
        ignore = "no userfaultfd asynchronous write-protection on this kernel"
    )]
    fn a_full_region_vector_resumes_at_walk_end() {
        assert!(
            supported(),
            "the build found userfaultfd asynchronous write-protection, this run does not"
        );
        let pages = 64;
        let scratch = ScratchMapping::new(pages * PAGE_BYTES).unwrap();
        // SAFETY: a live MAP_SHARED memfd mapping that outlives the tracker.
        let tracker = unsafe { UffdTracker::new(scratch.base, scratch.len).unwrap() };
        let dirty = [0, 1, 2, 5, 9, 10, 33, 62, 63];
        for &page in &dirty {
            // SAFETY: inside the scratch mapping, which only this test touches.
            unsafe { scratch.base.add(page * PAGE_BYTES).write_volatile(7) };
        }
        let want = dirty.iter().fold(0u64, |bits, &p| bits | 1 << p);
        assert_eq!(written(&tracker, 0, 64)[0], want);
        // One region per call: the scan must resume five times and still re-protect every
        // reported page, and only those.
        let mut one = [PageRegion::default(); 1];
        let mut bits = [0; BATCH_WORDS];
        tracker
            .scan(
                0,
                64,
                PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
                &mut one,
                &mut bits,
            )
            .unwrap();
        assert_eq!(bits[0], want);
        assert_eq!(written(&tracker, 0, 64)[0], 0);
        // An unaligned batch in the middle.
        // SAFETY: as above.
        unsafe { scratch.base.add(40 * PAGE_BYTES).write_volatile(7) };
        let mut bits = [0; BATCH_WORDS];
        tracker.collect(30, 20, &mut bits).unwrap();
        assert_eq!(bits[0], 1 << 10);
    }

    #[test]
    #[cfg_attr(
        kavach_no_uffd_wp,
        ignore = "no userfaultfd asynchronous write-protection on this kernel"
    )]
    fn kernel_writes_into_the_range_are_reported() {
        assert!(
            supported(),
            "the build found userfaultfd asynchronous write-protection, this run does not"
        );
        let scratch = ScratchMapping::new(4 * PAGE_BYTES).unwrap();
        // SAFETY: a live MAP_SHARED memfd mapping that outlives the tracker.
        let tracker = unsafe { UffdTracker::new(scratch.base, scratch.len).unwrap() };
        let mut fds = [0; 2];
        // SAFETY: pipe writes two descriptors into the array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: plain write of a local buffer to our pipe.
        let sent = unsafe { libc::write(fds[1], b"abcd".as_ptr().cast(), 4) };
        assert_eq!(sent, 4);
        // SAFETY: read(2) stores 4 bytes into page 2 of the scratch mapping.
        let n = unsafe { libc::read(fds[0], scratch.base.add(2 * PAGE_BYTES).cast(), 4) };
        // SAFETY: closing the pipe descriptors we own.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        assert_eq!(n, 4);
        assert_eq!(written(&tracker, 0, 4)[0], 0b100);
    }

    #[test]
    fn unaligned_ranges_are_refused() {
        let scratch = ScratchMapping::new(2 * PAGE_BYTES).unwrap();
        // SAFETY: the range is inside a live mapping; `new` must refuse it before using it.
        let err = unsafe { UffdTracker::new(scratch.base.add(8), PAGE_BYTES) }.unwrap_err();
        assert_eq!(err.error.kind(), std::io::ErrorKind::InvalidInput);
    }
}
