//! Helpers shared by the target's tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A fresh directory under `base`, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn under(base: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = Path::new(base).join(format!(
            "kavach-target-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create a temp dir");
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A deterministic stream for the tests: pmem's seeded generator plus a byte helper.
pub struct Rng(pmem::rng::SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(pmem::rng::SplitMix64::new(seed))
    }
    pub fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.below(n.max(1))
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

use std::io::{Read, Write};
use std::net::TcpStream;
use target::proto::{HEADER_BYTES, ReplyHeader, RequestHeader};

/// A raw connection for tests that speak the protocol by hand.
pub struct Raw(pub TcpStream);

/// What came back for a raw request.
#[derive(Debug)]
pub enum Answer {
    /// A well-formed reply: its header, message and data.
    Reply(ReplyHeader, String, Vec<u8>),
    /// The server closed the connection (or reset it) without a reply.
    Closed,
}

impl Raw {
    pub fn connect(addr: std::net::SocketAddr) -> Raw {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        Raw(s)
    }

    pub fn send_bytes(&mut self, bytes: &[u8]) -> bool {
        self.0.write_all(bytes).is_ok()
    }

    pub fn request(&mut self, h: &RequestHeader, body: &[u8]) -> Answer {
        let mut out = h.encode().to_vec();
        out.extend_from_slice(body);
        if !self.send_bytes(&out) {
            return Answer::Closed;
        }
        self.answer()
    }

    /// Read one reply, checking everything a client checks; panics on a malformed reply (the
    /// server must never send one).
    pub fn answer(&mut self) -> Answer {
        let mut hb = [0u8; HEADER_BYTES];
        match self.0.read_exact(&mut hb) {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::UnexpectedEof
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::BrokenPipe
                ) =>
            {
                return Answer::Closed;
            }
            Err(e) => panic!("reading a reply: {e}"),
        }
        let h = ReplyHeader::decode(&hb).expect("the server sent a malformed reply header");
        let mut msg = vec![0u8; h.message_len as usize];
        self.0.read_exact(&mut msg).expect("the reply's message");
        let mut data = vec![0u8; h.data_len as usize];
        self.0.read_exact(&mut data).expect("the reply's data");
        let crc = crc32c::crc32c_append(crc32c::crc32c(&msg), &data);
        assert_eq!(crc, h.body_crc, "reply body CRC");
        Answer::Reply(h, String::from_utf8(msg).expect("UTF-8 message"), data)
    }
}

/// A HELLO request for `job`.
pub fn hello_frame(job: &str, len: u64, create: bool) -> (RequestHeader, Vec<u8>) {
    let body = target::proto::encode_hello(&target::Hello {
        job: job.into(),
        len,
        create,
        tenant: target::Tenant::default(),
    });
    (
        RequestHeader {
            op: target::proto::op::HELLO,
            flags: if create {
                target::proto::FLAG_CREATE
            } else {
                0
            },
            id: 1,
            offset: 0,
            length: len,
            body_len: body.len() as u32,
            body_crc: crc32c::crc32c(&body),
        },
        body,
    )
}
