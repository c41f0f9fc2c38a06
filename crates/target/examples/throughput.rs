//! Sequential write then read throughput of a `FileDevice` against a `RemoteDevice` (a server
//! in this process over 127.0.0.1) on the same directory.
//!
//! `cargo run --release -p kavach-target --example throughput -- DIR [SECONDS] [BLOCK_KIB] [MAX_MIB]`
//!
//! Each phase runs for at most SECONDS (default 3) or MAX_MIB (default 1024) of data; the read
//! phase reads what the write phase wrote.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};
use target::server::{ServerOptions, TargetServer};
use target::{Device, Direct, FileDevice, FileOptions, Hello, RemoteDevice, Tenant};

fn run(dev: &dyn Device, block: usize, secs: f64, max: u64) -> (f64, f64, u64) {
    let data: Vec<u8> = (0..block).map(|i| (i * 31 + 7) as u8).collect();
    let limit = Duration::from_secs_f64(secs);
    let t = Instant::now();
    let mut off = 0u64;
    while off + block as u64 <= max && t.elapsed() < limit {
        dev.write_at(off, &data).expect("write");
        off += block as u64;
    }
    let w = off as f64 / t.elapsed().as_secs_f64() / (1 << 20) as f64;
    let mut buf = vec![0u8; block];
    let t = Instant::now();
    let mut r = 0u64;
    while r < off {
        dev.read_at(r, &mut buf).expect("read");
        assert_eq!(buf, data);
        r += block as u64;
    }
    let rd = off as f64 / t.elapsed().as_secs_f64() / (1 << 20) as f64;
    (w, rd, off)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .expect("usage: throughput DIR [SECONDS] [BLOCK_KIB] [MAX_MIB]"),
    );
    let secs: f64 = args.next().map_or(3.0, |s| s.parse().expect("SECONDS"));
    let block = args
        .next()
        .map_or(32, |s| s.parse::<usize>().expect("BLOCK_KIB"))
        << 10;
    let max = args
        .next()
        .map_or(1024, |s| s.parse::<u64>().expect("MAX_MIB"))
        << 20;
    let path = dir.join("throughput-local.dev");
    let _ = std::fs::remove_file(&path);
    let local = FileDevice::open(
        &path,
        &FileOptions {
            create_len: Some(max),
            direct: Direct::Auto,
        },
    )
    .expect("open the local file");
    let (w, r, n) = run(&local, block, secs, max);
    println!(
        "local  FileDevice   {}  direct={} block={} KiB  write {w:8.1} MiB/s  read {r:8.1} MiB/s  ({} MiB)",
        dir.display(),
        local.direct(),
        block >> 10,
        n >> 20
    );
    drop(local);
    let _ = std::fs::remove_file(&path);
    let srv = TargetServer::bind("127.0.0.1:0", &dir, ServerOptions::default())
        .expect("bind")
        .spawn()
        .expect("spawn");
    let ns = dir.join("throughput.ns");
    let _ = std::fs::remove_file(&ns);
    let remote = RemoteDevice::connect(
        &srv.local_addr().to_string(),
        &Hello {
            job: "throughput".into(),
            len: max,
            create: true,
            tenant: Tenant::default(),
        },
    )
    .expect("connect");
    let (w, r, n) = run(&remote, block, secs, max);
    println!(
        "remote RemoteDevice {}  block_size={} block={} KiB  write {w:8.1} MiB/s  read {r:8.1} MiB/s  ({} MiB)",
        dir.display(),
        remote.block_size(),
        block >> 10,
        n >> 20
    );
    drop(remote);
    srv.shutdown().expect("shutdown");
    let _ = std::fs::remove_file(&ns);
    let _ = std::fs::remove_file(dir.join(target::server::LOCK_FILE));
}
