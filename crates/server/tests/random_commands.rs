//! Seeded random requests built from real command names and argument words that exercise the
//! validation paths: every request gets exactly one well-formed reply, the connection survives,
//! and the backend never sees an invalid argument (the reference backend asserts no NaN score).

mod support;

use server::resp::Reply;
use support::{TestServer, frame};

/// SplitMix64, so the test needs no external crate and is the same on every run.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Command names to draw from: every implemented command except those that end the
/// connection or the server (quit, shutdown), plus unknown and mixed-case names.
fn names() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = support::COMMANDS
        .iter()
        .copied()
        .filter(|n| !["quit", "shutdown"].contains(n))
        .collect();
    v.extend(["auth", "nosuch", "GET", "ZaDd"]);
    v
}

const WORDS: &[&str] = &[
    "",
    "0",
    "1",
    "-1",
    "2",
    "10",
    "1.5",
    "inf",
    "+inf",
    "-inf",
    "(1",
    "(",
    "nan",
    "-nan",
    "ex",
    "px",
    "exat",
    "pxat",
    "nx",
    "xx",
    "keepttl",
    "limit",
    "withscores",
    "match",
    "count",
    "type",
    "string",
    "hash",
    "zset",
    "*",
    "[",
    "[a-",
    "\\",
    "k",
    "h",
    "z",
    "k*",
    "9223372036854775807",
    "-9223372036854775808",
    "1e400",
    "1e-400",
    "setname",
    "getname",
    "id",
    "info",
    "setinfo",
    "lib-name",
    "get",
    "set",
    "docs",
    "list",
    "resetstat",
    "rewrite",
    "server",
    "all",
    "async",
    "default",
    "3",
    "2",
    "auth",
    "0x10",
    " 1",
    "1 ",
];

#[test]
fn random_requests_each_get_one_reply() {
    let server = TestServer::default_config();
    let mut c = server.client();
    let mut rng = SplitMix(0x5eed_0fc0_ffee);
    let names = names();
    for _batch in 0..1000 {
        let mut requests = Vec::new();
        let count = 1 + rng.below(100);
        for _ in 0..count {
            let mut args: Vec<Vec<u8>> = vec![names[rng.below(names.len())].as_bytes().to_vec()];
            for _ in 0..rng.below(7) {
                if rng.below(10) == 0 {
                    let len = rng.below(12);
                    args.push((0..len).map(|_| rng.next() as u8).collect());
                } else {
                    args.push(WORDS[rng.below(WORDS.len())].as_bytes().to_vec());
                }
            }
            let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            requests.extend(frame(&refs));
        }
        c.send_raw(&requests);
        for _ in 0..count {
            // read_reply panics on a malformed reply or a closed connection.
            let reply = c.read_reply();
            if let Reply::Error(e) = &reply {
                assert!(!e.is_empty() && !e.contains(&b'\n') && !e.contains(&b'\r'));
            }
        }
    }
    c.send_raw(b"PING\r\n");
    assert_eq!(c.read_reply_bytes(), b"+PONG\r\n");
}
