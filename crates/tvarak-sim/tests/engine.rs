//! The functional engine in Kavach's layout and a real `integrity` eager-mode region, given the
//! same stores, end with byte-identical redundancy: page checksums and their blocks' checksums,
//! parity page checksums and their blocks' checksums, line checksums, parity pages (and the
//! same data). The engine sees the stores as line writebacks (the controller's view); the
//! region sees them as `Protected::write` calls.

use integrity::{CreateOptions, Geometry, Mode, OpenOptions, Protected};
use pmem::rng::SplitMix64;
use pmem::{Domain, Medium, Pool, SimMedium, kinds};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::sync::Arc;
use tvarak_sim::design::Design;
use tvarak_sim::engine::{Engine, LINE, PAGE, RedundancyImage, Section};
use tvarak_sim::sim::{Event, SimConfig, simulate};

type Sim = Arc<SimMedium>;

fn fill(rng: &mut SplitMix64, buf: &mut [u8]) {
    for c in buf.chunks_mut(8) {
        let v = rng.next_u64().to_le_bytes();
        c.copy_from_slice(&v[..c.len()]);
    }
}

/// A pool on the persistence simulator with a `data` region of `pages` pages holding `init`,
/// protected in eager mode with stripes of `k`, closed and reopened (eager).
fn eager_region(pages: u64, k: u32, init: &[u8]) -> (Pool<Sim>, Protected<Sim>) {
    let geo = Geometry::new(pages, k).unwrap();
    let size = (64 * 1024 + pages * PAGE as u64 + geo.meta_bytes).next_multiple_of(4096);
    let sim = Arc::new(SimMedium::new(size as usize, pmem::SimConfig::default()));
    let sim = Pool::format(sim, Domain::Sim).unwrap();
    let mut pool = Pool::open_medium(sim, &pmem::OpenOptions::default()).unwrap();
    let data = pool
        .create_region(
            "data",
            kinds::RAW,
            pages * PAGE as u64,
            pmem::Alignment::Page,
        )
        .unwrap();
    pool.medium().write(data.offset as usize, init);
    pool.medium()
        .persist(data.offset as usize, init.len())
        .unwrap();
    let opts = CreateOptions {
        mode: Mode::Eager,
        stripe_pages: k,
        period_ms: 1000,
    };
    integrity::create_in_pool(&mut pool, "data", &opts, &mut |_, _| {}).unwrap();
    let image = pool.close().unwrap().durable_image();
    let sim = Arc::new(SimMedium::from_image(image, pmem::SimConfig::default()));
    let pool = Pool::open_medium(sim, &pmem::OpenOptions::default()).unwrap();
    let (prot, report) = integrity::open_in_pool(
        &pool,
        "data",
        OpenOptions {
            mode: Some(Mode::Eager),
            ..Default::default()
        },
        &mut |_, _| {},
    )
    .unwrap();
    assert!(report.clean_at_open);
    assert_eq!(prot.mode(), Mode::Eager);
    (pool, prot)
}

/// The region's redundancy, read from its integrity region, in the engine's section form.
fn region_redundancy(pool: &Pool<Sim>, prot: &Protected<Sim>) -> RedundancyImage {
    let geo = prot.geometry();
    let meta = pool.region("data.integrity").unwrap().offset as usize;
    let read = |at: u64, len: usize| {
        let mut b = vec![0u8; len];
        pool.medium().read(meta + at as usize, &mut b);
        b
    };
    let padded = |n: u64| (n as usize * 4).next_multiple_of(64);
    let blocks = |n: u64| n.div_ceil(16) as usize * 4;
    let sec = |name: &str, bytes: Vec<u8>| Section {
        name: name.into(),
        bytes,
    };
    RedundancyImage {
        sections: vec![
            sec("pagesums", read(geo.pagesums_at, padded(geo.data_pages))),
            sec(
                "pageblocks",
                read(geo.pageblocks_at, blocks(geo.data_pages)),
            ),
            sec("paritysums", read(geo.paritysums_at, padded(geo.stripes))),
            sec(
                "parityblocks",
                read(geo.parityblocks_at, blocks(geo.stripes)),
            ),
            sec(
                "linesums",
                read(geo.linesums_at, geo.data_pages as usize * PAGE / LINE * 4),
            ),
            sec("parity", read(geo.parity_at, geo.stripes as usize * PAGE)),
        ],
    }
}

