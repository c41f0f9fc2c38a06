//! The block target over TCP: namespaces, durability across a restart, claims across
//! connections, limits, and the answers to requests that break the protocol.

mod common;

use common::{Answer, Raw, Rng, TempDir, hello_frame};
use std::time::{Duration, Instant};
use target::proto::{self, RequestHeader, op, status};
use target::server::{ServerOptions, TargetServer};
use target::{Device, DeviceError, Direct, Hello, RemoteDevice, Tenant};

fn hello(job: &str, len: u64, create: bool) -> Hello {
    Hello {
        job: job.into(),
        len,
        create,
        tenant: Tenant { class: 1, level: 2 },
    }
}

fn serve(dir: &std::path::Path, opts: ServerOptions) -> target::server::ServerHandle {
    TargetServer::bind("127.0.0.1:0", dir, opts)
        .expect("bind")
        .spawn()
        .expect("spawn")
}

#[test]
fn a_remote_namespace_reads_what_was_written_after_reconnect_and_restart() {
    let d = TempDir::under("/dev/shm");
    let srv = serve(d.path(), ServerOptions::default());
    let addr = srv.local_addr().to_string();
    assert!(matches!(
        RemoteDevice::connect(&addr, &hello("job1", 0, false)),
        Err(DeviceError::Refused { .. })
    ));
    let dev = RemoteDevice::connect(&addr, &hello("job1", 32 << 20, true)).expect("create");
    assert!(dev.created());
    assert_eq!(dev.capacity(), 32 << 20);
    assert_eq!(dev.label(), format!("tcp://{addr}/job1"));
    assert!(d.path().join("job1.ns").is_file());
    // Random IO, some of it bigger than one request's payload.
    let mut rng = Rng::new(42);
    let mut model = vec![0u8; 32 << 20];
    for i in 0..60 {
        let len = if i % 20 == 0 {
            (20 << 20) + rng.below(1000) as usize
        } else {
            rng.below(100_000) as usize
        };
        let off = rng.below((model.len() - len) as u64) as usize;
        let data = rng.bytes(len);
        dev.write_at(off as u64, &data).unwrap();
        model[off..off + len].copy_from_slice(&data);
        let mut back = vec![0u8; len];
        dev.read_at(off as u64, &mut back).unwrap();
        assert!(back == data, "read back {i}");
    }
    assert!(matches!(
        dev.write_at((32 << 20) - 1, b"ab"),
        Err(DeviceError::Range { .. })
    ));
    dev.flush().unwrap();
    assert_eq!(dev.stat().unwrap().0, 32 << 20);
    // A second connection sees the same bytes; a bigger size than the namespace, asked for
    // as a requirement (no create flag), is refused.
    let other = RemoteDevice::connect(&addr, &hello("job1", 0, false)).unwrap();
    assert!(!other.created());
    let mut all = vec![0u8; model.len()];
    other.read_at(0, &mut all).unwrap();
    assert!(all == model);
    assert!(matches!(
        RemoteDevice::connect(&addr, &hello("job1", 64 << 20, false)),
        Err(DeviceError::Refused { .. })
    ));
    drop(other);
    // Restart the server: everything acknowledged is there.
    let summary = srv.shutdown().unwrap();
    assert_eq!(summary.panics, 0);
    assert!(summary.connections >= 3);
    let e = dev.read_at(0, &mut [0u8; 10]).unwrap_err();
    assert!(matches!(e, DeviceError::Io { .. }), "{e}");
    let e = dev.read_at(0, &mut [0u8; 10]).unwrap_err();
    assert!(e.to_string().contains("lost earlier"), "{e}");
    let srv = serve(d.path(), ServerOptions::default());
    let dev =
        RemoteDevice::connect(&srv.local_addr().to_string(), &hello("job1", 0, false)).unwrap();
    let mut all = vec![0u8; model.len()];
    dev.read_at(0, &mut all).unwrap();
    assert!(all == model);
    drop(dev);
    assert_eq!(srv.shutdown().unwrap().panics, 0);
}

