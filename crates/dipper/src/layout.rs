//! On-media layout of a DIPPER store: region names, the root object and the shadow slots.
//! `docs/format/dipper.md` documents every constant here; a test checks it.

/// Region of the root object.
pub const ROOT_REGION: &str = "dipper.root";
/// Regions of the two operation logs.
pub const LOG_REGIONS: [&str; 2] = ["dipper.log.0", "dipper.log.1"];
/// Regions of the two shadow slots.
pub const SLOT_REGIONS: [&str; 2] = ["dipper.slot.0", "dipper.slot.1"];
/// Bytes of the root region.
pub const ROOT_REGION_BYTES: u64 = 4096;

/// Offsets of the two root copies in the root region, each on its own cache line.
pub const ROOT_COPY_OFFSETS: [usize; 2] = [0, 64];
/// Bytes of one root copy.
pub const ROOT_BYTES: usize = 64;
/// Root magic (`KVDROOT1`).
pub const ROOT_MAGIC: u64 = u64::from_le_bytes(*b"KVDROOT1");
/// Root field: magic.
pub const ROOT_MAGIC_AT: usize = 0;
/// Root field: sequence number; the valid copy with the higher one is in force.
pub const ROOT_SEQ_AT: usize = 8;
/// Root field: index of the active log (0 or 1).
pub const ROOT_ACTIVE_AT: usize = 16;
/// Root field: checkpoint state ([`STATE_IDLE`] or [`STATE_CHECKPOINTING`]).
pub const ROOT_STATE_AT: usize = 20;
/// Root field: slot holding the current shadow image, or [`SLOT_NONE`].
pub const ROOT_SLOT_AT: usize = 24;
/// Root field: number of shards (fixed at creation).
pub const ROOT_SHARDS_AT: usize = 28;
/// Root field: number of the checkpoint whose image the slot holds (0: none yet).
pub const ROOT_CHECKPOINT_AT: usize = 32;
/// Root field: a word the state machine owns (fixed at creation; DIPPER only keeps it). The
/// machine says what it means, and refuses a value it does not know.
pub const ROOT_MACHINE_AT: usize = 40;
/// Root field: bytes 44..56 must be zero.
pub const ROOT_RESERVED_AT: usize = 44;
/// Root field: CRC-32C of bytes 0..56, seeded with the pool UUID and the copy index.
pub const ROOT_CRC_AT: usize = 56;
/// Root field: bytes 60..64 must be zero.
pub const ROOT_RESERVED2_AT: usize = 60;

/// No checkpoint is running.
pub const STATE_IDLE: u32 = 0;
/// A checkpoint swapped the logs and is building the next image from the archived log.
pub const STATE_CHECKPOINTING: u32 = 1;
/// No shadow image exists yet (the store starts empty).
pub const SLOT_NONE: u32 = u32::MAX;
/// The most shards a store may have.
pub const SHARDS_MAX: usize = 1024;

/// Slot header magic (`KVDSLOT1`).
pub const SLOT_MAGIC: u64 = u64::from_le_bytes(*b"KVDSLOT1");
/// Bytes of the slot header (it holds the arena lengths of up to [`SHARDS_MAX`] shards).
pub const SLOT_HEADER_BYTES: usize = 16384;
/// Slot header field: magic.
pub const SLOT_MAGIC_AT: usize = 0;
/// Slot header field: checkpoint number of the image.
pub const SLOT_CHECKPOINT_AT: usize = 8;
/// Slot header field: slot index (0 or 1).
pub const SLOT_INDEX_AT: usize = 16;
/// Slot header field: number of shards.
pub const SLOT_SHARDS_AT: usize = 20;
/// Slot header field: page-table entries in use.
pub const SLOT_USED_AT: usize = 24;
/// Slot header field: page capacity of the slot.
pub const SLOT_CAPACITY_AT: usize = 32;
/// Slot header field: CRC-32C of bytes 0..40 and the arena-length array, seeded with the pool
/// UUID and the slot index.
pub const SLOT_CRC_AT: usize = 40;
/// Slot header field: bytes 44..64 must be zero.
pub const SLOT_RESERVED_AT: usize = 44;
/// Slot header field: arena length (bytes) of shard i at `SLOT_LENGTHS_AT + 8 * i`.
pub const SLOT_LENGTHS_AT: usize = 64;
/// Offset of the page table in a slot.
pub const SLOT_TABLE_AT: usize = SLOT_HEADER_BYTES;
/// Bytes of one page-table entry.
pub const SLOT_ENTRY_BYTES: usize = 16;
/// Entry field: shard of the page.
pub const ENTRY_SHARD_AT: usize = 0;
/// Entry field: page number within the shard's arena.
pub const ENTRY_PAGE_AT: usize = 4;
/// Entry field: CRC-32C of the page, seeded with the pool UUID, slot, shard and page number.
pub const ENTRY_CRC_AT: usize = 8;
/// Entry field: bytes 12..16 must be zero (format 1).
pub const ENTRY_RESERVED_AT: usize = 12;
/// Entry field (format 2): the frame holding the page.
pub const ENTRY_FRAME_AT: usize = 12;
/// Slot header magic of format 2 (`KVDSLOT2`): a header and a table whose entries name frames.
pub const SLOT2_MAGIC: u64 = u64::from_le_bytes(*b"KVDSLOT2");
/// Frame regions are named this and their number: `dipper.frames.0`, `dipper.frames.1`, ...
pub const FRAME_REGION_PREFIX: &str = "dipper.frames.";
/// Fewest frames a new frame region gets (1 MiB).
pub const FRAME_REGION_FRAMES_MIN: u64 = 256;

