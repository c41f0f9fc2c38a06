//! A store written before databases, lists, sets and `OP_EFFECTS` existed (commit `da327e5`,
//! `tests/fixtures/README.md`) opens and reads the same today: cleanly closed, and crashed with
//! the old code's records left to replay. Its keys are database 0's; the keyspace sees them
//! there, and new kinds and databases can be added beside them and survive a reopen.

mod effects;
mod model;

use std::collections::BTreeMap;
use std::sync::Arc;

use ::model::{Effect, Keyspace, Scope, Value};
use model::Dump;
use pmem::rng::SplitMix64;
use pmem::{SimConfig, SimMedium};

fn image(name: &str) -> Vec<u8> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("{name}.img"));
    let b = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let len = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let mut out = vec![0u8; len];
    for chunk in b[8..].chunks(8 + 4096) {
        let at = u64::from_le_bytes(chunk[..8].try_into().unwrap()) as usize;
        out[at..at + 4096].copy_from_slice(&chunk[8..]);
    }
    out
}

/// What the old code's workload left (the same generator, unchanged since).
fn expected() -> BTreeMap<Vec<u8>, Dump> {
    let mut rng = SplitMix64::new(4242);
    let ops: Vec<_> = (0..60)
        .map(|_| model::random_op(&mut rng, "", 12, false))
        .collect();
    model::prefixes(&ops).pop().expect("a final state")
}

fn object_data() -> Vec<u8> {
    (0..5000u32).map(|i| (i % 251) as u8).collect()
}

/// The same contents as the keyspace's dump sees them (database 0, no deadlines).
fn as_keyspace(d: &BTreeMap<Vec<u8>, Dump>) -> Vec<(Vec<u8>, Value)> {
    d.iter()
        .map(|(k, v)| {
            let v = match v {
                Dump::Str(s) => Value::String(s.clone()),
                Dump::Hash(p) => Value::Hash(p.clone()),
                Dump::Z(z) => Value::ZSet(
                    z.iter()
                        .map(|(m, s)| (f64::from_bits(*s), m.clone()))
                        .collect(),
                ),
            };
            (k.clone(), v)
        })
        .collect()
}

/// The old interface's view of the store (its SCAN, GET, HGETALL, ZRANGEBYSCORE), objects left
/// out.
fn old_dump(s: &dstore::Store<Arc<SimMedium>>) -> BTreeMap<Vec<u8>, Dump> {
    let mut out = BTreeMap::new();
    let mut cursor = 0;
    loop {
        let (next, keys) = s.scan(cursor, 7).expect("scan");
        for (k, ty) in keys {
            let d = match ty {
                "string" => Dump::Str(s.get(&k).unwrap().unwrap()),
                "hash" => {
                    let mut v = s.hgetall(&k).unwrap();
                    v.sort();
                    Dump::Hash(v)
                }
                "zset" => Dump::Z(
                    s.zrange_by_score(&k, f64::NEG_INFINITY, false, f64::INFINITY, false, 0, None)
                        .unwrap()
                        .into_iter()
                        .map(|(m, sc)| (m, sc.to_bits()))
                        .collect(),
                ),
                "object" => continue,
                other => panic!("type {other}"),
            };
            out.insert(k, d);
        }
        if next == 0 {
            return out;
        }
        cursor = next;
    }
}

