//! DIPPER under power failures in every domain of the persistence simulator (`adr`, `eadr`,
//! `msync` with 512 B and 4 KiB sectors), with a toy machine: each shard keeps a counter in
//! arena user word 0; an operation adds a `u64` to the counters of some shards.
//!
//! A sequence of operations (through `execute` and through `apply_then_log`, on one shard,
//! several or all), with two checkpoints and a clean close, is crashed before every fence (every
//! crash image of each point) and at seeded random points, and, in `msync`, run with its k-th
//! msync failing for k spread over the run. After each crash the engine is reopened and its
//! counters must be those after the acknowledged operations, or after those and the one in
//! flight; after a failed msync the engine must have reported an error.
//!
//! In `FlushOnFail` each crash point has two fates: a completed save (every store kept; the
//! test adds the save's marker) reopens through `dipper::fof::open` with every acknowledged
//! operation, and a missed window is refused with the typed error and left unchanged (the
//! test also counts the images an ordinary open would have shown inconsistent).

use std::sync::Arc;

use dipper::arena::Arena;
use dipper::{Dipper, DipperError, Layout, Machine, Options, Result};
use pmem::rng::SplitMix64;
use pmem::sim::Fate;
use pmem::{CrashPlan, Domain, Medium, OpenOptions, Pool, SimConfig, SimDomain, SimMedium};

#[derive(Debug, Clone)]
struct Counter;

impl Machine for Counter {
    type Output = ();

    fn init(&self, _shard: usize, _arena: &mut Arena) -> Result<()> {
        Ok(())
    }

    fn apply(&self, _shard: usize, arena: &mut Arena, op: &[u8], _out: &mut ()) -> Result<()> {
        let delta = u64::from_le_bytes(op.try_into().map_err(|_| DipperError::Corrupt {
            structure: "counter op",
            offset: 0,
            field: "length",
            expected: "8".into(),
            found: op.len().to_string(),
        })?);
        arena.set_user(0, arena.user(0).wrapping_add(delta));
        Ok(())
    }
}

type Engine = Dipper<Arc<SimMedium>, Counter>;

const SHARDS: usize = 4;
const OPS: usize = 24;
const CHECKPOINT_AFTER: [usize; 2] = [8, 16];

fn options() -> Options {
    Options {
        background: false,
        ..Options::default()
    }
}

/// A closed, empty engine, as an image.
fn base_image() -> Vec<u8> {
    let sim = Arc::new(SimMedium::new(4 << 20, SimConfig::default()));
    let m = Pool::format(Arc::clone(&sim), Domain::Sim).expect("format");
    let pool = Pool::open_medium(m, &OpenOptions::default()).expect("open");
    let layout = Layout {
        log_bytes: 32 * 1024,
        slot_bytes: 1 << 20,
        shards: SHARDS,
        machine: 0,
    };
    let (engine, _) = Dipper::create(pool, &layout, Counter, options()).expect("create");
    engine.close().expect("close");
    drop(engine);
    sim.durable_image()
}

/// A closed, empty engine in a pool with an armed flush-on-fail record, as an image.
fn fof_base_image() -> Vec<u8> {
    let sim = Arc::new(SimMedium::new(4 << 20, SimConfig::default()));
    let m = Pool::format(Arc::clone(&sim), Domain::Sim).expect("format");
    let mut pool = Pool::open_medium(m, &OpenOptions::default()).expect("open");
    let record = pmem::fof::pool_record(&mut pool).expect("record region");
    let layout = Layout {
        log_bytes: 32 * 1024,
        slot_bytes: 1 << 20,
        shards: SHARDS,
        machine: 0,
    };
    let (engine, _) = Dipper::create(pool, &layout, Counter, options()).expect("create");
    engine.close().expect("close");
    drop(engine);
    pmem::fof::arm(&*sim, record).expect("arm");
    sim.durable_image()
}

fn base_for(cfg: &SimConfig) -> Vec<u8> {
    if cfg.domain == SimDomain::FlushOnFail {
        fof_base_image()
    } else {
        base_image()
    }
}

/// Operation `i`: the shards it touches (`None`: all) and what it adds.
fn op(i: usize) -> (Option<Vec<u16>>, u64) {
    let ids = match i % 4 {
        0 => None,
        1 => Some(vec![(i % SHARDS) as u16]),
        2 => Some(vec![0, 2]),
        _ => Some(vec![1, 2, 3]),
    };
    (ids, 1 + i as u64 * 3)
}