#[test]
fn namespaces_are_separate_files_with_checked_names() {
    let d = TempDir::under("/tmp");
    let srv = serve(d.path(), ServerOptions::default());
    let addr = srv.local_addr();
    let a = RemoteDevice::connect(&addr.to_string(), &hello("a", 1 << 20, true)).unwrap();
    let b = RemoteDevice::connect(&addr.to_string(), &hello("b", 2 << 20, true)).unwrap();
    a.write_at(0, b"from a").unwrap();
    let mut got = [0u8; 6];
    b.read_at(0, &mut got).unwrap();
    assert_eq!(got, [0u8; 6]);
    assert_eq!(b.capacity(), 2 << 20);
    // A create HELLO for an existing namespace opens it at its own size (a restart with
    // another default size); without the create flag a larger size is a requirement, refused.
    let a2 = RemoteDevice::connect(&addr.to_string(), &hello("a", 1 << 30, true)).unwrap();
    assert_eq!(a2.capacity(), 1 << 20);
    assert!(!a2.created());
    a2.read_at(0, &mut got).unwrap();
    assert_eq!(&got, b"from a");
    drop(a2);
    assert!(matches!(
        RemoteDevice::connect(&addr.to_string(), &hello("a", 1 << 30, false)),
        Err(DeviceError::Refused { .. })
    ));
    // On ext4 the namespace is O_DIRECT: block size 4096.
    assert_eq!(a.block_size(), 4096);
    // Names that would escape the directory: refused by the client, and by the server when
    // sent by hand.
    for bad in ["../x", "..", ".", "a/b", "", "x\0y", "ä"] {
        assert!(matches!(
            RemoteDevice::connect(&addr.to_string(), &hello(bad, 1 << 20, true)),
            Err(DeviceError::Invalid { .. })
        ));
        let mut raw = Raw::connect(addr);
        let (h, body) = hello_frame(bad, 1 << 20, true);
        match raw.request(&h, &body) {
            Answer::Reply(r, msg, _) => {
                assert_eq!(r.status, status::INVALID, "{bad:?}: {msg}");
                assert!(msg.contains("job name"), "{msg}");
            }
            Answer::Closed => panic!("{bad:?}: closed without an answer"),
        }
        assert!(
            matches!(raw.answer(), Answer::Closed),
            "a failed HELLO ends the connection"
        );
    }
    let mut names: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, [".kavach-target.lock", "a.ns", "b.ns"]);
    assert!(!d.path().parent().unwrap().join("x.ns").exists());
    // A second server cannot take the directory.
    let e = TargetServer::bind("127.0.0.1:0", d.path(), ServerOptions::default()).unwrap_err();
    assert!(matches!(e, DeviceError::Busy { .. }), "{e}");
    drop((a, b));
    srv.shutdown().unwrap();
}

#[test]
fn claims_hold_across_connections_until_the_connection_ends() {
    let d = TempDir::under("/dev/shm");
    let srv = serve(d.path(), ServerOptions::default());
    let addr = srv.local_addr().to_string();
    let a = RemoteDevice::connect(&addr, &hello("j", 1 << 20, true)).unwrap();
    let b = RemoteDevice::connect(&addr, &hello("j", 0, false)).unwrap();
    let c = RemoteDevice::connect(&addr, &hello("other", 1 << 20, true)).unwrap();
    a.claim(0, 65_536).unwrap();
    a.claim(0, 4096)
        .expect("a connection's own claims do not conflict");
    let e = b.claim(65_535, 2).unwrap_err();
    assert!(
        matches!(&e, DeviceError::Busy { what } if what.contains("[0, 65536)")),
        "{e}"
    );
    assert_eq!(e.errno(), libc::EBUSY);
    b.claim(65_536, 4096).unwrap();
    c.claim(0, 65_536).expect("claims are per namespace");
    assert!(matches!(
        b.claim(0, 2 << 20),
        Err(DeviceError::Range { .. })
    ));
    drop(a);
    // The server releases a's claims when it sees the connection end.
    let start = Instant::now();
    loop {
        match b.claim(0, 4096) {
            Ok(()) => break,
            Err(DeviceError::Busy { .. }) if start.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("a's claim was not released: {e}"),
        }
    }
    drop((b, c));
    assert_eq!(srv.shutdown().unwrap().panics, 0);
}

#[test]
fn too_many_connections_are_refused_and_the_rest_keep_working() {
    let d = TempDir::under("/dev/shm");
    let srv = serve(
        d.path(),
        ServerOptions {
            max_connections: 1,
            direct: Direct::Off,
            ..ServerOptions::default()
        },
    );
    let addr = srv.local_addr().to_string();
    let a = RemoteDevice::connect(&addr, &hello("j", 1 << 20, true)).unwrap();
    assert_eq!(a.block_size(), 512);
    let e = RemoteDevice::connect(&addr, &hello("j", 0, false)).unwrap_err();
    assert!(matches!(e, DeviceError::Refused { .. }), "{e}");
    a.write_at(1, b"still here").unwrap();
    drop(a);
    srv.shutdown().unwrap();
}

