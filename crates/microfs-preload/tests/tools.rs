//! Unmodified tools round-trip through the shim byte for byte: cp -r in and out, tar c into and
//! x out of the checkpoint directory (and x of a kernel tar into it), dd with bs/seek/count/skip,
//! cmp, and a C checkpoint writer read back by a later process (a restart). Every command is its
//! own process: what one writes, the next finds through the device alone.

mod common;
use common::*;
use std::process::Command;

#[test]
fn cp_tar_dd_cmp_round_trip() {
    let s = Scratch::new("tools");
    let src = s.k.join("src");
    make_tree(&src);
    let cr = |rel: &str| s.cr.join(rel);

    // cp -r in and out.
    ok(s.shim(&mut Command::new("cp"))
        .arg("-r")
        .arg(&src)
        .arg(cr("tree")));
    ok(s.shim(&mut Command::new("cp"))
        .arg("-r")
        .arg(cr("tree"))
        .arg(s.k.join("out1")));
    same_tree(&src, &s.k.join("out1"));

    // cmp through the shim: equal files exit 0, different ones 1.
    ok(s.shim(&mut Command::new("cmp"))
        .arg(src.join("a/b/f7.bin"))
        .arg(cr("tree/a/b/f7.bin")));
    let st = s
        .shim(&mut Command::new("cmp"))
        .arg(src.join("a/b/f7.bin"))
        .arg(cr("tree/a/b/c/f8.bin"))
        .output()
        .expect("cmp");
    assert_eq!(st.status.code(), Some(1), "cmp of different files: {st:?}");

    // tar c into the checkpoint directory, tar x out of it.
    ok(s.shim(&mut Command::new("tar"))
        .arg("cf")
        .arg(cr("t.tar"))
        .arg("-C")
        .arg(&src)
        .arg("."));
    std::fs::create_dir(s.k.join("out2")).expect("mkdir");
    ok(s.shim(&mut Command::new("tar"))
        .arg("xf")
        .arg(cr("t.tar"))
        .arg("-C")
        .arg(s.k.join("out2")));
    same_tree(&src, &s.k.join("out2"));

    // A kernel tar extracted into the checkpoint directory, archived again from there.
    ok(Command::new("tar")
        .arg("cf")
        .arg(s.k.join("k.tar"))
        .arg("-C")
        .arg(&src)
        .arg("."));
    ok(s.shim(&mut Command::new("mkdir")).arg(cr("x")));
    ok(s.shim(&mut Command::new("tar"))
        .arg("xf")
        .arg(s.k.join("k.tar"))
        .arg("-C")
        .arg(cr("x")));
    ok(s.shim(&mut Command::new("tar"))
        .arg("cf")
        .arg(s.k.join("back.tar"))
        .arg("-C")
        .arg(cr("x"))
        .arg("."));
    std::fs::create_dir(s.k.join("out3")).expect("mkdir");
    ok(Command::new("tar")
        .arg("xf")
        .arg(s.k.join("back.tar"))
        .arg("-C")
        .arg(s.k.join("out3")));
    same_tree(&src, &s.k.join("out3"));

    // dd: the same writes to a kernel file and to ours, then cmp and a partial read back.
    let big = src.join("z/f9.bin");
    let patch = s.k.join("patch");
    std::fs::write(&patch, bytes(99, 50_000)).expect("write");
    for target in [s.k.join("dd"), cr("dd")] {
        let shim = target.starts_with(&s.cr);
        let run = |args: &[String]| {
            let mut c = Command::new("dd");
            if shim {
                s.shim(&mut c);
            }
            ok(c.args(args).arg("status=none"))
        };
        run(&[
            format!("if={}", big.display()),
            format!("of={}", target.display()),
            "bs=64K".into(),
        ]);
        run(&[
            format!("if={}", patch.display()),
            format!("of={}", target.display()),
            "bs=4096".into(),
            "seek=3".into(),
            "count=5".into(),
            "conv=notrunc".into(),
        ]);
        run(&[
            format!("if={}", patch.display()),
            format!("of={}", target.display()),
            "bs=1000".into(),
            "seek=1200".into(),
        ]);
        let part = s.k.join(if shim { "part.shim" } else { "part.kernel" });
        run(&[
            format!("if={}", target.display()),
            format!("of={}", part.display()),
            "bs=1000".into(),
            "skip=2".into(),
            "count=7".into(),
        ]);
    }
    ok(s.shim(&mut Command::new("cmp"))
        .arg(s.k.join("dd"))
        .arg(cr("dd")));
    let (a, b) = (
        std::fs::read(s.k.join("part.kernel")).unwrap(),
        std::fs::read(s.k.join("part.shim")).unwrap(),
    );
    assert_eq!(a.len(), 7000);
    assert!(a == b, "dd skip/count read back differs");

    // A C checkpoint writer, and a later process (the restart) that verifies it.
    let ckpt = s.compile("ckpt");
    ok(s.shim(&mut Command::new("mkdir")).arg(cr("ck")));
    let w = ok(s
        .shim(&mut Command::new(&ckpt))
        .arg("write")
        .arg(cr("ck"))
        .arg("6")
        .arg("300001"));
    assert_eq!(w.trim(), "wrote 6 files");
    let r = ok(s.shim(&mut Command::new(&ckpt)).arg("read").arg(cr("ck")));
    assert_eq!(r.trim(), "verified 6 files");

    // Nothing of it reached the kernel's file system.
    assert!(
        !s.cr.exists(),
        "{} exists on the kernel's file system",
        s.cr.display()
    );
}
