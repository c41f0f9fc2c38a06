//! Durability on demand end to end on the persistence simulator: a heap registered with a
//! power-failure registry, its save run by the save thread on a warning, and every image the
//! power may leave after that save opened.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use heap::{HeapError, HeapOptions, RawHeap, TxMode, ondemand};
use pmem::{SimConfig, SimMedium};
use powerfail::{HoldPolicy, PowerFail, Record, SaveCost, SaveThread, Window};

const LEN: u64 = 4 << 20;
const WORDS: u64 = 8;
/// Words `WORDS` apart on separate lines, then the counter.
const STRIDE: u64 = 256;

fn heap() -> (Arc<SimMedium>, Arc<RawHeap>, u64) {
    let m = Arc::new(SimMedium::new(LEN as usize, SimConfig::default()));
    RawHeap::format(&*m, 0, LEN, [3; 16], &HeapOptions::small()).unwrap();
    let h = Arc::new(RawHeap::open(m.clone(), 0, LEN).unwrap());
    let (root, _) = h.root((WORDS + 1) * STRIDE).unwrap();
    h.set_default_mode(TxMode::Redo);
    h.quiesce().unwrap();
    (m, h, root)
}

fn registry() -> PowerFail {
    let cost = SaveCost::new(1e9, Duration::from_nanos(100), Duration::from_micros(50)).unwrap();
    PowerFail::new(Window::deadline_ms(33.0).unwrap(), cost)
}

/// Transaction `k`: every word and the counter become `k`.
fn step(h: &RawHeap, root: u64, k: u64) -> heap::Result<()> {
    let mut lane = h.lane();
    h.begin(&mut lane);
    for j in 0..WORDS {
        h.write(&mut lane, root + j * STRIDE, &k.to_le_bytes())?;
    }
    h.write(&mut lane, root + WORDS * STRIDE, &k.to_le_bytes())?;
    h.commit(&mut lane)
}

/// The words and the counter of a recovered image; all equal, or the image is torn.
fn words(h: &RawHeap, root: u64) -> Vec<u64> {
    (0..=WORDS)
        .map(|j| {
            let mut b = [0u8; 8];
            h.read(root + j * STRIDE, &mut b).unwrap();
            u64::from_le_bytes(b)
        })
        .collect()
}

#[test]
fn without_a_warning_source_redo_keeps_flushing() {
    let (_m, h, _) = heap();
    let pf = registry();
    match ondemand::enable(&h, &pf) {
        Err(HeapError::Invalid { what, .. }) => assert_eq!(what, "durability on demand"),
        other => panic!("{other:?}"),
    }
    assert_eq!(h.durability(), heap::raw::Durability::FlushAtCommit);
}

/// A writer thread commits on-demand transactions without a pause while the warning comes at
/// a different moment in each round; the save thread stops it, saves, and holds it. Every image
/// the power may then leave opens (no `NotSaved`) to a state where all words equal the counter,
/// and the counter is at least the last transaction the writer saw committed before the
/// warning.
#[test]
fn a_warning_saves_commits_caught_in_flight() {
    let mut rounds_with_a_log = 0;
    for round in 0..12u64 {
        let (m, h, root) = heap();
        let pf = registry();
        let saver = SaveThread::spawn(&pf, HoldPolicy::HoldUntilClear).unwrap();
        let manual = saver.manual("test", Window::deadline_ms(33.0).unwrap());
        let od = ondemand::enable(&h, &pf).unwrap();
        assert!(od.plan().threads >= 1, "{:?}", od.plan());
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let writer = {
            let (h, stop, acked) = (h.clone(), stop.clone(), acked.clone());
            std::thread::spawn(move || {
                let mut k = 1;
                while !stop.load(Ordering::Relaxed) {
                    step(&h, root, k).unwrap();
                    acked.store(k, Ordering::Release);
                    k += 1;
                }
            })
        };
        // Let it commit a while (a different while each round).
        while acked.load(Ordering::Acquire) < 20 + round * 7 {
            std::thread::yield_now();
        }
        let seen = acked.load(Ordering::Acquire);
        manual.raise();
        let rec = saver.recv(Duration::from_secs(20)).expect("a save record");
        let outcome = match rec {
            Record::Saved { outcome, .. } => outcome,
            other => panic!("{other:?}"),
        };
        assert!(outcome.is_durable(), "round {round}: {outcome}");
        // The power goes now; the writer is held at the gate (or between transactions).
        let state = m.power_fail_state();
        let images = state.images();
        for (i, img) in images.into_iter().enumerate() {
            let m2 = Arc::new(SimMedium::from_image(img, SimConfig::default()));
            let h2 = RawHeap::open(m2, 0, LEN)
                .unwrap_or_else(|e| panic!("round {round}, image {i}: {e}"));
            if h2.recovery().redone > 0 {
                rounds_with_a_log += 1;
            }
            let w = words(&h2, root);
            assert!(
                w.iter().all(|x| *x == w[0]),
                "round {round}, image {i}: torn {w:?}"
            );
            assert!(w[0] >= seen, "round {round}, image {i}: {} < {seen}", w[0]);
        }
        // The power is gone: the writer stays held at the gate (resuming fails on a dead
        // medium, and a failed resume keeps the gate shut), so it is left behind.
        stop.store(true, Ordering::Relaxed);
        manual.clear();
        drop(writer);
    }
    println!("rounds whose image held a saved log: {rounds_with_a_log} of 12");
}