/// The counters after each prefix of the operations.
fn prefixes() -> Vec<Vec<u64>> {
    let mut c = vec![0u64; SHARDS];
    let mut out = vec![c.clone()];
    for i in 0..OPS {
        let (ids, delta) = op(i);
        match ids {
            None => c.iter_mut().for_each(|x| *x += delta),
            Some(ids) => ids.iter().for_each(|&s| c[s as usize] += delta),
        }
        out.push(c.clone());
    }
    out
}

fn run_op(e: &Engine, i: usize) -> Result<()> {
    let (ids, delta) = op(i);
    if i % 2 == 0 {
        e.execute(ids.as_deref(), &delta.to_le_bytes(), false)
    } else {
        e.apply_then_log(ids.as_deref(), |locked| {
            for k in 0..locked.ids().len() {
                let a = locked.arena_mut(k);
                a.set_user(0, a.user(0) + delta);
            }
            ((), Some((ids.clone(), delta.to_le_bytes().to_vec())))
        })
    }
}

/// Run the operations until they end or a call fails: (operations acknowledged, every call
/// including the checkpoints and the close succeeded).
fn drive(sim: &Arc<SimMedium>) -> (usize, bool) {
    let opened = if sim.crash_state().is_none() && is_fof(sim) {
        // The run starts from an armed record over a clean close: open it as a saved one
        // would (the same ordinary recovery); the engine then runs in flush on fail.
        Pool::open_medium(Arc::clone(sim), &OpenOptions::default())
            .map_err(DipperError::from)
            .and_then(|pool| Dipper::open(pool, Counter, options()).map(|(e, _)| e))
    } else {
        Pool::open_medium(Arc::clone(sim), &OpenOptions::default())
            .map_err(DipperError::from)
            .and_then(|pool| Dipper::open(pool, Counter, options()).map(|(e, _)| e))
    };
    let Ok(e) = opened else {
        return (0, false);
    };
    let mut acked = 0;
    for i in 0..OPS {
        if run_op(&e, i).is_err() {
            return (acked, false);
        }
        acked += 1;
        if CHECKPOINT_AFTER.contains(&acked) && e.checkpoint().is_err() {
            return (acked, false);
        }
    }
    let closed = e.close().is_ok();
    (acked, closed)
}

/// Reopen `image` with `opts` and read the counters it recovers.
fn recovered(image: Vec<u8>, opts: Options, what: &str) -> Vec<u64> {
    let sim = Arc::new(SimMedium::from_image(image, SimConfig::default()));
    let pool = Pool::open_medium(sim, &OpenOptions::default())
        .unwrap_or_else(|e| panic!("{what}: the pool does not open: {e}"));
    let (e, _) = Dipper::open(pool, Counter, opts)
        .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
    (0..SHARDS)
        .map(|s| e.read(s, |a| a.user(0)).expect("read"))
        .collect()
}

/// Reopen `image` and check its counters against the acknowledged prefix.
fn check(image: Vec<u8>, acked: usize, expect: &[Vec<u64>], what: &str) {
    let got = recovered(image, options(), what);
    let ok = got == expect[acked] || (acked < OPS && got == expect[acked + 1]);
    assert!(
        ok,
        "{what}: counters {got:?} are neither after {acked} operations {:?} nor after one more",
        expect[acked]
    );
}

/// Whether the pool on `sim` has a flush-on-fail record (region `fof`).
fn is_fof(sim: &Arc<SimMedium>) -> bool {
    Pool::open_medium(
        Arc::new(pmem::fof::Scratch::new(Arc::clone(sim))),
        &OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        },
    )
    .is_ok_and(|p| p.region(pmem::fof::REGION_NAME).is_some())
}

/// The flush-on-fail record of the pool in `image`.
fn record_of(image: &[u8]) -> usize {
    let sim = Arc::new(SimMedium::from_image(image.to_vec(), SimConfig::default()));
    let pool = Pool::open_medium(
        Arc::new(pmem::fof::Scratch::new(sim)),
        &OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        },
    )
    .expect("pool");
    pool.region(pmem::fof::REGION_NAME)
        .expect("fof region")
        .offset as usize
}

