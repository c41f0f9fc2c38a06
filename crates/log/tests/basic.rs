//! The log's behaviour on the simulator and on a pool file: append, force, reopen, iterate,
//! wrap, full ring, cleanup.

use std::time::Duration;

use log::{ForcePolicy, Log, LogError, LogOptions, Stop};
use pmem::{Medium, SimConfig, SimMedium};

const REGION: usize = 4096 + 16 * 1024;

fn new_log(region: usize) -> Log<SimMedium> {
    let sim = SimMedium::new(region, SimConfig::default());
    Log::create(sim, 0, region, Duration::from_millis(10)).expect("create")
}

fn reopen(log: Log<SimMedium>, clean: bool) -> (Log<SimMedium>, log::Recovery) {
    let len = log.medium().len();
    let sim = log.close().expect("close");
    let image = sim.durable_image();
    let sim = SimMedium::from_image(image, SimConfig::default());
    let opts = LogOptions {
        clean_shutdown: clean,
        full_wait: Duration::from_millis(10),
        ..LogOptions::default()
    };
    Log::open(sim, 0, len, &opts).expect("reopen")
}

/// Open a copy of `image` as a log, saying whether the last shutdown was clean.
fn open_image(
    image: &[u8],
    len: usize,
    clean: bool,
    truncate: bool,
) -> log::Result<(Log<SimMedium>, log::Recovery)> {
    let sim = SimMedium::from_image(image.to_vec(), SimConfig::default());
    let opts = LogOptions {
        clean_shutdown: clean,
        truncate_damaged: truncate,
        ..LogOptions::default()
    };
    Log::open(sim, 0, len, &opts)
}

fn payloads(log: &Log<SimMedium>) -> Vec<Vec<u8>> {
    log.records().map(|r| r.expect("record").payload).collect()
}

#[test]
fn appended_records_come_back_in_order_after_reopen() {
    let log = new_log(REGION);
    let want: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; i as usize * 7]).collect();
    for p in &want {
        let a = log.append(p, ForcePolicy::Sync).expect("append");
        assert!(a.durable);
    }
    assert_eq!(payloads(&log), want);
    let (log, rec) = reopen(log, true);
    assert_eq!(rec.records, 20);
    assert_eq!(rec.next_lsn, 21);
    assert_eq!(rec.jumped_to, None);
    assert_eq!(payloads(&log), want);
    // An unclean reopen jumps the LSNs past anything a lost record could carry.
    let (log, rec) = reopen(log, false);
    let jump = rec.jumped_to.expect("jump after unclean shutdown");
    assert!(jump > 21 + (16 * 1024 / 64));
    assert_eq!(
        log.append(b"after", ForcePolicy::Sync).expect("append").lsn,
        jump
    );
    let (log, _) = reopen(log, true);
    let mut all = want.clone();
    all.push(b"after".to_vec());
    assert_eq!(payloads(&log), all);
}

#[test]
fn a_full_ring_fails_with_log_full_and_cleanup_makes_room() {
    let log = new_log(REGION);
    let mut lsns = Vec::new();
    let err = loop {
        match log.append(&[7u8; 1000], ForcePolicy::Sync) {
            Ok(a) => lsns.push(a.lsn),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, LogError::Full { .. }), "{err}");
    assert!(lsns.len() >= 15, "{} records fit", lsns.len());
    // Out-of-order cleanup frees nothing until the head's record is reclaimable.
    log.cleanup(lsns[1]).expect("cleanup");
    assert!(matches!(
        log.append(&[1u8; 1000], ForcePolicy::Sync),
        Err(LogError::Full { .. })
    ));
    log.cleanup(lsns[0]).expect("cleanup");
    assert_eq!(log.stats().head_lsn, lsns[2]);
    // Now records wrap around the ring's end (with a padding record).
    let mut live: std::collections::VecDeque<u64> = lsns[2..].iter().copied().collect();
    for i in 0..100u32 {
        let a = log
            .append(&i.to_le_bytes().repeat(250), ForcePolicy::Sync)
            .expect("append after cleanup");
        // Padding at the ring's end takes no LSN: data LSNs stay consecutive.
        assert_eq!(Some(a.lsn), live.back().map(|l| l + 1));
        live.push_back(a.lsn);
        while live.len() > 5 {
            log.cleanup(live.pop_front().expect("live"))
                .expect("cleanup");
        }
    }
    assert_eq!(log.stats().head_lsn, live[0]);
    let (log, rec) = reopen(log, true);
    assert!(rec.records >= 1);
    let last = payloads(&log).pop().expect("a record");
    assert_eq!(last, 99u32.to_le_bytes().repeat(250));
}

