//! Reliable objects (`heap::reliable`): round trips, bit flips injected into the medium and
//! corrected on read (and written back at commit), uncorrectable damage reported as a typed
//! error naming the object and the word, the scrubber, the typed API, and crash consistency of
//! reliable writes on the persistence simulator.

use std::sync::Arc;
use std::time::Duration;

use heap::ecc;
use heap::raw::Lane;
use heap::reliable::{
    self, HEADER_BYTES, MAGIC, Part, alloc_reliable, len_reliable, pair_offset, read_reliable,
    scrub, scrub_medium, write_reliable,
};
use heap::{Heap, HeapError, HeapOptions, RawHeap, TxMode};
use pmem::rng::SplitMix64;
use pmem::{CrashPlan, Medium, SimConfig, SimMedium};

const LEN: u64 = 4 << 20;

fn sim(image: Vec<u8>, crash: CrashPlan, seed: u64) -> Arc<SimMedium> {
    Arc::new(SimMedium::from_image(
        image,
        SimConfig {
            seed,
            crash,
            ..SimConfig::default()
        },
    ))
}

fn fresh(mode: TxMode) -> (Arc<SimMedium>, RawHeap) {
    let m = sim(vec![0; LEN as usize], CrashPlan::Never, 0);
    RawHeap::format(&*m, 0, LEN, [7; 16], &HeapOptions::small()).unwrap();
    let h = RawHeap::open(m.clone(), 0, LEN).unwrap();
    h.set_default_mode(mode);
    (m, h)
}

fn tx<R>(h: &RawHeap, f: impl FnOnce(&RawHeap, &mut Lane) -> heap::Result<R>) -> heap::Result<R> {
    let mut lane = h.lane();
    h.begin(&mut lane);
    match f(h, &mut lane) {
        Ok(v) => h.commit(&mut lane).map(|()| v),
        Err(e) => {
            if !e.is_simulated_crash() {
                h.abort(&mut lane)?;
            }
            Err(e)
        }
    }
}

fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut r = SplitMix64::new(seed);
    (0..n).map(|_| r.next_u64() as u8).collect()
}

/// A reliable object of `len` bytes holding `content` (committed).
fn make(h: &RawHeap, content: &[u8]) -> u64 {
    tx(h, |h, l| {
        let o = alloc_reliable(h, l, content.len() as u64)?;
        write_reliable(h, l, o, 0, content)?;
        Ok(o)
    })
    .unwrap()
}

fn read_all(h: &RawHeap, obj: u64, n: usize) -> heap::Result<(Vec<u8>, usize)> {
    tx(h, |h, l| {
        let mut b = vec![0u8; n];
        let fixed = read_reliable(h, l, obj, 0, &mut b)?;
        Ok((b, fixed))
    })
}

/// The stored pair of word `i` of `obj`.
fn stored(m: &SimMedium, obj: u64, i: u64) -> (u64, u64) {
    let at = pair_offset(obj, i) as usize;
    (m.load_u64(at), m.load_u64(at + 8))
}

/// XOR `flips` (data bits, check bits) into the stored pair at region offset `at`.
fn inject(m: &SimMedium, at: u64, flips: (u64, u64)) {
    let at = at as usize;
    let w = m.load_u64(at) ^ flips.0;
    let e = m.load_u64(at + 8) ^ flips.1;
    m.write(at, &w.to_le_bytes());
    m.write(at + 8, &e.to_le_bytes());
}

/// `k` distinct random bits of the 128-bit pair.
fn random_flips(r: &mut SplitMix64, k: u32) -> (u64, u64) {
    let (mut d, mut c) = (0u64, 0u64);
    while d.count_ones() + c.count_ones() < k {
        let b = r.below(128);
        if b < 64 {
            d |= 1 << b;
        } else {
            c |= 1 << (b - 64);
        }
    }
    (d, c)
}

/// Every stored pair of the object (header included) checks.
fn all_pairs_clean(m: &SimMedium, obj: u64, len: u64) -> bool {
    let n = HEADER_BYTES + reliable::words(len) * 16;
    let mut b = vec![0u8; n as usize];
    m.read(obj as usize, &mut b);
    ecc::first_damaged(&b) == Ok(None)
}

