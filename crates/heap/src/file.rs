//! Heaps in pool files: one region of kind `heap`, named `heap` by default.

use std::path::Path;
use std::sync::Arc;

use pmem::{Alignment, CreateOptions, Mapping, Medium, OpenOptions, Pool, Region, kinds};

use crate::error::{HeapError, Result};
use crate::protect::{Guard, OpenProtection, Redundancy};
use crate::raw::{HeapOptions, RawHeap};

/// Name of the region [`HeapFile::create`] makes.
pub const DEFAULT_REGION: &str = "heap";

/// An open heap in a pool file.
#[derive(Debug)]
pub struct HeapFile {
    pool: Pool<Arc<Mapping>>,
    raw: Arc<RawHeap>,
    region: Region,
    /// The protection (`None` for redundancy off).
    guard: Option<Arc<Guard<Arc<Mapping>>>>,
    redundancy: Redundancy,
}

/// Bytes of a heap region that leaves room for its integrity region in `free` bytes.
fn heap_bytes_beside_integrity(free: u64) -> Result<u64> {
    let page = pmem::layout::PAGE_SIZE as u64;
    let meta = |bytes: u64| {
        integrity::Geometry::new(bytes / page, integrity::layout::STRIPE_PAGES_DEFAULT)
            .map(|g| g.meta_bytes)
    };
    // The directory may round each region up to a page: leave one spare page per region.
    let total = meta(free).unwrap_or(0) + 2 * page;
    let bytes = free.saturating_sub(total) / page * page;
    match meta(bytes) {
        Some(m) if bytes > 0 && bytes + m + 2 * page <= free => Ok(bytes),
        _ => Err(HeapError::invalid(
            "pool size",
            format!("{free} free bytes leave no room for a protected heap"),
        )),
    }
}

impl HeapFile {
    /// Create a pool file of `size` bytes at `path` (which must not exist) holding one heap
    /// region that fills it. On failure the file is removed.
    pub fn create(path: &Path, size: u64, opts: &HeapOptions) -> Result<HeapFile> {
        Self::create_protected(path, size, opts, Redundancy::Off, None)
    }

    /// [`HeapFile::create`] with redundancy: the heap region leaves room for its integrity
    /// region, which records `redundancy` (and `period_ms`, lazy mode's period) for every
    /// later open.
    pub fn create_protected(
        path: &Path,
        size: u64,
        opts: &HeapOptions,
        redundancy: Redundancy,
        period_ms: Option<u32>,
    ) -> Result<HeapFile> {
        let pool = Pool::create(path, &CreateOptions { size, domain: None })?;
        let mut pool = pool.map_medium(Arc::new);
        let made = (|| {
            let free = pool.free_bytes();
            let bytes = match redundancy {
                Redundancy::Off => free,
                _ => heap_bytes_beside_integrity(free)?,
            };
            let region = pool.create_region(DEFAULT_REGION, kinds::HEAP, bytes, Alignment::Page)?;
            let medium: Arc<dyn Medium> = pool.medium().clone();
            RawHeap::format(&*medium, region.offset, region.length, pool.uuid().0, opts)?;
            drop(medium);
            crate::protect::protect(&mut pool, DEFAULT_REGION, redundancy, period_ms)?;
            open_protected(&pool, &region)
        })();
        match made {
            Ok((raw, guard, redundancy)) => Ok(HeapFile {
                region: pool
                    .region(DEFAULT_REGION)
                    .cloned()
                    .ok_or_else(|| pmem::PmemError::NoSuchRegion(DEFAULT_REGION.into()))?,
                pool,
                raw: Arc::new(raw),
                guard,
                redundancy,
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
        drop(medium);
        let recorded = match crate::protect::recorded(&pool, name) {
            Ok(r) => r,
            Err(e) => return refuse(pool, e),
        };
        if recorded.redundancy == Redundancy::Off {
            let medium: Arc<dyn Medium> = pool.medium().clone();
            let raw = match RawHeap::open(medium, region.offset, region.length) {
                Ok(r) => r,
                Err(e @ HeapError::NotSaved { .. }) => return refuse(pool, e),
                Err(e) => return Err(e),
            };
            return Ok(HeapFile {
                pool,
                raw: Arc::new(raw),
                region,
                guard: None,
                redundancy: Redundancy::Off,
            });
        }
        let (raw, guard, redundancy) = open_protected(&pool, &region)?;
        Ok(HeapFile {
            pool,
            raw: Arc::new(raw),
            region,
            guard,
            redundancy,
        })
    }

    /// The protection (`None` when the heap has no redundancy).
    pub fn guard(&self) -> Option<&Arc<Guard<Arc<Mapping>>>> {
        self.guard.as_ref()
    }

    /// The heap's redundancy mode, as recorded in the pool.
    pub fn redundancy(&self) -> Redundancy {
        self.redundancy
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
        if let Some(g) = self.guard {
            // The heap (its medium and observer) held the other references. If someone still
            // holds the heap, the protection is left open: the next open resyncs.
            if let Ok(g) = Arc::try_unwrap(g) {
                g.close()?;
            }
        }
        self.pool.close()?;
        Ok(())
    }
}

type OpenedParts = (RawHeap, Option<Arc<Guard<Arc<Mapping>>>>, Redundancy);

/// Open heap region `region` of `pool` with its protection in the recorded mode (lazy mode
/// with the best write tracking this kernel has and its background pass).
fn open_protected(pool: &Pool<Arc<Mapping>>, region: &Region) -> Result<OpenedParts> {
    let rec = crate::protect::recorded(pool, &region.name)?;
    let tracker = match rec.redundancy {
        Redundancy::Lazy => Some(
            integrity::tracker::best_for(
                pool.medium().clone(),
                region.offset as usize,
                region.length as usize,
            )
            .map_err(integrity::IntegrityError::from)?,
        ),
        _ => None,
    };
    let o = crate::protect::open_heap(
        pool,
        region,
        OpenProtection {
            tracker,
            background: true,
            period_ms: None,
        },
    )?;
    Ok((o.heap, o.guard, o.redundancy))
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
