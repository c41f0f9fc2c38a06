//! Untrusted bytes never panic the log: seeded random damage to a valid log image (bit flips,
//! random words, overwritten lines in the metadata and the ring), then open (read-only and
//! writable, clean and unclean) and walk every record. Each case must end in records or a typed
//! error.

use std::time::Duration;

use log::{ForcePolicy, Log, LogOptions};
use pmem::rng::SplitMix64;
use pmem::{SimConfig, SimMedium};

const REGION: usize = 4096 + 16 * 1024;

fn image() -> Vec<u8> {
    let sim = SimMedium::new(REGION, SimConfig::default());
    let log = Log::create(sim, 0, REGION, Duration::from_millis(1)).expect("create");
    let mut rng = SplitMix64::new(3);
    for i in 0..200u64 {
        let len = rng.below(700) as usize;
        match log.append(&vec![i as u8; len], ForcePolicy::Sync) {
            Ok(a) if a.lsn > 8 => log.cleanup(a.lsn - 8).expect("cleanup"),
            Ok(_) => {}
            Err(e) => panic!("{e}"),
        }
    }
    log.close().expect("close").durable_image()
}

fn damage(img: &mut [u8], rng: &mut SplitMix64) {
    for _ in 0..1 + rng.below(4) {
        // Aim at metadata half the time: it is small and every field matters.
        let at = if rng.chance(500_000) {
            rng.below(256) as usize
        } else {
            rng.below(img.len() as u64) as usize
        };
        match rng.below(3) {
            0 => img[at] ^= 1 << rng.below(8),
            1 => {
                let at = at & !7;
                img[at..at + 8].copy_from_slice(&rng.next_u64().to_le_bytes());
            }
            _ => {
                let at = at & !63;
                for b in &mut img[at..at + 64] {
                    *b = rng.next_u64() as u8;
                }
            }
        }
    }
}

#[test]
fn random_damage_never_panics_and_records_read_back_are_ones_written() {
    let base = image();
    let mut rng = SplitMix64::new(0xf022);
    let (mut opened, mut refused) = (0, 0);
    for case in 0..3000 {
        let mut img = base.clone();
        damage(&mut img, &mut rng);
        let opts = LogOptions {
            read_only: case % 3 == 0,
            clean_shutdown: case % 2 == 0,
            full_wait: Duration::from_millis(1),
            ..LogOptions::default()
        };
        let sim = SimMedium::from_image(img, SimConfig::default());
        match Log::open(sim, 0, REGION, &opts) {
            Ok((log, _)) => {
                opened += 1;
                for r in log.records() {
                    match r {
                        // Every payload written was a run of one byte value.
                        Ok(rec) => assert!(
                            rec.payload.windows(2).all(|w| w[0] == w[1]),
                            "case {case}: LSN {} came back with bytes never written",
                            rec.lsn
                        ),
                        Err(e) => assert!(e.corruption().is_some(), "case {case}: {e}"),
                    }
                }
                if !opts.read_only {
                    let _ = log.append(b"after damage", ForcePolicy::Sync);
                }
            }
            Err(e) => {
                refused += 1;
                assert!(e.corruption().is_some(), "case {case}: untyped refusal {e}");
            }
        }
    }
    assert!(
        opened > 1000 && refused > 100,
        "opened {opened}, refused {refused}"
    );
}
