//! The primary's side: quorums, recovery with epochs and repair, and the [`Replicator`] that
//! ships every forced range.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use log::{Extent, Log, LogError, LogOptions, Mirror};
use pmem::{Medium, Uuid};

use crate::copy::{Copy, META_SHIPPED_BYTES, hex};
use crate::error::{ReplError, Result};
use crate::peers::Peers;
use crate::proto::{CopyInfo, REPAIR_CHUNK_BYTES, Request, Response};

/// When the primary persists its own copy, relative to shipping to the backups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum FlushOrder {
    /// Ship, wait for the write quorum, then flush locally (Arcadia's choice, the default).
    ReplicateFirst,
    /// Ship, flush locally while the backups work, then wait for the quorum.
    Parallel,
    /// Flush locally, then ship and wait.
    FlushFirst,
}

impl FlushOrder {
    /// Every order, for benchmarks.
    pub const ALL: [FlushOrder; 3] = [
        FlushOrder::ReplicateFirst,
        FlushOrder::Parallel,
        FlushOrder::FlushFirst,
    ];

    /// Parse `replicate-first`, `parallel` or `flush-first`.
    pub fn parse(s: &str) -> std::result::Result<FlushOrder, String> {
        match s {
            "replicate-first" => Ok(FlushOrder::ReplicateFirst),
            "parallel" => Ok(FlushOrder::Parallel),
            "flush-first" => Ok(FlushOrder::FlushFirst),
            _ => Err(format!(
                "unknown flush order `{s}` (expected replicate-first, parallel or flush-first)"
            )),
        }
    }

    /// The name `parse` takes.
    pub fn name(&self) -> &'static str {
        match self {
            FlushOrder::ReplicateFirst => "replicate-first",
            FlushOrder::Parallel => "parallel",
            FlushOrder::FlushFirst => "flush-first",
        }
    }
}

/// The quorums of a primary with `backups` backups and a write quorum of `write` backups.
///
/// There are `backups + 1` copies (the primary's own counts). A forced record is on the primary
/// and on at least `write` backups; recovery reads at least [`Quorum::read`] copies, a
/// majority that also meets any `write + 1` copies, so every acknowledged record is seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Quorum {
    backups: usize,
    write: usize,
}

impl Quorum {
    /// Check and build: `1 <= write <= backups`, or `write == 0` with no backups.
    pub fn new(backups: usize, write: usize) -> Result<Quorum> {
        let ok = if backups == 0 {
            write == 0
        } else {
            (1..=backups).contains(&write)
        };
        if !ok {
            return Err(ReplError::Invalid {
                what: "write quorum",
                reason: format!(
                    "{write} with {backups} backups (it must be between 1 and the number of \
                     backups, or 0 without backups)"
                ),
            });
        }
        Ok(Quorum { backups, write })
    }

    /// N: backups.
    pub fn backups(&self) -> usize {
        self.backups
    }

    /// W: backups that must acknowledge a force.
    pub fn write(&self) -> usize {
        self.write
    }

    /// Copies, the primary's included.
    pub fn copies(&self) -> usize {
        self.backups + 1
    }

    /// More than half of the copies.
    pub fn majority(&self) -> usize {
        self.copies() / 2 + 1
    }

    /// R: copies recovery must read (and get promises from): a majority, and enough that
    /// R + (W + 1) > N + 1.
    pub fn read(&self) -> usize {
        self.majority().max(self.backups - self.write + 1)
    }
}

/// How to recover.
#[derive(Debug, Clone, Copy)]
pub struct RecoverOptions {
    /// Only copies with the highest epoch are valid (always true outside the simulation's
    /// canary, which turns it off to show that the check is needed).
    pub epoch_check: bool,
    /// How long `reserve` waits for cleanup when the ring is full.
    pub full_wait: Duration,
}

impl Default for RecoverOptions {
    fn default() -> Self {
        RecoverOptions {
            epoch_check: true,
            full_wait: Duration::from_millis(1000),
        }
    }
}

/// What recovery did to a backup.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Repair {
    /// It held a prefix of the chosen history: the rest was shipped.
    Delta {
        /// Ring bytes shipped.
        bytes: u64,
    },
    /// It was stale, damaged or empty: the whole live log was shipped.
    Full {
        /// Ring bytes shipped.
        bytes: u64,
    },
    /// It did not answer, refused, or failed: it is not live.
    Failed {
        /// Why.
        reason: String,
    },
}

/// What recovery did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Recovered {
    /// The new epoch.
    pub epoch: u64,
    /// The copy whose history was chosen: `local` or a backup's name.
    pub source: String,
    /// The primary's own copy was rebuilt from `source`.
    pub rebuilt_local: bool,
    /// Ring bytes fetched to rebuild it.
    pub fetched_bytes: u64,
    /// Per backup (by index): its name and what was done.
    pub repairs: Vec<(String, Repair)>,
    /// Backups in sync, serving the new epoch.
    pub live: Vec<usize>,
    /// LSN the next record gets.
    pub next_lsn: u64,
}

fn quorum_err(
    what: &'static str,
    needed: usize,
    total: usize,
    got: usize,
    how: &'static str,
) -> ReplError {
    ReplError::Quorum {
        what,
        needed,
        total,
        got,
        how,
    }
}

