//! A store rebuilt by replaying the operations of another accepts exactly what the other did,
//! at the shadow slots' capacity too: into a new store (another pool, so another hash seed for
//! its buckets) and into the same store after FLUSHALL.
//!
//! Why it holds (see `docs/format/dstore-ops.md`): keys are placed in shards by a seed that is
//! the same in every store, so each shard sees the same operations in the same order; what an
//! operation allocates does not depend on which bucket a key hashed to; and FLUSHALL empties
//! each arena to the image of a new one. Every shard's arena therefore has the same length
//! after each operation as in the original, and the engine's admission rule, which reads only
//! those lengths, decides every write as it did.

mod scratch;

use dipper::layout::{ROOT_COPY_OFFSETS, ROOT_MACHINE_AT, ROOT_REGION};
use dipper::root::Root;
use dstore::{Config, Store, StoreError};
use pmem::rng::SplitMix64;
use pmem::{Mapping, OpenOptions, Pool};
use scratch::Scratch;
use std::sync::Arc;

const SHARDS: usize = 16;

/// Fixed slots of `pages` pages each (the store's ceiling), no background checkpoints.
fn config(pages: u64, grow: bool) -> Config {
    let page = dipper::arena::PAGE as u64;
    let mut slot_bytes = dipper::layout::SLOT_HEADER_BYTES as u64 + pages * page;
    while dipper::layout::slot_geometry(slot_bytes).is_none_or(|(p, _)| p < pages) {
        slot_bytes += page;
    }
    Config {
        shards: SHARDS,
        log_bytes: 32 << 20,
        slot_bytes,
        background: false,
        grow,
        ..Config::default()
    }
}

/// One write of the workload.
#[derive(Debug, Clone)]
enum Write {
    Set(Vec<u8>, Vec<u8>),
    Del(Vec<u8>),
    HSet(Vec<u8>, Vec<u8>, Vec<u8>),
}

fn value(rng: &mut SplitMix64, tag: u64) -> Vec<u8> {
    let len = 16 + rng.below(400) as usize;
    let mut v = format!("{tag:016x}").into_bytes();
    v.resize(len, b'a' + (tag % 26) as u8);
    v
}

/// `n` writes over 16,000 keys: new keys, overwrites with other sizes, deletions and hash fields.
fn workload(seed: u64, n: usize) -> Vec<Write> {
    let mut rng = SplitMix64::new(seed);
    (0..n as u64)
        .map(|i| {
            let key = format!("key:{:05}", rng.below(16_000)).into_bytes();
            match rng.below(20) {
                0..=1 => Write::Del(key),
                2..=3 => {
                    let field = format!("f{}", rng.below(40)).into_bytes();
                    let mut k = b"h".to_vec();
                    k.extend_from_slice(&key[..7]);
                    Write::HSet(k, field, value(&mut rng, i))
                }
                _ => Write::Set(key, value(&mut rng, i)),
            }
        })
        .collect()
}

/// Whether the store accepted each write (a refusal for want of room is `false`; any other
/// error fails the test).
fn apply<M>(store: &Store<M>, writes: &[Write]) -> Vec<bool>
where
    M: pmem::Medium + Clone + Send + Sync + 'static,
{
    writes
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let r = match w {
                Write::Set(k, v) => store.set(k, v, false, false, None).map(drop),
                Write::Del(k) => store.del(&[&k[..]]).map(drop),
                Write::HSet(k, f, v) => store.hset(k, &[(&f[..], &v[..])]).map(drop),
            };
            match r {
                Ok(()) => true,
                Err(StoreError::OutOfSpace(_)) => false,
                Err(e) => panic!("write {i} ({w:?}): {e}"),
            }
        })
        .collect()
}

/// Every key of the workload with what the store holds for it.
fn contents<M>(store: &Store<M>, writes: &[Write]) -> Vec<(Vec<u8>, Option<Vec<u8>>)>
where
    M: pmem::Medium + Clone + Send + Sync + 'static,
{
    let mut keys: Vec<Vec<u8>> = writes
        .iter()
        .map(|w| match w {
            Write::Set(k, _) | Write::Del(k) | Write::HSet(k, _, _) => k.clone(),
        })
        .collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .map(|k| {
            let v = if k.starts_with(b"h") {
                let mut all = store.hgetall(&k).unwrap();
                all.sort();
                (!all.is_empty()).then(|| {
                    all.into_iter()
                        .flat_map(|(f, v)| [f, b"=".to_vec(), v, b";".to_vec()].concat())
                        .collect()
                })
            } else {
                store.get(&k).unwrap()
            };
            (k, v)
        })
        .collect()
}

/// Every shard's arena image.
fn shard_images<M>(store: &Store<M>) -> Vec<Vec<u8>>
where
    M: pmem::Medium + Clone + Send + Sync + 'static,
{
    (0..store.engine().shards())
        .map(|s| store.engine().read(s, |a| a.image().to_vec()).unwrap())
        .collect()
}

