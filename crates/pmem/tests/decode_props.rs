//! Property tests of the pool's decoders: the header copies, the mutable slots, the region
//! directory, the whole metadata area (`Survey::of`, what `pool check` and `open` start from)
//! and `Pool::open_medium` on a damaged pool image. Arbitrary bytes and damaged real encodings
//! decode to a value or a typed error, never a panic; valid values round-trip.

mod props;

use pmem::directory::{Directory, kinds};
use pmem::header::{MutableState, PoolHeader, SlotContent, slot_offset};
use pmem::layout::{
    self, DIRECTORY_COPY_OFFSETS, DIRECTORY_HEADER_BYTES, HEADER_BYTES, HEADER_COPY_OFFSETS,
    METADATA_BYTES, PAGE_SIZE, SLOT_BYTES,
};
use pmem::pool::Survey;
use pmem::{Alignment, Domain, OpenOptions, Pool, Region, SimConfig, SimMedium, Uuid};
use proptest::prelude::*;

const DIR: &str = env!("CARGO_MANIFEST_DIR");
const UUID: Uuid = Uuid([0x5a; 16]);
const POOL_SIZE: u64 = 256 * 1024;

fn header() -> PoolHeader {
    PoolHeader {
        features_compat: 0,
        features_ro_compat: 0,
        features_incompat: 0,
        pool_uuid: UUID,
        set_uuid: Uuid([0x33; 16]),
        member_index: 0,
        member_count: 1,
        domain: Domain::Sim,
        pool_size: POOL_SIZE,
        created_ns: 1_700_000_000_000_000_000,
    }
}

fn state() -> MutableState {
    MutableState {
        sequence: 5,
        clean_shutdown: true,
        directory_generation: 3,
        pool_size: 0,
    }
}

fn directory() -> Directory {
    Directory {
        generation: 3,
        regions: vec![
            Region {
                name: "log".into(),
                kind: kinds::LOG,
                align: Alignment::Page,
                offset: METADATA_BYTES as u64,
                length: 64 * 1024,
            },
            Region {
                name: "heap ü".into(),
                kind: kinds::HEAP,
                align: Alignment::Page,
                offset: METADATA_BYTES as u64 + 64 * 1024,
                length: 128 * 1024,
            },
        ],
    }
}

/// The metadata area of a pool holding [`header`], [`state`] and [`directory`].
fn metadata() -> Vec<u8> {
    let mut m = vec![0u8; METADATA_BYTES];
    let h = header();
    for (copy, at) in HEADER_COPY_OFFSETS.into_iter().enumerate() {
        m[at..at + HEADER_BYTES].copy_from_slice(&h.encode(copy));
    }
    let s = state();
    let at = slot_offset(s.slot_index());
    m[at..at + SLOT_BYTES].copy_from_slice(&s.encode(&UUID));
    let d = directory();
    let at = DIRECTORY_COPY_OFFSETS[d.copy_index()];
    m[at..at + PAGE_SIZE].copy_from_slice(&d.encode(&UUID));
    m
}

fn header_corpus() -> Vec<Vec<u8>> {
    let h = header();
    props::seeds(&props::corpus(
        DIR,
        "pool_header",
        &[
            ("copy0", h.encode(0).to_vec()),
            ("copy1", h.encode(1).to_vec()),
        ],
    ))
}

fn slot_corpus() -> Vec<Vec<u8>> {
    let even = MutableState {
        sequence: 8,
        clean_shutdown: false,
        directory_generation: 1,
        pool_size: 0,
    };
    props::seeds(&props::corpus(
        DIR,
        "slot",
        &[
            ("slot0", even.encode(&UUID).to_vec()),
            ("slot1", state().encode(&UUID).to_vec()),
        ],
    ))
}

fn directory_corpus() -> Vec<Vec<u8>> {
    let empty = Directory {
        generation: 2,
        regions: Vec::new(),
    };
    props::seeds(&props::corpus(
        DIR,
        "directory",
        &[
            ("empty", empty.encode(&UUID)),
            ("two_regions", directory().encode(&UUID)),
        ],
    ))
}

fn metadata_corpus() -> Vec<Vec<u8>> {
    props::seeds(&props::corpus(
        DIR,
        "metadata",
        &[("two_regions", metadata())],
    ))
}

fn reseal_header(b: &mut [u8]) {
    let at = layout::header::CRC32C.offset;
    let crc = crc32c::crc32c(&b[..at]);
    b[at..at + 4].copy_from_slice(&crc.to_le_bytes());
}

fn reseal_slot(b: &mut [u8], index: usize) {
    let at = layout::slot::CRC32C.offset;
    let mut c = crc32c::crc32c(&UUID.0);
    c = crc32c::crc32c_append(c, &(index as u32).to_le_bytes());
    c = crc32c::crc32c_append(c, &b[..at]);
    b[at..at + 4].copy_from_slice(&c.to_le_bytes());
}

fn reseal_directory(b: &mut [u8]) {
    let at = layout::directory::CRC32C.offset;
    let mut c = crc32c::crc32c(&UUID.0);
    c = crc32c::crc32c_append(c, &b[..at]);
    c = crc32c::crc32c_append(c, &b[DIRECTORY_HEADER_BYTES..PAGE_SIZE]);
    b[at..at + 4].copy_from_slice(&c.to_le_bytes());
}

fn check_header(b: &[u8], copy: usize, reseal: bool) {
    let mut b = props::fit(b, HEADER_BYTES);
    if reseal {
        reseal_header(&mut b);
    }
    match PoolHeader::decode(&b, copy) {
        Ok(h) => assert_eq!(&h.encode(copy)[..], &b[..], "accepted bytes"),
        Err(c) => assert!(
            c.offset >= HEADER_COPY_OFFSETS[copy] as u64
                && c.offset < (HEADER_COPY_OFFSETS[copy] + HEADER_BYTES) as u64,
            "{c}"
        ),
    }
}

