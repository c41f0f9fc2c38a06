//! The arbiter: which queued command starts next. Pure and deterministic: no threads, no
//! clock; the same calls give the same grants.
//!
//! # Structure (hardware-like, after the dissertation's emulator design)
//!
//! - Each queue belongs to one class. Each class has **one circular list** of its queues and a
//!   **head pointer** at the queue to serve next. A new queue joins its list just before the
//!   head, so it is visited last in the current cycle.
//! - Each queue has a **pending bit** (one bit per queue slot in a `Vec<u64>`), set while it
//!   holds commands, and each class counts its pending queues, so empty classes are skipped at
//!   once and empty queues by one bit test.
//! - The weights are **8-bit, 0's-based** registers as in NVMe's Arbitration feature: register
//!   `r` means `r + 1` units, so 1..=256. Under WRR a unit is a command; under DRR it is
//!   [`ArbiterConfig::drr_unit`] bytes (512 by default, so 256 units are 128 KiB).
//! - The **arbitration burst** (NVMe's AB, 3 bits) limits one visit of a queue to `2^burst`
//!   commands; 7 means no limit.
//!
//! # Policies
//!
//! **Urgent** queues come first under every policy: whenever one holds a command, an urgent
//! command is granted (strict priority). Among urgent queues: round robin, a visit serving up
//! to `2^burst` commands, or [`URGENT_VISIT_UNLIMITED`] (256) when the burst is unlimited, so
//! one backlogged urgent queue cannot shut out another. Urgent traffic can starve every other
//! class; the operator grants the class and answers for it.
//!
//! **RR** ignores the classes high/medium/low and the weights: one circular list of all
//! non-urgent queues, one command per visit (burst 1), so backlogged queues get equal numbers
//! of commands.
//!
//! **WRR and DRR** run rounds over the classes high, medium, low in that order. On entering a
//! class in a round:
//!
//! - WRR sets the class's budget to its weight (commands); what was left from the last round
//!   is dropped (NVMe's remaining weight is reloaded, not accumulated). Each command costs 1.
//! - DRR adds the class's quantum (weight x `drr_unit` bytes) to the class's **deficit**, which
//!   carries over between rounds (classic DRR). Each command costs its size in bytes (at least
//!   1, so zero-byte commands such as flushes cannot be served without limit).
//!
//! The class is then served while it has pending commands and its budget (deficit) is above
//! zero. A command is started whenever the budget is positive, **even if it costs more than
//! what is left**: the budget then goes negative, and under DRR the overdraft is carried into
//! the next rounds, which pay it back before the class is served again. So a deficit is never
//! below `1 - size` of the command that overdrew it, i.e. it stays above `-(largest command
//! size)` (property-tested). The alternative, keeping a command back until the deficit covers
//! it, gives the same long-run shares; starting it keeps the device busy and needs no look at
//! a second command. When the class has no pending command as the round leaves it, a positive
//! deficit is dropped (an idle class earns no credit, as in classic DRR) but a negative one is
//! kept (the overdraft is still owed). If in a whole round no class could be served (every
//! pending class still in overdraft after its quantum, possible under DRR when commands are
//! larger than quanta), the arbiter skips ahead the number of rounds that changes nothing and
//! serves in the first round that does, so `next` takes bounded work.
//!
//! Within a class, queues are served round robin, a **visit** at a time, from the head:
//!
//! - WRR: a visit serves up to `min(2^burst, class weight)` commands (so with unlimited burst
//!   one queue cannot take every round: a visit ends after one round's weight at most). Within
//!   a class, WRR is fair in commands, not in bytes.
//! - DRR: each queue also has a deficit of its own. Starting a visit adds the class's
//!   in-class quantum, `max(class quantum, largest command submitted to the class)`, and the
//!   visit serves while that deficit is positive (overdraft carried as above) and at most
//!   `2^burst` commands. Equal quanta for all queues of a class make the class fair in bytes
//!   between its queues; a quantum at least the largest command means every visit serves at
//!   least one command. A queue that empties keeps an overdraft but drops positive credit; a
//!   visit cut short by the burst limit keeps at most one quantum of credit.
//!
//! A visit ends when the queue empties, its allowance is used (burst, WRR count, DRR queue
//! deficit) or the queue is removed; the head then moves on. When the class's budget runs out
//! in the middle of a visit, the visit is **suspended**: the head stays, and the next round
//! resumes the same visit with what it had left.
//!
//! # Bounds (no starvation)
//!
//! With `W_j` the WRR weights: a class with a pending command is served before the others
//! together get more than `sum of W_j over the other classes` grants. Under DRR, with quanta
//! `Q_j`, commands of class `j` of at least `s_j` bytes and commands of the waiting class `c`
//! of at most `S_c` bytes, class `c` waits at most `ceil(S_c / Q_c) + 1` rounds, each giving
//! the other classes at most `ceil(Q_j / s_j)` grants each. (A queue removed or added meanwhile
//! does not change these: the bounds are per class.) Urgent commands come on top of both.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::str::FromStr;

