//! A reference model of the key-value semantics, random operations, and helpers to run them
//! on a store and compare states. Shared by the crash and concurrency tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use dstore::{Config, Store, StoreError};
use pmem::rng::SplitMix64;
use pmem::{Domain, Medium, OpenOptions, Pool, SimConfig, SimMedium};

/// The fixed clock the tests run under (ms since the epoch).
pub const NOW: i64 = 1_000_000;

/// An operation of the tests.
#[derive(Debug, Clone)]
pub enum TOp {
    Set {
        k: Vec<u8>,
        v: Vec<u8>,
        nx: bool,
        xx: bool,
        exp: Option<i64>,
    },
    MSet(Vec<(Vec<u8>, Vec<u8>)>),
    Del(Vec<Vec<u8>>),
    Incr(Vec<u8>, i64),
    Append(Vec<u8>, Vec<u8>),
    HSet(Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>),
    HDel(Vec<u8>, Vec<Vec<u8>>),
    ZAdd(Vec<u8>, Vec<(f64, Vec<u8>)>),
    ZRem(Vec<u8>, Vec<Vec<u8>>),
    Flush,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Str(Vec<u8>),
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    Z(BTreeMap<Vec<u8>, f64>),
}

/// What a key holds, in a canonical form for comparison.
#[derive(Debug, Clone, PartialEq)]
pub enum Dump {
    Str(Vec<u8>),
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    Z(Vec<(Vec<u8>, u64)>),
}

/// The reference model.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Model {
    keys: BTreeMap<Vec<u8>, (Val, i64)>,
}

fn parse_int(b: &[u8]) -> Option<i64> {
    dstore::machine::parse_int(b)
}

impl Model {
    fn live(&mut self, k: &[u8]) -> Option<&mut (Val, i64)> {
        if let Some((_, exp)) = self.keys.get(k)
            && *exp != 0
            && *exp <= NOW
        {
            self.keys.remove(k);
        }
        self.keys.get_mut(k)
    }

    pub fn apply(&mut self, op: &TOp) {
        match op {
            TOp::Set { k, v, nx, xx, exp } => {
                let exists = self.live(k).is_some();
                if (*nx && exists) || (*xx && !exists) {
                    return;
                }
                self.keys
                    .insert(k.clone(), (Val::Str(v.clone()), exp.unwrap_or(0).max(0)));
            }
            TOp::MSet(pairs) => {
                for (k, v) in pairs {
                    self.keys.insert(k.clone(), (Val::Str(v.clone()), 0));
                }
            }
            TOp::Del(keys) => {
                for k in keys {
                    if self.live(k).is_some() {
                        self.keys.remove(k);
                    }
                }
            }
            TOp::Incr(k, d) => match self.live(k) {
                None => {
                    self.keys
                        .insert(k.clone(), (Val::Str(d.to_string().into_bytes()), 0));
                }
                Some((Val::Str(s), _)) => {
                    if let Some(n) = parse_int(s).and_then(|n| n.checked_add(*d)) {
                        *s = n.to_string().into_bytes();
                    }
                }
                Some(_) => {}
            },
            TOp::Append(k, v) => match self.live(k) {
                None => {
                    self.keys.insert(k.clone(), (Val::Str(v.clone()), 0));
                }
                Some((Val::Str(s), _)) => s.extend_from_slice(v),
                Some(_) => {}
            },
            TOp::HSet(k, pairs) => {
                if self.live(k).is_none() {
                    self.keys.insert(k.clone(), (Val::Hash(BTreeMap::new()), 0));
                }
                if let Some((Val::Hash(h), _)) = self.keys.get_mut(k) {
                    for (f, v) in pairs {
                        h.insert(f.clone(), v.clone());
                    }
                }
            }
            TOp::HDel(k, fields) => {
                if let Some((Val::Hash(h), _)) = self.live(k) {
                    for f in fields {
                        h.remove(f);
                    }
                    if h.is_empty() {
                        self.keys.remove(k);
                    }
                }
            }
            TOp::ZAdd(k, members) => {
                if self.live(k).is_none() {
                    self.keys.insert(k.clone(), (Val::Z(BTreeMap::new()), 0));
                }
                if let Some((Val::Z(z), _)) = self.keys.get_mut(k) {
                    for (s, m) in members {
                        z.insert(m.clone(), *s);
                    }
                }
            }
            TOp::ZRem(k, members) => {
                if let Some((Val::Z(z), _)) = self.live(k) {
                    for m in members {
                        z.remove(m);
                    }
                    if z.is_empty() {
                        self.keys.remove(k);
                    }
                }
            }
            TOp::Flush => self.keys.clear(),
        }
    }

