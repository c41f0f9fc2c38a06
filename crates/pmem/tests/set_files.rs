//! A pool on a set of three real files (on /dev/shm when there is one), under load: writer
//! threads run while one member file is deleted (and, in a second run, replaced by another
//! file). The member watch notices, the set goes degraded, no acknowledged write is lost, reads
//! are served degraded, and an online rebuild into a new file (writers still running) gives back
//! a logical pool byte-identical to the model of every acknowledged write, also after a reopen
//! from the files and with any one member left out.

use pmem::set::{self, MemberWatch, SetOpenOptions, StripedSet};
use pmem::{Mapping, Medium, OpenOptions, Pool};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

struct Scratch(PathBuf);
impl Scratch {
    fn new(tag: &str) -> Scratch {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let d = base.join(format!("kavach-set-files-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
    fn path(&self, n: &str) -> PathBuf {
        self.0.join(n)
    }
}
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const BLOCK: usize = 1024;
const THREADS: usize = 3;

fn pattern(seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..BLOCK)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

fn logical<M: Medium>(m: &M) -> Vec<u8> {
    let mut b = vec![0u8; m.len()];
    m.read(0, &mut b);
    b
}

/// A writer thread: it returns the (offset, bytes) it acknowledged.
type Writer = std::thread::JoinHandle<Vec<(usize, Vec<u8>)>>;

/// Writers on disjoint blocks of `[base, base + len)` until `stop`; each returns the blocks it
/// acknowledged (persist returned Ok), in order.
fn writers(
    set: &Arc<StripedSet<Mapping>>,
    base: usize,
    len: usize,
    round: u64,
    stop: &Arc<AtomicBool>,
    count: &Arc<AtomicU64>,
) -> Vec<Writer> {
    (0..THREADS)
        .map(|t| {
            let set = set.clone();
            let stop = stop.clone();
            let count = count.clone();
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let mut k = 0u64;
                'outer: loop {
                    for b in (t..len / BLOCK).step_by(THREADS) {
                        if stop.load(Ordering::Acquire) {
                            break 'outer;
                        }
                        let at = base + b * BLOCK;
                        let data = pattern(round << 40 | (t as u64) << 32 | k);
                        k += 1;
                        set.write(at, &data);
                        set.persist(at, BLOCK).expect("persist");
                        acked.push((at, data));
                        count.fetch_add(1, Ordering::AcqRel);
                    }
                }
                acked
            })
        })
        .collect()
}

fn apply(model: &mut [u8], hs: Vec<Writer>) -> usize {
    let mut n = 0;
    for h in hs {
        for (at, d) in h.join().expect("writer") {
            model[at..at + d.len()].copy_from_slice(&d);
            n += 1;
        }
    }
    n
}

/// Wait until the writers have acknowledged `more` writes beyond `from`.
fn wait_writes(count: &AtomicU64, from: u64, more: u64) {
    while count.load(Ordering::Acquire) < from + more {
        std::thread::yield_now();
    }
}

