//! An in-memory [`Keyspace`]: the reference the stores are compared with, and the backend of
//! the command layer's own tests. Nothing here is durable.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::{
    Bytes, DATABASES, Db, Effect, KeyInfo, Keyspace, Kind, LexBound, ModelError, ModelResult,
    Scope, ScoreBound, Txn, Value, View,
};

/// A sorted set: members by score, and `(score, member)` in order.
#[derive(Debug, Clone, Default)]
struct ZSet {
    scores: BTreeMap<Bytes, f64>,
    order: BTreeSet<(Score, Bytes)>,
}

/// A score with a total order (never NaN).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Score(f64);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // -0.0 and 0.0 are one score, as in Redis.
        self.0
            .partial_cmp(&other.0)
            .unwrap_or(std::cmp::Ordering::Equal)
    }
}

#[derive(Debug, Clone)]
enum Val {
    String(Bytes),
    Hash(BTreeMap<Bytes, Bytes>),
    List(VecDeque<Bytes>),
    Set(BTreeSet<Bytes>),
    ZSet(ZSet),
}

impl Val {
    fn kind(&self) -> Kind {
        match self {
            Val::String(_) => Kind::String,
            Val::Hash(_) => Kind::Hash,
            Val::List(_) => Kind::List,
            Val::Set(_) => Kind::Set,
            Val::ZSet(_) => Kind::ZSet,
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Val::String(_) => false,
            Val::Hash(h) => h.is_empty(),
            Val::List(l) => l.is_empty(),
            Val::Set(s) => s.is_empty(),
            Val::ZSet(z) => z.scores.is_empty(),
        }
    }

    fn from_value(v: Value) -> Val {
        match v {
            Value::String(s) => Val::String(s),
            Value::Hash(p) => Val::Hash(p.into_iter().collect()),
            Value::List(l) => Val::List(l.into()),
            Value::Set(s) => Val::Set(s.into_iter().collect()),
            Value::ZSet(z) => {
                let mut out = ZSet::default();
                for (s, m) in z {
                    out.add(s, m);
                }
                Val::ZSet(out)
            }
        }
    }

    fn to_value(&self) -> Value {
        match self {
            Val::String(s) => Value::String(s.clone()),
            Val::Hash(h) => Value::Hash(h.iter().map(|(a, b)| (a.clone(), b.clone())).collect()),
            Val::List(l) => Value::List(l.iter().cloned().collect()),
            Val::Set(s) => Value::Set(s.iter().cloned().collect()),
            Val::ZSet(z) => Value::ZSet(z.order.iter().map(|(s, m)| (s.0, m.clone())).collect()),
        }
    }
}

impl ZSet {
    fn add(&mut self, score: f64, member: Bytes) {
        let score = if score == 0.0 { 0.0 } else { score };
        if let Some(old) = self.scores.insert(member.clone(), score) {
            self.order.remove(&(Score(old), member.clone()));
        }
        self.order.insert((Score(score), member));
    }

    fn remove(&mut self, member: &[u8]) {
        if let Some(old) = self.scores.remove(member) {
            self.order.remove(&(Score(old), member.to_vec()));
        }
    }

    fn rank_where(&self, below: impl Fn(f64, &[u8]) -> bool) -> u64 {
        // The order is sorted, so the members that satisfy `below` form a prefix.
        self.order.iter().take_while(|(s, m)| below(s.0, m)).count() as u64
    }
}

#[derive(Debug, Clone)]
struct Entry {
    val: Val,
    expire_at: i64,
}

/// The state: one map per database.
#[derive(Debug, Clone)]
struct State {
    dbs: Vec<BTreeMap<Bytes, Entry>>,
}

impl State {
    fn live(&self, db: Db, key: &[u8], now: i64) -> Option<&Entry> {
        self.dbs
            .get(db as usize)?
            .get(key)
            .filter(|e| e.expire_at == 0 || e.expire_at > now)
    }

    /// The entry for a write: an expired one is dropped first.
    fn slot(&mut self, db: Db, key: &[u8], now: i64) -> Option<&mut Entry> {
        let map = &mut self.dbs[db as usize];
        if map
            .get(key)
            .is_some_and(|e| e.expire_at != 0 && e.expire_at <= now)
        {
            map.remove(key);
        }
        map.get_mut(key)
    }

