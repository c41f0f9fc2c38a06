//! Targeted crash tests for persistence steps of the integrity engine that the broader crash
//! campaigns did not pin down. Each drives one operation on the persistence simulator, cuts the
//! power before every fence it issues and once after it returns, and checks every crash image
//! the simulator offers at each point against the promise the code makes:
//!
//! - `create` over data that is not zero: an image whose header says the region is current
//!   (clean, verified) holds current redundancy, and every image recovers without damage;
//! - `open` over a region that still holds an earlier version's shadow batch record: once open
//!   returns, no image keeps that record (an earlier version must not replay it);
//! - an eager open that rebuilds the line checksums, then a clean close: once the close
//!   returns, every image has line checksums that match the data, and no image anywhere shows
//!   damage;
//! - an eager read that repairs a damaged page from parity: once the read returns, every image
//!   holds the repaired page.

mod support;

use integrity::{Basis, CreateOptions, Mode, OpenOptions};
use pmem::rng::SplitMix64;
use pmem::{CrashPlan, Domain, Medium, Pool, SimConfig, SimMedium, kinds};
use std::sync::Arc;
use support::*;

const PAGES: u64 = 48;
/// Length of the retired shadow record's bytes.
const RETIRED_BYTES_LEN: usize = 128;

/// Where a crash image was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    /// Just before the n-th fence of the operation (1-based).
    Fence(u64),
    /// After the operation returned.
    Returned,
}

/// Run `op` from `base` once per fence, the power failing just before fence 1, 2, ..., and
/// once more to the end with the power failing after it returns; every crash image of each
/// point goes to `check`. Returns the number of images checked.
fn every_fence(base: &[u8], mut op: impl FnMut(Sim), mut check: impl FnMut(Vec<u8>, Point)) -> u64 {
    let mut images = 0u64;
    for n in 1.. {
        let sim = Arc::new(SimMedium::from_image(
            base.to_vec(),
            SimConfig {
                seed: 0x5eed ^ n,
                crash: CrashPlan::AtFence(n),
                ..SimConfig::default()
            },
        ));
        op(sim.clone());
        let (state, point) = match sim.crash_state() {
            Some(state) => (state, Point::Fence(n)),
            None => (sim.power_fail_state(), Point::Returned),
        };
        for img in state.images() {
            images += 1;
            check(img, point);
        }
        if point == Point::Returned {
            println!(
                "crash images checked: {images} at {} fences and after return",
                n - 1
            );
            return images;
        }
    }
    unreachable!("the loop returns once the operation finishes without crashing")
}

/// A pool with a `data` region of [`PAGES`] pages of seeded bytes and no protection yet.
fn unprotected(seed: u64) -> Vec<u8> {
    let geo = integrity::Geometry::new(PAGES, 4).unwrap();
    let size = (64 * 1024 + PAGES * PAGE as u64 + geo.meta_bytes).next_multiple_of(4096);
    let sim = Arc::new(SimMedium::new(size as usize, SimConfig::default()));
    let sim = Pool::format(sim, Domain::Sim).unwrap();
    let mut pool = Pool::open_medium(sim, &pmem::OpenOptions::default()).unwrap();
    let data = pool
        .create_region(
            "data",
            kinds::RAW,
            PAGES * PAGE as u64,
            pmem::Alignment::Page,
        )
        .unwrap();
    let mut rng = SplitMix64::new(seed);
    let mut bytes = vec![0u8; PAGES as usize * PAGE];
    fill(&mut rng, &mut bytes);
    pool.medium().write(data.offset as usize, &bytes);
    pool.medium()
        .persist(data.offset as usize, bytes.len())
        .unwrap();
    pool.close().unwrap().durable_image()
}

/// Offset of a region in an image.
fn region_at(img: &[u8], name: &str) -> usize {
    let pool = Pool::open_medium(sim_of(img.to_vec()), &pmem::OpenOptions::default()).unwrap();
    pool.region(name).unwrap().offset as usize
}