/// Wait (bounded) until the watch has switched the set to degraded.
fn wait_degraded(set: &StripedSet<Mapping>) {
    for _ in 0..2000 {
        if set.lost().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("the member watch never noticed the lost file");
}

fn run(tag: &str, lose: impl FnOnce(&Scratch, &Path)) {
    let s = Scratch::new(tag);
    let desc = s.path("s.pool");
    let paths = set::default_member_paths(&desc, 3);
    let made = StripedSet::create_files(&desc, &paths, 4 << 20, 64 << 10).expect("create");
    let domain = made.domain();
    let made = Pool::format(made, domain).expect("format");
    let mut pool = Pool::open_medium(Arc::new(made), &OpenOptions::default()).expect("pool");
    let region = pool
        .create_region("data", pmem::kinds::RAW, 2 << 20, pmem::Alignment::Page)
        .expect("region");
    let set = pool.medium().clone();
    let (base, len) = (region.offset as usize, region.length as usize);
    let mut model = logical(&*set);
    let watch = MemberWatch::start(set.clone(), Duration::from_millis(2));

    // Phase 1: healthy, under load.
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let hs = writers(&set, base, len, 1, &stop, &count);
    wait_writes(&count, 0, 500);
    stop.store(true, Ordering::Release);
    let acked1 = apply(&mut model, hs);
    let before = fnv(&logical(&*set));
    assert_eq!(before, fnv(&model), "healthy set differs from the model");

    // Phase 2: a member is lost while the writers run.
    let stop = Arc::new(AtomicBool::new(false));
    let hs = writers(&set, base, len, 2, &stop, &count);
    wait_writes(&count, count.load(Ordering::Acquire), 200);
    lose(&s, &paths[1]);
    wait_degraded(&set);
    // Writes acknowledged after the switch to degraded.
    wait_writes(&count, count.load(Ordering::Acquire), 500);
    stop.store(true, Ordering::Release);
    let acked2 = apply(&mut model, hs);
    let st = set.status();
    assert_eq!(st.state, "degraded");
    assert_eq!(st.lost.as_ref().map(|f| f.index), Some(1));
    assert!(
        logical(&*set) == model,
        "degraded reads differ from the acknowledged writes"
    );

    // Phase 3: online rebuild into a new file while writers run.
    let new = s.path("s.pool.1-new");
    let need = set.geometry().member_len(set.rows()) as u64;
    let mut target = Mapping::create(&new, need).expect("new member");
    target
        .reserve(pmem::pool::GROW_RESERVE_BYTES as usize)
        .expect("reserve");
    let stop = Arc::new(AtomicBool::new(false));
    let hs = writers(&set, base, len, 3, &stop, &count);
    // Halfway through the rebuild, let the writers land writes on rows on both sides of it.
    set.rebuild(target, |done, total| {
        if done == total / 2 {
            wait_writes(&count, count.load(Ordering::Acquire), 300);
        }
    })
    .expect("rebuild");
    stop.store(true, Ordering::Release);
    let acked3 = apply(&mut model, hs);
    drop(watch);
    assert_eq!(set.status().state, "healthy");
    assert_eq!(set.verify_parity().expect("verify"), Vec::<u64>::new());
    let after = fnv(&logical(&*set));
    assert_eq!(after, fnv(&model), "rebuilt set differs from the model");
    assert!(
        acked1 > 0 && acked2 > 0 && acked3 > 0,
        "{acked1} {acked2} {acked3}"
    );

    // Close, name the new member in the description, reopen from the files.
    drop(set);
    let set = pool.close().expect("close pool");
    // Closing the pool wrote its clean-shutdown state; the region is untouched.
    let closed = logical(&*set);
    assert!(closed[base..base + len] == model[base..base + len]);
    let after = fnv(&closed);
    Arc::try_unwrap(set)
        .expect("last handle")
        .close()
        .expect("close set");
    let mut names = paths.clone();
    names[1] = new.clone();
    set::write_description(&desc, &names, false).expect("description");
    let set = StripedSet::open_files(&desc, SetOpenOptions::default()).expect("reopen");
    assert_eq!(set.status().state, "healthy");
    assert_eq!(fnv(&logical(&set)), after);
    drop(set);
    for skip in 0..3 {
        let media = names
            .iter()
            .enumerate()
            .map(|(i, p)| {
                if i == skip {
                    Err("left out".to_string())
                } else {
                    Mapping::open(p, false).map_err(|e| e.to_string())
                }
            })
            .collect();
        let ro = SetOpenOptions {
            read_only: true,
            force: false,
        };
        let set = StripedSet::open(media, names.clone(), ro).expect("open without one");
        assert_eq!(fnv(&logical(&set)), after, "without member {skip}");
    }
}

#[test]
fn member_deleted_under_load_then_rebuilt_online() {
    run("deleted", |_, p| {
        std::fs::remove_file(p).expect("delete member")
    });
}

#[test]
fn member_replaced_by_another_file_under_load_then_rebuilt_online() {
    run("replaced", |s, p| {
        let other = s.path("intruder");
        std::fs::write(&other, vec![0u8; 8192]).expect("intruder");
        std::fs::rename(&other, p).expect("rename over the member");
    });
}
