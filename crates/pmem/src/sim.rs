//! The persistence simulator: a medium that knows which bytes would survive a power failure.
//!
//! It keeps two images. Stores land in the *working* image (what the CPU sees). A flushed line is
//! remembered as pending with its contents at flush time and becomes part of the *durable* image
//! (what the media holds) at the next fence. At a simulated power failure every line that differs
//! between the two, or is still pending, is independently kept (its newest contents survive),
//! dropped (the durable contents stay) or torn (each 8-byte word picked from the candidates), by
//! a seeded generator: the same seed gives the same crash image.
//!
//! Crash points: at the N-th fence (before it takes effect), or at the N-th event (any store,
//! flush or fence). Random eviction makes a written line durable early, as a cache may at any
//! time. After the crash the simulator latches: every later flush or fence returns
//! [`PmemError::SimulatedCrash`], so the code under test unwinds through its ordinary error path;
//! the frozen crash image is then reopened by the harness.
//!
//! Flush on fail ([`SimDomain::FlushOnFail`]): `flush` is skipped as in eadr, only
//! [`Medium::write_back`] (plus the fence) makes a line durable, and a crash has two fates
//! ([`Fate`]): a completed save (every store kept) or a missed window (an ADR power failure).
//! The harness ([`crash_at_every_fence_fates`], [`crash_at_random_points_fates`]) checks both.
//!
//! Checking mode ([`SimMedium::unpersisted`]) lists the lines still not durable, as pmemcheck does
//! at exit: a clean close with a non-empty list is a missing flush or fence.

use crate::cpu::CACHE_LINE;
use crate::domain::{Backing, Domain};
use crate::error::{PmemError, Result};
use crate::medium::{Medium, check_range, check_word};
use crate::rng::SplitMix64;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::thread::ThreadId;

/// When the simulator cuts power.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPlan {
    /// Never (until [`SimMedium::power_fail`] is called).
    Never,
    /// Just before the N-th fence (1-based) takes effect.
    AtFence(u64),
    /// Just before the N-th event (store, flush or fence; 1-based).
    AtEvent(u64),
}

/// Simulator settings.
#[derive(Debug, Clone, Copy)]
pub struct SimConfig {
    /// Seed for eviction and for the keep/drop/tear choices.
    pub seed: u64,
    /// When to crash.
    pub crash: CrashPlan,
    /// Chance, per million stores, that a just-written line is evicted (made durable) at once.
    pub evict_per_million: u32,
    /// The persistence domain simulated (M16 in `docs/media-assumptions.md`).
    pub domain: SimDomain,
    /// Crash images to check at each crash point: every outcome when there are at most this
    /// many, else a covering set plus seeded samples up to this many. 0 means the default
    /// ([`default_images_per_crash`]).
    pub images_per_crash: usize,
    /// `msync` domain: the N-th flush (an msync, 1-based) fails; 0 means never.
    pub fail_msync_at: u64,
    /// `msync` domain: the device's write unit, 512 or 4096 bytes: a page write-back may be torn
    /// between units, never inside one.
    pub sector: usize,
}

/// The persistence domain the simulator models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SimDomain {
    /// Cache-line write-back plus a fence of the same thread (M2, M5).
    #[default]
    Adr,
    /// Caches are persistent: every store survives, except non-temporal stores still in a
    /// thread's write-combining buffers (not yet fenced by that thread).
    Eadr,
    /// A page cache: a flush is an `msync` of the pages, durable when it returns; the kernel may
    /// write back any dirty page at any time, torn between sectors (M7).
    Msync,
    /// Flush on fail (WSP): the critical path's flushes are no-ops (as in `eadr`), and only an
    /// explicit [`Medium::write_back`] (clwb plus the fence of the same thread) makes a line
    /// durable on the spot. A power failure has two fates ([`Fate`]): the save completed in the
    /// window (every store is kept, non-temporal ones too: the save stops the threads and
    /// writes every line back), or the window was missed (an ordinary ADR power failure: every
    /// line not written back may be kept, dropped or torn).
    FlushOnFail,
}

/// Which of the two outcomes of a power failure in the [`SimDomain::FlushOnFail`] domain an
/// image shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fate {
    /// The save finished inside the window: every store the threads made is in the image.
    Saved,
    /// The save did not finish (or the domain has no save): what the domain's ordinary power
    /// failure leaves. The only fate outside `FlushOnFail`.
    MissedWindow,
}

impl SimConfig {
    /// This configuration crashing at an event drawn from `seed` among the first `events`, with
    /// an eviction rate drawn from {0, 1%, 10%, 50%} per store and line: one random crash point
    /// (what [`crash_at_random_points_with`] runs, for tests with their own loops).
    pub fn at_random_event(self, seed: u64, events: u64) -> SimConfig {
        let mut pick = SplitMix64::new(seed);
        SimConfig {
            seed,
            crash: CrashPlan::AtEvent(1 + pick.below(events.max(1))),
            evict_per_million: [0, 10_000, 100_000, 500_000][pick.below(4) as usize],
            ..self
        }
    }
}

/// Crash images per crash point when the configuration does not say: `KAVACH_SIM_IMAGES`, or 8.
pub fn default_images_per_crash() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("KAVACH_SIM_IMAGES")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n: &usize| n > 0)
            .unwrap_or(8)
    })
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 0,
            crash: CrashPlan::Never,
            evict_per_million: 0,
            domain: SimDomain::Adr,
            images_per_crash: 0,
            fail_msync_at: 0,
            sector: 512,
        }
    }
}

/// How far a non-durable line got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineState {
    /// Stored to, never written back.
    Dirty,
    /// Written back, but no fence since.
    Flushed,
}

/// A line that would not survive a power failure right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unpersisted {
    /// Offset of the cache line.
    pub offset: usize,
    /// How far it got.
    pub state: LineState,
}

/// What a thread is about to do to the simulated medium (see [`OpHook`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `read` or `load_u64`.
    Load,
    /// `write`, `write_nontemporal` or `store_u64`.
    Store,
    /// `flush`.
    Flush,
    /// `fence` (and `grow`, which counts as one).
    Fence,
}

/// Called before every operation a thread issues on a [`SimMedium`], outside the simulator's
/// lock: the yield point of a deterministic scheduler ([`SimMedium::with_hook`]).
pub trait OpHook: Send + Sync + std::fmt::Debug {
    /// The calling thread is about to perform `op`.
    fn before(&self, op: Op);
}

/// The simulated medium. Cheap to clone images in and out; meant for pools of a few MiB.
#[derive(Debug)]
pub struct SimMedium {
    len: std::sync::atomic::AtomicUsize,
    state: Mutex<State>,
    hook: Option<std::sync::Arc<dyn OpHook>>,
}

/// One flush (or non-temporal store) not yet ordered by its thread's fence: the line's contents
/// when it was issued.
type Snapshot = [u8; CACHE_LINE];