#[test]
fn cleanup_through_trims_a_whole_prefix_and_survives_reopen() {
    let log = new_log(REGION);
    let mut last = 0;
    for i in 0..400u32 {
        match log.append(&i.to_le_bytes().repeat(60), ForcePolicy::Sync) {
            Ok(a) => last = a.lsn,
            Err(LogError::Full { .. }) => {
                // Trim all but the newest 4 records in one call, then retry.
                log.cleanup_through(last - 4).expect("trim");
                assert_eq!(log.stats().head_lsn, last - 3);
                last = log
                    .append(&i.to_le_bytes().repeat(60), ForcePolicy::Sync)
                    .expect("append after trim")
                    .lsn;
            }
            Err(e) => panic!("append {i}: {e}"),
        }
    }
    assert!(last >= 400, "{last}");
    // A mark below the head changes nothing; one at or past the tail is refused.
    let head = log.stats().head_lsn;
    log.cleanup_through(head - 1).expect("below the head");
    assert_eq!(log.stats().head_lsn, head);
    assert!(matches!(
        log.cleanup_through(last + 1),
        Err(LogError::BadLsn { .. })
    ));
    log.cleanup_through(last - 1).expect("trim");
    let (log, _) = reopen(log, true);
    assert_eq!(log.stats().head_lsn, last);
    assert_eq!(payloads(&log), vec![399u32.to_le_bytes().repeat(60)]);
}

#[test]
fn frequency_policy_persists_only_at_multiples() {
    let log = new_log(REGION);
    let mut durable = Vec::new();
    for i in 0..16u8 {
        durable.push(
            log.append(&[i; 10], ForcePolicy::Frequency(4))
                .expect("append")
                .durable,
        );
    }
    let want: Vec<bool> = (1..=16u64).map(|lsn| lsn % 4 == 0).collect();
    assert_eq!(durable, want);
    assert_eq!(log.durable_lsn(), 16);
}

#[test]
fn caller_policy_leaves_records_to_the_callers_force() {
    let log = new_log(REGION);
    for i in 0..5u8 {
        let a = log.append(&[i; 100], ForcePolicy::Caller).expect("append");
        assert!(!a.durable, "record {} said durable before any force", a.lsn);
    }
    assert_eq!(log.durable_lsn(), 0);
    // A power failure now: ordinary stores never written back are gone, so none of the
    // records may come back (and nothing torn may either).
    let (lost, _) = open_image(&log.medium().durable_image(), REGION, false, false)
        .expect("open the image before the force");
    assert_eq!(payloads(&lost), Vec::<Vec<u8>>::new());
    // One force makes all five durable.
    assert!(log.force(5, 1).expect("force"));
    assert_eq!(log.durable_lsn(), 5);
    let (kept, _) = open_image(&log.medium().durable_image(), REGION, false, false)
        .expect("open the image after the force");
    let want: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 100]).collect();
    assert_eq!(payloads(&kept), want);
    assert_eq!(ForcePolicy::Caller.to_string(), "caller");
    assert!(ForcePolicy::parse("caller").is_err());
}

#[test]
fn a_bit_flip_in_a_payload_stops_the_iterator_with_a_typed_error() {
    let log = new_log(REGION);
    let mut offsets = Vec::new();
    for i in 0..5u8 {
        log.append(&[i; 100], ForcePolicy::Sync).expect("append");
    }
    for r in log.records() {
        offsets.push(r.expect("record").offset);
    }
    let at = offsets[2] as usize + 32 + 50;
    let mut byte = [0u8];
    log.medium().read(at, &mut byte);
    log.medium().inject(at, &[byte[0] ^ 0x10]).expect("inject");
    let got: Vec<_> = log.records().collect();
    assert_eq!(got.len(), 3);
    let err = got[2].as_ref().expect_err("damaged record");
    let c = err.corruption().expect("typed corruption");
    assert_eq!(c.field, "payload_crc");
    assert_eq!(c.structure, "log record LSN 3");
    // After a clean shutdown, a damaged record refuses a writable open...
    let len = log.medium().len();
    let image = log.close().expect("close").durable_image();
    let open = |clean, truncate| open_image(&image, len, clean, truncate);
    assert!(matches!(open(true, false), Err(LogError::Corrupt(_))));
    // ... and so does it after an unclean one: the close recorded every record as durable, so
    // the damaged one is not a record a crash could have torn.
    let err = open(false, false).expect_err("durable damage after an unclean shutdown");
    let c = err.corruption().expect("typed corruption");
    assert_eq!(c.field, "payload_crc");
    assert!(c.structure.starts_with("log record LSN 3 (durable"), "{c}");
    assert!(c.structure.contains("every LSN through 5"), "{c}");
    let (_, rec) = open(false, true).expect("truncating open");
    assert_eq!(rec.records, 2);
    assert!(matches!(rec.stop, Stop::Damaged(_)));
    assert!(rec.damaged.is_some() && rec.dropped.is_some());
    let (_, rec) = open(true, true).expect("truncating open");
    assert_eq!(rec.records, 2);
}

