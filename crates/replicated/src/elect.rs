//! The failover elector as a state machine: the rules of `kavach elect`, with no clock and no
//! sleeping inside. [`Elector::step`] does one round at the time it is given and says what
//! happened ([`Event`]s, each reported once while a state lasts) and when to call it again
//! ([`Next`]). The command runs it with real time, a RESP node and etcd; the simulation in
//! `tests/sim.rs` runs it with simulated nodes and a [`crate::mem::MemCoordinator`].
//!
//! The rules:
//! - **Campaign** (every tick): while the node does not answer, or is neither a backup nor a
//!   primary, wait. If the leader key is held: when it names this node, the node is primary
//!   and the lease can still be renewed, resume that lease (a restarted elector); otherwise
//!   follow. If the key is free: grant a lease of the TTL and create the key under it; if
//!   another elector created it first, or the create failed, revoke the lease.
//! - **Won**: a node that already is primary leads at its epoch, unless a leader recorded a
//!   newer epoch since (the record at `epoch_key`, written by every leader with no lease):
//!   then the node was fenced by that promotion and can never commit again, so it is shut
//!   down and the elector stops (exit 2). A backup is sent PROMOTE,
//!   and the lease is renewed every `min(tick, 200 ms)` while PROMOTE runs. A PROMOTE refused
//!   while the node is still a backup revokes the lease and backs off a TTL before campaigning
//!   again; refused otherwise, or if the call itself fails, the elector stops (exit 2).
//! - **Lead** (every tick): the key's value becomes `{"node": ADVERTISE, "epoch": E}`. While
//!   the node answers as primary, renew the lease. The leadership ends when the node is no
//!   longer primary or does not answer (the lease is revoked so another can lead), when the
//!   lease is gone, or when it could not be renewed for a TTL since its last renewal.
//! - **Lost**: a node still primary is shut down and the elector stops (exit 2); a node that
//!   is a backup campaigns again; anything else stops the elector (exit 2).
//!
//! One rule is tighter than the elector's before it became a state machine: the TTL without
//! renewal is counted from the last renewal that succeeded (at the grant, during PROMOTE, or
//! while leading), not from the moment PROMOTE ended. A PROMOTE that outlasts the lease while
//! the coordinator is unreachable used to give the new primary a further TTL; with that rule
//! put back, the simulation in `tests/sim.rs` fails on its lease check (seed 9).

use std::fmt;
use std::time::Duration;

use serde_json::json;

use crate::coord::Coordinator;

/// What the node says it is (INFO replication).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeRole {
    /// The primary, at a replication epoch.
    Primary { epoch: u64 },
    /// A backup.
    Backup,
    /// Anything else (not replicated, or a role the elector does not drive), as it says.
    Other(String),
}

/// Where a PROMOTE sent with [`Node::start_promote`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Promotion {
    /// Still running.
    Running,
    /// The node answered OK, with this text.
    Done(String),
    /// The node answered with this error.
    Refused(String),
    /// The call failed (no answer, connection lost): the detail.
    Failed(String),
}

/// The node an elector drives. Errors are the detail the elector prints.
pub trait Node {
    /// The node's role, or why it did not say.
    fn role(&mut self) -> Result<NodeRole, String>;
    /// Send PROMOTE; its answer comes through [`Node::poll_promote`].
    fn start_promote(&mut self);
    /// The PROMOTE's state; after an answer, [`Promotion::Failed`] until the next start.
    fn poll_promote(&mut self) -> Promotion;
    /// Stop the node (SHUTDOWN); best effort.
    fn shutdown(&mut self);
}

/// The elector's settings.
#[derive(Debug, Clone)]
pub struct ElectorConfig {
    /// The leader key (`/kavach/CLUSTER/leader`).
    pub key: String,
    /// The record of the last epoch a leader led, with no lease (`/kavach/CLUSTER/epoch`
    /// beside `/kavach/CLUSTER/leader`; otherwise the leader key and `.epoch`).
    pub epoch_key: String,
    /// How messages name the node (its RESP address).
    pub node: String,
    /// How clients reach the node, stored in the key.
    pub advertise: String,
    /// Lease seconds.
    pub ttl_s: u64,
    /// Milliseconds between rounds.
    pub tick_ms: u64,
}

