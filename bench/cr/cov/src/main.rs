//! Load imbalance (coefficient of variation of the bytes per storage device) of NVMe-CR's
//! balancer against consistent-hash placement, as in the dissertation's Figure 5.6b: a job of P
//! processes on compute nodes of 28 cores writes one equal-size checkpoint file per process and
//! step to 8 storage devices.
//!
//! Usage: cr-balance-cov [DEVICES] [STEPS]; prints a table and CSV lines ("cov,...").

use microfs::balance::{Topology, bytes_per_device, cov, hash_placement, plan};

fn main() {
    let mut args = std::env::args().skip(1);
    let devices: usize = args.next().map_or(8, |s| s.parse().expect("DEVICES: a number"));
    let steps: usize = args.next().map_or(10, |s| s.parse().expect("STEPS: a number"));
    let file = 512u64 << 20;
    // Compute racks c0..c3 (4 nodes of 28 cores each), one storage rack of `devices` nodes.
    let mut topo = String::new();
    for n in 0..16 {
        topo += &format!("node cn{n} c{}\n", n / 4);
    }
    for d in 0..devices {
        topo += &format!("node sn{d} s\ndevice sn{d} tcp://sn{d}:7420/job 1T\n");
    }
    for r in 0..4 {
        topo += &format!("hops c{r} s 2\n");
    }
    let t = Topology::parse(&topo, "generated").expect("topology");
    let specs: Vec<String> = t.devices().iter().map(|d| d.spec.clone()).collect();
    println!("processes | balancer CoV | consistent hash (64 vnodes) CoV | consistent hash (1 vnode) CoV");
    println!("---: | ---: | ---: | ---:");
    for procs in [28usize, 56, 112, 224, 448] {
        let hosts: Vec<String> = (0..procs).map(|r| format!("cn{}", r / 28)).collect();
        let p = plan(&t, &hosts).expect("plan");
        // The balancer: every step's file of a rank goes to the rank's device.
        let mut bal = vec![0u64; devices];
        for a in &p.ranks {
            bal[a.device] += file * steps as u64;
        }
        let keys: Vec<String> = (0..steps)
            .flat_map(|s| (0..procs).map(move |r| format!("/ckpt/comd.{s}/rank.{r}")))
            .collect();
        let h64 = bytes_per_device(devices, &hash_placement(&specs, 64, &keys), file);
        let h1 = bytes_per_device(devices, &hash_placement(&specs, 1, &keys), file);
        println!(
            "{procs} | {:.4} | {:.4} | {:.4}",
            cov(&bal),
            cov(&h64),
            cov(&h1)
        );
        eprintln!(
            "cov,{procs},{devices},{steps},{:.6},{:.6},{:.6}",
            cov(&bal),
            cov(&h64),
            cov(&h1)
        );
    }
}
