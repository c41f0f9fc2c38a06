//! The Redis data model that `kavach serve` offers, as a contract between the command layer and
//! the stores behind it.
//!
//! A command runs in two steps. It **reads** through a [`View`] of the keys it names (the store
//! holds their locks for the whole command), decides its reply, and **writes** by handing a list
//! of [`Effect`]s to [`Txn::apply`]. An effect names one key (or one database) and depends only
//! on that key's own state and its arguments, never on another key: `RENAME a b` is
//! `Del a` plus `Put b <a's whole value>`, computed by the command from what it read. That rule
//! is what lets a sharded store apply and replay the effects of one command shard by shard, and
//! lets a replica apply exactly what the primary did.
//!
//! A store applies effects in DRAM at once (a later read in the same [`Txn`] sees them, which is
//! what `MULTI`/`EXEC` needs), and makes all the effects of one `Txn` durable as one unit before
//! it releases the locks: after any crash, all of them or none.
//!
//! Rules every implementation keeps:
//! - A key past its deadline is absent to every [`View`] method (and a write to it starts from
//!   nothing).
//! - A collection left empty by an effect is deleted with its key (Redis never keeps empty
//!   lists, sets, hashes or sorted sets).
//! - [`View`] methods on a key of another kind answer as if the key were absent; commands check
//!   [`View::kind`] first and reply `WRONGTYPE`.
//! - Sorted sets order by `(score, member bytes)`; scores are never NaN.
//!
//! `docs/format/effects.md` documents the encoding of [`Effect`] lists ([`encode_effects`],
//! [`decode_effects`]), which DStore's operation log and the replication log both carry.

#![deny(unsafe_code)]

mod effect;
mod memory;

pub use effect::{
    decode_effects, decode_from as decode_effects_from, encode_effects, lone_string_put,
    tags as effect_tags,
};
pub use memory::MemoryKeyspace;

/// An owned byte string.
pub type Bytes = Vec<u8>;

/// A database number (`SELECT`), `0..DATABASES`.
pub type Db = u8;

/// Databases a store keeps, as Redis's default `databases 16`.
pub const DATABASES: usize = 16;

/// The kind of a key's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A byte string.
    String,
    /// Field -> value.
    Hash,
    /// A sequence of elements.
    List,
    /// Distinct members.
    Set,
    /// Distinct members ordered by score.
    ZSet,
}

impl Kind {
    /// The name `TYPE` replies with.
    pub fn name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Hash => "hash",
            Kind::List => "list",
            Kind::Set => "set",
            Kind::ZSet => "zset",
        }
    }

    /// The tag of this kind in encodings (`docs/format/effects.md`).
    pub fn tag(self) -> u8 {
        match self {
            Kind::String => 1,
            Kind::Hash => 2,
            Kind::List => 5,
            Kind::Set => 6,
            Kind::ZSet => 3,
        }
    }

    /// The kind with tag `t`.
    pub fn from_tag(t: u8) -> Option<Kind> {
        Some(match t {
            1 => Kind::String,
            2 => Kind::Hash,
            5 => Kind::List,
            6 => Kind::Set,
            3 => Kind::ZSet,
            _ => return None,
        })
    }
}

/// A whole value, owned (for `RENAME`, `COPY`, `MOVE`, the `*STORE` commands).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string.
    String(Bytes),
    /// Field/value pairs, no field twice.
    Hash(Vec<(Bytes, Bytes)>),
    /// Elements, head first.
    List(Vec<Bytes>),
    /// Members, no member twice.
    Set(Vec<Bytes>),
    /// `(score, member)` pairs, no member twice, scores not NaN.
    ZSet(Vec<(f64, Bytes)>),
}

impl Value {
    /// Its kind.
    pub fn kind(&self) -> Kind {
        match self {
            Value::String(_) => Kind::String,
            Value::Hash(_) => Kind::Hash,
            Value::List(_) => Kind::List,
            Value::Set(_) => Kind::Set,
            Value::ZSet(_) => Kind::ZSet,
        }
    }

    /// Whether it is an empty collection (never stored).
    pub fn is_empty_collection(&self) -> bool {
        match self {
            Value::String(_) => false,
            Value::Hash(v) => v.is_empty(),
            Value::List(v) => v.is_empty(),
            Value::Set(v) => v.is_empty(),
            Value::ZSet(v) => v.is_empty(),
        }
    }
}

