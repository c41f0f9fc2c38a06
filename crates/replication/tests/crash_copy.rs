//! Crash tests of one copy at a time, on the persistence simulator: each of the copy's
//! persisting operations (`Copy::create`, `promise`, `persist_live`, `zero`) and the primary's
//! rebuild of its own copy from a backup (inside `recover`) is run from a known image, crashed
//! just before every fence (every crash image the simulator enumerates there) and once more
//! after it returns, and each image is reopened and held to what the operation promises:
//!
//! - `promise(e)`: once a crash image carries the promise of `e`, it also holds everything the
//!   promise's answer described (the live log made durable first); after it returns, every
//!   image carries it.
//! - `persist_live`: after it returns, every image holds the descriptors, superlines and live
//!   ring the CPU saw, even when an earlier process left all of them unpersisted.
//! - `zero`: after it acknowledges, the range is zero in every image; before, each word is the
//!   old contents or zero.
//! - `create`: every image is either no log or the new, empty log with no promise; after it
//!   returns, always the latter.
//! - the rebuild of the local copy: every image stays readable (a copy that cannot be read
//!   forgets its promises); one that holds the source's epoch holds exactly the source's
//!   records; once recovery has opened the rebuilt copy (its jump record is durable) the ring
//!   outside the live range is zero, as the rebuild made it; after `recover` returns, every
//!   image is the copy the CPU sees.
//!
//! The whole-cluster simulation (`sim.rs`) misses most of these: a write one copy lost is made
//! good by the next recovery from the other copies. Each test prints how many images it checked.

use std::sync::{Arc, Mutex};

use log::{ForcePolicy, Log, LogOptions};
use pmem::sim::crash_at_every_fence_with;
use pmem::{Medium, SimConfig, SimMedium, Uuid};
use replication::copy::{FENCE_BYTES, FENCE_COPY_OFFSETS};
use replication::mem::{MediumHost, MemPeers};
use replication::{Copy, CopyInfo, Fence, Quorum, RecoverOptions, Response, recover};

/// Ring bytes: the smallest the log allows, so that a few hundred records wrap it.
const RING: usize = 16 << 10;
/// Bytes of the log region (the whole medium).
const LEN: usize = log::layout::RING_OFFSET + RING;
const RING_OFFSET: usize = log::layout::RING_OFFSET;
/// The log every copy here holds.
const UUID: Uuid = Uuid([0x5a; 16]);
/// Crash images per crash point: all outcomes of the open lines when at most this many, else
/// a covering set (every pair of lines in every kept/dropped combination) plus samples.
const IMAGES: usize = 64;

fn cfg() -> SimConfig {
    SimConfig {
        images_per_crash: IMAGES,
        ..SimConfig::default()
    }
}

/// A 24-byte payload (one 64-byte ring slot with its header), tagged by history.
fn payload(tag: u8, n: u64) -> Vec<u8> {
    let mut v = vec![tag; 24];
    v[8..16].copy_from_slice(&n.to_le_bytes());
    v
}

fn writable() -> LogOptions {
    LogOptions {
        clean_shutdown: false,
        ..LogOptions::default()
    }
}

fn read_only() -> LogOptions {
    LogOptions {
        read_only: true,
        clean_shutdown: false,
        ..LogOptions::default()
    }
}

/// A copy as a reader finds it in an image.
#[derive(Debug, Clone, PartialEq)]
struct View {
    uuid: Option<Uuid>,
    promised: u64,
    info: Option<CopyInfo>,
    /// (LSN, payload) of every data record the walk accepts.
    records: Vec<(u64, Vec<u8>)>,
}

fn view(img: &[u8]) -> View {
    let m = SimMedium::from_image(img.to_vec(), SimConfig::default());
    let c = Copy::new(&m, 0, LEN);
    let records = match Log::open(&m, 0, LEN, &read_only()) {
        Ok((log, _)) => log
            .records()
            .map_while(|r| r.ok())
            .map(|r| (r.lsn, r.payload))
            .collect(),
        Err(_) => Vec::new(),
    };
    View {
        uuid: c.uuid(),
        promised: c.promised(),
        info: c.info(),
        records,
    }
}

