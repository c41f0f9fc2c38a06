//! The shape of the paper's ablation (Fig. 9) and of its comparison with the software designs
//! (Fig. 8), on generated traces and a scaled-down machine (so that a short trace overflows the
//! caches): read amplification falls from tens of times (naive) to 2x (DAX-CL-checksums) and
//! below with redundancy caching; TVARAK never reads old data from NVM on a writeback; on small
//! transactions TxB-Page makes more NVM+cache accesses than TxB-Object, which makes more than
//! TVARAK; the simulator is deterministic.

use pmem::rng::SplitMix64;
use tvarak_sim::cache::CacheGeom;
use tvarak_sim::design::Design;
use tvarak_sim::error::SimError;
use tvarak_sim::sim::{Event, Report, SimConfig, simulate};

/// Table III scaled down: 4 cores, 4 KB L1, 16 KB L2, 1 MB LLC in 4 banks (same ways,
/// latencies, energies, partitions, controller cache and DIMMs).
fn small() -> SimConfig {
    let d = SimConfig::default();
    SimConfig {
        cores: 4,
        l1: CacheGeom {
            bytes: 4 << 10,
            ..d.l1
        },
        l2: CacheGeom {
            bytes: 16 << 10,
            ..d.l2
        },
        llc: CacheGeom {
            bytes: 1 << 20,
            ..d.llc
        },
        llc_banks: 4,
        ..d
    }
}

/// `n` random 8-byte accesses per core, each core in its own `region`-byte region, a store
/// with probability `write_pct` percent.
fn random_trace(seed: u64, n: u64, region: u64, write_pct: u64) -> Vec<Event> {
    let mut r = SplitMix64::new(seed);
    let mut evs = Vec::new();
    for i in 0..n {
        for core in 0..4u16 {
            let _ = i;
            let addr = u64::from(core) * region + r.below(region / 64) * 64;
            if r.below(100) < write_pct {
                evs.push(Event::Store {
                    core,
                    addr,
                    data: None,
                    len: 8,
                });
            } else {
                evs.push(Event::Load { core, addr, len: 8 });
            }
        }
    }
    evs
}

/// Transactions of two 32-byte object updates each, objects 64 B-aligned in a per-core
/// region; the commit names the modified ranges.
fn tx_trace(seed: u64, txs: u64, region: u64) -> Vec<Event> {
    let mut r = SplitMix64::new(seed);
    let mut evs = Vec::new();
    for _ in 0..txs {
        for core in 0..4u16 {
            evs.push(Event::TxBegin { core });
            let mut ranges = Vec::new();
            for _ in 0..2 {
                let addr = u64::from(core) * region + r.below(region / 64) * 64;
                evs.push(Event::Load {
                    core,
                    addr,
                    len: 32,
                });
                evs.push(Event::Store {
                    core,
                    addr,
                    data: None,
                    len: 32,
                });
                ranges.push((addr, 32));
            }
            evs.push(Event::TxCommit { core, ranges });
        }
    }
    evs
}

fn run(cfg: &SimConfig, d: Design, evs: &[Event]) -> Report {
    simulate(cfg, d, evs.iter().cloned().map(Ok::<_, SimError>), None).unwrap()
}

#[test]
fn read_amplification_falls_through_the_steps() {
    let cfg = small();
    // Random reads over 4 x 2 MB (8x the LLC).
    let evs = random_trace(1, 6000, 2 << 20, 0);
    let ra = |d| {
        let r = run(&cfg, d, &evs);
        let c = &r.counters;
        eprintln!(
            "{d}: fills {} data R {} red R {} amplification {:.3}",
            c.fills,
            c.nvm_data_reads,
            c.nvm_red_reads,
            c.read_amplification()
        );
        c.read_amplification()
    };
    let base = ra(Design::Baseline);
    let naive = ra(Design::Naive);
    let cl = ra(Design::ClCsums);
    let cache = ra(Design::ClCache);
    let tvarak = ra(Design::Tvarak);
    assert!((base - 1.0).abs() < 1e-9, "baseline {base}");
    assert!(naive >= 60.0, "naive {naive}");
    assert!((cl - 2.0).abs() < 1e-9, "cl {cl}");
    assert!(cache < cl && cache >= 1.0, "cl-cache {cache}");
    assert!(tvarak < cl && tvarak >= 1.0, "tvarak {tvarak}");
}