#[test]
fn round_trips_aligned_unaligned_and_sub_word() {
    for mode in [TxMode::Undo, TxMode::Redo] {
        let (m, h) = fresh(mode);
        let len = 100u64;
        let obj = make(&h, &[0u8; 100]);
        let mut model = vec![0u8; len as usize];
        let mut r = SplitMix64::new(11);
        for step in 0..300u64 {
            let off = r.below(len) as usize;
            let n = r.below(len - off as u64 + 1) as usize;
            let data = bytes(step, n);
            tx(&h, |h, l| {
                write_reliable(h, l, obj, off as u64, &data)?;
                // The transaction reads its own write, in both modes.
                let mut back = vec![0u8; n];
                read_reliable(h, l, obj, off as u64, &mut back)?;
                assert_eq!(back, data, "{mode:?} step {step}: read-your-write");
                Ok(())
            })
            .unwrap();
            model[off..off + n].copy_from_slice(&data);
            let a = r.below(len) as usize;
            let b = a + r.below(len - a as u64 + 1) as usize;
            let got = tx(&h, |h, l| {
                let mut buf = vec![0u8; b - a];
                assert_eq!(read_reliable(h, l, obj, a as u64, &mut buf)?, 0);
                Ok(buf)
            })
            .unwrap();
            assert_eq!(got, model[a..b], "{mode:?} step {step}: bytes {a}..{b}");
        }
        assert_eq!(read_all(&h, obj, 100).unwrap().0, model);
        assert_eq!(tx(&h, |h, l| len_reliable(h, l, obj)).unwrap(), 100);
        assert!(all_pairs_clean(&m, obj, len), "{mode:?}");
        // Past the end and outside a transaction: typed errors.
        let err = tx(&h, |h, l| read_reliable(h, l, obj, 95, &mut [0u8; 6])).unwrap_err();
        assert!(matches!(err, HeapError::Invalid { .. }), "{err}");
        let err = tx(&h, |h, l| write_reliable(h, l, obj, u64::MAX, &[1])).unwrap_err();
        assert!(matches!(err, HeapError::Invalid { .. }), "{err}");
        {
            let lane = &mut h.lane();
            let err = read_reliable(&h, lane, obj, 0, &mut [0u8; 8]).unwrap_err();
            assert!(matches!(err, HeapError::TxState(_)), "{err}");
        }
        // An aborted write leaves the object as it was.
        let r = tx(&h, |h, l| {
            write_reliable(h, l, obj, 3, &[0xAA; 40])?;
            Err::<(), _>(HeapError::Aborted)
        });
        assert!(r.is_err());
        assert_eq!(read_all(&h, obj, 100).unwrap().0, model);
        assert!(all_pairs_clean(&m, obj, len), "{mode:?} after abort");
    }
}

#[test]
fn up_to_six_flips_are_corrected_on_read_and_written_back_at_commit() {
    let mut r = SplitMix64::new(0xF11B);
    for mode in [TxMode::Undo, TxMode::Redo] {
        let (m, h) = fresh(mode);
        let content = bytes(5, 64);
        let obj = make(&h, &content);
        for k in 1..=6u32 {
            for trial in 0..25 {
                let word = r.below(8);
                let clean = stored(&m, obj, word);
                let flips = random_flips(&mut r, k);
                inject(&m, pair_offset(obj, word), flips);
                let (got, fixed) = read_all(&h, obj, 64).unwrap();
                assert_eq!(got, content, "{mode:?} k={k} trial {trial}");
                assert_eq!(fixed, 1, "{mode:?} k={k} trial {trial}");
                assert_eq!(
                    stored(&m, obj, word),
                    clean,
                    "{mode:?} k={k}: the repair was written back at commit"
                );
            }
        }
        // A sub-word read corrects the word it touches, too.
        inject(&m, pair_offset(obj, 2), (1 << 9, 1 << 40));
        let b = tx(&h, |h, l| {
            let mut b = [0u8; 3];
            read_reliable(h, l, obj, 17, &mut b)?;
            Ok(b)
        })
        .unwrap();
        assert_eq!(b, content[17..20]);
        assert!(all_pairs_clean(&m, obj, 64));
        // A repair made by a transaction that aborts is rolled back with it.
        inject(&m, pair_offset(obj, 4), (1 << 63, 0));
        let damaged = stored(&m, obj, 4);
        let _ = tx(&h, |h, l| {
            read_reliable(h, l, obj, 0, &mut [0u8; 64])?;
            Err::<(), _>(HeapError::Aborted)
        });
        assert_eq!(stored(&m, obj, 4), damaged, "{mode:?}");
        // Flips in the header are corrected as well.
        inject(&m, obj, (0b1011, 1 << 20));
        inject(&m, obj + 16, (1 << 3, 1 << 33));
        assert_eq!(read_all(&h, obj, 64).unwrap().0, content);
        assert!(all_pairs_clean(&m, obj, 64), "{mode:?}");
    }
}

