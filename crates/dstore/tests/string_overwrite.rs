//! A string put over a live string of the same length overwrites the value bytes in the entry
//! that holds them (no new entry, no free; `machine::effects::put`). These tests run a workload
//! made mostly of such overwrites (with the deadline kept, changed, set and removed), mixed with
//! puts of other lengths, of other kinds over strings, deletions and expired keys, and check:
//! - after every transaction, the store's contents equal the reference's
//!   (`model::MemoryKeyspace`), through checkpoints, a close and a reopen (which replays the
//!   log onto the image: the recovery path runs the same overwrite);
//! - crashed before every fence on the persistence simulator, the recovered contents equal the
//!   reference after the acknowledged transactions (or those and the one in flight, whole), and
//!   the store validates.

mod effects;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use effects::{Dump, START, Tx};
use model::{Db, Effect, Value};
use pmem::rng::SplitMix64;
use pmem::{CrashPlan, SimConfig, SimMedium};

const KEYS: u64 = 4;
const DBS: u8 = 2;
/// Every value of the workload has this length, except the ones that change it on purpose.
const LEN: usize = 8;
const TXS: usize = 60;
const CHECKPOINT_AFTER: [usize; 2] = [20, 41];
/// The clock moves forward by this much after transaction [`CLOCK_STEP_AFTER`]: deadlines
/// set before in `(START, START + CLOCK_STEP_MS]` pass.
const CLOCK_STEP_MS: i64 = 1_000;
const CLOCK_STEP_AFTER: usize = 30;
const CHECK_AT: i64 = START + CLOCK_STEP_MS;

fn clock_for(i: usize) -> i64 {
    if i > CLOCK_STEP_AFTER {
        START + CLOCK_STEP_MS
    } else {
        START
    }
}

fn fill(rng: &mut SplitMix64, len: usize) -> Vec<u8> {
    (0..len).map(|_| b'a' + rng.below(26) as u8).collect()
}

/// One effect of the workload, mostly a same-length string put.
fn effect(rng: &mut SplitMix64, now: i64) -> Effect {
    let db = rng.below(u64::from(DBS)) as Db;
    let key = format!("k{}", rng.below(KEYS)).into_bytes();
    let expire_at_ms = match rng.below(6) {
        0 => now + CLOCK_STEP_MS / 2,
        1 => now + 10 * CLOCK_STEP_MS,
        _ => 0,
    };
    match rng.below(20) {
        0 => Effect::Del { db, key },
        1 => Effect::Put {
            db,
            key,
            value: Value::String({
                let n = LEN + 1 + rng.below(4) as usize;
                fill(rng, n)
            }),
            expire_at_ms,
        },
        2 => Effect::Put {
            db,
            key,
            value: Value::String({
                let n = rng.below(LEN as u64) as usize;
                fill(rng, n)
            }),
            expire_at_ms,
        },
        3 => Effect::Put {
            db,
            key,
            value: Value::Hash(vec![(b"f".to_vec(), fill(rng, LEN))]),
            expire_at_ms,
        },
        _ => Effect::Put {
            db,
            key,
            value: Value::String(fill(rng, LEN)),
            expire_at_ms,
        },
    }
}

fn workload(seed: u64) -> Vec<Tx> {
    let mut rng = SplitMix64::new(seed);
    (0..TXS)
        .map(|i| Tx {
            calls: vec![vec![effect(&mut rng, clock_for(i))]],
            all: false,
        })
        .collect()
}

/// The reference's contents after each prefix of `txs`, read at [`CHECK_AT`].
fn prefixes(txs: &[Tx]) -> Vec<Dump> {
    let clock = Arc::new(AtomicI64::new(START));
    let r = effects::reference(&clock);
    let mut out = vec![];
    let mut snap = |r: &model::MemoryKeyspace, resume: i64| {
        clock.store(CHECK_AT, Ordering::SeqCst);
        out.push(effects::dump(r));
        clock.store(resume, Ordering::SeqCst);
    };
    snap(&r, START);
    for (i, tx) in txs.iter().enumerate() {
        clock.store(clock_for(i), Ordering::SeqCst);
        effects::run(&r, tx).expect("the reference never fails");
        snap(&r, clock_for(i));
    }
    out
}

