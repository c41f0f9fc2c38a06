//! The performance model of weighted arbitration (§6.3.1 of the dissertation, Eq. 6.1-6.3),
//! its work-conserving generalisation, admission control and weight selection.
//!
//! # Units
//!
//! A class's *weight* is in the policy's cost unit ([`ArbiterConfig::weight_cost`]): commands
//! for WRR, bytes for DRR. Throughputs (`gamma`, `lambda`, the results) are in the matching
//! unit per second: commands/s (IOPS) when weights are in commands, bytes/s when weights are
//! in bytes. The dissertation's γ = 240k leaves its unit open; here it is always stated.
//!
//! # Which form applies when
//!
//! - [`guaranteed_share`] (Eq. 6.1): the share a class gets when *every* weighted class is
//!   backlogged, `w_i / Σ w_j`. It is a lower bound on what a backlogged class gets whatever
//!   the others do (they can only use less than their weight, never more), so it is the
//!   number to provision SLAs against.
//! - [`throughput`] (Eq. 6.2, in the general per-class form
//!   `γ_i = min(λ_i, w_i / (w_i + Σ_{j≠i} ρ_j w_j) × γ)`): the average throughput of class
//!   `i` when the others use a fraction `ρ_j` of their weight per round. It takes class `i`
//!   itself as backlogged (its `ρ_i` does not appear) and caps it at its own input rate.
//!   Exact when at most one class is not backlogged and the ρ's are consistent with the
//!   rates (see [`rate_for_rho`]); with several classes below their weight it is an estimate.
//! - [`class_rate`]: the per-round accounting that Eq. 6.2 comes from,
//!   `ρ_i w_i / Σ_j ρ_j w_j × γ`, for every class including one that is not backlogged.
//! - [`work_conserving`]: given each class's *offered* rate (or backlogged), the allocation a
//!   work-conserving weighted arbiter converges to: weighted max-min fairness (water filling).
//!   A class that offers less than its weighted share gets what it offers and the leftover is
//!   redistributed to the others by weight. It needs offered rates rather than ρ's, gives
//!   every class at once, and agrees with Eq. 6.2 wherever Eq. 6.2 is exact.
//! - [`t_max`] (Eq. 6.3): `q/w_i × (w_i + Σ_{j≠i} ρ_j w_j) × a/p`, the time a class-`i`
//!   command waits behind `q` outstanding commands of its class while each round also serves
//!   the others' `ρ_j w_j`. It holds when requests are of one size across classes (for WRR
//!   with mixed sizes `a` is not one number). The unit of the weights cancels, so byte
//!   weights (DRR) and command weights give the same value. With `a/p = 1/γ` (commands/s,
//!   Little's law at saturation) Eq. 6.3 equals `q / γ_i`: by Little's law the *mean*
//!   latency of a class that keeps `q` commands outstanding. Evaluated with every `ρ_j = 1`
//!   (the fullest round) it is the one-round worst case; it is not proven here to bound
//!   every single wait, but in the simulated Fig. 6.2 study (one request size, q
//!   outstanding, fixed service times) no wait exceeded it, and the scenario tests check
//!   that. With service times that vary it is exceeded: with times drawn from 0.5..1.5 of
//!   their mean the largest simulated wait was about 10% above it (`kavach haq run
//!   rho-study --jitter 0.5`), while the means still matched Eq. 6.2 and 6.3 within 1%.
//!
//! Tenants ([`allocate`], [`admit`]): within a class, DRR gives each backlogged queue equal
//! bytes and WRR equal commands (round robin by command), RR ignores classes and gives every
//! queue equal commands; urgent queues are strict priority and take their offered rate first.

use crate::arbiter::{ArbiterConfig, Policy, Weights};
use crate::class::{Class, HaqError};

/// The load of one class, for Eq. 6.1-6.3.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ClassLoad {
    /// The class.
    pub class: Class,
    /// Its weight in cost units (commands for WRR, bytes for DRR).
    pub weight: f64,
    /// Its utilisation: the fraction of its weight it has queued per round, `0..=1`.
    pub rho: f64,
    /// Its input rate in cost units per second; `None`: backlogged (unbounded).
    pub lambda: Option<f64>,
}

