//! What a reliable object costs per transaction: a 64-byte object read whole and written whole
//! in one transaction, plain (`read_tx` + `write`) against reliable (`read_reliable` +
//! `write_reliable`), in undo and redo mode, on a heap pool in a file (use /dev/shm).
//!
//! cargo run --release -p kavach-heap --example reliable_cost -- [POOL_PATH] [SECONDS]
//!
//! Prints the median and p99 over batches of 1,000 transactions, interleaving the variants so
//! machine noise hits them alike.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use heap::reliable::{alloc_reliable, read_reliable, write_reliable};
use heap::{HeapFile, HeapOptions, RawHeap, TxMode};

const BATCH: usize = 1000;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Plain,
    Reliable,
    PlainRead,
    ReliableRead,
}

fn batch(h: &RawHeap, kind: Kind, plain: u64, rel: u64, mode: TxMode, n: usize) -> f64 {
    let mut buf = [0u8; 64];
    let t0 = Instant::now();
    for i in 0..n {
        let mut lane = h.lane();
        h.begin_mode(&mut lane, mode);
        match kind {
            Kind::Plain => {
                h.read_tx(&lane, plain, &mut buf).unwrap();
                buf[i % 64] = buf[i % 64].wrapping_add(1);
                h.write(&mut lane, plain, &buf).unwrap();
            }
            Kind::Reliable => {
                read_reliable(h, &mut lane, rel, 0, &mut buf).unwrap();
                buf[i % 64] = buf[i % 64].wrapping_add(1);
                write_reliable(h, &mut lane, rel, 0, &buf).unwrap();
            }
            Kind::PlainRead => h.read_tx(&lane, plain, &mut buf).unwrap(),
            Kind::ReliableRead => {
                read_reliable(h, &mut lane, rel, 0, &mut buf).unwrap();
            }
        }
        h.commit(&mut lane).unwrap();
    }
    std::hint::black_box(buf);
    t0.elapsed().as_nanos() as f64 / n as f64
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = PathBuf::from(
        args.next()
            .unwrap_or_else(|| "/dev/shm/kavach-reliable-cost.pool".into()),
    );
    let secs: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(4.0);
    let _ = std::fs::remove_file(&path);
    let hf = HeapFile::create(&path, 64 << 20, &HeapOptions::default()).expect("create the pool");
    let h = hf.raw().clone();
    let mut lane = h.lane();
    h.begin(&mut lane);
    let plain = h.alloc(&mut lane, 64, true).unwrap();
    let rel = alloc_reliable(&h, &mut lane, 64).unwrap();
    h.commit(&mut lane).unwrap();
    drop(lane);
    let kinds = [
        ("plain read+write", Kind::Plain),
        ("reliable read+write", Kind::Reliable),
        ("plain read-only", Kind::PlainRead),
        ("reliable read-only", Kind::ReliableRead),
    ];
    println!("64-byte object, one transaction = read whole + write whole (or read only)");
    println!("batches of {BATCH} transactions, {secs} s per mode, median and p99 of batch means");
    for mode in [TxMode::Undo, TxMode::Redo] {
        // Warm up.
        for (_, k) in kinds {
            batch(&h, k, plain, rel, mode, BATCH);
        }
        let mut t: Vec<Vec<f64>> = vec![Vec::new(); kinds.len()];
        let end = Instant::now() + Duration::from_secs_f64(secs);
        while Instant::now() < end {
            for (i, (_, k)) in kinds.iter().enumerate() {
                t[i].push(batch(&h, *k, plain, rel, mode, BATCH));
            }
        }
        let med: Vec<f64> = t.iter_mut().map(|v| pct(v, 0.5)).collect();
        for (i, (name, _)) in kinds.iter().enumerate() {
            println!(
                "{mode:?} {name:>20}: median {:7.1} ns, p99 {:7.1} ns ({} batches)",
                med[i],
                pct(&mut t[i], 0.99),
                t[i].len()
            );
        }
        println!(
            "{mode:?} reliable/plain: read+write {:.3}x ({:+.1} ns), read-only {:.3}x ({:+.1} ns)",
            med[1] / med[0],
            med[1] - med[0],
            med[3] / med[2],
            med[3] - med[2]
        );
    }
    drop(h);
    hf.close().unwrap();
    let _ = std::fs::remove_file(&path);
}
