//! Server lifecycle: SHUTDOWN, the shutdown handle, draining of requests already read, and the
//! client limit.

mod support;

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Instant;

use server::{Config, Server};
use support::{Client, IO_TIMEOUT, ReferenceBackend, TestServer, expect, frame, show};

#[test]
fn shutdown_command_stops_the_server_once() {
    let mut server = TestServer::default_config();
    let mut idle = server.client();
    expect(&mut idle, "PING", "+PONG\r\n");
    let mut c = server.client();
    // Requests before SHUTDOWN in the same write are answered; SHUTDOWN itself gets no reply.
    let mut batch = frame(&[b"SET", b"a", b"1"]);
    batch.extend(frame(&[b"GET", b"a"]));
    batch.extend(frame(&[b"SHUTDOWN"]));
    batch.extend(frame(&[b"PING"]));
    c.send_raw(&batch);
    assert_eq!(show(&c.read_to_close()), show(b"+OK\r\n$1\r\n1\r\n"));
    assert_eq!(idle.read_to_close(), b"", "other connections are closed");
    let summary = server.join();
    assert_eq!(server.backend.shutdown_calls(), 1);
    assert_eq!(summary.backend_shutdown, Ok(()));
    assert_eq!(summary.connections_accepted, 2);
    assert_eq!(summary.commands_processed, 4);
    assert_eq!(summary.worker_panics, 0);
    assert!(
        std::net::TcpStream::connect(server.addr).is_err(),
        "listener closed"
    );
}

#[test]
fn shutdown_arguments() {
    let mut server = TestServer::default_config();
    let mut c = server.client();
    expect(&mut c, "SHUTDOWN bogus", "-ERR syntax error\r\n");
    expect(&mut c, "SHUTDOWN SAVE NOSAVE", "-ERR syntax error\r\n");
    expect(
        &mut c,
        "SHUTDOWN ABORT",
        "-ERR No shutdown in progress.\r\n",
    );
    expect(&mut c, "PING", "+PONG\r\n");
    c.send(&support::words("shutdown save now"));
    assert_eq!(c.read_to_close(), b"");
    server.join();
    assert_eq!(server.backend.save_calls(), 1);
    assert_eq!(server.backend.shutdown_calls(), 1);
}

#[test]
fn handle_shutdown_closes_idle_connections() {
    let server = TestServer::default_config();
    let mut clients: Vec<Client> = (0..6).map(|_| server.client()).collect();
    for c in &mut clients {
        expect(c, "PING", "+PONG\r\n");
    }
    let backend = Arc::clone(&server.backend);
    let summary = server.stop();
    assert_eq!(backend.shutdown_calls(), 1);
    assert_eq!(summary.connections_accepted, 6);
    for c in &mut clients {
        assert_eq!(c.read_to_close(), b"");
    }
}

#[test]
fn shutdown_before_run_returns_at_once() {
    let backend = ReferenceBackend::new();
    let server = Server::bind(
        Config {
            port: 0,
            workers: 3,
            ..Config::default()
        },
        backend.clone(),
    )
    .expect("bind");
    let handle = server.handle();
    handle.shutdown();
    handle.shutdown();
    assert!(handle.is_shutdown_requested());
    let summary = server.run().expect("run");
    assert_eq!(summary.commands_processed, 0);
    assert_eq!(backend.shutdown_calls(), 1);
}

/// The port is bound before there is a backend (`kavach serve` binds, then opens its store):
/// a port in use fails with no backend made, and a client that connects before the backend
/// exists is served once the server runs.
#[test]
fn a_listener_binds_before_the_backend_exists() {
    let listener = server::Listener::bind(Config {
        port: 0,
        workers: 2,
        ..Config::default()
    })
    .expect("bind");
    let addr = listener.local_addr();
    let taken = server::Listener::bind(Config {
        port: addr.port(),
        ..Config::default()
    })
    .unwrap_err();
    assert_eq!(taken.kind(), std::io::ErrorKind::AddrInUse);
    let mut early = std::net::TcpStream::connect(addr).expect("connect to the backlog");
    early.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    let backend = ReferenceBackend::new();
    let server = listener.into_server(backend.clone());
    let handle = server.handle();
    let running = std::thread::spawn(move || server.run());
    early.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
    let mut reply = [0u8; 7];
    early.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"+PONG\r\n");
    handle.shutdown();
    let summary = running.join().unwrap().expect("run");
    assert_eq!(summary.commands_processed, 1);
    assert_eq!(backend.shutdown_calls(), 1);
}

