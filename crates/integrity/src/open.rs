//! Format and open: validating what the medium holds, open's decision (a pure function of the
//! header and the options, as a table in `docs/integrity.md`, "What open does"), and carrying
//! it out.

use crate::error::{IntegrityError, Result};
use crate::header::Header;
use crate::inner::{Inner, PAGE, build};
use crate::layout::{
    self, Geometry, HEADER_BYTES, HEADER_COPY_OFFSETS, RETIRED_AT, RETIRED_BYTES, flags, state,
};
use crate::options::{CreateOptions, Mode, OpenOptions, OpenReport, Placement, Progress};
use crate::tracker::explicit::ExplicitTracker;
use crate::trust::{Basis, Trust};
use pmem::Medium;
use std::time::Instant;

/// The data region and the integrity region must lie within the medium, page-aligned.
fn check_placement<M: Medium>(medium: &M, place: &Placement) -> Result<()> {
    let ends = [
        place.data_offset.checked_add(place.data_bytes),
        place.meta_offset.checked_add(place.meta_bytes),
    ];
    if ends
        .iter()
        .any(|e| e.is_none_or(|e| e > medium.len() as u64))
        || place.data_bytes % PAGE != 0
        || place.data_offset % PAGE != 0
        || place.meta_offset % PAGE != 0
    {
        return Err(IntegrityError::invalid(
            "placement",
            format!(
                "data region `{}` at {:#x} (+{:#x}) and its integrity region at {:#x} (+{:#x}) \
                 do not fit a medium of {:#x} bytes, or are not page-aligned",
                place.region,
                place.data_offset,
                place.data_bytes,
                place.meta_offset,
                place.meta_bytes,
                medium.len()
            ),
        ));
    }
    Ok(())
}

/// Lazy mode's period must be within the documented bounds.
fn validate_period(period_ms: u32) -> Result<()> {
    if !(layout::PERIOD_MS_MIN..=layout::PERIOD_MS_MAX).contains(&period_ms) {
        return Err(IntegrityError::invalid(
            "period",
            format!(
                "{period_ms} ms; the update period is {} ms to {} s",
                layout::PERIOD_MS_MIN,
                layout::PERIOD_MS_MAX / 1000
            ),
        ));
    }
    Ok(())
}

/// Format the integrity region of `place` and compute the redundancy of the data as it is.
/// The region must be at least `Geometry::new(pages, stripe).meta_bytes` long. Crash-safe in
/// the sense that a crash leaves a header in state `stale`, which the next open rebuilds.
pub fn format<M: Medium>(
    medium: M,
    place: &Placement,
    opts: &CreateOptions,
    progress: Progress<'_>,
) -> Result<Geometry> {
    check_placement(&medium, place)?;
    validate_period(opts.period_ms)?;
    let geo = Geometry::new(place.data_bytes / PAGE, opts.stripe_pages).ok_or_else(|| {
        IntegrityError::invalid(
            "stripe",
            format!(
                "{} data pages in stripes of {} (2..=32 pages per stripe)",
                place.data_bytes / PAGE,
                opts.stripe_pages
            ),
        )
    })?;
    if geo.meta_bytes > place.meta_bytes {
        return Err(IntegrityError::invalid(
            "integrity region",
            format!(
                "{} bytes; {} data pages need {}",
                place.meta_bytes, geo.data_pages, geo.meta_bytes
            ),
        ));
    }
    let header = Header {
        mode: opts.mode.code(),
        seq: 0,
        uuid: place.uuid,
        data_offset: place.data_offset,
        geometry: geo,
        period_ms: opts.period_ms,
        state: state::STALE,
        flags: 0,
    };
    let pages = geo.data_pages;
    let inner = build(
        medium,
        place,
        header,
        Mode::Off,
        opts.period_ms,
        Box::new(ExplicitTracker::new(pages)),
        false,
    );
    // Both header copies, state stale, before anything else: a crash from here on leaves a
    // region that the next open rebuilds.
    for copy in HEADER_COPY_OFFSETS {
        inner
            .medium
            .write(inner.meta(copy as u64), &[0; HEADER_BYTES]);
    }
    inner.write_header(|_| {})?;
    inner.write_header(|_| {})?;
    inner
        .medium
        .write(inner.meta(RETIRED_AT as u64), &[0; RETIRED_BYTES]);
    inner
        .medium
        .persist(inner.meta(RETIRED_AT as u64), RETIRED_BYTES)?;
    inner.resync(true, progress)?;
    inner.write_header(|h| {
        h.state = state::CLEAN;
        h.flags = flags::LINES_VALID;
    })?;
    Ok(geo)
}

