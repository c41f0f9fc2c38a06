//! The STM core under real threads, over a plain in-DRAM "memory" of `AtomicU64` words and a
//! small write-back transaction built on top of it the way the heap's redo mode uses the STM:
//! reads go through `Stm::read_word`/`Stm::read` unless the word is in the transaction's own
//! buffer, writes are buffered and noted, and commit stores the buffer in place.

use heap::stm::{ConflictReason, Retry, Stm, StmError, StmTx};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::thread;

/// Word-addressed memory: word `i` lives at offset `8 * i`.
struct Memory {
    words: Vec<AtomicU64>,
}

impl Memory {
    fn new(n: usize, init: u64) -> Self {
        Memory {
            words: (0..n).map(|_| AtomicU64::new(init)).collect(),
        }
    }
    fn get(&self, i: usize) -> u64 {
        self.words[i].load(Ordering::Relaxed)
    }
}

/// A write-back transaction over `Memory`.
struct WbTx<'a> {
    stm: &'a Stm,
    mem: &'a Memory,
    tx: &'a mut StmTx,
    buf: Vec<(usize, u64)>,
}

impl<'a> WbTx<'a> {
    fn new(stm: &'a Stm, mem: &'a Memory, tx: &'a mut StmTx) -> Self {
        WbTx {
            stm,
            mem,
            tx,
            buf: Vec::new(),
        }
    }

    fn read(&mut self, i: usize) -> Result<u64, StmError> {
        if let Some(&(_, v)) = self.buf.iter().rev().find(|&&(j, _)| j == i) {
            return Ok(v);
        }
        let mem = self.mem;
        self.stm.read_word(self.tx, (i * 8) as u64, || {
            mem.words[i].load(Ordering::Relaxed)
        })
    }

    fn write(&mut self, i: usize, v: u64) -> Result<(), StmError> {
        self.stm.note_write(self.tx, (i * 8) as u64, 8)?;
        self.buf.push((i, v));
        Ok(())
    }

    fn commit(self) -> Result<(), StmError> {
        let (mem, buf) = (self.mem, self.buf);
        self.stm.commit(self.tx, || {
            for (i, v) in buf {
                mem.words[i].store(v, Ordering::Relaxed);
            }
        })
    }
}

fn patient() -> Retry {
    Retry {
        max_retries: 1_000_000,
        ..Retry::default()
    }
}

struct Rng(u64);
impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Widen a transaction's window between its reads and its commit, so that transactions of
    /// different threads overlap even on a machine with few free cores: a short random spin,
    /// and now and then a yield.
    fn think(&mut self) {
        let r = self.next();
        if r % 8 == 0 {
            thread::yield_now();
        } else {
            for _ in 0..(r >> 8) % 256 {
                std::hint::spin_loop();
            }
        }
    }
}

/// Transfers between accounts from several threads while a reader takes read-only snapshots:
/// every snapshot (even one inside an attempt that later aborts) sums to the initial total, no
/// balance goes negative, and the update commits counted by the STM equal the transfers made.
fn bank(stripes: usize, accounts: usize, writers: usize, transfers: usize) {
    const INIT: u64 = 1000;
    let stm = Stm::new(stripes).unwrap();
    let mem = Memory::new(accounts, INIT);
    let total = INIT * accounts as u64;
    let done = AtomicBool::new(false);
    let (made, snapshots) = thread::scope(|sc| {
        let reader = sc.spawn(|| {
            let mut rng = Rng::new(99);
            let mut tx = StmTx::new();
            let mut snapshots = 0u64;
            while !done.load(Ordering::Relaxed) {
                let sum = stm
                    .run(&mut tx, &patient(), |tx| {
                        let mut t = WbTx::new(&stm, &mem, tx);
                        let mut sum = 0;
                        for i in 0..accounts {
                            sum += t.read(i)?;
                            if i == accounts / 2 {
                                rng.think();
                            }
                        }
                        assert_eq!(sum, total, "inconsistent snapshot inside a transaction");
                        t.commit()?;
                        Ok::<_, StmError>(sum)
                    })
                    .unwrap();
                assert_eq!(sum, total);
                snapshots += 1;
            }
            snapshots
        });
        let workers: Vec<_> = (0..writers)
            .map(|w| {
                let (stm, mem) = (&stm, &mem);
                sc.spawn(move || {
                    let mut rng = Rng::new(w as u64 + 1);
                    let mut tx = StmTx::new();
                    let mut made = 0u64;
                    for _ in 0..transfers {
                        let from = (rng.next() % accounts as u64) as usize;
                        let to =
                            (from + 1 + (rng.next() % (accounts as u64 - 1)) as usize) % accounts;
                        let amount = 1 + rng.next() % 300;
                        let moved = stm
                            .run(&mut tx, &patient(), |tx| {
                                let mut t = WbTx::new(stm, mem, tx);
                                let a = t.read(from)?;
                                if a < amount {
                                    t.commit()?;
                                    return Ok::<_, StmError>(false);
                                }
                                let b = t.read(to)?;
                                rng.think();
                                t.write(from, a - amount)?;
                                t.write(to, b + amount)?;
                                t.commit()?;
                                Ok(true)
                            })
                            .unwrap();
                        made += u64::from(moved);
                    }
                    made
                })
            })
            .collect();
        // Stop the reader before unwrapping, so that a failed writer fails the test, not hangs it.
        let results: Vec<_> = workers.into_iter().map(|h| h.join()).collect();
        done.store(true, Ordering::Relaxed);
        let snapshots = reader.join().unwrap();
        let made: u64 = results.into_iter().map(|r| r.unwrap()).sum();
        (made, snapshots)
    });
    let sum: u64 = (0..accounts).map(|i| mem.get(i)).sum();
    assert_eq!(sum, total);
    let st = stm.stats();
    assert!(made > 0, "no transfer happened");
    assert_eq!(st.commits, made);
    // The clock is advanced by every transaction that got all its locks: it committed, or it
    // failed validation after taking its write version.
    assert_eq!(stm.clock(), st.commits + st.validate);
    assert!(snapshots > 0);
    assert!(st.read_only_commits >= snapshots);
    eprintln!("stripes {stripes}: {made} transfers, {snapshots} snapshots, {st:?}");
}