    fn collection(
        &mut self,
        db: Db,
        key: &[u8],
        now: i64,
        kind: Kind,
        create: bool,
    ) -> ModelResult<Option<&mut Val>> {
        let exists = self.slot(db, key, now).is_some();
        if !exists {
            if !create {
                return Ok(None);
            }
            let val = match kind {
                Kind::Hash => Val::Hash(BTreeMap::new()),
                Kind::List => Val::List(VecDeque::new()),
                Kind::Set => Val::Set(BTreeSet::new()),
                Kind::ZSet => Val::ZSet(ZSet::default()),
                Kind::String => {
                    return Err(ModelError::Invalid("a string is not a collection".into()));
                }
            };
            self.dbs[db as usize].insert(key.to_vec(), Entry { val, expire_at: 0 });
        }
        let e = self.dbs[db as usize].get_mut(key).expect("present");
        if e.val.kind() != kind {
            return Err(ModelError::Invalid(format!(
                "effect on a {} key expects a {}",
                e.val.kind().name(),
                kind.name()
            )));
        }
        Ok(Some(&mut e.val))
    }

    fn drop_if_empty(&mut self, db: Db, key: &[u8]) {
        let map = &mut self.dbs[db as usize];
        if map.get(key).is_some_and(|e| e.val.is_empty()) {
            map.remove(key);
        }
    }

    /// Check an effect's preconditions against the state, so that `apply` of a list either
    /// changes nothing or all of it.
    fn check(&self, e: &Effect, now: i64) -> ModelResult<()> {
        let bad = |m: String| Err(ModelError::Invalid(m));
        if let Some((db, _)) = e.key()
            && db as usize >= DATABASES
        {
            return bad(format!("database {db}"));
        }
        let len = |db: Db, key: &[u8]| match self.live(db, key, now).map(|e| &e.val) {
            Some(Val::List(l)) => Some(l.len() as u64),
            _ => None,
        };
        match e {
            Effect::LSet { db, key, index, .. } if len(*db, key).is_none_or(|n| *index >= n) => {
                bad(format!("LSet at {index} beyond the list"))
            }
            Effect::LInsert { db, key, index, .. } if len(*db, key).unwrap_or(0) < *index => {
                bad(format!("LInsert at {index} beyond the list"))
            }
            Effect::LRemAt { db, key, indices }
                if indices.windows(2).any(|w| w[0] >= w[1])
                    || indices
                        .last()
                        .is_some_and(|&i| len(*db, key).is_none_or(|n| i >= n)) =>
            {
                bad("LRemAt indices out of order or beyond the list".into())
            }
            Effect::ZAdd { members, .. } if members.iter().any(|(s, _)| s.is_nan()) => {
                bad("a NaN score".into())
            }
            Effect::FlushDb { db } if *db as usize >= DATABASES => bad(format!("database {db}")),
            Effect::SwapDb { a, b } if *a as usize >= DATABASES || *b as usize >= DATABASES => {
                bad(format!("databases {a} and {b}"))
            }
            _ => {
                if let Some((db, key)) = e.key() {
                    let want = match e {
                        Effect::HSet { .. } | Effect::HDel { .. } => Some(Kind::Hash),
                        Effect::LPush { .. }
                        | Effect::LPop { .. }
                        | Effect::LTrim { .. }
                        | Effect::LSet { .. }
                        | Effect::LInsert { .. }
                        | Effect::LRemAt { .. } => Some(Kind::List),
                        Effect::SAdd { .. } | Effect::SRem { .. } => Some(Kind::Set),
                        Effect::ZAdd { .. } | Effect::ZRem { .. } => Some(Kind::ZSet),
                        _ => None,
                    };
                    if let (Some(want), Some(have)) =
                        (want, self.live(db, key, now).map(|e| e.val.kind()))
                        && want != have
                    {
                        return bad(format!("a {} effect on a {}", want.name(), have.name()));
                    }
                }
                Ok(())
            }
        }
    }

