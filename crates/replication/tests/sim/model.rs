//! The simulated cluster: nodes with simulated persistent media, a lossy network with delays
//! and partitions, clients, and the checks. Everything is driven by one seeded generator and
//! runs on one thread, so a seed replays exactly.
//!
//! Concurrency is modelled without threads: a message batch is delivered when the sender
//! collects its answers ([`Peers::finish`]), and before (or in the middle of) delivering it the
//! world may run a *nested* event: another node's whole recovery, a client write on another
//! primary, a crash, a partition... So a recovery's probes can be answered before a rival's
//! promises and its repair writes after them, a primary's write can reach some backups before
//! a takeover and the rest after it, a node can lose power in the middle of a recovery, and so
//! on. Delayed messages are delivered at some later step, after everything in between.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use log::{ForcePolicy, Log, LogError, LogOptions};
use pmem::rng::SplitMix64;
use pmem::{CrashPlan, Medium, SimConfig, SimMedium, Uuid};
use replication::copy::serve;
use replication::proto::split_frame;
use replication::{
    Copy, FlushOrder, Host, Peers, Quorum, RecoverOptions, Recovered, Repair, Replicator, Request,
    Response, recover,
};

pub(crate) type M = Arc<SimMedium>;

/// Bytes of each log ring: small, so that logs with cleanup wrap around.
pub(crate) const RING: usize = 64 << 10;
/// Bytes of the log region (and of each node's medium).
pub(crate) const LEN: usize = log::layout::RING_OFFSET + RING;
/// Nested events run at most this deep.
const DEPTH_MAX: u32 = 2;
/// A medium armed to crash mid-operation does so within this many stores, flushes and fences.
const ARMED_EVENTS_MAX: u64 = 300;

/// How many copies may be lost (wiped, or damaged by bit flips) in one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LossBudget {
    /// What the protocol guarantees: see [`quorum_loss_budget`].
    Quorum,
    /// The wording, N - W (more than the quorums guarantee for some N and W).
    NMinusW,
    /// W: an acknowledged write is on W + 1 copies, so W may be lost.
    Write,
    /// No copy is lost.
    None,
}

impl LossBudget {
    /// Its name in `SIM_LOSS`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            LossBudget::Quorum => "quorum",
            LossBudget::NMinusW => "n-w",
            LossBudget::Write => "w",
            LossBudget::None => "none",
        }
    }

    /// The budget `SIM_LOSS` names (default: `Quorum`).
    pub(crate) fn from_env() -> LossBudget {
        let v = std::env::var("SIM_LOSS").unwrap_or_default();
        [LossBudget::NMinusW, LossBudget::Write, LossBudget::None]
            .into_iter()
            .find(|b| b.name() == v)
            .unwrap_or(LossBudget::Quorum)
    }
}

/// How to run a seed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Opts {
    /// Passed to every recovery (false: the canary).
    pub(crate) epoch_check: bool,
    /// Permanent copy losses allowed.
    pub(crate) budget: LossBudget,
    /// Losses may also be bit flips in a copy's live ring (else only wiped copies).
    pub(crate) flips: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            epoch_check: true,
            budget: LossBudget::Quorum,
            flips: false,
        }
    }
}

/// Copies that may be lost for good while every acknowledged write survives and no two
/// primaries share an epoch, with N backups and a write quorum of W.
///
/// A lost (wiped) copy comes back empty, at the new-log epoch, with its fence forgotten; it
/// counts toward a recovery's R only when every copy answers. An acknowledged write is on W + 1
/// copies, so at most W may be lost; recovery reads R >= N - W + 1 copies that hold a history,
/// so one of them holds the write whatever else was lost. Two recoveries' promise sets share
/// 2R - N - 1 copies; if all of those lost their fence, the second could take the first one's
/// epoch, so with W at least a majority (N=2,W=2) losses are held to what that allows. The
/// budget is therefore min(W, N - W), the N - W wherever W + 1 copies can survive it,
/// or 2R - N - 2 where that is more (N=1,W=1 and N=3,W=3: one loss).
/// (`w_losses_can_break_the_fence` pins a seed where W losses give two primaries one epoch.)
pub(crate) fn quorum_loss_budget(q: Quorum) -> usize {
    let (n, w, r) = (q.backups(), q.write(), q.read());
    let epochs = (2 * r).saturating_sub(n + 2);
    w.min(n - w).max(epochs.min(w))
}

/// The random shape of one run.
#[derive(Debug, Clone)]
pub(crate) struct Params {
    pub(crate) seed: u64,
    pub(crate) quorum: Quorum,
    pub(crate) order: FlushOrder,
    pub(crate) budget: usize,
    /// Where `budget` came from.
    pub(crate) loss: LossBudget,
    pub(crate) steps: usize,
    /// Per million messages: request lost, answer lost, request delayed.
    pub(crate) lose_req: u32,
    pub(crate) lose_ans: u32,
    pub(crate) delay: u32,
    /// Per million answer collections: run a nested event first.
    pub(crate) nest: u32,
    /// Per million restarts: the medium will crash within `ARMED_EVENTS_MAX` events.
    pub(crate) arm: u32,
    /// Per million stores: the cache line is evicted (durable) at once.
    pub(crate) evict: u32,
    /// Primaries clean up old records (the ring wraps around).
    pub(crate) cleanup: bool,
    pub(crate) payload_max: usize,
    /// Every node starts with an empty copy (else only node 0; the others get one from `Init`).
    pub(crate) all_created: bool,
    pub(crate) epoch_check: bool,
    pub(crate) flips: bool,
}

impl Params {
    pub(crate) fn new(seed: u64, opts: Opts) -> Params {
        let mut r = SplitMix64::new(seed ^ 0x005e_ed0f_51b0_1a7e);
        let n = 1 + r.below(4) as usize;
        let w = 1 + r.below(n as u64) as usize;
        let quorum = Quorum::new(n, w).expect("quorum");
        let pick = |r: &mut SplitMix64, v: &[u32]| v[r.below(v.len() as u64) as usize];
        let budget = match opts.budget {
            LossBudget::Quorum => quorum_loss_budget(quorum),
            LossBudget::NMinusW => n - w,
            LossBudget::Write => w,
            LossBudget::None => 0,
        };
        let cleanup = r.below(2) == 0;
        Params {
            seed,
            quorum,
            order: FlushOrder::ALL[r.below(3) as usize],
            budget,
            loss: opts.budget,
            steps: 40 + r.below(121) as usize,
            lose_req: pick(&mut r, &[0, 10_000, 40_000, 100_000]),
            lose_ans: pick(&mut r, &[0, 10_000, 40_000, 100_000]),
            delay: pick(&mut r, &[0, 20_000, 60_000]),
            nest: pick(&mut r, &[0, 50_000, 150_000]),
            arm: pick(&mut r, &[0, 200_000, 500_000]),
            evict: pick(&mut r, &[0, 50_000, 500_000]),
            cleanup,
            payload_max: if cleanup {
                [300, 3000, 8000][r.below(3) as usize]
            } else {
                300
            },
            all_created: r.below(10) < 7,
            epoch_check: opts.epoch_check,
            flips: opts.flips,
        }
    }
}

