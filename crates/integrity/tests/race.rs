//! No false alarms under concurrency: two writers store into a protected region on a real
//! mapping (tracked by userfaultfd, or mprotect where the kernel lacks it) while the background
//! update pass runs every 100 ms and the background scrubber verifies clean pages as fast as it
//! can, plus foreground scrubs. Every report would be a false alarm: nothing is damaged.

use integrity::tracker::{self, TrackerKind};
use integrity::{CreateOptions, Mode, OpenOptions};
use pmem::rng::SplitMix64;
use pmem::{Medium, Pool, kinds};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const PAGES: u64 = 2048;
/// The longest the writers run while waiting for enough passes and scrubber rounds.
const RUN_SECS_MAX: u64 = 120;

fn run(kind: TrackerKind) {
    let path = std::path::PathBuf::from("/dev/shm").join(format!(
        "kavach-integrity-race-{}-{}",
        kind.name(),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(
        &path,
        &pmem::CreateOptions {
            size: 32 << 20,
            domain: None,
        },
    )
    .unwrap();
    let mut pool = pool.map_medium(Arc::new);
    let data = pool
        .create_region("data", kinds::RAW, PAGES * 4096, pmem::Alignment::Page)
        .unwrap();
    let opts = CreateOptions {
        mode: Mode::Lazy,
        stripe_pages: 4,
        period_ms: 100,
    };
    integrity::create_in_pool(&mut pool, "data", &opts, &mut |_, _| {}).unwrap();
    let tracker = tracker::for_mapping(
        kind,
        Arc::clone(pool.medium()),
        data.offset as usize,
        data.length as usize,
    )
    .unwrap();
    let (prot, _) = integrity::open_in_pool(
        &pool,
        "data",
        OpenOptions {
            tracker: Some(tracker),
            background: true,
            scrub_pages_per_sec: 400_000,
            ..Default::default()
        },
        &mut |_, _| {},
    )
    .unwrap();
    let prot = Arc::new(prot);
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let prot = Arc::clone(&prot);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut rng = SplitMix64::new(w);
                let mut n = 0u64;
                // Raw stores straight into the mapping, as a program using the region would:
                // the tracker must notice them without any call.
                let m = prot.medium();
                let base = prot.data_offset() as usize;
                while !stop.load(Ordering::Relaxed) {
                    // Writer 0 hammers a few hot pages, writer 1 roams.
                    let page = if w == 0 {
                        rng.below(16)
                    } else {
                        rng.below(PAGES)
                    };
                    let at = base + page as usize * 4096 + 8 * rng.below(512) as usize;
                    m.write(at, &rng.next_u64().to_le_bytes());
                    n += 1;
                }
                n
            })
        })
        .collect();
    // At least 3 s, and until the passes and the background scrubber have run enough to mean
    // something, however loaded the machine is (bounded: a stuck pass fails below).
    let t = Instant::now();
    let mut scrubs = 0;
    let enough = |st: &integrity::Stats| st.passes >= 5 && st.scrub_passes > 0;
    while t.elapsed() < Duration::from_secs(3)
        || !enough(&prot.stats()) && t.elapsed() < Duration::from_secs(RUN_SECS_MAX)
    {
        let report = prot.scrub(&mut |_, _| {}).unwrap();
        assert!(
            report.findings.is_empty(),
            "{}: {} false alarms, first: {:?}",
            kind.name(),
            report.findings.len(),
            report.findings.first()
        );
        scrubs += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let stores: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
    let stats = prot.stats();
    assert!(
        prot.findings().is_empty(),
        "{}: false alarms, first: {:?}",
        kind.name(),
        prot.findings().first()
    );
    assert!(stats.passes >= 5, "{stats:?}");
    assert!(stats.pages_updated_total > 0);
    assert!(stats.scrub_passes > 0, "{stats:?}");
    assert!(
        scrubs > 0 && stores > 10_000,
        "{scrubs} scrubs, {stores} stores"
    );
    let prot = Arc::try_unwrap(prot).unwrap();
    prot.close().unwrap();
    // After the final pass, everything verifies.
    let (prot, report) =
        integrity::open_in_pool(&pool, "data", OpenOptions::default(), &mut |_, _| {}).unwrap();
    assert!(report.clean_at_open);
    assert!(prot.scrub(&mut |_, _| {}).unwrap().findings.is_empty());
    drop(prot);
    drop(pool);
    let _ = std::fs::remove_file(&path);
}

#[test]
#[cfg_attr(
    kavach_no_uffd_wp,
    ignore = "no userfaultfd asynchronous write-protection on this kernel"
)]
fn no_false_alarm_with_concurrent_writers_pass_and_scrubber_uffd() {
    assert!(
        tracker::uffd::supported(),
        "the build found userfaultfd asynchronous write-protection, this run does not"
    );
    run(TrackerKind::Uffd);
}

#[test]
fn no_false_alarm_with_concurrent_writers_pass_and_scrubber_mprotect() {
    run(TrackerKind::Mprotect);
}
