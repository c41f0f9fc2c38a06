//! In-order commit: which records are complete, which are durable.
//!
//! Records complete in any order; `force` makes a prefix durable. The sequencer keeps one bit
//! per LSN in a window of `window` consecutive LSNs (the ring can hold no more records than
//! that), set by `complete` and consumed by the one forcer that holds the force lock. The
//! forcer consumes the bits of the complete prefix, asks its caller to persist those records,
//! and only then publishes the new durable LSN. So:
//!
//! - `force(n)` returns only when every LSN up to `n` is complete and persisted (no holes);
//! - the durable LSN never covers an incomplete record;
//! - `complete` never blocks and never takes a lock.
//!
//! The same code runs under loom (`tests/loom.rs`) with the persist step recorded in memory.

use crate::sync::{AtomicU64, Mutex, Ordering, backoff};

/// Where the forcer is: the first LSN not yet persisted, and an opaque position its caller keeps
/// for that record (the log keeps the record's ring position there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// First LSN not persisted.
    pub next: u64,
    /// Caller's position of record `next`.
    pub pos: u64,
}

/// Completion bits and the force cursor.
#[derive(Debug)]
pub struct Sequencer {
    bits: Box<[AtomicU64]>,
    mask: u64,
    durable: AtomicU64,
    cursor: Mutex<Cursor>,
}

impl Sequencer {
    /// A sequencer whose next LSN is `first` (everything below is durable), for a window of at
    /// least `window` in-flight LSNs.
    pub fn new(window: u64, first: u64, pos: u64) -> Sequencer {
        assert!(first >= 1, "LSNs start at 1");
        let window = window.max(64).next_power_of_two();
        let words = (window / 64) as usize;
        Sequencer {
            bits: (0..words).map(|_| AtomicU64::new(0)).collect(),
            mask: window - 1,
            durable: AtomicU64::new(first - 1),
            cursor: Mutex::new(Cursor { next: first, pos }),
        }
    }

    /// How many LSNs may be in flight (reserved and not yet persisted).
    pub fn window(&self) -> u64 {
        self.mask + 1
    }

    fn slot(&self, lsn: u64) -> (&AtomicU64, u64) {
        let bit = lsn & self.mask;
        (&self.bits[(bit / 64) as usize], 1u64 << (bit % 64))
    }

    /// Record `lsn` complete. Its bytes must be written before this call (release).
    pub fn complete(&self, lsn: u64) {
        let (word, bit) = self.slot(lsn);
        let before = word.fetch_or(bit, Ordering::Release);
        assert!(
            before & bit == 0,
            "LSN {lsn} completed twice or window overrun"
        );
    }

    /// Every LSN up to this one is durable.
    pub fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// Consume the completion bit of `lsn` if it is set.
    fn take(&self, lsn: u64) -> bool {
        let (word, bit) = self.slot(lsn);
        if word.load(Ordering::Acquire) & bit == 0 {
            return false;
        }
        word.fetch_and(!bit, Ordering::AcqRel);
        true
    }

    /// Make every LSN up to `lsn` durable: wait until all of them are complete, then call
    /// `persist(cursor, last)` with the cursor at the first unpersisted LSN; it must persist
    /// records `cursor.next..=last` and leave `cursor.pos` at the position of record `last + 1`.
    /// Returns whether this call persisted anything (false: someone else already had).
    pub fn force<E>(
        &self,
        lsn: u64,
        mut persist: impl FnMut(&mut Cursor, u64) -> Result<(), E>,
    ) -> Result<bool, E> {
        if self.durable() >= lsn {
            return Ok(false);
        }
        let mut cursor = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
        if self.durable() >= lsn {
            return Ok(false);
        }
        let mut end = cursor.next;
        let mut round = 0;
        loop {
            while end < cursor.next + self.window() && self.take(end) {
                end += 1;
            }
            if end > lsn {
                break;
            }
            backoff(&mut round);
        }
        if let Err(e) = persist(&mut cursor, end - 1) {
            // Give the bits back, so a retry sees the same complete prefix.
            for l in cursor.next..end {
                let (word, bit) = self.slot(l);
                word.fetch_or(bit, Ordering::Release);
            }
            return Err(e);
        }
        cursor.next = end;
        self.durable.store(end - 1, Ordering::Release);
        Ok(true)
    }

    /// Whether every LSN below `next` is complete (persisted, or its bit set and not yet
    /// consumed): no record below `next` is between reserve and complete. Consumes nothing.
    pub fn complete_through(&self, next: u64) -> bool {
        let cursor = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
        if next > cursor.next + self.window() {
            return false;
        }
        (cursor.next..next).all(|l| {
            let (word, bit) = self.slot(l);
            word.load(Ordering::Acquire) & bit != 0
        })
    }

    /// The cursor (for tests and recovery bookkeeping).
    pub fn cursor(&self) -> Cursor {
        *self.cursor.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn persist_log(
        log: &mut Vec<(u64, u64)>,
    ) -> impl FnMut(&mut Cursor, u64) -> Result<(), ()> + '_ {
        move |c, last| {
            log.push((c.next, last));
            c.pos += last + 1 - c.next;
            Ok(())
        }
    }

    #[test]
    fn force_persists_the_complete_prefix_and_nothing_past_a_hole() {
        let s = Sequencer::new(100, 1, 0);
        assert_eq!(s.window(), 128);
        s.complete(1);
        s.complete(2);
        s.complete(4);
        let mut log = Vec::new();
        assert_eq!(s.force(2, persist_log(&mut log)), Ok(true));
        assert_eq!(log, [(1, 2)]);
        assert_eq!(s.durable(), 2);
        assert_eq!(s.force(1, persist_log(&mut log)), Ok(false));
        s.complete(3);
        assert_eq!(s.force(3, persist_log(&mut log)), Ok(true));
        // 4 was complete too, so it is persisted with 3.
        assert_eq!(log, [(1, 2), (3, 4)]);
        assert_eq!(s.durable(), 4);
        assert_eq!(s.cursor(), Cursor { next: 5, pos: 4 });
    }

    #[test]
    fn force_waits_for_an_earlier_record_completed_by_another_thread() {
        let s = std::sync::Arc::new(Sequencer::new(64, 10, 0));
        s.complete(11);
        let s2 = s.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            s2.complete(10);
        });
        let mut log = Vec::new();
        assert_eq!(s.force(11, persist_log(&mut log)), Ok(true));
        t.join().expect("completer");
        assert_eq!(log, [(10, 11)]);
    }

    #[test]
    fn bits_are_reused_across_the_window() {
        let s = Sequencer::new(64, 1, 0);
        let mut log = Vec::new();
        for lsn in 1..1000 {
            s.complete(lsn);
            assert_eq!(s.force(lsn, persist_log(&mut log)), Ok(true));
        }
        assert_eq!(s.durable(), 999);
    }

    #[test]
    #[should_panic(expected = "completed twice")]
    fn double_completion_is_a_bug() {
        let s = Sequencer::new(64, 1, 0);
        s.complete(1);
        s.complete(1);
    }

    #[test]
    fn a_failed_persist_publishes_nothing() {
        let s = Sequencer::new(64, 1, 0);
        s.complete(1);
        assert_eq!(
            s.force(1, |_, _| Err("medium failed")),
            Err("medium failed")
        );
        assert_eq!(s.durable(), 0);
        let mut log = Vec::new();
        assert_eq!(s.force(1, persist_log(&mut log)), Ok(true));
        assert_eq!(log, [(1, 1)]);
    }
}
