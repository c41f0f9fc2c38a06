//! Finding and opening the namespace of a process: from the environment (`KAVACH_CR_*`) or a
//! [`Config`] made by the MPI wrappers.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `KAVACH_CR_DIR` | the checkpoint directory whose paths microfs serves (unset: no instance) | |
//! | `KAVACH_CR_DEVICE` | device spec: a file path, `pmem:PATH` or `tcp://HOST:PORT/JOB` | [`Config::default_device`] |
//! | `KAVACH_CR_SIZE` | bytes of a device created here (`K`, `M`, `G` suffixes, binary) | 1G (sparse) |
//! | `KAVACH_CR_HUGEBLOCK` | hugeblock of a namespace formatted here | 32K |
//! | `KAVACH_CR_JOB` | job name | `cr` |
//! | `KAVACH_CR_PARTITION` | this process's partition of a labelled device | whole device, or 0 |
//! | `KAVACH_CR_PARTS` | partitions to cut an unlabelled device into | |
//! | `KAVACH_CR_EPOCH` | the epoch named in log records | seconds since 1970 at start |
//! | `KAVACH_CR_COALESCE` | `0` turns off the coalescing of consecutive writes (for measurements) | `1` |

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::device::{Device, DeviceError, Partition};
use crate::error::{FsError, Result};
use crate::fs::{Fs, FsOptions, NamespaceId, Recovery};
use crate::label;

/// Where and how a process's namespace lives.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The checkpoint directory (`KAVACH_CR_DIR`), absolute.
    pub dir: PathBuf,
    /// The device spec.
    pub device: String,
    /// Partition of a labelled device (None: the whole device, or partition 0 of a label).
    pub partition: Option<u32>,
    /// Partitions to cut an unlabelled device into.
    pub parts: Option<u32>,
    /// Job name.
    pub job: String,
    /// Bytes of a device created by `open`.
    pub size: u64,
    /// File-system options (provenance: rank = partition, epoch from the environment).
    pub fs: FsOptions,
}

/// Parse a size: digits with an optional `K`, `M`, `G` or `T` suffix (powers of 1024), which
/// may be spelled as the rest of the command line spells it too (`64M`, `64MB`, `64MiB`).
pub fn parse_size(what: &str, s: &str) -> Result<u64> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let unit_before = |rest: &str| {
        rest.chars()
            .last()
            .is_some_and(|c| matches!(c.to_ascii_lowercase(), 'k' | 'm' | 'g' | 't'))
    };
    let t = match (lower.strip_suffix("ib"), lower.strip_suffix('b')) {
        (Some(rest), _) if unit_before(rest) => &t[..rest.len()],
        (_, Some(rest)) if unit_before(rest) => &t[..rest.len()],
        _ => t,
    };
    let (num, mul) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => 0,
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .filter(|_| mul != 0)
        .and_then(|n| n.checked_mul(mul))
        .ok_or_else(|| {
            FsError::invalid(
                what,
                format!("expected a byte count like 1G, 512MiB or 4096, found {s:?}"),
            )
        })
}

fn parse_u32(what: &str, s: &str) -> Result<u32> {
    s.trim()
        .parse::<u32>()
        .map_err(|_| FsError::invalid(what, format!("expected a whole number, found {s:?}")))
}

/// FNV-1a, 64 bits: a hash that stays the same across builds (the default device name).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(0)
}

