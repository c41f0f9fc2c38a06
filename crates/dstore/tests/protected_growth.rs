//! A protected store whose pool grows while it serves: the regions the store adds (page-frame
//! regions of its checkpoint images) are not covered until the next start, and the
//! protection's INFO says so right now (`bytes_not_covered`, `regions_grown_not_covered`)
//! rather than only listing the regions of the start. After a restart they are covered.

mod model;

use std::sync::Arc;

use dstore::{Config, ProtectOptions, Store, StoreError};
use integrity::Mode;
use pmem::{Domain, OpenOptions, Pool, SimConfig, SimMedium};

type Guarded = dstore::Guarded<Arc<SimMedium>>;
type Protection = dstore::Protection<Arc<SimMedium>>;

fn config() -> Config {
    Config {
        shards: 2,
        log_bytes: 1 << 20,
        slot_bytes: 0,
        checkpoint_at_percent: 50,
        background: false,
        value_bytes_max: 65536,
        data_bytes: 4096,
        ..Config::default()
    }
}

fn no_tracker(_: u64, _: u64) -> dstore::StoreResult<Box<dyn integrity::Tracker>> {
    Err(StoreError::Failed(
        "eager mode needs no write tracker".into(),
    ))
}

fn open(sim: &Arc<SimMedium>) -> (Store<Guarded>, Arc<Protection>, Vec<String>) {
    let pool = Pool::open_medium(Arc::clone(sim), &OpenOptions::default()).expect("open");
    let opts = ProtectOptions {
        mode: Some(Mode::Eager),
        period_ms: None,
        scrub_pages_per_sec: 0,
    };
    let (s, p, notes) = Store::open_protected(pool, config(), &opts, &no_tracker).expect("protect");
    (s, p.expect("eager protection"), notes)
}

fn info(p: &Protection, key: &str) -> String {
    p.info()
        .into_iter()
        .find(|(k, _)| k == key)
        .unwrap_or_else(|| panic!("no {key} in the integrity info"))
        .1
}

#[test]
fn regions_the_store_adds_while_serving_are_reported_until_the_next_start() {
    let sim = Arc::new(SimMedium::new(
        pmem::layout::POOL_SIZE_MIN as usize,
        SimConfig::default(),
    ));
    let m = Pool::format_growable(Arc::clone(&sim), Domain::Sim).expect("format");
    let pool = Pool::open_medium(m, &OpenOptions::default()).expect("open");
    let store = Store::create(pool, config()).expect("create");
    store.close().expect("close");
    drop(store);

    let (s, p, _) = open(&sim);
    let at_start: u64 = info(&p, "bytes_not_covered").parse().expect("a number");
    assert_eq!(info(&p, "regions_grown_not_covered"), "");
    let frames_at_start = info(&p, "regions_covered")
        .split(',')
        .filter(|n| n.starts_with(dipper::layout::FRAME_REGION_PREFIX))
        .count();

    // Large values, checkpointed: the images outgrow their frames and the pool grows.
    for i in 0..60u32 {
        let v = vec![b'a' + (i % 26) as u8; 20000 + (i as usize * 517) % 20000];
        s.set(format!("key-{i}").as_bytes(), &v, false, false, None)
            .expect("set");
        if i % 10 == 9 {
            s.save().expect("checkpoint");
        }
    }
    let grown = info(&p, "regions_grown_not_covered");
    let now: u64 = info(&p, "bytes_not_covered").parse().expect("a number");
    assert!(
        grown
            .split(',')
            .any(|n| n.starts_with(dipper::layout::FRAME_REGION_PREFIX)),
        "a frame region added or extended while serving is reported: `{grown}`"
    );
    assert!(
        now > at_start,
        "bytes not covered grow with the pool: {now} after, {at_start} at start"
    );

    s.close().expect("close");
    p.close().expect("close the protection");
    drop(s);
    drop(p);

    // The next start covers them.
    let (s, p, notes) = open(&sim);
    assert_eq!(info(&p, "regions_grown_not_covered"), "");
    let after: u64 = info(&p, "bytes_not_covered").parse().expect("a number");
    assert!(
        after < now,
        "{after} not covered after the restart, {now} before"
    );
    let frames_after = info(&p, "regions_covered")
        .split(',')
        .filter(|n| n.starts_with(dipper::layout::FRAME_REGION_PREFIX))
        .count();
    assert!(
        frames_after > frames_at_start || notes.iter().any(|n| n.contains("the pool grew")),
        "the restart covers the grown frames: {frames_after} frame regions (at first \
         {frames_at_start}); notes {notes:?}"
    );
    assert_eq!(
        s.get(b"key-59").expect("get").map(|v| v.len()),
        Some(20000 + 59 * 517 % 20000)
    );
    s.close().expect("close");
    p.close().expect("close the protection");
}
