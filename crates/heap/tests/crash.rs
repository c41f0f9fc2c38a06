//! Crash consistency of transactions on the persistence simulator.
//!
//! Each scenario is a short sequence of transactions of one kind (alloc, free, overwrite,
//! nested, aborted, and a mix) run from a prepared heap. It is crashed before every fence and
//! at 1,000 seeded random events (with random eviction and torn lines). After each crash the
//! heap is reopened (recovery runs) and must:
//!
//! - hold exactly the state after some prefix of the committed transactions (all or nothing,
//!   and an aborted transaction is never visible);
//! - walk clean: no damaged metadata, no block allocated twice, no leak (every allocated
//!   block is reachable from the root), no lane left pending;
//! - give the same state when recovery itself is crashed (at each of its fences, and for
//!   random crashes at a seeded random event) and run again;
//! - keep working: another transaction commits and the walk stays clean.

use std::sync::Arc;

use heap::check::walk;
use heap::layout::CHUNK_SIZE;
use heap::{HeapError, HeapOptions, RawHeap, TxMode};
use pmem::rng::SplitMix64;
use pmem::{CrashPlan, Medium, SimConfig, SimDomain, SimMedium};

const LEN: u64 = 4 << 20;
const SLOTS: u64 = 8;
const SLOT_BYTES: u64 = 32;

/// The logical state: per slot, (offset, len, tag, crc of the block's first `len` bytes).
type State = Vec<(u64, u64, u64, u32)>;

fn sim(image: Vec<u8>, crash: CrashPlan, seed: u64, evict: u32) -> Arc<SimMedium> {
    sim_in(SimConfig::default(), image, crash, seed, evict)
}

/// [`sim`] in the domain (and sector size, msync failure) of `cfg`.
fn sim_in(
    cfg: SimConfig,
    image: Vec<u8>,
    crash: CrashPlan,
    seed: u64,
    evict: u32,
) -> Arc<SimMedium> {
    Arc::new(SimMedium::from_image(
        image,
        SimConfig {
            seed,
            crash,
            evict_per_million: evict,
            ..cfg
        },
    ))
}

thread_local! {
    /// The mode this test thread's transactions run in (`RawHeap::begin` takes the default).
    static MODE: std::cell::Cell<TxMode> = const { std::cell::Cell::new(TxMode::Undo) };
}

fn open(m: Arc<SimMedium>) -> heap::Result<RawHeap> {
    let h = RawHeap::open(m, 0, LEN)?;
    h.set_default_mode(MODE.with(|c| c.get()));
    Ok(h)
}

fn slot(root: u64, i: u64) -> u64 {
    root + i * SLOT_BYTES
}

fn fill(tag: u64, len: u64) -> Vec<u8> {
    let mut r = SplitMix64::new(tag);
    (0..len).map(|_| r.next_u64() as u8).collect()
}

fn state(h: &RawHeap) -> State {
    let (root, _) = h.root_line();
    (0..SLOTS)
        .map(|i| {
            let mut s = [0u8; 24];
            h.read(slot(root, i), &mut s).unwrap();
            let w = |k: usize| u64::from_le_bytes(s[k * 8..k * 8 + 8].try_into().unwrap());
            let (off, len, tag) = (w(0), w(1), w(2));
            let crc = if off == 0 {
                0
            } else {
                let mut b = vec![0u8; len as usize];
                h.read(off, &mut b).unwrap();
                crc32c::crc32c(&b)
            };
            (off, len, tag, crc)
        })
        .collect()
}

fn set_slot(
    h: &RawHeap,
    lane: &mut heap::raw::Lane,
    i: u64,
    off: u64,
    len: u64,
    tag: u64,
) -> heap::Result<()> {
    let (root, _) = h.root_line();
    let mut s = [0u8; 24];
    s[0..8].copy_from_slice(&off.to_le_bytes());
    s[8..16].copy_from_slice(&len.to_le_bytes());
    s[16..24].copy_from_slice(&tag.to_le_bytes());
    h.write(lane, slot(root, i), &s)
}

fn get_slot(h: &RawHeap, i: u64) -> (u64, u64, u64) {
    let (root, _) = h.root_line();
    let mut s = [0u8; 24];
    h.read(slot(root, i), &mut s).unwrap();
    let w = |k: usize| u64::from_le_bytes(s[k * 8..k * 8 + 8].try_into().unwrap());
    (w(0), w(1), w(2))
}