// ---------- open's decision ----------

/// The header copies open found valid (when neither is, there is nothing to decide: open
/// refuses the region before the table, as it does a header that does not fit the placement).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Copies {
    /// Both copies decode and pass their checksums.
    BothValid,
    /// One copy is damaged; the other is in force.
    OneDamaged,
}

/// The `state` of the header copy in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderState {
    /// Closed cleanly.
    Clean,
    /// Opened read-write and never closed.
    Open,
    /// Formatted and never finished, or used in mode off.
    Stale,
}

impl HeaderState {
    fn of(code: u32) -> HeaderState {
        match code {
            state::CLEAN => HeaderState::Clean,
            state::OPEN => HeaderState::Open,
            _ => HeaderState::Stale,
        }
    }
    fn code(self) -> u32 {
        match self {
            HeaderState::Clean => state::CLEAN,
            HeaderState::Open => state::OPEN,
            HeaderState::Stale => state::STALE,
        }
    }
}

/// Everything open's decision depends on: the header in force and what the caller asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpenCase {
    /// Which header copies are valid.
    pub(crate) copies: Copies,
    /// The state in force.
    pub(crate) state: HeaderState,
    /// The `unverified` flag.
    pub(crate) unverified: bool,
    /// The flag saying line checksums are current.
    pub(crate) lines_valid: bool,
    /// The mode in force: the one asked for, or else the recorded one.
    pub(crate) mode: Mode,
    /// A read-only open.
    pub(crate) read_only: bool,
    /// The caller asked for the background update thread.
    pub(crate) background: bool,
    /// The caller asked for the background scrubber.
    pub(crate) scrub: bool,
}

/// What a read-write open's first header write records (the session).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Session {
    /// Nothing is written (read-only).
    None,
    /// State `stale` (mode off keeps nothing current), line flag cleared.
    Stale,
    /// State `open`, line flag cleared.
    OpenLinesCleared,
    /// State `open`, line flag kept (eager mode over current line checksums).
    OpenLinesKept,
}

/// What open does to the redundancy after recording the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Work {
    /// Nothing.
    Nothing,
    /// Recompute every checksum and parity page from the data as it is; then clear the
    /// `unverified` flag (the redundancy is current).
    Resync,
    /// A resync that also computes every line checksum; then clear `unverified` and set the
    /// line flag.
    ResyncWithLines,
    /// Compute line checksums only from pages that pass their page checksum (the others get
    /// checksums that cannot match); then set the line flag.
    LinesFromVerifiedPages,
}

/// What open does, decided by [`decide`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OpenPlan {
    /// How far the stored redundancy is trusted (the table of [`crate::trust`]).
    pub(crate) trust: Trust,
    /// The first header write.
    pub(crate) session: Session,
    /// The work after it.
    pub(crate) work: Work,
    /// Arm write tracking (lazy mode).
    pub(crate) arm_tracker: bool,
    /// Start the background update thread.
    pub(crate) updater: bool,
    /// Start the background scrubber.
    pub(crate) scrubber: bool,
}

/// Open's decision, as the table "What open does" in `docs/integrity.md` writes it out; the
/// test below enumerates every case against that table. Pure: it reads nothing and writes
/// nothing.
pub(crate) fn decide(case: OpenCase) -> OpenPlan {
    let flags_in_force = if case.unverified {
        flags::UNVERIFIED
    } else {
        0
    };
    let trust = crate::trust::decide(
        case.copies == Copies::OneDamaged,
        case.state.code(),
        flags_in_force,
    );
    let scrubber = case.scrub;
    if case.read_only {
        return OpenPlan {
            trust,
            session: Session::None,
            work: Work::Nothing,
            arm_tracker: false,
            updater: false,
            scrubber,
        };
    }
    let eager = case.mode == Mode::Eager;
    // Only an unclean region is recovered, and never in mode off (nothing is kept current).
    let recover = trust.basis == Basis::Unclean && case.mode != Mode::Off;
    // Line checksums are kept only in eager mode: any other mode may change data without
    // them, so they stop counting from the session on (and while they are being rebuilt).
    let lines_current = case.lines_valid && !recover;
    let session = if case.mode == Mode::Off {
        Session::Stale
    } else if eager && lines_current {
        Session::OpenLinesKept
    } else {
        Session::OpenLinesCleared
    };
    let work = match (recover, eager, lines_current) {
        (true, true, _) => Work::ResyncWithLines,
        (true, false, _) => Work::Resync,
        (false, true, false) => Work::LinesFromVerifiedPages,
        _ => Work::Nothing,
    };
    let lazy = case.mode == Mode::Lazy;
    OpenPlan {
        trust,
        session,
        work,
        arm_tracker: lazy,
        updater: lazy && case.background,
        scrubber,
    }
}

