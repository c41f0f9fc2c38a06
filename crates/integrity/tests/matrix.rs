//! The detection matrix of `docs/integrity.md`: every fault kind injected into a page, 1,000
//! times per cell, in four settings: lazy mode with the page clean (redundancy current), lazy
//! mode with the page written since the last pass, eager mode, and txb-page mode (in the last
//! two a write through the API leaves its redundancy current, so there is no second column).
//!
//! Each trial starts from the same protected region (64 pages, stripes of 4) and:
//!
//! 1. (lazy, written column) writes the target page through the API, so it is written and not
//!    yet covered;
//! 2. injects the fault behind every layer's back (`Medium::inject`), as firmware would, or,
//!    for a misdirected read, makes every read of the target page return another page's bytes
//!    (`pmem::fault::MisdirectedReads`) until the end of the trial's repair;
//! 3. lets time pass as a user would see it: in eager mode a read of the page through the API
//!    (which must return the intended bytes or a typed error, never anything else), then an
//!    update pass, a scrub and a repair;
//! 4. classifies the outcome against what the program meant to store ("intended"):
//!    - **detected**: the read, the pass or the scrub reported the fault before the repair;
//!    - **repaired**: after the repair (and the end of a misdirection), data and all
//!      redundancy are byte-identical to the intended data and the redundancy an independent
//!      computation gives for it, and a scrub finds nothing (which also checks line
//!      checksums in eager mode);
//!    - **silent**: not detected, and the data or redundancy is wrong afterwards;
//!    - **false alarm**: some report names a page, stripe or block the fault did not touch.
//!
//! The faults: a lost write is a write the program made and redundancy covered (clean) or not
//! yet covered (written) that the device then dropped (the page gets its old bytes back); a
//! misdirected write is a write meant for page Q (another stripe) that landed on the target
//! page instead, Q keeping its old bytes; a misdirected read returns page Q's bytes (another
//! stripe) for the target page while the target keeps its own.
//!
//! The rendered table must equal the one in `docs/integrity.md` (the trials are seeded, so the
//! matrix is deterministic); run with `KAVACH_BLESS=1` to rewrite the document's table.

mod support;

use integrity::{FindingKind, IntegrityError, Mode, OpenOptions, Protected};
use pmem::fault::MisdirectedReads;
use pmem::rng::SplitMix64;
use pmem::{Medium, Pool};
use std::collections::HashSet;
use std::sync::Arc;
use support::*;

/// Every trial reads through this; only misdirected-read trials set a redirect.
type Mis = Arc<MisdirectedReads<Sim>>;

const PAGES: u64 = 64;
const K: u64 = 4;
const TRIALS: u64 = 1000;

#[derive(Debug, Clone, Copy)]
enum Fault {
    BitFlip(u32),
    LostWrite,
    Misdirected,
    ChecksumBlock,
    ParityPage,
    MisdirectedRead,
}

impl Fault {
    fn label(self) -> String {
        match self {
            Fault::BitFlip(1) => "bit flip, 1 bit".into(),
            Fault::BitFlip(n) => format!("bit flip, {n} bits"),
            Fault::LostWrite => "lost write".into(),
            Fault::Misdirected => "misdirected write".into(),
            Fault::ChecksumBlock => "corrupt checksum block (1-8 bits)".into(),
            Fault::ParityPage => "corrupt parity page (1-8 bits)".into(),
            Fault::MisdirectedRead => {
                "misdirected read (every read of the page, until after the repair)".into()
            }
        }
    }
}

/// The setting of a trial: the mode, and (lazy) whether the page was written since the pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Column {
    LazyClean,
    LazyWritten,
    Eager,
    TxbPage,
}

const COLUMNS: [Column; 4] = [
    Column::LazyClean,
    Column::LazyWritten,
    Column::Eager,
    Column::TxbPage,
];

