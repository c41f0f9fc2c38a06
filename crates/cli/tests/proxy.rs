//! The fault-injecting TCP proxy of `common::proxy`, tested against a small echo server: each
//! fault does to a live connection what its documentation says a peer observes, and switching
//! back to `Pass` restores the link.
//!
//! Timing checks are lower bounds only (a delay is at least as long as asked); a test waits at
//! most a few hundred milliseconds for something that should not happen.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use common::proxy::*;

/// How long a client read waits before a test calls it a hang.
const PATIENCE: Duration = Duration::from_secs(2);

/// An echo server on `127.0.0.1:0`, one thread per connection; it lives as long as the test
/// process.
fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            thread::spawn(move || {
                let mut buf = [0u8; 4096];
                loop {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if stream.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

/// A server on `127.0.0.1:0` that, on each connection, writes `tick` every 20 ms until the
/// write fails.
fn ticker() -> SocketAddr {
    let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            thread::spawn(move || {
                while stream.write_all(b"tick").is_ok() {
                    thread::sleep(Duration::from_millis(20));
                }
            });
        }
    });
    addr
}

/// A client connection to the proxy, with reads that give up after `PATIENCE`.
fn client(proxy: &Proxy) -> TcpStream {
    let s = TcpStream::connect(proxy.addr()).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Send `msg` and read back exactly as many bytes.
fn round_trip(s: &mut TcpStream, msg: &[u8]) -> Vec<u8> {
    s.write_all(msg).unwrap();
    let mut back = vec![0u8; msg.len()];
    s.read_exact(&mut back).unwrap();
    back
}

/// What one read on a client socket found.
#[derive(Debug, PartialEq, Eq)]
enum Read1 {
    Data(Vec<u8>),
    Eof,
    Reset,
    TimedOut,
}

/// One read, with `timeout` as the read timeout.
fn read_once(s: &mut TcpStream, timeout: Duration) -> Read1 {
    s.set_read_timeout(Some(timeout)).unwrap();
    let mut buf = [0u8; 4096];
    let got = match s.read(&mut buf) {
        Ok(0) => Read1::Eof,
        Ok(n) => Read1::Data(buf[..n].to_vec()),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            Read1::TimedOut
        }
        Err(_) => Read1::Reset,
    };
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    got
}

/// The connection is gone: a read finds EOF or a reset, not data and not a timeout.
fn assert_closed(s: &mut TcpStream) {
    let got = read_once(s, PATIENCE);
    assert!(
        got == Read1::Eof || got == Read1::Reset,
        "expected EOF or a reset, got {got:?}"
    );
}

