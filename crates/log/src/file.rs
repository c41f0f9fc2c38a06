//! A log in a pool file: the pool keeps the clean-shutdown flag recovery needs, the region
//! directory says where the log is.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{LogError, Result};
use crate::log::{Log, LogOptions, Recovery};
use crate::salvage::SalvagePlan;
use pmem::{Alignment, CreateOptions, Domain, Mapping, OpenOptions, Pool, Region, kinds};

/// Name of the log region `LogFile::create` makes.
pub const DEFAULT_REGION: &str = "log";

/// An open log in a region of a pool file.
#[derive(Debug)]
pub struct LogFile {
    pool: Pool<Arc<Mapping>>,
    log: Log<Arc<Mapping>>,
    region: Region,
    recovery: Recovery,
}

impl LogFile {
    /// Create a pool file of `size` bytes at `path` (which must not exist) holding one log
    /// region, `name`, that fills it.
    pub fn create(
        path: &Path,
        size: u64,
        name: &str,
        domain: Option<Domain>,
        full_wait: Duration,
    ) -> Result<LogFile> {
        let pool = Pool::create(path, &CreateOptions { size, domain })?;
        let mut pool = pool.map_medium(Arc::new);
        let made = (|| {
            let free = pool.free_bytes();
            let region = pool.create_region(name, kinds::LOG, free, Alignment::Page)?;
            let medium = Arc::clone(pool.medium());
            let (log, recovery) = Log::create_recovered(
                medium,
                region.offset as usize,
                region.length as usize,
                crate::log::random_uuid()?,
                full_wait,
            )?;
            Ok::<_, LogError>((region, log, recovery))
        })();
        match made {
            Ok((region, log, recovery)) => Ok(LogFile {
                pool,
                log,
                region,
                recovery,
            }),
            Err(e) => {
                drop(pool);
                let _ = std::fs::remove_file(path);
                Err(e)
            }
        }
    }

    /// Open the log region `name` of the pool file at `path` and recover it.
    pub fn open(path: &Path, name: &str, read_only: bool, full_wait: Duration) -> Result<LogFile> {
        let opts = LogOptions {
            read_only,
            full_wait,
            ..LogOptions::default()
        };
        Self::open_with(path, name, &opts)
    }

    /// [`LogFile::open`] with every option; `clean_shutdown` is taken from the pool, whatever
    /// `opts` says. If the log cannot be opened, the pool is left byte for byte as it was found
    /// (clean flag included), so a refused open never turns damage into something a later open
    /// would take for a crash.
    pub fn open_with(path: &Path, name: &str, opts: &LogOptions) -> Result<LogFile> {
        Self::open_inner(path, name, opts, None)
    }

    /// [`LogFile::open_with`] handing every data record, payload borrowed, to `replay` from
    /// the walk that checks it: recovery in one pass (see [`Log::open_replaying`], which also
    /// says what `replay` has seen when the open fails).
    pub fn open_replaying(
        path: &Path,
        name: &str,
        opts: &LogOptions,
        replay: &mut dyn FnMut(crate::RecordRef<'_>),
    ) -> Result<LogFile> {
        Self::open_inner(path, name, opts, Some(replay))
    }

    fn open_inner(
        path: &Path,
        name: &str,
        opts: &LogOptions,
        replay: Option<&mut dyn FnMut(crate::RecordRef<'_>)>,
    ) -> Result<LogFile> {
        let pool = Pool::open(
            path,
            &OpenOptions {
                read_only: opts.read_only,
                domain: None,
            },
        )?;
        let pool = pool.map_medium(Arc::new);
        let clean = pool.was_clean_shutdown();
        let opened = Self::open_log(
            &pool,
            name,
            &LogOptions {
                clean_shutdown: clean,
                ..*opts
            },
            replay,
        );
        Self::opened_or_put_back(pool, opened)
    }

    /// Carry out a salvage `plan` (made by [`Log::salvage_plan`] on a read-only open, its cut
    /// entries already persisted elsewhere): open the pool for writing, make the plan again and
    /// refuse, leaving the pool as it was found, unless it is the same; then open the log with
    /// `truncate_damaged`, which ends it where the walk stopped (a jump record there, past every
    /// LSN a cut record holds) and records the durable LSN. Close the result to finish.
    pub fn salvage(
        path: &Path,
        name: &str,
        plan: &SalvagePlan,
        full_wait: Duration,
    ) -> Result<LogFile> {
        let pool = Pool::open(
            path,
            &OpenOptions {
                read_only: false,
                domain: None,
            },
        )?;
        let pool = pool.map_medium(Arc::new);
        let clean = pool.was_clean_shutdown();
        let look = LogOptions {
            read_only: true,
            clean_shutdown: clean,
            truncate_damaged: false,
            full_wait,
        };
        let opened = Self::open_log(&pool, name, &look, None).and_then(|(log, _, rec)| {
            if log.salvage_plan(&rec, clean) != *plan {
                return Err(LogError::Invalid {
                    what: "salvage",
                    reason: "the log changed after the cut records were saved; nothing was \
                             cut (run the salvage again)"
                        .into(),
                });
            }
            let opts = LogOptions {
                read_only: false,
                truncate_damaged: true,
                ..look
            };
            Self::open_log(&pool, name, &opts, None)
        });
        Self::opened_or_put_back(pool, opened)
    }

    /// The log file, or, when the log could not be opened, the pool put back byte for byte as
    /// the open found it (a refused log open writes nothing, so only the pool's own open is
    /// undone; a clean pool stays clean, an unclean one unclean) and the error.
    fn opened_or_put_back(
        pool: Pool<Arc<Mapping>>,
        opened: Result<(Log<Arc<Mapping>>, Region, Recovery)>,
    ) -> Result<LogFile> {
        match opened {
            Ok((log, region, recovery)) => Ok(LogFile {
                pool,
                log,
                region,
                recovery,
            }),
            Err(e) => {
                pool.close_unchanged()?;
                Err(e)
            }
        }
    }

    fn open_log(
        pool: &Pool<Arc<Mapping>>,
        name: &str,
        opts: &LogOptions,
        replay: Option<&mut dyn FnMut(crate::RecordRef<'_>)>,
    ) -> Result<(Log<Arc<Mapping>>, Region, Recovery)> {
        let region = pool
            .region(name)
            .cloned()
            .ok_or_else(|| pmem::PmemError::NoSuchRegion(name.into()))?;
        if region.kind != kinds::LOG {
            return Err(LogError::Invalid {
                what: "region",
                reason: format!(
                    "region `{name}` holds {} data, not a log",
                    kinds::name(region.kind)
                ),
            });
        }
        let medium = Arc::clone(pool.medium());
        let (offset, length) = (region.offset as usize, region.length as usize);
        let (log, recovery) = match replay {
            Some(r) => Log::open_replaying(medium, offset, length, opts, r)?,
            None => Log::open(medium, offset, length, opts)?,
        };
        Ok((log, region, recovery))
    }

    /// The log.
    pub fn log(&self) -> &Log<Arc<Mapping>> {
        &self.log
    }

    /// What opening found.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// The log's region.
    pub fn region(&self) -> &Region {
        &self.region
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<Arc<Mapping>> {
        &self.pool
    }

    /// Force every record, then close the pool cleanly.
    pub fn close(self) -> Result<()> {
        let LogFile { pool, log, .. } = self;
        drop(log.close()?);
        pool.close()?;
        Ok(())
    }
}