/// The workload overwrites strings of the same length many times (so the in-place path runs),
/// and changes their deadlines while doing so.
#[test]
fn the_workload_overwrites_same_length_strings() {
    let txs = workload(5);
    let clock = Arc::new(AtomicI64::new(START));
    let r = effects::reference(&clock);
    let (mut same, mut deadline_changed) = (0, 0);
    for (i, tx) in txs.iter().enumerate() {
        clock.store(clock_for(i), Ordering::SeqCst);
        if let [
            Effect::Put {
                db,
                key,
                value: Value::String(s),
                expire_at_ms,
            },
        ] = tx.calls[0].as_slice()
        {
            let now = effects::dump(&r);
            let old = now.iter().find(|(d, k, _, _)| d == db && k == key);
            if let Some((_, _, Value::String(v), old_deadline)) = old
                && v.len() == s.len()
            {
                same += 1;
                deadline_changed += usize::from(old_deadline != expire_at_ms);
            }
        }
        effects::run(&r, tx).expect("reference");
    }
    assert!(same >= 20, "{same} same-length overwrites");
    assert!(
        deadline_changed >= 5,
        "{deadline_changed} with a new deadline"
    );
}

#[test]
fn overwrites_match_the_reference_through_checkpoints_and_a_reopen() {
    let txs = workload(5);
    let expect = prefixes(&txs);
    let cfg = effects::config();
    let sim = Arc::new(SimMedium::from_image(
        effects::base_image(&cfg),
        SimConfig::default(),
    ));
    let clock = Arc::new(AtomicI64::new(START));
    let store = effects::open(Arc::clone(&sim), &cfg, &clock).expect("open");
    for (i, tx) in txs.iter().enumerate() {
        clock.store(clock_for(i), Ordering::SeqCst);
        effects::run(&store, tx).expect("a transaction");
        if CHECKPOINT_AFTER.contains(&(i + 1)) {
            store.save().expect("checkpoint");
        }
        clock.store(CHECK_AT, Ordering::SeqCst);
        assert_eq!(
            effects::dump(&store),
            expect[i + 1],
            "after transaction {i}"
        );
        store.validate().expect("structures validate");
    }
    // Reopen without a checkpoint at close: the log after the last checkpoint is replayed.
    let image = sim.power_fail();
    drop(store);
    let sim = Arc::new(SimMedium::from_image(image, SimConfig::default()));
    let store = effects::open(sim, &cfg, &clock).expect("reopen");
    store
        .validate()
        .expect("structures validate after the replay");
    assert_eq!(effects::dump(&store), expect[TXS], "after the replay");
}

fn recover(image: Vec<u8>) -> Option<Dump> {
    let sim = Arc::new(SimMedium::from_image(image, SimConfig::default()));
    let clock = Arc::new(AtomicI64::new(CHECK_AT));
    let s = effects::open(sim, &effects::config(), &clock).ok()?;
    s.validate().expect("recovered structures validate");
    Some(effects::dump(&s))
}

#[test]
fn a_crash_before_any_fence_loses_no_acknowledged_overwrite() {
    let base = effects::base_image(&effects::config());
    let txs = workload(9);
    let expect = prefixes(&txs);
    let mut n = 1;
    loop {
        let sim = Arc::new(SimMedium::from_image(
            base.clone(),
            SimConfig {
                seed: n,
                crash: CrashPlan::AtFence(n),
                evict_per_million: 200_000,
                ..SimConfig::default()
            },
        ));
        let clock = Arc::new(AtomicI64::new(START));
        let mut acked = 0;
        if let Ok(store) = effects::open(Arc::clone(&sim), &effects::config(), &clock) {
            for (i, tx) in txs.iter().enumerate() {
                clock.store(clock_for(i), Ordering::SeqCst);
                if effects::run(&store, tx).is_err() {
                    break;
                }
                acked += 1;
                if CHECKPOINT_AFTER.contains(&(i + 1)) && store.save().is_err() {
                    break;
                }
            }
            let _ = store.close();
        }
        let Some(state) = sim.crash_state() else {
            assert_eq!(acked, TXS, "an uncrashed run acknowledges everything");
            break;
        };
        let got = recover(state.sampled().to_vec())
            .unwrap_or_else(|| panic!("fence {n}: recovery failed"));
        assert!(
            got == expect[acked] || (acked < TXS && got == expect[acked + 1]),
            "fence {n}: recovered contents match neither {acked} nor {} transactions\n got \
             {got:?}\n want {:?}",
            acked + 1,
            expect[acked]
        );
        n += 1;
    }
    assert!(n > TXS as u64, "every transaction forces ({n} fences)");
}
