//! The block target: namespaces (one file `<dir>/<job>.ns` each) served over TCP.
//!
//! One thread per connection; the requests of a connection are executed in order and each is
//! answered before the next is read. A WRITE is answered only once it is durable (the
//! namespace file is open with `O_DSYNC`, and `O_DIRECT` where the file system allows it).
//! Claims are kept per namespace, across connections, and dropped with their connection.
//! Nothing a client sends can make the server panic: a request that breaks the protocol is
//! answered with a PROTOCOL status, and when the stream cannot be trusted any more (bad magic,
//! bad header CRC, a body over the limit) the connection is closed after that answer. Other
//! connections are not affected.

use crate::device::Device;
use crate::error::{DeviceError, Result, check_range};
use crate::file::{Direct, FileDevice, FileOptions};
use crate::proto::{
    self, BadFrame, HEADER_BYTES, INFO_CREATED, Info, MAX_MESSAGE, MAX_PAYLOAD, MAX_STATS,
    ReplyHeader, RequestHeader, op, status,
};
use haq::class::Class;
use haq::runtime::{Controller, ControllerOptions, TenantQueue};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, ErrorKind, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::{self, JoinHandle};
use std::time::Duration;

pub use crate::remote::fetch_stats;

/// The file name suffix of a namespace.
pub const NAMESPACE_SUFFIX: &str = ".ns";
/// The lock file that keeps a second server out of a directory.
pub const LOCK_FILE: &str = ".kavach-target.lock";

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Connections served at once; one more is answered REFUSED and closed.
    pub max_connections: usize,
    /// `O_DIRECT` for the namespace files.
    pub direct: Direct,
    /// How long a new connection may take to send its HELLO.
    pub hello_timeout: Duration,
    /// Quality of service: `None` (the default) runs every request on its connection's
    /// thread; `Some` runs every READ, WRITE and FLUSH through an arbiter between tenant
    /// queues (`haq::runtime::Controller`), one queue per job and class.
    pub qos: Option<ControllerOptions>,
    /// Jobs served in the urgent class (strict priority) whatever their HELLO says; only
    /// with `qos`.
    pub urgent_jobs: Vec<String>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            max_connections: 256,
            direct: Direct::Auto,
            hello_timeout: Duration::from_secs(10),
            qos: None,
            urgent_jobs: Vec::new(),
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Connections accepted.
    pub connections: u64,
    /// Requests answered.
    pub requests: u64,
    /// Connection threads that panicked (a bug: the tests hold it at zero).
    pub panics: u64,
}

struct Namespace {
    job: String,
    dev: FileDevice,
    /// (connection, start, end).
    claims: Mutex<Vec<(u64, u64, u64)>>,
}

struct Shared {
    dir: PathBuf,
    opts: ServerOptions,
    stop: AtomicBool,
    conns: Mutex<HashMap<u64, TcpStream>>,
    namespaces: Mutex<HashMap<String, Weak<Namespace>>>,
    requests: AtomicU64,
    panics: AtomicU64,
    /// The arbiter, with quality of service on.
    controller: Option<Controller>,
}

impl Shared {
    /// The data of a STATS reply: a JSON object whose `qos` says whether quality of service
    /// is on.
    fn stats_json(&self) -> Vec<u8> {
        let Some(c) = &self.controller else {
            return br#"{"qos":"off"}"#.to_vec();
        };
        let mut v = match serde_json::to_value(c.stats()) {
            Ok(serde_json::Value::Object(m)) => m,
            // ControllerStats is a struct: it always serializes to an object.
            _ => serde_json::Map::new(),
        };
        v.insert("qos".into(), "on".into());
        let mut out = serde_json::to_vec(&v).unwrap_or_default();
        // Stay under the limit clients take: drop tenants from the end, and say so.
        while out.len() > MAX_STATS as usize {
            let Some(serde_json::Value::Array(t)) = v.get_mut("tenants") else {
                break;
            };
            if t.pop().is_none() {
                break;
            }
            v.insert("truncated".into(), true.into());
            out = serde_json::to_vec(&v).unwrap_or_default();
        }
        out
    }
}

/// Stops a running server: from another thread or a signal handler thread.
#[derive(Clone)]
pub struct ShutdownHandle(Arc<Shared>);