#[derive(Debug)]
struct State {
    working: Vec<u8>,
    durable: Vec<u8>,
    /// Per thread: the lines it flushed (or stored non-temporally) since its last fence, each
    /// with every snapshot in issue order (M16: only that thread's fence drains them).
    pending: HashMap<ThreadId, BTreeMap<usize, Vec<Snapshot>>>,
    /// `msync` domain: pages whose write-back failed. The kernel dropped their dirty state, so
    /// until they are stored to again nothing writes them back.
    lost_pages: BTreeSet<usize>,
    /// `msync` domain: a flush failed; every later flush and fence fails.
    msync_failed: bool,
    flushes: u64,
    fences: u64,
    events: u64,
    crash: Option<CrashState>,
    rng: SplitMix64,
    cfg: SimConfig,
}

/// What the medium held when the power failed: the durable image plus, for each unit (a cache
/// line, or in the `msync` domain a sector) whose fate is open, the contents it may have.
#[derive(Debug, Clone)]
pub struct CrashState {
    base: Vec<u8>,
    /// Word size inside which nothing tears (8 bytes for lines, the whole unit for sectors).
    word: usize,
    /// (offset, candidates): candidate 0 is the durable contents, the last the newest.
    open: Vec<(usize, Vec<Vec<u8>>)>,
    /// The image chosen by the seeded generator (what [`SimMedium::crash_image`] returns): in
    /// `FlushOnFail`, a missed-window image.
    sampled: Vec<u8>,
    /// `FlushOnFail`: the completed-save image (the working image at the crash point, every
    /// store and every non-temporal store kept).
    saved: Option<Vec<u8>>,
    seed: u64,
    budget: usize,
}

/// The page size the `msync` domain writes back.
const PAGE: usize = crate::layout::PAGE_SIZE;

fn line_of(offset: usize) -> usize {
    offset / CACHE_LINE * CACHE_LINE
}

impl State {
    /// Count one event; crash first if the plan says this is the one. Returns false once crashed.
    fn event(&mut self, is_fence: bool) -> bool {
        if self.crash.is_some() {
            return false;
        }
        self.events += 1;
        if is_fence {
            self.fences += 1;
        }
        let hit = match self.cfg.crash {
            CrashPlan::Never => false,
            CrashPlan::AtFence(n) => is_fence && self.fences == n,
            CrashPlan::AtEvent(n) => self.events == n,
        };
        if hit {
            self.crash = Some(self.crash_state());
            return false;
        }
        true
    }

    fn pending_lines(&self) -> BTreeSet<usize> {
        self.pending
            .values()
            .flat_map(|m| m.keys().copied())
            .collect()
    }

    fn lines_not_durable(&self) -> Vec<usize> {
        let mut lines: BTreeSet<usize> = (0..self.working.len())
            .step_by(CACHE_LINE)
            .filter(|&l| self.working[l..l + CACHE_LINE] != self.durable[l..l + CACHE_LINE])
            .collect();
        lines.extend(self.pending_lines());
        if self.cfg.domain == SimDomain::Msync {
            lines.retain(|l| !self.lost_pages.contains(&(l / PAGE * PAGE)));
        }
        lines.into_iter().collect()
    }

    /// Every contents a line may hold after a power failure, durable first, newest last.
    fn line_candidates(&self, l: usize) -> Vec<Vec<u8>> {
        let mut c: Vec<Vec<u8>> = vec![self.durable[l..l + CACHE_LINE].to_vec()];
        for snaps in self.pending.values() {
            if let Some(v) = snaps.get(&l) {
                c.extend(v.iter().map(|s| s.to_vec()));
            }
        }
        c.push(self.working[l..l + CACHE_LINE].to_vec());
        let mut out: Vec<Vec<u8>> = Vec::with_capacity(c.len());
        for x in c {
            if !out.contains(&x) {
                out.push(x);
            }
        }
        out
    }

    fn crash_state(&mut self) -> CrashState {
        let budget = match self.cfg.images_per_crash {
            0 => default_images_per_crash(),
            n => n,
        };
        let (word, open) = match self.cfg.domain {
            // A missed window in flush-on-fail is an ordinary ADR power failure: what was not
            // written back (clwb + fence) is open.
            SimDomain::Adr | SimDomain::FlushOnFail => {
                let open = self
                    .lines_not_durable()
                    .into_iter()
                    .map(|l| (l, self.line_candidates(l)))
                    .filter(|(_, c)| c.len() > 1)
                    .collect();
                (8, open)
            }
            SimDomain::Eadr => {
                // Every store is in the persistence domain (the durable image already has it);
                // only non-temporal stores not yet fenced by their thread may be lost.
                let open = self
                    .pending_lines()
                    .into_iter()
                    .map(|l| (l, self.line_candidates(l)))
                    .filter(|(_, c)| c.len() > 1)
                    .collect();
                (8, open)
            }
            SimDomain::Msync => {
                let sector = self.cfg.sector.clamp(512, PAGE);
                let mut open = Vec::new();
                for p in (0..self.working.len()).step_by(PAGE) {
                    if self.lost_pages.contains(&p) {
                        continue;
                    }
                    let end = (p + PAGE).min(self.working.len());
                    let mut s = p;
                    while s < end {
                        let e = (s + sector).min(end);
                        if self.working[s..e] != self.durable[s..e] {
                            open.push((
                                s,
                                vec![self.durable[s..e].to_vec(), self.working[s..e].to_vec()],
                            ));
                        }
                        s = e;
                    }
                }
                (sector, open)
            }
        };
        let seed = self.rng.next_u64();
        let saved = (self.cfg.domain == SimDomain::FlushOnFail).then(|| self.working.clone());
        let mut st = CrashState {
            base: self.durable.clone(),
            word,
            open,
            sampled: Vec::new(),
            saved,
            seed,
            budget,
        };
        st.sampled = st.sample(&mut self.rng);
        st
    }

