//! Warning sources other than SIGPWR (which has its own test binary, as it owns a process-wide
//! handler): the manual source and the UPS socket, each driving the save thread.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Fake, count, entries, log};
use powerfail::{
    HoldPolicy, PowerFail, PowerFailError, Record, SaveCost, SaveThread, Source, UpsConfig,
    UpsEvent, UpsSocket, Verdict, Window,
};

/// Only a guard against a hung test; no assertion depends on it.
const HANG: Duration = Duration::from_secs(20);

fn registry() -> PowerFail {
    let cost = SaveCost::new(1e9, Duration::from_nanos(100), Duration::ZERO).unwrap();
    PowerFail::new(Window::default(), cost)
}

fn roomy() -> Window {
    Window::deadline_ms(60_000.0).unwrap()
}

fn saved(r: Option<Record>) -> (powerfail::Warning, usize, Box<powerfail::SaveOutcome>) {
    match r {
        Some(Record::Saved {
            warning,
            merged,
            outcome,
        }) => (warning, merged, outcome),
        other => panic!("expected a save, got {other:?}"),
    }
}

fn sock_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("kavach-pf-{}-{name}.sock", std::process::id()))
}

/// Sends `lines` on one connection and returns the reply lines.
fn talk(path: &PathBuf, lines: &[&[u8]]) -> Vec<String> {
    let mut s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(HANG)).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut replies = Vec::new();
    for l in lines {
        let mut msg = l.to_vec();
        msg.push(b'\n');
        // If the server has closed, writing fails: stop there.
        if s.write_all(&msg).is_err() {
            break;
        }
        let mut reply = String::new();
        if !matches!(r.read_line(&mut reply), Ok(n) if n > 0) {
            break;
        }
        replies.push(reply.trim_end().to_string());
    }
    replies
}

#[test]
fn a_manual_warning_runs_the_save_on_the_save_thread_and_holds_until_cleared() {
    let l = log();
    let pf = registry();
    let a = Fake::new("a", &l);
    let _r = pf.register(a.clone());
    let thread = SaveThread::spawn(&pf, HoldPolicy::HoldUntilClear).unwrap();
    let m = thread.manual("test", roomy());
    let before = Instant::now();
    m.raise();
    let (w, merged, out) = saved(thread.recv(HANG));
    assert_eq!(
        w.source,
        Source::Manual {
            label: "test".into()
        }
    );
    assert!(w.at >= before);
    assert_eq!(merged, 0);
    assert_eq!(out.verdict, Verdict::Inside, "{out}");
    assert!(!out.resumed);
    assert_eq!(entries(&l), ["stop a", "save a"]);
    assert!(pf.holding());
    m.clear();
    match thread.recv(HANG) {
        Some(Record::Cleared { source, resumed }) => {
            assert_eq!(
                source,
                Source::Manual {
                    label: "test".into()
                }
            );
            assert_eq!(resumed, 1);
        }
        other => panic!("expected a clear, got {other:?}"),
    }
    assert_eq!(entries(&l), ["stop a", "save a", "resume a"]);
}

#[test]
fn resume_after_save_policy_resumes_at_once() {
    let l = log();
    let pf = registry();
    let _r = pf.register(Fake::new("a", &l));
    let thread = SaveThread::spawn(&pf, HoldPolicy::ResumeAfterSave).unwrap();
    thread.manual("m", roomy()).raise();
    let (w, _, out) = saved(thread.recv(HANG));
    assert!(out.resumed);
    assert_eq!(entries(&l), ["stop a", "save a", "resume a"]);
    assert!(!pf.holding());
    let shown = Record::Saved {
        warning: w,
        merged: 2,
        outcome: out,
    }
    .to_string();
    assert!(shown.starts_with("warning from manual (m)"), "{shown}");
    assert!(shown.contains("(and 2 more pending)"), "{shown}");
    assert!(shown.contains("saved inside the budget"), "{shown}");
}

#[test]
fn a_warning_overruns_when_the_target_is_slower_than_its_window() {
    let l = log();
    let pf = registry();
    let slow = Fake::with("slow", &l, Duration::from_millis(50), Default::default());
    let _r = pf.register(slow);
    let thread = SaveThread::spawn(&pf, HoldPolicy::ResumeAfterSave).unwrap();
    thread.manual("m", Window::atx_pwr_ok()).raise();
    let (_, _, out) = saved(thread.recv(HANG));
    assert_eq!(out.verdict, Verdict::Overrun, "{out}");
}

