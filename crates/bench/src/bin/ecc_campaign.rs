//! Fault-injection campaign for the reliable-word code (`heap::ecc`, `docs/dnv.md`).
//!
//! For each flip count k: take a random data word, encode it, flip k distinct random bits of the
//! 128-bit pair, run the corrector and sort the outcome into corrected (back to the original),
//! uncorrectable (reported), miscorrected (a different codeword returned: must never happen for
//! k <= 7) or undetected (the damaged pair passes the check: impossible below 14 flips). Each
//! corrector call is timed on its own (mean, p50, p99, max; the clock read adds some tens of ns),
//! as the fastest of `--time-runs` runs of the same repair.
//!
//! Then the clean check: the time to verify a buffer of undamaged pairs, per word, for a buffer
//! far larger than the caches and one that fits in L1, plus encoding and decoding a buffer.
//!
//! Exit codes: 0 ok, 1 a guarantee was broken (a miscorrection or a missed correction at k <= 6,
//! a miscorrection at k = 7, an undetected pattern), 2 bad arguments.

#![forbid(unsafe_code)]

use clap::Parser;
use heap::ecc;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "Fault-injection campaign and timing of the reliable-word code")]
struct Args {
    /// Injections per flip count.
    #[arg(long, default_value_t = 10_000_000)]
    per_k: u64,
    /// Flip counts: `1..8` (inclusive), `3`, or `1,2,7`.
    #[arg(long, default_value = "1..8")]
    k: String,
    /// Seed of the random words and bit positions.
    #[arg(long, default_value_t = 2026)]
    seed: u64,
    /// Largest number of flips the corrector searches (at most 7).
    #[arg(long, default_value_t = ecc::MAX_FLIPS)]
    limit: u32,
    /// Times each repair this many times and keeps the fastest run (the repair is deterministic;
    /// on a shared machine a single run is often stretched by preemption).
    #[arg(long, default_value_t = 2)]
    time_runs: u32,
    /// Words in the large buffer of the clean-check measurement (0 skips it).
    #[arg(long, default_value_t = 1 << 21)]
    check_words: usize,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
    /// Instead of injecting: list every codeword of 14 bits (the lightest there are) and derive
    /// the exact share of 7-bit patterns left uncorrected and of 8-bit patterns miscorrected.
    #[arg(long)]
    distance: bool,
}

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `k` distinct positions among 128 bits, as (data mask, check mask).
    fn flips(&mut self, k: u32) -> (u64, u64) {
        let mut mask = 0u128;
        while mask.count_ones() < k {
            mask |= 1u128 << (self.next() % 128);
        }
        (mask as u64, (mask >> 64) as u64)
    }
}

fn parse_ks(s: &str) -> Result<Vec<u32>, String> {
    let bad =
        || format!("--k {s:?}: expected a count, a range a..b or a list a,b,c of counts 1..=128");
    let ks: Vec<u32> = if let Some((a, b)) = s.split_once("..") {
        let a: u32 = a.trim().parse().map_err(|_| bad())?;
        let b: u32 = b.trim().parse().map_err(|_| bad())?;
        if a > b {
            return Err(bad());
        }
        (a..=b).collect()
    } else {
        s.split(',')
            .map(|p| p.trim().parse().map_err(|_| bad()))
            .collect::<Result<_, _>>()?
    };
    if ks.is_empty() || ks.iter().any(|&k| k == 0 || k > 128) {
        return Err(bad());
    }
    Ok(ks)
}

#[derive(Default)]
struct Row {
    k: u32,
    injections: u64,
    corrected: u64,
    uncorrectable: u64,
    miscorrected: u64,
    undetected: u64,
    /// Repairs whose repeated run gave a different answer (a bug if ever nonzero).
    unstable: u64,
    mean_ns: f64,
    p50_ns: u64,
    p99_ns: u64,
    max_ns: u64,
    seconds: f64,
}