/// Ring ranges `[start, start + len)` modulo `ring`, as at most two `(offset, len)` pieces.
fn ring_pieces(start: u64, len: u64, ring: u64) -> Vec<(u64, u64)> {
    let start = start % ring;
    let first = len.min(ring - start);
    let mut v = Vec::new();
    if first > 0 {
        v.push((start, first));
    }
    if len > first {
        v.push((0, len - first));
    }
    v
}

/// One step of a repair or rebuild.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Ship region bytes `[offset, offset + len)` from the local copy.
    Ship(u64, u64),
    /// Zero region bytes.
    Zero(u64, u64),
}

/// The steps that make a copy equal to `to` (the local copy after it was opened): ship the
/// ring from `from_tail` (ring offset) to `to`'s tail, or, with `from_tail` `None`, the whole
/// live ring and the descriptors; then the superlines, so the copy holds the new epoch only once
/// everything before is durable; then (full repair) zero the rest of the ring.
///
/// The two superline copies go in two steps, the one in force (`newest`: its index) first, as
/// the log itself writes them: each step is persisted before the next, so a power failure tears
/// at most one of them and the other keeps the copy readable. Shipped together, both could be
/// torn, and an unreadable copy forgets its fence (the promises it made), so an epoch could be
/// taken twice.
///
/// Nothing is zeroed before the superlines switch: until then the copy's own superline is in
/// force, and its walk starts at its own head, which may lie outside the new live range (the
/// new history cleaned up further). Zeroing that first would cut the copy's walk short at its
/// start; a repair interrupted there would leave an empty copy claiming its old epoch, which a
/// later recovery could take as the history (as it was a copy of the committed records, that
/// would lose them). Shipping the live ring only rewrites bytes both histories share with the
/// same bytes, and the old history's divergent, unacknowledged tail.
fn plan(
    to: &CopyInfo,
    ring_offset: u64,
    from_tail: Option<u64>,
    newest: usize,
) -> (Vec<Step>, u64) {
    let ring = to.ring_bytes;
    let mut steps = Vec::new();
    let region = |(o, l): (u64, u64)| (ring_offset + o, l);
    let (start, len) = match from_tail {
        Some(t) => (t, (to.tail() + ring - t) % ring),
        None => (to.head, to.used),
    };
    for p in ring_pieces(start, len, ring) {
        let (o, l) = region(p);
        let mut at = 0;
        while at < l {
            let n = (l - at).min(REPAIR_CHUNK_BYTES as u64);
            steps.push(Step::Ship(o + at, n));
            at += n;
        }
    }
    if from_tail.is_none() {
        steps.push(Step::Ship(0, log::layout::SUPERLINE_COPY_OFFSETS[0] as u64));
    }
    for copy in [newest, 1 - newest] {
        let sl = log::layout::SUPERLINE_COPY_OFFSETS[copy] as u64;
        steps.push(Step::Ship(sl, log::layout::SUPERLINE_BYTES as u64));
    }
    if from_tail.is_none() {
        for p in ring_pieces(to.tail(), ring - to.used, ring) {
            let (o, l) = region(p);
            steps.push(Step::Zero(o, l));
        }
    }
    (steps, len)
}

/// Where each entry of the chosen history starts: (ring offset, LSN) pairs as a walk finds
/// them, looked up by ring offset.
#[derive(Debug, Default)]
struct Starts {
    entries: Vec<(u64, u64)>,
}

impl Starts {
    fn push(&mut self, offset: u64, lsn: u64) {
        self.entries.push((offset, lsn));
    }

    /// Sorted by offset for lookups (a walk finds them in ring order, wrapping at most once;
    /// an offset given twice keeps its first LSN).
    fn finish(mut self) -> Starts {
        self.entries.sort_by_key(|e| e.0);
        self.entries.dedup_by_key(|e| e.0);
        self
    }

    fn get(&self, offset: u64) -> Option<u64> {
        self.entries
            .binary_search_by_key(&offset, |e| e.0)
            .ok()
            .map(|k| self.entries[k].1)
    }
}

/// The description of the local copy just opened as `log` (with `rec`) and given its epoch:
/// what [`Copy::info`] would find walking it, from what the open found and wrote.
fn opened_info<M: Medium>(local: &Copy<M>, log: &Log<M>, rec: &log::Recovery) -> CopyInfo {
    let stats = log.stats();
    CopyInfo {
        uuid: log.descriptor().log_uuid.0,
        region_len: local.len() as u64,
        ring_bytes: stats.ring_bytes,
        promised: local.promised(),
        epoch: stats.epoch,
        head: rec.head,
        start_lsn: rec.start_lsn,
        next_lsn: stats.next_lsn,
        used: stats.used_bytes,
        // A record that failed its checks lies under the jump record the open wrote (unless
        // the ring was full, when the walk cannot stop at one).
        damaged: rec.jumped_to.is_none() && matches!(rec.stop, log::Stop::Damaged(_)),
        // The open rewrote a bad descriptor or superline copy from the good one.
        meta_damaged: false,
        committed: local.committed(),
    }
}

fn read_local<M: Medium>(m: &M, base: usize, offset: u64, len: u64) -> Vec<u8> {
    let mut b = vec![0u8; len as usize];
    m.read(base + offset as usize, &mut b);
    b
}