#[test]
fn warnings_pending_together_are_answered_by_one_save_against_the_earliest_end() {
    let l = log();
    let pf = registry();
    let a = Fake::new("a", &l);
    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    *a.gate.lock().unwrap() = Some((entered_tx, release_rx));
    let _r = pf.register(a.clone());
    let thread = SaveThread::spawn(&pf, HoldPolicy::ResumeAfterSave).unwrap();
    thread.manual("first", roomy()).raise();
    entered.recv_timeout(HANG).unwrap();
    // The save thread is inside the first save: these two queue up behind it.
    thread.manual("long", roomy()).raise();
    thread
        .manual("short", Window::deadline_ms(1.0).unwrap())
        .raise();
    release.send(()).unwrap();
    let (w, merged, _) = saved(thread.recv(HANG));
    assert_eq!(
        w.source,
        Source::Manual {
            label: "first".into()
        }
    );
    assert_eq!(merged, 0);
    entered.recv_timeout(HANG).unwrap();
    release.send(()).unwrap();
    let (w, merged, out) = saved(thread.recv(HANG));
    assert_eq!(
        w.source,
        Source::Manual {
            label: "short".into()
        }
    );
    assert_eq!(merged, 1);
    assert_eq!(out.window, Window::deadline_ms(1.0).unwrap());
    assert_eq!(count(&l, "save a"), 2);
}

#[test]
fn ups_socket_lowbatt_saves_onbatt_is_ignored_and_online_clears() {
    let l = log();
    let pf = registry();
    let a = Fake::new("a", &l);
    let _r = pf.register(a);
    let thread = SaveThread::spawn(&pf, HoldPolicy::HoldUntilClear).unwrap();
    let path = sock_path("lowbatt");
    let cfg = UpsConfig {
        window: roomy(),
        ..UpsConfig::default()
    };
    let ups = UpsSocket::bind(&path, thread.sink(), cfg).unwrap();
    assert_eq!(ups.path(), path);
    let replies = talk(&path, &[b"ONBATT ups@localhost", b"LOWBATT ups@localhost"]);
    assert_eq!(replies, ["OK ignored ONBATT", "OK save LOWBATT"]);
    // ONBATT delivered nothing: the first record is LOWBATT's save.
    let (w, _, out) = saved(thread.recv(HANG));
    assert_eq!(
        w.source,
        Source::Ups {
            event: UpsEvent::LowBatt,
            detail: "ups@localhost".into()
        }
    );
    assert_eq!(out.window, roomy());
    assert_eq!(entries(&l), ["stop a", "save a"]);
    // As from a NOTIFYCMD script: one line, CRLF tolerated, then the connection closes.
    assert_eq!(talk(&path, &[b"online\r"]), ["OK clear ONLINE"]);
    match thread.recv(HANG) {
        Some(Record::Cleared {
            source:
                Source::Ups {
                    event: UpsEvent::Online,
                    ..
                },
            resumed: 1,
        }) => {}
        other => panic!("expected ONLINE to clear, got {other:?}"),
    }
    assert_eq!(entries(&l), ["stop a", "save a", "resume a"]);
    drop(ups);
    assert!(!path.exists(), "the socket file is removed on drop");
}

#[test]
fn ups_socket_fsd_and_shutdown_save_and_onbatt_saves_when_configured() {
    let l = log();
    let pf = registry();
    let _r = pf.register(Fake::new("a", &l));
    let thread = SaveThread::spawn(&pf, HoldPolicy::ResumeAfterSave).unwrap();
    let path = sock_path("onbatt");
    let cfg = UpsConfig {
        window: roomy(),
        ..UpsConfig::default()
    }
    .save_on_battery();
    let _ups = UpsSocket::bind(&path, thread.sink(), cfg).unwrap();
    for (line, event) in [
        (&b"ONBATT"[..], UpsEvent::OnBatt),
        (b"FSD", UpsEvent::Fsd),
        (b"SHUTDOWN", UpsEvent::Shutdown),
    ] {
        let reply = talk(&path, &[line]);
        assert_eq!(reply, [format!("OK save {event}")]);
        let (w, _, _) = saved(thread.recv(HANG));
        assert_eq!(
            w.source,
            Source::Ups {
                event,
                detail: String::new()
            }
        );
    }
    assert_eq!(count(&l, "save a"), 3);
}

