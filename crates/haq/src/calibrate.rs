//! Calibration: measure a device's saturated throughput γ and the model's a/p (Eq. 6.3) by
//! running any executor flat out from several threads.
//!
//! The executor is a closure `FnMut(offset, bytes) -> Result<(), E>` that performs one
//! command (a read, a write, a remote call); [`calibrate`] makes one per thread, and each
//! thread issues commands back to back at random aligned offsets in `0..span` for the
//! duration, timing each. With `threads` commands outstanding all the time:
//!
//! - γ = commands completed / elapsed time (IOPS, and × size in bytes/s);
//! - a/p, measured: the mean latency of a command divided by the commands outstanding
//!   (`threads`): at saturation each of the p units serves one command in time a while
//!   `threads` wait their turn, so the mean latency is `threads × a / p`;
//! - a/p by Little's law: `1/γ`. The two agree when the threads spend all their time inside
//!   the executor; the gap between them is the time a thread spends outside it (drawing
//!   offsets, timing), which is why both are reported.
//!
//! Guaranteed: the numbers describe this run on this machine only; page cache, other
//! processes and CPU frequency all move them. Nothing is written unless the executor writes.

use crate::class::HaqError;
use pmem::rng::SplitMix64;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CalibrateOptions {
    /// Threads issuing commands, each with one outstanding (>= 1).
    pub threads: u32,
    /// Bytes per command (>= 1).
    pub bytes: u32,
    /// How long to run.
    pub duration: Duration,
    /// Offsets are multiples of `bytes` in `0..span` (span >= bytes).
    pub span: u64,
    /// Seed of the offsets.
    pub seed: u64,
}

/// What was measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Calibration {
    /// Threads (commands outstanding).
    pub threads: u32,
    /// Bytes per command.
    pub bytes: u32,
    /// Elapsed seconds.
    pub seconds: f64,
    /// Commands completed.
    pub commands: u64,
    /// γ in commands per second.
    pub gamma_iops: f64,
    /// γ in bytes per second.
    pub gamma_bps: f64,
    /// Mean latency of a command, microseconds.
    pub latency_mean_us: f64,
    /// 99th percentile latency (log-bucketed, within 9%), microseconds.
    pub latency_p99_us: f64,
    /// a/p measured: mean latency / commands outstanding, microseconds.
    pub a_over_p_us: f64,
    /// a/p by Little's law: 1/γ, microseconds.
    pub littles_a_over_p_us: f64,
}

/// Why a calibration could not finish.
#[derive(Debug)]
pub enum CalibrateError<E> {
    /// An option out of range.
    Invalid(HaqError),
    /// The executor failed.
    Executor {
        /// The thread it failed on.
        thread: u32,
        /// The command's offset.
        offset: u64,
        /// The command's size.
        bytes: u32,
        /// Its error.
        error: E,
    },
    /// A thread panicked.
    Panicked(u32),
}

impl<E: std::fmt::Display> std::fmt::Display for CalibrateError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CalibrateError::Invalid(e) => write!(f, "{e}"),
            CalibrateError::Executor {
                thread,
                offset,
                bytes,
                error,
            } => write!(
                f,
                "command of {bytes} bytes at offset {offset} on thread {thread} failed: {error}"
            ),
            CalibrateError::Panicked(t) => write!(f, "calibration thread {t} panicked"),
        }
    }
}

impl<E: std::fmt::Debug + std::fmt::Display> std::error::Error for CalibrateError<E> {}

/// Latencies in buckets of 1/8 octave of nanoseconds.
const SUB: u32 = 8;

fn bucket(ns: u64) -> usize {
    let ns = ns.max(1);
    let octave = 63 - ns.leading_zeros();
    let frac = if octave >= 3 {
        ((ns >> (octave - 3)) & 7) as u32
    } else {
        ((ns << (3 - octave)) & 7) as u32
    };
    (octave * SUB + frac) as usize
}

fn bucket_top_ns(b: usize) -> f64 {
    let octave = b as u32 / SUB;
    let frac = b as u32 % SUB;
    (2f64).powi(octave as i32) * (1.0 + f64::from(frac + 1) / f64::from(SUB))
}

#[derive(Debug, Clone)]
struct Tally {
    commands: u64,
    sum_ns: u128,
    hist: Vec<u64>,
}

