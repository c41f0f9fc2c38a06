//! `kavach wsp`'s command line: help, refusals of wrong arguments, missing, dynamic and
//! position-independent programs, an existing pool for `run`, and missing or damaged images for
//! `resume` and `info` (each refusal exit 2 with a message naming the cause, and every file left
//! as it was).

mod wsp_support;

use std::ffi::OsStr;

use wsp_support::*;

fn args<'a>(a: &'a [&'a str]) -> Vec<&'a OsStr> {
    a.iter().map(OsStr::new).collect()
}

#[test]
fn help_has_examples_and_the_exit_statuses() {
    for sub in ["run", "resume", "info"] {
        let (c, out, err) = kavach(&args(&["wsp", sub, "--help"]));
        assert_eq!(c, 0, "{err}");
        assert!(out.contains("Examples:"), "{sub}: {out}");
        assert!(out.contains("Exit status"), "{sub}: {out}");
        assert!(out.contains("--json"), "{sub}: {out}");
    }
    let (_, out, _) = kavach(&args(&["wsp", "run", "--help"]));
    for opt in [
        "--pool",
        "--size",
        "--window-ms",
        "--hold-up-farads",
        "--save",
        "--write-back",
    ] {
        assert!(out.contains(opt), "run --help lacks {opt}");
    }
}

#[test]
fn wrong_arguments_are_refused_with_exit_2() {
    let s = Scratch::new("cli-args");
    let pool = s.path("p.wsp");
    let pool = pool.to_str().unwrap();
    let prog = program("hashchain");
    let prog = prog.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["wsp", "run", "--pool", pool], "PROGRAM"),
        (
            &[
                "wsp",
                "run",
                "--pool",
                pool,
                "--window-ms",
                "-1",
                "--",
                prog,
                "o",
            ],
            "window",
        ),
        (
            &[
                "wsp",
                "run",
                "--pool",
                pool,
                "--window-ms",
                "abc",
                "--",
                prog,
                "o",
            ],
            "abc",
        ),
        (
            &[
                "wsp",
                "run",
                "--pool",
                pool,
                "--size",
                "12 parsecs",
                "--",
                prog,
                "o",
            ],
            "parsecs",
        ),
        (
            &["wsp", "run", "--pool", pool, "--size", "0", "--", prog, "o"],
            "--size",
        ),
        (
            &[
                "wsp", "run", "--pool", pool, "--save", "disk", "--", prog, "o",
            ],
            "disk",
        ),
        (
            &[
                "wsp",
                "run",
                "--pool",
                pool,
                "--write-back",
                "some",
                "--",
                prog,
                "o",
            ],
            "some",
        ),
        (
            &[
                "wsp",
                "run",
                "--pool",
                pool,
                "--window-ms",
                "5",
                "--watts",
                "3",
                "--",
                prog,
                "o",
            ],
            "--watts",
        ),
        (
            &[
                "wsp",
                "run",
                "--pool",
                pool,
                "--hold-up-farads",
                "0.001",
                "--",
                prog,
                "o",
            ],
            "--volts",
        ),
        (
            &[
                "wsp",
                "run",
                "--pool",
                pool,
                "--hold-up-farads",
                "0.001",
                "--volts",
                "5",
                "--volts-min",
                "9",
                "--watts",
                "1",
                "--",
                prog,
                "o",
            ],
            "volts",
        ),
        (&["wsp", "resume"], "--pool"),
        (&["wsp", "info"], "--pool"),
    ];
    for (a, needle) in cases {
        let (c, out, err) = kavach(&args(a));
        assert_eq!(c, 2, "{a:?}: stdout {out}\nstderr {err}");
        assert!(
            err.contains(needle),
            "{a:?}: the message names `{needle}`: {err}"
        );
    }
    assert!(!s.path("p.wsp").exists(), "a refused run created its pool");
}

#[test]
fn a_missing_program_is_refused() {
    let s = Scratch::new("cli-missing");
    let pool = s.path("p.wsp");
    let pool = pool.to_str().unwrap();
    let (c, _, err) = kavach(&args(&[
        "wsp",
        "run",
        "--pool",
        pool,
        "--",
        "./no/such/program",
    ]));
    assert_eq!(c, 2, "{err}");
    assert!(
        err.contains("no/such/program") && err.contains("no such file"),
        "{err}"
    );
    let (c, _, err) = kavach(&args(&[
        "wsp",
        "run",
        "--pool",
        pool,
        "--",
        "kavach-no-such-name",
    ]));
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("not found in PATH"), "{err}");
    // A misspelt option before `--` is not taken for the program's name.
    let (c, _, err) = kavach(&args(&[
        "wsp",
        "run",
        "--pool",
        pool,
        "--windw-ms",
        "10",
        "--",
        "./prog",
    ]));
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("unknown option `--windw-ms`"), "{err}");
    let (c, _, err) = kavach(&args(&["wsp", "run", "--pool", pool, "--", "/dev/shm"]));
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("not a regular file"), "{err}");
    let script = s.path("script.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    let (c, _, err) = kavach(&args(&[
        "wsp",
        "run",
        "--pool",
        pool,
        "--",
        script.to_str().unwrap(),
    ]));
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("not executable"), "{err}");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (c, _, err) = kavach(&args(&[
        "wsp",
        "run",
        "--pool",
        pool,
        "--",
        script.to_str().unwrap(),
    ]));
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("not an ELF"), "{err}");
    assert!(!s.path("p.wsp").exists());
}

