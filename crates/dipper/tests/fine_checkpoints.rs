//! Checkpoints that write only the changed 64-byte lines, under power failures.
//!
//! A toy machine keeps, per shard, a 12 KiB area and a growing list of 3000-byte blocks; its
//! operations change a few bytes of the area (most of them: a page of the slot then gets only
//! its changed lines) or add a block (new pages: written whole). The run takes five
//! checkpoints, so each shadow slot is written at least twice and its later writes carry the
//! lines changed over two checkpoints (the slot is two checkpoints behind the mirror); in a
//! growable pool (slot format 2) the later writes go into the spare frames of the changed
//! pages. A clean run must show fewer bytes written than whole pages from the third
//! checkpoint on (else the fine path is not exercised and the crash test proves nothing
//! about it). The run is crashed before every fence (every crash image of each point) and
//! at seeded random points; after each crash the store is reopened and every shard's arena
//! must be byte for byte the one after the acknowledged operations, or after those and the
//! one in flight. Pacing is on (default) in one run and off in the other: both end equal.

use std::sync::Arc;

use dipper::arena::{Arena, PAGE};
use dipper::{Dipper, DipperError, Layout, Machine, Options, Pacing, Result};
use pmem::{CrashPlan, Domain, OpenOptions, Pool, SimConfig, SimMedium};

const SHARDS: usize = 3;
const AREA: usize = 3 * PAGE;
const OPS: usize = 40;
const CHECKPOINT_AFTER: [usize; 5] = [6, 13, 20, 27, 34];

#[derive(Debug, Clone)]
struct Bytes;

fn corrupt(field: &'static str, found: usize) -> DipperError {
    DipperError::Corrupt {
        structure: "bytes op",
        offset: 0,
        field,
        expected: "a valid op".into(),
        found: found.to_string(),
    }
}

impl Machine for Bytes {
    type Output = ();

    fn init(&self, _shard: usize, arena: &mut Arena) -> Result<()> {
        let at = arena.alloc(AREA)?;
        arena.zero(at as usize, AREA);
        arena.set_user(0, at);
        Ok(())
    }

    fn apply(&self, _shard: usize, arena: &mut Arena, op: &[u8], _out: &mut ()) -> Result<()> {
        match op {
            [0, lo, hi, len, val] => {
                let off = u16::from_le_bytes([*lo, *hi]) as usize;
                let len = *len as usize;
                if off + len > AREA {
                    return Err(corrupt("range", off + len));
                }
                let base = arena.user(0) as usize;
                arena.write(base + off, &vec![*val; len]);
                Ok(())
            }
            [1, val] => {
                let at = arena.alloc_copy(&[*val; 3000])?;
                arena.set_user(1, at);
                arena.set_user(2, arena.user(2) + 1);
                Ok(())
            }
            _ => Err(corrupt("length", op.len())),
        }
    }
}

type Engine = Dipper<Arc<SimMedium>, Bytes>;

/// Operation `i`: the shards it touches (`None`: all) and its bytes.
fn op(i: usize) -> (Option<Vec<u16>>, Vec<u8>) {
    let ids = match i % 5 {
        0 => None,
        1 | 3 => Some(vec![(i % SHARDS) as u16]),
        2 => Some(vec![0, 2]),
        _ => Some(vec![1]),
    };
    let bytes = if i % 7 == 3 {
        vec![1, i as u8]
    } else {
        // A few bytes somewhere in the area, sometimes across a line or a page boundary.
        let off = ((i * 2531) % (AREA - 200)) as u16;
        let len = (1 + (i * 37) % 150) as u8;
        let [lo, hi] = off.to_le_bytes();
        vec![0, lo, hi, len, 0x40 + i as u8]
    };
    (ids, bytes)
}

/// Every shard's arena image after each prefix of the operations.
fn prefixes() -> Vec<Vec<Vec<u8>>> {
    let mut arenas: Vec<Arena> = (0..SHARDS)
        .map(|s| {
            let mut a = Arena::new();
            Bytes.init(s, &mut a).expect("init");
            a
        })
        .collect();
    let snap = |a: &[Arena]| a.iter().map(|a| a.image().to_vec()).collect::<Vec<_>>();
    let mut out = vec![snap(&arenas)];
    for i in 0..OPS {
        let (ids, bytes) = op(i);
        for (s, arena) in arenas.iter_mut().enumerate() {
            if ids.as_ref().is_none_or(|ids| ids.contains(&(s as u16))) {
                Bytes.apply(s, arena, &bytes, &mut ()).expect("apply");
            }
        }
        out.push(snap(&arenas));
    }
    out
}

fn options() -> Options {
    Options {
        background: false,
        ..Options::default()
    }
}

fn layout() -> Layout {
    Layout {
        log_bytes: 64 * 1024,
        slot_bytes: 1 << 20,
        shards: SHARDS,
        machine: 0,
    }
}

/// A closed, empty store, as an image: in a fixed pool (format-1 slots) or a growable one
/// (format 2: frames).
fn base_image(growable: bool) -> Vec<u8> {
    let sim = if growable {
        Arc::new(SimMedium::new(
            pmem::layout::POOL_SIZE_MIN as usize,
            SimConfig::default(),
        ))
    } else {
        Arc::new(SimMedium::new(4 << 20, SimConfig::default()))
    };
    let m = if growable {
        Pool::format_growable(Arc::clone(&sim), Domain::Sim).expect("format")
    } else {
        Pool::format(Arc::clone(&sim), Domain::Sim).expect("format")
    };
    let pool = Pool::open_medium(m, &OpenOptions::default()).expect("open");
    let (engine, _) = Dipper::create(pool, &layout(), Bytes, options()).expect("create");
    engine.close().expect("close");
    drop(engine);
    sim.durable_image()
}

