//! Crash consistency of the keyspace's transactions (`OP_EFFECTS`), on the persistence
//! simulator.
//!
//! A workload of transactions over lists, sets, sorted sets, hashes, strings and deadlines in 4
//! databases (single effects, multi-effect calls like RENAME, multi-call transactions like
//! MULTI/EXEC across shards, flushes and swaps; the clock moves half way, so deadlines pass)
//! runs on a store with checkpoints in the middle and a clean close at the end. It is crashed
//! before every fence it issues and at seeded random points with random eviction and tearing.
//! After each crash the store is recovered and:
//! - its structures validate;
//! - its contents equal the reference (`model::MemoryKeyspace`) after the acknowledged
//!   transactions, or after those and the one in flight, whole: never a part of one;
//! - a second crash at a random point during that recovery, and another recovery, give the
//!   same contents;
//! - the recovered store keeps working: more transactions, a checkpoint, a close and a reopen
//!   give the reference's contents.
//!
//! And a transaction whose record cannot be logged after it changed the DRAM state leaves the
//! store failed: it refuses reads and writes until reopened, and the reopened store holds the
//! state before that transaction.

mod effects;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use effects::{Dump, START, Tx};
use model::{Db, Effect, Keyspace, ModelError, Scope, Value};
use pmem::rng::SplitMix64;
use pmem::{CrashPlan, Medium, SimConfig, SimDomain, SimMedium};

const KEYS: u64 = 6;
const DBS: u8 = 4;
/// The clock moves forward by this much after transaction [`CLOCK_STEP_AFTER`].
const CLOCK_STEP_MS: i64 = 1_000;
const CLOCK_STEP_AFTER: usize = 25;
const CHECKPOINT_AFTER: [usize; 3] = [12, 30, 31];
/// Where the contents are compared: after every deadline the workload sets in the past.
const CHECK_AT: i64 = START + CLOCK_STEP_MS;

