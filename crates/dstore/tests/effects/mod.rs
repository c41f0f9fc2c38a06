//! Shared by the keyspace tests: random transactions of `model` effects, running them on a
//! keyspace, and a canonical dump of a keyspace's contents (through `scan` and the views only).
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use dstore::{Config, Store};
use model::{Bytes, DATABASES, Db, Effect, Keyspace, MemoryKeyspace, ModelError, Scope, Value};
use pmem::rng::SplitMix64;
use pmem::{Domain, Medium, OpenOptions, Pool, SimConfig, SimMedium};

/// The clock the tests start at (ms since the epoch).
pub const START: i64 = 1_000_000;

/// One transaction: the effect lists of its `apply` calls, and whether it locks everything.
#[derive(Debug, Clone)]
pub struct Tx {
    pub calls: Vec<Vec<Effect>>,
    pub all: bool,
}

/// A canonical dump: every live key of every database, with its value (hash fields and set
/// members sorted) and deadline (0: none).
pub type Dump = Vec<(Db, Bytes, Value, i64)>;

fn canon(v: Value) -> Value {
    match v {
        Value::Hash(mut p) => {
            p.sort();
            Value::Hash(p)
        }
        Value::Set(mut m) => {
            m.sort();
            Value::Set(m)
        }
        other => other,
    }
}

/// Dump a keyspace through `scan` (small steps) and a read transaction per key.
pub fn dump(ks: &dyn Keyspace) -> Dump {
    let mut out = Vec::new();
    for db in 0..DATABASES as Db {
        let mut keys = Vec::new();
        let mut cursor = 0;
        loop {
            let (next, found) = ks.scan(db, cursor, 3).expect("scan");
            keys.extend(found.into_iter().map(|k| k.key));
            if next == 0 {
                break;
            }
            cursor = next;
        }
        keys.sort();
        keys.dedup();
        for k in keys {
            let kk = k.clone();
            let mut got = None;
            ks.transact(Scope::Keys(&[(db, &kk)]), false, &mut |t| {
                got = t
                    .value(db, &kk)
                    .map(|v| (canon(v), t.expire_at(db, &kk).unwrap_or(0)));
                Ok(())
            })
            .expect("read");
            if let Some((v, x)) = got {
                out.push((db, k, v, x));
            }
        }
    }
    out
}

/// What a transaction's `apply` calls returned, with errors reduced to their kind.
pub type Outcome = Vec<Result<(), &'static str>>;

fn kind_of(e: &ModelError) -> &'static str {
    match e {
        ModelError::OutOfSpace(_) => "oom",
        ModelError::TooLarge(_) => "too large",
        ModelError::ReadOnly(_) => "read only",
        ModelError::Invalid(_) => "invalid",
        ModelError::Failed(_) => "failed",
    }
}

/// Run a transaction; `Err` if the transaction itself failed (the store failed or crashed).
pub fn run(ks: &dyn Keyspace, tx: &Tx) -> Result<Outcome, ModelError> {
    let keys: Vec<(Db, Vec<u8>)> = tx
        .calls
        .iter()
        .flatten()
        .filter_map(|e| e.key().map(|(d, k)| (d, k.to_vec())))
        .collect();
    let refs: Vec<(Db, &[u8])> = keys.iter().map(|(d, k)| (*d, &k[..])).collect();
    let scope = if tx.all {
        Scope::All
    } else {
        Scope::Keys(&refs)
    };
    let mut outcome = Vec::new();
    let mut failed = None;
    ks.transact(scope, true, &mut |t| {
        for call in &tx.calls {
            match t.apply(call.clone()) {
                Err(e @ ModelError::Failed(_)) => {
                    failed = Some(e.clone());
                    return Err(e);
                }
                r => outcome.push(r.map_err(|e| kind_of(&e))),
            }
        }
        Ok(())
    })?;
    match failed {
        Some(e) => Err(e),
        None => Ok(outcome),
    }
}

fn b(rng: &mut SplitMix64, max: u64) -> Bytes {
    let n = rng.below(max + 1) as usize;
    (0..n).map(|_| b'a' + rng.below(6) as u8).collect()
}

fn items(rng: &mut SplitMix64, n: u64, pool: u64) -> Vec<Bytes> {
    (0..1 + rng.below(n))
        .map(|_| format!("m{}", rng.below(pool)).into_bytes())
        .collect()
}

fn deadline(rng: &mut SplitMix64, now: i64) -> i64 {
    match rng.below(6) {
        0 => now - 1,
        1 => now + 500,
        2 => now + 60_000,
        _ => 0,
    }
}

fn score(rng: &mut SplitMix64) -> f64 {
    match rng.below(12) {
        0 => f64::INFINITY,
        1 => f64::NEG_INFINITY,
        2 => -0.0,
        _ => rng.below(9) as f64 / 2.0 - 2.0,
    }
}

/// A random value of any kind (collections may be empty).
pub fn value(rng: &mut SplitMix64) -> Value {
    match rng.below(5) {
        0 => Value::String(b(rng, 12)),
        1 => Value::Hash(
            (0..rng.below(4))
                .map(|i| {
                    (
                        format!("f{}", (i + rng.below(3)) % 4).into_bytes(),
                        b(rng, 6),
                    )
                })
                .collect(),
        ),
        2 => Value::List((0..rng.below(5)).map(|_| b(rng, 6)).collect()),
        3 => Value::Set((0..rng.below(4)).map(|_| b(rng, 3)).collect()),
        _ => Value::ZSet(
            (0..rng.below(4))
                .map(|_| (score(rng), format!("m{}", rng.below(5)).into_bytes()))
                .collect(),
        ),
    }
}

