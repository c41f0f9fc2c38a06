//! Faults at the DIMM, what each check makes of them, and the coverage matrix they give,
//! measured on the functional engine.

use tvarak_sim::engine::{Checks, Detected, Engine, LINE, PAGE};
use tvarak_sim::fault::{Fault, FaultKind, Protection, fault_matrix};

fn patterned(pages: u64) -> Vec<u8> {
    (0..pages as usize * PAGE)
        .map(|i| (i * 7 + i / 4096) as u8)
        .collect()
}

fn line(e: &Engine, a: u64) -> Vec<u8> {
    e.device_data()[a as usize..a as usize + LINE].to_vec()
}

fn tvarak_only(e: Engine) -> Engine {
    e.with_checks(Checks {
        device_ecc: false,
        line_sums: true,
    })
}

#[test]
fn a_lost_write_is_found_on_the_next_fill_and_rebuilt_from_parity() {
    let init = patterned(12);
    let mut e = tvarak_only(Engine::paper_layout(4, 12, &init).unwrap());
    let a = 5 * PAGE as u64 + 3 * 64;
    let old = line(&e, a);
    e.inject(Fault::LostWrite { line: a });
    e.writeback(a, &[0x11; 64]).unwrap();
    assert_eq!(line(&e, a), old, "the DIMM did not apply the write");
    assert!(e.ecc_ok(a), "old bytes and old ECC still agree");
    assert!(matches!(
        e.read_line(a),
        Err(Detected::LineChecksum { line, .. }) if line == a
    ));
    assert_eq!(e.recover_line(a).unwrap(), [0x11; 64]);
    assert_eq!(e.read_line(a).unwrap(), [0x11; 64]);
    assert!(e.armed().is_empty());
}

#[test]
fn a_misdirected_write_damages_two_lines_both_found_and_rebuilt() {
    let init = patterned(12);
    let mut e = tvarak_only(Engine::paper_layout(4, 12, &init).unwrap());
    let (a, b) = (64, 9 * PAGE as u64 + 640);
    e.inject(Fault::MisdirectedWrite { line: a, to: b });
    e.writeback(a, &[0x22; 64]).unwrap();
    assert_eq!(
        line(&e, b),
        vec![0x22; 64],
        "the bytes landed on the other line"
    );
    assert!(e.ecc_ok(b), "with their own ECC");
    assert!(e.read_line(a).is_err());
    assert!(e.read_line(b).is_err());
    e.recover_line(a).unwrap();
    e.recover_line(b).unwrap();
    assert_eq!(e.device_data(), e.intended_data());
}

#[test]
fn a_misdirected_read_acts_once_and_leaves_the_data_at_rest_right() {
    let init = patterned(12);
    let mut e = tvarak_only(Engine::paper_layout(4, 12, &init).unwrap());
    let (a, b) = (128, 7 * PAGE as u64);
    e.inject(Fault::MisdirectedRead { line: a, from: b });
    assert!(matches!(e.read_line(a), Err(Detected::LineChecksum { .. })));
    assert_eq!(e.read_line(a).unwrap()[..], init[128..192]);
    // Under device ECC alone the wrong bytes come back with their own, matching, ECC.
    let mut ecc = Engine::paper_layout(4, 12, &init)
        .unwrap()
        .with_checks(Checks {
            device_ecc: true,
            line_sums: false,
        });
    ecc.inject(Fault::MisdirectedRead { line: a, from: b });
    assert_eq!(
        ecc.read_line(a).unwrap()[..],
        init[b as usize..b as usize + 64]
    );
}

#[test]
fn recovery_verifies_peers_first_and_refuses_a_damaged_one() {
    let init = patterned(12);
    let mut e = tvarak_only(Engine::paper_layout(4, 12, &init).unwrap());
    // Pages 0, 1 and 2 form stripe 0. Damage a line of page 0 and one of its peer, page 1.
    e.inject(Fault::BitFlip { line: 0, bit: 3 });
    e.inject(Fault::BitFlip {
        line: PAGE as u64 + 64 * 9,
        bit: 100,
    });
    assert!(!e.page_ok(1));
    let err = e.recover_line(0).unwrap_err().to_string();
    assert!(err.contains("page 1"), "{err}");
    assert_ne!(line(&e, 0)[..], init[..64], "nothing was written");
    // The same the other way round: two damaged pages in one stripe are beyond parity.
    assert!(e.recover_line(PAGE as u64 + 64 * 9).is_err());
    // A damaged page in another stripe (page 4, stripe 1) is no obstacle.
    let mut e = tvarak_only(Engine::paper_layout(4, 12, &init).unwrap());
    e.inject(Fault::BitFlip { line: 0, bit: 3 });
    e.inject(Fault::BitFlip {
        line: 4 * PAGE as u64,
        bit: 100,
    });
    assert_eq!(e.recover_line(0).unwrap()[..], init[..64]);
    e.recover_line(4 * PAGE as u64).unwrap();
    assert_eq!(e.device_data(), &init[..]);
}

