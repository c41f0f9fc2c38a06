//! Property tests of the arbiter (`haq::arbiter`): shares in the weight ratio, deficits
//! bounded, no starvation, bursts, urgent priority, FIFO order per queue, depth, removal.

use std::collections::{HashMap, VecDeque};

use haq::Class;
use haq::arbiter::{Arbiter, ArbiterConfig, BURST_UNLIMITED, Full, Policy, QueueId, Weights};
use proptest::prelude::*;

fn weighted_class() -> impl Strategy<Value = Class> {
    prop_oneof![Just(Class::High), Just(Class::Medium), Just(Class::Low)]
}

fn config(policy: Policy, w: (u32, u32, u32), burst: u8, unit: u32) -> ArbiterConfig {
    ArbiterConfig {
        policy,
        weights: Weights::from_counts(w.0, w.1, w.2).unwrap(),
        burst,
        drr_unit: unit,
    }
}

/// Queues that never run dry: after each grant the same queue gets another command of its
/// size list's next size. Returns, per grant, (queue index, class, bytes).
fn backlogged(
    a: &mut Arbiter<usize>,
    queues: &[(Class, Vec<u32>)],
    grants: usize,
) -> (Vec<QueueId>, Vec<(usize, Class, u32)>) {
    let ids: Vec<QueueId> = queues.iter().map(|(c, _)| a.add_queue(*c, 4)).collect();
    let mut next_size = vec![0usize; queues.len()];
    let feed = |a: &mut Arbiter<usize>, i: usize, next_size: &mut Vec<usize>| {
        let sizes = &queues[i].1;
        let s = sizes[next_size[i] % sizes.len()];
        next_size[i] += 1;
        a.submit(ids[i], s, i).map_err(|_| ()).unwrap();
    };
    for i in 0..queues.len() {
        for _ in 0..4 {
            feed(a, i, &mut next_size);
        }
    }
    let mut out = Vec::with_capacity(grants);
    for _ in 0..grants {
        let g = a.next().expect("backlogged queues always have a grant");
        assert_eq!(a.class_of(g.queue), Some(g.class));
        out.push((g.item, g.class, g.bytes));
        feed(a, g.item, &mut next_size);
    }
    (ids, out)
}

