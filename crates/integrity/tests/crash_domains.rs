//! Crash consistency of the redundancy in the `eadr` and `msync` domains of the persistence
//! simulator, and under a failing `msync`.
//!
//! The session of `crash.rs` (writes through the API, update passes, a clean close) is crashed
//! before every fence (every crash image of each point) and at seeded random points, in `eadr`
//! and in `msync` with 512 B and 4 KiB sectors, in lazy and eager mode. In `msync` it also runs
//! with its k-th msync failing, for k spread over the session. After each crash the region is
//! reopened (recovery) and:
//!
//! - every page checksum, checksum block and parity page equals an independent computation over
//!   the recovered data, and a scrub finds nothing; in eager mode every line verifies on read;
//! - the data holds every write that returned success, and of the write in flight (if any) each
//!   byte is either old or new; nothing else changed;
//! - after a failed msync, the session reported an error (a write, a pass or the close).

mod support;

use integrity::{Mode, OpenOptions};
use pmem::rng::SplitMix64;
use pmem::sim::Fate;
use pmem::{CrashPlan, Medium, SimConfig, SimDomain, SimMedium};
use std::sync::Arc;
use support::*;

const PAGES: u64 = 48;

/// What the session did before the power failed.
#[derive(Debug, Clone)]
struct Seen {
    /// The region's data after every write that returned success.
    acked: Vec<u8>,
    /// The write that was issued but did not return success, if any.
    inflight: Option<(usize, Vec<u8>)>,
    /// Calls that returned an error.
    errors: u32,
    /// Every write issued (acknowledged or not), in order.
    writes: Vec<(usize, Vec<u8>)>,
}

fn session(sim: Arc<SimMedium>, mode: Mode, seed: u64, seen: &mut Seen) {
    if run(sim, mode, seed, seen).is_err() {
        seen.errors += 1;
    }
}

fn run(sim: Arc<SimMedium>, mode: Mode, seed: u64, seen: &mut Seen) -> integrity::Result<()> {
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
            seen.inflight = Some((at as usize, b.clone()));
            seen.writes.push((at as usize, b.clone()));
            prot.write(at, &b)?;
            seen.acked[at as usize..at as usize + len].copy_from_slice(&b);
            seen.inflight = None;
        }
        if round < 2 {
            prot.run_pass()?;
        }
    }
    prot.close()?;
    pool.close()?;
    Ok(())
}

/// Reopen `image` in `mode` (recovery) and check the redundancy and the data against `seen`.
fn check(image: Vec<u8>, mode: Mode, seen: &Seen, what: &str) {
    let (pool, prot, report) = open_mode(sim_of(image), mode);
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
    let data = data_of(&prot);
    let (lo, hi, new) = match &seen.inflight {
        Some((at, b)) => (*at, at + b.len(), b.as_slice()),
        None => (0, 0, &[][..]),
    };
    for (i, (&got, &want)) in data.iter().zip(&seen.acked).enumerate() {
        let ok = got == want || (lo <= i && i < hi && got == new[i - lo]);
        assert!(
            ok,
            "{what}: data byte {i} is {got:#04x}, the acknowledged writes leave {want:#04x}"
        );
    }
}

/// A missed window of flush on fail: any write may be lost, whole or in part (nothing was
/// written back), so the data is checked byte by byte against what some write (or the base)
/// put there; the redundancy must be current over whatever data survived (the header's `open`
/// state was written back before the first data write, so the open resyncs), and a scrub
/// finds nothing.
fn check_missed(image: Vec<u8>, mode: Mode, base: &[u8], seen: &Seen, what: &str) {
    let (pool, prot, report) = open_mode(sim_of(image), mode);
    assert!(
        redundancy_is_current(&pool, &prot),
        "{what}: stale redundancy after recovery ({report:?})"
    );
    let scrub = prot.scrub(&mut |_, _| {}).unwrap();
    assert!(scrub.findings.is_empty(), "{what}: {:?}", scrub.findings);
    let data = data_of(&prot);
    for (i, &got) in data.iter().enumerate() {
        let ok = got == base[i]
            || seen
                .writes
                .iter()
                .any(|(at, b)| *at <= i && i < at + b.len() && b[i - at] == got);
        assert!(
            ok,
            "{what}: data byte {i} is {got:#04x}, which no write put there"
        );
    }
}