fn region_data(prot: &Protected<Sim>) -> Vec<u8> {
    let mut b = vec![0u8; prot.geometry().data_pages as usize * PAGE];
    prot.read(0, &mut b).unwrap();
    b
}

/// A store: offset and bytes.
type Store = (u64, Vec<u8>);

/// Apply `stores` to the region through its API and to the engine as line writebacks: a
/// cache image takes the stores, and its dirty lines are written back every `batch` stores
/// (in a scrambled order, so diffs accumulate over several stores per line) and at the end.
fn run_both(
    pages: u64,
    k: u32,
    init: &[u8],
    stores: &[Store],
    batch: usize,
) -> (Engine, Pool<Sim>, Protected<Sim>) {
    let (pool, prot) = eager_region(pages, k, init);
    let uuid = pool.uuid();
    let mut engine = Engine::kavach_layout(uuid, pages, k, init).unwrap();
    let mut cache = init.to_vec();
    let mut dirty = BTreeSet::new();
    let drain = |engine: &mut Engine, cache: &[u8], dirty: &mut BTreeSet<u64>| {
        // Odd lines first, then even: an order unrelated to the order of the stores.
        let order: Vec<u64> = dirty
            .iter()
            .filter(|l| *l % 2 == 1)
            .chain(dirty.iter().filter(|l| *l % 2 == 0))
            .copied()
            .collect();
        for l in order {
            let a = l as usize * LINE;
            let line: [u8; LINE] = cache[a..a + LINE].try_into().unwrap();
            engine.writeback(a as u64, &line).unwrap();
        }
        dirty.clear();
    };
    for (i, (at, bytes)) in stores.iter().enumerate() {
        prot.write(*at, bytes).unwrap();
        let a = *at as usize;
        cache[a..a + bytes.len()].copy_from_slice(bytes);
        for l in a / LINE..(a + bytes.len()).div_ceil(LINE) {
            dirty.insert(l as u64);
        }
        if (i + 1) % batch == 0 {
            drain(&mut engine, &cache, &mut dirty);
        }
    }
    drain(&mut engine, &cache, &mut dirty);
    (engine, pool, prot)
}

fn random_stores(rng: &mut SplitMix64, bytes: u64, n: usize) -> Vec<Store> {
    (0..n)
        .map(|_| {
            let len = [1u64, 3, 8, 64, 100, 700, 4096, 5000][rng.below(8) as usize].min(bytes);
            let at = rng.below(bytes - len + 1);
            let mut b = vec![0u8; len as usize];
            fill(rng, &mut b);
            (at, b)
        })
        .collect()
}

fn assert_identical(engine: &Engine, pool: &Pool<Sim>, prot: &Protected<Sim>) {
    let ours = engine.redundancy();
    let theirs = region_redundancy(pool, prot);
    assert_eq!(ours.sections.len(), theirs.sections.len());
    for (a, b) in ours.sections.iter().zip(&theirs.sections) {
        assert_eq!(a.name, b.name);
        assert_eq!(a.bytes.len(), b.bytes.len(), "{}: length", a.name);
        let first = a.bytes.iter().zip(&b.bytes).position(|(x, y)| x != y);
        assert!(
            first.is_none(),
            "{}: first difference at byte {first:?}",
            a.name
        );
    }
    assert_eq!(engine.device_data(), &region_data(prot)[..], "data");
}

