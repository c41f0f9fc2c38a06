//! The exported functions of `kavach.h` and the two helpers that read what C passes in (the
//! `kv_pool *` and path arguments): all of the crate's unsafe code. The contract each function
//! states under `# Safety` is the C caller's side of the header; `docs/unsafe.md`, "The C
//! interface", is the argument that it suffices.

use super::*;

// ------------------------------------------------------------------------------- arguments from C
/// The pool behind `pop`.
///
/// # Safety
///
/// `pop` is null or a pointer returned by `kv_pool_create` / `kv_pool_open` whose
/// `kv_pool_close` has not started.
unsafe fn pool<'a>(pop: *const KvPool) -> Result<&'a KvPool, KvError> {
    // SAFETY: by this function's contract `pop` is null (as_ref gives None) or points to a live
    // `KvPool` box, which is only freed by `kv_pool_close`; it is only read through shared
    // references (every field is immutable or internally synchronized).
    match unsafe { pop.as_ref() } {
        None => Err(KvError::new(KV_EINVAL, "the pool pointer is null")),
        Some(p) if p.magic != POOL_MAGIC => Err(KvError::new(
            KV_EINVAL,
            "the pool pointer does not point to an open pool",
        )),
        Some(p) => Ok(p),
    }
}

/// The path behind `path`.
///
/// # Safety
///
/// `path` is null or points to a NUL-terminated string that stays unchanged during the call.
unsafe fn c_path<'a>(path: *const c_char) -> Result<&'a Path, KvError> {
    if path.is_null() {
        return Err(KvError::new(KV_EINVAL, "the path is null"));
    }
    // SAFETY: non-null, and by this function's contract a NUL-terminated string that is not
    // changed while we use it (only during this call).
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    Ok(Path::new(OsStr::from_bytes(bytes)))
}

// ------------------------------------------------------------------------------- the C API

/// `kv_pool_create`: create a pool file of `size` bytes at `path` (which must not exist).
///
/// # Safety
///
/// `path` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_pool_create(path: *const c_char, size: u64) -> *mut KvPool {
    // SAFETY: this function's contract.
    unsafe { kv_pool_create_flags(path, size, 0) }
}

/// `kv_pool_create_flags`: `kv_pool_create` with `KV_OPEN_*` flags.
///
/// # Safety
///
/// `path` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_pool_create_flags(
    path: *const c_char,
    size: u64,
    flags: c_int,
) -> *mut KvPool {
    guard(ptr::null_mut(), || {
        // SAFETY: this function's contract.
        match unsafe { c_path(path) }.and_then(|path| Ok((path, create_flags(flags)?))) {
            Ok((path, (flags, redundancy))) => handle(
                HeapFile::create_protected(path, size, &HeapOptions::default(), redundancy, None),
                flags,
            ),
            Err(e) => {
                fail(e);
                ptr::null_mut()
            }
        }
    })
}

/// `kv_pool_open`: open and recover the pool at `path`.
///
/// # Safety
///
/// `path` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_pool_open(path: *const c_char) -> *mut KvPool {
    // SAFETY: this function's contract.
    unsafe { kv_pool_open_flags(path, 0) }
}

/// `kv_pool_open_flags`: `kv_pool_open` with `KV_OPEN_*` flags.
///
/// # Safety
///
/// `path` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_pool_open_flags(path: *const c_char, flags: c_int) -> *mut KvPool {
    guard(ptr::null_mut(), || {
        // SAFETY: this function's contract.
        match unsafe { c_path(path) }.and_then(|path| Ok((path, open_flags(flags)?))) {
            Ok((path, flags)) => handle(HeapFile::open(path, DEFAULT_REGION), flags),
            Err(e) => {
                fail(e);
                ptr::null_mut()
            }
        }
    })
}

