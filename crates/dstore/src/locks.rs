//! The object lock table behind `api::Context::olock` and every object write: striped by name,
//! one owner per name, holds counted (re-entrant per owner), a waiter blocked until the holder
//! gives the lock back. It lives in DRAM only; the `api` module says what locks mean. It depends
//! only on the error types, so the store and the API both use it one way.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

use crate::error::{StoreError, StoreResult};

const STRIPES: usize = 64;

#[derive(Debug, Default, Clone, Copy)]
struct Lock {
    /// The owner (meaningful while `count > 0`).
    owner: u64,
    /// Holds by the owner; 0: free.
    count: u32,
    /// Threads waiting for it.
    waiting: u32,
}

#[derive(Debug, Default)]
struct Stripe {
    /// Object name to its lock; an entry stays while it is held or waited for.
    held: Mutex<HashMap<Vec<u8>, Lock>>,
    freed: Condvar,
}

/// The object lock table: striped by name, one owner per name, holds counted.
#[derive(Debug)]
pub(crate) struct Locks {
    stripes: Vec<Stripe>,
    next_owner: AtomicU64,
}

/// A hold of an object's lock, released when dropped.
pub(crate) struct Hold<'l> {
    locks: &'l Locks,
    name: Vec<u8>,
    owner: u64,
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        self.locks.release(&self.name, self.owner);
    }
}

impl Locks {
    pub(crate) fn new() -> Locks {
        Locks {
            stripes: (0..STRIPES).map(|_| Stripe::default()).collect(),
            next_owner: AtomicU64::new(1),
        }
    }

    /// A fresh owner id (a context, or one store call made without a context).
    pub(crate) fn anonymous(&self) -> u64 {
        self.next_owner.fetch_add(1, Ordering::Relaxed)
    }

    fn stripe(&self, name: &[u8]) -> &Stripe {
        // FNV-1a: names spread over the stripes.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in name {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        &self.stripes[(h % STRIPES as u64) as usize]
    }

    fn poisoned() -> StoreError {
        StoreError::Failed("the object lock table's lock is poisoned".into())
    }

    /// Take `name` for `owner`, waiting while another owner holds it.
    pub(crate) fn acquire(&self, name: &[u8], owner: u64) -> StoreResult<()> {
        let s = self.stripe(name);
        let mut held = s.held.lock().map_err(|_| Self::poisoned())?;
        let mut waited = false;
        loop {
            let l = held.entry(name.to_vec()).or_default();
            if l.count == 0 || l.owner == owner {
                l.owner = owner;
                l.count += 1;
                if waited {
                    l.waiting -= 1;
                }
                return Ok(());
            }
            if !waited {
                l.waiting += 1;
                waited = true;
            }
            held = s.freed.wait(held).map_err(|_| Self::poisoned())?;
        }
    }

    /// Take `name` for `owner` for the life of the returned hold.
    pub(crate) fn hold(&self, name: &[u8], owner: u64) -> StoreResult<Hold<'_>> {
        self.acquire(name, owner)?;
        Ok(Hold {
            locks: self,
            name: name.to_vec(),
            owner,
        })
    }

    /// Give back one hold of `name` by `owner`; false if `owner` holds no lock on `name`.
    pub(crate) fn release(&self, name: &[u8], owner: u64) -> bool {
        let s = self.stripe(name);
        let mut held = s.held.lock().unwrap_or_else(|p| p.into_inner());
        match held.get_mut(name) {
            Some(l) if l.count > 0 && l.owner == owner => {
                l.count -= 1;
                if l.count == 0 {
                    if l.waiting == 0 {
                        held.remove(name);
                    }
                    s.freed.notify_all();
                }
                true
            }
            _ => false,
        }
    }

    /// Who holds `name` now, and how many threads wait for it.
    pub(crate) fn state(&self, name: &[u8]) -> (Option<u64>, u32) {
        let s = self.stripe(name);
        let held = s.held.lock().unwrap_or_else(|p| p.into_inner());
        match held.get(name) {
            Some(l) => ((l.count > 0).then_some(l.owner), l.waiting),
            None => (None, 0),
        }
    }
}
