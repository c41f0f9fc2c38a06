//! Records of `Sync` appends streamed whole: every line written with non-temporal stores and
//! persisted by `complete` (one fence), on a pool file in the ADR domain and on the simulator.
//! The payload reaches the ring exactly as copied, whatever pieces it came in (lines filled
//! across pieces, a piece ending inside the header's line, copies out of order, a payload only
//! partly copied), and the records read back after a reopen are the ones appended. Crashes of
//! streamed records are in `crash.rs` (its writers copy in pieces under the sync policy).

use std::time::Duration;

use log::{ForcePolicy, Log, LogFile, LogOptions};
use pmem::{SimConfig, SimMedium};

mod common;
use common::Dir;

const LENGTHS: [usize; 20] = [
    0, 1, 31, 32, 33, 63, 64, 65, 95, 96, 97, 127, 128, 129, 200, 1000, 1023, 1024, 3200, 5000,
];

fn payload(len: usize, salt: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + salt * 7 + 1) as u8).collect()
}

/// The ways a payload is copied into its reservation, as `(offset, len)` pieces in call order.
fn plans(len: usize) -> Vec<Vec<(usize, usize)>> {
    let mut plans = vec![vec![(0, len)]];
    for cut in [1, 7, 31, 32, 33, 64, 100] {
        if cut < len {
            plans.push(vec![(0, cut), (cut, len - cut)]);
            // Out of order: the tail first.
            plans.push(vec![(cut, len - cut), (0, cut)]);
        }
    }
    if len >= 3 {
        let (a, b) = (len / 3, 2 * len / 3);
        plans.push(vec![(0, a), (a, b - a), (b, len - b)]);
        plans.push(vec![(0, a), (b, len - b), (a, b - a)]);
    }
    plans
}

/// Append every length in every plan under `Sync`; returns what was appended, in LSN order.
fn append_all<M: pmem::Medium>(log: &Log<M>) -> Vec<Vec<u8>> {
    let mut appended = Vec::new();
    for len in LENGTHS {
        for (k, plan) in plans(len).into_iter().enumerate() {
            let p = payload(len, k);
            let mut r = log.reserve_for(len, ForcePolicy::Sync).expect("reserve");
            assert_eq!(
                r.is_nontemporal(),
                log.streams_sync_records() || len >= log.nontemporal_bytes_min(),
                "the path of a Sync record of {len} bytes"
            );
            for (at, n) in plan {
                r.copy(at, &p[at..at + n]).expect("copy");
            }
            let lsn = r.complete().expect("complete");
            assert!(log.commit(lsn, ForcePolicy::Sync).expect("force"));
            assert_eq!(log.durable_lsn(), lsn);
            appended.push(p);
        }
    }
    appended
}

fn read_all<M: pmem::Medium>(log: &Log<M>) -> Vec<Vec<u8>> {
    log.records()
        .map(|r| r.expect("a checked record").payload)
        .collect()
}

#[test]
fn streamed_records_on_a_pool_file_read_back_as_copied() {
    let dir = Dir::new("streamed", "file");
    let path = dir.0.join("p");
    let lf = LogFile::create(&path, 8 << 20, "log", None, Duration::ZERO).expect("create");
    let adr = pmem::Medium::domain(lf.log().medium()) == pmem::Domain::Adr;
    assert_eq!(lf.log().streams_sync_records(), adr);
    let appended = append_all(lf.log());
    assert_eq!(read_all(lf.log()), appended);
    drop(lf);
    let lf = LogFile::open(&path, "log", false, Duration::ZERO).expect("reopen");
    assert_eq!(read_all(lf.log()), appended);
}

#[test]
fn streamed_records_on_the_simulator_read_back_as_copied_after_a_crash() {
    let len = 8 << 20;
    let sim = SimMedium::new(len, SimConfig::default());
    let log = Log::create(&sim, 0, len, Duration::ZERO).expect("create");
    assert!(log.streams_sync_records());
    let appended = append_all(&log);
    drop(log);
    // Only what was persisted survives: every record was forced, so all of it.
    let crashed = SimMedium::from_image(sim.durable_image(), SimConfig::default());
    let opts = LogOptions {
        clean_shutdown: false,
        ..LogOptions::default()
    };
    let (log, _) = Log::open(&crashed, 0, len, &opts).expect("recover");
    assert_eq!(read_all(&log), appended);
}

#[test]
fn a_partly_copied_streamed_record_holds_what_the_ring_had_and_checks() {
    let dir = Dir::new("streamed", "partial");
    let lf =
        LogFile::create(&dir.0.join("p"), 4 << 20, "log", None, Duration::ZERO).expect("create");
    let log = lf.log();
    let p = payload(300, 3);
    let mut r = log.reserve_for(300, ForcePolicy::Sync).expect("reserve");
    r.copy(0, &p[..150]).expect("copy");
    let lsn = r.complete().expect("complete");
    log.commit(lsn, ForcePolicy::Sync).expect("force");
    let got = read_all(log);
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0][..150], &p[..150]);
    // A dropped streamed reservation leaves a void record that does not hold up later ones.
    let r = log.reserve_for(100, ForcePolicy::Sync).expect("reserve");
    drop(r);
    let a = log.append(&p[..77], ForcePolicy::Sync).expect("append");
    assert!(a.durable);
    let got = read_all(log);
    assert_eq!(got.len(), 2);
    assert_eq!(got[1], p[..77]);
}

#[test]
fn records_committed_later_stay_in_the_cache_path() {
    let dir = Dir::new("streamed", "freq");
    let lf =
        LogFile::create(&dir.0.join("p"), 4 << 20, "log", None, Duration::ZERO).expect("create");
    let log = lf.log();
    let small = log.nontemporal_bytes_min().min(4096) - 1;
    let r = log
        .reserve_for(small, ForcePolicy::Frequency(8))
        .expect("reserve");
    assert!(!r.is_nontemporal());
    drop(r);
    let r = log
        .reserve_for(small, ForcePolicy::Group(4))
        .expect("reserve");
    assert!(!r.is_nontemporal());
}
