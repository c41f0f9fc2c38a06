//! The log in a flush-on-fail pool saved by `powerfail::PoolTarget` at a manual warning: the
//! saved image resumes from the record's hints without walking the ring and holds every
//! appended record; a power failure at any fence of the save leaves either a saved record over
//! a whole image (resumed, every record) or an armed one (the missed-window walk, a genuine
//! contiguous prefix).

use std::sync::Arc;
use std::time::{Duration, Instant};

use log::fof::{LogHook, Opened};
use log::{ForcePolicy, Log, LogOptions};
use pmem::fof::FofState;
use pmem::{CrashPlan, SimConfig, SimDomain, SimMedium};
use powerfail::{
    HoldPolicy, PoolTarget, PowerFail, Record, SaveCost, SaveTarget, SaveThread, Window, WriteBack,
    WriterGate,
};

const REGION: usize = 4096 + 16 * 1024;
const RECORD: usize = REGION;
const LEN: usize = REGION + 4096;
const HANG: Duration = Duration::from_secs(20);

fn opts() -> LogOptions {
    LogOptions {
        full_wait: Duration::from_millis(1),
        ..LogOptions::default()
    }
}

/// The log, its pool's save target, and what was appended (LSN, payload), by LSN.
type Run = (
    Arc<Log<Arc<SimMedium>>>,
    Arc<PoolTarget<Arc<SimMedium>>>,
    Vec<(u64, Vec<u8>)>,
);

fn base_image() -> Vec<u8> {
    let sim = SimMedium::new(LEN, SimConfig::default());
    let log = Log::create(&sim, 0, REGION, Duration::from_millis(1)).expect("create");
    log.close().expect("close");
    pmem::fof::arm(&sim, RECORD).expect("arm");
    sim.durable_image()
}

fn payload(t: u64, i: u64) -> Vec<u8> {
    let mut p = vec![(t * 31 + i) as u8; 40 + ((t * 7 + i * 13) % 300) as usize];
    p[..8].copy_from_slice(&(t << 32 | i).to_le_bytes());
    p
}

/// Open (missed-window path over the armed base), wire a pool target with the log's hook,
/// and append `per_thread` records from each of `threads` threads, each append inside the writers' gate.
fn run(sim: &Arc<SimMedium>, per_thread: u64, threads: u64) -> Run {
    let (log, how) = log::fof::open(sim.clone(), 0, REGION, RECORD, 0, &opts()).expect("open");
    assert!(matches!(how, Opened::MissedWindow(_)));
    let log = Arc::new(log);
    let gate = Arc::new(WriterGate::new());
    let t = PoolTarget::new(
        "log pool",
        sim.clone(),
        vec![(0, REGION)],
        RECORD,
        gate.clone(),
        None,
        WriteBack::All,
    )
    .expect("target");
    t.add_hook(Arc::new(LogHook::new(log.clone())));
    let written = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|th| {
                let (log, gate) = (&log, &gate);
                s.spawn(move || {
                    let mut mine = Vec::new();
                    for i in 0..per_thread {
                        let _g = gate.enter();
                        let p = payload(th, i);
                        let a = log.append(&p, ForcePolicy::Sync).expect("append");
                        mine.push((a.lsn, p));
                    }
                    mine
                })
            })
            .collect();
        let mut all: Vec<(u64, Vec<u8>)> = hs
            .into_iter()
            .flat_map(|h| h.join().expect("writer"))
            .collect();
        all.sort();
        all
    });
    (log, Arc::new(t), written)
}

fn read_all(log: &Log<SimMedium>) -> Vec<(u64, Vec<u8>)> {
    log.records()
        .map(|r| {
            let r = r.expect("record");
            (r.lsn, r.payload)
        })
        .collect()
}

/// The data records of `got` (the recovery jump of the first open leaves none).
fn assert_resumes(img: Vec<u8>, written: &[(u64, Vec<u8>)], next: u64, what: &str) {
    let sim = SimMedium::from_image(
        img.clone(),
        SimConfig {
            domain: SimDomain::FlushOnFail,
            ..SimConfig::default()
        },
    );
    let (log, how) = log::fof::open(sim, 0, REGION, RECORD, 0, &opts()).expect("resume");
    match how {
        Opened::Resumed {
            next_lsn,
            save_count,
            ..
        } => {
            assert_eq!(next_lsn, next, "{what}");
            assert!(save_count >= 1);
        }
        other => panic!("{what}: expected a resume, got {other:?}"),
    }
    assert_eq!(read_all(&log), written, "{what}: resumed records");
    // A full walk of the same image (as after a clean shutdown) agrees.
    let walk = SimMedium::from_image(img, SimConfig::default());
    let (wl, rec) = Log::open(
        walk,
        0,
        REGION,
        &LogOptions {
            read_only: true,
            clean_shutdown: true,
            ..opts()
        },
    )
    .expect("walk");
    assert_eq!(rec.next_lsn, next, "{what}: the walk's tail");
    assert_eq!(read_all(&wl), written, "{what}: walked records");
    // The resumed log appends after the saved records, and the record is armed again.
    let a = log
        .append(b"after the resume", ForcePolicy::Sync)
        .expect("append");
    assert_eq!(a.lsn, next);
    assert_eq!(
        pmem::fof::read(log.medium(), RECORD)
            .expect("record")
            .state(),
        FofState::Armed
    );
}

