//! `kavach heap create --redundancy MODE [--redundancy-period-ms MS]`: the mode is recorded in
//! the pool, `heap stats` (text and JSON) and `pool info` show it, a program opening the heap
//! gets it back, and bad combinations are refused with exit 2 without leaving a file.

mod common;

use common::{Scratch, assert_code, assert_refused, kavach, run_json, run_ok, stderr};
use heap::{HeapFile, Redundancy};
use std::path::Path;

#[test]
fn each_mode_is_recorded_and_shown() {
    let s = Scratch::new("redundancy");
    for (mode, shown) in [
        ("off", "off"),
        ("lazy", "lazy (period 300 ms)"),
        ("eager", "eager"),
        ("txb-object", "txb-object"),
        ("txb-page", "txb-page"),
    ] {
        let p = s.path(&format!("{mode}.pool"));
        let mut args = vec![
            "heap",
            "create",
            &p,
            "--size",
            "32MiB",
            "--redundancy",
            mode,
        ];
        if mode == "lazy" {
            args.extend(["--redundancy-period-ms", "300"]);
        }
        let v = run_json(&args, 0);
        assert_eq!(v["redundancy"], shown, "{mode}");
        let v = run_json(&["heap", "stats", &p], 0);
        assert_eq!(v["redundancy"], shown, "{mode}");
        let text = run_ok(&["heap", "stats", &p], 0);
        assert!(
            text.lines()
                .any(|l| l.starts_with("redundancy") && l.ends_with(shown)),
            "{mode}: {text}"
        );
        let info = run_ok(&["pool", "info", &p], 0);
        match mode {
            "off" => assert!(!info.contains("heap.integrity") && !info.contains("heap.objsums")),
            "txb-object" => assert!(info.contains("heap.objsums"), "{info}"),
            _ => assert!(info.contains(&format!("mode {mode}")), "{mode}: {info}"),
        }
        let _exclusive = common::exclusive();
        let hf = HeapFile::open(Path::new(&p), "heap").unwrap();
        assert_eq!(Some(hf.redundancy()), Redundancy::parse(mode));
        hf.close().unwrap();
    }
}

#[test]
fn bad_combinations_are_refused() {
    let s = Scratch::new("redundancy-bad");
    let p = s.path("x.pool");
    // Refused by the argument parser (its usage lines follow the message).
    let o = kavach(&[
        "heap",
        "create",
        &p,
        "--size",
        "32MiB",
        "--redundancy",
        "raid6",
    ]);
    assert_code(&o, 2);
    assert!(
        stderr(&o).contains("not a redundancy mode"),
        "{}",
        stderr(&o)
    );
    assert_refused(
        &kavach(&[
            "heap",
            "create",
            &p,
            "--size",
            "32MiB",
            "--redundancy",
            "eager",
            "--redundancy-period-ms",
            "500",
        ]),
        2,
        "applies to --redundancy lazy only",
    );
    assert_refused(
        &kavach(&[
            "heap",
            "create",
            &p,
            "--size",
            "32MiB",
            "--redundancy",
            "lazy",
            "--redundancy-period-ms",
            "5",
        ]),
        2,
        "period",
    );
    assert!(!Path::new(&p).exists(), "nothing is left behind");
}
