//! Crash tests: region-directory create and remove, crashed at every fence and at 1,000 seeded
//! random points on the persistence simulator, reopened, and found either before or after.
//! The same campaigns run in the `eadr` and `msync` domains (fewer seeds; `msync` with 512 B
//! and 4 KiB sectors), and in `msync` with each of the operation's msyncs failing in turn.

use pmem::sim::{crash_at_every_fence, crash_at_every_fence_with, crash_at_random_points_with};
use pmem::{
    Alignment, CrashPlan, Medium, OpenOptions, Pool, SimConfig, SimDomain, SimMedium, kinds,
};

const POOL: usize = 1 << 20;

/// Each region as (name, offset, length).
type Regions = Vec<(String, u64, u64)>;

/// The names of the regions, or a description of why the image does not open.
fn regions_of(image: Vec<u8>) -> Result<Regions, String> {
    let sim = SimMedium::from_image(image, SimConfig::default());
    let pool = Pool::open_medium(
        &sim,
        &OpenOptions {
            read_only: true,
            domain: None,
        },
    )
    .map_err(|e| e.to_string())?;
    Ok(pool
        .regions()
        .iter()
        .map(|r| (r.name.clone(), r.offset, r.length))
        .collect())
}

/// A closed pool with two regions, as an image.
fn base_image() -> Vec<u8> {
    let sim = SimMedium::new(POOL, SimConfig::default());
    let medium = Pool::format(&sim, pmem::Domain::Sim).unwrap();
    let mut pool = Pool::open_medium(medium, &OpenOptions::default()).unwrap();
    pool.create_region("keep", kinds::RAW, 8192, Alignment::Page)
        .unwrap();
    pool.create_region("old", kinds::HEAP, 4096, Alignment::Page)
        .unwrap();
    pool.close().unwrap();
    assert!(
        sim.unpersisted().is_empty(),
        "format/close left lines unpersisted: {:?}",
        sim.unpersisted()
    );
    sim.durable_image()
}

type Op = fn(&SimMedium);

fn create_op(m: &SimMedium) {
    let Ok(mut pool) = Pool::open_medium(m, &OpenOptions::default()) else {
        return;
    };
    if pool
        .create_region("new", kinds::LOG, 3 * 4096, Alignment::Page)
        .is_err()
    {
        return;
    }
    let _ = pool.close();
}

fn remove_op(m: &SimMedium) {
    let Ok(mut pool) = Pool::open_medium(m, &OpenOptions::default()) else {
        return;
    };
    if pool.remove_region("old").is_err() {
        return;
    }
    let _ = pool.close();
}

fn before_and_after(op: Op) -> (Regions, Regions) {
    let base = base_image();
    let before = regions_of(base.clone()).unwrap();
    let sim = SimMedium::from_image(base, SimConfig::default());
    op(&sim);
    assert!(
        sim.unpersisted().is_empty(),
        "the operation left lines unpersisted: {:?}",
        sim.unpersisted()
    );
    let after = regions_of(sim.durable_image()).unwrap();
    assert_ne!(before, after);
    (before, after)
}

fn assert_before_or_after(
    image: Vec<u8>,
    before: &[(String, u64, u64)],
    after: &[(String, u64, u64)],
    what: &str,
) {
    match regions_of(image) {
        Ok(r) => assert!(
            r == before || r == after,
            "{what}: regions {r:?} are neither before {before:?} nor after {after:?}"
        ),
        Err(e) => panic!("{what}: the crash image does not open: {e}"),
    }
}

fn every_fence(op: Op) {
    every_fence_in(op, &(0..8).map(adr).collect::<Vec<_>>());
}

fn adr(seed: u64) -> SimConfig {
    SimConfig {
        seed,
        ..SimConfig::default()
    }
}

/// The configurations of the other domains: `eadr`, and `msync` with both sector sizes.
fn other_domains(seeds: u64) -> Vec<SimConfig> {
    let mut out = Vec::new();
    for seed in 0..seeds {
        out.push(SimConfig {
            seed,
            domain: SimDomain::Eadr,
            ..SimConfig::default()
        });
        out.push(SimConfig {
            seed,
            domain: SimDomain::Msync,
            sector: if seed % 2 == 0 { 512 } else { 4096 },
            ..SimConfig::default()
        });
    }
    out
}

