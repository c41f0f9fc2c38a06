//! A protected store: the integrity layer (page checksums and stripe parity, `integrity`)
//! over the regions of a store's pool.
//!
//! Which regions are covered ([`covered_regions`]): every region of the pool except the
//! integrity regions themselves, the flush-on-fail record and, in a growable pool, DIPPER's two
//! slot tables (`dipper.slot.0`, `dipper.slot.1`), which DIPPER moves to a larger region as the
//! image grows. So the root, both operation logs, the page frames that hold the shadow images
//! and the data zone are covered; a fixed-size pool's slots (which never move) are covered too.
//!
//! Growth: the pool grows while a store serves (new frame regions, a frame region extended in
//! place, a slot table replaced). Protection is laid out at each start: a region added while
//! serving is covered from the next start; a region whose place or size changed since its
//! redundancy was made (its integrity header names another offset or page count) gets its
//! redundancy made again from its bytes at the next start, and the start says so. Until then
//! the region's old range stays protected as it was (its writes are still seen), and the new
//! part is not covered. [`Protection::uncovered`] lists the regions left out at start, and
//! [`Protection::not_covered_now`] counts what is not covered at the moment it is asked (the
//! store hands the protection a view of the pool's regions once it is open), for INFO.
//!
//! Refused reads (eager): a read the integrity layer cannot verify fails the store operation
//! that made it with [`StoreError::Integrity`]; see [`Guarded`].
//!
//! Modes (`--redundancy`):
//! - `lazy`: write tracking (userfaultfd where the kernel has it, else mprotect) over each
//!   covered region and a background pass every period (Vilamb);
//! - `eager`: every store write to a covered range goes through [`integrity::Protected::write`]
//!   (checksums and parity updated from the diff, TVARAK), and reads through
//!   [`integrity::Protected::read`] (verified line by line, repaired from parity on a
//!   mismatch), by the medium wrapper [`Guarded`];
//! - `off`: nothing is kept (the pool's integrity regions, if any, are marked stale).
//!
//! The mode is recorded in each integrity region's header: a start that does not name one
//! keeps the recorded mode, and a pool without integrity regions starts with `off`.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use integrity::{
    CreateOptions, IntegrityError, Mode, OpenOptions, OpenReport, Protected, RepairReport,
    ScrubReport, Tracker,
};
use pmem::layout::PAGE_SIZE;
use pmem::{Medium, Pool, kinds};

use crate::error::{StoreError, StoreResult};

const PAGE: u64 = PAGE_SIZE as u64;

/// What a start asks of the protection.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProtectOptions {
    /// The mode; `None` keeps the one recorded in the pool (`off` if none is).
    pub mode: Option<Mode>,
    /// Lazy mode's period in ms; `None` keeps the recorded one (1000 for new protection).
    pub period_ms: Option<u32>,
    /// Background scrub rate in pages per second over all covered regions (0: no background
    /// scrub; the update pass of lazy mode still runs).
    pub scrub_pages_per_sec: u64,
}

/// The regions of `pool` the protection covers, in pool order.
pub fn covered_regions<M: Medium>(pool: &Pool<M>) -> Vec<pmem::Region> {
    pool.regions()
        .iter()
        .filter(|r| {
            r.kind != kinds::INTEGRITY
                && r.name != pmem::fof::REGION_NAME
                && !(pool.growable() && dipper::layout::SLOT_REGIONS.contains(&r.name.as_str()))
                && r.length >= PAGE
                && r.offset % PAGE == 0
                && r.length % PAGE == 0
        })
        .cloned()
        .collect()
}

/// The mode recorded in the pool: the header of the first covered region that has
/// protection. `None`: no region has any.
pub fn recorded_mode<M: Medium>(pool: &Pool<M>) -> Option<Mode> {
    covered_regions(pool).iter().find_map(|r| {
        let h = header_of(pool, &r.name)?;
        Mode::from_code(h.mode)
    })
}

