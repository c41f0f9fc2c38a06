//! Deterministic simulation of failover: three electors (`replicated::elect`) driving three
//! simulated nodes over one `MemCoordinator`, under a random schedule of faults drawn from a
//! seed, on one thread and a simulated clock, so a seed replays exactly.
//!
//! The nodes model what the replication protocol guarantees (`docs/replication.md`, "Two
//! fences"), not its bytes. Each node has a copy with a promised epoch that survives crashes.
//! PROMOTE needs a majority of the copies to answer: it takes the epoch one above every
//! promise it sees and promises it on every copy that answers; the node becomes primary at
//! that epoch when PROMOTE ends (later, if PROMOTE is slow), if a majority of the copies still
//! hold its promise, and stops otherwise. A primary replicates to the live copies that hold its
//! promise when it is promoted; a backup that crashes is dropped from that set for good (a
//! restarted backup does not rejoin a running primary). It can commit a write while at least W
//! of its backups are up and still promise its epoch.
//!
//! Faults: node crashes, elector crashes and restarts, cut links
//! between the coordinator and an elector (nothing gets through, or requests do and answers
//! do not) and their healing, a lease expired by the coordinator, slow PROMOTEs. A node that
//! is down (crashed, shut down by its elector, stopped by a fenced PROMOTE) is restarted as a
//! backup after 0.2-5 s, as a supervisor would; an elector that exits is restarted after
//! 0.1-3 s, with its node if that is down, as the operator is told to.
//!
//! Checked after every step:
//! - at most one node can commit writes, and no epoch is taken by two promotions;
//! - at most one elector leads (or promotes) under a lease that is alive, and the leader key,
//!   when present, is under that lease;
//! - a running elector whose node is primary does not go on once its lease is gone: the node
//!   stops within a tick plus a PROMOTE poll of the later of the lease's end and the promotion;
//! - liveness: once the faults stop and every link heals, within `LIVE_MS` some node is
//!   primary and its elector leads under the lease that holds the key. Whether that primary
//!   can also commit is counted, not required: a primary whose backups crashed waits for them
//!   to rejoin, which is not built yet (issue 25's "Rejoin").
//!
//! `cargo test` runs `SEEDS` seeds; `KAVACH_ELECT_SEEDS=100000` runs more. Three canaries
//! must each fail on some seed: copies that do not check epochs (two primaries commit), and
//! electors over a coordinator client that lies (a key that always reads as free with a create
//! that always wins, a renewal that always succeeds); the checks must catch each on some seed. A failing seed prints the seed
//! and the history.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::rc::Rc;

use replicated::{
    CoordError, Coordinator, Elector, ElectorConfig, KeyValue, Link, MemClient, MemCoordinator,
    Next, Node, NodeRole, Phase, Promotion,
};

const NODES: usize = 3;
const MAJORITY: usize = NODES / 2 + 1;
/// Backups that must persist a write.
const W: usize = 1;
const TTL_S: u64 = 1;
const KEY: &str = "/kavach/sim/leader";
/// Faults are drawn during this much simulated time.
const FAULT_MS: u64 = 30_000;
/// After the faults stop, some node must be a writable primary within this.
const LIVE_MS: u64 = 15_000;
/// Seeds in `cargo test`.
const SEEDS: u64 = 1_000;

/// The seeded generator of `pmem` (SplitMix64), with the two draws the schedule uses.
struct Rng(pmem::rng::SplitMix64);