    fn apply(&mut self, e: Effect, now: i64) -> ModelResult<()> {
        match e {
            Effect::Del { db, key } => {
                self.dbs[db as usize].remove(&key);
            }
            Effect::Put {
                db,
                key,
                value,
                expire_at_ms,
            } => {
                if value.is_empty_collection() {
                    self.dbs[db as usize].remove(&key);
                } else {
                    let entry = Entry {
                        val: Val::from_value(value),
                        expire_at: expire_at_ms.max(0),
                    };
                    self.dbs[db as usize].insert(key, entry);
                }
            }
            Effect::Expire { db, key, at_ms } => {
                if let Some(e) = self.slot(db, &key, now) {
                    e.expire_at = at_ms.max(0);
                }
            }
            Effect::HSet { db, key, pairs } => {
                if let Some(Val::Hash(h)) = self.collection(db, &key, now, Kind::Hash, true)? {
                    h.extend(pairs);
                }
                // HSet with no pairs on an absent key must not leave an empty hash.
                self.drop_if_empty(db, &key);
            }
            Effect::HDel { db, key, fields } => {
                if let Some(Val::Hash(h)) = self.collection(db, &key, now, Kind::Hash, false)? {
                    for f in &fields {
                        h.remove(f);
                    }
                }
                self.drop_if_empty(db, &key);
            }
            Effect::LPush {
                db,
                key,
                left,
                elems,
            } => {
                if let Some(Val::List(l)) = self.collection(db, &key, now, Kind::List, true)? {
                    for x in elems {
                        if left {
                            l.push_front(x);
                        } else {
                            l.push_back(x);
                        }
                    }
                }
                self.drop_if_empty(db, &key);
            }
            Effect::LPop {
                db,
                key,
                left,
                count,
            } => {
                if let Some(Val::List(l)) = self.collection(db, &key, now, Kind::List, false)? {
                    for _ in 0..count.min(l.len() as u64) {
                        if left {
                            l.pop_front();
                        } else {
                            l.pop_back();
                        }
                    }
                }
                self.drop_if_empty(db, &key);
            }
            Effect::LSet {
                db,
                key,
                index,
                elem,
            } => {
                if let Some(Val::List(l)) = self.collection(db, &key, now, Kind::List, false)? {
                    l[index as usize] = elem;
                }
            }
            Effect::LInsert {
                db,
                key,
                index,
                elem,
            } => {
                if let Some(Val::List(l)) = self.collection(db, &key, now, Kind::List, true)? {
                    l.insert(index as usize, elem);
                }
            }
            Effect::LRemAt { db, key, indices } => {
                if let Some(Val::List(l)) = self.collection(db, &key, now, Kind::List, false)? {
                    for &i in indices.iter().rev() {
                        l.remove(i as usize);
                    }
                }
                self.drop_if_empty(db, &key);
            }
            Effect::LTrim {
                db,
                key,
                start,
                end,
            } => {
                if let Some(Val::List(l)) = self.collection(db, &key, now, Kind::List, false)? {
                    let n = l.len() as u64;
                    let end = end.min(n);
                    let start = start.min(end);
                    l.truncate(end as usize);
                    l.drain(..start as usize);
                }
                self.drop_if_empty(db, &key);
            }
            Effect::SAdd { db, key, members } => {
                if let Some(Val::Set(s)) = self.collection(db, &key, now, Kind::Set, true)? {
                    s.extend(members);
                }
                self.drop_if_empty(db, &key);
            }
            Effect::SRem { db, key, members } => {
                if let Some(Val::Set(s)) = self.collection(db, &key, now, Kind::Set, false)? {
                    for m in &members {
                        s.remove(m);
                    }
                }
                self.drop_if_empty(db, &key);
            }
            Effect::ZAdd { db, key, members } => {
                if let Some(Val::ZSet(z)) = self.collection(db, &key, now, Kind::ZSet, true)? {
                    for (s, m) in members {
                        z.add(s, m);
                    }
                }
                self.drop_if_empty(db, &key);
            }
            Effect::ZRem { db, key, members } => {
                if let Some(Val::ZSet(z)) = self.collection(db, &key, now, Kind::ZSet, false)? {
                    for m in &members {
                        z.remove(m);
                    }
                }
                self.drop_if_empty(db, &key);
            }
            Effect::FlushDb { db } => self.dbs[db as usize].clear(),
            Effect::FlushAll => self.dbs.iter_mut().for_each(BTreeMap::clear),
            Effect::SwapDb { a, b } => self.dbs.swap(a as usize, b as usize),
        }
        Ok(())
    }
}