    fn store(&mut self, offset: usize, data: &[u8]) {
        self.working[offset..offset + data.len()].copy_from_slice(data);
        if data.is_empty() {
            return;
        }
        match self.cfg.domain {
            // The caches are persistent: a store is durable once it is visible.
            // The caches are persistent: a store is durable once it is visible, and a pending
            // non-temporal snapshot of the same line carries it too (its fence must not undo it).
            SimDomain::Eadr => {
                self.durable[offset..offset + data.len()].copy_from_slice(data);
                let end = offset + data.len();
                for snaps in self.pending.values_mut() {
                    for (&l, v) in snaps.range_mut(line_of(offset)..end) {
                        let (from, to) = (offset.max(l), end.min(l + CACHE_LINE));
                        for s in v.iter_mut() {
                            s[from - l..to - l].copy_from_slice(&data[from - offset..to - offset]);
                        }
                    }
                }
                return;
            }
            SimDomain::Msync => {
                let (first, last) = (
                    offset / PAGE * PAGE,
                    (offset + data.len() - 1) / PAGE * PAGE,
                );
                let lost: Vec<usize> = self.lost_pages.range(first..=last).copied().collect();
                for p in lost {
                    self.lost_pages.remove(&p);
                }
            }
            SimDomain::Adr | SimDomain::FlushOnFail => {}
        }
        if self.cfg.evict_per_million > 0 && self.crash.is_none() {
            let (mut l, step) = match self.cfg.domain {
                SimDomain::Msync => (offset / PAGE * PAGE, PAGE),
                _ => (line_of(offset), CACHE_LINE),
            };
            while l < offset + data.len() {
                if self.rng.chance(self.cfg.evict_per_million) {
                    let e = (l + step).min(self.working.len());
                    let (w, d) = (&self.working[l..e], &mut self.durable[l..e]);
                    d.copy_from_slice(w);
                    let mut line = l;
                    while line < e {
                        let now: Snapshot = self.working[line..line + CACHE_LINE]
                            .try_into()
                            .expect("line");
                        for snaps in self.pending.values_mut() {
                            if let Some(v) = snaps.get_mut(&line) {
                                for s in v.iter_mut() {
                                    *s = now;
                                }
                            }
                        }
                        line += CACHE_LINE;
                    }
                }
                l += step;
            }
        }
    }

    /// Record this thread's write-back of the lines of `[offset, offset + len)`.
    fn mark_flushed(&mut self, offset: usize, len: usize) {
        if len == 0 {
            return;
        }
        let mine = self.pending.entry(std::thread::current().id()).or_default();
        let mut l = line_of(offset);
        while l < offset + len {
            let snap: Snapshot = self.working[l..l + CACHE_LINE].try_into().expect("line");
            let v = mine.entry(l).or_default();
            if v.last() != Some(&snap) {
                v.push(snap);
            }
            l += CACHE_LINE;
        }
    }

    /// This thread's fence: its pending write-backs reach the medium, the newest of each line
    /// last.
    fn drain_mine(&mut self) {
        if let Some(mine) = self.pending.remove(&std::thread::current().id()) {
            for (l, snaps) in mine {
                if let Some(last) = snaps.last() {
                    self.durable[l..l + CACHE_LINE].copy_from_slice(last);
                }
            }
        }
    }

    /// `msync` of the pages under a range: durable at once, or (the planned failure) not at
    /// all and latched.
    fn msync(&mut self, offset: usize, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let start = offset / PAGE * PAGE;
        let end = (offset + len).div_ceil(PAGE) * PAGE;
        let end = end.min(self.working.len());
        self.flushes += 1;
        if self.cfg.fail_msync_at != 0 && self.flushes == self.cfg.fail_msync_at {
            self.msync_failed = true;
            let mut p = start;
            while p < end {
                if self.working[p..(p + PAGE).min(end)] != self.durable[p..(p + PAGE).min(end)] {
                    self.lost_pages.insert(p);
                }
                p += PAGE;
            }
            return Err(PmemError::io(
                "msync failed on",
                "<simulated medium>",
                std::io::Error::from_raw_os_error(libc::EIO),
            ));
        }
        let (w, d) = (&self.working[start..end], &mut self.durable[start..end]);
        d.copy_from_slice(w);
        Ok(())
    }
}

impl CrashState {
    /// Units (lines or sectors) whose contents after the crash are open.
    pub fn open_units(&self) -> usize {
        self.open.len()
    }

    /// How many distinct whole-unit outcomes there are (saturating).
    pub fn outcomes(&self) -> u64 {
        self.open
            .iter()
            .fold(1u64, |acc, (_, c)| acc.saturating_mul(c.len() as u64))
    }

    fn build(&self, choice: &[usize]) -> Vec<u8> {
        let mut img = self.base.clone();
        for ((off, cands), &k) in self.open.iter().zip(choice) {
            let c = &cands[k];
            img[*off..*off + c.len()].copy_from_slice(c);
        }
        img
    }

    /// One image by the seeded generator: each open unit independently kept (one of its newer
    /// contents), dropped (durable contents) or torn (each word from any candidate).
    fn sample(&self, rng: &mut SplitMix64) -> Vec<u8> {
        let mut img = self.base.clone();
        for (off, cands) in &self.open {
            let out = &mut img[*off..*off + cands[0].len()];
            match rng.below(3) {
                0 => {
                    let pick = 1 + rng.below(cands.len() as u64 - 1) as usize;
                    out.copy_from_slice(&cands[pick]);
                }
                1 => out.copy_from_slice(&cands[0]),
                _ => {
                    for w in (0..out.len()).step_by(self.word) {
                        let e = (w + self.word).min(out.len());
                        let pick = rng.below(cands.len() as u64) as usize;
                        out[w..e].copy_from_slice(&cands[pick][w..e]);
                    }
                }
            }
        }
        img
    }

    /// The choices to check, as candidate indices per open unit: every combination when there
    /// are at most `budget`; otherwise a covering set in which every pair of open units is seen
    /// in all four (durable, newest) combinations, each intermediate snapshot at least once, and
    /// seeded samples up to the budget.
    fn choices(&self) -> Vec<Vec<usize>> {
        let k = self.open.len();
        let total = self.outcomes();
        if total <= self.budget as u64 {
            let mut out = Vec::with_capacity(total as usize);
            let mut c = vec![0usize; k];
            loop {
                out.push(c.clone());
                // Mixed-radix increment.
                let mut i = 0;
                loop {
                    if i == k {
                        return out;
                    }
                    c[i] += 1;
                    if c[i] < self.open[i].1.len() {
                        break;
                    }
                    c[i] = 0;
                    i += 1;
                }
            }
        }
        let newest = |i: usize| self.open[i].1.len() - 1;
        let mut out: Vec<Vec<usize>> = Vec::new();
        // Strength-2 binary covering array: give each unit a distinct n-bit column of weight
        // n/2 (no column contains another, so every ordered pair of units differs both ways in
        // some row), plus an all-durable and an all-newest row.
        let mut n = 2usize;
        while binomial(n, n / 2) < k as u64 {
            n += 1;
        }
        let cols = weight_columns(n, n / 2, k);
        out.push(vec![0; k]);
        out.push((0..k).map(newest).collect());
        for row in 0..n {
            out.push(
                (0..k)
                    .map(|i| {
                        if cols[i] >> row & 1 == 1 {
                            newest(i)
                        } else {
                            0
                        }
                    })
                    .collect(),
            );
        }
        // Intermediate snapshots (a line flushed, stored to and flushed again): each once.
        let most = self.open.iter().map(|(_, c)| c.len()).max().unwrap_or(0);
        for j in 1..most.saturating_sub(1) {
            out.push(
                (0..k)
                    .map(|i| if j < newest(i) { j } else { newest(i) })
                    .collect(),
            );
        }
        let mut rng = SplitMix64::new(self.seed);
        while out.len() < self.budget {
            out.push(
                self.open
                    .iter()
                    .map(|(_, c)| rng.below(c.len() as u64) as usize)
                    .collect(),
            );
        }
        out
    }