impl Column {
    fn mode(self) -> Mode {
        match self {
            Column::LazyClean | Column::LazyWritten => Mode::Lazy,
            Column::Eager => Mode::Eager,
            Column::TxbPage => Mode::TxbPage,
        }
    }
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Cell {
    detected: u64,
    repaired: u64,
    silent: u64,
    false_alarm: u64,
}

fn random_page(rng: &mut SplitMix64) -> Vec<u8> {
    let mut b = vec![0u8; PAGE];
    fill(rng, &mut b);
    b
}

fn trial(base: &[u8], fault: Fault, column: Column, seed: u64) -> Cell {
    let mut rng = SplitMix64::new(seed);
    let written = column == Column::LazyWritten;
    let mis: Mis = Arc::new(MisdirectedReads::new(sim_of(base.to_vec())));
    let pool = Pool::open_medium(mis.clone(), &pmem::OpenOptions::default()).unwrap();
    let opts = OpenOptions {
        mode: Some(column.mode()),
        ..Default::default()
    };
    let (prot, _) = integrity::open_in_pool(&pool, "data", opts, &mut |_, _| {}).unwrap();
    let geo = prot.geometry();
    let m = &**prot.medium();
    let data_at = prot.data_offset() as usize;
    let meta_at = pool.region("data.integrity").unwrap().offset as usize;
    let page_at = |p: u64| data_at + p as usize * PAGE;
    let read_page = |p: u64| {
        let mut b = vec![0u8; PAGE];
        m.read(page_at(p), &mut b);
        b
    };
    let p = rng.below(PAGES);
    let s = p / K;
    let before = read_page(p);
    // What the fault may legitimately be reported as.
    let mut touched: HashSet<(FindingKind, u64)> = HashSet::new();
    touched.insert((FindingKind::DataPage, p));
    // The program's writes.
    if written {
        prot.write(p * PAGE as u64, &random_page(&mut rng)).unwrap();
    }
    let mut misdirected = None;
    match fault {
        Fault::LostWrite if !written => {
            prot.write(p * PAGE as u64, &random_page(&mut rng)).unwrap();
            prot.run_pass().unwrap();
        }
        Fault::Misdirected => {
            let q = (p + K * (1 + rng.below(PAGES / K - 1))) % PAGES;
            touched.insert((FindingKind::DataPage, q));
            let q_old = read_page(q);
            let x = random_page(&mut rng);
            prot.write(q * PAGE as u64, &x).unwrap();
            if !written {
                prot.run_pass().unwrap();
            }
            misdirected = Some((q, q_old, x));
        }
        _ => {}
    }
    let intended = support::data_of(&prot);
    // The fault, behind every layer's back.
    let mut misread = None;
    match fault {
        Fault::BitFlip(bits) => {
            pmem::fault::flip_bits(m, page_at(p), PAGE, bits, rng.next_u64()).unwrap();
        }
        Fault::LostWrite => m.inject(page_at(p), &before).unwrap(),
        Fault::Misdirected => {
            let (q, q_old, x) = misdirected.unwrap();
            m.inject(page_at(p), &x).unwrap();
            m.inject(page_at(q), &q_old).unwrap();
        }
        Fault::ChecksumBlock => {
            let b = p / 16;
            touched.insert((FindingKind::ChecksumBlock, b));
            for q in b * 16..(b + 1) * 16 {
                touched.insert((FindingKind::DataPage, q));
            }
            let at = meta_at + geo.pagesums_at as usize + b as usize * 64;
            let bits = 1 + rng.below(8) as u32;
            pmem::fault::flip_bits(m, at, 64, bits, rng.next_u64()).unwrap();
        }
        Fault::ParityPage => {
            touched.insert((FindingKind::ParityPage, s));
            let at = meta_at + geo.parity_at as usize + s as usize * PAGE;
            let bits = 1 + rng.below(8) as u32;
            pmem::fault::flip_bits(m, at, PAGE, bits, rng.next_u64()).unwrap();
        }
        Fault::MisdirectedRead => {
            let q = (p + K * (1 + rng.below(PAGES / K - 1))) % PAGES;
            let (from, to) = ((page_at(p) / PAGE) as u64, (page_at(q) / PAGE) as u64);
            mis.misdirect(from, to, None).unwrap();
            misread = Some(from);
        }
    }
    if column == Column::Eager {
        // The verified read: the intended bytes or a typed refusal, never anything else.
        let mut b = vec![0u8; PAGE];
        // It refuses exactly when reads of the page return another page's bytes: every other
        // fault here leaves what parity needs to rebuild the page.
        let misread = matches!(fault, Fault::MisdirectedRead);
        match prot.read(p * PAGE as u64, &mut b) {
            Ok(()) => assert!(
                !misread && b == intended[p as usize * PAGE..(p as usize + 1) * PAGE],
                "{fault:?}: eager read served wrong bytes for page {p}"
            ),
            Err(IntegrityError::Unrepairable { page, .. }) => {
                assert!(misread, "{fault:?}: eager read refused page {page}");
                assert_eq!(page, p);
            }
            Err(e) => panic!("{fault:?}: eager read failed with {e}"),
        }
    }
    finish(&pool, &prot, intended, touched, || {
        if let Some(page) = misread {
            mis.clear(page);
        }
    })
}

fn finish(
    pool: &Pool<Mis>,
    prot: &Protected<Mis>,
    intended: Vec<u8>,
    touched: HashSet<(FindingKind, u64)>,
    end_of_fault: impl FnOnce(),
) -> Cell {
    prot.run_pass().unwrap();
    let scrub = prot.scrub(&mut |_, _| {}).unwrap();
    let mut reports: Vec<_> = prot.findings();
    reports.extend(scrub.findings.iter().cloned());
    let detected = reports.iter().any(|f| touched.contains(&(f.kind, f.index)));
    let false_alarm = reports
        .iter()
        .any(|f| !touched.contains(&(f.kind, f.index)));
    prot.repair(&mut |_, _| {}).unwrap();
    end_of_fault();
    let geo = prot.geometry();
    let exact = support::data_of(prot) == intended
        && stored_redundancy(pool, &geo) == expected_redundancy(&pool.uuid(), &geo, &intended)
        && prot.scrub(&mut |_, _| {}).unwrap().findings.is_empty();
    Cell {
        detected: detected as u64,
        repaired: exact as u64,
        silent: (!detected && !exact) as u64,
        false_alarm: false_alarm as u64,
    }
}

const FAULTS: [Fault; 9] = [
    Fault::BitFlip(1),
    Fault::BitFlip(2),
    Fault::BitFlip(8),
    Fault::BitFlip(64),
    Fault::LostWrite,
    Fault::Misdirected,
    Fault::ChecksumBlock,
    Fault::ParityPage,
    Fault::MisdirectedRead,
];

fn render(rows: &[(Fault, [Cell; 4])]) -> String {
    let fmt = |c: &Cell| {
        format!(
            "{} / {} / {} / {}",
            c.detected, c.repaired, c.silent, c.false_alarm
        )
    };
    let mut out = String::from(
        "| fault | lazy, clean page | lazy, written since last pass | eager | txb-page |\n| --- | --- | --- | --- | --- |\n",
    );
    for (f, cells) in rows {
        out += &format!(
            "| {} | {} | {} | {} | {} |\n",
            f.label(),
            fmt(&cells[0]),
            fmt(&cells[1]),
            fmt(&cells[2]),
            fmt(&cells[3])
        );
    }
    out
}

const BEGIN: &str = "<!-- matrix:begin (written by crates/integrity/tests/matrix.rs) -->\n";
const END: &str = "<!-- matrix:end -->";

#[test]
fn detection_matrix_matches_docs_integrity_md() {
    let lazy_base = image(PAGES, K as u32, Mode::Lazy, 0x5eed);
    let mut rows = Vec::new();
    for (i, fault) in FAULTS.into_iter().enumerate() {
        let mut cells = [Cell::default(); 4];
        // Trials are independent (each has its own seed and medium), so they run on every
        // CPU; the sums do not depend on how they are split.
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        for (c, column) in COLUMNS.into_iter().enumerate() {
            let parts: Vec<Cell> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..workers)
                    .map(|w| {
                        let base = &lazy_base;
                        s.spawn(move || {
                            let mut part = Cell::default();
                            for t in (w..TRIALS).step_by(workers as usize) {
                                let seed = (i as u64) << 40 | (c as u64) << 32 | t;
                                let r = trial(base, fault, column, seed);
                                part.detected += r.detected;
                                part.repaired += r.repaired;
                                part.silent += r.silent;
                                part.false_alarm += r.false_alarm;
                            }
                            part
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let cell = &mut cells[c];
            for part in parts {
                cell.detected += part.detected;
                cell.repaired += part.repaired;
                cell.silent += part.silent;
                cell.false_alarm += part.false_alarm;
            }
        }
        // The bar for pages whose redundancy is current, whatever the document says.
        for (c, column) in COLUMNS.into_iter().enumerate() {
            if column == Column::LazyWritten {
                continue;
            }
            assert_eq!(
                cells[c].detected, TRIALS,
                "{fault:?} {column:?}: all detected"
            );
            assert_eq!(
                cells[c].repaired, TRIALS,
                "{fault:?} {column:?}: all repaired"
            );
            assert_eq!(
                cells[c].false_alarm, 0,
                "{fault:?} {column:?}: no false alarm"
            );
        }
        rows.push((fault, cells));
    }
    let table = render(&rows);
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/integrity.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_default();
    let current = doc
        .find(BEGIN)
        .and_then(|a| doc[a..].find(END).map(|b| (a, a + b)))
        .map(|(a, b)| &doc[a + BEGIN.len()..b]);
    if std::env::var_os("KAVACH_BLESS").is_some() {
        let (a, b) = doc
            .find(BEGIN)
            .and_then(|a| doc[a..].find(END).map(|b| (a, a + b)))
            .expect("docs/integrity.md has the matrix markers");
        let new = format!("{}{BEGIN}{table}{}", &doc[..a], &doc[b..]);
        std::fs::write(&path, new).unwrap();
        return;
    }
    assert_eq!(
        current,
        Some(table.as_str()),
        "docs/integrity.md's matrix differs from what this test measures; rerun with KAVACH_BLESS=1 and review the change:\n{table}"
    );
}
