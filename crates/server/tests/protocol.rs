//! Framing over real sockets: pipelining, inline commands, partial frames, malformed and
//! oversized requests, large values and backpressure.

mod support;

use std::io::Write;
use std::net::Shutdown;

use server::Limits;
use support::{Client, TestServer, expect, frame, show};

#[test]
fn pipeline_of_1000_requests_in_one_write() {
    let server = TestServer::default_config();
    let mut c = server.client();
    let mut batch = Vec::new();
    let mut expected = Vec::new();
    for i in 0..1000 {
        let key = format!("k{}", i / 4);
        match i % 4 {
            0 => {
                batch.extend(frame(&[b"SET", key.as_bytes(), i.to_string().as_bytes()]));
                expected.extend_from_slice(b"+OK\r\n");
            }
            1 => {
                batch.extend(frame(&[b"GET", key.as_bytes()]));
                let v = (i - 1).to_string();
                expected.extend(format!("${}\r\n{v}\r\n", v.len()).into_bytes());
            }
            2 => {
                batch.extend(frame(&[b"INCR", key.as_bytes()]));
                expected.extend(format!(":{}\r\n", i - 1).into_bytes());
            }
            _ => {
                batch.extend(b"PING\r\n");
                expected.extend_from_slice(b"+PONG\r\n");
            }
        }
    }
    c.send_raw(&batch);
    let mut got = Vec::new();
    while got.len() < expected.len() {
        got.extend(c.read_reply_bytes());
    }
    assert_eq!(show(&got), show(&expected));
}

#[test]
fn inline_commands() {
    let server = TestServer::default_config();
    let mut c = server.client();
    c.send_raw(b"PING\r\n");
    assert_eq!(c.read_reply_bytes(), b"+PONG\r\n");
    // Blank lines are ignored; `\n` alone ends a line; quotes group words.
    c.send_raw(b"\r\n\nSET \"a key\" 'a value'\nGET \"a key\"\r\nECHO \"\\x41\\tb\"\r\n");
    assert_eq!(c.read_reply_bytes(), b"+OK\r\n");
    assert_eq!(c.read_reply_bytes(), b"$7\r\na value\r\n");
    assert_eq!(c.read_reply_bytes(), b"$3\r\nA\tb\r\n");
    c.send_raw(b"ping\r\n*1\r\n$4\r\nPING\r\nPING x\r\n");
    assert_eq!(c.read_reply_bytes(), b"+PONG\r\n");
    assert_eq!(c.read_reply_bytes(), b"+PONG\r\n");
    assert_eq!(c.read_reply_bytes(), b"$1\r\nx\r\n");
    // Empty multibulk requests are ignored, as in Redis.
    c.send_raw(b"*0\r\n*-1\r\nPING\r\n");
    assert_eq!(c.read_reply_bytes(), b"+PONG\r\n");
    c.send_raw(b"ECHO \"unbalanced\r\n");
    assert_eq!(
        show(&c.read_to_close()),
        show(b"-ERR Protocol error: unbalanced quotes in request\r\n")
    );
}

#[test]
fn frames_split_into_single_bytes() {
    let server = TestServer::default_config();
    let mut c = server.client();
    let mut batch = frame(&[b"SET", b"key", b"value with \r\n inside"]);
    batch.extend(frame(&[b"GET", b"key"]));
    batch.extend(b"PING\r\n");
    for byte in &batch {
        c.stream.write_all(std::slice::from_ref(byte)).unwrap();
    }
    assert_eq!(c.read_reply_bytes(), b"+OK\r\n");
    assert_eq!(c.read_reply_bytes(), b"$20\r\nvalue with \r\n inside\r\n");
    assert_eq!(c.read_reply_bytes(), b"+PONG\r\n");
}

#[test]
fn malformed_frame_closes_only_its_connection() {
    let server = TestServer::default_config();
    let mut bystander = server.client();
    expect(&mut bystander, "SET a 1", "+OK\r\n");
    let cases: &[(&[u8], &str)] = &[
        (
            b"*1\r\n$x\r\n",
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*1\r\n$-1\r\n",
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*x\r\n",
            "-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"*2\r\n$3\r\nGET\r\nxx\r\n",
            "-ERR Protocol error: expected '$', got 'x'\r\n",
        ),
        (
            b"*1\r\n$4\r\nPINGxx",
            "-ERR Protocol error: expected CRLF after bulk data\r\n",
        ),
        (
            b"*1\r\n$4\xff\xfe\r\n",
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*\x001\r\n",
            "-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"PING\r\n*1\r\n$x\r\n",
            "+PONG\r\n-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*3000000\r\n",
            "-ERR Protocol error: invalid multibulk length 3000000 (at most 1048576)\r\n",
        ),
        (
            b"*1\r\n$1111111111111111111111111111111111111111\r\n",
            "-ERR Protocol error: too big bulk count string\r\n",
        ),
    ];
    for (input, want) in cases {
        let mut c = server.client();
        c.send_raw(input);
        assert_eq!(
            show(&c.read_to_close()),
            show(want.as_bytes()),
            "input {}",
            show(input)
        );
        expect(&mut bystander, "GET a", "$1\r\n1\r\n");
    }
    let mut c = bystander;
    expect(&mut c, "INCR a", ":2\r\n");
}

