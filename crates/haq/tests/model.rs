//! The model against the simulator: admission decisions and chosen weights hold up when the
//! tenants actually run; properties of the work-conserving allocation and of weight choice.

use haq::arbiter::{ArbiterConfig, Policy};
use haq::class::Class;
use haq::model::{self, ClassRequirement, TenantDemand, water_fill};
use haq::scenario::{DEPTH, device};
use haq::sim::{self, SimConfig, SizeMix, TenantSpec};
use proptest::prelude::*;

const SIZE: u32 = 4096;

fn gamma_bps() -> f64 {
    sim::saturated(&device(), f64::from(SIZE)).1
}

fn demand(name: &str, class: Class, required: f64, offered: Option<f64>) -> TenantDemand {
    TenantDemand {
        name: name.into(),
        class,
        required_bps: required,
        offered_bps: offered,
        request_bytes: f64::from(SIZE),
    }
}

/// Run `tenants` (backlogged unless they offer a rate) on the scenario device for 2 s.
fn simulate(cfg: &ArbiterConfig, tenants: &[TenantDemand]) -> Vec<f64> {
    let specs = tenants
        .iter()
        .map(|t| TenantSpec {
            name: t.name.clone(),
            class: t.class,
            sizes: SizeMix::fixed(SIZE),
            depth: DEPTH,
            rate: t.offered_bps.map(|b| b / f64::from(SIZE)),
        })
        .collect();
    let r = sim::simulate(&SimConfig {
        arbiter: *cfg,
        device: device(),
        tenants: specs,
        duration_s: 2.0,
        bucket_s: 0.1,
        seed: 11,
        queue_depth: DEPTH,
        warmup_s: 0.2,
        jitter: 0.0,
    })
    .unwrap();
    r.tenants.iter().map(|t| t.bandwidth_bps).collect()
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b
}

#[test]
fn admission_predictions_match_the_simulation_and_its_verdicts_hold() {
    let cfg = ArbiterConfig::dissertation_drr();
    let g = gamma_bps(); // about 680 MB/s
    // Existing: a high tenant needing 300 MB/s, backlogged.
    let web = demand("web", Class::High, 300e6, None);
    // A medium tenant offering 100 MB/s (open loop) and a backlogged low one asking 60 MB/s.
    let med = demand("med", Class::Medium, 100e6, Some(100e6));
    let low = demand("low", Class::Low, 60e6, None);
    let a = model::admit(&[web.clone(), med.clone()], &low, &cfg, g);
    assert!(a.admitted, "{a:?}");
    let measured = simulate(&cfg, &[web.clone(), med.clone(), low.clone()]);
    for ((name, predicted, required), m) in a.per_tenant.iter().zip(&measured) {
        assert!(
            rel(*m, *predicted) < 0.05,
            "{name}: simulated {m:.0}, predicted {predicted:.0}"
        );
        // An open-loop tenant's Poisson arrivals vary: 44k commands, sd 0.5%; 2% is 4 sd.
        assert!(
            *m >= *required * 0.98,
            "{name}: admitted but got {m:.0} < {required:.0}"
        );
    }
    // A second backlogged high tenant: the high class is halved and web's 300 MB/s breaks.
    let hog = demand("hog", Class::High, 10e6, None);
    let b = model::admit(&[web.clone(), med.clone(), low.clone()], &hog, &cfg, g);
    assert!(!b.admitted, "{b:?}");
    let measured = simulate(&cfg, &[web, med, low, hog]);
    for ((name, predicted, _), m) in b.per_tenant.iter().zip(&measured) {
        assert!(
            rel(*m, *predicted) < 0.05,
            "{name}: simulated {m:.0}, predicted {predicted:.0}"
        );
    }
    assert!(
        measured[0] < 300e6,
        "the refusal was right: web gets {:.0}",
        measured[0]
    );
}

