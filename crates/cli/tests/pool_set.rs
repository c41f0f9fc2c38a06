//! `kavach pool create --files`, `pool info` and `pool rebuild` on pool sets: a member file
//! deleted, the set reported degraded (which member), rebuilt into a new file with the logical
//! pool byte-identical before the loss and after the rebuild; two members lost refused with
//! exit 2 and nothing changed; bad rebuild arguments refused.

mod common;

use common::{Scratch, assert_refused, in_process, kavach, stderr, stdout};
use pmem::set::{SetOpenOptions, StripedSet};
use pmem::{Medium, OpenOptions, Pool};
use std::path::Path;

fn json(o: &std::process::Output) -> serde_json::Value {
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(o));
    serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

fn create(s: &Scratch) -> String {
    let p = s.path("s.pool");
    let o = kavach(&[
        "pool", "create", &p, "--size", "4MiB", "--files", "3", "--chunk", "16KiB", "--json",
    ]);
    let v = json(&o);
    assert_eq!(v["set"]["state"], "healthy");
    assert_eq!(v["set"]["geometry"]["members"], 3);
    assert_eq!(v["set"]["geometry"]["chunk"], 16384);
    p
}

/// Fill a region of the set's pool with a pattern (in this process).
fn fill(path: &str) {
    in_process(|| {
        let set = StripedSet::open_files(Path::new(path), SetOpenOptions::default()).unwrap();
        let mut pool = Pool::open_medium(set, &OpenOptions::default()).unwrap();
        let r = pool
            .create_region("data", pmem::kinds::RAW, 1 << 20, pmem::Alignment::Page)
            .unwrap();
        let data: Vec<u8> = (0..r.length as usize)
            .map(|i| (i * 7 + i / 4096) as u8)
            .collect();
        pool.medium().write(r.offset as usize, &data);
        pool.medium()
            .persist(r.offset as usize, data.len())
            .unwrap();
        pool.close().unwrap().close().unwrap();
    })
}

/// FNV-1a over the whole logical pool, read through the set (degraded or not).
fn digest(path: &str) -> u64 {
    in_process(|| {
        let set = StripedSet::open_files(
            Path::new(path),
            SetOpenOptions {
                read_only: true,
                force: false,
            },
        )
        .unwrap();
        let mut buf = vec![0u8; set.len()];
        set.read(0, &mut buf);
        buf.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
        })
    })
}

#[test]
fn delete_a_member_info_says_degraded_rebuild_restores_the_same_pool() {
    let s = Scratch::new("rebuild");
    let p = create(&s);
    fill(&p);
    let before = digest(&p);

    std::fs::remove_file(s.path("s.pool.1")).unwrap();
    let v = json(&kavach(&["pool", "info", &p, "--json"]));
    assert_eq!(v["set"]["state"], "degraded");
    assert_eq!(v["set"]["lost"]["index"], 1);
    assert_eq!(v["regions"][0]["name"], "data");
    let text = stdout(&kavach(&["pool", "info", &p]));
    assert!(text.contains("degraded: member 1 lost"), "{text}");
    assert_eq!(digest(&p), before, "degraded reads differ");

    let new = s.path("s.pool.1-new");
    let o = kavach(&[
        "pool",
        "rebuild",
        &p,
        "--replace",
        &s.path("s.pool.1"),
        &new,
        "--json",
    ]);
    let v = json(&o);
    assert_eq!(v["rebuilt_member"], 1);
    assert_eq!(v["set"]["state"], "healthy");
    assert!(
        stderr(&o).contains("rows (100%)"),
        "progress: {}",
        stderr(&o)
    );
    let desc = std::fs::read_to_string(&p).unwrap();
    assert!(desc.contains("member s.pool.1-new\n"), "{desc}");
    let v = json(&kavach(&["pool", "info", &p, "--json"]));
    assert_eq!(v["set"]["state"], "healthy");
    assert_eq!(digest(&p), before, "the rebuilt pool differs");

    // Now any other member can go.
    std::fs::remove_file(s.path("s.pool.0")).unwrap();
    assert_eq!(digest(&p), before, "without member 0 after the rebuild");
}

#[test]
fn two_members_lost_exit_2_and_nothing_changes() {
    let s = Scratch::new("two");
    let p = create(&s);
    fill(&p);
    std::fs::remove_file(s.path("s.pool.0")).unwrap();
    std::fs::remove_file(s.path("s.pool.2")).unwrap();
    let member1 = std::fs::read(s.path("s.pool.1")).unwrap();
    let desc = std::fs::read(&p).unwrap();
    let o = kavach(&["pool", "info", &p]);
    assert_refused(&o, 2, "2 of the set's members are lost");
    let new = s.path("new");
    let o = kavach(&[
        "pool",
        "rebuild",
        &p,
        "--replace",
        &s.path("s.pool.0"),
        &new,
    ]);
    assert_refused(&o, 2, "members are lost");
    assert!(!Path::new(&new).exists(), "rebuild left {new} behind");
    assert_eq!(std::fs::read(s.path("s.pool.1")).unwrap(), member1);
    assert_eq!(std::fs::read(&p).unwrap(), desc);
}

