//! DStore's library API (the dissertation's Table 4.3), beside the RESP server.
//!
//! Each application thread makes its own [`Context`] from the store ([`Store::context`],
//! `ds_init`); dropping it or calling [`Context::finalize`] is `ds_finalize`. A context keeps
//! its own buffers and the locks it holds; the store is shared (`&Store` across threads).
//!
//! | Table 4.3 | here |
//! | --- | --- |
//! | `ctx ds_init()` | [`Store::context`] |
//! | `void ds_finalize(ctx)` | [`Context::finalize`] (or drop) |
//! | `OBJECT oopen(ctx, name, size, op)` | [`Context::oopen`] with an [`OpenMode`] |
//! | `void oclose(OBJECT)` | [`Context::oclose`] (or drop the [`ObjectHandle`]) |
//! | `ssize_t oread(OBJECT, buf, size, offset)` | [`Context::oread`] |
//! | `ssize_t owrite(OBJECT, buf, size, offset)` | [`Context::owrite`] |
//! | `ssize_t oget(ctx, key, value)` | [`Context::oget`] |
//! | `ssize_t oput(ctx, key, value, size)` | [`Context::oput`] |
//! | `int odelete(ctx, name)` | [`Context::odelete`] |
//! | `int olock(ctx, name)` | [`Context::olock`] |
//! | `int ounlock(ctx, name)` | [`Context::ounlock`] |
//!
//! Locks. As in the dissertation, a single object's writes are ordered by the store itself
//! (every object write holds the object's lock while it runs), and `olock`/`ounlock` let an
//! application hold that lock across calls to express dependencies between objects. While a
//! context holds `olock(name)`, another context's `olock`, `owrite`, `odelete` or `oput` of
//! `name` waits until `ounlock` (or until the holder is dropped). Reads do not wait: as in the
//! dissertation, reads are not logged and a reader sees the last committed write (a write
//! swaps whole blocks in under the shard's lock, so a read never sees half of one). Locks are
//! re-entrant per context (two `olock`s need two `ounlock`s). `olock` and `ounlock` each log a
//! NOOP record naming the object, as the dissertation's do; recovery ignores NOOP records, so
//! locks do not survive a crash or a restart: after recovery no object is locked.
//!
//! ```
//! use dstore::api::{self, OpenMode};
//! let store = api::in_memory(api::example_config())?;
//! let mut ctx = store.context();
//! let doc = ctx.oopen(b"doc", 0, OpenMode::CREATE)?.expect("created");
//! ctx.owrite(&doc, b"hello, object", 0)?;
//! let mut buf = [0u8; 5];
//! assert_eq!(ctx.oread(&doc, &mut buf, 7)?, 5);
//! assert_eq!(&buf, b"objec");
//! ctx.oclose(doc);
//! ctx.finalize();
//! # Ok::<(), dstore::StoreError>(())
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use pmem::{Medium, SimMedium};

use crate::error::{StoreError, StoreResult};
use crate::store::{Config, Store};

/// How [`Context::oopen`] opens an object (`op` of Table 4.3's `oopen`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenMode {
    /// Reads allowed.
    pub read: bool,
    /// Writes allowed.
    pub write: bool,
    /// Create the object if it is absent (implies `write`).
    pub create: bool,
}

impl OpenMode {
    /// Read only; an absent object is `None`.
    pub const READ: OpenMode = OpenMode {
        read: true,
        write: false,
        create: false,
    };
    /// Read and write; an absent object is `None`.
    pub const READ_WRITE: OpenMode = OpenMode {
        read: true,
        write: true,
        create: false,
    };
    /// Read and write, creating the object if absent.
    pub const CREATE: OpenMode = OpenMode {
        read: true,
        write: true,
        create: true,
    };
}

/// An open object (Table 4.3's `OBJECT`): its name and mode. It holds no lock and no state in
/// the store; calls on it go through a [`Context`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectHandle {
    name: Vec<u8>,
    mode: OpenMode,
}

impl ObjectHandle {
    /// The object's name.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The mode it was opened with.
    pub fn mode(&self) -> OpenMode {
        self.mode
    }
}

/// A thread's context (`ds_init`): its lock owner id, the locks it holds and its buffers.
/// Make one per thread with [`Store::context`]; it is `Send` but meant for one thread at a
/// time (its calls take `&mut self`). Dropping it releases every lock it holds.
pub struct Context<'s, M: Medium + Clone + Send + Sync + 'static> {
    store: &'s Store<M>,
    owner: u64,
    /// Names this context has `olock`ed, with counts.
    locked: HashMap<Vec<u8>, u32>,
    /// Scratch for partial-block writes.
    scratch: Vec<u8>,
}

