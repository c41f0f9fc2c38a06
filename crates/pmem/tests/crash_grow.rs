//! Growing pools: the file grows as regions need room, a region moves to a larger place, a
//! fixed-size pool turns growable. Each step crashed at every fence and at 500 seeded random
//! points on the persistence simulator; every crash image opens (read-only and read-write) and
//! holds the directory and size from before the step or from after it, never a mix. Plus the
//! same steps on real files.

use pmem::check::check_file;
use pmem::sim::{crash_at_every_fence, crash_at_random_points};
use pmem::{
    Alignment, CreateOptions, Medium, OpenOptions, PmemError, Pool, SimConfig, SimMedium, kinds,
};
use std::path::PathBuf;

const START: usize = 64 << 10;

/// What a reopened pool holds: its size, growable bit, and each region as (name, offset, length).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    size: u64,
    growable: bool,
    regions: Vec<(String, u64, u64)>,
}

fn seen_of(image: Vec<u8>, read_only: bool) -> Result<Seen, String> {
    let sim = SimMedium::from_image(image, SimConfig::default());
    let pool = Pool::open_medium(
        &sim,
        &OpenOptions {
            read_only,
            domain: None,
        },
    )
    .map_err(|e| e.to_string())?;
    let seen = Seen {
        size: pool.size(),
        growable: pool.growable(),
        regions: pool
            .regions()
            .iter()
            .map(|r| (r.name.clone(), r.offset, r.length))
            .collect(),
    };
    assert!(
        seen.size as usize <= sim.len(),
        "a pool of {} bytes on a medium of {}",
        seen.size,
        sim.len()
    );
    if !read_only {
        pool.close().map_err(|e| e.to_string())?;
    }
    Ok(seen)
}

/// A closed pool of 64 KiB with one region, growable or not, as an image.
fn base_image(growable: bool) -> Vec<u8> {
    let sim = SimMedium::new(START, SimConfig::default());
    let medium = if growable {
        Pool::format_growable(&sim, pmem::Domain::Sim).unwrap()
    } else {
        Pool::format(&sim, pmem::Domain::Sim).unwrap()
    };
    let mut pool = Pool::open_medium(medium, &OpenOptions::default()).unwrap();
    pool.create_region("keep", kinds::RAW, 8192, Alignment::Page)
        .unwrap();
    pool.close().unwrap();
    assert!(sim.unpersisted().is_empty());
    sim.durable_image()
}

type Op = fn(&SimMedium);

/// A region that does not fit: the pool grows for it.
fn grow_op(m: &SimMedium) {
    let Ok(mut pool) = Pool::open_medium(m, &OpenOptions::default()) else {
        return;
    };
    if pool
        .create_region("big", kinds::LOG, 256 << 10, Alignment::Page)
        .is_err()
    {
        return;
    }
    let _ = pool.close();
}

/// A region moved to a larger place past the end: the pool grows for it.
fn replace_op(m: &SimMedium) {
    let Ok(mut pool) = Pool::open_medium(m, &OpenOptions::default()) else {
        return;
    };
    if pool.replace_region("keep", 128 << 10).is_err() {
        return;
    }
    let _ = pool.close();
}

/// A region grown in place past the end: the pool grows for it.
fn extend_op(m: &SimMedium) {
    let Ok(mut pool) = Pool::open_medium(m, &OpenOptions::default()) else {
        return;
    };
    if pool.extend_region("keep", 256 << 10).is_err() {
        return;
    }
    let _ = pool.close();
}

/// A fixed-size pool made growable, then grown by a region.
fn migrate_op(m: &SimMedium) {
    let Ok(mut pool) = Pool::open_medium(m, &OpenOptions::default()) else {
        return;
    };
    if pool.make_growable().is_err() {
        return;
    }
    if pool
        .create_region("big", kinds::LOG, 256 << 10, Alignment::Page)
        .is_err()
    {
        return;
    }
    let _ = pool.close();
}

fn before_and_after(op: Op, growable: bool) -> (Seen, Seen) {
    let base = base_image(growable);
    let before = seen_of(base.clone(), true).unwrap();
    let sim = SimMedium::from_image(base, SimConfig::default());
    op(&sim);
    assert!(sim.unpersisted().is_empty());
    let after = seen_of(sim.durable_image(), true).unwrap();
    assert!(after.size > before.size, "{before:?} -> {after:?}");
    (before, after)
}

