//! Per-tenant statistics of the controller: counters, a sliding one-second rate window and
//! log-bucketed latency histograms.
//!
//! What is measured, per tenant (one queue, `name` in `class`):
//!
//! - `commands`, `bytes`: completed commands and their bytes since the queue was made.
//! - `queued`, `max_queued`: commands waiting in the queue now, and the most seen at once.
//! - `bandwidth_bps`, `iops`: completions over the last second (100 buckets of 10 ms; the window
//!   is the last 99 whole buckets plus the current partial one, and the rate divides by that
//!   exact span, or by the uptime when shorter than a second).
//! - `wait_p50_us`, `wait_p99_us`: submit to start (time in the queue) over every command since
//!   the queue was made, from a histogram with 8 buckets per power of two (so a percentile is
//!   exact within 1/16 of its value, reported as the middle of its bucket, never above the
//!   largest value seen).
//! - `latency_p99_us`: submit to completion (for an emulated device, the end of the emulated
//!   service time).

use std::time::{Duration, Instant};

use crate::arbiter::{Policy, Weights};
use crate::class::Class;

/// One tenant's statistics, as reported.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct TenantStats {
    /// The tenant's name (the target's job name).
    pub name: String,
    /// Its class.
    pub class: Class,
    /// Completed commands.
    pub commands: u64,
    /// Bytes of the completed commands.
    pub bytes: u64,
    /// Commands in the queue now.
    pub queued: u32,
    /// The most commands seen in the queue at once.
    pub max_queued: u32,
    /// Completed bytes per second over the last second.
    pub bandwidth_bps: f64,
    /// Completed commands per second over the last second.
    pub iops: f64,
    /// Median time from submit to start, microseconds.
    pub wait_p50_us: f64,
    /// 99th percentile of the time from submit to start, microseconds.
    pub wait_p99_us: f64,
    /// 99th percentile of the time from submit to completion, microseconds.
    pub latency_p99_us: f64,
}

/// The controller's statistics.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ControllerStats {
    /// The arbitration policy.
    pub policy: Policy,
    /// The class weights (0's-based registers; counts are one more).
    pub weights: Weights,
    /// One entry per tenant queue, ordered by class then name.
    pub tenants: Vec<TenantStats>,
    /// Seconds since the controller started.
    pub uptime_s: f64,
}

/// Buckets below 16 hold one value each; above, 8 buckets per power of two.
const LINEAR: u64 = 16;
const SUB_BITS: u32 = 3;
const BUCKETS: usize = 16 + (64 - 4) * 8;

/// A log-bucketed histogram of microsecond values, mergeable; p50, p99, max.
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64; BUCKETS]>,
    n: u64,
    sum: u128,
    max: u64,
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.n)
            .field("p50", &self.quantile(0.5))
            .field("p99", &self.quantile(0.99))
            .field("max", &self.max)
            .finish()
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Histogram {
            counts: Box::new([0; BUCKETS]),
            n: 0,
            sum: 0,
            max: 0,
        }
    }

    fn index(v: u64) -> usize {
        if v < LINEAR {
            return v as usize;
        }
        let e = 63 - v.leading_zeros(); // 4..=63
        let sub = (v >> (e - SUB_BITS)) & 7;
        (LINEAR as usize) + (e as usize - 4) * 8 + sub as usize
    }

    /// The smallest value and the width of bucket `i`.
    fn bucket(i: usize) -> (u64, u64) {
        if i < LINEAR as usize {
            return (i as u64, 1);
        }
        let e = (i - LINEAR as usize) / 8 + 4;
        let sub = ((i - LINEAR as usize) % 8) as u64;
        let width = 1u64 << (e - SUB_BITS as usize);
        ((8 + sub) * width, width)
    }

    /// Record one value.
    pub fn record(&mut self, us: u64) {
        self.counts[Self::index(us)] += 1;
        self.n += 1;
        self.sum += u128::from(us);
        self.max = self.max.max(us);
    }

    /// Record a duration, in whole microseconds.
    pub fn record_duration(&mut self, d: Duration) {
        self.record(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    }

    /// Add another histogram's values to this one.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.n += other.n;
        self.sum += other.sum;
        self.max = self.max.max(other.max);
    }

    /// How many values.
    pub fn count(&self) -> u64 {
        self.n
    }

    /// The largest value (0 when empty).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The mean (0 when empty).
    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum as f64 / self.n as f64
        }
    }

    /// The value at quantile `q` (0..=1): the middle of the bucket holding the value of rank
    /// `ceil(q * n)`, at most the largest value seen; 0 when empty.
    pub fn quantile(&self, q: f64) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
        let q = if q.is_nan() { 0.5 } else { q.clamp(0.0, 1.0) };
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lo, w) = Self::bucket(i);
                let mid = if w == 1 {
                    lo as f64
                } else {
                    lo as f64 + (w as f64 - 1.0) / 2.0
                };
                return mid.min(self.max as f64);
            }
        }
        self.max as f64
    }

    /// The median.
    pub fn p50(&self) -> f64 {
        self.quantile(0.5)
    }

    /// The 99th percentile.
    pub fn p99(&self) -> f64 {
        self.quantile(0.99)
    }
}

