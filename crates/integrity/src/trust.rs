//! What the redundancy of a region can be trusted for, decided at open from the header copies,
//! the header state and the `unverified` flag. One table, enumerated by the tests below and
//! written out in `docs/integrity.md` ("What a mismatch means").
//!
//! - **current**: closed cleanly, nothing in flight: a page, parity page, checksum block or
//!   line that does not match its checksum is damage.
//! - **unclean**: not closed cleanly (or the state in force may be older than the last one
//!   written, because a header copy is damaged): write tracking died with the process, so a
//!   mismatch may be a write the lost update pass never covered, or damage; nobody can tell.
//!   Read-only checks report such mismatches as *unverifiable*; a read-write open recovers by
//!   a resync (the data as it is becomes the truth) and names every page it took as data.
//! - **unverified**: closed cleanly, but the `unverified` flag is set. Earlier writers of
//!   version 1 set it when they found their shadow batch record damaged (an update pass might
//!   have left a batch half rewritten where nobody could locate it), so redundancy that
//!   matches may still be wrong. Mismatches are damage; the region as a whole is not verified
//!   until a repair proves every stripe (data, parity and all checksums agree, and the XOR of
//!   the data equals the parity). A read-write open never resyncs it and keeps the flag.
//!
//! The page where earlier writers kept the shadow batch record plays no part: a clean close
//! always left it empty, and after an unclean one the resync recomputes every page, which
//! covers any batch it could name (`docs/integrity.md`, "No battery").

use crate::layout::{flags, state};

/// How far the stored redundancy can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Basis {
    /// Every mismatch is damage.
    Current,
    /// A mismatch may be an uncovered write or damage: unverifiable.
    Unclean,
    /// Mismatches are damage, and matches prove nothing until every stripe is proven.
    Unverified,
}

/// The basis and why, for messages.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Trust {
    /// The basis.
    pub basis: Basis,
    /// Why, in words (empty when current).
    pub reason: String,
}

impl Default for Trust {
    fn default() -> Self {
        Trust::current()
    }
}

impl Trust {
    /// Fully trusted.
    pub fn current() -> Trust {
        Trust {
            basis: Basis::Current,
            reason: String::new(),
        }
    }
}

/// The decision table. `header_copy_damaged`: one header copy failed its check (the other is
/// in force). `header_state`: the `state` of the copy in force. `header_flags`: its `flags`.
pub fn decide(header_copy_damaged: bool, header_state: u32, header_flags: u32) -> Trust {
    let unclean = |reason: String| Trust {
        basis: Basis::Unclean,
        reason,
    };
    if header_state != state::CLEAN {
        let name = if header_state == state::OPEN {
            "open"
        } else {
            "stale"
        };
        return unclean(format!(
            "the region was not closed cleanly (header state {name}): pages written after the \
             last update pass have old checksums, and write tracking did not survive"
        ));
    }
    if header_copy_damaged {
        return unclean(
            "one header copy is damaged, so the copy in force (state clean) may be older than \
             the last one written, which may have recorded an open that never closed"
                .into(),
        );
    }
    if header_flags & flags::UNVERIFIED != 0 {
        return Trust {
            basis: Basis::Unverified,
            reason: "the region is marked unverified (an earlier open found its shadow batch \
                     record damaged, so an update pass may have left redundancy half rewritten), \
                     and no repair has proven every stripe since"
                .into(),
        };
    }
    Trust::current()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every combination of the three inputs, against the table in `docs/integrity.md`.
    #[test]
    fn every_case_of_the_table() {
        let states = [state::CLEAN, state::OPEN, state::STALE];
        let mut seen = 0;
        for copy_damaged in [false, true] {
            for st in states {
                for fl in [0, flags::UNVERIFIED, flags::LINES_VALID] {
                    let t = decide(copy_damaged, st, fl);
                    let want = if st != state::CLEAN || copy_damaged {
                        Basis::Unclean
                    } else if fl & flags::UNVERIFIED != 0 {
                        Basis::Unverified
                    } else {
                        Basis::Current
                    };
                    assert_eq!(t.basis, want, "{copy_damaged} {st} {fl:#x}");
                    assert_eq!(t.reason.is_empty(), want == Basis::Current);
                    seen += 1;
                }
            }
        }
        assert_eq!(seen, 2 * 3 * 3);
    }

    #[test]
    fn the_doc_table_matches_the_decision() {
        let doc = include_str!("../../../docs/integrity.md");
        let rows: Vec<&str> = doc
            .lines()
            .skip_while(|l| !l.contains("<!-- trust-table -->"))
            .skip(3)
            .take_while(|l| l.starts_with('|'))
            .collect();
        assert!(!rows.is_empty(), "docs/integrity.md lacks the trust table");
        let mut covered = std::collections::HashSet::new();
        for row in rows {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            // | header copies | state | unverified flag | basis | ...
            let damaged = match cells[1] {
                "both valid" => vec![false],
                "one damaged" => vec![true],
                "any" => vec![false, true],
                c => panic!("header copies `{c}`"),
            };
            let sts = match cells[2] {
                "clean" => vec![state::CLEAN],
                "open or stale" => vec![state::OPEN, state::STALE],
                "any" => vec![state::CLEAN, state::OPEN, state::STALE],
                c => panic!("state `{c}`"),
            };
            let fls = match cells[3] {
                "clear" => vec![0],
                "set" => vec![flags::UNVERIFIED],
                "any" => vec![0, flags::UNVERIFIED],
                c => panic!("flag `{c}`"),
            };
            let basis = match cells[4] {
                "current" => Basis::Current,
                "unclean" => Basis::Unclean,
                "unverified" => Basis::Unverified,
                c => panic!("basis `{c}`"),
            };
            for &d in &damaged {
                for &st in &sts {
                    for &fl in &fls {
                        assert_eq!(decide(d, st, fl).basis, basis, "row {row}");
                        covered.insert((d, st, fl));
                    }
                }
            }
        }
        // Every combination of the inputs is covered by some row (rows may overlap only where
        // they agree, which the assertion above checks).
        assert_eq!(covered.len(), 2 * 3 * 2, "the table leaves cases out");
    }
}
