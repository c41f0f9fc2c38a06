//! `kavach pool ...` and `kavach region ...`.

use crate::integrity_cmd::{self, ModeArg};
use crate::outcome::{CouldNotRun, Outcome, check_output_path, print_json, refused};
use crate::units::{format_size, format_time_ns, parse_size};
use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use pmem::check::{Severity, check_file};
use pmem::set::{self, SetOpenOptions, SetStatus, StripedSet};
use pmem::{Alignment, CreateOptions, Domain, Medium, OpenOptions, Pool, PoolInfo, kinds};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, Subcommand)]
pub enum PoolCommand {
    /// Create a new pool file (it must not exist).
    ///
    /// The whole size is reserved at once. On /dev/shm the pool is PM emulated in DRAM: it
    /// survives process crashes but not a reboot.
    ///
    /// With --redundancy, the pool gets a data region `data` protected by the integrity layer:
    /// a checksum per 4 KiB page and XOR parity per stripe of --stripe pages, kept in a second
    /// region `data.integrity`; the two fill the pool. Then `kavach debug fill`, `kavach inject`,
    /// `kavach scrub` and `kavach repair` work on it.
    #[command(after_help = "Examples:\n  \
        kavach pool create /dev/shm/a.pool --size 64MiB\n  \
        kavach pool create /dev/shm/p.pool --size 64MiB --redundancy lazy --period-ms 500\n  \
        kavach pool create /dev/shm/p.pool --size 64MiB --redundancy eager --stripe 8 --json")]
    Create(CreateArgs),
    /// Show a pool's size, domain, UUID, regions and clean-shutdown state, and each protected
    /// region's redundancy (mode, stripes, period, state, sizes) (read-only).
    Info(InfoArgs),
    /// Validate a pool's header and region directory without changing anything.
    ///
    /// `kavach pool repair` rebuilds what a good copy proves and names what it cannot.
    ///
    /// Exit status: 0 healthy, 1 damage found (the report says whether the pool still opens),
    /// 2 the check could not run (missing file, not a Kavach pool, pool in use).
    ///
    /// On a pool set (`pool create --files`): a lost member is damage, and with every member
    /// present each row's parity is checked against its data (a mismatch is damage inside a
    /// member, which reads would not notice); two members lost exit 2.
    Check(InfoArgs),
    /// Rebuild damaged pool metadata from a good copy, only where the good copy proves what the
    /// damaged bytes must hold; everything else is reported with the reason and left as it is.
    ///
    /// Repaired: a header copy that fails its checks, from the other copy when that one is
    /// valid (not when the bad copy names a newer format version, and not when both copies are
    /// valid but disagree); stray non-zero bytes in the unused parts of the header pages (unless
    /// the pool has feature bits this version does not know); a damaged mutable slot next to a
    /// valid one (cleared: every open already ignores it); the region directory copy in force,
    /// from the other copy when that holds a valid mirror of the same generation, and the
    /// mirror, from the copy in force. Never repaired: a truncated or resized file, no valid
    /// header or state, a directory with no valid copy of the generation in force (an older one
    /// would silently undo the last region change). Region contents are not metadata: see
    /// `kavach repair` for protected regions.
    ///
    /// The pool is locked exclusively while it is repaired. `kavach pool check` exits 0 after a
    /// repair that exits 0.
    ///
    /// Exit status: 0 repaired, or nothing to repair; 1 damage remains (each piece is named with
    /// the reason it could not be repaired); 2 the repair could not run (missing file, not a
    /// Kavach pool, pool in use).
    #[command(after_help = "Examples:\n  \
        kavach pool check /dev/shm/a.pool || kavach pool repair /dev/shm/a.pool\n  \
        kavach pool repair /dev/shm/a.pool --json")]
    Repair(InfoArgs),
    /// Rebuild a lost member of a pool set (`pool create --files`) into a new file, from the
    /// other members; afterwards the set is healthy again and names NEW in place of OLD.
    ///
    /// A healthy set's member can be replaced too (it is dropped first). The description is
    /// rewritten to name NEW before the rebuild starts; NEW counts as a member only once its
    /// header is written at the end, so an interrupted rebuild leaves the set degraded as
    /// before: run `pool rebuild PATH --replace NEW NEW` to start again. Progress goes to
    /// stderr. OLD is left as it is.
    ///
    /// Exit status: 0 rebuilt; 2 could not run (not a set, OLD not a member, NEW exists, another
    /// member lost, the set not closed cleanly while degraded and no --force).
    #[command(after_help = "Examples:\n  \
        kavach pool create /dev/shm/s.pool --size 64MiB --files 3\n  \
        rm /dev/shm/s.pool.1\n  \
        kavach pool info /dev/shm/s.pool\n  \
        kavach pool rebuild /dev/shm/s.pool --replace /dev/shm/s.pool.1 /dev/shm/s.pool.1b")]
    Rebuild(RebuildArgs),
    /// Show this machine's copy, flush and CRC choices and where each came from, or redo them.
    ///
    /// Four choices tune the persistence paths to the CPU: `nt_min` (payloads of at least
    /// this many bytes are copied with non-temporal stores; smaller ones with ordinary stores
    /// written back line by line), `crc_fold_min` (CRC-32C inputs of at least this many bytes
    /// use carry-less-multiply folding, smaller ones the SSE4.2 loop), `flush` (clwb or
    /// clflushopt) and `stream_sync` (on: a record forced at once, the log's Sync append, is
    /// written whole with non-temporal stores, header line included, then one fence; off:
    /// ordinary stores, a write-back of each line, a fence). Each is `calibrated` (timed in this
    /// process: tens of milliseconds),
    /// `cached` (read from the cache file an earlier calibration on this CPU and build wrote),
    /// `override` (KAVACH_TUNE, or KAVACH_FLUSH for the flush) or `default` (KAVACH_TUNE=off).
    /// Every choice gives the same bytes and CRCs: a pool written under one reads under any.
    ///
    /// Environment: KAVACH_TUNE=off, or
    /// KAVACH_TUNE=nt_min=4096,crc_fold_min=2048,flush=clwb,stream_sync=on (any subset; `never`
    /// for a threshold never reached; a bad value is warned about and KAVACH_TUNE ignored);
    /// KAVACH_TUNE_CACHE=PATH or off
    /// (default $XDG_CACHE_HOME/kavach/tune, else ~/.cache/kavach/tune; format in
    /// docs/format/tune-cache.md; it keeps one entry per CPU and build, so test and release
    /// builds do not replace each other's). A garbled cache file is ignored with a warning and
    /// rewritten.
    ///
    /// Exit status: 0 shown (or recalibrated and cached); 2 could not run (--recalibrate could
    /// not write the cache file).
    #[command(after_help = "Examples:\n  \
        kavach pool tune\n  \
        kavach pool tune --recalibrate --json\n  \
        KAVACH_TUNE=nt_min=never kavach pool tune\n  \
        KAVACH_TUNE=stream_sync=off kavach pool tune")]
    Tune(TuneArgs),
}