/// Allocate a block of `len` bytes filled from `tag` and link it into slot `i`.
fn alloc_into(
    h: &RawHeap,
    lane: &mut heap::raw::Lane,
    i: u64,
    len: u64,
    tag: u64,
) -> heap::Result<()> {
    let off = h.alloc(lane, len, false)?;
    h.medium().write((h.base() + off) as usize, &fill(tag, len));
    set_slot(h, lane, i, off, len, tag)
}

fn free_slot(h: &RawHeap, lane: &mut heap::raw::Lane, i: u64) -> heap::Result<()> {
    let (off, _, _) = get_slot(h, i);
    h.free(lane, off)?;
    set_slot(h, lane, i, 0, 0, 0)
}

/// Overwrite two overlapping ranges of slot `i`'s block with data from `tag`.
fn overwrite(h: &RawHeap, lane: &mut heap::raw::Lane, i: u64, tag: u64) -> heap::Result<()> {
    let (off, len, _) = get_slot(h, i);
    let a = fill(tag, len / 2 + 1);
    h.write(lane, off, &a)?;
    let b = fill(tag ^ 1, len / 2);
    h.write(lane, off + len / 4, &b)?;
    set_slot(h, lane, i, off, len, tag)
}

fn tx(
    h: &RawHeap,
    f: impl FnOnce(&RawHeap, &mut heap::raw::Lane) -> heap::Result<()>,
) -> heap::Result<()> {
    let mut lane = h.lane();
    h.begin(&mut lane);
    match f(h, &mut lane) {
        Ok(()) => h.commit(&mut lane),
        Err(e) => {
            if !e.is_simulated_crash() {
                h.abort(&mut lane)?;
            }
            Err(e)
        }
    }
}

/// The prepared heap: a root of 8 slots, slots 0..4 holding blocks of 64 B, 1000 B,
/// 300,000 B (a large block) and 4096 B.
fn base_image() -> Vec<u8> {
    let m = sim(vec![0; LEN as usize], CrashPlan::Never, 0, 0);
    RawHeap::format(&*m, 0, LEN, [5; 16], &HeapOptions::small()).unwrap();
    let h = open(m.clone()).unwrap();
    h.root(SLOTS * SLOT_BYTES).unwrap();
    for (i, len) in [64u64, 1000, 300_000, 4096].into_iter().enumerate() {
        tx(&h, |h, l| alloc_into(h, l, i as u64, len, 100 + i as u64)).unwrap();
    }
    h.quiesce().unwrap();
    drop(h);
    m.power_fail()
}

type Step = fn(&RawHeap) -> heap::Result<()>;

struct Scenario {
    name: &'static str,
    steps: &'static [Step],
}

