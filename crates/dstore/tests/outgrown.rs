//! A store whose DRAM state outgrew its shadow slots still opens with every acknowledged write.
//!
//! The engine admits a growing write while the state plus a sixteenth fits a slot, but the
//! write itself can be larger than that sixteenth, so one admitted write can take the state
//! past the slot.
//! A checkpoint of that state cannot be written, and one interrupted half-way (the root says
//! "checkpointing") could not be redone at open: the store could never be opened again.
//! (Stores with fixed slots only: a growable store's slots grow.)

mod scratch;

use dipper::layout::{ROOT_REGION, STATE_CHECKPOINTING};
use dipper::root::Root;
use dstore::{Config, Store, StoreError};
use pmem::{OpenOptions, Pool};
use scratch::Scratch;

/// One shard (a fixed key placement), a slot of 128 pages (512 KiB), no background
/// checkpoints.
fn config() -> Config {
    let page = dipper::arena::PAGE as u64;
    let mut slot_bytes = dipper::layout::SLOT_HEADER_BYTES as u64 + 128 * page;
    while dipper::layout::slot_geometry(slot_bytes).is_none_or(|(pages, _)| pages < 128) {
        slot_bytes += page;
    }
    Config {
        shards: 1,
        log_bytes: 8 << 20,
        slot_bytes,
        background: false,
        // Fixed-size slots, as stores were made before growth: the case this test is about.
        grow: false,
        ..Config::default()
    }
}

fn key(i: usize) -> Vec<u8> {
    format!("key-{i:06}").into_bytes()
}

#[test]
fn an_interrupted_checkpoint_that_cannot_fit_is_left_unfinished_and_the_store_opens() {
    let scratch = Scratch::new("outgrown");
    let (store, _) = Store::open_dir(&scratch.0, config()).unwrap();
    // An arena grows only by what a write needs (64 KiB at a time): small writes up to a
    // quantum below the admission bound, then one large write, admitted because the state
    // plus a sixteenth still fits, takes the state past the slot.
    let mut acked = 0;
    loop {
        store
            .set(&key(acked), b"value", false, false, None)
            .unwrap_or_else(|e| panic!("write {acked}: {e}"));
        acked += 1;
        let st = store.engine().stats();
        if (st.arena_bytes + (64 << 10)) * 17 / 16 > st.slot_capacity_bytes {
            break;
        }
        assert!(acked < 1_000_000, "the store never filled");
    }
    store
        .set(&key(acked), &[7u8; 128 << 10], false, false, None)
        .expect("the large write is admitted");
    acked += 1;
    let st = store.engine().stats();
    assert!(
        st.arena_bytes > st.slot_capacity_bytes,
        "the setup should overshoot: {} bytes in a {}-byte slot",
        st.arena_bytes,
        st.slot_capacity_bytes
    );
    // A crash, then the root as a checkpoint that swapped the logs leaves it: every record in
    // the archived log, the image still the empty one.
    drop(store);
    let path = scratch.0.join(dstore::POOL_FILE);
    let pool = Pool::open(&path, &OpenOptions::default()).unwrap();
    let base = pool.region(ROOT_REGION).unwrap().offset as usize;
    let (mut root, _) = Root::load(pool.medium(), base, &pool.uuid()).unwrap();
    root.active = 1 - root.active;
    root.state = STATE_CHECKPOINTING;
    root.store(pool.medium(), base, &pool.uuid()).unwrap();
    drop(pool); // not closed: still a crash
    // The large value lies below the arena's top, so the interrupted checkpoint's image does
    // not fit the slot either: each open leaves it unfinished and replays both logs. Every
    // acknowledged write is there each time.
    for _ in 0..2 {
        let (store, opened) = Store::open_dir(&scratch.0, config()).expect("the store opens");
        assert!(!opened.recovery.redone_checkpoint);
        let replayed = opened.recovery.archived_records + opened.recovery.active_records;
        assert_eq!(replayed, acked as u64);
        assert_eq!(store.dbsize().unwrap(), acked as u64);
        for i in [0, acked / 2, acked - 2] {
            assert_eq!(store.get(&key(i)).unwrap().as_deref(), Some(&b"value"[..]));
        }
        assert_eq!(
            store.get(&key(acked - 1)).unwrap().as_deref(),
            Some(&[7u8; 128 << 10][..])
        );
        // With fixed slots, no checkpoint starts once the arenas are longer than a slot (the
        // check is made on their lengths, a bound on what the image needs).
        assert!(matches!(store.save(), Err(StoreError::OutOfSpace(_))));
        // Closing cannot take its final checkpoint; the next open is as after a crash.
        assert!(store.close().is_err());
    }
}

/// A store made with fixed slots (as before growth) and filled to its ceiling opens through
/// `open_dir` with the default configuration: its pool is made growable, every key is there,
/// and it takes several times more data, the file growing.
#[test]
fn a_fixed_store_opened_by_open_dir_turns_growable_and_takes_more() {
    let scratch = Scratch::new("migrate");
    let (store, opened) = Store::open_dir(&scratch.0, config()).unwrap();
    assert!(opened.created);
    assert!(!store.engine().stats().slots_grow);
    let mut acked = 0;
    loop {
        match store.set(&key(acked), b"value", false, false, None) {
            Ok(_) => acked += 1,
            Err(StoreError::OutOfSpace(_)) => break,
            Err(e) => panic!("write {acked}: {e}"),
        }
        assert!(acked < 1_000_000, "the store never filled");
    }
    // Its last checkpoint cannot run (the arenas outgrew the slot): the close fails and the
    // next open replays the log, as after a crash.
    let _ = store.close();
    drop(store);
    let path = scratch.0.join(dstore::POOL_FILE);
    let fixed_len = std::fs::metadata(&path).unwrap().len();
    let pool = Pool::open(&path, &OpenOptions::default()).unwrap();
    assert!(!pool.growable());
    drop(pool.close());
    let grow = Config {
        background: false,
        ..Config::default()
    };
    let (store, opened) = Store::open_dir(&scratch.0, grow.clone()).expect("opens and migrates");
    assert!(!opened.created);
    assert!(store.engine().stats().slots_grow);
    assert_eq!(store.dbsize().unwrap(), acked as u64);
    for i in acked..acked * 5 {
        store
            .set(&key(i), b"value", false, false, None)
            .unwrap_or_else(|e| panic!("write {i} after migration: {e}"));
    }
    store.save().unwrap();
    store.close().unwrap();
    drop(store);
    assert!(std::fs::metadata(&path).unwrap().len() >= fixed_len);
    let (store, opened) = Store::open_dir(&scratch.0, grow).unwrap();
    assert!(opened.recovery.clean_shutdown);
    assert_eq!(store.dbsize().unwrap(), 5 * acked as u64);
    for i in [0, acked - 1, acked, 5 * acked - 1] {
        assert_eq!(store.get(&key(i)).unwrap().as_deref(), Some(&b"value"[..]));
    }
    store.close().unwrap();
    drop(store);
    let pool = Pool::open(&path, &OpenOptions::default()).unwrap();
    assert!(pool.growable(), "the header records the switch");
    drop(pool.close());
}
