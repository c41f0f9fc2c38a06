//! `kavach tvarak-sim`: generated traces through info, run, sweep and ablation; damaged
//! traces (exit 1), things that are not traces and bad arguments (exit 2, nothing changed).

mod common;

use common::{Scratch, assert_code, assert_refused, json, kavach, run_json};
use serde_json::Value;

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// A fio-like trace of 4 threads x `kib` KiB of 64 B accesses at `path`.
fn gen_fio(path: &str, pattern: &str, kib: u64) {
    let bytes = format!("{kib}KiB");
    let o = kavach(&[
        "tvarak-sim",
        "gen",
        "fio",
        "--pattern",
        pattern,
        "--threads",
        "4",
        "--bytes-per-thread",
        &bytes,
        "-o",
        path,
    ]);
    assert_code(&o, 0);
}

fn design<'a>(j: &'a Value, name: &str) -> &'a Value {
    j["designs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["design"] == name)
        .unwrap_or_else(|| panic!("no {name} in {j}"))
}

#[test]
fn gen_writes_a_trace_that_info_counts_and_refuses_to_overwrite() {
    let s = Scratch::new("gen");
    let t = s.path("rw.trace");
    gen_fio(&t, "rand-write", 16);
    let j = run_json(&["tvarak-sim", "info", &t], 0);
    // 4 threads x 16 KiB / 64 B = 1024 stores, each after fio's own work and before the
    // commit that tells a TxB library the write is done.
    assert_eq!(u(&j["stores"]), 1024, "{j}");
    assert_eq!(u(&j["store_bytes"]), 4 * 16 * 1024);
    assert_eq!(u(&j["loads"]), 0);
    assert_eq!(u(&j["tx_commits"]), 1024);
    assert_eq!(u(&j["work_events"]), 1024);
    assert_eq!(u(&j["work_cycles"]), 1024 * 435);
    assert_eq!(u(&j["events"]), 3 * 1024);
    assert_eq!(u(&j["version"]), 2);
    assert_eq!(u(&j["cores"]), 4);
    assert_eq!(j["name"], "fio-rand-write");
    // Without the work and the commits: the stores alone.
    let bare = s.path("bare.trace");
    let o = kavach(&[
        "tvarak-sim",
        "gen",
        "fio",
        "--pattern",
        "rand-write",
        "--threads",
        "4",
        "--bytes-per-thread",
        "16KiB",
        "--work-cycles",
        "0",
        "--no-tx",
        "-o",
        &bare,
    ]);
    assert_code(&o, 0);
    let j = run_json(&["tvarak-sim", "info", &bare], 0);
    assert_eq!(u(&j["events"]), 1024, "{j}");
    std::fs::remove_file(&bare).unwrap();
    // An existing output is refused and left as it was.
    let before = std::fs::read(&t).unwrap();
    let o = kavach(&["tvarak-sim", "gen", "stream", "--kernel", "triad", "-o", &t]);
    assert_refused(&o, 2, "already exists");
    assert_eq!(std::fs::read(&t).unwrap(), before);
    // A stream trace: triad loads two arrays and stores one, line by line.
    let st = s.path("triad.trace");
    let o = kavach(&[
        "tvarak-sim",
        "gen",
        "stream",
        "--kernel",
        "triad",
        "--threads",
        "4",
        "--array-bytes",
        "64KiB",
        "-o",
        &st,
    ]);
    assert_code(&o, 0);
    let j = run_json(&["tvarak-sim", "info", &st], 0);
    assert_eq!(u(&j["stores"]), 1024, "{j}");
    assert_eq!(u(&j["loads"]), 2048, "{j}");
    // Nothing but the two traces in the directory (no temporary file left).
    let mut names: Vec<String> = std::fs::read_dir(&s.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["rw.trace", "triad.trace"]);
}

