//! Persistence domains: what `persist` has to do for a store to survive power loss.

use std::fmt;
use std::str::FromStr;

/// Where stores become durable, and so what `persist(range)` must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Domain {
    /// Real PM or a DAX file, or PM emulated in DRAM: write back each cache line, then fence.
    Adr,
    /// Caches are inside the persistence domain (eADR, flush on fail): fence only.
    Eadr,
    /// An ordinary file in the page cache: `msync` the touched pages.
    Msync,
    /// The persistence simulator (tests only).
    Sim,
}

impl Domain {
    /// Code stored in the pool header.
    pub const fn code(self) -> u32 {
        match self {
            Domain::Adr => 1,
            Domain::Eadr => 2,
            Domain::Msync => 3,
            Domain::Sim => 4,
        }
    }

    /// Inverse of [`Domain::code`].
    pub const fn from_code(code: u32) -> Option<Domain> {
        match code {
            1 => Some(Domain::Adr),
            2 => Some(Domain::Eadr),
            3 => Some(Domain::Msync),
            4 => Some(Domain::Sim),
            _ => None,
        }
    }

    /// The lowercase name used on the command line and in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Domain::Adr => "adr",
            Domain::Eadr => "eadr",
            Domain::Msync => "msync",
            Domain::Sim => "sim",
        }
    }
}

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Domain {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "adr" => Ok(Domain::Adr),
            "eadr" => Ok(Domain::Eadr),
            "msync" => Ok(Domain::Msync),
            "sim" => Ok(Domain::Sim),
            other => Err(format!(
                "unknown persistence domain `{other}` (adr, eadr, msync)"
            )),
        }
    }
}

/// What the platform told us about a backing file when it was mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backing {
    /// `MAP_SYNC` was accepted: a DAX file on real (or emulated) PM.
    Dax,
    /// A tmpfs file: DRAM standing in for PM. Durable across process crash, not across reboot.
    Tmpfs,
    /// A file in the page cache of a block device.
    PageCache,
    /// Memory owned by the persistence simulator.
    Simulated,
}

impl Backing {
    /// The domain this backing gets when nobody says otherwise.
    pub const fn detected_domain(self) -> Domain {
        match self {
            Backing::Dax | Backing::Tmpfs => Domain::Adr,
            Backing::PageCache => Domain::Msync,
            Backing::Simulated => Domain::Sim,
        }
    }

    /// Does data in this backing survive a reboot at all?
    pub const fn survives_reboot(self) -> bool {
        matches!(self, Backing::Dax | Backing::PageCache)
    }

    /// Short name for reports.
    pub const fn name(self) -> &'static str {
        match self {
            Backing::Dax => "dax",
            Backing::Tmpfs => "tmpfs",
            Backing::PageCache => "page-cache",
            Backing::Simulated => "simulated",
        }
    }
}

/// Choose the domain a pool runs in.
///
/// An explicit override wins. Otherwise the domain recorded at creation is used, except that a
/// pool whose file sits in a page cache (no DAX) always gets `msync`: flushing cache lines of a
/// page-cache mapping does not make anything durable, so trusting an `adr` or `eadr` record there
/// would lose data.
pub fn effective_domain(recorded: Domain, backing: Backing, override_: Option<Domain>) -> Domain {
    if let Some(d) = override_ {
        return d;
    }
    match backing {
        Backing::PageCache => Domain::Msync,
        Backing::Simulated => Domain::Sim,
        Backing::Dax | Backing::Tmpfs => match recorded {
            // A pool created as msync and moved to PM is still correct with cache-line flushes.
            Domain::Msync | Domain::Sim => Domain::Adr,
            d => d,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_codes_are_refused() {
        for d in [Domain::Adr, Domain::Eadr, Domain::Msync, Domain::Sim] {
            assert_eq!(Domain::from_code(d.code()), Some(d));
            assert_eq!(d.name().parse::<Domain>(), Ok(d));
        }
        assert_eq!(Domain::from_code(0), None);
        assert_eq!(Domain::from_code(5), None);
        assert!("pmem".parse::<Domain>().is_err());
    }

    #[test]
    fn effective_domain_table() {
        use Backing::*;
        use Domain::*;
        // (recorded, backing, override, expected)
        let table = [
            (Adr, Dax, None, Adr),
            (Eadr, Dax, None, Eadr),
            (Msync, Dax, None, Adr),
            (Adr, Tmpfs, None, Adr),
            (Eadr, Tmpfs, None, Eadr),
            (Adr, PageCache, None, Msync),
            (Eadr, PageCache, None, Msync),
            (Msync, PageCache, None, Msync),
            (Adr, PageCache, Some(Eadr), Eadr),
            (Msync, Tmpfs, Some(Msync), Msync),
            (Adr, Simulated, None, Sim),
        ];
        for (recorded, backing, ov, want) in table {
            assert_eq!(
                effective_domain(recorded, backing, ov),
                want,
                "{recorded} {backing:?} {ov:?}"
            );
        }
    }
}
