//! The Rust API: typed persistent pointers tied to their pool's type, values as plain bytes,
//! and changes only inside transactions.
//!
//! What the types rule out at compile time (each is a `compile_fail` example below):
//!
//! - **A write to persistent data outside a transaction.** [`Heap`] only reads; every store
//!   goes through a [`Tx`], which snapshots the range before changing it.
//! - **A persistent pointer to volatile memory.** Stored values must be [`Pod`]: references,
//!   raw pointers, `Box`, `Vec` and `String` are not, and `#[derive(Pod)]` refuses a struct
//!   holding one. Persistent pointers are [`PPtr`]s (offsets), which are.
//! - **A pointer into another pool.** A [`PPtr<T, P>`] carries its pool's tag type `P`, and a
//!   `Heap<P>` accepts only `PPtr<_, P>`; one heap per tag may be open at a time, checked at
//!   run time, so a tag names one pool.
//! - **A transaction that outlives its closure**, or a [`Tx`] used after commit.
//! - **Padding in a stored value**, whose bytes would be uninitialised memory that storing it
//!   reads. `Pod` excludes padding (`#[derive(Pod)]` refuses a struct with a gap, also one
//!   around a lock), and [`PMutex`] and [`PRwLock`] have none for any value type (their
//!   layout is `packed(8)`; see [`PMutex`]), so a `PMutex<u128>` is 24 plain bytes.
//!
//! ```compile_fail
//! // No store outside a transaction: `Heap` has no method that writes.
//! # use heap::{Heap, PPtr};
//! heap::pool_tag!(A);
//! fn f(h: &Heap<A>, p: PPtr<u64, A>) { h.set(p, 1); }
//! ```
//!
//! ```compile_fail
//! // No pointer into another pool.
//! # use heap::{Heap, PPtr};
//! heap::pool_tag!(A);
//! heap::pool_tag!(B);
//! fn f(h: &Heap<B>, p: PPtr<u64, A>) -> heap::Result<u64> { h.get(p) }
//! ```
//!
//! ```compile_fail
//! // No persistent pointer to volatile memory.
//! # use heap::{Heap, PPtr};
//! heap::pool_tag!(A);
//! fn f(h: &Heap<A>, x: &'static u64) -> heap::Result<()> {
//!     h.transaction(|tx| { tx.alloc(x)?; Ok(()) })
//! }
//! ```
//!
//! ```compile_fail
//! // A struct holding a Box cannot be made persistent.
//! #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
//! #[repr(C)]
//! struct Node { next: Box<u64> }
//! ```
//!
//! ```compile_fail
//! // A lock guards plain bytes only: not a reference.
//! static X: u64 = 5;
//! let m = heap::PMutex::new(&X);
//! ```
//!
//! ```compile_fail
//! // A struct with padding before its lock (7 bytes after `flag`) is not plain bytes.
//! #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
//! #[repr(C)]
//! struct Account { flag: u8, balance: heap::PMutex<u64> }
//! ```
//!
//! ```
//! // Without the gap it is; a lock around a 16-byte-aligned value has no padding either.
//! #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
//! #[repr(C)]
//! struct Account { flags: u64, balance: heap::PMutex<u64>, total: heap::PRwLock<u128> }
//! assert_eq!(std::mem::size_of::<Account>(), 8 + 16 + 24);
//! ```
//!
//! ```compile_fail
//! // A transaction cannot escape its closure.
//! # use heap::{Heap, Tx};
//! heap::pool_tag!(A);
//! fn f(h: &Heap<A>) {
//!     let mut kept = None;
//!     let _ = h.transaction(|tx| { kept = Some(tx); Ok(()) });
//! }
//! ```

use std::any::TypeId;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

pub use bytemuck::{Pod, Zeroable};

use crate::error::{HeapError, Result};
use crate::raw::{LaneGuard, RawHeap, TxMode};

/// A pool's tag type: declare one per pool with [`pool_tag!`](crate::pool_tag).
pub trait PoolTag: 'static + Send + Sync {}