impl ClassLoad {
    /// A backlogged class (`rho` 1, no rate limit).
    pub fn backlogged(class: Class, weight: f64) -> ClassLoad {
        ClassLoad {
            class,
            weight,
            rho: 1.0,
            lambda: None,
        }
    }
}

pub(crate) fn invalid(
    what: &'static str,
    expected: impl Into<String>,
    found: impl ToString,
) -> HaqError {
    HaqError::InvalidConfig {
        what,
        expected: expected.into(),
        found: found.to_string(),
    }
}

/// Check that `loads` name each class at most once, with finite positive weights and ρ in
/// `0..=1`, and that `class` is among them.
pub fn validate(loads: &[ClassLoad], class: Class) -> Result<(), HaqError> {
    for (i, l) in loads.iter().enumerate() {
        if loads[..i].iter().any(|o| o.class == l.class) {
            return Err(invalid(
                "class loads",
                "each class at most once",
                format!("{} twice", l.class.name()),
            ));
        }
        if !(l.weight.is_finite() && l.weight > 0.0) {
            return Err(invalid(
                "class weight",
                "a finite number > 0",
                format!("{} for {}", l.weight, l.class.name()),
            ));
        }
        if !(0.0..=1.0).contains(&l.rho) {
            return Err(invalid(
                "class utilisation (rho)",
                "a number in 0..=1",
                format!("{} for {}", l.rho, l.class.name()),
            ));
        }
        if let Some(x) = l.lambda {
            if !(x.is_finite() && x >= 0.0) {
                return Err(invalid(
                    "class input rate",
                    "a finite number >= 0",
                    format!("{x} for {}", l.class.name()),
                ));
            }
        }
    }
    if !loads.iter().any(|l| l.class == class) {
        return Err(invalid(
            "class",
            "one of the classes given loads",
            class.name(),
        ));
    }
    Ok(())
}

fn weight_of(loads: &[ClassLoad], class: Class) -> f64 {
    loads
        .iter()
        .find(|l| l.class == class)
        .map_or(0.0, |l| l.weight)
}

/// Eq. 6.1: the fraction of the device that `class` is guaranteed when every class in
/// `loads` is backlogged, `w_class / Σ w`. 0 for a class not in `loads`.
pub fn guaranteed_share(loads: &[ClassLoad], class: Class) -> f64 {
    let total: f64 = loads.iter().map(|l| l.weight).sum();
    if total <= 0.0 {
        return 0.0;
    }
    weight_of(loads, class) / total
}

/// Eq. 6.2, general per-class form: `min(λ_i, w_i / (w_i + Σ_{j≠i} ρ_j w_j) × γ)`, class
/// `i` = `class` taken as backlogged; `gamma` in cost units per second.
pub fn throughput(loads: &[ClassLoad], class: Class, gamma: f64) -> f64 {
    let w = weight_of(loads, class);
    if w <= 0.0 {
        return 0.0;
    }
    let others: f64 = loads
        .iter()
        .filter(|l| l.class != class)
        .map(|l| l.rho * l.weight)
        .sum();
    let share = w / (w + others) * gamma;
    match loads
        .iter()
        .find(|l| l.class == class)
        .and_then(|l| l.lambda)
    {
        Some(lambda) => share.min(lambda),
        None => share,
    }
}

/// The per-round accounting behind Eq. 6.2 for any class: `ρ_i w_i / Σ_j ρ_j w_j × γ`.
pub fn class_rate(loads: &[ClassLoad], class: Class, gamma: f64) -> f64 {
    let total: f64 = loads.iter().map(|l| l.rho * l.weight).sum();
    if total <= 0.0 {
        return 0.0;
    }
    loads
        .iter()
        .find(|l| l.class == class)
        .map_or(0.0, |l| l.rho * l.weight / total * gamma)
}

/// The input rate (cost units per second) at which `class` has utilisation `rho` when the
/// other classes have theirs as given in `loads` (its own `rho` in `loads` is replaced):
/// `λ_i = ρ w_i / (ρ w_i + Σ_{j≠i} ρ_j w_j) × γ`. With the others backlogged, the low class
/// of the Fig. 6.2 study gets `λ_l = ρ_l l / (h + m + ρ_l l) × γ`.
pub fn rate_for_rho(loads: &[ClassLoad], class: Class, rho: f64, gamma: f64) -> f64 {
    let w = weight_of(loads, class);
    let others: f64 = loads
        .iter()
        .filter(|l| l.class != class)
        .map(|l| l.rho * l.weight)
        .sum();
    let mine = rho * w;
    if mine + others <= 0.0 {
        return 0.0;
    }
    mine / (mine + others) * gamma
}

