//! The pool save target on the persistence simulator's flush-on-fail domain, driven by the
//! manual warning source: writers that skip every write-back, a save at the warning, and the
//! images a power failure leaves afterwards (or during the save).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pmem::fof::{self, DirtyPages, FofState};
use pmem::{CrashPlan, Medium, SimConfig, SimDomain, SimMedium};
use powerfail::{
    HoldPolicy, LayerHook, PoolTarget, PowerFail, Record, SaveCost, SaveTarget, SaveThread, Window,
    WriteBack, WriterGate,
};

const LEN: usize = 64 * 4096;
const RECORD: usize = LEN - 4096;
const HANG: Duration = Duration::from_secs(20);

fn fof_sim(cfg: SimConfig) -> Arc<SimMedium> {
    Arc::new(SimMedium::new(
        LEN,
        SimConfig {
            domain: SimDomain::FlushOnFail,
            ..cfg
        },
    ))
}

/// A layer hook that writes one word (its "state") back and hands out two hints.
#[derive(Debug)]
struct Hook {
    medium: Arc<SimMedium>,
    saves: AtomicU64,
    sleep: Duration,
}

impl LayerHook for Hook {
    fn name(&self) -> String {
        "test layer".into()
    }
    fn save(&self, _deadline: Instant) -> Result<Vec<u64>, String> {
        std::thread::sleep(self.sleep);
        let n = self.saves.fetch_add(1, Ordering::AcqRel) + 1;
        self.medium.store_u64(RECORD - 64, n);
        self.medium
            .write_back(RECORD - 64, 8)
            .map_err(|e| e.to_string())?;
        Ok(vec![n, 0xfeed])
    }
}

fn target(
    m: &Arc<SimMedium>,
    dirty: &Arc<DirtyPages>,
    policy: WriteBack,
    sleep: Duration,
) -> (Arc<PoolTarget<Arc<SimMedium>>>, Arc<WriterGate>) {
    let gate = Arc::new(WriterGate::new());
    let t = PoolTarget::new(
        "test",
        m.clone(),
        vec![(0, RECORD)],
        RECORD,
        gate.clone(),
        Some(dirty.clone()),
        policy,
    )
    .expect("target");
    t.add_hook(Arc::new(Hook {
        medium: m.clone(),
        saves: AtomicU64::new(0),
        sleep,
    }));
    t.arm().expect("arm");
    (Arc::new(t), gate)
}

/// Writers: each stores `count` words (value = index + 1) at its own stride, inside the gate,
/// marking the page, flushing (skipped by the domain) and fencing; returns how many stores were
/// acknowledged per writer.
fn writers(
    m: &SimMedium,
    gate: &WriterGate,
    dirty: &DirtyPages,
    threads: usize,
    count: u64,
) -> Vec<u64> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut acked = 0;
                    for i in 0..count {
                        let _g = gate.enter();
                        let at = slot(t, i);
                        m.store_u64(at, i + 1);
                        dirty.mark(at, 8);
                        if m.persist(at, 8).is_err() {
                            break;
                        }
                        acked += 1;
                    }
                    acked
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("writer")).collect()
    })
}

fn slot(t: usize, i: u64) -> usize {
    // Spread over many pages: thread t, store i at page (i * 7 + t) % 60, word t.
    ((i as usize * 7 + t) % 60) * 4096 + (i as usize % 8) * 512 + t * 8
}

fn value_at(img: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(img[at..at + 8].try_into().unwrap())
}

fn state_of(img: Vec<u8>) -> fof::Found {
    fof::read(&SimMedium::from_image(img, SimConfig::default()), RECORD).expect("record")
}

/// Every acknowledged store is in `img`: the newest store to each slot.
fn assert_all_stores(img: &[u8], threads: usize, acked: &[u64], what: &str) {
    for (t, &n) in acked.iter().enumerate().take(threads) {
        let mut newest = std::collections::BTreeMap::new();
        for i in 0..n {
            newest.insert(slot(t, i), i + 1);
        }
        for (at, v) in newest {
            assert_eq!(value_at(img, at), v, "{what}: thread {t} slot {at:#x}");
        }
    }
}

