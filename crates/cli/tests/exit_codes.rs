//! The exit-code contract, as a table: every `kavach` subcommand against every bad input.
//!
//! The contract (`docs/design.md`, "Exit codes"): 0 success, 1 damage found (or not all of it
//! repaired), 2 the command could not run. A command that could not run says why in one line on
//! stderr, panics never, and leaves every file as it found it: the bytes of an existing file, the
//! entries of an existing directory, and no file where there was none.
//!
//! `every_subcommand_is_in_the_table` reads the command tree from `--help`, so a new subcommand
//! cannot be added without a row here.

mod common;

use common::{Scratch, kavach, stderr, stdout};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;

/// What the path argument of a command points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Input {
    /// No file there.
    Missing,
    /// A file of zero bytes.
    Empty,
    /// 1 MiB of pseudo-random bytes.
    Random,
    /// A text file.
    Text,
    /// A directory.
    Directory,
    /// A valid plain pool cut to half its length.
    Truncated,
    /// A valid pool with no regions (the wrong kind for log, heap and integrity commands).
    PlainPool,
}

const ALL: &[Input] = &[
    Input::Missing,
    Input::Empty,
    Input::Random,
    Input::Text,
    Input::Directory,
    Input::Truncated,
    Input::PlainPool,
];

/// Every input except a usable one for commands that read a pool of any kind.
const NOT_A_POOL: &[Input] = &[
    Input::Missing,
    Input::Empty,
    Input::Random,
    Input::Text,
    Input::Directory,
    Input::Truncated,
];

/// Inputs for a command that creates its file: anything already there must be refused.
const EXISTING: &[Input] = &[
    Input::Empty,
    Input::Random,
    Input::Text,
    Input::Directory,
    Input::Truncated,
    Input::PlainPool,
];

/// Inputs for fault injection, which damages any pool on purpose: it still refuses what it
/// cannot open (a damaged header is fair game, a missing or empty file is not).
const FAULT: &[Input] = &[Input::Missing, Input::Empty, Input::Directory];

/// One row: the subcommand's words, its arguments (`P` is replaced by the path under test, `S`
/// by a scratch path that must not appear), the inputs it must refuse, and the exit code for
/// each input when it is not 2.
struct Row {
    words: &'static [&'static str],
    args: &'static [&'static str],
    inputs: &'static [Input],
    /// Inputs for which the command runs and reports damage (exit 1) rather than refusing.
    damage: &'static [Input],
}

const fn row(
    words: &'static [&'static str],
    args: &'static [&'static str],
    inputs: &'static [Input],
) -> Row {
    Row {
        words,
        args,
        inputs,
        damage: &[],
    }
}

