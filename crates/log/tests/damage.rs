//! Damage is never taken for a tail: a record that was durable, or one followed by whole
//! records with later LSNs after a clean shutdown, is damage whatever the clean-shutdown flag
//! says; a refused open writes nothing; a salvage keeps the proven prefix and hands back every
//! byte it cuts.

use std::time::Duration;

use log::salvage::{read_side_file, write_side_file};
use log::{CutKind, ForcePolicy, Log, LogOptions, Stop};
use pmem::{SimConfig, SimMedium};

const REGION: usize = 4096 + 16 * 1024;
const WORDS: [&[u8]; 4] = [b"one", b"two", b"three", b"four"];

/// A log holding "one".."four" (forced one by one), and the offsets of their headers.
fn four_records() -> (Log<SimMedium>, Vec<usize>) {
    let sim = SimMedium::new(REGION, SimConfig::default());
    let log = Log::create(sim, 0, REGION, Duration::ZERO).expect("create");
    for w in WORDS {
        log.append(w, ForcePolicy::Sync).expect("append");
    }
    let at = log
        .records()
        .map(|r| r.expect("record").offset as usize)
        .collect();
    (log, at)
}

fn open(image: &[u8], clean: bool, read_only: bool, truncate: bool) -> log::Result<Opened> {
    let sim = SimMedium::from_image(image.to_vec(), SimConfig::default());
    let opts = LogOptions {
        read_only,
        clean_shutdown: clean,
        truncate_damaged: truncate,
        full_wait: Duration::ZERO,
    };
    Log::open(sim, 0, REGION, &opts)
}

type Opened = (Log<SimMedium>, log::Recovery);

fn payloads(log: &Log<SimMedium>) -> Vec<Vec<u8>> {
    log.records().map(|r| r.expect("record").payload).collect()
}

/// Issue 17, case 1: a payload bit of record 2 flipped after a clean close; the pool is then
/// marked unclean (by a crash, or a command that failed). Recovery must not take record 2 for
/// one the crash tore and drop 2, 3 and 4: they were durable.
#[test]
fn a_damaged_durable_record_is_refused_after_an_unclean_shutdown() {
    let (log, at) = four_records();
    let mut image = log.close().expect("close").durable_image();
    image[at[1] + 32 + 2] ^= 0x20;
    for clean in [true, false] {
        let err = open(&image, clean, false, false).expect_err("damage refuses the open");
        let c = err.corruption().expect("typed");
        assert_eq!(c.field, "payload_crc", "{c}");
        assert!(c.structure.starts_with("log record LSN 2"), "{c}");
        assert_eq!(c.offset, (at[1] + 16) as u64, "{c}");
        assert!(
            err.to_string().contains(&format!("{:#x}", at[1] + 16)),
            "{err}"
        );
        // A read-only open reports it as damage, not as a torn record.
        let (log, rec) = open(&image, clean, true, false).expect("read-only open");
        assert_eq!(rec.damaged.as_ref().map(|c| c.field), Some("payload_crc"));
        assert_eq!(payloads(&log), vec![b"one".to_vec()]);
        assert_eq!(
            log.medium().durable_image(),
            image,
            "a read-only open writes nothing"
        );
    }
}

/// The refusal writes nothing: the image is the same afterwards, so a later open sees the
/// same damage, not something a crash could explain.
#[test]
fn a_refused_open_writes_nothing() {
    let (log, at) = four_records();
    let mut image = log.close().expect("close").durable_image();
    image[at[2] + 32] ^= 1;
    let sim = SimMedium::from_image(image.clone(), SimConfig::default());
    let opts = LogOptions {
        clean_shutdown: false,
        full_wait: Duration::ZERO,
        ..LogOptions::default()
    };
    assert!(Log::open(&sim, 0, REGION, &opts).is_err());
    assert_eq!(sim.durable_image(), image);
}

/// Issue 17, case 2: one bit of record 2's LSN field flipped. The walk finds LSN 3 where it
/// expects 2; that is not the end of the log: records 2..4 were durable.
#[test]
fn a_flipped_lsn_bit_is_damage_not_the_end_of_the_log() {
    let (log, at) = four_records();
    let mut image = log.close().expect("close").durable_image();
    image[at[1]] ^= 0x01; // LSN 2 -> 3: "an older record with a higher LSN"
    for clean in [true, false] {
        let err = open(&image, clean, false, false).expect_err("damage");
        let c = err.corruption().expect("typed");
        assert_eq!(
            (c.field, c.expected.as_str(), c.found.as_str()),
            ("lsn", "2", "3")
        );
        assert_eq!(c.offset, at[1] as u64);
        let (_, rec) = open(&image, clean, true, false).expect("read-only open");
        assert!(matches!(rec.stop, Stop::Tail { found_lsn: 3 }));
        assert!(rec.damaged.is_some());
    }
}

