//! The file-system API on a volatile device: POSIX semantics, durability across reopen,
//! coalescing, checkpoints, errno mapping.

use std::sync::Arc;

use microfs::device::{Device, MemDevice};
use microfs::{Fs, FsError, FsOptions, Kind, NamespaceId};

fn opts() -> FsOptions {
    FsOptions {
        log_bytes: 256 << 10,
        background_checkpoint: false,
        ..FsOptions::default()
    }
}

fn fresh(len: usize) -> (Arc<dyn Device>, Fs) {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(len));
    let id = NamespaceId {
        job: "job".into(),
        rank: 3,
    };
    let fs = Fs::format(dev.clone(), &opts(), &id).unwrap();
    (dev, fs)
}

fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
    let size = fs.stat(ino).unwrap().size as usize;
    let mut b = vec![0u8; size];
    assert_eq!(fs.read_at(ino, 0, &mut b).unwrap(), size);
    b
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn create_write_read_reopen() {
    let (dev, fs) = fresh(16 << 20);
    fs.mkdir("ckpt", 0o755).unwrap();
    let ino = fs.create("ckpt/rank0.dat", 0o644, true, false).unwrap();
    let data = pattern(200_000, 7);
    for (k, chunk) in data.chunks(32 * 1024).enumerate() {
        fs.write_at(ino, (k * 32 * 1024) as u64, chunk).unwrap();
    }
    assert_eq!(read_all(&fs, ino), data);
    let s = fs.stats();
    assert!(s.writes_coalesced >= 5, "{s:?}");
    drop(fs); // a crash: no close
    let (fs, rec) = Fs::open(dev.clone(), &opts()).unwrap();
    assert!(
        rec.runs_applied == 1 || rec.records_replayed >= 3,
        "{rec:?}"
    );
    let ino2 = fs.lookup("ckpt/rank0.dat").unwrap();
    assert_eq!(ino2, ino);
    assert_eq!(read_all(&fs, ino), data);
    assert_eq!(fs.stat(fs.lookup("ckpt").unwrap()).unwrap().kind, Kind::Dir);
    let r = fs.check().unwrap();
    assert!(r.findings.is_empty(), "{r:?}");
    fs.close().unwrap();
    let (fs, rec) = Fs::open(dev, &opts()).unwrap();
    assert!(
        rec.clean && rec.checkpoint_slot.is_some() && rec.records_replayed == 0,
        "{rec:?}"
    );
    assert_eq!(read_all(&fs, ino), data);
}

#[test]
fn holes_sparse_and_truncate() {
    let (_dev, fs) = fresh(16 << 20);
    let ino = fs.create("f", 0o600, true, false).unwrap();
    fs.write_at(ino, 100_000, b"tail").unwrap();
    let b = read_all(&fs, ino);
    assert_eq!(b.len(), 100_004);
    assert!(b[..100_000].iter().all(|&x| x == 0));
    assert_eq!(&b[100_000..], b"tail");
    assert_eq!(fs.stat(ino).unwrap().blocks, 32 * 1024 / 512);
    let free0 = fs.stats().blocks_free;
    fs.write_at(ino, 0, &pattern(70_000, 1)).unwrap();
    assert_eq!(fs.stats().blocks_free, free0 - 3);
    fs.truncate(ino, 40_000).unwrap();
    assert_eq!(fs.stats().blocks_free, free0 - 3 + 2);
    fs.truncate(ino, 50_000).unwrap();
    let b = read_all(&fs, ino);
    assert_eq!(&b[..40_000], &pattern(70_000, 1)[..40_000]);
    assert!(
        b[40_000..].iter().all(|&x| x == 0),
        "truncated bytes read back as zeros"
    );
    assert!(fs.check().unwrap().findings.is_empty());
}

#[test]
fn posix_errors() {
    let (_dev, fs) = fresh(8 << 20);
    fs.mkdir("d", 0o755).unwrap();
    let f = fs.create("d/f", 0o644, true, false).unwrap();
    let e = |r: microfs::Result<u64>| r.unwrap_err().errno();
    assert_eq!(e(fs.create("d/f", 0o644, true, false)), libc::EEXIST);
    assert_eq!(e(fs.lookup("nope")), libc::ENOENT);
    assert_eq!(e(fs.lookup("d/f/x")), libc::ENOTDIR);
    assert_eq!(e(fs.create("d/f/x", 0o644, true, false)), libc::ENOTDIR);
    assert_eq!(e(fs.mkdir("d", 0o755)), libc::EEXIST);
    assert_eq!(e(fs.create("d", 0o644, false, false)), libc::EISDIR);
    assert_eq!(fs.rmdir("d").unwrap_err().errno(), libc::ENOTEMPTY);
    assert_eq!(fs.unlink("d").unwrap_err().errno(), libc::EISDIR);
    assert_eq!(fs.rmdir("d/f").unwrap_err().errno(), libc::ENOTDIR);
    assert_eq!(
        e(fs.create(&"x".repeat(256), 0o644, true, false)),
        libc::ENAMETOOLONG
    );
    assert_eq!(e(fs.lookup("a//b")), libc::EINVAL);
    assert_eq!(fs.rename("d", "d/sub").unwrap_err().errno(), libc::EINVAL);
    fs.mkdir("e", 0o755).unwrap();
    assert_eq!(fs.rename("d/f", "e").unwrap_err().errno(), libc::EISDIR);
    assert_eq!(fs.rename("e", "d/f").unwrap_err().errno(), libc::ENOTDIR);
    assert_eq!(fs.rename("e", "d").unwrap_err().errno(), libc::ENOTEMPTY);
    assert_eq!(
        fs.read_at(fs.lookup("d").unwrap(), 0, &mut [0u8; 4])
            .unwrap_err()
            .errno(),
        libc::EISDIR
    );
    // Same name is a no-op; open with truncate cuts the file.
    fs.write_at(f, 0, b"hello").unwrap();
    fs.rename("d/f", "d/f").unwrap();
    assert_eq!(fs.create("d/f", 0o644, false, true).unwrap(), f);
    assert_eq!(fs.stat(f).unwrap().size, 0);
    assert!(matches!(
        fs.lookup("missing"),
        Err(FsError::NotFound { .. })
    ));
}