/// A clock in ms since the Unix epoch.
pub type Clock = Box<dyn Fn() -> i64 + Send + Sync>;

fn system_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The in-memory keyspace. One lock over everything: transactions run one at a time.
pub struct MemoryKeyspace {
    state: Mutex<State>,
    clock: Clock,
}

impl std::fmt::Debug for MemoryKeyspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryKeyspace").finish_non_exhaustive()
    }
}

impl Default for MemoryKeyspace {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryKeyspace {
    /// An empty keyspace on the system clock.
    pub fn new() -> Self {
        Self::with_clock(Box::new(system_ms))
    }

    /// An empty keyspace on `clock`.
    pub fn with_clock(clock: Clock) -> Self {
        MemoryKeyspace {
            state: Mutex::new(State {
                dbs: vec![BTreeMap::new(); DATABASES],
            }),
            clock,
        }
    }

    /// Every live key of every database with its value and deadline, in order (for comparing
    /// two keyspaces).
    pub fn dump(&self) -> Vec<(Db, Bytes, Value, i64)> {
        let now = (self.clock)();
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = Vec::new();
        for (db, map) in st.dbs.iter().enumerate() {
            for (k, e) in map {
                if e.expire_at == 0 || e.expire_at > now {
                    out.push((db as Db, k.clone(), e.val.to_value(), e.expire_at));
                }
            }
        }
        out
    }
}

struct MemTxn<'a> {
    st: &'a mut State,
    now: i64,
    write: bool,
}

fn lex_below(m: &[u8], bound: &LexBound, upper: bool) -> bool {
    // Lower end: is `m` before the range starting at `bound`?
    // Upper end: is `m` inside a range ending at `bound`?
    match (bound, upper) {
        (LexBound::Min, false) => false,
        (LexBound::Max, false) => true,
        (LexBound::Min, true) => false,
        (LexBound::Max, true) => true,
        (LexBound::Inclusive(b), false) => m < b.as_slice(),
        (LexBound::Exclusive(b), false) => m <= b.as_slice(),
        (LexBound::Inclusive(b), true) => m <= b.as_slice(),
        (LexBound::Exclusive(b), true) => m < b.as_slice(),
    }
}

impl MemTxn<'_> {
    fn val(&self, db: Db, key: &[u8]) -> Option<&Val> {
        self.st.live(db, key, self.now).map(|e| &e.val)
    }

    fn zset(&self, db: Db, key: &[u8]) -> Option<&ZSet> {
        match self.val(db, key) {
            Some(Val::ZSet(z)) => Some(z),
            _ => None,
        }
    }
}