/// Where the superline's durable LSN says nothing (the log was not closed, only its pool), a
/// whole record with a later LSN after the stop still shows that the stop is damage, after a
/// clean shutdown.
#[test]
fn a_later_whole_record_shows_the_stop_is_damage_after_a_clean_shutdown() {
    let (log, at) = four_records();
    // Records forced, log never closed: the superline's durable LSN is still 0.
    let mut image = log.medium().durable_image();
    drop(log);
    image[at[1]] ^= 0x01;
    let err = open(&image, true, false, false).expect_err("damage");
    let c = err.corruption().expect("typed");
    assert_eq!(c.field, "lsn");
    assert!(c.structure.contains("later LSN 3"), "{c}");
    assert!(c.structure.contains(&format!("{:#x}", at[2])), "{c}");
    // After a crash, whole records past the stop are what unforced records look like: the end.
    let (_, rec) = open(&image, false, false, false).expect("unclean open");
    assert_eq!(rec.damaged, None);
    assert_eq!(rec.records, 1);
}

/// Records forced after the last recorded durable LSN and then torn by a crash are still
/// dropped as torn (the durable LSN is recorded at open, close and cleanup, not at each force);
/// damage below it is refused in the same image.
#[test]
fn a_torn_record_past_the_recorded_durable_lsn_is_dropped_after_a_crash() {
    let (log, at) = four_records();
    let sim = log.close().expect("close");
    let opts = LogOptions {
        clean_shutdown: true,
        full_wait: Duration::ZERO,
        ..LogOptions::default()
    };
    let (log, _) = Log::open(sim, 0, REGION, &opts).expect("reopen");
    log.append(b"five", ForcePolicy::Sync).expect("append");
    log.append(b"six", ForcePolicy::Sync).expect("append");
    let fifth = log.records().nth(4).expect("5").expect("ok").offset as usize;
    let crashed = log.medium().durable_image();
    drop(log);
    let mut torn = crashed.clone();
    torn[fifth + 32] ^= 1;
    // Salvage saves the torn record and the whole one after it (unforced, not acknowledged,
    // but never dropped unseen), and says it is not damage.
    let (look, rec) = open(&torn, false, true, false).expect("read-only open");
    let plan = look.salvage_plan(&rec, false);
    assert!(!plan.damaged && plan.failure.is_some());
    let cut: Vec<(CutKind, u64)> = plan.cut.iter().map(|c| (c.kind, c.lsn)).collect();
    assert_eq!(cut, [(CutKind::Stopped, 5), (CutKind::Whole, 6)]);
    let (log, rec) = open(&torn, false, false, false).expect("unclean open");
    assert_eq!(rec.damaged, None);
    assert!(rec.dropped.is_some() && rec.jumped_to.is_some());
    assert_eq!(payloads(&log).len(), 4);
    let mut damaged = crashed;
    damaged[at[3] + 32] ^= 1;
    let err = open(&damaged, false, false, false).expect_err("record 4 was durable");
    assert!(
        err.corruption()
            .expect("typed")
            .structure
            .starts_with("log record LSN 4")
    );
}