impl Rng {
    /// Uniform in `lo..hi` (`hi > lo`).
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.0.below(hi - lo)
    }

    fn below(&mut self, n: usize) -> usize {
        self.0.below(n as u64) as usize
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Down,
    Backup,
    Primary(u64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pending {
    Running { epoch: u64, done_at: u64 },
    Answer(Promotion),
}

#[derive(Debug)]
struct SimNodeState {
    state: State,
    /// The copy's promised epoch; survives crashes.
    promised: u64,
    /// When the node last became primary.
    primary_since: u64,
    promote: Option<Pending>,
    /// How long the next PROMOTE takes.
    promote_ms: u64,
    /// As primary: the copies it replicates to, fixed at its promotion. A backup that
    /// crashes is dropped and does not come back (a restarted backup is not re-added).
    backups: Vec<usize>,
}

#[derive(Debug)]
struct World {
    now: u64,
    nodes: Vec<SimNodeState>,
    /// Every promotion that made a primary: (epoch, node).
    primaries: Vec<(u64, usize)>,
    history: Vec<String>,
    /// Whether copies check epochs (false: a canary).
    epoch_check: bool,
}

impl World {
    fn log(&mut self, what: String) {
        let line = format!("{:>7} ms  {what}", self.now);
        self.history.push(line);
    }

    fn alive(&self) -> Vec<usize> {
        (0..NODES)
            .filter(|&i| self.nodes[i].state != State::Down)
            .collect()
    }

    fn can_commit(&self, i: usize) -> bool {
        let State::Primary(e) = self.nodes[i].state else {
            return false;
        };
        let acks = self.nodes[i]
            .backups
            .iter()
            .filter(|&&j| self.nodes[j].state != State::Down)
            .filter(|&&j| self.nodes[j].promised == e || !self.epoch_check)
            .count();
        acks >= W
    }

    fn crash(&mut self, i: usize) {
        for n in &mut self.nodes {
            n.backups.retain(|&j| j != i);
        }
        let n = &mut self.nodes[i];
        n.state = State::Down;
        if n.promote.is_some() {
            n.promote = Some(Pending::Answer(Promotion::Failed(
                "the connection was lost".into(),
            )));
        }
    }

    /// PROMOTEs whose time has come end.
    fn finish_promotions(&mut self) {
        for i in 0..NODES {
            let Some(Pending::Running { epoch, done_at }) = self.nodes[i].promote.clone() else {
                continue;
            };
            if done_at > self.now {
                continue;
            }
            let holding = (0..NODES)
                .filter(|&j| self.nodes[j].state != State::Down)
                .filter(|&j| self.nodes[j].promised == epoch || !self.epoch_check)
                .count();
            let answer = if holding >= MAJORITY {
                self.nodes[i].state = State::Primary(epoch);
                let check = self.epoch_check;
                self.nodes[i].backups = (0..NODES)
                    .filter(|&j| j != i && self.nodes[j].state != State::Down)
                    .filter(|&j| self.nodes[j].promised == epoch || !check)
                    .collect();
                self.nodes[i].primary_since = self.now;
                self.primaries.push((epoch, i));
                self.log(format!("node {i} is primary at epoch {epoch}"));
                Promotion::Done("OK".into())
            } else {
                self.crash(i);
                self.log(format!(
                    "node {i}: PROMOTE to {epoch} fenced, the node stops"
                ));
                Promotion::Refused(format!("epoch {epoch} lost its majority"))
            };
            self.nodes[i].promote = Some(Pending::Answer(answer));
        }
    }

    fn next_promotion_end(&self) -> Option<u64> {
        self.nodes
            .iter()
            .filter_map(|n| match n.promote {
                Some(Pending::Running { done_at, .. }) => Some(done_at),
                _ => None,
            })
            .min()
    }
}

/// A node as its elector sees it.
struct SimNode {
    id: usize,
    world: Rc<RefCell<World>>,
}

impl Node for SimNode {
    fn role(&mut self) -> Result<NodeRole, String> {
        let w = self.world.borrow();
        match w.nodes[self.id].state {
            State::Down => Err(format!("node {}: connection refused", self.id)),
            State::Backup => Ok(NodeRole::Backup),
            State::Primary(epoch) => Ok(NodeRole::Primary { epoch }),
        }
    }

    fn start_promote(&mut self) {
        let mut w = self.world.borrow_mut();
        let i = self.id;
        if w.nodes[i].state == State::Down {
            w.nodes[i].promote = Some(Pending::Answer(Promotion::Failed(
                "connection refused".into(),
            )));
            return;
        }
        let alive = w.alive();
        if alive.len() < MAJORITY {
            w.log(format!(
                "node {i}: PROMOTE refused, {} copies answer",
                alive.len()
            ));
            w.nodes[i].promote = Some(Pending::Answer(Promotion::Refused(
                "too few copies answer".into(),
            )));
            return;
        }
        let epoch = 1 + alive
            .iter()
            .map(|&j| w.nodes[j].promised)
            .max()
            .unwrap_or(0);
        if w.epoch_check {
            for &j in &alive {
                w.nodes[j].promised = epoch;
            }
        } else {
            w.nodes[i].promised = epoch;
        }
        let done_at = w.now + w.nodes[i].promote_ms;
        w.nodes[i].promote_ms = 0;
        w.nodes[i].promote = Some(Pending::Running { epoch, done_at });
        w.log(format!(
            "node {i}: PROMOTE took epoch {epoch} on {alive:?}, ends at {done_at}"
        ));
        drop(w);
        self.world.borrow_mut().finish_promotions();
    }

    fn poll_promote(&mut self) -> Promotion {
        let mut w = self.world.borrow_mut();
        match w.nodes[self.id].promote.take() {
            None => Promotion::Failed("no PROMOTE was sent".into()),
            Some(Pending::Answer(p)) => p,
            Some(running) => {
                w.nodes[self.id].promote = Some(running);
                Promotion::Running
            }
        }
    }

    fn shutdown(&mut self) {
        let mut w = self.world.borrow_mut();
        let i = self.id;
        w.log(format!("node {i}: SHUTDOWN"));
        w.crash(i);
        w.nodes[i].promote = None;
    }
}

/// How the electors' coordinator client lies (the canaries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Canary {
    Honest,
    /// The key always reads as free and every create says it won: the elector promotes
    /// without holding the key.
    IgnoresTheKey,
    /// Every renewal says the lease is alive: the elector leads past its lease.
    RenewalAlwaysSucceeds,
    /// An honest elector over copies that do not check epochs: PROMOTE promises nothing and
    /// a backup acknowledges any primary.
    NoEpochFence,
}

struct Client {
    inner: MemClient,
    canary: Canary,
}

impl Coordinator for Client {
    fn get(&self, key: &str) -> Result<Option<KeyValue>, CoordError> {
        let r = self.inner.get(key);
        match self.canary {
            Canary::IgnoresTheKey => r.map(|_| None),
            _ => r,
        }
    }
    fn grant(&self, ttl: u64) -> Result<i64, CoordError> {
        self.inner.grant(ttl)
    }
    fn keepalive(&self, id: i64) -> Result<i64, CoordError> {
        let r = self.inner.keepalive(id);
        match self.canary {
            Canary::RenewalAlwaysSucceeds => Ok(TTL_S as i64),
            _ => r,
        }
    }
    fn create(&self, key: &str, value: &[u8], lease: i64) -> Result<bool, CoordError> {
        let r = self.inner.create(key, value, lease);
        match self.canary {
            Canary::IgnoresTheKey => r.map(|_| true),
            _ => r,
        }
    }
    fn update(&self, key: &str, value: &[u8], lease: i64) -> Result<bool, CoordError> {
        self.inner.update(key, value, lease)
    }
    fn record_if_held(
        &self,
        guard: &str,
        lease: i64,
        key: &str,
        value: &[u8],
    ) -> Result<bool, CoordError> {
        self.inner.record_if_held(guard, lease, key, value)
    }
    fn revoke(&self, id: i64) -> Result<(), CoordError> {
        self.inner.revoke(id)
    }
}

struct Slot {
    elector: Option<(Elector<Client, SimNode>, u64)>,
    /// When an exited or crashed elector comes back.
    restart_at: u64,
}

struct Sim {
    seed: u64,
    canary: Canary,
    rng: Rng,
    coord: MemCoordinator,
    world: Rc<RefCell<World>>,
    slots: Vec<Slot>,
    /// Node restarts due: (time, node).
    node_restarts: Vec<(u64, usize)>,
    /// Link heals due: (time, elector).
    heals: Vec<(u64, usize)>,
    next_fault: u64,
    cfg: ElectorConfig,
    /// How long after the faults stopped a leader was found.
    recovered_in: u64,
    /// Whether that leader's node could commit.
    writable: bool,
    /// Whether that leader's epoch is older than a promise some copy holds.
    stale: bool,
}

fn name(i: usize) -> String {
    format!("e{i}")
}

impl Sim {
    fn new(seed: u64, canary: Canary) -> Sim {
        let world = Rc::new(RefCell::new(World {
            now: 0,
            nodes: (0..NODES)
                .map(|_| SimNodeState {
                    state: State::Backup,
                    promised: 0,
                    primary_since: 0,
                    promote: None,
                    promote_ms: 0,
                    backups: Vec::new(),
                })
                .collect(),
            primaries: Vec::new(),
            history: Vec::new(),
            epoch_check: canary != Canary::NoEpochFence,
        }));
        let cfg = ElectorConfig::new(KEY, "node", "node", TTL_S);
        let mut rng = Rng(pmem::rng::SplitMix64::new(seed));
        let mut sim = Sim {
            seed,
            canary,
            next_fault: rng.range(0, 2_000),
            rng,
            coord: MemCoordinator::new(),
            world,
            slots: Vec::new(),
            node_restarts: Vec::new(),
            heals: Vec::new(),
            cfg,
            recovered_in: 0,
            writable: false,
            stale: false,
        };
        for i in 0..NODES {
            let e = sim.make_elector(i, 0);
            sim.slots.push(Slot {
                elector: Some(e),
                restart_at: 0,
            });
        }
        sim
    }

    fn make_elector(&self, i: usize, now: u64) -> (Elector<Client, SimNode>, u64) {
        let mut cfg = self.cfg.clone();
        cfg.node = format!("node {i}");
        cfg.advertise = format!("node{i}:6379");
        let client = Client {
            inner: self.coord.client(&name(i)),
            canary: self.canary,
        };
        let node = SimNode {
            id: i,
            world: self.world.clone(),
        };
        let e = Elector::new(cfg, client, node);
        let due = e.first_step_at(now);
        (e, due)
    }

    fn log(&self, what: String) {
        self.world.borrow_mut().log(what);
    }

    fn now(&self) -> u64 {
        self.world.borrow().now
    }

    fn fail(&self, why: &str) -> String {
        let w = self.world.borrow();
        let mut s = format!(
            "seed {} ({:?}): {why}\nhistory ({} lines, the last 200):\n",
            self.seed,
            self.canary,
            w.history.len()
        );
        for l in w.history.iter().rev().take(200).rev() {
            let _ = writeln!(s, "{l}");
        }
        s
    }

    /// One fault, drawn.
    fn fault(&mut self) {
        let now = self.now();
        let i = self.rng.below(NODES);
        match self.rng.below(8) {
            0 if self.world.borrow().nodes[i].state != State::Down => {
                self.log(format!("FAULT node {i} crashes"));
                self.world.borrow_mut().crash(i);
                let at = now + self.rng.range(200, 5_000);
                self.node_restarts.push((at, i));
            }
            1 | 2 => {
                let link = if self.rng.below(3) == 0 {
                    Link::AnswersLost
                } else {
                    Link::Cut
                };
                self.log(format!("FAULT link e{i} {link:?}"));
                self.coord.set_link(&name(i), link);
                let at = now + self.rng.range(100, 4_000);
                self.heals.push((at, i));
            }
            3 => {
                if let Some(kv) = self.coord.peek(KEY) {
                    self.log(format!("FAULT the coordinator expires lease {}", kv.lease));
                    self.coord.expire(kv.lease);
                }
            }
            4 => {
                let ms = self.rng.range(0, 4 * TTL_S * 1000);
                self.log(format!("FAULT node {i}'s next PROMOTE takes {ms} ms"));
                self.world.borrow_mut().nodes[i].promote_ms = ms;
            }
            5 if self.slots[i].elector.is_some() => {
                self.slots[i].elector = None;
                self.log(format!("FAULT elector {i} crashes"));
                self.slots[i].restart_at = now + self.rng.range(100, 3_000);
            }
            _ => {}
        }
    }

    /// The next time anything is due.
    fn next_time(&self, live_deadline: u64) -> u64 {
        let mut t = live_deadline;
        let now = self.now();
        if now < FAULT_MS {
            t = t.min(self.next_fault);
        }
        for s in &self.slots {
            t = t.min(match &s.elector {
                Some((_, due)) => *due,
                None => s.restart_at,
            });
        }
        for &(at, _) in self.node_restarts.iter().chain(&self.heals) {
            t = t.min(at);
        }
        if let Some(at) = self.world.borrow().next_promotion_end() {
            t = t.min(at);
        }
        t.max(now)
    }

    fn run(&mut self) -> Result<(), String> {
        let live_deadline = FAULT_MS + LIVE_MS;
        let mut quiet_logged = false;
        loop {
            let t = self.next_time(live_deadline);
            self.coord.advance_to(t);
            self.world.borrow_mut().now = t;
            if t >= FAULT_MS && !quiet_logged {
                quiet_logged = true;
                self.log("the faults stop; every link heals".into());
                for i in 0..NODES {
                    self.coord.set_link(&name(i), Link::Up);
                }
                self.heals.clear();
            }
            self.world.borrow_mut().finish_promotions();
            self.check(t)?;
            if t >= FAULT_MS
                && let Some(i) = self.leader()
            {
                self.recovered_in = t - FAULT_MS;
                let w = self.world.borrow();
                self.writable = w.can_commit(i);
                let newest = w.nodes.iter().map(|n| n.promised).max().unwrap_or(0);
                self.stale = matches!(w.nodes[i].state, State::Primary(e) if e < newest);
                return Ok(());
            }
            if t >= live_deadline {
                return Err(self.fail(&format!(
                    "no primary under the leader key's lease {LIVE_MS} ms after the faults \
                     stopped"
                )));
            }
            // Due restarts and heals.
            let due: Vec<usize> = self
                .node_restarts
                .iter()
                .filter(|(at, _)| *at <= t)
                .map(|&(_, i)| i)
                .collect();
            self.node_restarts.retain(|(at, _)| *at > t);
            for i in due {
                self.restart_node(i);
            }
            let healed: Vec<usize> = self
                .heals
                .iter()
                .filter(|(at, _)| *at <= t)
                .map(|&(_, i)| i)
                .collect();
            self.heals.retain(|(at, _)| *at > t);
            for i in healed {
                if !self.heals.iter().any(|&(_, j)| j == i) {
                    self.log(format!("link e{i} heals"));
                    self.coord.set_link(&name(i), Link::Up);
                }
            }
            if t < FAULT_MS && self.next_fault <= t {
                self.fault();
                self.next_fault = t + self.rng.range(50, 1_500);
                self.check(t)?;
            }
            // A node that stopped (crashed, shut down, fenced) is restarted by its
            // supervisor after a while, as a backup.
            for i in 0..NODES {
                let down = self.world.borrow().nodes[i].state == State::Down;
                if down && !self.node_restarts.iter().any(|&(_, j)| j == i) {
                    let at = t + self.rng.range(200, 5_000);
                    self.node_restarts.push((at, i));
                }
            }
            for i in 0..NODES {
                if self.slots[i].elector.is_none() {
                    if self.slots[i].restart_at <= t {
                        self.restart_elector(i, t);
                    }
                    continue;
                }
                let Some((e, due)) = self.slots[i].elector.as_mut() else {
                    continue;
                };
                if *due > t {
                    continue;
                }
                let step = e.step(t);
                let mut lines: Vec<String> =
                    step.events.iter().map(|ev| format!("e{i} {ev}")).collect();
                match step.next {
                    Next::At(next) => *due = next,
                    Next::Exit(why) => {
                        lines.push(format!("e{i} exits: {why}"));
                        self.slots[i].elector = None;
                        self.slots[i].restart_at = t + self.rng.range(100, 3_000);
                    }
                }
                for l in lines {
                    self.log(l);
                }
                self.check(t)?;
            }
        }
    }

    fn restart_node(&mut self, i: usize) {
        let mut w = self.world.borrow_mut();
        if w.nodes[i].state == State::Down {
            w.nodes[i].state = State::Backup;
            w.nodes[i].promote = None;
            w.log(format!("node {i} restarts as a backup"));
        }
    }

    fn restart_elector(&mut self, i: usize, now: u64) {
        self.restart_node(i);
        self.log(format!("elector {i} restarts"));
        let e = self.make_elector(i, now);
        self.slots[i].elector = Some(e);
    }

    /// The elector that leads a primary under the lease holding the key.
    fn leader(&self) -> Option<usize> {
        let key_lease = self.coord.peek(KEY)?.lease;
        let w = self.world.borrow();
        (0..NODES).find(|&i| {
            let leading = matches!(
                self.slots[i].elector.as_ref().map(|(e, _)| e.phase()),
                Some(Phase::Leading { lease, .. }) if lease == key_lease
            );
            leading && matches!(w.nodes[i].state, State::Primary(_))
        })
    }

    fn check(&self, now: u64) -> Result<(), String> {
        let w = self.world.borrow();
        let committers: Vec<usize> = (0..NODES).filter(|&i| w.can_commit(i)).collect();
        if committers.len() > 1 {
            drop(w);
            return Err(self.fail(&format!("nodes {committers:?} can all commit writes")));
        }
        let mut epochs: Vec<u64> = w.primaries.iter().map(|&(e, _)| e).collect();
        epochs.sort_unstable();
        if let Some(d) = epochs.windows(2).find(|p| p[0] == p[1]) {
            let e = d[0];
            drop(w);
            return Err(self.fail(&format!("epoch {e} was taken by two promotions")));
        }
        let mut holders = Vec::new();
        let bound = self.cfg.tick_ms + self.cfg.promote_poll_ms();
        for (i, s) in self.slots.iter().enumerate() {
            let Some((e, _)) = &s.elector else { continue };
            let lease = match e.phase() {
                Phase::Promoting { lease, .. } | Phase::Leading { lease, .. } => lease,
                _ => continue,
            };
            if self.coord.lease_alive(lease) {
                holders.push((i, lease));
            }
            if let (State::Primary(_), Some(ended)) =
                (w.nodes[i].state, self.coord.lease_ended_at(lease))
            {
                // The elector cannot know of a lease the coordinator dropped early: it has
                // a TTL from its last renewal that reached the coordinator.
                let unrenewed = self
                    .coord
                    .lease_renewed_at(lease)
                    .map_or(0, |r| r + self.cfg.ttl_ms());
                let since = ended.max(unrenewed).max(w.nodes[i].primary_since);
                if now > since + bound {
                    drop(w);
                    return Err(self.fail(&format!(
                        "node {i} is still primary {} ms after its elector's lease {lease} \
                         ended and a TTL passed without renewal (bound {bound} ms)",
                        now - since
                    )));
                }
            }
        }
        drop(w);
        if holders.len() > 1 {
            return Err(self.fail(&format!("electors {holders:?} all lead under live leases")));
        }
        if let (Some(kv), Some(&(i, lease))) = (self.coord.peek(KEY), holders.first())
            && kv.lease != lease
        {
            return Err(self.fail(&format!(
                "elector {i} leads under lease {lease} but the key is under lease {}",
                kv.lease
            )));
        }
        Ok(())
    }
}

fn seeds() -> u64 {
    std::env::var("KAVACH_ELECT_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEEDS)
}

#[test]
fn failover_holds_its_invariants_over_many_seeds() {
    let n = seeds();
    let (mut promotions, mut writable, mut stale, mut slowest) = (0usize, 0u64, 0u64, 0u64);
    for seed in 0..n {
        let mut sim = Sim::new(seed, Canary::Honest);
        if let Err(report) = sim.run() {
            panic!("{report}");
        }
        promotions += sim.world.borrow().primaries.len();
        writable += u64::from(sim.writable);
        stale += u64::from(sim.stale);
        slowest = slowest.max(sim.recovered_in);
    }
    // The schedules must actually fail over, or the checks would see nothing.
    assert!(
        promotions as u64 >= 2 * n,
        "{promotions} promotions over {n} seeds: the faults barely move the leadership"
    );
    eprintln!(
        "{n} seeds, {promotions} promotions; a leader at most {slowest} ms after the faults \
         stopped; {writable} of them could commit, {stale} led at an epoch older than a \
         promise some copy holds"
    );
}

fn first_failing_seed(canary: Canary, max: u64) -> Option<(u64, String)> {
    (0..max).find_map(|seed| Sim::new(seed, canary).run().err().map(|r| (seed, r)))
}

#[test]
fn canary_elector_that_ignores_the_key_is_caught() {
    let (seed, report) = first_failing_seed(Canary::IgnoresTheKey, 200)
        .expect("an elector that promotes without winning the key passed 200 seeds");
    eprintln!(
        "caught on seed {seed}: {}",
        report.lines().next().unwrap_or("")
    );
}

#[test]
fn canary_renewal_that_always_succeeds_is_caught() {
    let (seed, report) = first_failing_seed(Canary::RenewalAlwaysSucceeds, 200)
        .expect("an elector that leads past its lease passed 200 seeds");
    eprintln!(
        "caught on seed {seed}: {}",
        report.lines().next().unwrap_or("")
    );
}

#[test]
fn canary_copies_without_an_epoch_fence_are_caught() {
    let (seed, report) = first_failing_seed(Canary::NoEpochFence, 200)
        .expect("two primaries without an epoch fence passed 200 seeds");
    // Caught by the epoch checks, not by the lease checks (the electors are honest).
    assert!(
        report.contains("can all commit") || report.contains("taken by two promotions"),
        "{report}"
    );
    eprintln!(
        "caught on seed {seed}: {}",
        report.lines().next().unwrap_or("")
    );
}

#[test]
fn a_seed_replays_exactly() {
    let history = |seed| {
        let mut sim = Sim::new(seed, Canary::Honest);
        let _ = sim.run();
        let mut h = Vec::new();
        h.clone_from(&sim.world.borrow().history);
        h
    };
    let a = history(7);
    assert!(a.len() > 20, "a run of {} lines", a.len());
    assert_eq!(a, history(7));
    assert_ne!(a, history(8));
}
