//! The check of a `Txn::apply` call before anything of it is applied: each effect against the
//! state the earlier effects of the call leave (kinds, list indices and lengths, sizes), on a
//! sketch of the keyspace that reads the stored state and records only what the call changed.

use std::collections::HashMap;

use super::{StoreTxn, ZSET_LEN_MAX, key_limit};
use crate::machine::effects;
use crate::machine::list::LIST_LEN_MAX;
use crate::machine::{TYPE_HASH, TYPE_LIST, TYPE_OBJECT, TYPE_SET, TYPE_STRING, TYPE_ZSET};
use crate::table::{self, Found};
use model::{Bytes, DATABASES, Db, Effect, ModelError, ModelResult, Value};
use pmem::Medium;

/// What a validation pass knows of a key after the effects checked so far.
#[derive(Debug, Clone, Default)]
pub(super) struct KeyState {
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
pub(super) struct Sim {
    base: [Option<Db>; DATABASES],
    over: Vec<HashMap<Bytes, KeyState>>,
}

impl Sim {
    pub(super) fn new() -> Sim {
        Sim {
            base: std::array::from_fn(|d| Some(d as Db)),
            over: vec![HashMap::new(); DATABASES],
        }
    }
}

impl<M: Medium + Clone + Send + Sync + 'static> StoreTxn<'_, '_, M> {
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

    /// The checks every lone effect starts with, in the general check's order: the database
    /// exists, the key's shard is locked, the key is within the size limit. Returns that limit.
    fn check_lone_key(&self, db: Db, key: &[u8]) -> ModelResult<usize> {
        let limit = key_limit(self.store);
        if db as usize >= DATABASES {
            return Err(ModelError::Invalid(format!("database {db}")));
        }
        if self.arenas.index(self.kv().shard_of(key)).is_none() {
            return Err(ModelError::Invalid(
                "an effect on a key the transaction did not lock".into(),
            ));
        }
        if key.len() > limit {
            return Err(ModelError::TooLarge(format!(
                "a key of {} bytes is larger than the limit of {limit} bytes",
                key.len()
            )));
        }
        Ok(limit)
    }

    /// The check of an `apply` call that is one string `Put` (a SET): what [`Self::check`]
    /// would find, without building the pass's state (a Put replaces any value; only a DStore
    /// object refuses it). Same errors as the general check.
    /// Returns whether the key holds a live string at least as long as `value` (the put then
    /// takes no more room than it frees), from the same lookup, and what that lookup found
    /// (expired or not: [`effects::put_found`] takes it).
    pub(super) fn check_lone_put(
        &self,
        db: Db,
        key: &[u8],
        value: &[u8],
    ) -> ModelResult<(bool, Option<Found>)> {
        let limit = self.check_lone_key(db, key)?;
        if value.len() > limit {
            return Err(ModelError::TooLarge(format!(
                "a value of {} bytes is larger than the limit of {limit} bytes",
                value.len()
            )));
        }
        let found = self.found(db, key);
        let old = found.and_then(|(a, f)| {
            (!effects::is_expired(a, f.entry, self.now))
                .then(|| (effects::type_tag(a, f.entry), f.entry.vlen(a)))
        });
        if old.is_some_and(|(ty, _)| ty == TYPE_OBJECT) {
            return Err(ModelError::Invalid(
                "the key holds a DStore object, not a value of the data model".into(),
            ));
        }
        let in_place = old.is_some_and(|(ty, len)| ty == TYPE_STRING && len >= value.len());
        Ok((in_place, found.map(|(_, f)| f)))
    }

    /// The check of an `apply` call that is one `HSet` (HSET, HMSET): what [`Self::check`]
    /// would find, without building the pass's state (no copy of the key or the fields, no
    /// lookup of each field: an HSet only adds or replaces fields, and a hash has no size
    /// limit beyond each field's and value's). Same errors, in the same order, as the general
    /// check.
    pub(super) fn check_lone_hset(
        &self,
        db: Db,
        key: &[u8],
        pairs: &[(Bytes, Bytes)],
    ) -> ModelResult<()> {
        let limit = self.check_lone_key(db, key)?;
        if let Some(big) = pairs
            .iter()
            .flat_map(|(f, v)| [f, v])
            .find(|x| x.len() > limit)
        {
            return Err(ModelError::TooLarge(format!(
                "a value of {} bytes is larger than the limit of {limit} bytes",
                big.len()
            )));
        }
        match self.live(db, key).map(|(a, e)| effects::type_tag(a, e)) {
            None | Some(TYPE_HASH) => Ok(()),
            Some(TYPE_OBJECT) => Err(ModelError::Invalid(
                "the key holds a DStore object, not a value of the data model".into(),
            )),
            Some(have) => Err(ModelError::Invalid(format!(
                "an effect for type {TYPE_HASH} on a key of type {have}"
            ))),
        }
    }

    /// Check one effect against the pass's state and move the state past it.
    pub(super) fn check(&self, sim: &mut Sim, e: &Effect) -> ModelResult<()> {
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
}
