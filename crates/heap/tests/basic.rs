//! Basic behaviour of the heap on the simulator and on a file.

use std::sync::Arc;

use heap::check::walk;
use heap::{Heap, HeapOptions, PPtr, RawHeap};
use pmem::{Medium, SimConfig, SimMedium};

const LEN: u64 = 4 << 20;

fn fresh() -> Arc<SimMedium> {
    let sim = Arc::new(SimMedium::new(LEN as usize, SimConfig::default()));
    RawHeap::format(&*sim, 0, LEN, [9; 16], &HeapOptions::small()).unwrap();
    sim
}

heap::pool_tag!(T1);

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable, Debug, PartialEq)]
#[repr(C)]
struct Node {
    value: u64,
    next: PPtr<Node, T1>,
}

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Root {
    head: PPtr<Node, T1>,
    count: u64,
}

#[test]
fn list_push_pop_abort_and_reopen() {
    let sim = fresh();
    let raw = Arc::new(RawHeap::open(sim.clone(), 0, LEN).unwrap());
    let h = Heap::<T1>::new(raw).unwrap();
    let root = h.root::<Root>().unwrap();
    for v in 0..100u64 {
        h.transaction(|tx| {
            let r = tx.get(root)?;
            let n = tx.alloc(Node {
                value: v,
                next: r.head,
            })?;
            tx.set(
                root,
                Root {
                    head: n,
                    count: r.count + 1,
                },
            )
        })
        .unwrap();
    }
    // An aborted transaction changes nothing.
    let err = h
        .transaction(|tx| {
            let r = tx.get(root)?;
            tx.free(r.head)?;
            tx.set(
                root,
                Root {
                    head: PPtr::null(),
                    count: 0,
                },
            )?;
            Err::<(), _>(heap::HeapError::Aborted)
        })
        .unwrap_err();
    assert!(matches!(err, heap::HeapError::Aborted));
    assert_eq!(h.get(root).unwrap().count, 100);
    // Pop 40.
    for _ in 0..40 {
        h.transaction(|tx| {
            let r = tx.get(root)?;
            let n = tx.get(r.head)?;
            tx.free(r.head)?;
            tx.set(
                root,
                Root {
                    head: n.next,
                    count: r.count - 1,
                },
            )
        })
        .unwrap();
    }
    drop(h);
    let report = walk(&*sim, 0, LEN, true).unwrap();
    assert!(report.is_clean(), "{report:#?}");
    assert_eq!(report.blocks, 61, "60 nodes and the root");
    // Reopen from the durable image: the same list.
    let img = sim.power_fail();
    let sim2 = Arc::new(SimMedium::from_image(img, SimConfig::default()));
    let raw = Arc::new(RawHeap::open(sim2.clone(), 0, LEN).unwrap());
    let h = Heap::<T1>::new(raw).unwrap();
    let root = h.root::<Root>().unwrap();
    let mut p = h.get(root).unwrap().head;
    let mut expect = 59u64;
    let mut n = 0;
    while !p.is_null() {
        let node = h.get(p).unwrap();
        assert_eq!(node.value, expect);
        expect = expect.wrapping_sub(1);
        p = node.next;
        n += 1;
    }
    assert_eq!(n, 60);
    // A double free is refused, not obeyed.
    let head = h.get(root).unwrap().head;
    let e = h
        .transaction(|tx| {
            tx.free(head)?;
            tx.free(head)
        })
        .unwrap_err();
    assert!(matches!(e, heap::HeapError::BadFree { .. }), "{e}");
    assert_eq!(walk(&*sim2, 0, LEN, true).unwrap().blocks, 61);
}

#[test]
fn large_blocks_and_bad_pointers() {
    let sim = fresh();
    let raw = RawHeap::open(sim.clone(), 0, LEN).unwrap();
    let mut lane = raw.lane();
    raw.begin(&mut lane);
    let big = raw.alloc(&mut lane, 300_000, true).unwrap();
    let small = raw.alloc(&mut lane, 100, false).unwrap();
    raw.commit(&mut lane).unwrap();
    assert_eq!(raw.usable_size(big), Some(2 * 256 * 1024));
    assert_eq!(raw.usable_size(small), Some(128));
    assert_eq!(raw.usable_size(small + 64), None);
    raw.begin(&mut lane);
    assert!(raw.add_range(&mut lane, 12, 8).is_err());
    assert!(
        raw.commit(&mut lane).is_err(),
        "an error aborts the transaction"
    );
    raw.begin(&mut lane);
    raw.free(&mut lane, big).unwrap();
    assert!(raw.free(&mut lane, small + 64).is_err());
    raw.abort(&mut lane).unwrap();
    assert_eq!(raw.usable_size(big), Some(2 * 256 * 1024));
    let r = walk(&*sim, 0, LEN, false).unwrap();
    assert_eq!(r.blocks, 2);
    assert_eq!(r.large_chunks, 2);
    let _ = sim.len();
}