/// One change to the keyspace. Each names one key (or one or two databases) and its outcome
/// depends only on that key's state and the effect's arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Remove a key (nothing if absent).
    Del {
        /// Database.
        db: Db,
        /// Key.
        key: Bytes,
    },
    /// Replace whatever `key` holds with `value` and the deadline `expire_at_ms` (0: none). An
    /// empty collection deletes the key.
    Put {
        /// Database.
        db: Db,
        /// Key.
        key: Bytes,
        /// The new value.
        value: Value,
        /// Deadline in ms since the Unix epoch; 0 for none.
        expire_at_ms: i64,
    },
    /// Set or clear the deadline of an existing key (0: persist). Nothing if absent.
    Expire {
        /// Database.
        db: Db,
        /// Key.
        key: Bytes,
        /// Deadline in ms since the Unix epoch; 0 for none.
        at_ms: i64,
    },
    /// Set fields of a hash (created if absent).
    HSet {
        /// Database.
        db: Db,
        /// Key.
        key: Bytes,
        /// Field/value pairs; a later pair for the same field wins.
        pairs: Vec<(Bytes, Bytes)>,
    },
    /// Remove fields of a hash.
    HDel {
        /// Database.
        db: Db,
        /// Key.
        key: Bytes,
        /// Fields.
        fields: Vec<Bytes>,
    },
    /// Push elements at the head (`left`) or tail of a list (created if absent), one at a time
    /// in order (so `LPUSH k a b` leaves `b a`).
    LPush {
        /// Database.
        db: Db,
        /// Key.
        key: Bytes,
        /// Head (true) or tail.
        left: bool,
        /// Elements.
        elems: Vec<Bytes>,
    },
    /// Remove `count` elements from the head (`left`) or tail (fewer if the list is shorter).
    LPop {
        /// Database.
        db: Db,
        /// Key.
        key: Bytes,
        /// Head (true) or tail.
        left: bool,
        /// How many.
        count: u64,
    },
    /// Replace the element at `index` (0-based from the head; must exist).
    LSet {
        /// Database.
        db: Db,
        /// Key.
        key: Bytes,
        /// Index.
        index: u64,
        /// New element.
        elem: Bytes,
    },
    /// Insert an element so that it ends up at `index` (0..=len).
    LInsert {
        /// Database.
        db: Db,
        /// Key.
        key: Bytes,
        /// Index.
        index: u64,
        /// Element.
        elem: Bytes,
    },
    /// Remove the elements at these indices (ascending, distinct, each < len).
    LRemAt {
        /// Database.
        db: Db,
        /// Key.
        key: Bytes,
        /// Indices.
        indices: Vec<u64>,
    },
    /// Keep only elements `start..end` (end exclusive, clamped to the length).
    LTrim {
        /// Database.
        db: Db,
        /// Key.
        key: Bytes,
        /// First kept index.
        start: u64,
        /// One past the last kept index.
        end: u64,
    },
    /// Add members to a set (created if absent).
    SAdd {
        /// Database.
        db: Db,
        /// Key.
        key: Bytes,
        /// Members.
        members: Vec<Bytes>,
    },
    /// Remove members from a set.
    SRem {
        /// Database.
        db: Db,
        /// Key.
        key: Bytes,
        /// Members.
        members: Vec<Bytes>,
    },
    /// Add members to a sorted set or set their scores (created if absent).
    ZAdd {
        /// Database.
        db: Db,
        /// Key.
        key: Bytes,
        /// `(score, member)`; scores are not NaN.
        members: Vec<(f64, Bytes)>,
    },
    /// Remove members from a sorted set.
    ZRem {
        /// Database.
        db: Db,
        /// Key.
        key: Bytes,
        /// Members.
        members: Vec<Bytes>,
    },
    /// Remove every key of one database.
    FlushDb {
        /// Database.
        db: Db,
    },
    /// Remove every key of every database.
    FlushAll,
    /// Exchange the contents of two databases.
    SwapDb {
        /// One.
        a: Db,
        /// The other.
        b: Db,
    },
}

impl Effect {
    /// The `(db, key)` it changes, if it names one key.
    pub fn key(&self) -> Option<(Db, &[u8])> {
        match self {
            Effect::Del { db, key }
            | Effect::Put { db, key, .. }
            | Effect::Expire { db, key, .. }
            | Effect::HSet { db, key, .. }
            | Effect::HDel { db, key, .. }
            | Effect::LPush { db, key, .. }
            | Effect::LPop { db, key, .. }
            | Effect::LSet { db, key, .. }
            | Effect::LInsert { db, key, .. }
            | Effect::LRemAt { db, key, .. }
            | Effect::LTrim { db, key, .. }
            | Effect::SAdd { db, key, .. }
            | Effect::SRem { db, key, .. }
            | Effect::ZAdd { db, key, .. }
            | Effect::ZRem { db, key, .. } => Some((*db, key)),
            Effect::FlushDb { .. } | Effect::FlushAll | Effect::SwapDb { .. } => None,
        }
    }

