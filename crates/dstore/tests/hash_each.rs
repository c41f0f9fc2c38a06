//! `View::hash_each` (the walk HGETALL, HKEYS and HVALS write their replies from) against
//! `View::hash_all` on the store and against the in-memory reference: the same pairs, in the
//! store's own order, with the same count, for hashes of every size from empty to thousands of
//! fields, while their tables rehash (fields added and removed between the reads), and for keys
//! that are absent, expired or of another kind.

mod effects;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use effects::START;
use model::{Bytes, Db, Effect, Keyspace, Scope, Value, View};
use pmem::rng::SplitMix64;
use pmem::{SimConfig, SimMedium};

/// The pairs `hash_each` lends, in order, and the count it returns.
fn each(t: &dyn View, db: Db, key: &[u8]) -> (Vec<(Bytes, Bytes)>, u64) {
    let mut got = Vec::new();
    let n = t.hash_each(db, key, &mut |f, v| got.push((f.to_vec(), v.to_vec())));
    (got, n)
}

/// Reads `key` from `ks` both ways; the pairs sorted (for comparing stores).
fn read(ks: &dyn Keyspace, db: Db, key: &[u8]) -> Vec<(Bytes, Bytes)> {
    let mut out = Vec::new();
    ks.transact(Scope::Keys(&[(db, key)]), false, &mut |t| {
        let (pairs, n) = each(t, db, key);
        assert_eq!(
            pairs,
            t.hash_all(db, key),
            "hash_each walks in hash_all's order"
        );
        assert_eq!(n, pairs.len() as u64, "the count is the number of pairs");
        assert_eq!(n, t.hash_len(db, key));
        out = pairs;
        Ok(())
    })
    .expect("read");
    out.sort();
    out
}

fn apply(ks: &dyn Keyspace, db: Db, key: &[u8], e: Effect) {
    ks.transact(Scope::Keys(&[(db, key)]), true, &mut |t| {
        t.apply(vec![e.clone()])
    })
    .expect("apply");
}

#[test]
fn hash_each_matches_hash_all_and_the_reference_while_tables_rehash() {
    let cfg = effects::config();
    let clock = Arc::new(AtomicI64::new(START));
    let reference = effects::reference(&clock);
    let sim = Arc::new(SimMedium::from_image(
        effects::base_image(&cfg),
        SimConfig::default(),
    ));
    let store = effects::open(Arc::clone(&sim), &cfg, &clock).expect("open");
    let mut rng = SplitMix64::new(27);
    let mut model: BTreeMap<Bytes, Bytes> = BTreeMap::new();
    let key = b"h".to_vec();
    for round in 0..120 {
        // Mostly growth (so the table doubles several times and is read mid-rehash), some
        // removals (unlinks also move old buckets).
        let add = 1 + rng.below(40) as usize;
        let mut pairs = Vec::new();
        for _ in 0..add {
            let f = format!("field{}", rng.below(2_000)).into_bytes();
            let v = vec![b'a' + rng.below(26) as u8; rng.below(60) as usize];
            model.insert(f.clone(), v.clone());
            pairs.push((f, v));
        }
        let e = Effect::HSet {
            db: 0,
            key: key.clone(),
            pairs,
        };
        apply(&store, 0, &key, e.clone());
        apply(&reference, 0, &key, e);
        if round % 3 == 2 {
            let fields: Vec<Bytes> = (0..rng.below(15))
                .map(|_| format!("field{}", rng.below(2_000)).into_bytes())
                .collect();
            for f in &fields {
                model.remove(f);
            }
            let e = Effect::HDel {
                db: 0,
                key: key.clone(),
                fields,
            };
            apply(&store, 0, &key, e.clone());
            apply(&reference, 0, &key, e);
        }
        let want: Vec<(Bytes, Bytes)> = model.iter().map(|(f, v)| (f.clone(), v.clone())).collect();
        assert_eq!(read(&store, 0, &key), want, "store, round {round}");
        assert_eq!(read(&reference, 0, &key), want, "reference, round {round}");
        if round % 8 == 7 {
            // The test store's log is small and checkpoints only when asked.
            store.save().expect("checkpoint");
        }
    }
    assert!(model.len() > 500, "the hash grew past several doublings");

    // Absent, of another kind, expired: nothing walked, count 0.
    apply(
        &store,
        0,
        b"s",
        Effect::Put {
            db: 0,
            key: b"s".to_vec(),
            value: Value::String(b"x".to_vec()),
            expire_at_ms: 0,
        },
    );
    apply(
        &store,
        0,
        b"gone",
        Effect::HSet {
            db: 0,
            key: b"gone".to_vec(),
            pairs: vec![(b"f".to_vec(), b"v".to_vec())],
        },
    );
    apply(
        &store,
        0,
        b"gone",
        Effect::Expire {
            db: 0,
            key: b"gone".to_vec(),
            at_ms: START - 1,
        },
    );
    for k in [&b"nothere"[..], b"s", b"gone"] {
        assert!(read(&store, 0, k).is_empty(), "{k:?}");
    }
    // Another database holds its own hash under the same key.
    assert!(read(&store, 1, &key).is_empty());
}
