//! Sequential write and read throughput of one file through microfs on a FileDevice, against
//! std::fs on the same file system, plus the log records written and coalesced.
//!
//! `cargo run --release -p kavach-microfs --example seqbench -- [DIR] [MiB] [WRITE_KiB]`
//! (defaults: /dev/shm, 64, 32). Each microfs write is durable on return (O_DSYNC device);
//! the std::fs baseline is run twice: plain writes (page cache, not durable), and with
//! O_DSYNC (each write durable, as microfs's).

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Arc;
use std::time::Instant;

use microfs::device::Device;
use microfs::{Fs, FsOptions, NamespaceId};
use target::{Direct, FileDevice, FileOptions};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = args.get(1).cloned().unwrap_or_else(|| "/dev/shm".into());
    let mib: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(64);
    let wkib: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(32);
    let total = mib << 20;
    let chunk = wkib << 10;
    let data: Vec<u8> = (0..chunk).map(|i| (i * 7 + 3) as u8).collect();
    let mb = total as f64 / (1 << 20) as f64;

    for coalesce in [true, false] {
        let path = format!("{dir}/microfs-seqbench-{}.dev", std::process::id());
        let _ = std::fs::remove_file(&path);
        let dev: Arc<dyn Device> = Arc::new(
            FileDevice::open(
                std::path::Path::new(&path),
                &FileOptions {
                    create_len: Some((total + (total / 4) + (64 << 20)) as u64),
                    direct: Direct::Auto,
                },
            )
            .expect("device"),
        );
        let opts = FsOptions {
            coalesce,
            background_checkpoint: false,
            ..FsOptions::default()
        };
        let fs = Fs::format(
            dev,
            &opts,
            &NamespaceId {
                job: "bench".into(),
                rank: 0,
            },
        )
        .expect("format");
        let ino = fs.create("ckpt.dat", 0o644, true, false).unwrap();
        let t = Instant::now();
        let mut off = 0u64;
        while (off as usize) < total {
            fs.write_at(ino, off, &data).unwrap();
            off += chunk as u64;
        }
        fs.fsync(ino).unwrap();
        let w = t.elapsed().as_secs_f64();
        let mut buf = vec![0u8; chunk];
        let t = Instant::now();
        let mut off = 0u64;
        while (off as usize) < total {
            let n = fs.read_at(ino, off, &mut buf).unwrap();
            assert_eq!(&buf[..n], &data[..n]);
            off += n as u64;
        }
        let r = t.elapsed().as_secs_f64();
        let s = fs.stats();
        println!(
            "microfs (coalesce {coalesce}): write {w:.3} s ({:.0} MiB/s), read {r:.3} s ({:.0} MiB/s); writes {}, log records {}, coalesced {}, slot writes {}, checkpoints {}",
            mb / w,
            mb / r,
            s.writes,
            s.records_written,
            s.writes_coalesced,
            s.slot_writes,
            s.checkpoints
        );
        // A crash (no close): recovery replays the log, or applies the open run.
        drop(fs);
        let reopen = |what: &str| {
            let t = Instant::now();
            let dev: Arc<dyn Device> = Arc::new(
                FileDevice::open(
                    std::path::Path::new(&path),
                    &FileOptions {
                        create_len: None,
                        direct: Direct::Auto,
                    },
                )
                .unwrap(),
            );
            let (fs, rec) = Fs::open(dev, &opts).unwrap();
            println!(
                "  recovery {what}: {:.4} s (records replayed {}, runs applied {})",
                t.elapsed().as_secs_f64(),
                rec.records_replayed,
                rec.runs_applied
            );
            fs
        };
        let fs = reopen("after a crash");
        let t = Instant::now();
        fs.close().unwrap();
        println!("  close (checkpoint) {:.4} s", t.elapsed().as_secs_f64());
        drop(reopen("after close"));
        let _ = std::fs::remove_file(&path);
    }

    for dsync in [false, true] {
        let path = format!("{dir}/microfs-seqbench-{}.std", std::process::id());
        let mut oo = std::fs::OpenOptions::new();
        oo.create(true).write(true).truncate(true);
        if dsync {
            oo.custom_flags(libc::O_DSYNC);
        }
        let mut f = oo.open(&path).unwrap();
        let t = Instant::now();
        for _ in 0..total / chunk {
            f.write_all(&data).unwrap();
        }
        f.sync_all().unwrap();
        let w = t.elapsed().as_secs_f64();
        drop(f);
        let mut f = std::fs::File::open(&path).unwrap();
        let mut buf = vec![0u8; chunk];
        let t = Instant::now();
        for _ in 0..total / chunk {
            f.read_exact(&mut buf).unwrap();
        }
        let r = t.elapsed().as_secs_f64();
        println!(
            "std::fs (O_DSYNC {dsync}): write {w:.3} s ({:.0} MiB/s), read {r:.3} s ({:.0} MiB/s)",
            mb / w,
            mb / r
        );
        let _ = std::fs::remove_file(&path);
    }
}