#[test]
fn a_warning_saves_the_pool_and_no_power_failure_after_it_loses_a_store() {
    for policy in [WriteBack::All, WriteBack::Tracked, WriteBack::Cheaper] {
        let m = fof_sim(SimConfig::default());
        let dirty = Arc::new(DirtyPages::new(LEN));
        let (t, gate) = target(&m, &dirty, policy, Duration::ZERO);
        let pf = PowerFail::new(
            Window::deadline_ms(60_000.0).unwrap(),
            SaveCost::new(1e9, Duration::from_nanos(10), Duration::ZERO).unwrap(),
        );
        let saver = SaveThread::spawn(&pf, HoldPolicy::HoldUntilClear).expect("save thread");
        let _reg = pf.register(t.clone());
        let acked = writers(&m, &gate, &dirty, 3, 200);
        assert_eq!(acked, vec![200; 3]);
        // Before the save nothing the writers stored is durable (they never wrote a line
        // back): a missed window here could lose any of it.
        let durable = m.durable_image();
        assert!(
            (0..3).all(|t| (0..200).all(|i| value_at(&durable, slot(t, i)) == 0)),
            "{policy:?}: a store became durable without a write-back"
        );
        let manual = saver.manual("test", Window::deadline_ms(60_000.0).unwrap());
        manual.raise();
        let outcome = match saver.recv(HANG) {
            Some(Record::Saved { outcome, .. }) => outcome,
            other => panic!("expected a save, got {other:?}"),
        };
        assert!(outcome.is_durable(), "{policy:?}: {outcome}");
        let plan = t.last_plan().expect("a plan");
        let lines = outcome.saved().lines_written_back;
        match plan.mode {
            WriteBack::Tracked => assert_eq!(lines, 60 * 64 + 2, "{policy:?}"),
            WriteBack::All => assert_eq!(lines, (RECORD / 64) as u64 + 2, "{policy:?}"),
            WriteBack::Cheaper => unreachable!("a plan picks a way"),
        }
        if policy != WriteBack::Cheaper {
            assert_eq!(plan.mode, policy);
        }
        // The power fails after the save: every fate keeps every store, and says saved.
        let st = m.power_fail_state();
        for (fate, img) in st.fates() {
            assert_all_stores(&img, 3, &acked, &format!("{policy:?} {fate:?}"));
            let f = state_of(img);
            assert_eq!(f.state(), FofState::Saved, "{policy:?} {fate:?}");
            let r = f.record.unwrap();
            assert_eq!((r.save_count, r.hints.clone()), (1, vec![1, 0xfeed]));
            assert!(r.saved_at_ns > 0);
        }
        drop(manual);
    }
}

#[test]
fn resuming_writers_arms_the_record_again_before_the_gate_opens() {
    let m = fof_sim(SimConfig::default());
    let dirty = Arc::new(DirtyPages::new(LEN));
    let (t, gate) = target(&m, &dirty, WriteBack::Cheaper, Duration::ZERO);
    let pf = PowerFail::new(
        Window::deadline_ms(60_000.0).unwrap(),
        SaveCost::new(1e9, Duration::from_nanos(10), Duration::ZERO).unwrap(),
    );
    let saver = SaveThread::spawn(&pf, HoldPolicy::HoldUntilClear).expect("save thread");
    let _reg = pf.register(t.clone());
    writers(&m, &gate, &dirty, 2, 50);
    let manual = saver.manual("test", Window::deadline_ms(60_000.0).unwrap());
    manual.raise();
    assert!(matches!(saver.recv(HANG), Some(Record::Saved { .. })));
    assert_eq!(t.state().unwrap(), FofState::Saved);
    assert!(
        gate.try_enter().is_none(),
        "writers held until the warning clears"
    );
    manual.clear();
    assert!(matches!(saver.recv(HANG), Some(Record::Cleared { .. })));
    assert!(gate.try_enter().is_some(), "the gate opened");
    // Armed again, durably: a missed window after more writes is seen as one.
    let d = SimMedium::from_image(m.durable_image(), SimConfig::default());
    let f = fof::read(&d, RECORD).unwrap();
    assert_eq!(f.state(), FofState::Armed);
    assert_eq!(f.record.unwrap().save_count, 1);
}

#[test]
fn a_save_past_its_deadline_leaves_the_record_armed() {
    let m = fof_sim(SimConfig::default());
    let dirty = Arc::new(DirtyPages::new(LEN));
    // The layer's save step outlasts a 5 ms window.
    let (t, gate) = target(&m, &dirty, WriteBack::Tracked, Duration::from_millis(30));
    let pf = PowerFail::new(
        Window::deadline_ms(5.0).unwrap(),
        SaveCost::new(1e9, Duration::from_nanos(10), Duration::ZERO).unwrap(),
    );
    let saver = SaveThread::spawn(&pf, HoldPolicy::HoldUntilClear).expect("save thread");
    let _reg = pf.register(t.clone());
    writers(&m, &gate, &dirty, 2, 50);
    let manual = saver.manual("test", Window::deadline_ms(5.0).unwrap());
    manual.raise();
    let outcome = match saver.recv(HANG) {
        Some(Record::Saved { outcome, .. }) => outcome,
        other => panic!("expected a save, got {other:?}"),
    };
    assert!(!outcome.is_durable(), "{outcome}");
    assert_eq!(t.state().unwrap(), FofState::Armed);
    for (fate, img) in m.power_fail_state().fates() {
        assert_eq!(state_of(img).state(), FofState::Armed, "{fate:?}");
    }
    // A deadline already passed: nothing is written back, the tracked pages stay dirty.
    let m = fof_sim(SimConfig::default());
    let dirty = Arc::new(DirtyPages::new(LEN));
    let (t, gate) = target(&m, &dirty, WriteBack::Tracked, Duration::ZERO);
    writers(&m, &gate, &dirty, 1, 10);
    let before = dirty.count();
    t.stop_writers();
    assert!(t.save(Instant::now()).is_err());
    assert_eq!(
        dirty.count(),
        before,
        "pages taken by a failed save are put back"
    );
    assert_eq!(t.state().unwrap(), FofState::Armed);
}