use crate::class::{Class, HaqError};

/// The arbitration policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Policy {
    /// Round robin over all non-urgent queues, one command per visit.
    #[serde(rename = "rr")]
    RoundRobin,
    /// Weighted round robin over the classes, cost 1 per command.
    #[serde(rename = "wrr")]
    Wrr,
    /// Deficit round robin over the classes, cost = bytes.
    #[serde(rename = "drr")]
    Drr,
}

impl Policy {
    /// "rr", "wrr" or "drr".
    pub fn name(self) -> &'static str {
        match self {
            Policy::RoundRobin => "rr",
            Policy::Wrr => "wrr",
            Policy::Drr => "drr",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Policy {
    type Err = HaqError;

    fn from_str(s: &str) -> Result<Policy, HaqError> {
        match s.to_ascii_lowercase().as_str() {
            "rr" | "round-robin" => Ok(Policy::RoundRobin),
            "wrr" => Ok(Policy::Wrr),
            "drr" => Ok(Policy::Drr),
            _ => Err(HaqError::Parse {
                what: "arbitration policy",
                expected: "rr, wrr or drr",
                found: s.to_owned(),
            }),
        }
    }
}

/// The class weights as NVMe's 8-bit, 0's-based registers: each holds `count - 1`, so each
/// weight is 1..=256 units (commands under WRR, `drr_unit` bytes under DRR).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Weights {
    /// High's register (count - 1).
    pub high: u8,
    /// Medium's register (count - 1).
    pub medium: u8,
    /// Low's register (count - 1).
    pub low: u8,
}

impl Weights {
    /// Weights from counts, each 1..=256; anything else is an error naming the class.
    pub fn from_counts(high: u32, medium: u32, low: u32) -> Result<Weights, HaqError> {
        fn reg(what: &'static str, n: u32) -> Result<u8, HaqError> {
            if (1..=256).contains(&n) {
                Ok((n - 1) as u8)
            } else {
                Err(HaqError::InvalidConfig {
                    what,
                    expected: "a weight of 1..=256 units".into(),
                    found: n.to_string(),
                })
            }
        }
        Ok(Weights {
            high: reg("weights.high", high)?,
            medium: reg("weights.medium", medium)?,
            low: reg("weights.low", low)?,
        })
    }

    /// The weight of `c` in units (register + 1); urgent is not weighted: 0.
    pub fn count(&self, c: Class) -> u32 {
        match c {
            Class::Urgent => 0,
            Class::High => u32::from(self.high) + 1,
            Class::Medium => u32::from(self.medium) + 1,
            Class::Low => u32::from(self.low) + 1,
        }
    }
}

impl fmt::Display for Weights {
    /// "H,M,L" as counts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{},{},{}",
            self.count(Class::High),
            self.count(Class::Medium),
            self.count(Class::Low)
        )
    }
}

impl FromStr for Weights {
    type Err = HaqError;

    /// "H,M,L": three counts of 1..=256, e.g. "32,16,8".
    fn from_str(s: &str) -> Result<Weights, HaqError> {
        let bad = || HaqError::Parse {
            what: "weights",
            expected: "three counts H,M,L of 1..=256, e.g. 32,16,8",
            found: s.to_owned(),
        };
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        let [h, m, l] = parts.as_slice() else {
            return Err(bad());
        };
        let n = |p: &str| p.parse::<u32>().map_err(|_| bad());
        Weights::from_counts(n(h)?, n(m)?, n(l)?)
    }
}

/// The arbiter's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ArbiterConfig {
    /// The policy.
    pub policy: Policy,
    /// The class weights (ignored by RR).
    pub weights: Weights,
    /// Arbitration burst, NVMe's AB field: at most `2^burst` commands from one queue per
    /// visit; 7 = unlimited. 0..=7.
    pub burst: u8,
    /// DRR: bytes per weight unit (default 512, so 256 units = 128 KiB). At least 1.
    pub drr_unit: u32,
}

/// The burst value meaning "no limit".
pub const BURST_UNLIMITED: u8 = 7;

/// The most commands one visit of an urgent queue serves when the burst is unlimited (the
/// largest count an 8-bit 0's-based weight holds).
pub const URGENT_VISIT_UNLIMITED: u32 = 256;

impl ArbiterConfig {
    /// WRR with weights (32, 16, 8) and unlimited burst, as in the dissertation's scenarios.
    pub fn dissertation_wrr() -> Self {
        ArbiterConfig {
            policy: Policy::Wrr,
            weights: Weights {
                high: 31,
                medium: 15,
                low: 7,
            },
            burst: BURST_UNLIMITED,
            drr_unit: 512,
        }
    }