impl std::fmt::Debug for ShutdownHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShutdownHandle")
            .field("dir", &self.0.dir)
            .finish()
    }
}

impl ShutdownHandle {
    /// Stop accepting, close every connection (a request being executed finishes first) and
    /// let `run` return.
    pub fn shutdown(&self) {
        self.0.stop.store(true, Ordering::SeqCst);
        let conns = self.0.conns.lock().unwrap_or_else(|p| p.into_inner());
        for s in conns.values() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// Stop the server `handle` names on SIGTERM or SIGINT.
pub fn install_signal_handlers(handle: &ShutdownHandle) -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])?;
    let handle = handle.clone();
    thread::Builder::new()
        .name("target-signals".into())
        .spawn(move || {
            if signals.forever().next().is_some() {
                handle.shutdown();
            }
        })?;
    Ok(())
}

/// A block target bound to an address, serving the namespaces of one directory.
pub struct TargetServer {
    listener: TcpListener,
    shared: Arc<Shared>,
    _lock: File,
}

impl std::fmt::Debug for TargetServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TargetServer")
            .field("addr", &self.listener.local_addr().ok())
            .field("dir", &self.shared.dir)
            .finish()
    }
}

/// A server running on its own thread.
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    stop: ShutdownHandle,
    thread: JoinHandle<Result<Summary>>,
}

impl ServerHandle {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
    /// A handle to stop it.
    pub fn handle(&self) -> ShutdownHandle {
        self.stop.clone()
    }
    /// Stop it and wait for it.
    pub fn shutdown(self) -> Result<Summary> {
        self.stop.shutdown();
        self.thread.join().unwrap_or_else(|_| {
            Err(DeviceError::Refused {
                what: "the target's accept thread panicked".into(),
            })
        })
    }
}