impl ElectorConfig {
    /// The settings for `ttl_s`, with the tick `kavach elect` uses: a third of the TTL, at
    /// least 100 ms.
    pub fn new(key: &str, node: &str, advertise: &str, ttl_s: u64) -> ElectorConfig {
        let epoch_key = match key.strip_suffix("/leader") {
            Some(dir) => format!("{dir}/epoch"),
            None => format!("{key}.epoch"),
        };
        ElectorConfig {
            key: key.to_string(),
            epoch_key,
            node: node.to_string(),
            advertise: advertise.to_string(),
            ttl_s,
            tick_ms: (ttl_s.saturating_mul(1000) / 3).max(100),
        }
    }

    /// The lease in milliseconds.
    pub fn ttl_ms(&self) -> u64 {
        self.ttl_s.saturating_mul(1000)
    }

    /// How often the lease is renewed while PROMOTE runs.
    pub fn promote_poll_ms(&self) -> u64 {
        self.tick_ms.min(200)
    }
}

/// Something the elector reports: `kind` is one of `started`, `waiting`, `following`,
/// `promoted`, `refused`, `fenced`, `leading`, `lost`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: &'static str,
    pub detail: String,
}

/// Why the elector stopped. Each is an exit with status 2 in `kavach elect`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElectError {
    /// It won the key but the node stopped answering.
    #[error("the node stopped answering: {0}")]
    NodeGone(String),
    /// The PROMOTE call failed.
    #[error("{0}")]
    PromoteCall(String),
    /// PROMOTE answered OK but the node does not say it is primary.
    #[error("{0}")]
    NotPrimaryAfterPromote(String),
    /// PROMOTE was refused and the node is no longer a backup.
    #[error("{node}: {error}; gave the leadership up")]
    PromoteFailed { node: String, error: String },
    /// The leadership was lost while the node was primary: the node was shut down.
    #[error(
        "lost the leadership ({why}); shut {node} down: restart it as a backup \
         (kavach serve --role backup) and this elector"
    )]
    ShutDown { node: String, why: String },
    /// `step` was called after the elector had stopped.
    #[error("the elector has stopped")]
    Stopped,
    /// The elector won the key, but its node is primary at an epoch older than one a leader
    /// has led since: another node was promoted over it, so it can no longer commit a write.
    /// The node was shut down.
    #[error(
        "{node} is primary at epoch {epoch}, but epoch {recorded} was led since: it can no \
         longer commit writes; shut it down: restart it as a backup (kavach serve --role \
         backup) and this elector"
    )]
    Fenced {
        node: String,
        epoch: u64,
        recorded: u64,
    },
    /// The leadership was lost and the node is not a backup.
    #[error(
        "lost the leadership ({why}); {node} is not a backup: restart it as one and this \
         elector"
    )]
    NotBackup { node: String, why: String },
}

/// When to call [`Elector::step`] again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// At this time (the caller's clock, milliseconds).
    At(u64),
    /// Never: the elector stopped.
    Exit(ElectError),
}

/// What one round did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub events: Vec<Event>,
    pub next: Next,
}

/// The elector's phase, for observers (the simulation's checks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Looking for the key.
    Campaign,
    /// Won the key under `lease`; PROMOTE is running.
    Promoting { lease: i64, renewed_ms: u64 },
    /// Leading under `lease`, last renewed at `renewed_ms`.
    Leading { lease: i64, renewed_ms: u64 },
    /// Stopped.
    Exited,
}

/// One elector: the node it drives and the coordinator it campaigns through.
#[derive(Debug)]
pub struct Elector<C, N> {
    cfg: ElectorConfig,
    coord: C,
    node: N,
    phase: Phase,
    /// The last event reported, so a state that lasts is reported once.
    last: String,
    events: Vec<Event>,
}

impl<C: Coordinator, N: Node> Elector<C, N> {
    /// An elector in campaign; call [`Elector::step`] first at `now + tick`
    /// ([`Elector::first_step_at`]).
    pub fn new(cfg: ElectorConfig, coord: C, node: N) -> Elector<C, N> {
        Elector {
            cfg,
            coord,
            node,
            phase: Phase::Campaign,
            last: String::new(),
            events: Vec::new(),
        }
    }

