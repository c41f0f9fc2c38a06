//! `kavach debug ...`, `kavach inject ...`, `kavach scrub` and `kavach repair`: the command line
//! of the integrity layer (crate `kavach-integrity`), which keeps a CRC-32C per 4 KiB page and
//! XOR parity per stripe of pages for a pool's data region. Every command is a thin layer over
//! `integrity::Protected`; `kavach pool create --redundancy` and `kavach pool info` use the
//! helpers at the end of this file.

use crate::outcome::{Outcome, print_json};
use crate::progress::Progress;
use crate::units::format_size;
use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand, ValueEnum};
use integrity::{
    Basis, CreateOptions, Finding, Geometry, IntegrityError, Mode, OpenOptions, OpenReport,
    Protected,
};
use pmem::layout::PAGE_SIZE;
use pmem::rng::SplitMix64;
use pmem::{Alignment, Mapping, Medium, Pool, Region, kinds};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The data region `kavach pool create --redundancy` makes, and the default of `--region`.
pub const DEFAULT_REGION: &str = "data";
const PAGE: u64 = PAGE_SIZE as u64;
/// Bits of one page (the most `inject bitflip --bits` takes).
const PAGE_BITS: u32 = PAGE_SIZE as u32 * 8;
/// Pages written per call while filling.
const FILL_CHUNK_PAGES: u64 = 64;
/// Bytes read per call while hashing.
const DIGEST_CHUNK_BYTES: u64 = 1 << 20;
/// Flipped bits listed one by one in human output (JSON lists them all).
const BITS_SHOWN_MAX: usize = 8;

/// The medium every writable command works on: shared between the pool and the protected region.
type Shared = Arc<Mapping>;

// ---------------------------------------------------------------------------------------------
// arguments

/// A redundancy mode, as `kavach pool create --redundancy` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// Lay out the checksums and parity but keep nothing up to date.
    Off,
    /// Vilamb: a pass every period (and at close) updates the written pages' checksums and
    /// their stripes' parity.
    Lazy,
    /// TVARAK in software: every write updates checksums and parity from its diff, and every
    /// read is verified (and repaired) line by line.
    Eager,
    /// Baseline for measurements: every write recomputes its pages' checksums and its stripes'
    /// parity whole.
    TxbPage,
}