/// What happened, summed over runs.
#[derive(Debug, Clone, Default)]
pub(crate) struct Counters {
    pub(crate) steps: u64,
    pub(crate) nested: u64,
    pub(crate) nested_elections: u64,
    pub(crate) appends_ok: u64,
    pub(crate) appends_err: u64,
    pub(crate) zombie_appends_refused: u64,
    pub(crate) zombie_appends_acked: u64,
    pub(crate) recoveries_ok: u64,
    pub(crate) recoveries_err: u64,
    pub(crate) recoveries_died: u64,
    pub(crate) zombie_recoveries: u64,
    pub(crate) rebuilt_local: u64,
    pub(crate) repairs_full: u64,
    pub(crate) repairs_delta: u64,
    pub(crate) repairs_failed: u64,
    pub(crate) backups_compared: u64,
    pub(crate) fenced_answers: u64,
    pub(crate) error_answers: u64,
    pub(crate) lost_requests: u64,
    pub(crate) lost_answers: u64,
    pub(crate) blocked: u64,
    pub(crate) unreachable: u64,
    pub(crate) delayed_sent: u64,
    pub(crate) delayed_delivered: u64,
    pub(crate) delayed_applied: u64,
    pub(crate) delayed_fenced: u64,
    pub(crate) crashes: u64,
    pub(crate) armed_crashes: u64,
    pub(crate) restarts: u64,
    pub(crate) wipes: u64,
    pub(crate) flips: u64,
    pub(crate) cleanups: u64,
    pub(crate) wrapped_histories: u64,
    pub(crate) step_downs: u64,
    pub(crate) heartbeats: u64,
    pub(crate) partitions: u64,
    pub(crate) final_records: u64,
    pub(crate) final_acked: u64,
}

impl Counters {
    pub(crate) fn add(&mut self, o: &Counters) {
        macro_rules! sum {
            ($($f:ident),*) => { $(self.$f += o.$f;)* };
        }
        sum!(
            steps,
            nested,
            nested_elections,
            appends_ok,
            appends_err,
            zombie_appends_refused,
            zombie_appends_acked,
            recoveries_ok,
            recoveries_err,
            recoveries_died,
            zombie_recoveries,
            rebuilt_local,
            repairs_full,
            repairs_delta,
            repairs_failed,
            backups_compared,
            fenced_answers,
            error_answers,
            lost_requests,
            lost_answers,
            blocked,
            unreachable,
            delayed_sent,
            delayed_delivered,
            delayed_applied,
            delayed_fenced,
            crashes,
            armed_crashes,
            restarts,
            wipes,
            flips,
            cleanups,
            wrapped_histories,
            step_downs,
            heartbeats,
            partitions,
            final_records,
            final_acked
        );
    }
}

/// The result of one seed.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) params: Params,
    pub(crate) failure: Option<String>,
    pub(crate) trace: Vec<String>,
    pub(crate) counters: Counters,
}

/// A backup's copy, served to whichever primary asks.
#[derive(Debug)]
struct BackupHost {
    copy: Copy<M>,
}

impl Host for BackupHost {
    type M = M;

    fn copy(&mut self) -> Option<&mut Copy<M>> {
        Some(&mut self.copy)
    }

    fn init(&mut self, uuid: Uuid, region_len: u64) -> Result<(), String> {
        if region_len != LEN as u64 {
            return Err(format!("region of {region_len} bytes, this node has {LEN}"));
        }
        let m = self.copy.medium().clone();
        self.copy = Copy::create(m, 0, LEN, uuid).map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// A node serving as primary (possibly a zombie that another primary has fenced off).
#[derive(Debug)]
struct Primary {
    log: Log<M>,
    rep: Arc<Replicator<SimPeers>>,
    medium: M,
    epoch: u64,
    inc: u64,
    failed: AtomicBool,
}

#[derive(Debug)]
enum Node {
    /// Powered off; the medium image it will boot from.
    Down(Vec<u8>),
    /// Up, serving its copy to primaries.
    Backup(BackupHost),
    /// Running a recovery (its copy is the recovery's; it serves nothing).
    Candidate(M),
    /// Primary: its copy is its log's; it serves nothing.
    Primary(Arc<Primary>),
}

#[derive(Debug)]
struct Delayed {
    from: usize,
    from_inc: u64,
    to: usize,
    req: Request,
}

/// The world when a recovery started.
#[derive(Debug)]
struct Start {
    incs: Vec<u64>,
    committed: BTreeSet<u64>,
    max_epoch: u64,
}

/// An append's times on the logical clock, for the real-time order check.
#[derive(Debug, Clone, Copy)]
struct Acked {
    id: u64,
    lsn: u64,
    started: u64,
    acked: u64,
}

#[derive(Debug)]
pub(crate) struct World {
    p: Params,
    opts: RecoverOptions,
    rng: SplitMix64,
    nodes: Vec<Node>,
    /// Bumped whenever a node crashes, restarts, loses its copy or changes role: messages of an
    /// earlier incarnation are from a dead process.
    inc: Vec<u64>,
    /// A node is running an operation (a recovery, or a client call on its log).
    busy: Vec<bool>,
    /// Who last delivered a request that changes a copy: (node, incarnation).
    last_writer: Vec<Option<(usize, u64)>>,
    cut: BTreeSet<(usize, usize)>,
    delayed: Vec<Delayed>,
    depth: u32,
    faults: bool,
    clock: u64,
    next_id: u64,
    /// Every payload a client tried to append: id -> length.
    payload_len: BTreeMap<u64, usize>,
    /// The LSN each payload was seen at (an ack or any recovered history).
    lsn_of: BTreeMap<u64, u64>,
    acked: Vec<Acked>,
    /// Acknowledged, or in the history of a successful recovery: must never be lost.
    committed: BTreeSet<u64>,
    /// A cleanup was attempted: may be gone.
    cleaned: BTreeSet<u64>,
    /// Epoch -> node, for every successful recovery.
    epochs: BTreeMap<u64, usize>,
    ack_epochs: BTreeMap<u64, usize>,
    recovered_once: bool,
    losses: usize,
    last_recovery: Option<(usize, Recovered)>,
    step: usize,
    failure: Option<String>,
    trace: Vec<String>,
    /// Trace every delivered message (`SIM_VERBOSE`).
    verbose: bool,
    c: Counters,
}

type Shared = Arc<Mutex<World>>;

fn lock(sh: &Shared) -> MutexGuard<'_, World> {
    sh.lock().unwrap_or_else(|p| p.into_inner())
}

fn payload(id: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&id.to_le_bytes());
    let mut x = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(x as u8);
    }
    v
}

