//! The block target under garbage: random frames, damaged real sessions and random bytes.
//! Every case checks that the server answers with well-formed replies or closes the
//! connection (never hangs, never sends a malformed reply), that other connections keep being
//! served, and at the end that no connection thread panicked.

mod common;

use common::{Answer, Raw, Rng, TempDir, hello_frame};
use proptest::prelude::*;
use std::net::{Shutdown, SocketAddr};
use target::proto::{self, RequestHeader, op};
use target::server::{ServerOptions, TargetServer};
use target::{Device, Hello, RemoteDevice, Tenant};

/// Run `f` against a server of its own, then check that a good client is still served and
/// that the server stops with no panicked connection thread.
fn with_server(f: impl FnOnce(SocketAddr)) {
    let dir = TempDir::under("/dev/shm");
    let srv = TargetServer::bind("127.0.0.1:0", dir.path(), ServerOptions::default())
        .unwrap()
        .spawn()
        .unwrap();
    let addr = srv.local_addr();
    f(addr);
    still_serving(addr);
    let summary = srv.shutdown().unwrap();
    assert_eq!(summary.panics, 0, "connection threads panicked");
}

/// Send `bytes` as one stream, close our sending side, and read every answer until the server
/// closes. Returns the number of replies. Panics on a malformed reply or a hang (20 s).
fn session(addr: SocketAddr, bytes: &[u8]) -> usize {
    let mut raw = Raw::connect(addr);
    if !raw.send_bytes(bytes) {
        return 0;
    }
    let _ = raw.0.shutdown(Shutdown::Write);
    let mut replies = 0;
    while let Answer::Reply(..) = raw.answer() {
        replies += 1;
    }
    replies
}

/// A good client still gets served.
fn still_serving(addr: SocketAddr) {
    let dev = RemoteDevice::connect(
        &addr.to_string(),
        &Hello {
            job: "healthy".into(),
            len: 1 << 20,
            create: true,
            tenant: Tenant::default(),
        },
    )
    .expect("a good client is served after garbage");
    dev.write_at(77, b"alive").unwrap();
    let mut b = [0u8; 5];
    dev.read_at(77, &mut b).unwrap();
    assert_eq!(&b, b"alive");
}

/// A real session's bytes: HELLO, WRITE, READ, CLAIM, STAT, FLUSH.
fn real_session(job: &str) -> Vec<u8> {
    let (h, body) = hello_frame(job, 1 << 20, true);
    let mut out = h.encode().to_vec();
    out.extend_from_slice(&body);
    let data = b"some bytes to write";
    for (i, (opcode, offset, length, body)) in [
        (op::WRITE, 4096u64, data.len() as u64, &data[..]),
        (op::READ, 4096, data.len() as u64, &[][..]),
        (op::CLAIM, 0, 8192, &[][..]),
        (op::STAT, 0, 0, &[][..]),
        (op::FLUSH, 0, 0, &[][..]),
    ]
    .into_iter()
    .enumerate()
    {
        let h = RequestHeader {
            op: opcode,
            flags: 0,
            id: 2 + i as u64,
            offset,
            length,
            body_len: body.len() as u32,
            body_crc: crc32c::crc32c(body),
        };
        out.extend_from_slice(&h.encode());
        out.extend_from_slice(body);
    }
    out
}

#[test]
fn a_real_session_gets_one_reply_per_request() {
    with_server(|addr| assert_eq!(session(addr, &real_session("real")), 6));
}

#[test]
fn damaged_real_sessions_are_answered_or_closed() {
    with_server(|addr| {
        let clean = real_session("dmg");
        let mut rng = Rng::new(0xbad5eed);
        for round in 0..300 {
            let mut bytes = clean.clone();
            match round % 4 {
                0 => {
                    for _ in 0..1 + rng.below(4) {
                        let at = rng.below(bytes.len() as u64) as usize;
                        bytes[at] ^= 1 << rng.below(8);
                    }
                }
                1 => bytes.truncate(rng.below(bytes.len() as u64) as usize),
                2 => {
                    let at = rng.below(bytes.len() as u64) as usize;
                    let n = 1 + rng.below(64) as usize;
                    let junk = rng.bytes(n);
                    bytes.splice(at..at, junk);
                }
                _ => {
                    let at = rng.below(bytes.len() as u64) as usize;
                    let n = (1 + rng.below(64) as usize).min(bytes.len() - at);
                    bytes.drain(at..at + n);
                }
            }
            let replies = session(addr, &bytes);
            assert!(
                replies <= 6,
                "round {round}: {replies} replies to at most 6 requests"
            );
        }
    });
}