/// Recover a replicated log as its primary: read the copies, take a new epoch on a majority,
/// choose the history, rebuild the local copy if it is not the best, open it, and repair every
/// backup that answers. Returns the open log (not yet mirrored: install a [`Replicator`]) and
/// what was done.
///
/// Fails, changing nothing a later recovery depends on, when fewer than [`Quorum::read`] copies
/// answer or promise, or fewer than a majority end up holding the new epoch.
pub fn recover<M: Medium + Clone, P: Peers>(
    local: &mut Copy<M>,
    peers: &mut P,
    q: Quorum,
    opts: &RecoverOptions,
) -> Result<(Log<M>, Recovered)> {
    let n = peers.count();
    if n != q.backups() {
        return Err(ReplError::Invalid {
            what: "quorum",
            reason: format!(
                "{} backups configured, the quorum is for {}",
                n,
                q.backups()
            ),
        });
    }
    // 1. Read every copy. The local copy is walked while the backups walk theirs; the walk
    // notes where each entry starts, for the repairs (step 6) when the local history is chosen.
    let mut infos: Vec<Option<CopyInfo>> = vec![None; n];
    let mut answered = vec![false; n];
    for i in 0..n {
        peers.send(i, &Request::Probe);
    }
    let mut starts = Starts::default();
    // The copy's change count when `starts` was taken: the open reuses only that walk.
    let mut starts_at = None;
    if local.uuid().is_some() {
        local.walk_visiting(&mut |o, l| starts.push(o, l));
        starts_at = Some(local.changes());
    }
    for (i, r) in peers.finish() {
        if let Some(Response::Info(info)) = r {
            answered[i] = true;
            infos[i] = info;
        }
    }
    let uuid = local
        .uuid()
        .map(|u| u.0)
        .or_else(|| infos.iter().flatten().map(|i| i.uuid).next())
        .ok_or_else(|| ReplError::Invalid {
            what: "log",
            reason: "no copy, local or remote, holds a readable log".into(),
        })?;
    let mut skipped = Vec::new();
    for i in 0..n {
        if let Some(info) = &infos[i] {
            if info.uuid != uuid || info.region_len != local.len() as u64 {
                skipped.push((
                    peers.name(i),
                    format!(
                        "holds log {} of {} bytes, not {} of {}",
                        hex(&info.uuid),
                        info.region_len,
                        hex(&uuid),
                        local.len()
                    ),
                ));
                answered[i] = false;
                infos[i] = None;
                peers.disconnect(i);
            }
        }
    }
    if local.uuid().is_none() {
        *local = Copy::create(
            local.medium().clone(),
            local.base(),
            local.len(),
            Uuid(uuid),
        )?;
    }
    // Backups with no readable copy get an empty one, then count as stale copies.
    let empty: Vec<usize> = (0..n)
        .filter(|&i| answered[i] && infos[i].is_none())
        .collect();
    for &i in &empty {
        peers.send(
            i,
            &Request::Init {
                uuid,
                region_len: local.len() as u64,
            },
        );
    }
    for (i, r) in peers.finish() {
        if !matches!(r, Some(Response::Ack)) {
            answered[i] = false;
            peers.disconnect(i);
        }
    }
    let reachable = 1 + answered.iter().filter(|a| **a).count();
    if reachable < q.read() {
        return Err(quorum_err(
            "recovery (read the copies)",
            q.read(),
            q.copies(),
            reachable,
            "answered",
        ));
    }
    // 2. A new epoch, promised by at least R copies (so by a majority).
    let local_info = local.current_info().ok_or_else(|| ReplError::Invalid {
        what: "local copy",
        reason: "unreadable after creation".into(),
    })?;
    let seen = infos
        .iter()
        .flatten()
        .chain(std::iter::once(&local_info))
        .map(|i| i.promised.max(i.epoch))
        .max()
        .unwrap_or(0);
    let epoch = seen + 1;
    // What the local copy holds, from the walk made above.
    let promised_local = local.promise(epoch).map_err(|promised| ReplError::Fenced {
        copy: "local".into(),
        promised,
        ours: epoch,
    })?;
    let mut promised: Vec<Option<CopyInfo>> = vec![None; n];
    for i in (0..n).filter(|&i| answered[i]) {
        peers.send(i, &Request::Promise { epoch });
    }
    let mut fenced_by = 0;
    for (i, r) in peers.finish() {
        match r {
            Some(Response::Info(Some(info))) => promised[i] = Some(info),
            Some(Response::Fenced { promised }) => fenced_by = fenced_by.max(promised),
            _ => peers.disconnect(i),
        }
    }
    let got = 1 + promised.iter().flatten().count();
    if got < q.read() {
        if fenced_by > epoch {
            return Err(ReplError::Fenced {
                copy: "a backup".into(),
                promised: fenced_by,
                ours: epoch,
            });
        }
        return Err(quorum_err(
            "recovery (promise the new epoch)",
            q.read(),
            q.copies(),
            got,
            "promised",
        ));
    }
    // 3. The history: the highest superline epoch, then the longest valid log.
    let local_info = promised_local.ok_or_else(|| ReplError::Invalid {
        what: "local copy",
        reason: "unreadable".into(),
    })?;
    // Only copies that hold a history count toward R, unless every copy promised. A copy still
    // at the new-log epoch (one just created or initialised: a disk that was replaced, a
    // primary that lost its own) holds nothing, so counting it would let R copies miss every
    // copy of an acknowledged write. An acknowledged write is on W + 1 copies; with R >= N - W
    // + 1 copies that hold a history, at least one of them holds it, however many other copies
    // were lost. With every copy promised nothing is hidden (this is how a new cluster starts,
    // and how one recovers when fewer than R copies survive with their history).
    let holds = |i: &CopyInfo| i.epoch > log::layout::NEW_LOG_EPOCH;
    let holding =
        usize::from(holds(&local_info)) + promised.iter().flatten().filter(|i| holds(i)).count();
    if got < q.copies() && holding < q.read() {
        return Err(quorum_err(
            "recovery (copies that hold a history; the others are new or were lost, and \
             count only once every copy answers)",
            q.read(),
            q.copies(),
            holding,
            "hold one",
        ));
    }
    let key = |i: &CopyInfo| {
        let e = if opts.epoch_check { i.epoch } else { 0 };
        (e, i.next_lsn)
    };
    let mut source: Option<usize> = None;
    let mut best = local_info;
    for (i, info) in promised.iter().enumerate() {
        if let Some(info) = info {
            if key(info) > key(&best) {
                best = *info;
                source = Some(i);
            }
        }
    }
    // 4. Rebuild the local copy from a better one.
    let mut fetched = 0;
    let mut followed = None;
    if let Some(s) = source {
        local.invalidate();
        let rebuilt = rebuild_local(local, peers, s, &best)?;
        fetched = rebuilt.bytes;
        followed = rebuilt.walked;
    }
    // 5. Open the local copy (recovery writes a jump record past anything a crash left) and
    // record the new epoch in it. The ring is walked once per recovery: an intact local copy
    // opens over the walk made in step 1 (nothing has written its log since); a rebuilt one is
    // walked now, and that walk checks every record fetched.
    let open_opts = LogOptions {
        clean_shutdown: false,
        full_wait: opts.full_wait,
        ..LogOptions::default()
    };
    let (medium, base, len) = (local.medium().clone(), local.base(), local.len());
    let walked = match (&followed, source) {
        (Some((w, _)), Some(_)) => Some(w.clone()),
        (_, None) if starts_at == Some(local.changes()) => local.walked().cloned(),
        _ => None,
    };
    // The open writes the log behind the copy's back (even when it then fails).
    local.invalidate();
    let opened = match &walked {
        Some(w) => Log::open_walked(medium.clone(), base, len, &open_opts, w)?.ok(),
        None => None,
    };
    let (log, rec) = match opened {
        Some(o) => {
            if let Some((_, s)) = followed {
                starts = s;
            }
            o
        }
        None => {
            starts = Starts::default();
            Log::open_visiting(medium, base, len, &open_opts, &mut |o, l| starts.push(o, l))?
        }
    };
    log.set_epoch(epoch)?;
    let ring_offset = log.descriptor().ring_offset;
    if rec.jumped_to.is_some() {
        // The jump record the open wrote at the walk's tail is an entry too, with the LSN the
        // walk expected there.
        let at = (rec.head + rec.ring_bytes_used) % log.descriptor().ring_bytes;
        let field = log::layout::record::LSN;
        let lsn = read_local(
            local.medium(),
            base,
            ring_offset + at + field.offset as u64,
            8,
        );
        starts.push(at, u64::from_le_bytes(lsn.try_into().unwrap_or([0; 8])));
    }
    // What the local copy holds now, from the open (a walk of it would find the same).
    let to = opened_info(local, &log, &rec);
    debug_assert_eq!(Some(to), local.info(), "the opened copy as a walk finds it");
    let meta = read_local(local.medium(), local.base(), 0, META_SHIPPED_BYTES as u64);
    let newest = superline_in_force(&meta, &Uuid(uuid), to.ring_bytes);
    // 6. Repair every backup that promised.
    let mut plans: Vec<(usize, Vec<Step>, Repair)> = Vec::new();
    let mut repairs: Vec<(String, Repair)> = (0..n)
        .map(|i| {
            let reason = match skipped.iter().find(|(name, _)| *name == peers.name(i)) {
                Some((_, why)) => why.clone(),
                None => "did not answer or promise".into(),
            };
            (peers.name(i), Repair::Failed { reason })
        })
        .collect();
    // Where each entry of the chosen history starts (ring offset -> the LSN a walk expects
    // there), and its tail. A backup's walk is a prefix of this history only if it ends at one
    // of these places expecting the same LSN. The same superline epoch is not enough: a copy
    // whose repair or rebuild was cut short keeps its old superline over a ring that already
    // holds part of a newer history (a jump record where the old primary had written another,
    // unacknowledged record), so two copies of one epoch can differ. Two histories differ from
    // the first (position, LSN) where they hold different entries, and after it their LSNs
    // never meet (each new history starts with a jump past every LSN the ring can hold), so a
    // copy that ends where this history expects its next LSN holds a prefix of it. It must
    // also hold the history from its head on: a backup whose head is past the chosen one (it
    // took a cleanup this history's source missed, and what came before its head may since
    // have been zeroed or overwritten) would walk from the chosen head into nothing after the
    // delta's superlines.
    starts.push(to.tail(), to.next_lsn);
    let starts = starts.finish();
    debug_assert_eq!(
        starts.entries,
        {
            let ring_start = (local.base() + ring_offset as usize) as u64;
            let mut all: Vec<(u64, u64)> = log
                .entries()
                .map(|e| (e.offset - ring_start, e.lsn))
                .chain(std::iter::once((to.tail(), to.next_lsn)))
                .collect();
            all.sort_unstable();
            all.dedup_by_key(|e| e.0);
            all
        },
        "entry starts from the one walk, against a walk of the opened log"
    );
    for (i, info) in promised.iter().enumerate() {
        let Some(info) = info else { continue };
        let prefix = info.ring_bytes == to.ring_bytes
            && !info.meta_damaged
            && (!opts.epoch_check || info.epoch == best.epoch)
            && info.next_lsn <= best.next_lsn
            && (to.tail() + to.ring_bytes - info.tail()) % to.ring_bytes <= to.used
            && info.used < to.ring_bytes
            && starts.get(info.tail()) == Some(info.next_lsn)
            && info.start_lsn <= to.start_lsn;
        let (steps, bytes) = plan(&to, ring_offset, prefix.then_some(info.tail()), newest);
        let repair = if prefix {
            Repair::Delta { bytes }
        } else {
            Repair::Full { bytes }
        };
        plans.push((i, steps, repair));
    }
    let medium = local.medium().clone();
    let base = local.base();
    let mut cursor = 0;
    let mut ok: Vec<bool> = vec![true; plans.len()];
    loop {
        let mut sent = false;
        for (k, (i, steps, _)) in plans.iter().enumerate() {
            if !ok[k] || cursor >= steps.len() {
                continue;
            }
            let req = match steps[cursor] {
                Step::Ship(o, l) => Request::Write {
                    epoch,
                    committed: 0,
                    extents: vec![Extent {
                        offset: o,
                        bytes: read_local(&medium, base, o, l),
                    }],
                },
                Step::Zero(o, l) => Request::Zero {
                    epoch,
                    offset: o,
                    len: l,
                },
            };
            peers.send(*i, &req);
            sent = true;
        }
        if !sent {
            break;
        }
        for (i, r) in peers.finish() {
            if let Some(k) = plans.iter().position(|p| p.0 == i) {
                if !r.as_ref().is_some_and(Response::is_ack) {
                    ok[k] = false;
                    repairs[i].1 = Repair::Failed {
                        reason: match r {
                            Some(Response::Fenced { promised }) => {
                                format!("promised epoch {promised} meanwhile")
                            }
                            Some(Response::Error(e)) => e,
                            _ => "no answer during repair".into(),
                        },
                    };
                    peers.disconnect(i);
                }
            }
        }
        cursor += 1;
    }
    let mut live = Vec::new();
    for (k, (i, _, repair)) in plans.into_iter().enumerate() {
        if ok[k] {
            repairs[i].1 = repair;
            live.push(i);
        }
    }
    if 1 + live.len() < q.majority() {
        return Err(quorum_err(
            "recovery (write the new epoch)",
            q.majority(),
            q.copies(),
            1 + live.len(),
            "took it",
        ));
    }
    let next_lsn = rec.jumped_to.unwrap_or(rec.next_lsn);
    Ok((
        log,
        Recovered {
            epoch,
            source: match source {
                Some(s) => peers.name(s),
                None => "local".into(),
            },
            rebuilt_local: source.is_some(),
            fetched_bytes: fetched,
            repairs,
            live,
            next_lsn,
        },
    ))
}

