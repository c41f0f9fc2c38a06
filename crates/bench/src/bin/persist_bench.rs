//! Kavach side of the persist-latency benchmark (`bench/persist/run.sh` runs it against
//! libpmem's `pmem_persist`). It mirrors `bench/persist/pmem_persist_bench.c` step by step:
//!
//! - map a 64 MiB file (created fresh) with Kavach's `Mapping` in the `adr` domain, prefault it;
//! - for each round, for each size: a store-only loop and a store + `persist(range)` loop of
//!   `iters` iterations each, each after an untimed warm-up of min(iters, 1000) iterations; the
//!   target walks the mapping in steps of the size rounded up to 4 KiB and wraps;
//! - print `kavach SIZE ROUND NS_PER_OP STORE_ONLY_NS_PER_OP`, nothing else on stdout.
//!
//! Exit codes: 0 ok, 2 bad arguments, 1 runtime failure.

#![forbid(unsafe_code)]

use pmem::{Domain, Mapping, Medium};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

const MAP_LEN: usize = 64 << 20;
const PAGE: usize = 4096;
const WARMUP_ITERS: u64 = 1000;
const ITERS_MAX: u64 = 10_000_000_000;
const ROUNDS_MAX: u64 = 100_000;

struct Args {
    file: PathBuf,
    sizes: Vec<usize>,
    iters: u64,
    rounds: u64,
}

const USAGE: &str = "usage: persist_bench --file PATH --sizes S1,S2,... --iters N --rounds R\n\
  prints 'kavach SIZE ROUND NS_PER_OP STORE_ONLY_NS_PER_OP' lines; the file is created fresh (64 MiB)";

fn parse_args() -> Result<Args, String> {
    let mut file = None;
    let mut sizes = None;
    let mut iters = None;
    let mut rounds = None;
    let mut it = std::env::args().skip(1);
    while let Some(opt) = it.next() {
        if opt == "-h" || opt == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let slot = match opt.as_str() {
            "--file" => &mut file,
            "--sizes" => &mut sizes,
            "--iters" => &mut iters,
            "--rounds" => &mut rounds,
            _ => return Err(format!("unknown argument `{opt}`")),
        };
        let value = it
            .next()
            .ok_or_else(|| format!("option {opt} needs a value"))?;
        if slot.replace(value).is_some() {
            return Err(format!("option {opt} given twice"));
        }
    }
    let number = |name: &str, v: Option<String>, max: u64| -> Result<u64, String> {
        let v = v.ok_or_else(|| format!("missing required option {name}"))?;
        let n: u64 = v
            .parse()
            .map_err(|_| format!("{name} `{v}` is not a number"))?;
        if n == 0 || n > max {
            return Err(format!("{name} must be in [1, {max}], not {n}"));
        }
        Ok(n)
    };
    let sizes_text = sizes.ok_or("missing required option --sizes")?;
    let sizes = sizes_text
        .split(',')
        .map(|s| match s.parse::<usize>() {
            Ok(n) if (8..=MAP_LEN).contains(&n) => Ok(n),
            _ => Err(format!(
                "size `{s}` must be a number of bytes in [8, {MAP_LEN}]"
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Args {
        file: PathBuf::from(file.ok_or("missing required option --file")?),
        sizes,
        iters: number("--iters", iters, ITERS_MAX)?,
        rounds: number("--rounds", rounds, ROUNDS_MAX)?,
    })
}

/// One walk of `iters` targets: store the iteration number, then (if `PERSIST`) persist `size`
/// bytes. Monomorphised per `PERSIST`, so the store-only variant has no branch left.
#[inline(always)]
fn walk<const PERSIST: bool>(
    m: &Mapping,
    stride: usize,
    size: usize,
    iters: u64,
) -> Result<(), pmem::PmemError> {
    let mut off = 0;
    for i in 0..iters {
        m.store_u64(off, std::hint::black_box(i));
        if PERSIST {
            m.persist(off, size)?;
        }
        off += stride;
        if off + size > MAP_LEN {
            off = 0;
        }
    }
    Ok(())
}

/// An untimed warm-up of min(iters, 1000) iterations, then the timed walk. Returns nanoseconds.
#[inline(never)]
fn timed<const PERSIST: bool>(
    m: &Mapping,
    stride: usize,
    size: usize,
    iters: u64,
) -> Result<u128, pmem::PmemError> {
    walk::<PERSIST>(m, stride, size, iters.min(WARMUP_ITERS))?;
    let t0 = Instant::now();
    walk::<PERSIST>(m, stride, size, iters)?;
    Ok(t0.elapsed().as_nanos())
}

fn run(a: &Args) -> anyhow::Result<()> {
    let _ = std::fs::remove_file(&a.file);
    let mut m = Mapping::create(&a.file, MAP_LEN as u64)?;
    m.set_domain(Domain::Adr);
    eprintln!(
        "persist_bench: backing {}, domain {}, flush instruction {}",
        m.backing().name(),
        m.domain(),
        pmem::cpu::flush_instruction().name()
    );
    m.write(0, &vec![0u8; MAP_LEN]); // prefault
    for round in 1..=a.rounds {
        for &size in &a.sizes {
            let stride = size.next_multiple_of(PAGE);
            let store = timed::<false>(&m, stride, size, a.iters)?;
            let persist = timed::<true>(&m, stride, size, a.iters)?;
            let per = |ns: u128| ns as f64 / a.iters as f64;
            println!(
                "kavach {size} {round} {:.2} {:.2}",
                per(persist),
                per(store)
            );
        }
    }
    drop(m);
    std::fs::remove_file(&a.file)?;
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("persist_bench: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("persist_bench: {e:#}");
            ExitCode::from(1)
        }
    }
}
