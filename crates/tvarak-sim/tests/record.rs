//! Recording: a traced medium behaves like the medium it wraps, and its trace holds what was
//! done to it — replaying the trace's stores on zeros gives the bytes the medium holds, for
//! hand-made calls and for traced runs of the log and of the heap.

use pmem::{Medium, SimConfig, SimMedium};
use std::collections::HashSet;
use std::sync::Arc;
use tvarak_sim::record::{
    HeapParams, KvParams, LogParams, TracingMedium, apply_stores, heap_workload, kv_workload,
    log_workload,
};
use tvarak_sim::trace::{self, Event, TraceReader};

fn replayed(bytes: &[u8], len: usize) -> Vec<u8> {
    let r = TraceReader::new(bytes).unwrap();
    let mut img = vec![0u8; len];
    apply_stores(&mut img, r).unwrap();
    img
}

#[test]
fn every_call_is_forwarded_and_recorded_in_order() {
    let t = TracingMedium::new(
        SimMedium::new(8192, SimConfig::default()),
        Vec::new(),
        "calls",
        1,
        true,
    )
    .unwrap();
    t.write(100, &[1, 2, 3]);
    t.store_u64(256, 0x0102_0304_0506_0708);
    let mut b = [0u8; 3];
    t.read(100, &mut b);
    assert_eq!(b, [1, 2, 3]);
    assert_eq!(t.load_u64(256), 0x0102_0304_0506_0708);
    t.flush(60, 10).unwrap(); // lines 0 and 64
    t.fence().unwrap();
    t.write_nontemporal(1000, &[9; 100]); // lines 960, 1024, 1088
    t.persist(4096, 1).unwrap();
    t.begin_tx();
    t.commit_tx(&[(100, 3)]);
    t.inject(5000, &[7]).unwrap(); // behind every layer's back: not recorded
    let rec = t.finish().unwrap();
    let (h, events) = trace::from_bytes(&rec.writer).unwrap();
    assert_eq!(h.pm_bytes, 8192);
    assert_eq!(rec.events, events.len() as u64);
    let want = vec![
        Event::Store {
            core: 0,
            addr: 100,
            len: 3,
            data: Some(vec![1, 2, 3]),
        },
        Event::Store {
            core: 0,
            addr: 256,
            len: 8,
            data: Some(0x0102_0304_0506_0708u64.to_le_bytes().to_vec()),
        },
        Event::Load {
            core: 0,
            addr: 100,
            len: 3,
        },
        Event::Load {
            core: 0,
            addr: 256,
            len: 8,
        },
        Event::Flush { core: 0, addr: 0 },
        Event::Flush { core: 0, addr: 64 },
        Event::Fence { core: 0 },
        Event::Store {
            core: 0,
            addr: 1000,
            len: 100,
            data: Some(vec![9; 100]),
        },
        Event::Flush { core: 0, addr: 960 },
        Event::Flush {
            core: 0,
            addr: 1024,
        },
        Event::Flush {
            core: 0,
            addr: 1088,
        },
        Event::Flush {
            core: 0,
            addr: 4096,
        },
        Event::Fence { core: 0 },
        Event::TxBegin { core: 0 },
        Event::TxCommit {
            core: 0,
            ranges: vec![(100, 3)],
        },
    ];
    assert_eq!(events, want);
    // The injected byte is in the medium but not in the replay; everything else matches.
    let mut img = t.inner().working_image();
    assert_eq!(img[5000], 7);
    img[5000] = 0;
    assert_eq!(replayed(&rec.writer, 8192), img);
    // Finished: a second finish is refused, calls still reach the medium.
    assert!(t.finish().is_err());
    t.write(0, &[5]);
    assert_eq!(t.inner().working_image()[0], 5);
}

