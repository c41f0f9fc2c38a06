//! kill -9 of a checkpoint writer in the middle of its loop: a later process finds every file
//! whose fsync had returned intact. And fork(): a child cannot use the parent's namespace.

mod common;
use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn kill_9_mid_checkpoint_keeps_every_fsynced_file() {
    let s = Scratch::new("crash");
    let ckpt = s.compile("ckpt");
    ok(s.shim(&mut Command::new("mkdir")).arg(s.cr.join("run")));
    const SIZE: &str = "200003";
    let mut child = s
        .shim(&mut Command::new(&ckpt))
        .arg("loop")
        .arg(s.cr.join("run"))
        .arg(SIZE)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn writer");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut last: Option<u64> = None;
    for line in lines.by_ref() {
        let line = line.expect("line");
        let k: u64 = line
            .strip_prefix("synced ")
            .and_then(|n| n.parse().ok())
            .expect("synced K");
        last = Some(k);
        if k >= 12 {
            break;
        }
    }
    child.kill().expect("kill -9"); // SIGKILL, in the middle of the next file
    // What it printed before dying was also synced.
    for line in lines.map_while(Result::ok) {
        if let Some(k) = line.strip_prefix("synced ").and_then(|n| n.parse().ok()) {
            last = Some(k);
        }
    }
    let status = child.wait().expect("wait");
    assert!(!status.success(), "the writer was killed: {status:?}");
    let last = last.expect("the writer synced files before it was killed");
    assert!(last >= 12, "the writer stopped early at {last}");
    let out = ok(s
        .shim(&mut Command::new(&ckpt))
        .arg("check")
        .arg(s.cr.join("run"))
        .arg(last.to_string())
        .arg(SIZE));
    assert_eq!(out.trim(), format!("verified {} files", last + 1));
}

#[test]
fn a_forked_child_gets_ebusy_and_the_parent_goes_on() {
    let s = Scratch::new("fork");
    let prog = s.compile("fork");
    let out = ok(s.shim(&mut Command::new(&prog)).arg(&s.cr));
    let want = "parent open: ok
parent write: 7
ioctl FIONREAD on our fd: -1 Bad file descriptor
writable shared mmap of our file: No such device
child write inherited: -1 Device or resource busy
child open: -1 Device or resource busy
child stat: -1 Device or resource busy
child close inherited: 0
parent write after child: 5
parent pread: 12 before after
child's file exists: No such file or directory
parent close: 0
";
    assert_eq!(out, want);
}
