//! DStore as a durable [`model::Keyspace`]: 16 databases, every kind, expiry, transactions.
//!
//! A transaction ([`Keyspace::transact`]):
//! 1. locks the shards of its keys (every shard for [`Scope::All`]), for writing or reading;
//! 2. runs the body. Each [`Txn::apply`] checks its effects against the state the earlier ones
//!    of the same call leave (kinds, list indices, sizes, room), then applies them to the DRAM
//!    shards at once with the machine's own code ([`crate::machine::effects::apply`]), so later
//!    reads in the transaction see them; an effect that fails half way latches the engine;
//! 3. when the body returns (also with an error), logs one `OP_EFFECTS` record holding every
//!    effect it applied, naming the shards they touched, and forces it by the durability
//!    policy, under the same locks (DIPPER's apply-then-log path);
//! 4. unlocks, then hands the data-zone blocks of objects a flush removed back to the zone.
//!
//! Replay applies the record's effects, on each shard it names, with the same code and the
//! record's clock reading, so recovery reaches the state the transaction left: all of its
//! effects or (the record lost) none.
//!
//! DStore objects (`TYPE_OBJECT`, database 0) are not part of the model: views see them as
//! absent, an effect naming one is refused ([`ModelError::Invalid`]), and `FLUSHDB`/`FLUSHALL`
//! remove them with everything else.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::machine::effects::{self, zset};
use crate::machine::list::{self, LIST_LEN_MAX};
use crate::machine::{Kv, TYPE_HASH, TYPE_LIST, TYPE_OBJECT, TYPE_SET, TYPE_STRING, TYPE_ZSET};
use crate::op;
use crate::store::Store;
use crate::table::{self, Entry};
use dipper::{Arena, DipperError, Locked};
use model::{
    Bytes, DATABASES, Db, Effect, KeyInfo, Keyspace, Kind, LexBound, ModelError, ModelResult,
    Scope, ScoreBound, Txn, Value, View,
};
use pmem::Medium;

/// Most members of one sorted set (its score array stays within one arena block).
pub const ZSET_LEN_MAX: u64 = 1 << 23;

/// Bits of a scan cursor holding the bucket cursor within a shard.
const CURSOR_LOW_BITS: u32 = 40;
const CURSOR_LOW: u64 = (1 << CURSOR_LOW_BITS) - 1;

fn model_error(e: DipperError) -> ModelError {
    match e {
        DipperError::OutOfSpace(m) => ModelError::OutOfSpace(m),
        e @ DipperError::TooLarge { .. } => ModelError::TooLarge(e.to_string()),
        DipperError::Closed => ModelError::Failed("the store is closed".into()),
        other => ModelError::Failed(other.to_string()),
    }
}

/// The shards a transaction holds.
enum Arenas<'t, 'l> {
    Read {
        ids: &'t [u16],
        arenas: &'t [&'t Arena],
    },
    Write(&'t mut Locked<'l>),
}

impl Arenas<'_, '_> {
    fn ids(&self) -> &[u16] {
        match self {
            Arenas::Read { ids, .. } => ids,
            Arenas::Write(l) => l.ids(),
        }
    }

    fn index(&self, shard: u16) -> Option<usize> {
        self.ids().binary_search(&shard).ok()
    }

    fn get(&self, i: usize) -> &Arena {
        match self {
            Arenas::Read { arenas, .. } => arenas[i],
            Arenas::Write(l) => l.arena(i),
        }
    }
}

/// What a validation pass knows of a key after the effects checked so far.
#[derive(Debug, Clone, Default)]
struct KeyState {
    /// Type tag of a live key (`TYPE_OBJECT` included), `None` if absent.
    ty: Option<u64>,
    /// Elements, members or fields.
    len: u64,
    /// The database whose stored key still answers membership questions not in `members`.
    src: Option<Db>,
    /// Members (fields) known present (`true`) or absent (`false`).
    members: HashMap<Bytes, bool>,
}

impl KeyState {
    fn absent() -> KeyState {
        KeyState::default()
    }
}

/// The keyspace as a validation pass sees it: each database is what a stored database held
/// before the call (or nothing, after a flush), changed by the effects checked so far.
struct Sim {
    base: [Option<Db>; DATABASES],
    over: Vec<HashMap<Bytes, KeyState>>,
}

