//! The UPS warning source: a Unix stream socket speaking a line protocol a NUT `upsmon`
//! NOTIFYCMD script can drive with one line, e.g.
//! `echo "$NOTIFYTYPE $UPSNAME" | socat - UNIX-CONNECT:/run/kavach/powerfail.sock`.
//!
//! Protocol: each line is `EVENT [detail]`, where EVENT is a NUT notification type (case is
//! ignored) and detail is free text (e.g. the UPS name). Each line gets one reply line:
//! - `OK save EVENT`: a warning was delivered to the save thread;
//! - `OK clear EVENT`: the warning cleared; held writers are resumed;
//! - `OK ignored EVENT`: a known event this socket is not configured to act on;
//! - `ERR <what>`: an empty line, a line longer than [`MAX_LINE`] bytes (the rest of it is
//!   skipped; the connection is closed if no newline comes within 64 KiB), text that is not
//!   UTF-8, or an unknown event.
//!
//! The reply says the warning was *delivered*, not that the save is done: the save runs on the
//! save thread.

use std::fmt;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::registry::SourceToken;
use crate::warning::{Source, Warning, WarningSink};
use crate::{PowerFailError, Window};

/// Longest accepted line, in bytes, without its newline.
pub const MAX_LINE: usize = 256;
/// How much of an over-long line is skipped before the connection is closed.
const MAX_SKIP: u64 = 64 * 1024;
/// Connections served at once; more are answered `ERR busy` and closed.
pub const MAX_CONNECTIONS: usize = 16;
/// How long a connection may stay silent before it is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// NUT `upsmon` notification types (the `NOTIFYTYPE` a NOTIFYCMD script receives).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UpsEvent {
    /// Back on line power.
    Online,
    /// On battery.
    OnBatt,
    /// Battery low: shutdown is near.
    LowBatt,
    /// Forced shutdown by the primary.
    Fsd,
    /// Communication with the UPS restored.
    CommOk,
    /// Communication with the UPS lost.
    CommBad,
    /// The system is being shut down.
    Shutdown,
    /// The battery needs replacing.
    ReplBatt,
    /// The UPS cannot be contacted.
    NoComm,
    /// upsmon's parent process died.
    NoParent,
}

impl UpsEvent {
    /// Every event, in NUT's order.
    pub const ALL: [UpsEvent; 10] = [
        UpsEvent::Online,
        UpsEvent::OnBatt,
        UpsEvent::LowBatt,
        UpsEvent::Fsd,
        UpsEvent::CommOk,
        UpsEvent::CommBad,
        UpsEvent::Shutdown,
        UpsEvent::ReplBatt,
        UpsEvent::NoComm,
        UpsEvent::NoParent,
    ];

    /// NUT's spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            UpsEvent::Online => "ONLINE",
            UpsEvent::OnBatt => "ONBATT",
            UpsEvent::LowBatt => "LOWBATT",
            UpsEvent::Fsd => "FSD",
            UpsEvent::CommOk => "COMMOK",
            UpsEvent::CommBad => "COMMBAD",
            UpsEvent::Shutdown => "SHUTDOWN",
            UpsEvent::ReplBatt => "REPLBATT",
            UpsEvent::NoComm => "NOCOMM",
            UpsEvent::NoParent => "NOPARENT",
        }
    }

    /// Parses NUT's spelling, ignoring case.
    pub fn parse(s: &str) -> Option<UpsEvent> {
        UpsEvent::ALL
            .into_iter()
            .find(|e| e.as_str().eq_ignore_ascii_case(s))
    }
}

impl fmt::Display for UpsEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the socket acts on.
#[derive(Debug, Clone, PartialEq)]
pub struct UpsConfig {
    /// The window a UPS warning carries.
    pub window: Window,
    /// Events that start a save (default LOWBATT, FSD, SHUTDOWN).
    pub save_on: Vec<UpsEvent>,
    /// Events that clear the warning (default ONLINE).
    pub clear_on: Vec<UpsEvent>,
    /// Permission bits of the socket file (default 0o660: owner and group, e.g. `nut`).
    pub mode: u32,
}

