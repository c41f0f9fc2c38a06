//! Objects whose data lives in the object data file, crashed on the simulator: the PM side is
//! `pmem::sim` (crashed at every fence, and at random events with random evictions), the file
//! is a `MemFile` that freezes when the simulated machine crashes and keeps only its synced
//! writes (or also every unsynced one, or a subset of them). After every crash, each object
//! holds the model's bytes after the acknowledged operations (or those and the one in flight):
//! no torn block, no unacknowledged version, no record pointing at data that was not durable.
//! Checkpoints in the workload make freed file blocks reusable, so reuse after a crash is
//! covered too. Also: the file's header binds it to its store, and a store with data in a file
//! refuses to open without it.

mod common;
mod model;

use std::sync::Arc;

use common::{ObjOp, Objects, apply, contents, models, run};
use dstore::zone::{MemFile, ObjectFile};
use dstore::{Config, Store, StoreError};
use pmem::rng::SplitMix64;
use pmem::{CrashPlan, Domain, OpenOptions, Pool, SimConfig, SimMedium};

type S = Store<Arc<SimMedium>>;

/// The workload: whole 4 KiB blocks half of the time (written straight), else partial ones
/// (merged with the old block); no zero byte written, so a lost block shows.
fn workload(seed: u64, n: usize) -> Vec<ObjOp> {
    common::workload(
        seed,
        n,
        |rng| {
            if rng.below(2) == 0 {
                (4096 * rng.below(4), 4096 * (1 + rng.below(2)) as usize)
            } else {
                (rng.below(12_000), rng.below(6_000) as usize)
            }
        },
        1,
    )
}

fn config() -> Config {
    model::config(false)
}

fn open(sim: Arc<SimMedium>, file: Arc<dyn ObjectFile>) -> Result<S, StoreError> {
    open_with(sim, file, config())
}

fn open_with(sim: Arc<SimMedium>, file: Arc<dyn ObjectFile>, cfg: Config) -> Result<S, StoreError> {
    let pool = Pool::open_medium(sim, &OpenOptions::default())
        .map_err(|e| StoreError::Failed(e.to_string()))?;
    let mut s = Store::open_with_object_file(pool, cfg, Some(file))?;
    s.set_clock(Arc::new(|| model::NOW));
    Ok(s)
}

/// A fresh, cleanly closed store and its (empty but headed) object data file.
fn base() -> (Vec<u8>, Vec<u8>) {
    let sim = Arc::new(SimMedium::new(model::POOL_BYTES, SimConfig::default()));
    let m = Pool::format(Arc::clone(&sim), Domain::Sim).unwrap();
    let pool = Pool::open_medium(m, &OpenOptions::default()).unwrap();
    let file = Arc::new(MemFile::new(Vec::new()));
    let s = Store::create_with_object_file(pool, config(), Some(file.clone())).unwrap();
    s.close().unwrap();
    drop(s);
    (sim.durable_image(), file.durable())
}

fn drive(sim: &Arc<SimMedium>, file: Arc<MemFile>, ops: &[ObjOp]) -> usize {
    let Ok(s) = open(Arc::clone(sim), file) else {
        return 0;
    };
    common::run_all(&s, ops, &[8, 20])
}

/// Open the crash images and check the objects against the model.
fn check(pm: Vec<u8>, file: Vec<u8>, acked: usize, expect: &[Objects], what: &str) -> usize {
    let sim = Arc::new(SimMedium::from_image(pm, SimConfig::default()));
    let f = Arc::new(MemFile::new(file));
    let s = open(Arc::clone(&sim), f).unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
    s.validate().expect("structures validate");
    let got = contents(&s);
    let blocks: u64 = got.values().map(|d| d.len().div_ceil(4096) as u64).sum();
    assert!(
        s.object_file_blocks_in_use().unwrap() + s.zone_blocks_in_use() <= blocks,
        "{what}: no block is in use that no object holds"
    );
    if got == expect[acked] {
        return acked;
    }
    assert!(
        acked + 1 < expect.len() && got == expect[acked + 1],
        "{what}: objects match neither {acked} nor {} operations",
        acked + 1
    );
    acked + 1
}