fn check(name: &str) {
    let cfg = model::config(false);
    let sim = Arc::new(SimMedium::from_image(image(name), SimConfig::default()));
    let store = model::open(Arc::clone(&sim), &cfg).expect("an old store opens");
    assert_eq!(
        store.recovery().clean_shutdown,
        name == "clean",
        "{name}: the fixture is what it says"
    );
    if name == "crashed" {
        assert!(
            store.recovery().active_records > 0,
            "{name}: old records were replayed"
        );
    }
    store.validate().expect("structures validate");
    let want = expected();
    assert!(want.len() > 5, "the workload leaves keys");
    assert_eq!(
        old_dump(&store),
        want,
        "{name}: the old interface reads the same"
    );
    assert_eq!(
        store.oread(b"object", 0, 6000).unwrap(),
        Some(object_data()),
        "{name}: the object reads the same"
    );
    // The keyspace sees the same keys in database 0 (the object is not a model value) and
    // nothing elsewhere.
    let seen: Vec<(Vec<u8>, Value)> = effects::dump(&store)
        .into_iter()
        .map(|(db, k, v, _)| {
            assert_eq!(db, 0, "{name}: an old key outside database 0");
            (k, v)
        })
        .collect();
    let mut want_ks = as_keyspace(&want);
    for (_, v) in &mut want_ks {
        if let Value::Hash(p) = v {
            p.sort();
        }
    }
    assert_eq!(seen, want_ks, "{name}: the keyspace reads the same");
    // New kinds in other databases beside the old keys; all of it survives a reopen.
    store
        .transact(Scope::All, true, &mut |t| {
            t.apply(vec![
                Effect::LPush {
                    db: 5,
                    key: b"list".to_vec(),
                    left: false,
                    elems: vec![b"a".to_vec(), b"b".to_vec()],
                },
                Effect::SAdd {
                    db: 0,
                    key: b"new-set".to_vec(),
                    members: vec![b"m".to_vec()],
                },
            ])
        })
        .expect("a new transaction on an old store");
    store.close().expect("close");
    drop(store);
    let sim = Arc::new(SimMedium::from_image(
        sim.durable_image(),
        SimConfig::default(),
    ));
    let store = model::open(sim, &cfg).expect("reopen");
    store
        .validate()
        .expect("structures validate after new writes");
    let mut now: Vec<(u8, Vec<u8>, Value)> = effects::dump(&store)
        .into_iter()
        .map(|(db, k, v, _)| (db, k, v))
        .collect();
    let list = now.pop().expect("the list");
    assert_eq!(
        list,
        (
            5,
            b"list".to_vec(),
            Value::List(vec![b"a".to_vec(), b"b".to_vec()])
        )
    );
    let set = now
        .iter()
        .position(|(_, k, _)| k == b"new-set")
        .map(|i| now.remove(i))
        .expect("the new set");
    assert_eq!(set.2, Value::Set(vec![b"m".to_vec()]));
    let old: Vec<(Vec<u8>, Value)> = now.into_iter().map(|(_, k, v)| (k, v)).collect();
    assert_eq!(old, want_ks, "{name}: the old keys are unchanged");
    assert_eq!(
        store.oread(b"object", 0, 6000).unwrap(),
        Some(object_data()),
        "{name}: the object is unchanged"
    );
}

#[test]
fn a_cleanly_closed_old_store_reads_the_same() {
    check("clean");
}

#[test]
fn a_crashed_old_store_replays_its_records_and_reads_the_same() {
    check("crashed");
}

/// The root's machine word of the store in `sim` (read from a copy of its durable bytes).
fn machine_word(sim: &SimMedium) -> u32 {
    let copy = Arc::new(SimMedium::from_image(
        sim.durable_image(),
        SimConfig::default(),
    ));
    let pool = pmem::Pool::open_medium(copy, &pmem::OpenOptions::default()).expect("pool");
    let base = pool
        .region(dipper::layout::ROOT_REGION)
        .expect("root region")
        .offset as usize;
    dipper::root::Root::load(pool.medium(), base, &pool.uuid())
        .expect("root")
        .0
        .machine
}

/// What the binaries from before incremental rehash accept in that word (commits `117f09c` to
/// `fedd19e`'s parent: `Kv::with_word` refuses any bit but `MACHINE_FIXED_PLACEMENT`, 1).
fn old_binaries_accept(word: u32) -> bool {
    word & !1 == 0
}