impl<M: Medium + Clone + Send + Sync + 'static> std::fmt::Debug for Context<'_, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("owner", &self.owner)
            .field("locked", &self.locked.len())
            .finish()
    }
}

impl<M: Medium + Clone + Send + Sync + 'static> Store<M> {
    /// `ds_init`: a context for the calling thread.
    ///
    /// ```
    /// let store = dstore::api::in_memory(dstore::api::example_config())?;
    /// std::thread::scope(|t| {
    ///     for i in 0..2u8 {
    ///         let store = &store;
    ///         t.spawn(move || {
    ///             let mut ctx = store.context();
    ///             ctx.oput(&[b'k', i], b"v").unwrap();
    ///         });
    ///     }
    /// });
    /// assert_eq!(store.dbsize()?, 2);
    /// # Ok::<(), dstore::StoreError>(())
    /// ```
    pub fn context(&self) -> Context<'_, M> {
        Context {
            store: self,
            owner: self.locks.anonymous(),
            locked: HashMap::new(),
            scratch: Vec::new(),
        }
    }
}

fn not_allowed(h: &ObjectHandle, what: &str) -> StoreError {
    StoreError::Failed(format!(
        "object `{}` was opened with {:?}, which does not allow {what}",
        String::from_utf8_lossy(&h.name),
        h.mode
    ))
}