#[test]
fn same_stores_give_byte_identical_redundancy() {
    for (pages, k, batch) in [(20u64, 4u32, 1usize), (37, 3, 7), (16, 2, 50), (33, 32, 13)] {
        let mut rng = SplitMix64::new(pages * 100 + k as u64);
        let mut init = vec![0u8; pages as usize * PAGE];
        fill(&mut rng, &mut init);
        let stores = random_stores(&mut rng, pages * PAGE as u64, 300);
        let (engine, pool, prot) = run_both(pages, k, &init, &stores, batch);
        assert_identical(&engine, &pool, &prot);
        // The comparison is not empty: the stores changed the redundancy.
        let before = Engine::kavach_layout(pool.uuid(), pages, k, &init)
            .unwrap()
            .redundancy();
        for name in ["pagesums", "pageblocks", "paritysums", "linesums", "parity"] {
            assert_ne!(
                before.section(name),
                engine.redundancy().section(name),
                "{name} unchanged"
            );
        }
    }
}

#[test]
fn the_comparison_sees_a_different_pool_or_a_missed_writeback() {
    let (pages, k) = (12u64, 4u32);
    let mut rng = SplitMix64::new(9);
    let mut init = vec![0u8; pages as usize * PAGE];
    fill(&mut rng, &mut init);
    let stores = random_stores(&mut rng, pages * PAGE as u64, 50);
    let (engine, pool, prot) = run_both(pages, k, &init, &stores, 1);
    let theirs = region_redundancy(&pool, &prot);
    assert_eq!(engine.redundancy(), theirs);
    // Seeds bound to another pool UUID: every checksum differs, parity does not.
    let mut other = pool.uuid();
    other.0[0] ^= 1;
    let mut stranger = Engine::kavach_layout(other, pages, k, &init).unwrap();
    let mut data = init.clone();
    for (at, b) in &stores {
        data[*at as usize..*at as usize + b.len()].copy_from_slice(b);
    }
    for l in 0..pages * 64 {
        let a = l as usize * LINE;
        stranger
            .writeback(l * 64, &data[a..a + LINE].try_into().unwrap())
            .unwrap();
    }
    let s = stranger.redundancy();
    assert_ne!(s.section("pagesums"), theirs.section("pagesums"));
    assert_ne!(s.section("linesums"), theirs.section("linesums"));
    assert_eq!(s.section("parity"), theirs.section("parity"));
    // One store the engine never saw: the redundancy differs.
    prot.write(5, &[0xa5; 3]).unwrap();
    assert_ne!(engine.redundancy(), region_redundancy(&pool, &prot));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn random_stores_give_byte_identical_redundancy(
        pages in 1u64..10,
        k in 2u32..6,
        seed in any::<u64>(),
        n in 0usize..60,
        batch in 1usize..20,
    ) {
        let mut rng = SplitMix64::new(seed);
        let mut init = vec![0u8; pages as usize * PAGE];
        fill(&mut rng, &mut init);
        let stores = random_stores(&mut rng, pages * PAGE as u64, n);
        let (engine, pool, prot) = run_both(pages, k, &init, &stores, batch);
        prop_assert_eq!(engine.redundancy(), region_redundancy(&pool, &prot));
        prop_assert_eq!(engine.device_data(), &region_data(&prot)[..]);
    }
}

/// The stores as a trace: each store by one of `cores` cores, with loads of random lines in
/// between (fills), and now and then a flush of the line just stored.
fn as_trace(rng: &mut SplitMix64, stores: &[Store], bytes: u64, cores: u16) -> Vec<Event> {
    let mut ev = Vec::new();
    for (at, b) in stores {
        let core = rng.below(cores as u64) as u16;
        // Stores wider than a line are split the way a core issues them, line by line.
        let mut off = 0usize;
        while off < b.len() {
            let a = *at + off as u64;
            let n = (64 - (a % 64) as usize).min(b.len() - off);
            ev.push(Event::Store {
                core,
                addr: a,
                data: Some(b[off..off + n].to_vec()),
                len: n as u32,
            });
            off += n;
        }
        ev.push(Event::Load {
            core: rng.below(cores as u64) as u16,
            addr: rng.below(bytes / 64) * 64,
            len: 8,
        });
        if rng.chance(200_000) {
            ev.push(Event::Flush { core, addr: *at });
        }
    }
    ev
}

