//! Property tests of the replication protocol's decoders: frame headers, whole frames (split
//! from a buffer and read from a stream) and every request and response body. Arbitrary bytes
//! and damaged real frames decode to a message or a typed error, never a panic; every message
//! round-trips.

#[path = "../../pmem/tests/props/mod.rs"]
mod props;

use std::io::Cursor;

use log::Extent;
use proptest::prelude::*;
use replication::proto::{
    self, CopyInfo, FRAME_HEADER_BYTES, FrameError, Request, Response, read_frame, split_frame,
};

const DIR: &str = env!("CARGO_MANIFEST_DIR");

fn info() -> CopyInfo {
    CopyInfo {
        uuid: [1; 16],
        region_len: 1 << 20,
        ring_bytes: (1 << 20) - 4096,
        promised: 4,
        epoch: 3,
        head: 640,
        start_lsn: 7,
        next_lsn: 90,
        used: 9000,
        damaged: true,
        meta_damaged: false,
        committed: 88,
    }
}

fn samples() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("probe", Request::Probe.encode()),
        (
            "init",
            Request::Init {
                uuid: [7; 16],
                region_len: 1 << 20,
            }
            .encode(),
        ),
        ("promise", Request::Promise { epoch: 9 }.encode()),
        (
            "write",
            Request::Write {
                epoch: 3,
                committed: 17,
                extents: vec![
                    Extent {
                        offset: 4096,
                        bytes: vec![1, 2, 3],
                    },
                    Extent {
                        offset: 128,
                        bytes: vec![9; 64],
                    },
                ],
            }
            .encode(),
        ),
        (
            "zero",
            Request::Zero {
                epoch: 2,
                offset: 8192,
                len: 100,
            }
            .encode(),
        ),
        ("read", Request::Read { offset: 1, len: 2 }.encode()),
        ("info_none", Response::Info(None).encode()),
        ("info", Response::Info(Some(info())).encode()),
        ("ack", Response::Ack.encode()),
        ("data", Response::Data(vec![5; 10]).encode()),
        ("fenced", Response::Fenced { promised: 4 }.encode()),
        ("error", Response::Error("refused".into()).encode()),
    ]
}

fn frame_corpus() -> Vec<Vec<u8>> {
    props::seeds(&props::corpus(DIR, "frame", &samples()))
}

