//! The local devices: ranges, unaligned IO, claims, O_DIRECT and its fallback, the medium
//! device's durability on the persistence simulator, and device specs.

mod common;

use common::{Rng, TempDir};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use target::{
    DIRECT_ALIGN, Device, DeviceError, Direct, FileDevice, FileOptions, MediumDevice, MemDevice,
    Partition, Spec, open_spec, parse_spec,
};

fn opts(len: u64, direct: Direct) -> FileOptions {
    FileOptions {
        create_len: Some(len),
        direct,
    }
}

/// The open flags of `fd` as /proc says them.
fn fd_flags(fd: i32) -> u32 {
    let s = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).expect("fdinfo");
    let line = s
        .lines()
        .find(|l| l.starts_with("flags:"))
        .expect("a flags line");
    u32::from_str_radix(line.trim_start_matches("flags:").trim(), 8).expect("octal flags")
}

/// Random reads and writes of random offsets, lengths and buffer alignments, checked against
/// a model in memory, then read back through a second handle.
fn random_io(dev: &dyn Device, seed: u64, rounds: usize) -> Vec<u8> {
    let cap = dev.capacity() as usize;
    let mut model = vec![0u8; cap];
    let mut rng = Rng::new(seed);
    for _ in 0..rounds {
        let len = match rng.below(4) {
            0 => rng.below(16) as usize,
            1 => rng.below(9000) as usize,
            2 => DIRECT_ALIGN as usize * (1 + rng.below(4) as usize),
            _ => rng.below(3 << 20) as usize,
        }
        .min(cap);
        let off = if rng.below(3) == 0 {
            rng.below(((cap - len) / 4096) as u64 + 1) * 4096
        } else {
            rng.below((cap - len) as u64 + 1)
        } as usize;
        // A buffer that starts at a random distance from an allocation.
        let shift = rng.below(64) as usize;
        if rng.below(2) == 0 {
            let mut backing = vec![0u8; len + shift];
            let data = rng.bytes(len);
            backing[shift..].copy_from_slice(&data);
            dev.write_at(off as u64, &backing[shift..]).expect("write");
            model[off..off + len].copy_from_slice(&data);
        } else {
            let mut backing = vec![0u8; len + shift];
            dev.read_at(off as u64, &mut backing[shift..])
                .expect("read");
            assert!(
                backing[shift..] == model[off..off + len],
                "read [{off}, +{len}) differs from what was written"
            );
        }
    }
    model
}

#[test]
fn ranges_are_checked_everywhere() {
    let mem: Arc<dyn Device> = Arc::new(MemDevice::new(10_000));
    let mut b = [0u8; 10];
    assert!(matches!(
        mem.read_at(9_995, &mut b),
        Err(DeviceError::Range {
            offset: 9_995,
            len: 10,
            capacity: 10_000
        })
    ));
    assert!(matches!(
        mem.write_at(u64::MAX, &b),
        Err(DeviceError::Range { .. })
    ));
    mem.write_at(9_990, &b).expect("the last 10 bytes");
    assert!(matches!(
        Partition::new(mem.clone(), 5_000, 5_001),
        Err(DeviceError::Range { .. })
    ));
    assert!(matches!(
        Partition::new(mem.clone(), u64::MAX, 2),
        Err(DeviceError::Range { .. })
    ));
    let p = Partition::new(mem.clone(), 1_000, 2_000).expect("inside");
    assert_eq!(p.capacity(), 2_000);
    p.write_at(0, b"first")
        .expect("write at the partition's start");
    p.write_at(1_995, b"last!").expect("write at its end");
    assert!(matches!(
        p.write_at(1_996, b"last!"),
        Err(DeviceError::Range { .. })
    ));
    assert!(matches!(
        p.claim(1_000, 1_001),
        Err(DeviceError::Range { .. })
    ));
    let mut got = [0u8; 5];
    mem.read_at(1_000, &mut got).unwrap();
    assert_eq!(&got, b"first");
    mem.read_at(2_995, &mut got).unwrap();
    assert_eq!(&got, b"last!");
    // A partition of a partition, through the forwarding impls.
    let inner = Partition::new(Arc::new(p), 100, 50).expect("nested");
    inner.write_at(0, b"x").unwrap();
    let mut one = [0u8; 1];
    mem.read_at(1_100, &mut one).unwrap();
    assert_eq!(&one, b"x");
    assert!(
        inner.label().contains("[1000..3000][100..150]"),
        "{}",
        inner.label()
    );
    let boxed: Box<dyn Device> = Box::new(MemDevice::new(8));
    let by_ref: &dyn Device = &*boxed;
    assert_eq!(by_ref.capacity(), 8);
}

