//! Copy, flush and CRC strategies chosen per machine: from CPUID plus a short calibration, done
//! once per process, cached in a small file, overridable from the environment.
//!
//! Four choices are made here and read by the layers above:
//!
//! - `nt_min`: payloads of at least this many bytes are copied with non-temporal stores
//!   (the log's records); smaller ones with ordinary stores, flushed line by line.
//! - `crc_fold_min`: CRC-32C inputs of at least this many bytes go to the carry-less-multiply
//!   folding implementation (`crc-fast`), smaller ones to the SSE4.2 loop (`crc32c`).
//! - `flush`: the write-back instruction (`clwb` or `clflushopt`; `clflush` only when asked).
//! - `stream_sync`: whether a record forced at once (the log's `Sync` append) is written whole
//!   with non-temporal stores (every 64-byte line, the header's too, then one fence) instead of
//!   ordinary stores, a write-back of each line and a fence.
//!
//! Each choice comes from one of four sources, in this order of precedence:
//! `KAVACH_TUNE=key=value,...` (override; `KAVACH_FLUSH` still names the flush instruction when
//! `KAVACH_TUNE` does not), `KAVACH_TUNE=off` (the built-in defaults for everything), the cache
//! file (written by an earlier calibration on the same CPU and build), and a fresh calibration
//! (tens of milliseconds; then the cache file is written). The cache file's format is in
//! `docs/format/tune-cache.md`: it keeps one entry per CPU and build (at most
//! [`CACHE_ENTRIES_MAX`]), so a test build and the release binary keep their own; a file that
//! does not parse is ignored with a warning on stderr and replaced.
//!
//! Every strategy produces the same bytes and the same CRCs: the choices change speed only, so a
//! log written under one tuning reads back under any other.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use crate::cpu::FlushInstruction;

/// Built-in default for `nt_min` (what the log used before issue 27).
pub const NT_MIN_DEFAULT: usize = 1024;
/// Built-in default for `crc_fold_min`.
pub const CRC_FOLD_MIN_DEFAULT: usize = 1024;
/// The value of a threshold that never applies (`never` in the cache file and overrides).
pub const NEVER: usize = usize::MAX;
/// First line of a cache file.
pub const CACHE_MAGIC: &str = "kavach-tune";
/// Version of the cache file's format (2: one entry per CPU and build; 1, one entry, is still
/// read).
pub const CACHE_FORMAT: u32 = 2;
/// The most entries a cache file keeps (the newest).
pub const CACHE_ENTRIES_MAX: usize = 8;
/// Payload sizes (bytes) at which the calibration times a whole record written with ordinary
/// stores + write-back + fence against the same record streamed + fence (`stream_sync`).
pub const STREAM_SYNC_PAYLOADS: [usize; 2] = [64, 256];
/// The record header the `stream_sync` calibration puts before each payload, bytes (the log's).
pub const RECORD_HEADER_BYTES: usize = 32;
/// Sizes the calibration times each candidate at, bytes.
pub const CALIBRATION_SIZES: [usize; 11] = [
    64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536,
];

/// Where a choice came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Measured in this process.
    Calibrated,
    /// Read from the cache file (measured by an earlier process on this CPU and build).
    Cached,
    /// Set by `KAVACH_TUNE` (or `KAVACH_FLUSH`).
    Override,
    /// The built-in default (`KAVACH_TUNE=off`, or no calibration possible).
    Default,
}

impl Source {
    /// Lower-case name, as printed.
    pub const fn name(self) -> &'static str {
        match self {
            Source::Calibrated => "calibrated",
            Source::Cached => "cached",
            Source::Override => "override",
            Source::Default => "default",
        }
    }
}

/// The four choices themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choices {
    /// Non-temporal copies from this many bytes ([`NEVER`]: never).
    pub nt_min: usize,
    /// Folding CRC from this many bytes ([`NEVER`]: never).
    pub crc_fold_min: usize,
    /// Write-back instruction.
    pub flush: FlushInstruction,
    /// Records forced at once are streamed whole (every line non-temporal, then one fence).
    pub stream_sync: bool,
}

/// The choices in force and where each came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Tuning {
    /// Non-temporal copies from this many bytes (`None`: never).
    pub nt_min: Option<usize>,
    /// Where `nt_min` came from.
    pub nt_min_source: Source,
    /// Folding CRC from this many bytes (`None`: never).
    pub crc_fold_min: Option<usize>,
    /// Where `crc_fold_min` came from.
    pub crc_fold_min_source: Source,
    /// Write-back instruction.
    pub flush: FlushInstruction,
    /// Where `flush` came from.
    pub flush_source: Source,
    /// Records forced at once are streamed whole.
    pub stream_sync: bool,
    /// Where `stream_sync` came from.
    pub stream_sync_source: Source,
    /// The CPU the choices were made for.
    pub cpu: CpuIdentity,
    /// The cache file consulted (`None`: none, e.g. `KAVACH_TUNE_CACHE=off`).
    pub cache_path: Option<PathBuf>,
    /// What went wrong with the cache or the overrides, if anything (also warned on stderr).
    pub warnings: Vec<String>,
}

impl Tuning {
    /// The bare choices.
    pub fn choices(&self) -> Choices {
        Choices {
            nt_min: self.nt_min.unwrap_or(NEVER),
            crc_fold_min: self.crc_fold_min.unwrap_or(NEVER),
            flush: self.flush,
            stream_sync: self.stream_sync,
        }
    }

    /// One line for logs and benchmark headers.
    pub fn summary(&self) -> String {
        format!(
            "nt_min={} ({}), crc_fold_min={} ({}), flush={} ({}), stream_sync={} ({})",
            threshold_text(self.nt_min.unwrap_or(NEVER)),
            self.nt_min_source.name(),
            threshold_text(self.crc_fold_min.unwrap_or(NEVER)),
            self.crc_fold_min_source.name(),
            self.flush.name(),
            self.flush_source.name(),
            on_off(self.stream_sync),
            self.stream_sync_source.name()
        )
    }
}

fn on_off(v: bool) -> &'static str {
    if v { "on" } else { "off" }
}

fn parse_on_off(v: &str) -> Option<bool> {
    match v {
        "on" => Some(true),
        "off" => Some(false),
        _ => None,
    }
}

fn threshold_text(v: usize) -> String {
    if v == NEVER {
        "never".into()
    } else {
        v.to_string()
    }
}

/// What CPUID says about this processor, as far as the choices depend on it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CpuIdentity {
    /// Vendor string (`GenuineIntel`, `AuthenticAMD`, ...).
    pub vendor: String,
    /// Display family (base plus extended).
    pub family: u32,
    /// Display model (base plus extended).
    pub model: u32,
    /// Stepping.
    pub stepping: u32,
    /// The flags that matter here, by name, in a fixed order.
    pub flags: Vec<String>,
    /// The brand string (`model name`), for people; not part of the key.
    pub brand: String,
}

impl CpuIdentity {
    /// The key a cache file is kept under: vendor, family, model, stepping and flags.
    pub fn key(&self) -> String {
        format!(
            "{}/{}/{}/{} {}",
            self.vendor,
            self.family,
            self.model,
            self.stepping,
            if self.flags.is_empty() {
                "-".into()
            } else {
                self.flags.join(",")
            }
        )
    }