/// The integrity header in force of region `name`'s protection, if one copy decodes.
fn header_of<M: Medium>(pool: &Pool<M>, name: &str) -> Option<integrity::header::Header> {
    let meta = pool.region(&integrity::meta_region_name(name).ok()?)?;
    if meta.kind != kinds::INTEGRITY {
        return None;
    }
    let uuid = pool.uuid();
    let mut best: Option<integrity::header::Header> = None;
    for off in integrity::layout::HEADER_COPY_OFFSETS {
        let at = meta.offset as usize + off;
        if at + integrity::layout::HEADER_BYTES > pool.medium().len() {
            continue;
        }
        let mut b = [0u8; integrity::layout::HEADER_BYTES];
        pool.medium().read(at, &mut b);
        if let Ok(h) = integrity::header::Header::decode(&b, &uuid, at as u64)
            && best.as_ref().is_none_or(|x| h.seq > x.seq)
        {
            best = Some(h);
        }
    }
    best
}

fn failed(what: String) -> StoreError {
    StoreError::Failed(what)
}

/// Make sure every covered region of `pool` has protection laid out for its current place and
/// size: create it where missing, make it again where the region moved or changed size since.
/// Returns one note per region it (re)made. `mode` is recorded in what it creates.
pub fn lay_out<M: Medium + Clone + 'static>(
    pool: &mut Pool<M>,
    mode: Mode,
    period_ms: u32,
) -> StoreResult<Vec<String>> {
    let mut notes = Vec::new();
    for r in covered_regions(pool) {
        let meta_name = integrity::meta_region_name(&r.name)
            .map_err(|e| failed(format!("cannot protect region `{}`: {e}", r.name)))?;
        let stale = match (pool.region(&meta_name), header_of(pool, &r.name)) {
            (None, _) => None,
            (Some(_), Some(h))
                if h.data_offset == r.offset && h.geometry.data_pages == r.length / PAGE =>
            {
                continue;
            }
            (Some(_), Some(h)) => Some(format!(
                "region `{}` is now at {:#x} with {} pages, its redundancy was made for {:#x} \
                 with {} pages (the pool grew)",
                r.name,
                r.offset,
                r.length / PAGE,
                h.data_offset,
                h.geometry.data_pages
            )),
            // Both header copies unreadable: the open reports that; nothing is remade.
            (Some(_), None) => continue,
        };
        if stale.is_some() {
            pool.remove_region(&meta_name).map_err(|e| {
                failed(format!(
                    "cannot remove the old integrity region `{meta_name}`: {e}"
                ))
            })?;
        }
        let opts = CreateOptions {
            mode,
            period_ms,
            ..CreateOptions::default()
        };
        integrity::create_in_pool(pool, &r.name, &opts, &mut |_, _| {})
            .map_err(|e| failed(format!("cannot protect region `{}`: {e}", r.name)))?;
        notes.push(match stale {
            Some(why) => format!("{why}: its redundancy was made again from its bytes"),
            None => format!(
                "region `{}` ({} pages) is protected from now on",
                r.name,
                r.length / PAGE
            ),
        });
    }
    Ok(notes)
}

/// Record mode `off` in every covered region's protection (its redundancy is then stale, and
/// made again when a later start switches it on).
pub fn switch_off<M: Medium + Clone + 'static>(pool: &Pool<M>) -> StoreResult<()> {
    for r in covered_regions(pool) {
        match header_of(pool, &r.name) {
            Some(h) if h.mode != Mode::Off.code() => {}
            _ => continue,
        }
        let opts = OpenOptions {
            mode: Some(Mode::Off),
            ..OpenOptions::default()
        };
        let (prot, _) =
            integrity::open_in_pool(pool, &r.name, opts, &mut |_, _| {}).map_err(|e| {
                failed(format!(
                    "cannot switch off the redundancy of `{}`: {e}",
                    r.name
                ))
            })?;
        prot.close().map_err(|e| {
            failed(format!(
                "cannot switch off the redundancy of `{}`: {e}",
                r.name
            ))
        })?;
    }
    Ok(())
}

/// One covered region, open.
pub struct Covered<M: Medium + Clone + 'static> {
    /// The data region's name.
    pub name: String,
    /// Its pool offset.
    pub offset: u64,
    /// Its bytes.
    pub len: u64,
    /// Its protection.
    pub prot: Protected<M>,
    /// What its open found.
    pub opened: OpenReport,
    /// Writes (eager) or reads that the integrity layer refused and that went to the medium
    /// directly; the last refusal.
    refused: AtomicU64,
    /// Of those, the reads (each one fails the store operation that made it); the first.
    refused_reads: AtomicU64,
    first_refused_read: Mutex<Option<RefusedRead>>,
    last_refusal: Mutex<Option<String>>,
}