/// A history: (LSN, ring offset, payload) of every record.
type History = Vec<(u64, u64, Vec<u8>)>;

fn history<X: Medium>(log: &Log<X>) -> Result<History, String> {
    log.records()
        .map(|r| {
            r.map(|r| (r.lsn, r.offset, r.payload))
                .map_err(|e| e.to_string())
        })
        .collect()
}

fn copy_history(m: &M) -> Result<History, String> {
    let opts = LogOptions {
        read_only: true,
        ..LogOptions::default()
    };
    let (log, _) = Log::open(m, 0, LEN, &opts).map_err(|e| format!("cannot open: {e}"))?;
    history(&log)
}

fn ids(h: &[(u64, u64, Vec<u8>)]) -> Vec<u64> {
    h.iter()
        .map(|(_, _, p)| u64::from_le_bytes(p[..8].try_into().unwrap_or([0xff; 8])))
        .collect()
}

fn summary(h: &History) -> String {
    let v: Vec<String> = h
        .iter()
        .zip(ids(h))
        .map(|((lsn, _, _), id)| format!("{lsn}:#{id}"))
        .collect();
    if v.len() <= 24 {
        format!("[{}]", v.join(" "))
    } else {
        format!(
            "[{} ... {}] ({} records)",
            v[..8].join(" "),
            v[v.len() - 8..].join(" "),
            v.len()
        )
    }
}

/// Serve one request as a real backup would: through the wire encoding both ways.
fn serve_wire(host: &mut BackupHost, req: &Request) -> Response {
    let frame = req.encode();
    let (tag, body) = split_frame(&frame).expect("request frame");
    let req = Request::decode(tag, body).expect("request decodes");
    let resp = serve(host, &req);
    let frame = resp.encode();
    let (tag, body) = split_frame(&frame).expect("response frame");
    Response::decode(tag, body).expect("response decodes")
}

fn changes_copy(req: &Request) -> bool {
    matches!(
        req,
        Request::Init { .. }
            | Request::Promise { .. }
            | Request::Write { .. }
            | Request::Zero { .. }
    )
}

/// The transport of one node acting as primary (or candidate): backup `i` is the `i`-th other
/// node.
pub(crate) struct SimPeers {
    world: Weak<Mutex<World>>,
    me: usize,
    inc: u64,
    map: Vec<usize>,
    queue: Vec<(usize, Request)>,
}

impl std::fmt::Debug for SimPeers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimPeers")
            .field("me", &self.me)
            .field("inc", &self.inc)
            .field("map", &self.map)
            .finish()
    }
}

impl Peers for SimPeers {
    fn count(&self) -> usize {
        self.map.len()
    }

    fn name(&self, i: usize) -> String {
        format!("n{}", self.map[i])
    }

    fn send(&mut self, i: usize, req: &Request) -> bool {
        self.queue.push((i, req.clone()));
        true
    }

    fn finish(&mut self) -> Vec<(usize, Option<Response>)> {
        let batch = std::mem::take(&mut self.queue);
        let Some(sh) = self.world.upgrade() else {
            return batch.into_iter().map(|(i, _)| (i, None)).collect();
        };
        let (sent, split) = {
            let mut w = lock(&sh);
            let sent = w.alive(self.me, self.inc);
            let split = if w.can_nest() {
                w.rng.below(batch.len() as u64 + 1) as usize
            } else {
                usize::MAX
            };
            (sent, split)
        };
        let n = batch.len();
        let mut out = Vec::with_capacity(n);
        for (j, (i, req)) in batch.into_iter().enumerate() {
            if j == split {
                maybe_nest(&sh);
            }
            let mut w = lock(&sh);
            let r = if sent && w.failure.is_none() {
                w.deliver(self.me, self.inc, self.map[i], &req, false)
            } else {
                None
            };
            // A sender that died meanwhile hears nothing.
            let r = r.filter(|_| w.alive(self.me, self.inc));
            out.push((i, r));
        }
        if split == n {
            maybe_nest(&sh);
        }
        out
    }

    fn disconnect(&mut self, _i: usize) {}
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Append(usize),
    Elect(usize),
    Crash(usize),
    Restart(usize),
    Cut(usize, usize),
    Isolate(usize),
    Heal,
    HealOne,
    Deliver,
    Wipe(usize),
    Flip(usize),
    Cleanup(usize),
    StepDown(usize),
    Heartbeat(usize),
}

impl World {
    /// Node `i`'s primary, marked busy for an operation; `None` if it is not a primary or is
    /// already running one.
    fn claim_primary(&mut self, i: usize) -> Option<Arc<Primary>> {
        let Node::Primary(p) = &self.nodes[i] else {
            return None;
        };
        if self.busy[i] {
            return None;
        }
        let p = Arc::clone(p);
        self.busy[i] = true;
        Some(p)
    }

    fn new(p: Params) -> World {
        let mut rng = SplitMix64::new(p.seed);
        let nodes_n = p.quorum.copies();
        let uuid = Uuid(
            rng.next_u64()
                .to_le_bytes()
                .repeat(2)
                .try_into()
                .expect("16"),
        );
        let nodes = (0..nodes_n)
            .map(|i| {
                let cfg = SimConfig {
                    seed: rng.next_u64(),
                    crash: CrashPlan::Never,
                    evict_per_million: p.evict,
                    ..SimConfig::default()
                };
                let m: M = Arc::new(SimMedium::new(LEN, cfg));
                let copy = if i == 0 || p.all_created {
                    Copy::create(m, 0, LEN, uuid).expect("create a copy")
                } else {
                    Copy::new(m, 0, LEN)
                };
                Node::Backup(BackupHost { copy })
            })
            .collect();
        World {
            opts: RecoverOptions {
                epoch_check: p.epoch_check,
                full_wait: Duration::ZERO,
            },
            rng,
            nodes,
            inc: vec![0; nodes_n],
            busy: vec![false; nodes_n],
            last_writer: vec![None; nodes_n],
            cut: BTreeSet::new(),
            delayed: Vec::new(),
            depth: 0,
            faults: true,
            clock: 0,
            next_id: 1,
            payload_len: BTreeMap::new(),
            lsn_of: BTreeMap::new(),
            acked: Vec::new(),
            committed: BTreeSet::new(),
            cleaned: BTreeSet::new(),
            epochs: BTreeMap::new(),
            ack_epochs: BTreeMap::new(),
            recovered_once: false,
            losses: 0,
            last_recovery: None,
            step: 0,
            failure: None,
            trace: Vec::new(),
            verbose: std::env::var("SIM_VERBOSE").is_ok(),
            c: Counters::default(),
            p,
        }
    }

    fn note(&mut self, s: String) {
        let indent = "    ".repeat(self.depth as usize);
        self.trace.push(format!("{:>4} {indent}{s}", self.step));
    }