/// A codeword of 14 bits (data bits, check bits): half of it flipped is 7 bits that two
/// codewords explain equally well. Found by the search of `tests/ecc.rs`
/// (`minimum_distance_is_at_least_fourteen`); checked here.
const CODEWORD_14: (u64, u64) = (0x1000_00c1_1000_0141, 0x8000_0181_8000_0001);

fn seven_of_fourteen() -> (u64, u64) {
    let (d, c) = CODEWORD_14;
    assert!(ecc::check(d, c), "a codeword");
    assert_eq!(d.count_ones() + c.count_ones(), 14);
    // The first seven of its bits, counting data bits first.
    let (mut hd, mut hc, mut n) = (0u64, 0u64, 0);
    for b in 0..64 {
        if n < 7 && d >> b & 1 == 1 {
            hd |= 1 << b;
            n += 1;
        }
    }
    for b in 0..64 {
        if n < 7 && c >> b & 1 == 1 {
            hc |= 1 << b;
            n += 1;
        }
    }
    (hd, hc)
}

#[test]
fn uncorrectable_words_are_typed_errors_naming_object_and_word() {
    for mode in [TxMode::Undo, TxMode::Redo] {
        let (m, h) = fresh(mode);
        let content = bytes(9, 80);
        let obj = make(&h, &content);
        // Seven flips that tie: never a wrong value, an error naming word 3.
        let half = seven_of_fourteen();
        inject(&m, pair_offset(obj, 3), half);
        let before = stored(&m, obj, 3);
        let err = read_all(&h, obj, 80).unwrap_err();
        match &err {
            HeapError::Uncorrectable {
                object,
                word,
                medium_offset,
                detail,
            } => {
                assert_eq!((*object, *word), (obj, 3));
                assert_eq!(*medium_offset, h.base() + pair_offset(obj, 3));
                assert!(detail.contains("equally well"), "{detail}");
            }
            e => panic!("{mode:?}: expected Uncorrectable, got {e}"),
        }
        let msg = err.to_string();
        assert!(
            msg.contains("word 3") && msg.contains(&format!("{obj:#x}")),
            "{msg}"
        );
        assert_eq!(stored(&m, obj, 3), before, "nothing written");
        // Reads that do not touch word 3 still work.
        let b = tx(&h, |h, l| {
            let mut b = [0u8; 24];
            read_reliable(h, l, obj, 0, &mut b)?;
            Ok(b)
        })
        .unwrap();
        assert_eq!(b, content[..24]);
        // A partial write into the word needs its other bytes: refused the same way.
        let err = tx(&h, |h, l| write_reliable(h, l, obj, 25, &[1, 2])).unwrap_err();
        assert!(
            matches!(err, HeapError::Uncorrectable { word: 3, .. }),
            "{err}"
        );
        // A whole-word write replaces it.
        tx(&h, |h, l| write_reliable(h, l, obj, 24, &[7u8; 8])).unwrap();
        let mut want = content.clone();
        want[24..32].copy_from_slice(&[7u8; 8]);
        assert_eq!(read_all(&h, obj, 80).unwrap().0, want);
        // A stray whole-word write into the data word of word 9.
        m.write(
            pair_offset(obj, 9) as usize,
            &0xDEAD_BEEF_0BAD_F00Du64.to_le_bytes(),
        );
        let err = read_all(&h, obj, 80).unwrap_err();
        assert!(
            matches!(err, HeapError::Uncorrectable { object, word: 9, .. } if object == obj),
            "{err}"
        );
    }
}

