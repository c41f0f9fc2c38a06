//! Messages to the operator on stderr (and stdout) that can never take the server down.
//!
//! `eprintln!` and `println!` panic when the write fails: stderr redirected to a full device
//! (`2>/dev/full`), a pipe whose reader has gone (`kavach serve 2>&1 | head -1`), a closed
//! descriptor. A server that panics on a log line aborts with its pool open and unclean, for a
//! message nobody could read anyway. Every line a running server (or a long-running command
//! around one) prints goes through [`stderr_line`] or [`stdout_line`] instead (the macros
//! [`say!`](crate::say) and [`say_out!`](crate::say_out) format for them): a failed write is
//! dropped and counted ([`write_failures`], shown by INFO as `log_write_failures`), never
//! retried and never fatal.

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

static WRITE_FAILURES: AtomicU64 = AtomicU64::new(0);

/// Writes one line (the text and a newline, in one write) to `out`; a failure is counted.
fn line_to(mut out: impl Write, args: fmt::Arguments<'_>) {
    let mut text = fmt::format(args);
    text.push('\n');
    if out
        .write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        WRITE_FAILURES.fetch_add(1, Ordering::Relaxed);
    }
}

/// Writes one line to stderr. Never panics: a failed write is counted in [`write_failures`].
pub fn stderr_line(args: fmt::Arguments<'_>) {
    line_to(std::io::stderr().lock(), args);
}

/// Writes one line to stdout. Never panics: a failed write is counted in [`write_failures`].
pub fn stdout_line(args: fmt::Arguments<'_>) {
    line_to(std::io::stdout().lock(), args);
}

/// Lines of [`stderr_line`] and [`stdout_line`] that could not be written, since the process
/// started.
pub fn write_failures() -> u64 {
    WRITE_FAILURES.load(Ordering::Relaxed)
}

/// `eprintln!` that never panics: formats its arguments into one line for
/// [`console::stderr_line`](crate::console::stderr_line).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::console::stderr_line(format_args!($($arg)*))
    };
}

/// `println!` that never panics: formats its arguments into one line for
/// [`console::stdout_line`](crate::console::stdout_line).
#[macro_export]
macro_rules! say_out {
    ($($arg:tt)*) => {
        $crate::console::stdout_line(format_args!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that fails like a full device.
    struct Full;

    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from_raw_os_error(28))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failed_write_is_counted_not_fatal() {
        let before = write_failures();
        line_to(Full, format_args!("lost {}", 1));
        line_to(Full, format_args!("lost {}", 2));
        assert!(write_failures() >= before + 2);
        let mut ok = Vec::new();
        line_to(&mut ok, format_args!("kept {}", 3));
        assert_eq!(ok, b"kept 3\n");
    }
}
