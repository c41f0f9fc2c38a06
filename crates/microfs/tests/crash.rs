//! Crash consistency on the persistence simulator: a namespace on a `MediumDevice` over a
//! `SimMedium`, so every device write (data, log record, write-extent slot, checkpoint slot,
//! superblock) is a persist point. For each sequence, power fails before every fence in turn;
//! every crash image worth checking (all outcomes of the open lines, or a covering set) is
//! recovered and checked:
//! - recovery never fails;
//! - every call that returned is there (files, sizes, bytes), the call in flight is either
//!   wholly there or wholly absent (for a write in flight: size old or new, each byte old or new);
//! - `check` finds nothing: each hugeblock in at most one file, the free pool exactly the blocks
//!   no file uses, directory files equal to the index;
//! - the recovered namespace takes new calls, and recovers again to the same state.

use std::collections::BTreeMap;
use std::sync::Arc;

use microfs::device::{Device, MediumDevice, MemDevice};
use microfs::{Fs, FsOptions, Kind, NamespaceId};
use pmem::sim::{CrashPlan, SimConfig, SimMedium};

const DEV: usize = 2 << 20;

#[derive(Debug, Clone)]
enum Step {
    Mkdir(&'static str),
    Create(&'static str),
    Write(&'static str, u64, Vec<u8>),
    Truncate(&'static str, u64),
    Unlink(&'static str),
    Rmdir(&'static str),
    Rename(&'static str, &'static str),
    Checkpoint,
}

/// Path -> Some(bytes) for a file, None for a directory.
type Model = BTreeMap<String, Option<Vec<u8>>>;

fn apply(m: &mut Model, s: &Step) {
    match s {
        Step::Mkdir(p) => {
            m.insert(p.to_string(), None);
        }
        Step::Create(p) => {
            m.entry(p.to_string()).or_insert(Some(Vec::new()));
        }
        Step::Write(p, off, data) => {
            let f = m.get_mut(*p).unwrap().as_mut().unwrap();
            let end = *off as usize + data.len();
            if f.len() < end {
                f.resize(end, 0);
            }
            f[*off as usize..end].copy_from_slice(data);
        }
        Step::Truncate(p, len) => {
            m.get_mut(*p)
                .unwrap()
                .as_mut()
                .unwrap()
                .resize(*len as usize, 0);
        }
        Step::Unlink(p) | Step::Rmdir(p) => {
            m.remove(*p);
        }
        Step::Rename(a, b) => {
            let moved: Vec<(String, Option<Vec<u8>>)> = m
                .iter()
                .filter(|(k, _)| *k == a || k.starts_with(&format!("{a}/")))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            m.retain(|k, _| !(k == b || k.starts_with(&format!("{b}/"))));
            for (k, v) in moved {
                m.remove(&k);
                m.insert(format!("{b}{}", &k[a.len()..]), v);
            }
        }
        Step::Checkpoint => {}
    }
}

fn run(fs: &Fs, s: &Step) -> microfs::Result<()> {
    match s {
        Step::Mkdir(p) => fs.mkdir(p, 0o755).map(|_| ()),
        Step::Create(p) => fs.create(p, 0o644, false, false).map(|_| ()),
        Step::Write(p, off, data) => {
            let ino = fs.lookup(p)?;
            fs.write_at(ino, *off, data).map(|_| ())?;
            fs.fsync(ino)
        }
        Step::Truncate(p, len) => fs.truncate(fs.lookup(p)?, *len),
        Step::Unlink(p) => fs.unlink(p),
        Step::Rmdir(p) => fs.rmdir(p),
        Step::Rename(a, b) => fs.rename(a, b),
        Step::Checkpoint => fs.checkpoint(),
    }
}

fn snapshot(fs: &Fs) -> Model {
    let mut out = Model::new();
    let mut stack = vec![(String::new(), fs.lookup("").unwrap())];
    while let Some((path, ino)) = stack.pop() {
        for e in fs.readdir(ino).unwrap() {
            let p = if path.is_empty() {
                e.name.clone()
            } else {
                format!("{path}/{}", e.name)
            };
            match e.kind {
                Kind::Dir => {
                    out.insert(p.clone(), None);
                    stack.push((p, e.ino));
                }
                Kind::File => {
                    let size = fs.stat(e.ino).unwrap().size as usize;
                    let mut b = vec![0u8; size];
                    assert_eq!(fs.read_at(e.ino, 0, &mut b).unwrap(), size);
                    out.insert(p, Some(b));
                }
            }
        }
    }
    out
}

/// Does `got` match the model before the step in flight (`old`) or after it (`new`)? A write in
/// flight may have put any of its bytes on the device.
fn matches(got: &Model, old: &Model, new: &Model, in_flight: Option<&Step>) -> bool {
    if got == old || got == new {
        return true;
    }
    let Some(Step::Write(p, _, _)) = in_flight else {
        return false;
    };
    let others = |m: &Model| -> Model {
        m.iter()
            .filter(|(k, _)| k != p)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    if others(got) != others(old) {
        return false;
    }
    let (Some(Some(g)), Some(Some(o)), Some(Some(n))) = (got.get(*p), old.get(*p), new.get(*p))
    else {
        return false;
    };
    (g.len() == o.len() || g.len() == n.len())
        && g.iter()
            .enumerate()
            .all(|(i, &b)| b == *o.get(i).unwrap_or(&0) || b == *n.get(i).unwrap_or(&0))
}

/// Paths with sizes and a checksum, for messages.
fn brief(m: &Model) -> String {
    m.iter()
        .map(|(k, v)| match v {
            None => format!("{k}/"),
            Some(b) => format!("{k}({} bytes, crc {:08x})", b.len(), crc32c::crc32c(b)),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn opts(hugeblock: u32, log_bytes: u64, window: usize) -> FsOptions {
    FsOptions {
        hugeblock,
        log_bytes,
        window,
        background_checkpoint: false,
        ..FsOptions::default()
    }
}

fn sim_dev(sim: &Arc<SimMedium>) -> Arc<dyn Device> {
    Arc::new(MediumDevice::new(sim.clone(), 0, DEV).unwrap())
}

fn mem_dev(img: &[u8]) -> Arc<dyn Device> {
    let d = MemDevice::new(img.len());
    d.write_at(0, img).unwrap();
    Arc::new(d)
}

/// A formatted namespace after `setup`, as a durable image.
fn base_image(o: &FsOptions, setup: &[Step]) -> Vec<u8> {
    let sim = Arc::new(SimMedium::new(DEV, SimConfig::default()));
    let fs = Fs::format(
        sim_dev(&sim),
        o,
        &NamespaceId {
            job: "crash".into(),
            rank: 1,
        },
    )
    .unwrap();
    for s in setup {
        run(&fs, s).unwrap();
    }
    drop(fs);
    sim.durable_image()
}

fn check_image(
    img: Vec<u8>,
    o: &FsOptions,
    old: &Model,
    new: &Model,
    in_flight: Option<&Step>,
    fence: u64,
) {
    let dev = mem_dev(&img);
    let (fs, rec) =
        Fs::open(dev.clone(), o).unwrap_or_else(|e| panic!("fence {fence}: recovery failed: {e}"));
    let got = snapshot(&fs);
    assert!(
        matches(&got, old, new, in_flight),
        "fence {fence}: recovered {}\nexpected {}\nor {} (in flight {:?}); recovery {rec:?}",
        brief(&got),
        brief(old),
        brief(new),
        in_flight.map(|s| match s {
            Step::Write(p, o, d) => format!("write {p} at {o}, {} bytes", d.len()),
            s => format!("{s:?}"),
        })
    );
    let r = fs.check().unwrap();
    assert!(
        r.findings.is_empty(),
        "fence {fence}: check found {:?}",
        r.findings
    );
    // The recovered namespace works, and recovers to the same state again.
    let ino = fs.create("after-crash", 0o644, false, true).unwrap();
    fs.write_at(ino, 0, b"after").unwrap();
    let mut want = snapshot(&fs);
    drop(fs);
    let (fs, _) =
        Fs::open(dev, o).unwrap_or_else(|e| panic!("fence {fence}: second recovery failed: {e}"));
    assert_eq!(
        snapshot(&fs),
        want,
        "fence {fence}: second recovery differs"
    );
    let r = fs.check().unwrap();
    assert!(
        r.findings.is_empty(),
        "fence {fence}: check after the second recovery: {:?}",
        r.findings
    );
    want.clear();
}

/// Crash before every fence of `steps` (run on a namespace made by `setup`), check every image.
fn crash_everywhere(o: &FsOptions, setup: &[Step], steps: &[Step]) -> (u64, u64) {
    let base = base_image(o, setup);
    let mut models = vec![Model::new()];
    {
        let mut m = Model::new();
        for s in setup {
            apply(&mut m, s);
        }
        models[0] = m;
    }
    for s in steps {
        let mut m = models.last().unwrap().clone();
        apply(&mut m, s);
        models.push(m);
    }
    let (mut points, mut images) = (0u64, 0u64);
    for n in 1.. {
        let sim = Arc::new(SimMedium::from_image(
            base.clone(),
            SimConfig {
                seed: 0x5eed ^ n,
                crash: CrashPlan::AtFence(n),
                ..SimConfig::default()
            },
        ));
        let mut done = 0usize;
        match Fs::open(sim_dev(&sim), o) {
            Ok((fs, _)) => {
                for s in steps {
                    if run(&fs, s).is_err() {
                        break;
                    }
                    done += 1;
                }
            }
            Err(_) => assert!(sim.crashed(), "open failed without a crash"),
        }
        let Some(state) = sim.crash_state() else {
            assert_eq!(done, steps.len());
            break;
        };
        points += 1;
        let (old, new) = (&models[done], &models[(done + 1).min(steps.len())]);
        for img in state.images() {
            images += 1;
            check_image(img, o, old, new, steps.get(done), n);
        }
    }
    println!("crash points {points}, images checked {images}");
    assert!(points > steps.len() as u64, "every step has crash points");
    (points, images)
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed) | 1)
        .collect()
}

#[test]
fn create_write_fsync() {
    let o = opts(4096, 64 << 10, 2);
    crash_everywhere(
        &o,
        &[],
        &[
            Step::Mkdir("d"),
            Step::Create("d/f"),
            Step::Write("d/f", 0, bytes(5000, 1)),
            Step::Write("d/f", 5000, bytes(5000, 2)),
            Step::Write("d/f", 10000, bytes(300, 3)),
            Step::Create("d/g"),
            Step::Write("d/g", 100, bytes(9000, 4)),
        ],
    );
}

#[test]
fn many_coalesced_writes_interleaved_and_rewrites() {
    let o = opts(4096, 64 << 10, 2);
    let mut steps = vec![Step::Create("a"), Step::Create("b"), Step::Create("c")];
    for k in 0..4u64 {
        steps.push(Step::Write("a", k * 3000, bytes(3000, k as u8)));
        steps.push(Step::Write("b", k * 2000, bytes(2000, 50 + k as u8)));
    }
    // A third file evicts the oldest run from the window; a non-adjacent write folds.
    steps.push(Step::Write("c", 0, bytes(100, 9)));
    steps.push(Step::Write("a", 50_000, bytes(100, 10)));
    steps.push(Step::Write("a", 1000, bytes(500, 11)));
    crash_everywhere(&o, &[], &steps);
}

#[test]
fn mkdir_rename_unlink_rmdir() {
    let o = opts(4096, 64 << 10, 1);
    crash_everywhere(
        &o,
        &[
            Step::Mkdir("keep"),
            Step::Create("keep/old"),
            Step::Write("keep/old", 0, bytes(6000, 5)),
        ],
        &[
            Step::Mkdir("a"),
            Step::Create("a/x"),
            Step::Write("a/x", 0, bytes(4500, 6)),
            Step::Rename("a/x", "keep/old"),
            Step::Mkdir("a/sub"),
            Step::Rename("a", "b"),
            Step::Rmdir("b/sub"),
            Step::Create("b/y"),
            Step::Unlink("b/y"),
            Step::Rmdir("b"),
            Step::Unlink("keep/old"),
        ],
    );
}

#[test]
fn truncate_shrink_and_extend() {
    let o = opts(4096, 64 << 10, 1);
    crash_everywhere(
        &o,
        &[Step::Create("f"), Step::Write("f", 0, bytes(14000, 7))],
        &[
            Step::Truncate("f", 6000),
            Step::Write("f", 9000, bytes(100, 8)),
            Step::Truncate("f", 0),
            Step::Write("f", 0, bytes(5000, 9)),
            Step::Truncate("f", 20000),
        ],
    );
}

#[test]
fn hugeblock_reuse_after_unlink() {
    let o = opts(4096, 64 << 10, 1);
    // Fill most of the pool, so that the new file must take the blocks the unlink frees.
    let free_blocks = {
        let img = base_image(&o, &[]);
        let (fs, _) = Fs::open(mem_dev(&img), &o).unwrap();
        fs.stats().blocks_free as usize
    };
    let big = (free_blocks - 6) * 4096;
    crash_everywhere(
        &o,
        &[
            Step::Create("big"),
            Step::Write("big", 0, bytes(big, 1)),
            Step::Create("small"),
        ],
        &[
            Step::Unlink("big"),
            Step::Write("small", 0, bytes(12 * 4096, 2)),
            Step::Create("big2"),
            Step::Write("big2", 0, bytes(4 * 4096, 3)),
        ],
    );
}

#[test]
fn crash_during_checkpoints_and_log_wrap() {
    // A log of 16 KiB of ring: the inline checkpoint at half fill runs several times.
    let o = FsOptions {
        checkpoint_log_fill: 0.5,
        ..opts(4096, 20 << 10, 1)
    };
    let mut steps = vec![Step::Mkdir("d"), Step::Checkpoint];
    for i in 0..12u8 {
        let name: &'static str = Box::leak(format!("d/f{i}").into_boxed_str());
        steps.push(Step::Create(name));
        steps.push(Step::Write(name, 0, bytes(700, i)));
        if i % 4 == 3 {
            steps.push(Step::Checkpoint);
        }
        if i % 3 == 0 {
            steps.push(Step::Unlink(name));
        }
    }
    crash_everywhere(&o, &[], &steps);
}

#[test]
fn format_interrupted_is_blank_or_whole() {
    let o = opts(4096, 64 << 10, 1);
    for n in 1.. {
        let sim = Arc::new(SimMedium::new(
            DEV,
            SimConfig {
                seed: n,
                crash: CrashPlan::AtFence(n),
                ..SimConfig::default()
            },
        ));
        let r = Fs::format(sim_dev(&sim), &o, &NamespaceId::default());
        let Some(state) = sim.crash_state() else {
            r.unwrap();
            break;
        };
        for img in state.images() {
            match Fs::open(mem_dev(&img), &o) {
                Err(microfs::FsError::Unformatted { .. }) => {}
                Ok((fs, _)) => {
                    assert!(fs.readdir(fs.lookup("").unwrap()).unwrap().is_empty());
                    assert!(fs.check().unwrap().findings.is_empty());
                }
                Err(e) => panic!("fence {n}: an interrupted format reads as {e}"),
            }
        }
    }
}

/// A valid random sequence of steps (checked against the model as it is made), from `seed`.
fn random_steps(seed: u64, n: usize) -> (Vec<Step>, Vec<Step>) {
    let mut rng = pmem::rng::SplitMix64::new(seed);
    let mut next = move |m: u64| rng.below(m);
    let names: &[&'static str] = &["a", "b", "d/c", "d/e", "d2/f", "d/sub/g"];
    let dirs: &[&'static str] = &["d", "d2", "d/sub"];
    let setup = vec![
        Step::Mkdir("d"),
        Step::Create("a"),
        Step::Write("a", 0, bytes(9000, 3)),
    ];
    let mut m = Model::new();
    for s in &setup {
        apply(&mut m, s);
    }
    let parent_ok = |m: &Model, p: &str| match p.rsplit_once('/') {
        None => true,
        Some((d, _)) => m.get(d) == Some(&None),
    };
    let mut steps = Vec::new();
    while steps.len() < n {
        let s = match next(9) {
            0 => {
                let d = dirs[next(dirs.len() as u64) as usize];
                if m.contains_key(d) || !parent_ok(&m, d) {
                    continue;
                }
                Step::Mkdir(d)
            }
            1 | 2 => {
                let f = names[next(names.len() as u64) as usize];
                if m.get(f) == Some(&None) || !parent_ok(&m, f) {
                    continue;
                }
                if !m.contains_key(f) {
                    Step::Create(f)
                } else {
                    let off = next(20000);
                    Step::Write(f, off, bytes(1 + next(9000) as usize, next(250) as u8))
                }
            }
            3 => {
                let f = names[next(names.len() as u64) as usize];
                if !matches!(m.get(f), Some(Some(_))) {
                    continue;
                }
                Step::Truncate(f, next(16000))
            }
            4 => {
                let f = names[next(names.len() as u64) as usize];
                if !matches!(m.get(f), Some(Some(_))) {
                    continue;
                }
                Step::Unlink(f)
            }
            5 => {
                let d = dirs[next(dirs.len() as u64) as usize];
                let empty = !m.keys().any(|k| k.starts_with(&format!("{d}/")));
                if m.get(d) != Some(&None) || !empty {
                    continue;
                }
                Step::Rmdir(d)
            }
            6 | 7 => {
                let (a, b) = (
                    names[next(names.len() as u64) as usize],
                    names[next(names.len() as u64) as usize],
                );
                if a == b
                    || !matches!(m.get(a), Some(Some(_)))
                    || m.get(b) == Some(&None)
                    || !parent_ok(&m, b)
                {
                    continue;
                }
                Step::Rename(a, b)
            }
            _ => Step::Checkpoint,
        };
        apply(&mut m, &s);
        steps.push(s);
    }
    (setup, steps)
}

#[test]
fn random_sequences_crash_everywhere() {
    for seed in 1..=4u64 {
        let (setup, steps) = random_steps(seed, 14);
        let o = FsOptions {
            window: 1 + (seed as usize % 3),
            ..opts(4096, 20 << 10, 1)
        };
        crash_everywhere(&o, &setup, &steps);
    }
}

#[test]
fn crash_while_a_checkpoint_compacts_a_directory_file() {
    // A large log, so that the setup takes no checkpoint: the first is the one under test.
    let o = opts(4096, 256 << 10, 1);
    let mut setup = vec![Step::Mkdir("d")];
    for i in 0..160 {
        let name: &'static str = Box::leak(format!("d/ckpt-step-{i:04}").into_boxed_str());
        setup.push(Step::Create(name));
        if i % 40 != 0 {
            setup.push(Step::Unlink(name));
        }
    }
    crash_everywhere(
        &o,
        &setup,
        &[
            Step::Checkpoint,
            Step::Create("d/after"),
            Step::Write("d/after", 0, bytes(5000, 1)),
            Step::Unlink("d/ckpt-step-0040"),
            Step::Checkpoint,
        ],
    );
}
