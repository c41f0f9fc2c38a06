//! Transparency of whole-process persistence: a computing program interrupted by injected power
//! failures (SIGPWR to `kavach wsp run`, the window, SIGKILL of the process group) and resumed
//! each time with `kavach wsp resume` gives output bit-identical to an uninterrupted run; a save
//! that misses its window leaves an image resume refuses (and does not change), and the program
//! run again from scratch still gives the right output; kernel objects a program holds are named
//! as not restorable.

mod wsp_support;

use std::ffi::OsStr;
use std::time::Duration;

use wsp_support::*;

/// Three to five failures.
fn failures(rng: &mut Rng) -> usize {
    3 + (rng.next() % 3) as usize
}

/// Run `name args-before-OUT OUT` uninterrupted and then interrupted, compare stdout and OUT
/// (and the extra files `also`, written by the program, relative to the scratch directory).
///
/// The workloads are deterministic, so a "resume" that simply started the program again would
/// also give the reference output: every workload is therefore given `-s starts.txt`, to which
/// `main` appends a line when it begins. A resumed program does not begin again, so that file
/// must hold one line, as the reference's does.
fn transparent(tag: &str, name: &str, args: &[&str], also: &[&str]) {
    let _serial = serial();
    let mut rng = Rng::from_env_or_clock(tag);
    let prog = program(name);
    let scratch = Scratch::new(tag);
    // Arguments with `@` standing for the scratch directory.
    let with = |sub: &str| -> Vec<std::ffi::OsString> {
        args.iter()
            .map(|a| {
                a.replace('@', scratch.dir.join(sub).to_str().unwrap())
                    .into()
            })
            .collect()
    };
    std::fs::create_dir_all(scratch.path("ref")).unwrap();
    std::fs::create_dir_all(scratch.path("wsp")).unwrap();
    let ref_args = with("ref");
    let ref_refs: Vec<&OsStr> = ref_args.iter().map(|a| a.as_os_str()).collect();
    let (ref_stdout, work) = reference(&prog, &ref_refs);
    assert!(
        ref_stdout.contains("digest="),
        "the reference printed no digest: {ref_stdout}"
    );
    let n = failures(&mut rng);
    let run_args = with("wsp");
    let run_refs: Vec<&OsStr> = run_args.iter().map(|a| a.as_os_str()).collect();
    let pool = scratch.path("image.wsp");
    let got = interrupted_run(&pool, &prog, &run_refs, n, work, &mut rng);
    assert_eq!(
        got.failures, n,
        "the program ended after {} of {n} failures (reference time {work:?})",
        got.failures
    );
    assert_eq!(
        got.stdout, ref_stdout,
        "stdout differs from the uninterrupted run"
    );
    for f in std::iter::once("out.txt").chain(also.iter().copied()) {
        let want = std::fs::read(scratch.path("ref").join(f)).unwrap();
        let have = std::fs::read(scratch.path("wsp").join(f)).unwrap();
        assert!(
            want == have,
            "{f} differs from the uninterrupted run's:\n{}\nvs\n{}",
            String::from_utf8_lossy(&want),
            String::from_utf8_lossy(&have)
        );
    }
    // Each save reported itself inside the window, with the counter counting up.
    for (i, s) in got.saves.iter().enumerate() {
        assert_eq!(s["counter"], (i + 1) as u64, "{s}");
        assert_eq!(s["in_window"], true, "{s}");
    }
    eprintln!(
        "{tag}: {n} power failures, {} saves, output identical ({})",
        got.saves.len(),
        ref_stdout.trim()
    );
}

#[test]
fn a_single_threaded_hash_chain_survives_power_failures_bit_identically() {
    // The pass log is written through a descriptor opened at the start: a resume must reopen
    // it at its offset for the log to come out the same.
    transparent(
        "chain1",
        "hashchain",
        &[
            "-m",
            "32",
            "-r",
            "60",
            "-l",
            "@/log.txt",
            "-s",
            "@/starts.txt",
            "@/out.txt",
        ],
        &["log.txt", "starts.txt"],
    );
}

