//! `kavach target`: the block target over TCP (`target::server`).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use haq::arbiter::{ArbiterConfig, Weights};
use haq::runtime::{ControllerOptions, ServiceModel};
use target::Direct;
use target::server::{ServerOptions, TargetServer, install_signal_handlers};

use crate::outcome::{Outcome, refused};

#[derive(Debug, Subcommand)]
pub enum TargetCommand {
    /// Serve namespaces (one file DIR/JOB.ns per job) to checkpoint/restart runtimes over TCP.
    ///
    /// Clients name a namespace in their device spec, tcp://HOST:PORT/JOB (KAVACH_CR_DEVICE for
    /// the LD_PRELOAD runtime). A client creates its namespace at its first connection; a
    /// write is answered only once it is durable in the namespace file (O_DSYNC, and O_DIRECT
    /// where the file system allows it). The protocol is docs/format/target-protocol.md.
    ///
    /// DIR must exist and be a directory (it is not created, so that a mistyped path is an
    /// error); a lock file in it (.kavach-target.lock) keeps a second server out. When the
    /// server is up it prints one line on stdout, `kavach: listening on ADDR (...)`, or with
    /// --json a JSON object {"event":"listening","listen":ADDR,"dir":DIR,"qos":SETTINGS}
    /// (SETTINGS: "off" or the policy, weights and emulation in one string); when it stops,
    /// one more line (`kavach: target stopped after ...`, or {"event":"stopped",...}). Errors
    /// go to stderr. SIGTERM or SIGINT stop it cleanly; kill -9 loses nothing that was
    /// acknowledged. There is no authentication: listen on a trusted network only.
    ///
    /// With --qos, tenants share the target by weight: a client's class is its I/O priority
    /// (ionice -c1 realtime: high, -c2 best effort or none: medium, -c3 idle: low; --urgent
    /// jobs: urgent), and `kavach target stats` shows each tenant's bandwidth and waits.
    #[command(after_help = "Examples:\n  \
        mkdir -p /srv/cr && kavach target serve --dir /srv/cr\n  \
        kavach target serve --dir /srv/cr --listen 0.0.0.0:7420 --json\n  \
        kavach target serve --dir /srv/cr --qos drr --weights 128k,64k,32k --urgent admin\n  \
        kavach target serve --dir /dev/shm/t --qos drr --emulate units=2,base-us=2000,mbps=100\n  \
        ionice -c1 kavach target load 127.0.0.1:7420 --job gold   (served as high)\n  \
        kavach target stats 127.0.0.1:7420\n  \
        KAVACH_CR_DIR=/ckpt KAVACH_CR_DEVICE=tcp://server:7420/job42 \\\n      \
        LD_PRELOAD=libkavach_cr.so ./app\n\n\
        Exit status: 0 stopped by a signal, 2 could not start (or failed while serving).")]
    Serve(ServeArgs),
    /// Print a target's per-tenant quality-of-service statistics (the STATS request).
    ///
    /// One row per tenant queue (a job and its class): bandwidth and IOPS over the last
    /// second, requests queued now and at most, the wait in the queue (50th and 99th
    /// percentile, from queueing to start) and the 99th percentile of the whole latency, then
    /// the commands and bytes served since the queue was made. A target serving without
    /// --qos says so. Opens no namespace.
    #[command(after_help = "Examples:\n  \
        kavach target stats 127.0.0.1:7420\n  \
        watch -n1 kavach target stats 127.0.0.1:7420\n  \
        kavach target stats server:7420 --json | jq '.tenants[] | {name, class, bandwidth_bps}'\n\n\
        Exit status: 0 printed, 2 could not reach the target (or it answered nonsense).")]
    Stats(StatsArgs),
    /// Load a target's namespace with back-to-back reads or writes and report bandwidth,
    /// IOPS and latency: a load generator for quality of service.
    ///
    /// Opens DEPTH connections to namespace JOB (creating it with --span bytes if it is
    /// missing), each with one request outstanding at a time, at random offsets aligned to
    /// --size, for --seconds; then prints the totals (bytes, requests, bandwidth, IOPS, and
    /// the 50th and 99th percentile and the maximum of the request latency). Like any client
    /// (and the LD_PRELOAD runtime) it tells the target its tenant class from its own I/O
    /// priority, so run it under ionice to load as another class. Writes are durable when
    /// answered, so write loads overwrite the namespace's bytes with a pattern.
    #[command(after_help = "Examples:\n  \
        kavach target load 127.0.0.1:7420 --job bench --read\n  \
        ionice -c1 kavach target load 127.0.0.1:7420 --job gold --size 4k --depth 16 --seconds 10\n  \
        ionice -c3 kavach target load 127.0.0.1:7420 --job batch --size 128k --json\n  \
        at=$(( $(date +%s) + 2 )); for c in 1 2 3; do ionice -c$c kavach target load \\\n      \
        127.0.0.1:7420 --job j$c --read --start-at $at --json & done; wait\n\n\
        Exit status: 0 the load ran, 2 could not run (bad arguments, the target unreachable or \
        refusing, a request failed).")]
    Load(LoadArgs),
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The target, HOST:PORT.
    addr: String,
    /// Print the target's JSON document, pretty-printed (its fields are in
    /// docs/format/target-protocol.md, section "Quality of service").
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct LoadArgs {
    /// The target, HOST:PORT.
    addr: String,
    /// The namespace to load (1 to 64 characters of [A-Za-z0-9._-]).
    #[arg(long, value_parser = parse_job)]
    job: String,
    /// Bytes per request (1 byte to 8 MiB; 4k, 128KiB, ...).
    #[arg(long, default_value = "4k", value_parser = parse_request_size)]
    size: u64,
    /// Connections, each with one request outstanding (1 to 256).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=256))]
    depth: u32,
    /// How long to load, in seconds (above 0, at most 3600; decimals allowed).
    #[arg(long, default_value = "10", value_parser = parse_seconds)]
    seconds: f64,
    /// Start at this time (seconds since 1970, decimals allowed) once every connection is
    /// open, so that several load processes start together; a time already past starts at
    /// once. Without it, the load starts as soon as its connections are open.
    #[arg(long, value_name = "UNIX_SECONDS", value_parser = parse_start_at)]
    start_at: Option<f64>,
    /// Read instead of write.
    #[arg(long)]
    read: bool,
    /// The size of the namespace if this creates it (at least --size).
    #[arg(long, default_value = "64MiB", value_parser = parse_span)]
    span: u64,
    /// Print the report as a JSON object: addr, job, ioprio_class, ioprio_level, class (the
    /// class a target with --qos serves it as), depth, size, read, seconds, ops, bytes,
    /// bandwidth_bps, iops, latency_p50_us, latency_p99_us, latency_max_us.
    #[arg(long)]
    json: bool,
}

fn parse_job(s: &str) -> std::result::Result<String, String> {
    target::validate_job(s).map_err(|e| e.to_string())?;
    Ok(s.to_string())
}

fn parse_request_size(s: &str) -> std::result::Result<u64, String> {
    let n = crate::units::parse_size(s)?;
    let max = u64::from(target::proto::MAX_PAYLOAD);
    if n == 0 || n > max {
        return Err(format!("expected 1 to {max} bytes, found {n}"));
    }
    Ok(n)
}

fn parse_span(s: &str) -> std::result::Result<u64, String> {
    let n = crate::units::parse_size(s)?;
    if n == 0 {
        return Err("expected more than 0 bytes, found 0".into());
    }
    Ok(n)
}

fn parse_start_at(s: &str) -> std::result::Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("expected seconds since 1970, found `{s}`"))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    if !(v.is_finite() && v >= 0.0 && v <= now + 3600.0) {
        return Err(format!(
            "expected a time at most an hour from now ({now:.0}), found {s}"
        ));
    }
    Ok(v)
}

