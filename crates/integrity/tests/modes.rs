//! Each mode keeps redundancy current, detects and repairs damage, and survives reopening and
//! mode switches; the numbers behind each claim are checked against an independent computation
//! of what the redundancy must be (`support::expected_redundancy`).

mod support;

use integrity::{FindingKind, Mode, OpenOptions};
use pmem::rng::SplitMix64;
use support::*;

fn random_writes(prot: &integrity::Protected<Sim>, rng: &mut SplitMix64, n: usize) {
    let size = prot.geometry().data_pages * PAGE as u64;
    for _ in 0..n {
        let len = [1usize, 8, 64, 100, 4096, 9000][rng.below(6) as usize];
        let at = rng.below(size - len as u64);
        let mut b = vec![0u8; len];
        fill(rng, &mut b);
        prot.write(at, &b).unwrap();
    }
}

#[test]
fn every_mode_keeps_redundancy_current_through_the_api() {
    for mode in [Mode::Lazy, Mode::Eager, Mode::TxbPage] {
        for k in [2, 3, 4, 8] {
            let sim = sim_of(image(100, k, Mode::Lazy, 1));
            let (pool, prot, report) = open_mode(sim, mode);
            assert!(report.clean_at_open);
            assert!(
                redundancy_is_current(&pool, &prot),
                "{mode:?} k={k} at open"
            );
            let mut rng = SplitMix64::new(k as u64);
            random_writes(&prot, &mut rng, 200);
            if mode == Mode::Lazy {
                assert!(
                    !redundancy_is_current(&pool, &prot),
                    "lazy: stale before the pass"
                );
                let st = prot.run_pass().unwrap();
                assert!(st.pages_updated > 0);
            }
            assert!(redundancy_is_current(&pool, &prot), "{mode:?} k={k}");
            let scrub = prot.scrub(&mut |_, _| {}).unwrap();
            assert!(scrub.findings.is_empty(), "{mode:?}: {:?}", scrub.findings);
            assert_eq!(scrub.pages_checked, 100);
        }
    }
}

#[test]
fn eager_reads_verify_and_repair_lines() {
    let sim = sim_of(image(64, 4, Mode::Eager, 2));
    let (pool, prot, _) = open_mode(sim.clone(), Mode::Eager);
    let mut want = vec![0u8; 4096];
    prot.read(5 * 4096, &mut want).unwrap();
    // Flip a bit of page 5 behind the back: the next read finds it, repairs and returns the
    // right bytes.
    let at = prot.data_offset() as usize + 5 * 4096 + 130;
    pmem::fault::flip_bits(&**prot.medium(), at, 1, 1, 7).unwrap();
    let mut got = vec![0u8; 4096];
    prot.read(5 * 4096, &mut got).unwrap();
    assert_eq!(got, want);
    assert_eq!(prot.stats().repairs_on_read, 1);
    assert!(redundancy_is_current(&pool, &prot));
    // Two damaged pages in one stripe: a read of either is an error, never wrong bytes.
    for p in [8, 9] {
        let at = prot.data_offset() as usize + p * 4096;
        pmem::fault::flip_bits(&**prot.medium(), at, 64, 3, p as u64).unwrap();
    }
    let err = prot.read(8 * 4096, &mut got[..64]).unwrap_err();
    assert!(
        matches!(err, integrity::IntegrityError::Unrepairable { page: 8, .. }),
        "{err}"
    );
    // A write over a damaged line refuses too, rather than folding bad bytes into parity.
    assert!(prot.write(9 * 4096, &[1; 8]).is_err());
}

#[test]
fn scrub_finds_and_repair_fixes_each_kind_of_damage() {
    let sim = sim_of(image(128, 4, Mode::Lazy, 3));
    let (pool, prot, _) = open_mode(sim, Mode::Lazy);
    let geo = prot.geometry();
    let meta = pool.region("data.integrity").unwrap().offset as usize;
    let data = prot.data_offset() as usize;
    let m = &**prot.medium();
    pmem::fault::flip_bits(m, data + 3 * PAGE, PAGE, 8, 1).unwrap(); // stripe 0
    pmem::fault::flip_bits(m, data + 21 * PAGE, PAGE, 1, 2).unwrap(); // stripe 5
    pmem::fault::flip_bits(m, meta + geo.pagesums_at as usize + 4 * 40, 4, 2, 3).unwrap(); // page 40's sum
    pmem::fault::flip_bits(m, meta + geo.parity_at as usize + 6 * PAGE, PAGE, 5, 4).unwrap();
    pmem::fault::flip_bits(m, meta + geo.paritysums_at as usize + 4 * 17, 4, 1, 5).unwrap();
    let scrub = prot.scrub(&mut |_, _| {}).unwrap();
    let mut kinds: Vec<(FindingKind, u64)> =
        scrub.findings.iter().map(|f| (f.kind, f.index)).collect();
    kinds.sort_by_key(|k| (k.0 as u8, k.1));
    assert_eq!(
        kinds,
        vec![
            (FindingKind::DataPage, 3),
            (FindingKind::DataPage, 21),
            (FindingKind::ChecksumBlock, 2),
            (FindingKind::ParityPage, 6),
            (FindingKind::ParityChecksumBlock, 1),
        ]
    );
    let report = prot.repair(&mut |_, _| {}).unwrap();
    assert_eq!(report.unrepaired().count(), 0, "{:?}", report.outcomes);
    assert!(redundancy_is_current(&pool, &prot));
    assert!(prot.scrub(&mut |_, _| {}).unwrap().findings.is_empty());
}

