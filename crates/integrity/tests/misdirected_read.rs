//! Misdirected reads (`pmem::fault::MisdirectedReads`): a read of data page A returns page B's
//! bytes while A still holds its own. Nothing stored is wrong, so nothing may be "repaired"
//! into it; what must hold:
//!
//! - eager mode's verified read never serves B's bytes for A: through a persistent
//!   misdirection it refuses with a typed error (`Unrepairable`, naming the page); through a
//!   transient one it re-reads and serves A's own bytes;
//! - an eager write over such a page is refused before anything is stored;
//! - the scrubber reports page A, and only page A, and changes no byte;
//! - a repair does not claim to have rebuilt A (the rebuilt page does not read back), and
//!   leaves A's bytes and every checksum as they were: once the misdirection ends the region
//!   scrubs clean.

mod support;

use integrity::{FindingKind, IntegrityError, Mode, OpenOptions, Protected};
use pmem::fault::MisdirectedReads;
use pmem::{Medium, Pool};
use std::sync::Arc;
use support::*;

type Mis = Arc<MisdirectedReads<Sim>>;

const PAGES: u64 = 64;
/// The page whose reads go astray, and the page they read instead (another stripe).
const A: u64 = 5;
const B: u64 = 40;

struct Setup {
    sim: Sim,
    mis: Mis,
    _pool: Pool<Mis>,
    prot: Protected<Mis>,
}

impl Setup {
    fn new(mode: Mode) -> Setup {
        let sim = sim_of(image(PAGES, 4, Mode::Lazy, 7));
        let mis = Arc::new(MisdirectedReads::new(sim.clone()));
        let pool = Pool::open_medium(mis.clone(), &pmem::OpenOptions::default()).unwrap();
        let opts = OpenOptions {
            mode: Some(mode),
            ..Default::default()
        };
        let (prot, _) = integrity::open_in_pool(&pool, "data", opts, &mut |_, _| {}).unwrap();
        Setup {
            sim,
            mis,
            _pool: pool,
            prot,
        }
    }

    /// The medium's page number of data page `p`.
    fn medium_page(&self, p: u64) -> u64 {
        self.prot.data_offset() / PAGE as u64 + p
    }

    /// Reads of data page `a` return data page `b`'s bytes (`reads` times, or until cleared).
    fn misdirect(&self, a: u64, b: u64, reads: Option<u64>) {
        self.mis
            .misdirect(self.medium_page(a), self.medium_page(b), reads)
            .unwrap();
    }

    fn clear(&self, a: u64) {
        self.mis.clear(self.medium_page(a));
    }

    /// The data region as stored, read past the misdirection.
    fn stored_data(&self) -> Vec<u8> {
        let mut b = vec![0u8; PAGES as usize * PAGE];
        self.sim.read(self.prot.data_offset() as usize, &mut b);
        b
    }

    fn page(data: &[u8], p: u64) -> &[u8] {
        &data[p as usize * PAGE..(p as usize + 1) * PAGE]
    }

    /// A scrub that must find nothing at all.
    fn assert_scrubs_clean(&self, what: &str) {
        let s = self.prot.scrub(&mut |_, _| {}).unwrap();
        assert!(
            s.verified(),
            "{what}: findings {:?}, unverifiable {:?}",
            s.findings,
            s.unverifiable
        );
    }
}

fn assert_unrepairable_page_a<T: std::fmt::Debug>(r: integrity::Result<T>, what: &str) {
    match r {
        Err(IntegrityError::Unrepairable { page, .. }) => assert_eq!(page, A, "{what}"),
        other => panic!("{what}: expected Unrepairable for page {A}, got {other:?}"),
    }
}

#[test]
fn eager_read_refuses_a_persistent_misdirected_read() {
    let s = Setup::new(Mode::Eager);
    let original = s.stored_data();
    assert_ne!(Setup::page(&original, A), Setup::page(&original, B));
    s.misdirect(A, B, None);
    let mut page = vec![0u8; PAGE];
    assert_unrepairable_page_a(s.prot.read(A * PAGE as u64, &mut page), "a whole page");
    let mut part = vec![0u8; 100];
    assert_unrepairable_page_a(
        s.prot.read(A * PAGE as u64 + 1000, &mut part),
        "part of a line",
    );
    // A write is refused too (its old line is verified first), and stores nothing.
    assert_unrepairable_page_a(s.prot.write(A * PAGE as u64 + 10, &[0xEE; 5]), "a write");
    assert!(s.mis.misdirected() > 0);
    assert_eq!(s.stored_data(), original, "nothing stored changed");
    // The other pages read as they are, misdirection or not.
    s.prot.read(B * PAGE as u64, &mut page).unwrap();
    assert_eq!(page, Setup::page(&original, B));
    // Once reads go right again, A reads its own bytes and every checksum still holds.
    s.clear(A);
    s.prot.read(A * PAGE as u64, &mut page).unwrap();
    assert_eq!(page, Setup::page(&original, A));
    s.assert_scrubs_clean("after the misdirection ended");
}

#[test]
fn eager_read_through_a_transient_misdirection_serves_the_right_bytes() {
    let s = Setup::new(Mode::Eager);
    let original = s.stored_data();
    s.misdirect(A, B, Some(1));
    let mut page = vec![0u8; PAGE];
    s.prot.read(A * PAGE as u64, &mut page).unwrap();
    assert_eq!(s.mis.misdirected(), 1, "the fault fired");
    assert_eq!(page, Setup::page(&original, A), "A's bytes, not B's");
    assert_eq!(s.stored_data(), original);
    s.assert_scrubs_clean("after a transient misdirection");
}

#[test]
fn the_scrubber_reports_a_misdirected_read_and_repair_does_not_claim_it() {
    for mode in [Mode::Lazy, Mode::Eager, Mode::TxbPage] {
        let s = Setup::new(mode);
        let original = s.stored_data();
        let image_before = s.sim.durable_image();
        s.misdirect(A, B, None);
        let scrub = s.prot.scrub(&mut |_, _| {}).unwrap();
        assert!(
            !scrub.findings.is_empty(),
            "{mode:?}: scrub reports page {A}"
        );
        for f in &scrub.findings {
            assert_eq!(
                (f.kind, f.index),
                (FindingKind::DataPage, A),
                "{mode:?}: only page {A} is named: {f:?}"
            );
        }
        assert_eq!(
            s.sim.durable_image(),
            image_before,
            "{mode:?}: scrub changed nothing"
        );
        let repair = s.prot.repair(&mut |_, _| {}).unwrap();
        let about_a: Vec<_> = repair
            .outcomes
            .iter()
            .filter(|o| o.finding.kind == FindingKind::DataPage && o.finding.index == A)
            .collect();
        assert!(!about_a.is_empty(), "{mode:?}: repair saw page {A}");
        for o in about_a {
            assert!(
                !o.repaired,
                "{mode:?}: a page that does not read back is not repaired: {}",
                o.how
            );
        }
        assert_eq!(s.stored_data(), original, "{mode:?}: data unchanged");
        s.clear(A);
        s.assert_scrubs_clean(&format!("{mode:?}: after the misdirection ended"));
    }
}