fn parse_seconds(s: &str) -> std::result::Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("expected a number of seconds, found `{s}`"))?;
    if !(v > 0.0 && v <= 3600.0) {
        return Err(format!(
            "expected above 0 and at most 3600 seconds, found {s}"
        ));
    }
    Ok(v)
}

/// Whether namespace files use O_DIRECT.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DirectArg {
    /// Where the file system allows it.
    Auto,
    /// Always; a namespace on a file system without it cannot be opened.
    On,
    /// Never (the page cache, written through with O_DSYNC).
    Off,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Directory holding one file per namespace (must exist).
    #[arg(long)]
    dir: PathBuf,
    /// Address to listen on, HOST:PORT (port 0: any free port; the first line on stdout says
    /// which).
    #[arg(long, default_value = "127.0.0.1:7420")]
    listen: String,
    /// O_DIRECT for the namespace files.
    #[arg(long, value_enum, default_value_t = DirectArg::Auto)]
    direct: DirectArg,
    /// Most connections served at once (at least 1); one more is refused.
    #[arg(long, default_value_t = 256)]
    max_connections: usize,
    /// Print the lines on stdout (listening, stopped) as JSON objects.
    #[arg(long)]
    json: bool,
    /// Quality of service between tenants: every READ, WRITE and FLUSH waits in its tenant's
    /// queue (one per job and class; the class from the client's ionice) and an arbiter
    /// starts them by this policy: drr (deficit round robin, each class's weight in bytes
    /// per round: bandwidth shares whatever the request sizes), wrr (NVMe weighted round
    /// robin, its weight in requests per round), rr (plain round robin between queues) or
    /// off (no arbiter: every request runs on its connection's thread at once). Shares hold
    /// while the device is the bottleneck (tenants' queues stay non-empty); a device faster
    /// than the clients can feed divides nothing (see --emulate). Off by default: a tenant
    /// alone gains nothing from it, and it costs (measured on 2 cores, 4 KiB from /dev/shm,
    /// no emulation: drr gave 0.87-0.99 of the bandwidth of off, more at 32 connections than
    /// at 8, because requests beyond --workers wait in a queue; docs/benchmarks.md).
    #[arg(long, value_enum, default_value_t = QosArg::Off)]
    qos: QosArg,
    /// Class weights HIGH,MEDIUM,LOW (each 1 to 256 units): request counts for wrr (default
    /// 32,16,8), byte sizes for drr, multiples of 512 up to 128k (default 128k,64k,32k). The
    /// same 4:2:1 as the dissertation. Not for rr.
    #[arg(long, value_name = "H,M,L")]
    weights: Option<String>,
    /// Arbitration burst (0 to 7): at most 2^N requests from one queue per turn; 7 means no
    /// limit (the default).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=7))]
    burst: Option<u8>,
    /// Requests executed at once by the arbiter's workers (1 to 1024; default 4). With
    /// --emulate the emulated units are the workers, so the two do not go together.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024), conflicts_with = "emulate")]
    workers: Option<u32>,
    /// Requests a tenant queue holds (1 to 65536); a tenant with more outstanding requests
    /// waits for room, so a tenant that floods fills only its own queue.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=65536))]
    queue_depth: u32,
    /// Emulate a device's service time, units=U,base-us=B,mbps=M: a request holds one of U
    /// units for at least B microseconds plus its bytes at M MB/s (the data is still read
    /// and written). For measuring shares on a machine whose storage is faster than its CPU
    /// can drive, as the dissertation emulated its SSD: the emulated device, not the CPU,
    /// is then the bottleneck the arbiter divides. Choose it slow enough that the tenants'
    /// queues stay non-empty (QUEUED in `kavach target stats`): on 2 busy cores
    /// units=2,base-us=2000,mbps=100 (about 1000 requests a second) holds 4:2:1 to 1%,
    /// units=4,base-us=50,mbps=400 divides nothing.
    #[arg(long, value_name = "SPEC")]
    emulate: Option<String>,
    /// A job served in the urgent class (strict priority over all others); repeatable. The
    /// urgent class is granted here only, never taken from a client.
    #[arg(long, value_name = "JOB", value_parser = parse_job)]
    urgent: Vec<String>,
}