    /// When the first round is due if the elector starts at `now`.
    pub fn first_step_at(&self, now: u64) -> u64 {
        now.saturating_add(self.cfg.tick_ms)
    }

    /// The settings.
    pub fn config(&self) -> &ElectorConfig {
        &self.cfg
    }

    /// The coordinator client.
    pub fn coordinator(&self) -> &C {
        &self.coord
    }

    /// The node.
    pub fn node_mut(&mut self) -> &mut N {
        &mut self.node
    }

    /// The phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Report `kind: detail` unless it is the last thing reported; whether it is new.
    pub fn report(&mut self, kind: &'static str, detail: &str) -> Option<Event> {
        let line = format!("{kind}: {detail}");
        if line == self.last {
            return None;
        }
        self.last = line;
        Some(Event {
            kind,
            detail: detail.to_string(),
        })
    }

    fn event(&mut self, kind: &'static str, detail: &str) {
        if let Some(e) = self.report(kind, detail) {
            self.events.push(e);
        }
    }

    fn value(&self, epoch: u64) -> Vec<u8> {
        json!({ "node": self.cfg.advertise, "epoch": epoch })
            .to_string()
            .into_bytes()
    }

    fn done(&mut self, next: Next) -> Step {
        if matches!(next, Next::Exit(_)) {
            self.phase = Phase::Exited;
        }
        Step {
            events: std::mem::take(&mut self.events),
            next,
        }
    }

    /// Do one round at time `now` (milliseconds on the caller's clock).
    pub fn step(&mut self, now: u64) -> Step {
        let next = match self.phase {
            Phase::Campaign => self.campaign(now),
            Phase::Promoting { lease, renewed_ms } => self.promoting(now, lease, renewed_ms),
            Phase::Leading { lease, renewed_ms } => self.lead(now, lease, renewed_ms),
            Phase::Exited => return self.done(Next::Exit(ElectError::Stopped)),
        };
        self.done(next)
    }

    fn after(&self, now: u64, ms: u64) -> Next {
        Next::At(now.saturating_add(ms))
    }

    fn campaign(&mut self, now: u64) -> Next {
        let tick = self.cfg.tick_ms;
        let role = match self.node.role() {
            Ok(r) => r,
            Err(e) => {
                self.event("waiting", &format!("the node does not answer ({e})"));
                return self.after(now, tick);
            }
        };
        if let NodeRole::Other(r) = &role {
            self.event("waiting", &format!("the node is {r}, not a backup"));
            return self.after(now, tick);
        }
        let held = match self.coord.get(&self.cfg.key) {
            Ok(h) => h,
            Err(e) => {
                self.event("waiting", &e.to_string());
                return self.after(now, tick);
            }
        };
        if let Some(kv) = held {
            let leader = String::from_utf8_lossy(&kv.value).into_owned();
            let mine = serde_json::from_slice::<serde_json::Value>(&kv.value)
                .ok()
                .and_then(|v| v.get("node")?.as_str().map(|n| n == self.cfg.advertise))
                .unwrap_or(false);
            if mine
                && matches!(role, NodeRole::Primary { .. })
                && kv.lease != 0
                && self.coord.keepalive(kv.lease).unwrap_or(0) > 0
            {
                // A restarted elector whose node still leads: take its lease over.
                self.event("leading", "resumed the lease this node already held");
                return self.won(now, kv.lease);
            }
            self.event("following", &leader);
            return self.after(now, tick);
        }
        let lease = match self.coord.grant(self.cfg.ttl_s) {
            Ok(l) => l,
            Err(e) => {
                self.event("waiting", &e.to_string());
                return self.after(now, tick);
            }
        };
        let epoch = match role {
            NodeRole::Primary { epoch } => epoch,
            _ => 0,
        };
        match self.coord.create(&self.cfg.key, &self.value(epoch), lease) {
            Ok(true) => self.won(now, lease),
            Ok(false) => {
                let _ = self.coord.revoke(lease);
                self.after(now, tick)
            }
            Err(e) => {
                let _ = self.coord.revoke(lease);
                self.event("waiting", &e.to_string());
                self.after(now, tick)
            }
        }
    }

