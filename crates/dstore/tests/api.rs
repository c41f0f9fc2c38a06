//! DStore's library API: contexts, object calls, and `olock`/`ounlock` really blocking a
//! conflicting writer (no timing: the test waits until the writer is counted as waiting on the
//! lock, checks that its write has not happened, then unlocks).

use std::sync::mpsc;

use dstore::StoreError;
use dstore::api::{self, OpenMode};

fn store() -> dstore::Store<std::sync::Arc<pmem::SimMedium>> {
    api::in_memory(api::example_config()).unwrap()
}

/// Wait (yielding) until `n` threads wait for the lock on `name`.
fn until_waiting(ctx: &dstore::Context<'_, std::sync::Arc<pmem::SimMedium>>, name: &[u8], n: u32) {
    while ctx.lock_waiters(name) < n {
        std::thread::yield_now();
    }
}

#[test]
fn olock_blocks_another_contexts_owrite_until_ounlock() {
    let s = store();
    let mut a = s.context();
    let h = a.oopen(b"obj", 0, OpenMode::CREATE).unwrap().unwrap();
    a.owrite(&h, b"first", 0).unwrap();
    a.olock(b"obj").unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|t| {
        let s = &s;
        t.spawn(move || {
            let mut b = s.context();
            let h = b.oopen(b"obj", 0, OpenMode::READ_WRITE).unwrap().unwrap();
            b.owrite(&h, b"SECOND", 0).unwrap();
            tx.send(()).unwrap();
        });
        until_waiting(&a, b"obj", 1);
        // The writer is blocked in the lock: its write has not happened.
        assert!(rx.try_recv().is_err());
        let mut buf = [0u8; 6];
        assert_eq!(a.oread(&h, &mut buf, 0).unwrap(), 5, "readers do not wait");
        assert_eq!(&buf[..5], b"first");
        // The holder itself writes through its own lock.
        a.owrite(&h, b"FIRST", 0).unwrap();
        a.ounlock(b"obj").unwrap();
        rx.recv().unwrap();
    });
    let mut buf = [0u8; 6];
    assert_eq!(a.oread(&h, &mut buf, 0).unwrap(), 6);
    assert_eq!(&buf, b"SECOND");
}

#[test]
fn olock_blocks_another_olock_odelete_and_oput() {
    let s = store();
    let mut a = s.context();
    a.oopen(b"o", 10, OpenMode::CREATE).unwrap();
    a.olock(b"o").unwrap();
    a.olock(b"k").unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|t| {
        let s = &s;
        let tx1 = tx.clone();
        t.spawn(move || {
            let mut b = s.context();
            b.olock(b"o").unwrap();
            tx1.send("olock").unwrap();
            assert!(b.odelete(b"o").unwrap());
            tx1.send("odelete").unwrap();
            // Dropping `b` releases its lock on "o".
        });
        let tx2 = tx.clone();
        t.spawn(move || {
            let mut c = s.context();
            c.oput(b"k", b"v").unwrap();
            tx2.send("oput").unwrap();
        });
        until_waiting(&a, b"o", 1);
        until_waiting(&a, b"k", 1);
        assert!(rx.try_recv().is_err(), "nothing got through a held lock");
        assert_eq!(s.object_size(b"o").unwrap(), Some(10));
        assert_eq!(s.get(b"k").unwrap(), None);
        a.ounlock(b"k").unwrap();
        assert_eq!(rx.recv().unwrap(), "oput");
        assert!(rx.try_recv().is_err(), "`o` is still locked");
        a.ounlock(b"o").unwrap();
        assert_eq!(rx.recv().unwrap(), "olock");
        assert_eq!(rx.recv().unwrap(), "odelete");
    });
    assert_eq!(s.object_size(b"o").unwrap(), None);
    assert_eq!(s.get(b"k").unwrap(), Some(b"v".to_vec()));
    // The dropped context's lock is gone: this does not wait.
    a.olock(b"o").unwrap();
    assert!(!a.locked_by_other(b"o"));
}

#[test]
fn a_dropped_context_releases_its_locks() {
    let s = store();
    let (locked_tx, locked_rx) = mpsc::channel();
    let (drop_tx, drop_rx) = mpsc::channel::<()>();
    std::thread::scope(|t| {
        let s = &s;
        t.spawn(move || {
            let mut b = s.context();
            b.olock(b"x").unwrap();
            b.olock(b"x").unwrap();
            locked_tx.send(()).unwrap();
            drop_rx.recv().unwrap();
            // Dropped here, holding "x" twice.
        });
        locked_rx.recv().unwrap();
        let a = s.context();
        assert!(a.locked_by_other(b"x"));
        drop_tx.send(()).unwrap();
    });
    let mut a = s.context();
    assert!(!a.locked_by_other(b"x"));
    a.olock(b"x").unwrap();
    a.ounlock(b"x").unwrap();
}

