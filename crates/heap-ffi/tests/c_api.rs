//! The C interface from C: compile `tests/c/api_test.c`, `tests/c/redo_trap_test.c`,
//! `tests/c/reliable_test.c`,
//! `examples/c/list.c` and `examples/c/redo_list.c` with the system C compiler against this crate's `libkavach.a` and `libkavach.so`, by path and through
//! the pkg-config files `kavach-static.pc` and `kavach.pc` (as the README's "Using Kavach from
//! C" does), run them on pools in `/dev/shm` (or the temporary directory) and check their exit
//! status and output.
//!
//! Where the libraries come from: cargo builds this package's library with every crate type
//! of its `[lib]` before it builds the integration tests, and rustc writes `libkavach.a` and
//! `libkavach.so` (no hash in the name for these crate types) into the same `deps` directory as
//! this test's executable. So they are found next to `std::env::current_exe()`, which works for
//! `cargo test -p kavach-heap-ffi`, `cargo test --workspace`, any profile and any target
//! directory. (`cargo build` also copies them to `target/<profile>/`; `cargo test` does not.)
//! The build script (`build.rs`) writes the `.pc` files into `target/<profile>/`, the parent of
//! `deps`, pointing at `deps`. `pkg-config` is used when installed; without it the test reads
//! the files itself (and when it is installed, checks that both read the same). A missing C
//! compiler fails the test: gcc is part of the environment.

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
    let mut flags = vec![
        "-I".to_owned(),
        Path::new(CRATE).join("include").display().to_string(),
        lib.display().to_string(),
    ];
    flags.extend(extra.iter().map(|s| s.to_string()));
    flags.extend(NATIVE_LIBS.iter().map(|s| s.to_string()));
    compile_with(source, out, &flags);
}

/// Compile `source` (relative to the crate) into `out` with `flags` after it (include
/// directories and libraries).
fn compile_with(source: &str, out: &Path, flags: &[String]) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut cmd = Command::new(&cc);
    cmd.args([
        "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-pthread",
    ])
    .arg(Path::new(CRATE).join(source))
    .arg("-o")
    .arg(out)
    .args(flags);
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

/// `tests/c/redo_trap_test.c`: the redo-mode calls, and the usage trap's death tests (its
/// children must die of SIGSEGV with the library's message; it checks that itself).
fn redo_trap_test(lib: &Path, extra: &[&str]) {
    let work = Scratch::new("redo-trap");
    let bin = work.0.join("redo_trap_test");
    compile("tests/c/redo_trap_test.c", &bin, lib, extra);
    let pools = work.0.join("pools");
    std::fs::create_dir(&pools).expect("mkdir");
    let out = stdout(&run(&bin, &[&pools]));
    assert!(
        out.starts_with("redo_trap_test: ") && out.contains(", 0 failed"),
        "unexpected output: {out}"
    );
}

/// `tests/c/reliable_test.c`: reliable objects from C (allocation flag, checked reads that
/// correct flipped bits, re-encoding writes, `KV_EUNCORRECTABLE`).
fn reliable_test(lib: &Path, extra: &[&str]) {
    let work = Scratch::new("reliable");
    let bin = work.0.join("reliable_test");
    compile("tests/c/reliable_test.c", &bin, lib, extra);
    let out = stdout(&run(&bin, &[&work.0]));
    assert!(
        out.starts_with("reliable_test: ") && out.contains(", 0 failed"),
        "{out}"
    );
}

/// `tests/c/redundancy_test.c`: pools created with each redundancy flag.
#[test]
fn redundancy_static() {
    let work = Scratch::new("redundancy");
    let bin = work.0.join("redundancy_test");
    compile(
        "tests/c/redundancy_test.c",
        &bin,
        &library("libkavach.a"),
        &[],
    );
    let out = stdout(&run(&bin, &[&work.0]));
    assert!(
        out.starts_with("redundancy_test: ") && out.contains(", 0 failed"),
        "{out}"
    );
}

#[test]
fn reliable_objects_static() {
    reliable_test(&library("libkavach.a"), &[]);
}

#[test]
fn redo_and_trap_static() {
    redo_trap_test(&library("libkavach.a"), &[]);
}

#[test]
fn redo_and_trap_shared() {
    let so = library("libkavach.so");
    let rpath = format!("-Wl,-rpath,{}", so.parent().expect("a directory").display());
    redo_trap_test(&so, &[&rpath]);
}

