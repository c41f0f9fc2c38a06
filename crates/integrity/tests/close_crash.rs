//! A clean close under crashes. `Protected::close` runs the final update pass, fences, and only
//! then records `state` clean: a clean header that became durable before the final pass's
//! redundancy would make every page written since the previous pass look damaged (false damage
//! in a scrub), and a read-write open would not resync it (stale redundancy accepted silently).
//!
//! Two campaigns, for lazy, eager and txb-page sessions that write after their last pass:
//!
//! - **Every outcome that matters at every fence of `close`.** A hook on the simulated medium
//!   takes the durable and the working image just before each fence the close issues (and once
//!   after it returns). The lines where they differ are the ones a power failure there may or
//!   may not have written back, each independently (a cache may evict any line at any time).
//!   The test builds crash images from them itself: every subset when there are at most
//!   [`ALL_SUBSETS_MAX_LINES`], else none and all of them written back plus, for each line,
//!   that line alone written back and that line alone lost. So a bug that needs two particular
//!   lines in particular states (the clean header kept, a checksum lost) is met at the first
//!   fence where both are pending, whatever the simulator's own sampling does.
//! - **Seeded random crash points inside the close** (the simulator's own crash images, with
//!   random eviction), which also stop between fences with lines half-written.
//!
//! Each image is checked read-only first (a scrub must report no damage, since none was
//! injected; if the region counts as current, its redundancy must equal an independent
//! computation over the data; the data is what the session wrote), then read-write (recovery
//! leaves current redundancy and a clean scrub). Every image is a state real hardware can
//! reach, so the checks hold however the simulator chooses its images.

mod support;

use integrity::{Basis, Mode, OpenOptions};
use pmem::rng::SplitMix64;
use pmem::sim::{Op, OpHook};
use pmem::{CrashPlan, Pool, SimConfig, SimMedium};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use support::*;

const PAGES: u64 = 48;
/// Up to this many pending lines, every subset of them is a crash image.
const ALL_SUBSETS_MAX_LINES: usize = 10;
const LINE: usize = 64;

/// Takes (durable, working) images just before each fence while armed.
#[derive(Debug, Default)]
struct Snapshots {
    sim: OnceLock<Weak<SimMedium>>,
    armed: AtomicBool,
    taken: Mutex<Vec<(Vec<u8>, Vec<u8>)>>,
}

impl Snapshots {
    fn take(&self) {
        if let Some(sim) = self.sim.get().and_then(Weak::upgrade) {
            let pair = (sim.durable_image(), sim.working_image());
            self.taken.lock().unwrap().push(pair);
        }
    }
}

impl OpHook for Snapshots {
    fn before(&self, op: Op) {
        if op == Op::Fence && self.armed.load(Ordering::SeqCst) {
            self.take();
        }
    }
}

/// Open in `mode`, write, pass, write again (so the final pass has work), then close; calls
/// `closing(true)` just before `Protected::close` and `closing(false)` just after it returns.
fn session(
    sim: Sim,
    mode: Mode,
    seed: u64,
    closing: &dyn Fn(bool),
) -> integrity::Result<Pool<Sim>> {
    let (pool, prot, _) = open(
        sim,
        OpenOptions {
            mode: Some(mode),
            ..Default::default()
        },
    )?;
    let mut rng = SplitMix64::new(seed);
    for round in 0..2 {
        for _ in 0..5 {
            let len = [8usize, 64, 300, 4096, 9000][rng.below(5) as usize];
            let at = rng.below(PAGES * PAGE as u64 - len as u64);
            let mut b = vec![0u8; len];
            fill(&mut rng, &mut b);
            prot.write(at, &b)?;
        }
        if round == 0 {
            prot.run_pass()?;
        }
    }
    closing(true);
    let closed = prot.close();
    closing(false);
    closed?;
    Ok(pool)
}

/// The data region's bytes in `img`.
fn data_in(img: &[u8], data_at: usize) -> &[u8] {
    &img[data_at..data_at + PAGES as usize * PAGE]
}

/// Check one crash image (see the module comment). `data` is what the session wrote.
fn check(img: Vec<u8>, data: &[u8], data_at: usize, mode: Mode, what: &str) {
    assert!(
        data_in(&img, data_at) == data,
        "{what}: data written before the close was lost"
    );
    // Read-only: what a scrub sees, changing nothing.
    let sim = sim_of(img.clone());
    let pool = Pool::open_medium(
        sim,
        &pmem::OpenOptions {
            read_only: true,
            domain: None,
        },
    )
    .unwrap();
    let ro = OpenOptions {
        read_only: true,
        ..Default::default()
    };
    let (prot, report) = integrity::open_in_pool(&pool, "data", ro, &mut |_, _| {}).unwrap();
    let scrub = prot.scrub(&mut |_, _| {}).unwrap();
    assert!(
        scrub.findings.is_empty(),
        "{what}: false damage (basis {:?}): {:?}",
        report.trust.basis,
        scrub.findings
    );
    if report.trust.basis == Basis::Current {
        assert!(
            redundancy_is_current(&pool, &prot),
            "{what}: the header says clean but the redundancy is stale"
        );
        assert!(scrub.unverifiable.is_empty(), "{what}");
    } else {
        assert_eq!(
            report.trust.basis,
            Basis::Unclean,
            "{what}: {:?}",
            report.trust
        );
    }
    drop(prot);
    drop(pool);
    // Read-write: recovery.
    let (pool, prot, report) = open_mode(sim_of(img), mode);
    assert!(
        redundancy_is_current(&pool, &prot),
        "{what}: stale redundancy after recovery ({report:?})"
    );
    let scrub = prot.scrub(&mut |_, _| {}).unwrap();
    assert!(scrub.verified(), "{what}: {scrub:?}");
    if mode == Mode::Eager {
        let mut b = vec![0u8; PAGES as usize * PAGE];
        prot.read(0, &mut b).unwrap();
        assert_eq!(
            prot.stats().repairs_on_read,
            0,
            "{what}: line checksums stale"
        );
    }
}