fn every_fence_in(op: Op, cfgs: &[SimConfig]) {
    let (before, after) = before_and_after(op);
    let base = base_image();
    for &cfg in cfgs {
        let seed = cfg.seed;
        let mut saw_before = false;
        let mut saw_after = false;
        let points = crash_at_every_fence_with(cfg, &base, op, |img, n| {
            let r = regions_of(img.clone());
            saw_before |= r.as_deref() == Ok(&before[..]);
            saw_after |= r.as_deref() == Ok(&after[..]);
            assert_before_or_after(
                img,
                &before,
                &after,
                &format!("{:?} seed {seed}, crash at fence {n}", cfg.domain),
            );
        });
        // open (slot), update (directory page, slot, mirror page), close (slot): five fences.
        assert_eq!(points, 5, "fences in open + update + close");
        assert!(
            saw_before,
            "no crash point left the old directory ({:?} seed {seed})",
            cfg.domain
        );
        assert!(
            saw_after,
            "no crash point left the new directory ({:?} seed {seed})",
            cfg.domain
        );
    }
}

fn random_points(op: Op) {
    random_points_in(op, adr(0x5eed), 1000);
}

fn random_points_in(op: Op, cfg: SimConfig, count: u64) {
    let (before, after) = before_and_after(op);
    let base = base_image();
    let (mut b, mut a) = (0, 0);
    crash_at_random_points_with(cfg, &base, count, op, |img, seed| {
        match regions_of(img.clone()) {
            Ok(r) if r == before => b += 1,
            Ok(r) if r == after => a += 1,
            _ => {}
        }
        assert_before_or_after(
            img,
            &before,
            &after,
            &format!("random crash, seed {seed:#x}"),
        );
    });
    assert!(
        a > 0 && b > 0,
        "{count} random crashes ({:?}) should see both outcomes: before {b}, after {a}",
        cfg.domain
    );
}

#[test]
fn create_region_crashed_at_every_fence_is_before_or_after() {
    every_fence(create_op);
}

#[test]
fn remove_region_crashed_at_every_fence_is_before_or_after() {
    every_fence(remove_op);
}

#[test]
fn create_region_crashed_at_1000_random_points_is_before_or_after() {
    random_points(create_op);
}

#[test]
fn remove_region_crashed_at_1000_random_points_is_before_or_after() {
    random_points(remove_op);
}

#[test]
fn a_second_crash_during_recovery_open_still_finds_before_or_after() {
    let (before, after) = before_and_after(create_op);
    let base = base_image();
    crash_at_every_fence(&base, 3, create_op, |first, n| {
        // Recovery is the reopen; crash it at each of its fences too.
        crash_at_every_fence(
            &first,
            n,
            |m| {
                let _ = Pool::open_medium(m, &OpenOptions::default()).map(|p| p.close());
            },
            |second, k| {
                assert_before_or_after(
                    second,
                    &before,
                    &after,
                    &format!("crash at fence {n}, then at recovery fence {k}"),
                );
            },
        );
    });
}

#[test]
fn format_crashed_anywhere_is_either_no_pool_or_a_whole_pool() {
    let op = |m: &SimMedium| {
        let _ = Pool::format(m, pmem::Domain::Sim);
    };
    for seed in 0..20 {
        let zero = vec![0u8; POOL];
        crash_at_every_fence(&zero, seed, op, |img, n| {
            let sim = SimMedium::from_image(img, SimConfig::default());
            match Pool::open_medium(&sim, &OpenOptions::default()) {
                Ok(pool) => assert!(pool.regions().is_empty()),
                Err(pmem::PmemError::NotAPool { .. }) => {}
                Err(e) => {
                    panic!("format crashed at fence {n} (seed {seed}) left a damaged pool: {e}")
                }
            }
        });
        let sim = SimMedium::new(
            POOL,
            SimConfig {
                seed,
                crash: CrashPlan::Never,
                evict_per_million: 300_000,
                ..SimConfig::default()
            },
        );
        op(&sim);
        assert!(sim.unpersisted().is_empty());
    }
}

#[test]
fn create_and_remove_crashed_at_every_fence_in_eadr_and_msync_are_before_or_after() {
    every_fence_in(create_op, &other_domains(3));
    every_fence_in(remove_op, &other_domains(3));
}

#[test]
fn create_and_remove_crashed_at_random_points_in_eadr_and_msync_are_before_or_after() {
    for (op, seed) in [
        (create_op as Op, 0x5eed_000e),
        (remove_op as Op, 0x5eed_000f),
    ] {
        random_points_in(
            op,
            SimConfig {
                domain: SimDomain::Eadr,
                ..adr(seed)
            },
            100,
        );
        for sector in [512, 4096] {
            random_points_in(
                op,
                SimConfig {
                    domain: SimDomain::Msync,
                    sector,
                    ..adr(seed ^ sector as u64)
                },
                100,
            );
        }
    }
}

