//! The dissertation's findings, reproduced on the simulator: S1-S5 under DRR, WRR and RR, a
//! flooding tenant, and the model against the simulation as the low class's utilisation varies
//! (and, briefly, against the real-time controller).

use haq::arbiter::{ArbiterConfig, Policy, Weights};
use haq::scenario::{
    Scenario, device, dissertation_config, live_device, rho_study, rho_study_live,
};

const SECONDS: f64 = 2.0;

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b
}

fn run(name: &str, policy: Policy) -> haq::scenario::ScenarioRun {
    Scenario::get(name)
        .unwrap()
        .run(&dissertation_config(policy), SECONDS, 1)
        .unwrap()
}

#[test]
fn drr_is_within_5_percent_of_the_expected_byte_ratio_in_all_five() {
    for s in ["S1", "S2", "S3", "S4", "S5"] {
        let r = run(s, Policy::Drr);
        assert!(
            rel(r.ratio, r.expected_ratio) < 0.05,
            "{s}: DRR ratio {:.3}, expected {:.3}",
            r.ratio,
            r.expected_ratio
        );
        // Both jobs were served all along: no bucket after the warm-up is empty.
        for t in &r.report.tenants {
            assert!(
                t.buckets[10..].iter().all(|&b| b > 0.0),
                "{s}: {} starved",
                t.name
            );
        }
    }
}

#[test]
fn wrr_matches_its_prediction_and_misses_the_expected_ratio_except_in_s2() {
    // The WRR predictions by hand: 32×4k:16×8k, 1:1, 32×4k:8×8k, 32×8k:8×4k, 6k:12k.
    let by_hand = [
        ("S1", 1.0),
        ("S2", 1.0),
        ("S3", 2.0),
        ("S4", 8.0),
        ("S5", 0.5),
    ];
    for (s, hand) in by_hand {
        let r = run(s, Policy::Wrr);
        assert!(
            rel(r.wrr_prediction, hand) < 1e-9,
            "{s}: model says {}",
            r.wrr_prediction
        );
        assert!(
            rel(r.ratio, hand) < 0.05,
            "{s}: WRR ratio {:.3}, predicted {hand}",
            r.ratio
        );
        let off = rel(r.ratio, r.expected_ratio);
        if s == "S2" {
            assert!(
                off < 0.05,
                "S2: WRR {:.3} should be the expected 1:1",
                r.ratio
            );
        } else {
            assert!(
                off > 0.05,
                "{s}: WRR {:.3} should miss the expected {:.3}",
                r.ratio,
                r.expected_ratio
            );
        }
    }
}

#[test]
fn round_robin_splits_commands_evenly_whatever_the_classes() {
    for s in ["S1", "S2", "S3", "S4", "S5"] {
        let r = run(s, Policy::RoundRobin);
        assert!(
            rel(r.command_ratio, 1.0) < 0.05,
            "{s}: RR command ratio {:.3}",
            r.command_ratio
        );
        // Bytes then follow the sizes, as the model predicts.
        assert!(
            rel(r.ratio, r.predicted_ratio) < 0.05,
            "{s}: {} vs {}",
            r.ratio,
            r.predicted_ratio
        );
    }
}

#[test]
fn a_flooding_tenant_is_held_to_its_share_and_the_others_keep_theirs() {
    let r = run("rogue", Policy::Drr);
    for (i, t) in r.report.tenants.iter().enumerate() {
        assert!(
            rel(r.shares[i], r.expected_shares[i]) < 0.05,
            "{}: share {:.4}, expected {:.4}",
            t.name,
            r.shares[i],
            r.expected_shares[i]
        );
    }
    let rogue = r.report.tenant("rogue").unwrap();
    // It offered ten times the device and most of it was refused at its full queue.
    assert!(
        rogue.dropped as f64 > 0.9 * rogue.offered as f64,
        "{rogue:?}"
    );
    // The device stayed busy: the flood cost no capacity.
    assert!(r.report.utilisation > 0.99, "{}", r.report.utilisation);
}

#[test]
fn the_model_is_within_5_percent_of_the_simulation_as_rho_l_varies() {
    let rhos = [0.0, 0.25, 0.5, 0.75, 1.0];
    for policy in [Policy::Drr, Policy::Wrr] {
        let study = rho_study(
            &dissertation_config(policy),
            &device(),
            0.0,
            &rhos,
            SECONDS,
            3,
        )
        .unwrap();
        for p in &study.points {
            assert!(
                p.throughput_error < 0.05,
                "{policy:?} rho_l {}: high {:.0} B/s simulated, {:.0} modelled",
                p.rho_l,
                p.sim_high_bps,
                p.model_high_bps
            );
            assert!(
                p.latency_error < 0.05,
                "{policy:?} rho_l {}: latency {:.1} us simulated, t_max {:.1}",
                p.rho_l,
                p.sim_latency_mean_us,
                p.model_t_max_us
            );
            assert!(
                p.sim_wait_max_us <= p.bound_us,
                "{policy:?} rho_l {}: max wait {:.1} us over the bound {:.1}",
                p.rho_l,
                p.sim_wait_max_us,
                p.bound_us
            );
            // The low job got the rate that was meant to give it rho_l.
            let low = p.low_rate * 4096.0;
            assert!(low == 0.0 && p.sim_low_bps == 0.0 || rel(p.sim_low_bps, low) < 0.05);
        }
        // The curve falls: more low-class work, less for the high class.
        let first = &study.points[0];
        let last = &study.points[rhos.len() - 1];
        assert!(last.sim_high_bps < first.sim_high_bps * 0.9);
        // At rho_l = 0 the high class gets h/(h+m) = 2/3 of the device.
        assert!(rel(first.model_high_bps, study.gamma_bps * 2.0 / 3.0) < 1e-9);
    }
}

