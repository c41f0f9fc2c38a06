//! The protocol end to end over the in-process transport: replicate, lose copies, recover.

use std::sync::{Arc, Mutex};

use log::ForcePolicy;
use pmem::{SimConfig, SimMedium, Uuid};
use replication::mem::{MediumHost, MemPeers};
use replication::{Copy, FlushOrder, Quorum, RecoverOptions, Replicator, recover};

const LEN: usize = 256 << 10;

type M = Arc<SimMedium>;

fn medium(len: usize) -> M {
    Arc::new(SimMedium::new(len, SimConfig::default()))
}

fn hosts(n: usize) -> Vec<Arc<Mutex<MediumHost<M>>>> {
    (0..n)
        .map(|_| Arc::new(Mutex::new(MediumHost::new(medium))))
        .collect()
}

fn payloads<X: pmem::Medium>(log: &log::Log<X>) -> Vec<Vec<u8>> {
    log.records().map(|r| r.expect("record").payload).collect()
}

#[test]
fn replicate_then_rebuild_the_primary_from_a_backup() {
    let hs = hosts(2);
    let mut peers = MemPeers::new(hs.clone());
    let mut local = Copy::create(medium(LEN), 0, LEN, Uuid([3; 16])).expect("create");
    let q = Quorum::new(2, 1).expect("quorum");
    let (log, rec) =
        recover(&mut local, &mut peers, q, &RecoverOptions::default()).expect("recover");
    assert_eq!(rec.epoch, 2);
    assert_eq!(rec.live, vec![0, 1]);
    let rep = Arc::new(Replicator::new(peers, q, FlushOrder::ReplicateFirst, &rec));
    log.set_mirror(Some(rep.clone()));
    for i in 0..50u32 {
        log.append(
            &i.to_le_bytes().repeat(i as usize % 7 + 1),
            ForcePolicy::Sync,
        )
        .expect("append");
    }
    let want = payloads(&log);
    assert_eq!(want.len(), 50);
    let st = rep.stats();
    assert!(
        st.backups.iter().all(|b| b.live && b.acked_lsn > 0),
        "{st:?}"
    );
    drop(log);
    // Lose the primary's copy entirely; a new primary rebuilds it from the backups.
    let mut fresh = Copy::new(medium(LEN), 0, LEN);
    let mut peers = MemPeers::new(hs.clone());
    let (log2, rec2) =
        recover(&mut fresh, &mut peers, q, &RecoverOptions::default()).expect("recover");
    assert!(rec2.rebuilt_local, "{rec2:?}");
    assert_eq!(rec2.epoch, 3);
    assert_eq!(payloads(&log2), want);
    // Every backup holds the same records.
    for h in &hs {
        let mut h = h.lock().unwrap();
        let c = replication::Host::copy(&mut *h).expect("copy");
        let (l, _) = log::Log::open(
            c.medium(),
            0,
            LEN,
            &log::LogOptions {
                read_only: true,
                ..Default::default()
            },
        )
        .expect("open");
        assert_eq!(payloads(&l), want);
    }
}

/// A force larger than one frame (20 MiB of records; a frame carries at most 16 MiB) goes out
/// as several write requests, and every backup holds it.
#[test]
fn a_force_larger_than_a_frame_is_split() {
    const BIG: usize = 48 << 20;
    let hs = (0..2)
        .map(|_| Arc::new(Mutex::new(MediumHost::new(medium))))
        .collect::<Vec<_>>();
    let mut peers = MemPeers::new(hs.clone());
    let mut local = Copy::create(medium(BIG), 0, BIG, Uuid([5; 16])).expect("create");
    let q = Quorum::new(2, 2).expect("quorum");
    let (log, rec) =
        recover(&mut local, &mut peers, q, &RecoverOptions::default()).expect("recover");
    let rep = Arc::new(Replicator::new(peers, q, FlushOrder::Parallel, &rec));
    log.set_mirror(Some(rep.clone()));
    let big: Vec<u8> = (0..20 << 20).map(|i: u32| (i % 251) as u8).collect();
    assert!(big.len() > replication::proto::FRAME_BODY_MAX);
    log.append(&big, ForcePolicy::Sync).expect("append 20 MiB");
    log.append(b"after", ForcePolicy::Sync).expect("append");
    let st = rep.stats();
    assert!(st.failed.is_none(), "{st:?}");
    assert!(st.backups.iter().all(|b| b.live), "{st:?}");
    let want = payloads(&log);
    assert_eq!(want.len(), 2);
    for h in &hs {
        let mut h = h.lock().unwrap();
        let c = replication::Host::copy(&mut *h).expect("copy");
        let (l, _) = log::Log::open(
            c.medium(),
            0,
            BIG,
            &log::LogOptions {
                read_only: true,
                ..Default::default()
            },
        )
        .expect("open");
        assert_eq!(payloads(&l), want);
    }
}
