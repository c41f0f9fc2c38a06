//! DIPPER's ablation variants (benchmark-only, `dipper::ablation`) on the persistence
//! simulator: each still recovers.
//!
//! - For DIPPER's checkpoint, the copy-on-write one, the quiescing one and physical redo
//!   logging: a run of operations with one checkpoint in the middle is crashed before every
//!   fence it issues; every crash image worth checking recovers (with the same variant) to the
//!   state after the acknowledged operations, or after those and the one in flight; the
//!   recovered store then takes another checkpoint and a clean reopen gives the same state.
//! - Copy-on-write: a writer that reaches a shard the checkpoint has not copied yet copies it
//!   before its change, so the image holds the operations of the archived log and none of the
//!   new log (an operation counted twice or lost would show after recovery).
//! - Quiescing: while the checkpoint runs, every shard is write-locked (a writer waits); with
//!   DIPPER's checkpoint, stopped at the same point, none is.
//! - Physical logging: recovery applies the logged bytes and never runs the operation's code.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use dipper::ablation::{CheckpointStyle, Physical, execute_physical};
use dipper::arena::Arena;
use dipper::{Dipper, DipperError, Layout, Machine, Options, Result};
use pmem::{CrashPlan, Domain, OpenOptions, Pool, SimConfig, SimMedium};

const SHARDS: usize = 4;
const WORDS: usize = 6;
/// User word holding a shard's counter.
const COUNTER: usize = 7;

/// Operation codes of the test machine.
const PUT: u8 = 1;
const ADD: u8 = 2;
/// An `ADD` that waits for [`Gate::release`] while the gate is armed.
const ADD_BLOCKING: u8 = 3;

/// A pause point inside `apply`, for the concurrency tests.
#[derive(Debug, Default)]
struct Gate {
    armed: AtomicBool,
    entered: AtomicBool,
    open: Mutex<bool>,
    cond: Condvar,
}

impl Gate {
    fn wait(&self) {
        if !self.armed.load(Ordering::Acquire) {
            return;
        }
        self.entered.store(true, Ordering::Release);
        let g = self.open.lock().expect("gate");
        drop(self.cond.wait_while(g, |open| !*open).expect("gate"));
    }

    fn release(&self) {
        *self.open.lock().expect("gate") = true;
        self.cond.notify_all();
    }

    fn wait_entered(&self) {
        while !self.entered.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
    }
}

/// Per shard: `WORDS` values (each a block `[u32 length][bytes]` named by a user word) and a
/// counter. `PUT [word] [bytes..]` replaces a value (the old block is freed, a new one
/// allocated: allocator changes, and growth for large values); `ADD [u64]` adds to the
/// counter (replayed twice, it shows).
#[derive(Debug, Clone, Default)]
struct Kv {
    /// When set, running an operation's code is an error (recovery of physical records must
    /// not need it).
    forbid: Arc<AtomicBool>,
    gate: Arc<Gate>,
}

fn bad(field: &'static str, found: String) -> DipperError {
    DipperError::Corrupt {
        structure: "test op",
        offset: 0,
        field,
        expected: "a valid test operation".into(),
        found,
    }
}

impl Machine for Kv {
    type Output = ();

    fn init(&self, _shard: usize, _arena: &mut Arena) -> Result<()> {
        Ok(())
    }