#[test]
fn ups_socket_answers_malformed_lines_with_errors_and_keeps_serving() {
    let l = log();
    let pf = registry();
    let _r = pf.register(Fake::new("a", &l));
    let thread = SaveThread::spawn(&pf, HoldPolicy::ResumeAfterSave).unwrap();
    let path = sock_path("malformed");
    let _ups = UpsSocket::bind(
        &path,
        thread.sink(),
        UpsConfig {
            window: roomy(),
            ..Default::default()
        },
    )
    .unwrap();
    let replies = talk(
        &path,
        &[
            b"",
            b"   ",
            b"HELLO world",
            b"\xff\xfe\x00",
            b"LOW BATT",
            b"COMMBAD",
        ],
    );
    assert_eq!(replies.len(), 6, "{replies:?}");
    assert!(replies[0].starts_with("ERR empty line"), "{replies:?}");
    assert!(replies[1].starts_with("ERR empty line"), "{replies:?}");
    assert!(
        replies[2].starts_with("ERR unknown event 'HELLO'"),
        "{replies:?}"
    );
    assert!(
        replies[3].starts_with("ERR line is not UTF-8"),
        "{replies:?}"
    );
    assert!(
        replies[4].starts_with("ERR unknown event 'LOW'"),
        "{replies:?}"
    );
    assert_eq!(replies[5], "OK ignored COMMBAD");
    // A line too long is refused and skipped; the next line on that connection is served.
    let long = vec![b'A'; powerfail::MAX_LINE + 50];
    let replies = talk(&path, &[&long, b"ONBATT"]);
    assert_eq!(replies.len(), 2, "{replies:?}");
    assert!(
        replies[0].starts_with("ERR line longer than"),
        "{replies:?}"
    );
    assert_eq!(replies[1], "OK ignored ONBATT");
    // A client that never ends its line is closed after 64 KiB.
    {
        let mut s = UnixStream::connect(&path).unwrap();
        s.set_read_timeout(Some(HANG)).unwrap();
        let endless = vec![b'B'; 128 * 1024];
        let _ = s.write_all(&endless); // fails once the server closes: expected
        // The reply stays readable even if the close also reports a reset after it.
        let mut all = Vec::new();
        let _ = s.read_to_end(&mut all);
        let all = String::from_utf8_lossy(&all);
        assert!(all.starts_with("ERR line longer than"), "{all}");
        assert_eq!(all.lines().count(), 1, "{all}");
    }
    // A client that sends a partial line and hangs up gets its line judged, then EOF.
    {
        let mut s = UnixStream::connect(&path).unwrap();
        s.write_all(b"NOPE").unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut reply = String::new();
        s.set_read_timeout(Some(HANG)).unwrap();
        BufReader::new(s).read_line(&mut reply).unwrap();
        assert!(reply.starts_with("ERR unknown event 'NOPE'"), "{reply}");
    }
    // Nothing malformed reached the save thread; the socket still serves.
    assert!(thread.try_recv().is_none());
    assert_eq!(talk(&path, &[b"LOWBATT"]), ["OK save LOWBATT"]);
    let (w, _, _) = saved(thread.recv(HANG));
    assert_eq!(
        w.source,
        Source::Ups {
            event: UpsEvent::LowBatt,
            detail: String::new()
        }
    );
    assert_eq!(count(&l, "save a"), 1);
}

#[test]
fn ups_socket_replaces_a_stale_socket_and_refuses_a_live_one_or_a_plain_file() {
    let pf = registry();
    let thread = SaveThread::spawn(&pf, HoldPolicy::ResumeAfterSave).unwrap();
    let path = sock_path("stale");
    // A stale socket file: bound, then its listener dropped without removing the file.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let live = UpsSocket::bind(&path, thread.sink(), UpsConfig::default()).unwrap();
    match UpsSocket::bind(&path, thread.sink(), UpsConfig::default()) {
        Err(PowerFailError::SocketInUse { path: p }) => assert_eq!(p, path),
        other => panic!("expected SocketInUse, got {other:?}"),
    }
    drop(live);
    let file = sock_path("plainfile");
    std::fs::write(&file, b"not a socket").unwrap();
    let err = UpsSocket::bind(&file, thread.sink(), UpsConfig::default()).unwrap_err();
    assert!(err.to_string().contains("not a socket"), "{err}");
    assert!(file.exists(), "a plain file is never removed");
    std::fs::remove_file(&file).unwrap();
}

#[test]
fn the_registry_knows_whether_a_live_source_can_start_a_save() {
    let pf = registry();
    assert!(!pf.armed());
    let thread = SaveThread::spawn(&pf, HoldPolicy::ResumeAfterSave).unwrap();
    assert!(
        !pf.armed(),
        "a save thread without a source cannot be woken"
    );
    let m = thread.manual("sim", roomy());
    let m2 = m.clone();
    assert!(pf.armed());
    assert_eq!(pf.sources(), [("manual (sim)".to_string(), true)]);
    drop(m);
    assert!(pf.armed(), "a clone still lives");
    drop(m2);
    assert!(!pf.armed());
    let path = sock_path("armed");
    let ups = UpsSocket::bind(&path, thread.sink(), UpsConfig::default()).unwrap();
    assert!(pf.armed());
    assert_eq!(
        pf.sources(),
        [(format!("UPS socket {}", path.display()), true)]
    );
    drop(thread);
    assert!(!pf.armed(), "the socket's save thread is gone");
    assert_eq!(
        pf.sources(),
        [(format!("UPS socket {}", path.display()), false)]
    );
    drop(ups);
    assert!(pf.sources().is_empty());
}