impl<'s, M: Medium + Clone + Send + Sync + 'static> Context<'s, M> {
    /// The store.
    pub fn store(&self) -> &'s Store<M> {
        self.store
    }

    /// `ds_finalize`: end the context, releasing every lock it still holds.
    ///
    /// ```
    /// let store = dstore::api::in_memory(dstore::api::example_config())?;
    /// let mut a = store.context();
    /// a.olock(b"dir")?;
    /// a.finalize(); // the lock goes with it
    /// let mut b = store.context();
    /// b.olock(b"dir")?; // does not wait
    /// # Ok::<(), dstore::StoreError>(())
    /// ```
    pub fn finalize(self) {}

    /// `oopen`: open object `name`. With `mode.create`, an absent object is created with size
    /// `size` (reading as zeros; a logged operation); without, an absent object is `Ok(None)`.
    /// `size` is ignored for an object that exists.
    ///
    /// ```
    /// use dstore::api::OpenMode;
    /// let store = dstore::api::in_memory(dstore::api::example_config())?;
    /// let mut ctx = store.context();
    /// assert!(ctx.oopen(b"absent", 0, OpenMode::READ)?.is_none());
    /// let h = ctx.oopen(b"new", 8192, OpenMode::CREATE)?.unwrap();
    /// assert_eq!(ctx.osize(&h)?, 8192);
    /// # Ok::<(), dstore::StoreError>(())
    /// ```
    pub fn oopen(
        &mut self,
        name: &[u8],
        size: u64,
        mode: OpenMode,
    ) -> StoreResult<Option<ObjectHandle>> {
        let exists = self.store.object_size(name)?.is_some();
        if !exists {
            if !mode.create {
                return Ok(None);
            }
            // A write of nothing at `size` creates the object with that size.
            let _hold = self.store.locks.hold(name, self.owner)?;
            if self.store.object_size(name)?.is_none() {
                self.store
                    .owrite_as(self.owner, name, size, &[], &mut self.scratch)?;
            }
        }
        let mode = if mode.create {
            OpenMode {
                write: true,
                ..mode
            }
        } else {
            mode
        };
        Ok(Some(ObjectHandle {
            name: name.to_vec(),
            mode,
        }))
    }

    /// `oclose`: close the handle (nothing is kept in the store for it).
    ///
    /// ```
    /// use dstore::api::OpenMode;
    /// let store = dstore::api::in_memory(dstore::api::example_config())?;
    /// let mut ctx = store.context();
    /// let h = ctx.oopen(b"o", 0, OpenMode::CREATE)?.unwrap();
    /// ctx.oclose(h);
    /// # Ok::<(), dstore::StoreError>(())
    /// ```
    pub fn oclose(&mut self, handle: ObjectHandle) {
        drop(handle);
    }

    /// `oread`: read into `buf` from `offset`; the bytes read (fewer at the object's end, 0 past
    /// it or if the object was deleted).
    ///
    /// ```
    /// use dstore::api::OpenMode;
    /// let store = dstore::api::in_memory(dstore::api::example_config())?;
    /// let mut ctx = store.context();
    /// let h = ctx.oopen(b"o", 0, OpenMode::CREATE)?.unwrap();
    /// ctx.owrite(&h, b"abcdef", 0)?;
    /// let mut buf = [0u8; 4];
    /// assert_eq!(ctx.oread(&h, &mut buf, 4)?, 2);
    /// assert_eq!(&buf[..2], b"ef");
    /// # Ok::<(), dstore::StoreError>(())
    /// ```
    pub fn oread(
        &mut self,
        handle: &ObjectHandle,
        buf: &mut [u8],
        offset: u64,
    ) -> StoreResult<usize> {
        if !handle.mode.read {
            return Err(not_allowed(handle, "reads"));
        }
        Ok(self
            .store
            .oread_into(&handle.name, offset, buf)?
            .unwrap_or(0))
    }

    /// `owrite`: write `buf` at `offset` (a gap reads as zeros); the bytes written. Durable
    /// when it returns (with the default `ForcePolicy::Sync`): with an object data file, the
    /// data is synced before the record pointing at it is logged. Waits while another context
    /// holds the object's `olock`.
    ///
    /// ```
    /// use dstore::api::OpenMode;
    /// let store = dstore::api::in_memory(dstore::api::example_config())?;
    /// let mut ctx = store.context();
    /// let h = ctx.oopen(b"o", 0, OpenMode::CREATE)?.unwrap();
    /// assert_eq!(ctx.owrite(&h, &[7u8; 4096], 4096)?, 4096);
    /// assert_eq!(ctx.osize(&h)?, 8192);
    /// # Ok::<(), dstore::StoreError>(())
    /// ```
    pub fn owrite(&mut self, handle: &ObjectHandle, buf: &[u8], offset: u64) -> StoreResult<usize> {
        if !handle.mode.write {
            return Err(not_allowed(handle, "writes"));
        }
        self.store
            .owrite_as(self.owner, &handle.name, offset, buf, &mut self.scratch)?;
        Ok(buf.len())
    }

    /// The object's size (0 if it was deleted since it was opened).
    ///
    /// ```
    /// use dstore::api::OpenMode;
    /// let store = dstore::api::in_memory(dstore::api::example_config())?;
    /// let mut ctx = store.context();
    /// let h = ctx.oopen(b"o", 100, OpenMode::CREATE)?.unwrap();
    /// assert_eq!(ctx.osize(&h)?, 100);
    /// # Ok::<(), dstore::StoreError>(())
    /// ```
    pub fn osize(&self, handle: &ObjectHandle) -> StoreResult<u64> {
        Ok(self.store.object_size(&handle.name)?.unwrap_or(0))
    }

    /// `oget`: the string value of `key` into `value` (replacing its contents); its length, or
    /// `None` if absent. An object is [`StoreError::WrongType`] (read it with `oread`).
    ///
    /// ```
    /// let store = dstore::api::in_memory(dstore::api::example_config())?;
    /// let mut ctx = store.context();
    /// ctx.oput(b"k", b"value")?;
    /// let mut v = Vec::new();
    /// assert_eq!(ctx.oget(b"k", &mut v)?, Some(5));
    /// assert_eq!(v, b"value");
    /// assert_eq!(ctx.oget(b"absent", &mut v)?, None);
    /// # Ok::<(), dstore::StoreError>(())
    /// ```
    pub fn oget(&mut self, key: &[u8], value: &mut Vec<u8>) -> StoreResult<Option<usize>> {
        match self.store.get(key)? {
            None => Ok(None),
            Some(v) => {
                value.clear();
                value.extend_from_slice(&v);
                Ok(Some(v.len()))
            }
        }
    }

    /// `oput`: set `key` to the string `value` (kept in the DRAM arenas and logged whole; for
    /// large values use an object). Waits while another context holds `olock(key)`.
    ///
    /// ```
    /// let store = dstore::api::in_memory(dstore::api::example_config())?;
    /// let mut ctx = store.context();
    /// ctx.oput(b"k", b"1")?;
    /// assert_eq!(store.get(b"k")?, Some(b"1".to_vec()));
    /// # Ok::<(), dstore::StoreError>(())
    /// ```
    pub fn oput(&mut self, key: &[u8], value: &[u8]) -> StoreResult<()> {
        let _hold = self.store.locks.hold(key, self.owner)?;
        self.store.set(key, value, false, false, None)?;
        Ok(())
    }

    /// `odelete`: delete the object or key `name`; whether it existed. Waits while another
    /// context holds `olock(name)`. An object's blocks are reused once the delete is durable
    /// (data zone) or once a checkpoint that began after it has finished (object data file).
    ///
    /// ```
    /// use dstore::api::OpenMode;
    /// let store = dstore::api::in_memory(dstore::api::example_config())?;
    /// let mut ctx = store.context();
    /// ctx.oopen(b"o", 10, OpenMode::CREATE)?;
    /// assert!(ctx.odelete(b"o")?);
    /// assert!(!ctx.odelete(b"o")?);
    /// # Ok::<(), dstore::StoreError>(())
    /// ```
    pub fn odelete(&mut self, name: &[u8]) -> StoreResult<bool> {
        let _hold = self.store.locks.hold(name, self.owner)?;
        Ok(self.store.del(&[name])? == 1)
    }

    /// `olock`: take the lock on `name` (an object or any name: it need not exist), waiting
    /// while another context holds it; logs a NOOP record naming it. Held until `ounlock` or
    /// until this context is dropped; not kept across a crash.
    ///
    /// ```
    /// let store = dstore::api::in_memory(dstore::api::example_config())?;
    /// let mut ctx = store.context();
    /// ctx.olock(b"dir")?;
    /// ctx.olock(b"dir")?; // re-entrant
    /// ctx.ounlock(b"dir")?;
    /// ctx.ounlock(b"dir")?;
    /// assert!(ctx.ounlock(b"dir").is_err(), "not held any more");
    /// # Ok::<(), dstore::StoreError>(())
    /// ```
    pub fn olock(&mut self, name: &[u8]) -> StoreResult<()> {
        self.store.locks.acquire(name, self.owner)?;
        if let Err(e) = self.store.lock_name(name) {
            self.store.locks.release(name, self.owner);
            return Err(e);
        }
        *self.locked.entry(name.to_vec()).or_insert(0) += 1;
        Ok(())
    }

    /// `ounlock`: give back one `olock` of `name` (logging a NOOP record); an error if this
    /// context does not hold it.
    ///
    /// ```
    /// let store = dstore::api::in_memory(dstore::api::example_config())?;
    /// let mut ctx = store.context();
    /// assert!(ctx.ounlock(b"never-locked").is_err());
    /// ctx.olock(b"a")?;
    /// ctx.ounlock(b"a")?;
    /// # Ok::<(), dstore::StoreError>(())
    /// ```
    pub fn ounlock(&mut self, name: &[u8]) -> StoreResult<()> {
        let Some(n) = self.locked.get_mut(name) else {
            return Err(StoreError::Failed(format!(
                "ounlock of `{}`: this context holds no lock on it",
                String::from_utf8_lossy(name)
            )));
        };
        *n -= 1;
        if *n == 0 {
            self.locked.remove(name);
        }
        // The unlock is released even if its NOOP record cannot be logged.
        let logged = self.store.lock_name(name);
        self.store.locks.release(name, self.owner);
        logged
    }

    /// Does another context (or call) hold the lock on `name` now? (For tests and diagnostics:
    /// the answer may be stale when it returns.)
    pub fn locked_by_other(&self, name: &[u8]) -> bool {
        self.store
            .locks
            .state(name)
            .0
            .is_some_and(|o| o != self.owner)
    }

    /// How many threads wait for the lock on `name` now (for tests and diagnostics: a test
    /// can wait until a writer is blocked before it unlocks).
    pub fn lock_waiters(&self, name: &[u8]) -> u32 {
        self.store.locks.state(name).1
    }
}

