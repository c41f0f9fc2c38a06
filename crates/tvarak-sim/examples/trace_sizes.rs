//! Sizes of traces: events, raw event-stream bytes, file bytes and the compression ratio, for
//! the generators and the recorded workloads at a small scale (and, on stderr, how long reading
//! each generated trace back took).
//!
//! `cargo run --release -p kavach-tvarak-sim --example trace_sizes [FIO_SCALE_DIVISOR]`
//! (default 64: the paper's fio and STREAM sizes divided by 64).

use tvarak_sim::record::{self, HeapParams, KvParams, LogParams};
use tvarak_sim::trace::{Event, TraceHeader, TraceWriter};
use tvarak_sim::workload::{self, FioParams, Kernel, Pattern, Rw, StreamParams};

fn row(name: &str, events: u64, raw: u64, file: usize) {
    println!(
        "| {name} | {events} | {raw} | {file} | {:.1} | {:.2} |",
        raw as f64 / file as f64,
        file as f64 / events as f64
    );
}

fn encode(h: TraceHeader, events: impl Iterator<Item = Event>) {
    let name = h.name.clone() + if h.with_data { " (data)" } else { "" };
    let mut w = TraceWriter::new(Vec::new(), h).unwrap();
    for e in events {
        w.push(&e).unwrap();
    }
    let (n, raw) = (w.events(), w.raw_bytes());
    let file = w.finish().unwrap();
    let t = std::time::Instant::now();
    let back = tvarak_sim::trace::TraceReader::new(&file[..])
        .unwrap()
        .count();
    assert_eq!(back as u64, n);
    eprintln!("{name}: read back in {:?}", t.elapsed());
    row(&name, n, raw, file.len());
}

fn main() {
    let div: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("a number"))
        .unwrap_or(64);
    println!("| trace | events | raw bytes | file bytes | raw/file | file bytes/event |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for pattern in [Pattern::Seq, Pattern::Rand] {
        for rw in [Rw::Read, Rw::Write] {
            let p = FioParams::scaled(pattern, rw, div);
            encode(p.header(), workload::fio(&p).unwrap());
        }
    }
    let mut p = FioParams::scaled(Pattern::Rand, Rw::Write, div);
    p.with_data = true;
    encode(p.header(), workload::fio(&p).unwrap());
    for k in [Kernel::Copy, Kernel::Scale, Kernel::Add, Kernel::Triad] {
        let mut p = StreamParams::paper(k);
        p.array_bytes = (p.array_bytes / div).max(64 * 12) / (64 * 12) * (64 * 12);
        encode(p.header(), workload::stream(&p).unwrap());
    }
    let mut p = StreamParams::paper(Kernel::Triad);
    p.array_bytes = (p.array_bytes / div).max(64 * 12) / (64 * 12) * (64 * 12);
    p.with_data = true;
    encode(p.header(), workload::stream(&p).unwrap());
    for with_data in [false, true] {
        let p = LogParams {
            with_data,
            ..LogParams::small()
        };
        let (r, _) = record::log_workload(&p, Vec::new()).unwrap();
        let name = r.header.name.clone() + if with_data { " (data)" } else { "" };
        row(&name, r.events, r.raw_bytes, r.writer.len());
        let p = HeapParams {
            with_data,
            ..HeapParams::small()
        };
        let (r, _) = record::heap_workload(&p, Vec::new()).unwrap();
        let name = r.header.name.clone() + if with_data { " (data)" } else { "" };
        row(&name, r.events, r.raw_bytes, r.writer.len());
        let p = KvParams {
            with_data,
            ..KvParams::small()
        };
        let (r, _) = record::kv_workload(&p, Vec::new()).unwrap();
        let name = r.header.name.clone() + if with_data { " (data)" } else { "" };
        row(&name, r.events, r.raw_bytes, r.writer.len());
    }
}
