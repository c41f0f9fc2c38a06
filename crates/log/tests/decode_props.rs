//! Property tests of the log's decoders: the descriptor, the superline, the record header, and
//! whole records walked in a log image. Arbitrary bytes and damaged real encodings decode to a
//! value or a typed error, never a panic; valid values round-trip; an accepted descriptor or
//! superline is exactly the encoding of what it decoded to.

#[path = "../../pmem/tests/props/mod.rs"]
mod props;

use std::time::Duration;

use log::format::{LSN_MAX, RecordHeader, valid_word};
use log::layout::{self, DESCRIPTOR_BYTES, SUPERLINE_BYTES};
use log::{Descriptor, ForcePolicy, Log, LogOptions, Superline};
use pmem::{SimConfig, SimMedium, Uuid};
use proptest::prelude::*;

const DIR: &str = env!("CARGO_MANIFEST_DIR");
const UUID: Uuid = Uuid([0x4c; 16]);
const REGION: u64 = 1 << 20;
const IMAGE_REGION: usize = 4096 + 16 * 1024;

fn descriptor() -> Descriptor {
    Descriptor::for_region(UUID, REGION).expect("a 1 MiB log")
}

fn superlines() -> [Superline; 2] {
    [
        Superline {
            sequence: 4,
            head: 640,
            start_lsn: 17,
            epoch: 1,
            durable_lsn: 20,
        },
        Superline {
            sequence: 7,
            head: 0,
            start_lsn: 1,
            epoch: 3,
            durable_lsn: 0,
        },
    ]
}

fn descriptor_corpus() -> Vec<Vec<u8>> {
    let d = descriptor();
    props::seeds(&props::corpus(
        DIR,
        "descriptor",
        &[
            ("copy0", d.encode(0).to_vec()),
            ("copy1", d.encode(1).to_vec()),
        ],
    ))
}

fn superline_corpus() -> Vec<Vec<u8>> {
    let [a, b] = superlines();
    props::seeds(&props::corpus(
        DIR,
        "superline",
        &[
            ("copy0", a.encode(&UUID).to_vec()),
            ("copy1", b.encode(&UUID).to_vec()),
        ],
    ))
}

fn record_header_corpus() -> Vec<Vec<u8>> {
    let data = RecordHeader {
        lsn: 42,
        length: 100,
        kind: layout::kinds::DATA,
        payload_crc: 0xdead_beef,
    };
    let jump = RecordHeader {
        lsn: 7,
        length: 8,
        kind: layout::kinds::JUMP,
        payload_crc: 0x1234_5678,
    };
    props::seeds(&props::corpus(
        DIR,
        "record_header",
        &[
            ("data", data.encode().to_vec()),
            ("jump", jump.encode().to_vec()),
        ],
    ))
}

/// A small log, cleanly closed, whose records wrapped the ring: every payload a run of one
/// byte value.
fn log_image() -> Vec<u8> {
    let sim = SimMedium::new(IMAGE_REGION, SimConfig::default());
    let log = Log::create_with_uuid(sim, 0, IMAGE_REGION, UUID, Duration::from_millis(1))
        .expect("create");
    for i in 0..60u64 {
        let len = (i as usize * 37) % 700;
        let a = log
            .append(&vec![i as u8; len], ForcePolicy::Sync)
            .expect("append");
        if a.lsn > 8 {
            log.cleanup(a.lsn - 8).expect("cleanup");
        }
    }
    log.close().expect("close").durable_image()
}

fn image_corpus() -> Vec<Vec<u8>> {
    props::seeds(&props::corpus(
        DIR,
        "log_image",
        &[("wrapped", log_image())],
    ))
}

