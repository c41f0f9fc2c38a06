//! YCSB-style workloads A, B and C (zipfian) with 4 KiB values, on DStore's library API (one
//! `Context` per thread, objects with their data in the object data file) and on Redis over
//! RESP on loopback (Redis pays the network round trip; Kavach is called in-process), side by
//! side in one run, in the order given by `--order` (ABBA by default), with the ratios.
//!
//! ```text
//! cargo run --release -p kavach-dstore --example ycsb_api -- \
//!     --pm-dir /dev/shm/X/pm --object-dir /tmp/X/objects --redis-port 17501 \
//!     --records 10000 --ops 20000 --threads 8
//! ```
//!
//! Redis must run with `appendonly yes` and `appendfsync always` (checked at start): every
//! write is on disk when acknowledged, as a Kavach object write is (data `fdatasync`ed to the
//! object file, then the record forced to the PM log). `bench/dstore-api/run.sh` starts both.
//!
//! Output: one line per (system, pass, phase) and a summary of Kavach / Redis ratios
//! (throughput: higher is better for Kavach; latency: lower is better), with every pass's ratio
//! so the spread shows. `--json FILE` writes the same as JSON.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use dstore::api::OpenMode;
use dstore::{Config, Store};
use pmem::rng::SplitMix64;

#[derive(Debug, Clone)]
struct Args {
    pm_dir: PathBuf,
    object_dir: PathBuf,
    redis_port: u16,
    records: u64,
    ops: u64,
    threads: usize,
    value: usize,
    theta: f64,
    order: Vec<String>,
    workloads: Vec<char>,
    json: Option<PathBuf>,
}

fn usage() -> ! {
    eprintln!(
        "usage: ycsb_api --pm-dir DIR --object-dir DIR --redis-port PORT [--records N] \
         [--ops N] [--threads N] [--value BYTES] [--theta 0.99] \
         [--order kavach,redis,redis,kavach] [--workloads abc] [--json FILE]\n\
         Loads N records (4 KiB values) then runs each workload for --ops operations on each \
         system in --order; exit 0 done, 2 could not run."
    );
    std::process::exit(2)
}

fn parse() -> Args {
    let mut a = Args {
        pm_dir: PathBuf::new(),
        object_dir: PathBuf::new(),
        redis_port: 0,
        records: 10_000,
        ops: 20_000,
        threads: 8,
        value: 4096,
        theta: 0.99,
        order: vec![
            "kavach".into(),
            "redis".into(),
            "redis".into(),
            "kavach".into(),
        ],
        workloads: vec!['a', 'b', 'c'],
        json: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| usage());
        match k.as_str() {
            "--pm-dir" => a.pm_dir = v().into(),
            "--object-dir" => a.object_dir = v().into(),
            "--redis-port" => a.redis_port = v().parse().unwrap_or_else(|_| usage()),
            "--records" => a.records = v().parse().unwrap_or_else(|_| usage()),
            "--ops" => a.ops = v().parse().unwrap_or_else(|_| usage()),
            "--threads" => a.threads = v().parse().unwrap_or_else(|_| usage()),
            "--value" => a.value = v().parse().unwrap_or_else(|_| usage()),
            "--theta" => a.theta = v().parse().unwrap_or_else(|_| usage()),
            "--order" => a.order = v().split(',').map(str::to_string).collect(),
            "--workloads" => a.workloads = v().chars().collect(),
            "--json" => a.json = Some(v().into()),
            "-h" | "--help" => usage(),
            _ => usage(),
        }
    }
    if a.pm_dir.as_os_str().is_empty()
        || a.object_dir.as_os_str().is_empty()
        || a.redis_port == 0
        || a.threads == 0
        || a.records == 0
        || a.order.iter().any(|s| s != "kavach" && s != "redis")
        || a.workloads.iter().any(|w| !"abc".contains(*w))
    {
        usage();
    }
    a
}

/// YCSB's zipfian generator (Gray et al.), scrambled with FNV so hot keys spread.
struct Zipf {
    n: u64,
    theta: f64,
    zetan: f64,
    alpha: f64,
    eta: f64,
}

impl Zipf {
    fn new(n: u64, theta: f64) -> Zipf {
        let zeta = |k: u64| (1..=k).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2);
        Zipf {
            n,
            theta,
            zetan,
            alpha: 1.0 / (1.0 - theta),
            eta: (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
        }
    }