/// Record a promise of `promised` in the copy's fence the way `promise` lays it out, written
/// directly (so a broken `promise` cannot spoil the images the tests start from).
fn set_fence(m: &SimMedium, promised: u64) {
    let f = Fence {
        sequence: 1,
        promised,
    };
    let at = FENCE_COPY_OFFSETS[(f.sequence % 2) as usize];
    m.write(at, &f.encode(&UUID));
    m.persist(at, FENCE_BYTES).expect("persist");
}

/// LSNs and history tags of records, for messages.
fn summary(r: &[(u64, Vec<u8>)]) -> String {
    let v: Vec<String> = r
        .iter()
        .map(|(lsn, p)| format!("{lsn}:{}{}", p[0] as char, p[8]))
        .collect();
    format!("[{}]", v.join(" "))
}

/// The durable image of a medium whose every store was persisted (checked).
fn settled(m: &SimMedium) -> Vec<u8> {
    assert!(
        m.unpersisted().is_empty(),
        "setup: the image should be fully persisted"
    );
    m.durable_image()
}

/// Two states of one copy: `old`, a log with 5 records that promised epoch 2, and `new`, the
/// same log after 300 more records with cleanups, so its head moved (the superlines changed)
/// and its live range wraps around the end of the ring.
fn old_and_new() -> (Vec<u8>, Vec<u8>) {
    let m = SimMedium::new(LEN, SimConfig::default());
    Copy::create(&m, 0, LEN, UUID).expect("create");
    let (log, _) = Log::open(&m, 0, LEN, &writable()).expect("open");
    log.set_epoch(2).expect("epoch");
    let mut lsns = Vec::new();
    for n in 0..5 {
        lsns.push(
            log.append(&payload(b'A', n), ForcePolicy::Sync)
                .expect("append")
                .lsn,
        );
    }
    set_fence(&m, 2);
    let old = settled(&m);
    for n in 5..305 {
        lsns.push(
            log.append(&payload(b'A', n), ForcePolicy::Sync)
                .expect("append")
                .lsn,
        );
        if lsns.len() > 100 {
            log.cleanup(lsns[lsns.len() - 101]).expect("cleanup");
        }
    }
    drop(log);
    let new = settled(&m);
    let v = view(&new);
    let info = v.info.expect("setup: the new state is a readable log");
    assert!(
        info.head + info.used > info.ring_bytes,
        "setup: the live range should wrap (head {}, used {})",
        info.head,
        info.used
    );
    assert_eq!(v.records.len(), 100, "setup: 100 live records");
    assert_eq!(v.promised, 2);
    (old, new)
}

/// The image `new` left in the CPU's caches by an earlier process over a durable `old`: every
/// line that differs is stored to and not written back.
fn unpersisted_over(m: &SimMedium, new: &[u8]) {
    m.write(0, new);
}

fn without_promise(i: CopyInfo) -> CopyInfo {
    CopyInfo { promised: 0, ..i }
}

