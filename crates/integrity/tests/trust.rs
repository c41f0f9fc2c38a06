//! The trust table of `docs/integrity.md` ("What a mismatch means"), row by row, on real
//! images: for each row, a region in that state with page 5 damaged at rest, then
//!
//! - a read-only open and a scrub: the basis the table gives, page 5 reported as damage or as
//!   unverifiable, and not one byte of the medium changed;
//! - a read-write open: a resync (naming page 5) only for an unclean region; nothing rebuilt
//!   otherwise, and the `unverified` flag kept;
//! - a repair: page 5 rebuilt from parity unless the resync took it as data, every stripe
//!   proven for an unverified region, and the region current afterwards.
//!
//! Rows that leave a shadow batch record (retired: earlier writers kept one at offset 4096 of
//! the integrity region) check that it decides nothing, and that a read-write open zeroes it.

mod support;

use integrity::layout::flags;
use integrity::{Basis, Mode, OpenOptions};
use pmem::{Medium, Pool};
use support::*;

const PAGES: u64 = 64;
const DAMAGED: u64 = 5;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Row {
    Current,
    /// Clean, with a legacy record whose CRC fails.
    LegacyRecordDamaged,
    /// Clean, with a legacy record naming a batch (a clean close never left one).
    LegacyRecordBatch,
    /// Clean, the `unverified` flag set by an earlier writer.
    FlagSet,
    Unclean,
    /// Crashed in an earlier writer's update pass: state open and a legacy batch record.
    UncleanLegacyBatch,
    HeaderCopyDamaged,
}

impl Row {
    fn leaves_record(self) -> bool {
        matches!(
            self,
            Row::LegacyRecordDamaged | Row::LegacyRecordBatch | Row::UncleanLegacyBatch
        )
    }
}

/// (data region offset, integrity region offset, pool UUID) of an image.
fn places(img: &[u8]) -> (usize, usize, pmem::Uuid) {
    let pool = Pool::open_medium(sim_of(img.to_vec()), &read_only_pool()).unwrap();
    (
        pool.region("data").unwrap().offset as usize,
        pool.region("data.integrity").unwrap().offset as usize,
        pool.uuid(),
    )
}

fn read_only_pool() -> pmem::OpenOptions {
    pmem::OpenOptions {
        read_only: true,
        domain: None,
    }
}

/// A lazy region of 64 pages in the state of `row`, page 5 damaged at rest.
fn image_for(row: Row) -> Vec<u8> {
    let mut img = image(PAGES, 4, Mode::Lazy, 11);
    let (data, meta, uuid) = places(&img);
    let record = meta + RETIRED_AT;
    let mut bits = [0u64; 8];
    bits[0] = 1 << 9;
    let batch = legacy_shadow_record(&uuid, 7, 0, &bits);
    match row {
        Row::Current => {}
        Row::LegacyRecordDamaged => {
            img[record..record + 128].copy_from_slice(&batch);
            img[record + 20] ^= 0x08;
        }
        Row::LegacyRecordBatch => img[record..record + 128].copy_from_slice(&batch),
        Row::FlagSet => rewrite_header(&mut img, meta, &uuid, |h| h.flags |= flags::UNVERIFIED),
        Row::UncleanLegacyBatch => {
            rewrite_header(&mut img, meta, &uuid, |h| {
                h.state = integrity::layout::state::OPEN
            });
            img[record..record + 128].copy_from_slice(&batch);
        }
        Row::Unclean => {
            // Written and never closed: a crash.
            let (pool, prot, _) = open_mode(sim_of(img), Mode::Lazy);
            prot.write(3 * PAGE as u64, &[7; 100]).unwrap();
            img = prot.medium().durable_image();
            drop(prot);
            drop(pool);
        }
        Row::HeaderCopyDamaged => img[meta + 30] ^= 0x01,
    }
    img[data + DAMAGED as usize * PAGE + 77] ^= 0x10;
    img
}

fn medium_bytes(sim: &Sim) -> Vec<u8> {
    let mut b = vec![0u8; sim.len()];
    sim.read(0, &mut b);
    b
}

