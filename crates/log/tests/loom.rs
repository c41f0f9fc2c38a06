//! A loom model of the sequencer's reserve / complete / force protocol.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p kavach-log --test loom --release`
//! (`.ci/run` does, as its own step). Loom explores every interleaving of 2 and 3 threads that each reserve an
//! LSN (a mutex-guarded counter, as `Log::reserve` does), complete it and force it, and checks:
//!
//! - a record is only ever persisted after it was completed;
//! - persisted ranges follow each other with no gap and no overlap (in-order commit);
//! - when `force(n)` returns, every LSN up to `n` has been persisted and `durable() >= n`.
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

use log::sequencer::{Cursor, Sequencer};

struct World {
    seq: Sequencer,
    next: Mutex<u64>,
    completed: Vec<AtomicBool>,
    persisted: Mutex<Vec<u64>>,
}

impl World {
    fn new(records: usize) -> Arc<World> {
        Arc::new(World {
            seq: Sequencer::new(64, 1, 0),
            next: Mutex::new(1),
            completed: (0..=records).map(|_| AtomicBool::new(false)).collect(),
            persisted: Mutex::new(Vec::new()),
        })
    }

    fn reserve(&self) -> u64 {
        let mut n = self.next.lock().unwrap();
        let lsn = *n;
        *n += 1;
        lsn
    }

    fn complete(&self, lsn: u64) {
        self.completed[lsn as usize].store(true, Ordering::Relaxed);
        self.seq.complete(lsn);
    }

    fn persist(&self, cursor: &mut Cursor, last: u64) -> Result<(), ()> {
        let mut p = self.persisted.lock().unwrap();
        assert_eq!(
            cursor.next,
            p.len() as u64 + 1,
            "persisted ranges must follow each other"
        );
        for lsn in cursor.next..=last {
            assert!(
                self.completed[lsn as usize].load(Ordering::Relaxed),
                "LSN {lsn} persisted before it was completed"
            );
            p.push(lsn);
        }
        cursor.pos = last + 1;
        Ok(())
    }

    fn force(&self, lsn: u64) {
        self.seq
            .force(lsn, |c, last| self.persist(c, last))
            .unwrap();
        assert!(self.seq.durable() >= lsn);
        let p = self.persisted.lock().unwrap();
        assert!(
            p.len() as u64 >= lsn,
            "force({lsn}) returned with only {} persisted",
            p.len()
        );
    }
}

#[test]
fn two_writers_reserve_complete_force() {
    loom::model(|| {
        let w = World::new(2);
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let w = w.clone();
                thread::spawn(move || {
                    let lsn = w.reserve();
                    w.complete(lsn);
                    w.force(lsn);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(*w.persisted.lock().unwrap(), vec![1, 2]);
        assert_eq!(w.seq.durable(), 2);
    });
}

#[test]
fn three_writers_with_a_frequency_policy() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let w = World::new(3);
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let w = w.clone();
                thread::spawn(move || {
                    let lsn = w.reserve();
                    w.complete(lsn);
                    // frequency(2): only even LSNs force.
                    if lsn % 2 == 0 {
                        w.force(lsn);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        // LSN 2 was forced, so 1 and 2 are durable; 3 may or may not be.
        let p = w.persisted.lock().unwrap().clone();
        assert!(p.starts_with(&[1, 2]), "{p:?}");
        w.force(3);
        assert_eq!(*w.persisted.lock().unwrap(), vec![1, 2, 3]);
    });
}

#[test]
fn a_writer_forcing_a_later_record_waits_for_an_earlier_one() {
    loom::model(|| {
        let w = World::new(2);
        let first = w.reserve();
        let second = w.reserve();
        let w2 = w.clone();
        let late = thread::spawn(move || w2.complete(first));
        w.complete(second);
        w.force(second);
        late.join().unwrap();
        assert_eq!(*w.persisted.lock().unwrap(), vec![1, 2]);
    });
}