/// A completed save of flush on fail: every store kept, then the save's marker: the store
/// opens (ordinary recovery over a whole image) with every acknowledged operation.
fn check_saved(image: Vec<u8>, acked: usize, expect: &[Vec<u64>], what: &str) {
    let record = record_of(&image);
    let image = pmem::fof::with_saved_marker(image, record, &[]).expect("marker");
    let sim = Arc::new(SimMedium::from_image(image, SimConfig::default()));
    let (e, _, how) = dipper::fof::open(Arc::clone(&sim), Counter, options())
        .unwrap_or_else(|e| panic!("{what}: a completed save does not reopen: {e}"));
    assert_eq!(how, dipper::fof::FofOpened::Saved, "{what}");
    let got: Vec<u64> = (0..SHARDS)
        .map(|s| e.read(s, |a| a.user(0)).expect("read"))
        .collect();
    let ok = got == expect[acked] || (acked < OPS && got == expect[acked + 1]);
    assert!(
        ok,
        "{what}: counters {got:?} are neither after {acked} operations {:?} nor after one more",
        expect[acked]
    );
    let durable = SimMedium::from_image(sim.durable_image(), SimConfig::default());
    assert_eq!(
        pmem::fof::read(&durable, record).expect("record").state(),
        pmem::fof::FofState::Armed,
        "{what}: not armed again after the open"
    );
}

/// A missed window of flush on fail: the open is refused with the typed error, nothing
/// written. Returns whether an ordinary open (no record consulted) would have shown counters
/// of no prefix of the operations: why the refusal.
fn check_missed(image: Vec<u8>, acked: usize, expect: &[Vec<u64>], what: &str) -> bool {
    let sim = Arc::new(SimMedium::from_image(image.clone(), SimConfig::default()));
    match dipper::fof::open(Arc::clone(&sim), Counter, options()) {
        Ok(_) => panic!("{what}: a missed window opened"),
        Err(DipperError::Corrupt {
            structure, field, ..
        }) => assert_eq!(
            (structure, field),
            ("flush-on-fail record", "state"),
            "{what}"
        ),
        Err(e) => panic!("{what}: refused with an unexpected error: {e}"),
    }
    assert!(
        sim.durable_image() == image,
        "{what}: the refused open wrote"
    );
    let plain = Arc::new(SimMedium::from_image(image, SimConfig::default()));
    Pool::open_medium(plain, &OpenOptions::default())
        .map_err(DipperError::from)
        .and_then(|pool| Dipper::open(pool, Counter, options()))
        .is_ok_and(|(e, _)| {
            let got: Vec<u64> = (0..SHARDS)
                .map(|s| e.read(s, |a| a.user(0)).expect("read"))
                .collect();
            !expect[..=(acked + 1).min(OPS)].contains(&got)
        })
}

fn configs() -> [SimConfig; 5] {
    let d = |domain, sector| SimConfig {
        domain,
        sector,
        ..SimConfig::default()
    };
    [
        d(SimDomain::Adr, 512),
        d(SimDomain::Eadr, 512),
        d(SimDomain::Msync, 512),
        d(SimDomain::Msync, 4096),
        d(SimDomain::FlushOnFail, 512),
    ]
}

#[test]
fn crashed_before_every_fence_in_every_domain_recovers_the_acknowledged_operations() {
    let expect = prefixes();
    assert!(
        expect.windows(2).all(|w| w[0] != w[1]),
        "every operation shows"
    );
    for cfg in configs() {
        let base = base_for(&cfg);
        let (mut images, mut saved, mut refused, mut inconsistent) = (0u64, 0u64, 0u64, 0u64);
        let mut n = 1;
        loop {
            let sim = crashing_at_fence(&base, cfg, n);
            let (acked, all_ok) = drive(&sim);
            let Some(state) = sim.crash_state() else {
                assert!(all_ok && acked == OPS, "an uncrashed run succeeds");
                break;
            };
            for (i, (fate, img)) in state.fates().into_iter().enumerate() {
                images += 1;
                let what = format!("{:?} fence {n} {fate:?} image {i}", cfg.domain);
                match fate {
                    // A completed save (flush on fail) keeps every store: as any other domain.
                    Fate::Saved => {
                        saved += 1;
                        check_saved(img, acked, &expect, &what)
                    }
                    Fate::MissedWindow if cfg.domain == SimDomain::FlushOnFail => {
                        refused += 1;
                        if check_missed(img, acked, &expect, &what) {
                            inconsistent += 1;
                        }
                    }
                    Fate::MissedWindow => check(img, acked, &expect, &what),
                }
            }
            n += 1;
        }
        assert!(n > OPS as u64, "every operation forces ({n} fences)");
        if cfg.domain == SimDomain::FlushOnFail {
            assert!(saved == n - 1, "one completed-save image per fence");
            assert!(
                inconsistent > 0,
                "no missed-window image would have opened inconsistent: is the refusal needed?"
            );
        }
        if cfg.domain == SimDomain::FlushOnFail {
            println!(
                "crash images checked: {images} at {} fences ({:?}: {saved} saved, {refused} \
                 missed-window refused, of which an ordinary open would show no prefix in \
                 {inconsistent})",
                n - 1,
                cfg.domain
            );
        } else {
            println!(
                "crash images checked: {images} at {} fences ({:?})",
                n - 1,
                cfg.domain
            );
        }
    }
}

