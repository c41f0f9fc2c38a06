//! Warnings, the sink sources deliver them to, and the save thread that acts on them.
//!
//! Every source ends in a [`WarningSink`]: it queues the event and writes one byte to a pipe the
//! save thread blocks on. The SIGPWR source cannot touch the queue (a signal handler must not
//! lock), so its handler records the time and writes its own byte; see [`crate::Sigpwr`]. The
//! save itself always runs on the save thread, never inside a handler or a socket thread.

use std::collections::VecDeque;
use std::fmt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::registry::{PowerFail, SourceToken};
use crate::sigpwr::{self, SIG_PENDING};
use crate::ups::UpsEvent;
use crate::{PowerFailError, SaveOutcome, Window};

/// Where a warning came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The SIGPWR signal.
    Sigpwr,
    /// A line on the UPS socket: the event and whatever followed it on the line.
    Ups {
        /// The NUT notification type.
        event: UpsEvent,
        /// The rest of the line (e.g. the UPS name), possibly empty.
        detail: String,
    },
    /// A caller of [`Manual`] or of [`WarningSink`] directly (a test, a simulator).
    Manual {
        /// The caller's label.
        label: String,
    },
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Sigpwr => f.write_str("SIGPWR"),
            Source::Ups { event, detail } if detail.is_empty() => write!(f, "UPS {event}"),
            Source::Ups { event, detail } => write!(f, "UPS {event} ({detail})"),
            Source::Manual { label } => write!(f, "manual ({label})"),
        }
    }
}

/// A power-failure warning: the machine has `window` from `at`.
#[derive(Debug, Clone, PartialEq)]
pub struct Warning {
    /// Where it came from.
    pub source: Source,
    /// When it was raised (for SIGPWR, when the handler ran).
    pub at: Instant,
    /// How long the machine lasts after `at`.
    pub window: Window,
}

impl Warning {
    /// When the window ends.
    pub fn end(&self) -> Instant {
        self.at + self.window.total()
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "warning from {}, window {}", self.source, self.window)
    }
}

/// What the save thread did, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A save ran for `warning` (the one with the earliest window end among `merged + 1`
    /// warnings that were pending together).
    Saved {
        /// The warning the save was timed against.
        warning: Warning,
        /// How many further pending warnings this save also answered.
        merged: usize,
        /// The save's report.
        outcome: Box<SaveOutcome>,
    },
    /// The warning cleared (power is back) and `resumed` targets were let go.
    Cleared {
        /// Who said so.
        source: Source,
        /// How many targets were resumed.
        resumed: usize,
    },
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Record::Saved {
                warning,
                merged,
                outcome,
            } => {
                write!(f, "{warning}")?;
                if *merged > 0 {
                    write!(f, " (and {merged} more pending)")?;
                }
                write!(f, ": {outcome}")
            }
            Record::Cleared { source, resumed } => {
                write!(f, "cleared by {source}: {resumed} targets resumed")
            }
        }
    }
}

/// What the save thread does with writers after a warning's save.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HoldPolicy {
    /// Keep them stopped until the warning clears (a UPS `ONLINE`, or [`PowerFail::clear`]):
    /// a transaction committed after the save would not be covered by it. The default.
    #[default]
    HoldUntilClear,
    /// Resume them as soon as the save is done.
    ResumeAfterSave,
}

pub(crate) enum Event {
    Warn(Warning),
    Clear(Source),
}

/// The wake-up pipe: the read end blocks the save thread; the write end is non-blocking so a
/// signal handler never waits on it.
pub(crate) struct WakePipe {
    read: OwnedFd,
    write: OwnedFd,
}

pub(crate) const WAKE_QUEUE: u8 = b'q';
pub(crate) const WAKE_SIGNAL: u8 = b's';
const WAKE_STOP: u8 = b'x';

