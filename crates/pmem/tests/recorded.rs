//! The recorded medium: the production `Mapping` code (write-back loop, `persist`, non-temporal
//! copy, msync rounding, fences) reporting to the persistence simulator.
//!
//! - the lines, stores, streams and msyncs the real code reports are exactly the ones its range
//!   covers, for every alignment;
//! - a toy commit protocol survives crashes at every fence on the recorded medium;
//! - canaries: two deliberate bugs in the medium's own code (the `canary` feature, switched on
//!   per thread) are caught on the recorded medium and pass unseen on the plain simulator.

use pmem::recorded::canary::{self, Mutation};
use pmem::recorded::{Event, Recorded};
use pmem::sim::{LineState, Unpersisted};
use pmem::{CrashPlan, Domain, Medium, SimConfig, SimDomain, SimMedium};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

fn path(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    dir.join(format!(
        "kavach-recorded-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

fn recorded(tag: &str, sim: Arc<SimMedium>, domain: Domain) -> Recorded {
    Recorded::create(&path(tag), sim, domain)
        .expect("create the recorded medium")
        .traced()
}

/// The cache lines `[offset, offset + len)` overlaps, worked out independently of the code.
fn lines(offset: usize, len: usize) -> Vec<Event> {
    if len == 0 {
        return Vec::new();
    }
    (0..)
        .map(|i| i * 64)
        .skip_while(|l| l + 64 <= offset)
        .take_while(|&l| l < offset + len)
        .map(Event::Line)
        .collect()
}

#[test]
fn flush_and_persist_report_exactly_the_lines_a_range_overlaps() {
    let sim = Arc::new(SimMedium::new(8192, SimConfig::default()));
    let m = recorded("lines", sim.clone(), Domain::Adr);
    let mut checked = 0;
    for offset in (0..200).chain([4000, 4095, 8191]) {
        for len in [0, 1, 2, 7, 8, 63, 64, 65, 100, 127, 128, 129, 200, 1000] {
            if offset + len > 8192 {
                continue;
            }
            m.flush(offset, len).expect("flush");
            let want = lines(offset, len);
            assert_eq!(m.take_trace(), want, "flush({offset}, {len})");
            // Flushed, not yet durable: exactly those lines pend.
            let pending: Vec<Unpersisted> = want
                .iter()
                .map(|e| match *e {
                    Event::Line(offset) => Unpersisted {
                        offset,
                        state: LineState::Flushed,
                    },
                    _ => unreachable!(),
                })
                .collect();
            assert_eq!(sim.unpersisted(), pending, "flush({offset}, {len})");
            m.fence().expect("fence");
            assert_eq!(m.take_trace(), vec![Event::Fence]);
            assert!(sim.unpersisted().is_empty());
            // persist's fast path: the same lines, then one fence.
            m.persist(offset, len).expect("persist");
            let mut want = lines(offset, len);
            want.push(Event::Fence);
            assert_eq!(m.take_trace(), want, "persist({offset}, {len})");
            checked += 1;
        }
    }
    assert_eq!(checked, 203 * 14 - 12, "every pair that fits the medium");
    assert_eq!(sim.fences(), 2 * checked);
}

/// What `copy_nontemporal` must do for a copy of `len` bytes at `offset` (the mapping is page
/// aligned, so `offset % 64` is the destination's alignment): the head up to the first cache
/// line and the tail stored and written back, the whole lines in between streamed.
fn nontemporal_plan(offset: usize, len: usize) -> Vec<Event> {
    let head = (64 - offset % 64) % 64;
    let mut out = Vec::new();
    let store = |out: &mut Vec<Event>, at: usize, n: usize| {
        if n > 0 {
            out.push(Event::Store { offset: at, len: n });
            out.extend(lines(at, n));
        }
    };
    if len < head + 64 {
        store(&mut out, offset, len);
        return out;
    }
    let body = (len - head) / 64 * 64;
    store(&mut out, offset, head);
    out.push(Event::Stream {
        offset: offset + head,
        len: body,
    });
    store(&mut out, offset + head + body, len - head - body);
    out
}

#[test]
fn nontemporal_copies_report_head_stream_and_tail_and_are_durable_after_a_fence() {
    let sim = Arc::new(SimMedium::new(8192, SimConfig::default()));
    let m = recorded("nt", sim.clone(), Domain::Adr);
    let mut copies = 0;
    for offset in (0..48).chain([1000, 4090]) {
        for len in [
            0, 1, 15, 16, 17, 31, 32, 33, 47, 64, 100, 127, 128, 129, 255, 1500,
        ] {
            let data: Vec<u8> = (0..len).map(|i| (i * 13 + offset + 1) as u8).collect();
            m.write_nontemporal(offset, &data);
            assert_eq!(
                m.take_trace(),
                nontemporal_plan(offset, len),
                "write_nontemporal({offset}, {len})"
            );
            m.fence().expect("fence");
            m.take_trace();
            let durable = sim.durable_image();
            assert_eq!(&durable[offset..offset + len], &data[..], "{offset} {len}");
            assert!(sim.unpersisted().is_empty(), "{offset} {len}");
            let mut real = vec![0; len];
            m.read(offset, &mut real);
            assert_eq!(real, data);
            copies += 1;
        }
    }
    assert_eq!(copies, 50 * 16);
    assert_eq!(m.mapping().len(), 8192);
}

#[test]
fn msync_domain_reports_the_pages_the_real_code_syncs() {
    let sim = Arc::new(SimMedium::new(
        4 * 4096,
        SimConfig {
            domain: SimDomain::Msync,
            ..SimConfig::default()
        },
    ));
    let m = recorded("msync", sim.clone(), Domain::Msync);
    m.write(5000, b"msync!");
    m.persist(5000, 6).expect("persist");
    assert_eq!(
        m.take_trace(),
        vec![
            Event::Store {
                offset: 5000,
                len: 6
            },
            Event::Msync {
                offset: 4096,
                len: 4096
            }
        ]
    );
    // A range across a page boundary syncs both pages; the flush alone is durable (the msync
    // is reported as a write-back of the pages and a fence of the simulator).
    m.write(4000, &[3; 200]);
    m.flush(4000, 200).expect("flush");
    let trace = m.take_trace();
    assert_eq!(
        &trace[1..],
        &[Event::Msync {
            offset: 0,
            len: 8192
        }]
    );
    assert_eq!(&sim.durable_image()[4000..4200], &[3; 200][..]);
    // A non-temporal copy: its line write-backs reach only the page cache (traced, not reported),
    // the msync that follows is what makes it durable.
    let data = vec![7u8; 3000];
    m.write_nontemporal(9000, &data);
    let trace = m.take_trace();
    assert!(trace.iter().any(|e| matches!(e, Event::Line(_))));
    assert_eq!(
        trace.last(),
        Some(&Event::Msync {
            offset: 8192,
            len: 4096
        })
    );
    m.fence().expect("fence");
    assert_eq!(&sim.durable_image()[9000..12000], &data[..]);
    assert!(sim.unpersisted().is_empty());
}

/// A toy commit protocol: each record is written at an unaligned offset (ordinarily or with a
/// non-temporal copy) and persisted, then the commit word at offset 0 is set to the number of
/// records and persisted. After a crash, every committed record must be whole.
struct Toy {
    records: Vec<(usize, Vec<u8>, bool)>,
    /// Bytes of medium the records need.
    size: usize,
}

impl Toy {
    /// Eight records in the first page, none ending on a cache-line boundary; with
    /// `nontemporal`, every other one copied with non-temporal stores.
    fn new(nontemporal: bool) -> Toy {
        Self::laid_out(4096, |i| 256 * (i + 1) + 24 + i, nontemporal)
    }

    /// Eight records, each crossing from one page into the next.
    fn across_pages() -> Toy {
        Self::laid_out(9 * 4096, |i| 4096 * (i + 1) - 60, false)
    }

    fn laid_out(size: usize, at: impl Fn(usize) -> usize, nontemporal: bool) -> Toy {
        let records = (0..8usize)
            .map(|i| {
                let len = 100 + 13 * i;
                let data: Vec<u8> = (0..len).map(|k| (k * 7 + i * 31 + 1) as u8).collect();
                (at(i), data, nontemporal && i % 2 == 0)
            })
            .collect();
        Toy { records, size }
    }

    fn run(&self, m: &impl Medium) {
        for (i, (offset, data, nt)) in self.records.iter().enumerate() {
            if *nt {
                m.write_nontemporal(*offset, data);
                if m.fence().is_err() {
                    return;
                }
            } else {
                m.write(*offset, data);
                if m.persist(*offset, data.len()).is_err() {
                    return;
                }
            }
            m.store_u64(0, i as u64 + 1);
            if m.persist(0, 8).is_err() {
                return;
            }
        }
    }

    /// Committed records that are not whole in `image`.
    fn broken(&self, image: &[u8]) -> usize {
        let committed = u64::from_le_bytes(image[..8].try_into().expect("word")) as usize;
        assert!(committed <= self.records.len(), "a torn commit word");
        self.records[..committed]
            .iter()
            .filter(|(offset, data, _)| image[*offset..*offset + data.len()] != data[..])
            .count()
    }
}

/// Crash `toy` at every fence and at its end, `seeds` times each, on the recorded medium (or the
/// plain simulator) with `mutation` on; returns (images checked, images with a broken record).
fn campaign(toy: &Toy, recorded_medium: bool, mutation: Mutation, seeds: u64) -> (u64, u64) {
    campaign_in(Domain::Adr, toy, recorded_medium, mutation, seeds)
}

fn campaign_in(
    domain: Domain,
    toy: &Toy,
    recorded_medium: bool,
    mutation: Mutation,
    seeds: u64,
) -> (u64, u64) {
    canary::set(mutation);
    let (mut images, mut bad) = (0, 0);
    for seed in 0..seeds {
        for n in 1.. {
            let cfg = SimConfig {
                seed: seed * 1000 + n,
                crash: CrashPlan::AtFence(n),
                domain: if domain == Domain::Msync {
                    SimDomain::Msync
                } else {
                    SimDomain::Adr
                },
                ..SimConfig::default()
            };
            let sim = Arc::new(SimMedium::new(toy.size, cfg));
            if recorded_medium {
                let m = Recorded::create(&path("toy"), sim.clone(), domain).expect("create");
                toy.run(&m);
            } else {
                toy.run(&*sim);
            }
            let crashed = sim.crashed();
            let image = sim.power_fail();
            images += 1;
            if toy.broken(&image) > 0 {
                bad += 1;
            }
            if !crashed {
                break;
            }
        }
    }
    canary::set(Mutation::None);
    (images, bad)
}

#[test]
fn a_commit_protocol_survives_every_fence_on_the_recorded_medium() {
    for nt in [false, true] {
        let toy = Toy::new(nt);
        let (images, bad) = campaign(&toy, true, Mutation::None, 20);
        println!("crash images checked: {images} (recorded medium, non-temporal {nt})");
        // 8 records, 2 fences each, plus the run that finishes: 17 images per seed.
        assert_eq!(images, 20 * 17);
        assert_eq!(bad, 0, "non-temporal {nt}");
    }
}

#[test]
fn canary_last_line_not_written_back_is_caught_only_by_the_recorded_medium() {
    let toy = Toy::new(false);
    let (sim_images, sim_bad) = campaign(&toy, false, Mutation::SkipLastLine, 20);
    let (rec_images, rec_bad) = campaign(&toy, true, Mutation::SkipLastLine, 20);
    println!(
        "canary skip-last-line: plain simulator {sim_bad} of {sim_images} images broken, \
         recorded medium {rec_bad} of {rec_images}"
    );
    println!("crash images checked: {}", sim_images + rec_images);
    assert_eq!(
        sim_bad, 0,
        "the plain simulator never runs the medium's loop"
    );
    assert!(
        rec_bad > 0,
        "the recorded medium must catch the skipped line"
    );
}

#[test]
fn canary_nontemporal_tail_not_written_back_is_caught_only_by_the_recorded_medium() {
    let toy = Toy::new(true);
    let (sim_images, sim_bad) = campaign(&toy, false, Mutation::TailNotFlushed, 20);
    let (rec_images, rec_bad) = campaign(&toy, true, Mutation::TailNotFlushed, 20);
    println!(
        "canary tail-not-flushed: plain simulator {sim_bad} of {sim_images} images broken, \
         recorded medium {rec_bad} of {rec_images}"
    );
    println!("crash images checked: {}", sim_images + rec_images);
    assert_eq!(
        sim_bad, 0,
        "the plain simulator assumes the whole copy is written back"
    );
    assert!(
        rec_bad > 0,
        "the recorded medium must catch the unflushed tail"
    );
}

#[test]
fn canary_msync_short_of_the_last_page_is_caught_only_by_the_recorded_medium() {
    let toy = Toy::across_pages();
    let (ok_images, ok_bad) = campaign_in(Domain::Msync, &toy, true, Mutation::None, 20);
    let (sim_images, sim_bad) = campaign_in(Domain::Msync, &toy, false, Mutation::MsyncShort, 20);
    let (rec_images, rec_bad) = campaign_in(Domain::Msync, &toy, true, Mutation::MsyncShort, 20);
    println!(
        "canary msync-short: recorded medium unmutated {ok_bad} of {ok_images} images broken, \
         plain simulator {sim_bad} of {sim_images}, recorded medium {rec_bad} of {rec_images}"
    );
    println!(
        "crash images checked: {}",
        ok_images + sim_images + rec_images
    );
    assert_eq!(
        ok_bad, 0,
        "the real msync rounding keeps the protocol whole"
    );
    assert_eq!(
        sim_bad, 0,
        "the plain simulator never runs the msync rounding"
    );
    assert!(
        rec_bad > 0,
        "the recorded medium must catch the page left unsynced"
    );
}

#[test]
fn a_crash_comes_out_of_fence_and_persist_and_latches() {
    let sim = Arc::new(SimMedium::new(
        4096,
        SimConfig {
            crash: CrashPlan::AtFence(2),
            ..SimConfig::default()
        },
    ));
    let m = recorded("latch", sim.clone(), Domain::Adr);
    m.write(64, &[1; 64]);
    m.persist(64, 64).expect("first fence");
    m.write(128, &[2; 64]);
    assert!(matches!(
        m.persist(128, 64),
        Err(pmem::PmemError::SimulatedCrash)
    ));
    assert!(m.flush(0, 64).is_err(), "a flush after the crash fails");
    assert!(m.fence().is_err());
    let image = sim.crash_image().expect("crashed");
    assert_eq!(&image[64..128], &[1; 64]);
    // The real mapping holds every store; only the simulator knows what would survive.
    let mut real = [0; 64];
    m.read(128, &mut real);
    assert_eq!(real, [2; 64]);
}