impl Sim {
    fn new() -> Sim {
        Sim {
            base: std::array::from_fn(|d| Some(d as Db)),
            over: vec![HashMap::new(); DATABASES],
        }
    }
}

/// A transaction on a [`Store`].
struct StoreTxn<'t, 'l, M: Medium + Clone + Send + Sync + 'static> {
    store: &'t Store<M>,
    arenas: Arenas<'t, 'l>,
    now: i64,
    all: bool,
    /// Effects applied so far, encoded (without the list's count).
    encoded: Vec<u8>,
    count: usize,
    touched: Vec<u16>,
    global: bool,
    freed: Vec<u32>,
}

fn key_limit<M: Medium + Clone + Send + Sync + 'static>(s: &Store<M>) -> usize {
    // An entry (40 bytes of header, the key, the value) must fit one arena block.
    s.config()
        .value_bytes_max
        .min(dipper::arena::BLOCK_BYTES_MAX / 2 - 64)
}

impl<M: Medium + Clone + Send + Sync + 'static> StoreTxn<'_, '_, M> {
    fn kv(&self) -> &Kv {
        self.store.kv()
    }

    fn arena_of(&self, key: &[u8]) -> Option<&Arena> {
        let i = self.arenas.index(self.kv().shard_of(key))?;
        Some(self.arenas.get(i))
    }

    /// A live key and its arena.
    fn live(&self, db: Db, key: &[u8]) -> Option<(&Arena, Entry)> {
        if db as usize >= DATABASES {
            return None;
        }
        let a = self.arena_of(key)?;
        let e = effects::lookup(self.kv(), a, db, key, self.now)?;
        Some((a, e))
    }

    /// A live key of type `ty`.
    fn typed(&self, db: Db, key: &[u8], ty: u64) -> Option<(&Arena, Entry)> {
        self.live(db, key)
            .filter(|(a, e)| effects::type_tag(a, *e) == ty)
    }

    /// The nested table of a hash, set or sorted set of type `ty`.
    fn nested(&self, db: Db, key: &[u8], ty: u64) -> Option<(&Arena, u64)> {
        self.typed(db, key, ty)
            .map(|(a, e)| (a, a.get_u64(e.value_at(a))))
    }

    fn ring(&self, db: Db, key: &[u8]) -> Option<(&Arena, u64)> {
        self.nested(db, key, TYPE_LIST)
    }

    fn zset(&self, db: Db, key: &[u8]) -> Option<(&Arena, usize)> {
        self.typed(db, key, TYPE_ZSET)
            .map(|(a, e)| (a, zset::array(a, e)))
    }

    /// The state of a stored key, for a validation pass.
    fn stored_state(&self, db: Db, key: &[u8]) -> KeyState {
        match self.live(db, key) {
            None => KeyState::absent(),
            Some((a, e)) => KeyState {
                ty: Some(effects::type_tag(a, e)),
                len: effects::collection_len(a, e),
                src: Some(db),
                members: HashMap::new(),
            },
        }
    }

    /// Whether a stored hash, set or sorted set holds `member`.
    fn stored_member(&self, db: Db, key: &[u8], member: &[u8]) -> bool {
        let Some((a, e)) = self.live(db, key) else {
            return false;
        };
        match effects::type_tag(a, e) {
            TYPE_HASH | TYPE_SET | TYPE_ZSET => {
                let t = a.get_u64(e.value_at(a));
                table::find(a, t, self.kv().hash(member), member).is_some()
            }
            _ => false,
        }
    }

    fn slot<'s>(&self, sim: &'s mut Sim, db: Db, key: &[u8]) -> &'s mut KeyState {
        let base = sim.base[db as usize];
        sim.over[db as usize]
            .entry(key.to_vec())
            .or_insert_with(|| match base {
                Some(b) => self.stored_state(b, key),
                None => KeyState::absent(),
            })
    }

    fn is_member(&self, st: &KeyState, key: &[u8], member: &[u8]) -> bool {
        match st.members.get(member) {
            Some(&p) => p,
            None => st.src.is_some_and(|d| self.stored_member(d, key, member)),
        }
    }

    /// Check one effect against the pass's state and move the state past it.
    fn check(&self, sim: &mut Sim, e: &Effect) -> ModelResult<()> {
        let invalid = |m: String| Err(ModelError::Invalid(m));
        let too_large = |m: String| Err(ModelError::TooLarge(m));
        let limit = key_limit(self.store);
        match e {
            Effect::FlushDb { db } if *db as usize >= DATABASES => {
                return invalid(format!("database {db}"));
            }
            Effect::SwapDb { a, b } if *a as usize >= DATABASES || *b as usize >= DATABASES => {
                return invalid(format!("databases {a} and {b}"));
            }
            Effect::FlushDb { .. } | Effect::FlushAll | Effect::SwapDb { .. } if !self.all => {
                return invalid("a database-wide effect needs every key locked".into());
            }
            Effect::FlushDb { db } => {
                sim.base[*db as usize] = None;
                sim.over[*db as usize].clear();
                return Ok(());
            }
            Effect::FlushAll => {
                *sim = Sim::new();
                sim.base = [None; DATABASES];
                return Ok(());
            }
            Effect::SwapDb { a, b } => {
                sim.base.swap(*a as usize, *b as usize);
                sim.over.swap(*a as usize, *b as usize);
                return Ok(());
            }
            _ => {}
        }
        let Some((db, key)) = e.key() else {
            return Ok(());
        };
        if db as usize >= DATABASES {
            return invalid(format!("database {db}"));
        }
        if self.arenas.index(self.kv().shard_of(key)).is_none() {
            return invalid("an effect on a key the transaction did not lock".into());
        }
        if key.len() > limit {
            return too_large(format!(
                "a key of {} bytes is larger than the limit of {limit} bytes",
                key.len()
            ));
        }
        let items: Vec<&[u8]> = match e {
            Effect::Put { value, .. } => match value {
                Value::String(s) => vec![s],
                Value::Hash(p) => p.iter().flat_map(|(a, b)| [&a[..], &b[..]]).collect(),
                Value::List(l) | Value::Set(l) => l.iter().map(|x| &x[..]).collect(),
                Value::ZSet(z) => z.iter().map(|(_, m)| &m[..]).collect(),
            },
            Effect::HSet { pairs, .. } => {
                pairs.iter().flat_map(|(a, b)| [&a[..], &b[..]]).collect()
            }
            Effect::LPush { elems, .. } => elems.iter().map(|x| &x[..]).collect(),
            Effect::LSet { elem, .. } | Effect::LInsert { elem, .. } => vec![elem],
            Effect::SAdd { members, .. } => members.iter().map(|x| &x[..]).collect(),
            Effect::ZAdd { members, .. } => members.iter().map(|(_, m)| &m[..]).collect(),
            _ => Vec::new(),
        };
        if let Some(big) = items.iter().find(|x| x.len() > limit) {
            return too_large(format!(
                "a value of {} bytes is larger than the limit of {limit} bytes",
                big.len()
            ));
        }
        let nan = match e {
            Effect::ZAdd { members, .. } => members.iter().any(|(s, _)| s.is_nan()),
            Effect::Put {
                value: Value::ZSet(z),
                ..
            } => z.iter().any(|(s, _)| s.is_nan()),
            _ => false,
        };
        if nan {
            return invalid("a NaN score".into());
        }
        let now = self.now;
        let mut st = std::mem::take(self.slot(sim, db, key));
        let r = self.check_key(&mut st, e, key, now);
        *self.slot(sim, db, key) = st;
        r
    }

    fn check_key(&self, st: &mut KeyState, e: &Effect, key: &[u8], now: i64) -> ModelResult<()> {
        let invalid = |m: String| Err(ModelError::Invalid(m));
        if st.ty == Some(TYPE_OBJECT) {
            return invalid("the key holds a DStore object, not a value of the data model".into());
        }
        let want = match e {
            Effect::HSet { .. } | Effect::HDel { .. } => Some(TYPE_HASH),
            Effect::LPush { .. }
            | Effect::LPop { .. }
            | Effect::LSet { .. }
            | Effect::LInsert { .. }
            | Effect::LRemAt { .. }
            | Effect::LTrim { .. } => Some(TYPE_LIST),
            Effect::SAdd { .. } | Effect::SRem { .. } => Some(TYPE_SET),
            Effect::ZAdd { .. } | Effect::ZRem { .. } => Some(TYPE_ZSET),
            _ => None,
        };
        if let (Some(w), Some(have)) = (want, st.ty)
            && w != have
        {
            return invalid(format!("an effect for type {w} on a key of type {have}"));
        }
        let present = st.ty.is_some();
        let len = st.len;
        match e {
            Effect::LSet { index, .. } if !present || *index >= len => {
                return invalid(format!("LSet at {index} beyond the list"));
            }
            Effect::LInsert { index, .. } if *index > len => {
                return invalid(format!("LInsert at {index} beyond the list"));
            }
            Effect::LRemAt { indices, .. }
                if indices.windows(2).any(|w| w[0] >= w[1])
                    || indices.last().is_some_and(|&i| i >= len) =>
            {
                return invalid("LRemAt indices out of order or beyond the list".into());
            }
            _ => {}
        }
        let absent = |st: &mut KeyState| *st = KeyState::absent();
        let create = |st: &mut KeyState, ty: u64| {
            if st.ty.is_none() {
                *st = KeyState {
                    ty: Some(ty),
                    ..KeyState::absent()
                };
            }
        };
        match e {
            Effect::Del { .. } => absent(st),
            Effect::Put {
                value,
                expire_at_ms,
                ..
            } => {
                absent(st);
                let gone =
                    value.is_empty_collection() || (*expire_at_ms > 0 && *expire_at_ms <= now);
                if !gone {
                    st.ty = Some(effects::type_of(value.kind()));
                    let mut add = |m: &[u8]| {
                        if st.members.insert(m.to_vec(), true).is_none() {
                            st.len += 1;
                        }
                    };
                    match value {
                        Value::String(_) => {}
                        Value::Hash(p) => p.iter().for_each(|(f, _)| add(f)),
                        Value::Set(m) => m.iter().for_each(|x| add(x)),
                        Value::ZSet(z) => z.iter().for_each(|(_, m)| add(m)),
                        Value::List(l) => st.len = l.len() as u64,
                    }
                }
            }
            Effect::Expire { at_ms, .. } => {
                if present && *at_ms > 0 && *at_ms <= now {
                    absent(st);
                }
            }
            Effect::HSet { pairs, .. } => {
                create(st, TYPE_HASH);
                for (f, _) in pairs {
                    self.add_member(st, key, f);
                }
            }
            Effect::SAdd { members, .. } => {
                create(st, TYPE_SET);
                for m in members {
                    self.add_member(st, key, m);
                }
            }
            Effect::ZAdd { members, .. } => {
                create(st, TYPE_ZSET);
                for (_, m) in members {
                    self.add_member(st, key, m);
                }
            }
            Effect::HDel { fields: ms, .. }
            | Effect::SRem { members: ms, .. }
            | Effect::ZRem { members: ms, .. } => {
                if present {
                    for m in ms {
                        if self.is_member(st, key, m) {
                            st.members.insert(m.clone(), false);
                            st.len -= 1;
                        }
                    }
                }
            }
            Effect::LPush { elems, .. } => {
                create(st, TYPE_LIST);
                st.len += elems.len() as u64;
            }
            Effect::LInsert { .. } => {
                create(st, TYPE_LIST);
                st.len += 1;
            }
            Effect::LPop { count, .. } => st.len -= (*count).min(st.len),
            Effect::LRemAt { indices, .. } => st.len -= indices.len() as u64,
            Effect::LTrim { start, end, .. } => {
                let end = (*end).min(st.len);
                st.len = end - (*start).min(end);
            }
            Effect::LSet { .. } => {}
            Effect::FlushDb { .. } | Effect::FlushAll | Effect::SwapDb { .. } => {}
        }
        if st.ty.is_some_and(|t| t != TYPE_STRING) && st.len == 0 {
            absent(st);
        }
        match st.ty {
            Some(TYPE_LIST) if st.len > LIST_LEN_MAX => Err(ModelError::TooLarge(format!(
                "a list of more than {LIST_LEN_MAX} elements"
            ))),
            Some(TYPE_ZSET) if st.len > ZSET_LEN_MAX => Err(ModelError::TooLarge(format!(
                "a sorted set of more than {ZSET_LEN_MAX} members"
            ))),
            _ => Ok(()),
        }
    }

    fn add_member(&self, st: &mut KeyState, key: &[u8], m: &[u8]) {
        if !self.is_member(st, key, m) {
            st.len += 1;
        }
        st.members.insert(m.to_vec(), true);
    }

    /// The record of everything applied (`None` if nothing was).
    fn record(&self) -> Option<(Option<Vec<u16>>, Vec<u8>)> {
        if self.count == 0 {
            return None;
        }
        let bytes = op::effects_record(self.now, self.count, &self.encoded);
        let shards = self.kv().shards;
        let mut touched = self.touched.clone();
        touched.sort_unstable();
        touched.dedup();
        let ids = if self.global || touched.len() == shards {
            None
        } else {
            Some(touched)
        };
        Some((ids, bytes))
    }
}

