//! Pools: create, open, close; the header slots; the region directory.

use crate::cpu;
use crate::directory::{Alignment, Directory, Region, RegionKind, kinds, validate_name};
use crate::domain::{Backing, Domain, effective_domain};
use crate::error::{Corruption, PmemError, Result};
use crate::header::{MutableState, PoolHeader, SlotContent, Uuid, current_state, slot_offset};
use crate::layout::{self, METADATA_BYTES, PAGE_SIZE};
use crate::mapping::Mapping;
use crate::medium::Medium;
use std::path::{Path, PathBuf};

/// How to create a pool.
#[derive(Debug, Clone)]
pub struct CreateOptions {
    /// Size of the backing file in bytes: a multiple of 4096, at least 64 KiB.
    pub size: u64,
    /// Domain to record; `None` records the one detected from the mapping.
    pub domain: Option<Domain>,
}

/// How to open a pool.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// Open without writing anything (shared lock; `pool info` and `pool check` do this).
    pub read_only: bool,
    /// Run in this domain instead of the recorded one (see [`effective_domain`]).
    pub domain: Option<Domain>,
}

/// What the metadata pages hold, decoded as far as they allow. `pool check` reports from it and
/// `Pool::open` resolves it.
#[derive(Debug, Clone)]
pub struct Survey {
    /// Each header copy, decoded.
    pub headers: [Result<PoolHeader, Corruption>; 2],
    /// Each mutable slot (decoded under the chosen header's UUID; `Empty` if there is none).
    pub slots: [SlotContent; 2],
    /// The directory copy named by the current state (copy `generation % 2`), decoded, once a
    /// header and a state were found.
    pub directory: Option<Result<Directory, Corruption>>,
    /// The other directory copy, decoded as a mirror of the same generation: `Ok` only if it
    /// holds exactly the generation in force (see "Directory update" in `docs/format/pool.md`).
    pub mirror: Option<Result<Directory, Corruption>>,
}

/// Size of a pool with `header` in `state`: see [`Survey::pool_size`].
pub fn pool_size_of(header: &PoolHeader, state: &MutableState) -> u64 {
    if header.growable() && state.pool_size != 0 {
        state.pool_size
    } else {
        header.pool_size
    }
}

/// Address space a growable pool's mapping reserves, so the file grows in place: 1 TiB (or the
/// file's length, if larger). A pool cannot grow past it while open.
pub const GROW_RESERVE_BYTES: u64 = 1 << 40;

/// Validate a requested pool size.
pub fn validate_size(size: u64) -> Result<()> {
    let reason = if size < layout::POOL_SIZE_MIN {
        format!(
            "{size} bytes is too small; a pool needs at least {} bytes (64 KiB)",
            layout::POOL_SIZE_MIN
        )
    } else if size > layout::POOL_SIZE_MAX {
        format!(
            "{size} bytes is more than the {} bytes (64 TiB) one file may hold",
            layout::POOL_SIZE_MAX
        )
    } else if size % PAGE_SIZE as u64 != 0 {
        format!("{size} bytes is not a multiple of the {PAGE_SIZE}-byte page size")
    } else {
        return Ok(());
    };
    Err(PmemError::Invalid {
        what: "pool size",
        reason,
    })
}

impl Survey {
    /// Decode the metadata area (`METADATA_BYTES` long).
    pub fn of(meta: &[u8]) -> Survey {
        assert_eq!(meta.len(), METADATA_BYTES);
        let page = |o: usize| &meta[o..o + PAGE_SIZE];
        let mut headers =
            [0, 1].map(|c| PoolHeader::decode(page(layout::HEADER_COPY_OFFSETS[c]), c));
        // A crash while `make_growable` rewrote the two copies leaves one with the growable bit
        // and one without, otherwise equal: the copy without is the one not yet rewritten.
        if let [Ok(a), Ok(b)] = &headers
            && a != b
        {
            let bit = layout::FEATURES_INCOMPAT_GROWABLE;
            let lagging = |old: &PoolHeader, new: &PoolHeader| {
                old.features_incompat & bit == 0
                    && *new
                        == PoolHeader {
                            features_incompat: old.features_incompat | bit,
                            ..old.clone()
                        }
            };
            let stale = if lagging(a, b) {
                Some(0)
            } else if lagging(b, a) {
                Some(1)
            } else {
                None
            };
            if let Some(c) = stale {
                let found = headers[c].as_ref().map_or(0, |h| h.features_incompat);
                headers[c] = Err(Corruption {
                    structure: format!("pool header copy {c}"),
                    offset: (layout::HEADER_COPY_OFFSETS[c]
                        + layout::header::FEATURES_INCOMPAT.offset)
                        as u64,
                    field: layout::header::FEATURES_INCOMPAT.name,
                    expected: format!(
                        "{:#x}, as in the other copy (a switch to a growable pool was cut short)",
                        found | bit
                    ),
                    found: format!("{found:#x}"),
                });
            }
        }
        let mut survey = Survey {
            headers,
            slots: [SlotContent::Empty, SlotContent::Empty],
            directory: None,
            mirror: None,
        };
        let Ok(header) = survey.header() else {
            return survey;
        };
        survey.slots =
            [0, 1].map(|i| MutableState::decode(&meta[slot_offset(i)..], i, &header.pool_uuid));
        if let Some(state) = current_state(&survey.slots) {
            let copy = (state.directory_generation % 2) as usize;
            let decode = |c: usize| {
                Directory::decode(
                    page(layout::DIRECTORY_COPY_OFFSETS[c]),
                    c,
                    &header.pool_uuid,
                    state.directory_generation,
                    pool_size_of(&header, &state),
                )
            };
            survey.directory = Some(decode(copy));
            survey.mirror = Some(decode(1 - copy));
        }
        survey
    }