impl TargetServer {
    /// Bind `addr` and take `dir` (which must exist and be a directory) for this server: a
    /// lock file in it keeps a second server out. Nothing is created if the address cannot be
    /// bound or the directory is missing.
    pub fn bind(addr: &str, dir: &Path, opts: ServerOptions) -> Result<TargetServer> {
        let md = std::fs::metadata(dir)
            .map_err(|e| DeviceError::io(format!("cannot use directory {}", dir.display()), e))?;
        if !md.is_dir() {
            return Err(DeviceError::Invalid {
                what: "target directory".into(),
                expected: "a directory".into(),
                found: format!("{} (not a directory)", dir.display()),
            });
        }
        let listener = TcpListener::bind(addr)
            .map_err(|e| DeviceError::io(format!("cannot listen on {addr}"), e))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(|e| DeviceError::io(format!("cannot open {}", lock_path.display()), e))?;
        // An OFD lock on the lock file's first byte: gone when this server's process dies.
        crate::lock::claim(&lock, &lock_path.display().to_string(), 0, 1).map_err(|e| match e {
            DeviceError::Busy { .. } => DeviceError::Busy {
                what: format!("another target serves {}", dir.display()),
            },
            other => other,
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|e| DeviceError::io("cannot make the listener non-blocking", e))?;
        for job in &opts.urgent_jobs {
            crate::validate_job(job)?;
        }
        let controller = match &opts.qos {
            None => None,
            Some(q) => Some(
                Controller::start(q.clone()).map_err(|e| DeviceError::Invalid {
                    what: "quality of service settings".into(),
                    expected: "settings the arbiter accepts".into(),
                    found: e.to_string(),
                })?,
            ),
        };
        Ok(TargetServer {
            listener,
            shared: Arc::new(Shared {
                dir: dir.to_path_buf(),
                opts,
                stop: AtomicBool::new(false),
                conns: Mutex::new(HashMap::new()),
                namespaces: Mutex::new(HashMap::new()),
                requests: AtomicU64::new(0),
                panics: AtomicU64::new(0),
                controller,
            }),
            _lock: lock,
        })
    }

    /// The address bound (with the port chosen when asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// A handle that stops [`TargetServer::run`].
    pub fn handle(&self) -> ShutdownHandle {
        ShutdownHandle(self.shared.clone())
    }

    /// Run on a thread of its own.
    pub fn spawn(self) -> Result<ServerHandle> {
        let addr = self.local_addr();
        let stop = self.handle();
        let thread = thread::Builder::new()
            .name("target-accept".into())
            .spawn(move || self.run())
            .map_err(|e| DeviceError::io("cannot start the target's thread", e))?;
        Ok(ServerHandle { addr, stop, thread })
    }

    /// Serve until shut down, then close every connection and wait for their threads.
    pub fn run(self) -> Result<Summary> {
        let mut threads: Vec<JoinHandle<()>> = Vec::new();
        let mut next_conn = 0u64;
        let mut accepted = 0u64;
        while !self.shared.stop.load(Ordering::SeqCst) {
            match self.listener.accept() {
                Ok((stream, _peer)) => {
                    accepted += 1;
                    next_conn += 1;
                    let (done, running): (Vec<_>, Vec<_>) =
                        threads.drain(..).partition(|t| t.is_finished());
                    threads = running;
                    for t in done {
                        if t.join().is_err() {
                            self.shared.panics.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    self.start_connection(stream, next_conn, &mut threads);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    thread::sleep(Duration::from_millis(5));
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // Out of descriptors and the like: wait and try again.
                Err(_) => thread::sleep(Duration::from_millis(50)),
            }
        }
        self.handle().shutdown();
        for t in threads {
            if t.join().is_err() {
                self.shared.panics.fetch_add(1, Ordering::SeqCst);
            }
        }
        if let Some(c) = &self.shared.controller {
            c.shutdown();
        }
        Ok(Summary {
            connections: accepted,
            requests: self.shared.requests.load(Ordering::SeqCst),
            panics: self.shared.panics.load(Ordering::SeqCst),
        })
    }

    fn start_connection(&self, stream: TcpStream, id: u64, threads: &mut Vec<JoinHandle<()>>) {
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_nodelay(true);
        let busy = {
            let conns = self.shared.conns.lock().unwrap_or_else(|p| p.into_inner());
            conns.len() >= self.shared.opts.max_connections
        };
        if busy {
            let mut s = stream;
            let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
            let msg = format!(
                "the target serves {} connections already",
                self.shared.opts.max_connections
            );
            let _ = send_reply(
                &mut s,
                op::HELLO,
                0,
                Err(Failure::new(status::REFUSED, libc::EAGAIN, msg)),
                &[],
            );
            return;
        }
        let Ok(clone) = stream.try_clone() else {
            return;
        };
        self.shared
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, clone);
        // A shutdown that ran before the insert would have missed this stream.
        if self.shared.stop.load(Ordering::SeqCst) {
            let _ = stream.shutdown(Shutdown::Both);
        }
        let shared = self.shared.clone();
        let spawned = thread::Builder::new()
            .name(format!("target-conn-{id}"))
            .spawn(move || {
                let mut c = Connection {
                    shared: shared.clone(),
                    id,
                    ns: None,
                    queue: None,
                };
                c.serve(stream);
                c.release();
                shared
                    .conns
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
            });
        match spawned {
            Ok(t) => threads.push(t),
            Err(_) => {
                if let Some(s) = self
                    .shared
                    .conns
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id)
                {
                    let _ = s.shutdown(Shutdown::Both);
                }
            }
        }
    }
}

/// A failed request: status, errno, message.
struct Failure {
    status: u16,
    code: i32,
    message: String,
}

impl Failure {
    fn new(status: u16, code: i32, message: String) -> Failure {
        Failure {
            status,
            code,
            message,
        }
    }
    fn protocol(b: BadFrame) -> Failure {
        Failure::new(
            status::PROTOCOL,
            libc::EPROTO,
            format!("{}: expected {}, found {}", b.what, b.expected, b.found),
        )
    }
    fn invalid(b: BadFrame) -> Failure {
        Failure::new(
            status::INVALID,
            libc::EINVAL,
            format!("{}: expected {}, found {}", b.what, b.expected, b.found),
        )
    }
    fn from_device(e: DeviceError) -> Failure {
        let st = match &e {
            DeviceError::Io { .. } => status::IO,
            DeviceError::Range { .. } => status::RANGE,
            DeviceError::Busy { .. } => status::BUSY,
            DeviceError::Protocol { .. } => status::PROTOCOL,
            DeviceError::Refused { .. } => status::REFUSED,
            DeviceError::Invalid { .. } => status::INVALID,
        };
        Failure::new(st, e.errno(), e.to_string())
    }
}

/// Send a reply: the header, then the message (cut to `MAX_MESSAGE` bytes on a character
/// boundary) or the data.
fn send_reply(
    s: &mut TcpStream,
    opcode: u16,
    id: u64,
    outcome: std::result::Result<(), Failure>,
    data: &[u8],
) -> std::io::Result<()> {
    let (st, code, message, data) = match outcome {
        Ok(()) => (status::OK, 0, String::new(), data),
        Err(f) => (f.status, f.code, f.message, &[][..]),
    };
    let mut message = message;
    if message.len() > MAX_MESSAGE as usize {
        let mut cut = MAX_MESSAGE as usize;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    let crc = crc32c::crc32c_append(crc32c::crc32c(message.as_bytes()), data);
    let hdr = ReplyHeader {
        op: opcode,
        status: st,
        id,
        code,
        message_len: message.len() as u32,
        data_len: data.len() as u32,
        body_crc: crc,
    }
    .encode();
    let mut parts = [
        IoSlice::new(&hdr),
        IoSlice::new(message.as_bytes()),
        IoSlice::new(data),
    ];
    let mut bufs = &mut parts[..];
    while !bufs.is_empty() {
        match s.write_vectored(bufs) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

struct Connection {
    shared: Arc<Shared>,
    id: u64,
    ns: Option<Arc<Namespace>>,
    /// With quality of service: the queue of this connection's job and class.
    queue: Option<TenantQueue>,
}

/// Read exactly `buf.len()` bytes. `Ok(false)` on a clean end of stream before the first byte.
fn read_frame(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

impl Connection {
    fn serve(&mut self, stream: TcpStream) {
        let Ok(read_half) = stream.try_clone() else {
            return;
        };
        let mut w = stream;
        let mut r = BufReader::with_capacity(64 << 10, read_half);
        let _ = r
            .get_ref()
            .set_read_timeout(Some(self.shared.opts.hello_timeout));
        let mut body = Vec::new();
        let mut data = Vec::new();
        loop {
            let mut hb = [0u8; HEADER_BYTES];
            match read_frame(&mut r, &mut hb) {
                Ok(true) => {}
                Ok(false) | Err(_) => return,
            }
            let h = match RequestHeader::decode(&hb) {
                Ok(h) => h,
                Err(b) => {
                    // The stream cannot be trusted: answer (with what the bytes say the op
                    // and id were) and close.
                    let opcode = u16::from_le_bytes([hb[4], hb[5]]);
                    let id = u64::from_le_bytes(hb[8..16].try_into().unwrap_or([0; 8]));
                    let _ = send_reply(&mut w, opcode, id, Err(Failure::protocol(b)), &[]);
                    return;
                }
            };
            body.resize(h.body_len as usize, 0);
            if r.read_exact(&mut body).is_err() {
                return;
            }
            self.shared.requests.fetch_add(1, Ordering::Relaxed);
            let computed = crc32c::crc32c(&body);
            let outcome = if computed != h.body_crc {
                Err(Failure::protocol(BadFrame {
                    what: "request body_crc",
                    expected: format!("{computed:#010x}"),
                    found: format!("{:#010x}", h.body_crc),
                }))
            } else {
                self.execute(&h, &mut body, &mut data)
            };
            let fatal = h.op == op::HELLO && self.ns.is_none();
            if send_reply(&mut w, h.op, h.id, outcome, &data).is_err() {
                return;
            }
            data.clear();
            if fatal {
                // A failed HELLO ends the connection.
                return;
            }
            if h.op == op::HELLO {
                let _ = r.get_ref().set_read_timeout(None);
            }
        }
    }

    fn execute(
        &mut self,
        h: &RequestHeader,
        body_buf: &mut Vec<u8>,
        data: &mut Vec<u8>,
    ) -> std::result::Result<(), Failure> {
        let body = &body_buf[..];
        let protocol = |what: &'static str, expected: String, found: String| {
            Err(Failure::protocol(BadFrame {
                what,
                expected,
                found,
            }))
        };
        if h.op == op::HELLO {
            if self.ns.is_some() {
                return protocol("op", "no second HELLO".into(), "HELLO".into());
            }
            let hello = proto::decode_hello(h, body).map_err(Failure::protocol)?;
            hello.tenant.validate().map_err(Failure::invalid)?;
            let queue = match &self.shared.controller {
                None => None,
                Some(c) => {
                    let class = if self.shared.opts.urgent_jobs.contains(&hello.job) {
                        Class::Urgent
                    } else {
                        Class::from_ioprio(hello.tenant.class, hello.tenant.level).map_err(|e| {
                            Failure::new(status::INVALID, libc::EINVAL, e.to_string())
                        })?
                    };
                    Some((c, class))
                }
            };
            let (ns, created) = self.open(&hello).map_err(Failure::from_device)?;
            self.queue = queue.map(|(c, class)| c.queue(&hello.job, class));
            let info = Info {
                flags: if created { INFO_CREATED } else { 0 },
                block_size: ns.dev.block_size(),
                capacity: ns.dev.capacity(),
            };
            data.extend_from_slice(&info.encode());
            self.ns = Some(ns);
            return Ok(());
        }
        if h.op == op::STATS {
            // Allowed before HELLO: a monitor needs no namespace.
            if h.flags != 0 || h.offset != 0 || h.length != 0 || !body.is_empty() {
                return protocol(
                    "STATS request",
                    "flags, offset, length and body all 0".into(),
                    format!(
                        "flags {:#x}, offset {}, length {}, {} bytes of body",
                        h.flags,
                        h.offset,
                        h.length,
                        body.len()
                    ),
                );
            }
            data.extend_from_slice(&self.shared.stats_json());
            return Ok(());
        }
        let Some(ns) = self.ns.clone() else {
            return protocol("op", "HELLO first".into(), h.op.to_string());
        };
        if h.flags != 0 {
            return protocol("flags", "0".into(), format!("{:#x}", h.flags));
        }
        let no_body = |name: &'static str| {
            if body.is_empty() {
                Ok(())
            } else {
                protocol(name, "no body".into(), format!("{} bytes", body.len()))
            }
        };
        let dev_err = Failure::from_device;
        let stopping = |e: haq::HaqError| {
            Failure::new(
                status::REFUSED,
                libc::ESHUTDOWN,
                format!("the target's arbiter is stopping: {e}"),
            )
        };
        match h.op {
            op::READ => {
                no_body("READ body")?;
                if h.length > u64::from(MAX_PAYLOAD) {
                    return protocol(
                        "READ length",
                        format!("at most {MAX_PAYLOAD}"),
                        h.length.to_string(),
                    );
                }
                check_range(h.offset, h.length, ns.dev.capacity()).map_err(dev_err)?;
                data.resize(h.length as usize, 0);
                let r = match &self.queue {
                    None => ns.dev.read_at(h.offset, data),
                    Some(q) => {
                        // The buffer goes to the worker and comes back.
                        let mut buf = std::mem::take(data);
                        let offset = h.offset;
                        let (buf, r) = q
                            .run(h.length as u32, move || {
                                let r = ns.dev.read_at(offset, &mut buf);
                                (buf, r)
                            })
                            .map_err(stopping)?;
                        *data = buf;
                        r
                    }
                };
                if r.is_err() {
                    data.clear();
                }
                r.map_err(dev_err)
            }
            op::WRITE => {
                if h.length != u64::from(h.body_len) {
                    return protocol(
                        "WRITE length",
                        format!("body_len ({})", h.body_len),
                        h.length.to_string(),
                    );
                }
                match &self.queue {
                    None => ns.dev.write_at(h.offset, body).map_err(dev_err),
                    Some(q) => {
                        let buf = std::mem::take(body_buf);
                        let offset = h.offset;
                        let (buf, r) = q
                            .run(h.body_len, move || {
                                let r = ns.dev.write_at(offset, &buf);
                                (buf, r)
                            })
                            .map_err(stopping)?;
                        *body_buf = buf;
                        r.map_err(dev_err)
                    }
                }
            }
            op::CLAIM => {
                no_body("CLAIM body")?;
                check_range(h.offset, h.length, ns.dev.capacity()).map_err(dev_err)?;
                self.claim(&ns, h.offset, h.length)
            }
            op::FLUSH => {
                no_body("FLUSH body")?;
                if h.offset != 0 || h.length != 0 {
                    return protocol(
                        "FLUSH offset/length",
                        "0 and 0".into(),
                        format!("{} and {}", h.offset, h.length),
                    );
                }
                match &self.queue {
                    None => ns.dev.flush().map_err(dev_err),
                    // A FLUSH costs one block: the arbiter charges every command something.
                    Some(q) => q
                        .run(ns.dev.block_size(), move || ns.dev.flush())
                        .map_err(stopping)?
                        .map_err(dev_err),
                }
            }
            op::STAT => {
                no_body("STAT body")?;
                let info = Info {
                    flags: 0,
                    block_size: ns.dev.block_size(),
                    capacity: ns.dev.capacity(),
                };
                data.extend_from_slice(&info.encode());
                Ok(())
            }
            other => protocol(
                "op",
                "HELLO, READ, WRITE, CLAIM, FLUSH, STAT or STATS (1 to 7)".into(),
                other.to_string(),
            ),
        }
    }

    fn claim(&self, ns: &Namespace, offset: u64, len: u64) -> std::result::Result<(), Failure> {
        if len == 0 {
            return Ok(());
        }
        let end = offset + len;
        let mut claims = ns.claims.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&(other, s, e)) = claims
            .iter()
            .find(|&&(c, s, e)| c != self.id && s < end && offset < e)
        {
            return Err(Failure::new(
                status::BUSY,
                libc::EBUSY,
                format!(
                    "bytes [{offset}, {end}) of namespace {}: [{s}, {e}) is claimed by connection {other}",
                    ns.job
                ),
            ));
        }
        claims.push((self.id, offset, end));
        Ok(())
    }

    fn release(&mut self) {
        if let Some(ns) = self.ns.take() {
            ns.claims
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|&(c, _, _)| c != self.id);
        }
    }

    /// Open (or create) the namespace of a HELLO.
    fn open(&self, hello: &proto::Hello) -> Result<(Arc<Namespace>, bool)> {
        crate::validate_job(&hello.job)?;
        let mut table = self
            .shared
            .namespaces
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        table.retain(|_, w| w.strong_count() > 0);
        let path = self
            .shared
            .dir
            .join(format!("{}{NAMESPACE_SUFFIX}", hello.job));
        let too_small = |cap: u64| DeviceError::Refused {
            what: format!(
                "namespace {} has {cap} bytes, {} asked for",
                hello.job, hello.len
            ),
        };
        // With the create flag, `len` is only the size of a namespace this HELLO makes: an
        // existing one opens at its own size (a restart need not know the size the first run
        // chose). Without it, `len` is the least size the client needs.
        if let Some(ns) = table.get(&hello.job).and_then(Weak::upgrade) {
            if !hello.create && hello.len > ns.dev.capacity() {
                return Err(too_small(ns.dev.capacity()));
            }
            return Ok((ns, false));
        }
        let exists = match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_file() => true,
            Ok(_) => {
                return Err(DeviceError::Refused {
                    what: format!("{} is not a regular file", path.display()),
                });
            }
            Err(e) if e.kind() == ErrorKind::NotFound => false,
            Err(e) => {
                return Err(DeviceError::io(
                    format!("cannot stat {}", path.display()),
                    e,
                ));
            }
        };
        if !exists && !hello.create {
            return Err(DeviceError::Refused {
                what: format!("no namespace {} on this target", hello.job),
            });
        }
        if !exists && hello.len == 0 {
            return Err(DeviceError::Invalid {
                what: format!("size of new namespace {}", hello.job),
                expected: "more than 0 bytes".into(),
                found: "0".into(),
            });
        }
        let dev = FileDevice::open(
            &path,
            &FileOptions {
                create_len: if exists { None } else { Some(hello.len) },
                direct: self.shared.opts.direct,
            },
        )?;
        if !hello.create && hello.len > dev.capacity() {
            return Err(too_small(dev.capacity()));
        }
        let ns = Arc::new(Namespace {
            job: hello.job.clone(),
            dev,
            claims: Mutex::new(Vec::new()),
        });
        table.insert(hello.job.clone(), Arc::downgrade(&ns));
        Ok((ns, !exists))
    }
}
