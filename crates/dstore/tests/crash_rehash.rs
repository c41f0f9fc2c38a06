//! Crash consistency of a store whose tables are in the middle of an incremental rehash, on the
//! persistence simulator.
//!
//! One shard, so the keyspace is one table (64 buckets at first). A workload of SETs on new
//! keys (with a few DELs and HSETs that grow one hash's field table too) doubles the keyspace
//! twice; a checkpoint is taken while each doubling's rehash is half done, so the checkpoint
//! image holds a rehash block and a bucket array of which only part is in use. The run is
//! crashed before every fence it issues; after each crash the store is recovered (from that
//! image and the log after it) and must validate and hold exactly the acknowledged writes (or
//! those and the one in flight), and keep working after a second crash during that recovery.

mod model;

use std::collections::BTreeMap;
use std::sync::Arc;

use dstore::machine::USER_KEYSPACE;
use dstore::{Config, Store, StoreError, table};
use model::{Dump, TOp};
use pmem::rng::SplitMix64;
use pmem::{CrashPlan, SimConfig, SimMedium};

type State = BTreeMap<Vec<u8>, Dump>;

const OPS: usize = 240;

fn config() -> Config {
    Config {
        shards: 1,
        log_bytes: 64 * 1024,
        slot_bytes: 512 * 1024,
        checkpoint_at_percent: 90,
        background: false,
        value_bytes_max: 4096,
        data_bytes: 64 * 1024,
        ..Config::default()
    }
}

fn workload() -> Vec<TOp> {
    let mut rng = SplitMix64::new(0x4e4a);
    let mut field = 0;
    (0..OPS)
        .map(|i| match i % 10 {
            3 if i % 20 == 3 => TOp::Del(vec![format!("k{}", rng.below(i as u64)).into_bytes()]),
            7 => {
                field += 1;
                TOp::HSet(
                    b"h".to_vec(),
                    vec![(format!("f{field}").into_bytes(), b"fv".to_vec())],
                )
            }
            _ => TOp::Set {
                k: format!("k{i}").into_bytes(),
                v: vec![b'a' + (i % 26) as u8; 1 + rng.below(40) as usize],
                nx: false,
                xx: false,
                exp: None,
            },
        })
        .collect()
}

fn open(sim: Arc<SimMedium>) -> Result<Store<Arc<SimMedium>>, StoreError> {
    model::open(sim, &config())
}

fn keyspace_rehashing(s: &Store<Arc<SimMedium>>) -> bool {
    s.engine()
        .read(0, |a| table::rehashing(a, a.user(USER_KEYSPACE)))
        .expect("read shard 0")
}

/// The operation counts after which the workload's keyspace is halfway through a rehash (one
/// per doubling), found by running it once.
fn save_points(ops: &[TOp]) -> Vec<usize> {
    let sim = Arc::new(SimMedium::from_image(
        model::base_image(&config()),
        SimConfig::default(),
    ));
    let s = open(sim).unwrap();
    let (mut out, mut run) = (Vec::new(), Vec::new());
    for (i, op) in ops.iter().enumerate() {
        model::run(&s, op).unwrap();
        if keyspace_rehashing(&s) {
            run.push(i + 1);
        } else if !run.is_empty() {
            out.push(run[run.len() / 2]);
            run.clear();
        }
    }
    out
}

/// Run the workload, checkpointing after the operation counts `save_at`; returns the
/// operations acknowledged and, for each checkpoint taken, whether the keyspace was rehashing
/// when it was taken.
fn drive(sim: &Arc<SimMedium>, ops: &[TOp], save_at: &[usize]) -> (usize, Vec<bool>) {
    let mut during = Vec::new();
    let Ok(store) = open(Arc::clone(sim)) else {
        return (0, during);
    };
    for (i, op) in ops.iter().enumerate() {
        if model::run(&store, op).is_err() {
            return (i, during);
        }
        if save_at.contains(&(i + 1)) {
            during.push(keyspace_rehashing(&store));
            if store.save().is_err() {
                return (i + 1, during);
            }
        }
    }
    let _ = store.close();
    (ops.len(), during)
}

fn recover(image: Vec<u8>, plan: CrashPlan) -> (Option<State>, Arc<SimMedium>) {
    let sim = Arc::new(SimMedium::from_image(
        image,
        SimConfig {
            seed: 9,
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

#[test]
fn checkpoints_are_taken_while_the_keyspace_rehashes() {
    let sim = Arc::new(SimMedium::from_image(
        model::base_image(&config()),
        SimConfig::default(),
    ));
    let ops = workload();
    let save_at = save_points(&ops);
    assert_eq!(save_at.len(), 2, "two doublings: {save_at:?}");
    let (acked, during) = drive(&sim, &ops, &save_at);
    assert_eq!(acked, OPS);
    assert_eq!(during, vec![true, true], "each checkpoint met a rehash");
    let s = open(Arc::new(SimMedium::from_image(
        sim.durable_image(),
        SimConfig::default(),
    )))
    .unwrap();
    s.validate().unwrap();
    assert_eq!(model::dump(&s), model::prefixes(&ops)[OPS]);
    let buckets = s
        .engine()
        .read(0, |a| table::buckets(a, a.user(USER_KEYSPACE)))
        .unwrap();
    assert_eq!(buckets, 256, "the keyspace doubled twice");
}

#[test]
fn crash_at_every_fence_with_a_rehash_in_the_checkpoint() {
    let base = model::base_image(&config());
    let ops = workload();
    let save_at = save_points(&ops);
    let expect = model::prefixes(&ops);
    let mut n = 1;
    let mut after_a_rehashing_checkpoint = 0;
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
        let (acked, during) = drive(&sim, &ops, &save_at);
        let Some(img) = sim.crash_image() else {
            assert_eq!(acked, OPS, "an uncrashed run acknowledges everything");
            break;
        };
        if during.first() == Some(&true) && acked > save_at[0] {
            after_a_rehashing_checkpoint += 1;
        }
        let what = format!("fence {n}");
        let (state, _) = recover(img.clone(), CrashPlan::Never);
        let state = state.unwrap_or_else(|| panic!("{what}: recovery failed"));
        let done = if state == expect[acked] {
            acked
        } else {
            assert!(
                acked < OPS && state == expect[acked + 1],
                "{what}: recovered state matches neither {acked} nor {} writes",
                acked + 1
            );
            acked + 1
        };
        // A second crash, during recovery, changes nothing.
        let (_, sim2) = recover(img.clone(), CrashPlan::AtFence(2));
        let img2 = sim2.crash_image().unwrap_or_else(|| sim2.power_fail());
        let (again, _) = recover(img2, CrashPlan::Never);
        assert_eq!(again.as_ref(), Some(&state), "{what}: crash in recovery");
        // The recovered store keeps going: the rest of the workload, checkpointed again.
        let sim3 = Arc::new(SimMedium::from_image(img, SimConfig::default()));
        let s = open(Arc::clone(&sim3)).expect("reopen");
        for op in &ops[done..] {
            model::run(&s, op).unwrap_or_else(|e| panic!("{what}: after recovery: {e}"));
        }
        s.save().expect("checkpoint after recovery");
        s.validate().expect("validates after carrying on");
        assert_eq!(model::dump(&s), expect[OPS], "{what}: diverged");
        n += 1;
    }
    assert!(
        n > OPS as u64,
        "every write forces at least once ({n} fences)"
    );
    assert!(
        after_a_rehashing_checkpoint > 50,
        "crashes recovered from a checkpoint taken mid-rehash: {after_a_rehashing_checkpoint}"
    );
}
