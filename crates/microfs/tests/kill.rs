//! kill -9 of a writer process mid-checkpoint: a child process writes checkpoint files in
//! steps (create, write in 32 KiB pieces, metadata checkpoint, unlink of the step before last)
//! on a file device and says after each step that it is done; the parent kills it with SIGKILL
//! at some point of a later step, recovers the namespace and checks that every step the child
//! finished is there, whole, the step in flight is a prefix at most, and `check` finds nothing.
//! (A killed process loses nothing in the page cache: this tests the atomicity of the calls at
//! a process crash; power failure is tested on the simulator in `crash.rs`.)

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

use microfs::device::Device;
use microfs::{Fs, FsOptions, NamespaceId};
use target::{Direct, FileDevice, FileOptions};

const STEP_BYTES: usize = 256 << 10;

fn opts() -> FsOptions {
    FsOptions {
        log_bytes: 64 << 10,
        background_checkpoint: true,
        checkpoint_log_fill: 0.2,
        ..FsOptions::default()
    }
}

fn content(step: u64) -> Vec<u8> {
    (0..STEP_BYTES)
        .map(|i| (i as u64 * 31 + step * 7) as u8)
        .collect()
}

fn device(path: &str, create: bool) -> Arc<dyn Device> {
    let o = FileOptions {
        create_len: create.then_some(32 << 20),
        direct: Direct::Auto,
    };
    Arc::new(FileDevice::open(std::path::Path::new(path), &o).unwrap())
}

fn child(path: &str) {
    let fs = Fs::format(
        device(path, true),
        &opts(),
        &NamespaceId {
            job: "kill".into(),
            rank: 0,
        },
    )
    .unwrap();
    fs.mkdir("ckpt", 0o755).unwrap();
    for step in 0u64.. {
        let name = format!("ckpt/step-{step}");
        let ino = fs.create(&name, 0o644, true, false).unwrap();
        fs.opened(ino);
        for (k, piece) in content(step).chunks(32 << 10).enumerate() {
            fs.write_at(ino, (k * (32 << 10)) as u64, piece).unwrap();
        }
        fs.fsync(ino).unwrap();
        fs.closed(ino);
        fs.checkpoint().unwrap();
        if step >= 2 {
            fs.unlink(&format!("ckpt/step-{}", step - 2)).unwrap();
        }
        println!("DONE {step}");
    }
}

#[test]
fn kill_9_mid_checkpoint() {
    if let Ok(path) = std::env::var("MICROFS_KILL_CHILD") {
        child(&path);
        return;
    }
    for (round, kill_after) in [(0u32, 3u64), (1, 5), (2, 8)] {
        let path = format!("/dev/shm/microfs-kill-{}-{round}.dev", std::process::id());
        let _ = std::fs::remove_file(&path);
        let mut c = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "kill_9_mid_checkpoint",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env("MICROFS_KILL_CHILD", &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(c.stdout.take().unwrap()).lines();
        let mut done = None;
        for l in lines.by_ref() {
            let l = l.unwrap();
            if let Some(n) = l.strip_prefix("DONE ") {
                done = Some(n.trim().parse::<u64>().unwrap());
                if done == Some(kill_after) {
                    break;
                }
            }
        }
        // Somewhere in the next step (or the one after).
        std::thread::sleep(std::time::Duration::from_micros(300 * (round as u64 + 1)));
        c.kill().unwrap();
        let _ = c.wait();
        // Steps the child finished before it died.
        for l in lines.map_while(Result::ok) {
            if let Some(n) = l.strip_prefix("DONE ") {
                done = Some(n.trim().parse::<u64>().unwrap());
            }
        }
        let done = done.expect("the child finished no step");
        let (fs, rec) = Fs::open(device(&path, false), &opts()).unwrap();
        // The last step done is there, whole (the one before it too, unless the kill came
        // while the next step unlinked it).
        {
            let step = done;
            let ino = fs
                .lookup(&format!("ckpt/step-{step}"))
                .unwrap_or_else(|e| panic!("step {step} (done {done}, {rec:?}): {e}"));
            let mut b = vec![0u8; STEP_BYTES + 1];
            let n = fs.read_at(ino, 0, &mut b).unwrap();
            assert_eq!(n, STEP_BYTES, "step {step}");
            assert!(b[..n] == content(step)[..], "step {step} content");
        }
        // A step in flight is a prefix of what it would have been.
        for e in fs.readdir(fs.lookup("ckpt").unwrap()).unwrap() {
            let step: u64 = e.name.trim_start_matches("step-").parse().unwrap();
            assert!(
                step + 1 >= done && step <= done + 1,
                "{} with done {done}",
                e.name
            );
            let mut b = vec![0u8; STEP_BYTES + 1];
            let n = fs.read_at(e.ino, 0, &mut b).unwrap();
            assert!(
                n <= STEP_BYTES && b[..n] == content(step)[..n],
                "{}",
                e.name
            );
        }
        let r = fs.check().unwrap();
        assert!(r.findings.is_empty(), "{:?}", r.findings);
        drop(fs);
        let _ = std::fs::remove_file(&path);
    }
}