/// The arbiter's policy, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QosArg {
    /// Deficit round robin: weights in bytes.
    Drr,
    /// NVMe weighted round robin: weights in requests.
    Wrr,
    /// Plain round robin between tenant queues.
    Rr,
    /// No arbiter.
    Off,
}

/// One line for the settings: policy, weights, workers, emulation.
fn qos_summary(q: &ControllerOptions) -> String {
    use haq::class::Class;
    let a = &q.arbiter;
    let w = |c: Class| a.weight_cost(c).to_string();
    let mut s = a.policy.name().to_string();
    if a.policy != haq::arbiter::Policy::RoundRobin {
        s += &format!(
            " weights {},{},{}",
            w(Class::High),
            w(Class::Medium),
            w(Class::Low)
        );
    }
    s += &format!(", {} workers, queue depth {}", q.workers, q.queue_depth);
    if let Some(m) = &q.service {
        s += &format!(", emulating {m}");
    }
    s
}

/// The quality-of-service settings the options ask for (`None`: off).
fn qos_options(a: &ServeArgs) -> std::result::Result<Option<ControllerOptions>, String> {
    let qos_only = |what: &str| format!("{what} needs --qos drr, wrr or rr");
    if a.qos == QosArg::Off {
        if a.weights.is_some() {
            return Err(qos_only("--weights"));
        }
        if a.burst.is_some() {
            return Err(qos_only("--burst"));
        }
        if a.workers.is_some() {
            return Err(qos_only("--workers"));
        }
        if a.emulate.is_some() {
            return Err(qos_only("--emulate"));
        }
        if !a.urgent.is_empty() {
            return Err(qos_only("--urgent"));
        }
        return Ok(None);
    }
    let mut arbiter = match a.qos {
        QosArg::Drr => ArbiterConfig::dissertation_drr(),
        QosArg::Wrr => ArbiterConfig::dissertation_wrr(),
        QosArg::Rr | QosArg::Off => ArbiterConfig::round_robin(),
    };
    if let Some(w) = &a.weights {
        let parts: Vec<&str> = w.split(',').map(str::trim).collect();
        if parts.len() != 3 {
            return Err(format!(
                "--weights: expected three weights HIGH,MEDIUM,LOW, found `{w}`"
            ));
        }
        let mut counts = [0u32; 3];
        for (c, p) in counts.iter_mut().zip(&parts) {
            *c = match a.qos {
                QosArg::Wrr => p.parse::<u32>().map_err(|_| {
                    format!("--weights: expected a request count 1 to 256, found `{p}`")
                })?,
                QosArg::Drr => {
                    let unit = u64::from(arbiter.drr_unit);
                    let bytes =
                        crate::units::parse_size(p).map_err(|e| format!("--weights: {e}"))?;
                    if bytes == 0 || bytes % unit != 0 || bytes / unit > 256 {
                        return Err(format!(
                            "--weights: expected a byte size, a multiple of {unit} from {unit} \
                             to {}, found `{p}`",
                            unit * 256
                        ));
                    }
                    (bytes / unit) as u32
                }
                QosArg::Rr | QosArg::Off => {
                    return Err("--weights: round robin has no weights".into());
                }
            };
        }
        arbiter.weights = Weights::from_counts(counts[0], counts[1], counts[2])
            .map_err(|e| format!("--weights: {e}"))?;
    }
    if let Some(b) = a.burst {
        arbiter.burst = b;
    }
    arbiter.validate().map_err(|e| e.to_string())?;
    let service = match &a.emulate {
        None => None,
        Some(spec) => Some(
            spec.parse::<ServiceModel>()
                .map_err(|e| format!("--emulate: {e}"))?,
        ),
    };
    let workers = a.workers.or(service.map(|s| s.units)).unwrap_or(4);
    Ok(Some(ControllerOptions {
        arbiter,
        workers,
        service,
        queue_depth: a.queue_depth,
    }))
}