/// Wait (briefly) until `ok(stats)` holds: the counters are updated after the bytes are
/// written, so a client can see the bytes a moment before the counters do.
fn wait_stats(proxy: &Proxy, ok: impl Fn(&Stats) -> bool) -> Stats {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let stats = proxy.stats();
        if ok(&stats) || Instant::now() > deadline {
            return stats;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn pass_forwards_both_ways() {
    let proxy = Proxy::start(echo_server()).unwrap();
    assert_eq!(proxy.fault(), Fault::Pass);
    let mut a = client(&proxy);
    let mut b = client(&proxy);
    assert_eq!(round_trip(&mut a, b"hello"), b"hello");
    assert_eq!(round_trip(&mut b, b"other"), b"other");
    assert_eq!(round_trip(&mut a, b"again"), b"again");

    // More than the socket buffers hold, written while the echo is read back.
    let big: Vec<u8> = (0..256 * 1024u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut writer = a.try_clone().unwrap();
    let sent = big.clone();
    let t = thread::spawn(move || writer.write_all(&sent).unwrap());
    let mut back = vec![0u8; big.len()];
    a.read_exact(&mut back).unwrap();
    t.join().unwrap();
    assert!(back == big, "the echo differs from what was sent");

    // A half-close goes through: the echo server sees EOF, closes, and the client sees EOF.
    a.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_once(&mut a, PATIENCE), Read1::Eof);
    // The other connection is unaffected.
    assert_eq!(round_trip(&mut b, b"still"), b"still");

    let total = (5 + 5 + 5 + big.len() + 5) as u64;
    let stats = wait_stats(&proxy, |s| s.to_target >= total && s.to_client >= total);
    assert_eq!(stats.accepted, 2, "{stats:?}");
    assert_eq!(stats.to_target, total, "{stats:?}");
    assert_eq!(stats.to_client, total, "{stats:?}");
    assert_eq!((stats.dropped, stats.refused), (0, 0), "{stats:?}");
}

#[test]
fn drop_black_holes_then_pass_resumes_on_the_same_connection() {
    let proxy = Proxy::start(echo_server()).unwrap();
    let mut c = client(&proxy);
    assert_eq!(round_trip(&mut c, b"before"), b"before");

    proxy.set(Fault::Drop);
    // The write succeeds (the proxy keeps reading), but nothing comes back, and the connection
    // is not closed: the read times out.
    c.write_all(b"lost").unwrap();
    assert_eq!(
        read_once(&mut c, Duration::from_millis(300)),
        Read1::TimedOut
    );
    // A connection made during the partition is accepted and black-holed too.
    let mut during = client(&proxy);
    during.write_all(b"void").unwrap();
    assert_eq!(
        read_once(&mut during, Duration::from_millis(300)),
        Read1::TimedOut
    );
    let stats = wait_stats(&proxy, |s| s.dropped >= 8);
    assert_eq!(stats.dropped, 8, "{stats:?}");

    proxy.set(Fault::Pass);
    // New bytes flow on the same connections; the ones sent during the partition are gone.
    assert_eq!(round_trip(&mut c, b"after"), b"after");
    assert_eq!(
        read_once(&mut c, Duration::from_millis(200)),
        Read1::TimedOut,
        "nothing but the new bytes comes back"
    );
    assert_eq!(round_trip(&mut during, b"healed"), b"healed");
}

#[test]
fn drop_discards_what_the_target_sends_too() {
    let proxy = Proxy::start(ticker()).unwrap();
    let mut c = client(&proxy);
    assert!(matches!(read_once(&mut c, PATIENCE), Read1::Data(_)));

    proxy.set(Fault::Drop);
    // Ticks already past the proxy may still arrive; read them, then nothing more comes.
    for _ in 0..20 {
        if read_once(&mut c, Duration::from_millis(50)) == Read1::TimedOut {
            break;
        }
    }
    assert_eq!(
        read_once(&mut c, Duration::from_millis(300)),
        Read1::TimedOut
    );
    let stats = proxy.stats();
    assert!(stats.dropped > 0, "{stats:?}");

    proxy.set(Fault::Pass);
    assert!(matches!(read_once(&mut c, PATIENCE), Read1::Data(_)));
}

#[test]
fn delay_holds_every_chunk_and_keeps_order() {
    let proxy = Proxy::start(echo_server()).unwrap();
    let mut c = client(&proxy);
    assert_eq!(round_trip(&mut c, b"fast"), b"fast");

    // Applies to the connection already open.
    let delay = Duration::from_millis(200);
    proxy.set(Fault::Delay(delay));
    let t0 = Instant::now();
    assert_eq!(round_trip(&mut c, b"slow"), b"slow");
    // Held once each way.
    let took = t0.elapsed();
    assert!(took >= 2 * delay, "round trip took {took:?}");

    // Several chunks sent apart arrive whole and in order, and reading went on while they
    // were held: the last one is back well before five delays have passed one after another
    // (not asserted: no upper bounds on timing), and at least two delays after it was sent.
    let parts: [&[u8]; 5] = [b"one,", b"two,", b"three,", b"four,", b"five"];
    let t0 = Instant::now();
    for p in parts {
        c.write_all(p).unwrap();
        thread::sleep(Duration::from_millis(20));
    }
    let want: Vec<u8> = parts.concat();
    let mut back = vec![0u8; want.len()];
    c.read_exact(&mut back).unwrap();
    assert_eq!(back, want);
    assert!(t0.elapsed() >= 2 * delay, "took {:?}", t0.elapsed());

    // A new connection is delayed as well.
    let mut d = client(&proxy);
    let t0 = Instant::now();
    assert_eq!(round_trip(&mut d, b"new"), b"new");
    assert!(t0.elapsed() >= 2 * delay, "took {:?}", t0.elapsed());

    proxy.set(Fault::Pass);
    assert_eq!(round_trip(&mut c, b"fast again"), b"fast again");
}

#[test]
fn cut_closes_connections_and_refuses_new_ones_until_pass() {
    let proxy = Proxy::start(echo_server()).unwrap();
    let mut c = client(&proxy);
    assert_eq!(round_trip(&mut c, b"hello"), b"hello");

    proxy.set(Fault::Cut);
    assert_closed(&mut c);

    // A new connection is accepted and closed at once.
    let mut refused = client(&proxy);
    assert_closed(&mut refused);
    let stats = wait_stats(&proxy, |s| s.refused >= 1 && s.open == 0);
    assert_eq!(
        (stats.accepted, stats.refused, stats.open),
        (2, 1, 0),
        "{stats:?}"
    );

    proxy.set(Fault::Pass);
    let mut fresh = client(&proxy);
    assert_eq!(round_trip(&mut fresh, b"reconnected"), b"reconnected");
    // The connection that was cut stays dead.
    let _ = c.write_all(b"x");
    assert_closed(&mut c);
}

#[test]
fn an_unreachable_target_closes_the_client() {
    // A port nobody listens on any more.
    let gone = TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap();
    let proxy = Proxy::start(gone).unwrap();
    let mut c = client(&proxy);
    assert_closed(&mut c);
    assert_eq!(proxy.stats().open, 0);
}

#[test]
fn dropping_the_proxy_ends_its_connections() {
    let echo = echo_server();
    for round in 0..20 {
        let proxy = Proxy::start(echo).unwrap();
        let mut passing = client(&proxy);
        assert_eq!(round_trip(&mut passing, b"hi"), b"hi");
        let mut held = client(&proxy);
        // Leave a chunk in a delay queue and a thread blocked in a read.
        proxy.set(if round % 2 == 0 {
            Fault::Delay(Duration::from_secs(60))
        } else {
            Fault::Drop
        });
        held.write_all(b"queued").unwrap();
        let port = proxy.addr().port();
        assert!(!threads_of(port).is_empty());
        drop(proxy);
        // Every thread has been joined by the time the drop returns. A joined thread can still
        // show in /proc/self/task for a moment: the kernel wakes the joiner when the thread
        // clears its tid, which is before the task is released. So a thread still listed must
        // go away on its own (polled up to 2 s), not merely have been listed once.
        let mut left = threads_of(port);
        for _ in 0..200 {
            if left.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
            left = threads_of(port);
        }
        assert!(left.is_empty(), "threads left running: {left:?}");
        assert_closed(&mut passing);
        assert_closed(&mut held);
    }
}

/// The names of this process's threads that belong to the proxy listening on `port` (see the
/// naming in `common::proxy`); on systems without `/proc`, none are found.
fn threads_of(port: u16) -> Vec<String> {
    let accept = format!("px{port}");
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_string())
        .filter(|name| {
            name == &accept
                || name
                    .strip_prefix(&accept)
                    .is_some_and(|rest| rest.starts_with(['<', '>']))
        })
        .collect()
}