impl WakePipe {
    fn new() -> Result<WakePipe, PowerFailError> {
        let mut fds = [0i32; 2];
        // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
        if rc != 0 {
            return Err(PowerFailError::io("pipe2", std::io::Error::last_os_error()));
        }
        // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: fcntl on a descriptor we own, with plain integer arguments.
        let rc = unsafe {
            let fl = libc::fcntl(write.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(write.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK)
        };
        if rc != 0 {
            return Err(PowerFailError::io(
                "fcntl O_NONBLOCK",
                std::io::Error::last_os_error(),
            ));
        }
        Ok(WakePipe { read, write })
    }

    pub(crate) fn write_fd(&self) -> i32 {
        self.write.as_raw_fd()
    }

    /// Writes one byte; a full pipe is fine (the thread has wake-ups pending already).
    fn wake(&self, byte: u8) {
        // SAFETY: writes one byte from a valid stack location to a descriptor we own.
        let _ = unsafe { libc::write(self.write.as_raw_fd(), (&byte as *const u8).cast(), 1) };
    }

    /// Blocks until at least one byte arrives; returns the bytes, or None on a read error.
    fn wait(&self, buf: &mut [u8]) -> Option<usize> {
        loop {
            // SAFETY: reads at most buf.len() bytes into a valid, writable buffer.
            let n =
                unsafe { libc::read(self.read.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n > 0 {
                return Some(n as usize);
            }
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return None;
        }
    }
}

pub(crate) struct Shared {
    pub(crate) pipe: WakePipe,
    queue: Mutex<VecDeque<Event>>,
    /// The window SIGPWR warnings carry, set while a [`crate::Sigpwr`] is installed for this
    /// thread.
    pub(crate) sigpwr_window: Mutex<Option<Window>>,
    /// The registry the thread saves (sources list themselves in it).
    pub(crate) registry: PowerFail,
    /// Whether the save thread still runs.
    pub(crate) alive: Arc<AtomicBool>,
}

impl Shared {
    pub(crate) fn arm(&self, name: String) -> SourceToken {
        self.registry.arm(name, self.alive.clone())
    }
}

/// Where sources deliver warnings. Cheap to clone; usable from any thread (not from a signal
/// handler: it takes a lock).
#[derive(Clone)]
pub struct WarningSink {
    pub(crate) shared: Arc<Shared>,
}

impl fmt::Debug for WarningSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WarningSink").finish_non_exhaustive()
    }
}

impl WarningSink {
    /// Delivers a warning; the save thread saves within its window, counted from `warning.at`.
    pub fn warn(&self, warning: Warning) {
        self.push(Event::Warn(warning));
    }

    /// Says the warning is over (power is back); held writers are resumed.
    pub fn clear(&self, source: Source) {
        self.push(Event::Clear(source));
    }

    fn push(&self, e: Event) {
        self.shared
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(e);
        self.shared.pipe.wake(WAKE_QUEUE);
    }
}

/// A warning source driven by hand: tests and simulators call [`Manual::raise`].
#[derive(Clone)]
pub struct Manual {
    sink: WarningSink,
    label: String,
    window: Window,
    _listed: Arc<SourceToken>,
}

impl fmt::Debug for Manual {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Manual")
            .field("label", &self.label)
            .field("window", &self.window)
            .finish()
    }
}

impl Manual {
    /// A manual source named `label` whose warnings carry `window`.
    pub fn new(sink: WarningSink, label: impl Into<String>, window: Window) -> Manual {
        let label = label.into();
        let listed = Arc::new(sink.shared.arm(format!("manual ({label})")));
        Manual {
            sink,
            label,
            window,
            _listed: listed,
        }
    }

    /// Raises a warning now.
    pub fn raise(&self) {
        self.sink.warn(Warning {
            source: Source::Manual {
                label: self.label.clone(),
            },
            at: Instant::now(),
            window: self.window,
        });
    }

    /// Says the warning is over.
    pub fn clear(&self) {
        self.sink.clear(Source::Manual {
            label: self.label.clone(),
        });
    }
}

/// The dedicated save thread. Dropping it stops the thread (after any save in progress).
pub struct SaveThread {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
    records: Mutex<Receiver<Record>>,
}

