//! Pools on real files: create, open, close, regions, locking, and every bad input.

use pmem::check::{Severity, check_file};
use pmem::layout::{self, PAGE_SIZE};
use pmem::{Alignment, CreateOptions, Domain, OpenOptions, PmemError, Pool, kinds};
use std::path::PathBuf;

struct TempPool(PathBuf);

impl TempPool {
    fn new(tag: &str) -> TempPool {
        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let p = dir.join(format!("kavach-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        TempPool(p)
    }
    fn create(&self, size: u64) -> Pool<pmem::Mapping> {
        Pool::create(&self.0, &CreateOptions { size, domain: None }).expect("create")
    }
    fn flip(&self, offset: usize) {
        let mut data = std::fs::read(&self.0).unwrap();
        data[offset] ^= 0x04;
        std::fs::write(&self.0, data).unwrap();
    }
}

impl Drop for TempPool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn rw() -> OpenOptions {
    OpenOptions::default()
}

#[test]
fn create_reopen_and_regions_survive_close() {
    let t = TempPool::new("roundtrip");
    let mut pool = t.create(8 << 20);
    assert_eq!(pool.size(), 8 << 20);
    assert_eq!(
        pool.info().recorded_domain,
        Domain::Adr,
        "a /dev/shm pool is emulated PM"
    );
    assert!(!pool.info().survives_reboot);
    let a = pool
        .create_region("alpha", kinds::RAW, 5000, Alignment::Page)
        .unwrap();
    assert_eq!(a.length, 8192, "rounded up to whole pages");
    let h = pool
        .create_region("huge", kinds::HEAP, 2 << 20, Alignment::Huge)
        .unwrap();
    assert_eq!(h.offset % (2 << 20), 0);
    use pmem::Medium;
    pool.medium().write(a.offset as usize, b"region bytes");
    pool.medium().persist(a.offset as usize, 12).unwrap();
    let uuid = pool.uuid();
    pool.close().unwrap();

    let pool = Pool::open(&t.0, &rw()).unwrap();
    assert!(pool.was_clean_shutdown());
    assert_eq!(pool.uuid(), uuid);
    assert_eq!(pool.region("alpha"), Some(&a));
    assert_eq!(pool.region("huge"), Some(&h));
    let mut buf = [0u8; 12];
    pool.medium().read(a.offset as usize, &mut buf);
    assert_eq!(&buf, b"region bytes");
    drop(pool); // no close: looks like a crash to the next opener

    let mut pool = Pool::open(&t.0, &rw()).unwrap();
    assert!(!pool.was_clean_shutdown());
    pool.remove_region("alpha").unwrap();
    assert!(matches!(
        pool.remove_region("alpha"),
        Err(PmemError::NoSuchRegion(_))
    ));
    pool.close().unwrap();
    let pool = Pool::open(&t.0, &rw()).unwrap();
    assert_eq!(pool.regions().len(), 1);
    assert!(pool.was_clean_shutdown());
}

#[test]
fn region_requests_are_validated() {
    let t = TempPool::new("regions");
    let mut pool = t.create(1 << 20);
    let free = pool.free_bytes();
    assert_eq!(free, (1 << 20) - layout::METADATA_BYTES as u64);
    assert!(matches!(
        pool.create_region("", kinds::RAW, 4096, Alignment::Page),
        Err(PmemError::Invalid { .. })
    ));
    assert!(matches!(
        pool.create_region(&"n".repeat(33), kinds::RAW, 4096, Alignment::Page),
        Err(PmemError::Invalid { .. })
    ));
    assert!(matches!(
        pool.create_region("k0", 0, 4096, Alignment::Page),
        Err(PmemError::Invalid { .. })
    ));
    assert!(matches!(
        pool.create_region("zero", kinds::RAW, 0, Alignment::Page),
        Err(PmemError::Invalid { .. })
    ));
    assert!(matches!(
        pool.create_region("big", kinds::RAW, 1 << 20, Alignment::Page),
        Err(PmemError::NoSpace(_))
    ));
    assert!(matches!(
        pool.create_region("max", kinds::RAW, u64::MAX, Alignment::Page),
        Err(PmemError::Invalid { .. })
    ));
    assert!(matches!(
        pool.create_region("h", kinds::RAW, 4096, Alignment::Huge),
        Err(PmemError::NoSpace(_))
    ));
    pool.create_region("dup", kinds::RAW, 4096, Alignment::Page)
        .unwrap();
    assert!(matches!(
        pool.create_region("dup", kinds::RAW, 4096, Alignment::Page),
        Err(PmemError::RegionExists(_))
    ));
    for i in 1..layout::DIRECTORY_ENTRIES_MAX {
        pool.create_region(&format!("r{i}"), kinds::RAW, 4096, Alignment::Page)
            .unwrap();
    }
    assert!(matches!(
        pool.create_region("one-more", kinds::RAW, 4096, Alignment::Page),
        Err(PmemError::NoSpace(_))
    ));
    pool.close().unwrap();
    let pool = Pool::open(&t.0, &rw()).unwrap();
    assert_eq!(pool.regions().len(), layout::DIRECTORY_ENTRIES_MAX);
}

#[test]
fn a_second_opener_gets_a_clear_error() {
    let t = TempPool::new("lock");
    let pool = t.create(1 << 20);
    let err = Pool::open(&t.0, &rw()).unwrap_err();
    assert!(matches!(err, PmemError::Locked(_)));
    assert!(err.to_string().contains("in use"));
    assert!(matches!(
        Pool::open(
            &t.0,
            &OpenOptions {
                read_only: true,
                domain: None
            }
        ),
        Err(PmemError::Locked(_))
    ));
    assert!(matches!(check_file(&t.0), Err(PmemError::Locked(_))));
    pool.close().unwrap();
    let ro = Pool::open(
        &t.0,
        &OpenOptions {
            read_only: true,
            domain: None,
        },
    )
    .unwrap();
    let ro2 = Pool::open(
        &t.0,
        &OpenOptions {
            read_only: true,
            domain: None,
        },
    )
    .unwrap();
    assert!(ro.read_only() && ro2.read_only());
}

#[test]
fn read_only_opens_change_nothing() {
    let t = TempPool::new("ro");
    t.create(1 << 20).close().unwrap();
    let before = std::fs::read(&t.0).unwrap();
    let mut ro = Pool::open(
        &t.0,
        &OpenOptions {
            read_only: true,
            domain: None,
        },
    )
    .unwrap();
    assert!(matches!(
        ro.create_region("x", kinds::RAW, 4096, Alignment::Page),
        Err(PmemError::ReadOnly)
    ));
    assert!(matches!(ro.remove_region("x"), Err(PmemError::ReadOnly)));
    ro.close().unwrap();
    assert_eq!(before, std::fs::read(&t.0).unwrap());
}

#[test]
fn bad_sizes_are_refused_before_anything_is_created() {
    let t = TempPool::new("sizes");
    for size in [
        0,
        4096,
        layout::POOL_SIZE_MIN - 4096,
        (1 << 20) + 1,
        layout::POOL_SIZE_MAX + 4096,
    ] {
        let err = Pool::create(&t.0, &CreateOptions { size, domain: None }).unwrap_err();
        assert!(
            matches!(
                err,
                PmemError::Invalid {
                    what: "pool size",
                    ..
                }
            ),
            "{size}: {err}"
        );
        assert!(!t.0.exists());
    }
    let err = Pool::create(
        &t.0,
        &CreateOptions {
            size: 1 << 20,
            domain: Some(Domain::Sim),
        },
    )
    .unwrap_err();
    assert!(matches!(err, PmemError::Invalid { .. }));
    assert!(!t.0.exists(), "a refused create leaves no file behind");
}

#[test]
fn create_refuses_to_overwrite() {
    let t = TempPool::new("exists");
    std::fs::write(&t.0, b"precious").unwrap();
    assert!(matches!(
        Pool::create(
            &t.0,
            &CreateOptions {
                size: 1 << 20,
                domain: None
            }
        ),
        Err(PmemError::Io { .. })
    ));
    assert_eq!(std::fs::read(&t.0).unwrap(), b"precious");
}

#[test]
fn missing_files_and_non_pools_are_typed_errors() {
    let t = TempPool::new("nonpool");
    assert!(matches!(Pool::open(&t.0, &rw()), Err(PmemError::Io { .. })));
    assert!(matches!(check_file(&t.0), Err(PmemError::Io { .. })));
    std::fs::write(&t.0, vec![0x42u8; 1 << 20]).unwrap();
    assert!(matches!(
        Pool::open(&t.0, &rw()),
        Err(PmemError::NotAPool { .. })
    ));
    assert!(matches!(check_file(&t.0), Err(PmemError::NotAPool { .. })));
    std::fs::write(&t.0, b"short").unwrap();
    assert!(matches!(
        Pool::open(&t.0, &rw()),
        Err(PmemError::NotAPool { .. })
    ));
    assert_eq!(
        std::fs::read(&t.0).unwrap(),
        b"short",
        "a failed open writes nothing"
    );
}

#[test]
fn truncated_pools_are_reported_not_mapped_past_the_end() {
    let t = TempPool::new("trunc");
    t.create(1 << 20).close().unwrap();
    for keep in [(1 << 20) - 4096, layout::METADATA_BYTES as u64, 6000] {
        let f = std::fs::OpenOptions::new().write(true).open(&t.0).unwrap();
        f.set_len(keep).unwrap();
        drop(f);
        let err = Pool::open(&t.0, &rw()).unwrap_err();
        assert!(
            matches!(err, PmemError::SizeMismatch { .. }),
            "{keep}: {err}"
        );
        let report = check_file(&t.0).unwrap();
        assert!(!report.opens(), "{keep}");
        assert!(
            report.findings[0].message.contains("truncated"),
            "{:?}",
            report.findings
        );
    }
}

#[test]
fn one_damaged_slot_is_reported_and_the_pool_opens_from_the_other() {
    let t = TempPool::new("slot");
    t.create(1 << 20).close().unwrap(); // sequences 1 (format), 2 (open), 3 (close): slot 1 current
    for slot in 0..2 {
        let at = layout::HEADER_COPY_OFFSETS[slot] + layout::SLOT_OFFSET_IN_PAGE + 9;
        let clean = std::fs::read(&t.0).unwrap();
        t.flip(at);
        let report = check_file(&t.0).unwrap();
        assert!(
            !report.healthy() && report.opens(),
            "slot {slot}: {:?}",
            report.findings
        );
        assert_eq!(report.findings.len(), 1);
        assert!(
            report.findings[0]
                .message
                .contains(&format!("mutable header slot {slot}"))
        );
        let pool = Pool::open(
            &t.0,
            &OpenOptions {
                read_only: true,
                domain: None,
            },
        )
        .unwrap();
        assert_eq!(pool.damage().len(), 1);
        drop(pool);
        // A read-write open writes the next state into the damaged slot and heals it... unless
        // the damaged slot was the newest, in which case the older one is the state and the next
        // write again goes to the damaged one: either way one open-close cycle heals the pool.
        Pool::open(&t.0, &rw()).unwrap().close().unwrap();
        assert!(check_file(&t.0).unwrap().healthy());
        std::fs::write(&t.0, clean).unwrap();
    }
}

#[test]
fn both_slots_damaged_is_a_typed_corruption() {
    let t = TempPool::new("slots");
    t.create(1 << 20).close().unwrap();
    for slot in 0..2 {
        t.flip(layout::HEADER_COPY_OFFSETS[slot] + layout::SLOT_OFFSET_IN_PAGE + 20);
    }
    let err = Pool::open(&t.0, &rw()).unwrap_err();
    let c = err.corruption().expect("a corruption error");
    assert_eq!(c.structure, "mutable header slots");
    let report = check_file(&t.0).unwrap();
    assert!(!report.opens());
}

#[test]
fn a_damaged_header_copy_is_survived_and_rewritten() {
    let t = TempPool::new("hdrcopy");
    t.create(1 << 20).close().unwrap();
    for copy in 0..2 {
        t.flip(layout::HEADER_COPY_OFFSETS[copy] + 45); // inside pool_uuid
        let report = check_file(&t.0).unwrap();
        assert!(report.opens() && !report.healthy());
        assert!(
            report.findings[0]
                .message
                .contains(&format!("pool header copy {copy}"))
        );
        let pool = Pool::open(&t.0, &rw()).unwrap();
        assert_eq!(pool.damage()[0].field, "crc32c");
        pool.close().unwrap();
        assert!(
            check_file(&t.0).unwrap().healthy(),
            "the read-write open rewrote copy {copy}"
        );
    }
    t.flip(45);
    t.flip(PAGE_SIZE + 45);
    assert!(Pool::open(&t.0, &rw()).unwrap_err().corruption().is_some());
    assert!(!check_file(&t.0).unwrap().opens());
}

#[test]
fn a_damaged_directory_copy_in_force_opens_from_its_mirror_and_both_damaged_is_fatal() {
    let t = TempPool::new("dir");
    let mut pool = t.create(1 << 20);
    pool.create_region("a", kinds::RAW, 4096, Alignment::Page)
        .unwrap();
    pool.close().unwrap(); // directory generation 2 lives in copy 0, its mirror in copy 1
    let before = std::fs::read(&t.0).unwrap();
    assert_eq!(
        before[layout::DIRECTORY_COPY_OFFSETS[0]..][..PAGE_SIZE],
        before[layout::DIRECTORY_COPY_OFFSETS[1]..][..PAGE_SIZE],
        "the copy not in force mirrors the one in force"
    );
    t.flip(layout::DIRECTORY_COPY_OFFSETS[0] + 64 + 41);
    let report = check_file(&t.0).unwrap();
    assert!(report.opens() && !report.healthy(), "{:?}", report.findings);
    assert!(
        report.findings[0]
            .message
            .contains("region directory copy 0")
    );
    let pool = Pool::open(&t.0, &ro()).unwrap();
    assert_eq!(pool.regions().len(), 1);
    assert_eq!(pool.damage()[0].structure, "region directory copy 0");
    drop(pool);
    // Both copies damaged: no copy proves the regions.
    t.flip(layout::DIRECTORY_COPY_OFFSETS[1] + 64 + 41);
    let err = Pool::open(&t.0, &rw()).unwrap_err();
    let c = err.corruption().unwrap();
    assert_eq!(c.structure, "region directory copy 0");
    let report = check_file(&t.0).unwrap();
    assert!(report.findings.iter().any(|f| f.severity == Severity::Fatal
        && f.message.contains("region directory copy 0")));
    // A read-write open with only the mirror good rewrites the copy in force first.
    t.flip(layout::DIRECTORY_COPY_OFFSETS[1] + 64 + 41);
    Pool::open(&t.0, &rw()).unwrap().close().unwrap();
    assert!(check_file(&t.0).unwrap().healthy());
}

fn ro() -> OpenOptions {
    OpenOptions {
        read_only: true,
        domain: None,
    }
}

#[test]
fn unknown_feature_bits_are_refused_by_class() {
    let t = TempPool::new("features");
    t.create(1 << 20).close().unwrap();
    let mut data = std::fs::read(&t.0).unwrap();
    for copy in 0..2 {
        let at = layout::HEADER_COPY_OFFSETS[copy];
        // Bit 0 is `FEATURES_INCOMPAT_GROWABLE`; bit 1 is unknown.
        data[at + layout::header::FEATURES_INCOMPAT.offset] = 2;
        let crc = crc32c(&data[at..at + layout::header::CRC32C.offset]);
        data[at + layout::header::CRC32C.offset..at + layout::HEADER_BYTES]
            .copy_from_slice(&crc.to_le_bytes());
    }
    std::fs::write(&t.0, &data).unwrap();
    assert!(matches!(
        Pool::open(&t.0, &rw()),
        Err(PmemError::UnsupportedFeature {
            kind: "incompatible",
            ..
        })
    ));
    assert!(!check_file(&t.0).unwrap().opens());
}

/// CRC-32C (Castagnoli), bitwise: an independent implementation to re-seal a header in tests.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn a_stray_byte_in_unused_header_space_is_reported_by_check() {
    let t = TempPool::new("stray");
    t.create(1 << 20).close().unwrap();
    t.flip(PAGE_SIZE + 3000);
    let report = check_file(&t.0).unwrap();
    assert!(!report.healthy() && report.opens());
    assert!(
        report.findings[0]
            .message
            .contains("unused bytes must be zero"),
        "{:?}",
        report.findings
    );
}

#[test]
fn a_newer_format_version_is_named_as_such() {
    let t = TempPool::new("version");
    t.create(1 << 20).close().unwrap();
    let mut data = std::fs::read(&t.0).unwrap();
    for copy in 0..2 {
        let at = layout::HEADER_COPY_OFFSETS[copy] + layout::header::FORMAT_VERSION.offset;
        data[at..at + 4].copy_from_slice(&2u32.to_le_bytes());
    }
    std::fs::write(&t.0, &data).unwrap();
    let err = Pool::open(&t.0, &rw()).unwrap_err();
    let c = err.corruption().unwrap();
    assert_eq!(
        (c.field, c.expected.as_str(), c.found.as_str()),
        ("format_version", "1", "2")
    );
}