/// A copy of `base` in the domain of `cfg` that loses power at its `n`-th fence.
fn crashing_at_fence(base: &[u8], cfg: SimConfig, n: u64) -> Arc<SimMedium> {
    Arc::new(SimMedium::from_image(
        base.to_vec(),
        SimConfig {
            seed: n ^ cfg.sector as u64,
            crash: CrashPlan::AtFence(n),
            ..cfg
        },
    ))
}

/// Crashes per domain at seeded random points.
const RANDOM_CRASHES: usize = 150;

/// Run `each` on [`RANDOM_CRASHES`] copies of `base`, each set to lose power at a random one of
/// the `events` a full run issues (seeds drawn from `salt` and the sector size), with its seed.
fn at_random_points(
    cfg: SimConfig,
    base: &[u8],
    events: u64,
    salt: u64,
    mut each: impl FnMut(Arc<SimMedium>, u64),
) {
    let mut rng = SplitMix64::new(salt ^ cfg.sector as u64);
    for _ in 0..RANDOM_CRASHES {
        let seed = rng.next_u64();
        each(
            Arc::new(SimMedium::from_image(
                base.to_vec(),
                cfg.at_random_event(seed, events),
            )),
            seed,
        );
    }
}

#[test]
fn crashed_at_random_points_in_every_domain_recovers_the_acknowledged_operations() {
    let expect = prefixes();
    for cfg in configs() {
        let base = base_for(&cfg);
        let dry = Arc::new(SimMedium::from_image(base.clone(), cfg));
        assert_eq!(drive(&dry), (OPS, true));
        let count = RANDOM_CRASHES;
        let mut outcomes = std::collections::BTreeSet::new();
        at_random_points(cfg, &base, dry.events(), 0xd1ff, |sim, seed| {
            let (acked, _) = drive(&sim);
            outcomes.insert(acked);
            let state = sim.power_fail_state();
            let what = format!("{:?} random crash seed {seed:#x}", cfg.domain);
            if let Some(saved) = state.saved() {
                check_saved(saved.to_vec(), acked, &expect, &format!("{what} Saved"));
                check_missed(state.sampled().to_vec(), acked, &expect, &what);
            } else {
                check(state.sampled().to_vec(), acked, &expect, &what);
            }
        });
        assert!(
            outcomes.len() > 5,
            "{:?}: the random crashes land in few places: {outcomes:?}",
            cfg.domain
        );
        println!(
            "crash images checked: {count} at random points ({:?})",
            cfg.domain
        );
    }
}

/// The k-th msync fails, for k = 1, 2, 3, 4, 6, 9, ... until the run issues fewer: the engine
/// reports an error (an operation, a checkpoint or the close), and every image the power may
/// leave afterwards recovers every acknowledged operation.
#[test]
fn a_failed_msync_is_reported_and_loses_no_acknowledged_operation() {
    let base = base_image();
    let expect = prefixes();
    let (mut k, mut fired, mut images) = (1u64, 0, 0u64);
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
        let (acked, all_ok) = drive(&sim);
        // After a failed msync every fence fails: that tells whether the k-th came.
        if sim.fence().is_ok() {
            assert!(all_ok && acked == OPS, "no msync failed, yet an error");
            break;
        }
        fired += 1;
        assert!(
            !all_ok,
            "msync {k} failed, yet every operation, checkpoint and the close succeeded"
        );
        for (i, img) in sim.power_fail_state().images().into_iter().enumerate() {
            images += 1;
            let what = format!("msync {k} failed ({sector} B sectors), image {i}");
            check(img, acked, &expect, &what);
        }
        k = k * 3 / 2 + 1;
    }
    assert!(fired >= 8, "only {fired} msyncs to fail");
    println!("crash images checked: {images} after failed msyncs (Msync)");
}

// ---------------------------------------------------------------------------------------------
// Group commit at the caller (`ForcePolicy::Caller`): the operations only append, and
// `Dipper::sync` forces every third one (and before each checkpoint and the close), as
// `kavach serve` forces once per pass of a worker. An operation counts as acknowledged once a
// sync after it returned. After a crash the counters must be those after some prefix of the
// operations that includes every acknowledged one and none that had not started. Flush on
// fail keeps records in the cache by design and is covered by the `Sync` tests above.
// ---------------------------------------------------------------------------------------------

