//! `kavach heap ...`: make a pool holding a persistent heap, check a heap's metadata and
//! reachability, and show its statistics. Check and stats open the pool read-only: they change
//! nothing, not even by recovering an interrupted transaction.

use crate::outcome::{Outcome, print_json};
use crate::units::{format_size, parse_size};
use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use heap::check::{BlockInfo, HeapReport, walk};
use heap::layout::{
    CHUNK_SIZE, CLASS_SIZES, DEFAULT_LANE_BYTES, DEFAULT_LANES, Geometry, HEADER_COPY_0,
    HEADER_COPY_1, HEADER_CRC_AT, Header,
};
use heap::{HeapError, HeapFile, HeapOptions, Redundancy};
use pmem::{Corruption, Mapping, Medium, OpenOptions, Pool, Region, kinds};
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Subcommand)]
pub enum HeapCommand {
    /// Create a new pool file holding one persistent heap that fills it (the file must not
    /// exist).
    ///
    /// The heap is Kavach's libpmemobj: a size-class allocator (blocks of 64 B to 64 KiB in
    /// runs, whole 256 KiB chunks above that) with undo-logged transactions. Each lane is the
    /// log space of one transaction running at a time: a state line, a redo area (16 KiB, or a
    /// quarter of a smaller lane) and an undo area (the rest). The undo area holds a
    /// transaction's snapshots and allocator changes, so it bounds how much one transaction may
    /// change. What remains after the header and the lanes is cut into 256 KiB chunks for data.
    ///
    /// Exit status: 0 created; 2 could not run (the file exists, nothing was changed; a bad
    /// size; lanes that leave no room for data).
    #[command(after_help = "Examples:\n  \
        kavach heap create /dev/shm/app.heap --size 64MiB\n  \
        kavach heap create /dev/shm/app.heap --size 8MiB --lanes 8 --lane-size 64KiB --json")]
    Create(CreateArgs),
    /// Check a heap's metadata, allocations and reachability without changing anything.
    ///
    /// The pool is opened read-only: nothing is written, not even the recovery of an
    /// interrupted transaction. What is checked:
    ///
    /// Damaged metadata: both header copies, the chunk table (each word's check field, type,
    /// class and span), every run's allocation bitmap (no bit beyond the run's blocks), the
    /// root line (it must name an allocated block), and each lane's state word. Each finding
    /// names the structure, its byte offset, the field, what was expected and what was found.
    ///
    /// Double allocation: a chunk inside a large block's span that is also in use.
    ///
    /// Leaks: allocated blocks that no pointer reaches from the root object. Reachability is
    /// conservative: every aligned 8-byte word of a reachable block that holds an offset inside
    /// an allocated block counts as a pointer to it (the `off` of a C `kv_oid` and a Rust
    /// `PPtr` are such words). So a reported leak is certain, while random data that looks like
    /// a pointer can hide one. Leaks are checked only when the metadata is sound and no lane
    /// waits for recovery (--no-leaks skips them).
    ///
    /// Recovery pending: a lane with an interrupted undo transaction, or a redo transaction
    /// that reached its commit point before its bytes were all in place (a crash in the
    /// middle of either). That is not damage: open the pool with a program that uses the heap
    /// and it rolls the first back and the second forward; leaks are not checked until then.
    ///
    /// Unsaved: a lane whose redo area says UNSAVED (docs/format/redo-log.md): transactions
    /// committed with durability on demand and no save finished before power was lost or the
    /// program ended without closing the heap. The heap may hold part of a transaction and
    /// does not open; this counts as damage.
    ///
    /// Exit status: 0 no problem found (possibly with recovery pending; the output says so);
    /// 1 problems found (damage, an unsaved lane, double allocation or leaks); 2 the check could not run (no
    /// such file, not a pool, pool truncated or in use, no heap region, region not a heap).
    #[command(after_help = "Examples:\n  \
        kavach heap check /dev/shm/app.heap\n  \
        kavach heap check /dev/shm/app.heap --region heap --json\n  \
        kavach heap check /dev/shm/app.heap --no-leaks")]
    Check(CheckArgs),
    /// Show a heap's geometry, chunk usage, allocations per size class, root object and
    /// pending recovery (read-only; nothing is written).
    ///
    /// Geometry: region bytes, chunks, lanes, bytes per lane, undo and redo bytes per lane. Chunks are free, runs (of one size class each) or parts of large blocks. The
    /// class table lists each size class with at least one run: block size, runs, allocated
    /// blocks, the blocks its runs hold, and how full they are. Damage is only counted here;
    /// `kavach heap check` names it.
    ///
    /// Exit status: 0 shown; 2 could not run (no such file, not a pool, pool truncated or in
    /// use, no heap region, region not a heap, heap header with no good copy).
    #[command(after_help = "Examples:\n  \
        kavach heap stats /dev/shm/app.heap\n  \
        kavach heap stats /dev/shm/app.heap --json")]
    Stats(StatsArgs),
    /// Check every reliable object of a heap, word by word; with --repair, correct what can be
    /// corrected.
    ///
    /// A reliable object (allocated with the reliable flag: `Tx::alloc_reliable` in Rust,
    /// `kv_tx_alloc_flags(..., KV_ALLOC_RELIABLE)` in C) stores every 8-byte word beside an
    /// 8-byte check word. The code corrects every pattern of up to 6 flipped bits in a 16-byte
    /// pair and most patterns of 7, and never corrects a pair wrongly for up to 7 flips. Scrub
    /// walks every allocated block, takes those whose first pair says "reliable object" (any
    /// other block is never read past its first 16 bytes, nor written), and checks each pair:
    /// the header (magic and length) and every word. Each finding names the object (its heap
    /// offset), the word (its index and bytes), the pool byte of the pair, and how many bits
    /// were flipped in the data and check words.
    ///
    /// Without --repair the pool is opened read-only and nothing is written: correctable
    /// damage is reported as such. With --repair the heap is opened read-write (an interrupted
    /// transaction is recovered first, as any program opening it would) and the corrected pairs
    /// are written back in one transaction per object. A word that cannot be corrected stays
    /// as it is and is reported; the program that owns it must rewrite it.
    ///
    /// Exit status: 0 every pair checked clean; 1 damage found (correctable damage, even when
    /// --repair corrected it, and any uncorrectable word); 2 could not run (no such file, not a
    /// pool, pool in use, no heap region, heap header with no good copy); then the file is left
    /// byte for byte as it was.
    #[command(after_help = "Examples:\n  \
        kavach heap scrub /dev/shm/app.heap\n  \
        kavach heap scrub /dev/shm/app.heap --repair\n  \
        kavach heap scrub /dev/shm/app.heap --json")]
    Scrub(ScrubArgs),
}