#[test]
fn the_matrix_has_the_expected_shape() {
    let m = fault_matrix(7, 12).unwrap();
    println!("{}", m.table());
    assert_eq!(m.cells.len(), 24);
    let c = |f, d| m.cell(f, d).unwrap();
    for f in FaultKind::ALL {
        // Device ECC catches (and corrects) only the bit flip.
        let ecc = c(f, Protection::DeviceEcc);
        if f == FaultKind::BitFlip {
            assert!(
                ecc.on_first_read.always() && ecc.corrected.always(),
                "{ecc:?}"
            );
        } else {
            assert!(ecc.on_first_read.never() && ecc.by_scrub.never(), "{ecc:?}");
            assert!(ecc.wrong_bytes_returned.always(), "{ecc:?}");
        }
        // TVARAK finds every fault on the first read of every damaged line, and repairs it.
        let t = c(f, Protection::Tvarak);
        assert!(t.on_first_read.always(), "{t:?}");
        assert!(t.corrected.always(), "{t:?}");
        assert!(t.wrong_bytes_returned.never(), "{t:?}");
        // TxB and Vilamb-like find nothing on the read path.
        for d in [
            Protection::TxbObject,
            Protection::TxbPage,
            Protection::Vilamb,
        ] {
            let x = c(f, d);
            assert!(x.on_first_read.never(), "{x:?}");
            assert!(x.wrong_bytes_returned.always(), "{x:?}");
        }
        // TxB's commit-time redundancy covers the intended bytes: a scrub finds damage at
        // rest and parity repairs it. A misdirected read leaves nothing at rest to find.
        for d in [Protection::TxbObject, Protection::TxbPage] {
            let x = c(f, d);
            if f == FaultKind::MisdirectedRead {
                assert!(x.by_scrub.never() && x.corrected.never(), "{x:?}");
            } else {
                assert!(x.by_scrub.always() && x.corrected.always(), "{x:?}");
            }
        }
    }
    // Vilamb-like: damage from a write inside the window is invisible to a scrub until the
    // pass has run; then it depends on what the pass read. If the lines were still cached, it
    // covered the intended bytes and the scrub after the period finds the damage; if they were
    // evicted, it took the damage for data and nothing ever finds it.
    for f in [FaultKind::LostWrite, FaultKind::MisdirectedWrite] {
        let v = c(f, Protection::Vilamb);
        assert!(
            v.by_scrub_after_period.always() && v.corrected.always(),
            "{v:?}"
        );
        let v = c(f, Protection::VilambEvicted);
        assert!(!v.by_scrub_after_period.always(), "{v:?}");
    }
    for d in [Protection::Vilamb, Protection::VilambEvicted] {
        let v = c(FaultKind::LostWrite, d);
        assert!(v.by_scrub.never(), "{v:?}");
        // A flip at rest in a page the pass covered is found by the scrub and repaired.
        let v = c(FaultKind::BitFlip, d);
        assert!(v.by_scrub.always() && v.corrected.always(), "{v:?}");
    }
    let v = c(FaultKind::LostWrite, Protection::VilambEvicted);
    assert!(
        v.by_scrub_after_period.never() && v.corrected.never(),
        "{v:?}"
    );
}

#[test]
fn the_matrix_is_a_function_of_its_seed_and_rejects_zero_trials() {
    assert_eq!(fault_matrix(3, 2).unwrap(), fault_matrix(3, 2).unwrap());
    assert!(fault_matrix(3, 0).is_err());
}