fn first_difference(a: &[bool], b: &[bool]) -> Option<(usize, bool, bool)> {
    a.iter()
        .zip(b)
        .enumerate()
        .find(|(_, (x, y))| x != y)
        .map(|(i, (x, y))| (i, *x, *y))
}

/// Fill a store of configuration `cfg` past what it takes, replay the same writes into a new
/// store and into the same store after FLUSHALL, and check each accepts exactly the writes the
/// original did and ends with the same contents; then that each checkpoints, closes and reopens
/// with them.
fn rebuilt_stores_accept_what_the_original_accepted(tag: &str, cfg: Config) {
    let writes = workload(25, 30_000);
    let a = Scratch::new(&format!("{tag}-a"));
    let b = Scratch::new(&format!("{tag}-b"));
    let (original, _) = Store::open_dir(&a.0, cfg.clone()).unwrap();
    let empty = original.engine().stats().arena_bytes;
    let accepted = apply(&original, &writes);
    let refused = accepted.iter().filter(|x| !**x).count();
    let st = original.engine().stats();
    eprintln!(
        "{tag}: {} of {} writes accepted; arenas {} bytes, live {} bytes, slot {} bytes, \
         maxmemory {}",
        accepted.len() - refused,
        accepted.len(),
        st.arena_bytes,
        st.live_bytes,
        st.slot_capacity_bytes,
        cfg.maxmemory_bytes
    );
    let first = accepted
        .iter()
        .position(|x| !x)
        .expect("the store filled up");
    assert!(
        refused > 1000 && first > 10_000,
        "the workload should fill the store part way: first refusal at {first}, {refused} refused"
    );
    let want = contents(&original, &writes);

    // Into a new store: another pool, another seed for the buckets.
    let (fresh, _) = Store::open_dir(&b.0, cfg.clone()).unwrap();
    assert_ne!(
        fresh.engine().uuid(),
        original.engine().uuid(),
        "a pool of its own"
    );
    let again = apply(&fresh, &writes);
    assert_eq!(
        first_difference(&accepted, &again),
        None,
        "(write, original accepted, new store accepted)"
    );
    assert_eq!(contents(&fresh, &writes), want);
    let fst = fresh.engine().stats();
    assert_eq!(
        (fst.arena_bytes, fst.live_bytes),
        (st.arena_bytes, st.live_bytes)
    );

    // Into the same store after FLUSHALL: its arenas are back to a new store's size.
    original.flushall().unwrap();
    assert_eq!(original.engine().stats().arena_bytes, empty);
    assert_eq!(original.dbsize().unwrap(), 0);
    let flushed = apply(&original, &writes);
    assert_eq!(
        first_difference(&accepted, &flushed),
        None,
        "(write, original accepted, flushed store accepted)"
    );
    assert_eq!(contents(&original, &writes), want);

    // Every image still fits: each store checkpoints, closes (a last checkpoint) and reopens
    // with the same contents.
    for (store, dir) in [(original, &a.0), (fresh, &b.0)] {
        store.save().expect("the image fits");
        store.close().expect("close");
        drop(store);
        let (store, opened) = Store::open_dir(dir, cfg.clone()).unwrap();
        assert_eq!(opened.recovery.active_records, 0, "a clean close");
        assert_eq!(contents(&store, &writes), want);
        let keys = want.iter().filter(|(_, v)| v.is_some()).count() as u64;
        assert_eq!(store.validate().unwrap(), keys);
        store.close().unwrap();
    }
}

/// Fixed slots of 1,024 pages: the ceiling is the engine's admission rule (the arenas' bytes
/// plus a sixteenth within a slot).
#[test]
fn a_store_rebuilt_near_its_slot_capacity_accepts_what_the_original_accepted() {
    rebuilt_stores_accept_what_the_original_accepted("rebuild-slots", config(1024, false));
}

/// A growable store (the command line's) under maxmemory: the ceiling is the bytes of
/// allocated blocks, which include every shard's bucket array.
#[test]
fn a_store_rebuilt_at_maxmemory_accepts_what_the_original_accepted() {
    let cfg = Config {
        maxmemory_bytes: 3 << 20,
        ..config(1024, true)
    };
    rebuilt_stores_accept_what_the_original_accepted("rebuild-maxmemory", cfg);
}