/// Declare a pool tag type: `heap::pool_tag!(pub Accounts);`.
#[macro_export]
macro_rules! pool_tag {
    ($vis:vis $name:ident) => {
        #[derive(Debug, Clone, Copy)]
        $vis struct $name;
        impl $crate::PoolTag for $name {}
    };
}

/// A persistent pointer: the offset of a `T` in the heap of pool `P`. Null is offset 0.
#[repr(transparent)]
pub struct PPtr<T, P: PoolTag> {
    off: u64,
    _m: PhantomData<fn() -> (T, P)>,
}

impl<T, P: PoolTag> Clone for PPtr<T, P> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T, P: PoolTag> Copy for PPtr<T, P> {}
impl<T, P: PoolTag> PartialEq for PPtr<T, P> {
    fn eq(&self, o: &Self) -> bool {
        self.off == o.off
    }
}
impl<T, P: PoolTag> Eq for PPtr<T, P> {}
impl<T, P: PoolTag> Default for PPtr<T, P> {
    fn default() -> Self {
        Self::null()
    }
}
impl<T, P: PoolTag> std::hash::Hash for PPtr<T, P> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.off.hash(h)
    }
}
impl<T, P: PoolTag> std::fmt::Debug for PPtr<T, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PPtr({:#x})", self.off)
    }
}
// SAFETY: PPtr is a transparent u64 (PhantomData is a zero-sized, field-less marker): any bit
// pattern is a valid value, zero included, and there is no padding or interior mutability.
unsafe impl<T: 'static, P: PoolTag> Zeroable for PPtr<T, P> {}
// SAFETY: as above.
unsafe impl<T: 'static, P: PoolTag> Pod for PPtr<T, P> {}

impl<T, P: PoolTag> PPtr<T, P> {
    /// The null pointer.
    pub const fn null() -> Self {
        PPtr {
            off: 0,
            _m: PhantomData,
        }
    }
    /// Is this the null pointer?
    pub fn is_null(&self) -> bool {
        self.off == 0
    }
    /// The offset inside the heap region.
    pub fn offset(&self) -> u64 {
        self.off
    }
    /// The `i`-th `T` after this one (for arrays allocated with [`Tx::alloc_array`]). Every
    /// access is checked against the heap's bounds, never the array's.
    pub fn at(self, i: u64) -> Self {
        PPtr {
            off: self.off + i * std::mem::size_of::<T>() as u64,
            _m: PhantomData,
        }
    }
    /// A pointer to the `U` at `byte_offset` inside the `T` (use `std::mem::offset_of!`).
    pub fn field<U>(self, byte_offset: usize) -> PPtr<U, P> {
        PPtr::from_off(self.off + byte_offset as u64)
    }
    /// The same offset as a pointer to another type.
    pub fn cast<U>(self) -> PPtr<U, P> {
        PPtr::from_off(self.off)
    }
    fn from_off(off: u64) -> Self {
        PPtr {
            off,
            _m: PhantomData,
        }
    }
}

/// A lock stored in the pool next to the value it guards. The lock itself lives in DRAM, keyed
/// by the offset, so it is always free when the pool is opened.
///
/// Layout: 8 reserved bytes, then the value at offset 8, and nothing else, for every `T`:
/// `packed(8)` caps the value's alignment at 8, so a `T` aligned to 16 or more (`u128`) sits at
/// offset 8 too instead of leaving padding in between. A `PMutex<T>` therefore has no padding
/// bytes whatever `T` is, which is what its `Pod` implementation promises (padding would be
/// uninitialised bytes that `bytemuck::bytes_of` and [`Tx::set`] read). The value is only ever
/// copied in and out (the heap reads and writes bytes, never references), so its alignment in
/// the pool does not matter, and the compiler rejects a reference to the packed field.
#[repr(C, packed(8))]
#[derive(Clone, Copy)]
pub struct PMutex<T: Pod> {
    reserved: [u8; 8],
    value: T,
}

impl<T: Pod + std::fmt::Debug> std::fmt::Debug for PMutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let value = self.value;
        f.debug_struct("PMutex").field("value", &value).finish()
    }
}