/// `kv_pool_close`: close the pool. With a transaction open on the calling thread it fails
/// with `KV_EINVAL` and the pool stays open; on any other outcome `pop` is gone.
///
/// # Safety
///
/// `pop` is null, or a pointer from `kv_pool_create` / `kv_pool_open`, and no other thread
/// uses the pool during or after this call (a pointer that was already closed is detected
/// unless the address was handed out again).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_pool_close(pop: *mut KvPool) -> c_int {
    guard(KV_EIO, || {
        if pop.is_null() {
            return fail(KvError::new(KV_EINVAL, "the pool pointer is null"));
        }
        let p = {
            let mut live = live_pools();
            let Some(i) = live.iter().position(|a| *a == pop.addr()) else {
                return fail(KvError::new(
                    KV_EINVAL,
                    "the pool pointer does not point to an open pool (closed twice?)",
                ));
            };
            // SAFETY: registered in LIVE, so a box we handed out that nobody freed (only this
            // function frees, after unregistering under the same lock).
            let key = unsafe { &*pop }.key;
            let open = with_slots(|slots| {
                if let Some(i) = slots.iter().position(|s| s.key == key) {
                    if slots[i].lane.is_some() {
                        return Ok(true);
                    }
                    slots.swap_remove(i);
                }
                Ok(false)
            });
            if open.unwrap_or(false) {
                return fail(KvError::new(
                    KV_EINVAL,
                    "kv_pool_close: the calling thread has an open transaction on this pool \
                     (commit or abort it first); the pool stays open",
                ));
            }
            live.swap_remove(i);
            // SAFETY: from Box::into_raw in `handle`, and just unregistered under the lock, so
            // no other close can free it again; the caller guarantees no other use.
            unsafe { Box::from_raw(pop) }
        };
        let KvPool {
            raw,
            file,
            on_demand,
            ..
        } = *p;
        drop(on_demand);
        drop(raw);
        status(file.close().map_err(|e| match e {
            // Only from the check that no lane is inside a transaction: one was left open (a
            // rollback that failed, or a thread that ended without its thread-exit handlers).
            HeapError::TxState(_) => KvError::new(
                KV_EBUSY,
                "kv_pool_close: a transaction was left open on this pool; the pool was closed \
                 anyway, without a clean shutdown (the next open rolls the transaction back)",
            ),
            e => KvError::new(
                heap_code(&e),
                format!("kv_pool_close: {e}; the pool was closed anyway"),
            ),
        }))
    })
}

/// `kv_pool_redundancy`: the `KV_CREATE_*` flag of the pool's redundancy (0 for off, and for
/// a null pool, with `KV_EINVAL`).
///
/// # Safety
///
/// `pop` is null or an open pool.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_pool_redundancy(pop: *const KvPool) -> c_int {
    guard(0, || {
        // SAFETY: this function's contract.
        match unsafe { pool(pop) } {
            Ok(p) => redundancy_flag(p.file.redundancy()),
            Err(e) => {
                fail(e);
                0
            }
        }
    })
}

/// `kv_pool_id`: the pool's id (0 for a null pool).
///
/// # Safety
///
/// `pop` is null or an open pool.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_pool_id(pop: *const KvPool) -> u64 {
    guard(0, || {
        // SAFETY: this function's contract.
        match unsafe { pool(pop) } {
            Ok(p) => p.pool_id,
            Err(e) => {
                fail(e);
                0
            }
        }
    })
}

/// `kv_root`: the root object, allocated zeroed on the first call.
///
/// # Safety
///
/// `pop` is null or an open pool.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_root(pop: *mut KvPool, size: usize) -> KvOid {
    guard(KvOid::NULL, || {
        // SAFETY: this function's contract.
        let r = unsafe { pool(pop) }
            .and_then(|p| Ok(p.oid(p.raw.root(size as u64).map_err(KvError::from)?.0)));
        r.unwrap_or_else(|e| {
            fail(e);
            KvOid::NULL
        })
    })
}

#[cold]
fn direct_fail(p: &KvPool, oid: KvOid) -> *mut c_void {
    let e = match p.own(oid) {
        Err(e) => e,
        Ok(off) => KvError::new(
            KV_EINVAL,
            format!(
                "offset {off:#x} is not inside the heap's data zone [{:#x}, {:#x})",
                p.zone_start, p.zone_end
            ),
        ),
    };
    fail(e);
    ptr::null_mut()
}

