//! The dissertation's synthetic scenarios (§6.4.4, Fig. 6.3) and its model-validation study
//! (§6.3.2, Fig. 6.2), as data the simulator runs.
//!
//! | scenario | job A | job B | expected A:B (weights) | WRR prediction |
//! |---|---|---|---|---|
//! | S1 | high, 4k | medium, 8k | 2:1 | 32×4k : 16×8k = 1:1 |
//! | S2 | high, 4k | high, 4k | 1:1 | 1:1 |
//! | S3 | high, 4k | low, 8k | 4:1 | 32×4k : 8×8k = 2:1 |
//! | S4 | high, 8k | low, 4k | 4:1 | 32×8k : 8×4k = 8:1 |
//! | S5 | high, 4k+8k | high, 8k+16k | 1:1 | 6k : 12k = 1:2 |
//!
//! Weights: WRR (32, 16, 8) commands, DRR (128k, 64k, 32k) bytes, the same 4:2:1; RR has
//! none. Both jobs submit back to back (closed loop, [`DEPTH`] outstanding each). The expected
//! ratio is what the weights promise in bytes; each policy's prediction comes from
//! [`model::allocate`] (DRR: the weights in bytes; WRR: commands by weight, so bytes scale
//! with request size; RR: equal commands, so bytes in the ratio of the sizes, and the
//! "equal split" of the dissertation's vanilla SPDK is an equal split of commands).
//!
//! `rogue`: a high and a medium job submitting back to back and a low job flooding at ten
//! times what the device can do (open loop, its excess dropped at its full queue): each is
//! expected to get its weight's share, 4/7, 2/7 and 1/7.
//!
//! The ρ_l study ([`rho_study`]): high and medium jobs back to back (ρ_h = ρ_m = 1), the low
//! job open loop at the rate that gives it utilisation ρ_l, all 4 KiB. With the others
//! backlogged, a round serves `h + m + ρ_l l` bytes of which the low class has `ρ_l l`, so
//! its rate is `λ_l = ρ_l l / (h + m + ρ_l l) × γ` ([`model::rate_for_rho`]); at ρ_l = 1 that
//! is exactly its guaranteed share. The model's high-class throughput is Eq. 6.2 and its
//! latency Eq. 6.3 with q = the job's outstanding commands and a/p = 1/γ (commands/s), which
//! by Little's law is the mean latency of the job; the largest wait is checked against Eq. 6.3
//! with every ρ = 1 (the worst round).

use crate::arbiter::{ArbiterConfig, Policy};
use crate::class::{Class, HaqError};
use crate::model::{self, ClassLoad, TenantDemand};
use crate::sim::{self, ServiceModel, SimConfig, SimReport, SizeMix, TenantReport, TenantSpec};
use pmem::rng::SplitMix64;

/// Commands each back-to-back job keeps outstanding, and the depth of every queue.
pub const DEPTH: u32 = 32;

/// The emulated device of the scenarios: 4 units, 20 us + 1 byte/ns per command (4 KiB:
/// 24.1 us, about 166k commands/s or 680 MB/s in all).
pub fn device() -> ServiceModel {
    ServiceModel {
        units: 4,
        base_us: 20.0,
        bytes_per_us: 1000.0,
    }
}

/// The names [`Scenario::get`] knows.
pub const NAMES: [&str; 6] = ["S1", "S2", "S3", "S4", "S5", "rogue"];

/// A scenario: its jobs and what the weights promise them.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Scenario {
    /// `S1`..`S5` or `rogue`.
    pub name: String,
    /// One line on what it shows.
    pub description: String,
    /// The jobs.
    pub tenants: Vec<TenantSpec>,
    /// The share of the bytes each job is expected to get by the weights.
    pub expected_shares: Vec<f64>,
    /// The simulated device ([`device`] unless [`Scenario::on_device`] changed it).
    pub device: ServiceModel,
    /// The simulated service-time jitter ([`SimConfig::jitter`]), 0 unless set.
    pub jitter: f64,
}

fn job(name: &str, class: Class, sizes: &[u32]) -> TenantSpec {
    TenantSpec {
        name: name.into(),
        class,
        sizes: SizeMix::uniform(sizes),
        depth: DEPTH,
        rate: None,
    }
}

const K: u32 = 1024;