#[test]
fn requests_that_break_the_protocol_get_typed_answers() {
    let d = TempDir::under("/dev/shm");
    let srv = serve(d.path(), ServerOptions::default());
    let addr = srv.local_addr();
    let req = |op: u16, id: u64, offset: u64, length: u64, body: &[u8]| RequestHeader {
        op,
        flags: 0,
        id,
        offset,
        length,
        body_len: body.len() as u32,
        body_crc: crc32c::crc32c(body),
    };
    let expect = |a: Answer, st: u16, id: u64| -> String {
        match a {
            Answer::Reply(r, msg, _) => {
                assert_eq!((r.status, r.id), (st, id), "{msg}");
                msg
            }
            Answer::Closed => panic!("closed, expected status {st}"),
        }
    };
    let mut raw = Raw::connect(addr);
    // Before HELLO.
    let m = expect(
        raw.request(&req(op::READ, 5, 0, 10, &[]), &[]),
        status::PROTOCOL,
        5,
    );
    assert!(m.contains("HELLO first"), "{m}");
    let (h, body) = hello_frame("p", 1 << 20, true);
    expect(raw.request(&h, &body), status::OK, 1);
    expect(raw.request(&h, &body), status::PROTOCOL, 1);
    // Unknown op, body CRC wrong, WRITE length not its body, READ too long, flags, ranges.
    expect(
        raw.request(&req(99, 6, 0, 0, &[]), &[]),
        status::PROTOCOL,
        6,
    );
    let mut bad_crc = req(op::WRITE, 7, 0, 3, b"abc");
    bad_crc.body_crc ^= 1;
    let m = expect(raw.request(&bad_crc, b"abc"), status::PROTOCOL, 7);
    assert!(m.contains("body_crc"), "{m}");
    expect(
        raw.request(&req(op::WRITE, 8, 0, 4, b"abc"), b"abc"),
        status::PROTOCOL,
        8,
    );
    expect(
        raw.request(
            &req(op::READ, 9, 0, u64::from(proto::MAX_PAYLOAD) + 1, &[]),
            &[],
        ),
        status::PROTOCOL,
        9,
    );
    let flagged = RequestHeader {
        flags: 1,
        ..req(op::STAT, 10, 0, 0, &[])
    };
    expect(raw.request(&flagged, &[]), status::PROTOCOL, 10);
    expect(
        raw.request(&req(op::READ, 11, 1 << 20, 1, &[]), &[]),
        status::RANGE,
        11,
    );
    expect(
        raw.request(&req(op::CLAIM, 12, u64::MAX, 2, &[]), &[]),
        status::RANGE,
        12,
    );
    expect(
        raw.request(&req(op::FLUSH, 13, 1, 0, &[]), &[]),
        status::PROTOCOL,
        13,
    );
    // After all that the connection still works.
    expect(
        raw.request(&req(op::WRITE, 14, 10, 3, b"xyz"), b"xyz"),
        status::OK,
        14,
    );
    match raw.request(&req(op::READ, 15, 10, 3, &[]), &[]) {
        Answer::Reply(r, _, data) => {
            assert_eq!(r.status, status::OK);
            assert_eq!(data, b"xyz");
        }
        Answer::Closed => panic!("closed"),
    }
    // A damaged header: answered, then closed.
    let mut hb = req(op::STAT, 16, 0, 0, &[]).encode();
    hb[20] ^= 0xff;
    raw.send_bytes(&hb);
    let m = expect(raw.answer(), status::PROTOCOL, 16);
    assert!(m.contains("header_crc"), "{m}");
    assert!(matches!(raw.answer(), Answer::Closed));
    // A body over the limit: answered, then closed.
    let mut raw = Raw::connect(addr);
    let (h, body) = hello_frame("p", 0, false);
    expect(raw.request(&h, &body), status::OK, 1);
    let mut huge = req(op::WRITE, 2, 0, 0, &[]);
    huge.body_len = proto::MAX_PAYLOAD + 1;
    huge.length = u64::from(huge.body_len);
    raw.send_bytes(&huge.encode());
    expect(raw.answer(), status::PROTOCOL, 2);
    assert!(matches!(raw.answer(), Answer::Closed));
    // Not the protocol at all.
    let mut raw = Raw::connect(addr);
    let http = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";
    raw.send_bytes(http);
    let id = u64::from_le_bytes(http[8..16].try_into().unwrap());
    let m = expect(raw.answer(), status::PROTOCOL, id);
    assert!(m.contains("magic"), "{m}");
    assert_eq!(srv.shutdown().unwrap().panics, 0);
}

#[test]
fn a_reply_that_never_comes_times_out_and_breaks_the_connection() {
    use std::io::{Read, Write};
    // A fake target: answers the HELLO, then reads requests and never answers.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let fake = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut hb = [0u8; proto::HEADER_BYTES];
        s.read_exact(&mut hb).unwrap();
        let h = RequestHeader::decode(&hb).unwrap();
        let mut body = vec![0u8; h.body_len as usize];
        s.read_exact(&mut body).unwrap();
        let info = proto::Info {
            flags: 0,
            block_size: 512,
            capacity: 1 << 20,
        }
        .encode();
        let r = proto::ReplyHeader {
            op: op::HELLO,
            status: status::OK,
            id: h.id,
            code: 0,
            message_len: 0,
            data_len: info.len() as u32,
            body_crc: crc32c::crc32c(&info),
        };
        s.write_all(&r.encode()).unwrap();
        s.write_all(&info).unwrap();
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    });
    let dev = RemoteDevice::connect(&addr, &hello("slow", 0, false)).unwrap();
    assert_eq!(dev.capacity(), 1 << 20);
    dev.set_timeout(Some(Duration::from_millis(200))).unwrap();
    let e = dev.read_at(0, &mut [0u8; 8]).unwrap_err();
    assert!(matches!(e, DeviceError::Io { .. }), "{e}");
    let e = dev.read_at(0, &mut [0u8; 8]).unwrap_err();
    assert!(e.to_string().contains("lost earlier"), "{e}");
    drop(dev);
    fake.join().unwrap();
}