    /// DRR with quanta (128 KiB, 64 KiB, 32 KiB) = counts (256, 128, 64) of 512 B, unlimited
    /// burst, as in the dissertation's scenarios.
    pub fn dissertation_drr() -> Self {
        ArbiterConfig {
            policy: Policy::Drr,
            weights: Weights {
                high: 255,
                medium: 127,
                low: 63,
            },
            burst: BURST_UNLIMITED,
            drr_unit: 512,
        }
    }

    /// Plain round robin (weights equal and unused, burst 1).
    pub fn round_robin() -> Self {
        ArbiterConfig {
            policy: Policy::RoundRobin,
            weights: Weights {
                high: 0,
                medium: 0,
                low: 0,
            },
            burst: 0,
            drr_unit: 512,
        }
    }

    /// The weight of class `c` in the policy's cost unit: commands for WRR, bytes for DRR,
    /// 1 for RR (every queue equal); 0 for urgent (not weighted).
    pub fn weight_cost(&self, c: Class) -> u64 {
        if c == Class::Urgent {
            return 0;
        }
        match self.policy {
            Policy::RoundRobin => 1,
            Policy::Wrr => u64::from(self.weights.count(c)),
            Policy::Drr => u64::from(self.weights.count(c)) * u64::from(self.drr_unit),
        }
    }

    /// The most commands one visit of a queue may serve by the burst setting, `None` for
    /// unlimited.
    pub fn burst_limit(&self) -> Option<u32> {
        if self.burst >= BURST_UNLIMITED {
            None
        } else {
            Some(1 << self.burst)
        }
    }

    /// Check the ranges: burst 0..=7, drr_unit at least 1 (the weights are in range by
    /// their type).
    pub fn validate(&self) -> Result<(), HaqError> {
        if self.burst > BURST_UNLIMITED {
            return Err(HaqError::InvalidConfig {
                what: "burst",
                expected: "0..=7 (2^burst commands per visit, 7 = unlimited)".into(),
                found: self.burst.to_string(),
            });
        }
        if self.drr_unit == 0 {
            return Err(HaqError::InvalidConfig {
                what: "drr_unit",
                expected: "at least 1 byte per weight unit".into(),
                found: "0".into(),
            });
        }
        Ok(())
    }
}

/// A queue's identity. Identities are not reused while the arbiter lives (short of 2^32
/// queues created).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct QueueId(pub u32);

/// A submission refused: the queue holds its depth of commands (or does not exist). The
/// command comes back.
pub struct Full<T>(pub T);

impl<T> fmt::Debug for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Full(..)")
    }
}

/// A command to start now.
pub struct Grant<T> {
    /// The queue it came from.
    pub queue: QueueId,
    /// That queue's class.
    pub class: Class,
    /// Its size as submitted.
    pub bytes: u32,
    /// The command.
    pub item: T,
}

impl<T> fmt::Debug for Grant<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Grant")
            .field("queue", &self.queue)
            .field("class", &self.class)
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

struct Queue<T> {
    id: QueueId,
    class: Class,
    depth: u32,
    items: VecDeque<(u32, T)>,
    /// DRR: the queue's deficit (bytes, carried). WRR and RR: commands left in the current
    /// visit.
    credit: i64,
}

/// One circular list: a class's queues (or, under RR, all non-urgent queues).
#[derive(Debug, Default)]
struct Ring {
    /// Slot numbers in list order.
    slots: Vec<usize>,
    /// The list position of the queue to serve next.
    head: usize,
    /// The queue at `head` is in the middle of a visit.
    in_visit: bool,
    /// Commands served in the current visit.
    visit_used: u32,
    /// How many queues of the list hold commands.
    pending: u32,
    /// WRR: commands left this round. DRR: the class deficit in bytes.
    budget: i64,
    /// DRR: the largest cost submitted to the list's queues so far.
    max_cost: u64,
}

/// The arbiter over any number of queues. See the module documentation for the semantics.
pub struct Arbiter<T> {
    cfg: ArbiterConfig,
    slots: Vec<Option<Queue<T>>>,
    free: Vec<usize>,
    ids: HashMap<QueueId, usize>,
    next_id: u32,
    /// One pending bit per slot.
    pending: Vec<u64>,
    /// Ring 0: urgent; 1, 2, 3: high, medium, low (under RR, ring 1 holds every
    /// non-urgent queue).
    rings: [Ring; 4],
    /// The weighted ring the round is at (1..=3).
    cur: usize,
    /// The round has entered `cur` (its quantum is added).
    entered: bool,
    total: usize,
    rounds: u64,
}

