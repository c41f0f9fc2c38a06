//! The device interface microfs writes to. STAND-IN until the `target` crate has its device
//! types: the same shape as the agreed interface, replaced by `pub use target::...` then.

use std::sync::Mutex;

/// Errors of a device.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// An I/O call failed.
    #[error("{what}: {source}")]
    Io {
        /// What.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// Out of range.
    #[error("[{offset}, +{len}) outside the {capacity}-byte device")]
    Range {
        /// Offset.
        offset: u64,
        /// Length.
        len: u64,
        /// Capacity.
        capacity: u64,
    },
    /// Held by another.
    #[error("busy: {what}")]
    Busy {
        /// What.
        what: String,
    },
}

/// Results of devices.
pub type Result<T> = std::result::Result<T, DeviceError>;

/// A byte-addressed device whose writes are durable on return.
pub trait Device: Send + Sync + std::fmt::Debug {
    /// Capacity in bytes.
    fn capacity(&self) -> u64;
    /// Preferred alignment.
    fn block_size(&self) -> u32;
    /// Read.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// Write (durable on return).
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()>;
    /// A name.
    fn label(&self) -> String;
    /// Claim a range.
    fn claim(&self, _offset: u64, _len: u64) -> Result<()> {
        Ok(())
    }
}

/// A volatile device in memory.
#[derive(Debug)]
pub struct MemDevice {
    bytes: Mutex<Vec<u8>>,
}

impl MemDevice {
    /// `len` zero bytes.
    pub fn new(len: u64) -> MemDevice {
        MemDevice {
            bytes: Mutex::new(vec![0; len as usize]),
        }
    }
    fn range(&self, offset: u64, len: usize) -> Result<std::ops::Range<usize>> {
        let cap = self.capacity();
        if offset.checked_add(len as u64).is_none_or(|e| e > cap) {
            return Err(DeviceError::Range {
                offset,
                len: len as u64,
                capacity: cap,
            });
        }
        Ok(offset as usize..offset as usize + len)
    }
}

impl Device for MemDevice {
    fn capacity(&self) -> u64 {
        self.bytes.lock().unwrap_or_else(|p| p.into_inner()).len() as u64
    }
    fn block_size(&self) -> u32 {
        64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let r = self.range(offset, buf.len())?;
        buf.copy_from_slice(&self.bytes.lock().unwrap_or_else(|p| p.into_inner())[r]);
        Ok(())
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        let r = self.range(offset, data.len())?;
        self.bytes.lock().unwrap_or_else(|p| p.into_inner())[r].copy_from_slice(data);
        Ok(())
    }
    fn label(&self) -> String {
        "<memory>".into()
    }
}
