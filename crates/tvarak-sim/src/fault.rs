//! Faults at the DIMM and the fault-coverage matrix, measured on the functional engine.
//!
//! The faults are the firmware bugs TVARAK targets (and the bit flip device ECC targets),
//! acting on data lines only:
//!
//! - **lost write**: the DIMM acknowledges a write and does not apply it;
//! - **misdirected write**: the write lands on another line (both lines are then wrong);
//! - **misdirected read**: a read returns another line's bytes (and that line's ECC); the
//!   lines at rest are right;
//! - **bit flip**: one bit of a line at rest changes; the ECC stored with it does not.
//!
//! [`fault_matrix`] runs, for every fault and every design, seeded scenarios on an
//! [`Engine`] in the paper's layout, and reports what each design's own mechanism found:
//! on the first read of each damaged line, by a scrub right after the fault, by a scrub after
//! the lazy design's period (its update pass), and whether the design's repair left the
//! intended bytes. Nothing in the matrix is written down by hand: every entry counts runs.
//!
//! Each design is run with only its own checks, so a column shows what that design adds:
//! device ECC runs only in the "device ECC only" design; the other designs run with it off.
//! Device ECC is modelled as a CRC-32C stored with the line, written and read in the same
//! device operation, correcting one flipped bit and detecting more (real ECC codes differ in
//! strength, not in the property that matters here: they travel with the data).

use crate::engine::{Checks, Detected, Engine, LINE, PAGE, PassReads, Upkeep};
use crate::error::SimError;
use pmem::rng::SplitMix64;
use std::collections::BTreeSet;

pub use crate::engine::Fault;

/// The kinds of fault in the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum FaultKind {
    /// See [`Fault::LostWrite`].
    LostWrite,
    /// See [`Fault::MisdirectedWrite`].
    MisdirectedWrite,
    /// See [`Fault::MisdirectedRead`].
    MisdirectedRead,
    /// See [`Fault::BitFlip`].
    BitFlip,
}

impl FaultKind {
    /// All four, in the matrix's order.
    pub const ALL: [FaultKind; 4] = [
        FaultKind::LostWrite,
        FaultKind::MisdirectedWrite,
        FaultKind::MisdirectedRead,
        FaultKind::BitFlip,
    ];

    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::LostWrite => "lost write",
            FaultKind::MisdirectedWrite => "misdirected write",
            FaultKind::MisdirectedRead => "misdirected read",
            FaultKind::BitFlip => "bit flip",
        }
    }
}

/// The designs compared in the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Protection {
    /// Device ECC only: checked on every read and by a patrol scrub; corrects one bit.
    DeviceEcc,
    /// TVARAK: line checksums verified on every fill; parity; page checksums for scrubs and to
    /// verify peers during recovery.
    Tvarak,
    /// TxB-Object-Csums: per-object checksums (objects of one line here) and parity updated at
    /// commit; reads are not verified, only a scrub checks.
    TxbObject,
    /// TxB-Page-Csums: page checksums and parity updated at commit; reads are not verified,
    /// only a scrub checks.
    TxbPage,
    /// Vilamb-like: page checksums and parity recomputed by a pass every period; reads are not
    /// verified; a scrub checks pages not written since the pass. Here the damaged lines were
    /// still in the CPU caches when the pass read them, so it covered the bytes the program
    /// wrote.
    Vilamb,
    /// Vilamb-like, the lines evicted before the pass: it reads them from the DIMMs and covers
    /// whatever a fault left there.
    VilambEvicted,
}

impl Protection {
    /// All six, in the matrix's order.
    pub const ALL: [Protection; 6] = [
        Protection::DeviceEcc,
        Protection::Tvarak,
        Protection::TxbObject,
        Protection::TxbPage,
        Protection::Vilamb,
        Protection::VilambEvicted,
    ];

    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            Protection::DeviceEcc => "device ECC only",
            Protection::Tvarak => "TVARAK",
            Protection::TxbObject => "TxB-Object-Csums",
            Protection::TxbPage => "TxB-Page-Csums",
            Protection::Vilamb => "Vilamb-like (pass reads cached lines)",
            Protection::VilambEvicted => "Vilamb-like (pass reads the DIMM)",
        }
    }

    fn checks(self) -> Checks {
        Checks {
            device_ecc: self == Protection::DeviceEcc,
            line_sums: self == Protection::Tvarak,
        }
    }

    fn upkeep(self) -> Upkeep {
        match self {
            // The pass runs when the scenario says the period is over.
            Protection::Vilamb => Upkeep::Lazy {
                period_writes: u64::MAX,
                reads: PassReads::Cache,
            },
            Protection::VilambEvicted => Upkeep::Lazy {
                period_writes: u64::MAX,
                reads: PassReads::Dimm,
            },
            _ => Upkeep::Eager,
        }
    }
}

/// How many trials had every damaged line found (or fixed), some of them, or none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Tally {
    /// Trials where every damaged line was.
    pub all: u32,
    /// Trials where some but not every damaged line was.
    pub some: u32,
    /// Trials where none was.
    pub none: u32,
}