pub fn run(c: TargetCommand) -> Result<Outcome> {
    match c {
        TargetCommand::Serve(a) => serve(&a),
        TargetCommand::Stats(a) => stats(&a),
        TargetCommand::Load(a) => load(&a),
    }
}

fn serve(a: &ServeArgs) -> Result<Outcome> {
    if a.max_connections == 0 {
        return Err(refused("--max-connections must be at least 1"));
    }
    let qos = qos_options(a).map_err(|e| refused(format!("kavach target serve: {e}")))?;
    let qos_name = match &qos {
        None => "off".to_string(),
        Some(q) => qos_summary(q),
    };
    let opts = ServerOptions {
        qos,
        urgent_jobs: a.urgent.clone(),
        max_connections: a.max_connections,
        direct: match a.direct {
            DirectArg::Auto => Direct::Auto,
            DirectArg::On => Direct::On,
            DirectArg::Off => Direct::Off,
        },
        ..ServerOptions::default()
    };
    // Bind first, then take the directory: a bad address or directory creates nothing.
    let srv = TargetServer::bind(&a.listen, &a.dir, opts).map_err(|e| {
        refused(format!(
            "kavach target serve --dir {}: {e}",
            a.dir.display()
        ))
    })?;
    install_signal_handlers(&srv.handle())
        .map_err(|e| refused(format!("cannot install signal handlers: {e}")))?;
    let addr = srv.local_addr();
    if a.json {
        server::say_out!(
            "{}",
            serde_json::json!({
                "event": "listening",
                "listen": addr.to_string(),
                "dir": a.dir,
                "qos": qos_name,
            })
        );
    } else {
        server::say_out!(
            "kavach: listening on {addr} (namespaces in {}, qos {qos_name}); stop with Ctrl-C \
             or SIGTERM",
            a.dir.display()
        );
    }
    let summary = srv.run().context("the target failed")?;
    if a.json {
        server::say_out!(
            "{}",
            serde_json::json!({
                "event": "stopped",
                "requests": summary.requests,
                "connections": summary.connections,
            })
        );
    } else {
        server::say_out!(
            "kavach: target stopped after {} requests on {} connections",
            summary.requests,
            summary.connections
        );
    }
    Ok(Outcome::Ok)
}

