//! DIPPER's apply-then-log path on the persistence simulator, with a toy machine: each shard
//! keeps a counter in arena user word 0, an operation adds a `u64` to it.
//!
//! - what the body changed is what the record redoes: after a power failure, recovery replays
//!   it to the same state, and a checkpoint replays it into the image;
//! - a body that logs nothing leaves nothing to replay (so it must change nothing);
//! - a body that reports a failed change (`Locked::fail`) latches the engine: reads and writes
//!   are refused until reopened, and recovery gives the state before it;
//! - growth is refused by `Locked::admits_growth` when the slots cannot hold more.

use std::sync::Arc;

use dipper::arena::Arena;
use dipper::{Dipper, DipperError, Layout, Machine, Options, Result};
use pmem::{Domain, OpenOptions, Pool, SimConfig, SimMedium};

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

fn options() -> Options {
    Options {
        background: false,
        ..Options::default()
    }
}

fn create() -> (Arc<SimMedium>, Engine) {
    create_with(options())
}

fn create_with(opts: Options) -> (Arc<SimMedium>, Engine) {
    let sim = Arc::new(SimMedium::new(4 << 20, SimConfig::default()));
    let m = Pool::format(Arc::clone(&sim), Domain::Sim).expect("format");
    let pool = Pool::open_medium(m, &OpenOptions::default()).expect("open");
    let layout = Layout {
        log_bytes: 64 * 1024,
        slot_bytes: 1 << 20,
        shards: 4,
        machine: 0,
    };
    let (engine, _) = Dipper::create(pool, &layout, Counter, opts).expect("create");
    (sim, engine)
}

/// Reopen from what is durable (a power failure now).
fn reopen(sim: &SimMedium) -> Engine {
    let sim = Arc::new(SimMedium::from_image(
        sim.durable_image(),
        SimConfig::default(),
    ));
    let pool = Pool::open_medium(sim, &OpenOptions::default()).expect("pool");
    Dipper::open(pool, Counter, options()).expect("reopen").0
}

fn counters(e: &Engine) -> Vec<u64> {
    (0..e.shards())
        .map(|s| e.read(s, |a| a.user(0)).expect("read"))
        .collect()
}

/// Add `delta` on shards `ids` (every shard for `None`), logging the same.
fn add(e: &Engine, ids: Option<&[u16]>, delta: u64) -> Result<bool> {
    e.apply_then_log(ids, |locked| {
        for i in 0..locked.ids().len() {
            let a = locked.arena_mut(i);
            a.set_user(0, a.user(0) + delta);
        }
        let seen = locked.arena(0).user(0) >= delta;
        (
            seen,
            Some((ids.map(<[u16]>::to_vec), delta.to_le_bytes().to_vec())),
        )
    })
}

#[test]
fn what_the_body_applied_is_what_recovery_and_checkpoints_replay() {
    let (sim, e) = create();
    assert!(
        add(&e, Some(&[1, 3]), 5).unwrap(),
        "the body sees its writes"
    );
    add(&e, None, 2).unwrap();
    assert_eq!(counters(&e), vec![2, 7, 2, 7]);
    let back = reopen(&sim);
    assert_eq!(counters(&back), vec![2, 7, 2, 7], "replayed from the log");
    assert_eq!(back.stats().operations, 0);
    back.checkpoint().expect("checkpoint");
    drop(back);
    add(&e, Some(&[0]), 1).unwrap();
    e.checkpoint().expect("checkpoint");
    add(&e, Some(&[2]), 10).unwrap();
    let back = reopen(&sim);
    assert_eq!(
        counters(&back),
        vec![3, 7, 12, 7],
        "image of the checkpoint plus the log"
    );
}

#[test]
fn a_body_that_logs_nothing_leaves_nothing_to_replay() {
    let (sim, e) = create();
    let out = e
        .apply_then_log(Some(&[0]), |locked| (locked.ids().to_vec(), None))
        .unwrap();
    assert_eq!(out, vec![0]);
    assert_eq!(e.stats().operations, 0);
    let back = reopen(&sim);
    assert_eq!(counters(&back), vec![0; 4]);
}