#[test]
fn promise_carries_the_live_log_in_every_image() {
    let (old, new) = old_and_new();
    let want = view(&new);
    let want_info = without_promise(want.info.expect("readable"));
    let epoch = 3;
    let op = |m: &SimMedium| {
        unpersisted_over(m, &new);
        let mut c = Copy::new(m, 0, LEN);
        let _ = c.promise(epoch);
    };
    let mut images = 0u64;
    let mut promised_images = 0u64;
    let fences = crash_at_every_fence_with(cfg(), &old, op, |img, fence| {
        images += 1;
        let v = view(&img);
        // Before the promise is durable the image may be any mix of the two states (the earlier
        // process's stores were never persisted); once it carries the promise, the answer the
        // promise gave (the live log) must be durable with it.
        if v.promised >= epoch {
            promised_images += 1;
            assert_eq!(v.promised, epoch, "fence {fence}");
            assert_eq!(
                v.info.map(without_promise),
                Some(want_info),
                "fence {fence}: the image carries the promise of epoch {epoch} without the \
                 live log it described"
            );
            assert!(
                v.records == want.records,
                "fence {fence}: records {}",
                summary(&v.records)
            );
        }
    });
    assert!(fences >= 1, "no crash point in promise");
    // Run to the end, then fail the power.
    let m = SimMedium::from_image(old.clone(), cfg());
    unpersisted_over(&m, &new);
    let mut c = Copy::new(&m, 0, LEN);
    let info = c.promise(epoch).expect("promise").expect("info");
    assert_eq!(without_promise(info), want_info);
    assert_eq!(info.promised, epoch);
    let after = m.power_fail_state().images();
    for img in &after {
        let v = view(img);
        assert_eq!(
            v.promised, epoch,
            "after promise returned: an image lost the promise"
        );
        assert_eq!(v.info.map(without_promise), Some(want_info));
        assert!(
            v.records == want.records,
            "after promise returned: records {}",
            summary(&v.records)
        );
    }
    println!(
        "promise: crash images checked: {} at {fences} fences ({promised_images} carrying the \
         promise), {} after it returned",
        images,
        after.len()
    );
}

#[test]
fn persist_live_makes_what_the_cpu_sees_durable() {
    let (old, new) = old_and_new();
    let want = view(&new);
    let m = SimMedium::from_image(old.clone(), cfg());
    unpersisted_over(&m, &new);
    let c = Copy::new(&m, 0, LEN);
    let walked = c.persist_live().expect("persist_live");
    let (_, rec) = walked.expect("a readable log");
    assert_eq!(rec.ring_bytes_used, want.info.expect("readable").used);
    let after = m.power_fail_state().images();
    assert!(
        after.len() > 1,
        "the first page and the fence area stay open"
    );
    for img in &after {
        let v = view(img);
        assert_eq!(
            v.info, want.info,
            "after persist_live returned: an image lost part of the live log"
        );
        assert!(
            v.records == want.records,
            "after persist_live returned: records {}",
            summary(&v.records)
        );
        assert_eq!((v.uuid, v.promised), (want.uuid, want.promised));
    }
    println!(
        "persist_live: crash images checked: {} after it returned",
        after.len()
    );
}

#[test]
fn zero_leaves_no_stale_bytes() {
    let (_, new) = old_and_new();
    let info = view(&new).info.expect("readable");
    // Zero the whole ring (a full repair's last step does this beyond the live range).
    let (offset, len) = (RING_OFFSET, RING);
    let op = |m: &SimMedium| {
        let mut c = Copy::new(m, 0, LEN);
        let r = c.zero(info.promised, offset as u64, len as u64);
        assert!(
            matches!(r, Response::Ack | Response::Error(_)),
            "zero answered {r:?}"
        );
    };
    let mut images = 0u64;
    let fences = crash_at_every_fence_with(cfg(), &new, op, |img, fence| {
        images += 1;
        for w in (offset..offset + len).step_by(8) {
            let word = &img[w..w + 8];
            assert!(
                word == &new[w..w + 8] || word == [0u8; 8],
                "fence {fence}: word at {w} is neither the old contents nor zero"
            );
        }
    });
    let m = SimMedium::from_image(new.clone(), cfg());
    let mut c = Copy::new(&m, 0, LEN);
    assert_eq!(
        c.zero(info.promised, offset as u64, len as u64),
        Response::Ack
    );
    let after = m.power_fail_state().images();
    for img in &after {
        if let Some(w) = (offset..offset + len).find(|&b| img[b] != 0) {
            panic!("after zero was acknowledged: byte {w} still holds old contents");
        }
        assert!(view(img).records.is_empty());
    }
    println!(
        "zero: crash images checked: {images} at {fences} fences, {} after it returned",
        after.len()
    );
}

