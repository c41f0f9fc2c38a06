//! Crash consistency of a store that grows, on the persistence simulator.
//!
//! A store is made in the smallest growable pool (64 KiB, which its regions grow) with the
//! smallest slot tables. A seeded workload of large writes, with checkpoints between them,
//! takes its state well past them: checkpoints write their images into shared page frames
//! (slot format 2), adding frame regions or growing the last one in place, and replace a slot's
//! table region when it is too small (directory updates; the pool grows for each: the file
//! first, then a new pool state records the size). The run is crashed before every fence it
//! issues (the growth steps included) and at 300 seeded random points with random eviction;
//! after each crash the store is recovered and must hold exactly the acknowledged writes (or
//! those and the one in flight), survive a second crash during that recovery, and keep working
//! (more writes, two checkpoints, a close and a reopen give the model's contents).
//!
//! A last test makes a store the way stores were made before growth (fixed-size pool and
//! format-1 slots), fills it to its old ceiling, and checks that it opens, turns growable and
//! takes far more data.

mod model;

use std::collections::BTreeMap;
use std::sync::Arc;

use dstore::{Config, Store, StoreError};
use model::{Dump, Model, TOp};
use pmem::rng::SplitMix64;
use pmem::{CrashPlan, Domain, Medium, OpenOptions, Pool, SimConfig, SimMedium};

const OPS: usize = 90;
const CHECKPOINT_EVERY: usize = 12;

type State = BTreeMap<Vec<u8>, Dump>;

fn config() -> Config {
    Config {
        shards: 2,
        log_bytes: 1 << 20,
        slot_bytes: 0,
        checkpoint_at_percent: 50,
        background: false,
        value_bytes_max: 65536,
        data_bytes: 4096,
        ..Config::default()
    }
}

/// Large SETs (and some DELs, so blocks are freed and reused) over many keys.
fn workload(seed: u64) -> Vec<TOp> {
    let mut rng = SplitMix64::new(seed);
    (0..OPS)
        .map(|_| {
            let k = format!("key-{:03}", rng.below(150)).into_bytes();
            if rng.below(10) == 0 {
                TOp::Del(vec![k])
            } else {
                let len = 16000 + rng.below(32000) as usize;
                let v = vec![b'a' + rng.below(26) as u8; len];
                TOp::Set {
                    k,
                    v,
                    nx: false,
                    xx: false,
                    exp: None,
                }
            }
        })
        .collect()
}

/// A fresh, cleanly closed store in the smallest growable pool.
fn base_image() -> Vec<u8> {
    let sim = Arc::new(SimMedium::new(
        pmem::layout::POOL_SIZE_MIN as usize,
        SimConfig::default(),
    ));
    let m = Pool::format_growable(Arc::clone(&sim), Domain::Sim).expect("format");
    let pool = Pool::open_medium(m, &OpenOptions::default()).expect("open");
    let store = Store::create(pool, config()).expect("create");
    store.close().expect("close");
    drop(store);
    sim.durable_image()
}

/// Frame regions in the pool on `sim` (format-2 checkpoint images keep their pages there).
fn frame_regions(sim: &SimMedium) -> usize {
    let pool = Pool::open_medium(
        sim,
        &OpenOptions {
            read_only: true,
            domain: None,
        },
    )
    .expect("open");
    pool.regions()
        .iter()
        .filter(|r| r.name.starts_with(dipper::layout::FRAME_REGION_PREFIX))
        .count()
}

fn open(sim: Arc<SimMedium>) -> Result<Store<Arc<SimMedium>>, StoreError> {
    model::open(sim, &config())
}

fn drive(sim: &Arc<SimMedium>, ops: &[TOp]) -> usize {
    let Ok(store) = open(Arc::clone(sim)) else {
        return 0;
    };
    let mut acked = 0;
    for (i, op) in ops.iter().enumerate() {
        if model::run(&store, op).is_err() {
            return acked;
        }
        acked += 1;
        if (i + 1) % CHECKPOINT_EVERY == 0 && store.save().is_err() {
            return acked;
        }
    }
    let _ = store.close();
    acked
}

fn recover(image: Vec<u8>, plan: CrashPlan, seed: u64) -> (Option<State>, Arc<SimMedium>) {
    let sim = Arc::new(SimMedium::from_image(
        image,
        SimConfig {
            seed,
            crash: plan,
            evict_per_million: 100_000,
            ..SimConfig::default()
        },
    ));
    let state = open(Arc::clone(&sim)).ok().map(|s| {
        s.validate().expect("recovered structures validate");
        model::dump(&s)
    });
    (state, sim)
}

