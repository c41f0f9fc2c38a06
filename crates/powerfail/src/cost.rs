//! What a save has to do ([`SaveEstimate`]) and how long that takes ([`SaveCost`]).

use std::fmt;
use std::ops::{Add, AddAssign};
use std::time::{Duration, Instant};

use crate::PowerFailError;

/// The work a save has to do: bytes to copy (e.g. redo logs of transactions caught committing)
/// and cache lines to write back (e.g. the dirty lines of a pool).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SaveEstimate {
    /// Bytes to copy into persistent memory.
    pub bytes_to_copy: u64,
    /// Cache lines to write back.
    pub lines_to_write_back: u64,
}

impl SaveEstimate {
    /// An estimate of `bytes` to copy and `lines` to write back.
    pub fn new(bytes_to_copy: u64, lines_to_write_back: u64) -> SaveEstimate {
        SaveEstimate {
            bytes_to_copy,
            lines_to_write_back,
        }
    }

    /// This estimate less `other`, never below zero.
    pub fn saturating_sub(self, other: SaveEstimate) -> SaveEstimate {
        SaveEstimate {
            bytes_to_copy: self.bytes_to_copy.saturating_sub(other.bytes_to_copy),
            lines_to_write_back: self
                .lines_to_write_back
                .saturating_sub(other.lines_to_write_back),
        }
    }
}

impl Add for SaveEstimate {
    type Output = SaveEstimate;
    fn add(self, o: SaveEstimate) -> SaveEstimate {
        SaveEstimate {
            bytes_to_copy: self.bytes_to_copy.saturating_add(o.bytes_to_copy),
            lines_to_write_back: self
                .lines_to_write_back
                .saturating_add(o.lines_to_write_back),
        }
    }
}

impl AddAssign for SaveEstimate {
    fn add_assign(&mut self, o: SaveEstimate) {
        *self = *self + o;
    }
}

impl fmt::Display for SaveEstimate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} B to copy, {} lines to write back",
            self.bytes_to_copy, self.lines_to_write_back
        )
    }
}

/// The cost model admission control uses: copy bandwidth, write-back time per line, and a fixed
/// cost per target (stopping its writers).
///
/// `estimate = targets * per_target + bytes / copy_bytes_per_sec + lines * write_back_per_line`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SaveCost {
    copy_bytes_per_sec: f64,
    write_back_per_line: Duration,
    per_target: Duration,
}

impl SaveCost {
    /// A cost model from known figures. `copy_bytes_per_sec` must be finite and > 0.
    pub fn new(
        copy_bytes_per_sec: f64,
        write_back_per_line: Duration,
        per_target: Duration,
    ) -> Result<SaveCost, PowerFailError> {
        if !(copy_bytes_per_sec.is_finite() && copy_bytes_per_sec > 0.0) {
            return Err(PowerFailError::InvalidWindow {
                what: "copy_bytes_per_sec",
                expected: "a finite number > 0",
                found: copy_bytes_per_sec.to_string(),
            });
        }
        Ok(SaveCost {
            copy_bytes_per_sec,
            write_back_per_line,
            per_target,
        })
    }

    /// Calibrates the copy bandwidth by copying `sample_bytes` (at least 4 KiB) between two
    /// buffers several times and keeping the *slowest* pass (a save must plan for the bad case);
    /// the write-back cost per line and the per-target cost are the caller's (measure them on
    /// the target's own write-back path).
    pub fn measure(
        sample_bytes: usize,
        write_back_per_line: Duration,
        per_target: Duration,
    ) -> Result<SaveCost, PowerFailError> {
        let bw = measure_copy_bandwidth(sample_bytes, 5)?;
        SaveCost::new(bw, write_back_per_line, per_target)
    }

    /// The copy bandwidth in bytes per second.
    pub fn copy_bytes_per_sec(&self) -> f64 {
        self.copy_bytes_per_sec
    }

    /// The write-back time per cache line.
    pub fn write_back_per_line(&self) -> Duration {
        self.write_back_per_line
    }

    /// The fixed cost per target.
    pub fn per_target(&self) -> Duration {
        self.per_target
    }

    /// The estimated time to save `work` spread over `targets` targets.
    pub fn time(&self, work: SaveEstimate, targets: usize) -> Duration {
        let copy = work.bytes_to_copy as f64 / self.copy_bytes_per_sec;
        let wb = self.write_back_per_line.as_secs_f64() * work.lines_to_write_back as f64;
        let fixed = self.per_target.as_secs_f64() * targets as f64;
        // Saturate instead of failing: an estimate too large for a Duration is refused anyway.
        Duration::try_from_secs_f64(copy + wb + fixed).unwrap_or(Duration::MAX)
    }
}

impl fmt::Display for SaveCost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "copy {:.2} GB/s, write-back {} ns/line, {} us/target",
            self.copy_bytes_per_sec / 1e9,
            self.write_back_per_line.as_nanos(),
            self.per_target.as_micros()
        )
    }
}

/// Copy bandwidth in bytes/s: the slowest of `passes` timed copies of `sample_bytes`.
pub fn measure_copy_bandwidth(sample_bytes: usize, passes: usize) -> Result<f64, PowerFailError> {
    if sample_bytes < 4096 || passes == 0 {
        return Err(PowerFailError::InvalidWindow {
            what: "copy sample",
            expected: ">= 4096 bytes and >= 1 pass",
            found: format!("{sample_bytes} bytes, {passes} passes"),
        });
    }
    let src: Vec<u8> = (0..sample_bytes).map(|i| i as u8).collect();
    let mut dst = vec![0u8; sample_bytes];
    // One untimed pass so page faults on the destination are not counted as copy time.
    dst.copy_from_slice(&src);
    let mut slowest = Duration::ZERO;
    for _ in 0..passes {
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        slowest = slowest.max(t.elapsed());
    }
    let secs = slowest.as_secs_f64().max(1e-9);
    Ok(sample_bytes as f64 / secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_adds_the_three_parts() {
        let c = SaveCost::new(1e9, Duration::from_nanos(100), Duration::from_micros(10)).unwrap();
        // 1 MB at 1 GB/s = 1 ms; 1000 lines at 100 ns = 100 us; 2 targets at 10 us = 20 us.
        let t = c.time(SaveEstimate::new(1_000_000, 1000), 2);
        assert_eq!(t.as_micros(), 1120);
        assert!(SaveCost::new(0.0, Duration::ZERO, Duration::ZERO).is_err());
        assert!(SaveCost::new(f64::INFINITY, Duration::ZERO, Duration::ZERO).is_err());
    }

    #[test]
    fn measured_bandwidth_is_positive_and_small_samples_refused() {
        let bw = measure_copy_bandwidth(1 << 16, 2).unwrap();
        assert!(bw.is_finite() && bw > 0.0);
        assert!(measure_copy_bandwidth(100, 2).is_err());
        assert!(measure_copy_bandwidth(1 << 16, 0).is_err());
    }
}