impl Tally {
    fn add(&mut self, hit: usize, of: usize) {
        if hit == of {
            self.all += 1;
        } else if hit == 0 {
            self.none += 1;
        } else {
            self.some += 1;
        }
    }

    /// Every trial, every line.
    pub fn always(&self) -> bool {
        self.some == 0 && self.none == 0
    }

    /// No trial, no line.
    pub fn never(&self) -> bool {
        self.all == 0 && self.some == 0
    }

    fn cell(&self) -> String {
        if self.always() {
            "yes".into()
        } else if self.never() {
            "no".into()
        } else if self.all == 0 && self.none == 0 {
            "partly".into()
        } else {
            format!("{}/{}/{}", self.all, self.some, self.none)
        }
    }
}

/// One cell of the matrix: a fault under a design, over the trials.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Cell {
    /// The fault.
    pub fault: FaultKind,
    /// The design.
    pub design: Protection,
    /// Damaged lines per trial (2 for a misdirected write: the line meant and the line hit).
    pub lines: u32,
    /// Found on the first read of each damaged line (device ECC correcting a bit counts).
    pub on_first_read: Tally,
    /// First reads that returned wrong bytes without a word (silent corruption).
    pub wrong_bytes_returned: Tally,
    /// Found by a scrub run right after the fault (for Vilamb: inside the window).
    pub by_scrub: Tally,
    /// Found by a scrub after the lazy design's update pass (others: no pass; same as above).
    pub by_scrub_after_period: Tally,
    /// Found by any of the above and then repaired to the intended bytes.
    pub corrected: Tally,
}

/// The fault-coverage matrix.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Matrix {
    /// Seeded trials per cell.
    pub trials: u32,
    /// Faults x designs, fault-major.
    pub cells: Vec<Cell>,
}

impl Matrix {
    /// The cell of `fault` under `design`.
    pub fn cell(&self, fault: FaultKind, design: Protection) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.fault == fault && c.design == design)
    }

    /// A Markdown table: one row per fault and design. "yes" means every damaged line in
    /// every trial, "no" none, "partly" some lines in every trial, otherwise the number of
    /// trials with all / some / none of the lines.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "| fault | design | found on first read | wrong bytes returned | found by scrub | found by scrub after the period | corrected |\n\
             | --- | --- | --- | --- | --- | --- | --- |\n",
        );
        for c in &self.cells {
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                c.fault.name(),
                c.design.name(),
                c.on_first_read.cell(),
                c.wrong_bytes_returned.cell(),
                c.by_scrub.cell(),
                c.by_scrub_after_period.cell(),
                c.corrected.cell()
            ));
        }
        s
    }
}

/// DIMMs and data pages of the matrix's engine.
pub const MATRIX_DIMMS: u16 = 4;
/// See [`MATRIX_DIMMS`].
pub const MATRIX_PAGES: u64 = 24;