impl Default for UpsConfig {
    fn default() -> UpsConfig {
        UpsConfig {
            window: Window::default(),
            save_on: vec![UpsEvent::LowBatt, UpsEvent::Fsd, UpsEvent::Shutdown],
            clear_on: vec![UpsEvent::Online],
            mode: 0o660,
        }
    }
}

impl UpsConfig {
    /// Also save as soon as the UPS goes on battery.
    pub fn save_on_battery(mut self) -> UpsConfig {
        if !self.save_on.contains(&UpsEvent::OnBatt) {
            self.save_on.push(UpsEvent::OnBatt);
        }
        self
    }

    /// The reply to one line (without its newline), and the event to deliver if any.
    pub(crate) fn answer(&self, line: &[u8]) -> (String, Option<Action>) {
        let Ok(text) = std::str::from_utf8(line) else {
            return ("ERR line is not UTF-8".into(), None);
        };
        let text = text.trim();
        let (word, detail) = match text.split_once(char::is_whitespace) {
            Some((w, d)) => (w, d.trim()),
            None => (text, ""),
        };
        if word.is_empty() {
            return (
                "ERR empty line: expected a NUT event such as LOWBATT".into(),
                None,
            );
        }
        let Some(event) = UpsEvent::parse(word) else {
            let shown: String = word.chars().take(32).collect();
            return (
                format!(
                    "ERR unknown event '{}': expected one of {}",
                    shown.escape_default(),
                    names()
                ),
                None,
            );
        };
        let detail = detail.to_string();
        if self.save_on.contains(&event) {
            (
                format!("OK save {event}"),
                Some(Action::Save(event, detail)),
            )
        } else if self.clear_on.contains(&event) {
            (
                format!("OK clear {event}"),
                Some(Action::Clear(event, detail)),
            )
        } else {
            (format!("OK ignored {event}"), None)
        }
    }
}

fn names() -> String {
    UpsEvent::ALL
        .iter()
        .map(|e| e.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

pub(crate) enum Action {
    Save(UpsEvent, String),
    Clear(UpsEvent, String),
}

/// The listening socket; dropping it stops listening and removes the socket file.
pub struct UpsSocket {
    path: PathBuf,
    _listed: SourceToken,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    /// Shared with the accept thread, so the descriptor stays open until both are done with it.
    listener: Arc<UnixListener>,
}

impl fmt::Debug for UpsSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpsSocket")
            .field("path", &self.path)
            .finish()
    }
}