fn gated(file: Vec<u8>, sim: &Arc<SimMedium>) -> Arc<MemFile> {
    let g = Arc::clone(sim);
    Arc::new(MemFile::with_gate(file, Box::new(move || g.crashed())))
}

#[test]
fn file_object_writes_crash_at_every_fence() {
    let (pm, file) = base();
    let ops = workload(7, 30);
    let expect = models(&ops);
    let mut images = 0u64;
    let mut in_flight_seen = 0u64;
    for n in 1.. {
        let sim = Arc::new(SimMedium::from_image(
            pm.clone(),
            SimConfig {
                seed: n,
                crash: CrashPlan::AtFence(n),
                evict_per_million: 0,
                ..SimConfig::default()
            },
        ));
        let f = gated(file.clone(), &sim);
        let acked = drive(&sim, Arc::clone(&f), &ops);
        let Some(state) = sim.crash_state() else {
            assert_eq!(acked, ops.len());
            assert!(n > 30, "each write forces a record");
            println!("crash images checked: {images} at {} fences", n - 1);
            break;
        };
        for (i, img) in state.images().into_iter().enumerate() {
            for (j, fimg) in f.crash_images(n ^ i as u64).into_iter().enumerate() {
                images += 1;
                let done = check(
                    img.clone(),
                    fimg,
                    acked,
                    &expect,
                    &format!("fence {n} image {i} file image {j}"),
                );
                in_flight_seen += (done > acked) as u64;
            }
        }
    }
    assert!(images > 60);
    println!("images where the write in flight survived: {in_flight_seen}");
}

#[test]
fn file_object_writes_crash_at_random_points_and_keep_working() {
    let (pm, file) = base();
    let mut rng = SplitMix64::new(0xf11e);
    let ops = workload(21, 30);
    let expect = models(&ops);
    let dry = Arc::new(SimMedium::from_image(pm.clone(), SimConfig::default()));
    assert_eq!(
        drive(&dry, Arc::new(MemFile::new(file.clone())), &ops),
        ops.len()
    );
    let events = dry.events();
    for round in 0..40 {
        let seed = rng.next_u64();
        let mut pick = SplitMix64::new(seed);
        let sim = Arc::new(SimMedium::from_image(
            pm.clone(),
            SimConfig {
                seed,
                crash: CrashPlan::AtEvent(1 + pick.below(events)),
                evict_per_million: [0, 100_000, 500_000][pick.below(3) as usize],
                ..SimConfig::default()
            },
        ));
        let f = gated(file.clone(), &sim);
        let acked = drive(&sim, Arc::clone(&f), &ops);
        let img = sim.crash_image().unwrap_or_else(|| sim.power_fail());
        let fimgs = f.crash_images(seed);
        let last = fimgs.len() - 1;
        for (j, fimg) in fimgs.into_iter().enumerate() {
            let what = format!("round {round} seed {seed:#x} file image {j}");
            let done = check(img.clone(), fimg.clone(), acked, &expect, &what);
            if j != last {
                continue;
            }
            // The store carries on from there: writes, two checkpoints (reusing freed file
            // blocks), a clean close, and the same objects after a reopen.
            let sim = Arc::new(SimMedium::from_image(img.clone(), SimConfig::default()));
            let f = Arc::new(MemFile::new(fimg));
            let s = open(Arc::clone(&sim), f.clone()).unwrap();
            let mut m = expect[done].clone();
            for (i, op) in workload(seed ^ 0x99, 12).iter().enumerate() {
                assert!(run(&s, op), "{what}: operation after recovery");
                apply(&mut m, op);
                if i == 3 || i == 8 {
                    s.save().unwrap();
                }
            }
            s.close().unwrap();
            drop(s);
            let s = open(
                Arc::new(SimMedium::from_image(
                    sim.durable_image(),
                    SimConfig::default(),
                )),
                Arc::new(MemFile::new(f.durable())),
            )
            .unwrap();
            assert!(contents(&s) == m, "{what}: diverged after recovery");
        }
    }
}

