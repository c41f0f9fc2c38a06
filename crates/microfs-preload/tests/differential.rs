//! Every intercepted call against the same call on a kernel file system: tests/programs/calls.c
//! runs once on a kernel directory without the shim and once on the checkpoint directory under
//! the shim with a fresh device; the transcripts (results, errno names, contents, sizes, modes,
//! explicitly set times) must be equal.

mod common;
use common::*;
use std::process::Command;

#[test]
fn every_intercepted_call_behaves_as_on_the_kernel() {
    let s = Scratch::new("diff");
    let prog = s.compile("calls");
    let kernel = ok(Command::new(&prog).arg(&s.k));
    let shim = ok(s.shim(&mut Command::new(&prog)).arg(&s.cr));
    assert!(
        kernel.ends_with("== end\n"),
        "the program did not finish:\n{kernel}"
    );
    assert!(
        kernel.lines().count() > 250,
        "transcript too short:\n{kernel}"
    );
    for (i, (k, m)) in kernel.lines().zip(shim.lines()).enumerate() {
        assert_eq!(
            k,
            m,
            "line {} differs (kernel, then shim)\nfull shim transcript:\n{shim}",
            i + 1
        );
    }
    assert_eq!(
        kernel.lines().count(),
        shim.lines().count(),
        "shim transcript:\n{shim}"
    );
    // Nothing reached the kernel's file system under the checkpoint directory.
    assert!(
        !s.cr.exists(),
        "{} was created on the kernel's file system",
        s.cr.display()
    );
    // The device holds the namespace: a second process sees what the first left.
    let listing = ok(s.shim(&mut Command::new("ls")).arg(&s.cr));
    let names: Vec<&str> = listing.lines().collect();
    let mut want: Vec<String> = std::fs::read_dir(&s.k)
        .expect("kernel dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    want.sort();
    assert!(want.len() > 3, "{want:?}");
    assert_eq!(
        names, want,
        "ls of the checkpoint directory in a later process"
    );
}