#[test]
fn invalid_config_is_refused() {
    for config in [
        Config {
            port: 0,
            workers: 0,
            ..Config::default()
        },
        Config {
            port: 0,
            max_clients: 0,
            ..Config::default()
        },
    ] {
        let err = Server::bind(config, ReferenceBackend::new()).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    }
}

#[test]
fn max_clients_is_enforced() {
    let server = TestServer::start(|c| c.max_clients = 2);
    let mut a = server.client();
    let mut b = server.client();
    expect(&mut a, "PING", "+PONG\r\n");
    expect(&mut b, "PING", "+PONG\r\n");
    let mut refused = server.client();
    assert_eq!(
        show(&refused.read_to_close()),
        show(b"-ERR max number of clients reached\r\n")
    );
    expect(&mut a, "PING", "+PONG\r\n");
    drop(b);
    // The slot frees once the server has seen the close; retry (bounded) until it has.
    let deadline = Instant::now() + IO_TIMEOUT;
    loop {
        let mut c = server.client();
        c.send_raw(b"PING\r\n");
        let got = c.read_to_close_or_reply();
        if got == b"+PONG\r\n" {
            break;
        }
        assert_eq!(show(&got), show(b"-ERR max number of clients reached\r\n"));
        assert!(Instant::now() < deadline, "slot never freed");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let summary = server.stop();
    assert!(summary.connections_rejected >= 1);
}

trait ReadOne {
    /// Reads one reply, or everything until close if the server closes first.
    fn read_to_close_or_reply(&mut self) -> Vec<u8>;
}

impl ReadOne for Client {
    fn read_to_close_or_reply(&mut self) -> Vec<u8> {
        use std::io::Read;
        let mut got = Vec::new();
        let mut chunk = [0u8; 256];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return got,
                Ok(n) => {
                    got.extend_from_slice(&chunk[..n]);
                    if got.ends_with(b"\r\n") {
                        return got;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
                Err(e) => panic!("{e}"),
            }
        }
    }
}

/// Group commit's contract on the server's side: every reply leaves after a `Backend::sync`,
/// one sync covers a whole pipeline read at once (not one per request), and when the store
/// cannot sync no reply leaves: the connection is closed instead, and the server goes on.
#[test]
fn replies_leave_only_after_the_store_syncs_once_per_batch() {
    let server = TestServer::start(|c| c.workers = 1);
    let mut c = server.client();
    let before = server.backend.sync_calls();
    expect(&mut c, "SET a 1", "+OK\r\n");
    assert!(
        server.backend.sync_calls() > before,
        "a reply left without a sync"
    );
    // A pipeline of 100 writes in one send: read, executed and answered together.
    let mut batch = Vec::new();
    for i in 0..100 {
        batch.extend(frame(&[b"SET", format!("k{i}").as_bytes(), b"v"]));
    }
    let before = server.backend.sync_calls();
    c.send_raw(&batch);
    for _ in 0..100 {
        assert_eq!(show(&c.read_reply_bytes()), "+OK\\r\\n");
    }
    let syncs = server.backend.sync_calls() - before;
    assert!(
        (1..=4).contains(&syncs),
        "{syncs} syncs for one pipeline of 100 writes"
    );
    // The store cannot make writes durable: the reply is withheld and the connection closed.
    let failing = |on: bool| {
        server
            .backend
            .fail_sync
            .store(on, std::sync::atomic::Ordering::SeqCst)
    };
    failing(true);
    let mut doomed = server.client();
    doomed.send(&[b"SET", b"b", b"2"]);
    assert_eq!(
        show(&doomed.read_to_close()),
        "",
        "a reply left without a sync"
    );
    failing(false);
    let mut after = server.client();
    expect(&mut after, "GET a", "$1\r\n1\r\n");
}
