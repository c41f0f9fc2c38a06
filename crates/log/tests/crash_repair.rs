//! Open repairs a damaged descriptor or superline copy by rewriting it from the good one. That
//! rewrite must be durable when open returns: otherwise a power failure loses it, and a second
//! fault later, in the copy that was good, leaves no valid copy at all. Each test damages one
//! copy, opens (repairing it), cuts the power (every image), damages the other copy, and
//! requires the log to open with every record.

use std::time::Duration;

use log::layout::{DESCRIPTOR_COPY_OFFSETS, SUPERLINE_COPY_OFFSETS};
use log::{ForcePolicy, Log, LogOptions};
use pmem::{SimConfig, SimMedium};

const REGION: usize = 4096 + 16 * 1024;

fn logged() -> (Vec<u8>, Vec<Vec<u8>>) {
    let sim = SimMedium::new(REGION, SimConfig::default());
    let log = Log::create(&sim, 0, REGION, Duration::from_millis(1)).expect("create");
    let mut written = Vec::new();
    for i in 0..12u8 {
        let p = vec![i | 0x40; 50 + 20 * i as usize];
        log.append(&p, ForcePolicy::Sync).expect("append");
        written.push(p);
    }
    log.close().expect("close");
    (sim.durable_image(), written)
}

fn opts() -> LogOptions {
    LogOptions {
        // The log was closed cleanly: open writes nothing but the repairs (after an unclean
        // shutdown it would also write a jump record and superlines, covering a lost repair).
        clean_shutdown: true,
        full_wait: Duration::from_millis(1),
        ..LogOptions::default()
    }
}

fn damage(img: &mut [u8], at: usize) {
    img[at + 9] ^= 0x5a;
}

fn records(sim: &SimMedium) -> Result<Vec<Vec<u8>>, String> {
    let (log, _) = Log::open(sim, 0, REGION, &opts()).map_err(|e| e.to_string())?;
    log.records()
        .map(|r| r.map(|r| r.payload).map_err(|e| e.to_string()))
        .collect()
}

/// Damage the copy at `first`, open read-write (the repair), power-fail, then damage the copy
/// at `second` in every image: the log must still open whole.
fn repaired_then_second_fault(first: usize, second: usize, what: &str) -> u64 {
    let (mut image, written) = logged();
    damage(&mut image, first);
    let sim = SimMedium::from_image(image, SimConfig::default());
    assert_eq!(
        records(&sim).as_ref(),
        Ok(&written),
        "{what}: the repairing open"
    );
    let mut images = 0;
    for mut img in sim.power_fail_state().images() {
        images += 1;
        damage(&mut img, second);
        let again = SimMedium::from_image(img, SimConfig::default());
        assert_eq!(
            records(&again).as_ref(),
            Ok(&written),
            "{what}: the repair of the first copy was lost to a power failure"
        );
    }
    images
}

#[test]
fn a_repaired_descriptor_copy_survives_a_power_failure() {
    let mut n = 0;
    for (a, b) in [(0, 1), (1, 0)] {
        n += repaired_then_second_fault(
            DESCRIPTOR_COPY_OFFSETS[a],
            DESCRIPTOR_COPY_OFFSETS[b],
            &format!("descriptor copy {a}"),
        );
    }
    println!("crash images checked: {n}");
}

#[test]
fn a_repaired_superline_copy_survives_a_power_failure() {
    let mut n = 0;
    for (a, b) in [(0, 1), (1, 0)] {
        let (mut img, written) = logged();
        damage(&mut img, SUPERLINE_COPY_OFFSETS[a]);
        let sim = SimMedium::from_image(img, SimConfig::default());
        // The damaged copy is rewritten from the valid one (one sequence lower).
        assert_eq!(records(&sim).as_ref(), Ok(&written), "the repairing open");
        for mut img in sim.power_fail_state().images() {
            n += 1;
            damage(&mut img, SUPERLINE_COPY_OFFSETS[b]);
            let again = SimMedium::from_image(img, SimConfig::default());
            let got = records(&again);
            assert!(
                got.as_ref().is_ok_and(
                    |r| r.len() <= written.len() && r.iter().zip(&written).all(|(x, y)| x == y)
                ),
                "superline copy {a} repaired, copy {b} damaged after a power failure: {got:?}"
            );
        }
    }
    println!("crash images checked: {n}");
    assert!(n > 0);
}
