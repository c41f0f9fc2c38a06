//! Crash consistency of a protected store (eager redundancy over every region of its pool), on
//! the persistence simulator.
//!
//! A small seeded workload (with a checkpoint in the middle and a clean close at the end) runs
//! on a store whose regions are protected in eager mode: every store write to the logs, the
//! page frames, the root and the data zone goes through the integrity layer, which persists
//! data, line checksums, page checksums and parity with fences of its own. The run is crashed
//! before every fence it issues. After each crash the image is opened again with its
//! protection (the recorded mode, eager) and:
//!
//! - the store opens, its structures validate, and its contents are the model's after the
//!   acknowledged operations (or those and the one in flight);
//! - the protection is consistent: a scrub finds no damage and nothing unverifiable, because
//!   an unclean region is resynced at open, and the pages whose checksums that resync changed
//!   are listed (up to the report's limit);
//! - the store keeps working under protection: two more operations and a clean close, after
//!   which an open finds the region clean (no resync) and a scrub verifies everything.

mod model;

use std::sync::Arc;

use dstore::{Config, ProtectOptions, Store, StoreError};
use integrity::Mode;
use model::TOp;
use pmem::rng::SplitMix64;
use pmem::{CrashPlan, Domain, Medium, OpenOptions, Pool, SimConfig, SimMedium};

const OPS: usize = 12;
const CHECKPOINT_AFTER: usize = 6;
/// Room for the store and its integrity regions.
const POOL_BYTES: usize = 4 << 20;

type Guarded = dstore::Guarded<Arc<SimMedium>>;
type State = std::collections::BTreeMap<Vec<u8>, model::Dump>;
type Protection = dstore::Protection<Arc<SimMedium>>;
/// The store, its protection and the notes of its open.
type Opened = (Store<Guarded>, Arc<Protection>, Vec<String>);

fn config() -> Config {
    Config {
        grow: false,
        ..model::config(false)
    }
}

fn no_tracker(_: u64, _: u64) -> dstore::StoreResult<Box<dyn integrity::Tracker>> {
    Err(StoreError::Failed(
        "eager mode needs no write tracker".into(),
    ))
}

/// Open the store on `sim` with protection (`mode`, or the recorded one).
fn open(sim: &Arc<SimMedium>, mode: Option<Mode>) -> Result<Opened, StoreError> {
    let pool = Pool::open_medium(Arc::clone(sim), &OpenOptions::default())
        .map_err(|e| StoreError::Failed(e.to_string()))?;
    let opts = ProtectOptions {
        mode,
        period_ms: None,
        scrub_pages_per_sec: 0,
    };
    let (mut s, p, notes) = Store::open_protected(pool, config(), &opts, &no_tracker)?;
    s.set_clock(Arc::new(|| model::NOW));
    let p = p.ok_or_else(|| StoreError::Failed("no protection".into()))?;
    Ok((s, p, notes))
}

/// A fresh store, closed cleanly, then protected (eager) and closed cleanly again.
fn base_image() -> Vec<u8> {
    let sim = Arc::new(SimMedium::new(POOL_BYTES, SimConfig::default()));
    let m = Pool::format(Arc::clone(&sim), Domain::Sim).expect("format");
    let pool = Pool::open_medium(m, &OpenOptions::default()).expect("open");
    let store = Store::create(pool, config()).expect("create");
    store.close().expect("close");
    drop(store);
    let sim = Arc::new(SimMedium::from_image(
        sim.durable_image(),
        SimConfig::default(),
    ));
    let (s, p, notes) = open(&sim, Some(Mode::Eager)).expect("protect");
    assert!(
        notes.iter().any(|n| n.contains("protected from now on")),
        "{notes:?}"
    );
    s.close().expect("close");
    p.close().expect("close the protection");
    drop(s);
    sim.durable_image()
}

fn workload() -> Vec<TOp> {
    let mut rng = SplitMix64::new(5);
    (0..OPS)
        .map(|_| model::random_op(&mut rng, "", 6, false))
        .collect()
}

fn drive(sim: &Arc<SimMedium>, ops: &[TOp]) -> usize {
    let Ok((s, p, _)) = open(sim, None) else {
        return 0;
    };
    let mut acked = 0;
    for (i, op) in ops.iter().enumerate() {
        if model::run(&s, op).is_err() {
            return acked;
        }
        acked += 1;
        if i + 1 == CHECKPOINT_AFTER && s.save().is_err() {
            return acked;
        }
    }
    if s.close().is_ok() {
        let _ = p.close();
    }
    acked
}

