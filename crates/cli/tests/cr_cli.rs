//! `kavach cr ls|cat|export|check` on devices the checkpoint/restart runtime wrote (through
//! `microfs::instance`, as the LD_PRELOAD shim does): listings, byte-identical copies out,
//! refusals, damage found (exit 1), and the device never changed by any of them.

mod common;

use common::{Scratch, assert_code, json, kavach, stderr, stdout};
use microfs::device::Device;
use microfs::instance::{self, Config};
use std::collections::HashMap;
use std::sync::Arc;

fn config(dev: &str, dir: &str, partition: u32, parts: u32) -> Config {
    let vars: HashMap<&str, String> = [
        ("KAVACH_CR_DIR", dir.to_string()),
        ("KAVACH_CR_DEVICE", dev.to_string()),
        ("KAVACH_CR_SIZE", "64M".to_string()),
        ("KAVACH_CR_PARTITION", partition.to_string()),
        ("KAVACH_CR_PARTS", parts.to_string()),
        ("KAVACH_CR_JOB", "jobA".to_string()),
        ("KAVACH_CR_EPOCH", "7".to_string()),
    ]
    .into_iter()
    .collect();
    let mut c = Config::from_vars(|k| vars.get(k).cloned())
        .unwrap()
        .unwrap();
    c.fs.background_checkpoint = false;
    c
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

/// A 2-partition device: rank 0 with ckpt/rank0.dat (300 KB) and ckpt/meta/info.txt, rank 1
/// with rank1.dat (100 KB). Closed cleanly unless `crash_rank1`.
fn device(s: &Scratch, crash_rank1: bool) -> String {
    let dev = s.path("job.dev");
    let dir = s.path("ckpt-dir");
    let (a, _) = instance::open(&config(&dev, &dir, 0, 2)).unwrap();
    a.mkdir("ckpt", 0o755).unwrap();
    a.mkdir("ckpt/meta", 0o755).unwrap();
    let f = a.create("ckpt/rank0.dat", 0o644, true, false).unwrap();
    for (k, c) in data(300_000, 1).chunks(32 << 10).enumerate() {
        a.write_at(f, (k * (32 << 10)) as u64, c).unwrap();
    }
    let g = a.create("ckpt/meta/info.txt", 0o644, true, false).unwrap();
    a.write_at(g, 0, b"step 10\n").unwrap();
    a.close().unwrap();
    let (b, _) = instance::open(&config(&dev, &dir, 1, 2)).unwrap();
    let h = b.create("rank1.dat", 0o600, true, false).unwrap();
    b.write_at(h, 0, &data(100_000, 2)).unwrap();
    if crash_rank1 {
        drop(b);
    } else {
        b.close().unwrap();
    }
    dev
}

fn bytes(p: &str) -> Vec<u8> {
    std::fs::read(p).unwrap()
}

#[test]
fn ls_cat_export_check_a_clean_device() {
    let s = Scratch::new("clean");
    let dev = device(&s, false);
    let before = bytes(&dev);

    let o = kavach(&["cr", "ls", &dev]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("job jobA, 2 partitions"), "{out}");
    assert!(
        out.contains("partition 0") && out.contains("rank 0, epoch 7, 2 files, 300008 bytes"),
        "{out}"
    );
    assert!(
        out.contains("ckpt/rank0.dat  300000") && out.contains("rank1.dat  100000"),
        "{out}"
    );
    let o = kavach(&["cr", "ls", "-l", &dev, "--partition", "1"]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("-0600       100000"), "{}", stdout(&o));
    let o = kavach(&["cr", "ls", &dev, "--json"]);
    assert_code(&o, 0);
    let j = json(&o);
    assert_eq!(j["namespaces"].as_array().unwrap().len(), 2);
    assert_eq!(j["namespaces"][1]["rank"], 1);

    let o = kavach(&["cr", "cat", &dev, "--partition", "0", "ckpt/rank0.dat"]);
    assert_code(&o, 0);
    assert!(o.stdout == data(300_000, 1), "cat is not byte-identical");
    // Several partitions need --partition; a missing path or a directory is refused.
    assert_code(&kavach(&["cr", "cat", &dev, "rank1.dat"]), 2);
    assert_code(&kavach(&["cr", "cat", &dev, "--partition", "1", "nope"]), 2);
    assert_code(&kavach(&["cr", "cat", &dev, "--partition", "0", "ckpt"]), 2);
    assert_code(&kavach(&["cr", "cat", &dev, "--partition", "5", "x"]), 2);

    let out_dir = s.path("out");
    let o = kavach(&["cr", "export", &dev, &out_dir]);
    assert_code(&o, 0);
    assert_eq!(
        bytes(&format!("{out_dir}/part-0/ckpt/rank0.dat")),
        data(300_000, 1)
    );
    assert_eq!(
        bytes(&format!("{out_dir}/part-0/ckpt/meta/info.txt")),
        b"step 10\n"
    );
    assert_eq!(
        bytes(&format!("{out_dir}/part-1/rank1.dat")),
        data(100_000, 2)
    );
    // Again: refused (files exist), nothing changed; --force overwrites.
    std::fs::write(format!("{out_dir}/part-1/rank1.dat"), b"mine").unwrap();
    let o = kavach(&["cr", "export", &dev, &out_dir]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("--force"), "{}", stderr(&o));
    assert_eq!(bytes(&format!("{out_dir}/part-1/rank1.dat")), b"mine");
    assert_code(&kavach(&["cr", "export", &dev, &out_dir, "--force"]), 0);
    assert_eq!(
        bytes(&format!("{out_dir}/part-1/rank1.dat")),
        data(100_000, 2)
    );
    // One file of one partition.
    let one = s.path("one");
    assert_code(
        &kavach(&[
            "cr",
            "export",
            &dev,
            &one,
            "--partition",
            "0",
            "--path",
            "ckpt/meta",
        ]),
        0,
    );
    assert_eq!(bytes(&format!("{one}/info.txt")), b"step 10\n");

    let o = kavach(&["cr", "check", &dev]);
    assert_code(&o, 0);
    assert!(
        stdout(&o).contains("partition 1: ok: 1 files"),
        "{}",
        stdout(&o)
    );
    assert!(
        bytes(&dev) == before,
        "a kavach cr command changed the device"
    );
}

#[test]
fn a_namespace_left_open_by_a_crash_is_read_without_writing() {
    let s = Scratch::new("crashed");
    let dev = device(&s, true);
    let before = bytes(&dev);
    let o = kavach(&["cr", "ls", &dev]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("not closed cleanly"), "{}", stdout(&o));
    let o = kavach(&["cr", "cat", &dev, "--partition", "1", "rank1.dat"]);
    assert_code(&o, 0);
    assert!(o.stdout == data(100_000, 2));
    assert_code(&kavach(&["cr", "check", &dev]), 0);
    assert!(
        bytes(&dev) == before,
        "reading a crashed namespace wrote to the device"
    );
}

/// Flip bytes at `at` (a device offset).
fn flip(dev: &str, at: u64, n: usize) {
    let mut b = bytes(dev);
    for x in &mut b[at as usize..at as usize + n] {
        *x ^= 0x5a;
    }
    std::fs::write(dev, b).unwrap();
}

/// Where things are: (partition base, superblock in force) of `partition`.
fn layout_of(dev: &str, partition: u32) -> (u64, microfs::layout::Superblock) {
    let d = target::open_spec(dev, None).unwrap();
    let l = microfs::label::read(d.as_ref()).unwrap().unwrap();
    let (base, len) = l.partition(partition);
    let p: Arc<dyn Device> = Arc::new(microfs::device::Partition::new(d, base, len).unwrap());
    let (fs, _) = microfs::Fs::open_read_only(p, &microfs::FsOptions::default()).unwrap();
    (base, fs.superblock())
}

#[test]
fn damage_is_found_named_and_left_alone() {
    let s = Scratch::new("damage");
    let dev = device(&s, false);
    // 1. The checkpoint of partition 1: the superblock's CRC of it no longer matches.
    let (base, sb) = layout_of(&dev, 1);
    flip(
        &dev,
        base + sb.slot_offsets[sb.active_slot as usize] + 40,
        2,
    );
    let before = bytes(&dev);
    let o = kavach(&["cr", "check", &dev]);
    assert_code(&o, 1);
    let out = stdout(&o);
    assert!(out.contains("partition 0: ok"), "{out}");
    assert!(
        out.contains("partition 1: DAMAGE: metadata checkpoint") && out.contains("expected 0x"),
        "{out}"
    );
    let o = kavach(&["cr", "check", &dev, "--json"]);
    assert_code(&o, 1);
    assert_eq!(json(&o)["damaged"], true);
    // ls still lists the healthy partition and says the other is damaged.
    let o = kavach(&["cr", "ls", &dev]);
    assert_code(&o, 0);
    assert!(
        stdout(&o).contains("damaged") && stdout(&o).contains("ckpt/rank0.dat"),
        "{}",
        stdout(&o)
    );
    assert!(
        bytes(&dev) == before,
        "check or ls changed a damaged device"
    );

    // 2. A directory file of partition 0 (the root's first hugeblock holds its entries).
    let s2 = Scratch::new("damage-dir");
    let dev = device(&s2, false);
    let (base, sb) = layout_of(&dev, 0);
    // The root directory's file was the first hugeblock taken: block 0.
    flip(&dev, base + sb.data_offset + 2, 1);
    let before = bytes(&dev);
    let o = kavach(&["cr", "check", &dev]);
    assert_code(&o, 1);
    assert!(
        stdout(&o).contains("DAMAGE: directory file of inode 1"),
        "{}",
        stdout(&o)
    );
    assert!(bytes(&dev) == before);

    // 3. The label: nothing can be located; damage, exit 1.
    flip(&dev, 20, 1);
    let o = kavach(&["cr", "check", &dev]);
    assert_code(&o, 1);
    assert!(stdout(&o).contains("device label"), "{}", stdout(&o));
    assert_code(&kavach(&["cr", "ls", &dev]), 2);
}

#[test]
fn help_has_examples() {
    for sub in ["ls", "cat", "export", "check"] {
        let o = kavach(&["cr", sub, "--help"]);
        assert_code(&o, 0);
        assert!(
            stdout(&o).contains("Examples:"),
            "cr {sub} --help: {}",
            stdout(&o)
        );
    }
}

/// A namespace on a remote target (`kavach target serve`), read back with `kavach cr`.
#[test]
fn a_namespace_on_a_remote_target() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let s = Scratch::new("remote");
    let dir = s.path("served");
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kavach"))
        .args(["target", "serve", "--dir", &dir, "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let addr = first
        .split("listening on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("{first:?}"))
        .to_string();
    let spec = format!("tcp://{addr}/jobR");
    let mut c = config(&spec, &s.path("ck"), 0, 1);
    c.partition = None;
    c.parts = None;
    let (fs, rec) = instance::open(&c).unwrap();
    assert!(rec.formatted);
    let f = fs.create("rank0.ckpt", 0o644, true, false).unwrap();
    for (k, piece) in data(200_000, 9).chunks(32 << 10).enumerate() {
        fs.write_at(f, (k * (32 << 10)) as u64, piece).unwrap();
    }
    fs.close().unwrap();
    let o = kavach(&["cr", "cat", &spec, "rank0.ckpt"]);
    assert_code(&o, 0);
    assert!(
        o.stdout == data(200_000, 9),
        "remote cat is not byte-identical"
    );
    let o = kavach(&["cr", "check", &spec]);
    assert_code(&o, 0);
    // Reopened by a later process: the same namespace.
    let (fs, rec) = instance::open(&c).unwrap();
    assert!(!rec.formatted && rec.clean);
    assert_eq!(
        fs.stat(fs.lookup("rank0.ckpt").unwrap()).unwrap().size,
        200_000
    );
    drop(fs);
    let _ = child.kill();
    let _ = child.wait();
}

/// `dir:KAVACH_CR_DIR` finds the default device of a checkpoint directory as the runtime does; a
/// directory nothing was written under is named in the error (exit 2).
#[test]
fn dir_finds_the_default_device() {
    let s = Scratch::new("bydir");
    let dir = s.path("ckpt-by-dir");
    let dev = Config::default_device(std::path::Path::new(&dir));
    let _ = std::fs::remove_file(&dev);
    let o = kavach(&["cr", "ls", &format!("dir:{dir}")]);
    assert_code(&o, 2);
    assert!(
        stderr(&o).contains("no checkpoint device for"),
        "{}",
        stderr(&o)
    );
    assert!(!std::path::Path::new(&dev).exists());
    let mut c = config(&dev, &dir, 0, 1);
    c.partition = None;
    c.parts = None;
    let (fs, _) = instance::open(&c).unwrap();
    let ino = fs.create("found.txt", 0o644, true, false).unwrap();
    fs.write_at(ino, 0, b"by dir").unwrap();
    fs.close().unwrap();
    let o = kavach(&["cr", "cat", &format!("dir:{dir}"), "found.txt"]);
    let _ = std::fs::remove_file(&dev);
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "by dir");
}
