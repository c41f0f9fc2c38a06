//! Helpers of the shim's tests: the built libkavach_cr.so, C programs compiled with gcc, a
//! private scratch directory under /dev/shm (checkpoint directory, device, kernel directories),
//! and commands run with and without the shim.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The shim built with this test's profile (target/<profile>/libkavach_cr.so). Cargo does not
/// rebuild a cdylib-only package's library for its integration tests, so a library left by an
/// earlier build could be stale: every test binary runs `cargo build -p kavach-cr-preload` once
/// (a no-op when it is up to date).
pub fn shim_so() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().expect("test executable");
            let profile_dir = exe
                .parent()
                .and_then(Path::parent)
                .expect("target/<profile>/deps/<test>");
            let release = profile_dir.file_name().is_some_and(|n| n == "release");
            let mut c = Command::new(env!("CARGO"));
            c.args(["build", "-q", "-p", "kavach-cr-preload"]);
            if release {
                c.arg("--release");
            }
            let st = c
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .expect("run cargo build");
            assert!(st.success(), "cargo build -p kavach-cr-preload failed");
            let so = profile_dir.join("libkavach_cr.so");
            assert!(so.is_file(), "{} was not built", so.display());
            so
        })
        .clone()
}

static N: AtomicUsize = AtomicUsize::new(0);

/// A private directory under /dev/shm, removed when dropped: `cr` is the checkpoint directory
/// (it does not exist on the kernel's file system), `dev` the device file, `k` a kernel
/// directory.
pub struct Scratch {
    pub root: PathBuf,
    pub cr: PathBuf,
    pub dev: PathBuf,
    pub k: PathBuf,
}

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let root = PathBuf::from(format!(
            "/dev/shm/kavach-cr-test-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("k")).expect("scratch dir");
        Scratch {
            cr: root.join("cr"),
            dev: root.join("dev"),
            k: root.join("k"),
            root,
        }
    }

    /// `cmd` with the shim loaded and this scratch's checkpoint directory and device.
    pub fn shim<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        for (k, _) in std::env::vars() {
            if k.starts_with("KAVACH_CR_") {
                cmd.env_remove(k);
            }
        }
        cmd.env("LD_PRELOAD", shim_so())
            .env("KAVACH_CR_DIR", &self.cr)
            .env("KAVACH_CR_DEVICE", &self.dev)
            .env("KAVACH_CR_SIZE", (256u64 << 20).to_string())
    }

    /// Compiles tests/programs/<name>.c into this scratch directory.
    pub fn compile(&self, name: &str) -> PathBuf {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.c"));
        let out = self.root.join(name);
        let o = Command::new("gcc")
            .args(["-O1", "-Wall", "-o"])
            .arg(&out)
            .arg(&src)
            .output()
            .expect("run gcc");
        assert!(
            o.status.success(),
            "gcc {}: {}",
            src.display(),
            String::from_utf8_lossy(&o.stderr)
        );
        out
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Runs `cmd`, which must succeed; returns its standard output.
pub fn ok(cmd: &mut Command) -> String {
    let o: Output = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Every file and directory under `dir` (relative paths, sorted) with the content of files.
pub fn tree(dir: &Path) -> Vec<(String, Option<Vec<u8>>)> {
    fn walk(base: &Path, d: &Path, out: &mut Vec<(String, Option<Vec<u8>>)>) {
        let mut es: Vec<_> = std::fs::read_dir(d)
            .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
            .map(|e| e.expect("entry").path())
            .collect();
        es.sort();
        for p in es {
            let rel = p
                .strip_prefix(base)
                .expect("under base")
                .to_string_lossy()
                .into_owned();
            if p.is_dir() {
                out.push((rel, None));
                walk(base, &p, out);
            } else {
                out.push((rel, Some(std::fs::read(&p).expect("read"))));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out
}

/// Asserts two kernel trees are identical (names, kinds, bytes).
pub fn same_tree(a: &Path, b: &Path) {
    let (ta, tb) = (tree(a), tree(b));
    let names =
        |t: &[(String, Option<Vec<u8>>)]| t.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&ta),
        names(&tb),
        "{} and {} differ in names",
        a.display(),
        b.display()
    );
    for ((n, x), (_, y)) in ta.iter().zip(tb.iter()) {
        assert!(
            x == y,
            "{n} differs between {} and {}",
            a.display(),
            b.display()
        );
    }
}

/// Deterministic pseudo-random bytes.
pub fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A source tree of nested directories and files of awkward sizes (around the hugeblock).
pub fn make_tree(dir: &Path) {
    let sizes = [
        0usize,
        1,
        511,
        4095,
        4096,
        32767,
        32768,
        32769,
        100_000,
        (1 << 20) + 3,
    ];
    std::fs::create_dir_all(dir.join("a/b/c")).expect("mkdir");
    std::fs::create_dir_all(dir.join("empty")).expect("mkdir");
    std::fs::create_dir_all(dir.join("z")).expect("mkdir");
    for (i, s) in sizes.iter().enumerate() {
        let sub = ["", "a", "a/b", "a/b/c", "z"][i % 5];
        std::fs::write(
            dir.join(sub).join(format!("f{i}.bin")),
            bytes(i as u64 + 1, *s),
        )
        .expect("write");
    }
    std::fs::write(dir.join("notes.txt"), b"checkpoint notes\nline two\n").expect("write");
}
