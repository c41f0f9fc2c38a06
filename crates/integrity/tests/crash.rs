//! Crash consistency of the redundancy on the persistence simulator.
//!
//! A session (open, writes through the API, update passes, a mode switch, a clean close) is
//! crashed before every fence it issues and at 1,000 seeded random points in all (split between the campaigns) with random eviction
//! and tearing. After each crash the region is reopened, which runs recovery (a resync after an
//! unclean shutdown), and then:
//!
//! - no page that counts as clean has a stale checksum: every page checksum, checksum block,
//!   parity page and parity checksum equals what an independent computation over the recovered
//!   data gives (`support::expected_redundancy`), and a scrub finds nothing;
//! - in eager mode, reading every byte verifies every line without a single repair (line
//!   checksums are current too);
//! - a second crash at a random point during that recovery, followed by another recovery,
//!   satisfies the same;
//! - the reserved page (where earlier versions kept a shadow batch record) is still zero: no
//!   pass, write or recovery writes it.
//!
//! `tests/close_crash.rs` crashes the clean close itself, with every line outcome that matters.

mod support;

use integrity::{Mode, OpenOptions};
use pmem::rng::SplitMix64;
use pmem::{CrashPlan, Medium, SimConfig, SimMedium};
use std::sync::Arc;
use support::*;

const PAGES: u64 = 48;

fn run(sim: Arc<SimMedium>, mode: Mode, seed: u64) -> integrity::Result<()> {
    let (pool, prot, _) = open(
        sim,
        OpenOptions {
            mode: Some(mode),
            ..Default::default()
        },
    )?;
    let mut rng = SplitMix64::new(seed);
    for round in 0..3 {
        for _ in 0..6 {
            let len = [8usize, 64, 200, 4096][rng.below(4) as usize];
            let at = rng.below(PAGES * PAGE as u64 - len as u64);
            let mut b = vec![0u8; len];
            fill(&mut rng, &mut b);
            prot.write(at, &b)?;
        }
        if round < 2 {
            prot.run_pass()?;
        }
    }
    prot.close()?;
    pool.close()?;
    Ok(())
}

/// Reopen `image` (recovery) and check the invariants; `mode` is the mode to reopen in.
fn check(image: Vec<u8>, mode: Mode, what: &str) {
    let sim = sim_of(image);
    let (pool, prot, report) = open_mode(sim, mode);
    let meta = pool.region("data.integrity").unwrap().offset as usize;
    let mut reserved = vec![0u8; PAGE];
    pool.medium().read(meta + RETIRED_AT, &mut reserved);
    assert!(
        reserved.iter().all(|&b| b == 0),
        "{what}: the reserved page was written"
    );
    assert!(
        redundancy_is_current(&pool, &prot),
        "{what}: stale redundancy after recovery ({report:?})"
    );
    let scrub = prot.scrub(&mut |_, _| {}).unwrap();
    assert!(scrub.findings.is_empty(), "{what}: {:?}", scrub.findings);
    if mode == Mode::Eager {
        let mut b = vec![0u8; PAGES as usize * PAGE];
        prot.read(0, &mut b).unwrap();
        assert_eq!(
            prot.stats().repairs_on_read,
            0,
            "{what}: line checksums stale"
        );
        assert!(prot.findings().is_empty(), "{what}: {:?}", prot.findings());
    }
}

/// Crash during recovery of `image` at a random point, recover again, check.
fn check_second_crash(image: Vec<u8>, mode: Mode, seed: u64, what: &str) {
    let mut rng = SplitMix64::new(seed);
    let dry = Arc::new(SimMedium::from_image(image.clone(), SimConfig::default()));
    let _ = open_mode(dry.clone(), mode);
    let events = dry.events().max(1);
    let sim = Arc::new(SimMedium::from_image(
        image,
        SimConfig {
            seed,
            crash: CrashPlan::AtEvent(1 + rng.below(events)),
            evict_per_million: 100_000,
            ..SimConfig::default()
        },
    ));
    let _ = open(
        sim.clone(),
        OpenOptions {
            mode: Some(mode),
            ..Default::default()
        },
    );
    let img = sim.crash_image().unwrap_or_else(|| sim.power_fail());
    check(img, mode, &format!("{what}, second crash {seed}"));
}

