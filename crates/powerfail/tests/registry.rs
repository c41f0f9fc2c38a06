//! The registry and the bounded save, driven directly (no warning source).

mod common;

use std::time::{Duration, Instant};

use common::{Behaviour, Fake, count, entries, log};
use powerfail::{PowerFail, SaveCost, SaveError, SaveEstimate, Verdict, Window};

/// 1 GB/s copy, 100 ns per line, nothing per target: easy arithmetic.
fn cost() -> SaveCost {
    SaveCost::new(1e9, Duration::from_nanos(100), Duration::ZERO).unwrap()
}

/// A window so long no test machine overruns it.
fn roomy() -> Window {
    Window::deadline_ms(60_000.0).unwrap()
}

#[test]
fn every_writer_stops_before_any_save_and_resumes_after_all() {
    let l = log();
    let pf = PowerFail::new(roomy(), cost());
    let a = Fake::with("a", &l, Duration::ZERO, SaveEstimate::new(4096, 10));
    let b = Fake::with("b", &l, Duration::ZERO, SaveEstimate::new(100, 3));
    let _ra = pf.register(a.clone());
    let _rb = pf.register(b.clone());
    let out = pf.run_save(roomy());
    assert_eq!(
        entries(&l),
        [
            "stop a", "stop b", "save a", "save b", "resume a", "resume b"
        ]
    );
    assert_eq!(out.verdict, Verdict::Inside, "{out}");
    assert!(out.is_durable() && out.resumed && out.problems.is_empty());
    assert_eq!(out.targets.len(), 2);
    assert_eq!(out.targets[0].name, "a");
    assert_eq!(out.targets[0].estimate, SaveEstimate::new(4096, 10));
    assert_eq!(out.targets[0].result.as_ref().unwrap().bytes_copied, 4096);
    assert_eq!(out.saved().bytes_copied, 4196);
    assert_eq!(out.saved().lines_written_back, 13);
    // Targets are saved one after another, after the writers stopped.
    assert!(out.targets[1].began >= out.targets[0].began + out.targets[0].elapsed);
    assert!(out.targets[0].began >= out.stopped);
    assert!(out.elapsed >= out.targets[1].began + out.targets[1].elapsed);
}

#[test]
fn save_is_given_the_budget_deadline() {
    let l = log();
    let pf = PowerFail::new(roomy(), cost());
    let a = Fake::new("a", &l);
    let _r = pf.register(a.clone());
    let w = Window::deadline_ms(40.0).unwrap().with_margin(0.5).unwrap();
    let before = Instant::now();
    let out = pf.run_save(w);
    let after = Instant::now();
    let d = a.deadlines.lock().unwrap()[0];
    assert!(d >= before + w.budget() && d <= after + w.budget());
    assert_eq!(out.window, w);
}

#[test]
fn a_target_slower_than_the_window_is_reported_as_an_overrun() {
    let l = log();
    let pf = PowerFail::new(roomy(), cost());
    let slow = Fake::with(
        "slow",
        &l,
        Duration::from_millis(50),
        SaveEstimate::new(1, 1),
    );
    let _r = pf.register(slow);
    let out = pf.run_save(Window::atx_pwr_ok());
    assert_eq!(out.verdict, Verdict::Overrun, "{out}");
    assert!(!out.is_durable());
    assert!(out.elapsed >= Duration::from_millis(50));
    assert!(out.to_string().contains("OVERRUN"), "{out}");
    // The target's own save still succeeded: an overrun is about the window, not the target.
    assert!(out.targets[0].result.is_ok());
    assert_eq!(count(&l, "resume slow"), 1);
}

