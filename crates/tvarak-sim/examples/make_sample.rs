//! Writes the small sample trace kept for tests, `crates/tvarak-sim/tests/data/heap-small.kvtrace`:
//! a recorded run of the heap's transactions (2 threads, a hash map each), with data.
//!
//! `cargo run -p kavach-tvarak-sim --example make_sample [OUT]`

use tvarak_sim::record::{self, HeapParams};

/// The parameters of the committed sample (`tests/record.rs` checks the map they make).
fn sample_params() -> HeapParams {
    HeapParams {
        threads: 2,
        ops_per_thread: 40,
        buckets: 8,
        keys: 30,
        read_percent: 25,
        value: 16,
        with_data: true,
        seed: 11,
        work_mhz: None,
    }
}

fn main() {
    let out = std::env::args().nth(1).unwrap_or_else(|| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/heap-small.kvtrace").to_string()
    });
    let (rec, image) = record::heap_workload(&sample_params(), Vec::new()).expect("recording");
    std::fs::write(&out, &rec.writer).expect("writing the sample");
    println!(
        "{out}: {} events, {} raw bytes, {} file bytes, medium {} bytes",
        rec.events,
        rec.raw_bytes,
        rec.writer.len(),
        image.len()
    );
}