impl<M: Medium + Clone + Send + Sync + 'static> View for StoreTxn<'_, '_, M> {
    fn now_ms(&self) -> i64 {
        self.now
    }

    fn kind(&self, db: Db, key: &[u8]) -> Option<Kind> {
        self.live(db, key)
            .and_then(|(a, e)| effects::kind_of(effects::type_tag(a, e)))
    }

    fn expire_at(&self, db: Db, key: &[u8]) -> Option<i64> {
        self.live(db, key)
            .filter(|(a, e)| effects::kind_of(effects::type_tag(a, *e)).is_some())
            .map(|(a, e)| e.expire(a))
            .filter(|&x| x != 0)
    }

    fn value(&self, db: Db, key: &[u8]) -> Option<Value> {
        Some(match self.kind(db, key)? {
            Kind::String => Value::String(self.string(db, key)?),
            Kind::Hash => Value::Hash(self.hash_all(db, key)),
            Kind::List => Value::List(self.list_range(db, key, 0, u64::MAX)),
            Kind::Set => Value::Set(self.set_members(db, key)),
            Kind::ZSet => Value::ZSet(
                self.zset_range(db, key, 0, u64::MAX)
                    .into_iter()
                    .map(|(m, s)| (s, m))
                    .collect(),
            ),
        })
    }

    fn string(&self, db: Db, key: &[u8]) -> Option<Bytes> {
        self.typed(db, key, TYPE_STRING)
            .map(|(a, e)| e.value(a).to_vec())
    }

    fn string_len(&self, db: Db, key: &[u8]) -> u64 {
        self.typed(db, key, TYPE_STRING)
            .map_or(0, |(a, e)| e.vlen(a) as u64)
    }

    fn hash_get(&self, db: Db, key: &[u8], field: &[u8]) -> Option<Bytes> {
        let (a, t) = self.nested(db, key, TYPE_HASH)?;
        table::find(a, t, self.kv().hash(field), field).map(|f| f.entry.value(a).to_vec())
    }

    fn hash_len(&self, db: Db, key: &[u8]) -> u64 {
        self.nested(db, key, TYPE_HASH)
            .map_or(0, |(a, t)| table::count(a, t))
    }

    fn hash_all(&self, db: Db, key: &[u8]) -> Vec<(Bytes, Bytes)> {
        self.nested(db, key, TYPE_HASH)
            .map_or(Vec::new(), |(a, t)| {
                table::entries(a, t)
                    .into_iter()
                    .map(|e| (e.key(a).to_vec(), e.value(a).to_vec()))
                    .collect()
            })
    }

    fn list_len(&self, db: Db, key: &[u8]) -> u64 {
        self.ring(db, key).map_or(0, |(a, r)| list::len(a, r))
    }

    fn list_range(&self, db: Db, key: &[u8], start: u64, end: u64) -> Vec<Bytes> {
        let Some((a, r)) = self.ring(db, key) else {
            return Vec::new();
        };
        let end = end.min(list::len(a, r));
        let start = start.min(end);
        (start..end)
            .map(|i| list::elem_bytes(a, list::elem(a, r, i)).to_vec())
            .collect()
    }

    fn set_len(&self, db: Db, key: &[u8]) -> u64 {
        self.nested(db, key, TYPE_SET)
            .map_or(0, |(a, t)| table::count(a, t))
    }

    fn set_contains(&self, db: Db, key: &[u8], member: &[u8]) -> bool {
        self.nested(db, key, TYPE_SET)
            .is_some_and(|(a, t)| table::find(a, t, self.kv().hash(member), member).is_some())
    }

    fn set_members(&self, db: Db, key: &[u8]) -> Vec<Bytes> {
        self.nested(db, key, TYPE_SET).map_or(Vec::new(), |(a, t)| {
            table::entries(a, t)
                .into_iter()
                .map(|e| e.key(a).to_vec())
                .collect()
        })
    }

    fn zset_len(&self, db: Db, key: &[u8]) -> u64 {
        self.zset(db, key).map_or(0, |(a, z)| zset::len(a, z))
    }

    fn zset_score(&self, db: Db, key: &[u8], member: &[u8]) -> Option<f64> {
        let (a, e) = self.typed(db, key, TYPE_ZSET)?;
        zset::score(self.kv(), a, e, member)
    }

    fn zset_rank(&self, db: Db, key: &[u8], member: &[u8]) -> Option<u64> {
        let (a, e) = self.typed(db, key, TYPE_ZSET)?;
        zset::rank(self.kv(), a, e, member)
    }

    fn zset_range(&self, db: Db, key: &[u8], start: u64, end: u64) -> Vec<(Bytes, f64)> {
        let Some((a, z)) = self.zset(db, key) else {
            return Vec::new();
        };
        let end = end.min(zset::len(a, z));
        let start = start.min(end);
        (start..end)
            .map(|i| {
                let (s, m) = zset::item(a, z, i);
                (m.to_vec(), s)
            })
            .collect()
    }

    fn zset_rank_of_score(&self, db: Db, key: &[u8], bound: ScoreBound) -> u64 {
        self.zset(db, key).map_or(0, |(a, z)| {
            zset::partition(a, z, |s, _| {
                if bound.exclusive {
                    s <= bound.score
                } else {
                    s < bound.score
                }
            })
        })
    }

    fn zset_rank_above(&self, db: Db, key: &[u8], bound: ScoreBound) -> u64 {
        self.zset(db, key).map_or(0, |(a, z)| {
            zset::partition(a, z, |s, _| {
                if bound.exclusive {
                    s < bound.score
                } else {
                    s <= bound.score
                }
            })
        })
    }

    fn zset_rank_of_lex(&self, db: Db, key: &[u8], bound: &LexBound) -> u64 {
        self.zset(db, key).map_or(0, |(a, z)| {
            zset::partition(a, z, |_, m| lex_below(m, bound, false))
        })
    }

    fn zset_rank_above_lex(&self, db: Db, key: &[u8], bound: &LexBound) -> u64 {
        self.zset(db, key).map_or(0, |(a, z)| {
            zset::partition(a, z, |_, m| lex_below(m, bound, true))
        })
    }
}

