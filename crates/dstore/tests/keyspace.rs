//! DStore as a `model::Keyspace`, against the in-memory reference `model::MemoryKeyspace`.
//!
//! Random transactions of every effect (every kind of value, 4 databases, deadlines in the
//! past and future, a clock that moves, multi-call and multi-effect transactions, flushes and
//! swaps) run on both. Every `apply` must have the same outcome on both, and at intervals the
//! two must hold the same keys, values and deadlines (read through `scan` and the views only),
//! the same `dbsize` per database, and answer every view method the same way. The store is
//! checkpointed, closed and reopened, and reopened after a power failure (replaying its log),
//! along the way.

mod effects;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use effects::{Dump, START, Tx};
use model::{
    DATABASES, Db, Effect, Keyspace, LexBound, MemoryKeyspace, ModelError, Scope, ScoreBound, Value,
};
use pmem::rng::SplitMix64;
use pmem::{SimConfig, SimMedium};

type SimStore = dstore::Store<Arc<SimMedium>>;

const KEYS: u64 = 8;
const DBS: u8 = 4;

/// Every view method on every key of the test, as one comparable string per key.
fn views(ks: &dyn Keyspace) -> Vec<String> {
    let mut out = Vec::new();
    ks.transact(Scope::All, false, &mut |t| {
        for db in 0..DBS {
            for k in 0..KEYS {
                let key = format!("k{k}").into_bytes();
                let mut line = format!(
                    "{db}/k{k}: {:?} {:?} {:?} {} {}",
                    t.kind(db, &key),
                    t.expire_at(db, &key),
                    t.string(db, &key),
                    t.string_len(db, &key),
                    t.hash_len(db, &key),
                );
                for f in 0..4 {
                    let f = format!("f{f}").into_bytes();
                    line += &format!(" {:?}", t.hash_get(db, &key, &f));
                }
                let n = t.list_len(db, &key);
                line += &format!(" list {n}");
                for (s, e) in [(0, 2), (1, 4), (2, 100), (3, 1), (0, u64::MAX)] {
                    line += &format!(" {:?}", t.list_range(db, &key, s, e));
                }
                line += &format!(" set {}", t.set_len(db, &key));
                for m in 0..6 {
                    let m = format!("m{m}").into_bytes();
                    line += &format!(" {}", t.set_contains(db, &key, &m));
                }
                let zn = t.zset_len(db, &key);
                line += &format!(" zset {zn}");
                for m in 0..5 {
                    let m = format!("m{m}").into_bytes();
                    line += &format!(
                        " {:?}/{:?}",
                        t.zset_score(db, &key, &m),
                        t.zset_rank(db, &key, &m)
                    );
                }
                for (s, e) in [(0, 2), (1, 3), (0, u64::MAX), (2, 1)] {
                    line += &format!(" {:?}", t.zset_range(db, &key, s, e));
                }
                for score in [f64::NEG_INFINITY, -1.0, 0.0, 0.5, 2.0, f64::INFINITY] {
                    for exclusive in [false, true] {
                        let sb = ScoreBound { score, exclusive };
                        line += &format!(
                            " {}/{}",
                            t.zset_rank_of_score(db, &key, sb),
                            t.zset_rank_above(db, &key, sb)
                        );
                    }
                }
                // The BYLEX ranks are defined for sorted sets whose members share one score.
                let one_score = t
                    .zset_range(db, &key, 0, u64::MAX)
                    .windows(2)
                    .all(|w| w[0].1 == w[1].1);
                if one_score {
                    let bounds = [
                        LexBound::Min,
                        LexBound::Max,
                        LexBound::Inclusive(b"m2".to_vec()),
                        LexBound::Exclusive(b"m2".to_vec()),
                        LexBound::Inclusive(b"m".to_vec()),
                    ];
                    for bd in &bounds {
                        line += &format!(
                            " {}/{}",
                            t.zset_rank_of_lex(db, &key, bd),
                            t.zset_rank_above_lex(db, &key, bd)
                        );
                    }
                }
                let canon = |v: Option<Value>| match v {
                    Some(Value::Hash(mut p)) => {
                        p.sort();
                        Some(Value::Hash(p))
                    }
                    Some(Value::Set(mut m)) => {
                        m.sort();
                        Some(Value::Set(m))
                    }
                    other => other,
                };
                line += &format!(" value {:?}", canon(t.value(db, &key)));
                let mut fields: Vec<_> = t.hash_all(db, &key);
                fields.sort();
                let mut members = t.set_members(db, &key);
                members.sort();
                line += &format!(" {fields:?} {members:?}");
                out.push(line);
            }
            // The whole-database reads a Scope::All transaction answers (DBSIZE, KEYS inside
            // EXEC).
            let mut keys: Vec<_> = t
                .db_keys(db)
                .expect("a Scope::All transaction lists keys")
                .into_iter()
                .map(|k| (k.key, k.kind, k.expire_at_ms))
                .collect();
            keys.sort_by(|a, b| a.0.cmp(&b.0));
            out.push(format!(
                "{db}: {} keys {keys:?}",
                t.db_len(db).expect("db_len")
            ));
        }
        Ok(())
    })
    .expect("read everything");
    out
}

