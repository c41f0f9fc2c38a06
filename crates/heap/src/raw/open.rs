//! Format, open and the header: an empty heap written, a heap validated and recovered.

#[allow(unused_imports)]
use super::*;

/// Decode header copy `at` of the heap at medium offset `base`; a corruption names its medium
/// offset.
pub fn decode_header_copy(medium: &dyn Medium, base: u64, len: u64, at: u64) -> Result<Header> {
    let mut b = [0u8; HEADER_CRC_AT + 4];
    medium.read((base + at) as usize, &mut b);
    Header::decode(&b, at, len).map_err(|e| match e {
        HeapError::Corrupt(mut c) => {
            c.offset += base;
            HeapError::Corrupt(c)
        }
        e => e,
    })
}

/// Read and validate the header (copy 0, else copy 1). When both are bad, the error names
/// both.
pub fn read_header(medium: &dyn Medium, base: u64, len: u64) -> Result<Header> {
    match decode_header_copy(medium, base, len, HEADER_COPY_0) {
        Ok(h) => Ok(h),
        Err(e0) => match decode_header_copy(medium, base, len, HEADER_COPY_1) {
            Ok(h) => Ok(h),
            Err(HeapError::Corrupt(c1)) => match e0 {
                HeapError::Corrupt(mut c0) => {
                    c0.found = format!("{}; copy 1 is bad too: {c1}", c0.found);
                    Err(HeapError::Corrupt(c0))
                }
                e => Err(e),
            },
            Err(e) => Err(e),
        },
    }
}

impl RawHeap {
    /// Write an empty heap into `[base, base + len)` of `medium` and persist it.
    pub fn format(
        medium: &dyn Medium,
        base: u64,
        len: u64,
        uuid: [u8; 16],
        opts: &HeapOptions,
    ) -> Result<Geometry> {
        let geo = Geometry::plan(len, opts.lanes, opts.lane_bytes, opts.redo_bytes)?;
        check_region(medium.len() as u64, base, len)?;
        // First the old headers go, durably: a heap formatted in place over an older one would
        // otherwise, after a crash in the middle, open as that heap over a half-zeroed chunk
        // table (damage where there was a whole heap or none). Then zero the header area, lanes
        // and chunk table; the zone needs nothing (a zero chunk word means free).
        for copy in [HEADER_COPY_0, HEADER_COPY_1] {
            medium.write((base + copy) as usize, &[0u8; 64]);
            medium.flush((base + copy) as usize, 64)?;
        }
        medium.fence()?;
        let zero = vec![0u8; 1 << 16];
        let mut off = 0;
        while off < geo.zone_off {
            let n = (geo.zone_off - off).min(zero.len() as u64);
            medium.write((base + off) as usize, &zero[..n as usize]);
            off += n;
        }
        medium.flush(base as usize, geo.zone_off as usize)?;
        medium.fence()?;
        let h = Header { uuid, geo }.encode();
        medium.write((base + HEADER_COPY_0) as usize, &h);
        medium.write((base + HEADER_COPY_1) as usize, &h);
        medium.persist(base as usize, HEADER_AREA as usize)?;
        Ok(geo)
    }

    /// Open the heap in `[base, base + len)`: validate the header, recover every lane, and
    /// rebuild the allocator's volatile state.
    pub fn open(medium: Arc<dyn Medium>, base: u64, len: u64) -> Result<RawHeap> {
        check_region(medium.len() as u64, base, len)?;
        let header = read_header(&*medium, base, len)?;
        let geo = header.geo;
        let mut heap = RawHeap {
            medium,
            base,
            geo,
            uuid: header.uuid,
            shadows: Vec::new(),
            global: Mutex::new(Global::default()),
            lanes: Vec::new(),
            locks: Mutex::new(HashMap::new()),
            root: Mutex::new(()),
            observer: RwLock::new(None),
            has_observer: AtomicBool::new(false),
            fresh_old: AtomicBool::new(false),
            plain: None,
            counters: Counters::default(),
            recovery: RecoveryReport::default(),
            od: OnDemand::new(geo.lane_count as usize, len),
            pending_retire: Mutex::new(Vec::new()),
            retire_pending: AtomicBool::new(false),
            default_mode: std::sync::atomic::AtomicU8::new(0),
            stm: crate::stm::Stm::with_default_stripes(),
        };
        // Refuse before changing anything: a lane whose on-demand commits were never saved
        // (the heap may be torn), an unknown redo kind, or a damaged saved log.
        for i in 0..geo.lane_count as usize {
            heap.precheck_redo(i)?;
        }
        let mut seqs = Vec::new();
        for i in 0..geo.lane_count as usize {
            seqs.push(heap.recover_lane(i)?);
        }
        heap.rebuild()?;
        heap.lanes = seqs
            .into_iter()
            .enumerate()
            .map(|(idx, seq)| {
                Arc::new(Mutex::new(Lane {
                    idx,
                    seq,
                    depth: 0,
                    aborted: None,
                    undo_tail: 0,
                    snapshots: Vec::new(),
                    ranges: RangeSet::default(),
                    allocs: Vec::new(),
                    frees: Vec::new(),
                    cache: vec![Vec::new(); CLASS_SIZES.len()],
                    scratch: Vec::new(),
                    unfenced: false,
                    deferred: Vec::new(),
                    mode: TxMode::Undo,
                    on_demand: false,
                    redo: RedoSet::default(),
                    logbuf: Vec::new(),
                    stm_tx: Default::default(),
                    fresh_olds: Vec::new(),
                }))
            })
            .collect();
        Ok(heap)
    }

    pub(super) fn recover_lane(&mut self, i: usize) -> Result<u64> {
        let g = self.geo;
        let at = g.lane(i);
        let state = self.medium.load_u64(self.m(at));
        if state & 1 == 1 {
            return Err(HeapError::corrupt(
                format!("lane {i} state word"),
                self.base + at,
                "flags",
                "bit 0 clear (reserved)",
                format!("{state:#018x}"),
            ));
        }
        let mut seq = self.recover_redo(i, state >> 1)?;
        let entries = scan_undo(&*self.medium, self.base, &g, i, seq + 1);
        if !entries.is_empty() {
            for e in entries.iter().rev() {
                self.check_undo_target(i, e)?;
                self.undo_one(e, &*self.medium)?;
            }
            self.medium.fence()?;
            seq += 1;
            self.medium.store_u64(self.m(at), seq << 1);
            self.medium.persist(self.m(at), 8)?;
            self.recovery.rolled_back += 1;
            self.recovery.undo_entries += entries.len();
        }
        Ok(seq)
    }
}

/// A heap region must be a page-aligned range inside the medium.
fn check_region(medium_len: u64, base: u64, len: u64) -> Result<()> {
    if base.checked_add(len).is_none_or(|end| end > medium_len) || base % 4096 != 0 {
        return Err(HeapError::invalid(
            "heap region",
            format!(
                "[{base:#x}, +{len:#x}) is not a page-aligned range of the {medium_len}-byte medium"
            ),
        ));
    }
    Ok(())
}