#[test]
fn repair_refuses_what_parity_cannot_prove() {
    let sim = sim_of(image(64, 4, Mode::Lazy, 4));
    let (_pool, prot, _) = open_mode(sim, Mode::Lazy);
    let data = prot.data_offset() as usize;
    let m = &**prot.medium();
    // Two pages of stripe 2 damaged.
    pmem::fault::flip_bits(m, data + 8 * PAGE, PAGE, 1, 1).unwrap();
    pmem::fault::flip_bits(m, data + 10 * PAGE, PAGE, 1, 2).unwrap();
    // Page 16 damaged while page 17 of its stripe is written and not yet covered.
    pmem::fault::flip_bits(m, data + 16 * PAGE, PAGE, 1, 3).unwrap();
    prot.write(17 * PAGE as u64, &[7; 100]).unwrap();
    let before = data_of(&prot);
    let report = prot.repair(&mut |_, _| {}).unwrap();
    let mut bad: Vec<u64> = report.unrepaired().map(|o| o.finding.index).collect();
    bad.sort();
    assert_eq!(bad, vec![8, 10, 16]);
    assert_eq!(report.scrub.pages_skipped_written, 1);
    assert_eq!(data_of(&prot), before, "nothing guessed");
    // The pass must not fold the damaged page 16 into parity either.
    prot.run_pass().unwrap();
    let f = prot.findings();
    assert!(
        f.iter()
            .any(|f| f.kind == FindingKind::DataPage && f.index == 16 && f.by == "pass")
    );
}

#[test]
fn clean_close_skips_the_resync_and_a_crash_forces_it() {
    let img = image(64, 4, Mode::Lazy, 5);
    let sim = sim_of(img);
    let (pool, prot, _) = open_mode(sim.clone(), Mode::Lazy);
    prot.write(0, &[1; 10]).unwrap();
    prot.close().unwrap();
    drop(pool);
    let (pool, prot, report) = open_mode(sim_of(sim.durable_image()), Mode::Lazy);
    assert!(report.clean_at_open);
    assert_eq!(report.resync_pages, 0);
    assert!(
        redundancy_is_current(&pool, &prot),
        "close ran the final pass"
    );
    // Written but never closed: the next open rebuilds everything.
    prot.write(4096, &[2; 10]).unwrap();
    let img = prot.medium().durable_image();
    drop(prot);
    let (pool, prot, report) = open_mode(sim_of(img), Mode::Lazy);
    assert!(!report.clean_at_open);
    assert_eq!(report.previous_state, "open");
    assert_eq!(report.resync_pages, 64);
    assert_eq!(report.resync_pages_changed, 1);
    assert!(redundancy_is_current(&pool, &prot));
}

#[test]
fn switching_modes_on_reopen_keeps_redundancy_right() {
    let mut img = image(64, 4, Mode::Off, 6);
    let mut rng = SplitMix64::new(6);
    for mode in [
        Mode::Off,
        Mode::Eager,
        Mode::Lazy,
        Mode::Eager,
        Mode::TxbPage,
        Mode::Off,
        Mode::Lazy,
    ] {
        let (pool, prot, report) = open_mode(sim_of(img), mode);
        assert_eq!(prot.mode(), mode);
        random_writes(&prot, &mut rng, 30);
        if mode != Mode::Off {
            assert!(
                report.previous_state != "stale" || report.resync_pages == 64,
                "after off, a resync"
            );
            prot.run_pass().unwrap();
            assert!(redundancy_is_current(&pool, &prot), "{mode:?}");
            // Eager reads verify lines: they must be current after any switch.
            let mut b = vec![0u8; 64 * PAGE];
            prot.read(0, &mut b).unwrap();
            assert_eq!(prot.stats().repairs_on_read, 0, "{mode:?}");
        }
        prot.close().unwrap();
        img = pool.close().unwrap().durable_image();
    }
}

#[test]
fn a_damaged_header_copy_is_survivable_and_both_are_an_error() {
    let img = image(16, 4, Mode::Lazy, 7);
    let sim = sim_of(img);
    let pool = pmem::Pool::open_medium(sim.clone(), &pmem::OpenOptions::default()).unwrap();
    let meta = pool.region("data.integrity").unwrap().offset as usize;
    drop(pool);
    pmem::fault::flip_bits(&*sim, meta, 256, 3, 1).unwrap();
    let (_, prot, report) = open(sim.clone(), OpenOptions::default()).unwrap();
    assert_eq!(report.header_damage.len(), 1, "{:?}", report.header_damage);
    drop(prot);
    pmem::fault::flip_bits(&*sim, meta, 256, 3, 2).unwrap();
    pmem::fault::flip_bits(&*sim, meta + 2048, 256, 3, 3).unwrap();
    let err = open(sim, OpenOptions::default()).unwrap_err();
    assert!(err.to_string().contains("integrity header"), "{err}");
}