/// Make the local copy equal to backup `s`'s (described by `info`): fetch its live ring, then,
/// after a fence, its descriptors and superlines, then zero the rest of the local ring. The
/// local fence is kept. Nothing read is written unless the source still is the copy `info`
/// describes (see [`fetch`]).
///
/// The order keeps a rebuild that is cut short (the source stops answering, this node loses
/// power) from leaving a copy that claims a history it does not hold:
/// - the superlines carry the source's epoch, so they come after the ring: else the local copy
///   could hold the source's epoch over a ring that is still (partly) its own, pass for a
///   prefix of the source's history, and be chosen or delta-repaired as one;
/// - zeroing comes last, as in [`plan`]: until the superlines switch, the local copy's own
///   superline is in force and its walk starts at its own head, which zeroing outside the
///   source's live range could wipe, leaving an empty copy under its old epoch (a later
///   recovery could choose it and lose what it held). Fetching the live ring only rewrites
///   bytes both histories share with the same bytes, and the local copy's divergent,
///   unacknowledged tail.
fn rebuild_local<M: Medium, P: Peers>(
    local: &mut Copy<M>,
    peers: &mut P,
    s: usize,
    info: &CopyInfo,
) -> Result<Rebuilt> {
    let ring_offset = log::layout::RING_OFFSET as u64;
    let m = local.medium();
    let base = local.base();
    // The records are checked as they arrive, over the local copy's descriptor (the same log:
    // checked again against the one fetched, once it is written).
    let mut follow = Log::peek(m, base, local.len())
        .ok()
        .filter(|(d, _)| {
            d.log_uuid.0 == info.uuid
                && d.ring_bytes == info.ring_bytes
                && d.ring_offset == ring_offset
        })
        .map(|(d, _)| log::Follow::new(m, base, &d, info.head, info.start_lsn));
    let mut starts = Starts::default();
    let mut avail = 0u64;
    let mut reads = Vec::new();
    for (o, l) in ring_pieces(info.head, info.used, info.ring_bytes) {
        let mut at = 0;
        while at < l {
            let n = (l - at).min(REPAIR_CHUNK_BYTES as u64);
            reads.push((ring_offset + o + at, n));
            at += n;
        }
    }
    fetch(peers, s, info, &reads, |offset, d| {
        m.write(base + offset as usize, d);
        m.flush(base + offset as usize, d.len())?;
        avail += d.len() as u64;
        if let Some(f) = follow.as_mut() {
            f.advance(avail, &mut |o, l| starts.push(o, l));
        }
        Ok(())
    })?;
    m.fence()?;
    // The descriptors, then the superline copies one at a time, the one in force first (see
    // `plan`: both written at once could both be torn).
    let mut meta = Vec::new();
    fetch(peers, s, info, &[(0, META_SHIPPED_BYTES as u64)], |_, d| {
        meta = d.to_vec();
        Ok(())
    })?;
    let newest = superline_in_force(&meta, &Uuid(info.uuid), info.ring_bytes);
    let descriptors = log::layout::SUPERLINE_COPY_OFFSETS[0];
    let mut pieces = vec![(0, descriptors)];
    for copy in [newest, 1 - newest] {
        pieces.push((
            log::layout::SUPERLINE_COPY_OFFSETS[copy],
            log::layout::SUPERLINE_BYTES,
        ));
    }
    for (at, len) in pieces {
        m.write(base + at, &meta[at..at + len]);
        m.persist(base + at, len)?;
    }
    let zeros = vec![0u8; 1 << 20];
    for (o, l) in ring_pieces(info.tail(), info.ring_bytes - info.used, info.ring_bytes) {
        let mut at = 0;
        while at < l {
            let n = (l - at).min(zeros.len() as u64);
            let off = base + (ring_offset + o + at) as usize;
            m.write(off, &zeros[..n as usize]);
            m.flush(off, n as usize)?;
            at += n;
        }
    }
    m.fence()?;
    let len = local.len();
    let walked = follow
        .and_then(|f| f.finish(len, &mut |o, l| starts.push(o, l)))
        .map(|rec| (rec, starts));
    local.reload();
    Ok(Rebuilt {
        bytes: info.used,
        walked,
    })
}