fn check(image: Vec<u8>, acked: usize, ops: &[TOp], expect: &[State], what: &str) {
    let sim = Arc::new(SimMedium::from_image(image, SimConfig::default()));
    let (s, p, _) = open(&sim, None).unwrap_or_else(|e| panic!("{what}: open failed: {e}"));
    assert_eq!(p.mode(), Mode::Eager, "{what}: the recorded mode");
    s.validate()
        .unwrap_or_else(|e| panic!("{what}: validate: {e}"));
    let state = model::dump(&s);
    let done = if state == expect[acked] {
        acked
    } else {
        assert!(
            acked < ops.len() && state == expect[acked + 1],
            "{what}: recovered state matches neither {acked} nor {} operations",
            acked + 1
        );
        acked + 1
    };
    for c in p.covered() {
        let o = &c.opened;
        assert_eq!(
            o.resync_pages_changed_list.len() as u64,
            o.resync_pages_changed
                .min(integrity::engine::PAGES_LISTED_MAX as u64),
            "{what}: region {}: every page the resync changed is listed",
            c.name
        );
    }
    let scrub = p.check(false);
    assert!(
        scrub.findings == 0 && scrub.unverifiable == 0 && scrub.errors.is_empty(),
        "{what}: the protection is consistent after recovery: {scrub:?}"
    );
    // Carry on under protection, close cleanly, and reopen: clean, nothing resynced.
    let mut m = model::Model::default();
    for op in &ops[..done] {
        m.apply(op);
    }
    let mut rng = SplitMix64::new(done as u64 ^ 0x55);
    for _ in 0..2 {
        let op = model::random_op(&mut rng, "", 6, false);
        model::run(&s, &op).unwrap_or_else(|e| panic!("{what}: operation after recovery: {e}"));
        m.apply(&op);
    }
    s.close().expect("close");
    p.close().expect("close the protection");
    drop(s);
    let sim = Arc::new(SimMedium::from_image(
        sim.durable_image(),
        SimConfig::default(),
    ));
    let (s, p, _) = open(&sim, None).expect("reopen");
    assert_eq!(
        model::dump(&s),
        m.dump(),
        "{what}: contents after carrying on"
    );
    for c in p.covered() {
        assert_eq!(
            c.opened.resync_pages, 0,
            "{what}: region {} was closed cleanly",
            c.name
        );
    }
    let scrub = p.check(false);
    assert!(
        scrub.findings == 0 && scrub.unverifiable == 0 && scrub.errors.is_empty(),
        "{what}: clean after a clean close: {scrub:?}"
    );
}

#[test]
fn eager_protected_store_survives_a_crash_at_every_fence() {
    let base = base_image();
    let ops = workload();
    let expect = model::prefixes(&ops);
    let mut n = 1;
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
        let acked = drive(&sim, &ops);
        let Some(state) = sim.crash_state() else {
            assert_eq!(acked, OPS, "an uncrashed run acknowledges everything");
            break;
        };
        check(
            state.sampled().to_vec(),
            acked,
            &ops,
            &expect,
            &format!("fence {n}"),
        );
        n += 1;
    }
    println!("crashed at each of {} fences", n - 1);
    assert!(n > OPS as u64, "every operation forces at least once");
}

#[test]
fn the_protection_sees_a_flip_in_a_crashed_store_and_repairs_it() {
    // A bit flipped in a shadow slot of an open protected store: the scrub finds it, the
    // repair puts it back byte-exact, and the store still holds the model's contents.
    let base = base_image();
    let ops = workload();
    let sim = Arc::new(SimMedium::from_image(base, SimConfig::default()));
    assert_eq!(drive(&sim, &ops), OPS);
    let sim = Arc::new(SimMedium::from_image(
        sim.durable_image(),
        SimConfig::default(),
    ));
    let (s, p, _) = open(&sim, None).expect("open");
    // The store's writes go through the integrity layer.
    let op = model::random_op(&mut SplitMix64::new(9), "", 6, false);
    model::run(&s, &op).unwrap();
    let eager_writes: u64 = p
        .info()
        .iter()
        .find(|(k, _)| k == "eager_writes")
        .map(|(_, v)| v.parse().unwrap())
        .unwrap();
    assert!(eager_writes > 0, "eager writes: {eager_writes}");
    let mut m = model::Model::default();
    for op in ops.iter().chain([&op]) {
        m.apply(op);
    }
    let slot = p
        .covered()
        .iter()
        .find(|c| c.name == "dipper.slot.0")
        .expect("a fixed-size pool's slot is covered")
        .offset as usize;
    // Behind the store's back, while it is open (as bit rot would).
    let mut b = [0u8; 1];
    sim.read(slot + 64, &mut b);
    sim.inject(slot + 64, &[b[0] ^ 4]).unwrap();
    let found = p.check(false);
    assert_eq!(found.findings, 1, "{found:?}");
    let fixed = p.check(true);
    assert_eq!(fixed.repaired, 1, "{fixed:?}");
    let mut after = [0u8; 1];
    sim.read(slot + 64, &mut after);
    assert_eq!(after, b, "repaired byte-exact");
    assert_eq!(model::dump(&s), m.dump());
    s.close().unwrap();
    p.close().unwrap();
}
