//! `kavach pool check`: read-only validation of a pool file's header and directory.
//!
//! It reads the file with ordinary reads (it never maps it, so a damaged or truncated file cannot
//! fault the checker) under a shared lock (so it does not race a writer), and reports every
//! finding, not just the first.

use crate::error::{Corruption, PmemError, Result};
use crate::header::SlotContent;
use crate::layout::METADATA_BYTES;
use crate::pool::Survey;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::Path;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Damage the pool survives: it still opens from the other copy.
    Damage,
    /// Damage that stops the pool from opening.
    Fatal,
}

/// One thing found wrong.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Finding {
    /// How bad.
    pub severity: Severity,
    /// What, in a sentence.
    pub message: String,
    /// The corruption behind it, if it is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
}

/// The result of a check that ran.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckReport {
    /// The file.
    pub path: std::path::PathBuf,
    /// Everything found, worst first.
    pub findings: Vec<Finding>,
    /// Number of regions in the current directory, if it decoded.
    pub regions: Option<usize>,
    /// Was the pool closed cleanly, if a state decoded?
    pub clean_shutdown: Option<bool>,
}

impl CheckReport {
    /// No findings at all.
    pub fn healthy(&self) -> bool {
        self.findings.is_empty()
    }
    /// Will the pool open?
    pub fn opens(&self) -> bool {
        self.findings.iter().all(|f| f.severity != Severity::Fatal)
    }
}

fn finding(severity: Severity, c: &Corruption, note: &str) -> Finding {
    Finding {
        severity,
        message: format!("{c}{note}"),
        offset: Some(c.offset),
    }
}

/// Check the pool file at `path`. `Err` means the check could not run: the file is missing,
/// unreadable, in use, or not a Kavach pool at all.
pub fn check_file(path: &Path) -> Result<CheckReport> {
    let mut file = std::fs::File::open(path).map_err(|e| PmemError::io("cannot open", path, e))?;
    let meta = crate::mapping::regular_file_metadata(&file, path)?;
    if writer_holds_lock(&file) {
        return Err(PmemError::Locked(path.into()));
    }
    let len = meta.len();
    let mut head = vec![0u8; METADATA_BYTES.min(len as usize)];
    file.read_exact(&mut head)
        .map_err(|e| PmemError::io("cannot read", path, e))?;
    check_metadata(path, &head, len)
}

/// Check the metadata `head` (the first `METADATA_BYTES` of a file of `len` bytes, or all of a
/// shorter one). `Err` means it is not a Kavach pool at all.
pub fn check_metadata(path: &Path, head: &[u8], len: u64) -> Result<CheckReport> {
    let mut report = CheckReport {
        path: path.into(),
        findings: Vec::new(),
        regions: None,
        clean_shutdown: None,
    };
    if head.len() < METADATA_BYTES {
        if head.starts_with(&crate::layout::HEADER_MAGIC) {
            report.findings.push(Finding {
                severity: Severity::Fatal,
                message: format!("truncated: the file has {len} bytes, less than the {METADATA_BYTES} bytes of pool metadata"),
                offset: Some(len),
            });
            return Ok(report);
        }
        return Err(PmemError::NotAPool {
            path: path.into(),
            reason: format!("only {len} bytes, no pool header"),
        });
    }
    let survey = Survey::of(head);
    if !survey.looks_like_pool() {
        return Err(PmemError::NotAPool {
            path: path.into(),
            reason: "no Kavach pool header magic".into(),
        });
    }
    let header = match survey.header() {
        Ok(h) => h,
        Err(e) => {
            report.findings.push(Finding {
                severity: Severity::Fatal,
                message: format!("{e}"),
                offset: None,
            });
            for c in survey.headers.iter().filter_map(|h| h.as_ref().err()) {
                report.findings.push(finding(Severity::Fatal, c, ""));
            }
            return Ok(report);
        }
    };
    for (copy, h) in survey.headers.iter().enumerate() {
        if let Err(c) = h {
            let note = format!(
                "; the pool opens from header copy {}, and `kavach pool repair` (or a read-write \
                 open) rewrites this one",
                1 - copy
            );
            report.findings.push(finding(Severity::Damage, c, &note));
        }
    }
    let size = survey.pool_size().unwrap_or(header.pool_size);
    let fits = survey
        .fits_file(len)
        .unwrap_or(header.pool_size == len || header.growable() && header.pool_size <= len);
    if !fits {
        report.findings.push(Finding {
            severity: Severity::Fatal,
            message: format!(
                "{}: the pool is {size} bytes, the file has {len}",
                if len < size { "truncated" } else { "resized" },
            ),
            offset: Some(len.min(size)),
        });
    }
    if let Err(e) = header.check_features(false) {
        report.findings.push(Finding {
            severity: Severity::Fatal,
            message: e.to_string(),
            offset: None,
        });
    }
    for (copy, &page) in crate::layout::HEADER_COPY_OFFSETS.iter().enumerate() {
        let slot_end = crate::layout::SLOT_OFFSET_IN_PAGE + crate::layout::SLOT_BYTES;
        let unused = [
            (
                crate::layout::HEADER_BYTES,
                crate::layout::SLOT_OFFSET_IN_PAGE,
            ),
            (slot_end, crate::layout::PAGE_SIZE),
        ];
        for (from, to) in unused {
            if let Some(i) = head[page + from..page + to].iter().position(|&b| b != 0) {
                let at = (page + from + i) as u64;
                report.findings.push(Finding {
                    severity: Severity::Damage,
                    message: format!(
                        "header page {copy} at byte {at:#x}: unused bytes must be zero, found {:#04x} (stray write; `kavach pool repair` clears it)",
                        head[page + from + i]
                    ),
                    offset: Some(at),
                });
            }
        }
    }
    match survey.state() {
        Ok(state) => {
            report.clean_shutdown = Some(state.clean_shutdown);
            for (i, s) in survey.slots.iter().enumerate() {
                if let SlotContent::Damaged(c) = s {
                    let note = format!(
                        " (a write cut short by a crash, or media damage); the pool opens from slot {} (sequence {}), and `kavach pool repair` clears this one",
                        1 - i,
                        state.sequence
                    );
                    report.findings.push(finding(Severity::Damage, c, &note));
                }
            }
        }
        Err(e) => {
            report.findings.push(Finding {
                severity: Severity::Fatal,
                message: e.to_string(),
                offset: None,
            });
        }
    }
    match (&survey.directory, &survey.mirror) {
        (Some(Ok(d)), _) => report.regions = Some(d.regions.len()),
        (Some(Err(c)), Some(Ok(m))) => {
            report.regions = Some(m.regions.len());
            let note = format!(
                "; the pool opens from the mirror of generation {} in the other copy, and \
                 `kavach pool repair` (or a read-write open) rewrites this one",
                m.generation
            );
            report.findings.push(finding(Severity::Damage, c, &note));
        }
        (Some(Err(c)), mirror) => {
            let why = match mirror {
                Some(Err(m)) => format!("; the other copy is no mirror of it ({m})"),
                _ => String::new(),
            };
            report.findings.push(finding(Severity::Fatal, c, &why));
        }
        (None, _) => {}
    }
    report
        .findings
        .sort_by_key(|f| f.severity != Severity::Fatal);
    Ok(report)
}

/// Take a shared, non-blocking lock (released when `file` closes); true if a writer holds the pool.
fn writer_holds_lock(file: &std::fs::File) -> bool {
    // SAFETY: flock on a descriptor we own.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
    rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EWOULDBLOCK)
}
