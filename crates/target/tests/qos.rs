//! The target's tenants and quality of service: the HELLO's tenant fields are checked, STATS
//! answers before and after HELLO, and (with QoS on) a flooding tenant is held to its share.

mod common;

use common::{Answer, Raw, TempDir, hello_frame};
use target::proto::{self, RequestHeader, op, status};
use target::server::{ServerOptions, TargetServer};
use target::{Device, DeviceError, Hello, RemoteDevice, Tenant};

fn serve(dir: &std::path::Path, opts: ServerOptions) -> target::server::ServerHandle {
    TargetServer::bind("127.0.0.1:0", dir, opts)
        .expect("bind")
        .spawn()
        .expect("spawn")
}

fn hello(job: &str, tenant: Tenant) -> Hello {
    Hello {
        job: job.into(),
        len: 1 << 20,
        create: true,
        tenant,
    }
}

fn stats_request() -> RequestHeader {
    RequestHeader {
        op: op::STATS,
        id: 5,
        ..RequestHeader::default()
    }
}

#[test]
fn tenant_fields_out_of_range_are_refused_with_a_typed_message() {
    let d = TempDir::under("/dev/shm");
    let srv = serve(d.path(), ServerOptions::default());
    let addr = srv.local_addr().to_string();
    for (tenant, field) in [
        (Tenant { class: 4, level: 0 }, "tenant_class"),
        (
            Tenant {
                class: 255,
                level: 3,
            },
            "tenant_class",
        ),
        (Tenant { class: 1, level: 8 }, "tenant_level"),
        (
            Tenant {
                class: 3,
                level: 200,
            },
            "tenant_level",
        ),
    ] {
        match RemoteDevice::connect(&addr, &hello("t", tenant)) {
            Err(DeviceError::Invalid { found, .. }) => {
                assert!(found.contains(field), "{tenant:?}: {found}");
                let value = if field == "tenant_class" {
                    tenant.class
                } else {
                    tenant.level
                };
                assert!(
                    found.contains(&format!("found {value}")),
                    "{tenant:?}: {found}"
                );
            }
            other => panic!("{tenant:?} was not refused as INVALID: {other:?}"),
        }
    }
    // Nothing was created by the refused HELLOs.
    assert!(!d.path().join("t.ns").exists());
    // Every valid class and level is accepted.
    for class in 0..=proto::TENANT_CLASS_MAX {
        for level in 0..=proto::TENANT_LEVEL_MAX {
            let dev = RemoteDevice::connect(&addr, &hello("t", Tenant { class, level }))
                .unwrap_or_else(|e| panic!("class {class} level {level}: {e}"));
            dev.write_at(0, b"x").unwrap();
        }
    }
    // The raw answer: INVALID with EINVAL, and the connection closed after it.
    let mut raw = Raw::connect(srv.local_addr());
    let (mut h, mut body) = hello_frame("t", 1 << 20, true);
    body[proto::hello::TENANT_CLASS.offset] = 9;
    h.body_crc = crc32c::crc32c(&body);
    match raw.request(&h, &body) {
        Answer::Reply(r, msg, data) => {
            assert_eq!(r.status, status::INVALID, "{msg}");
            assert_eq!(r.code, libc::EINVAL);
            assert!(
                msg.contains("tenant_class") && msg.contains("found 9"),
                "{msg}"
            );
            assert!(data.is_empty());
        }
        Answer::Closed => panic!("no answer to a bad tenant class"),
    }
    assert!(matches!(raw.request(&stats_request(), &[]), Answer::Closed));
    srv.shutdown().unwrap();
}