#[derive(Debug, Args)]
pub struct ScrubArgs {
    /// Pool file holding the heap.
    pub path: PathBuf,
    /// Name of the heap region (default: the pool's only heap region).
    #[arg(long)]
    pub region: Option<String>,
    /// Write the corrections back (opens the pool read-write).
    #[arg(long)]
    pub repair: bool,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Path of the new pool file.
    pub path: PathBuf,
    /// Pool size: a multiple of 4096 (K, KiB = 1024; KB = 1000; also M, G, T; 0x... hex). It must hold the lanes
    /// (64 x 256 KiB by default) and at least one 256 KiB chunk.
    #[arg(long, value_parser = parse_size)]
    pub size: u64,
    /// Lanes: the most transactions that run at once, 1 to 1024.
    #[arg(long, default_value_t = DEFAULT_LANES,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub lanes: u32,
    /// Bytes per lane, a multiple of 4096 (units as for --size): its undo area bounds the
    /// bytes one transaction may change.
    #[arg(long, value_parser = parse_size, default_value_t = u64::from(DEFAULT_LANE_BYTES))]
    pub lane_size: u64,
    /// Redundancy of the heap region, recorded in the pool and used by every open: off, lazy
    /// (write tracking and a background pass), eager (from each commit's diff), txb-page
    /// (each commit recomputes its pages).
    #[arg(long, default_value = "off", value_parser = parse_redundancy)]
    pub redundancy: Redundancy,
    /// Lazy mode's update period in milliseconds (100..=60000); recorded with the mode.
    #[arg(long)]
    pub redundancy_period_ms: Option<u32>,
    /// Print the new heap's geometry as JSON.
    #[arg(long)]
    pub json: bool,
}

fn parse_redundancy(s: &str) -> std::result::Result<Redundancy, String> {
    Redundancy::parse(s).ok_or_else(|| {
        let names: Vec<&str> = Redundancy::ALL.iter().map(|r| r.name()).collect();
        format!(
            "`{s}` is not a redundancy mode (one of: {})",
            names.join(", ")
        )
    })
}

