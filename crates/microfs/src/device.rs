//! The device interface microfs writes to (the `target` crate's), re-exported so the rest of
//! the crate (and its users) name one place.

pub use target::{Device, DeviceError, MediumDevice, MemDevice, Partition};