#[test]
fn committing_fences_commits_the_lines_flushed_before_each_fence() {
    let t = TracingMedium::new(
        SimMedium::new(1 << 16, SimConfig::default()),
        Vec::new(),
        "commits",
        1,
        false,
    )
    .unwrap()
    .committing_fences();
    t.fence().unwrap(); // nothing flushed: no commit
    t.write(100, &[1; 200]); // lines 64..=256
    t.flush(100, 200).unwrap();
    t.flush(4096, 1).unwrap();
    t.flush(128, 1).unwrap(); // again: merged
    t.fence().unwrap();
    t.persist(8192, 64).unwrap();
    t.write_nontemporal(12288, &[2; 128]);
    t.fence().unwrap();
    let rec = t.finish().unwrap();
    let (_, events) = trace::from_bytes(&rec.writer).unwrap();
    let commits: Vec<Vec<(u64, u32)>> = events
        .iter()
        .filter_map(|e| match e {
            Event::TxCommit { ranges, .. } => Some(ranges.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        commits,
        vec![
            vec![(64, 256), (4096, 64)],
            vec![(8192, 64)],
            vec![(12288, 128)],
        ]
    );
    // Each commit comes right after a fence.
    for (i, e) in events.iter().enumerate() {
        if matches!(e, Event::TxCommit { .. }) {
            assert!(matches!(events[i - 1], Event::Fence { .. }), "{i}");
        }
    }
}

#[test]
fn threads_get_their_own_cores_and_too_many_is_an_error() {
    let t = Arc::new(
        TracingMedium::new(
            SimMedium::new(4096, SimConfig::default()),
            Vec::new(),
            "threads",
            2,
            false,
        )
        .unwrap(),
    );
    t.write(0, &[1]);
    let t2 = t.clone();
    std::thread::spawn(move || t2.write(64, &[2]))
        .join()
        .unwrap();
    // A third thread does not fit in a two-core trace: recording stops and finish says why.
    let t3 = t.clone();
    std::thread::spawn(move || t3.fence().unwrap())
        .join()
        .unwrap();
    let e = t
        .finish()
        .expect_err("a third thread was recorded in a two-core trace");
    assert!(e.to_string().contains("threads"), "{e}");

    let t = Arc::new(
        TracingMedium::new(
            SimMedium::new(4096, SimConfig::default()),
            Vec::new(),
            "threads",
            2,
            false,
        )
        .unwrap(),
    );
    t.write(0, &[1]);
    let t2 = t.clone();
    std::thread::spawn(move || t2.write(64, &[2]))
        .join()
        .unwrap();
    let (_, events) = trace::from_bytes(&t.finish().unwrap().writer).unwrap();
    let cores: Vec<u16> = events.iter().map(Event::core).collect();
    assert_eq!(cores, vec![0, 1]);
    assert!(matches!(events[0], Event::Store { data: None, .. }));

    // Folding: the third thread shares core 0.
    let t = Arc::new(
        TracingMedium::new(
            SimMedium::new(4096, SimConfig::default()),
            Vec::new(),
            "fold",
            2,
            false,
        )
        .unwrap()
        .folding_threads(),
    );
    for k in 0..3u8 {
        let t2 = t.clone();
        std::thread::spawn(move || t2.write(64 * k as usize, &[k]))
            .join()
            .unwrap();
    }
    let (_, events) = trace::from_bytes(&t.finish().unwrap().writer).unwrap();
    let cores: Vec<u16> = events.iter().map(Event::core).collect();
    assert_eq!(cores, vec![0, 1, 0]);
}

#[test]
fn a_traced_log_run_replays_to_the_bytes_the_medium_holds() {
    let p = LogParams {
        threads: 3,
        records_per_thread: 150,
        payload: 100,
        policy: log::ForcePolicy::Sync,
        with_data: true,
        seed: 4,
        work_mhz: Some(2270),
    };
    let (rec, image) = log_workload(&p, Vec::new()).unwrap();
    assert_eq!(replayed(&rec.writer, image.len()), image);
    let (h, events) = trace::from_bytes(&rec.writer).unwrap();
    assert_eq!(h.cores, 4);
    let cores: HashSet<u16> = events.iter().map(Event::core).collect();
    assert!(
        cores.len() >= 2 && cores.iter().all(|&c| c < 4),
        "{cores:?}"
    );
    let fences = events
        .iter()
        .filter(|e| matches!(e, Event::Fence { .. }))
        .count();
    // Forced at every record, but concurrent appenders share fences (the forcer fences once
    // for all records completed so far): some fences, no more than one per record and a few.
    assert!(fences > 0 && fences < 3 * 150 + 20, "{fences} fences");
    // Measured work: the threads compute between their calls, and a core's first event is
    // never a Work (there is no earlier call to measure from).
    let works = events
        .iter()
        .filter(|e| matches!(e, Event::Work { cycles, .. } if *cycles > 0))
        .count();
    assert!(works > 0, "no work recorded");
    for c in &cores {
        let first = events.iter().find(|e| e.core() == *c).unwrap();
        assert!(!matches!(first, Event::Work { .. }), "core {c}: {first:?}");
    }
    // Each fence that ended flushes is followed by the commit of the flushed lines.
    let commits = events
        .iter()
        .filter(|e| matches!(e, Event::TxCommit { .. }))
        .count();
    assert!(
        commits > 0 && commits <= fences,
        "{commits} commits, {fences} fences"
    );
    // Every payload's first 8 bytes were stored somewhere.
    let stores: Vec<&Vec<u8>> = events
        .iter()
        .filter_map(|e| match e {
            Event::Store { data: Some(d), .. } => Some(d),
            _ => None,
        })
        .collect();
    assert!(stores.iter().any(|d| d.len() >= 100));
}

#[test]
fn large_log_records_go_non_temporal_and_still_replay() {
    let p = LogParams {
        threads: 1,
        records_per_thread: 20,
        payload: log::NONTEMPORAL_BYTES_MIN as u32 * 2,
        policy: log::ForcePolicy::Frequency(4),
        with_data: true,
        seed: 9,
        work_mhz: None,
    };
    let (rec, image) = log_workload(&p, Vec::new()).unwrap();
    assert_eq!(replayed(&rec.writer, image.len()), image);
}

#[test]
fn a_traced_heap_run_replays_and_brackets_its_transactions() {
    let p = HeapParams {
        threads: 2,
        ops_per_thread: 120,
        buckets: 16,
        keys: 80,
        read_percent: 30,
        value: 24,
        with_data: true,
        seed: 3,
        work_mhz: None,
    };
    let (rec, image) = heap_workload(&p, Vec::new()).unwrap();
    assert_eq!(replayed(&rec.writer, image.len()), image);
    let (h, events) = trace::from_bytes(&rec.writer).unwrap();
    // Per core, transactions alternate begin, commit; worker cores commit something each time.
    let mut open = vec![false; h.cores as usize];
    let mut commits = 0;
    for e in &events {
        match e {
            Event::TxBegin { core } => {
                assert!(!open[*core as usize], "nested begin on core {core}");
                open[*core as usize] = true;
            }
            Event::TxCommit { core, ranges } => {
                assert!(open[*core as usize], "commit without begin on core {core}");
                open[*core as usize] = false;
                assert!(!ranges.is_empty());
                assert!(ranges.iter().all(|&(a, l)| a + l as u64 <= h.pm_bytes));
                commits += 1;
            }
            _ => {}
        }
    }
    assert!(open.iter().all(|o| !o));
    // About 70% of 240 operations write (each one transaction), plus the root's transaction.
    assert!(commits > 120 && commits <= 241, "{commits} commits");
}

#[test]
fn address_only_recordings_are_smaller_and_have_no_bytes() {
    let mut p = LogParams::small();
    p.threads = 1;
    p.records_per_thread = 100;
    let (with, _) = log_workload(&p, Vec::new()).unwrap();
    p.with_data = false;
    let (without, _) = log_workload(&p, Vec::new()).unwrap();
    assert!(without.writer.len() < with.writer.len());
    let (h, events) = trace::from_bytes(&without.writer).unwrap();
    assert!(!h.with_data);
    // One appender, forced at every record: at least one fence per record.
    let fences = events
        .iter()
        .filter(|e| matches!(e, Event::Fence { .. }))
        .count();
    assert!(fences >= 100, "{fences} fences");
    assert!(
        events
            .iter()
            .all(|e| !matches!(e, Event::Store { data: Some(_), .. }))
    );
}

#[test]
fn a_traced_kv_run_replays_to_a_store_that_opens_with_its_keys() {
    let p = KvParams {
        threads: 2,
        records: 60,
        ops_per_thread: 80,
        read_percent: 50,
        value: 40,
        with_data: true,
        seed: 2,
        work_mhz: None,
    };
    let (rec, image) = kv_workload(&p, Vec::new()).unwrap();
    let replay = replayed(&rec.writer, image.len());
    assert_eq!(replay, image);
    // The replayed bytes are a whole store: it opens and holds every loaded key.
    let sim = Arc::new(SimMedium::from_image(replay, SimConfig::default()));
    let pool = pmem::Pool::open_medium(sim, &pmem::OpenOptions::default()).unwrap();
    let store = dstore::Store::open(
        pool,
        dstore::Config {
            background: false,
            ..dstore::Config::default()
        },
    )
    .unwrap();
    for t in 0..2 {
        for i in [0u64, 29] {
            let k = format!("user{t:02}-{i:010}");
            let v = store.get(k.as_bytes()).unwrap();
            assert_eq!(v.map(|v| v.len()), Some(40), "{k}");
        }
    }
    assert_eq!(store.get(b"user02-0000000000").unwrap(), None);
}

/// The committed sample (`tests/data/heap-small.kvtrace`, written by `cargo run -p
/// kavach-tvarak-sim --example make_sample`: 2 threads, a hash map of 8 buckets each, keys
/// below 30): it reads, and its stores rebuild a heap that opens and holds two well-formed maps.
#[test]
fn the_committed_sample_replays_to_a_heap_holding_its_maps() {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/heap-small.kvtrace");
    let (h, events) = trace::read_file(std::path::Path::new(p)).unwrap();
    assert!(h.name.starts_with("heap-hashmap-2x40"), "{}", h.name);
    assert!(h.with_data && h.cores == 3);
    let kinds: HashSet<std::mem::Discriminant<Event>> =
        events.iter().map(std::mem::discriminant).collect();
    assert_eq!(kinds.len(), 6, "every kind of event appears");
    let mut img = vec![0u8; h.pm_bytes as usize];
    apply_stores(&mut img, events.into_iter().map(Ok)).unwrap();
    let sim = Arc::new(SimMedium::from_image(img, SimConfig::default()));
    let raw = heap::RawHeap::open(sim, 0, h.pm_bytes).unwrap();
    let (root, size) = raw.root_line();
    assert_eq!(size, 2 * 8 * 8);
    let mut keys = 0;
    for b in 0..16u64 {
        let mut w = [0u8; 8];
        raw.read(root + 8 * b, &mut w).unwrap();
        let mut at = u64::from_le_bytes(w);
        let mut seen = HashSet::new();
        while at != 0 {
            let mut kn = [0u8; 16];
            raw.read(at, &mut kn).unwrap();
            let key = u64::from_le_bytes(kn[..8].try_into().unwrap());
            assert!(key < 30 && key % 8 == b % 8, "key {key} in bucket {b}");
            assert!(seen.insert(key), "key {key} twice in bucket {b}");
            at = u64::from_le_bytes(kn[8..].try_into().unwrap());
            keys += 1;
        }
    }
    assert!(keys > 10 && keys <= 60, "{keys} keys");
}