const WINDOW_BUCKETS: u64 = 100;
const BUCKET: Duration = Duration::from_millis(10);

/// Completions over the last second, in 10 ms buckets.
#[derive(Debug, Clone)]
pub struct RateWindow {
    /// (bucket number since `origin`, bytes, commands).
    slots: Vec<(u64, u64, u64)>,
    origin: Instant,
}

impl RateWindow {
    /// An empty window whose time starts at `origin`.
    pub fn new(origin: Instant) -> Self {
        RateWindow {
            slots: vec![(u64::MAX, 0, 0); WINDOW_BUCKETS as usize],
            origin,
        }
    }

    fn bucket_of(&self, t: Instant) -> u64 {
        let d = t.saturating_duration_since(self.origin);
        (d.as_nanos() / BUCKET.as_nanos()) as u64
    }

    /// Count one completion of `bytes` at time `t`.
    pub fn record(&mut self, t: Instant, bytes: u64) {
        let b = self.bucket_of(t);
        let slot = &mut self.slots[(b % WINDOW_BUCKETS) as usize];
        if slot.0 != b {
            *slot = (b, 0, 0);
        }
        slot.1 += bytes;
        slot.2 += 1;
    }

    /// (bytes per second, commands per second) over the window ending at `now`.
    pub fn rates(&self, now: Instant) -> (f64, f64) {
        let b = self.bucket_of(now);
        let first = b.saturating_sub(WINDOW_BUCKETS - 1);
        let (mut bytes, mut cmds) = (0u64, 0u64);
        for &(n, by, c) in &self.slots {
            if n != u64::MAX && n >= first && n <= b {
                bytes += by;
                cmds += c;
            }
        }
        let start = self.origin + Duration::from_millis(first.saturating_mul(10));
        let span = now.saturating_duration_since(start).as_secs_f64();
        if span <= 0.0 {
            return (0.0, 0.0);
        }
        (bytes as f64 / span, cmds as f64 / span)
    }
}

/// A tenant's running statistics, kept by the controller.
#[derive(Debug, Clone)]
pub struct TenantAcc {
    /// The tenant's name.
    pub name: String,
    /// Its class.
    pub class: Class,
    /// Completed commands.
    pub commands: u64,
    /// Completed bytes.
    pub bytes: u64,
    /// The most commands seen queued at once.
    pub max_queued: u32,
    /// Submit to start.
    pub wait: Histogram,
    /// Submit to completion.
    pub latency: Histogram,
    /// Completions over the last second.
    pub window: RateWindow,
}

impl TenantAcc {
    /// Empty statistics for `name` in `class`, time starting at `origin`.
    pub fn new(name: &str, class: Class, origin: Instant) -> Self {
        TenantAcc {
            name: name.to_owned(),
            class,
            commands: 0,
            bytes: 0,
            max_queued: 0,
            wait: Histogram::new(),
            latency: Histogram::new(),
            window: RateWindow::new(origin),
        }
    }

    /// Count one completed command.
    pub fn complete(&mut self, bytes: u32, wait: Duration, latency: Duration, at: Instant) {
        self.commands += 1;
        self.bytes += u64::from(bytes);
        self.wait.record_duration(wait);
        self.latency.record_duration(latency);
        self.window.record(at, u64::from(bytes));
    }

