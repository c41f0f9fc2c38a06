//! Two threads run a random mix of transactions through the typed API against a reference
//! model: allocations of every size range (small, multi-class, large), frees, overwrites,
//! aborted and nested transactions, and a shared set of slots under a `PMutex` where each
//! thread frees blocks the other allocated. At the end every slot matches the model, the
//! heap walks clean (no leak, no double allocation), and the durable image after a power
//! failure holds the same state.

use std::sync::{Arc, Mutex};

use heap::check::walk;
use heap::{Heap, HeapError, HeapOptions, PMutex, PPtr, RawHeap, Tx};
use pmem::rng::SplitMix64;
use pmem::{SimConfig, SimMedium};

heap::pool_tag!(Stress);

const LEN: u64 = 48 << 20;
const OWN: usize = 24;
const SHARED: usize = 12;
const OPS: usize = 8000;

#[derive(Clone, Copy, Default, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Slot {
    block: PPtr<u64, Stress>,
    words: u64,
    tag: u64,
}

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Root {
    own: [[Slot; OWN]; 2],
    shared: PMutex<[Slot; SHARED]>,
}

/// Model of a slot: (words, tag), or None.
type Model = Option<(u64, u64)>;

const WRITTEN: u64 = 32;

fn word(tag: u64, i: u64) -> u64 {
    tag.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i
}

fn sizes(r: &mut SplitMix64) -> u64 {
    match r.below(20) {
        0 => 40_000, // a large block (whole chunks)
        1..=3 => 500 + r.below(7000),
        _ => 1 + r.below(64),
    }
}

fn fill(tx: &mut Tx<'_, Stress>, p: PPtr<u64, Stress>, words: u64, tag: u64) -> heap::Result<()> {
    for i in 0..words.min(WRITTEN) {
        tx.set(p.at(i), word(tag, i))?;
    }
    Ok(())
}

fn new_block(tx: &mut Tx<'_, Stress>, words: u64, tag: u64) -> heap::Result<Slot> {
    let p = tx.alloc_array::<u64>(words)?;
    fill(tx, p, words, tag)?;
    Ok(Slot {
        block: p,
        words,
        tag,
    })
}

fn own_slot(root: PPtr<Root, Stress>, t: usize, i: usize) -> PPtr<Slot, Stress> {
    root.field::<Slot>(std::mem::offset_of!(Root, own))
        .at((t * OWN + i) as u64)
}

fn shared_lock(root: PPtr<Root, Stress>) -> PPtr<PMutex<[Slot; SHARED]>, Stress> {
    root.field(std::mem::offset_of!(Root, shared))
}

fn worker(
    h: &Heap<Stress>,
    root: PPtr<Root, Stress>,
    t: usize,
    shared: &Mutex<Vec<Model>>,
) -> Vec<Model> {
    let mut model: Vec<Model> = vec![None; OWN];
    let mut r = SplitMix64::new(0x57e5 + t as u64);
    let shared_ptr = shared_lock(root);
    for n in 0..OPS {
        let i = r.below(OWN as u64) as usize;
        let slot = own_slot(root, t, i);
        let tag = (t as u64) << 32 | n as u64;
        match r.below(20) {
            0..=5 if model[i].is_none() => {
                let words = sizes(&mut r);
                h.transaction(|tx| {
                    let s = new_block(tx, words, tag)?;
                    tx.set(slot, s)
                })
                .unwrap();
                model[i] = Some((words, tag));
            }
            0..=9 if model[i].is_some() => {
                h.transaction(|tx| {
                    let s = tx.get(slot)?;
                    tx.free(s.block)?;
                    tx.set(slot, Slot::default())
                })
                .unwrap();
                model[i] = None;
            }
            10..=13 if model[i].is_some() => {
                h.transaction(|tx| {
                    let s = tx.get(slot)?;
                    fill(tx, s.block, s.words, tag)?;
                    tx.set(slot, Slot { tag, ..s })
                })
                .unwrap();
                model[i] = model[i].map(|(w, _)| (w, tag));
            }
            14 | 15 => {
                // Aborted: changes everywhere, then an error.
                let e = h
                    .transaction(|tx| {
                        let s = tx.get(slot)?;
                        if !s.block.is_null() {
                            fill(tx, s.block, s.words, tag)?;
                            tx.free(s.block)?;
                        }
                        let fresh = new_block(tx, 1 + r.below(100), tag)?;
                        tx.set(slot, fresh)?;
                        Err::<(), _>(HeapError::Aborted)
                    })
                    .unwrap_err();
                assert!(matches!(e, HeapError::Aborted));
            }
            16 | 17 => {
                // Nested: the inner level allocates, the outer overwrites; both or neither.
                let words = sizes(&mut r);
                let j = (i + 1) % OWN;
                let other = own_slot(root, t, j);
                let ok = h
                    .transaction(|tx| {
                        tx.nested(|tx| {
                            let s = tx.get(slot)?;
                            tx.free(s.block)?;
                            let b = new_block(tx, words, tag)?;
                            tx.set(slot, b)
                        })?;
                        let s = tx.get(other)?;
                        if s.block.is_null() {
                            return Ok(false);
                        }
                        fill(tx, s.block, s.words, tag ^ 1)?;
                        tx.set(other, Slot { tag: tag ^ 1, ..s })?;
                        Ok(true)
                    })
                    .unwrap();
                model[i] = Some((words, tag));
                if ok {
                    model[j] = model[j].map(|(w, _)| (w, tag ^ 1));
                }
            }
            _ => {
                // Shared slots under the persistent lock: frees of the other thread's blocks.
                let k = r.below(SHARED as u64) as usize;
                let words = sizes(&mut r);
                h.transaction(|tx| {
                    let slots = tx.lock(shared_ptr)?;
                    let mut all = tx.get(slots)?;
                    let mut m = shared.lock().unwrap();
                    assert_eq!(
                        m[k],
                        (!all[k].block.is_null()).then_some((all[k].words, all[k].tag)),
                        "the shared slot disagrees with its model under the lock"
                    );
                    if all[k].block.is_null() {
                        all[k] = new_block(tx, words, tag)?;
                        m[k] = Some((words, tag));
                    } else {
                        tx.free(all[k].block)?;
                        all[k] = Slot::default();
                        m[k] = None;
                    }
                    tx.set(slots, all)
                })
                .unwrap();
            }
        }
    }
    model
}