    /// True if CPUID listed `flag`.
    pub fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    /// Read CPUID.
    pub fn detect() -> CpuIdentity {
        use std::arch::x86_64::{__cpuid, __cpuid_count};
        let l0 = __cpuid(0);
        let mut vendor = Vec::with_capacity(12);
        for r in [l0.ebx, l0.edx, l0.ecx] {
            vendor.extend_from_slice(&r.to_le_bytes());
        }
        let vendor = String::from_utf8_lossy(&vendor).trim().to_string();
        let (mut family, mut model, mut stepping) = (0, 0, 0);
        let mut flags = Vec::new();
        if l0.eax >= 1 {
            let l1 = __cpuid(1);
            let base_family = (l1.eax >> 8) & 0xf;
            let base_model = (l1.eax >> 4) & 0xf;
            stepping = l1.eax & 0xf;
            family = base_family;
            model = base_model;
            if base_family == 0xf {
                family += (l1.eax >> 20) & 0xff;
            }
            if base_family == 0x6 || base_family == 0xf {
                model += ((l1.eax >> 16) & 0xf) << 4;
            }
            if l1.edx & (1 << 26) != 0 {
                flags.push("sse2");
            }
            if l1.ecx & (1 << 1) != 0 {
                flags.push("pclmulqdq");
            }
            if l1.ecx & (1 << 20) != 0 {
                flags.push("sse4.2");
            }
        }
        if l0.eax >= 7 {
            let l7 = __cpuid_count(7, 0);
            for (bit, name) in [
                (5, "avx2"),
                (16, "avx512f"),
                (23, "clflushopt"),
                (24, "clwb"),
            ] {
                if l7.ebx & (1 << bit) != 0 {
                    flags.push(name);
                }
            }
            if l7.ecx & (1 << 10) != 0 {
                flags.push("vpclmulqdq");
            }
        }
        let mut brand = String::new();
        if __cpuid(0x8000_0000).eax >= 0x8000_0004 {
            let mut b = Vec::with_capacity(48);
            for leaf in 0x8000_0002u32..=0x8000_0004 {
                let r = __cpuid(leaf);
                for v in [r.eax, r.ebx, r.ecx, r.edx] {
                    b.extend_from_slice(&v.to_le_bytes());
                }
            }
            brand = String::from_utf8_lossy(&b)
                .trim_matches(char::from(0))
                .trim()
                .to_string();
        }
        CpuIdentity {
            vendor,
            family,
            model,
            stepping,
            flags: flags.into_iter().map(String::from).collect(),
            brand,
        }
    }
}

/// A line of an override or cache file that could not be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {where_}: expected {expected}, found `{found}`")]
pub struct TuneError {
    /// What was being read (`KAVACH_TUNE`, `tuning cache file PATH`).
    pub what: String,
    /// Where in it (`item 2`, `line 4`).
    pub where_: String,
    /// What would have been accepted.
    pub expected: String,
    /// What was there.
    pub found: String,
}

/// The keys `KAVACH_TUNE` may set; any subset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `nt_min=BYTES|never`.
    pub nt_min: Option<usize>,
    /// `crc_fold_min=BYTES|never`.
    pub crc_fold_min: Option<usize>,
    /// `flush=clwb|clflushopt|clflush`.
    pub flush: Option<FlushInstruction>,
    /// `stream_sync=on|off`.
    pub stream_sync: Option<bool>,
}

/// What `KAVACH_TUNE` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// `off`: the built-in defaults, no cache, no calibration.
    Off,
    /// Some keys set (possibly none: an empty value), the rest tuned.
    Set(Overrides),
}

fn parse_threshold(v: &str) -> Option<usize> {
    if v == "never" {
        return Some(NEVER);
    }
    v.parse::<usize>().ok().filter(|&n| n <= 1 << 30)
}

fn parse_flush(v: &str) -> Option<FlushInstruction> {
    match v {
        "clwb" => Some(FlushInstruction::Clwb),
        "clflushopt" => Some(FlushInstruction::Clflushopt),
        "clflush" => Some(FlushInstruction::Clflush),
        _ => None,
    }
}

/// Parse a `KAVACH_TUNE` value: `off`, or comma-separated `key=value` items with keys
/// `nt_min`, `crc_fold_min` (a byte count up to 1 GiB, or `never`), `flush`
/// (`clwb`, `clflushopt`, `clflush`) and `stream_sync` (`on`, `off`), each at most once.
pub fn parse_request(s: &str) -> Result<Request, TuneError> {
    let s = s.trim();
    if s == "off" {
        return Ok(Request::Off);
    }
    let mut o = Overrides::default();
    let err = |i: usize, expected: &str, found: &str| TuneError {
        what: "KAVACH_TUNE".into(),
        where_: format!("item {}", i + 1),
        expected: expected.into(),
        found: found.into(),
    };
    for (i, item) in s.split(',').map(str::trim).enumerate() {
        if item.is_empty() && s.is_empty() {
            break;
        }
        let Some((k, v)) = item.split_once('=') else {
            return Err(err(i, "`off` or key=value", item));
        };
        let (k, v) = (k.trim(), v.trim());
        let dup = |set: bool| {
            if set {
                Err(err(i, "each key at most once", item))
            } else {
                Ok(())
            }
        };
        match k {
            "nt_min" => {
                dup(o.nt_min.is_some())?;
                o.nt_min = Some(parse_threshold(v).ok_or_else(|| {
                    err(i, "nt_min=a byte count up to 1073741824 or never", item)
                })?);
            }
            "crc_fold_min" => {
                dup(o.crc_fold_min.is_some())?;
                o.crc_fold_min = Some(parse_threshold(v).ok_or_else(|| {
                    err(
                        i,
                        "crc_fold_min=a byte count up to 1073741824 or never",
                        item,
                    )
                })?);
            }
            "flush" => {
                dup(o.flush.is_some())?;
                o.flush = Some(
                    parse_flush(v)
                        .ok_or_else(|| err(i, "flush=clwb, clflushopt or clflush", item))?,
                );
            }
            "stream_sync" => {
                dup(o.stream_sync.is_some())?;
                o.stream_sync =
                    Some(parse_on_off(v).ok_or_else(|| err(i, "stream_sync=on or off", item))?);
            }
            _ => {
                return Err(err(
                    i,
                    "one of nt_min, crc_fold_min, flush, stream_sync",
                    item,
                ));
            }
        }
    }
    Ok(Request::Set(o))
}

/// The version of the build a cache file belongs to: a calibration is redone after an upgrade.
/// A build without optimizations (debug assertions on, as `cargo test` builds) carries
/// `-debug`: its timings say nothing about a release build, and without the suffix a test run
/// would leave its choices in the cache for the release binaries to use (seen: a debug test
/// run cached `crc_fold_min 64` and `nt_min 8192` on a CPU whose release calibration gives
/// `never` and 1024).
pub fn build_version() -> &'static str {
    if cfg!(debug_assertions) {
        concat!(env!("CARGO_PKG_VERSION"), "-debug")
    } else {
        env!("CARGO_PKG_VERSION")
    }
}

/// One entry of a cache file: the choices measured on one CPU by one build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEntry {
    /// [`CpuIdentity::key`] of the CPU.
    pub cpu: String,
    /// [`build_version`] of the build.
    pub version: String,
    /// What it chose.
    pub choices: Choices,
}

fn encode_entry(out: &mut String, e: &CacheEntry) {
    let c = &e.choices;
    out.push_str(&format!(
        "cpu {}\n\
         version {}\n\
         nt_min {}\n\
         crc_fold_min {}\n\
         flush {}\n\
         stream_sync {}\n",
        e.cpu,
        e.version,
        threshold_text(c.nt_min),
        threshold_text(c.crc_fold_min),
        c.flush.name(),
        on_off(c.stream_sync)
    ));
}

/// Encode a cache file holding `entries`, in that order (the newest first).
pub fn encode_cache_entries(entries: &[CacheEntry]) -> String {
    let mut out = format!(
        "{CACHE_MAGIC} {CACHE_FORMAT}\n\
         # Kavach's copy/flush/CRC choices, one entry per CPU and build (docs/format/tune-cache.md).\n"
    );
    for e in entries {
        encode_entry(&mut out, e);
    }
    out
}

/// Encode a cache file for `cpu` holding `c` alone.
pub fn encode_cache(cpu: &CpuIdentity, version: &str, c: &Choices) -> String {
    encode_cache_entries(&[CacheEntry {
        cpu: cpu.key(),
        version: version.into(),
        choices: *c,
    }])
}