impl Scenario {
    /// The scenario called `name` (case-insensitive).
    pub fn get(name: &str) -> Result<Scenario, HaqError> {
        let two = |n: &str, d: &str, a: TenantSpec, b: TenantSpec, ratio: f64| Scenario {
            name: n.into(),
            description: d.into(),
            tenants: vec![a, b],
            expected_shares: vec![ratio / (ratio + 1.0), 1.0 / (ratio + 1.0)],
            device: device(),
            jitter: 0.0,
        };
        Ok(match name.to_ascii_lowercase().as_str() {
            "s1" => two(
                "S1",
                "job A high 4k, job B medium 8k",
                job("A", Class::High, &[4 * K]),
                job("B", Class::Medium, &[8 * K]),
                2.0,
            ),
            "s2" => two(
                "S2",
                "two high jobs, both 4k",
                job("A", Class::High, &[4 * K]),
                job("B", Class::High, &[4 * K]),
                1.0,
            ),
            "s3" => two(
                "S3",
                "job A high 4k, job B low 8k",
                job("A", Class::High, &[4 * K]),
                job("B", Class::Low, &[8 * K]),
                4.0,
            ),
            "s4" => two(
                "S4",
                "job A high 8k, job B low 4k (S3 with the sizes exchanged)",
                job("A", Class::High, &[8 * K]),
                job("B", Class::Low, &[4 * K]),
                4.0,
            ),
            "s5" => two(
                "S5",
                "two high jobs, A 4k+8k, B 8k+16k",
                job("A", Class::High, &[4 * K, 8 * K]),
                job("B", Class::High, &[8 * K, 16 * K]),
                1.0,
            ),
            "rogue" => {
                let (iops, _) = sim::saturated(&device(), f64::from(4 * K));
                Scenario {
                    name: "rogue".into(),
                    description: "high and medium jobs back to back, a low job flooding at 10x \
                                  the device"
                        .into(),
                    tenants: vec![
                        job("A", Class::High, &[4 * K]),
                        job("B", Class::Medium, &[4 * K]),
                        TenantSpec {
                            rate: Some(10.0 * iops),
                            ..job("rogue", Class::Low, &[4 * K])
                        },
                    ],
                    expected_shares: vec![4.0 / 7.0, 2.0 / 7.0, 1.0 / 7.0],
                    device: device(),
                    jitter: 0.0,
                }
            }
            _ => {
                return Err(HaqError::InvalidConfig {
                    what: "scenario",
                    expected: "S1, S2, S3, S4, S5, rogue or rho-study".into(),
                    found: name.into(),
                });
            }
        })
    }

    /// The same scenario on `dev` (simulated): a flooding job floods at ten times what `dev`
    /// can do with its request size.
    pub fn on_device(mut self, dev: ServiceModel) -> Scenario {
        self.device = dev;
        for t in &mut self.tenants {
            if t.rate.is_some() {
                t.rate = Some(10.0 * sim::saturated(&dev, t.sizes.mean()).0);
            }
        }
        self
    }

    /// Make the expected shares the ones `weights` promise (as byte weights, the way the
    /// dissertation reads them: counts in the 4:2:1 of WRR (32,16,8) and DRR (128k,64k,32k)).
    pub fn promised_by(&mut self, weights: crate::arbiter::Weights) {
        let mut cfg = ArbiterConfig::dissertation_drr();
        cfg.weights = weights;
        self.expected_shares = self.predicted_shares(&cfg);
    }

    /// The ratio of job A's bytes to job B's the weights promise.
    pub fn expected_ratio(&self) -> f64 {
        self.expected_shares[0] / self.expected_shares[1]
    }

    /// The byte shares the model predicts under `cfg` (every job as it submits: back to back
    /// jobs backlogged, open-loop jobs at their rate on a device of the scenario's speed).
    pub fn predicted_shares(&self, cfg: &ArbiterConfig) -> Vec<f64> {
        let mean: f64 =
            self.tenants.iter().map(|t| t.sizes.mean()).sum::<f64>() / self.tenants.len() as f64;
        let (_, gamma) = sim::saturated(&self.device, mean);
        let demands: Vec<TenantDemand> = self
            .tenants
            .iter()
            .map(|t| TenantDemand {
                name: t.name.clone(),
                class: t.class,
                required_bps: 0.0,
                offered_bps: t.rate.map(|r| r * t.sizes.mean()),
                request_bytes: t.sizes.mean(),
            })
            .collect();
        let got = model::allocate(&demands, cfg, gamma);
        let total: f64 = got.iter().sum();
        got.iter().map(|g| g / total).collect()
    }

    /// The simulation of this scenario under `cfg` for `seconds` (a tenth of it, at most one
    /// second, is warm-up).
    pub fn config(&self, cfg: &ArbiterConfig, seconds: f64, seed: u64) -> SimConfig {
        SimConfig {
            arbiter: *cfg,
            device: self.device,
            tenants: self.tenants.clone(),
            duration_s: seconds,
            bucket_s: (seconds / 100.0).clamp(0.01, 1.0),
            seed,
            queue_depth: DEPTH,
            warmup_s: (seconds / 10.0).min(1.0),
            jitter: self.jitter,
        }
    }

    /// Run it under `cfg`.
    pub fn run(
        &self,
        cfg: &ArbiterConfig,
        seconds: f64,
        seed: u64,
    ) -> Result<ScenarioRun, HaqError> {
        let report = sim::simulate(&self.config(cfg, seconds, seed))?;
        Ok(self.finish(cfg, report))
    }

    /// The ratios and predictions around a run's report.
    fn finish(&self, cfg: &ArbiterConfig, report: SimReport) -> ScenarioRun {
        let total = report.total_bps();
        let shares: Vec<f64> = report
            .tenants
            .iter()
            .map(|t| {
                if total > 0.0 {
                    t.bandwidth_bps / total
                } else {
                    0.0
                }
            })
            .collect();
        let cmds = |i: usize| report.tenants[i].commands as f64;
        let predicted = self.predicted_shares(cfg);
        ScenarioRun {
            scenario: self.name.clone(),
            policy: cfg.policy,
            ratio: shares[0] / shares[1],
            command_ratio: cmds(0) / cmds(1),
            expected_ratio: self.expected_ratio(),
            predicted_ratio: predicted[0] / predicted[1],
            wrr_prediction: {
                let p = self.predicted_shares(&ArbiterConfig::dissertation_wrr());
                p[0] / p[1]
            },
            shares,
            expected_shares: self.expected_shares.clone(),
            predicted_shares: predicted,
            report,
        }
    }
}

