//! The trace format: what is written is read back unchanged, and no bytes (random, or a valid
//! trace with bytes changed, cut or appended) make the reader panic.

use proptest::prelude::*;
use tvarak_sim::error::SimError;
use tvarak_sim::trace::{self, Event, TraceHeader, TraceReader};

const PM: u64 = 1 << 16;
const CORES: u16 = 3;

fn header(with_data: bool) -> TraceHeader {
    TraceHeader {
        name: "prop".into(),
        pm_bytes: PM,
        cores: CORES,
        with_data,
    }
}

fn event(with_data: bool) -> impl Strategy<Value = Event> {
    let core = 0..CORES;
    let access = (0..PM - 1).prop_flat_map(|a| (Just(a), 1..=((PM - a).min(300) as u32)));
    prop_oneof![
        (core.clone(), access.clone()).prop_map(|(core, (addr, len))| Event::Load {
            core,
            addr,
            len
        }),
        (core.clone(), access, any::<u8>()).prop_map(move |(core, (addr, len), b)| {
            Event::Store {
                core,
                addr,
                len,
                data: with_data.then(|| (0..len).map(|i| b.wrapping_add(i as u8)).collect()),
            }
        }),
        (core.clone(), 0..PM).prop_map(|(core, addr)| Event::Flush { core, addr }),
        core.clone().prop_map(|core| Event::Fence { core }),
        core.clone().prop_map(|core| Event::TxBegin { core }),
        (core.clone(), any::<u32>()).prop_map(|(core, cycles)| Event::Work { core, cycles }),
        (
            core,
            prop::collection::vec((0..PM / 2, 0..(PM / 2) as u32), 0..5)
        )
            .prop_map(|(core, ranges)| Event::TxCommit { core, ranges }),
    ]
}

fn trace() -> impl Strategy<Value = (TraceHeader, Vec<Event>)> {
    any::<bool>().prop_flat_map(|d| (Just(header(d)), prop::collection::vec(event(d), 0..60)))
}

/// Read everything; the reader must stop after an error.
fn read_all(bytes: &[u8]) -> Result<Vec<Event>, SimError> {
    let r = TraceReader::new(bytes)?;
    let mut out = Vec::new();
    let mut it = r.into_iter();
    for e in it.by_ref() {
        match e {
            Ok(e) => out.push(e),
            Err(e) => {
                assert!(it.next().is_none(), "the reader went on after an error");
                return Err(e);
            }
        }
    }
    Ok(out)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn what_is_written_is_read_back((h, events) in trace()) {
        let bytes = trace::to_bytes(&h, &events).unwrap();
        let (h2, back) = trace::from_bytes(&bytes).unwrap();
        prop_assert_eq!(h2, h);
        prop_assert_eq!(back, events);
    }

    #[test]
    fn random_bytes_never_panic(mut bytes in prop::collection::vec(any::<u8>(), 0..400),
                                keep_magic in any::<bool>()) {
        if keep_magic && bytes.len() >= 10 {
            bytes[..8].copy_from_slice(&trace::MAGIC);
            bytes[8..10].copy_from_slice(&trace::VERSION.to_le_bytes());
        }
        let _ = read_all(&bytes);
    }

    #[test]
    fn mutated_traces_never_panic((h, events) in trace(),
                                  edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
                                  cut in any::<prop::sample::Index>(),
                                  mode in 0..3u8) {
        let mut bytes = trace::to_bytes(&h, &events).unwrap();
        match mode {
            0 => for (i, b) in &edits { let i = i.index(bytes.len()); bytes[i] ^= b | 1; },
            1 => bytes.truncate(cut.index(bytes.len())),
            _ => bytes.extend(edits.iter().map(|e| e.1)),
        }
        // Whatever comes back, it is either an error or a sequence of events the header allows:
        // every event re-encodes under the decoded header.
        if let Ok(back) = read_all(&bytes) {
            let h2 = TraceReader::new(&bytes[..]).unwrap().header().clone();
            prop_assert!(trace::to_bytes(&h2, &back).is_ok());
        }
        if mode != 0 {
            prop_assert!(read_all(&bytes).is_err(), "a cut-off or extended trace was accepted");
        }
    }
}

fn err(bytes: &[u8]) -> SimError {
    read_all(bytes).expect_err("invalid bytes were accepted")
}

fn fields(e: &SimError) -> (u64, String, String, String) {
    match e {
        SimError::Trace {
            at,
            what,
            expected,
            found,
        } => (*at, what.clone(), expected.clone(), found.clone()),
        other => panic!("not a format error: {other}"),
    }
}