#[test]
fn stats_answers_before_and_after_hello_and_says_when_qos_is_off() {
    let d = TempDir::under("/dev/shm");
    let srv = serve(d.path(), ServerOptions::default());
    let addr = srv.local_addr().to_string();
    // A monitor: STATS as the first request, no namespace.
    let v = target::fetch_stats(&addr).expect("stats");
    assert_eq!(v, serde_json::json!({ "qos": "off" }));
    assert!(std::fs::read_dir(d.path()).unwrap().all(|e| {
        let n = e.unwrap().file_name();
        !n.to_string_lossy().ends_with(".ns")
    }));
    // After HELLO, on a working connection.
    let dev = RemoteDevice::connect(&addr, &hello("s", Tenant::default())).unwrap();
    dev.write_at(0, b"abc").unwrap();
    assert_eq!(dev.stats().unwrap()["qos"], "off");
    let mut back = [0u8; 3];
    dev.read_at(0, &mut back).unwrap();
    assert_eq!(&back, b"abc");
    // A STATS with a body or an offset breaks the protocol; the connection goes on.
    let mut raw = Raw::connect(srv.local_addr());
    let bad = RequestHeader {
        offset: 1,
        ..stats_request()
    };
    match raw.request(&bad, &[]) {
        Answer::Reply(r, msg, _) => {
            assert_eq!(r.status, status::PROTOCOL, "{msg}");
            assert!(msg.contains("STATS"), "{msg}");
        }
        Answer::Closed => panic!("closed"),
    }
    match raw.request(&stats_request(), &[]) {
        Answer::Reply(r, msg, data) => {
            assert_eq!(r.status, status::OK, "{msg}");
            assert_eq!(r.op, op::STATS);
            assert_eq!(r.id, 5);
            let v: serde_json::Value = serde_json::from_slice(&data).unwrap();
            assert_eq!(v["qos"], "off");
        }
        Answer::Closed => panic!("closed"),
    }
    srv.shutdown().unwrap();
}

/// The id of the calling thread, from `/proc/thread-self` (`PID/task/TID`).
fn thread_id() -> String {
    let link = std::fs::read_link("/proc/thread-self").expect("read /proc/thread-self");
    link.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn a_tenant_left_unset_is_the_calling_threads_io_priority() {
    // On a thread of its own, so that no other test runs with the priority set here.
    std::thread::spawn(|| {
        assert_eq!(
            Tenant { class: 3, level: 1 }.resolve(),
            Tenant { class: 3, level: 1 },
            "a set class is sent as given"
        );
        let tid = thread_id();
        let o = std::process::Command::new("ionice")
            .args(["-c1", "-n3", "-p", &tid])
            .output()
            .expect("run ionice");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(
            Tenant::from_process().unwrap(),
            Tenant { class: 1, level: 3 }
        );
        assert_eq!(Tenant::default().resolve(), Tenant { class: 1, level: 3 });
        let o = std::process::Command::new("ionice")
            .args(["-c3", "-p", &tid])
            .output()
            .expect("run ionice");
        assert!(o.status.success());
        assert_eq!(Tenant::default().resolve().class, 3);
    })
    .join()
    .unwrap();
}

use haq::arbiter::ArbiterConfig;
use haq::runtime::{ControllerOptions, ServiceModel};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// A device emulated slow enough (2 units of about 4 ms a request, some 500 requests a
/// second) that it, and not two busy CPUs, is what the tenants share. The steady tenants
/// open more connections than they need to keep their queues non-empty even when their
/// threads wait for a CPU (a tenant whose queue runs dry leaves its share to the others:
/// the arbiter is work-conserving).
fn emulated(arbiter: ArbiterConfig) -> ServerOptions {
    ServerOptions {
        qos: Some(ControllerOptions {
            arbiter,
            workers: 2,
            service: Some(ServiceModel {
                units: 2,
                base_us: 4000.0,
                bytes_per_us: 100.0,
            }),
            queue_depth: 12,
        }),
        urgent_jobs: vec!["admin".into()],
        ..ServerOptions::default()
    }
}

/// Tenants: (job, ioprio class, connections). Each connection writes 4 KiB back to back;
/// returns the bytes each tenant had acknowledged in a window after a warm-up, and the
/// target's STATS at the end.
fn run_tenants(
    opts: ServerOptions,
    tenants: &[(&str, u8, usize)],
    window: Duration,
) -> (Vec<u64>, serde_json::Value) {
    let d = TempDir::under("/dev/shm");
    let srv = serve(d.path(), opts);
    let addr = srv.local_addr().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let counters: Vec<Arc<AtomicU64>> = tenants.iter().map(|_| Arc::default()).collect();
    let mut threads = Vec::new();
    for ((job, class, conns), counter) in tenants.iter().zip(&counters) {
        for c in 0..*conns {
            let dev = RemoteDevice::connect(
                &addr,
                &Hello {
                    job: (*job).into(),
                    len: 16 << 20,
                    create: true,
                    tenant: Tenant {
                        class: *class,
                        level: 4,
                    },
                },
            )
            .unwrap_or_else(|e| panic!("{job} connection {c}: {e}"));
            let (stop, counter) = (stop.clone(), counter.clone());
            threads.push(std::thread::spawn(move || {
                let block = vec![c as u8; 4096];
                let mut at = (c as u64 * 4096 * 64) % (16 << 20);
                while !stop.load(Ordering::Relaxed) {
                    dev.write_at(at, &block).expect("write");
                    counter.fetch_add(4096, Ordering::Relaxed);
                    at = (at + 4096) % (16 << 20);
                }
            }));
        }
    }
    let snapshot = || -> Vec<u64> { counters.iter().map(|c| c.load(Ordering::Relaxed)).collect() };
    // Warm up until every queue is full, then measure.
    std::thread::sleep(Duration::from_millis(600));
    let before = snapshot();
    std::thread::sleep(window);
    let after = snapshot();
    let stats = target::fetch_stats(&addr).expect("stats");
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    srv.shutdown().unwrap();
    let bytes = before.iter().zip(&after).map(|(b, a)| a - b).collect();
    (bytes, stats)
}

fn ratio(a: u64, b: u64) -> f64 {
    a as f64 / b.max(1) as f64
}

/// The tenant named `name` in a STATS document.
fn tenant<'a>(stats: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    stats["tenants"]
        .as_array()
        .expect("tenants")
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tenant {name} in {stats}"))
}

