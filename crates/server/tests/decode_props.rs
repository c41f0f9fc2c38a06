//! Property tests of the server's decoders: operation records (`oplog`), RESP requests (one-shot
//! and incremental) and RESP replies. Arbitrary bytes and damaged real encodings decode to a
//! value or a typed error, never a panic; valid values round-trip.

#[path = "../../pmem/tests/props/mod.rs"]
mod props;

use proptest::prelude::*;
use server::Limits;
use server::backend::SetOptions;
use server::oplog::Op;
use server::resp::{Parse, Reply, RequestParser, parse_reply, parse_request};

const DIR: &str = env!("CARGO_MANIFEST_DIR");

fn b(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

fn ops() -> Vec<(&'static str, Op)> {
    vec![
        (
            "set",
            Op::Set {
                key: b("k"),
                value: b("vv"),
                opts: SetOptions {
                    expire_at_ms: Some(1_700_000_000_000),
                    only_if_absent: true,
                    only_if_present: false,
                },
            },
        ),
        ("mset", Op::MSet(vec![(b("a"), b("1")), (b("b"), b("2"))])),
        ("del", Op::Del(vec![b("a"), b("b")])),
        ("incrby", Op::IncrBy(b("n"), -5)),
        ("append", Op::Append(b("k"), b("x"))),
        ("hset", Op::HSet(b("h"), vec![(b("f"), b("v"))])),
        ("hdel", Op::HDel(b("h"), vec![b("f")])),
        (
            "zadd",
            Op::ZAdd(b("z"), vec![(1.5, b("m")), (f64::NEG_INFINITY, b("n"))]),
        ),
        ("zrem", Op::ZRem(b("z"), vec![b("m")])),
        ("flushall", Op::FlushAll),
    ]
}

fn oplog_corpus() -> Vec<Vec<u8>> {
    let real: Vec<(&str, Vec<u8>)> = ops().into_iter().map(|(n, op)| (n, op.encode())).collect();
    props::seeds(&props::corpus(DIR, "oplog", &real))
}

fn multibulk(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn request_corpus() -> Vec<Vec<u8>> {
    props::seeds(&props::corpus(
        DIR,
        "resp_request",
        &[
            (
                "set",
                multibulk(&[b"SET", b"key", b"a value\r\nwith a line end"]),
            ),
            ("get", multibulk(&[b"GET", b"key"])),
            ("empty_array", b"*0\r\n".to_vec()),
            (
                "inline",
                b"set k \"quoted \\x41 value\" 'single'\r\n".to_vec(),
            ),
            ("inline_plain", b"PING\n".to_vec()),
        ],
    ))
}

fn reply_corpus() -> Vec<Vec<u8>> {
    let nested = Reply::Array(vec![
        Reply::simple("OK"),
        Reply::Integer(-42),
        Reply::bulk("bytes\r\n"),
        Reply::NullBulk,
        Reply::Array(vec![Reply::Error(b("ERR nope")), Reply::NullArray]),
    ]);
    props::seeds(&props::corpus(
        DIR,
        "resp_reply",
        &[
            ("nested", nested.to_bytes()),
            ("simple", Reply::simple("PONG").to_bytes()),
            ("bulk", Reply::bulk([0u8, 1, 2, 255]).to_bytes()),
        ],
    ))
}

fn small_limits() -> Limits {
    Limits {
        max_bulk_bytes: 64,
        max_multibulk_len: 8,
        max_inline_bytes: 64,
        max_request_bytes: 256,
    }
}

fn check_oplog(p: &[u8]) {
    match Op::decode(p) {
        Ok(op) => assert_eq!(Op::decode(&op.encode()).as_ref(), Ok(&op)),
        Err(e) => {
            assert_eq!(e.structure, "replication op record");
            assert!(e.offset <= p.len() as u64, "{e}");
        }
    }
}

fn check_request(buf: &[u8]) {
    for limits in [Limits::default(), small_limits()] {
        let one_shot = parse_request(buf, &limits);
        if let Parse::Complete(_, used) = &one_shot {
            assert!(*used <= buf.len());
        }
        // The same bytes arriving one at a time end the same way.
        let mut p = RequestParser::new(limits);
        let mut last = Parse::NeedMore;
        for end in 1..=buf.len() {
            last = p.parse(&buf[..end]);
            if !matches!(last, Parse::NeedMore) {
                break;
            }
        }
        if buf.is_empty() {
            continue;
        }
        match (&one_shot, &last) {
            (Parse::Complete(a, n), Parse::Complete(b, m)) => assert_eq!((a, n), (b, m)),
            (Parse::NeedMore, Parse::NeedMore) | (Parse::Error(_), Parse::Error(_)) => {}
            // A request that failed a size limit only once whole may fail it earlier when
            // fed byte by byte, never the other way round.
            (Parse::Error(_), Parse::NeedMore) | (Parse::NeedMore, Parse::Error(_)) => {}
            (x, y) => panic!("one shot {x:?}, incremental {y:?}"),
        }
    }
}

fn check_reply(buf: &[u8]) {
    for limits in [Limits::default(), small_limits()] {
        if let Ok(Some((reply, used))) = parse_reply(buf, &limits) {
            assert!(used <= buf.len());
            // A reply in one protocol re-encodes to the same bytes in that protocol; one that
            // mixes RESP2 nulls with RESP3 kinds (no server sends that) re-encodes as RESP3.
            let (resp3, resp2_nulls) = kinds(&reply);
            let mut again = Vec::new();
            reply.encode_as(&mut again, resp3);
            // The encoder writes a CR inside a simple or error line as a space (a line can
            // never be split); the parser, like Redis clients, takes a bare CR as a byte.
            let bare_cr = buf[..used]
                .windows(2)
                .any(|w| w[0] == b'\r' && w[1] != b'\n');
            let mixed = resp3 && resp2_nulls;
            assert!(
                again == buf[..used] || bare_cr || mixed,
                "{:?}",
                &buf[..used]
            );
            assert_eq!(
                parse_reply(&again, &limits),
                Ok(Some((reply_of(&again), again.len())))
            );
        }
    }
}

/// Whether a reply holds RESP3-only kinds, and whether it holds RESP2 nulls.
fn kinds(reply: &Reply) -> (bool, bool) {
    let fold = |items: &mut dyn Iterator<Item = &Reply>, own: bool| {
        items.fold((own, false), |(a, b), r| {
            let (c, d) = kinds(r);
            (a || c, b || d)
        })
    };
    match reply {
        Reply::NullBulk | Reply::NullArray => (false, true),
        Reply::Null | Reply::Double(_) | Reply::Boolean(_) | Reply::Verbatim(..) => (true, false),
        Reply::Array(items) => fold(&mut items.iter(), false),
        Reply::Set(items) | Reply::Push(items) => fold(&mut items.iter(), true),
        Reply::Map(pairs) => fold(&mut pairs.iter().flat_map(|(k, v)| [k, v]), true),
        Reply::Simple(_) | Reply::Error(_) | Reply::Integer(_) | Reply::Bulk(_) => (false, false),
    }
}

fn reply_of(buf: &[u8]) -> Reply {
    match parse_reply(buf, &Limits::default()) {
        Ok(Some((r, _))) => r,
        other => panic!("{other:?}"),
    }
}

fn line() -> impl Strategy<Value = Vec<u8>> {
    "[a-zA-Z0-9 _-]{0,12}".prop_map(String::into_bytes)
}

fn any_reply() -> impl Strategy<Value = Reply> {
    let leaf = prop_oneof![
        line().prop_map(Reply::Simple),
        line().prop_map(Reply::Error),
        any::<i64>().prop_map(Reply::Integer),
        props::bytes(20).prop_map(Reply::Bulk),
        Just(Reply::NullBulk),
        Just(Reply::NullArray),
        Just(Reply::Null),
        any::<bool>().prop_map(Reply::Boolean),
        line().prop_map(Reply::Double),
        props::bytes(20).prop_map(|b| Reply::Verbatim(*b"txt", b)),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Reply::Array),
            prop::collection::vec(inner.clone(), 0..4).prop_map(Reply::Set),
            prop::collection::vec(inner.clone(), 0..4).prop_map(Reply::Push),
            prop::collection::vec((inner.clone(), inner), 0..3).prop_map(Reply::Map),
        ]
    })
}

