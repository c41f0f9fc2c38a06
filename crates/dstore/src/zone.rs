//! The data zone: a pool region of 4 KiB blocks holding object data (DStore's data plane).
//!
//! Which blocks are in use is not persisted: it follows from the objects' block lists, so it is
//! rebuilt at open from the recovered state. A block freed by an operation is reused only once
//! that operation's record is durable (at once with synchronous durability; after the next log
//! swap otherwise), so a crash can never leave a recovered object pointing at a block that a
//! later, lost operation overwrote.

use std::sync::Mutex;

use crate::op::BLOCK_BYTES;
use crate::store::StoreError;
use pmem::Corruption;

/// The region holding the data zone.
pub const DATA_REGION: &str = "dstore.data";

#[derive(Debug, Default)]
struct State {
    used: Vec<u64>,
    in_use: u64,
    cursor: u64,
    /// Freed blocks waiting for the log swap after `.0`.
    pending: Vec<(u64, u32)>,
}

/// Block allocator of the data zone.
#[derive(Debug)]
pub struct Zone {
    /// Medium offset of block 0.
    pub base: usize,
    /// Number of blocks.
    pub blocks: u64,
    state: Mutex<State>,
}

impl Zone {
    /// A zone of `blocks` blocks at `base`, all free.
    pub fn new(base: usize, blocks: u64) -> Zone {
        Zone {
            base,
            blocks,
            state: Mutex::new(State {
                used: vec![0; blocks.div_ceil(64) as usize],
                ..State::default()
            }),
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, State>, StoreError> {
        self.state
            .lock()
            .map_err(|_| StoreError::Failed("the data zone's lock is poisoned".into()))
    }

    /// Mark `block` in use (rebuilding at open). Fails on a block out of range or used twice.
    pub fn claim(&self, block: u32) -> Result<(), StoreError> {
        let mut s = self.lock()?;
        let b = block as u64;
        let damaged = |expected: String, found: String| {
            StoreError::Corrupt(Corruption {
                structure: "object block list".into(),
                offset: self.base as u64 + b * BLOCK_BYTES,
                field: "block",
                expected,
                found,
            })
        };
        if b >= self.blocks {
            return Err(damaged(
                format!("a block of the data zone (below {})", self.blocks),
                format!("block {b}"),
            ));
        }
        let (w, bit) = ((b / 64) as usize, 1u64 << (b % 64));
        if s.used[w] & bit != 0 {
            return Err(damaged(
                "a block owned by one object".into(),
                format!("block {b} owned by two objects"),
            ));
        }
        s.used[w] |= bit;
        s.in_use += 1;
        Ok(())
    }

    /// Allocate `n` free blocks. `swaps` is the engine's log-swap count now: pending frees from
    /// before an earlier swap are released first.
    pub fn alloc(&self, n: usize, swaps: u64) -> Result<Vec<u32>, StoreError> {
        let mut s = self.lock()?;
        let ready: Vec<u32> = s
            .pending
            .iter()
            .filter(|p| p.0 < swaps)
            .map(|p| p.1)
            .collect();
        s.pending.retain(|p| p.0 >= swaps);
        for b in ready {
            Self::clear(&mut s, b);
        }
        if s.in_use + n as u64 > self.blocks {
            return Err(StoreError::OutOfSpace(format!(
                "the data zone is full: {} of {} blocks in use, {n} more needed",
                s.in_use, self.blocks
            )));
        }
        let mut out = Vec::with_capacity(n);
        let mut b = s.cursor;
        while out.len() < n {
            let (w, bit) = ((b / 64) as usize, 1u64 << (b % 64));
            if s.used[w] & bit == 0 {
                s.used[w] |= bit;
                out.push(b as u32);
            }
            b = (b + 1) % self.blocks;
        }
        s.cursor = b;
        s.in_use += n as u64;
        Ok(out)
    }

    fn clear(s: &mut State, b: u32) {
        let (w, bit) = ((b / 64) as usize, 1u64 << (b % 64));
        if s.used[w] & bit != 0 {
            s.used[w] &= !bit;
            s.in_use -= 1;
        }
    }

    /// Return blocks no record points at any more: now if `durable` (the freeing record is
    /// durable), else after the log swap that follows `swaps`.
    pub fn release(&self, blocks: &[u32], durable: bool, swaps: u64) {
        if let Ok(mut s) = self.state.lock() {
            for &b in blocks {
                if durable {
                    Self::clear(&mut s, b);
                } else {
                    s.pending.push((swaps, b));
                }
            }
        }
    }

    /// Blocks in use.
    pub fn in_use(&self) -> u64 {
        self.state.lock().map(|s| s.in_use).unwrap_or(0)
    }
}