#[test]
fn run_prints_every_design_against_baseline_and_draws_it() {
    let s = Scratch::new("run");
    let t = s.path("rw.trace");
    gen_fio(&t, "rand-write", 16);
    let png = s.path("rw.png");
    let j = run_json(
        &[
            "tvarak-sim",
            "run",
            &t,
            "--design",
            "tvarak,txb-page,naive",
            "--png",
            &png,
        ],
        0,
    );
    let names: Vec<&str> = j["designs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["design"].as_str().unwrap())
        .collect();
    // Baseline is added, first.
    assert_eq!(names, ["baseline", "tvarak", "txb-page", "naive"]);
    let base = design(&j, "baseline");
    // Every line is stored once and reaches NVM once (the final drain), and nothing else is
    // written without redundancy.
    assert_eq!(u(&base["counters"]["nvm_data_writes"]), 1024, "{base}");
    assert_eq!(u(&base["counters"]["nvm_red_writes"]), 0);
    assert_eq!(f(&base["vs_baseline"]["runtime_pct"]), 0.0);
    let tv = design(&j, "tvarak");
    assert!(u(&tv["counters"]["nvm_red_writes"]) > 0, "{tv}");
    assert!(f(&tv["vs_baseline"]["nvm_accesses_pct"]) > 0.0, "{tv}");
    // The naive controller reads the whole page on every fill: far more NVM reads.
    let naive = design(&j, "naive");
    assert!(
        f(&naive["read_amplification"]) > f(&tv["read_amplification"]),
        "{naive}\n{tv}"
    );
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    // The table names every design and the overhead columns.
    let o = kavach(&["tvarak-sim", "run", &t, "--design", "all"]);
    assert_code(&o, 0);
    let text = common::stdout(&o);
    for d in [
        "baseline",
        "naive",
        "cl-cache",
        "tvarak",
        "txb-object",
        "txb-page",
        "vilamb",
    ] {
        assert!(text.contains(d), "{d} missing from:\n{text}");
    }
    assert!(
        text.contains("runtime") && text.contains("NVM acc"),
        "{text}"
    );
}

#[test]
fn a_trace_in_place_of_a_subcommand_is_run_and_an_unknown_word_is_refused() {
    let s = Scratch::new("shorthand");
    let t = s.path("sr.trace");
    gen_fio(&t, "seq-read", 16);
    let long = run_json(&["tvarak-sim", "run", &t, "--design", "tvarak"], 0);
    let short = run_json(&["tvarak-sim", &t, "--design", "tvarak"], 0);
    assert_eq!(long, short);
    let o = kavach(&["tvarak-sim", "rnu"]);
    assert_refused(&o, 2, "not a subcommand");
    let o = kavach(&["tvarak-sim", &t, "--bogus"]);
    assert_refused(&o, 2, "--bogus");
}

#[test]
fn sweep_and_ablation_give_a_point_per_value_and_a_row_per_step() {
    let s = Scratch::new("sweep");
    let t = s.path("rr.trace");
    gen_fio(&t, "rand-read", 8);
    let png = s.path("sweep.png");
    let j = run_json(
        &[
            "tvarak-sim",
            "sweep",
            &t,
            "--ctl-cache-kib",
            "0,4,16",
            "--png",
            &png,
        ],
        0,
    );
    let values: Vec<u64> = j["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| u(&p["value"]))
        .collect();
    assert_eq!(values, [0, 4, 16], "{j}");
    assert_eq!(j["parameter"], "ctl-cache-kib");
    // The parameter reaches the machine: no controller cache, no controller-cache hits.
    let hits = |i: usize| u(&j["points"][i]["report"]["counters"]["ctl_hits"]);
    assert_eq!(hits(0), 0, "{j}");
    assert!(hits(2) > 0, "{j}");
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
    let j = run_json(&["tvarak-sim", "ablation", &t], 0);
    let steps: Vec<&str> = j["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["design"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["baseline", "naive", "cl", "cl-cache", "tvarak"]);
    // The ablation's shape: the naive controller's read amplification is far above TVARAK's.
    let amp = |i: usize| f(&j["steps"][i]["read_amplification"]);
    assert!(
        amp(1) > 10.0 * amp(4),
        "naive {} vs tvarak {}",
        amp(1),
        amp(4)
    );
}

#[test]
fn a_damaged_trace_exits_1_and_a_file_that_is_not_a_trace_exits_2() {
    let s = Scratch::new("damage");
    let t = s.path("rw.trace");
    gen_fio(&t, "rand-write", 16);
    let good = std::fs::read(&t).unwrap();
    // Cut the compressed body short: the header is a trace's, the events end too early.
    let cut = s.path("cut.trace");
    std::fs::write(&cut, &good[..good.len() * 2 / 3]).unwrap();
    for args in [
        vec!["tvarak-sim", "info", &cut],
        vec!["tvarak-sim", "run", &cut],
        vec!["tvarak-sim", "ablation", &cut],
        vec!["tvarak-sim", "sweep", &cut, "--red-ways", "1,2"],
    ] {
        let o = kavach(&args);
        assert_code(&o, 1);
        assert!(
            common::stderr(&o).contains("damaged trace"),
            "{args:?}: {}",
            common::stderr(&o)
        );
    }
    let o = kavach(&["tvarak-sim", "run", &cut, "--json"]);
    assert_code(&o, 1);
    assert_eq!(json(&o)["damaged"], true);
    assert_eq!(std::fs::read(&cut).unwrap().len(), good.len() * 2 / 3);
    // Only the magic: not a trace.
    let junk = s.path("junk.trace");
    std::fs::write(&junk, b"not a trace at all").unwrap();
    assert_refused(&kavach(&["tvarak-sim", "run", &junk]), 2, "not a trace");
}

#[test]
fn bad_arguments_exit_2_and_write_nothing() {
    let s = Scratch::new("args");
    let t = s.path("rw.trace");
    gen_fio(&t, "rand-write", 4);
    let png = s.path("out.png");
    for (args, needle) in [
        (vec!["run", &t, "--design", "tvarak,bogus"], "--design"),
        (vec!["run", &t, "--red-ways", "15"], "--red-ways"),
        (
            vec!["run", &t, "--ctl-cache-kib", "2048"],
            "--ctl-cache-kib",
        ),
        (vec!["run", &t, "--dimms", "1"], "--dimms"),
        (vec!["run", &t, "--nvm-read-ns", "NaN"], "--nvm-read-ns"),
        (vec!["run", &t, "--cores", "2"], "--cores"),
        (vec!["sweep", &t], "exactly one"),
        (
            vec!["sweep", &t, "--red-ways", "1", "--diff-ways", "1"],
            "exactly one",
        ),
        (vec!["sweep", &t, "--red-ways", "1,x"], "--red-ways"),
        (
            vec!["ablation", &t, "--png", &s.0.to_string_lossy()],
            "--png",
        ),
        (
            vec![
                "gen",
                "fio",
                "--pattern",
                "seq-read",
                "--bytes-per-thread",
                "100",
                "-o",
                &png,
            ],
            "--bytes-per-thread",
        ),
    ] {
        let mut all = vec!["tvarak-sim"];
        all.extend(args.iter().copied());
        let o = kavach(&all);
        assert_refused(&o, 2, needle);
        assert!(
            !std::path::Path::new(&png).exists(),
            "{all:?} left a file behind"
        );
    }
}

#[test]
fn faults_prints_the_matrix_measured_by_the_engine() {
    let j = run_json(&["tvarak-sim", "faults", "--trials", "3", "--seed", "5"], 0);
    assert_eq!(u(&j["trials"]), 3);
    let cells = j["cells"].as_array().unwrap();
    // Every fault under every design, once.
    let faults: std::collections::BTreeSet<String> =
        cells.iter().map(|c| c["fault"].to_string()).collect();
    let designs: std::collections::BTreeSet<String> =
        cells.iter().map(|c| c["design"].to_string()).collect();
    assert_eq!(faults.len(), 4, "{faults:?}");
    assert!(designs.len() >= 5, "{designs:?}");
    assert_eq!(cells.len(), faults.len() * designs.len(), "{j}");
    let cell = |fault: &str, design: &str| {
        cells
            .iter()
            .find(|c| c["fault"] == fault && c["design"] == design)
            .unwrap_or_else(|| panic!("no {fault} x {design} in {j}"))
    };
    // TVARAK verifies every fill: a lost write is found on the first read in every trial;
    // device ECC, which travels with the (stale) line, never finds it.
    let tv = cell("LostWrite", "Tvarak");
    assert_eq!(u(&tv["on_first_read"]["all"]), 3, "{tv}");
    let ecc = cell("LostWrite", "DeviceEcc");
    assert_eq!(u(&ecc["on_first_read"]["all"]), 0, "{ecc}");
    let o = kavach(&["tvarak-sim", "faults", "--trials", "0"]);
    assert_refused(&o, 2, "--trials");
}

#[test]
fn record_traces_real_log_and_heap_runs_that_run_simulates() {
    let s = Scratch::new("record");
    let log = s.path("log.trace");
    let o = kavach(&[
        "tvarak-sim",
        "record",
        "log",
        "--threads",
        "2",
        "--ops",
        "50",
        "-o",
        &log,
    ]);
    assert_code(&o, 0);
    let j = run_json(&["tvarak-sim", "info", &log], 0);
    // Two threads and the one that set the log up; forced appends flush and fence (forces
    // of concurrent appends may share a fence).
    assert_eq!(u(&j["cores"]), 3, "{j}");
    assert_eq!(j["with_data"], true);
    assert!(u(&j["stores"]) >= 100, "{j}");
    assert!(u(&j["flushes"]) >= 100 && u(&j["fences"]) >= 1, "{j}");
    let heap = s.path("heap.trace");
    let o = kavach(&[
        "tvarak-sim",
        "record",
        "heap",
        "--threads",
        "2",
        "--ops",
        "40",
        "-o",
        &heap,
    ]);
    assert_code(&o, 0);
    let j = run_json(&["tvarak-sim", "info", &heap], 0);
    // Every insert or update is a transaction the trace brackets.
    assert!(u(&j["tx_commits"]) >= 80, "{j}");
    assert_eq!(u(&j["tx_begins"]), u(&j["tx_commits"]));
    // The software baselines work at those commits: they make redundancy writes.
    let j = run_json(&["tvarak-sim", "run", &heap, "--design", "txb-object"], 0);
    assert!(
        u(&design(&j, "txb-object")["counters"]["tx_commits"]) >= 80,
        "{j}"
    );
    // The key-value store: GETs and SETs of a YCSB-like mix.
    let kv = s.path("kv.trace");
    let o = kavach(&[
        "tvarak-sim",
        "record",
        "store",
        "--threads",
        "2",
        "--keys",
        "100",
        "--ops",
        "50",
        "--read-percent",
        "50",
        "-o",
        &kv,
    ]);
    assert_code(&o, 0);
    let j = run_json(&["tvarak-sim", "info", &kv], 0);
    assert_eq!(u(&j["cores"]), 3, "{j}");
    assert!(u(&j["stores"]) > 0 && u(&j["loads"]) > 0, "{j}");
    // Each fence that made writes durable commits them; the clients' own work is measured.
    assert!(
        u(&j["tx_commits"]) > 0 && u(&j["tx_commits"]) <= u(&j["fences"]),
        "{j}"
    );
    assert!(u(&j["work_events"]) > 0 && u(&j["work_cycles"]) > 0, "{j}");
    // A bad workload parameter is refused and leaves no file.
    let bad = s.path("bad.trace");
    let o = kavach(&["tvarak-sim", "record", "heap", "--value", "7", "-o", &bad]);
    assert_refused(&o, 2, "heap workload");
    assert_eq!(
        std::fs::read_dir(&s.0)
            .unwrap()
            .filter(|e| e
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains("bad"))
            .count(),
        0
    );
}

/// SHA-256 over the keys in order, each as its length (u32 little-endian), its bytes, then its
/// value's length and bytes: the form `record server --json` gives as `state_sha256`.
fn state_digest(pairs: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for (k, v) in pairs {
        h.update((k.len() as u32).to_le_bytes());
        h.update(k);
        h.update((v.len() as u32).to_le_bytes());
        h.update(v);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Every key and value of the store that the stores of the trace at `path` leave on a medium
/// that started as zeros (the recording starts before the pool is formatted).
fn store_rebuilt_from(path: &str) -> std::collections::BTreeMap<Vec<u8>, Vec<u8>> {
    let f = std::io::BufReader::new(std::fs::File::open(path).unwrap());
    let reader = tvarak_sim::trace::TraceReader::new(f).unwrap();
    let mut image = vec![0u8; reader.header().pm_bytes as usize];
    let n = tvarak_sim::record::apply_stores(&mut image, reader).unwrap();
    assert!(n > 0);
    let medium = std::sync::Arc::new(pmem::SimMedium::from_image(
        image,
        pmem::SimConfig::default(),
    ));
    let pool = pmem::Pool::open_medium(medium, &pmem::OpenOptions::default()).unwrap();
    let config = dstore::Config {
        grow: false,
        background: false,
        ..dstore::Config::default()
    };
    let store = dstore::Store::open(pool, config).unwrap();
    assert!(store.recovery().clean_shutdown, "the server closed it");
    let mut all = std::collections::BTreeMap::new();
    let mut cursor = 0;
    loop {
        let (next, keys) = store.scan(cursor, 100).unwrap();
        for (k, kind) in keys {
            assert_eq!(kind, "string");
            let v = store.get(&k).unwrap().unwrap();
            all.insert(k, v);
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    assert_eq!(all.len() as u64, store.dbsize().unwrap());
    store.close().unwrap();
    all
}

#[test]
fn record_server_traces_the_resp_server_and_its_stores_rebuild_what_the_clients_set() {
    let s = Scratch::new("server");
    let t = s.path("server.trace");
    let j = run_json(
        &[
            "tvarak-sim",
            "record",
            "server",
            "--clients",
            "2",
            "--keys",
            "60",
            "--ops",
            "80",
            "--read-percent",
            "50",
            "--value",
            "48",
            "--cores",
            "3",
            "--seed",
            "9",
            "-o",
            &t,
        ],
        0,
    );
    // The load (60 SETs) and 2 x 80 operations, every one answered as expected.
    assert_eq!(u(&j["keys_set"]), 60, "{j}");
    assert_eq!(u(&j["gets"]) + u(&j["sets"]), 60 + 160, "{j}");
    assert!(u(&j["sets"]) > 60 && u(&j["gets"]) > 0, "{j}");
    // The server counted them too: the two clients, and the connection that checks DBSIZE.
    assert_eq!(u(&j["commands"]), 60 + 160 + 1, "{j}");
    assert_eq!(u(&j["connections"]), 3, "{j}");
    let info = run_json(&["tvarak-sim", "info", &t], 0);
    assert!(
        info["name"].as_str().unwrap().starts_with("server-"),
        "{info}"
    );
    assert_eq!(u(&info["cores"]), 3, "{info}");
    assert_eq!(info["with_data"], true);
    for kind in ["loads", "stores", "flushes", "fences", "tx_commits"] {
        assert!(u(&info[kind]) > 0, "{kind}: {info}");
        assert_eq!(info[kind], j[kind], "{kind}");
    }
    // Every design simulates it; the TxB designs see the commits.
    let run = run_json(&["tvarak-sim", "run", &t, "--design", "all"], 0);
    for d in ["baseline", "tvarak", "txb-object", "txb-page"] {
        assert!(
            u(&design(&run, d)["counters"]["nvm_data_reads"]) > 0,
            "{d}: {run}"
        );
    }
    assert!(u(&design(&run, "txb-object")["counters"]["tx_commits"]) > 0);
    // The trace's stores rebuild the store the server closed: every key the clients set, with
    // the value they last set, and nothing else.
    let rebuilt = store_rebuilt_from(&t);
    assert_eq!(rebuilt.len(), 60);
    assert_eq!(
        state_digest(&rebuilt),
        j["state_sha256"].as_str().unwrap(),
        "the rebuilt store differs from what the clients set"
    );
    // An address-only trace has no bytes to rebuild from, and is smaller.
    let a = s.path("addr.trace");
    let ja = run_json(
        &[
            "tvarak-sim",
            "record",
            "server",
            "--clients",
            "1",
            "--keys",
            "20",
            "--ops",
            "20",
            "--address-only",
            "-o",
            &a,
        ],
        0,
    );
    assert_eq!(ja["with_data"], false, "{ja}");
    let f = std::io::BufReader::new(std::fs::File::open(&a).unwrap());
    let reader = tvarak_sim::trace::TraceReader::new(f).unwrap();
    let mut image = vec![0u8; reader.header().pm_bytes as usize];
    assert!(tvarak_sim::record::apply_stores(&mut image, reader).is_err());
}

#[test]
fn record_server_listens_for_outside_clients_until_shutdown() {
    use std::io::{BufRead, Read, Write};
    let s = Scratch::new("listen");
    let t = s.path("listen.trace");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kavach"))
        .args([
            "tvarak-sim",
            "record",
            "server",
            "--listen",
            "0",
            "--keys",
            "50",
            "--json",
            "-o",
            &t,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("first line: {line}"))
        .to_string();
    let mut c = std::net::TcpStream::connect(&addr).unwrap();
    let mut call = |req: &[u8], want: &[u8]| {
        c.write_all(req).unwrap();
        let mut got = vec![0u8; want.len()];
        c.read_exact(&mut got).unwrap();
        assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
    };
    call(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n", b"+OK\r\n");
    call(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", b"$5\r\nhello\r\n");
    c.write_all(b"*1\r\n$8\r\nSHUTDOWN\r\n").unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let status = child.wait().unwrap();
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert_eq!(status.code(), Some(0), "{out}\n{rest}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["driver"], "listen", "{j}");
    assert_eq!(u(&j["commands"]), 3, "{j}");
    let rebuilt = store_rebuilt_from(&t);
    assert_eq!(
        rebuilt.into_iter().collect::<Vec<_>>(),
        vec![(b"k".to_vec(), b"hello".to_vec())]
    );
}

#[test]
fn record_server_refuses_a_port_in_use_and_bad_sizes_and_writes_nothing() {
    let s = Scratch::new("server-bad");
    let t = s.path("bad.trace");
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port().to_string();
    for (args, needle) in [
        (vec!["--listen", &port], "cannot listen"),
        (vec!["--keys", "10000000", "--value", "4096"], "largest"),
        (vec!["--clients", "4", "--keys", "3"], "--keys"),
        (vec!["--value", "5000"], "--value"),
        (vec!["--cores", "0"], "--cores"),
        (
            vec!["--clients", "64", "--ops", "100000", "--value", "4096"],
            "the trace would take",
        ),
        (
            vec!["--clients", "64", "--ops", "1000000"],
            "requests in all",
        ),
        (vec!["--listen", "0", "--clients", "2"], "--clients"),
    ] {
        let mut all = vec!["tvarak-sim", "record", "server", "-o", &t];
        all.extend(args.iter().copied());
        let o = kavach(&all);
        assert_refused(&o, 2, needle);
        assert_eq!(std::fs::read_dir(&s.0).unwrap().count(), 0, "{all:?}");
    }
    // The server's options belong to it.
    let o = kavach(&["tvarak-sim", "record", "log", "--clients", "2", "-o", &t]);
    assert_refused(&o, 2, "record server");
}
