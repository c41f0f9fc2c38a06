//! The designs the simulator compares: the paper's Baseline, TVARAK's ablation steps (naive,
//! plus DAX-CL-checksums, plus redundancy caching, plus diffs = TVARAK), the two software
//! baselines that update redundancy at transaction boundaries, and a Vilamb-like lazy design.

use std::fmt;
use std::str::FromStr;

use crate::error::SimError;

/// The default period of the Vilamb-like design, in application store events.
pub const VILAMB_DEFAULT_PERIOD: u64 = 10_000;

/// One of the compared designs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Design {
    /// No redundancy at all.
    Baseline,
    /// The naive controller: page checksum verified on every fill (64 data + 1 checksum line
    /// read), old data, system-checksum and parity read and rewritten on every writeback.
    Naive,
    /// Naive plus DAX-CL-checksums: a fill reads the line and its CL-checksum line.
    ClCsums,
    /// Plus redundancy caching: the per-bank controller cache and the LLC redundancy partition,
    /// redundancy written back lazily on eviction.
    ClCache,
    /// Plus data diffs in the LLC diff partition: full TVARAK.
    Tvarak,
    /// Software, Pangolin-like: at each transaction commit, CRC of every modified object and a
    /// parity recompute reading the peer ranges, on the application core. No read verification.
    TxbObject,
    /// Software, Mojim/HotPot-like with page checksums: at each transaction commit, re-read each
    /// modified page for its CRC and recompute parity. No read verification.
    TxbPage,
    /// Vilamb-like: every `period_writes` application stores, recompute the page checksums and
    /// parity of the pages dirtied since the last sweep. No read verification.
    Vilamb {
        /// Application store events between sweeps (at least 1).
        period_writes: u64,
    },
}

impl Design {
    /// Every design, in the order of the paper's figures (Vilamb with its default period).
    pub const ALL: [Design; 8] = [
        Design::Baseline,
        Design::Naive,
        Design::ClCsums,
        Design::ClCache,
        Design::Tvarak,
        Design::TxbObject,
        Design::TxbPage,
        Design::Vilamb {
            period_writes: VILAMB_DEFAULT_PERIOD,
        },
    ];

    /// True for the hardware designs (the controller beside the LLC does the work).
    pub fn is_hardware(self) -> bool {
        matches!(
            self,
            Design::Naive | Design::ClCsums | Design::ClCache | Design::Tvarak
        )
    }

    /// True when the controller verifies data lines on fill.
    pub fn verifies_reads(self) -> bool {
        self.is_hardware()
    }
}

impl fmt::Display for Design {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Design::Baseline => f.write_str("baseline"),
            Design::Naive => f.write_str("naive"),
            Design::ClCsums => f.write_str("cl"),
            Design::ClCache => f.write_str("cl-cache"),
            Design::Tvarak => f.write_str("tvarak"),
            Design::TxbObject => f.write_str("txb-object"),
            Design::TxbPage => f.write_str("txb-page"),
            Design::Vilamb { period_writes } => write!(f, "vilamb:{period_writes}"),
        }
    }
}

const EXPECTED: &str = "baseline|naive|cl|cl-cache|tvarak|txb-object|txb-page|vilamb[:N], N >= 1";

impl FromStr for Design {
    type Err = SimError;

    fn from_str(s: &str) -> Result<Design, SimError> {
        let lower = s.trim().to_ascii_lowercase();
        let d = match lower.as_str() {
            "baseline" => Design::Baseline,
            "naive" => Design::Naive,
            "cl" => Design::ClCsums,
            "cl-cache" => Design::ClCache,
            "tvarak" => Design::Tvarak,
            "txb-object" => Design::TxbObject,
            "txb-page" => Design::TxbPage,
            "vilamb" => Design::Vilamb {
                period_writes: VILAMB_DEFAULT_PERIOD,
            },
            other => match other.strip_prefix("vilamb:") {
                Some(n) => match n.parse::<u64>() {
                    Ok(period_writes) if period_writes >= 1 => Design::Vilamb { period_writes },
                    _ => return Err(SimError::invalid("design", EXPECTED, s)),
                },
                None => return Err(SimError::invalid("design", EXPECTED, s)),
            },
        };
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in Design::ALL {
            assert_eq!(d.to_string().parse::<Design>().unwrap(), d);
        }
        assert_eq!(
            "vilamb:7".parse::<Design>().unwrap(),
            Design::Vilamb { period_writes: 7 }
        );
    }

    #[test]
    fn bad_names_are_errors() {
        for bad in ["", "tvarak2", "vilamb:0", "vilamb:x", "vilamb:", "txb"] {
            assert!(bad.parse::<Design>().is_err(), "{bad}");
        }
    }
}