impl UpsSocket {
    /// Listens on `path`, delivering to `sink`. A stale socket file (nobody accepting) is
    /// replaced; a live one is an error, and so is any other kind of file at `path`.
    pub fn bind(
        path: impl AsRef<Path>,
        sink: WarningSink,
        config: UpsConfig,
    ) -> Result<UpsSocket, PowerFailError> {
        let path = path.as_ref().to_path_buf();
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            if !meta.file_type().is_socket() {
                return Err(PowerFailError::io(
                    format!("binding {}", path.display()),
                    std::io::Error::new(
                        ErrorKind::AlreadyExists,
                        "a file that is not a socket is there",
                    ),
                ));
            }
            if UnixStream::connect(&path).is_ok() {
                return Err(PowerFailError::SocketInUse { path });
            }
            std::fs::remove_file(&path)
                .map_err(|e| PowerFailError::io(format!("removing stale {}", path.display()), e))?;
        }
        let listener = UnixListener::bind(&path)
            .map(Arc::new)
            .map_err(|e| PowerFailError::io(format!("binding {}", path.display()), e))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(config.mode))
            .map_err(|e| PowerFailError::io(format!("chmod {}", path.display()), e))?;
        let listed = sink.shared.arm(format!("UPS socket {}", path.display()));
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let config = Arc::new(config);
        let handle = std::thread::Builder::new()
            .name("powerfail-ups".into())
            .spawn({
                let listener = listener.clone();
                move || accept_loop(&listener, sink, config, st)
            })
            .map_err(|e| PowerFailError::io("spawning the UPS socket thread", e))?;
        Ok(UpsSocket {
            path,
            _listed: listed,
            stop,
            handle: Some(handle),
            listener,
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for UpsSocket {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the accept call; the loop sees `stop` and returns. On Linux, shutting the
        // listening socket down makes a blocked accept fail at once; a connection is the
        // fallback.
        // SAFETY: the descriptor is open: `self.listener` keeps the listener alive.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
        let _ = UnixStream::connect(&self.path);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn accept_loop(
    listener: &UnixListener,
    sink: WarningSink,
    config: Arc<UpsConfig>,
    stop: Arc<AtomicBool>,
) {
    let live = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        if stop.load(Ordering::Acquire) {
            return;
        }
        let Ok(mut conn) = conn else {
            // Out of descriptors or similar: do not spin.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        if live.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            live.fetch_sub(1, Ordering::AcqRel);
            let _ = conn.write_all(b"ERR busy: too many connections\n");
            continue;
        }
        let (sink, config, live2) = (sink.clone(), config.clone(), live.clone());
        let spawned = std::thread::Builder::new()
            .name("powerfail-ups-conn".into())
            .spawn(move || {
                serve(conn, &sink, &config);
                live2.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            live.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Serves one connection: one reply line per request line, until EOF, an error, a line too
/// long, or [`IDLE_TIMEOUT`] of silence.
fn serve(conn: UnixStream, sink: &WarningSink, config: &UpsConfig) {
    let _ = conn.set_read_timeout(Some(IDLE_TIMEOUT));
    let _ = conn.set_write_timeout(Some(IDLE_TIMEOUT));
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(conn);
    let mut line = Vec::with_capacity(MAX_LINE + 1);
    loop {
        line.clear();
        let n = match reader
            .by_ref()
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let ended = line.last() == Some(&b'\n');
        if ended {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
        } else if n > MAX_LINE {
            if writeln!(out, "ERR line longer than {MAX_LINE} bytes").is_err() {
                return;
            }
            // Skip the rest of that line and go on serving; give up on a client that sends
            // more than MAX_SKIP bytes without a newline.
            let mut rest = Vec::new();
            match reader.by_ref().take(MAX_SKIP).read_until(b'\n', &mut rest) {
                Ok(_) if rest.last() == Some(&b'\n') => continue,
                _ => return,
            }
        }
        let (reply, action) = config.answer(&line);
        match action {
            Some(Action::Save(event, detail)) => sink.warn(Warning {
                source: Source::Ups { event, detail },
                at: Instant::now(),
                window: config.window,
            }),
            Some(Action::Clear(event, detail)) => sink.clear(Source::Ups { event, detail }),
            None => {}
        }
        if writeln!(out, "{reply}").is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers() {
        let c = UpsConfig::default();
        let a = |l: &[u8]| c.answer(l).0;
        assert_eq!(a(b"LOWBATT"), "OK save LOWBATT");
        assert_eq!(a(b"fsd ups@localhost"), "OK save FSD");
        assert_eq!(a(b"ONLINE"), "OK clear ONLINE");
        assert_eq!(a(b"ONBATT"), "OK ignored ONBATT");
        assert_eq!(
            c.clone().save_on_battery().answer(b"ONBATT").0,
            "OK save ONBATT"
        );
        assert!(a(b"").starts_with("ERR empty"));
        assert!(a(b"   ").starts_with("ERR empty"));
        assert!(a(b"\xff\xfe").starts_with("ERR line is not UTF-8"));
        assert!(a(b"HELLO").starts_with("ERR unknown event 'HELLO'"));
        for e in UpsEvent::ALL {
            assert_eq!(UpsEvent::parse(e.as_str()), Some(e));
        }
    }
}