/// Decode every entry of a cache file, in file order. A format-1 file (one entry, written
/// before entries were kept per CPU and build) is read too; its entry is left out when it ends
/// after `flush` (written before `stream_sync` was a choice): such an entry is stale, not
/// damaged. `Err` when the file does not parse.
pub fn decode_cache_entries(text: &str, what: &str) -> Result<Vec<CacheEntry>, TuneError> {
    let err = |line: usize, expected: &str, found: &str| TuneError {
        what: what.into(),
        where_: format!("line {line}"),
        expected: expected.into(),
        found: found.into(),
    };
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .peekable();
    let magic = format!("{CACHE_MAGIC} {CACHE_FORMAT}");
    let (n, first) = lines.next().ok_or_else(|| err(1, &magic, ""))?;
    let format = match first.strip_prefix(CACHE_MAGIC).map(str::trim) {
        Some("1") => 1,
        Some(v) if v == CACHE_FORMAT.to_string() => CACHE_FORMAT,
        _ => return Err(err(n, &format!("{magic} (or format 1)"), first)),
    };
    let mut entries = Vec::new();
    loop {
        let mut field = |name: &str| -> Result<(usize, String), TuneError> {
            let (n, l) = lines.next().ok_or_else(|| err(0, name, "end of file"))?;
            match l.split_once(' ') {
                Some((k, v)) if k == name => Ok((n, v.trim().to_string())),
                _ => Err(err(n, &format!("`{name} VALUE`"), l)),
            }
        };
        let (_, cpu) = field("cpu")?;
        let (_, version) = field("version")?;
        let (n_nt, nt) = field("nt_min")?;
        let (n_crc, crc) = field("crc_fold_min")?;
        let (n_fl, fl) = field("flush")?;
        let nt = parse_threshold(&nt).ok_or_else(|| err(n_nt, "a byte count or never", &nt))?;
        let crc = parse_threshold(&crc).ok_or_else(|| err(n_crc, "a byte count or never", &crc))?;
        let flush =
            parse_flush(&fl).ok_or_else(|| err(n_fl, "clwb, clflushopt or clflush", &fl))?;
        let stream_sync = if format == 1 {
            // Format 1 files written before `stream_sync` existed end here.
            match lines.next() {
                None => None,
                Some((n, l)) => match l.split_once(' ') {
                    Some(("stream_sync", v)) => {
                        Some(parse_on_off(v.trim()).ok_or_else(|| err(n, "on or off", v.trim()))?)
                    }
                    _ => return Err(err(n, "`stream_sync VALUE` or end of file", l)),
                },
            }
        } else {
            let (n_ss, ss) = field("stream_sync")?;
            Some(parse_on_off(&ss).ok_or_else(|| err(n_ss, "on or off", &ss))?)
        };
        if let Some(stream_sync) = stream_sync {
            entries.push(CacheEntry {
                cpu,
                version,
                choices: Choices {
                    nt_min: nt,
                    crc_fold_min: crc,
                    flush,
                    stream_sync,
                },
            });
        }
        match lines.peek() {
            None => return Ok(entries),
            Some(&(n, l)) if format == 1 => return Err(err(n, "end of file", l)),
            Some(_) => {}
        }
    }
}

/// Decode a cache file: `Ok(Some)` with the first entry written for `cpu` and `version`,
/// `Ok(None)` when it parses but holds no such entry (recalibrate), `Err` when it does not
/// parse.
pub fn decode_cache(
    text: &str,
    what: &str,
    cpu: &CpuIdentity,
    version: &str,
) -> Result<Option<Choices>, TuneError> {
    let key = cpu.key();
    Ok(decode_cache_entries(text, what)?
        .into_iter()
        .find(|e| e.cpu == key && e.version == version)
        .map(|e| e.choices))
}

/// `entries` with `new` put first in place of any entry for the same CPU and build, cut to
/// [`CACHE_ENTRIES_MAX`].
pub fn merge_cache_entries(entries: Vec<CacheEntry>, new: CacheEntry) -> Vec<CacheEntry> {
    let mut out = vec![new];
    for e in entries {
        if out.len() == CACHE_ENTRIES_MAX {
            break;
        }
        if !out.iter().any(|o| o.cpu == e.cpu && o.version == e.version) {
            out.push(e);
        }
    }
    out
}

/// Where the cache file lives: `KAVACH_TUNE_CACHE` (a path, or `off` for none), else
/// `$XDG_CACHE_HOME/kavach/tune`, else `$HOME/.cache/kavach/tune`.
pub fn cache_path() -> Option<PathBuf> {
    match std::env::var_os("KAVACH_TUNE_CACHE") {
        Some(v) if v == "off" => return None,
        Some(v) if !v.is_empty() => return Some(PathBuf::from(v)),
        _ => {}
    }
    let base = match std::env::var_os("XDG_CACHE_HOME") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(std::env::var_os("HOME")?).join(".cache"),
    };
    Some(base.join("kavach").join("tune"))
}

/// A flush instruction this CPU has: `want` if it does, else the best it has.
fn available(cpu: &CpuIdentity, want: FlushInstruction) -> FlushInstruction {
    match want {
        FlushInstruction::Clwb if cpu.has("clwb") => want,
        FlushInstruction::Clflushopt if cpu.has("clflushopt") => want,
        FlushInstruction::Clflush => want,
        _ => best_flush(cpu),
    }
}

fn best_flush(cpu: &CpuIdentity) -> FlushInstruction {
    if cpu.has("clwb") {
        FlushInstruction::Clwb
    } else if cpu.has("clflushopt") {
        FlushInstruction::Clflushopt
    } else {
        FlushInstruction::Clflush
    }
}

/// The built-in defaults for this CPU.
pub fn defaults(cpu: &CpuIdentity) -> Choices {
    Choices {
        nt_min: NT_MIN_DEFAULT,
        crc_fold_min: if cpu.has("pclmulqdq") {
            CRC_FOLD_MIN_DEFAULT
        } else {
            NEVER
        },
        flush: best_flush(cpu),
        // Streaming a small record writes each line once, straight to memory: one write-back
        // round trip per record and no read-for-ownership of lines about to be overwritten
        // whole, where ordinary stores fetch each line, then write it back with clwb. Measured
        // on an AMD EPYC (Zen 2): 110 ns against 171 ns for a 64-byte payload's record. Any
        // CPU with SSE2 (every x86-64) has the streaming store, so it is the default there.
        stream_sync: cpu.has("sse2"),
    }
}

/// Put the choices together: `request` wins, then `cached`, then `calibrate()` (called only if
/// some choice is still open). `KAVACH_FLUSH` is passed as `legacy_flush`.
pub fn resolve(
    cpu: CpuIdentity,
    request: Result<Request, TuneError>,
    legacy_flush: Option<&str>,
    cache: Option<(PathBuf, Result<Option<Choices>, TuneError>)>,
    calibrate: &mut dyn FnMut() -> Choices,
) -> (Tuning, Option<Choices>) {
    let mut warnings = Vec::new();
    let request = request.unwrap_or_else(|e| {
        warnings.push(format!("{e}; KAVACH_TUNE ignored"));
        Request::Set(Overrides::default())
    });
    let d = defaults(&cpu);
    let cache_path = cache.as_ref().map(|(p, _)| p.clone());
    let mut tuning = Tuning {
        nt_min: None,
        nt_min_source: Source::Default,
        crc_fold_min: None,
        crc_fold_min_source: Source::Default,
        flush: d.flush,
        flush_source: Source::Default,
        stream_sync: d.stream_sync,
        stream_sync_source: Source::Default,
        cpu: cpu.clone(),
        cache_path: None,
        warnings: Vec::new(),
    };
    let mut to_cache = None;
    let o = match request {
        Request::Off => {
            tuning.nt_min = Some(d.nt_min);
            tuning.crc_fold_min = Some(d.crc_fold_min);
            if let Some(f) = legacy_flush.and_then(parse_flush) {
                tuning.flush = available(&cpu, f);
                tuning.flush_source = Source::Override;
            }
            tuning.warnings = warnings;
            return (normalize(tuning), None);
        }
        Request::Set(o) => o,
    };
    let flush_override = o.flush.or_else(|| legacy_flush.and_then(parse_flush));
    let all_set = o.nt_min.is_some()
        && o.crc_fold_min.is_some()
        && flush_override.is_some()
        && o.stream_sync.is_some();
    let (tuned, source) = if all_set {
        (d, Source::Default)
    } else {
        let cached = match cache {
            Some((path, Ok(Some(c)))) => {
                tuning.cache_path = Some(path);
                Some(c)
            }
            Some((path, Ok(None))) => {
                tuning.cache_path = Some(path);
                None
            }
            Some((path, Err(e))) => {
                warnings.push(format!("{e}; the cache file is ignored and rewritten"));
                tuning.cache_path = Some(path);
                None
            }
            None => None,
        };
        match cached {
            Some(c) => (c, Source::Cached),
            None => {
                let c = calibrate();
                to_cache = Some(c);
                (c, Source::Calibrated)
            }
        }
    };
    tuning.cache_path = tuning.cache_path.or(cache_path);
    let pick = |v: Option<usize>, t: usize| match v {
        Some(v) => (v, Source::Override),
        None => (t, source),
    };
    let (nt, nts) = pick(o.nt_min, tuned.nt_min);
    let (crc, crcs) = pick(o.crc_fold_min, tuned.crc_fold_min);
    tuning.nt_min = Some(nt);
    tuning.nt_min_source = nts;
    tuning.crc_fold_min = Some(crc);
    tuning.crc_fold_min_source = crcs;
    match flush_override {
        Some(f) => {
            let got = available(&cpu, f);
            if got != f {
                warnings.push(format!(
                    "flush={} asked for, but this CPU lacks it; using {}",
                    f.name(),
                    got.name()
                ));
            }
            tuning.flush = got;
            tuning.flush_source = Source::Override;
        }
        None => {
            // A cache file from a build that knew other flags is not trusted beyond CPUID.
            tuning.flush = available(&cpu, tuned.flush);
            tuning.flush_source = source;
        }
    }
    match o.stream_sync {
        Some(v) => {
            if v && !cpu.has("sse2") {
                warnings.push(
                    "stream_sync=on asked for, but this CPU lacks SSE2 streaming stores; using off"
                        .into(),
                );
            }
            tuning.stream_sync = v && cpu.has("sse2");
            tuning.stream_sync_source = Source::Override;
        }
        None => {
            tuning.stream_sync = tuned.stream_sync && cpu.has("sse2");
            tuning.stream_sync_source = source;
        }
    }
    tuning.warnings = warnings;
    (normalize(tuning), to_cache)
}