#[test]
fn a_saved_log_resumes_from_its_hints_without_a_walk() {
    let sim = Arc::new(SimMedium::from_image(
        base_image(),
        SimConfig {
            domain: SimDomain::FlushOnFail,
            ..SimConfig::default()
        },
    ));
    let (log, target, written) = run(&sim, 30, 2);
    let pf = PowerFail::new(
        Window::deadline_ms(60_000.0).unwrap(),
        SaveCost::new(1e9, Duration::from_nanos(10), Duration::ZERO).unwrap(),
    );
    let saver = SaveThread::spawn(&pf, HoldPolicy::HoldUntilClear).expect("save thread");
    let _reg = pf.register(target.clone());
    let manual = saver.manual("test", Window::deadline_ms(60_000.0).unwrap());
    manual.raise();
    match saver.recv(HANG) {
        Some(Record::Saved { outcome, .. }) => assert!(outcome.is_durable(), "{outcome}"),
        other => panic!("expected a save, got {other:?}"),
    }
    let next = log.next_lsn();
    // The power fails during the held window: every fate resumes with every record.
    for (fate, img) in sim.power_fail_state().fates() {
        assert_resumes(img, &written, next, &format!("{fate:?}"));
    }
}

#[test]
fn a_power_failure_at_every_fence_of_the_save_resumes_or_recovers_a_prefix() {
    let (mut resumed, mut missed) = (0, 0);
    for n in 1u64.. {
        // The same appends (one thread: the same fences every run), then the save; the medium
        // crashes at the save's n-th fence.
        let dry = Arc::new(SimMedium::from_image(
            base_image(),
            SimConfig {
                domain: SimDomain::FlushOnFail,
                ..SimConfig::default()
            },
        ));
        run(&dry, 24, 1);
        let before = dry.fences();
        let sim = Arc::new(SimMedium::from_image(
            base_image(),
            SimConfig {
                seed: n,
                domain: SimDomain::FlushOnFail,
                crash: CrashPlan::AtFence(before + n),
                images_per_crash: 6,
                ..SimConfig::default()
            },
        ));
        let (log, target, written) = run(&sim, 24, 1);
        assert_eq!(
            sim.fences(),
            before,
            "the appends issue the same fences every run"
        );
        target.stop_writers();
        let r = target.save(Instant::now() + HANG);
        let Some(st) = sim.crash_state() else {
            assert!(r.is_ok());
            break;
        };
        let next = log.next_lsn();
        for (fate, img) in st.fates() {
            let probe = SimMedium::from_image(img.clone(), SimConfig::default());
            let what = format!("save fence {n} {fate:?}");
            match pmem::fof::read(&probe, RECORD).expect("record").state() {
                FofState::Saved => {
                    resumed += 1;
                    assert_resumes(img, &written, next, &what);
                }
                FofState::Armed => {
                    missed += 1;
                    let sim = SimMedium::from_image(img, SimConfig::default());
                    let (l, how) = log::fof::open(sim, 0, REGION, RECORD, 0, &opts()).expect(&what);
                    assert!(matches!(how, Opened::MissedWindow(_)), "{what}");
                    let got = read_all(&l);
                    // A genuine contiguous run of what was written (a prefix from the head).
                    let start = written.iter().position(|w| Some(w) == got.first());
                    if let Some(s) = start {
                        assert_eq!(&written[s..s + got.len()], &got[..], "{what}");
                    } else {
                        assert!(got.is_empty(), "{what}: records never written");
                    }
                }
                FofState::None => panic!("{what}: the record was lost"),
            }
        }
    }
    assert!(
        resumed > 0 && missed > 0,
        "{resumed} resumed, {missed} missed"
    );
    println!("save crash images: {resumed} resumed from a saved record, {missed} missed-window");
}

#[test]
fn the_hook_refuses_hints_while_an_append_is_between_reserve_and_complete() {
    let sim = SimMedium::from_image(
        base_image(),
        SimConfig {
            domain: SimDomain::FlushOnFail,
            ..SimConfig::default()
        },
    );
    let (log, _) = log::fof::open(&sim, 0, REGION, RECORD, 0, &opts()).expect("open");
    log.append(b"one", ForcePolicy::Sync).expect("append");
    let ok = log.resume_hints().expect("a safe point");
    assert_eq!(ok[1], log.next_lsn());
    let r = log.reserve(100).expect("reserve");
    let e = log.resume_hints().expect_err("a reservation is in flight");
    assert!(e.contains("not at a safe point"), "{e}");
    r.complete().expect("complete");
    assert_eq!(log.resume_hints().expect("safe again")[1], log.next_lsn());
}