#[test]
fn file_device_random_io_matches_a_model_direct_and_buffered() {
    for (base, direct) in [
        ("/tmp", Direct::On),
        ("/dev/shm", Direct::Auto),
        ("/tmp", Direct::Off),
    ] {
        let d = TempDir::under(base);
        let path = d.path().join("dev");
        let dev = FileDevice::open(&path, &opts(8 << 20, direct)).expect("create");
        assert_eq!(dev.capacity(), 8 << 20);
        assert_eq!(dev.block_size(), if dev.direct() { 4096 } else { 512 });
        let model = random_io(&dev, 0x5eed ^ base.len() as u64, 300);
        drop(dev);
        let again = FileDevice::open(&path, &FileOptions::default()).expect("reopen");
        let mut all = vec![0u8; model.len()];
        again.read_at(0, &mut all).unwrap();
        assert!(
            all == model,
            "{base} {direct:?}: the file differs from the model"
        );
    }
}

#[test]
fn created_files_are_sparse_and_extended_not_shrunk() {
    let d = TempDir::under("/tmp");
    let path = d.path().join("sparse");
    let dev = FileDevice::open(&path, &opts(1 << 30, Direct::Auto)).unwrap();
    assert_eq!(dev.capacity(), 1 << 30);
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(&path).unwrap();
    assert!(
        m.blocks() * 512 < 1 << 20,
        "{} blocks allocated",
        m.blocks()
    );
    assert_eq!(m.mode() & 0o777, 0o600);
    drop(dev);
    // Shorter: extended. Longer: kept.
    let dev = FileDevice::open(&path, &opts(2 << 30, Direct::Auto)).unwrap();
    assert_eq!(dev.capacity(), 2 << 30);
    drop(dev);
    let dev = FileDevice::open(&path, &opts(1 << 20, Direct::Auto)).unwrap();
    assert_eq!(dev.capacity(), 2 << 30);
    // Missing without create_len, a directory, an odd size under Direct::On.
    let missing = FileDevice::open(&d.path().join("nope"), &FileOptions::default()).unwrap_err();
    assert!(
        matches!(&missing, DeviceError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    );
    assert!(!d.path().join("nope").exists());
    assert!(matches!(
        FileDevice::open(d.path(), &FileOptions::default()),
        Err(DeviceError::Invalid { .. })
    ));
    let odd = d.path().join("odd");
    assert!(matches!(
        FileDevice::open(&odd, &opts(5000, Direct::On)),
        Err(DeviceError::Refused { .. })
    ));
    assert!(!odd.exists(), "a failed open removes the file it created");
    let odd_auto = FileDevice::open(&odd, &opts(5000, Direct::Auto)).unwrap();
    assert!(
        !odd_auto.direct(),
        "a size not a multiple of 4096 cannot be O_DIRECT"
    );
}

#[test]
fn o_direct_is_really_used_where_the_file_system_takes_it() {
    for base in ["/tmp", "/work", "/dev/shm"] {
        if !Path::new(base).is_dir() {
            continue;
        }
        let d = TempDir::under(base);
        let dev = FileDevice::open(&d.path().join("dev"), &opts(1 << 20, Direct::Auto)).unwrap();
        let flags = fd_flags(dev.file().as_raw_fd());
        assert_ne!(
            flags & libc::O_DSYNC as u32,
            0,
            "{base}: O_DSYNC missing ({flags:o})"
        );
        assert_eq!(
            flags & libc::O_DIRECT as u32 != 0,
            dev.direct(),
            "{base}: direct() says {} but the flags are {flags:o}",
            dev.direct()
        );
        // ext4 (/tmp, /work here) takes O_DIRECT; so does tmpfs since Linux 6.6.
        if base != "/dev/shm" {
            assert!(dev.direct(), "{base}: Auto did not use O_DIRECT");
        }
    }
}

/// A ramfs mount (no O_DIRECT there), unmounted on drop.
struct Ramfs(TempDir);

impl Ramfs {
    fn mount() -> Ramfs {
        let d = TempDir::under("/tmp");
        let st = std::process::Command::new("mount")
            .args(["-t", "ramfs", "ramfs"])
            .arg(d.path())
            .status()
            .expect("run mount");
        assert!(
            st.success(),
            "mount -t ramfs failed (the tests run as root)"
        );
        Ramfs(d)
    }
}

impl Drop for Ramfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.0.path())
            .status();
    }
}

