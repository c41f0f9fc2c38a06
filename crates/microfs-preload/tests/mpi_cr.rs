//! Checkpoint/restart under `mpirun` through `libkavach_cr.so`: the CoMD-like program
//! (`tests/programs/comd_cr.c`) writes N-N checkpoints through the shim, stops, and a second
//! run restarts from them and ends with the same per-rank digests as an uninterrupted run on
//! the kernel's file system. The device is a local file shared by the ranks (partitioned) or a
//! namespace of a `kavach target serve` process; `kavach cr ls` must show each rank's files, and
//! the kernel directory named by KAVACH_CR_DIR must stay empty (everything went to the device).
//!
//! Open MPI is installed with apt when missing. The runs are serialised (one `mpirun` at a
//! time): the machine has few cores and the ranks are oversubscribed.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

fn ensure_tool(tool: &str, package: &str) {
    let have = || {
        Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    static ONE: Mutex<()> = Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    if !have() {
        let wait = "DPkg::Lock::Timeout=600";
        let _ = Command::new("apt-get")
            .args(["-o", wait, "update"])
            .output();
        let o = Command::new("apt-get")
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

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("two levels below the workspace")
        .to_path_buf()
}

struct Built {
    preload: PathBuf,
    kavach: PathBuf,
    comd: PathBuf,
}

/// Builds the shim and the CLI (integration tests of a cdylib crate do not build it) in this
/// test's profile, and compiles the C program with mpicc.
fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        ensure_tool("mpicc", "libopenmpi-dev");
        ensure_tool("mpirun", "openmpi-bin");
        let exe = std::env::current_exe().expect("test exe");
        let profile_dir = exe
            .parent()
            .and_then(|d| d.parent())
            .expect("target/<profile>/deps")
            .to_path_buf();
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let mut cargo = Command::new(env!("CARGO"));
        cargo.current_dir(workspace()).args([
            "build",
            "-q",
            "-p",
            "kavach-cr-preload",
            "-p",
            "kavach",
        ]);
        if release {
            cargo.arg("--release");
        }
        let o = cargo.output().expect("run cargo build");
        assert!(
            o.status.success(),
            "cargo build of the shim and the CLI failed:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let comd = profile_dir.join("mpi-tests").join("comd_cr");
        std::fs::create_dir_all(comd.parent().unwrap()).unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/comd_cr.c");
        let o = Command::new("mpicc")
            .args(["-O2", "-Wall", "-o"])
            .arg(&comd)
            .arg(&src)
            .output()
            .expect("run mpicc");
        assert!(
            o.status.success(),
            "mpicc: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        Built {
            preload: profile_dir.join("libkavach_cr.so"),
            kavach: profile_dir.join("kavach"),
            comd,
        }
    })
}

