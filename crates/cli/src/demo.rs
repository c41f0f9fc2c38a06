//! `kavach demo`: the main job until the server exists.

use crate::outcome::Outcome;
use crate::units::format_size;
use anyhow::{Context, Result};
use clap::Args;
use pmem::check::check_file;
use pmem::sim::{crash_at_every_fence, crash_at_random_points};
use pmem::{Alignment, CreateOptions, Medium, OpenOptions, Pool, SimConfig, SimMedium, kinds};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Directory for the demo pool (created if missing).
    #[arg(long, default_value = "kavach-data")]
    pub dir: PathBuf,
    /// Random crash points to simulate.
    #[arg(long, default_value_t = 300)]
    pub crashes: u64,
}

const POOL_SIZE: u64 = 64 << 20;
const REGION: &str = "demo";

pub fn run(a: &DemoArgs) -> Result<Outcome> {
    std::fs::create_dir_all(&a.dir)
        .with_context(|| format!("cannot create {}", a.dir.display()))?;
    let path = a.dir.join("demo.pool");

    println!("1. pool");
    let mut pool = if path.exists() {
        let p = Pool::open(&path, &OpenOptions::default())
            .with_context(|| format!("cannot open {}", path.display()))?;
        println!(
            "   opened {} (last shutdown {})",
            path.display(),
            if p.was_clean_shutdown() {
                "clean"
            } else {
                "NOT clean"
            }
        );
        p
    } else {
        let p = Pool::create(
            &path,
            &CreateOptions {
                size: POOL_SIZE,
                domain: None,
            },
        )
        .with_context(|| format!("cannot create {}", path.display()))?;
        println!("   created {} ({})", path.display(), format_size(POOL_SIZE));
        p
    };
    let info = pool.info();
    println!(
        "   domain {} on {} ({}), flush with {}, uuid {}",
        info.domain,
        info.backing.name(),
        if info.survives_reboot {
            "durable across reboot"
        } else {
            "not durable across reboot"
        },
        info.flush_instruction.name(),
        info.uuid
    );

    println!("2. region and an 8-byte atomic commit word");
    let region = match pool.region(REGION) {
        Some(r) => r.clone(),
        None => {
            let r = pool.create_region(REGION, kinds::RAW, 64 << 10, Alignment::Page)?;
            println!(
                "   created region `{}` at offset {:#x} ({})",
                r.name,
                r.offset,
                format_size(r.length)
            );
            r
        }
    };
    let at = region.offset as usize;
    let runs = pool.medium().load_u64(at) + 1;
    pool.medium().store_u64(at, runs);
    pool.medium().persist(at, 8)?;
    println!(
        "   run counter in `{}` is now {runs} (stored, flushed, fenced)",
        region.name
    );

    println!("3. crash a region update on the persistence simulator");
    crash_demo(a.crashes)?;

    println!("4. damage a header slot of a scratch pool, check it, repair it by reopening");
    damage_demo(&a.dir)?;

    println!("5. log: two threads append to a persistent log; crash appends on the simulator");
    log_demo(&a.dir, a.crashes)?;

    pool.close()?;
    println!(
        "6. closed {} cleanly; run `kavach pool info {}` or `kavach log dump {}` to look",
        path.display(),
        path.display(),
        a.dir.join("demo-log.pool").display()
    );
    Ok(Outcome::Ok)
}

/// What a log holds, in words: its data records and the LSNs they lie between (an empty log
/// has no range to show, only the LSN its next record gets).
fn holds(records: u64, start_lsn: u64, next_lsn: u64) -> String {
    let last = next_lsn.saturating_sub(1);
    let range = if start_lsn >= last {
        format!("LSN {start_lsn}")
    } else {
        format!("LSN {start_lsn}..={last}")
    };
    match records {
        0 => format!("holds no records (the next one gets LSN {next_lsn})"),
        1 => format!("holds 1 record ({range})"),
        n => format!("holds {n} records ({range})"),
    }
}