fn normalize(mut t: Tuning) -> Tuning {
    t.nt_min = t.nt_min.filter(|&v| v != NEVER);
    t.crc_fold_min = t.crc_fold_min.filter(|&v| v != NEVER);
    t
}

static TUNING: OnceLock<Tuning> = OnceLock::new();

/// The choices in force in this process: made on first use (environment, cache file or
/// calibration), then fixed.
pub fn current() -> &'static Tuning {
    TUNING.get_or_init(|| make(std::env::var("KAVACH_TUNE").ok()))
}

/// Fix the choices of this process as `KAVACH_TUNE=request` would, if nothing has used the
/// tuning yet (an embedding program, or a test that needs the same paths on every machine,
/// without touching the environment). Returns the tuning in force: the caller checks it, since
/// a process that already used the tuning keeps what it had.
pub fn pin(request: &str) -> &'static Tuning {
    TUNING.get_or_init(|| make(Some(request.to_string())))
}

/// The tuning for a `KAVACH_TUNE` value (`None`: unset), the cache file and, if need be, a
/// calibration; writes the cache after a calibration and warns on stderr.
fn make(kavach_tune: Option<String>) -> Tuning {
    {
        let cpu = CpuIdentity::detect();
        let request = match kavach_tune {
            Some(v) => parse_request(&v),
            None => Ok(Request::Set(Overrides::default())),
        };
        let legacy = std::env::var("KAVACH_FLUSH").ok();
        let off = matches!(request, Ok(Request::Off));
        let cache = if off {
            None
        } else {
            cache_path().map(|p| {
                let read = read_cache(&p, &cpu);
                (p, read)
            })
        };
        let (t, fresh) = resolve(cpu, request, legacy.as_deref(), cache, &mut || {
            calibrate(&CpuIdentity::detect())
        });
        if let (Some(c), Some(p)) = (fresh, &t.cache_path) {
            if let Err(e) = write_cache(p, &t.cpu, &c) {
                eprintln!(
                    "kavach: warning: cannot write the tuning cache {}: {e}",
                    p.display()
                );
            }
        }
        for w in &t.warnings {
            eprintln!("kavach: warning: {w}");
        }
        t
    }
}

/// Calibrate now, ignoring the cache and the environment's overrides, and rewrite the cache
/// file (`kavach pool tune --recalibrate`). Does not change the choices in force in this
/// process.
pub fn recalibrate() -> (Tuning, Result<(), String>) {
    let cpu = CpuIdentity::detect();
    let c = calibrate(&cpu);
    store_calibration(cpu, c)
}

/// Write choices just calibrated for `cpu` to the cache file; the tuning they make.
pub fn store_calibration(cpu: CpuIdentity, c: Choices) -> (Tuning, Result<(), String>) {
    let path = cache_path();
    let written = match &path {
        Some(p) => write_cache(p, &cpu, &c).map_err(|e| format!("{}: {e}", p.display())),
        None => Err("no cache file (KAVACH_TUNE_CACHE=off, or no HOME)".into()),
    };
    let t = Tuning {
        nt_min: Some(c.nt_min),
        nt_min_source: Source::Calibrated,
        crc_fold_min: Some(c.crc_fold_min),
        crc_fold_min_source: Source::Calibrated,
        flush: c.flush,
        flush_source: Source::Calibrated,
        stream_sync: c.stream_sync,
        stream_sync_source: Source::Calibrated,
        cpu,
        cache_path: path,
        warnings: Vec::new(),
    };
    (normalize(t), written)
}

fn read_cache(path: &Path, cpu: &CpuIdentity) -> Result<Option<Choices>, TuneError> {
    match std::fs::read(path) {
        Ok(bytes) => {
            let what = format!("tuning cache file {}", path.display());
            let text = String::from_utf8(bytes).map_err(|_| TuneError {
                what: what.clone(),
                where_: "contents".into(),
                expected: "UTF-8 text".into(),
                found: "invalid UTF-8".into(),
            })?;
            decode_cache(&text, &what, cpu, build_version())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(TuneError {
            what: format!("tuning cache file {}", path.display()),
            where_: "reading it".into(),
            expected: "a readable file".into(),
            found: e.to_string(),
        }),
    }
}

fn write_cache(path: &Path, cpu: &CpuIdentity, c: &Choices) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // The entries of other CPUs and builds are kept; a file that cannot be read or does not
    // parse has none worth keeping (the reader already warned about it).
    let kept = std::fs::read(path)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|t| decode_cache_entries(&t, "").ok())
        .unwrap_or_default();
    let entries = merge_cache_entries(
        kept,
        CacheEntry {
            cpu: cpu.key(),
            version: build_version().into(),
            choices: *c,
        },
    );
    // Whole or not at all: a temporary file renamed over the old one.
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, encode_cache_entries(&entries))?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// What a calibration measured: ns per operation (medians) for each size of
/// [`CALIBRATION_SIZES`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Measured {
    /// Ordinary copy, flush of every line, fence.
    pub copy_temporal_ns: Vec<f64>,
    /// Non-temporal copy, fence.
    pub copy_nontemporal_ns: Vec<f64>,
    /// CRC-32C by the SSE4.2 loop.
    pub crc_sse42_ns: Vec<f64>,
    /// CRC-32C by carry-less-multiply folding.
    pub crc_fold_ns: Vec<f64>,
    /// Store + write-back + fence of 1 KiB, per instruction tried (name, ns).
    pub flush_ns: Vec<(String, f64)>,
    /// The write-back instruction the record rows used.
    pub record_flush: String,
    /// A whole record (header + payload of each of [`STREAM_SYNC_PAYLOADS`], in 64-byte lines)
    /// by ordinary stores, a write-back of each line and a fence, at record strides.
    pub record_ordinary_ns: Vec<f64>,
    /// The same record streamed (every line non-temporal) and fenced; infinite without SSE2.
    pub record_streamed_ns: Vec<f64>,
}

/// The bytes a record with a `payload`-byte payload occupies: header plus payload, in whole
/// 64-byte lines.
pub const fn record_bytes(payload: usize) -> usize {
    (RECORD_HEADER_BYTES + payload).next_multiple_of(64)
}

/// `stream_sync` from the record timings: streamed when it is faster at every measured payload
/// size (not only on average: a small-record workload is the case this choice is for, and a
/// loss at either size would show in it).
pub fn stream_sync_wins(ordinary: &[f64], streamed: &[f64]) -> bool {
    !ordinary.is_empty()
        && ordinary.len() == streamed.len()
        && ordinary.iter().zip(streamed).all(|(o, s)| s < o)
}