#[test]
fn tvarak_reads_no_old_data_on_writeback() {
    let cfg = small();
    let evs = random_trace(2, 6000, 2 << 20, 50);
    let cache = run(&cfg, Design::ClCache, &evs).counters;
    let tv = run(&cfg, Design::Tvarak, &evs).counters;
    eprintln!("cl-cache {cache:?}\ntvarak {tv:?}");
    assert!(cache.writebacks > 1000, "{}", cache.writebacks);
    // cl-cache reads the old data of every writeback; TVARAK reads data only to fill.
    assert_eq!(cache.nvm_data_reads, cache.fills + cache.writebacks);
    assert!(tv.writebacks > 1000);
    assert_eq!(tv.nvm_data_reads, tv.fills);
    assert!(tv.diffs_created > 0 && tv.diffs_evicted > 0);
    // The step before caching pays every redundancy access at NVM.
    let cl = run(&cfg, Design::ClCsums, &evs).counters;
    assert!(cl.nvm_red_reads > cache.nvm_red_reads);
    assert!(cl.nvm_red_writes > cache.nvm_red_writes);
}

#[test]
fn software_designs_cost_more_accesses_on_small_transactions() {
    let cfg = small();
    let evs = tx_trace(3, 1500, 1 << 20);
    let total = |d| {
        let r = run(&cfg, d, &evs);
        let c = &r.counters;
        eprintln!(
            "{d}: nvm {} (data {}+{} red {}+{}) cache {} energy {:.0} nJ runtime {:.0} ns",
            c.nvm_accesses(),
            c.nvm_data_reads,
            c.nvm_data_writes,
            c.nvm_red_reads,
            c.nvm_red_writes,
            c.cache_accesses(),
            r.energy_nj,
            r.runtime_ns
        );
        c.nvm_accesses() + c.cache_accesses()
    };
    let base = total(Design::Baseline);
    let tv = total(Design::Tvarak);
    let obj = total(Design::TxbObject);
    let page = total(Design::TxbPage);
    assert!(base <= tv, "baseline {base} tvarak {tv}");
    assert!(tv < obj, "tvarak {tv} txb-object {obj}");
    assert!(obj < page, "txb-object {obj} txb-page {page}");
}

#[test]
fn simulation_is_deterministic() {
    let cfg = small();
    let evs = random_trace(4, 2000, 1 << 20, 30);
    for d in [
        Design::Tvarak,
        Design::TxbPage,
        Design::Vilamb { period_writes: 100 },
    ] {
        let a = run(&cfg, d, &evs);
        let b = run(&cfg, d, &evs);
        assert_eq!(a, b, "{d}");
    }
    // and the counters do depend on the trace
    let other = random_trace(5, 2000, 1 << 20, 30);
    assert_ne!(
        run(&cfg, Design::Tvarak, &evs).counters,
        run(&cfg, Design::Tvarak, &other).counters
    );
}

#[test]
fn vilamb_batches_more_with_a_longer_period() {
    // Writes over a small footprint (4 x 64 KB): a longer period finds each page dirtied many
    // times between sweeps and recomputes it once.
    let cfg = small();
    let evs = random_trace(6, 2000, 64 << 10, 100);
    let acc = |period_writes| {
        let c = run(&cfg, Design::Vilamb { period_writes }, &evs).counters;
        eprintln!(
            "vilamb:{period_writes}: sweeps {} sw line accesses {} nvm {}",
            c.sweeps,
            c.sw_line_accesses,
            c.nvm_accesses()
        );
        (c.sweeps, c.sw_line_accesses)
    };
    let (s_short, a_short) = acc(50);
    let (s_long, a_long) = acc(2000);
    assert!(s_short > s_long, "{s_short} {s_long}");
    assert!(a_short > 2 * a_long, "{a_short} {a_long}");
}

#[test]
fn sequential_reads_share_cl_checksum_lines() {
    // Four cores stream through their own 8 MB-aligned regions: one CL-checksum line serves
    // 16 data lines, so with caching the read amplification is 1 + 1/16 (the regions' equal
    // alignment must not make the cores' checksum lines collide in the caches).
    let cfg = small();
    let mut evs = Vec::new();
    for i in 0..4096u64 {
        for core in 0..4u16 {
            evs.push(Event::Load {
                core,
                addr: (u64::from(core) << 23) + i * 64,
                len: 8,
            });
        }
    }
    let cl = run(&cfg, Design::ClCsums, &evs).counters;
    let cache = run(&cfg, Design::ClCache, &evs).counters;
    eprintln!(
        "sequential: cl {:.4} cl-cache {:.4}",
        cl.read_amplification(),
        cache.read_amplification()
    );
    assert!((cl.read_amplification() - 2.0).abs() < 1e-9);
    assert!((cache.read_amplification() - (1.0 + 1.0 / 16.0)).abs() < 1e-9);
}
