//! The runtime end to end: small C programs, built static and non-PIE at test time, run under
//! `wsp::run`, saved at an injected warning, killed, resumed (possibly several times), and
//! compared with an uninterrupted run of the same program.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use wsp::{AfterSave, ResumeOptions, RunConfig, RunEnd, SaveMode, WriteBack, WspError};

/// A hash chain over a buffer of `argv[1]` MiB, `argv[2]` rounds; the result goes to `argv[3]`,
/// and one line per round to `argv[4]` (a file held open, written with write(2)).
const CHAIN: &str = r#"
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    size_t n = strtoul(argv[1], 0, 10) << 17;
    long rounds = strtol(argv[2], 0, 10);
    int log = open(argv[4], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log < 0) return 9;
    uint64_t *a = malloc(n * sizeof *a), h = 1469598103934665603ull;
    double f = 1.0;
    for (size_t i = 0; i < n; i++) a[i] = i * 0x9e3779b97f4a7c15ull;
    for (long r = 0; r < rounds; r++) {
        for (size_t i = 0; i < n; i++) { h = (h ^ a[i]) * 1099511628211ull; a[i] = h; }
        f = f * 1.0000001 + (double)(h & 0xff);
        char line[64];
        int k = snprintf(line, sizeof line, "%ld %016llx\n", r, (unsigned long long)h);
        if (write(log, line, k) != k) return 8;
    }
    FILE *out = fopen(argv[3], "w");
    fprintf(out, "%016llx %.6f\n", (unsigned long long)h, f);
    fclose(out);
    return 0;
}
"#;

/// `argv[1]` threads each hash a private buffer of `argv[2]` MiB for `argv[3]` rounds, with a
/// mutex-protected shared value; the main thread joins them and writes the result to `argv[4]`.
const THREADS: &str = r#"
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
static size_t words; static long rounds;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; static uint64_t shared;
static void *work(void *arg) {
    uint64_t id = (uintptr_t)arg, h = 1469598103934665603ull ^ id;
    uint64_t *a = malloc(words * 8);
    for (size_t i = 0; i < words; i++) a[i] = (i + id) * 0x9e3779b97f4a7c15ull;
    for (long r = 0; r < rounds; r++) {
        for (size_t i = 0; i < words; i++) { h = (h ^ a[i]) * 1099511628211ull; a[i] = h; }
        pthread_mutex_lock(&mu); shared = shared * 31 + (h & 0xff); pthread_mutex_unlock(&mu);
    }
    free(a);
    return (void *)(uintptr_t)h;
}
int main(int argc, char **argv) {
    int t = atoi(argv[1]); words = strtoul(argv[2], 0, 10) << 17; rounds = atol(argv[3]);
    pthread_t th[16]; uint64_t acc = 0;
    for (int i = 0; i < t; i++) pthread_create(&th[i], 0, work, (void *)(uintptr_t)i);
    for (int i = 0; i < t; i++) { void *r; pthread_join(th[i], &r); acc = acc * 1000003 ^ (uintptr_t)r; }
    FILE *f = fopen(argv[4], "w");
    /* shared depends on the interleaving; only its presence is printed. */
    fprintf(f, "%016llx %d\n", (unsigned long long)acc, shared != 0);
    fclose(f);
    return 0;
}
"#;

static N: AtomicU32 = AtomicU32::new(0);

