//! How long an arena allocation takes while the arena grows: the stall a shard sees when its
//! arena needs more room. Fills one arena (page tracking on, as the engine runs it) with
//! blocks of `--block` bytes up to `--mib` MiB and reports the latency of the allocations that grew
//! the image beside the slowest one that did not (the noise floor of a loaded machine).
//!
//!   cargo run --release -p kavach-dipper --example arena_growth -- [--mib N] [--block B]

use std::time::{Duration, Instant};

use dipper::Arena;

fn main() {
    let mut mib = 1024usize;
    let mut block = 1100usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |name: &str| -> usize {
            args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
                eprintln!("{name} needs a number");
                std::process::exit(2)
            })
        };
        match a.as_str() {
            "--mib" => mib = num("--mib"),
            "--block" => block = num("--block"),
            "-h" | "--help" => {
                println!("arena_growth [--mib N (default 1024)] [--block BYTES (default 1100)]");
                return;
            }
            other => {
                eprintln!("unknown argument {other} (see --help)");
                std::process::exit(2)
            }
        }
    }
    let mut a = Arena::new();
    a.track_dirty();
    let target = mib << 20;
    let mut worst: Vec<(Duration, usize, usize)> = Vec::new();
    let mut lat = Vec::with_capacity(target / block + 1);
    let start = Instant::now();
    let mut n = 0usize;
    let mut quiet = Duration::ZERO;
    while a.len() < target {
        let len = a.len();
        let t = Instant::now();
        let off = a.alloc(block).expect("alloc") as usize;
        a.write(off, &[7u8; 16]);
        let d = t.elapsed();
        lat.push(d);
        if a.len() != len {
            worst.push((d, len, a.len()));
        } else {
            quiet = quiet.max(d);
        }
        n += 1;
        // The engine takes the dirty pages at each checkpoint; do it now and then.
        if n % 100_000 == 0 {
            a.take_dirty();
        }
    }
    let total = start.elapsed();
    lat.sort_unstable();
    let q = |p: f64| lat[((lat.len() - 1) as f64 * p) as usize];
    println!(
        "{n} allocations of {block} B to {} MiB in {:.1} ms; p50 {:?} p99.9 {:?} p99.99 {:?} max {:?}",
        a.len() >> 20,
        total.as_secs_f64() * 1e3,
        q(0.5),
        q(0.999),
        q(0.9999),
        lat[lat.len() - 1]
    );
    worst.sort_unstable_by_key(|w| std::cmp::Reverse(w.0));
    let mut grow: Vec<Duration> = worst.iter().map(|w| w.0).collect();
    grow.sort_unstable();
    println!(
        "{} allocations grew the image: median {:?}, max {:?}; the slowest allocation that did \
         not grow it (scheduling noise and the like) took {quiet:?}; the slowest five growths:",
        worst.len(),
        grow[grow.len() / 2],
        grow[grow.len() - 1],
    );
    for (d, from, to) in worst.iter().take(5) {
        println!(
            "  {:>10.3} ms  {} -> {} MiB",
            d.as_secs_f64() * 1e3,
            from >> 20,
            to >> 20
        );
    }
}