#[test]
fn every_row_of_the_trust_table() {
    use Row::*;
    let rows = [
        (Current, Basis::Current),
        (LegacyRecordDamaged, Basis::Current),
        (LegacyRecordBatch, Basis::Current),
        (FlagSet, Basis::Unverified),
        (Unclean, Basis::Unclean),
        (UncleanLegacyBatch, Basis::Unclean),
        (HeaderCopyDamaged, Basis::Unclean),
    ];
    for (row, basis) in rows {
        let img = image_for(row);
        let sim = sim_of(img.clone());

        // Read-only: the basis, page 5 named, nothing written.
        let before = medium_bytes(&sim);
        let pool = Pool::open_medium(sim.clone(), &read_only_pool()).unwrap();
        let ro = OpenOptions {
            read_only: true,
            ..Default::default()
        };
        let (prot, report) = integrity::open_in_pool(&pool, "data", ro, &mut |_, _| {}).unwrap();
        assert_eq!(report.trust.basis, basis, "{row:?}: {:?}", report.trust);
        let scrub = prot.scrub(&mut |_, _| {}).unwrap();
        assert!(!scrub.verified(), "{row:?}");
        assert_eq!(scrub.trust.basis, basis);
        let named = |v: &[integrity::Finding]| v.iter().any(|f| f.index == DAMAGED);
        if basis == Basis::Unclean {
            assert!(scrub.findings.is_empty(), "{row:?}: {:?}", scrub.findings);
            assert!(
                named(&scrub.unverifiable),
                "{row:?}: {:?}",
                scrub.unverifiable
            );
        } else {
            assert!(scrub.unverifiable.is_empty(), "{row:?}");
            assert_eq!(scrub.findings.len(), 1, "{row:?}: {:?}", scrub.findings);
            assert!(named(&scrub.findings), "{row:?}");
        }
        drop(prot);
        drop(pool);
        assert!(
            medium_bytes(&sim) == before,
            "{row:?}: a read-only scrub wrote"
        );

        // Read-write open: resync only when unclean, and it names page 5; a legacy record is
        // zeroed and nothing else.
        let (pool, prot, report) = open_mode(sim.clone(), Mode::Lazy);
        match basis {
            Basis::Unclean => {
                assert_eq!(report.resync_pages, PAGES, "{row:?}");
                assert!(
                    report.resync_pages_changed_list.contains(&DAMAGED),
                    "{row:?}: {:?}",
                    report.resync_pages_changed_list
                );
            }
            _ => assert_eq!(report.resync_pages, 0, "{row:?}: nothing is rebuilt"),
        }
        assert_eq!(report.retired_bytes_cleared, row.leaves_record(), "{row:?}");
        let (_, meta, _) = places(&img);
        let mut rec = [0xffu8; 128];
        prot.medium().read(meta + RETIRED_AT, &mut rec);
        assert_eq!(rec, [0u8; 128], "{row:?}: the retired bytes are zero");

        // Repair.
        let rep = prot.repair(&mut |_, _| {}).unwrap();
        assert_eq!(rep.unrepaired().count(), 0, "{row:?}: {:?}", rep.outcomes);
        if basis == Basis::Unclean {
            // The resync took page 5's damage as data (the documented cost, named above).
            assert!(rep.outcomes.is_empty(), "{row:?}");
        } else {
            assert_eq!(rep.outcomes.len(), 1, "{row:?}");
            assert_eq!(rep.outcomes[0].finding.index, DAMAGED);
            assert_eq!(
                rep.proved_all_stripes,
                basis == Basis::Unverified,
                "{row:?}"
            );
            let want = image_for(Current);
            let (data, _, _) = places(&want);
            let mut page = vec![0u8; PAGE];
            prot.medium()
                .read(prot.data_offset() as usize + 5 * PAGE, &mut page);
            let mut bytes = want[data + 5 * PAGE..data + 6 * PAGE].to_vec();
            bytes[77] ^= 0x10;
            assert_eq!(page, bytes, "{row:?}: page 5 rebuilt as it was");
        }
        assert_eq!(rep.trust_after.as_ref().unwrap().basis, Basis::Current);
        assert!(redundancy_is_current(&pool, &prot), "{row:?}");
        prot.close().unwrap();
        let img = pool.close().unwrap().durable_image();
        let (_, _, report) = open(
            sim_of(img),
            OpenOptions {
                read_only: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(report.trust.basis, Basis::Current, "{row:?} after repair");
    }
}

/// Switching a region to eager mode computes line checksums only from pages that pass their
/// page checksum: a page damaged at rest is not taken for data (its line checksums cannot
/// match), and reading it rebuilds it from parity. Before, the switch resynced everything and
/// the damage became the data.
#[test]
fn a_switch_to_eager_never_takes_damage_for_data() {
    // A lazy session clears the line checksums' "current" flag.
    let (pool, prot, _) = open_mode(sim_of(image(PAGES, 4, Mode::Lazy, 12)), Mode::Lazy);
    prot.close().unwrap();
    let img = pool.close().unwrap().durable_image();
    let (data, _, _) = places(&img);
    let want = img[data + 9 * PAGE..data + 10 * PAGE].to_vec();
    let mut img = img;
    img[data + 9 * PAGE + 1000] ^= 0x04;
    let (pool, prot, report) = open_mode(sim_of(img), Mode::Eager);
    assert_eq!(report.resync_pages, 0);
    assert_eq!(report.lines_rebuilt_pages, PAGES - 1);
    assert_eq!(report.lines_refused_pages, vec![9]);
    let scrub = prot.scrub(&mut |_, _| {}).unwrap();
    assert_eq!(scrub.findings.len(), 1, "{:?}", scrub.findings);
    assert_eq!(scrub.findings[0].index, 9);
    let mut got = vec![0u8; PAGE];
    prot.read(9 * PAGE as u64, &mut got).unwrap();
    assert_eq!(got, want, "the read rebuilt page 9 from parity");
    assert_eq!(prot.stats().repairs_on_read, 1);
    assert!(prot.scrub(&mut |_, _| {}).unwrap().verified());
    assert!(redundancy_is_current(&pool, &prot));
}