fn sc_alloc_1(h: &RawHeap) -> heap::Result<()> {
    tx(h, |h, l| {
        alloc_into(h, l, 4, 200, 7)?;
        alloc_into(h, l, 5, 2 * CHUNK_SIZE - 5, 8)?;
        alloc_into(h, l, 6, 64, 9)
    })
}
fn sc_alloc_2(h: &RawHeap) -> heap::Result<()> {
    tx(h, |h, l| alloc_into(h, l, 7, 5000, 10))
}
fn sc_free_1(h: &RawHeap) -> heap::Result<()> {
    tx(h, |h, l| {
        free_slot(h, l, 0)?;
        free_slot(h, l, 2)
    })
}
fn sc_free_2(h: &RawHeap) -> heap::Result<()> {
    tx(h, |h, l| free_slot(h, l, 3))
}
/// The allocator entries come after the last snapshot, so only the commit orders them.
fn sc_late(h: &RawHeap) -> heap::Result<()> {
    tx(h, |h, l| {
        let (off, _, _) = get_slot(h, 3);
        let (old6, _, _) = get_slot(h, 6);
        set_slot(h, l, 3, 0, 0, 0)?;
        set_slot(h, l, 6, 0, 0, 1)?;
        h.free(l, off)?;
        if old6 != 0 {
            h.free(l, old6)?;
        }
        let b = h.alloc(l, 2000, false)?;
        h.medium().write((h.base() + b) as usize, &fill(71, 2000));
        set_slot(h, l, 6, b, 2000, 71)
    })
}
fn sc_over_1(h: &RawHeap) -> heap::Result<()> {
    tx(h, |h, l| {
        overwrite(h, l, 1, 31)?;
        overwrite(h, l, 3, 32)
    })
}
fn sc_over_2(h: &RawHeap) -> heap::Result<()> {
    tx(h, |h, l| overwrite(h, l, 0, 33))
}
fn sc_nested(h: &RawHeap) -> heap::Result<()> {
    tx(h, |h, l| {
        overwrite(h, l, 1, 41)?;
        h.begin(l);
        alloc_into(h, l, 4, 128, 42)?;
        free_slot(h, l, 0)?;
        h.begin(l);
        overwrite(h, l, 3, 43)?;
        h.commit(l)?;
        h.commit(l)?;
        alloc_into(h, l, 5, 777, 44)
    })
}
fn sc_aborted(h: &RawHeap) -> heap::Result<()> {
    let r = tx(h, |h, l| {
        overwrite(h, l, 1, 51)?;
        alloc_into(h, l, 4, 256, 52)?;
        free_slot(h, l, 2)?;
        overwrite(h, l, 3, 53)?;
        Err(HeapError::Aborted)
    });
    match r {
        Err(HeapError::Aborted) => Ok(()),
        Err(e) => Err(e),
        Ok(()) => panic!("the transaction was to abort"),
    }
}
fn sc_nested_abort(h: &RawHeap) -> heap::Result<()> {
    // An inner abort aborts the whole transaction, even if the outer level goes on.
    let r = tx(h, |h, l| {
        overwrite(h, l, 1, 61)?;
        h.begin(l);
        free_slot(h, l, 0)?;
        h.abort(l)?;
        alloc_into(h, l, 4, 64, 62).or(Ok(()))
    });
    match r {
        Err(HeapError::Aborted) => Ok(()),
        Err(e) => Err(e),
        Ok(()) => panic!("an inner abort must abort the transaction"),
    }
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "alloc",
        steps: &[sc_alloc_1, sc_alloc_2],
    },
    Scenario {
        name: "free",
        steps: &[sc_free_1, sc_late],
    },
    Scenario {
        name: "overwrite",
        steps: &[sc_over_1, sc_over_2],
    },
    Scenario {
        name: "nested",
        steps: &[sc_nested, sc_over_1],
    },
    Scenario {
        name: "aborted",
        steps: &[sc_over_2, sc_aborted, sc_nested_abort, sc_free_2],
    },
    Scenario {
        name: "mixed",
        steps: &[sc_free_1, sc_alloc_1, sc_over_1, sc_late, sc_alloc_2],
    },
];

/// Run the steps; returns the state before the first and after each step.
fn run(h: &RawHeap, steps: &[Step]) -> heap::Result<Vec<State>> {
    let mut states = vec![state(h)];
    for s in steps {
        s(h)?;
        states.push(state(h));
    }
    Ok(states)
}

fn assert_clean(m: &SimMedium, what: &str) {
    let r = walk(m, 0, LEN, true).unwrap();
    assert!(
        r.is_clean() && r.pending.is_empty() && r.reachability_checked,
        "{what}: heap walk not clean: {r:#?}"
    );
}

/// Recover `img` and check it; returns the recovered state.
fn check_crash(img: Vec<u8>, allowed: &[State], what: &str) -> State {
    let m = sim(img.clone(), CrashPlan::Never, 0, 0);
    let h = open(m.clone()).unwrap_or_else(|e| panic!("{what}: reopen failed: {e}"));
    let got = state(&h);
    assert!(
        allowed.contains(&got),
        "{what}: state after recovery is not the state after any prefix of the transactions:\n{got:?}\nallowed:\n{allowed:#?}"
    );
    drop(h);
    assert_clean(&m, what);
    got
}

/// Crash recovery of `img` at its `k`-th fence, then recover again: same state.
fn crash_recovery(img: &[u8], plan: CrashPlan, seed: u64, expect: &State, what: &str) -> bool {
    let m = sim(img.to_vec(), plan, seed, 100_000);
    match open(m.clone()) {
        Ok(_) => false,
        Err(e) => {
            assert!(e.is_simulated_crash(), "{what}: {e}");
            let again = m.crash_image().expect("crashed");
            let m2 = sim(again, CrashPlan::Never, 0, 0);
            let h = open(m2.clone()).unwrap_or_else(|e| panic!("{what}: second reopen: {e}"));
            assert_eq!(
                &state(&h),
                expect,
                "{what}: a crash during recovery changed the outcome"
            );
            drop(h);
            assert_clean(&m2, what);
            true
        }
    }
}