/// The outcome of one scenario under one policy.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ScenarioRun {
    /// The scenario's name.
    pub scenario: String,
    /// The policy.
    pub policy: Policy,
    /// Measured bytes of job A over job B.
    pub ratio: f64,
    /// Measured commands of job A over job B.
    pub command_ratio: f64,
    /// What the weights promise (A:B bytes).
    pub expected_ratio: f64,
    /// The model's prediction for this policy (A:B bytes).
    pub predicted_ratio: f64,
    /// The model's prediction for WRR (A:B bytes).
    pub wrr_prediction: f64,
    /// Measured share of the bytes, per job.
    pub shares: Vec<f64>,
    /// Promised share, per job.
    pub expected_shares: Vec<f64>,
    /// Predicted share for this policy, per job.
    pub predicted_shares: Vec<f64>,
    /// The simulation's report.
    pub report: SimReport,
}

/// The arbiter configuration a policy name stands for in the scenarios: WRR (32, 16, 8),
/// DRR (128k, 64k, 32k), RR.
pub fn dissertation_config(policy: Policy) -> ArbiterConfig {
    match policy {
        Policy::RoundRobin => ArbiterConfig::round_robin(),
        Policy::Wrr => ArbiterConfig::dissertation_wrr(),
        Policy::Drr => ArbiterConfig::dissertation_drr(),
    }
}

/// One point of the ρ_l study.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RhoPoint {
    /// The low class's utilisation asked for.
    pub rho_l: f64,
    /// The low class's utilisation the run delivered: `rho_l` times the share of the low
    /// job's intended bytes that started in the measured window (at most 1). The model columns
    /// are evaluated at it. On the simulator it is `rho_l`; live, a pacing thread woken late
    /// on a loaded machine can deliver less, and the high class then takes what the low one
    /// left (the arbiter is work-conserving), which the model at `rho_l` would count as error.
    pub rho_l_run: f64,
    /// The low job's Poisson rate that gives it, commands/s.
    pub low_rate: f64,
    /// Eq. 6.2: the high class's bytes/s.
    pub model_high_bps: f64,
    /// Simulated high-class bytes/s.
    pub sim_high_bps: f64,
    /// Simulated low-class bytes/s (expected: `low_rate` × 4 KiB).
    pub sim_low_bps: f64,
    /// Eq. 6.3 at this ρ_l (q = outstanding commands, a/p = 1/γ), microseconds.
    pub model_t_max_us: f64,
    /// Simulated mean latency of the high job, microseconds.
    pub sim_latency_mean_us: f64,
    /// Simulated largest queue wait of the high job, microseconds.
    pub sim_wait_max_us: f64,
    /// Simulated median queue wait of the high job, microseconds.
    pub sim_wait_p50_us: f64,
    /// Simulated 99th percentile queue wait of the high job, microseconds.
    pub sim_wait_p99_us: f64,
    /// Eq. 6.3 with every ρ = 1: the bound on any wait, microseconds.
    pub bound_us: f64,
    /// |sim - model| / model, throughput.
    pub throughput_error: f64,
    /// |sim - model| / model, latency.
    pub latency_error: f64,
    /// Live engine: low-class arrivals dropped because its queue was full (0 on the
    /// simulator, whose open-loop drops are in its report).
    pub low_dropped: u64,
    /// Live engine: the most a probe thread's 1 ms sleep overran during the point,
    /// microseconds: how late the machine woke threads up (0 on the simulator). A wait can
    /// exceed Eq. 6.3's bound by about this much without the arbitration being at fault.
    pub sched_late_max_us: f64,
    /// Live engine: the fraction of the probe's wake-ups (one a millisecond) at which the
    /// high job's queue was empty, i.e. its threads, starved of CPU, had not resubmitted and
    /// it was not backlogged as the model assumes (0 on the simulator).
    pub high_idle_fraction: f64,
    /// Live engine: runs of this point (one more for each the host disturbed, see
    /// [`rho_study_live`]); 1 on the simulator.
    pub attempts: u32,
}

/// The study's outcome: its device figures and points. The `sim_*` figures of its points
/// are the engine's measurements: simulated, or measured in real time on the controller
/// when `engine` is `live` ([`rho_study_live`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RhoStudy {
    /// `sim` or `live`.
    pub engine: String,
    /// Live engine: the calibration γ and a/p come from (None on the simulator, where they
    /// follow from the device model).
    pub calibration: Option<crate::calibrate::Calibration>,
    /// Live engine: calibrations run (one more for each the host disturbed, see
    /// [`rho_study_live`]); 0 on the simulator.
    pub calibration_attempts: u32,
    /// The arbitration.
    pub arbiter: ArbiterConfig,
    /// γ, commands/s (4 KiB).
    pub gamma_iops: f64,
    /// γ, bytes/s.
    pub gamma_bps: f64,
    /// a/p = 1/γ, microseconds.
    pub a_over_p_us: f64,
    /// q, the high job's outstanding commands.
    pub queue_depth: u32,
    /// The points.
    pub points: Vec<RhoPoint>,
    /// High-class bandwidth over time at each ρ_l: (ρ_l, bytes/s per bucket).
    pub buckets: Vec<(f64, Vec<f64>)>,
    /// Bucket width, seconds.
    pub bucket_s: f64,
}

