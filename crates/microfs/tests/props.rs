//! Property tests of the allocator and the index: random sequences of calls against a model
//! (paths to contents), with reopen (recovery) and checkpoints in between. After every call the
//! namespace equals the model; `check` finds nothing (each hugeblock owned once, the free pool
//! exactly the unused blocks, directory files equal to the index); the hugeblocks in use are
//! exactly those the file sizes and directory files need.

use std::collections::BTreeMap;
use std::sync::Arc;

use microfs::device::{Device, MemDevice};
use microfs::{Fs, FsOptions, Kind, NamespaceId};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Call {
    Mkdir(u8),
    Create(u8, u8),
    Write(u8, u8, u16, u16),
    Truncate(u8, u8, u16),
    Unlink(u8, u8),
    Rmdir(u8),
    Rename(u8, u8, u8, u8),
    Reopen,
    Checkpoint,
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        (0..3u8).prop_map(Call::Mkdir),
        (0..4u8, 0..5u8).prop_map(|(d, f)| Call::Create(d, f)),
        (0..4u8, 0..5u8, 0..20000u16, 1..9000u16).prop_map(|(d, f, o, n)| Call::Write(d, f, o, n)),
        (0..4u8, 0..5u8, 0..20000u16).prop_map(|(d, f, l)| Call::Truncate(d, f, l)),
        (0..4u8, 0..5u8).prop_map(|(d, f)| Call::Unlink(d, f)),
        (0..3u8).prop_map(Call::Rmdir),
        (0..4u8, 0..5u8, 0..4u8, 0..5u8).prop_map(|(a, b, c, d)| Call::Rename(a, b, c, d)),
        Just(Call::Reopen),
        Just(Call::Checkpoint),
    ]
}

/// Directory 3 is the root.
fn dir(d: u8) -> String {
    if d == 3 {
        String::new()
    } else {
        format!("d{d}")
    }
}
fn file(d: u8, f: u8) -> String {
    if d == 3 {
        format!("f{f}")
    } else {
        format!("d{d}/f{f}")
    }
}

type Model = BTreeMap<String, Option<Vec<u8>>>;

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
            if e.kind == Kind::Dir {
                out.insert(p.clone(), None);
                stack.push((p, e.ino));
            } else {
                let n = fs.stat(e.ino).unwrap().size as usize;
                let mut b = vec![0u8; n];
                fs.read_at(e.ino, 0, &mut b).unwrap();
                out.insert(p, Some(b));
            }
        }
    }
    out
}

fn exists_dir(m: &Model, d: u8) -> bool {
    d == 3 || m.get(&dir(d)) == Some(&None)
}

fn opts() -> FsOptions {
    FsOptions {
        hugeblock: 4096,
        log_bytes: 20 << 10,
        window: 2,
        background_checkpoint: false,
        ..FsOptions::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn calls_match_the_model(calls in proptest::collection::vec(call(), 1..60)) {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(4 << 20));
        let mut fs = Fs::format(dev.clone(), &opts(), &NamespaceId::default()).unwrap();
        let total = fs.stats().blocks_total;
        let mut m = Model::new();
        let mut seed = 1u8;
        for c in &calls {
            match c {
                Call::Mkdir(d) => {
                    let r = fs.mkdir(&dir(*d), 0o755);
                    prop_assert_eq!(r.is_ok(), !m.contains_key(&dir(*d)));
                    m.insert(dir(*d), None);
                }
                Call::Create(d, f) => {
                    let p = file(*d, *f);
                    let r = fs.create(&p, 0o644, false, false);
                    let ok = exists_dir(&m, *d) && m.get(&p).is_none_or(|v| v.is_some());
                    prop_assert_eq!(r.is_ok(), ok, "{:?}", r);
                    if ok {
                        m.entry(p).or_insert(Some(Vec::new()));
                    }
                }
                Call::Write(d, f, off, n) => {
                    let p = file(*d, *f);
                    if let Some(Some(content)) = m.get_mut(&p) {
                        seed = seed.wrapping_add(1);
                        let data: Vec<u8> = (0..*n).map(|i| (i as u8) ^ seed).collect();
                        let ino = fs.lookup(&p).unwrap();
                        fs.write_at(ino, *off as u64, &data).unwrap();
                        let end = *off as usize + data.len();
                        if content.len() < end {
                            content.resize(end, 0);
                        }
                        content[*off as usize..end].copy_from_slice(&data);
                    }
                }
                Call::Truncate(d, f, len) => {
                    let p = file(*d, *f);
                    if let Some(Some(content)) = m.get_mut(&p) {
                        fs.truncate(fs.lookup(&p).unwrap(), *len as u64).unwrap();
                        content.resize(*len as usize, 0);
                    }
                }
                Call::Unlink(d, f) => {
                    let p = file(*d, *f);
                    let r = fs.unlink(&p);
                    prop_assert_eq!(r.is_ok(), matches!(m.get(&p), Some(Some(_))));
                    m.remove(&p);
                }
                Call::Rmdir(d) => {
                    let p = dir(*d);
                    let empty = !m.keys().any(|k| k.starts_with(&format!("{p}/")));
                    let r = fs.rmdir(&p);
                    prop_assert_eq!(r.is_ok(), m.get(&p) == Some(&None) && empty, "{:?}", r);
                    if r.is_ok() {
                        m.remove(&p);
                    }
                }
                Call::Rename(a, b, c, d) => {
                    let (from, to) = (file(*a, *b), file(*c, *d));
                    let ok = matches!(m.get(&from), Some(Some(_))) && exists_dir(&m, *c) && m.get(&to).is_none_or(|v| v.is_some());
                    let r = fs.rename(&from, &to);
                    prop_assert_eq!(r.is_ok(), ok, "{} -> {}: {:?}", from, to, r);
                    if ok && from != to {
                        let v = m.remove(&from).unwrap();
                        m.insert(to, v);
                    }
                }
                Call::Reopen => {
                    drop(fs);
                    fs = Fs::open(dev.clone(), &opts()).unwrap().0;
                }
                Call::Checkpoint => fs.checkpoint().unwrap(),
            }
            prop_assert_eq!(&snapshot(&fs), &m, "after {:?}", c);
            let r = fs.check().unwrap();
            prop_assert!(r.findings.is_empty(), "after {:?}: {:?}", c, r.findings);
            // The pool and the check agree; no file holds a block past its size.
            let s = fs.stats();
            prop_assert_eq!(r.blocks_used + r.blocks_free, total);
            prop_assert_eq!(s.blocks_free, r.blocks_free);
            for (p, v) in &m {
                if let Some(content) = v {
                    let st = fs.stat(fs.lookup(p).unwrap()).unwrap();
                    prop_assert!(st.blocks * 512 / 4096 <= (content.len() as u64).div_ceil(4096), "{}: {:?}", p, st);
                }
            }
        }
        drop(fs);
        let (fs, _) = Fs::open(dev, &opts()).unwrap();
        prop_assert_eq!(snapshot(&fs), m);
    }
}