/// Asserts at compile time, for the `T` it is instantiated with, what the `Pod` implementations
/// of [`PMutex`] and [`PRwLock`] rely on: the value at offset 8 and no byte that is not a field's.
const fn lock_layout_has_no_padding<L, T>(value_offset: usize) {
    assert!(
        value_offset == 8 && std::mem::size_of::<L>() == 8 + std::mem::size_of::<T>(),
        "a persistent lock must be 8 reserved bytes followed by its value, without padding"
    );
}

// SAFETY: `packed(8)` and `repr(C)` make the layout `reserved` (8 bytes at offset 0), then
// `value` at offset 8, with the struct's alignment min(align(T), 8), which divides both 8 and
// size_of::<T>() (a multiple of T's alignment): no padding between the fields or at the end, for
// every T (NO_PADDING states it, checked in the tests for alignments 1 to 64). Both fields are
// Pod (T: Pod has no padding and accepts every bit pattern), so all-zero bytes are a valid value.
unsafe impl<T: Pod> Zeroable for PMutex<T> {
    fn zeroed() -> Self {
        let () = Self::NO_PADDING;
        PMutex {
            reserved: [0; 8],
            value: T::zeroed(),
        }
    }
}
// SAFETY: as above: no padding, every field Pod, no interior mutability, `Copy` and `'static`
// (T: Pod is 'static).
unsafe impl<T: Pod> Pod for PMutex<T> {}

impl<T: Pod> PMutex<T> {
    const NO_PADDING: () = lock_layout_has_no_padding::<Self, T>(std::mem::offset_of!(Self, value));
    /// A lock around `value` (to store with [`Tx::alloc`] or [`Tx::set`]).
    pub fn new(value: T) -> Self {
        let () = Self::NO_PADDING;
        PMutex {
            reserved: [0; 8],
            value,
        }
    }
}

/// A reader-writer lock stored in the pool next to the value it guards; like [`PMutex`], the
/// lock lives in DRAM keyed by the offset and is free when the pool is opened. Same layout as
/// [`PMutex`]: 8 reserved bytes and the value, never any padding.
#[repr(C, packed(8))]
#[derive(Clone, Copy)]
pub struct PRwLock<T: Pod> {
    reserved: [u8; 8],
    value: T,
}

// SAFETY: the layout argument of PMutex (`packed(8)`: 8 bytes then `value`, no padding for any T).
unsafe impl<T: Pod> Zeroable for PRwLock<T> {
    fn zeroed() -> Self {
        let () = Self::NO_PADDING;
        PRwLock {
            reserved: [0; 8],
            value: T::zeroed(),
        }
    }
}
// SAFETY: as above.
unsafe impl<T: Pod> Pod for PRwLock<T> {}

impl<T: Pod + std::fmt::Debug> std::fmt::Debug for PRwLock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let value = self.value;
        f.debug_struct("PRwLock").field("value", &value).finish()
    }
}

impl<T: Pod> PRwLock<T> {
    const NO_PADDING: () = lock_layout_has_no_padding::<Self, T>(std::mem::offset_of!(Self, value));
    /// A lock around `value`.
    pub fn new(value: T) -> Self {
        let () = Self::NO_PADDING;
        PRwLock {
            reserved: [0; 8],
            value,
        }
    }
}

/// A reliable object holding one `T` in the heap of pool `P`: every 8-byte word of the value is
/// stored beside a check word that corrects flipped bits (`heap::reliable`). It is a type of
/// its own, so it cannot be read with [`Heap::get`] or [`Tx::get`], which would see the
/// interleaved check words; only [`Tx::rget`] and [`Tx::rset`] reach the value.
///
/// ```compile_fail
/// # use heap::{Heap, RPtr};
/// heap::pool_tag!(A);
/// fn f(h: &Heap<A>, p: RPtr<u64, A>) -> heap::Result<u64> { h.get(p) }
/// ```
///
/// ```compile_fail
/// # use heap::{Heap, RPtr};
/// heap::pool_tag!(A);
/// fn f(h: &Heap<A>, p: RPtr<u64, A>) -> heap::Result<u64> { h.transaction(|tx| tx.get(p)) }
/// ```
///
/// ```
/// // Through the transaction's reliable calls it is read (and corrected if need be).
/// # use heap::{Heap, RPtr};
/// heap::pool_tag!(A);
/// fn f(h: &Heap<A>, p: RPtr<u64, A>) -> heap::Result<u64> { h.transaction(|tx| tx.rget(p)) }
/// ```
#[repr(transparent)]
pub struct RPtr<T, P: PoolTag> {
    off: u64,
    _m: PhantomData<fn() -> (T, P)>,
}