fn carry_on(image: Vec<u8>, ops: &[TOp], done: usize, what: &str) {
    let mut m = Model::default();
    for op in &ops[..done] {
        m.apply(op);
    }
    let more = workload(done as u64 ^ 0x77);
    let sim = Arc::new(SimMedium::from_image(image, SimConfig::default()));
    let s = open(Arc::clone(&sim)).expect("reopen");
    for (i, op) in more.iter().take(30).enumerate() {
        model::run(&s, op).unwrap_or_else(|e| panic!("{what}: write {i} after recovery: {e}"));
        m.apply(op);
        if i == 10 || i == 20 {
            s.save().expect("checkpoint after recovery");
        }
    }
    s.close().expect("close");
    drop(s);
    let sim = Arc::new(SimMedium::from_image(
        sim.durable_image(),
        SimConfig::default(),
    ));
    let s = open(sim).expect("open after carrying on");
    s.validate().expect("structures validate after carrying on");
    assert_eq!(
        model::dump(&s),
        m.dump(),
        "{what}: the store diverged after recovery"
    );
}

fn check(image: Vec<u8>, acked: usize, ops: &[TOp], expect: &[State], what: &str, seed: u64) {
    let (state, _) = recover(image.clone(), CrashPlan::Never, seed);
    let state = state.unwrap_or_else(|| panic!("{what}: recovery failed"));
    let ok = state == expect[acked] || (acked + 1 < expect.len() && state == expect[acked + 1]);
    assert!(
        ok,
        "{what}: recovered state matches neither {acked} nor {} acknowledged writes",
        acked + 1
    );
    let done = if state == expect[acked] {
        acked
    } else {
        acked + 1
    };
    carry_on(image.clone(), ops, done, what);
    // A second crash during recovery (which may itself grow a slot, redoing a checkpoint).
    let dry = Arc::new(SimMedium::from_image(image.clone(), SimConfig::default()));
    let events = {
        let s = open(Arc::clone(&dry)).expect("dry recovery");
        drop(s);
        dry.events()
    };
    let mut pick = SplitMix64::new(seed ^ 0xabc);
    let at = 1 + pick.below(events.max(1));
    let (_, sim) = recover(image, CrashPlan::AtEvent(at), seed);
    let image2 = sim.crash_image().unwrap_or_else(|| sim.power_fail());
    let (again, _) = recover(image2, CrashPlan::Never, seed);
    assert_eq!(
        again.as_ref(),
        Some(&state),
        "{what}: a crash during recovery at event {at} changed the outcome"
    );
}

/// The uncrashed run grows: the pool ends far larger than it started, and the slots too.
#[test]
fn the_workload_grows_the_pool_and_the_slots() {
    let base = base_image();
    let start = base.len();
    let ops = workload(5);
    let sim = Arc::new(SimMedium::from_image(base, SimConfig::default()));
    let first_slot = {
        let s = open(Arc::clone(&sim)).unwrap();
        let c = s.engine().stats().slot_capacity_bytes;
        drop(s);
        c
    };
    let sim = Arc::new(SimMedium::from_image(
        sim.power_fail(),
        SimConfig::default(),
    ));
    assert_eq!(drive(&sim, &ops), OPS);
    let sim = Arc::new(SimMedium::from_image(
        sim.durable_image(),
        SimConfig::default(),
    ));
    // (The amounts vary a little: the shard of a key depends on the pool's random UUID.)
    assert!(
        sim.len() > start * 3 / 2,
        "{} -> {} bytes",
        start,
        sim.len()
    );
    let s = open(sim).unwrap();
    let st = s.engine().stats();
    assert!(st.slots_grow);
    assert!(
        st.slot_capacity_bytes > first_slot * 3 / 2,
        "slots of {first_slot} bytes became {}",
        st.slot_capacity_bytes
    );
    assert_eq!(model::dump(&s), model::prefixes(&ops)[OPS]);
}

#[test]
fn crash_at_every_fence_of_a_growing_store() {
    let base = base_image();
    let ops = workload(11);
    let expect = model::prefixes(&ops);
    let mut n = 1;
    loop {
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
        let Some(img) = sim.crash_image() else {
            assert_eq!(acked, OPS, "an uncrashed run acknowledges everything");
            break;
        };
        check(img, acked, &ops, &expect, &format!("fence {n}"), n);
        n += 1;
    }
    assert!(
        n > OPS as u64,
        "every write forces at least once ({n} fences)"
    );
    // The run crashed at every fence above grew the frames and the tables.
    let sim = Arc::new(SimMedium::from_image(base.clone(), SimConfig::default()));
    let first = frame_regions(&sim);
    let table = {
        let s = open(Arc::clone(&sim)).unwrap();
        let c = s.engine().stats().slot_capacity_bytes;
        drop(s);
        c
    };
    let sim = Arc::new(SimMedium::from_image(
        sim.power_fail(),
        SimConfig::default(),
    ));
    assert_eq!(drive(&sim, &ops), OPS);
    let sim = Arc::new(SimMedium::from_image(
        sim.durable_image(),
        SimConfig::default(),
    ));
    assert!(frame_regions(&sim) > first, "no frame region was added");
    let s = open(sim).unwrap();
    assert!(
        s.engine().stats().slot_capacity_bytes > table,
        "no table grew"
    );
}