impl ModeArg {
    /// The library's mode.
    pub fn mode(self) -> Mode {
        match self {
            ModeArg::Off => Mode::Off,
            ModeArg::Lazy => Mode::Lazy,
            ModeArg::Eager => Mode::Eager,
            ModeArg::TxbPage => Mode::TxbPage,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum DebugCommand {
    /// Fill a region's data pages with pseudo-random bytes from a seed, keeping redundancy.
    ///
    /// Writes every page through the integrity layer (so checksums and parity are kept in the
    /// region's mode), then brings redundancy up to date (the final pass) and closes cleanly.
    /// The same seed on the same pool layout always writes the same bytes.
    ///
    /// Exit status: 0 filled; 2 could not run (no such file or region, not a pool, a damaged
    /// page refused by an eager write, an I/O error).
    #[command(after_help = "Examples:\n  \
        kavach pool create /dev/shm/p.pool --size 64MiB --redundancy lazy\n  \
        kavach debug fill /dev/shm/p.pool --seed 1\n  \
        kavach debug digest /dev/shm/p.pool")]
    Fill(FillArgs),
    /// Print the SHA-256 of a region's data pages (read-only; nothing is written or repaired).
    ///
    /// The raw bytes on the medium are hashed, damage included: to test detection and repair,
    /// compare the digest after `kavach repair` with the one before `kavach inject` (or with the
    /// one `kavach inject` says the region should have once repaired).
    ///
    /// Exit status: 0 printed; 2 could not run (no such file or region, not a pool).
    #[command(after_help = "Examples:\n  \
        kavach debug digest /dev/shm/p.pool\n  \
        kavach debug digest /dev/shm/p.pool --region data --json")]
    Digest(DigestArgs),
}

#[derive(Debug, Args)]
pub struct FillArgs {
    /// Pool file.
    pub path: PathBuf,
    /// Seed of the pseudo-random content.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The protected data region.
    #[arg(long, default_value = DEFAULT_REGION)]
    pub region: String,
    /// Print what was written as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DigestArgs {
    /// Pool file.
    pub path: PathBuf,
    /// The region to hash (any region, protected or not).
    #[arg(long, default_value = DEFAULT_REGION)]
    pub region: String,
    /// Print the digest as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum InjectCommand {
    /// Flip K bits, chosen from a seed, of one data page, behind every layer's back (bit rot
    /// that device ECC missed).
    ///
    /// The bits are written through the file, so neither write tracking nor the integrity
    /// layer sees the change; a scrub finds it and a repair rebuilds the page from parity.
    /// Prints the pool byte offset of every flipped bit, and the region's digest as it should
    /// be once repaired.
    ///
    /// Exit status: 0 injected; 2 could not run (no such file or region, page or bit count out
    /// of range).
    #[command(after_help = "Examples:\n  \
        kavach inject bitflip /dev/shm/p.pool --page 5\n  \
        kavach inject bitflip /dev/shm/p.pool --page 5 --bits 64 --seed 7 --json")]
    Bitflip(BitflipArgs),
    /// Lost write: the device acknowledged a write to a data page that never landed.
    ///
    /// Writes new seeded contents to the page through the integrity layer, runs its update
    /// pass so checksums and parity cover the new contents, then puts the page's previous
    /// contents back behind every layer's back. The page now fails its checksum; a repair
    /// rebuilds the new contents from parity, so the region's digest after repair is the one
    /// this command prints, not the one before it ran.
    ///
    /// Exit status: 0 injected; 2 could not run (no such file or region, page out of range).
    #[command(after_help = "Examples:\n  \
        kavach inject lost-write /dev/shm/p.pool --page 5\n  \
        kavach inject lost-write /dev/shm/p.pool --page 5 --seed 3 --json")]
    LostWrite(LostWriteArgs),
    /// Misdirected write: a write meant for data page N lands on data page M instead.
    ///
    /// Writes new seeded contents for page N through the integrity layer and runs its update
    /// pass, then puts those contents onto page M and N's previous contents back onto N, behind
    /// every layer's back. Both pages fail their checksums; a repair rebuilds both from parity
    /// when they are in different stripes (the default M is the same page of the next stripe,
    /// wrapping to the first). The region's digest after repair is the one this command prints.
    ///
    /// Exit status: 0 injected; 2 could not run (no such file or region, page out of range,
    /// M = N).
    #[command(after_help = "Examples:\n  \
        kavach inject misdirected-write /dev/shm/p.pool --page 5\n  \
        kavach inject misdirected-write /dev/shm/p.pool --page 5 --to 100 --json")]
    MisdirectedWrite(MisdirectArgs),
}

#[derive(Debug, Args)]
pub struct BitflipArgs {
    /// Pool file.
    pub path: PathBuf,
    /// Data page to damage: its number in the region, from 0.
    #[arg(long)]
    pub page: u64,
    /// Number of distinct bits to flip, 1 to 32768 (the bits of one page).
    #[arg(long, default_value_t = 1)]
    pub bits: u32,
    /// Seed choosing the bits (the same seed flips the same bits).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The region holding the page (any region; its integrity region works too).
    #[arg(long, default_value = DEFAULT_REGION)]
    pub region: String,
    /// Print what was done as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LostWriteArgs {
    /// Pool file.
    pub path: PathBuf,
    /// Data page whose write is lost: its number in the region, from 0.
    #[arg(long)]
    pub page: u64,
    /// Seed of the new contents.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The protected data region.
    #[arg(long, default_value = DEFAULT_REGION)]
    pub region: String,
    /// Print what was done as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct MisdirectArgs {
    /// Pool file.
    pub path: PathBuf,
    /// Data page the write is meant for (N): its number in the region, from 0.
    #[arg(long)]
    pub page: u64,
    /// Data page the write lands on (M); default: the same page of the next stripe, wrapping.
    #[arg(long, value_name = "M")]
    pub to: Option<u64>,
    /// Seed of the new contents.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The protected data region.
    #[arg(long, default_value = DEFAULT_REGION)]
    pub region: String,
    /// Print what was done as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Pool file, or a store directory (`kavach serve --dir`): then every protected region of
    /// its `kavach.pool` is checked (offline; a store a server holds open is refused: use
    /// --port).
    pub path: PathBuf,
    /// The protected data region (a pool file only; a store directory checks all of them).
    #[arg(long, default_value = DEFAULT_REGION)]
    pub region: String,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// Online: ask the server that serves the store directory PATH on this port to check its
    /// protected regions now (the RESP command KAVACH SCRUB or KAVACH REPAIR).
    #[arg(long)]
    pub port: Option<u16>,
    /// The server's address (with --port).
    #[arg(long, default_value = "127.0.0.1", requires = "port")]
    pub host: String,
}

// ---------------------------------------------------------------------------------------------
// exit status

fn could_not_run(result: Result<Outcome>) -> Result<Outcome> {
    result.map_err(|e| anyhow::Error::new(crate::outcome::CommandFailed(e)))
}

pub fn run_debug(cmd: DebugCommand) -> Result<Outcome> {
    could_not_run(match cmd {
        DebugCommand::Fill(a) => fill(&a),
        DebugCommand::Digest(a) => digest(&a),
    })
}

pub fn run_inject(cmd: InjectCommand) -> Result<Outcome> {
    could_not_run(match cmd {
        InjectCommand::Bitflip(a) => bitflip(&a),
        InjectCommand::LostWrite(a) => lost_write(&a),
        InjectCommand::MisdirectedWrite(a) => misdirected_write(&a),
    })
}

pub fn run_scrub(a: &CheckArgs) -> Result<Outcome> {
    could_not_run(check(a, false))
}

pub fn run_repair(a: &CheckArgs) -> Result<Outcome> {
    could_not_run(check(a, true))
}

/// `kavach scrub` / `kavach repair` on a pool file, a store directory, or a running server.
fn check(a: &CheckArgs, repair: bool) -> Result<Outcome> {
    if let Some(port) = a.port {
        return check_online(a, port, repair);
    }
    if a.path.is_dir() {
        return check_store_dir(a, repair);
    }
    let (outcome, doc) = if repair {
        repair_region(&a.path, &a.region, a.json)?
    } else {
        scrub_region(&a.path, &a.region, a.json)?
    };
    if a.json {
        print_json(&doc)?;
    }
    Ok(outcome)
}

/// The protected regions of a store's pool (those with an integrity region), in pool order.
fn protected_regions<M: Medium>(pool: &Pool<M>) -> Vec<String> {
    pool.regions()
        .iter()
        .filter(|r| r.kind != kinds::INTEGRITY)
        .filter(|r| {
            integrity::meta_region_name(&r.name)
                .ok()
                .and_then(|m| pool.region(&m))
                .is_some_and(|m| m.kind == kinds::INTEGRITY)
        })
        .map(|r| r.name.clone())
        .collect()
}

/// Offline, every protected region of the store in directory `a.path`.
fn check_store_dir(a: &CheckArgs, repair: bool) -> Result<Outcome> {
    let pool_path = a.path.join(dstore::POOL_FILE);
    if !pool_path.is_file() {
        bail!(
            "{} is a directory without a store ({} is missing)",
            a.path.display(),
            dstore::POOL_FILE
        );
    }
    let regions = {
        let pool = Pool::open(
            &pool_path,
            &pmem::OpenOptions {
                read_only: true,
                domain: None,
            },
        )
        .with_context(|| format!("cannot open the store's pool {}", pool_path.display()))?;
        protected_regions(&pool)
    };
    if regions.is_empty() {
        bail!(
            "the store in {} keeps no redundancy (no region of {} is protected; start it \
             with `kavach serve --redundancy lazy` or `eager`)",
            a.path.display(),
            dstore::POOL_FILE
        );
    }
    let mut worst = Outcome::Ok;
    let mut docs = Vec::new();
    for (i, region) in regions.iter().enumerate() {
        eprintln!(
            "kavach: {} region `{region}` ({} of {})",
            if repair { "repair of" } else { "scrub of" },
            i + 1,
            regions.len()
        );
        let (outcome, doc) = if repair {
            repair_region(&pool_path, region, a.json)?
        } else {
            scrub_region(&pool_path, region, a.json)?
        };
        if outcome != Outcome::Ok {
            worst = outcome;
        }
        docs.push(doc);
    }
    if a.json {
        print_json(&serde_json::json!({
            "dir": a.path,
            "pool": pool_path,
            "clean": worst == Outcome::Ok,
            "regions": docs,
        }))?;
    } else {
        println!(
            "store {}: {} protected regions {}: {}",
            a.path.display(),
            regions.len(),
            if repair { "repaired" } else { "scrubbed" },
            match (worst == Outcome::Ok, repair) {
                (true, false) => "clean",
                (true, true) => "everything repaired (or nothing to repair)",
                (false, false) => "damage found (`kavach repair DIR` repairs what parity can)",
                (false, true) => "some damage could NOT be repaired",
            }
        );
    }
    Ok(worst)
}

/// Online: the server on `port` checks the store it serves (KAVACH SCRUB / KAVACH REPAIR).
fn check_online(a: &CheckArgs, port: u16, repair: bool) -> Result<Outcome> {
    use crate::replica_cmd::resp_call;
    let addr = format!("{}:{port}", a.host);
    let short = std::time::Duration::from_secs(10);
    // The server must serve the store named: its INFO names its pool file.
    let info = resp_call(&addr, &["INFO".into(), "persistence".into()], short)?
        .map_err(|e| anyhow!("{addr} refused INFO: {e}"))?;
    let served = info
        .lines()
        .find_map(|l| l.strip_prefix("pool_file:"))
        .map(|p| PathBuf::from(p.trim()))
        .ok_or_else(|| {
            anyhow!("{addr} does not say which pool it serves (no pool_file in INFO)")
        })?;
    let named = if a.path.is_dir() {
        a.path.join(dstore::POOL_FILE)
    } else {
        a.path.clone()
    };
    let same = match (served.canonicalize(), named.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    };
    if !same {
        bail!(
            "the server on {addr} serves {}, not {}",
            served.display(),
            named.display()
        );
    }
    eprintln!(
        "kavach: asking {addr} to {} its protected regions",
        if repair { "repair" } else { "scrub" }
    );
    let verb = if repair { "REPAIR" } else { "SCRUB" };
    let long = std::time::Duration::from_secs(3600);
    let text = resp_call(&addr, &["KAVACH".into(), verb.into()], long)?
        .map_err(|e| anyhow!("{addr} refused KAVACH {verb}: {e}"))?;
    let doc: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| anyhow!("{addr} answered KAVACH {verb} with no JSON report ({e})"))?;
    let flag = |k: &str| {
        doc.get(k)
            .and_then(serde_json::Value::as_bool)
            .ok_or_else(|| anyhow!("{addr}: the report has no boolean `{k}`"))
    };
    let good = if repair {
        flag("all_repaired")?
    } else {
        flag("clean")?
    };
    if a.json {
        print_json(&doc)?;
    } else {
        let r = &doc["report"];
        let n = |k: &str| r.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
        for list in ["unrepaired", "errors"] {
            for line in r[list].as_array().into_iter().flatten() {
                println!("{}: {}", list, line.as_str().unwrap_or_default());
            }
        }
        println!(
            "server {addr} ({}): {} pages verified, {} finding(s), {} unverifiable, {} repaired, \
             {} not repaired, in {} ms: {}",
            named.display(),
            n("pages_checked"),
            n("findings"),
            n("unverifiable"),
            n("repaired"),
            r["unrepaired"].as_array().map_or(0, Vec::len),
            n("elapsed_ms"),
            if good { "clean" } else { "damage" }
        );
    }
    Ok(if good { Outcome::Ok } else { Outcome::Damage })
}

// ---------------------------------------------------------------------------------------------
// opening and closing

/// An open pool and its open protected region.
struct Session {
    pool: Pool<Shared>,
    prot: Protected<Shared>,
    report: OpenReport,
}

fn open_pool_rw(path: &Path) -> Result<Pool<Shared>> {
    let pool = Pool::open(path, &pmem::OpenOptions::default())
        .with_context(|| format!("cannot open pool {}", path.display()))?;
    Ok(pool.map_medium(Arc::new))
}

fn region_names<M: Medium>(pool: &Pool<M>) -> String {
    let names: Vec<String> = pool
        .regions()
        .iter()
        .map(|r| format!("`{}`", r.name))
        .collect();
    if names.is_empty() {
        "it has none".into()
    } else {
        format!("it has {}", names.join(", "))
    }
}

fn find_region<'a, M: Medium>(pool: &'a Pool<M>, name: &str, path: &Path) -> Result<&'a Region> {
    pool.region(name).ok_or_else(|| {
        anyhow!(
            "pool {} has no region `{name}` ({}; `kavach pool create --redundancy` makes `{DEFAULT_REGION}`)",
            path.display(),
            region_names(pool)
        )
    })
}

