//! A fault-injecting TCP proxy for the multi-process tests: put it between two `kavach serve`
//! processes (say a primary and a backup) and break the link between them on command.
//!
//! [`Proxy::start`] listens on `127.0.0.1:0`; every client connection it accepts gets its own
//! connection to the target, and bytes are copied both ways, one thread per direction. The test
//! thread switches the [`Fault`] with [`Proxy::set`] at any moment; the new mode applies at once
//! to every open connection and to the ones accepted later.
//!
//! # Faults, and what a TCP peer sees
//!
//! * [`Fault::Pass`]: bytes are forwarded as they arrive. Chunks still held by an earlier
//!   `Delay` are sent at once, in order. A half-close (EOF) is passed on as a half-close.
//! * [`Fault::Drop`]: a partition where packets vanish. Connections stay open and the proxy
//!   keeps reading both sides, so the peers' writes succeed (their send buffers never fill), but
//!   every byte read, and every chunk still held by a `Delay`, is discarded. A peer's reads time
//!   out; it sees neither EOF nor a reset. An EOF or error from one side is held back while the
//!   mode stays `Drop` (a real partition loses the FIN too) and delivered when it changes. A
//!   connection made during `Drop` is accepted and connected to the target as usual (unlike a
//!   real partition, where the connect itself would time out), then carries nothing. Bytes
//!   sent during `Drop` are lost for good: switching back to `Pass` does not resend them, so a
//!   protocol over this link sees a gap in the stream, which is how a test finds out whether it
//!   notices one.
//! * [`Fault::Delay`]: every chunk is stamped when it is read and written to the other side
//!   once it has been held for the given time. Each direction keeps its own queue, so order is
//!   kept per direction, and reading goes on while chunks wait (a slow link, not a stalled one).
//!   Changing the delay does not move the chunks already queued.
//! * [`Fault::Cut`]: both sockets of every open connection are shut down at once, so each peer
//!   reads EOF (or gets a reset if it writes after that), and, while the mode stays `Cut`, a new
//!   connection is accepted and closed at once: the connect succeeds, then the first read
//!   returns EOF. Held chunks are discarded. A connection cut this way stays dead after `Pass`;
//!   the peers must reconnect.
//!
//! The proxy's threads are named after its port `P`: `pxP` accepts, and connection `N` is
//! copied by `pxP>N` (client to target) and `pxP<N` (target to client).
//!
//! An I/O error on either socket ends that connection only (both its sockets are shut down);
//! nothing in here panics on a peer's behaviour. Dropping the [`Proxy`] stops the accept thread
//! and shuts down and joins every forwarding thread before it returns, so a test can create as
//! many proxies as it likes.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long the accept thread sleeps when no connection is waiting (its listener is
/// non-blocking, so that it can notice the stop flag).
const ACCEPT_POLL: Duration = Duration::from_millis(2);

/// The longest a forwarding thread blocks in a read before it looks at the mode, its queue and
/// the stop flag again.
const TICK: Duration = Duration::from_millis(10);

/// How long a connection to the target may take before the client's connection is given up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The size of one read, and so the largest chunk a `Delay` holds.
const CHUNK: usize = 16 * 1024;

/// What the proxy does to the bytes (and connections) passing through it; see the module doc
/// for what each peer observes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    /// Forward normally.
    #[default]
    Pass,
    /// Black-hole: keep connections open, read and discard everything in both directions.
    Drop,
    /// Forward each chunk once it has been held for this long, in order per direction.
    Delay(Duration),
    /// Shut down every open connection, and close new ones as soon as they are accepted.
    Cut,
}

/// Counters for a test's diagnostics, from [`Proxy::stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Client connections accepted (including those closed at once under `Cut`).
    pub accepted: u64,
    /// Client connections closed at once because the mode was `Cut`.
    pub refused: u64,
    /// Connections open now (both directions not yet finished).
    pub open: u64,
    /// Bytes written to the target (client to target).
    pub to_target: u64,
    /// Bytes written to clients (target to client).
    pub to_client: u64,
    /// Bytes read and discarded, both directions: read under `Drop`, or held by a `Delay` when
    /// the mode changed to `Drop` or `Cut`.
    pub dropped: u64,
}