/// Lower end: is `m` before the range starting at `bound`? Upper end: is `m` inside a range
/// ending at `bound`?
fn lex_below(m: &[u8], bound: &LexBound, upper: bool) -> bool {
    match (bound, upper) {
        (LexBound::Min, _) => false,
        (LexBound::Max, _) => true,
        (LexBound::Inclusive(b), false) | (LexBound::Exclusive(b), true) => m < b.as_slice(),
        (LexBound::Exclusive(b), false) | (LexBound::Inclusive(b), true) => m <= b.as_slice(),
    }
}

impl<M: Medium + Clone + Send + Sync + 'static> Txn for StoreTxn<'_, '_, M> {
    fn apply(&mut self, effects: Vec<Effect>) -> ModelResult<()> {
        if matches!(self.arenas, Arenas::Read { .. }) {
            return Err(ModelError::ReadOnly(
                "a write in a read-only transaction".into(),
            ));
        }
        if effects.is_empty() {
            return Ok(());
        }
        // 1. Check every effect against the state the earlier ones leave.
        let mut sim = Sim::new();
        for e in &effects {
            self.check(&mut sim, e)?;
        }
        // 2. Room: in the DRAM state and in one log record.
        let Arenas::Write(locked) = &mut self.arenas else {
            unreachable!("checked above");
        };
        if effects.iter().any(Effect::grows) && !locked.admits_growth() {
            return Err(ModelError::OutOfSpace(
                "the store's DRAM state is near its shadow slots' capacity; only deletions are \
                 accepted"
                    .into(),
            ));
        }
        let encoded = model::encode_effects(&effects);
        let body = &encoded[4..];
        let max = self.store.engine().operation_bytes_max();
        if 13 + self.encoded.len() + body.len() > max {
            return Err(ModelError::TooLarge(format!(
                "the transaction's changes take more than {max} bytes, the largest log record"
            )));
        }
        // 3. Apply.
        let kv = self.store.kv().clone();
        for e in &effects {
            let targets: Vec<usize> = match e.key() {
                Some((_, key)) => {
                    let s = kv.shard_of(key);
                    self.touched.push(s);
                    vec![locked.ids().binary_search(&s).expect("checked: locked")]
                }
                None => {
                    self.global = true;
                    (0..locked.ids().len()).collect()
                }
            };
            for i in targets {
                if let Err(err) =
                    effects::apply(&kv, locked.arena_mut(i), e, self.now, &mut self.freed)
                {
                    let why = format!("an effect failed half way, after it was checked: {err}");
                    locked.fail(why.clone());
                    return Err(ModelError::Failed(why));
                }
            }
        }
        self.encoded.extend_from_slice(body);
        self.count += effects.len();
        Ok(())
    }
}

