//! What the server learns of each write, and what connections tell each other: the keys a
//! write touched (for WATCH and for clients blocked on a key, BLPOP and kin), and pub/sub
//! messages.
//!
//! Every connection has a [`Mailbox`]. Another thread (a publisher, a writer that pushes to a
//! list someone waits on, CLIENT UNBLOCK) puts something in it and rings it; ringing wakes the
//! worker that owns the connection, which then delivers the messages or re-runs the blocked
//! command. The [`Notifier`] is shared by every thread: it keeps the WATCH versions, the queues
//! of blocked clients per key (first come, first served) and the pub/sub subscriptions.
//!
//! Lock order: a [`Notifier`] lock, then a [`Mailbox`] lock, then whatever `ring` takes. The
//! notifier is called with the store's key locks held (from inside a transaction) and never
//! calls back into the store.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use model::{DATABASES, Db, Effect, View};

use crate::glob::glob_match;

/// Unsent pub/sub bytes a connection may have queued before it is closed (Redis's default hard
/// limit for pub/sub clients, `client-output-buffer-limit pubsub 32mb`).
pub(crate) const MAILBOX_BYTES_MAX: usize = 32 << 20;

/// What one effect wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Touch {
    /// One key.
    Key(Db, Vec<u8>),
    /// Every key of a database (FLUSHDB, one side of SWAPDB).
    Db(Db),
    /// Every key (FLUSHALL).
    All,
}

impl Touch {
    /// The touches of a list of effects.
    pub(crate) fn of(effects: &[Effect]) -> Vec<Touch> {
        effects
            .iter()
            .flat_map(|e| match e {
                Effect::FlushDb { db } => vec![Touch::Db(*db)],
                Effect::FlushAll => vec![Touch::All],
                Effect::SwapDb { a, b } => vec![Touch::Db(*a), Touch::Db(*b)],
                other => other
                    .key()
                    .map(|(db, k)| Touch::Key(db, k.to_vec()))
                    .into_iter()
                    .collect(),
            })
            .collect()
    }

    fn covers_db(&self, db: Db) -> bool {
        match self {
            Touch::Key(..) => false,
            Touch::Db(d) => *d == db,
            Touch::All => true,
        }
    }
}

/// A pub/sub message on its way to a subscriber.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Message {
    /// The pattern it matched (`pmessage`), or `None` for a channel subscription (`message`).
    pub(crate) pattern: Option<Arc<[u8]>>,
    /// The channel it was published to.
    pub(crate) channel: Arc<[u8]>,
    /// The payload.
    pub(crate) payload: Arc<[u8]>,
}

impl Message {
    fn bytes(&self) -> usize {
        self.pattern.as_ref().map_or(0, |p| p.len()) + self.channel.len() + self.payload.len() + 64
    }
}

/// How CLIENT UNBLOCK ends a blocked command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unblock {
    /// As if its timeout had passed.
    Timeout,
    /// With the error `-UNBLOCKED`.
    Error,
}

/// What a connection's owner finds in its mailbox.
#[derive(Debug, Default)]
pub(crate) struct Mail {
    /// Pub/sub messages, oldest first.
    pub(crate) messages: Vec<Message>,
    /// A key the connection is blocked on was written: run the command again.
    pub(crate) woken: bool,
    /// The connections whose writes woke this one: each waits (holds its reply) until this
    /// one has run its command again; see [`Mailbox::release`].
    pub(crate) woken_by: Vec<Arc<Mailbox>>,
    /// CLIENT UNBLOCK asked to end the blocked command.
    pub(crate) unblock: Option<Unblock>,
    /// More than [`MAILBOX_BYTES_MAX`] of messages piled up: close the connection.
    pub(crate) overflowed: bool,
}

#[derive(Debug, Default)]
struct MailboxState {
    mail: Mail,
    bytes: usize,
    /// Rung since the owner last took the mail (ringing again would only repeat the news).
    rung: bool,
}