/// Refuse a page number outside a region of `pages` pages, naming the range.
fn check_page(flag: &str, page: u64, pages: u64, region: &str) -> Result<()> {
    if page >= pages {
        bail!(
            "{flag} {page} is outside region `{region}`: its data pages are 0 to {} ({pages} pages)",
            pages.saturating_sub(1)
        );
    }
    Ok(())
}

/// Close a pool opened read-write. A pool that was not shut down cleanly before this command
/// opened it, and that holds regions of layers with their own crash recovery (a log, a heap),
/// is left marked unclean so that those layers still recover at their next open.
fn close_pool(pool: Pool<Shared>) -> Result<()> {
    let others_recover = pool
        .regions()
        .iter()
        .any(|r| r.kind != kinds::RAW && r.kind != kinds::INTEGRITY);
    if !pool.was_clean_shutdown() && others_recover {
        drop(pool);
        return Ok(());
    }
    let label = pool.medium().label();
    pool.close()
        .with_context(|| format!("cannot close pool {}", label.display()))?;
    Ok(())
}

/// Open the protection of `region` in `pool` (closing the pool on failure). With
/// `need_redundancy`, a region whose mode is `off` is refused: its checksums and parity are not
/// kept, so there would be nothing to check against.
fn open_protected(
    pool: Pool<Shared>,
    path: &Path,
    region: &str,
    need_redundancy: bool,
) -> Result<Session> {
    // A refusal before the region is opened read-write changed nothing: the pool goes back
    // exactly as it was found (the in-use mark of the open too).
    if let Err(e) = check_protectable(&pool, path, region, need_redundancy) {
        let _ = pool.close_unchanged();
        return Err(e);
    }
    match protect(&pool, path, region) {
        Ok((prot, report)) => Ok(Session { pool, prot, report }),
        Err(e) => {
            let _ = close_pool(pool);
            Err(e)
        }
    }
}

fn open_failed(region: &str, path: &Path) -> impl Fn(IntegrityError) -> anyhow::Error {
    let context = format!(
        "cannot open the redundancy of region `{region}` in {}",
        path.display()
    );
    move |e: IntegrityError| anyhow::Error::new(e).context(context.clone())
}

/// Everything that refuses `region` before it is opened read-write (so before anything is
/// written): no such region, not protected, and with `need_redundancy` a mode of `off`.
fn check_protectable(
    pool: &Pool<Shared>,
    path: &Path,
    region: &str,
    need_redundancy: bool,
) -> Result<()> {
    find_region(pool, region, path)?;
    // A read-only open changes nothing: it only reads the header.
    let peek = OpenOptions {
        read_only: true,
        ..Default::default()
    };
    let (prot, _) = integrity::open_in_pool(pool, region, peek, &mut |_, _| {})
        .map_err(open_failed(region, path))?;
    if need_redundancy && prot.mode() == Mode::Off {
        bail!(
            "region `{region}` of {} has redundancy mode off: its checksums and parity are \
             not kept up to date, so there is nothing to verify or repair against",
            path.display()
        );
    }
    Ok(())
}