impl<M: Medium + Clone + 'static> std::fmt::Debug for Covered<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Covered")
            .field("name", &self.name)
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// The last background or requested scrub.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ScrubSummary {
    /// Unix time (ms) it ended.
    pub at_unix_ms: u64,
    /// Data pages verified.
    pub pages_checked: u64,
    /// Pages skipped (written since the last pass).
    pub pages_skipped_written: u64,
    /// Damage found.
    pub findings: u64,
    /// Mismatches that cannot be told from writes (after an unclean shutdown).
    pub unverifiable: u64,
    /// Of the damage, repaired from parity.
    pub repaired: u64,
    /// Damage parity could not prove: `region: finding: why`.
    pub unrepaired: Vec<String>,
    /// Regions whose scrub failed to run: `region: error`.
    pub errors: Vec<String>,
    /// Wall time.
    pub elapsed_ms: u64,
}

#[derive(Debug, Default)]
struct Totals {
    last: Option<ScrubSummary>,
    rounds: u64,
    findings: u64,
    repaired: u64,
    unrepaired: u64,
    /// Unrepaired damage, newest last (bounded).
    damage: Vec<String>,
}

/// The protection of a store's pool, open.
pub struct Protection<M: Medium + Clone + 'static> {
    mode: Mode,
    period_ms: u32,
    scrub_pages_per_sec: u64,
    covered: Vec<Arc<Covered<M>>>,
    uncovered: Vec<String>,
    /// The pool's regions at start, and where to read them now (set once the store is open).
    regions_at_start: Vec<pmem::Region>,
    regions_now: Mutex<Option<RegionsWatch>>,
    notes: Vec<String>,
    totals: Mutex<Totals>,
    /// Serialises scrubs and repairs (the background one and requested ones).
    scrubbing: Mutex<()>,
    stop: Mutex<bool>,
    wake: Condvar,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl<M: Medium + Clone + 'static> std::fmt::Debug for Protection<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Protection")
            .field("mode", &self.mode)
            .field("covered", &self.covered)
            .finish_non_exhaustive()
    }
}

/// Lists the pool's regions now (`None` once the store is gone).
pub type RegionsWatch = Box<dyn Fn() -> Option<Vec<pmem::Region>> + Send + Sync>;

/// Unrepaired damage kept for INFO.
const DAMAGE_LISTED_MAX: usize = 16;

fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl<M: Medium + Clone + 'static> Protection<M> {
    /// Open the protection of every covered region of `pool` in `mode` (which must not be
    /// off), before the store opens (so that recovery's writes are covered). `tracker` gives
    /// lazy mode's write tracker for a range (offset, bytes) of the pool.
    pub fn open(
        pool: &Pool<M>,
        mode: Mode,
        period_ms: Option<u32>,
        scrub_pages_per_sec: u64,
        tracker: &dyn Fn(u64, u64) -> StoreResult<Box<dyn Tracker>>,
    ) -> StoreResult<Self> {
        let mut covered = Vec::new();
        let mut notes = Vec::new();
        let regions = covered_regions(pool);
        for r in &regions {
            let tracker = if mode == Mode::Lazy {
                Some(tracker(r.offset, r.length)?)
            } else {
                None
            };
            let opts = OpenOptions {
                mode: Some(mode),
                period_ms,
                tracker,
                background: mode == Mode::Lazy,
                scrub_pages_per_sec: 0,
                read_only: false,
            };
            let (prot, opened) = integrity::open_in_pool(pool, &r.name, opts, &mut |_, _| {})
                .map_err(|e| {
                    failed(format!(
                        "cannot open the redundancy of region `{}`: {e}; `kavach repair DIR` \
                         checks it offline",
                        r.name
                    ))
                })?;
            for d in &opened.header_damage {
                notes.push(format!(
                    "region `{}`: one integrity header copy was damaged and replaced ({d})",
                    r.name
                ));
            }
            if opened.resync_pages > 0 {
                notes.push(format!(
                    "region `{}`: {}: its redundancy was rebuilt from its {} pages ({} did \
                     not match their old checksums: writes no pass covered, or damage; pages \
                     {:?})",
                    r.name,
                    opened.trust.reason,
                    opened.resync_pages,
                    opened.resync_pages_changed,
                    opened.resync_pages_changed_list
                ));
            }
            covered.push(Arc::new(Covered {
                name: r.name.clone(),
                offset: r.offset,
                len: r.length,
                prot,
                opened,
                refused: AtomicU64::new(0),
                refused_reads: AtomicU64::new(0),
                first_refused_read: Mutex::new(None),
                last_refusal: Mutex::new(None),
            }));
        }
        let period_ms = covered
            .first()
            .map_or(period_ms.unwrap_or(1000), |c| c.prot.stats().period_ms);
        // Regions left out: the slot tables of a growable pool.
        let uncovered = pool
            .regions()
            .iter()
            .filter(|r| r.kind != kinds::INTEGRITY && !regions.iter().any(|c| c.name == r.name))
            .map(|r| r.name.clone())
            .collect();
        Ok(Protection {
            mode,
            period_ms,
            scrub_pages_per_sec,
            covered,
            uncovered,
            regions_at_start: pool.regions().to_vec(),
            regions_now: Mutex::new(None),
            notes,
            totals: Mutex::new(Totals::default()),
            scrubbing: Mutex::new(()),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            thread: Mutex::new(None),
        })
    }

    /// The mode in force.
    pub fn mode(&self) -> Mode {
        self.mode
    }
    /// Lazy mode's period.
    pub fn period_ms(&self) -> u32 {
        self.period_ms
    }
    /// The covered regions.
    pub fn covered(&self) -> &[Arc<Covered<M>>] {
        &self.covered
    }
    /// Regions of the pool at start that are not covered.
    pub fn uncovered(&self) -> &[String] {
        &self.uncovered
    }

    /// Tell the protection where to read the pool's regions while the store serves (the store
    /// grows the pool: new frame regions, a frame region extended in place).
    pub fn watch_regions(&self, watch: RegionsWatch) {
        *self.regions_now.lock().unwrap_or_else(|e| e.into_inner()) = Some(watch);
    }

    /// What is not covered right now: bytes of the pool's regions (integrity regions aside)
    /// outside every covered range, and the regions added or grown since the start that are
    /// not wholly covered (they are covered from the next start).
    pub fn not_covered_now(&self) -> (u64, Vec<String>) {
        let now = self
            .regions_now
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(|w| w());
        let regions = now.unwrap_or_else(|| self.regions_at_start.clone());
        let mut bytes = 0;
        let mut grown = Vec::new();
        for r in regions.iter().filter(|r| r.kind != kinds::INTEGRITY) {
            let (start, end) = (r.offset, r.offset + r.length);
            let inside: u64 = self
                .covered
                .iter()
                .map(|c| {
                    let (cs, ce) = (c.offset.max(start), (c.offset + c.len).min(end));
                    ce.saturating_sub(cs)
                })
                .sum();
            let outside = r.length.saturating_sub(inside);
            bytes += outside;
            let as_at_start = self
                .regions_at_start
                .iter()
                .any(|s| s.name == r.name && s.offset == r.offset && s.length == r.length);
            if outside > 0 && !as_at_start {
                grown.push(r.name.clone());
            }
        }
        (bytes, grown)
    }
    /// What the open did that a user must know.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }
    /// Reads the integrity layer refused since the protection opened, over all regions.
    pub fn refused_reads(&self) -> u64 {
        self.covered
            .iter()
            .map(|c| c.refused_reads.load(Ordering::Relaxed))
            .sum()
    }
    /// The first read the integrity layer refused since the protection opened (in the first
    /// region, in pool order, that had one).
    pub fn first_refused_read(&self) -> Option<RefusedRead> {
        self.covered.iter().find_map(|c| {
            c.first_refused_read
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        })
    }

    /// Scrub every covered region now; with `repair`, repair what each scrub found (from
    /// parity, when parity proves it). Scrubs and repairs run one at a time.
    pub fn check(&self, repair: bool) -> ScrubSummary {
        let _one = self.scrubbing.lock().unwrap_or_else(|e| e.into_inner());
        let t = Instant::now();
        let mut s = ScrubSummary::default();
        for c in &self.covered {
            self.check_region(c, repair, &mut s);
        }
        s.elapsed_ms = t.elapsed().as_millis() as u64;
        s.at_unix_ms = now_unix_ms();
        self.record(&s);
        s
    }

    fn check_region(&self, c: &Covered<M>, repair: bool, s: &mut ScrubSummary) {
        let scrub: ScrubReport = match c.prot.scrub(&mut |_, _| {}) {
            Ok(r) => r,
            Err(e) => {
                s.errors.push(format!("{}: {e}", c.name));
                return;
            }
        };
        s.pages_checked += scrub.pages_checked;
        s.pages_skipped_written += scrub.pages_skipped_written;
        s.findings += scrub.findings.len() as u64;
        s.unverifiable += scrub.unverifiable.len() as u64;
        if !repair || (scrub.findings.is_empty() && scrub.unverifiable.is_empty()) {
            return;
        }
        let rep: RepairReport = match c.prot.repair(&mut |_, _| {}) {
            Ok(r) => r,
            Err(e) => {
                s.errors.push(format!("{}: repair: {e}", c.name));
                return;
            }
        };
        for o in &rep.outcomes {
            if o.repaired {
                s.repaired += 1;
            } else {
                s.unrepaired
                    .push(format!("{}: {}: {}", c.name, o.finding.describe(), o.how));
            }
        }
    }

    fn record(&self, s: &ScrubSummary) {
        let mut t = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        t.rounds += 1;
        t.findings += s.findings;
        t.repaired += s.repaired;
        t.unrepaired += s.unrepaired.len() as u64;
        for d in &s.unrepaired {
            if t.damage.len() == DAMAGE_LISTED_MAX {
                t.damage.remove(0);
            }
            t.damage.push(d.clone());
        }
        t.last = Some(s.clone());
    }

    /// Start the background scrubber (scrub and repair, a region at a time, at the configured
    /// rate). A no-op when the rate is 0.
    pub fn start_scrubber(self: &Arc<Self>) -> StoreResult<()> {
        if self.scrub_pages_per_sec == 0 || self.covered.is_empty() {
            return Ok(());
        }
        let me = Arc::clone(self);
        let h = std::thread::Builder::new()
            .name("kavach-store-scrub".into())
            .spawn(move || me.scrub_loop())
            .map_err(|e| failed(format!("cannot start the store's scrubber: {e}")))?;
        *self.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
        Ok(())
    }

    fn stop_requested(&self, wait: Duration) -> bool {
        let stop = self.stop.lock().unwrap_or_else(|e| e.into_inner());
        let (stop, _) = self
            .wake
            .wait_timeout_while(stop, wait, |s| !*s)
            .unwrap_or_else(|e| e.into_inner());
        *stop
    }

    fn scrub_loop(&self) {
        // Each unrepaired finding is logged once, not at every round that finds it again.
        let mut logged = std::collections::HashSet::new();
        loop {
            let t = Instant::now();
            let mut s = ScrubSummary::default();
            for c in &self.covered {
                let began = Instant::now();
                {
                    let _one = self.scrubbing.lock().unwrap_or_else(|e| e.into_inner());
                    self.check_region(c, true, &mut s);
                }
                for line in s.unrepaired.iter().chain(&s.errors) {
                    if logged.len() < 1024 && logged.insert(line.clone()) {
                        eprintln!("kavach: integrity: {line}");
                    }
                }
                let budget = Duration::from_secs_f64(
                    (c.len / PAGE) as f64 / self.scrub_pages_per_sec as f64,
                );
                if self.stop_requested(budget.saturating_sub(began.elapsed())) {
                    return;
                }
            }
            if s.repaired > 0 {
                eprintln!(
                    "kavach: integrity: the scrubber repaired {} page(s) from parity",
                    s.repaired
                );
            }
            s.elapsed_ms = t.elapsed().as_millis() as u64;
            s.at_unix_ms = now_unix_ms();
            self.record(&s);
        }
    }

    fn stop_scrubber(&self) {
        *self.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.wake.notify_all();
        if let Some(h) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = h.join();
        }
    }

    /// After the store closed: stop the scrubber, bring every region's redundancy up to date
    /// and record a clean close in each header.
    pub fn close(&self) -> StoreResult<()> {
        self.stop_scrubber();
        let mut first = None;
        for c in &self.covered {
            if let Err(e) = c.prot.seal() {
                first.get_or_insert(failed(format!(
                    "cannot close the redundancy of region `{}`: {e}",
                    c.name
                )));
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// The `# Integrity` section of INFO.
    pub fn info(&self) -> Vec<(String, String)> {
        let kv = |k: &str, v: String| (k.to_string(), v);
        let mut pages = 0;
        let mut vulnerable = 0;
        let mut passes = 0;
        let mut eager_writes = 0;
        let mut repairs_on_read = 0;
        let mut noted = 0;
        let mut refused = 0;
        let mut tracker = "none";
        let mut errors = Vec::new();
        for c in &self.covered {
            let st = c.prot.stats();
            pages += st.geometry.data_pages;
            vulnerable += st.vulnerable_stripes_now;
            passes = passes.max(st.passes);
            eager_writes += st.eager_writes;
            repairs_on_read += st.repairs_on_read;
            noted += st.findings_total;
            refused += c.refused.load(Ordering::Relaxed);
            if self.mode == Mode::Lazy {
                tracker = st.tracker;
            }
            if let Some(e) = st.last_error {
                errors.push(format!("{}: {e}", c.name));
            }
            if let Some(e) = c
                .last_refusal
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
            {
                errors.push(format!("{}: {e}", c.name));
            }
        }
        let not_covered = self.not_covered_now();
        let t = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = vec![
            kv("redundancy", self.mode.name().into()),
            kv(
                "redundancy_period_ms",
                if self.mode == Mode::Lazy {
                    self.period_ms.to_string()
                } else {
                    "0".into()
                },
            ),
            kv("write_tracker", tracker.into()),
            kv(
                "regions_covered",
                self.covered
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            kv("regions_not_covered", self.uncovered.join(",")),
            kv("bytes_not_covered", not_covered.0.to_string()),
            kv("regions_grown_not_covered", not_covered.1.join(",")),
            kv("pages_covered", pages.to_string()),
            kv("vulnerable_stripes_now", vulnerable.to_string()),
            kv("update_passes", passes.to_string()),
            kv("eager_writes", eager_writes.to_string()),
            kv("repairs_on_read", repairs_on_read.to_string()),
            kv("scrub_pages_per_sec", self.scrub_pages_per_sec.to_string()),
            kv("scrub_rounds", t.rounds.to_string()),
        ];
        match &t.last {
            Some(l) => {
                out.push(kv("last_scrub_unix_ms", l.at_unix_ms.to_string()));
                out.push(kv("last_scrub_pages", l.pages_checked.to_string()));
                out.push(kv("last_scrub_findings", l.findings.to_string()));
            }
            None => {
                out.push(kv("last_scrub_unix_ms", "0".into()));
                out.push(kv("last_scrub_pages", "0".into()));
                out.push(kv("last_scrub_findings", "0".into()));
            }
        }
        out.push(kv("findings", t.findings.max(noted).to_string()));
        out.push(kv("repairs", t.repaired.to_string()));
        out.push(kv("unrepaired", t.unrepaired.to_string()));
        out.push(kv("unrepaired_damage", t.damage.join(" | ")));
        out.push(kv("refused_by_integrity", refused.to_string()));
        out.push(kv("integrity_errors", errors.join(" | ")));
        out
    }
}

/// A store's protection seen without its medium type (for the server).
pub trait StoreIntegrity: Send + Sync {
    /// See [`Protection::info`].
    fn info(&self) -> Vec<(String, String)>;
    /// See [`Protection::check`].
    fn check(&self, repair: bool) -> ScrubSummary;
    /// See [`Protection::close`].
    fn close(&self) -> StoreResult<()>;
    /// See [`Protection::mode`].
    fn mode(&self) -> Mode;
}

impl<M: Medium + Clone + 'static> StoreIntegrity for Protection<M> {
    fn info(&self) -> Vec<(String, String)> {
        Protection::info(self)
    }
    fn check(&self, repair: bool) -> ScrubSummary {
        Protection::check(self, repair)
    }
    fn close(&self) -> StoreResult<()> {
        Protection::close(self)
    }
    fn mode(&self) -> Mode {
        self.mode
    }
}

impl<M: Medium + Clone + 'static> Drop for Protection<M> {
    fn drop(&mut self) {
        self.stop_scrubber();
    }
}

// -------------------------------------------------------------------------------------------
// the eager medium

/// A read the integrity layer refused: the first one a thread made since its record was last
/// taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedRead {
    /// The covered region.
    pub region: String,
    /// The data page (from the start of the region).
    pub page: u64,
    /// Why the layer refused it.
    pub why: String,
}