/// The heap region's redundancy as recorded, for `stats` (an error is shown, not fatal: the
/// heap's own statistics do not depend on it).
fn redundancy_text<M: Medium>(pool: &Pool<M>, region: &str) -> String {
    match heap::protect::recorded(pool, region) {
        Ok(r) if r.redundancy == Redundancy::Lazy => format!("lazy (period {} ms)", r.period_ms),
        Ok(r) => r.redundancy.name().to_string(),
        Err(e) => format!("unknown: {e}"),
    }
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Pool file holding the heap.
    pub path: PathBuf,
    /// Name of the heap region (default: the pool's only heap region).
    #[arg(long)]
    pub region: Option<String>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// Do not look for leaks (skip the reachability walk from the root).
    #[arg(long)]
    pub no_leaks: bool,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Pool file holding the heap.
    pub path: PathBuf,
    /// Name of the heap region (default: the pool's only heap region).
    #[arg(long)]
    pub region: Option<String>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: HeapCommand) -> Result<Outcome> {
    let result = match cmd {
        HeapCommand::Create(a) => create(&a),
        HeapCommand::Check(a) => check(&a),
        HeapCommand::Stats(a) => stats(&a),
        HeapCommand::Scrub(a) => scrub(&a),
    };
    result.map_err(|e| anyhow::Error::new(crate::outcome::CommandFailed(e)))
}

// ---------------------------------------------------------------------------------------------
// create

/// The redo area for lanes of `lane_bytes`: the default, or a quarter of a smaller lane (whole
/// 64-byte lines, at least 1 KiB).
fn redo_bytes_for(lane_bytes: u32) -> u32 {
    let default = HeapOptions::default().redo_bytes;
    if lane_bytes >= 4 * default {
        default
    } else {
        (lane_bytes / 4 / 64 * 64).max(1024)
    }
}

fn create(a: &CreateArgs) -> Result<Outcome> {
    if a.path.symlink_metadata().is_ok() {
        bail!(
            "{} already exists; nothing was changed (`kavach heap create` makes a new file and \
             never overwrites one)",
            a.path.display()
        );
    }
    let lane_bytes = u32::try_from(a.lane_size)
        .ok()
        .filter(|b| b % 4096 == 0 && *b > 0)
        .ok_or_else(|| {
            anyhow!(
                "--lane-size {} is not a multiple of 4096 between 4KiB and 4GiB",
                a.lane_size
            )
        })?;
    let opts = HeapOptions {
        lanes: a.lanes,
        lane_bytes,
        redo_bytes: redo_bytes_for(lane_bytes),
    };
    if a.redundancy_period_ms.is_some() && a.redundancy != Redundancy::Lazy {
        bail!(
            "--redundancy-period-ms applies to --redundancy lazy only (not {}); nothing was created",
            a.redundancy.name()
        );
    }
    let hf =
        HeapFile::create_protected(&a.path, a.size, &opts, a.redundancy, a.redundancy_period_ms)
            .map_err(|e| {
                let hint = match &e {
                    HeapError::Invalid { what, .. } if *what == "heap size" => {
                        " (a bigger --size, or fewer or smaller lanes: --lanes, --lane-size)"
                    }
                    _ => "",
                };
                anyhow::Error::new(e).context(format!(
                    "cannot create heap pool {}{hint}; nothing was left behind",
                    a.path.display()
                ))
            })?;
    let region = hf.region().clone();
    let geo = hf.raw().geometry();
    let info = hf.pool().info();
    let redundancy = redundancy_text(hf.pool(), &region.name);
    hf.close()
        .with_context(|| format!("cannot close the new heap pool {}", a.path.display()))?;
    if a.json {
        print_json(&serde_json::json!({
            "path": a.path,
            "size": info.size,
            "domain": info.domain,
            "survives_reboot": info.survives_reboot,
            "region": region,
            "geometry": GeometryOut::of(&geo),
            "redundancy": redundancy,
        }))?;
    } else {
        println!(
            "created     {} ({}, domain {})",
            a.path.display(),
            format_size(info.size),
            info.domain
        );
        println!(
            "region      `{}` at pool byte {}, {}",
            region.name,
            region.offset,
            format_size(region.length)
        );
        println!(
            "lanes       {} x {} (undo {} each, redo {} each)",
            geo.lane_count,
            format_size(u64::from(geo.lane_bytes)),
            format_size(geo.undo_bytes()),
            format_size(u64::from(geo.redo_bytes))
        );
        println!(
            "data        {} chunks of {} ({})",
            geo.chunk_count,
            format_size(CHUNK_SIZE),
            format_size(geo.chunk_count * CHUNK_SIZE)
        );
        println!("redundancy  {redundancy}");
        if !info.survives_reboot {
            println!(
                "note: {} is on tmpfs: it survives crashes of Kavach, not a reboot",
                a.path.display()
            );
        }
    }
    Ok(Outcome::Ok)
}