/// Make a damaged frame's header agree with its body again (length and CRC), so the body
/// decoders are reached.
fn reseal(f: &mut [u8]) {
    if f.len() >= FRAME_HEADER_BYTES {
        let body_len = (f.len() - FRAME_HEADER_BYTES) as u32;
        let crc = crc32c::crc32c(&f[FRAME_HEADER_BYTES..]);
        f[8..12].copy_from_slice(&body_len.to_le_bytes());
        f[12..16].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Decode a frame both ways (split from a buffer, read from a stream) and its body as a
/// request and as a response. Whatever decodes re-encodes to the same frame.
fn check(f: &[u8]) {
    if let Ok((tag, body)) = split_frame(f) {
        if let Ok(req) = Request::decode(tag, body) {
            assert_eq!(req.encode(), f, "accepted request");
        }
        match Response::decode(tag, body) {
            // An error text is decoded lossily: only a UTF-8 one re-encodes byte for byte.
            Ok(Response::Error(_)) => {}
            Ok(resp) => assert_eq!(resp.encode(), f, "accepted response"),
            Err(e) => assert!(e.offset >= FRAME_HEADER_BYTES || e.field == "tag", "{e}"),
        }
    }
    match read_frame(&mut Cursor::new(f)) {
        // A stream holds more than one frame: what follows this one is the next one's.
        Ok((tag, body)) => assert_eq!(
            split_frame(&f[..FRAME_HEADER_BYTES + body.len()]).ok(),
            Some((tag, &body[..]))
        ),
        Err(FrameError::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof),
        Err(FrameError::Proto(_)) => {}
    }
}

fn any_request() -> impl Strategy<Value = Request> {
    prop_oneof![
        Just(Request::Probe),
        (any::<[u8; 16]>(), any::<u64>())
            .prop_map(|(uuid, region_len)| Request::Init { uuid, region_len }),
        any::<u64>().prop_map(|epoch| Request::Promise { epoch }),
        (
            any::<u64>(),
            any::<u64>(),
            prop::collection::vec((any::<u64>(), props::bytes(40)), 0..4)
        )
            .prop_map(|(epoch, committed, ex)| Request::Write {
                epoch,
                committed,
                extents: ex
                    .into_iter()
                    .map(|(offset, bytes)| Extent { offset, bytes })
                    .collect(),
            }),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(epoch, offset, len)| Request::Zero {
            epoch,
            offset,
            len
        }),
        (any::<u64>(), any::<u64>()).prop_map(|(offset, len)| Request::Read { offset, len }),
        (
            any::<[u64; 3]>(),
            any::<bool>(),
            proptest::collection::vec(any::<u8>(), 0..64)
        )
            .prop_map(|([epoch, lsn, seq], last, data)| Request::Snapshot {
                epoch,
                lsn,
                seq,
                last,
                data
            }),
    ]
}

fn any_response() -> impl Strategy<Value = Response> {
    prop_oneof![
        Just(Response::Info(None)),
        (
            any::<[u64; 9]>(),
            any::<[u8; 16]>(),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(v, uuid, damaged, meta_damaged)| {
                Response::Info(Some(CopyInfo {
                    uuid,
                    region_len: v[0],
                    ring_bytes: v[1],
                    promised: v[2],
                    epoch: v[3],
                    head: v[4],
                    start_lsn: v[5],
                    next_lsn: v[6],
                    used: v[7],
                    committed: v[8],
                    damaged,
                    meta_damaged,
                }))
            }),
        Just(Response::Ack),
        props::bytes(64).prop_map(Response::Data),
        any::<u64>().prop_map(|promised| Response::Fenced { promised }),
        ".{0,40}".prop_map(Response::Error),
        any::<u64>().prop_map(|applied| Response::Applied { applied }),
    ]
}

#[test]
fn every_corpus_file_decodes() {
    for f in frame_corpus() {
        check(&f);
        let (tag, body) = split_frame(&f).expect("a corpus frame");
        assert!(
            Request::decode(tag, body).is_ok() || Response::decode(tag, body).is_ok(),
            "tag {tag}"
        );
    }
}

proptest! {
    #![proptest_config(props::config(256))]

    #[test]
    fn frame_header_arbitrary(h: [u8; FRAME_HEADER_BYTES]) {
        if let Ok((_, len, _)) = proto::parse_header(&h) {
            prop_assert!(len <= proto::FRAME_BODY_MAX);
        }
    }

    #[test]
    fn arbitrary_frames(f in props::bytes(96), sealed: bool) {
        let mut f = f;
        if sealed {
            reseal(&mut f);
        }
        check(&f);
    }

    #[test]
    fn damaged_frames(f in props::mutated(frame_corpus()), sealed: bool) {
        let mut f = f;
        if sealed {
            reseal(&mut f);
        }
        check(&f);
    }

    #[test]
    fn bodies_of_any_tag(tag: u8, body in props::bytes(120)) {
        let _ = Request::decode(tag, &body);
        let _ = Response::decode(tag, &body);
    }

    #[test]
    fn requests_round_trip(r in any_request()) {
        let f = r.encode();
        let (tag, body) = split_frame(&f).expect("a frame just encoded");
        prop_assert_eq!(Request::decode(tag, body).expect("decodes"), r);
    }

    #[test]
    fn responses_round_trip(r in any_response()) {
        let f = r.encode();
        let (tag, body) = split_frame(&f).expect("a frame just encoded");
        prop_assert_eq!(Response::decode(tag, body).expect("decodes"), r);
    }
}