/// `kv_direct`: the address of `oid`, or NULL for the null oid, an oid of another pool or an
/// offset outside the heap's data zone.
///
/// # Safety
///
/// `pop` is null or an open pool.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_direct(pop: *const KvPool, oid: KvOid) -> *mut c_void {
    guard(ptr::null_mut(), || {
        // SAFETY: this function's contract.
        let p = match unsafe { pool(pop) } {
            Ok(p) => p,
            Err(e) => {
                fail(e);
                return ptr::null_mut();
            }
        };
        if oid.off == 0 {
            return ptr::null_mut();
        }
        if oid.pool_id != p.pool_id || oid.off < p.zone_start || oid.off >= p.zone_end {
            return direct_fail(p, oid);
        }
        // In the zone, so inside the mapping (or the staging range): no overflow.
        ptr::with_exposed_provenance_mut(p.addr_of(oid.off))
    })
}

/// `kv_oid_of`: the oid of an address inside the pool's data zone, or the null oid.
///
/// # Safety
///
/// `pop` is null or an open pool. `addr` is only compared, never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_oid_of(pop: *const KvPool, addr: *const c_void) -> KvOid {
    guard(KvOid::NULL, || {
        // SAFETY: this function's contract.
        let p = match unsafe { pool(pop) } {
            Ok(p) => p,
            Err(e) => {
                fail(e);
                return KvOid::NULL;
            }
        };
        match p.locate(addr.addr(), 1) {
            Some(off) => p.oid(off),
            None => {
                fail(KvError::new(
                    KV_EINVAL,
                    format!("address {addr:p} is not inside the pool's heap"),
                ));
                KvOid::NULL
            }
        }
    })
}

/// `kv_usable_size`: the usable size of an allocated block, 0 for anything else.
///
/// # Safety
///
/// `pop` is null or an open pool.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_usable_size(pop: *mut KvPool, oid: KvOid) -> usize {
    guard(0, || {
        // SAFETY: this function's contract.
        let r = unsafe { pool(pop) }.and_then(|p| {
            let off = p.own(oid)?;
            p.raw.usable_size(off).ok_or_else(|| {
                KvError::new(
                    KV_EINVAL,
                    format!("no allocated block starts at offset {off:#x}"),
                )
            })
        });
        match r {
            Ok(n) => usize::try_from(n).unwrap_or(usize::MAX),
            Err(e) => {
                fail(e);
                0
            }
        }
    })
}

/// `kv_tx_begin`: begin a transaction on the calling thread, or a nested level of its open
/// one.
///
/// # Safety
///
/// `pop` is null or an open pool.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_tx_begin(pop: *mut KvPool) -> c_int {
    guard(KV_EIO, || {
        // SAFETY: this function's contract.
        status(unsafe { pool(pop) }.and_then(|p| tx_begin(p, KV_TX_UNDO)))
    })
}

/// `kv_tx_begin_mode`: `kv_tx_begin` in mode `KV_TX_UNDO` or `KV_TX_REDO` (a nested level
/// keeps the outer level's mode).
///
/// # Safety
///
/// `pop` is null or an open pool.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_tx_begin_mode(pop: *mut KvPool, mode: c_int) -> c_int {
    guard(KV_EIO, || {
        // SAFETY: this function's contract.
        status(unsafe { pool(pop) }.and_then(|p| tx_begin(p, mode)))
    })
}

/// `kv_tx_mode`: the mode of the calling thread's open transaction on `pop`, -1 without one.
///
/// # Safety
///
/// `pop` is null or an open pool.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_tx_mode(pop: *const KvPool) -> c_int {
    guard(-1, || {
        // SAFETY: this function's contract.
        match unsafe { pool(pop) } {
            Ok(p) => tx_mode_of(p).unwrap_or(-1),
            Err(e) => {
                fail(e);
                -1
            }
        }
    })
}