impl<T> fmt::Debug for Arbiter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Arbiter")
            .field("config", &self.cfg)
            .field("queues", &self.ids.len())
            .field("queued", &self.total)
            .field("rounds", &self.rounds)
            .finish_non_exhaustive()
    }
}

impl<T> Arbiter<T> {
    /// An arbiter with no queues. Err if the configuration is out of range.
    pub fn new(cfg: ArbiterConfig) -> Result<Self, HaqError> {
        cfg.validate()?;
        Ok(Arbiter {
            cfg,
            slots: Vec::new(),
            free: Vec::new(),
            ids: HashMap::new(),
            next_id: 0,
            pending: Vec::new(),
            rings: Default::default(),
            cur: 1,
            entered: false,
            total: 0,
            rounds: 0,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ArbiterConfig {
        &self.cfg
    }

    fn ring_of(&self, class: Class) -> usize {
        match (self.cfg.policy, class) {
            (_, Class::Urgent) => 0,
            (Policy::RoundRobin, _) => 1,
            (_, c) => c.index(),
        }
    }

    fn is_pending(&self, slot: usize) -> bool {
        self.pending
            .get(slot / 64)
            .is_some_and(|w| w & (1 << (slot % 64)) != 0)
    }

    fn set_pending(&mut self, slot: usize, on: bool) {
        let w = slot / 64;
        if self.pending.len() <= w {
            self.pending.resize(w + 1, 0);
        }
        if on {
            self.pending[w] |= 1 << (slot % 64);
        } else {
            self.pending[w] &= !(1 << (slot % 64));
        }
    }

    /// A new empty queue of `class` holding at most `depth` commands (a depth of 0 is taken
    /// as 1). It joins its class's list just before the head.
    pub fn add_queue(&mut self, class: Class, depth: u32) -> QueueId {
        let mut id = QueueId(self.next_id);
        while self.ids.contains_key(&id) {
            id = QueueId(id.0.wrapping_add(1));
        }
        self.next_id = id.0.wrapping_add(1);
        let q = Queue {
            id,
            class,
            depth: depth.max(1),
            items: VecDeque::new(),
            credit: 0,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s] = Some(q);
                s
            }
            None => {
                self.slots.push(Some(q));
                self.slots.len() - 1
            }
        };
        self.set_pending(slot, false);
        self.ids.insert(id, slot);
        let ring = &mut self.rings[self.ring_of(class)];
        if ring.slots.is_empty() {
            ring.slots.push(slot);
            ring.head = 0;
        } else {
            ring.slots.insert(ring.head, slot);
            ring.head += 1;
        }
        id
    }

    /// Remove a queue; returns the commands still in it, oldest first (empty for a queue
    /// that does not exist).
    pub fn remove_queue(&mut self, q: QueueId) -> Vec<T> {
        let Some(slot) = self.ids.remove(&q) else {
            return Vec::new();
        };
        let Some(queue) = self.slots[slot].take() else {
            return Vec::new();
        };
        let was_pending = self.is_pending(slot);
        self.set_pending(slot, false);
        self.free.push(slot);
        let r = self.ring_of(queue.class);
        let ring = &mut self.rings[r];
        if let Some(pos) = ring.slots.iter().position(|&s| s == slot) {
            ring.slots.remove(pos);
            if pos < ring.head {
                ring.head -= 1;
            } else if pos == ring.head {
                ring.in_visit = false;
            }
            if ring.head >= ring.slots.len() {
                ring.head = 0;
            }
        }
        if was_pending {
            ring.pending -= 1;
        }
        self.total -= queue.items.len();
        queue.items.into_iter().map(|(_, t)| t).collect()
    }

    /// Queue a command of `bytes` bytes at the tail of `q`. `Err(Full(item))` when the queue
    /// holds its depth of commands, or does not exist.
    pub fn submit(&mut self, q: QueueId, bytes: u32, item: T) -> Result<(), Full<T>> {
        let Some(&slot) = self.ids.get(&q) else {
            return Err(Full(item));
        };
        let cost = self.cost(bytes);
        let Some(queue) = self.slots[slot].as_mut() else {
            return Err(Full(item));
        };
        if queue.items.len() >= queue.depth as usize {
            return Err(Full(item));
        }
        let was_empty = queue.items.is_empty();
        queue.items.push_back((bytes, item));
        let class = queue.class;
        self.total += 1;
        let r = self.ring_of(class);
        let ring = &mut self.rings[r];
        ring.max_cost = ring.max_cost.max(cost);
        if was_empty {
            ring.pending += 1;
            self.set_pending(slot, true);
        }
        Ok(())
    }

    fn cost(&self, bytes: u32) -> u64 {
        match self.cfg.policy {
            Policy::Drr => u64::from(bytes.max(1)),
            Policy::Wrr | Policy::RoundRobin => 1,
        }
    }

    /// The quantum a weighted ring gets per round (WRR: commands, DRR: bytes).
    fn quantum(&self, r: usize) -> i64 {
        // weight_cost is at most 256 * u32::MAX < 2^41.
        self.cfg.weight_cost(Class::ALL[r]) as i64
    }

    /// The next command to start, by the policy; `None` when every queue is empty.
    // The agreed name; the arbiter is not an iterator (`None` does not end it).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Grant<T>> {
        if self.total == 0 {
            return None;
        }
        if self.rings[0].pending > 0 {
            let limit = self.cfg.burst_limit().unwrap_or(URGENT_VISIT_UNLIMITED);
            return self.serve_plain(0, Some(limit));
        }
        match self.cfg.policy {
            Policy::RoundRobin => self.serve_plain(1, Some(1)),
            Policy::Wrr | Policy::Drr => self.serve_weighted(),
        }
    }

