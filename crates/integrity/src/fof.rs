//! The integrity layer in a pool running flush on fail (`docs/format/fof.md`).
//!
//! - The header's state is written back in every domain, so the `open` state is durable before
//!   the first data write; a clean close in a domain that may skip flushes (eadr, the
//!   simulator) writes the region back before its `clean` state. A missed window therefore
//!   always opens as an unclean shutdown: the resync makes the redundancy current over the data
//!   that survived (the data as it is becomes the truth), which the layer's own checksums then
//!   verify. Nothing is refused for the missed window itself.
//! - [`FinalPassHook`]: the layer's part in a pool save, with the writers stopped:
//!   [`Protected::seal`] runs the final lazy pass (every written page's redundancy brought up
//!   to date), writes the region back and then sets the header `clean`, as a clean close does.
//!   A saved image therefore opens without the resync (its redundancy is trusted as after a
//!   clean close, and the tests check it is current); this holds whatever the pool's record
//!   says, since `clean` is written only over a durable region. When the writers resume,
//!   [`Protected::unseal`] sets the header back to `open`, durably, first.

use std::sync::Arc;
use std::time::Instant;

use pmem::Medium;
use pmem::fof::DirtyPages;

use crate::engine::Protected;

/// The final lazy pass as a pool save hook.
pub struct FinalPassHook<M: Medium + 'static> {
    prot: Arc<Protected<M>>,
    dirty: Option<Arc<DirtyPages>>,
    meta: (usize, usize),
}

impl<M: Medium + 'static> std::fmt::Debug for FinalPassHook<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FinalPassHook")
            .field("meta", &self.meta)
            .finish_non_exhaustive()
    }
}

impl<M: Medium + 'static> FinalPassHook<M> {
    /// The hook of `prot`, whose redundancy lives in `meta` (offset, length); the pass's
    /// writes are marked in `dirty` when the save writes back tracked pages.
    pub fn new(
        prot: Arc<Protected<M>>,
        meta: (usize, usize),
        dirty: Option<Arc<DirtyPages>>,
    ) -> FinalPassHook<M> {
        FinalPassHook { prot, dirty, meta }
    }
}

impl<M: Medium + 'static> powerfail::LayerHook for FinalPassHook<M> {
    fn name(&self) -> String {
        "integrity final pass".into()
    }
    fn save(&self, _deadline: Instant) -> Result<Vec<u64>, String> {
        self.prot.seal().map_err(|e| e.to_string())?;
        if let Some(d) = &self.dirty {
            d.mark(self.meta.0, self.meta.1);
        }
        Ok(Vec::new())
    }
    fn resume(&self) {
        // A failure here is latched by the medium; the next write reports it.
        let _ = self.prot.unseal();
    }
}
