//! The medium trait: what every layer above `pmem` reads, writes and persists through.
//!
//! Two implementations: [`crate::Mapping`] (a memory-mapped file) and [`crate::SimMedium`]
//! (the persistence simulator). Code written against `Medium` runs on both, which is how crash
//! consistency is tested.
//!
//! Offsets are bytes from the start of the medium. An access outside `[0, len)` is a bug in the
//! caller and panics (like slice indexing); callers validate every offset they read from media
//! before using it, so input can never reach such a panic.

use crate::domain::{Backing, Domain};
use crate::error::Result;

/// A byte-addressable persistent medium.
pub trait Medium: Send + Sync + std::fmt::Debug {
    /// Size in bytes.
    fn len(&self) -> usize;
    /// True for a zero-length medium (never the case for a pool).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The persistence domain `persist` works in.
    fn domain(&self) -> Domain;
    /// What holds the bytes.
    fn backing(&self) -> Backing;
    /// A name for messages: the backing file's path, or a description.
    fn label(&self) -> std::path::PathBuf {
        std::path::PathBuf::from("<medium>")
    }
    /// Copy bytes out.
    fn read(&self, offset: usize, buf: &mut [u8]);
    /// Store bytes. Not durable until flushed and fenced (or as the domain says).
    fn write(&self, offset: usize, data: &[u8]);
    /// Bulk copy with non-temporal stores: durable after the next [`Medium::fence`], no flush
    /// needed.
    fn write_nontemporal(&self, offset: usize, data: &[u8]);
    /// [`Medium::write_nontemporal`], returning the CRC-32C `crc` continued over `data` (as
    /// `crc32c::crc32c_append(crc, data)`). A mapping computes it while the copy streams.
    fn write_nontemporal_crc32c(&self, offset: usize, data: &[u8], crc: u32) -> u32 {
        self.write_nontemporal(offset, data);
        crc32c::crc32c_append(crc, data)
    }
    /// The CRC-32C `crc` continued over the `len` bytes at `offset` (as reading them and
    /// running `crc32c::crc32c_append(crc, bytes)` would). The default reads them through
    /// [`Medium::read`] in chunks; a mapping runs the CRC over its own bytes, with no copy.
    fn crc32c(&self, offset: usize, len: usize, crc: u32) -> u32 {
        check_range(offset, len, self.len());
        crc32c_by_reads(self, offset, len, crc)
    }
    /// A hint: start bringing the `len` bytes at `offset` into the cache, for a read soon (a
    /// recovery walk asks for the records ahead of the one it checks). Changes nothing; a
    /// range outside the medium is ignored. The default does nothing.
    fn prefetch(&self, offset: usize, len: usize) {
        let _ = (offset, len);
    }
    /// A hint: map the pages under `len` bytes at `offset` for reading now, so that reads
    /// of them soon take no page fault (a recovery walk has another thread populate the ring
    /// ahead of it). Changes nothing; a range outside the medium is ignored. Blocks for as long
    /// as the kernel takes. The default does nothing.
    fn populate(&self, offset: usize, len: usize) {
        let _ = (offset, len);
    }
    /// Atomic, aligned 8-byte load.
    fn load_u64(&self, offset: usize) -> u64;
    /// Atomic, aligned 8-byte store: the failure-atomic unit (a commit word).
    fn store_u64(&self, offset: usize, value: u64);
    /// Start writing back the cache lines of a range. Durable after the next fence.
    fn flush(&self, offset: usize, len: usize) -> Result<()>;
    /// Write back the cache lines of a range whatever the domain says: unlike
    /// [`Medium::flush`], which a domain with persistent caches (or flush on fail) skips, this
    /// always issues the write-back (clwb/clflushopt; `msync` in the msync domain). Durable
    /// after the next fence. The save path of flush-on-fail and the records it relies on (its
    /// marker) use it, so that they are durable even if the window is missed. The default
    /// is `flush`, right for media whose `flush` is never skipped.
    fn write_back(&self, offset: usize, len: usize) -> Result<()> {
        self.flush(offset, len)
    }
    /// Order earlier flushes and non-temporal stores: after it returns they are durable.
    fn fence(&self) -> Result<()>;
    /// `flush` then `fence`.
    fn persist(&self, offset: usize, len: usize) -> Result<()> {
        self.flush(offset, len)?;
        self.fence()
    }
    /// Grow the medium to `len` bytes (no-op if it is that long already). The new bytes read as
    /// zero, and the new length is durable when this returns. A medium that cannot grow (or
    /// not that far) says so with an error.
    fn grow(&self, len: usize) -> Result<()> {
        if len <= self.len() {
            return Ok(());
        }
        Err(crate::error::PmemError::NoSpace(format!(
            "{} cannot grow",
            self.label().display()
        )))
    }
    /// Give back the storage under `[offset, offset + len)`, which holds nothing of value (a
    /// range no region covers): afterwards it reads as zero. A hint: a medium may keep the
    /// bytes (the default does nothing).
    fn discard(&self, offset: usize, len: usize) -> Result<()> {
        let _ = (offset, len);
        Ok(())
    }
    /// Make sure storage backs `[offset, offset + len)` before it is written (a range given
    /// back by `discard` and about to be used again). The default does nothing.
    fn back(&self, offset: usize, len: usize) -> Result<()> {
        let _ = (offset, len);
        Ok(())
    }
    /// Put bytes on the medium behind the back of every layer: durable at once, seen by no
    /// write tracking. For fault injection only.
    fn inject(&self, offset: usize, data: &[u8]) -> Result<()>;
}