#[test]
fn errors_name_where_what_expected_and_found() {
    let h = header(false);
    let good = trace::to_bytes(
        &h,
        &[Event::Load {
            core: 1,
            addr: 64,
            len: 8,
        }],
    )
    .unwrap();

    let mut b = good.clone();
    b[0] = b'X';
    let (at, what, _, found) = fields(&err(&b));
    assert_eq!((at, what.as_str()), (0, "header byte 0: magic"));
    assert!(found.contains("XAVTRACE"), "{found}");

    let mut b = good.clone();
    b[8] = 9;
    let (at, what, expected, found) = fields(&err(&b));
    assert_eq!(
        (at, what.as_str(), expected.as_str(), found.as_str()),
        (8, "header byte 8: version", "1 to 2", "9")
    );

    // Version 1 (no WORK op) still reads; a WORK event in a version 1 file is refused.
    let mut b = good.clone();
    b[8] = 1;
    assert_eq!(read_all(&b).unwrap().len(), 1);
    let mut b = trace::to_bytes(
        &h,
        &[Event::Work {
            core: 0,
            cycles: 435,
        }],
    )
    .unwrap();
    assert_eq!(read_all(&b).unwrap().len(), 1);
    b[8] = 1;
    let (_, what, expected, found) = fields(&err(&b));
    assert!(what.ends_with(": op"), "{what}");
    assert!(expected.contains("format version 1"), "{expected}");
    assert_eq!(found, "0x7");

    let mut b = good.clone();
    b[12..14].copy_from_slice(&0u16.to_le_bytes());
    assert_eq!(fields(&err(&b)).1, "header byte 12: cores");

    let mut b = good.clone();
    b[16..24].copy_from_slice(&0u64.to_le_bytes());
    assert_eq!(fields(&err(&b)).1, "header byte 16: pm_bytes");

    let (_, what, _, found) = fields(&err(&good[..10]));
    assert_eq!(
        (what.as_str(), found.as_str()),
        ("header byte 0: header (truncated file)", "end of file")
    );

    // A trace whose header shrank below its accesses: the address check names the event.
    let mut b = good.clone();
    b[16..24].copy_from_slice(&70u64.to_le_bytes());
    let (at, what, _, found) = fields(&err(&b));
    assert_eq!(at, 0);
    assert!(
        what.starts_with("event 0 ") && what.ends_with(": address"),
        "{what}"
    );
    assert!(found.contains("0x40"), "{found}");

    // Fewer cores than the events use.
    let mut b = good;
    b[12..14].copy_from_slice(&1u16.to_le_bytes());
    let (at, what, expected, found) = fields(&err(&b));
    assert_eq!(at, 0);
    assert!(what.ends_with(": core"), "{what}");
    assert_eq!((expected.as_str(), found.as_str()), ("at most 0", "1"));
}

#[test]
fn files_round_trip() {
    let dir = std::env::temp_dir().join(format!("tvarak-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("t.kvtrace");
    let events = vec![
        Event::TxBegin { core: 2 },
        Event::Store {
            core: 2,
            addr: 128,
            len: 3,
            data: Some(vec![7, 8, 9]),
        },
        Event::Flush { core: 2, addr: 128 },
        Event::Fence { core: 2 },
        Event::TxCommit {
            core: 2,
            ranges: vec![(128, 3)],
        },
    ];
    let h = header(true);
    assert_eq!(trace::write_file(&p, &h, events.clone()).unwrap(), 5);
    assert_eq!(trace::read_file(&p).unwrap(), (h, events));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn generated_workloads_fit_their_headers_and_are_deterministic() {
    use tvarak_sim::workload::{self, FioParams, Kernel, Pattern, Rw, StreamParams};
    let mut runs: Vec<(TraceHeader, Vec<Event>, Vec<Event>)> = Vec::new();
    for pattern in [Pattern::Seq, Pattern::Rand] {
        for rw in [Rw::Read, Rw::Write] {
            let mut p = FioParams::scaled(pattern, rw, 4096);
            p.with_data = true;
            let a: Vec<Event> = workload::fio(&p).unwrap().collect();
            let b: Vec<Event> = workload::fio(&p).unwrap().collect();
            runs.push((p.header(), a, b));
        }
    }
    for k in [Kernel::Copy, Kernel::Scale, Kernel::Add, Kernel::Triad] {
        let p = StreamParams {
            kernel: k,
            threads: 3,
            array_bytes: 64 * 3 * 20,
            access: 64,
            with_data: true,
            seed: 8,
            tx: true,
        };
        let a: Vec<Event> = workload::stream(&p).unwrap().collect();
        let b: Vec<Event> = workload::stream(&p).unwrap().collect();
        runs.push((p.header(), a, b));
    }
    for (h, a, b) in runs {
        assert!(!a.is_empty(), "{}", h.name);
        assert_eq!(a, b, "{}: same parameters, same events", h.name);
        let bytes = trace::to_bytes(&h, &a).unwrap_or_else(|e| panic!("{}: {e}", h.name));
        assert_eq!(trace::from_bytes(&bytes).unwrap(), (h, a));
    }
}