/// Under group commit (records forced 8 at a time) acknowledged writes may be lost at a crash,
/// so the objects must equal the model after some prefix of the operations. This is where the
/// reuse rule matters: a block freed by a record that a crash loses must not have been given
/// to a later write (whose data is synced before its record), or the recovered object would
/// point at the old block holding newer bytes.
#[test]
fn under_group_commit_a_crash_leaves_a_prefix_and_no_reused_live_block() {
    let (pm, file) = base();
    let cfg = Config {
        policy: dipper::ForcePolicy::Group(8),
        ..config()
    };
    let ops = workload(33, 40);
    let expect = models(&ops);
    let mut images = 0;
    for n in 1.. {
        let sim = Arc::new(SimMedium::from_image(
            pm.clone(),
            SimConfig {
                seed: n,
                crash: CrashPlan::AtFence(n),
                evict_per_million: 0,
                ..SimConfig::default()
            },
        ));
        let f = gated(file.clone(), &sim);
        let acked = {
            let Ok(s) = open_with(Arc::clone(&sim), f.clone(), cfg.clone()) else {
                continue;
            };
            let mut acked = 0;
            for (i, op) in ops.iter().enumerate() {
                if !run(&s, op) {
                    break;
                }
                acked += 1;
                // Checkpoints often, so freed blocks become reusable within the run.
                if i % 6 == 5 && s.save().is_err() {
                    break;
                }
            }
            if acked == ops.len() {
                let _ = s.close();
            }
            acked
        };
        let Some(state) = sim.crash_state() else {
            assert_eq!(acked, ops.len());
            break;
        };
        for (i, img) in state.images().into_iter().enumerate() {
            for (j, fimg) in f.crash_images(n ^ i as u64).into_iter().enumerate() {
                images += 1;
                let sim = Arc::new(SimMedium::from_image(img.clone(), SimConfig::default()));
                let s = open_with(sim, Arc::new(MemFile::new(fimg)), cfg.clone())
                    .unwrap_or_else(|e| panic!("fence {n} image {i}/{j}: recovery failed: {e}"));
                let got = contents(&s);
                assert!(
                    expect[..=(acked + 1).min(ops.len())].contains(&got),
                    "fence {n} image {i} file image {j}: the objects are no prefix of the \
                     operations ({acked} acknowledged)"
                );
            }
        }
    }
    assert!(images > 40, "{images}");
}

#[test]
fn the_file_belongs_to_its_store_and_is_required() {
    let (pm, file) = base();
    // Data in the file, then a clean close.
    let sim = Arc::new(SimMedium::from_image(pm.clone(), SimConfig::default()));
    let f = Arc::new(MemFile::new(file.clone()));
    let s = open(Arc::clone(&sim), f.clone()).unwrap();
    s.owrite(b"obj0", 0, &[9u8; 5000]).unwrap();
    s.close().unwrap();
    drop(s);
    let (pm2, file2) = (sim.durable_image(), f.durable());

    // Without the file: refused, saying what is missing.
    let pool = Pool::open_medium(
        Arc::new(SimMedium::from_image(pm2.clone(), SimConfig::default())),
        &OpenOptions::default(),
    )
    .unwrap();
    let e = Store::open_with_object_file(pool, config(), None).unwrap_err();
    assert!(e.to_string().contains("object_dir"), "{e}");

    // Another store's file: refused on its header's pool UUID.
    let (_, other) = base();
    let e = open(
        Arc::new(SimMedium::from_image(pm2.clone(), SimConfig::default())),
        Arc::new(MemFile::new(other)),
    )
    .unwrap_err();
    match e {
        StoreError::Corrupt(c) => assert_eq!(c.field, "pool_uuid"),
        e => panic!("expected a pool_uuid mismatch, got {e}"),
    }

    // A damaged header: refused on its checksum.
    let mut bad = file2.clone();
    bad[20] ^= 1;
    let e = open(
        Arc::new(SimMedium::from_image(pm2.clone(), SimConfig::default())),
        Arc::new(MemFile::new(bad)),
    )
    .unwrap_err();
    assert!(
        matches!(e, StoreError::Corrupt(ref c) if c.field == "crc32c"),
        "{e}"
    );

    // A file whose header never became durable, while objects point into it: refused.
    let e = open(
        Arc::new(SimMedium::from_image(pm2.clone(), SimConfig::default())),
        Arc::new(MemFile::new(Vec::new())),
    )
    .unwrap_err();
    assert!(
        matches!(e, StoreError::Corrupt(ref c) if c.field == "magic"),
        "{e}"
    );

    // The right file: the data.
    let s = open(
        Arc::new(SimMedium::from_image(pm2, SimConfig::default())),
        Arc::new(MemFile::new(file2)),
    )
    .unwrap();
    assert!(s.oread(b"obj0", 0, 6000).unwrap().unwrap() == vec![9u8; 5000]);
}