impl<T, P: PoolTag> Clone for RPtr<T, P> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T, P: PoolTag> Copy for RPtr<T, P> {}
impl<T, P: PoolTag> PartialEq for RPtr<T, P> {
    fn eq(&self, o: &Self) -> bool {
        self.off == o.off
    }
}
impl<T, P: PoolTag> Eq for RPtr<T, P> {}
impl<T, P: PoolTag> std::fmt::Debug for RPtr<T, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RPtr({:#x})", self.off)
    }
}
// SAFETY: RPtr is a transparent u64 (PhantomData is a zero-sized, field-less marker): any bit
// pattern is a valid value, zero included, and there is no padding or interior mutability.
unsafe impl<T: 'static, P: PoolTag> Zeroable for RPtr<T, P> {}
// SAFETY: as above.
unsafe impl<T: 'static, P: PoolTag> Pod for RPtr<T, P> {}

impl<T, P: PoolTag> RPtr<T, P> {
    /// The null pointer.
    pub const fn null() -> Self {
        RPtr {
            off: 0,
            _m: PhantomData,
        }
    }

    /// Is it null?
    pub fn is_null(&self) -> bool {
        self.off == 0
    }

    /// The object's offset in the heap region.
    pub fn offset(&self) -> u64 {
        self.off
    }

    /// A pointer to the reliable object at `off` (checked when used: the object's header must
    /// say it is a reliable object holding at least a `T`).
    pub fn from_offset(off: u64) -> Self {
        RPtr {
            off,
            _m: PhantomData,
        }
    }
}

static OPEN_TAGS: Mutex<Vec<TypeId>> = Mutex::new(Vec::new());

/// A heap whose pointers carry tag `P`.
pub struct Heap<P: PoolTag> {
    raw: Arc<RawHeap>,
    _p: PhantomData<P>,
}

impl<P: PoolTag> std::fmt::Debug for Heap<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heap")
            .field("tag", &std::any::type_name::<P>())
            .field("raw", &self.raw)
            .finish()
    }
}

impl<P: PoolTag> Drop for Heap<P> {
    fn drop(&mut self) {
        let mut open = OPEN_TAGS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = open.iter().position(|t| *t == TypeId::of::<P>()) {
            open.swap_remove(i);
        }
    }
}

impl<P: PoolTag> Heap<P> {
    /// Wrap an open heap under tag `P`. Fails if another heap is open under the same tag.
    pub fn new(raw: Arc<RawHeap>) -> Result<Self> {
        let mut open = OPEN_TAGS.lock().unwrap_or_else(|p| p.into_inner());
        if open.contains(&TypeId::of::<P>()) {
            return Err(HeapError::invalid(
                "pool tag",
                format!(
                    "a heap tagged {} is already open; one pool per tag",
                    std::any::type_name::<P>()
                ),
            ));
        }
        open.push(TypeId::of::<P>());
        Ok(Heap {
            raw,
            _p: PhantomData,
        })
    }

    /// The engine underneath.
    pub fn raw(&self) -> &Arc<RawHeap> {
        &self.raw
    }

    /// The root object (a `T`, zeroed when first made).
    pub fn root<T: Pod>(&self) -> Result<PPtr<T, P>> {
        let (off, _) = self.raw.root(std::mem::size_of::<T>() as u64)?;
        Ok(PPtr::from_off(off))
    }

    /// Read the `T` at `p`.
    pub fn get<T: Pod>(&self, p: PPtr<T, P>) -> Result<T> {
        read_value(&self.raw, p.off)
    }