    fn fail(&mut self, s: String) {
        if self.failure.is_none() {
            self.note(format!("FAILURE: {s}"));
            self.failure = Some(s);
        }
    }

    /// The highest epoch a successful recovery took so far (0: none).
    fn max_epoch(&self) -> u64 {
        self.epochs.keys().next_back().copied().unwrap_or(0)
    }

    fn can_nest(&self) -> bool {
        self.faults && self.failure.is_none() && self.depth < DEPTH_MAX && self.p.nest > 0
    }

    fn medium(&self, i: usize) -> Option<&M> {
        match &self.nodes[i] {
            Node::Down(_) => None,
            Node::Backup(h) => Some(h.copy.medium()),
            Node::Candidate(m) => Some(m),
            Node::Primary(p) => Some(&p.medium),
        }
    }

    /// The incarnation `inc` of node `i` is still running (no crash, restart or role change).
    fn alive(&self, i: usize, inc: u64) -> bool {
        self.inc[i] == inc && self.medium(i).is_some_and(|m| !m.crashed())
    }

    fn cut_between(&self, a: usize, b: usize) -> bool {
        self.cut.contains(&(a.min(b), a.max(b)))
    }

    /// Node `i` lost power: it is down with what its medium kept.
    fn power_off(&mut self, i: usize, why: &str) {
        let Some(m) = self.medium(i) else { return };
        let img = m.power_fail();
        self.nodes[i] = Node::Down(img);
        self.inc[i] += 1;
        self.note(format!("n{i} loses power ({why})"));
    }

    /// Deliver a request from `from` to `to`; the answer the sender gets.
    fn deliver(
        &mut self,
        from: usize,
        from_inc: u64,
        to: usize,
        req: &Request,
        late: bool,
    ) -> Option<Response> {
        if self.cut_between(from, to) {
            self.c.blocked += 1;
            return None;
        }
        if !matches!(&self.nodes[to], Node::Backup(h) if !h.copy.medium().crashed()) {
            self.c.unreachable += 1;
            return None;
        }
        if !late && self.faults {
            if self.rng.chance(self.p.lose_req) {
                self.c.lost_requests += 1;
                return None;
            }
            if self.rng.chance(self.p.delay) {
                self.c.delayed_sent += 1;
                self.delayed.push(Delayed {
                    from,
                    from_inc,
                    to,
                    req: req.clone(),
                });
                return None;
            }
        }
        let Node::Backup(h) = &mut self.nodes[to] else {
            unreachable!()
        };
        let resp = serve_wire(h, req);
        let crashed = h.copy.medium().crashed();
        if changes_copy(req) {
            self.last_writer[to] = Some((from, from_inc));
        }
        if crashed {
            self.c.armed_crashes += 1;
            self.power_off(
                to,
                &format!("crashed serving a {} from n{from}", req.name()),
            );
            return None;
        }
        match &resp {
            Response::Fenced { .. } => self.c.fenced_answers += 1,
            Response::Error(_) => self.c.error_answers += 1,
            _ => {}
        }
        if self.verbose {
            let what = match &resp {
                Response::Info(Some(i)) => format!(
                    "info epoch {} promised {} next {} head {} used {}{}",
                    i.epoch,
                    i.promised,
                    i.next_lsn,
                    i.head,
                    i.used,
                    if i.damaged { " damaged" } else { "" }
                ),
                Response::Data(d) => format!("{} bytes", d.len()),
                other => format!("{other:?}"),
            };
            let detail = match req {
                Request::Write { epoch, extents, .. } => format!(
                    " epoch {epoch} {:?}",
                    extents
                        .iter()
                        .map(|e| (e.offset, e.bytes.len()))
                        .collect::<Vec<_>>()
                ),
                Request::Zero { epoch, offset, len } => {
                    format!(" epoch {epoch} [{offset}, +{len})")
                }
                Request::Promise { epoch } => format!(" {epoch}"),
                Request::Read { offset, len } => format!(" [{offset}, +{len})"),
                _ => String::new(),
            };
            self.note(format!("  n{from} -> n{to} {}{detail}: {what}", req.name()));
        }
        if late {
            self.c.delayed_delivered += 1;
            match &resp {
                Response::Ack => self.c.delayed_applied += 1,
                Response::Fenced { .. } => self.c.delayed_fenced += 1,
                _ => {}
            }
            let what = match &resp {
                Response::Ack => "applied".to_string(),
                Response::Fenced { promised } => format!("fenced (promised {promised})"),
                Response::Info(Some(i)) => format!("answered, promised {}", i.promised),
                Response::Error(e) => format!("refused: {e}"),
                _ => "answered".to_string(),
            };
            let epoch = match req {
                Request::Write { epoch, .. }
                | Request::Zero { epoch, .. }
                | Request::Promise { epoch } => format!(" epoch {epoch}"),
                _ => String::new(),
            };
            self.note(format!(
                "late {}{epoch} from n{from} reaches n{to}: {what}",
                req.name()
            ));
            return None;
        }
        if self.faults && self.rng.chance(self.p.lose_ans) {
            self.c.lost_answers += 1;
            return None;
        }
        Some(resp)
    }

    fn pick(&mut self) -> Option<Event> {
        let n = self.nodes.len();
        let up: Vec<usize> = (0..n)
            .filter(|&i| !matches!(self.nodes[i], Node::Down(_)))
            .collect();
        let down: Vec<usize> = (0..n)
            .filter(|&i| matches!(self.nodes[i], Node::Down(_)))
            .collect();
        let idle: Vec<usize> = up
            .iter()
            .copied()
            .filter(|&i| !self.busy[i] && !matches!(self.nodes[i], Node::Candidate(_)))
            .collect();
        let prims: Vec<(usize, u64, bool)> = idle
            .iter()
            .filter_map(|&i| match &self.nodes[i] {
                Node::Primary(p) => Some((i, p.epoch, p.failed.load(Ordering::Relaxed))),
                _ => None,
            })
            .collect();
        let healthy = prims.iter().any(|p| !p.2);
        let mut menu: Vec<(u64, Event)> = Vec::new();
        let r = &mut self.rng;
        let one = |r: &mut SplitMix64, v: &[usize]| v[r.below(v.len() as u64) as usize];
        if !prims.is_empty() {
            // Mostly the newest primary; sometimes an older one (a zombie, if it is one).
            let newest = prims.iter().max_by_key(|p| p.1).expect("non-empty").0;
            let any = prims[r.below(prims.len() as u64) as usize].0;
            let target = if r.below(10) < 7 { newest } else { any };
            menu.push((40, Event::Append(target)));
            menu.push((3, Event::Heartbeat(any)));
            menu.push((if prims[0].2 { 6 } else { 2 }, Event::StepDown(any)));
            if self.p.cleanup {
                menu.push((3, Event::Cleanup(target)));
            }
        }
        if !idle.is_empty() {
            menu.push((if healthy { 6 } else { 30 }, Event::Elect(one(r, &idle))));
        }
        if !up.is_empty() {
            menu.push((5, Event::Crash(one(r, &up))));
        }
        if !down.is_empty() {
            menu.push((10, Event::Restart(one(r, &down))));
        }
        if n > 1 {
            let a = r.below(n as u64) as usize;
            let b = (a + 1 + r.below(n as u64 - 1) as usize) % n;
            menu.push((3, Event::Cut(a, b)));
            menu.push((1, Event::Isolate(a)));
        }
        if !self.cut.is_empty() {
            menu.push((2, Event::Heal));
            menu.push((3, Event::HealOne));
        }
        if !self.delayed.is_empty() {
            menu.push((6, Event::Deliver));
        }
        if self.losses < self.p.budget && (self.p.all_created || self.recovered_once) {
            let v = r.below(n as u64) as usize;
            menu.push((1, Event::Wipe(v)));
            if self.p.flips {
                menu.push((1, Event::Flip(v)));
            }
        }
        let total: u64 = menu.iter().map(|m| m.0).sum();
        if total == 0 {
            return None;
        }
        let mut x = r.below(total);
        for (wgt, ev) in menu {
            if x < wgt {
                return Some(ev);
            }
            x -= wgt;
        }
        None
    }

