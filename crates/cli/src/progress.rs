//! A progress bar for long page-by-page operations (resync, scrub, repair, filling a region).
//!
//! Drawn on stderr, and only when stderr is a terminal, so pipes, files and tests see nothing.
//! It first appears once the operation has run for a tenth of a second (a short one never
//! flickers a bar), redraws at most ten times a second, shows the percentage and the rate in
//! pages per second, and is erased when the operation ends.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Least time between two redraws (and before the first).
const REDRAW_EVERY: Duration = Duration::from_millis(100);
/// Width of the bar in characters.
const BAR_CHARS: u64 = 30;

/// One progress bar, labelled with what is being done.
#[derive(Debug)]
pub struct Progress {
    label: String,
    enabled: bool,
    started: Instant,
    last_drawn: Option<Instant>,
}

impl Progress {
    /// A bar for `label` (for example "scrub"); drawn only if stderr is a terminal.
    pub fn new(label: impl Into<String>) -> Progress {
        Progress {
            label: label.into(),
            enabled: std::io::stderr().is_terminal(),
            started: Instant::now(),
            last_drawn: None,
        }
    }

    /// Record that `done` of `total` pages are done, redrawing if it is time to.
    pub fn update(&mut self, done: u64, total: u64) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        let due = self
            .last_drawn
            .unwrap_or(self.started)
            .checked_add(REDRAW_EVERY)
            .is_none_or(|at| now >= at);
        if !due || done >= total {
            return;
        }
        let secs = now.duration_since(self.started).as_secs_f64();
        let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
        let total = total.max(1);
        let filled = (done.min(total) * BAR_CHARS / total) as usize;
        let line = format!(
            "\r{} [{}{}] {:5.1}% {done}/{total} pages, {rate:.0} pages/s\x1b[K",
            self.label,
            "#".repeat(filled),
            ".".repeat(BAR_CHARS as usize - filled),
            done as f64 * 100.0 / total as f64,
        );
        let mut err = std::io::stderr().lock();
        // A progress bar that cannot be drawn is not worth failing the operation for.
        let _ = err.write_all(line.as_bytes());
        let _ = err.flush();
        self.last_drawn = Some(now);
    }

    /// The callback the integrity library takes: `(done, total)` in pages.
    pub fn callback(&mut self) -> impl FnMut(u64, u64) + '_ {
        move |done, total| self.update(done, total)
    }

    /// Erase the bar (if it was drawn).
    pub fn finish(&mut self) {
        if self.last_drawn.take().is_some() {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(b"\r\x1b[K");
            let _ = err.flush();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