#[test]
fn damaged_or_foreign_objects_are_typed_errors() {
    let (m, h) = fresh(TxMode::Undo);
    let plain = tx(&h, |h, l| {
        let o = h.alloc(l, 256, true)?;
        h.write(l, o, &bytes(3, 256))?;
        Ok(o)
    })
    .unwrap();
    let err = read_all(&h, plain, 8).unwrap_err();
    assert!(matches!(err, HeapError::Corrupt(_)), "{err}");
    assert!(err.to_string().contains("magic"), "{err}");
    let err = read_all(&h, plain + 64, 8).unwrap_err();
    assert!(matches!(err, HeapError::Corrupt(_)), "{err}");
    let err = read_all(&h, 3, 8).unwrap_err();
    assert!(matches!(err, HeapError::BadPointer { .. }), "{err}");
    let err = read_all(&h, u64::MAX - 8, 8).unwrap_err();
    assert!(matches!(err, HeapError::BadPointer { .. }), "{err}");
    // A length that does not fit the block, validly encoded.
    let obj = make(&h, &[1u8; 40]);
    let huge = 1u64 << 30;
    m.write(obj as usize + 16, &huge.to_le_bytes());
    m.write(obj as usize + 24, &ecc::encode(huge).to_le_bytes());
    let err = read_all(&h, obj, 8).unwrap_err();
    assert!(matches!(err, HeapError::Corrupt(_)), "{err}");
    assert!(err.to_string().contains("length"), "{err}");
    // A zero-length allocation is refused.
    let err = tx(&h, |h, l| alloc_reliable(h, l, 0)).unwrap_err();
    assert!(matches!(err, HeapError::Invalid { .. }), "{err}");
}

/// Bytes of `[off, off + n)` of the medium.
fn snap(m: &SimMedium, off: u64, n: u64) -> Vec<u8> {
    let mut b = vec![0u8; n as usize];
    m.read(off as usize, &mut b);
    b
}

#[test]
fn scrub_finds_and_repairs_and_never_touches_other_blocks() {
    let (m, h) = fresh(TxMode::Undo);
    let a = make(&h, &bytes(1, 64));
    let b = make(&h, &bytes(2, 1000));
    let c = make(&h, &bytes(3, 8));
    // Plain blocks: random bytes, and one starting with the magic word but no check word.
    let (p1, p2) = tx(&h, |h, l| {
        let p1 = h.alloc(l, 512, true)?;
        h.write(l, p1, &bytes(4, 512))?;
        let p2 = h.alloc(l, 64, true)?;
        let mut v = bytes(5, 64);
        v[..8].copy_from_slice(&MAGIC.to_le_bytes());
        h.write(l, p2, &v)?;
        Ok((p1, p2))
    })
    .unwrap();
    let plain = |m: &SimMedium| (snap(m, p1, 512), snap(m, p2, 64));
    let plain_before = plain(&m);
    let clean = scrub(&h, false).unwrap();
    assert!(clean.is_clean(), "{clean:?}");
    assert_eq!(clean.objects, 3);
    assert_eq!(clean.blocks, 5);
    assert_eq!(clean.pairs_checked, 3 * 2 + 8 + 125 + 1);
    // Damage: 4 flips in b's word 100, 2 in a's length pair, a stray write in c's word 0.
    let mut r = SplitMix64::new(77);
    inject(&m, pair_offset(b, 100), random_flips(&mut r, 4));
    inject(&m, a + 16, random_flips(&mut r, 2));
    m.write(pair_offset(c, 0) as usize, &42u64.to_le_bytes());
    let damaged = snap(&m, 0, LEN);
    let rep = scrub(&h, false).unwrap();
    assert_eq!(
        snap(&m, 0, LEN),
        damaged,
        "a scrub without repair writes nothing"
    );
    let fixes: Vec<_> = rep.corrected.iter().map(|c| (c.object, c.part)).collect();
    assert_eq!(fixes, vec![(a, Part::Length), (b, Part::Word(100))]);
    assert_eq!(
        rep.corrected[1].data_flips + rep.corrected[1].check_flips,
        4
    );
    assert_eq!(rep.uncorrectable.len(), 1);
    assert_eq!(
        (rep.uncorrectable[0].object, rep.uncorrectable[0].part),
        (c, Part::Word(0))
    );
    // The read-only walk over the medium agrees.
    let med = scrub_medium(&*m, 0, LEN).unwrap();
    assert_eq!(med.corrected, rep.corrected);
    assert_eq!(med.uncorrectable, rep.uncorrectable);
    // Repair.
    let fixed = scrub(&h, true).unwrap();
    assert_eq!(fixed.corrected, rep.corrected);
    assert!(fixed.repaired);
    assert!(all_pairs_clean(&m, a, 64) && all_pairs_clean(&m, b, 1000));
    let again = scrub(&h, true).unwrap();
    assert!(again.corrected.is_empty(), "{again:?}");
    assert_eq!(again.uncorrectable, rep.uncorrectable, "still reported");
    assert_eq!(read_all(&h, b, 1000).unwrap(), (bytes(2, 1000), 0));
    assert_eq!(plain(&m), plain_before, "plain blocks untouched");
}