#[test]
fn a_flooding_tenant_is_held_to_its_share_and_the_others_keep_theirs() {
    // gold (high, 12 connections), silver (medium, 12) and flood (medium, 48 connections).
    // DRR 128k:64k:32k: high gets 4/6 of the device, medium 2/6, split evenly between the two
    // medium queues whatever their connection counts. Without the arbiter flood's 48
    // connections would take most of it.
    let tenants = [("gold", 1, 12), ("silver", 2, 12), ("flood", 2, 48)];
    let (b, stats) = run_tenants(
        emulated(ArbiterConfig::dissertation_drr()),
        &tenants,
        Duration::from_secs(3),
    );
    let total: u64 = b.iter().sum();
    let report = format!("bytes {b:?}, stats {stats}");
    assert!(total > 0, "{report}");
    let flood_share = b[2] as f64 / total as f64;
    eprintln!(
        "DRR: gold {} silver {} flood {} bytes: flood share {flood_share:.4} (1/6 = 0.1667), \
         flood:silver {:.3}, gold:silver {:.3}",
        b[0],
        b[1],
        b[2],
        ratio(b[2], b[1]),
        ratio(b[0], b[1])
    );
    assert!(
        (flood_share - 1.0 / 6.0).abs() < 0.025,
        "flood's share {flood_share:.3}, expected 1/6: {report}"
    );
    let fs = ratio(b[2], b[1]);
    assert!(
        (0.85..=1.15).contains(&fs),
        "flood:silver {fs:.3}, expected 1: {report}"
    );
    let gs = ratio(b[0], b[1]);
    assert!(
        (3.4..=4.6).contains(&gs),
        "gold:silver {gs:.3}, expected 4: {report}"
    );
    // STATS names every tenant with its class; the flooder waited in its own queue, which
    // never held more than its depth.
    assert_eq!(stats["qos"], "on");
    assert_eq!(tenant(&stats, "gold")["class"], "high");
    assert_eq!(tenant(&stats, "silver")["class"], "medium");
    let flood = tenant(&stats, "flood");
    assert_eq!(flood["class"], "medium");
    assert!(flood["max_queued"].as_u64().unwrap() <= 12, "{flood}");
    assert!(
        flood["wait_p99_us"].as_f64().unwrap()
            > tenant(&stats, "gold")["wait_p99_us"].as_f64().unwrap(),
        "{report}"
    );
}

