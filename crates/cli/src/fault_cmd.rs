//! `kavach fault ...`: media faults injected behind Kavach's back, for testing detection and
//! repair. Each command locks the pool file exclusively, changes bytes, and makes them durable.

use crate::outcome::{Outcome, print_json};
use crate::units::parse_size;
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use pmem::layout::PAGE_SIZE;
use pmem::{Mapping, Medium, fault};
use std::path::{Path, PathBuf};

#[derive(Debug, Subcommand)]
pub enum FaultCommand {
    /// Flip K distinct bits, chosen from a seed, in a byte range (bit rot ECC missed).
    Flip(FlipArgs),
    /// Save a page's current contents to a file, to replay as a lost write later.
    Snapshot(SnapshotArgs),
    /// Lost write: put a saved (older) version of a page back, as if later writes never landed.
    LostWrite(LostWriteArgs),
    /// Misdirected write: page P's current contents land on page Q; with --old, P reverts to it.
    Misdirect(MisdirectArgs),
}

#[derive(Debug, Args)]
pub struct FlipArgs {
    /// Pool file (any file works; it is not parsed).
    pub path: PathBuf,
    /// Byte offset of the range: decimal, hexadecimal (0x5060) or with a unit (4KiB).
    #[arg(long, value_parser = parse_size)]
    pub offset: u64,
    /// Length of the range in bytes (units as for --offset).
    #[arg(long, value_parser = parse_size, default_value = "8")]
    pub len: u64,
    /// Number of distinct bits to flip, at most 16777216 (and at most the range's bits).
    #[arg(long, default_value_t = 1)]
    pub bits: u32,
    /// Seed choosing the bits (the same seed flips the same bits).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print the flipped bit positions as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// Pool file.
    pub path: PathBuf,
    /// Page number (offset / 4096).
    #[arg(long)]
    pub page: u64,
    /// File to write the page's 4096 bytes to (must not exist).
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Debug, Args)]
pub struct LostWriteArgs {
    /// Pool file.
    pub path: PathBuf,
    /// Page number.
    #[arg(long)]
    pub page: u64,
    /// The saved version (from `kavach fault snapshot`).
    #[arg(long)]
    pub from: PathBuf,
}

#[derive(Debug, Args)]
pub struct MisdirectArgs {
    /// Pool file.
    pub path: PathBuf,
    /// The page whose write goes astray.
    #[arg(long)]
    pub page: u64,
    /// The page it lands on.
    #[arg(long)]
    pub onto: u64,
    /// The intended page's older version (from `kavach fault snapshot`); without it the intended
    /// page keeps its contents.
    #[arg(long)]
    pub old: Option<PathBuf>,
}

/// Flipped bits named one by one in the text output; the rest are counted.
const FLIPS_SHOWN: usize = 32;

fn map(path: &Path) -> Result<Mapping> {
    Mapping::open(path, true)
        .with_context(|| format!("cannot open {} for fault injection", path.display()))
}

fn page_offset(m: &Mapping, page: u64) -> Result<usize> {
    let pages = m.len() / PAGE_SIZE;
    if page >= pages as u64 {
        bail!(
            "page {page} is outside the file's {pages} pages (0 to {})",
            pages.saturating_sub(1)
        );
    }
    Ok(page as usize * PAGE_SIZE)
}

fn read_page_file(path: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read saved page {}", path.display()))?;
    if bytes.len() != PAGE_SIZE {
        bail!(
            "{} holds {} bytes; a saved page holds exactly {PAGE_SIZE}",
            path.display(),
            bytes.len()
        );
    }
    Ok(bytes)
}

pub fn run(cmd: FaultCommand) -> Result<Outcome> {
    match cmd {
        FaultCommand::Flip(a) => {
            let m = map(&a.path)?;
            let (offset, len) = (usize::try_from(a.offset)?, usize::try_from(a.len)?);
            let bits = fault::flip_bits(&m, offset, len, a.bits, a.seed)?;
            if a.json {
                print_json(
                    &serde_json::json!({ "offset": a.offset, "len": a.len, "flipped_bits": bits }),
                )?;
            } else {
                let mut shown: Vec<String> = bits
                    .iter()
                    .take(FLIPS_SHOWN)
                    .map(|b| format!("byte {:#x} bit {}", a.offset + b / 8, b % 8))
                    .collect();
                if bits.len() > FLIPS_SHOWN {
                    shown.push(format!(
                        "and {} more (--json lists all)",
                        bits.len() - FLIPS_SHOWN
                    ));
                }
                println!(
                    "flipped {} bit(s) in {}: {}",
                    bits.len(),
                    a.path.display(),
                    shown.join(", ")
                );
            }
        }
        FaultCommand::Snapshot(a) => {
            let m = map(&a.path)?;
            let at = page_offset(&m, a.page)?;
            let mut buf = vec![0u8; PAGE_SIZE];
            m.read(at, &mut buf);
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&a.out)
                .with_context(|| format!("cannot create {}", a.out.display()))?;
            if let Err(e) = std::io::Write::write_all(&mut f, &buf).and_then(|()| f.sync_all()) {
                // The file is ours (create_new): leave nothing half-written behind.
                drop(f);
                let _ = std::fs::remove_file(&a.out);
                return Err(
                    anyhow::Error::new(e).context(format!("cannot write {}", a.out.display()))
                );
            }
            println!(
                "saved page {} (bytes {at:#x}..{:#x}) of {} to {}",
                a.page,
                at + PAGE_SIZE,
                a.path.display(),
                a.out.display()
            );
        }
        FaultCommand::LostWrite(a) => {
            let old = read_page_file(&a.from)?;
            let m = map(&a.path)?;
            let at = page_offset(&m, a.page)?;
            m.inject(at, &old)?;
            println!(
                "page {} (bytes {at:#x}..{:#x}) of {} now holds its older version (lost write)",
                a.page,
                at + PAGE_SIZE,
                a.path.display()
            );
        }
        FaultCommand::Misdirect(a) => {
            let old = a.old.as_deref().map(read_page_file).transpose()?;
            if a.page == a.onto {
                bail!("--page and --onto name the same page");
            }
            let m = map(&a.path)?;
            let (from, to) = (page_offset(&m, a.page)?, page_offset(&m, a.onto)?);
            let mut new = vec![0u8; PAGE_SIZE];
            m.read(from, &mut new);
            m.inject(to, &new)?;
            if let Some(old) = old {
                m.inject(from, &old)?;
            }
            println!(
                "page {}'s contents (from byte {from:#x}) landed on page {} (at byte {to:#x}) of {} \
                 (misdirected write)",
                a.page,
                a.onto,
                a.path.display()
            );
        }
    }
    Ok(Outcome::Ok)
}