/// Tables of the store holding a rehash block: every shard's keyspace and the field or member
/// table of every hash, set and sorted set.
fn tables_rehashing(s: &dstore::Store<Arc<SimMedium>>) -> usize {
    use dstore::machine::{AUX_TYPE_MASK, TYPE_HASH, TYPE_SET, TYPE_ZSET, USER_KEYSPACE};
    use dstore::table;
    (0..s.engine().shards())
        .map(|shard| {
            s.engine()
                .read(shard, |a| {
                    let ks = a.user(USER_KEYSPACE);
                    let mut n = usize::from(table::rehashing(a, ks));
                    for e in table::entries(a, ks) {
                        let ty = e.aux(a) & AUX_TYPE_MASK;
                        if [TYPE_HASH, TYPE_SET, TYPE_ZSET].contains(&ty) {
                            n += usize::from(table::rehashing(a, a.get_u64(e.value_at(a))));
                        }
                    }
                    n
                })
                .expect("read a shard")
        })
        .sum()
}

/// Fields written one operation at a time into one hash (its field table doubles from 4 to 1024
/// buckets), with keys around it and checkpoints between: returns after how many operations a
/// table was left rehashing.
fn grow_tables(s: &dstore::Store<Arc<SimMedium>>) -> usize {
    let mut seen = 0;
    for i in 0..700u32 {
        let f = format!("field-{i}");
        s.hset(b"wide-hash", &[(f.as_bytes(), b"v")]).expect("hset");
        if i % 3 == 0 {
            let k = format!("grow-{i}");
            s.set(k.as_bytes(), b"v", false, false, None).expect("set");
        }
        seen += tables_rehashing(s);
        if i % 40 == 39 {
            // The test configuration takes no checkpoint by itself: empty the log.
            s.save().expect("checkpoint");
        }
    }
    s.validate().expect("structures validate");
    seen
}

/// An old store (its machine word without `MACHINE_INCREMENTAL_REHASH`) keeps doubling its
/// tables in one step after this version writes it, so it never holds a rehash block between
/// operations and binaries from before still read it; a new store has the bit, which those
/// binaries refuse, and its tables do rehash incrementally under the same writes.
#[test]
fn only_stores_older_binaries_refuse_rehash_incrementally() {
    let cfg = model::config(false);
    let sim = Arc::new(SimMedium::from_image(image("clean"), SimConfig::default()));
    let word = machine_word(&sim);
    assert!(old_binaries_accept(word), "the fixture's word {word:#x}");
    let store = model::open(Arc::clone(&sim), &cfg).expect("an old store opens");
    let arena_flags = |s: &dstore::Store<Arc<SimMedium>>| {
        (0..s.engine().shards())
            .map(|i| {
                s.engine()
                    .read(i, |a| a.user(dstore::table::USER_TABLE_FLAGS))
                    .unwrap()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(arena_flags(&store), vec![0; cfg.shards]);
    assert_eq!(grow_tables(&store), 0, "an old store's tables never rehash");
    store.close().expect("close");
    drop(store);
    assert_eq!(machine_word(&sim), word, "the word is unchanged");

    let sim = Arc::new(SimMedium::from_image(
        model::base_image(&cfg),
        SimConfig::default(),
    ));
    let word = machine_word(&sim);
    assert_eq!(
        word,
        dstore::machine::MACHINE_FIXED_PLACEMENT | dstore::machine::MACHINE_INCREMENTAL_REHASH
    );
    assert!(
        !old_binaries_accept(word),
        "older binaries refuse a new store"
    );
    let store = model::open(Arc::clone(&sim), &cfg).expect("a new store opens");
    assert_eq!(
        arena_flags(&store),
        vec![dstore::table::TABLES_INCREMENTAL; cfg.shards]
    );
    assert!(
        grow_tables(&store) > 50,
        "a new store's tables rehash incrementally"
    );
    // FLUSHALL empties each arena to a new one's image; the flag stays.
    store.flushall().expect("flushall");
    assert_eq!(
        arena_flags(&store),
        vec![dstore::table::TABLES_INCREMENTAL; cfg.shards]
    );
    store.close().expect("close");
}