/// One connection's inbox (see the [module documentation](self)).
pub(crate) struct Mailbox {
    /// The connection's CLIENT ID.
    pub(crate) client_id: u64,
    state: Mutex<MailboxState>,
    /// Blocked connections this one's writes woke that have not yet run their command again:
    /// while it is not zero the connection holds its replies (Redis serves blocked clients
    /// before the reply of the write that served them).
    pending: AtomicUsize,
    /// Something may wait in the mailbox: set by every post (under the lock), cleared by a take
    /// that leaves nothing behind. The owner looks at it before every request; without it,
    /// each look would take the lock.
    posted: AtomicBool,
    /// Wakes the connection's owner; called after something was put in the mailbox.
    ring: Box<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailbox")
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Mailbox {
    /// A mailbox for connection `client_id` whose owner `ring` wakes.
    pub(crate) fn new(client_id: u64, ring: Box<dyn Fn() + Send + Sync>) -> Arc<Mailbox> {
        Arc::new(Mailbox {
            client_id,
            state: Mutex::new(MailboxState::default()),
            pending: AtomicUsize::new(0),
            posted: AtomicBool::new(false),
            ring,
        })
    }

    /// Takes everything in the mailbox; the messages only if `messages` (a connection whose
    /// client does not read leaves them, so that they count against [`MAILBOX_BYTES_MAX`]).
    pub(crate) fn take(&self, messages: bool) -> Mail {
        // A post sets `posted` before it rings and the owner takes after the ring, so a post
        // missed here rings the owner again (its `rung` is still false: only a take resets it).
        if !self.posted.load(Ordering::Acquire) {
            return Mail::default();
        }
        let mut st = lock(&self.state);
        st.rung = false;
        let kept = if messages {
            st.bytes = 0;
            Vec::new()
        } else {
            std::mem::take(&mut st.mail.messages)
        };
        let mail = std::mem::take(&mut st.mail);
        self.posted.store(!kept.is_empty(), Ordering::Release);
        st.mail.messages = kept;
        mail
    }

    /// Whether something waits in the mailbox.
    #[cfg(test)]
    fn has_mail(&self) -> bool {
        let st = lock(&self.state);
        let m = &st.mail;
        !m.messages.is_empty() || m.woken || m.unblock.is_some() || m.overflowed
    }

    fn post(&self, f: impl FnOnce(&mut MailboxState)) {
        let ring = {
            let mut st = lock(&self.state);
            f(&mut st);
            self.posted.store(true, Ordering::Release);
            !std::mem::replace(&mut st.rung, true)
        };
        if ring {
            (self.ring)();
        }
    }

    fn deliver(&self, message: Message) {
        self.post(|st| {
            if st.mail.overflowed {
                return;
            }
            let n = message.bytes();
            if st.bytes + n > MAILBOX_BYTES_MAX {
                st.mail.overflowed = true;
                st.mail.messages.clear();
                st.bytes = 0;
            } else {
                st.bytes += n;
                st.mail.messages.push(message);
            }
        });
    }

    /// Wakes a parked connection; `by`, the connection whose write did it (if another), then
    /// waits for this one to run its command again.
    fn wake(&self, by: Option<&Arc<Mailbox>>) {
        let by = by.filter(|w| w.client_id != self.client_id);
        if let Some(w) = by {
            w.pending.fetch_add(1, Ordering::SeqCst);
        }
        self.post(|st| {
            st.mail.woken = true;
            if let Some(w) = by {
                st.mail.woken_by.push(Arc::clone(w));
            }
        });
    }

    /// One connection this one woke has run its command again (or gave up): when none is left,
    /// the owner is rung to send its held replies.
    pub(crate) fn release(&self) {
        let before = self
            .pending
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_sub(1))
            })
            .unwrap_or(0);
        if before == 1 {
            self.post(|_| {});
        }
    }

    /// Woken connections not yet done (see [`Mailbox::release`]).
    pub(crate) fn pending(&self) -> usize {
        self.pending.load(Ordering::SeqCst)
    }

    /// Stops waiting for the connections this one woke (they took too long).
    pub(crate) fn abandon_pending(&self) {
        self.pending.store(0, Ordering::SeqCst);
    }
}