#[test]
fn a_multi_threaded_hash_chain_survives_power_failures_bit_identically() {
    transparent(
        "chain4",
        "hashchain_mt",
        &[
            "-t",
            "4",
            "-m",
            "32",
            "-r",
            "60",
            "-s",
            "@/starts.txt",
            "@/out.txt",
        ],
        &["starts.txt"],
    );
}

#[test]
fn a_sort_survives_power_failures_bit_identically() {
    transparent(
        "sort",
        "sortsum",
        &["-n", "2", "-r", "3", "-s", "@/starts.txt", "@/out.txt"],
        &["starts.txt"],
    );
}

#[test]
fn a_missed_window_is_refused_and_a_fresh_run_is_still_right() {
    let _serial = serial();
    let prog = program("hashchain_mt");
    let scratch = Scratch::new("missed");
    let out_ref = scratch.path("ref.txt");
    let (ref_stdout, _) = reference(
        &prog,
        &[
            "-t".as_ref(),
            "2".as_ref(),
            "-m".as_ref(),
            "16".as_ref(),
            "-r".as_ref(),
            "100".as_ref(),
            out_ref.as_os_str(),
        ],
    );
    let pool = scratch.path("image.wsp");
    let out = scratch.path("out.txt");
    let args: Vec<&OsStr> = vec![
        "wsp".as_ref(),
        "run".as_ref(),
        "--json".as_ref(),
        "--size".as_ref(),
        "256MiB".as_ref(),
        "--window-ms".as_ref(),
        "0".as_ref(),
        "--pool".as_ref(),
        pool.as_os_str(),
        "--".as_ref(),
        prog.as_os_str(),
        "-t".as_ref(),
        "2".as_ref(),
        "-m".as_ref(),
        "16".as_ref(),
        "-r".as_ref(),
        "100".as_ref(),
        out.as_os_str(),
    ];
    let mut runner = Runner::spawn(&args);
    assert!(
        runner.wait_for_stderr("\"event\":\"started\"", Duration::from_secs(30)),
        "{}",
        runner.stderr_now()
    );
    std::thread::sleep(Duration::from_millis(100));
    assert!(!runner.exited(), "the program ended before the warning");
    runner.signal(libc::SIGPWR);
    std::thread::sleep(Duration::from_millis(200));
    runner.kill_group();
    let (_, _, err) = runner.finish(Duration::from_secs(30));
    assert!(
        !json_lines(&err, "event")
            .iter()
            .any(|e| e["event"] == "saved"),
        "a zero window cannot hold a save; stderr:\n{err}"
    );
    let missed: Vec<_> = json_lines(&err, "event")
        .into_iter()
        .filter(|e| e["event"] == "missed")
        .collect();
    assert_eq!(missed.len(), 1, "one `missed` event; stderr:\n{err}");
    assert_eq!(missed[0]["in_window"], false, "{}", missed[0]);
    assert!(!out.exists(), "the program cannot have finished");

    // info: not resumable (exit 1), state not `saved`.
    let (c, v, ierr) = info(&pool);
    assert_eq!(c, 1, "info on a missed image: {v}\n{ierr}");
    assert_eq!(v["state"], "missed", "{v}");
    assert_eq!(v["marker_valid"], false, "{v}");

    // resume: refused, exit 2, naming the marker, the file left as it was.
    let before = std::fs::read(&pool).unwrap();
    let (c, rout, rerr) = kavach(&[
        "wsp".as_ref(),
        "resume".as_ref(),
        "--pool".as_ref(),
        pool.as_os_str(),
    ]);
    assert_eq!(
        c, 2,
        "resume of a missed image: stdout {rout}\nstderr {rerr}"
    );
    assert!(
        rerr.contains("valid marker is not set"),
        "the refusal names the marker: {rerr}"
    );
    assert!(
        std::fs::read(&pool).unwrap() == before,
        "resume changed the image it refused"
    );

    // The program's own restart logic: run from scratch, it recomputes the same result.
    std::fs::remove_file(&pool).unwrap();
    let (c, sout, serr) = kavach(
        &args
            .iter()
            .map(|a| {
                if *a == OsStr::new("0") {
                    OsStr::new("250")
                } else {
                    a
                }
            })
            .collect::<Vec<_>>(),
    );
    assert_eq!(c, 0, "the fresh run: {serr}");
    assert_eq!(program_lines(&sout), ref_stdout);
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(&out_ref).unwrap()
    );
}