/// Eq. 6.3: the maximum latency of a command of `class`,
/// `q/w_i × (w_i + Σ_{j≠i} ρ_j w_j) × a/p`, in the unit of `a_over_p` (per command).
pub fn t_max(loads: &[ClassLoad], class: Class, queue_depth: f64, a_over_p: f64) -> f64 {
    let w = weight_of(loads, class);
    if w <= 0.0 {
        return f64::INFINITY;
    }
    let others: f64 = loads
        .iter()
        .filter(|l| l.class != class)
        .map(|l| l.rho * l.weight)
        .sum();
    queue_depth / w * (w + others) * a_over_p
}

/// Weighted max-min fair allocation of `capacity` to items with `weights` (> 0) and offered
/// `demands` (`None`: unbounded): an item offering less than its weighted share of what is
/// left gets its offer; the rest is shared again by weight among the others.
pub fn water_fill(weights: &[f64], demands: &[Option<f64>], capacity: f64) -> Vec<f64> {
    let n = weights.len();
    let mut alloc = vec![0.0; n];
    let mut open: Vec<usize> = (0..n).filter(|&i| weights[i] > 0.0).collect();
    let mut left = capacity.max(0.0);
    loop {
        let total: f64 = open.iter().map(|&i| weights[i]).sum();
        if open.is_empty() || total <= 0.0 {
            return alloc;
        }
        let capped: Vec<usize> = open
            .iter()
            .copied()
            .filter(|&i| matches!(demands[i], Some(d) if d <= weights[i] / total * left))
            .collect();
        if capped.is_empty() {
            for &i in &open {
                alloc[i] = weights[i] / total * left;
            }
            return alloc;
        }
        for &i in &capped {
            let d = demands[i].unwrap_or(0.0).max(0.0);
            alloc[i] = d;
            left -= d;
        }
        open.retain(|i| !capped.contains(i));
    }
}

/// The work-conserving form: the throughput of every class in `loads` (same order), from
/// their offered rates `lambda` (`None`: backlogged), by weighted max-min fairness.
pub fn work_conserving(loads: &[ClassLoad], gamma: f64) -> Vec<f64> {
    let w: Vec<f64> = loads.iter().map(|l| l.weight).collect();
    let d: Vec<Option<f64>> = loads.iter().map(|l| l.lambda).collect();
    water_fill(&w, &d, gamma)
}

/// What one tenant needs and offers, for [`allocate`] and [`admit`]. Rates in bytes/s.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TenantDemand {
    /// Its name.
    pub name: String,
    /// Its class.
    pub class: Class,
    /// The bandwidth its SLA promises, bytes/s.
    pub required_bps: f64,
    /// What it submits, bytes/s; `None`: as much as it can (backlogged, the worst case for
    /// the others).
    pub offered_bps: Option<f64>,
    /// Its mean request size in bytes (matters for WRR and RR, which count commands).
    pub request_bytes: f64,
}

/// The outcome of an admission check.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Admission {
    /// Whether every tenant, the new one included, gets at least what it requires.
    pub admitted: bool,
    /// Per tenant (existing ones first, the new one last): name, predicted bytes/s, required
    /// bytes/s.
    pub per_tenant: Vec<(String, f64, f64)>,
}