    /// The directory to use: the copy in force if it is valid, else its mirror if that holds the
    /// same generation and is valid, else the copy in force's failure. `None` if no state was
    /// found.
    pub fn current_directory(&self) -> Option<Result<Directory, Corruption>> {
        match (&self.directory, &self.mirror) {
            (Some(Err(_)), Some(Ok(m))) => Some(Ok(m.clone())),
            (d, _) => d.clone(),
        }
    }

    /// The pool's size in force: the header's, or for a growable pool the current state's (when
    /// set). `None` without a header and a state.
    pub fn pool_size(&self) -> Option<u64> {
        let header = self.header().ok()?;
        let state = current_state(&self.slots)?;
        Some(pool_size_of(&header, &state))
    }

    /// Does a file of `len` bytes hold the pool: exactly its size, or for a growable pool at
    /// least its size (a crash between growing the file and recording the size leaves it
    /// longer). `None` without a header and a state.
    pub fn fits_file(&self, len: u64) -> Option<bool> {
        let header = self.header().ok()?;
        let size = self.pool_size()?;
        Some(if header.growable() {
            size <= len
        } else {
            size == len
        })
    }

    /// Does the area start like a Kavach pool (either copy has the magic)?
    pub fn looks_like_pool(&self) -> bool {
        self.headers
            .iter()
            .any(|h| !matches!(h, Err(c) if c.field == "magic"))
    }

    /// The header to trust: a valid copy; if both are valid they must agree.
    pub fn header(&self) -> Result<PoolHeader> {
        match &self.headers {
            [Ok(a), Ok(b)] if a != b => Err(PmemError::corrupt(
                "pool header",
                0,
                "copies",
                "two identical copies",
                "two valid copies that disagree",
            )),
            [Ok(a), _] | [_, Ok(a)] => Ok(a.clone()),
            [Err(a), Err(_)] => Err(PmemError::Corrupt(a.clone())),
        }
    }

    /// The current mutable state: the valid slot with the highest sequence.
    pub fn state(&self) -> Result<MutableState> {
        current_state(&self.slots).ok_or_else(|| {
            let found = match &self.slots {
                [SlotContent::Damaged(c), _] | [_, SlotContent::Damaged(c)] => {
                    format!("damaged ({c})")
                }
                _ => "empty".into(),
            };
            PmemError::corrupt(
                "mutable header slots",
                slot_offset(0) as u64,
                "both slots",
                "one valid slot",
                found,
            )
        })
    }

    /// Damage that does not stop the pool from opening: one bad header copy, one bad slot.
    pub fn damage(&self) -> Vec<Corruption> {
        let mut out = Vec::new();
        if self.header().is_ok() {
            out.extend(
                self.headers
                    .iter()
                    .filter_map(|h| h.as_ref().err().cloned()),
            );
        }
        if self.state().is_ok() {
            out.extend(self.slots.iter().filter_map(|s| match s {
                SlotContent::Damaged(c) => Some(c.clone()),
                _ => None,
            }));
        }
        if let (Some(Err(c)), Some(Ok(_))) = (&self.directory, &self.mirror) {
            out.push(c.clone());
        }
        out
    }
}

