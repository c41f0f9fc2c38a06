//! `kavach log ...`: Arcadia's persistent log (crate `kavach-log`) in a pool file: create,
//! append, dump and verify. Every command is a thin layer over `log::LogFile`.

use crate::outcome::Outcome;
use crate::outcome::print_json;
use crate::pool_cmd::DomainArg;
use crate::units::{format_size, parse_size};
use anyhow::{Context, Result, bail};
use clap::{ArgGroup, Args, Subcommand, ValueEnum};
use log::{Entry, ForcePolicy, LogError, LogFile, LogStats, Recovery, Stop};
use pmem::{Corruption, Domain};
use std::io::{BufRead, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Nobody frees ring space while a command runs, so waiting for it when the ring is full would
/// only delay the "log is full" error.
const FULL_WAIT: Duration = Duration::ZERO;

#[derive(Debug, Subcommand)]
pub enum LogCommand {
    /// Create a new pool file holding one log that fills it (the file must not exist).
    ///
    /// Prints the pool's path, the ring's size and the largest record payload the log takes
    /// (half the ring, at most 1 GiB). On /dev/shm the log is PM emulated in DRAM: it survives
    /// process crashes but not a reboot.
    ///
    /// Exit status: 0 created; 2 could not run (the file exists, nothing was changed; a bad
    /// size; no room).
    #[command(after_help = "Examples:\n  \
        kavach log create /dev/shm/app.log\n  \
        kavach log create /dev/shm/app.log --size 16MiB --region journal --json")]
    Create(CreateArgs),
    /// Append records: one per --data value, the whole of --file as one record, or one per line
    /// of standard input (--stdin-lines).
    ///
    /// Prints each record's LSN and whether it was durable when its append returned (with
    /// --policy frequency:F or group:G some are not); the log is then closed cleanly, which
    /// forces every record, so all of them are durable when the command ends. A payload larger
    /// than the log's limit is refused with the limit named; for --data and --file nothing is
    /// appended then, for --stdin-lines the lines before it stay appended.
    ///
    /// Exit status: 0 appended; 2 could not run (no such pool, region or log, a damaged log
    /// (see `kavach log verify` and `kavach log salvage`), a payload too large, the log full).
    #[command(after_help = "Examples:\n  \
        kavach log append /dev/shm/app.log --data 'first record' --data second\n  \
        kavach log append /dev/shm/app.log --file photo.jpg --policy sync\n  \
        printf 'a\\nb\\nc\\n' | kavach log append /dev/shm/app.log --stdin-lines --policy group:64")]
    Append(AppendArgs),
    /// List the log's entries from the head: LSN, kind, offset, length and check state, then a
    /// summary (read-only; nothing is written).
    ///
    /// Every entry is listed: data records, padding to the ring's end, the jump records
    /// recovery writes after a crash, and void records (reservations never completed). If the
    /// walk ends at a damaged record, it is listed last with the field that failed ("CRC BAD"
    /// for a payload checksum). The summary gives the record count, ring bytes used, the start
    /// and next LSN, and why the walk ended.
    ///
    /// Exit status: 0 listed; 1 listed, and the walk ended at a damaged record or a log
    /// metadata copy is damaged (see `kavach log verify`); 2 could not run (no such file, not
    /// a pool, no such region, region not a log, log metadata with no good copy left).
    #[command(after_help = "Examples:\n  \
        kavach log dump /dev/shm/app.log --payload text | head\n  \
        kavach log dump /dev/shm/app.log --from 100 --limit 10 --payload hex\n  \
        kavach log dump /dev/shm/app.log --json")]
    Dump(DumpArgs),
    /// Check every record of the log (LSN, valid word, CRC) without changing anything.
    ///
    /// Reads the whole log as recovery would and names the first damaged record (its LSN,
    /// offset, the field that failed, what was expected and what was found). A record the log
    /// recorded as durable (every one a clean close or a recovery saw) that fails a check, or
    /// one followed by whole records with later LSNs after a clean shutdown, is damage: a
    /// writable open refuses the log until `kavach log salvage` cuts it. Only if the pool was
    /// not shut down cleanly can a failing record past those be one torn by the crash, which
    /// recovery (the next writable open) drops.
    ///
    /// Exit status: 0 healthy; 1 damage found (a record; a copy of the log's descriptor or
    /// superline; or no good copy left, so the log does not open); 2 the check could not run
    /// (no such file, not a pool, no such region, region not a log, pool in use).
    #[command(after_help = "Examples:\n  \
        kavach log verify /dev/shm/app.log\n  \
        kavach log verify /dev/shm/app.log --region journal --json")]
    Verify(VerifyArgs),
    /// Cut a damaged log back to its longest proven prefix, saving everything cut to a side file
    /// first.
    ///
    /// Keeps every record before the one `kavach log verify` names (the walk from the head
    /// accepts exactly those) and cuts that record, every whole record with a later LSN found
    /// after it, and the bytes between them. Each cut entry (its raw bytes, LSN and pool offset)
    /// goes to the side file (default POOL.salvage; format in docs/format/log.md, "Salvage side
    /// file"), which is written and fsynced before the log is touched. Then the log ends where
    /// the walk stopped: a jump record goes there, so no cut record can come back, and appends
    /// continue. Prints what was kept and every entry cut. Also recovers a pool that was not
    /// shut down cleanly (the cut entries then include records a crash left past the tail). A
    /// healthy log is left untouched and no side file is written.
    ///
    /// Exit status: 0 salvaged, or nothing to salvage; 2 could not run (no such file, not a
    /// pool, no such region, region not a log, log metadata with no good copy left, the side
    /// file exists and --overwrite was not given, the side file could not be written: then the
    /// log was not changed).
    #[command(after_help = "Examples:\n  \
        kavach log salvage /dev/shm/app.log\n  \
        kavach log salvage /dev/shm/app.log --output /var/tmp/app.cut --json")]
    Salvage(SalvageArgs),
}

#[derive(Debug, Args)]
pub struct SalvageArgs {
    /// Pool file holding the log.
    pub path: PathBuf,
    /// Name of the log region.
    #[arg(long, default_value = log::file::DEFAULT_REGION)]
    pub region: String,
    /// Side file for the cut entries (default: the pool's path with `.salvage` appended).
    #[arg(long, value_name = "SIDE_FILE")]
    pub output: Option<PathBuf>,
    /// Replace the side file if it exists (its old contents are lost).
    #[arg(long)]
    pub overwrite: bool,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Path of the new pool file.
    pub path: PathBuf,
    /// Pool size: a multiple of 4096 (K, KiB = 1024; KB = 1000; also M, G, T; 0x... hex); the log gets all of it but
    /// the pool's own metadata.
    #[arg(long, value_parser = parse_size, default_value = "64MiB")]
    pub size: u64,
    /// Name of the log region.
    #[arg(long, default_value = log::file::DEFAULT_REGION)]
    pub region: String,
    /// Persistence domain to record: auto detects it (adr on DAX or /dev/shm, msync on disk).
    #[arg(long, value_enum, default_value_t = DomainArg::Auto)]
    pub domain: DomainArg,
    /// Print the new log's geometry as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(group(
    ArgGroup::new("input")
        .required(true)
        .args(["data", "file", "stdin_lines"])
))]
pub struct AppendArgs {
    /// Pool file holding the log.
    pub path: PathBuf,
    /// Name of the log region.
    #[arg(long, default_value = log::file::DEFAULT_REGION)]
    pub region: String,
    /// When records are forced: sync (each one), frequency:F (at LSNs that are multiples of F)
    /// or group:G (once G records have gathered). Closing forces the rest.
    #[arg(long, default_value = "sync", value_parser = ForcePolicy::parse)]
    pub policy: ForcePolicy,
    /// A record's payload (UTF-8 text); repeat for several records, appended in order.
    #[arg(long, value_name = "TEXT")]
    pub data: Vec<String>,
    /// Append the whole of FILE as one record.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Append one record per line of standard input, without its line ending (\n or \r\n).
    #[arg(long)]
    pub stdin_lines: bool,
    /// Print the appended LSNs as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DumpArgs {
    /// Pool file holding the log.
    pub path: PathBuf,
    /// Name of the log region.
    #[arg(long, default_value = log::file::DEFAULT_REGION)]
    pub region: String,
    /// List entries from this LSN on.
    #[arg(long, value_name = "LSN")]
    pub from: Option<u64>,
    /// List at most N entries.
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Show data records' payloads: as text (escaped) or hex.
    #[arg(long, value_enum, default_value_t = PayloadArg::None)]
    pub payload: PayloadArg,
    /// With --payload: show at most this many bytes of each payload (0: all of it).
    #[arg(long, value_name = "BYTES", value_parser = parse_size, default_value = "64")]
    pub payload_bytes: u64,
    /// One JSON document: entries, stats and why the walk ended.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PayloadArg {
    /// Do not show payloads.
    None,
    /// Show payloads as text, non-printable characters escaped.
    Text,
    /// Show payloads as hex.
    Hex,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Pool file holding the log.
    pub path: PathBuf,
    /// Name of the log region.
    #[arg(long, default_value = log::file::DEFAULT_REGION)]
    pub region: String,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: LogCommand) -> Result<Outcome> {
    let result = match cmd {
        LogCommand::Create(a) => create(&a),
        LogCommand::Append(a) => append(&a),
        LogCommand::Dump(a) => dump(&a),
        LogCommand::Verify(a) => verify(&a),
        LogCommand::Salvage(a) => salvage(&a),
    };
    result.map_err(|e| anyhow::Error::new(crate::outcome::CommandFailed(e)))
}