/// Append from two threads to `DIR/demo-log.pool` (created if missing), then crash a
/// single-writer append sequence at random points on the simulator and check that every forced
/// record comes back, in order, with nothing torn.
fn log_demo(dir: &std::path::Path, random_points: u64) -> Result<()> {
    use log::{ForcePolicy, Log, LogFile, LogOptions};
    use std::time::Duration;
    let path = dir.join("demo-log.pool");
    let wait = Duration::from_millis(200);
    let file = if path.exists() {
        LogFile::open(&path, "log", false, wait)
            .with_context(|| format!("cannot open {}", path.display()))?
    } else {
        LogFile::create(&path, 16 << 20, "log", None, wait)
            .with_context(|| format!("cannot create {}", path.display()))?
    };
    let r = file.recovery();
    println!(
        "   {} ({} domain) {}; {}",
        path.display(),
        file.pool().info().domain,
        holds(r.records, r.start_lsn, r.next_lsn),
        r.stop.describe()
    );
    let log = file.log();
    // Keep the log from filling: reclaim everything before this run's records.
    log.cleanup_all()?;
    let per_thread = 5_000u64;
    let started = std::time::Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let workers: Vec<_> = (0..2u64)
            .map(|t| {
                s.spawn(move || -> Result<()> {
                    for i in 0..per_thread {
                        let msg = format!("thread {t} record {i}");
                        log.append(msg.as_bytes(), ForcePolicy::Frequency(8))?;
                    }
                    Ok(())
                })
            })
            .collect();
        for w in workers {
            w.join()
                .map_err(|_| anyhow::anyhow!("a demo writer panicked"))??;
        }
        Ok(())
    })?;
    let elapsed = started.elapsed();
    log.force(log.next_lsn() - 1, 1)?;
    println!(
        "   appended {} records from 2 threads in {:.1} ms (frequency:8), all durable up to LSN {}",
        2 * per_thread,
        elapsed.as_secs_f64() * 1e3,
        log.durable_lsn()
    );
    file.close()?;

    let region = 4096 + 64 * 1024;
    let sim = SimMedium::new(region, SimConfig::default());
    let base = Log::create(&sim, 0, region, wait)?.close()?.durable_image();
    let appended = std::sync::Mutex::new(0u64);
    let op = |m: &SimMedium| {
        let opts = LogOptions {
            clean_shutdown: true,
            ..LogOptions::default()
        };
        let Ok((l, _)) = Log::open(m, 0, region, &opts) else {
            return;
        };
        for i in 0..200u64 {
            match l.append(
                &i.to_le_bytes().repeat(1 + i as usize % 40),
                ForcePolicy::Sync,
            ) {
                Ok(_) => *appended.lock().unwrap_or_else(|p| p.into_inner()) = i + 1,
                Err(_) => return,
            }
        }
    };
    let mut bad = 0u64;
    let mut runs = 0u64;
    crash_at_random_points(
        &base,
        7,
        random_points,
        |m| {
            *appended.lock().unwrap_or_else(|p| p.into_inner()) = 0;
            op(m)
        },
        |img, _| {
            runs += 1;
            let forced = *appended.lock().unwrap_or_else(|p| p.into_inner());
            let m = SimMedium::from_image(img, SimConfig::default());
            let ok = Log::open(&m, 0, region, &LogOptions::default()).is_ok_and(|(l, _)| {
                let got: Vec<Vec<u8>> = l
                    .records()
                    .map_while(|r| r.ok())
                    .map(|r| r.payload)
                    .collect();
                got.len() as u64 >= forced
                    && got
                        .iter()
                        .enumerate()
                        .all(|(i, p)| *p == (i as u64).to_le_bytes().repeat(1 + i % 40))
            });
            bad += u64::from(!ok);
        },
    );
    println!(
        "   {runs} random crashes during 200 synchronous appends: every forced record recovered, \
         in order, none torn, in {} of them",
        runs - bad
    );
    anyhow::ensure!(bad == 0, "{bad} crash images lost a forced record");
    Ok(())
}

fn crash_demo(random_points: u64) -> Result<()> {
    let sim = SimMedium::new(1 << 20, SimConfig::default());
    let mut pool = Pool::open_medium(
        Pool::format(&sim, pmem::Domain::Sim)?,
        &OpenOptions::default(),
    )?;
    pool.create_region("a", kinds::RAW, 8192, Alignment::Page)?;
    pool.close()?;
    let base = sim.durable_image();
    let op = |m: &SimMedium| {
        if let Ok(mut p) = Pool::open_medium(m, &OpenOptions::default()) {
            if p.create_region("b", kinds::LOG, 4096, Alignment::Page)
                .is_ok()
            {
                let _ = p.close();
            }
        }
    };
    let mut tally = [0u64; 3]; // before, after, neither
    let mut classify = |img: Vec<u8>| {
        let m = SimMedium::from_image(img, SimConfig::default());
        let i = match Pool::open_medium(
            &m,
            &OpenOptions {
                read_only: true,
                domain: None,
            },
        ) {
            Ok(p) if p.region("b").is_none() => 0,
            Ok(_) => 1,
            Err(_) => 2,
        };
        tally[i] += 1;
    };
    let fences = crash_at_every_fence(&base, 1, op, |img, _| classify(img));
    crash_at_random_points(&base, 2, random_points, op, |img, _| classify(img));
    println!(
        "   {fences} fence crash points + {random_points} random crashes with eviction: \
         {} reopened before the update, {} after, {} in between or unopenable",
        tally[0], tally[1], tally[2]
    );
    anyhow::ensure!(
        tally[2] == 0,
        "a crash image was neither before nor after: this is a bug"
    );
    Ok(())
}

fn damage_demo(dir: &std::path::Path) -> Result<()> {
    let path = dir.join("scratch.pool");
    let _ = std::fs::remove_file(&path);
    let result = (|| -> Result<()> {
        Pool::create(
            &path,
            &CreateOptions {
                size: 1 << 20,
                domain: None,
            },
        )?
        .close()?;
        {
            let m = pmem::Mapping::open(&path, true)?;
            let slot = pmem::layout::PAGE_SIZE + pmem::layout::SLOT_OFFSET_IN_PAGE;
            let bits = pmem::fault::flip_bits(&m, slot, 64, 3, 42)?;
            println!(
                "   flipped {} bits in mutable header slot 1 of {}",
                bits.len(),
                path.display()
            );
        }
        let report = check_file(&path)?;
        for f in &report.findings {
            println!("   check: {}", f.message);
        }
        Pool::open(&path, &OpenOptions::default())?.close()?;
        let after = check_file(&path)?;
        println!(
            "   after one read-write open and close: {}",
            if after.healthy() {
                "healthy"
            } else {
                "still damaged"
            }
        );
        anyhow::ensure!(
            !report.healthy() && after.healthy(),
            "the damage demo did not detect and repair"
        );
        Ok(())
    })();
    let _ = std::fs::remove_file(&path);
    result
}

#[cfg(test)]
mod tests {
    use super::holds;

    #[test]
    fn an_empty_log_is_described_without_an_lsn_range() {
        assert_eq!(holds(0, 1, 1), "holds no records (the next one gets LSN 1)");
        assert_eq!(holds(1, 1, 2), "holds 1 record (LSN 1)");
        assert_eq!(holds(3, 4, 7), "holds 3 records (LSN 4..=6)");
    }
}
