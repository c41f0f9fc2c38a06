//! A damaged device never makes microfs panic: bytes flipped anywhere in the metadata (the
//! superblocks, the write-extent slot, the log, the checkpoint, directory files) give an error
//! naming the damage, or a namespace that `check`, listing and reading handle.

use std::sync::Arc;

use microfs::device::{Device, MemDevice};
use microfs::{Fs, FsOptions, Kind, NamespaceId};

fn opts() -> FsOptions {
    FsOptions {
        hugeblock: 4096,
        log_bytes: 64 << 10,
        background_checkpoint: false,
        ..FsOptions::default()
    }
}

/// A namespace with a checkpoint, records after it, and an open write run.
fn image() -> (Vec<u8>, microfs::layout::Superblock) {
    let dev = Arc::new(MemDevice::new(2 << 20));
    let fs = Fs::format(
        dev.clone(),
        &opts(),
        &NamespaceId {
            job: "j".into(),
            rank: 0,
        },
    )
    .unwrap();
    fs.mkdir("d", 0o755).unwrap();
    for i in 0..6 {
        let f = fs.create(&format!("d/f{i}"), 0o644, true, false).unwrap();
        fs.write_at(f, 0, &vec![i as u8; 5000 + i * 999]).unwrap();
    }
    fs.checkpoint().unwrap();
    fs.rename("d/f1", "d/g").unwrap();
    fs.unlink("d/f2").unwrap();
    fs.mkdir("e", 0o700).unwrap();
    let f = fs.create("e/h", 0o644, true, false).unwrap();
    fs.write_at(f, 0, &[7u8; 3000]).unwrap();
    fs.write_at(f, 3000, &[8u8; 3000]).unwrap();
    let sb = fs.superblock();
    drop(fs);
    (dev.snapshot(), sb)
}

fn exercise(fs: &Fs) {
    let _ = fs.check();
    let mut stack = vec![fs.lookup("").unwrap()];
    let mut seen = 0;
    while let Some(d) = stack.pop() {
        seen += 1;
        if seen > 1000 {
            break;
        }
        let Ok(entries) = fs.readdir(d) else { continue };
        for e in entries {
            let Ok(st) = fs.stat(e.ino) else { continue };
            if e.kind == Kind::Dir {
                stack.push(e.ino);
            } else {
                let mut b = vec![0u8; 8192];
                let _ = fs.read_at(e.ino, 0, &mut b);
                let _ = fs.read_at(e.ino, st.size.saturating_sub(10), &mut b);
            }
        }
    }
}

#[test]
fn flipped_bytes_never_panic() {
    let (img, sb) = image();
    let hot: Vec<(u64, u64)> = vec![
        (0, 512),
        (4096, 512),
        (8192, 4096 * 2),
        (sb.log_offset, 8192),
        (sb.slot_offsets[sb.active_slot as usize], sb.checkpoint_len),
        (sb.data_offset, 4096 * 4),
    ];
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut rnd = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m.max(1)
    };
    let (mut opened, mut refused) = (0, 0);
    for round in 0..600 {
        let mut b = img.clone();
        for _ in 0..1 + rnd(4) {
            let (s, n) = hot[rnd(hot.len() as u64) as usize];
            let at = (s + rnd(n)) as usize;
            b[at] ^= 1 << rnd(8);
        }
        let dev = MemDevice::new(b.len());
        dev.write_at(0, &b).unwrap();
        let dev: Arc<dyn Device> = Arc::new(dev);
        match Fs::open_read_only(dev.clone(), &opts()) {
            Ok((fs, _)) => {
                opened += 1;
                exercise(&fs);
            }
            Err(e) => {
                refused += 1;
                assert!(!e.to_string().is_empty(), "round {round}");
            }
        }
        if let Ok((fs, _)) = Fs::open(dev, &opts()) {
            exercise(&fs);
            let _ = fs
                .create("new", 0o644, true, false)
                .and_then(|i| fs.write_at(i, 0, b"x"));
            let _ = fs.checkpoint();
        }
    }
    println!("opened {opened}, refused {refused}");
    assert!(opened > 0 && refused > 0);
}