fn sizes(ks: &dyn Keyspace) -> Vec<u64> {
    (0..DATABASES as Db)
        .map(|db| ks.dbsize(db).expect("dbsize"))
        .collect()
}

fn expired_keys(ks: &dyn Keyspace) -> BTreeSet<(Db, Vec<u8>)> {
    let mut out = BTreeSet::new();
    let mut cursor = 0;
    for _ in 0..10_000 {
        let (next, found) = ks.expired(cursor, 2).expect("expired");
        out.extend(found);
        if next == 0 {
            return out;
        }
        cursor = next;
    }
    panic!("the expiry walk does not end");
}

fn compare(store: &SimStore, reference: &MemoryKeyspace, what: &str) {
    let got: Dump = effects::dump(store);
    let want: Dump = effects::dump(reference);
    assert_eq!(got, want, "{what}: contents differ");
    assert_eq!(
        effects::dump(reference),
        {
            let mut d = reference.dump();
            for (_, _, v, _) in &mut d {
                if let Value::Hash(p) = v {
                    p.sort();
                }
                if let Value::Set(m) = v {
                    m.sort();
                }
            }
            d
        },
        "{what}: the dump helper reads the reference as its own dump does"
    );
    assert_eq!(views(store), views(reference), "{what}: views differ");
    assert_eq!(sizes(store), sizes(reference), "{what}: dbsize differs");
    let expired: BTreeSet<_> = reference
        .expired(0, usize::MAX)
        .expect("reference expired")
        .1
        .into_iter()
        .collect();
    assert_eq!(expired_keys(store), expired, "{what}: expired keys differ");
    // INFO keyspace's `expires`: the store's own walk against the reference's scan-based
    // count (the trait's default), and against the dump's deadlines.
    let counted = store.expiring(usize::MAX).expect("expiring");
    assert_eq!(
        counted,
        reference.expiring(usize::MAX).expect("reference expiring"),
        "{what}: keys with a deadline per database differ"
    );
    for db in 0..DBS {
        let with_deadline = got
            .iter()
            .filter(|(d, _, _, exp)| *d == db && *exp != 0)
            .count() as u64;
        assert_eq!(
            counted[db as usize], with_deadline,
            "{what}: expiring() against the dump, db {db}"
        );
    }
    for db in 0..DBS {
        match store.random_key(db).expect("random key") {
            None => assert!(
                !got.iter().any(|(d, ..)| *d == db),
                "{what}: RANDOMKEY found nothing in a database with live keys"
            ),
            Some(k) => assert!(
                got.iter().any(|(d, key, ..)| *d == db && *key == k),
                "{what}: RANDOMKEY gave {k:?}, not a live key of database {db}"
            ),
        }
    }
    store.validate().expect("structures validate");
}

fn reopen(
    sim: &Arc<SimMedium>,
    clock: &Arc<AtomicI64>,
    close: Option<&SimStore>,
) -> (Arc<SimMedium>, SimStore) {
    if let Some(s) = close {
        s.close().expect("close");
    }
    let sim = Arc::new(SimMedium::from_image(
        sim.durable_image(),
        SimConfig::default(),
    ));
    let s = effects::open(Arc::clone(&sim), &effects::config(), clock).expect("reopen");
    (sim, s)
}

