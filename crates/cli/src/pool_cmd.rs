//! `kavach pool ...` and `kavach region ...`.

use crate::integrity_cmd::{self, ModeArg};
use crate::units::{format_size, format_time_ns, parse_size};
use crate::{CouldNotRun, Outcome, print_json};
use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use pmem::check::{Severity, check_file};
use pmem::{Alignment, CreateOptions, Domain, OpenOptions, Pool, PoolInfo, kinds};
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
    /// Exit status: 0 healthy, 1 damage found (the report says whether the pool still opens),
    /// 2 the check could not run (missing file, not a Kavach pool, pool in use).
    Check(InfoArgs),
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Path of the new pool file.
    pub path: PathBuf,
    /// Size: a multiple of 4096, at least 64KiB (units B, KiB, MiB, GiB, TiB).
    #[arg(long, value_parser = parse_size)]
    pub size: u64,
    /// Persistence domain to record: auto detects it (adr on DAX or /dev/shm, msync on disk).
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
    /// Print the new pool's info as JSON.
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
    Remove(RegionNameArgs),
    /// List the regions.
    List(InfoArgs),
}

#[derive(Debug, Args)]
pub struct RegionCreateArgs {
    /// Path of the pool file.
    pub path: PathBuf,
    /// Region name: 1 to 32 bytes of UTF-8.
    pub name: String,
    /// Size, rounded up to whole 4 KiB pages.
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
pub struct RegionNameArgs {
    /// Path of the pool file.
    pub path: PathBuf,
    /// Region name.
    pub name: String,
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
                print_json(&integrity_cmd::info_json(&info, &facts)?)?;
            } else {
                print_info(&info);
                integrity_cmd::print_facts(&facts);
            }
            Ok(Outcome::Ok)
        }
        PoolCommand::Check(a) => check(&a),
    }
}

pub fn print_info(info: &PoolInfo) {
    println!("pool        {}", info.path.display());
    println!("uuid        {}", info.uuid);
    println!(
        "size        {} ({} bytes, {}-byte pages)",
        format_size(info.size),
        info.size,
        info.page_size
    );
    println!("created     {}", format_time_ns(info.created_ns));
    let durability = if info.survives_reboot {
        "durable across reboot"
    } else {
        "NOT durable across reboot"
    };
    println!(
        "domain      {} (recorded {}, detected {}; backing {}: {durability})",
        info.domain,
        info.recorded_domain,
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
                r.region.offset,
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
    match cmd {
        RegionCommand::Create(a) => {
            let mut pool = open_rw(&a.path)?;
            let align = match a.align {
                AlignArg::Page => Alignment::Page,
                AlignArg::Huge => Alignment::Huge,
            };
            let r = pool
                .create_region(&a.name, kinds::RAW, a.size, align)
                .with_context(|| format!("cannot create region `{}`", a.name))?;
            pool.close()?;
            if a.json {
                print_json(&r)?;
            } else {
                println!(
                    "created region `{}` at offset {}, {}",
                    r.name,
                    r.offset,
                    format_size(r.length)
                );
            }
        }
        RegionCommand::Remove(a) => {
            let mut pool = open_rw(&a.path)?;
            let r = pool
                .remove_region(&a.name)
                .with_context(|| format!("cannot remove region `{}`", a.name))?;
            pool.close()?;
            println!(
                "removed region `{}` ({} at offset {})",
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
                        "{}\t{}\t{}\t{}",
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
