//! Property tests of DIPPER's decoders: the root copies (alone and as `Root::load` reads them),
//! the shadow slot (header, page table and pages, as `slot::load` reads them) and the arena
//! image the slot's pages rebuild. Arbitrary bytes and damaged real encodings decode to a value
//! or a typed error, never a panic; valid values round-trip.

#[path = "../../pmem/tests/props/mod.rs"]
mod props;

use dipper::DipperError;
use dipper::arena::Arena;
use dipper::layout::{
    ROOT_BYTES, ROOT_COPY_OFFSETS, ROOT_CRC_AT, SHARDS_MAX, SLOT_CRC_AT, SLOT_LENGTHS_AT,
    SLOT_NONE, SLOT_TABLE_AT, STATE_CHECKPOINTING, STATE_IDLE,
};
use dipper::root::Root;
use dipper::slot::{self, SlotGeometry, SlotMap};
use pmem::{Medium, SimConfig, SimMedium, Uuid};
use proptest::prelude::*;

const DIR: &str = env!("CARGO_MANIFEST_DIR");
const UUID: Uuid = Uuid([0xd1; 16]);
const AT: u64 = 0x4000;

fn root() -> Root {
    Root {
        seq: 7,
        active: 1,
        state: STATE_CHECKPOINTING,
        slot: 0,
        shards: 4,
        checkpoint: 3,
        machine: 0,
    }
}

fn root_crc(copy: usize, covered: &[u8]) -> u32 {
    let seed = crc32c::crc32c_append(crc32c::crc32c(&UUID.0), &(copy as u32).to_le_bytes());
    crc32c::crc32c_append(seed, covered)
}

fn root_corpus() -> Vec<Vec<u8>> {
    let fresh = Root {
        seq: 2,
        active: 0,
        state: STATE_IDLE,
        slot: SLOT_NONE,
        shards: 1,
        checkpoint: 0,
        machine: 0,
    };
    props::seeds(&props::corpus(
        DIR,
        "root",
        &[
            ("fresh_copy0", fresh.encode(&UUID, 0).to_vec()),
            ("checkpointing_copy1", root().encode(&UUID, 1).to_vec()),
            (
                "machine_word_copy0",
                Root {
                    seq: 5,
                    machine: 1,
                    ..root()
                }
                .encode(&UUID, 0)
                .to_vec(),
            ),
        ],
    ))
}

/// An arena with a few blocks allocated and one freed.
fn arena() -> Arena {
    let mut a = Arena::new();
    let x = a.alloc_copy(b"first block").expect("alloc");
    a.alloc_copy(&[7u8; 300]).expect("alloc");
    a.alloc_copy(b"third").expect("alloc");
    a.free(x, 11);
    a.set_user(0, 12345);
    a
}

fn arena_corpus() -> Vec<Vec<u8>> {
    props::seeds(&props::corpus(
        DIR,
        "arena",
        &[("three_blocks", arena().image().to_vec())],
    ))
}

/// A slot region holding one shard's arena at checkpoint 3.
const SLOT_LEN: usize = 16384 + 4096 + 16 * 4096;
const SLOT_INDEX: u32 = 1;
const CHECKPOINT: u64 = 3;

fn slot_geometry() -> SlotGeometry {
    SlotGeometry::new(SLOT_INDEX, 0, SLOT_LEN as u64).expect("a slot")
}

fn slot_image() -> Vec<u8> {
    let sim = SimMedium::new(SLOT_LEN, SimConfig::default());
    let mut map = SlotMap::empty(1);
    slot::write(
        &sim,
        &UUID,
        &slot_geometry(),
        CHECKPOINT,
        &[arena()],
        None,
        &mut map,
    )
    .expect("write the slot");
    sim.durable_image()
}

/// The slot's header and the start of its page table: where damage is interesting (the pages
/// themselves are guarded by their CRCs).
const SLOT_META: usize = SLOT_TABLE_AT + 16 * 16;

fn slot_corpus() -> Vec<Vec<u8>> {
    props::seeds(&props::corpus(DIR, "slot", &[("one_shard", slot_image())]))
}

