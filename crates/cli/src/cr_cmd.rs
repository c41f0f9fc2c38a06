//! `kavach cr`: inspect what the checkpoint/restart runtime (microfs) wrote to a device.
//!
//! Every subcommand opens the device read-only in effect: nothing is written to it, not even
//! the recovery of a namespace a crash left open (the log is replayed in memory only).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use microfs::device::{Device, Partition};
use microfs::layout::{SUPERBLOCK_MAGIC, SUPERBLOCK_OFFSETS};
use microfs::{Fs, FsError, FsOptions, Kind, label};

use crate::outcome::{CouldNotRun, Outcome, print_json};

const EXAMPLES_LS: &str = "Examples:
  kavach cr ls dir:/scratch/ckpt        (the default device of KAVACH_CR_DIR=/scratch/ckpt)
  kavach cr ls /dev/shm/kavach-cr-1000-0123456789abcdef.dev
  kavach cr ls -l job.dev --partition 2
  kavach cr ls tcp://storage1:7420/jobA --json";
const EXAMPLES_CAT: &str = "Examples:
  kavach cr cat job.dev ckpt/rank0.dat > rank0.dat
  kavach cr cat job.dev --partition 3 ckpt/step10/state.bin | cmp - expected.bin";
const EXAMPLES_EXPORT: &str = "Examples:
  kavach cr export job.dev ./restored            (every partition, into restored/part-N/)
  kavach cr export job.dev ./out --partition 0 --path ckpt/step10
  kavach cr export job.dev ./out --force         (overwrite files already in ./out)";
const EXAMPLES_CHECK: &str = "Examples:
  kavach cr check job.dev
  kavach cr check job.dev --json

Exit status: 0 consistent, 1 damage found (each finding names what, where, expected, found),
2 the check could not run (no such device, not a microfs device).";