thread_local! {
    static REFUSED_READ: RefCell<Option<RefusedRead>> = const { RefCell::new(None) };
}

/// Take (and clear) the calling thread's record of a refused read.
pub fn take_refused_read() -> Option<RefusedRead> {
    REFUSED_READ.with(|r| r.borrow_mut().take())
}

/// A medium that routes the store's writes to covered ranges through the integrity layer
/// (eager mode) and its reads through the verified read; everything else goes to the medium
/// under it. With no routes (lazy, off) it only forwards.
///
/// `Medium::write` cannot fail: a write the integrity layer refuses (it found the line it
/// replaces damaged beyond repair, or an I/O error) goes to the medium directly and is counted
/// and reported in INFO (`refused_by_integrity`), and the scrubber reports the page.
///
/// `Medium::read` cannot fail either: a read the layer refuses (damage parity cannot repair)
/// fills the buffer from the medium, is counted the same way, and is recorded for the reading
/// thread ([`take_refused_read`]). The store checks that record after each operation that
/// reads the pool (object reads and writes) and fails the operation with
/// [`StoreError::Integrity`] instead of returning what it read; an open that met a refused
/// read fails the same way. The bytes from the medium never reach a client.
#[derive(Clone)]
pub struct Guarded<M: Medium + Clone + 'static> {
    raw: M,
    routes: Arc<Vec<Arc<Covered<M>>>>,
}