#[test]
fn auto_falls_back_where_the_file_system_refuses_o_direct() {
    let fs = Ramfs::mount();
    let path = fs.0.path().join("dev");
    let on = FileDevice::open(&path, &opts(1 << 20, Direct::On)).unwrap_err();
    assert!(
        matches!(&on, DeviceError::Refused { what } if what.contains("O_DIRECT")),
        "{on}"
    );
    assert!(!path.exists(), "the refused open left its file behind");
    let dev = FileDevice::open(&path, &opts(1 << 20, Direct::Auto)).unwrap();
    assert!(!dev.direct());
    let flags = fd_flags(dev.file().as_raw_fd());
    assert_eq!(flags & libc::O_DIRECT as u32, 0);
    assert_ne!(flags & libc::O_DSYNC as u32, 0);
    random_io(&dev, 7, 100);
}

#[test]
fn claims_conflict_between_handles_and_end_with_them() {
    let d = TempDir::under("/tmp");
    let path = d.path().join("dev");
    let a = FileDevice::open(&path, &opts(1 << 20, Direct::Auto)).unwrap();
    let b = FileDevice::open(&path, &FileOptions::default()).unwrap();
    a.claim(4096, 8192).unwrap();
    a.claim(0, 8192)
        .expect("a handle's own claims never conflict");
    let e = b.claim(12_000, 10).unwrap_err();
    match &e {
        DeviceError::Busy { what } => {
            assert!(what.contains("[12000, 12010)"), "{what}");
            assert!(what.contains(&path.display().to_string()), "{what}");
        }
        other => panic!("expected Busy, got {other}"),
    }
    assert_eq!(e.errno(), libc::EBUSY);
    b.claim(12_288, 4096)
        .expect("the range after a's claim is free");
    b.claim(0, 0).expect("an empty claim claims nothing");
    // Through partitions: offsets shift by the base.
    let a: Arc<dyn Device> = Arc::new(a);
    let pa = Partition::new(a.clone(), 65_536, 65_536).unwrap();
    pa.claim(0, 4096).unwrap();
    assert!(matches!(b.claim(65_536, 1), Err(DeviceError::Busy { .. })));
    drop(pa);
    drop(a);
    b.claim(0, 1 << 20)
        .expect("the claims went with the handle");
    assert!(matches!(
        b.claim(0, (1 << 20) + 1),
        Err(DeviceError::Range { .. })
    ));
}