/// Open `img` read-only: if the region counts as current, its redundancy must be current and
/// a scrub must find nothing. Then open it read-write in `mode` (recovery): the redundancy
/// must be current and a scrub must find nothing.
fn recovers_without_damage(img: Vec<u8>, mode: Mode, what: &str) {
    {
        let (pool, prot, report) = open(
            sim_of(img.clone()),
            OpenOptions {
                read_only: true,
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("{what}: read-only open: {e}"));
        let scrub = prot.scrub(&mut |_, _| {}).unwrap();
        if report.trust.basis == Basis::Current {
            assert!(
                redundancy_is_current(&pool, &prot),
                "{what}: the region counts as current, but its redundancy is not"
            );
            assert!(
                scrub.findings.is_empty(),
                "{what}: false damage in a region that counts as current: {:?}",
                scrub.findings
            );
        }
    }
    let (pool, prot, _) = open(
        sim_of(img),
        OpenOptions {
            mode: Some(mode),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{what}: open: {e}"));
    assert!(
        redundancy_is_current(&pool, &prot),
        "{what}: redundancy not current after recovery"
    );
    let scrub = prot.scrub(&mut |_, _| {}).unwrap();
    assert!(
        scrub.findings.is_empty(),
        "{what}: false damage after recovery: {:?}",
        scrub.findings
    );
    if mode == Mode::Eager {
        let mut b = vec![0u8; PAGES as usize * PAGE];
        prot.read(0, &mut b).unwrap();
        assert!(prot.findings().is_empty(), "{what}: reads found damage");
    }
}

/// `create` over seeded data, crashed before every fence and after it returns: wherever the
/// header already says the region is current, the redundancy of every group is durable with
/// it (each group's rebuild ends in a fence), and every image recovers without damage.
#[test]
fn a_create_crashed_anywhere_never_vouches_for_missing_redundancy() {
    for (mode, seed) in [(Mode::Lazy, 1u64), (Mode::Eager, 2)] {
        let mut base = unprotected(seed);
        let opts = CreateOptions {
            mode,
            stripe_pages: 4,
            period_ms: 1000,
        };
        // Where the integrity region will be placed (placement is deterministic), and an old
        // shadow batch record left in that space by an earlier tenant of it.
        let meta = {
            let mut pool =
                Pool::open_medium(sim_of(base.clone()), &pmem::OpenOptions::default()).unwrap();
            integrity::create_in_pool(&mut pool, "data", &opts, &mut |_, _| {}).unwrap();
            pool.region("data.integrity").unwrap().offset as usize
        };
        let uuid = Pool::open_medium(sim_of(base.clone()), &pmem::OpenOptions::default())
            .unwrap()
            .uuid();
        let record = legacy_shadow_record(&uuid, 3, 0, &[u64::MAX; 8]);
        base[meta + RETIRED_AT..meta + RETIRED_AT + record.len()].copy_from_slice(&record);
        let mut created = false;
        every_fence(
            &base,
            |sim| {
                let Ok(mut pool) = Pool::open_medium(sim, &pmem::OpenOptions::default()) else {
                    return;
                };
                let _ = integrity::create_in_pool(&mut pool, "data", &opts, &mut |_, _| {});
            },
            |img, point| {
                let what = format!("{mode:?} create, {point:?}");
                let pool = Pool::open_medium(sim_of(img.clone()), &pmem::OpenOptions::default());
                let protected = pool.ok().and_then(|p| {
                    let meta = p.region("data.integrity")?.offset as usize;
                    let placement = integrity::placement(&p, "data").ok()?;
                    // Either header copy decodes: the create got as far as its first header.
                    integrity::layout::HEADER_COPY_OFFSETS
                        .iter()
                        .any(|&off| {
                            let at = meta + off;
                            let b: [u8; integrity::layout::HEADER_BYTES] = img
                                [at..at + integrity::layout::HEADER_BYTES]
                                .try_into()
                                .unwrap();
                            integrity::header::Header::decode(&b, &placement.uuid, at as u64)
                                .is_ok()
                        })
                        .then_some(())
                });
                if protected.is_none() {
                    assert!(
                        point != Point::Returned,
                        "{what}: create returned, yet no header"
                    );
                    return;
                }
                if point == Point::Returned {
                    created = true;
                    assert!(
                        img[meta + RETIRED_AT..meta + RETIRED_AT + RETIRED_BYTES_LEN]
                            .iter()
                            .all(|&b| b == 0),
                        "{what}: create returned, yet an old shadow record survives in its space"
                    );
                }
                recovers_without_damage(img, mode, &what);
            },
        );
        assert!(created, "{mode:?}: create never completed");
    }
}

/// A region holding an earlier version's shadow batch record is opened read-write: once open
/// returns, the record is gone from every crash image, and every image recovers.
#[test]
fn the_retired_record_is_durably_cleared_once_open_returns() {
    for (mode, seed) in [(Mode::Lazy, 3u64), (Mode::Eager, 4)] {
        let mut base = image(PAGES, 4, mode, seed);
        let meta = region_at(&base, "data.integrity");
        let uuid = Pool::open_medium(sim_of(base.clone()), &pmem::OpenOptions::default())
            .unwrap()
            .uuid();
        let record = legacy_shadow_record(&uuid, 9, 0, &[u64::MAX; 8]);
        base[meta + RETIRED_AT..meta + RETIRED_AT + record.len()].copy_from_slice(&record);
        let mut returned = 0;
        every_fence(
            &base,
            |sim| {
                let _ = open(
                    sim,
                    OpenOptions {
                        mode: Some(mode),
                        ..Default::default()
                    },
                );
            },
            |img, point| {
                let what = format!("{mode:?} open over a retired record, {point:?}");
                let kept = &img[meta + RETIRED_AT..meta + RETIRED_AT + record.len()];
                if point == Point::Returned {
                    returned += 1;
                    assert!(
                        kept.iter().all(|&b| b == 0),
                        "{what}: open returned, yet the retired record survives the power failure"
                    );
                } else {
                    // Each line of it is either still the record or zeroed.
                    for (k, r) in kept.chunks(64).zip(record.chunks(64)) {
                        assert!(
                            k.iter().all(|&b| b == 0) || k == r,
                            "{what}: a line of the retired bytes is neither the record nor zero"
                        );
                    }
                }
                recovers_without_damage(img, mode, &what);
            },
        );
        assert!(returned > 0, "{mode:?}: no image after return");
    }
}

/// A lazy session leaves the line checksums invalid; an eager open rebuilds them from the pages
/// that pass their checksums, and a clean close follows. Crashed before every fence of the
/// open and the close, and after the close returns: no image shows damage, and after the
/// close every image that counts as current has line checksums that match every line.
#[test]
fn line_checksums_rebuilt_by_an_eager_open_are_durable_by_the_clean_close() {
    let mut rng = SplitMix64::new(5);
    let base = {
        let (pool, prot, _) = open_mode(sim_of(image(PAGES, 4, Mode::Lazy, 5)), Mode::Lazy);
        for _ in 0..8 {
            let mut b = vec![0u8; 300];
            fill(&mut rng, &mut b);
            let at = rng.below(PAGES * PAGE as u64 - b.len() as u64);
            prot.write(at, &b).unwrap();
        }
        prot.close().unwrap();
        pool.close().unwrap().durable_image()
    };
    let mut after = 0;
    every_fence(
        &base,
        |sim| {
            if let Ok((pool, prot, report)) = open(
                sim,
                OpenOptions {
                    mode: Some(Mode::Eager),
                    ..Default::default()
                },
            ) {
                assert_eq!(report.lines_rebuilt_pages, PAGES, "every page passes");
                let _ = prot.close();
                drop(pool);
            }
        },
        |img, point| {
            let what = format!("eager open rebuilding lines then close, {point:?}");
            if point == Point::Returned {
                after += 1;
                let (_pool, prot, report) = open(
                    sim_of(img.clone()),
                    OpenOptions {
                        read_only: true,
                        ..Default::default()
                    },
                )
                .unwrap();
                assert_eq!(report.trust.basis, Basis::Current, "{what}: not current");
                let scrub = prot.scrub(&mut |_, _| {}).unwrap();
                assert!(scrub.lines_checked > 0, "{what}: no line checked");
                assert!(
                    scrub.findings.is_empty(),
                    "{what}: line checksums do not match: {:?}",
                    scrub.findings
                );
            }
            recovers_without_damage(img, Mode::Eager, &what);
        },
    );
    assert!(after > 0);
}

/// An eager region with one damaged data line (its checksums untouched): a read of that line
/// repairs the page from parity. Once the read returns, every crash image holds the repaired
/// page, so no recovery can take the damage for data.
#[test]
fn a_page_repaired_by_an_eager_read_is_durable_once_the_read_returns() {
    let clean = image(PAGES, 4, Mode::Eager, 6);
    let data_at = region_at(&clean, "data");
    let (page, slot) = (13usize, 5usize);
    let line_at = data_at + page * PAGE + slot * 64;
    let good = clean[data_at..data_at + PAGES as usize * PAGE].to_vec();
    let mut base = clean.clone();
    for b in &mut base[line_at..line_at + 64] {
        *b ^= 0xa5;
    }
    let mut returned = 0;
    every_fence(
        &base,
        |sim| {
            if let Ok((_pool, prot, _)) = open(
                sim,
                OpenOptions {
                    mode: Some(Mode::Eager),
                    ..Default::default()
                },
            ) {
                let mut b = [0u8; 64];
                if prot.read((page * PAGE + slot * 64) as u64, &mut b).is_ok() {
                    assert_eq!(b[..], good[page * PAGE + slot * 64..][..64], "repaired");
                }
            }
        },
        |img, point| {
            let what = format!("eager read repairing page {page}, {point:?}");
            let line = &img[line_at..line_at + 64];
            let want = &good[page * PAGE + slot * 64..][..64];
            if point == Point::Returned {
                returned += 1;
                assert_eq!(
                    line, want,
                    "{what}: the read returned repaired bytes, yet the damage survives"
                );
                recovers_without_damage(img, Mode::Eager, &what);
            }
        },
    );
    assert!(returned > 0);
}

/// An eager region with one damaged line checksum (its page intact): a read of that line finds
/// the page right and rewrites the page's line checksums, and a clean close follows. Once the
/// close returns, every image counts as current and a scrub finds nothing: the rewritten line
/// checksums were written back with the close, not left in the cache.
#[test]
fn a_line_checksum_rewritten_by_an_eager_read_is_durable_by_the_clean_close() {
    let mut base = image(PAGES, 4, Mode::Eager, 7);
    let meta = region_at(&base, "data.integrity");
    let geo = integrity::Geometry::new(PAGES, 4).unwrap();
    let (page, slot) = (30u64, 2u64);
    let sum_at = meta + (geo.linesums_at + 4 * (page * 64 + slot)) as usize;
    for b in &mut base[sum_at..sum_at + 4] {
        *b ^= 0x3c;
    }
    let mut returned = 0;
    every_fence(
        &base,
        |sim| {
            if let Ok((_pool, prot, _)) = open(
                sim,
                OpenOptions {
                    mode: Some(Mode::Eager),
                    ..Default::default()
                },
            ) {
                let mut b = [0u8; 64];
                if prot.read(page * PAGE as u64 + slot * 64, &mut b).is_ok() {
                    assert_eq!(prot.findings().len(), 1, "the damaged line checksum");
                    let _ = prot.close();
                }
            }
        },
        |img, point| {
            let what = format!("eager read rewriting line checksums, then close, {point:?}");
            if point == Point::Returned {
                returned += 1;
                let (_pool, prot, report) = open(
                    sim_of(img.clone()),
                    OpenOptions {
                        read_only: true,
                        ..Default::default()
                    },
                )
                .unwrap();
                assert_eq!(report.trust.basis, Basis::Current, "{what}: not current");
                let scrub = prot.scrub(&mut |_, _| {}).unwrap();
                assert!(
                    scrub.findings.is_empty(),
                    "{what}: the repaired line checksum did not survive: {:?}",
                    scrub.findings
                );
                // Before the return the injected damage may still be there, rightly reported.
                recovers_without_damage(img, Mode::Eager, &what);
            }
        },
    );
    assert!(returned > 0);
}

/// Mode off keeps no redundancy, but a write that returned is durable: crashed before every
/// fence of a session of writes and after it, every image holds every write that returned,
/// and of the write in flight each byte is old or new.
#[test]
fn writes_in_mode_off_are_durable_once_they_return() {
    use std::cell::RefCell;
    let base = image(PAGES, 4, Mode::Lazy, 8);
    let data_at = region_at(&base, "data");
    let len = PAGES as usize * PAGE;
    let old = base[data_at..data_at + len].to_vec();
    // (acknowledged data, the write in flight)
    type Seen = (Vec<u8>, Option<(usize, Vec<u8>)>);
    let seen: RefCell<Seen> = RefCell::new((old.clone(), None));
    let mut returned = 0;
    every_fence(
        &base,
        |sim| {
            *seen.borrow_mut() = (old.clone(), None);
            let Ok((_pool, prot, _)) = open(
                sim,
                OpenOptions {
                    mode: Some(Mode::Off),
                    ..Default::default()
                },
            ) else {
                return;
            };
            let mut rng = SplitMix64::new(9);
            for _ in 0..6 {
                let n = [8usize, 64, 300, 4096][rng.below(4) as usize];
                let at = rng.below((len - n) as u64) as usize;
                let mut b = vec![0u8; n];
                fill(&mut rng, &mut b);
                seen.borrow_mut().1 = Some((at, b.clone()));
                if prot.write(at as u64, &b).is_err() {
                    return;
                }
                let mut s = seen.borrow_mut();
                s.0[at..at + n].copy_from_slice(&b);
                s.1 = None;
            }
        },
        |img, point| {
            let s = seen.borrow();
            let got = &img[data_at..data_at + len];
            if point == Point::Returned {
                returned += 1;
                assert!(s.1.is_none(), "every write returned");
            }
            let (lo, hi, new) = match &s.1 {
                Some((at, b)) => (*at, at + b.len(), b.as_slice()),
                None => (0, 0, &[][..]),
            };
            for (i, (&g, &a)) in got.iter().zip(&s.0).enumerate() {
                if (lo..hi).contains(&i) {
                    assert!(
                        g == a || g == new[i - lo],
                        "{point:?}: byte {i} of the write in flight is neither old nor new"
                    );
                } else {
                    assert_eq!(
                        g, a,
                        "{point:?}: byte {i} is not what the writes that returned left"
                    );
                }
            }
        },
    );
    assert!(returned > 0);
}

/// Whether `img` counts as current, and the findings of a read-only scrub of it as
/// (kind, index), sorted.
fn scrub_findings(img: Vec<u8>) -> (bool, Vec<String>) {
    let (_pool, prot, report) = open(
        sim_of(img),
        OpenOptions {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    let mut v: Vec<String> = prot
        .scrub(&mut |_, _| {})
        .unwrap()
        .findings
        .iter()
        .map(|f| format!("{:?} {}", f.kind, f.index))
        .collect();
    v.sort();
    (report.trust.basis == Basis::Current, v)
}

/// An eager write that stops with an error part way (its second line lies in a page that is
/// damaged beyond repair: two pages of its stripe fail their checksums), then a clean close
/// on the same thread. The first line's data, parity and checksums were flushed but not
/// fenced by the failed write; the close must make them durable before its clean header. In
/// every image that counts as current (crashed anywhere, or after the close returns) a scrub
/// reports exactly the injected damage, no more.
#[test]
fn a_failed_eager_write_leaves_nothing_half_durable_under_the_clean_close() {
    failed_eager_write_then_close(false);
}

/// As [`a_failed_eager_write_leaves_nothing_half_durable_under_the_clean_close`], with the
/// write on another thread than the close: the closing thread's fences do not drain the
/// writer's flushes, so the failed write itself must fence what it flushed.
#[test]
fn a_failed_eager_write_on_another_thread_leaves_nothing_half_durable() {
    failed_eager_write_then_close(true);
}

fn failed_eager_write_then_close(other_thread: bool) {
    let mut base = image(PAGES, 4, Mode::Eager, 10);
    let data_at = region_at(&base, "data");
    // Stripe 1 holds pages 4..8: damage page 5 (its first line) and page 6.
    for (page, slot) in [(5usize, 0usize), (6, 9)] {
        let at = data_at + page * PAGE + slot * 64;
        for b in &mut base[at..at + 64] {
            *b ^= 0x5a;
        }
    }
    let session = |sim: Sim| {
        if let Ok((_pool, prot, _)) = open(
            sim,
            OpenOptions {
                mode: Some(Mode::Eager),
                ..Default::default()
            },
        ) {
            // The last 32 bytes of page 4, then the first 32 of page 5.
            let write = || prot.write(5 * PAGE as u64 - 32, &[0xee; 64]);
            let r = if other_thread {
                std::thread::scope(|s| s.spawn(write).join().unwrap())
            } else {
                write()
            };
            assert!(
                r.is_err() || prot.medium().crashed(),
                "page 5 cannot be repaired"
            );
            let _ = prot.close();
        }
    };
    // Every line written back: the outcome the close promises.
    let reference = {
        let sim = sim_of(base.clone());
        session(sim.clone());
        sim.durable_image()
    };
    let (current, want) = scrub_findings(reference);
    assert!(current, "the close recorded a clean shutdown");
    assert!(
        want.iter().any(|f| f.ends_with(" 5")),
        "the injected damage is reported: {want:?}"
    );
    let mut returned = 0;
    every_fence(&base, session, |img, point| {
        let (current, got) = scrub_findings(img);
        if point == Point::Returned {
            returned += 1;
            assert!(current, "{point:?}: the close returned, yet not clean");
        }
        // Before the session's open and from the clean header on, the region counts as
        // current: then the only damage is the injected one.
        if current {
            assert_eq!(
                got, want,
                "{point:?}: a region that counts as current reports other than the injected damage"
            );
        }
    });
    assert!(returned > 0);
}

/// In the `msync` domain (pages may be written back at any time), the k-th msync fails during a
/// session of eager or lazy writes, and the application still calls `close`. A close after a
/// failed msync must not record a clean shutdown, not even in the working image that the page
/// cache may write back: every image the power may leave then that counts as current holds
/// current redundancy and scrubs clean.
#[test]
fn a_close_after_a_failed_msync_never_leaves_a_clean_header_over_stale_redundancy() {
    let mut images = 0u64;
    for (mode, seed) in [(Mode::Eager, 11u64), (Mode::Lazy, 12)] {
        let base = image(PAGES, 4, mode, seed);
        let mut fired = 0;
        for k in 1..=24u64 {
            let sim = Arc::new(SimMedium::from_image(
                base.clone(),
                SimConfig {
                    seed: k,
                    domain: pmem::SimDomain::Msync,
                    sector: if k % 2 == 0 { 512 } else { 4096 },
                    fail_msync_at: k,
                    ..SimConfig::default()
                },
            ));
            if let Ok((_pool, prot, _)) = open(
                sim.clone(),
                OpenOptions {
                    mode: Some(mode),
                    ..Default::default()
                },
            ) {
                let mut rng = SplitMix64::new(seed ^ k);
                for _ in 0..8 {
                    let mut b = vec![0u8; [8usize, 64, 300][rng.below(3) as usize]];
                    fill(&mut rng, &mut b);
                    let at = rng.below(PAGES * PAGE as u64 - b.len() as u64);
                    if prot.write(at, &b).is_err() {
                        break;
                    }
                }
                let _ = prot.close();
            }
            if sim.fence().is_ok() {
                continue;
            }
            fired += 1;
            for img in sim.power_fail_state().images() {
                images += 1;
                let what = format!("{mode:?}: msync {k} failed, then close");
                let (pool, prot, report) = open(
                    sim_of(img),
                    OpenOptions {
                        read_only: true,
                        ..Default::default()
                    },
                )
                .unwrap_or_else(|e| panic!("{what}: open: {e}"));
                if report.trust.basis == Basis::Current {
                    assert!(
                        redundancy_is_current(&pool, &prot),
                        "{what}: clean header over stale redundancy"
                    );
                    let scrub = prot.scrub(&mut |_, _| {}).unwrap();
                    assert!(scrub.findings.is_empty(), "{what}: {:?}", scrub.findings);
                }
            }
        }
        assert!(fired >= 8, "{mode:?}: only {fired} msyncs failed");
    }
    println!("crash images checked: {images} after a failed msync and a close (Msync)");
}

/// A lazy region with one damaged data line: `repair` rebuilds the page from parity. Once
/// repair returns, every crash image holds the repaired page, and a read-write open of it (a
/// resync, since the session was not closed) changes no page checksum: no damage is taken for
/// data.
#[test]
fn repairs_are_durable_once_repair_returns() {
    let clean = image(PAGES, 4, Mode::Lazy, 13);
    let data_at = region_at(&clean, "data");
    let (page, slot) = (21usize, 7usize);
    let line_at = data_at + page * PAGE + slot * 64;
    let good = clean[line_at..line_at + 64].to_vec();
    let mut base = clean.clone();
    for b in &mut base[line_at..line_at + 64] {
        *b ^= 0x77;
    }
    let mut returned = 0;
    every_fence(
        &base,
        |sim| {
            if let Ok((_pool, prot, _)) = open_quiet(sim, Mode::Lazy) {
                if let Ok(r) = prot.repair(&mut |_, _| {}) {
                    assert!(
                        r.outcomes.iter().any(|o| o.repaired),
                        "the damaged page is repaired: {:?}",
                        r.outcomes
                    );
                }
            }
        },
        |img, point| {
            if point == Point::Returned {
                returned += 1;
                assert_eq!(
                    &img[line_at..line_at + 64],
                    good.as_slice(),
                    "repair returned, yet the damaged line survives the power failure"
                );
                let (_pool, _prot, report) = open_quiet(sim_of(img.clone()), Mode::Lazy).unwrap();
                assert_eq!(
                    report.resync_pages_changed, 0,
                    "the resync took damage for data: {:?}",
                    report.resync_pages_changed_list
                );
                recovers_without_damage(img, Mode::Lazy, "after repair returned");
            }
        },
    );
    assert!(returned > 0);
}

fn open_quiet(sim: Sim, mode: Mode) -> integrity::Result<Handle> {
    open(
        sim,
        OpenOptions {
            mode: Some(mode),
            ..Default::default()
        },
    )
}