#[test]
fn pipes_and_sockets_are_named_not_restorable() {
    let _serial = serial();
    let prog = program("holdfd");
    let scratch = Scratch::new("holdfd");
    let pool = scratch.path("image.wsp");
    let out_file = scratch.path("out.txt");
    let out = out_file.as_path();
    let window = TEST_WINDOW_MS.to_string();
    let args: Vec<&OsStr> = vec![
        "wsp".as_ref(),
        "run".as_ref(),
        "--json".as_ref(),
        "--size".as_ref(),
        "64MiB".as_ref(),
        "--window-ms".as_ref(),
        window.as_ref(),
        "--pool".as_ref(),
        pool.as_os_str(),
        "--".as_ref(),
        prog.as_os_str(),
        "-k".as_ref(),
        "both".as_ref(),
        "-s".as_ref(),
        "2".as_ref(),
        out.as_os_str(),
    ];
    let mut runner = Runner::spawn(&args);
    assert!(
        runner.wait_for_stderr("\"event\":\"started\"", Duration::from_secs(30)),
        "{}",
        runner.stderr_now()
    );
    std::thread::sleep(Duration::from_millis(300));
    runner.signal(libc::SIGPWR);
    std::thread::sleep(Duration::from_millis(TEST_WINDOW_MS));
    runner.kill_group();
    let (_, _, err) = runner.finish(Duration::from_secs(30));
    let saved: Vec<_> = json_lines(&err, "event")
        .into_iter()
        .filter(|e| e["event"] == "saved")
        .collect();
    assert_eq!(saved.len(), 1, "stderr:\n{err}");
    let named = saved[0]["not_restorable"].to_string();
    assert!(named.contains("pipe"), "the pipe is named: {named}");
    assert!(named.contains("socket"), "the socket is named: {named}");
    let (c, v, _) = info(&pool);
    assert_eq!(c, 0, "{v}");
    let listed = v["not_restorable"].to_string();
    assert!(
        listed.contains("pipe") && listed.contains("socket"),
        "info lists them: {v}"
    );

    // Resume refuses them by default, naming them, and changes nothing.
    let before = std::fs::read(&pool).unwrap();
    let resume: Vec<&OsStr> = vec![
        "wsp".as_ref(),
        "resume".as_ref(),
        "--json".as_ref(),
        "--pool".as_ref(),
        pool.as_os_str(),
    ];
    let (c, _, err) = kavach(&resume);
    assert_eq!(c, 2, "{err}");
    assert!(
        err.contains("not restorable") && err.contains("pipe") && err.contains("socket"),
        "{err}"
    );
    assert!(
        std::fs::read(&pool).unwrap() == before,
        "a refused resume changed the image"
    );

    // Told to drop them, the program continues (it never touches them again) and ends well.
    let mut dropping = resume.clone();
    dropping.push("--drop-not-restorable".as_ref());
    let (c, out, err) = kavach(&dropping);
    assert_eq!(c, 0, "{err}");
    let end = json_lines(&out, "command");
    assert_eq!(end.len(), 1, "{out}");
    assert_eq!(end[0]["end"], "exited", "{out}");
    let line = std::fs::read_to_string(&out_file).unwrap();
    assert!(line.starts_with("holdfd kind=both"), "{line}");
    assert_eq!(program_lines(&out), line);
}