    fn next(&self, rng: &mut SplitMix64) -> u64 {
        let u = rng.unit();
        let uz = u * self.zetan;
        let rank = if uz < 1.0 {
            0
        } else if uz < 1.0 + 0.5f64.powf(self.theta) {
            1
        } else {
            ((self.n as f64) * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
        };
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in rank.min(self.n - 1).to_le_bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        h % self.n
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("user{i:012}").into_bytes()
}

/// One system's operations, per thread.
trait Client {
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<(), String>;
    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<(), String>;
    /// Read the value into `buf`; its length.
    fn read(&mut self, key: &[u8], buf: &mut Vec<u8>) -> Result<usize, String>;
}

struct Kavach<'s> {
    ctx: dstore::Context<'s, Arc<pmem::Mapping>>,
}

impl Client for Kavach<'_> {
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        let h = self
            .ctx
            .oopen(key, 0, OpenMode::CREATE)
            .map_err(|e| e.to_string())?
            .ok_or("not created")?;
        self.ctx.owrite(&h, value, 0).map_err(|e| e.to_string())?;
        Ok(())
    }

    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        let h = self
            .ctx
            .oopen(key, 0, OpenMode::READ_WRITE)
            .map_err(|e| e.to_string())?
            .ok_or("no such object")?;
        self.ctx.owrite(&h, value, 0).map_err(|e| e.to_string())?;
        Ok(())
    }

    fn read(&mut self, key: &[u8], buf: &mut Vec<u8>) -> Result<usize, String> {
        let h = self
            .ctx
            .oopen(key, 0, OpenMode::READ)
            .map_err(|e| e.to_string())?
            .ok_or("no such object")?;
        let n = self.ctx.oread(&h, buf, 0).map_err(|e| e.to_string())?;
        Ok(n)
    }
}

/// A minimal RESP client (one request in flight).
struct Redis {
    w: TcpStream,
    r: BufReader<TcpStream>,
    out: Vec<u8>,
    line: Vec<u8>,
}

enum Reply {
    Ok,
    Bulk(usize),
    Nil,
    Int,
}

impl Redis {
    fn connect(port: u16) -> Result<Redis, String> {
        let s = TcpStream::connect(("127.0.0.1", port))
            .map_err(|e| format!("cannot connect to Redis on 127.0.0.1:{port}: {e}"))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        let r = BufReader::with_capacity(64 << 10, s.try_clone().map_err(|e| e.to_string())?);
        Ok(Redis {
            w: s,
            r,
            out: Vec::with_capacity(8 << 10),
            line: Vec::new(),
        })
    }

    fn cmd(&mut self, args: &[&[u8]], buf: &mut Vec<u8>) -> Result<Reply, String> {
        self.out.clear();
        write!(self.out, "*{}\r\n", args.len()).ok();
        for a in args {
            write!(self.out, "${}\r\n", a.len()).ok();
            self.out.extend_from_slice(a);
            self.out.extend_from_slice(b"\r\n");
        }
        self.w.write_all(&self.out).map_err(|e| e.to_string())?;
        self.line.clear();
        self.r
            .read_until(b'\n', &mut self.line)
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&self.line).trim_end().to_string();
        match self.line.first() {
            Some(b'+') => Ok(Reply::Ok),
            Some(b':') => Ok(Reply::Int),
            Some(b'$') => {
                let n: i64 = text[1..].parse().map_err(|_| text.clone())?;
                if n < 0 {
                    return Ok(Reply::Nil);
                }
                buf.resize(n as usize + 2, 0);
                self.r.read_exact(buf).map_err(|e| e.to_string())?;
                buf.truncate(n as usize);
                Ok(Reply::Bulk(n as usize))
            }
            Some(b'*') => {
                // CONFIG GET: read the elements as bulk strings, keep the last.
                let n: usize = text[1..].parse().map_err(|_| text.clone())?;
                let mut last = Reply::Nil;
                for _ in 0..n {
                    last = self.cmd_reply(buf)?;
                }
                Ok(last)
            }
            _ => Err(format!("Redis replied `{text}`")),
        }
    }

    fn cmd_reply(&mut self, buf: &mut Vec<u8>) -> Result<Reply, String> {
        self.line.clear();
        self.r
            .read_until(b'\n', &mut self.line)
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&self.line).trim_end().to_string();
        let n: i64 = text
            .get(1..)
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| text.clone())?;
        if n < 0 {
            return Ok(Reply::Nil);
        }
        buf.resize(n as usize + 2, 0);
        self.r.read_exact(buf).map_err(|e| e.to_string())?;
        buf.truncate(n as usize);
        Ok(Reply::Bulk(n as usize))
    }
}