#[derive(Debug, Args)]
pub struct TuneArgs {
    /// Time every candidate again now (ignoring the cache file and KAVACH_TUNE) and rewrite the
    /// cache file; prints what was measured. Takes effect in processes started afterwards.
    #[arg(long)]
    pub recalibrate: bool,
    /// Print the choices (and with --recalibrate the measurements) as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Path of the new pool file.
    pub path: PathBuf,
    /// Size in bytes: a multiple of 4096, at least 64KiB. Units: K, M, G, T and KiB, MiB, GiB,
    /// TiB are powers of 1024; KB, MB, GB, TB are powers of 1000 (as in coreutils).
    #[arg(long, value_parser = parse_size)]
    pub size: u64,
    /// Persistence domain to record: auto detects it (adr on DAX or /dev/shm, msync on disk).
    /// A domain the file cannot run in is refused (adr or eadr on an ordinary disk file, where
    /// only msync makes writes durable; msync on DAX or /dev/shm, where every open runs adr).
    #[arg(long, value_enum, default_value_t = DomainArg::Auto)]
    pub domain: DomainArg,
    /// Give the pool a data region `data` with redundancy kept in this mode (recorded; the
    /// default for later opens).
    #[arg(long, value_enum)]
    pub redundancy: Option<ModeArg>,
    /// With --redundancy: lazy mode's update period, 100 to 60000 ms (recorded in any mode,
    /// used whenever the region is kept lazily).
    #[arg(
        long,
        requires = "redundancy",
        default_value_t = integrity::layout::PERIOD_MS_DEFAULT,
        value_parser = clap::value_parser!(u32).range(
            integrity::layout::PERIOD_MS_MIN as i64..=integrity::layout::PERIOD_MS_MAX as i64
        )
    )]
    pub period_ms: u32,
    /// With --redundancy: data pages per stripe (one parity page each), 2 to 32.
    #[arg(
        long,
        requires = "redundancy",
        default_value_t = integrity::layout::STRIPE_PAGES_DEFAULT,
        value_parser = clap::value_parser!(u32).range(
            integrity::layout::STRIPE_PAGES_MIN as i64..=integrity::layout::STRIPE_PAGES_MAX as i64
        )
    )]
    pub stripe: u32,
    /// Spread the pool over this many member files (3 to 64) with rotating parity, so it
    /// survives the loss of any one of them. PATH is then a small text file naming the members,
    /// which are created beside it as PATH.0, PATH.1, ... (see docs/format/pool-set.md). The
    /// members together hold --size (rounded up to whole rows of chunks) plus one chunk of
    /// parity per row.
    #[arg(long, conflicts_with = "redundancy", value_parser = clap::value_parser!(u64).range(3..=64))]
    pub files: Option<u64>,
    /// With --files: the chunk, a power of two from 4KiB to 1GiB (default 1MiB). Parity rotates
    /// across the members by rows of one chunk each.
    #[arg(long, requires = "files", value_parser = parse_size)]
    pub chunk: Option<u64>,
    /// Print the new pool's info as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RebuildArgs {
    /// Path of the set description (the PATH given to `pool create --files`).
    pub path: PathBuf,
    /// OLD NEW: the member to replace, as the description names it (or any path to the same
    /// file), and the path of the new member file, which must not exist unless it is OLD
    /// itself (rebuild a lost member in place, or restart an interrupted rebuild).
    #[arg(long, num_args = 2, value_names = ["OLD", "NEW"])]
    pub replace: Vec<PathBuf>,
    /// Open the set even if it was not closed cleanly while a member was lost: rows being
    /// written at that crash may be rebuilt wrong (the RAID-5 write hole).
    #[arg(long)]
    pub force: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DomainArg {
    /// Detect from the mapping.
    Auto,
    /// Write back cache lines, then fence (real or emulated PM).
    Adr,
    /// Fence only (caches are persistent: eADR or flush-on-fail).
    Eadr,
    /// msync the touched pages (ordinary file systems).
    Msync,
}