// ---------------------------------------------------------------------------------------------
// opening read-only

/// A pool opened read-only, and its heap region.
struct Opened {
    pool: Pool<Mapping>,
    region: Region,
}

fn open_ro(path: &Path, name: Option<&str>) -> Result<Opened> {
    // Read-only: the mapping is read-only and the pool's state is not touched.
    let pool = Pool::open(
        path,
        &OpenOptions {
            read_only: true,
            domain: None,
        },
    )
    .with_context(|| format!("cannot open pool {}", path.display()))?;
    let region = heap_region(&pool, name, path)?;
    Ok(Opened { pool, region })
}

fn region_names(pool: &Pool<Mapping>) -> String {
    if pool.regions().is_empty() {
        return "it has no regions".into();
    }
    let names: Vec<String> = pool
        .regions()
        .iter()
        .map(|r| format!("`{}` ({})", r.name, kinds::name(r.kind)))
        .collect();
    format!("its regions: {}", names.join(", "))
}

/// The heap region `name`, or the pool's only heap region.
fn heap_region(pool: &Pool<Mapping>, name: Option<&str>, path: &Path) -> Result<Region> {
    let region = match name {
        Some(n) => {
            let r = pool.region(n).ok_or_else(|| {
                anyhow!(
                    "pool {} has no region `{n}` ({})",
                    path.display(),
                    region_names(pool)
                )
            })?;
            if r.kind != kinds::HEAP {
                bail!(
                    "region `{n}` of {} is a {} region, not a heap",
                    path.display(),
                    kinds::name(r.kind)
                );
            }
            r
        }
        None => {
            let heaps: Vec<&Region> = pool
                .regions()
                .iter()
                .filter(|r| r.kind == kinds::HEAP)
                .collect();
            match heaps.as_slice() {
                [] => bail!(
                    "pool {} has no heap region ({}; `kavach heap create` makes a pool with one)",
                    path.display(),
                    region_names(pool)
                ),
                [one] => *one,
                many => {
                    let names: Vec<String> = many.iter().map(|r| format!("`{}`", r.name)).collect();
                    bail!(
                        "pool {} has {} heap regions ({}); choose one with --region",
                        path.display(),
                        many.len(),
                        names.join(", ")
                    )
                }
            }
        }
    };
    Ok(region.clone())
}

/// What is wrong with each header copy, when neither decodes.
fn header_damage(o: &Opened, first: Corruption) -> Vec<Corruption> {
    let mut out = Vec::new();
    for at in [HEADER_COPY_0, HEADER_COPY_1] {
        let mut b = [0u8; HEADER_CRC_AT + 4];
        o.pool
            .medium()
            .read((o.region.offset + at) as usize, &mut b);
        if let Err(HeapError::Corrupt(c)) = Header::decode(&b, at, o.region.length) {
            out.push(c);
        }
    }
    if out.is_empty() {
        out.push(first);
    }
    out
}

/// The walk, or `Err(corruptions)` when the heap header has no good copy (the walk cannot
/// start). Other failures mean the command could not run.
fn walk_heap(
    o: &Opened,
    path: &Path,
    reachability: bool,
) -> Result<std::result::Result<(HeapReport, Geometry), Vec<Corruption>>> {
    let (medium, r) = (o.pool.medium(), &o.region);
    let header = match heap::raw::read_header(medium, r.offset, r.length) {
        Ok(h) => h,
        Err(HeapError::Corrupt(c)) => return Ok(Err(header_damage(o, c))),
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!(
                "cannot read heap `{}` in {}",
                r.name,
                path.display()
            )));
        }
    };
    let mut report = match walk(medium, r.offset, r.length, reachability) {
        Ok(rep) => rep,
        Err(HeapError::Corrupt(c)) => return Ok(Err(vec![c])),
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!(
                "cannot walk heap `{}` in {}",
                r.name,
                path.display()
            )));
        }
    };
    // A heap copied from another pool: its persistent pointers carry the other pool's id, and
    // opening refuses it.
    if header.uuid != o.pool.uuid().0 {
        report.damage.push(Corruption {
            structure: "heap header".into(),
            offset: r.offset + 16,
            field: "uuid",
            expected: "the pool's UUID".into(),
            found: "another pool's UUID (a copied region?)".into(),
        });
    }
    Ok(Ok((report, header.geo)))
}

// ---------------------------------------------------------------------------------------------
// JSON shapes

