//! [`WriterGate`]: a ready-made way for a target to implement `stop_writers` and
//! `resume_writers`.
//!
//! Writers hold a [`GateGuard`] between safe points (e.g. for the span of one commit); the save
//! closes the gate, which waits until no guard is held and makes new `enter` calls wait until it
//! opens again. The gate is not re-entrant: a thread holding a guard must not enter again, or a
//! close in between would wait for it forever.

use std::fmt;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

#[derive(Debug, Default)]
struct GateState {
    inside: usize,
    closed: bool,
}

/// Writers pass it at safe points; the save closes it.
#[derive(Default)]
pub struct WriterGate {
    state: Mutex<GateState>,
    changed: Condvar,
}

impl fmt::Debug for WriterGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.lock();
        f.debug_struct("WriterGate")
            .field("inside", &st.inside)
            .field("closed", &st.closed)
            .finish()
    }
}

/// A writer between safe points; dropping it is the next safe point.
#[must_use = "the writer is inside the gate only while the guard lives"]
pub struct GateGuard<'a> {
    gate: &'a WriterGate,
}

impl fmt::Debug for GateGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GateGuard")
    }
}

impl WriterGate {
    /// An open gate.
    pub fn new() -> WriterGate {
        WriterGate::default()
    }

    fn lock(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Enters, waiting while the gate is closed.
    pub fn enter(&self) -> GateGuard<'_> {
        let mut st = self.lock();
        while st.closed {
            st = self.changed.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st.inside += 1;
        GateGuard { gate: self }
    }

    /// Enters if the gate is open (a writer that would rather fall back than wait).
    pub fn try_enter(&self) -> Option<GateGuard<'_>> {
        let mut st = self.lock();
        if st.closed {
            return None;
        }
        st.inside += 1;
        Some(GateGuard { gate: self })
    }

    /// Closes the gate and waits until no writer is inside.
    pub fn close(&self) {
        let mut st = self.lock();
        st.closed = true;
        while st.inside > 0 {
            st = self.changed.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Closes the gate and waits until no writer is inside or `deadline` passes; returns whether
    /// the writers drained. The gate stays closed either way.
    pub fn close_until(&self, deadline: Instant) -> bool {
        let mut st = self.lock();
        st.closed = true;
        while st.inside > 0 {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            st = self
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }

    /// Opens the gate and wakes waiting writers.
    pub fn open(&self) {
        self.lock().closed = false;
        self.changed.notify_all();
    }

    /// Whether the gate is closed.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// How many writers are inside.
    pub fn inside(&self) -> usize {
        self.lock().inside
    }
}

impl Drop for GateGuard<'_> {
    fn drop(&mut self) {
        let mut st = self.gate.lock();
        st.inside -= 1;
        if st.inside == 0 {
            self.gate.changed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn close_waits_for_writers_and_blocks_new_ones_until_open() {
        let gate = Arc::new(WriterGate::new());
        let writes = Arc::new(AtomicU64::new(0));
        let g = gate.enter();
        assert_eq!(gate.inside(), 1);
        // A closer waits for the guard held here.
        let (closed_tx, closed_rx) = mpsc::channel();
        let closer = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                gate.close();
                closed_tx.send(()).unwrap();
            })
        };
        // Once it is closing, newcomers are turned away even though the old writer is inside.
        while !gate.is_closed() {
            std::thread::yield_now();
        }
        assert!(gate.try_enter().is_none());
        assert!(
            closed_rx.try_recv().is_err(),
            "close returned while a writer was inside"
        );
        drop(g);
        closed_rx.recv_timeout(Duration::from_secs(20)).unwrap();
        closer.join().unwrap();
        // A writer arriving now waits for open.
        let (done_tx, done_rx) = mpsc::channel();
        let writer = {
            let (gate, writes) = (gate.clone(), writes.clone());
            std::thread::spawn(move || {
                let _g = gate.enter();
                writes.fetch_add(1, Ordering::SeqCst);
                done_tx.send(()).unwrap();
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            writes.load(Ordering::SeqCst),
            0,
            "a writer passed a closed gate"
        );
        gate.open();
        done_rx.recv_timeout(Duration::from_secs(20)).unwrap();
        writer.join().unwrap();
        assert_eq!(writes.load(Ordering::SeqCst), 1);
        assert_eq!(gate.inside(), 0);
    }

    #[test]
    fn close_until_gives_up_at_the_deadline_and_stays_closed() {
        let gate = WriterGate::new();
        let g = gate.enter();
        assert!(!gate.close_until(Instant::now()));
        assert!(gate.is_closed());
        drop(g);
        assert!(gate.close_until(Instant::now()));
        gate.open();
        assert!(gate.try_enter().is_some());
    }
}