#[test]
fn bank_transfers_keep_the_sum_with_many_stripes() {
    bank(1 << 16, 16, 3, 3000);
}

/// Four stripes for sixteen accounts: words alias onto shared stripes, which must only cost
/// false conflicts.
#[test]
fn bank_transfers_keep_the_sum_with_aliased_stripes() {
    bank(4, 16, 3, 2000);
}

/// Increments of one shared counter and of a per-thread counter: the final values are exactly
/// the number of commits.
#[test]
fn counter_increments_are_exact() {
    const THREADS: usize = 4;
    const PER_THREAD: u64 = 2500;
    let stm = Stm::new(1 << 10).unwrap();
    let mem = Memory::new(1 + THREADS, 0);
    thread::scope(|sc| {
        for t in 0..THREADS {
            let (stm, mem) = (&stm, &mem);
            sc.spawn(move || {
                let mut rng = Rng::new(t as u64 + 7);
                let mut tx = StmTx::new();
                for _ in 0..PER_THREAD {
                    stm.run(&mut tx, &patient(), |tx| {
                        let mut w = WbTx::new(stm, mem, tx);
                        let shared = w.read(0)?;
                        let mine = w.read(1 + t)?;
                        rng.think();
                        w.write(0, shared + 1)?;
                        w.write(1 + t, mine + 1)?;
                        w.commit()
                    })
                    .unwrap();
                }
            });
        }
    });
    assert_eq!(mem.get(0), THREADS as u64 * PER_THREAD);
    for t in 0..THREADS {
        assert_eq!(mem.get(1 + t), PER_THREAD);
    }
    let st = stm.stats();
    assert_eq!(st.commits, THREADS as u64 * PER_THREAD);
    // The clock is advanced by every transaction that got all its locks: it committed, or it
    // failed validation after taking its write version.
    assert_eq!(stm.clock(), st.commits + st.validate);
    eprintln!("{st:?}");
}