    /// Validate a history: every record a payload some client appended, intact, once, at the
    /// one LSN it was ever seen at.
    fn validate(&mut self, h: &History, whose: &str) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        let mut prev_offset = None;
        let mut wrapped = false;
        for (lsn, offset, p) in h {
            if p.len() < 8 {
                return Err(format!(
                    "{whose}: record LSN {lsn} has a {}-byte payload no client wrote",
                    p.len()
                ));
            }
            let id = u64::from_le_bytes(p[..8].try_into().expect("8"));
            let Some(&len) = self.payload_len.get(&id) else {
                return Err(format!(
                    "{whose}: record LSN {lsn} carries id #{id}, which no client appended"
                ));
            };
            if *p != payload(id, len) {
                return Err(format!(
                    "{whose}: record LSN {lsn} (#{id}) has a corrupted payload"
                ));
            }
            if !seen.insert(id) {
                return Err(format!("{whose}: #{id} appears twice"));
            }
            match self.lsn_of.get(&id) {
                Some(&l) if l != *lsn => {
                    return Err(format!(
                        "{whose}: #{id} is at LSN {lsn}, but it was seen at LSN {l} before"
                    ));
                }
                Some(_) => {}
                None => {
                    self.lsn_of.insert(id, *lsn);
                }
            }
            if prev_offset.is_some_and(|o| *offset < o) {
                wrapped = true;
            }
            prev_offset = Some(*offset);
        }
        if wrapped {
            self.c.wrapped_histories += 1;
        }
        Ok(())
    }

    /// The checks after a successful recovery by `c` (at incarnation `inc`).
    fn check_recovery(
        &mut self,
        c: usize,
        inc: u64,
        h: &History,
        rec: &Recovered,
        map: &[usize],
        start: &Start,
    ) {
        // One primary per epoch.
        if let Some(&other) = self.epochs.get(&rec.epoch) {
            self.fail(format!(
                "two primaries for epoch {}: n{other} and now n{c}",
                rec.epoch
            ));
            return;
        }
        // Epochs only grow: a recovery that started after another one succeeded takes a
        // higher epoch (it can only be lower when the two overlapped).
        if rec.epoch <= start.max_epoch {
            self.fail(format!(
                "n{c} recovered epoch {} although epoch {} had been recovered before it started",
                rec.epoch, start.max_epoch
            ));
            return;
        }
        if self
            .epochs
            .keys()
            .next_back()
            .is_some_and(|&e| e > rec.epoch)
        {
            // Possible only when this recovery ran concurrently with a later one.
            self.c.zombie_recoveries += 1;
        }
        self.epochs.insert(rec.epoch, c);
        let whose = format!("the log n{c} recovered at epoch {}", rec.epoch);
        if let Err(e) = self.validate(h, &whose) {
            self.fail(e);
            return;
        }
        // Nothing committed before the recovery started is lost.
        let present: BTreeSet<u64> = ids(h).into_iter().collect();
        let missing: Vec<u64> = start
            .committed
            .iter()
            .copied()
            .filter(|id| !present.contains(id) && !self.cleaned.contains(id))
            .collect();
        if !missing.is_empty() {
            let acked: BTreeSet<u64> = self.acked.iter().map(|a| a.id).collect();
            let desc: Vec<String> = missing
                .iter()
                .take(8)
                .map(|id| {
                    format!(
                        "#{id}{} (LSN {})",
                        if acked.contains(id) {
                            " acknowledged"
                        } else {
                            " recovered earlier"
                        },
                        self.lsn_of.get(id).map_or("?".into(), |l| l.to_string())
                    )
                })
                .collect();
            self.fail(format!(
                "{whose} (source {}) lost {} committed records: {}; it holds {}",
                rec.source,
                missing.len(),
                desc.join(", "),
                summary(h)
            ));
            return;
        }
        self.committed.extend(present);
        self.recovered_once = true;
        // Every live backup holds the same history, unless something else has written to
        // it since (a nested event).
        let want: Vec<(u64, &[u8])> = h.iter().map(|(l, _, p)| (*l, &p[..])).collect();
        for &i in &rec.live {
            let t = map[i];
            if self.inc[t] != start.incs[t] || self.last_writer[t] != Some((c, inc)) {
                continue;
            }
            let Node::Backup(b) = &self.nodes[t] else {
                continue;
            };
            let got = copy_history(b.copy.medium());
            self.c.backups_compared += 1;
            match got {
                Ok(g) => {
                    let same = g.len() == want.len()
                        && g.iter().zip(&want).all(|(a, b)| a.0 == b.0 && a.2 == b.1);
                    if !same {
                        let info = b.copy.info();
                        self.fail(format!(
                            "live backup n{t} of {whose} holds {}, the primary {} \
                             (the backup: {info:?})",
                            summary(&g),
                            summary(h)
                        ));
                        return;
                    }
                }
                Err(e) => {
                    self.fail(format!("live backup n{t} of {whose}: {e}"));
                    return;
                }
            }
        }
    }

    fn on_ack(&mut self, i: usize, p: &Primary, id: u64, lsn: u64, started: u64, max_epoch: u64) {
        self.c.appends_ok += 1;
        if max_epoch > p.epoch {
            self.fail(format!(
                "n{i} (epoch {}) acknowledged #{id} at LSN {lsn}, although epoch {max_epoch} \
                 had been recovered before the append started",
                p.epoch
            ));
            return;
        }
        self.clock += 1;
        self.acked.push(Acked {
            id,
            lsn,
            started,
            acked: self.clock,
        });
        self.committed.insert(id);
        let zombie = self.epochs.keys().next_back().is_some_and(|&e| e > p.epoch);
        if zombie {
            self.c.zombie_appends_acked += 1;
        }
        self.note(format!(
            "n{i} (epoch {}) appends #{id}: acknowledged at LSN {lsn}{}",
            p.epoch,
            if zombie {
                " (by a superseded primary)"
            } else {
                ""
            }
        ));
        match self.lsn_of.get(&id) {
            Some(&l) if l != lsn => self.fail(format!(
                "#{id} acknowledged at LSN {lsn}, seen at {l} before"
            )),
            _ => {
                self.lsn_of.insert(id, lsn);
            }
        }
        match self.epochs.get(&p.epoch) {
            Some(&n) if n == i => {}
            other => self.fail(format!(
                "n{i} acknowledged #{id} at epoch {}, whose primary is {other:?}",
                p.epoch
            )),
        }
        if let Some(&n) = self.ack_epochs.get(&p.epoch) {
            if n != i {
                self.fail(format!(
                    "writes of epoch {} acknowledged by n{n} and n{i}",
                    p.epoch
                ));
            }
        }
        self.ack_epochs.insert(p.epoch, i);
    }

    /// Acknowledged writes are ordered as their clients saw them: one acknowledged before
    /// another started has the lower LSN.
    fn check_real_time_order(&mut self) {
        let mut v = self.acked.clone();
        v.sort_by_key(|a| std::cmp::Reverse(a.lsn));
        let mut min_ack: Option<Acked> = None;
        for b in v {
            if let Some(a) = min_ack {
                if a.acked < b.started {
                    self.fail(format!(
                        "#{} was acknowledged (LSN {}) before #{} was appended, which got the \
                         lower LSN {}",
                        a.id, a.lsn, b.id, b.lsn
                    ));
                    return;
                }
            }
            if min_ack.is_none_or(|a| b.acked < a.acked) {
                min_ack = Some(b);
            }
        }
    }
}