fn queues_strategy(
    sizes: impl Strategy<Value = u32> + Clone,
) -> impl Strategy<Value = Vec<(Class, Vec<u32>)>> {
    prop::collection::vec((weighted_class(), prop::collection::vec(sizes, 1..5)), 1..7)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// WRR, every class backlogged: each round serves exactly each class's weight in
    /// commands, whatever the sizes, so after k rounds' worth of grants the counts are k times
    /// the weights; within a class the queues' counts differ by at most one visit.
    #[test]
    fn wrr_serves_commands_in_weight_ratio(
        w in (1u32..=64, 1u32..=64, 1u32..=64),
        burst in 0u8..=7,
        sizes in prop::collection::vec(1u32..=65536, 1..5),
        per_class in (1usize..4, 1usize..4, 1usize..4),
        k in 1usize..6,
    ) {
        let mut qs = Vec::new();
        for (c, n) in [(Class::High, per_class.0), (Class::Medium, per_class.1), (Class::Low, per_class.2)] {
            for i in 0..n {
                let mut s = sizes.clone();
                s.rotate_left(i % sizes.len());
                qs.push((c, s));
            }
        }
        let mut a = Arbiter::new(config(Policy::Wrr, w, burst, 512)).unwrap();
        let round = (w.0 + w.1 + w.2) as usize;
        let (_, grants) = backlogged(&mut a, &qs, k * round);
        let count = |c: Class| grants.iter().filter(|g| g.1 == c).count();
        prop_assert_eq!(count(Class::High), k * w.0 as usize);
        prop_assert_eq!(count(Class::Medium), k * w.1 as usize);
        prop_assert_eq!(count(Class::Low), k * w.2 as usize);
        let cfg = a.config();
        for c in Class::WEIGHTED {
            let allowance = cfg.burst_limit().unwrap_or(u32::MAX).min(cfg.weights.count(c)) as usize;
            let per_q: Vec<usize> = (0..qs.len())
                .filter(|&i| qs[i].0 == c)
                .map(|i| grants.iter().filter(|g| g.0 == i).count())
                .collect();
            if let (Some(lo), Some(hi)) = (per_q.iter().min(), per_q.iter().max()) {
                prop_assert!(hi - lo <= allowance, "class {c}: per-queue {per_q:?}, allowance {allowance}");
            }
        }
    }

    /// DRR, every class backlogged, mixed sizes: bytes per class are in the ratio of the
    /// quanta. Class c has had n_c or n_c + 1 quanta after n rounds and its deficit lies in
    /// (-S_c, Q_c], so bytes_c / Q_c is within [n_c - 1, n_c + S_c / Q_c): two classes'
    /// normalised bytes differ by less than 2 + S_a/Q_a + S_b/Q_b. Within a class, queues'
    /// bytes differ by less than 2 in-class quanta plus the largest command.
    #[test]
    fn drr_serves_bytes_in_weight_ratio(
        w in (1u32..=256, 1u32..=256, 1u32..=256),
        unit in prop_oneof![Just(512u32), Just(64), Just(4096)],
        qs in queues_strategy(512u32..=65536),
        grants_n in 200usize..2000,
    ) {
        let mut a = Arbiter::new(config(Policy::Drr, w, BURST_UNLIMITED, unit)).unwrap();
        let (ids, grants) = backlogged(&mut a, &qs, grants_n);
        let cfg = *a.config();
        let present: Vec<Class> = Class::WEIGHTED.into_iter().filter(|c| qs.iter().any(|q| q.0 == *c)).collect();
        let max_size = |c: Class| qs.iter().filter(|q| q.0 == c).flat_map(|q| q.1.iter()).copied().max().unwrap_or(0) as f64;
        let bytes = |c: Class| grants.iter().filter(|g| g.1 == c).map(|g| u64::from(g.2)).sum::<u64>() as f64;
        for &x in &present {
            for &y in &present {
                let (qx, qy) = (cfg.weight_cost(x) as f64, cfg.weight_cost(y) as f64);
                let d = (bytes(x) / qx - bytes(y) / qy).abs();
                let bound = 2.0 + max_size(x) / qx + max_size(y) / qy;
                prop_assert!(d < bound, "{x} vs {y}: normalised bytes differ by {d}, bound {bound}");
            }
        }
        for &c in &present {
            let qw = (cfg.weight_cost(c) as f64).max(max_size(c));
            let per_q: Vec<f64> = (0..qs.len())
                .filter(|&i| qs[i].0 == c)
                .map(|i| grants.iter().filter(|g| g.0 == i).map(|g| f64::from(g.2)).sum())
                .collect();
            let lo = per_q.iter().cloned().fold(f64::INFINITY, f64::min);
            let hi = per_q.iter().cloned().fold(0.0, f64::max);
            prop_assert!(hi - lo < 2.0 * qw + max_size(c), "class {c}: per-queue bytes {per_q:?}, in-class quantum {qw}");
        }
        // Deficits within their bounds at the end.
        for (i, id) in ids.iter().enumerate() {
            let c = qs[i].0;
            let qd = a.queue_deficit(*id).unwrap();
            prop_assert!(qd > -(max_size(c) as i64));
        }
    }

    /// Plain round robin: n backlogged queues of any classes each get exactly k of k*n grants.
    #[test]
    fn rr_splits_equally(
        classes in prop::collection::vec(weighted_class(), 1..8),
        k in 1usize..20,
    ) {
        let qs: Vec<(Class, Vec<u32>)> = classes.iter().enumerate().map(|(i, &c)| (c, vec![512 << (i % 5)])).collect();
        let mut a = Arbiter::new(ArbiterConfig::round_robin()).unwrap();
        let (_, grants) = backlogged(&mut a, &qs, k * qs.len());
        for i in 0..qs.len() {
            prop_assert_eq!(grants.iter().filter(|g| g.0 == i).count(), k);
        }
    }

    /// With two or more backlogged queues in a class, one queue never gets more than
    /// 2^burst grants of that class in a row (WRR: min(2^burst, weight)).
    #[test]
    fn burst_limits_each_visit(
        policy in prop_oneof![Just(Policy::Wrr), Just(Policy::Drr)],
        w in (1u32..=64, 1u32..=64, 1u32..=64),
        burst in 0u8..7,
        qs in queues_strategy(512u32..=16384),
    ) {
        let mut a = Arbiter::new(config(policy, w, burst, 512)).unwrap();
        let (_, grants) = backlogged(&mut a, &qs, 500);
        let limit = 1usize << burst;
        for c in Class::WEIGHTED {
            if qs.iter().filter(|q| q.0 == c).count() < 2 {
                continue;
            }
            let mut run = 0;
            let mut last = usize::MAX;
            for g in grants.iter().filter(|g| g.1 == c) {
                run = if g.0 == last { run + 1 } else { 1 };
                last = g.0;
                prop_assert!(run <= limit, "class {c}: {run} grants in a row from queue {last}, burst {limit}");
            }
        }
    }
}