impl Client for Redis {
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        self.update(key, value)
    }

    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        let mut b = Vec::new();
        match self.cmd(&[b"SET", key, value], &mut b)? {
            Reply::Ok => Ok(()),
            _ => Err("SET did not answer OK".into()),
        }
    }

    fn read(&mut self, key: &[u8], buf: &mut Vec<u8>) -> Result<usize, String> {
        match self.cmd(&[b"GET", key], buf)? {
            Reply::Bulk(n) => Ok(n),
            _ => Err("GET found no value".into()),
        }
    }
}

#[derive(Debug, Default, Clone)]
struct Phase {
    ops: u64,
    secs: f64,
    /// Latencies in ns by kind.
    read: Vec<u64>,
    write: Vec<u64>,
}

fn pct(v: &mut [u64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i] as f64 / 1000.0
}

/// A phase's body for one client thread: (thread, client, rng, buffer, results).
type Body<'b, C> = dyn Fn(usize, &mut C, &mut SplitMix64, &mut Vec<u8>, &mut Phase) -> Result<(), String>
    + Sync
    + 'b;

/// Run `per_thread` operations on each of `threads` clients made by `make`.
fn run_phase<C: Client + Send>(
    threads: usize,
    make: &(dyn Fn(usize) -> Result<C, String> + Sync),
    body: &Body<'_, C>,
) -> Result<Phase, String> {
    let start = Instant::now();
    let parts: Vec<Result<Phase, String>> = std::thread::scope(|t| {
        let hs: Vec<_> = (0..threads)
            .map(|i| {
                t.spawn(move || {
                    let mut c = make(i)?;
                    let mut rng = SplitMix64::new(0x9e37 + i as u64 * 7919);
                    let mut buf = vec![0u8; 8192];
                    let mut p = Phase::default();
                    body(i, &mut c, &mut rng, &mut buf, &mut p)?;
                    Ok(p)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a client thread panicked".into()))
            })
            .collect()
    });
    let mut all = Phase {
        secs: start.elapsed().as_secs_f64(),
        ..Phase::default()
    };
    for p in parts {
        let p = p?;
        all.ops += p.ops;
        all.read.extend(p.read);
        all.write.extend(p.write);
    }
    Ok(all)
}

fn workload<C: Client + Send>(
    a: &Args,
    make: &(dyn Fn(usize) -> Result<C, String> + Sync),
    zipf: &Zipf,
) -> Result<Vec<(String, Phase)>, String> {
    let mut out = Vec::new();
    let value = vec![0x5au8; a.value];
    let t = a.threads as u64;
    let load = run_phase(a.threads, make, &|i, c, _rng, _buf, p| {
        let mut k = i as u64;
        while k < a.records {
            let s = Instant::now();
            c.insert(&key(k), &value)?;
            p.write.push(s.elapsed().as_nanos() as u64);
            p.ops += 1;
            k += t;
        }
        Ok(())
    })?;
    out.push(("load".to_string(), load));
    for &w in &a.workloads {
        let read_pct = match w {
            'a' => 50,
            'b' => 95,
            _ => 100,
        };
        let per = a.ops / t;
        let ph = run_phase(a.threads, make, &|_i, c, rng, buf, p| {
            let mut v = value.clone();
            for n in 0..per {
                let k = key(zipf.next(rng));
                let s = Instant::now();
                if rng.below(100) < read_pct {
                    buf.resize(a.value, 0);
                    let got = c.read(&k, buf)?;
                    if got != a.value {
                        return Err(format!("read {} bytes of {}", got, a.value));
                    }
                    p.read.push(s.elapsed().as_nanos() as u64);
                } else {
                    v[0] = n as u8;
                    c.update(&k, &v)?;
                    p.write.push(s.elapsed().as_nanos() as u64);
                }
                p.ops += 1;
            }
            Ok(())
        })?;
        out.push((format!("{w}"), ph));
    }
    Ok(out)
}

fn kavach_pass(a: &Args, zipf: &Zipf) -> Result<Vec<(String, Phase)>, String> {
    let _ = std::fs::remove_dir_all(&a.pm_dir);
    let _ = std::fs::remove_dir_all(&a.object_dir);
    let cfg = Config {
        object_dir: Some(a.object_dir.clone()),
        ..Config::default()
    };
    let (store, _) = Store::open_dir(&a.pm_dir, cfg).map_err(|e| e.to_string())?;
    let store = &store;
    let make = |_i: usize| -> Result<Kavach<'_>, String> {
        Ok(Kavach {
            ctx: store.context(),
        })
    };
    let r = workload(a, &make, zipf);
    store.close().map_err(|e| e.to_string())?;
    r
}

fn redis_pass(a: &Args, zipf: &Zipf) -> Result<Vec<(String, Phase)>, String> {
    let mut r = Redis::connect(a.redis_port)?;
    let mut b = Vec::new();
    match r.cmd(&[b"CONFIG", b"GET", b"appendfsync"], &mut b)? {
        Reply::Bulk(_) if b == b"always" => {}
        _ => {
            return Err(format!(
                "Redis on port {} is not at appendfsync always (found `{}`)",
                a.redis_port,
                String::from_utf8_lossy(&b)
            ));
        }
    }
    r.cmd(&[b"FLUSHALL"], &mut b)?;
    let port = a.redis_port;
    let make = move |_i: usize| Redis::connect(port);
    let out = workload(a, &make, zipf);
    r.cmd(&[b"FLUSHALL"], &mut b)?;
    // Keep the AOF small between passes.
    let _ = r.cmd(&[b"BGREWRITEAOF"], &mut b);
    out
}

fn main() {
    let a = parse();
    let zipf = Zipf::new(a.records, a.theta);
    // results[system][phase] = list of (ops/s, read p50, p99, p99.9, write p50, p99, p99.9)
    let mut rows: Vec<(String, usize, String, [f64; 7])> = Vec::new();
    for (pass, sys) in a.order.iter().enumerate() {
        let r = if sys == "kavach" {
            kavach_pass(&a, &zipf)
        } else {
            redis_pass(&a, &zipf)
        };
        let phases = match r {
            Ok(p) => p,
            Err(e) => {
                eprintln!("ycsb_api: {sys} pass {pass}: {e}");
                std::process::exit(2);
            }
        };
        for (name, mut p) in phases {
            let f = [
                p.ops as f64 / p.secs,
                pct(&mut p.read, 0.5),
                pct(&mut p.read, 0.99),
                pct(&mut p.read, 0.999),
                pct(&mut p.write, 0.5),
                pct(&mut p.write, 0.99),
                pct(&mut p.write, 0.999),
            ];
            println!(
                "{sys:6} pass {pass} {name:4}: {:9.0} ops/s  read p50/p99/p99.9 {:7.1}/{:7.1}/{:7.1} us  write p50/p99/p99.9 {:7.1}/{:7.1}/{:7.1} us",
                f[0], f[1], f[2], f[3], f[4], f[5], f[6]
            );
            rows.push((sys.clone(), pass, name, f));
        }
    }
    // Ratios Kavach / Redis: pair the k-th Kavach pass with the k-th Redis pass.
    let names: Vec<String> = rows
        .iter()
        .filter(|r| r.1 == 0)
        .map(|r| r.2.clone())
        .collect();
    let cols = [
        "ops/s",
        "read p50",
        "read p99",
        "read p99.9",
        "write p50",
        "write p99",
        "write p99.9",
    ];
    println!("\nKavach / Redis (throughput: >1 is Kavach faster; latency: <1 is Kavach lower)");
    let mut json = String::from("{\"ratios\":{");
    for (ni, name) in names.iter().enumerate() {
        let of = |sys: &str| -> Vec<[f64; 7]> {
            rows.iter()
                .filter(|r| r.0 == sys && &r.2 == name)
                .map(|r| r.3)
                .collect()
        };
        let (k, r) = (of("kavach"), of("redis"));
        let mut line = format!("{name:4}:");
        json.push_str(&format!("{}\"{name}\":{{", if ni > 0 { "," } else { "" }));
        for (ci, col) in cols.iter().enumerate() {
            let rs: Vec<f64> = k
                .iter()
                .zip(&r)
                .filter(|(k, r)| k[ci] > 0.0 && r[ci] > 0.0)
                .map(|(k, r)| k[ci] / r[ci])
                .collect();
            if rs.is_empty() {
                continue;
            }
            let mean = rs.iter().sum::<f64>() / rs.len() as f64;
            let spread = rs
                .iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(",");
            line.push_str(&format!("  {col} {mean:.2}x [{spread}]"));
            json.push_str(&format!(
                "{}\"{col}\":{{\"mean\":{mean:.4},\"each\":[{spread}]}}",
                if ci > 0 { "," } else { "" }
            ));
        }
        json.push('}');
        println!("{line}");
    }
    json.push_str("},\"rows\":[");
    for (i, r) in rows.iter().enumerate() {
        json.push_str(&format!(
            "{}{{\"system\":\"{}\",\"pass\":{},\"phase\":\"{}\",\"values\":[{}]}}",
            if i > 0 { "," } else { "" },
            r.0,
            r.1,
            r.2,
            r.3.iter()
                .map(|x| format!("{x:.3}"))
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    json.push_str("]}");
    if let Some(p) = &a.json
        && let Err(e) = std::fs::write(p, &json)
    {
        eprintln!("ycsb_api: cannot write {}: {e}", p.display());
        std::process::exit(2);
    }
}