/// Make `dir` absolute and drop `.`, empty and trailing components (`..` is resolved
/// lexically).
pub fn normalise_dir(dir: &Path) -> Result<PathBuf> {
    let abs = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| {
                FsError::invalid(
                    "KAVACH_CR_DIR",
                    format!(
                        "{}: relative, and the working directory is unknown: {e}",
                        dir.display()
                    ),
                )
            })?
            .join(dir)
    };
    let mut out = PathBuf::from("/");
    for c in abs.components() {
        match c {
            std::path::Component::Normal(n) => out.push(n),
            std::path::Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    Ok(out)
}

impl Config {
    /// The configuration from the environment; `None` when `KAVACH_CR_DIR` is unset.
    pub fn from_env() -> Result<Option<Config>> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// [`Config::from_env`] over any lookup (tests).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Config>> {
        let Some(dir) = var("KAVACH_CR_DIR") else {
            return Ok(None);
        };
        if dir.trim().is_empty() {
            return Err(FsError::invalid(
                "KAVACH_CR_DIR",
                "expected a directory path, found an empty value",
            ));
        }
        let dir = normalise_dir(Path::new(&dir))?;
        let device = match var("KAVACH_CR_DEVICE") {
            Some(d) if d.trim().is_empty() => {
                return Err(FsError::invalid(
                    "KAVACH_CR_DEVICE",
                    "expected a device spec, found an empty value",
                ));
            }
            Some(d) => d,
            None => Config::default_device(&dir),
        };
        let size = match var("KAVACH_CR_SIZE") {
            Some(s) => parse_size("KAVACH_CR_SIZE", &s)?,
            None => 1 << 30,
        };
        if size < 4 << 20 {
            return Err(FsError::invalid(
                "KAVACH_CR_SIZE",
                format!(
                    "expected at least 4M, found {:?} ({size} bytes)",
                    var("KAVACH_CR_SIZE").unwrap_or_default()
                ),
            ));
        }
        let mut fs = FsOptions::default();
        if let Some(h) = var("KAVACH_CR_HUGEBLOCK") {
            let hb = parse_size("KAVACH_CR_HUGEBLOCK", &h)?;
            if !hb.is_power_of_two() || !(4096..=1 << 20).contains(&hb) {
                return Err(FsError::invalid(
                    "KAVACH_CR_HUGEBLOCK",
                    format!("expected a power of two from 4K to 1M, found {h:?}"),
                ));
            }
            fs.hugeblock = hb as u32;
        }
        let job = var("KAVACH_CR_JOB").unwrap_or_else(|| "cr".into());
        if job.is_empty() || job.len() > crate::layout::JOB_MAX || !crate::codec::valid_name(&job) {
            return Err(FsError::invalid(
                "KAVACH_CR_JOB",
                format!("expected 1..=63 bytes without '/', found {job:?}"),
            ));
        }
        let partition = var("KAVACH_CR_PARTITION")
            .map(|s| parse_u32("KAVACH_CR_PARTITION", &s))
            .transpose()?;
        let parts = var("KAVACH_CR_PARTS")
            .map(|s| parse_u32("KAVACH_CR_PARTS", &s))
            .transpose()?;
        if let Some(n) = parts
            && !(1..=label::PARTS_MAX).contains(&n)
        {
            return Err(FsError::invalid(
                "KAVACH_CR_PARTS",
                format!("expected 1..={}, found {n}", label::PARTS_MAX),
            ));
        }
        if let (Some(p), Some(n)) = (partition, parts)
            && p >= n
        {
            return Err(FsError::invalid(
                "KAVACH_CR_PARTITION",
                format!("expected below KAVACH_CR_PARTS ({n}), found {p}"),
            ));
        }
        if let Some(c) = var("KAVACH_CR_COALESCE") {
            fs.coalesce = match c.trim() {
                "1" => true,
                "0" => false,
                other => {
                    return Err(FsError::invalid(
                        "KAVACH_CR_COALESCE",
                        format!("expected 0 or 1, found {other:?}"),
                    ));
                }
            };
        }
        fs.provenance.rank = partition.unwrap_or(0);
        fs.provenance.epoch = match var("KAVACH_CR_EPOCH") {
            Some(e) => e.trim().parse::<u64>().map_err(|_| {
                FsError::invalid(
                    "KAVACH_CR_EPOCH",
                    format!("expected a whole number, found {e:?}"),
                )
            })?,
            None => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        };
        Ok(Some(Config {
            dir,
            device,
            partition,
            parts,
            job,
            size,
            fs,
        }))
    }

    /// The device of a namespace with no device named: one per user and checkpoint directory,
    /// `/dev/shm/kavach-cr-<uid>-<16 hex digits of a hash of the directory>.dev`.
    pub fn default_device(dir: &Path) -> String {
        let d = normalise_dir(dir).unwrap_or_else(|_| dir.to_path_buf());
        format!(
            "/dev/shm/kavach-cr-{}-{:016x}.dev",
            uid(),
            fnv1a(d.as_os_str().as_encoded_bytes())
        )
    }
}

fn busy(e: DeviceError) -> FsError {
    match e {
        DeviceError::Busy { what } => FsError::Busy { what },
        e => FsError::Device(e),
    }
}