#[test]
fn chosen_weights_deliver_the_required_bandwidth_when_run() {
    let g = gamma_bps();
    // 90% of the device asked for, 5:3:1; every class backlogged.
    let need = [0.5 * g, 0.3 * g, 0.1 * g];
    let classes = [Class::High, Class::Medium, Class::Low];
    let reqs: Vec<ClassRequirement> = classes
        .iter()
        .zip(need)
        .map(|(&class, bandwidth_bps)| ClassRequirement {
            class,
            bandwidth_bps,
            request_bytes: f64::from(SIZE),
        })
        .collect();
    for policy in [Policy::Drr, Policy::Wrr] {
        let weights = model::choose_weights(&reqs, policy, g).unwrap();
        let mut cfg = if policy == Policy::Drr {
            ArbiterConfig::dissertation_drr()
        } else {
            ArbiterConfig::dissertation_wrr()
        };
        cfg.weights = weights;
        let tenants: Vec<TenantDemand> = classes
            .iter()
            .zip(need)
            .map(|(&c, n)| demand(c.name(), c, n, None))
            .collect();
        let got = simulate(&cfg, &tenants);
        for ((c, n), m) in classes.iter().zip(need).zip(&got) {
            assert!(
                *m >= n,
                "{policy:?} {weights:?}: {} got {m:.0} < {n:.0}",
                c.name()
            );
        }
    }
}

proptest! {
    #[test]
    fn water_filling_is_capped_fair_and_work_conserving(
        items in proptest::collection::vec((1u32..300, proptest::option::of(0u32..1000)), 1..8),
        capacity in 0u32..5000,
    ) {
        let w: Vec<f64> = items.iter().map(|&(w, _)| f64::from(w)).collect();
        let d: Vec<Option<f64>> = items.iter().map(|&(_, d)| d.map(f64::from)).collect();
        let cap = f64::from(capacity);
        let a = water_fill(&w, &d, cap);
        let total: f64 = a.iter().sum();
        prop_assert!(total <= cap + 1e-6);
        for i in 0..a.len() {
            prop_assert!(a[i] >= -1e-9);
            if let Some(di) = d[i] {
                prop_assert!(a[i] <= di + 1e-6);
            }
        }
        // Work conserving: all capacity is used unless every item got its whole demand.
        let all_met = (0..a.len()).all(|i| matches!(d[i], Some(di) if a[i] >= di - 1e-6));
        if !all_met {
            prop_assert!((total - cap).abs() < 1e-6 * cap.max(1.0), "{total} of {cap}");
        }
        // Weighted fairness: an item short of its demand has the largest allocation per
        // weight, so nobody gets more per weight at its expense.
        let level = (0..a.len()).map(|i| a[i] / w[i]).fold(0.0, f64::max);
        for i in 0..a.len() {
            let short = d[i].is_none_or(|di| a[i] < di - 1e-6);
            if short {
                prop_assert!((a[i] / w[i] - level).abs() < 1e-6 * level.max(1.0));
            }
        }
    }

    #[test]
    fn chosen_weights_always_meet_feasible_requirements(
        parts in proptest::collection::vec(1u32..1000, 3),
        used in 1u32..=100,
        sizes in proptest::collection::vec(prop_oneof![Just(512u32), Just(4096), Just(65536)], 3),
        wrr in any::<bool>(),
    ) {
        let g = 1e9;
        let sum: f64 = parts.iter().map(|&p| f64::from(p)).sum();
        let classes = [Class::High, Class::Medium, Class::Low];
        let reqs: Vec<ClassRequirement> = (0..3)
            .map(|k| ClassRequirement {
                class: classes[k],
                bandwidth_bps: f64::from(parts[k]) / sum * g * f64::from(used) / 100.0,
                request_bytes: f64::from(sizes[k]),
            })
            .collect();
        let policy = if wrr { Policy::Wrr } else { Policy::Drr };
        // 8 bits cannot express every split: when a weight is found it must be right.
        if let Ok(w) = model::choose_weights(&reqs, policy, g) {
            let eff: Vec<f64> = (0..3)
                .map(|k| f64::from(w.count(classes[k])) * if wrr { f64::from(sizes[k]) } else { 1.0 })
                .collect();
            let tot: f64 = eff.iter().sum();
            for k in 0..3 {
                prop_assert!(eff[k] / tot * g >= reqs[k].bandwidth_bps * (1.0 - 1e-9), "{w:?} {reqs:?}");
            }
        } else {
            // Refused only when the shares need finer than 1/256 steps or more than the device.
            let smallest = reqs.iter().map(|r| r.bandwidth_bps).fold(f64::INFINITY, f64::min);
            prop_assert!(used == 100 || smallest / g < 0.05 || wrr, "{reqs:?}");
        }
    }
}