#[derive(Serialize)]
struct GeometryOut {
    region_bytes: u64,
    chunks: u64,
    chunk_bytes: u64,
    data_bytes: u64,
    lanes: u32,
    lane_bytes: u32,
    undo_bytes_per_lane: u64,
    redo_bytes_per_lane: u32,
}

impl GeometryOut {
    fn of(g: &Geometry) -> GeometryOut {
        GeometryOut {
            region_bytes: g.region_len,
            chunks: g.chunk_count,
            chunk_bytes: CHUNK_SIZE,
            data_bytes: g.chunk_count * CHUNK_SIZE,
            lanes: g.lane_count,
            lane_bytes: g.lane_bytes,
            undo_bytes_per_lane: g.undo_bytes(),
            redo_bytes_per_lane: g.redo_bytes,
        }
    }
}

/// A corruption with its parts as fields.
#[derive(Serialize)]
struct CorruptionOut<'a> {
    structure: &'a str,
    offset: u64,
    field: &'a str,
    expected: &'a str,
    found: &'a str,
    message: String,
}

fn corruptions(d: &[Corruption]) -> Vec<CorruptionOut<'_>> {
    d.iter()
        .map(|c| CorruptionOut {
            structure: &c.structure,
            offset: c.offset,
            field: c.field,
            expected: &c.expected,
            found: &c.found,
            message: c.to_string(),
        })
        .collect()
}

#[derive(Serialize)]
struct RegionOut<'a> {
    name: &'a str,
    offset: u64,
    length: u64,
}