fn k(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// A MULTI/EXEC on keys of several shards and databases: three calls, eight effects.
fn multi(now: i64, i: usize) -> Tx {
    let n = |s: &str| format!("{s}{i}").into_bytes();
    Tx {
        calls: vec![
            vec![Effect::LPush {
                db: 0,
                key: k("q"),
                left: true,
                elems: vec![k("a"), k("b"), k("c")],
            }],
            vec![
                Effect::SAdd {
                    db: 1,
                    key: k("tags"),
                    members: vec![n("x"), k("y")],
                },
                Effect::ZAdd {
                    db: 2,
                    key: k("rank"),
                    members: vec![(i as f64, k("p")), (-3.0, n("q"))],
                },
                Effect::Expire {
                    db: 0,
                    key: k("q"),
                    at_ms: now + 10 * CLOCK_STEP_MS,
                },
            ],
            vec![
                Effect::LPop {
                    db: 0,
                    key: k("q"),
                    left: false,
                    count: 1,
                },
                Effect::Put {
                    db: 3,
                    key: k("s"),
                    value: Value::String(n("s")),
                    expire_at_ms: 0,
                },
                Effect::HSet {
                    db: 3,
                    key: k("h"),
                    pairs: vec![(k("f"), n("v"))],
                },
                Effect::Put {
                    db: 1,
                    key: k("short"),
                    value: Value::List(vec![k("1"), k("2")]),
                    expire_at_ms: now + CLOCK_STEP_MS / 2,
                },
            ],
        ],
        all: false,
    }
}

/// The workload: random transactions with a MULTI/EXEC every ten.
fn workload(seed: u64, n: usize) -> Vec<Tx> {
    let mut rng = SplitMix64::new(seed);
    (0..n)
        .map(|i| {
            let now = clock_for(i);
            if i % 10 == 3 {
                multi(now, i)
            } else {
                effects::tx(&mut rng, KEYS, DBS, now)
            }
        })
        .collect()
}

/// The clock while transaction `i` runs.
fn clock_for(i: usize) -> i64 {
    if i > CLOCK_STEP_AFTER {
        START + CLOCK_STEP_MS
    } else {
        START
    }
}

/// The reference's contents after each prefix of `txs`, read at [`CHECK_AT`].
fn prefixes(txs: &[Tx]) -> Vec<Dump> {
    let clock = Arc::new(AtomicI64::new(START));
    let r = effects::reference(&clock);
    let mut out = Vec::with_capacity(txs.len() + 1);
    let mut snapshot = |r: &model::MemoryKeyspace, resume: i64| {
        clock.store(CHECK_AT, Ordering::SeqCst);
        out.push(effects::dump(r));
        clock.store(resume, Ordering::SeqCst);
    };
    snapshot(&r, START);
    for (i, tx) in txs.iter().enumerate() {
        clock.store(clock_for(i), Ordering::SeqCst);
        effects::run(&r, tx).expect("the reference never fails");
        snapshot(&r, clock_for(i));
    }
    out
}

/// Run the workload until it ends or the medium crashes; returns how many transactions were
/// acknowledged.
fn drive(sim: &Arc<SimMedium>, txs: &[Tx]) -> usize {
    drive_all(sim, txs).0
}

/// [`drive`], also telling whether every call (the final close included) succeeded.
fn drive_all(sim: &Arc<SimMedium>, txs: &[Tx]) -> (usize, bool) {
    let cfg = effects::config();
    let clock = Arc::new(AtomicI64::new(START));
    let Ok(store) = effects::open(Arc::clone(sim), &cfg, &clock) else {
        return (0, false);
    };
    let mut acked = 0;
    for (i, tx) in txs.iter().enumerate() {
        clock.store(clock_for(i), Ordering::SeqCst);
        if effects::run(&store, tx).is_err() {
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

fn recover(image: Vec<u8>, plan: CrashPlan, seed: u64) -> (Option<Dump>, Arc<SimMedium>) {
    let sim = Arc::new(SimMedium::from_image(
        image,
        SimConfig {
            seed,
            crash: plan,
            evict_per_million: 100_000,
            ..SimConfig::default()
        },
    ));
    let clock = Arc::new(AtomicI64::new(CHECK_AT));
    let state = effects::open(Arc::clone(&sim), &effects::config(), &clock)
        .ok()
        .map(|s| {
            s.validate().expect("recovered structures validate");
            effects::dump(&s)
        });
    (state, sim)
}

/// After recovering the first `done` transactions: run more, checkpoint, close, reopen and
/// compare with the reference.
fn carry_on(image: Vec<u8>, txs: &[Tx], done: usize, what: &str) {
    let clock = Arc::new(AtomicI64::new(START));
    let reference = effects::reference(&clock);
    for (i, tx) in txs[..done].iter().enumerate() {
        clock.store(clock_for(i), Ordering::SeqCst);
        effects::run(&reference, tx).expect("reference");
    }
    clock.store(CHECK_AT, Ordering::SeqCst);
    let mut rng = SplitMix64::new(done as u64 ^ 0x77);
    let cfg = effects::config();
    let sim = Arc::new(SimMedium::from_image(image, SimConfig::default()));
    let s = effects::open(Arc::clone(&sim), &cfg, &clock).expect("reopen");
    for i in 0..8 {
        let tx = effects::tx(&mut rng, KEYS, DBS, CHECK_AT);
        let want = effects::run(&reference, &tx).expect("reference");
        let got = effects::run(&s, &tx).expect("a transaction after recovery");
        assert_eq!(got, want, "{what}: outcome {i} after recovery");
        if i == 4 {
            s.save().expect("checkpoint after recovery");
        }
    }
    s.close().expect("close");
    drop(s);
    let sim = Arc::new(SimMedium::from_image(
        sim.durable_image(),
        SimConfig::default(),
    ));
    let s = effects::open(sim, &cfg, &clock).expect("open after carrying on");
    s.validate().expect("structures validate after carrying on");
    assert_eq!(
        effects::dump(&s),
        effects::dump(&reference),
        "{what}: the store diverged after recovery"
    );
}

fn check(image: Vec<u8>, acked: usize, txs: &[Tx], expect: &[Dump], what: &str, seed: u64) {
    let (state, _) = recover(image.clone(), CrashPlan::Never, seed);
    let state = state.unwrap_or_else(|| panic!("{what}: recovery failed"));
    let ok = state == expect[acked] || (acked + 1 < expect.len() && state == expect[acked + 1]);
    assert!(
        ok,
        "{what}: recovered state matches neither {acked} nor {} acknowledged transactions\n got \
         {state:?}\n want {:?}",
        acked + 1,
        expect[acked]
    );
    let done = if state == expect[acked] {
        acked
    } else {
        acked + 1
    };
    carry_on(image.clone(), txs, done, what);
    // A second crash during recovery.
    let dry = Arc::new(SimMedium::from_image(image.clone(), SimConfig::default()));
    let events = {
        let clock = Arc::new(AtomicI64::new(CHECK_AT));
        let s = effects::open(Arc::clone(&dry), &effects::config(), &clock).expect("dry");
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

const TXS: usize = 45;

#[test]
fn the_workload_has_every_kind_and_partial_states_would_show() {
    let txs = workload(21, TXS);
    let expect = prefixes(&txs);
    let kinds: std::collections::BTreeSet<&str> = expect
        .iter()
        .flatten()
        .map(|(_, _, v, _)| v.kind().name())
        .collect();
    assert_eq!(kinds.len(), 5, "every kind appears: {kinds:?}");
    assert!(
        expect.iter().flatten().any(|(_, _, _, x)| *x != 0),
        "a deadline in force appears"
    );
    // Each MULTI/EXEC changes several keys: a state with only some of them differs from both
    // the state before and after.
    for i in (3..TXS).step_by(10) {
        let (before, after) = (&expect[i], &expect[i + 1]);
        let changed = after.iter().filter(|x| !before.contains(x)).count()
            + before.iter().filter(|x| !after.contains(x)).count();
        assert!(changed >= 3, "transaction {i} changes {changed} keys");
    }
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
    let base = effects::base_image(&effects::config());
    let txs = workload(21, TXS);
    let expect = prefixes(&txs);
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
        let acked = drive(&sim, &txs);
        let Some(state) = sim.crash_state() else {
            assert_eq!(acked, TXS, "an uncrashed run acknowledges everything");
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
                &txs,
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
        n > TXS as u64,
        "every transaction forces at least once ({n} fences)"
    );
}

/// In `msync`, the k-th msync fails, for k spread over the whole run (1, 2, 3, 4, 6, 9, ...
/// until the run issues fewer): the store reports an error (never success for every call), and
/// every image the power may leave afterwards recovers with every acknowledged transaction.
#[test]
fn a_failed_msync_is_reported_and_loses_no_acknowledged_transaction() {
    let base = effects::base_image(&effects::config());
    let txs = workload(21, TXS);
    let expect = prefixes(&txs);
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
        let (acked, all_ok) = drive_all(&sim, &txs);
        // After a failed msync every fence fails: that tells whether the k-th came.
        if sim.fence().is_ok() {
            assert!(all_ok && acked == TXS, "no msync failed, yet an error");
            break;
        }
        fired += 1;
        assert!(
            !all_ok,
            "msync {k} failed, yet every transaction and the close reported success"
        );
        for img in sim.power_fail_state().images() {
            images += 1;
            check(
                img,
                acked,
                &txs,
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
    random_points(SimConfig::default(), 4, 40);
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
            40,
        );
    }
}

/// `rounds` workloads, each crashed at `per_round` seeded random events (with seeded eviction)
/// in the domain of `sim_cfg`.
fn random_points(sim_cfg: SimConfig, rounds: u64, per_round: usize) {
    let base = effects::base_image(&effects::config());
    let mut rng = SplitMix64::new(0x5eed_4b53 ^ sim_cfg.seed);
    let mut images = 0u64;
    for round in 0..rounds {
        let txs = workload(500 + round, TXS);
        let expect = prefixes(&txs);
        let dry = Arc::new(SimMedium::from_image(base.clone(), sim_cfg));
        assert_eq!(drive(&dry, &txs), TXS);
        let events = dry.events();
        for _ in 0..per_round {
            let seed = rng.next_u64();
            let sim = Arc::new(SimMedium::from_image(
                base.clone(),
                sim_cfg.at_random_event(seed, events),
            ));
            let acked = drive(&sim, &txs);
            let img = sim.crash_image().unwrap_or_else(|| sim.power_fail());
            images += 1;
            check(
                img,
                acked,
                &txs,
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

/// The medium fails (the simulator cuts power) while a transaction's record is being forced,
/// after the transaction changed the DRAM state: the engine latches failed, and everything is
/// refused until the store is reopened, which recovers the state before that transaction.
#[test]
fn a_record_that_cannot_be_logged_fails_the_store() {
    let cfg = effects::config();
    let base = effects::base_image(&cfg);
    let put = |key: &str, db: Db| Effect::Put {
        db,
        key: k(key),
        value: Value::Set(vec![k("m")]),
        expire_at_ms: 0,
    };
    // Count the fences of opening and of one transaction.
    let dry = Arc::new(SimMedium::from_image(base.clone(), SimConfig::default()));
    let clock = Arc::new(AtomicI64::new(START));
    let s = effects::open(Arc::clone(&dry), &cfg, &clock).expect("open");
    let opened = dry.fences();
    s.transact(Scope::All, true, &mut |t| t.apply(vec![put("a", 0)]))
        .expect("first");
    let per_tx = dry.fences() - opened;
    assert!(per_tx >= 1);
    drop(s);
    // Crash at the first fence of the second transaction.
    let sim = Arc::new(SimMedium::from_image(
        base,
        SimConfig {
            seed: 1,
            crash: CrashPlan::AtFence(opened + per_tx + 1),
            evict_per_million: 0,
            ..SimConfig::default()
        },
    ));
    let s = effects::open(Arc::clone(&sim), &cfg, &clock).expect("open");
    s.transact(Scope::All, true, &mut |t| t.apply(vec![put("a", 0)]))
        .expect("first");
    let mut seen_inside = false;
    let r = s.transact(Scope::All, true, &mut |t| {
        t.apply(vec![put("b", 1), Effect::Del { db: 0, key: k("a") }])?;
        seen_inside = t.kind(1, b"b").is_some() && t.kind(0, b"a").is_none();
        Ok(())
    });
    assert!(seen_inside, "the transaction saw its own writes");
    assert!(matches!(r, Err(ModelError::Failed(_))), "{r:?}");
    assert!(sim.crashed());
    // Everything is refused now: the DRAM state is ahead of the log.
    let r = s.transact(Scope::All, false, &mut |_| Ok(()));
    assert!(matches!(r, Err(ModelError::Failed(_))), "a read: {r:?}");
    assert!(Keyspace::dbsize(&s, 0).is_err(), "DBSIZE");
    assert!(s.get(b"a").is_err(), "the old interface");
    assert!(Keyspace::scan(&s, 0, 0, 10).is_err(), "SCAN");
    drop(s);
    // Reopened: the state before the failed transaction.
    let (state, _) = recover(sim.crash_image().expect("crashed"), CrashPlan::Never, 1);
    let state = state.expect("recovers");
    assert_eq!(
        state,
        vec![(0, k("a"), Value::Set(vec![k("m")]), 0)],
        "the failed transaction is not in the recovered state"
    );
}