/// The smallest measured size from which `b` is no slower than `a` at every larger measured
/// size too; [`NEVER`] if `b` loses at the largest.
pub fn crossover(sizes: &[usize], a: &[f64], b: &[f64]) -> usize {
    let mut from = NEVER;
    for i in (0..sizes.len()).rev() {
        if b[i] <= a[i] {
            from = sizes[i];
        } else {
            break;
        }
    }
    from
}

/// `crc_fold_min` of the tuning in force, read once (0: not read yet).
static FOLD_MIN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Inputs at least this long go to the folding CRC: `crc_fold_min` of [`current`], cached.
#[inline]
pub fn crc32c_fold_min() -> usize {
    use std::sync::atomic::Ordering;
    match FOLD_MIN.load(Ordering::Relaxed) {
        0 => {
            let v = current().choices().crc_fold_min.max(1);
            FOLD_MIN.store(v, Ordering::Relaxed);
            v
        }
        v => v,
    }
}

/// The CRC-32C `crc` continued over `data` (as `crc32c::crc32c_append`), by the implementation
/// the tuning in force chose for this length ([`crc32c_fold_min`]).
#[inline]
pub fn crc32c_append_tuned(crc: u32, data: &[u8]) -> u32 {
    crc32c_append_with(crc32c_fold_min(), crc, data)
}

/// [`crc32c_append_tuned`] with the folding threshold given: every threshold gives the same
/// value.
#[inline]
pub fn crc32c_append_with(fold_min: usize, crc: u32, data: &[u8]) -> u32 {
    if data.len() < fold_min {
        return crate::cpu::crc32c_append(crc, data);
    }
    crc32c_fold(crc, data)
}

/// CRC-32C of `data` continuing `crc`, by carry-less-multiply folding (`crc-fast`).
#[inline]
pub fn crc32c_fold(crc: u32, data: &[u8]) -> u32 {
    // A finished CRC-32C is the register state complemented; start from that state.
    let mut digest =
        crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    digest.update(data);
    digest.finalize() as u32
}

/// Time both candidates of each choice on a scratch buffer and choose. Takes tens of
/// milliseconds; medians of several interleaved repetitions at each size.
pub fn calibrate(cpu: &CpuIdentity) -> Choices {
    calibrate_measured(cpu).0
}

