//! An in-memory coordinator for the deterministic simulation: one key space, leases on a
//! simulated clock that only moves when [`MemCoordinator::advance_to`] is called, and a link
//! per client that the simulation can cut.
//!
//! Leases behave as etcd's do for the elector's five calls: a lease expires when the clock
//! reaches its deadline (granted or last renewed, plus its TTL), and the keys under it vanish
//! with it; renewing a lease that is gone answers 0 seconds left; creating a key under a lease
//! that is gone, or revoking one, is refused.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::coord::{CoordError, CoordOp, Coordinator, KeyValue};

/// The state of one client's link to the coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Requests and answers get through.
    Up,
    /// Nothing gets through: every call fails and has no effect.
    Cut,
    /// Requests get through and take effect, their answers are lost: every call fails.
    AnswersLost,
}

#[derive(Debug)]
struct Lease {
    ttl_s: u64,
    deadline_ms: u64,
}

#[derive(Debug, Default)]
struct State {
    now_ms: u64,
    revision: i64,
    next_lease: i64,
    leases: BTreeMap<i64, Lease>,
    /// When each lease that is gone expired or was revoked.
    ended: BTreeMap<i64, u64>,
    /// When each lease was last granted or renewed (kept after it is gone).
    renewed: BTreeMap<i64, u64>,
    keys: BTreeMap<String, KeyValue>,
    links: BTreeMap<String, Link>,
}

impl State {
    fn end(&mut self, id: i64) {
        if self.leases.remove(&id).is_some() {
            self.ended.insert(id, self.now_ms);
            self.keys.retain(|_, kv| kv.lease != id);
            self.revision += 1;
        }
    }
}

/// The coordinator: shared by its clients ([`MemCoordinator::client`]) and by the simulation,
/// which moves the clock and sets links.
#[derive(Debug, Clone, Default)]
pub struct MemCoordinator {
    state: Arc<Mutex<State>>,
}

/// One client's handle; its calls go over its link.
#[derive(Debug, Clone)]
pub struct MemClient {
    name: String,
    state: Arc<Mutex<State>>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic elsewhere cannot leave the maps half-updated in a way that matters here.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl MemCoordinator {
    /// An empty coordinator at time 0.
    pub fn new() -> MemCoordinator {
        MemCoordinator::default()
    }

    /// A client named `name` (its link starts up).
    pub fn client(&self, name: &str) -> MemClient {
        lock(&self.state)
            .links
            .entry(name.to_string())
            .or_insert(Link::Up);
        MemClient {
            name: name.to_string(),
            state: self.state.clone(),
        }
    }

    /// The simulated time, in milliseconds.
    pub fn now_ms(&self) -> u64 {
        lock(&self.state).now_ms
    }

    /// Move the clock to `ms` (never backwards); leases whose deadline it reaches expire, at
    /// their deadline.
    pub fn advance_to(&self, ms: u64) {
        let mut s = lock(&self.state);
        let due: Vec<(i64, u64)> = s
            .leases
            .iter()
            .filter(|(_, l)| l.deadline_ms <= ms)
            .map(|(id, l)| (*id, l.deadline_ms))
            .collect();
        for (id, at) in due {
            s.now_ms = s.now_ms.max(at);
            s.end(id);
        }
        s.now_ms = s.now_ms.max(ms);
    }

    /// Set `client`'s link.
    pub fn set_link(&self, client: &str, link: Link) {
        lock(&self.state).links.insert(client.to_string(), link);
    }

    /// `client`'s link.
    pub fn link(&self, client: &str) -> Link {
        lock(&self.state)
            .links
            .get(client)
            .copied()
            .unwrap_or(Link::Up)
    }

    /// Expire lease `id` now, as if its holder had stopped renewing it long ago (a fault).
    pub fn expire(&self, id: i64) {
        lock(&self.state).end(id);
    }

    /// Read `key` as the coordinator holds it (no link involved).
    pub fn peek(&self, key: &str) -> Option<KeyValue> {
        lock(&self.state).keys.get(key).cloned()
    }

    /// Whether lease `id` is alive.
    pub fn lease_alive(&self, id: i64) -> bool {
        lock(&self.state).leases.contains_key(&id)
    }

    /// When lease `id` expired or was revoked (`None`: alive, or never granted).
    pub fn lease_ended_at(&self, id: i64) -> Option<u64> {
        lock(&self.state).ended.get(&id).copied()
    }

    /// When lease `id` was last granted or renewed, by a call that reached the coordinator
    /// (whether or not its answer got back).
    pub fn lease_renewed_at(&self, id: i64) -> Option<u64> {
        lock(&self.state).renewed.get(&id).copied()
    }
}

impl MemClient {
    /// The client's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Run `f` over the link: refused before it runs when the link is cut, run but its answer
    /// dropped when answers are lost.
    fn over_link<T>(
        &self,
        op: CoordOp,
        f: impl FnOnce(&mut State) -> Result<T, CoordError>,
    ) -> Result<T, CoordError> {
        let mut s = lock(&self.state);
        let link = s.links.get(&self.name).copied().unwrap_or(Link::Up);
        let lost = |what: &str| CoordError::Unreachable {
            op,
            detail: format!("coordinator: {op} from {}: {what}", self.name),
        };
        match link {
            Link::Up => f(&mut s),
            Link::Cut => Err(lost("the link is cut")),
            Link::AnswersLost => {
                let _ = f(&mut s);
                Err(lost("the answer was lost"))
            }
        }
    }
}

fn refused(op: CoordOp, what: String) -> CoordError {
    CoordError::Refused {
        op,
        detail: format!("coordinator: {op}: {what}"),
    }
}

impl Coordinator for MemClient {
    fn get(&self, key: &str) -> Result<Option<KeyValue>, CoordError> {
        self.over_link(CoordOp::Get, |s| Ok(s.keys.get(key).cloned()))
    }