fn any_op() -> impl Strategy<Value = Op> {
    let bytes = || props::bytes(8);
    let list = || prop::collection::vec(props::bytes(8), 0..4);
    let pairs = || prop::collection::vec((props::bytes(8), props::bytes(8)), 0..3);
    prop_oneof![
        (
            bytes(),
            bytes(),
            any::<Option<i64>>(),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(
                |(key, value, expire_at_ms, only_if_absent, only_if_present)| Op::Set {
                    key,
                    value,
                    opts: SetOptions {
                        expire_at_ms,
                        only_if_absent,
                        only_if_present,
                    },
                }
            ),
        pairs().prop_map(Op::MSet),
        list().prop_map(Op::Del),
        (bytes(), any::<i64>()).prop_map(|(k, d)| Op::IncrBy(k, d)),
        (bytes(), bytes()).prop_map(|(k, v)| Op::Append(k, v)),
        (bytes(), pairs()).prop_map(|(k, p)| Op::HSet(k, p)),
        (bytes(), list()).prop_map(|(k, f)| Op::HDel(k, f)),
        (
            bytes(),
            prop::collection::vec(
                (
                    any::<f64>().prop_filter("a number", |f| !f.is_nan()),
                    bytes()
                ),
                0..3
            )
        )
            .prop_map(|(k, m)| Op::ZAdd(k, m)),
        (bytes(), list()).prop_map(|(k, m)| Op::ZRem(k, m)),
        Just(Op::FlushAll),
    ]
}

#[test]
fn every_corpus_file_decodes() {
    for p in oplog_corpus() {
        Op::decode(&p).expect("a corpus record");
        check_oplog(&p);
    }
    for r in request_corpus() {
        assert!(matches!(
            parse_request(&r, &Limits::default()),
            Parse::Complete(..)
        ));
        check_request(&r);
    }
    for r in reply_corpus() {
        assert!(matches!(parse_reply(&r, &Limits::default()), Ok(Some(_))));
        check_reply(&r);
    }
}

proptest! {
    #![proptest_config(props::config(256))]

    #[test]
    fn oplog_arbitrary_and_damaged(a in props::bytes(48), d in props::mutated(oplog_corpus())) {
        check_oplog(&a);
        check_oplog(&d);
    }

    #[test]
    fn oplog_round_trips(op in any_op()) {
        prop_assert_eq!(Op::decode(&op.encode()), Ok(op));
    }

    #[test]
    fn requests_arbitrary_and_damaged(a in props::bytes(64), d in props::mutated(request_corpus())) {
        check_request(&a);
        check_request(&d);
    }

    #[test]
    fn requests_round_trip(args in prop::collection::vec(props::bytes(16), 1..6)) {
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let buf = multibulk(&refs);
        match parse_request(&buf, &Limits::default()) {
            Parse::Complete(got, used) => {
                prop_assert_eq!(got, args);
                prop_assert_eq!(used, buf.len());
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }

    #[test]
    fn replies_arbitrary_and_damaged(a in props::bytes(64), d in props::mutated(reply_corpus())) {
        check_reply(&a);
        check_reply(&d);
    }

    #[test]
    fn replies_round_trip(r in any_reply()) {
        // RESP2 trees in RESP2, trees with RESP3 kinds in RESP3 (where both RESP2 nulls become
        // `_`, so a tree mixing them comes back with `Null` in their place).
        let (resp3, resp2_nulls) = kinds(&r);
        let mut buf = Vec::new();
        r.encode_as(&mut buf, resp3);
        let parsed = parse_reply(&buf, &Limits::default());
        if resp3 && resp2_nulls {
            let Ok(Some((tree, used))) = parsed else {
                panic!("{parsed:?}")
            };
            prop_assert_eq!(used, buf.len());
            let mut again = Vec::new();
            tree.encode_as(&mut again, true);
            prop_assert_eq!(again, buf);
        } else {
            prop_assert_eq!(parsed, Ok(Some((r, buf.len()))));
        }
    }
}
