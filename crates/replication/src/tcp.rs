//! The TCP transport: [`TcpPeers`] for a primary, [`serve_backup`] for a backup.
//!
//! The dissertation replicates with one-sided RDMA writes; over TCP the backup's CPU copies the
//! bytes, persists them and answers, which keeps the one-round-trip write-and-persist protocol
//! and the rule that an acknowledgement means "persistent here".

use std::io::{BufRead, BufReader, BufWriter, ErrorKind};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::copy::{Host, serve};
use crate::peers::Peers;
use crate::proto::{FrameError, Request, Response, read_frame, tags, write_frame};

/// How often an idle backup connection checks for shutdown.
const IDLE_POLL: Duration = Duration::from_millis(200);

#[derive(Debug)]
struct Conn {
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
}

/// A primary's connections to its backups.
#[derive(Debug)]
pub struct TcpPeers {
    addrs: Vec<String>,
    conns: Vec<Option<Conn>>,
    timeout: Duration,
    pending: Vec<(usize, bool)>,
    deadline: Option<Instant>,
}

impl TcpPeers {
    /// Backups at `addrs` (host:port), each answer awaited at most `timeout`.
    pub fn new(addrs: Vec<String>, timeout: Duration) -> TcpPeers {
        let conns = addrs.iter().map(|_| None).collect();
        TcpPeers {
            addrs,
            conns,
            timeout,
            pending: Vec::new(),
            deadline: None,
        }
    }

    /// The answer timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn connect(&mut self, i: usize) -> Option<&mut Conn> {
        if self.conns[i].is_none() {
            let addr: SocketAddr = self.addrs[i].to_socket_addrs().ok()?.next()?;
            let s = TcpStream::connect_timeout(&addr, self.timeout).ok()?;
            s.set_nodelay(true).ok()?;
            s.set_write_timeout(Some(self.timeout)).ok()?;
            let r = s.try_clone().ok()?;
            self.conns[i] = Some(Conn {
                reader: BufReader::with_capacity(256 << 10, r),
                writer: BufWriter::with_capacity(256 << 10, s),
            });
        }
        self.conns[i].as_mut()
    }
}

impl Peers for TcpPeers {
    fn count(&self) -> usize {
        self.addrs.len()
    }

    fn name(&self, i: usize) -> String {
        self.addrs[i].clone()
    }

    fn send(&mut self, i: usize, req: &Request) -> bool {
        if self.deadline.is_none() {
            self.deadline = Some(Instant::now() + self.timeout);
        }
        let frame = req.encode();
        let ok = match self.connect(i) {
            Some(c) => write_frame(&mut c.writer, &frame).is_ok(),
            None => false,
        };
        if !ok {
            self.disconnect(i);
        }
        self.pending.push((i, ok));
        ok
    }

    fn finish(&mut self) -> Vec<(usize, Option<Response>)> {
        let deadline = self.deadline.take().unwrap_or_else(Instant::now);
        let pending = std::mem::take(&mut self.pending);
        let mut out = Vec::with_capacity(pending.len());
        for (i, sent) in pending {
            let mut answer = None;
            if sent {
                if let Some(c) = self.conns[i].as_mut() {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let left = left.max(Duration::from_millis(1));
                    let s = c.reader.get_ref();
                    if s.set_read_timeout(Some(left)).is_ok() {
                        answer = match read_frame(&mut c.reader) {
                            // A data answer is its body: taken as it is, not copied.
                            Ok((tags::DATA, body)) => Some(Response::Data(body)),
                            Ok((tag, body)) => Response::decode(tag, &body).ok(),
                            Err(_) => None,
                        };
                    }
                }
                if answer.is_none() {
                    self.disconnect(i);
                }
            }
            out.push((i, answer));
        }
        out
    }

    fn disconnect(&mut self, i: usize) {
        if let Some(c) = self.conns[i].take() {
            let _ = c.reader.get_ref().shutdown(Shutdown::Both);
        }
    }
}

/// Serve backup requests on `listener` until `stop` is set: one thread per connection, each
/// request handled under the host's lock, answered after its writes are persistent.
pub fn serve_backup<H: Host + 'static>(
    listener: TcpListener,
    host: Arc<Mutex<H>>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    while !stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((s, _)) => {
                let host = Arc::clone(&host);
                let stop = Arc::clone(&stop);
                thread::Builder::new()
                    .name("kv-backup-conn".into())
                    .spawn(move || connection(s, host, stop))?;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(20));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => thread::sleep(Duration::from_millis(100)),
        }
    }
    Ok(())
}

fn connection<H: Host>(s: TcpStream, host: Arc<Mutex<H>>, stop: Arc<AtomicBool>) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(IDLE_POLL));
    let Ok(w) = s.try_clone() else { return };
    let mut reader = BufReader::with_capacity(256 << 10, s);
    let mut writer = BufWriter::with_capacity(64 << 10, w);
    // The frame of the last read's answer, reused by the next read (see `Copy::read_frame`).
    let mut data = Vec::new();
    while !stop.load(Ordering::Acquire) {
        // Wait for a frame's first bytes with a short timeout (to notice `stop`), then read the
        // rest without one: a frame delayed in the network is not cut in half.
        match reader.fill_buf() {
            Ok([]) => return,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
        let _ = reader.get_ref().set_read_timeout(None);
        let frame = read_frame(&mut reader);
        let _ = reader.get_ref().set_read_timeout(Some(IDLE_POLL));
        let (tag, body) = match frame {
            Ok(f) => f,
            Err(FrameError::Io(_)) => return,
            Err(FrameError::Proto(e)) => {
                let _ = write_frame(&mut writer, &Response::Error(e.to_string()).encode());
                return;
            }
        };
        let resp = match Request::decode(tag, &body) {
            Ok(req @ Request::Snapshot { epoch, .. }) => {
                // Checked under the host's lock, applied without it: the primary's writes to
                // this copy go on while the piece goes into the store.
                let target = {
                    let mut h = host.lock().unwrap_or_else(|p| p.into_inner());
                    crate::copy::snapshot_target(&mut *h, epoch)
                };
                match target {
                    Ok((store, uuid)) => {
                        Some(crate::copy::apply_snapshot(store.as_ref(), uuid, &req))
                    }
                    Err(r) => Some(r),
                }
            }
            Ok(Request::Read { offset, len }) => {
                let mut h = host.lock().unwrap_or_else(|p| p.into_inner());
                match h.copy() {
                    Some(c) => {
                        c.read_frame(offset, len, &mut data);
                        None
                    }
                    None => Some(Response::Error("no log copy here".into())),
                }
            }
            Ok(req) => {
                let mut h = host.lock().unwrap_or_else(|p| p.into_inner());
                Some(serve(&mut *h, &req))
            }
            Err(e) => Some(Response::Error(e.to_string())),
        };
        let sent = match resp {
            Some(resp) => write_frame(&mut writer, &resp.encode()),
            None => write_frame(&mut writer, &data),
        };
        if sent.is_err() {
            return;
        }
    }
}
