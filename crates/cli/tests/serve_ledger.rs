//! `kavach serve` killed with SIGKILL at random moments while clients write every kind of value:
//! lists, sets, sorted sets, hashes, keys with deadlines and MULTI/EXEC blocks. After each restart
//! every acknowledged write is there, an unacknowledged one is there whole or not at all, and an
//! EXEC is all or nothing.
//!
//! The ledger is the test's own record of what each writer was told. A kill -9 is not a power
//! failure (the page cache survives it); power failures are tested on the persistence simulator
//! in `crates/dstore/tests`. This test checks the process boundary for the data model.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Scratch, spawn_serve};
use pmem::rng::SplitMix64;
use server::resp::{Limits, Reply, parse_reply};

/// Small logs: checkpoints happen during the test.
const STORE_ARGS: &[&str] = &["--shards", "8", "--log-mib", "1"];

/// A RESP2 client that reads whole replies.
struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    fn connect(port: u16) -> std::io::Result<Client> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Client {
            stream,
            buf: Vec::new(),
        })
    }

    fn send(&mut self, args: &[&[u8]]) -> std::io::Result<()> {
        let mut req = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            req.extend_from_slice(a);
            req.extend_from_slice(b"\r\n");
        }
        self.stream.write_all(&req)
    }

    fn reply(&mut self) -> std::io::Result<Reply> {
        loop {
            match parse_reply(&self.buf, &Limits::default()) {
                Ok(Some((r, n))) => {
                    self.buf.drain(..n);
                    return Ok(r);
                }
                Ok(None) => {}
                Err(e) => return Err(std::io::Error::other(e.to_string())),
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn call(&mut self, args: &[&[u8]]) -> std::io::Result<Reply> {
        self.send(args)?;
        self.reply()
    }
}

fn bulks(r: &Reply) -> Vec<Vec<u8>> {
    match r {
        Reply::Array(items) => items
            .iter()
            .map(|i| match i {
                Reply::Bulk(b) => b.clone(),
                other => panic!("expected bulk strings, got {other:?}"),
            })
            .collect(),
        other => panic!("expected an array, got {other:?}"),
    }
}

fn sorted(mut v: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    v.sort();
    v
}

/// What one writer was told, per kind of key it owns.
#[derive(Debug, Default, Clone)]
struct Ledger {
    /// RPUSH onto `l{t}`: acknowledged elements, in order.
    list: Vec<Vec<u8>>,
    /// SADD to `s{t}`.
    set: Vec<Vec<u8>>,
    /// ZADD to `z{t}`: (member, score).
    zset: Vec<(Vec<u8>, i64)>,
    /// HSET on `h{t}`: field -> value.
    hash: Vec<(Vec<u8>, Vec<u8>)>,
    /// SET `e{t}-{i}` with a deadline an hour away: keys acknowledged.
    expiring: Vec<Vec<u8>>,
    /// EXEC blocks acknowledged: the last value written to `ma{t}`, `mb{t}` and pushed on `mc{t}`.
    multi: Option<Vec<u8>>,
    /// The operation sent and not answered when the server died.
    in_flight: Option<Op>,
}

#[derive(Debug, Clone)]
enum Op {
    Push(Vec<u8>),
    SAdd(Vec<u8>),
    ZAdd(Vec<u8>, i64),
    HSet(Vec<u8>, Vec<u8>),
    Expiring(Vec<u8>),
    Multi(Vec<u8>),
}

/// Check a restarted server against writer `t`'s ledger, and fold an in-flight operation that
/// turned out to be durable into it.
fn check(c: &mut Client, t: usize, led: &mut Ledger, round: u64) {
    let key = |p: &str| format!("{p}{t}").into_bytes();
    let inflight = led.in_flight.take();

    let list = bulks(&c.call(&[b"LRANGE", &key("l"), b"0", b"-1"]).unwrap());
    let mut want = led.list.clone();
    if list != want {
        match &inflight {
            Some(Op::Push(v)) => {
                want.push(v.clone());
                assert_eq!(list, want, "round {round}: list of writer {t}");
            }
            _ => panic!("round {round}: list of writer {t} is {list:?}, ledger {want:?}"),
        }
    }
    led.list = list;

    let set = sorted(bulks(&c.call(&[b"SMEMBERS", &key("s")]).unwrap()));
    let mut want = sorted(led.set.clone());
    if set != want {
        match &inflight {
            Some(Op::SAdd(v)) => {
                want.push(v.clone());
                assert_eq!(set, sorted(want), "round {round}: set of writer {t}");
            }
            _ => panic!("round {round}: set of writer {t} is {set:?}, ledger {want:?}"),
        }
    }
    led.set = set;

    let z = bulks(
        &c.call(&[b"ZRANGE", &key("z"), b"0", b"-1", b"WITHSCORES"])
            .unwrap(),
    );
    let got: Vec<(Vec<u8>, i64)> = z
        .chunks(2)
        .map(|p| {
            let s: i64 = String::from_utf8_lossy(&p[1])
                .parse()
                .expect("an integer score");
            (p[0].clone(), s)
        })
        .collect();
    let mut want = led.zset.clone();
    want.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
    if got != want {
        match &inflight {
            Some(Op::ZAdd(m, s)) => {
                want.push((m.clone(), *s));
                want.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
                assert_eq!(got, want, "round {round}: sorted set of writer {t}");
            }
            _ => panic!("round {round}: sorted set of writer {t} is {got:?}, ledger {want:?}"),
        }
    }
    led.zset = got;

    let h = bulks(&c.call(&[b"HGETALL", &key("h")]).unwrap());
    let mut got: Vec<(Vec<u8>, Vec<u8>)> =
        h.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect();
    got.sort();
    let mut want = led.hash.clone();
    want.sort();
    if got != want {
        match &inflight {
            Some(Op::HSet(f, v)) => {
                want.retain(|(x, _)| x != f);
                want.push((f.clone(), v.clone()));
                want.sort();
                assert_eq!(got, want, "round {round}: hash of writer {t}");
            }
            _ => panic!("round {round}: hash of writer {t} is {got:?}, ledger {want:?}"),
        }
    }
    led.hash = got;

    for k in &led.expiring {
        match c.call(&[b"PTTL", k]).unwrap() {
            Reply::Integer(ms) => assert!(
                ms > 0,
                "round {round}: {} lost its deadline or its value (PTTL {ms})",
                String::from_utf8_lossy(k)
            ),
            other => panic!("PTTL: {other:?}"),
        }
    }
    if let Some(Op::Expiring(k)) = &inflight
        && let Reply::Integer(ms) = c.call(&[b"PTTL", k]).unwrap()
    {
        assert!(ms == -2 || ms > 0, "in-flight SET EX: PTTL {ms}");
        if ms > 0 {
            led.expiring.push(k.clone());
        }
    }

    let a = c.call(&[b"GET", &key("ma")]).unwrap();
    let b = c.call(&[b"GET", &key("mb")]).unwrap();
    let head = c.call(&[b"LINDEX", &key("mc"), b"0"]).unwrap();
    assert_eq!(a, b, "round {round}: an EXEC of writer {t} applied in part");
    assert_eq!(
        a, head,
        "round {round}: an EXEC of writer {t} applied in part"
    );
    let now = match a {
        Reply::Bulk(v) => Some(v),
        _ => None,
    };
    if now != led.multi {
        let Some(Op::Multi(v)) = &inflight else {
            panic!(
                "round {round}: EXEC block of writer {t} holds {now:?}, ledger {:?}",
                led.multi
            )
        };
        assert_eq!(now.as_ref(), Some(v), "round {round}: EXEC of writer {t}");
    }
    led.multi = now;
}

/// One writer: random operations on its own keys until the server dies or `stop`.
fn write(port: u16, t: usize, ledger: Arc<Mutex<Ledger>>, stop: Arc<AtomicBool>, seed: u64) -> u64 {
    let Ok(mut c) = Client::connect(port) else {
        return 0;
    };
    let mut rng = SplitMix64::new(seed);
    let key = |p: &str| format!("{p}{t}").into_bytes();
    let mut acked = 0;
    while !stop.load(Ordering::Relaxed) {
        let n = rng.next_u64();
        let tag = format!("{seed:x}-{n:x}").into_bytes();
        let op = match rng.below(6) {
            0 => Op::Push(tag),
            1 => Op::SAdd(tag),
            2 => Op::ZAdd(tag, rng.below(1000) as i64),
            3 => Op::HSet(format!("f{}", rng.below(20)).into_bytes(), tag),
            4 => Op::Expiring([key("e"), b"-".to_vec(), tag].concat()),
            _ => Op::Multi(tag),
        };
        ledger.lock().unwrap().in_flight = Some(op.clone());
        let ok = match &op {
            Op::Push(v) => matches!(c.call(&[b"RPUSH", &key("l"), v]), Ok(Reply::Integer(_))),
            Op::SAdd(v) => matches!(c.call(&[b"SADD", &key("s"), v]), Ok(Reply::Integer(1))),
            Op::ZAdd(m, s) => matches!(
                c.call(&[b"ZADD", &key("z"), s.to_string().as_bytes(), m]),
                Ok(Reply::Integer(1))
            ),
            Op::HSet(f, v) => matches!(c.call(&[b"HSET", &key("h"), f, v]), Ok(Reply::Integer(_))),
            Op::Expiring(k) => {
                matches!(c.call(&[b"SET", k, b"v", b"EX", b"3600"]), Ok(Reply::Simple(s)) if s == b"OK")
            }
            Op::Multi(v) => {
                let sent = c.send(&[b"MULTI"]).is_ok()
                    && c.send(&[b"SET", &key("ma"), v]).is_ok()
                    && c.send(&[b"SET", &key("mb"), v]).is_ok()
                    && c.send(&[b"LPUSH", &key("mc"), v]).is_ok()
                    && c.send(&[b"EXEC"]).is_ok();
                sent && (0..4).all(|_| matches!(c.reply(), Ok(Reply::Simple(_))))
                    && matches!(c.reply(), Ok(Reply::Array(items)) if items.len() == 3)
            }
        };
        if !ok {
            return acked;
        }
        let mut led = ledger.lock().unwrap();
        led.in_flight = None;
        match op {
            Op::Push(v) => led.list.push(v),
            Op::SAdd(v) => led.set.push(v),
            Op::ZAdd(m, s) => led.zset.push((m, s)),
            Op::HSet(f, v) => {
                led.hash.retain(|(x, _)| *x != f);
                led.hash.push((f, v));
            }
            Op::Expiring(k) => led.expiring.push(k),
            Op::Multi(v) => led.multi = Some(v),
        }
        acked += 1;
    }
    acked
}

#[test]
fn sigkill_loses_no_acknowledged_write_of_any_kind_and_no_exec_in_part() {
    let scratch = Scratch::new("serve-ledger");
    let dir = scratch.path("store");
    const WRITERS: usize = 3;
    let ledgers: Vec<Arc<Mutex<Ledger>>> = (0..WRITERS).map(|_| Arc::default()).collect();
    let mut rng = SplitMix64::new(0x001e_d6e5);
    let mut total = 0;
    for round in 0..30u64 {
        let (mut child, port, _) = spawn_serve(&dir, STORE_ARGS);
        {
            let mut c = Client::connect(port).expect("connect after restart");
            for (t, l) in ledgers.iter().enumerate() {
                check(&mut c, t, &mut l.lock().unwrap(), round);
            }
            // A key whose deadline passed while the server was down is gone.
            let gone = c.call(&[b"EXISTS", b"short-lived"]).unwrap();
            assert_eq!(
                gone,
                Reply::Integer(0),
                "round {round}: an expired key survived"
            );
            let r = c
                .call(&[b"SET", b"short-lived", b"x", b"PX", b"1"])
                .unwrap();
            assert_eq!(r, Reply::Simple(b"OK".to_vec()));
        }
        std::thread::sleep(Duration::from_millis(2));
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = ledgers
            .iter()
            .enumerate()
            .map(|(t, l)| {
                let (l, stop, seed) = (Arc::clone(l), Arc::clone(&stop), rng.next_u64());
                std::thread::spawn(move || write(port, t, l, stop, seed))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(30 + rng.below(200)));
        if round % 7 == 6
            && let Ok(mut c) = Client::connect(port)
        {
            let _ = c.send(&[b"SAVE"]);
            std::thread::sleep(Duration::from_millis(rng.below(5)));
        }
        kill(&mut child);
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            total += w.join().expect("writer");
        }
    }
    assert!(
        total > 300,
        "the writers got work done ({total} acknowledged)"
    );
    let (mut child, port, _) = spawn_serve(&dir, STORE_ARGS);
    let mut c = Client::connect(port).unwrap();
    for (t, l) in ledgers.iter().enumerate() {
        check(&mut c, t, &mut l.lock().unwrap(), 99);
    }
    let _ = c.send(&[b"SHUTDOWN"]);
    let status = child.wait().expect("wait");
    assert!(status.success(), "clean shutdown exits 0");
}

fn kill(child: &mut Child) {
    child.kill().expect("SIGKILL");
    let _ = child.wait();
}