/// A queue as the model sees it: id, class, depth, (serial, bytes) of its commands.
type ModelQueue = (QueueId, Class, u32, VecDeque<(u64, u32)>);

#[derive(Debug, Clone)]
enum Op {
    Add(Class, u32),
    Submit(usize, u32),
    Next,
    Remove(usize),
}

fn op(sizes: impl Strategy<Value = u32> + Clone) -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (prop_oneof![4 => weighted_class(), 1 => Just(Class::Urgent)], 1u32..6).prop_map(|(c, d)| Op::Add(c, d)),
        8 => (any::<usize>(), sizes).prop_map(|(q, s)| Op::Submit(q, s)),
        6 => Just(Op::Next),
        1 => any::<usize>().prop_map(Op::Remove),
    ]
}

/// Runs random operations against a model of the queues (FIFO contents per queue) and checks
/// after each step: grants come from the front of their queue; an urgent command pending
/// means an urgent grant; a full queue refuses and a non-full one accepts; removal returns the
/// model's contents; `next` is `None` exactly when nothing is queued; deficits stay within
/// (-largest command, 2 quanta]; a weighted class with a pending command waits for at most the
/// module's bound of grants of other classes.
fn run_ops(cfg: ArbiterConfig, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut a: Arbiter<u64> = Arbiter::new(cfg).unwrap();
    let mut model: Vec<ModelQueue> = Vec::new();
    let mut serial = 0u64;
    let mut max_cost: HashMap<Class, u64> = HashMap::new();
    let mut min_cost: HashMap<Class, u64> = HashMap::new();
    // Grants of other weighted classes since class c last got one while pending.
    let mut waited = [0u64; 4];
    for o in ops {
        match *o {
            Op::Add(c, d) => {
                let id = a.add_queue(c, d);
                prop_assert!(model.iter().all(|m| m.0 != id), "id {id:?} reused");
                model.push((id, c, d, VecDeque::new()));
            }
            Op::Submit(i, s) if !model.is_empty() => {
                let i = i % model.len();
                serial += 1;
                let (id, c, d, ref mut items) = model[i];
                let r = a.submit(id, s, serial);
                if items.len() as u32 >= d {
                    prop_assert!(matches!(r, Err(Full(x)) if x == serial));
                } else {
                    prop_assert!(r.is_ok());
                    items.push_back((serial, s));
                    let cost = if cfg.policy == Policy::Drr {
                        u64::from(s.max(1))
                    } else {
                        1
                    };
                    let e = max_cost.entry(c).or_insert(0);
                    *e = (*e).max(cost);
                    let e = min_cost.entry(c).or_insert(u64::MAX);
                    *e = (*e).min(cost);
                }
            }
            Op::Submit(..) => {}
            Op::Remove(i) if !model.is_empty() => {
                let i = i % model.len();
                let (id, _, _, items) = model.remove(i);
                let got = a.remove_queue(id);
                prop_assert_eq!(got, items.iter().map(|x| x.0).collect::<Vec<_>>());
                prop_assert_eq!(a.class_of(id), None);
            }
            Op::Remove(_) => {}
            Op::Next => {
                let pending = |c: Class, model: &[ModelQueue]| {
                    model.iter().any(|m| m.1 == c && !m.3.is_empty())
                };
                let urgent_pending = pending(Class::Urgent, &model);
                let before: Vec<bool> = Class::ALL.iter().map(|&c| pending(c, &model)).collect();
                let g = a.next();
                let total: usize = model.iter().map(|m| m.3.len()).sum();
                let Some(g) = g else {
                    prop_assert_eq!(total, 0);
                    continue;
                };
                if urgent_pending {
                    prop_assert_eq!(g.class, Class::Urgent);
                }
                let m = model.iter_mut().find(|m| m.0 == g.queue);
                prop_assert!(m.is_some(), "grant from unknown queue");
                let m = m.unwrap();
                prop_assert_eq!(m.1, g.class);
                let front = m.3.pop_front();
                prop_assert_eq!(
                    front,
                    Some((g.item, g.bytes)),
                    "not the queue's oldest command"
                );
                if g.class != Class::Urgent && cfg.policy != Policy::RoundRobin {
                    for c in Class::WEIGHTED {
                        if c == g.class || !before[c.index()] {
                            waited[c.index()] = 0;
                        } else {
                            waited[c.index()] += 1;
                            let bound = starvation_bound(&cfg, c, &max_cost, &min_cost);
                            prop_assert!(
                                waited[c.index()] <= bound,
                                "class {c} waited {} grants of others, bound {bound}",
                                waited[c.index()]
                            );
                        }
                    }
                }
            }
        }
        // Invariants after every step.
        prop_assert_eq!(
            a.total_queued(),
            model.iter().map(|m| m.3.len()).sum::<usize>()
        );
        for m in &model {
            prop_assert_eq!(a.queued(m.0), m.3.len());
        }
        if cfg.policy == Policy::Drr {
            for c in Class::WEIGHTED {
                let mc = max_cost.get(&c).copied().unwrap_or(1) as i64;
                let q = cfg.weight_cost(c) as i64;
                let d = a.class_deficit(c);
                prop_assert!(
                    d > -mc && d <= q,
                    "class {c} deficit {d}, largest command {mc}, quantum {q}"
                );
                for m in model.iter().filter(|m| m.1 == c) {
                    let qd = a.queue_deficit(m.0).unwrap();
                    let qw = q.max(mc);
                    prop_assert!(
                        qd > -mc && qd <= 2 * qw,
                        "queue deficit {qd}, largest {mc}, in-class quantum {qw}"
                    );
                }
            }
        }
    }
    Ok(())
}