fn table() -> Vec<Row> {
    vec![
        row(&["pool", "create"], &["P", "--size", "1MiB"], EXISTING),
        row(
            &["pool", "create"],
            &["P", "--size", "1MiB", "--files", "3"],
            EXISTING,
        ),
        row(&["pool", "info"], &["P"], NOT_A_POOL),
        // A pool set's member rebuilt into S: anything that is not a set description is
        // refused, and S never appears.
        row(&["pool", "rebuild"], &["P", "--replace", "P", "S"], ALL),
        Row {
            words: &["pool", "check"],
            args: &["P"],
            inputs: NOT_A_POOL,
            // A truncated pool is a pool with damage: check runs and reports it.
            damage: &[Input::Truncated],
        },
        Row {
            words: &["pool", "repair"],
            args: &["P"],
            inputs: NOT_A_POOL,
            // A truncated pool is damage that repair will not guess at: it runs and says so.
            damage: &[Input::Truncated],
        },
        row(
            &["region", "create"],
            &["P", "extra", "--size", "4KiB"],
            NOT_A_POOL,
        ),
        row(&["region", "remove"], &["P", "log"], ALL),
        row(&["region", "list"], &["P"], NOT_A_POOL),
        row(&["log", "create"], &["P", "--size", "1MiB"], EXISTING),
        row(&["log", "append"], &["P", "--data", "x"], ALL),
        row(&["log", "dump"], &["P"], ALL),
        row(&["log", "verify"], &["P"], ALL),
        // The side file is named so that a refusal that left one behind is caught.
        row(&["log", "salvage"], &["P", "--output", "S"], ALL),
        row(&["heap", "create"], &["P", "--size", "64MiB"], EXISTING),
        row(&["heap", "check"], &["P"], ALL),
        row(&["heap", "stats"], &["P"], ALL),
        row(&["heap", "scrub"], &["P"], ALL),
        row(&["heap", "scrub"], &["P", "--repair"], ALL),
        row(&["fault", "flip"], &["P", "--offset", "0"], FAULT),
        row(
            &["fault", "snapshot"],
            &["P", "--page", "1", "--out", "S"],
            FAULT,
        ),
        row(
            &["fault", "lost-write"],
            &["P", "--page", "1", "--from", "S"],
            FAULT,
        ),
        row(
            &["fault", "misdirect"],
            &["P", "--page", "1", "--onto", "2"],
            FAULT,
        ),
        row(&["inject", "bitflip"], &["P", "--page", "0"], ALL),
        row(&["inject", "lost-write"], &["P", "--page", "0"], ALL),
        row(
            &["inject", "misdirected-write"],
            &["P", "--page", "0", "--to", "1"],
            ALL,
        ),
        row(&["scrub"], &["P"], ALL),
        row(&["repair"], &["P"], ALL),
        // A dynamic program: refused whatever the pool, and an existing pool is never touched.
        row(&["wsp", "run"], &["--pool", "P", "--", "/bin/true"], ALL),
        row(&["wsp", "resume"], &["--pool", "P"], ALL),
        Row {
            words: &["wsp", "info"],
            args: &["--pool", "P"],
            inputs: ALL,
            // A file that is not an image is a damaged image: info runs and names the damage.
            damage: &[
                Input::Empty,
                Input::Random,
                Input::Text,
                Input::Truncated,
                Input::PlainPool,
            ],
        },
        row(&["debug", "fill"], &["P"], ALL),
        row(&["debug", "digest"], &["P"], ALL),
        // Checkpoint/restart devices: anything that is not a microfs device is refused, and
        // the device is never written (export's destination S must not appear).
        row(&["cr", "ls"], &["P"], ALL),
        row(&["cr", "cat"], &["P", "f"], ALL),
        row(&["cr", "export"], &["P", "S"], ALL),
        row(&["cr", "check"], &["P"], ALL),
        // Serving and the demo take a directory: a file where it should be is refused.
        row(
            &["serve"],
            &["--dir", "P", "--port", "0"],
            &[Input::Empty, Input::Random, Input::Text, Input::PlainPool],
        ),
        row(
            &["demo"],
            &["--dir", "P"],
            &[Input::Empty, Input::Random, Input::Text, Input::PlainPool],
        ),
        // The block target serves a directory that must exist: a missing one is not created.
        row(
            &["target", "serve"],
            &["--dir", "P", "--listen", "127.0.0.1:0"],
            &[
                Input::Missing,
                Input::Empty,
                Input::Random,
                Input::Text,
                Input::Truncated,
                Input::PlainPool,
            ],
        ),
        // HAQ: the path under test stands where a value is expected (a rate, a tenant, a
        // scenario) and is refused whatever it holds; calibrate reads a device, so only a
        // path that cannot be one is refused, and it never writes; a run refused for a bad
        // argument writes no PNG, and a directory is never taken for the PNG.
        row(&["haq", "model"], &["--gamma", "P"], ALL),
        row(&["haq", "admit"], &["--gamma", "1G", "--new", "P"], ALL),
        row(&["haq", "run"], &["P", "--seconds", "0.1"], ALL),
        row(
            &["haq", "run"],
            &["S1", "--seconds", "0", "--png", "P"],
            ALL,
        ),
        row(
            &["haq", "run"],
            &["S1", "--seconds", "0.1", "--png", "P"],
            &[Input::Directory],
        ),
        row(&["haq", "weights"], &["--gamma", "1G", "--need", "P"], ALL),
        // TVARAK's simulator: a path that is not a trace (none of these has a trace's
        // header) is refused, never taken for a damaged trace; generators and recording
        // refuse an existing output; faults takes no path at all.
        row(&["tvarak-sim", "run"], &["P"], ALL),
        row(&["tvarak-sim"], &["P"], ALL),
        row(&["tvarak-sim", "info"], &["P"], ALL),
        row(&["tvarak-sim", "sweep"], &["P", "--red-ways", "1,2"], ALL),
        row(&["tvarak-sim", "ablation"], &["P"], ALL),
        row(
            &["tvarak-sim", "gen"],
            &["fio", "--pattern", "rand-write", "-o", "P"],
            EXISTING,
        ),
        row(
            &["tvarak-sim", "gen"],
            &["stream", "--kernel", "triad", "-o", "P"],
            EXISTING,
        ),
        row(&["tvarak-sim", "record"], &["log", "-o", "P"], EXISTING),
        row(&["tvarak-sim", "record"], &["server", "-o", "P"], EXISTING),
        row(
            &["tvarak-sim", "record"],
            &["server", "--clients", "0", "-o", "S"],
            &[Input::Missing],
        ),
        row(
            &["tvarak-sim", "record"],
            &["server", "--clients", "3", "--keys", "2", "-o", "S"],
            &[Input::Missing],
        ),
        row(
            &["tvarak-sim", "record"],
            &["server", "--value", "0", "-o", "S"],
            &[Input::Missing],
        ),
        row(
            &["tvarak-sim", "record"],
            &["server", "--read-percent", "101", "-o", "S"],
            &[Input::Missing],
        ),
        row(
            &["tvarak-sim", "record"],
            &["server", "--cores", "0", "-o", "S"],
            &[Input::Missing],
        ),
        row(
            &["tvarak-sim", "record"],
            &["server", "--workers", "0", "-o", "S"],
            &[Input::Missing],
        ),
        row(
            &["tvarak-sim", "record"],
            &["server", "--ops", "0", "-o", "S"],
            &[Input::Missing],
        ),
        row(
            &["tvarak-sim", "record"],
            &["server", "--keys", "5000000", "--value", "4096", "-o", "S"],
            &[Input::Missing],
        ),
        row(
            &["tvarak-sim", "record"],
            &["server", "--listen", "0", "--clients", "2", "-o", "S"],
            &[Input::Missing],
        ),
        row(
            &["tvarak-sim", "record"],
            &["heap", "--listen", "0", "-o", "S"],
            &[Input::Missing],
        ),
        row(
            &["tvarak-sim", "record"],
            &["heap", "--work-mhz", "200000", "-o", "S"],
            &[Input::Missing],
        ),
        row(
            &["tvarak-sim", "record"],
            &["server", "--threads", "2", "-o", "S"],
            &[Input::Missing],
        ),
        row(
            &["tvarak-sim", "gen"],
            &[
                "fio",
                "--pattern",
                "rand-write",
                "--work-cycles",
                "-1",
                "-o",
                "S",
            ],
            &[Input::Missing],
        ),
        row(&["tvarak-sim", "faults"], &["P"], ALL),
        row(
            &["haq", "calibrate"],
            &["P", "--seconds", "0.1"],
            &[Input::Missing, Input::Empty, Input::Directory],
        ),
    ]
}