/// The class loads of the study at `rho` (ρ_h = ρ_m = 1, ρ_l = `rho`). Weights in commands
/// of 4 KiB for WRR, in bytes for DRR: either way the ratios Eq. 6.2 needs, and a throughput
/// in bytes/s comes out in bytes/s.
fn rho_loads(cfg: &ArbiterConfig, rho: f64) -> Vec<ClassLoad> {
    let unit = if cfg.policy == Policy::Wrr {
        f64::from(4 * K)
    } else {
        1.0
    };
    vec![
        ClassLoad::backlogged(Class::High, cfg.weight_cost(Class::High) as f64 * unit),
        ClassLoad::backlogged(Class::Medium, cfg.weight_cost(Class::Medium) as f64 * unit),
        ClassLoad {
            class: Class::Low,
            weight: cfg.weight_cost(Class::Low) as f64 * unit,
            rho,
            lambda: None,
        },
    ]
}

fn check_rho_policy(cfg: &ArbiterConfig) -> Result<(), HaqError> {
    if cfg.policy == Policy::RoundRobin {
        return Err(HaqError::InvalidConfig {
            what: "policy of the rho study",
            expected: "wrr or drr (the model is of weighted arbitration)".into(),
            found: "rr".into(),
        });
    }
    Ok(())
}

fn check_rho(rho: f64) -> Result<(), HaqError> {
    if !(0.0..=1.0).contains(&rho) {
        return Err(HaqError::InvalidConfig {
            what: "rho_l",
            expected: "0..=1".into(),
            found: rho.to_string(),
        });
    }
    Ok(())
}

/// The Fig. 6.2 study under `cfg` (WRR or DRR; all requests 4 KiB so both apply) on `dev`
/// (e.g. [`device`]) with service-time `jitter` ([`SimConfig::jitter`]): for each ρ_l in
/// `rhos`, simulate `seconds` and compare with Eq. 6.2 and 6.3.
pub fn rho_study(
    cfg: &ArbiterConfig,
    dev: &ServiceModel,
    jitter: f64,
    rhos: &[f64],
    seconds: f64,
    seed: u64,
) -> Result<RhoStudy, HaqError> {
    check_rho_policy(cfg)?;
    let size = 4 * K;
    dev.validate()?;
    let dev = *dev;
    let (gamma_iops, gamma_bps) = sim::saturated(&dev, f64::from(size));
    let loads = |rho: f64| rho_loads(cfg, rho);
    let a_over_p = 1e6 / gamma_iops;
    let bound = model::t_max(&loads(1.0), Class::High, f64::from(DEPTH), a_over_p);
    let mut points = Vec::new();
    let mut buckets = Vec::new();
    let mut bucket_s = 0.0;
    for &rho in rhos {
        check_rho(rho)?;
        let l = loads(rho);
        let low_rate = model::rate_for_rho(&l, Class::Low, rho, gamma_bps) / f64::from(size);
        let sc = SimConfig {
            arbiter: *cfg,
            device: dev,
            tenants: vec![
                job("high", Class::High, &[size]),
                job("medium", Class::Medium, &[size]),
                TenantSpec {
                    rate: Some(low_rate),
                    ..job("low", Class::Low, &[size])
                },
            ],
            duration_s: seconds,
            bucket_s: (seconds / 100.0).clamp(0.01, 1.0),
            seed,
            queue_depth: DEPTH,
            warmup_s: (seconds / 10.0).min(1.0),
            jitter,
        };
        let r = sim::simulate(&sc)?;
        bucket_s = r.bucket_s;
        let high = &r.tenants[0];
        let model_high = model::throughput(&l, Class::High, gamma_bps);
        let model_t = model::t_max(&l, Class::High, f64::from(DEPTH), a_over_p);
        points.push(RhoPoint {
            rho_l: rho,
            rho_l_run: rho,
            low_rate,
            model_high_bps: model_high,
            sim_high_bps: high.bandwidth_bps,
            sim_low_bps: r.tenants[2].bandwidth_bps,
            model_t_max_us: model_t,
            sim_latency_mean_us: high.latency_mean_us,
            sim_wait_max_us: high.wait_max_us,
            sim_wait_p50_us: high.wait_p50_us,
            sim_wait_p99_us: high.wait_p99_us,
            sched_late_max_us: 0.0,
            high_idle_fraction: 0.0,
            attempts: 1,
            bound_us: bound,
            throughput_error: (high.bandwidth_bps - model_high).abs() / model_high,
            latency_error: (high.latency_mean_us - model_t).abs() / model_t,
            low_dropped: 0,
        });
        buckets.push((rho, high.buckets.clone()));
    }
    Ok(RhoStudy {
        engine: "sim".into(),
        calibration_attempts: 0,
        calibration: None,
        arbiter: *cfg,
        gamma_iops,
        gamma_bps,
        a_over_p_us: a_over_p,
        queue_depth: DEPTH,
        points,
        buckets,
        bucket_s,
    })
}