    /// Every image to check at this crash point: in `FlushOnFail` the completed-save image
    /// first, then [`CrashState::choices`] plus the seeded generator's image (the only one with
    /// torn units), without duplicates.
    pub fn images(&self) -> Vec<Vec<u8>> {
        self.fates().into_iter().map(|(_, img)| img).collect()
    }

    /// [`CrashState::images`], each with its fate. An image both fates can leave (nothing was
    /// open) is listed once, as [`Fate::Saved`].
    pub fn fates(&self) -> Vec<(Fate, Vec<u8>)> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        if let Some(saved) = &self.saved {
            seen.insert(fingerprint(saved));
            out.push((Fate::Saved, saved.clone()));
        }
        for img in std::iter::once(self.sampled.clone())
            .chain(self.choices().iter().map(|c| self.build(c)))
        {
            let h = fingerprint(&img);
            if seen.insert(h) {
                out.push((Fate::MissedWindow, img));
            }
        }
        out
    }

    /// `FlushOnFail`: the completed-save image (every store kept).
    pub fn saved(&self) -> Option<&[u8]> {
        self.saved.as_deref()
    }

    /// The sampled image.
    pub fn sampled(&self) -> &[u8] {
        &self.sampled
    }
}

fn binomial(n: usize, k: usize) -> u64 {
    let mut r = 1u64;
    for i in 0..k {
        r = r.saturating_mul((n - i) as u64) / (i as u64 + 1);
    }
    r
}

/// The first `count` n-bit numbers with `w` bits set, in increasing order.
fn weight_columns(n: usize, w: usize, count: usize) -> Vec<u64> {
    let mut out = Vec::with_capacity(count);
    let mut x: u64 = (1u64 << w) - 1;
    while out.len() < count && x < (1u64 << n) {
        out.push(x);
        if x == 0 {
            break;
        }
        // Next number with the same number of set bits (Gosper's hack).
        let c = x & x.wrapping_neg();
        let r = x + c;
        x = (((r ^ x) >> 2) / c) | r;
    }
    out
}