/// A watched key's version (see [`Notifier::watch`]).
#[derive(Debug)]
struct WatchEntry {
    version: u64,
    watchers: usize,
}

/// Keys by database.
type KeyList = Vec<(Db, Vec<u8>)>;

/// The clients blocked on one key, first come first served.
type Waiters = VecDeque<Arc<Mailbox>>;

#[derive(Debug, Default)]
struct Keys {
    /// Watched keys per database.
    watched: Vec<HashMap<Vec<u8>, WatchEntry>>,
    /// Blocked clients per database and key.
    blocked: Vec<HashMap<Vec<u8>, Waiters>>,
    /// Every blocked client by id, with the keys it waits on.
    blocked_clients: HashMap<u64, (Arc<Mailbox>, KeyList)>,
}

#[derive(Debug, Default)]
struct PubSub {
    channels: HashMap<Vec<u8>, Vec<Arc<Mailbox>>>,
    /// Patterns in subscription order, each with its subscribers.
    patterns: Vec<(Vec<u8>, Vec<Arc<Mailbox>>)>,
}

/// Hears of every applied write and carries messages between connections (see the [module
/// documentation](self)).
#[derive(Debug)]
pub(crate) struct Notifier {
    keys: Mutex<Keys>,
    /// Watched keys plus blocked waiter queues: 0 lets writes skip the lock.
    interest: AtomicUsize,
    /// Source of watch versions (each bump takes a new one, so a version never repeats).
    clock: AtomicU64,
    pubsub: Mutex<PubSub>,
}

impl Default for Notifier {
    fn default() -> Self {
        Notifier {
            keys: Mutex::new(Keys {
                watched: (0..DATABASES).map(|_| HashMap::new()).collect(),
                blocked: (0..DATABASES).map(|_| HashMap::new()).collect(),
                blocked_clients: HashMap::new(),
            }),
            interest: AtomicUsize::new(0),
            clock: AtomicU64::new(1),
            pubsub: Mutex::new(PubSub::default()),
        }
    }
}

/// A key WATCH recorded: its version then, and whether it held a live value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Watched {
    pub(crate) db: Db,
    pub(crate) key: Vec<u8>,
    pub(crate) version: u64,
    pub(crate) live: bool,
}

impl Notifier {
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether any client watches a key or is blocked on one (else writes need not report).
    pub(crate) fn has_interest(&self) -> bool {
        self.interest.load(Ordering::SeqCst) != 0
    }

    /// Effects that wrote `touched` were applied (called with the written keys still locked):
    /// bumps the versions of watched keys and wakes the first client blocked on each key.
    /// Database-wide touches must already be expanded to the keys they affect
    /// ([`Notifier::expand`]).
    ///
    /// `by` is the connection that wrote: it will wait for the clients it wakes.
    pub(crate) fn touched(&self, touched: &[Touch], by: Option<&Arc<Mailbox>>) {
        if self.interest.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut keys = lock(&self.keys);
        for touch in touched {
            let Touch::Key(db, key) = touch else {
                continue;
            };
            let db = usize::from(*db);
            if let Some(entry) = keys.watched.get_mut(db).and_then(|m| m.get_mut(key)) {
                entry.version = self.tick();
            }
            if let Some(first) = keys
                .blocked
                .get(db)
                .and_then(|m| m.get(key))
                .and_then(|q| q.front())
            {
                first.wake(by);
            }
        }
    }

    /// Adds, for each database-wide touch in `touched`, the watched and blocked-on keys of the
    /// databases it covers that hold a live value in `view` (Redis touches only the watched keys
    /// a flush removes or a swap brings in). Called before and after applying the effects.
    pub(crate) fn expand(&self, touched: &mut Vec<Touch>, view: &dyn View) {
        if self.interest.load(Ordering::SeqCst) == 0
            || !touched.iter().any(|t| !matches!(t, Touch::Key(..)))
        {
            return;
        }
        let keys = lock(&self.keys);
        let mut extra = Vec::new();
        for db in 0..DATABASES {
            let dbn = db as Db;
            if !touched.iter().any(|t| t.covers_db(dbn)) {
                continue;
            }
            let watched = keys.watched[db].keys();
            let blocked = keys.blocked[db].keys();
            for key in watched.chain(blocked) {
                if view.kind(dbn, key).is_some() {
                    extra.push(Touch::Key(dbn, key.clone()));
                }
            }
        }
        drop(keys);
        touched.extend(extra);
    }