#[test]
fn background_scrubber_repairs_and_stops() {
    let (m, h) = fresh(TxMode::Undo);
    let h = Arc::new(h);
    let obj = make(&h, &bytes(8, 256));
    let clean = stored(&m, obj, 17);
    inject(&m, pair_offset(obj, 17), (0b111 << 20, 1 << 5));
    let s = reliable::Scrubber::spawn(Arc::clone(&h), Duration::from_millis(5));
    // Bounded wait for the thread's first rounds (not a timing assertion: it only has to
    // finish eventually).
    for _ in 0..2000 {
        if s.rounds() >= 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(s.rounds() >= 2, "the scrubber ran");
    assert_eq!(s.corrected(), 1);
    assert_eq!(s.uncorrectable(), 0);
    assert!(matches!(s.last(), Some(Ok(r)) if r.is_clean()));
    s.stop();
    assert_eq!(stored(&m, obj, 17), clean);
}

#[test]
fn typed_reliable_pointers() {
    heap::pool_tag!(R);
    #[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
    #[repr(C)]
    struct Account {
        id: u64,
        balance: u64,
        flags: u32,
        tag: [u8; 4],
    }
    let (m, raw) = fresh(TxMode::Undo);
    let hp: Heap<R> = Heap::new(Arc::new(raw)).unwrap();
    let v = Account {
        id: 7,
        balance: 1000,
        flags: 3,
        tag: *b"abcd",
    };
    let p = hp.transaction(|tx| tx.alloc_reliable(v)).unwrap();
    assert_eq!(hp.transaction(|tx| tx.rget(p)).unwrap(), v);
    hp.transaction(|tx| {
        let mut a = tx.rget(p)?;
        a.balance -= 10;
        tx.rset(p, a)
    })
    .unwrap();
    // Flips in the stored balance: the typed read corrects them.
    inject(&m, pair_offset(p.offset(), 1), (0b101, 0));
    let got = hp.transaction(|tx| tx.rget(p)).unwrap();
    assert_eq!(got.balance, 990);
    assert_eq!(stored(&m, p.offset(), 1).0, 990);
    // Beyond repair: a typed error.
    m.write(
        pair_offset(p.offset(), 0) as usize,
        &0x5A5A_0F0F_1234_9876u64.to_le_bytes(),
    );
    let err = hp.transaction(|tx| tx.rget(p)).unwrap_err();
    assert!(
        matches!(err, HeapError::Uncorrectable { word: 0, .. }),
        "{err}"
    );
    // rset replaces every word; then free.
    hp.transaction(|tx| tx.rset(p, v)).unwrap();
    assert_eq!(hp.transaction(|tx| tx.rget(p)).unwrap(), v);
    hp.transaction(|tx| tx.free_reliable(p)).unwrap();
    assert!(hp.raw().usable_size(p.offset()).is_none());
}

// ---- crash consistency ------------------------------------------------------------------------

const OBJ_LEN: usize = 256;

/// The base image: a root of 16 bytes (object A's offset, object B's offset) and object A of
/// 256 bytes holding `bytes(100, 256)`.
fn crash_base() -> Vec<u8> {
    let m = sim(vec![0; LEN as usize], CrashPlan::Never, 0);
    RawHeap::format(&*m, 0, LEN, [9; 16], &HeapOptions::small()).unwrap();
    let h = RawHeap::open(m.clone(), 0, LEN).unwrap();
    let (root, _) = h.root(16).unwrap();
    tx(&h, |h, l| {
        let a = alloc_reliable(h, l, OBJ_LEN as u64)?;
        write_reliable(h, l, a, 0, &bytes(100, OBJ_LEN))?;
        h.write(l, root, &a.to_le_bytes())
    })
    .unwrap();
    h.quiesce().unwrap();
    drop(h);
    m.power_fail()
}

/// Transaction 1 overwrites bytes 5..205 of A (unaligned at both ends); transaction 2 makes
/// object B of 40 bytes and links it.
fn crash_steps(h: &RawHeap) -> heap::Result<()> {
    let (root, _) = h.root_line();
    let mut r = [0u8; 8];
    h.read(root, &mut r)?;
    let a = u64::from_le_bytes(r);
    tx(h, |h, l| write_reliable(h, l, a, 5, &bytes(200, 200)))?;
    tx(h, |h, l| {
        let b = alloc_reliable(h, l, 40)?;
        write_reliable(h, l, b, 0, &bytes(300, 40))?;
        h.write(l, root + 8, &b.to_le_bytes())
    })
}

/// (A's content, B's content if linked), read through reliable reads that must need no repair.
fn crash_state(h: &RawHeap, m: &SimMedium, what: &str) -> (Vec<u8>, Option<Vec<u8>>) {
    let (root, _) = h.root_line();
    let mut r = [0u8; 16];
    h.read(root, &mut r).unwrap();
    let a = u64::from_le_bytes(r[..8].try_into().unwrap());
    let b = u64::from_le_bytes(r[8..].try_into().unwrap());
    assert!(
        all_pairs_clean(m, a, OBJ_LEN as u64),
        "{what}: A has a torn pair"
    );
    let (av, fixed) = read_all(h, a, OBJ_LEN).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(fixed, 0, "{what}");
    let bv = (b != 0).then(|| {
        assert!(all_pairs_clean(m, b, 40), "{what}: B has a torn pair");
        read_all(h, b, 40)
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .0
    });
    (av, bv)
}

#[test]
fn reliable_writes_are_crash_consistent_at_every_fence() {
    let base = crash_base();
    let a0 = bytes(100, OBJ_LEN);
    let mut a1 = a0.clone();
    a1[5..205].copy_from_slice(&bytes(200, 200));
    let allowed = [
        (a0.clone(), None),
        (a1.clone(), None),
        (a1.clone(), Some(bytes(300, 40))),
    ];
    for mode in [TxMode::Undo, TxMode::Redo] {
        let mut images = 0;
        let mut seen = [false; 3];
        for n in 1.. {
            let m = sim(base.clone(), CrashPlan::AtFence(n), n);
            let h = RawHeap::open(m.clone(), 0, LEN).unwrap();
            h.set_default_mode(mode);
            let r = crash_steps(&h);
            drop(h);
            let Some(st) = m.crash_state() else {
                r.unwrap();
                break;
            };
            for (i, img) in st.images().into_iter().enumerate() {
                images += 1;
                let what = format!("{mode:?} crash at fence {n}, image {i}");
                let m = sim(img, CrashPlan::Never, 0);
                let h = RawHeap::open(m.clone(), 0, LEN)
                    .unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
                let got = crash_state(&h, &m, &what);
                let k = allowed
                    .iter()
                    .position(|s| *s == got)
                    .unwrap_or_else(|| panic!("{what}: a state no prefix explains"));
                seen[k] = true;
                let rep = scrub(&h, false).unwrap();
                assert!(rep.is_clean(), "{what}: {rep:?}");
            }
        }
        assert!(images > 3, "{mode:?}: {images} images");
        assert!(seen[0] && seen[2], "{mode:?}: {seen:?}");
        println!("{mode:?}: {images} crash images checked");
    }
}

#[test]
fn the_scrubber_never_sees_a_typed_transaction_half_done() {
    heap::pool_tag!(S);
    for mode in [TxMode::Undo, TxMode::Redo] {
        let (_m, raw) = fresh(mode);
        let raw = Arc::new(raw);
        let hp: Heap<S> = Heap::new(Arc::clone(&raw)).unwrap();
        let objs: Vec<_> = (0..4u64)
            .map(|i| hp.transaction(|tx| tx.alloc_reliable([i; 16])).unwrap())
            .collect();
        let s = reliable::Scrubber::spawn(Arc::clone(&raw), Duration::ZERO);
        std::thread::scope(|sc| {
            for t in 0..2u64 {
                let (hp, objs) = (&hp, &objs);
                sc.spawn(move || {
                    let mut r = SplitMix64::new(t);
                    for _ in 0..300 {
                        let p = objs[r.below(4) as usize];
                        let v = r.next_u64();
                        hp.transaction(|tx| {
                            let old = tx.rget(p)?;
                            // Every word of an object always holds the same value.
                            assert!(old.iter().all(|w| *w == old[0]), "{old:?}");
                            tx.rset(p, [v; 16])
                        })
                        .unwrap();
                    }
                });
            }
        });
        let rounds = s.rounds();
        let (fixed, bad) = (s.corrected(), s.uncorrectable());
        s.stop();
        assert!(rounds > 0, "{mode:?}: the scrubber ran");
        assert_eq!(
            (fixed, bad),
            (0, 0),
            "{mode:?}: a scrub saw a half-written pair"
        );
        drop(hp);
    }
}
