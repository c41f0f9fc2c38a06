//! Helpers the `kavach` command-line tests share: running the binary, reading what it printed,
//! checking a refusal, and a scratch directory.
//!
//! Each test file that needs them says `mod common;`, so this file is compiled once per test
//! binary, and an item that only some of the files use would be dead code in the others.
#![allow(dead_code)]

pub mod proxy;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Run `kavach args` in the current directory, with no input.
pub fn kavach(args: &[&str]) -> Output {
    run(None, args, None)
}

/// Run `kavach args` in `dir`, with no input.
pub fn kavach_in(dir: &Path, args: &[&str]) -> Output {
    run(Some(dir), args, None)
}

/// Run `kavach args` in the current directory, with `stdin` (if any) as its input.
pub fn kavach_stdin(args: &[&str], stdin: Option<&[u8]>) -> Output {
    run(None, args, stdin)
}

/// Ordering between this test binary's threads: spawning a child (shared) against opening and
/// closing a pool inside the test process (exclusive).
///
/// A pool's lock (`flock`) belongs to the open file description, and a child forked by another
/// test thread holds a copy of every descriptor until it execs. So a pool this process closed
/// can still be locked for a moment by a sibling test's child, and the next opener (a `kavach`
/// the test runs, or the test itself) is told "in use". Children are spawned under the shared
/// side (`spawn` returns after the exec), pools opened and closed in the process under the
/// exclusive side ([`in_process`]): no child is ever between fork and exec while a test's pool
/// is open.
static SPAWN: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// The exclusive side of [`SPAWN`]: while it lives, no other thread of this test binary spawns
/// a child, so pools opened and closed meanwhile are never locked by a stray descriptor. Run
/// `kavach` while holding it with [`Exclusive::kavach`] (the plain helpers would wait for it).
pub struct Exclusive(#[allow(dead_code)] std::sync::RwLockWriteGuard<'static, ()>);

/// Take the exclusive side of [`SPAWN`] (see [`Exclusive`]).
pub fn exclusive() -> Exclusive {
    Exclusive(SPAWN.write().unwrap_or_else(|e| e.into_inner()))
}

impl Exclusive {
    /// Run `kavach args` in the current directory, with no input.
    pub fn kavach(&self, args: &[&str]) -> Output {
        spawn_and_wait(None, args, None)
    }
}

/// Run `f`, which opens and closes pools in this process, holding [`Exclusive`].
pub fn in_process<T>(f: impl FnOnce() -> T) -> T {
    let _exclusive = exclusive();
    f()
}

fn run(dir: Option<&Path>, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let _shared = SPAWN.read().unwrap_or_else(|e| e.into_inner());
    spawn_and_wait(dir, args, stdin)
}

fn spawn_and_wait(dir: Option<&Path>, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kavach"));
    command
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    let mut child = command.spawn().expect("run kavach");
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        // The command may stop reading early (a refused line); what it read is what counts.
        let _ = pipe.write_all(bytes);
    }
    child.wait_with_output().expect("wait for kavach")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A bad input: exit `code`, stderr is one `kavach: error:` line containing `needle`, and no
/// panic, backtrace or internal error.
pub fn assert_refused(o: &Output, code: i32, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "exit code; stderr: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace") && !err.contains("internal error"),
        "{err}"
    );
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "one line on stderr, got: {err}"
    );
    assert!(err.starts_with("kavach: error: "), "{err}");
    assert!(
        err.contains(needle),
        "stderr should mention `{needle}`: {err}"
    );
}

/// A scratch directory under /dev/shm (PM emulated in DRAM) when there is one, else under the
/// temporary directory: `kavach-<test binary>-<tag>-<pid>`, emptied on creation and removed at
/// the end.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let d = base.join(format!(
            "kavach-{}-{tag}-{}",
            env!("CARGO_CRATE_NAME"),
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }

    /// The path of `name` inside the directory.
    pub fn path(&self, name: &str) -> String {
        self.0.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Assert `o` exited `code` without a panic or an internal error.
pub fn assert_code(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        stdout(o),
        stderr(o)
    );
    let err = stderr(o);
    assert!(
        !err.contains("panicked") && !err.contains("internal error"),
        "{err}"
    );
}

/// `o`'s stdout as JSON.
pub fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

/// `kavach args`, which must exit `code`; its stdout.
pub fn run_ok(args: &[&str], code: i32) -> String {
    let o = kavach(args);
    assert_code(&o, code);
    stdout(&o)
}

/// `kavach args --json`, which must exit `code`; its JSON.
pub fn run_json(args: &[&str], code: i32) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    let o = kavach(&all);
    assert_code(&o, code);
    json(&o)
}

/// A free TCP port on 127.0.0.1 (bound, noted, released).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Start `kavach serve` on a free port with `args`; its child, the port it listens on, and what
/// it printed before. Its stderr is drained from then on, so it never blocks on a full pipe.
pub fn spawn_serve(dir: &str, args: &[&str]) -> (std::process::Child, u16, Vec<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kavach"))
        .args(["serve", "--dir", dir, "--port", "0"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kavach serve");
    let err = child.stderr.take().expect("stderr");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(err));
    let mut seen = Vec::new();
    let port = loop {
        let Some(Ok(line)) = lines.next() else {
            panic!("kavach serve exited before listening: {seen:?}");
        };
        if let Some(rest) = line.split("listening on ").nth(1) {
            let addr = rest.split_whitespace().next().expect("address");
            break addr.rsplit(':').next().unwrap().parse().expect("port");
        }
        seen.push(line);
    };
    std::thread::spawn(move || for _ in lines {});
    (child, port, seen)
}

/// Installs `package` with apt-get unless `tool --version` already works; panics if it cannot.
pub fn ensure_tool(tool: &str, package: &str) {
    let have = || {
        std::process::Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    // Tests of one binary run in parallel, and other test binaries may install at the same
    // time: one install at a time here, and apt waits for another process's dpkg lock.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    if !have() {
        let wait = "DPkg::Lock::Timeout=600";
        let _ = std::process::Command::new("apt-get")
            .args(["-o", wait, "update"])
            .output();
        let o = std::process::Command::new("apt-get")
            .args(["-o", wait, "install", "-y", package])
            .output()
            .expect("run apt-get");
        assert!(
            o.status.success() && have(),
            "cannot install {package}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
