//! The TCP server: mio event loops on worker threads, run-to-completion request handling, limits,
//! and graceful shutdown.
//!
//! # Threads
//!
//! The thread that calls [`Server::run`] becomes the *acceptor*: it owns the listening socket and
//! hands each accepted connection to a worker, round-robin, over a channel plus a [`Waker`]. We
//! chose one acceptor over "every worker polls the shared listener" because it makes the
//! `max_clients` check exact (only the acceptor admits connections, so the count it checks cannot
//! race), spreads connections evenly instead of to whichever worker wakes first, and keeps
//! shutdown simple (one place stops accepting). Accepting is cheap next to serving, so the extra
//! hop costs nothing measurable.
//!
//! Each of the `workers` threads owns its connections for their whole life and its own mio
//! [`Poll`] (edge-triggered). On readiness it reads what is available and executes every
//! complete pipelined request in order, appending replies to the connection's output buffer.
//! As Redis does, the replies wait until the worker has executed the requests of every
//! connection its poll found ready; then all are written, each connection's in one go.
//! Commands run to completion on the worker, including the backend call.
//!
//! Before any reply leaves, the worker asks the backend to make every write applied so far
//! durable ([`Backend::sync`]). A store that defers its log forces to that call (`kavach
//! serve --group-commit on`) thus forces once for all the writes of a pass, from every
//! connection served in it: group commit across connections, each acknowledged only after the
//! force. A reply to a reader of a not yet durable write waits for the same force.
//!
//! # Connections that talk to each other
//!
//! Each connection has a mailbox (`notify::Mailbox`); other threads put pub/sub
//! messages, wake-ups and CLIENT UNBLOCK requests in it and ring the owning worker's doorbell
//! (its token in a list plus the worker's [`Waker`]). The worker writes the messages between
//! replies. A blocking command (BLPOP and kin) that finds nothing parks its connection: it is
//! queued on its keys in the notifier (then looked at once more, so a write between its first
//! look and the parking is not missed), runs nothing else, and runs the same command again
//! when the first write to one of its keys wakes it (first come, first served per key); the
//! worker's poll timeout covers the parked connections' deadlines. As in Redis, the clients a
//! write wakes are served before the writer hears back: the writer holds its replies (and
//! runs nothing more) until each client it woke has run again, and those in turn wait for the
//! clients they wake (at most 2 s).
//!
//! A background thread expires keys every [`Config::active_expiry_period`]: it asks the store
//! for keys past their deadline and deletes those still past it, under their locks, as logged
//! deletions.
//!
//! # Bounds
//!
//! - Input: a request larger than [`Limits::max_request_bytes`] is a protocol error, so a
//!   connection's input buffer never holds more than that plus one read.
//! - Output: when more than [`OUTPUT_PAUSE_BYTES`] of replies are unsent, the connection stops
//!   executing requests (and reading) until the client catches up, so a pipelining client that
//!   does not read cannot grow the buffer; a single reply that leaves more than
//!   [`Config::max_output_bytes`] unsent closes the connection.
//! - Fairness: one readiness event reads at most [`READ_BUDGET_BYTES`] from a connection before
//!   the worker serves the others.
//! - Connections: at most [`Config::max_clients`]; beyond that a new client gets
//!   `-ERR max number of clients reached` and is closed.
//!
//! # Shutdown
//!
//! On [`ShutdownHandle::shutdown`] (from another thread, a signal via
//! [`install_signal_handlers`], or the SHUTDOWN command): the acceptor stops accepting and closes
//! the listener; each worker executes the complete requests it has already read, stops reading,
//! writes the replies (for at most [`Config::shutdown_drain`]) and closes its connections; then
//! `run` joins the workers, calls [`Backend::shutdown`] exactly once and returns.

use std::collections::BTreeSet;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};

use crate::backend::{Backend, BackendResult};
use crate::command::{self, Action, ClientRegistry, Session};
use crate::notify::{Mailbox, Unblock};
use crate::resp::{Limits, Parse, RequestParser, write_error};

/// Bytes read per `read` call, into a per-worker scratch buffer.
pub const READ_CHUNK_BYTES: usize = 64 << 10;

/// Most bytes read from one connection per readiness event before serving others.
pub const READ_BUDGET_BYTES: usize = 1 << 20;

/// Unsent reply bytes above which a connection stops executing requests until the client reads.
pub const OUTPUT_PAUSE_BYTES: usize = 1 << 20;

/// Buffers larger than this are freed, not kept, when they empty (idle connections stay small).
const BUFFER_KEEP_BYTES: usize = 64 << 10;

/// Sent bytes at the front of an output buffer above which it is compacted.
const OUTPUT_COMPACT_BYTES: usize = 1 << 20;

/// Most bytes read and discarded from a closing connection (so that unread input does not turn
/// the close into a reset that would destroy our last reply).
const CLOSE_DISCARD_BYTES: usize = 256 << 10;

/// Whether a read that fills less than its buffer proves the socket's receive queue empty, so
/// that the connection can wait for its next readiness event without a last read that would
/// only fail with `WouldBlock` (one system call per request saved when clients wait for each
/// reply). True with epoll: a TCP read copies everything queued up to the buffer's size, and
/// every segment that arrives later queues a new edge-triggered event for the socket. The one
/// exception is an end of stream that arrived with the data (a read stops before it and the
/// event that announced it was the last): the worker notes events that report it
/// (`Conn::peer_closed`) and such connections read until the read returns 0.
const SHORT_READ_DRAINS: bool = cfg!(target_os = "linux");

/// Poll timeout while the acceptor backs off after an accept error (such as EMFILE).
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Readiness events handled per `poll` call.
const EVENTS_CAPACITY: usize = 1024;

const WAKER_TOKEN: Token = Token(usize::MAX);
const LISTENER_TOKEN: Token = Token(0);

const MAX_CLIENTS_ERROR: &[u8] = b"-ERR max number of clients reached\r\n";

/// Server settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Address to listen on (default 127.0.0.1).
    pub bind: IpAddr,
    /// Port to listen on; 0 picks a free port (see [`Server::local_addr`]). Default 6379.
    pub port: u16,
    /// Worker threads, at least 1 (default: [`default_workers`], one fewer than the available
    /// cores).
    pub workers: usize,
    /// Most connections open at once, at least 1 (default 10,000).
    pub max_clients: usize,
    /// Request parser limits.
    pub limits: Limits,
    /// The store's durability policy, shown in INFO persistence and CONFIG GET appendfsync
    /// (default `always`).
    pub durability: String,
    /// Unsent reply bytes above which a connection is closed (default 128 MiB: it must exceed the
    /// largest single reply, such as a [`Limits::max_bulk_bytes`] value).
    pub max_output_bytes: usize,
    /// How long shutdown waits for replies to be written before closing connections anyway
    /// (default 5 s).
    pub shutdown_drain: Duration,
    /// The store's memory limit in bytes, 0 for none (INFO and CONFIG `maxmemory`).
    pub maxmemory_bytes: u64,
    /// What the store does when full (CONFIG `maxmemory-policy`, default `noeviction`).
    pub maxmemory_policy: String,
    /// How often active expiry looks for keys past their deadline (default 100 ms, Redis's
    /// `hz 10`); zero turns it off.
    pub active_expiry_period: Duration,
    /// Longest a worker keeps polling for requests before it sleeps, when it was busy at least
    /// three quarters of the last [`BUSY_WINDOW`]; zero (the default, as Redis): it always
    /// sleeps at once. See [`BusyPoll`].
    pub busy_poll: Duration,
}

