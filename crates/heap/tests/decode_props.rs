//! Property tests of the heap's decoders: the header copies, chunk-table words, undo entry
//! headers and the scan of a lane's undo log. Arbitrary bytes and damaged real encodings decode
//! to a value or a typed error (or, for the undo scan, a shorter list of entries), never a
//! panic; valid values round-trip; an accepted header is exactly the encoding of what it
//! decoded to.

#[path = "../../pmem/tests/props/mod.rs"]
mod props;

use heap::HeapError;
use heap::layout::{
    ChunkWord, DEFAULT_REDO_BYTES, Geometry, HEADER_COPY_0, HEADER_COPY_1, HEADER_CRC_AT, Header,
    UNDO_ALIGN, UNDO_BIT_OR, UNDO_HEADER_BYTES, UndoHeader,
};
use heap::raw::{UndoKind, scan_undo};
use pmem::{Medium, SimConfig, SimMedium};
use proptest::prelude::*;

const DIR: &str = env!("CARGO_MANIFEST_DIR");
const REGION: u64 = 64 << 20;
const HEADER_LEN: usize = HEADER_CRC_AT + 4;

fn header() -> Header {
    let geo = Geometry::plan(REGION, 8, 64 * 1024, DEFAULT_REDO_BYTES).expect("a geometry");
    Header {
        uuid: [0x48; 16],
        geo,
    }
}

fn header_corpus() -> Vec<Vec<u8>> {
    props::seeds(&props::corpus(
        DIR,
        "header",
        &[("eight_lanes", header().encode().to_vec())],
    ))
}

/// A lane small enough for its undo area to be a corpus file: one lane of 8 KiB, 1 KiB of redo.
fn undo_geometry() -> Geometry {
    Geometry::plan(1 << 20, 1, 8192, 1024).expect("a small geometry")
}

const SEQ: u64 = 7;

/// A lane's undo area holding three entries of transaction [`SEQ`]: a snapshot, a bit entry and
/// another snapshot, then zeros.
fn undo_area() -> Vec<u8> {
    let g = undo_geometry();
    let mut area = vec![0u8; g.undo_bytes() as usize];
    let mut pos = 0usize;
    for (offset, len_field, payload) in [
        (g.zone_off + 64, 40u32, vec![0xabu8; 40]),
        (
            g.zone_off + 8,
            UNDO_BIT_OR,
            0x0f0fu64.to_le_bytes().to_vec(),
        ),
        (g.zone_off + 4096, 3u32, vec![1, 2, 3]),
    ] {
        let mut entry = vec![0u8; UNDO_HEADER_BYTES as usize + payload.len()];
        entry[UNDO_HEADER_BYTES as usize..].copy_from_slice(&payload);
        let mut h = UndoHeader {
            seq: SEQ,
            offset,
            len: len_field,
            crc: 0,
        };
        h.write(&mut entry);
        h.crc = crc32c::crc32c_append(crc32c::crc32c(&entry[..20]), &payload);
        h.write(&mut entry);
        area[pos..pos + entry.len()].copy_from_slice(&entry);
        pos += (entry.len() as u64).div_ceil(UNDO_ALIGN) as usize * UNDO_ALIGN as usize;
    }
    area
}

fn undo_corpus() -> Vec<Vec<u8>> {
    props::seeds(&props::corpus(
        DIR,
        "undo_area",
        &[("three_entries", undo_area())],
    ))
}