// ---------- opening ----------

/// Read both header copies at `place`: the copy in force (the valid one with the higher
/// sequence number), which copies were valid, and what was wrong with a damaged one.
fn read_header<M: Medium>(
    medium: &M,
    place: &Placement,
    report: &mut OpenReport,
) -> Result<(Header, Copies)> {
    let mut copies = Vec::new();
    let mut first_damage = None;
    for (i, off) in HEADER_COPY_OFFSETS.iter().enumerate() {
        let at = place.meta_offset as usize + off;
        let mut b = [0u8; HEADER_BYTES];
        medium.read(at, &mut b);
        match Header::decode(&b, &place.uuid, at as u64) {
            Ok(h) => copies.push(h),
            Err(c) => {
                report.header_damage.push(format!("copy {i}: {c}"));
                first_damage.get_or_insert(c);
            }
        }
    }
    let valid = if copies.len() == 2 {
        Copies::BothValid
    } else {
        Copies::OneDamaged
    };
    match copies.into_iter().max_by_key(|h| h.seq) {
        Some(h) => Ok((h, valid)),
        None => Err(IntegrityError::Corrupt(first_damage.unwrap_or_else(|| {
            pmem::Corruption {
                structure: "integrity header".into(),
                offset: place.meta_offset,
                field: "magic",
                expected: "a header".into(),
                found: "none".into(),
            }
        }))),
    }
}

/// The header in force must describe the placement it was found at.
fn check_header_fits(header: &Header, place: &Placement) -> Result<()> {
    let geo = header.geometry;
    if header.data_offset != place.data_offset || geo.data_pages * PAGE != place.data_bytes {
        return Err(IntegrityError::Corrupt(pmem::Corruption {
            structure: "integrity header".into(),
            offset: place.meta_offset,
            field: "data_offset/data_pages",
            expected: format!(
                "the data region: offset {:#x}, {} pages",
                place.data_offset,
                place.data_bytes / PAGE
            ),
            found: format!("offset {:#x}, {} pages", header.data_offset, geo.data_pages),
        }));
    }
    if geo.meta_bytes > place.meta_bytes {
        return Err(IntegrityError::Corrupt(pmem::Corruption {
            structure: "integrity header".into(),
            offset: place.meta_offset,
            field: "meta_bytes",
            expected: format!("at most the region's {} bytes", place.meta_bytes),
            found: geo.meta_bytes.to_string(),
        }));
    }
    Ok(())
}

/// Open the region at `place` up to the point where background threads would start: validate,
/// decide ([`decide`]), and carry out the plan's header write and work and arm tracking. The
/// caller starts the threads the plan names.
pub(crate) fn open_region<M: Medium>(
    medium: M,
    place: &Placement,
    opts: &mut OpenOptions,
    progress: Progress<'_>,
) -> Result<(Inner<M>, OpenReport, OpenPlan)> {
    check_placement(&medium, place)?;
    let mut report = OpenReport::default();
    let (header, copies) = read_header(&medium, place, &mut report)?;
    check_header_fits(&header, place)?;
    let geo = header.geometry;
    let recorded = Mode::from_code(header.mode).unwrap_or(Mode::Off);
    let mode = opts.mode.unwrap_or(recorded);
    let period_ms = opts.period_ms.unwrap_or(header.period_ms);
    validate_period(period_ms)?;
    report.clean_at_open = header.state == state::CLEAN;
    report.previous_state = match HeaderState::of(header.state) {
        HeaderState::Clean => "clean",
        HeaderState::Open => "open",
        HeaderState::Stale => "stale",
    };
    let tracker = opts
        .tracker
        .take()
        .unwrap_or_else(|| Box::new(ExplicitTracker::new(geo.data_pages)));
    if tracker.pages() != geo.data_pages {
        return Err(IntegrityError::invalid(
            "tracker",
            format!(
                "it tracks {} pages; the region has {}",
                tracker.pages(),
                geo.data_pages
            ),
        ));
    }
    let plan = decide(OpenCase {
        copies,
        state: HeaderState::of(header.state),
        unverified: header.flags & flags::UNVERIFIED != 0,
        lines_valid: header.flags & flags::LINES_VALID != 0,
        mode,
        read_only: opts.read_only,
        background: opts.background,
        scrub: opts.scrub_pages_per_sec > 0,
    });
    report.trust = plan.trust.clone();
    let inner = build(
        medium,
        place,
        header,
        mode,
        period_ms,
        tracker,
        opts.read_only,
    );
    inner.set_trust(plan.trust.clone());
    carry_out(&inner, &plan, &mut report, progress)?;
    if plan.arm_tracker {
        inner.tracker.arm()?;
    }
    Ok((inner, report, plan))
}