macro_rules! forward_medium {
    ($($t:tt)*) => {
        impl<M: Medium + ?Sized> Medium for $($t)* {
            fn len(&self) -> usize { (**self).len() }
            fn domain(&self) -> Domain { (**self).domain() }
            fn backing(&self) -> Backing { (**self).backing() }
            fn label(&self) -> std::path::PathBuf { (**self).label() }
            fn read(&self, o: usize, b: &mut [u8]) { (**self).read(o, b) }
            fn write(&self, o: usize, d: &[u8]) { (**self).write(o, d) }
            fn write_nontemporal(&self, o: usize, d: &[u8]) { (**self).write_nontemporal(o, d) }
            fn write_nontemporal_crc32c(&self, o: usize, d: &[u8], c: u32) -> u32 {
                (**self).write_nontemporal_crc32c(o, d, c)
            }
            fn crc32c(&self, o: usize, l: usize, c: u32) -> u32 { (**self).crc32c(o, l, c) }
            fn prefetch(&self, o: usize, l: usize) { (**self).prefetch(o, l) }
            fn populate(&self, o: usize, l: usize) { (**self).populate(o, l) }
            fn load_u64(&self, o: usize) -> u64 { (**self).load_u64(o) }
            fn store_u64(&self, o: usize, v: u64) { (**self).store_u64(o, v) }
            fn flush(&self, o: usize, l: usize) -> Result<()> { (**self).flush(o, l) }
            fn write_back(&self, o: usize, l: usize) -> Result<()> { (**self).write_back(o, l) }
            fn fence(&self) -> Result<()> { (**self).fence() }
            fn persist(&self, o: usize, l: usize) -> Result<()> { (**self).persist(o, l) }
            fn grow(&self, l: usize) -> Result<()> { (**self).grow(l) }
            fn discard(&self, o: usize, l: usize) -> Result<()> { (**self).discard(o, l) }
            fn back(&self, o: usize, l: usize) -> Result<()> { (**self).back(o, l) }
            fn inject(&self, o: usize, d: &[u8]) -> Result<()> { (**self).inject(o, d) }
        }
    };
}
forward_medium!(&M);
forward_medium!(std::sync::Arc<M>);
forward_medium!(Box<M>);

/// Panic unless `[offset, offset + len)` lies inside a medium of `size` bytes.
#[inline]
#[track_caller]
pub(crate) fn check_range(offset: usize, len: usize, size: usize) {
    assert!(
        offset <= size && len <= size - offset,
        "medium access [{offset:#x}, +{len:#x}) outside [0, {size:#x})"
    );
}

/// Panic unless an 8-byte access at `offset` is aligned and inside the medium.
#[inline]
#[track_caller]
pub(crate) fn check_word(offset: usize, size: usize) {
    assert!(
        offset % 8 == 0,
        "8-byte atomic access at unaligned offset {offset:#x}"
    );
    check_range(offset, 8, size);
}

/// The CRC-32C `crc` continued over the `len` bytes at `offset` of `m`, read out through
/// [`Medium::read`] in 4 KiB chunks ([`Medium::crc32c`]'s default, and a mapping's way when
/// its in-place CRC cannot run).
pub(crate) fn crc32c_by_reads<M: Medium + ?Sized>(
    m: &M,
    offset: usize,
    len: usize,
    crc: u32,
) -> u32 {
    let mut buf = [0u8; 4096];
    let (mut crc, mut done) = (crc, 0);
    while done < len {
        let n = (len - done).min(buf.len());
        m.read(offset + done, &mut buf[..n]);
        crc = crate::tune::crc32c_append_tuned(crc, &buf[..n]);
        done += n;
    }
    crc
}