/// `kv_tx_write`: store `len` bytes from `src` at `dst` (an address of the pool's heap, staged
/// or not) in the calling thread's transaction.
///
/// # Safety
///
/// `pop` is null or an open pool. `dst` is only compared. `src` is null, or an address in the
/// pool (read through the engine, as the transaction sees it), or points to `len` readable
/// bytes that nothing changes during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_tx_write(
    pop: *mut KvPool,
    dst: *mut c_void,
    src: *const c_void,
    len: usize,
) -> c_int {
    guard(KV_EIO, || {
        // SAFETY: this function's contract.
        status(unsafe { pool(pop) }.and_then(|p| {
            tx_op(p, "kv_tx_write", |raw, lane| {
                if len == 0 {
                    return Ok(());
                }
                let off = p.locate(dst.addr(), len as u64).ok_or_else(|| {
                    KvError::new(
                        KV_EINVAL,
                        format!("kv_tx_write: [{dst:p}, +{len}) is not inside the pool's heap"),
                    )
                })?;
                if src.is_null() {
                    return Err(KvError::new(KV_EINVAL, "kv_tx_write: the source is null"));
                }
                if let Some(from) = p.locate(src.addr(), len as u64) {
                    // A copy inside the pool: read it as the transaction sees it.
                    let mut buf = vec![0u8; len];
                    raw.read_tx(lane, from, &mut buf)?;
                    return Ok(raw.write(lane, off, &buf)?);
                }
                // SAFETY: not in the pool, so by this function's contract `len` readable bytes
                // that stay unchanged during the call.
                let data = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), len) };
                Ok(raw.write(lane, off, data)?)
            })
        }))
    })
}

/// `kv_tx_read`: copy `len` bytes at `src` (an address of the pool's heap, staged or not) to
/// `dst`, as the calling thread's transaction sees them, or the committed bytes without one.
///
/// # Safety
///
/// `pop` is null or an open pool. `src` is only compared. `dst` is null, or points to `len`
/// writable bytes outside the pool that nothing else accesses during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_tx_read(
    pop: *mut KvPool,
    dst: *mut c_void,
    src: *const c_void,
    len: usize,
) -> c_int {
    guard(KV_EIO, || {
        // SAFETY: this function's contract.
        let p = match unsafe { pool(pop) } {
            Ok(p) => p,
            Err(e) => return fail(e),
        };
        let check = || -> Result<Option<u64>, KvError> {
            if len == 0 {
                return Ok(None);
            }
            let from = p.locate(src.addr(), len as u64).ok_or_else(|| {
                KvError::new(
                    KV_EINVAL,
                    format!("kv_tx_read: [{src:p}, +{len}) is not inside the pool's heap"),
                )
            })?;
            if dst.is_null() {
                return Err(KvError::new(
                    KV_EINVAL,
                    "kv_tx_read: the destination is null",
                ));
            }
            if p.overlaps(dst.addr(), len) {
                return Err(KvError::new(
                    KV_EINVAL,
                    format!(
                        "kv_tx_read: the destination [{dst:p}, +{len}) is inside the pool \
                         (store into the pool with kv_tx_write)"
                    ),
                ));
            }
            Ok(Some(from))
        };
        // SAFETY: called only after `check` passed: `dst` is non-null and outside the pool, so
        // by this function's contract `len` writable bytes nothing else accesses now.
        let buf = || unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), len) };
        status(tx_or_not(
            p,
            |raw, lane| match check()? {
                Some(from) => Ok(raw.read_tx(lane, from, buf())?),
                None => Ok(()),
            },
            |raw| match check()? {
                Some(from) => Ok(raw.read(from, buf())?),
                None => Ok(()),
            },
        ))
    })
}

