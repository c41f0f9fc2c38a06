//! Random interleavings of a few transactions, stepped from one thread, checked against the
//! definitions the STM promises:
//! - opacity: after every successful read (and so in every transaction, including ones that
//!   later abort), all values the transaction has read so far equal one state of memory that
//!   existed between its begin and now;
//! - serializability: when an update transaction commits, every value it read equals the value
//!   in memory at that moment (it is serialised at its commit);
//! - no spurious conflict: a transaction during whose life no other transaction committed never
//!   conflicts.

use heap::stm::{Stm, StmError, StmTx};
use proptest::prelude::*;
use std::cell::RefCell;

const WORDS: usize = 8;
const HANDLES: usize = 3;

#[derive(Debug, Clone)]
enum Op {
    Read(usize, usize),
    Write(usize, usize, u64),
    Commit(usize),
    Abort(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..HANDLES, 0..WORDS).prop_map(|(h, w)| Op::Read(h, w)),
        3 => (0..HANDLES, 0..WORDS, 1..1000u64).prop_map(|(h, w, v)| Op::Write(h, w, v)),
        2 => (0..HANDLES).prop_map(Op::Commit),
        1 => (0..HANDLES).prop_map(Op::Abort),
    ]
}

struct Handle {
    tx: StmTx,
    open: bool,
    /// Index into the history of the state current at begin.
    start: usize,
    reads: Vec<(usize, u64)>,
    buf: Vec<(usize, u64)>,
}

/// Whether all `reads` match one state of `history[start..]`.
fn consistent(history: &[Vec<u64>], start: usize, reads: &[(usize, u64)]) -> bool {
    history[start..]
        .iter()
        .any(|state| reads.iter().all(|&(w, v)| state[w] == v))
}

fn run(stripes: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    let stm = Stm::new(stripes).unwrap();
    let mem = RefCell::new(vec![0u64; WORDS]);
    let mut history = vec![mem.borrow().clone()];
    let mut hs: Vec<Handle> = (0..HANDLES)
        .map(|_| Handle {
            tx: StmTx::new(),
            open: false,
            start: 0,
            reads: Vec::new(),
            buf: Vec::new(),
        })
        .collect();
    for op in ops {
        let hi = match *op {
            Op::Read(h, _) | Op::Write(h, _, _) | Op::Commit(h) | Op::Abort(h) => h,
        };
        let h = &mut hs[hi];
        if !h.open {
            stm.begin(&mut h.tx);
            h.open = true;
            h.start = history.len() - 1;
            h.reads.clear();
            h.buf.clear();
        }
        let quiet = history.len() - 1 == h.start;
        match *op {
            Op::Read(_, w) => {
                if h.buf.iter().any(|&(bw, _)| bw == w) {
                    continue;
                }
                match stm.read_word(&mut h.tx, (w * 8) as u64, || mem.borrow()[w]) {
                    Ok(v) => {
                        h.reads.push((w, v));
                        prop_assert!(
                            consistent(&history, h.start, &h.reads),
                            "reads {:?} match no state since begin",
                            h.reads
                        );
                    }
                    Err(StmError::Conflict(c)) => {
                        prop_assert!(!quiet, "conflict {c} with no commit since begin");
                        stm.abort(&mut h.tx);
                        h.open = false;
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("read: {e}"))),
                }
            }
            Op::Write(_, w, v) => {
                stm.note_write(&mut h.tx, (w * 8) as u64, 8).unwrap();
                h.buf.retain(|&(bw, _)| bw != w);
                h.buf.push((w, v));
            }
            Op::Commit(_) => {
                let (reads, buf) = (&h.reads, &h.buf);
                let out = stm.commit(&mut h.tx, || {
                    let mut m = mem.borrow_mut();
                    let stale: Vec<_> = reads.iter().filter(|&&(w, v)| m[w] != v).collect();
                    for &(w, v) in buf {
                        m[w] = v;
                    }
                    stale
                });
                h.open = false;
                match out {
                    Ok(stale) => {
                        // A read-only transaction is serialised at its snapshot (checked at
                        // each read), an update transaction at its commit.
                        prop_assert!(
                            h.buf.is_empty() || stale.is_empty(),
                            "committed over changed reads {stale:?} (read {:?})",
                            h.reads
                        );
                        if !h.buf.is_empty() {
                            history.push(mem.borrow().clone());
                        }
                    }
                    Err(StmError::Conflict(c)) => {
                        prop_assert!(!quiet, "commit conflict {c} with no commit since begin");
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("commit: {e}"))),
                }
            }
            Op::Abort(_) => {
                stm.abort(&mut h.tx);
                h.open = false;
            }
        }
    }
    let st = stm.stats();
    prop_assert_eq!(st.commits as usize, history.len() - 1);
    prop_assert_eq!(stm.clock(), st.commits + st.validate);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn interleavings_are_opaque_and_serializable(ops in proptest::collection::vec(op(), 1..80)) {
        run(1 << 10, &ops)?;
    }

    /// Two stripes for eight words: most words alias.
    #[test]
    fn interleavings_with_aliased_stripes(ops in proptest::collection::vec(op(), 1..80)) {
        run(2, &ops)?;
    }
}