/// A power failure at every fence of a save (after writers that never wrote a line back): in
/// every image of either fate, the record says saved only if every store is there.
#[test]
fn the_marker_is_written_last_at_every_crash_point_of_the_save() {
    for policy in [WriteBack::All, WriteBack::Tracked] {
        let mut saved_seen = 0;
        let mut armed_seen = 0;
        for n in 1u64.. {
            let m = fof_sim(SimConfig::default());
            let dirty = Arc::new(DirtyPages::new(LEN));
            let (t, gate) = target(&m, &dirty, policy, Duration::ZERO);
            let acked = writers(&m, &gate, &dirty, 2, 40);
            let base = m.fences();
            // Re-run the same writes on a medium that crashes at the save's n-th fence.
            let c = fof_sim(SimConfig {
                seed: n,
                crash: CrashPlan::AtFence(base + n),
                images_per_crash: 6,
                ..SimConfig::default()
            });
            let dirty = Arc::new(DirtyPages::new(LEN));
            let (t2, gate2) = target(&c, &dirty, policy, Duration::ZERO);
            let acked2 = writers(&c, &gate2, &dirty, 2, 40);
            assert_eq!(acked, acked2);
            drop(t);
            t2.stop_writers();
            let r = t2.save(Instant::now() + HANG);
            let Some(st) = c.crash_state() else {
                assert!(r.is_ok());
                break;
            };
            for (fate, img) in st.fates() {
                let f = state_of(img.clone());
                match f.state() {
                    FofState::Saved => {
                        saved_seen += 1;
                        assert_all_stores(
                            &img,
                            2,
                            &acked,
                            &format!("{policy:?} fence {n} {fate:?}"),
                        );
                    }
                    FofState::Armed => armed_seen += 1,
                    FofState::None => panic!("{policy:?} fence {n} {fate:?}: record lost"),
                }
            }
        }
        assert!(
            saved_seen > 0 && armed_seen > 0,
            "{policy:?}: {saved_seen} {armed_seen}"
        );
    }
}

/// A save target run as a hook of the pool's save (a heap's on-demand target would be one):
/// stopped and resumed with the pool, saved before the marker, and what it wrote (here with
/// plain stores, covered by the pool's write-back) is durable whenever the marker is.
#[test]
fn a_save_target_runs_as_a_hook_before_the_marker() {
    #[derive(Debug, Default)]
    struct Inner {
        stops: AtomicU64,
        resumes: AtomicU64,
    }
    struct Fake(Arc<SimMedium>, Arc<Inner>);
    impl SaveTarget for Fake {
        fn name(&self) -> String {
            "fake".into()
        }
        fn estimate(&self) -> powerfail::SaveEstimate {
            powerfail::SaveEstimate::new(0, 1)
        }
        fn stop_writers(&self) {
            self.1.stops.fetch_add(1, Ordering::AcqRel);
        }
        fn save(&self, _deadline: Instant) -> Result<powerfail::SaveReport, powerfail::SaveError> {
            // A store only: the pool's write-back, after the hooks, makes it durable.
            self.0.store_u64(4096 * 40 + 8, 0xabcd);
            Ok(powerfail::SaveReport::default())
        }
        fn resume_writers(&self) {
            self.1.resumes.fetch_add(1, Ordering::AcqRel);
        }
    }
    let m = fof_sim(SimConfig::default());
    let dirty = Arc::new(DirtyPages::new(LEN));
    let (t, _gate) = target(&m, &dirty, WriteBack::All, Duration::ZERO);
    let inner = Arc::new(Inner::default());
    t.add_hook(Arc::new(powerfail::TargetHook(Arc::new(Fake(
        m.clone(),
        inner.clone(),
    )))));
    let pf = PowerFail::new(
        Window::deadline_ms(60_000.0).unwrap(),
        SaveCost::new(1e9, Duration::from_nanos(10), Duration::ZERO).unwrap(),
    );
    let _reg = pf.register(t.clone());
    let outcome = pf.run_save(Window::deadline_ms(60_000.0).unwrap());
    assert!(outcome.is_durable(), "{outcome}");
    assert_eq!(inner.stops.load(Ordering::Acquire), 1);
    assert_eq!(
        inner.resumes.load(Ordering::Acquire),
        1,
        "run_save resumes writers"
    );
    // After the resume the record is armed again, and the hook's store is durable.
    let durable = m.durable_image();
    assert_eq!(value_at(&durable, 4096 * 40 + 8), 0xabcd);
    assert_eq!(state_of(durable).state(), FofState::Armed);
}
