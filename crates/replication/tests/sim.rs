//! Deterministic simulation of quorum replication: simulated media (power failures that drop or
//! tear unflushed cache lines, media armed to crash in the middle of an operation), a simulated
//! network (lost requests, lost answers, delayed requests delivered steps later, partitions),
//! crashes, restarts, primaries stepping down without a power failure, permanent copy loss
//! (wiped copies), cleanup (the ring wraps), takeovers with zombie primaries, and overlapping
//! operations (a recovery runs while another one is between two message batches), all driven
//! by one seed per run. `sim/model.rs` describes the model.
//!
//! Checked in every run:
//! - after every successful recovery: nothing committed before it started (acknowledged, or in
//!   an earlier recovered history) is missing; every record is a payload a client appended,
//!   intact, once, at the one LSN it was ever seen at; no recovery took the same epoch before,
//!   nor a higher one that had succeeded before this one started; every live backup holds
//!   exactly the primary's records;
//! - on every acknowledged write: its epoch's primary is the node that acknowledged it, and no
//!   recovery of a later epoch had succeeded before the append started;
//! - at the end, with the network healed and every node power-cycled: one recovery succeeds
//!   with every backup live, every copy holds the same records, every acknowledged write is
//!   there (unless a client cleaned it up), and acknowledged writes are in real-time order.
//!
//! Copies are lost (wiped) at most `model::quorum_loss_budget` times per run: min(W, N - W),
//! the N - W wherever the W + 1 copies of a write can survive that many losses (see
//! `n_minus_w_losses_keep_acknowledged_writes`, `w_losses_can_break_the_fence`). Bit flips in
//! a copy's ring are not survived when that copy holds the newest epoch, so they are off in the
//! main run (see `bit_flip_in_the_newest_copy_is_not_survived`).
//!
//! Replay one seed with its trace:
//! `SIM_SEED=123 cargo test -p kavach-replication --test sim -- --ignored replay --nocapture`
//! (`SIM_VERBOSE=1`: every message too; `SIM_CANARY=1`: epoch check off;
//! `SIM_LOSS=n-w|w|none`: N - W, W or no losses instead of the main run's budget; `SIM_FLIPS=1`:
//! bit flips). `SIM_SEEDS=n` (and `SIM_FIRST=f`) run seeds `f..f + n` instead of `0..1000`; the
//! ignored `search` test lists the seeds that fail with the epoch check off, with N - W losses,
//! with W losses, and with bit flips.

#[path = "sim/model.rs"]
mod model;

use model::{Counters, LossBudget, Opts, Outcome, run};

/// Seeds of the main test (at least 1000, as the issue requires).
const SEEDS: u64 = 1000;
/// A seed that loses acknowledged writes when recovery ignores the superline epoch.
const CANARY_SEED: u64 = 2085;
/// A seed that lost acknowledged writes with N - W copies lost (N=2, W=1, one wipe) while a
/// wiped copy counted toward the read quorum.
const N_MINUS_W_SEED: u64 = 464;
/// A seed where W losses (N=2, W=2) give two primaries one epoch.
const W_LOSSES_SEED: u64 = 602;
/// A seed that loses acknowledged writes to one bit flip (N=1, W=1).
const FLIP_SEED: u64 = 254;

/// The seeds to run: `SIM_FIRST..SIM_FIRST + SIM_SEEDS` (default `0..SEEDS`).
fn seeds() -> std::ops::Range<u64> {
    let var = |name: &str| std::env::var(name).ok().and_then(|s| s.parse().ok());
    let first = var("SIM_FIRST").unwrap_or(0);
    first..first + var("SIM_SEEDS").unwrap_or(SEEDS)
}

fn report(o: &Outcome) -> String {
    let p = &o.params;
    let mut env = format!("SIM_SEED={}", p.seed);
    if !p.epoch_check {
        env.push_str(" SIM_CANARY=1");
    }
    if p.loss != LossBudget::Quorum {
        env.push_str(&format!(" SIM_LOSS={}", p.loss.name()));
    }
    if p.flips {
        env.push_str(" SIM_FLIPS=1");
    }
    format!(
        "{}\n\nfailure: {}\nreplay: {env} cargo test -p kavach-replication --test sim -- \
         --ignored replay --nocapture",
        o.trace.join("\n"),
        o.failure.as_deref().unwrap_or("none"),
    )
}