/// Run `op` from `image` once per fence, crashing just before fence 1, 2, 3, ...; hands every
/// crash image of each fence to `check`. Returns the number of crash points.
fn every_fence(
    image: &[u8],
    seed: u64,
    op: impl Fn(Arc<SimMedium>),
    mut check: impl FnMut(Vec<u8>, u64),
) -> u64 {
    for n in 1.. {
        let sim = Arc::new(SimMedium::from_image(
            image.to_vec(),
            SimConfig {
                seed: seed ^ n,
                crash: CrashPlan::AtFence(n),
                evict_per_million: 0,
                ..SimConfig::default()
            },
        ));
        op(sim.clone());
        match sim.crash_state() {
            Some(state) => {
                for img in state.images() {
                    check(img, n);
                }
            }
            None => return n - 1,
        }
    }
    unreachable!("the loop returns")
}

/// Run `op` from `image` `count` times, crashing at a seeded event with seeded eviction.
fn random_points(
    image: &[u8],
    seed: u64,
    count: u64,
    op: impl Fn(Arc<SimMedium>),
    mut check: impl FnMut(Vec<u8>, u64),
) {
    let dry = Arc::new(SimMedium::from_image(image.to_vec(), SimConfig::default()));
    op(dry.clone());
    let events = dry.events().max(1);
    let mut rng = SplitMix64::new(seed);
    for _ in 0..count {
        let run_seed = rng.next_u64();
        let sim = Arc::new(SimMedium::from_image(
            image.to_vec(),
            SimConfig::default().at_random_event(run_seed, events),
        ));
        op(sim.clone());
        let img = sim.crash_image().unwrap_or_else(|| sim.power_fail());
        check(img, run_seed);
    }
}

/// Crash a session that starts from a region created in `start` mode and runs in `session`
/// mode; recover in `reopen` mode. `random` random points besides every fence.
fn campaign(start: Mode, session: Mode, reopen: Mode, seed: u64, random: u64) {
    let base = image(PAGES, 4, start, seed);
    let mut images = 0u64;
    let n = every_fence(
        &base,
        seed,
        |sim| {
            let _ = run(sim, session, seed);
        },
        |img, fence| {
            let what = format!("{session:?} session, crash at fence {fence}");
            check(img.clone(), reopen, &what);
            images += 1;
            if fence % 5 == 0 {
                check_second_crash(img, reopen, seed ^ fence, &what);
                images += 1;
            }
        },
    );
    assert!(n > 20, "the session issues fences ({n})");
    random_points(
        &base,
        seed.wrapping_mul(31),
        random,
        |sim| {
            let _ = run(sim, session, seed);
        },
        |img, s| {
            let what = format!("{session:?} session, random crash {s:#x}");
            check(img.clone(), reopen, &what);
            images += 1;
            if s % 4 == 0 {
                check_second_crash(img, reopen, s, &what);
                images += 1;
            }
        },
    );
    println!(
        "{start:?} region, {session:?} session, reopened {reopen:?}: crash images checked: \
         {images} at {n} fences and {random} random points (Adr)"
    );
}

/// An update pass makes a dirty batch's redundancy durable with one fence, and nothing more:
/// no shadow record is persisted before and cleared after (earlier versions issued two more
/// persists per dirty batch, which no recovery needed).
#[test]
fn an_update_pass_fences_once_per_dirty_batch() {
    let sim = sim_of(image(PAGES, 4, Mode::Lazy, 5));
    let (_pool, prot, _) = open_mode(sim.clone(), Mode::Lazy);
    for (writes, seed) in [(1u64, 1u64), (7, 2), (0, 3)] {
        let mut rng = SplitMix64::new(seed);
        for _ in 0..writes {
            let at = rng.below(PAGES * PAGE as u64 - 100);
            prot.write(at, &[seed as u8; 100]).unwrap();
        }
        let before = sim.fences();
        let st = prot.run_pass().unwrap();
        let fences = sim.fences() - before;
        println!(
            "pass over {writes} writes: {} dirty batch(es), {fences} fence(s)",
            st.dirty_batches
        );
        assert_eq!(st.dirty_batches, u64::from(writes > 0));
        assert_eq!(fences, st.dirty_batches, "one fence per dirty batch");
    }
}

#[test]
fn lazy_sessions_crashed_anywhere_recover_current_redundancy() {
    campaign(Mode::Lazy, Mode::Lazy, Mode::Lazy, 1, 400);
}

#[test]
fn eager_sessions_crashed_anywhere_recover_current_line_checksums() {
    campaign(Mode::Eager, Mode::Eager, Mode::Eager, 2, 300);
}

#[test]
fn mode_switches_and_txb_sessions_crashed_anywhere_recover() {
    // Lazy region opened eager (line checksums rebuilt at open), crashed, reopened lazy; and
    // the txb-page baseline.
    campaign(Mode::Lazy, Mode::Eager, Mode::Lazy, 3, 150);
    campaign(Mode::Off, Mode::TxbPage, Mode::Eager, 4, 150);
}
