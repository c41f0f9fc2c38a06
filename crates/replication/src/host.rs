//! A backup's copy in a directory: `DIR/replica.pool`, a pool file with one log region.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pmem::{Alignment, CreateOptions, Mapping, OpenOptions, Pool, Uuid, kinds};

use crate::copy::{Copy, Host};

/// File name of a backup's copy in its directory.
pub const REPLICA_FILE: &str = "replica.pool";
/// Region name of the copy.
pub const REGION: &str = "log";

/// A copy in a mapped pool file.
pub type FileCopy = Copy<Arc<Mapping>>;

pub use crate::copy::StoreSink;

/// A copy kept in a pool file.
pub struct FileHost {
    path: PathBuf,
    pool: Option<Pool<Arc<Mapping>>>,
    copy: Option<Copy<Arc<Mapping>>>,
    store: Option<Arc<dyn StoreSink>>,
}

impl std::fmt::Debug for FileHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileHost")
            .field("path", &self.path)
            .field("copy", &self.copy.is_some())
            .field("store", &self.store.is_some())
            .finish()
    }
}

impl FileHost {
    /// Open the copy in `dir` (creating the directory); a missing file is a host with no copy
    /// yet, which the primary fills.
    pub fn open(dir: &Path) -> Result<FileHost, String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create directory {}: {e}", dir.display()))?;
        let path = dir.join(REPLICA_FILE);
        let mut h = FileHost {
            path,
            pool: None,
            copy: None,
            store: None,
        };
        if h.path.exists() {
            let pool = Pool::open(
                &h.path,
                &OpenOptions {
                    read_only: false,
                    domain: None,
                },
            )
            .map_err(|e| format!("cannot open {}: {e}", h.path.display()))?
            .map_medium(Arc::new);
            let region = pool
                .region(REGION)
                .cloned()
                .ok_or_else(|| format!("{} has no `{REGION}` region", h.path.display()))?;
            h.copy = Some(Copy::new(
                Arc::clone(pool.medium()),
                region.offset as usize,
                region.length as usize,
            ));
            h.pool = Some(pool);
        }
        Ok(h)
    }

    /// Report the store beside the copy (its applied LSN goes with every write's answer) and
    /// take snapshots into it.
    pub fn set_store(&mut self, store: Arc<dyn StoreSink>) {
        self.store = Some(store);
    }

    /// Path of the pool file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Close the pool cleanly.
    pub fn close(self) -> Result<(), String> {
        drop(self.copy);
        if let Some(p) = self.pool {
            p.close().map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// Create a pool file at `path` with one log region of exactly `region_len` bytes holding an
/// empty log `uuid`.
pub fn create_copy_file(
    path: &Path,
    uuid: Uuid,
    region_len: u64,
) -> Result<(Pool<Arc<Mapping>>, FileCopy), String> {
    let size = region_len
        .checked_add(pmem::layout::METADATA_BYTES as u64)
        .ok_or("region too large")?;
    let pool = Pool::create(path, &CreateOptions { size, domain: None })
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let mut pool = pool.map_medium(Arc::new);
    let region = pool
        .create_region(REGION, kinds::LOG, region_len, Alignment::Page)
        .map_err(|e| format!("cannot make the log region in {}: {e}", path.display()))?;
    let copy = Copy::create(
        Arc::clone(pool.medium()),
        region.offset as usize,
        region.length as usize,
        uuid,
    )
    .map_err(|e| format!("cannot write the empty log in {}: {e}", path.display()))?;
    Ok((pool, copy))
}

impl Host for FileHost {
    type M = Arc<Mapping>;

    fn copy(&mut self) -> Option<&mut Copy<Arc<Mapping>>> {
        self.copy.as_mut()
    }

    fn applied(&self) -> Option<u64> {
        self.store.as_ref().map(|s| s.applied())
    }

    fn store(&self) -> Option<Arc<dyn StoreSink>> {
        self.store.clone()
    }

    fn init(&mut self, uuid: Uuid, region_len: u64) -> Result<(), String> {
        self.copy = None;
        if let Some(p) = self.pool.take() {
            drop(p);
        }
        if self.path.exists() {
            // Unreadable: keep it for inspection rather than delete it.
            let aside = self.path.with_extension(format!(
                "unreadable-{}",
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0)
            ));
            std::fs::rename(&self.path, &aside)
                .map_err(|e| format!("cannot move {} aside: {e}", self.path.display()))?;
        }
        let (pool, copy) = create_copy_file(&self.path, uuid, region_len)?;
        self.pool = Some(pool);
        self.copy = Some(copy);
        Ok(())
    }
}