/// What [`rebuild_local`] did.
struct Rebuilt {
    /// Ring bytes fetched.
    bytes: u64,
    /// The walk that checked the records as they arrived and the entry starts it found, if
    /// the copy's metadata describes the log it followed.
    walked: Option<(log::Recovery, Starts)>,
}

/// Which superline copy is in force (the valid one with the higher sequence) in `meta`, a copy's
/// first `META_SHIPPED_BYTES` bytes; 0 if neither is valid.
fn superline_in_force(meta: &[u8], uuid: &Uuid, ring_bytes: u64) -> usize {
    let seq = |copy: usize| {
        let at = log::layout::SUPERLINE_COPY_OFFSETS[copy];
        let bytes = &meta[at..at + log::layout::SUPERLINE_BYTES];
        log::Superline::decode(bytes, copy, at as u64, uuid, ring_bytes).map_or(0, |sl| sl.sequence)
    };
    usize::from(seq(1) > seq(0))
}

/// Read region ranges `(offset, len)` of backup `s`, a few requests at a time, and hand each
/// piece to `write`.
///
/// Each batch ends with a probe, answered after the reads: a batch is handed over only if the
/// source still is the copy `expect` describes (what it answered to the promise). Else the
/// source changed meanwhile (lost its copy and got an empty one, promised a later epoch, was
/// repaired by another primary) and what was read is not the history chosen: writing it could
/// destroy the local copy (zeros over its descriptors), turning the loss of one copy into two.
fn fetch<P: Peers>(
    peers: &mut P,
    s: usize,
    expect: &CopyInfo,
    reads: &[(u64, u64)],
    mut write: impl FnMut(u64, &[u8]) -> Result<()>,
) -> Result<()> {
    // Reads per batch (of REPAIR_CHUNK_BYTES each). The probe that ends a batch is answered
    // from the source's last walk while nothing changed there, so it costs no walk; a batch is
    // in flight while the one before is stored.
    const PIPELINE: usize = 8;
    let refused = |peers: &mut P, what: String| {
        peers.disconnect(s);
        ReplError::Refused {
            copy: peers.name(s),
            reason: format!("{what} to rebuild the local copy"),
        }
    };
    let unchanged = |now: &CopyInfo| {
        CopyInfo {
            committed: 0,
            ..*now
        } == CopyInfo {
            committed: 0,
            ..*expect
        }
    };
    let send = |peers: &mut P, batch: &[(u64, u64)]| {
        for &(offset, len) in batch {
            peers.send(s, &Request::Read { offset, len });
        }
        peers.send(s, &Request::Probe);
    };
    let batches: Vec<&[(u64, u64)]> = reads.chunks(PIPELINE).collect();
    if let Some(first) = batches.first() {
        send(peers, first);
    }
    for (k, batch) in batches.iter().enumerate() {
        let mut answers = peers.finish();
        match answers.pop() {
            Some((_, Some(Response::Info(Some(now))))) if unchanged(&now) => {}
            other => {
                let why = match other {
                    Some((_, Some(Response::Info(now)))) => {
                        format!("it changed while being read (now {now:?})")
                    }
                    _ => "no answer to the probe after reading".into(),
                };
                return Err(refused(peers, why));
            }
        }
        let mut data = Vec::with_capacity(batch.len());
        for (&(offset, len), (_, r)) in batch.iter().zip(answers) {
            match r {
                Some(Response::Data(d)) if d.len() as u64 == len => data.push((offset, d)),
                other => {
                    let why = match other {
                        Some(Response::Error(e)) => e,
                        Some(_) => "unexpected answer".into(),
                        None => "no answer".into(),
                    };
                    return Err(refused(peers, format!("reading [{offset}, +{len}): {why}")));
                }
            }
        }
        // The source reads the next batch while this one is stored.
        let next = batches.get(k + 1);
        if let Some(next) = next {
            send(peers, next);
        }
        for (offset, d) in data {
            if let Err(e) = write(offset, &d) {
                if next.is_some() {
                    // Nothing may be left waiting for an answer: collect and drop it.
                    peers.finish();
                }
                return Err(e);
            }
        }
    }
    Ok(())
}

