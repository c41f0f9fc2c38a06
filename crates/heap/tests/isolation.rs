//! Isolated transactions (`TxMode::Isolated`, `Heap::atomically`): the heap's STM gives
//! serializable transactions without user locks, on the simulator and on a real pool file.

use std::sync::Arc;

use heap::stm::{Retry, StmError};
use heap::{Heap, HeapError, HeapFile, HeapOptions, PPtr, RawHeap, TxMode};
use pmem::{SimConfig, SimMedium};

const LEN: u64 = 4 << 20;
const ACCOUNTS: u64 = 16;
const START: u64 = 1000;

heap::pool_tag!(Bank);

/// A tag names one open heap at a time, and the tests of this file run on parallel threads:
/// each holds this lock for as long as its `Heap<Bank>` lives.
static ONE_BANK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_bank() -> std::sync::MutexGuard<'static, ()> {
    ONE_BANK.lock().unwrap_or_else(|e| e.into_inner())
}

fn sim_heap() -> Arc<RawHeap> {
    let m = Arc::new(SimMedium::new(LEN as usize, SimConfig::default()));
    RawHeap::format(&*m, 0, LEN, [9; 16], &HeapOptions::small()).unwrap();
    Arc::new(RawHeap::open(m, 0, LEN).unwrap())
}

fn accounts(h: &Heap<Bank>) -> PPtr<[u64; ACCOUNTS as usize], Bank> {
    let root = h.root::<[u64; ACCOUNTS as usize]>().unwrap();
    h.atomically(&Retry::default(), |tx| {
        tx.set(root, [START; ACCOUNTS as usize])
    })
    .unwrap();
    root
}

/// Threads move money between accounts with no lock; readers sum every account inside one
/// isolated transaction and must always see the total; at the end the total holds and every
/// transfer that returned Ok is counted in the accounts' history.
fn bank(raw: Arc<RawHeap>, threads: u64, per_thread: u64) {
    let h = Arc::new(Heap::<Bank>::new(raw).unwrap());
    let root = accounts(&h);
    let total = START * ACCOUNTS;
    let mut hs = Vec::new();
    for t in 0..threads {
        let h = h.clone();
        hs.push(std::thread::spawn(move || {
            let mut x = 0x1234_5678u64 ^ t;
            let mut moved = 0u64;
            for i in 0..per_thread {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let (a, b) = (x % ACCOUNTS, (x >> 20) % ACCOUNTS);
                if i % 4 == 3 {
                    let sum = h
                        .atomically(&Retry::default(), |tx| {
                            let mut s = 0;
                            for k in 0..ACCOUNTS {
                                s += tx.get(root.cast::<u64>().at(k))?;
                            }
                            Ok(s)
                        })
                        .unwrap();
                    assert_eq!(sum, total, "a reader saw money appear or vanish");
                    continue;
                }
                h.atomically(&Retry::default(), |tx| {
                    let pa = root.cast::<u64>().at(a);
                    let pb = root.cast::<u64>().at(b);
                    let va = tx.get(pa)?;
                    if va == 0 || a == b {
                        return Ok(());
                    }
                    let vb = tx.get(pb)?;
                    tx.set(pa, va - 1)?;
                    tx.set(pb, vb + 1)
                })
                .unwrap();
                moved += 1;
            }
            moved
        }));
    }
    let moved: u64 = hs.into_iter().map(|t| t.join().unwrap()).sum();
    let sum: u64 = (0..ACCOUNTS)
        .map(|k| h.get(root.cast::<u64>().at(k)).unwrap())
        .sum();
    assert_eq!(sum, total);
    assert!(moved > 0);
}

#[test]
fn transfers_keep_the_total_on_the_simulator() {
    let _bank = one_bank();
    bank(sim_heap(), 3, 400);
}

