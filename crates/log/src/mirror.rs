//! The hook replication uses: every range `force` (or a superline write) makes durable is
//! handed to a [`Mirror`] together with the local flush, so the mirror decides the order of
//! shipping and flushing (replicate first, in parallel, or flush first).

use std::fmt;

/// Bytes of the log region that a force is making durable: `offset` is relative to the start of
/// the log region, so the same offset addresses the same bytes in every copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extent {
    /// Offset from the start of the log region.
    pub offset: u64,
    /// The bytes at that offset.
    pub bytes: Vec<u8>,
}

/// Something that copies what the log makes durable to other copies of the log.
///
/// [`Mirror::replicate`] is called with the force lock (or the superline lock) held, so calls
/// never overlap for one kind, but a superline write may run beside a force: implementations
/// serialize internally.
pub trait Mirror: Send + Sync + fmt::Debug {
    /// Make `extents` durable on the mirror's copies and run `flush_local` (which persists the
    /// same bytes in the local copy) exactly once, in whatever order the mirror is configured
    /// for. `last_lsn` is the last record the extents complete (0 for a superline write).
    /// An `Err` latches the log failed.
    fn replicate(
        &self,
        extents: &[Extent],
        last_lsn: u64,
        flush_local: &mut dyn FnMut() -> crate::Result<()>,
    ) -> crate::Result<()>;
}