/// One backup as the primary sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BackupState {
    /// Its address.
    pub name: String,
    /// In sync and receiving every force.
    pub live: bool,
    /// Last LSN it acknowledged.
    pub acked_lsn: u64,
    /// Last LSN its store said it had durably applied (0: it keeps no store, or said nothing
    /// yet this epoch).
    pub applied_lsn: u64,
    /// Why it was dropped.
    pub last_error: Option<String>,
}

/// Replication counters for INFO.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReplStats {
    /// The epoch this primary serves.
    pub epoch: u64,
    /// The quorum.
    pub quorum: Quorum,
    /// Flush order.
    pub order: FlushOrder,
    /// Highest LSN acknowledged by the write quorum.
    pub committed: u64,
    /// Forces shipped.
    pub forces: u64,
    /// Every backup.
    pub backups: Vec<BackupState>,
    /// Why replication stopped (quorum lost, fenced), if it did.
    pub failed: Option<String>,
}

#[derive(Debug)]
struct Inner<P> {
    peers: P,
    stats: ReplStats,
}

/// Ships what the log forces to the live backups; the log's [`Mirror`].
#[derive(Debug)]
pub struct Replicator<P: Peers> {
    inner: Mutex<Inner<P>>,
}

impl<P: Peers> Replicator<P> {
    /// A replicator for a primary that recovered into `rec` with `peers`.
    pub fn new(peers: P, quorum: Quorum, order: FlushOrder, rec: &Recovered) -> Replicator<P> {
        let backups = (0..peers.count())
            .map(|i| BackupState {
                name: peers.name(i),
                live: rec.live.contains(&i),
                // A live backup was just repaired to hold the whole history.
                acked_lsn: if rec.live.contains(&i) {
                    rec.next_lsn.saturating_sub(1)
                } else {
                    0
                },
                applied_lsn: 0,
                last_error: match &rec.repairs.get(i) {
                    Some((_, Repair::Failed { reason })) => Some(reason.clone()),
                    _ => None,
                },
            })
            .collect();
        Replicator {
            inner: Mutex::new(Inner {
                peers,
                stats: ReplStats {
                    epoch: rec.epoch,
                    quorum,
                    order,
                    committed: rec.next_lsn.saturating_sub(1),
                    forces: 0,
                    backups,
                    failed: None,
                },
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner<P>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counters and the state of every backup.
    pub fn stats(&self) -> ReplStats {
        self.lock().stats.clone()
    }

    /// Tell the live backups the committed LSN (an empty write), so they can apply the last
    /// writes without waiting for the next one; a backup that does not answer is dropped as
    /// in a force. Returns the live backups left. Call it every so often while idle.
    pub fn heartbeat(&self) -> usize {
        let mut inner = self.lock();
        if inner.stats.failed.is_none() {
            Self::ship(&mut inner, &[], 0);
        }
        inner.stats.backups.iter().filter(|b| b.live).count()
    }

    /// Send `reqs` to live backup `i` in order and wait for each answer; the first answer
    /// that is not an acknowledgement is returned as an error (and the backup is dropped, as
    /// in a force). Snapshots go this way.
    pub fn call(
        &self,
        i: usize,
        reqs: &mut dyn Iterator<Item = Request>,
    ) -> std::result::Result<(), String> {
        let mut inner = self.lock();
        if !inner.stats.backups.get(i).is_some_and(|b| b.live) {
            return Err("not live".into());
        }
        for req in reqs {
            let r = crate::peers::call(&mut inner.peers, i, &req);
            if !r.as_ref().is_some_and(Response::is_ack) {
                let why = match r {
                    Some(Response::Error(e)) => e,
                    Some(Response::Fenced { promised }) => {
                        format!("promised epoch {promised}: another primary took over")
                    }
                    Some(_) => "unexpected answer".into(),
                    None => "timed out or disconnected; dropped".into(),
                };
                let b = &mut inner.stats.backups[i];
                b.live = false;
                b.last_error = Some(why.clone());
                inner.peers.disconnect(i);
                return Err(why);
            }
        }
        Ok(())
    }

    /// How far every live backup's store has durably applied the log (the lowest of their
    /// applied LSNs), or `None` with no live backup: with the primary's own applied LSN, the
    /// point up to which the log may be trimmed. A dropped backup does not hold the trim back;
    /// when it returns behind the trimmed records it needs a snapshot.
    pub fn applied_by_live(&self) -> Option<u64> {
        let inner = self.lock();
        inner
            .stats
            .backups
            .iter()
            .filter(|b| b.live)
            .map(|b| b.applied_lsn)
            .min()
    }

    /// Change the flush order (benchmarks).
    pub fn set_order(&self, order: FlushOrder) {
        self.lock().stats.order = order;
    }

    /// Send the write of `extents` to every live backup (several requests if it does not fit
    /// one frame).
    fn send_writes(inner: &mut Inner<P>, extents: &[Extent]) {
        let s = &inner.stats;
        let reqs = write_requests(s.epoch, s.committed, extents);
        for (i, b) in s.backups.iter().enumerate() {
            if b.live {
                for r in &reqs {
                    inner.peers.send(i, r);
                }
            }
        }
    }

    /// Collect the answers to [`Replicator::send_writes`]: a backup acknowledged if it
    /// acknowledged every request; any other backup is dropped. Returns the acknowledgements
    /// and the epoch a fencing backup promised, if one did.
    fn collect(inner: &mut Inner<P>, last_lsn: u64) -> (usize, Option<u64>) {
        let mut verdicts: Vec<(usize, Option<Response>)> = Vec::new();
        for (i, r) in inner.peers.finish() {
            match verdicts.iter_mut().find(|v| v.0 == i) {
                Some(v) if v.1.as_ref().is_some_and(Response::is_ack) => v.1 = r,
                Some(_) => {}
                None => verdicts.push((i, r)),
            }
        }
        let s = &mut inner.stats;
        let mut acks = 0;
        let mut fenced = None;
        for (i, r) in verdicts {
            let b = &mut s.backups[i];
            match r {
                Some(Response::Ack) => {
                    acks += 1;
                    b.acked_lsn = b.acked_lsn.max(last_lsn);
                }
                Some(Response::Applied { applied }) => {
                    acks += 1;
                    b.acked_lsn = b.acked_lsn.max(last_lsn);
                    b.applied_lsn = applied;
                }
                other => {
                    b.live = false;
                    b.last_error = Some(match other {
                        Some(Response::Fenced { promised }) => {
                            fenced = Some(promised);
                            format!("promised epoch {promised}: another primary took over")
                        }
                        Some(Response::Error(e)) => e,
                        Some(_) => "unexpected answer".into(),
                        None => "timed out or disconnected; dropped".into(),
                    });
                    inner.peers.disconnect(i);
                }
            }
        }
        (acks, fenced)
    }

    fn ship(inner: &mut Inner<P>, extents: &[Extent], last_lsn: u64) -> (usize, Option<u64>) {
        Self::send_writes(inner, extents);
        Self::collect(inner, last_lsn)
    }
}

/// Bytes of extent data one `Write` request carries at most: well inside a frame
/// ([`crate::proto::FRAME_BODY_MAX`]) with its headers.
pub const WRITE_REQUEST_BYTES: usize = crate::proto::FRAME_BODY_MAX / 2;

/// The `Write` requests that carry `extents`, each with at most [`WRITE_REQUEST_BYTES`] of
/// data (an extent longer than that is split); one empty request if there are none (a
/// heartbeat).
fn write_requests(epoch: u64, committed: u64, extents: &[Extent]) -> Vec<Request> {
    let mut reqs = Vec::new();
    let mut cur: Vec<Extent> = Vec::new();
    let mut cur_bytes = 0;
    for e in extents {
        let mut at = 0;
        while at < e.bytes.len() || (e.bytes.is_empty() && at == 0) {
            if cur_bytes == WRITE_REQUEST_BYTES {
                reqs.push(std::mem::take(&mut cur));
                cur_bytes = 0;
            }
            let n = (e.bytes.len() - at).min(WRITE_REQUEST_BYTES - cur_bytes);
            cur.push(Extent {
                offset: e.offset + at as u64,
                bytes: e.bytes[at..at + n].to_vec(),
            });
            cur_bytes += n;
            at += n;
            if n == 0 {
                break;
            }
        }
    }
    if !cur.is_empty() || reqs.is_empty() {
        reqs.push(cur);
    }
    reqs.into_iter()
        .map(|extents| Request::Write {
            epoch,
            committed,
            extents,
        })
        .collect()
}

impl<P: Peers> Mirror for Replicator<P> {
    fn replicate(
        &self,
        extents: &[Extent],
        last_lsn: u64,
        flush_local: &mut dyn FnMut() -> log::Result<()>,
    ) -> log::Result<()> {
        let mut inner = self.lock();
        if let Some(why) = &inner.stats.failed {
            return Err(LogError::Replication(why.clone()));
        }
        let order = inner.stats.order;
        if order == FlushOrder::FlushFirst {
            flush_local()?;
        }
        let (acks, fenced) = if order == FlushOrder::Parallel {
            // Send, flush while the backups work, then collect.
            Self::send_writes(&mut inner, extents);
            let flushed = flush_local();
            let got = Self::collect(&mut inner, last_lsn);
            flushed?;
            got
        } else {
            Self::ship(&mut inner, extents, last_lsn)
        };
        let s = &mut inner.stats;
        s.forces += 1;
        let failure = match fenced {
            Some(p) => Some(format!(
                "a backup promised epoch {p} (this primary holds {}): another primary took over",
                s.epoch
            )),
            None if acks < s.quorum.write() => Some(format!(
                "write quorum lost: {acks} of the {} backups needed acknowledged \
                 ({} of {} backups live)",
                s.quorum.write(),
                s.backups.iter().filter(|b| b.live).count(),
                s.backups.len()
            )),
            None => None,
        };
        if let Some(why) = failure {
            s.failed = Some(why.clone());
            return Err(LogError::Replication(why));
        }
        if last_lsn > 0 {
            s.committed = s.committed.max(last_lsn);
        }
        drop(inner);
        if order == FlushOrder::ReplicateFirst {
            flush_local()?;
        }
        Ok(())
    }
}
