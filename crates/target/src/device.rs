//! The [`Device`] trait and the simple devices: [`Partition`], [`MemDevice`], [`MediumDevice`].

use crate::error::{DeviceError, Result, check_range};
use std::fs::File;
use std::sync::{Arc, RwLock};

/// A byte-addressed block device.
///
/// `write_at` is durable when it returns. Requests made through one handle complete in the
/// order they are made (one queue per instance). Any offset and length inside the device is
/// accepted; a device with alignment rules (O_DIRECT) bounces or read-modify-writes the
/// unaligned ones, so requests aligned to [`Device::block_size`] are the fast path.
/// Concurrent writes through one handle to the same block are not ordered against each other.
pub trait Device: Send + Sync + std::fmt::Debug {
    /// Size in bytes.
    fn capacity(&self) -> u64;
    /// The alignment of the fast path: 4096 for O_DIRECT files, 512 for other files, 64 for
    /// pool media.
    fn block_size(&self) -> u32;
    /// Read `buf.len()` bytes at `offset`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// Write `data` at `offset`; durable when it returns.
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()>;
    /// A name for messages: a path, or `tcp://host:port/job`.
    fn label(&self) -> String;
    /// Take an exclusive claim on `[offset, offset + len)` for this handle's lifetime (an OFD
    /// `fcntl` lock for files, a lease on the connection for remote devices). `Err(Busy)` if
    /// another handle holds an overlapping claim. Claims of one handle never conflict with
    /// each other. A device shared by nothing else accepts every claim.
    fn claim(&self, offset: u64, len: u64) -> Result<()> {
        check_range(offset, len, self.capacity())
    }
    /// Make every write done so far durable. Writes are durable when they return, so this is
    /// a no-op for every device here; it exists for devices (and protocols) that batch.
    /// (Added to the agreed interface.)
    fn flush(&self) -> Result<()> {
        Ok(())
    }
}

macro_rules! forward_device {
    ($($t:tt)*) => {
        impl<D: Device + ?Sized> Device for $($t)* {
            fn capacity(&self) -> u64 { (**self).capacity() }
            fn block_size(&self) -> u32 { (**self).block_size() }
            fn read_at(&self, o: u64, b: &mut [u8]) -> Result<()> { (**self).read_at(o, b) }
            fn write_at(&self, o: u64, d: &[u8]) -> Result<()> { (**self).write_at(o, d) }
            fn label(&self) -> String { (**self).label() }
            fn claim(&self, o: u64, l: u64) -> Result<()> { (**self).claim(o, l) }
            fn flush(&self) -> Result<()> { (**self).flush() }
        }
    };
}
forward_device!(&D);
forward_device!(Arc<D>);
forward_device!(Box<D>);

/// A sub-range `[base, base + len)` of another device, itself a device whose offset 0 is
/// `base`. Claims are taken on the underlying device, shifted by `base`.
#[derive(Debug, Clone)]
pub struct Partition {
    dev: Arc<dyn Device>,
    base: u64,
    len: u64,
}

impl Partition {
    /// The range `[base, base + len)` of `dev`; `Err(Range)` unless it lies inside `dev`.
    pub fn new(dev: Arc<dyn Device>, base: u64, len: u64) -> Result<Partition> {
        check_range(base, len, dev.capacity())?;
        Ok(Partition { dev, base, len })
    }

    /// The first byte of the partition on the underlying device.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The underlying device.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.dev
    }
}

