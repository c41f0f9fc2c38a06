//! What callers choose and get back: the modes, the options of format and open, where a
//! region's pieces are, and what open found and did.

use crate::layout;
use crate::tracker::Tracker;
use crate::trust::Trust;
use pmem::Uuid;

/// Pages named one by one in an [`OpenReport`] (the counts keep counting).
pub const PAGES_LISTED_MAX: usize = 64;

/// How a region's redundancy is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// None.
    Off,
    /// Vilamb: a background pass every period.
    Lazy,
    /// TVARAK's controller in software: on every write through the API, from the diff.
    Eager,
    /// Baseline: each write recomputes its pages' checksums and its stripes' parity whole.
    TxbPage,
}

impl Mode {
    /// The header's code.
    pub fn code(self) -> u32 {
        match self {
            Mode::Off => layout::mode::OFF,
            Mode::Lazy => layout::mode::LAZY,
            Mode::Eager => layout::mode::EAGER,
            Mode::TxbPage => layout::mode::TXB_PAGE,
        }
    }
    /// The mode for a header code.
    pub fn from_code(code: u32) -> Option<Mode> {
        [Mode::Off, Mode::Lazy, Mode::Eager, Mode::TxbPage]
            .into_iter()
            .find(|m| m.code() == code)
    }
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Lazy => "lazy",
            Mode::Eager => "eager",
            Mode::TxbPage => "txb-page",
        }
    }
    /// Parse a name.
    pub fn parse(name: &str) -> Option<Mode> {
        [Mode::Off, Mode::Lazy, Mode::Eager, Mode::TxbPage]
            .into_iter()
            .find(|m| m.name() == name)
    }
}

/// How a new protected region is set up.
#[derive(Debug, Clone, Copy)]
pub struct CreateOptions {
    /// Mode recorded in the header (the default for later opens).
    pub mode: Mode,
    /// Data pages per stripe, 2..=32.
    pub stripe_pages: u32,
    /// Lazy mode's period, 100..=60000 ms.
    pub period_ms: u32,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            mode: Mode::Lazy,
            stripe_pages: layout::STRIPE_PAGES_DEFAULT,
            period_ms: layout::PERIOD_MS_DEFAULT,
        }
    }
}

/// How to open a protected region.
#[derive(Debug, Default)]
pub struct OpenOptions {
    /// Switch to this mode (recorded in the header); `None` keeps the recorded one.
    pub mode: Option<Mode>,
    /// Change lazy mode's period (recorded); `None` keeps it.
    pub period_ms: Option<u32>,
    /// Write tracking for lazy mode; `None` means explicit marking (writes through the API).
    pub tracker: Option<Box<dyn Tracker>>,
    /// Run lazy mode's update pass on a background thread every period.
    pub background: bool,
    /// Run the scrubber on a background thread at this many pages per second (0: off).
    pub scrub_pages_per_sec: u64,
    /// Open without changing anything (scrub only; no resync, no writes).
    pub read_only: bool,
}

/// Push `page` onto a list kept to [`PAGES_LISTED_MAX`] entries.
pub(crate) fn list_page(list: &mut Vec<u64>, page: u64) {
    if list.len() < PAGES_LISTED_MAX {
        list.push(page);
    }
}

/// What opening found and did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct OpenReport {
    /// The header said the region was closed cleanly with current redundancy.
    pub clean_at_open: bool,
    /// The recorded state: `clean`, `open` (a crash) or `stale` (mode off was used).
    pub previous_state: &'static str,
    /// Damage to one header copy (the other was used).
    pub header_damage: Vec<String>,
    /// The retired page of the integrity region (where earlier versions kept a shadow batch
    /// record) held bytes, and this read-write open wrote zeros there (see
    /// `docs/format/integrity.md`); its contents were not used for anything.
    pub retired_bytes_cleared: bool,
    /// Pages whose checksums were rebuilt by a full resync (0 if none was needed; a resync runs
    /// only in a read-write open of an unclean region).
    pub resync_pages: u64,
    /// Of those, pages whose stored checksum did not match (written after the last pass, or
    /// damaged at rest: a resync cannot tell which).
    pub resync_pages_changed: u64,
    /// Time the resync took.
    pub resync_ms: u64,
    /// The first [`PAGES_LISTED_MAX`] of those pages: each one's current contents were taken
    /// as the data.
    pub resync_pages_changed_list: Vec<u64>,
    /// How far the stored redundancy could be trusted when open read it, before doing
    /// anything (see [`crate::trust`]).
    pub trust: Trust,
    /// Pages whose line checksums were computed because they were not current (a switch to
    /// eager mode); only pages that pass their page checksum get them.
    pub lines_rebuilt_pages: u64,
    /// Pages that failed their page checksum, so their line checksums were not computed from
    /// them (every read of them goes through the page checksum and parity); first
    /// [`PAGES_LISTED_MAX`].
    pub lines_refused_pages: Vec<u64>,
}

/// Progress of a long operation: (done, total) in pages.
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// Where a protected region's pieces are on the medium.
#[derive(Debug, Clone)]
pub struct Placement {
    /// The data region's name (for messages).
    pub region: String,
    /// Pool offset of the data region.
    pub data_offset: u64,
    /// Length of the data region in bytes.
    pub data_bytes: u64,
    /// Pool offset of the integrity region.
    pub meta_offset: u64,
    /// Length of the integrity region in bytes.
    pub meta_bytes: u64,
    /// The pool's UUID.
    pub uuid: Uuid,
}
