//! Helpers of the `kavach wsp` tests: building the C workloads, a scratch directory on /dev/shm
//! (the persistence domain), running `kavach wsp` in its own process group with its output
//! collected, and the power-failure injection loop.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The `kavach` binary under test.
pub const KAVACH: &str = env!("CARGO_BIN_EXE_kavach");

/// One test at a time in a test binary: the injection times are fractions of a reference run's
/// time, which a sibling test running beside it would distort (the machine has two CPUs).
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Build (once per test binary) the workload `name` from crates/wsp/tests/programs/NAME.c as
/// a static non-PIE executable, and return its path.
pub fn program(name: &str) -> PathBuf {
    program_built(name, name, &["-static", "-no-pie"])
}

/// Build the workload `name` under the file name `as_name` with the linking `flags`.
pub fn program_built(name: &str, as_name: &str, flags: &[&str]) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(p) = built.get(as_name) {
        return p.clone();
    }
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wsp/tests/programs");
    let src = src_dir.join(format!("{name}.c"));
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("wsp-programs");
    std::fs::create_dir_all(&out_dir).unwrap();
    let exe = out_dir.join(as_name);
    let tmp = out_dir.join(format!("{as_name}.{}.tmp", std::process::id()));
    let out = Command::new("gcc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-pthread"])
        .args(flags)
        .arg("-o")
        .arg(&tmp)
        .arg(&src)
        .output()
        .expect("gcc runs (the wsp tests need gcc with static glibc)");
    assert!(
        out.status.success(),
        "gcc {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(&tmp, &exe).unwrap();
    built.insert(as_name.to_string(), exe.clone());
    exe
}

/// A scratch directory on /dev/shm, removed when dropped.
pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("kavach-wsp-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A small deterministic generator for the injection times; the seed is printed so a failing
/// run can be repeated with `KAVACH_WSP_SEED`.
pub struct Rng(pub u64);

impl Rng {
    pub fn from_env_or_clock(test: &str) -> Rng {
        let seed = std::env::var("KAVACH_WSP_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
        eprintln!("{test}: injection seed {seed} (set KAVACH_WSP_SEED to repeat)");
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A uniform fraction in [lo, hi).
    pub fn between(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next() >> 11) as f64 / (1u64 << 53) as f64)
    }
}

/// A `kavach` child in its own process group, its stdout and stderr collected as they come.
pub struct Runner {
    child: Child,
    out: Arc<Mutex<Vec<u8>>>,
    err: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
}

fn collect(mut from: impl Read + Send + 'static, into: Arc<Mutex<Vec<u8>>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => into
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend_from_slice(&buf[..n]),
            }
        }
    })
}

impl Runner {
    /// Start `kavach args` in a new process group (its pgid is its pid), no input.
    pub fn spawn(args: &[&std::ffi::OsStr]) -> Runner {
        let mut child = Command::new(KAVACH)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("spawn kavach");
        let out = Arc::new(Mutex::new(Vec::new()));
        let err = Arc::new(Mutex::new(Vec::new()));
        let readers = vec![
            collect(child.stdout.take().unwrap(), out.clone()),
            collect(child.stderr.take().unwrap(), err.clone()),
        ];
        Runner {
            child,
            out,
            err,
            readers,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Send `sig` to the runner alone.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) with a pid this test spawned and has not reaped yet.
        let rc = unsafe { libc::kill(self.pid(), sig) };
        assert_eq!(rc, 0, "kill({}, {sig})", self.pid());
    }