impl fmt::Debug for SaveThread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaveThread").finish_non_exhaustive()
    }
}

impl SaveThread {
    /// Starts a save thread for `registry`.
    pub fn spawn(registry: &PowerFail, policy: HoldPolicy) -> Result<SaveThread, PowerFailError> {
        let shared = Arc::new(Shared {
            pipe: WakePipe::new()?,
            queue: Mutex::new(VecDeque::new()),
            sigpwr_window: Mutex::new(None),
            registry: registry.clone(),
            alive: Arc::new(AtomicBool::new(true)),
        });
        let (tx, rx) = mpsc::channel();
        let reg = registry.clone();
        let sh = shared.clone();
        let handle = std::thread::Builder::new()
            .name("powerfail-save".into())
            .spawn(move || run(reg, sh, policy, tx))
            .map_err(|e| PowerFailError::io("spawning the save thread", e))?;
        Ok(SaveThread {
            shared,
            handle: Some(handle),
            records: Mutex::new(rx),
        })
    }

    /// The sink sources deliver to.
    pub fn sink(&self) -> WarningSink {
        WarningSink {
            shared: self.shared.clone(),
        }
    }

    /// A manual source feeding this thread.
    pub fn manual(&self, label: impl Into<String>, window: Window) -> Manual {
        Manual::new(self.sink(), label, window)
    }

    /// The next record, waiting at most `timeout`.
    pub fn recv(&self, timeout: Duration) -> Option<Record> {
        let rx = self.records.lock().unwrap_or_else(|p| p.into_inner());
        rx.recv_timeout(timeout).ok()
    }

    /// The next record if one is ready.
    pub fn try_recv(&self) -> Option<Record> {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .try_recv()
            .ok()
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl Drop for SaveThread {
    fn drop(&mut self) {
        self.shared.alive.store(false, Ordering::Release);
        self.shared.pipe.wake(WAKE_STOP);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn run(reg: PowerFail, sh: Arc<Shared>, policy: HoldPolicy, tx: Sender<Record>) {
    let mut buf = [0u8; 256];
    loop {
        let Some(n) = sh.pipe.wait(&mut buf) else {
            return;
        };
        let stop = buf[..n].contains(&WAKE_STOP);
        let mut events = Vec::new();
        // SIGPWR first: it is the most urgent and its time was taken in the handler.
        // Only the thread the handler is installed for looks at the handler's flag.
        let window = *sh.sigpwr_window.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(window) = window {
            if SIG_PENDING.swap(false, Ordering::AcqRel) {
                events.push(Event::Warn(Warning {
                    source: Source::Sigpwr,
                    at: sigpwr::take_signal_instant(),
                    window,
                }));
            }
        }
        events.extend(sh.queue.lock().unwrap_or_else(|p| p.into_inner()).drain(..));
        handle(&reg, policy, events, &tx);
        if stop {
            return;
        }
    }
}

/// Acts on events in order; consecutive warnings are answered by one save timed against the
/// earliest window end.
fn handle(reg: &PowerFail, policy: HoldPolicy, events: Vec<Event>, tx: &Sender<Record>) {
    let hold = policy == HoldPolicy::HoldUntilClear;
    let mut pending: Option<(Warning, usize)> = None;
    let flush = |pending: &mut Option<(Warning, usize)>| {
        if let Some((w, merged)) = pending.take() {
            let outcome = Box::new(reg.run_save_from(w.at, w.window, hold));
            let _ = tx.send(Record::Saved {
                warning: w,
                merged,
                outcome,
            });
        }
    };
    for e in events {
        match e {
            Event::Warn(w) => {
                pending = Some(match pending.take() {
                    None => (w, 0),
                    Some((p, m)) if w.end() < p.end() => (w, m + 1),
                    Some((p, m)) => (p, m + 1),
                });
            }
            Event::Clear(source) => {
                flush(&mut pending);
                let resumed = reg.clear();
                let _ = tx.send(Record::Cleared { source, resumed });
            }
        }
    }
    flush(&mut pending);
}
