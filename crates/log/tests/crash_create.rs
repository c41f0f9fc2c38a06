//! Creating a log over a region that held another log with the same UUID (a backup re-created
//! from its primary takes the primary's UUID) must never bring the old log's records back: the
//! ring is zeroed and that is durable before the descriptors say "this is a new log".
//!
//! Crashed at every fence of `create_with_uuid` (every image of each fence) and after it returns:
//! an image either is not yet a new log (open refuses it, or still finds the old log whole) or is
//! the new, empty one. A new log that opens with an old record in it fails.

use std::time::Duration;

use log::{ForcePolicy, Log, LogOptions};
use pmem::sim::crash_at_every_fence_with;
use pmem::{SimConfig, SimMedium, Uuid};

const REGION: usize = 4096 + 32 * 1024;
const UUID: Uuid = Uuid([7; 16]);

fn old_log() -> (Vec<u8>, Vec<Vec<u8>>) {
    let sim = SimMedium::new(REGION, SimConfig::default());
    let log = Log::create_with_uuid(&sim, 0, REGION, UUID, Duration::from_millis(1))
        .expect("create the old log");
    let mut written = Vec::new();
    for i in 0..40u8 {
        let p = vec![i.wrapping_mul(37) | 1; 100 + i as usize * 13];
        log.append(&p, ForcePolicy::Sync).expect("append");
        written.push(p);
    }
    log.close().expect("close");
    (sim.durable_image(), written)
}

/// What an image opens as: `None` when it is not a log, else its records' payloads.
fn opened(image: Vec<u8>) -> Option<Vec<Vec<u8>>> {
    let sim = SimMedium::from_image(image, SimConfig::default());
    let opts = LogOptions {
        clean_shutdown: false,
        full_wait: Duration::from_millis(1),
        ..LogOptions::default()
    };
    let (log, _) = Log::open(&sim, 0, REGION, &opts).ok()?;
    let records = log
        .records()
        .map(|r| r.expect("no damaged record in a log that opened").payload)
        .collect();
    Some(records)
}

#[test]
fn a_log_created_over_an_old_one_never_shows_its_records() {
    let (old, written) = old_log();
    let mut points = 0;
    // The ring is hundreds of open lines at the last fence; a resurrected record needs the new
    // descriptor and superline kept and the ring's first lines dropped together, more than the
    // pairwise covering set promises: seeded samples (cheap here) find such combinations.
    let cfg = SimConfig {
        seed: 3,
        images_per_crash: 256,
        ..SimConfig::default()
    };
    let n = crash_at_every_fence_with(
        cfg,
        &old,
        |m| {
            let _ = Log::create_with_uuid(m, 0, REGION, UUID, Duration::from_millis(1));
        },
        |img, fence| {
            points += 1;
            match opened(img) {
                None => {}
                Some(records) if records.is_empty() => {}
                // Still the old log, whole: the crash came before the new descriptors.
                Some(records) if records == written => {}
                Some(records) => panic!(
                    "crash at fence {fence}: a log opened with {} records, neither empty nor the \
                     old log's {}",
                    records.len(),
                    written.len()
                ),
            }
        },
    );
    assert!(n > 0 && points >= n);
    // After create returns, every image is the new, empty log.
    let sim = SimMedium::from_image(old, SimConfig::default());
    let log = Log::create_with_uuid(&sim, 0, REGION, UUID, Duration::from_millis(1))
        .expect("create over the old log");
    drop(log);
    let mut images = 0;
    for img in sim.power_fail_state().images() {
        images += 1;
        assert_eq!(
            opened(img).map(|r| r.len()),
            Some(0),
            "the new log is not empty after create returned"
        );
    }
    println!("crash images checked: {images} after create returned");
}