#[test]
fn power_lost_during_the_save_gives_either_a_valid_image_or_a_refusal_never_a_torn_resume() {
    let _serial = serial();
    let prog = program("hashchain");
    let scratch = Scratch::new("torn");
    let ref_out = scratch.path("ref.txt");
    let (want, _) = reference(
        &prog,
        &[
            "-m".as_ref(),
            "16".as_ref(),
            "-r".as_ref(),
            "80".as_ref(),
            ref_out.as_os_str(),
        ],
    );
    let window = TEST_WINDOW_MS.to_string();
    let (mut saved, mut refused) = (0, 0);
    // The power goes this long after the warning: from "at once" to "after a typical save".
    for (i, after_us) in [0u64, 100, 300, 1000, 3000].into_iter().enumerate() {
        let pool = scratch.path(&format!("p{i}.wsp"));
        let out = scratch.path(&format!("out{i}.txt"));
        let starts = scratch.path(&format!("starts{i}.txt"));
        let mut run_args: Vec<&OsStr> = vec![
            "wsp".as_ref(),
            "run".as_ref(),
            "--json".as_ref(),
            "--size".as_ref(),
            "256MiB".as_ref(),
            "--window-ms".as_ref(),
            window.as_ref(),
            "--pool".as_ref(),
            pool.as_os_str(),
            "--".as_ref(),
            prog.as_os_str(),
        ];
        let prog_args: Vec<&OsStr> = vec![
            "-m".as_ref(),
            "16".as_ref(),
            "-r".as_ref(),
            "80".as_ref(),
            "-s".as_ref(),
            starts.as_os_str(),
            out.as_os_str(),
        ];
        run_args.extend_from_slice(&prog_args);
        let mut runner = Runner::spawn(&run_args);
        assert!(
            runner.wait_for_stderr("\"event\":\"started\"", Duration::from_secs(30)),
            "{}",
            runner.stderr_now()
        );
        std::thread::sleep(Duration::from_millis(100));
        assert!(!runner.exited(), "the program ended before the warning");
        runner.signal(libc::SIGPWR);
        std::thread::sleep(Duration::from_micros(after_us));
        runner.kill_group();
        let _ = runner.finish(Duration::from_secs(30));
        let (c, v, ierr) = info(&pool);
        let resume: Vec<&OsStr> = vec![
            "wsp".as_ref(),
            "resume".as_ref(),
            "--json".as_ref(),
            "--pool".as_ref(),
            pool.as_os_str(),
        ];
        if v["marker_valid"] == true {
            // The save beat the power: the image must resume to the right result.
            assert_eq!(c, 0, "{v}\n{ierr}");
            assert_eq!(v["state"], "saved", "{v}");
            saved += 1;
            let (c, rout, rerr) = kavach(&resume);
            assert_eq!(c, 0, "kill {after_us} us after the warning: {rerr}");
            assert_eq!(program_lines(&rout), want);
        } else {
            // It did not: info says not resumable, resume refuses and changes nothing, and
            // the program run again from scratch is right.
            assert_eq!(c, 1, "kill {after_us} us after the warning: {v}\n{ierr}");
            assert_ne!(v["state"], "saved", "{v}");
            refused += 1;
            let before = std::fs::read(&pool).unwrap();
            let (c, _, rerr) = kavach(&resume);
            assert_eq!(c, 2, "{rerr}");
            assert!(rerr.contains("valid marker is not set"), "{rerr}");
            assert!(std::fs::read(&pool).unwrap() == before);
            std::fs::remove_file(&pool).unwrap();
            std::fs::remove_file(&starts).unwrap();
            let (c, rout, rerr) = kavach(&run_args);
            assert_eq!(c, 0, "{rerr}");
            assert_eq!(program_lines(&rout), want);
        }
        assert_eq!(
            std::fs::read(&out).unwrap(),
            std::fs::read(&ref_out).unwrap()
        );
        assert_eq!(std::fs::read_to_string(&starts).unwrap(), "start\n");
    }
    eprintln!("power lost during the save: {saved} saved in time, {refused} refused");
}

