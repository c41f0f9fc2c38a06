//! A protected store (`kavach serve --redundancy lazy|eager`): a bit flipped in a page of the
//! store's pool is found by `kavach scrub DIR` (exit 1) and put back byte-exact by `kavach
//! repair DIR`, after which the store serves every value it held; while the server runs, its
//! background scrubber finds and repairs a flip on its own and INFO says so; and an offline
//! scrub of a store a server holds open is refused (exit 2).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Child;
use std::time::{Duration, Instant};

use common::{Scratch, assert_code, json, kavach, spawn_serve, stderr};

/// Small logs: the store stays small and scrubs are quick.
const STORE_ARGS: &[&str] = &["--shards", "8", "--log-mib", "1"];

/// A minimal RESP client.
struct Client {
    stream: BufReader<TcpStream>,
}

impl Client {
    fn connect(port: u16) -> Client {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Client {
            stream: BufReader::new(s),
        }
    }

    fn call(&mut self, args: &[&[u8]]) -> Option<Vec<u8>> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.stream.get_mut().write_all(&out).expect("send");
        let mut line = String::new();
        self.stream.read_line(&mut line).expect("reply");
        let line = line.trim_end().to_string();
        match line.as_bytes().first() {
            Some(b'+') | Some(b':') => Some(line.as_bytes()[1..].to_vec()),
            Some(b'$') => {
                let n: i64 = line[1..].parse().expect("bulk length");
                if n < 0 {
                    return None;
                }
                let mut b = vec![0; n as usize + 2];
                self.stream.read_exact(&mut b).expect("bulk");
                b.truncate(n as usize);
                Some(b)
            }
            _ => panic!("unexpected reply {line}"),
        }
    }

    fn info_field(&mut self, section: &str, name: &str) -> String {
        let text = self.call(&[b"INFO", section.as_bytes()]).expect("INFO");
        let text = String::from_utf8(text).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no {name} in INFO {section}: {text}"))
            .to_string()
    }
}

fn value_of(i: usize) -> Vec<u8> {
    format!("value-{i}-{}", "x".repeat(i % 300)).into_bytes()
}

const KEYS: usize = 400;

fn write_keys(c: &mut Client) {
    for i in 0..KEYS {
        let key = format!("key:{i}");
        assert_eq!(
            c.call(&[b"SET", key.as_bytes(), &value_of(i)]),
            Some(b"OK".to_vec())
        );
    }
}

fn check_keys(c: &mut Client) {
    for i in 0..KEYS {
        let key = format!("key:{i}");
        assert_eq!(
            c.call(&[b"GET", key.as_bytes()]),
            Some(value_of(i)),
            "{key}"
        );
    }
}

fn shut_down(mut child: Child, c: &mut Client) {
    // The server closes the connection without a reply.
    c.stream
        .get_mut()
        .write_all(b"*1\r\n$8\r\nSHUTDOWN\r\n")
        .expect("send SHUTDOWN");
    let status = child.wait().expect("wait");
    assert!(status.success(), "the server shut down cleanly: {status}");
}