    /// The list position of the first pending queue at or after the head.
    fn first_pending(&self, r: usize) -> Option<usize> {
        let ring = &self.rings[r];
        let n = ring.slots.len();
        (0..n)
            .map(|i| (ring.head + i) % n)
            .find(|&p| self.is_pending(ring.slots[p]))
    }

    /// Take the front command of the queue at ring `r`'s head, keeping the pending bits and
    /// counts. Returns the grant and the cost charged.
    fn take_front(&mut self, r: usize) -> Option<(Grant<T>, i64, bool)> {
        let slot = *self.rings[r].slots.get(self.rings[r].head)?;
        let cost = {
            let queue = self.slots[slot].as_ref()?;
            let &(bytes, _) = queue.items.front()?;
            // At most u32::MAX: fits.
            self.cost(bytes) as i64
        };
        let queue = self.slots[slot].as_mut()?;
        let (bytes, item) = queue.items.pop_front()?;
        queue.credit -= cost;
        let emptied = queue.items.is_empty();
        let grant = Grant {
            queue: queue.id,
            class: queue.class,
            bytes,
            item,
        };
        self.total -= 1;
        self.rings[r].visit_used += 1;
        if emptied {
            self.set_pending(slot, false);
            self.rings[r].pending -= 1;
        }
        Some((grant, cost, emptied))
    }

    fn end_visit(&mut self, r: usize) {
        let ring = &mut self.rings[r];
        ring.in_visit = false;
        if !ring.slots.is_empty() {
            ring.head = (ring.head + 1) % ring.slots.len();
        }
    }

    /// Position the head on a pending queue and start its visit, unless a visit is under way.
    /// Returns the head queue's slot.
    fn begin_visit(&mut self, r: usize, allowance: impl FnOnce(i64) -> i64) -> Option<usize> {
        let head_ok = {
            let ring = &self.rings[r];
            ring.in_visit
                && ring
                    .slots
                    .get(ring.head)
                    .is_some_and(|&s| self.is_pending(s))
        };
        if head_ok {
            return self.rings[r].slots.get(self.rings[r].head).copied();
        }
        let pos = self.first_pending(r)?;
        let ring = &mut self.rings[r];
        ring.head = pos;
        ring.in_visit = true;
        ring.visit_used = 0;
        let slot = ring.slots[pos];
        let queue = self.slots[slot].as_mut()?;
        queue.credit = allowance(queue.credit);
        Some(slot)
    }

    /// Urgent and RR: round robin, up to `limit` commands per visit.
    fn serve_plain(&mut self, r: usize, limit: Option<u32>) -> Option<Grant<T>> {
        self.begin_visit(r, |_| 0)?;
        let (grant, _, emptied) = self.take_front(r)?;
        let used = self.rings[r].visit_used;
        if emptied || limit.is_some_and(|l| used >= l) {
            self.end_visit(r);
        }
        Some(grant)
    }

    /// Move the round on from the current class.
    fn leave_class(&mut self) {
        let r = self.cur;
        let ring = &mut self.rings[r];
        if ring.pending == 0 {
            match self.cfg.policy {
                Policy::Drr => ring.budget = ring.budget.min(0),
                _ => ring.budget = 0,
            }
        }
        self.cur = if r == 3 { 1 } else { r + 1 };
        if self.cur == 1 {
            self.rounds += 1;
        }
        self.entered = false;
    }