#[test]
fn crash_at_random_points_of_a_growing_store() {
    let base = base_image();
    let mut rng = SplitMix64::new(0x6e0);
    for round in 0..3u64 {
        let ops = workload(2000 + round);
        let expect = model::prefixes(&ops);
        let dry = Arc::new(SimMedium::from_image(base.clone(), SimConfig::default()));
        assert_eq!(drive(&dry, &ops), OPS);
        let events = dry.events();
        for _ in 0..100 {
            let seed = rng.next_u64();
            let sim = Arc::new(SimMedium::from_image(
                base.clone(),
                SimConfig::default().at_random_event(seed, events),
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

/// A store made as before growth existed: a fixed-size pool of `Config::pool_bytes` and fixed
/// slots. It fills to its ceiling and refuses writes; opened again with growth on (what
/// `open_dir` does) it turns growable and takes several times more.
#[test]
fn a_store_made_with_fixed_slots_opens_turns_growable_and_takes_more() {
    let fixed = Config {
        grow: false,
        slot_bytes: Config::slot_bytes_min(2).unwrap(),
        ..config()
    };
    let sim = Arc::new(SimMedium::new(
        fixed.pool_bytes() as usize,
        SimConfig::default(),
    ));
    let m = Pool::format(Arc::clone(&sim), Domain::Sim).expect("format");
    let pool = Pool::open_medium(m, &OpenOptions::default()).expect("open");
    let store = Store::create(pool, fixed.clone()).expect("create");
    let value = vec![b'v'; 2000];
    let key = |i: usize| format!("old-{i:05}").into_bytes();
    let mut acked = 0;
    loop {
        match store.set(&key(acked), &value, false, false, None) {
            Ok(_) => acked += 1,
            Err(StoreError::OutOfSpace(_)) => break,
            Err(e) => panic!("write {acked}: {e}"),
        }
        if acked % 20 == 0 {
            match store.save() {
                Ok(_) => {}
                Err(StoreError::OutOfSpace(_)) => break,
                Err(e) => panic!("checkpoint: {e}"),
            }
        }
        assert!(acked < 100_000, "a fixed store never filled");
    }
    let _ = store.close();
    drop(store);
    let image = sim.power_fail();
    // The old way: it opens unchanged, at its ceiling.
    let sim = Arc::new(SimMedium::from_image(image, SimConfig::default()));
    {
        let pool = Pool::open_medium(Arc::clone(&sim), &OpenOptions::default()).unwrap();
        assert!(!pool.growable());
        let s = Store::open(pool, fixed.clone()).unwrap();
        assert!(!s.engine().stats().slots_grow);
        assert_eq!(s.dbsize().unwrap(), acked as u64);
        drop(s);
    }
    // Migrated: the pool turns growable, then the store opens and grows.
    let sim = Arc::new(SimMedium::from_image(
        sim.power_fail(),
        SimConfig::default(),
    ));
    let mut pool = Pool::open_medium(Arc::clone(&sim), &OpenOptions::default()).unwrap();
    pool.make_growable().unwrap();
    let s = Store::open(pool, config()).unwrap();
    assert!(s.engine().stats().slots_grow);
    for i in acked..acked * 4 {
        s.set(&key(i), &value, false, false, None)
            .unwrap_or_else(|e| panic!("write {i} after migration: {e}"));
        if i % 50 == 0 {
            s.save().unwrap();
        }
    }
    let st = s.engine().stats();
    assert!(
        st.slot_capacity_bytes > fixed.slot_bytes,
        "slots of {} bytes hold {} now",
        fixed.slot_bytes,
        st.slot_capacity_bytes
    );
    s.close().unwrap();
    drop(s);
    let grown = sim.durable_image();
    let s = open(Arc::new(SimMedium::from_image(grown, SimConfig::default()))).unwrap();
    s.validate().unwrap();
    assert_eq!(s.dbsize().unwrap(), 4 * acked as u64);
    for i in [0, acked - 1, acked, 4 * acked - 1] {
        assert_eq!(s.get(&key(i)).unwrap().as_deref(), Some(&value[..]));
    }
}