    /// SIGKILL the runner's whole process group: the power is gone.
    pub fn kill_group(&self) {
        // SAFETY: killpg(2) on the group this test created for the runner (pgid = its pid).
        // ESRCH (everything already gone) is fine.
        unsafe { libc::killpg(self.pid(), libc::SIGKILL) };
    }

    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// What it wrote to stderr so far.
    pub fn stderr_now(&self) -> String {
        String::from_utf8_lossy(&self.err.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }

    /// Wait until stderr holds `needle` (true) or `timeout` passes or the runner ends (false).
    pub fn wait_for_stderr(&mut self, needle: &str, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if self.stderr_now().contains(needle) {
                return true;
            }
            if Instant::now() >= end || self.exited() {
                return self.stderr_now().contains(needle);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Wait for the end (killing the group after `timeout`, then failing) and return the exit
    /// status, stdout and stderr.
    pub fn finish(mut self, timeout: Duration) -> (ExitStatus, String, String) {
        let end = Instant::now() + timeout;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() >= end {
                self.kill_group();
                let _ = self.child.wait();
                panic!(
                    "kavach (pid {}) did not end within {timeout:?}; stderr:\n{}",
                    self.pid(),
                    self.stderr_now()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        // The group may still hold the program if the runner died first.
        self.kill_group();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let out = String::from_utf8_lossy(&self.out.lock().unwrap()).into_owned();
        let err = String::from_utf8_lossy(&self.err.lock().unwrap()).into_owned();
        (status, out, err)
    }
}

/// Run `kavach args` to its end; (exit code or -signal, stdout, stderr).
pub fn kavach(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let (status, out, err) = Runner::spawn(args).finish(Duration::from_secs(120));
    (code(status), out, err)
}

/// An exit status as a number: the code, or minus the signal.
pub fn code(s: ExitStatus) -> i32 {
    s.code().unwrap_or_else(|| -s.signal().unwrap_or(0))
}

/// `kavach wsp info --json --pool pool`: (exit code, the JSON, stderr).
pub fn info(pool: &Path) -> (i32, Value, String) {
    let (c, out, err) = kavach(&[
        "wsp".as_ref(),
        "info".as_ref(),
        "--json".as_ref(),
        "--pool".as_ref(),
        pool.as_os_str(),
    ]);
    let v = serde_json::from_str(&out).unwrap_or(Value::Null);
    (c, v, err)
}

/// The JSON lines among `text` that carry `key`; other lines (the program's own) are skipped.
pub fn json_lines(text: &str, key: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get(key).is_some())
        .collect()
}

/// The lines of `text` that are not JSON: what the program itself printed.
pub fn program_lines(text: &str) -> String {
    text.lines()
        .filter(|l| !(l.starts_with('{') && serde_json::from_str::<Value>(l).is_ok()))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// An uninterrupted run of a workload outside kavach: (stdout, elapsed).
pub fn reference(program: &Path, args: &[&std::ffi::OsStr]) -> (String, Duration) {
    let t = Instant::now();
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run the workload");
    let elapsed = t.elapsed();
    assert!(
        out.status.success(),
        "reference run of {} failed: {}",
        program.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    (String::from_utf8_lossy(&out.stdout).into_owned(), elapsed)
}

/// What an interrupted run gave.
pub struct Interrupted {
    /// Power failures injected (each followed by a resume).
    pub failures: usize,
    /// The program's stdout over every runner.
    pub stdout: String,
    /// The last runner's exit code.
    pub last_code: i32,
    /// The saves' reports, as the runners' `saved` events gave them.
    pub saves: Vec<Value>,
}

/// The window the transparency tests give: generous, because the machine is shared and these
/// tests check correctness, not speed (the save-time figures come from bench/wsp).
pub const TEST_WINDOW_MS: u64 = 250;

/// Run `program args` under `kavach wsp run --pool pool`, inject `n` power failures (SIGPWR to
/// the runner, wait the window, SIGKILL the group), each at a random time in the first 70% of
/// `work` divided by `n`, check the image is saved after each, resume, and wait for the end.
pub fn interrupted_run(
    pool: &Path,
    program: &Path,
    args: &[&std::ffi::OsStr],
    n: usize,
    work: Duration,
    rng: &mut Rng,
) -> Interrupted {
    let window = TEST_WINDOW_MS.to_string();
    let mut run_args: Vec<&std::ffi::OsStr> = vec![
        "wsp".as_ref(),
        "run".as_ref(),
        "--json".as_ref(),
        "--size".as_ref(),
        "1GiB".as_ref(),
        "--window-ms".as_ref(),
        window.as_ref(),
        "--pool".as_ref(),
        pool.as_os_str(),
        "--".as_ref(),
        program.as_os_str(),
    ];
    run_args.extend_from_slice(args);
    let resume_args: Vec<&std::ffi::OsStr> = vec![
        "wsp".as_ref(),
        "resume".as_ref(),
        "--json".as_ref(),
        "--window-ms".as_ref(),
        window.as_ref(),
        "--pool".as_ref(),
        pool.as_os_str(),
    ];
    let mut stdout = String::new();
    let mut saves = Vec::new();
    let mut runner = Runner::spawn(&run_args);
    let mut ready = "\"event\":\"started\"";
    let mut failures = 0;
    while failures < n {
        assert!(
            runner.wait_for_stderr(ready, Duration::from_secs(30)),
            "no `{ready}` event from kavach; stderr:\n{}",
            runner.stderr_now()
        );
        let delay = work.mul_f64(rng.between(0.1, 0.7) / n as f64);
        std::thread::sleep(delay);
        if runner.exited() {
            break;
        }
        runner.signal(libc::SIGPWR);
        std::thread::sleep(Duration::from_millis(TEST_WINDOW_MS));
        runner.kill_group();
        let (_, out, err) = runner.finish(Duration::from_secs(30));
        stdout.push_str(&program_lines(&out));
        failures += 1;
        let saved = json_lines(&err, "event")
            .into_iter()
            .filter(|e| e["event"] == "saved")
            .collect::<Vec<_>>();
        assert_eq!(
            saved.len(),
            1,
            "failure {failures} after {delay:?}: expected one `saved` event; stderr:\n{err}"
        );
        saves.extend(saved);
        let (c, v, ierr) = info(pool);
        assert_eq!(c, 0, "info after failure {failures}: {v}\n{ierr}");
        assert_eq!(v["state"], "saved", "info after failure {failures}: {v}");
        assert_eq!(
            v["counter"], failures as u64,
            "info after failure {failures}: {v}"
        );
        runner = Runner::spawn(&resume_args);
        ready = "\"event\":\"resumed\"";
    }
    let (status, out, err) = runner.finish(Duration::from_secs(120));
    stdout.push_str(&program_lines(&out));
    let last_code = code(status);
    assert_eq!(
        last_code, 0,
        "the last runner: stderr:\n{err}\nstdout:\n{out}"
    );
    let end = json_lines(&out, "command");
    assert_eq!(end.len(), 1, "one result line; stdout:\n{out}");
    assert_eq!(end[0]["end"], "exited", "{}", end[0]);
    assert_eq!(end[0]["status"], 0, "{}", end[0]);
    Interrupted {
        failures,
        stdout,
        last_code,
        saves,
    }
}