/// The device of live runs: 4 units, 500 us + 50 bytes/us a command (4 KiB: 582 us, about
/// 6.9k commands/s in all). Slower than the simulator's so that the controller's wake-up
/// delays (tens of microseconds) are small against a service time, and so that the tenants'
/// threads keep up on a small machine.
pub fn live_device() -> ServiceModel {
    ServiceModel {
        units: 4,
        base_us: 500.0,
        bytes_per_us: 50.0,
    }
}

#[derive(Debug, Default)]
struct LiveAcc {
    commands: u64,
    bytes: u64,
    busy_us: f64,
    latency_sum_us: f64,
    latencies_us: Vec<f64>,
    buckets: Vec<u64>,
}

impl Scenario {
    /// Run it in real time on the controller ([`crate::runtime::Controller`]) with the
    /// emulated device `dev` (e.g. [`live_device`]), for `seconds` of wall-clock time (a tenth of it, at most one
    /// second, is warm-up). Each back-to-back job is [`DEPTH`] threads, each with one command
    /// outstanding (`TenantQueue::run`, which returns at the command's emulated completion);
    /// a flooding job has twice as many threads, the extra ones blocked on its full queue
    /// (the controller's backpressure stands in for the simulator's dropped submissions, so
    /// its `dropped` is 0). The commands do no work: the controller's service model makes
    /// them take their time. Queue waits come from the controller's statistics
    /// (`wait_max_us` is not measured live and is 0).
    pub fn run_live(
        &self,
        cfg: &ArbiterConfig,
        dev: &ServiceModel,
        seconds: f64,
        seed: u64,
    ) -> Result<ScenarioRun, HaqError> {
        use crate::runtime::{Controller, ControllerOptions};
        use std::sync::{Arc, Mutex};
        use std::time::{Duration, Instant};
        if !(seconds.is_finite() && seconds > 0.0 && seconds <= 3600.0) {
            return Err(HaqError::InvalidConfig {
                what: "seconds",
                expected: "0 < seconds <= 3600".into(),
                found: seconds.to_string(),
            });
        }
        let dev = *dev;
        let ctl = Controller::start(ControllerOptions {
            arbiter: *cfg,
            workers: dev.units,
            service: Some(dev),
            queue_depth: DEPTH,
        })?;
        let bucket_s = (seconds / 100.0).clamp(0.01, 1.0);
        let nbuckets = (seconds / bucket_s).ceil() as usize;
        let warm = (seconds / 10.0).min(1.0);
        let accs: Vec<Arc<Mutex<LiveAcc>>> = self
            .tenants
            .iter()
            .map(|_| {
                Arc::new(Mutex::new(LiveAcc {
                    buckets: vec![0; nbuckets],
                    ..LiveAcc::default()
                }))
            })
            .collect();
        let start = Instant::now();
        let deadline = start + Duration::from_secs_f64(seconds);
        let failure: Mutex<Option<HaqError>> = Mutex::new(None);
        std::thread::scope(|s| {
            for (i, t) in self.tenants.iter().enumerate() {
                let threads = if t.rate.is_some() {
                    2 * DEPTH
                } else {
                    t.depth.min(DEPTH)
                };
                for k in 0..threads {
                    let q = ctl.queue(&t.name, t.class);
                    let acc = accs[i].clone();
                    let sizes = t.sizes.clone();
                    let failure = &failure;
                    let mut rng = SplitMix64::new(seed ^ ((i as u64) << 32) ^ u64::from(k));
                    s.spawn(move || {
                        while Instant::now() < deadline {
                            let bytes = sizes.pick(&mut rng);
                            let t0 = Instant::now();
                            if let Err(e) = q.run(bytes, || ()) {
                                // Shut down at the end, or a real failure: keep the first.
                                let mut f = failure.lock().unwrap_or_else(|p| p.into_inner());
                                if f.is_none() && Instant::now() < deadline {
                                    *f = Some(e);
                                }
                                return;
                            }
                            let done = start.elapsed().as_secs_f64();
                            if done > seconds {
                                return;
                            }
                            let mut a = acc.lock().unwrap_or_else(|p| p.into_inner());
                            let b = ((done / bucket_s) as usize).min(nbuckets - 1);
                            a.buckets[b] += u64::from(bytes);
                            if done >= warm {
                                let lat = t0.elapsed().as_secs_f64() * 1e6;
                                a.commands += 1;
                                a.bytes += u64::from(bytes);
                                a.busy_us += dev.service_us(bytes);
                                a.latency_sum_us += lat;
                                a.latencies_us.push(lat);
                            }
                        }
                    });
                }
            }
        });
        let stats = ctl.stats();
        ctl.shutdown();
        if let Some(e) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(e);
        }
        let measured = seconds - warm;
        let mut busy = 0.0;
        let tenants: Vec<TenantReport> = self
            .tenants
            .iter()
            .zip(&accs)
            .map(|(t, acc)| {
                let mut a = acc.lock().unwrap_or_else(|p| p.into_inner());
                busy += a.busy_us;
                a.latencies_us.sort_by(f64::total_cmp);
                let pct = |v: &[f64], p: f64| {
                    if v.is_empty() {
                        0.0
                    } else {
                        v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
                    }
                };
                let st = stats
                    .tenants
                    .iter()
                    .find(|s| s.name == t.name && s.class == t.class);
                TenantReport {
                    name: t.name.clone(),
                    class: t.class,
                    commands: a.commands,
                    bytes: a.bytes,
                    dropped: 0,
                    offered: 0,
                    bandwidth_bps: a.bytes as f64 / measured,
                    iops: a.commands as f64 / measured,
                    buckets: a.buckets.iter().map(|&b| b as f64 / bucket_s).collect(),
                    wait_p50_us: st.map_or(0.0, |s| s.wait_p50_us),
                    wait_p99_us: st.map_or(0.0, |s| s.wait_p99_us),
                    wait_max_us: 0.0,
                    latency_mean_us: if a.commands == 0 {
                        0.0
                    } else {
                        a.latency_sum_us / a.commands as f64
                    },
                    latency_p99_us: pct(&a.latencies_us, 0.99),
                    latency_max_us: a.latencies_us.last().copied().unwrap_or(0.0),
                }
            })
            .collect();
        let report = SimReport {
            policy: cfg.policy,
            weights: cfg.weights,
            duration_s: seconds,
            measured_s: measured,
            bucket_s,
            utilisation: busy / 1e6 / measured / f64::from(dev.units),
            tenants,
            events: 0,
        };
        Ok(self.finish(cfg, report))
    }
}