impl Device for Partition {
    fn capacity(&self) -> u64 {
        self.len
    }
    fn block_size(&self) -> u32 {
        self.dev.block_size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        check_range(offset, buf.len() as u64, self.len)?;
        self.dev.read_at(self.base + offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        check_range(offset, data.len() as u64, self.len)?;
        self.dev.write_at(self.base + offset, data)
    }
    fn label(&self) -> String {
        format!(
            "{}[{}..{}]",
            self.dev.label(),
            self.base,
            self.base + self.len
        )
    }
    fn claim(&self, offset: u64, len: u64) -> Result<()> {
        check_range(offset, len, self.len)?;
        self.dev.claim(self.base + offset, len)
    }
    fn flush(&self) -> Result<()> {
        self.dev.flush()
    }
}

/// A volatile device in memory, for tests. Its bytes start as zero.
#[derive(Debug)]
pub struct MemDevice {
    bytes: RwLock<Vec<u8>>,
    len: u64,
}

impl MemDevice {
    /// A device of `len` zero bytes.
    pub fn new(len: usize) -> MemDevice {
        MemDevice {
            bytes: RwLock::new(vec![0; len]),
            len: len as u64,
        }
    }

    /// A copy of every byte.
    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Device for MemDevice {
    fn capacity(&self) -> u64 {
        self.len
    }
    fn block_size(&self) -> u32 {
        512
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        check_range(offset, buf.len() as u64, self.len)?;
        let b = self.bytes.read().unwrap_or_else(|p| p.into_inner());
        let o = offset as usize;
        buf.copy_from_slice(&b[o..o + buf.len()]);
        Ok(())
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        check_range(offset, data.len() as u64, self.len)?;
        let mut b = self.bytes.write().unwrap_or_else(|p| p.into_inner());
        let o = offset as usize;
        b[o..o + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn label(&self) -> String {
        format!("<memory, {} bytes>", self.len)
    }
}

/// The range `[base, base + len)` of a pool medium as a device. A write is
/// [`pmem::Medium::write`] then [`pmem::Medium::persist`] of the bytes written, so on the
/// persistence simulator every write has its crash points, and it is durable when it returns.
#[derive(Debug)]
pub struct MediumDevice<M: pmem::Medium> {
    medium: M,
    base: usize,
    len: usize,
    lock: Option<(File, String)>,
}

impl<M: pmem::Medium> MediumDevice<M> {
    /// The range `[base, base + len)` of `medium`; `Err(Range)` unless it lies inside it.
    pub fn new(medium: M, base: usize, len: usize) -> Result<MediumDevice<M>> {
        check_range(base as u64, len as u64, medium.len() as u64)?;
        Ok(MediumDevice {
            medium,
            base,
            len,
            lock: None,
        })
    }

    /// Take claims as OFD locks on `file` (the medium's backing file, `label` its path), so
    /// that other handles on the same file see them. Without it every claim is accepted.
    pub fn with_claims(mut self, file: File, label: String) -> MediumDevice<M> {
        self.lock = Some((file, label));
        self
    }

    /// The medium.
    pub fn medium(&self) -> &M {
        &self.medium
    }
}

fn medium_error(what: String, e: pmem::PmemError) -> DeviceError {
    DeviceError::io(what, std::io::Error::other(e.to_string()))
}

impl<M: pmem::Medium> Device for MediumDevice<M> {
    fn capacity(&self) -> u64 {
        self.len as u64
    }
    fn block_size(&self) -> u32 {
        64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        check_range(offset, buf.len() as u64, self.len as u64)?;
        self.medium.read(self.base + offset as usize, buf);
        Ok(())
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        check_range(offset, data.len() as u64, self.len as u64)?;
        if data.is_empty() {
            return Ok(());
        }
        let at = self.base + offset as usize;
        self.medium.write(at, data);
        self.medium.persist(at, data.len()).map_err(|e| {
            medium_error(
                format!(
                    "cannot persist [{offset}, +{}) of {}",
                    data.len(),
                    self.label()
                ),
                e,
            )
        })
    }
    fn label(&self) -> String {
        format!(
            "{}[{}..{}]",
            self.medium.label().display(),
            self.base,
            self.base + self.len
        )
    }
    fn claim(&self, offset: u64, len: u64) -> Result<()> {
        check_range(offset, len, self.len as u64)?;
        match &self.lock {
            Some((file, label)) => crate::lock::claim(file, label, self.base as u64 + offset, len),
            None => Ok(()),
        }
    }
}