    /// Live keys in canonical form.
    pub fn dump(&self) -> BTreeMap<Vec<u8>, Dump> {
        self.keys
            .iter()
            .filter(|(_, (_, exp))| *exp == 0 || *exp > NOW)
            .map(|(k, (v, _))| {
                let d = match v {
                    Val::Str(s) => Dump::Str(s.clone()),
                    Val::Hash(h) => {
                        Dump::Hash(h.iter().map(|(a, b)| (a.clone(), b.clone())).collect())
                    }
                    Val::Z(z) => {
                        let mut v: Vec<(Vec<u8>, u64)> =
                            z.iter().map(|(m, s)| (m.clone(), s.to_bits())).collect();
                        v.sort_by(|a, b| {
                            f64::from_bits(a.1)
                                .partial_cmp(&f64::from_bits(b.1))
                                .unwrap()
                                .then(a.0.cmp(&b.0))
                        });
                        Dump::Z(v)
                    }
                };
                (k.clone(), d)
            })
            .collect()
    }
}

fn key(prefix: &str, rng: &mut SplitMix64, keys: u64) -> Vec<u8> {
    format!("{prefix}k{}", rng.below(keys)).into_bytes()
}

fn bytes(rng: &mut SplitMix64, max: u64) -> Vec<u8> {
    let n = rng.below(max + 1) as usize;
    (0..n).map(|_| b'a' + rng.below(26) as u8).collect()
}

/// A random operation on keys `{prefix}k0..k{keys}`.
pub fn random_op(rng: &mut SplitMix64, prefix: &str, keys: u64, flush: bool) -> TOp {
    match rng.below(if flush { 40 } else { 39 }) {
        0..=7 => TOp::Set {
            k: key(prefix, rng, keys),
            v: bytes(rng, 120),
            nx: rng.chance(150_000),
            xx: false,
            exp: match rng.below(6) {
                0 => Some(NOW - 1),
                1 => Some(NOW + 60_000),
                _ => None,
            },
        },
        8 => TOp::Set {
            k: key(prefix, rng, keys),
            v: bytes(rng, 30),
            nx: false,
            xx: true,
            exp: None,
        },
        9..=11 => TOp::MSet(
            (0..1 + rng.below(3))
                .map(|_| (key(prefix, rng, keys), bytes(rng, 40)))
                .collect(),
        ),
        12..=15 => TOp::Del(
            (0..1 + rng.below(2))
                .map(|_| key(prefix, rng, keys))
                .collect(),
        ),
        16..=19 => TOp::Incr(key(prefix, rng, keys), rng.below(200) as i64 - 100),
        20..=21 => TOp::Append(key(prefix, rng, keys), bytes(rng, 20)),
        22..=27 => TOp::HSet(
            key(prefix, rng, keys),
            (0..1 + rng.below(3))
                .map(|_| (format!("f{}", rng.below(6)).into_bytes(), bytes(rng, 60)))
                .collect(),
        ),
        28..=30 => TOp::HDel(
            key(prefix, rng, keys),
            (0..1 + rng.below(3))
                .map(|_| format!("f{}", rng.below(6)).into_bytes())
                .collect(),
        ),
        31..=35 => TOp::ZAdd(
            key(prefix, rng, keys),
            (0..1 + rng.below(3))
                .map(|_| {
                    let s = match rng.below(10) {
                        0 => f64::INFINITY,
                        1 => f64::NEG_INFINITY,
                        _ => rng.below(50) as f64 / 4.0 - 5.0,
                    };
                    (s, format!("m{}", rng.below(8)).into_bytes())
                })
                .collect(),
        ),
        36..=38 => TOp::ZRem(
            key(prefix, rng, keys),
            (0..1 + rng.below(2))
                .map(|_| format!("m{}", rng.below(8)).into_bytes())
                .collect(),
        ),
        _ => TOp::Flush,
    }
}