/// A live run during which a probe thread's 1 ms sleep overran by more than this
/// (microseconds) was disturbed by the host, and is run again.
const STALL_US: f64 = 10_000.0;

/// A live point at which the high job's queue was seen empty at more than this fraction of
/// the probe's wake-ups was disturbed by the host (its threads did not get the CPU to
/// resubmit), and is run again.
const IDLE_MAX: f64 = 0.01;

/// Runs of a live calibration or point before its last is kept, disturbed or not.
const ATTEMPTS: u32 = 3;

/// The most a 1 ms sleep overruns between `from` and `until`, microseconds (sleeps that
/// start before `from` are not counted).
fn lateness(from: std::time::Instant, until: std::time::Instant) -> f64 {
    lateness_and_idle(from, until, None).0
}

/// [`lateness`], and the fraction of its wake-ups (after `from`) at which `queue` held no
/// command.
fn lateness_and_idle(
    from: std::time::Instant,
    until: std::time::Instant,
    queue: Option<&crate::runtime::TenantQueue>,
) -> (f64, f64) {
    use std::time::{Duration, Instant};
    let nap = Duration::from_millis(1);
    let mut worst = 0.0f64;
    let (mut samples, mut empty) = (0u64, 0u64);
    while Instant::now() < until {
        let t = Instant::now();
        std::thread::sleep(nap);
        if t >= from {
            worst = worst.max(t.elapsed().saturating_sub(nap).as_secs_f64() * 1e6);
            if let Some(q) = queue {
                samples += 1;
                if q.queued() == 0 {
                    empty += 1;
                }
            }
        }
    }
    let idle = if samples == 0 {
        0.0
    } else {
        empty as f64 / samples as f64
    };
    (worst, idle)
}

/// What one live point measured of the high job (after the warm-up).
#[derive(Debug, Default)]
struct HighAcc {
    commands: u64,
    latency_sum_us: f64,
    waits_us: Vec<f64>,
}