/// Every crash image holds `before`, `after`, or (for the migration) the growable pool before
/// its growth.
fn judge(image: Vec<u8>, allowed: &[Seen], what: &str) -> Seen {
    let ro = seen_of(image.clone(), true).unwrap_or_else(|e| panic!("{what}: no open: {e}"));
    assert!(
        allowed.contains(&ro),
        "{what}: {ro:?} is none of {allowed:?}"
    );
    // A read-write open (recovery) finds the same, and the pool then grows again.
    let sim = SimMedium::from_image(image, SimConfig::default());
    let mut pool = Pool::open_medium(&sim, &OpenOptions::default())
        .unwrap_or_else(|e| panic!("{what}: no read-write open: {e}"));
    assert_eq!(pool.size(), ro.size, "{what}");
    if pool.growable() {
        let r = pool
            .create_region("later", kinds::RAW, 64 << 10, Alignment::Page)
            .unwrap_or_else(|e| panic!("{what}: no growth after the crash: {e}"));
        assert!(r.end() <= pool.size() && pool.size() as usize <= sim.len());
    }
    pool.close().unwrap();
    ro
}

fn allowed(op: Op, growable: bool) -> Vec<Seen> {
    let (before, after) = before_and_after(op, growable);
    // Grown, the region not yet placed: the growth and the directory update are two steps.
    let grown = Seen {
        size: after.size,
        growable: true,
        regions: before.regions.clone(),
    };
    let mut allowed = vec![before.clone(), after, grown];
    if !growable {
        // Migrated, not yet grown.
        allowed.push(Seen {
            growable: true,
            ..before
        });
    }
    allowed
}

fn every_fence(op: Op, growable: bool) {
    let allowed = allowed(op, growable);
    let base = base_image(growable);
    for seed in 0..6 {
        let mut seen = Vec::new();
        let points = crash_at_every_fence(&base, seed, op, |img, n| {
            let s = judge(img, &allowed, &format!("seed {seed}, crash at fence {n}"));
            if !seen.contains(&s) {
                seen.push(s);
            }
        });
        assert!(points >= 5, "{points} crash points");
        assert!(
            seen.contains(&allowed[0]) && seen.contains(&allowed[1]),
            "seed {seed}: the crashes saw {seen:?}"
        );
    }
}

fn random_points(op: Op, growable: bool) {
    let allowed = allowed(op, growable);
    let base = base_image(growable);
    let mut counts = vec![0; allowed.len()];
    crash_at_random_points(&base, 0x9e0, 500, op, |img, seed| {
        let s = judge(img, &allowed, &format!("random crash, seed {seed:#x}"));
        counts[allowed.iter().position(|a| *a == s).expect("judged")] += 1;
    });
    assert!(
        counts[0] > 0 && counts[1] > 0,
        "500 random crashes should see before and after: {counts:?}"
    );
}

#[test]
fn growing_for_a_region_crashed_at_every_fence_is_before_or_after() {
    every_fence(grow_op, true);
}

#[test]
fn moving_a_region_to_a_larger_place_crashed_at_every_fence_is_before_or_after() {
    every_fence(replace_op, true);
}

#[test]
fn growing_a_region_in_place_crashed_at_every_fence_is_before_or_after() {
    every_fence(extend_op, true);
}

#[test]
fn making_a_fixed_pool_growable_crashed_at_every_fence_is_before_or_after() {
    every_fence(migrate_op, false);
}

#[test]
fn growing_crashed_at_500_random_points_is_before_or_after() {
    random_points(grow_op, true);
}

#[test]
fn making_a_fixed_pool_growable_crashed_at_500_random_points_is_before_or_after() {
    random_points(migrate_op, false);
}