impl<M: Medium + Clone + Send + Sync + 'static> Drop for Context<'_, M> {
    fn drop(&mut self) {
        for (name, n) in self.locked.drain() {
            for _ in 0..n {
                self.store.locks.release(&name, self.owner);
            }
        }
    }
}

/// A small configuration for [`in_memory`] stores (4 shards, small logs).
pub fn example_config() -> Config {
    Config {
        shards: 4,
        log_bytes: 64 << 10,
        slot_bytes: 512 << 10,
        background: false,
        data_bytes: 256 << 10,
        ..Config::default()
    }
}

/// A store on a simulated PM medium (8 MiB) with its object data in a [`crate::zone::MemFile`]:
/// for examples and tests, nothing touches a disk.
pub fn in_memory(config: Config) -> StoreResult<Store<Arc<SimMedium>>> {
    let sim = Arc::new(SimMedium::new(8 << 20, pmem::SimConfig::default()));
    let failed = |e: pmem::PmemError| StoreError::Failed(format!("simulated pool: {e}"));
    let m = pmem::Pool::format(sim, pmem::Domain::Sim).map_err(failed)?;
    let pool = pmem::Pool::open_medium(m, &pmem::OpenOptions::default()).map_err(failed)?;
    let file: Arc<dyn crate::zone::ObjectFile> = Arc::new(crate::zone::MemFile::new(Vec::new()));
    Store::create_with_object_file(pool, config, Some(file))
}