#[test]
fn create_over_an_unreadable_copy_forgets_its_old_promise() {
    // The copy promised epoch 7, then its descriptors were lost: it is no log. `create` (what a
    // backup does on `Init`) must not bring the old promise back under the same UUID.
    let (_, new) = old_and_new();
    let m = SimMedium::from_image(new, SimConfig::default());
    set_fence(&m, 7);
    assert_eq!(Copy::new(&m, 0, LEN).promised(), 7, "setup: promised 7");
    m.write(0, &[0u8; 128]);
    m.persist(0, 128).expect("persist");
    let start = settled(&m);
    assert_eq!(view(&start).uuid, None, "setup: no readable log");
    let op = |m: &SimMedium| {
        let _ = Copy::create(m, 0, LEN, UUID);
    };
    let check = |v: &View, when: &str| {
        if v.uuid.is_some() {
            assert_eq!(v.uuid, Some(UUID), "{when}");
            assert_eq!(v.promised, 0, "{when}: an old promise came back");
            assert!(v.records.is_empty(), "{when}: old records came back");
            let info = v.info.expect("readable");
            assert_eq!(info.epoch, log::layout::NEW_LOG_EPOCH, "{when}");
            assert_eq!(info.used, 0, "{when}");
        }
    };
    let mut images = 0u64;
    let fences = crash_at_every_fence_with(cfg(), &start, op, |img, fence| {
        images += 1;
        check(&view(&img), &format!("fence {fence}"));
    });
    let m = SimMedium::from_image(start.clone(), cfg());
    let c = Copy::create(&m, 0, LEN, UUID).expect("create");
    assert_eq!(c.promised(), 0);
    let after = m.power_fail_state().images();
    for img in &after {
        let v = view(img);
        assert_eq!(v.uuid, Some(UUID), "after create returned: no log");
        check(&v, "after create returned");
    }
    println!(
        "create: crash images checked: {images} at {fences} fences, {} after it returned",
        after.len()
    );
}

/// Histories for a rebuild: a common prefix (epoch 2, records A0..A9), then
/// - `local`: the epoch-2 primary's copy, with 20 more records B0..B19 no backup holds;
/// - `source`: a backup that became primary of epoch 3 from the prefix (its opening jump
///   record, then C0..C11) and cleaned up C0..C2, so its head moved past the prefix; it
///   promised 3.
fn histories() -> (Vec<u8>, Vec<u8>) {
    let m = SimMedium::new(LEN, SimConfig::default());
    Copy::create(&m, 0, LEN, UUID).expect("create");
    let (log, _) = Log::open(&m, 0, LEN, &writable()).expect("open");
    log.set_epoch(2).expect("epoch");
    let mut lsns = Vec::new();
    for n in 0..10 {
        lsns.push(
            log.append(&payload(b'A', n), ForcePolicy::Sync)
                .expect("append")
                .lsn,
        );
    }
    set_fence(&m, 2);
    let prefix = settled(&m);
    for n in 0..20 {
        log.append(&payload(b'B', n), ForcePolicy::Sync)
            .expect("append");
    }
    drop(log);
    let local = settled(&m);

    let s = SimMedium::from_image(prefix, SimConfig::default());
    let (log, _) = Log::open(&s, 0, LEN, &writable()).expect("open");
    log.set_epoch(3).expect("epoch");
    for n in 0..12 {
        lsns.push(
            log.append(&payload(b'C', n), ForcePolicy::Sync)
                .expect("append")
                .lsn,
        );
    }
    for &l in &lsns[..13] {
        log.cleanup(l).expect("cleanup");
    }
    drop(log);
    set_fence(&s, 3);
    let source = settled(&s);
    (local, source)
}

/// Recover with the local copy on `m` and one backup holding `source` (N = 1, W = 1): the
/// source's epoch is higher, so the local copy is rebuilt from it.
fn recover_from(m: &SimMedium, source: &[u8]) -> replication::Result<replication::Recovered> {
    let backup: Arc<SimMedium> =
        Arc::new(SimMedium::from_image(source.to_vec(), SimConfig::default()));
    let host = MediumHost::with_copy(Copy::new(backup, 0, LEN), |len| {
        Arc::new(SimMedium::new(len, SimConfig::default()))
    });
    let mut peers = MemPeers::new(vec![Arc::new(Mutex::new(host))]);
    let mut local = Copy::new(m, 0, LEN);
    let q = Quorum::new(1, 1).expect("quorum");
    recover(&mut local, &mut peers, q, &RecoverOptions::default()).map(|(_, r)| r)
}