/// A fresh directory on /dev/shm for one test.
fn dir(tag: &str) -> PathBuf {
    let d = PathBuf::from(format!(
        "/dev/shm/wsp-test-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn build(d: &Path, name: &str, src: &str) -> PathBuf {
    let c = d.join(format!("{name}.c"));
    let exe = d.join(name);
    std::fs::write(&c, src).unwrap();
    let out = Command::new("gcc")
        .args(["-O2", "-static", "-no-pie", "-pthread", "-o"])
        .arg(&exe)
        .arg(&c)
        .output()
        .expect("gcc runs");
    assert!(
        out.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

fn reference(exe: &Path, args: &[&str]) {
    let st = Command::new(exe).args(args).status().unwrap();
    assert!(st.success(), "reference run: {st}");
}

/// A run warned `warn_ms` after its start. The workloads are sized to run well over a second
/// on an idle machine (about four times the warnings they must still be running for: a run
/// warned at 150 ms, then resumes warned at 100 ms each), so a fast, quiet machine cannot end
/// the program before its warning; under load they only take longer.
fn cfg(image: &Path, exe: &Path, args: &[&str], warn_ms: u64) -> RunConfig {
    let mut c = RunConfig::new(image, exe, os(args));
    c.image_size = 256 << 20;
    c.window = powerfail::Window::deadline_ms(2000.0).unwrap();
    c.after_save = AfterSave::Kill;
    c.warn_after = Some(Duration::from_millis(warn_ms));
    c.sigpwr = false;
    c
}

fn resume_opts(warn_ms: Option<u64>) -> ResumeOptions {
    ResumeOptions {
        window: Some(powerfail::Window::deadline_ms(2000.0).unwrap()),
        after_save: AfterSave::Kill,
        warn_after: warn_ms.map(Duration::from_millis),
        // Another test sends this process a real SIGPWR; only that test's run listens.
        sigpwr: false,
        ..ResumeOptions::default()
    }
}

/// The chain program built in a scratch directory of its own (removed on drop), with the paths
/// of a run under WSP (`wsp.out`, `wsp.log`, `img`) and, when asked for, of an uninterrupted
/// reference run (`ref.out`, `ref.log`) already made.
struct Chain {
    d: PathBuf,
    exe: PathBuf,
    mib: &'static str,
    rounds: &'static str,
    img: PathBuf,
    out: PathBuf,
    log: PathBuf,
    reference: bool,
}

impl Chain {
    fn new(tag: &str, mib: &'static str, rounds: &'static str, with_reference: bool) -> Chain {
        let d = dir(tag);
        let exe = build(&d, "chain", CHAIN);
        if with_reference {
            let (o, l) = (d.join("ref.out"), d.join("ref.log"));
            reference(
                &exe,
                &[mib, rounds, o.to_str().unwrap(), l.to_str().unwrap()],
            );
        }
        Chain {
            img: d.join("img"),
            out: d.join("wsp.out"),
            log: d.join("wsp.log"),
            d,
            exe,
            mib,
            rounds,
            reference: with_reference,
        }
    }

    /// A run of the chain into `wsp.out` / `wsp.log`, warned at `warn_ms`.
    fn cfg(&self, warn_ms: u64) -> RunConfig {
        let (o, l) = (self.out.to_str().unwrap(), self.log.to_str().unwrap());
        cfg(
            &self.img,
            &self.exe,
            &[self.mib, self.rounds, o, l],
            warn_ms,
        )
    }

    /// The run's output and log are byte for byte the reference's.
    fn assert_same_as_reference(&self) {
        assert!(self.reference, "no reference run was made");
        let read = |n: &str| std::fs::read(self.d.join(n)).unwrap();
        assert_eq!(read("wsp.out"), read("ref.out"));
        // The log was open across every save: reopened at its offset each time, so no line is
        // lost or repeated.
        assert_eq!(read("wsp.log"), read("ref.log"));
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.d);
    }
}

fn saved(end: RunEnd, counter: u64) -> wsp::SaveReport {
    match end {
        RunEnd::Saved(r) => {
            assert_eq!(r.counter, counter);
            assert!(r.in_window);
            assert!(r.marker_ns >= r.context_ns && r.context_ns >= r.stop_ns);
            r
        }
        other => panic!("expected a completed save, got {other:?}"),
    }
}

/// Run with a warning at `first_ms`, then resume with warnings at each of `later_ms`, then
/// resume to the end; returns the number of saves.
fn interrupted(
    image: &Path,
    exe: &Path,
    args: &[&str],
    mode: SaveMode,
    first_ms: u64,
    later_ms: &[u64],
) -> u64 {
    let mut c = cfg(image, exe, args, first_ms);
    c.save = mode;
    let mut events = Vec::new();
    let end = wsp::run(&c, &mut |e| events.push(e.clone())).unwrap();
    saved(end, 1);
    assert!(
        matches!(events.first(), Some(wsp::Event::Started { .. })),
        "{events:?}"
    );
    let info = wsp::info(image).unwrap();
    assert_eq!(
        (info.state.as_str(), info.marker_valid, info.counter),
        ("saved", true, 1)
    );
    let mut n = 1;
    for &ms in later_ms {
        let end = wsp::resume(image, &resume_opts(Some(ms)), &mut |_| {}).unwrap();
        n += 1;
        saved(end, n);
    }
    let mut resumed = 0;
    let end = wsp::resume(image, &resume_opts(None), &mut |e| {
        if let wsp::Event::Resumed { counter, .. } = e {
            assert_eq!(*counter, n);
            resumed += 1;
        }
    })
    .unwrap();
    assert_eq!(end, RunEnd::Exited(0));
    assert_eq!(resumed, 1);
    let info = wsp::info(image).unwrap();
    assert_eq!((info.state.as_str(), info.exit_status), ("ended", Some(0)));
    n
}

#[test]
fn single_thread_resumes_bit_identically_after_three_failures() {
    let ch = Chain::new("single", "48", "120", true);
    let (o, l) = (ch.out.to_str().unwrap(), ch.log.to_str().unwrap());
    let saves = interrupted(
        &ch.img,
        &ch.exe,
        &[ch.mib, ch.rounds, o, l],
        SaveMode::Image,
        150,
        &[100, 100],
    );
    assert_eq!(saves, 3);
    ch.assert_same_as_reference();
}

#[test]
fn threads_resume_bit_identically() {
    let d = dir("threads");
    let exe = build(&d, "threads", THREADS);
    let r_out = d.join("ref.out");
    reference(&exe, &["3", "12", "400", r_out.to_str().unwrap()]);
    let out = d.join("wsp.out");
    let img = d.join("img");
    let mut c = cfg(&img, &exe, &["3", "12", "400", out.to_str().unwrap()], 150);
    c.write_back = WriteBack::All;
    let r = saved(wsp::run(&c, &mut |_| {}).unwrap(), 1);
    assert_eq!(r.threads, 4, "main and three workers");
    assert!(r.not_restorable.is_empty(), "{:?}", r.not_restorable);
    assert!(
        r.written_back_bytes > 0,
        "write-back all reports the bytes it wrote back"
    );
    let info = wsp::info(&img).unwrap();
    assert_eq!(
        info.tids,
        vec![1, 2, 3, 4],
        "thread ids are small and reproducible"
    );
    let r = saved(
        wsp::resume(&img, &resume_opts(Some(80)), &mut |_| {}).unwrap(),
        2,
    );
    assert!(r.threads >= 2);
    let end = wsp::resume(&img, &resume_opts(None), &mut |_| {}).unwrap();
    assert_eq!(end, RunEnd::Exited(0));
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&r_out).unwrap());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn hibernate_baseline_resumes_bit_identically() {
    let ch = Chain::new("hibernate", "32", "160", true);
    let img = &ch.img;
    let mut c = ch.cfg(150);
    c.save = SaveMode::Hibernate;
    let r = saved(wsp::run(&c, &mut |_| {}).unwrap(), 1);
    assert!(
        r.copied_bytes >= 32 << 20,
        "the baseline copies all memory: {}",
        r.copied_bytes
    );
    assert_eq!(wsp::info(img).unwrap().mode, "hibernate");
    saved(
        wsp::resume(img, &resume_opts(Some(100)), &mut |_| {}).unwrap(),
        2,
    );
    let end = wsp::resume(img, &resume_opts(None), &mut |_| {}).unwrap();
    assert_eq!(end, RunEnd::Exited(0));
    ch.assert_same_as_reference();
}

#[test]
fn a_missed_window_leaves_the_marker_invalid_and_resume_refuses() {
    let ch = Chain::new("missed", "16", "400", false);
    let img = &ch.img;
    let mut c = ch.cfg(100);
    c.window = powerfail::Window::deadline_ms(0.0).unwrap();
    match wsp::run(&c, &mut |_| {}).unwrap() {
        RunEnd::Missed(r) => {
            assert!(!r.in_window);
            assert_eq!(r.window_ns, 0);
        }
        other => panic!("expected a missed save, got {other:?}"),
    }
    let info = wsp::info(img).unwrap();
    assert_eq!((info.state.as_str(), info.marker_valid), ("missed", false));
    match wsp::resume(img, &resume_opts(None), &mut |_| {}) {
        Err(WspError::NotSaved { state, .. }) => assert_eq!(state, "missed"),
        other => panic!("expected NotSaved, got {other:?}"),
    }
}

#[test]
fn resume_refuses_a_changed_program_and_a_damaged_image() {
    let d = dir("refuse");
    let exe = build(&d, "chain", CHAIN);
    let img = d.join("img");
    let (out, log) = (d.join("o"), d.join("l"));
    let c = cfg(
        &img,
        &exe,
        &["16", "400", out.to_str().unwrap(), log.to_str().unwrap()],
        100,
    );
    saved(wsp::run(&c, &mut |_| {}).unwrap(), 1);
    // A copy of the valid image, damaged in its metadata.
    let bad = d.join("bad");
    std::fs::copy(&img, &bad).unwrap();
    let mut bytes = std::fs::read(&bad).unwrap();
    bytes[wsp::layout::META_OFFSET as usize + 10] ^= 0x20;
    std::fs::write(&bad, &bytes).unwrap();
    match wsp::info(&bad) {
        Err(WspError::Damaged { what, offset, .. }) => {
            assert_eq!((what, offset), ("metadata crc", wsp::layout::META_OFFSET));
        }
        other => panic!("expected Damaged, got {other:?}"),
    }
    assert!(matches!(
        wsp::resume(&bad, &resume_opts(None), &mut |_| {}),
        Err(WspError::Damaged { .. })
    ));
    // The program file changes: same size, one byte different (rebuilt with another constant
    // would change the size too; this keeps the size so the later checks are exercised).
    let mut prog = std::fs::read(&exe).unwrap();
    let last = prog.len() - 1;
    prog[last] ^= 0xff;
    std::fs::write(&exe, &prog).unwrap();
    match wsp::resume(&img, &resume_opts(None), &mut |_| {}) {
        Err(WspError::ProgramChanged { what, .. }) => {
            assert!(what == "mtime_ns" || what == "crc32c", "{what}")
        }
        other => panic!("expected ProgramChanged, got {other:?}"),
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn run_refuses_dynamic_programs_and_existing_images() {
    let d = dir("static");
    let img = d.join("img");
    match wsp::run(&cfg(&img, Path::new("/bin/sh"), &[], 100), &mut |_| {}) {
        Err(WspError::NotStatic { why, .. }) => assert!(
            why.contains("ET_EXEC") || why.contains("PT_INTERP"),
            "{why}"
        ),
        other => panic!("expected NotStatic, got {other:?}"),
    }
    let exe = build(&d, "chain", CHAIN);
    std::fs::write(&img, b"x").unwrap();
    assert!(matches!(
        wsp::run(
            &cfg(&img, &exe, &["1", "1", "/dev/null", "/dev/null"], 100),
            &mut |_| {}
        ),
        Err(WspError::Exists { .. })
    ));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_program_that_ends_before_the_warning_reports_its_status() {
    let d = dir("ends");
    let exe = build(&d, "chain", CHAIN);
    let img = d.join("img");
    let (out, log) = (d.join("o"), d.join("l"));
    let mut c = cfg(
        &img,
        &exe,
        &["1", "2", out.to_str().unwrap(), log.to_str().unwrap()],
        100,
    );
    c.warn_after = None;
    assert_eq!(wsp::run(&c, &mut |_| {}).unwrap(), RunEnd::Exited(0));
    let info = wsp::info(&img).unwrap();
    assert_eq!(
        (info.state.as_str(), info.exit_status, info.marker_valid),
        ("ended", Some(0), false)
    );
    assert!(matches!(
        wsp::resume(&img, &resume_opts(None), &mut |_| {}),
        Err(WspError::NotSaved { .. })
    ));
    // The log path was not writable: the program's own status comes back.
    let mut c = cfg(
        &d.join("img2"),
        &exe,
        &["1", "2", "/dev/null", "/nonexistent/dir/log"],
        100,
    );
    c.warn_after = None;
    assert_eq!(wsp::run(&c, &mut |_| {}).unwrap(), RunEnd::Exited(9));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_crash_is_reported_as_the_signal_and_sigpwr_saves() {
    let d = dir("crash");
    let segv = build(
        &d,
        "segv",
        "#include <stdio.h>\nint main(void){ volatile int *p = 0; *p = 1; return 0; }\n",
    );
    let mut c = cfg(&d.join("img"), &segv, &[], 100);
    c.warn_after = None;
    // As pid 1 of its namespace the program would survive its own fault; the runner ends it
    // as the kernel ends an ordinary process.
    assert_eq!(
        wsp::run(&c, &mut |_| {}).unwrap(),
        RunEnd::Killed(libc::SIGSEGV)
    );
    // A real SIGPWR to this process is a warning for a run that listens for it.
    let exe = build(&d, "chain", CHAIN);
    let (out, log) = (d.join("o"), d.join("l"));
    let mut c = cfg(
        &d.join("img2"),
        &exe,
        &["16", "400", out.to_str().unwrap(), log.to_str().unwrap()],
        100,
    );
    c.warn_after = None;
    c.sigpwr = true;
    let sender = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: a signal to this process; the runtime installed its SIGPWR handler.
        unsafe { libc::kill(libc::getpid(), libc::SIGPWR) };
    });
    let mut sources = Vec::new();
    let end = wsp::run(&c, &mut |e| {
        if let wsp::Event::Warning { source } = e {
            sources.push(source.clone());
        }
    })
    .unwrap();
    sender.join().unwrap();
    saved(end, 1);
    assert_eq!(sources, vec!["sigpwr".to_string()]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn kernel_objects_are_named_and_resume_refuses_them_unless_dropped() {
    let d = dir("objects");
    // A pipe held open (never used again) while it computes; the result goes to argv[1].
    let src = r#"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int p[2];
    if (pipe(p) != 0) return 7;
    size_t n = 16 << 17; uint64_t *a = malloc(n * 8), h = 7;
    for (size_t i = 0; i < n; i++) a[i] = i;
    for (int r = 0; r < 600; r++) for (size_t i = 0; i < n; i++) { h = (h ^ a[i]) * 1099511628211ull; a[i] = h; }
    FILE *f = fopen(argv[1], "w"); fprintf(f, "%016llx\n", (unsigned long long)h); fclose(f);
    return 0;
}
"#;
    let exe = build(&d, "pipe", src);
    let r_out = d.join("ref");
    reference(&exe, &[r_out.to_str().unwrap()]);
    let out = d.join("out");
    let img = d.join("img");
    let r = saved(
        wsp::run(&cfg(&img, &exe, &[out.to_str().unwrap()], 150), &mut |_| {}).unwrap(),
        1,
    );
    assert_eq!(r.not_restorable.len(), 2, "{:?}", r.not_restorable);
    assert!(
        r.not_restorable.iter().all(|o| o.contains("pipe:[")),
        "{:?}",
        r.not_restorable
    );
    assert!(
        r.not_restorable[0].starts_with("fd 3: "),
        "{:?}",
        r.not_restorable
    );
    assert_eq!(wsp::info(&img).unwrap().not_restorable, r.not_restorable);
    match wsp::resume(&img, &resume_opts(None), &mut |_| {}) {
        Err(WspError::NotRestorable { objects }) => assert_eq!(objects, r.not_restorable),
        other => panic!("expected NotRestorable, got {other:?}"),
    }
    // The refusal changed nothing: dropping the pipe, the program finishes as it would have.
    let opts = ResumeOptions {
        drop_not_restorable: true,
        ..resume_opts(None)
    };
    assert_eq!(
        wsp::resume(&img, &opts, &mut |_| {}).unwrap(),
        RunEnd::Exited(0)
    );
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&r_out).unwrap());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn held_after_a_save_until_killed_from_outside_and_a_save_cut_short_is_refused() {
    let d = dir("hold");
    let exe = build(&d, "chain", CHAIN);
    let img = d.join("img");
    let (out, log) = (d.join("o"), d.join("l"));
    let mut c = cfg(
        &img,
        &exe,
        &["16", "400", out.to_str().unwrap(), log.to_str().unwrap()],
        150,
    );
    c.after_save = AfterSave::Hold;
    let mut pid = 0;
    let mut killed = false;
    let end = wsp::run(&c, &mut |e| match e {
        wsp::Event::Started { pid: p } => pid = *p,
        wsp::Event::Saved(_) => {
            // While the runner holds the program, a resume of the image is refused: the held
            // program, killed later, would write its exit words into the resumed one's memory.
            match wsp::resume(&img, &resume_opts(None), &mut |_| {}) {
                Err(WspError::Io { what, .. }) => assert!(what.contains("lock image"), "{what}"),
                other => panic!("a resume while the run holds its program: {other:?}"),
            }
            // The power goes: the held program is killed by someone else.
            // SAFETY: a signal to the program this run started.
            killed = unsafe { libc::kill(pid, libc::SIGKILL) } == 0;
        }
        _ => {}
    })
    .unwrap();
    assert!(killed);
    saved(end, 1);
    // A copy whose marker never made it (the power went between the header and the marker).
    let cut = d.join("cut");
    std::fs::copy(&img, &cut).unwrap();
    let mut bytes = std::fs::read(&cut).unwrap();
    let m = wsp::layout::MARKER_OFFSET as usize;
    bytes[m..m + wsp::layout::MARKER_SIZE].fill(0);
    std::fs::write(&cut, &bytes).unwrap();
    let info = wsp::info(&cut).unwrap();
    assert_eq!((info.state.as_str(), info.marker_valid), ("missed", false));
    match wsp::resume(&cut, &resume_opts(None), &mut |_| {}) {
        Err(WspError::NotSaved { state, .. }) => assert_eq!(state, "missed"),
        other => panic!("expected NotSaved, got {other:?}"),
    }
    // Cut shorter: the tables half written too (their CRC fails). Without a valid marker that
    // is a save that did not finish, not damage: no saved state, for info and resume alike.
    let meta = wsp::layout::META_OFFSET as usize;
    bytes[meta] ^= 0xff;
    std::fs::write(&cut, &bytes).unwrap();
    for r in [
        wsp::info(&cut).map(|_| ()),
        wsp::resume(&cut, &resume_opts(None), &mut |_| {}).map(|_| ()),
    ] {
        match r {
            Err(WspError::NotSaved { state, .. }) => assert_eq!(state, "missed"),
            other => panic!("expected NotSaved, got {other:?}"),
        }
    }
    // The intact image still resumes to the right end.
    assert_eq!(
        wsp::resume(&img, &resume_opts(None), &mut |_| {}).unwrap(),
        RunEnd::Exited(0)
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn threads_resume_bit_identically_from_the_hibernate_baseline() {
    let d = dir("threads-hibernate");
    let exe = build(&d, "threads", THREADS);
    let r_out = d.join("ref.out");
    reference(&exe, &["2", "8", "800", r_out.to_str().unwrap()]);
    let out = d.join("wsp.out");
    let img = d.join("img");
    let mut c = cfg(&img, &exe, &["2", "8", "800", out.to_str().unwrap()], 150);
    c.save = SaveMode::Hibernate;
    let r = saved(wsp::run(&c, &mut |_| {}).unwrap(), 1);
    assert_eq!(r.threads, 3);
    assert!(r.not_restorable.is_empty(), "{:?}", r.not_restorable);
    assert!(r.copied_bytes >= 16 << 20, "{}", r.copied_bytes);
    let end = wsp::resume(&img, &resume_opts(None), &mut |_| {}).unwrap();
    assert_eq!(end, RunEnd::Exited(0));
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&r_out).unwrap());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn tracked_write_back_writes_back_what_was_written_and_resumes() {
    let ch = Chain::new("tracked", "32", "200", true);
    let img = &ch.img;
    let mut c = ch.cfg(150);
    c.write_back = WriteBack::Tracked;
    let r = saved(wsp::run(&c, &mut |_| {}).unwrap(), 1);
    // The chain rewrites its whole 32 MiB buffer every round: all of it was written, while the
    // untouched rest of the image (most of the 8 MiB stack reserve) was not.
    assert!(r.written_back_bytes >= 32 << 20, "{}", r.written_back_bytes);
    assert!(
        r.written_back_bytes < r.image_bytes,
        "{} of {}",
        r.written_back_bytes,
        r.image_bytes
    );
    let opts = ResumeOptions {
        write_back: Some(WriteBack::Tracked),
        ..resume_opts(Some(100))
    };
    let r = saved(wsp::resume(img, &opts, &mut |_| {}).unwrap(), 2);
    assert!(r.written_back_bytes >= 32 << 20, "{}", r.written_back_bytes);
    assert_eq!(
        wsp::resume(img, &resume_opts(None), &mut |_| {}).unwrap(),
        RunEnd::Exited(0)
    );
    ch.assert_same_as_reference();
}

#[test]
fn tracked_write_back_skips_pages_not_written_since_the_resume() {
    let d = dir("tracked-idle");
    // Fills 64 MiB once, then writes one word for ever.
    let src = r#"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    size_t n = 64 << 20;
    char *a = malloc(n);
    memset(a, 1, n);
    if (argc > 100) write(1, a, n); /* the buffer escapes: the fill cannot be optimised away */
    volatile unsigned long *c = (volatile unsigned long *)a;
    for (unsigned long i = 0;; i++) c[0] = i;
}
"#;
    let exe = build(&d, "idle", src);
    let img = d.join("img");
    let mut c = cfg(&img, &exe, &[], 400);
    c.write_back = WriteBack::Tracked;
    let first = saved(wsp::run(&c, &mut |_| {}).unwrap(), 1);
    assert!(
        first.written_back_bytes >= 64 << 20,
        "{}",
        first.written_back_bytes
    );
    let opts = ResumeOptions {
        write_back: Some(WriteBack::Tracked),
        ..resume_opts(Some(200))
    };
    let second = saved(wsp::resume(&img, &opts, &mut |_| {}).unwrap(), 2);
    assert!(second.image_bytes >= 64 << 20);
    assert!(
        second.written_back_bytes < 1 << 20,
        "after the resume only a few pages were written, yet {} bytes were written back",
        second.written_back_bytes
    );
    let _ = std::fs::remove_dir_all(&d);
}