impl<'a> RegionOut<'a> {
    fn of(r: &'a Region) -> Self {
        RegionOut {
            name: &r.name,
            offset: r.offset,
            length: r.length,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// check

fn check(a: &CheckArgs) -> Result<Outcome> {
    let o = open_ro(&a.path, a.region.as_deref())?;
    let walked = walk_heap(&o, &a.path, !a.no_leaks)?;
    let (report, walked_ok) = match walked {
        Ok((r, _)) => (r, true),
        Err(damage) => (
            HeapReport {
                region_bytes: o.region.length,
                damage,
                ..HeapReport::default()
            },
            false,
        ),
    };
    let clean = report.is_clean();
    if a.json {
        #[derive(Serialize)]
        struct Out<'a> {
            path: &'a Path,
            region: RegionOut<'a>,
            /// No damage, double allocation or leak.
            clean: bool,
            /// The walk got past the heap header.
            walked: bool,
            leaks_checked: bool,
            recovery_pending: bool,
            corruptions: Vec<CorruptionOut<'a>>,
            /// Damage to the pool's own metadata (`kavach pool check` names it).
            pool_damage: Vec<String>,
            #[serde(flatten)]
            report: &'a HeapReport,
        }
        print_json(&Out {
            path: &a.path,
            region: RegionOut::of(&o.region),
            clean,
            walked: walked_ok,
            leaks_checked: report.reachability_checked,
            recovery_pending: !report.pending.is_empty(),
            corruptions: corruptions(&report.damage),
            pool_damage: o.pool.damage().iter().map(|c| c.to_string()).collect(),
            report: &report,
        })?;
    } else {
        print_check(a, &o.region, &report, walked_ok);
        if !o.pool.damage().is_empty() {
            println!(
                "note: the pool's own metadata is damaged too ({} finding(s)): see `kavach pool \
                 check`",
                o.pool.damage().len()
            );
        }
    }
    Ok(if clean { Outcome::Ok } else { Outcome::Damage })
}

fn print_check(a: &CheckArgs, region: &Region, r: &HeapReport, walked: bool) {
    let block = |b: &BlockInfo| {
        format!(
            "block at heap offset {:#x} (pool byte {:#x}), {}",
            b.offset,
            region.offset + b.offset,
            format_size(b.size)
        )
    };
    for c in &r.damage {
        println!("damage: {c}");
    }
    if !walked {
        println!(
            "FATAL: heap `{}` has no good header copy: the walk stopped there, and the heap does \
             not open",
            region.name
        );
    }
    for b in &r.double_allocated {
        println!("double allocation: {}", block(b));
    }
    for b in &r.leaked {
        println!(
            "leak: {} is allocated but not reachable from the root",
            block(b)
        );
    }
    for p in &r.pending {
        let plural = |n: usize| if n == 1 { "y" } else { "ies" };
        if p.redo_entries > 0 {
            println!(
                "pending: lane {} has a committed redo log ({} redo entr{} to apply)",
                p.lane,
                p.redo_entries,
                plural(p.redo_entries)
            );
        }
        if p.undo_entries > 0 {
            println!(
                "pending: lane {} has an interrupted transaction ({} undo entr{} to roll back)",
                p.lane,
                p.undo_entries,
                plural(p.undo_entries)
            );
        }
    }
    for l in &r.unsaved {
        println!(
            "damage: lane {l}'s redo area says UNSAVED: durability-on-demand commits ran and no \
             save finished before the heap was last closed or power was lost; the heap may hold \
             part of a transaction and does not open"
        );
    }
    if !r.pending.is_empty() {
        println!(
            "note: recovery is pending; open the pool with a program that uses the heap and it \
             recovers; leaks are checked once no lane waits for recovery"
        );
    } else if walked && !r.reachability_checked && !a.no_leaks {
        println!("note: leaks were not checked, because the metadata is damaged");
    }
    let where_ = format!("{} heap `{}`", a.path.display(), region.name);
    if r.is_clean() && !r.pending.is_empty() {
        println!(
            "{where_}: no damage found; recovery pending on {} lane(s), so leaks were not checked \
             ({} blocks, {} allocated)",
            r.pending.len(),
            r.blocks,
            format_size(r.allocated_bytes),
        );
    } else if r.is_clean() {
        let leaks = if r.reachability_checked {
            if r.root.is_some() {
                ", all reachable from the root"
            } else {
                ", no root object"
            }
        } else {
            ", leaks not checked"
        };
        println!(
            "{where_}: healthy ({} blocks, {} allocated{leaks})",
            r.blocks,
            format_size(r.allocated_bytes),
        );
    } else {
        let mut parts = Vec::new();
        if !r.damage.is_empty() {
            parts.push(format!("{} damaged", r.damage.len()));
        }
        if !r.unsaved.is_empty() {
            parts.push(format!("{} lane(s) unsaved", r.unsaved.len()));
        }
        if !r.double_allocated.is_empty() {
            parts.push(format!("{} double allocated", r.double_allocated.len()));
        }
        if !r.leaked.is_empty() {
            parts.push(format!(
                "{} leaked ({})",
                r.leaked.len(),
                format_size(r.leaked.iter().map(|b| b.size).sum())
            ));
        }
        println!("{where_}: problems found: {}", parts.join(", "));
    }
}

// ---------------------------------------------------------------------------------------------
// stats

#[derive(Serialize)]
struct ClassOut {
    class: usize,
    block_size: u64,
    runs: u64,
    allocated: u64,
    capacity: u64,
    fill_percent: f64,
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        (part as f64 * 1000.0 / whole as f64).round() / 10.0
    }
}

fn stats(a: &StatsArgs) -> Result<Outcome> {
    let o = open_ro(&a.path, a.region.as_deref())?;
    let (r, geo) = walk_heap(&o, &a.path, false)?.map_err(|damage| {
        let what: Vec<String> = damage.iter().map(|c| format!("corrupt {c}")).collect();
        anyhow!(
            "heap `{}` in {} does not open: {} (see `kavach heap check`)",
            o.region.name,
            a.path.display(),
            what.join("; ")
        )
    })?;
    let classes: Vec<ClassOut> = r
        .classes
        .iter()
        .map(|c| ClassOut {
            class: CLASS_SIZES
                .iter()
                .position(|&s| u64::from(s) == c.block_size)
                .unwrap_or(usize::MAX),
            block_size: c.block_size,
            runs: c.runs,
            allocated: c.allocated,
            capacity: c.capacity,
            fill_percent: percent(c.allocated, c.capacity),
        })
        .collect();
    let small_blocks: u64 = classes.iter().map(|c| c.allocated).sum();
    let small_bytes: u64 = classes.iter().map(|c| c.allocated * c.block_size).sum();
    let large_blocks = r.blocks.saturating_sub(small_blocks);
    let large_bytes = r.allocated_bytes.saturating_sub(small_bytes);
    if a.json {
        #[derive(Serialize)]
        struct Chunks {
            free: u64,
            run: u64,
            large: u64,
        }
        #[derive(Serialize)]
        struct Large {
            blocks: u64,
            bytes: u64,
            chunks: u64,
        }
        #[derive(Serialize)]
        struct Root {
            offset: u64,
            size: u64,
        }
        #[derive(Serialize)]
        struct Out<'a> {
            path: &'a Path,
            region: RegionOut<'a>,
            geometry: GeometryOut,
            chunks: Chunks,
            blocks: u64,
            allocated_bytes: u64,
            classes: Vec<ClassOut>,
            large: Large,
            root: Option<Root>,
            redundancy: String,
            pending: &'a [heap::check::PendingLane],
            damage: Vec<CorruptionOut<'a>>,
        }
        print_json(&Out {
            path: &a.path,
            region: RegionOut::of(&o.region),
            geometry: GeometryOut::of(&geo),
            chunks: Chunks {
                free: r.free_chunks,
                run: r.run_chunks,
                large: r.large_chunks,
            },
            blocks: r.blocks,
            allocated_bytes: r.allocated_bytes,
            classes,
            large: Large {
                blocks: large_blocks,
                bytes: large_bytes,
                chunks: r.large_chunks,
            },
            root: r.root.map(|(offset, size)| Root { offset, size }),
            redundancy: redundancy_text(&o.pool, &o.region.name),
            pending: &r.pending,
            damage: corruptions(&r.damage),
        })?;
        return Ok(Outcome::Ok);
    }
    let g = &geo;
    let rows: Vec<(&str, String)> = vec![
        (
            "heap",
            format!("`{}` in {}", o.region.name, a.path.display()),
        ),
        (
            "region",
            format!(
                "{} ({} bytes) at pool byte {}",
                format_size(g.region_len),
                g.region_len,
                o.region.offset
            ),
        ),
        ("redundancy", redundancy_text(&o.pool, &o.region.name)),
        (
            "lanes",
            format!(
                "{} x {} (undo {} per lane, redo {} per lane)",
                g.lane_count,
                format_size(u64::from(g.lane_bytes)),
                format_size(g.undo_bytes()),
                format_size(u64::from(g.redo_bytes))
            ),
        ),
        (
            "chunks",
            format!(
                "{} x {} ({}): {} free, {} run, {} large",
                g.chunk_count,
                format_size(CHUNK_SIZE),
                format_size(g.chunk_count * CHUNK_SIZE),
                r.free_chunks,
                r.run_chunks,
                r.large_chunks
            ),
        ),
        (
            "allocated",
            format!(
                "{} blocks, {} ({:.1}% of the data chunks)",
                r.blocks,
                format_size(r.allocated_bytes),
                percent(r.allocated_bytes, g.chunk_count * CHUNK_SIZE)
            ),
        ),
        (
            "root",
            match r.root {
                Some((off, size)) => format!("heap offset {off:#x}, {size} bytes"),
                None => "none".into(),
            },
        ),
        (
            "pending",
            if r.pending.is_empty() {
                "none".into()
            } else {
                let lanes: Vec<String> = r.pending.iter().map(|p| p.lane.to_string()).collect();
                let (noun, verb) = if lanes.len() == 1 {
                    ("lane", "has")
                } else {
                    ("lanes", "have")
                };
                format!(
                    "{noun} {} {verb} an interrupted transaction (open the pool with a program \
                     to recover)",
                    lanes.join(", ")
                )
            },
        ),
        (
            "damage",
            if r.damage.is_empty() && r.double_allocated.is_empty() {
                "none found by this walk (`kavach heap check` also looks for leaks)".into()
            } else {
                format!(
                    "{} finding(s), {} double allocated: see `kavach heap check`",
                    r.damage.len(),
                    r.double_allocated.len()
                )
            },
        ),
    ];
    for (k, v) in rows {
        println!("{k:<11} {v}");
    }
    println!();
    println!(
        "{:>5}  {:>10}  {:>6}  {:>10}  {:>10}  {:>6}  {:>10}",
        "CLASS", "BLOCK", "RUNS", "ALLOCATED", "CAPACITY", "FILL", "BYTES"
    );
    for c in &classes {
        println!(
            "{:>5}  {:>10}  {:>6}  {:>10}  {:>10}  {:>5.1}%  {:>10}",
            c.class,
            format_size(c.block_size),
            c.runs,
            c.allocated,
            c.capacity,
            c.fill_percent,
            format_size(c.allocated * c.block_size)
        );
    }
    if large_blocks > 0 {
        println!(
            "{:>5}  {:>10}  {:>6}  {:>10}  {:>10}  {:>6}  {:>10}",
            "large",
            "chunks",
            "-",
            large_blocks,
            "-",
            "-",
            format_size(large_bytes)
        );
    }
    if classes.is_empty() && large_blocks == 0 {
        println!("(nothing allocated)");
    }
    Ok(Outcome::Ok)
}