/// The header write and the work of `plan`. The session is recorded (state open, or stale in
/// mode off) before anything else is written; a resync is the only place damage can be taken
/// as data, and the report names the pages.
fn carry_out<M: Medium>(
    inner: &Inner<M>,
    plan: &OpenPlan,
    report: &mut OpenReport,
    progress: Progress<'_>,
) -> Result<()> {
    if plan.session == Session::None {
        return Ok(());
    }
    inner.write_header(|h| {
        h.mode = inner.mode.code();
        h.period_ms = inner.period_ms;
        h.state = if plan.session == Session::Stale {
            state::STALE
        } else {
            state::OPEN
        };
        if plan.session != Session::OpenLinesKept {
            h.flags &= !flags::LINES_VALID;
        }
    })?;
    report.retired_bytes_cleared = inner.clear_retired()?;
    match plan.work {
        Work::Nothing => {}
        Work::Resync | Work::ResyncWithLines => {
            let lines = plan.work == Work::ResyncWithLines;
            let t = Instant::now();
            let (pages, changed, listed) = inner.resync(lines, progress)?;
            report.resync_pages = pages;
            report.resync_pages_changed = changed;
            report.resync_pages_changed_list = listed;
            report.resync_ms = t.elapsed().as_millis() as u64;
            inner.write_header(|h| {
                h.flags &= !flags::UNVERIFIED;
                if lines {
                    h.flags |= flags::LINES_VALID;
                }
            })?;
            inner.set_trust(Trust::current());
        }
        Work::LinesFromVerifiedPages => {
            let (rebuilt, listed, _) = inner.rebuild_lines_verified(progress)?;
            report.lines_rebuilt_pages = rebuilt;
            report.lines_refused_pages = listed;
            inner.write_header(|h| h.flags |= flags::LINES_VALID)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const COPIES: [Copies; 2] = [Copies::BothValid, Copies::OneDamaged];
    const STATES: [HeaderState; 3] = [HeaderState::Clean, HeaderState::Open, HeaderState::Stale];
    const MODES: [Mode; 4] = [Mode::Off, Mode::Lazy, Mode::Eager, Mode::TxbPage];

    /// Every input combination, in a fixed order.
    fn every_case() -> Vec<OpenCase> {
        let mut all = Vec::new();
        for copies in COPIES {
            for state in STATES {
                for unverified in [false, true] {
                    for lines_valid in [false, true] {
                        for mode in MODES {
                            for read_only in [false, true] {
                                for background in [false, true] {
                                    for scrub in [false, true] {
                                        all.push(OpenCase {
                                            copies,
                                            state,
                                            unverified,
                                            lines_valid,
                                            mode,
                                            read_only,
                                            background,
                                            scrub,
                                        });
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        all
    }

    /// A cell of an input column: `any`, or values separated by commas.
    fn cell<T: Copy>(text: &str, all: &[T], parse: impl Fn(&str) -> Option<T>) -> Vec<T> {
        if text == "any" {
            return all.to_vec();
        }
        text.split(',')
            .map(|v| parse(v.trim()).unwrap_or_else(|| panic!("unknown value `{v}`")))
            .collect()
    }

    fn flag(v: &str) -> Option<bool> {
        match v {
            "clear" => Some(false),
            "set" => Some(true),
            _ => None,
        }
    }

    /// `no`, `yes`, or `if asked` (the thread's own input).
    fn thread(v: &str, asked: bool) -> bool {
        match v {
            "no" => false,
            "yes" => true,
            "if asked" => asked,
            c => panic!("thread cell `{c}`"),
        }
    }

    /// One row of the table, parsed: the input sets it covers and the plan it states for a case.
    struct Row {
        text: String,
        copies: Vec<Copies>,
        states: Vec<HeaderState>,
        unverified: Vec<bool>,
        lines: Vec<bool>,
        modes: Vec<Mode>,
        read_only: Vec<bool>,
        out: Vec<String>,
    }

    impl Row {
        fn parse(line: &str) -> Row {
            let cells: Vec<String> = line
                .trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect();
            assert_eq!(cells.len(), 11, "row `{line}` has {} cells", cells.len());
            Row {
                text: line.into(),
                copies: cell(&cells[0], &COPIES, |v| match v {
                    "both valid" => Some(Copies::BothValid),
                    "one damaged" => Some(Copies::OneDamaged),
                    _ => None,
                }),
                states: cell(&cells[1], &STATES, |v| match v {
                    "clean" => Some(HeaderState::Clean),
                    "open" => Some(HeaderState::Open),
                    "stale" => Some(HeaderState::Stale),
                    _ => None,
                }),
                unverified: cell(&cells[2], &[false, true], flag),
                lines: cell(&cells[3], &[false, true], flag),
                modes: cell(&cells[4], &MODES, Mode::parse),
                read_only: cell(&cells[5], &[false, true], |v| match v {
                    "read-only" => Some(true),
                    "read-write" => Some(false),
                    _ => None,
                }),
                out: cells[6..].to_vec(),
            }
        }

        fn covers(&self, c: &OpenCase) -> bool {
            self.copies.contains(&c.copies)
                && self.states.contains(&c.state)
                && self.unverified.contains(&c.unverified)
                && self.lines.contains(&c.lines_valid)
                && self.modes.contains(&c.mode)
                && self.read_only.contains(&c.read_only)
        }

        /// The plan this row states for `c`, without the trust (the trust table's part).
        fn plan(&self, c: &OpenCase) -> (Session, Work, bool, bool, bool) {
            let session = match self.out[0].as_str() {
                "none" => Session::None,
                "stale, line flag cleared" => Session::Stale,
                "open, line flag cleared" => Session::OpenLinesCleared,
                "open, line flag kept" => Session::OpenLinesKept,
                s => panic!("first write `{s}`"),
            };
            let work = match self.out[1].as_str() {
                "nothing" => Work::Nothing,
                "resync" => Work::Resync,
                "resync with lines" => Work::ResyncWithLines,
                "lines from verified pages" => Work::LinesFromVerifiedPages,
                w => panic!("then `{w}`"),
            };
            (
                session,
                work,
                thread(&self.out[2], false),
                thread(&self.out[3], c.background),
                thread(&self.out[4], c.scrub),
            )
        }
    }

    fn doc_rows() -> Vec<Row> {
        let doc = include_str!("../../../docs/integrity.md");
        let rows: Vec<Row> = doc
            .lines()
            .skip_while(|l| !l.contains("<!-- open-table -->"))
            .skip(3)
            .take_while(|l| l.starts_with('|'))
            .map(Row::parse)
            .collect();
        assert!(!rows.is_empty(), "docs/integrity.md lacks the open table");
        rows
    }

    /// Every combination of the inputs, against the table in `docs/integrity.md`: each is
    /// covered by some row, and every row that covers it states what the function decides.
    #[test]
    fn every_case_against_the_doc_table() {
        let rows = doc_rows();
        let cases = every_case();
        assert_eq!(cases.len(), 2 * 3 * 2 * 2 * 4 * 2 * 2 * 2);
        let mut used = vec![false; rows.len()];
        for c in &cases {
            let plan = decide(*c);
            let got = (
                plan.session,
                plan.work,
                plan.arm_tracker,
                plan.updater,
                plan.scrubber,
            );
            let mut matched = 0;
            for (i, row) in rows.iter().enumerate() {
                if row.covers(c) {
                    matched += 1;
                    used[i] = true;
                    assert_eq!(got, row.plan(c), "{c:?} against row {}", row.text);
                }
            }
            assert!(matched > 0, "no row of the table covers {c:?}");
        }
        for (row, used) in rows.iter().zip(used) {
            assert!(used, "row {} covers no case", row.text);
        }
    }

    /// The trust the plan carries is the trust table's, for every case.
    #[test]
    fn the_plan_carries_the_trust_tables_basis() {
        for c in every_case() {
            let flags_in_force = if c.unverified { flags::UNVERIFIED } else { 0 };
            let want = crate::trust::decide(
                c.copies == Copies::OneDamaged,
                c.state.code(),
                flags_in_force,
            );
            assert_eq!(decide(c).trust, want, "{c:?}");
        }
    }

    /// What the table says in prose: a resync happens exactly in a read-write open of an
    /// unclean region in a mode that keeps redundancy, and nothing is written read-only.
    #[test]
    fn resync_only_for_unclean_read_write_opens() {
        for c in every_case() {
            let p = decide(c);
            let resyncs = matches!(p.work, Work::Resync | Work::ResyncWithLines);
            let unclean = c.copies == Copies::OneDamaged || c.state != HeaderState::Clean;
            assert_eq!(
                resyncs,
                !c.read_only && unclean && c.mode != Mode::Off,
                "{c:?}"
            );
            if c.read_only {
                assert_eq!((p.session, p.work), (Session::None, Work::Nothing), "{c:?}");
            }
        }
    }
}
