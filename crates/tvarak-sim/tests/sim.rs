//! The controller's NVM accesses per data-line access (the paper's table in section 2.9 of our
//! notes), on hand-built one- and two-event traces, with the paper's Table III machine.

use tvarak_sim::design::Design;
use tvarak_sim::error::SimError;
use tvarak_sim::sim::{Counters, Event, Observer, SimConfig, simulate};

fn run(design: Design, events: Vec<Event>) -> Counters {
    simulate(
        &SimConfig::default(),
        design,
        events.into_iter().map(Ok::<_, SimError>),
        None,
    )
    .unwrap()
    .counters
}

fn load(addr: u64) -> Event {
    Event::Load {
        core: 0,
        addr,
        len: 8,
    }
}

fn store(addr: u64) -> Event {
    Event::Store {
        core: 0,
        addr,
        data: None,
        len: 8,
    }
}

/// (data reads, red reads, data writes, red writes)
fn nvm(c: &Counters) -> (u64, u64, u64, u64) {
    (
        c.nvm_data_reads,
        c.nvm_red_reads,
        c.nvm_data_writes,
        c.nvm_red_writes,
    )
}

#[test]
fn fill_of_one_line_per_design() {
    let addr = 5 * 4096 + 3 * 64;
    let cases = [
        (Design::Baseline, (1, 0, 0, 0)),
        (Design::Naive, (64, 1, 0, 0)), // the whole page + its checksum: 65x
        (Design::ClCsums, (1, 1, 0, 0)), // line + CL-checksum: 2x
        (Design::ClCache, (1, 1, 0, 0)), // cold caches: the CL-checksum misses once
        (Design::Tvarak, (1, 1, 0, 0)),
        (Design::TxbObject, (1, 0, 0, 0)), // no read verification
        (Design::TxbPage, (1, 0, 0, 0)),
    ];
    for (d, want) in cases {
        let c = run(d, vec![load(addr)]);
        assert_eq!(nvm(&c), want, "{d}");
        assert_eq!(c.fills, 1, "{d}");
        assert_eq!(c.writebacks, 0, "{d}");
    }
}

#[test]
fn second_line_of_a_cl_checksum_line_hits_with_caching() {
    // Two lines sharing one DAX-CL-checksum line (16 lines = 1 KB): cl reads the checksum twice,
    // the caching designs once.
    let evs = || vec![load(0), load(64)];
    assert_eq!(nvm(&run(Design::ClCsums, evs())), (2, 2, 0, 0));
    let c = run(Design::ClCache, evs());
    assert_eq!(nvm(&c), (2, 1, 0, 0));
    // The two lines live in different banks: the second controller misses in its own cache
    // and finds the line in the LLC redundancy partition.
    assert_eq!(c.ctl_hits + c.llc_red_hits, 1);
    assert_eq!(c.llc_red_misses, 1);
    // Naive reads the page twice (no caching of what verification read).
    assert_eq!(nvm(&run(Design::Naive, evs())), (128, 2, 0, 0));
}

#[test]
fn writeback_of_one_line_per_design() {
    // A store fills the line (read for ownership) and the drain at the end writes it back.
    let addr = 7 * 4096 + 64;
    let cases = [
        (Design::Baseline, (1, 0, 1, 0)),
        // fill 64 + 1; writeback reads old data, syscs, parity and writes the three
        (Design::Naive, (64 + 1, 1 + 2, 1, 2)),
        // fill 1 + 1; writeback reads old data, syscs, CL-cs, parity and writes the four
        (Design::ClCsums, (1 + 1, 1 + 3, 1, 3)),
        // fill 1 + CL miss; writeback reads old data, syscs and parity miss (CL hits), the
        // three redundancy lines are written when the drain empties the partition
        (Design::ClCache, (1 + 1, 1 + 2, 1, 3)),
        // as cl-cache, but the old data comes from the diff: no data read at writeback
        (Design::Tvarak, (1, 1 + 2, 1, 3)),
        // no TxCommit in this trace: nothing to do for the software designs
        (Design::TxbObject, (1, 0, 1, 0)),
        (Design::TxbPage, (1, 0, 1, 0)),
    ];
    for (d, want) in cases {
        let c = run(d, vec![store(addr)]);
        assert_eq!(nvm(&c), want, "{d}");
        assert_eq!(c.writebacks, 1, "{d}");
    }
    let t = run(Design::Tvarak, vec![store(addr)]);
    assert_eq!(t.diffs_created, 1);
}

#[test]
fn vilamb_sweeps_dirty_pages_every_period() {
    // Two stores to one page, period 1: two sweeps of one page each (64 line reads, the page
    // checksum, 64 parity recomputes reading 2 peers and writing the parity line).
    let c = run(
        Design::Vilamb { period_writes: 1 },
        vec![store(0), store(64)],
    );
    assert_eq!(c.sweeps, 2);
    assert_eq!(c.sw_line_accesses, 2 * (64 + 1 + 64 * 3));
    assert_eq!(c.crc_ops, 2);
    // Period 2: one sweep (the drain's final sweep finds nothing left).
    let c = run(
        Design::Vilamb { period_writes: 2 },
        vec![store(0), store(64)],
    );
    assert_eq!(c.sweeps, 1);
}