impl View for MemTxn<'_> {
    fn now_ms(&self) -> i64 {
        self.now
    }
    fn kind(&self, db: Db, key: &[u8]) -> Option<Kind> {
        self.val(db, key).map(Val::kind)
    }
    fn expire_at(&self, db: Db, key: &[u8]) -> Option<i64> {
        self.st
            .live(db, key, self.now)
            .and_then(|e| (e.expire_at != 0).then_some(e.expire_at))
    }
    fn value(&self, db: Db, key: &[u8]) -> Option<Value> {
        self.val(db, key).map(Val::to_value)
    }
    fn string(&self, db: Db, key: &[u8]) -> Option<Bytes> {
        match self.val(db, key) {
            Some(Val::String(s)) => Some(s.clone()),
            _ => None,
        }
    }
    fn string_len(&self, db: Db, key: &[u8]) -> u64 {
        match self.val(db, key) {
            Some(Val::String(s)) => s.len() as u64,
            _ => 0,
        }
    }
    fn hash_get(&self, db: Db, key: &[u8], field: &[u8]) -> Option<Bytes> {
        match self.val(db, key) {
            Some(Val::Hash(h)) => h.get(field).cloned(),
            _ => None,
        }
    }
    fn hash_len(&self, db: Db, key: &[u8]) -> u64 {
        match self.val(db, key) {
            Some(Val::Hash(h)) => h.len() as u64,
            _ => 0,
        }
    }
    fn hash_all(&self, db: Db, key: &[u8]) -> Vec<(Bytes, Bytes)> {
        match self.val(db, key) {
            Some(Val::Hash(h)) => h.iter().map(|(a, b)| (a.clone(), b.clone())).collect(),
            _ => Vec::new(),
        }
    }
    fn list_len(&self, db: Db, key: &[u8]) -> u64 {
        match self.val(db, key) {
            Some(Val::List(l)) => l.len() as u64,
            _ => 0,
        }
    }
    fn list_range(&self, db: Db, key: &[u8], start: u64, end: u64) -> Vec<Bytes> {
        match self.val(db, key) {
            Some(Val::List(l)) => {
                let end = (end as usize).min(l.len());
                let start = (start as usize).min(end);
                l.range(start..end).cloned().collect()
            }
            _ => Vec::new(),
        }
    }
    fn set_len(&self, db: Db, key: &[u8]) -> u64 {
        match self.val(db, key) {
            Some(Val::Set(s)) => s.len() as u64,
            _ => 0,
        }
    }
    fn set_contains(&self, db: Db, key: &[u8], member: &[u8]) -> bool {
        matches!(self.val(db, key), Some(Val::Set(s)) if s.contains(member))
    }
    fn set_members(&self, db: Db, key: &[u8]) -> Vec<Bytes> {
        match self.val(db, key) {
            Some(Val::Set(s)) => s.iter().cloned().collect(),
            _ => Vec::new(),
        }
    }
    fn zset_len(&self, db: Db, key: &[u8]) -> u64 {
        self.zset(db, key).map_or(0, |z| z.scores.len() as u64)
    }
    fn zset_score(&self, db: Db, key: &[u8], member: &[u8]) -> Option<f64> {
        self.zset(db, key)?.scores.get(member).copied()
    }
    fn zset_rank(&self, db: Db, key: &[u8], member: &[u8]) -> Option<u64> {
        let z = self.zset(db, key)?;
        let s = *z.scores.get(member)?;
        Some(z.order.range(..(Score(s), member.to_vec())).count() as u64)
    }
    fn zset_range(&self, db: Db, key: &[u8], start: u64, end: u64) -> Vec<(Bytes, f64)> {
        let Some(z) = self.zset(db, key) else {
            return Vec::new();
        };
        let end = end.min(z.order.len() as u64);
        let start = start.min(end);
        z.order
            .iter()
            .skip(start as usize)
            .take((end - start) as usize)
            .map(|(s, m)| (m.clone(), s.0))
            .collect()
    }
    fn zset_rank_of_score(&self, db: Db, key: &[u8], bound: ScoreBound) -> u64 {
        self.zset(db, key).map_or(0, |z| {
            z.rank_where(|s, _| {
                if bound.exclusive {
                    s <= bound.score
                } else {
                    s < bound.score
                }
            })
        })
    }
    fn zset_rank_above(&self, db: Db, key: &[u8], bound: ScoreBound) -> u64 {
        self.zset(db, key).map_or(0, |z| {
            z.rank_where(|s, _| {
                if bound.exclusive {
                    s < bound.score
                } else {
                    s <= bound.score
                }
            })
        })
    }
    fn zset_rank_of_lex(&self, db: Db, key: &[u8], bound: &LexBound) -> u64 {
        self.zset(db, key)
            .map_or(0, |z| z.rank_where(|_, m| lex_below(m, bound, false)))
    }
    fn zset_rank_above_lex(&self, db: Db, key: &[u8], bound: &LexBound) -> u64 {
        self.zset(db, key)
            .map_or(0, |z| z.rank_where(|_, m| lex_below(m, bound, true)))
    }
    fn db_len(&self, db: Db) -> Option<u64> {
        // One lock covers everything, so every transaction holds the whole keyspace.
        Some(self.st.dbs.get(db as usize).map_or(0, |m| m.len() as u64))
    }
    fn db_keys(&self, db: Db) -> Option<Vec<KeyInfo>> {
        let map = self.st.dbs.get(db as usize)?;
        Some(
            map.iter()
                .filter(|(_, e)| e.expire_at == 0 || e.expire_at > self.now)
                .map(|(k, e)| KeyInfo {
                    key: k.clone(),
                    kind: e.val.kind(),
                    expire_at_ms: e.expire_at,
                })
                .collect(),
        )
    }
}

