//! The operation log's medium: the log area of the device mirrored in DRAM. The log crate
//! writes and reads the mirror; the ranges it flushes are written through to the device at the
//! next fence, so a record the log has forced is on the device (and durable, as every device
//! write is) when `force` returns. A read-only medium never writes the device.

use std::sync::{Arc, Mutex, MutexGuard};

use pmem::{Backing, Domain, Medium, PmemError};

use crate::device::Device;

#[derive(Debug)]
struct Inner {
    mirror: Vec<u8>,
    pending: Vec<(usize, usize)>,
}

/// The log area `[base, base + len)` of a device as a [`Medium`].
#[derive(Debug)]
pub(crate) struct LogMedium {
    dev: Arc<dyn Device>,
    base: u64,
    write_through: bool,
    inner: Mutex<Inner>,
}

impl LogMedium {
    /// Load the area from the device.
    pub(crate) fn load(
        dev: Arc<dyn Device>,
        base: u64,
        len: usize,
        write_through: bool,
    ) -> crate::Result<LogMedium> {
        let mut mirror = vec![0u8; len];
        dev.read_at(base, &mut mirror)?;
        Ok(LogMedium {
            dev,
            base,
            write_through,
            inner: Mutex::new(Inner {
                mirror,
                pending: Vec::new(),
            }),
        })
    }

    /// A blank area (format writes it whole through the log's own create).
    pub(crate) fn blank(dev: Arc<dyn Device>, base: u64, len: usize) -> LogMedium {
        LogMedium {
            dev,
            base,
            write_through: true,
            inner: Mutex::new(Inner {
                mirror: vec![0u8; len],
                pending: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn mark(&self, offset: usize, len: usize) {
        if len > 0 {
            self.lock().pending.push((offset, offset + len));
        }
    }

    fn io_error(&self, e: crate::device::DeviceError) -> PmemError {
        PmemError::io(
            "cannot write the operation log to",
            self.dev.label(),
            std::io::Error::other(e.to_string()),
        )
    }
}

impl Medium for LogMedium {
    fn len(&self) -> usize {
        self.lock().mirror.len()
    }
    fn domain(&self) -> Domain {
        Domain::Adr
    }
    fn backing(&self) -> Backing {
        Backing::Tmpfs
    }
    fn label(&self) -> std::path::PathBuf {
        std::path::PathBuf::from(format!("{} (log area)", self.dev.label()))
    }
    fn read(&self, offset: usize, buf: &mut [u8]) {
        let g = self.lock();
        buf.copy_from_slice(&g.mirror[offset..offset + buf.len()]);
    }
    fn write(&self, offset: usize, data: &[u8]) {
        let mut g = self.lock();
        g.mirror[offset..offset + data.len()].copy_from_slice(data);
    }
    fn write_nontemporal(&self, offset: usize, data: &[u8]) {
        self.write(offset, data);
        self.mark(offset, data.len());
    }
    fn load_u64(&self, offset: usize) -> u64 {
        let mut b = [0u8; 8];
        self.read(offset, &mut b);
        u64::from_le_bytes(b)
    }
    fn store_u64(&self, offset: usize, value: u64) {
        self.write(offset, &value.to_le_bytes());
    }
    fn flush(&self, offset: usize, len: usize) -> pmem::Result<()> {
        self.mark(offset, len);
        Ok(())
    }
    fn fence(&self) -> pmem::Result<()> {
        let mut g = self.lock();
        let mut runs = std::mem::take(&mut g.pending);
        if !self.write_through {
            return Ok(());
        }
        runs.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::new();
        for (s, e) in runs {
            match merged.last_mut() {
                Some((_, me)) if s <= *me => *me = (*me).max(e),
                _ => merged.push((s, e)),
            }
        }
        for (s, e) in merged {
            self.dev
                .write_at(self.base + s as u64, &g.mirror[s..e])
                .map_err(|e| self.io_error(e))?;
        }
        Ok(())
    }
    fn inject(&self, offset: usize, data: &[u8]) -> pmem::Result<()> {
        self.write(offset, data);
        if self.write_through {
            self.dev
                .write_at(self.base + offset as u64, data)
                .map_err(|e| self.io_error(e))?;
        }
        Ok(())
    }
}
