//! Recovery in one pass (`Log::open_replaying`, `LogFile::open_replaying`) and the walk's CRC
//! run over the medium's bytes where they lie (`Medium::crc32c`): the same records, payloads and
//! recovery as an open followed by `records_rechecked()`, at every record size class (below
//! and above the size from which a wanted payload is checked in place), across the ring's
//! wrap, on the simulator and on a mapped file; and damage is still found where it is.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Duration;

use log::{ForcePolicy, Log, LogError, LogFile, LogOptions, Recovery};
use pmem::rng::SplitMix64;
use pmem::{Medium, SimConfig, SimMedium};

/// Payload sizes: empty, inside the header's line, one line, around the in-place threshold
/// (256), and several lines.
const SIZES: [usize; 13] = [0, 1, 31, 32, 33, 64, 100, 255, 256, 257, 1000, 1024, 4000];

/// (LSN, header offset, payload) of each record.
type Seen = Vec<(u64, u64, Vec<u8>)>;

fn payload(rng: &mut SplitMix64, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

fn opts(clean: bool, read_only: bool, truncate: bool) -> LogOptions {
    LogOptions {
        read_only,
        clean_shutdown: clean,
        truncate_damaged: truncate,
        full_wait: Duration::ZERO,
    }
}

/// A closed log image in a `region`-byte simulated medium holding records of `size` bytes
/// (some of random sizes near it) whose ring has wrapped: filled, the older half freed, filled
/// again. The records it holds, in order.
fn wrapped_image(size: usize, region: usize, seed: u64) -> (Vec<u8>, Seen) {
    let mut rng = SplitMix64::new(seed);
    let sim = SimMedium::new(region, SimConfig::default());
    let log = Log::create(sim, 0, region, Duration::ZERO).expect("create");
    let mut lsns = Vec::new();
    for round in 0..3 {
        loop {
            let len = if rng.below(4) == 0 {
                rng.below(size as u64 + 40) as usize
            } else {
                size
            };
            match log.append(&payload(&mut rng, len), ForcePolicy::Frequency(7)) {
                Ok(a) => lsns.push(a.lsn),
                Err(LogError::Full { .. }) => break,
                Err(e) => panic!("append: {e}"),
            }
        }
        if round < 2 {
            // Free the older half: the next fill wraps round the ring's end.
            log.cleanup_through(lsns[lsns.len() / 2]).expect("cleanup");
        }
    }
    // Every record durable, so that the live log's walk reads them all back.
    log.force(*lsns.last().expect("records"), 1).expect("force");
    let seen = collect(&log, true);
    let image = log.close().expect("close").durable_image();
    (image, seen)
}

fn collect<M: Medium>(log: &Log<M>, rechecked: bool) -> Seen {
    let it = if rechecked {
        log.records_rechecked()
    } else {
        log.records()
    };
    it.map(|r| {
        let r = r.expect("record");
        (r.lsn, r.offset, r.payload)
    })
    .collect()
}

fn open_replaying(image: &[u8], o: &LogOptions) -> (log::Result<(Log<SimMedium>, Recovery)>, Seen) {
    let sim = SimMedium::from_image(image.to_vec(), SimConfig::default());
    let mut seen = Vec::new();
    let len = image.len();
    let r = Log::open_replaying(sim, 0, len, o, &mut |r| {
        seen.push((r.lsn, r.offset, r.payload.to_vec()))
    });
    (r, seen)
}

fn open_plain(image: &[u8], o: &LogOptions) -> log::Result<(Log<SimMedium>, Recovery)> {
    let sim = SimMedium::from_image(image.to_vec(), SimConfig::default());
    Log::open(sim, 0, image.len(), o)
}

#[test]
fn one_pass_recovery_replays_what_an_open_and_a_rechecked_walk_find_at_every_size() {
    for (i, &size) in SIZES.iter().enumerate() {
        let region = 4096 + 64 * (size + 64).max(256);
        let (image, written) = wrapped_image(size, region, 40 + i as u64);
        assert!(written.len() > 8, "size {size}: {} records", written.len());
        assert!(
            written.windows(2).any(|w| w[1].1 < w[0].1),
            "size {size}: the ring did not wrap"
        );
        for clean in [true, false] {
            let o = opts(clean, false, false);
            let (plain, rec_plain) = open_plain(&image, &o).expect("open");
            let want = collect(&plain, true);
            assert_eq!(want, written, "size {size}: plain open");
            let (opened, seen) = open_replaying(&image, &o);
            let (log, rec) = opened.expect("one-pass open");
            assert_eq!(seen, want, "size {size} clean {clean}: replayed records");
            assert_eq!(rec, rec_plain, "size {size} clean {clean}: recovery");
            assert_eq!(collect(&log, false), want, "size {size}: records() after");
            assert_eq!(collect(&log, true), want, "size {size}: rechecked after");
        }
    }
}

/// Flip one payload byte of the record in the middle of a wrapped log of `size`-byte records:
/// every open still finds it, and a one-pass open replays exactly the records before it.
#[test]
fn one_pass_recovery_finds_a_damaged_payload_at_every_size() {
    for (i, &size) in SIZES.iter().enumerate().filter(|(_, s)| **s > 0) {
        let region = 4096 + 64 * (size + 64).max(256);
        let (mut image, written) = wrapped_image(size, region, 90 + i as u64);
        let victim = (written.len() / 2..written.len())
            .find(|&v| !written[v].2.is_empty())
            .expect("a non-empty payload past the middle");
        let (lsn, at, ref p) = written[victim];
        image[at as usize + 32 + p.len() / 2] ^= 0x10;
        let before = written[..victim].to_vec();
        for clean in [true, false] {
            // Writable: refused (the record was durable), having replayed the intact prefix.
            let (r, seen) = open_replaying(&image, &opts(clean, false, false));
            let err = r.expect_err("damage refuses a writable open");
            let c = err.corruption().expect("typed");
            assert_eq!(c.field, "payload_crc", "size {size}: {c}");
            assert!(
                c.structure.starts_with(&format!("log record LSN {lsn}")),
                "size {size}: {c}"
            );
            assert_eq!(c.offset, at + 16, "size {size}: {c}");
            assert_eq!(
                seen, before,
                "size {size} clean {clean}: replay before damage"
            );
            // Read-only: opened, the damage reported, the same prefix replayed.
            let (r, seen) = open_replaying(&image, &opts(clean, true, false));
            let (_, rec) = r.expect("read-only open");
            assert_eq!(
                rec.damaged.as_ref().map(|c| c.field),
                Some("payload_crc"),
                "size {size}"
            );
            assert_eq!(seen, before, "size {size}: read-only replay");
            let (_, plain) = open_plain(&image, &opts(clean, true, false)).expect("plain");
            assert_eq!(rec, plain, "size {size}: the same recovery as a plain open");
        }
    }
}

/// A record torn by a crash (its header durable, its payload not) past the durable LSN is
/// dropped by a one-pass open as by a plain one, and not replayed.
#[test]
fn one_pass_recovery_drops_a_torn_record_like_a_plain_open() {
    for &size in &[64usize, 300, 2000] {
        let region = 4096 + 64 * 1024;
        let sim = SimMedium::new(region, SimConfig::default());
        let log = Log::create(sim, 0, region, Duration::ZERO).expect("create");
        let mut rng = SplitMix64::new(size as u64);
        for _ in 0..5 {
            log.append(&payload(&mut rng, size), ForcePolicy::Sync)
                .expect("append");
        }
        let seen = collect(&log, true);
        let last = seen.last().expect("records").clone();
        let mut image = log.medium().durable_image();
        // As if the crash came after the last header was written back but before its payload.
        image[last.1 as usize + 32] ^= 0xff;
        let o = opts(false, false, false);
        let (r, replayed) = open_replaying(&image, &o);
        let (_, rec) = r.expect("one-pass open");
        let (_, plain) = open_plain(&image, &o).expect("plain open");
        assert_eq!(rec, plain, "size {size}");
        assert_eq!(rec.records, 4, "size {size}");
        assert!(rec.dropped.is_some() && rec.damaged.is_none(), "{rec:?}");
        assert_eq!(replayed, seen[..4].to_vec(), "size {size}");
    }
}

fn pool_path(tag: &str) -> PathBuf {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm".into()
    } else {
        std::env::temp_dir()
    };
    dir.join(format!(
        "kavach-log-onepass-{tag}-{}.pool",
        std::process::id()
    ))
}