/// Pool offset of `region` (from `kavach pool info --json`).
fn region_offset(pool: &str, region: &str) -> u64 {
    let o = kavach(&["pool", "info", pool, "--json"]);
    assert_code(&o, 0);
    let info = json(&o);
    info["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == region)
        .unwrap_or_else(|| panic!("no region {region} in {info}"))["offset"]
        .as_u64()
        .unwrap()
}

fn digest(pool: &str, region: &str) -> String {
    let o = kavach(&["debug", "digest", pool, "--region", region, "--json"]);
    assert_code(&o, 0);
    json(&o)["sha256"].as_str().unwrap().to_string()
}

fn offline_flip_is_found_and_repaired(mode: &str) {
    let s = Scratch::new(&format!("serve-integrity-{mode}"));
    let dir = s.path("store");
    let pool = format!("{dir}/kavach.pool");
    let mut args = vec!["--redundancy", mode];
    args.extend_from_slice(STORE_ARGS);
    let (child, port, _) = spawn_serve(&dir, &args);
    let mut c = Client::connect(port);
    write_keys(&mut c);
    assert_eq!(c.info_field("integrity", "redundancy"), mode);
    let covered = c.info_field("integrity", "regions_covered");
    for r in [
        "dipper.log.0",
        "dipper.log.1",
        "dipper.frames.0",
        "dstore.data",
    ] {
        assert!(covered.split(',').any(|x| x == r), "{r} in {covered}");
    }
    // Offline checks of a store a server holds open are refused, and change nothing.
    let o = kavach(&["scrub", &dir]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("in use"), "{}", stderr(&o));
    // Online, through the server.
    let p = port.to_string();
    let o = kavach(&["scrub", &dir, "--port", &p, "--json"]);
    assert_code(&o, 0);
    assert_eq!(json(&o)["clean"], true);
    shut_down(child, &mut c);

    let o = kavach(&["scrub", &dir]);
    assert_code(&o, 0);
    // The shadow image of the store (its page frames) and a log page: one bit each.
    for (region, page) in [("dipper.frames.0", "0"), ("dipper.log.0", "1")] {
        let before = digest(&pool, region);
        let o = kavach(&[
            "inject", "bitflip", &pool, "--region", region, "--page", page, "--seed", "3",
        ]);
        assert_code(&o, 0);
        assert_ne!(digest(&pool, region), before, "the flip changed {region}");
        let o = kavach(&["scrub", &dir, "--json"]);
        assert_code(&o, 1);
        let doc = json(&o);
        assert_eq!(doc["clean"], false);
        let damaged: Vec<_> = doc["regions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["findings"].as_array().is_some_and(|f| !f.is_empty()))
            .map(|r| r["region"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(damaged, vec![region.to_string()], "{doc}");
        let o = kavach(&["repair", &dir, "--json"]);
        assert_code(&o, 0);
        assert_eq!(
            digest(&pool, region),
            before,
            "{region} byte-exact after repair"
        );
        assert_code(&kavach(&["scrub", &dir]), 0);
    }

    // The mode is remembered: a start without --redundancy keeps it, and serves every value.
    let (child, port, _) = spawn_serve(&dir, STORE_ARGS);
    let mut c = Client::connect(port);
    assert_eq!(c.info_field("integrity", "redundancy"), mode);
    check_keys(&mut c);
    shut_down(child, &mut c);
}

#[test]
fn lazy_store_flip_is_found_offline_and_repaired_byte_exact() {
    offline_flip_is_found_and_repaired("lazy");
}

#[test]
fn eager_store_flip_is_found_offline_and_repaired_byte_exact() {
    offline_flip_is_found_and_repaired("eager");
}

/// The byte at `offset` of the file (under a running server too: the file is mapped shared).
fn byte_in_file(pool: &str, offset: u64) -> u8 {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(pool).unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).unwrap();
    b[0]
}

/// Flip one bit of the file under a running server (the file is mapped shared, so the
/// server's mapping sees the change; no write tracking does).
fn flip_in_file(pool: &str, offset: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(pool).unwrap();
    let b = [byte_in_file(pool, offset) ^ 0x20];
    f.write_all_at(&b, offset).unwrap();
    f.sync_data().unwrap();
}

#[test]
fn the_running_scrubber_repairs_a_flip_and_info_shows_it() {
    for mode in ["lazy", "eager"] {
        let s = Scratch::new(&format!("serve-scrubber-{mode}"));
        let dir = s.path("store");
        let pool = format!("{dir}/kavach.pool");
        let mut args = vec!["--redundancy", mode];
        args.extend_from_slice(STORE_ARGS);
        let (child, port, _) = spawn_serve(&dir, &args);
        let mut c = Client::connect(port);
        write_keys(&mut c);
        shut_down(child, &mut c);
        let at = region_offset(&pool, "dipper.frames.0") + 100;

        let args = ["--scrub-pages-per-sec", "100000"];
        let (child, port, _) = spawn_serve(&dir, &[STORE_ARGS, &args[..]].concat());
        let mut c = Client::connect(port);
        assert_eq!(c.info_field("integrity", "repairs"), "0");
        // Nothing is written from here on; wait until every page the start wrote is covered
        // (lazy: the next pass), so the flip lands in a page whose redundancy is current.
        let t = Instant::now();
        while c.info_field("integrity", "vulnerable_stripes_now") != "0" {
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "{mode}: never covered"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let good = byte_in_file(&pool, at);
        flip_in_file(&pool, at);
        assert_ne!(byte_in_file(&pool, at), good);
        // Wait for the scrubber (no timing is asserted: the wait only bounds a hang).
        let t = Instant::now();
        while c.info_field("integrity", "repairs") == "0" {
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "{mode}: the scrubber never repaired the flip"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(c.info_field("integrity", "unrepaired"), "0");
        assert!(
            c.info_field("integrity", "findings")
                .parse::<u64>()
                .unwrap()
                >= 1
        );
        assert_ne!(c.info_field("integrity", "last_scrub_unix_ms"), "0");
        assert_eq!(byte_in_file(&pool, at), good, "{mode}: repaired byte-exact");
        check_keys(&mut c);
        let o = kavach(&["repair", &dir, "--port", &port.to_string()]);
        assert_code(&o, 0);
        shut_down(child, &mut c);
        assert_code(&kavach(&["scrub", &dir]), 0);
    }
}