#[test]
fn round_robin_ignores_classes_and_urgent_jobs_go_first() {
    // The same tenants under plain round robin: every queue gets the same share, gold's class
    // counts for nothing (so the DRR test above measures the weights, not the setup).
    let tenants = [("gold", 1, 12), ("silver", 2, 12), ("flood", 2, 48)];
    let (b, stats) = run_tenants(
        emulated(ArbiterConfig::round_robin()),
        &tenants,
        Duration::from_secs(2),
    );
    let report = format!("bytes {b:?}, stats {stats}");
    eprintln!("RR: gold {} silver {} flood {} bytes", b[0], b[1], b[2]);
    for (i, name) in ["gold", "flood"].iter().enumerate() {
        let r = ratio(b[i * 2], b[1]);
        assert!(
            (0.85..=1.15).contains(&r),
            "{name}:silver {r:.3}, expected 1: {report}"
        );
    }
    // admin is granted urgent (its HELLO says idle): strict priority over everyone, and with
    // more connections than the device has units it always has a request waiting, so the
    // 48-connection flooder gets only what admin leaves.
    let tenants = [("admin", 3, 12), ("flood", 2, 48)];
    let (b, stats) = run_tenants(
        emulated(ArbiterConfig::dissertation_drr()),
        &tenants,
        Duration::from_secs(2),
    );
    assert_eq!(tenant(&stats, "admin")["class"], "urgent", "{stats}");
    assert!(
        b[0] > 3 * b[1],
        "admin {} bytes, flood {}: {stats}",
        b[0],
        b[1]
    );
}

#[test]
fn with_qos_on_reads_return_what_was_written_and_every_op_still_works() {
    let d = TempDir::under("/dev/shm");
    let opts = ServerOptions {
        qos: Some(ControllerOptions {
            arbiter: ArbiterConfig::dissertation_wrr(),
            workers: 2,
            service: None,
            queue_depth: 4,
        }),
        ..ServerOptions::default()
    };
    let srv = serve(d.path(), opts);
    let addr = srv.local_addr().to_string();
    let len = 24u64 << 20;
    let a = RemoteDevice::connect(
        &addr,
        &Hello {
            job: "data".into(),
            len,
            create: true,
            tenant: Tenant { class: 1, level: 0 },
        },
    )
    .unwrap();
    let b = RemoteDevice::connect(
        &addr,
        &Hello {
            job: "data".into(),
            len: 0,
            create: false,
            tenant: Tenant { class: 3, level: 7 },
        },
    )
    .unwrap();
    let mut rng = common::Rng::new(7);
    let mut model = vec![0u8; len as usize];
    for i in 0..40 {
        // Sizes from 1 byte to more than one request's payload (split by the client).
        let n = if i % 13 == 0 {
            (9 << 20) + rng.below(4096) as usize
        } else {
            1 + rng.below(200_000) as usize
        };
        let at = rng.below(len - n as u64) as usize;
        let data = rng.bytes(n);
        let (w, r) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        w.write_at(at as u64, &data).unwrap();
        model[at..at + n].copy_from_slice(&data);
        let mut back = vec![0u8; n];
        r.read_at(at as u64, &mut back).unwrap();
        assert!(
            back == data,
            "request {i}: {n} bytes at {at} read back differently"
        );
    }
    a.flush().unwrap();
    a.claim(0, 4096).unwrap();
    assert!(matches!(b.claim(0, 1), Err(DeviceError::Busy { .. })));
    assert_eq!(b.stat().unwrap(), (len, a.block_size()));
    assert!(matches!(
        a.read_at(len - 1, &mut [0u8; 2]),
        Err(DeviceError::Range { .. })
    ));
    let mut all = vec![0u8; len as usize];
    b.read_at(0, &mut all).unwrap();
    assert!(all == model, "the namespace differs from what was written");
    // Both connections' queues are in the statistics, by class.
    let stats = a.stats().unwrap();
    let classes: Vec<_> = stats["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["class"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(classes.contains(&("data".into(), "high".into())), "{stats}");
    assert!(classes.contains(&("data".into(), "low".into())), "{stats}");
    // And the requests went through them.
    for t in stats["tenants"].as_array().unwrap() {
        assert!(t["commands"].as_u64().unwrap() >= 20, "{stats}");
    }
    drop((a, b));
    let summary = srv.shutdown().unwrap();
    assert_eq!(summary.panics, 0);
}