    fn serve_weighted(&mut self) -> Option<Grant<T>> {
        if (1..=3).all(|r| self.rings[r].pending == 0) {
            return None;
        }
        let mut idle_visits = 0;
        loop {
            let r = self.cur;
            if !self.entered {
                self.entered = true;
                if self.rings[r].pending > 0 {
                    let q = self.quantum(r);
                    let ring = &mut self.rings[r];
                    match self.cfg.policy {
                        Policy::Drr => ring.budget += q,
                        _ => ring.budget = q,
                    }
                }
            }
            if self.rings[r].pending > 0 && self.rings[r].budget > 0 {
                return self.serve_class(r);
            }
            self.leave_class();
            idle_visits += 1;
            if idle_visits == 3 {
                // A whole round served nothing: every pending class is in overdraft after its
                // quantum (DRR only; WRR always serves a pending class it enters). Skip the
                // rounds that would serve nothing either.
                self.skip_idle_rounds();
            }
            if idle_visits > 6 {
                // Unreachable by the argument above; never loop forever on a broken
                // invariant.
                return None;
            }
        }
    }

    /// Add the quanta of `m - 1` rounds at once, where `m` is the fewest rounds after which
    /// some pending class's deficit is positive: rounds before that serve nothing.
    fn skip_idle_rounds(&mut self) {
        let mut m = u64::MAX;
        for r in 1..=3 {
            let ring = &self.rings[r];
            if ring.pending == 0 {
                continue;
            }
            let q = self.quantum(r).max(1);
            let need = (-ring.budget.min(0)) / q + 1;
            m = m.min(need as u64);
        }
        if m == u64::MAX || m <= 1 {
            return;
        }
        for r in 1..=3 {
            if self.rings[r].pending > 0 {
                let q = self.quantum(r);
                self.rings[r].budget += (m as i64 - 1) * q;
            }
        }
        self.rounds += m - 1;
    }

    /// Serve one command of weighted class ring `r` (pending, budget > 0).
    fn serve_class(&mut self, r: usize) -> Option<Grant<T>> {
        let policy = self.cfg.policy;
        let burst = self.cfg.burst_limit();
        let class_quantum = self.quantum(r);
        let in_class_quantum = class_quantum.max(self.rings[r].max_cost as i64);
        self.begin_visit(r, |credit| match policy {
            Policy::Drr => credit.min(in_class_quantum) + in_class_quantum,
            _ => i64::from(burst.unwrap_or(u32::MAX)).min(class_quantum),
        })?;
        let (grant, cost, emptied) = self.take_front(r)?;
        let ring = &mut self.rings[r];
        ring.budget -= cost;
        let used = ring.visit_used;
        let slot = ring.slots[ring.head];
        let queue = self.slots[slot].as_mut()?;
        if emptied {
            if policy == Policy::Drr {
                queue.credit = queue.credit.min(0);
            }
            self.end_visit(r);
        } else if queue.credit <= 0 || burst.is_some_and(|l| used >= l) {
            self.end_visit(r);
        }
        Some(grant)
    }

    /// Commands queued in `q` (0 for a queue that does not exist).
    pub fn queued(&self, q: QueueId) -> usize {
        self.queue(q).map_or(0, |x| x.items.len())
    }

    /// Commands queued in all queues.
    pub fn total_queued(&self) -> usize {
        self.total
    }

    /// The class of `q`, `None` if it does not exist.
    pub fn class_of(&self, q: QueueId) -> Option<Class> {
        self.queue(q).map(|x| x.class)
    }

    /// The depth of `q`, `None` if it does not exist.
    pub fn depth(&self, q: QueueId) -> Option<u32> {
        self.queue(q).map(|x| x.depth)
    }

    /// The number of queues.
    pub fn queue_count(&self) -> usize {
        self.ids.len()
    }

    /// DRR: `q`'s own deficit in bytes; WRR/RR: commands left in its current visit. `None`
    /// if it does not exist.
    pub fn queue_deficit(&self, q: QueueId) -> Option<i64> {
        self.queue(q).map(|x| x.credit)
    }

    /// DRR: class `c`'s deficit in bytes; WRR: its commands left this round. 0 for urgent
    /// and under RR.
    pub fn class_deficit(&self, c: Class) -> i64 {
        if c == Class::Urgent || self.cfg.policy == Policy::RoundRobin {
            return 0;
        }
        self.rings[c.index()].budget
    }

