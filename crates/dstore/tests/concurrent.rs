//! Two client threads and the background checkpoint thread, on the simulator.
//!
//! Each client works on its own keys (which share shards with the other's), with a log small
//! enough that checkpoints run over and over while the clients write. Without a crash the final
//! contents equal the two reference models. With a crash at a random point (and random
//! eviction), the recovered contents of each client's keys equal that client's model after its
//! acknowledged operations, or after those and the one in flight.

mod model;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use model::{Dump, TOp};
use pmem::rng::SplitMix64;
use pmem::{CrashPlan, SimConfig, SimMedium};

const OPS: usize = 150;
type State = BTreeMap<Vec<u8>, Dump>;

fn workloads(seed: u64) -> [Vec<TOp>; 2] {
    let mut rng = SplitMix64::new(seed);
    [0, 1].map(|t| {
        (0..OPS)
            .map(|_| model::random_op(&mut rng, &format!("t{t}"), 12, false))
            .collect()
    })
}

fn drive(sim: &Arc<SimMedium>, work: &[Vec<TOp>; 2], acked: &[AtomicUsize; 2]) -> u64 {
    let cfg = model::config(true);
    let Ok(store) = model::open(Arc::clone(sim), &cfg) else {
        return 0;
    };
    std::thread::scope(|s| {
        for t in 0..2 {
            let store = &store;
            let ops = &work[t];
            let acked = &acked[t];
            s.spawn(move || {
                for op in ops {
                    if model::run(store, op).is_err() {
                        return;
                    }
                    acked.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    let checkpoints = store.engine().stats().log_swaps;
    let _ = store.close();
    checkpoints
}

fn part(state: &State, t: usize) -> State {
    let p = format!("t{t}").into_bytes();
    state
        .iter()
        .filter(|(k, _)| k.starts_with(&p))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[test]
fn without_a_crash_both_clients_see_their_model_and_checkpoints_ran() {
    let cfg = model::config(true);
    let base = model::base_image(&cfg);
    let work = workloads(3);
    let sim = Arc::new(SimMedium::from_image(base, SimConfig::default()));
    let acked = [AtomicUsize::new(0), AtomicUsize::new(0)];
    let checkpoints = drive(&sim, &work, &acked);
    for a in &acked {
        assert_eq!(
            a.load(Ordering::SeqCst),
            OPS,
            "every operation was acknowledged"
        );
    }
    // The workload appends more than one log holds, so at least one background checkpoint
    // must have swapped the logs (a write that finds the log full waits for that).
    assert!(checkpoints >= 1, "no background checkpoint started");
    let sim = Arc::new(SimMedium::from_image(
        sim.durable_image(),
        SimConfig::default(),
    ));
    let s = model::open(sim, &cfg).unwrap();
    s.validate().unwrap();
    let state = model::dump(&s);
    for (t, w) in work.iter().enumerate() {
        assert_eq!(
            part(&state, t),
            *model::prefixes(w).last().unwrap(),
            "client {t}"
        );
    }
}

#[test]
fn crashes_at_random_points_lose_no_acknowledged_write() {
    let cfg = model::config(true);
    let base = model::base_image(&cfg);
    let mut rng = SplitMix64::new(0xc0ffee);
    for round in 0..5u64 {
        let work = workloads(100 + round);
        let expect = [model::prefixes(&work[0]), model::prefixes(&work[1])];
        let dry = Arc::new(SimMedium::from_image(base.clone(), SimConfig::default()));
        drive(&dry, &work, &[AtomicUsize::new(0), AtomicUsize::new(0)]);
        let events = dry.events();
        for _ in 0..60 {
            let seed = rng.next_u64();
            let mut pick = SplitMix64::new(seed);
            let sim = Arc::new(SimMedium::from_image(
                base.clone(),
                SimConfig {
                    seed,
                    crash: CrashPlan::AtEvent(1 + pick.below(events)),
                    evict_per_million: [0, 100_000][pick.below(2) as usize],
                    ..SimConfig::default()
                },
            ));
            let acked = [AtomicUsize::new(0), AtomicUsize::new(0)];
            drive(&sim, &work, &acked);
            let img = sim.crash_image().unwrap_or_else(|| sim.power_fail());
            let rec = Arc::new(SimMedium::from_image(img, SimConfig::default()));
            let s = model::open(rec, &cfg)
                .unwrap_or_else(|e| panic!("seed {seed:#x}: recovery failed: {e}"));
            s.validate().unwrap();
            let state = model::dump(&s);
            for t in 0..2 {
                let a = acked[t].load(Ordering::SeqCst);
                let got = part(&state, t);
                let ok = got == expect[t][a] || (a < OPS && got == expect[t][a + 1]);
                assert!(
                    ok,
                    "seed {seed:#x} client {t}: matches neither {a} nor {} operations",
                    a + 1
                );
            }
        }
    }
}
