//! A protected store in eager mode never hands out bytes the integrity layer refused.
//!
//! An object is written under eager redundancy, then one byte of every page of the data zone
//! is flipped on the medium under the store (behind the layer's back): every stripe then has
//! more damaged pages than parity can rebuild, so the layer refuses the reads. An object read
//! must fail with [`StoreError::Integrity`] naming the region, not return the damaged bytes;
//! a write that would copy a damaged block into a new one must fail before it is logged; and
//! the protection counts the refusals (INFO's `refused_by_integrity`).

mod model;

use std::sync::Arc;

use dstore::{Config, ProtectOptions, Store, StoreError};
use integrity::Mode;
use pmem::layout::PAGE_SIZE;
use pmem::{Domain, Medium, OpenOptions, Pool, SimConfig, SimMedium};

const POOL_BYTES: usize = 4 << 20;

type Guarded = dstore::Guarded<Arc<SimMedium>>;
type Protection = dstore::Protection<Arc<SimMedium>>;

fn config() -> Config {
    Config {
        grow: false,
        ..model::config(false)
    }
}

fn no_tracker(_: u64, _: u64) -> dstore::StoreResult<Box<dyn integrity::Tracker>> {
    Err(StoreError::Failed(
        "eager mode needs no write tracker".into(),
    ))
}

/// A fresh store on a sim medium, opened with eager protection.
fn eager_store() -> (Arc<SimMedium>, Store<Guarded>, Arc<Protection>) {
    let sim = Arc::new(SimMedium::new(POOL_BYTES, SimConfig::default()));
    let m = Pool::format(Arc::clone(&sim), Domain::Sim).expect("format");
    let pool = Pool::open_medium(m, &OpenOptions::default()).expect("open");
    let store = Store::create(pool, config()).expect("create");
    store.close().expect("close");
    drop(store);
    let pool = Pool::open_medium(Arc::clone(&sim), &OpenOptions::default()).expect("open");
    let opts = ProtectOptions {
        mode: Some(Mode::Eager),
        period_ms: None,
        scrub_pages_per_sec: 0,
    };
    let (s, p, _) = Store::open_protected(pool, config(), &opts, &no_tracker).expect("protect");
    (sim, s, p.expect("eager protection"))
}

fn info_u64(p: &Protection, key: &str) -> u64 {
    p.info()
        .into_iter()
        .find(|(k, _)| k == key)
        .unwrap_or_else(|| panic!("no {key} in the integrity info"))
        .1
        .parse()
        .expect("a number")
}

#[test]
fn an_object_read_the_layer_refuses_fails_with_a_typed_error() {
    let (sim, s, p) = eager_store();
    let data: Vec<u8> = (0..3 * 4096 + 100).map(|i| (i * 7 % 251) as u8).collect();
    s.owrite(b"obj", 0, &data).expect("owrite");
    assert_eq!(
        s.oread(b"obj", 0, data.len()).expect("oread"),
        Some(data.clone())
    );
    assert_eq!(info_u64(&p, "refused_by_integrity"), 0);

    let zone = p
        .covered()
        .iter()
        .find(|c| c.name == "dstore.data")
        .expect("the data zone is covered");
    let (base, len) = (zone.offset as usize, zone.len as usize);
    let mut b = [0u8; 1];
    for page in (base..base + len).step_by(PAGE_SIZE) {
        sim.read(page + 100, &mut b);
        sim.inject(page + 100, &[b[0] ^ 0x5a]).expect("inject");
    }

    match s.oread(b"obj", 0, data.len()) {
        Err(StoreError::Integrity { region, .. }) => assert_eq!(region, "dstore.data"),
        Ok(v) => panic!(
            "a refused read must fail the object read, it returned {:?} bytes (damaged: {})",
            v.as_ref().map(Vec::len),
            v.as_ref() != Some(&data)
        ),
        Err(e) => panic!("a refused read must fail with an integrity error, got {e}"),
    }
    let refused = info_u64(&p, "refused_by_integrity");
    assert!(refused >= 1, "INFO counts the refusal: {refused}");

    // A partial write copies the rest of the old block: refused before it is logged, and the
    // object keeps its size.
    match s.owrite(b"obj", 1, b"new") {
        Err(StoreError::Integrity { region, .. }) => assert_eq!(region, "dstore.data"),
        other => panic!("a write over a refused block must fail, got {other:?}"),
    }
    assert_eq!(
        s.object_size(b"obj").expect("size"),
        Some(data.len() as u64)
    );

    // The error names the page and says what to do.
    let e = s.oread(b"obj", 0, 10).expect_err("still refused");
    let text = e.to_string();
    assert!(
        text.starts_with("integrity: page ") && text.contains("region `dstore.data` refused"),
        "{text}"
    );
    // Other operations still work.
    s.set(b"k", b"v", false, false, None).expect("set");
    assert_eq!(s.get(b"k").expect("get"), Some(b"v".to_vec()));
}

#[test]
fn a_start_whose_recovery_reads_refused_pages_fails_with_the_integrity_error() {
    let (sim, s, p) = eager_store();
    for i in 0..50u32 {
        s.set(format!("key-{i}").as_bytes(), b"value", false, false, None)
            .expect("set");
    }
    s.save().expect("checkpoint");
    s.close().expect("close");
    p.close().expect("close the protection");
    let regions: Vec<(usize, usize)> = p
        .covered()
        .iter()
        .filter(|c| c.name != "dstore.data")
        .map(|c| (c.offset as usize, c.len as usize))
        .collect();
    drop(s);
    drop(p);

    // One byte of every page of the root, the logs and the slots: more damage in every stripe
    // than parity can rebuild.
    let mut b = [0u8; 1];
    for (base, len) in regions {
        for page in (base..base + len).step_by(PAGE_SIZE) {
            sim.read(page + 200, &mut b);
            sim.inject(page + 200, &[b[0] ^ 0xa5]).expect("inject");
        }
    }
    let pool = Pool::open_medium(Arc::clone(&sim), &OpenOptions::default()).expect("open");
    let opts = ProtectOptions {
        mode: None,
        period_ms: None,
        scrub_pages_per_sec: 0,
    };
    match Store::open_protected(pool, config(), &opts, &no_tracker) {
        Err(StoreError::Integrity { region, .. }) => {
            assert!(region.starts_with("dipper."), "{region}")
        }
        Ok(_) => panic!("a store recovered from refused pages must not open"),
        Err(e) => panic!("the refused read is the cause, got {e}"),
    }
}