    fn apply(&self, _shard: usize, arena: &mut Arena, op: &[u8], _out: &mut ()) -> Result<()> {
        if self.forbid.load(Ordering::Acquire) {
            return Err(DipperError::Failed(
                "the operation's code ran during recovery".into(),
            ));
        }
        match op.first() {
            Some(&PUT) if op.len() >= 2 && (op[1] as usize) < WORDS => {
                let w = op[1] as usize;
                let old = arena.user(w);
                if old != 0 {
                    let len = arena.get_u32(old as usize) as usize;
                    arena.free(old, len + 4);
                }
                let data = &op[2..];
                let at = arena.alloc(data.len() + 4)?;
                arena.put_u32(at as usize, data.len() as u32);
                arena.write(at as usize + 4, data);
                arena.set_user(w, at);
                Ok(())
            }
            Some(&c @ (ADD | ADD_BLOCKING)) if op.len() == 9 => {
                if c == ADD_BLOCKING {
                    self.gate.wait();
                }
                let d = u64::from_le_bytes(op[1..9].try_into().expect("8 bytes"));
                arena.set_user(COUNTER, arena.user(COUNTER).wrapping_add(d));
                Ok(())
            }
            _ => Err(bad("op", format!("{op:?}"))),
        }
    }
}

/// What a shard shows: its values and its counter.
type ShardState = (Vec<Option<Vec<u8>>>, u64);

fn observe(a: &Arena) -> ShardState {
    let values = (0..WORDS)
        .map(|w| {
            let at = a.user(w) as usize;
            (at != 0).then(|| {
                let len = a.get_u32(at) as usize;
                a.bytes(at + 4, len).to_vec()
            })
        })
        .collect();
    (values, a.user(COUNTER))
}

#[derive(Debug, Clone)]
struct Op {
    shards: Option<Vec<u16>>,
    bytes: Vec<u8>,
}

/// The reference: the state after each prefix of `ops`.
fn prefixes(ops: &[Op]) -> Vec<Vec<ShardState>> {
    let mut st: Vec<ShardState> = vec![(vec![None; WORDS], 0); SHARDS];
    let mut out = vec![st.clone()];
    for op in ops {
        let ids: Vec<usize> = match &op.shards {
            Some(s) => s.iter().map(|&i| i as usize).collect(),
            None => (0..SHARDS).collect(),
        };
        for i in ids {
            match op.bytes[0] {
                PUT => st[i].0[op.bytes[1] as usize] = Some(op.bytes[2..].to_vec()),
                _ => {
                    let d = u64::from_le_bytes(op.bytes[1..9].try_into().expect("8"));
                    st[i].1 = st[i].1.wrapping_add(d);
                }
            }
        }
        out.push(st.clone());
    }
    out
}

fn put(shard: u16, word: u8, len: usize, fill: u8) -> Op {
    let mut bytes = vec![PUT, word];
    bytes.extend((0..len).map(|i| fill.wrapping_add(i as u8)));
    Op {
        shards: Some(vec![shard]),
        bytes,
    }
}

fn add(shards: Option<Vec<u16>>, d: u64) -> Op {
    let mut bytes = vec![ADD];
    bytes.extend_from_slice(&d.to_le_bytes());
    Op { shards, bytes }
}

/// Operations before the crashed run (in the base image), and the run: a checkpoint is taken
/// after `RUN_CHECKPOINT_AFTER` of its operations.
fn workload() -> (Vec<Op>, Vec<Op>) {
    let before = vec![
        put(0, 0, 100, 1),
        put(1, 1, 3000, 2),
        add(None, 3),
        put(2, 2, 40, 3),
        add(Some(vec![1, 3]), 5),
    ];
    let run = vec![
        put(0, 0, 120, 4),
        add(Some(vec![2]), 7),
        // Grows shard 3's arena past its first 64 KiB.
        put(3, 4, 90_000, 5),
        put(1, 1, 10, 6),
        add(None, 11),
        put(2, 5, 500, 7),
        add(Some(vec![0, 2]), 13),
        put(3, 4, 20, 8),
    ];
    (before, run)
}

const RUN_CHECKPOINT_AFTER: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Dipper,
    Cow,
    Quiesce,
    Physical,
}

type Engine = Dipper<Arc<SimMedium>, Physical<Kv>>;

fn options() -> Options {
    Options {
        background: false,
        checkpoint_on_close: false,
        ..Options::default()
    }
}

fn layout() -> Layout {
    Layout {
        log_bytes: 512 * 1024,
        slot_bytes: 1 << 20,
        shards: SHARDS,
        machine: 0,
    }
}

