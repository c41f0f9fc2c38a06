//! The read side of a transaction: every `View` method, on the arenas it locked. A key past its
//! deadline, or of another kind than the method reads, is absent; DStore objects are absent.

use super::StoreTxn;
use crate::machine::effects::{self, zset};
use crate::machine::list;
use crate::machine::{TYPE_HASH, TYPE_SET, TYPE_STRING, TYPE_ZSET};
use crate::table;
use model::{Bytes, Db, Kind, LexBound, ScoreBound, Value, View};
use pmem::Medium;

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

    fn hash_each(&self, db: Db, key: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) -> u64 {
        let Some((a, t)) = self.nested(db, key, TYPE_HASH) else {
            return 0;
        };
        let mut n = 0;
        table::for_each(a, t, |e| {
            f(e.key(a), e.value(a));
            n += 1;
        });
        n
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

    fn db_len(&self, db: Db) -> Option<u64> {
        if !self.all || db as usize >= model::DATABASES {
            return None;
        }
        let n = self.arenas.ids().len();
        Some(
            (0..n)
                .map(|i| effects::db_count(self.arenas.get(i), db))
                .sum(),
        )
    }

    fn db_keys(&self, db: Db) -> Option<Vec<model::KeyInfo>> {
        if !self.all || db as usize >= model::DATABASES {
            return None;
        }
        let mut out = Vec::new();
        for i in 0..self.arenas.ids().len() {
            let a = self.arenas.get(i);
            let t = a.user(crate::machine::USER_KEYSPACE);
            let mut v = 0;
            loop {
                let mut found = Vec::new();
                v = table::scan_step(a, t, v, &mut found);
                for e in found {
                    if effects::db(a, e) == db
                        && !effects::is_expired(a, e, self.now)
                        && let Some(kind) = effects::kind_of(effects::type_tag(a, e))
                    {
                        out.push(model::KeyInfo {
                            key: e.key(a).to_vec(),
                            kind,
                            expire_at_ms: e.expire(a),
                        });
                    }
                }
                if v == 0 {
                    break;
                }
            }
        }
        Some(out)
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