// ---------------------------------------------------------------------------------------------
// scrub

fn scrub(a: &ScrubArgs) -> Result<Outcome> {
    let what = |r: &Region| format!("heap `{}` in {}", r.name, a.path.display());
    let (region, report, pending) = if a.repair {
        let pool = Pool::open(
            &a.path,
            &OpenOptions {
                read_only: false,
                domain: None,
            },
        )
        .with_context(|| format!("cannot open pool {}", a.path.display()))?;
        let region = match heap_region(&pool, a.region.as_deref(), &a.path) {
            Ok(r) => r,
            Err(e) => {
                return Err(put_back(pool, e, &a.path));
            }
        };
        let pool = pool.map_medium(std::sync::Arc::new);
        let medium: std::sync::Arc<dyn Medium> = pool.medium().clone();
        let scrubbed = heap::RawHeap::open(medium, region.offset, region.length)
            .and_then(|raw| {
                let rep = heap::reliable::scrub(&raw, true)?;
                raw.quiesce()?;
                Ok(rep)
            })
            .with_context(|| format!("cannot scrub {}", what(&region)));
        match scrubbed {
            Ok(rep) => {
                pool.close()
                    .with_context(|| format!("cannot close pool {}", a.path.display()))?;
                (region, rep, false)
            }
            Err(e) => {
                return Err(match pool.close_unchanged() {
                    Ok(_) => e,
                    Err(undo) => e.context(format!(
                        "and {} could not be put back as it was found ({undo})",
                        a.path.display()
                    )),
                });
            }
        }
    } else {
        let o = open_ro(&a.path, a.region.as_deref())?;
        let (medium, r) = (o.pool.medium(), &o.region);
        let rep = heap::reliable::scrub_medium(medium, r.offset, r.length)
            .with_context(|| format!("cannot scrub {}", what(r)))?;
        let pending = walk(medium, r.offset, r.length, false)
            .map(|w| !w.pending.is_empty())
            .unwrap_or(false);
        (o.region, rep, pending)
    };
    let clean = report.is_clean();
    if a.json {
        #[derive(Serialize)]
        struct Out<'a> {
            path: &'a Path,
            region: RegionOut<'a>,
            clean: bool,
            recovery_pending: bool,
            #[serde(flatten)]
            report: &'a heap::reliable::ScrubReport,
        }
        print_json(&Out {
            path: &a.path,
            region: RegionOut::of(&region),
            clean,
            recovery_pending: pending,
            report: &report,
        })?;
    } else {
        print_scrub(a, &region, &report, pending);
    }
    Ok(if clean { Outcome::Ok } else { Outcome::Damage })
}