fn styled(e: Engine, v: Variant) -> Engine {
    let style = match v {
        Variant::Dipper | Variant::Physical => CheckpointStyle::Dipper,
        Variant::Cow => CheckpointStyle::CopyOnWrite,
        Variant::Quiesce => CheckpointStyle::Quiesce,
    };
    e.set_checkpoint_style(style).expect("style");
    e
}

fn open_sim(sim: Arc<SimMedium>, v: Variant, kv: Kv) -> Result<Engine> {
    let pool = Pool::open_medium(sim, &OpenOptions::default())?;
    let (e, _) = Dipper::open(pool, Physical::new(kv, SHARDS), options())?;
    Ok(styled(e, v))
}

fn run_op(e: &Engine, v: Variant, op: &Op) -> Result<()> {
    match v {
        Variant::Physical => execute_physical(e, op.shards.as_deref(), &op.bytes),
        _ => e.execute(op.shards.as_deref(), &op.bytes, true),
    }
}

fn state(e: &Engine) -> Vec<ShardState> {
    (0..SHARDS)
        .map(|s| e.read(s, observe).expect("read"))
        .collect()
}

/// A store holding `before`, closed cleanly, as a durable image.
fn base_image(v: Variant, before: &[Op]) -> Vec<u8> {
    let sim = Arc::new(SimMedium::new(8 << 20, SimConfig::default()));
    let m = Pool::format(Arc::clone(&sim), Domain::Sim).expect("format");
    let pool = Pool::open_medium(m, &OpenOptions::default()).expect("open");
    let (e, _) = Dipper::create(
        pool,
        &layout(),
        Physical::new(Kv::default(), SHARDS),
        options(),
    )
    .expect("create");
    let e = styled(e, v);
    for op in before {
        run_op(&e, v, op).expect("op");
    }
    e.checkpoint().expect("first checkpoint");
    e.close().expect("close");
    drop(e);
    sim.durable_image()
}

/// Open `image`, run `ops` with a checkpoint after `RUN_CHECKPOINT_AFTER`; returns how many
/// were acknowledged.
fn drive(sim: &Arc<SimMedium>, v: Variant, ops: &[Op]) -> usize {
    let Ok(e) = open_sim(Arc::clone(sim), v, Kv::default()) else {
        return 0;
    };
    let mut acked = 0;
    for (i, op) in ops.iter().enumerate() {
        if run_op(&e, v, op).is_err() {
            return acked;
        }
        acked += 1;
        if i + 1 == RUN_CHECKPOINT_AFTER && e.checkpoint().is_err() {
            return acked;
        }
    }
    acked
}

/// Recover `image` with variant `v` (physical: the operation's code forbidden) and check it
/// against the reference after `acked` or `acked + 1` of the run's operations.
fn check(image: Vec<u8>, v: Variant, acked: usize, expect: &[Vec<ShardState>], what: &str) {
    let kv = Kv::default();
    kv.forbid.store(v == Variant::Physical, Ordering::Release);
    let sim = Arc::new(SimMedium::from_image(image, SimConfig::default()));
    let e = open_sim(Arc::clone(&sim), v, kv.clone())
        .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
    let got = state(&e);
    let done = if got == expect[acked] {
        acked
    } else {
        assert!(
            acked + 1 < expect.len() && got == expect[acked + 1],
            "{what}: recovered state matches neither {acked} nor {} acknowledged operations\n \
             got {got:?}\n want {:?}",
            acked + 1,
            expect[acked]
        );
        acked + 1
    };
    // The recovered store keeps working: a checkpoint, a clean close, a reopen.
    kv.forbid.store(false, Ordering::Release);
    e.checkpoint()
        .unwrap_or_else(|e| panic!("{what}: checkpoint after recovery: {e}"));
    e.close().unwrap_or_else(|e| panic!("{what}: close: {e}"));
    drop(e);
    let again = Arc::new(SimMedium::from_image(
        sim.durable_image(),
        SimConfig::default(),
    ));
    let e = open_sim(again, v, Kv::default()).expect("reopen");
    assert_eq!(
        state(&e),
        expect[done],
        "{what}: after a checkpoint and reopen"
    );
}

