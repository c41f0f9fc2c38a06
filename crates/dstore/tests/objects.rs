//! DStore objects on the simulator: partial writes at random offsets (growing objects, holes,
//! overwrites into new data-zone blocks) and deletes, crashed at every fence and at random
//! points. After each crash: every object holds the model's bytes after the acknowledged
//! operations (or those and the one in flight), no data-zone block belongs to two objects
//! (open checks it), a second crash during recovery changes nothing, and the store keeps
//! working through two more checkpoints and a reopen.

mod common;
mod model;

use std::sync::Arc;

use common::{ObjOp, Objects, apply, contents, models, run};
use pmem::rng::SplitMix64;
use pmem::{CrashPlan, SimConfig, SimMedium};

/// The workload: writes anywhere in the first 20 KB, up to 9 KB long.
fn workload(seed: u64, n: usize) -> Vec<ObjOp> {
    common::workload(
        seed,
        n,
        |rng| (rng.below(20_000), rng.below(9_000) as usize),
        0,
    )
}

fn drive(sim: &Arc<SimMedium>, ops: &[ObjOp]) -> usize {
    let cfg = model::config(false);
    let Ok(s) = model::open(Arc::clone(sim), &cfg) else {
        return 0;
    };
    common::run_all(&s, ops, &[10, 25])
}

fn open_image(image: Vec<u8>, plan: CrashPlan, seed: u64) -> (Option<Objects>, Arc<SimMedium>) {
    let sim = Arc::new(SimMedium::from_image(
        image,
        SimConfig {
            seed,
            crash: plan,
            evict_per_million: 100_000,
            ..SimConfig::default()
        },
    ));
    let cfg = model::config(false);
    let got = model::open(Arc::clone(&sim), &cfg).ok().map(|s| {
        s.validate().expect("structures validate");
        let c = contents(&s);
        let blocks: u64 = c.values().map(|d| d.len().div_ceil(4096) as u64).sum();
        assert!(
            s.zone_blocks_in_use() <= blocks,
            "no block is in use that no object holds"
        );
        c
    });
    (got, sim)
}

fn check(image: Vec<u8>, acked: usize, ops: &[ObjOp], expect: &[Objects], what: &str, seed: u64) {
    let (got, _) = open_image(image.clone(), CrashPlan::Never, seed);
    let got = got.unwrap_or_else(|| panic!("{what}: recovery failed"));
    let done = if got == expect[acked] {
        acked
    } else {
        assert!(
            acked < ops.len() && got == expect[acked + 1],
            "{what}: objects match neither {acked} nor {} operations",
            acked + 1
        );
        acked + 1
    };
    // A second crash during recovery changes nothing.
    let mut pick = SplitMix64::new(seed ^ 0x0b1);
    let (_, sim) = open_image(image.clone(), CrashPlan::AtEvent(1 + pick.below(400)), seed);
    let img2 = sim.crash_image().unwrap_or_else(|| sim.power_fail());
    assert_eq!(
        open_image(img2, CrashPlan::Never, seed).0.as_ref(),
        Some(&got),
        "{what}: second crash"
    );
    // The store carries on.
    let sim = Arc::new(SimMedium::from_image(image, SimConfig::default()));
    let cfg = model::config(false);
    let s = model::open(Arc::clone(&sim), &cfg).unwrap();
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
    let (after, _) = open_image(sim.durable_image(), CrashPlan::Never, seed);
    assert_eq!(after, Some(m), "{what}: diverged after recovery");
}

#[test]
fn object_writes_crash_at_every_fence() {
    let cfg = model::config(false);
    let base = model::base_image(&cfg);
    let ops = workload(5, 40);
    let expect = models(&ops);
    let mut images = 0u64;
    for n in 1.. {
        let sim = Arc::new(SimMedium::from_image(
            base.clone(),
            SimConfig {
                seed: n,
                crash: CrashPlan::AtFence(n),
                evict_per_million: 0,
                ..SimConfig::default()
            },
        ));
        let acked = drive(&sim, &ops);
        let Some(state) = sim.crash_state() else {
            assert_eq!(acked, ops.len());
            assert!(n > 40, "each write persists data and a record");
            println!("crash images checked: {images} at {} fences (Adr)", n - 1);
            break;
        };
        for (i, img) in state.images().into_iter().enumerate() {
            images += 1;
            check(
                img,
                acked,
                &ops,
                &expect,
                &format!("fence {n} image {i}"),
                n,
            );
        }
    }
}

#[test]
fn object_writes_crash_at_random_points() {
    let cfg = model::config(false);
    let base = model::base_image(&cfg);
    let mut rng = SplitMix64::new(0x0bec7);
    for round in 0..3u64 {
        let ops = workload(50 + round, 40);
        let expect = models(&ops);
        let dry = Arc::new(SimMedium::from_image(base.clone(), SimConfig::default()));
        assert_eq!(drive(&dry, &ops), ops.len());
        let events = dry.events();
        for _ in 0..100 {
            let seed = rng.next_u64();
            let mut pick = SplitMix64::new(seed);
            let sim = Arc::new(SimMedium::from_image(
                base.clone(),
                SimConfig {
                    seed,
                    crash: CrashPlan::AtEvent(1 + pick.below(events)),
                    evict_per_million: [0, 100_000, 500_000][pick.below(3) as usize],
                    ..SimConfig::default()
                },
            ));
            let acked = drive(&sim, &ops);
            let img = sim.crash_image().unwrap_or_else(|| sim.power_fail());
            check(
                img,
                acked,
                &ops,
                &expect,
                &format!("round {round} seed {seed:#x}"),
                seed,
            );
        }
    }
}

#[test]
fn key_value_writes_refuse_objects_and_reads_see_zeros_in_holes() {
    let cfg = model::config(false);
    let sim = Arc::new(SimMedium::from_image(
        model::base_image(&cfg),
        SimConfig::default(),
    ));
    let s = model::open(sim, &cfg).unwrap();
    let o = s.open_object(b"doc", true).unwrap().unwrap();
    assert_eq!(o.size().unwrap(), 0);
    assert_eq!(o.write(10_000, b"tail").unwrap(), 10_004);
    let all = o.read(0, 20_000).unwrap();
    assert_eq!(all.len(), 10_004);
    assert!(all[..10_000].iter().all(|&b| b == 0));
    assert_eq!(&all[10_000..], b"tail");
    assert_eq!(s.key_type(b"doc").unwrap(), "object");
    assert_eq!(
        s.set(b"doc", b"x", false, false, None),
        Err(dstore::StoreError::WrongType)
    );
    assert_eq!(
        s.mset(&[(b"a", b"1"), (b"doc", b"2")]),
        Err(dstore::StoreError::WrongType)
    );
    assert_eq!(s.get(b"a").unwrap(), None, "MSET is refused whole");
    assert!(s.open_object(b"missing", false).unwrap().is_none());
    assert_eq!(s.del(&[b"doc"]).unwrap(), 1);
    assert_eq!(
        s.zone_blocks_in_use(),
        0,
        "deleting the object freed its blocks"
    );
}