fn differential(seed: u64, txs: usize) {
    let cfg = effects::config();
    let clock = Arc::new(AtomicI64::new(START));
    let reference = effects::reference(&clock);
    let mut sim = Arc::new(SimMedium::from_image(
        effects::base_image(&cfg),
        SimConfig::default(),
    ));
    let mut store = effects::open(Arc::clone(&sim), &cfg, &clock).expect("open");
    let mut rng = SplitMix64::new(seed);
    for i in 0..txs {
        let tx: Tx = effects::tx(&mut rng, KEYS, DBS, clock.load(Ordering::SeqCst));
        let want = effects::run(&reference, &tx).expect("the reference never fails");
        let got = effects::run(&store, &tx)
            .unwrap_or_else(|e| panic!("seed {seed} tx {i}: the store failed: {e}"));
        assert_eq!(got, want, "seed {seed} tx {i}: outcomes differ for {tx:?}");
        if rng.below(10) == 0 {
            clock.fetch_add(rng.below(700) as i64, Ordering::SeqCst);
        }
        if i % 20 == 19 {
            compare(&store, &reference, &format!("seed {seed} after tx {i}"));
        }
        match rng.below(40) {
            0 => {
                store.save().expect("checkpoint");
            }
            1 => {
                let (s2, st2) = reopen(&sim, &clock, Some(&store));
                drop(std::mem::replace(&mut store, st2));
                sim = s2;
                assert!(store.recovery().clean_shutdown);
                compare(
                    &store,
                    &reference,
                    &format!("seed {seed} reopened after tx {i}"),
                );
            }
            2 => {
                // A power failure: everything acknowledged is durable (Sync) and comes back by
                // replaying the log.
                let (s2, st2) = reopen(&sim, &clock, None);
                drop(std::mem::replace(&mut store, st2));
                sim = s2;
                assert!(!store.recovery().clean_shutdown);
                compare(
                    &store,
                    &reference,
                    &format!("seed {seed} recovered after tx {i}"),
                );
            }
            _ => {}
        }
    }
    compare(&store, &reference, &format!("seed {seed} at the end"));
    let (_, store) = reopen(&sim, &clock, Some(&store));
    compare(
        &store,
        &reference,
        &format!("seed {seed} reopened at the end"),
    );
}

#[test]
fn random_transactions_match_the_reference() {
    for seed in 1..=6 {
        differential(seed, 300);
    }
}

#[test]
fn scope_and_mode_are_enforced() {
    let cfg = effects::config();
    let clock = Arc::new(AtomicI64::new(START));
    let sim = Arc::new(SimMedium::from_image(
        effects::base_image(&cfg),
        SimConfig::default(),
    ));
    let store = effects::open(sim, &cfg, &clock).expect("open");
    let put = |key: &str| Effect::Put {
        db: 0,
        key: key.as_bytes().to_vec(),
        value: Value::String(b"v".to_vec()),
        expire_at_ms: 0,
    };
    // A write in a read-only transaction.
    let r = store.transact(Scope::All, false, &mut |t| t.apply(vec![put("a")]));
    assert!(matches!(r, Err(ModelError::ReadOnly(_))), "{r:?}");
    // A database-wide effect needs every shard.
    let r = store.transact(Scope::Keys(&[(0, b"a")]), true, &mut |t| {
        t.apply(vec![Effect::FlushAll])
    });
    assert!(matches!(r, Err(ModelError::Invalid(_))), "{r:?}");
    // A key whose shard is not locked: some key of these lives on another shard than `a`.
    let mut refused = 0;
    for i in 0..100 {
        let k = format!("x{i}");
        store
            .transact(Scope::Keys(&[(0, b"a")]), true, &mut |t| {
                if let Err(e) = t.apply(vec![put(&k)]) {
                    assert!(matches!(e, ModelError::Invalid(_)), "{e:?}");
                    refused += 1;
                }
                Ok(())
            })
            .unwrap();
    }
    assert!(refused > 0, "some key lives on another shard than `a`");
    // Nothing of a refused call happened; a good call in the same transaction did.
    let r = store.transact(Scope::All, true, &mut |t| {
        t.apply(vec![put("b")])?;
        let bad = t.apply(vec![
            put("c"),
            Effect::LSet {
                db: 0,
                key: b"c".to_vec(),
                index: 0,
                elem: b"x".to_vec(),
            },
        ]);
        assert!(matches!(bad, Err(ModelError::Invalid(_))), "{bad:?}");
        assert_eq!(
            t.string(0, b"b"),
            Some(b"v".to_vec()),
            "a write is seen at once"
        );
        assert_eq!(t.kind(0, b"c"), None, "a refused call changed nothing");
        Ok(())
    });
    r.unwrap();
    let keys: Vec<_> = effects::dump(&store)
        .into_iter()
        .map(|(_, k, ..)| String::from_utf8(k).unwrap())
        .collect();
    assert!(keys.contains(&"b".to_string()) && !keys.contains(&"c".to_string()));
    // Too large: a value over the limit is refused before anything happens.
    let r = store.transact(Scope::All, true, &mut |t| {
        t.apply(vec![Effect::Put {
            db: 0,
            key: b"big".to_vec(),
            value: Value::String(vec![0; 5000]),
            expire_at_ms: 0,
        }])
    });
    assert!(matches!(r, Err(ModelError::TooLarge(_))), "{r:?}");
    // A database number out of range.
    assert!(Keyspace::dbsize(&store, 16).is_err());
    let r = store.transact(Scope::All, true, &mut |t| {
        t.apply(vec![Effect::Del {
            db: 16,
            key: b"a".to_vec(),
        }])
    });
    assert!(matches!(r, Err(ModelError::Invalid(_))), "{r:?}");
}