    /// Run `f` in a transaction: commit if it returns `Ok`, roll back if it returns `Err` (or
    /// panics).
    pub fn transaction<R>(&self, f: impl FnOnce(&mut Tx<'_, P>) -> Result<R>) -> Result<R> {
        self.transaction_mode(self.raw.default_mode(), f)
    }

    /// Run `f` as an isolated transaction ([`TxMode::Isolated`]): no user lock is needed; a
    /// conflict with a concurrent isolated commit rolls it back and runs `f` again (after a
    /// randomised backoff), up to `retry.max_retries` times, then fails with
    /// [`HeapError::Conflict`] holding [`crate::stm::StmError::TooManyConflicts`]. `f` may run
    /// several times, so it must not have effects outside the transaction.
    pub fn atomically<R>(
        &self,
        retry: &crate::stm::Retry,
        mut f: impl FnMut(&mut Tx<'_, P>) -> Result<R>,
    ) -> Result<R> {
        let mut attempts: u32 = 0;
        let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (self as *const Self as u64);
        loop {
            attempts = attempts.saturating_add(1);
            let c = match self.transaction_mode(TxMode::Isolated, &mut f) {
                Err(HeapError::Conflict(crate::stm::StmError::Conflict(c))) => c,
                other => return other,
            };
            if attempts > retry.max_retries {
                return Err(HeapError::Conflict(
                    crate::stm::StmError::TooManyConflicts {
                        attempts,
                        last_conflict_at: c.off,
                        last_reason: c.reason,
                    },
                ));
            }
            let window = u64::from(retry.min_spins.max(1))
                .checked_shl((attempts - 1).min(32))
                .unwrap_or(u64::MAX)
                .min(u64::from(retry.max_spins.max(1)));
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            for _ in 0..seed % window {
                std::hint::spin_loop();
            }
            if attempts > retry.yield_after.saturating_mul(4) {
                // The committer in the way may have lost its core: give it time, not spins.
                std::thread::sleep(std::time::Duration::from_micros(
                    10 * u64::from(attempts.min(100)),
                ));
            } else if attempts > retry.yield_after {
                std::thread::yield_now();
            }
        }
    }

    /// [`Heap::transaction`] asking for `mode` ([`TxMode::Redo`]: new bytes wait in DRAM and
    /// commit writes them in place; [`Tx::mode`] says which mode the transaction got).
    pub fn transaction_mode<R>(
        &self,
        mode: TxMode,
        f: impl FnOnce(&mut Tx<'_, P>) -> Result<R>,
    ) -> Result<R> {
        let mut lane = self.raw.lane();
        self.raw.begin_mode(&mut lane, mode);
        let mut tx = Tx {
            heap: self,
            lane,
            held: Vec::new(),
            done: false,
        };
        let r = f(&mut tx);
        tx.done = true;
        let out = match r {
            Ok(v) => self.raw.commit(&mut tx.lane).map(|()| v),
            Err(e) => {
                if !e.is_simulated_crash() {
                    self.raw.abort(&mut tx.lane)?;
                }
                Err(e)
            }
        };
        tx.release_locks();
        out
    }
}

fn read_value<T: Pod>(raw: &RawHeap, off: u64) -> Result<T> {
    let mut v = T::zeroed();
    raw.read(off, bytemuck::bytes_of_mut(&mut v))?;
    Ok(v)
}

/// An open transaction. Exists only inside [`Heap::transaction`]'s closure.
pub struct Tx<'h, P: PoolTag> {
    heap: &'h Heap<P>,
    lane: LaneGuard,
    held: Vec<(u64, bool)>,
    done: bool,
}

impl<P: PoolTag> std::fmt::Debug for Tx<'_, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx")
            .field("lane", &self.lane.index())
            .finish()
    }
}

impl<P: PoolTag> Drop for Tx<'_, P> {
    fn drop(&mut self) {
        if !self.done {
            // Unwinding out of the closure: roll back.
            let _ = self.heap.raw.abort(&mut self.lane);
            self.release_locks();
        }
    }
}

