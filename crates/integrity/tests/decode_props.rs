//! Property tests of the integrity region's decoder of header copies. Arbitrary bytes and damaged real encodings decode to a value or a typed error, never
//! a panic; valid values round-trip; an accepted header is exactly the encoding of what it
//! decoded to.

#[path = "../../pmem/tests/props/mod.rs"]
mod props;

use integrity::Geometry;
use integrity::checksum::{Tag, checksum};
use integrity::header::Header;
use integrity::layout::{
    HEADER_BYTES, PERIOD_MS_MAX, PERIOD_MS_MIN, STRIPE_PAGES_MAX, STRIPE_PAGES_MIN, flags,
    header as h, mode, state,
};
use pmem::Uuid;
use proptest::prelude::*;

const DIR: &str = env!("CARGO_MANIFEST_DIR");
const UUID: Uuid = Uuid([0x1e; 16]);
const AT: u64 = 0x10_0000;
const DATA_PAGES: u64 = 1000;

fn header(mode: u32, state: u32, flags: u32) -> Header {
    Header {
        mode,
        seq: 9,
        uuid: UUID,
        data_offset: 1 << 20,
        geometry: Geometry::new(DATA_PAGES, 4).expect("a geometry"),
        period_ms: 1000,
        state,
        flags,
    }
}

fn header_corpus() -> Vec<Vec<u8>> {
    props::seeds(&props::corpus(
        DIR,
        "header",
        &[
            (
                "lazy_open",
                header(mode::LAZY, state::OPEN, 0).encode().to_vec(),
            ),
            (
                "eager_clean",
                header(mode::EAGER, state::CLEAN, flags::LINES_VALID)
                    .encode()
                    .to_vec(),
            ),
        ],
    ))
}

fn check_header(b: &[u8], reseal: bool) {
    let mut b: [u8; HEADER_BYTES] = props::fit(b, HEADER_BYTES).try_into().expect("fitted");
    if reseal {
        let crc = checksum(&UUID, Tag::Meta, 0, &b[..h::CRC_AT]);
        b[h::CRC_AT..h::CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    }
    match Header::decode(&b, &UUID, AT) {
        Ok(hd) => assert_eq!(hd.encode(), b, "accepted bytes"),
        Err(c) => assert!((AT..AT + HEADER_BYTES as u64).contains(&c.offset), "{c}"),
    }
}

#[test]
fn every_corpus_file_decodes() {
    for b in header_corpus() {
        check_header(&b, false);
    }
}

proptest! {
    #![proptest_config(props::config(256))]

    #[test]
    fn header_arbitrary_and_damaged(
        a in props::exact(HEADER_BYTES),
        b in props::mutated(header_corpus()),
        reseal: bool,
    ) {
        check_header(&a, reseal);
        check_header(&b, reseal);
    }

    #[test]
    fn header_round_trips(
        m in 0..=mode::TXB_PAGE,
        seq: u64,
        data_offset: u64,
        data_pages in 1u64..(1 << 40),
        stripe_pages in STRIPE_PAGES_MIN..=STRIPE_PAGES_MAX,
        period_ms in PERIOD_MS_MIN..=PERIOD_MS_MAX,
        st in state::CLEAN..=state::STALE,
        fl in 0..=flags::KNOWN,
    ) {
        let hd = Header {
            mode: m,
            seq,
            uuid: UUID,
            data_offset,
            geometry: Geometry::new(data_pages, stripe_pages).expect("a geometry"),
            period_ms,
            state: st,
            flags: fl,
        };
        prop_assert_eq!(Header::decode(&hd.encode(), &UUID, 0), Ok(hd));
    }
}
