//! Protecting a named region of a [`pmem::Pool`].

use crate::engine::{
    CreateOptions, OpenOptions, OpenReport, Placement, Progress, Protected, format,
};
use crate::error::{IntegrityError, Result};
use crate::layout::Geometry;
use pmem::layout::PAGE_SIZE;
use pmem::{Alignment, Medium, Pool, kinds};

/// Suffix of an integrity region's name: region `data` is protected by `data.integrity`.
const META_SUFFIX: &str = ".integrity";

/// The name of the integrity region that protects `data_region`.
pub fn meta_region_name(data_region: &str) -> Result<String> {
    let name = format!("{data_region}{META_SUFFIX}");
    pmem::directory::validate_name(&name).map_err(|reason| {
        IntegrityError::invalid(
            "region name",
            format!(
                "`{data_region}` is too long to protect: its integrity region `{name}` is invalid ({reason})"
            ),
        )
    })?;
    Ok(name)
}

/// Where region `data_region` and its integrity region are in `pool`.
pub fn placement<M: Medium>(pool: &Pool<M>, data_region: &str) -> Result<Placement> {
    let data = pool
        .region(data_region)
        .ok_or_else(|| pmem::PmemError::NoSuchRegion(data_region.into()))?;
    let meta_name = meta_region_name(data_region)?;
    let meta = pool
        .region(&meta_name)
        .ok_or_else(|| IntegrityError::NotProtected(data_region.into(), meta_name.clone()))?;
    if meta.kind != kinds::INTEGRITY {
        return Err(IntegrityError::invalid(
            "integrity region",
            format!(
                "`{meta_name}` is of kind {}, not integrity",
                kinds::name(meta.kind)
            ),
        ));
    }
    Ok(Placement {
        region: data_region.into(),
        data_offset: data.offset,
        data_bytes: data.length,
        meta_offset: meta.offset,
        meta_bytes: meta.length,
        uuid: pool.uuid(),
    })
}

/// Protect the existing region `data_region` of `pool`: create its integrity region and
/// compute the redundancy of its current contents.
pub fn create_in_pool<M: Medium>(
    pool: &mut Pool<M>,
    data_region: &str,
    opts: &CreateOptions,
    progress: Progress<'_>,
) -> Result<Geometry> {
    let data = pool
        .region(data_region)
        .cloned()
        .ok_or_else(|| pmem::PmemError::NoSuchRegion(data_region.into()))?;
    if data.kind == kinds::INTEGRITY {
        return Err(IntegrityError::invalid(
            "region",
            format!("`{data_region}` is itself an integrity region"),
        ));
    }
    let meta_name = meta_region_name(data_region)?;
    let geo =
        Geometry::new(data.length / PAGE_SIZE as u64, opts.stripe_pages).ok_or_else(|| {
            IntegrityError::invalid(
                "stripe",
                format!("{} pages per stripe (2..=32)", opts.stripe_pages),
            )
        })?;
    let meta = pool.create_region(
        &meta_name,
        kinds::INTEGRITY,
        geo.meta_bytes,
        Alignment::Page,
    )?;
    let place = Placement {
        region: data_region.into(),
        data_offset: data.offset,
        data_bytes: data.length,
        meta_offset: meta.offset,
        meta_bytes: meta.length,
        uuid: pool.uuid(),
    };
    format(pool.medium(), &place, opts, progress)
}

/// Open the protection of region `data_region` of `pool`.
pub fn open_in_pool<M: Medium + Clone + 'static>(
    pool: &Pool<M>,
    data_region: &str,
    opts: OpenOptions,
    progress: Progress<'_>,
) -> Result<(Protected<M>, OpenReport)> {
    let place = placement(pool, data_region)?;
    Protected::open(pool.medium().clone(), &place, opts, progress)
}
