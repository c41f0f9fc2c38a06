//! Crash consistency of DStore on DIPPER, on the persistence simulator.
//!
//! A seeded sequence of operations (every operation type, expiry, type errors, FLUSHALL) runs
//! on a store with small logs, with checkpoints taken in the middle of it and a clean close at
//! the end. The run is crashed before every fence it issues and at 1,000 seeded random points
//! with random eviction and tearing. After each crash the store is recovered and:
//!
//! - its structures validate;
//! - its contents equal the reference model after the acknowledged operations, or after those
//!   and the one in flight (with synchronous durability an acknowledged operation is durable;
//!   the one in flight may or may not be);
//! - a second crash at a random point during that recovery, followed by another recovery,
//!   gives the same contents;
//! - the recovered store keeps working: more operations and two more checkpoints (so both
//!   slots are written again after the recovery), a clean close and a reopen give the model's
//!   contents.

mod model;

use std::collections::BTreeMap;
use std::sync::Arc;

use model::{Dump, Model, TOp};
use pmem::rng::SplitMix64;
use pmem::{CrashPlan, Medium, SimConfig, SimDomain, SimMedium};

const OPS: usize = 70;
const CHECKPOINT_AFTER: [usize; 3] = [15, 40, 41];

type State = BTreeMap<Vec<u8>, Dump>;

fn workload(seed: u64) -> Vec<TOp> {
    let mut rng = SplitMix64::new(seed);
    (0..OPS)
        .map(|_| model::random_op(&mut rng, "", 10, true))
        .collect()
}

/// Run the workload on `sim` until it ends or the medium crashes; returns how many operations
/// were acknowledged.
fn drive(sim: &Arc<SimMedium>, ops: &[TOp]) -> usize {
    drive_all(sim, ops).0
}

/// [`drive`], also telling whether every call (the final close included) succeeded.
fn drive_all(sim: &Arc<SimMedium>, ops: &[TOp]) -> (usize, bool) {
    let cfg = model::config(false);
    let Ok(store) = model::open(Arc::clone(sim), &cfg) else {
        return (0, false);
    };
    let mut acked = 0;
    for (i, op) in ops.iter().enumerate() {
        if model::run(&store, op).is_err() {
            return (acked, false);
        }
        acked += 1;
        if CHECKPOINT_AFTER.contains(&(i + 1)) && store.save().is_err() {
            return (acked, false);
        }
    }
    let closed = store.close().is_ok();
    (acked, closed)
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
    let cfg = model::config(false);
    let state = model::open(Arc::clone(&sim), &cfg).ok().map(|s| {
        s.validate().expect("recovered structures validate");
        model::dump(&s)
    });
    (state, sim)
}