fn run_k(k: u32, n: u64, seed: u64, limit: u32, time_runs: u32) -> Row {
    let mut rng = Rng(seed ^ u64::from(k).wrapping_mul(0xA076_1D64_78BD_642F));
    let mut row = Row {
        k,
        injections: n,
        ..Row::default()
    };
    let mut times: Vec<u32> = Vec::with_capacity(n as usize);
    let start = Instant::now();
    for _ in 0..n {
        let w = rng.next();
        let e = ecc::encode(w);
        let (dm, cm) = rng.flips(k);
        let (sw, se) = (w ^ dm, e ^ cm);
        if ecc::check(sw, se) {
            row.undetected += 1;
            continue;
        }
        let t0 = Instant::now();
        let out = ecc::correct_within(sw, se, limit);
        let mut best = t0.elapsed();
        for _ in 1..time_runs {
            let t0 = Instant::now();
            let again = ecc::correct_within(std::hint::black_box(sw), se, limit);
            best = best.min(t0.elapsed());
            if again != out {
                row.unstable += 1;
            }
        }
        times.push(u32::try_from(best.as_nanos()).unwrap_or(u32::MAX));
        match out {
            Ok(fix) if fix.word == w && fix.check == e => row.corrected += 1,
            Ok(_) => row.miscorrected += 1,
            Err(_) => row.uncorrectable += 1,
        }
    }
    row.seconds = start.elapsed().as_secs_f64();
    if !times.is_empty() {
        row.mean_ns = times.iter().map(|&t| f64::from(t)).sum::<f64>() / times.len() as f64;
        times.sort_unstable();
        let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
        row.p50_ns = u64::from(at(0.5));
        row.p99_ns = u64::from(at(0.99));
        row.max_ns = u64::from(at(1.0));
    }
    row
}

struct CheckTiming {
    label: &'static str,
    words: usize,
    best_ns_per_word: f64,
    median_ns_per_word: f64,
    /// False when some pass did not find the buffer clean (a bug, reported as broken).
    all_clean: bool,
}

/// Times `op` over `words` words, repeated until about `budget` has passed (at least 5 times).
fn time_per_word(
    label: &'static str,
    words: usize,
    budget: Duration,
    mut op: impl FnMut() -> bool,
) -> CheckTiming {
    let mut samples = Vec::new();
    let mut all_clean = true;
    let start = Instant::now();
    while samples.len() < 5 || (start.elapsed() < budget && samples.len() < 100_000) {
        let t0 = Instant::now();
        let ok = op();
        let ns = t0.elapsed().as_nanos() as f64;
        all_clean &= ok;
        samples.push(ns / words as f64);
    }
    samples.sort_by(f64::total_cmp);
    CheckTiming {
        label,
        words,
        best_ns_per_word: samples[0],
        median_ns_per_word: samples[samples.len() / 2],
        all_clean,
    }
}

fn clean_check(words: usize, seed: u64) -> Result<Vec<CheckTiming>, ecc::EccError> {
    let mut rng = Rng(seed);
    let mut out = Vec::new();
    let budget = Duration::from_millis(1500);
    for (label_check, label_decode, label_encode, n) in [
        (
            "check, L1-resident buffer",
            "decode, L1-resident buffer",
            "encode, L1-resident buffer",
            256usize,
        ),
        (
            "check, large buffer",
            "decode, large buffer",
            "encode, large buffer",
            words,
        ),
    ] {
        if n == 0 {
            continue;
        }
        let data: Vec<u8> = (0..n).flat_map(|_| rng.next().to_le_bytes()).collect();
        let mut pairs = vec![0u8; n * ecc::PAIR_BYTES];
        ecc::encode_into(&data, &mut pairs)?;
        let mut back = vec![0u8; data.len()];
        out.push(time_per_word(label_check, n, budget, || {
            matches!(ecc::first_damaged(std::hint::black_box(&pairs)), Ok(None))
        }));
        out.push(time_per_word(label_decode, n, budget, || {
            ecc::decode_from(std::hint::black_box(&pairs), &mut back)
                .is_ok_and(|r| r.repairs.is_empty())
        }));
        if let Some(decode) = out.last_mut() {
            decode.all_clean &= back == data;
        }
        out.push(time_per_word(label_encode, n, budget, || {
            ecc::encode_into(std::hint::black_box(&data), &mut pairs).is_ok()
        }));
    }
    // One pair at a time through the word API, as a transactional read of one word would.
    let n = 1 << 16;
    let words: Vec<(u64, u64)> = (0..n)
        .map(|_| {
            let w = rng.next();
            (w, ecc::encode(w))
        })
        .collect();
    out.push(time_per_word(
        "check(word, check), one at a time",
        n,
        budget,
        || {
            std::hint::black_box(&words)
                .iter()
                .all(|&(w, e)| ecc::check(w, e))
        },
    ));
    Ok(out)
}