#[test]
fn rename_replaces_and_survives_reopen() {
    let (dev, fs) = fresh(8 << 20);
    fs.mkdir("a", 0o755).unwrap();
    fs.mkdir("b", 0o755).unwrap();
    let x = fs.create("a/x", 0o644, true, false).unwrap();
    fs.write_at(x, 0, b"new").unwrap();
    let y = fs.create("b/y", 0o644, true, false).unwrap();
    fs.write_at(y, 0, &pattern(100_000, 2)).unwrap();
    let free = fs.stats().blocks_free;
    fs.rename("a/x", "b/y").unwrap();
    assert_eq!(
        fs.stats().blocks_free,
        free + 4,
        "the replaced file's blocks are free"
    );
    assert_eq!(fs.lookup("b/y").unwrap(), x);
    assert!(fs.lookup("a/x").is_err());
    fs.rename("b", "a/b2").unwrap();
    assert_eq!(fs.lookup("a/b2/y").unwrap(), x);
    assert_eq!(fs.stat(fs.lookup("a").unwrap()).unwrap().nlink, 3);
    fs.mkdir("c", 0o755).unwrap();
    fs.rename("c", "a/b2").unwrap_err();
    fs.rmdir("c").unwrap();
    fs.set_mode(x, 0o600).unwrap();
    fs.set_times(x, Some(5), Some(7)).unwrap();
    drop(fs);
    let (fs, _) = Fs::open(dev, &opts()).unwrap();
    assert_eq!(fs.lookup("a/b2/y").unwrap(), x);
    let st = fs.stat(x).unwrap();
    assert_eq!(
        (st.mode, st.atime_ns, st.mtime_ns, st.size),
        (0o600, 5, 7, 3)
    );
    assert!(fs.lookup("c").is_err());
    let names: Vec<String> = fs
        .readdir(fs.lookup("a").unwrap())
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec!["b2".to_string()]);
    let r = fs.check().unwrap();
    assert!(r.findings.is_empty(), "{r:?}");
}

#[test]
fn log_fills_and_checkpoints_keep_everything() {
    let (dev, fs) = fresh(64 << 20);
    for i in 0..1000 {
        let ino = fs.create(&format!("f{i}"), 0o644, true, false).unwrap();
        fs.write_at(ino, 0, format!("file {i}").as_bytes()).unwrap();
        if i % 3 == 0 {
            fs.unlink(&format!("f{i}")).unwrap();
        }
    }
    assert!(fs.stats().checkpoints >= 1, "{:?}", fs.stats());
    drop(fs);
    let (fs, rec) = Fs::open(dev, &opts()).unwrap();
    assert!(rec.checkpoint_slot.is_some());
    for i in 0..1000 {
        let r = fs.lookup(&format!("f{i}"));
        if i % 3 == 0 {
            assert!(r.is_err());
        } else {
            assert_eq!(read_all(&fs, r.unwrap()), format!("file {i}").as_bytes());
        }
    }
    assert!(fs.check().unwrap().findings.is_empty());
}

#[test]
fn coalescing_counts_and_off_switch() {
    let (_d, fs) = fresh(16 << 20);
    let ino = fs.create("f", 0o644, true, false).unwrap();
    for k in 0..64u64 {
        fs.write_at(ino, k * 4096, &[k as u8; 4096]).unwrap();
    }
    let s = fs.stats();
    assert_eq!(s.writes, 64);
    assert_eq!(s.writes_coalesced, 63);
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(16 << 20));
    let o = FsOptions {
        coalesce: false,
        ..opts()
    };
    let fs = Fs::format(dev, &o, &NamespaceId::default()).unwrap();
    let ino = fs.create("f", 0o644, true, false).unwrap();
    for k in 0..64u64 {
        fs.write_at(ino, k * 4096, &[k as u8; 4096]).unwrap();
    }
    let s2 = fs.stats();
    assert_eq!(s2.writes_coalesced, 0);
    assert_eq!(s2.records_written, 65);
}