/// The session from a clean region of `start` mode, run in `session` mode and reopened in
/// `reopen` mode, crashed before every fence and at `random` random points in the domain of
/// `cfg`. Returns the crash images checked.
fn campaign(cfg: SimConfig, start: Mode, session_mode: Mode, reopen: Mode, random: u64) -> u64 {
    let seed = cfg.seed;
    let base = image(PAGES, 4, start, seed);
    let fresh = Seen {
        acked: data_of(&open_mode(sim_of(base.clone()), reopen).1),
        inflight: None,
        errors: 0,
        writes: Vec::new(),
    };
    let base_data = fresh.acked.clone();
    let domain = cfg.domain;
    let mut images = 0u64;
    let mut missed = 0u64;
    let mut fences = 0;
    for n in 1.. {
        let sim = Arc::new(SimMedium::from_image(
            base.clone(),
            SimConfig {
                seed: seed ^ n,
                crash: CrashPlan::AtFence(n),
                evict_per_million: 0,
                ..cfg
            },
        ));
        let mut seen = fresh.clone();
        session(sim.clone(), session_mode, seed, &mut seen);
        let Some(state) = sim.crash_state() else {
            assert_eq!(seen.errors, 0, "{domain:?}: an uncrashed session failed");
            break;
        };
        fences = n;
        for (i, (fate, img)) in state.fates().into_iter().enumerate() {
            images += 1;
            let what = format!("{domain:?} {session_mode:?} session, fence {n}, {fate:?} {i}");
            if fate == Fate::MissedWindow && domain == SimDomain::FlushOnFail {
                missed += 1;
                check_missed(img, reopen, &base_data, &seen, &what);
            } else {
                check(img, reopen, &seen, &what);
            }
        }
    }
    assert!(fences > 20, "the session issues fences ({fences})");
    if domain == SimDomain::FlushOnFail {
        println!(
            "crash images checked: {images} at {fences} fences ({domain:?}: {} saved, {missed} \
             missed-window)",
            images - missed
        );
    } else {
        println!("crash images checked: {images} at {fences} fences ({domain:?})");
    }
    let dry = Arc::new(SimMedium::from_image(base.clone(), cfg));
    session(dry.clone(), session_mode, seed, &mut fresh.clone());
    let events = dry.events().max(1);
    let mut rng = SplitMix64::new(seed.wrapping_mul(31));
    for _ in 0..random {
        let run_seed = rng.next_u64();
        let sim = Arc::new(SimMedium::from_image(
            base.clone(),
            cfg.at_random_event(run_seed, events),
        ));
        let mut seen = fresh.clone();
        session(sim.clone(), session_mode, seed, &mut seen);
        let state = sim.power_fail_state();
        let what = format!("{domain:?} {session_mode:?} session, random crash {run_seed:#x}");
        if let Some(saved) = state.saved() {
            check(saved.to_vec(), reopen, &seen, &format!("{what} Saved"));
            check_missed(state.sampled().to_vec(), reopen, &base_data, &seen, &what);
        } else {
            check(state.sampled().to_vec(), reopen, &seen, &what);
        }
    }
    println!("crash images checked: {random} at random points ({domain:?})");
    images + random
}

fn domains(seed: u64) -> [SimConfig; 4] {
    [
        SimConfig {
            seed,
            domain: SimDomain::FlushOnFail,
            images_per_crash: 4,
            ..SimConfig::default()
        },
        SimConfig {
            seed,
            domain: SimDomain::Eadr,
            ..SimConfig::default()
        },
        SimConfig {
            seed,
            domain: SimDomain::Msync,
            sector: 512,
            ..SimConfig::default()
        },
        SimConfig {
            seed,
            domain: SimDomain::Msync,
            sector: 4096,
            ..SimConfig::default()
        },
    ]
}

#[test]
fn lazy_sessions_crashed_in_eadr_and_msync_recover_current_redundancy() {
    for cfg in domains(11) {
        campaign(cfg, Mode::Lazy, Mode::Lazy, Mode::Lazy, 60);
    }
}

#[test]
fn eager_sessions_crashed_in_eadr_and_msync_recover_current_line_checksums() {
    for cfg in domains(12) {
        campaign(cfg, Mode::Eager, Mode::Eager, Mode::Eager, 60);
    }
}

/// The k-th msync of the session fails, for k = 1, 2, 3, 4, 6, 9, ... until the session issues
/// fewer, in lazy and eager mode: the session reports an error, and every image the power may
/// leave afterwards recovers with current redundancy and every acknowledged write.
#[test]
fn a_failed_msync_is_reported_and_loses_no_acknowledged_write() {
    let mut images = 0u64;
    for (mode, seed) in [(Mode::Lazy, 21u64), (Mode::Eager, 22)] {
        let base = image(PAGES, 4, mode, seed);
        let fresh = Seen {
            acked: data_of(&open_mode(sim_of(base.clone()), mode).1),
            inflight: None,
            errors: 0,
            writes: Vec::new(),
        };
        let (mut k, mut fired) = (1u64, 0);
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
            let mut seen = fresh.clone();
            session(sim.clone(), mode, seed, &mut seen);
            // After a failed msync every fence fails: that tells whether the k-th came.
            if sim.fence().is_ok() {
                assert_eq!(seen.errors, 0, "{mode:?}: no msync failed, yet an error");
                break;
            }
            fired += 1;
            assert!(
                seen.errors > 0,
                "{mode:?}: msync {k} failed, yet the session reported success throughout"
            );
            for (i, img) in sim.power_fail_state().images().into_iter().enumerate() {
                images += 1;
                let what = format!("{mode:?}: msync {k} failed ({sector} B sectors), image {i}");
                check(img, mode, &seen, &what);
            }
            k = k * 3 / 2 + 1;
        }
        assert!(fired >= 8, "{mode:?}: only {fired} msyncs to fail");
    }
    println!("crash images checked: {images} after failed msyncs (Msync)");
}
