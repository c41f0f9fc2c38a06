//! Checkpoint pacing: a paced checkpoint (replaying on one thread) sleeps to keep to its plan
//! and ends in the same image as one at full speed (two replay threads); its phases and CPU
//! time are reported consistently; out-of-range settings are refused with the field named.

use std::sync::Arc;
use std::time::Duration;

use dipper::arena::Arena;
use dipper::{Dipper, DipperError, Layout, Machine, Options, Pacing, Result};
use pmem::{Domain, OpenOptions, Pool, SimConfig, SimMedium};

#[derive(Debug, Clone)]
struct Blocks;

impl Machine for Blocks {
    type Output = ();

    fn init(&self, _shard: usize, _arena: &mut Arena) -> Result<()> {
        Ok(())
    }

    /// Add a 2000-byte block filled with the op's byte.
    fn apply(&self, _shard: usize, arena: &mut Arena, op: &[u8], _out: &mut ()) -> Result<()> {
        let v = op.first().copied().unwrap_or(0);
        arena.alloc_copy(&[v; 2000])?;
        Ok(())
    }
}

fn engine() -> Dipper<Arc<SimMedium>, Blocks> {
    let sim = Arc::new(SimMedium::new(16 << 20, SimConfig::default()));
    let m = Pool::format(Arc::clone(&sim), Domain::Sim).expect("format");
    let pool = Pool::open_medium(m, &OpenOptions::default()).expect("open");
    let layout = Layout {
        log_bytes: 1 << 20,
        slot_bytes: 4 << 20,
        shards: 2,
        machine: 0,
    };
    let opts = Options {
        background: false,
        ..Options::default()
    };
    Dipper::create(pool, &layout, Blocks, opts)
        .expect("create")
        .0
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

fn images(e: &Dipper<Arc<SimMedium>, Blocks>) -> Vec<Vec<u8>> {
    (0..2)
        .map(|s| e.read(s, |a| a.image().to_vec()).expect("read"))
        .collect()
}

#[test]
fn a_paced_checkpoint_sleeps_and_writes_the_same_image() {
    let mut results = Vec::new();
    for pacing in [
        Pacing::off(),
        Pacing {
            enabled: true,
            finish_at_percent: 50,
            floor_bytes_per_sec: 1 << 20,
            max_duration: Duration::from_millis(300),
            burst_bytes: 0,
        },
    ] {
        let e = engine();
        e.set_pacing(pacing).expect("valid pacing");
        assert_eq!(e.pacing(), pacing);
        for i in 0..150u8 {
            e.execute(Some(&[(i % 2) as u16]), &[i], true).expect("op");
        }
        let before = unix_ms();
        let st = e.checkpoint().expect("checkpoint");
        let after = unix_ms();
        assert!(st.pages > 0 && st.bytes >= st.pages * 64);
        // The phases follow each other within the checkpoint's time, and the CPU time of the
        // replay and of the write-out are parts of the whole.
        assert!((before..=after).contains(&st.started_unix_ms), "{st:?}");
        assert!(
            st.swap_us + st.replay_us + st.write_us + st.root_us + st.empty_us
                <= st.total_ms * 1000 + 1000,
            "{st:?}"
        );
        assert!(st.replay_cpu_us + st.write_cpu_us <= st.cpu_us, "{st:?}");
        if pacing.enabled {
            // About 300 KB of pages and 30 KB of log at no more than 1 MiB/s, planned over
            // 300 ms: the write-out is far ahead of that plan and must have paused.
            assert_eq!(st.planned_ms, 300);
            assert!(st.paced_ms > 0, "{st:?}");
            assert!(!st.pacing_cut);
            assert!(st.pacing_rate >= 1 << 20);
        } else {
            assert_eq!((st.planned_ms, st.paced_ms, st.pacing_rate), (0, 0, 0));
        }
        assert_eq!(e.stats().last_checkpoint, st);
        assert_eq!(e.stats().pacing, pacing);
        results.push((images(&e), st.pages, st.bytes));
        e.close().expect("close");
    }
    assert_eq!(results[0], results[1], "the same image, pages and bytes");
}

#[test]
fn pacing_settings_out_of_range_are_refused() {
    let e = engine();
    let cases = [
        (
            Pacing {
                finish_at_percent: 5,
                ..Pacing::default()
            },
            "finish_at_percent",
        ),
        (
            Pacing {
                floor_bytes_per_sec: 1000,
                ..Pacing::default()
            },
            "floor_bytes_per_sec",
        ),
        (
            Pacing {
                max_duration: Duration::from_secs(3600),
                ..Pacing::default()
            },
            "max_duration",
        ),
    ];
    for (p, field) in cases {
        match e.set_pacing(p) {
            Err(DipperError::Invalid { what, reason }) => {
                assert_eq!(what, "checkpoint pacing");
                assert!(reason.contains(field), "{reason}");
            }
            other => panic!("{field}: {other:?}"),
        }
    }
    assert_eq!(e.pacing(), Pacing::default(), "unchanged");
}
