//! The detection matrix of `docs/integrity.md`: every fault kind injected into a page that is
//! clean (redundancy current) and into one written since the last pass, 1,000 times per cell,
//! in lazy mode.
//!
//! Each trial starts from the same protected region (64 pages, stripes of 4) and:
//!
//! 1. (written column) writes the target page through the API, so it is written and not yet
//!    covered;
//! 2. injects the fault behind every layer's back (`Medium::inject`), as firmware would;
//! 3. lets time pass as a user would see it: an update pass, then a scrub, then a repair;
//! 4. classifies the outcome against what the program meant to store ("intended"):
//!    - **detected**: the pass or the scrub reported the fault before the repair;
//!    - **repaired**: after the repair, data and all redundancy are byte-identical to the
//!      intended data and the redundancy an independent computation gives for it;
//!    - **silent**: not detected, and the data or redundancy is wrong afterwards;
//!    - **false alarm**: some report names a page, stripe or block the fault did not touch.
//!
//! The faults: a lost write is a write the program made and redundancy covered (clean) or not
//! yet covered (written) that the device then dropped (the page gets its old bytes back); a
//! misdirected write is a write meant for page Q (another stripe) that landed on the target
//! page instead, Q keeping its old bytes.
//!
//! The rendered table must equal the one in `docs/integrity.md` (the trials are seeded, so the
//! matrix is deterministic); run with `KAVACH_BLESS=1` to rewrite the document's table.

mod support;

use integrity::{FindingKind, Mode};
use pmem::Medium;
use pmem::rng::SplitMix64;
use std::collections::HashSet;
use support::*;

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

fn trial(base: &[u8], fault: Fault, written: bool, seed: u64) -> Cell {
    let mut rng = SplitMix64::new(seed);
    let (pool, prot, _) = open_mode(sim_of(base.to_vec()), Mode::Lazy);
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
    }
    finish(&pool, &prot, intended, touched)
}

fn finish(
    pool: &pmem::Pool<Sim>,
    prot: &integrity::Protected<Sim>,
    intended: Vec<u8>,
    touched: HashSet<(FindingKind, u64)>,
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
    let geo = prot.geometry();
    let exact = support::data_of(prot) == intended
        && stored_redundancy(pool, &geo) == expected_redundancy(&pool.uuid(), &geo, &intended);
    Cell {
        detected: detected as u64,
        repaired: exact as u64,
        silent: (!detected && !exact) as u64,
        false_alarm: false_alarm as u64,
    }
}

const FAULTS: [Fault; 8] = [
    Fault::BitFlip(1),
    Fault::BitFlip(2),
    Fault::BitFlip(8),
    Fault::BitFlip(64),
    Fault::LostWrite,
    Fault::Misdirected,
    Fault::ChecksumBlock,
    Fault::ParityPage,
];

fn render(rows: &[(Fault, Cell, Cell)]) -> String {
    let fmt = |c: &Cell| {
        format!(
            "{} / {} / {} / {}",
            c.detected, c.repaired, c.silent, c.false_alarm
        )
    };
    let mut out = String::from(
        "| fault | clean page: detected / repaired / silent / false alarm | written since last pass: detected / repaired / silent / false alarm |\n| --- | --- | --- |\n",
    );
    for (f, clean, written) in rows {
        out += &format!("| {} | {} | {} |\n", f.label(), fmt(clean), fmt(written));
    }
    out
}

const BEGIN: &str = "<!-- matrix:begin (written by crates/integrity/tests/matrix.rs) -->\n";
const END: &str = "<!-- matrix:end -->";

#[test]
fn detection_matrix_matches_docs_integrity_md() {
    let base = image(PAGES, K as u32, Mode::Lazy, 0x5eed);
    let mut rows = Vec::new();
    for (i, fault) in FAULTS.into_iter().enumerate() {
        let mut cells = [Cell::default(); 2];
        for (c, written) in [false, true].into_iter().enumerate() {
            for t in 0..TRIALS {
                let seed = (i as u64) << 40 | (c as u64) << 32 | t;
                let r = trial(&base, fault, written, seed);
                let cell = &mut cells[c];
                cell.detected += r.detected;
                cell.repaired += r.repaired;
                cell.silent += r.silent;
                cell.false_alarm += r.false_alarm;
            }
        }
        // The bar for clean pages, whatever the document says.
        assert_eq!(
            cells[0].detected, TRIALS,
            "{fault:?}: clean pages all detected"
        );
        assert_eq!(
            cells[0].repaired, TRIALS,
            "{fault:?}: clean pages all repaired"
        );
        assert_eq!(cells[0].false_alarm, 0, "{fault:?}: no false alarm");
        rows.push((fault, cells[0], cells[1]));
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
