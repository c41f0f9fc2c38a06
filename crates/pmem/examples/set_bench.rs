//! Write-and-persist throughput of a pool on a three-member set against a pool on one file, in
//! the same run, alternating (ABBA), on files in a directory (default /dev/shm).
//!
//! ```sh
//! cargo run --release -p kavach-pmem --example set_bench -- [DIR] [ITERS] [ROUNDS]
//! ```
//!
//! Each measurement: one thread writes a block at a random 64-byte-aligned offset of a 32 MiB
//! region and persists it (`Medium::write` then `Medium::persist`), ITERS times, for blocks of
//! 64 B, 256 B, 4 KiB and 64 KiB. Prints a markdown table of the median over ROUNDS rounds.

use pmem::set::{self, StripedSet};
use pmem::{CreateOptions, Mapping, Medium, OpenOptions, Pool};
use std::path::{Path, PathBuf};
use std::time::Instant;

const REGION: u64 = 32 << 20;

fn one_file(dir: &Path) -> (Pool<Mapping>, usize) {
    let p = dir.join("bench-one.pool");
    let _ = std::fs::remove_file(&p);
    let mut pool = Pool::create(
        &p,
        &CreateOptions {
            size: REGION + (1 << 20),
            domain: None,
        },
    )
    .expect("create pool");
    let r = pool
        .create_region("data", pmem::kinds::RAW, REGION, pmem::Alignment::Page)
        .expect("region");
    (pool, r.offset as usize)
}

fn three_files(dir: &Path) -> (Pool<StripedSet<Mapping>>, usize) {
    let desc = dir.join("bench-set.pool");
    let paths = set::default_member_paths(&desc, 3);
    let _ = std::fs::remove_file(&desc);
    for p in &paths {
        let _ = std::fs::remove_file(p);
    }
    let s = StripedSet::create_files(&desc, &paths, REGION + (1 << 20), set::CHUNK_DEFAULT)
        .expect("create set");
    let d = s.domain();
    let s = Pool::format(s, d).expect("format");
    let mut pool = Pool::open_medium(s, &OpenOptions::default()).expect("open");
    let r = pool
        .create_region("data", pmem::kinds::RAW, REGION, pmem::Alignment::Page)
        .expect("region");
    (pool, r.offset as usize)
}

fn run<M: Medium>(m: &M, base: usize, block: usize, iters: u64, seed: u64) -> f64 {
    let data = vec![0x5au8; block];
    let slots = (REGION as usize - block) / 64;
    let mut x = seed | 1;
    let t = Instant::now();
    for _ in 0..iters {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let at = base + (x as usize % slots) * 64;
        m.write(at, &data);
        m.persist(at, block).expect("persist");
    }
    iters as f64 / t.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = PathBuf::from(args.get(1).map_or("/dev/shm", String::as_str));
    let iters: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let rounds: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(5);
    let (one, one_base) = one_file(&dir);
    let (three, three_base) = three_files(&dir);
    println!("| block | one file: persists/s | 3-member set: persists/s | set / one file |");
    println!("| ---: | ---: | ---: | ---: |");
    for block in [64usize, 256, 4096, 65536] {
        let n = if block >= 4096 { iters / 8 } else { iters };
        // Warm-up (touch the pages).
        run(one.medium(), one_base, block, n / 4, 1);
        run(three.medium(), three_base, block, n / 4, 1);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for r in 0..rounds as u64 {
            // ABBA order.
            if r % 2 == 0 {
                a.push(run(one.medium(), one_base, block, n, r + 2));
                b.push(run(three.medium(), three_base, block, n, r + 2));
            } else {
                b.push(run(three.medium(), three_base, block, n, r + 2));
                a.push(run(one.medium(), one_base, block, n, r + 2));
            }
        }
        let (a, b) = (median(a), median(b));
        println!(
            "| {block} | {a:.0} ({:.0} MB/s) | {b:.0} ({:.0} MB/s) | {:.2} |",
            a * block as f64 / 1e6,
            b * block as f64 / 1e6,
            b / a
        );
    }
    let s = three.close().expect("close");
    s.close().expect("close set");
    one.close().expect("close");
    let _ = std::fs::remove_file(dir.join("bench-one.pool"));
    let desc = dir.join("bench-set.pool");
    for p in set::default_member_paths(&desc, 3) {
        let _ = std::fs::remove_file(p);
    }
    let _ = std::fs::remove_file(desc);
}