/// Run `make(t)`'s executor on each of `opts.threads` threads for `opts.duration` and
/// measure γ and a/p.
pub fn calibrate<E, F, M>(
    opts: &CalibrateOptions,
    make: M,
) -> Result<Calibration, CalibrateError<E>>
where
    E: Send,
    F: FnMut(u64, u32) -> Result<(), E> + Send,
    M: Fn(u32) -> F,
{
    let bad = |what: &'static str, expected: &str, found: String| {
        CalibrateError::Invalid(HaqError::InvalidConfig {
            what,
            expected: expected.into(),
            found,
        })
    };
    if opts.threads == 0 || opts.threads > 1024 {
        return Err(bad("threads", "1..=1024", opts.threads.to_string()));
    }
    if opts.bytes == 0 {
        return Err(bad("command size", ">= 1 byte", "0".into()));
    }
    if opts.span < u64::from(opts.bytes) {
        return Err(bad(
            "device size",
            &format!("at least one command ({} bytes)", opts.bytes),
            format!("{} bytes", opts.span),
        ));
    }
    if opts.duration.is_zero() || opts.duration > Duration::from_secs(3600) {
        return Err(bad(
            "duration",
            "more than 0 and at most an hour",
            format!("{:?}", opts.duration),
        ));
    }
    let slots = opts.span / u64::from(opts.bytes);
    let executors: Vec<F> = (0..opts.threads).map(&make).collect();
    let start = Instant::now();
    let deadline = start + opts.duration;
    let results: Vec<Result<Tally, CalibrateError<E>>> = std::thread::scope(|s| {
        let handles: Vec<_> = executors
            .into_iter()
            .enumerate()
            .map(|(t, mut exec)| {
                let seed = opts.seed ^ (t as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let bytes = opts.bytes;
                s.spawn(move || {
                    let mut rng = SplitMix64::new(seed);
                    let mut tally = Tally {
                        commands: 0,
                        sum_ns: 0,
                        hist: vec![0; 64 * SUB as usize],
                    };
                    loop {
                        let offset = (rng.next_u64() % slots) * u64::from(bytes);
                        let t0 = Instant::now();
                        if t0 >= deadline {
                            return Ok(tally);
                        }
                        exec(offset, bytes).map_err(|error| CalibrateError::Executor {
                            thread: t as u32,
                            offset,
                            bytes,
                            error,
                        })?;
                        let ns = t0.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
                        tally.commands += 1;
                        tally.sum_ns += u128::from(ns);
                        tally.hist[bucket(ns).min(64 * SUB as usize - 1)] += 1;
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(t, h)| h.join().unwrap_or(Err(CalibrateError::Panicked(t as u32))))
            .collect()
    });
    let seconds = start.elapsed().as_secs_f64();
    let mut total = Tally {
        commands: 0,
        sum_ns: 0,
        hist: vec![0; 64 * SUB as usize],
    };
    for r in results {
        let t = r?;
        total.commands += t.commands;
        total.sum_ns += t.sum_ns;
        for (a, b) in total.hist.iter_mut().zip(&t.hist) {
            *a += b;
        }
    }
    let gamma_iops = total.commands as f64 / seconds;
    let mean_ns = if total.commands == 0 {
        0.0
    } else {
        total.sum_ns as f64 / total.commands as f64
    };
    let p99_ns = {
        let want = (total.commands as f64 * 0.99).ceil() as u64;
        let mut seen = 0;
        let mut at = 0.0;
        for (b, &n) in total.hist.iter().enumerate() {
            seen += n;
            if n > 0 && seen >= want {
                at = bucket_top_ns(b);
                break;
            }
        }
        at
    };
    Ok(Calibration {
        threads: opts.threads,
        bytes: opts.bytes,
        seconds,
        commands: total.commands,
        gamma_iops,
        gamma_bps: gamma_iops * f64::from(opts.bytes),
        latency_mean_us: mean_ns / 1000.0,
        latency_p99_us: p99_ns / 1000.0,
        a_over_p_us: mean_ns / 1000.0 / f64::from(opts.threads),
        littles_a_over_p_us: if gamma_iops > 0.0 {
            1e6 / gamma_iops
        } else {
            f64::INFINITY
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn buckets_are_ordered_and_cover_their_values() {
        let mut last = 0;
        for ns in [1u64, 2, 3, 7, 8, 9, 15, 16, 100, 1000, 12345, 1 << 40] {
            let b = bucket(ns);
            assert!(b >= last, "{ns}");
            last = b;
            assert!(bucket_top_ns(b) >= ns as f64, "{ns} above its bucket's top");
            assert!(
                bucket_top_ns(b) <= ns as f64 * 1.126 + 1.0,
                "{ns}: bucket too coarse"
            );
        }
    }

    #[test]
    fn every_command_is_counted_and_offsets_are_aligned_and_in_range() {
        let seen = Arc::new(AtomicU64::new(0));
        let opts = CalibrateOptions {
            threads: 2,
            bytes: 4096,
            duration: Duration::from_millis(50),
            span: 1 << 20,
            seed: 5,
        };
        let c = calibrate(&opts, |_| {
            let seen = seen.clone();
            move |off: u64, bytes: u32| -> Result<(), String> {
                if off % 4096 != 0 || off + u64::from(bytes) > 1 << 20 {
                    return Err(format!("bad offset {off}"));
                }
                seen.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
        })
        .unwrap();
        assert_eq!(c.commands, seen.load(Ordering::Relaxed));
        assert!(c.commands > 0);
        assert!((c.gamma_bps - c.gamma_iops * 4096.0).abs() < 1e-6);
        assert!((c.littles_a_over_p_us - 1e6 / c.gamma_iops).abs() < 1e-9);
    }

    #[test]
    fn an_executor_error_names_where_it_happened() {
        let opts = CalibrateOptions {
            threads: 1,
            bytes: 512,
            duration: Duration::from_secs(5),
            span: 4096,
            seed: 1,
        };
        let e = calibrate(&opts, |_| {
            |_: u64, _: u32| -> Result<(), &str> { Err("media error") }
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("media error") && e.contains("512 bytes"), "{e}");
    }

    #[test]
    fn options_out_of_range_are_refused() {
        let ok = CalibrateOptions {
            threads: 1,
            bytes: 4096,
            duration: Duration::from_millis(10),
            span: 4096,
            seed: 0,
        };
        let run = |o: CalibrateOptions| {
            calibrate(&o, |_| |_: u64, _: u32| -> Result<(), String> { Ok(()) }).is_err()
        };
        assert!(run(CalibrateOptions { threads: 0, ..ok }));
        assert!(run(CalibrateOptions { bytes: 0, ..ok }));
        assert!(run(CalibrateOptions { span: 4095, ..ok }));
        assert!(run(CalibrateOptions {
            duration: Duration::ZERO,
            ..ok
        }));
        assert!(!run(ok));
    }
}
