//! Save-time figures: the handler latency (warning -> every thread stopped -> contexts written
//! -> marker persisted) against threads and dirty memory, for the image mode without and with
//! write-back of all lines, and for the hibernate baseline.
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
static void *work(void *arg) {
    uint64_t id = (uintptr_t)arg, h = id;
    uint64_t *a = malloc(words * 8);
    for (size_t i = 0; i < words; i++) a[i] = i * 0x9e3779b97f4a7c15ull;
    for (;;) for (size_t i = 0; i < words; i++) { h = (h ^ a[i]) * 1099511628211ull; a[i] = h; }
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
    let cases: Vec<(usize, u64)> = vec![(1, 16), (1, 64), (1, 256), (2, 64), (4, 64), (8, 64)];
    for (mode, wb) in [
        (SaveMode::Image, WriteBack::None),
        (SaveMode::Image, WriteBack::All),
        (SaveMode::Hibernate, WriteBack::None),
    ] {
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