    /// WATCH: starts following `key`'s version; `live` says whether it holds a value now. Call
    /// with the key locked (so no write slips between the read and the version).
    pub(crate) fn watch(&self, db: Db, key: &[u8], live: bool) -> Watched {
        let mut keys = lock(&self.keys);
        let map = &mut keys.watched[usize::from(db) % DATABASES];
        let entry = match map.get_mut(key) {
            Some(e) => e,
            None => {
                self.interest.fetch_add(1, Ordering::SeqCst);
                map.entry(key.to_vec()).or_insert(WatchEntry {
                    version: self.tick(),
                    watchers: 0,
                })
            }
        };
        entry.watchers += 1;
        Watched {
            db,
            key: key.to_vec(),
            version: entry.version,
            live,
        }
    }

    /// Stops following the keys `watched` lists (UNWATCH, EXEC, DISCARD, a closed connection).
    pub(crate) fn unwatch(&self, watched: &[Watched]) {
        if watched.is_empty() {
            return;
        }
        let mut keys = lock(&self.keys);
        for w in watched {
            let map = &mut keys.watched[usize::from(w.db) % DATABASES];
            if let Some(entry) = map.get_mut(&w.key) {
                entry.watchers = entry.watchers.saturating_sub(1);
                if entry.watchers == 0 {
                    map.remove(&w.key);
                    self.interest.fetch_sub(1, Ordering::SeqCst);
                }
            }
        }
    }

    /// Whether a watched key was written since WATCH (its version moved).
    pub(crate) fn changed(&self, w: &Watched) -> bool {
        let keys = lock(&self.keys);
        keys.watched[usize::from(w.db) % DATABASES]
            .get(&w.key)
            .is_none_or(|e| e.version != w.version)
    }

    /// Parks `mailbox`'s connection on `keys` (at the back of each key's queue). A connection
    /// already parked keeps its places.
    pub(crate) fn block(&self, mailbox: &Arc<Mailbox>, keys_wanted: &[(Db, Vec<u8>)]) {
        let mut keys = lock(&self.keys);
        if keys.blocked_clients.contains_key(&mailbox.client_id) {
            return;
        }
        let mut mine: Vec<(Db, Vec<u8>)> = Vec::with_capacity(keys_wanted.len());
        for (db, key) in keys_wanted {
            if mine.iter().any(|(d, k)| d == db && k == key) {
                continue;
            }
            let queue = keys.blocked[usize::from(*db) % DATABASES]
                .entry(key.clone())
                .or_insert_with(|| {
                    self.interest.fetch_add(1, Ordering::SeqCst);
                    VecDeque::new()
                });
            queue.push_back(Arc::clone(mailbox));
            mine.push((*db, key.clone()));
        }
        keys.blocked_clients
            .insert(mailbox.client_id, (Arc::clone(mailbox), mine));
    }

    /// Takes a parked connection off its keys' queues and wakes the client now first on each
    /// (the wake this client got, or a write it missed, may be theirs to use). `by`: the
    /// connection that will wait for those it wakes (the one leaving, when it was served).
    pub(crate) fn unblock(&self, client_id: u64, by: Option<&Arc<Mailbox>>) {
        let mut keys = lock(&self.keys);
        let Some((_, mine)) = keys.blocked_clients.remove(&client_id) else {
            return;
        };
        for (db, key) in mine {
            let map = &mut keys.blocked[usize::from(db) % DATABASES];
            let Some(queue) = map.get_mut(&key) else {
                continue;
            };
            queue.retain(|m| m.client_id != client_id);
            match queue.front() {
                Some(next) => next.wake(by),
                None => {
                    map.remove(&key);
                    self.interest.fetch_sub(1, Ordering::SeqCst);
                }
            }
        }
    }

