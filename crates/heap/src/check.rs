//! The heap walk: every allocated block, the allocator's metadata checked, and blocks no
//! pointer reaches (leaks). Read-only: it neither recovers nor repairs.
//!
//! Reachability is conservative: starting from the root object, every aligned 8-byte word of
//! a reachable block that holds an offset inside an allocated block makes that block
//! reachable (the `off` of a C `kv_oid` and a Rust `PPtr` are such words). A block reported
//! as leaked is one no such word points into; random data that looks like a pointer can only
//! hide a leak, never invent one.

use pmem::{Corruption, Medium};
use serde::Serialize;

use crate::error::{HeapError, Result};
use crate::layout::*;
use crate::raw::{
    decode_header_copy, fresh_holds, read_header, read_redo_log, redo_state, scan_undo,
};

/// One allocated block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BlockInfo {
    /// Offset inside the heap region.
    pub offset: u64,
    /// Usable bytes.
    pub size: u64,
}

/// Per size class.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClassStats {
    /// Block size.
    pub block_size: u64,
    /// Run chunks of this class.
    pub runs: u64,
    /// Allocated blocks.
    pub allocated: u64,
    /// Blocks the runs hold.
    pub capacity: u64,
}

/// A lane whose last transaction did not finish: open would recover it.
#[derive(Debug, Clone, Serialize)]
pub struct PendingLane {
    /// The lane.
    pub lane: usize,
    /// Undo entries that would be rolled back.
    pub undo_entries: usize,
    /// Redo entries that would be redone (a committed log not yet retired, or a log saved on
    /// a power-failure warning).
    pub redo_entries: usize,
}

/// What the walk found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HeapReport {
    /// Region bytes.
    pub region_bytes: u64,
    /// Chunks in the zone.
    pub chunks: u64,
    /// Free chunks.
    pub free_chunks: u64,
    /// Chunks used as runs.
    pub run_chunks: u64,
    /// Chunks in large blocks.
    pub large_chunks: u64,
    /// Allocated blocks.
    pub blocks: u64,
    /// Their usable bytes.
    pub allocated_bytes: u64,
    /// The root object `(offset, size)`, if one was made.
    pub root: Option<(u64, u64)>,
    /// Lanes.
    pub lanes: u32,
    /// Lanes waiting for recovery.
    pub pending: Vec<PendingLane>,
    /// Lanes whose redo area says `UNSAVED`: durability-on-demand commits ran and no save
    /// finished, so the heap may be torn and open refuses it (`docs/format/redo-log.md`).
    pub unsaved: Vec<usize>,
    /// Size classes with at least one run.
    pub classes: Vec<ClassStats>,
    /// Damaged metadata.
    #[serde(serialize_with = "ser_damage")]
    pub damage: Vec<Corruption>,
    /// Blocks allocated twice over (overlapping another allocated block).
    pub double_allocated: Vec<BlockInfo>,
    /// Allocated blocks no pointer reaches (when reachability was asked for and possible).
    pub leaked: Vec<BlockInfo>,
    /// Was reachability checked? (Not when recovery is pending or metadata is damaged.)
    pub reachability_checked: bool,
}

fn ser_damage<S: serde::Serializer>(
    d: &[Corruption],
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.collect_seq(d.iter().map(|c| c.to_string()))
}

impl HeapReport {
    /// No damage, no double allocation, no leak.
    pub fn is_clean(&self) -> bool {
        self.damage.is_empty()
            && self.double_allocated.is_empty()
            && self.leaked.is_empty()
            && self.unsaved.is_empty()
    }
}