    /// Arbitration rounds over the weighted classes begun so far.
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    fn queue(&self, q: QueueId) -> Option<&Queue<T>> {
        let slot = *self.ids.get(&q)?;
        self.slots.get(slot)?.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drr(h: u32, m: u32, l: u32, unit: u32) -> ArbiterConfig {
        ArbiterConfig {
            policy: Policy::Drr,
            weights: Weights::from_counts(h, m, l).unwrap(),
            burst: BURST_UNLIMITED,
            drr_unit: unit,
        }
    }

    #[test]
    fn weights_are_zeros_based() {
        let w = Weights::from_counts(256, 1, 8).unwrap();
        assert_eq!((w.high, w.medium, w.low), (255, 0, 7));
        assert_eq!(w.count(Class::High), 256);
        assert_eq!(w.count(Class::Medium), 1);
        assert_eq!(w.count(Class::Urgent), 0);
        assert!(Weights::from_counts(0, 1, 1).is_err());
        let e = Weights::from_counts(1, 257, 1).unwrap_err().to_string();
        assert!(e.contains("weights.medium") && e.contains("257"), "{e}");
        assert_eq!("32,16,8".parse::<Weights>().unwrap(), w_counts(32, 16, 8));
        assert!("32,16".parse::<Weights>().is_err());
        assert!("32,x,8".parse::<Weights>().is_err());
        assert_eq!(w_counts(32, 16, 8).to_string(), "32,16,8");
    }

    fn w_counts(h: u32, m: u32, l: u32) -> Weights {
        Weights::from_counts(h, m, l).unwrap()
    }

    #[test]
    fn presets_and_validation() {
        let w = ArbiterConfig::dissertation_wrr();
        assert_eq!(w.weight_cost(Class::High), 32);
        assert_eq!(w.weight_cost(Class::Low), 8);
        let d = ArbiterConfig::dissertation_drr();
        assert_eq!(d.weight_cost(Class::High), 128 * 1024);
        assert_eq!(d.weight_cost(Class::Medium), 64 * 1024);
        assert_eq!(d.weight_cost(Class::Low), 32 * 1024);
        assert_eq!(d.weight_cost(Class::Urgent), 0);
        assert_eq!(ArbiterConfig::round_robin().weight_cost(Class::Low), 1);
        for c in [w, d, ArbiterConfig::round_robin()] {
            c.validate().unwrap();
        }
        let mut bad = d;
        bad.burst = 8;
        assert!(Arbiter::<()>::new(bad).is_err());
        bad.burst = 3;
        bad.drr_unit = 0;
        assert!(Arbiter::<()>::new(bad).is_err());
        assert_eq!("DRR".parse::<Policy>().unwrap(), Policy::Drr);
        assert!("fifo".parse::<Policy>().is_err());
    }

    #[test]
    fn full_at_depth_and_unknown_queue_refuses() {
        let mut a = Arbiter::new(ArbiterConfig::dissertation_wrr()).unwrap();
        let q = a.add_queue(Class::High, 2);
        a.submit(q, 1, 1).unwrap();
        a.submit(q, 1, 2).unwrap();
        let Err(Full(x)) = a.submit(q, 1, 3) else {
            panic!("third submit to a depth-2 queue accepted")
        };
        assert_eq!(x, 3);
        assert_eq!(a.queued(q), 2);
        assert_eq!(a.next().unwrap().item, 1);
        a.submit(q, 1, 3).unwrap();
        assert!(a.submit(QueueId(99), 1, 4).is_err());
        let z = a.add_queue(Class::Low, 0);
        assert_eq!(a.depth(z), Some(1));
    }

    #[test]
    fn remove_queue_returns_its_commands_in_order() {
        let mut a = Arbiter::new(ArbiterConfig::dissertation_drr()).unwrap();
        let q1 = a.add_queue(Class::Medium, 8);
        let q2 = a.add_queue(Class::Medium, 8);
        for i in 0..5 {
            a.submit(q1, 4096, i).unwrap();
            a.submit(q2, 4096, 100 + i).unwrap();
        }
        let g = a.next().unwrap();
        let (gone, kept) = if g.queue == q1 { (q1, q2) } else { (q2, q1) };
        let base = if gone == q1 { 0 } else { 100 };
        assert_eq!(
            a.remove_queue(gone),
            vec![base + 1, base + 2, base + 3, base + 4]
        );
        assert_eq!(a.total_queued(), 5);
        assert_eq!(a.class_of(gone), None);
        assert!(a.remove_queue(gone).is_empty());
        let rest: Vec<_> = std::iter::from_fn(|| a.next()).collect();
        assert_eq!(rest.len(), 5);
        assert!(rest.iter().all(|g| g.queue == kept));
        assert!(a.next().is_none());
    }

    #[test]
    fn urgent_preempts_every_round() {
        let mut a = Arbiter::new(ArbiterConfig::dissertation_wrr()).unwrap();
        let h = a.add_queue(Class::High, 64);
        let u = a.add_queue(Class::Urgent, 64);
        for _ in 0..40 {
            a.submit(h, 4096, 'h').unwrap();
        }
        assert_eq!(a.next().unwrap().item, 'h');
        a.submit(u, 4096, 'u').unwrap();
        a.submit(u, 4096, 'u').unwrap();
        assert_eq!(a.next().unwrap().class, Class::Urgent);
        assert_eq!(a.next().unwrap().class, Class::Urgent);
        assert_eq!(a.next().unwrap().item, 'h');
    }

    #[test]
    fn urgent_queues_take_turns_even_with_unlimited_burst() {
        let mut a = Arbiter::new(ArbiterConfig::dissertation_drr()).unwrap();
        let u1 = a.add_queue(Class::Urgent, 1000);
        let u2 = a.add_queue(Class::Urgent, 1000);
        for _ in 0..600 {
            a.submit(u1, 4096, 1).unwrap();
            a.submit(u2, 4096, 2).unwrap();
        }
        let seq: Vec<u8> = (0..1024).map(|_| a.next().unwrap().item).collect();
        let first = seq[0];
        for (i, chunk) in seq.chunks(256).enumerate() {
            let want = if i % 2 == 0 { first } else { 3 - first };
            assert!(chunk.iter().all(|&x| x == want), "visit {i}");
        }
    }

    #[test]
    fn rr_splits_equally_ignoring_classes() {
        let mut a = Arbiter::new(ArbiterConfig::round_robin()).unwrap();
        let qs = [
            a.add_queue(Class::High, 1000),
            a.add_queue(Class::Low, 1000),
            a.add_queue(Class::Medium, 1000),
            a.add_queue(Class::Low, 1000),
        ];
        for (i, &q) in qs.iter().enumerate() {
            for _ in 0..100 {
                a.submit(q, 4096 << i, i).unwrap();
            }
        }
        let mut n = [0; 4];
        for _ in 0..200 {
            n[a.next().unwrap().item] += 1;
        }
        assert_eq!(n, [50; 4]);
    }

    #[test]
    fn drr_command_larger_than_quanta_overdraws_then_pays_back() {
        // Quanta 512 B each; low's commands are 64 KiB: low is served once, then owes 127
        // rounds of its quantum; high (512 B commands) is served once per round meanwhile.
        let mut a = Arbiter::new(drr(1, 1, 1, 512)).unwrap();
        let h = a.add_queue(Class::High, 10_000);
        let l = a.add_queue(Class::Low, 10_000);
        for _ in 0..1000 {
            a.submit(h, 512, 'h').unwrap();
        }
        for _ in 0..10 {
            a.submit(l, 65536, 'l').unwrap();
        }
        let seq: String = (0..260).map(|_| a.next().unwrap().item).collect();
        assert_eq!(&seq[..2], "hl");
        assert!(a.class_deficit(Class::Low) > -65536);
        let lows: Vec<usize> = seq.match_indices('l').map(|(i, _)| i).collect();
        assert_eq!(lows, vec![1, 130, 259]);
    }

    #[test]
    fn drr_idle_rounds_are_skipped_in_one_call() {
        // One low command of 4 GiB - 1 at 1 B quanta: billions of idle rounds between its
        // grants, computed at once.
        let mut a = Arbiter::new(drr(1, 1, 1, 1)).unwrap();
        let l = a.add_queue(Class::Low, 4);
        a.submit(l, u32::MAX, 1).unwrap();
        a.submit(l, u32::MAX, 2).unwrap();
        assert_eq!(a.next().unwrap().item, 1);
        assert_eq!(a.next().unwrap().item, 2);
        assert!(a.rounds() >= u64::from(u32::MAX) - 1);
        assert!(a.class_deficit(Class::Low) > -i64::from(u32::MAX));
    }

    #[test]
    fn wrr_unlimited_burst_alternates_queues_of_a_class_by_round() {
        let mut a = Arbiter::new(ArbiterConfig::dissertation_wrr()).unwrap();
        let q1 = a.add_queue(Class::High, 1000);
        let q2 = a.add_queue(Class::High, 1000);
        for _ in 0..200 {
            a.submit(q1, 4096, 1).unwrap();
            a.submit(q2, 65536, 2).unwrap();
        }
        let seq: Vec<u8> = (0..128).map(|_| a.next().unwrap().item).collect();
        // 32 per visit (the class weight), alternating.
        for (i, chunk) in seq.chunks(32).enumerate() {
            assert!(chunk.iter().all(|&x| x == chunk[0]), "visit {i}: {chunk:?}");
            assert_ne!(chunk[0], seq[((i + 1) % 4) * 32]);
        }
    }

    #[test]
    fn burst_limits_a_visit() {
        let mut cfg = ArbiterConfig::dissertation_wrr();
        cfg.burst = 2; // 4 commands per visit
        let mut a = Arbiter::new(cfg).unwrap();
        let q1 = a.add_queue(Class::High, 1000);
        let q2 = a.add_queue(Class::High, 1000);
        for _ in 0..100 {
            a.submit(q1, 1, 1).unwrap();
            a.submit(q2, 1, 2).unwrap();
        }
        let seq: Vec<u8> = (0..16).map(|_| a.next().unwrap().item).collect();
        let first = seq[0];
        let second = 3 - first;
        let want: Vec<u8> = [first, second, first, second]
            .iter()
            .flat_map(|&x| [x; 4])
            .collect();
        assert_eq!(seq, want);
    }
}