#[test]
fn dynamic_and_position_independent_programs_are_refused() {
    let s = Scratch::new("cli-dynamic");
    let pool = s.path("p.wsp");
    let pool = pool.to_str().unwrap();
    let dynamic = program_built("hashchain", "hashchain-dynamic", &[]);
    let (c, _, err) = kavach(&args(&[
        "wsp",
        "run",
        "--pool",
        pool,
        "--",
        dynamic.to_str().unwrap(),
        "o",
    ]));
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("dynamically linked"), "{err}");
    assert!(err.contains("-static -no-pie"), "{err}");
    let pie = program_built("hashchain", "hashchain-static-pie", &["-static-pie"]);
    let (c, _, err) = kavach(&args(&[
        "wsp",
        "run",
        "--pool",
        pool,
        "--",
        pie.to_str().unwrap(),
        "o",
    ]));
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("position-independent"), "{err}");
    assert!(!s.path("p.wsp").exists());
}

#[test]
fn run_never_overwrites_an_existing_pool() {
    let s = Scratch::new("cli-exists");
    let pool = s.path("p.wsp");
    std::fs::write(&pool, b"precious bytes").unwrap();
    let prog = program("hashchain");
    let (c, _, err) = kavach(&args(&[
        "wsp",
        "run",
        "--pool",
        pool.to_str().unwrap(),
        "--",
        prog.to_str().unwrap(),
        "o",
    ]));
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("exists"), "{err}");
    assert_eq!(std::fs::read(&pool).unwrap(), b"precious bytes");
}

#[test]
fn resume_and_info_refuse_missing_and_damaged_images_and_change_nothing() {
    let s = Scratch::new("cli-damaged");
    let missing = s.path("none.wsp");
    let m = missing.to_str().unwrap();
    let (c, _, err) = kavach(&args(&["wsp", "resume", "--pool", m]));
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("no such file"), "{err}");
    let (c, _, err) = kavach(&args(&["wsp", "info", "--pool", m]));
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("no such file"), "{err}");
    assert!(!missing.exists());

    // Not an image at all: 64 KiB of pseudo-random bytes, and an empty file.
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let junk: Vec<u8> = (0..65536).map(|_| rng.next() as u8).collect();
    for (name, bytes) in [("junk.wsp", junk.as_slice()), ("empty.wsp", &[][..])] {
        let p = s.path(name);
        std::fs::write(&p, bytes).unwrap();
        let ps = p.to_str().unwrap();
        let (c, _, err) = kavach(&args(&["wsp", "resume", "--pool", ps]));
        assert_eq!(c, 2, "resume {name}: {err}");
        assert!(
            err.contains(ps),
            "resume {name}: the message names the file: {err}"
        );
        let (c, out, err) = kavach(&args(&["wsp", "info", "--pool", ps]));
        assert_eq!(c, 1, "info {name}: {out}\n{err}");
        assert!(err.contains("damaged"), "info {name}: {err}");
        let (c, out, _) = kavach(&args(&["wsp", "info", "--json", "--pool", ps]));
        assert_eq!(c, 1);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["damaged"], true, "{v}");
        assert!(std::fs::read(&p).unwrap() == bytes, "{name} was changed");
    }
}