/// One `mpirun` at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// A scratch directory and device files, removed on drop.
struct Scratch {
    dir: PathBuf,
    shm: Vec<PathBuf>,
}

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("kavach-mpi-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch {
            dir,
            shm: Vec::new(),
        }
    }

    fn device(&mut self, name: &str) -> PathBuf {
        let p = PathBuf::from(format!(
            "/dev/shm/kavach-mpi-{}-{name}.dev",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&p);
        self.shm.push(p.clone());
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        for p in &self.shm {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn wait_with_timeout(mut child: Child, limit: Duration, what: &str) -> Output {
    let start = Instant::now();
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish in {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

/// Runs `comd_cr ARGS` on `np` ranks; with `env` given, under the shim with those variables.
fn mpirun(np: u32, env: Option<&[(&str, String)]>, args: &[&str]) -> Output {
    let b = built();
    let mut cmd = Command::new("mpirun");
    cmd.args(["--allow-run-as-root", "--oversubscribe", "-np"])
        .arg(np.to_string());
    if let Some(env) = env {
        cmd.arg("-x")
            .arg(format!("LD_PRELOAD={}", b.preload.display()));
        for (k, v) in env {
            cmd.arg("-x").arg(format!("{k}={v}"));
        }
    }
    cmd.arg(&b.comd).args(args);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let what = format!("mpirun -np {np} comd_cr {}", args.join(" "));
    wait_with_timeout(
        cmd.spawn().expect("run mpirun"),
        Duration::from_secs(300),
        &what,
    )
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// "rank R step S digest HEX" lines: rank -> (step, digest).
fn digests(o: &Output) -> BTreeMap<u32, (u64, String)> {
    let mut m = BTreeMap::new();
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() == 6 && w[0] == "rank" && w[2] == "step" && w[4] == "digest" {
            let r: u32 = w[1].parse().expect("rank number");
            let s: u64 = w[3].parse().expect("step number");
            assert!(
                m.insert(r, (s, w[5].to_string())).is_none(),
                "rank {r} twice"
            );
        }
    }
    m
}

const ATOMS: &str = "3000";

/// The uninterrupted run on the kernel's file system: the digests to match.
fn reference(scratch: &Scratch, np: u32, steps: u32) -> BTreeMap<u32, (u64, String)> {
    let dir = scratch.dir.join("kernel");
    let o = mpirun(
        np,
        None,
        &[
            "run",
            dir.to_str().unwrap(),
            "--atoms",
            ATOMS,
            "--steps",
            &steps.to_string(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let d = digests(&o);
    assert_eq!(d.len(), np as usize, "{}", text(&o));
    // The kernel run wrote real files: the program does write checkpoints.
    for r in 0..np {
        assert!(
            dir.join(format!("ckpt.{steps}/rank.{r}")).is_file(),
            "kernel run wrote no checkpoint of rank {r}"
        );
    }
    d
}

/// Every file under `dir` on the kernel's file system.
fn kernel_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(kernel_files(&p));
            }
            out.push(p);
        }
    }
    out
}

/// Stop after step 3 through the shim, restart to step 6, compare with the kernel run.
fn checkpoint_and_restart(np: u32, scratch: &Scratch, env: &[(&str, String)]) -> Output {
    let want = reference(scratch, np, 6);
    let cr_dir = scratch.dir.join("cr");
    std::fs::create_dir_all(&cr_dir).unwrap();
    let cr = cr_dir.to_str().unwrap().to_string();
    let mut env: Vec<(&str, String)> = env.to_vec();
    env.push(("KAVACH_CR_DIR", cr.clone()));

    let first = mpirun(
        np,
        Some(&env),
        &[
            "run",
            &cr,
            "--atoms",
            ATOMS,
            "--steps",
            "6",
            "--stop-after",
            "3",
        ],
    );
    assert!(first.status.success(), "first run: {}", text(&first));
    let d1 = digests(&first);
    assert_eq!(d1.len(), np as usize, "{}", text(&first));
    assert!(d1.values().all(|(s, _)| *s == 3), "{}", text(&first));

    let second = mpirun(
        np,
        Some(&env),
        &["run", &cr, "--atoms", ATOMS, "--steps", "6", "--restart"],
    );
    assert!(second.status.success(), "restart: {}", text(&second));
    assert!(
        String::from_utf8_lossy(&second.stdout).contains("restart from step 3"),
        "the restart did not find step 3: {}",
        text(&second)
    );
    let d2 = digests(&second);
    assert_eq!(d2, want, "restarted run differs from the uninterrupted one");
    let leaked = kernel_files(&cr_dir);
    assert!(
        leaked.is_empty(),
        "checkpoint files reached the kernel's file system: {leaked:?}"
    );
    second
}

/// `kavach cr ls DEVICE --partition P --parts N --recursive`-like listing: asserts every rank's
/// files of steps 1 to 6 appear on its partition.
fn assert_ls_shows_ranks(spec: &str, np: u32, size: u64) {
    let b = built();
    for r in 0..np {
        let o = Command::new(&b.kavach)
            .args(["cr", "ls", spec])
            .args(cr_ls_partition_args(r, np, size))
            .output()
            .expect("run kavach cr ls");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "kavach cr ls {spec} (partition {r}): {}",
            String::from_utf8_lossy(&o.stderr)
        );
        for step in 1..=6 {
            let want = format!("ckpt.{step}/rank.{r}");
            assert!(
                out.contains(&want),
                "kavach cr ls {spec} partition {r} lacks {want}:\n{out}"
            );
        }
        // Every checkpoint file of the partition is this rank's.
        let files: Vec<&str> = out
            .split_whitespace()
            .filter(|w| w.contains("/rank."))
            .collect();
        assert_eq!(files.len(), 6, "partition {r}: {out}");
        for f in files {
            assert!(
                f.ends_with(&format!("/rank.{r}")),
                "partition {r} holds {f}:\n{out}"
            );
        }
    }
}

fn cr_ls_partition_args(r: u32, _np: u32, _size: u64) -> Vec<String> {
    vec!["--partition".into(), r.to_string()]
}

fn local(np: u32) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut s = Scratch::new(&format!("local{np}"));
    let dev = s.device(&format!("local{np}"));
    let size = 256u64 << 20;
    let env = vec![
        ("KAVACH_CR_DEVICE", dev.display().to_string()),
        ("KAVACH_CR_SIZE", size.to_string()),
        ("KAVACH_CR_JOB", format!("local{np}")),
    ];
    checkpoint_and_restart(np, &s, &env);
    assert_ls_shows_ranks(dev.to_str().unwrap(), np, size);
}

#[test]
fn four_ranks_share_a_local_device() {
    local(4);
}

#[test]
fn eight_ranks_share_a_local_device() {
    local(8);
}

/// A `kavach target serve` process on loopback, killed on drop.
struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start(dir: &Path) -> Server {
        let b = built();
        let mut child = Command::new(&b.kavach)
            .args(["target", "serve", "--dir"])
            .arg(dir)
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run kavach target serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("read the server's first line");
        let addr = parse_listen_line(&line)
            .unwrap_or_else(|| panic!("no address in the server's first line {line:?}"));
        Server { child, addr }
    }
}

fn parse_listen_line(line: &str) -> Option<String> {
    line.split_whitespace()
        .find(|w| w.starts_with("127.0.0.1:"))
        .map(|w| w.trim_matches(|c: char| c == '"' || c == ',').to_string())
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn remote(np: u32) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let s = Scratch::new(&format!("remote{np}"));
    let store = s.dir.join("target");
    std::fs::create_dir_all(&store).unwrap();
    let server = Server::start(&store);
    let spec = format!("tcp://{}/job{np}", server.addr);
    let size = 256u64 << 20;
    let env = vec![
        ("KAVACH_CR_DEVICE", spec.clone()),
        ("KAVACH_CR_SIZE", size.to_string()),
        ("KAVACH_CR_JOB", format!("job{np}")),
    ];
    checkpoint_and_restart(np, &s, &env);
    assert_ls_shows_ranks(&spec, np, size);
    drop(server);
}

#[test]
fn four_ranks_checkpoint_to_a_target_process() {
    remote(4);
}

#[test]
fn eight_ranks_checkpoint_to_a_target_process() {
    remote(8);
}

/// Runs two groups of ranks as if on nodes `c1` and `c2` (KAVACH_CR_NODE per group).
fn mpirun_two_nodes(per_node: u32, env: &[(&str, String)], args: &[&str]) -> Output {
    let b = built();
    let mut cmd = Command::new("mpirun");
    cmd.args(["--allow-run-as-root", "--oversubscribe"]);
    for (i, node) in ["c1", "c2"].iter().enumerate() {
        if i > 0 {
            cmd.arg(":");
        }
        // -x applies to its own application context only.
        cmd.arg("-x")
            .arg(format!("LD_PRELOAD={}", b.preload.display()));
        for (k, v) in env {
            cmd.arg("-x").arg(format!("{k}={v}"));
        }
        cmd.args(["-np", &per_node.to_string(), "env"])
            .arg(format!("KAVACH_CR_NODE={node}"))
            .arg(&b.comd)
            .args(args);
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    wait_with_timeout(
        cmd.spawn().expect("run mpirun"),
        Duration::from_secs(300),
        "mpirun on two simulated nodes",
    )
}

#[test]
fn a_topology_file_puts_each_node_s_ranks_on_its_closest_partner_device() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut s = Scratch::new("topology");
    let a = s.device("topo-a");
    let b = s.device("topo-b");
    // c1 (rack r1) is one hop from r3 (device a), c2 (r2) one hop from r4 (device b).
    let topo = s.dir.join("topology");
    std::fs::write(
        &topo,
        format!(
            "node c1 r1\nnode c2 r2\nnode s1 r3\nnode s2 r4\n\
             hops r1 r3 1\nhops r1 r4 2\nhops r2 r4 1\nhops r2 r3 2\nhops r3 r4 1\n\
             device s1 {} 64M\ndevice s2 {} 64M\n",
            a.display(),
            b.display()
        ),
    )
    .unwrap();
    let cr = s.dir.join("cr");
    std::fs::create_dir_all(&cr).unwrap();
    let cr = cr.to_str().unwrap().to_string();
    let env = vec![
        ("KAVACH_CR_DIR", cr.clone()),
        ("KAVACH_CR_TOPOLOGY", topo.display().to_string()),
        ("KAVACH_CR_JOB", "topo".to_string()),
    ];
    let o = mpirun_two_nodes(2, &env, &["run", &cr, "--atoms", "500", "--steps", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(digests(&o).len(), 4, "{}", text(&o));
    // Ranks 0 and 1 (node c1) on device a, partitions 0 and 1; ranks 2 and 3 on device b.
    let kavach = &built().kavach;
    for (dev, part, rank) in [(&a, 0, 0), (&a, 1, 1), (&b, 0, 2), (&b, 1, 3)] {
        let o = Command::new(kavach)
            .args(["cr", "ls"])
            .arg(dev)
            .args(cr_ls_partition_args(part, 2, 64 << 20))
            .output()
            .expect("run kavach cr ls");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(
            out.contains(&format!("ckpt.2/rank.{rank}")),
            "{} partition {part} lacks rank {rank}'s checkpoint:\n{out}",
            dev.display()
        );
    }
}

#[test]
fn a_restart_with_another_rank_count_on_the_device_aborts_naming_the_rank() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut s = Scratch::new("ranks");
    let dev = s.device("ranks");
    let cr = s.dir.join("cr");
    std::fs::create_dir_all(&cr).unwrap();
    let cr = cr.to_str().unwrap().to_string();
    let env = vec![
        ("KAVACH_CR_DIR", cr.clone()),
        ("KAVACH_CR_DEVICE", dev.display().to_string()),
        ("KAVACH_CR_SIZE", (64u64 << 20).to_string()),
        ("KAVACH_CR_JOB", "ranks".to_string()),
    ];
    let args = ["run", cr.as_str(), "--atoms", "200", "--steps", "1"];
    let o = mpirun(4, Some(&env), &args);
    assert!(o.status.success(), "{}", text(&o));
    let o = mpirun(2, Some(&env), &args);
    assert!(
        !o.status.success(),
        "a 2-rank run reused a 4-part device: {}",
        text(&o)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("kavach-cr: rank 0 on ") && err.contains("4 partitions"),
        "{}",
        text(&o)
    );
    assert!(digests(&o).is_empty(), "the program ran: {}", text(&o));
}

#[test]
fn a_bad_topology_file_aborts_naming_its_line() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let s = Scratch::new("badtopo");
    let topo = s.dir.join("topology");
    std::fs::write(&topo, "node c1 r1\nhops r1 r2 many\n").unwrap();
    let cr = s.dir.join("cr");
    std::fs::create_dir_all(&cr).unwrap();
    let cr = cr.to_str().unwrap().to_string();
    let env = vec![
        ("KAVACH_CR_DIR", cr.clone()),
        ("KAVACH_CR_TOPOLOGY", topo.display().to_string()),
    ];
    let o = mpirun(
        2,
        Some(&env),
        &["run", &cr, "--atoms", "10", "--steps", "1"],
    );
    assert!(!o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("{}:2:", topo.display())) && err.contains("\"many\""),
        "{}",
        text(&o)
    );
    assert!(digests(&o).is_empty(), "{}", text(&o));
}

