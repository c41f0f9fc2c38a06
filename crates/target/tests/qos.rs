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