/// The directory update and close on `m`: (the update returned success, some call failed).
fn create_acked<M: Medium>(m: M) -> (bool, bool) {
    let Ok(mut pool) = Pool::open_medium(m, &OpenOptions::default()) else {
        return (false, true);
    };
    let ok = pool
        .create_region("new", kinds::LOG, 3 * 4096, Alignment::Page)
        .is_ok();
    let closed = pool.close().is_ok();
    (ok, !ok || !closed)
}

fn remove_acked<M: Medium>(m: M) -> (bool, bool) {
    let Ok(mut pool) = Pool::open_medium(m, &OpenOptions::default()) else {
        return (false, true);
    };
    let ok = pool.remove_region("old").is_ok();
    let closed = pool.close().is_ok();
    (ok, !ok || !closed)
}

type Acked = fn(&SimMedium) -> (bool, bool);

/// Run `op` in `msync` with its k-th msync failing, for every k it reaches (both sector sizes):
/// it must report an error, and every image the power may leave afterwards must hold the old
/// directory or the new one, the new one whenever the update returned success. Returns the
/// images checked.
fn failed_msyncs(name: &str, op: Acked, plain: Op) -> u64 {
    let (before, after) = before_and_after(plain);
    let base = base_image();
    let mut images = 0u64;
    let mut fired_any = 0;
    for k in 1.. {
        for sector in [512, 4096] {
            let sim = SimMedium::from_image(
                base.clone(),
                SimConfig {
                    seed: k,
                    domain: SimDomain::Msync,
                    sector,
                    fail_msync_at: k,
                    ..SimConfig::default()
                },
            );
            let (acked, errored) = op(&sim);
            // After a failed msync every fence fails: that tells whether the k-th came.
            let fired = sim.fence().is_err();
            if !fired {
                assert!(acked && !errored, "{name}: no failure, yet an error");
                continue;
            }
            fired_any += 1;
            assert!(
                errored,
                "{name}: msync {k} failed but the pool reported success throughout"
            );
            for img in sim.power_fail_state().images() {
                images += 1;
                let what = format!("{name}, msync {k} failed ({sector} B sectors)");
                if acked {
                    assert_eq!(
                        regions_of(img).as_deref(),
                        Ok(&after[..]),
                        "{what}: the update returned success but is not durable"
                    );
                } else {
                    assert_before_or_after(img, &before, &after, &what);
                }
            }
        }
        if fired_any < 2 * k as usize {
            break;
        }
    }
    assert!(fired_any >= 8, "{name}: only {fired_any} msyncs to fail");
    images
}

/// In `msync`, the `k`-th msync of the operation fails, for every `k` it reaches: the pool
/// reports an error (from the update or from close), and every image the power may leave
/// afterwards holds the old directory or the new one, the new one whenever the update returned
/// success.
#[test]
fn a_failed_msync_is_reported_and_leaves_before_or_after() {
    let images = failed_msyncs("create", |m| create_acked(m), create_op)
        + failed_msyncs("remove", |m| remove_acked(m), remove_op);
    println!("crash images checked: {images} after failed msyncs (Msync)");
}

/// A medium that drops flush and fence errors, as a layer that ignored a failed `fsync` would.
#[derive(Debug)]
struct Swallow<'a>(&'a SimMedium);

impl Medium for Swallow<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn domain(&self) -> pmem::Domain {
        self.0.domain()
    }
    fn backing(&self) -> pmem::Backing {
        self.0.backing()
    }
    fn read(&self, offset: usize, buf: &mut [u8]) {
        self.0.read(offset, buf)
    }
    fn write(&self, offset: usize, data: &[u8]) {
        self.0.write(offset, data)
    }
    fn write_nontemporal(&self, offset: usize, data: &[u8]) {
        self.0.write_nontemporal(offset, data)
    }
    fn load_u64(&self, offset: usize) -> u64 {
        self.0.load_u64(offset)
    }
    fn store_u64(&self, offset: usize, value: u64) {
        self.0.store_u64(offset, value)
    }
    fn flush(&self, offset: usize, len: usize) -> pmem::Result<()> {
        let _ = self.0.flush(offset, len);
        Ok(())
    }
    fn fence(&self) -> pmem::Result<()> {
        let _ = self.0.fence();
        Ok(())
    }
    fn inject(&self, offset: usize, data: &[u8]) -> pmem::Result<()> {
        self.0.inject(offset, data)
    }
}

/// The check above can fail: a pool on a medium that swallows the failed msync claims success.
#[test]
#[should_panic(expected = "reported success throughout")]
fn the_failed_msync_check_catches_a_swallowed_error() {
    failed_msyncs(
        "create, errors swallowed",
        |m| create_acked(Swallow(m)),
        create_op,
    );
}