#[test]
fn power_lost_during_a_resume_never_gives_a_torn_resume() {
    let _serial = serial();
    let prog = program("hashchain");
    let scratch = Scratch::new("during-resume");
    let ref_out = scratch.path("ref.txt");
    let (want, _) = reference(
        &prog,
        &[
            "-m".as_ref(),
            "16".as_ref(),
            "-r".as_ref(),
            "150".as_ref(),
            ref_out.as_os_str(),
        ],
    );
    let pool = scratch.path("p.wsp");
    let out = scratch.path("out.txt");
    let starts = scratch.path("starts.txt");
    let window = TEST_WINDOW_MS.to_string();
    let run_args: Vec<&OsStr> = vec![
        "wsp".as_ref(),
        "run".as_ref(),
        "--json".as_ref(),
        "--size".as_ref(),
        "256MiB".as_ref(),
        "--window-ms".as_ref(),
        window.as_ref(),
        "--warn-after-ms".as_ref(),
        "300".as_ref(),
        "--after-save".as_ref(),
        "kill".as_ref(),
        "--pool".as_ref(),
        pool.as_os_str(),
        "--".as_ref(),
        prog.as_os_str(),
        "-m".as_ref(),
        "16".as_ref(),
        "-r".as_ref(),
        "150".as_ref(),
        "-s".as_ref(),
        starts.as_os_str(),
        out.as_os_str(),
    ];
    let (c, _, err) = kavach(&run_args);
    assert_eq!(c, 0, "the first save: {err}");
    let resume: Vec<&OsStr> = vec![
        "wsp".as_ref(),
        "resume".as_ref(),
        "--json".as_ref(),
        "--window-ms".as_ref(),
        window.as_ref(),
        "--pool".as_ref(),
        pool.as_os_str(),
    ];
    let mut outcomes = Vec::new();
    let mut restarted = false;
    // The warning reaches `kavach wsp resume` this long after it was started: before it
    // listens for SIGPWR (the default action ends it), while it maps and recreates the
    // program, and once the program runs again.
    for after_us in [0u64, 300, 1000, 3000, 20000] {
        let (_, before, _) = info(&pool);
        let runner = Runner::spawn(&resume);
        std::thread::sleep(Duration::from_micros(after_us));
        runner.signal(libc::SIGPWR);
        std::thread::sleep(Duration::from_millis(TEST_WINDOW_MS));
        runner.kill_group();
        let (_, _, err) = runner.finish(Duration::from_secs(30));
        let (c, v, ierr) = info(&pool);
        if v["marker_valid"] == true {
            // Either untouched (the resume died before it began) or saved again.
            assert_eq!(c, 0, "{v}\n{ierr}");
            let counter = v["counter"].as_u64().unwrap();
            let was = before["counter"].as_u64().unwrap();
            assert!(
                counter == was || counter == was + 1,
                "counter {was} -> {counter}; stderr:\n{err}"
            );
            outcomes.push(format!("{after_us} us: valid, save {counter}"));
        } else {
            // The resume had begun and no new save completed: refused, and the program is
            // run again from scratch.
            assert_eq!(c, 1, "{v}\n{ierr}");
            let image = std::fs::read(&pool).unwrap();
            let (c, _, rerr) = kavach(&resume);
            assert_eq!(c, 2, "{rerr}");
            assert!(std::fs::read(&pool).unwrap() == image);
            outcomes.push(format!("{after_us} us: not valid ({}), rerun", v["state"]));
            std::fs::remove_file(&pool).unwrap();
            restarted = true;
            let (c, _, err) = kavach(&run_args);
            assert_eq!(c, 0, "the rerun's save: {err}");
        }
    }
    let (c, rout, rerr) = kavach(&resume);
    assert_eq!(c, 0, "{rerr}");
    assert_eq!(program_lines(&rout), want);
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(&ref_out).unwrap()
    );
    let n_starts = std::fs::read_to_string(&starts).unwrap().lines().count();
    if !restarted {
        assert_eq!(n_starts, 1, "resumed, never restarted");
    }
    eprintln!("power lost during a resume: {}", outcomes.join("; "));
}
