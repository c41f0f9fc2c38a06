//! The allocator: chunks, runs of size-class blocks, lane caches, and the allocator
//! changes a transaction makes at commit.

#[allow(unused_imports)]
use super::*;

/// A block as the allocator sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Block {
    Small {
        off: u64,
        chunk: u32,
        bit: u32,
        size: u32,
    },
    Large {
        off: u64,
        chunk: u32,
        span: u32,
    },
}

impl Block {
    pub(super) fn off(&self) -> u64 {
        match *self {
            Block::Small { off, .. } | Block::Large { off, .. } => off,
        }
    }

    pub(super) fn len(&self) -> u64 {
        match *self {
            Block::Small { size, .. } => u64::from(size),
            Block::Large { span, .. } => u64::from(span) * CHUNK_SIZE,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Free,
    Run(usize),
    Large(u32),
    Cont,
}

/// Volatile state of one chunk.
#[derive(Debug)]
pub(super) struct Shadow {
    pub(super) kind: Kind,
    /// Mirror of the persistent bitmap (runs), set after a commit retires.
    pub(super) allocated: Vec<u64>,
    /// Free blocks not handed to any lane cache.
    pub(super) available: Vec<u64>,
    /// Blocks freed by a transaction not yet retired.
    pub(super) pending_free: Vec<u64>,
    /// Large head only: a free is pending.
    pub(super) large_pending: bool,
}

impl Shadow {
    pub(super) fn new(kind: Kind) -> Self {
        Shadow {
            kind,
            allocated: Vec::new(),
            available: Vec::new(),
            pending_free: Vec::new(),
            large_pending: false,
        }
    }
}

pub(super) fn bit(v: &[u64], i: u32) -> bool {
    v[(i / 64) as usize] >> (i % 64) & 1 == 1
}

pub(super) fn set_bit(v: &mut [u64], i: u32, on: bool) {
    let w = &mut v[(i / 64) as usize];
    if on {
        *w |= 1 << (i % 64);
    } else {
        *w &= !(1 << (i % 64));
    }
}

#[derive(Debug, Default)]
pub(super) struct Global {
    pub(super) free_chunks: BTreeSet<u32>,
    /// Per class, chunks that may have available blocks (stale entries are skipped).
    pub(super) partial: Vec<Vec<u32>>,
}

pub(super) const CACHE_MAX: usize = 128;

pub(super) fn refill_batch(class: usize) -> usize {
    (8192 / CLASS_SIZES[class] as usize).clamp(2, 64)
}

/// The bits of bitmap word `k` that stand for one of a run's `blocks` blocks.
pub(super) fn block_mask(k: usize, blocks: u64) -> u64 {
    let lo = k as u64 * 64;
    if lo >= blocks {
        0
    } else if blocks - lo >= 64 {
        u64::MAX
    } else {
        (1u64 << (blocks - lo)) - 1
    }
}

pub(super) fn free_bits(allocated: &[u64], blocks: u64) -> Vec<u64> {
    allocated
        .iter()
        .enumerate()
        .map(|(k, w)| !w & block_mask(k, blocks))
        .collect()
}

impl RawHeap {
    pub(super) fn rebuild(&mut self) -> Result<()> {
        let g = self.geo;
        let mut shadows = Vec::with_capacity(g.chunk_count as usize);
        let mut global = Global {
            partial: vec![Vec::new(); CLASS_SIZES.len()],
            ..Global::default()
        };
        let mut i = 0u64;
        while i < g.chunk_count {
            let at = g.chunk_word(i);
            let word = ChunkWord::decode(
                self.medium.load_u64(self.m(at)),
                i,
                g.chunk_count,
                self.base + at,
            )?;
            match word {
                ChunkWord::Free => {
                    global.free_chunks.insert(i as u32);
                    shadows.push(Mutex::new(Shadow::new(Kind::Free)));
                }
                ChunkWord::Run(class) => {
                    let allocated = self.read_bitmap(i, class)?;
                    if allocated.iter().all(|w| *w == 0) {
                        // An empty run goes back to the free chunks (in DRAM only: the word
                        // is rewritten when the chunk is next used).
                        global.free_chunks.insert(i as u32);
                        shadows.push(Mutex::new(Shadow::new(Kind::Free)));
                    } else {
                        let mut sh = Shadow::new(Kind::Run(class));
                        sh.available = free_bits(&allocated, blocks_per_run(class));
                        sh.pending_free = vec![0; allocated.len()];
                        sh.allocated = allocated;
                        if sh.available.iter().any(|w| *w != 0) {
                            global.partial[class].push(i as u32);
                        }
                        shadows.push(Mutex::new(sh));
                    }
                }
                ChunkWord::Large(span) => {
                    shadows.push(Mutex::new(Shadow::new(Kind::Large(span))));
                    for _ in 1..span {
                        shadows.push(Mutex::new(Shadow::new(Kind::Cont)));
                    }
                    i += u64::from(span);
                    continue;
                }
            }
            i += 1;
        }
        self.shadows = shadows;
        self.global = Mutex::new(global);
        Ok(())
    }

    /// Chunk `i`'s bitmap as a run of `class`, checking no bit beyond the run's blocks is set.
    pub(crate) fn read_bitmap(&self, i: u64, class: usize) -> Result<Vec<u64>> {
        let at = self.geo.chunk(i);
        let mut bytes = [0u8; RUN_BITMAP_BYTES as usize];
        self.medium.read(self.m(at), &mut bytes);
        let words: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8")))
            .collect();
        let n = blocks_per_run(class);
        for (k, w) in words.iter().enumerate() {
            if w & !block_mask(k, n) != 0 {
                return Err(HeapError::corrupt(
                    format!("run bitmap of chunk {i} (class {class}, {n} blocks)"),
                    self.base + at + 8 * k as u64,
                    "bits",
                    format!("no bit beyond block {n}"),
                    format!("{w:#018x}"),
                ));
            }
        }
        Ok(words)
    }

    /// Allocate `size` bytes in the transaction; returns the block's offset.
    pub fn alloc(&self, lane: &mut Lane, size: u64, zero: bool) -> Result<u64> {
        self.need_tx(lane)?;
        if size == 0 {
            return self.fail(lane, HeapError::invalid("allocation size", "0 bytes"));
        }
        let block = match class_for(size) {
            Some(class) => self.reserve_small(lane, class),
            None => self.reserve_large(size),
        };
        let block = match block {
            Ok(b) => b,
            Err(e) => return self.fail(lane, e),
        };
        // Redo mode logs the allocator change at commit, with the rest of the transaction.
        if !lane.mode.is_redo()
            && let Err(e) = self.log_block(lane, &block, true)
        {
            // Some of its entries may be in the log: keep it until the transaction ends.
            lane.deferred.push(block);
            return self.fail(lane, e);
        }
        if self.fresh_old.load(Ordering::Acquire) {
            let mut old = vec![0u8; block.len() as usize];
            self.medium.read(self.m(block.off()), &mut old);
            lane.fresh_olds.push((block.off(), old));
        }
        if zero {
            let len = block.len();
            let zeros = [0u8; 4096];
            let mut o = 0;
            while o < len {
                let n = (len - o).min(4096);
                self.data()
                    .write(self.m(block.off() + o), &zeros[..n as usize]);
                o += n;
            }
            if lane.on_demand {
                self.mark_dirty(block.off(), len);
            }
        }
        lane.allocs.push(block);
        Ok(block.off())
    }

    pub(super) fn reserve_small(&self, lane: &mut Lane, class: usize) -> Result<Block> {
        if lane.cache[class].is_empty() {
            self.refill(lane, class)?;
        }
        let off = lane.cache[class].pop().expect("refill leaves a block");
        let chunk = self.geo.chunk_of(off);
        let bit = (off - self.geo.chunk(chunk) - RUN_HEADER) / u64::from(CLASS_SIZES[class]);
        Ok(Block::Small {
            off,
            chunk: chunk as u32,
            bit: bit as u32,
            size: CLASS_SIZES[class],
        })
    }

    pub(super) fn refill(&self, lane: &mut Lane, class: usize) -> Result<()> {
        let want = refill_batch(class);
        let mut g = self.global.lock();
        loop {
            while let Some(&c) = g.partial[class].last() {
                let mut sh = self.shadows[c as usize].lock();
                let mut got = 0;
                if sh.kind == Kind::Run(class) {
                    let base = self.geo.chunk(u64::from(c)) + RUN_HEADER;
                    let size = u64::from(CLASS_SIZES[class]);
                    for w in 0..sh.available.len() {
                        while sh.available[w] != 0 && got < want {
                            let b = sh.available[w].trailing_zeros();
                            sh.available[w] &= !(1 << b);
                            lane.cache[class].push(base + (w as u64 * 64 + u64::from(b)) * size);
                            got += 1;
                        }
                        if got == want {
                            break;
                        }
                    }
                }
                let empty = sh.kind != Kind::Run(class) || sh.available.iter().all(|w| *w == 0);
                drop(sh);
                if empty {
                    g.partial[class].pop();
                }
                if got > 0 {
                    // Hand out low addresses first.
                    lane.cache[class].reverse();
                    return Ok(());
                }
            }
            let c = *g
                .free_chunks
                .iter()
                .next()
                .ok_or(HeapError::OutOfSpace(u64::from(CLASS_SIZES[class])))?;
            self.make_run(c, class)?;
            g.free_chunks.remove(&c);
            g.partial[class].push(c);
        }
    }

    /// Turn free chunk `c` into an empty run: zero its bitmap, persist, then store its chunk
    /// word (one atomic 8-byte store) and persist. A crash between leaves it free.
    pub(super) fn make_run(&self, c: u32, class: usize) -> Result<()> {
        let at = self.geo.chunk(u64::from(c));
        self.medium
            .write(self.m(at), &[0u8; RUN_BITMAP_BYTES as usize]);
        self.pflush(self.m(at), RUN_BITMAP_BYTES as usize)?;
        self.fence()?;
        let w = self.geo.chunk_word(u64::from(c));
        self.medium
            .store_u64(self.m(w), ChunkWord::Run(class).encode(u64::from(c)));
        self.pflush(self.m(w), 8)?;
        self.fence()?;
        let words = (RUN_BITMAP_BYTES / 8) as usize;
        let mut sh = self.shadows[c as usize].lock();
        *sh = Shadow::new(Kind::Run(class));
        sh.allocated = vec![0; words];
        sh.pending_free = vec![0; words];
        sh.available = free_bits(&sh.allocated, blocks_per_run(class));
        Ok(())
    }

    pub(super) fn reserve_large(&self, size: u64) -> Result<Block> {
        let span = size.div_ceil(CHUNK_SIZE);
        let mut g = self.global.lock();
        // First fit over runs of consecutive free chunks.
        let mut start = None;
        let mut run_start = 0u32;
        let mut run_len = 0u64;
        let mut prev: Option<u32> = None;
        for &c in g.free_chunks.iter() {
            if prev == Some(c.wrapping_sub(1)) {
                run_len += 1;
            } else {
                run_start = c;
                run_len = 1;
            }
            prev = Some(c);
            if run_len == span {
                start = Some(run_start);
                break;
            }
        }
        let start = start.ok_or(HeapError::OutOfSpace(size))?;
        for c in start..start + span as u32 {
            g.free_chunks.remove(&c);
        }
        Ok(Block::Large {
            off: self.geo.chunk(u64::from(start)),
            chunk: start,
            span: span as u32,
        })
    }

    /// Free the block at `off` when the transaction commits.
    pub fn free(&self, lane: &mut Lane, off: u64) -> Result<()> {
        self.need_tx(lane)?;
        if let Some(i) = lane.allocs.iter().position(|b| b.off() == off) {
            // Allocated in this transaction: it goes back when the transaction ends. Not
            // before: its undo entries live until then, and rolling them back must not touch
            // a block another lane took in the meantime.
            let b = lane.allocs.swap_remove(i);
            lane.deferred.push(b);
            return Ok(());
        }
        let b = match self.block_at(off) {
            Ok(b) => b,
            Err(e) => return self.fail(lane, e),
        };
        if !lane.mode.is_redo()
            && let Err(e) = self.log_block(lane, &b, false)
        {
            self.clear_pending(b);
            return self.fail(lane, e);
        }
        lane.frees.push(b);
        Ok(())
    }

    /// Validate that `off` is an allocated block no transaction is freeing, and mark it.
    pub(super) fn block_at(&self, off: u64) -> Result<Block> {
        let bad = |reason: &str| HeapError::BadFree {
            offset: off,
            reason: reason.into(),
        };
        if off < self.geo.zone_off || off >= self.geo.zone_end() {
            return Err(bad("not inside the data zone"));
        }
        let chunk = self.geo.chunk_of(off);
        let mut sh = self.shadows[chunk as usize].lock();
        match sh.kind {
            Kind::Run(class) => {
                let rel = off - self.geo.chunk(chunk);
                let size = u64::from(CLASS_SIZES[class]);
                if rel < RUN_HEADER || (rel - RUN_HEADER) % size != 0 {
                    return Err(bad("not the start of a block"));
                }
                let b = ((rel - RUN_HEADER) / size) as u32;
                if u64::from(b) >= blocks_per_run(class) {
                    return Err(bad("past the last block of its run"));
                }
                if !bit(&sh.allocated, b) {
                    return Err(bad("the block is not allocated (double free?)"));
                }
                if bit(&sh.pending_free, b) {
                    return Err(bad("another open transaction frees this block"));
                }
                set_bit(&mut sh.pending_free, b, true);
                Ok(Block::Small {
                    off,
                    chunk: chunk as u32,
                    bit: b,
                    size: size as u32,
                })
            }
            Kind::Large(span) if off == self.geo.chunk(chunk) => {
                if sh.large_pending {
                    return Err(bad("another open transaction frees this block"));
                }
                sh.large_pending = true;
                Ok(Block::Large {
                    off,
                    chunk: chunk as u32,
                    span,
                })
            }
            _ => Err(bad("no allocated block starts here")),
        }
    }

    /// Usable size of the allocated block at `off`, if it is one.
    pub fn usable_size(&self, off: u64) -> Option<u64> {
        if off < self.geo.zone_off || off >= self.geo.zone_end() {
            return None;
        }
        let chunk = self.geo.chunk_of(off);
        let sh = self.shadows[chunk as usize].lock();
        match sh.kind {
            Kind::Run(class) => {
                let rel = off - self.geo.chunk(chunk);
                let size = u64::from(CLASS_SIZES[class]);
                if rel < RUN_HEADER || (rel - RUN_HEADER) % size != 0 {
                    return None;
                }
                let b = ((rel - RUN_HEADER) / size) as u32;
                (u64::from(b) < blocks_per_run(class) && bit(&sh.allocated, b)).then_some(size)
            }
            Kind::Large(span) if off == self.geo.chunk(chunk) => Some(u64::from(span) * CHUNK_SIZE),
            _ => None,
        }
    }

    /// The block (`(offset, length)`, region offsets) whose bytes include `off`, from the
    /// chunk's kind: for a run chunk the block slot `off` falls in (allocated or not), for a
    /// large block its whole span. `None` outside the zone, in a run header or a free chunk.
    pub fn block_of(&self, off: u64) -> Option<(u64, u64)> {
        if off < self.geo.zone_off || off >= self.geo.zone_end() {
            return None;
        }
        let mut chunk = self.geo.chunk_of(off);
        loop {
            let kind = self.shadows[chunk as usize].lock().kind;
            match kind {
                Kind::Run(class) => {
                    let rel = off - self.geo.chunk(chunk);
                    let size = u64::from(CLASS_SIZES[class]);
                    if rel < RUN_HEADER {
                        return None;
                    }
                    let b = (rel - RUN_HEADER) / size;
                    if b >= blocks_per_run(class) {
                        return None;
                    }
                    return Some((self.geo.chunk(chunk) + RUN_HEADER + b * size, size));
                }
                Kind::Large(span) => {
                    let start = self.geo.chunk(chunk);
                    let len = u64::from(span) * CHUNK_SIZE;
                    return (off < start + len).then_some((start, len));
                }
                Kind::Cont if chunk > 0 => chunk -= 1,
                _ => return None,
            }
        }
    }

    pub(super) fn unreserve(&self, lane: &mut Lane, b: Block) {
        match b {
            Block::Small {
                off, chunk, size, ..
            } => {
                let class = class_for(u64::from(size)).expect("a run block");
                self.release_small(lane, class, off, chunk);
            }
            Block::Large { chunk, span, .. } => {
                let mut g = self.global.lock();
                for c in chunk..chunk + span {
                    g.free_chunks.insert(c);
                }
            }
        }
    }

    pub(super) fn release_small(&self, lane: &mut Lane, class: usize, off: u64, chunk: u32) {
        if lane.cache[class].len() < CACHE_MAX {
            lane.cache[class].push(off);
            return;
        }
        let b = ((off - self.geo.chunk(u64::from(chunk)) - RUN_HEADER)
            / u64::from(CLASS_SIZES[class])) as u32;
        let mut g = self.global.lock();
        let mut sh = self.shadows[chunk as usize].lock();
        let was_empty = sh.available.iter().all(|w| *w == 0);
        set_bit(&mut sh.available, b, true);
        if was_empty {
            g.partial[class].push(chunk);
        }
    }

    /// Make the allocator changes of the transaction in place and flush them.
    pub(super) fn apply_blocks(&self, lane: &Lane, flush: bool) -> Result<()> {
        let ops = lane
            .allocs
            .iter()
            .map(|b| (b, true))
            .chain(lane.frees.iter().map(|b| (b, false)));
        for (b, alloc) in ops {
            match *b {
                Block::Small { chunk, bit, .. } => {
                    let at = self.m(self.geo.chunk(u64::from(chunk)) + u64::from(bit / 64) * 8);
                    let mask = 1u64 << (bit % 64);
                    let _sh = self.shadows[chunk as usize].lock();
                    let old = self.medium.load_u64(at);
                    let new = if alloc { old | mask } else { old & !mask };
                    self.medium.store_u64(at, new);
                    if flush {
                        self.pflush(at, 8)?;
                    }
                }
                Block::Large { chunk, span, .. } => {
                    let head = self.m(self.geo.chunk_word(u64::from(chunk)));
                    let v = if alloc {
                        ChunkWord::Large(span).encode(u64::from(chunk))
                    } else {
                        0
                    };
                    self.medium.store_u64(head, v);
                    if flush {
                        self.pflush(head, 8)?;
                    }
                    if alloc {
                        for c in chunk + 1..chunk + span {
                            let at = self.m(self.geo.chunk_word(u64::from(c)));
                            if self.medium.load_u64(at) != 0 {
                                self.medium.store_u64(at, 0);
                                if flush {
                                    self.pflush(at, 8)?;
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// After F4: the volatile allocator state takes the committed allocations and frees.
    pub(super) fn publish(&self, lane: &mut Lane) {
        if lane.allocs.is_empty() && lane.frees.is_empty() {
            return;
        }
        let allocs = std::mem::take(&mut lane.allocs);
        for b in &allocs {
            match *b {
                Block::Small { chunk, bit, .. } => set_bit(
                    &mut self.shadows[chunk as usize].lock().allocated,
                    bit,
                    true,
                ),
                Block::Large { chunk, span, .. } => {
                    *self.shadows[chunk as usize].lock() = Shadow::new(Kind::Large(span));
                    for c in chunk + 1..chunk + span {
                        *self.shadows[c as usize].lock() = Shadow::new(Kind::Cont);
                    }
                }
            }
        }
        self.counters
            .allocs
            .fetch_add(allocs.len() as u64, Ordering::Relaxed);
        let frees = std::mem::take(&mut lane.frees);
        for b in &frees {
            match *b {
                Block::Small {
                    off, chunk, bit, ..
                } => {
                    let class = {
                        let mut sh = self.shadows[chunk as usize].lock();
                        set_bit(&mut sh.allocated, bit, false);
                        set_bit(&mut sh.pending_free, bit, false);
                        match sh.kind {
                            Kind::Run(c) => c,
                            _ => continue,
                        }
                    };
                    self.release_small(lane, class, off, chunk);
                }
                Block::Large { chunk, span, .. } => {
                    for c in chunk..chunk + span {
                        *self.shadows[c as usize].lock() = Shadow::new(Kind::Free);
                    }
                    let mut g = self.global.lock();
                    for c in chunk..chunk + span {
                        g.free_chunks.insert(c);
                    }
                }
            }
        }
        self.counters
            .frees
            .fetch_add(frees.len() as u64, Ordering::Relaxed);
        lane.allocs = allocs;
        lane.allocs.clear();
        lane.frees = frees;
        lane.frees.clear();
    }

    pub(super) fn clear_pending(&self, b: Block) {
        match b {
            Block::Small { chunk, bit, .. } => set_bit(
                &mut self.shadows[chunk as usize].lock().pending_free,
                bit,
                false,
            ),
            Block::Large { chunk, .. } => self.shadows[chunk as usize].lock().large_pending = false,
        }
    }
}