    /// The epoch last recorded by a leader (0 if none).
    fn recorded_epoch(&self) -> Result<u64, String> {
        match self.coord.get(&self.cfg.epoch_key) {
            Ok(None) => Ok(0),
            Ok(Some(kv)) => std::str::from_utf8(&kv.value)
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    format!(
                        "{}: expected an epoch (a decimal number), found {:?}",
                        self.cfg.epoch_key,
                        String::from_utf8_lossy(&kv.value)
                    )
                }),
            Err(e) => Err(format!("reading {}: {e}", self.cfg.epoch_key)),
        }
    }

    /// The key is ours under `lease`, renewed at `now`: lead a primary, promote a backup. A
    /// node that already is primary is led only if no leader has led a newer epoch since (the
    /// record at `epoch_key`): otherwise it was fenced by a promotion, can never commit again,
    /// and leading it would hold the key with no writable primary behind it.
    fn won(&mut self, now: u64, lease: i64) -> Next {
        match self.node.role() {
            Err(e) => Next::Exit(ElectError::NodeGone(e)),
            Ok(NodeRole::Primary { epoch }) => {
                match self.recorded_epoch() {
                    Ok(recorded) if recorded > epoch => {
                        let _ = self.coord.revoke(lease);
                        self.event(
                        "fenced",
                        &format!("the node is primary at epoch {epoch}, epoch {recorded} was led since"),
                    );
                        self.node.shutdown();
                        Next::Exit(ElectError::Fenced {
                            node: self.cfg.node.clone(),
                            epoch,
                            recorded,
                        })
                    }
                    Ok(_) => self.start_leading(now, lease, epoch, now),
                    Err(e) => {
                        // Unknown: do not lead a primary that may be fenced; try again later.
                        let _ = self.coord.revoke(lease);
                        self.event("waiting", &e);
                        self.phase = Phase::Campaign;
                        self.after(now, self.cfg.tick_ms)
                    }
                }
            }
            Ok(_) => {
                self.node.start_promote();
                self.phase = Phase::Promoting {
                    lease,
                    renewed_ms: now,
                };
                self.after(now, self.cfg.promote_poll_ms())
            }
        }
    }

    fn promoting(&mut self, now: u64, lease: i64, mut renewed_ms: u64) -> Next {
        if matches!(self.coord.keepalive(lease), Ok(left) if left > 0) {
            renewed_ms = now;
        }
        match self.node.poll_promote() {
            Promotion::Running => {
                self.phase = Phase::Promoting { lease, renewed_ms };
                self.after(now, self.cfg.promote_poll_ms())
            }
            Promotion::Failed(e) => Next::Exit(ElectError::PromoteCall(e)),
            Promotion::Done(text) => {
                self.event("promoted", &text);
                match self.node.role() {
                    Ok(NodeRole::Primary { epoch }) => {
                        self.start_leading(now, lease, epoch, renewed_ms)
                    }
                    Ok(r) => Next::Exit(ElectError::NotPrimaryAfterPromote(format!(
                        "after PROMOTE the node is {r:?}"
                    ))),
                    Err(e) => Next::Exit(ElectError::NotPrimaryAfterPromote(e)),
                }
            }
            Promotion::Refused(e) => {
                let _ = self.coord.revoke(lease);
                if matches!(self.node.role(), Ok(NodeRole::Backup)) {
                    // Refused before it stopped being a backup (too few copies answer, say):
                    // let another node try, and try again after a TTL.
                    self.event("refused", &format!("{e}; gave the leadership up"));
                    self.phase = Phase::Campaign;
                    return self.after(now, self.cfg.ttl_ms().saturating_add(self.cfg.tick_ms));
                }
                Next::Exit(ElectError::PromoteFailed {
                    node: self.cfg.node.clone(),
                    error: e,
                })
            }
        }
    }

    fn start_leading(&mut self, now: u64, lease: i64, epoch: u64, renewed_ms: u64) -> Next {
        if !self
            .coord
            .update(&self.cfg.key, &self.value(epoch), lease)
            .unwrap_or(false)
        {
            self.event("lost", "the leader key changed hands while promoting");
        }
        self.event("leading", &format!("epoch {epoch}"));
        // Record the epoch led, so an elector that later wins the key for a node fenced by
        // this promotion does not lead it. A failure is reported and the record tried again
        // at the next round.
        self.record_epoch(lease, epoch);
        self.phase = Phase::Leading { lease, renewed_ms };
        self.after(now, self.cfg.tick_ms)
    }

    fn lead(&mut self, now: u64, lease: i64, mut renewed_ms: u64) -> Next {
        let ttl = Duration::from_secs(self.cfg.ttl_s);
        match self.node.role() {
            // A record that failed at the start is tried again (it is read first: one call
            // per round when it is in place).
            Ok(NodeRole::Primary { epoch }) => self.record_epoch(lease, epoch),
            Ok(r) => {
                let _ = self.coord.revoke(lease);
                return self.lost(now, format!("the node is no longer primary ({r:?})"));
            }
            Err(e) => {
                // A dead node must not keep the key; its lease goes so another can lead.
                let _ = self.coord.revoke(lease);
                return self.lost(now, format!("the node does not answer ({e})"));
            }
        }
        match self.coord.keepalive(lease) {
            Ok(left) if left > 0 => renewed_ms = now,
            Ok(_) => return self.lost(now, "the lease expired".into()),
            Err(e) if now.saturating_sub(renewed_ms) >= self.cfg.ttl_ms() => {
                return self.lost(
                    now,
                    format!("the lease could not be renewed for {ttl:?} ({e})"),
                );
            }
            Err(e) => self.event("leading", &format!("renewal failed, retrying: {e}")),
        }
        self.phase = Phase::Leading { lease, renewed_ms };
        self.after(now, self.cfg.tick_ms)
    }

    /// Raise the epoch record to `epoch` while holding the key under `lease`.
    fn record_epoch(&mut self, lease: i64, epoch: u64) {
        let value = epoch.to_string().into_bytes();
        match self.recorded_epoch() {
            Ok(r) if r >= epoch => {}
            Ok(_) => {
                match self
                    .coord
                    .record_if_held(&self.cfg.key, lease, &self.cfg.epoch_key, &value)
                {
                    Ok(_) => {}
                    Err(e) => self.event("leading", &format!("recording epoch {epoch}: {e}")),
                }
            }
            Err(e) => self.event("leading", &format!("recording epoch {epoch}: {e}")),
        }
    }

    fn lost(&mut self, now: u64, why: String) -> Next {
        self.event("lost", &why);
        self.phase = Phase::Campaign;
        match self.node.role() {
            Ok(NodeRole::Primary { .. }) => {
                // Another node may be primary by now: stop serving from this one.
                self.node.shutdown();
                Next::Exit(ElectError::ShutDown {
                    node: self.cfg.node.clone(),
                    why,
                })
            }
            Ok(NodeRole::Backup) => self.after(now, self.cfg.tick_ms),
            _ => Next::Exit(ElectError::NotBackup {
                node: self.cfg.node.clone(),
                why,
            }),
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::{Link, MemClient, MemCoordinator};

    /// A node whose answers the test sets.
    #[derive(Debug)]
    struct Fake {
        role: Result<NodeRole, String>,
        /// PROMOTE's answer once it is polled; `None`: still running.
        promote: Option<Promotion>,
        promotes: usize,
        shutdowns: usize,
    }

    impl Node for Fake {
        fn role(&mut self) -> Result<NodeRole, String> {
            self.role.clone()
        }
        fn start_promote(&mut self) {
            self.promotes += 1;
        }
        fn poll_promote(&mut self) -> Promotion {
            match &self.promote {
                None => Promotion::Running,
                Some(p) => {
                    if matches!(p, Promotion::Done(_)) {
                        self.role = Ok(NodeRole::Primary { epoch: 7 });
                    }
                    p.clone()
                }
            }
        }
        fn shutdown(&mut self) {
            self.shutdowns += 1;
            self.role = Err("connection refused".into());
        }
    }

    fn elector(m: &MemCoordinator, name: &str) -> Elector<MemClient, Fake> {
        let node = Fake {
            role: Ok(NodeRole::Backup),
            promote: Some(Promotion::Done("OK".into())),
            promotes: 0,
            shutdowns: 0,
        };
        let cfg = ElectorConfig::new("/k", name, name, 3);
        Elector::new(cfg, m.client(name), node)
    }

    fn at(step: &Step) -> u64 {
        match step.next {
            Next::At(t) => t,
            Next::Exit(ref e) => panic!("exited: {e}"),
        }
    }

    fn kinds(step: &Step) -> Vec<&'static str> {
        step.events.iter().map(|e| e.kind).collect()
    }

    #[test]
    fn a_backup_wins_promotes_and_leads_and_the_key_names_it() {
        let m = MemCoordinator::new();
        let mut e = elector(&m, "a");
        assert_eq!(e.config().tick_ms, 1_000);
        assert_eq!(e.config().promote_poll_ms(), 200);
        let t = e.first_step_at(0);
        let s = e.step(t);
        assert_eq!(at(&s), t + 200, "PROMOTE polled every 200 ms");
        assert!(matches!(e.phase(), Phase::Promoting { .. }));
        assert_eq!(e.node_mut().promotes, 1);
        let s = e.step(t + 200);
        assert_eq!(kinds(&s), ["promoted", "leading"]);
        assert_eq!(s.events[1].detail, "epoch 7");
        let kv = m.peek("/k").unwrap();
        let v: serde_json::Value = serde_json::from_slice(&kv.value).unwrap();
        assert_eq!(v, json!({ "node": "a", "epoch": 7 }));
        let Phase::Leading { lease, .. } = e.phase() else {
            panic!("{:?}", e.phase())
        };
        assert_eq!(kv.lease, lease);
        // A second elector follows.
        let mut b = elector(&m, "b");
        let s = b.step(1_000);
        assert_eq!(kinds(&s), ["following"]);
        assert_eq!(b.step(2_000).events, [], "a lasting state is reported once");
    }

    #[test]
    fn a_refused_promote_gives_the_key_up_and_backs_off_a_ttl() {
        let m = MemCoordinator::new();
        let mut e = elector(&m, "a");
        e.node_mut().promote = Some(Promotion::Refused("too few copies".into()));
        e.step(1_000);
        let s = e.step(1_200);
        assert_eq!(kinds(&s), ["refused"]);
        assert_eq!(at(&s), 1_200 + 3_000 + 1_000);
        assert_eq!(m.peek("/k"), None, "the lease was revoked");
        assert_eq!(e.phase(), Phase::Campaign);
        // Refused when the node is no longer a backup: the elector stops.
        let mut e = elector(&m, "b");
        e.node_mut().promote = Some(Promotion::Refused("fenced".into()));
        e.step(10_000);
        e.node_mut().role = Ok(NodeRole::Other("stopped".into()));
        let s = e.step(10_200);
        assert!(matches!(
            s.next,
            Next::Exit(ElectError::PromoteFailed { .. })
        ));
        assert_eq!(e.phase(), Phase::Exited);
    }

    #[test]
    fn a_leader_cut_off_for_a_ttl_shuts_its_node_down() {
        let m = MemCoordinator::new();
        let mut e = elector(&m, "a");
        e.step(1_000);
        e.step(1_200);
        m.advance_to(2_200);
        assert_eq!(at(&e.step(2_200)), 3_200, "renewed");
        m.set_link("a", Link::Cut);
        let mut now = 3_200;
        loop {
            m.advance_to(now);
            let s = e.step(now);
            match s.next {
                Next::At(t) => {
                    assert!(now - 2_200 < 3_000, "still leading at {now}");
                    now = t;
                }
                Next::Exit(err) => {
                    assert!(matches!(err, ElectError::ShutDown { .. }), "{err}");
                    assert!(
                        err.to_string().contains("could not be renewed for 3s"),
                        "{err}"
                    );
                    break;
                }
            }
        }
        assert_eq!(now, 5_200, "the first round a TTL after the last renewal");
        assert_eq!(e.node_mut().shutdowns, 1);
    }

    #[test]
    fn the_ttl_without_renewal_counts_from_the_last_renewal_even_across_promote() {
        let m = MemCoordinator::new();
        let mut e = elector(&m, "a");
        e.node_mut().promote = None;
        e.step(1_000);
        m.set_link("a", Link::Cut);
        for t in (1_200..=6_000).step_by(200) {
            m.advance_to(t);
            assert_eq!(e.step(t).next, Next::At(t + 200), "PROMOTE still running");
        }
        e.node_mut().promote = Some(Promotion::Done("OK".into()));
        m.advance_to(6_200);
        let s = e.step(6_200);
        // Promoted, the key could not be updated, leading, and the epoch could not be
        // recorded (the link is cut).
        assert_eq!(kinds(&s), ["promoted", "lost", "leading", "leading"]);
        assert!(s.events[3].detail.starts_with("recording epoch"), "{s:?}");
        // The lease was granted at 1,000 and never renewed: the next round ends it.
        m.advance_to(7_200);
        let s = e.step(7_200);
        assert!(
            matches!(s.next, Next::Exit(ElectError::ShutDown { .. })),
            "{s:?}"
        );
    }

    #[test]
    fn a_primary_older_than_the_recorded_epoch_is_shut_down_not_led() {
        let m = MemCoordinator::new();
        let probe = m.client("probe");
        // A leads its primary at epoch 7 and records it.
        let mut a = elector(&m, "a");
        a.node_mut().role = Ok(NodeRole::Primary { epoch: 7 });
        a.step(1_000);
        assert!(
            matches!(a.phase(), Phase::Leading { .. }),
            "{:?}",
            a.phase()
        );
        assert_eq!(a.config().epoch_key, "/k.epoch");
        let rec = probe.get("/k.epoch").unwrap().expect("recorded");
        assert_eq!((rec.value, rec.lease), (b"7".to_vec(), 0));
        // A's elector dies; its lease expires and the key is free; the record stays.
        drop(a);
        m.advance_to(5_000);
        assert_eq!(probe.get("/k").unwrap(), None);
        // B's node still says primary, at epoch 3: it was fenced by the promotion to 7.
        let mut b = elector(&m, "b");
        b.node_mut().role = Ok(NodeRole::Primary { epoch: 3 });
        let s = b.step(5_000);
        assert_eq!(kinds(&s), ["fenced"]);
        assert!(
            matches!(
                s.next,
                Next::Exit(ElectError::Fenced {
                    epoch: 3,
                    recorded: 7,
                    ..
                })
            ),
            "{s:?}"
        );
        assert_eq!(b.node_mut().shutdowns, 1);
        assert_eq!(probe.get("/k").unwrap(), None, "the key is free again");
        // A primary at the recorded epoch (or newer) is led as before.
        let mut c = elector(&m, "c");
        c.node_mut().role = Ok(NodeRole::Primary { epoch: 7 });
        c.step(5_000);
        assert!(
            matches!(c.phase(), Phase::Leading { .. }),
            "{:?}",
            c.phase()
        );
    }

    #[test]
    fn a_restarted_elector_resumes_the_lease_its_primary_holds() {
        let m = MemCoordinator::new();
        let mut a = elector(&m, "a");
        a.step(1_000);
        a.step(1_200);
        let Phase::Leading { lease, .. } = a.phase() else {
            panic!()
        };
        drop(a);
        let mut again = elector(&m, "a");
        again.node_mut().role = Ok(NodeRole::Primary { epoch: 7 });
        let s = again.step(2_000);
        assert_eq!(kinds(&s), ["leading", "leading"]);
        assert_eq!(
            s.events[0].detail,
            "resumed the lease this node already held"
        );
        assert_eq!(
            again.phase(),
            Phase::Leading {
                lease,
                renewed_ms: 2_000
            }
        );
        assert_eq!(again.node_mut().promotes, 0);
    }

    #[test]
    fn a_leader_whose_node_stops_answering_revokes_and_stops() {
        let m = MemCoordinator::new();
        let mut e = elector(&m, "a");
        e.step(1_000);
        e.step(1_200);
        e.node_mut().role = Err("connection refused".into());
        let s = e.step(2_200);
        assert_eq!(kinds(&s), ["lost"]);
        assert!(matches!(s.next, Next::Exit(ElectError::NotBackup { .. })));
        assert_eq!(m.peek("/k"), None, "revoked so another can lead");
        // A node that became a backup again: campaign.
        let mut e = elector(&m, "b");
        e.step(3_000);
        e.step(3_200);
        e.node_mut().role = Ok(NodeRole::Backup);
        let s = e.step(4_200);
        assert_eq!(at(&s), 5_200);
        assert_eq!(e.phase(), Phase::Campaign);
        assert_eq!(e.node_mut().shutdowns, 0);
    }
}