/// `kv_tx_add_range`: snapshot `[oid.off + off, oid.off + off + len)`.
///
/// # Safety
///
/// `pop` is null or an open pool.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_tx_add_range(
    pop: *mut KvPool,
    oid: KvOid,
    off: u64,
    len: usize,
) -> c_int {
    guard(KV_EIO, || {
        // SAFETY: this function's contract.
        status(unsafe { pool(pop) }.and_then(|p| {
            tx_op(p, "kv_tx_add_range", |raw, lane| {
                let start = p.own(oid)?.checked_add(off).ok_or_else(|| {
                    KvError::new(KV_EINVAL, format!("oid offset + {off} overflows"))
                })?;
                Ok(raw.add_range(lane, start, len as u64)?)
            })
        }))
    })
}

/// `kv_tx_add_direct`: snapshot `[ptr, ptr + len)`, an address range inside the pool's heap.
///
/// # Safety
///
/// `pop` is null or an open pool. `ptr` is only compared (the bytes are read through the
/// pool's mapping, after the range is checked to lie in the heap).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_tx_add_direct(pop: *mut KvPool, ptr: *mut c_void, len: usize) -> c_int {
    guard(KV_EIO, || {
        // SAFETY: this function's contract.
        status(unsafe { pool(pop) }.and_then(|p| {
            tx_op(p, "kv_tx_add_direct", |raw, lane| {
                let off = p.offset_of(ptr.addr());
                if ptr.is_null() || !p.in_zone(off, len as u64) {
                    return Err(KvError::new(
                        KV_EINVAL,
                        format!("[{ptr:p}, +{len}) is not inside the pool's heap"),
                    ));
                }
                Ok(raw.add_range(lane, off, len as u64)?)
            })
        }))
    })
}

/// # Safety
///
/// `pop` is null or an open pool.
unsafe fn tx_alloc(pop: *mut KvPool, size: usize, zero: bool, what: &str) -> KvOid {
    guard(KvOid::NULL, || {
        // SAFETY: this function's contract.
        let r = unsafe { pool(pop) }.and_then(|p| {
            tx_op(p, what, |raw, lane| {
                Ok(p.oid(raw.alloc(lane, size as u64, zero)?))
            })
        });
        r.unwrap_or_else(|e| {
            fail(e);
            KvOid::NULL
        })
    })
}

/// `kv_tx_alloc`: allocate `size` bytes (contents undefined) in the transaction.
///
/// # Safety
///
/// `pop` is null or an open pool.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_tx_alloc(pop: *mut KvPool, size: usize) -> KvOid {
    // SAFETY: this function's contract.
    unsafe { tx_alloc(pop, size, false, "kv_tx_alloc") }
}

/// `kv_tx_zalloc`: allocate `size` zeroed bytes in the transaction.
///
/// # Safety
///
/// `pop` is null or an open pool.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_tx_zalloc(pop: *mut KvPool, size: usize) -> KvOid {
    // SAFETY: this function's contract.
    unsafe { tx_alloc(pop, size, true, "kv_tx_zalloc") }
}

/// `kv_tx_free`: free an allocated block at commit; the null oid does nothing.
///
/// # Safety
///
/// `pop` is null or an open pool.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_tx_free(pop: *mut KvPool, oid: KvOid) -> c_int {
    guard(KV_EIO, || {
        // SAFETY: this function's contract.
        status(unsafe { pool(pop) }.and_then(|p| {
            tx_op(p, "kv_tx_free", |raw, lane| {
                if oid.off == 0 {
                    return Ok(());
                }
                Ok(raw.free(lane, p.own(oid)?)?)
            })
        }))
    })
}

/// `kv_tx_commit`: commit (outermost level) or leave a nested level.
///
/// # Safety
///
/// `pop` is null or an open pool.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_tx_commit(pop: *mut KvPool) -> c_int {
    guard(KV_EIO, || {
        // SAFETY: this function's contract.
        status(unsafe { pool(pop) }.and_then(tx_commit))
    })
}