/// A summary of a pool for `kavach pool info`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PoolInfo {
    /// Backing file (or medium description).
    pub path: PathBuf,
    /// Pool UUID.
    pub uuid: Uuid,
    /// Set UUID (the same as the pool UUID for a single-file pool).
    pub set_uuid: Uuid,
    /// Member index and count in the set.
    pub member: (u32, u32),
    /// Format version.
    pub format_version: u32,
    /// Size in bytes.
    pub size: u64,
    /// The pool grows (`FEATURES_INCOMPAT_GROWABLE`).
    pub growable: bool,
    /// Page size.
    pub page_size: u32,
    /// Creation time, nanoseconds since the Unix epoch.
    pub created_ns: u64,
    /// Domain recorded at creation.
    pub recorded_domain: Domain,
    /// Domain the mapping detected.
    pub detected_domain: Domain,
    /// Domain in force.
    pub domain: Domain,
    /// What holds the bytes.
    pub backing: Backing,
    /// Can the data survive a reboot at all (false on tmpfs)?
    pub survives_reboot: bool,
    /// The cache-line write-back instruction in use.
    pub flush_instruction: cpu::FlushInstruction,
    /// Was the pool closed cleanly last time?
    pub clean_shutdown: bool,
    /// Sequence number of the current header slot.
    pub state_sequence: u64,
    /// Generation of the region directory.
    pub directory_generation: u64,
    /// The regions.
    pub regions: Vec<RegionInfo>,
    /// Bytes of region space not in any region.
    pub free_bytes: u64,
    /// Damage found and survived at open.
    pub damage: Vec<String>,
}

/// One region in [`PoolInfo`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct RegionInfo {
    /// The region.
    #[serde(flatten)]
    pub region: Region,
    /// The kind's name.
    pub kind_name: &'static str,
}

/// An open pool on a medium.
#[derive(Debug)]
pub struct Pool<M: Medium> {
    medium: M,
    header: PoolHeader,
    /// Bytes of the pool in force (see [`Survey::pool_size`]).
    size: u64,
    state: MutableState,
    clean_at_open: bool,
    directory: Directory,
    read_only: bool,
    damage: Vec<Corruption>,
    /// What the open overwrote, in write order: (offset, the bytes found there). Put back by
    /// [`Pool::close_unchanged`].
    found: Vec<(usize, Vec<u8>)>,
    /// This handle changed the directory (or tried to).
    changed: bool,
}

impl Pool<Mapping> {
    /// Create a pool file at `path` (which must not exist) and open it read-write.
    pub fn create(path: &Path, opts: &CreateOptions) -> Result<Self> {
        Self::create_with(path, opts, 0)
    }

