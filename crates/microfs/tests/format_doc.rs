//! `docs/format/microfs.md` against the code: every field table and the constants table say
//! what `microfs::layout` and `microfs::label` say, the kinds table names every record kind
//! with its value, and the bytes the code writes sit where the tables put them.

use std::sync::Arc;

use microfs::device::{Device, MemDevice};
use microfs::layout::{self, Field, Superblock, kinds};
use microfs::{Fs, FsOptions, Kind, NamespaceId, label};
use pmem::format_doc::{backticked, check_fields, compare_constants, named_rows, verdict};

fn doc() -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/format/microfs.md");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn assert_fields(structure: &str, code: &[Field]) {
    if let Err(e) = check_fields(&doc(), structure, code) {
        panic!("{e}");
    }
}

#[test]
fn field_tables_match_the_code() {
    assert_fields("superblock", layout::SUPERBLOCK_FIELDS);
    assert_fields("extent-slot", layout::EXTENT_SLOT_FIELDS);
    assert_fields("checkpoint", layout::CHECKPOINT_FIELDS);
    assert_fields("dirent", layout::DIRENT_FIELDS);
    assert_fields("record", layout::RECORD_FIELDS);
    assert_fields("label", layout::LABEL_FIELDS);
}

#[derive(Debug, PartialEq)]
enum V {
    N(Vec<u64>),
    B(Vec<u8>),
}

fn parse_value(cell: &str) -> V {
    if let Some(b) = backticked(cell) {
        return V::B(b.as_bytes().to_vec());
    }
    V::N(
        cell.split(',')
            .map(|x| {
                x.trim()
                    .parse::<u64>()
                    .unwrap_or_else(|_| panic!("`{cell}` is not a number list"))
            })
            .collect(),
    )
}

#[test]
fn constants_table_matches_the_code() {
    let md = doc();
    let rows = named_rows(
        &md,
        "<!-- constants -->",
        "| constant | value | meaning |",
        0,
    )
    .unwrap();
    let docs: Vec<(String, V)> = rows
        .iter()
        .map(|r| (r.name.to_string(), parse_value(r.cells[1])))
        .collect();
    let n = |v: u64| V::N(vec![v]);
    let code = vec![
        ("SUPERBLOCK_MAGIC", V::B(layout::SUPERBLOCK_MAGIC.to_vec())),
        ("FORMAT_VERSION", n(layout::FORMAT_VERSION as u64)),
        (
            "SUPERBLOCK_OFFSETS",
            V::N(layout::SUPERBLOCK_OFFSETS.to_vec()),
        ),
        ("SUPERBLOCK_BYTES", n(layout::SUPERBLOCK_BYTES as u64)),
        (
            "EXTENT_SLOT_OFFSETS",
            V::N(layout::EXTENT_SLOT_OFFSETS.to_vec()),
        ),
        ("EXTENT_SLOT_BYTES", n(layout::EXTENT_SLOT_BYTES as u64)),
        (
            "EXTENT_SLOT_MAGIC",
            V::B(layout::EXTENT_SLOT_MAGIC.to_vec()),
        ),
        ("CHECKPOINT_MAGIC", V::B(layout::CHECKPOINT_MAGIC.to_vec())),
        ("LOG_OFFSET", n(layout::LOG_OFFSET)),
        ("LOG_BYTES_MIN", n(layout::LOG_BYTES_MIN)),
        ("LOG_BYTES_DEFAULT", n(layout::LOG_BYTES_DEFAULT)),
        ("HUGEBLOCK_MIN", n(layout::HUGEBLOCK_MIN as u64)),
        ("HUGEBLOCK_DEFAULT", n(layout::HUGEBLOCK_DEFAULT as u64)),
        ("HUGEBLOCK_MAX", n(layout::HUGEBLOCK_MAX as u64)),
        ("NAME_MAX", n(layout::NAME_MAX as u64)),
        ("ROOT_INO", n(layout::ROOT_INO)),
        ("NO_SLOT", n(layout::NO_SLOT as u64)),
        ("LABEL_MAGIC", V::B(label::LABEL_MAGIC.to_vec())),
        ("LABEL_BYTES", n(label::LABEL_BYTES as u64)),
        ("LABEL_AREA", n(label::LABEL_AREA)),
        ("PARTS_MAX", n(label::PARTS_MAX as u64)),
    ];
    let required: Vec<&str> = code.iter().map(|(k, _)| *k).collect();
    verdict("constants", compare_constants(&docs, &code, &required)).unwrap();
}

#[test]
fn kinds_table_names_every_record_kind() {
    let md = doc();
    let rows = named_rows(
        &md,
        "<!-- kinds -->",
        "| kind | value | fields after the provenance |",
        0,
    )
    .unwrap();
    let got: Vec<(String, u64)> = rows
        .iter()
        .map(|r| (r.name.to_string(), r.cells[1].parse().unwrap()))
        .collect();
    let want = [
        ("CREATE", kinds::CREATE),
        ("WRITE", kinds::WRITE),
        ("TRUNCATE", kinds::TRUNCATE),
        ("REMOVE", kinds::REMOVE),
        ("RENAME", kinds::RENAME),
        ("SETATTR", kinds::SETATTR),
    ];
    let want: Vec<(String, u64)> = want
        .iter()
        .map(|(k, v)| (k.to_string(), *v as u64))
        .collect();
    assert_eq!(got, want);
}

fn field<'a>(fields: &[Field], name: &str, bytes: &'a [u8]) -> &'a [u8] {
    let f = fields
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no field {name}"));
    &bytes[f.offset..f.offset + f.size]
}
fn le(b: &[u8]) -> u64 {
    b.iter().rev().fold(0, |a, &x| (a << 8) | x as u64)
}