/// The Fig. 6.2 study in real time on the controller ([`crate::runtime::Controller`]) with
/// the emulated device `dev` (e.g. [`live_device`]), the dissertation's procedure:
///
/// 1. Calibrate on the same controller ([`crate::calibrate::calibrate`]): a high, a medium
///    and a low job, [`DEPTH`] threads each with one command of 4 KiB outstanding, all
///    backlogged for `calibrate_s` seconds. γ = commands completed per second; a/p = the
///    mean latency over the commands outstanding (`3 × DEPTH`), which is how the
///    dissertation reads a/p off a saturated run (1/γ, Little's law, is reported next to it).
/// 2. For each ρ_l in `rhos`, for `seconds` of wall-clock time (a tenth of it, at most one
///    second, is warm-up): the high and medium jobs back to back ([`DEPTH`] threads each, one
///    command outstanding per thread: q = [`DEPTH`]); the low job open loop, one pacing
///    thread submitting 4 KiB commands at Poisson times of rate
///    `λ_l = ρ_l l / (h + m + ρ_l l) × γ` with the non-blocking check that its queue has room
///    (a full queue counts a drop, as the simulator does; with one submitter the check
///    cannot race).
///
/// Measured for the high job: its bytes/s (against Eq. 6.2 with the calibrated γ); its mean
/// latency, submit to completion of the emulated service (against Eq. 6.3 at this ρ_l with
/// q = [`DEPTH`] and the calibrated a/p: for a closed loop of q commands that is the time q
/// commands take to get through the rounds, so the mean latency by Little's law); and its
/// largest wait, submit to the start of service (the moment the controller hands the command
/// to a unit, timed inside the job), against Eq. 6.3 with every ρ = 1, the bound on any
/// wait. The low job's measured rate is of commands started.
///
/// What is not guaranteed: the figures depend on the machine's scheduling (a thread woken
/// late delays a submission or a completion; the high job's threads starved of CPU leave
/// its queue empty, so it is not backlogged as the model assumes), so they hold within a
/// tolerance, not exactly. A probe thread measures how late the host wakes threads (each
/// point's `sched_late_max_us`) and how often the high job's queue is empty
/// (`high_idle_fraction`: its threads starved); a calibration or point during which a 1 ms
/// sleep overran by more than 10 ms, or a point whose high queue was seen empty more than 1%
/// of the time, is run again, at most three times in all, and the last run is kept either
/// way (`attempts`, `calibration_attempts`). A largest wait past Eq. 6.3's bound
/// with a large lateness is the host's doing, not the arbitration's.
pub fn rho_study_live(
    cfg: &ArbiterConfig,
    dev: &ServiceModel,
    rhos: &[f64],
    seconds: f64,
    calibrate_s: f64,
    seed: u64,
) -> Result<RhoStudy, HaqError> {
    use crate::calibrate::{CalibrateOptions, calibrate};
    use crate::runtime::{Controller, ControllerOptions};
    use std::sync::Mutex;
    use std::time::{Duration, Instant};
    check_rho_policy(cfg)?;
    for (what, v) in [("seconds", seconds), ("calibration seconds", calibrate_s)] {
        if !(v.is_finite() && v > 0.0 && v <= 3600.0) {
            return Err(HaqError::InvalidConfig {
                what,
                expected: "0 < seconds <= 3600".into(),
                found: v.to_string(),
            });
        }
    }
    for &rho in rhos {
        check_rho(rho)?;
    }
    dev.validate()?;
    let size = 4 * K;
    let ctl = Controller::start(ControllerOptions {
        arbiter: *cfg,
        workers: dev.units,
        service: Some(*dev),
        queue_depth: DEPTH,
    })?;
    let classes = [
        ("high", Class::High),
        ("medium", Class::Medium),
        ("low", Class::Low),
    ];
    let result = (|| {
        let mut cal_attempts = 0;
        let cal = loop {
            cal_attempts += 1;
            let from = Instant::now();
            let (cal, late) = std::thread::scope(|s| {
                let probe =
                    s.spawn(move || lateness(from, from + Duration::from_secs_f64(calibrate_s)));
                let cal = calibrate(
                    &CalibrateOptions {
                        threads: 3 * DEPTH,
                        bytes: size,
                        duration: Duration::from_secs_f64(calibrate_s),
                        span: u64::from(size),
                        seed: seed ^ u64::from(cal_attempts),
                    },
                    |t| {
                        let (name, class) = classes[t as usize % 3];
                        let q = ctl.queue(name, class);
                        move |_offset: u64, bytes: u32| q.run(bytes, || ())
                    },
                )
                .map_err(|e| match e {
                    crate::calibrate::CalibrateError::Invalid(e) => e,
                    crate::calibrate::CalibrateError::Executor { error, .. } => error,
                    crate::calibrate::CalibrateError::Panicked(t) => HaqError::InvalidConfig {
                        what: "calibration",
                        expected: "every thread to finish".into(),
                        found: format!("thread {t} panicked"),
                    },
                });
                (cal, probe.join().unwrap_or(f64::INFINITY))
            });
            let cal = cal?;
            if late <= STALL_US || cal_attempts >= ATTEMPTS {
                break cal;
            }
        };
        if cal.commands == 0 {
            return Err(HaqError::InvalidConfig {
                what: "calibration",
                expected: "commands completed".into(),
                found: "none".into(),
            });
        }
        let gamma_iops = cal.gamma_iops;
        let gamma_bps = cal.gamma_bps;
        let a_over_p = cal.a_over_p_us;
        let bound = model::t_max(
            &rho_loads(cfg, 1.0),
            Class::High,
            f64::from(DEPTH),
            a_over_p,
        );
        let bucket_s = (seconds / 100.0).clamp(0.01, 1.0);
        let nbuckets = (seconds / bucket_s).ceil() as usize;
        let warm = (seconds / 10.0).min(1.0);
        let measured = seconds - warm;
        let mut points = Vec::new();
        let mut buckets = Vec::new();
        for (n, &rho) in rhos.iter().enumerate() {
            for attempt in 1..=ATTEMPTS {
                let l = rho_loads(cfg, rho);
                let low_rate =
                    model::rate_for_rho(&l, Class::Low, rho, gamma_bps) / f64::from(size);
                let high = Mutex::new(HighAcc::default());
                let high_buckets = Mutex::new(vec![0u64; nbuckets]);
                let low_started = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
                let mut low_dropped = 0u64;
                let failure: Mutex<Option<HaqError>> = Mutex::new(None);
                let late_max = Mutex::new((0.0f64, 0.0f64));
                let start = Instant::now();
                let deadline = start + Duration::from_secs_f64(seconds);
                std::thread::scope(|s| {
                    let late_max = &late_max;
                    let q = ctl.queue("high", Class::High);
                    s.spawn(move || {
                        let worst = lateness_and_idle(
                            start + Duration::from_secs_f64(warm),
                            deadline,
                            Some(&q),
                        );
                        *late_max.lock().unwrap_or_else(|p| p.into_inner()) = worst;
                    });
                    for (c, &(name, class)) in classes[..2].iter().enumerate() {
                        for _ in 0..DEPTH {
                            let q = ctl.queue(name, class);
                            let (high, high_buckets, failure) = (&high, &high_buckets, &failure);
                            s.spawn(move || {
                                while Instant::now() < deadline {
                                    let t0 = Instant::now();
                                    let wait = match q.run(size, move || t0.elapsed()) {
                                        Ok(w) => w,
                                        Err(e) => {
                                            let mut f =
                                                failure.lock().unwrap_or_else(|p| p.into_inner());
                                            f.get_or_insert(e);
                                            return;
                                        }
                                    };
                                    let done = start.elapsed().as_secs_f64();
                                    if c != 0 || done > seconds {
                                        continue;
                                    }
                                    let b = ((done / bucket_s) as usize).min(nbuckets - 1);
                                    high_buckets.lock().unwrap_or_else(|p| p.into_inner())[b] +=
                                        u64::from(size);
                                    if t0.duration_since(start).as_secs_f64() >= warm {
                                        let mut h = high.lock().unwrap_or_else(|p| p.into_inner());
                                        h.commands += 1;
                                        h.latency_sum_us += t0.elapsed().as_secs_f64() * 1e6;
                                        h.waits_us.push(wait.as_secs_f64() * 1e6);
                                    }
                                }
                            });
                        }
                    }
                    // The low job: this thread paces it.
                    if low_rate > 0.0 {
                        let q = ctl.queue("low", Class::Low);
                        let mut rng = SplitMix64::new(
                            seed ^ 0x5eed_0000 ^ n as u64 ^ (u64::from(attempt) << 40),
                        );
                        let mut at = 0.0f64;
                        loop {
                            at += -rng.unit().ln() / low_rate;
                            if at >= seconds {
                                break;
                            }
                            let due = start + Duration::from_secs_f64(at);
                            let now = Instant::now();
                            if due > now {
                                std::thread::sleep(due - now);
                            }
                            if q.queued() >= DEPTH as usize {
                                if at >= warm {
                                    low_dropped += 1;
                                }
                                continue;
                            }
                            let started = low_started.clone();
                            let job: crate::runtime::Job = Box::new(move || {
                                let t = start.elapsed().as_secs_f64();
                                if t >= warm && t <= seconds {
                                    started.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                }
                            });
                            if let Err(e) = q.submit(size, job) {
                                failure
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .get_or_insert(e);
                                break;
                            }
                        }
                    }
                });
                if let Some(e) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
                    return Err(e);
                }
                // Let the low job's last commands start before the next point.
                while ctl.queue("low", Class::Low).queued() > 0 {
                    std::thread::sleep(Duration::from_millis(2));
                }
                let late_max = late_max.into_inner().unwrap_or_else(|p| p.into_inner());
                let mut h = high.into_inner().unwrap_or_else(|p| p.into_inner());
                h.waits_us.sort_by(f64::total_cmp);
                let pct = |p: f64| match h.waits_us.len() {
                    0 => 0.0,
                    n => h.waits_us[((p * n as f64).ceil() as usize).clamp(1, n) - 1],
                };
                let high_bps = h.commands as f64 * f64::from(size) / measured;
                let latency = if h.commands == 0 {
                    0.0
                } else {
                    h.latency_sum_us / h.commands as f64
                };
                let low_bps = low_started.load(std::sync::atomic::Ordering::Relaxed) as f64
                    * f64::from(size)
                    / measured;
                let delivered = if low_rate > 0.0 {
                    (low_bps / (low_rate * f64::from(size))).min(1.0)
                } else {
                    0.0
                };
                let rho_run = rho * delivered;
                let l = rho_loads(cfg, rho_run);
                let model_high = model::throughput(&l, Class::High, gamma_bps);
                let model_t = model::t_max(&l, Class::High, f64::from(DEPTH), a_over_p);
                let point = RhoPoint {
                    rho_l: rho,
                    rho_l_run: rho_run,
                    low_rate,
                    model_high_bps: model_high,
                    sim_high_bps: high_bps,
                    sim_low_bps: low_bps,
                    model_t_max_us: model_t,
                    sim_latency_mean_us: latency,
                    sim_wait_max_us: h.waits_us.last().copied().unwrap_or(0.0),
                    sim_wait_p50_us: pct(0.5),
                    sim_wait_p99_us: pct(0.99),
                    sched_late_max_us: late_max.0,
                    high_idle_fraction: late_max.1,
                    bound_us: bound,
                    throughput_error: (high_bps - model_high).abs() / model_high,
                    latency_error: (latency - model_t).abs() / model_t,
                    low_dropped,
                    attempts: attempt,
                };
                let disturbed =
                    point.sched_late_max_us > STALL_US || point.high_idle_fraction > IDLE_MAX;
                if disturbed && attempt < ATTEMPTS {
                    continue;
                }
                points.push(point);
                let hb = high_buckets.into_inner().unwrap_or_else(|p| p.into_inner());
                buckets.push((rho, hb.iter().map(|&b| b as f64 / bucket_s).collect()));
                break;
            }
        }
        Ok(RhoStudy {
            engine: "live".into(),
            calibration_attempts: cal_attempts,
            arbiter: *cfg,
            gamma_iops,
            gamma_bps,
            a_over_p_us: a_over_p,
            queue_depth: DEPTH,
            points,
            buckets,
            bucket_s: if rhos.is_empty() { 0.0 } else { bucket_s },
            calibration: Some(cal),
        })
    })();
    ctl.shutdown();
    result
}