    fn create_with(path: &Path, opts: &CreateOptions, features_incompat: u64) -> Result<Self> {
        validate_size(opts.size)?;
        let mut mapping = Mapping::create(path, opts.size)?;
        if features_incompat & layout::FEATURES_INCOMPAT_GROWABLE != 0
            && let Err(e) = reserve_for_growth(&mut mapping)
        {
            drop(mapping);
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
        let backing = mapping.backing();
        let domain = opts.domain.unwrap_or(backing.detected_domain());
        if let Err(reason) = domain_runs_on(domain, backing) {
            drop(mapping);
            let _ = std::fs::remove_file(path);
            return Err(PmemError::Invalid {
                what: "domain",
                reason,
            });
        }
        mapping.set_domain(effective_domain(domain, backing, None));
        let made = Self::format_with(mapping, domain, features_incompat).and_then(|m| {
            Self::open_medium(
                m,
                &OpenOptions {
                    read_only: false,
                    domain: opts.domain,
                },
            )
        });
        if made.is_err() {
            let _ = std::fs::remove_file(path);
        }
        made
    }

    /// Create a growable pool file at `path` (which must not exist), `opts.size` bytes to
    /// start with, and open it read-write. It grows as regions need room ([`Pool::grow`]).
    pub fn create_growable(path: &Path, opts: &CreateOptions) -> Result<Self> {
        Self::create_with(path, opts, layout::FEATURES_INCOMPAT_GROWABLE)
    }

    /// Open the pool file at `path`.
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<Self> {
        let mapping = Mapping::open(path, !opts.read_only)?;
        // The domain comes from the header just decoded, before anything is persisted.
        Self::open_inner(mapping, opts, |m, header| {
            let domain = effective_domain(header.domain, m.backing(), opts.domain);
            m.set_domain(domain);
            if header.growable() && !opts.read_only {
                reserve_for_growth(m)?;
            }
            Ok(())
        })
    }

    /// Make this pool growable (see `make_growable`), reserving the address space it will grow
    /// into.
    pub fn make_growable_file(&mut self) -> Result<()> {
        if !self.growable() {
            reserve_for_growth(&mut self.medium)?;
        }
        self.make_growable()
    }
}

/// `Ok` if every open of a pool recording `domain` on `backing` runs in `domain`; else why not.
/// Recording a domain that no open would run in would print one domain and run another.
pub fn domain_runs_on(domain: Domain, backing: Backing) -> std::result::Result<(), String> {
    let runs = effective_domain(domain, backing, None);
    if runs == domain {
        return Ok(());
    }
    Err(match backing {
        Backing::PageCache => format!(
            "`{domain}` cannot be kept by a file in the page cache (no DAX): writing back cache \
             lines does not make such a file durable, so every open runs `{runs}`; record `{runs}` \
             (or auto), or put the pool on a DAX file system or /dev/shm"
        ),
        Backing::Simulated => format!("`{domain}` does not run on the simulator: only `sim` does"),
        Backing::Dax | Backing::Tmpfs if domain == Domain::Sim => {
            "`sim` is for the simulator, not for files".into()
        }
        Backing::Dax | Backing::Tmpfs => format!(
            "`{domain}` is for files in the page cache; every open of a file on {} runs `{runs}` \
             (cache-line write-back); record `{runs}`, `eadr` or auto",
            backing.name()
        ),
    })
}

fn reserve_for_growth(m: &mut Mapping) -> Result<()> {
    let want = GROW_RESERVE_BYTES.min(layout::POOL_SIZE_MAX) as usize;
    m.reserve(want.max(m.len()))
}

fn survey_medium<M: Medium + ?Sized>(medium: &M) -> Survey {
    let mut meta = vec![0u8; METADATA_BYTES];
    medium.read(0, &mut meta);
    Survey::of(&meta)
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl<M: Medium> Pool<M> {
    /// Write a fresh pool onto `medium` (whatever it held is forgotten) and return the medium.
    ///
    /// Crash-safe: everything but the two magic numbers is persisted first, so a crash before
    /// the end leaves something that is not a pool rather than a damaged one.
    pub fn format(medium: M, domain: Domain) -> Result<M> {
        Self::format_with(medium, domain, 0)
    }

    /// [`Pool::format`] for a growable pool (it starts at the medium's length).
    pub fn format_growable(medium: M, domain: Domain) -> Result<M> {
        Self::format_with(medium, domain, layout::FEATURES_INCOMPAT_GROWABLE)
    }

    fn format_with(medium: M, domain: Domain, features_incompat: u64) -> Result<M> {
        validate_size(medium.len() as u64)?;
        let uuid = Uuid::random().map_err(|e| PmemError::io("cannot read", "/dev/urandom", e))?;
        let header = PoolHeader {
            features_compat: 0,
            features_ro_compat: 0,
            features_incompat,
            pool_uuid: uuid,
            set_uuid: uuid,
            member_index: 0,
            member_count: 1,
            domain,
            pool_size: medium.len() as u64,
            created_ns: now_ns(),
        };
        let directory = Directory {
            generation: 1,
            regions: Vec::new(),
        };
        let state = MutableState {
            sequence: 1,
            clean_shutdown: true,
            directory_generation: 1,
            pool_size: 0,
        };
        let mut meta = vec![0u8; METADATA_BYTES];
        for copy in 0..2 {
            let at = layout::HEADER_COPY_OFFSETS[copy];
            meta[at..at + layout::HEADER_BYTES].copy_from_slice(&header.encode(copy));
            meta[at..at + layout::HEADER_MAGIC.len()].fill(0);
        }
        let slot = slot_offset(state.slot_index());
        meta[slot..slot + layout::SLOT_BYTES].copy_from_slice(&state.encode(&uuid));
        // Both directory copies: the one in force and its mirror.
        for dir in layout::DIRECTORY_COPY_OFFSETS {
            meta[dir..dir + PAGE_SIZE].copy_from_slice(&directory.encode(&uuid));
        }
        medium.write(0, &meta);
        medium.persist(0, METADATA_BYTES)?;
        for at in layout::HEADER_COPY_OFFSETS {
            medium.write(at, &layout::HEADER_MAGIC);
            medium.flush(at, layout::HEADER_MAGIC.len())?;
        }
        medium.fence()?;
        Ok(medium)
    }

    /// Open the pool on `medium`: validate the metadata, repair a damaged header copy, and
    /// (unless read-only) record that the pool is in use.
    pub fn open_medium(medium: M, opts: &OpenOptions) -> Result<Self> {
        Self::open_inner(medium, opts, |_, _| Ok(()))
    }

    /// `open_medium`, with `configure` run on the medium once the header is validated and
    /// before the first write (the file path uses it to set the persistence domain).
    fn open_inner(
        mut medium: M,
        opts: &OpenOptions,
        configure: impl FnOnce(&mut M, &PoolHeader) -> Result<()>,
    ) -> Result<Self> {
        let label = medium.label();
        let len = medium.len() as u64;
        if len < METADATA_BYTES as u64 {
            let mut head = vec![0u8; medium.len().min(layout::HEADER_MAGIC.len())];
            medium.read(0, &mut head);
            return Err(if head == layout::HEADER_MAGIC {
                PmemError::SizeMismatch {
                    path: label,
                    expected: METADATA_BYTES as u64,
                    found: len,
                }
            } else {
                PmemError::NotAPool {
                    path: label,
                    reason: format!("only {len} bytes, no pool header"),
                }
            });
        }
        let survey = survey_medium(&medium);
        if !survey.looks_like_pool() {
            return Err(PmemError::NotAPool {
                path: label,
                reason: "no Kavach pool header magic".into(),
            });
        }
        let header = survey.header()?;
        header.check_features(opts.read_only)?;
        let state = survey.state()?;
        let size = pool_size_of(&header, &state);
        if survey.fits_file(len) != Some(true) {
            return Err(PmemError::SizeMismatch {
                path: label,
                expected: size,
                found: len,
            });
        }
        configure(&mut medium, &header)?;
        let directory = match survey.current_directory() {
            Some(d) => d.map_err(PmemError::Corrupt)?,
            None => unreachable!("a state was found, so the directory was decoded"),
        };
        let damage = survey.damage();
        let mut pool = Pool {
            medium,
            header,
            size,
            clean_at_open: state.clean_shutdown,
            state,
            directory,
            read_only: opts.read_only,
            damage,
            found: Vec::new(),
            changed: false,
        };
        if !pool.read_only {
            pool.repair_copies(&survey)?;
            let next = slot_offset(((pool.state.sequence + 1) % 2) as usize);
            pool.remember(next, layout::SLOT_BYTES);
            pool.write_state(MutableState {
                clean_shutdown: false,
                ..pool.state
            })?;
        }
        Ok(pool)
    }

    /// Keep the `len` bytes at `offset` as found, before the open overwrites them.
    fn remember(&mut self, offset: usize, len: usize) {
        let mut bytes = vec![0u8; len];
        self.medium.read(offset, &mut bytes);
        self.found.push((offset, bytes));
    }

    /// Rewrite a damaged header copy from the good one, and a damaged directory copy in force
    /// from its mirror, before anything else is written (so a directory update never overwrites
    /// the only good directory copy).
    fn repair_copies(&mut self, survey: &Survey) -> Result<()> {
        for copy in 0..2 {
            if survey.headers[copy].is_err() {
                let at = layout::HEADER_COPY_OFFSETS[copy];
                self.remember(at, layout::HEADER_BYTES);
                self.medium.write(at, &self.header.encode(copy));
                self.medium.persist(at, layout::HEADER_BYTES)?;
            }
        }
        if let Some(Err(_)) = survey.directory {
            let at = layout::DIRECTORY_COPY_OFFSETS[self.directory.copy_index()];
            self.remember(at, PAGE_SIZE);
            self.medium
                .write(at, &self.directory.encode(&self.header.pool_uuid));
            self.medium.persist(at, PAGE_SIZE)?;
        }
        Ok(())
    }

    /// Write `state` with the next sequence number into its slot and persist it.
    fn write_state(&mut self, state: MutableState) -> Result<()> {
        let next = MutableState {
            sequence: self.state.sequence + 1,
            ..state
        };
        let at = slot_offset(next.slot_index());
        self.medium.write(at, &next.encode(&self.header.pool_uuid));
        self.medium.persist(at, layout::SLOT_BYTES)?;
        self.state = next;
        Ok(())
    }

    /// Close cleanly: record the clean shutdown and hand the medium back.
    pub fn close(mut self) -> Result<M> {
        if !self.read_only {
            self.write_state(MutableState {
                clean_shutdown: true,
                ..self.state
            })?;
        }
        Ok(self.medium)
    }

    /// Close a read-write handle that changed nothing, after a command that failed: put back,
    /// byte for byte, everything the open wrote (the in-use state, and any header or directory
    /// copy it rewrote), so the pool is exactly as this handle found it, clean-shutdown flag
    /// included.
    ///
    /// The caller promises that nothing was written through [`Pool::medium`] since the open.
    /// If this handle changed the directory, that change stays and this is [`Pool::close`].
    ///
    /// Crash-safe: the bytes go back in the reverse order of the open's writes, each persisted
    /// before the next, so every intermediate state is one the open itself passed through (the
    /// in-use state goes first; after it, the state found at open is in force again).
    pub fn close_unchanged(mut self) -> Result<M> {
        if self.changed {
            return self.close();
        }
        for (at, bytes) in std::mem::take(&mut self.found).into_iter().rev() {
            self.medium.write(at, &bytes);
            self.medium.persist(at, bytes.len())?;
        }
        Ok(self.medium)
    }

    /// The same open pool over a wrapped medium (for example `Arc::new`), so layers can hold
    /// handles to the medium while the pool stays open.
    pub fn map_medium<N: Medium>(self, wrap: impl FnOnce(M) -> N) -> Pool<N> {
        Pool {
            medium: wrap(self.medium),
            header: self.header,
            size: self.size,
            state: self.state,
            clean_at_open: self.clean_at_open,
            directory: self.directory,
            read_only: self.read_only,
            damage: self.damage,
            found: self.found,
            changed: self.changed,
        }
    }

    /// The medium, for the layers that own regions in it.
    pub fn medium(&self) -> &M {
        &self.medium
    }

    /// The immutable header.
    pub fn header(&self) -> &PoolHeader {
        &self.header
    }

    /// The pool's UUID.
    pub fn uuid(&self) -> Uuid {
        self.header.pool_uuid
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Does the pool grow ([`Pool::grow`], and regions created past its end)?
    pub fn growable(&self) -> bool {
        self.header.growable()
    }

    /// Was the pool closed cleanly before this open? False means a crash (or a kill) ended the
    /// last use, and the layers above should run their recovery.
    pub fn was_clean_shutdown(&self) -> bool {
        self.clean_at_open
    }

    /// Damage found at open and survived (repaired, or outvoted by a good copy).
    pub fn damage(&self) -> &[Corruption] {
        &self.damage
    }

    /// Opened read-only?
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// All regions, in directory order.
    pub fn regions(&self) -> &[Region] {
        &self.directory.regions
    }

    /// The region called `name`.
    pub fn region(&self, name: &str) -> Option<&Region> {
        self.directory.regions.iter().find(|r| r.name == name)
    }

    /// Create a region of at least `length` bytes (rounded up to whole pages). Crash-atomic.
    pub fn create_region(
        &mut self,
        name: &str,
        kind: RegionKind,
        length: u64,
        align: Alignment,
    ) -> Result<Region> {
        if self.read_only {
            return Err(PmemError::ReadOnly);
        }
        validate_name(name).map_err(|reason| PmemError::Invalid {
            what: "region name",
            reason,
        })?;
        if kind == 0 {
            return Err(PmemError::Invalid {
                what: "region kind",
                reason: "kind 0 is reserved".into(),
            });
        }
        if self.region(name).is_some() {
            return Err(PmemError::RegionExists(name.into()));
        }
        if self.directory.regions.len() >= layout::DIRECTORY_ENTRIES_MAX {
            return Err(PmemError::NoSpace(format!(
                "the region directory is full ({} regions)",
                layout::DIRECTORY_ENTRIES_MAX
            )));
        }
        let length = length
            .checked_next_multiple_of(PAGE_SIZE as u64)
            .filter(|&l| l > 0)
            .ok_or_else(|| PmemError::Invalid {
                what: "region length",
                reason: format!("{length} bytes"),
            })?;
        let offset = self.place(&self.directory.regions.clone(), length, align)?;
        let region = Region {
            name: name.into(),
            kind,
            align,
            offset,
            length,
        };
        self.medium.back(offset as usize, length as usize)?;
        let mut regions = self.directory.regions.clone();
        regions.push(region.clone());
        self.update_directory(regions)?;
        Ok(region)
    }

    /// Where a region of `length` bytes (whole pages) goes among `others`: first fit; in a
    /// growable pool with no such gap, past the last region, the pool grown to end there.
    fn place(&mut self, others: &[Region], length: u64, align: Alignment) -> Result<u64> {
        let without = Directory {
            generation: self.directory.generation,
            regions: others.to_vec(),
        };
        if let Some(at) = without.find_space(length, align, self.size()) {
            return Ok(at);
        }
        let no_room = |pool: &Self| {
            PmemError::NoSpace(format!(
                "no free range of {length} bytes aligned to {} in the pool ({} bytes free in all)",
                align.bytes(),
                pool.free_bytes()
            ))
        };
        if !self.growable() {
            return Err(no_room(self));
        }
        let end = others
            .iter()
            .map(Region::end)
            .max()
            .unwrap_or(0)
            .max(METADATA_BYTES as u64);
        let wanted = end
            .checked_next_multiple_of(align.bytes())
            .and_then(|at| at.checked_add(length))
            .filter(|&e| e <= layout::POOL_SIZE_MAX)
            .ok_or_else(|| no_room(self))?;
        if wanted > self.size() {
            self.grow(wanted)?;
        }
        without
            .find_space(length, align, self.size())
            .ok_or_else(|| no_room(self))
    }

    /// Grow a growable pool to `size` bytes (a multiple of 4096; no-op if it is that large).
    /// Crash-atomic: the file grows first (durably, zero-filled), then a new state records
    /// the size; a crash between leaves a longer file and the old size in force.
    pub fn grow(&mut self, size: u64) -> Result<()> {
        if self.read_only {
            return Err(PmemError::ReadOnly);
        }
        if !self.growable() {
            return Err(PmemError::Invalid {
                what: "pool size",
                reason: "this pool was made with a fixed size".into(),
            });
        }
        if size <= self.size {
            return Ok(());
        }
        validate_size(size)?;
        let len = usize::try_from(size).map_err(|_| PmemError::Invalid {
            what: "pool size",
            reason: format!("{size} bytes does not fit in memory"),
        })?;
        self.changed = true;
        self.medium.grow(len)?;
        self.write_state(MutableState {
            pool_size: size,
            ..self.state
        })?;
        self.size = size;
        Ok(())
    }

    /// Turn a fixed-size pool into a growable one (no-op if it is): set the growable feature
    /// bit in header copy 0, persist, then in copy 1, persist. A crash between leaves copies
    /// that differ only in that bit; open takes the copy with it and rewrites the other (see
    /// "Growing" in `docs/format/pool.md`). Builds that do not know the bit refuse the pool.
    /// A [`Mapping`] must reserve address space too: use `make_growable_file` for files.
    pub fn make_growable(&mut self) -> Result<()> {
        if self.read_only {
            return Err(PmemError::ReadOnly);
        }
        if self.growable() {
            return Ok(());
        }
        self.changed = true;
        let header = PoolHeader {
            features_incompat: self.header.features_incompat | layout::FEATURES_INCOMPAT_GROWABLE,
            ..self.header.clone()
        };
        for copy in 0..2 {
            let at = layout::HEADER_COPY_OFFSETS[copy];
            self.medium.write(at, &header.encode(copy));
            self.medium.persist(at, layout::HEADER_BYTES)?;
        }
        self.header = header;
        Ok(())
    }

    /// Give the region called `name` a new place of at least `length` bytes (whole pages), in
    /// one crash-atomic directory update: the entry keeps its name, kind, alignment and
    /// position in the directory, and gets a new offset and length (first fit among the other
    /// regions, so possibly overlapping its old place; a growable pool grows for it). The
    /// bytes are NOT copied: this is for regions whose contents the owner rewrites whole (a
    /// shadow slot that holds no image in force).
    pub fn replace_region(&mut self, name: &str, length: u64) -> Result<Region> {
        if self.read_only {
            return Err(PmemError::ReadOnly);
        }
        let idx = self
            .directory
            .regions
            .iter()
            .position(|r| r.name == name)
            .ok_or_else(|| PmemError::NoSuchRegion(name.into()))?;
        let length = length
            .checked_next_multiple_of(PAGE_SIZE as u64)
            .filter(|&l| l > 0)
            .ok_or_else(|| PmemError::Invalid {
                what: "region length",
                reason: format!("{length} bytes"),
            })?;
        let mut others = self.directory.regions.clone();
        let old = others.remove(idx);
        let offset = self.place(&others, length, old.align)?;
        let region = Region {
            offset,
            length,
            ..old.clone()
        };
        // Blocks for the new place first (it may be a range an earlier move gave back).
        self.medium.back(offset as usize, length as usize)?;
        let mut regions = self.directory.regions.clone();
        regions[idx] = region.clone();
        self.update_directory(regions)?;
        // The old place is free now, but for what the new place covers: give its storage
        // back, so the file costs blocks in proportion to its regions.
        let (new_start, new_end) = (region.offset, region.end());
        for (from, to) in [
            (old.offset, old.end().min(new_start)),
            (old.offset.max(new_end), old.end()),
        ] {
            if from < to {
                self.medium.discard(from as usize, (to - from) as usize)?;
            }
        }
        Ok(region)
    }

    /// Make the region called `name` `length` bytes long (whole pages, at least its length) in
    /// place: same offset, its bytes kept, in one crash-atomic directory update. The range it
    /// grows into must be free (no region there); a growable pool grows for it. Refused with
    /// `NoSpace` when another region follows too closely.
    pub fn extend_region(&mut self, name: &str, length: u64) -> Result<Region> {
        if self.read_only {
            return Err(PmemError::ReadOnly);
        }
        let idx = self
            .directory
            .regions
            .iter()
            .position(|r| r.name == name)
            .ok_or_else(|| PmemError::NoSuchRegion(name.into()))?;
        let old = self.directory.regions[idx].clone();
        let length = length
            .checked_next_multiple_of(PAGE_SIZE as u64)
            .filter(|&l| l >= old.length)
            .ok_or_else(|| PmemError::Invalid {
                what: "region length",
                reason: format!("{length} bytes (the region has {})", old.length),
            })?;
        let end = old
            .offset
            .checked_add(length)
            .filter(|&e| e <= layout::POOL_SIZE_MAX)
            .ok_or_else(|| PmemError::NoSpace(format!("{length} bytes at {:#x}", old.offset)))?;
        if let Some(next) = self
            .directory
            .regions
            .iter()
            .find(|r| r.name != name && r.offset < end && r.end() > old.offset)
        {
            return Err(PmemError::NoSpace(format!(
                "region `{name}` cannot grow to {length} bytes in place: `{}` is at {:#x}",
                next.name, next.offset
            )));
        }
        if end > self.size() {
            if !self.growable() {
                return Err(PmemError::NoSpace(format!(
                    "region `{name}` cannot grow to {length} bytes: the pool ends at {:#x}",
                    self.size()
                )));
            }
            self.grow(end)?;
        }
        self.medium
            .back(old.end() as usize, (length - old.length) as usize)?;
        let region = Region {
            length,
            ..old.clone()
        };
        let mut regions = self.directory.regions.clone();
        regions[idx] = region.clone();
        self.update_directory(regions)?;
        Ok(region)
    }

    /// Remove the region called `name`. Crash-atomic. Its bytes are left as they are.
    pub fn remove_region(&mut self, name: &str) -> Result<Region> {
        if self.read_only {
            return Err(PmemError::ReadOnly);
        }
        let idx = self
            .directory
            .regions
            .iter()
            .position(|r| r.name == name)
            .ok_or_else(|| PmemError::NoSuchRegion(name.into()))?;
        let mut regions = self.directory.regions.clone();
        let removed = regions.remove(idx);
        self.update_directory(regions)?;
        Ok(removed)
    }

    /// Write the new directory into the other copy, persist it, switch the header slot, then
    /// mirror the new directory into the copy that was in force.
    fn update_directory(&mut self, regions: Vec<Region>) -> Result<()> {
        self.changed = true;
        let next = Directory {
            generation: self.directory.generation + 1,
            regions,
        };
        let page = next.encode(&self.header.pool_uuid);
        let at = layout::DIRECTORY_COPY_OFFSETS[next.copy_index()];
        self.medium.write(at, &page);
        self.medium.persist(at, PAGE_SIZE)?;
        self.write_state(MutableState {
            directory_generation: next.generation,
            ..self.state
        })?;
        self.directory = next;
        let mirror = layout::DIRECTORY_COPY_OFFSETS[1 - self.directory.copy_index()];
        self.medium.write(mirror, &page);
        self.medium.persist(mirror, PAGE_SIZE)?;
        Ok(())
    }

    /// Region space not covered by any region.
    pub fn free_bytes(&self) -> u64 {
        let used: u64 = self.directory.regions.iter().map(|r| r.length).sum();
        self.size() - METADATA_BYTES as u64 - used
    }

    /// A summary for reports.
    pub fn info(&self) -> PoolInfo {
        let backing = self.medium.backing();
        PoolInfo {
            path: self.medium.label(),
            uuid: self.header.pool_uuid,
            set_uuid: self.header.set_uuid,
            member: (self.header.member_index, self.header.member_count),
            format_version: layout::FORMAT_VERSION,
            size: self.size(),
            growable: self.growable(),
            page_size: PAGE_SIZE as u32,
            created_ns: self.header.created_ns,
            recorded_domain: self.header.domain,
            detected_domain: backing.detected_domain(),
            domain: self.medium.domain(),
            backing,
            survives_reboot: backing.survives_reboot(),
            flush_instruction: cpu::flush_instruction(),
            clean_shutdown: self.clean_at_open,
            state_sequence: self.state.sequence,
            directory_generation: self.directory.generation,
            regions: self
                .regions()
                .iter()
                .map(|r| RegionInfo {
                    region: r.clone(),
                    kind_name: kinds::name(r.kind),
                })
                .collect(),
            free_bytes: self.free_bytes(),
            damage: self.damage.iter().map(ToString::to_string).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_domain_is_accepted_exactly_where_every_open_runs_it() {
        use Backing::*;
        use Domain::*;
        // (recorded, backing, accepted)
        let table = [
            (Adr, Dax, true),
            (Eadr, Dax, true),
            (Msync, Dax, false),
            (Sim, Dax, false),
            (Adr, Tmpfs, true),
            (Eadr, Tmpfs, true),
            (Msync, Tmpfs, false),
            (Sim, Tmpfs, false),
            (Adr, PageCache, false),
            (Eadr, PageCache, false),
            (Msync, PageCache, true),
            (Sim, PageCache, false),
            (Adr, Simulated, false),
            (Sim, Simulated, true),
        ];
        for (domain, backing, accepted) in table {
            let got = domain_runs_on(domain, backing);
            assert_eq!(got.is_ok(), accepted, "{domain} on {backing:?}: {got:?}");
            assert_eq!(
                got.is_ok(),
                effective_domain(domain, backing, None) == domain,
                "{domain} on {backing:?}"
            );
            if let Err(why) = got {
                assert!(why.contains(&format!("`{domain}`")), "{why}");
            }
        }
    }
}