#[test]
fn bytes_sit_where_the_tables_say() {
    // The superblock, with a distinct value in each field.
    let sb = Superblock {
        sequence: 0x1111,
        hugeblock: 65536,
        job: "jobname".into(),
        rank: 0x2222,
        epoch: 0x3333,
        capacity: 0x4444,
        log_offset: 0x5555,
        log_bytes: 0x6666,
        slot_offsets: [0x7777, 0x8888],
        slot_bytes: 0x9999,
        data_offset: 0xaaaa,
        blocks: 0xbbbb,
        active_slot: 1,
        clean: 1,
        checkpoint_seq: 0xcccc,
        checkpoint_lsn: 0xdddd,
        checkpoint_len: 0xeeee,
        checkpoint_crc: 0xffff,
    };
    let b = sb.encode();
    let f = layout::SUPERBLOCK_FIELDS;
    assert_eq!(b.len(), layout::SUPERBLOCK_BYTES);
    assert_eq!(field(f, "magic", &b), &layout::SUPERBLOCK_MAGIC);
    for (name, v) in [
        ("version", 1),
        ("hugeblock", 65536),
        ("sequence", 0x1111),
        ("rank", 0x2222),
        ("epoch", 0x3333),
        ("capacity", 0x4444),
        ("log_offset", 0x5555),
        ("log_bytes", 0x6666),
        ("slot0_offset", 0x7777),
        ("slot1_offset", 0x8888),
        ("slot_bytes", 0x9999),
        ("data_offset", 0xaaaa),
        ("blocks", 0xbbbb),
        ("active_slot", 1),
        ("clean", 1),
        ("checkpoint_seq", 0xcccc),
        ("checkpoint_lsn", 0xdddd),
        ("checkpoint_len", 0xeeee),
        ("checkpoint_crc", 0xffff),
        ("crc32c", crc32c::crc32c(&b[..508]) as u64),
    ] {
        assert_eq!(le(field(f, name, &b)), v, "superblock field {name}");
    }
    assert_eq!(&field(f, "job", &b)[..8], b"\x07jobname");
    assert!(field(f, "reserved", &b).iter().all(|&x| x == 0));

    // A directory entry.
    let e = layout::dirent_bytes(layout::dirent::ADD, Kind::Dir, "abc", 0x0102);
    let f = layout::DIRENT_FIELDS;
    assert_eq!(
        (
            le(field(f, "op", &e)),
            le(field(f, "kind", &e)),
            le(field(f, "name_len", &e)),
            le(field(f, "ino", &e))
        ),
        (1, 2, 3, 0x0102)
    );
    assert_eq!(&e[layout::dirent::HEADER_BYTES..], b"abc");

    // The label.
    let dev = MemDevice::new(8 << 20);
    let l = label::write(&dev, "jj", 2).unwrap();
    let mut b = vec![0u8; label::LABEL_BYTES];
    dev.read_at(0, &mut b).unwrap();
    let f = layout::LABEL_FIELDS;
    assert_eq!(field(f, "magic", &b), &label::LABEL_MAGIC);
    assert_eq!(
        (
            le(field(f, "parts", &b)),
            le(field(f, "segment", &b)),
            le(field(f, "first", &b)),
            le(field(f, "job_len", &b))
        ),
        (2, l.segment, l.first, 2)
    );
    assert_eq!(&b[34..36], b"jj");

    // The write-extent slot and a checkpoint, as a namespace writes them.
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(8 << 20));
    let o = FsOptions {
        log_bytes: 64 << 10,
        background_checkpoint: false,
        ..FsOptions::default()
    };
    let fs = Fs::format(
        dev.clone(),
        &o,
        &NamespaceId {
            job: "j".into(),
            rank: 0,
        },
    )
    .unwrap();
    let ino = fs.create("f", 0o644, true, false).unwrap();
    fs.write_at(ino, 0, b"x").unwrap();
    let mut slot = vec![0u8; layout::EXTENT_SLOT_BYTES];
    dev.read_at(layout::EXTENT_SLOT_OFFSETS[1], &mut slot)
        .unwrap();
    let f = layout::EXTENT_SLOT_FIELDS;
    assert_eq!(field(f, "magic", &slot), &layout::EXTENT_SLOT_MAGIC);
    assert_eq!(le(field(f, "sequence", &slot)), 1);
    let len = le(field(f, "length", &slot)) as usize;
    assert_eq!(
        le(field(f, "crc32c", &slot)),
        crc32c::crc32c(&slot[24..24 + len]) as u64
    );
    fs.checkpoint().unwrap();
    let sb = fs.superblock();
    let mut ck = vec![0u8; sb.checkpoint_len as usize];
    dev.read_at(sb.slot_offsets[sb.active_slot as usize], &mut ck)
        .unwrap();
    let f = layout::CHECKPOINT_FIELDS;
    assert_eq!(field(f, "magic", &ck), &layout::CHECKPOINT_MAGIC);
    assert_eq!(
        (
            le(field(f, "sequence", &ck)),
            le(field(f, "lsn", &ck)),
            le(field(f, "length", &ck))
        ),
        (sb.checkpoint_seq, sb.checkpoint_lsn, ck.len() as u64 - 36)
    );
    assert_eq!(
        le(field(f, "crc32c", &ck)),
        crc32c::crc32c(&ck[36..]) as u64
    );
    assert_eq!(crc32c::crc32c(&ck), sb.checkpoint_crc);
}