/// Worker threads when none are asked for: one fewer than the available cores, at least one.
///
/// The core left over runs what a write sets off besides its reply: the store's checkpoint
/// thread (DIPPER replays every logged write onto its mirror) and the kernel's network
/// processing. Measured on a 2-core machine with the clients beside the server
/// (`docs/benchmarks.md`, issue 27, fourth session): with one worker instead of two, YCSB's read
/// and update p99.9 in workloads A and B went from 1.1-1.3x Redis's to 0.92-1.02x over two
/// rounds, and redis-benchmark's P1 SET from 0.85x Redis to 0.92x; two workers were faster only
/// for pipelined requests (P16 SET 1.04x against 0.97x, GET 1.26x against 1.04x).
pub fn default_workers() -> usize {
    thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1).max(1))
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 6379,
            workers: default_workers(),
            max_clients: 10_000,
            limits: Limits::default(),
            durability: "always".to_string(),
            max_output_bytes: 128 << 20,
            shutdown_drain: Duration::from_secs(5),
            maxmemory_bytes: 0,
            maxmemory_policy: "noeviction".to_string(),
            active_expiry_period: Duration::from_millis(100),
            busy_poll: Duration::ZERO,
        }
    }
}

/// The span over which a worker measures how busy it is (see [`BusyPoll`]).
pub const BUSY_WINDOW: Duration = Duration::from_millis(2);

/// Whether a worker polls a while before it sleeps.
///
/// A worker that sleeps in `epoll_wait` is woken by the kernel when a client's request arrives,
/// and the client's CPU pays for that wake (in a virtual machine, an interrupt to an idle
/// virtual CPU). Measured with redis-benchmark at P1 on 2 vCPUs (`docs/benchmarks.md`, issue
/// 27, seventh session), Kavach's worker, faster per request than Redis, slept at 0.06-0.11 of
/// its SET requests where Redis's slept at 0.001, and the client spent 2-5% more CPU per
/// request against it: the client, not the server, bounded the throughput. A worker that was
/// busy for most of the last [`BUSY_WINDOW`] is near saturation, and its next request is likely
/// to come within microseconds, so it polls (without blocking) up to the budget before it
/// sleeps; a worker with idle time to spare sleeps at once, so a light load costs no CPU. The
/// polling is CPU the server spends: off unless asked for (`kavach serve --busy-poll-us`).
#[derive(Debug)]
struct BusyPoll {
    budget: Duration,
    /// Start of the current window and the time worked in it so far.
    window_start: Instant,
    worked: Duration,
    /// The last whole window was busy enough.
    hot: bool,
}

impl BusyPoll {
    fn new(budget: Duration, now: Instant) -> Self {
        BusyPoll {
            budget,
            window_start: now,
            worked: Duration::ZERO,
            hot: false,
        }
    }

    /// The worker worked from `from` to `to` (between two polls: time spent polling or asleep
    /// is not work).
    fn worked(&mut self, from: Instant, to: Instant) {
        self.worked += to.saturating_duration_since(from);
        let span = to.saturating_duration_since(self.window_start);
        if span >= BUSY_WINDOW {
            self.hot = self.worked.as_nanos() * 4 >= span.as_nanos() * 3;
            self.window_start = to;
            self.worked = Duration::ZERO;
        }
    }

    /// How long to poll before sleeping.
    fn spin(&self) -> Duration {
        if self.hot {
            self.budget
        } else {
            Duration::ZERO
        }
    }
}

/// What a finished [`Server::run`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    /// Connections accepted and served.
    pub connections_accepted: u64,
    /// Connections refused because `max_clients` were open.
    pub connections_rejected: u64,
    /// Requests executed.
    pub commands_processed: u64,
    /// Worker threads that panicked (a panic also shuts the server down). Zero unless there is a
    /// bug.
    pub worker_panics: usize,
    /// What [`Backend::shutdown`] returned.
    pub backend_shutdown: BackendResult<()>,
}

/// Asks a running (or not yet running) [`Server`] to shut down. Cloneable and usable from any
/// thread.
#[derive(Debug, Clone)]
pub struct ShutdownHandle {
    inner: Arc<ShutdownState>,
}

#[derive(Debug)]
struct ShutdownState {
    requested: AtomicBool,
    /// The acceptor's waker and every worker's.
    wakers: Vec<Arc<Waker>>,
}

impl ShutdownHandle {
    /// Starts a graceful shutdown (see the [module documentation](self)). Idempotent; returns at
    /// once, [`Server::run`] returns when the shutdown is done.
    pub fn shutdown(&self) {
        if !self.inner.requested.swap(true, Ordering::SeqCst) {
            for waker in &self.inner.wakers {
                // A failed wake only happens if the poll is gone, i.e. the thread has exited.
                let _ = waker.wake();
            }
        }
    }

    /// Wakes the acceptor and every worker (each worker then closes the connections CLIENT KILL
    /// marked).
    pub(crate) fn wake_all(&self) {
        for waker in &self.inner.wakers {
            let _ = waker.wake();
        }
    }

    /// Whether a shutdown has been requested.
    pub fn is_shutdown_requested(&self) -> bool {
        self.inner.requested.load(Ordering::SeqCst)
    }
}

/// Makes SIGTERM and SIGINT call [`ShutdownHandle::shutdown`], from a background thread (which
/// lives until the process exits). Call once per process, before [`Server::run`].
pub fn install_signal_handlers(handle: &ShutdownHandle) -> io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])?;
    let handle = handle.clone();
    thread::Builder::new()
        .name("kavach-signals".into())
        .spawn(move || {
            for _ in signals.forever() {
                handle.shutdown();
            }
        })?;
    Ok(())
}

/// Counters shown by INFO. `raw` values live for the whole run; INFO shows them minus the
/// baseline taken by CONFIG RESETSTAT.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) connected_clients: AtomicUsize,
    connections_received: AtomicU64,
    connections_rejected: AtomicU64,
    /// The counters every request bumps, one set per worker (see [`WorkerCounters`]).
    workers: Box<[WorkerCounters]>,
    protocol_errors: AtomicU64,
    output_limit_disconnections: AtomicU64,
    accept_errors: AtomicU64,
    pub(crate) expired_keys: AtomicU64,
    baseline: Mutex<StatsSnapshot>,
}

/// A copy of the [`Stats`] counters.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct StatsSnapshot {
    pub(crate) connected_clients: usize,
    pub(crate) connections_received: u64,
    pub(crate) connections_rejected: u64,
    pub(crate) commands_processed: u64,
    pub(crate) net_input_bytes: u64,
    pub(crate) net_output_bytes: u64,
    pub(crate) protocol_errors: u64,
    pub(crate) output_limit_disconnections: u64,
    pub(crate) accept_errors: u64,
    pub(crate) expired_keys: u64,
}

/// The counters each request bumps, kept per worker on a cache line of their own: with one
/// counter shared by every worker, each request would pull its line from the core that last
/// wrote it. INFO adds the workers' counters up.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct WorkerCounters {
    commands_processed: AtomicU64,
    net_input_bytes: AtomicU64,
    net_output_bytes: AtomicU64,
}

impl Stats {
    /// Counters for `workers` worker threads.
    fn new(workers: usize) -> Stats {
        Stats {
            workers: (0..workers.max(1))
                .map(|_| WorkerCounters::default())
                .collect(),
            ..Stats::default()
        }
    }

    /// Worker `index`'s counters.
    fn worker(&self, index: usize) -> &WorkerCounters {
        &self.workers[index % self.workers.len()]
    }