#[test]
fn copy_in_pieces_and_out_of_order_gives_the_same_record() {
    let log = new_log(REGION);
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 31) as u8).collect();
    let mut r = log.reserve(data.len()).expect("reserve");
    r.copy(2000, &data[2000..]).expect("copy");
    r.copy(0, &data[..2000]).expect("copy");
    assert!(r.copy(2999, &[1, 2]).is_err());
    let lsn = r.complete().expect("complete");
    assert!(log.force(lsn, 1).expect("force"));
    let dropped = log.reserve(10).expect("reserve");
    drop(dropped);
    log.append(b"tail", ForcePolicy::Sync).expect("append");
    assert_eq!(payloads(&log), vec![data, b"tail".to_vec()]);
    assert!(matches!(
        log.reserve(1 << 20),
        Err(LogError::TooLarge { .. })
    ));
    assert!(matches!(log.force(99, 1), Err(LogError::BadLsn { .. })));
}

#[test]
fn a_log_file_survives_close_and_reopen() {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm".into()
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!("kavach-log-basic-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let f = log::LogFile::create(&path, 1 << 20, "log", None, Duration::from_millis(10))
        .expect("create");
    for i in 0..100u32 {
        f.log()
            .append(&i.to_le_bytes(), ForcePolicy::Frequency(8))
            .expect("append");
    }
    f.close().expect("close");
    let f = log::LogFile::open(&path, "log", false, Duration::from_millis(10)).expect("open");
    assert_eq!(f.recovery().records, 100);
    assert_eq!(f.recovery().jumped_to, None);
    let got: Vec<u32> = f
        .log()
        .records()
        .map(|r| u32::from_le_bytes(r.expect("r").payload.try_into().expect("4")))
        .collect();
    assert_eq!(got, (0..100).collect::<Vec<_>>());
    f.close().expect("close");
    std::fs::remove_file(&path).expect("remove");
}

#[test]
fn a_broken_valid_word_after_a_clean_close_is_damage_and_truncation_jumps() {
    let log = new_log(REGION);
    for i in 0..3u8 {
        log.append(&[i; 50], ForcePolicy::Sync).expect("append");
    }
    let second = log
        .records()
        .nth(1)
        .expect("two records")
        .expect("ok")
        .offset as usize;
    let len = log.medium().len();
    let mut image = log.close().expect("close").durable_image();
    image[second + 24] ^= 0x01; // the valid word
    let open = |clean, truncate| open_image(&image, len, clean, truncate);
    let err = open(true, false).expect_err("damage after a clean close");
    assert_eq!(err.corruption().expect("typed").field, "valid");
    let (log, rec) = open(true, true).expect("truncating open");
    assert_eq!(rec.records, 1);
    let jump = rec.jumped_to.expect("truncation writes a jump");
    assert_eq!(
        log.append(b"x", ForcePolicy::Sync).expect("append").lsn,
        jump
    );
    // After an unclean shutdown too: the record was durable (the close said so), so the crash
    // cannot have left it incomplete.
    let err = open(false, false).expect_err("durable damage after an unclean shutdown");
    assert_eq!(err.corruption().expect("typed").field, "valid");
}

#[test]
fn a_refused_open_of_a_log_file_leaves_the_pool_as_it_found_it() {
    let path = std::env::temp_dir().join(format!("kavach-log-refused-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let wait = Duration::from_millis(10);
    let f = log::LogFile::create(&path, 1 << 20, "log", None, wait).expect("create");
    for i in 0..3u8 {
        f.log()
            .append(&[i; 100], ForcePolicy::Sync)
            .expect("append");
    }
    let second = f.log().records().nth(1).expect("2").expect("ok").offset;
    f.close().expect("close");
    // Flip a payload byte of record 2 behind the log's back.
    {
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .expect("file");
        let mut b = [0u8];
        file.read_exact_at(&mut b, second + 40).expect("read");
        file.write_all_at(&[b[0] ^ 4], second + 40).expect("write");
    }
    for _ in 0..2 {
        let err =
            log::LogFile::open(&path, "log", false, wait).expect_err("damaged after a clean close");
        assert_eq!(err.corruption().expect("typed").field, "payload_crc");
    }
    let opts = LogOptions {
        truncate_damaged: true,
        full_wait: wait,
        ..LogOptions::default()
    };
    let f = log::LogFile::open_with(&path, "log", &opts).expect("truncating open");
    assert_eq!(f.recovery().records, 1);
    assert!(f.recovery().dropped.is_some());
    f.close().expect("close");
    assert!(log::LogFile::open(&path, "log", false, wait).is_ok());
    std::fs::remove_file(&path).expect("remove");
}