impl<P: PoolTag> Tx<'_, P> {
    fn raw(&self) -> &RawHeap {
        &self.heap.raw
    }

    fn release_locks(&mut self) {
        for (key, exclusive) in self.held.drain(..).rev() {
            let _ = if exclusive {
                self.heap.raw.unlock_exclusive(key)
            } else {
                self.heap.raw.unlock_shared(key)
            };
        }
    }

    /// Read the `T` at `p` (as this transaction left it).
    pub fn get<T: Pod>(&self, p: PPtr<T, P>) -> Result<T> {
        let mut v = T::zeroed();
        self.raw()
            .read_tx(&self.lane, p.off, bytemuck::bytes_of_mut(&mut v))?;
        Ok(v)
    }

    /// The mode this transaction runs in.
    pub fn mode(&self) -> TxMode {
        self.raw().tx_mode(&self.lane).unwrap_or_default()
    }

    /// Store `v` at `p` (snapshotting it first).
    pub fn set<T: Pod>(&mut self, p: PPtr<T, P>, v: T) -> Result<()> {
        let heap = Arc::clone(&self.heap.raw);
        heap.write(&mut self.lane, p.off, bytemuck::bytes_of(&v))
    }

    /// Read, change and store the `T` at `p`.
    pub fn update<T: Pod, R>(&mut self, p: PPtr<T, P>, f: impl FnOnce(&mut T) -> R) -> Result<R> {
        let mut v = self.get(p)?;
        let r = f(&mut v);
        self.set(p, v)?;
        Ok(r)
    }

    /// Allocate a `T` holding `v`; the allocation takes effect at commit.
    pub fn alloc<T: Pod>(&mut self, v: T) -> Result<PPtr<T, P>> {
        let heap = Arc::clone(&self.heap.raw);
        let off = heap.alloc(
            &mut self.lane,
            std::mem::size_of::<T>().max(1) as u64,
            false,
        )?;
        heap.medium()
            .write((heap.base() + off) as usize, bytemuck::bytes_of(&v));
        Ok(PPtr::from_off(off))
    }

    /// Allocate `n` zeroed `T`s in a row.
    pub fn alloc_array<T: Pod>(&mut self, n: u64) -> Result<PPtr<T, P>> {
        let bytes = n
            .checked_mul(std::mem::size_of::<T>() as u64)
            .filter(|b| *b > 0)
            .ok_or_else(|| HeapError::invalid("array length", format!("{n} elements")))?;
        let heap = Arc::clone(&self.heap.raw);
        Ok(PPtr::from_off(heap.alloc(&mut self.lane, bytes, true)?))
    }

    /// Free the block at `p` at commit.
    pub fn free<T>(&mut self, p: PPtr<T, P>) -> Result<()> {
        if p.is_null() {
            return Ok(());
        }
        let heap = Arc::clone(&self.heap.raw);
        heap.free(&mut self.lane, p.off)
    }

    /// Lock `m` until the transaction ends (after its commit is durable); returns the pointer
    /// to the guarded value.
    pub fn lock<T: Pod>(&mut self, m: PPtr<PMutex<T>, P>) -> Result<PPtr<T, P>> {
        let () = PMutex::<T>::NO_PADDING;
        self.raw()
            .check_range(m.off, std::mem::size_of::<PMutex<T>>() as u64)?;
        if !self.held.iter().any(|h| h.0 == m.off) {
            self.heap.raw.lock_exclusive(m.off)?;
            self.held.push((m.off, true));
        }
        Ok(PPtr::from_off(m.off + 8))
    }

    /// Lock `l` shared until the transaction ends; returns the pointer to the guarded value.
    /// Reads through it are consistent with every writer's committed transaction.
    pub fn read_lock<T: Pod>(&mut self, l: PPtr<PRwLock<T>, P>) -> Result<PPtr<T, P>> {
        let () = PRwLock::<T>::NO_PADDING;
        self.raw()
            .check_range(l.off, std::mem::size_of::<PRwLock<T>>() as u64)?;
        if !self.held.iter().any(|h| h.0 == l.off) {
            self.heap.raw.lock_shared(l.off);
            self.held.push((l.off, false));
        }
        Ok(PPtr::from_off(l.off + 8))
    }

    /// Lock `l` exclusively until the transaction ends (after its commit is durable). A
    /// transaction that already holds it shared gets an error: upgrading could deadlock.
    pub fn write_lock<T: Pod>(&mut self, l: PPtr<PRwLock<T>, P>) -> Result<PPtr<T, P>> {
        let () = PRwLock::<T>::NO_PADDING;
        self.raw()
            .check_range(l.off, std::mem::size_of::<PRwLock<T>>() as u64)?;
        match self.held.iter().find(|h| h.0 == l.off) {
            Some((_, true)) => {}
            Some((_, false)) => {
                return Err(HeapError::Lock(format!(
                    "the lock at {:#x} is held shared by this transaction; it cannot be upgraded",
                    l.off
                )));
            }
            None => {
                self.heap.raw.lock_exclusive(l.off)?;
                self.held.push((l.off, true));
            }
        }
        Ok(PPtr::from_off(l.off + 8))
    }

    /// Run `f` as a nested transaction: it flattens into this one (an error aborts all).
    pub fn nested<R>(&mut self, f: impl FnOnce(&mut Self) -> Result<R>) -> Result<R> {
        let heap = Arc::clone(&self.heap.raw);
        heap.begin(&mut self.lane);
        match f(self) {
            Ok(v) => heap.commit(&mut self.lane).map(|()| v),
            Err(e) => {
                if !e.is_simulated_crash() {
                    heap.abort(&mut self.lane)?;
                }
                Err(e)
            }
        }
    }

    /// Hold the heap lock keyed by reliable object `off` until the transaction ends (the
    /// scrubber takes it too, so it never sees this transaction's half-written pairs).
    fn hold_reliable(&mut self, off: u64) -> Result<()> {
        if !self.held.iter().any(|h| h.0 == off) {
            self.heap.raw.lock_exclusive(off)?;
            self.held.push((off, true));
        }
        Ok(())
    }

    /// Allocate a reliable object holding `v` (see [`RPtr`]); the allocation takes effect at
    /// commit.
    pub fn alloc_reliable<T: Pod>(&mut self, v: T) -> Result<RPtr<T, P>> {
        let heap = Arc::clone(&self.heap.raw);
        let len = std::mem::size_of::<T>().max(1) as u64;
        let off = crate::reliable::alloc_reliable(&heap, &mut self.lane, len)?;
        self.hold_reliable(off)?;
        if std::mem::size_of::<T>() > 0 {
            crate::reliable::write_reliable(&heap, &mut self.lane, off, 0, bytemuck::bytes_of(&v))?;
        }
        Ok(RPtr::from_offset(off))
    }

    /// Read the `T` of reliable object `p`, checking every word and correcting flipped bits
    /// (the corrections are written back with this transaction). A word that cannot be
    /// corrected is [`HeapError::Uncorrectable`], naming the object and the word.
    pub fn rget<T: Pod>(&mut self, p: RPtr<T, P>) -> Result<T> {
        let heap = Arc::clone(&self.heap.raw);
        self.hold_reliable(p.off)?;
        let mut v = T::zeroed();
        crate::reliable::read_reliable(
            &heap,
            &mut self.lane,
            p.off,
            0,
            bytemuck::bytes_of_mut(&mut v),
        )?;
        Ok(v)
    }

    /// Store `v` in reliable object `p`, re-encoding its check words.
    pub fn rset<T: Pod>(&mut self, p: RPtr<T, P>, v: T) -> Result<()> {
        let heap = Arc::clone(&self.heap.raw);
        self.hold_reliable(p.off)?;
        crate::reliable::write_reliable(&heap, &mut self.lane, p.off, 0, bytemuck::bytes_of(&v))
    }

    /// Free reliable object `p` at commit.
    pub fn free_reliable<T>(&mut self, p: RPtr<T, P>) -> Result<()> {
        if p.is_null() {
            return Ok(());
        }
        let heap = Arc::clone(&self.heap.raw);
        self.hold_reliable(p.off)?;
        crate::reliable::free_reliable(&heap, &mut self.lane, p.off)
    }
}
