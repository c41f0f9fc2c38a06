//! `kavach pool ...` and `kavach region ...`.

use crate::integrity_cmd::{self, ModeArg};
use crate::outcome::{CouldNotRun, Outcome, print_json};
use crate::units::{format_size, format_time_ns, parse_size};
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
    /// `kavach pool repair` rebuilds what a good copy proves and names what it cannot.
    ///
    /// Exit status: 0 healthy, 1 damage found (the report says whether the pool still opens),
    /// 2 the check could not run (missing file, not a Kavach pool, pool in use).
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
        PoolCommand::Repair(a) => repair(&a),
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
fn finish<T>(pool: Pool<pmem::Mapping>, result: Result<T>, path: &Path) -> Result<T> {
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
fn refuse_owned(pool: &Pool<pmem::Mapping>, a: &RegionRemoveArgs) -> Result<()> {
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