/// Salvage: the plan keeps record 1 and cuts record 2 (damaged) and the whole records 3 and 4,
/// with their bytes; the side file round-trips; truncating ends the log with a jump past every
/// cut LSN; the log then opens cleanly and takes appends, and no cut record comes back.
#[test]
fn salvage_keeps_the_proven_prefix_and_hands_back_every_cut_byte() {
    let (log, at) = four_records();
    let mut image = log.close().expect("close").durable_image();
    image[at[1] + 32 + 2] ^= 0x20;
    let (log, rec) = open(&image, false, true, false).expect("read-only open");
    let plan = log.salvage_plan(&rec, false);
    assert_eq!((plan.kept_records, plan.stop_lsn), (1, 2));
    assert!(plan.damaged);
    let cut: Vec<(CutKind, u64, u64, usize)> = plan
        .cut
        .iter()
        .map(|c| (c.kind, c.lsn, c.offset, c.bytes.len()))
        .collect();
    assert_eq!(
        cut,
        vec![
            (CutKind::Stopped, 2, at[1] as u64, 64),
            (CutKind::Whole, 3, at[2] as u64, 64),
            (CutKind::Whole, 4, at[3] as u64, 64),
        ]
    );
    for c in &plan.cut {
        let o = c.offset as usize;
        assert_eq!(c.bytes, image[o..o + c.bytes.len()]);
    }
    let mut side = Vec::new();
    write_side_file(&plan, &mut side).expect("write");
    let back = read_side_file(&side).expect("read back");
    assert_eq!(back.cut, plan.cut);
    assert_eq!((back.stop_lsn, back.log_uuid), (2, plan.log_uuid));
    let mut bad = side.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert_eq!(read_side_file(&bad).expect_err("damaged").field, "crc32c");
    drop(log);

    let (log, rec) = open(&image, false, false, true).expect("truncating open");
    assert_eq!(rec.records, 1);
    let jump = rec.jumped_to.expect("jump");
    assert_eq!(
        jump,
        2 + (REGION as u64 - 4096) / 64 + 1,
        "past every cut LSN"
    );
    log.append(b"five", ForcePolicy::Sync).expect("append");
    let image = log.close().expect("close").durable_image();
    for clean in [true, false] {
        let (log, rec) = open(&image, clean, false, false).expect("opens after salvage");
        assert_eq!(rec.damaged, None);
        assert_eq!(payloads(&log), vec![b"one".to_vec(), b"five".to_vec()]);
    }
}

/// A log with nothing wrong gives an empty plan.
#[test]
fn a_healthy_log_has_nothing_to_salvage() {
    let (log, _) = four_records();
    let image = log.close().expect("close").durable_image();
    let (log, rec) = open(&image, true, true, false).expect("open");
    let plan = log.salvage_plan(&rec, true);
    assert!(plan.cut.is_empty() && plan.failure.is_none() && !plan.damaged);
    assert_eq!(plan.stop_lsn, 5);
}

/// A clean reopen and close of a log whose superline already records every record as durable
/// writes nothing.
#[test]
fn a_clean_reopen_writes_nothing() {
    let (log, _) = four_records();
    let image = log.close().expect("close").durable_image();
    let sim = SimMedium::from_image(image.clone(), SimConfig::default());
    let opts = LogOptions {
        clean_shutdown: true,
        full_wait: Duration::ZERO,
        ..LogOptions::default()
    };
    let (log, _) = Log::open(&sim, 0, REGION, &opts).expect("open");
    log.close().expect("close");
    assert_eq!(sim.durable_image(), image);
}

#[test]
fn the_superline_of_a_closed_log_records_its_durable_lsn() {
    let (log, _) = four_records();
    let image = log.close().expect("close").durable_image();
    let desc = log::Descriptor::decode(&image[..64], 0, 0, REGION as u64).expect("descriptor");
    let best = log::layout::SUPERLINE_COPY_OFFSETS
        .iter()
        .enumerate()
        .filter_map(|(copy, &at)| {
            let b = &image[at..at + log::layout::SUPERLINE_BYTES];
            log::Superline::decode(b, copy, at as u64, &desc.log_uuid, desc.ring_bytes).ok()
        })
        .max_by_key(|s| s.sequence)
        .expect("a superline");
    assert_eq!(best.durable_lsn, 4);
    assert!(desc.keeps_durable_lsn());
    assert!(matches!(
        open(&image, true, false, false).map(|(_, r)| r.damaged),
        Ok(None)
    ));
}

/// The side file reader takes any bytes: every truncation and every single-byte change of a
/// real side file gives a typed error, never a panic.
#[test]
fn the_side_file_reader_never_panics_on_damaged_input() {
    let (log, at) = four_records();
    let mut image = log.close().expect("close").durable_image();
    image[at[1]] ^= 0x01;
    let (log, rec) = open(&image, true, true, false).expect("read-only open");
    let plan = log.salvage_plan(&rec, true);
    let mut side = Vec::new();
    write_side_file(&plan, &mut side).expect("write");
    assert_eq!(read_side_file(&side).expect("intact").cut, plan.cut);
    for len in 0..side.len() {
        let err = read_side_file(&side[..len]).expect_err("truncated");
        assert!(err.offset <= len as u64, "{err}");
    }
    for i in 0..side.len() {
        let mut bad = side.clone();
        bad[i] ^= 0x40;
        // Every byte is covered by a CRC (or is one).
        assert!(read_side_file(&bad).is_err(), "byte {i}");
    }
}
