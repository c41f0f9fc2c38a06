//! `docs/format/replication.md` against the code: the fence and frame field tables, every
//! constant, and real encodings read back at the documented offsets.

use std::path::PathBuf;

use pmem::Uuid;
use pmem::format_doc::{ConstValue, check_fields, compare_constants, doc_constants, verdict};
use replication::copy::{
    FENCE_BYTES, FENCE_COPY_OFFSETS, FENCE_FIELDS, FENCE_MAGIC, Fence, META_SHIPPED_BYTES,
};
use replication::proto::{
    FRAME_BODY_MAX, FRAME_FIELDS, FRAME_HEADER_BYTES, FRAME_MAGIC, REPAIR_CHUNK_BYTES, tags,
};
use replication::{Request, Response};

fn doc() -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/format/replication.md");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn n(v: u64) -> ConstValue {
    ConstValue::number(v)
}

#[test]
fn field_tables_match_the_code() {
    let md = doc();
    check_fields(&md, "fence", &FENCE_FIELDS).expect("fence table");
    check_fields(&md, "frame", &FRAME_FIELDS).expect("frame table");
}

#[test]
fn constants_match_the_code() {
    let code: Vec<(&str, ConstValue)> = vec![
        (
            "FENCE_COPY_OFFSETS",
            ConstValue::Numbers(FENCE_COPY_OFFSETS.iter().map(|&o| o as u64).collect()),
        ),
        ("FENCE_BYTES", n(FENCE_BYTES as u64)),
        ("FENCE_MAGIC", ConstValue::Bytes(FENCE_MAGIC.to_vec())),
        ("META_SHIPPED_BYTES", n(META_SHIPPED_BYTES as u64)),
        ("FRAME_MAGIC", ConstValue::Bytes(FRAME_MAGIC.to_vec())),
        ("FRAME_HEADER_BYTES", n(FRAME_HEADER_BYTES as u64)),
        ("FRAME_BODY_MAX", n(FRAME_BODY_MAX as u64)),
        ("REPAIR_CHUNK_BYTES", n(REPAIR_CHUNK_BYTES as u64)),
        ("tags::PROBE", n(tags::PROBE.into())),
        ("tags::INIT", n(tags::INIT.into())),
        ("tags::PROMISE", n(tags::PROMISE.into())),
        ("tags::WRITE", n(tags::WRITE.into())),
        ("tags::ZERO", n(tags::ZERO.into())),
        ("tags::READ", n(tags::READ.into())),
        ("tags::SNAPSHOT", n(tags::SNAPSHOT.into())),
        ("tags::INFO", n(tags::INFO.into())),
        ("tags::ACK", n(tags::ACK.into())),
        ("tags::DATA", n(tags::DATA.into())),
        ("tags::FENCED", n(tags::FENCED.into())),
        ("tags::ERROR", n(tags::ERROR.into())),
        ("tags::APPLIED", n(tags::APPLIED.into())),
    ];
    let required: Vec<&str> = code.iter().map(|c| c.0).collect();
    let docs = doc_constants(&doc()).expect("constants table");
    verdict("constants", compare_constants(&docs, &code, &required)).expect("constants");
}

#[test]
fn encodings_put_the_fields_where_the_document_says() {
    let uuid = Uuid([9; 16]);
    let f = Fence {
        sequence: 7,
        promised: 42,
    };
    let b = f.encode(&uuid);
    let field = |name: &str| {
        let x = FENCE_FIELDS.iter().find(|x| x.name == name).expect(name);
        &b[x.offset..x.offset + x.size]
    };
    assert_eq!(field("magic"), b"KVREPFNC");
    assert_eq!(field("sequence"), 7u64.to_le_bytes());
    assert_eq!(field("promised"), 42u64.to_le_bytes());
    assert!(field("reserved").iter().all(|&x| x == 0));
    let mut covered = uuid.0.to_vec();
    covered.extend_from_slice(&b[..60]);
    assert_eq!(field("crc32c"), crc32c::crc32c(&covered).to_le_bytes());
    // Another log's UUID never validates it.
    assert_eq!(Fence::decode(&b, &uuid), Some(f));
    assert_eq!(Fence::decode(&b, &Uuid([8; 16])), None);

    let frame = Request::Promise { epoch: 5 }.encode();
    let field = |name: &str| {
        let x = FRAME_FIELDS.iter().find(|x| x.name == name).expect(name);
        frame[x.offset..x.offset + x.size].to_vec()
    };
    assert_eq!(field("magic"), b"KVRP");
    assert_eq!(field("tag"), [tags::PROMISE]);
    assert_eq!(field("reserved"), [0, 0, 0]);
    assert_eq!(field("body_length"), 8u32.to_le_bytes());
    assert_eq!(
        field("body_crc32c"),
        crc32c::crc32c(&5u64.to_le_bytes()).to_le_bytes()
    );
    assert_eq!(&frame[FRAME_HEADER_BYTES..], 5u64.to_le_bytes());
    let fenced = Response::Fenced { promised: 3 }.encode();
    assert_eq!(fenced[4], tags::FENCED);
}