#[test]
fn without_kavach_cr_dir_the_wrappers_change_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let s = Scratch::new("plain");
    let dir = s.dir.join("plain");
    let d = dir.to_str().unwrap();
    let o = mpirun(2, Some(&[]), &["run", d, "--atoms", "100", "--steps", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    let want = mpirun(2, None, &["run", d, "--atoms", "100", "--steps", "2"]);
    assert_eq!(digests(&o), digests(&want));
    assert!(
        dir.join("ckpt.2/rank.1").is_file(),
        "the kernel did not get the files"
    );
}

/// The files `kavach cr ls DEVICE --partition P` lists (words with "ckpt.").
fn ls_files(dev: &str, part: u32) -> Vec<String> {
    let o = Command::new(&built().kavach)
        .args(["cr", "ls", dev])
        .args(cr_ls_partition_args(part, 0, 0))
        .output()
        .expect("run kavach cr ls");
    assert!(
        o.status.success(),
        "kavach cr ls {dev} --partition {part}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .filter(|w| w.contains("/rank."))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_rank_killed_mid_checkpoint_restarts_everyone_from_the_last_whole_one() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut s = Scratch::new("kill");
    let dev = s.device("kill");
    let want = reference(&s, 4, 6);
    let cr = s.dir.join("cr");
    std::fs::create_dir_all(&cr).unwrap();
    let cr = cr.to_str().unwrap().to_string();
    let env = vec![
        ("KAVACH_CR_DIR", cr.clone()),
        ("KAVACH_CR_DEVICE", dev.display().to_string()),
        ("KAVACH_CR_SIZE", (128u64 << 20).to_string()),
    ];
    // Rank 2 dies by SIGKILL halfway through checkpoint 4; mpirun then ends the others.
    let o = mpirun(
        4,
        Some(&env),
        &[
            "run",
            &cr,
            "--atoms",
            ATOMS,
            "--steps",
            "6",
            "--kill-at",
            "4",
            "--kill-rank",
            "2",
        ],
    );
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("rank 2: killing myself"),
        "{}",
        text(&o)
    );
    // Rank 2's namespace recovers with the half-written checkpoint 4 in it.
    assert!(
        ls_files(dev.to_str().unwrap(), 2).contains(&"ckpt.4/rank.2".to_string()),
        "the killed rank's partial file is not on the device"
    );
    let o = mpirun(
        4,
        Some(&env),
        &["run", &cr, "--atoms", ATOMS, "--steps", "6", "--restart"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("restart from step 3"), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("ckpt.4/rank.2: short payload"),
        "the torn checkpoint was not refused: {}",
        text(&o)
    );
    assert_eq!(digests(&o), want);
}

#[test]
fn ranks_take_the_devices_of_kavach_cr_devices_round_robin() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut s = Scratch::new("devices");
    let a = s.device("devices-a");
    let b = s.device("devices-b");
    let cr = s.dir.join("cr");
    std::fs::create_dir_all(&cr).unwrap();
    let cr = cr.to_str().unwrap().to_string();
    let env = vec![
        ("KAVACH_CR_DIR", cr.clone()),
        (
            "KAVACH_CR_DEVICES",
            format!("{},{}", a.display(), b.display()),
        ),
        ("KAVACH_CR_SIZE", (64u64 << 20).to_string()),
        // The other entry point: MPI_Init_thread.
        ("COMD_CR_INIT_THREAD", "1".to_string()),
    ];
    let o = mpirun(
        4,
        Some(&env),
        &["run", &cr, "--atoms", "300", "--steps", "1"],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(digests(&o).len(), 4);
    // One node: ranks 0 and 2 on the first device, 1 and 3 on the second, in rank order.
    for (dev, part, rank) in [(&a, 0, 0), (&a, 1, 2), (&b, 0, 1), (&b, 1, 3)] {
        assert_eq!(
            ls_files(dev.to_str().unwrap(), part),
            vec![format!("ckpt.1/rank.{rank}")],
            "{} partition {part}",
            dev.display()
        );
    }
}