#[test]
fn a_medium_device_write_is_durable_when_it_returns() {
    use pmem::sim::crash_at_every_fence;
    use std::sync::atomic::{AtomicUsize, Ordering};
    const LEN: usize = 16 << 10;
    let writes: Vec<(u64, Vec<u8>)> = {
        let mut rng = Rng::new(3);
        (0..12)
            .map(|i| {
                let len = 1 + rng.below(700) as usize;
                (rng.below((LEN - len) as u64) + (i % 2), rng.bytes(len))
            })
            .collect()
    };
    let acked = AtomicUsize::new(0);
    let points = crash_at_every_fence(
        &vec![0u8; LEN],
        11,
        |m| {
            acked.store(0, Ordering::SeqCst);
            let dev = MediumDevice::new(m, 0, LEN).unwrap();
            for (i, (off, data)) in writes.iter().enumerate() {
                if dev.write_at(*off, data).is_err() {
                    return;
                }
                acked.store(i + 1, Ordering::SeqCst);
            }
        },
        |image, n| {
            // Replay the acknowledged writes on zeros: the image must hold the last of them at
            // every byte they cover (later, unacknowledged writes may show too).
            let done = acked.load(Ordering::SeqCst);
            let mut expect: Vec<Option<u8>> = vec![None; LEN];
            for (off, data) in &writes[..done] {
                for (k, &b) in data.iter().enumerate() {
                    expect[*off as usize + k] = Some(b);
                }
            }
            let unacked: Vec<&(u64, Vec<u8>)> = writes[done..].iter().collect();
            for (at, want) in expect.iter().enumerate() {
                let Some(want) = want else { continue };
                let overwritten_later = unacked
                    .iter()
                    .any(|(o, d)| (*o as usize..*o as usize + d.len()).contains(&at));
                if !overwritten_later {
                    assert_eq!(
                        image[at], *want,
                        "crash at fence {n}: byte {at} of an acknowledged write lost ({done} acked)"
                    );
                }
            }
        },
    );
    assert!(points >= writes.len() as u64, "only {points} crash points");
}

#[test]
fn medium_device_checks_its_range() {
    let m = pmem::SimMedium::new(4096, pmem::SimConfig::default());
    assert!(matches!(
        MediumDevice::new(&m, 4000, 97),
        Err(DeviceError::Range { .. })
    ));
    let dev = MediumDevice::new(&m, 1000, 96).unwrap();
    assert_eq!(dev.block_size(), 64);
    dev.write_at(90, b"abcdef").unwrap();
    assert!(matches!(
        dev.write_at(91, b"abcdef"),
        Err(DeviceError::Range { .. })
    ));
    let mut b = [0u8; 6];
    pmem::Medium::read(&m, 1090, &mut b);
    assert_eq!(&b, b"abcdef");
}

#[test]
fn specs_parse_and_open() {
    assert_eq!(
        parse_spec("tcp://127.0.0.1:7420/job-1").unwrap(),
        Spec::Remote {
            addr: "127.0.0.1:7420".into(),
            job: "job-1".into()
        }
    );
    for bad in [
        "tcp://127.0.0.1:7420/",
        "tcp://127.0.0.1:7420/../x",
        "tcp://127.0.0.1:7420/..",
        "tcp://127.0.0.1/job",
        "tcp://nojob",
        "pmem:",
        "",
    ] {
        assert!(
            matches!(parse_spec(bad), Err(DeviceError::Invalid { .. })),
            "{bad:?} accepted"
        );
    }
    let long = format!("tcp://h:1/{}", "a".repeat(65));
    assert!(parse_spec(&long).is_err());
    assert!(parse_spec(&format!("tcp://h:1/{}", "a".repeat(64))).is_ok());
    let d = TempDir::under("/dev/shm");
    let f = d.path().join("plain");
    let dev = open_spec(f.to_str().unwrap(), Some(1 << 20)).unwrap();
    assert_eq!(dev.capacity(), 1 << 20);
    dev.write_at(5, b"hello").unwrap();
    drop(dev);
    let p = d.path().join("pm");
    let spec = format!("pmem:{}", p.display());
    assert!(
        open_spec(&spec, None).is_err(),
        "a missing pmem file without a size"
    );
    let dev = open_spec(&spec, Some(1 << 20)).unwrap();
    assert_eq!(dev.capacity(), 1 << 20);
    assert_eq!(dev.block_size(), 64);
    dev.write_at(100, b"pm!").unwrap();
    dev.claim(0, 4096).unwrap();
    // Claims are OFD locks on the mapped file: a file handle sees them.
    let other = FileDevice::open(&p, &FileOptions::default()).unwrap();
    assert!(matches!(other.claim(0, 1), Err(DeviceError::Busy { .. })));
    drop(dev);
    let dev = open_spec(&spec, None).unwrap();
    let mut b = [0u8; 3];
    dev.read_at(100, &mut b).unwrap();
    assert_eq!(&b, b"pm!");
    // Nothing listens on port 1.
    let e = open_spec("tcp://127.0.0.1:1/job", Some(1 << 20)).unwrap_err();
    assert!(matches!(e, DeviceError::Io { .. }), "{e}");
}

