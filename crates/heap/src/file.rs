//! Heaps in pool files: one region of kind `heap`, named `heap` by default.

use std::path::Path;
use std::sync::Arc;

use pmem::{Alignment, CreateOptions, Mapping, Medium, OpenOptions, Pool, Region, kinds};

use crate::error::{HeapError, Result};
use crate::raw::{HeapOptions, RawHeap};

/// Name of the region [`HeapFile::create`] makes.
pub const DEFAULT_REGION: &str = "heap";

/// An open heap in a pool file.
#[derive(Debug)]
pub struct HeapFile {
    pool: Pool<Arc<Mapping>>,
    raw: Arc<RawHeap>,
    region: Region,
}

impl HeapFile {
    /// Create a pool file of `size` bytes at `path` (which must not exist) holding one heap
    /// region that fills it. On failure the file is removed.
    pub fn create(path: &Path, size: u64, opts: &HeapOptions) -> Result<HeapFile> {
        let pool = Pool::create(path, &CreateOptions { size, domain: None })?;
        let mut pool = pool.map_medium(Arc::new);
        let made = (|| {
            let free = pool.free_bytes();
            let region = pool.create_region(DEFAULT_REGION, kinds::HEAP, free, Alignment::Page)?;
            let medium: Arc<dyn Medium> = pool.medium().clone();
            RawHeap::format(&*medium, region.offset, region.length, pool.uuid().0, opts)?;
            let raw = RawHeap::open(medium, region.offset, region.length)?;
            Ok::<_, HeapError>((region, raw))
        })();
        match made {
            Ok((region, raw)) => Ok(HeapFile {
                pool,
                raw: Arc::new(raw),
                region,
            }),
            Err(e) => {
                drop(pool);
                let _ = std::fs::remove_file(path);
                Err(e)
            }
        }
    }

    /// Open the heap region `name` of the pool at `path`, recovering interrupted transactions.
    pub fn open(path: &Path, name: &str) -> Result<HeapFile> {
        let pool = Pool::open(
            path,
            &OpenOptions {
                read_only: false,
                domain: None,
            },
        )?;
        let pool = pool.map_medium(Arc::new);
        // A refusal found before the heap writes anything (no such region, a bad header, a
        // lane left UNSAVED, a damaged saved log) puts the pool back byte for byte.
        let refuse = |pool: Pool<Arc<_>>, e: HeapError| {
            let _ = pool.close_unchanged();
            Err(e)
        };
        let region = match find_region(&pool, name) {
            Ok(r) => r,
            Err(e) => return refuse(pool, e),
        };
        let medium: Arc<dyn Medium> = pool.medium().clone();
        let header = match crate::raw::read_header(&*medium, region.offset, region.length) {
            Ok(h) => h,
            Err(e) => {
                drop(medium);
                return refuse(pool, e);
            }
        };
        if pool.uuid().0 != header.uuid {
            drop(medium);
            return refuse(
                pool,
                HeapError::corrupt(
                    "heap header",
                    region.offset + 16,
                    "uuid",
                    "the pool's UUID",
                    "another pool's UUID (a copied region?)",
                ),
            );
        }
        let raw = match RawHeap::open(medium, region.offset, region.length) {
            Ok(r) => r,
            Err(e @ HeapError::NotSaved { .. }) => return refuse(pool, e),
            Err(e) => return Err(e),
        };
        Ok(HeapFile {
            pool,
            raw: Arc::new(raw),
            region,
        })
    }

    /// The engine (share it with [`crate::Heap::new`] or across threads).
    pub fn raw(&self) -> &Arc<RawHeap> {
        &self.raw
    }

    /// The heap's region in the pool.
    pub fn region(&self) -> &Region {
        &self.region
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<Arc<Mapping>> {
        &self.pool
    }

    /// Address of region offset 0 in this process (for the C API's direct pointers).
    pub fn base_ptr(&self) -> *mut u8 {
        self.pool
            .medium()
            .base_ptr()
            .wrapping_add(self.region.offset as usize)
    }

    /// Close cleanly. Fails if a transaction is still open.
    pub fn close(self) -> Result<()> {
        self.raw.quiesce()?;
        drop(self.raw);
        self.pool.close()?;
        Ok(())
    }
}

/// The heap region `name` of `pool`, checked to be of kind `heap`.
pub fn find_region<M: Medium>(pool: &Pool<M>, name: &str) -> Result<Region> {
    let region = pool
        .region(name)
        .cloned()
        .ok_or_else(|| pmem::PmemError::NoSuchRegion(name.into()))?;
    if region.kind != kinds::HEAP {
        return Err(HeapError::invalid(
            "region",
            format!(
                "`{name}` is a {} region, not a heap",
                pmem::directory::kinds::name(region.kind)
            ),
        ));
    }
    Ok(region)
}
