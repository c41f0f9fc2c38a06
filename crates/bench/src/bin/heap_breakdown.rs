//! Where a heap transaction's time goes: the Rust engine timed piece by piece on one medium
//! (a pool file, normally on /dev/shm). This is the breakdown behind the libpmemobj
//! comparison in `bench/heap` (which measures both libraries through their C APIs); it
//! compares nothing by itself.
//!
//! Rows (mean ns per operation over `--ops`):
//! - `flush+fence 64B`: one clwb of a line and an sfence: the unit a commit pays per fence.
//! - `empty tx`: take a lane, begin, commit with nothing changed (no fence).
//! - `snapshot 64B`: begin, add_range of 64 bytes, commit: the undo entry, its fence, and the
//!   commit's two fences, without the store.
//! - `overwrite N`: begin, add_range, store N bytes, commit.
//! - `alloc N` / `free N`: a transaction allocating (or freeing) one block of N bytes and
//!   storing its offset in a slot (snapshotted).

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Instant;

use clap::Parser;
use heap::{HeapFile, HeapOptions, RawHeap};

#[derive(Parser, Debug)]
#[command(about = "Time the pieces of a heap transaction (see the source's header)")]
struct Args {
    /// Pool file to create (removed afterwards).
    #[arg(long, default_value = "/dev/shm/kavach-heap-breakdown.pool")]
    path: PathBuf,
    /// Operations per row.
    #[arg(long, default_value_t = 200_000)]
    ops: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn time(ops: u64, mut f: impl FnMut(u64)) -> f64 {
    for i in 0..ops / 10 {
        f(i);
    }
    let t = Instant::now();
    for i in 0..ops {
        f(i);
    }
    t.elapsed().as_nanos() as f64 / ops as f64
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let _ = std::fs::remove_file(&a.path);
    let file = HeapFile::create(&a.path, 1 << 30, &HeapOptions::default())?;
    let raw: &RawHeap = file.raw();
    let medium = raw.medium().clone();
    let (slots, _) = raw.root(8 * 1024)?;
    let mut rows: Vec<(String, f64, f64)> = Vec::new();
    let fences = |raw: &RawHeap| raw.counters().fences.load(Ordering::Relaxed);
    let scratch = raw.base() + slots;
    let ns = time(a.ops, |_| {
        medium.flush(scratch as usize, 64).expect("flush");
        medium.fence().expect("fence");
    });
    rows.push(("flush+fence 64B".into(), ns, 1.0));
    let f0 = fences(raw);
    let ns = time(a.ops, |_| {
        let mut l = raw.lane();
        raw.begin(&mut l);
        raw.commit(&mut l).expect("commit");
    });
    rows.push((
        "empty tx".into(),
        ns,
        (fences(raw) - f0) as f64 / (a.ops + a.ops / 10) as f64,
    ));
    for size in [64u64, 256, 1024, 4096] {
        let mut l = raw.lane();
        raw.begin(&mut l);
        let obj = raw.alloc(&mut l, size, true)?;
        raw.commit(&mut l)?;
        drop(l);
        if size == 64 {
            let f0 = fences(raw);
            let ns = time(a.ops, |_| {
                let mut l = raw.lane();
                raw.begin(&mut l);
                raw.add_range(&mut l, obj, size).expect("add");
                raw.commit(&mut l).expect("commit");
            });
            let per = (fences(raw) - f0) as f64 / (a.ops + a.ops / 10) as f64;
            rows.push(("snapshot 64B".into(), ns, per));
        }
        let data = vec![0xa5u8; size as usize];
        let f0 = fences(raw);
        let ns = time(a.ops, |i| {
            let mut l = raw.lane();
            raw.begin(&mut l);
            raw.add_range(&mut l, obj, size).expect("add");
            medium.write((raw.base() + obj) as usize, &data[..]);
            let _ = i;
            raw.commit(&mut l).expect("commit");
        });
        let per = (fences(raw) - f0) as f64 / (a.ops + a.ops / 10) as f64;
        rows.push((format!("overwrite {size}"), ns, per));
        // Alloc then free, each its own transaction, the offset kept in a slot.
        let slot = slots + 8 * (size.trailing_zeros() as u64);
        let n = a.ops / 2;
        let mut alloc_ns = 0.0;
        let mut free_ns = 0.0;
        let f0 = fences(raw);
        for _ in 0..n {
            let t = Instant::now();
            let mut l = raw.lane();
            raw.begin(&mut l);
            let b = raw.alloc(&mut l, size, false)?;
            raw.write(&mut l, slot, &b.to_le_bytes())?;
            raw.commit(&mut l)?;
            let t2 = Instant::now();
            raw.begin(&mut l);
            raw.free(&mut l, b)?;
            raw.write(&mut l, slot, &0u64.to_le_bytes())?;
            raw.commit(&mut l)?;
            free_ns += t2.elapsed().as_nanos() as f64;
            alloc_ns += (t2 - t).as_nanos() as f64;
        }
        let per = (fences(raw) - f0) as f64 / (2 * n) as f64;
        rows.push((format!("alloc {size}"), alloc_ns / n as f64, per));
        rows.push((format!("free {size}"), free_ns / n as f64, per));
    }
    file.close()?;
    let _ = std::fs::remove_file(&a.path);
    if a.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(n, ns, f)| serde_json::json!({"row": n, "ns": ns, "fences": f}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("{:<18} {:>10} {:>8}", "row", "ns/op", "fences");
        for (n, ns, f) in rows {
            println!("{n:<18} {ns:>10.1} {f:>8.2}");
        }
    }
    Ok(())
}