fn maybe_nest(sh: &Shared) {
    let ev = {
        let mut w = lock(sh);
        let nest = w.p.nest;
        if !w.can_nest() || !w.rng.chance(nest) {
            return;
        }
        let Some(ev) = w.pick() else { return };
        w.c.nested += 1;
        if matches!(ev, Event::Elect(_)) && w.busy.iter().any(|&b| b) {
            w.c.nested_elections += 1;
        }
        w.note(format!("meanwhile: {ev:?}"));
        w.depth += 1;
        ev
    };
    run_event(sh, ev);
    lock(sh).depth -= 1;
}

fn run_event(sh: &Shared, ev: Event) {
    match ev {
        Event::Append(i) => op_append(sh, i),
        Event::Elect(i) => op_elect(sh, i),
        Event::Crash(i) => {
            let mut w = lock(sh);
            if w.medium(i).is_some() {
                w.c.crashes += 1;
                w.power_off(i, "crash");
            }
        }
        Event::Restart(i) => op_restart(sh, i),
        Event::Cut(a, b) => {
            let mut w = lock(sh);
            w.c.partitions += 1;
            w.cut.insert((a.min(b), a.max(b)));
            w.note(format!("link n{a} - n{b} cut"));
        }
        Event::Isolate(a) => {
            let mut w = lock(sh);
            w.c.partitions += 1;
            for b in 0..w.nodes.len() {
                if b != a {
                    w.cut.insert((a.min(b), a.max(b)));
                }
            }
            w.note(format!("n{a} isolated"));
        }
        Event::Heal => {
            let mut w = lock(sh);
            w.cut.clear();
            w.note("network healed".into());
        }
        Event::HealOne => {
            let mut w = lock(sh);
            let n = w.cut.len() as u64;
            let k = w.rng.below(n) as usize;
            let l = *w.cut.iter().nth(k).expect("k < len");
            w.cut.remove(&l);
            w.note(format!("link n{} - n{} restored", l.0, l.1));
        }
        Event::Deliver => {
            let mut w = lock(sh);
            let n = w.delayed.len() as u64;
            let k = w.rng.below(n) as usize;
            let d = w.delayed.swap_remove(k);
            w.deliver(d.from, d.from_inc, d.to, &d.req, true);
        }
        Event::Wipe(i) | Event::Flip(i) => op_lose(sh, i, matches!(ev, Event::Wipe(_))),
        Event::Cleanup(i) => op_cleanup(sh, i),
        Event::StepDown(i) => {
            let mut w = lock(sh);
            if w.busy[i] {
                return;
            }
            if let Node::Primary(p) = &w.nodes[i] {
                let m = p.medium.clone();
                let e = p.epoch;
                w.nodes[i] = Node::Backup(BackupHost {
                    copy: Copy::new(m, 0, LEN),
                });
                w.inc[i] += 1;
                w.c.step_downs += 1;
                w.note(format!("n{i} steps down from epoch {e}"));
            }
        }
        Event::Heartbeat(i) => {
            let p = {
                let mut w = lock(sh);
                let Some(p) = w.claim_primary(i) else {
                    return;
                };
                w.c.heartbeats += 1;
                p
            };
            let live = p.rep.heartbeat();
            let mut w = lock(sh);
            w.busy[i] = false;
            w.note(format!("n{i} heartbeat: {live} live backups"));
            after_op(&mut w, i, p.inc, &p.medium);
        }
    }
}

/// A node's own medium crashed during its operation (an armed crash): it is down.
fn after_op(w: &mut World, i: usize, inc: u64, m: &M) {
    if w.inc[i] == inc && m.crashed() {
        w.c.armed_crashes += 1;
        w.power_off(i, "crashed mid-operation");
    }
}

fn op_restart(sh: &Shared, i: usize) {
    let mut w = lock(sh);
    let Node::Down(img) = std::mem::replace(&mut w.nodes[i], Node::Down(Vec::new())) else {
        unreachable!("restart of a running node");
    };
    let arm_p = w.p.arm;
    let arm = w.faults && w.rng.chance(arm_p);
    let at = 1 + w.rng.below(ARMED_EVENTS_MAX);
    let cfg = SimConfig {
        seed: w.rng.next_u64(),
        crash: if arm {
            CrashPlan::AtEvent(at)
        } else {
            CrashPlan::Never
        },
        evict_per_million: w.p.evict,
        ..SimConfig::default()
    };
    let m: M = Arc::new(SimMedium::from_image(img, cfg));
    let copy = Copy::new(m, 0, LEN);
    let what = match copy.info() {
        Some(i) => format!(
            "epoch {} promised {} next LSN {}{}",
            i.epoch,
            i.promised,
            i.next_lsn,
            if i.damaged { " (damaged)" } else { "" }
        ),
        None => "no readable copy".into(),
    };
    w.nodes[i] = Node::Backup(BackupHost { copy });
    w.inc[i] += 1;
    w.c.restarts += 1;
    let armed = if arm {
        format!(", will crash at medium event {at}")
    } else {
        String::new()
    };
    w.note(format!("n{i} restarts: {what}{armed}"));
}