#[test]
fn rebuild_refuses_bad_arguments_and_changes_nothing() {
    let s = Scratch::new("bad");
    let p = create(&s);
    let existing = s.path("exists");
    std::fs::write(&existing, b"keep me").unwrap();
    let snapshot = || {
        ["s.pool", "s.pool.0", "s.pool.1", "s.pool.2"].map(|n| std::fs::read(s.path(n)).unwrap())
    };
    let before = snapshot();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![p.clone(), "--replace".into(), s.path("nope"), s.path("n1")],
            "not a member",
        ),
        (
            vec![
                p.clone(),
                "--replace".into(),
                s.path("s.pool.1"),
                existing.clone(),
            ],
            "already exists",
        ),
        (
            // In place on a member that is not lost.
            vec![
                p.clone(),
                "--replace".into(),
                s.path("s.pool.1"),
                s.path("s.pool.1"),
            ],
            "is not lost",
        ),
        (
            vec![
                s.path("s.pool.0"),
                "--replace".into(),
                s.path("s.pool.1"),
                s.path("n2"),
            ],
            "not a pool set description",
        ),
    ];
    for (args, needle) in cases {
        let mut a = vec!["pool", "rebuild"];
        a.extend(args.iter().map(String::as_str));
        let o = kavach(&a);
        assert_refused(&o, 2, needle);
        assert!(snapshot() == before, "{a:?} changed the set");
    }
    assert_eq!(std::fs::read(&existing).unwrap(), b"keep me");
    assert!(!Path::new(&s.path("n1")).exists() && !Path::new(&s.path("n2")).exists());
    // A member of another set's make, in a lost member's place, is refused as foreign.
    let other = Scratch::new("other");
    create(&other);
    std::fs::copy(other.path("s.pool.1"), s.path("s.pool.1")).unwrap();
    let v = json(&kavach(&["pool", "info", &p, "--json"]));
    assert_eq!(v["set"]["state"], "degraded");
    assert_eq!(v["set"]["lost"]["index"], 1);
    let reason = v["set"]["lost"]["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("names set"), "{reason}");
    // Rebuilt in place (the foreign file is overwritten with member 1's chunks).
    let o = kavach(&[
        "pool",
        "rebuild",
        &p,
        "--replace",
        &s.path("s.pool.1"),
        &s.path("s.pool.1"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&kavach(&["pool", "info", &p, "--json"]));
    assert_eq!(v["set"]["state"], "healthy");
}

#[test]
fn create_refuses_bad_set_arguments_and_leaves_nothing() {
    let s = Scratch::new("create");
    let p = s.path("s.pool");
    for extra in [
        vec!["--files", "2"],
        vec!["--files", "65"],
        vec!["--files", "3", "--chunk", "6KiB"],
        vec!["--files", "3", "--chunk", "2GiB"],
        vec!["--files", "3", "--domain", "msync"],
        vec!["--chunk", "64KiB"],
    ] {
        let mut a = vec!["pool", "create", p.as_str(), "--size", "1MiB"];
        a.extend(extra.iter().copied());
        let o = kavach(&a);
        assert_eq!(o.status.code(), Some(2), "{a:?}: {}", stderr(&o));
        let left: Vec<_> = std::fs::read_dir(&s.0).unwrap().collect();
        assert!(left.is_empty(), "{a:?} left {left:?}");
    }
    // A member path that exists already: refused before anything is made.
    std::fs::write(s.path("s.pool.2"), b"x").unwrap();
    let o = kavach(&["pool", "create", &p, "--size", "1MiB", "--files", "3"]);
    assert_refused(&o, 2, "s.pool.2");
    assert!(!Path::new(&p).exists() && !Path::new(&s.path("s.pool.0")).exists());
}

#[test]
fn an_interrupted_rebuild_leaves_the_set_degraded_and_restarts_in_place() {
    let s = Scratch::new("restart");
    let p = create(&s);
    fill(&p);
    let before = digest(&p);
    std::fs::remove_file(s.path("s.pool.2")).unwrap();
    let new = s.path("s.pool.2-new");
    // What `pool rebuild` leaves when it is killed half way: the description names NEW, NEW
    // holds some rebuilt rows but no member header. The rebuild stores nothing through the
    // set, so the set was never marked open: it is clean, and degraded as before.
    in_process(|| {
        let set = StripedSet::open_files(Path::new(&p), SetOpenOptions::default()).unwrap();
        let need = set.geometry().member_len(set.rows()) as u64;
        let target = pmem::Mapping::create(Path::new(&new), need).unwrap();
        let names: Vec<_> = ["s.pool.0", "s.pool.1", "s.pool.2-new"]
            .iter()
            .map(std::path::PathBuf::from)
            .collect();
        pmem::set::write_description(Path::new(&p), &names, false).unwrap();
        let cut = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            set.rebuild(target, |done, _| {
                if done == 3 {
                    panic!("cut short at row 3");
                }
            })
        }));
        assert!(cut.is_err(), "the rebuild was not cut short");
        // Dropped without a clean close (a rebuild was still running).
    });
    let v = json(&kavach(&["pool", "info", &p, "--json"]));
    assert_eq!(v["set"]["state"], "degraded");
    assert_eq!(v["set"]["lost"]["index"], 2);
    assert_eq!(v["set"]["unclean_at_open"], false);
    assert_eq!(digest(&p), before);
    let o = kavach(&["pool", "rebuild", &p, "--replace", &new, &new]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&kavach(&["pool", "info", &p, "--json"]));
    assert_eq!(v["set"]["state"], "healthy");
    assert_eq!(digest(&p), before, "the restarted rebuild differs");
    std::fs::remove_file(s.path("s.pool.1")).unwrap();
    assert_eq!(digest(&p), before, "without member 1 after the restart");
}