    fn grant(&self, ttl: u64) -> Result<i64, CoordError> {
        self.over_link(CoordOp::Grant, |s| {
            if ttl == 0 {
                return Err(refused(CoordOp::Grant, "a TTL of 0 seconds".into()));
            }
            s.next_lease += 1;
            let id = s.next_lease;
            let deadline_ms = s.now_ms.saturating_add(ttl.saturating_mul(1000));
            let now = s.now_ms;
            s.renewed.insert(id, now);
            s.leases.insert(
                id,
                Lease {
                    ttl_s: ttl,
                    deadline_ms,
                },
            );
            Ok(id)
        })
    }

    fn keepalive(&self, id: i64) -> Result<i64, CoordError> {
        self.over_link(CoordOp::KeepAlive, |s| {
            let now = s.now_ms;
            Ok(match s.leases.get_mut(&id) {
                Some(l) => {
                    l.deadline_ms = now.saturating_add(l.ttl_s.saturating_mul(1000));
                    let left = i64::try_from(l.ttl_s).unwrap_or(i64::MAX);
                    s.renewed.insert(id, now);
                    left
                }
                None => 0,
            })
        })
    }

    fn create(&self, key: &str, value: &[u8], lease: i64) -> Result<bool, CoordError> {
        self.over_link(CoordOp::Create, |s| {
            if !s.leases.contains_key(&lease) {
                return Err(refused(CoordOp::Create, format!("lease {lease} not found")));
            }
            if s.keys.contains_key(key) {
                return Ok(false);
            }
            s.revision += 1;
            let kv = KeyValue {
                value: value.to_vec(),
                lease,
                create_revision: s.revision,
            };
            s.keys.insert(key.to_string(), kv);
            Ok(true)
        })
    }

    fn record_if_held(
        &self,
        guard: &str,
        lease: i64,
        key: &str,
        value: &[u8],
    ) -> Result<bool, CoordError> {
        self.over_link(CoordOp::Record, |s| {
            if s.keys.get(guard).is_none_or(|kv| kv.lease != lease) {
                return Ok(false);
            }
            s.revision += 1;
            let create_revision = s.keys.get(key).map_or(s.revision, |kv| kv.create_revision);
            let kv = KeyValue {
                value: value.to_vec(),
                lease: 0,
                create_revision,
            };
            s.keys.insert(key.to_string(), kv);
            Ok(true)
        })
    }

    fn update(&self, key: &str, value: &[u8], lease: i64) -> Result<bool, CoordError> {
        self.over_link(CoordOp::Update, |s| {
            let Some(kv) = s.keys.get_mut(key).filter(|kv| kv.lease == lease) else {
                return Ok(false);
            };
            kv.value = value.to_vec();
            s.revision += 1;
            Ok(true)
        })
    }