fn op_lose(sh: &Shared, i: usize, wipe: bool) {
    let mut w = lock(sh);
    if w.losses >= w.p.budget {
        return;
    }
    let mut img = match &w.nodes[i] {
        Node::Down(img) => img.clone(),
        _ => {
            w.power_off(i, "about to lose its copy");
            match &w.nodes[i] {
                Node::Down(img) => img.clone(),
                _ => unreachable!(),
            }
        }
    };
    w.losses += 1;
    if wipe {
        img.iter_mut().for_each(|b| *b = 0);
        w.c.wipes += 1;
        w.note(format!("n{i}'s copy is lost (wiped)"));
    } else {
        let m = SimMedium::from_image(img.clone(), SimConfig::default());
        let ring = RING as u64;
        let at = match Copy::new(&m, 0, LEN).info() {
            Some(info) if info.used > 0 => (info.head + w.rng.below(info.used)) % ring,
            _ => w.rng.below(ring),
        };
        let off = log::layout::RING_OFFSET + at as usize;
        img[off] ^= 1 << w.rng.below(8);
        w.c.flips += 1;
        w.note(format!(
            "n{i}'s copy is damaged (bit flip at ring offset {at})"
        ));
    }
    w.nodes[i] = Node::Down(img);
    w.inc[i] += 1;
}

fn op_append(sh: &Shared, i: usize) {
    let (p, id, data, started, max_epoch) = {
        let mut w = lock(sh);
        let Some(p) = w.claim_primary(i) else {
            return;
        };
        let id = w.next_id;
        w.next_id += 1;
        let span = w.p.payload_max as u64 - 15;
        let len = 16 + w.rng.below(span) as usize;
        w.payload_len.insert(id, len);
        w.clock += 1;
        let started = w.clock;
        let clean = w.p.cleanup && p.log.stats().used_bytes > RING as u64 / 2;
        let max_epoch = w.max_epoch();
        drop(w);
        if clean {
            cleanup(sh, i, &p, 2);
        }
        (p, id, payload(id, len), started, max_epoch)
    };
    let r = p.log.append(&data, ForcePolicy::Sync);
    let mut w = lock(sh);
    w.busy[i] = false;
    match r {
        Ok(a) => w.on_ack(i, &p, id, a.lsn, started, max_epoch),
        Err(e) => {
            w.c.appends_err += 1;
            if !matches!(e, LogError::Full { .. }) {
                p.failed.store(true, Ordering::Relaxed);
            }
            let zombie = w.epochs.keys().next_back().is_some_and(|&x| x > p.epoch);
            if zombie {
                w.c.zombie_appends_refused += 1;
            }
            w.note(format!(
                "n{i} (epoch {}{}) appends #{id}: {e}",
                p.epoch,
                if zombie { ", superseded" } else { "" }
            ));
        }
    }
    after_op(&mut w, i, p.inc, &p.medium);
}

/// Clean up the oldest 1/`part` of the records of primary `i`'s log.
fn cleanup(sh: &Shared, i: usize, p: &Primary, part: usize) {
    let Ok(h) = history(&p.log) else { return };
    let k = h.len() / part.max(1);
    if k == 0 {
        return;
    }
    let victims = &h[..k];
    let through = {
        let mut w = lock(sh);
        w.cleaned.extend(ids(&h[..k]));
        w.c.cleanups += 1;
        // Half the time (by the last LSN's parity, so the schedule's random stream is the
        // same either way) the whole prefix in one call, as a replicated server trims behind
        // its stores; else record by record.
        let through = victims[k - 1].0 % 2 == 0;
        w.note(format!(
            "n{i} cleans up LSN {}..={}{}",
            victims[0].0,
            victims[k - 1].0,
            if through { " (through)" } else { "" }
        ));
        through
    };
    if through {
        let lsn = victims[k - 1].0;
        if let Err(e) = p.log.cleanup_through(lsn) {
            p.failed.store(true, Ordering::Relaxed);
            lock(sh).note(format!("n{i} cleanup through LSN {lsn}: {e}"));
        }
        return;
    }
    for (lsn, _, _) in victims {
        if let Err(e) = p.log.cleanup(*lsn) {
            p.failed.store(true, Ordering::Relaxed);
            lock(sh).note(format!("n{i} cleanup of LSN {lsn}: {e}"));
            return;
        }
    }
}

fn op_cleanup(sh: &Shared, i: usize) {
    let p = {
        let mut w = lock(sh);
        let Some(p) = w.claim_primary(i) else {
            return;
        };
        p
    };
    let part = 2 + lock(sh).rng.below(4) as usize;
    cleanup(sh, i, &p, part);
    let mut w = lock(sh);
    w.busy[i] = false;
    after_op(&mut w, i, p.inc, &p.medium);
}