/// A seed for RANDOMKEY's starting point.
static RANDOM_STEP: AtomicU64 = AtomicU64::new(0);

impl<M: Medium + Clone + Send + Sync + 'static> Store<M> {
    fn all_shards(&self) -> Vec<u16> {
        (0..self.engine().shards() as u16).collect()
    }

    fn check_db(db: Db) -> ModelResult<()> {
        if db as usize >= DATABASES {
            return Err(ModelError::Invalid(format!("database {db}")));
        }
        Ok(())
    }

    /// Walk the keyspace from `cursor` (shard in the high bits, bucket cursor in the low 40),
    /// one bucket at a time, until `enough` says so, the walk ends (cursor 0) or `buckets_max`
    /// buckets were visited. `take` gets each bucket's entries and says whether to take them;
    /// `false` stops the walk before that bucket (the next call starts with it again), and is
    /// only asked of buckets after the first.
    fn walk(
        &self,
        cursor: u64,
        buckets_max: usize,
        mut take: impl FnMut(&Arena, &[Entry], bool) -> bool,
        enough: impl Fn() -> bool,
    ) -> ModelResult<u64> {
        let shards = self.engine().shards() as u64;
        let mut shard = cursor >> CURSOR_LOW_BITS;
        let mut v = cursor & CURSOR_LOW;
        let mut buckets = 0;
        while shard < shards && buckets < buckets_max.max(1) && !enough() {
            let first = buckets == 0;
            let next = self
                .engine()
                .read(shard as usize, |a| {
                    let mut found = Vec::new();
                    let next =
                        table::scan_step(a, a.user(crate::machine::USER_KEYSPACE), v, &mut found);
                    take(a, &found, first).then_some(next)
                })
                .map_err(model_error)?;
            let Some(next) = next else {
                break;
            };
            buckets += 1;
            if next == 0 || next > CURSOR_LOW {
                shard += 1;
                v = 0;
            } else {
                v = next;
            }
        }
        Ok(if shard >= shards {
            0
        } else {
            (shard << CURSOR_LOW_BITS) | v
        })
    }
}