fn still_works(img: Vec<u8>, what: &str) {
    let m = sim(img, CrashPlan::Never, 0, 0);
    let h = open(m.clone()).unwrap();
    tx(&h, |h, l| {
        let off = h.alloc(l, 100, true)?;
        h.free(l, off)?;
        let (o, len, _) = get_slot(h, 1);
        if o != 0 {
            h.write(l, o, &vec![9u8; len as usize])?;
        }
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{what}: a transaction after recovery failed: {e}"));
    drop(h);
    assert_clean(&m, what);
}

fn scenario(sc: &Scenario, random_points: u64) {
    scenario_in(sc, SimConfig::default(), random_points, true);
}

/// The scenario crashed at every fence and at `random_points` random events in the domain of
/// `cfg`. With `all`, every crash image of each fence is checked
/// ([`pmem::sim::CrashState::images`]; recovery is crashed at each of its fences for the first
/// of them only), else only the sampled one.
fn scenario_in(sc: &Scenario, cfg: SimConfig, random_points: u64, all: bool) {
    let domain = cfg.domain;
    let mut images = 0u64;
    let base = base_image();
    let clean = sim(base.clone(), CrashPlan::Never, 0, 0);
    let h = open(clean.clone()).unwrap();
    let allowed = run(&h, sc.steps).unwrap();
    drop(h);
    let events = clean.events();
    // Every fence.
    let mut fences = 0;
    for n in 1.. {
        let m = sim_in(cfg, base.clone(), CrashPlan::AtFence(n), cfg.seed ^ n, 0);
        let h = open(m.clone()).unwrap();
        let r = run(&h, sc.steps);
        drop(h);
        let Some(state) = m.crash_state() else {
            r.unwrap();
            break;
        };
        fences = n;
        let mut imgs = if all {
            state.images()
        } else {
            vec![state.sampled().to_vec()]
        };
        images += imgs.len() as u64;
        for (i, img) in imgs.drain(1..).enumerate() {
            let what = format!("{} {domain:?} crash at fence {n}, image {}", sc.name, i + 1);
            check_crash(img, &allowed, &what);
        }
        let img = imgs.pop().expect("one image");
        let what = format!("{} {domain:?} crash at fence {n}", sc.name);
        let got = check_crash(img.clone(), &allowed, &what);
        for k in 1.. {
            if !crash_recovery(
                &img,
                CrashPlan::AtFence(k),
                k,
                &got,
                &format!("{what}, recovery crashed at its fence {k}"),
            ) {
                break;
            }
        }
        still_works(img, &what);
    }
    assert!(
        // Redo mode: two fences per commit and none for an abort.
        fences
            >= sc.steps.len() as u64
                * if MODE.with(|c| c.get()).is_redo() {
                    1
                } else {
                    2
                },
        "{}: only {fences} fences",
        sc.name
    );
    // Random points with eviction.
    println!("crash images checked: {images} at {fences} fences ({domain:?})");
    let mut images = 0u64;
    let mut rng = SplitMix64::new(0x4ea9 ^ sc.name.len() as u64 ^ cfg.seed);
    let mut outcomes = std::collections::BTreeMap::new();
    for _ in 0..random_points {
        let seed = rng.next_u64();
        let mut pick = SplitMix64::new(seed);
        let at = 1 + pick.below(events);
        let evict = [0, 10_000, 100_000, 500_000][pick.below(4) as usize];
        let m = sim_in(cfg, base.clone(), CrashPlan::AtEvent(at), seed, evict);
        let h = open(m.clone()).unwrap();
        let _ = run(&h, sc.steps);
        drop(h);
        let img = m.crash_image().unwrap_or_else(|| m.power_fail());
        images += 1;
        let what = format!(
            "{} {domain:?} random crash seed {seed:#x} at event {at}",
            sc.name
        );
        let got = check_crash(img.clone(), &allowed, &what);
        *outcomes
            .entry(allowed.iter().position(|s| *s == got).unwrap())
            .or_insert(0u32) += 1;
        if seed % 8 == 0 {
            let k = 1 + pick.below(6);
            crash_recovery(
                &img,
                CrashPlan::AtFence(k),
                seed,
                &got,
                &format!("{what}, recovery crashed at its fence {k}"),
            );
        }
    }
    // The random crashes must land on both sides of some commit, or the test proves little.
    assert!(
        outcomes.len() >= 2,
        "{}: every random crash gave the same prefix: {outcomes:?}",
        sc.name
    );
    println!("crash images checked: {images} at random points ({domain:?})");
}

#[test]
fn alloc_transactions_are_atomic() {
    scenario(&SCENARIOS[0], 1000);
}

#[test]
fn free_transactions_are_atomic() {
    scenario(&SCENARIOS[1], 1000);
}

#[test]
fn overwrite_transactions_are_atomic() {
    scenario(&SCENARIOS[2], 1000);
}

#[test]
fn nested_transactions_are_atomic() {
    scenario(&SCENARIOS[3], 1000);
}

#[test]
fn aborted_transactions_are_never_visible() {
    let sc = &SCENARIOS[4];
    // The aborted steps must leave the state as it was.
    let m = sim(base_image(), CrashPlan::Never, 0, 0);
    let h = open(m).unwrap();
    let states = run(&h, sc.steps).unwrap();
    assert_eq!(
        states[1], states[2],
        "an aborted transaction changed the state"
    );
    assert_eq!(
        states[2], states[3],
        "an inner abort did not abort the transaction"
    );
    assert_ne!(states[3], states[4]);
    scenario(sc, 1000);
}

#[test]
fn mixed_sequences_are_atomic() {
    scenario(&SCENARIOS[5], 1000);
}

/// Every scenario at every fence (every image of each) and 100 random points in `eadr`, and in
/// `msync` with 512 B sectors for half the scenarios and 4 KiB for the other half.
#[test]
fn every_scenario_in_eadr_and_msync() {
    for (i, sc) in SCENARIOS.iter().enumerate() {
        let seed = 0x0e_ad00 + i as u64;
        let eadr = SimConfig {
            seed,
            domain: SimDomain::Eadr,
            ..SimConfig::default()
        };
        scenario_in(sc, eadr, 100, true);
        let msync = SimConfig {
            seed,
            domain: SimDomain::Msync,
            sector: [512, 4096][i % 2],
            ..SimConfig::default()
        };
        scenario_in(sc, msync, 100, true);
    }
}

/// In `msync`, the k-th msync fails, for k spread over each scenario (1, 2, 3, 4, 6, 9, ...
/// until the scenario issues fewer): the transaction in flight reports an error (and none
/// after it claims success), and every image the power may leave afterwards recovers to the
/// state after the committed transactions, or after those and the failed one, walking clean.
#[test]
fn a_failed_msync_is_reported_and_loses_no_committed_transaction() {
    let base = base_image();
    let mut images = 0u64;
    for (i, sc) in SCENARIOS.iter().enumerate() {
        let clean = sim(base.clone(), CrashPlan::Never, 0, 0);
        let allowed = run(&open(clean).unwrap(), sc.steps).unwrap();
        let (mut k, mut fired) = (1u64, 0);
        loop {
            let sector = [512, 4096][(i + k as usize) % 2];
            let cfg = SimConfig {
                domain: SimDomain::Msync,
                sector,
                fail_msync_at: k,
                ..SimConfig::default()
            };
            let m = sim_in(cfg, base.clone(), CrashPlan::Never, k, 0);
            let mut done = 0;
            if let Ok(h) = open(m.clone()) {
                for step in sc.steps {
                    if step(&h).is_err() {
                        break;
                    }
                    done += 1;
                }
            }
            // After a failed msync every fence fails: that tells whether the k-th came.
            if m.fence().is_ok() {
                assert_eq!(
                    done,
                    sc.steps.len(),
                    "{}: no msync failed, yet an error",
                    sc.name
                );
                break;
            }
            fired += 1;
            assert!(
                done < sc.steps.len(),
                "{}: msync {k} failed, yet every transaction committed",
                sc.name
            );
            let may = &allowed[done..(done + 2).min(allowed.len())];
            for (j, img) in m.power_fail_state().images().into_iter().enumerate() {
                images += 1;
                let what = format!(
                    "{}: msync {k} failed ({sector} B sectors) after {done} transactions, image {j}",
                    sc.name
                );
                check_crash(img, may, &what);
            }
            k = k * 3 / 2 + 1;
        }
        assert!(fired >= 4, "{}: only {fired} msyncs to fail", sc.name);
    }
    println!("crash images checked: {images} after failed msyncs (Msync)");
}

/// Every scenario again with redo-mode transactions (log in DRAM, written into the lane's redo
/// area and fenced at commit, then applied in place and retired): every image of every fence
/// and 300 random points in `adr`, every fence and 100 random points in `eadr`.
#[test]
fn every_scenario_in_redo_mode() {
    MODE.with(|c| c.set(TxMode::Redo));
    for (i, sc) in SCENARIOS.iter().enumerate() {
        scenario_in(
            sc,
            SimConfig {
                seed: 0x4ed0 + i as u64,
                ..SimConfig::default()
            },
            300,
            true,
        );
        scenario_in(
            sc,
            SimConfig {
                seed: 0x4ed0e + i as u64,
                domain: SimDomain::Eadr,
                ..SimConfig::default()
            },
            100,
            true,
        );
    }
}

/// The redo commit costs two fences where undo costs three for an overwrite, and a redo
/// transaction that only reads or writes nothing costs none.
#[test]
fn redo_mode_overwrite_takes_two_fences() {
    let m = sim(base_image(), CrashPlan::Never, 0, 0);
    let h = RawHeap::open(m, 0, LEN).unwrap();
    let count = |mode: TxMode| {
        h.set_default_mode(mode);
        let before = h
            .counters()
            .fences
            .load(std::sync::atomic::Ordering::Relaxed);
        tx(&h, |h, l| {
            let (off, _, _) = get_slot(h, 1);
            h.write(l, off, &[7u8; 64])
        })
        .unwrap();
        h.counters()
            .fences
            .load(std::sync::atomic::Ordering::Relaxed)
            - before
    };
    assert_eq!(count(TxMode::Undo), 3);
    assert_eq!(count(TxMode::Redo), 2);
    h.set_default_mode(TxMode::Redo);
    let before = h
        .counters()
        .fences
        .load(std::sync::atomic::Ordering::Relaxed);
    tx(&h, |_, _| Ok(())).unwrap();
    assert_eq!(
        h.counters()
            .fences
            .load(std::sync::atomic::Ordering::Relaxed),
        before
    );
}

// ------------------------------------------------------------------ durability on demand

use heap::raw::{OnDemandConfig, SaveBudget, SaveCost};
use std::time::Duration;

/// A cost model of a medium, so that admission and the save's window are deterministic on
/// the simulator (where nothing takes real time).
fn cost(line_ns: f64) -> SaveCost {
    SaveCost {
        fixed_ns: 20_000.0,
        line_ns,
        byte_ns: 0.5,
    }
}

fn od(window_ms: f64, line_ns: f64) -> OnDemandConfig {
    OnDemandConfig {
        window: Duration::from_secs_f64(window_ms / 1000.0),
        margin: 0.2,
        cost: cost(line_ns),
    }
}

/// Steps as on-demand commits, then a save, crashed at every fence and at random events, in a
/// window of 1, 33 and 70 ms. Every image either refuses to open (`NotSaved`, the file left as
/// it was) or opens to the state before the steps or after all of them (the save finished),
/// walking clean; none opens to anything else.
#[test]
fn on_demand_commits_are_all_or_nothing_around_the_save() {
    MODE.with(|c| c.set(TxMode::Redo));
    let base = base_image();
    let sc = &SCENARIOS[5];
    for window_ms in [1.0, 33.0, 70.0] {
        let cfg = od(window_ms, 20.0);
        let budget = SaveBudget {
            window: cfg.window,
            modeled: Some(cfg.cost),
        };
        let run_all = |h: &RawHeap| -> heap::Result<(Vec<State>, bool)> {
            let plan = h.enable_on_demand(cfg);
            assert!(plan.threads >= 1, "{window_ms} ms: {plan:?}");
            let states = run(h, sc.steps)?;
            let rep = h.save(budget)?;
            Ok((states, rep.completed))
        };
        let clean = sim(base.clone(), CrashPlan::Never, 0, 0);
        let h = open(clean.clone()).unwrap();
        let before = h
            .counters()
            .fences
            .load(std::sync::atomic::Ordering::Relaxed);
        let (states, done) = run_all(&h).unwrap();
        assert!(done, "{window_ms} ms: the save did not fit its window");
        let _ = before;
        drop(h);
        // Overwrites: one fence to mark the lane, none per commit.
        let h = open(sim(base.clone(), CrashPlan::Never, 0, 0)).unwrap();
        h.enable_on_demand(cfg);
        let before = h
            .counters()
            .fences
            .load(std::sync::atomic::Ordering::Relaxed);
        run(&h, SCENARIOS[2].steps).unwrap();
        let fences = h
            .counters()
            .fences
            .load(std::sync::atomic::Ordering::Relaxed)
            - before;
        assert_eq!(fences, 1, "{window_ms} ms: on-demand commits fenced");
        drop(h);
        let allowed = [states[0].clone(), states.last().unwrap().clone()];
        let events = clean.events();
        let (mut refused, mut opened, mut images) = (0, 0, 0u64);
        let mut check = |img: Vec<u8>, what: &str| {
            images += 1;
            let m = sim(img.clone(), CrashPlan::Never, 0, 0);
            match open(m.clone()) {
                Err(HeapError::NotSaved { .. }) => {
                    refused += 1;
                    assert!(m.power_fail() == img, "{what}: a refused open wrote");
                }
                Err(e) => panic!("{what}: {e}"),
                Ok(h) => {
                    opened += 1;
                    let got = state(&h);
                    assert!(allowed.contains(&got), "{what}: torn state {got:?}");
                    drop(h);
                    assert_clean(&m, what);
                }
            }
        };
        for n in 1.. {
            let m = sim(base.clone(), CrashPlan::AtFence(n), n, 0);
            let h = open(m.clone()).unwrap();
            let r = run_all(&h);
            drop(h);
            let Some(st) = m.crash_state() else {
                r.unwrap();
                break;
            };
            for (i, img) in st.images().into_iter().enumerate() {
                check(
                    img,
                    &format!("{window_ms} ms, crash at fence {n}, image {i}"),
                );
            }
        }
        let mut rng = SplitMix64::new(0x0d0d ^ window_ms as u64);
        for _ in 0..200 {
            let seed = rng.next_u64();
            let at = 1 + SplitMix64::new(seed).below(events);
            let m = sim(base.clone(), CrashPlan::AtEvent(at), seed, 100_000);
            let h = open(m.clone()).unwrap();
            let _ = run_all(&h);
            drop(h);
            let img = m.crash_image().unwrap_or_else(|| m.power_fail());
            check(img, &format!("{window_ms} ms, random crash at event {at}"));
        }
        assert!(
            refused > 0 && opened > 0,
            "{window_ms} ms: {refused} refused, {opened} opened"
        );
        println!("crash images checked: {images} around an on-demand save ({window_ms} ms)");
    }
}

/// A save that misses its window leaves the lanes unsaved: the heap is refused at open, never
/// opened torn. Power lost with no save at all: the same.
#[test]
fn a_missed_window_or_no_save_refuses_to_open() {
    MODE.with(|c| c.set(TxMode::Redo));
    let base = base_image();
    for save in [false, true] {
        let m = sim(base.clone(), CrashPlan::Never, 0, 0);
        let h = open(m.clone()).unwrap();
        h.enable_on_demand(od(33.0, 20.0));
        run(&h, SCENARIOS[2].steps).unwrap();
        if save {
            // 1 µs cannot hold even the fixed cost.
            let rep = h
                .save(SaveBudget {
                    window: Duration::from_micros(1),
                    modeled: Some(cost(20.0)),
                })
                .unwrap();
            assert!(!rep.completed, "{rep:?}");
            assert!(rep.lines_written_back > 0, "{rep:?}");
        }
        drop(h);
        for (i, img) in m.power_fail_state().images().into_iter().enumerate() {
            let m2 = sim(img, CrashPlan::Never, 0, 0);
            match open(m2) {
                Err(HeapError::NotSaved { .. }) => {}
                other => panic!("save {save}, image {i}: {:?}", other.map(|_| ())),
            }
        }
    }
}

/// Admission: a thread whose log could not be saved in the window runs its transactions in
/// undo mode (and says so); with room, in redo mode. A warning called off (resume) and a
/// close leave a heap that opens with every commit.
#[test]
fn admission_refuses_past_the_window_and_resume_then_close_keeps_everything() {
    MODE.with(|c| c.set(TxMode::Redo));
    let base = base_image();
    // A slow medium: 10 µs per line; 1 ms cannot hold one lane's log.
    let m = sim(base.clone(), CrashPlan::Never, 0, 0);
    let h = open(m.clone()).unwrap();
    let plan = h.enable_on_demand(od(1.0, 10_000.0));
    assert_eq!(plan.threads, 0, "{plan:?}");
    let mut lane = h.lane();
    assert_eq!(h.begin_mode(&mut lane, TxMode::Redo), TxMode::Undo);
    h.abort(&mut lane).unwrap();
    drop(lane);
    assert_eq!(h.on_demand_stats().refused_transactions, 1);
    run(&h, SCENARIOS[2].steps).unwrap();
    drop(h);
    // Refused transactions ran in undo mode: durable without any save.
    let h2 = open(sim(m.power_fail(), CrashPlan::Never, 0, 0)).unwrap();
    drop(h2);

    // Room for every lane at 70 ms: commits, a save, a resume, more commits, a close.
    let m = sim(base, CrashPlan::Never, 0, 0);
    let h = open(m.clone()).unwrap();
    let plan = h.enable_on_demand(od(70.0, 20.0));
    assert_eq!(plan.threads, 4, "{plan:?}");
    run(&h, SCENARIOS[1].steps).unwrap();
    let rep = h
        .save(SaveBudget {
            window: Duration::from_millis(70),
            modeled: Some(cost(20.0)),
        })
        .unwrap();
    assert!(rep.completed && rep.lanes_marked >= 1, "{rep:?}");
    h.resume_writers().unwrap();
    let states = run(&h, SCENARIOS[0].steps).unwrap();
    h.quiesce().unwrap();
    drop(h);
    let h2 = open(sim(m.power_fail(), CrashPlan::Never, 0, 0)).unwrap();
    assert_eq!(&state(&h2), states.last().unwrap());
}

/// Every scenario with isolated transactions (redo mode under the STM): every image of every
/// fence and 100 random points in `adr`.
#[test]
fn every_scenario_in_isolated_mode() {
    MODE.with(|c| c.set(TxMode::Isolated));
    for (i, sc) in SCENARIOS.iter().enumerate() {
        scenario_in(
            sc,
            SimConfig {
                seed: 0x150 + i as u64,
                ..SimConfig::default()
            },
            100,
            true,
        );
    }
}

/// The heap in the flush-on-fail domain (`eadr` with a save path: `flush` skipped on the
/// critical path, a missed window an ordinary power failure). Durability on demand is its
/// flush-on-fail mode, and a thread the window cannot admit commits in undo mode with a
/// write-back no domain skips. Crashed at every fence of steps plus a save, both fates of each
/// crash point: every image either opens to the state before or after the steps (admitted:
/// nothing in between is visible; refused: any prefix, as flush-on-commit) and walks clean, or
/// is refused with `NotSaved`, the file left as it was. A refused thread's image is never
/// refused: its commits did not wait for the save.
#[test]
fn on_demand_in_the_flush_on_fail_domain_both_fates() {
    MODE.with(|c| c.set(TxMode::Redo));
    let base = base_image();
    let sc = &SCENARIOS[5];
    let cfg = SimConfig {
        domain: SimDomain::FlushOnFail,
        ..SimConfig::default()
    };
    // 33 ms admits the thread; 1 ms at 10 µs a line admits none (undo commits).
    for (window_ms, line_ns, admitted) in [(33.0, 20.0, true), (1.0, 10_000.0, false)] {
        let odc = od(window_ms, line_ns);
        let budget = SaveBudget {
            window: odc.window,
            modeled: Some(odc.cost),
        };
        let run_all = |h: &RawHeap| -> heap::Result<Vec<State>> {
            let plan = h.enable_on_demand(odc);
            assert_eq!(plan.threads >= 1, admitted, "{window_ms} ms: {plan:?}");
            let states = run(h, sc.steps)?;
            h.save(budget)?;
            Ok(states)
        };
        let clean = sim_in(cfg, base.clone(), CrashPlan::Never, 0, 0);
        let states = run_all(&open(clean.clone()).unwrap()).unwrap();
        let allowed: Vec<State> = if admitted {
            vec![states[0].clone(), states.last().unwrap().clone()]
        } else {
            states.clone()
        };
        let (mut refused, mut opened, mut by_fate) = (0, 0, [0u32; 2]);
        for n in 1.. {
            let m = sim_in(cfg, base.clone(), CrashPlan::AtFence(n), n, 0);
            let r = open(m.clone()).and_then(|h| run_all(&h));
            let Some(st) = m.crash_state() else {
                r.unwrap();
                break;
            };
            for (fate, img) in st.fates() {
                let what = format!("{window_ms} ms, fence {n}, {fate:?}");
                by_fate[usize::from(fate != pmem::Fate::Saved)] += 1;
                let m2 = sim(img.clone(), CrashPlan::Never, 0, 0);
                match open(m2.clone()) {
                    Err(HeapError::NotSaved { .. }) if admitted => {
                        refused += 1;
                        assert!(m2.power_fail() == img, "{what}: a refused open wrote");
                    }
                    Err(e) => panic!("{what}: {e}"),
                    Ok(h) => {
                        opened += 1;
                        let got = state(&h);
                        assert!(allowed.contains(&got), "{what}: torn state {got:?}");
                        drop(h);
                        assert_clean(&m2, &what);
                    }
                }
            }
        }
        assert!(opened > 0, "{window_ms} ms: no image opened");
        assert!(
            !admitted || refused > 0,
            "{window_ms} ms: no missed window was refused"
        );
        assert!(by_fate[0] > 0 && by_fate[1] > 0, "{by_fate:?}");
        println!(
            "flush-on-fail, {window_ms} ms: {} saved and {} missed-window images, {opened} opened, {refused} refused",
            by_fate[0], by_fate[1]
        );
    }
}
