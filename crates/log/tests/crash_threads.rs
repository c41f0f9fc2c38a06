//! Crash consistency of records written by one thread and forced by another, on the simulator's
//! per-thread persistence model (M16 in `docs/media-assumptions.md`): a thread's write-backs and
//! non-temporal stores are drained only by that thread's own fence.
//!
//! A large record is copied around the cache by its writer; the forcer's fence does not drain
//! the writer's write-combining buffers, so the writer must persist its own record before it
//! completes (`seal`). A small record is stored through the cache and written back by the forcer
//! itself. Either way, once `force` says durable, every crash image must hold the record.

use std::time::Duration;

use log::{Log, LogOptions, NONTEMPORAL_BYTES_MIN};
use pmem::{CrashPlan, SimConfig, SimMedium};

const REGION: usize = 4096 + 64 * 1024;

fn payload(len: usize, tag: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31) ^ tag).collect()
}

fn fresh() -> Vec<u8> {
    let sim = SimMedium::new(REGION, SimConfig::default());
    let log = Log::create(sim, 0, REGION, Duration::from_millis(1)).expect("create");
    log.close().expect("close").durable_image()
}

fn recovered(image: Vec<u8>) -> Vec<(u64, Vec<u8>)> {
    let sim = SimMedium::from_image(image, SimConfig::default());
    let opts = LogOptions {
        clean_shutdown: false,
        full_wait: Duration::from_millis(1),
        ..LogOptions::default()
    };
    let (log, _) = Log::open(&sim, 0, REGION, &opts).expect("recovery after a crash");
    log.records()
        .map(|r| {
            let r = r.expect("no damaged record after recovery");
            (r.lsn, r.payload)
        })
        .collect()
}

/// Writer threads append (no force) records of the given sizes; then this thread forces them
/// all; then the power fails. Every image must hold every record.
fn written_elsewhere_forced_here(sizes: &[usize]) -> u64 {
    let sim = SimMedium::from_image(fresh(), SimConfig::default());
    let opts = LogOptions {
        clean_shutdown: true,
        full_wait: Duration::from_millis(1),
        ..LogOptions::default()
    };
    let (log, _) = Log::open(&sim, 0, REGION, &opts).expect("open");
    let mut written = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let p = payload(len, i as u8);
        let lsn = std::thread::scope(|s| {
            s.spawn(|| {
                let mut r = log.reserve(p.len()).expect("reserve");
                r.copy(0, &p).expect("copy");
                r.complete().expect("complete")
            })
            .join()
            .expect("writer")
        });
        written.push((lsn, p));
    }
    let last = written.last().expect("records").0;
    assert!(log.force(last, 1).expect("force"), "force reports durable");
    let mut images = 0;
    for img in sim.power_fail_state().images() {
        images += 1;
        let got = recovered(img);
        for (lsn, p) in &written {
            assert!(
                got.iter().any(|(l, q)| l == lsn && q == p),
                "record {lsn} ({} bytes) written by another thread was forced but is lost; \
                 recovered {:?}",
                p.len(),
                got.iter().map(|(l, q)| (*l, q.len())).collect::<Vec<_>>()
            );
        }
    }
    images
}

#[test]
fn a_large_record_copied_by_another_thread_survives_once_forced() {
    let n =
        written_elsewhere_forced_here(&[NONTEMPORAL_BYTES_MIN + 700, 4 * NONTEMPORAL_BYTES_MIN]);
    println!("crash images checked: {n}");
}

#[test]
fn small_records_written_by_other_threads_survive_once_forced() {
    let n = written_elsewhere_forced_here(&[40, 300, 900]);
    println!("crash images checked: {n}");
}

/// The same with a crash at every fence of the force: a record the force has not yet returned
/// for may be lost, but nothing recovered is torn or foreign, and once the force returns the
/// record is there (checked above).
#[test]
fn crash_during_a_force_of_records_written_elsewhere_recovers_cleanly() {
    let base = fresh();
    let mut images = 0;
    for n in 1..=6u64 {
        let sim = SimMedium::from_image(
            base.clone(),
            SimConfig {
                seed: n,
                crash: CrashPlan::AtFence(n),
                ..SimConfig::default()
            },
        );
        let opts = LogOptions {
            clean_shutdown: true,
            full_wait: Duration::from_millis(1),
            ..LogOptions::default()
        };
        let Ok((log, _)) = Log::open(&sim, 0, REGION, &opts) else {
            continue;
        };
        let mut written = Vec::new();
        for (i, len) in [2000usize, 50, 3000].into_iter().enumerate() {
            let p = payload(len, i as u8);
            let r = std::thread::scope(|s| {
                s.spawn(|| {
                    let mut r = log.reserve(p.len())?;
                    written.push((r.lsn(), p.clone()));
                    r.copy(0, &p)?;
                    r.complete()
                })
                .join()
                .expect("writer")
            });
            if r.is_err() {
                break;
            }
        }
        if let Some((last, _)) = written.last() {
            let _ = log.force(*last, 1);
        }
        drop(log);
        let Some(state) = sim.crash_state() else {
            continue;
        };
        for img in state.images() {
            images += 1;
            for (lsn, p) in recovered(img) {
                assert!(
                    written.iter().any(|(l, q)| *l == lsn && *q == p),
                    "fence {n}: recovered record {lsn} was never written so"
                );
            }
        }
    }
    println!("crash images checked: {images}");
    assert!(images > 0);
}