fn check_slot(b: &[u8], index: usize, reseal: bool) {
    let mut b = props::fit(b, SLOT_BYTES);
    if reseal {
        reseal_slot(&mut b, index);
    }
    match MutableState::decode(&b, index, &UUID) {
        SlotContent::Valid(m) => {
            assert_eq!(m.slot_index(), index);
            assert_eq!(&m.encode(&UUID)[..], &b[..], "accepted bytes");
        }
        SlotContent::Empty => assert!(b.iter().all(|&x| x == 0)),
        SlotContent::Damaged(c) => assert!(c.offset >= slot_offset(index) as u64, "{c}"),
    }
}

fn check_directory(b: &[u8], copy: usize, reseal: bool) {
    let mut b = props::fit(b, PAGE_SIZE);
    if reseal {
        reseal_directory(&mut b);
    }
    let generation = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
    match Directory::decode(&b, copy, &UUID, generation, POOL_SIZE) {
        Ok(d) => {
            assert!(d.regions.iter().all(|r| r.end() <= POOL_SIZE));
            assert_eq!(
                Directory::decode(&d.encode(&UUID), copy, &UUID, generation, POOL_SIZE),
                Ok(d)
            );
        }
        Err(c) => assert!(
            c.offset >= DIRECTORY_COPY_OFFSETS[copy] as u64
                && c.offset < (DIRECTORY_COPY_OFFSETS[copy] + PAGE_SIZE) as u64,
            "{c}"
        ),
    }
}

fn check_metadata(b: &[u8]) {
    let survey = Survey::of(&props::fit(b, METADATA_BYTES));
    let _ = survey.looks_like_pool();
    let _ = survey.header();
    let _ = survey.state();
    let _ = survey.damage();
}

/// A damaged pool image (metadata from `meta`, the region space zero): open it read-only and
/// writable; it opens or refuses with an error.
fn check_open(meta: &[u8], read_only: bool) {
    let mut img = meta.to_vec();
    img.resize(POOL_SIZE as usize, 0);
    let sim = SimMedium::from_image(img, SimConfig::default());
    let opts = OpenOptions {
        read_only,
        ..OpenOptions::default()
    };
    if let Ok(pool) = Pool::open_medium(sim, &opts) {
        for r in pool.regions() {
            assert!(r.end() <= pool.size(), "{r:?}");
        }
    }
}

#[test]
fn every_corpus_file_decodes_and_the_clean_pool_opens() {
    for (i, b) in header_corpus().iter().enumerate() {
        check_header(b, i % 2, false);
    }
    for (i, b) in slot_corpus().iter().enumerate() {
        check_slot(b, i % 2, false);
    }
    for (i, b) in directory_corpus().iter().enumerate() {
        check_directory(b, i % 2, false);
    }
    for b in metadata_corpus() {
        check_metadata(&b);
        check_open(&b, true);
    }
    let mut img = metadata();
    img.resize(POOL_SIZE as usize, 0);
    let pool = Pool::open_medium(
        SimMedium::from_image(img, SimConfig::default()),
        &OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        },
    )
    .expect("the corpus pool opens");
    assert_eq!(pool.regions(), &directory().regions[..]);
}

proptest! {
    #![proptest_config(props::config(256))]

    #[test]
    fn header_arbitrary_and_damaged(
        a in props::exact(HEADER_BYTES),
        b in props::mutated(header_corpus()),
        copy in 0usize..2,
        reseal: bool,
    ) {
        check_header(&a, copy, false);
        check_header(&b, copy, reseal);
    }

    #[test]
    fn header_round_trips(
        pool_uuid: [u8; 16],
        pages in (layout::POOL_SIZE_MIN / 4096)..(layout::POOL_SIZE_MAX / 4096),
        created_ns: u64,
        copy in 0usize..2,
    ) {
        prop_assume!(pool_uuid != [0; 16]);
        let h = PoolHeader {
            pool_uuid: Uuid(pool_uuid),
            pool_size: pages * 4096,
            created_ns,
            ..header()
        };
        prop_assert_eq!(PoolHeader::decode(&h.encode(copy), copy), Ok(h));
    }

    #[test]
    fn slot_arbitrary_and_damaged(
        a in props::exact(SLOT_BYTES),
        b in props::mutated(slot_corpus()),
        index in 0usize..2,
        reseal: bool,
    ) {
        check_slot(&a, index, false);
        check_slot(&b, index, reseal);
    }

    #[test]
    fn slot_round_trips(sequence in 1u64.., clean_shutdown: bool, directory_generation in 1u64..) {
        let m = MutableState { sequence, clean_shutdown, directory_generation, pool_size: 0 };
        prop_assert_eq!(
            MutableState::decode(&m.encode(&UUID), m.slot_index(), &UUID),
            SlotContent::Valid(m)
        );
    }
}

proptest! {
    // Page-sized inputs: fewer cases.
    #![proptest_config(props::config(128))]

    #[test]
    fn directory_arbitrary_and_damaged(
        a in props::exact(PAGE_SIZE),
        b in props::mutated(directory_corpus()),
        copy in 0usize..2,
        reseal: bool,
    ) {
        check_directory(&a, copy, false);
        check_directory(&b, copy, reseal);
    }

    #[test]
    fn metadata_damaged(b in props::mutated(metadata_corpus()), read_only: bool) {
        check_metadata(&b);
        check_open(&b, read_only);
    }
}