/// One nonzero even pattern in one bit column: its syndrome and the bits it flips.
#[derive(Clone, Copy)]
struct ColumnFlip {
    syndrome: u32,
    bits: u128,
}

/// The seven nonzero even patterns (2 or 4 of the halves A, B, C, D flipped) of each column.
fn even_column_flips() -> Vec<Vec<ColumnFlip>> {
    let mut cols = Vec::new();
    for col in 0..32u32 {
        let mut v = Vec::new();
        for pat in 1u32..16 {
            if pat.count_ones() % 2 == 1 {
                continue;
            }
            let a = u64::from(pat & 1) << (32 + col);
            let b = u64::from(pat >> 1 & 1) << col;
            let c = u64::from(pat >> 2 & 1) << (32 + col);
            let d = u64::from(pat >> 3 & 1) << col;
            let (data, check) = (a | b, c | d);
            v.push(ColumnFlip {
                syndrome: ecc::crc32c_raw(data) ^ check as u32,
                bits: u128::from(data) | u128::from(check) << 64,
            });
        }
        cols.push(v);
    }
    cols
}

fn binomial(n: u64, k: u64) -> f64 {
    (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

/// Every `k`-subset of the set bits of `support`, as masks.
fn subsets(support: u128, k: u32, out: &mut impl FnMut(u128)) {
    let bits: Vec<u32> = (0..128).filter(|&i| support >> i & 1 == 1).collect();
    fn walk(bits: &[u32], k: u32, from: usize, acc: u128, out: &mut impl FnMut(u128)) {
        if k == 0 {
            out(acc);
            return;
        }
        for i in from..bits.len() {
            if bits.len() - i < k as usize {
                break;
            }
            walk(bits, k - 1, i + 1, acc | 1u128 << bits[i], out);
        }
    }
    walk(&bits, k, 0, 0, out);
}

/// Lists the 14-bit codewords by meeting in the middle: a codeword of 14 bits has an even number
/// of flips in each of at most 7 bit columns, so it is its 3 lowest columns (group X) plus the
/// rest (group Y, 1 to 4 columns above X), with equal syndromes. Every X of exactly 3 columns
/// goes in a table by syndrome; every Y is looked up in it.
fn distance_report(json: bool) -> ExitCode {
    let start = Instant::now();
    let cols = even_column_flips();
    // X groups: (syndrome, bits, highest column).
    let mut xs: Vec<(u32, u128, u32)> = Vec::with_capacity(4960 * 343);
    for (c1, col1) in cols.iter().enumerate() {
        for f1 in col1 {
            for (c2, col2) in cols.iter().enumerate().skip(c1 + 1) {
                for f2 in col2 {
                    for (c3, col3) in cols.iter().enumerate().skip(c2 + 1) {
                        for f3 in col3 {
                            xs.push((
                                f1.syndrome ^ f2.syndrome ^ f3.syndrome,
                                f1.bits | f2.bits | f3.bits,
                                c3 as u32,
                            ));
                        }
                    }
                }
            }
        }
    }
    xs.sort_unstable_by_key(|x| x.0);
    // Y groups: 1 to 4 columns above the X group, at most 14 - 6 = 8 bits.
    struct YWalk<'a> {
        cols: &'a [Vec<ColumnFlip>],
        xs: &'a [(u32, u128, u32)],
        found: Vec<u128>,
    }
    impl YWalk<'_> {
        /// Extends a Y group whose lowest column is `low` and which has `depth` columns.
        fn walk(&mut self, from: usize, low: usize, depth: u32, syndrome: u32, bits: u128) {
            if depth > 0 {
                let weight = bits.count_ones();
                let first = self.xs.partition_point(|x| x.0 < syndrome);
                for x in self.xs[first..].iter().take_while(|x| x.0 == syndrome) {
                    if (x.2 as usize) < low && x.1.count_ones() + weight == 14 {
                        self.found.push(x.1 | bits);
                    }
                }
            }
            if depth == 4 {
                return;
            }
            let cols = self.cols;
            for (c, col) in cols.iter().enumerate().skip(from) {
                for f in col {
                    if (bits | f.bits).count_ones() > 8 {
                        continue;
                    }
                    let low = if depth == 0 { c } else { low };
                    self.walk(c + 1, low, depth + 1, syndrome ^ f.syndrome, bits | f.bits);
                }
            }
        }
    }
    let mut y = YWalk {
        cols: &cols,
        xs: &xs,
        found: Vec::new(),
    };
    y.walk(3, 0, 0, 0, 0);
    let mut words14 = y.found;
    words14.sort_unstable();
    words14.dedup();
    let all_codewords = words14
        .iter()
        .all(|&c| ecc::check(c as u64, (c >> 64) as u64));

    // 7 flips are left uncorrected exactly when they are half of some 14-bit codeword; 8 flips
    // are miscorrected exactly when they lie inside exactly one 14-bit codeword (inside two or
    // more they tie and are reported).
    let mut sevens: std::collections::HashSet<u128> = std::collections::HashSet::new();
    let mut eights: std::collections::HashMap<u128, u32> = std::collections::HashMap::new();
    for &c in &words14 {
        subsets(c, 7, &mut |s| {
            sevens.insert(s);
        });
        subsets(c, 8, &mut |s| {
            *eights.entry(s).or_insert(0) += 1;
        });
    }
    let eights_once = eights.values().filter(|&&n| n == 1).count();
    let r7 = sevens.len() as f64 / binomial(128, 7);
    let r8 = eights_once as f64 / binomial(128, 8);
    if json {
        let doc = serde_json::json!({
            "codewords_of_14_bits": words14.len(),
            "all_verified": all_codewords,
            "seven_bit_patterns_uncorrectable": sevens.len(),
            "seven_bit_uncorrectable_rate": r7,
            "eight_bit_patterns_miscorrected": eights_once,
            "eight_bit_miscorrection_rate": r8,
            "seconds": start.elapsed().as_secs_f64(),
        });
        println!("{doc}");
    } else {
        println!(
            "codewords of 14 bits: {} (all pass the check: {all_codewords})",
            words14.len()
        );
        println!(
            "7-bit patterns left uncorrected: {} of C(128,7) = {:.4e}, rate {r7:.4e} (per 1e9: {:.0})",
            sevens.len(),
            binomial(128, 7),
            r7 * 1e9
        );
        println!(
            "8-bit patterns miscorrected: {eights_once} of C(128,8) = {:.4e}, rate {r8:.4e}",
            binomial(128, 8)
        );
        println!("({:.1} s)", start.elapsed().as_secs_f64());
    }
    if all_codewords {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.distance {
        return distance_report(args.json);
    }
    let ks = match parse_ks(&args.k) {
        Ok(ks) => ks,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if args.limit > ecc::MAX_FLIPS {
        eprintln!("--limit {}: at most {}", args.limit, ecc::MAX_FLIPS);
        return ExitCode::from(2);
    }
    let mut rows = Vec::new();
    for &k in &ks {
        let row = run_k(k, args.per_k, args.seed, args.limit, args.time_runs.max(1));
        eprintln!(
            "k={k}: {} injections, {} corrected, {} uncorrectable, {} miscorrected, {} undetected, \
             mean {:.0} ns, p99 {} ns ({:.1} s)",
            row.injections,
            row.corrected,
            row.uncorrectable,
            row.miscorrected,
            row.undetected,
            row.mean_ns,
            row.p99_ns,
            row.seconds
        );
        rows.push(row);
    }
    let timings = match clean_check(args.check_words, args.seed) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("clean check: {e}");
            return ExitCode::from(1);
        }
    };

    let mut broken = Vec::new();
    for t in &timings {
        if !t.all_clean {
            broken.push(format!("{}: a clean buffer did not pass", t.label));
        }
    }
    for r in &rows {
        if r.undetected > 0 && r.k < 14 {
            broken.push(format!("k={}: {} undetected", r.k, r.undetected));
        }
        if r.unstable > 0 {
            broken.push(format!(
                "k={}: {} repairs changed on a rerun",
                r.k, r.unstable
            ));
        }
        if r.k <= args.limit && r.miscorrected > 0 {
            broken.push(format!("k={}: {} miscorrected", r.k, r.miscorrected));
        }
        if r.k <= args.limit.min(6) && r.corrected != r.injections {
            broken.push(format!(
                "k={}: {} of {} corrected",
                r.k, r.corrected, r.injections
            ));
        }
    }

    if args.json {
        let doc = serde_json::json!({
            "per_k": args.per_k,
            "time_runs": args.time_runs,
            "seed": args.seed,
            "limit": args.limit,
            "rows": rows.iter().map(|r| serde_json::json!({
                "k": r.k,
                "injections": r.injections,
                "corrected": r.corrected,
                "uncorrectable": r.uncorrectable,
                "miscorrected": r.miscorrected,
                "undetected": r.undetected,
                "repair_mean_ns": r.mean_ns,
                "repair_p50_ns": r.p50_ns,
                "repair_p99_ns": r.p99_ns,
                "repair_max_ns": r.max_ns,
                "seconds": r.seconds,
            })).collect::<Vec<_>>(),
            "clean": timings.iter().map(|t| serde_json::json!({
                "what": t.label,
                "words": t.words,
                "best_ns_per_word": t.best_ns_per_word,
                "median_ns_per_word": t.median_ns_per_word,
            })).collect::<Vec<_>>(),
            "broken": broken,
        });
        match serde_json::to_string_pretty(&doc) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("json: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        println!(
            "ecc campaign: {} injections per k, seed {}, search limit {} flips, repair time = \
             fastest of {} runs",
            args.per_k, args.seed, args.limit, args.time_runs
        );
        println!(
            "{:>3} {:>12} {:>12} {:>13} {:>12} {:>10} {:>12} {:>10} {:>10} {:>11}",
            "k",
            "injections",
            "corrected",
            "uncorrectable",
            "miscorrected",
            "undetected",
            "mean_ns",
            "p50_ns",
            "p99_ns",
            "max_ns"
        );
        for r in &rows {
            println!(
                "{:>3} {:>12} {:>12} {:>13} {:>12} {:>10} {:>12.0} {:>10} {:>10} {:>11}",
                r.k,
                r.injections,
                r.corrected,
                r.uncorrectable,
                r.miscorrected,
                r.undetected,
                r.mean_ns,
                r.p50_ns,
                r.p99_ns,
                r.max_ns
            );
        }
        println!("clean pairs, ns per word (best / median of repeated passes):");
        for t in &timings {
            println!(
                "  {:<36} {:>9} words  {:>6.2} / {:>6.2}",
                t.label, t.words, t.best_ns_per_word, t.median_ns_per_word
            );
        }
        for b in &broken {
            println!("BROKEN: {b}");
        }
    }
    if broken.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