impl DomainArg {
    fn domain(self) -> Option<Domain> {
        match self {
            DomainArg::Auto => None,
            DomainArg::Adr => Some(Domain::Adr),
            DomainArg::Eadr => Some(Domain::Eadr),
            DomainArg::Msync => Some(Domain::Msync),
        }
    }
}

#[derive(Debug, Args)]
pub struct InfoArgs {
    /// Path of the pool file.
    pub path: PathBuf,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum RegionCommand {
    /// Create a region (crash-atomic).
    Create(RegionCreateArgs),
    /// Remove a region (crash-atomic); its bytes are left in place.
    ///
    /// A region that a layer owns (a log, a heap, integrity metadata), or that the integrity
    /// layer protects (`data` of `pool create --redundancy` has `data.integrity`), is refused
    /// without --force: removing it loses what that layer keeps there.
    Remove(RegionRemoveArgs),
    /// List the regions.
    List(InfoArgs),
}

#[derive(Debug, Args)]
pub struct RegionCreateArgs {
    /// Path of the pool file.
    pub path: PathBuf,
    /// Region name: 1 to 32 bytes of UTF-8.
    pub name: String,
    /// Size, rounded up to whole 4 KiB pages. Units: K, M, G, T and KiB, MiB, GiB, TiB are
    /// powers of 1024; KB, MB, GB, TB are powers of 1000.
    #[arg(long, value_parser = parse_size)]
    pub size: u64,
    /// Alignment of the region's start.
    #[arg(long, value_enum, default_value_t = AlignArg::Page)]
    pub align: AlignArg,
    /// Print the region as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum AlignArg {
    /// 4 KiB.
    #[value(name = "4k")]
    Page,
    /// 2 MiB (huge page).
    #[value(name = "2m")]
    Huge,
}

#[derive(Debug, Args)]
pub struct RegionRemoveArgs {
    /// Path of the pool file.
    pub path: PathBuf,
    /// Region name.
    pub name: String,
    /// Remove it even if a layer owns it or the integrity layer protects it.
    #[arg(long)]
    pub force: bool,
}

fn open_rw(path: &Path) -> Result<Pool<pmem::Mapping>> {
    Pool::open(path, &OpenOptions::default())
        .with_context(|| format!("cannot open pool {}", path.display()))
}

fn open_ro(path: &Path) -> Result<Pool<pmem::Mapping>> {
    Pool::open(
        path,
        &OpenOptions {
            read_only: true,
            domain: None,
        },
    )
    .with_context(|| format!("cannot open pool {}", path.display()))
}

pub fn run_pool(cmd: PoolCommand) -> Result<Outcome> {
    match cmd {
        PoolCommand::Create(a) if a.files.is_some() => create_set(&a),
        PoolCommand::Info(a) if set::is_description(&a.path) => set_info(&a),
        PoolCommand::Check(a) if set::is_description(&a.path) => set_check(&a),
        PoolCommand::Rebuild(a) => rebuild_set(&a),
        PoolCommand::Tune(a) => tune(&a),
        PoolCommand::Create(a) => {
            let mut pool = Pool::create(
                &a.path,
                &CreateOptions {
                    size: a.size,
                    domain: a.domain.domain(),
                },
            )
            .with_context(|| format!("cannot create pool {}", a.path.display()))?;
            if let Some(mode) = a.redundancy {
                let made = integrity_cmd::protect_new_pool(&mut pool, mode, a.stripe, a.period_ms);
                if let Err(e) = made {
                    // The file is ours (create refuses an existing one): leave nothing behind.
                    drop(pool);
                    let _ = std::fs::remove_file(&a.path);
                    return Err(e.context(format!(
                        "cannot create pool {} with redundancy; nothing was left behind",
                        a.path.display()
                    )));
                }
            }
            // Reopened read-only on the same mapping, so the info shows the pool as closed.
            let pool = Pool::open_medium(
                Arc::new(pool.close()?),
                &OpenOptions {
                    read_only: true,
                    domain: None,
                },
            )
            .with_context(|| format!("cannot reopen the new pool {}", a.path.display()))?;
            let info = pool.info();
            let facts = integrity_cmd::integrity_facts(&pool);
            drop(pool);
            if a.json {
                print_json(&integrity_cmd::info_json(&info, &facts)?)?;
            } else {
                println!(
                    "created {} ({}, domain {}, uuid {})",
                    a.path.display(),
                    format_size(info.size),
                    info.domain,
                    info.uuid
                );
                integrity_cmd::print_facts(&facts);
                if !info.survives_reboot {
                    println!(
                        "note: {} is on tmpfs: it survives crashes of Kavach, not a reboot",
                        a.path.display()
                    );
                }
            }
            Ok(Outcome::Ok)
        }
        PoolCommand::Info(a) => {
            let pool = open_ro(&a.path)?.map_medium(Arc::new);
            let info = pool.info();
            let facts = integrity_cmd::integrity_facts(&pool);
            if a.json {
                let mut v = integrity_cmd::info_json(&info, &facts)?;
                v["tuning"] = serde_json::to_value(pmem::tune::current())?;
                print_json(&v)?;
            } else {
                print_info(&info);
                integrity_cmd::print_facts(&facts);
                print_tuning(pmem::tune::current());
            }
            Ok(Outcome::Ok)
        }
        PoolCommand::Check(a) => check(&a),
        PoolCommand::Repair(a) => repair(&a),
    }
}

/// A size-chosen strategy and where it starts: "`what` from N bytes", or "`what`: never" when
/// no size uses it.
fn threshold(what: &str, v: Option<usize>) -> String {
    match v {
        Some(n) => format!("{what} from {n} bytes"),
        None => format!("{what}: never"),
    }
}

/// Human lines for the tuning in force (`pool info`, `pool tune`).
pub fn print_tuning(t: &pmem::tune::Tuning) {
    println!("cpu         {} ({})", t.cpu.brand, t.cpu.key());
    println!(
        "tuning      {} ({}); {} ({}); flush {} ({}); streamed sync records: {} ({})",
        threshold("non-temporal copies", t.nt_min),
        t.nt_min_source.name(),
        threshold("folding CRC", t.crc_fold_min),
        t.crc_fold_min_source.name(),
        t.flush.name(),
        t.flush_source.name(),
        if t.stream_sync { "yes" } else { "no" },
        t.stream_sync_source.name()
    );
    match &t.cache_path {
        Some(p) => println!("tune cache  {}", p.display()),
        None => println!("tune cache  none"),
    }
    for w in &t.warnings {
        println!("warning     {w}");
    }
}

fn tune(a: &TuneArgs) -> Result<Outcome> {
    if !a.recalibrate {
        let t = pmem::tune::current();
        if a.json {
            print_json(t)?;
        } else {
            print_tuning(t);
        }
        return Ok(Outcome::Ok);
    }
    let cpu = pmem::tune::CpuIdentity::detect();
    let (choices, measured) = pmem::tune::calibrate_measured(&cpu);
    let (t, written) = pmem::tune::store_calibration(cpu, choices);
    if a.json {
        print_json(&serde_json::json!({
            "tuning": t,
            "sizes": pmem::tune::CALIBRATION_SIZES,
            "record_payload_sizes": pmem::tune::STREAM_SYNC_PAYLOADS,
            "measured_ns": measured,
            "cache_written": written.is_ok(),
        }))?;
    } else {
        print_tuning(&t);
        // A table row: a label `width` wide, then one 8-wide cell per size.
        let row = |width: usize, name: &str, cells: Vec<String>| {
            println!("  {name:<width$}{}", cells.join(""));
        };
        let ns = |v: &[f64]| v.iter().map(|x| format!("{x:>8.1}")).collect::<Vec<_>>();
        let heads = |v: &[usize]| v.iter().map(|s| format!("{s:>8}")).collect::<Vec<_>>();
        println!("measured, ns per operation (medians):");
        row(22, "bytes", heads(&pmem::tune::CALIBRATION_SIZES));
        row(22, "copy+flush+fence", ns(&measured.copy_temporal_ns));
        row(22, "non-temporal+fence", ns(&measured.copy_nontemporal_ns));
        row(22, "crc sse4.2", ns(&measured.crc_sse42_ns));
        row(22, "crc folding", ns(&measured.crc_fold_ns));
        for (k, ns) in &measured.flush_ns {
            println!("  1 KiB store+{k}+sfence: {ns:.1}");
        }
        println!(
            "whole records ({}-byte header + payload, in 64-byte lines), ns per record (medians):",
            pmem::tune::RECORD_HEADER_BYTES
        );
        row(
            30,
            "payload bytes",
            heads(&pmem::tune::STREAM_SYNC_PAYLOADS),
        );
        row(
            30,
            &format!("ordinary record+{}+fence", measured.record_flush),
            ns(&measured.record_ordinary_ns),
        );
        row(
            30,
            "streamed record+fence",
            ns(&measured.record_streamed_ns),
        );
    }
    match written {
        Ok(()) => Ok(Outcome::Ok),
        Err(e) => {
            Err(anyhow::Error::new(CouldNotRun)
                .context(format!("cannot write the tuning cache: {e}")))
        }
    }
}

pub fn print_info(info: &PoolInfo) {
    println!("pool        {}", info.path.display());
    println!("uuid        {}", info.uuid);
    println!(
        "size        {} ({} bytes, {}-byte pages{})",
        format_size(info.size),
        info.size,
        info.page_size,
        if info.growable {
            "; grows with its regions"
        } else {
            ""
        }
    );
    println!("created     {}", format_time_ns(info.created_ns));
    let durability = if info.survives_reboot {
        "durable across reboot"
    } else {
        "NOT durable across reboot"
    };
    let recorded = match pmem::pool::domain_runs_on(info.recorded_domain, info.backing) {
        Ok(()) => format!("recorded {}", info.recorded_domain),
        Err(_) => format!(
            "recorded {}, which a {} file cannot run in",
            info.recorded_domain,
            info.backing.name()
        ),
    };
    println!(
        "domain      {} ({recorded}; detected {}; backing {}: {durability})",
        info.domain,
        info.detected_domain,
        info.backing.name()
    );
    println!("flush       {}", info.flush_instruction.name());
    println!(
        "shutdown    {}",
        if info.clean_shutdown {
            "clean"
        } else {
            "NOT clean: the last user did not close the pool (crash or kill)"
        }
    );
    println!(
        "state       sequence {}, directory generation {}",
        info.state_sequence, info.directory_generation
    );
    println!(
        "regions     {} ({} free)",
        info.regions.len(),
        format_size(info.free_bytes)
    );
    if !info.regions.is_empty() {
        println!(
            "  {:<32} {:<10} {:>14} {:>12} {:>6}",
            "NAME", "KIND", "OFFSET", "LENGTH", "ALIGN"
        );
        for r in &info.regions {
            let align = match r.region.align {
                Alignment::Page => "4KiB",
                Alignment::Huge => "2MiB",
            };
            println!(
                "  {:<32} {:<10} {:>14} {:>12} {:>6}",
                r.region.name,
                format!("{}({})", r.kind_name, r.region.kind),
                format!("{:#x}", r.region.offset),
                format_size(r.region.length),
                align
            );
        }
    }
    if info.damage.is_empty() {
        println!("damage      none");
    } else {
        for d in &info.damage {
            println!("damage      {d}");
        }
    }
}

fn check(a: &InfoArgs) -> Result<Outcome> {
    let report = check_file(&a.path).map_err(|e| {
        anyhow::Error::new(CouldNotRun).context(format!("cannot check {}: {e}", a.path.display()))
    })?;
    if a.json {
        #[derive(serde::Serialize)]
        struct Out<'a> {
            healthy: bool,
            opens: bool,
            #[serde(flatten)]
            report: &'a pmem::check::CheckReport,
        }
        print_json(&Out {
            healthy: report.healthy(),
            opens: report.opens(),
            report: &report,
        })?;
    } else if report.healthy() {
        println!(
            "{}: healthy ({} regions, {} shutdown)",
            a.path.display(),
            report.regions.unwrap_or(0),
            if report.clean_shutdown == Some(true) {
                "clean"
            } else {
                "unclean"
            }
        );
    } else {
        for f in &report.findings {
            let tag = match f.severity {
                Severity::Damage => "damage",
                Severity::Fatal => "FATAL",
            };
            println!("{tag}: {}", f.message);
        }
        println!(
            "{}: {} finding(s); {}",
            a.path.display(),
            report.findings.len(),
            if report.opens() {
                "the pool still opens"
            } else {
                "the pool does NOT open"
            }
        );
    }
    Ok(if report.healthy() {
        Outcome::Ok
    } else {
        Outcome::Damage
    })
}