#[test]
fn oversized_lengths_are_refused_before_the_data_arrives() {
    let limits = Limits {
        max_bulk_bytes: 1024,
        max_multibulk_len: 8,
        max_inline_bytes: 64,
        max_request_bytes: 4096,
    };
    let server = TestServer::start(|c| c.limits = limits);
    let mut bystander = server.client();
    // Only the header is sent: the refusal cannot depend on receiving (or allocating) the data.
    let mut c = server.client();
    c.send_raw(b"*2\r\n$4\r\nECHO\r\n$1000000000000\r\n");
    assert_eq!(
        show(&c.read_to_close()),
        show(b"-ERR Protocol error: invalid bulk length 1000000000000 (at most 1024 bytes)\r\n")
    );
    let mut c = server.client();
    c.send_raw(b"*9\r\n");
    assert_eq!(
        show(&c.read_to_close()),
        show(b"-ERR Protocol error: invalid multibulk length 9 (at most 8)\r\n")
    );
    let mut c = server.client();
    c.send_raw(&[b'A'; 100]);
    assert_eq!(
        show(&c.read_to_close()),
        show(b"-ERR Protocol error: too big inline request\r\n")
    );
    // Many arguments, each within limits, but too much for one request.
    let mut c = server.client();
    let mut big = b"*8\r\n$3\r\nDEL\r\n".to_vec();
    for _ in 0..7 {
        big.extend(format!("$1000\r\n{}\r\n", "k".repeat(1000)).into_bytes());
    }
    c.send_raw(&big);
    assert_eq!(
        show(&c.read_to_close()),
        show(b"-ERR Protocol error: request exceeds 4096 bytes\r\n")
    );
    // A value at the limit, sent in pieces, is accepted once complete; meanwhile others are
    // served.
    let mut c = server.client();
    let value = vec![b'v'; 1024];
    let request = frame(&[b"ECHO", &value]);
    let (head, tail) = request.split_at(30);
    c.send_raw(head);
    expect(&mut bystander, "PING", "+PONG\r\n");
    c.send_raw(tail);
    let mut want = b"$1024\r\n".to_vec();
    want.extend_from_slice(&value);
    want.extend_from_slice(b"\r\n");
    assert_eq!(c.read_reply_bytes(), want);
    expect(&mut bystander, "PING", "+PONG\r\n");
}

#[test]
fn large_values_and_backpressure() {
    let server = TestServer::default_config();
    let mut c = server.client();
    let value: Vec<u8> = (0..5 << 20).map(|i: u32| (i % 251) as u8).collect();
    assert_eq!(c.call_args(&[b"SET", b"big", &value]), b"+OK\r\n");
    let mut want = format!("${}\r\n", value.len()).into_bytes();
    want.extend_from_slice(&value);
    want.extend_from_slice(b"\r\n");
    assert_eq!(c.call_args(&[b"GET", b"big"]), want);
    // 40 pipelined GETs (200 MiB of replies would be too much to hold; the server pauses
    // reading this client while its replies are unsent, then resumes).
    let mut batch = Vec::new();
    for _ in 0..40 {
        batch.extend(frame(&[b"GET", b"big"]));
    }
    batch.extend(b"PING\r\n");
    c.send_raw(&batch);
    for i in 0..40 {
        assert!(c.read_reply_bytes() == want, "reply {i}");
    }
    assert_eq!(c.read_reply_bytes(), b"+PONG\r\n");
}

#[test]
fn half_closed_client_gets_its_replies() {
    let server = TestServer::default_config();
    let mut c = server.client();
    c.send_raw(b"PING\r\nECHO done\r\n");
    c.stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(show(&c.read_to_close()), show(b"+PONG\r\n$4\r\ndone\r\n"));
}

#[test]
fn quit_replies_then_closes() {
    let server = TestServer::default_config();
    let mut c = server.client();
    c.send_raw(b"PING\r\nQUIT\r\nPING\r\n");
    assert_eq!(show(&c.read_to_close()), show(b"+PONG\r\n+OK\r\n"));
    let mut c = Client::connect(server.addr);
    expect(&mut c, "PING", "+PONG\r\n");
}