/// A fault-injecting TCP proxy in front of one target address; see the module doc.
pub struct Proxy {
    addr: SocketAddr,
    target: SocketAddr,
    shared: Arc<Shared>,
    /// The accept thread; it returns the handles of the connection threads it started.
    accept: Option<JoinHandle<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    /// Listen on `127.0.0.1:0` and forward every accepted connection to `target`, starting in
    /// [`Fault::Pass`].
    pub fn start(target: SocketAddr) -> io::Result<Proxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            port: addr.port(),
            target,
            fault: Mutex::new(Fault::Pass),
            stop: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            to_target: AtomicU64::new(0),
            to_client: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        });
        let for_thread = Arc::clone(&shared);
        let accept = thread::Builder::new()
            .name(format!("px{}", addr.port()))
            .spawn(move || accept_loop(&for_thread, &listener))?;
        Ok(Proxy {
            addr,
            target,
            shared,
            accept: Some(accept),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address every connection is forwarded to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// The current mode.
    pub fn fault(&self) -> Fault {
        self.shared.fault()
    }

    /// Switch to `fault`, for the open connections and the ones accepted from now on. A switch
    /// to [`Fault::Cut`] has shut down every open connection by the time this returns.
    pub fn set(&self, fault: Fault) {
        *lock(&self.shared.fault) = fault;
        if fault == Fault::Cut {
            // The mode is written before the registry is locked, and a new connection is
            // registered only under that lock after reading the mode, so each connection is
            // either shut down here or sees `Cut` itself.
            self.shared.shutdown_all();
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        let s = &self.shared;
        Stats {
            accepted: s.accepted.load(Ordering::Relaxed),
            refused: s.refused.load(Ordering::Relaxed),
            open: lock(&s.conns).len() as u64,
            to_target: s.to_target.load(Ordering::Relaxed),
            to_client: s.to_client.load(Ordering::Relaxed),
            dropped: s.dropped.load(Ordering::Relaxed),
        }
    }
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.addr)
            .field("target", &self.target)
            .field("fault", &self.fault())
            .field("stats", &self.stats())
            .finish()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.shutdown_all();
        // The accept thread sees the flag within ACCEPT_POLL and starts no thread after that;
        // each connection thread sees it within TICK (or at once, from the shutdown) and joins
        // its reverse-direction thread before it ends.
        let handles = self
            .accept
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        for h in handles {
            let _ = h.join();
        }
        // A connection registered after the shutdown above ended on the stop flag; make sure
        // no socket outlives the proxy.
        self.shared.shutdown_all();
    }
}

/// What the proxy's threads share.
struct Shared {
    /// The listening port, which names the threads.
    port: u16,
    target: SocketAddr,
    fault: Mutex<Fault>,
    stop: AtomicBool,
    /// The open connections, by id: clones of the client and target sockets, kept to shut them
    /// down on `Cut` and on drop.
    conns: Mutex<HashMap<u64, [TcpStream; 2]>>,
    accepted: AtomicU64,
    refused: AtomicU64,
    to_target: AtomicU64,
    to_client: AtomicU64,
    dropped: AtomicU64,
}

impl Shared {
    fn fault(&self) -> Fault {
        *lock(&self.fault)
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Shut down both sockets of every open connection (their threads then end, and the last
    /// of each pair removes it from the registry).
    fn shutdown_all(&self) {
        for [client, server] in lock(&self.conns).values() {
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
        }
    }
}

/// A lock that a panicking holder (there should be none) does not poison for the others.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Accept until the stop flag is set; return the connection threads still running.
fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener) -> Vec<JoinHandle<()>> {
    let mut handles: Vec<JoinHandle<()>> = Vec::new();
    let mut next_id = 0u64;
    while !shared.stopping() {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            // Nothing waiting, or a transient failure (out of descriptors, an aborted
            // handshake): try again shortly.
            Err(_) => {
                thread::sleep(ACCEPT_POLL);
                continue;
            }
        };
        shared.accepted.fetch_add(1, Ordering::Relaxed);
        if shared.fault() == Fault::Cut {
            shared.refused.fetch_add(1, Ordering::Relaxed);
            let _ = client.shutdown(Shutdown::Both);
            continue;
        }
        // On some platforms an accepted socket inherits the listener's non-blocking mode.
        if client.set_nonblocking(false).is_err() {
            continue;
        }
        handles.retain(|h| !h.is_finished());
        let id = next_id;
        next_id += 1;
        let for_thread = Arc::clone(shared);
        // If the thread cannot be started, the closure (and the client socket) is dropped,
        // which closes the connection.
        if let Ok(h) = thread::Builder::new()
            .name(format!("px{}>{id}", shared.port))
            .spawn(move || connection(&for_thread, client, id))
        {
            handles.push(h);
        }
    }
    handles
}