/// Re-seal a damaged descriptor's CRC, so the checks behind it are reached.
fn reseal_descriptor(b: &mut [u8]) {
    if b.len() >= DESCRIPTOR_BYTES {
        let at = layout::descriptor::CRC.offset;
        let crc = crc32c::crc32c(&b[..at]);
        b[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Re-seal a damaged superline's CRC (which binds the log UUID and the copy).
fn reseal_superline(b: &mut [u8], copy: usize) {
    if b.len() >= SUPERLINE_BYTES {
        let at = layout::superline::CRC.offset;
        let seed = crc32c::crc32c_append(crc32c::crc32c(&UUID.0), &(copy as u32).to_le_bytes());
        let crc = crc32c::crc32c_append(seed, &b[..at]);
        b[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

fn check_descriptor(b: &[u8], copy: usize) {
    match Descriptor::decode(b, copy, 0x1000, REGION) {
        Ok(d) => assert_eq!(
            &d.encode(copy)[..],
            &b[..DESCRIPTOR_BYTES],
            "accepted bytes"
        ),
        Err(e) => assert!(
            (0x1000..0x1000 + DESCRIPTOR_BYTES as u64).contains(&e.offset),
            "{e}"
        ),
    }
}

fn check_superline(b: &[u8], copy: usize) {
    match Superline::decode(b, copy, 0x80, &UUID, REGION - 4096) {
        Ok(s) => {
            assert_eq!(s.copy(), copy);
            assert_eq!(
                &s.encode(&UUID)[..],
                &b[..SUPERLINE_BYTES],
                "accepted bytes"
            );
        }
        Err(e) => assert!(
            (0x80..0x80 + SUPERLINE_BYTES as u64).contains(&e.offset),
            "{e}"
        ),
    }
}

fn check_record_header(b: &[u8]) {
    match RecordHeader::decode(b, 0x2000) {
        Ok((h, valid, r1, r2)) => {
            assert!(b.len() >= layout::RECORD_HEADER_BYTES);
            let mut again = h.encode();
            again[24..32].copy_from_slice(&valid.to_le_bytes());
            again[14..16].copy_from_slice(&r1.to_le_bytes());
            again[20..24].copy_from_slice(&r2.to_le_bytes());
            assert_eq!(&again[..], &b[..layout::RECORD_HEADER_BYTES]);
        }
        Err(e) => {
            assert!(b.len() < layout::RECORD_HEADER_BYTES, "{e}");
            assert!(e.offset >= 0x2000, "{e}");
        }
    }
}

/// Open a damaged image (clean and unclean, read-only and writable) and walk every record.
fn check_image(mut img: Vec<u8>, read_only: bool, clean: bool) {
    // A cut or extended region keeps whole cache lines (the simulator's unit).
    img.truncate(img.len() / 64 * 64);
    if img.is_empty() {
        return;
    }
    let len = img.len();
    let opts = LogOptions {
        read_only,
        clean_shutdown: clean,
        full_wait: Duration::from_millis(1),
        ..LogOptions::default()
    };
    let sim = SimMedium::from_image(img, SimConfig::default());
    if let Ok((log, _)) = Log::open(sim, 0, len, &opts) {
        for r in log.records() {
            match r {
                Ok(rec) => assert!(
                    rec.payload.windows(2).all(|w| w[0] == w[1]),
                    "LSN {} came back with bytes never written",
                    rec.lsn
                ),
                Err(e) => assert!(e.corruption().is_some(), "{e}"),
            }
        }
    }
}

#[test]
fn every_corpus_file_decodes() {
    for (i, b) in descriptor_corpus().iter().enumerate() {
        check_descriptor(b, i % 2);
    }
    for (i, b) in superline_corpus().iter().enumerate() {
        check_superline(b, i % 2);
    }
    for b in record_header_corpus() {
        check_record_header(&b);
    }
    for img in image_corpus() {
        check_image(img, true, true);
    }
}

proptest! {
    #![proptest_config(props::config(256))]

    #[test]
    fn descriptor_arbitrary_bytes(b in props::bytes(80), copy in 0usize..2) {
        check_descriptor(&b, copy);
    }

    #[test]
    fn descriptor_damaged(mut b in props::mutated(descriptor_corpus()), copy in 0usize..2, reseal: bool) {
        if reseal {
            reseal_descriptor(&mut b);
        }
        check_descriptor(&b, copy);
    }

    #[test]
    fn descriptor_round_trips(
        uuid: [u8; 16],
        region in (4096 + layout::RING_BYTES_MIN)..(1u64 << 36),
        copy in 0usize..2,
    ) {
        let d = Descriptor::for_region(Uuid(uuid), region).expect("in range");
        prop_assert_eq!(Descriptor::decode(&d.encode(copy), copy, 0, region), Ok(d));
    }

    #[test]
    fn superline_arbitrary_bytes(b in props::bytes(80), copy in 0usize..2) {
        check_superline(&b, copy);
    }

    #[test]
    fn superline_damaged(mut b in props::mutated(superline_corpus()), copy in 0usize..2, reseal: bool) {
        if reseal {
            reseal_superline(&mut b, copy);
        }
        check_superline(&b, copy);
    }

    #[test]
    fn superline_round_trips(
        sequence in 1u64..u64::MAX,
        head_lines in 0u64..1000,
        start_lsn in 1..=LSN_MAX,
        epoch in 1u64..,
        durable_lsn in 0..LSN_MAX,
    ) {
        let s = Superline { sequence, head: head_lines * 64, start_lsn, epoch, durable_lsn };
        let copy = s.copy();
        prop_assert_eq!(Superline::decode(&s.encode(&UUID), copy, 0, &UUID, 64_000), Ok(s));
    }

    #[test]
    fn record_header_arbitrary_and_damaged(
        a in props::bytes(40),
        b in props::mutated(record_header_corpus()),
    ) {
        check_record_header(&a);
        check_record_header(&b);
    }

    #[test]
    fn record_header_round_trips(lsn: u64, length: u32, kind: u16, payload_crc: u32) {
        let h = RecordHeader { lsn, length, kind, payload_crc };
        prop_assert_eq!(
            RecordHeader::decode(&h.encode(), 0),
            Ok((h, valid_word(lsn), 0, 0))
        );
    }
}

proptest! {
    // Each case opens and walks a whole log: fewer of them.
    #![proptest_config(props::config(96))]

    #[test]
    fn records_of_a_damaged_image(
        img in props::mutated(image_corpus()),
        read_only: bool,
        clean: bool,
    ) {
        check_image(img, read_only, clean);
    }
}