/// After recovering the first `done` operations: run more, with two checkpoints, close, reopen
/// and compare with the model.
fn carry_on(image: Vec<u8>, ops: &[TOp], done: usize, what: &str) {
    let mut m = Model::default();
    for op in &ops[..done] {
        m.apply(op);
    }
    let mut rng = SplitMix64::new(done as u64 ^ 0x77);
    let more: Vec<TOp> = (0..20)
        .map(|_| model::random_op(&mut rng, "", 10, false))
        .collect();
    let cfg = model::config(false);
    let sim = Arc::new(SimMedium::from_image(image, SimConfig::default()));
    let s = model::open(Arc::clone(&sim), &cfg).expect("reopen");
    for (i, op) in more.iter().enumerate() {
        model::run(&s, op).expect("operation after recovery");
        m.apply(op);
        if i == 5 || i == 12 {
            s.save().expect("checkpoint after recovery");
        }
    }
    s.close().expect("close");
    drop(s);
    let sim = Arc::new(SimMedium::from_image(
        sim.durable_image(),
        SimConfig::default(),
    ));
    let s = model::open(sim, &cfg).expect("open after carrying on");
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
    let done = if state == expect[acked] {
        acked
    } else {
        acked + 1
    };
    carry_on(image.clone(), ops, done.min(ops.len()), what);
    let ok = state == expect[acked] || (acked + 1 < expect.len() && state == expect[acked + 1]);
    assert!(
        ok,
        "{what}: recovered state matches neither {acked} nor {} acknowledged operations\n got {state:?}\n want {:?}",
        acked + 1,
        expect[acked]
    );
    // A second crash during recovery.
    let dry = Arc::new(SimMedium::from_image(image.clone(), SimConfig::default()));
    let events = {
        let cfg = model::config(false);
        let s = model::open(Arc::clone(&dry), &cfg).expect("dry recovery");
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

#[test]
fn crash_at_every_fence() {
    every_fence(SimConfig::default(), true);
}

/// `eadr` and `msync` (512 B sectors on one, 4 KiB on the other): every image worth checking
/// at each fence, not only the sampled one (few are open in these domains).
#[test]
fn crash_at_every_fence_in_eadr_and_msync() {
    for (domain, sector) in [
        (SimDomain::Eadr, 512),
        (SimDomain::Msync, 512),
        (SimDomain::Msync, 4096),
    ] {
        every_fence(
            SimConfig {
                seed: sector as u64,
                domain,
                sector,
                ..SimConfig::default()
            },
            true,
        );
    }
}

/// Crash before every fence in the domain of `sim_cfg`; `all` checks every crash image of each
/// point ([`pmem::sim::CrashState::images`]), else the sampled one.
fn every_fence(sim_cfg: SimConfig, all: bool) {
    let cfg = model::config(false);
    let base = model::base_image(&cfg);
    let ops = workload(11);
    let expect = model::prefixes(&ops);
    let mut n = 1;
    let mut images = 0u64;
    loop {
        let sim = Arc::new(SimMedium::from_image(
            base.clone(),
            SimConfig {
                seed: sim_cfg.seed ^ n,
                crash: CrashPlan::AtFence(n),
                evict_per_million: 0,
                ..sim_cfg
            },
        ));
        let acked = drive(&sim, &ops);
        let Some(state) = sim.crash_state() else {
            assert_eq!(acked, OPS, "an uncrashed run acknowledges everything");
            break;
        };
        let imgs = if all {
            state.images()
        } else {
            vec![state.sampled().to_vec()]
        };
        for img in imgs {
            images += 1;
            check(
                img,
                acked,
                &ops,
                &expect,
                &format!("{:?} fence {n}", sim_cfg.domain),
                n,
            );
        }
        n += 1;
    }
    println!(
        "crash images checked: {images} at {} fences ({:?})",
        n - 1,
        sim_cfg.domain
    );
    assert!(
        n > OPS as u64,
        "every operation forces at least once ({n} fences)"
    );
}

/// In `msync`, the k-th msync fails, for k spread over the whole run (1, 2, 3, 4, 6, 9, ...
/// until the run issues fewer): the store reports an error (never success for every call), and
/// every image the power may leave afterwards recovers with every acknowledged operation.
#[test]
fn a_failed_msync_is_reported_and_loses_no_acknowledged_operation() {
    let cfg = model::config(false);
    let base = model::base_image(&cfg);
    let ops = workload(11);
    let expect = model::prefixes(&ops);
    let mut images = 0u64;
    let mut fired = 0;
    let mut k = 1u64;
    loop {
        let sector = if k % 2 == 0 { 512 } else { 4096 };
        let sim = Arc::new(SimMedium::from_image(
            base.clone(),
            SimConfig {
                seed: k,
                domain: SimDomain::Msync,
                sector,
                fail_msync_at: k,
                ..SimConfig::default()
            },
        ));
        let (acked, all_ok) = drive_all(&sim, &ops);
        // After a failed msync every fence fails: that tells whether the k-th came.
        if sim.fence().is_ok() {
            assert!(all_ok && acked == OPS, "no msync failed, yet an error");
            break;
        }
        fired += 1;
        assert!(
            !all_ok,
            "msync {k} failed, yet every operation and the close reported success"
        );
        for img in sim.power_fail_state().images() {
            images += 1;
            check(
                img,
                acked,
                &ops,
                &expect,
                &format!("msync {k} failed ({sector} B sectors), {acked} acknowledged"),
                k,
            );
        }
        k = k * 3 / 2 + 1;
    }
    assert!(fired >= 8, "only {fired} msyncs to fail");
    println!("crash images checked: {images} after failed msyncs (Msync)");
}

#[test]
fn crash_at_random_points() {
    random_points(SimConfig::default(), 10, 100);
}

/// Random points in `eadr` and `msync` (both sector sizes): fewer rounds than `adr`.
#[test]
fn crash_at_random_points_in_eadr_and_msync() {
    for (domain, sector) in [
        (SimDomain::Eadr, 512),
        (SimDomain::Msync, 512),
        (SimDomain::Msync, 4096),
    ] {
        random_points(
            SimConfig {
                seed: sector as u64,
                domain,
                sector,
                ..SimConfig::default()
            },
            1,
            100,
        );
    }
}

/// `rounds` workloads, each crashed at `per_round` seeded random events (with seeded eviction)
/// in the domain of `sim_cfg`.
fn random_points(sim_cfg: SimConfig, rounds: u64, per_round: usize) {
    let cfg = model::config(false);
    let base = model::base_image(&cfg);
    let mut rng = SplitMix64::new(0x5eed ^ sim_cfg.seed);
    let mut images = 0u64;
    for round in 0..rounds {
        let ops = workload(1000 + round);
        let expect = model::prefixes(&ops);
        let dry = Arc::new(SimMedium::from_image(base.clone(), sim_cfg));
        assert_eq!(drive(&dry, &ops), OPS);
        let events = dry.events();
        for _ in 0..per_round {
            let seed = rng.next_u64();
            let sim = Arc::new(SimMedium::from_image(
                base.clone(),
                sim_cfg.at_random_event(seed, events),
            ));
            let acked = drive(&sim, &ops);
            let img = sim.crash_image().unwrap_or_else(|| sim.power_fail());
            images += 1;
            check(
                img,
                acked,
                &ops,
                &expect,
                &format!("{:?} round {round} seed {seed:#x}", sim_cfg.domain),
                seed,
            );
        }
    }
    println!(
        "crash images checked: {images} at random points ({:?})",
        sim_cfg.domain
    );
}

#[test]
fn a_clean_close_and_reopen_keeps_everything_without_replay() {
    let cfg = model::config(false);
    let base = model::base_image(&cfg);
    let ops = workload(77);
    let expect = model::prefixes(&ops);
    let sim = Arc::new(SimMedium::from_image(base, SimConfig::default()));
    assert_eq!(drive(&sim, &ops), OPS);
    let sim = Arc::new(SimMedium::from_image(
        sim.durable_image(),
        SimConfig::default(),
    ));
    let s = model::open(sim, &cfg).unwrap();
    assert!(s.recovery().clean_shutdown);
    assert_eq!(
        s.recovery().active_records,
        0,
        "close took a final checkpoint"
    );
    assert_eq!(model::dump(&s), expect[OPS]);
}

// ---------------------------------------------------------------------------------------------
// Flush on fail.

/// A store in a pool with a flush-on-fail record, closed cleanly (so the record says saved), as
/// an image; and the record's offset.
fn fof_base_image(cfg: &dstore::Config) -> (Vec<u8>, usize) {
    use pmem::{Domain, OpenOptions, Pool};
    let sim = Arc::new(SimMedium::new(model::POOL_BYTES, SimConfig::default()));
    let m = Pool::format(Arc::clone(&sim), Domain::Sim).expect("format");
    let mut pool = Pool::open_medium(m, &OpenOptions::default()).expect("open");
    let record = pmem::fof::pool_record(&mut pool).expect("record region");
    let store = dstore::Store::create(pool, cfg.clone()).expect("create");
    store.close().expect("close");
    drop(store);
    pmem::fof::arm(&*sim, record).expect("arm");
    pmem::fof::mark_saved(&*sim, record, 1, &[]).expect("saved");
    (sim.durable_image(), record)
}

/// The typed refusal of a missed window; the image is left as it was.
fn assert_refused(image: Vec<u8>, what: &str) {
    let sim = Arc::new(SimMedium::from_image(image.clone(), SimConfig::default()));
    match model::open(Arc::clone(&sim), &model::config(false)) {
        Ok(_) => panic!("{what}: a missed window opened"),
        Err(dstore::StoreError::Corrupt(c)) => {
            assert_eq!(
                (c.structure.as_str(), c.field),
                ("flush-on-fail record", "state"),
                "{what}"
            )
        }
        Err(e) => panic!("{what}: refused with an unexpected error: {e}"),
    }
    assert!(
        sim.durable_image() == image,
        "{what}: the refused open wrote"
    );
}

/// Every fence of the workload in `FlushOnFail`, both fates: a completed save (every store kept,
/// plus the save's marker) recovers the acknowledged operations and carries on (its clean close
/// marks the record saved again); a missed window is refused, unchanged. A crash while a saved
/// image is recovered leaves it saved (the same outcome) or, once the open re-armed the record,
/// armed (refused: a power failure after the re-arm is a missed window).
#[test]
fn crash_at_every_fence_in_flush_on_fail() {
    let cfg = model::config(false);
    let (base, record) = fof_base_image(&cfg);
    let ops = workload(11);
    let expect = model::prefixes(&ops);
    let (mut n, mut saved, mut missed) = (1u64, 0u64, 0u64);
    loop {
        let sim = Arc::new(SimMedium::from_image(
            base.clone(),
            SimConfig {
                seed: n,
                crash: CrashPlan::AtFence(n),
                domain: SimDomain::FlushOnFail,
                images_per_crash: 4,
                ..SimConfig::default()
            },
        ));
        let acked = drive(&sim, &ops);
        let Some(state) = sim.crash_state() else {
            assert_eq!(acked, OPS, "an uncrashed run acknowledges everything");
            break;
        };
        for (fate, img) in state.fates() {
            let what = format!("FlushOnFail fence {n} {fate:?}");
            let probe = SimMedium::from_image(img.clone(), SimConfig::default());
            let armed = pmem::fof::read(&probe, record).expect("record").state()
                == pmem::fof::FofState::Armed;
            match fate {
                pmem::sim::Fate::Saved => {
                    saved += 1;
                    // The save's marker over the kept stores (a crash before the open re-armed
                    // the record finds it saved already).
                    let img = if armed {
                        pmem::fof::with_saved_marker(img, record, &[]).expect("marker")
                    } else {
                        img
                    };
                    let (got, _) = recover(img.clone(), CrashPlan::Never, n);
                    let got = got.unwrap_or_else(|| panic!("{what}: a completed save refused"));
                    let ok = got == expect[acked]
                        || (acked + 1 < expect.len() && got == expect[acked + 1]);
                    assert!(ok, "{what}: neither {acked} nor {} operations", acked + 1);
                    if n % 4 == 0 {
                        let done = if got == expect[acked] {
                            acked
                        } else {
                            acked + 1
                        };
                        carry_on(img.clone(), &ops, done.min(ops.len()), &what);
                        let (_, c) = recover(img, CrashPlan::AtFence(3), n);
                        if let Some(again) = c.crash_image() {
                            let probe = SimMedium::from_image(again.clone(), SimConfig::default());
                            match pmem::fof::read(&probe, record).expect("record").state() {
                                pmem::fof::FofState::Saved => assert_eq!(
                                    recover(again, CrashPlan::Never, n).0.as_ref(),
                                    Some(&got),
                                    "{what}: a crash during recovery changed the outcome"
                                ),
                                _ => assert_refused(again, &what),
                            }
                        }
                    }
                }
                // Before the open re-armed the record nothing was written (the arm is its
                // first write), so the image is the saved base.
                pmem::sim::Fate::MissedWindow if !armed => {
                    assert_eq!(acked, 0, "{what}");
                    assert_eq!(
                        recover(img, CrashPlan::Never, n).0.as_ref(),
                        Some(&expect[0])
                    );
                }
                pmem::sim::Fate::MissedWindow => {
                    missed += 1;
                    assert_refused(img, &what);
                }
            }
        }
        n += 1;
    }
    println!(
        "crash images checked: {} at {} fences (FlushOnFail: {saved} saved, {missed} \
         missed-window refused)",
        saved + missed,
        n - 1
    );
    assert!(n > OPS as u64 && saved == n - 1 && missed > 0);
}