fn verify(h: &Heap<Stress>, s: PPtr<Slot, Stress>, m: &Model, what: &str) {
    let slot = h.get(s).unwrap();
    match m {
        None => assert!(
            slot.block.is_null(),
            "{what}: slot should be empty: {slot:?}"
        ),
        Some((words, tag)) => {
            assert_eq!((slot.words, slot.tag), (*words, *tag), "{what}");
            for i in 0..*words {
                let want = if i < WRITTEN { word(*tag, i) } else { 0 };
                assert_eq!(h.get(slot.block.at(i)).unwrap(), want, "{what}: word {i}");
            }
        }
    }
}

#[test]
fn two_threads_random_transactions_match_the_model() {
    let sim = Arc::new(SimMedium::new(LEN as usize, SimConfig::default()));
    let opts = HeapOptions {
        lanes: 4,
        lane_bytes: 64 * 1024,
        redo_bytes: 4096,
    };
    RawHeap::format(&*sim, 0, LEN, [3; 16], &opts).unwrap();
    let h = Heap::<Stress>::new(Arc::new(RawHeap::open(sim.clone(), 0, LEN).unwrap())).unwrap();
    let root = h.root::<Root>().unwrap();
    let shared = Mutex::new(vec![None; SHARED]);
    let models: Vec<Vec<Model>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|t| {
                let (h, shared) = (&h, &shared);
                s.spawn(move || worker(h, root, t, shared))
            })
            .collect();
        hs.into_iter().map(|j| j.join().unwrap()).collect()
    });
    let shared = shared.into_inner().unwrap();
    let check = |h: &Heap<Stress>, what: &str| {
        for (t, m) in models.iter().enumerate() {
            for (i, mi) in m.iter().enumerate() {
                verify(
                    h,
                    own_slot(root, t, i),
                    mi,
                    &format!("{what}: thread {t} slot {i}"),
                );
            }
        }
        // The slots follow the lock's 8 reserved bytes.
        let sp: PPtr<Slot, Stress> = shared_lock(root).field(8);
        for (k, mk) in shared.iter().enumerate() {
            verify(h, sp.at(k as u64), mk, &format!("{what}: shared slot {k}"));
        }
    };
    check(&h, "live");
    let c = h.raw().counters();
    let commits = c.commits.load(std::sync::atomic::Ordering::Relaxed);
    let aborts = c.aborts.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        commits > 3000 && aborts > 300,
        "commits {commits}, aborts {aborts}"
    );
    drop(h);
    let report = walk(&*sim, 0, LEN, true).unwrap();
    assert!(
        report.is_clean() && report.pending.is_empty(),
        "{report:#?}"
    );
    let live = models
        .iter()
        .flatten()
        .chain(shared.iter())
        .filter(|m| m.is_some())
        .count();
    assert_eq!(
        report.blocks as usize,
        live + 1,
        "live blocks plus the root"
    );
    // The durable image holds the same state.
    let img = sim.power_fail();
    let sim2 = Arc::new(SimMedium::from_image(img, SimConfig::default()));
    let h = Heap::<Stress>::new(Arc::new(RawHeap::open(sim2, 0, LEN).unwrap())).unwrap();
    check(&h, "after power failure");
}
