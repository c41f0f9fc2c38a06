//! `kavach haq`: the arbitration model, its scenarios on the simulator, and calibration
//! (`haq`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};
use haq::arbiter::{ArbiterConfig, Policy, Weights};
use haq::calibrate::{CalibrateOptions, calibrate};
use haq::class::Class;
use haq::model::{self, ClassLoad, TenantDemand};
use haq::scenario::{self, RhoStudy, Scenario, ScenarioRun};
use plot::{Chart, Series};

use crate::outcome::{Outcome, check_output_path, print_json, refused};
use crate::units::{format_size, parse_size};

#[derive(Debug, Subcommand)]
pub enum HaqCommand {
    /// Print the model's prediction per class: guaranteed share (Eq. 6.1), average
    /// throughput (Eq. 6.2) and worst-case latency (Eq. 6.3).
    ///
    /// Weights are in the policy's cost unit: commands for WRR (counts 1..256), bytes for DRR
    /// (multiples of 512 up to 128k, e.g. 128k,64k,32k). GAMMA is the device's saturated
    /// throughput in the same unit per second: bytes/s for DRR, commands/s for WRR (k, M, G
    /// are powers of 1000). RHO is the utilisation of each class (high, medium, low): the
    /// fraction of its weight it has queued in a round. Eq. 6.2 gives a class's throughput
    /// when it is backlogged and the others have their RHO; "at its rho" is what the class
    /// gets at its own RHO (rho_i w_i / sum rho_j w_j); Eq. 6.3 needs --a-over-p (from
    /// `kavach haq calibrate`) and holds when requests are of one size.
    #[command(after_help = "Examples:\n  \
        kavach haq model --policy drr --weights 128k,64k,32k --rho 1,1,0.5 --gamma 240k\n  \
        kavach haq model --policy wrr --weights 32,16,8 --gamma 160k --queue-depth 32 --a-over-p 81us --json\n\n\
        Exit status: 0 printed; 2 could not run (a bad argument).")]
    Model(ModelArgs),
    /// Admission control: would a new tenant's bandwidth SLA, and everyone else's, be met?
    ///
    /// Each tenant is NAME:CLASS:REQUIRED[:SIZE[:OFFERED]]: its class (urgent, high, medium,
    /// low), the bandwidth its SLA promises, its request size (default 4k) and the bandwidth
    /// it submits (default: as much as it can, the worst case for the others). Bandwidths in
    /// bytes/s (k, M, G powers of 1000). The prediction is the work-conserving model: classes
    /// share the device by weight (DRR: bytes; WRR: commands, so bytes scale with request
    /// size), tenants within a class share it equally (DRR: bytes; WRR: commands), what one
    /// does not use goes to the others, urgent tenants come first. The verdict is printed;
    /// the exit status is 0 either way.
    #[command(after_help = "Examples:\n  \
        kavach haq admit --gamma 700M --tenant web:high:300M --new batch:low:100M\n  \
        kavach haq admit --gamma 700M --tenant web:high:300M --new b:medium:100M:8k:120M --verify 2\n  \
        kavach haq admit --policy wrr --weights 32,16,8 --gamma 700M \\\n      \
        --tenant a:high:200M:4k --new b:medium:200M:64k --json\n\n\
        Exit status: 0 answered (admitted or not: see the output); 2 could not run (a bad \
        argument).")]
    Admit(AdmitArgs),
    /// Run a scenario on the simulator (or live on the controller) and print each job's
    /// bandwidth, the ratio, the expected ratio and the model's predictions.
    ///
    /// S1-S5 are the dissertation's (§6.4.4): S1 high 4k vs medium 8k (expected 2:1), S2 two
    /// high 4k (1:1), S3 high 4k vs low 8k (4:1), S4 high 8k vs low 4k (4:1), S5 two high,
    /// 4k+8k vs 8k+16k (1:1). Weights: WRR (32,16,8), DRR (128k,64k,32k). `rogue` adds a low
    /// job flooding at 10x the device to a high and a medium job (expected 4:2:1).
    /// `rho-study` is the model validation (Fig. 6.2): the high class's throughput and
    /// latency, simulated and by Eq. 6.2/6.3, as the low class's utilisation goes from 0
    /// to 1 (in steps of 0.1). With --engine live it runs on the controller in real time: a
    /// calibration (all three classes backlogged, up to 3 s) measures gamma and a/p, then
    /// rho_l = 0, 0.25, 0.5, 0.75, 1 for --seconds each, the low job paced open loop. The device (--device): 4 units, 20 us + 1 byte/ns a command. --png writes bandwidth over
    /// time (for rho-study: throughput against rho_l).
    #[command(after_help = "Examples:\n  \
        kavach haq run S1 --policy all --png s1.png\n  \
        kavach haq run S5 --policy wrr --seconds 2 --json\n  \
        kavach haq run rogue\n  \
        kavach haq run S3 --engine live --seconds 5 --policy all --png s3-live.png\n  \
        kavach haq run rho-study --png rho.png --latency-png rho-latency.png\n  \
        kavach haq run rho-study --engine live --seconds 5 --png rho-live.png\n\n\
        Exit status: 0 ran; 2 could not run (a bad argument, a PNG that cannot be written).")]
    Run(RunArgs),
    /// Choose 8-bit class weights that give each class the bandwidth it needs.
    ///
    /// Each --need is CLASS=BANDWIDTH[:SIZE] (class high, medium or low; bandwidth in bytes/s,
    /// k, M, G powers of 1000; the class's request size, default 4k, which WRR needs since it
    /// weighs commands). The weights are the finest (largest counts up to 256) under which
    /// every class's guaranteed share (Eq. 6.1, every class backlogged) of a device of GAMMA
    /// bytes/s is at least what it needs; capacity left over goes to the classes in
    /// proportion to their needs. A class not named gets weight 1.
    #[command(after_help = "Examples:\n  \
        kavach haq weights --gamma 680M --need high=300M --need medium=150M --need low=50M\n  \
        kavach haq weights --policy wrr --gamma 680M --need high=300M:4k --need low=100M:64k --json\n\n\
        Exit status: 0 printed; 2 could not run (a bad argument, needs beyond the device or \
        beyond what 8-bit weights can express).")]
    Weights(WeightsArgs),
    /// Measure a device's saturated throughput (gamma) and the model's a/p by reading it flat
    /// out from several threads.
    ///
    /// DEVICE is a file or block device, pmem:PATH or tcp://HOST:PORT/JOB. Each thread reads
    /// SIZE bytes at random aligned offsets back to back for SECONDS; only reads, so nothing
    /// is changed. a/p is reported twice: mean latency / threads, and 1/gamma (Little's law).
    /// A file in the page cache measures memory, not the disk.
    #[command(after_help = "Examples:\n  \
        kavach haq calibrate /dev/nvme0n1 --size 4k --threads 8 --seconds 10\n  \
        kavach haq calibrate /dev/shm/dev.img --json\n\n\
        Exit status: 0 measured; 2 could not run (no such device, empty, a read failed, a bad \
        argument).")]
    Calibrate(CalibrateArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PolicyArg {
    /// Deficit round robin (cost = bytes).
    Drr,
    /// NVMe weighted round robin (cost = 1 per command).
    Wrr,
    /// Plain round robin.
    Rr,
}

impl PolicyArg {
    fn policy(self) -> Policy {
        match self {
            PolicyArg::Drr => Policy::Drr,
            PolicyArg::Wrr => Policy::Wrr,
            PolicyArg::Rr => Policy::RoundRobin,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RunPolicyArg {
    Drr,
    Wrr,
    Rr,
    /// DRR, WRR and RR one after the other.
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    /// The discrete-event simulator (deterministic, fast).
    Sim,
    /// The real-time controller (runtime::Controller) with an emulated device.
    Live,
}

#[derive(Debug, Args)]
pub struct ModelArgs {
    /// The arbitration (WRR or DRR: round robin has no weights).
    #[arg(long, value_enum, default_value_t = PolicyArg::Drr)]
    policy: PolicyArg,
    /// Weights high,medium,low (default: the dissertation's, 32,16,8 or 128k,64k,32k).
    #[arg(long)]
    weights: Option<String>,
    /// Utilisation of high,medium,low, each 0..1.
    #[arg(long, default_value = "1,1,1")]
    rho: String,
    /// Device throughput: bytes/s for DRR, commands/s for WRR.
    #[arg(long)]
    gamma: String,
    /// Outstanding commands q of the class, for Eq. 6.3.
    #[arg(long, default_value_t = 32)]
    queue_depth: u32,
    /// a/p for Eq. 6.3 (e.g. 81us, 0.5ms); without it t_max is not printed.
    #[arg(long)]
    a_over_p: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct AdmitArgs {
    /// The arbitration.
    #[arg(long, value_enum, default_value_t = PolicyArg::Drr)]
    policy: PolicyArg,
    /// Weights high,medium,low (default: the dissertation's).
    #[arg(long)]
    weights: Option<String>,
    /// Device bandwidth, bytes/s.
    #[arg(long)]
    gamma: String,
    /// A tenant already on the device, NAME:CLASS:REQUIRED[:SIZE[:OFFERED]] (repeatable).
    #[arg(long)]
    tenant: Vec<String>,
    /// The tenant asking to be admitted, NAME:CLASS:REQUIRED[:SIZE[:OFFERED]].
    #[arg(long)]
    new: String,
    /// Also run every tenant, the new one included, for this many simulated seconds on a
    /// device of 4 units whose bandwidth is GAMMA whatever the request size (no fixed cost
    /// per command), and print what each got: backlogged tenants keep 32 commands
    /// outstanding, the others submit Poisson arrivals at their offered rate.
    #[arg(long)]
    verify: Option<f64>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// S1, S2, S3, S4, S5, rogue or rho-study.
    scenario: String,
    /// The arbitration (all: DRR, WRR and RR).
    #[arg(long, value_enum, default_value_t = RunPolicyArg::Drr)]
    policy: RunPolicyArg,
    /// Weights high,medium,low for --policy drr or wrr (default: the dissertation's); the
    /// expected shares follow them.
    #[arg(long)]
    weights: Option<String>,
    /// sim: the discrete-event simulator; live: the real-time controller with an emulated
    /// device (4 units, 500 us + 50 bytes/us a command) and in-process tenants, for
    /// --seconds of wall-clock time per policy.
    #[arg(long, value_enum, default_value_t = EngineArg::Sim)]
    engine: EngineArg,
    /// The emulated device, units=N,base-us=F,mbps=F (default: sim units=4,base-us=20,
    /// mbps=1000; live units=4,base-us=500,mbps=50).
    #[arg(long)]
    device: Option<String>,
    /// Simulator only: each service time times a factor drawn from 1-J..1+J (0 <= J < 1).
    #[arg(long, default_value_t = 0.0)]
    jitter: f64,
    /// Seconds per run (0 < N <= 3600): simulated, or wall-clock with --engine live.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Seed of the simulation's random sizes and arrivals.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write bandwidth over time (rho-study: throughput against rho_l) as a PNG.
    #[arg(long)]
    png: Option<PathBuf>,
    /// rho-study only: write latency against rho_l as a PNG.
    #[arg(long)]
    latency_png: Option<PathBuf>,
    /// Print JSON: an array with one object per policy run (ratios, predictions and the
    /// full report with per-bucket bandwidth); for rho-study one object per policy.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct WeightsArgs {
    /// The arbitration (wrr or drr).
    #[arg(long, value_enum, default_value_t = PolicyArg::Drr)]
    policy: PolicyArg,
    /// Device bandwidth, bytes/s.
    #[arg(long)]
    gamma: String,
    /// What a class needs, CLASS=BANDWIDTH[:SIZE] (repeatable, at least one).
    #[arg(long, required = true)]
    need: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// The device: a file or block device, pmem:PATH or tcp://HOST:PORT/JOB.
    device: String,
    /// Bytes per read.
    #[arg(long, default_value = "4k")]
    size: String,
    /// Threads reading, each with one read outstanding.
    #[arg(long, default_value_t = 2)]
    threads: u32,
    /// Seconds to run (0 < S <= 3600).
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(c: HaqCommand) -> Result<Outcome> {
    match c {
        HaqCommand::Model(a) => model_cmd(&a),
        HaqCommand::Admit(a) => admit_cmd(&a),
        HaqCommand::Run(a) => run_cmd(&a),
        HaqCommand::Weights(a) => weights_cmd(&a),
        HaqCommand::Calibrate(a) => calibrate_cmd(&a),
    }
}

/// `240k`, `1.5M`, `700MB/s`, `160000`: a rate, k/M/G/T powers of 1000.
fn parse_rate(what: &str, text: &str) -> Result<f64> {
    let t = text.trim();
    let t = t
        .strip_suffix("B/s")
        .or_else(|| t.strip_suffix("/s"))
        .or_else(|| t.strip_suffix("iops"))
        .unwrap_or(t);
    let (num, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1e3),
        Some('M') => (&t[..t.len() - 1], 1e6),
        Some('G') => (&t[..t.len() - 1], 1e9),
        Some('T') => (&t[..t.len() - 1], 1e12),
        _ => (t, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 && v * mult <= 1e15 => Ok(v * mult),
        _ => Err(refused(format!(
            "{what}: expected a rate such as 240k, 1.5M or 700MB/s (k, M, G, T powers of 1000), \
             found `{text}`"
        ))),
    }
}

/// `81us`, `81µs`, `0.5ms`, `1s`, `81` (microseconds).
fn parse_us(what: &str, text: &str) -> Result<f64> {
    let t = text.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("us").or_else(|| t.strip_suffix("µs")) {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix("ns") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e6)
    } else {
        (t, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v * mult <= 3.6e9 => Ok(v * mult),
        _ => Err(refused(format!(
            "{what}: expected a time such as 81us, 0.5ms or 1s, found `{text}`"
        ))),
    }
}

fn parse_triple(what: &str, text: &str) -> Result<[String; 3]> {
    let parts: Vec<String> = text.split(',').map(|s| s.trim().to_owned()).collect();
    match <[String; 3]>::try_from(parts) {
        Ok(p) => Ok(p),
        Err(_) => Err(refused(format!(
            "{what}: expected three values high,medium,low, found `{text}`"
        ))),
    }
}

/// The arbiter configuration for `policy` with `weights` as typed (None: the dissertation's).
fn arbiter(policy: PolicyArg, weights: Option<&str>) -> Result<ArbiterConfig> {
    let mut cfg = scenario::dissertation_config(policy.policy());
    let Some(text) = weights else { return Ok(cfg) };
    let parts = parse_triple("--weights", text)?;
    let mut counts = [0u32; 3];
    for (k, p) in parts.iter().enumerate() {
        counts[k] = match policy {
            PolicyArg::Rr => {
                return Err(refused("--weights: round robin (rr) has no weights"));
            }
            PolicyArg::Wrr => match p.parse::<u32>() {
                Ok(n) if (1..=256).contains(&n) => n,
                _ => {
                    return Err(refused(format!(
                        "--weights: WRR weights are commands per round, 1..256; found `{p}`"
                    )));
                }
            },
            PolicyArg::Drr => {
                let unit = u64::from(cfg.drr_unit);
                match parse_size(p) {
                    Ok(b) if b >= unit && b <= 256 * unit && b % unit == 0 => (b / unit) as u32,
                    _ => {
                        return Err(refused(format!(
                            "--weights: DRR weights are bytes per round, multiples of {unit} \
                             from {unit} to {} (e.g. 128k,64k,32k); found `{p}`",
                            256 * unit
                        )));
                    }
                }
            }
        };
    }
    cfg.weights = Weights::from_counts(counts[0], counts[1], counts[2])
        .map_err(|e| refused(format!("--weights: {e}")))?;
    Ok(cfg)
}

const CLASSES: [Class; 3] = [Class::High, Class::Medium, Class::Low];

#[derive(Debug, serde::Serialize)]
struct ClassPrediction {
    class: Class,
    weight: u64,
    rho: f64,
    guaranteed_share: f64,
    guaranteed: f64,
    throughput: f64,
    at_its_rho: f64,
    t_max_us: Option<f64>,
}

#[derive(Debug, serde::Serialize)]
struct ModelOut {
    policy: Policy,
    weight_unit: &'static str,
    gamma: f64,
    rate_unit: &'static str,
    queue_depth: u32,
    a_over_p_us: Option<f64>,
    classes: Vec<ClassPrediction>,
}

fn model_cmd(a: &ModelArgs) -> Result<Outcome> {
    if a.policy == PolicyArg::Rr {
        return Err(refused(
            "--policy rr: round robin has no weights to model; use wrr or drr",
        ));
    }
    let cfg = arbiter(a.policy, a.weights.as_deref())?;
    let gamma = parse_rate("--gamma", &a.gamma)?;
    if gamma <= 0.0 {
        return Err(refused("--gamma: expected a rate above 0, found 0"));
    }
    let rho_text = parse_triple("--rho", &a.rho)?;
    let mut rho = [0.0; 3];
    for (k, r) in rho_text.iter().enumerate() {
        rho[k] = match r.parse::<f64>() {
            Ok(v) if (0.0..=1.0).contains(&v) => v,
            _ => {
                return Err(refused(format!(
                    "--rho: expected three numbers 0..1 (high,medium,low), found `{r}`"
                )));
            }
        };
    }
    if a.queue_depth == 0 || a.queue_depth > 65536 {
        return Err(refused(format!(
            "--queue-depth: expected 1..65536, found {}",
            a.queue_depth
        )));
    }
    let a_over_p = a
        .a_over_p
        .as_deref()
        .map(|t| parse_us("--a-over-p", t))
        .transpose()?;
    let loads: Vec<ClassLoad> = CLASSES
        .iter()
        .enumerate()
        .map(|(k, &c)| ClassLoad {
            class: c,
            weight: cfg.weight_cost(c) as f64,
            rho: rho[k],
            lambda: None,
        })
        .collect();
    let classes: Vec<ClassPrediction> = loads
        .iter()
        .map(|l| {
            let share = model::guaranteed_share(&loads, l.class);
            ClassPrediction {
                class: l.class,
                weight: cfg.weight_cost(l.class),
                rho: l.rho,
                guaranteed_share: share,
                guaranteed: share * gamma,
                throughput: model::throughput(&loads, l.class, gamma),
                at_its_rho: model::class_rate(&loads, l.class, gamma),
                t_max_us: a_over_p
                    .map(|ap| model::t_max(&loads, l.class, f64::from(a.queue_depth), ap)),
            }
        })
        .collect();
    let (weight_unit, rate_unit) = match cfg.policy {
        Policy::Wrr => ("commands", "commands/s"),
        _ => ("bytes", "bytes/s"),
    };
    let out = ModelOut {
        policy: cfg.policy,
        weight_unit,
        gamma,
        rate_unit,
        queue_depth: a.queue_depth,
        a_over_p_us: a_over_p,
        classes,
    };
    if a.json {
        print_json(&out)?;
        return Ok(Outcome::Ok);
    }
    println!(
        "{}, weights in {weight_unit}, gamma {} {rate_unit}, q {}{}",
        cfg.policy,
        fmt_num(gamma),
        a.queue_depth,
        a_over_p.map_or(String::new(), |v| format!(", a/p {v} us"))
    );
    println!(
        "{:<7} {:>8} {:>5} {:>21} {:>20} {:>14} {:>14}",
        "class",
        "weight",
        "rho",
        "guaranteed (Eq 6.1)",
        "throughput (Eq 6.2)",
        "at its rho",
        "t_max (Eq 6.3)"
    );
    for c in &out.classes {
        println!(
            "{:<7} {:>8} {:>5.2} {:>6.1}% = {:>11} {:>20} {:>14} {:>14}",
            c.class.name(),
            c.weight,
            c.rho,
            c.guaranteed_share * 100.0,
            fmt_num(c.guaranteed),
            fmt_num(c.throughput),
            fmt_num(c.at_its_rho),
            c.t_max_us.map_or("-".into(), |t| format!("{t:.1} us"))
        );
    }
    println!(
        "Eq. 6.2 takes the class itself as backlogged; \"at its rho\" is its share at its own \
         rho. Rates in {rate_unit}."
    );
    Ok(Outcome::Ok)
}

fn fmt_num(v: f64) -> String {
    if v.abs() >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if v.abs() >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v.abs() >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.1}")
    }
}

fn parse_tenant(text: &str) -> Result<TenantDemand> {
    let parts: Vec<&str> = text.split(':').collect();
    let usage = |why: String| {
        refused(format!(
            "tenant `{text}`: {why} (expected NAME:CLASS:REQUIRED[:SIZE[:OFFERED]], e.g. \
             web:high:300M:4k)"
        ))
    };
    if !(3..=5).contains(&parts.len()) {
        return Err(usage(format!("{} fields", parts.len())));
    }
    if parts[0].is_empty() {
        return Err(usage("an empty name".into()));
    }
    let class = match parts[1].to_ascii_lowercase().as_str() {
        "urgent" => Class::Urgent,
        "high" => Class::High,
        "medium" => Class::Medium,
        "low" => Class::Low,
        other => {
            return Err(usage(format!(
                "class `{other}` is not urgent, high, medium or low"
            )));
        }
    };
    let required = parse_rate("REQUIRED", parts[2]).map_err(|e| usage(format!("{e:#}")))?;
    let size = match parts.get(3) {
        Some(s) => match parse_size(s) {
            Ok(b) if (1..=1 << 30).contains(&b) => b as f64,
            _ => return Err(usage(format!("SIZE `{s}` is not 1 byte..1 GiB"))),
        },
        None => 4096.0,
    };
    let offered = match parts.get(4) {
        Some(o) => Some(parse_rate("OFFERED", o).map_err(|e| usage(format!("{e:#}")))?),
        None => None,
    };
    Ok(TenantDemand {
        name: parts[0].into(),
        class,
        required_bps: required,
        offered_bps: offered,
        request_bytes: size,
    })
}

#[derive(Debug, serde::Serialize)]
struct AdmitRow {
    name: String,
    class: Class,
    predicted_bps: f64,
    required_bps: f64,
    met: bool,
    simulated_bps: Option<f64>,
}

#[derive(Debug, serde::Serialize)]
struct AdmitOut {
    admitted: bool,
    policy: Policy,
    gamma_bps: f64,
    tenants: Vec<AdmitRow>,
}

fn admit_cmd(a: &AdmitArgs) -> Result<Outcome> {
    let cfg = arbiter(a.policy, a.weights.as_deref())?;
    let gamma = parse_rate("--gamma", &a.gamma)?;
    if gamma <= 0.0 {
        return Err(refused("--gamma: expected a bandwidth above 0, found 0"));
    }
    let existing: Vec<TenantDemand> = a
        .tenant
        .iter()
        .map(|t| parse_tenant(t))
        .collect::<Result<_>>()?;
    let new = parse_tenant(&a.new)?;
    let mut names: Vec<&str> = existing.iter().map(|t| t.name.as_str()).collect();
    names.push(&new.name);
    for (i, n) in names.iter().enumerate() {
        if names[..i].contains(n) {
            return Err(refused(format!("tenant `{n}` is named twice")));
        }
    }
    if let Some(v) = a.verify {
        if !(v.is_finite() && v > 0.0 && v <= 3600.0) {
            return Err(refused(format!(
                "--verify: expected 0 < seconds <= 3600, found {v}"
            )));
        }
    }
    let adm = model::admit(&existing, &new, &cfg, gamma);
    let simulated: Option<Vec<f64>> = match a.verify {
        None => None,
        Some(seconds) => {
            let specs = existing
                .iter()
                .chain([&new])
                .map(|t| haq::sim::TenantSpec {
                    name: t.name.clone(),
                    class: t.class,
                    sizes: haq::sim::SizeMix::fixed(t.request_bytes as u32),
                    depth: scenario::DEPTH,
                    rate: t.offered_bps.map(|o| o / t.request_bytes),
                })
                .collect();
            let r = haq::sim::simulate(&haq::sim::SimConfig {
                arbiter: cfg,
                device: haq::runtime::ServiceModel {
                    units: 4,
                    base_us: 0.0,
                    bytes_per_us: gamma / 4.0 / 1e6,
                },
                tenants: specs,
                duration_s: seconds,
                bucket_s: (seconds / 100.0).clamp(0.01, 1.0),
                seed: 1,
                queue_depth: scenario::DEPTH,
                warmup_s: (seconds / 10.0).min(1.0),
                jitter: 0.0,
            })
            .map_err(|e| refused(format!("--verify: {e}")))?;
            Some(r.tenants.iter().map(|t| t.bandwidth_bps).collect())
        }
    };
    let classes: Vec<Class> = existing.iter().chain([&new]).map(|t| t.class).collect();
    let out = AdmitOut {
        admitted: adm.admitted,
        policy: cfg.policy,
        gamma_bps: gamma,
        tenants: adm
            .per_tenant
            .iter()
            .zip(classes)
            .enumerate()
            .map(|(i, ((n, p, r), class))| AdmitRow {
                name: n.clone(),
                class,
                predicted_bps: *p,
                required_bps: *r,
                met: *p >= *r * (1.0 - 1e-9),
                simulated_bps: simulated.as_ref().map(|s| s[i]),
            })
            .collect(),
    };
    if a.json {
        print_json(&out)?;
        return Ok(Outcome::Ok);
    }
    println!(
        "{:<16} {:<7} {:>14} {:>14}  {:<6} {:>14}",
        "tenant", "class", "predicted B/s", "required B/s", "SLA", "simulated B/s"
    );
    for t in &out.tenants {
        println!(
            "{:<16} {:<7} {:>14} {:>14}  {:<6} {:>14}",
            t.name,
            t.class.name(),
            fmt_num(t.predicted_bps),
            fmt_num(t.required_bps),
            if t.met { "met" } else { "BROKEN" },
            t.simulated_bps.map_or("-".into(), fmt_num)
        );
    }
    println!(
        "{}: {} {}",
        if out.admitted {
            "admitted"
        } else {
            "not admitted"
        },
        new.name,
        if out.admitted {
            "fits with every SLA met"
        } else {
            "would leave an SLA unmet"
        }
    );
    Ok(Outcome::Ok)
}

fn run_cmd(a: &RunArgs) -> Result<Outcome> {
    if !(a.seconds.is_finite() && a.seconds > 0.0 && a.seconds <= 3600.0) {
        return Err(refused(format!(
            "--seconds: expected 0 < seconds <= 3600, found {}",
            a.seconds
        )));
    }
    for p in a.png.iter().chain(a.latency_png.iter()) {
        check_output_path("--png", p, true)?;
    }
    let custom = match (a.weights.as_deref(), a.policy) {
        (None, _) => None,
        (Some(w), RunPolicyArg::Drr) => Some(arbiter(PolicyArg::Drr, Some(w))?),
        (Some(w), RunPolicyArg::Wrr) => Some(arbiter(PolicyArg::Wrr, Some(w))?),
        (Some(_), _) => {
            return Err(refused(
                "--weights: give --policy drr or wrr with them (rr has none, and all would \
                 need two kinds)",
            ));
        }
    };
    if !(a.jitter.is_finite() && (0.0..1.0).contains(&a.jitter)) {
        return Err(refused(format!(
            "--jitter: expected 0 <= J < 1, found {}",
            a.jitter
        )));
    }
    if a.jitter > 0.0 && a.engine == EngineArg::Live {
        return Err(refused(
            "--jitter: only the simulator (--engine sim) has it",
        ));
    }
    let dev = match &a.device {
        Some(d) => d
            .parse::<haq::runtime::ServiceModel>()
            .map_err(|e| refused(format!("--device: {e}")))?,
        None if a.engine == EngineArg::Live => scenario::live_device(),
        None => scenario::device(),
    };
    let config = |p: Policy| custom.unwrap_or_else(|| scenario::dissertation_config(p));
    let policies: Vec<Policy> = match a.policy {
        RunPolicyArg::Drr => vec![Policy::Drr],
        RunPolicyArg::Wrr => vec![Policy::Wrr],
        RunPolicyArg::Rr => vec![Policy::RoundRobin],
        RunPolicyArg::All => vec![Policy::Drr, Policy::Wrr, Policy::RoundRobin],
    };
    if a.scenario.eq_ignore_ascii_case("rho-study") {
        return rho_cmd(a, &policies, &config, &dev);
    }
    if a.latency_png.is_some() {
        return Err(refused("--latency-png: only rho-study has a latency plot"));
    }
    let mut sc = Scenario::get(&a.scenario)
        .map_err(|e| refused(format!("{e}")))?
        .on_device(dev);
    sc.jitter = a.jitter;
    if let Some(c) = &custom {
        sc.promised_by(c.weights);
    }
    let mut runs = Vec::new();
    for &p in &policies {
        runs.push(
            match a.engine {
                EngineArg::Sim => sc.run(&config(p), a.seconds, a.seed),
                EngineArg::Live => sc.run_live(&config(p), &dev, a.seconds, a.seed),
            }
            .map_err(|e| refused(format!("{e}")))?,
        );
    }
    if let Some(png) = &a.png {
        scenario_chart(&sc, &runs)
            .write_png(png)
            .map_err(|e| refused(format!("{e}")))?;
    }
    if a.json {
        print_json(&runs)?;
        return Ok(Outcome::Ok);
    }
    match a.engine {
        EngineArg::Sim => println!(
            "{} ({}), {} simulated seconds, device {dev}",
            sc.name, sc.description, a.seconds
        ),
        EngineArg::Live => println!(
            "{} ({}), {} s live on the controller, device {}",
            sc.name, sc.description, a.seconds, dev
        ),
    }
    for r in &runs {
        println!("{}:", r.policy);
        println!(
            "  {:<6} {:<7} {:>11} {:>7} {:>8} {:>10} {:>10} {:>9}",
            "job", "class", "MB/s", "share", "expected", "kIOPS", "wait p99", "dropped"
        );
        for (i, t) in r.report.tenants.iter().enumerate() {
            println!(
                "  {:<6} {:<7} {:>11.1} {:>6.1}% {:>7.1}% {:>10.1} {:>7.1} us {:>9}",
                t.name,
                t.class.name(),
                t.bandwidth_bps / 1e6,
                r.shares[i] * 100.0,
                r.expected_shares[i] * 100.0,
                t.iops / 1e3,
                t.wait_p99_us,
                t.dropped
            );
        }
        println!(
            "  A:B bytes {:.3} (expected {:.3}, model for {} {:.3}, WRR prediction {:.3}); \
             A:B commands {:.3}",
            r.ratio,
            r.expected_ratio,
            r.policy,
            r.predicted_ratio,
            r.wrr_prediction,
            r.command_ratio
        );
    }
    if let Some(png) = &a.png {
        println!("bandwidth over time: {}", png.display());
    }
    Ok(Outcome::Ok)
}

fn sizes_label(t: &haq::sim::TenantSpec) -> String {
    t.sizes
        .sizes
        .iter()
        .map(|&(b, _)| format_size(u64::from(b)).replace(".0 KiB", "k"))
        .collect::<Vec<_>>()
        .join("+")
}

fn scenario_chart(sc: &Scenario, runs: &[ScenarioRun]) -> Chart {
    let mut series = Vec::new();
    for r in runs {
        for (t, spec) in r.report.tenants.iter().zip(&sc.tenants) {
            let pts: Vec<(f64, f64)> = t
                .buckets
                .iter()
                .enumerate()
                .map(|(k, &b)| ((k as f64 + 0.5) * r.report.bucket_s, b / 1e6))
                .collect();
            let label = if runs.len() > 1 {
                format!(
                    "{} {} {} ({})",
                    t.name,
                    t.class.name(),
                    sizes_label(spec),
                    r.policy.name()
                )
            } else {
                format!("{} {} {}", t.name, t.class.name(), sizes_label(spec))
            };
            series.push(Series::new(label, pts));
        }
    }
    let mut chart = Chart {
        title: format!(
            "{}: bandwidth over time ({})",
            sc.name,
            runs.iter()
                .map(|r| r.policy.name())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        x_label: "time (s)".into(),
        y_label: "MB/s".into(),
        series,
        width: 960,
        height: 540,
        y_min: Some(0.0),
        ..Default::default()
    };
    if runs.len() == 1 {
        let total = runs[0].report.total_bps();
        for (t, s) in runs[0].report.tenants.iter().zip(&runs[0].expected_shares) {
            chart = chart.hline(total * s / 1e6, format!("{} expected", t.name));
        }
    }
    chart
}

/// The longest calibration before a live rho study, seconds (shorter when --seconds is).
const LIVE_CALIBRATION_S: f64 = 3.0;

fn rho_cmd(
    a: &RunArgs,
    policies: &[Policy],
    config: &dyn Fn(Policy) -> ArbiterConfig,
    dev: &haq::runtime::ServiceModel,
) -> Result<Outcome> {
    // Live runs take wall-clock time per point: five points, as in the dissertation's figure.
    let rhos: Vec<f64> = match a.engine {
        EngineArg::Sim => (0..=10).map(|k| k as f64 / 10.0).collect(),
        EngineArg::Live => vec![0.0, 0.25, 0.5, 0.75, 1.0],
    };
    let mut studies: Vec<RhoStudy> = Vec::new();
    for &p in policies {
        if p == Policy::RoundRobin {
            if policies.len() == 1 {
                return Err(refused(
                    "rho-study --policy rr: the model is of weighted arbitration; use drr or wrr",
                ));
            }
            continue;
        }
        studies.push(
            match a.engine {
                EngineArg::Sim => {
                    scenario::rho_study(&config(p), dev, a.jitter, &rhos, a.seconds, a.seed)
                }
                EngineArg::Live => scenario::rho_study_live(
                    &config(p),
                    dev,
                    &rhos,
                    a.seconds,
                    a.seconds.min(LIVE_CALIBRATION_S),
                    a.seed,
                ),
            }
            .map_err(|e| refused(format!("{e}")))?,
        );
    }
    let measured = match a.engine {
        EngineArg::Sim => "simulated",
        EngineArg::Live => "measured live",
    };
    let chart = |latency: bool| {
        let mut series = Vec::new();
        for s in &studies {
            let name = s.arbiter.policy.name();
            let pick = |p: &scenario::RhoPoint, model: bool| match (latency, model) {
                (false, false) => p.sim_high_bps / 1e6,
                (false, true) => p.model_high_bps / 1e6,
                (true, false) => p.sim_latency_mean_us,
                (true, true) => p.model_t_max_us,
            };
            series.push(Series::new(
                format!("{measured} ({name})"),
                s.points.iter().map(|p| (p.rho_l, pick(p, false))).collect(),
            ));
            series.push(Series::new(
                format!("{} ({name})", if latency { "Eq. 6.3" } else { "Eq. 6.2" }),
                s.points.iter().map(|p| (p.rho_l, pick(p, true))).collect(),
            ));
            if latency {
                series.push(Series::new(
                    format!("p99 wait, {measured} ({name})"),
                    s.points
                        .iter()
                        .map(|p| (p.rho_l, p.sim_wait_p99_us))
                        .collect(),
                ));
                series.push(Series::new(
                    format!("max wait, {measured} ({name})"),
                    s.points
                        .iter()
                        .map(|p| (p.rho_l, p.sim_wait_max_us))
                        .collect(),
                ));
            }
        }
        Chart {
            title: if latency {
                "High class latency against low class utilisation".into()
            } else {
                "High class throughput against low class utilisation".into()
            },
            x_label: "rho_l".into(),
            y_label: if latency { "us".into() } else { "MB/s".into() },
            series,
            width: 960,
            height: 540,
            y_min: Some(0.0),
            ..Default::default()
        }
    };
    if let Some(p) = &a.png {
        chart(false)
            .write_png(p)
            .map_err(|e| refused(format!("{e}")))?;
    }
    if let Some(p) = &a.latency_png {
        let mut c = chart(true);
        if let Some(s) = studies.first() {
            c = c.hline(
                s.points.first().map_or(0.0, |p| p.bound_us),
                "Eq. 6.3 at every rho = 1: the bound on a wait",
            );
        }
        c.write_png(p).map_err(|e| refused(format!("{e}")))?;
    }
    if a.json {
        print_json(&studies)?;
        return Ok(Outcome::Ok);
    }
    for s in &studies {
        println!(
            "{} weights (h,m,l) = {} {} {}; gamma {:.0} commands/s = {:.1} MB/s (4 KiB); \
             q {}; a/p = {:.3} us",
            s.arbiter.policy,
            s.arbiter.weight_cost(Class::High),
            s.arbiter.weight_cost(Class::Medium),
            s.arbiter.weight_cost(Class::Low),
            s.gamma_iops,
            s.gamma_bps / 1e6,
            s.queue_depth,
            s.a_over_p_us
        );
        match &s.calibration {
            None => println!("  simulated; gamma and a/p = 1/gamma from the device model"),
            Some(c) => println!(
                "  live on the controller, device {dev}, {:.1} s per point; calibrated over \
                 {:.1} s with {} commands outstanding (high, medium, low backlogged): \
                 a/p = mean latency {:.0} us / {} (1/gamma = {:.3} us)",
                a.seconds,
                c.seconds,
                c.threads,
                c.latency_mean_us,
                c.threads,
                c.littles_a_over_p_us
            ),
        }
        println!(
            "  {:>5} {:>5} {:>10} {:>11} {:>11} {:>6} {:>10} {:>10} {:>6} {:>10} {:>10} {:>10} {:>7} {:>8}",
            "rho_l",
            "run",
            "low cmd/s",
            "model MB/s",
            if s.engine == "live" {
                "live MB/s"
            } else {
                "sim MB/s"
            },
            "err",
            "t_max us",
            "lat us",
            "err",
            "p99 wait",
            "max wait",
            "bound",
            "dropped",
            "late"
        );
        for p in &s.points {
            println!(
                "  {:>5.2} {:>5.2} {:>10.0} {:>11.2} {:>11.2} {:>5.2}% {:>10.1} {:>10.1} {:>5.2}% {:>10.1} {:>10.1} {:>10.1} {:>7} {:>8.0}",
                p.rho_l,
                p.rho_l_run,
                p.low_rate,
                p.model_high_bps / 1e6,
                p.sim_high_bps / 1e6,
                p.throughput_error * 100.0,
                p.model_t_max_us,
                p.sim_latency_mean_us,
                p.latency_error * 100.0,
                p.sim_wait_p99_us,
                p.sim_wait_max_us,
                p.bound_us,
                p.low_dropped,
                p.sched_late_max_us
            );
        }
        let rerun: Vec<String> = s
            .points
            .iter()
            .filter(|p| p.attempts > 1)
            .map(|p| format!("rho_l {} ({} runs)", p.rho_l, p.attempts))
            .collect();
        if s.calibration_attempts > 1 || !rerun.is_empty() {
            println!(
                "  run again after the host stalled a thread over 10 ms (or starved the high job): \
                 calibration {} run(s); {}",
                s.calibration_attempts,
                if rerun.is_empty() {
                    "no point".to_string()
                } else {
                    rerun.join(", ")
                }
            );
        }
        println!(
            "  run: the low utilisation the run delivered (live, a late pacing thread can give \
             less than rho_l); model MB/s and t_max are Eq. 6.2 and 6.3 at it. lat us: the high \
             job's mean latency, submit to done, against t_max (q = {q}); p99 and max wait: its submit-to-start waits, against Eq. 6.3 \
             with every rho = 1 (bound); dropped: low arrivals refused at its full queue; \
             late: the most a 1 ms sleep overran (live only)",
            q = s.queue_depth
        );
    }
    for p in a.png.iter().chain(a.latency_png.iter()) {
        println!("plot: {}", p.display());
    }
    Ok(Outcome::Ok)
}

#[derive(Debug, serde::Serialize)]
struct WeightRow {
    class: Class,
    count: u32,
    weight: u64,
    needed_bps: f64,
    guaranteed_bps: f64,
}

#[derive(Debug, serde::Serialize)]
struct WeightsOut {
    policy: Policy,
    gamma_bps: f64,
    weights: String,
    classes: Vec<WeightRow>,
}

fn weights_cmd(a: &WeightsArgs) -> Result<Outcome> {
    if a.policy == PolicyArg::Rr {
        return Err(refused(
            "--policy rr: round robin has no weights; use wrr or drr",
        ));
    }
    let gamma = parse_rate("--gamma", &a.gamma)?;
    if gamma <= 0.0 {
        return Err(refused("--gamma: expected a bandwidth above 0, found 0"));
    }
    let mut reqs: Vec<model::ClassRequirement> = Vec::new();
    for n in &a.need {
        let usage = |why: String| {
            refused(format!(
                "--need `{n}`: {why} (expected CLASS=BANDWIDTH[:SIZE], e.g. high=300M:4k)"
            ))
        };
        let (class, rest) = n.split_once('=').ok_or_else(|| usage("no `=`".into()))?;
        let class = match class.to_ascii_lowercase().as_str() {
            "high" => Class::High,
            "medium" => Class::Medium,
            "low" => Class::Low,
            other => return Err(usage(format!("class `{other}` is not high, medium or low"))),
        };
        if reqs.iter().any(|r| r.class == class) {
            return Err(usage(format!("class {} is named twice", class.name())));
        }
        let (bw, size) = match rest.split_once(':') {
            Some((b, s)) => (b, Some(s)),
            None => (rest, None),
        };
        let bandwidth_bps = parse_rate("BANDWIDTH", bw).map_err(|e| usage(format!("{e:#}")))?;
        let request_bytes = match size {
            Some(s) => match parse_size(s) {
                Ok(b) if (1..=1 << 30).contains(&b) => b as f64,
                _ => return Err(usage(format!("SIZE `{s}` is not 1 byte..1 GiB"))),
            },
            None => 4096.0,
        };
        reqs.push(model::ClassRequirement {
            class,
            bandwidth_bps,
            request_bytes,
        });
    }
    let policy = a.policy.policy();
    let w = model::choose_weights(&reqs, policy, gamma).map_err(|e| refused(format!("{e}")))?;
    let mut cfg = scenario::dissertation_config(policy);
    cfg.weights = w;
    // The guarantee, every class backlogged: byte weights per round (WRR: count × size).
    let size_of = |c: Class| {
        reqs.iter().find(|r| r.class == c).map_or_else(
            || reqs.iter().map(|r| r.request_bytes).fold(1.0, f64::max),
            |r| r.request_bytes,
        )
    };
    let eff = |c: Class| match policy {
        Policy::Wrr => f64::from(w.count(c)) * size_of(c),
        _ => cfg.weight_cost(c) as f64,
    };
    let total: f64 = CLASSES.iter().map(|&c| eff(c)).sum();
    let classes: Vec<WeightRow> = CLASSES
        .iter()
        .map(|&c| WeightRow {
            class: c,
            count: w.count(c),
            weight: cfg.weight_cost(c),
            needed_bps: reqs
                .iter()
                .find(|r| r.class == c)
                .map_or(0.0, |r| r.bandwidth_bps),
            guaranteed_bps: eff(c) / total * gamma,
        })
        .collect();
    let weights = match policy {
        Policy::Wrr => format!(
            "{},{},{}",
            classes[0].count, classes[1].count, classes[2].count
        ),
        _ => format!(
            "{},{},{}",
            classes[0].weight, classes[1].weight, classes[2].weight
        ),
    };
    let out = WeightsOut {
        policy,
        gamma_bps: gamma,
        weights,
        classes,
    };
    if a.json {
        print_json(&out)?;
        return Ok(Outcome::Ok);
    }
    println!(
        "{:<7} {:>6} {:>10} {:>14} {:>16}",
        "class", "count", "weight", "needed B/s", "guaranteed B/s"
    );
    for c in &out.classes {
        println!(
            "{:<7} {:>6} {:>10} {:>14} {:>16}",
            c.class.name(),
            c.count,
            c.weight,
            fmt_num(c.needed_bps),
            fmt_num(c.guaranteed_bps)
        );
    }
    println!(
        "--policy {} --weights {} (guaranteed: every class backlogged, Eq. 6.1)",
        policy.name(),
        out.weights
    );
    Ok(Outcome::Ok)
}

#[derive(Debug, serde::Serialize)]
struct CalibrateOut {
    device: String,
    capacity: u64,
    #[serde(flatten)]
    calibration: haq::calibrate::Calibration,
}

fn calibrate_cmd(a: &CalibrateArgs) -> Result<Outcome> {
    let size = match parse_size(&a.size) {
        Ok(b) if (1..=64 << 20).contains(&b) => b as u32,
        _ => {
            return Err(refused(format!(
                "--size: expected 1 byte to 64 MiB (e.g. 4k), found `{}`",
                a.size
            )));
        }
    };
    if a.threads == 0 || a.threads > 1024 {
        return Err(refused(format!(
            "--threads: expected 1..1024, found {}",
            a.threads
        )));
    }
    if !(a.seconds.is_finite() && a.seconds > 0.0 && a.seconds <= 3600.0) {
        return Err(refused(format!(
            "--seconds: expected 0 < seconds <= 3600, found {}",
            a.seconds
        )));
    }
    if let target::Spec::File(p) | target::Spec::Pmem(p) =
        target::parse_spec(&a.device).map_err(|e| refused(format!("{e}")))?
    {
        if p.is_dir() {
            return Err(refused(format!(
                "{}: is a directory, expected a device",
                p.display()
            )));
        }
    }
    let dev = target::open_spec(&a.device, None).map_err(|e| refused(format!("{e}")))?;
    let capacity = dev.capacity();
    let opts = CalibrateOptions {
        threads: a.threads,
        bytes: size,
        duration: Duration::from_secs_f64(a.seconds),
        span: capacity,
        seed: 0x5eed,
    };
    let c = calibrate(&opts, |_| {
        let dev = dev.clone();
        let mut buf = vec![0u8; size as usize];
        move |off: u64, _: u32| dev.read_at(off, &mut buf)
    })
    .map_err(|e| refused(format!("{}: {e}", a.device)))?;
    if a.json {
        print_json(&CalibrateOut {
            device: a.device.clone(),
            capacity,
            calibration: c,
        })?;
        return Ok(Outcome::Ok);
    }
    println!(
        "{}: {} reads of {} from {} threads in {:.2} s",
        a.device,
        c.commands,
        format_size(u64::from(size)),
        c.threads,
        c.seconds
    );
    println!(
        "gamma  {:.0} commands/s, {:.1} MB/s",
        c.gamma_iops,
        c.gamma_bps / 1e6
    );
    println!(
        "latency mean {:.2} us, p99 {:.2} us",
        c.latency_mean_us, c.latency_p99_us
    );
    println!(
        "a/p    {:.3} us (mean latency / {} outstanding); {:.3} us (1/gamma, Little's law)",
        c.a_over_p_us, c.threads, c.littles_a_over_p_us
    );
    println!(
        "use: kavach haq model --gamma {:.0} --a-over-p {:.3}us ... (gamma in bytes/s for drr)",
        c.gamma_bps, c.a_over_p_us
    );
    Ok(Outcome::Ok)
}