/// Push, pop and print with `examples/c/list.c` built as `bin`, checking every output.
fn list_session(bin: &Path, work: &Scratch) {
    let pool = work.0.join("list.pool");
    let list = |args: &[&str]| {
        let mut all: Vec<&Path> = vec![&pool];
        all.extend(args.iter().map(Path::new));
        stdout(&run(bin, &all))
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

#[test]
fn list_example() {
    let work = Scratch::new("list");
    let bin = work.0.join("list");
    compile("examples/c/list.c", &bin, &library("libkavach.a"), &[]);
    list_session(&bin, &work);
}

/// `examples/c/redo_list.c`, the list written to the redo-mode rules on a trapped pool, gives
/// the same session as `list.c` (a load or store through a pointer would kill it), and the two
/// read each other's pools.
#[test]
fn redo_list_example() {
    let work = Scratch::new("redo-list");
    let lib = library("libkavach.a");
    let redo = work.0.join("redo_list");
    compile("examples/c/redo_list.c", &redo, &lib, &[]);
    list_session(&redo, &work);

    let undo = work.0.join("list");
    compile("examples/c/list.c", &undo, &lib, &[]);
    let pool = work.0.join("mixed.pool");
    let step = |bin: &Path, args: &[&str]| {
        let mut all: Vec<&Path> = vec![&pool];
        all.extend(args.iter().map(Path::new));
        stdout(&run(bin, &all))
    };
    assert_eq!(
        step(&undo, &["push", "3"]),
        "count 3: [item 2] [item 1] [item 0]\n"
    );
    assert_eq!(
        step(&redo, &["push", "2"]),
        "count 5: [item 4] [item 3] [item 2] [item 1] [item 0]\n"
    );
    assert_eq!(
        step(&undo, &["pop", "1"]),
        "count 4: [item 3] [item 2] [item 1] [item 0]\n"
    );
    assert_eq!(step(&redo, &["pop", "3"]), "count 1: [item 0]\n");
    assert_eq!(step(&undo, &["print"]), "count 1: [item 0]\n");
}

// ------------------------------------------------------------------------------- pkg-config

/// The directory the build script writes `kavach.pc` and `kavach-static.pc` to:
/// `target/<profile>/`, the parent of `deps`.
fn pc_dir() -> PathBuf {
    deps_dir()
        .parent()
        .expect("deps has a parent")
        .to_path_buf()
}

/// The compiler flags of the pkg-config package `name` as `pkg-config --cflags --libs` gives
/// them, read from the `.pc` file: variables (`name=value`, `${name}` expanded), then the
/// `Cflags:` and `Libs:` fields.
fn read_pc(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (crates/heap-ffi/build.rs writes it on every build of the crate)",
            path.display()
        )
    });
    let mut vars: Vec<(String, String)> = Vec::new();
    let expand = |v: &str, vars: &[(String, String)]| {
        let mut v = v.to_owned();
        while let Some(i) = v.find("${") {
            let end = i + v[i..].find('}').expect("an unterminated ${");
            let name = &v[i + 2..end];
            let value = vars
                .iter()
                .find(|(n, _)| n == name)
                .unwrap_or_else(|| panic!("{}: ${{{name}}} is not defined", path.display()))
                .1
                .clone();
            v.replace_range(i..=end, &value);
        }
        v
    };
    let (mut cflags, mut libs) = (String::new(), String::new());
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let colon = line.find(':');
        match line.find('=') {
            Some(eq) if colon.is_none_or(|c| eq < c) => {
                let value = expand(line[eq + 1..].trim(), &vars);
                vars.push((line[..eq].trim().to_owned(), value));
            }
            _ => {
                let (key, value) = line.split_at(colon.expect("a `Key: value` line"));
                let value = expand(value[1..].trim(), &vars);
                match key {
                    "Cflags" => cflags = value,
                    "Libs" => libs = value,
                    _ => {}
                }
            }
        }
    }
    cflags
        .split_whitespace()
        .chain(libs.split_whitespace())
        .map(str::to_owned)
        .collect()
}

/// The flags to build a program with package `name`: from `pkg-config` when it is installed
/// (and then the file must read the same without it), else read from the file.
fn pc_flags(name: &str) -> Vec<String> {
    let dir = pc_dir();
    let from_file = read_pc(&dir.join(format!("{name}.pc")));
    match Command::new("pkg-config")
        .args(["--cflags", "--libs", name])
        .env("PKG_CONFIG_PATH", &dir)
        .output()
    {
        Ok(out) => {
            assert!(
                out.status.success(),
                "pkg-config --cflags --libs {name} with PKG_CONFIG_PATH={}: {}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            let flags: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(str::to_owned)
                .collect();
            assert_eq!(flags, from_file, "pkg-config and the file disagree");
            flags
        }
        Err(e) => {
            println!("pkg-config not found ({e}): using the flags read from {name}.pc");
            from_file
        }
    }
}

/// Does the executable `bin` name `libkavach.so` (a dynamic dependency on it)?
fn needs_shared_library(bin: &Path) -> bool {
    let bytes = std::fs::read(bin).expect("read the executable");
    bytes
        .windows(b"libkavach.so".len())
        .any(|w| w == b"libkavach.so")
}

/// What the README's "Using Kavach from C" says: `cc prog.c $(pkg-config --cflags --libs
/// kavach-static)` links `libkavach.a` into the program.
#[test]
fn pkg_config_static() {
    let flags = pc_flags("kavach-static");
    assert!(
        flags.iter().any(|f| f.ends_with("/libkavach.a")),
        "{flags:?}"
    );
    let work = Scratch::new("pc-static");
    let bin = work.0.join("list");
    compile_with("examples/c/list.c", &bin, &flags);
    assert!(
        !needs_shared_library(&bin),
        "the static build needs libkavach.so"
    );
    list_session(&bin, &work);
}

/// `cc prog.c $(pkg-config --cflags --libs kavach)` links against `libkavach.so`, and the
/// program finds it at run time without LD_LIBRARY_PATH (the file's rpath).
#[test]
fn pkg_config_shared() {
    let flags = pc_flags("kavach");
    assert!(flags.iter().any(|f| f == "-lkavach"), "{flags:?}");
    let work = Scratch::new("pc-shared");
    let bin = work.0.join("list");
    compile_with("examples/c/list.c", &bin, &flags);
    assert!(
        needs_shared_library(&bin),
        "the shared build does not use libkavach.so"
    );
    list_session(&bin, &work);
}