#[test]
fn txb_commit_work_per_design() {
    let evs = || {
        vec![
            Event::TxBegin { core: 0 },
            store(0),
            Event::TxCommit {
                core: 0,
                ranges: vec![(0, 8)],
            },
        ]
    };
    // object: read the object's line, write its checksum, read 2 peers, write parity
    let o = run(Design::TxbObject, evs());
    assert_eq!(o.sw_line_accesses, 1 + 1 + 2 + 1);
    assert_eq!(o.sw_crc_bytes, 8);
    // page: read 64 lines, write the page checksum, and the same parity recompute
    let p = run(Design::TxbPage, evs());
    assert_eq!(p.sw_line_accesses, 64 + 1 + 2 + 1);
    assert_eq!(p.sw_crc_bytes, 4096);
    // hardware designs do nothing at commit
    assert_eq!(run(Design::Tvarak, evs()).sw_line_accesses, 0);
}

#[derive(Default)]
struct Log {
    fills: Vec<u64>,
    writebacks: Vec<(u64, [u8; 64])>,
    commits: usize,
}

impl Observer for Log {
    fn fill(&mut self, line_addr: u64) {
        self.fills.push(line_addr);
    }
    fn writeback(&mut self, line_addr: u64, data: &[u8; 64]) {
        self.writebacks.push((line_addr, *data));
    }
    fn tx_commit(&mut self, _ranges: &[(u64, u32)]) {
        self.commits += 1;
    }
    fn current(&mut self, _line_addr: u64) -> Option<[u8; 64]> {
        Some([0xAA; 64])
    }
}

#[test]
fn observer_sees_fills_and_final_bytes() {
    let evs = vec![
        Event::Store {
            core: 0,
            addr: 130,
            data: Some(vec![1, 2, 3]),
            len: 3,
        },
        Event::Store {
            core: 1,
            addr: 131,
            data: Some(vec![9]),
            len: 1,
        },
        load(4096),
        Event::TxCommit {
            core: 1,
            ranges: vec![(131, 1)],
        },
    ];
    let mut log = Log::default();
    simulate(
        &SimConfig::default(),
        Design::Tvarak,
        evs.into_iter().map(Ok),
        Some(&mut log),
    )
    .unwrap();
    assert_eq!(log.fills, vec![128, 4096]);
    assert_eq!(log.writebacks.len(), 1, "{:?}", log.writebacks);
    let (a, d) = log.writebacks[0];
    assert_eq!(a, 128);
    let mut want = [0xAA; 64];
    want[2..5].copy_from_slice(&[1, 9, 3]);
    assert_eq!(d, want);
    assert_eq!(log.commits, 1);
}

#[test]
fn bad_events_and_configs_are_errors() {
    let cfg = SimConfig::default();
    let bad = [
        Event::Load {
            core: 12,
            addr: 0,
            len: 8,
        },
        Event::Store {
            core: 0,
            addr: 0,
            data: Some(vec![1, 2]),
            len: 3,
        },
        Event::Load {
            core: 0,
            addr: u64::MAX - 2,
            len: 8,
        },
    ];
    for ev in bad {
        let r = simulate(&cfg, Design::Tvarak, std::iter::once(Ok(ev.clone())), None);
        assert!(matches!(r, Err(SimError::Invalid { .. })), "{ev:?}: {r:?}");
    }
    let r = simulate(
        &cfg,
        Design::Tvarak,
        std::iter::once(Err(SimError::invalid("x", "y", "z"))),
        None,
    );
    assert!(r.is_err());
    let mut c = cfg.clone();
    c.diff_ways = 0;
    assert!(simulate(&c, Design::Tvarak, std::iter::empty(), None).is_err());
    assert!(simulate(&c, Design::ClCache, std::iter::empty(), None).is_ok());
    let mut c = cfg.clone();
    c.red_ways = 10;
    c.diff_ways = 6;
    assert!(simulate(&c, Design::Tvarak, std::iter::empty(), None).is_err());
    let mut c = cfg;
    c.dimms = 2;
    assert!(simulate(&c, Design::Baseline, std::iter::empty(), None).is_err());
}

#[test]
fn without_a_controller_cache_the_partition_serves_redundancy() {
    let cfg = SimConfig {
        ctl_cache_bytes: 0,
        ..SimConfig::default()
    };
    let r = simulate(
        &cfg,
        Design::Tvarak,
        vec![load(0), load(64), store(128)].into_iter().map(Ok),
        None,
    )
    .unwrap();
    let c = r.counters;
    assert_eq!((c.ctl_hits, c.ctl_misses), (0, 0));
    // CL line: 1 miss then 2 hits (fills) + 1 hit (writeback); syscs and parity: 1 miss each
    assert_eq!((c.llc_red_hits, c.llc_red_misses), (3, 3));
    assert_eq!(nvm(&c), (3, 3, 1, 3));
    let bad = SimConfig {
        ctl_cache_bytes: 100,
        ..SimConfig::default()
    };
    assert!(simulate(&bad, Design::Tvarak, std::iter::empty(), None).is_err());
    let bad = SimConfig {
        cores: 0,
        ..SimConfig::default()
    };
    assert!(simulate(&bad, Design::Baseline, std::iter::empty(), None).is_err());
    let mut bad = SimConfig::default();
    bad.llc.bytes = 1 << 40;
    assert!(simulate(&bad, Design::Baseline, std::iter::empty(), None).is_err());
}