fn protect(
    pool: &Pool<Shared>,
    path: &Path,
    region: &str,
) -> Result<(Protected<Shared>, OpenReport)> {
    let fail = open_failed(region, path);
    let mut bar = Progress::new(format!("resync of `{region}`"));
    let opened = integrity::open_in_pool(pool, region, OpenOptions::default(), &mut bar.callback());
    bar.finish();
    opened.map_err(fail)
}

impl Session {
    fn open(path: &Path, region: &str, need_redundancy: bool) -> Result<Session> {
        preflight(path, region, need_redundancy, &[])?;
        open_protected(open_pool_rw(path)?, path, region, need_redundancy)
    }

    /// Close the region (final pass, clean state) and the pool.
    fn close(self) -> Result<()> {
        let Session { pool, prot, .. } = self;
        if let Err(e) = prot.close() {
            drop(pool);
            return Err(anyhow::Error::new(e).context("cannot close the protected region"));
        }
        close_pool(pool)
    }

    /// Run `f`, then close; the first error wins.
    fn finish<T>(self, f: impl FnOnce(&Session) -> Result<T>) -> Result<T> {
        let result = f(&self);
        let closed = self.close();
        let value = result?;
        closed?;
        Ok(value)
    }
}

/// Pages as `N (pool byte 0x...)`, with the count of those not listed.
fn page_list(pages: &[u64], total: u64, data_offset: u64) -> String {
    let mut shown: Vec<String> = pages
        .iter()
        .map(|p| format!("{p} ({:#x})", data_offset + p * PAGE))
        .collect();
    if total > pages.len() as u64 {
        shown.push(format!("and {} more", total - pages.len() as u64));
    }
    shown.join(", ")
}

/// What a read-write open did that a user must know, one sentence each.
fn open_notes(region: &str, data_offset: u64, r: &OpenReport) -> Vec<String> {
    let mut notes = Vec::new();
    for d in &r.header_damage {
        notes.push(format!(
            "one copy of the integrity header of `{region}` was damaged; the other was used and \
             this open replaced the damaged copy ({d})"
        ));
    }
    if r.trust.basis == integrity::Basis::Unverified {
        notes.push(format!(
            "region `{region}` is marked unverified ({}): nothing was rebuilt, and it stays \
             unverified until `kavach repair` proves every stripe",
            r.trust.reason
        ));
    }
    if r.resync_pages > 0 {
        let changed = if r.resync_pages_changed == 0 {
            "every page matched its old checksum".to_string()
        } else {
            format!(
                "{} page(s) did not match their old checksums and their current contents were \
                 taken as the data (each is a write the lost update pass never covered, or \
                 damage; a resync cannot tell which): {}",
                r.resync_pages_changed,
                page_list(
                    &r.resync_pages_changed_list,
                    r.resync_pages_changed,
                    data_offset
                )
            )
        };
        notes.push(format!(
            "region `{region}` was resynced at open because {}: its checksums and parity were \
             rebuilt from the data of its {} pages in {} ms; {changed}",
            r.trust.reason, r.resync_pages, r.resync_ms
        ));
    }
    if r.lines_rebuilt_pages > 0 || !r.lines_refused_pages.is_empty() {
        let refused = if r.lines_refused_pages.is_empty() {
            String::new()
        } else {
            format!(
                "; pages that fail their page checksum got none (reads of them go through \
                 parity; `kavach repair` rebuilds them): {}",
                page_list(
                    &r.lines_refused_pages,
                    r.lines_refused_pages.len() as u64,
                    data_offset
                )
            )
        };
        notes.push(format!(
            "line checksums of `{region}` were not current: computed for {} pages that pass \
             their page checksum{refused}",
            r.lines_rebuilt_pages
        ));
    }
    notes
}

/// What a read-only open found that a user must know (a scrub changes nothing).
fn scrub_notes(region: &str, r: &OpenReport) -> Vec<String> {
    let mut notes = Vec::new();
    for d in &r.header_damage {
        notes.push(format!(
            "one copy of the integrity header of `{region}` is damaged; the other is in force \
             ({d})"
        ));
    }
    notes
}

fn print_notes(notes: &[String]) {
    for n in notes {
        println!("note: {n}");
    }
}

// ---------------------------------------------------------------------------------------------
// content and digests

