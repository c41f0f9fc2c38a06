//! Measures the two ways a flush-on-fail save writes a pool back: every line of its regions,
//! or only the pages the dirty-page tracker marked, on a real mapping of a file on /dev/shm in
//! the `eadr` domain (the critical path skips write-backs; `write_back` issues clwb or
//! clflushopt). Prints the calibrated costs, the plan's choice, and the measured save time of
//! each way for a range of dirty fractions.
//!
//! `cargo run --release -p kavach-powerfail --example fof_writeback [MiB]` (default 64).

use std::sync::Arc;
use std::time::{Duration, Instant};

use pmem::fof::DirtyPages;
use pmem::{Domain, Mapping, Medium};
use powerfail::{PoolTarget, SaveTarget, WriteBack, WriterGate};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mib: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(64);
    let len = mib << 20;
    let record = len - 4096;
    let path = std::path::PathBuf::from(format!(
        "/dev/shm/kavach-fof-writeback-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let mut map = Mapping::create(&path, len as u64)?;
    map.set_domain(Domain::Eadr);
    let map = Arc::new(map);
    let dirty = Arc::new(DirtyPages::new(len));
    let mk = |policy| {
        PoolTarget::new(
            "bench",
            map.clone(),
            vec![(0, record)],
            record,
            Arc::new(WriterGate::new()),
            Some(dirty.clone()),
            policy,
        )
    };
    let probe = mk(WriteBack::Cheaper)?;
    probe.arm()?;
    let cost = probe.calibrate(5)?;
    println!(
        "pool {mib} MiB; calibrated: clean line {:?}, dirty line {:?}, bitmap word {:?}",
        cost.clean_line, cost.dirty_line, cost.bitmap_word
    );
    println!("dirty%  pages  plan(all,tracked,choice)          all(ms)  tracked(ms)");
    let pages = record / 4096;
    for pct in [0.1f64, 1.0, 5.0, 25.0, 50.0, 100.0] {
        let n = ((pages as f64 * pct / 100.0).ceil() as usize).max(1);
        let mut best = [Duration::MAX; 2];
        let mut plan = None;
        for _ in 0..5 {
            for (k, policy) in [WriteBack::All, WriteBack::Tracked].into_iter().enumerate() {
                // Dirty n pages spread over the pool: one store per line.
                let step = pages / n;
                for p in 0..n {
                    let page = (p * step) % pages;
                    for l in 0..64 {
                        map.store_u64(page * 4096 + l * 64, (p + l) as u64);
                    }
                    dirty.mark(page * 4096, 4096);
                }
                let t = mk(policy)?;
                t.set_cost(cost);
                if plan.is_none() {
                    let c = mk(WriteBack::Cheaper)?;
                    c.set_cost(cost);
                    plan = Some(c.plan());
                }
                t.stop_writers();
                let start = Instant::now();
                t.save(Instant::now() + Duration::from_secs(10))
                    .map_err(|e| e.to_string())?;
                best[k] = best[k].min(start.elapsed());
            }
        }
        let p = plan.expect("plan");
        println!(
            "{pct:>6} {n:>6}  {:>8.3} {:>8.3} {:?}{:>12.3} {:>12.3}",
            p.all.as_secs_f64() * 1e3,
            p.tracked.as_secs_f64() * 1e3,
            p.mode,
            best[0].as_secs_f64() * 1e3,
            best[1].as_secs_f64() * 1e3,
        );
    }
    drop(probe);
    let _ = std::fs::remove_file(&path);
    Ok(())
}