#[test]
fn check_finds_a_lost_member_and_damage_inside_a_member() {
    let s = Scratch::new("check");
    let p = create(&s);
    fill(&p);
    let o = kavach(&["pool", "check", &p]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("parity matches"), "{}", stdout(&o));
    // One byte changed inside member 1's first chunk, behind the set's back.
    let m1 = s.path("s.pool.1");
    let mut bytes = std::fs::read(&m1).unwrap();
    bytes[4096 + 100] ^= 0x01;
    std::fs::write(&m1, &bytes).unwrap();
    let o = kavach(&["pool", "check", &p, "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["healthy"], false);
    assert_eq!(v["parity_mismatch_rows"], serde_json::json!([0]));
    // A lost member is damage too.
    std::fs::remove_file(s.path("s.pool.2")).unwrap();
    let o = kavach(&["pool", "check", &p]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stdout(&o).contains("member 2"), "{}", stdout(&o));
    // Two lost: the check cannot run.
    std::fs::remove_file(s.path("s.pool.0")).unwrap();
    let o = kavach(&["pool", "check", &p]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn region_commands_work_on_a_set_healthy_and_degraded() {
    let s = Scratch::new("regions");
    let p = create(&s);
    let o = kavach(&["region", "create", &p, "first", "--size", "64KiB", "--json"]);
    let v = json(&o);
    assert_eq!(v["name"], "first");
    std::fs::remove_file(s.path("s.pool.0")).unwrap();
    // Degraded: the directory is read through parity, and it can still change.
    let o = kavach(&["region", "create", &p, "second", "--size", "4KiB"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = kavach(&["region", "list", &p]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let names: Vec<String> = stdout(&o)
        .lines()
        .filter_map(|l| l.split('\t').next().map(str::to_owned))
        .collect();
    assert_eq!(names, ["first", "second"]);
    let o = kavach(&["region", "remove", &p, "first"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&kavach(&["pool", "info", &p, "--json"]));
    assert_eq!(v["regions"].as_array().map(Vec::len), Some(1));
    assert_eq!(v["set"]["state"], "degraded");
}

#[test]
fn a_set_left_open_and_then_degraded_needs_force_to_rebuild() {
    let s = Scratch::new("force");
    let p = create(&s);
    fill(&p);
    let members = ["s.pool.0", "s.pool.1", "s.pool.2"].map(|n| s.path(n));
    // The files as a crash would leave them: copied while the set is open and written (on
    // tmpfs the page cache is what survives a process crash), put back after it closed.
    let crashed: Vec<Vec<u8>> = in_process(|| {
        let set = StripedSet::open_files(Path::new(&p), SetOpenOptions::default()).unwrap();
        set.write(8192, &[0x77; 512]);
        set.persist(8192, 512).unwrap();
        let copies = members.iter().map(|m| std::fs::read(m).unwrap()).collect();
        set.close().unwrap();
        copies
    });
    for (m, bytes) in members.iter().zip(&crashed) {
        std::fs::write(m, bytes).unwrap();
    }
    let before = digest(&p);
    std::fs::remove_file(&members[2]).unwrap();
    let v = json(&kavach(&["pool", "info", &p, "--json"]));
    assert_eq!(v["set"]["unclean_at_open"], true);
    assert_eq!(v["set"]["state"], "degraded");
    let new = s.path("s.pool.2-new");
    let o = kavach(&["pool", "rebuild", &p, "--replace", &members[2], &new]);
    assert_refused(&o, 2, "--force");
    assert!(!Path::new(&new).exists());
    let o = kavach(&[
        "pool",
        "rebuild",
        &p,
        "--replace",
        &members[2],
        &new,
        "--force",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&kavach(&["pool", "info", &p, "--json"]));
    assert_eq!(v["set"]["state"], "healthy");
    assert_eq!(digest(&p), before);
}