    fn sum(&self, field: impl Fn(&WorkerCounters) -> &AtomicU64) -> u64 {
        self.workers
            .iter()
            .map(|w| field(w).load(Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add)
    }

    fn raw(&self) -> StatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            connected_clients: self.connected_clients.load(Ordering::Relaxed),
            connections_received: get(&self.connections_received),
            connections_rejected: get(&self.connections_rejected),
            commands_processed: self.sum(|w| &w.commands_processed),
            net_input_bytes: self.sum(|w| &w.net_input_bytes),
            net_output_bytes: self.sum(|w| &w.net_output_bytes),
            protocol_errors: get(&self.protocol_errors),
            output_limit_disconnections: get(&self.output_limit_disconnections),
            accept_errors: get(&self.accept_errors),
            expired_keys: get(&self.expired_keys),
        }
    }

    /// The counters since the last reset.
    pub(crate) fn snapshot(&self) -> StatsSnapshot {
        let raw = self.raw();
        let base = *self.baseline.lock().unwrap_or_else(|e| e.into_inner());
        StatsSnapshot {
            connected_clients: raw.connected_clients,
            connections_received: raw.connections_received - base.connections_received,
            connections_rejected: raw.connections_rejected - base.connections_rejected,
            commands_processed: raw.commands_processed - base.commands_processed,
            net_input_bytes: raw.net_input_bytes - base.net_input_bytes,
            net_output_bytes: raw.net_output_bytes - base.net_output_bytes,
            protocol_errors: raw.protocol_errors - base.protocol_errors,
            output_limit_disconnections: raw.output_limit_disconnections
                - base.output_limit_disconnections,
            accept_errors: raw.accept_errors - base.accept_errors,
            expired_keys: raw.expired_keys - base.expired_keys,
        }
    }

    /// CONFIG RESETSTAT.
    pub(crate) fn reset(&self) {
        let mut base = self.baseline.lock().unwrap_or_else(|e| e.into_inner());
        *base = self.raw();
    }
}

/// State every thread of a server shares.
pub(crate) struct Shared {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) config: Config,
    /// The port actually bound.
    pub(crate) port: u16,
    pub(crate) stats: Stats,
    pub(crate) started: Instant,
    pub(crate) run_id: String,
    pub(crate) handle: ShutdownHandle,
    next_client_id: AtomicU64,
    /// The open connections (CLIENT LIST, CLIENT KILL).
    pub(crate) clients: ClientRegistry,
    /// Hears of every write (WATCH, blocked clients).
    pub(crate) notifier: crate::notify::Notifier,
    /// Settings CONFIG SET changes while the server runs.
    pub(crate) settings: Mutex<Settings>,
    /// SAVE and BGSAVE bookkeeping.
    pub(crate) saves: Arc<SaveState>,
}

/// What LASTSAVE and BGSAVE know.
#[derive(Debug)]
pub(crate) struct SaveState {
    /// When the last SAVE or BGSAVE finished (seconds since the epoch; start time before).
    pub(crate) last_save_unix: std::sync::atomic::AtomicI64,
    /// A BGSAVE is running.
    pub(crate) bgsave_running: AtomicBool,
    /// BGSAVE SCHEDULE asked for another once the running one is done.
    pub(crate) bgsave_scheduled: AtomicBool,
}

/// The settings CONFIG SET may change.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Settings {
    pub(crate) maxmemory_bytes: u64,
    pub(crate) maxmemory_policy: String,
    /// Redis's compact-encoding thresholds. The store has no such encodings; CONFIG keeps them
    /// (clients and Redis's tests set them) and OBJECT ENCODING reports by them.
    pub(crate) encoding: Encoding,
}

/// The encoding thresholds of Redis 7.0, with its defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Encoding {
    pub(crate) hash_max_entries: i64,
    pub(crate) hash_max_value: i64,
    pub(crate) zset_max_entries: i64,
    pub(crate) zset_max_value: i64,
    pub(crate) set_max_intset_entries: i64,
    pub(crate) list_max_size: i64,
    pub(crate) list_compress_depth: i64,
}

impl Default for Encoding {
    fn default() -> Self {
        Encoding {
            hash_max_entries: 512,
            hash_max_value: 64,
            zset_max_entries: 128,
            zset_max_value: 64,
            set_max_intset_entries: 512,
            list_max_size: -2,
            list_compress_depth: 0,
        }
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("config", &self.config)
            .field("port", &self.port)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// A 40-hex-digit run id, like Redis's, from the clock, the process id and std's random hasher
/// keys.
fn make_run_id() -> String {
    use std::collections::hash_map::RandomState;
    use std::hash::BuildHasher;
    let seed = (std::time::SystemTime::now(), std::process::id());
    let a = RandomState::new().hash_one(seed);
    let b = RandomState::new().hash_one(seed);
    let c = RandomState::new().hash_one(seed);
    format!("{a:016x}{b:016x}{:08x}", c as u32)
}

/// A RESP2 server, bound and ready to [`run`](Server::run).
pub struct Server {
    listener: TcpListener,
    local_addr: SocketAddr,
    poll: Poll,
    worker_polls: Vec<Poll>,
    worker_wakers: Vec<Arc<Waker>>,
    shared: Arc<Shared>,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.local_addr)
            .field("shared", &self.shared)
            .finish_non_exhaustive()
    }
}

/// A bound listening socket and prepared event loops, with no backend yet: bind first, then
/// open the store, then [`into_server`](Listener::into_server). A start that fails to bind (a
/// port in use, an address not on this host) then fails before any file is opened or created.
///
/// Connections that arrive before [`Server::run`] wait in the socket's backlog.
pub struct Listener {
    listener: TcpListener,
    local_addr: SocketAddr,
    poll: Poll,
    worker_polls: Vec<Poll>,
    worker_wakers: Vec<Arc<Waker>>,
    handle: ShutdownHandle,
    config: Config,
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listener")
            .field("local_addr", &self.local_addr)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Listener {
    /// Binds the listening socket and prepares the event loops. Fails with `InvalidInput` if
    /// `workers` or `max_clients` is 0.
    pub fn bind(config: Config) -> io::Result<Listener> {
        if config.workers == 0 || config.max_clients == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "workers and max_clients must be at least 1",
            ));
        }
        let mut listener = TcpListener::bind(SocketAddr::new(config.bind, config.port))?;
        let local_addr = listener.local_addr()?;
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER_TOKEN, Interest::READABLE)?;
        let mut wakers = vec![Arc::new(Waker::new(poll.registry(), WAKER_TOKEN)?)];
        let mut worker_polls = Vec::with_capacity(config.workers);
        let mut worker_wakers = Vec::with_capacity(config.workers);
        for _ in 0..config.workers {
            let worker_poll = Poll::new()?;
            let waker = Arc::new(Waker::new(worker_poll.registry(), WAKER_TOKEN)?);
            wakers.push(Arc::clone(&waker));
            worker_wakers.push(waker);
            worker_polls.push(worker_poll);
        }
        let handle = ShutdownHandle {
            inner: Arc::new(ShutdownState {
                requested: AtomicBool::new(false),
                wakers,
            }),
        };
        Ok(Listener {
            listener,
            local_addr,
            poll,
            worker_polls,
            worker_wakers,
            handle,
            config,
        })
    }

    /// The address it listens on (with the port picked when `port` was 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// A handle to shut the server down, from now on: a shutdown requested before
    /// [`Server::run`] makes `run` stop at once (and still call [`Backend::shutdown`]).
    pub fn handle(&self) -> ShutdownHandle {
        self.handle.clone()
    }

    /// The server over `backend`, ready to [`run`](Server::run).
    pub fn into_server(self, backend: Arc<dyn Backend>) -> Server {
        let Listener {
            listener,
            local_addr,
            poll,
            worker_polls,
            worker_wakers,
            handle,
            config,
        } = self;
        let shared = Arc::new(Shared {
            backend,
            port: local_addr.port(),
            stats: Stats::new(config.workers),
            started: Instant::now(),
            run_id: make_run_id(),
            handle,
            next_client_id: AtomicU64::new(1),
            clients: ClientRegistry::default(),
            notifier: crate::notify::Notifier::default(),
            settings: Mutex::new(Settings {
                maxmemory_bytes: config.maxmemory_bytes,
                maxmemory_policy: config.maxmemory_policy.clone(),
                encoding: Encoding::default(),
            }),
            saves: Arc::new(SaveState {
                last_save_unix: std::sync::atomic::AtomicI64::new(unix_seconds()),
                bgsave_running: AtomicBool::new(false),
                bgsave_scheduled: AtomicBool::new(false),
            }),
            config,
        });
        Server {
            listener,
            local_addr,
            poll,
            worker_polls,
            worker_wakers,
            shared,
        }
    }
}

