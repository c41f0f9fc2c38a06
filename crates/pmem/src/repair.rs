//! `kavach pool repair`: rebuild damaged pool metadata from a good copy, and only where the good
//! copy proves what the damaged bytes must hold.
//!
//! What is provable (each rule is argued in `docs/format/pool.md`, "Repair"):
//! - a header copy that fails its checks, when the other copy is valid: the immutable header is
//!   written once, identical in both copies but for `copy_index` and the CRC. Not when the
//!   failing copy reports a newer `format_version` (a newer Kavach may have written it), and not
//!   when both copies are valid but disagree (nothing says which is right);
//! - non-zero bytes in the unused parts of the header pages, when the header has no feature bit
//!   this build does not know: format writes them as zero and nothing reads or writes them since;
//! - a damaged mutable slot next to a valid one: every open already ignores it, so clearing it
//!   (an empty slot) changes nothing that opens;
//! - the directory copy in force, when the other copy is a valid mirror of the same generation,
//!   and the mirror, when the copy in force is valid.
//!
//! Everything else is reported as not repaired, with the reason, and left as it is.

use crate::check::{CheckReport, check_metadata};
use crate::error::Result;
use crate::header::SlotContent;
use crate::layout::{
    self, HEADER_BYTES, METADATA_BYTES, PAGE_SIZE, SLOT_BYTES, SLOT_OFFSET_IN_PAGE,
};
use crate::mapping::Mapping;
use crate::medium::Medium;
use crate::pool::Survey;
use std::path::{Path, PathBuf};

/// One repair made.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Repaired {
    /// Pool byte offset of the bytes rewritten.
    pub offset: u64,
    /// Bytes rewritten.
    pub bytes: u64,
    /// What was rewritten, from what, and what was there.
    pub message: String,
}

/// Damage left as it is.
#[derive(Debug, Clone, serde::Serialize)]
pub struct NotRepaired {
    /// Pool byte offset of the damage, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// The damage.
    pub damage: String,
    /// Why it cannot be proven what the bytes must hold.
    pub reason: String,
}

/// What `repair_file` did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RepairReport {
    /// The file.
    pub path: PathBuf,
    /// Repairs made, in the order they were made.
    pub repaired: Vec<Repaired>,
    /// Damage that could not be repaired.
    pub not_repaired: Vec<NotRepaired>,
    /// `pool check` of the file after the repairs.
    pub after: CheckReport,
}

impl RepairReport {
    /// The pool checks healthy now.
    pub fn healthy(&self) -> bool {
        self.after.healthy()
    }
}

/// Planned writes: (offset, new bytes, message).
type Plan = Vec<(usize, Vec<u8>, String)>;

/// Repair the pool file at `path` (exclusively locked for the duration). `Err` means the repair
/// could not run: the file is missing, in use, or not a Kavach pool.
pub fn repair_file(path: &Path) -> Result<RepairReport> {
    let mapping = Mapping::open(path, true)?;
    let len = mapping.len();
    let mut head = vec![0u8; METADATA_BYTES.min(len)];
    mapping.read(0, &mut head);
    // Not a pool at all: an error, before anything is written.
    check_metadata(path, &head, len as u64)?;
    let (plan, mut not_repaired) = if len < METADATA_BYTES {
        let refusal = NotRepaired {
            offset: Some(len as u64),
            damage: format!(
                "the file has {len} bytes, less than the {METADATA_BYTES} bytes of pool metadata"
            ),
            reason: "repair never changes a file's size".into(),
        };
        (Vec::new(), vec![refusal])
    } else {
        plan(&head, len as u64)
    };
    let mut repaired = Vec::new();
    for (at, bytes, message) in plan {
        mapping.write(at, &bytes);
        mapping.persist(at, bytes.len())?;
        repaired.push(Repaired {
            offset: at as u64,
            bytes: bytes.len() as u64,
            message,
        });
    }
    mapping.read(0, &mut head);
    let after = check_metadata(path, &head, len as u64)?;
    // Findings left that no refusal above explains (truncation, features...).
    for f in &after.findings {
        let explained = not_repaired
            .iter()
            .any(|n| n.offset.is_some() && n.offset == f.offset);
        if !explained {
            not_repaired.push(NotRepaired {
                offset: f.offset,
                damage: f.message.clone(),
                reason:
                    "repair rebuilds metadata only from a good copy, and there is none for this"
                        .into(),
            });
        }
    }
    Ok(RepairReport {
        path: path.into(),
        repaired,
        not_repaired,
        after,
    })
}