    /// CLIENT UNBLOCK: asks a parked connection to end its command. False if it is not parked.
    pub(crate) fn request_unblock(&self, client_id: u64, how: Unblock) -> bool {
        let keys = lock(&self.keys);
        match keys.blocked_clients.get(&client_id) {
            Some((mailbox, _)) => {
                mailbox.post(|st| st.mail.unblock = Some(how));
                true
            }
            None => false,
        }
    }

    /// Connections parked on a key (INFO `blocked_clients`).
    pub(crate) fn blocked_count(&self) -> usize {
        lock(&self.keys).blocked_clients.len()
    }

    /// SUBSCRIBE one channel; false if `mailbox` already was.
    pub(crate) fn subscribe(&self, mailbox: &Arc<Mailbox>, channel: &[u8]) -> bool {
        let mut ps = lock(&self.pubsub);
        let subs = ps.channels.entry(channel.to_vec()).or_default();
        if subs.iter().any(|m| m.client_id == mailbox.client_id) {
            return false;
        }
        subs.push(Arc::clone(mailbox));
        true
    }

    /// UNSUBSCRIBE one channel; false if `mailbox` was not subscribed.
    pub(crate) fn unsubscribe(&self, client_id: u64, channel: &[u8]) -> bool {
        let mut ps = lock(&self.pubsub);
        let Some(subs) = ps.channels.get_mut(channel) else {
            return false;
        };
        let before = subs.len();
        subs.retain(|m| m.client_id != client_id);
        let removed = subs.len() != before;
        if subs.is_empty() {
            ps.channels.remove(channel);
        }
        removed
    }

    /// PSUBSCRIBE one pattern; false if `mailbox` already was.
    pub(crate) fn psubscribe(&self, mailbox: &Arc<Mailbox>, pattern: &[u8]) -> bool {
        let mut ps = lock(&self.pubsub);
        let index = match ps.patterns.iter().position(|(p, _)| p == pattern) {
            Some(i) => i,
            None => {
                ps.patterns.push((pattern.to_vec(), Vec::new()));
                ps.patterns.len() - 1
            }
        };
        let subs = &mut ps.patterns[index].1;
        if subs.iter().any(|m| m.client_id == mailbox.client_id) {
            return false;
        }
        subs.push(Arc::clone(mailbox));
        true
    }

    /// PUNSUBSCRIBE one pattern; false if `mailbox` was not subscribed.
    pub(crate) fn punsubscribe(&self, client_id: u64, pattern: &[u8]) -> bool {
        let mut ps = lock(&self.pubsub);
        let Some(index) = ps.patterns.iter().position(|(p, _)| p == pattern) else {
            return false;
        };
        let subs = &mut ps.patterns[index].1;
        let before = subs.len();
        subs.retain(|m| m.client_id != client_id);
        let removed = subs.len() != before;
        if subs.is_empty() {
            ps.patterns.remove(index);
        }
        removed
    }

    /// PUBLISH: delivers `payload` to every subscriber of `channel` and of every pattern that
    /// matches it; the number of deliveries.
    pub(crate) fn publish(&self, channel: &[u8], payload: &[u8]) -> usize {
        let ps = lock(&self.pubsub);
        let channel_arc: Arc<[u8]> = Arc::from(channel);
        let payload: Arc<[u8]> = Arc::from(payload);
        let mut count = 0;
        if let Some(subs) = ps.channels.get(channel) {
            for m in subs {
                m.deliver(Message {
                    pattern: None,
                    channel: Arc::clone(&channel_arc),
                    payload: Arc::clone(&payload),
                });
                count += 1;
            }
        }
        for (pattern, subs) in &ps.patterns {
            if !glob_match(pattern, channel) {
                continue;
            }
            let pattern: Arc<[u8]> = Arc::from(pattern.as_slice());
            for m in subs {
                m.deliver(Message {
                    pattern: Some(Arc::clone(&pattern)),
                    channel: Arc::clone(&channel_arc),
                    payload: Arc::clone(&payload),
                });
                count += 1;
            }
        }
        count
    }