/// A warning called off: the save runs, the writer is held, then resumes when the warning
/// clears, and after a clean close every acknowledged transaction is there.
#[test]
fn a_warning_called_off_resumes_the_writers_and_close_keeps_everything() {
    let (m, h, root) = heap();
    let pf = registry();
    let saver = SaveThread::spawn(&pf, HoldPolicy::HoldUntilClear).unwrap();
    let manual = saver.manual("test", Window::deadline_ms(33.0).unwrap());
    let od = ondemand::enable(&h, &pf).unwrap();
    let acked = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (h, stop, acked) = (h.clone(), stop.clone(), acked.clone());
        std::thread::spawn(move || {
            let mut k = 1;
            while !stop.load(Ordering::Relaxed) {
                step(&h, root, k).unwrap();
                acked.store(k, Ordering::Release);
                k += 1;
            }
        })
    };
    while acked.load(Ordering::Acquire) < 30 {
        std::thread::yield_now();
    }
    manual.raise();
    assert!(matches!(
        saver.recv(Duration::from_secs(20)),
        Some(Record::Saved { .. })
    ));
    // Held: no commit finishes while the warning stands.
    let held = acked.load(Ordering::Acquire);
    std::thread::sleep(Duration::from_millis(50));
    assert!(acked.load(Ordering::Acquire) <= held + 1);
    manual.clear();
    assert!(matches!(
        saver.recv(Duration::from_secs(20)),
        Some(Record::Cleared { resumed: 1, .. })
    ));
    while acked.load(Ordering::Acquire) < held + 20 {
        std::thread::yield_now();
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    drop(od);
    h.quiesce().unwrap();
    let last = acked.load(Ordering::Acquire);
    let h2 = RawHeap::open(
        Arc::new(SimMedium::from_image(m.power_fail(), SimConfig::default())),
        0,
        LEN,
    )
    .unwrap();
    let w = words(&h2, root);
    assert!(w.iter().all(|x| *x == last), "{w:?} != {last}");
}

/// Blocks the thread named `writer` at its `at`-th store once armed, until released.
#[derive(Debug, Default)]
struct Pause {
    armed: AtomicBool,
    stores: AtomicU64,
    at: AtomicU64,
    paused: AtomicBool,
    release: AtomicBool,
}