#[test]
fn modes_and_misuse_are_refused_with_errors() {
    let s = store();
    let mut c = s.context();
    assert!(c.oopen(b"none", 0, OpenMode::READ).unwrap().is_none());
    let h = c.oopen(b"o", 0, OpenMode::CREATE).unwrap().unwrap();
    c.owrite(&h, b"data", 0).unwrap();
    let r = c.oopen(b"o", 0, OpenMode::READ).unwrap().unwrap();
    let e = c.owrite(&r, b"x", 0).unwrap_err();
    assert!(e.to_string().contains("does not allow writes"), "{e}");
    let w = dstore::ObjectHandle::clone(&r);
    assert_eq!(w.name(), b"o");
    assert!(c.ounlock(b"o").is_err(), "not locked");
    // Key-value calls on an object are type errors.
    let mut v = Vec::new();
    assert_eq!(c.oget(b"o", &mut v), Err(StoreError::WrongType));
    assert_eq!(c.oput(b"o", b"v"), Err(StoreError::WrongType));
    // Too large.
    assert!(matches!(
        c.owrite(&h, b"x", dstore::OBJECT_BYTES_MAX),
        Err(StoreError::TooLarge(_))
    ));
}

#[test]
fn threads_with_their_own_contexts_write_and_read_their_objects() {
    let s = store();
    std::thread::scope(|t| {
        for i in 0..4u8 {
            let s = &s;
            t.spawn(move || {
                let mut c = s.context();
                let name = [b'o', i];
                let h = c.oopen(&name, 0, OpenMode::CREATE).unwrap().unwrap();
                for round in 0..8u8 {
                    let data = vec![i ^ round; 4096 + 17 * i as usize];
                    c.owrite(&h, &data, 0).unwrap();
                    let mut back = vec![0u8; data.len()];
                    assert_eq!(c.oread(&h, &mut back, 0).unwrap(), data.len());
                    assert_eq!(back, data);
                }
                // Every thread also writes its own range of one block of a shared object, again
                // and again: partial writes of one block race (each merges the block it read),
                // and none may be lost.
                let shared = c.oopen(b"shared", 0, OpenMode::CREATE).unwrap().unwrap();
                for _ in 0..20 {
                    c.owrite(&shared, &[i; 100], i as u64 * 100).unwrap();
                }
            });
        }
    });
    let mut c = s.context();
    let h = c.oopen(b"shared", 0, OpenMode::READ).unwrap().unwrap();
    let mut all = vec![0u8; 400];
    assert_eq!(c.oread(&h, &mut all, 0).unwrap(), 400);
    for i in 0..4u8 {
        assert!(all[i as usize * 100..][..100].iter().all(|&b| b == i));
    }
    assert!(s.has_object_file());
}

#[test]
fn file_blocks_of_old_versions_are_reused_only_after_a_checkpoint() {
    let s = store();
    let mut c = s.context();
    let h = c.oopen(b"o", 0, OpenMode::CREATE).unwrap().unwrap();
    let write = |c: &mut dstore::Context<'_, _>, v: u8| {
        c.owrite(&h, &[v; 8192], 0).unwrap();
        let mut back = vec![0u8; 8192];
        c.oread(&h, &mut back, 0).unwrap();
        assert!(back.iter().all(|&b| b == v));
    };
    write(&mut c, 1);
    assert_eq!(s.object_file_blocks_in_use(), Some(2));
    write(&mut c, 2);
    // The old version's blocks stay reserved: no checkpoint holds the new pointers yet.
    assert_eq!(s.object_file_blocks_in_use(), Some(4));
    s.save().unwrap();
    // That checkpoint began after the second write, but the allocator counts it finished only
    // once the next one has started (two log swaps).
    write(&mut c, 3);
    assert_eq!(s.object_file_blocks_in_use(), Some(6));
    s.save().unwrap();
    // The first version's two blocks went back and were reused for the fourth.
    write(&mut c, 4);
    assert_eq!(s.object_file_blocks_in_use(), Some(6));
    assert!(c.odelete(b"o").unwrap());
    s.save().unwrap();
    s.save().unwrap();
    let p = c.oopen(b"p", 0, OpenMode::CREATE).unwrap().unwrap();
    c.owrite(&p, b"x", 0).unwrap();
    assert_eq!(
        s.object_file_blocks_in_use(),
        Some(1),
        "two checkpoints after the delete every freed block went back"
    );
}