/// One frame of a garbage session.
#[derive(Debug, Clone)]
enum Piece {
    /// A header with these fields (correct CRCs unless `bad_crc`), then its body.
    Frame {
        op: u16,
        flags: u16,
        offset: u64,
        length: u64,
        body: Vec<u8>,
        bad_crc: bool,
    },
    /// A HELLO for a job name (maybe not a valid one).
    Hello { job: String, len: u64, create: bool },
    /// Raw bytes.
    Bytes(Vec<u8>),
}

fn interesting_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        0u64..70_000,
        Just(u64::from(proto::MAX_PAYLOAD)),
        Just(u64::from(proto::MAX_PAYLOAD) + 1),
        Just((1 << 20) - 1),
        Just(u64::MAX),
        any::<u64>(),
    ]
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        (
            0u16..9,
            prop_oneof![Just(0u16), any::<u16>()],
            interesting_u64(),
            interesting_u64(),
            proptest::collection::vec(any::<u8>(), 0..300),
            proptest::bool::weighted(0.2),
        )
            .prop_map(|(op, flags, offset, length, body, bad_crc)| Piece::Frame {
                op,
                flags,
                offset,
                length,
                body,
                bad_crc
            }),
        (
            prop_oneof![
                Just("g1".to_string()),
                Just("g2".to_string()),
                Just("../escape".to_string()),
                "[a-z./\\x00-\\x7f]{0,70}",
            ],
            prop_oneof![
                Just(0u64),
                Just(1u64 << 20),
                0u64..(1 << 22),
                Just(u64::MAX)
            ],
            any::<bool>(),
        )
            .prop_map(|(job, len, create)| Piece::Hello { job, len, create }),
        proptest::collection::vec(any::<u8>(), 0..120).prop_map(Piece::Bytes),
    ]
}

fn encode(pieces: &[Piece]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, p) in pieces.iter().enumerate() {
        match p {
            Piece::Frame {
                op,
                flags,
                offset,
                length,
                body,
                bad_crc,
            } => {
                let h = RequestHeader {
                    op: *op,
                    flags: *flags,
                    id: i as u64,
                    offset: *offset,
                    length: *length,
                    body_len: body.len() as u32,
                    body_crc: crc32c::crc32c(body) ^ u32::from(*bad_crc),
                };
                out.extend_from_slice(&h.encode());
                out.extend_from_slice(body);
            }
            Piece::Hello { job, len, create } => {
                let (h, body) = hello_frame(job, *len, *create);
                out.extend_from_slice(&h.encode());
                out.extend_from_slice(&body);
            }
            Piece::Bytes(b) => out.extend_from_slice(b),
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn random_frames_are_answered_or_closed(pieces in proptest::collection::vec(piece(), 1..12)) {
        let bytes = encode(&pieces);
        // At most one reply per frame (raw bytes can make at most len/48 more).
        let bound: usize = pieces.iter().map(|p| match p {
            Piece::Bytes(b) => b.len() / proto::HEADER_BYTES + 1,
            _ => 1,
        }).sum();
        let mut replies = 0;
        with_server(|addr| replies = session(addr, &bytes));
        prop_assert!(replies <= bound, "{} replies for at most {} frames", replies, bound);
    }
}

#[test]
fn random_bytes_and_cut_sessions_are_answered_or_closed() {
    let mut connections = 0;
    with_server(|addr| {
        let mut rng = Rng::new(99);
        let clean = real_session("p");
        for _ in 0..100 {
            let mut bytes = clean.clone();
            let at = rng.below(bytes.len() as u64) as usize;
            bytes[at] = rng.next() as u8;
            let keep = at + rng.below((bytes.len() - at) as u64 + 1) as usize;
            bytes.truncate(keep);
            session(addr, &bytes);
            let n = rng.below(200) as usize;
            session(addr, &rng.bytes(n));
            connections += 2;
        }
    });
    assert_eq!(connections, 200);
}