const _: () = assert!(SLOT_LENGTHS_AT + 8 * SHARDS_MAX <= SLOT_HEADER_BYTES);

/// The arenas of an image total at most this many times a slot's `pages_capacity` pages (a
/// slot holds the pages below each arena's top, not its unused tail; this bounds what loading
/// allocates).
pub const SLOT_ARENA_RATIO_MAX: u64 = 2;

/// Geometry of a slot region of `len` bytes: (page capacity, offset of the first page).
pub fn slot_geometry(len: u64) -> Option<(u64, u64)> {
    let page = crate::arena::PAGE as u64;
    let usable = len.checked_sub(SLOT_HEADER_BYTES as u64)?;
    let mut pages = usable / (page + SLOT_ENTRY_BYTES as u64);
    loop {
        let table = (pages * SLOT_ENTRY_BYTES as u64).next_multiple_of(page);
        let first = SLOT_TABLE_AT as u64 + table;
        if first + pages * page <= len {
            return (pages > 0).then_some((pages, first));
        }
        pages = pages.checked_sub(1)?;
    }
}

/// Op records in the log: `[u16 shard count][u16 shard ids...][op bytes]`; a count of
/// [`ALL_SHARDS`] means every shard and is followed directly by the op.
pub const ALL_SHARDS: u16 = u16::MAX;

use pmem::layout::Field;

/// Fields of a root copy, as `docs/format/dipper.md` lists them.
pub const ROOT_FIELDS: &[Field] = &[
    Field::new("magic", ROOT_MAGIC_AT, 8),
    Field::new("seq", ROOT_SEQ_AT, 8),
    Field::new("active_log", ROOT_ACTIVE_AT, 4),
    Field::new("state", ROOT_STATE_AT, 4),
    Field::new("slot", ROOT_SLOT_AT, 4),
    Field::new("shards", ROOT_SHARDS_AT, 4),
    Field::new("checkpoint", ROOT_CHECKPOINT_AT, 8),
    Field::new("machine", ROOT_MACHINE_AT, 4),
    Field::new("reserved", ROOT_RESERVED_AT, 12),
    Field::new("crc32c", ROOT_CRC_AT, 4),
    Field::new("reserved2", ROOT_RESERVED2_AT, 4),
];

/// Fields of a slot header (the arena-length array runs on to the end of the header).
pub const SLOT_HEADER_FIELDS: &[Field] = &[
    Field::new("magic", SLOT_MAGIC_AT, 8),
    Field::new("checkpoint", SLOT_CHECKPOINT_AT, 8),
    Field::new("slot_index", SLOT_INDEX_AT, 4),
    Field::new("shards", SLOT_SHARDS_AT, 4),
    Field::new("pages_used", SLOT_USED_AT, 8),
    Field::new("pages_capacity", SLOT_CAPACITY_AT, 8),
    Field::new("crc32c", SLOT_CRC_AT, 4),
    Field::new("reserved", SLOT_RESERVED_AT, 20),
    Field::new("arena_bytes", SLOT_LENGTHS_AT, 8 * SHARDS_MAX),
];

/// Fields of a slot page-table entry.
pub const SLOT_ENTRY_FIELDS: &[Field] = &[
    Field::new("shard", ENTRY_SHARD_AT, 4),
    Field::new("page", ENTRY_PAGE_AT, 4),
    Field::new("crc32c", ENTRY_CRC_AT, 4),
    Field::new("reserved", ENTRY_RESERVED_AT, 4),
];

/// Fields of an arena header.
pub const ARENA_FIELDS: &[Field] = &[
    Field::new("magic", 0, 8),
    Field::new("top", crate::arena::ARENA_TOP, 8),
    Field::new("live_bytes", crate::arena::ARENA_LIVE, 8),
    Field::new("blocks", crate::arena::ARENA_BLOCKS, 8),
    Field::new(
        "user",
        crate::arena::ARENA_USER,
        8 * crate::arena::ARENA_USER_WORDS,
    ),
    Field::new(
        "free_heads",
        crate::arena::ARENA_FREE,
        8 * crate::arena::CLASSES,
    ),
    Field::new(
        "reserved",
        crate::arena::ARENA_FREE + 8 * crate::arena::CLASSES,
        crate::arena::ARENA_HEADER - crate::arena::ARENA_FREE - 8 * crate::arena::CLASSES,
    ),
];