fn every_fence(v: Variant) {
    let (before, run) = workload();
    let base = base_image(v, &before);
    let mut all = before.clone();
    all.extend(run.iter().cloned());
    let expect: Vec<Vec<ShardState>> = prefixes(&all)[before.len()..].to_vec();
    let mut n = 1;
    let mut images = 0;
    loop {
        let sim = Arc::new(SimMedium::from_image(
            base.clone(),
            SimConfig {
                seed: n,
                crash: CrashPlan::AtFence(n),
                ..SimConfig::default()
            },
        ));
        let acked = drive(&sim, v, &run);
        let Some(st) = sim.crash_state() else {
            assert_eq!(acked, run.len(), "{v:?}: an uncrashed run acknowledges all");
            break;
        };
        for img in st.images() {
            images += 1;
            check(img, v, acked, &expect, &format!("{v:?} fence {n}"));
        }
        n += 1;
    }
    println!("{v:?}: {images} crash images at {} fences", n - 1);
    assert!(
        n > run.len() as u64 + 4,
        "{v:?}: every operation forces and the checkpoint fences ({n} fences)"
    );
}

#[test]
fn dipper_checkpoint_recovers_from_a_crash_at_every_fence() {
    every_fence(Variant::Dipper);
}

#[test]
fn copy_on_write_checkpoint_recovers_from_a_crash_at_every_fence() {
    every_fence(Variant::Cow);
}

#[test]
fn quiescing_checkpoint_recovers_from_a_crash_at_every_fence() {
    every_fence(Variant::Quiesce);
}

#[test]
fn physical_logging_recovers_from_a_crash_at_every_fence() {
    every_fence(Variant::Physical);
}

/// A fresh store on the simulator with variant `v` and machine `kv`.
fn fresh(v: Variant, kv: Kv) -> (Arc<SimMedium>, Engine) {
    let sim = Arc::new(SimMedium::new(8 << 20, SimConfig::default()));
    let m = Pool::format(Arc::clone(&sim), Domain::Sim).expect("format");
    let pool = Pool::open_medium(m, &OpenOptions::default()).expect("open");
    let (e, _) =
        Dipper::create(pool, &layout(), Physical::new(kv, SHARDS), options()).expect("create");
    (sim, styled(e, v))
}

fn blocking_add(d: u64) -> Vec<u8> {
    let mut b = vec![ADD_BLOCKING];
    b.extend_from_slice(&d.to_le_bytes());
    b
}

