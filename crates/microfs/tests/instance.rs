//! The environment, the device label and `instance::open`.

use std::collections::HashMap;
use std::sync::Arc;

use microfs::device::{Device, MemDevice};
use microfs::instance::{self, Config};
use microfs::label;

fn cfg(vars: &[(&str, &str)]) -> microfs::Result<Option<Config>> {
    let m: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::from_vars(|k| m.get(k).cloned())
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("microfs-instance-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn env_parsing() {
    assert!(cfg(&[]).unwrap().is_none());
    let c = cfg(&[("KAVACH_CR_DIR", "/tmp/ck/./a/"), ("KAVACH_CR_EPOCH", "9")])
        .unwrap()
        .unwrap();
    assert_eq!(c.dir, std::path::PathBuf::from("/tmp/ck/a"));
    assert_eq!(
        c.device,
        Config::default_device(std::path::Path::new("/tmp/ck/a"))
    );
    assert_ne!(
        c.device,
        Config::default_device(std::path::Path::new("/tmp/ck/b"))
    );
    assert!(c.device.starts_with("/dev/shm/kavach-cr-") && c.device.ends_with(".dev"));
    assert_eq!(
        (
            c.size,
            c.fs.hugeblock,
            c.job.as_str(),
            c.fs.provenance.epoch
        ),
        (1 << 30, 32768, "cr", 9)
    );
    let c = cfg(&[
        ("KAVACH_CR_DIR", "/x"),
        ("KAVACH_CR_SIZE", "64M"),
        ("KAVACH_CR_HUGEBLOCK", "4k"),
        ("KAVACH_CR_PARTITION", "2"),
        ("KAVACH_CR_PARTS", "4"),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(
        (
            c.size,
            c.fs.hugeblock,
            c.partition,
            c.parts,
            c.fs.provenance.rank
        ),
        (64 << 20, 4096, Some(2), Some(4), 2)
    );
    for (k, v, needle) in [
        ("KAVACH_CR_SIZE", "lots", "KAVACH_CR_SIZE"),
        ("KAVACH_CR_SIZE", "1k", "at least 4M"),
        ("KAVACH_CR_HUGEBLOCK", "3000", "power of two"),
        ("KAVACH_CR_HUGEBLOCK", "2M", "power of two"),
        ("KAVACH_CR_PARTITION", "-1", "whole number"),
        ("KAVACH_CR_PARTS", "0", "KAVACH_CR_PARTS"),
        ("KAVACH_CR_JOB", "a/b", "KAVACH_CR_JOB"),
        ("KAVACH_CR_DEVICE", "", "KAVACH_CR_DEVICE"),
        ("KAVACH_CR_EPOCH", "x", "KAVACH_CR_EPOCH"),
    ] {
        let e = cfg(&[("KAVACH_CR_DIR", "/x"), (k, v)])
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle) && e.contains(v), "{k}={v}: {e}");
    }
    let e = cfg(&[
        ("KAVACH_CR_DIR", "/x"),
        ("KAVACH_CR_PARTITION", "4"),
        ("KAVACH_CR_PARTS", "4"),
    ])
    .unwrap_err();
    assert!(e.to_string().contains("below"), "{e}");
    assert!(cfg(&[("KAVACH_CR_DIR", "")]).is_err());
}

#[test]
fn label_round_trip_and_damage() {
    let dev = MemDevice::new(64 << 20);
    assert_eq!(label::read(&dev).unwrap(), None);
    let l = label::write(&dev, "job", 3).unwrap();
    assert_eq!(l.segment, (63 << 20) / 3 / (1 << 20) * (1 << 20));
    assert_eq!(l.partition(2), (l.first + 2 * l.segment, l.segment));
    assert!(l.partition(2).0 + l.segment <= 64 << 20);
    assert_eq!(label::read(&dev).unwrap(), Some(l));
    dev.write_at(20, &[0xee]).unwrap();
    assert!(matches!(
        label::read(&dev),
        Err(microfs::FsError::Damage { .. })
    ));
    assert!(label::write(&MemDevice::new(4 << 20), "j", 8).is_err());
    assert!(label::write(&dev, "j", 0).is_err());
}

#[test]
fn open_makes_then_reopens_a_namespace_per_partition() {
    let d = scratch("parts");
    let dev = d.join("shared.dev");
    let mk = |p: &str| {
        cfg(&[
            ("KAVACH_CR_DIR", d.to_str().unwrap()),
            ("KAVACH_CR_DEVICE", dev.to_str().unwrap()),
            ("KAVACH_CR_SIZE", "64M"),
            ("KAVACH_CR_PARTITION", p),
            ("KAVACH_CR_PARTS", "2"),
            ("KAVACH_CR_JOB", "jobA"),
        ])
        .unwrap()
        .unwrap()
    };
    let (a, ra) = instance::open(&mk("0")).unwrap();
    assert!(ra.formatted);
    // The same partition again is claimed by the first handle.
    assert_eq!(instance::open(&mk("0")).unwrap_err().errno(), libc::EBUSY);
    let (b, rb) = instance::open(&mk("1")).unwrap();
    assert!(rb.formatted);
    let ia = a.create("a", 0o644, true, false).unwrap();
    a.write_at(ia, 0, b"rank0").unwrap();
    b.create("b", 0o644, true, false).unwrap();
    assert!(b.lookup("a").is_err(), "namespaces are private");
    assert_eq!(a.superblock().rank, 0);
    assert_eq!(b.superblock().rank, 1);
    a.close().unwrap();
    b.close().unwrap();
    let (a, ra) = instance::open(&mk("0")).unwrap();
    assert!(!ra.formatted && ra.clean);
    let mut buf = [0u8; 5];
    a.read_at(a.lookup("a").unwrap(), 0, &mut buf).unwrap();
    assert_eq!(&buf, b"rank0");
    drop(a);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_device_that_is_not_blank_is_never_cut_or_formatted() {
    let d = scratch("notblank");
    let dev = d.join("other.dev");
    let junk: Vec<u8> = (0..(8u32 << 20))
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(&dev, &junk).unwrap();
    let base = [
        ("KAVACH_CR_DIR", d.to_str().unwrap()),
        ("KAVACH_CR_DEVICE", dev.to_str().unwrap()),
        ("KAVACH_CR_SIZE", "8M"),
    ];
    let with_parts: Vec<(&str, &str)> = base
        .iter()
        .copied()
        .chain([("KAVACH_CR_PARTS", "2"), ("KAVACH_CR_PARTITION", "0")])
        .collect();
    assert!(instance::open(&cfg(&with_parts).unwrap().unwrap()).is_err());
    let e = instance::open(&cfg(&base).unwrap().unwrap()).unwrap_err();
    assert!(matches!(e, microfs::FsError::Damage { .. }), "{e}");
    assert!(
        std::fs::read(&dev).unwrap() == junk,
        "a foreign device was written"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn whole_device_without_partitions() {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(16 << 20));
    let c = Config {
        device: "unused".into(),
        ..cfg(&[("KAVACH_CR_DIR", "/x")]).unwrap().unwrap()
    };
    assert_eq!(
        instance::locate(dev.as_ref(), &c).unwrap(),
        (0, 16 << 20, 0)
    );
}

/// KAVACH_CR_SIZE sizes a device made now; a later run with another size (or the default)
/// opens the existing device as it is and does not grow the file.
#[test]
fn an_existing_device_keeps_its_size() {
    let d = scratch("keepsize");
    let dev = d.join("d.dev");
    let dev_s = dev.to_str().unwrap();
    let first = cfg(&[
        ("KAVACH_CR_DIR", "/ck"),
        ("KAVACH_CR_DEVICE", dev_s),
        ("KAVACH_CR_SIZE", "8M"),
    ])
    .unwrap()
    .unwrap();
    let (fs, rec) = instance::open(&first).unwrap();
    assert!(rec.formatted);
    let ino = fs.create("f", 0o644, true, false).unwrap();
    fs.write_at(ino, 0, b"kept").unwrap();
    fs.close().unwrap();
    assert_eq!(std::fs::metadata(&dev).unwrap().len(), 8 << 20);
    let later = cfg(&[("KAVACH_CR_DIR", "/ck"), ("KAVACH_CR_DEVICE", dev_s)])
        .unwrap()
        .unwrap();
    assert!(later.size > 8 << 20);
    let (fs, rec) = instance::open(&later).unwrap();
    assert!(!rec.formatted);
    let mut got = [0u8; 4];
    let ino = fs.lookup("f").unwrap();
    assert_eq!(fs.read_at(ino, 0, &mut got).unwrap(), 4);
    assert_eq!(&got, b"kept");
    fs.close().unwrap();
    assert_eq!(std::fs::metadata(&dev).unwrap().len(), 8 << 20);
    let _ = std::fs::remove_dir_all(&d);
}

/// Log records name the writer the caller gave (the world rank under MPI), not the partition
/// index; KAVACH_CR_COALESCE is read from the environment.
#[test]
fn records_name_the_callers_writer() {
    let d = scratch("writer");
    let dev = d.join("w.dev");
    let mut c = cfg(&[
        ("KAVACH_CR_DIR", "/ck"),
        ("KAVACH_CR_DEVICE", dev.to_str().unwrap()),
        ("KAVACH_CR_SIZE", "8M"),
        ("KAVACH_CR_EPOCH", "5"),
        ("KAVACH_CR_COALESCE", "0"),
    ])
    .unwrap()
    .unwrap();
    assert!(!c.fs.coalesce);
    assert!(cfg(&[("KAVACH_CR_DIR", "/ck"), ("KAVACH_CR_COALESCE", "yes")]).is_err());
    c.fs.provenance.rank = 7;
    c.fs.background_checkpoint = false;
    let (fs, _) = instance::open(&c).unwrap();
    let ino = fs.create("f", 0o644, true, false).unwrap();
    fs.write_at(ino, 0, b"seven").unwrap();
    drop(fs); // no close: the next open replays the log
    let spec = dev.to_str().unwrap();
    let (_, rec) = microfs::Fs::open_read_only(
        target::open_spec(spec, None).unwrap(),
        &microfs::FsOptions::default(),
    )
    .unwrap();
    assert!(rec.records_replayed > 0, "{rec:?}");
    assert!(
        rec.writers.iter().all(|w| w.rank == 7 && w.epoch == 5),
        "{rec:?}"
    );
    let _ = std::fs::remove_dir_all(&d);
}