fn open(sim: &Arc<SimMedium>) -> Result<Engine> {
    let pool = Pool::open_medium(Arc::clone(sim), &OpenOptions::default())?;
    Ok(Dipper::open(pool, Bytes, options())?.0)
}

/// Run the operations and checkpoints until they end or a call fails: (operations
/// acknowledged, the stats of each checkpoint taken).
fn drive(sim: &Arc<SimMedium>, pacing: Pacing) -> (usize, Vec<dipper::CheckpointStats>) {
    let Ok(e) = open(sim) else {
        return (0, Vec::new());
    };
    e.set_pacing(pacing).expect("pacing");
    let mut stats = Vec::new();
    for i in 0..OPS {
        let (ids, bytes) = op(i);
        if e.execute(ids.as_deref(), &bytes, true).is_err() {
            return (i, stats);
        }
        if CHECKPOINT_AFTER.contains(&(i + 1)) {
            match e.checkpoint() {
                Ok(st) => stats.push(st),
                Err(_) => return (i + 1, stats),
            }
        }
    }
    let _ = e.close();
    (OPS, stats)
}

fn check(image: Vec<u8>, acked: usize, expect: &[Vec<Vec<u8>>], what: &str) {
    let sim = Arc::new(SimMedium::from_image(image, SimConfig::default()));
    let e = open(&sim).unwrap_or_else(|err| panic!("{what}: recovery failed: {err}"));
    let got: Vec<Vec<u8>> = (0..SHARDS)
        .map(|s| e.read(s, |a| a.image().to_vec()).expect("read"))
        .collect();
    let ok = got == expect[acked] || (acked < OPS && got == expect[acked + 1]);
    assert!(
        ok,
        "{what}: the arenas are neither those after {acked} operations nor after one more"
    );
    // The recovered store keeps working: a checkpoint and a reopen give the same arenas.
    e.checkpoint()
        .unwrap_or_else(|err| panic!("{what}: checkpoint after recovery: {err}"));
    e.close().expect("close");
    drop(e);
    let again = open(&sim).expect("reopen");
    for (s, want) in got.iter().enumerate() {
        let back = again.read(s, |a| a.image().to_vec()).expect("read");
        assert!(&back == want, "{what}: shard {s} differs after a reopen");
    }
}

/// A clean run writes only changed lines from the third checkpoint on, and ends in the
/// state of every operation.
fn clean_run(growable: bool, pacing: Pacing) {
    let expect = prefixes();
    let sim = Arc::new(SimMedium::from_image(
        base_image(growable),
        SimConfig::default(),
    ));
    let (acked, stats) = drive(&sim, pacing);
    assert_eq!(acked, OPS);
    assert_eq!(stats.len(), CHECKPOINT_AFTER.len());
    for (k, st) in stats.iter().enumerate() {
        println!(
            "growable {growable}: checkpoint {k}: {} pages, {} bytes",
            st.pages, st.bytes
        );
        assert!(st.pages > 0 && st.bytes > 0, "checkpoint {k}: {st:?}");
        assert!(st.bytes <= st.pages * PAGE as u64, "checkpoint {k}: {st:?}");
        if k >= 3 {
            assert!(
                st.bytes < st.pages * PAGE as u64 / 2,
                "checkpoint {k} wrote {} bytes for {} pages: the changed lines were not \
                 written alone",
                st.bytes,
                st.pages
            );
        }
    }
    check(sim.durable_image(), OPS, &expect, "clean run");
}

#[test]
fn fixed_slots_write_only_changed_lines() {
    clean_run(false, Pacing::default());
    clean_run(false, Pacing::off());
}

#[test]
fn frames_write_only_changed_lines() {
    clean_run(true, Pacing::default());
    clean_run(true, Pacing::off());
}

fn crash_everywhere(growable: bool) {
    let expect = prefixes();
    let base = base_image(growable);
    // The engine needs an `Arc` medium, so the crash points of
    // `pmem::sim::crash_at_every_fence` (crash before fence n, n = 1, 2, ...) are driven here.
    let mut points = 0;
    let mut images = 0;
    for n in 1.. {
        let cfg = SimConfig {
            seed: 27 ^ n,
            crash: CrashPlan::AtFence(n),
            ..SimConfig::default()
        };
        let sim = Arc::new(SimMedium::from_image(base.clone(), cfg));
        let (acked, _) = drive(&sim, Pacing::default());
        let Some(state) = sim.crash_state() else {
            break;
        };
        points += 1;
        for img in state.images() {
            images += 1;
            check(img, acked, &expect, &format!("crash before fence {n}"));
        }
    }
    assert!(points > 40, "only {points} crash points");
    println!("{points} crash points, {images} images (growable: {growable})");
    let probe = Arc::new(SimMedium::from_image(base.clone(), SimConfig::default()));
    drive(&probe, Pacing::default());
    let events = probe.events();
    for seed in 0..40u64 {
        let cfg = SimConfig::default().at_random_event(seed, events);
        let sim = Arc::new(SimMedium::from_image(base.clone(), cfg));
        let (acked, _) = drive(&sim, Pacing::default());
        if let Some(img) = sim.crash_image() {
            check(img, acked, &expect, &format!("random crash, seed {seed}"));
        }
    }
}

#[test]
fn fixed_slots_survive_a_crash_at_every_fence() {
    crash_everywhere(false);
}

#[test]
fn frames_survive_a_crash_at_every_fence() {
    crash_everywhere(true);
}