pub fn run_region(cmd: RegionCommand) -> Result<Outcome> {
    let path = match &cmd {
        RegionCommand::Create(a) => &a.path,
        RegionCommand::Remove(a) => &a.path,
        RegionCommand::List(a) => &a.path,
    };
    if set::is_description(path) {
        region_on(cmd, |p| open_set_pool(p, false), |p| open_set_pool(p, true))
    } else {
        region_on(cmd, open_rw, open_ro)
    }
}

/// The pool on the set a description names, read-write or read-only.
fn open_set_pool(path: &Path, read_only: bool) -> Result<Pool<StripedSet<pmem::Mapping>>> {
    let s = StripedSet::open_files(
        path,
        SetOpenOptions {
            read_only,
            force: false,
        },
    )
    .with_context(|| format!("cannot open pool set {}", path.display()))?;
    Pool::open_medium(
        s,
        &OpenOptions {
            read_only,
            domain: None,
        },
    )
    .with_context(|| format!("cannot open the pool on set {}", path.display()))
}

fn region_on<M: Medium>(
    cmd: RegionCommand,
    open_rw: impl Fn(&Path) -> Result<Pool<M>>,
    open_ro: impl Fn(&Path) -> Result<Pool<M>>,
) -> Result<Outcome> {
    match cmd {
        RegionCommand::Create(a) => {
            let mut pool = open_rw(&a.path)?;
            let align = match a.align {
                AlignArg::Page => Alignment::Page,
                AlignArg::Huge => Alignment::Huge,
            };
            let made = pool
                .create_region(&a.name, kinds::RAW, a.size, align)
                .with_context(|| format!("cannot create region `{}`", a.name));
            let r = finish(pool, made, &a.path)?;
            if a.json {
                print_json(&r)?;
            } else {
                println!(
                    "created region `{}` at offset {:#x}, {}",
                    r.name,
                    r.offset,
                    format_size(r.length)
                );
            }
        }
        RegionCommand::Remove(a) => {
            let mut pool = open_rw(&a.path)?;
            let removed = refuse_owned(&pool, &a).and_then(|()| {
                pool.remove_region(&a.name)
                    .with_context(|| format!("cannot remove region `{}`", a.name))
            });
            let r = finish(pool, removed, &a.path)?;
            println!(
                "removed region `{}` ({} at offset {:#x})",
                r.name,
                format_size(r.length),
                r.offset
            );
        }
        RegionCommand::List(a) => {
            let pool = open_ro(&a.path)?;
            if a.json {
                print_json(&pool.info().regions)?;
            } else {
                for r in pool.regions() {
                    println!(
                        "{}\t{}\t{:#x}\t{}",
                        r.name,
                        kinds::name(r.kind),
                        r.offset,
                        r.length
                    );
                }
            }
        }
    }
    Ok(Outcome::Ok)
}