/// A random effect on keys `k0..k{keys}` of databases `0..dbs`, at clock `now`.
pub fn effect(rng: &mut SplitMix64, keys: u64, dbs: u8, now: i64, global: bool) -> Effect {
    let db = rng.below(dbs as u64) as Db;
    let key = format!("k{}", rng.below(keys)).into_bytes();
    match rng.below(if global { 40 } else { 37 }) {
        0..=1 => Effect::Del { db, key },
        2..=5 => Effect::Put {
            db,
            key,
            value: value(rng),
            expire_at_ms: deadline(rng, now),
        },
        6..=7 => Effect::Expire {
            db,
            key,
            at_ms: deadline(rng, now),
        },
        8..=9 => Effect::HSet {
            db,
            key,
            pairs: (0..rng.below(3))
                .map(|_| (format!("f{}", rng.below(4)).into_bytes(), b(rng, 6)))
                .collect(),
        },
        10 => Effect::HDel {
            db,
            key,
            fields: items(rng, 3, 4)
                .into_iter()
                .map(|m| [b"f".as_slice(), &m[1..]].concat())
                .collect(),
        },
        11..=14 => Effect::LPush {
            db,
            key,
            left: rng.below(2) == 0,
            elems: (0..rng.below(4)).map(|_| b(rng, 6)).collect(),
        },
        15..=16 => Effect::LPop {
            db,
            key,
            left: rng.below(2) == 0,
            count: rng.below(4),
        },
        17 => Effect::LSet {
            db,
            key,
            index: rng.below(5),
            elem: b(rng, 6),
        },
        18 => Effect::LInsert {
            db,
            key,
            index: rng.below(5),
            elem: b(rng, 6),
        },
        19 => {
            let mut indices: Vec<u64> = (0..rng.below(3)).map(|_| rng.below(5)).collect();
            indices.sort_unstable();
            indices.dedup();
            Effect::LRemAt { db, key, indices }
        }
        20 => Effect::LTrim {
            db,
            key,
            start: rng.below(3),
            end: rng.below(6),
        },
        21..=24 => Effect::SAdd {
            db,
            key,
            members: items(rng, 3, 6),
        },
        25..=26 => Effect::SRem {
            db,
            key,
            members: items(rng, 3, 6),
        },
        27..=31 => Effect::ZAdd {
            db,
            key,
            members: (0..rng.below(4))
                .map(|_| (score(rng), format!("m{}", rng.below(5)).into_bytes()))
                .collect(),
        },
        32..=36 => Effect::ZRem {
            db,
            key,
            members: items(rng, 2, 5),
        },
        37 => Effect::FlushDb { db },
        38 => Effect::FlushAll,
        _ => Effect::SwapDb {
            a: db,
            b: rng.below(dbs as u64) as Db,
        },
    }
}

/// A random transaction: mostly one call of one effect, sometimes several calls (MULTI/EXEC)
/// or several effects in a call (RENAME-like), now and then a database-wide effect.
pub fn tx(rng: &mut SplitMix64, keys: u64, dbs: u8, now: i64) -> Tx {
    let calls = match rng.below(8) {
        0 | 1 => 2 + rng.below(3),
        _ => 1,
    };
    let global = rng.below(12) == 0;
    let calls: Vec<Vec<Effect>> = (0..calls)
        .map(|_| {
            let n = if rng.below(4) == 0 {
                2 + rng.below(2)
            } else {
                1
            };
            (0..n)
                .map(|_| effect(rng, keys, dbs, now, global))
                .collect()
        })
        .collect();
    let all = global || rng.below(4) == 0;
    Tx { calls, all }
}

/// A reference keyspace on a shared clock.
pub fn reference(clock: &Arc<AtomicI64>) -> MemoryKeyspace {
    let c = Arc::clone(clock);
    MemoryKeyspace::with_clock(Box::new(move || c.load(Ordering::SeqCst)))
}

/// Small sizes, so checkpoints come often.
pub fn config() -> Config {
    Config {
        shards: 4,
        log_bytes: 4096 + 32 * 1024,
        slot_bytes: 1 << 20,
        checkpoint_at_percent: 50,
        background: false,
        value_bytes_max: 4096,
        data_bytes: 256 * 1024,
        ..Config::default()
    }
}

/// Pool bytes for [`config`].
pub const POOL_BYTES: usize = 4 << 20;

/// A sim image holding a fresh, cleanly closed store.
pub fn base_image(cfg: &Config) -> Vec<u8> {
    let sim = Arc::new(SimMedium::new(POOL_BYTES, SimConfig::default()));
    let m = Pool::format(Arc::clone(&sim), Domain::Sim).expect("format");
    let pool = Pool::open_medium(m, &OpenOptions::default()).expect("open");
    let store = Store::create(pool, cfg.clone()).expect("create");
    store.close().expect("close");
    drop(store);
    sim.durable_image()
}

/// Open the store on `sim` with the shared clock.
pub fn open<M: Medium + Clone + Send + Sync + 'static>(
    medium: M,
    cfg: &Config,
    clock: &Arc<AtomicI64>,
) -> Result<Store<M>, dstore::StoreError> {
    let pool = Pool::open_medium(medium, &OpenOptions::default())
        .map_err(|e| dstore::StoreError::Failed(e.to_string()))?;
    let mut s = Store::open(pool, cfg.clone())?;
    let c = Arc::clone(clock);
    s.set_clock(Arc::new(move || c.load(Ordering::SeqCst)));
    Ok(s)
}
