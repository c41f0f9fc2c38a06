//! How long one insert into a shard's keyspace takes while the table and the arena grow: the
//! stalls a write sees from a table doubling (all entries relinked at once, before issue 27) or
//! an incremental rehash, and from the arena growing. Inserts `--keys` YCSB-like records
//! (`user` + 19 digits, `--value` bytes) into one table in one arena with page tracking on, as a
//! shard of `kavach serve` holds them, and reports the latency distribution, the slowest
//! inserts and what each did (doubled the table, grew the image).
//!
//!   cargo run --release -p kavach-dstore --example table_growth -- [--keys N] [--value B] [--rounds R]

use std::time::{Duration, Instant};

use dipper::Arena;
use dstore::table;

fn main() {
    let (mut keys, mut value, mut rounds) = (15_625usize, 1100usize, 5usize);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |name: &str| -> usize {
            args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
                eprintln!("{name} needs a number");
                std::process::exit(2)
            })
        };
        match a.as_str() {
            "--keys" => keys = num("--keys"),
            "--value" => value = num("--value"),
            "--rounds" => rounds = num("--rounds"),
            "-h" | "--help" => {
                println!(
                    "table_growth [--keys N (default 15625: 1M records over 64 shards)] \
                     [--value BYTES (default 1100)] [--rounds R (default 5)]"
                );
                return;
            }
            other => {
                eprintln!("unknown argument {other} (see --help)");
                std::process::exit(2)
            }
        }
    }
    let v = vec![b'v'; value];
    let mut all = Vec::new();
    let mut worst: Vec<(Duration, bool, bool)> = Vec::new();
    let mut total = Duration::ZERO;
    for _ in 0..rounds {
        let mut a = Arena::new();
        a.track_dirty();
        // A shard of a store made today: its tables rehash incrementally.
        table::set_incremental(&mut a);
        let t = table::create(&mut a, 64).unwrap();
        let start = Instant::now();
        for i in 0..keys {
            let k = format!(
                "user{:019}",
                (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 1
            );
            let (n, len) = (table::buckets(&a, t), a.len());
            let t0 = Instant::now();
            let h = table::hash(42, k.as_bytes());
            let e = table::new_entry(&mut a, h, k.as_bytes(), v.len(), 0).unwrap();
            let at = e.value_at(&a);
            a.write(at, &v);
            table::insert(&mut a, t, e).unwrap();
            let d = t0.elapsed();
            all.push(d);
            worst.push((d, table::buckets(&a, t) != n, a.len() != len));
        }
        total += start.elapsed();
        table::validate(&a, t, "keyspace").unwrap();
    }
    all.sort_unstable();
    let q = |p: f64| all[((all.len() - 1) as f64 * p) as usize];
    println!(
        "{rounds} x {keys} inserts of {value} B values: {:.1} ms a round; p50 {:?} p99 {:?} \
         p99.9 {:?} p99.99 {:?} max {:?}",
        total.as_secs_f64() * 1e3 / rounds as f64,
        q(0.5),
        q(0.99),
        q(0.999),
        q(0.9999),
        all[all.len() - 1]
    );
    worst.sort_unstable_by_key(|w| std::cmp::Reverse(w.0));
    println!("slowest inserts:");
    for (d, doubled, grew) in worst.iter().take(8) {
        println!(
            "  {:>9.3} ms{}{}",
            d.as_secs_f64() * 1e3,
            if *doubled { "  doubled the table" } else { "" },
            if *grew { "  grew the arena" } else { "" }
        );
    }
}