/// A block allocated and freed inside an open transaction stays with it until it ends: its
/// undo entries are still live, and rolling them back must not undo another lane's commit.
#[test]
fn a_block_freed_in_its_own_transaction_is_not_handed_to_another_lane() {
    for size in [300_000u64, 64] {
        let sim = fresh();
        let raw = RawHeap::open(sim.clone(), 0, LEN).unwrap();
        let mut a = raw.lane();
        raw.begin(&mut a);
        // Enough blocks to overflow the lane cache for the small size.
        let n = if size > 1000 { 1 } else { 300 };
        let mut mine = Vec::new();
        for _ in 0..n {
            let x = raw.alloc(&mut a, size, false).unwrap();
            raw.free(&mut a, x).unwrap();
            mine.push(x);
        }
        let mut b = raw.lane();
        assert_ne!(a.index(), b.index());
        raw.begin(&mut b);
        let mut theirs = Vec::new();
        for _ in 0..n {
            theirs.push(raw.alloc(&mut b, size, false).unwrap());
        }
        raw.commit(&mut b).unwrap();
        for y in &theirs {
            assert!(
                !mine.contains(y),
                "lane B got a block lane A's open transaction holds"
            );
        }
        // Power fails with A still open: recovery rolls A back and B's blocks stay.
        let img = sim.power_fail();
        drop((a, b));
        let sim2 = Arc::new(SimMedium::from_image(img, SimConfig::default()));
        let raw2 = RawHeap::open(sim2, 0, LEN).unwrap();
        for y in &theirs {
            assert!(
                raw2.usable_size(*y).is_some(),
                "size {size}: B's committed block was lost"
            );
        }
    }
}

/// With every other lane taken, a root made inside a transaction waits for a free lane instead
/// of blocking on the lane its own thread holds.
#[test]
fn a_root_made_inside_a_transaction_does_not_wait_on_its_own_lane() {
    let sim = fresh();
    let raw = Arc::new(RawHeap::open(sim, 0, LEN).unwrap());
    let mut mine = raw.lane();
    raw.begin(&mut mine);
    let raw2 = Arc::clone(&raw);
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let release = std::thread::spawn(move || {
        let others: Vec<_> = (1..HeapOptions::small().lanes)
            .map(|_| raw2.lane())
            .collect();
        held_tx.send(()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(others);
    });
    held_rx.recv().unwrap();
    let (root, _) = raw.root(64).unwrap();
    assert!(root > 0);
    raw.commit(&mut mine).unwrap();
    release.join().unwrap();
}

heap::pool_tag!(TRw);

/// Two writers and a reader under a `PRwLock`: the writers' increments are never lost, the
/// reader always sees the pair of counters equal, and a shared holder cannot upgrade.
#[test]
fn rwlock_serialises_writers_and_lets_readers_see_whole_updates() {
    use heap::PRwLock;
    let sim = fresh();
    let h = Heap::<TRw>::new(Arc::new(RawHeap::open(sim, 0, LEN).unwrap())).unwrap();
    let root = h.root::<PRwLock<[u64; 2]>>().unwrap();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..300 {
                    h.transaction(|tx| {
                        let v = tx.write_lock(root)?;
                        let [a, b] = tx.get(v)?;
                        tx.set(v, [a + 1, b])?;
                        std::thread::yield_now();
                        tx.set(v, [a + 1, b + 1])
                    })
                    .unwrap();
                }
            });
        }
        s.spawn(|| {
            for _ in 0..300 {
                h.transaction(|tx| {
                    let v = tx.read_lock(root)?;
                    let [a, b] = tx.get(v)?;
                    assert_eq!(a, b, "a reader saw half an update");
                    Ok(())
                })
                .unwrap();
            }
        });
    });
    let v: heap::PPtr<[u64; 2], TRw> = root.field(8);
    assert_eq!(h.get(v).unwrap(), [600, 600]);
    let e = h
        .transaction(|tx| {
            tx.read_lock(root)?;
            tx.write_lock(root).map(|_| ())
        })
        .unwrap_err();
    assert!(matches!(e, heap::HeapError::Lock(_)), "{e}");
}