/// The bandwidth (bytes/s) each tenant gets on a device of `gamma_bps` bytes/s under `cfg`,
/// by the work-conserving model: urgent tenants first (strict priority, at their offered
/// rate, all of it if backlogged), then the classes by weight in bytes per round (DRR: the
/// weight; WRR: commands × the class's mean request size), then the tenants within a class
/// (DRR: equal bytes; WRR: equal commands, so bytes ∝ request size); RR: every non-urgent
/// tenant equal commands.
pub fn allocate(tenants: &[TenantDemand], cfg: &ArbiterConfig, gamma_bps: f64) -> Vec<f64> {
    let n = tenants.len();
    let mut alloc = vec![0.0; n];
    let mut left = gamma_bps.max(0.0);
    for (i, t) in tenants.iter().enumerate() {
        if t.class == Class::Urgent {
            let got = t.offered_bps.unwrap_or(f64::INFINITY).min(left).max(0.0);
            alloc[i] = got;
            left -= got;
        }
    }
    let rest: Vec<usize> = (0..n)
        .filter(|&i| tenants[i].class != Class::Urgent)
        .collect();
    let size = |i: usize| tenants[i].request_bytes.max(1.0);
    if cfg.policy == Policy::RoundRobin {
        let w: Vec<f64> = rest.iter().map(|&i| size(i)).collect();
        let d: Vec<Option<f64>> = rest.iter().map(|&i| tenants[i].offered_bps).collect();
        for (k, a) in water_fill(&w, &d, left).into_iter().enumerate() {
            alloc[rest[k]] = a;
        }
        return alloc;
    }
    let classes = [Class::High, Class::Medium, Class::Low];
    let members: Vec<Vec<usize>> = classes
        .iter()
        .map(|&c| {
            rest.iter()
                .copied()
                .filter(|&i| tenants[i].class == c)
                .collect()
        })
        .collect();
    let mut class_w = Vec::new();
    let mut class_d = Vec::new();
    for (k, &c) in classes.iter().enumerate() {
        let m = &members[k];
        if m.is_empty() {
            class_w.push(0.0);
            class_d.push(Some(0.0));
            continue;
        }
        let mean = m.iter().map(|&i| size(i)).sum::<f64>() / m.len() as f64;
        let cost = cfg.weight_cost(c) as f64;
        class_w.push(if cfg.policy == Policy::Wrr {
            cost * mean
        } else {
            cost
        });
        class_d.push(
            m.iter()
                .map(|&i| tenants[i].offered_bps)
                .try_fold(0.0, |s, d| d.map(|d| s + d)),
        );
    }
    let per_class = water_fill(&class_w, &class_d, left);
    for (k, m) in members.iter().enumerate() {
        let w: Vec<f64> = m
            .iter()
            .map(|&i| {
                if cfg.policy == Policy::Wrr {
                    size(i)
                } else {
                    1.0
                }
            })
            .collect();
        let d: Vec<Option<f64>> = m.iter().map(|&i| tenants[i].offered_bps).collect();
        for (j, a) in water_fill(&w, &d, per_class[k]).into_iter().enumerate() {
            alloc[m[j]] = a;
        }
    }
    alloc
}

/// Admission control (§6.3.3): would adding `new` to the tenants already on the device break
/// anyone's SLA at the configured weights? Predicts every tenant's bandwidth with
/// [`allocate`] and admits when each gets at least its `required_bps`.
pub fn admit(
    existing: &[TenantDemand],
    new: &TenantDemand,
    cfg: &ArbiterConfig,
    gamma_bps: f64,
) -> Admission {
    let mut all = existing.to_vec();
    all.push(new.clone());
    let got = allocate(&all, cfg, gamma_bps);
    let per_tenant: Vec<(String, f64, f64)> = all
        .iter()
        .zip(&got)
        .map(|(t, &g)| (t.name.clone(), g, t.required_bps))
        .collect();
    // A relative tolerance for rounding: a tenant promised exactly its share is admitted.
    let admitted = per_tenant.iter().all(|(_, g, r)| *g >= *r * (1.0 - 1e-9));
    Admission {
        admitted,
        per_tenant,
    }
}

/// What a class must get, for [`choose_weights`].
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ClassRequirement {
    /// The class (high, medium or low).
    pub class: Class,
    /// The bandwidth it must get with every class backlogged, bytes/s.
    pub bandwidth_bps: f64,
    /// Its mean request size, bytes (used by WRR, which weighs commands).
    pub request_bytes: f64,
}