/// The old interface keeps working on database 0 beside the keyspace's other databases, and
/// the two see each other's writes there.
#[test]
fn the_old_interface_is_database_zero() {
    let cfg = effects::config();
    let clock = Arc::new(AtomicI64::new(START));
    let sim = Arc::new(SimMedium::from_image(
        effects::base_image(&cfg),
        SimConfig::default(),
    ));
    let store = effects::open(sim, &cfg, &clock).expect("open");
    store.set(b"k", b"zero", false, false, None).unwrap();
    store
        .transact(Scope::All, true, &mut |t| {
            t.apply(vec![
                Effect::Put {
                    db: 3,
                    key: b"k".to_vec(),
                    value: Value::String(b"three".to_vec()),
                    expire_at_ms: 0,
                },
                Effect::SAdd {
                    db: 0,
                    key: b"s".to_vec(),
                    members: vec![b"m".to_vec()],
                },
            ])
        })
        .unwrap();
    assert_eq!(store.get(b"k").unwrap(), Some(b"zero".to_vec()));
    assert_eq!(store.key_type(b"s").unwrap(), "set");
    assert_eq!(dstore::Store::dbsize(&store).unwrap(), 2);
    assert_eq!(Keyspace::dbsize(&store, 3).unwrap(), 1);
    let (_, keys) = dstore::Store::scan(&store, 0, 100).unwrap();
    assert_eq!(
        keys.len(),
        2,
        "SCAN of the old interface sees database 0 only"
    );
    store
        .transact(Scope::All, true, &mut |t| {
            t.apply(vec![Effect::SwapDb { a: 0, b: 3 }])
        })
        .unwrap();
    assert_eq!(store.get(b"k").unwrap(), Some(b"three".to_vec()));
    assert_eq!(store.key_type(b"s").unwrap(), "none");
    assert_eq!(dstore::Store::dbsize(&store).unwrap(), 1);
    assert_eq!(Keyspace::dbsize(&store, 3).unwrap(), 2);
    store.del(&[b"k"]).unwrap();
    assert_eq!(Keyspace::dbsize(&store, 0).unwrap(), 0);
    store.flushall().unwrap();
    assert_eq!(Keyspace::dbsize(&store, 3).unwrap(), 0);
    store.validate().unwrap();
}