#[test]
fn copy_on_write_copies_a_shard_before_a_writer_of_the_new_log_changes_it() {
    let kv = Kv::default();
    let (sim, e) = fresh(Variant::Cow, kv.clone());
    let e = Arc::new(e);
    let (before, _) = workload();
    for op in &before {
        run_op(&e, Variant::Cow, op).expect("op");
    }
    e.checkpoint().expect("checkpoint");
    assert_eq!(e.ablation_stats().checkpoint_copies, SHARDS as u64);
    let swaps = e.log_swaps();
    // W1 logs an add on shard 0 (in the log about to be archived) and stops inside it,
    // holding shard 0.
    kv.gate.armed.store(true, Ordering::Release);
    let w1 = {
        let e = Arc::clone(&e);
        std::thread::spawn(move || e.execute(Some(&[0]), &blocking_add(100), false))
    };
    kv.gate.wait_entered();
    // The checkpoint swaps the logs, then waits for shard 0, the first it copies.
    let ck = {
        let e = Arc::clone(&e);
        std::thread::spawn(move || e.checkpoint())
    };
    while e.log_swaps() == swaps {
        std::thread::yield_now();
    }
    // A writer of the new log on shard 2, which the checkpoint has not copied: it copies it
    // before its change.
    run_op(&e, Variant::Cow, &add(Some(vec![2]), 5)).expect("writer of the new log");
    assert_eq!(
        e.ablation_stats().writer_copies,
        1,
        "the writer copied shard 2"
    );
    kv.gate.release();
    w1.join().expect("w1").expect("w1's add");
    ck.join().expect("checkpoint thread").expect("checkpoint");
    let ab = e.ablation_stats();
    assert_eq!(ab.cow_checkpoints, 2);
    assert_eq!(
        ab.checkpoint_copies,
        2 * SHARDS as u64 - 1,
        "the checkpoint copied the three others"
    );
    // A power failure now: the image holds W1's add (archived log), the log holds shard 2's.
    let mut want = prefixes(&before).pop().expect("state");
    want[0].1 += 100;
    want[2].1 += 5;
    assert_eq!(state(&e), want);
    let image = sim.durable_image();
    drop(e);
    let pool = Pool::open_medium(
        Arc::new(SimMedium::from_image(image, SimConfig::default())),
        &OpenOptions::default(),
    )
    .expect("pool");
    let (back, report) =
        Dipper::open(pool, Physical::new(Kv::default(), SHARDS), options()).expect("recover");
    assert_eq!(report.checkpoint, 2, "the copy-on-write image is in force");
    assert_eq!(report.active_records, 1, "only shard 2's add is replayed");
    assert_eq!(state(&back), want, "each add counted once");
}

#[test]
fn copy_on_write_refuses_the_apply_first_path() {
    let (_sim, e) = fresh(Variant::Cow, Kv::default());
    match execute_physical(&e, Some(&[1]), &add(None, 1).bytes) {
        Err(DipperError::Invalid { what, .. }) => assert_eq!(what, "write path"),
        other => panic!("{other:?}"),
    }
    e.set_checkpoint_style(CheckpointStyle::Dipper)
        .expect("style");
    execute_physical(&e, Some(&[1]), &add(None, 1).bytes).expect("accepted again");
}

/// Stop a checkpoint inside its replay (an archived blocking add) and look at the shards.
fn stopped_checkpoint(v: Variant) -> (u64, bool) {
    let kv = Kv::default();
    let (_sim, e) = fresh(v, kv.clone());
    let e = Arc::new(e);
    for op in workload().0 {
        run_op(&e, v, &op).expect("op");
    }
    e.execute(Some(&[1]), &blocking_add(1), false)
        .expect("runs: the gate is not armed yet");
    kv.gate.armed.store(true, Ordering::Release);
    let ck = {
        let e = Arc::clone(&e);
        std::thread::spawn(move || e.checkpoint())
    };
    kv.gate.wait_entered();
    // Stats count the live bytes of the shards they can read-lock without waiting.
    let live = e.stats().live_bytes;
    let writer = {
        let e = Arc::clone(&e);
        std::thread::spawn(move || e.execute(Some(&[2]), &add(None, 1).bytes, false))
    };
    let mut writer = Some(writer);
    let wrote_during = if v == Variant::Dipper {
        if let Some(w) = writer.take() {
            w.join().expect("writer").expect("add");
        }
        true
    } else {
        false
    };
    kv.gate.release();
    ck.join().expect("checkpoint thread").expect("checkpoint");
    if let Some(w) = writer {
        w.join().expect("writer").expect("add after the checkpoint");
    }
    assert_eq!(state(&e)[2].1, 3 + 1, "the writer's add is in");
    (live, wrote_during)
}

#[test]
fn quiescing_checkpoint_holds_every_shard_and_dipper_holds_none() {
    let (live, _) = stopped_checkpoint(Variant::Quiesce);
    assert_eq!(
        live, 0,
        "every shard is write-locked during a quiescing checkpoint"
    );
    let (live, wrote) = stopped_checkpoint(Variant::Dipper);
    assert!(
        live > 0,
        "DIPPER's checkpoint leaves the shards to the frontend"
    );
    assert!(
        wrote,
        "a write completes while DIPPER's checkpoint is stopped"
    );
}