/// Operations per sync in the caller-forced runs.
const SYNC_EVERY: usize = 3;

fn caller_options() -> Options {
    // No periodic flush runs under `Caller`: every force in these runs is the test's own.
    Options {
        policy: dipper::ForcePolicy::Caller,
        ..options()
    }
}

/// Run the operations with `Caller` forcing: (acknowledged, started, every call succeeded).
fn drive_caller(sim: &Arc<SimMedium>) -> (usize, usize, bool) {
    let Ok(e) = Pool::open_medium(Arc::clone(sim), &OpenOptions::default())
        .map_err(DipperError::from)
        .and_then(|pool| Dipper::open(pool, Counter, caller_options()).map(|(e, _)| e))
    else {
        return (0, 0, false);
    };
    let mut acked = 0;
    for i in 0..OPS {
        if run_op(&e, i).is_err() {
            return (acked, i + 1, false);
        }
        let done = i + 1;
        let checkpoint = CHECKPOINT_AFTER.contains(&done);
        if done % SYNC_EVERY == 0 || checkpoint || done == OPS {
            if e.sync().is_err() {
                return (acked, done, false);
            }
            acked = done;
        }
        if checkpoint && e.checkpoint().is_err() {
            return (acked, done, false);
        }
    }
    let closed = e.close().is_ok();
    (acked, OPS, closed)
}

/// Reopen `image` (with `Caller` forcing) and check that its counters are those after some
/// prefix of `acked..=started` operations.
fn check_caller(image: Vec<u8>, acked: usize, started: usize, expect: &[Vec<u64>], what: &str) {
    let got = recovered(image, caller_options(), what);
    assert!(
        expect[acked..=started].contains(&got),
        "{what}: counters {got:?} are after no prefix of {acked} to {started} operations"
    );
}

fn caller_configs() -> [SimConfig; 4] {
    let all = configs();
    [all[0], all[1], all[2], all[3]]
}

#[test]
fn caller_forced_operations_survive_a_crash_before_every_fence_in_every_domain() {
    let expect = prefixes();
    for cfg in caller_configs() {
        let base = base_for(&cfg);
        // The batches share forces: fewer fences than with a force per operation.
        let sync_fences = {
            let sim = Arc::new(SimMedium::from_image(base.clone(), cfg));
            assert_eq!(drive(&sim), (OPS, true));
            sim.fences()
        };
        let dry = Arc::new(SimMedium::from_image(base.clone(), cfg));
        assert_eq!(drive_caller(&dry), (OPS, OPS, true));
        assert!(
            dry.fences() < sync_fences,
            "{:?}: {} fences with the caller's syncs, {sync_fences} forcing every operation",
            cfg.domain,
            dry.fences()
        );
        let (mut images, mut n, mut lost) = (0u64, 1, 0u64);
        loop {
            let sim = crashing_at_fence(&base, cfg, n);
            let (acked, started, all_ok) = drive_caller(&sim);
            let Some(state) = sim.crash_state() else {
                assert!(all_ok && acked == OPS, "an uncrashed run succeeds");
                break;
            };
            if started > acked {
                lost += 1;
            }
            for (i, img) in state.images().into_iter().enumerate() {
                images += 1;
                let what = format!("{:?} caller fence {n} image {i}", cfg.domain);
                check_caller(img, acked, started, &expect, &what);
            }
            n += 1;
        }
        assert!(lost > 0, "{:?}: no crash fell inside a batch", cfg.domain);
        println!(
            "crash images checked: {images} at {} fences ({:?}, caller forcing; {} with a \
             force per operation)",
            n - 1,
            cfg.domain,
            sync_fences
        );
    }
}

#[test]
fn caller_forced_operations_survive_a_crash_at_random_points_in_every_domain() {
    let expect = prefixes();
    for cfg in caller_configs() {
        let base = base_for(&cfg);
        let dry = Arc::new(SimMedium::from_image(base.clone(), cfg));
        assert_eq!(drive_caller(&dry), (OPS, OPS, true));
        let mut outcomes = std::collections::BTreeSet::new();
        at_random_points(cfg, &base, dry.events(), 0xca11, |sim, seed| {
            let (acked, started, _) = drive_caller(&sim);
            outcomes.insert(acked);
            let what = format!("{:?} caller random crash seed {seed:#x}", cfg.domain);
            check_caller(
                sim.power_fail_state().sampled().to_vec(),
                acked,
                started,
                &expect,
                &what,
            );
        });
        assert!(
            outcomes.len() > 4,
            "{:?}: the random crashes land in few places: {outcomes:?}",
            cfg.domain
        );
    }
}