#[derive(Debug, Subcommand)]
pub enum CrCommand {
    /// List the partitions (namespaces) of a device and the files in each, with sizes.
    #[command(after_help = EXAMPLES_LS)]
    Ls {
        #[command(flatten)]
        dev: DeviceArgs,
        /// Long listing: kind, mode, size, modification time and inode of every entry.
        #[arg(short = 'l', long)]
        long: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a file of a namespace on stdout.
    #[command(after_help = EXAMPLES_CAT)]
    Cat {
        #[command(flatten)]
        dev: DeviceArgs,
        /// The file, relative to the namespace's root (the checkpoint directory).
        path: String,
    },
    /// Copy a namespace (or a path in it) out to a directory of the kernel's file system.
    #[command(after_help = EXAMPLES_EXPORT)]
    Export {
        #[command(flatten)]
        dev: DeviceArgs,
        /// Destination directory (made if absent). With several partitions and no
        /// --partition, each goes to DEST/part-N.
        dest: PathBuf,
        /// Export only this file or directory of the namespace.
        #[arg(long)]
        path: Option<String>,
        /// Overwrite files that already exist under DEST (without it, any is refused before
        /// anything is written).
        #[arg(long)]
        force: bool,
    },
    /// Verify a device: label, superblocks, checkpoint, log, directory files against the
    /// index, hugeblock ownership and the free pool. Exit 1 if damage is found.
    #[command(after_help = EXAMPLES_CHECK)]
    Check {
        #[command(flatten)]
        dev: DeviceArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct DeviceArgs {
    /// The device: a file (as KAVACH_CR_DEVICE names it), pmem:PATH, tcp://HOST:PORT/JOB, or
    /// dir:KAVACH_CR_DIR for the default device of a checkpoint directory (one per user and
    /// directory, under /dev/shm, found as the runtime finds it).
    device: String,
    /// Only this partition of a labelled device.
    #[arg(long)]
    partition: Option<u32>,
}

impl DeviceArgs {
    /// Turns `dir:KAVACH_CR_DIR` into that directory's default device (which must exist).
    fn resolve(&mut self) -> Result<()> {
        if let Some(dir) = self.device.strip_prefix("dir:") {
            let dir = Path::new(dir);
            let dev = microfs::instance::Config::default_device(dir);
            if !Path::new(&dev).exists() {
                bail!(
                    "no checkpoint device for {}: the default device of that directory, {dev}, \
                     does not exist (nothing was written with KAVACH_CR_DIR={} and no \
                     KAVACH_CR_DEVICE, or it was removed or written by another user)",
                    dir.display(),
                    dir.display()
                );
            }
            self.device = dev;
        }
        Ok(())
    }

    /// The device spec (after [`DeviceArgs::resolve`]).
    fn device(&self) -> &str {
        &self.device
    }
}

pub fn run(mut c: CrCommand) -> Result<Outcome> {
    match &mut c {
        CrCommand::Ls { dev, .. }
        | CrCommand::Cat { dev, .. }
        | CrCommand::Export { dev, .. }
        | CrCommand::Check { dev, .. } => dev.resolve()?,
    }
    match c {
        CrCommand::Ls { dev, long, json } => ls(&dev, long, json),
        CrCommand::Cat { dev, path } => cat(&dev, &path),
        CrCommand::Export {
            dev,
            dest,
            path,
            force,
        } => export(&dev, &dest, path.as_deref(), force),
        CrCommand::Check { dev, json } => check(&dev, json),
    }
}

/// One namespace's place on the device.
struct Place {
    partition: Option<u32>,
    base: u64,
    dev: Arc<dyn Device>,
}

fn open_device(spec: &str) -> Result<Arc<dyn Device>> {
    if spec.starts_with("tcp://") || spec.starts_with("pmem:") {
        return target::open_spec(spec, None).with_context(|| format!("cannot open {spec}"));
    }
    let p = Path::new(spec);
    let meta = std::fs::metadata(p).with_context(|| format!("cannot open {spec}"))?;
    if meta.is_dir() {
        bail!("{spec} is a directory, not a device");
    }
    target::open_spec(spec, None).with_context(|| format!("cannot open {spec}"))
}

/// The namespaces a device holds (a label's partitions, or the whole device), or an error
/// when it holds none. A damaged label is `FsError::Damage`.
fn places(args: &DeviceArgs) -> Result<(Option<label::Label>, Vec<Place>)> {
    let dev = open_device(args.device())?;
    let lab = label::read(dev.as_ref()).map_err(anyhow::Error::new)?;
    let mut out = Vec::new();
    match &lab {
        None => {
            if let Some(p) = args.partition
                && p != 0
            {
                bail!(
                    "{} has no partition label: it holds one namespace (partition 0), not {p}",
                    args.device()
                );
            }
            if !has_magic(dev.as_ref()) {
                bail!(
                    "{} holds no microfs namespace (no label, no superblock)",
                    args.device()
                );
            }
            out.push(Place {
                partition: None,
                base: 0,
                dev: dev.clone(),
            });
        }
        Some(l) => {
            let range: Vec<u32> = match args.partition {
                Some(p) if p >= l.parts => bail!(
                    "{} has {} partitions (0..{}), not {p}",
                    args.device(),
                    l.parts,
                    l.parts - 1
                ),
                Some(p) => vec![p],
                None => (0..l.parts).collect(),
            };
            for i in range {
                let (base, len) = l.partition(i);
                let part: Arc<dyn Device> = Arc::new(Partition::new(dev.clone(), base, len)?);
                out.push(Place {
                    partition: Some(i),
                    base,
                    dev: part,
                });
            }
        }
    }
    Ok((lab, out))
}

/// Whether either superblock copy starts with the magic (else: not a namespace, or blank).
fn has_magic(dev: &dyn Device) -> bool {
    SUPERBLOCK_OFFSETS.iter().any(|&at| {
        let mut b = [0u8; 8];
        at + 8 <= dev.capacity() && dev.read_at(at, &mut b).is_ok() && b == SUPERBLOCK_MAGIC
    })
}

fn open_ro(p: &Place) -> microfs::Result<(Fs, microfs::Recovery)> {
    Fs::open_read_only(
        p.dev.clone(),
        &FsOptions {
            background_checkpoint: false,
            ..FsOptions::default()
        },
    )
}

fn name(p: &Place) -> String {
    match p.partition {
        Some(i) => format!("partition {i}"),
        None => "namespace".into(),
    }
}

/// Every entry under `ino`, depth first, with paths relative to `prefix`.
fn walk(
    fs: &Fs,
    ino: u64,
    prefix: &str,
    out: &mut Vec<(String, microfs::Stat)>,
) -> microfs::Result<()> {
    for e in fs.readdir(ino)? {
        let path = if prefix.is_empty() {
            e.name.clone()
        } else {
            format!("{prefix}/{}", e.name)
        };
        let st = fs.stat(e.ino)?;
        out.push((path.clone(), st));
        if e.kind == Kind::Dir {
            walk(fs, e.ino, &path, out)?;
        }
    }
    Ok(())
}

fn normalise(path: &str) -> Result<String> {
    let mut parts = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => bail!(
                "path {path:?}: '..' is not allowed (paths are relative to the namespace root)"
            ),
            c => parts.push(c),
        }
    }
    Ok(parts.join("/"))
}

#[derive(serde::Serialize)]
struct LsEntry {
    path: String,
    kind: Kind,
    size: u64,
    mode: u32,
    mtime_ns: i64,
    ino: u64,
}

#[derive(serde::Serialize)]
struct LsNamespace {
    partition: Option<u32>,
    offset: u64,
    state: String,
    job: Option<String>,
    rank: Option<u32>,
    epoch: Option<u64>,
    hugeblock: Option<u32>,
    recovery: Option<microfs::Recovery>,
    entries: Vec<LsEntry>,
}

fn ls(args: &DeviceArgs, long: bool, json: bool) -> Result<Outcome> {
    let (lab, places) = places(args)?;
    let mut out = Vec::new();
    for p in &places {
        let mut ns = LsNamespace {
            partition: p.partition,
            offset: p.base,
            state: "ok".into(),
            job: None,
            rank: None,
            epoch: None,
            hugeblock: None,
            recovery: None,
            entries: Vec::new(),
        };
        match open_ro(p) {
            Ok((fs, rec)) => {
                let sb = fs.superblock();
                ns.job = Some(sb.job.clone());
                ns.rank = Some(sb.rank);
                ns.epoch = Some(
                    rec.writers
                        .iter()
                        .map(|w| w.epoch)
                        .max()
                        .unwrap_or(0)
                        .max(sb.epoch),
                );
                ns.hugeblock = Some(sb.hugeblock);
                let mut all = Vec::new();
                walk(&fs, fs.lookup("")?, "", &mut all)?;
                ns.entries = all
                    .into_iter()
                    .map(|(path, st)| LsEntry {
                        path,
                        kind: st.kind,
                        size: st.size,
                        mode: st.mode,
                        mtime_ns: st.mtime_ns,
                        ino: st.ino,
                    })
                    .collect();
                if rec.torn_tail.is_some() || !rec.clean {
                    ns.state = "not closed cleanly (recovered in memory)".into();
                }
                ns.recovery = Some(rec);
            }
            Err(FsError::Unformatted { .. }) => ns.state = "empty (never formatted)".into(),
            Err(e @ FsError::Damage { .. }) | Err(e @ FsError::Log(_)) => {
                ns.state = format!("damaged: {e} (run kavach cr check)")
            }
            Err(e) => {
                return Err(anyhow!(e).context(format!(
                    "cannot open {} of {}",
                    name(p),
                    args.device()
                )));
            }
        }
        out.push(ns);
    }
    if json {
        print_json(
            &serde_json::json!({ "device": args.device(), "label": lab, "namespaces": out }),
        )?;
        return Ok(Outcome::Ok);
    }
    let mut o = std::io::stdout().lock();
    match &lab {
        Some(l) => writeln!(
            o,
            "{}: job {}, {} partitions of {} MiB",
            args.device(),
            l.job,
            l.parts,
            l.segment >> 20
        )?,
        None => writeln!(o, "{}: one namespace (no partition label)", args.device())?,
    }
    for ns in &out {
        let what = match ns.partition {
            Some(i) => format!("partition {i} (at byte {})", ns.offset),
            None => "namespace".into(),
        };
        match (&ns.job, ns.rank, ns.epoch) {
            (Some(j), Some(r), Some(e)) => {
                let files = ns.entries.iter().filter(|e| e.kind == Kind::File).count();
                let bytes: u64 = ns
                    .entries
                    .iter()
                    .filter(|e| e.kind == Kind::File)
                    .map(|e| e.size)
                    .sum();
                writeln!(
                    o,
                    "{what}: job {j}, rank {r}, epoch {e}, {files} files, {bytes} bytes; {}",
                    ns.state
                )?;
            }
            _ => writeln!(o, "{what}: {}", ns.state)?,
        }
        for e in &ns.entries {
            let path = if e.kind == Kind::Dir {
                format!("{}/", e.path)
            } else {
                e.path.clone()
            };
            if long {
                let k = if e.kind == Kind::Dir { 'd' } else { '-' };
                let secs = e.mtime_ns.div_euclid(1_000_000_000);
                writeln!(
                    o,
                    "  {k}{:04o} {:>12} {:>12} ino {:<6} {path}",
                    e.mode, e.size, secs, e.ino
                )?;
            } else if e.kind == Kind::File {
                writeln!(o, "  {path}  {}", e.size)?;
            } else {
                writeln!(o, "  {path}")?;
            }
        }
    }
    Ok(Outcome::Ok)
}

/// The one namespace a command that reads a file works on.
fn one_place(args: &DeviceArgs) -> Result<(Fs, Place)> {
    let (lab, mut places) = places(args)?;
    if places.len() > 1 {
        bail!(
            "{} has {} partitions: say which with --partition N",
            args.device(),
            lab.map(|l| l.parts).unwrap_or(0)
        );
    }
    let p = places
        .pop()
        .ok_or_else(|| anyhow!("{} holds no namespace", args.device()))?;
    let (fs, _) = open_ro(&p).map_err(|e| {
        anyhow!(e).context(format!("cannot open {} of {}", name(&p), args.device()))
    })?;
    Ok((fs, p))
}

fn cat(args: &DeviceArgs, path: &str) -> Result<Outcome> {
    let path = normalise(path)?;
    let (fs, _p) = one_place(args)?;
    let ino = fs.lookup(&path).map_err(|e| anyhow!("{path}: {e}"))?;
    let st = fs.stat(ino)?;
    if st.kind == Kind::Dir {
        bail!("{path} is a directory");
    }
    let mut o = std::io::stdout().lock();
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    while off < st.size {
        let n = fs.read_at(ino, off, &mut buf)?;
        if n == 0 {
            break;
        }
        o.write_all(&buf[..n])?;
        off += n as u64;
    }
    o.flush()?;
    Ok(Outcome::Ok)
}

fn export(args: &DeviceArgs, dest: &Path, path: Option<&str>, force: bool) -> Result<Outcome> {
    let sub = path.map(normalise).transpose()?.unwrap_or_default();
    let (_lab, places) = places(args)?;
    let several = places.len() > 1;
    // Plan everything first: open every namespace, list what to copy, refuse conflicts, all
    // before writing a byte.
    let mut plans = Vec::new();
    let mut total = 0u64;
    for p in &places {
        let fs = match open_ro(p) {
            Ok((fs, _)) => fs,
            Err(FsError::Unformatted { .. }) if several => continue,
            Err(e) => {
                return Err(anyhow!(e).context(format!(
                    "cannot open {} of {}",
                    name(p),
                    args.device()
                )));
            }
        };
        let root = if several {
            dest.join(format!("part-{}", p.partition.unwrap_or(0)))
        } else {
            dest.to_path_buf()
        };
        let ino = fs
            .lookup(&sub)
            .map_err(|e| anyhow!("{}: {e}", if sub.is_empty() { "/" } else { &sub }))?;
        let st = fs.stat(ino)?;
        let mut items = Vec::new();
        match st.kind {
            Kind::Dir => walk(&fs, ino, "", &mut items)?,
            Kind::File => {
                let base = sub.rsplit('/').next().unwrap_or(&sub).to_string();
                items.push((base, st));
            }
        }
        for (rel, st) in &items {
            let target = root.join(rel);
            match std::fs::symlink_metadata(&target) {
                Ok(m) if st.kind == Kind::Dir && !m.is_dir() => {
                    bail!("{} exists and is not a directory", target.display())
                }
                Ok(m) if st.kind == Kind::File && m.is_dir() => {
                    bail!("{} exists and is a directory", target.display())
                }
                Ok(_) if st.kind == Kind::File && !force => {
                    bail!("{} exists (use --force to overwrite)", target.display())
                }
                _ => {}
            }
            if st.kind == Kind::File {
                total += st.size;
            }
        }
        if let Ok(m) = std::fs::symlink_metadata(&root)
            && !m.is_dir()
        {
            bail!("{} exists and is not a directory", root.display());
        }
        plans.push((fs, root, items));
    }
    let started = Instant::now();
    let mut last = Instant::now();
    let mut done = 0u64;
    let mut files = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    for (fs, root, items) in &plans {
        std::fs::create_dir_all(root).with_context(|| format!("cannot make {}", root.display()))?;
        for (rel, st) in items {
            let target = root.join(rel);
            if st.kind == Kind::Dir {
                std::fs::create_dir_all(&target)
                    .with_context(|| format!("cannot make {}", target.display()))?;
                continue;
            }
            let mut f = std::fs::File::create(&target)
                .with_context(|| format!("cannot write {}", target.display()))?;
            let mut off = 0u64;
            while off < st.size {
                let n = fs.read_at(st.ino, off, &mut buf)?;
                if n == 0 {
                    break;
                }
                f.write_all(&buf[..n])
                    .with_context(|| format!("cannot write {}", target.display()))?;
                off += n as u64;
                done += n as u64;
                if last.elapsed().as_secs_f64() >= 1.0 {
                    last = Instant::now();
                    eprintln!("exported {} of {} MiB", done >> 20, total >> 20);
                }
            }
            f.sync_all().ok();
            files += 1;
        }
    }
    eprintln!(
        "exported {files} files, {done} bytes to {} in {:.1} s",
        dest.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(Outcome::Ok)
}

#[derive(serde::Serialize)]
struct CheckOut {
    partition: Option<u32>,
    offset: u64,
    state: String,
    findings: Vec<microfs::Finding>,
    notes: Vec<String>,
    report: Option<microfs::CheckReport>,
}

fn check(args: &DeviceArgs, json: bool) -> Result<Outcome> {
    let (lab, places) = match places(args) {
        Ok(x) => x,
        Err(e) => match e.downcast_ref::<FsError>() {
            Some(FsError::Damage {
                what,
                at,
                expected,
                found,
            }) => {
                let f = microfs::Finding {
                    what: what.clone(),
                    at: *at,
                    expected: expected.clone(),
                    found: found.clone(),
                };
                if json {
                    print_json(&serde_json::json!({ "device": args.device(), "findings": [f] }))?;
                } else {
                    println!(
                        "{}: DAMAGE: {what} at byte {at}: expected {expected}, found {found}",
                        args.device()
                    );
                }
                return Ok(Outcome::Damage);
            }
            _ => return Err(e.context(CouldNotRun)),
        },
    };
    let mut out = Vec::new();
    for p in &places {
        let mut c = CheckOut {
            partition: p.partition,
            offset: p.base,
            state: "ok".into(),
            findings: Vec::new(),
            notes: Vec::new(),
            report: None,
        };
        match open_ro(p) {
            Ok((fs, rec)) => {
                c.notes.extend(rec.notes.iter().cloned());
                let r = fs.check().map_err(|e| anyhow!(e).context(CouldNotRun))?;
                c.findings = r.findings.clone();
                c.notes.extend(r.notes.iter().cloned());
                c.report = Some(r);
            }
            Err(FsError::Unformatted { .. }) => c.state = "empty (never formatted)".into(),
            Err(FsError::Damage {
                what,
                at,
                expected,
                found,
            }) => c.findings.push(microfs::Finding {
                what,
                at,
                expected,
                found,
            }),
            Err(FsError::Log(log::LogError::Corrupt(k))) => c.findings.push(microfs::Finding {
                what: format!("operation log: {} ({})", k.structure, k.field),
                at: k.offset,
                expected: k.expected,
                found: k.found,
            }),
            Err(e) => {
                return Err(anyhow!(e)
                    .context(format!("cannot open {} of {}", name(p), args.device()))
                    .context(CouldNotRun));
            }
        }
        // Offsets in findings are within the partition: make them device offsets.
        for f in &mut c.findings {
            if f.at != 0 || f.what.contains("superblock copy 0") {
                f.at += p.base;
            }
        }
        if !c.findings.is_empty() {
            c.state = "DAMAGED".into();
        }
        out.push(c);
    }
    let damaged = out.iter().any(|c| !c.findings.is_empty());
    if json {
        print_json(
            &serde_json::json!({ "device": args.device(), "label": lab, "namespaces": out, "damaged": damaged }),
        )?;
    } else {
        for c in &out {
            let what = match c.partition {
                Some(i) => format!("partition {i}"),
                None => "namespace".into(),
            };
            match &c.report {
                Some(r) if c.findings.is_empty() => println!(
                    "{}: {what}: ok: {} files, {} directories, {} bytes, {} hugeblocks used, {} free",
                    args.device(),
                    r.files,
                    r.dirs,
                    r.bytes,
                    r.blocks_used,
                    r.blocks_free
                ),
                _ if c.findings.is_empty() => println!("{}: {what}: {}", args.device(), c.state),
                _ => {
                    for f in &c.findings {
                        println!(
                            "{}: {what}: DAMAGE: {} at byte {}: expected {}, found {}",
                            args.device(),
                            f.what,
                            f.at,
                            f.expected,
                            f.found
                        );
                    }
                }
            }
            for n in &c.notes {
                println!("{}: {what}: note: {n}", args.device());
            }
        }
    }
    Ok(if damaged {
        Outcome::Damage
    } else {
        Outcome::Ok
    })
}
