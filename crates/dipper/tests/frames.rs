//! Slot format 2 (tables naming shared page frames): a write loads back byte for byte, a second
//! image shares the unchanged pages' frames, and each damaged field of a table is named by a
//! `Corrupt` error.

use dipper::DipperError;
use dipper::arena::{Arena, PAGE};
use dipper::frames::{Frames, TableGeometry, table_bytes_for};
use dipper::layout::{ENTRY_FRAME_AT, SLOT_ENTRY_BYTES, SLOT_TABLE_AT};
use pmem::{Medium, SimConfig, SimMedium, Uuid};

const UUID: Uuid = Uuid([0x5e; 16]);
const TABLE_AT: u64 = 0x4000;
const FRAMES_AT: u64 = 0x100000;
const FRAMES: u64 = 64;

fn arenas() -> Vec<Arena> {
    (0..2)
        .map(|s| {
            let mut a = Arena::new();
            for i in 0..40 {
                let at = a.alloc(1000).unwrap();
                a.write(at as usize, &[s as u8 * 100 + i as u8; 1000]);
            }
            a
        })
        .collect()
}

fn setup() -> (SimMedium, TableGeometry, Frames) {
    let sim = SimMedium::new(
        (FRAMES_AT + FRAMES * PAGE as u64) as usize,
        SimConfig::default(),
    );
    let geo = TableGeometry::new(1, TABLE_AT, table_bytes_for(64)).unwrap();
    let mut fr = Frames::default();
    fr.add_region(FRAMES_AT, FRAMES * PAGE as u64).unwrap();
    (sim, geo, fr)
}

fn images(a: &[Arena]) -> Vec<Vec<u8>> {
    a.iter().map(|a| a.image().to_vec()).collect()
}

#[test]
fn an_image_loads_back_and_the_next_shares_unchanged_frames() {
    let (sim, geo, mut fr) = setup();
    let mut a = arenas();
    let none: Vec<Vec<usize>> = vec![Vec::new(); 2];
    let (written, pending) = fr.write(&sim, &UUID, &geo, 5, &a, &none).unwrap();
    let pages: u64 = a.iter().map(|a| a.used_pages() as u64).sum();
    assert_eq!(
        written, pages,
        "the first image writes every page below the tops"
    );
    fr.commit(pending);
    assert_eq!(fr.free(), FRAMES - pages);
    let mut loaded = Frames::default();
    loaded.add_region(FRAMES_AT, FRAMES * PAGE as u64).unwrap();
    let back = loaded.load(&sim, &UUID, &geo, 5, 2).unwrap();
    assert_eq!(images(&back), images(&a));
    assert_eq!(loaded.free(), fr.free());
    // Change one page of shard 1: the next image writes that page only, into a free frame.
    for x in &mut a {
        x.track_dirty();
    }
    a[1].write(2000, b"changed");
    let changed: Vec<Vec<usize>> = a.iter_mut().map(Arena::take_dirty).collect();
    assert_eq!(changed[1], vec![0]);
    let (need, _) = fr.needs(&a, &changed);
    assert_eq!(need, 1);
    let other = TableGeometry::new(0, TABLE_AT + 0x40000, table_bytes_for(64)).unwrap();
    let (written, pending) = fr.write(&sim, &UUID, &other, 6, &a, &changed).unwrap();
    assert_eq!(written, 1);
    // The image in force (checkpoint 5) is untouched until the commit and loads still.
    let mut again = Frames::default();
    again.add_region(FRAMES_AT, FRAMES * PAGE as u64).unwrap();
    let before = images(&again.load(&sim, &UUID, &geo, 5, 2).unwrap());
    assert_eq!(
        before[1][2000], 100,
        "shard 1's first block, as written first"
    );
    fr.commit(pending);
    assert_eq!(fr.free(), FRAMES - pages, "one frame freed, one taken");
    let mut newest = Frames::default();
    newest.add_region(FRAMES_AT, FRAMES * PAGE as u64).unwrap();
    assert_eq!(
        images(&newest.load(&sim, &UUID, &other, 6, 2).unwrap()),
        images(&a)
    );
}

/// Write one image, damage the table, and return the loader's error.
fn damaged(edit: impl FnOnce(&SimMedium, &TableGeometry)) -> DipperError {
    let (sim, geo, fr) = setup();
    let a = arenas();
    let none: Vec<Vec<usize>> = vec![Vec::new(); 2];
    fr.write(&sim, &UUID, &geo, 5, &a, &none).unwrap();
    edit(&sim, &geo);
    let mut loaded = Frames::default();
    loaded.add_region(FRAMES_AT, FRAMES * PAGE as u64).unwrap();
    loaded
        .load(&sim, &UUID, &geo, 5, 2)
        .expect_err("damage is found")
}

fn entry_at(geo: &TableGeometry, i: usize, field: usize) -> usize {
    (geo.base as usize) + SLOT_TABLE_AT + i * SLOT_ENTRY_BYTES + field
}

fn field_of(e: &DipperError) -> (String, &'static str) {
    match e {
        DipperError::Corrupt {
            structure, field, ..
        } => (structure.to_string(), field),
        DipperError::Pmem(p) => {
            let c = p.corruption().expect("a corruption");
            (c.structure.clone(), c.field)
        }
        other => panic!("not a corruption: {other}"),
    }
}

#[test]
fn each_damaged_field_is_named() {
    // A frame past the last.
    let e = damaged(|sim, geo| {
        sim.inject(
            entry_at(geo, 0, ENTRY_FRAME_AT),
            &(FRAMES as u32).to_le_bytes(),
        )
        .unwrap()
    });
    assert_eq!(field_of(&e).1, "frame", "{e}");
    // Two entries naming one frame.
    let e = damaged(|sim, geo| {
        let mut b = [0u8; 4];
        sim.read(entry_at(geo, 0, ENTRY_FRAME_AT), &mut b);
        sim.inject(entry_at(geo, 1, ENTRY_FRAME_AT), &b).unwrap()
    });
    assert_eq!(field_of(&e).1, "frame", "{e}");
    // A page whose bytes changed behind the table's back.
    let e = damaged(|sim, _| sim.inject(FRAMES_AT as usize + 100, b"rot").unwrap());
    assert_eq!(field_of(&e), ("frame".to_string(), "crc"), "{e}");
    // A shard out of range.
    let e = damaged(|sim, geo| {
        sim.inject(entry_at(geo, 0, 0), &7u32.to_le_bytes())
            .unwrap()
    });
    assert_eq!(field_of(&e).1, "shard", "{e}");
    // A header of format 1 (or anything else) is not a format-2 slot.
    let e = damaged(|sim, geo| sim.inject(geo.base as usize, b"KVDSLOT1").unwrap());
    assert_eq!(field_of(&e).1, "magic", "{e}");
}