/// Weight selection (§6.3.3): the 8-bit weights (counts 1..=256) under which each class's
/// guaranteed bandwidth (Eq. 6.1, every class backlogged, on a device of `gamma_bps`) is at
/// least its requirement. Classes not named get weight 1. Among the weights that work it
/// picks the finest (the largest counts that fit 8 bits), which spreads the capacity left
/// over in proportion to the requirements. DRR counts are in units of `cfg.drr_unit` bytes;
/// WRR counts are commands, so a class's byte share is `count × request size`. RR has no
/// weights: an error.
pub fn choose_weights(
    reqs: &[ClassRequirement],
    policy: Policy,
    gamma_bps: f64,
) -> Result<Weights, HaqError> {
    if policy == Policy::RoundRobin {
        return Err(invalid("policy", "wrr or drr (rr has no weights)", "rr"));
    }
    if !(gamma_bps.is_finite() && gamma_bps > 0.0) {
        return Err(invalid(
            "device bandwidth (gamma)",
            "> 0 bytes/s",
            gamma_bps,
        ));
    }
    let classes = [Class::High, Class::Medium, Class::Low];
    let mut frac = [0.0f64; 3];
    let mut size = [1.0f64; 3];
    for r in reqs {
        let k = classes.iter().position(|&c| c == r.class).ok_or_else(|| {
            invalid(
                "class of a requirement",
                "high, medium or low",
                r.class.name(),
            )
        })?;
        if !(r.bandwidth_bps.is_finite() && r.bandwidth_bps >= 0.0) {
            return Err(invalid(
                "bandwidth required",
                "a finite number >= 0",
                format!("{} for {}", r.bandwidth_bps, r.class.name()),
            ));
        }
        if !(r.request_bytes.is_finite() && r.request_bytes >= 1.0) {
            return Err(invalid(
                "request size",
                ">= 1 byte",
                format!("{} for {}", r.request_bytes, r.class.name()),
            ));
        }
        frac[k] += r.bandwidth_bps / gamma_bps;
        if policy == Policy::Wrr {
            size[k] = r.request_bytes;
        }
    }
    if policy == Policy::Wrr {
        // A class with no requirement still takes its count of commands per round when it
        // has work: count them at the largest size named (the conservative choice).
        let largest = reqs.iter().map(|r| r.request_bytes).fold(1.0, f64::max);
        for k in 0..3 {
            if !reqs.iter().any(|r| r.class == classes[k]) {
                size[k] = largest;
            }
        }
    }
    let need: f64 = frac.iter().sum();
    if need > 1.0 {
        return Err(invalid(
            "bandwidth required in total",
            format!("at most the device's {gamma_bps:.0} bytes/s"),
            format!("{:.0} bytes/s", need * gamma_bps),
        ));
    }
    let meets = |c: &[u32; 3]| {
        let eff: Vec<f64> = (0..3).map(|k| c[k] as f64 * size[k]).collect();
        let tot: f64 = eff.iter().sum();
        (0..3).all(|k| eff[k] / tot >= frac[k] * (1.0 - 1e-12))
    };
    // The byte-per-round budget T: class k needs count ≥ frac_k × T / size_k. Try budgets
    // from fine to coarse and keep the first whose counts fit 8 bits and meet every share.
    let max_eff = 256.0 * size.iter().cloned().fold(f64::INFINITY, f64::min);
    let top = (256.0 * 3.0 * size.iter().cloned().fold(0.0, f64::max)).max(max_eff);
    let steps = 4096;
    for s in (1..=steps).rev() {
        let t = top * s as f64 / steps as f64;
        let mut c = [1u32; 3];
        let mut fits = true;
        for k in 0..3 {
            let v = (frac[k] * t / size[k]).ceil().max(1.0);
            if v > 256.0 {
                fits = false;
                break;
            }
            c[k] = v as u32;
        }
        if fits && meets(&c) {
            return Weights::from_counts(c[0], c[1], c[2]);
        }
    }
    Err(invalid(
        "requirements",
        "shares that 8-bit weights can express",
        format!("fractions {frac:?} of the device"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dissertation(rho_l: f64) -> Vec<ClassLoad> {
        vec![
            ClassLoad::backlogged(Class::High, 128.0 * 1024.0),
            ClassLoad::backlogged(Class::Medium, 64.0 * 1024.0),
            ClassLoad {
                class: Class::Low,
                weight: 32.0 * 1024.0,
                rho: rho_l,
                lambda: None,
            },
        ]
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn eq_6_2_reproduces_the_notes_derived_curve() {
        // gamma 240k, (h, m, l) = (128k, 64k, 32k), rho_m = 1: 160k, 147.7k, 137.1k.
        // Hand: 240 × 128/(128+64) = 160; 240 × 128/208 = 147.69; 240 × 128/224 = 137.14.
        let g = 240_000.0;
        assert!(close(
            throughput(&dissertation(0.0), Class::High, g),
            160_000.0,
            1.0
        ));
        assert!(close(
            throughput(&dissertation(0.5), Class::High, g),
            147_692.3,
            1.0
        ));
        assert!(close(
            throughput(&dissertation(1.0), Class::High, g),
            137_142.9,
            1.0
        ));
    }

    #[test]
    fn eq_6_2_with_the_validation_weight_order() {
        // (h, m, l) = (32k, 64k, 128k): 240 × 32/96 = 80, 32/160 = 48, 32/224 = 34.29.
        let loads = |r: f64| {
            vec![
                ClassLoad::backlogged(Class::High, 32.0),
                ClassLoad::backlogged(Class::Medium, 64.0),
                ClassLoad {
                    class: Class::Low,
                    weight: 128.0,
                    rho: r,
                    lambda: None,
                },
            ]
        };
        let g = 240_000.0;
        assert!(close(
            throughput(&loads(0.0), Class::High, g),
            80_000.0,
            1.0
        ));
        assert!(close(
            throughput(&loads(0.5), Class::High, g),
            48_000.0,
            1.0
        ));
        assert!(close(
            throughput(&loads(1.0), Class::High, g),
            34_285.7,
            1.0
        ));
        // t_max grows 2.33x from rho_l 0 to 1: (32+64+128)/(32+64) = 224/96.
        let r = t_max(&loads(1.0), Class::High, 32.0, 81.0)
            / t_max(&loads(0.0), Class::High, 32.0, 81.0);
        assert!(close(r, 224.0 / 96.0, 1e-12));
    }

    #[test]
    fn eq_6_2_is_capped_by_the_input_rate_and_is_everything_alone() {
        let mut l = dissertation(1.0);
        l[0].lambda = Some(50_000.0);
        assert_eq!(throughput(&l, Class::High, 240_000.0), 50_000.0);
        let alone = [ClassLoad::backlogged(Class::High, 8.0)];
        assert_eq!(throughput(&alone, Class::High, 240_000.0), 240_000.0);
        let quiet = dissertation(0.0);
        let mut q = quiet.clone();
        q[1].rho = 0.0;
        assert_eq!(throughput(&q, Class::High, 240_000.0), 240_000.0);
    }

    #[test]
    fn eq_6_1_shares_are_in_the_ratio_of_the_weights() {
        let l = dissertation(1.0);
        assert!(close(guaranteed_share(&l, Class::High), 4.0 / 7.0, 1e-12));
        assert!(close(guaranteed_share(&l, Class::Medium), 2.0 / 7.0, 1e-12));
        assert!(close(guaranteed_share(&l, Class::Low), 1.0 / 7.0, 1e-12));
        assert_eq!(guaranteed_share(&l, Class::Urgent), 0.0);
        // Eq. 6.1 is the floor of Eq. 6.2 over every rho.
        for r in [0.0, 0.3, 1.0] {
            assert!(throughput(&dissertation(r), Class::High, 1.0) >= 4.0 / 7.0 - 1e-12);
        }
    }

    #[test]
    fn eq_6_3_by_hand_and_with_a_over_p_from_littles_law_it_is_q_over_gamma_i() {
        // q = 32, a/p = 81 us, rho_l = 0: 32/128k × 192k × 81 = 32 × 1.5 × 81 = 3888 us.
        assert!(close(
            t_max(&dissertation(0.0), Class::High, 32.0, 81.0),
            3888.0,
            1e-9
        ));
        // rho_l = 1: 32 × 224/128 × 81 = 4536 us, +16.7% (224/192).
        assert!(close(
            t_max(&dissertation(1.0), Class::High, 32.0, 81.0),
            4536.0,
            1e-9
        ));
        // a/p = 1/gamma: t_max = q / gamma_h.
        let g = 240_000.0;
        for r in [0.0, 0.25, 0.75, 1.0] {
            let l = dissertation(r);
            let t = t_max(&l, Class::High, 32.0, 1.0 / g);
            assert!(close(t, 32.0 / throughput(&l, Class::High, g), 1e-12));
        }
        // Weights in bytes or in commands give the same t_max.
        let cmds: Vec<ClassLoad> = dissertation(0.5)
            .iter()
            .map(|l| ClassLoad {
                weight: l.weight / 4096.0,
                ..*l
            })
            .collect();
        assert!(close(
            t_max(&cmds, Class::High, 32.0, 81.0),
            t_max(&dissertation(0.5), Class::High, 32.0, 81.0),
            1e-9
        ));
    }

    #[test]
    fn the_rate_for_rho_gives_back_rho_and_the_work_conserving_form_agrees_with_eq_6_2() {
        let g = 1_000_000.0;
        for r in [0.0, 0.2, 0.5, 0.9, 1.0] {
            let l = dissertation(r);
            let lam = rate_for_rho(&l, Class::Low, r, g);
            // Hand, rho 0.5: 0.5 × 32 / (128 + 64 + 16) = 16/208 of g.
            if r == 0.5 {
                assert!(close(lam, 16.0 / 208.0 * g, 1e-6));
            }
            let mut offered = l.clone();
            offered[2].lambda = Some(lam);
            let wc = work_conserving(&offered, g);
            assert!(
                close(wc[0], throughput(&l, Class::High, g), 1e-6),
                "rho {r}"
            );
            assert!(close(wc[2], lam, 1e-6));
            assert!(close(class_rate(&l, Class::Low, g), lam, 1e-6));
            assert!(close(wc.iter().sum::<f64>(), g, 1e-6));
        }
    }

    #[test]
    fn water_filling_redistributes_leftover_by_weight() {
        // Weights 4:2:1 over 700; the third offers 10 of its 100: the other two split 690 4:2.
        let a = water_fill(&[4.0, 2.0, 1.0], &[None, None, Some(10.0)], 700.0);
        assert!(close(a[0], 460.0, 1e-9) && close(a[1], 230.0, 1e-9) && a[2] == 10.0);
        // Everyone offers less than capacity: everyone gets their offer.
        let b = water_fill(&[1.0, 1.0], &[Some(1.0), Some(2.0)], 100.0);
        assert_eq!(b, vec![1.0, 2.0]);
    }

    fn tenant(name: &str, class: Class, req: f64, offered: Option<f64>, size: f64) -> TenantDemand {
        TenantDemand {
            name: name.into(),
            class,
            required_bps: req,
            offered_bps: offered,
            request_bytes: size,
        }
    }

    #[test]
    fn admission_accepts_within_the_shares_and_refuses_beyond_them() {
        let cfg = ArbiterConfig::dissertation_drr();
        let g = 700.0e6;
        // A high tenant needing 350 MB/s (share 4/7 = 400 with the low class backlogged).
        let a = tenant("a", Class::High, 350.0e6, None, 4096.0);
        let low_ok = tenant("b", Class::Low, 100.0e6, None, 8192.0);
        let adm = admit(std::slice::from_ref(&a), &low_ok, &cfg, g);
        // Hand: classes high and low backlogged, 4:1 of 700 = 560 and 140.
        assert!(adm.admitted, "{adm:?}");
        assert!(
            close(adm.per_tenant[0].1, 560.0e6, 1.0) && close(adm.per_tenant[1].1, 140.0e6, 1.0)
        );
        // A medium tenant wanting 300 MB/s: 4:2 of 700 gives it 233: refused.
        let med = tenant("c", Class::Medium, 300.0e6, None, 4096.0);
        assert!(!admit(std::slice::from_ref(&a), &med, &cfg, g).admitted);
        // A medium tenant that offers 100 MB/s only: high gets 600 >= 350, it gets 100.
        let polite = tenant("d", Class::Medium, 100.0e6, Some(100.0e6), 4096.0);
        let adm = admit(std::slice::from_ref(&a), &polite, &cfg, g);
        assert!(adm.admitted && close(adm.per_tenant[0].1, 600.0e6, 1.0));
        // A second high tenant halves the high class: 280 < 350, refused; it breaks "a".
        let twin = tenant("e", Class::High, 100.0e6, None, 4096.0);
        let adm = admit(&[a.clone(), low_ok.clone()], &twin, &cfg, g);
        assert!(!adm.admitted);
        assert!(close(adm.per_tenant[0].1, 280.0e6, 1.0));
    }

    #[test]
    fn admission_under_wrr_counts_commands() {
        // S1 under WRR (32, 16, 8): high 4k, medium 8k: 32×4k : 16×8k = 1:1.
        let cfg = ArbiterConfig::dissertation_wrr();
        let h = tenant("h", Class::High, 0.0, None, 4096.0);
        let m = tenant("m", Class::Medium, 0.0, None, 8192.0);
        let got = allocate(&[h, m], &cfg, 1000.0);
        assert!(close(got[0], 500.0, 1e-9) && close(got[1], 500.0, 1e-9));
        // Same class, 4k and 8k: equal commands, bytes 1:2.
        let x = tenant("x", Class::High, 0.0, None, 4096.0);
        let y = tenant("y", Class::High, 0.0, None, 8192.0);
        let got = allocate(&[x.clone(), y.clone()], &cfg, 900.0);
        assert!(close(got[0], 300.0, 1e-9) && close(got[1], 600.0, 1e-9));
        let got = allocate(&[x, y], &ArbiterConfig::dissertation_drr(), 900.0);
        assert!(close(got[0], 450.0, 1e-9) && close(got[1], 450.0, 1e-9));
    }

    #[test]
    fn urgent_tenants_come_first() {
        let cfg = ArbiterConfig::dissertation_drr();
        let u = tenant("u", Class::Urgent, 0.0, Some(100.0), 4096.0);
        let h = tenant("h", Class::High, 0.0, None, 4096.0);
        let got = allocate(&[u, h], &cfg, 1000.0);
        assert_eq!(got, vec![100.0, 900.0]);
    }

    #[test]
    fn chosen_weights_meet_the_requirements_in_8_bits() {
        let g = 1000.0e6;
        let reqs = [
            ClassRequirement {
                class: Class::High,
                bandwidth_bps: 500.0e6,
                request_bytes: 4096.0,
            },
            ClassRequirement {
                class: Class::Medium,
                bandwidth_bps: 250.0e6,
                request_bytes: 4096.0,
            },
            ClassRequirement {
                class: Class::Low,
                bandwidth_bps: 125.0e6,
                request_bytes: 4096.0,
            },
        ];
        let w = choose_weights(&reqs, Policy::Drr, g).unwrap();
        let c = [
            w.count(Class::High),
            w.count(Class::Medium),
            w.count(Class::Low),
        ];
        let tot: f64 = c.iter().map(|&x| x as f64).sum();
        assert!(
            c[0] as f64 / tot >= 0.5 && c[1] as f64 / tot >= 0.25 && c[2] as f64 / tot >= 0.125,
            "{c:?}"
        );
        assert!(c.iter().all(|&x| (1..=256).contains(&x)));
        // 4:2:1 requirements give 4:2:1 weights, the finest that fit: (256, 128, 64).
        assert_eq!(c, [256, 128, 64]);
        // WRR with 8k high requests and 4k low: the high count is halved for the same bytes.
        let wrr = [
            ClassRequirement {
                class: Class::High,
                bandwidth_bps: 600.0e6,
                request_bytes: 8192.0,
            },
            ClassRequirement {
                class: Class::Low,
                bandwidth_bps: 300.0e6,
                request_bytes: 4096.0,
            },
        ];
        let w = choose_weights(&wrr, Policy::Wrr, g).unwrap();
        let (h, m, l) = (
            w.count(Class::High) as f64,
            w.count(Class::Medium) as f64,
            w.count(Class::Low) as f64,
        );
        let bytes = h * 8192.0 + m * 4096.0 + l * 4096.0;
        assert!(
            h * 8192.0 / bytes >= 0.6 && l * 4096.0 / bytes >= 0.3,
            "{w:?}"
        );
        // More than the device: refused with the numbers.
        let too_much = [ClassRequirement {
            class: Class::High,
            bandwidth_bps: 2.0 * g,
            request_bytes: 4096.0,
        }];
        assert!(choose_weights(&too_much, Policy::Drr, g).is_err());
        assert!(choose_weights(&reqs, Policy::RoundRobin, g).is_err());
    }

    #[test]
    fn validation_names_what_is_wrong() {
        let mut l = dissertation(0.5);
        assert!(validate(&l, Class::High).is_ok());
        assert!(validate(&l, Class::Urgent).is_err());
        l[2].rho = 1.5;
        let e = validate(&l, Class::High).unwrap_err().to_string();
        assert!(e.contains("low") && e.contains("1.5"), "{e}");
        let mut d = dissertation(0.5);
        d[1].weight = 0.0;
        assert!(validate(&d, Class::High).is_err());
        let mut t = dissertation(0.5);
        t.push(ClassLoad::backlogged(Class::High, 1.0));
        assert!(validate(&t, Class::High).is_err());
    }
}