impl<M: Medium + Clone + Send + Sync + 'static> Keyspace for Store<M> {
    fn transact(
        &self,
        scope: Scope<'_>,
        write: bool,
        body: &mut dyn FnMut(&mut dyn Txn) -> ModelResult<()>,
    ) -> ModelResult<()> {
        if let Some(why) = self.engine().failure() {
            return Err(ModelError::Failed(why));
        }
        let now = self.now();
        let shards: Option<Vec<u16>> = match scope {
            Scope::All => None,
            Scope::Keys(keys) => {
                let mut v: Vec<u16> = keys.iter().map(|(_, k)| self.kv().shard_of(k)).collect();
                v.sort_unstable();
                v.dedup();
                Some(v)
            }
        };
        let all = shards
            .as_ref()
            .is_none_or(|s| s.len() == self.engine().shards());
        if !write {
            let ids = shards.unwrap_or_else(|| self.all_shards());
            return self
                .engine()
                .read_many(&ids, |arenas| {
                    let mut t = StoreTxn {
                        store: self,
                        arenas: Arenas::Read { ids: &ids, arenas },
                        now,
                        all,
                        encoded: Vec::new(),
                        count: 0,
                        touched: Vec::new(),
                        global: false,
                        freed: Vec::new(),
                    };
                    body(&mut t)
                })
                .map_err(model_error)?;
        }
        let mut freed = Vec::new();
        let r = self
            .engine()
            .apply_then_log(shards.as_deref(), |locked| {
                let mut t = StoreTxn {
                    store: self,
                    arenas: Arenas::Write(locked),
                    now,
                    all,
                    encoded: Vec::new(),
                    count: 0,
                    touched: Vec::new(),
                    global: false,
                    freed: Vec::new(),
                };
                let out = body(&mut t);
                let record = t.record();
                freed = std::mem::take(&mut t.freed);
                (out, record)
            })
            .map_err(model_error)?;
        // The record that removed them is durable (or, without `Sync`, will be before a block
        // is reused: the zone waits for a log swap).
        self.release(&freed);
        r
    }

    fn scan(&self, db: Db, cursor: u64, count: usize) -> ModelResult<(u64, Vec<KeyInfo>)> {
        Self::check_db(db)?;
        let now = self.now();
        let want = count.max(1);
        let seen = std::cell::Cell::new(0usize);
        let mut out = Vec::new();
        let next = self.walk(
            cursor,
            want.saturating_mul(10),
            |a, bucket, _| {
                seen.set(seen.get() + bucket.len());
                for &e in bucket {
                    if effects::db(a, e) == db
                        && !effects::is_expired(a, e, now)
                        && let Some(kind) = effects::kind_of(effects::type_tag(a, e))
                    {
                        out.push(KeyInfo {
                            key: e.key(a).to_vec(),
                            kind,
                            expire_at_ms: e.expire(a),
                        });
                    }
                }
                true
            },
            || seen.get() >= want,
        )?;
        Ok((next, out))
    }

    fn dbsize(&self, db: Db) -> ModelResult<u64> {
        Self::check_db(db)?;
        let mut n = 0;
        for s in 0..self.engine().shards() {
            n += self
                .engine()
                .read(s, |a| effects::db_count(a, db))
                .map_err(model_error)?;
        }
        Ok(n)
    }

    fn random_key(&self, db: Db) -> ModelResult<Option<Bytes>> {
        Self::check_db(db)?;
        if Keyspace::dbsize(self, db)? == 0 {
            return Ok(None);
        }
        let now = self.now();
        let step = RANDOM_STEP.fetch_add(1, Ordering::Relaxed);
        let r = table::hash(step, &now.to_le_bytes());
        let shards = self.engine().shards();
        let first = (r % shards as u64) as usize;
        for k in 0..shards {
            let s = (first + k) % shards;
            let found = self
                .engine()
                .read(s, |a| {
                    let t = a.user(crate::machine::USER_KEYSPACE);
                    let pick = |e: &Entry| {
                        effects::db(a, *e) == db
                            && !effects::is_expired(a, *e, now)
                            && effects::kind_of(effects::type_tag(a, *e)).is_some()
                    };
                    // From a random bucket to the end of the walk, then from its start.
                    for start in [r >> 16, 0] {
                        let mut v = start & (table::buckets(a, t) - 1);
                        loop {
                            let mut found = Vec::new();
                            v = table::scan_step(a, t, v, &mut found);
                            if let Some(e) = found.iter().find(|e| pick(e)) {
                                return Some(e.key(a).to_vec());
                            }
                            if v == 0 {
                                break;
                            }
                        }
                    }
                    None
                })
                .map_err(model_error)?;
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }

    /// Buckets are taken whole, so that no key is skipped: a call can return more than `limit`
    /// keys when the first bucket it visits holds more (the same key in several databases
    /// shares a bucket).
    fn expired(&self, cursor: u64, limit: usize) -> ModelResult<(u64, Vec<(Db, Bytes)>)> {
        let now = self.now();
        let want = limit.max(1);
        let mut out = Vec::new();
        let found = std::cell::Cell::new(0usize);
        let next = self.walk(
            cursor,
            want.saturating_mul(16),
            |a, bucket, first| {
                let due: Vec<Entry> = bucket
                    .iter()
                    .copied()
                    .filter(|&e| effects::is_expired(a, e, now))
                    .collect();
                // A bucket is taken whole (so no key of it is skipped); one that would go past
                // the limit waits for the next call, unless it is the first.
                if !first && out.len() + due.len() > want {
                    return false;
                }
                out.extend(
                    due.into_iter()
                        .map(|e| (effects::db(a, e), e.key(a).to_vec())),
                );
                found.set(out.len());
                true
            },
            || found.get() >= want,
        )?;
        Ok((next, out))
    }

    fn used_bytes(&self) -> u64 {
        (0..self.engine().shards())
            .filter_map(|s| self.engine().read(s, Arena::live_bytes).ok())
            .sum()
    }
}
