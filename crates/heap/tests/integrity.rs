//! The heap on a protected region.
//!
//! - `lazy` redundancy works unchanged: the write tracker sees the heap's stores (user data,
//!   undo log, bitmaps), an update pass brings parity and checksums up to date, a scrub finds
//!   nothing, and a bit flip in a page the heap uses is found and repaired byte-exact.
//! - The commit hook reports exactly the ranges a transaction changed, with their old bytes
//!   taken from the undo log (what `eager` redundancy needs to update from the diff).

use std::sync::{Arc, Mutex};

use heap::{Change, CommitObserver, HeapOptions, RawHeap};
use integrity::{CreateOptions, Mode, OpenOptions, TrackerKind};
use pmem::{Alignment, Mapping, Medium, Pool, kinds};

fn path(name: &str) -> std::path::PathBuf {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    dir.join(format!("kavach-heap-{name}-{}.pool", std::process::id()))
}

fn tx(h: &RawHeap, f: impl FnOnce(&mut heap::raw::Lane) -> heap::Result<()>) {
    let mut l = h.lane();
    h.begin(&mut l);
    f(&mut l).unwrap();
    h.commit(&mut l).unwrap();
}

#[test]
fn lazy_redundancy_covers_a_heap_unchanged() {
    if !integrity::tracker::uffd::supported() {
        eprintln!("userfaultfd write-protect is not available; the mprotect tracker is used");
    }
    let p = path("lazy");
    let _ = std::fs::remove_file(&p);
    let pool = Pool::create(
        &p,
        &pmem::CreateOptions {
            size: 24 << 20,
            domain: None,
        },
    )
    .unwrap();
    let mut pool = pool.map_medium(Arc::new);
    let region = pool
        .create_region("heap", kinds::HEAP, 16 << 20, Alignment::Page)
        .unwrap();
    let medium: Arc<Mapping> = pool.medium().clone();
    RawHeap::format(
        &*medium,
        region.offset,
        region.length,
        pool.uuid().0,
        &HeapOptions::small(),
    )
    .unwrap();
    integrity::create_in_pool(
        &mut pool,
        "heap",
        &CreateOptions {
            mode: Mode::Lazy,
            ..CreateOptions::default()
        },
        &mut |_, _| {},
    )
    .unwrap();
    let kind = if integrity::tracker::uffd::supported() {
        TrackerKind::Uffd
    } else {
        TrackerKind::Mprotect
    };
    let tracker = integrity::tracker::for_mapping(
        kind,
        medium.clone(),
        region.offset as usize,
        region.length as usize,
    )
    .unwrap();
    let (prot, _) = integrity::open_in_pool(
        &pool,
        "heap",
        OpenOptions {
            tracker: Some(tracker),
            ..OpenOptions::default()
        },
        &mut |_, _| {},
    )
    .unwrap();
    let h = RawHeap::open(medium.clone(), region.offset, region.length).unwrap();
    let (root, _) = h.root(64 * 8).unwrap();
    let mut blocks = Vec::new();
    for i in 0..64u64 {
        tx(&h, |l| {
            let b = h.alloc(l, 3000, false)?;
            h.medium()
                .write((h.base() + b) as usize, &vec![i as u8; 3000]);
            h.write(l, root + 8 * (i % 64), &b.to_le_bytes())?;
            blocks.push(b);
            Ok(())
        });
    }
    prot.run_pass().unwrap();
    let clean = prot.scrub(&mut |_, _| {}).unwrap();
    assert!(clean.findings.is_empty(), "{:?}", clean.findings);
    assert!(clean.pages_checked > 0);
    // Flip bits in a heap block's page, behind every layer's back.
    let victim = blocks[17];
    pmem::fault::flip_bits(&*medium, (region.offset + victim) as usize, 64, 3, 7).unwrap();
    let found = prot.scrub(&mut |_, _| {}).unwrap();
    assert_eq!(found.findings.len(), 1, "{:?}", found.findings);
    let fixed = prot.repair(&mut |_, _| {}).unwrap();
    assert_eq!(fixed.unrepaired().count(), 0);
    let mut back = vec![0u8; 3000];
    h.read(victim, &mut back).unwrap();
    assert_eq!(
        back,
        vec![17u8; 3000],
        "the heap block is restored byte-exact"
    );
    drop(h);
    prot.close().unwrap();
    drop(pool);
    let _ = std::fs::remove_file(&p);
}

/// (medium offset, length, old bytes) per reported change.
type Seen = Vec<(u64, u64, Option<Vec<u8>>)>;

#[derive(Default)]
struct Recorder(Mutex<Seen>);

impl CommitObserver for Recorder {
    fn committed(&self, changes: &[Change<'_>]) -> heap::Result<()> {
        let mut v = self.0.lock().unwrap();
        for c in changes {
            v.push((c.medium_offset, c.len, c.old.map(|o| o.to_vec())));
        }
        Ok(())
    }
}

#[test]
fn commit_reports_changed_ranges_with_old_bytes() {
    let len = 4u64 << 20;
    let sim = Arc::new(pmem::SimMedium::new(
        len as usize + 8192,
        pmem::SimConfig::default(),
    ));
    RawHeap::format(&*sim, 4096, len, [1; 16], &HeapOptions::small()).unwrap();
    let h = RawHeap::open(sim.clone(), 4096, len).unwrap();
    let (root, _) = h.root(256).unwrap();
    tx(&h, |l| h.write(l, root, &[7u8; 100]));
    let rec = Arc::new(Recorder::default());
    h.set_observer(Some(rec.clone()));
    let mut fresh = 0;
    tx(&h, |l| {
        h.write(l, root + 10, &[1u8; 20])?;
        h.write(l, root + 200, &[2u8; 8])?;
        h.write(l, root + 12, &[3u8; 4])?; // inside the first range: no second snapshot
        fresh = h.alloc(l, 500, true)?;
        Ok(())
    });
    // An aborted transaction reports nothing.
    let mut l = h.lane();
    h.begin(&mut l);
    h.write(&mut l, root, &[9u8; 8]).unwrap();
    h.abort(&mut l).unwrap();
    drop(l);
    let got = rec.0.lock().unwrap().clone();
    assert_eq!(
        got,
        vec![
            (4096 + root + 10, 20, Some(vec![7u8; 20])),
            (4096 + root + 200, 8, Some(vec![0u8; 8])),
            (4096 + fresh, 512, None),
        ]
    );
}