/// Run `seeds` on every core; the outcomes in seed order.
fn run_many(seeds: std::ops::Range<u64>, opts: Opts) -> Vec<Outcome> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let next = std::sync::atomic::AtomicU64::new(seeds.start);
    let mut all: Vec<Outcome> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let seed = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if seed >= seeds.end {
                            return out;
                        }
                        out.push(run(seed, opts));
                    }
                })
            })
            .collect();
        hs.into_iter()
            .flat_map(|h| h.join().expect("simulation thread"))
            .collect()
    });
    all.sort_by_key(|o| o.params.seed);
    all
}

/// Seeds that lost acknowledged writes or left copies disagreeing before a fix in
/// `src/primary.rs` or `src/copy.rs` (each fails with its fix undone, found by searching
/// `SIM_SEEDS` seeds); most lie beyond the main run's range.
const REGRESSIONS: [(u64, &str); 7] = [
    (
        28,
        "a copy persists what it reports before promising (Copy::promise)",
    ),
    (
        162,
        "delta repair: the backup's tail must be an entry of the chosen history",
    ),
    (
        193440,
        "delta repair: the backup must hold the chosen history from its head",
    ),
    (456, "rebuild: the superlines are fetched after the ring"),
    (
        36369,
        "rebuild: a batch read is written only if the source is unchanged",
    ),
    (
        10322,
        "full repair: the rest of the ring is zeroed after the superlines",
    ),
    (
        85861,
        "repair: the two superline copies are shipped one at a time",
    ),
];

#[test]
fn regression_seeds() {
    for (seed, what) in REGRESSIONS {
        let o = run(seed, Opts::default());
        assert!(o.failure.is_none(), "{what}:\n{}", report(&o));
    }
}

#[test]
fn simulation_1000_seeds() {
    let range = seeds();
    let n = range.end - range.start;
    let started = std::time::Instant::now();
    let outcomes = run_many(range, Opts::default());
    let mut total = Counters::default();
    for o in &outcomes {
        total.add(&o.counters);
    }
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| o.failure.is_some()).collect();
    eprintln!(
        "{n} seeds in {:.1?}, {} failed\n{total:#?}",
        started.elapsed(),
        failed.len()
    );
    if let Some(o) = failed.first() {
        let seeds: Vec<u64> = failed.iter().map(|o| o.params.seed).collect();
        panic!(
            "{} of {n} seeds failed: {seeds:?}\nfirst failing seed:\n{}",
            failed.len(),
            report(o)
        );
    }
    // The simulation must not silently degenerate: every kind of trouble happens.
    let c = &total;
    let must = [
        ("acknowledged appends", c.appends_ok),
        ("failed appends", c.appends_err),
        (
            "appends refused to superseded primaries",
            c.zombie_appends_refused,
        ),
        ("successful recoveries", c.recoveries_ok),
        ("failed recoveries", c.recoveries_err),
        ("recoveries that died with their node", c.recoveries_died),
        ("local copies rebuilt from a backup", c.rebuilt_local),
        ("full repairs", c.repairs_full),
        ("delta repairs", c.repairs_delta),
        ("failed repairs", c.repairs_failed),
        ("backups compared with their primary", c.backups_compared),
        ("fenced answers", c.fenced_answers),
        ("lost requests", c.lost_requests),
        ("lost answers", c.lost_answers),
        ("messages blocked by partitions", c.blocked),
        ("delayed requests delivered", c.delayed_delivered),
        ("delayed requests applied", c.delayed_applied),
        ("delayed requests fenced", c.delayed_fenced),
        ("crashes", c.crashes),
        ("crashes in the middle of an operation", c.armed_crashes),
        ("wiped copies", c.wipes),
        ("cleanups", c.cleanups),
        ("histories that wrap around the ring", c.wrapped_histories),
        ("nested events", c.nested),
        ("overlapping elections", c.nested_elections),
        ("acknowledged writes checked at the end", c.final_acked),
    ];
    let none: Vec<&str> = must.iter().filter(|m| m.1 == 0).map(|m| m.0).collect();
    assert!(none.is_empty(), "the simulation never produced: {none:?}");
}

/// With the epoch left out of the choice of history (and of the repair's prefix test),
/// recovery loses acknowledged writes: the check is needed, and the simulation notices.
#[test]
fn canary_without_the_epoch_check_loses_acknowledged_writes() {
    let canary = Opts {
        epoch_check: false,
        budget: LossBudget::None,
        ..Opts::default()
    };
    let bad = run(CANARY_SEED, canary);
    assert!(
        bad.failure.is_some(),
        "seed {CANARY_SEED} passes with the epoch check off:\n{}",
        report(&bad)
    );
    let good = run(CANARY_SEED, Opts::default());
    assert!(good.failure.is_none(), "{}", report(&good));
}