/// End a read-write region command: close the pool if `result` is `Ok`; otherwise put the pool
/// back exactly as it was found (the failed command changed nothing, so the in-use mark the open
/// wrote goes too, and the clean-shutdown flag is the one found) and return the error.
fn finish<T, M: Medium>(pool: Pool<M>, result: Result<T>, path: &Path) -> Result<T> {
    match result {
        Ok(v) => {
            pool.close()
                .with_context(|| format!("cannot close pool {}", path.display()))?;
            Ok(v)
        }
        Err(e) => match pool.close_unchanged() {
            Ok(_) => Err(e),
            Err(undo) => Err(e.context(format!(
                "and {} could not be put back as it was found ({undo})",
                path.display()
            ))),
        },
    }
}

/// Refuse, without --force, to remove a region that a layer owns or that the integrity layer
/// protects.
fn refuse_owned<M: Medium>(pool: &Pool<M>, a: &RegionRemoveArgs) -> Result<()> {
    let Some(r) = pool.region(&a.name) else {
        return Ok(()); // remove_region names the missing region
    };
    if a.force {
        return Ok(());
    }
    let protector = integrity::meta_region_name(&r.name)
        .ok()
        .and_then(|m| pool.region(&m))
        .filter(|m| m.kind == kinds::INTEGRITY);
    let why = if let Some(m) = protector {
        format!(
            "the integrity layer protects it: `{}` holds its checksums and parity, and its data \
             is what they protect",
            m.name
        )
    } else if r.kind == kinds::INTEGRITY {
        let data = r.name.strip_suffix(".integrity").unwrap_or(&r.name);
        format!(
            "it holds the checksums and parity that protect region `{data}`; without them \
             `{data}` can no longer be scrubbed or repaired"
        )
    } else if r.kind != kinds::RAW {
        format!(
            "a layer owns it (kind {}): removing it loses what that layer keeps there",
            kinds::name(r.kind)
        )
    } else {
        return Ok(());
    };
    anyhow::bail!(
        "refusing to remove region `{}` of {}: {why}; add --force to remove it anyway",
        r.name,
        a.path.display()
    )
}