#[test]
fn run_exits_with_the_programs_own_status() {
    let _serial = serial();
    let s = Scratch::new("cli-status");
    let prog = program("hashchain");
    let prog = prog.to_str().unwrap();
    // Bad arguments to the program: it exits 2 by itself.
    let pool = s.path("a.wsp");
    let (c, out, err) = kavach(&args(&[
        "wsp",
        "run",
        "--json",
        "--size",
        "64MiB",
        "--pool",
        pool.to_str().unwrap(),
        "--",
        prog,
        "-m",
        "0",
        "o",
    ]));
    assert_eq!(c, 2, "{out}\n{err}");
    let end = json_lines(&out, "command");
    assert_eq!(end.len(), 1, "{out}");
    assert_eq!(end[0]["end"], "exited", "{out}");
    assert_eq!(end[0]["status"], 2, "{out}");
    assert!(err.contains("-m expects a number"), "{err}");
    // An output file it cannot create: it exits 1.
    let pool = s.path("b.wsp");
    let bad_out = s.path("no/such/dir/out.txt");
    let (c, out, err) = kavach(&args(&[
        "wsp",
        "run",
        "--json",
        "--size",
        "64MiB",
        "--pool",
        pool.to_str().unwrap(),
        "--",
        prog,
        "-m",
        "1",
        "-r",
        "1",
        bad_out.to_str().unwrap(),
    ]));
    assert_eq!(c, 1, "{out}\n{err}");
    assert_eq!(json_lines(&out, "command")[0]["status"], 1, "{out}");
    // The ended image: info exits 0 and says so.
    let (c, v, err) = info(&pool);
    assert_eq!(c, 0, "{v}\n{err}");
    assert_eq!(v["state"], "ended", "{v}");
    assert_eq!(v["exit_status"], 1, "{v}");
}

#[test]
fn an_injected_warning_with_after_save_kill_returns_the_save_and_resume_finishes() {
    let _serial = serial();
    let s = Scratch::new("cli-inject");
    let prog = program("hashchain");
    let reference_out = s.path("ref.txt");
    let (want, _) = reference(
        &prog,
        &args(&["-m", "8", "-r", "200", reference_out.to_str().unwrap()]),
    );
    let pool = s.path("p.wsp");
    let out = s.path("out.txt");
    let (c, stdout, err) = kavach(&args(&[
        "wsp",
        "run",
        "--json",
        "--size",
        "128MiB",
        "--window-ms",
        "500",
        "--warn-after-ms",
        "300",
        "--after-save",
        "kill",
        "--pool",
        pool.to_str().unwrap(),
        "--",
        prog.to_str().unwrap(),
        "-m",
        "8",
        "-r",
        "200",
        out.to_str().unwrap(),
    ]));
    assert_eq!(c, 0, "{stdout}\n{err}");
    let end = json_lines(&stdout, "command");
    assert_eq!(end[0]["end"], "saved", "{stdout}");
    assert_eq!(end[0]["report"]["counter"], 1, "{stdout}");
    assert_eq!(end[0]["report"]["in_window"], true, "{stdout}");
    assert!(!out.exists(), "the program cannot have finished in 300 ms");
    assert!(
        json_lines(&err, "event")
            .iter()
            .any(|e| e["event"] == "warning"),
        "the warning is an event: {err}"
    );
    // The text form of info names the state and the marker.
    let (c, text, err) = kavach(&args(&["wsp", "info", "--pool", pool.to_str().unwrap()]));
    assert_eq!(c, 0, "{err}");
    assert!(text.contains("saved (marker valid)"), "{text}");
    assert!(text.contains("threads:    1"), "{text}");
    let (c, stdout, err) = kavach(&args(&["wsp", "resume", "--pool", pool.to_str().unwrap()]));
    assert_eq!(c, 0, "{err}");
    assert!(err.contains("resumed save 1"), "{err}");
    assert_eq!(stdout, want);
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(&reference_out).unwrap()
    );
}

#[test]
fn resume_refuses_a_program_that_changed_and_leaves_the_image_alone() {
    let _serial = serial();
    let s = Scratch::new("cli-changed");
    let prog = s.path("hashchain");
    std::fs::copy(program("hashchain"), &prog).unwrap();
    let pool = s.path("p.wsp");
    let out = s.path("out.txt");
    let (c, stdout, err) = kavach(&args(&[
        "wsp",
        "run",
        "--json",
        "--size",
        "128MiB",
        "--window-ms",
        "500",
        "--warn-after-ms",
        "200",
        "--after-save",
        "kill",
        "--pool",
        pool.to_str().unwrap(),
        "--",
        prog.to_str().unwrap(),
        "-m",
        "8",
        "-r",
        "200",
        out.to_str().unwrap(),
    ]));
    assert_eq!(c, 0, "{stdout}\n{err}");
    // The program file gains a byte (a rebuild, an upgrade): its identity no longer matches.
    let mut bytes = std::fs::read(&prog).unwrap();
    bytes.push(0);
    std::fs::write(&prog, &bytes).unwrap();
    let before = std::fs::read(&pool).unwrap();
    let (c, _, err) = kavach(&args(&["wsp", "resume", "--pool", pool.to_str().unwrap()]));
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("program changed"), "{err}");
    assert!(
        std::fs::read(&pool).unwrap() == before,
        "a refused resume changed the image"
    );
    assert!(!out.exists());
}