/// Fill `buf` from `rng`, eight bytes at a time.
fn fill_bytes(rng: &mut SplitMix64, buf: &mut [u8]) {
    for chunk in buf.chunks_mut(8) {
        let v = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// New contents for `page` from `seed`, never equal to `old` (an injected write must change
/// the page).
fn new_contents(seed: u64, page: u64, old: &[u8]) -> Vec<u8> {
    // Mixed with the page number and a constant, so `fill --seed S` and `inject --seed S`
    // do not write the same bytes.
    let mut rng = SplitMix64::new(seed ^ page.rotate_left(32) ^ 0x696e_6a65_6374_6564);
    let mut new = vec![0u8; PAGE_SIZE];
    fill_bytes(&mut rng, &mut new);
    if new == old {
        new[0] ^= 1;
    }
    new
}

/// SHA-256 of `[offset, offset + len)` of `medium`, in lower-case hex (with a progress bar).
fn digest_range<M: Medium + ?Sized>(medium: &M, offset: u64, len: u64) -> String {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; DIGEST_CHUNK_BYTES.min(len) as usize];
    let mut bar = Progress::new("digest");
    let mut done = 0;
    while done < len {
        let n = DIGEST_CHUNK_BYTES.min(len - done) as usize;
        medium.read((offset + done) as usize, &mut buf[..n]);
        hasher.update(&buf[..n]);
        done += n as u64;
        bar.update(done / PAGE, len / PAGE);
    }
    bar.finish();
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The digest of the protected region's data pages.
fn digest_protected(prot: &Protected<Shared>) -> String {
    digest_range(
        prot.medium(),
        prot.data_offset(),
        prot.geometry().data_pages * PAGE,
    )
}

// ---------------------------------------------------------------------------------------------
// debug fill, debug digest

fn fill(a: &FillArgs) -> Result<Outcome> {
    let s = Session::open(&a.path, &a.region, false)?;
    let notes = open_notes(&a.region, s.prot.data_offset(), &s.report);
    let (pages, mode) = s.finish(|s| {
        let prot = &s.prot;
        let pages = prot.geometry().data_pages;
        let mut rng = SplitMix64::new(a.seed);
        let mut buf = vec![0u8; (FILL_CHUNK_PAGES * PAGE) as usize];
        let mut bar = Progress::new(format!("fill of `{}`", a.region));
        let mut page = 0;
        while page < pages {
            let n = FILL_CHUNK_PAGES.min(pages - page);
            let chunk = &mut buf[..(n * PAGE) as usize];
            fill_bytes(&mut rng, chunk);
            prot.write(page * PAGE, chunk)
                .with_context(|| format!("cannot write data pages {page} to {}", page + n - 1))?;
            page += n;
            bar.update(page, pages);
        }
        bar.finish();
        prot.final_pass()
            .context("cannot bring the redundancy up to date")?;
        Ok((pages, prot.mode()))
    })?;
    if a.json {
        print_json(&serde_json::json!({
            "path": a.path,
            "region": a.region,
            "mode": mode,
            "seed": a.seed,
            "pages": pages,
            "bytes": pages * PAGE,
            "notes": notes,
        }))?;
    } else {
        print_notes(&notes);
        println!(
            "filled {pages} data pages ({}) of region `{}` in {} from seed {} (mode {}){}",
            format_size(pages * PAGE),
            a.region,
            a.path.display(),
            a.seed,
            mode.name(),
            if mode == Mode::Off {
                "; redundancy is off, so none is kept"
            } else {
                "; redundancy is up to date"
            }
        );
    }
    Ok(Outcome::Ok)
}

fn digest(a: &DigestArgs) -> Result<Outcome> {
    let pool = Pool::open(
        &a.path,
        &pmem::OpenOptions {
            read_only: true,
            domain: None,
        },
    )
    .with_context(|| format!("cannot open pool {}", a.path.display()))?;
    let r = find_region(&pool, &a.region, &a.path)?;
    let sha = digest_range(pool.medium(), r.offset, r.length);
    if a.json {
        print_json(&serde_json::json!({
            "path": a.path,
            "region": r.name,
            "offset": r.offset,
            "bytes": r.length,
            "pages": r.length / PAGE,
            "sha256": sha,
        }))?;
    } else {
        println!(
            "{sha}  {} region `{}` ({} pages)",
            a.path.display(),
            r.name,
            r.length / PAGE
        );
    }
    Ok(Outcome::Ok)
}

// ---------------------------------------------------------------------------------------------
// inject

fn bitflip(a: &BitflipArgs) -> Result<Outcome> {
    if !(1..=PAGE_BITS).contains(&a.bits) {
        bail!(
            "--bits {} is out of range: 1 to {PAGE_BITS} (the bits of one page)",
            a.bits
        );
    }
    // Writable mapping (exclusive lock), pool opened read-only: the directory is read, and
    // nothing of the pool's own state changes.
    let mapping = Mapping::open(&a.path, true)
        .with_context(|| format!("cannot open pool {}", a.path.display()))?;
    let pool = Pool::open_medium(
        mapping,
        &pmem::OpenOptions {
            read_only: true,
            domain: None,
        },
    )
    .with_context(|| format!("cannot open pool {}", a.path.display()))?;
    let r = find_region(&pool, &a.region, &a.path)?.clone();
    check_page("--page", a.page, r.length / PAGE, &r.name)?;
    let intended = digest_range(pool.medium(), r.offset, r.length);
    let at = r.offset + a.page * PAGE;
    let bits = pmem::fault::flip_bits(pool.medium(), at as usize, PAGE_SIZE, a.bits, a.seed)
        .with_context(|| format!("cannot flip bits in {}", a.path.display()))?;
    let flipped: Vec<(u64, u64)> = bits.iter().map(|b| (at + b / 8, b % 8)).collect();
    if a.json {
        let list: Vec<_> = flipped
            .iter()
            .map(|(byte, bit)| serde_json::json!({ "offset": byte, "bit": bit }))
            .collect();
        print_json(&serde_json::json!({
            "fault": "bitflip",
            "path": a.path,
            "region": r.name,
            "page": a.page,
            "offset": at,
            "seed": a.seed,
            "bits": list,
            "digest_intended": intended,
        }))?;
    } else {
        let mut shown: Vec<String> = flipped
            .iter()
            .take(BITS_SHOWN_MAX)
            .map(|(byte, bit)| format!("byte {byte:#x} bit {bit}"))
            .collect();
        if flipped.len() > BITS_SHOWN_MAX {
            shown.push(format!("and {} more", flipped.len() - BITS_SHOWN_MAX));
        }
        println!(
            "flipped {} bit(s) of page {} of region `{}` in {} (pool bytes {at:#x}..{:#x}): {}",
            flipped.len(),
            a.page,
            r.name,
            a.path.display(),
            at + PAGE,
            shown.join(", ")
        );
        print_intended(&intended);
    }
    Ok(Outcome::Ok)
}

fn print_intended(digest: &str) {
    println!(
        "digest had this fault not happened: {digest} (with no other damage in the region, \
         `kavach debug digest` prints it after `kavach repair`)"
    );
}

/// Open `region` of `path` for an injected write and check the page numbers first.
fn open_for_write(path: &Path, region: &str, pages_to_check: &[(&str, u64)]) -> Result<Session> {
    preflight(path, region, false, pages_to_check)?;
    let pool = open_pool_rw(path)?;
    let checked = find_region(&pool, region, path).and_then(|r| {
        let pages = r.length / PAGE;
        pages_to_check
            .iter()
            .try_for_each(|(flag, page)| check_page(flag, *page, pages, region))
    });
    if let Err(e) = checked {
        // Nothing was written: put the pool back exactly as it was found.
        let _ = pool.close_unchanged();
        return Err(e);
    }
    open_protected(pool, path, region, false)
}

/// Write `new` to data page `page` through the integrity layer and bring redundancy up to date.
fn covered_write(s: &Session, page: u64, new: &[u8]) -> Result<()> {
    s.prot
        .write(page * PAGE, new)
        .with_context(|| format!("cannot write data page {page}"))?;
    s.prot
        .final_pass()
        .context("cannot bring the redundancy up to date")?;
    Ok(())
}

fn read_page(s: &Session, page: u64) -> Vec<u8> {
    let mut b = vec![0u8; PAGE_SIZE];
    s.prot
        .medium()
        .read((s.prot.data_offset() + page * PAGE) as usize, &mut b);
    b
}

fn inject_page(s: &Session, page: u64, bytes: &[u8]) -> Result<()> {
    let at = s.prot.data_offset() + page * PAGE;
    s.prot
        .medium()
        .inject(at as usize, bytes)
        .with_context(|| format!("cannot put bytes on data page {page}"))
}

/// Whether an injected write was covered by redundancy, as words.
fn coverage(mode: Mode) -> String {
    if mode == Mode::Off {
        "not covered by redundancy (mode off)".into()
    } else {
        format!("covered by redundancy (mode {})", mode.name())
    }
}

fn mode_off_note(mode: Mode, notes: &mut Vec<String>) {
    if mode == Mode::Off {
        notes.push(
            "redundancy is off for this region: nothing covers the write, and nothing will \
             detect or repair this fault"
                .into(),
        );
    }
}

fn lost_write(a: &LostWriteArgs) -> Result<Outcome> {
    let s = open_for_write(&a.path, &a.region, &[("--page", a.page)])?;
    let mut notes = open_notes(&a.region, s.prot.data_offset(), &s.report);
    let (at, mode, intended) = s.finish(|s| {
        let old = read_page(s, a.page);
        let new = new_contents(a.seed, a.page, &old);
        covered_write(s, a.page, &new)?;
        let intended = digest_protected(&s.prot);
        inject_page(s, a.page, &old)?;
        Ok((
            s.prot.data_offset() + a.page * PAGE,
            s.prot.mode(),
            intended,
        ))
    })?;
    mode_off_note(mode, &mut notes);
    if a.json {
        print_json(&serde_json::json!({
            "fault": "lost-write",
            "path": a.path,
            "region": a.region,
            "mode": mode,
            "page": a.page,
            "offset": at,
            "seed": a.seed,
            "digest_intended": intended,
            "notes": notes,
        }))?;
    } else {
        print_notes(&notes);
        println!(
            "lost write on page {} of region `{}` in {} (pool bytes {at:#x}..{:#x}): new \
             contents were written and {}, then the page's previous contents were put back",
            a.page,
            a.region,
            a.path.display(),
            at + PAGE,
            coverage(mode)
        );
        print_intended(&intended);
    }
    Ok(Outcome::Ok)
}

/// The same page of the next stripe, wrapping to the first stripe (also when the next stripe
/// is a short last one without that page).
fn next_stripe_page(geo: &Geometry, page: u64) -> u64 {
    let k = geo.stripe_pages as u64;
    let next = (page / k + 1) % geo.stripes * k + page % k;
    if next < geo.data_pages {
        next
    } else {
        page % k
    }
}

fn misdirected_write(a: &MisdirectArgs) -> Result<Outcome> {
    let mut checks = vec![("--page", a.page)];
    if let Some(to) = a.to {
        if to == a.page {
            bail!(
                "--to {to} is the page the write was meant for; a misdirected write lands elsewhere"
            );
        }
        checks.push(("--to", to));
    }
    let s = open_for_write(&a.path, &a.region, &checks)?;
    let mut notes = open_notes(&a.region, s.prot.data_offset(), &s.report);
    let (to, mode, geo, base, intended) = s.finish(|s| {
        let geo = s.prot.geometry();
        let to = match a.to {
            Some(to) => to,
            None => {
                let to = next_stripe_page(&geo, a.page);
                if to == a.page {
                    bail!(
                        "region `{}` has a single stripe, so there is no next stripe; name the \
                         page the write lands on with --to",
                        a.region
                    );
                }
                to
            }
        };
        let old = read_page(s, a.page);
        let new = new_contents(a.seed, a.page, &old);
        covered_write(s, a.page, &new)?;
        let intended = digest_protected(&s.prot);
        inject_page(s, to, &new)?;
        inject_page(s, a.page, &old)?;
        Ok((to, s.prot.mode(), geo, s.prot.data_offset(), intended))
    })?;
    mode_off_note(mode, &mut notes);
    let same_stripe = geo.stripe_of(a.page) == geo.stripe_of(to);
    if same_stripe {
        notes.push(format!(
            "pages {} and {to} are in the same stripe ({}): parity cannot rebuild both",
            a.page,
            geo.stripe_of(to)
        ));
    }
    let (from_at, to_at) = (base + a.page * PAGE, base + to * PAGE);
    if a.json {
        print_json(&serde_json::json!({
            "fault": "misdirected-write",
            "path": a.path,
            "region": a.region,
            "mode": mode,
            "page": a.page,
            "offset": from_at,
            "to": to,
            "to_offset": to_at,
            "same_stripe": same_stripe,
            "seed": a.seed,
            "digest_intended": intended,
            "notes": notes,
        }))?;
    } else {
        print_notes(&notes);
        println!(
            "misdirected write in region `{}` of {}: new contents for page {} (pool byte \
             {from_at:#x}) were written and {}, and landed on page {to} (pool byte {to_at:#x}); \
             page {} kept its previous contents",
            a.region,
            a.path.display(),
            a.page,
            coverage(mode),
            a.page
        );
        print_intended(&intended);
    }
    Ok(Outcome::Ok)
}

// ---------------------------------------------------------------------------------------------
// scrub, repair

/// One finding as JSON: the library's fields and its sentence.
#[derive(Debug, serde::Serialize)]
struct FindingJson<'a> {
    #[serde(flatten)]
    finding: &'a Finding,
    description: String,
}

impl<'a> FindingJson<'a> {
    fn of(finding: &'a Finding) -> FindingJson<'a> {
        FindingJson {
            finding,
            description: finding.describe(),
        }
    }
}

/// Everything that can refuse a read-write command, checked on read-only opens first, so that a
/// refused command leaves the file byte for byte as it was (a read-write open of the pool
/// records it in use before anything else). `pages_to_check`: page arguments, by flag.
fn preflight(
    path: &Path,
    region: &str,
    need_redundancy: bool,
    pages_to_check: &[(&str, u64)],
) -> Result<()> {
    let pool = Pool::open(
        path,
        &pmem::OpenOptions {
            read_only: true,
            domain: None,
        },
    )
    .with_context(|| format!("cannot open pool {}", path.display()))?;
    let pages = find_region(&pool, region, path)?.length / PAGE;
    pages_to_check
        .iter()
        .try_for_each(|(flag, page)| check_page(flag, *page, pages, region))?;
    drop(pool);
    open_read_only(path, region, need_redundancy)?;
    Ok(())
}

/// Open `path` read-only and the protection of `region` read-only: nothing on the file can
/// change, and a file the user may not write (mode 0444) works. With `need_redundancy`, a
/// region in mode off is refused (there is nothing to check against).
fn open_read_only(
    path: &Path,
    region: &str,
    need_redundancy: bool,
) -> Result<(Pool<Shared>, Protected<Shared>, OpenReport)> {
    let pool = Pool::open(
        path,
        &pmem::OpenOptions {
            read_only: true,
            domain: None,
        },
    )
    .with_context(|| format!("cannot open pool {}", path.display()))?
    .map_medium(Arc::new);
    find_region(&pool, region, path)?;
    let opts = OpenOptions {
        read_only: true,
        ..Default::default()
    };
    let (prot, report) =
        integrity::open_in_pool(&pool, region, opts, &mut |_, _| {}).map_err(|e| {
            anyhow::Error::new(e).context(format!(
                "cannot open the redundancy of region `{region}` in {}",
                path.display()
            ))
        })?;
    if need_redundancy && prot.mode() == Mode::Off {
        bail!(
            "region `{region}` of {} has redundancy mode off: its checksums and parity are \
             not kept up to date, so there is nothing to verify or repair against",
            path.display()
        );
    }
    Ok((pool, prot, report))
}

/// Scrub `region` of the pool at `path`: prints the human report unless `json`; returns the
/// outcome and the JSON report.
fn scrub_region(path: &Path, region: &str, json: bool) -> Result<(Outcome, serde_json::Value)> {
    let a = &ScrubTarget { path, region };
    let (pool, prot, open) = open_read_only(a.path, a.region, true)?;
    let notes = scrub_notes(a.region, &open);
    let mut bar = Progress::new(format!("scrub of `{}`", a.region));
    let report = prot.scrub(&mut bar.callback());
    bar.finish();
    let (mode, geo) = (prot.mode(), prot.geometry());
    // Read-only: closing writes nothing.
    drop(prot);
    drop(pool);
    let report = report.context("the scrub failed")?;
    let verified = report.verified();
    let findings: Vec<_> = report.findings.iter().map(FindingJson::of).collect();
    let unverifiable: Vec<_> = report.unverifiable.iter().map(FindingJson::of).collect();
    let doc = serde_json::json!({
            "path": a.path,
            "region": a.region,
            "mode": mode,
            "clean": verified,
            "verified": verified,
            "trust": report.trust,
            "open": open,
            "notes": notes,
            "pages_checked": report.pages_checked,
            "pages_skipped_written": report.pages_skipped_written,
            "parity_checked": report.parity_checked,
            "blocks_checked": report.blocks_checked,
            "lines_checked": report.lines_checked,
            "elapsed_ms": report.elapsed_ms,
            "findings": findings,
            "unverifiable": unverifiable,
    });
    if !json {
        print_notes(&notes);
        for f in &report.findings {
            println!("damage: {}", f.describe());
        }
        for f in &report.unverifiable {
            println!("unverifiable: {}", f.describe());
        }
        let checked = format!(
            "{} of {} data pages, {} parity pages, {} checksum blocks{} verified in {} ms{}",
            report.pages_checked,
            geo.data_pages,
            report.parity_checked,
            report.blocks_checked,
            if report.lines_checked > 0 {
                format!(" and {} line checksums", report.lines_checked)
            } else {
                String::new()
            },
            report.elapsed_ms,
            if report.pages_skipped_written > 0 {
                format!(
                    "; {} pages skipped: written since the last update pass",
                    report.pages_skipped_written
                )
            } else {
                String::new()
            }
        );
        let what = format!(
            "{} region `{}` (mode {}, stripes of {} pages)",
            a.path.display(),
            a.region,
            mode.name(),
            geo.stripe_pages
        );
        let path = a.path.display();
        match report.trust.basis {
            Basis::Current if verified => println!("{what}: clean; {checked}"),
            Basis::Current => println!(
                "{what}: {} finding(s); {checked}; `kavach repair {path}` repairs what parity can",
                report.findings.len(),
            ),
            Basis::Unverified => println!(
                "{what}: NOT verified: {}. {} finding(s) of damage; {checked}. Nothing was \
                 changed; `kavach repair {path}` repairs what parity can and proves every \
                 stripe before the region counts as verified again",
                report.trust.reason,
                report.findings.len(),
            ),
            Basis::Unclean => println!(
                "{what}: NOT verified: {}. {} mismatch(es) cannot be told from damage \
                 (unverifiable); {checked}. Nothing was changed; `kavach repair {path}` \
                 recovers by a resync, which takes the current contents of the unverifiable \
                 pages as the data and names them",
                report.trust.reason,
                report.unverifiable.len(),
            ),
        }
    }
    let outcome = if verified {
        Outcome::Ok
    } else {
        Outcome::Damage
    };
    Ok((outcome, doc))
}

/// Which region of which pool a scrub or repair works on.
struct ScrubTarget<'a> {
    path: &'a Path,
    region: &'a str,
}

/// Repair `region` of the pool at `path`: prints the human report unless `json`; returns the
/// outcome and the JSON report.
fn repair_region(path: &Path, region: &str, json: bool) -> Result<(Outcome, serde_json::Value)> {
    let a = &ScrubTarget { path, region };
    let s = Session::open(a.path, a.region, true)?;
    let notes = open_notes(a.region, s.prot.data_offset(), &s.report);
    let open = s.report.clone();
    let (report, mode) = s.finish(|s| {
        let mut bar = Progress::new(format!("repair of `{}`", a.region));
        let report = s.prot.repair(&mut bar.callback());
        bar.finish();
        let report = report.context("the repair failed")?;
        Ok((report, s.prot.mode()))
    })?;
    let unrepaired = report.unrepaired().count();
    let repaired = report.outcomes.len() - unrepaired;
    let doc = {
        #[derive(serde::Serialize)]
        struct OutcomeJson<'a> {
            #[serde(flatten)]
            finding: FindingJson<'a>,
            repaired: bool,
            how: &'a str,
        }
        let outcomes: Vec<_> = report
            .outcomes
            .iter()
            .map(|o| OutcomeJson {
                finding: FindingJson::of(&o.finding),
                repaired: o.repaired,
                how: &o.how,
            })
            .collect();
        serde_json::json!({
            "path": a.path,
            "region": a.region,
            "mode": mode,
            "all_repaired": unrepaired == 0,
            "repaired": repaired,
            "unrepaired": unrepaired,
            "proved_all_stripes": report.proved_all_stripes,
            "trust_after": report.trust_after,
            "open": open,
            "notes": notes,
            "pages_checked": report.scrub.pages_checked,
            "pages_skipped_written": report.scrub.pages_skipped_written,
            "parity_checked": report.scrub.parity_checked,
            "blocks_checked": report.scrub.blocks_checked,
            "lines_checked": report.scrub.lines_checked,
            "elapsed_ms": report.scrub.elapsed_ms,
            "outcomes": outcomes,
        })
    };
    if !json {
        print_notes(&notes);
        for o in &report.outcomes {
            if o.repaired {
                println!("repaired: {}: {}", o.finding.describe(), o.how);
            } else {
                println!("NOT repaired: {}: {}", o.finding.describe(), o.how);
            }
        }
        let summary = if report.outcomes.is_empty() {
            format!(
                "nothing to repair ({} data pages verified)",
                report.scrub.pages_checked
            )
        } else if unrepaired == 0 {
            format!("{repaired} finding(s), all repaired")
        } else {
            format!(
                "{} finding(s): {repaired} repaired, {unrepaired} NOT repaired (parity cannot \
                 prove the right contents; those pages keep their damaged bytes)",
                report.outcomes.len()
            )
        };
        if report.proved_all_stripes {
            println!(
                "every stripe of region `{}` proven (data, parity and checksums agree): the \
                 region is verified again",
                a.region
            );
        }
        println!("{} region `{}`: {summary}", a.path.display(), a.region);
    }
    let outcome = if unrepaired == 0 {
        Outcome::Ok
    } else {
        Outcome::Damage
    };
    Ok((outcome, doc))
}