fn check_root(b: &[u8], copy: usize, reseal: bool) {
    let mut b: [u8; ROOT_BYTES] = props::fit(b, ROOT_BYTES).try_into().expect("fitted");
    if reseal {
        let crc = root_crc(copy, &b[..ROOT_CRC_AT]);
        b[ROOT_CRC_AT..ROOT_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    }
    match Root::decode(&b, &UUID, copy, AT) {
        Ok(r) => {
            assert!(r.shards >= 1 && r.shards as usize <= SHARDS_MAX);
            assert_eq!(
                Root::decode(&r.encode(&UUID, copy), &UUID, copy, AT).ok(),
                Some(r)
            );
        }
        Err(DipperError::Corrupt { offset, .. }) => {
            assert!((AT..AT + ROOT_BYTES as u64).contains(&offset))
        }
        Err(e) => panic!("not a corruption: {e}"),
    }
}

/// Both root copies from `a` and `b`, loaded as the store does.
fn check_root_load(a: &[u8], b: &[u8]) {
    let sim = SimMedium::new(4096, SimConfig::default());
    sim.write(ROOT_COPY_OFFSETS[0], &props::fit(a, ROOT_BYTES));
    sim.write(ROOT_COPY_OFFSETS[1], &props::fit(b, ROOT_BYTES));
    if let Ok((r, _)) = Root::load(&sim, 0, &UUID) {
        assert!(r.active <= 1);
    }
}

/// A slot image whose header and table start are `meta` (re-sealed when asked), loaded as a
/// checkpoint's recovery does.
fn check_slot(image: &[u8], meta: &[u8], reseal: bool) {
    let mut img = image.to_vec();
    let meta = props::fit(meta, SLOT_META);
    img[..SLOT_META].copy_from_slice(&meta);
    if reseal {
        let seed = crc32c::crc32c_append(crc32c::crc32c(&UUID.0), &SLOT_INDEX.to_le_bytes());
        let crc = crc32c::crc32c_append(
            crc32c::crc32c_append(seed, &img[..SLOT_CRC_AT]),
            &img[SLOT_LENGTHS_AT..SLOT_LENGTHS_AT + 8],
        );
        img[SLOT_CRC_AT..SLOT_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    }
    let sim = SimMedium::from_image(img, SimConfig::default());
    let geo = slot_geometry();
    match slot::load(&sim, &UUID, &geo, CHECKPOINT, 1) {
        Ok((arenas, map)) => {
            assert_eq!(arenas.len(), 1);
            assert!(map.used() <= geo.capacity);
        }
        Err(DipperError::Corrupt { .. }) => {}
        Err(e) => panic!("not a corruption: {e}"),
    }
}

#[test]
fn every_corpus_file_decodes() {
    let roots = root_corpus();
    for (i, b) in roots.iter().enumerate() {
        check_root(b, i % 2, false);
    }
    check_root_load(&roots[0], &roots[1]);
    for b in arena_corpus() {
        Arena::from_image(b).expect("the corpus arena");
    }
    for img in slot_corpus() {
        check_slot(&img, &img[..SLOT_META], false);
        let (arenas, _) = slot::load(
            &SimMedium::from_image(img, SimConfig::default()),
            &UUID,
            &slot_geometry(),
            CHECKPOINT,
            1,
        )
        .expect("the corpus slot loads");
        assert_eq!(arenas[0].image(), arena().image());
    }
}

proptest! {
    #![proptest_config(props::config(256))]

    #[test]
    fn root_arbitrary_and_damaged(
        a in props::exact(ROOT_BYTES),
        b in props::mutated(root_corpus()),
        copy in 0usize..2,
        reseal: bool,
    ) {
        check_root(&a, copy, reseal);
        check_root(&b, copy, reseal);
        check_root_load(&a, &b);
    }

    #[test]
    fn root_round_trips(
        seq: u64,
        active in 0u32..2,
        checkpointing: bool,
        slot in prop_oneof![Just(SLOT_NONE), 0u32..2],
        shards in 1u32..=SHARDS_MAX as u32,
        checkpoint in 1u64..,
        copy in 0usize..2,
        machine: u32,
    ) {
        let r = Root {
            seq,
            active,
            state: if checkpointing { STATE_CHECKPOINTING } else { STATE_IDLE },
            slot,
            shards,
            checkpoint: if slot == SLOT_NONE { 0 } else { checkpoint },
            machine,
        };
        prop_assert_eq!(Root::decode(&r.encode(&UUID, copy), &UUID, copy, 0).ok(), Some(r));
    }

    #[test]
    fn arena_image_damaged(b in props::mutated(arena_corpus())) {
        let len = b.len();
        if let Ok(a) = Arena::from_image(b) {
            prop_assert_eq!(a.len(), len);
            prop_assert!(a.top() <= len);
        }
    }
}

proptest! {
    // Each case loads a whole slot: fewer of them.
    #![proptest_config(props::config(128))]

    #[test]
    fn slot_damaged(
        meta in props::mutated(slot_corpus().into_iter().map(|i| i[..SLOT_META].to_vec()).collect()),
        reseal: bool,
    ) {
        let image = &slot_corpus()[0];
        check_slot(image, &meta, reseal);
    }
}
