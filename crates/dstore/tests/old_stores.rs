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
