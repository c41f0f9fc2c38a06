//! The lock table behind the persistent locks of the typed API (`PMutex`, `PRwLock`).

#[allow(unused_imports)]
use super::*;

#[derive(Debug)]
pub(super) struct LockState {
    pub(super) writer: Option<std::thread::ThreadId>,
    pub(super) readers: u32,
}

#[derive(Debug)]
pub(super) struct LockCell {
    pub(super) st: Mutex<LockState>,
    pub(super) cv: Condvar,
}

impl RawHeap {
    pub(super) fn cell(&self, key: u64) -> Arc<LockCell> {
        self.locks
            .lock()
            .entry(key)
            .or_insert_with(|| {
                Arc::new(LockCell {
                    st: Mutex::new(LockState {
                        writer: None,
                        readers: 0,
                    }),
                    cv: Condvar::new(),
                })
            })
            .clone()
    }

    /// Lock the persistent lock at `key` (its offset) exclusively. Locks live in DRAM, keyed
    /// by offset, so every lock is free after the pool is opened.
    /// Locking a lock this thread already holds is an error (they are not recursive).
    pub fn lock_exclusive(&self, key: u64) -> Result<()> {
        let cell = self.cell(key);
        let me = std::thread::current().id();
        let mut st = cell.st.lock();
        if st.writer == Some(me) {
            return Err(HeapError::Lock(format!(
                "the lock at {key:#x} is already held by this thread (locks are not recursive)"
            )));
        }
        while st.writer.is_some() || st.readers > 0 {
            cell.cv.wait(&mut st);
        }
        st.writer = Some(me);
        Ok(())
    }

    /// Drop `key`'s cell from the table once nobody holds, waits for or looks at it, so
    /// the table holds only locks in use.
    pub(super) fn forget(&self, key: u64, cell: Arc<LockCell>) {
        let mut map = self.locks.lock();
        let idle = {
            let st = cell.st.lock();
            st.writer.is_none() && st.readers == 0
        };
        // Two references: the table's and ours. A thread that fetched the cell holds a third.
        if idle && Arc::strong_count(&cell) == 2 {
            map.remove(&key);
        }
    }

    /// Lock `key` shared.
    pub fn lock_shared(&self, key: u64) {
        let cell = self.cell(key);
        let mut st = cell.st.lock();
        while st.writer.is_some() {
            cell.cv.wait(&mut st);
        }
        st.readers += 1;
    }

    /// Release an exclusive lock held by this thread.
    pub fn unlock_exclusive(&self, key: u64) -> Result<()> {
        let cell = self.cell(key);
        let mut st = cell.st.lock();
        if st.writer != Some(std::thread::current().id()) {
            return Err(HeapError::Lock(format!(
                "unlock of the lock at {key:#x}, which this thread does not hold"
            )));
        }
        st.writer = None;
        cell.cv.notify_all();
        drop(st);
        self.forget(key, cell);
        Ok(())
    }

    /// Release a shared lock.
    pub fn unlock_shared(&self, key: u64) -> Result<()> {
        let cell = self.cell(key);
        let mut st = cell.st.lock();
        if st.readers == 0 {
            return Err(HeapError::Lock(format!(
                "shared unlock of the lock at {key:#x}, which has no readers"
            )));
        }
        st.readers -= 1;
        if st.readers == 0 {
            cell.cv.notify_all();
        }
        drop(st);
        self.forget(key, cell);
        Ok(())
    }
}