/// Transfers between accounts run on four threads while readers sum every account under one
/// read transaction and background checkpoints run: every sum is the total (a transaction is
/// atomic for readers), nothing deadlocks, and after a power failure the recovered accounts
/// still sum to the total, with every acknowledged transfer in them.
#[test]
fn concurrent_transactions_are_atomic_for_readers_and_durable() {
    const ACCOUNTS: u64 = 8;
    const EACH: i64 = 1_000;
    let cfg = dstore::Config {
        background: true,
        ..effects::config()
    };
    let clock = Arc::new(AtomicI64::new(START));
    let sim = Arc::new(SimMedium::from_image(
        effects::base_image(&cfg),
        SimConfig::default(),
    ));
    let store = effects::open(Arc::clone(&sim), &cfg, &clock).expect("open");
    let account = |i: u64| format!("acct{i}").into_bytes();
    let balance = |t: &dyn model::View, i: u64| -> i64 {
        t.string(2, &account(i))
            .map(|b| String::from_utf8(b).unwrap().parse().unwrap())
            .unwrap_or(0)
    };
    store
        .transact(Scope::All, true, &mut |t| {
            t.apply(
                (0..ACCOUNTS)
                    .map(|i| Effect::Put {
                        db: 2,
                        key: account(i),
                        value: Value::String(EACH.to_string().into_bytes()),
                        expire_at_ms: 0,
                    })
                    .collect(),
            )
        })
        .unwrap();
    let total = EACH * ACCOUNTS as i64;
    let log = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for w in 0..4u64 {
            let (store, log) = (&store, &log);
            s.spawn(move || {
                let mut rng = SplitMix64::new(w + 100);
                for _ in 0..150 {
                    let (a, b) = (rng.below(ACCOUNTS), rng.below(ACCOUNTS));
                    let amount = rng.below(50) as i64;
                    let (ka, kb) = (account(a), account(b));
                    store
                        .transact(Scope::Keys(&[(2, &ka), (2, &kb)]), true, &mut |t| {
                            let (x, y) = (balance(&*t, a), balance(&*t, b));
                            let put = |k: &[u8], v: i64| Effect::Put {
                                db: 2,
                                key: k.to_vec(),
                                value: Value::String(v.to_string().into_bytes()),
                                expire_at_ms: 0,
                            };
                            // Two calls, as MULTI/EXEC would make them.
                            t.apply(vec![put(&ka, x - amount)])?;
                            let y = if a == b { x - amount } else { y };
                            t.apply(vec![put(&kb, y + amount)])
                        })
                        .expect("transfer");
                    log.lock().unwrap().push((a, b, amount));
                }
            });
        }
        for _ in 0..2 {
            let store = &store;
            s.spawn(move || {
                for _ in 0..200 {
                    let mut sum = 0;
                    store
                        .transact(Scope::All, false, &mut |t| {
                            sum = (0..ACCOUNTS).map(|i| balance(&*t, i)).sum();
                            Ok(())
                        })
                        .unwrap();
                    assert_eq!(sum, total, "a reader saw half a transfer");
                }
            });
        }
    });
    let mut want = vec![EACH; ACCOUNTS as usize];
    for (a, b, amount) in log.into_inner().unwrap() {
        want[a as usize] -= amount;
        want[b as usize] += amount;
    }
    let read_all = |s: &SimStore| -> Vec<i64> {
        let mut out = Vec::new();
        s.transact(Scope::All, false, &mut |t| {
            out = (0..ACCOUNTS).map(|i| balance(&*t, i)).collect();
            Ok(())
        })
        .unwrap();
        out
    };
    assert_eq!(read_all(&store), want);
    assert!(store.engine().stats().checkpoints > 0, "checkpoints ran");
    let (_, back) = reopen(&sim, &clock, None);
    back.validate().unwrap();
    assert_eq!(read_all(&back), want, "recovered after a power failure");
}