impl<M: Medium + Clone + 'static> std::fmt::Debug for Guarded<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guarded")
            .field("raw", &self.raw)
            .field("routes", &self.routes.len())
            .finish()
    }
}

impl<M: Medium + Clone + 'static> Guarded<M> {
    /// Forward everything to `raw`.
    pub fn plain(raw: M) -> Self {
        Guarded {
            raw,
            routes: Arc::new(Vec::new()),
        }
    }
    /// Route the covered regions of `p` through their protection (eager mode only; other
    /// modes forward).
    pub fn over(raw: M, p: &Protection<M>) -> Self {
        let mut routes: Vec<_> = if p.mode == Mode::Eager {
            p.covered.to_vec()
        } else {
            Vec::new()
        };
        routes.sort_by_key(|c| c.offset);
        Guarded {
            raw,
            routes: Arc::new(routes),
        }
    }
    /// The medium under it.
    pub fn raw(&self) -> &M {
        &self.raw
    }

    /// Split `[offset, offset + len)` into pieces, each either inside one route or outside
    /// all, and call `f(route, start, end)` for each in order.
    fn pieces(
        &self,
        offset: usize,
        len: usize,
        mut f: impl FnMut(Option<&Covered<M>>, usize, usize),
    ) {
        let end = offset + len;
        if self.routes.is_empty() {
            f(None, offset, end);
            return;
        }
        let mut at = offset;
        // The first route that ends after `at`.
        let mut i = self
            .routes
            .partition_point(|c| (c.offset + c.len) as usize <= at);
        while at < end {
            match self.routes.get(i) {
                Some(c) if (c.offset as usize) <= at => {
                    let e = end.min((c.offset + c.len) as usize);
                    f(Some(c), at, e);
                    at = e;
                    i += 1;
                }
                Some(c) => {
                    let e = end.min(c.offset as usize);
                    f(None, at, e);
                    at = e;
                }
                None => {
                    f(None, at, end);
                    at = end;
                }
            }
        }
    }

    fn refuse_read(c: &Covered<M>, at: usize, err: &IntegrityError) {
        c.refused_reads.fetch_add(1, Ordering::Relaxed);
        Self::refuse(
            c,
            format!("a read at pool byte {at:#x} could not be verified: {err}"),
        );
        let page = match err {
            IntegrityError::Unrepairable { page, .. } => *page,
            _ => (at as u64 - c.offset) / PAGE,
        };
        let why = match err {
            IntegrityError::Unrepairable { reason, .. } => reason.clone(),
            other => other.to_string(),
        };
        let refused = RefusedRead {
            region: c.name.clone(),
            page,
            why,
        };
        c.first_refused_read
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(|| refused.clone());
        REFUSED_READ.with(|r| {
            r.borrow_mut().get_or_insert(refused);
        });
    }

    fn refuse(c: &Covered<M>, what: String) {
        c.refused.fetch_add(1, Ordering::Relaxed);
        let mut last = c.last_refusal.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_none() {
            eprintln!("kavach: integrity: {}: {what}", c.name);
        }
        *last = Some(what);
    }

    fn routed_write(&self, offset: usize, data: &[u8], nt: bool) {
        self.pieces(offset, data.len(), |route, s, e| {
            let part = &data[s - offset..e - offset];
            match route {
                Some(c) => {
                    if let Err(err) = c.prot.write(s as u64 - c.offset, part) {
                        Self::refuse(
                            c,
                            format!("a write at pool byte {s:#x} bypassed the layer: {err}"),
                        );
                        self.raw.write(s, part);
                    }
                }
                None if nt => self.raw.write_nontemporal(s, part),
                None => self.raw.write(s, part),
            }
        });
    }
}