/// What a path holds, to compare before and after a command.
#[derive(Debug, PartialEq, Eq)]
enum Snapshot {
    Missing,
    File(Vec<u8>, u32),
    Directory(BTreeSet<String>),
}

fn snapshot(path: &Path) -> Snapshot {
    match std::fs::symlink_metadata(path) {
        Err(_) => Snapshot::Missing,
        Ok(m) if m.is_dir() => Snapshot::Directory(
            std::fs::read_dir(path)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect(),
        ),
        Ok(m) => {
            use std::os::unix::fs::PermissionsExt;
            Snapshot::File(std::fs::read(path).unwrap(), m.permissions().mode())
        }
    }
}

/// Deterministic pseudo-random bytes (xorshift), so a failure can be reproduced.
fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect()
}

/// Put `input` at `path`, made from `plain` (a valid 1 MiB pool with no regions).
fn make(input: Input, path: &Path, plain: &Path) {
    match input {
        Input::Missing => {}
        Input::Empty => std::fs::write(path, b"").unwrap(),
        Input::Random => std::fs::write(path, noise(1 << 20, 0x9e37_79b9_7f4a_7c15)).unwrap(),
        Input::Text => std::fs::write(path, "not a pool, just notes\n".repeat(4000)).unwrap(),
        Input::Directory => {
            std::fs::create_dir(path).unwrap();
            std::fs::write(path.join("inside"), b"keep me").unwrap();
        }
        Input::Truncated => {
            let bytes = std::fs::read(plain).unwrap();
            std::fs::write(path, &bytes[..bytes.len() / 2]).unwrap();
        }
        Input::PlainPool => {
            std::fs::copy(plain, path).unwrap();
        }
    }
}