/// The module's bound on grants to other weighted classes while `c` waits (urgent excluded).
fn starvation_bound(
    cfg: &ArbiterConfig,
    c: Class,
    max_cost: &HashMap<Class, u64>,
    min_cost: &HashMap<Class, u64>,
) -> u64 {
    let others = Class::WEIGHTED.into_iter().filter(|&j| j != c);
    match cfg.policy {
        Policy::Wrr => others.map(|j| u64::from(cfg.weights.count(j))).sum(),
        _ => {
            let qc = cfg.weight_cost(c);
            let sc = max_cost.get(&c).copied().unwrap_or(1);
            let per_round: u64 = others
                .map(|j| {
                    let sj = min_cost.get(&j).copied().unwrap_or(1).max(1);
                    cfg.weight_cost(j).div_ceil(sj)
                })
                .sum();
            (sc.div_ceil(qc) + 1) * per_round
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_operations_keep_every_invariant_drr(
        w in (1u32..=256, 1u32..=256, 1u32..=256),
        unit in prop_oneof![Just(512u32), Just(1), Just(100)],
        burst in 0u8..=7,
        ops in prop::collection::vec(op(prop_oneof![Just(0u32), 1u32..=4096, 4096u32..=262_144]), 1..400),
    ) {
        run_ops(config(Policy::Drr, w, burst, unit), &ops)?;
    }

    #[test]
    fn random_operations_keep_every_invariant_wrr(
        w in (1u32..=256, 1u32..=256, 1u32..=256),
        burst in 0u8..=7,
        ops in prop::collection::vec(op(1u32..=131_072), 1..400),
    ) {
        run_ops(config(Policy::Wrr, w, burst, 512), &ops)?;
    }

    #[test]
    fn random_operations_keep_every_invariant_rr(
        ops in prop::collection::vec(op(1u32..=131_072), 1..400),
    ) {
        run_ops(ArbiterConfig::round_robin(), &ops)?;
    }
}

/// A deterministic starvation check with a known answer: DRR quanta 512 B for all three
/// classes, low's commands 128 KiB, high and medium 512 B. Low is served once every 256
/// rounds (its overdraft of 128 KiB - 512 B is 255 quanta: 255 rounds bring the deficit to
/// zero, the 256th makes it positive); between its grants exactly 2 grants per round go to the
/// others, 2 * 256 = 512 of them, which is within the bound (ceil(131072/512) + 1) * (1 + 1).
#[test]
fn drr_low_class_with_huge_commands_is_served_at_the_predicted_rate() {
    let mut a = Arbiter::new(config(Policy::Drr, (1, 1, 1), BURST_UNLIMITED, 512)).unwrap();
    let ids: Vec<QueueId> = Class::WEIGHTED
        .iter()
        .map(|&c| a.add_queue(c, 1_000_000))
        .collect();
    for _ in 0..3000 {
        a.submit(ids[0], 512, 'h').unwrap();
        a.submit(ids[1], 512, 'm').unwrap();
    }
    for _ in 0..5 {
        a.submit(ids[2], 131_072, 'l').unwrap();
    }
    let seq: Vec<char> = (0..2000).map(|_| a.next().unwrap().item).collect();
    let lows: Vec<usize> = seq
        .iter()
        .enumerate()
        .filter(|&(_, &c)| c == 'l')
        .map(|(i, _)| i)
        .collect();
    let gaps: Vec<usize> = lows.windows(2).map(|w| w[1] - w[0] - 1).collect();
    assert_eq!(lows[0], 2);
    assert!(gaps.iter().all(|&g| g == 512), "{gaps:?}");
    assert!(512 <= (131_072u64.div_ceil(512) + 1) * 2);
}