    /// Whether it may need more space (writes that only remove or shorten return false, so a
    /// full store still runs them).
    pub fn grows(&self) -> bool {
        !matches!(
            self,
            Effect::Del { .. }
                | Effect::Expire { .. }
                | Effect::HDel { .. }
                | Effect::LPop { .. }
                | Effect::LRemAt { .. }
                | Effect::LTrim { .. }
                | Effect::SRem { .. }
                | Effect::ZRem { .. }
                | Effect::FlushDb { .. }
                | Effect::FlushAll
                | Effect::SwapDb { .. }
        )
    }
}

/// Why a store refused or failed a transaction.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// The store has no room for a write (Redis `OOM`); nothing of that `apply` happened.
    #[error("OOM {0}")]
    OutOfSpace(String),
    /// A key or value over the store's size limit; nothing of that `apply` happened.
    #[error("ERR {0}")]
    TooLarge(String),
    /// A write in a read-only transaction, or to a server that only serves reads.
    #[error("READONLY {0}")]
    ReadOnly(String),
    /// An effect that breaks its own preconditions (an index out of range): a bug in the
    /// command layer; nothing of that `apply` happened.
    #[error("ERR internal: {0}")]
    Invalid(String),
    /// The store failed and refuses everything until reopened.
    #[error("ERR store failed: {0}")]
    Failed(String),
}

/// Result of a model call.
pub type ModelResult<T> = Result<T, ModelError>;

/// One end of a score range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreBound {
    /// The score; may be infinite.
    pub score: f64,
    /// The bound itself is excluded (`(` prefix).
    pub exclusive: bool,
}

/// One end of a lexicographic range (`ZRANGEBYLEX`).
#[derive(Debug, Clone, PartialEq)]
pub enum LexBound {
    /// `-`: below everything.
    Min,
    /// `+`: above everything.
    Max,
    /// `[member`: the member itself included.
    Inclusive(Bytes),
    /// `(member`: the member itself excluded.
    Exclusive(Bytes),
}