fn repair(a: &InfoArgs) -> Result<Outcome> {
    let report = pmem::repair::repair_file(&a.path).map_err(|e| {
        anyhow::Error::new(CouldNotRun).context(format!("cannot repair {}: {e}", a.path.display()))
    })?;
    if a.json {
        #[derive(serde::Serialize)]
        struct Out<'a> {
            healthy: bool,
            #[serde(flatten)]
            report: &'a pmem::repair::RepairReport,
        }
        print_json(&Out {
            healthy: report.healthy(),
            report: &report,
        })?;
    } else {
        for r in &report.repaired {
            println!("repaired: at byte {:#x}: {}", r.offset, r.message);
        }
        for n in &report.not_repaired {
            println!("NOT repaired: {}; {}", n.damage, n.reason);
        }
        let state = if report.healthy() {
            "the pool checks healthy".to_string()
        } else {
            format!(
                "{} finding(s) remain; {}",
                report.after.findings.len(),
                if report.after.opens() {
                    "the pool still opens"
                } else {
                    "the pool does NOT open"
                }
            )
        };
        if report.repaired.is_empty() && report.not_repaired.is_empty() {
            println!("{}: nothing to repair; {state}", a.path.display());
        } else {
            println!(
                "{}: {} repaired, {} not repaired; {state}",
                a.path.display(),
                report.repaired.len(),
                report.not_repaired.len()
            );
        }
    }
    Ok(if report.healthy() {
        Outcome::Ok
    } else {
        Outcome::Damage
    })
}

// ---------------------------------------------------------------------------------------------
// Pool sets: `pool create --files`, `pool info` on a set, `pool rebuild`.

fn create_set(a: &CreateArgs) -> Result<Outcome> {
    let n = a.files.unwrap_or(3);
    let chunk = a.chunk.unwrap_or(set::CHUNK_DEFAULT);
    set::validate_chunk(chunk)?;
    if !matches!(a.domain, DomainArg::Auto) {
        return Err(refused(
            "--domain: a pool set runs in the domain its files' backing gives (auto)",
        ));
    }
    pmem::pool::validate_size(a.size)?;
    check_output_path("PATH", &a.path, false)?;
    let paths = set::default_member_paths(&a.path, n as usize);
    for p in &paths {
        check_output_path("member", p, false)?;
    }
    let made = StripedSet::create_files(&a.path, &paths, a.size, chunk)
        .with_context(|| format!("cannot create pool set {}", a.path.display()))?;
    let domain = made.domain();
    let formatted = Pool::format(made, domain).and_then(|s| {
        Pool::open_medium(s, &OpenOptions::default())?
            .close()
            .map(|s| s.close())
    });
    if let Err(e) = formatted.and_then(|r| r) {
        for p in &paths {
            let _ = std::fs::remove_file(p);
        }
        let _ = std::fs::remove_file(&a.path);
        return Err(anyhow::Error::new(e).context(format!(
            "cannot create pool set {}; nothing was left behind",
            a.path.display()
        )));
    }
    let (status, info) = open_set_info(&a.path)?;
    if a.json {
        print_json(&set_json(&status, &info)?)?;
    } else {
        println!(
            "created {} ({}, {} member files, chunk {}, uuid {})",
            a.path.display(),
            format_size(info.size),
            status.geometry.members,
            format_size(status.geometry.chunk as u64),
            info.uuid
        );
        for m in &status.members {
            println!("  member {}", m.display());
        }
    }
    Ok(Outcome::Ok)
}