/// Regression: the expiry walk skipped keys when a bucket held more expired keys than the
/// call's limit (the same key in several databases shares a bucket).
#[test]
fn the_expiry_walk_skips_no_key_of_a_crowded_bucket() {
    let cfg = effects::config();
    let clock = Arc::new(AtomicI64::new(START));
    let sim = Arc::new(SimMedium::from_image(
        effects::base_image(&cfg),
        SimConfig::default(),
    ));
    let store = effects::open(sim, &cfg, &clock).expect("open");
    store
        .transact(Scope::All, true, &mut |t| {
            t.apply(
                (0..6)
                    .map(|db| Effect::Put {
                        db,
                        key: b"x".to_vec(),
                        value: Value::String(b"v".to_vec()),
                        expire_at_ms: START + 10,
                    })
                    .collect(),
            )
        })
        .unwrap();
    clock.fetch_add(100, Ordering::SeqCst);
    for limit in [1, 2, 5] {
        let mut all = BTreeSet::new();
        let mut cursor = 0;
        loop {
            let (next, found) = store.expired(cursor, limit).unwrap();
            all.extend(found);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        let want: BTreeSet<_> = (0..6).map(|db| (db, b"x".to_vec())).collect();
        assert_eq!(all, want, "limit {limit}");
    }
}

/// The expiry walk stops walking a keyspace where a whole pass found no deadline, and walks
/// again (finding the key when it is due) once a deadline is written.
#[test]
fn the_expiry_walk_rests_without_deadlines_and_wakes_for_one() {
    let cfg = effects::config();
    let clock = Arc::new(AtomicI64::new(START));
    let sim = Arc::new(SimMedium::from_image(
        effects::base_image(&cfg),
        SimConfig::default(),
    ));
    let store = effects::open(sim, &cfg, &clock).expect("open");
    let put = |keys: std::ops::Range<u32>| {
        store
            .transact(Scope::All, true, &mut |t| {
                t.apply(
                    keys.clone()
                        .map(|i| Effect::Put {
                            db: 0,
                            key: format!("k{i}").into_bytes(),
                            value: Value::String(b"v".to_vec()),
                            expire_at_ms: 0,
                        })
                        .collect(),
                )
            })
            .unwrap()
    };
    put(0..300);
    assert!(expired_keys(&store).is_empty());
    let (walked, skipped) = store.expiry_walk_stats();
    assert!(walked > 0, "the first pass walks");
    assert_eq!(skipped, 0);
    // Nothing has a deadline and none was written: the next passes walk nothing.
    put(300..310);
    assert!(
        expired_keys(&store).is_empty(),
        "a pass after writes without deadlines"
    );
    let (walked, skipped) = store.expiry_walk_stats();
    assert!(expired_keys(&store).is_empty());
    assert!(expired_keys(&store).is_empty());
    assert_eq!(
        store.expiry_walk_stats(),
        (walked, skipped + 2),
        "two passes skipped"
    );
    // A deadline wakes it; the key is found once due, then the walk rests again.
    store
        .transact(Scope::All, true, &mut |t| {
            t.apply(vec![Effect::Expire {
                db: 0,
                key: b"k7".to_vec(),
                at_ms: START + 10,
            }])
        })
        .unwrap();
    clock.fetch_add(100, Ordering::SeqCst);
    let want: BTreeSet<_> = [(0, b"k7".to_vec())].into_iter().collect();
    assert_eq!(expired_keys(&store), want, "the due key is found");
    assert!(store.expiry_walk_stats().0 > walked, "it walked again");
    store
        .transact(Scope::All, true, &mut |t| {
            t.apply(vec![Effect::Del {
                db: 0,
                key: b"k7".to_vec(),
            }])
        })
        .unwrap();
    assert!(expired_keys(&store).is_empty());
    let (walked, skipped) = store.expiry_walk_stats();
    assert!(expired_keys(&store).is_empty());
    assert_eq!(
        store.expiry_walk_stats(),
        (walked, skipped + 1),
        "resting again"
    );
}

/// A store whose DRAM state nears its shadow slots refuses growing effects with `OutOfSpace`
/// before applying any of them, still accepts deletions, and stays whole.
#[test]
fn a_full_store_refuses_growth_before_applying_and_accepts_deletions() {
    let cfg = dstore::Config {
        slot_bytes: dstore::Config::slot_bytes_min(4).unwrap(),
        background: true,
        ..effects::config()
    };
    let clock = Arc::new(AtomicI64::new(START));
    let sim = Arc::new(SimMedium::from_image(
        effects::base_image(&cfg),
        SimConfig::default(),
    ));
    let store = effects::open(Arc::clone(&sim), &cfg, &clock).expect("open");
    let key = |i: usize| format!("key{i}").into_bytes();
    let mut refused = None;
    for i in 0..100_000 {
        let r = store.transact(Scope::All, true, &mut |t| {
            t.apply(vec![
                Effect::LPush {
                    db: 1,
                    key: key(i),
                    left: true,
                    elems: vec![vec![7; 1000]],
                },
                Effect::SAdd {
                    db: 2,
                    key: key(i),
                    members: vec![vec![8; 1000]],
                },
            ])
        });
        match r {
            Ok(()) => {}
            Err(ModelError::OutOfSpace(_)) => {
                refused = Some(i);
                break;
            }
            Err(e) => panic!("write {i}: {e}"),
        }
    }
    let i = refused.expect("the store fills up");
    assert!(i > 10, "it held some writes first ({i})");
    store
        .transact(Scope::All, false, &mut |t| {
            assert_eq!(
                t.kind(1, &key(i)),
                None,
                "nothing of the refused call was applied"
            );
            assert_eq!(
                t.kind(2, &key(i)),
                None,
                "nothing of the refused call was applied"
            );
            assert_eq!(t.list_len(1, &key(0)), 1);
            Ok(())
        })
        .unwrap();
    store
        .transact(Scope::All, true, &mut |t| {
            t.apply((0..i).map(|j| Effect::Del { db: 1, key: key(j) }).collect())
        })
        .expect("deletions are accepted when full");
    assert_eq!(Keyspace::dbsize(&store, 1).unwrap(), 0);
    store.validate().unwrap();
    let (_, back) = reopen(&sim, &clock, Some(&store));
    back.validate().unwrap();
    assert_eq!(Keyspace::dbsize(&back, 1).unwrap(), 0);
    assert_eq!(Keyspace::dbsize(&back, 2).unwrap(), i as u64);
}

/// Every precondition an `apply` call checks, one case each: the call is refused with the
/// expected error, and nothing of it (not even its good first effect) is applied.
#[test]
fn every_refusal_changes_nothing() {
    let cfg = effects::config();
    let clock = Arc::new(AtomicI64::new(START));
    let sim = Arc::new(SimMedium::from_image(
        effects::base_image(&cfg),
        SimConfig::default(),
    ));
    let store = effects::open(sim, &cfg, &clock).expect("open");
    let b = |s: &str| s.as_bytes().to_vec();
    store.owrite(b"obj", 0, b"object bytes").unwrap();
    store
        .transact(Scope::All, true, &mut |t| {
            t.apply(vec![
                Effect::LPush {
                    db: 0,
                    key: b("list"),
                    left: false,
                    elems: vec![b("a"), b("b")],
                },
                Effect::SAdd {
                    db: 0,
                    key: b("set"),
                    members: vec![b("m")],
                },
                Effect::Put {
                    db: 0,
                    key: b("str"),
                    value: Value::String(b("v")),
                    expire_at_ms: 0,
                },
            ])
        })
        .unwrap();
    let good = Effect::Put {
        db: 0,
        key: b("fresh"),
        value: Value::String(b("x")),
        expire_at_ms: 0,
    };
    let lset = |key: &str, index| Effect::LSet {
        db: 0,
        key: b(key),
        index,
        elem: b("e"),
    };
    let cases: Vec<(&str, Effect, &str)> = vec![
        ("LSET on an absent key", lset("none", 0), "invalid"),
        ("LSET past the end", lset("list", 2), "invalid"),
        (
            "LINSERT past the end",
            Effect::LInsert {
                db: 0,
                key: b("list"),
                index: 3,
                elem: b("e"),
            },
            "invalid",
        ),
        (
            "LREMAT out of order",
            Effect::LRemAt {
                db: 0,
                key: b("list"),
                indices: vec![1, 0],
            },
            "invalid",
        ),
        (
            "LREMAT past the end",
            Effect::LRemAt {
                db: 0,
                key: b("list"),
                indices: vec![2],
            },
            "invalid",
        ),
        (
            "a list effect on a set",
            Effect::LPush {
                db: 0,
                key: b("set"),
                left: true,
                elems: vec![b("e")],
            },
            "invalid",
        ),
        (
            "a hash effect on a string",
            Effect::HSet {
                db: 0,
                key: b("str"),
                pairs: vec![(b("f"), b("v"))],
            },
            "invalid",
        ),
        (
            "a set effect on a list",
            Effect::SRem {
                db: 0,
                key: b("list"),
                members: vec![b("a")],
            },
            "invalid",
        ),
        (
            "a sorted-set effect on a set",
            Effect::ZAdd {
                db: 0,
                key: b("set"),
                members: vec![(1.0, b("m"))],
            },
            "invalid",
        ),
        (
            "a NaN score",
            Effect::ZAdd {
                db: 0,
                key: b("z"),
                members: vec![(f64::NAN, b("m"))],
            },
            "invalid",
        ),
        (
            "a database out of range",
            Effect::Del {
                db: 16,
                key: b("k"),
            },
            "invalid",
        ),
        (
            "FLUSHDB of a database out of range",
            Effect::FlushDb { db: 16 },
            "invalid",
        ),
        (
            "SWAPDB with a database out of range",
            Effect::SwapDb { a: 0, b: 16 },
            "invalid",
        ),
        (
            "an effect on a DStore object",
            Effect::Del {
                db: 0,
                key: b("obj"),
            },
            "invalid",
        ),
        (
            "a key over the size limit",
            Effect::Del {
                db: 0,
                key: vec![b'k'; 5000],
            },
            "too large",
        ),
        (
            "a member over the size limit",
            Effect::SAdd {
                db: 0,
                key: b("set"),
                members: vec![vec![b'm'; 5000]],
            },
            "too large",
        ),
        (
            "more than a log record holds",
            Effect::Put {
                db: 0,
                key: b("big"),
                value: Value::List(vec![vec![b'e'; 4000]; 8]),
                expire_at_ms: 0,
            },
            "too large",
        ),
    ];
    let before = effects::dump(&store);
    for (what, bad, want) in cases {
        let mut got = None;
        store
            .transact(Scope::All, true, &mut |t| {
                got = Some(t.apply(vec![good.clone(), bad.clone()]));
                Ok(())
            })
            .unwrap();
        let kind = match got.expect("ran") {
            Ok(()) => "ok",
            Err(ModelError::Invalid(_)) => "invalid",
            Err(ModelError::TooLarge(_)) => "too large",
            Err(e) => panic!("{what}: {e}"),
        };
        assert_eq!(kind, want, "{what}");
        assert_eq!(
            effects::dump(&store),
            before,
            "{what}: something was applied"
        );
    }
    assert_eq!(
        store.oread(b"obj", 0, 100).unwrap(),
        Some(b"object bytes".to_vec())
    );
    store.validate().unwrap();
}

/// Past maxmemory a store refuses writes that grow it, but a lone string Put that replaces a
/// string at least as long is accepted (it takes no more room than it frees): a replicated
/// node rewrites its fixed-size applied mark in every transaction, a full store included.
#[test]
fn a_full_store_still_overwrites_a_string_in_place() {
    let cfg = effects::config();
    let clock = Arc::new(AtomicI64::new(START));
    let sim = Arc::new(SimMedium::from_image(
        effects::base_image(&cfg),
        SimConfig::default(),
    ));
    let store = effects::open(Arc::clone(&sim), &cfg, &clock).expect("open");
    let put = |key: &str, len: usize| -> Result<(), ModelError> {
        store.transact(Scope::All, true, &mut |t| {
            t.apply(vec![Effect::Put {
                db: 0,
                key: key.as_bytes().to_vec(),
                value: Value::String(vec![b'v'; len]),
                expire_at_ms: 0,
            }])
        })
    };
    put("mark", 40).expect("room at first");
    put("other", 10).expect("room at first");
    store.set_maxmemory(1);
    let full = put("new", 10).expect_err("a new key is refused past maxmemory");
    assert!(matches!(full, ModelError::OutOfSpace(_)), "{full:?}");
    put("mark", 40).expect("the same length in place");
    put("mark", 12).expect("shorter in place");
    assert!(matches!(put("mark", 41), Err(ModelError::OutOfSpace(_))));
    assert!(
        matches!(put("mark", 13), Err(ModelError::OutOfSpace(_))),
        "longer than now"
    );
    let got = store.transact(Scope::All, false, &mut |t| {
        assert_eq!(t.string_len(0, b"mark"), 12);
        Ok(())
    });
    got.expect("read");
}