/// Read access to the keys a transaction locked. Every method treats an expired key as absent
/// and a key of another kind as absent (check [`View::kind`] first).
pub trait View {
    /// The clock reading this transaction runs at (ms since the Unix epoch): expiry decisions
    /// and logged deadlines use it.
    fn now_ms(&self) -> i64;
    /// The kind of a live key.
    fn kind(&self, db: Db, key: &[u8]) -> Option<Kind>;
    /// The deadline of a live key (ms since the epoch); `None` if absent or persistent.
    fn expire_at(&self, db: Db, key: &[u8]) -> Option<i64>;
    /// The whole value of a live key.
    fn value(&self, db: Db, key: &[u8]) -> Option<Value>;
    /// A string's bytes.
    fn string(&self, db: Db, key: &[u8]) -> Option<Bytes>;
    /// A string's length (0 if absent).
    fn string_len(&self, db: Db, key: &[u8]) -> u64;
    /// One field of a hash.
    fn hash_get(&self, db: Db, key: &[u8], field: &[u8]) -> Option<Bytes>;
    /// Number of fields (0 if absent).
    fn hash_len(&self, db: Db, key: &[u8]) -> u64;
    /// Every field and value, in the store's order (stable while the hash does not change).
    fn hash_all(&self, db: Db, key: &[u8]) -> Vec<(Bytes, Bytes)>;
    /// Calls `f` with every field and value, in [`View::hash_all`]'s order, and returns how
    /// many there were. A store that holds the bytes lends them instead of copying (HGETALL
    /// writes its reply straight from them); the default goes through `hash_all`.
    fn hash_each(&self, db: Db, key: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) -> u64 {
        let all = self.hash_all(db, key);
        for (field, value) in &all {
            f(field, value);
        }
        all.len() as u64
    }
    /// Number of elements (0 if absent).
    fn list_len(&self, db: Db, key: &[u8]) -> u64;
    /// Elements `start..end` (end exclusive, clamped to the length), head first.
    fn list_range(&self, db: Db, key: &[u8], start: u64, end: u64) -> Vec<Bytes>;
    /// Number of members (0 if absent).
    fn set_len(&self, db: Db, key: &[u8]) -> u64;
    /// Whether `member` is in the set.
    fn set_contains(&self, db: Db, key: &[u8], member: &[u8]) -> bool;
    /// Every member, in the store's order (stable while the set does not change).
    fn set_members(&self, db: Db, key: &[u8]) -> Vec<Bytes>;
    /// Number of members (0 if absent).
    fn zset_len(&self, db: Db, key: &[u8]) -> u64;
    /// A member's score.
    fn zset_score(&self, db: Db, key: &[u8], member: &[u8]) -> Option<f64>;
    /// A member's 0-based rank in ascending `(score, member)` order.
    fn zset_rank(&self, db: Db, key: &[u8], member: &[u8]) -> Option<u64>;
    /// Members at ranks `start..end` (end exclusive, clamped), ascending.
    fn zset_range(&self, db: Db, key: &[u8], start: u64, end: u64) -> Vec<(Bytes, f64)>;
    /// How many members lie below `bound`: with score < bound.score, or <= when the bound is
    /// exclusive (so it is the rank of the first member inside a range starting at `bound`).
    /// For the upper end of a range, `zset_rank_above(max)`.
    fn zset_rank_of_score(&self, db: Db, key: &[u8], bound: ScoreBound) -> u64;
    /// How many members lie at or below `bound` as an upper end (score <= bound.score, or <
    /// when exclusive): the end (exclusive) of a range ending at `bound`.
    fn zset_rank_above(&self, db: Db, key: &[u8], bound: ScoreBound) -> u64;
    /// Like [`View::zset_rank_of_score`] by member bytes, for sorted sets whose members all have
    /// one score (Redis's rule for the BYLEX commands): members before the lower end `bound`.
    fn zset_rank_of_lex(&self, db: Db, key: &[u8], bound: &LexBound) -> u64;
    /// Members at or before the upper end `bound` by member bytes.
    fn zset_rank_above_lex(&self, db: Db, key: &[u8], bound: &LexBound) -> u64;
    /// Number of keys in `db` (as [`Keyspace::dbsize`]), for a transaction that holds the whole
    /// keyspace (`Scope::All`, as EXEC does, where calling the [`Keyspace`] would wait for the
    /// transaction's own locks). `None` from a transaction over some keys only.
    fn db_len(&self, db: Db) -> Option<u64> {
        let _ = db;
        None
    }
    /// Every live key of `db`, under the same condition as [`View::db_len`].
    fn db_keys(&self, db: Db) -> Option<Vec<KeyInfo>> {
        let _ = db;
        None
    }
}

/// Implements [`View`] for a wrapper type by forwarding every method to one of its fields (a
/// `&mut dyn Txn` or anything else that is a `View`), for transactions that wrap another to
/// observe its writes: `model::forward_view!(Recorder<'_>, inner);`.
#[macro_export]
macro_rules! forward_view {
    ($ty:ty, $field:ident) => {
        $crate::forward_view!(@impl $ty, $field,
            now_ms() -> i64;
            kind(db: $crate::Db, key: &[u8]) -> Option<$crate::Kind>;
            expire_at(db: $crate::Db, key: &[u8]) -> Option<i64>;
            value(db: $crate::Db, key: &[u8]) -> Option<$crate::Value>;
            string(db: $crate::Db, key: &[u8]) -> Option<$crate::Bytes>;
            string_len(db: $crate::Db, key: &[u8]) -> u64;
            hash_get(db: $crate::Db, key: &[u8], field: &[u8]) -> Option<$crate::Bytes>;
            hash_len(db: $crate::Db, key: &[u8]) -> u64;
            hash_all(db: $crate::Db, key: &[u8]) -> Vec<($crate::Bytes, $crate::Bytes)>;
            hash_each(db: $crate::Db, key: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) -> u64;
            list_len(db: $crate::Db, key: &[u8]) -> u64;
            list_range(db: $crate::Db, key: &[u8], start: u64, end: u64) -> Vec<$crate::Bytes>;
            set_len(db: $crate::Db, key: &[u8]) -> u64;
            set_contains(db: $crate::Db, key: &[u8], member: &[u8]) -> bool;
            set_members(db: $crate::Db, key: &[u8]) -> Vec<$crate::Bytes>;
            zset_len(db: $crate::Db, key: &[u8]) -> u64;
            zset_score(db: $crate::Db, key: &[u8], member: &[u8]) -> Option<f64>;
            zset_rank(db: $crate::Db, key: &[u8], member: &[u8]) -> Option<u64>;
            zset_range(db: $crate::Db, key: &[u8], start: u64, end: u64)
                -> Vec<($crate::Bytes, f64)>;
            zset_rank_of_score(db: $crate::Db, key: &[u8], bound: $crate::ScoreBound) -> u64;
            zset_rank_above(db: $crate::Db, key: &[u8], bound: $crate::ScoreBound) -> u64;
            zset_rank_of_lex(db: $crate::Db, key: &[u8], bound: &$crate::LexBound) -> u64;
            zset_rank_above_lex(db: $crate::Db, key: &[u8], bound: &$crate::LexBound) -> u64;
            db_len(db: $crate::Db) -> Option<u64>;
            db_keys(db: $crate::Db) -> Option<Vec<$crate::KeyInfo>>;
        );
    };
    (@impl $ty:ty, $field:ident, $($name:ident($($arg:ident: $argty:ty),*) -> $ret:ty;)*) => {
        impl $crate::View for $ty {
            $(fn $name(&self, $($arg: $argty),*) -> $ret {
                self.$field.$name($($arg),*)
            })*
        }
    };
}