fn check_header(b: &[u8], copy_at: u64, reseal: bool) {
    let mut b = b.to_vec();
    if reseal && b.len() >= HEADER_LEN {
        let crc = crc32c::crc32c(&b[..HEADER_CRC_AT]);
        b[HEADER_CRC_AT..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
    }
    match Header::decode(&b, copy_at, REGION) {
        Ok(h) => {
            // Every field but `header_bytes` (documented as written, not checked) and the CRC
            // over it is the encoding of what was decoded.
            let want = h.encode();
            assert_eq!(want[..12], b[..12], "accepted bytes");
            assert_eq!(
                want[16..HEADER_CRC_AT],
                b[16..HEADER_CRC_AT],
                "accepted bytes"
            );
        }
        Err(HeapError::Corrupt(c)) => assert!(
            (copy_at..copy_at + HEADER_LEN as u64).contains(&c.offset),
            "{c}"
        ),
        Err(e) => panic!("not a corruption: {e}"),
    }
}

/// Scan a damaged undo area: whatever comes back lies inside the area and names transaction
/// [`SEQ`].
fn check_undo(area: &[u8]) {
    let g = undo_geometry();
    let start = g.undo(0) as usize;
    let len = (start + g.undo_bytes() as usize).next_multiple_of(64);
    let sim = SimMedium::new(len, SimConfig::default());
    let n = area.len().min(g.undo_bytes() as usize);
    sim.write(start, &area[..n]);
    let end = g.undo(0) + g.undo_bytes();
    for e in scan_undo(&sim, 0, &g, 0, SEQ) {
        assert!(e.len > 0);
        assert!(e.data_at >= g.undo(0) + UNDO_HEADER_BYTES);
        assert!(e.data_at + e.len <= end, "{e:?}");
        if e.kind != UndoKind::Snapshot {
            assert_eq!(e.len, 8);
        }
    }
}

#[test]
fn every_corpus_file_decodes() {
    for b in header_corpus() {
        check_header(&b, HEADER_COPY_0, false);
    }
    for area in undo_corpus() {
        check_undo(&area);
    }
    // The real undo area scans back to its three entries.
    let g = undo_geometry();
    let start = g.undo(0) as usize;
    let sim = SimMedium::new(
        (start + g.undo_bytes() as usize).next_multiple_of(64),
        SimConfig::default(),
    );
    sim.write(start, &undo_area());
    let kinds: Vec<UndoKind> = scan_undo(&sim, 0, &g, 0, SEQ)
        .iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        [UndoKind::Snapshot, UndoKind::BitOr, UndoKind::Snapshot]
    );
}

proptest! {
    #![proptest_config(props::config(256))]

    #[test]
    fn header_arbitrary_and_damaged(
        a in props::bytes(120),
        b in props::mutated(header_corpus()),
        copy1: bool,
        reseal: bool,
    ) {
        let at = if copy1 { HEADER_COPY_1 } else { HEADER_COPY_0 };
        check_header(&a, at, reseal);
        check_header(&b, at, reseal);
    }

    #[test]
    fn header_round_trips(
        uuid: [u8; 16],
        lanes in 1u32..=64,
        lane_pages in 2u32..=64,
        redo_lines in 16u32..=64,
    ) {
        let Ok(geo) = Geometry::plan(REGION, lanes, lane_pages * 4096, redo_lines * 64) else {
            return Ok(());
        };
        let h = Header { uuid, geo };
        prop_assert_eq!(Header::decode(&h.encode(), HEADER_COPY_0, REGION).ok(), Some(h));
    }

    #[test]
    fn chunk_words_decode_or_refuse(word: u64, count in 1u64..100_000, index_seed: u64) {
        let index = index_seed % count;
        if let Ok(w) = ChunkWord::decode(word, index, count, 0x8000) {
            prop_assert_eq!(w.encode(index), word);
            if let ChunkWord::Large(span) = w {
                prop_assert!(index + u64::from(span) <= count);
            }
        }
    }

    #[test]
    fn undo_header_reads_every_field_or_refuses(b in props::bytes(40)) {
        match UndoHeader::decode(&b, 0x100) {
            Ok(h) => {
                let mut again = [0u8; UNDO_HEADER_BYTES as usize];
                h.write(&mut again);
                prop_assert_eq!(&again[..], &b[..UNDO_HEADER_BYTES as usize]);
            }
            Err(e) => prop_assert!(b.len() < UNDO_HEADER_BYTES as usize, "{}", e),
        }
    }

    #[test]
    fn undo_scan_of_a_damaged_area(area in props::mutated(undo_corpus())) {
        check_undo(&area);
    }
}