#[test]
fn physical_records_carry_bytes_not_operations() {
    let kv = Kv::default();
    let (sim, e) = fresh(Variant::Physical, kv.clone());
    let (before, run) = workload();
    for op in before.iter().chain(&run) {
        run_op(&e, Variant::Physical, op).expect("op");
    }
    let (records, bytes) = e.machine().logged();
    assert_eq!(records as usize, before.len() + run.len());
    assert!(
        bytes > 90_000,
        "the large value's bytes are logged: {bytes}"
    );
    let mut all = before.clone();
    all.extend(run);
    let want = prefixes(&all).pop().expect("state");
    let image = sim.durable_image();
    drop(e);
    let forbidden = Kv::default();
    forbidden.forbid.store(true, Ordering::Release);
    let back = open_sim(
        Arc::new(SimMedium::from_image(image.clone(), SimConfig::default())),
        Variant::Physical,
        forbidden,
    )
    .expect("recovery applies bytes only");
    assert_eq!(state(&back), want);
    // The same log read as logical records is refused by the machine, not misapplied.
    drop(back);
    let logical = Pool::open_medium(
        Arc::new(SimMedium::from_image(image, SimConfig::default())),
        &OpenOptions::default(),
    )
    .expect("pool");
    assert!(Dipper::open(logical, Kv::default(), options()).is_err());
}

/// A writer that fills the new log during a copy-on-write checkpoint waits for the next swap
/// holding its shard; the checkpoint must not need that shard's lock (the writer copied it),
/// or neither could go on until the writer gave up.
#[test]
fn copy_on_write_checkpoint_finishes_while_a_writer_waits_for_log_room() {
    let kv = Kv::default();
    let sim = Arc::new(SimMedium::new(8 << 20, SimConfig::default()));
    let m = Pool::format(Arc::clone(&sim), Domain::Sim).expect("format");
    let pool = Pool::open_medium(m, &OpenOptions::default()).expect("open");
    let opts = Options {
        background: true,
        checkpoint_on_close: false,
        full_wait: std::time::Duration::from_secs(5),
        ..Options::default()
    };
    let (e, _) =
        Dipper::create(pool, &layout(), Physical::new(kv.clone(), SHARDS), opts).expect("create");
    let e = Arc::new(styled(e, Variant::Cow));
    let (before, _) = workload();
    for op in &before {
        run_op(&e, Variant::Cow, op).expect("op");
    }
    e.checkpoint().expect("checkpoint");
    let swaps = e.log_swaps();
    kv.gate.armed.store(true, Ordering::Release);
    let w1 = {
        let e = Arc::clone(&e);
        std::thread::spawn(move || e.execute(Some(&[0]), &blocking_add(100), false))
    };
    kv.gate.wait_entered();
    let ck = {
        let e = Arc::clone(&e);
        std::thread::spawn(move || e.checkpoint())
    };
    while e.log_swaps() == swaps {
        std::thread::yield_now();
    }
    // W3 fills the new log with 100 KB values on shard 2: the fifth does not fit.
    const BIG: usize = 100_000;
    const PUTS: usize = 8;
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let w3 = {
        let (e, done) = (Arc::clone(&e), Arc::clone(&done));
        std::thread::spawn(move || -> Result<()> {
            for i in 0..PUTS {
                e.execute(Some(&[2]), &put(2, 3, BIG, i as u8).bytes, true)?;
                done.fetch_add(1, Ordering::AcqRel);
            }
            Ok(())
        })
    };
    let ring = e.stats().log_ring_bytes;
    loop {
        let st = e.stats();
        if done.load(Ordering::Acquire) >= 4 && st.log_used_bytes + BIG as u64 > ring {
            break;
        }
        std::thread::yield_now();
    }
    // Let W3 reach its wait for room (holding shard 2) before the checkpoint goes on.
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(
        done.load(Ordering::Acquire) < PUTS,
        "the log cannot hold all of them"
    );
    kv.gate.release();
    w1.join().expect("w1").expect("w1's add");
    ck.join().expect("checkpoint thread").expect("checkpoint");
    w3.join()
        .expect("w3")
        .expect("every put is taken once the background checkpoint swaps the logs");
    // W3 got its room at the background checkpoint's log swap, which may still be writing its
    // image: wait for it (bounded, so a checkpoint that never ends fails the test).
    assert!(
        e.log_swaps() >= swaps + 2,
        "the requested and a background swap"
    );
    let waited = std::time::Instant::now();
    while e.stats().checkpoint_running {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(60),
            "the background copy-on-write checkpoint never finished: {:?}",
            e.stats()
        );
        std::thread::yield_now();
    }
    assert!(
        e.ablation_stats().cow_checkpoints >= 3,
        "{:?}",
        e.ablation_stats()
    );
    let mut want = prefixes(&before).pop().expect("state");
    want[0].1 += 100;
    want[2].0[3] = Some(put(2, 3, BIG, (PUTS - 1) as u8).bytes[2..].to_vec());
    assert_eq!(state(&e), want);
    let image = sim.durable_image();
    drop(e);
    let back = open_sim(
        Arc::new(SimMedium::from_image(image, SimConfig::default())),
        Variant::Cow,
        Kv::default(),
    )
    .expect("recover");
    assert_eq!(state(&back), want);
}

