//! `docs/format/reliable.md` against the code: the documented fields of a pair and of a
//! reliable object hold, at their offsets and sizes, what `heap::reliable` really writes into a
//! heap block, and the documented magic value is the code's.

use std::path::PathBuf;

use heap::ecc;
use heap::reliable::{self, HEADER_BYTES, MAGIC, MAX_LEN, alloc_reliable, write_reliable};
use heap::{HeapOptions, RawHeap};
use pmem::format_doc::{DocField, parse_fields};
use pmem::{CrashPlan, Medium, SimConfig, SimMedium};

const LEN: u64 = 4 << 20;

fn doc() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/format/reliable.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn fields(md: &str, structure: &str) -> Vec<DocField> {
    parse_fields(md, structure).unwrap_or_else(|e| panic!("the `{structure}` table: {e}"))
}

fn field<'a>(f: &'a [DocField], name: &str) -> &'a DocField {
    f.iter()
        .find(|x| x.name == name)
        .unwrap_or_else(|| panic!("no field `{name}`"))
}

fn u64_at(m: &SimMedium, at: u64) -> u64 {
    m.load_u64(at as usize)
}

#[test]
fn the_documented_layout_is_what_the_code_writes() {
    let md = doc();
    let pair = fields(&md, "reliable pair");
    let obj = fields(&md, "reliable object");
    let names: Vec<_> = pair
        .iter()
        .map(|f| (f.name.as_str(), f.offset, f.size))
        .collect();
    assert_eq!(names, [("data", 0, 8), ("check", 8, 8)]);
    let names: Vec<_> = obj
        .iter()
        .map(|f| (f.name.as_str(), f.offset, f.size))
        .collect();
    assert_eq!(
        names,
        [
            ("magic", 0, 8),
            ("magic_check", 8, 8),
            ("len", 16, 8),
            ("len_check", 24, 8),
            ("word_0", HEADER_BYTES, 16),
        ]
    );
    // The magic value and the length bound the document states.
    assert!(md.contains(&format!("`{MAGIC:#018x}`")), "magic value");
    assert_eq!(&MAGIC.to_le_bytes(), b"KVRELOBJ");
    assert!(md.contains("KVRELOBJ"));
    assert_eq!(MAX_LEN, 1 << 40);
    assert!(md.contains("1 to 2^40"));

    // A real object of 21 bytes: 3 words.
    let m = std::sync::Arc::new(SimMedium::from_image(
        vec![0; LEN as usize],
        SimConfig {
            crash: CrashPlan::Never,
            ..SimConfig::default()
        },
    ));
    RawHeap::format(&*m, 0, LEN, [1; 16], &HeapOptions::small()).unwrap();
    let h = RawHeap::open(m.clone(), 0, LEN).unwrap();
    let content: Vec<u8> = (1..=21u8).collect();
    let mut lane = h.lane();
    h.begin(&mut lane);
    let o = alloc_reliable(&h, &mut lane, 21).unwrap();
    write_reliable(&h, &mut lane, o, 0, &content).unwrap();
    h.commit(&mut lane).unwrap();
    drop(lane);
    let at = |name: &str| o + field(&obj, name).offset;
    assert_eq!(u64_at(&m, at("magic")), MAGIC);
    assert_eq!(u64_at(&m, at("magic_check")), ecc::encode(MAGIC));
    assert_eq!(u64_at(&m, at("len")), 21);
    assert_eq!(u64_at(&m, at("len_check")), ecc::encode(21));
    // Word i is the pair at 32 + 16 i; logical byte b is byte b % 8 of word b / 8; the bytes
    // past len are zero.
    let mut padded = content.clone();
    padded.resize(24, 0);
    let stride = field(&obj, "word_0").size;
    for i in 0..reliable::words(21) {
        let p = at("word_0") + i * stride;
        let w = u64_at(&m, p + field(&pair, "data").offset);
        let e = u64_at(&m, p + field(&pair, "check").offset);
        let want = u64::from_le_bytes(
            padded[(i * 8) as usize..(i * 8 + 8) as usize]
                .try_into()
                .unwrap(),
        );
        assert_eq!(w, want, "word {i}");
        assert_eq!(e, ecc::encode(w), "check word {i}");
        // The check word's halves, as the document defines them.
        let d = ecc::crc32c_raw(w);
        assert_eq!(e as u32, d);
        assert_eq!((e >> 32) as u32, (w >> 32) as u32 ^ w as u32 ^ d);
    }
    // The block is at least the documented size.
    assert!(h.usable_size(o).unwrap() >= 32 + 16 * 3);
    assert_eq!(reliable::block_bytes(21), 32 + 16 * 3);
}