#[test]
fn a_failing_or_panicking_target_fails_the_save_and_the_others_are_still_saved() {
    let l = log();
    let pf = PowerFail::new(roomy(), cost());
    let bad = Fake::new("bad", &l);
    *bad.behaviour.lock().unwrap() = Behaviour::Fail("media error".into());
    let boom = Fake::new("boom", &l);
    *boom.behaviour.lock().unwrap() = Behaviour::Panic;
    let good = Fake::new("good", &l);
    let _r1 = pf.register(bad);
    let _r2 = pf.register(boom);
    let _r3 = pf.register(good);
    let out = pf.run_save(roomy());
    assert_eq!(out.verdict, Verdict::Failed, "{out}");
    assert_eq!(
        out.targets[0].result,
        Err(SaveError::Failed {
            reason: "media error".into()
        })
    );
    match &out.targets[1].result {
        Err(SaveError::Failed { reason }) => assert!(reason.contains("panicked"), "{reason}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert!(out.targets[2].result.is_ok());
    assert_eq!(count(&l, "save good"), 1);
    // Every writer was resumed, including the panicking target's, and the registry still works.
    assert_eq!(count(&l, "resume boom"), 1);
    assert_eq!(pf.run_save(roomy()).targets.len(), 3);
}

#[test]
fn dropping_the_registration_unregisters() {
    let l = log();
    let pf = PowerFail::new(roomy(), cost());
    let a = Fake::new("a", &l);
    let b = Fake::new("b", &l);
    let ra = pf.register(a);
    let _rb = pf.register(b);
    assert_eq!(pf.targets(), 2);
    drop(ra);
    assert_eq!(pf.targets(), 1);
    let out = pf.run_save(roomy());
    assert_eq!(out.targets.len(), 1);
    assert_eq!(entries(&l), ["stop b", "save b", "resume b"]);
}

#[test]
fn admission_refuses_past_the_budget_and_admits_within() {
    // 10 ms window, 20% margin: the budget is 8 ms = 8 MB at 1 GB/s.
    let w = Window::deadline_ms(10.0).unwrap();
    let pf = PowerFail::new(w, cost());
    let first = pf
        .admit(SaveEstimate::new(7_000_000, 0))
        .expect("7 ms fits in 8");
    let refused = pf
        .admit(SaveEstimate::new(2_000_000, 0))
        .expect_err("9 ms does not fit");
    assert!((refused.estimated_ms - 9.0).abs() < 1e-9, "{refused}");
    assert!((refused.window_ms - 10.0).abs() < 1e-9);
    assert!((refused.budget_ms - 8.0).abs() < 1e-9);
    assert_eq!(refused.work, SaveEstimate::new(9_000_000, 0));
    // Lines count too: 10,000 lines at 100 ns = 1 ms, so 7 + 1 = 8 ms fits exactly.
    let lines = pf
        .admit(SaveEstimate::new(0, 10_000))
        .expect("8 ms fits in 8");
    assert!(pf.admit(SaveEstimate::new(1, 0)).is_err());
    // Releasing a reservation makes room again.
    drop(first);
    drop(lines);
    let mut second = pf
        .admit(SaveEstimate::new(2_000_000, 0))
        .expect("2 ms fits once released");
    // Growth is admitted while it fits and refused, leaving the admission as it was, after.
    second
        .grow(SaveEstimate::new(5_000_000, 0))
        .expect("7 ms fits");
    let refused = second
        .grow(SaveEstimate::new(2_000_000, 0))
        .expect_err("9 ms");
    assert!((refused.estimated_ms - 9.0).abs() < 1e-9);
    assert_eq!(second.amount(), SaveEstimate::new(7_000_000, 0));
    assert_eq!(pf.estimated().0, SaveEstimate::new(7_000_000, 0));
    drop(second);
    assert_eq!(pf.estimated().0, SaveEstimate::default());
}

#[test]
fn admission_counts_registered_targets_and_refuses_a_registration_past_the_budget() {
    let l = log();
    let pf = PowerFail::new(Window::deadline_ms(10.0).unwrap(), cost());
    let pool = Fake::with("pool", &l, Duration::ZERO, SaveEstimate::new(5_000_000, 0));
    let _r = pf.try_register(pool.clone()).expect("5 ms fits");
    assert!(
        pf.admit(SaveEstimate::new(4_000_000, 0)).is_err(),
        "5 + 4 > 8"
    );
    let _ok = pf
        .admit(SaveEstimate::new(3_000_000, 0))
        .expect("5 + 3 = 8");
    let big = Fake::with("big", &l, Duration::ZERO, SaveEstimate::new(1, 0));
    assert!(pf.try_register(big).is_err(), "8 ms + 1 byte");
    assert_eq!(pf.targets(), 1);
    // A target's estimate is read live: when the pool's dirty set shrinks, room appears.
    *pool.estimate.lock().unwrap() = SaveEstimate::new(1_000_000, 0);
    let _more = pf
        .admit(SaveEstimate::new(4_000_000, 0))
        .expect("1 + 3 + 4 = 8");
}

#[test]
fn the_1_33_and_70_ms_windows_admit_what_their_budgets_hold() {
    // 30 ms of copying: over the 1 ms and 33 ms budgets (0.8, 26.4 ms), inside 70 ms (56 ms).
    let work = SaveEstimate::new(30_000_000, 0);
    let decide = |w: Window| PowerFail::new(w, cost()).admit(work).is_ok();
    assert!(!decide(Window::atx_pwr_ok()));
    assert!(!decide(Window::intel_forecast()));
    assert!(decide(Window::custom_detector()));
    // 20 ms fits the 33 ms default but not 1 ms.
    let work = SaveEstimate::new(20_000_000, 0);
    assert!(
        PowerFail::new(Window::default(), cost())
            .admit(work)
            .is_ok()
    );
    assert!(
        PowerFail::new(Window::atx_pwr_ok(), cost())
            .admit(work)
            .is_err()
    );
    // With no margin the whole 33 ms is usable.
    let w = Window::default().with_margin(0.0).unwrap();
    assert!(
        PowerFail::new(w, cost())
            .admit(SaveEstimate::new(32_000_000, 0))
            .is_ok()
    );
}

#[test]
fn hold_keeps_writers_stopped_until_clear() {
    let l = log();
    let pf = PowerFail::new(roomy(), cost());
    let a = Fake::new("a", &l);
    let ra = pf.register(a.clone());
    let b = Fake::new("b", &l);
    let _rb = pf.register(b.clone());
    let out = pf.run_save_from(Instant::now(), roomy(), true);
    assert!(!out.resumed && pf.holding());
    assert_eq!(entries(&l), ["stop a", "stop b", "save a", "save b"]);
    // A second save while held does not stop the held targets again (the fake would panic).
    let again = pf.run_save(roomy());
    assert!(again.problems.is_empty(), "{again}");
    assert_eq!(count(&l, "save a"), 2);
    assert_eq!(count(&l, "resume a"), 0);
    // A target registered while held is stopped at once.
    let c = Fake::new("c", &l);
    let _rc = pf.register(c.clone());
    assert_eq!(count(&l, "stop c"), 1);
    // A held target that leaves is let go as it leaves.
    drop(ra);
    assert_eq!(count(&l, "resume a"), 1);
    assert_eq!(pf.clear(), 2);
    assert!(!pf.holding());
    assert_eq!(count(&l, "resume b"), 1);
    assert_eq!(count(&l, "resume c"), 1);
    assert_eq!(pf.clear(), 0);
    assert_eq!(
        count(&l, "save-while-running a") + count(&l, "save-while-running b"),
        0
    );
}

#[test]
fn a_save_with_no_targets_is_inside() {
    let pf = PowerFail::new(roomy(), cost());
    let out = pf.run_save(roomy());
    assert_eq!(out.verdict, Verdict::Inside);
    assert!(out.targets.is_empty());
}

#[test]
fn shared_registry_handles_see_the_same_targets() {
    let l = log();
    let pf = PowerFail::new(roomy(), cost());
    let other = pf.clone();
    let _r = other.register(Fake::new("x", &l));
    assert_eq!(pf.targets(), 1);
    pf.set_window(Window::custom_detector());
    assert_eq!(other.window(), Window::custom_detector());
}

/// A target whose writers are real threads passing a [`WriterGate`].
struct Gated {
    gate: powerfail::WriterGate,
    counter: std::sync::atomic::AtomicU64,
    /// Per save: the counter at its start and end, and writers inside the gate meanwhile.
    seen: std::sync::Mutex<Vec<(u64, u64, usize)>>,
}

impl powerfail::SaveTarget for Gated {
    fn name(&self) -> String {
        "gated".into()
    }
    fn estimate(&self) -> SaveEstimate {
        SaveEstimate::new(64, 1)
    }
    fn stop_writers(&self) {
        self.gate.close();
    }
    fn save(&self, _deadline: Instant) -> Result<powerfail::SaveReport, SaveError> {
        use std::sync::atomic::Ordering;
        let a = self.counter.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(2));
        let b = self.counter.load(Ordering::SeqCst);
        self.seen.lock().unwrap().push((a, b, self.gate.inside()));
        Ok(powerfail::SaveReport {
            bytes_copied: 64,
            lines_written_back: 1,
        })
    }
    fn resume_writers(&self) {
        self.gate.open();
    }
}

#[test]
fn writer_threads_behind_a_gate_make_no_progress_during_a_save_and_continue_after() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let t = Arc::new(Gated {
        gate: powerfail::WriterGate::new(),
        counter: Default::default(),
        seen: Default::default(),
    });
    let pf = PowerFail::new(roomy(), cost());
    let _r = pf.register(t.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|_| {
            let (t, stop) = (t.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _g = t.gate.enter();
                    // A two-step update, as a commit applying its log would be.
                    let v = t.counter.load(Ordering::SeqCst);
                    std::hint::spin_loop();
                    t.counter.store(v + 1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for _ in 0..10 {
        let out = pf.run_save(roomy());
        assert!(out.is_durable(), "{out}");
        // After the save the writers move again.
        let after = t.seen.lock().unwrap().last().unwrap().1;
        let hang = Instant::now() + Duration::from_secs(20);
        while t.counter.load(Ordering::SeqCst) <= after {
            assert!(Instant::now() < hang, "writers did not resume");
            std::thread::yield_now();
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let seen = t.seen.lock().unwrap();
    assert_eq!(seen.len(), 10);
    for &(a, b, inside) in seen.iter() {
        assert_eq!((a, inside), (b, 0), "a writer ran during the save");
    }
}

#[test]
fn a_target_unregistered_during_a_held_save_is_resumed_not_held() {
    use std::sync::mpsc;
    let l = log();
    let pf = PowerFail::new(roomy(), cost());
    let a = Fake::new("a", &l);
    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    *a.gate.lock().unwrap() = Some((entered_tx, release_rx));
    let _ra = pf.register(a.clone());
    let b = Fake::new("b", &l);
    let rb = pf.register(b.clone());
    let saver = {
        let pf = pf.clone();
        std::thread::spawn(move || pf.run_save_from(Instant::now(), roomy(), true))
    };
    // The save is inside a's save: both writers are stopped, b is not yet on the held list.
    entered.recv_timeout(Duration::from_secs(20)).unwrap();
    drop(rb);
    assert_eq!(
        count(&l, "resume b"),
        0,
        "b must not resume while the save runs"
    );
    release.send(()).unwrap();
    let out = saver.join().unwrap();
    // b was still saved by the save that had it, then resumed instead of held; a stays held.
    assert_eq!(out.targets.len(), 2);
    assert!(out.problems.is_empty(), "{out}");
    assert_eq!(
        entries(&l),
        ["stop a", "stop b", "save a", "save b", "resume b"]
    );
    assert!(pf.holding());
    assert_eq!(pf.clear(), 1);
    assert_eq!(count(&l, "resume a"), 1);
}