/// Crash the store (drop it unclosed) after a checkpoint that left its log empty, open it
/// again, and check the image loaded is the DRAM state byte for byte.
fn crash_and_compare<M>(
    store: Store<M>,
    dir: &std::path::Path,
    cfg: &Config,
    what: &str,
) -> Store<Arc<Mapping>>
where
    M: pmem::Medium + Clone + Send + Sync + 'static,
{
    let images = shard_images(&store);
    drop(store);
    let (store, opened) = Store::open_dir(dir, cfg.clone()).unwrap();
    assert_eq!(
        opened.recovery.active_records + opened.recovery.archived_records,
        0,
        "{what}: the last checkpoint left the log empty"
    );
    let loaded = shard_images(&store);
    for (s, (a, b)) in images.iter().zip(&loaded).enumerate() {
        assert!(
            a == b,
            "{what}: shard {s}'s loaded image is not its DRAM image"
        );
    }
    store.validate().unwrap();
    store
}

/// FLUSHALL empties the arenas in place; the shadow images written after it (whole images in
/// fixed slots, new frames in a growable pool) are the emptied state and what follows it, byte
/// for byte: no page of an image from before the flush is left in a slot, neither where the
/// arenas are shorter nor where they grew back to their old lengths with a lower top, nor
/// where they grew past them.
#[test]
fn images_written_after_flushall_hold_the_emptied_state() {
    for grow in [false, true] {
        let dir = Scratch::new(if grow { "flush-grow" } else { "flush-fixed" });
        let cfg = config(2048, grow);
        let (store, _) = Store::open_dir(&dir.0, cfg.clone()).unwrap();
        let before = workload(7, 6_000);
        assert!(apply(&store, &before).iter().all(|x| *x));
        // Both slots hold images of the full store.
        store.save().unwrap();
        store.save().unwrap();
        let held = store.engine().stats().arena_bytes;
        store.flushall().unwrap();
        store.save().unwrap();
        // The same writes but the last few: each arena is laid out as before the flush, its
        // length mostly the same, its top a little lower. One checkpoint: the image is in the
        // slot that last held the full store.
        let prefix = &before[..5_700];
        assert!(apply(&store, prefix).iter().all(|x| *x));
        store.save().unwrap();
        let want = contents(&store, prefix);
        let store = crash_and_compare(store, &dir.0, &cfg, &format!("grow {grow}, refilled"));
        assert_eq!(contents(&store, prefix), want);
        let gone = contents(&store, &before[5_700..]);
        assert!(
            gone.iter()
                .filter(|(k, _)| !want.iter().any(|(w, _)| w == k))
                .all(|(_, v)| v.is_none()),
            "flushed keys stay gone"
        );
        // More than before: the arenas grow past their old lengths.
        store.flushall().unwrap();
        store.save().unwrap();
        let after = workload(8, 12_000);
        assert!(apply(&store, &after).iter().all(|x| *x));
        assert!(
            store.engine().stats().arena_bytes > held,
            "grow: {grow}: the arenas should end longer than before the flush"
        );
        store.save().unwrap();
        store.save().unwrap();
        let want = contents(&store, &after);
        let store = crash_and_compare(store, &dir.0, &cfg, &format!("grow {grow}, grown"));
        assert_eq!(contents(&store, &after), want);
        store.close().unwrap();
        drop(store);
        let (store, _) = Store::open_dir(&dir.0, cfg.clone()).unwrap();
        assert_eq!(
            contents(&store, &after),
            want,
            "grow: {grow}, after a close"
        );
        store.close().unwrap();
    }
}

/// A root whose machine word has a bit this version does not know is refused at open, the
/// field named; nothing is written.
#[test]
fn an_unknown_machine_word_is_refused() {
    let dir = Scratch::new("machine-word");
    let (store, _) = Store::open_dir(&dir.0, config(1024, false)).unwrap();
    store.set(b"k", b"v", false, false, None).unwrap();
    store.close().unwrap();
    drop(store);
    let path = dir.0.join(dstore::POOL_FILE);
    let pool = Pool::open(&path, &OpenOptions::default()).unwrap();
    let base = pool.region(ROOT_REGION).unwrap().offset as usize;
    let (mut root, _) = Root::load(pool.medium(), base, &pool.uuid()).unwrap();
    assert_eq!(
        root.machine,
        dstore::machine::MACHINE_FIXED_PLACEMENT | dstore::machine::MACHINE_INCREMENTAL_REHASH
    );
    root.machine |= 1 << 7;
    root.store(pool.medium(), base, &pool.uuid()).unwrap();
    pool.close().unwrap();
    let pool = Pool::open(&path, &OpenOptions::default())
        .unwrap()
        .map_medium(Arc::new);
    let _: &Pool<Arc<Mapping>> = &pool;
    match Store::open(pool, config(1024, false)) {
        Err(StoreError::Corrupt(c)) => {
            assert_eq!(c.field, "machine");
            let copy = ROOT_COPY_OFFSETS[(root.seq % 2) as usize];
            assert_eq!(c.offset, (base + copy + ROOT_MACHINE_AT) as u64);
            assert!(c.found.contains("0x80"), "{}", c.found);
        }
        Err(e) => panic!("refused, but not as damage: {e}"),
        Ok(_) => panic!("a store with an unknown machine word opened"),
    }
}