/// A 64-bit FNV-1a hash of an image, to drop duplicate crash images.
fn fingerprint(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for chunk in b.chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        h ^= u64::from_le_bytes(w);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl SimMedium {
    /// A zeroed medium of `len` bytes (a multiple of the cache line).
    pub fn new(len: usize, cfg: SimConfig) -> SimMedium {
        Self::from_image(vec![0; len], cfg)
    }

    /// A medium whose working and durable images both start as `image`: what a machine sees
    /// when it boots after a crash.
    pub fn from_image(image: Vec<u8>, cfg: SimConfig) -> SimMedium {
        assert!(
            image.len() % CACHE_LINE == 0,
            "simulated media are whole cache lines"
        );
        SimMedium {
            len: std::sync::atomic::AtomicUsize::new(image.len()),
            state: Mutex::new(State {
                durable: image.clone(),
                working: image,
                pending: HashMap::new(),
                lost_pages: BTreeSet::new(),
                msync_failed: false,
                flushes: 0,
                fences: 0,
                events: 0,
                crash: None,
                rng: SplitMix64::new(cfg.seed),
                cfg,
            }),
            hook: None,
        }
    }

    /// Call `hook` before every operation on this medium (a scheduler's yield point).
    pub fn with_hook(mut self, hook: std::sync::Arc<dyn OpHook>) -> SimMedium {
        self.hook = Some(hook);
        self
    }

    #[inline]
    fn before(&self, op: Op) {
        if let Some(h) = &self.hook {
            h.before(op);
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic in another test thread must not hide this simulator's state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The image frozen at the crash point, if the plan has fired (the seeded generator's
    /// choice; [`SimMedium::crash_state`] has every image worth checking).
    pub fn crash_image(&self) -> Option<Vec<u8>> {
        self.lock().crash.as_ref().map(|c| c.sampled.clone())
    }

    /// What the medium held when the power failed, if it has.
    pub fn crash_state(&self) -> Option<CrashState> {
        self.lock().crash.clone()
    }

    /// Has the power failed?
    pub fn crashed(&self) -> bool {
        self.lock().crash.is_some()
    }

    /// Fences issued so far (the one that crashed included).
    pub fn fences(&self) -> u64 {
        self.lock().fences
    }

    /// Events (stores, flushes, fences) so far.
    pub fn events(&self) -> u64 {
        self.lock().events
    }

    /// Cut power now (unless it already failed) and return the crash image.
    pub fn power_fail(&self) -> Vec<u8> {
        self.power_fail_state().sampled
    }

    /// Cut power now (unless it already failed) and return what the medium held.
    pub fn power_fail_state(&self) -> CrashState {
        let mut st = self.lock();
        if st.crash.is_none() {
            let c = st.crash_state();
            st.crash = Some(c);
        }
        st.crash.clone().expect("set above")
    }

    /// Lines that would not survive a power failure now (checking mode).
    pub fn unpersisted(&self) -> Vec<Unpersisted> {
        let st = self.lock();
        let pending = st.pending_lines();
        let dirty: Vec<usize> = match st.cfg.domain {
            SimDomain::Eadr => pending.iter().copied().collect(),
            _ => st.lines_not_durable(),
        };
        dirty
            .into_iter()
            .map(|offset| Unpersisted {
                offset,
                state: if pending.contains(&offset) {
                    LineState::Flushed
                } else {
                    LineState::Dirty
                },
            })
            .collect()
    }

    /// The durable image as it stands (no crash choices applied).
    pub fn durable_image(&self) -> Vec<u8> {
        self.lock().durable.clone()
    }

    /// The working image (what a reader sees now).
    pub fn working_image(&self) -> Vec<u8> {
        self.lock().working.clone()
    }
}

impl Medium for SimMedium {
    fn len(&self) -> usize {
        self.len.load(std::sync::atomic::Ordering::Acquire)
    }
    fn domain(&self) -> Domain {
        Domain::Sim
    }
    fn backing(&self) -> Backing {
        Backing::Simulated
    }
    fn label(&self) -> std::path::PathBuf {
        std::path::PathBuf::from("<simulated medium>")
    }
    fn read(&self, offset: usize, buf: &mut [u8]) {
        self.before(Op::Load);
        check_range(offset, buf.len(), self.len());
        buf.copy_from_slice(&self.lock().working[offset..offset + buf.len()]);
    }
    fn write(&self, offset: usize, data: &[u8]) {
        self.before(Op::Store);
        check_range(offset, data.len(), self.len());
        let mut st = self.lock();
        st.event(false);
        st.store(offset, data);
    }
    fn write_nontemporal(&self, offset: usize, data: &[u8]) {
        self.before(Op::Store);
        check_range(offset, data.len(), self.len());
        let mut st = self.lock();
        let live = st.event(false);
        match st.cfg.domain {
            // Stores that went around the cache wait in this thread's write-combining buffers.
            SimDomain::Adr | SimDomain::Eadr | SimDomain::FlushOnFail => {
                st.working[offset..offset + data.len()].copy_from_slice(data);
                if live {
                    st.mark_flushed(offset, data.len());
                }
            }
            // The mapping msyncs a non-temporal copy at once (M7); a failure latches.
            SimDomain::Msync => {
                st.store(offset, data);
                if live && !st.msync_failed {
                    let _ = st.msync(offset, data.len());
                }
            }
        }
    }
    fn load_u64(&self, offset: usize) -> u64 {
        self.before(Op::Load);
        check_word(offset, self.len());
        let st = self.lock();
        u64::from_le_bytes(st.working[offset..offset + 8].try_into().expect("word"))
    }
    fn store_u64(&self, offset: usize, value: u64) {
        self.before(Op::Store);
        check_word(offset, self.len());
        let mut st = self.lock();
        st.event(false);
        st.store(offset, &value.to_le_bytes());
    }
    fn flush(&self, offset: usize, len: usize) -> Result<()> {
        self.before(Op::Flush);
        check_range(offset, len, self.len());
        let mut st = self.lock();
        if !st.event(false) {
            return Err(PmemError::SimulatedCrash);
        }
        match st.cfg.domain {
            SimDomain::Adr => st.mark_flushed(offset, len),
            // Caches are persistent: a write-back changes nothing. In flush-on-fail the
            // critical path's flushes are skipped as in eadr (the save writes lines back).
            SimDomain::Eadr | SimDomain::FlushOnFail => {}
            SimDomain::Msync => {
                if st.msync_failed {
                    return Err(PmemError::Failed);
                }
                st.msync(offset, len)?;
            }
        }
        Ok(())
    }
    fn write_back(&self, offset: usize, len: usize) -> Result<()> {
        self.before(Op::Flush);
        check_range(offset, len, self.len());
        let mut st = self.lock();
        if !st.event(false) {
            return Err(PmemError::SimulatedCrash);
        }
        match st.cfg.domain {
            // A real write-back in every domain that has caches to write back.
            SimDomain::Adr | SimDomain::FlushOnFail => st.mark_flushed(offset, len),
            SimDomain::Eadr => {}
            SimDomain::Msync => {
                if st.msync_failed {
                    return Err(PmemError::Failed);
                }
                st.msync(offset, len)?;
            }
        }
        Ok(())
    }
    fn fence(&self) -> Result<()> {
        self.before(Op::Fence);
        let mut st = self.lock();
        if !st.event(true) {
            return Err(PmemError::SimulatedCrash);
        }
        if st.msync_failed {
            return Err(PmemError::Failed);
        }
        // Only this thread's write-backs and non-temporal stores (M16).
        st.drain_mine();
        Ok(())
    }
    /// Growing counts as a fence (a crash point just before the growth); the new zero bytes
    /// are durable at once, as a file's new size is once `fsync` returns.
    fn grow(&self, len: usize) -> Result<()> {
        self.before(Op::Fence);
        let mut st = self.lock();
        if len <= st.working.len() {
            return Ok(());
        }
        assert!(
            len % CACHE_LINE == 0,
            "simulated media are whole cache lines"
        );
        if !st.event(true) {
            return Err(PmemError::SimulatedCrash);
        }
        st.working.resize(len, 0);
        st.durable.resize(len, 0);
        self.len.store(len, std::sync::atomic::Ordering::Release);
        Ok(())
    }
    fn inject(&self, offset: usize, data: &[u8]) -> Result<()> {
        check_range(offset, data.len(), self.len());
        let mut st = self.lock();
        st.working[offset..offset + data.len()].copy_from_slice(data);
        st.durable[offset..offset + data.len()].copy_from_slice(data);
        if !data.is_empty() {
            let (first, last) = (line_of(offset), line_of(offset + data.len() - 1));
            for snaps in st.pending.values_mut() {
                let lines: Vec<usize> = snaps.range(first..=last).map(|(l, _)| *l).collect();
                for l in lines {
                    snaps.remove(&l);
                }
            }
        }
        Ok(())
    }
}

/// Run `op` from `image` once per fence, crashing just before fence 1, 2, 3, ... and handing
/// every crash image worth checking at that point ([`CrashState::images`]: all outcomes of the
/// open lines when few, a covering set plus samples otherwise) with the fence number to `check`.
/// Stops at the first run that finishes without reaching its crash point. Returns the number of
/// crash points tried.
pub fn crash_at_every_fence(
    image: &[u8],
    seed: u64,
    op: impl FnMut(&SimMedium),
    check: impl FnMut(Vec<u8>, u64),
) -> u64 {
    crash_at_every_fence_with(
        SimConfig {
            seed,
            ..SimConfig::default()
        },
        image,
        op,
        check,
    )
}

/// [`crash_at_every_fence`] with a configuration (domain, images per crash point, msync
/// failure); its `crash` plan is replaced at each point and its seed mixed with the fence
/// number. In `FlushOnFail` both fates are checked at every point (the completed-save image
/// first); [`crash_at_every_fence_fates`] says which is which.
pub fn crash_at_every_fence_with(
    cfg: SimConfig,
    image: &[u8],
    op: impl FnMut(&SimMedium),
    mut check: impl FnMut(Vec<u8>, u64),
) -> u64 {
    crash_at_every_fence_fates(cfg, image, op, |img, _, n| check(img, n))
}

/// [`crash_at_every_fence_with`], handing `check` each image's [`Fate`] as well.
pub fn crash_at_every_fence_fates(
    cfg: SimConfig,
    image: &[u8],
    mut op: impl FnMut(&SimMedium),
    mut check: impl FnMut(Vec<u8>, Fate, u64),
) -> u64 {
    let mut images = 0u64;
    let mut saved = 0u64;
    for n in 1.. {
        let run = SimConfig {
            seed: cfg.seed ^ n,
            crash: CrashPlan::AtFence(n),
            ..cfg
        };
        let sim = SimMedium::from_image(image.to_vec(), run);
        op(&sim);
        match sim.crash_state() {
            Some(state) => {
                for (fate, img) in state.fates() {
                    images += 1;
                    saved += u64::from(fate == Fate::Saved);
                    check(img, fate, n);
                }
            }
            None => {
                if cfg.domain == SimDomain::FlushOnFail {
                    println!(
                        "crash images checked: {images} at {} fences ({:?}: {saved} saved, {} \
                         missed-window)",
                        n - 1,
                        cfg.domain,
                        images - saved
                    );
                } else {
                    println!(
                        "crash images checked: {images} at {} fences ({:?})",
                        n - 1,
                        cfg.domain
                    );
                }
                return n - 1;
            }
        }
    }
    unreachable!("the loop above returns")
}

/// Run `op` from `image` `count` times, each crashing at an event chosen from the seed (across
/// all the events the operation issues) with random eviction, and hand each crash image (with
/// its seed) to `check`.
pub fn crash_at_random_points(
    image: &[u8],
    seed: u64,
    count: u64,
    op: impl FnMut(&SimMedium),
    check: impl FnMut(Vec<u8>, u64),
) {
    crash_at_random_points_with(
        SimConfig {
            seed,
            ..SimConfig::default()
        },
        image,
        count,
        op,
        check,
    )
}

/// [`crash_at_random_points`] with a configuration (its `crash`, `evict_per_million` and seed
/// are chosen per run). In `FlushOnFail` each run hands over two images: the completed save's
/// and the sampled missed window's ([`crash_at_random_points_fates`] says which is which).
pub fn crash_at_random_points_with(
    cfg: SimConfig,
    image: &[u8],
    count: u64,
    op: impl FnMut(&SimMedium),
    mut check: impl FnMut(Vec<u8>, u64),
) {
    crash_at_random_points_fates(cfg, image, count, op, |img, _, seed| check(img, seed))
}

/// [`crash_at_random_points_with`], handing `check` each image's [`Fate`] as well.
pub fn crash_at_random_points_fates(
    cfg: SimConfig,
    image: &[u8],
    count: u64,
    mut op: impl FnMut(&SimMedium),
    mut check: impl FnMut(Vec<u8>, Fate, u64),
) {
    let dry = SimMedium::from_image(
        image.to_vec(),
        SimConfig {
            crash: CrashPlan::Never,
            fail_msync_at: 0,
            ..cfg
        },
    );
    op(&dry);
    let events = dry.events().max(1);
    let mut rng = SplitMix64::new(cfg.seed);
    let mut images = 0u64;
    for _ in 0..count {
        let run_seed = rng.next_u64();
        let run = cfg.at_random_event(run_seed, events);
        let sim = SimMedium::from_image(image.to_vec(), run);
        op(&sim);
        let state = sim.power_fail_state();
        if let Some(saved) = state.saved() {
            images += 1;
            check(saved.to_vec(), Fate::Saved, run_seed);
        }
        images += 1;
        check(state.sampled().to_vec(), Fate::MissedWindow, run_seed);
    }
    println!(
        "crash images checked: {images} at {count} random points ({:?})",
        cfg.domain
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushed_and_fenced_lines_survive_every_crash() {
        for seed in 0..50 {
            let sim = SimMedium::new(
                4096,
                SimConfig {
                    seed,
                    ..SimConfig::default()
                },
            );
            sim.write(0, &[1; 64]);
            sim.persist(0, 64).unwrap();
            sim.write(64, &[2; 64]); // never flushed
            sim.write(128, &[3; 64]);
            sim.flush(128, 64).unwrap(); // flushed, never fenced
            let img = sim.power_fail();
            assert_eq!(&img[0..64], &[1; 64]);
            for (base, v) in [(64, 2u8), (128, 3u8)] {
                for w in (0..64).step_by(8) {
                    let word = &img[base + w..base + w + 8];
                    assert!(
                        word == [0; 8] || word == [v; 8],
                        "torn inside an 8-byte word"
                    );
                }
            }
            assert_eq!(
                sim.unpersisted(),
                vec![
                    Unpersisted {
                        offset: 64,
                        state: LineState::Dirty
                    },
                    Unpersisted {
                        offset: 128,
                        state: LineState::Flushed
                    }
                ]
            );
            assert!(
                sim.flush(0, 1).is_err() && sim.fence().is_err(),
                "latched after the crash"
            );
        }
    }

    #[test]
    fn unflushed_lines_are_sometimes_kept_sometimes_dropped_sometimes_torn() {
        let (mut kept, mut dropped, mut torn) = (0, 0, 0);
        for seed in 0..200 {
            let sim = SimMedium::new(
                128,
                SimConfig {
                    seed,
                    ..SimConfig::default()
                },
            );
            sim.write(0, &[9; 64]);
            let img = sim.power_fail();
            match &img[..64] {
                l if l == [9; 64] => kept += 1,
                l if l == [0; 64] => dropped += 1,
                _ => torn += 1,
            }
        }
        assert!(
            kept > 20 && dropped > 20 && torn > 20,
            "{kept} {dropped} {torn}"
        );
    }

    #[test]
    fn a_store_after_a_flush_is_not_covered_by_it() {
        let sim = SimMedium::new(128, SimConfig::default());
        sim.write(0, &[1; 8]);
        sim.flush(0, 8).unwrap();
        sim.write(8, &[2; 8]);
        sim.fence().unwrap();
        let durable = sim.durable_image();
        assert_eq!(&durable[0..8], &[1; 8]);
        assert_eq!(&durable[8..16], &[0; 8]);
        assert_eq!(
            sim.unpersisted(),
            vec![Unpersisted {
                offset: 0,
                state: LineState::Dirty
            }]
        );
    }

    #[test]
    fn same_seed_same_crash_image() {
        let run = |seed| {
            let sim = SimMedium::new(
                4096,
                SimConfig {
                    seed,
                    crash: CrashPlan::AtEvent(40),
                    evict_per_million: 200_000,
                    ..SimConfig::default()
                },
            );
            for i in 0..64u8 {
                sim.write(i as usize * 61, &[i; 13]);
            }
            sim.crash_image().unwrap()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn every_fence_enumeration_visits_each_fence_once() {
        let op = |m: &SimMedium| {
            for i in 0..5 {
                m.write(i * 64, &[1; 64]);
                if m.persist(i * 64, 64).is_err() {
                    return;
                }
            }
        };
        let mut seen = Vec::new();
        let n = crash_at_every_fence(&[0; 512], 1, op, |img, k| {
            // Everything before fence k is durable.
            for i in 0..(k as usize - 1) {
                assert_eq!(&img[i * 64..i * 64 + 64], &[1; 64]);
            }
            if seen.last() != Some(&k) {
                seen.push(k);
            }
        });
        assert_eq!(n, 5);
        assert_eq!(seen, vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn injected_bytes_are_durable_at_once() {
        let sim = SimMedium::new(128, SimConfig::default());
        sim.write(0, &[5; 8]);
        sim.flush(0, 8).unwrap();
        sim.inject(0, &[6; 8]).unwrap();
        sim.fence().unwrap();
        assert_eq!(&sim.durable_image()[..8], &[6; 8]);
        assert_eq!(&sim.power_fail()[..8], &[6; 8]);
    }

    fn sim(len: usize, domain: SimDomain) -> SimMedium {
        SimMedium::new(
            len,
            SimConfig {
                domain,
                ..SimConfig::default()
            },
        )
    }

    #[test]
    fn another_threads_fence_does_not_drain_this_threads_write_backs() {
        let m = sim(4096, SimDomain::Adr);
        std::thread::scope(|s| {
            s.spawn(|| {
                m.write(0, &[1; 64]);
                m.flush(0, 64).unwrap();
                m.write_nontemporal(64, &[2; 64]);
            });
        });
        m.fence().unwrap();
        assert_eq!(&m.durable_image()[..128], &[0; 128][..]);
        assert_eq!(
            m.unpersisted(),
            vec![
                Unpersisted {
                    offset: 0,
                    state: LineState::Flushed
                },
                Unpersisted {
                    offset: 64,
                    state: LineState::Flushed
                }
            ]
        );
        // The same thread's fence does.
        let m = sim(4096, SimDomain::Adr);
        m.write(0, &[1; 64]);
        m.flush(0, 64).unwrap();
        m.write_nontemporal(64, &[2; 64]);
        m.fence().unwrap();
        assert_eq!(&m.durable_image()[..64], &[1; 64][..]);
        assert_eq!(&m.durable_image()[64..128], &[2; 64][..]);
        assert!(m.unpersisted().is_empty());
    }

    #[test]
    fn a_line_flushed_twice_may_land_with_either_snapshot() {
        let m = SimMedium::new(
            128,
            SimConfig {
                crash: CrashPlan::AtFence(1),
                ..SimConfig::default()
            },
        );
        m.write(0, &[1; 64]);
        m.flush(0, 64).unwrap();
        m.write(0, &[2; 64]);
        m.flush(0, 64).unwrap();
        m.write(0, &[3; 64]);
        assert!(m.fence().is_err());
        let lines: Vec<Vec<u8>> = m
            .crash_state()
            .unwrap()
            .images()
            .iter()
            .map(|i| i[..64].to_vec())
            .collect();
        for v in [0u8, 1, 2, 3] {
            assert!(lines.contains(&vec![v; 64]), "no image with line {v}");
        }
    }

    #[test]
    fn few_open_lines_are_enumerated_in_every_combination() {
        let m = SimMedium::new(
            256,
            SimConfig {
                crash: CrashPlan::AtFence(1),
                images_per_crash: 16,
                ..SimConfig::default()
            },
        );
        m.write(0, &[1; 64]);
        m.write(64, &[2; 64]);
        m.flush(0, 128).unwrap();
        assert!(m.fence().is_err());
        let st = m.crash_state().unwrap();
        assert_eq!((st.open_units(), st.outcomes()), (2, 4));
        let mut seen: Vec<(u8, u8)> = st.images().iter().map(|i| (i[0], i[64])).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen, vec![(0, 0), (0, 2), (1, 0), (1, 2)]);
    }

    #[test]
    fn many_open_lines_are_covered_pairwise() {
        for k in [3usize, 7, 40, 300] {
            let m = SimMedium::new(
                64 * k,
                SimConfig {
                    crash: CrashPlan::AtFence(1),
                    images_per_crash: 4,
                    ..SimConfig::default()
                },
            );
            for i in 0..k {
                m.write(64 * i, &[1; 64]);
            }
            assert!(m.fence().is_err());
            let imgs = m.crash_state().unwrap().images();
            assert!(imgs.len() < 24, "{k} lines: {} images", imgs.len());
            for a in 0..k {
                for b in a + 1..k {
                    for want in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                        assert!(
                            imgs.iter().any(|i| (i[64 * a], i[64 * b]) == want),
                            "{k} lines: pair ({a}, {b}) never {want:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn eadr_keeps_every_store_but_not_unfenced_nontemporal_ones() {
        let mut lost_nt = false;
        for seed in 0..40 {
            let m = SimMedium::new(
                4096,
                SimConfig {
                    seed,
                    domain: SimDomain::Eadr,
                    ..SimConfig::default()
                },
            );
            m.write(0, &[1; 64]);
            m.write_nontemporal(64, &[2; 64]);
            for img in m.power_fail_state().images() {
                assert_eq!(&img[..64], &[1; 64][..], "a cached store was lost in eadr");
                lost_nt |= img[64..128] == [0; 64];
            }
        }
        assert!(lost_nt, "an unfenced non-temporal store always survived");
        let m = sim(4096, SimDomain::Eadr);
        m.write_nontemporal(64, &[2; 64]);
        m.fence().unwrap();
        assert!(m.unpersisted().is_empty());
        assert_eq!(&m.power_fail()[64..128], &[2; 64][..]);
    }

    #[test]
    fn msync_pages_tear_between_sectors_and_a_failed_msync_latches() {
        let m = SimMedium::new(
            8192,
            SimConfig {
                sector: 512,
                domain: SimDomain::Msync,
                images_per_crash: 64,
                ..SimConfig::default()
            },
        );
        m.write(0, &[7; 4096]);
        m.write(4096, &[8; 100]);
        m.flush(4096, 1).unwrap(); // msync of the whole second page
        assert_eq!(&m.durable_image()[4096..4196], &[8; 100][..]);
        let st = m.power_fail_state();
        assert_eq!(
            st.open_units(),
            8,
            "eight 512-byte sectors of page 0 are open"
        );
        let imgs = st.images();
        assert!(
            imgs.iter().any(|i| i[0] == 7 && i[512] == 0),
            "no torn page"
        );
        for i in &imgs {
            for s in (0..4096).step_by(512) {
                assert!(
                    i[s..s + 512].iter().all(|&b| b == i[s]),
                    "torn inside a sector"
                );
            }
        }
        // The second msync fails: its page is dropped, and every later flush and fence fails.
        let m = SimMedium::new(
            8192,
            SimConfig {
                domain: SimDomain::Msync,
                fail_msync_at: 2,
                ..SimConfig::default()
            },
        );
        m.write(0, &[1; 8]);
        m.persist(0, 8).unwrap();
        m.write(4096, &[2; 8]);
        assert!(m.flush(4096, 8).is_err());
        assert!(matches!(m.fence(), Err(PmemError::Failed)));
        assert!(matches!(m.flush(0, 8), Err(PmemError::Failed)));
        for img in m.power_fail_state().images() {
            assert_eq!(
                &img[4096..4104],
                &[0; 8],
                "a page whose msync failed was written"
            );
            assert_eq!(&img[0..8], &[1; 8]);
        }
    }

    #[test]
    fn covering_columns_are_distinct_and_incomparable() {
        for k in [1usize, 2, 5, 20, 100, 1000] {
            let mut n = 2;
            while binomial(n, n / 2) < k as u64 {
                n += 1;
            }
            let cols = weight_columns(n, n / 2, k);
            assert_eq!(cols.len(), k);
            for (i, a) in cols.iter().enumerate() {
                assert_eq!(a.count_ones() as usize, n / 2);
                for b in &cols[i + 1..] {
                    assert!(a & !b != 0 && b & !a != 0, "{a:b} vs {b:b}");
                }
            }
        }
    }

    #[test]
    fn eadr_a_cached_store_after_a_nontemporal_one_is_not_undone_by_the_fence() {
        let m = sim(4096, SimDomain::Eadr);
        m.write_nontemporal(32, &[7; 32]);
        m.write(0, &[9; 8]);
        for img in m.power_fail_state().images() {
            assert_eq!(&img[0..8], &[9; 8], "a cached store lost in eadr");
        }
        let m = sim(4096, SimDomain::Eadr);
        m.write_nontemporal(32, &[7; 32]);
        m.write(0, &[9; 8]);
        m.flush(0, 64).unwrap();
        m.fence().unwrap();
        assert_eq!(&m.durable_image()[0..8], &[9; 8]);
        assert_eq!(&m.durable_image()[32..64], &[7; 32]);
    }

    #[test]
    fn flush_on_fail_skips_flushes_but_not_write_backs() {
        let m = sim(4096, SimDomain::FlushOnFail);
        m.write(0, &[1; 64]);
        m.flush(0, 64).unwrap();
        m.fence().unwrap();
        assert_eq!(
            &m.durable_image()[..64],
            &[0; 64][..],
            "a skipped flush made a line durable"
        );
        assert_eq!(
            m.unpersisted(),
            vec![Unpersisted {
                offset: 0,
                state: LineState::Dirty
            }]
        );
        m.write_back(0, 64).unwrap();
        assert_eq!(
            &m.durable_image()[..64],
            &[0; 64][..],
            "durable before the fence"
        );
        m.fence().unwrap();
        assert_eq!(&m.durable_image()[..64], &[1; 64][..]);
        assert!(m.unpersisted().is_empty());
        // In every other domain a write-back is at least what a flush is.
        for d in [SimDomain::Adr, SimDomain::Eadr, SimDomain::Msync] {
            let m = sim(8192, d);
            m.write(4096, &[3; 64]);
            m.write_back(4096, 64).unwrap();
            m.fence().unwrap();
            assert_eq!(&m.durable_image()[4096..4160], &[3; 64][..], "{d:?}");
        }
    }

    #[test]
    fn flush_on_fail_crash_has_a_saved_and_a_missed_window_fate() {
        let (mut dropped, mut nt_lost) = (false, false);
        for seed in 0..30 {
            let m = SimMedium::new(
                4096,
                SimConfig {
                    seed,
                    domain: SimDomain::FlushOnFail,
                    images_per_crash: 16,
                    ..SimConfig::default()
                },
            );
            m.write(0, &[1; 64]);
            m.write_back(0, 64).unwrap();
            m.fence().unwrap(); // line 0: written back, durable in both fates
            m.write(64, &[2; 64]);
            m.flush(64, 64).unwrap(); // line 1: only the skipped flush
            m.write_nontemporal(128, &[3; 64]); // line 2: non-temporal, never fenced
            m.write(192, &[4; 64]);
            m.write_back(192, 64).unwrap(); // line 3: written back, never fenced
            let st = m.power_fail_state();
            let fates = st.fates();
            assert_eq!(fates[0].0, Fate::Saved, "the completed save comes first");
            let saved = &fates[0].1;
            for (k, v) in [1u8, 2, 3, 4].into_iter().enumerate() {
                assert_eq!(&saved[64 * k..64 * k + 64], &[v; 64][..], "saved line {k}");
            }
            assert_eq!(st.saved(), Some(&saved[..]));
            assert!(fates.len() > 1, "no missed-window image");
            assert_eq!(
                fates.iter().filter(|(f, _)| *f == Fate::Saved).count(),
                1,
                "one saved image per crash"
            );
            for (_, img) in fates.iter().filter(|(f, _)| *f == Fate::MissedWindow) {
                assert_eq!(&img[0..64], &[1; 64][..], "a written-back line was lost");
                for w in (64..256).step_by(8) {
                    let word = img[w];
                    assert!(
                        img[w..w + 8].iter().all(|&b| b == word),
                        "torn inside a word"
                    );
                }
                dropped |= img[64..128] == [0; 64];
                nt_lost |= img[128..192] == [0; 64];
            }
            assert_eq!(
                st.sampled(),
                &m.power_fail()[..],
                "power_fail gives the sampled missed window"
            );
        }
        assert!(
            dropped,
            "a line whose flush was skipped always survived a missed window"
        );
        assert!(
            nt_lost,
            "an unfenced non-temporal store always survived a missed window"
        );
        // Outside flush-on-fail there is one fate.
        let m = sim(4096, SimDomain::Adr);
        m.write(0, &[1; 64]);
        let st = m.power_fail_state();
        assert!(st.saved().is_none());
        assert!(st.fates().iter().all(|(f, _)| *f == Fate::MissedWindow));
    }

    #[test]
    fn the_harness_checks_both_fates_at_every_fence() {
        let op = |m: &SimMedium| {
            for i in 0..4 {
                m.write(i * 64, &[1 + i as u8; 64]);
                // The critical path: no write-back, only the fence.
                if m.persist(i * 64, 64).is_err() {
                    return;
                }
            }
        };
        let cfg = SimConfig {
            domain: SimDomain::FlushOnFail,
            images_per_crash: 8,
            ..SimConfig::default()
        };
        let mut per_fence: BTreeMap<u64, (u32, u32)> = BTreeMap::new();
        let n = crash_at_every_fence_fates(cfg, &[0; 512], op, |img, fate, k| {
            let e = per_fence.entry(k).or_default();
            match fate {
                Fate::Saved => {
                    e.0 += 1;
                    // Every store before the crash point (fence k) is there.
                    for i in 0..k as usize {
                        assert_eq!(img[i * 64], 1 + i as u8, "fence {k}: saved line {i}");
                    }
                }
                Fate::MissedWindow => e.1 += 1,
            }
        });
        assert_eq!(n, 4);
        assert_eq!(per_fence.len(), 4);
        for (k, (saved, missed)) in per_fence {
            assert_eq!(saved, 1, "fence {k}");
            assert!(missed >= 2, "fence {k}: {missed} missed-window images");
        }
        // The random harness hands both fates per run.
        let (mut saved, mut missed) = (0, 0);
        crash_at_random_points_fates(cfg, &[0; 512], 10, op, |_, fate, _| match fate {
            Fate::Saved => saved += 1,
            Fate::MissedWindow => missed += 1,
        });
        assert_eq!((saved, missed), (10, 10));
    }
}