/// Put a pool opened read-write back as it was found, keeping `e` as the error.
fn put_back(pool: Pool<Mapping>, e: anyhow::Error, path: &Path) -> anyhow::Error {
    match pool.close_unchanged() {
        Ok(_) => e,
        Err(undo) => e.context(format!(
            "and {} could not be put back as it was found ({undo})",
            path.display()
        )),
    }
}

fn print_scrub(a: &ScrubArgs, region: &Region, r: &heap::reliable::ScrubReport, pending: bool) {
    println!(
        "heap `{}` in {}: {} reliable object(s) among {} block(s), {} pair(s) checked",
        region.name,
        a.path.display(),
        r.objects,
        r.blocks,
        r.pairs_checked
    );
    let verb = if a.repair { "corrected" } else { "correctable" };
    for c in &r.corrected {
        println!(
            "{verb}: object at heap offset {:#x}, {}: pair at pool byte {:#x}, {} flipped bit(s) in the data word, {} in the check word",
            c.object, c.part, c.medium_offset, c.data_flips, c.check_flips
        );
    }
    for d in &r.uncorrectable {
        println!(
            "UNCORRECTABLE: object at heap offset {:#x}, {}: pair at pool byte {:#x}: {}",
            d.object, d.part, d.medium_offset, d.detail
        );
    }
    for c in &r.skipped_chunks {
        println!(
            "note: chunk {c} skipped: its chunk-table word is damaged (see `kavach heap check`)"
        );
    }
    if pending {
        println!(
            "note: a transaction was interrupted and recovery is pending; damage inside it may be \
             its half-written words (open the heap with a program, or scrub with --repair)"
        );
    }
    if r.is_clean() {
        println!("clean: every pair checks");
    } else {
        let left = if a.repair {
            format!("{} pair(s) corrected and written back", r.corrected.len())
        } else {
            format!(
                "{} pair(s) correctable (run with --repair to write the corrections)",
                r.corrected.len()
            )
        };
        println!(
            "damage: {left}; {} uncorrectable word(s)",
            r.uncorrectable.len()
        );
    }
}
