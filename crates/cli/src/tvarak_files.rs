//! Trace files for `kavach tvarak-sim`: opening and checking one to its end (what `info`
//! counts, and the damage that makes exit status 1), and writing one safely (a temporary file
//! beside the output, moved into place only when complete).

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use anyhow::Result;
use tvarak_sim::trace::{self, TraceReader};

use crate::outcome::{Outcome, print_json, refused};

/// What a full pass over a trace found.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub(crate) struct TraceSummary {
    pub(crate) name: String,
    pub(crate) version: u16,
    pub(crate) pm_bytes: u64,
    pub(crate) cores: u16,
    pub(crate) with_data: bool,
    pub(crate) events: u64,
    pub(crate) loads: u64,
    pub(crate) stores: u64,
    pub(crate) flushes: u64,
    pub(crate) fences: u64,
    pub(crate) tx_begins: u64,
    pub(crate) tx_commits: u64,
    pub(crate) work_events: u64,
    pub(crate) work_cycles: u64,
    pub(crate) load_bytes: u64,
    pub(crate) store_bytes: u64,
}

pub(crate) fn open_trace(path: &Path) -> Result<TraceReader<BufReader<File>>> {
    if path.is_dir() {
        return Err(refused(format!(
            "{}: is a directory, expected a trace file",
            path.display()
        )));
    }
    let f = File::open(path).map_err(|e| refused(format!("{}: {e}", path.display())))?;
    TraceReader::new(BufReader::new(f))
        .map_err(|e| refused(format!("{}: not a trace: {e}", path.display())))
}

/// Read the trace at `path` to its end, checking every event. `Err`: not a trace (exit 2);
/// `Ok(Err)`: a trace whose body is damaged (exit 1), with what was read before the damage.
pub(crate) fn check_trace(
    path: &Path,
) -> Result<std::result::Result<TraceSummary, (TraceSummary, String)>> {
    let r = open_trace(path)?;
    let h = r.header().clone();
    let mut s = TraceSummary {
        name: h.name.clone(),
        version: r.version(),
        pm_bytes: h.pm_bytes,
        cores: h.cores,
        with_data: h.with_data,
        ..Default::default()
    };
    for e in r {
        let e = match e {
            Ok(e) => e,
            Err(err) => return Ok(Err((s, format!("{}: {err}", path.display())))),
        };
        s.events += 1;
        match e {
            trace::Event::Load { len, .. } => {
                s.loads += 1;
                s.load_bytes += u64::from(len);
            }
            trace::Event::Store { len, .. } => {
                s.stores += 1;
                s.store_bytes += u64::from(len);
            }
            trace::Event::Flush { .. } => s.flushes += 1,
            trace::Event::Fence { .. } => s.fences += 1,
            trace::Event::TxBegin { .. } => s.tx_begins += 1,
            trace::Event::TxCommit { .. } => s.tx_commits += 1,
            trace::Event::Work { cycles, .. } => {
                s.work_events += 1;
                s.work_cycles += u64::from(cycles);
            }
        }
    }
    Ok(Ok(s))
}

/// Print the damage found in a trace (exit 1 follows).
pub(crate) fn report_damage(what: &str, json: bool, summary: &TraceSummary) -> Result<Outcome> {
    if json {
        print_json(&serde_json::json!({
            "damaged": true,
            "damage": what,
            "events_before_damage": summary.events,
        }))?;
    }
    eprintln!(
        "kavach: damaged trace: {what} (after {} good events)",
        summary.events
    );
    Ok(Outcome::Damage)
}

/// The temporary file a trace for `out` is written to: hidden, beside it, named per process.
pub(crate) fn temp_beside(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trace".into());
    out.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// Move the finished trace `tmp` to `out`, unless `out` appeared while it was written (it is
/// never replaced). On failure `tmp` is removed.
pub(crate) fn publish(tmp: &Path, out: &Path) -> Result<()> {
    if std::fs::symlink_metadata(out).is_ok() {
        let _ = std::fs::remove_file(tmp);
        return Err(refused(format!(
            "-o {}: appeared while the trace was written; not replaced",
            out.display()
        )));
    }
    std::fs::rename(tmp, out).map_err(|e| {
        let _ = std::fs::remove_file(tmp);
        refused(format!("-o {}: {e}", out.display()))
    })
}