/// Run an operation on the store. Type errors are outcomes (the model agrees); the store
/// failing (a crash) is an `Err`.
pub fn run<M: Medium + Clone + Send + Sync + 'static>(
    s: &Store<M>,
    op: &TOp,
) -> Result<(), StoreError> {
    let r = match op {
        TOp::Set { k, v, nx, xx, exp } => s.set(k, v, *nx, *xx, *exp).map(drop),
        TOp::MSet(p) => s.mset(&p.iter().map(|(k, v)| (&k[..], &v[..])).collect::<Vec<_>>()),
        TOp::Del(keys) => s
            .del(&keys.iter().map(|k| &k[..]).collect::<Vec<_>>())
            .map(drop),
        TOp::Incr(k, d) => s.incr_by(k, *d).map(drop),
        TOp::Append(k, v) => s.append(k, v).map(drop),
        TOp::HSet(k, p) => s
            .hset(
                k,
                &p.iter().map(|(a, b)| (&a[..], &b[..])).collect::<Vec<_>>(),
            )
            .map(drop),
        TOp::HDel(k, f) => s
            .hdel(k, &f.iter().map(|x| &x[..]).collect::<Vec<_>>())
            .map(drop),
        TOp::ZAdd(k, m) => s
            .zadd(k, &m.iter().map(|(a, b)| (*a, &b[..])).collect::<Vec<_>>())
            .map(drop),
        TOp::ZRem(k, m) => s
            .zrem(k, &m.iter().map(|x| &x[..]).collect::<Vec<_>>())
            .map(drop),
        TOp::Flush => s.flushall(),
    };
    match r {
        Err(StoreError::WrongType | StoreError::NotInteger | StoreError::Overflow) => Ok(()),
        other => other,
    }
}

/// Everything a store holds, in canonical form (walked with SCAN).
pub fn dump<M: Medium + Clone + Send + Sync + 'static>(s: &Store<M>) -> BTreeMap<Vec<u8>, Dump> {
    let mut out = BTreeMap::new();
    let mut cursor = 0;
    loop {
        let (next, keys) = s.scan(cursor, 50).expect("scan");
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
                other => panic!("type {other}"),
            };
            out.insert(k, d);
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    out
}

/// Small sizes, so checkpoints come often and images stay small.
pub fn config(background: bool) -> Config {
    Config {
        shards: 4,
        log_bytes: 4096 + 16 * 1024,
        slot_bytes: 512 * 1024,
        checkpoint_at_percent: 50,
        background,
        value_bytes_max: 4096,
        data_bytes: 256 * 1024,
        ..Config::default()
    }
}

/// Pool bytes for [`config`].
pub const POOL_BYTES: usize = 2 << 20;

/// A sim medium holding a fresh, cleanly closed store.
pub fn base_image(cfg: &Config) -> Vec<u8> {
    let sim = Arc::new(SimMedium::new(POOL_BYTES, SimConfig::default()));
    let m = Pool::format(Arc::clone(&sim), Domain::Sim).expect("format");
    let pool = Pool::open_medium(m, &OpenOptions::default()).expect("open");
    let store = Store::create(pool, cfg.clone()).expect("create");
    store.close().expect("close");
    drop(store);
    sim.durable_image()
}

/// Open a store on a sim medium, with the fixed clock.
pub fn open(sim: Arc<SimMedium>, cfg: &Config) -> Result<Store<Arc<SimMedium>>, StoreError> {
    let pool = Pool::open_medium(sim, &OpenOptions::default())
        .map_err(|e| StoreError::Failed(e.to_string()))?;
    let mut s = Store::open(pool, cfg.clone())?;
    s.set_clock(Arc::new(|| NOW));
    Ok(s)
}

/// The model's contents after each prefix of `ops` (index i: after i operations).
pub fn prefixes(ops: &[TOp]) -> Vec<BTreeMap<Vec<u8>, Dump>> {
    let mut m = Model::default();
    let mut out = vec![m.dump()];
    for op in ops {
        m.apply(op);
        out.push(m.dump());
    }
    out
}