/// `kv_tx_abort`: abort the whole transaction and leave the current level.
///
/// # Safety
///
/// `pop` is null or an open pool.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_tx_abort(pop: *mut KvPool, err: c_int) {
    guard((), || {
        // SAFETY: this function's contract.
        if let Err(e) = unsafe { pool(pop) }.and_then(|p| tx_abort(p, err)) {
            fail(e);
        }
    })
}

/// `kv_tx_active`: 1 if the calling thread is in a transaction of `pop`, else 0.
///
/// # Safety
///
/// `pop` is null or an open pool.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_tx_active(pop: *const KvPool) -> c_int {
    guard(0, || {
        // SAFETY: this function's contract.
        match unsafe { pool(pop) } {
            Ok(p) => c_int::from(tx_active(p)),
            Err(e) => {
                fail(e);
                0
            }
        }
    })
}

/// `kv_mutex_lock`: lock the mutex at `m` (inside the pool's heap), waiting for it.
///
/// # Safety
///
/// `pop` is null or an open pool. `m` is only compared, never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_mutex_lock(pop: *mut KvPool, m: *mut KvMutex) -> c_int {
    guard(KV_EIO, || {
        // SAFETY: this function's contract.
        status(unsafe { pool(pop) }.and_then(|p| Ok(p.raw.lock_exclusive(p.mutex_key(m)?)?)))
    })
}

/// `kv_mutex_unlock`: unlock the mutex at `m`, which the calling thread holds.
///
/// # Safety
///
/// `pop` is null or an open pool. `m` is only compared, never dereferenced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_mutex_unlock(pop: *mut KvPool, m: *mut KvMutex) -> c_int {
    guard(KV_EIO, || {
        // SAFETY: this function's contract.
        status(unsafe { pool(pop) }.and_then(|p| Ok(p.raw.unlock_exclusive(p.mutex_key(m)?)?)))
    })
}

/// `kv_errormsg`: the calling thread's last error message ("" if none), valid until its next
/// failing `kv_*` call.
#[unsafe(no_mangle)]
pub extern "C" fn kv_errormsg() -> *const c_char {
    const EMPTY: &CStr = c"";
    guard(EMPTY.as_ptr(), || {
        LAST_ERROR
            .try_with(|b| match b.try_borrow() {
                Ok(b) if !b.is_empty() => b.as_ptr().cast::<c_char>(),
                _ => EMPTY.as_ptr(),
            })
            .unwrap_or(EMPTY.as_ptr())
    })
}

// ---------------------------------------------------------------------------- reliable objects

/// A word of a reliable object failed its check and could not be corrected (`kv_errormsg`
/// names the object and the word).
pub const KV_EUNCORRECTABLE: c_int = 11;
/// `kv_tx_alloc_flags`: a reliable object (every 8-byte word stored beside a check word).
pub const KV_ALLOC_RELIABLE: c_int = 1;

/// `kv_tx_alloc_flags`: allocate `size` bytes; with `KV_ALLOC_RELIABLE`, a reliable object of
/// `size` zero bytes, read and written only with `kv_rtx_read` / `kv_rtx_write`.
///
/// # Safety
///
/// `pop` is null or an open pool.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_tx_alloc_flags(pop: *mut KvPool, size: usize, flags: c_int) -> KvOid {
    guard(KvOid::NULL, || {
        // SAFETY: this function's contract.
        let r = unsafe { pool(pop) }.and_then(|p| {
            tx_op(p, "kv_tx_alloc_flags", |raw, lane| match flags {
                0 => Ok(p.oid(raw.alloc(lane, size as u64, false)?)),
                KV_ALLOC_RELIABLE => {
                    Ok(p.oid(heap::reliable::alloc_reliable(raw, lane, size as u64)?))
                }
                f => Err(KvError::new(
                    KV_EINVAL,
                    format!(
                        "kv_tx_alloc_flags: unknown flags {f:#x} (known: KV_ALLOC_RELIABLE = 1)"
                    ),
                )),
            })
        });
        r.unwrap_or_else(|e| {
            fail(e);
            KvOid::NULL
        })
    })
}

