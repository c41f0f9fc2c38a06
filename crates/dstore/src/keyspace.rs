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

use std::sync::atomic::{AtomicU64, Ordering};

use crate::machine::effects::{self, zset};
use crate::machine::{Kv, TYPE_LIST, TYPE_ZSET};
use crate::op;
use crate::store::Store;
use crate::table::{self, Entry, Found};
use dipper::{Arena, DipperError, Locked};
use model::{Bytes, DATABASES, Db, Effect, KeyInfo, Keyspace, ModelError, ModelResult, Scope, Txn};
use pmem::Medium;

mod check;
mod view;

use check::Sim;

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

    /// A key, live or past its deadline, and its arena: what [`effects::find`] gives.
    fn found(&self, db: Db, key: &[u8]) -> Option<(&Arena, Found)> {
        if db as usize >= DATABASES {
            return None;
        }
        let a = self.arena_of(key)?;
        let f = effects::find(self.kv(), a, db, key)?;
        Some((a, f))
    }

    /// A live key and its arena.
    fn live(&self, db: Db, key: &[u8]) -> Option<(&Arena, Entry)> {
        let (a, f) = self.found(db, key)?;
        (!effects::is_expired(a, f.entry, self.now)).then_some((a, f.entry))
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

    /// The record of everything applied (`None` if nothing was).
    fn record(&mut self) -> Option<(Option<Vec<u16>>, Vec<u8>)> {
        if self.count == 0 {
            return None;
        }
        let bytes = op::effects_record(self.now, self.count, &self.encoded);
        let shards = self.kv().shards;
        let mut touched = std::mem::take(&mut self.touched);
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
        // 1. Check every effect against the state the earlier ones leave (a lone string Put,
        // the common SET, or a lone HSet has nothing before it and needs only its own checks).
        // 2. Room: in the DRAM state and in one log record. A lone string Put that replaces a
        // string at least as long takes no more room than it frees (a full store still
        // rewrites fixed-size values, such as a replicated node's applied mark); its check
        // says so from the same lookup.
        let mut lone_put = None;
        let in_place = if let [
            Effect::Put {
                db,
                key,
                value: model::Value::String(s),
                ..
            },
        ] = effects.as_slice()
        {
            let (in_place, found) = self.check_lone_put(*db, key, s)?;
            lone_put = Some(found);
            in_place
        } else if let [Effect::HSet { db, key, pairs }] = effects.as_slice() {
            // A lone HSet (YCSB's insert and update) likewise.
            self.check_lone_hset(*db, key, pairs)?;
            false
        } else {
            let mut sim = Sim::new();
            for e in &effects {
                self.check(&mut sim, e)?;
            }
            false
        };
        let Arenas::Write(locked) = &mut self.arenas else {
            unreachable!("checked above");
        };
        if !in_place
            && effects.iter().any(Effect::grows)
            && let Some(why) = locked.growth_refusal()
        {
            return Err(ModelError::OutOfSpace(why));
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
            // The locked shard of a keyed effect, or every locked shard.
            let targets = match e.key() {
                Some((_, key)) => {
                    let s = kv.shard_of(key);
                    self.touched.push(s);
                    let i = locked.ids().binary_search(&s).expect("checked: locked");
                    i..i + 1
                }
                None => {
                    self.global = true;
                    0..locked.ids().len()
                }
            };
            for i in targets {
                let a = locked.arena_mut(i);
                let applied = match (e, lone_put) {
                    // A lone string Put: the check's lookup, nothing changed since, is the
                    // apply's.
                    (
                        Effect::Put {
                            db,
                            key,
                            value,
                            expire_at_ms,
                        },
                        Some(found),
                    ) => effects::put_found(&kv, a, *db, key, value, *expire_at_ms, found),
                    _ => effects::apply(&kv, a, e, self.now, &mut self.freed),
                };
                if let Err(err) = applied {
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
        use std::sync::atomic::Ordering::SeqCst;
        let writes = self.kv().deadline_writes.load(SeqCst);
        let mut pass = self.expiry.lock().unwrap_or_else(|e| e.into_inner());
        if cursor == 0 {
            if pass.idle_at == Some(writes) {
                pass.passes_skipped += 1;
                return Ok((0, Vec::new()));
            }
            pass.writes_at_start = writes;
            pass.whole = true;
            pass.saw_deadline = false;
        } else if cursor != pass.next {
            pass.whole = false;
        }
        let now = self.now();
        let want = limit.max(1);
        let mut out = Vec::new();
        let found = std::cell::Cell::new(0usize);
        let saw = std::cell::Cell::new(false);
        let buckets = std::cell::Cell::new(0u64);
        let next = self.walk(
            cursor,
            want.saturating_mul(16),
            |a, bucket, first| {
                buckets.set(buckets.get() + 1);
                if bucket.iter().any(|e| e.expire(a) != 0) {
                    saw.set(true);
                }
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
        pass.next = next;
        pass.buckets_walked += buckets.get();
        pass.saw_deadline |= saw.get();
        if next == 0
            && pass.whole
            && !pass.saw_deadline
            && self.kv().deadline_writes.load(SeqCst) == pass.writes_at_start
        {
            pass.idle_at = Some(pass.writes_at_start);
        }
        Ok((next, out))
    }

    fn used_bytes(&self) -> u64 {
        (0..self.engine().shards())
            .filter_map(|s| self.engine().read(s, Arena::live_bytes).ok())
            .sum()
    }

    /// One walk of each shard's table for every database, reading only the entries' database
    /// and deadline words: no key is copied (the scan the default goes through copies every key
    /// it returns, database by database).
    fn expiring(&self, max_keys: usize) -> ModelResult<[u64; model::DATABASES]> {
        let now = self.now();
        let mut expires = [0u64; model::DATABASES];
        let mut seen = 0usize;
        for s in 0..self.engine().shards() {
            if seen >= max_keys {
                break;
            }
            seen += self
                .engine()
                .read(s, |a| {
                    let mut n = 0usize;
                    table::for_each(a, a.user(crate::machine::USER_KEYSPACE), |entry| {
                        // The entries the scan would return (live keys of a known type).
                        if !effects::is_expired(a, entry, now)
                            && effects::kind_of(effects::type_tag(a, entry)).is_some()
                            && let Some(count) = expires.get_mut(effects::db(a, entry) as usize)
                        {
                            n += 1;
                            *count += u64::from(entry.expire(a) != 0);
                        }
                    });
                    n
                })
                .map_err(model_error)?;
        }
        Ok(expires)
    }
}
