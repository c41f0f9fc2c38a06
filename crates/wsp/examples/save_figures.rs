//! Save-time figures: the handler latency (warning -> every thread stopped -> contexts written
//! -> marker persisted) against threads and dirty memory, for the image mode without write-back,
//! with write-back of all lines and of the tracked (written) pages, and for the hibernate
//! baseline. The workers rewrite their whole buffer continually, so tracked ~ all here.
//!
//! `cargo run --release -p kavach-wsp --example save_figures [REPS]` (needs gcc; about 30 s).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use wsp::{AfterSave, RunConfig, RunEnd, SaveMode, WriteBack};

const PROGRAM: &str = r#"
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
static size_t words;
static volatile uint64_t sink[64]; /* keeps the loop's stores observable */
static void *work(void *arg) {
    uint64_t id = (uintptr_t)arg, h = id;
    uint64_t *a = malloc(words * 8);
    for (size_t i = 0; i < words; i++) a[i] = i * 0x9e3779b97f4a7c15ull;
    for (;;) {
        for (size_t i = 0; i < words; i++) { h = (h ^ a[i]) * 1099511628211ull; a[i] = h; }
        sink[id] = h;
    }
    return 0;
}
int main(int argc, char **argv) {
    int t = atoi(argv[1]); words = (strtoul(argv[2], 0, 10) << 17) / t;
    pthread_t th[64];
    for (int i = 0; i < t; i++) pthread_create(&th[i], 0, work, (void *)(uintptr_t)i);
    pthread_join(th[0], 0);
    return 0;
}
"#;

fn main() {
    let reps: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let dir = PathBuf::from(format!("/dev/shm/wsp-figures-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let src = dir.join("p.c");
    std::fs::write(&src, PROGRAM).expect("write source");
    let exe = dir.join("p");
    let ok = Command::new("gcc")
        .args(["-O2", "-static", "-no-pie", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("gcc failed");
        std::process::exit(2);
    }
    println!(
        "mode,write_back,threads,mib,stop_us,context_us,marker_us,written_back_mib,copied_mib (median of {reps})"
    );
    let cases: Vec<(usize, u64)> = match std::env::var("FIGURES_CASE") {
        Ok(c) => {
            let (t, m) = c.split_once(',').unwrap_or(("1", "16"));
            vec![(t.parse().unwrap_or(1), m.parse().unwrap_or(16))]
        }
        Err(_) => vec![(1, 16), (1, 64), (1, 256), (2, 64), (4, 64), (8, 64)],
    };
    for (mode, wb) in [
        (SaveMode::Image, WriteBack::None),
        (SaveMode::Image, WriteBack::All),
        (SaveMode::Image, WriteBack::Tracked),
        (SaveMode::Hibernate, WriteBack::None),
    ] {
        let mut all = Vec::new();
        for &(t, mib) in &cases {
            let mut rows = Vec::new();
            for r in 0..reps {
                if let Some(row) = one(&dir, &exe, mode, wb, t, mib, r) {
                    rows.push(row);
                }
            }
            if rows.is_empty() {
                continue;
            }
            all.extend(rows.iter().map(|r| r[2]));
            let med = |k: usize| {
                let mut v: Vec<f64> = rows.iter().map(|r| r[k]).collect();
                v.sort_by(|a, b| a.total_cmp(b));
                v[v.len() / 2]
            };
            println!(
                "{mode:?},{wb:?},{t},{mib},{:.0},{:.0},{:.0},{:.1},{:.1}",
                med(0),
                med(1),
                med(2),
                med(3),
                med(4)
            );
        }
        // The save sets the marker iff the time from the warning to that decision is below the
        // window's budget (80 % of it); marker_ns is that time plus the marker's own write, so
        // this slightly understates the rate.
        let rate = |ms: f64| {
            let ok = all.iter().filter(|&&us| us < ms * 1000.0 * 0.8).count();
            format!("{ms} ms: {ok}/{}", all.len())
        };
        println!(
            "# {mode:?}/{wb:?}: saves inside a window of {}, {}, {}, {}, {}",
            rate(1.0),
            rate(5.0),
            rate(10.0),
            rate(33.0),
            rate(100.0)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn one(
    dir: &Path,
    exe: &Path,
    mode: SaveMode,
    wb: WriteBack,
    t: usize,
    mib: u64,
    r: usize,
) -> Option<[f64; 5]> {
    let img = dir.join(format!("img-{r}"));
    let _ = std::fs::remove_file(&img);
    let mut c = RunConfig::new(
        &img,
        exe,
        vec![t.to_string().into(), mib.to_string().into()],
    );
    c.image_size = (mib + 64) << 20;
    c.window = powerfail::Window::deadline_ms(10_000.0).ok()?;
    c.save = mode;
    c.write_back = wb;
    c.after_save = AfterSave::Kill;
    c.sigpwr = false;
    // Long enough for every worker to have filled its buffer.
    c.warn_after = Some(Duration::from_millis(300 + mib * 4));
    let end = wsp::run(&c, &mut |_| {});
    let _ = std::fs::remove_file(&img);
    match end {
        Ok(RunEnd::Saved(s)) if std::env::var_os("FIGURES_VERBOSE").is_some() => {
            eprintln!("{mode:?} {t} threads {mib} MiB: {s:?}");
            None
        }
        Ok(RunEnd::Saved(s)) => Some([
            s.stop_ns as f64 / 1e3,
            s.context_ns as f64 / 1e3,
            s.marker_ns as f64 / 1e3,
            s.written_back_bytes as f64 / (1 << 20) as f64,
            s.copied_bytes as f64 / (1 << 20) as f64,
        ]),
        other => {
            eprintln!("{mode:?} {t} threads {mib} MiB: {other:?}");
            None
        }
    }
}
