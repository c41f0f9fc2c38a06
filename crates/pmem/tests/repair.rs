//! A failed operation puts the pool back byte for byte (`Pool::close_unchanged`), and
//! `pmem::repair` rebuilds what a good copy proves and refuses the rest.

use pmem::check::check_file;
use pmem::layout::{self, PAGE_SIZE};
use pmem::repair::repair_file;
use pmem::sim::crash_at_every_fence;
use pmem::{Alignment, CreateOptions, OpenOptions, PmemError, Pool, SimConfig, SimMedium, kinds};
use std::path::PathBuf;

struct TempPool(PathBuf);

impl TempPool {
    fn new(tag: &str) -> TempPool {
        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let p = dir.join(format!("kavach-repair-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        TempPool(p)
    }
    /// A closed 1 MiB pool with regions `a` (4 KiB) and `b` (8 KiB): directory generation 3,
    /// in copy 1, mirrored in copy 0.
    fn with_regions(tag: &str) -> TempPool {
        let t = TempPool::new(tag);
        let mut pool = Pool::create(
            &t.0,
            &CreateOptions {
                size: 1 << 20,
                domain: None,
            },
        )
        .unwrap();
        pool.create_region("a", kinds::RAW, 4096, Alignment::Page)
            .unwrap();
        pool.create_region("b", kinds::LOG, 8192, Alignment::Page)
            .unwrap();
        pool.close().unwrap();
        t
    }
    fn bytes(&self) -> Vec<u8> {
        std::fs::read(&self.0).unwrap()
    }
    fn put(&self, at: usize, new: &[u8]) {
        let mut data = self.bytes();
        data[at..at + new.len()].copy_from_slice(new);
        std::fs::write(&self.0, data).unwrap();
    }
    fn flip(&self, at: usize) {
        let mut data = self.bytes();
        data[at] ^= 0x10;
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

/// Open read-write, fail a region create and a region remove, close unchanged: the file is
/// byte-for-byte as it was, whatever the open rewrote (state, header copy, directory copy).
#[test]
fn a_failed_region_operation_leaves_the_file_byte_for_byte() {
    let damage: [Option<usize>; 3] = [
        None,
        Some(layout::HEADER_COPY_OFFSETS[1] + 50), // the open rewrites header copy 1
        Some(layout::DIRECTORY_COPY_OFFSETS[1] + 70), // ... and the directory copy in force
    ];
    for at in damage {
        for clean in [true, false] {
            let t = TempPool::with_regions("unchanged");
            if !clean {
                // Leave the pool unclean, as a crash does: open, and drop without closing.
                drop(Pool::open(&t.0, &rw()).unwrap());
            }
            if let Some(at) = at {
                t.flip(at);
            }
            let before = t.bytes();
            let mut pool = Pool::open(&t.0, &rw()).unwrap();
            assert_eq!(pool.was_clean_shutdown(), clean);
            assert_ne!(t.bytes(), before, "the open marked the pool in use");
            let err = pool
                .create_region("big", kinds::RAW, 1 << 20, Alignment::Page)
                .unwrap_err();
            assert!(matches!(err, PmemError::NoSpace(_)), "{err}");
            assert!(pool.remove_region("nothing").is_err());
            assert!(
                pool.create_region("a", kinds::RAW, 4096, Alignment::Page)
                    .is_err()
            );
            pool.close_unchanged().unwrap();
            assert!(
                t.bytes() == before,
                "damage {at:?}, clean {clean}: bytes differ"
            );
            let pool = Pool::open(
                &t.0,
                &OpenOptions {
                    read_only: true,
                    domain: None,
                },
            )
            .unwrap();
            assert_eq!(pool.was_clean_shutdown(), clean);
        }
    }
}

/// A change made through the handle stays: `close_unchanged` is then a plain close.
#[test]
fn close_unchanged_after_a_change_keeps_it() {
    let t = TempPool::with_regions("changed");
    let mut pool = Pool::open(&t.0, &rw()).unwrap();
    pool.create_region("c", kinds::RAW, 4096, Alignment::Page)
        .unwrap();
    pool.close_unchanged().unwrap();
    let pool = Pool::open(&t.0, &rw()).unwrap();
    assert!(pool.was_clean_shutdown());
    assert!(pool.region("c").is_some());
}

/// Crashed at every fence of open + failed create + close_unchanged, the pool opens with the
/// same regions and the clean flag it had; run to the end, the image is the one it started as.
#[test]
fn close_unchanged_is_crash_safe() {
    let sim = SimMedium::new(1 << 20, SimConfig::default());
    let medium = Pool::format(&sim, pmem::Domain::Sim).unwrap();
    let mut pool = Pool::open_medium(medium, &rw()).unwrap();
    pool.create_region("keep", kinds::RAW, 8192, Alignment::Page)
        .unwrap();
    pool.close().unwrap();
    let base = sim.durable_image();
    let op = |m: &SimMedium| {
        let Ok(mut pool) = Pool::open_medium(m, &rw()) else {
            return;
        };
        let failed = pool.create_region("huge", kinds::RAW, 1 << 20, Alignment::Page);
        assert!(failed.is_err());
        let _ = pool.close_unchanged();
    };
    let whole = SimMedium::from_image(base.clone(), SimConfig::default());
    op(&whole);
    assert!(
        whole.durable_image() == base,
        "a full run puts every byte back"
    );
    let points = crash_at_every_fence(&base, 7, op, |img, n| {
        let sim = SimMedium::from_image(img, SimConfig::default());
        let pool = Pool::open_medium(
            &sim,
            &OpenOptions {
                read_only: true,
                domain: None,
            },
        )
        .unwrap_or_else(|e| panic!("crash at fence {n}: {e}"));
        assert_eq!(pool.regions().len(), 1, "crash at fence {n}");
    });
    assert_eq!(points, 2, "open (slot) + put back (slot)");
}

#[test]
fn stray_bytes_in_unused_header_space_are_cleared() {
    let t = TempPool::with_regions("stray");
    let good = t.bytes();
    t.put(PAGE_SIZE + 3000, &[0xab, 0, 0xcd]);
    t.put(700, &[1]);
    assert!(!check_file(&t.0).unwrap().healthy());
    let report = repair_file(&t.0).unwrap();
    assert!(report.healthy(), "{report:?}");
    assert_eq!(report.repaired.len(), 2, "{report:?}");
    assert!(report.not_repaired.is_empty());
    assert!(check_file(&t.0).unwrap().healthy());
    assert!(t.bytes() == good);
    // Nothing left to do: a second run repairs nothing.
    let again = repair_file(&t.0).unwrap();
    assert!(again.healthy() && again.repaired.is_empty() && again.not_repaired.is_empty());
}

#[test]
fn a_bad_bit_in_the_directory_copy_in_force_is_rebuilt_from_its_mirror() {
    let t = TempPool::with_regions("dirbit");
    let good = t.bytes();
    t.flip(layout::DIRECTORY_COPY_OFFSETS[1] + 64 + 45); // generation 3 is in copy 1
    let report = repair_file(&t.0).unwrap();
    assert!(report.healthy(), "{report:?}");
    assert!(
        report.repaired[0]
            .message
            .contains("rebuilt from its mirror")
    );
    assert!(t.bytes() == good);
    assert!(check_file(&t.0).unwrap().healthy());
}

/// The other copy holds an older generation (a pool written before mirrors, or a crash between
/// a directory switch and its mirror): nothing proves the regions in force, so nothing changes.
#[test]
fn a_directory_without_a_mirror_is_refused_unchanged() {
    let t = TempPool::with_regions("nomirror");
    // Generation 2 (region `a` only) into copy 0, as the pool had before region `b`.
    let mut pool = Pool::open(&t.0, &rw()).unwrap();
    pool.remove_region("b").unwrap(); // generation 4 in copy 0, mirror in copy 1
    pool.close().unwrap();
    let gen4 = t.bytes()[layout::DIRECTORY_COPY_OFFSETS[0]..][..PAGE_SIZE].to_vec();
    let mut pool = Pool::open(&t.0, &rw()).unwrap();
    pool.create_region("b", kinds::LOG, 8192, Alignment::Page)
        .unwrap(); // generation 5 in copy 1
    pool.close().unwrap();
    t.put(layout::DIRECTORY_COPY_OFFSETS[0], &gen4);
    // In force and valid, mirror older: repair writes the mirror.
    let report = repair_file(&t.0).unwrap();
    assert!(report.healthy());
    assert!(report.repaired[0].message.contains("mirror"), "{report:?}");
    // Again, with the copy in force damaged.
    t.put(layout::DIRECTORY_COPY_OFFSETS[0], &gen4);
    t.flip(layout::DIRECTORY_COPY_OFFSETS[1] + 64 + 45);
    let before = t.bytes();
    let report = repair_file(&t.0).unwrap();
    assert!(!report.healthy());
    assert!(report.repaired.is_empty(), "{report:?}");
    assert!(
        report.not_repaired[0].reason.contains("no valid mirror"),
        "{report:?}"
    );
    assert!(t.bytes() == before);
}

#[test]
fn header_copies_are_rebuilt_only_when_provable() {
    let t = TempPool::with_regions("header");
    let good = t.bytes();
    // One copy damaged: rebuilt from the other.
    t.flip(layout::HEADER_COPY_OFFSETS[0] + 60);
    let report = repair_file(&t.0).unwrap();
    assert!(report.healthy(), "{report:?}");
    assert!(t.bytes() == good);
    // One copy names a newer format version: not provably damage.
    t.put(
        layout::HEADER_COPY_OFFSETS[1] + layout::header::FORMAT_VERSION.offset,
        &2u32.to_le_bytes(),
    );
    let before = t.bytes();
    let report = repair_file(&t.0).unwrap();
    assert!(!report.healthy());
    assert!(
        report.not_repaired[0].reason.contains("newer version"),
        "{report:?}"
    );
    assert!(t.bytes() == before);
    t.put(0, &good[..2 * PAGE_SIZE]);
    // Both copies damaged: refused.
    t.flip(layout::HEADER_COPY_OFFSETS[0] + 60);
    t.flip(layout::HEADER_COPY_OFFSETS[1] + 60);
    let before = t.bytes();
    let report = repair_file(&t.0).unwrap();
    assert!(
        !report.healthy() && report.repaired.is_empty(),
        "{report:?}"
    );
    assert!(t.bytes() == before);
}

#[test]
fn a_damaged_slot_is_cleared_and_a_truncated_file_refused() {
    let t = TempPool::with_regions("slot");
    // The slot not in force: the closed pool's state is in one slot, the older one in the other.
    let info_seq = {
        let p = Pool::open(
            &t.0,
            &OpenOptions {
                read_only: true,
                domain: None,
            },
        )
        .unwrap();
        p.info().state_sequence
    };
    let other = pmem::header::slot_offset(((info_seq + 1) % 2) as usize);
    t.flip(other + 3);
    assert!(!check_file(&t.0).unwrap().healthy());
    let report = repair_file(&t.0).unwrap();
    assert!(report.healthy(), "{report:?}");
    assert!(check_file(&t.0).unwrap().healthy());
    let p = Pool::open(&t.0, &rw()).unwrap();
    assert!(p.was_clean_shutdown());
    p.close().unwrap();

    let f = std::fs::OpenOptions::new().write(true).open(&t.0).unwrap();
    f.set_len((1 << 20) - 4096).unwrap();
    drop(f);
    let before = t.bytes();
    let report = repair_file(&t.0).unwrap();
    assert!(
        !report.healthy() && report.repaired.is_empty(),
        "{report:?}"
    );
    assert!(t.bytes() == before);
}

#[test]
fn repair_cannot_run_on_what_is_not_a_pool_or_is_in_use() {
    let t = TempPool::with_regions("cannot");
    let _writer = Pool::open(&t.0, &rw()).unwrap();
    assert!(matches!(repair_file(&t.0), Err(PmemError::Locked(_))));
    let n = TempPool::new("notapool");
    std::fs::write(&n.0, vec![7u8; 1 << 16]).unwrap();
    assert!(matches!(repair_file(&n.0), Err(PmemError::NotAPool { .. })));
    assert_eq!(std::fs::read(&n.0).unwrap(), vec![7u8; 1 << 16]);
}

/// Re-seal header copy `copy` of `data` after a field was changed, so the copy is valid.
fn reseal_header(data: &mut [u8], copy: usize) {
    let at = layout::HEADER_COPY_OFFSETS[copy];
    let crc = crc32c::crc32c(&data[at..at + layout::header::CRC32C.offset]);
    data[at + layout::header::CRC32C.offset..at + layout::HEADER_BYTES]
        .copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn what_cannot_be_proven_is_left_as_it_is() {
    // Two valid header copies that disagree (created_ns differs): nothing says which is right.
    let t = TempPool::with_regions("disagree");
    let mut data = t.bytes();
    data[layout::HEADER_COPY_OFFSETS[1] + layout::header::CREATED_NS.offset] ^= 1;
    reseal_header(&mut data, 1);
    std::fs::write(&t.0, &data).unwrap();
    let report = repair_file(&t.0).unwrap();
    assert!(
        !report.healthy() && report.repaired.is_empty(),
        "{report:?}"
    );
    assert!(
        report.not_repaired[0].reason.contains("disagree"),
        "{report:?}"
    );
    assert!(t.bytes() == data);

    // Stray bytes in a pool with a compatible feature bit this build does not know: the bit may
    // give them a meaning, so they stay.
    let t = TempPool::with_regions("features");
    let mut data = t.bytes();
    for copy in 0..2 {
        data[layout::HEADER_COPY_OFFSETS[copy] + layout::header::FEATURES_COMPAT.offset] = 0x80;
        reseal_header(&mut data, copy);
    }
    data[PAGE_SIZE + 3000] = 0x42;
    std::fs::write(&t.0, &data).unwrap();
    let report = repair_file(&t.0).unwrap();
    assert!(
        !report.healthy() && report.repaired.is_empty(),
        "{report:?}"
    );
    assert!(
        report.not_repaired[0].reason.contains("feature bits 0x80"),
        "{report:?}"
    );
    assert!(t.bytes() == data);

    // No valid slot: nothing says which directory generation is in force.
    let t = TempPool::with_regions("slots");
    for i in 0..2 {
        t.flip(pmem::header::slot_offset(i) + 1);
    }
    let before = t.bytes();
    let report = repair_file(&t.0).unwrap();
    assert!(
        !report.healthy() && report.repaired.is_empty(),
        "{report:?}"
    );
    assert!(
        report.not_repaired[0].reason.contains("no valid state"),
        "{report:?}"
    );
    assert!(t.bytes() == before);
}