impl Txn for MemTxn<'_> {
    fn apply(&mut self, effects: Vec<Effect>) -> ModelResult<()> {
        if !self.write {
            return Err(ModelError::ReadOnly(
                "a write in a read-only transaction".into(),
            ));
        }
        // All or nothing: check each effect against the state the earlier ones leave.
        let mut scratch: Option<State> = None;
        if effects.len() > 1 {
            let mut trial = self.st.clone();
            for e in &effects {
                trial.check(e, self.now)?;
                trial.apply(e.clone(), self.now)?;
            }
            scratch = Some(trial);
        } else if let Some(e) = effects.first() {
            self.st.check(e, self.now)?;
        }
        match scratch {
            Some(s) => *self.st = s,
            None => {
                for e in effects {
                    self.st.apply(e, self.now)?;
                }
            }
        }
        Ok(())
    }
}

impl Keyspace for MemoryKeyspace {
    fn transact(
        &self,
        _scope: Scope<'_>,
        write: bool,
        body: &mut dyn FnMut(&mut dyn Txn) -> ModelResult<()>,
    ) -> ModelResult<()> {
        let now = (self.clock)();
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut txn = MemTxn {
            st: &mut st,
            now,
            write,
        };
        body(&mut txn)
    }

    fn scan(&self, db: Db, cursor: u64, count: usize) -> ModelResult<(u64, Vec<KeyInfo>)> {
        let now = (self.clock)();
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let map = st
            .dbs
            .get(db as usize)
            .ok_or_else(|| ModelError::Invalid(format!("database {db}")))?;
        // The cursor is the position in key order; keys added behind it are missed only if
        // they were not present for the whole scan.
        let all: Vec<_> = map.iter().collect();
        let start = (cursor as usize).min(all.len());
        let end = (start + count.max(1)).min(all.len());
        let keys = all[start..end]
            .iter()
            .filter(|(_, e)| e.expire_at == 0 || e.expire_at > now)
            .map(|(k, e)| KeyInfo {
                key: (*k).clone(),
                kind: e.val.kind(),
                expire_at_ms: e.expire_at,
            })
            .collect();
        let next = if end >= all.len() { 0 } else { end as u64 };
        Ok((next, keys))
    }

    fn dbsize(&self, db: Db) -> ModelResult<u64> {
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(st.dbs.get(db as usize).map_or(0, |m| m.len() as u64))
    }

    fn random_key(&self, db: Db) -> ModelResult<Option<Bytes>> {
        let now = (self.clock)();
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(map) = st.dbs.get(db as usize) else {
            return Ok(None);
        };
        let live: Vec<_> = map
            .iter()
            .filter(|(_, e)| e.expire_at == 0 || e.expire_at > now)
            .collect();
        if live.is_empty() {
            return Ok(None);
        }
        let pick = (now as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) as usize % live.len();
        Ok(Some(live[pick].0.clone()))
    }

    fn expired(&self, cursor: u64, limit: usize) -> ModelResult<(u64, Vec<(Db, Bytes)>)> {
        let now = (self.clock)();
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let out: Vec<(Db, Bytes)> = st
            .dbs
            .iter()
            .enumerate()
            .flat_map(|(db, m)| {
                m.iter()
                    .filter(|(_, e)| e.expire_at != 0 && e.expire_at <= now)
                    .map(move |(k, _)| (db as Db, k.clone()))
            })
            .take(limit)
            .collect();
        let _ = cursor;
        Ok((0, out))
    }