#[test]
fn transfers_keep_the_total_on_a_pool_file() {
    let _bank = one_bank();
    let dir = std::env::temp_dir().join(format!("kavach-iso-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bank.pool");
    let f = HeapFile::create(&path, 64 << 20, &HeapOptions::default()).unwrap();
    bank(f.raw().clone(), 4, 5000);
    let s = f.raw().stm_stats();
    assert!(s.commits > 0, "{s:?}");
    drop(f);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Exact counting: every increment that returned Ok is in the counter.
#[test]
fn increments_are_never_lost() {
    let _bank = one_bank();
    let h = Arc::new(Heap::<Bank>::new(sim_heap()).unwrap());
    let root = h.root::<u64>().unwrap();
    let hs: Vec<_> = (0..3)
        .map(|_| {
            let h = h.clone();
            std::thread::spawn(move || {
                for _ in 0..300 {
                    h.atomically(&Retry::default(), |tx| tx.update(root, |v| *v += 1))
                        .unwrap();
                }
            })
        })
        .collect();
    for t in hs {
        t.join().unwrap();
    }
    assert_eq!(h.get(root).unwrap(), 900);
}

/// Two transactions interleaved on one thread (two lanes): the one whose read was overwritten
/// by the other's commit fails with a conflict at its commit and changes nothing; run again it
/// commits. A read of a word another transaction is committing also conflicts.
#[test]
fn a_stale_read_fails_the_commit_with_a_conflict() {
    let _bank = one_bank();
    let raw = sim_heap();
    let (root, _) = raw.root(64).unwrap();
    let mut l1 = raw.lane();
    assert_eq!(raw.begin_mode(&mut l1, TxMode::Isolated), TxMode::Isolated);
    let mut b = [0u8; 8];
    raw.read_tx(&l1, root, &mut b).unwrap();
    {
        let mut l2 = raw.lane();
        raw.begin_mode(&mut l2, TxMode::Isolated);
        raw.write(&mut l2, root, &7u64.to_le_bytes()).unwrap();
        raw.commit(&mut l2).unwrap();
    }
    raw.write(&mut l1, root + 8, &1u64.to_le_bytes()).unwrap();
    match raw.commit(&mut l1) {
        Err(HeapError::Conflict(StmError::Conflict(c))) => assert_eq!(c.off / 8, root / 8),
        other => panic!("{other:?}"),
    }
    raw.read(root + 8, &mut b).unwrap();
    assert_eq!(u64::from_le_bytes(b), 0, "the failed transaction wrote");
    raw.begin_mode(&mut l1, TxMode::Isolated);
    raw.read_tx(&l1, root, &mut b).unwrap();
    assert_eq!(u64::from_le_bytes(b), 7);
    raw.write(&mut l1, root + 8, &1u64.to_le_bytes()).unwrap();
    raw.commit(&mut l1).unwrap();
    raw.read(root + 8, &mut b).unwrap();
    assert_eq!(u64::from_le_bytes(b), 1);
}

/// The retry bound: a transaction that conflicts every time gives up with the typed error.
#[test]
fn endless_conflicts_end_in_too_many_conflicts() {
    let _bank = one_bank();
    let raw = sim_heap();
    let h = Heap::<Bank>::new(raw.clone()).unwrap();
    let root = h.root::<u64>().unwrap();
    let retry = Retry {
        max_retries: 5,
        ..Retry::default()
    };
    let mut attempts = 0;
    let r = h.atomically(&retry, |tx| {
        attempts += 1;
        let v = tx.get(root)?;
        // Another transaction commits over what this one read, every time.
        let mut l = raw.lane();
        raw.begin_mode(&mut l, TxMode::Isolated);
        raw.write(&mut l, root.offset(), &(v + 1).to_le_bytes())?;
        raw.commit(&mut l)?;
        drop(l);
        tx.set(root, v + 100)
    });
    match r {
        Err(HeapError::Conflict(StmError::TooManyConflicts { attempts: a, .. })) => {
            assert_eq!(a, 6);
            assert_eq!(attempts, 6);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        h.get(root).unwrap(),
        6,
        "only the interfering commits landed"
    );
}