/// N - W losses: with N=2, W=1 a write acknowledged by one backup (the other one down) is on
/// two copies; the backup's copy is wiped, the primary is down, and the wiped copy and the
/// stale third one once formed a read quorum that never saw the write. A wiped copy no longer
/// counts toward R unless every copy answers, and this seed (and every main-run seed with the
/// N - W budget, where W + 1 copies can survive it) passes.
#[test]
fn n_minus_w_losses_keep_acknowledged_writes() {
    let opts = Opts {
        budget: LossBudget::NMinusW,
        ..Opts::default()
    };
    let o = run(N_MINUS_W_SEED, opts);
    assert!(o.failure.is_none(), "{}", report(&o));
    assert_eq!(o.params.quorum.backups(), 2);
    assert_eq!(o.params.quorum.write(), 1);
    assert_eq!(o.counters.wipes, 1);
}

/// W losses with W a majority of the copies (N=2, W=2) are more than the fence survives: the
/// copies two recoveries both asked for a promise were wiped in between, and two primaries
/// took one epoch. This pins a seed showing the limit (beyond the N - W = 0 here). (If
/// the protocol learns to survive it, this test fails: raise the budget in the main run.)
#[test]
fn w_losses_can_break_the_fence() {
    let opts = Opts {
        budget: LossBudget::Write,
        ..Opts::default()
    };
    let o = run(W_LOSSES_SEED, opts);
    let failure = o.failure.as_deref().unwrap_or("");
    assert!(failure.contains("two primaries"), "{}", report(&o));
    assert_eq!(o.params.quorum.backups(), 2);
    assert_eq!(o.params.quorum.write(), 2);
    assert!(o.counters.wipes >= 1);
}

/// A bit flip in a copy's live ring is not survived when that copy holds the highest superline
/// epoch (here: the local copy of a candidate whose recovery failed after it set the epoch):
/// recovery takes the highest epoch first and counts a copy whose record fails its CRC only up
/// to that record, so it chooses the truncated history. The walk cannot tell damage in the
/// middle of a copy from a record torn at its end by a crash, so the protocol has no safe way
/// to distrust it. The main run therefore loses copies only by wiping them; this pins a seed
/// showing the limit. (If the protocol learns to survive it, this test fails: turn flips on in
/// the main run.)
#[test]
fn bit_flip_in_the_newest_copy_is_not_survived() {
    let opts = Opts {
        flips: true,
        ..Opts::default()
    };
    let o = run(FLIP_SEED, opts);
    assert!(o.failure.is_some(), "{}", report(&o));
    assert_eq!(o.counters.flips, 1);
    assert_eq!(o.counters.wipes, 0);
}

/// Replay one seed (`SIM_SEED`) and print its trace.
#[test]
#[ignore]
fn replay() {
    let seed = std::env::var("SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let opts = Opts {
        epoch_check: std::env::var("SIM_CANARY").is_err(),
        budget: LossBudget::from_env(),
        flips: std::env::var("SIM_FLIPS").is_ok(),
    };
    let o = run(seed, opts);
    println!("{}\n{:#?}", report(&o), o.counters);
}

/// Print the first seeds that fail with the epoch check off, or with N - W losses.
#[test]
#[ignore]
fn search() {
    let range = seeds();
    let n = range.end - range.start;
    for (name, opts) in [
        (
            "epoch check off (no copy lost)",
            Opts {
                epoch_check: false,
                budget: LossBudget::None,
                ..Opts::default()
            },
        ),
        (
            "N - W losses",
            Opts {
                budget: LossBudget::NMinusW,
                ..Opts::default()
            },
        ),
        (
            "W losses",
            Opts {
                budget: LossBudget::Write,
                ..Opts::default()
            },
        ),
        (
            "bit flips",
            Opts {
                flips: true,
                ..Opts::default()
            },
        ),
    ] {
        let out = run_many(range.clone(), opts);
        let bad: Vec<String> = out
            .iter()
            .filter(|o| o.failure.is_some())
            .take(20)
            .map(|o| {
                format!(
                    "{} (N={} W={}): {}",
                    o.params.seed,
                    o.params.quorum.backups(),
                    o.params.quorum.write(),
                    o.failure.as_deref().unwrap_or("")
                )
            })
            .collect();
        println!("{name}: {} of {n} fail\n{}", bad.len(), bad.join("\n"));
    }
}