#[test]
fn read_only_open_writes_nothing() {
    let (dev, fs) = fresh(8 << 20);
    let ino = fs.create("f", 0o644, true, false).unwrap();
    fs.write_at(ino, 0, b"abc").unwrap();
    drop(fs);
    let mut before = vec![0u8; dev.capacity() as usize];
    dev.read_at(0, &mut before).unwrap();
    let (fs, _) = Fs::open_read_only(dev.clone(), &opts()).unwrap();
    assert_eq!(read_all(&fs, ino), b"abc");
    assert_eq!(
        fs.create("g", 0o644, true, false).unwrap_err().errno(),
        libc::EROFS
    );
    fs.close().unwrap();
    let mut after = vec![0u8; dev.capacity() as usize];
    dev.read_at(0, &mut after).unwrap();
    assert!(before == after, "a read-only open changed the device");
}

#[test]
fn blank_and_damaged_devices_are_errors_not_panics() {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(8 << 20));
    assert!(matches!(
        Fs::open(dev.clone(), &opts()),
        Err(FsError::Unformatted { .. })
    ));
    let fs = Fs::format(dev.clone(), &opts(), &NamespaceId::default()).unwrap();
    fs.create("f", 0o644, true, false).unwrap();
    fs.close().unwrap();
    // Flip bytes in each superblock copy: both bad is damage.
    for at in [40u64, 4096 + 40] {
        let mut b = [0u8; 1];
        dev.read_at(at, &mut b).unwrap();
        dev.write_at(at, &[b[0] ^ 0xff]).unwrap();
    }
    match Fs::open(dev.clone(), &opts()) {
        Err(FsError::Damage { what, .. }) => assert!(what.contains("superblock"), "{what}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn background_checkpoint_waits_for_no_open_file() {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(16 << 20));
    let o = FsOptions {
        log_bytes: 64 << 10,
        background_checkpoint: true,
        checkpoint_log_fill: 0.3,
        coalesce: false,
        ..FsOptions::default()
    };
    let fs = Fs::format(dev.clone(), &o, &NamespaceId::default()).unwrap();
    let ino = fs.create("f", 0o644, true, false).unwrap();
    fs.opened(ino);
    // Past the threshold (0.3 of the ring) but under the forced level (0.85).
    while (fs.stats().log_used_bytes as f64) < 0.5 * fs.stats().log_ring_bytes as f64 {
        fs.write_at(ino, 0, b"x").unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        fs.stats().checkpoints,
        0,
        "a checkpoint ran while a file was open"
    );
    fs.closed(ino);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while fs.stats().checkpoints == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no background checkpoint: {:?}",
            fs.stats()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(fs.stats().log_used_bytes < fs.stats().log_ring_bytes / 10);
    drop(fs);
    let (fs, rec) = Fs::open(dev, &o).unwrap();
    assert!(rec.checkpoint_slot.is_some());
    let mut b = [0u8; 1];
    fs.read_at(ino, 0, &mut b).unwrap();
    assert_eq!(&b, b"x");
}

#[test]
fn open_counts_survive_unlink_and_fs_is_send_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Fs>();
    let (_d, fs) = fresh(8 << 20);
    let ino = fs.create("f", 0o644, true, false).unwrap();
    fs.opened(ino);
    fs.unlink("f").unwrap();
    assert_eq!(fs.stats().open_files, 1);
    fs.closed(ino);
    assert_eq!(fs.stats().open_files, 0);
    fs.closed(ino);
    assert_eq!(
        fs.stats().open_files,
        0,
        "a close without an open does not go below zero"
    );
}

#[test]
fn directory_files_are_compacted_at_checkpoints() {
    let o = FsOptions {
        hugeblock: 4096,
        ..opts()
    };
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(16 << 20));
    let fs = Fs::format(dev.clone(), &o, &NamespaceId::default()).unwrap();
    fs.mkdir("d", 0o755).unwrap();
    for i in 0..300 {
        fs.create(&format!("d/step-{i:04}"), 0o644, true, false)
            .unwrap();
        if i >= 2 {
            fs.unlink(&format!("d/step-{:04}", i - 2)).unwrap();
        }
    }
    let d = fs.lookup("d").unwrap();
    let before = fs.stat(d).unwrap().size;
    assert!(before > 3 * 4096, "{before}");
    let free = fs.stats().blocks_free;
    fs.checkpoint().unwrap();
    let after = fs.stat(d).unwrap().size;
    assert!(
        after < 100,
        "two live names left, directory file of {after} bytes"
    );
    assert!(fs.stats().dirs_compacted >= 1);
    assert_eq!(fs.stats().blocks_free, free + before.div_ceil(4096) - 1);
    assert!(fs.check().unwrap().findings.is_empty());
    fs.create("d/new", 0o644, true, false).unwrap();
    drop(fs);
    let (fs, _) = Fs::open(dev, &o).unwrap();
    let names: Vec<String> = fs
        .readdir(fs.lookup("d").unwrap())
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec!["new", "step-0298", "step-0299"]);
    assert!(fs.check().unwrap().findings.is_empty());
}