    /// The report, with `queued` commands in the queue now.
    pub fn report(&self, queued: u32, now: Instant) -> TenantStats {
        let (bandwidth_bps, iops) = self.window.rates(now);
        TenantStats {
            name: self.name.clone(),
            class: self.class,
            commands: self.commands,
            bytes: self.bytes,
            queued,
            max_queued: self.max_queued,
            bandwidth_bps,
            iops,
            wait_p50_us: self.wait.p50(),
            wait_p99_us: self.wait.p99(),
            latency_p99_us: self.latency.p99(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_tile_the_values() {
        // Every value falls in the bucket whose range holds it; buckets are contiguous.
        let mut next = 0u64;
        for i in 0..BUCKETS {
            let (lo, w) = Histogram::bucket(i);
            assert_eq!(lo, next, "bucket {i}");
            assert_eq!(Histogram::index(lo), i);
            assert_eq!(Histogram::index(lo + (w - 1)), i);
            next = lo.wrapping_add(w);
        }
        assert_eq!(next, 0, "the last bucket ends at 2^64");
        assert_eq!(Histogram::index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_within_a_sixteenth() {
        let mut h = Histogram::new();
        for v in 1..=10_000u64 {
            h.record(v);
        }
        for (q, want) in [(0.5, 5000.0), (0.99, 9900.0), (0.01, 100.0)] {
            let got = h.quantile(q);
            assert!((got - want).abs() <= want / 16.0, "q {q}: {got} vs {want}");
        }
        assert!(h.quantile(1.0) <= 10_000.0);
        assert_eq!(h.max(), 10_000);
        assert_eq!(h.count(), 10_000);
        assert!((h.mean() - 5000.5).abs() < 1e-9);
        assert_eq!(Histogram::new().p99(), 0.0);
        let mut small = Histogram::new();
        small.record(3);
        assert_eq!(small.p50(), 3.0);
        assert_eq!(small.quantile(f64::NAN), 3.0);
    }

    proptest::proptest! {
        /// Any quantile is within 1/16 of the exact value of its rank (the middle of a bucket
        /// 1/8 of its value wide), and quantiles never decrease with q.
        #[test]
        fn quantiles_are_close_to_exact(
            mut vs in proptest::collection::vec(0u64..10_000_000, 1..300),
            q in 0.0f64..=1.0,
        ) {
            let mut h = Histogram::new();
            for &v in &vs {
                h.record(v);
            }
            vs.sort_unstable();
            let rank = ((q * vs.len() as f64).ceil() as usize).clamp(1, vs.len());
            let exact = vs[rank - 1] as f64;
            let got = h.quantile(q);
            proptest::prop_assert!((got - exact).abs() <= exact / 16.0 + 0.5, "q {} got {} exact {}", q, got, exact);
            proptest::prop_assert!(h.quantile(q) <= h.quantile((q + 0.1).min(1.0)));
            proptest::prop_assert_eq!(h.max(), *vs.last().unwrap());
        }
    }

    #[test]
    fn merge_adds_counts() {
        let (mut a, mut b) = (Histogram::new(), Histogram::new());
        for v in 0..100 {
            a.record(v);
            b.record(1000 + v);
        }
        a.merge(&b);
        assert_eq!(a.count(), 200);
        assert_eq!(a.max(), 1099);
        assert!(a.p50() < 100.0 && a.p99() > 1000.0);
    }

    #[test]
    fn rate_window_counts_the_last_second_only() {
        let t0 = Instant::now();
        let mut w = RateWindow::new(t0);
        // 100 completions of 1000 bytes in the first 0.5 s, then nothing until 2 s.
        for i in 0..100u64 {
            w.record(t0 + Duration::from_millis(5 * i), 1000);
        }
        let (bps, iops) = w.rates(t0 + Duration::from_millis(500));
        assert!((bps - 200_000.0).abs() < 1.0, "{bps}");
        assert!((iops - 200.0).abs() < 0.01, "{iops}");
        // At 1 s the window is buckets 1..=100 (10 ms to 1 s): bucket 0's two completions
        // have left it.
        let (bps, iops) = w.rates(t0 + Duration::from_millis(1000));
        assert!((bps - 98_000.0 / 0.99).abs() < 1.0, "{bps}");
        assert!((iops - 98.0 / 0.99).abs() < 0.01);
        let (bps, _) = w.rates(t0 + Duration::from_millis(2000));
        assert_eq!(bps, 0.0);
        // A later completion reuses an old slot.
        w.record(t0 + Duration::from_millis(2005), 7);
        let (bps, iops) = w.rates(t0 + Duration::from_millis(2500));
        assert!((bps - 7.0 / 0.99).abs() < 1e-6 && (iops - 1.0 / 0.99).abs() < 1e-6);
    }
}
