//! Two figures for the README, in a few seconds:
//! 1. the save thread's wake-up latency after SIGPWR (handler's clock read -> save start), and
//! 2. the time to save a memcpy target of growing size against the cost model's estimate and
//!    the 1 / 33 / 70 ms windows.
//!
//! `cargo run --release -p kavach-powerfail --example figures [signals]`

use std::sync::Mutex;
use std::time::{Duration, Instant};

use powerfail::{
    HoldPolicy, PowerFail, Record, SaveCost, SaveError, SaveEstimate, SaveReport, SaveTarget,
    SaveThread, Sigpwr, Window,
};

struct Nothing;

impl SaveTarget for Nothing {
    fn name(&self) -> String {
        "nothing".into()
    }
    fn estimate(&self) -> SaveEstimate {
        SaveEstimate::default()
    }
    fn stop_writers(&self) {}
    fn save(&self, _: Instant) -> Result<SaveReport, SaveError> {
        Ok(SaveReport::default())
    }
    fn resume_writers(&self) {}
}

/// Copies `src` into `dst` when saved: a stand-in for copying redo logs into PM.
struct Copy {
    src: Vec<u8>,
    dst: Mutex<Vec<u8>>,
}

impl SaveTarget for Copy {
    fn name(&self) -> String {
        format!("copy {} MiB", self.src.len() >> 20)
    }
    fn estimate(&self) -> SaveEstimate {
        SaveEstimate::new(self.src.len() as u64, 0)
    }
    fn stop_writers(&self) {}
    fn save(&self, _: Instant) -> Result<SaveReport, SaveError> {
        let mut d = self.dst.lock().unwrap();
        d.copy_from_slice(&self.src);
        std::hint::black_box(&mut *d);
        Ok(SaveReport {
            bytes_copied: self.src.len() as u64,
            lines_written_back: 0,
        })
    }
    fn resume_writers(&self) {}
}

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() - 1) as f64 * p).round() as usize;
    v[i].as_secs_f64() * 1e6
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let cost = SaveCost::measure(64 << 20, Duration::ZERO, Duration::ZERO).unwrap();
    println!("cost model: {cost}");

    // 1. SIGPWR wake-up latency.
    let pf = PowerFail::new(Window::default(), cost);
    let _r = pf.register(std::sync::Arc::new(Nothing));
    let thread = SaveThread::spawn(&pf, HoldPolicy::ResumeAfterSave).unwrap();
    let _s = Sigpwr::install(&thread, Window::default()).unwrap();
    let mut lat = Vec::with_capacity(n);
    let mut total = Vec::with_capacity(n);
    for _ in 0..n {
        // SAFETY: our handler is installed; it only records the time and wakes the thread.
        unsafe { libc::kill(libc::getpid(), libc::SIGPWR) };
        match thread.recv(Duration::from_secs(10)) {
            Some(Record::Saved { outcome, .. }) => {
                lat.push(outcome.latency);
                total.push(outcome.elapsed);
            }
            other => panic!("expected a save, got {other:?}"),
        }
    }
    println!(
        "SIGPWR -> save start over {n} signals: median {:.1} us, p99 {:.1} us, max {:.1} us",
        pct(&mut lat, 0.5),
        pct(&mut lat, 0.99),
        pct(&mut lat, 1.0)
    );
    println!(
        "SIGPWR -> save done (one empty target): median {:.1} us, p99 {:.1} us, max {:.1} us",
        pct(&mut total, 0.5),
        pct(&mut total, 0.99),
        pct(&mut total, 1.0)
    );
    drop(_s);
    drop(thread);
    drop(_r);

    // 2. Save time against bytes to copy.
    println!("bytes to copy | estimated ms | measured ms (median of 5) | inside 1 / 33 / 70 ms");
    for mib in [1usize, 8, 32, 128] {
        let len = mib << 20;
        // vec![1; n] writes every page, so the save does not pay first-touch faults.
        let t = std::sync::Arc::new(Copy {
            src: vec![7u8; len],
            dst: Mutex::new(vec![1u8; len]),
        });
        let pf = PowerFail::new(Window::default(), cost);
        let _r = pf.register(t);
        let (work, est) = pf.estimated();
        let mut runs: Vec<Duration> = Vec::new();
        let mut inside = [0usize; 3];
        for _ in 0..5 {
            let out = pf.run_save(Window::custom_detector());
            runs.push(out.elapsed);
            for (k, w) in [1.0, 33.0, 70.0].into_iter().enumerate() {
                if out.elapsed.as_secs_f64() * 1000.0 <= w {
                    inside[k] += 1;
                }
            }
        }
        println!(
            "{:>9} MiB | {:>12.3} | {:>25.3} | {}/5 {}/5 {}/5",
            work.bytes_to_copy >> 20,
            est.as_secs_f64() * 1000.0,
            pct(&mut runs, 0.5) / 1000.0,
            inside[0],
            inside[1],
            inside[2]
        );
    }
}