impl Server {
    /// Binds the listening socket and prepares the event loops; serves nothing until
    /// [`run`](Server::run). Fails with `InvalidInput` if `workers` or `max_clients` is 0.
    /// [`Listener::bind`] then [`Listener::into_server`], for a backend that exists before the
    /// bind.
    pub fn bind(config: Config, backend: Arc<dyn Backend>) -> io::Result<Server> {
        Ok(Listener::bind(config)?.into_server(backend))
    }

    /// The address the server listens on (with the port picked when `port` was 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// A handle to shut the server down from another thread.
    pub fn handle(&self) -> ShutdownHandle {
        self.shared.handle.clone()
    }

    /// Serves until shut down (see the [module documentation](self)), then calls
    /// [`Backend::shutdown`] exactly once and returns. It is called even when `run` fails (a
    /// worker thread cannot start, the poll fails), after the workers have stopped.
    pub fn run(self) -> io::Result<RunSummary> {
        let Server {
            mut listener,
            poll,
            worker_polls,
            worker_wakers,
            shared,
            ..
        } = self;
        let mut senders = Vec::with_capacity(worker_polls.len());
        let mut threads = Vec::with_capacity(worker_polls.len());
        let mut result = Ok(());
        for (index, worker_poll) in worker_polls.into_iter().enumerate() {
            let (sender, receiver) = mpsc::channel();
            let doorbell = Arc::new(Doorbell {
                waker: Arc::clone(&worker_wakers[index]),
                rung: Mutex::new(Vec::new()),
            });
            let worker = Worker::new(index, worker_poll, receiver, Arc::clone(&shared), doorbell);
            let spawned = thread::Builder::new()
                .name(format!("kavach-worker-{index}"))
                .spawn(move || worker.run());
            match spawned {
                Ok(thread) => {
                    threads.push(thread);
                    senders.push((sender, Arc::clone(&worker_wakers[index])));
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        let (expiry_stop, expiry_thread) = start_active_expiry(&shared);
        if result.is_ok() {
            result = accept_loop(&mut listener, poll, &senders, &shared);
        }
        drop(expiry_stop);
        if let Some(thread) = expiry_thread {
            if thread.join().is_err() {
                worker_panics_expiry(&shared);
            }
        }
        // Stop accepting before the workers finish, and make sure they are told to.
        drop(listener);
        shared.handle.shutdown();
        drop(senders);
        let mut worker_panics = 0;
        for thread in threads {
            match thread.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    if result.is_ok() {
                        result = Err(e);
                    }
                }
                Err(_) => worker_panics += 1,
            }
        }
        let backend_shutdown = shared.backend.shutdown();
        result?;
        let raw = shared.stats.raw();
        Ok(RunSummary {
            connections_accepted: raw.connections_received,
            connections_rejected: raw.connections_rejected,
            commands_processed: raw.commands_processed,
            worker_panics,
            backend_shutdown,
        })
    }
}

/// Keys active expiry deletes per store transaction.
const EXPIRY_BATCH: usize = 200;

/// Time one active-expiry cycle may take (Redis's slow cycle uses 25% of its 100 ms period).
const EXPIRY_CYCLE_BUDGET: Duration = Duration::from_millis(25);

/// Starts the active-expiry thread when the store serves the data model and the period is not
/// zero. Dropping the returned sender stops it.
fn start_active_expiry(shared: &Arc<Shared>) -> (Sender<()>, Option<thread::JoinHandle<()>>) {
    let (stop, stopped) = mpsc::channel::<()>();
    let period = shared.config.active_expiry_period;
    if shared.backend.keyspace().is_none() || period.is_zero() {
        return (stop, None);
    }
    let shared = Arc::clone(shared);
    let spawned = thread::Builder::new()
        .name("kavach-expiry".into())
        .spawn(move || {
            let mut cursor = 0;
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(period) {
                if shared.handle.is_shutdown_requested() {
                    return;
                }
                expire_cycle(&shared, &mut cursor);
            }
        });
    (stop, spawned.ok())
}

/// The expiry thread panicked: a bug; shut the server down as a worker panic would.
fn worker_panics_expiry(shared: &Shared) {
    crate::say!("active expiry thread panicked; shutting down");
    shared.handle.shutdown();
}

/// One active-expiry cycle: deletes keys past their deadline, a batch per transaction, until
/// a batch comes back short or the cycle's time is up. Each key is checked again under its
/// lock (a key written since it was listed is live again and stays).
pub(crate) fn expire_cycle(shared: &Shared, cursor: &mut u64) {
    let Some(ks) = shared.backend.keyspace() else {
        return;
    };
    let started = Instant::now();
    loop {
        let Ok((next, keys)) = ks.expired(*cursor, EXPIRY_BATCH) else {
            return;
        };
        *cursor = next;
        if keys.is_empty() {
            return;
        }
        let scope: Vec<(model::Db, &[u8])> =
            keys.iter().map(|(db, k)| (*db, k.as_slice())).collect();
        let mut deleted = 0u64;
        let done = ks.transact(model::Scope::Keys(&scope), true, &mut |t| {
            // Absent to the view yet listed: past its deadline (or already gone; deleting an
            // absent key changes nothing).
            let dead: Vec<model::Effect> = keys
                .iter()
                .filter(|(db, k)| t.kind(*db, k).is_none())
                .map(|(db, k)| model::Effect::Del {
                    db: *db,
                    key: k.clone(),
                })
                .collect();
            deleted = dead.len() as u64;
            if !dead.is_empty() {
                t.apply(dead)?;
            }
            Ok(())
        });
        if done.is_err() {
            return;
        }
        shared
            .stats
            .expired_keys
            .fetch_add(deleted, Ordering::Relaxed);
        if keys.len() < EXPIRY_BATCH || started.elapsed() >= EXPIRY_CYCLE_BUDGET {
            return;
        }
    }
}

/// The acceptor: admits connections and deals them to the workers until shutdown.
fn accept_loop(
    listener: &mut TcpListener,
    mut poll: Poll,
    workers: &[(Sender<Incoming>, Arc<Waker>)],
    shared: &Shared,
) -> io::Result<()> {
    let mut events = Events::with_capacity(16);
    let mut next_worker = 0usize;
    let mut retry_after_error = false;
    loop {
        if shared.handle.is_shutdown_requested() {
            return Ok(());
        }
        let timeout = retry_after_error.then_some(ACCEPT_RETRY);
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if shared.handle.is_shutdown_requested() {
            return Ok(());
        }
        retry_after_error = false;
        loop {
            let (mut stream, peer) = match listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
                Err(_) => {
                    // Out of file descriptors or similar: the connection stays in the backlog;
                    // retry shortly (edge-triggered polling would not tell us again).
                    shared.stats.accept_errors.fetch_add(1, Ordering::Relaxed);
                    retry_after_error = true;
                    break;
                }
            };
            let stats = &shared.stats;
            if stats.connected_clients.load(Ordering::SeqCst) >= shared.config.max_clients {
                stats.connections_rejected.fetch_add(1, Ordering::Relaxed);
                let _ = stream.write(MAX_CLIENTS_ERROR);
                close_gracefully(&mut stream);
                continue;
            }
            let _ = stream.set_nodelay(true);
            stats.connected_clients.fetch_add(1, Ordering::SeqCst);
            stats.connections_received.fetch_add(1, Ordering::Relaxed);
            let (sender, waker) = &workers[next_worker % workers.len()];
            next_worker = next_worker.wrapping_add(1);
            if sender.send(Incoming { stream, peer }).is_err() || waker.wake().is_err() {
                // The worker is gone (it panicked and the server is shutting down).
                stats.connected_clients.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

/// Half-closes, discards a bounded amount of unread input (so the close is a FIN, not a reset
/// that could destroy the last reply), and lets the stream drop.
fn close_gracefully(stream: &mut TcpStream) {
    let _ = stream.shutdown(Shutdown::Write);
    let mut sink = [0u8; 4096];
    let mut discarded = 0;
    while discarded < CLOSE_DISCARD_BYTES {
        match stream.read(&mut sink) {
            Ok(0) => break,
            Ok(n) => discarded += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
}

/// A connection on its way from the acceptor to a worker.
struct Incoming {
    stream: TcpStream,
    peer: SocketAddr,
}

/// Why [`run_requests`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// All complete requests are done; the rest is a partial request.
    NeedMore,
    /// Too much output is unsent; more complete requests may be buffered.
    Backpressure,
    /// The connection must close after its output is written (QUIT, SHUTDOWN, protocol error).
    Close,
    /// A command blocked (see [`Blocked`]); more complete requests may be buffered.
    Blocked,
}

/// A connection parked by a blocking command (BLPOP and kin): it runs nothing else until a
/// write to one of `keys` lets the command run again and answer, its deadline passes, or
/// CLIENT UNBLOCK ends it.
#[derive(Debug)]
struct Blocked {
    /// The command, run again on each wake-up.
    args: Vec<Vec<u8>>,
    keys: Vec<(model::Db, Vec<u8>)>,
    deadline: Option<Instant>,
    /// Registered with the notifier.
    parked: bool,
}

/// The reply of a blocking command whose time ran out: Redis 7.0 answers every blocking list
/// and sorted-set command with the null array (RESP3: null).
fn write_timeout(out: &mut Vec<u8>, resp3: bool) {
    crate::resp::Reply::NullArray.encode_as(out, resp3);
}

/// Longest a connection holds its replies for the blocked clients its writes woke (they run on
/// other threads; this bounds the wait should one of them never get to it).
const HOLD_MAX: Duration = Duration::from_secs(2);

/// Most input bytes a parked connection buffers before it stops reading.
const PARKED_INPUT_BYTES_MAX: usize = 1 << 20;

/// Executes the complete requests at the start of `data`. Returns the bytes used, why it
/// stopped and how many commands ran; a command that blocks is left in `blocked`.
fn run_requests(
    shared: &Shared,
    parser: &mut RequestParser,
    session: &mut Session,
    output: &mut Vec<u8>,
    pause_at_len: usize,
    data: &[u8],
    blocked: &mut Option<Blocked>,
) -> (usize, Stop, u64) {
    let mut used = 0;
    let mut commands = 0u64;
    let stop = loop {
        if output.len() > pause_at_len {
            break Stop::Backpressure;
        }
        match parser.parse(&data[used..]) {
            Parse::Complete(args, n) => {
                used += n;
                if args.is_empty() {
                    continue;
                }
                commands += 1;
                let action = command::execute(shared, session, &args, output);
                if let Action::Block { keys, deadline } = action {
                    *blocked = Some(Blocked {
                        args,
                        keys,
                        deadline,
                        parked: false,
                    });
                    break Stop::Blocked;
                }
                // The buffers take the next requests' arguments.
                parser.recycle(args);
                match action {
                    // It woke blocked clients: their replies go first (Redis serves them before
                    // the next command), so the requests after it wait.
                    Action::Continue if session.mailbox.pending() > 0 => break Stop::Blocked,
                    Action::Continue | Action::Block { .. } => {}
                    Action::CloseAfterReply => break Stop::Close,
                    Action::Shutdown => {
                        shared.handle.shutdown();
                        break Stop::Close;
                    }
                }
            }
            Parse::NeedMore => break Stop::NeedMore,
            Parse::Error(e) => {
                shared.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
                write_error(output, format!("ERR Protocol error: {e}").as_bytes());
                break Stop::Close;
            }
        }
    };
    (used, stop, commands)
}

/// What the worker does with a connection after serving it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Wait for the next readiness event.
    Idle,
    /// Serve it again soon (its read budget ran out with input possibly left).
    Again,
    /// Close it.
    Close,
    /// Write its replies at the end of the worker's pass (it read everything the socket had
    /// and executed it).
    Unflushed,
}

/// One client connection, owned by one worker.
struct Conn {
    stream: TcpStream,
    /// The index of the worker that owns it (its counters in [`Stats`]).
    worker: usize,
    /// A readiness event reported the peer's end of the stream (or an error): a short read no
    /// longer proves the socket drained (see [`SHORT_READ_DRAINS`]), as the end of stream has
    /// no event of its own left to come.
    peer_closed: bool,
    parser: RequestParser,
    session: Session,
    /// Received bytes not yet executed: a partial request, or (under backpressure) complete
    /// requests waiting their turn.
    input: Vec<u8>,
    /// Whether `input` may hold complete requests (execution paused by backpressure).
    input_pending: bool,
    /// Replies; `output[..output_sent]` is already written.
    output: Vec<u8>,
    output_sent: usize,
    /// Read nothing more; close once the output is written.
    closing: bool,
    /// In the worker's `again` list.
    queued: bool,
    /// In the worker's `unflushed` list.
    unflushed: bool,
    /// The blocking command this connection waits in, if any.
    blocked: Option<Blocked>,
    /// The deadline the worker has listed for it.
    listed_deadline: Option<Instant>,
    /// Writers whose wakes this connection used: released when the clients it woke in turn are
    /// done ([`Conn::holding`]).
    owed: Vec<Arc<Mailbox>>,
    /// Since when it holds its replies for the clients it woke.
    hold_since: Option<Instant>,
}

impl Conn {
    fn pending_output(&self) -> usize {
        self.output.len() - self.output_sent
    }

    /// Serves the connection: writes pending output, executes buffered requests, reads and
    /// executes more, until it would block or a bound is reached.
    fn serve(&mut self, shared: &Shared, scratch: &mut [u8], draining: bool) -> Verdict {
        let mut budget = READ_BUDGET_BYTES;
        // A read returned less than the buffer holds: the socket had nothing more (see
        // [`SHORT_READ_DRAINS`]).
        let mut drained = false;
        loop {
            if !self.read_mail(shared) {
                return Verdict::Close;
            }
            let holding = self.holding();
            if drained
                && !holding
                && !draining
                && !self.closing
                && !self.input_pending
                && self.blocked.is_none()
            {
                // Everything the socket had is executed: its replies go out with the others
                // this pass produced, after one sync (see [`Worker::flush_unflushed`]).
                return if self.pending_output() > 0 {
                    Verdict::Unflushed
                } else {
                    Verdict::Idle
                };
            }
            if !self.write_out(shared, holding) {
                return Verdict::Close;
            }
            if self.closing {
                return if self.pending_output() == 0 {
                    Verdict::Close
                } else {
                    Verdict::Idle
                };
            }
            if self.pending_output() > OUTPUT_PAUSE_BYTES {
                // Resumed by the next writable event.
                return Verdict::Idle;
            }
            if self.blocked.is_some() || holding {
                if draining {
                    self.closing = true;
                    continue;
                }
                // Parked or holding: read only to notice a client that goes away.
                if self.input.len() >= PARKED_INPUT_BYTES_MAX {
                    return Verdict::Idle;
                }
                match self.stream.read(scratch) {
                    Ok(0) => return Verdict::Close,
                    Ok(n) => {
                        shared
                            .stats
                            .worker(self.worker)
                            .net_input_bytes
                            .fetch_add(n as u64, Ordering::Relaxed);
                        self.input.extend_from_slice(&scratch[..n]);
                        self.input_pending = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Verdict::Idle,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return Verdict::Close,
                }
                continue;
            }
            if self.input_pending {
                self.execute_input(shared);
                continue;
            }
            if draining {
                self.closing = true;
                continue;
            }
            if budget == 0 {
                return Verdict::Again;
            }
            if drained {
                // Replies written above; the next request comes with the next readiness event.
                return Verdict::Idle;
            }
            match self.stream.read(scratch) {
                Ok(0) => {
                    // The client closed its side: finish what it sent, then close.
                    self.closing = true;
                }
                Ok(n) => {
                    budget = budget.saturating_sub(n);
                    drained = SHORT_READ_DRAINS && !self.peer_closed && n < scratch.len();
                    shared
                        .stats
                        .worker(self.worker)
                        .net_input_bytes
                        .fetch_add(n as u64, Ordering::Relaxed);
                    self.absorb(shared, &scratch[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Verdict::Idle,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Verdict::Close,
            }
        }
    }

    /// Delivers the pub/sub messages other connections left, and moves a blocked command on:
    /// parks it when it first blocks, runs it again when a key it waits on was written, ends it
    /// at its deadline or on CLIENT UNBLOCK. False: close the connection (its messages
    /// overflowed).
    fn read_mail(&mut self, shared: &Shared) -> bool {
        // A client that does not read its replies gets no more messages into its output; they
        // wait in the mailbox, which closes the connection when it overflows.
        let deliver = self.pending_output() <= OUTPUT_PAUSE_BYTES;
        let mail = self.session.mailbox.take(deliver);
        if mail.overflowed {
            shared
                .stats
                .output_limit_disconnections
                .fetch_add(1, Ordering::Relaxed);
            return false;
        }
        for m in &mail.messages {
            command::write_message(&mut self.output, m, self.session.resp3);
        }
        // The writers whose writes woke this connection wait until it has run its command
        // again; a wake that finds it no longer parked is released at once.
        let mut tickets = mail.woken_by;
        if let Some(blocked) = self.blocked.as_mut() {
            if !blocked.parked {
                // Park first, then look again: a write between the command's look and the
                // parking would otherwise go unnoticed.
                blocked.parked = true;
                self.session.handle.blocked.store(true, Ordering::Relaxed);
                shared.notifier.block(&self.session.mailbox, &blocked.keys);
                self.run_blocked(shared);
            } else if let Some(how) = mail.unblock {
                match how {
                    Unblock::Timeout => write_timeout(&mut self.output, self.session.resp3),
                    Unblock::Error => crate::resp::write_error(
                        &mut self.output,
                        b"UNBLOCKED client unblocked via CLIENT UNBLOCK",
                    ),
                }
                self.end_block(shared, false);
            } else if blocked.deadline.is_some_and(|d| Instant::now() >= d) {
                write_timeout(&mut self.output, self.session.resp3);
                self.end_block(shared, false);
            } else if mail.woken && self.run_blocked(shared) {
                // Served: the writers wait on until the clients this one woke are done too.
                self.owed.append(&mut tickets);
            }
        }
        for writer in tickets {
            writer.release();
        }
        true
    }

    /// Whether the connection holds its replies for the blocked clients its writes woke (at
    /// most [`HOLD_MAX`]); when it stops holding, the writers it owes are released.
    fn holding(&mut self) -> bool {
        let mailbox = &self.session.mailbox;
        if mailbox.pending() > 0 {
            let since = *self.hold_since.get_or_insert_with(Instant::now);
            if since.elapsed() < HOLD_MAX {
                return true;
            }
            mailbox.abandon_pending();
        }
        self.hold_since = None;
        for writer in self.owed.drain(..) {
            writer.release();
        }
        false
    }

    /// Runs the blocked command again; it stays parked if it blocks again. Whether it answered.
    fn run_blocked(&mut self, shared: &Shared) -> bool {
        let Some(blocked) = self.blocked.as_ref() else {
            return false;
        };
        let args = blocked.args.clone();
        self.session.rerun = true;
        let action = command::execute(shared, &mut self.session, &args, &mut self.output);
        self.session.rerun = false;
        match action {
            Action::Block { .. } => false,
            action => {
                self.end_block(shared, true);
                match action {
                    Action::CloseAfterReply => self.closing = true,
                    Action::Shutdown => {
                        shared.handle.shutdown();
                        self.closing = true;
                    }
                    Action::Continue | Action::Block { .. } => {}
                }
                true
            }
        }
    }

    /// The blocked command answered (`served`: by running, so it may have taken what a client
    /// behind it on the same keys waits for; the wake passes to them and this connection waits
    /// for them): leave the queues, go on with buffered requests.
    fn end_block(&mut self, shared: &Shared, served: bool) {
        if self.blocked.take().is_some_and(|b| b.parked) {
            let by = served.then_some(&self.session.mailbox);
            shared.notifier.unblock(self.session.id, by);
        }
        self.session.handle.blocked.store(false, Ordering::Relaxed);
        self.input_pending = !self.input.is_empty();
    }

    /// Takes newly read bytes: executes the requests they complete and keeps the rest.
    fn absorb(&mut self, shared: &Shared, data: &[u8]) {
        if self.input.is_empty() {
            // The common case: parse straight from the scratch buffer, keep only a partial tail.
            let pause_at = self.output_sent + OUTPUT_PAUSE_BYTES;
            let (used, stop, commands) = run_requests(
                shared,
                &mut self.parser,
                &mut self.session,
                &mut self.output,
                pause_at,
                data,
                &mut self.blocked,
            );
            if stop != Stop::Close {
                self.input.extend_from_slice(&data[used..]);
            }
            self.count_commands(shared, commands);
            self.after_stop(stop);
        } else {
            self.input.extend_from_slice(data);
            self.execute_input(shared);
        }
    }

    /// Executes the complete requests buffered in `input`.
    fn execute_input(&mut self, shared: &Shared) {
        let pause_at = self.output_sent + OUTPUT_PAUSE_BYTES;
        let (used, stop, commands) = run_requests(
            shared,
            &mut self.parser,
            &mut self.session,
            &mut self.output,
            pause_at,
            &self.input,
            &mut self.blocked,
        );
        self.input.drain(..used);
        if self.input.is_empty() && self.input.capacity() > BUFFER_KEEP_BYTES {
            self.input = Vec::new();
        }
        self.count_commands(shared, commands);
        self.after_stop(stop);
    }

    /// Adds `commands` to this worker's `total_commands_processed`.
    fn count_commands(&mut self, shared: &Shared, commands: u64) {
        if commands > 0 {
            shared
                .stats
                .worker(self.worker)
                .commands_processed
                .fetch_add(commands, Ordering::Relaxed);
        }
    }

    fn after_stop(&mut self, stop: Stop) {
        match stop {
            Stop::NeedMore => self.input_pending = false,
            Stop::Backpressure | Stop::Blocked => self.input_pending = true,
            Stop::Close => {
                self.input_pending = false;
                self.closing = true;
                self.input = Vec::new();
            }
        }
    }

    /// Writes pending output unless the connection is `holding` it; false: close the connection
    /// (the write failed, or more output waits than [`Config::max_output_bytes`]).
    fn write_out(&mut self, shared: &Shared, holding: bool) -> bool {
        if !holding && self.flush(shared).is_err() {
            return false;
        }
        if self.pending_output() > shared.config.max_output_bytes {
            shared
                .stats
                .output_limit_disconnections
                .fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Writes as much pending output as the socket takes, once the store has made durable
    /// every write the replies may tell of ([`Backend::sync`]).
    fn flush(&mut self, shared: &Shared) -> io::Result<()> {
        if self.output_sent < self.output.len() {
            shared.backend.sync().map_err(io::Error::other)?;
        }
        while self.output_sent < self.output.len() {
            match self.stream.write(&self.output[self.output_sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.output_sent += n;
                    shared
                        .stats
                        .worker(self.worker)
                        .net_output_bytes
                        .fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.output_sent == self.output.len() {
            self.output.clear();
            self.output_sent = 0;
            if self.output.capacity() > BUFFER_KEEP_BYTES {
                self.output = Vec::new();
            }
        } else if self.output_sent > OUTPUT_COMPACT_BYTES {
            self.output.drain(..self.output_sent);
            self.output_sent = 0;
        }
        Ok(())
    }
}

/// Closes a worker's connections if its thread unwinds, and asks the server to shut down.
struct PanicGuard {
    handle: ShutdownHandle,
}

impl Drop for PanicGuard {
    fn drop(&mut self) {
        if thread::panicking() {
            self.handle.shutdown();
        }
    }
}

/// One worker thread: an event loop over the connections it owns.
struct Worker {
    /// Its place among the workers (0-based).
    index: usize,
    poll: Poll,
    incoming: Receiver<Incoming>,
    shared: Arc<Shared>,
    /// Connections by token; `None` slots are listed in `free`.
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    /// Connections to serve again without waiting for an event.
    again: Vec<usize>,
    /// Connections whose replies are written at the end of this pass.
    unflushed: Vec<usize>,
    /// Read buffer shared by this worker's connections.
    scratch: Vec<u8>,
    /// Set when shutdown started: the time by which every connection is closed.
    drain_deadline: Option<Instant>,
    /// Rung by other threads for this worker's connections (pub/sub, wake-ups).
    doorbell: Arc<Doorbell>,
    /// Deadlines of blocked connections, soonest first.
    deadlines: BTreeSet<(Instant, usize)>,
}

/// How other threads get a worker to serve one of its connections: they list its token and
/// wake the worker's poll.
struct Doorbell {
    waker: Arc<Waker>,
    rung: Mutex<Vec<usize>>,
}

impl Doorbell {
    fn ring(&self, index: usize) {
        self.rung
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(index);
        // A failed wake only happens if the poll is gone, i.e. the worker has exited.
        let _ = self.waker.wake();
    }

    fn take(&self) -> Vec<usize> {
        std::mem::take(&mut *self.rung.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Worker {
    fn new(
        index: usize,
        poll: Poll,
        incoming: Receiver<Incoming>,
        shared: Arc<Shared>,
        doorbell: Arc<Doorbell>,
    ) -> Self {
        Worker {
            index,
            poll,
            incoming,
            shared,
            conns: Vec::new(),
            free: Vec::new(),
            again: Vec::new(),
            unflushed: Vec::new(),
            scratch: vec![0; READ_CHUNK_BYTES],
            drain_deadline: None,
            doorbell,
            deadlines: BTreeSet::new(),
        }
    }

    /// The thread's body. A failure of the poll itself (not of a connection) closes this
    /// worker's connections and shuts the whole server down.
    fn run(mut self) -> io::Result<()> {
        let _guard = PanicGuard {
            handle: self.shared.handle.clone(),
        };
        let result = self.event_loop();
        if result.is_err() {
            self.shared.handle.shutdown();
            self.close_all();
        }
        result
    }

    fn event_loop(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(EVENTS_CAPACITY);
        let budget = self.shared.config.busy_poll;
        // With polling on: when the worker last came back from a poll.
        let mut busy =
            (!budget.is_zero()).then(|| (BusyPoll::new(budget, Instant::now()), Instant::now()));
        loop {
            let timeout = if !self.again.is_empty() {
                Some(Duration::ZERO)
            } else {
                let soonest = match (self.drain_deadline, self.deadlines.first()) {
                    (Some(a), Some(&(b, _))) => Some(a.min(b)),
                    (a, b) => a.or(b.map(|&(d, _)| d)),
                };
                soonest.map(|d| d.saturating_duration_since(Instant::now()))
            };
            let mut polled = false;
            if let Some((bp, work_from)) = busy.as_mut() {
                let now = Instant::now();
                bp.worked(*work_from, now);
                // A deadline nearer than the budget bounds the polling too.
                let spin = timeout.map_or(bp.spin(), |t| bp.spin().min(t));
                if !spin.is_zero() && timeout != Some(Duration::ZERO) {
                    polled = self.poll_until(&mut events, now + spin)?;
                }
            }
            if !polled {
                self.poll_once(&mut events, timeout)?;
            }
            if let Some((_, work_from)) = busy.as_mut() {
                *work_from = Instant::now();
            }
            let mut woken = false;
            for event in events.iter() {
                match event.token() {
                    WAKER_TOKEN => woken = true,
                    Token(index) => {
                        if event.is_read_closed() || event.is_error() {
                            // The peer's FIN (or an error) is queued behind any data: read on
                            // until the read says so, whatever a short read suggests.
                            if let Some(conn) = self.conns.get_mut(index).and_then(Option::as_mut) {
                                conn.peer_closed = true;
                            }
                        }
                        self.serve(index);
                    }
                }
            }
            if woken {
                self.admit_incoming()?;
                self.close_killed();
                for index in self.doorbell.take() {
                    self.serve(index);
                }
            }
            // The clock is read only when a deadline is listed (most passes have none).
            let now = if self.deadlines.is_empty() {
                None
            } else {
                Some(Instant::now())
            };
            while let (Some(&(deadline, index)), Some(now)) = (self.deadlines.first(), now) {
                if deadline > now {
                    break;
                }
                self.deadlines.pop_first();
                if let Some(conn) = self.conns.get_mut(index).and_then(Option::as_mut) {
                    conn.listed_deadline = None;
                }
                self.serve(index);
            }
            if self.drain_deadline.is_none() && self.shared.handle.is_shutdown_requested() {
                self.start_draining();
            }
            for index in std::mem::take(&mut self.again) {
                if let Some(conn) = self.conns.get_mut(index).and_then(Option::as_mut) {
                    conn.queued = false;
                }
                self.serve(index);
            }
            self.flush_unflushed();
            if let Some(deadline) = self.drain_deadline {
                if self.conns.iter().all(Option::is_none) || Instant::now() >= deadline {
                    self.close_all();
                    return Ok(());
                }
            }
        }
    }

    /// One poll; an interrupted one returns no events.
    fn poll_once(&mut self, events: &mut Events, timeout: Option<Duration>) -> io::Result<()> {
        match self.poll.poll(events, timeout) {
            Err(e) if e.kind() != io::ErrorKind::Interrupted => Err(e),
            _ => Ok(()),
        }
    }

    /// Polls without blocking until an event comes (true) or `until` passes (false).
    fn poll_until(&mut self, events: &mut Events, until: Instant) -> io::Result<bool> {
        loop {
            self.poll_once(events, Some(Duration::ZERO))?;
            if !events.is_empty() {
                return Ok(true);
            }
            if Instant::now() >= until {
                return Ok(false);
            }
            std::hint::spin_loop();
        }
    }

    /// Registers the connections the acceptor sent (or refuses them when shutting down).
    fn admit_incoming(&mut self) -> io::Result<()> {
        loop {
            let Incoming { mut stream, peer } = match self.incoming.try_recv() {
                Ok(incoming) => incoming,
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return Ok(()),
            };
            if self.drain_deadline.is_some() || self.shared.handle.is_shutdown_requested() {
                close_gracefully(&mut stream);
                self.shared
                    .stats
                    .connected_clients
                    .fetch_sub(1, Ordering::SeqCst);
                continue;
            }
            let index = self.free.pop().unwrap_or_else(|| {
                self.conns.push(None);
                self.conns.len() - 1
            });
            if let Err(e) = self.poll.registry().register(
                &mut stream,
                Token(index),
                Interest::READABLE | Interest::WRITABLE,
            ) {
                self.free.push(index);
                self.shared
                    .stats
                    .connected_clients
                    .fetch_sub(1, Ordering::SeqCst);
                // A failing registry means the poll itself is broken.
                return Err(e);
            }
            let id = self.shared.next_client_id.fetch_add(1, Ordering::Relaxed);
            let local = stream.local_addr().ok();
            let fd = i64::from(std::os::fd::AsRawFd::as_raw_fd(&stream));
            let handle = self.shared.clients.register(id, Some(peer), local, fd);
            let bell = Arc::clone(&self.doorbell);
            let mailbox = Mailbox::new(id, Box::new(move || bell.ring(index)));
            self.conns[index] = Some(Conn {
                stream,
                worker: self.index,
                peer_closed: false,
                parser: RequestParser::new(self.shared.config.limits),
                session: Session::new(handle, mailbox),
                input: Vec::new(),
                input_pending: false,
                output: Vec::new(),
                output_sent: 0,
                closing: false,
                queued: false,
                unflushed: false,
                blocked: None,
                listed_deadline: None,
                owed: Vec::new(),
                hold_since: None,
            });
            // Registration reports data that is already there, so no explicit serve is needed.
        }
    }

    fn serve(&mut self, index: usize) {
        let draining = self.drain_deadline.is_some();
        let Some(conn) = self.conns.get_mut(index).and_then(Option::as_mut) else {
            return;
        };
        if conn.session.handle.is_killed() {
            self.close(index);
            return;
        }
        let verdict = conn.serve(&self.shared, &mut self.scratch, draining);
        // Keep the list of deadlines in step with the connection's blocked command.
        let hold_end = conn.hold_since.map(|t| t + HOLD_MAX);
        let wanted = match (conn.blocked.as_ref().and_then(|b| b.deadline), hold_end) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if conn.listed_deadline != wanted {
            if let Some(old) = conn.listed_deadline.take() {
                self.deadlines.remove(&(old, index));
            }
            if let Some(new) = wanted {
                self.deadlines.insert((new, index));
            }
            conn.listed_deadline = wanted;
        }
        match verdict {
            Verdict::Idle => {}
            Verdict::Again => {
                if !conn.queued {
                    conn.queued = true;
                    self.again.push(index);
                }
            }
            Verdict::Unflushed => {
                if !conn.unflushed {
                    conn.unflushed = true;
                    self.unflushed.push(index);
                }
            }
            Verdict::Close => self.close(index),
        }
    }

    /// Writes the replies of the connections served in this pass.
    fn flush_unflushed(&mut self) {
        let mut list = std::mem::take(&mut self.unflushed);
        for index in list.drain(..) {
            let Some(conn) = self.conns.get_mut(index).and_then(Option::as_mut) else {
                continue;
            };
            conn.unflushed = false;
            // A connection that holds its replies keeps them until its doorbell rings.
            let holding = conn.holding();
            if !conn.write_out(&self.shared, holding) {
                self.close(index);
            }
        }
        self.unflushed = list;
    }

    /// Closes the connections CLIENT KILL marked (at once, without writing pending replies).
    fn close_killed(&mut self) {
        for index in 0..self.conns.len() {
            let killed = self.conns[index]
                .as_ref()
                .is_some_and(|c| c.session.handle.is_killed());
            if killed {
                self.close(index);
            }
        }
    }

    fn close(&mut self, index: usize) {
        let Some(slot) = self.conns.get_mut(index) else {
            return;
        };
        let Some(mut conn) = slot.take() else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut conn.stream);
        if let Some(d) = conn.listed_deadline {
            self.deadlines.remove(&(d, index));
        }
        command::disconnect(&self.shared, &mut conn.session);
        // Writers waiting for this connection wait no more.
        let unread = conn.session.mailbox.take(true).woken_by;
        for writer in conn.owed.drain(..).chain(unread) {
            writer.release();
        }
        let graceful = conn.closing && conn.pending_output() == 0;
        // Everything that describes the connection goes before the client sees it close
        // (CLIENT LIST, CLIENT KILL, INFO connected_clients after its EOF no longer count it).
        let Conn {
            mut stream,
            session,
            ..
        } = conn;
        drop(session);
        self.free.push(index);
        self.shared
            .stats
            .connected_clients
            .fetch_sub(1, Ordering::SeqCst);
        if graceful {
            close_gracefully(&mut stream);
        }
    }

    /// Shutdown: finish the requests already read, stop reading, and close each connection once
    /// its replies are written.
    fn start_draining(&mut self) {
        self.drain_deadline = Some(Instant::now() + self.shared.config.shutdown_drain);
        for index in 0..self.conns.len() {
            self.serve(index);
        }
    }

    fn close_all(&mut self) {
        for index in 0..self.conns.len() {
            self.close(index);
        }
        // Connections still in the channel.
        while let Ok(Incoming { mut stream, .. }) = self.incoming.try_recv() {
            close_gracefully(&mut stream);
            self.shared
                .stats
                .connected_clients
                .fetch_sub(1, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `BusyPoll` a worker that works `work` of every `period`, for `periods` periods
    /// from `start`; returns the time after the last.
    fn run(
        b: &mut BusyPoll,
        start: Instant,
        work: Duration,
        period: Duration,
        periods: u32,
    ) -> Instant {
        let mut t = start;
        for _ in 0..periods {
            b.worked(t, t + work);
            t += period;
        }
        t
    }

    /// The decision follows the share of the last whole window spent working: at or above
    /// three quarters it polls for the budget, below it sleeps at once, and a long sleep
    /// (a window with little work) turns polling off again. Polling time is not work, so
    /// polling cannot keep itself on.
    #[test]
    fn busy_poll_follows_the_share_of_time_worked() {
        let budget = Duration::from_micros(50);
        let t0 = Instant::now();
        let mut b = BusyPoll::new(budget, t0);
        assert_eq!(b.spin(), Duration::ZERO, "no window measured yet");

        let us = Duration::from_micros;
        // 8 of every 10 us worked, over more than a window.
        let t = run(&mut b, t0, us(8), us(10), 300);
        assert_eq!(b.spin(), budget, "80% busy");

        // 5 of every 10 us: the next whole window is not busy enough.
        let t = run(&mut b, t, us(5), us(10), 300);
        assert_eq!(b.spin(), Duration::ZERO, "50% busy");

        // Busy again, then one long sleep: the window that holds the sleep turns it off.
        let t = run(&mut b, t, us(9), us(10), 300);
        assert_eq!(b.spin(), budget, "90% busy");
        let after_sleep = t + Duration::from_millis(20);
        b.worked(after_sleep, after_sleep + us(10));
        assert_eq!(b.spin(), Duration::ZERO, "20 ms asleep");

        // Exactly three quarters counts as busy.
        let mut b = BusyPoll::new(budget, t0);
        run(&mut b, t0, us(3), us(4), 1000);
        assert_eq!(b.spin(), budget, "75% busy");
    }
}