#[test]
fn threads_sharing_a_direct_handle_do_not_undo_each_others_writes() {
    // Four threads rewrite their own 250-byte pieces of the same two 4 KiB blocks (so each
    // write reads, modifies and writes blocks the others are rewriting too), and write whole
    // aligned blocks of their own; in the end every piece holds its thread's last write.
    let d = TempDir::under("/dev/shm");
    let dev =
        Arc::new(FileDevice::open(&d.path().join("dev"), &opts(8 << 20, Direct::Auto)).unwrap());
    // tmpfs takes O_DIRECT since Linux 6.6; the test needs it (the bounce path).
    assert!(dev.direct());
    const ROUNDS: usize = 20_000;
    const SLOTS: usize = 8;
    let piece = |t: usize, i: usize| vec![(t * 60 + i % 59) as u8 + 1; 250];
    let at = |t: usize, i: usize| ((i % SLOTS) * 1000 + t * 250) as u64;
    let block_at = |t: usize, i: usize| ((1 << 20) + (t * ROUNDS + i) / 100 * 4096) as u64;
    let start = Arc::new(std::sync::Barrier::new(4));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let dev = dev.clone();
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                // Only this thread writes its slots: reading one back must always give what
                // this thread last wrote there.
                let mut last: [Option<usize>; SLOTS] = [None; SLOTS];
                let mut undone = 0;
                let mut back = vec![0u8; 250];
                for i in 0..ROUNDS {
                    dev.write_at(at(t, i), &piece(t, i)).unwrap();
                    last[i % SLOTS] = Some(i);
                    if let Some(j) = last[(i + 1) % SLOTS] {
                        dev.read_at(at(t, j), &mut back).unwrap();
                        if back != piece(t, j) {
                            undone += 1;
                        }
                    }
                    if i % 100 == 0 {
                        dev.write_at(block_at(t, i), &vec![t as u8 + 1; 4096])
                            .unwrap();
                    }
                }
                undone
            })
        })
        .collect();
    for (t, th) in threads.into_iter().enumerate() {
        let undone = th.join().unwrap();
        assert_eq!(undone, 0, "thread {t} saw {undone} of its writes undone");
    }
    let mut got = vec![0u8; 250];
    let mut block = vec![0u8; 4096];
    for t in 0..4 {
        for i in ROUNDS - SLOTS..ROUNDS {
            dev.read_at(at(t, i), &mut got).unwrap();
            assert!(
                got == piece(t, i),
                "thread {t}: its last write of slot {} was undone",
                i % SLOTS
            );
        }
        for i in (0..ROUNDS).step_by(100) {
            dev.read_at(block_at(t, i), &mut block).unwrap();
            assert!(
                block.iter().all(|&b| b == t as u8 + 1),
                "thread {t} block {i}"
            );
        }
    }
}
