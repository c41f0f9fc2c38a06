//! Formatting a heap over a region that held an older heap (with the same UUID: a pool file
//! re-created in place) must never bring back the old heap's allocations, roots or pending
//! transactions: the header area, lanes and chunk table are zeroed and that is durable before the
//! new headers are written. Crashed at every fence (every image) and after `format` returns: an
//! image is either the old heap whole, not a heap, or a new, empty heap.

use std::sync::Arc;

use heap::check::walk;
use heap::{HeapOptions, RawHeap};
use pmem::sim::crash_at_every_fence_with;
use pmem::{Medium, SimConfig, SimMedium};

const LEN: u64 = 4 << 20;
const UUID: [u8; 16] = [5; 16];

fn old_heap() -> Vec<u8> {
    let m = Arc::new(SimMedium::new(LEN as usize, SimConfig::default()));
    RawHeap::format(&*m, 0, LEN, UUID, &HeapOptions::small()).expect("format");
    let h = RawHeap::open(m.clone(), 0, LEN).expect("open");
    h.root(256).expect("root");
    drop(h);
    m.power_fail()
}

/// `Some(allocated bytes, root)` when the image opens as a heap without damage.
fn state(img: Vec<u8>) -> Option<(u64, Option<(u64, u64)>)> {
    let m = SimMedium::from_image(img, SimConfig::default());
    let r = walk(&m as &dyn Medium, 0, LEN, false).ok()?;
    // One header copy lost to a crash is what two copies are for; anything else is damage.
    let damage: Vec<_> = r
        .damage
        .iter()
        .filter(|c| !c.structure.starts_with("heap header copy"))
        .collect();
    assert!(
        damage.is_empty(),
        "a heap that opens shows damage: {damage:?}"
    );
    Some((r.allocated_bytes, r.root))
}

#[test]
fn a_heap_formatted_over_an_old_one_is_new_and_empty_once_format_returns() {
    let old = old_heap();
    let before = state(old.clone()).expect("the old heap");
    assert!(before.1.is_some(), "the old heap has a root");
    let cfg = SimConfig {
        images_per_crash: 64,
        ..SimConfig::default()
    };
    crash_at_every_fence_with(
        cfg,
        &old,
        |m| {
            let _ = RawHeap::format(m, 0, LEN, UUID, &HeapOptions::small());
        },
        |img, fence| {
            if let Some(s) = state(img) {
                assert!(
                    s == before || s == (0, None),
                    "crash at fence {fence}: neither the old heap nor a new one: {s:?}"
                );
            }
        },
    );
    let m = SimMedium::from_image(old, SimConfig::default());
    RawHeap::format(&m, 0, LEN, UUID, &HeapOptions::small()).expect("format over the old heap");
    let mut images = 0;
    for img in m.power_fail_state().images() {
        images += 1;
        let s = state(img).expect("a heap after format returned");
        assert_eq!(
            s,
            (0, None),
            "the old heap's root or blocks survived a format"
        );
    }
    println!("crash images checked: {images} after format returned");
}