#[test]
fn a_failed_dimm_is_rebuilt_from_verified_pages_only() {
    let init = patterned(24);
    let mut e = tvarak_only(Engine::paper_layout(4, 24, &init).unwrap());
    for i in 0..200u64 {
        let a = (i * 7919 % (24 * 64)) * 64;
        e.writeback(a, &[i as u8; 64]).unwrap();
    }
    let want = e.redundancy();
    e.fail_dimm(2).unwrap();
    assert_ne!(e.device_data(), e.intended_data());
    let r = e.rebuild_dimm(2).unwrap();
    // 24 data pages in 8 stripes of 3: DIMM 2 holds parity for 2 stripes, data for 6.
    assert_eq!((r.data_pages, r.parity_pages), (6, 2), "{r:?}");
    assert!(r.refused_stripes.is_empty());
    assert_eq!(e.device_data(), e.intended_data());
    assert_eq!(e.redundancy(), want);

    // Now with a damaged page on a surviving DIMM: its stripe is refused, the others rebuilt.
    let mut e = tvarak_only(Engine::paper_layout(4, 24, &init).unwrap());
    let victim = (0..24u64)
        .find(|&p| e.dimm_of_page(p) == 0 && p / 3 == 1)
        .unwrap();
    e.inject(Fault::BitFlip {
        line: victim * PAGE as u64 + 64,
        bit: 5,
    });
    e.fail_dimm(2).unwrap();
    let r = e.rebuild_dimm(2).unwrap();
    assert_eq!(r.refused_stripes, vec![1], "{r:?}");
    assert_eq!(r.data_pages + r.parity_pages, 7);
    // Stripe 1 keeps its parity on DIMM 2; refused, it was not recomputed over the damage.
    assert_eq!(e.parity_dimm(1), 2);
    let red = e.redundancy();
    let par = red.section("dimm2.parity").unwrap();
    assert!(
        par[..PAGE].iter().all(|&b| b == 0xdb),
        "refused means not rebuilt"
    );
    assert!(
        Engine::kavach_layout(pmem::Uuid([1; 16]), 4, 2, &[])
            .unwrap()
            .fail_dimm(0)
            .is_err()
    );
}

fn fault_of(kind: u8, line: u64, other: u64, bit: u16) -> Fault {
    match kind % 4 {
        0 => Fault::LostWrite { line },
        1 => Fault::MisdirectedWrite { line, to: other },
        2 => Fault::MisdirectedRead { line, from: other },
        _ => Fault::BitFlip { line, bit },
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 48, ..Default::default() })]
    /// Under TVARAK's check, with faults injected among random writebacks, no read ever
    /// returns bytes other than the last ones written: it returns them or reports damage,
    /// and a rebuild either restores them or refuses.
    #[test]
    fn tvarak_never_returns_wrong_bytes(
        seed in proptest::prelude::any::<u64>(),
        faults in proptest::collection::vec(
            (0u8..4, 0u64..(12 * 64), 0u64..(12 * 64), 0u16..512),
            1..4,
        ),
    ) {
        let mut rng = pmem::rng::SplitMix64::new(seed);
        let init: Vec<u8> = (0..12 * PAGE).map(|_| rng.next_u64() as u8).collect();
        let mut e = tvarak_only(Engine::paper_layout(4, 12, &init).unwrap());
        for (kind, l, o, bit) in faults {
            e.inject(fault_of(kind, l * 64, o * 64, bit));
            for _ in 0..20 {
                let a = rng.below(12 * 64) * 64;
                let mut b = [0u8; LINE];
                b.iter_mut().for_each(|x| *x = rng.next_u64() as u8);
                e.writeback(a, &b).unwrap();
            }
            let a = l * 64;
            e.writeback(a, &[kind; LINE]).unwrap();
        }
        for n in 0..12 * 64u64 {
            let a = n * 64;
            let want = e.intended_data()[a as usize..a as usize + LINE].to_vec();
            match e.read_line(a) {
                Ok(b) => proptest::prop_assert_eq!(&b[..], &want[..], "line {:#x}", a),
                Err(Detected::LineChecksum { .. }) => {
                    if let Ok(b) = e.recover_line(a) {
                        proptest::prop_assert_eq!(&b[..], &want[..], "rebuilt {:#x}", a);
                    }
                }
                Err(d) => proptest::prop_assert!(false, "{}", d),
            }
        }
    }
}