/// Crash images from one (durable, working) pair: see the module comment.
fn outcomes(durable: &[u8], working: &[u8]) -> Vec<Vec<u8>> {
    let lines: Vec<usize> = (0..durable.len())
        .step_by(LINE)
        .filter(|&l| durable[l..l + LINE] != working[l..l + LINE])
        .collect();
    let with = |keep: &dyn Fn(usize) -> bool| {
        let mut img = durable.to_vec();
        for (i, &l) in lines.iter().enumerate() {
            if keep(i) {
                img[l..l + LINE].copy_from_slice(&working[l..l + LINE]);
            }
        }
        img
    };
    if lines.len() <= ALL_SUBSETS_MAX_LINES {
        return (0..1u32 << lines.len())
            .map(|set| with(&|i| set >> i & 1 == 1))
            .collect();
    }
    let mut out = vec![with(&|_| false), with(&|_| true)];
    for j in 0..lines.len() {
        out.push(with(&|i| i == j));
        out.push(with(&|i| i != j));
    }
    out
}

/// The every-fence campaign for one mode. Returns (fences in the close, images checked).
fn every_fence_of_close(start: Mode, mode: Mode, seed: u64) -> (usize, usize) {
    let base = image(PAGES, 4, start, seed);
    let snaps = Arc::new(Snapshots::default());
    let sim = Arc::new(SimMedium::from_image(base, SimConfig::default()).with_hook(snaps.clone()));
    snaps.sim.set(Arc::downgrade(&sim)).unwrap();
    let closing = |on: bool| {
        snaps.armed.store(on, Ordering::SeqCst);
        if !on {
            // The state the close leaves: nothing after it may be needed.
            snaps.take();
        }
    };
    let pool = session(sim.clone(), mode, seed, &closing).unwrap();
    let data_at = pool.region("data").unwrap().offset as usize;
    drop(pool);
    let taken = std::mem::take(&mut *snaps.taken.lock().unwrap());
    let data = data_in(&taken.last().unwrap().1, data_at).to_vec();
    let mut images = 0;
    for (n, (durable, working)) in taken.iter().enumerate() {
        for (i, img) in outcomes(durable, working).into_iter().enumerate() {
            check(
                img,
                &data,
                data_at,
                mode,
                &format!(
                    "{mode:?} close, before its fence {} (of {}), image {i}",
                    n + 1,
                    taken.len() - 1
                ),
            );
            images += 1;
        }
    }
    (taken.len() - 1, images)
}

/// Seeded crashes at random events inside the close (the simulator's crash images, random
/// eviction). Returns the images checked.
fn random_points_in_close(start: Mode, mode: Mode, seed: u64, count: u64) -> u64 {
    let base = image(PAGES, 4, start, seed);
    // A dry run finds the close's events.
    let dry = Arc::new(SimMedium::from_image(base.clone(), SimConfig::default()));
    let span = (AtomicU64::new(0), AtomicU64::new(0));
    let at_close = |on: bool| {
        let slot = if on { &span.0 } else { &span.1 };
        slot.store(dry.events(), Ordering::SeqCst);
    };
    let pool = session(dry.clone(), mode, seed, &at_close).unwrap();
    let data_at = pool.region("data").unwrap().offset as usize;
    let data = data_in(&dry.durable_image(), data_at).to_vec();
    drop(pool);
    let (first, last) = (span.0.load(Ordering::SeqCst), span.1.load(Ordering::SeqCst));
    assert!(last > first, "the close issues events");
    let mut rng = SplitMix64::new(seed ^ 0xc105e);
    for _ in 0..count {
        let run_seed = rng.next_u64();
        let mut pick = SplitMix64::new(run_seed);
        let sim = Arc::new(SimMedium::from_image(
            base.clone(),
            SimConfig {
                seed: run_seed,
                crash: CrashPlan::AtEvent(first + 1 + pick.below(last - first)),
                evict_per_million: [0, 10_000, 100_000, 500_000][pick.below(4) as usize],
                ..SimConfig::default()
            },
        ));
        let _ = session(sim.clone(), mode, seed, &|_| {});
        let img = sim.crash_image().unwrap_or_else(|| sim.power_fail());
        check(
            img,
            &data,
            data_at,
            mode,
            &format!("{mode:?} close, random crash {run_seed:#x}"),
        );
    }
    count
}

#[test]
fn a_lazy_close_crashed_at_any_fence_never_shows_false_damage_or_stale_clean_redundancy() {
    let (fences, images) = every_fence_of_close(Mode::Lazy, Mode::Lazy, 21);
    println!("lazy close: crash images checked: {images} at {fences} fences (Adr)");
    assert!(
        fences >= 2,
        "the close fences its final pass and its header ({fences})"
    );
    let n = random_points_in_close(Mode::Lazy, Mode::Lazy, 22, 150);
    println!("lazy close: crash images checked: {n} at random points (Adr)");
}

#[test]
fn eager_and_txb_closes_crashed_at_any_fence_recover() {
    for (start, mode, seed) in [
        (Mode::Eager, Mode::Eager, 23),
        (Mode::Lazy, Mode::TxbPage, 24),
    ] {
        let (fences, images) = every_fence_of_close(start, mode, seed);
        println!("{mode:?} close: crash images checked: {images} at {fences} fences (Adr)");
        let n = random_points_in_close(start, mode, seed, 40);
        println!("{mode:?} close: crash images checked: {n} at random points (Adr)");
    }
}