/// Ring bytes (region offsets) outside `[head, head + used)` that are not zero.
fn stale_outside(img: &[u8], info: &CopyInfo) -> Option<usize> {
    let ring = info.ring_bytes as usize;
    (0..ring)
        .filter(|&o| (o + ring - info.head as usize) % ring >= info.used as usize)
        .map(|o| RING_OFFSET + o)
        .find(|&at| img[at] != 0)
}

#[test]
fn rebuild_of_the_local_copy_is_whole_or_not_taken() {
    let (local, source) = histories();
    let lv = view(&local);
    let sv = view(&source);
    let (li, si) = (lv.info.expect("local"), sv.info.expect("source"));
    assert_eq!((li.epoch, si.epoch), (2, 3), "setup: epochs");
    assert!(
        lv.records.len() == 30 && sv.records.len() == 9,
        "setup: {} local and {} source records",
        lv.records.len(),
        sv.records.len()
    );
    let epoch = si.promised.max(si.epoch) + 1;
    let mut images = 0u64;
    let mut source_epoch_images = 0u64;
    let mut opened_images = 0u64;
    let fences = crash_at_every_fence_with(
        cfg(),
        &local,
        |m| {
            let _ = recover_from(m, &source);
        },
        |img, fence| {
            images += 1;
            let v = view(&img);
            // Readable always: a copy that cannot be read forgets what it promised.
            let info = v
                .info
                .unwrap_or_else(|| panic!("fence {fence}: the local copy became unreadable"));
            assert!(
                v.promised >= li.promised,
                "fence {fence}: a promise was lost"
            );
            if info.epoch < si.epoch {
                // Not switched yet: the local copy's own superline (whatever part of the ring
                // was fetched under it).
                assert_eq!(info.epoch, li.epoch, "fence {fence}");
                return;
            }
            source_epoch_images += 1;
            // Switched: it holds the source's history, all of it and nothing else, and it
            // promised the new epoch first.
            assert_eq!(
                v.promised, epoch,
                "fence {fence}: the source's epoch before the promise"
            );
            assert_eq!(
                (info.head, info.start_lsn),
                (si.head, si.start_lsn),
                "fence {fence}: the source's epoch with another head"
            );
            assert!(
                v.records == sv.records,
                "fence {fence}: the source's epoch over other records: {} (source {})",
                summary(&v.records),
                summary(&sv.records)
            );
            if info.used > si.used {
                // Recovery opened it (its jump record at the source's tail is durable): the
                // rebuild must be complete, the rest of the ring zeroed.
                opened_images += 1;
                if let Some(at) = stale_outside(&img, &info) {
                    panic!(
                        "fence {fence}: the rebuilt copy was opened with old bytes at {at} \
                         outside its live range"
                    );
                }
            }
        },
    );
    assert!(source_epoch_images > 0 && opened_images > 0);
    let m = SimMedium::from_image(local.clone(), cfg());
    let rec = recover_from(&m, &source).expect("recover");
    assert!(rec.rebuilt_local, "the local copy should have been rebuilt");
    assert_eq!(rec.epoch, epoch);
    let working = m.working_image();
    let wv = view(&working);
    assert!(wv.records == sv.records, "{}", summary(&wv.records));
    assert_eq!(wv.promised, epoch);
    let after = m.power_fail_state().images();
    for img in &after {
        if let Some(at) = (0..LEN).find(|&b| img[b] != working[b]) {
            panic!(
                "after recover returned: byte {at} of an image differs from the copy as the \
                 CPU sees it"
            );
        }
    }
    println!(
        "rebuild: crash images checked: {images} at {fences} fences ({source_epoch_images} at \
         the source's epoch, {opened_images} opened), {} after recover returned",
        after.len()
    );
}