#[test]
fn a_crash_between_the_two_header_copies_opens_growable_and_repairs_the_other() {
    let copy = |img: &[u8], c: usize| {
        let at =
            pmem::layout::HEADER_COPY_OFFSETS[c] + pmem::layout::header::FEATURES_INCOMPAT.offset;
        u64::from_le_bytes(img[at..at + 8].try_into().unwrap())
    };
    // The image `make_growable` leaves when the power fails after copy 0: copy 0 carries the
    // bit, copy 1 does not.
    let mut image = base_image(false);
    let header = pmem::header::PoolHeader::decode(&image[..4096], 0).unwrap();
    let migrated = pmem::header::PoolHeader {
        features_incompat: pmem::layout::FEATURES_INCOMPAT_GROWABLE,
        ..header
    };
    image[..pmem::layout::HEADER_BYTES].copy_from_slice(&migrated.encode(0));
    assert_eq!((copy(&image, 0), copy(&image, 1)), (1, 0));
    let sim = SimMedium::from_image(image.clone(), SimConfig::default());
    let pool = Pool::open_medium(&sim, &OpenOptions::default()).unwrap();
    assert!(pool.growable());
    assert_eq!(pool.damage().len(), 1, "{:?}", pool.damage());
    assert_eq!(pool.damage()[0].field, "features_incompat");
    pool.close().unwrap();
    let img = sim.durable_image();
    assert_eq!(
        (copy(&img, 0), copy(&img, 1)),
        (1, 1),
        "the open rewrote copy 1"
    );
    // The other way round (copy 1 migrated, copy 0 not) is the same case.
    let migrated_from = |image: &[u8]| pmem::header::PoolHeader {
        features_incompat: pmem::layout::FEATURES_INCOMPAT_GROWABLE,
        ..pmem::header::PoolHeader::decode(&image[..4096], 0).unwrap()
    };
    let mut image = base_image(false);
    let migrated = migrated_from(&image);
    image[4096..4096 + pmem::layout::HEADER_BYTES].copy_from_slice(&migrated.encode(1));
    assert!(seen_of(image, false).unwrap().growable);
    // Copies that differ in anything else still disagree.
    let mut image = base_image(false);
    let migrated = migrated_from(&image);
    let other = pmem::header::PoolHeader {
        created_ns: migrated.created_ns + 1,
        ..migrated
    };
    image[..pmem::layout::HEADER_BYTES].copy_from_slice(&other.encode(0));
    assert!(seen_of(image, true).unwrap_err().contains("disagree"));
}

#[test]
fn a_fixed_pool_does_not_grow() {
    let sim = SimMedium::from_image(base_image(false), SimConfig::default());
    let mut pool = Pool::open_medium(&sim, &OpenOptions::default()).unwrap();
    assert!(!pool.growable());
    assert!(matches!(
        pool.create_region("big", kinds::LOG, 256 << 10, Alignment::Page),
        Err(PmemError::NoSpace(_))
    ));
    assert!(matches!(pool.grow(1 << 20), Err(PmemError::Invalid { .. })));
    assert_eq!(sim.len(), START);
}

#[test]
fn a_medium_longer_than_a_fixed_pool_is_refused_and_a_shorter_one_always() {
    let mut image = base_image(false);
    image.resize(START + 4096, 0);
    assert!(seen_of(image, true).unwrap_err().contains("bytes"));
    // A growable pool's medium may be longer (a crash after the file grew), never shorter.
    let mut image = base_image(true);
    image.resize(START + 4096, 0);
    assert_eq!(seen_of(image, true).unwrap().size, START as u64);
    let sim = SimMedium::from_image(base_image(true), SimConfig::default());
    let mut pool = Pool::open_medium(&sim, &OpenOptions::default()).unwrap();
    pool.grow(START as u64 * 4).unwrap();
    pool.close().unwrap();
    let mut image = sim.durable_image();
    image.truncate(START * 2);
    assert!(seen_of(image, true).is_err());
}

struct TempFile(PathBuf);