fn domain(d: DomainArg) -> Option<Domain> {
    match d {
        DomainArg::Auto => None,
        DomainArg::Adr => Some(Domain::Adr),
        DomainArg::Eadr => Some(Domain::Eadr),
        DomainArg::Msync => Some(Domain::Msync),
    }
}

fn open(path: &Path, region: &str, read_only: bool) -> Result<LogFile> {
    LogFile::open(path, region, read_only, FULL_WAIT).map_err(|e| open_error(e, path, region))
}

fn open_error(e: LogError, path: &Path, region: &str) -> anyhow::Error {
    let hint = match &e {
        LogError::Corrupt(c) if c.structure.starts_with("log record") => {
            " (see `kavach log verify`; `kavach log salvage` cuts the log back to the records \
             before the damaged one, saving the rest to a side file)"
        }
        LogError::Corrupt(_) => " (see `kavach log verify`)",
        LogError::Pmem(p) if p.corruption().is_some() => " (see `kavach pool check`)",
        _ => "",
    };
    anyhow::Error::new(e).context(format!(
        "cannot open log `{region}` in {}{hint}",
        path.display()
    ))
}

// ---------------------------------------------------------------------------------------------
// create

fn create(a: &CreateArgs) -> Result<Outcome> {
    if a.path.symlink_metadata().is_ok() {
        bail!(
            "{} already exists; nothing was changed (`kavach log create` makes a new file and \
             never overwrites one)",
            a.path.display()
        );
    }
    let lf = LogFile::create(&a.path, a.size, &a.region, domain(a.domain), FULL_WAIT)
        .with_context(|| format!("cannot create log pool {}", a.path.display()))?;
    let stats = lf.log().stats();
    let region = lf.region().clone();
    let info = lf.pool().info();
    lf.close()
        .with_context(|| format!("cannot close the new log pool {}", a.path.display()))?;
    if a.json {
        print_json(&serde_json::json!({
            "path": a.path,
            "size": info.size,
            "domain": info.domain,
            "survives_reboot": info.survives_reboot,
            "region": region,
            "ring_bytes": stats.ring_bytes,
            "payload_bytes_max": stats.payload_bytes_max,
        }))?;
    } else {
        println!(
            "created     {} ({}, domain {})",
            a.path.display(),
            format_size(info.size),
            info.domain
        );
        println!(
            "region      `{}` at offset {:#x}, {}",
            region.name,
            region.offset,
            format_size(region.length)
        );
        println!(
            "ring        {} bytes ({})",
            stats.ring_bytes,
            format_size(stats.ring_bytes)
        );
        println!(
            "max payload {} bytes ({}) per record",
            stats.payload_bytes_max,
            format_size(u64::from(stats.payload_bytes_max))
        );
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
// append

#[derive(Debug, serde::Serialize)]
struct AppendedJson {
    lsn: u64,
    durable: bool,
}

fn too_large(length: u64, max: u32) -> LogError {
    LogError::TooLarge { length, max }
}

fn append(a: &AppendArgs) -> Result<Outcome> {
    // A writable open writes the pool's slot (in use, then clean again when it refuses), so
    // first look read-only, which writes nothing at all, and refuse there what a writable open
    // would; the look also gives the payload limit, so oversized --data and --file append
    // nothing. The price is a second walk of the log.
    let max = {
        let look = open(&a.path, &a.region, true)?;
        // Damage (as opposed to a record a crash may have tore) refuses the writable open,
        // whatever the clean-shutdown flag says.
        if let Some(c) = &look.recovery().damaged {
            return Err(open_error(LogError::Corrupt(c.clone()), &a.path, &a.region));
        }
        look.log().payload_bytes_max()
    };
    let nothing = "nothing was appended";
    for (i, d) in a.data.iter().enumerate() {
        if d.len() as u64 > u64::from(max) {
            bail!(
                "cannot append --data value {}: {}; {nothing}",
                i + 1,
                too_large(d.len() as u64, max)
            );
        }
    }
    let file_payload = match &a.file {
        Some(f) => Some(read_payload(f, max).map_err(|e| anyhow::anyhow!("{e:#}; {nothing}"))?),
        None => None,
    };
    let lf = open(&a.path, &a.region, false)?;
    let notes = recovery_notes(lf.recovery(), lf.pool().was_clean_shutdown());
    if !a.json {
        for n in &notes {
            println!("note: {n}");
        }
    }
    let mut appended: Vec<AppendedJson> = Vec::new();
    let result = append_records(a, &lf, file_payload.as_deref(), &mut appended);
    let next_lsn = lf.log().next_lsn();
    // Close even after a failure: the records appended so far are forced, the pool marked
    // cleanly shut down.
    let closed = lf.close();
    if let Err(e) = result {
        let kept = match (appended.first(), appended.last()) {
            (Some(f), Some(l)) => format!(
                "the {} record(s) before it were appended (LSN {}..={}) and are durable",
                appended.len(),
                f.lsn,
                l.lsn
            ),
            _ => nothing.into(),
        };
        bail!("{e:#}; {kept}");
    }
    closed.with_context(|| format!("cannot close the log in {}", a.path.display()))?;
    if a.json {
        print_json(&serde_json::json!({
            "path": a.path,
            "region": a.region,
            "policy": a.policy.to_string(),
            "appended": appended,
            "next_lsn": next_lsn,
            "closed_cleanly": true,
            "notes": notes,
        }))?;
    } else {
        let range = match (appended.first(), appended.last()) {
            (Some(f), Some(l)) if f.lsn == l.lsn => format!(" (LSN {})", f.lsn),
            (Some(f), Some(l)) => format!(" (LSN {}..={})", f.lsn, l.lsn),
            _ => String::new(),
        };
        println!(
            "appended {} record(s){range} to log `{}` in {}; closed cleanly, all durable",
            appended.len(),
            a.region,
            a.path.display()
        );
    }
    Ok(Outcome::Ok)
}

/// The whole of file `f`, refused (before it is read) if it is larger than `max`.
fn read_payload(f: &Path, max: u32) -> Result<Vec<u8>> {
    let h = std::fs::File::open(f).with_context(|| format!("cannot read {}", f.display()))?;
    let len = h
        .metadata()
        .with_context(|| format!("cannot read {}", f.display()))?
        .len();
    if len > u64::from(max) {
        return Err(anyhow::Error::new(too_large(len, max))
            .context(format!("cannot append {}", f.display())));
    }
    let mut bytes = Vec::new();
    // At most one byte past the limit: a file that grew meanwhile is still refused.
    h.take(u64::from(max) + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {}", f.display()))?;
    if bytes.len() as u64 > u64::from(max) {
        return Err(anyhow::Error::new(too_large(bytes.len() as u64, max))
            .context(format!("cannot append {}", f.display())));
    }
    Ok(bytes)
}

fn append_records(
    a: &AppendArgs,
    lf: &LogFile,
    file_payload: Option<&[u8]>,
    appended: &mut Vec<AppendedJson>,
) -> Result<()> {
    let log = lf.log();
    let mut one = |payload: &[u8], what: &dyn Fn() -> String| -> Result<()> {
        let r = log
            .append(payload, a.policy)
            .with_context(|| format!("cannot append {}", what()))?;
        if !a.json {
            println!(
                "lsn {} {}",
                r.lsn,
                if r.durable {
                    "durable"
                } else {
                    "not yet durable (forced at close)"
                }
            );
        }
        appended.push(AppendedJson {
            lsn: r.lsn,
            durable: r.durable,
        });
        Ok(())
    };
    if let (Some(f), Some(bytes)) = (&a.file, file_payload) {
        return one(bytes, &|| f.display().to_string());
    }
    if a.stdin_lines {
        let stdin = std::io::stdin();
        for (i, line) in stdin.lock().split(b'\n').enumerate() {
            let mut line = line.context("cannot read standard input")?;
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            one(&line, &|| format!("line {} of standard input", i + 1))?;
        }
        return Ok(());
    }
    for (i, d) in a.data.iter().enumerate() {
        one(d.as_bytes(), &|| format!("--data value {}", i + 1))?;
    }
    Ok(())
}

/// What a writable open's recovery did, in words.
fn recovery_notes(rec: &Recovery, clean: bool) -> Vec<String> {
    let mut notes = Vec::new();
    if !clean {
        notes.push("the pool was not shut down cleanly last time; the log was recovered".into());
    }
    if let Some(c) = &rec.dropped {
        notes.push(format!(
            "recovery dropped a record taken for one torn by the crash, and everything after it: \
             {c}"
        ));
    }
    if let Some(to) = rec.jumped_to {
        notes.push(format!(
            "recovery wrote a jump record: LSNs continue from {to}, past any a lost record holds"
        ));
    }
    for c in &rec.repaired {
        notes.push(format!("recovery rewrote a damaged copy: {c}"));
    }
    notes
}

// ---------------------------------------------------------------------------------------------
// dump

/// Buffered stdout for long listings. A reader that went away (`kavach log dump | head`) ends the
/// command quietly with the status a shell gives a process killed by SIGPIPE, as `println!`
/// does through the panic hook in main.rs.
struct Out(BufWriter<std::io::StdoutLock<'static>>);

impl Out {
    fn new() -> Out {
        Out(BufWriter::new(std::io::stdout().lock()))
    }
    fn line(&mut self, args: std::fmt::Arguments<'_>) -> Result<()> {
        let text = args.to_string();
        let r = writeln!(self.0, "{}", text.trim_end());
        Self::check(r)
    }
    fn flush(&mut self) -> Result<()> {
        Self::check(self.0.flush())
    }
    fn check(r: std::io::Result<()>) -> Result<()> {
        match r {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(141),
            r => r.context("cannot write to standard output"),
        }
    }
}

#[derive(Debug, serde::Serialize)]
struct EntryJson {
    #[serde(flatten)]
    entry: Entry,
    check: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_hex: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_truncated: Option<bool>,
}

#[derive(Debug, serde::Serialize)]
struct CorruptionJson {
    structure: String,
    offset: u64,
    field: &'static str,
    expected: String,
    found: String,
    message: String,
}

impl From<&Corruption> for CorruptionJson {
    fn from(c: &Corruption) -> Self {
        CorruptionJson {
            structure: c.structure.clone(),
            offset: c.offset,
            field: c.field,
            expected: c.expected.clone(),
            found: c.found.clone(),
            message: c.to_string(),
        }
    }
}

/// The record a walk stopped at as damaged.
#[derive(Debug, serde::Serialize)]
struct DamagedJson {
    lsn: u64,
    /// Pool offset of the record's header.
    record_offset: u64,
    #[serde(flatten)]
    corruption: CorruptionJson,
}

impl DamagedJson {
    fn new(lsn: u64, c: &Corruption) -> DamagedJson {
        let align = log::layout::RECORD_ALIGN as u64;
        DamagedJson {
            lsn,
            // Every header field lies in the record's first cache line.
            record_offset: c.offset - c.offset % align,
            corruption: c.into(),
        }
    }
    fn check(&self) -> String {
        if self.corruption.field == "payload_crc" {
            "CRC BAD".into()
        } else {
            format!("BAD {}", self.corruption.field)
        }
    }
}

#[derive(Debug, serde::Serialize)]
struct StopJson {
    reason: &'static str,
    description: String,
}

impl StopJson {
    fn new(s: &Stop, damaged: Option<&DamagedJson>) -> Self {
        let reason = match s {
            Stop::Tail { .. } => "tail",
            Stop::Incomplete { .. } => "incomplete",
            Stop::RingFull => "ring_full",
            Stop::Damaged(_) => "damaged",
        };
        StopJson {
            reason,
            description: ended(s, damaged),
        }
    }
}

/// The damaged record a read-only open's walk ended at: one failing its checks, or one the
/// library counts as damage for another reason (`dropped`, e.g. a record left incomplete although
/// the pool was shut down cleanly). Read-only recovery neither drops nor jumps, so the next LSN
/// is that record's.
fn damaged_record(rec: &Recovery) -> Option<DamagedJson> {
    failing(rec).map(|c| DamagedJson::new(rec.next_lsn, c))
}

fn failing(rec: &Recovery) -> Option<&Corruption> {
    match &rec.stop {
        Stop::Damaged(c) => Some(c),
        _ => rec.dropped.as_ref(),
    }
}

/// Why the walk ended, in words.
fn ended(stop: &Stop, damaged: Option<&DamagedJson>) -> String {
    match damaged {
        Some(d) if !matches!(stop, Stop::Damaged(_)) => {
            format!("damaged record: {}", d.corruption.message)
        }
        _ => stop.describe(),
    }
}

const TORN_NOTE: &str = "the pool was not shut down cleanly: if this is the log's last record, \
                         it may be one torn by the crash, which recovery (the next writable \
                         open) drops along with everything after it";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn dump(a: &DumpArgs) -> Result<Outcome> {
    let lf = open(&a.path, &a.region, true)?;
    let log = lf.log();
    let rec = lf.recovery();
    let clean = lf.pool().was_clean_shutdown();
    let from = a.from.unwrap_or(0);
    let limit = a.limit.unwrap_or(usize::MAX);
    let prefix = match usize::try_from(a.payload_bytes) {
        Ok(0) | Err(_) => usize::MAX,
        Ok(n) => n,
    };
    // Text goes out as the walk proceeds (so `| head` sees lines at once and a long log is not
    // held in memory); JSON is one document, gathered first.
    let mut out = (!a.json).then(Out::new);
    if let Some(o) = out.as_mut() {
        let title = if a.payload == PayloadArg::None {
            ""
        } else {
            "PAYLOAD"
        };
        o.line(format_args!(
            "{:>10}  {:<8} {:>14} {:>10}  {:<8} {title}",
            "LSN", "KIND", "OFFSET", "LENGTH", "CHECK"
        ))?;
    }
    let mut listed: Vec<EntryJson> = Vec::new();
    let mut count = 0usize;
    // Payloads come from the recovery iterator, which yields data records in LSN order, as the
    // entry walk does: the two advance together.
    let mut records = (a.payload != PayloadArg::None).then(|| log.records().peekable());
    let mut entries = log.entries();
    let mut complete = true;
    for e in entries.by_ref() {
        if e.lsn < from {
            continue;
        }
        if count >= limit {
            complete = false;
            break;
        }
        count += 1;
        let mut payload = None;
        if let (Some(it), "data") = (records.as_mut(), e.kind) {
            while it
                .next_if(|r| r.as_ref().is_ok_and(|r| r.lsn < e.lsn))
                .is_some()
            {}
            if let Some(Ok(mut r)) = it.next_if(|r| r.as_ref().is_ok_and(|r| r.lsn == e.lsn)) {
                let total = r.payload.len();
                r.payload.truncate(prefix);
                payload = Some((r.payload, total));
            } else if matches!(it.peek(), Some(Err(_))) {
                records = None;
            }
        }
        match out.as_mut() {
            Some(o) => {
                let shown = match (e.jump_to, &payload) {
                    (Some(to), _) => format!("next LSN {to}"),
                    (None, Some((b, total))) => {
                        let body = match a.payload {
                            PayloadArg::Hex => hex(b),
                            _ => format!("\"{}\"", String::from_utf8_lossy(b).escape_debug()),
                        };
                        if b.len() < *total {
                            format!("{body}... ({total} bytes)")
                        } else {
                            body
                        }
                    }
                    (None, None) => String::new(),
                };
                o.line(format_args!(
                    "{:>10}  {:<8} {:>14} {:>10}  {:<8} {shown}",
                    e.lsn,
                    e.kind,
                    format!("{:#x}", e.offset),
                    e.length,
                    "ok"
                ))?;
            }
            None => {
                let truncated = payload.as_ref().map(|(b, total)| b.len() < *total);
                let (payload_text, payload_hex) = match (payload, a.payload) {
                    (Some((b, _)), PayloadArg::Text) => {
                        (Some(String::from_utf8_lossy(&b).into_owned()), None)
                    }
                    (Some((b, _)), PayloadArg::Hex) => (None, Some(hex(&b))),
                    _ => (None, None),
                };
                listed.push(EntryJson {
                    entry: e,
                    check: "ok",
                    payload_text,
                    payload_hex,
                    payload_truncated: truncated,
                });
            }
        }
    }
    let stop = match entries.stop() {
        Some(s) if complete => s.clone(),
        _ => rec.stop.clone(),
    };
    let found = damaged_record(rec);
    let stop_json = StopJson::new(&stop, found.as_ref());
    let outcome = if found.is_some() || !rec.repaired.is_empty() {
        Outcome::Damage
    } else {
        Outcome::Ok
    };
    let torn_note = found.is_some() && !clean && rec.damaged.is_none();
    let damaged = found.filter(|d| d.lsn >= from && count < limit);
    let stats = log.stats();

    let Some(mut o) = out else {
        print_json(&DumpJson {
            path: &a.path,
            region: &a.region,
            clean_shutdown: clean,
            entries: listed,
            damaged,
            stats,
            records: rec.records,
            ring_bytes_used: rec.ring_bytes_used,
            start_lsn: rec.start_lsn,
            next_lsn: rec.next_lsn,
            stop: stop_json,
            repaired: rec.repaired.iter().map(CorruptionJson::from).collect(),
        })?;
        return Ok(outcome);
    };
    if let Some(d) = &damaged {
        o.line(format_args!(
            "{:>10}  {:<8} {:>14} {:>10}  {:<8} field `{}` expected {}, found {}",
            d.lsn,
            "?",
            format!("{:#x}", d.record_offset),
            "?",
            d.check(),
            d.corruption.field,
            d.corruption.expected,
            d.corruption.found
        ))?;
    }
    o.line(format_args!(
        "{} record(s), {} of {} ring used, start LSN {}, next LSN {}: {}",
        rec.records,
        format_size(rec.ring_bytes_used),
        format_size(stats.ring_bytes),
        rec.start_lsn,
        rec.next_lsn,
        stop_json.description
    ))?;
    for c in &rec.repaired {
        o.line(format_args!("damaged: {c} (a good copy remains)"))?;
    }
    if torn_note {
        o.line(format_args!("note: {TORN_NOTE}"))?;
    }
    o.flush()?;
    Ok(outcome)
}

#[derive(Debug, serde::Serialize)]
struct DumpJson<'a> {
    path: &'a Path,
    region: &'a str,
    clean_shutdown: bool,
    entries: Vec<EntryJson>,
    /// The damaged record the walk stopped at, if it is in the listed range.
    damaged: Option<DamagedJson>,
    stats: LogStats,
    records: u64,
    ring_bytes_used: u64,
    start_lsn: u64,
    next_lsn: u64,
    stop: StopJson,
    repaired: Vec<CorruptionJson>,
}

// ---------------------------------------------------------------------------------------------
// verify

#[derive(Debug, serde::Serialize)]
struct VerifyJson<'a> {
    path: &'a Path,
    region: &'a str,
    healthy: bool,
    opens: bool,
    clean_shutdown: Option<bool>,
    records: u64,
    first_lsn: Option<u64>,
    last_lsn: Option<u64>,
    start_lsn: Option<u64>,
    next_lsn: Option<u64>,
    ring_bytes_used: Option<u64>,
    ring_bytes: Option<u64>,
    stop: Option<StopJson>,
    damaged: Option<DamagedJson>,
    /// Damaged copies of the log's descriptor or superline (a good copy remains), or, when
    /// `opens` is false, the metadata that kept the log from opening.
    metadata_damage: Vec<CorruptionJson>,
    /// Damage in the pool's own metadata survived at open (see `kavach pool check`).
    pool_damage: Vec<String>,
    notes: Vec<String>,
}

fn verify(a: &VerifyArgs) -> Result<Outcome> {
    let lf = match LogFile::open(&a.path, &a.region, true, FULL_WAIT) {
        Ok(lf) => lf,
        // Read-only, only the log's own metadata (both copies) can make opening fail as
        // corrupt: that is damage found, not a check that could not run.
        Err(LogError::Corrupt(c)) => return verify_unopenable(a, &c),
        Err(e) => return Err(open_error(e, &a.path, &a.region)),
    };
    let log = lf.log();
    let rec = lf.recovery();
    let clean = lf.pool().was_clean_shutdown();
    // Walk every record as recovery's iterator does (LSN, valid word, CRC).
    let (mut count, mut first, mut last, mut damaged) = (0u64, None, None, None);
    let mut it = log.records();
    while let Some(r) = it.next() {
        match r {
            Ok(r) => {
                count += 1;
                first.get_or_insert(r.lsn);
                last = Some(r.lsn);
            }
            Err(e) => {
                let lsn = it.expected_lsn();
                damaged = e.corruption().map(|c| DamagedJson::new(lsn, c));
                if damaged.is_none() {
                    return Err(anyhow::Error::new(e).context("cannot read the log"));
                }
                break;
            }
        }
    }
    drop(it);
    if damaged.is_none() {
        damaged = damaged_record(rec);
    }
    // After an unclean shutdown a superline copy cut short by the crash is expected (the other
    // copy is in force): a note, not damage.
    let (torn_superlines, metadata): (Vec<_>, Vec<_>) = rec
        .repaired
        .iter()
        .partition(|c| !clean && c.structure.starts_with("log superline"));
    let healthy = damaged.is_none() && metadata.is_empty();
    let mut notes: Vec<String> = torn_superlines
        .iter()
        .map(|c| {
            format!(
                "{c}: an update the unclean shutdown cut short; the other copy is in force and the                  next writable open rewrites this one"
            )
        })
        .collect();
    if damaged.is_some() {
        notes.push(if clean {
            "the pool was shut down cleanly, so no crash tore this record: it is damage, and a \
             writable open (`kavach log append`) refuses the log until `kavach log salvage` \
             cuts it (saving what it cuts to a side file)"
                .to_string()
        } else if rec.damaged.is_some() {
            "the pool was not shut down cleanly, but this record was durable before the crash \
             (or whole records with later LSNs follow it): it is damage, not a record torn by \
             the crash, and a writable open (`kavach log append`) refuses the log until \
             `kavach log salvage` cuts it (saving what it cuts to a side file)"
                .to_string()
        } else {
            TORN_NOTE.to_string()
        });
    }
    let pool_damage: Vec<String> = lf.pool().damage().iter().map(|c| c.to_string()).collect();
    let stats = log.stats();
    if a.json {
        print_json(&VerifyJson {
            path: &a.path,
            region: &a.region,
            healthy,
            opens: true,
            clean_shutdown: Some(clean),
            records: count,
            first_lsn: first,
            last_lsn: last,
            start_lsn: Some(rec.start_lsn),
            next_lsn: Some(rec.next_lsn),
            ring_bytes_used: Some(rec.ring_bytes_used),
            ring_bytes: Some(stats.ring_bytes),
            stop: Some(StopJson::new(&rec.stop, damaged.as_ref())),
            damaged,
            metadata_damage: metadata.iter().map(|c| CorruptionJson::from(*c)).collect(),
            pool_damage,
            notes,
        })?;
    } else {
        let lsns = match (first, last) {
            (Some(f), Some(l)) => format!(" (LSN {f}..={l})"),
            _ => String::new(),
        };
        if let Some(d) = &damaged {
            println!(
                "damaged: record LSN {} (header at byte {:#x}): field `{}` at byte {:#x} expected \
                 {}, found {}",
                d.lsn,
                d.record_offset,
                d.corruption.field,
                d.corruption.offset,
                d.corruption.expected,
                d.corruption.found
            );
        }
        for c in &metadata {
            println!("damaged: {c} (a good copy remains; a writable open rewrites this one)");
        }
        for p in &pool_damage {
            println!("note: pool metadata: {p} (see `kavach pool check`)");
        }
        for n in &notes {
            println!("note: {n}");
        }
        let state = if healthy { "healthy" } else { "DAMAGED" };
        let before = if damaged.is_some() {
            " before the damaged one"
        } else {
            ""
        };
        // A damaged stop was named above; otherwise say how the walk ended.
        let ended = if damaged.is_some() {
            String::new()
        } else {
            format!("; {}", rec.stop.describe())
        };
        println!(
            "{}: log `{}` {state}: {count} good record(s){lsns}{before}, {} of {} ring used{ended}; \
             {} shutdown",
            a.path.display(),
            a.region,
            format_size(rec.ring_bytes_used),
            format_size(stats.ring_bytes),
            if clean { "clean" } else { "unclean" }
        );
    }
    Ok(if healthy {
        Outcome::Ok
    } else {
        Outcome::Damage
    })
}

fn verify_unopenable(a: &VerifyArgs, c: &Corruption) -> Result<Outcome> {
    if a.json {
        print_json(&VerifyJson {
            path: &a.path,
            region: &a.region,
            healthy: false,
            opens: false,
            clean_shutdown: None,
            records: 0,
            first_lsn: None,
            last_lsn: None,
            start_lsn: None,
            next_lsn: None,
            ring_bytes_used: None,
            ring_bytes: None,
            stop: None,
            damaged: None,
            metadata_damage: vec![c.into()],
            pool_damage: Vec::new(),
            notes: Vec::new(),
        })?;
    } else {
        println!("damaged: {c}");
        println!(
            "{}: log `{}` DAMAGED: no good copy of its metadata is left; the log does NOT open",
            a.path.display(),
            a.region
        );
    }
    Ok(Outcome::Damage)
}

// ---------------------------------------------------------------------------------------------
// salvage

#[derive(Debug, serde::Serialize)]
struct CutJson {
    kind: &'static str,
    lsn: Option<u64>,
    record_kind: Option<&'static str>,
    offset: u64,
    bytes: usize,
}

#[derive(Debug, serde::Serialize)]
struct SalvageJson<'a> {
    path: &'a Path,
    region: &'a str,
    salvaged: bool,
    side_file: Option<&'a Path>,
    kept_records: u64,
    start_lsn: u64,
    stop_lsn: u64,
    stop_offset: u64,
    failure: Option<CorruptionJson>,
    damaged: bool,
    clean_shutdown: bool,
    cut: Vec<CutJson>,
    cut_bytes: u64,
    next_lsn: Option<u64>,
    repaired: Vec<CorruptionJson>,
}

fn cut_json(c: &log::Cut) -> CutJson {
    CutJson {
        kind: c.kind.name(),
        lsn: (c.kind != log::CutKind::Unrecognized).then_some(c.lsn),
        record_kind: (c.kind == log::CutKind::Whole)
            .then(|| log::layout::kinds::name(c.record_kind)),
        offset: c.offset,
        bytes: c.bytes.len(),
    }
}

/// Write the side file whole and make it durable (file, then its directory) before anything
/// in the log changes. A file that exists is refused unless `overwrite`.
fn write_side_file(path: &Path, plan: &log::SalvagePlan, overwrite: bool) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = std::fs::OpenOptions::new();
    // The cut records are the log's data: readable by the owner only, as the pool is.
    opts.write(true).mode(0o600);
    if overwrite {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    let file = opts.open(path).map_err(|e| {
        let why = if e.kind() == std::io::ErrorKind::AlreadyExists {
            " (it exists: choose another --output, or give --overwrite to replace it)".to_string()
        } else {
            String::new()
        };
        anyhow::Error::new(e).context(format!(
            "cannot create the side file {}{why}; the log was not changed",
            path.display()
        ))
    })?;
    let written = (|| -> std::io::Result<()> {
        let mut w = BufWriter::new(&file);
        log::salvage::write_side_file(plan, &mut w)?;
        w.flush()?;
        drop(w);
        file.sync_all()?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        std::fs::File::open(dir)?.sync_all()
    })();
    written.with_context(|| {
        format!(
            "cannot write the side file {} (it may be incomplete); the log was not changed",
            path.display()
        )
    })
}

fn salvage(a: &SalvageArgs) -> Result<Outcome> {
    let side = a.output.clone().unwrap_or_else(|| {
        let mut p = a.path.clone().into_os_string();
        p.push(".salvage");
        PathBuf::from(p)
    });
    // 1. Look read-only (nothing is written) and make the plan.
    let look = match LogFile::open(&a.path, &a.region, true, FULL_WAIT) {
        Ok(lf) => lf,
        Err(e @ LogError::Corrupt(_)) => {
            return Err(open_error(e, &a.path, &a.region).context(
                "the log's own metadata has no good copy left: salvage keeps records, it cannot \
                 rebuild a descriptor or superline",
            ));
        }
        Err(e) => return Err(open_error(e, &a.path, &a.region)),
    };
    let clean = look.pool().was_clean_shutdown();
    let plan = look.log().salvage_plan(look.recovery(), clean);
    let repaired: Vec<CorruptionJson> = look
        .recovery()
        .repaired
        .iter()
        .map(CorruptionJson::from)
        .collect();
    drop(look);
    let needed = !plan.cut.is_empty() || plan.failure.is_some() || !clean || !repaired.is_empty();
    let mut report = SalvageJson {
        path: &a.path,
        region: &a.region,
        salvaged: needed,
        side_file: None,
        kept_records: plan.kept_records,
        start_lsn: plan.start_lsn,
        stop_lsn: plan.stop_lsn,
        stop_offset: plan.stop_offset,
        failure: plan.failure.as_ref().map(CorruptionJson::from),
        damaged: plan.damaged,
        clean_shutdown: clean,
        cut: plan.cut.iter().map(cut_json).collect(),
        cut_bytes: plan.cut_bytes(),
        next_lsn: None,
        repaired,
    };
    if !needed {
        if a.json {
            print_json(&report)?;
        } else {
            println!(
                "{}: log `{}` is healthy ({} record(s), next LSN {}): nothing to salvage; \
                 nothing was changed and no side file was written",
                a.path.display(),
                a.region,
                plan.kept_records,
                plan.stop_lsn
            );
        }
        return Ok(Outcome::Ok);
    }
    // 2. Save every cut entry, durably, before the log changes.
    if !plan.cut.is_empty() {
        write_side_file(&side, &plan, a.overwrite)?;
        report.side_file = Some(&side);
    }
    // 3. Cut: re-plan under the exclusive lock, then end the log where the walk stopped.
    let lf = LogFile::salvage(&a.path, &a.region, &plan, FULL_WAIT).map_err(|e| {
        let saved = if plan.cut.is_empty() {
            String::new()
        } else {
            format!(
                " (the side file {} was written; nothing was cut)",
                side.display()
            )
        };
        open_error(e, &a.path, &a.region).context(format!("cannot salvage the log{saved}"))
    })?;
    let next = lf.log().next_lsn();
    lf.close()
        .with_context(|| format!("cannot close the log in {}", a.path.display()))?;
    report.next_lsn = Some(next);
    if a.json {
        print_json(&report)?;
        return Ok(Outcome::Ok);
    }
    let kept = match plan.stop_lsn.checked_sub(1) {
        Some(last) if plan.kept_records > 0 => {
            format!(
                "{} record(s), LSN {}..={last}",
                plan.kept_records, plan.start_lsn
            )
        }
        _ => "no records".into(),
    };
    if let Some(c) = &plan.failure {
        let what = if plan.damaged {
            "damaged"
        } else {
            "torn by the crash (not forced)"
        };
        println!("stopped at: record LSN {} ({what}): {c}", plan.stop_lsn);
    }
    for c in &plan.cut {
        let what = match c.kind {
            log::CutKind::Stopped => format!("LSN {}, the record the walk stopped at", c.lsn),
            log::CutKind::Whole => format!(
                "LSN {}, a whole {} record",
                c.lsn,
                log::layout::kinds::name(c.record_kind)
            ),
            log::CutKind::Unrecognized => "bytes no check recognises".into(),
        };
        println!("cut: {:#x}, {} bytes: {what}", c.offset, c.bytes.len());
    }
    for r in &report.repaired {
        println!("repaired: {} (rewritten from the good copy)", r.message);
    }
    let saved = if plan.cut.is_empty() {
        "nothing was cut".to_string()
    } else {
        format!(
            "cut {} entr{} ({} bytes), saved first to {} (fsynced)",
            plan.cut.len(),
            if plan.cut.len() == 1 { "y" } else { "ies" },
            plan.cut_bytes(),
            side.display()
        )
    };
    println!(
        "{}: log `{}` salvaged: kept {kept}; {saved}; appends continue at LSN {next}",
        a.path.display(),
        a.region
    );
    Ok(Outcome::Ok)
}