/// `kv_rtx_read`: copy `len` logical bytes at byte `off` of reliable object `oid` to `dst`, in
/// the calling thread's transaction, checking (and correcting) every word read.
///
/// # Safety
///
/// `pop` is null or an open pool. `dst` is null, or points to `len` writable bytes outside the
/// pool that nothing else accesses during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_rtx_read(
    pop: *mut KvPool,
    oid: KvOid,
    off: u64,
    dst: *mut c_void,
    len: usize,
) -> c_int {
    guard(KV_EIO, || {
        // SAFETY: this function's contract.
        status(unsafe { pool(pop) }.and_then(|p| {
            tx_op(p, "kv_rtx_read", |raw, lane| {
                let obj = p.own(oid)?;
                if len == 0 {
                    return Ok(());
                }
                if dst.is_null() {
                    return Err(KvError::new(
                        KV_EINVAL,
                        "kv_rtx_read: the destination is null",
                    ));
                }
                if p.overlaps(dst.addr(), len) {
                    return Err(KvError::new(
                        KV_EINVAL,
                        format!(
                            "kv_rtx_read: the destination [{dst:p}, +{len}) is inside the pool"
                        ),
                    ));
                }
                let mut buf = vec![0u8; len];
                heap::reliable::read_reliable(raw, lane, obj, off, &mut buf)?;
                // SAFETY: `dst` is non-null and outside the pool, so by this function's
                // contract `len` writable bytes nothing else accesses now.
                unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), len) }
                    .copy_from_slice(&buf);
                Ok(())
            })
        }))
    })
}

/// `kv_rtx_write`: store `len` bytes from `src` at logical byte `off` of reliable object `oid`
/// in the calling thread's transaction, re-encoding the check words.
///
/// # Safety
///
/// `pop` is null or an open pool. `src` is null, or an address in the pool (read as the
/// transaction sees it), or points to `len` readable bytes that nothing changes during the
/// call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_rtx_write(
    pop: *mut KvPool,
    oid: KvOid,
    off: u64,
    src: *const c_void,
    len: usize,
) -> c_int {
    guard(KV_EIO, || {
        // SAFETY: this function's contract.
        status(unsafe { pool(pop) }.and_then(|p| {
            tx_op(p, "kv_rtx_write", |raw, lane| {
                let obj = p.own(oid)?;
                if len == 0 {
                    return Ok(());
                }
                if src.is_null() {
                    return Err(KvError::new(KV_EINVAL, "kv_rtx_write: the source is null"));
                }
                let data = match p.locate(src.addr(), len as u64) {
                    Some(from) => {
                        let mut buf = vec![0u8; len];
                        raw.read_tx(lane, from, &mut buf)?;
                        buf
                    }
                    // SAFETY: not in the pool, so by this function's contract `len` readable
                    // bytes that stay unchanged during the call.
                    None => unsafe { std::slice::from_raw_parts(src.cast::<u8>(), len) }.to_vec(),
                };
                Ok(heap::reliable::write_reliable(raw, lane, obj, off, &data)?)
            })
        }))
    })
}

/// `kv_pool_on_demand`: durability on demand for redo transactions, saved on SIGPWR within
/// `window_ms`.
///
/// # Safety
///
/// `pop` is null or an open pool.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_pool_on_demand(pop: *mut KvPool, window_ms: f64) -> c_int {
    guard(KV_EIO, || {
        // SAFETY: this function's contract.
        status(unsafe { pool(pop) }.and_then(|p| p.on_demand(window_ms)))
    })
}

/// `kv_pool_durability`: 1 if redo commits are durable on demand, 0 if they flush at commit,
/// -1 for a bad pool.
///
/// # Safety
///
/// `pop` is null or an open pool.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kv_pool_durability(pop: *const KvPool) -> c_int {
    guard(-1, || {
        // SAFETY: this function's contract.
        match unsafe { pool(pop) } {
            Ok(p) => c_int::from(p.raw.durability() == heap::raw::Durability::OnDemand),
            Err(e) => {
                fail(e);
                -1
            }
        }
    })
}