/// Decide what to rewrite in the metadata `meta` of a file of `len` bytes.
fn plan(meta: &[u8], len: u64) -> (Plan, Vec<NotRepaired>) {
    let mut plan: Plan = Vec::new();
    let mut refused = Vec::new();
    let survey = Survey::of(meta);
    let header = match survey.header() {
        Ok(h) => h,
        Err(e) => {
            refused.push(NotRepaired {
                offset: e.corruption().map(|c| c.offset),
                damage: e.to_string(),
                reason: "no header copy is valid, or both are valid and disagree: nothing proves \
                         which header is the pool's"
                    .into(),
            });
            return (plan, refused);
        }
    };
    let size = survey.pool_size().unwrap_or(header.pool_size);
    let fits = survey
        .fits_file(len)
        .unwrap_or(header.pool_size == len || header.growable() && header.pool_size <= len);
    if !fits {
        refused.push(NotRepaired {
            offset: Some(len.min(size)),
            damage: format!("the pool is {size} bytes, the file has {len}"),
            reason: "repair never changes a file's size, and trusts no other metadata of a file \
                     whose size is wrong"
                .into(),
        });
        return (plan, refused);
    }
    // Header copies.
    for copy in 0..2 {
        let Err(c) = &survey.headers[copy] else {
            continue;
        };
        if c.field == layout::header::FORMAT_VERSION.name {
            refused.push(NotRepaired {
                offset: Some(c.offset),
                damage: c.to_string(),
                reason: format!(
                    "a newer version of Kavach may have written header copy {copy}; this one \
                     cannot tell that from damage"
                ),
            });
            continue;
        }
        plan.push((
            layout::HEADER_COPY_OFFSETS[copy],
            header.encode(copy).to_vec(),
            format!(
                "header copy {copy} rebuilt from copy {} (it failed: {c})",
                1 - copy
            ),
        ));
    }
    // Unused bytes of the header pages.
    let unknown_features = header.features_compat & !layout::FEATURES_COMPAT_KNOWN
        | header.features_ro_compat & !layout::FEATURES_RO_COMPAT_KNOWN
        | header.features_incompat & !layout::FEATURES_INCOMPAT_KNOWN;
    let slot_end = SLOT_OFFSET_IN_PAGE + SLOT_BYTES;
    for page in layout::HEADER_COPY_OFFSETS {
        for (from, to) in [(HEADER_BYTES, SLOT_OFFSET_IN_PAGE), (slot_end, PAGE_SIZE)] {
            let range = &meta[page + from..page + to];
            let Some(first) = range.iter().position(|&b| b != 0) else {
                continue;
            };
            let last = range.iter().rposition(|&b| b != 0).unwrap_or(first);
            let (start, end) = (page + from + first, page + from + last + 1);
            let stray = range.iter().filter(|&&b| b != 0).count();
            if unknown_features != 0 {
                refused.push(NotRepaired {
                    offset: Some(start as u64),
                    damage: format!(
                        "{stray} non-zero byte(s) in unused header bytes [{start:#x}, {end:#x})"
                    ),
                    reason: format!(
                        "the pool has feature bits {unknown_features:#x} this version does not \
                         know, which may use these bytes"
                    ),
                });
                continue;
            }
            plan.push((
                start,
                vec![0; end - start],
                format!(
                    "cleared {stray} stray non-zero byte(s) in unused header bytes \
                     [{start:#x}, {end:#x}) (format writes them as zero; nothing reads them)"
                ),
            ));
        }
    }
    // Slots.
    let state = match survey.state() {
        Ok(s) => s,
        Err(e) => {
            refused.push(NotRepaired {
                offset: e.corruption().map(|c| c.offset),
                damage: e.to_string(),
                reason: "no valid state: nothing proves which directory generation is in force"
                    .into(),
            });
            return (plan, refused);
        }
    };
    for (i, slot) in survey.slots.iter().enumerate() {
        if let SlotContent::Damaged(c) = slot {
            plan.push((
                crate::header::slot_offset(i),
                vec![0; SLOT_BYTES],
                format!(
                    "cleared damaged mutable slot {i} (every open already ignores it; the state \
                     in force is sequence {} in slot {}) (it failed: {c})",
                    state.sequence,
                    1 - i
                ),
            ));
        }
    }
    // Directory copies.
    let in_force = (state.directory_generation % 2) as usize;
    let page_of = |c: usize| {
        let at = layout::DIRECTORY_COPY_OFFSETS[c];
        &meta[at..at + PAGE_SIZE]
    };
    match (&survey.directory, &survey.mirror) {
        (Some(Ok(_)), _) => {
            if page_of(in_force) != page_of(1 - in_force) {
                plan.push((
                    layout::DIRECTORY_COPY_OFFSETS[1 - in_force],
                    page_of(in_force).to_vec(),
                    format!(
                        "directory copy {} rewritten as the mirror of generation {} in copy \
                         {in_force} (it held no valid mirror; it is read only when the copy in \
                         force fails)",
                        1 - in_force,
                        state.directory_generation
                    ),
                ));
            }
        }
        (Some(Err(c)), Some(Ok(_))) => plan.push((
            layout::DIRECTORY_COPY_OFFSETS[in_force],
            page_of(1 - in_force).to_vec(),
            format!(
                "directory copy {in_force} (generation {}, in force) rebuilt from its mirror in \
                 copy {} (it failed: {c})",
                state.directory_generation,
                1 - in_force
            ),
        )),
        (Some(Err(c)), mirror) => {
            let other = match mirror {
                Some(Err(m)) => format!(" ({m})"),
                _ => String::new(),
            };
            refused.push(NotRepaired {
                offset: Some(c.offset),
                damage: c.to_string(),
                reason: format!(
                    "the other copy holds no valid mirror of generation {}{other}: the regions \
                     in force cannot be proven, and an older directory would silently undo the \
                     last region change",
                    state.directory_generation
                ),
            });
        }
        (None, _) => {}
    }
    (plan, refused)
}