impl pmem::sim::OpHook for Pause {
    fn before(&self, op: pmem::sim::Op) {
        if op != pmem::sim::Op::Store
            || !self.armed.load(Ordering::Acquire)
            || std::thread::current().name() != Some("writer")
        {
            return;
        }
        if self.stores.fetch_add(1, Ordering::AcqRel) + 1 == self.at.load(Ordering::Acquire) {
            self.paused.store(true, Ordering::Release);
            while !self.release.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Deterministically caught applying: the writer is paused at its k-th store in place of a
/// transaction (k = 1..=WORDS+1), the warning comes, the save copies that transaction's log;
/// every image the power leaves redoes it and holds the transaction whole.
#[test]
fn a_transaction_caught_applying_is_redone_from_its_saved_log() {
    for k in 1..=WORDS + 1 {
        let pause = Arc::new(Pause::default());
        let m =
            Arc::new(SimMedium::new(LEN as usize, SimConfig::default()).with_hook(pause.clone()));
        RawHeap::format(&*m, 0, LEN, [3; 16], &HeapOptions::small()).unwrap();
        let h = Arc::new(RawHeap::open(m.clone(), 0, LEN).unwrap());
        let (root, _) = h.root((WORDS + 1) * STRIDE).unwrap();
        h.set_default_mode(TxMode::Redo);
        h.quiesce().unwrap();
        let pf = registry();
        let saver = SaveThread::spawn(&pf, HoldPolicy::HoldUntilClear).unwrap();
        let manual = saver.manual("test", Window::deadline_ms(33.0).unwrap());
        let _od = ondemand::enable(&h, &pf).unwrap();
        let writer = {
            let (h, pause) = (h.clone(), pause.clone());
            std::thread::Builder::new()
                .name("writer".into())
                .spawn(move || {
                    for t in 1..=5u64 {
                        if t == 5 {
                            pause.at.store(k, Ordering::Release);
                            pause.armed.store(true, Ordering::Release);
                        }
                        if step(&h, root, t).is_err() {
                            return;
                        }
                    }
                })
                .unwrap()
        };
        while !pause.paused.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        manual.raise();
        match saver.recv(Duration::from_secs(20)) {
            Some(Record::Saved { outcome, .. }) => assert!(outcome.is_durable(), "{outcome}"),
            other => panic!("{other:?}"),
        }
        let images = m.power_fail_state().images();
        // Let the writer run into the dead medium before anything here can fail.
        pause.release.store(true, Ordering::Release);
        manual.clear();
        writer.join().unwrap();
        for (i, img) in images.into_iter().enumerate() {
            let h2 = RawHeap::open(
                Arc::new(SimMedium::from_image(img, SimConfig::default())),
                0,
                LEN,
            )
            .unwrap_or_else(|e| panic!("k {k}, image {i}: {e}"));
            assert_eq!(h2.recovery().redone, 1, "k {k}, image {i}: the saved log");
            let w = words(&h2, root);
            assert!(w.iter().all(|x| *x == 5), "k {k}, image {i}: {w:?}");
        }
    }
}

/// A pool file whose heap has a lane left `UNSAVED` is refused at open with `NotSaved`, and the
/// refusal leaves the file byte for byte as it was (the pool's in-use state put back too).
#[test]
fn an_unsaved_heap_file_is_refused_and_left_unchanged() {
    let dir = std::env::temp_dir().join(format!("kavach-unsaved-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("h.pool");
    let f = heap::HeapFile::create(&path, 8 << 20, &HeapOptions::small()).unwrap();
    let (region, geo) = (f.region().offset, f.raw().geometry());
    f.close().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let at = (region + geo.redo(1)) as usize;
    bytes[at..at + 8]
        .copy_from_slice(&((u64::from(heap::layout::REDO_UNSAVED) << 56) | 3).to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    match heap::HeapFile::open(&path, "heap") {
        Err(HeapError::NotSaved { lane }) => assert_eq!(lane, 1),
        other => panic!("{:?}", other.map(|_| ())),
    }
    assert!(
        std::fs::read(&path).unwrap() == bytes,
        "the refused open changed the file"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// One lane, two threads: the first (admitted) commits on demand and leaves the lane UNSAVED;
/// the second (refused by admission) commits an isolated transaction, which flushes at commit
/// and so replaces the lane's UNSAVED mark with its log. What the first left dirty must be
/// written back before the mark goes: every image the power leaves opens with both commits.
#[test]
fn a_flush_commit_on_a_lane_left_unsaved_keeps_the_on_demand_commit() {
    let m = Arc::new(SimMedium::new(LEN as usize, SimConfig::default()));
    let opts = HeapOptions {
        lanes: 1,
        ..HeapOptions::small()
    };
    RawHeap::format(&*m, 0, LEN, [4; 16], &opts).unwrap();
    let h = Arc::new(RawHeap::open(m.clone(), 0, LEN).unwrap());
    let (root, _) = h.root((WORDS + 1) * STRIDE).unwrap();
    h.quiesce().unwrap();
    let plan = h.enable_on_demand(heap::raw::OnDemandConfig {
        window: Duration::from_millis(70),
        margin: 0.2,
        cost: heap::raw::SaveCost {
            fixed_ns: 20_000.0,
            line_ns: 20.0,
            byte_ns: 0.5,
        },
    });
    assert_eq!(plan.threads, 1, "{plan:?}");
    let fences = |h: &RawHeap| h.counters().fences.load(Ordering::Relaxed);
    {
        let h = h.clone();
        std::thread::spawn(move || {
            let mut lane = h.lane();
            assert_eq!(h.begin_mode(&mut lane, TxMode::Redo), TxMode::Redo);
            for j in 0..WORDS {
                h.write(&mut lane, root + j * STRIDE, &7u64.to_le_bytes())
                    .unwrap();
            }
            h.commit(&mut lane).unwrap();
        })
        .join()
        .unwrap();
    }
    let before = fences(&h);
    {
        let h = h.clone();
        std::thread::spawn(move || {
            let mut lane = h.lane();
            assert_eq!(h.begin_mode(&mut lane, TxMode::Isolated), TxMode::Isolated);
            h.write(&mut lane, root + WORDS * STRIDE, &9u64.to_le_bytes())
                .unwrap();
            h.commit(&mut lane).unwrap();
        })
        .join()
        .unwrap();
    }
    assert!(fences(&h) > before, "the isolated commit did not flush");
    for (i, img) in m.power_fail_state().images().into_iter().enumerate() {
        let h2 = RawHeap::open(
            Arc::new(SimMedium::from_image(img, SimConfig::default())),
            0,
            LEN,
        )
        .unwrap_or_else(|e| panic!("image {i}: {e}"));
        let w = words(&h2, root);
        assert!(
            w[..WORDS as usize].iter().all(|x| *x == 7),
            "image {i}: {w:?}"
        );
        assert_eq!(w[WORDS as usize], 9, "image {i}");
    }
}