    fn used_bytes(&self) -> u64 {
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.dbs
            .iter()
            .flat_map(|m| m.iter())
            .map(|(k, e)| {
                k.len() as u64
                    + match &e.val {
                        Val::String(s) => s.len() as u64,
                        Val::Hash(h) => h.iter().map(|(a, b)| (a.len() + b.len()) as u64).sum(),
                        Val::List(l) => l.iter().map(|x| x.len() as u64).sum(),
                        Val::Set(s) => s.iter().map(|x| x.len() as u64).sum(),
                        Val::ZSet(z) => z.scores.keys().map(|m| m.len() as u64 + 8).sum(),
                    }
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, Ordering};

    fn b(s: &str) -> Bytes {
        s.as_bytes().to_vec()
    }

    fn ks() -> (MemoryKeyspace, Arc<AtomicI64>) {
        let t = Arc::new(AtomicI64::new(1_000));
        let c = t.clone();
        (
            MemoryKeyspace::with_clock(Box::new(move || c.load(Ordering::Relaxed))),
            t,
        )
    }

    fn write(k: &MemoryKeyspace, effects: Vec<Effect>) -> ModelResult<()> {
        k.transact(Scope::All, true, &mut |t| t.apply(effects.clone()))
    }

    #[test]
    fn lists_push_pop_and_vanish_when_empty() {
        let (k, _) = ks();
        write(
            &k,
            vec![Effect::LPush {
                db: 0,
                key: b("l"),
                left: true,
                elems: vec![b("a"), b("b")],
            }],
        )
        .unwrap();
        k.transact(Scope::All, false, &mut |t| {
            assert_eq!(t.list_range(0, b"l", 0, 10), vec![b("b"), b("a")]);
            Ok(())
        })
        .unwrap();
        write(
            &k,
            vec![Effect::LPop {
                db: 0,
                key: b("l"),
                left: false,
                count: 5,
            }],
        )
        .unwrap();
        assert!(k.dump().is_empty());
    }

    #[test]
    fn a_bad_effect_in_a_list_changes_nothing() {
        let (k, _) = ks();
        let r = write(
            &k,
            vec![
                Effect::SAdd {
                    db: 0,
                    key: b("s"),
                    members: vec![b("m")],
                },
                Effect::LSet {
                    db: 0,
                    key: b("nolist"),
                    index: 0,
                    elem: b("x"),
                },
            ],
        );
        assert!(matches!(r, Err(ModelError::Invalid(_))));
        assert!(k.dump().is_empty());
    }

    #[test]
    fn expired_keys_are_absent_and_rewritten_from_nothing() {
        let (k, t) = ks();
        write(
            &k,
            vec![Effect::Put {
                db: 0,
                key: b("s"),
                value: Value::Set(vec![b("x")]),
                expire_at_ms: 1_500,
            }],
        )
        .unwrap();
        t.store(2_000, Ordering::Relaxed);
        write(
            &k,
            vec![Effect::SAdd {
                db: 0,
                key: b("s"),
                members: vec![b("y")],
            }],
        )
        .unwrap();
        assert_eq!(k.dump(), vec![(0, b("s"), Value::Set(vec![b("y")]), 0)]);
    }

    #[test]
    fn an_hset_without_pairs_leaves_no_empty_hash() {
        let (k, _) = ks();
        write(
            &k,
            vec![Effect::HSet {
                db: 0,
                key: b("h"),
                pairs: Vec::new(),
            }],
        )
        .unwrap();
        assert!(k.dump().is_empty());
    }

    #[test]
    fn zset_ranks_by_score_and_lex() {
        let (k, _) = ks();
        write(
            &k,
            vec![Effect::ZAdd {
                db: 0,
                key: b("z"),
                members: vec![(1.0, b("a")), (2.0, b("b")), (2.0, b("c")), (3.0, b("d"))],
            }],
        )
        .unwrap();
        k.transact(Scope::All, false, &mut |t| {
            let sb = |score, exclusive| ScoreBound { score, exclusive };
            assert_eq!(t.zset_rank_of_score(0, b"z", sb(2.0, false)), 1);
            assert_eq!(t.zset_rank_of_score(0, b"z", sb(2.0, true)), 3);
            assert_eq!(t.zset_rank_above(0, b"z", sb(2.0, false)), 3);
            assert_eq!(t.zset_rank_above(0, b"z", sb(2.0, true)), 1);
            assert_eq!(t.zset_rank(0, b"z", b"c"), Some(2));
            assert_eq!(t.zset_rank_of_lex(0, b"z", &LexBound::Inclusive(b("b"))), 1);
            assert_eq!(t.zset_rank_above_lex(0, b"z", &LexBound::Max), 4);
            Ok(())
        })
        .unwrap();
    }
}