/// A transaction: a [`View`] plus writes. Effects apply at once (later reads see them) and
/// become durable together when the transaction ends.
pub trait Txn: View {
    /// Apply effects in order. All of them or none of them take effect in this call: on an
    /// error nothing of this call changed.
    fn apply(&mut self, effects: Vec<Effect>) -> ModelResult<()>;
}

/// Which keys a transaction locks.
#[derive(Debug, Clone, Copy)]
pub enum Scope<'a> {
    /// These keys (a key may repeat).
    Keys(&'a [(Db, &'a [u8])]),
    /// The whole keyspace (FLUSHDB, SWAPDB, MULTI with keyless commands).
    All,
}

/// What a keyspace-wide read sees of one key (SCAN, KEYS, RANDOMKEY).
#[derive(Debug, Clone, PartialEq)]
pub struct KeyInfo {
    /// Key.
    pub key: Bytes,
    /// Its kind.
    pub kind: Kind,
    /// Deadline, 0 for none.
    pub expire_at_ms: i64,
}

/// A store of the data model: what the command layer needs of it.
pub trait Keyspace: Send + Sync + 'static {
    /// Run `body` with the keys of `scope` locked: for reading only when `write` is false (then
    /// [`Txn::apply`] fails with [`ModelError::ReadOnly`]), else for writing. Every effect
    /// applied in `body` is durable, as one unit, before this returns, also when `body`
    /// returns an error after some of them.
    fn transact(
        &self,
        scope: Scope<'_>,
        write: bool,
        body: &mut dyn FnMut(&mut dyn Txn) -> ModelResult<()>,
    ) -> ModelResult<()>;
    /// One step of a scan of database `db` from `cursor` (0 starts), visiting about `count`
    /// keys: the next cursor (0 when done) and the live keys seen. Every key present for the
    /// whole scan is returned at least once.
    fn scan(&self, db: Db, cursor: u64, count: usize) -> ModelResult<(u64, Vec<KeyInfo>)>;
    /// Number of live keys in `db` (keys past their deadline but not yet removed may count).
    fn dbsize(&self, db: Db) -> ModelResult<u64>;
    /// A live key of `db` chosen at random (`None` if it is empty).
    fn random_key(&self, db: Db) -> ModelResult<Option<Bytes>>;
    /// Keys past their deadline, up to `limit`, from a cursor that walks the whole keyspace over
    /// successive calls (active expiry): `(next cursor, (db, key) pairs)`.
    fn expired(&self, cursor: u64, limit: usize) -> ModelResult<(u64, Vec<(Db, Bytes)>)>;
    /// Bytes of memory the data takes (INFO `used_memory`, `--maxmemory`).
    fn used_bytes(&self) -> u64;
    /// Live keys with a deadline in each database (INFO keyspace's `expires`), counted over at
    /// most about `max_keys` keys in all before stopping. The default walks [`Keyspace::scan`]
    /// database by database; a store can count every database in one walk without copying
    /// its keys.
    fn expiring(&self, max_keys: usize) -> ModelResult<[u64; DATABASES]> {
        let mut expires = [0u64; DATABASES];
        let mut seen = 0usize;
        for (db, count) in expires.iter_mut().enumerate() {
            let db = db as Db;
            if seen >= max_keys || self.dbsize(db)? == 0 {
                continue;
            }
            let mut cursor = 0u64;
            loop {
                let (next, infos) = self.scan(db, cursor, 1000)?;
                seen += infos.len();
                *count += infos.iter().filter(|k| k.expire_at_ms != 0).count() as u64;
                cursor = next;
                if cursor == 0 || seen >= max_keys {
                    break;
                }
            }
        }
        Ok(expires)
    }
}