/// A valid 1 MiB pool with no regions, `plain.pool` in `s`.
fn plain_pool(s: &Scratch) -> std::path::PathBuf {
    let plain = Path::new(&s.path("plain.pool")).to_path_buf();
    let o = kavach(&["pool", "create", plain.to_str().unwrap(), "--size", "1MiB"]);
    assert!(o.status.success(), "{}", stderr(&o));
    plain
}

/// The contract for a command that could not run: exit 2, one error line, no panic.
fn assert_could_not_run(o: &Output, what: &str) {
    let err = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{what}: exit code\nstdout: {}\nstderr: {err}",
        stdout(o)
    );
    assert_no_panic(o, what);
    let error_lines: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(error_lines.len(), 1, "{what}: one error line, got: {err}");
    let last = err
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    // Our own errors are one line at the end; clap's usage errors are followed by a hint.
    assert!(
        last.starts_with("kavach: error: ") || err.starts_with("error: "),
        "{what}: the last line says what went wrong: {err}"
    );
}

fn assert_no_panic(o: &Output, what: &str) {
    let err = stderr(o);
    assert!(
        !err.contains("panicked")
            && !err.contains("internal error")
            && !err.contains("RUST_BACKTRACE"),
        "{what}: {err}"
    );
}

#[test]
fn every_subcommand_refuses_every_bad_input_with_exit_2_and_changes_nothing() {
    let s = Scratch::new("codes");
    let plain = plain_pool(&s);
    let stray = s.path("stray-output");
    let mut checked = 0;
    let mut failures = Vec::new();
    for r in table() {
        for &input in r.inputs {
            let path = Path::new(&s.path("under-test")).to_path_buf();
            let _ = std::fs::remove_dir_all(&path);
            let _ = std::fs::remove_file(&path);
            make(input, &path, &plain);
            let p = path.to_str().unwrap();
            let args: Vec<&str> = r
                .words
                .iter()
                .copied()
                .chain(r.args.iter().map(|&a| match a {
                    "P" => p,
                    "S" => stray.as_str(),
                    other => other,
                }))
                .collect();
            let what = format!("`kavach {}` on {input:?}", args.join(" "));
            let before = snapshot(&path);
            let o = kavach(&args);
            // Every case runs; the failures are listed together at the end.
            let verdict = std::panic::catch_unwind(|| {
                if r.damage.contains(&input) {
                    assert_eq!(o.status.code(), Some(1), "{what}: {}", stderr(&o));
                    assert_no_panic(&o, &what);
                } else {
                    assert_could_not_run(&o, &what);
                }
            });
            if verdict.is_err() {
                failures.push(format!(
                    "{what}: exit {:?}, {}",
                    o.status.code(),
                    stderr(&o).trim_end()
                ));
            }
            if snapshot(&path) != before {
                failures.push(format!("{what}: the input was changed"));
            }
            if Path::new(&stray).exists() {
                let _ = std::fs::remove_file(&stray);
                failures.push(format!("{what}: an output file was left behind"));
            }
            checked += 1;
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} cases broke the contract:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // The table is not empty by accident.
    assert!(checked > 120, "only {checked} cases ran");
}

/// The subcommand groups whose children are listed under `Commands:` in `--help`.
fn children(words: &[&str]) -> Vec<String> {
    let mut args = words.to_vec();
    args.push("--help");
    let help = stdout(&kavach(&args));
    let Some(list) = help.split("Commands:\n").nth(1) else {
        return Vec::new();
    };
    list.lines()
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_subcommand_is_in_the_table() {
    let mut leaves = BTreeSet::new();
    for top in children(&[]) {
        let kids = children(&[&top]);
        if kids.is_empty() {
            leaves.insert(top);
        } else {
            for k in kids {
                leaves.insert(format!("{top} {k}"));
            }
        }
    }
    assert!(
        leaves.contains("pool create") && leaves.contains("scrub"),
        "{leaves:?}"
    );
    let mut in_table: BTreeSet<String> = table().iter().map(|r| r.words.join(" ")).collect();
    // Commands that talk to a running server or etcd have their own rows below.
    in_table.insert("promote".into());
    in_table.insert("elect".into());
    in_table.insert("target stats".into());
    in_table.insert("target load".into());
    // Takes no pool: its exit codes (0 shown or recalibrated, 2 cache not writable) are tested
    // in tune_cli.rs.
    in_table.insert("pool tune".into());
    let missing: Vec<&String> = leaves.difference(&in_table).collect();
    assert!(
        missing.is_empty(),
        "subcommands with no row in the exit-code table: {missing:?}"
    );
}

#[test]
fn commands_that_talk_to_a_server_exit_2_when_they_cannot() {
    // A port nothing listens on: bind one, note it, close it.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port().to_string()
    };
    let o = kavach(&["promote", "--port", &port]);
    assert_could_not_run(&o, "promote to a closed port");
    for bad in [
        vec![
            "elect",
            "--cluster",
            "c",
            "--port",
            &port,
            "--replicas",
            "nonsense",
        ],
        vec![
            "elect",
            "--cluster",
            "c",
            "--port",
            &port,
            "--replicas",
            "127.0.0.1:1",
            "--ttl",
            "0",
        ],
    ] {
        let o = kavach(&bad);
        assert_could_not_run(&o, &bad.join(" "));
    }
}

#[test]
fn bad_sizes_for_create_commands_exit_2_and_create_nothing() {
    let s = Scratch::new("sizes");
    let p = s.path("new.pool");
    for words in [["pool", "create"], ["log", "create"], ["heap", "create"]] {
        for size in ["0", "1", "10parsecs", "-4KiB", "99999999999TiB", "4096"] {
            let args = [words[0], words[1], p.as_str(), "--size", size];
            let o = kavach(&args);
            assert_could_not_run(&o, &args.join(" "));
            assert!(!Path::new(&p).exists(), "{args:?} left a file behind");
        }
    }
}

#[test]
fn serve_refuses_a_store_file_that_is_not_a_store_and_changes_nothing() {
    let s = Scratch::new("store");
    let plain = plain_pool(&s);
    for input in [
        Input::Empty,
        Input::Random,
        Input::Text,
        Input::Truncated,
        Input::PlainPool,
    ] {
        let dir = Path::new(&s.path("store-dir")).to_path_buf();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let store = dir.join("kavach.pool");
        make(input, &store, &plain);
        let before = (snapshot(&dir), snapshot(&store));
        let args = ["serve", "--dir", dir.to_str().unwrap(), "--port", "0"];
        let what = format!(
            "`kavach {}` with a kavach.pool that is {input:?}",
            args.join(" ")
        );
        let o = kavach(&args);
        assert_could_not_run(&o, &what);
        assert!(
            (snapshot(&dir), snapshot(&store)) == before,
            "{what}: the directory or the pool was changed"
        );
    }
}

#[test]
fn target_serve_refuses_bad_options_and_creates_nothing() {
    let s = Scratch::new("target");
    let dir = s.path("ns");
    std::fs::create_dir(&dir).unwrap();
    // A port in use: held by this test for the command's lifetime.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let in_use = held.local_addr().unwrap().to_string();
    for bad in [
        vec!["--listen", "nonsense"],
        vec!["--listen", "127.0.0.1:99999"],
        vec!["--listen", "300.1.1.1:7420"],
        vec!["--listen", &in_use],
        vec!["--listen", "127.0.0.1:0", "--max-connections", "0"],
        vec!["--listen", "127.0.0.1:0", "--direct", "sometimes"],
        // Quality of service: a bad policy, weights, burst, emulation or job is refused
        // before anything is bound or made.
        vec!["--listen", "127.0.0.1:0", "--qos", "fair"],
        vec![
            "--listen",
            "127.0.0.1:0",
            "--qos",
            "drr",
            "--weights",
            "128k,64k",
        ],
        vec![
            "--listen",
            "127.0.0.1:0",
            "--qos",
            "drr",
            "--weights",
            "128k,64k,33000",
        ],
        vec![
            "--listen",
            "127.0.0.1:0",
            "--qos",
            "drr",
            "--weights",
            "256k,64k,32k",
        ],
        vec![
            "--listen",
            "127.0.0.1:0",
            "--qos",
            "drr",
            "--weights",
            "0,64k,32k",
        ],
        vec![
            "--listen",
            "127.0.0.1:0",
            "--qos",
            "wrr",
            "--weights",
            "32,16,0",
        ],
        vec![
            "--listen",
            "127.0.0.1:0",
            "--qos",
            "wrr",
            "--weights",
            "32,16,257",
        ],
        vec![
            "--listen",
            "127.0.0.1:0",
            "--qos",
            "wrr",
            "--weights",
            "a,b,c",
        ],
        vec![
            "--listen",
            "127.0.0.1:0",
            "--qos",
            "rr",
            "--weights",
            "1,1,1",
        ],
        vec!["--listen", "127.0.0.1:0", "--qos", "drr", "--burst", "8"],
        vec!["--listen", "127.0.0.1:0", "--qos", "drr", "--workers", "0"],
        vec![
            "--listen",
            "127.0.0.1:0",
            "--qos",
            "drr",
            "--queue-depth",
            "0",
        ],
        vec![
            "--listen",
            "127.0.0.1:0",
            "--qos",
            "drr",
            "--emulate",
            "fast",
        ],
        vec![
            "--listen",
            "127.0.0.1:0",
            "--qos",
            "drr",
            "--emulate",
            "units=0,base-us=50,mbps=400",
        ],
        vec![
            "--listen",
            "127.0.0.1:0",
            "--qos",
            "drr",
            "--urgent",
            "../x",
        ],
        vec![
            "--listen",
            "127.0.0.1:0",
            "--qos",
            "drr",
            "--workers",
            "2",
            "--emulate",
            "units=4,base-us=50,mbps=400",
        ],
        // Settings of an arbiter without one.
        vec!["--listen", "127.0.0.1:0", "--weights", "32,16,8"],
        vec![
            "--listen",
            "127.0.0.1:0",
            "--qos",
            "off",
            "--urgent",
            "admin",
        ],
        vec![
            "--listen",
            "127.0.0.1:0",
            "--emulate",
            "units=4,base-us=50,mbps=400",
        ],
    ] {
        let mut args = vec!["target", "serve", "--dir", &dir];
        args.extend(bad);
        let o = kavach(&args);
        assert_could_not_run(&o, &args.join(" "));
        assert_eq!(
            snapshot(Path::new(&dir)),
            Snapshot::Directory(BTreeSet::new()),
            "{args:?} changed the directory"
        );
    }
    drop(held);
}

#[test]
fn target_stats_and_load_exit_2_when_they_cannot_and_create_nothing() {
    // A port nothing listens on: bind one, note it, close it.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    for bad in [
        vec!["target", "stats", &closed],
        vec!["target", "stats", &closed, "--json"],
        vec!["target", "stats", "nonsense"],
        vec!["target", "load", &closed, "--job", "j", "--seconds", "1"],
    ] {
        let o = kavach(&bad);
        assert_could_not_run(&o, &bad.join(" "));
    }
    // Against a running target: bad arguments are refused before any namespace is made.
    let s = Scratch::new("target-load");
    let dir = s.path("ns");
    std::fs::create_dir(&dir).unwrap();
    let srv = target::server::TargetServer::bind(
        "127.0.0.1:0",
        Path::new(&dir),
        target::server::ServerOptions::default(),
    )
    .unwrap()
    .spawn()
    .unwrap();
    let addr = srv.local_addr().to_string();
    let before = snapshot(Path::new(&dir));
    for extra in [
        &["--job", "../escape"][..],
        &["--job", ""],
        &["--job", "j", "--size", "0"],
        &["--job", "j", "--size", "9MiB"],
        &["--job", "j", "--size", "lots"],
        &["--job", "j", "--depth", "0"],
        &["--job", "j", "--depth", "257"],
        &["--job", "j", "--seconds", "0"],
        &["--job", "j", "--seconds", "-1"],
        &["--job", "j", "--seconds", "NaN"],
        &["--job", "j", "--seconds", "4000"],
        &["--job", "j", "--span", "0"],
        &["--job", "j", "--size", "8k", "--span", "4k"],
        &["--job", "j", "--start-at", "soon"],
        &["--job", "j", "--start-at", "99999999999"],
        &["--job", "j", "--start-at", "-5"],
    ] {
        let mut args = vec!["target", "load", addr.as_str()];
        args.extend_from_slice(extra);
        let o = kavach(&args);
        assert_could_not_run(&o, &args.join(" "));
        assert_eq!(
            snapshot(Path::new(&dir)),
            before,
            "{args:?} changed the target's directory"
        );
    }
    srv.shutdown().unwrap();
}