fn stats(a: &StatsArgs) -> Result<Outcome> {
    let v = target::fetch_stats(&a.addr)
        .map_err(|e| refused(format!("kavach target stats {}: {e}", a.addr)))?;
    if a.json {
        crate::outcome::print_json(&v)?;
        return Ok(Outcome::Ok);
    }
    if v["qos"] != "on" {
        println!(
            "{}: quality of service is off (start the target with --qos drr|wrr|rr)",
            a.addr
        );
        return Ok(Outcome::Ok);
    }
    print!("{}", stats_table(&a.addr, &v));
    Ok(Outcome::Ok)
}

/// The text form of a STATS document with QoS on.
fn stats_table(addr: &str, v: &serde_json::Value) -> String {
    use std::fmt::Write as _;
    let f = |x: &serde_json::Value| x.as_f64().unwrap_or(f64::NAN);
    let text = |x: &serde_json::Value| match x {
        serde_json::Value::String(s) => s.to_ascii_lowercase(),
        serde_json::Value::Null => "-".into(),
        other => other.to_string(),
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{addr}: policy {}, weights high,medium,low {} (units of the policy's cost), up {:.0} s",
        text(&v["policy"]),
        ["high", "medium", "low"]
            .iter()
            .map(|c| {
                // The registers are 0's-based: the count is one more.
                v["weights"][c]
                    .as_u64()
                    .map_or("-".to_string(), |r| (r + 1).to_string())
            })
            .collect::<Vec<_>>()
            .join(","),
        f(&v["uptime_s"])
    );
    let _ = writeln!(
        out,
        "{:<20} {:<7} {:>10} {:>8} {:>6} {:>6} {:>9} {:>9} {:>9} {:>10} {:>10}",
        "TENANT",
        "CLASS",
        "MB/S",
        "IOPS",
        "QUEUED",
        "MAX-Q",
        "WAIT-P50",
        "WAIT-P99",
        "LAT-P99",
        "COMMANDS",
        "BYTES"
    );
    let empty = Vec::new();
    let tenants = v["tenants"].as_array().unwrap_or(&empty);
    if tenants.is_empty() {
        let _ = writeln!(out, "(no tenant has sent a request yet)");
    }
    let ms = |us: f64| format!("{:.2}ms", us / 1000.0);
    for t in tenants {
        let _ = writeln!(
            out,
            "{:<20} {:<7} {:>10.2} {:>8.0} {:>6} {:>6} {:>9} {:>9} {:>9} {:>10} {:>10}",
            t["name"].as_str().unwrap_or("-"),
            text(&t["class"]),
            f(&t["bandwidth_bps"]) / 1e6,
            f(&t["iops"]),
            text(&t["queued"]),
            text(&t["max_queued"]),
            ms(f(&t["wait_p50_us"])),
            ms(f(&t["wait_p99_us"])),
            ms(f(&t["latency_p99_us"])),
            text(&t["commands"]),
            crate::units::format_size(t["bytes"].as_u64().unwrap_or(0)),
        );
    }
    out
}

/// What one load connection did.
#[derive(Default)]
struct Worker {
    ops: u64,
    bytes: u64,
    latencies_us: Vec<u32>,
    error: Option<String>,
}

/// The name of a Linux I/O priority class.
fn ioprio_class_name(class: u8) -> &'static str {
    match class {
        0 => "none",
        1 => "realtime",
        2 => "best-effort",
        3 => "idle",
        _ => "unknown",
    }
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    f64::from(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn load(a: &LoadArgs) -> Result<Outcome> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Barrier};
    use std::time::{Duration, Instant};
    use target::{Device, Hello, RemoteDevice, Tenant};

    if a.span < a.size {
        return Err(refused(format!(
            "--span ({}) must be at least --size ({})",
            a.span, a.size
        )));
    }
    let tenant = Tenant::default().resolve();
    let hello = Hello {
        job: a.job.clone(),
        len: a.span,
        create: true,
        tenant,
    };
    // The class a target with quality of service gives this tenant (urgent only by grant).
    let class = haq::class::Class::from_ioprio(tenant.class, tenant.level)
        .map(|c| c.name())
        .unwrap_or("unknown");
    let what = format!("kavach target load {} --job {}", a.addr, a.job);
    // Every connection first, so that the load starts at once on all of them.
    let mut devs = Vec::new();
    for _ in 0..a.depth {
        let dev =
            RemoteDevice::connect(&a.addr, &hello).map_err(|e| refused(format!("{what}: {e}")))?;
        devs.push(dev);
    }
    let capacity = devs[0].capacity();
    if capacity < a.size {
        return Err(refused(format!(
            "{what}: namespace {} has {capacity} bytes, less than one request of {}",
            a.job, a.size
        )));
    }
    let slots = capacity / a.size;
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(devs.len() + 1));
    let size = a.size as usize;
    let read = a.read;
    let mut threads = Vec::new();
    for (i, dev) in devs.into_iter().enumerate() {
        let stop = stop.clone();
        let start = start.clone();
        let t = std::thread::Builder::new()
            .name(format!("load-{i}"))
            .spawn(move || {
                let mut w = Worker::default();
                let mut rng = pmem::rng::SplitMix64::new(0x10ad ^ ((i as u64) << 32));
                let mut buf = vec![(i as u8) ^ 0x5a; size];
                start.wait();
                while !stop.load(Ordering::Relaxed) {
                    let at = rng.below(slots) * size as u64;
                    let t0 = Instant::now();
                    let r = if read {
                        dev.read_at(at, &mut buf)
                    } else {
                        dev.write_at(at, &buf)
                    };
                    if let Err(e) = r {
                        w.error = Some(e.to_string());
                        stop.store(true, Ordering::Relaxed);
                        break;
                    }
                    let us = t0.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                    w.latencies_us.push(us);
                    w.ops += 1;
                    w.bytes += size as u64;
                }
                w
            })
            .map_err(|e| refused(format!("{what}: cannot start a thread: {e}")))?;
        threads.push(t);
    }
    if let Some(at) = a.start_at {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        if at > now {
            std::thread::sleep(Duration::from_secs_f64(at - now));
        }
    }
    start.wait();
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs_f64(a.seconds);
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
    }
    stop.store(true, Ordering::Relaxed);
    let mut total = Worker::default();
    for t in threads {
        let w = t
            .join()
            .map_err(|_| refused(format!("{what}: a load thread panicked")))?;
        total.ops += w.ops;
        total.bytes += w.bytes;
        total.latencies_us.extend(w.latencies_us);
        if total.error.is_none() {
            total.error = w.error;
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    if let Some(e) = total.error {
        return Err(refused(format!("{what}: a request failed: {e}")));
    }
    total.latencies_us.sort_unstable();
    let p50 = percentile(&total.latencies_us, 50.0);
    let p99 = percentile(&total.latencies_us, 99.0);
    let max = total.latencies_us.last().copied().unwrap_or(0);
    let bw = total.bytes as f64 / elapsed;
    let iops = total.ops as f64 / elapsed;
    if a.json {
        crate::outcome::print_json(&serde_json::json!({
            "addr": a.addr,
            "job": a.job,
            "ioprio_class": tenant.class,
            "ioprio_level": tenant.level,
            "class": class,
            "depth": a.depth,
            "size": a.size,
            "read": a.read,
            "seconds": elapsed,
            "ops": total.ops,
            "bytes": total.bytes,
            "bandwidth_bps": bw,
            "iops": iops,
            "latency_p50_us": p50,
            "latency_p99_us": p99,
            "latency_max_us": max,
        }))?;
    } else {
        println!(
            "kavach: {} {} of {} on {} connections to {}/{} in {elapsed:.1} s, as I/O \
             priority {}/{} (class {class})",
            total.ops,
            if a.read { "reads" } else { "writes" },
            crate::units::format_size(a.size),
            a.depth,
            a.addr,
            a.job,
            ioprio_class_name(tenant.class),
            tenant.level
        );
        println!(
            "  bandwidth {:.2} MB/s, {iops:.0} IOPS; latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            bw / 1e6,
            p50 / 1000.0,
            p99 / 1000.0,
            f64::from(max) / 1000.0
        );
    }
    Ok(Outcome::Ok)
}
