//! The shim's edges: without KAVACH_CR_DIR every call passes through to libc unchanged; threads
//! share one namespace; a namespace that cannot be opened, or that another process holds, gives
//! an error (and one message) instead of touching the kernel's file system; a directory of many
//! entries lists completely.

mod common;
use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn without_the_variable_every_call_goes_to_libc() {
    let s = Scratch::new("pass");
    let prog = s.compile("calls");
    let plain = s.k.join("plain");
    let preloaded = s.k.join("preloaded");
    std::fs::create_dir(&plain).unwrap();
    std::fs::create_dir(&preloaded).unwrap();
    let want = ok(Command::new(&prog).arg(&plain));
    let mut c = Command::new(&prog);
    s.shim(&mut c).env_remove("KAVACH_CR_DIR");
    let got = ok(c.arg(&preloaded));
    assert_eq!(want, got);
    assert!(want.ends_with("== end\n"));
    assert!(!s.dev.exists(), "a device was made without KAVACH_CR_DIR");
    same_tree(&plain, &preloaded);
}

#[test]
fn threads_share_the_namespace() {
    let s = Scratch::new("threads");
    let prog = s.compile("threads");
    let w = ok(s
        .shim(&mut Command::new(&prog))
        .arg("write")
        .arg(&s.cr)
        .arg("6"));
    assert_eq!(w.trim(), "6 files verified");
    let r = ok(s
        .shim(&mut Command::new(&prog))
        .arg("verify")
        .arg(&s.cr)
        .arg("6"));
    assert_eq!(r.trim(), "6 files verified");
}

#[test]
fn a_namespace_that_cannot_be_opened_is_an_error_named_once() {
    let s = Scratch::new("noopen");
    let mut c = Command::new("ls");
    s.shim(&mut c)
        .env("KAVACH_CR_DEVICE", s.root.join("no/such/dir/dev"));
    let o = c.arg(&s.cr).arg(s.cr.join("x")).output().expect("ls");
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err.matches("kavach-cr: cannot open the checkpoint namespace")
            .count(),
        1,
        "{err}"
    );
    assert!(!s.cr.exists());
    // A bad setting is named too.
    let mut c = Command::new("ls");
    s.shim(&mut c).env("KAVACH_CR_SIZE", "lots");
    let o = c.arg(&s.cr).output().expect("ls");
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("kavach-cr: "),
        "{o:?}"
    );
}

#[test]
fn a_namespace_held_by_another_process_is_busy() {
    let s = Scratch::new("busy");
    let ckpt = s.compile("ckpt");
    ok(s.shim(&mut Command::new("mkdir")).arg(s.cr.join("run")));
    let mut writer = s
        .shim(&mut Command::new(&ckpt))
        .arg("loop")
        .arg(s.cr.join("run"))
        .arg("4096")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(writer.stdout.take().unwrap()).lines();
    let first = lines.next().expect("a line").expect("read");
    assert_eq!(first, "synced 0");
    let o = s
        .shim(&mut Command::new("ls"))
        .arg(s.cr.join("run"))
        .output()
        .expect("ls");
    writer.kill().expect("kill");
    writer.wait().expect("wait");
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("Device or resource busy"), "{err}");
    // Once the holder is gone, the namespace opens again.
    let o = ok(s.shim(&mut Command::new("ls")).arg(s.cr.join("run")));
    assert!(o.lines().any(|l| l == "step.0"), "{o}");
}

#[test]
fn a_directory_of_many_entries_lists_completely() {
    let s = Scratch::new("many");
    let src = s.k.join("many");
    std::fs::create_dir(&src).unwrap();
    for i in 0..1500 {
        std::fs::write(src.join(format!("entry-{i:05}")), i.to_string()).unwrap();
    }
    ok(s.shim(&mut Command::new("cp"))
        .arg("-r")
        .arg(&src)
        .arg(s.cr.join("many")));
    let listing = ok(s
        .shim(&mut Command::new("ls"))
        .arg("-1")
        .arg(s.cr.join("many")));
    let got: Vec<&str> = listing.lines().collect();
    let want: Vec<String> = (0..1500).map(|i| format!("entry-{i:05}")).collect();
    assert_eq!(got.len(), want.len(), "entries listed");
    assert!(got.iter().zip(&want).all(|(g, w)| g == w), "names differ");
    ok(s.shim(&mut Command::new("rm"))
        .arg("-r")
        .arg(s.cr.join("many")));
    let after = ok(s.shim(&mut Command::new("ls")).arg("-a").arg(&s.cr));
    assert_eq!(after, ".\n..\n", "the namespace root is empty again");
}

/// `df -B1 PATH` under the shim: (size, available) of the namespace.
fn df(s: &Scratch) -> (u64, u64) {
    let out = ok(s.shim(&mut Command::new("df")).arg("-B1").arg(&s.cr));
    let line = out.lines().nth(1).expect("a line after the header");
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(3)
        .map(|x| x.parse().expect("number"))
        .collect();
    (f[0], f[2])
}

#[test]
fn df_reports_the_namespace_s_capacity_and_what_a_write_used() {
    let s = Scratch::new("df");
    let (size, before) = df(&s);
    assert!(
        size > (200 << 20) && size <= 256 << 20,
        "size {size} of a 256 MiB device"
    );
    assert_eq!(before, size, "an empty namespace");
    ok(s.shim(&mut Command::new("dd"))
        .arg("if=/dev/zero")
        .arg(format!("of={}", s.cr.join("f").display()))
        .args(["bs=1M", "count=10", "status=none"]));
    let (size2, after) = df(&s);
    assert_eq!(size2, size);
    assert!(
        before - after >= 10 << 20 && before - after < 11 << 20,
        "{before} -> {after}"
    );
}

/// A process that ends normally closes its namespace: a stream it never closed is flushed
/// into it first, and the next opener finds it closed cleanly (no log to replay).
#[test]
fn a_normal_exit_flushes_streams_and_closes_the_namespace_cleanly() {
    let s = Scratch::new("exit");
    let prog = s.compile("unclosed");
    ok(s.shim(&mut Command::new(&prog)).arg(s.cr.join("u.txt")));
    let dev = target::open_spec(s.dev.to_str().unwrap(), None).expect("device");
    let (fs, recovery) =
        microfs::Fs::open_read_only(dev, &microfs::FsOptions::default()).expect("open");
    assert!(recovery.clean, "{recovery:?}");
    assert_eq!(recovery.records_replayed, 0, "{recovery:?}");
    let ino = fs.lookup("u.txt").expect("u.txt");
    let mut buf = vec![0u8; 8192];
    let n = fs.read_at(ino, 0, &mut buf).expect("read");
    let want: String = (0..100)
        .map(|i| format!("line {i} of a stream never closed\n"))
        .collect();
    assert_eq!(String::from_utf8_lossy(&buf[..n]), want);
}