/// A machine small enough that lines, diffs and redundancy are evicted during the run.
fn small_machine() -> SimConfig {
    let mut cfg = SimConfig {
        cores: 4,
        ..SimConfig::default()
    };
    cfg.l1.bytes = 2 << 10;
    cfg.l1.ways = 2;
    cfg.l2.bytes = 4 << 10;
    cfg.l2.ways = 4;
    cfg.llc.bytes = 32 << 10;
    cfg.llc.ways = 8;
    cfg.llc_banks = 2;
    cfg
}

#[test]
fn the_simulated_tvarak_and_eager_mode_agree_byte_for_byte() {
    for (cfg, pages, k, seed, small) in [
        (small_machine(), 24u64, 4u32, 1u64, true),
        (small_machine(), 40, 3, 2, true),
        (SimConfig::default(), 20, 4, 3, false),
    ] {
        let mut rng = SplitMix64::new(seed);
        let mut init = vec![0u8; pages as usize * PAGE];
        fill(&mut rng, &mut init);
        let bytes = pages * PAGE as u64;
        let stores = random_stores(&mut rng, bytes, 400);
        let events = as_trace(&mut rng, &stores, bytes, cfg.cores);
        let (pool, prot) = eager_region(pages, k, &init);
        for (at, b) in &stores {
            prot.write(*at, b).unwrap();
        }
        let mut engine = Engine::kavach_layout(pool.uuid(), pages, k, &init).unwrap();
        let report = simulate(
            &cfg,
            Design::Tvarak,
            events.into_iter().map(Ok),
            Some(&mut engine),
        )
        .unwrap();
        assert!(report.counters.nvm_data_writes > 0);
        if small {
            // Lines went to NVM during the run, not only in the final drain.
            assert!(report.counters.diffs_evicted > 0, "{:?}", report.counters);
        }
        let st = engine.stats().clone();
        assert!(st.writebacks > 0 && st.fills > 0, "{st:?}");
        assert_eq!(st.detected, 0, "no fault, no detection: {st:?}");
        assert_eq!(st.observer_errors, 0, "{:?}", engine.first_error());
        assert_identical(&engine, &pool, &prot);
    }
}

#[test]
fn a_lost_writeback_in_a_simulated_run_is_found_on_the_next_fill() {
    use tvarak_sim::engine::Detected;
    use tvarak_sim::fault::Fault;
    let pages = 64u64;
    let init = vec![0u8; pages as usize * PAGE];
    let target = 5 * PAGE as u64 + 128;
    // Store to the target, stream over 192 KiB of other lines (the LLC holds 32 KiB, so the
    // target is written back), then load the target again.
    let mut events = vec![Event::Store {
        core: 0,
        addr: target,
        data: Some(vec![0x5a; 64]),
        len: 64,
    }];
    for l in 0..3 * 1024u64 {
        let addr = 16 * PAGE as u64 + l * 64;
        events.push(Event::Store {
            core: 1,
            addr,
            data: Some(vec![l as u8; 8]),
            len: 8,
        });
    }
    events.push(Event::Load {
        core: 0,
        addr: target,
        len: 8,
    });
    for (fault, found) in [(true, true), (false, false)] {
        let mut engine = Engine::kavach_layout(pmem::Uuid([4; 16]), pages, 4, &init).unwrap();
        if fault {
            engine.inject(Fault::LostWrite { line: target });
        }
        simulate(
            &small_machine(),
            Design::Tvarak,
            events.clone().into_iter().map(Ok),
            Some(&mut engine),
        )
        .unwrap();
        let hits: Vec<_> = engine
            .detections()
            .iter()
            .filter(|d| matches!(d, Detected::LineChecksum { line, .. } if line == &target))
            .collect();
        assert_eq!(!hits.is_empty(), found, "{:?}", engine.detections());
        assert_eq!(
            engine.detections().len(),
            hits.len(),
            "nothing else is found"
        );
        assert!(
            engine.armed().is_empty(),
            "the write happened during the run"
        );
        if fault {
            assert_eq!(engine.recover_line(target).unwrap(), [0x5a; 64]);
        }
    }
}