impl TempFile {
    fn new(tag: &str) -> TempFile {
        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let p = dir.join(format!("kavach-grow-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        TempFile(p)
    }
    fn len(&self) -> u64 {
        std::fs::metadata(&self.0).unwrap().len()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_growable_file_grows_with_its_regions_and_reopens() {
    let t = TempFile::new("file");
    let opts = CreateOptions {
        size: START as u64,
        domain: None,
    };
    let mut pool = Pool::create_growable(&t.0, &opts).unwrap();
    assert_eq!(t.len(), START as u64);
    let a = pool
        .create_region("a", kinds::RAW, 3 << 20, Alignment::Page)
        .unwrap();
    pool.medium()
        .write(a.offset as usize + (3 << 20) - 8, b"the end!");
    pool.medium().persist(a.offset as usize, 3 << 20).unwrap();
    assert_eq!(t.len(), a.end(), "the file ends where the new region does");
    let b = pool.replace_region("a", 5 << 20).unwrap();
    assert_eq!(b.offset, a.offset, "the only region moves in place");
    assert_eq!(t.len(), b.end());
    pool.close().unwrap();
    assert!(check_file(&t.0).unwrap().healthy());
    let pool = Pool::open(&t.0, &OpenOptions::default()).unwrap();
    assert_eq!(pool.size(), b.end());
    let mut buf = [0u8; 8];
    pool.medium()
        .read(a.offset as usize + (3 << 20) - 8, &mut buf);
    assert_eq!(&buf, b"the end!");
    pool.close().unwrap();
}

#[test]
fn a_fixed_file_turns_growable_and_grows() {
    let t = TempFile::new("migrate");
    let opts = CreateOptions {
        size: 1 << 20,
        domain: None,
    };
    let mut pool = Pool::create(&t.0, &opts).unwrap();
    pool.create_region("a", kinds::RAW, 512 << 10, Alignment::Page)
        .unwrap();
    pool.close().unwrap();
    let mut pool = Pool::open(&t.0, &OpenOptions::default()).unwrap();
    assert!(!pool.growable());
    pool.make_growable_file().unwrap();
    let b = pool
        .create_region("b", kinds::RAW, 2 << 20, Alignment::Page)
        .unwrap();
    pool.close().unwrap();
    assert_eq!(t.len(), b.end());
    assert!(check_file(&t.0).unwrap().healthy());
    let pool = Pool::open(&t.0, &OpenOptions::default()).unwrap();
    assert!(pool.growable());
    assert_eq!(pool.regions().len(), 2);
    pool.close().unwrap();
}

#[test]
fn a_moved_region_gives_its_old_blocks_back() {
    use std::os::unix::fs::MetadataExt;
    let t = TempFile::new("punch");
    let opts = CreateOptions {
        size: START as u64,
        domain: None,
    };
    let mut pool = Pool::create_growable(&t.0, &opts).unwrap();
    let a = pool
        .create_region("a", kinds::RAW, 4 << 20, Alignment::Page)
        .unwrap();
    pool.create_region("b", kinds::RAW, 1 << 20, Alignment::Page)
        .unwrap();
    let blocks = |t: &TempFile| std::fs::metadata(&t.0).unwrap().blocks() * 512;
    let before = blocks(&t);
    assert!(before >= t.len(), "created regions are backed");
    let moved = pool.replace_region("a", 6 << 20).unwrap();
    assert!(moved.offset > a.offset, "a moves past b");
    pool.medium().write(moved.offset as usize, b"moved region");
    pool.close().unwrap();
    // The file grew by 6 MiB and gave the old 4 MiB back (where hole punching works).
    let after = blocks(&t);
    assert_eq!(t.len(), moved.end());
    if t.0.starts_with("/dev/shm") {
        assert!(
            after + (3 << 20) < t.len(),
            "{after} bytes of blocks in a {}-byte file",
            t.len()
        );
    }
    assert!(check_file(&t.0).unwrap().healthy());
    // The freed range is used again: a new region there is backed and holds what is written.
    let mut pool = Pool::open(&t.0, &OpenOptions::default()).unwrap();
    let c = pool
        .create_region("c", kinds::RAW, 2 << 20, Alignment::Page)
        .unwrap();
    assert_eq!(c.offset, a.offset, "first fit takes the freed place");
    pool.medium().write(c.offset as usize + 4096, b"reused");
    let mut buf = [0u8; 6];
    pool.medium().read(c.offset as usize + 4096, &mut buf);
    assert_eq!(&buf, b"reused");
    pool.close().unwrap();
}

#[test]
fn a_region_grows_in_place_keeping_its_bytes_unless_another_follows() {
    let t = TempFile::new("extend");
    let opts = CreateOptions {
        size: START as u64,
        domain: None,
    };
    let mut pool = Pool::create_growable(&t.0, &opts).unwrap();
    let a = pool
        .create_region("a", kinds::RAW, 1 << 20, Alignment::Page)
        .unwrap();
    pool.medium().write(a.offset as usize + 4096, b"kept");
    let a2 = pool.extend_region("a", 3 << 20).unwrap();
    assert_eq!((a2.offset, a2.length), (a.offset, 3 << 20));
    assert_eq!(t.len(), a2.end());
    let mut buf = [0u8; 4];
    pool.medium().read(a.offset as usize + 4096, &mut buf);
    assert_eq!(&buf, b"kept");
    pool.create_region("b", kinds::RAW, 4096, Alignment::Page)
        .unwrap();
    assert!(matches!(
        pool.extend_region("a", 4 << 20),
        Err(PmemError::NoSpace(_))
    ));
    assert!(matches!(
        pool.extend_region("a", 1 << 20),
        Err(PmemError::Invalid { .. })
    ));
    pool.close().unwrap();
    assert!(check_file(&t.0).unwrap().healthy());
}
