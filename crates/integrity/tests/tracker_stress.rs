//! Write trackers: every backend available here, on a shared file mapping in /dev/shm.
//!
//! The stress tests run one writer thread (random stores of increasing sequence numbers to
//! random pages) against one scanner thread (`collect` over every batch, round after round) and
//! check, afterwards, that no store was missed and no page reported without a store.

use integrity::tracker::{
    self, BATCH_PAGES, BATCH_WORDS, BatchBits, PAGE_BYTES, Tracker, TrackerKind,
};
use pmem::rng::SplitMix64;
use pmem::{Mapping, Medium};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A file in /dev/shm, mapped, and removed when dropped.
struct ShmFile {
    mapping: Arc<Mapping>,
    path: PathBuf,
}

impl ShmFile {
    fn new(name: &str, pages: u64) -> ShmFile {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let path = PathBuf::from(format!(
            "/dev/shm/kavach-tracker-{name}-{}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        ));
        let mapping = Mapping::create(&path, pages * PAGE_BYTES as u64).expect("create");
        ShmFile {
            mapping: Arc::new(mapping),
            path,
        }
    }

    fn tracker(&self, kind: TrackerKind) -> Box<dyn Tracker> {
        let len = self.mapping.len();
        tracker::for_mapping(kind, self.mapping.clone(), 0, len).expect("tracker")
    }

    /// Store `value` in the first word of page `page` the way each backend needs (explicit:
    /// mark first).
    fn store(&self, tracker: &dyn Tracker, page: u64, value: u64) {
        tracker.mark(page, 1);
        self.mapping.store_u64(page as usize * PAGE_BYTES, value);
    }

    fn load(&self, page: u64) -> u64 {
        self.mapping.load_u64(page as usize * PAGE_BYTES)
    }
}

impl Drop for ShmFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The backends this machine supports.
fn backends() -> Vec<TrackerKind> {
    let mut kinds = Vec::new();
    // Where the build found no support, the uffd backend is covered by `stress_uffd`, which
    // is then reported as ignored.
    if cfg!(not(kavach_no_uffd_wp)) {
        assert!(
            tracker::uffd::supported(),
            "the build found userfaultfd asynchronous write-protection, this run does not"
        );
        kinds.push(TrackerKind::Uffd);
    }
    kinds.push(TrackerKind::Mprotect);
    kinds.push(TrackerKind::Explicit);
    kinds
}

/// Pages set in `bits`, relative to the batch.
fn pages_of(bits: &BatchBits) -> Vec<u64> {
    (0..BATCH_PAGES as u64)
        .filter(|i| bits[(i / 64) as usize] >> (i % 64) & 1 == 1)
        .collect()
}

fn collect(tracker: &dyn Tracker, first: u64, count: u32) -> Vec<u64> {
    let mut bits = [u64::MAX; BATCH_WORDS];
    tracker.collect(first, count, &mut bits).expect("collect");
    pages_of(&bits)
}

fn peek(tracker: &dyn Tracker, first: u64, count: u32) -> Vec<u64> {
    let mut bits = [u64::MAX; BATCH_WORDS];
    tracker.peek(first, count, &mut bits).expect("peek");
    pages_of(&bits)
}

#[test]
fn collect_after_arm_is_empty() {
    for kind in backends() {
        let file = ShmFile::new("arm", 1024);
        let t = file.tracker(kind);
        assert_eq!(t.kind(), kind);
        assert_eq!(t.pages(), 1024);
        // A new tracker is armed.
        assert!(collect(&*t, 0, 512).is_empty(), "{kind:?}");
        for page in [0, 1, 511, 512, 1023] {
            file.store(&*t, page, page + 1);
        }
        t.arm().unwrap();
        assert!(collect(&*t, 0, 512).is_empty(), "{kind:?}");
        assert!(collect(&*t, 512, 512).is_empty(), "{kind:?}");
        assert!(peek(&*t, 0, 512).is_empty(), "{kind:?}");
    }
}

#[test]
fn a_store_is_reported_exactly_once() {
    for kind in backends() {
        let file = ShmFile::new("once", 1024);
        let t = file.tracker(kind);
        file.store(&*t, 5, 1);
        file.store(&*t, 5, 2);
        file.store(&*t, 700, 3);
        assert_eq!(collect(&*t, 0, 512), [5], "{kind:?}");
        assert_eq!(collect(&*t, 512, 512), [700 - 512], "{kind:?}");
        assert!(collect(&*t, 0, 512).is_empty(), "{kind:?}");
        assert!(collect(&*t, 512, 512).is_empty(), "{kind:?}");
        // Written again after the report: reported again, once.
        file.store(&*t, 5, 4);
        assert_eq!(collect(&*t, 0, 512), [5], "{kind:?}");
        assert!(collect(&*t, 0, 512).is_empty(), "{kind:?}");
        // An unaligned batch reports relative to its first page and stops at its count.
        file.store(&*t, 600, 5);
        file.store(&*t, 610, 6);
        assert_eq!(collect(&*t, 590, 15), [10], "{kind:?}");
        assert_eq!(collect(&*t, 590, 434), [20], "{kind:?}");
        // Reads are not writes.
        assert_eq!(file.load(5), 4);
        assert!(collect(&*t, 0, 512).is_empty(), "{kind:?}");
        // Batches outside the tracker are errors, not panics.
        let mut bits = [0; BATCH_WORDS];
        assert!(t.collect(1000, 25, &mut bits).is_err(), "{kind:?}");
        assert!(t.peek(0, BATCH_PAGES + 1, &mut bits).is_err(), "{kind:?}");
    }
}

#[test]
fn peek_does_not_rearm() {
    for kind in backends() {
        let file = ShmFile::new("peek", 512);
        let t = file.tracker(kind);
        file.store(&*t, 9, 1);
        assert_eq!(peek(&*t, 0, 512), [9], "{kind:?}");
        assert_eq!(peek(&*t, 0, 512), [9], "{kind:?}");
        file.store(&*t, 9, 2);
        assert_eq!(collect(&*t, 0, 512), [9], "{kind:?}");
        assert!(peek(&*t, 0, 512).is_empty(), "{kind:?}");
        assert!(collect(&*t, 0, 512).is_empty(), "{kind:?}");
    }
}

#[test]
fn never_touched_pages_are_reported_when_written() {
    for kind in backends() {
        // The file's pages exist (the mapping reserves them) but this process has never
        // touched them, so they have no page-table entries yet.
        let file = ShmFile::new("fresh", 2048);
        let t = file.tracker(kind);
        let pages = [3, 1000, 2047];
        for page in pages {
            file.store(&*t, page, 7);
        }
        let mut reported = Vec::new();
        for batch in 0..4 {
            reported.extend(
                collect(&*t, batch * 512, 512)
                    .iter()
                    .map(|p| p + batch * 512),
            );
        }
        assert_eq!(reported, pages, "{kind:?}");
    }
}

#[test]
fn writes_behind_the_mapping_are_not_reported() {
    // pwrite(2) changes the file through the page cache, not through our page tables: that is
    // how fault injection changes bytes behind the tracker's back.
    for kind in backends() {
        if kind == TrackerKind::Explicit {
            continue;
        }
        let file = ShmFile::new("pwrite", 512);
        let t = file.tracker(kind);
        file.store(&*t, 1, 1);
        assert_eq!(collect(&*t, 0, 512), [1], "{kind:?}");
        let other = std::fs::OpenOptions::new()
            .write(true)
            .open(&file.path)
            .unwrap();
        // Page 1 (mapped, written before), page 2 (never touched).
        other
            .write_all_at(&0xdead_beef_u64.to_le_bytes(), PAGE_BYTES as u64 + 64)
            .unwrap();
        other
            .write_all_at(&0xfeed_u64.to_le_bytes(), 2 * PAGE_BYTES as u64)
            .unwrap();
        assert_eq!(
            file.mapping.load_u64(PAGE_BYTES + 64),
            0xdead_beef,
            "{kind:?}"
        );
        assert_eq!(file.mapping.load_u64(2 * PAGE_BYTES), 0xfeed, "{kind:?}");
        assert!(peek(&*t, 0, 512).is_empty(), "{kind:?}");
        assert!(collect(&*t, 0, 512).is_empty(), "{kind:?}");
    }
}

/// What the scanner saw of one batch: per `collect`, the writer's counters around the call.
#[derive(Default)]
struct BatchLog {
    /// `completed` read just before the call: stores `< before` had landed when it started.
    before: Vec<u64>,
    /// `announced` read just after the call: stores `>= after` had not begun when it ended.
    after: Vec<u64>,
}

const STRESS_PAGES: u64 = 4096;
/// The writer stops once the scanner has done this many rounds (and `STRESS_TIME_MIN` has
/// passed), or at `STRESS_TIME_MAX`, or after `STRESS_STORES_MAX` stores.
const STRESS_ROUNDS: u64 = 2000;
const STRESS_TIME_MIN: Duration = Duration::from_millis(1000);
const STRESS_TIME_MAX: Duration = Duration::from_millis(2500);
const STRESS_STORES_MAX: u64 = 1_000_000;
/// The writer waits for the scanner when it is this many stores per round ahead (the explicit
/// backend's writer would otherwise finish its stores in a few hundred rounds).
const STRESS_STORES_PER_ROUND: u64 = 400;

/// One writer and one scanner on a tracker of `kind`, then the check.
fn stress(kind: TrackerKind, seed: u64) {
    let file = ShmFile::new("stress", STRESS_PAGES);
    let tracker = file.tracker(kind);
    let batches = STRESS_PAGES / BATCH_PAGES as u64;
    // `announced` becomes k + 1 before store k begins (before its first mark), `completed`
    // becomes k + 1 after store k has landed (and after its last mark).
    let announced = AtomicU64::new(0);
    let completed = AtomicU64::new(0);
    let stopped = AtomicBool::new(false);
    let rounds_done = AtomicU64::new(0);

    let (stores, logs, reports, rounds) = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut rng = SplitMix64::new(seed);
            let mut stores: Vec<u32> = Vec::new();
            let begin = Instant::now();
            for k in 0..STRESS_STORES_MAX {
                if k % 1024 == 0 {
                    let elapsed = begin.elapsed();
                    if elapsed >= STRESS_TIME_MAX
                        || (elapsed >= STRESS_TIME_MIN
                            && rounds_done.load(Ordering::Relaxed) >= STRESS_ROUNDS)
                    {
                        break;
                    }
                }
                while k >= (rounds_done.load(Ordering::Relaxed) + 1) * STRESS_STORES_PER_ROUND
                    && begin.elapsed() < STRESS_TIME_MAX
                {
                    std::thread::yield_now();
                }
                let page = rng.below(STRESS_PAGES);
                announced.store(k + 1, Ordering::SeqCst);
                // `store` marks before the store; the explicit backend needs a mark after it
                // too (see `tracker::explicit`): a collect between the first mark and the
                // store takes the bit before the store lands.
                file.store(&*tracker, page, k + 1);
                tracker.mark(page, 1);
                completed.store(k + 1, Ordering::SeqCst);
                stores.push(page as u32);
            }
            stopped.store(true, Ordering::SeqCst);
            stores
        });
        let scanner = scope.spawn(|| {
            let mut logs: Vec<BatchLog> = (0..batches).map(|_| BatchLog::default()).collect();
            // Per page, the collects that reported it (indices in its batch's log), each with
            // the page's value read right after the collect.
            let mut reports: Vec<Vec<(u32, u64)>> = vec![Vec::new(); STRESS_PAGES as usize];
            let mut rounds = 0u64;
            loop {
                // A round that starts after the writer stopped sees every store landed.
                let last = stopped.load(Ordering::SeqCst);
                for batch in 0..batches {
                    let log = &mut logs[batch as usize];
                    let index = log.before.len() as u32;
                    let mut bits = [0; BATCH_WORDS];
                    log.before.push(completed.load(Ordering::SeqCst));
                    tracker
                        .collect(batch * BATCH_PAGES as u64, BATCH_PAGES, &mut bits)
                        .expect("collect");
                    log.after.push(announced.load(Ordering::SeqCst));
                    for page in pages_of(&bits) {
                        let page = batch * BATCH_PAGES as u64 + page;
                        reports[page as usize].push((index, file.load(page)));
                    }
                }
                rounds += 1;
                rounds_done.store(rounds, Ordering::Relaxed);
                if last {
                    break;
                }
            }
            (logs, reports, rounds)
        });
        let stores = writer.join().expect("writer");
        let (logs, reports, rounds) = scanner.join().expect("scanner");
        (stores, logs, reports, rounds)
    });

    // Per page, its stores in order.
    let mut stores_of: Vec<Vec<u64>> = vec![Vec::new(); STRESS_PAGES as usize];
    for (k, &page) in stores.iter().enumerate() {
        stores_of[page as usize].push(k as u64);
    }
    let report_count: usize = reports.iter().map(Vec::len).sum();
    eprintln!(
        "{}: {} stores, {rounds} rounds of {batches} batches, {report_count} pages reported",
        kind.name(),
        stores.len()
    );
    assert!(rounds >= 50, "{kind:?}: only {rounds} rounds");

    // No store lost for good. Store k writes k + 1, so every store to a page writes a larger
    // value than the one before (and than the file's zeros), and a value read after a report
    // covers every store that landed before the read. The
    // redundancy thread computes from such reads: each store must be covered by one, or the
    // page ends clean with stale redundancy.
    for (page, stores) in stores_of.iter().enumerate() {
        let covered = reports[page].last().map(|&(_, value)| value);
        assert_eq!(
            covered,
            stores.last().map(|k| k + 1),
            "{kind:?}: page {page}'s last store is not covered by a report"
        );
    }

    // No store missed even for a while. Store k to page p landed before every collect whose
    // `before` exceeds k, so the first such collect of p's batch (`due`) must report p, unless
    // a collect that had not ended before store k began (`after` exceeds k) reported p after
    // the store landed. A report whose value read afterwards is at least k + 1 came after the
    // store landed, so the check asks for such a report among the collects `could..=due`.
    for (k, &page) in stores.iter().enumerate() {
        let k = k as u64;
        let log = &logs[page as usize / BATCH_PAGES as usize];
        let could = log.after.partition_point(|&a| a <= k);
        let due = log.before.partition_point(|&b| b <= k);
        assert!(
            due < log.before.len(),
            "{kind:?}: no collect after store {k}"
        );
        let reported = &reports[page as usize];
        let next = reported.partition_point(|&(i, _)| (i as usize) < could);
        let covered = reported[next..]
            .iter()
            .take_while(|&&(i, _)| i as usize <= due)
            .any(|&(_, value)| value > k);
        assert!(
            covered,
            "{kind:?}: store {k} to page {page} missed: reports {:?}, collects {could}..={due}",
            &reported[next.saturating_sub(2)..(next + 2).min(reported.len())]
        );
    }

    // Nothing reported without a store: each report of p needs a store to p that had not
    // landed before the previous report's collect began and had begun before this one ended.
    for (page, reported) in reports.iter().enumerate() {
        let log = &logs[page / BATCH_PAGES as usize];
        let mut since = 0;
        for &(i, _) in reported {
            let until = log.after[i as usize];
            let s = &stores_of[page];
            let next = s.partition_point(|&k| k < since);
            assert!(
                next < s.len() && s[next] < until,
                "{kind:?}: page {page} reported by collect {i} with no store in [{since}, {until})"
            );
            since = log.before[i as usize];
        }
    }
}

#[test]
#[cfg_attr(
    kavach_no_uffd_wp,
    ignore = "no userfaultfd asynchronous write-protection on this kernel"
)]
fn stress_uffd() {
    assert!(
        tracker::uffd::supported(),
        "the build found userfaultfd asynchronous write-protection, this run does not"
    );
    stress(TrackerKind::Uffd, 1);
}

#[test]
fn stress_mprotect() {
    stress(TrackerKind::Mprotect, 2);
}

#[test]
fn stress_explicit() {
    stress(TrackerKind::Explicit, 3);
}
