//! The integrity layer's final pass as part of a flush-on-fail pool save: writes through the
//! API in lazy mode with no update pass, then a save by `powerfail::PoolTarget` with the
//! integrity hook. After a power failure (either fate) the image opens as after a clean close
//! (no resync) and its redundancy is current, and the data holds every write. Without the hook
//! the open resyncs and changes pages, which is what the hook saves. When the writers resume,
//! the header goes back to `open` before they store.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use integrity::fof::FinalPassHook;
use integrity::{Mode, OpenOptions};
use pmem::fof::FofState;
use pmem::rng::SplitMix64;
use pmem::{Medium, Pool, SimConfig, SimDomain, SimMedium};
use powerfail::{PoolTarget, SaveTarget, WriteBack, WriterGate};
use support::*;

const PAGES: u64 = 16;

/// Run the session and the save; the images a power failure leaves afterwards, the data the
/// writes left, and the record's offset.
fn saved_images(with_hook: bool, policy: WriteBack) -> (Vec<Vec<u8>>, Vec<u8>, usize) {
    let base = {
        let sim = sim_of(image(PAGES, 4, Mode::Lazy, 5));
        let mut pool = Pool::open_medium(sim, &pmem::OpenOptions::default()).unwrap();
        pmem::fof::pool_record(&mut pool).unwrap();
        pool.close().unwrap().durable_image()
    };
    let sim = Arc::new(SimMedium::from_image(
        base,
        SimConfig {
            domain: SimDomain::FlushOnFail,
            ..SimConfig::default()
        },
    ));
    let pool = Pool::open_medium(Arc::clone(&sim), &pmem::OpenOptions::default()).unwrap();
    let place = integrity::placement(&pool, "data").unwrap();
    let record = pool.region(pmem::fof::REGION_NAME).unwrap().offset as usize;
    let mut ranges: Vec<(usize, usize)> = pool
        .regions()
        .iter()
        .map(|r| (r.offset as usize, r.length as usize))
        .collect();
    ranges.push((0, pmem::layout::METADATA_BYTES));
    let (prot, _) = integrity::open_in_pool(
        &pool,
        "data",
        OpenOptions {
            mode: Some(Mode::Lazy),
            ..Default::default()
        },
        &mut |_, _| {},
    )
    .unwrap();
    let prot = Arc::new(prot);
    let dirty = Arc::new(pmem::fof::DirtyPages::new(sim.len()));
    let gate = Arc::new(WriterGate::new());
    let target = PoolTarget::new(
        "integrity pool",
        Arc::clone(&sim),
        ranges,
        record,
        gate.clone(),
        Some(dirty.clone()),
        policy,
    )
    .unwrap();
    if with_hook {
        target.add_hook(Arc::new(FinalPassHook::new(
            prot.clone(),
            (place.meta_offset as usize, place.meta_bytes as usize),
            Some(dirty.clone()),
        )));
    }
    target.arm().unwrap();
    let mut data = data_of(&prot);
    let mut rng = SplitMix64::new(9);
    for _ in 0..20 {
        let len = [8usize, 64, 300, 4096][rng.below(4) as usize];
        let at = rng.below(PAGES * PAGE as u64 - len as u64) as usize;
        let mut b = vec![0u8; len];
        fill(&mut rng, &mut b);
        let _g = gate.enter();
        prot.write(at as u64, &b).unwrap();
        dirty.mark(place.data_offset as usize + at, len);
        data[at..at + len].copy_from_slice(&b);
    }
    target.stop_writers();
    target
        .save(Instant::now() + Duration::from_secs(20))
        .unwrap();
    assert_eq!(target.state().unwrap(), FofState::Saved);
    let images = sim
        .power_fail_state()
        .fates()
        .into_iter()
        .map(|(_, i)| i)
        .collect();
    (images, data, record)
}

#[test]
fn a_save_with_the_final_pass_leaves_current_redundancy() {
    for policy in [WriteBack::All, WriteBack::Tracked] {
        let (images, data, record) = saved_images(true, policy);
        // Everything was written back: a missed window after the save leaves the same image
        // as the completed save (the two fates coincide).
        assert_eq!(
            images.len(),
            1,
            "{policy:?}: lines left open after the save"
        );
        for img in images {
            let probe = SimMedium::from_image(img.clone(), SimConfig::default());
            assert_eq!(
                pmem::fof::read(&probe, record).unwrap().state(),
                FofState::Saved
            );
            let (pool, prot, report) = open_mode(sim_of(img), Mode::Lazy);
            assert!(
                report.clean_at_open && report.resync_pages == 0,
                "{policy:?}: a saved image was not opened as clean: {report:?}"
            );
            assert!(
                redundancy_is_current(&pool, &prot),
                "{policy:?}: the trusted redundancy is stale"
            );
            assert_eq!(data_of(&prot), data, "{policy:?}: a write lost");
        }
    }
}

#[test]
fn without_the_final_pass_the_saved_redundancy_is_stale() {
    let (images, data, _) = saved_images(false, WriteBack::All);
    for img in images {
        let (_, prot, report) = open_mode(sim_of(img), Mode::Lazy);
        assert!(report.resync_pages_changed > 0, "{report:?}");
        assert_eq!(data_of(&prot), data);
    }
}

#[test]
fn resuming_writers_sets_the_header_open_again() {
    let (images, _, _) = saved_images(true, WriteBack::All);
    // Reopen the saved image in flush on fail, seal and unseal as a save and a resume would:
    // a missed window after the unseal opens as unclean (a resync), not as clean.
    let sim = Arc::new(SimMedium::from_image(
        images[0].clone(),
        SimConfig {
            domain: SimDomain::FlushOnFail,
            ..SimConfig::default()
        },
    ));
    let pool = Pool::open_medium(Arc::clone(&sim), &pmem::OpenOptions::default()).unwrap();
    let (prot, report) = integrity::open_in_pool(
        &pool,
        "data",
        OpenOptions {
            mode: Some(Mode::Lazy),
            ..Default::default()
        },
        &mut |_, _| {},
    )
    .unwrap();
    assert!(report.clean_at_open);
    prot.seal().unwrap();
    prot.unseal().unwrap();
    prot.write(100, &[7; 64]).unwrap();
    for (fate, img) in sim.power_fail_state().fates() {
        let (_, _, report) = open_mode(sim_of(img), Mode::Lazy);
        assert!(
            !report.clean_at_open,
            "{fate:?}: clean after the unseal: {report:?}"
        );
    }
}