/// Open a set read-only and the pool on it: the set's state and the pool's info.
fn open_set_info(path: &Path) -> Result<(SetStatus, PoolInfo)> {
    let s = StripedSet::open_files(
        path,
        SetOpenOptions {
            read_only: true,
            force: false,
        },
    )
    .with_context(|| format!("cannot open pool set {}", path.display()))?;
    let status = s.status();
    let pool = Pool::open_medium(
        s,
        &OpenOptions {
            read_only: true,
            domain: None,
        },
    )
    .with_context(|| format!("cannot open the pool on set {}", path.display()))?;
    Ok((status, pool.info()))
}

fn set_json(status: &SetStatus, info: &PoolInfo) -> Result<serde_json::Value> {
    let mut v = serde_json::to_value(info)?;
    v["set"] = serde_json::to_value(status)?;
    Ok(v)
}

fn print_set(status: &SetStatus) {
    let g = status.geometry;
    println!(
        "set         {} members, chunk {}, {} rows, generation {}, uuid {}",
        g.members,
        format_size(g.chunk as u64),
        status.rows,
        status.generation,
        status.set_uuid
    );
    let state = match (&status.lost, status.state) {
        (Some(f), s) => format!("{s}: member {} lost ({})", f.index, f.reason),
        (None, s) => s.to_string(),
    };
    println!("set state   {state}");
    for (i, m) in status.members.iter().enumerate() {
        let lost = status.lost.as_ref().is_some_and(|f| f.index == i);
        println!(
            "  member {i:<3} {:<5} {}",
            if lost { "LOST" } else { "ok" },
            m.display()
        );
    }
    if status.unclean_at_open {
        println!("set note    not closed cleanly: the next read-write open recomputes parity");
    }
}

fn set_info(a: &InfoArgs) -> Result<Outcome> {
    let (status, info) = open_set_info(&a.path)?;
    if a.json {
        let mut v = set_json(&status, &info)?;
        v["tuning"] = serde_json::to_value(pmem::tune::current())?;
        print_json(&v)?;
    } else {
        print_info(&info);
        print_set(&status);
        print_tuning(pmem::tune::current());
    }
    Ok(Outcome::Ok)
}

/// `path` made absolute without touching the file system (`..` kept).
fn absolute(p: &Path) -> Result<PathBuf> {
    std::path::absolute(p).with_context(|| format!("cannot resolve {}", p.display()))
}