// ---------------------------------------------------------------------------------------------
// for `kavach pool create --redundancy` and `kavach pool info`

/// Split the free space of a new pool into a data region `data` and its integrity region, and
/// compute the initial redundancy (with a progress bar).
pub fn protect_new_pool(
    pool: &mut Pool<Mapping>,
    mode: ModeArg,
    stripe_pages: u32,
    period_ms: u32,
) -> Result<Geometry> {
    let free = pool.free_bytes();
    let geo = Geometry::largest_fitting(free, stripe_pages).ok_or_else(|| {
        anyhow!(
            "the pool's {} of free space cannot hold one stripe of {stripe_pages} data pages \
             with its checksums and parity; make the pool larger",
            format_size(free)
        )
    })?;
    pool.create_region(
        DEFAULT_REGION,
        kinds::RAW,
        geo.data_pages * PAGE,
        Alignment::Page,
    )
    .with_context(|| format!("cannot create the data region `{DEFAULT_REGION}`"))?;
    let opts = CreateOptions {
        mode: mode.mode(),
        stripe_pages,
        period_ms,
    };
    let mut bar = Progress::new("computing redundancy");
    let made = integrity::create_in_pool(pool, DEFAULT_REGION, &opts, &mut bar.callback());
    bar.finish();
    made.with_context(|| format!("cannot protect the data region `{DEFAULT_REGION}`"))
}