/// Time `n` copies of `src` into `buf`, each made durable by `copy_and_persist` (streamed with
/// `nt`), walking on from `*at` in whole lines and wrapping at the end (so each copy lands
/// where the walk did not just write, as a log's ring moves on); ns per copy.
fn time_walk(
    flush: FlushInstruction,
    buf: &mut [u8],
    at: &mut usize,
    src: &[u8],
    n: usize,
    nt: bool,
) -> f64 {
    let size = src.len();
    let t = Instant::now();
    for _ in 0..n {
        if *at + size > buf.len() {
            *at = 0;
        }
        crate::cpu::copy_and_persist(flush, &mut buf[*at..*at + size], src, nt);
        *at += size.next_multiple_of(64);
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

/// [`calibrate`], with the figures it chose from.
pub fn calibrate_measured(cpu: &CpuIdentity) -> (Choices, Measured) {
    const REPS: usize = 9;
    const SCRATCH: usize = 4 << 20;
    let sizes = &CALIBRATION_SIZES;
    let src: Vec<u8> = (0..65_536u32)
        .map(|i| (i.wrapping_mul(31) ^ 0x5a) as u8)
        .collect();
    let mut scratch = vec![0u8; SCRATCH];
    // The first 64-byte boundary in it: records start on lines.
    let base = scratch.as_ptr().align_offset(64);
    let flush = best_flush(cpu);
    let mut at = 0usize;
    // Each timed batch copies about 256 KiB into places not touched just before (the ring of a
    // log moves on), so the destination is not in the cache as it would not be in a log.
    let mut time_copy = |size: usize, nt: bool| -> f64 {
        let n = (256 << 10) / size.max(1024);
        time_walk(flush, &mut scratch[base..], &mut at, &src[..size], n, nt)
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut tmp = Vec::new();
    let mut ntp = Vec::new();
    for &s in sizes {
        time_copy(s, false);
        time_copy(s, true);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for r in 0..REPS {
            if r % 2 == 0 {
                a.push(time_copy(s, false));
                b.push(time_copy(s, true));
            } else {
                b.push(time_copy(s, true));
                a.push(time_copy(s, false));
            }
        }
        tmp.push(median(a));
        ntp.push(median(b));
    }
    let time_crc = |size: usize, fold: bool| -> f64 {
        let n = (128 << 10) / size.max(512);
        let mut c = 0u32;
        let t = Instant::now();
        for i in 0..n {
            let d = std::hint::black_box(&src[(i * 64) % 1024..][..size.min(65_536 - 1024)]);
            c = if fold {
                crc32c_fold(c, d)
            } else {
                crc32c::crc32c_append(c, d)
            };
        }
        std::hint::black_box(c);
        t.elapsed().as_nanos() as f64 / n as f64
    };
    let mut sse = Vec::new();
    let mut fold = Vec::new();
    let have_fold = cpu.has("pclmulqdq");
    for &s in sizes {
        let s = s.min(65_536 - 1024);
        time_crc(s, false);
        if have_fold {
            time_crc(s, true);
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..REPS {
            a.push(time_crc(s, false));
            b.push(if have_fold {
                time_crc(s, true)
            } else {
                f64::INFINITY
            });
        }
        sse.push(median(a));
        fold.push(median(b));
    }
    // Stream-sync: whole records, one after another, each in lines no record wrote before (a
    // log's ring moves on the same way). The records start on line boundaries, so the streamed
    // ones have no partial line written the ordinary way.
    //
    // The lines are first streamed once, so that none is in the cache, as in a log whose ring
    // is larger than the cache or whose records are streamed: the copies above leave much of
    // the scratch buffer cached, and streaming into cached lines is slower (seen on an AMD EPYC
    // 7002: 128-byte records 155 ns streamed into cached lines, 105-115 into lines that are not,
    // ordinary stores + clwb 160 either way; the lead's walk over 64 MiB gave 110 and 171).
    const RECORDS: usize = 256;
    let walk: usize = STREAM_SYNC_PAYLOADS
        .iter()
        .map(|&p| record_bytes(p) * RECORDS * 2 * (REPS + 1))
        .sum();
    let mut off = base;
    while off < (base + walk).min(SCRATCH) {
        let len = (SCRATCH - off).min(src.len()) & !63;
        if len == 0 {
            break;
        }
        crate::cpu::copy_and_persist(flush, &mut scratch[off..off + len], &src[..len], true);
        off += len;
    }
    let has_stream = cpu.has("sse2");
    let mut rat = 0usize;
    let mut time_record = |rec: usize, streamed: bool| -> f64 {
        time_walk(
            flush,
            &mut scratch[base..],
            &mut rat,
            &src[..rec],
            RECORDS,
            streamed,
        )
    };
    let (mut rec_ord, mut rec_nt) = (Vec::new(), Vec::new());
    for &p in &STREAM_SYNC_PAYLOADS {
        let rec = record_bytes(p);
        time_record(rec, false);
        if has_stream {
            time_record(rec, true);
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for r in 0..REPS {
            let streamed_first = r % 2 == 1;
            if streamed_first && has_stream {
                b.push(time_record(rec, true));
            }
            a.push(time_record(rec, false));
            if !streamed_first && has_stream {
                b.push(time_record(rec, true));
            }
        }
        rec_ord.push(median(a));
        rec_nt.push(if has_stream { median(b) } else { f64::INFINITY });
    }
    // Flush: a 1 KiB store, written back, fenced, then stored again (a log rewrites the lines
    // it just wrote back: the next record's header shares none, but the ring comes round).
    let mut cands = Vec::new();
    if cpu.has("clwb") {
        cands.push(FlushInstruction::Clwb);
    }
    if cpu.has("clflushopt") {
        cands.push(FlushInstruction::Clflushopt);
    }
    let mut flush_ns = Vec::new();
    let mut lines = vec![0u8; 64 << 10];
    for &k in &cands {
        let mut v = Vec::new();
        for _ in 0..REPS {
            let t = Instant::now();
            for i in 0..256usize {
                let off = (i % 64) * 1024;
                crate::cpu::copy_and_persist(k, &mut lines[off..off + 1024], &src[..1024], false);
            }
            v.push(t.elapsed().as_nanos() as f64 / 256.0);
        }
        flush_ns.push((k.name().to_string(), median(v)));
    }
    let flush = flush_ns
        .iter()
        .zip(&cands)
        // clwb keeps the line cached; prefer it unless clflushopt is clearly (5%) faster.
        .min_by(|(a, ka), (b, kb)| {
            let bias = |k: &FlushInstruction| {
                if *k == FlushInstruction::Clwb {
                    0.95
                } else {
                    1.0
                }
            };
            (a.1 * bias(ka)).total_cmp(&(b.1 * bias(kb)))
        })
        .map(|(_, &k)| k)
        .unwrap_or(flush);
    let choices = Choices {
        nt_min: crossover(sizes, &tmp, &ntp),
        crc_fold_min: if have_fold {
            crossover(sizes, &sse, &fold)
        } else {
            NEVER
        },
        flush,
        stream_sync: has_stream && stream_sync_wins(&rec_ord, &rec_nt),
    };
    (
        choices,
        Measured {
            copy_temporal_ns: tmp,
            copy_nontemporal_ns: ntp,
            crc_sse42_ns: sse,
            crc_fold_ns: fold,
            flush_ns,
            record_flush: best_flush(cpu).name().to_string(),
            record_ordinary_ns: rec_ord,
            record_streamed_ns: rec_nt,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu() -> CpuIdentity {
        CpuIdentity {
            vendor: "GenuineIntel".into(),
            family: 6,
            model: 106,
            stepping: 6,
            flags: ["sse2", "pclmulqdq", "sse4.2", "avx2", "clflushopt", "clwb"]
                .map(String::from)
                .to_vec(),
            brand: "test".into(),
        }
    }

    #[test]
    fn overrides_parse_and_bad_ones_are_typed_errors() {
        assert_eq!(parse_request("off"), Ok(Request::Off));
        assert_eq!(
            parse_request("nt_min=4096,crc_fold_min=never, flush=clwb"),
            Ok(Request::Set(Overrides {
                nt_min: Some(4096),
                crc_fold_min: Some(NEVER),
                flush: Some(FlushInstruction::Clwb),
                stream_sync: None,
            }))
        );
        assert_eq!(
            parse_request("stream_sync=off,nt_min=256"),
            Ok(Request::Set(Overrides {
                nt_min: Some(256),
                stream_sync: Some(false),
                ..Overrides::default()
            }))
        );
        assert_eq!(
            parse_request("stream_sync=on"),
            Ok(Request::Set(Overrides {
                stream_sync: Some(true),
                ..Overrides::default()
            }))
        );
        assert_eq!(parse_request(""), Ok(Request::Set(Overrides::default())));
        for (bad, item, expected) in [
            ("nt_min=4k", "item 1", "nt_min=a byte count"),
            (
                "flush=clwb,flush=clflush",
                "item 2",
                "each key at most once",
            ),
            (
                "flush=sfence",
                "item 1",
                "flush=clwb, clflushopt or clflush",
            ),
            ("speed=11", "item 1", "one of nt_min"),
            ("stream_sync=yes", "item 1", "stream_sync=on or off"),
            (
                "stream_sync=on,stream_sync=off",
                "item 2",
                "each key at most once",
            ),
            ("nt_min", "item 1", "`off` or key=value"),
            ("nt_min=1,,", "item 2", "`off` or key=value"),
            (
                "crc_fold_min=99999999999",
                "item 1",
                "crc_fold_min=a byte count",
            ),
        ] {
            let e = parse_request(bad).expect_err(bad);
            assert_eq!(e.what, "KAVACH_TUNE");
            assert_eq!(e.where_, item, "{bad}");
            assert!(e.expected.starts_with(expected), "{bad}: {e}");
        }
    }

    #[test]
    fn a_cache_file_round_trips_and_another_cpu_or_build_is_not_taken() {
        let c = Choices {
            nt_min: 2048,
            crc_fold_min: NEVER,
            flush: FlushInstruction::Clflushopt,
            stream_sync: false,
        };
        let text = encode_cache(&cpu(), "1.2.3", &c);
        assert_eq!(decode_cache(&text, "f", &cpu(), "1.2.3"), Ok(Some(c)));
        assert_eq!(decode_cache(&text, "f", &cpu(), "1.2.4"), Ok(None));
        let mut other = cpu();
        other.model = 143;
        assert_eq!(decode_cache(&text, "f", &other, "1.2.3"), Ok(None));
    }

    #[test]
    fn a_cache_file_from_before_stream_sync_is_stale_not_damaged() {
        let c = defaults(&cpu());
        // A format-1 file as the first builds with stream_sync wrote it: still read.
        let text = encode_cache(&cpu(), "1", &c).replace("kavach-tune 2\n", "kavach-tune 1\n");
        assert!(text.starts_with("kavach-tune 1\n"), "{text}");
        assert_eq!(decode_cache(&text, "f", &cpu(), "1"), Ok(Some(c)));
        // And as builds before stream_sync wrote it: it ends at `flush`.
        let old = text.replace("stream_sync on\n", "");
        assert_ne!(old, text, "the line was there");
        assert!(old.ends_with("flush clwb\n"), "{old}");
        // Same CPU and build, but no stream_sync: not used, and not an error either.
        assert_eq!(decode_cache(&old, "f", &cpu(), "1"), Ok(None));
        assert_eq!(decode_cache_entries(&old, "f"), Ok(Vec::new()));
        // A format-1 file holds one entry; a format-2 one must say stream_sync.
        let e = decode_cache_entries(&format!("{text}cpu x\n"), "f").expect_err("two in 1");
        assert_eq!(
            (e.where_.as_str(), e.expected.as_str()),
            ("line 9", "end of file")
        );
        let two = encode_cache(&cpu(), "1", &c).replace("stream_sync on\n", "");
        let e = decode_cache_entries(&two, "f").expect_err("format 2 without stream_sync");
        assert_eq!(
            (e.where_.as_str(), e.expected.as_str()),
            ("line 0", "stream_sync")
        );
        // So the process calibrates every choice and has the file rewritten.
        let mut calls = 0;
        let (t, fresh) = resolve(
            cpu(),
            Ok(Request::Set(Overrides::default())),
            None,
            Some((
                PathBuf::from("/x/tune"),
                decode_cache(&old, "f", &cpu(), "1"),
            )),
            &mut || {
                calls += 1;
                Choices {
                    stream_sync: false,
                    ..c
                }
            },
        );
        assert_eq!(calls, 1);
        assert!(t.warnings.is_empty(), "{:?}", t.warnings);
        assert_eq!(
            (t.stream_sync, t.stream_sync_source),
            (false, Source::Calibrated)
        );
        assert_eq!(t.nt_min_source, Source::Calibrated);
        assert_eq!(fresh.map(|f| f.stream_sync), Some(false));
    }

    #[test]
    fn garbled_cache_files_are_typed_errors_naming_the_line() {
        let good = encode_cache(&cpu(), "1", &defaults(&cpu()));
        let cases: Vec<(String, &str)> = vec![
            (String::new(), "line 1"),
            ("kavach-tune 3\n".into(), "line 1"),
            ("kavach-tune 2\n".into(), "line 0"),
            (good.replace("nt_min 1024", "nt_min lots"), "line 5"),
            (good.replace("flush clwb", "flush wbinvd"), "line 7"),
            (good.replace("crc_fold_min", "crc_min"), "line 6"),
            (good.replace("stream_sync on", "stream_sync yes"), "line 8"),
            (good.replace("stream_sync on", "streaming on"), "line 8"),
            (format!("{good}extra 1\n"), "line 9"),
            (
                good[..good.find("\nflush ").expect("flush") + 1].to_string(),
                "line 0",
            ),
        ];
        for (text, line) in cases {
            let e = decode_cache(&text, "cache", &cpu(), "1").expect_err(&text);
            assert_eq!(e.where_, line, "{text:?}: {e}");
            assert_eq!(e.what, "cache");
        }
    }

    #[test]
    fn resolve_takes_overrides_then_cache_then_calibration() {
        let cached = Choices {
            nt_min: 4096,
            crc_fold_min: 512,
            flush: FlushInstruction::Clflushopt,
            stream_sync: false,
        };
        let mut calls = 0;
        let mut cal = || {
            calls += 1;
            Choices {
                nt_min: 256,
                crc_fold_min: 2048,
                flush: FlushInstruction::Clwb,
                stream_sync: true,
            }
        };
        let p = PathBuf::from("/nonexistent/tune");
        // Cache hit, one key overridden: no calibration.
        let (t, fresh) = resolve(
            cpu(),
            parse_request("nt_min=8192"),
            None,
            Some((p.clone(), Ok(Some(cached)))),
            &mut cal,
        );
        assert_eq!(fresh, None);
        assert_eq!((t.nt_min, t.nt_min_source), (Some(8192), Source::Override));
        assert_eq!(
            (t.crc_fold_min, t.crc_fold_min_source),
            (Some(512), Source::Cached)
        );
        assert_eq!(
            (t.flush, t.flush_source),
            (FlushInstruction::Clflushopt, Source::Cached)
        );
        // A garbled cache: warned, calibrated, to be rewritten.
        let bad = decode_cache("garbage", "cache", &cpu(), "1");
        let (t, fresh) = resolve(
            cpu(),
            Ok(Request::Set(Overrides::default())),
            None,
            Some((p.clone(), bad)),
            &mut cal,
        );
        assert!(fresh.is_some());
        assert_eq!(t.nt_min_source, Source::Calibrated);
        assert_eq!(t.warnings.len(), 1, "{:?}", t.warnings);
        // KAVACH_FLUSH still works; a bad KAVACH_TUNE is ignored with a warning.
        let (t, _) = resolve(
            cpu(),
            parse_request("flush=x"),
            Some("clflush"),
            Some((p.clone(), Ok(Some(cached)))),
            &mut cal,
        );
        assert_eq!(
            (t.flush, t.flush_source),
            (FlushInstruction::Clflush, Source::Override)
        );
        assert_eq!(t.nt_min_source, Source::Cached);
        assert!(
            t.warnings[0].contains("KAVACH_TUNE ignored"),
            "{:?}",
            t.warnings
        );
        // off: the defaults, nothing read or calibrated.
        let (t, fresh) = resolve(cpu(), Ok(Request::Off), None, None, &mut cal);
        assert_eq!(fresh, None);
        assert_eq!(t.choices(), defaults(&cpu()));
        assert_eq!(t.nt_min_source, Source::Default);
        assert_eq!(
            (t.stream_sync, t.stream_sync_source),
            (true, Source::Default)
        );
        // stream_sync overridden over a cached choice, alone or with the others.
        let (t, _) = resolve(
            cpu(),
            parse_request("stream_sync=on"),
            None,
            Some((p.clone(), Ok(Some(cached)))),
            &mut cal,
        );
        assert_eq!(
            (t.stream_sync, t.stream_sync_source),
            (true, Source::Override)
        );
        assert_eq!(t.flush_source, Source::Cached);
        assert!(t.warnings.is_empty(), "{:?}", t.warnings);
        // All four set: neither the cache nor a calibration is needed.
        let (t, fresh) = resolve(
            cpu(),
            parse_request("nt_min=64,crc_fold_min=never,flush=clflushopt,stream_sync=off"),
            None,
            Some((p.clone(), Ok(None))),
            &mut cal,
        );
        assert_eq!(fresh, None);
        assert_eq!(
            (t.stream_sync, t.stream_sync_source),
            (false, Source::Override)
        );
        // A bad stream_sync value: warned about, KAVACH_TUNE ignored, the cache used.
        let (t, _) = resolve(
            cpu(),
            parse_request("nt_min=64,stream_sync=1"),
            None,
            Some((p.clone(), Ok(Some(cached)))),
            &mut cal,
        );
        assert_eq!(
            (t.stream_sync, t.stream_sync_source),
            (false, Source::Cached)
        );
        assert_eq!(t.nt_min, Some(4096));
        assert!(
            t.warnings[0].contains("item 2") && t.warnings[0].contains("stream_sync=on or off"),
            "{:?}",
            t.warnings
        );
        // An instruction the CPU lacks falls back to what it has.
        let mut old = cpu();
        old.flags.retain(|f| f != "clwb");
        let (t, _) = resolve(
            old,
            parse_request("flush=clwb"),
            None,
            Some((p.clone(), Ok(Some(cached)))),
            &mut cal,
        );
        assert_eq!(t.flush, FlushInstruction::Clflushopt);
        // Without SSE2 nothing is streamed, whatever the override or the cache says.
        let mut no_sse2 = cpu();
        no_sse2.flags.retain(|f| f != "sse2");
        assert!(!defaults(&no_sse2).stream_sync);
        let (t, _) = resolve(
            no_sse2.clone(),
            parse_request("stream_sync=on"),
            None,
            Some((p.clone(), Ok(Some(cached)))),
            &mut cal,
        );
        assert!(!t.stream_sync);
        assert!(t.warnings[0].contains("lacks SSE2"), "{:?}", t.warnings);
        let on = Choices {
            stream_sync: true,
            ..cached
        };
        let (t, _) = resolve(
            no_sse2,
            parse_request(""),
            None,
            Some((p, Ok(Some(on)))),
            &mut cal,
        );
        assert_eq!(
            (t.stream_sync, t.stream_sync_source),
            (false, Source::Cached)
        );
        assert_eq!(calls, 1);
    }

    #[test]
    fn a_debug_build_does_not_share_the_release_cache() {
        let v = build_version();
        assert!(v.starts_with(env!("CARGO_PKG_VERSION")));
        assert_eq!(v.ends_with("-debug"), cfg!(debug_assertions), "{v}");
        // A file written by the other kind of build is not used.
        let cpu = cpu();
        let other = if cfg!(debug_assertions) {
            env!("CARGO_PKG_VERSION").to_string()
        } else {
            format!("{}-debug", env!("CARGO_PKG_VERSION"))
        };
        let text = encode_cache(&cpu, &other, &defaults(&cpu));
        assert_eq!(decode_cache(&text, "t", &cpu, v).expect("parses"), None);
    }

    #[test]
    fn the_format_doc_matches_the_code() {
        let doc = include_str!("../../../docs/format/tune-cache.md");
        let start = doc.find("```text\n").expect("an example block") + "```text\n".len();
        let example = &doc[start..start + doc[start..].find("```").expect("closed")];
        let amd = CpuIdentity {
            vendor: "AuthenticAMD".into(),
            family: 23,
            model: 49,
            stepping: 0,
            flags: ["sse2", "pclmulqdq", "sse4.2", "avx2", "clflushopt", "clwb"]
                .map(String::from)
                .to_vec(),
            brand: "AMD EPYC".into(),
        };
        let c = decode_cache(example, "doc", &amd, "0.1.0")
            .expect("the example parses")
            .expect("and is for that CPU and build");
        let entries = decode_cache_entries(example, "doc").expect("parses");
        assert_eq!(encode_cache_entries(&entries), example);
        assert_eq!(entries.len(), 2, "a release and a debug build's entries");
        assert_eq!(entries[0].choices, c, "the release entry first");
        assert_eq!(entries[1].version, "0.1.0-debug");
        assert_eq!(entries[1].cpu, amd.key());
        assert_eq!(c.crc_fold_min, NEVER);
        assert!(c.stream_sync);
        assert!(doc.contains(&format!("at most {CACHE_ENTRIES_MAX} entries")));
        assert!(doc.contains("`kavach-tune 1`"), "format 1 is described");
        // The constants the document names.
        let magic = format!("| `{CACHE_MAGIC} {CACHE_FORMAT}` |");
        assert!(doc.contains(&magic), "{magic}");
        assert!(doc.contains(&format!("at most {}", 1usize << 30)));
        assert!(doc.contains(&format!("`nt_min` {NT_MIN_DEFAULT}")));
        assert!(doc.contains(&format!("`crc_fold_min` {CRC_FOLD_MIN_DEFAULT}")));
        assert!(doc.contains("| `stream_sync B` |"));
        assert!(doc.contains("`stream_sync` on when the CPU has SSE2"));
        let [p0, p1] = STREAM_SYNC_PAYLOADS;
        assert!(
            doc.contains(&format!(
                "{p0} and {p1}-byte payloads behind a {RECORD_HEADER_BYTES}-byte header"
            )),
            "the calibration's record sizes"
        );
        // The flag order the key lists them in.
        let all = CpuIdentity {
            flags: [
                "sse2",
                "pclmulqdq",
                "sse4.2",
                "avx2",
                "avx512f",
                "clflushopt",
                "clwb",
                "vpclmulqdq",
            ]
            .map(String::from)
            .to_vec(),
            ..amd
        };
        let order = all
            .key()
            .split(' ')
            .nth(1)
            .expect("flags")
            .replace(',', "`, `");
        assert!(doc.contains(&format!("(`{order}`)")), "{order}");
    }

    #[test]
    fn the_cache_file_is_written_whole_and_a_bad_one_is_an_error_not_a_panic() {
        let dir = std::env::temp_dir().join(format!("kavach-tune-test-{}", std::process::id()));
        let path = dir.join("sub").join("tune");
        let cpu = CpuIdentity::detect();
        assert_eq!(
            read_cache(&path, &cpu),
            Ok(None),
            "a missing file is no error"
        );
        let c = Choices {
            nt_min: 512,
            crc_fold_min: 8192,
            flush: best_flush(&cpu),
            stream_sync: true,
        };
        write_cache(&path, &cpu, &c).expect("write");
        assert_eq!(read_cache(&path, &cpu), Ok(Some(c)));
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().expect("dir"))
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(leftovers, [std::ffi::OsString::from("tune")]);
        std::fs::write(&path, b"kavach-tune 1\ncpu \xff\n").expect("garble");
        let e = read_cache(&path, &cpu).expect_err("invalid UTF-8");
        assert_eq!(e.expected, "UTF-8 text");
        std::fs::write(&path, "kavach-tune 1\nversion 1\n").expect("garble");
        let e = read_cache(&path, &cpu).expect_err("misordered");
        assert_eq!(
            (e.where_.as_str(), e.found.as_str()),
            ("line 2", "version 1")
        );
        // Over a garbled file: the new entry alone.
        write_cache(&path, &cpu, &c).expect("write over garbage");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(decode_cache_entries(&text, "t").map(|e| e.len()), Ok(1));
        // Another build's entry (the debug and release builds share the file) is kept beside
        // this build's, and a rewrite of this build's replaces only its own.
        let other = CacheEntry {
            cpu: cpu.key(),
            version: "0.0.0-other".into(),
            choices: Choices { nt_min: 64, ..c },
        };
        std::fs::write(&path, encode_cache_entries(std::slice::from_ref(&other))).expect("other");
        assert_eq!(read_cache(&path, &cpu), Ok(None));
        write_cache(&path, &cpu, &c).expect("write");
        let d = Choices { nt_min: 2048, ..c };
        write_cache(&path, &cpu, &d).expect("rewrite");
        assert_eq!(read_cache(&path, &cpu), Ok(Some(d)));
        let text = std::fs::read_to_string(&path).expect("read");
        let entries = decode_cache_entries(&text, "t").expect("parses");
        assert_eq!(entries.len(), 2, "{text}");
        assert_eq!(entries[1], other);
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn streaming_wins_only_when_faster_at_every_size() {
        assert!(stream_sync_wins(&[171.0, 184.0], &[110.0, 126.0]));
        assert!(!stream_sync_wins(&[171.0, 184.0], &[110.0, 190.0]));
        assert!(!stream_sync_wins(&[171.0, 184.0], &[171.0, 100.0]));
        assert!(!stream_sync_wins(&[171.0, 184.0], &[f64::INFINITY; 2]));
        assert!(!stream_sync_wins(&[], &[]));
        assert_eq!(record_bytes(64), 128);
        assert_eq!(record_bytes(256), 320);
        assert_eq!(record_bytes(32), 64);
    }

    #[test]
    fn entries_are_kept_per_cpu_and_build_newest_first_and_at_most_eight() {
        let entry = |cpu: &str, version: &str, nt_min: usize| CacheEntry {
            cpu: cpu.into(),
            version: version.into(),
            choices: Choices {
                nt_min,
                ..defaults(&super::tests::cpu())
            },
        };
        let old = vec![
            entry("a", "1", 64),
            entry("a", "1-debug", 128),
            entry("b", "1", 256),
        ];
        // Same CPU and build: replaced, and moved first; the others keep their order.
        let m = merge_cache_entries(old.clone(), entry("a", "1-debug", 512));
        assert_eq!(
            m,
            vec![
                entry("a", "1-debug", 512),
                entry("a", "1", 64),
                entry("b", "1", 256)
            ]
        );
        // A new one goes first; the oldest fall off past CACHE_ENTRIES_MAX.
        let mut many: Vec<CacheEntry> = (0..CACHE_ENTRIES_MAX)
            .map(|i| entry(&format!("c{i}"), "1", 64))
            .collect();
        many = merge_cache_entries(many, entry("new", "1", 64));
        assert_eq!(many.len(), CACHE_ENTRIES_MAX);
        assert_eq!(many[0].cpu, "new");
        assert_eq!(
            many[CACHE_ENTRIES_MAX - 1].cpu,
            format!("c{}", CACHE_ENTRIES_MAX - 2)
        );
        // The file round-trips every entry, and each reader finds its own.
        let text = encode_cache_entries(&m);
        assert_eq!(decode_cache_entries(&text, "f"), Ok(m.clone()));
        let mut b = cpu();
        b.vendor = "X".into();
        let text = encode_cache_entries(&[
            CacheEntry {
                cpu: b.key(),
                ..entry("", "1", 4096)
            },
            CacheEntry {
                cpu: cpu().key(),
                ..entry("", "1-debug", 2048)
            },
        ]);
        let nt =
            |c: &CpuIdentity, v: &str| decode_cache(&text, "f", c, v).map(|c| c.map(|c| c.nt_min));
        assert_eq!(nt(&b, "1"), Ok(Some(4096)));
        assert_eq!(nt(&cpu(), "1-debug"), Ok(Some(2048)));
        assert_eq!(nt(&cpu(), "1"), Ok(None));
    }

    #[test]
    fn crossover_is_the_start_of_the_winning_suffix() {
        let s = [64, 256, 1024, 4096];
        assert_eq!(
            crossover(&s, &[1.0, 2.0, 3.0, 4.0], &[2.0, 1.0, 4.0, 3.0]),
            4096
        );
        assert_eq!(
            crossover(&s, &[1.0, 2.0, 3.0, 4.0], &[0.5, 1.0, 1.0, 1.0]),
            64
        );
        assert_eq!(
            crossover(&s, &[1.0, 2.0, 3.0, 4.0], &[2.0, 3.0, 4.0, 5.0]),
            NEVER
        );
    }

    #[test]
    fn both_crc_paths_agree() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 13 + 1) as u8).collect();
        for len in [0, 1, 63, 64, 1000, 1024, 4096, 5000] {
            assert_eq!(
                crc32c_fold(0x1234_5678, &data[..len]),
                crc32c::crc32c_append(0x1234_5678, &data[..len]),
                "{len}"
            );
        }
    }

    #[test]
    fn a_calibration_chooses_sizes_it_measured_and_an_instruction_the_cpu_has() {
        let cpu = CpuIdentity::detect();
        let (c, m) = calibrate_measured(&cpu);
        for v in [c.nt_min, c.crc_fold_min] {
            assert!(v == NEVER || CALIBRATION_SIZES.contains(&v), "{v}");
        }
        assert_eq!(available(&cpu, c.flush), c.flush);
        assert_eq!(m.copy_temporal_ns.len(), CALIBRATION_SIZES.len());
        assert!(
            m.copy_nontemporal_ns
                .iter()
                .all(|v| v.is_finite() && *v > 0.0)
        );
        assert_eq!(m.record_ordinary_ns.len(), STREAM_SYNC_PAYLOADS.len());
        assert!(
            m.record_ordinary_ns
                .iter()
                .chain(&m.record_streamed_ns)
                .all(|v| *v > 0.0)
        );
        // The choices follow from the figures.
        assert_eq!(
            c.stream_sync,
            cpu.has("sse2") && stream_sync_wins(&m.record_ordinary_ns, &m.record_streamed_ns)
        );
        assert_eq!(
            c.nt_min,
            crossover(
                &CALIBRATION_SIZES,
                &m.copy_temporal_ns,
                &m.copy_nontemporal_ns
            )
        );
    }
}