/// Walk the heap in `[base, base + len)` of `medium`. With `reachability`, also look for
/// leaks from the root object.
pub fn walk(medium: &dyn Medium, base: u64, len: u64, reachability: bool) -> Result<HeapReport> {
    let header = read_header(medium, base, len)?;
    let g = header.geo;
    let mut r = HeapReport {
        region_bytes: len,
        chunks: g.chunk_count,
        lanes: g.lane_count,
        ..HeapReport::default()
    };
    // A damaged copy 1 is worth reporting even though copy 0 serves.
    for at in [HEADER_COPY_0, HEADER_COPY_1] {
        if let Err(HeapError::Corrupt(c)) = decode_header_copy(medium, base, len, at) {
            r.damage.push(c);
        }
    }
    for i in 0..g.lane_count as usize {
        let at = g.lane(i);
        let state = medium.load_u64((base + at) as usize);
        if state & 1 == 1 {
            r.damage.push(Corruption {
                structure: format!("lane {i} state word"),
                offset: base + at,
                field: "flags",
                expected: "bit 0 clear (reserved)".into(),
                found: format!("{state:#018x}"),
            });
        }
        let mut seq = state >> 1;
        let (kind, lseq) = match redo_state(medium, base, &g, i) {
            Ok(s) => s,
            Err(HeapError::Corrupt(c)) => {
                r.damage.push(c);
                (REDO_EMPTY, 0)
            }
            Err(e) => return Err(e),
        };
        let mut redo = 0;
        match kind {
            REDO_EMPTY => {}
            REDO_UNSAVED => r.unsaved.push(i),
            REDO_SAVED | REDO_COMMITTED if kind == REDO_SAVED || lseq == seq + 1 => {
                match read_redo_log(medium, base, &g, i) {
                    // A committed log whose fresh blocks do not hold their bytes is a commit
                    // that never happened (open clears it).
                    Ok(e)
                        if kind == REDO_COMMITTED
                            && !e.iter().all(|x| fresh_holds(medium, base, &g, x)) => {}
                    Ok(e) => {
                        redo = e.len();
                        if kind == REDO_COMMITTED {
                            seq += 1;
                        }
                    }
                    // A torn committed log is a commit that never happened; a saved one is
                    // damage.
                    Err(HeapError::Corrupt(c)) if kind == REDO_SAVED => r.damage.push(c),
                    Err(_) => {}
                }
            }
            _ => {}
        }
        let undo = scan_undo(medium, base, &g, i, seq + 1).len();
        if undo > 0 || redo > 0 {
            r.pending.push(PendingLane {
                lane: i,
                undo_entries: undo,
                redo_entries: redo,
            });
        }
    }
    let mut classes = vec![ClassStats::default(); CLASS_SIZES.len()];
    let mut blocks: Vec<BlockInfo> = Vec::new();
    let mut bad_chunks = Vec::new();
    let mut covered_until = 0u64; // chunks below this belong to a large block's span
    let mut owner = 0u64;
    for i in 0..g.chunk_count {
        let at = g.chunk_word(i);
        let word = medium.load_u64((base + at) as usize);
        let decoded = ChunkWord::decode(word, i, g.chunk_count, base + at);
        if decoded.is_err() {
            bad_chunks.push(i);
        }
        if i < covered_until {
            if word != 0 {
                r.double_allocated.push(BlockInfo {
                    offset: g.chunk(i),
                    size: CHUNK_SIZE,
                });
                r.damage.push(Corruption {
                    structure: format!("chunk table entry {i}"),
                    offset: base + at,
                    field: "word",
                    expected: format!("0 (inside the large block at chunk {owner})"),
                    found: format!("{word:#018x}"),
                });
            }
            r.large_chunks += 1;
            continue;
        }
        match decoded {
            Err(HeapError::Corrupt(c)) => r.damage.push(c),
            Err(e) => return Err(e),
            Ok(ChunkWord::Free) => r.free_chunks += 1,
            Ok(ChunkWord::Run(class)) => {
                r.run_chunks += 1;
                let cs = &mut classes[class];
                cs.block_size = u64::from(CLASS_SIZES[class]);
                cs.runs += 1;
                cs.capacity += blocks_per_run(class);
                let mut bm = [0u8; RUN_BITMAP_BYTES as usize];
                medium.read((base + g.chunk(i)) as usize, &mut bm);
                let n = blocks_per_run(class);
                for b in 0..RUN_BITMAP_BYTES * 8 {
                    if bm[(b / 8) as usize] >> (b % 8) & 1 == 0 {
                        continue;
                    }
                    if b >= n {
                        r.damage.push(Corruption {
                            structure: format!("run bitmap of chunk {i} (class {class})"),
                            offset: base + g.chunk(i) + b / 8,
                            field: "bits",
                            expected: format!("no bit beyond block {n}"),
                            found: format!("bit {b} set"),
                        });
                        continue;
                    }
                    cs.allocated += 1;
                    blocks.push(BlockInfo {
                        offset: g.chunk(i) + RUN_HEADER + b * cs.block_size,
                        size: cs.block_size,
                    });
                }
            }
            Ok(ChunkWord::Large(span)) => {
                r.large_chunks += 1;
                covered_until = i + u64::from(span);
                owner = i;
                blocks.push(BlockInfo {
                    offset: g.chunk(i),
                    size: u64::from(span) * CHUNK_SIZE,
                });
            }
        }
    }
    r.blocks = blocks.len() as u64;
    r.allocated_bytes = blocks.iter().map(|b| b.size).sum();
    r.classes = classes.into_iter().filter(|c| c.runs > 0).collect();
    let (root_off, root_size) = (
        medium.load_u64((base + ROOT_LINE) as usize),
        medium.load_u64((base + ROOT_LINE + 8) as usize),
    );
    if root_off != 0 {
        r.root = Some((root_off, root_size));
        let in_bad_chunk = root_off >= g.zone_off
            && root_off < g.zone_end()
            && bad_chunks.contains(&g.chunk_of(root_off));
        match blocks.binary_search_by_key(&root_off, |b| b.offset) {
            Ok(k) if blocks[k].size >= root_size => {}
            // Its chunk's word is damaged (reported above): its blocks are unknown.
            _ if in_bad_chunk => {}
            _ => r.damage.push(Corruption {
                structure: "root line".into(),
                offset: base + ROOT_LINE,
                field: "root",
                expected: "the offset of an allocated block of at least the root's size".into(),
                found: format!("{root_off:#x} ({root_size} bytes)"),
            }),
        }
    }
    if reachability && r.pending.is_empty() && r.damage.is_empty() {
        r.reachability_checked = true;
        r.leaked = unreachable_blocks(medium, base, &blocks, root_off);
    }
    Ok(r)
}

fn unreachable_blocks(
    medium: &dyn Medium,
    base: u64,
    blocks: &[BlockInfo],
    root: u64,
) -> Vec<BlockInfo> {
    let find = |v: u64| -> Option<usize> {
        let k = blocks.partition_point(|b| b.offset <= v);
        (k > 0 && v < blocks[k - 1].offset + blocks[k - 1].size).then(|| k - 1)
    };
    let mut seen = vec![false; blocks.len()];
    let mut stack = Vec::new();
    if let Some(k) = find(root) {
        seen[k] = true;
        stack.push(k);
    }
    let mut buf = Vec::new();
    while let Some(k) = stack.pop() {
        let b = blocks[k];
        buf.resize(b.size as usize, 0);
        medium.read((base + b.offset) as usize, &mut buf);
        for w in buf.chunks_exact(8) {
            let v = u64::from_le_bytes(w.try_into().expect("8"));
            if let Some(t) = find(v)
                && !seen[t]
            {
                seen[t] = true;
                stack.push(t);
            }
        }
    }
    blocks
        .iter()
        .zip(seen)
        .filter(|(_, s)| !s)
        .map(|(b, _)| *b)
        .collect()
}