/// Write skew: accounts a and b start at 50 each with the rule a + b >= 0. Two threads each
/// read both, then (after a barrier, so both have read before either commits) withdraw 60 from
/// their own account. Serializability allows only one withdrawal per round.
#[test]
fn write_skew_is_prevented() {
    const ROUNDS: usize = 300;
    let stm = Stm::new(1 << 8).unwrap();
    let mem = Memory::new(2, 50);
    let barrier = Barrier::new(2);
    let round_start = Barrier::new(3);
    let round_end = Barrier::new(3);
    let withdrawals = AtomicU64::new(0);
    // Failures are collected and asserted after the threads end (a panic here would leave them
    // waiting at a barrier).
    let mut failures = Vec::new();
    thread::scope(|sc| {
        for me in 0..2usize {
            let (stm, mem, barrier) = (&stm, &mem, &barrier);
            let (round_start, round_end, withdrawals) = (&round_start, &round_end, &withdrawals);
            sc.spawn(move || {
                let mut tx = StmTx::new();
                for _ in 0..ROUNDS {
                    round_start.wait();
                    let mut attempt = 0;
                    let took = stm
                        .run(&mut tx, &patient(), |tx| {
                            attempt += 1;
                            let mut t = WbTx::new(stm, mem, tx);
                            let a = t.read(0);
                            let b = t.read(1);
                            if attempt == 1 {
                                barrier.wait();
                            }
                            let (a, b) = (a? as i64, b? as i64);
                            if a + b - 60 < 0 {
                                t.commit()?;
                                return Ok::<_, StmError>(false);
                            }
                            let mine = if me == 0 { a } else { b };
                            t.write(me, (mine - 60) as u64)?;
                            t.commit()?;
                            Ok(true)
                        })
                        .unwrap();
                    if took {
                        withdrawals.fetch_add(1, Ordering::Relaxed);
                    }
                    round_end.wait();
                }
            });
        }
        for round in 0..ROUNDS {
            mem.words[0].store(50, Ordering::Relaxed);
            mem.words[1].store(50, Ordering::Relaxed);
            withdrawals.store(0, Ordering::Relaxed);
            round_start.wait();
            round_end.wait();
            let (a, b) = (mem.get(0) as i64, mem.get(1) as i64);
            let n = withdrawals.load(Ordering::Relaxed);
            if a + b < 0 || n != 1 {
                failures.push(format!("round {round}: a = {a}, b = {b}, {n} withdrawals"));
            }
        }
    });
    assert!(failures.is_empty(), "write skew: {failures:?}");
    // Every round, the second committer had read a word the first had changed.
    assert!(stm.stats().validate >= ROUNDS as u64, "{:?}", stm.stats());
}

/// A record of eight words (spanning eight stripes) is rewritten as a whole by writers, each
/// time with all words equal to a new generation. Readers, with single-word reads and with one
/// multi-word read, never see two generations at once, not even inside an attempt that aborts.
/// The writers go on until both readers have taken a number of snapshots, so that the readers
/// really run against them.
#[test]
fn read_only_transactions_never_see_a_torn_record() {
    const WORDS: usize = 8;
    const WRITES: u64 = 2000;
    const SNAPSHOTS: u64 = 500;
    let stm = Stm::new(1 << 12).unwrap();
    let mem = Memory::new(WORDS, 0);
    let writers_left = AtomicU64::new(2);
    let snapshots = [AtomicU64::new(0), AtomicU64::new(0)];
    let written = thread::scope(|sc| {
        let writers: Vec<_> = (0..2u64)
            .map(|w| {
                let (stm, mem, writers_left, snapshots) = (&stm, &mem, &writers_left, &snapshots);
                sc.spawn(move || {
                    // Counts this writer out even if it panics, so that the readers stop.
                    let _out = CountDown(writers_left);
                    let mut rng = Rng::new(10 + w);
                    let mut tx = StmTx::new();
                    let mut k = 0u64;
                    while k < WRITES
                        || snapshots
                            .iter()
                            .any(|n| n.load(Ordering::Relaxed) < SNAPSHOTS)
                    {
                        let generation = 1 + k * 2 + w;
                        stm.run(&mut tx, &patient(), |tx| {
                            let mut t = WbTx::new(stm, mem, tx);
                            for i in 0..WORDS {
                                t.write(i, generation)?;
                            }
                            t.commit()
                        })
                        .unwrap();
                        rng.think();
                        k += 1;
                    }
                    k
                })
            })
            .collect();
        // Reader 0: word by word.
        let (stm_r, mem_r, left, done) = (&stm, &mem, &writers_left, &snapshots[0]);
        sc.spawn(move || {
            // A reader that panics lets the writers stop.
            let _out = Release(done);
            let mut rng = Rng::new(3);
            let mut tx = StmTx::new();
            while left.load(Ordering::Relaxed) > 0 {
                stm_r
                    .run(&mut tx, &patient(), |tx| {
                        let mut t = WbTx::new(stm_r, mem_r, tx);
                        let first = t.read(0)?;
                        for i in 1..WORDS {
                            rng.think();
                            let v = t.read(i)?;
                            assert_eq!(v, first, "torn record: word 0 = {first}, word {i} = {v}");
                        }
                        t.commit()
                    })
                    .unwrap();
                done.fetch_add(1, Ordering::Relaxed);
            }
        });
        // Reader 1: the whole record in one multi-stripe read.
        let (stm_r, mem_r, left, done) = (&stm, &mem, &writers_left, &snapshots[1]);
        sc.spawn(move || {
            let _out = Release(done);
            let mut rng = Rng::new(4);
            let mut tx = StmTx::new();
            while left.load(Ordering::Relaxed) > 0 {
                stm_r
                    .run(&mut tx, &patient(), |tx| {
                        let rec: Vec<u64> = stm_r.read(tx, 0, (WORDS * 8) as u64, || {
                            (0..WORDS)
                                .map(|i| {
                                    rng.think();
                                    mem_r.get(i)
                                })
                                .collect()
                        })?;
                        assert!(rec.iter().all(|&v| v == rec[0]), "torn record {rec:?}");
                        stm_r.commit(tx, || ())
                    })
                    .unwrap();
                done.fetch_add(1, Ordering::Relaxed);
            }
        });
        writers.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    let last = mem.get(0);
    assert!((0..WORDS).all(|i| mem.get(i) == last));
    let st = stm.stats();
    assert_eq!(st.commits, written);
    assert!(st.read_only_commits >= 2 * SNAPSHOTS);
    eprintln!("{written} record writes; {st:?}");
}

/// Marks a reader as finished (with a count no writer waits past) when it ends, also by a panic.
struct Release<'a>(&'a AtomicU64);
impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(u64::MAX / 4, Ordering::Relaxed);
    }
}

