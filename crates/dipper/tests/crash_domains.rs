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

use std::sync::Arc;

use dipper::arena::Arena;
use dipper::{Dipper, DipperError, Layout, Machine, Options, Result};
use pmem::rng::SplitMix64;
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
    };
    let (engine, _) = Dipper::create(pool, &layout, Counter, options()).expect("create");
    engine.close().expect("close");
    drop(engine);
    sim.durable_image()
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
    let Ok(pool) = Pool::open_medium(Arc::clone(sim), &OpenOptions::default()) else {
        return (0, false);
    };
    let Ok((e, _)) = Dipper::open(pool, Counter, options()) else {
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

/// Reopen `image` and check its counters against the acknowledged prefix.
fn check(image: Vec<u8>, acked: usize, expect: &[Vec<u64>], what: &str) {
    let sim = Arc::new(SimMedium::from_image(image, SimConfig::default()));
    let pool = Pool::open_medium(sim, &OpenOptions::default())
        .unwrap_or_else(|e| panic!("{what}: the pool does not open: {e}"));
    let (e, _) = Dipper::open(pool, Counter, options())
        .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
    let got: Vec<u64> = (0..SHARDS)
        .map(|s| e.read(s, |a| a.user(0)).expect("read"))
        .collect();
    let ok = got == expect[acked] || (acked < OPS && got == expect[acked + 1]);
    assert!(
        ok,
        "{what}: counters {got:?} are neither after {acked} operations {:?} nor after one more",
        expect[acked]
    );
}

fn configs() -> [SimConfig; 4] {
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
    ]
}

#[test]
fn crashed_before_every_fence_in_every_domain_recovers_the_acknowledged_operations() {
    let base = base_image();
    let expect = prefixes();
    assert!(
        expect.windows(2).all(|w| w[0] != w[1]),
        "every operation shows"
    );
    for cfg in configs() {
        let mut images = 0u64;
        let mut n = 1;
        loop {
            let sim = Arc::new(SimMedium::from_image(
                base.clone(),
                SimConfig {
                    seed: n ^ cfg.sector as u64,
                    crash: CrashPlan::AtFence(n),
                    ..cfg
                },
            ));
            let (acked, all_ok) = drive(&sim);
            let Some(state) = sim.crash_state() else {
                assert!(all_ok && acked == OPS, "an uncrashed run succeeds");
                break;
            };
            for (i, img) in state.images().into_iter().enumerate() {
                images += 1;
                let what = format!("{:?} fence {n} image {i}", cfg.domain);
                check(img, acked, &expect, &what);
            }
            n += 1;
        }
        assert!(n > OPS as u64, "every operation forces ({n} fences)");
        println!(
            "crash images checked: {images} at {} fences ({:?})",
            n - 1,
            cfg.domain
        );
    }
}

#[test]
fn crashed_at_random_points_in_every_domain_recovers_the_acknowledged_operations() {
    let base = base_image();
    let expect = prefixes();
    for cfg in configs() {
        let dry = Arc::new(SimMedium::from_image(base.clone(), cfg));
        assert_eq!(drive(&dry), (OPS, true));
        let events = dry.events();
        let mut rng = SplitMix64::new(0xd1ff ^ cfg.sector as u64);
        let count = 150;
        let mut outcomes = std::collections::BTreeSet::new();
        for _ in 0..count {
            let seed = rng.next_u64();
            let sim = Arc::new(SimMedium::from_image(
                base.clone(),
                cfg.at_random_event(seed, events),
            ));
            let (acked, _) = drive(&sim);
            outcomes.insert(acked);
            let img = sim.crash_image().unwrap_or_else(|| sim.power_fail());
            let what = format!("{:?} random crash seed {seed:#x}", cfg.domain);
            check(img, acked, &expect, &what);
        }
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