/// On a mapped file (where the walk's CRC runs over the mapping itself): the same records as
/// an open and a rechecked walk, and a flipped byte in the file found by both kinds of open.
#[test]
fn one_pass_recovery_on_a_mapped_file_matches_and_finds_damage() {
    for (i, &size) in [64usize, 255, 256, 1024, 5000].iter().enumerate() {
        let path = pool_path(&format!("{size}"));
        let _ = std::fs::remove_file(&path);
        let f = LogFile::create(&path, 1 << 20, "log", None, Duration::ZERO).expect("create");
        let mut rng = SplitMix64::new(7 + i as u64);
        for i in 0..60 {
            // The last one forced, so that every record is durable and read back.
            let policy = if i == 59 {
                ForcePolicy::Sync
            } else {
                ForcePolicy::Frequency(16)
            };
            f.log()
                .append(&payload(&mut rng, size), policy)
                .expect("append");
        }
        let written = collect(f.log(), true);
        // The mapping's in-place CRC against the CRC of the bytes read out.
        let m = f.pool().medium();
        let mapping: &pmem::Mapping = m;
        for &(_, at, ref p) in written.iter().take(5) {
            let at = at as usize + 32;
            let mut buf = vec![0u8; p.len()];
            m.read(at, &mut buf);
            assert_eq!(buf, *p);
            for seed in [0u32, 0xdead_beef] {
                let want = crc32c::crc32c_append(seed, &buf);
                assert_eq!(m.crc32c(at, p.len(), seed), want, "size {size}");
                assert_eq!(mapping.crc32c(at, p.len(), seed), want, "size {size}");
            }
        }
        f.close().expect("close");
        let opts = LogOptions {
            full_wait: Duration::ZERO,
            ..LogOptions::default()
        };
        let mut seen = Vec::new();
        let f = LogFile::open_replaying(&path, "log", &opts, &mut |r| {
            seen.push((r.lsn, r.offset, r.payload.to_vec()))
        })
        .expect("one-pass open");
        assert_eq!(seen, written, "size {size}");
        assert_eq!(f.recovery().records, written.len() as u64);
        assert_eq!(collect(f.log(), false), written, "size {size}");
        f.close().expect("close");
        // Damage a payload byte of record 30 in the file.
        let (lsn, at, _) = written[30];
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .expect("file");
        let mut b = [0u8; 1];
        let off = at + 32 + (size as u64) / 2;
        file.read_exact_at(&mut b, off).expect("read");
        file.write_all_at(&[b[0] ^ 4], off).expect("write");
        drop(file);
        let mut seen = Vec::new();
        let err = LogFile::open_replaying(&path, "log", &opts, &mut |r| {
            seen.push((r.lsn, r.offset, r.payload.to_vec()))
        })
        .expect_err("damage refuses the open");
        let c = err.corruption().expect("typed");
        assert_eq!(c.field, "payload_crc", "size {size}: {c}");
        assert!(
            c.structure.starts_with(&format!("log record LSN {lsn}")),
            "{c}"
        );
        assert_eq!(seen, written[..30].to_vec(), "size {size}");
        let err = LogFile::open(&path, "log", false, Duration::ZERO).expect_err("plain open");
        assert_eq!(err.corruption().expect("typed").field, "payload_crc");
        std::fs::remove_file(&path).expect("remove");
    }
}
