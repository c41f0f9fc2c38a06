//! The C interface from C: compile `tests/c/api_test.c` and `examples/c/list.c` with the
//! system C compiler against this crate's `libkavach.a` (and once against `libkavach.so`), run
//! them on pools in `/dev/shm` (or the temporary directory) and check their exit status and
//! output.
//!
//! Where the libraries come from: cargo builds this package's library with every crate type
//! of its `[lib]` before it builds the integration tests, and rustc writes `libkavach.a` and
//! `libkavach.so` (no hash in the name for these crate types) into the same `deps` directory as
//! this test's executable. So they are found next to `std::env::current_exe()`, which works for
//! `cargo test -p kavach-heap-ffi`, `cargo test --workspace`, any profile and any target
//! directory. (`cargo build` also copies them to `target/<profile>/`; `cargo test` does not.)
//! No build script is involved. A missing C compiler fails the test: gcc is part of the
//! environment.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

const CRATE: &str = env!("CARGO_MANIFEST_DIR");
/// The link line the benchmark harness (`bench/heap/run.sh`) uses; checked here.
const NATIVE_LIBS: [&str; 3] = ["-lpthread", "-ldl", "-lm"];

/// The directory holding this test's executable and this package's libraries.
fn deps_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .expect("the test executable has a directory")
        .to_path_buf()
}

fn library(name: &str) -> PathBuf {
    let deps = deps_dir();
    let candidates = [
        deps.join(name),
        deps.parent().map(|p| p.join(name)).unwrap_or_default(),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "{name} not found in {} or its parent: cargo should have built it with the \
                 test (crate-type in crates/heap-ffi/Cargo.toml)",
                deps.display()
            )
        })
}

/// A unique scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Scratch {
        static N: AtomicU32 = AtomicU32::new(0);
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = base.join(format!(
            "kavach-ffi-{what}-{}-{nanos}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Compile `source` (relative to the crate) into `out`, linked with `lib` and `extra` flags.
fn compile(source: &str, out: &Path, lib: &Path, extra: &[&str]) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut cmd = Command::new(&cc);
    cmd.args([
        "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-pthread",
    ])
    .arg("-I")
    .arg(Path::new(CRATE).join("include"))
    .arg(Path::new(CRATE).join(source))
    .arg("-o")
    .arg(out)
    .arg(lib)
    .args(extra)
    .args(NATIVE_LIBS);
    let output = cmd.output().unwrap_or_else(|e| {
        panic!("cannot run the C compiler `{cc}` ({e}): these tests need gcc (or set CC)")
    });
    assert!(
        output.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn run(bin: &Path, args: &[&Path]) -> Output {
    let output = Command::new(bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    assert!(
        output.status.success(),
        "{} {args:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        bin.display(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn api_test(lib: &Path, extra: &[&str]) {
    let work = Scratch::new("api");
    let bin = work.0.join("api_test");
    compile("tests/c/api_test.c", &bin, lib, extra);
    let pools = work.0.join("pools");
    std::fs::create_dir(&pools).expect("mkdir");
    let out = stdout(&run(&bin, &[&pools]));
    assert!(out.contains(", 0 failed"), "unexpected output: {out}");
}

#[test]
fn api_test_static() {
    api_test(&library("libkavach.a"), &[]);
}

#[test]
fn api_test_shared() {
    let so = library("libkavach.so");
    let rpath = format!("-Wl,-rpath,{}", so.parent().expect("a directory").display());
    api_test(&so, &[&rpath]);
}

#[test]
fn list_example() {
    let work = Scratch::new("list");
    let bin = work.0.join("list");
    compile("examples/c/list.c", &bin, &library("libkavach.a"), &[]);
    let pool = work.0.join("list.pool");
    let list = |args: &[&str]| {
        let mut all: Vec<&Path> = vec![&pool];
        all.extend(args.iter().map(Path::new));
        stdout(&run(&bin, &all))
    };
    assert_eq!(
        list(&["push", "5"]),
        "count 5: [item 4] [item 3] [item 2] [item 1] [item 0]\n"
    );
    assert_eq!(list(&["pop", "2"]), "count 3: [item 2] [item 1] [item 0]\n");
    assert_eq!(
        list(&["push", "1"]),
        "count 4: [item 5] [item 2] [item 1] [item 0]\n"
    );
    assert_eq!(
        list(&["print"]),
        "count 4: [item 5] [item 2] [item 1] [item 0]\n"
    );
    assert_eq!(list(&["pop", "10"]), "count 0:\n");
    assert_eq!(list(&["push", "200"]).matches("[item ").count(), 200);
    // The pool is reused: 200 pushes after 6 and 6 pops.
    assert!(list(&["print"]).starts_with("count 200: [item 205] [item 204]"));
}