/// The integrity facts of one protected region, from its header (read-only).
#[derive(Debug, serde::Serialize)]
pub struct IntegrityFacts {
    /// The protected data region.
    #[serde(skip)]
    pub region: String,
    /// Its integrity region.
    pub integrity_region: String,
    /// The header's facts, when it could be read.
    #[serde(flatten)]
    pub header: Option<HeaderFacts>,
    /// Why the header could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What an integrity header records.
#[derive(Debug, serde::Serialize)]
pub struct HeaderFacts {
    /// The recorded mode.
    pub mode: Mode,
    /// `clean`, `open` (in use, or a crash) or `stale` (mode off, or a rebuild not finished).
    pub state: &'static str,
    /// Data pages per stripe.
    pub stripe_pages: u32,
    /// Lazy mode's update period.
    pub period_ms: u32,
    /// Data pages protected.
    pub data_pages: u64,
    /// Bytes of data protected.
    pub data_bytes: u64,
    /// Stripes (= parity pages).
    pub stripes: u64,
    /// Bytes the integrity metadata needs (header, checksums, parity).
    pub integrity_bytes: u64,
    /// Of which, parity pages.
    pub parity_bytes: u64,
    /// Damage to one header copy (the other was used).
    pub header_damage: Vec<String>,
    /// How far the stored redundancy can be trusted (`current`, `unclean`, `unverified`) and
    /// why.
    pub trust: integrity::Trust,
    /// Section offsets within the integrity region.
    pub geometry: Geometry,
}

/// The integrity facts of every protected region of `pool` (a region `R` with a region
/// `R.integrity` beside it). Changes nothing.
pub fn integrity_facts<M: Medium + Clone + 'static>(pool: &Pool<M>) -> Vec<IntegrityFacts> {
    let mut out = Vec::new();
    for r in pool.regions() {
        if r.kind == kinds::INTEGRITY {
            continue;
        }
        let Ok(meta) = integrity::meta_region_name(&r.name) else {
            continue;
        };
        if pool.region(&meta).is_none() {
            continue;
        }
        let peek = OpenOptions {
            read_only: true,
            ..Default::default()
        };
        let (header, error) = match integrity::open_in_pool(pool, &r.name, peek, &mut |_, _| {}) {
            Ok((prot, report)) => {
                let st = prot.stats();
                let geo = prot.geometry();
                (
                    Some(HeaderFacts {
                        mode: prot.mode(),
                        state: report.previous_state,
                        stripe_pages: geo.stripe_pages,
                        period_ms: st.period_ms,
                        data_pages: geo.data_pages,
                        data_bytes: geo.data_pages * PAGE,
                        stripes: geo.stripes,
                        integrity_bytes: geo.meta_bytes,
                        parity_bytes: geo.stripes * PAGE,
                        header_damage: report.header_damage,
                        trust: report.trust,
                        geometry: geo,
                    }),
                    None,
                )
            }
            Err(e) => (None, Some(e.to_string())),
        };
        out.push(IntegrityFacts {
            region: r.name.clone(),
            integrity_region: meta,
            header,
            error,
        });
    }
    out
}