fn op_elect(sh: &Shared, c: usize) {
    let (mut copy, inc, start, q, opts, order) = {
        let mut w = lock(sh);
        if w.busy[c] {
            return;
        }
        let copy = match std::mem::replace(&mut w.nodes[c], Node::Down(Vec::new())) {
            Node::Backup(h) => h.copy,
            Node::Primary(p) => {
                w.note(format!("n{c} steps down from epoch {} to recover", p.epoch));
                Copy::new(p.medium.clone(), 0, LEN)
            }
            other => {
                w.nodes[c] = other;
                return;
            }
        };
        w.nodes[c] = Node::Candidate(copy.medium().clone());
        w.inc[c] += 1;
        w.busy[c] = true;
        w.note(format!("n{c} starts a recovery"));
        let start = Start {
            incs: w.inc.clone(),
            committed: w.committed.clone(),
            max_epoch: w.max_epoch(),
        };
        (copy, w.inc[c], start, w.p.quorum, w.opts, w.p.order)
    };
    let map: Vec<usize> = (0..start.incs.len()).filter(|&j| j != c).collect();
    let mut peers = SimPeers {
        world: Arc::downgrade(sh),
        me: c,
        inc,
        map: map.clone(),
        queue: Vec::new(),
    };
    let r = recover(&mut copy, &mut peers, q, &opts);
    let mut w = lock(sh);
    w.busy[c] = false;
    if !w.alive(c, inc) {
        w.c.recoveries_died += 1;
        let how = match &r {
            Ok((_, rec)) => format!("it had recovered epoch {}", rec.epoch),
            Err(e) => e.to_string(),
        };
        w.note(format!("n{c}'s recovery dies with it ({how})"));
        if w.inc[c] == inc {
            w.c.armed_crashes += 1;
            w.power_off(c, "crashed mid-recovery");
        }
        return;
    }
    match r {
        Ok((log, rec)) => {
            w.c.recoveries_ok += 1;
            if rec.rebuilt_local {
                w.c.rebuilt_local += 1;
            }
            let mut rep = Vec::new();
            for (name, r) in &rec.repairs {
                let (cnt, s) = match r {
                    Repair::Delta { bytes } => (&mut w.c.repairs_delta, format!("delta {bytes}")),
                    Repair::Full { bytes } => (&mut w.c.repairs_full, format!("full {bytes}")),
                    Repair::Failed { reason } => {
                        (&mut w.c.repairs_failed, format!("failed ({reason})"))
                    }
                };
                *cnt += 1;
                rep.push(format!("{name}: {s}"));
            }
            let h = history(&log);
            w.note(format!(
                "n{c} recovers epoch {} from {}{}, next LSN {}; {}",
                rec.epoch,
                rec.source,
                if rec.rebuilt_local { " (rebuilt)" } else { "" },
                rec.next_lsn,
                rep.join(", ")
            ));
            match h {
                Ok(h) => {
                    w.note(format!("    history {}", summary(&h)));
                    w.check_recovery(c, inc, &h, &rec, &map, &start);
                }
                Err(e) => w.fail(format!("n{c}'s recovered log is unreadable: {e}")),
            }
            let rep = Arc::new(Replicator::new(peers, q, order, &rec));
            log.set_mirror(Some(rep.clone()));
            w.last_recovery = Some((c, rec.clone()));
            w.nodes[c] = Node::Primary(Arc::new(Primary {
                log,
                rep,
                medium: copy.medium().clone(),
                epoch: rec.epoch,
                inc,
                failed: AtomicBool::new(false),
            }));
        }
        Err(e) => {
            w.c.recoveries_err += 1;
            w.note(format!("n{c}'s recovery fails: {e}"));
            copy.reload();
            w.nodes[c] = Node::Backup(BackupHost { copy });
        }
    }
}

/// Everything heals and every node restarts; one recovery must then succeed with every
/// backup live, and the checks run over the whole run.
fn final_phase(sh: &Shared) {
    let first = {
        let mut w = lock(sh);
        w.faults = false;
        w.step += 1;
        w.note("final: heal, deliver what is in flight, power-cycle every node".into());
        w.cut.clear();
        while !w.delayed.is_empty() {
            let n = w.delayed.len() as u64;
            let k = w.rng.below(n) as usize;
            let d = w.delayed.swap_remove(k);
            w.deliver(d.from, d.from_inc, d.to, &d.req, true);
        }
        for i in 0..w.nodes.len() {
            w.power_off(i, "final power cycle");
        }
        for i in 0..w.nodes.len() {
            drop(w);
            op_restart(sh, i);
            w = lock(sh);
        }
        w.last_recovery = None;
        let n = w.nodes.len() as u64;
        w.rng.below(n) as usize
    };
    op_elect(sh, first);
    let mut w = lock(sh);
    if w.failure.is_some() {
        return;
    }
    let Some((c, rec)) = w.last_recovery.clone() else {
        w.fail(format!(
            "with every node up and a clean network, n{first} could not recover"
        ));
        return;
    };
    let n = w.p.quorum.backups();
    if rec.live.len() != n {
        w.fail(format!(
            "final recovery by n{c}: only {:?} of the {n} backups are live",
            rec.live
        ));
        return;
    }
    // Every copy agrees with the primary (check_recovery compared the live ones; make sure
    // it compared all of them).
    let Node::Primary(p) = &w.nodes[c] else {
        unreachable!()
    };
    let h = history(&p.log).unwrap_or_default();
    let want: Vec<(u64, Vec<u8>)> = h.iter().map(|(l, _, p)| (*l, p.clone())).collect();
    for t in (0..w.nodes.len()).filter(|&t| t != c) {
        let Node::Backup(b) = &w.nodes[t] else {
            w.fail(format!("final: n{t} is not serving"));
            return;
        };
        let got = copy_history(b.copy.medium());
        let same = got.as_ref().is_ok_and(|g| {
            g.len() == want.len() && g.iter().zip(&want).all(|(a, b)| a.0 == b.0 && a.2 == b.1)
        });
        if !same {
            let g = got.map(|g| summary(&g)).unwrap_or_else(|e| e);
            w.fail(format!(
                "final: backup n{t} holds {g}, the primary {}",
                summary(&h)
            ));
            return;
        }
    }
    // Every acknowledged write (not cleaned up) is there.
    let present: BTreeSet<u64> = ids(&h).into_iter().collect();
    let lost: Vec<u64> = w
        .acked
        .iter()
        .map(|a| a.id)
        .filter(|id| !present.contains(id) && !w.cleaned.contains(id))
        .collect();
    if !lost.is_empty() {
        w.fail(format!("final: acknowledged writes lost: {lost:?}"));
        return;
    }
    w.check_real_time_order();
    w.c.final_records += h.len() as u64;
    w.c.final_acked += w.acked.len() as u64;
}

fn drive(sh: &Shared) {
    let steps = lock(sh).p.steps;
    for step in 0..steps {
        let ev = {
            let mut w = lock(sh);
            if w.failure.is_some() {
                return;
            }
            w.step = step;
            w.c.steps += 1;
            w.pick()
        };
        if let Some(ev) = ev {
            lock(sh).note(format!("{ev:?}"));
            run_event(sh, ev);
        }
    }
    final_phase(sh);
}

/// Run one seed.
pub(crate) fn run(seed: u64, opts: Opts) -> Outcome {
    let params = Params::new(seed, opts);
    let sh: Shared = Arc::new(Mutex::new(World::new(params.clone())));
    {
        let mut w = lock(&sh);
        let p = &w.p;
        let head = format!(
            "seed {seed}: N={} W={} R={} order={} loss budget {} steps {} lose {}/{} delay {} \
             nest {} arm {} evict {} cleanup {} payload<={} all_created {} epoch_check {} flips {}",
            p.quorum.backups(),
            p.quorum.write(),
            p.quorum.read(),
            p.order.name(),
            p.budget,
            p.steps,
            p.lose_req,
            p.lose_ans,
            p.delay,
            p.nest,
            p.arm,
            p.evict,
            p.cleanup,
            p.payload_max,
            p.all_created,
            p.epoch_check,
            p.flips
        );
        w.note(head);
    }
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drive(&sh)));
    let mut w = lock(&sh);
    if let Err(e) = res {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        w.fail(format!("panic: {msg}"));
    }
    // Primaries hold their transports, which point back (weakly) at the world.
    let nodes = std::mem::take(&mut w.nodes);
    let out = Outcome {
        params,
        failure: w.failure.take(),
        trace: std::mem::take(&mut w.trace),
        counters: w.c.clone(),
    };
    drop(w);
    drop(nodes);
    out
}