/// The partition `cfg` names on an opened device: (offset, bytes, rank).
pub fn locate(dev: &dyn Device, cfg: &Config) -> Result<(u64, u64, u32)> {
    if cfg.partition.is_none() && cfg.parts.is_none() {
        return match label::read(dev)? {
            Some(l) => {
                let (b, n) = l.partition(0);
                Ok((b, n, 0))
            }
            None => Ok((0, dev.capacity(), 0)),
        };
    }
    let l = match label::read(dev)? {
        Some(l) => l,
        None => match cfg.parts {
            Some(n) => {
                // Only a blank device is cut: whatever else is there stays.
                let mut head = vec![0u8; 8192.min(dev.capacity() as usize)];
                dev.read_at(0, &mut head)?;
                if head.iter().any(|&b| b != 0) {
                    return Err(FsError::invalid(
                        "KAVACH_CR_PARTS",
                        format!(
                            "{} is not blank and has no partition label: it is not cut (a namespace without partitions, or not a microfs device)",
                            dev.label()
                        ),
                    ));
                }
                label::write(dev, &cfg.job, n)?
            }
            None => {
                return Err(FsError::invalid(
                    "KAVACH_CR_PARTITION",
                    format!(
                        "{} has no partition label; set KAVACH_CR_PARTS to cut it",
                        dev.label()
                    ),
                ));
            }
        },
    };
    if let Some(n) = cfg.parts
        && n != l.parts
    {
        return Err(FsError::invalid(
            "KAVACH_CR_PARTS",
            format!(
                "{} is cut into {} partitions, found {n} asked",
                dev.label(),
                l.parts
            ),
        ));
    }
    let i = cfg.partition.unwrap_or(0);
    if i >= l.parts {
        return Err(FsError::invalid(
            "KAVACH_CR_PARTITION",
            format!(
                "expected below {} (the label's partitions), found {i}",
                l.parts
            ),
        ));
    }
    let (b, n) = l.partition(i);
    Ok((b, n, i))
}

/// Open (or make) the namespace `cfg` names: open the device, find the partition (writing a
/// label if the device has none and `parts` is given), claim it, open its namespace, or format
/// one if the partition is blank. A damaged namespace is an error, never reformatted.
pub fn open(cfg: &Config) -> Result<(Fs, Recovery)> {
    // The size is only for a device made now: an existing device file keeps its size (a later
    // run with another KAVACH_CR_SIZE, or none, must not grow it; a target opens an existing
    // namespace at its own size whatever the HELLO asks).
    let exists = match target::parse_spec(&cfg.device).map_err(busy)? {
        target::Spec::File(p) | target::Spec::Pmem(p) => p.exists(),
        target::Spec::Remote { .. } => false,
    };
    let create_len = if exists { None } else { Some(cfg.size) };
    let dev = target::open_spec(&cfg.device, create_len).map_err(busy)?;
    let (base, len, rank) = locate(dev.as_ref(), cfg)?;
    let part: Arc<dyn Device> = if base == 0 && len == dev.capacity() {
        dev
    } else {
        Arc::new(Partition::new(dev, base, len)?)
    };
    part.claim(0, len).map_err(busy)?;
    // The writer named in log records is the caller's (`cfg.fs.provenance`: the partition
    // from the environment, the world rank under MPI); the namespace's identity is the
    // partition it lives in.
    let fs_opts = cfg.fs.clone();
    match Fs::open(part.clone(), &fs_opts) {
        Err(FsError::Unformatted { .. }) => {
            let id = NamespaceId {
                job: cfg.job.clone(),
                rank,
            };
            let fs = Fs::format(part, &fs_opts, &id)?;
            Ok((
                fs,
                Recovery {
                    formatted: true,
                    ..Recovery::default()
                },
            ))
        }
        r => r,
    }
}

#[cfg(test)]
mod size_tests {
    use super::parse_size;

    #[test]
    fn sizes_take_the_command_lines_spellings() {
        for (s, want) in [
            ("4096", 4096u64),
            ("64M", 64 << 20),
            ("64MB", 64 << 20),
            ("64MiB", 64 << 20),
            ("64mib", 64 << 20),
            ("1G", 1 << 30),
            ("2TiB", 2 << 40),
            (" 8k ", 8 << 10),
        ] {
            assert_eq!(parse_size("x", s).unwrap(), want, "{s}");
        }
        for s in [
            "", "B", "MiB", "64iB", "64X", "64MiBs", "-1M", "64 M", "1e3",
        ] {
            assert!(parse_size("x", s).is_err(), "{s:?} was accepted");
        }
    }
}