    /// PUBSUB CHANNELS: the channels with a subscriber that match `pattern` (all if `None`).
    pub(crate) fn channels(&self, pattern: Option<&[u8]>) -> Vec<Vec<u8>> {
        let ps = lock(&self.pubsub);
        ps.channels
            .keys()
            .filter(|c| pattern.is_none_or(|p| glob_match(p, c)))
            .cloned()
            .collect()
    }

    /// PUBSUB NUMSUB: subscribers of one channel (patterns not counted).
    pub(crate) fn numsub(&self, channel: &[u8]) -> usize {
        lock(&self.pubsub).channels.get(channel).map_or(0, Vec::len)
    }

    /// PUBSUB NUMPAT: patterns with at least one subscriber.
    pub(crate) fn numpat(&self) -> usize {
        lock(&self.pubsub).patterns.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn mailbox(id: u64) -> (Arc<Mailbox>, Arc<AtomicUsize>) {
        let rings = Arc::new(AtomicUsize::new(0));
        let r = Arc::clone(&rings);
        let m = Mailbox::new(
            id,
            Box::new(move || {
                r.fetch_add(1, Ordering::SeqCst);
            }),
        );
        (m, rings)
    }

    fn key(db: Db, k: &str) -> Touch {
        Touch::Key(db, k.as_bytes().to_vec())
    }

    #[test]
    fn watch_versions_move_only_for_watched_keys_written() {
        let n = Notifier::default();
        let a = n.watch(0, b"a", true);
        let b = n.watch(1, b"a", false);
        n.touched(&[key(0, "b"), key(2, "a")], None);
        assert!(!n.changed(&a) && !n.changed(&b));
        n.touched(&[key(0, "a")], None);
        assert!(n.changed(&a));
        assert!(!n.changed(&b));
        n.unwatch(&[a.clone(), b]);
        assert_eq!(n.interest.load(Ordering::SeqCst), 0);
        // Watching again after everyone let go starts a new version.
        let again = n.watch(0, b"a", true);
        assert_ne!(again.version, a.version);
    }

    #[test]
    fn blocked_clients_are_woken_first_come_first_served() {
        let n = Notifier::default();
        let (m1, r1) = mailbox(1);
        let (m2, r2) = mailbox(2);
        let k = vec![(0, b"list".to_vec())];
        n.block(&m1, &k);
        n.block(&m2, &k);
        assert_eq!(n.blocked_count(), 2);
        n.touched(&[key(0, "list")], None);
        assert!(m1.take(true).woken);
        assert!(!m2.has_mail());
        assert_eq!(
            (r1.load(Ordering::SeqCst), r2.load(Ordering::SeqCst)),
            (1, 0)
        );
        // The first leaves: the second is woken in its turn.
        n.unblock(1, None);
        assert!(m2.take(true).woken);
        n.unblock(2, None);
        assert_eq!(n.blocked_count(), 0);
        assert_eq!(n.interest.load(Ordering::SeqCst), 0);
        n.touched(&[key(0, "list")], None);
        assert!(!m1.has_mail() && !m2.has_mail());
    }

    #[test]
    fn flushes_and_swaps_touch_the_watched_keys_that_hold_a_value() {
        use model::{Keyspace, MemoryKeyspace, Scope, Value};
        let ks = MemoryKeyspace::new();
        let put = |db: Db, key: &str| Effect::Put {
            db,
            key: key.as_bytes().to_vec(),
            value: Value::String(b"v".to_vec()),
            expire_at_ms: 0,
        };
        let n = Notifier::default();
        let present = n.watch(0, b"present", true);
        let absent = n.watch(0, b"absent", false);
        let elsewhere = n.watch(1, b"present", false);
        let swapped_in = n.watch(2, b"x", false);
        ks.transact(Scope::All, true, &mut |t| {
            t.apply(vec![put(0, "present"), put(3, "x")])?;
            // The touches a Recorder reports around FLUSHDB 0 and SWAPDB 2 3.
            let effects = vec![Effect::FlushDb { db: 0 }, Effect::SwapDb { a: 2, b: 3 }];
            let mut touched = Touch::of(&effects);
            n.expand(&mut touched, &*t);
            t.apply(effects)?;
            n.expand(&mut touched, &*t);
            n.touched(&touched, None);
            Ok(())
        })
        .unwrap();
        assert!(n.changed(&present), "a flushed key changed");
        assert!(!n.changed(&absent), "a flush leaves absent keys alone");
        assert!(!n.changed(&elsewhere), "other databases are untouched");
        assert!(
            n.changed(&swapped_in),
            "a swap that brings a key in changes it"
        );
    }

    #[test]
    fn a_writer_waits_for_the_clients_its_writes_woke() {
        let n = Notifier::default();
        let (writer, writer_rings) = mailbox(1);
        let (a, _) = mailbox(2);
        let (b, _) = mailbox(3);
        n.block(&a, &[(0, b"q".to_vec())]);
        n.block(&b, &[(0, b"q".to_vec())]);
        n.touched(&[key(0, "q")], Some(&writer));
        assert_eq!(writer.pending(), 1);
        let mail = a.take(true);
        assert!(mail.woken);
        assert_eq!(mail.woken_by.len(), 1);
        // A was served and leaves: the wake passes to B, and A waits for B in its turn.
        n.unblock(2, Some(&a));
        assert_eq!(a.pending(), 1);
        assert_eq!(b.take(true).woken_by.len(), 1);
        a.release();
        assert_eq!(a.pending(), 0);
        let rings = writer_rings.load(Ordering::SeqCst);
        for w in mail.woken_by {
            w.release();
        }
        assert_eq!(writer.pending(), 0);
        assert_eq!(
            writer_rings.load(Ordering::SeqCst),
            rings + 1,
            "rung when done"
        );
        // A connection's own writes never make it wait for itself.
        n.touched(&[key(0, "q")], Some(&b));
        assert_eq!(b.pending(), 0);
        // Releases past zero stay at zero.
        writer.release();
        assert_eq!(writer.pending(), 0);
    }

    #[test]
    fn client_unblock_reaches_only_parked_clients() {
        let n = Notifier::default();
        let (m, _) = mailbox(7);
        assert!(!n.request_unblock(7, Unblock::Error));
        n.block(&m, &[(3, b"k".to_vec())]);
        assert!(n.request_unblock(7, Unblock::Error));
        assert_eq!(m.take(true).unblock, Some(Unblock::Error));
    }

    #[test]
    fn publish_counts_channel_and_pattern_deliveries() {
        let n = Notifier::default();
        let (m1, _) = mailbox(1);
        let (m2, _) = mailbox(2);
        assert!(n.subscribe(&m1, b"news"));
        assert!(!n.subscribe(&m1, b"news"));
        assert!(n.psubscribe(&m1, b"n*"));
        assert!(n.psubscribe(&m2, b"*s"));
        assert_eq!(n.publish(b"news", b"hi"), 3);
        assert_eq!(n.publish(b"other", b"x"), 0);
        let mail = m1.take(true);
        assert_eq!(mail.messages.len(), 2);
        assert_eq!(mail.messages[0].pattern, None);
        assert_eq!(mail.messages[1].pattern.as_deref(), Some(&b"n*"[..]));
        assert_eq!(&*mail.messages[1].payload, b"hi");
        assert_eq!(n.numsub(b"news"), 1);
        assert_eq!(n.numpat(), 2);
        assert!(n.unsubscribe(1, b"news"));
        assert!(!n.unsubscribe(1, b"news"));
        assert!(n.channels(None).is_empty());
        assert!(n.punsubscribe(2, b"*s"));
        assert_eq!(n.numpat(), 1);
    }

    #[test]
    fn a_mailbox_that_overflows_says_so_and_stops_growing() {
        let n = Notifier::default();
        let (m, _) = mailbox(1);
        n.subscribe(&m, b"c");
        let big = vec![0u8; MAILBOX_BYTES_MAX / 3];
        for _ in 0..4 {
            n.publish(b"c", &big);
        }
        let mail = m.take(true);
        assert!(mail.overflowed);
        assert!(mail.messages.is_empty());
    }
}