    fn revoke(&self, id: i64) -> Result<(), CoordError> {
        self.over_link(CoordOp::Revoke, |s| {
            if !s.leases.contains_key(&id) {
                return Err(refused(CoordOp::Revoke, format!("lease {id} not found")));
            }
            s.end(id);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_lives_as_long_as_its_lease() {
        let m = MemCoordinator::new();
        let a = m.client("a");
        let b = m.client("b");
        let l = a.grant(2).unwrap();
        assert!(a.create("k", b"1", l).unwrap());
        let lb = b.grant(2).unwrap();
        assert!(!b.create("k", b"2", lb).unwrap(), "the key exists");
        assert_eq!(b.get("k").unwrap().unwrap().lease, l);
        m.advance_to(1_500);
        assert_eq!(a.keepalive(l).unwrap(), 2, "renewed: deadline 3,500");
        assert_eq!(m.lease_renewed_at(l), Some(1_500));
        m.advance_to(3_499);
        assert!(m.lease_alive(l));
        assert_eq!(b.get("k").unwrap().unwrap().value, b"1");
        m.advance_to(3_500);
        assert!(!m.lease_alive(l));
        assert_eq!(m.lease_ended_at(l), Some(3_500));
        assert_eq!(b.get("k").unwrap(), None, "the key went with its lease");
        assert_eq!(a.keepalive(l).unwrap(), 0);
        assert!(matches!(
            a.create("k", b"1", l),
            Err(CoordError::Refused {
                op: CoordOp::Create,
                ..
            })
        ));
        // b's lease expired at 2,000 with no key; a fresh one wins now.
        let lb = b.grant(1).unwrap();
        assert!(b.create("k", b"2", lb).unwrap());
        assert!(!a.update("k", b"x", l).unwrap(), "not a's lease");
        assert!(b.update("k", b"3", lb).unwrap());
        assert_eq!(a.get("k").unwrap().unwrap().value, b"3");
    }

    #[test]
    fn revoke_deletes_the_keys_and_twice_is_refused() {
        let m = MemCoordinator::new();
        let a = m.client("a");
        let l = a.grant(5).unwrap();
        assert!(a.create("k", b"v", l).unwrap());
        a.revoke(l).unwrap();
        assert_eq!(a.get("k").unwrap(), None);
        assert!(matches!(
            a.revoke(l),
            Err(CoordError::Refused {
                op: CoordOp::Revoke,
                ..
            })
        ));
        assert!(a.grant(0).is_err());
    }

    #[test]
    fn a_cut_link_fails_every_call_and_changes_nothing() {
        let m = MemCoordinator::new();
        let a = m.client("a");
        let b = m.client("b");
        let l = a.grant(1).unwrap();
        m.set_link("a", Link::Cut);
        let e = a.create("k", b"v", l).unwrap_err();
        assert!(
            matches!(
                e,
                CoordError::Unreachable {
                    op: CoordOp::Create,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(e.op(), Some(CoordOp::Create));
        assert!(a.get("k").is_err());
        assert!(a.keepalive(l).is_err());
        assert!(a.grant(1).is_err());
        assert!(a.revoke(l).is_err());
        assert_eq!(
            b.get("k").unwrap(),
            None,
            "b's link is up; nothing was created"
        );
        // Unrenewed over the cut link, the lease expires.
        m.advance_to(1_000);
        assert!(!m.lease_alive(l));
        m.set_link("a", Link::Up);
        assert_eq!(a.keepalive(l).unwrap(), 0);
    }

    #[test]
    fn lost_answers_still_take_effect() {
        let m = MemCoordinator::new();
        let a = m.client("a");
        let l = a.grant(3).unwrap();
        m.set_link("a", Link::AnswersLost);
        assert!(a.create("k", b"v", l).is_err());
        assert_eq!(
            m.peek("k").map(|kv| kv.lease),
            Some(l),
            "created all the same"
        );
        assert!(a.revoke(l).is_err());
        assert!(!m.lease_alive(l), "revoked all the same");
        assert_eq!(m.peek("k"), None);
        assert_eq!(m.link("a"), Link::AnswersLost);
    }

    #[test]
    fn expire_is_immediate_and_the_clock_never_goes_back() {
        let m = MemCoordinator::new();
        let a = m.client("a");
        m.advance_to(10_000);
        let l = a.grant(60).unwrap();
        assert!(a.create("k", b"v", l).unwrap());
        m.expire(l);
        assert_eq!(m.peek("k"), None);
        assert_eq!(m.lease_ended_at(l), Some(10_000));
        m.advance_to(5);
        assert_eq!(m.now_ms(), 10_000);
        assert_eq!(a.name(), "a");
    }
}