#[test]
fn the_model_holds_with_the_validation_weight_order_too() {
    // §6.3.2 lists DRR weights (32k, 64k, 128k): the high class is the lightest, so its
    // throughput falls from 1/3 of the device to 1/7 and its latency grows 2.33x.
    let mut cfg = ArbiterConfig::dissertation_drr();
    cfg.weights = Weights::from_counts(64, 128, 256).unwrap();
    let study = rho_study(&cfg, &device(), 0.0, &[0.0, 0.5, 1.0], SECONDS, 5).unwrap();
    for p in &study.points {
        assert!(p.throughput_error < 0.05, "rho_l {}: {p:?}", p.rho_l);
        assert!(p.latency_error < 0.05, "rho_l {}: {p:?}", p.rho_l);
        assert!(p.sim_wait_max_us <= p.bound_us, "rho_l {}: {p:?}", p.rho_l);
    }
    assert!(rel(study.points[0].model_high_bps, study.gamma_bps / 3.0) < 1e-9);
    assert!(rel(study.points[2].model_high_bps, study.gamma_bps / 7.0) < 1e-9);
    let growth = study.points[2].model_t_max_us / study.points[0].model_t_max_us;
    assert!(rel(growth, 7.0 / 3.0) < 1e-9, "{growth}");
}

#[test]
fn the_model_holds_when_service_times_vary() {
    // Service times drawn from 0.5..1.5 of their nominal value (mean unchanged): Eq. 6.2 and
    // 6.3 speak of averages, so they still hold within 5%; DRR still splits bytes 2:1 in S1.
    let study = rho_study(
        &dissertation_config(Policy::Drr),
        &device(),
        0.5,
        &[0.0, 0.5, 1.0],
        SECONDS,
        9,
    )
    .unwrap();
    for p in &study.points {
        assert!(p.throughput_error < 0.05, "rho_l {}: {p:?}", p.rho_l);
        assert!(p.latency_error < 0.05, "rho_l {}: {p:?}", p.rho_l);
    }
    let mut s1 = Scenario::get("S1").unwrap();
    s1.jitter = 0.5;
    let r = s1
        .run(&dissertation_config(Policy::Drr), SECONDS, 2)
        .unwrap();
    assert!(rel(r.ratio, 2.0) < 0.05, "{}", r.ratio);
}

#[test]
fn the_live_rho_study_refuses_what_it_cannot_run() {
    let drr = dissertation_config(Policy::Drr);
    let dev = live_device();
    let rr = rho_study_live(&ArbiterConfig::round_robin(), &dev, &[0.5], 1.0, 1.0, 1);
    assert!(format!("{}", rr.unwrap_err()).contains("rr"));
    for rho in [-0.1, 1.5, f64::NAN] {
        let e = rho_study_live(&drr, &dev, &[rho], 1.0, 1.0, 1).unwrap_err();
        assert!(format!("{e}").contains("rho_l"), "{e}");
    }
    for (secs, cal) in [(0.0, 1.0), (1.0, 0.0), (f64::INFINITY, 1.0), (1.0, 4000.0)] {
        let e = rho_study_live(&drr, &dev, &[0.5], secs, cal, 1).unwrap_err();
        assert!(format!("{e}").contains("seconds"), "{e}");
    }
    let mut slow = dev;
    slow.units = 0;
    assert!(rho_study_live(&drr, &slow, &[0.5], 1.0, 1.0, 1).is_err());
}

#[test]
fn the_live_rho_study_under_wrr_follows_eq_6_2() {
    // WRR (32, 16, 8) commands of 4 KiB, on the real-time controller: a short run, so a
    // tolerance of 10% (longer runs are within 1-2%).
    let study = rho_study_live(
        &dissertation_config(Policy::Wrr),
        &live_device(),
        &[0.0, 1.0],
        0.6,
        0.5,
        3,
    )
    .unwrap();
    assert_eq!(study.engine, "live");
    let cal = study.calibration.as_ref().unwrap();
    assert!(rel(study.gamma_iops, cal.gamma_iops) < 1e-12);
    for p in &study.points {
        assert!(p.throughput_error < 0.10, "rho_l {}: {p:?}", p.rho_l);
        assert!(p.latency_error < 0.10, "rho_l {}: {p:?}", p.rho_l);
        assert!(p.sim_wait_p50_us <= p.bound_us, "rho_l {}: {p:?}", p.rho_l);
    }
    // With the low class idle the high class gets 32/48 of the device; at rho_l = 1, 32/56
    // if the low job got its whole rate: the model is taken at the utilisation the run
    // delivered, 32 / (48 + 8 rho), which a late pacing thread can make less than 1.
    assert_eq!(study.points[0].rho_l_run, 0.0);
    assert!(rel(study.points[0].model_high_bps, study.gamma_bps * 2.0 / 3.0) < 1e-9);
    let run = study.points[1].rho_l_run;
    assert!(run > 0.5 && run <= 1.0, "{:?}", study.points[1]);
    assert!(
        rel(
            study.points[1].model_high_bps,
            study.gamma_bps * 32.0 / (48.0 + 8.0 * run)
        ) < 1e-9
    );
}