fn rebuild_set(a: &RebuildArgs) -> Result<Outcome> {
    let [old, new] = a.replace.as_slice() else {
        return Err(refused("--replace takes two paths: OLD NEW"));
    };
    if !set::is_description(&a.path) {
        return Err(refused(format!(
            "{}: not a pool set description (its first line is not `{}`)",
            a.path.display(),
            set::DESCRIPTION_MAGIC
        )));
    }
    let listed = set::read_description(&a.path)?;
    let old_abs = absolute(old)?;
    let mut index = None;
    for (i, p) in listed.iter().enumerate() {
        if absolute(p)? == old_abs {
            index = Some(i);
        }
    }
    let Some(index) = index else {
        return Err(refused(format!(
            "--replace {}: not a member of {} (members: {})",
            old.display(),
            a.path.display(),
            listed
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    let in_place = absolute(new)? == old_abs;
    if !in_place {
        check_output_path("--replace NEW", new, false)?;
    }
    // Decide on a read-only look first, so a refusal writes nothing.
    let look = StripedSet::open_files(
        &a.path,
        SetOpenOptions {
            read_only: true,
            force: false,
        },
    )
    .with_context(|| format!("cannot open pool set {}", a.path.display()))?;
    let before = look.status();
    drop(look);
    match &before.lost {
        Some(f) if f.index != index => {
            return Err(refused(format!(
                "member {} ({}) is lost, not member {index} ({}): rebuild that one first",
                f.index,
                f.label.display(),
                old.display()
            )));
        }
        None if in_place => {
            return Err(refused(format!(
                "member {index} ({}) is not lost: nothing to rebuild in place",
                old.display()
            )));
        }
        _ => {}
    }
    if before.unclean_at_open && before.lost.is_some() && !a.force {
        return Err(refused(format!(
            "{} was not closed cleanly while member {index} was lost: rows being written at              that crash may be rebuilt wrong; add --force to rebuild anyway",
            a.path.display()
        )));
    }
    let need = before.geometry.member_len(before.rows) as u64;
    // The new member: created (or, in place, opened), then named in the description.
    let target = if in_place {
        let mut m = pmem::Mapping::open(new, true)
            .with_context(|| format!("cannot open {}", new.display()))?;
        if (m.len() as u64) < need {
            return Err(refused(format!(
                "{} has {} bytes; a member of this set needs {need}",
                new.display(),
                m.len()
            )));
        }
        m.reserve(pmem::pool::GROW_RESERVE_BYTES as usize)?;
        m
    } else {
        let mut m = pmem::Mapping::create(new, need)
            .with_context(|| format!("cannot create {}", new.display()))?;
        if let Err(e) = m.reserve(pmem::pool::GROW_RESERVE_BYTES as usize) {
            drop(m);
            let _ = std::fs::remove_file(new);
            return Err(e.into());
        }
        m
    };
    let s = match StripedSet::open_files(
        &a.path,
        SetOpenOptions {
            read_only: false,
            force: a.force,
        },
    ) {
        Ok(s) => s,
        Err(e) => {
            drop(target);
            if !in_place {
                let _ = std::fs::remove_file(new);
            }
            return Err(
                anyhow::Error::new(e).context(format!("cannot open pool set {}", a.path.display()))
            );
        }
    };
    if s.lost().is_none() {
        s.mark_lost(index, "replaced by `pool rebuild`")?;
    }
    let mut names = listed.clone();
    names[index] = new.clone();
    let names: Vec<PathBuf> = names.iter().map(|p| set::listed_name(&a.path, p)).collect();
    set::write_description(&a.path, &names, false)
        .with_context(|| format!("cannot rewrite {}", a.path.display()))?;
    let started = std::time::Instant::now();
    let mut next_report = 0u64;
    let rows = s.rows();
    s.rebuild(target, |done, total| {
        let pct = done * 100 / total.max(1);
        if pct >= next_report || done == total {
            eprintln!("rebuild: member {index}: {done}/{total} rows ({pct}%)");
            next_report = pct + 10;
        }
    })
    .with_context(|| {
        format!(
            "rebuild of member {index} into {} failed; the set is still degraded; run \
             `kavach pool rebuild {} --replace {} {}` to start again",
            new.display(),
            a.path.display(),
            new.display(),
            new.display()
        )
    })?;
    let secs = started.elapsed().as_secs_f64();
    let after = s.status();
    s.close()
        .with_context(|| format!("cannot close pool set {}", a.path.display()))?;
    if a.json {
        print_json(&serde_json::json!({
            "rebuilt_member": index,
            "old": old,
            "new": new,
            "rows": rows,
            "bytes": rows * before.geometry.chunk as u64,
            "seconds": secs,
            "set": after,
        }))?;
    } else {
        println!(
            "rebuilt member {index} of {} into {} ({} rows, {} in {secs:.2} s); the set is {}",
            a.path.display(),
            new.display(),
            rows,
            format_size(rows * before.geometry.chunk as u64),
            after.state
        );
    }
    Ok(Outcome::Ok)
}

/// `pool check` on a set: a lost member is damage; with every member present, each row's parity
/// is checked against its data (a mismatch is damage inside a member that the set's reads would
/// not notice), and the pool on the set is opened read-only and its metadata damage reported.
fn set_check(a: &InfoArgs) -> Result<Outcome> {
    let s = StripedSet::open_files(
        &a.path,
        SetOpenOptions {
            read_only: true,
            force: false,
        },
    )
    .map_err(|e| {
        anyhow::Error::new(CouldNotRun)
            .context(format!("cannot check pool set {}: {e}", a.path.display()))
    })?;
    let status = s.status();
    let mut findings: Vec<String> = Vec::new();
    if let Some(f) = &status.lost {
        findings.push(format!(
            "member {} ({}) is lost: {}; `kavach pool rebuild` replaces it",
            f.index,
            f.label.display(),
            f.reason
        ));
    }
    let bad_rows = if status.lost.is_none() {
        s.verify_parity().map_err(|e| {
            anyhow::Error::new(CouldNotRun)
                .context(format!("cannot check pool set {}: {e}", a.path.display()))
        })?
    } else {
        Vec::new()
    };
    if !bad_rows.is_empty() {
        let shown: Vec<String> = bad_rows.iter().take(10).map(u64::to_string).collect();
        findings.push(format!(
            "{} row(s) whose parity does not match their data (rows {}{}){}",
            bad_rows.len(),
            shown.join(", "),
            if bad_rows.len() > 10 { ", ..." } else { "" },
            if status.unclean_at_open {
                "; the set was not closed cleanly, so these may be writes cut short, which the \
                 next read-write open recomputes"
            } else {
                ""
            }
        ));
    }
    let pool = Pool::open_medium(
        s,
        &OpenOptions {
            read_only: true,
            domain: None,
        },
    );
    match &pool {
        Ok(p) => findings.extend(p.damage().iter().map(|d| format!("pool metadata: {d}"))),
        Err(e) => findings.push(format!("the pool on the set does not open: {e}")),
    }
    if a.json {
        print_json(&serde_json::json!({
            "healthy": findings.is_empty(),
            "set": status,
            "parity_mismatch_rows": bad_rows,
            "findings": findings,
        }))?;
    } else if findings.is_empty() {
        println!(
            "{}: healthy ({} members, {} rows, parity matches)",
            a.path.display(),
            status.geometry.members,
            status.rows
        );
    } else {
        for f in &findings {
            println!("damage: {f}");
        }
        println!("{}: {} finding(s)", a.path.display(), findings.len());
    }
    Ok(if findings.is_empty() {
        Outcome::Ok
    } else {
        Outcome::Damage
    })
}