/// A saved image whose hints do not fit is walked as after a clean shutdown (same records);
/// damage to a record in a saved image is refused with the typed error, and the refused open
/// writes nothing (the record stays saved).
#[test]
fn hints_that_do_not_fit_walk_and_damage_in_a_saved_image_refuses() {
    let sim = Arc::new(SimMedium::from_image(
        base_image(),
        SimConfig {
            domain: SimDomain::FlushOnFail,
            ..SimConfig::default()
        },
    ));
    let (log, target, written) = run(&sim, 10, 2);
    target.stop_writers();
    target.save(Instant::now() + HANG).expect("save");
    let next = log.next_lsn();
    let saved = sim.power_fail();
    // Hints that do not fit (a tail off the record grid, as a torn hint would give if the
    // record's CRC passed): the log is walked instead.
    let probe = SimMedium::from_image(saved.clone(), SimConfig::default());
    let hints = pmem::fof::read(&probe, RECORD)
        .unwrap()
        .record
        .unwrap()
        .hints;
    let mut bad = saved.clone();
    let at = RECORD
        + (pmem::fof::read(&probe, RECORD)
            .unwrap()
            .record
            .unwrap()
            .sequence
            % 2) as usize
            * pmem::fof::COPY_BYTES;
    let rec = pmem::fof::FofRecord {
        hints: vec![hints[0] + 1, hints[1]],
        ..pmem::fof::read(&probe, RECORD).unwrap().record.unwrap()
    };
    bad[at..at + pmem::fof::COPY_BYTES].copy_from_slice(&rec.encode());
    let (l, how) = log::fof::open(
        SimMedium::from_image(bad, SimConfig::default()),
        0,
        REGION,
        RECORD,
        0,
        &opts(),
    )
    .expect("walk");
    assert!(matches!(how, Opened::SavedWalked(_)), "{how:?}");
    assert_eq!(read_all(&l), written);
    assert_eq!(l.next_lsn(), next);
    // A damaged payload byte of the last record: refused, nothing written.
    let walk = SimMedium::from_image(saved.clone(), SimConfig::default());
    let (wl, _) = Log::open(
        &walk,
        0,
        REGION,
        &LogOptions {
            read_only: true,
            clean_shutdown: true,
            ..opts()
        },
    )
    .expect("walk");
    let victim = wl
        .entries()
        .filter(|e| e.kind == "data")
        .last()
        .expect("a record");
    let mut damaged = saved;
    damaged[victim.offset as usize + 40] ^= 0x10;
    // Force the walk: hints that do not fit.
    damaged[at..at + pmem::fof::COPY_BYTES].copy_from_slice(&rec.encode());
    let m = SimMedium::from_image(damaged.clone(), SimConfig::default());
    let err = log::fof::open(&m, 0, REGION, RECORD, 0, &opts())
        .map(|_| ())
        .expect_err("damage in a whole image");
    assert!(err.corruption().is_some(), "{err}");
    assert!(m.durable_image() == damaged, "the refused open wrote");
}

/// The log opened on a `pmem::fof::Tracked` medium feeds the save's page tracker: a tracked
/// write-back (fewer lines than the whole region) saves every record, and the image resumes.
#[test]
fn a_tracked_write_back_saves_a_log_on_a_tracked_medium() {
    let sim = Arc::new(SimMedium::from_image(
        base_image(),
        SimConfig {
            domain: SimDomain::FlushOnFail,
            ..SimConfig::default()
        },
    ));
    let dirty = Arc::new(pmem::fof::DirtyPages::new(LEN));
    let tracked = Arc::new(pmem::fof::Tracked::new(sim.clone(), dirty.clone()));
    let (log, _) = log::fof::open(tracked, 0, REGION, RECORD, 0, &opts()).expect("open");
    let log = Arc::new(log);
    let gate = Arc::new(WriterGate::new());
    let target = PoolTarget::new(
        "tracked log pool",
        sim.clone(),
        vec![(0, REGION)],
        RECORD,
        gate.clone(),
        Some(dirty.clone()),
        WriteBack::Tracked,
    )
    .expect("target");
    target.add_hook(Arc::new(LogHook::new(log.clone())));
    target.arm().expect("arm");
    let mut written = Vec::new();
    for i in 0..6 {
        let _g = gate.enter();
        let p = payload(0, i);
        let a = log.append(&p, ForcePolicy::Sync).expect("append");
        written.push((a.lsn, p));
    }
    target.stop_writers();
    let r = target.save(Instant::now() + HANG).expect("save");
    let plan = target.last_plan().expect("plan");
    assert_eq!(plan.mode, WriteBack::Tracked);
    assert!(
        r.lines_written_back < (REGION / 64) as u64,
        "{} lines: not fewer than the region's",
        r.lines_written_back
    );
    let next = log.next_lsn();
    for (fate, img) in sim.power_fail_state().fates() {
        assert_resumes(img, &written, next, &format!("tracked {fate:?}"));
    }
}