impl<M: Medium + Clone + 'static> Medium for Guarded<M> {
    fn len(&self) -> usize {
        self.raw.len()
    }
    fn domain(&self) -> pmem::Domain {
        self.raw.domain()
    }
    fn backing(&self) -> pmem::Backing {
        self.raw.backing()
    }
    fn label(&self) -> std::path::PathBuf {
        self.raw.label()
    }
    fn read(&self, offset: usize, buf: &mut [u8]) {
        if self.routes.is_empty() {
            return self.raw.read(offset, buf);
        }
        self.pieces(offset, buf.len(), |route, s, e| {
            let part = &mut buf[s - offset..e - offset];
            match route {
                Some(c) => {
                    if let Err(err) = c.prot.read(s as u64 - c.offset, part) {
                        Self::refuse_read(c, s, &err);
                        self.raw.read(s, part);
                    }
                }
                None => self.raw.read(s, part),
            }
        });
    }
    fn write(&self, offset: usize, data: &[u8]) {
        if self.routes.is_empty() {
            return self.raw.write(offset, data);
        }
        self.routed_write(offset, data, false);
    }
    fn prefetch(&self, offset: usize, len: usize) {
        self.raw.prefetch(offset, len);
    }
    fn populate(&self, offset: usize, len: usize) {
        self.raw.populate(offset, len);
    }
    fn write_nontemporal(&self, offset: usize, data: &[u8]) {
        if self.routes.is_empty() {
            return self.raw.write_nontemporal(offset, data);
        }
        self.routed_write(offset, data, true);
    }
    fn load_u64(&self, offset: usize) -> u64 {
        self.raw.load_u64(offset)
    }
    fn store_u64(&self, offset: usize, value: u64) {
        // An aligned 8-byte store never crosses a line: the eager write of those 8 bytes
        // stores them with one copy inside one line.
        if self.routes.is_empty() || self.route_of(offset).is_none() {
            return self.raw.store_u64(offset, value);
        }
        self.routed_write(offset, &value.to_le_bytes(), false);
    }
    fn flush(&self, offset: usize, len: usize) -> pmem::Result<()> {
        self.raw.flush(offset, len)
    }
    fn write_back(&self, offset: usize, len: usize) -> pmem::Result<()> {
        self.raw.write_back(offset, len)
    }
    fn fence(&self) -> pmem::Result<()> {
        self.raw.fence()
    }
    fn persist(&self, offset: usize, len: usize) -> pmem::Result<()> {
        self.raw.persist(offset, len)
    }
    fn grow(&self, len: usize) -> pmem::Result<()> {
        self.raw.grow(len)
    }
    fn discard(&self, offset: usize, len: usize) -> pmem::Result<()> {
        self.raw.discard(offset, len)
    }
    fn back(&self, offset: usize, len: usize) -> pmem::Result<()> {
        self.raw.back(offset, len)
    }
    fn inject(&self, offset: usize, data: &[u8]) -> pmem::Result<()> {
        self.raw.inject(offset, data)
    }
}

impl<M: Medium + Clone + 'static> Guarded<M> {
    fn route_of(&self, offset: usize) -> Option<&Covered<M>> {
        let i = self
            .routes
            .partition_point(|c| (c.offset + c.len) as usize <= offset);
        self.routes
            .get(i)
            .filter(|c| c.offset as usize <= offset)
            .map(|c| &**c)
    }
}

/// A refused read fails the store call that made it.
impl From<RefusedRead> for StoreError {
    fn from(r: RefusedRead) -> Self {
        StoreError::Integrity {
            region: r.region,
            page: r.page,
            why: r.why,
        }
    }
}
