//! The SIGPWR source. SIGPWR's handler is process-wide, so this binary holds a single test that
//! owns it and walks through install, delivery, chaining and restore in order.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Fake, count, log};
use powerfail::{
    HoldPolicy, PowerFail, PowerFailError, Record, SaveCost, SaveThread, Sigpwr, Source, Window,
};

const HANG: Duration = Duration::from_secs(20);

static PREVIOUS: AtomicU64 = AtomicU64::new(0);

extern "C" fn previous_handler(_sig: libc::c_int) {
    PREVIOUS.fetch_add(1, Ordering::SeqCst);
}

fn current_action() -> libc::sigaction {
    // SAFETY: a zeroed sigaction is valid to be overwritten; querying with a null new action.
    unsafe {
        let mut a: libc::sigaction = std::mem::zeroed();
        assert_eq!(libc::sigaction(libc::SIGPWR, std::ptr::null(), &mut a), 0);
        a
    }
}

fn set_action(handler: usize) {
    // SAFETY: installing either SIG_DFL or a plain one-argument handler that only bumps an atomic.
    unsafe {
        let mut a: libc::sigaction = std::mem::zeroed();
        a.sa_sigaction = handler;
        libc::sigemptyset(&mut a.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGPWR, &a, std::ptr::null_mut()), 0);
    }
}

fn raise() {
    // SAFETY: raising SIGPWR while a handler that does not terminate is installed.
    assert_eq!(unsafe { libc::raise(libc::SIGPWR) }, 0);
}

fn kill_self() {
    // SAFETY: sending SIGPWR to this process (any thread may take it) while a non-terminating
    // handler is installed.
    assert_eq!(unsafe { libc::kill(libc::getpid(), libc::SIGPWR) }, 0);
}

#[test]
fn sigpwr_wakes_the_save_thread_chains_the_previous_handler_and_restores_it() {
    let l = log();
    let cost = SaveCost::new(1e9, Duration::from_nanos(100), Duration::ZERO).unwrap();
    let pf = PowerFail::new(Window::default(), cost);
    let a = Fake::new("a", &l);
    let _r = pf.register(a);
    let thread = SaveThread::spawn(&pf, HoldPolicy::ResumeAfterSave).unwrap();
    let window = Window::deadline_ms(60_000.0).unwrap();

    // 1. Over SIG_DFL: nothing to chain, and SIG_DFL is back after drop.
    assert_eq!(current_action().sa_sigaction, libc::SIG_DFL);
    assert!(!pf.armed());
    let s = Sigpwr::install(&thread, window).unwrap();
    assert!(matches!(
        Sigpwr::install(&thread, window),
        Err(PowerFailError::SigpwrInstalled)
    ));
    assert_eq!(pf.sources(), [("SIGPWR".to_string(), true)]);
    let seen = Sigpwr::signals_seen();
    let before = Instant::now();
    kill_self();
    let rec = thread.recv(HANG);
    let Some(Record::Saved {
        warning, outcome, ..
    }) = rec
    else {
        panic!("expected a save, got {rec:?}")
    };
    assert_eq!(warning.source, Source::Sigpwr);
    assert_eq!(warning.window, window);
    // The warning's time is the handler's, taken before the save thread woke.
    assert!(warning.at >= before && warning.at <= Instant::now());
    assert!(outcome.is_durable(), "{outcome}");
    assert_eq!(Sigpwr::signals_seen(), seen + 1);
    assert_eq!(count(&l, "save a"), 1);
    drop(s);
    assert_eq!(current_action().sa_sigaction, libc::SIG_DFL);
    assert!(pf.sources().is_empty());

    // 2. Over a previous handler: it is chained, and it is back alone after drop.
    set_action(previous_handler as *const () as usize);
    let s = Sigpwr::install(&thread, window).unwrap();
    // raise() runs the handler, chain included, in this thread before it returns.
    raise();
    let rec = thread.recv(HANG);
    assert!(
        matches!(
            rec,
            Some(Record::Saved {
                warning: powerfail::Warning {
                    source: Source::Sigpwr,
                    ..
                },
                ..
            })
        ),
        "{rec:?}"
    );
    assert_eq!(PREVIOUS.load(Ordering::SeqCst), 1);
    assert_eq!(count(&l, "save a"), 2);
    drop(s);
    assert_eq!(
        current_action().sa_sigaction,
        previous_handler as *const () as usize
    );
    raise();
    assert_eq!(PREVIOUS.load(Ordering::SeqCst), 2);
    // No save came from that signal: the next record is the manual warning raised after it.
    thread.manual("after", window).raise();
    let rec = thread.recv(HANG);
    assert!(
        matches!(&rec, Some(Record::Saved { warning, .. }) if warning.source == Source::Manual { label: "after".into() }),
        "{rec:?}"
    );
    assert_eq!(count(&l, "save a"), 3);

    // 3. After the save thread is gone, an installed handler still only writes its byte.
    let s = Sigpwr::install(&thread, window).unwrap();
    drop(thread);
    raise();
    assert_eq!(PREVIOUS.load(Ordering::SeqCst), 3);
    drop(s);
    set_action(libc::SIG_DFL);
}