#[test]
fn data_zone_objects_keep_working_beside_file_objects() {
    // A store created without a file holds an object in the data zone; opened with a file,
    // it reads that object, writes new data to the file, and merges partial blocks across.
    let cfg = config();
    let pm = model::base_image(&cfg);
    let sim = Arc::new(SimMedium::from_image(pm, SimConfig::default()));
    let s = model::open(Arc::clone(&sim), &cfg).unwrap();
    s.owrite(b"old", 0, &[5u8; 6000]).unwrap();
    assert!(s.zone_blocks_in_use() == 2);
    s.close().unwrap();
    drop(s);
    let sim = Arc::new(SimMedium::from_image(
        sim.durable_image(),
        SimConfig::default(),
    ));
    let f = Arc::new(MemFile::new(Vec::new()));
    let s = open(Arc::clone(&sim), f.clone()).unwrap();
    assert!(s.oread(b"old", 0, 10_000).unwrap().unwrap() == vec![5u8; 6000]);
    s.owrite(b"old", 3000, &[6u8; 100]).unwrap();
    let mut want = vec![5u8; 6000];
    want[3000..3100].fill(6);
    assert!(s.oread(b"old", 0, 10_000).unwrap().unwrap() == want);
    assert_eq!(
        s.object_file_blocks_in_use(),
        Some(1),
        "block 0 moved to the file"
    );
    s.close().unwrap();
    drop(s);
    let s = open(
        Arc::new(SimMedium::from_image(
            sim.durable_image(),
            SimConfig::default(),
        )),
        Arc::new(MemFile::new(f.durable())),
    )
    .unwrap();
    assert!(s.oread(b"old", 0, 10_000).unwrap().unwrap() == want);
    assert_eq!(s.zone_blocks_in_use(), 1, "block 1 stays in the zone");
}

#[test]
fn locks_are_not_kept_across_a_crash() {
    // olock and ounlock log NOOP records, which recovery ignores: after a power failure with a
    // lock held, the store opens with no lock held and the locked object's acknowledged write.
    let (pm, file) = base();
    let sim = Arc::new(SimMedium::from_image(pm, SimConfig::default()));
    let f = Arc::new(MemFile::new(file));
    let s = open(Arc::clone(&sim), f.clone()).unwrap();
    let mut c = s.context();
    c.olock(b"obj0").unwrap();
    let h = c
        .oopen(b"obj0", 0, dstore::OpenMode::CREATE)
        .unwrap()
        .unwrap();
    c.owrite(&h, &[4u8; 4096], 0).unwrap();
    let other = s.context();
    assert!(other.locked_by_other(b"obj0"));
    let img = sim.power_fail();
    let s2 = open(
        Arc::new(SimMedium::from_image(img, SimConfig::default())),
        Arc::new(MemFile::new(f.crash_images(1)[0].clone())),
    )
    .unwrap();
    let c2 = s2.context();
    assert!(!c2.locked_by_other(b"obj0"), "no lock survives the crash");
    assert!(s2.oread(b"obj0", 0, 4096).unwrap().unwrap() == vec![4u8; 4096]);
}