fn random_line(rng: &mut SplitMix64) -> [u8; LINE] {
    let mut l = [0u8; LINE];
    for c in l.chunks_mut(8) {
        c.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    l
}

/// The lines a scrub by `design` reports, as line addresses.
fn scrub(e: &Engine, design: Protection) -> BTreeSet<u64> {
    let lines = e.bytes() / LINE as u64;
    let per_page = (PAGE / LINE) as u64;
    let dirty: BTreeSet<u64> = e.dirty_pages().collect();
    let mut found = BTreeSet::new();
    match design {
        Protection::DeviceEcc => found.extend((0..lines).map(|n| n * 64).filter(|&a| !e.ecc_ok(a))),
        Protection::Tvarak | Protection::TxbObject => {
            found.extend((0..lines).map(|n| n * 64).filter(|&a| !e.line_ok(a)))
        }
        Protection::TxbPage | Protection::Vilamb | Protection::VilambEvicted => {
            for p in (0..e.pages()).filter(|p| !dirty.contains(p) && !e.page_ok(*p)) {
                found.extend((p * per_page..(p + 1) * per_page).map(|n| n * 64));
            }
        }
    }
    found
}

/// The design's repair of what it found; errors (a repair that cannot be proven) leave the
/// line as it is.
fn repair(e: &mut Engine, design: Protection, found: &BTreeSet<u64>) {
    match design {
        Protection::DeviceEcc => {
            for &a in found {
                e.ecc_repair(a);
            }
        }
        Protection::Tvarak | Protection::TxbObject => {
            for &a in found {
                let _ = e.recover_line(a);
            }
        }
        Protection::TxbPage | Protection::Vilamb | Protection::VilambEvicted => {
            let pages: BTreeSet<u64> = found.iter().map(|a| a / PAGE as u64).collect();
            for p in pages {
                let _ = e.recover_page(p);
            }
        }
    }
}

/// One trial of `fault` under `design`, seeded: returns per damaged line whether it was found
/// on its first read, returned wrong bytes silently, found by the scrub now, found by the
/// scrub after the period, and corrected.
fn trial(fault: FaultKind, design: Protection, seed: u64) -> Result<Vec<[bool; 5]>, SimError> {
    let mut rng = SplitMix64::new(seed);
    let mut init = vec![0u8; MATRIX_PAGES as usize * PAGE];
    for c in init.chunks_mut(8) {
        c.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    let mut e = Engine::paper_layout(MATRIX_DIMMS, MATRIX_PAGES, &init)?
        .with_checks(design.checks())
        .with_upkeep(design.upkeep())?;
    let lines = MATRIX_PAGES * (PAGE / LINE) as u64;
    // Some ordinary traffic first, then the period ends: all redundancy is current.
    for _ in 0..64 {
        let a = rng.below(lines) * 64;
        e.writeback(a, &random_line(&mut rng))?;
    }
    e.pass();
    let target = rng.below(lines) * 64;
    // The other line involved: in another stripe, so that parity can rebuild both.
    let k = e.stripe_pages();
    let other = loop {
        let a = rng.below(lines) * 64;
        if a / PAGE as u64 / k != target / PAGE as u64 / k {
            break a;
        }
    };
    let damaged = match fault {
        FaultKind::LostWrite => {
            e.inject(Fault::LostWrite { line: target });
            e.writeback(target, &random_line(&mut rng))?;
            vec![target]
        }
        FaultKind::MisdirectedWrite => {
            e.inject(Fault::MisdirectedWrite {
                line: target,
                to: other,
            });
            e.writeback(target, &random_line(&mut rng))?;
            vec![target, other]
        }
        FaultKind::MisdirectedRead => {
            e.inject(Fault::MisdirectedRead {
                line: target,
                from: other,
            });
            vec![target]
        }
        FaultKind::BitFlip => {
            e.inject(Fault::BitFlip {
                line: target,
                bit: rng.below(512) as u16,
            });
            vec![target]
        }
    };
    let intended = |e: &Engine, a: u64| e.intended_data()[a as usize..a as usize + LINE].to_vec();
    let mut out = Vec::new();
    let mut found: BTreeSet<u64> = BTreeSet::new();
    for &a in &damaged {
        let corrected_before = e.stats().ecc_corrected;
        let r = e.read_line(a);
        let hit = r.is_err() || e.stats().ecc_corrected > corrected_before;
        let wrong = matches!(&r, Ok(b) if b[..] != intended(&e, a)[..]);
        if let Err(Detected::OutOfRange { .. }) = r {
            return Err(SimError::Invalid {
                what: "matrix line".into(),
                expected: "a line of the engine".into(),
                found: format!("{a:#x}"),
            });
        }
        if hit {
            found.insert(a);
        }
        out.push([hit, wrong, false, false, false]);
    }
    let now = scrub(&e, design);
    e.pass();
    let later = scrub(&e, design);
    for (i, &a) in damaged.iter().enumerate() {
        out[i][2] = now.contains(&a);
        out[i][3] = later.contains(&a);
    }
    found.extend(now.iter().chain(later.iter()));
    // Repair the damaged lines found (and whatever else the scrubs reported).
    repair(&mut e, design, &found);
    for (i, &a) in damaged.iter().enumerate() {
        let fixed = e.device_data()[a as usize..a as usize + LINE] == intended(&e, a)[..];
        out[i][4] = found.contains(&a) && fixed;
    }
    Ok(out)
}

/// The fault-coverage matrix: `trials` seeded scenarios (from `seed`) for every fault under
/// every design, on an engine in the paper's layout ([`MATRIX_DIMMS`] DIMMs,
/// [`MATRIX_PAGES`] pages). Every trial writes some lines, ends the period (all redundancy
/// current), then: a lost or misdirected write hits the next write of a random line; a
/// misdirected read hits its next read (returning a line of another stripe); a bit flips at
/// rest in it. Then each damaged line is read once, the design scrubs, the period ends
/// (Vilamb's pass), it scrubs again and repairs what it found.
pub fn fault_matrix(seed: u64, trials: u32) -> Result<Matrix, SimError> {
    if trials == 0 {
        return Err(SimError::Invalid {
            what: "trials".into(),
            expected: "at least 1".into(),
            found: "0".into(),
        });
    }
    let mut cells = Vec::new();
    for fault in FaultKind::ALL {
        for design in Protection::ALL {
            let mut c = Cell {
                fault,
                design,
                lines: 0,
                on_first_read: Tally::default(),
                wrong_bytes_returned: Tally::default(),
                by_scrub: Tally::default(),
                by_scrub_after_period: Tally::default(),
                corrected: Tally::default(),
            };
            for t in 0..trials {
                // The same scenario for every design: the seed depends on fault and trial.
                let s = seed ^ (t as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ fault as u64;
                let r = trial(fault, design, s)?;
                c.lines = r.len() as u32;
                let count = |j: usize| r.iter().filter(|x| x[j]).count();
                c.on_first_read.add(count(0), r.len());
                c.wrong_bytes_returned.add(count(1), r.len());
                c.by_scrub.add(count(2), r.len());
                c.by_scrub_after_period.add(count(3), r.len());
                c.corrected.add(count(4), r.len());
            }
            cells.push(c);
        }
    }
    Ok(Matrix { trials, cells })
}