/// `info` as JSON, each protected region's entry with an `integrity` object.
pub fn info_json(info: &pmem::PoolInfo, facts: &[IntegrityFacts]) -> Result<serde_json::Value> {
    let mut v = serde_json::to_value(info)?;
    if let Some(regions) = v.get_mut("regions").and_then(|r| r.as_array_mut()) {
        for r in regions {
            let name = r.get("name").and_then(|n| n.as_str()).map(str::to_owned);
            if let Some(f) = facts.iter().find(|f| Some(&f.region) == name.as_ref()) {
                r["integrity"] = serde_json::to_value(f)?;
            }
        }
    }
    Ok(v)
}

/// Human lines for `pool info`.
pub fn print_facts(facts: &[IntegrityFacts]) {
    for f in facts {
        match (&f.header, &f.error) {
            (Some(h), _) => {
                println!(
                    "integrity   `{}`: mode {}, state {}, stripes of {} pages, period {} ms",
                    f.region,
                    h.mode.name(),
                    h.state,
                    h.stripe_pages,
                    h.period_ms
                );
                println!(
                    "            {} data pages ({}) in {} stripe(s); `{}` holds {} of \
                     checksums and parity ({} parity)",
                    h.data_pages,
                    format_size(h.data_bytes),
                    h.stripes,
                    f.integrity_region,
                    format_size(h.integrity_bytes),
                    format_size(h.parity_bytes)
                );
                for d in &h.header_damage {
                    println!("            header copy damaged (the other is used): {d}");
                }
                if h.trust.basis != Basis::Current {
                    println!(
                        "            redundancy {}: {}",
                        match h.trust.basis {
                            Basis::Unverified => "unverified",
                            _ => "not current",
                        },
                        h.trust.reason
                    );
                }
            }
            (None, e) => println!(
                "integrity   `{}`: cannot read its integrity header: {}",
                f.region,
                e.as_deref().unwrap_or("unknown error")
            ),
        }
    }
}