/// `docs/format/dipper-ablation.md` against the decoder: a record built from the doc's field
/// table (order, sizes, magic) applies as the doc says.
#[test]
fn the_physical_record_format_doc_matches_the_decoder() {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/format/dipper-ablation.md");
    let md = std::fs::read_to_string(&path).expect("the format doc");
    let rows: Vec<(String, String)> = md
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| field") && !l.starts_with("| ---"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[1].to_string(), cells[2].to_string())
        })
        .collect();
    let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "magic",
            "sections",
            "section.shard",
            "section.arena_length",
            "section.ranges",
            "range.offset",
            "range.length",
            "range.bytes"
        ]
    );
    let magic_row = md
        .lines()
        .find(|l| l.starts_with("| magic |"))
        .expect("magic row");
    let doc_magic = magic_row.split('`').nth(1).expect("magic in backquotes");
    assert_eq!(doc_magic.as_bytes(), &dipper::ablation::PHYSICAL_MAGIC);
    let size = |name: &str| -> usize {
        rows.iter()
            .find(|r| r.0 == name)
            .and_then(|r| r.1.parse().ok())
            .unwrap_or_else(|| panic!("{name}: a byte count"))
    };
    let int = |v: u64, n: usize| v.to_le_bytes()[..n].to_vec();
    let target = Arena::new();
    let data = b"after-image bytes";
    let at = 2048u64;
    let mut rec = doc_magic.as_bytes().to_vec();
    assert_eq!(rec.len(), size("magic"));
    rec.extend(int(2, size("sections")));
    // A section for shard 3 (skipped), then one for shard 1.
    for shard in [3u64, 1] {
        rec.extend(int(shard, size("section.shard")));
        rec.extend(int(target.len() as u64, size("section.arena_length")));
        rec.extend(int(1, size("section.ranges")));
        rec.extend(int(at, size("range.offset")));
        rec.extend(int(data.len() as u64, size("range.length")));
        rec.extend_from_slice(data);
    }
    let m = Physical::new(Kv::default(), SHARDS);
    let mut a = target.clone();
    m.apply(1, &mut a, &rec, &mut ()).expect("applies");
    assert_eq!(a.bytes(at as usize, data.len()), data);
    let mut b = target.clone();
    m.apply(2, &mut b, &rec, &mut ())
        .expect("no section for shard 2");
    assert_eq!(b.image(), target.image());
}
