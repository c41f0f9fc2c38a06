//! The simulator's canary: a toy commit protocol (write a record, persist it, then set a commit
//! flag and persist that). With the record's flush the invariant "flag set implies record whole"
//! survives every crash; without it the simulator must find a crash that breaks it, and checking
//! mode must report the unpersisted line.

use pmem::sim::{crash_at_every_fence, crash_at_random_points};
use pmem::{Medium, SimConfig, SimMedium};

const RECORD: usize = 0;
const FLAG: usize = 4096;
const PAYLOAD: [u8; 128] = [0xAB; 128];

fn toy_commit(m: &SimMedium, flush_record: bool) {
    m.write(RECORD, &PAYLOAD);
    let r = if flush_record {
        m.flush(RECORD, PAYLOAD.len())
    } else {
        Ok(())
    };
    if r.and_then(|()| m.fence()).is_err() {
        return;
    }
    m.store_u64(FLAG, 1);
    let _ = m.persist(FLAG, 8);
}

/// The protocol's invariant on a crash image: `Err` names the violation.
fn invariant(img: &[u8]) -> Result<(), String> {
    let flag = u64::from_le_bytes(img[FLAG..FLAG + 8].try_into().unwrap());
    match flag {
        0 => Ok(()),
        1 if img[RECORD..RECORD + PAYLOAD.len()] == PAYLOAD => Ok(()),
        1 => Err("commit flag set but the record is not whole".into()),
        other => Err(format!("commit flag torn: {other:#x}")),
    }
}

fn violations(flush_record: bool) -> usize {
    let image = vec![0u8; 8192];
    let mut bad = 0;
    let op = |m: &SimMedium| toy_commit(m, flush_record);
    for seed in 0..50 {
        crash_at_every_fence(&image, seed, op, |img, _| {
            bad += invariant(&img).is_err() as usize
        });
    }
    crash_at_random_points(&image, 77, 1000, op, |img, _| {
        bad += invariant(&img).is_err() as usize
    });
    // And a crash after the protocol finished.
    for seed in 0..50 {
        let sim = SimMedium::new(
            8192,
            SimConfig {
                seed,
                ..SimConfig::default()
            },
        );
        op(&sim);
        bad += invariant(&sim.power_fail()).is_err() as usize;
    }
    bad
}

#[test]
fn canary_passes_with_the_flush() {
    assert_eq!(violations(true), 0);
    let sim = SimMedium::new(8192, SimConfig::default());
    toy_commit(&sim, true);
    assert!(sim.unpersisted().is_empty());
}

#[test]
fn canary_fails_without_the_flush() {
    let bad = violations(false);
    assert!(bad > 0, "the simulator missed the missing flush");
    // Checking mode: the record's two lines are still dirty at the end.
    let sim = SimMedium::new(8192, SimConfig::default());
    toy_commit(&sim, false);
    let lines: Vec<usize> = sim.unpersisted().iter().map(|u| u.offset).collect();
    assert_eq!(lines, vec![0, 64]);
}