#[test]
fn a_reported_failure_latches_the_engine_until_reopened() {
    let (sim, e) = create();
    add(&e, Some(&[0]), 1).unwrap();
    let r = e.apply_then_log(Some(&[0, 1]), |locked| {
        locked.arena_mut(0).set_user(0, 99);
        locked.fail("half applied".into());
        ((), Some((Some(vec![0]), 98u64.to_le_bytes().to_vec())))
    });
    assert!(
        matches!(r, Err(DipperError::Failed(ref m)) if m.contains("half applied")),
        "{r:?}"
    );
    assert!(e.failure().is_some());
    assert!(matches!(
        e.read(0, |a| a.user(0)),
        Err(DipperError::Failed(_))
    ));
    assert!(matches!(
        e.read_many(&[1], |_| ()),
        Err(DipperError::Failed(_))
    ));
    assert!(matches!(
        add(&e, Some(&[2]), 1),
        Err(DipperError::Failed(_))
    ));
    assert!(e.execute(Some(&[2]), &1u64.to_le_bytes(), false).is_err());
    let back = reopen(&sim);
    assert_eq!(
        counters(&back),
        vec![1, 0, 0, 0],
        "nothing of the failed transaction was logged"
    );
}

#[test]
fn a_failed_append_latches_the_engine() {
    let (sim, e) = create();
    add(&e, None, 1).unwrap();
    // Power fails now: the next record cannot be forced, after its body changed the arenas.
    let image = sim.power_fail();
    let r = add(&e, Some(&[1]), 5);
    assert!(matches!(r, Err(DipperError::Failed(_))), "{r:?}");
    assert!(
        e.read(1, |a| a.user(0)).is_err(),
        "the DRAM state, ahead of the log, is not readable"
    );
    drop(e);
    let sim = Arc::new(SimMedium::from_image(image, SimConfig::default()));
    let back = reopen(&sim);
    assert_eq!(
        counters(&back),
        vec![1; 4],
        "the state before the failed record"
    );
}

#[test]
fn growth_is_refused_when_the_slots_are_full() {
    let (_sim, e) = create();
    let capacity = e.stats().slot_capacity_bytes as usize;
    let r = e.apply_then_log(Some(&[0]), |locked| {
        let before = locked.admits_growth();
        // Grow shard 0's arena past what the slots hold, as a body that ignored the check would.
        let a = locked.arena_mut(0);
        while a.len() < capacity {
            a.alloc(1 << 20).expect("alloc");
        }
        let after = locked.admits_growth();
        ((before, after), None)
    });
    assert_eq!(r.unwrap(), (true, false));
}

#[test]
fn a_write_that_finds_the_log_full_is_counted_with_its_wait() {
    let wait = std::time::Duration::from_millis(50);
    let (_, e) = create_with(Options {
        full_wait: wait,
        ..options()
    });
    assert_eq!(
        (e.stats().log_full_waits, e.stats().log_full_wait_us),
        (0, 0)
    );
    // No checkpoint thread: the write that finds the log full waits `full_wait`, then fails.
    let mut appended = 0u64;
    let err = loop {
        match e.execute(Some(&[0]), &1u64.to_le_bytes(), false) {
            Ok(()) => appended += 1,
            Err(err) => break err,
        }
        assert!(appended < 1_000_000, "a 64 KiB log never filled");
    };
    assert!(matches!(err, DipperError::OutOfSpace(_)), "{err:?}");
    let st = e.stats();
    assert_eq!(st.log_full_waits, 1, "one wait before the write gave up");
    assert!(
        st.log_full_wait_us >= wait.as_micros() as u64,
        "waited {} µs, at least {:?} expected",
        st.log_full_wait_us,
        wait
    );
    // A checkpoint empties the log: the next write does not wait.
    e.checkpoint().expect("checkpoint");
    e.execute(Some(&[0]), &1u64.to_le_bytes(), false)
        .expect("a write after the checkpoint");
    assert_eq!(e.stats().log_full_waits, 1);
    assert_eq!(counters(&e)[0], appended + 1);
}