struct CountDown<'a>(&'a AtomicU64);
impl Drop for CountDown<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Blind writes to distinct words (distinct stripes) from several threads never conflict.
#[test]
fn disjoint_blind_writers_never_conflict() {
    let stm = Stm::new(1 << 10).unwrap();
    let mem = Memory::new(64, 0);
    thread::scope(|sc| {
        for t in 0..4usize {
            let (stm, mem) = (&stm, &mem);
            sc.spawn(move || {
                let mut tx = StmTx::new();
                for k in 0..2000u64 {
                    stm.begin(&mut tx);
                    let mut w = WbTx::new(stm, mem, &mut tx);
                    for j in 0..4 {
                        w.write(t * 16 + j, k).unwrap();
                    }
                    w.commit().expect("disjoint blind writes conflicted");
                }
            });
        }
    });
    let st = stm.stats();
    assert_eq!(st.conflicts(), 0, "{st:?}");
    assert_eq!(st.commits, 8000);
    for t in 0..4 {
        assert_eq!(mem.get(t * 16 + 3), 1999);
    }
}

/// A writer is held inside its commit (stripes locked) while another thread runs a transaction
/// that reads the locked word with a bound of five retries: it gets the typed error after six
/// attempts; once the writer finishes, the same transaction succeeds and sees its value.
#[test]
fn retry_bound_returns_the_typed_error_under_forced_conflict() {
    let stm = Arc::new(Stm::new(1 << 8).unwrap());
    let mem = Arc::new(Memory::new(4, 7));
    let (locked_tx, locked_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let writer = {
        let (stm, mem) = (Arc::clone(&stm), Arc::clone(&mem));
        thread::spawn(move || {
            let mut tx = StmTx::new();
            stm.begin(&mut tx);
            stm.note_write(&mut tx, 16, 8).unwrap();
            stm.commit(&mut tx, || {
                locked_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                mem.words[2].store(99, Ordering::Relaxed);
            })
            .unwrap();
        })
    };
    locked_rx.recv().unwrap();
    let retry = Retry {
        max_retries: 5,
        min_spins: 1,
        max_spins: 64,
        yield_after: 0,
    };
    let mut tx = StmTx::new();
    let mut attempts = 0;
    let attempt = |tx: &mut StmTx, attempts: &mut u32| {
        *attempts += 1;
        let mut t = WbTx::new(&stm, &mem, tx);
        let v = t.read(2)?;
        t.commit()?;
        Ok::<_, StmError>(v)
    };
    let out = stm.run(&mut tx, &retry, |tx| attempt(tx, &mut attempts));
    assert_eq!(
        out,
        Err(StmError::TooManyConflicts {
            attempts: 6,
            last_conflict_at: 16,
            last_reason: ConflictReason::ReadLocked
        })
    );
    assert_eq!(attempts, 6);
    assert!(!tx.is_active());
    go_tx.send(()).unwrap();
    writer.join().unwrap();
    assert_eq!(
        stm.run(&mut tx, &retry, |tx| attempt(tx, &mut attempts)),
        Ok(99)
    );
    let st = stm.stats();
    assert_eq!(st.gave_up, 1);
    assert!(st.read_locked >= 6);
}