/// One client connection: connect to the target, register, forward client to target on this
/// thread and target to client on another, and unregister when both have ended.
fn connection(shared: &Arc<Shared>, client: TcpStream, id: u64) {
    let Ok(server) = TcpStream::connect_timeout(&shared.target, CONNECT_TIMEOUT) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let clones = (|| {
        Ok::<_, io::Error>((
            [client.try_clone()?, server.try_clone()?],
            client.try_clone()?,
            server.try_clone()?,
        ))
    })();
    let Ok((registered, client_w, server_r)) = clones else {
        close_both(&client, &server);
        return;
    };
    {
        let mut conns = lock(&shared.conns);
        if shared.stopping() || shared.fault() == Fault::Cut {
            close_both(&client, &server);
            return;
        }
        conns.insert(id, registered);
    }
    let back_shared = Arc::clone(shared);
    let back = thread::Builder::new()
        .name(format!("px{}<{id}", shared.port))
        .spawn(move || forward(&back_shared, &server_r, &client_w, &back_shared.to_client));
    match back {
        Ok(back) => {
            forward(shared, &client, &server, &shared.to_target);
            let _ = back.join();
        }
        Err(_) => close_both(&client, &server),
    }
    lock(&shared.conns).remove(&id);
}

fn close_both(a: &TcpStream, b: &TcpStream) {
    let _ = a.shutdown(Shutdown::Both);
    let _ = b.shutdown(Shutdown::Both);
}

/// How a direction ended, once its queue is empty and the mode lets the ending through.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    /// Still reading.
    Open,
    /// The source half-closed: half-close the destination.
    Eof,
    /// The source failed (a reset): shut down the whole connection.
    Failed,
}

/// Copy `from` to `to` under the current fault until either side ends, counting the bytes
/// written in `forwarded`.
fn forward(shared: &Shared, from: &TcpStream, to: &TcpStream, forwarded: &AtomicU64) {
    let mut queue: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    let mut buf = vec![0u8; CHUNK];
    let mut end = End::Open;
    loop {
        if shared.stopping() {
            close_both(from, to);
            return;
        }
        let fault = shared.fault();
        // Deal with the held chunks first: the mode may have changed since they were queued.
        let sent = match fault {
            Fault::Cut => {
                discard(shared, &mut queue);
                close_both(from, to);
                return;
            }
            Fault::Drop => {
                discard(shared, &mut queue);
                Ok(())
            }
            Fault::Pass => send_due(&mut queue, to, None, forwarded),
            Fault::Delay(_) => send_due(&mut queue, to, Some(Instant::now()), forwarded),
        };
        if sent.is_err() {
            close_both(from, to);
            return;
        }
        let wait = queue.front().map_or(TICK, |(due, _)| {
            due.saturating_duration_since(Instant::now())
                .clamp(Duration::from_millis(1), TICK)
        });
        if end != End::Open {
            // Nothing more to read: deliver the rest, then the ending (held while partitioned).
            if queue.is_empty() && fault != Fault::Drop {
                if end == End::Eof {
                    let _ = to.shutdown(Shutdown::Write);
                } else {
                    close_both(from, to);
                }
                return;
            }
            thread::sleep(wait);
            continue;
        }
        if from.set_read_timeout(Some(wait)).is_err() {
            close_both(from, to);
            return;
        }
        let n = match (&*from).read(&mut buf) {
            Ok(0) => {
                end = End::Eof;
                continue;
            }
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(_) => {
                end = End::Failed;
                continue;
            }
        };
        // The mode may have changed while the read was blocked.
        match shared.fault() {
            Fault::Pass => {
                let chunk = buf[..n].to_vec();
                queue.push_back((Instant::now(), chunk));
                if send_due(&mut queue, to, None, forwarded).is_err() {
                    close_both(from, to);
                    return;
                }
            }
            Fault::Drop => {
                shared.dropped.fetch_add(n as u64, Ordering::Relaxed);
            }
            Fault::Delay(d) => queue.push_back((Instant::now() + d, buf[..n].to_vec())),
            Fault::Cut => {
                shared.dropped.fetch_add(n as u64, Ordering::Relaxed);
                discard(shared, &mut queue);
                close_both(from, to);
                return;
            }
        }
    }
}

/// Write the chunks at the front of `queue` that are due by `now` (all of them when `now` is
/// `None`), in order.
fn send_due(
    queue: &mut VecDeque<(Instant, Vec<u8>)>,
    to: &TcpStream,
    now: Option<Instant>,
    forwarded: &AtomicU64,
) -> io::Result<()> {
    while let Some((due, _)) = queue.front() {
        if now.is_some_and(|now| *due > now) {
            break;
        }
        let Some((_, chunk)) = queue.pop_front() else {
            break;
        };
        (&*to).write_all(&chunk)?;
        forwarded.fetch_add(chunk.len() as u64, Ordering::Relaxed);
    }
    Ok(())
}

/// Throw away the held chunks, counting them as dropped.
fn discard(shared: &Shared, queue: &mut VecDeque<(Instant, Vec<u8>)>) {
    let bytes: usize = queue.drain(..).map(|(_, chunk)| chunk.len()).sum();
    shared.dropped.fetch_add(bytes as u64, Ordering::Relaxed);
}
