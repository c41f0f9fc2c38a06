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
//! Checking mode ([`SimMedium::unpersisted`]) lists the lines still not durable, as pmemcheck does
//! at exit: a clean close with a non-empty list is a missing flush or fence.

use crate::cpu::CACHE_LINE;
use crate::domain::{Backing, Domain};
use crate::error::{PmemError, Result};
use crate::medium::{Medium, check_range, check_word};
use crate::rng::SplitMix64;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

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

#[derive(Debug)]
struct State {
    working: Vec<u8>,
    durable: Vec<u8>,
    pending: BTreeMap<usize, [u8; CACHE_LINE]>,
    fences: u64,
    events: u64,
    crash_image: Option<Vec<u8>>,
    rng: SplitMix64,
    cfg: SimConfig,
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

fn line_of(offset: usize) -> usize {
    offset / CACHE_LINE * CACHE_LINE
}

impl State {
    /// Count one event; crash first if the plan says this is the one. Returns false once crashed.
    fn event(&mut self, is_fence: bool) -> bool {
        if self.crash_image.is_some() {
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
            self.crash_image = Some(self.power_fail_image());
            return false;
        }
        true
    }

    fn lines_not_durable(&self) -> Vec<usize> {
        let mut lines: Vec<usize> = (0..self.working.len())
            .step_by(CACHE_LINE)
            .filter(|&l| self.working[l..l + CACHE_LINE] != self.durable[l..l + CACHE_LINE])
            .collect();
        lines.extend(self.pending.keys().copied());
        lines.sort_unstable();
        lines.dedup();
        lines
    }

    fn power_fail_image(&mut self) -> Vec<u8> {
        let mut image = self.durable.clone();
        for l in self.lines_not_durable() {
            let durable: [u8; CACHE_LINE] =
                self.durable[l..l + CACHE_LINE].try_into().expect("line");
            let working: [u8; CACHE_LINE] =
                self.working[l..l + CACHE_LINE].try_into().expect("line");
            let mut candidates = vec![durable, working];
            if let Some(p) = self.pending.get(&l) {
                candidates.push(*p);
            }
            let out = &mut image[l..l + CACHE_LINE];
            match self.rng.below(3) {
                // Kept: one of the values the cache could have written back (pending or newest).
                0 => {
                    let pick = 1 + self.rng.below(candidates.len() as u64 - 1) as usize;
                    out.copy_from_slice(&candidates[pick]);
                }
                // Dropped: the media keeps what it had.
                1 => out.copy_from_slice(&durable),
                // Torn: each aligned 8-byte word independently.
                _ => {
                    for w in (0..CACHE_LINE).step_by(8) {
                        let pick = self.rng.below(candidates.len() as u64) as usize;
                        out[w..w + 8].copy_from_slice(&candidates[pick][w..w + 8]);
                    }
                }
            }
        }
        image
    }

    fn store(&mut self, offset: usize, data: &[u8]) {
        self.working[offset..offset + data.len()].copy_from_slice(data);
        if self.cfg.evict_per_million > 0 && self.crash_image.is_none() && !data.is_empty() {
            let mut l = line_of(offset);
            while l < offset + data.len() {
                if self.rng.chance(self.cfg.evict_per_million) {
                    let (w, d) = (
                        &self.working[l..l + CACHE_LINE],
                        &mut self.durable[l..l + CACHE_LINE],
                    );
                    d.copy_from_slice(w);
                    if let Some(p) = self.pending.get_mut(&l) {
                        p.copy_from_slice(w);
                    }
                }
                l += CACHE_LINE;
            }
        }
    }

    fn mark_flushed(&mut self, offset: usize, len: usize) {
        if len == 0 {
            return;
        }
        let mut l = line_of(offset);
        while l < offset + len {
            let snap: [u8; CACHE_LINE] = self.working[l..l + CACHE_LINE].try_into().expect("line");
            self.pending.insert(l, snap);
            l += CACHE_LINE;
        }
    }
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
                pending: BTreeMap::new(),
                fences: 0,
                events: 0,
                crash_image: None,
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

    /// The image frozen at the crash point, if the plan has fired.
    pub fn crash_image(&self) -> Option<Vec<u8>> {
        self.lock().crash_image.clone()
    }

    /// Has the power failed?
    pub fn crashed(&self) -> bool {
        self.lock().crash_image.is_some()
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
        let mut st = self.lock();
        if st.crash_image.is_none() {
            let img = st.power_fail_image();
            st.crash_image = Some(img);
        }
        st.crash_image.clone().expect("set above")
    }

    /// Lines that would not survive a power failure now (checking mode).
    pub fn unpersisted(&self) -> Vec<Unpersisted> {
        let st = self.lock();
        st.lines_not_durable()
            .into_iter()
            .map(|offset| Unpersisted {
                offset,
                state: if st.pending.contains_key(&offset) {
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
        st.store(offset, data);
        if live {
            st.mark_flushed(offset, data.len());
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
        st.mark_flushed(offset, len);
        Ok(())
    }
    fn fence(&self) -> Result<()> {
        self.before(Op::Fence);
        let mut st = self.lock();
        if !st.event(true) {
            return Err(PmemError::SimulatedCrash);
        }
        let pending = std::mem::take(&mut st.pending);
        for (l, bytes) in pending {
            st.durable[l..l + CACHE_LINE].copy_from_slice(&bytes);
        }
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
            let lines: Vec<usize> = st.pending.range(first..=last).map(|(l, _)| *l).collect();
            for l in lines {
                st.pending.remove(&l);
            }
        }
        Ok(())
    }
}

/// Run `op` from `image` once per fence, crashing just before fence 1, 2, 3, ... and handing
/// each crash image (with the fence number) to `check`. Stops at the first run that finishes
/// without reaching its crash point. Returns the number of crash points tried.
pub fn crash_at_every_fence(
    image: &[u8],
    seed: u64,
    mut op: impl FnMut(&SimMedium),
    mut check: impl FnMut(Vec<u8>, u64),
) -> u64 {
    for n in 1.. {
        let cfg = SimConfig {
            seed: seed ^ n,
            crash: CrashPlan::AtFence(n),
            evict_per_million: 0,
            ..SimConfig::default()
        };
        let sim = SimMedium::from_image(image.to_vec(), cfg);
        op(&sim);
        match sim.crash_image() {
            Some(img) => check(img, n),
            None => return n - 1,
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
    mut op: impl FnMut(&SimMedium),
    mut check: impl FnMut(Vec<u8>, u64),
) {
    let dry = SimMedium::from_image(image.to_vec(), SimConfig::default());
    op(&dry);
    let events = dry.events().max(1);
    let mut rng = SplitMix64::new(seed);
    for _ in 0..count {
        let run_seed = rng.next_u64();
        let mut pick = SplitMix64::new(run_seed);
        let cfg = SimConfig {
            seed: run_seed,
            crash: CrashPlan::AtEvent(1 + pick.below(events)),
            evict_per_million: [0, 10_000, 100_000, 500_000][pick.below(4) as usize],
            ..SimConfig::default()
        };
        let sim = SimMedium::from_image(image.to_vec(), cfg);
        op(&sim);
        let img = sim.crash_image().unwrap_or_else(|| sim.power_fail());
        check(img, run_seed);
    }
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
            seen.push(k);
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
}
