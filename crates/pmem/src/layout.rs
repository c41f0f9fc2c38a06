//! Where everything lives in a pool, defined once.
//!
//! `docs/format/pool.md` carries the same tables; `tests/format_doc.rs` checks the two agree.
//!
//! ```text
//! page 0  header copy 0: immutable part at 0, mutable slot 0 at 2048
//! page 1  header copy 1: immutable part at 0, mutable slot 1 at 2048
//! page 2  region directory copy 0
//! page 3  region directory copy 1
//! page 4… region space (regions aligned to 4 KiB or 2 MiB)
//! ```

/// One fixed-size field of an on-media structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// Name as in the format document.
    pub name: &'static str,
    /// Offset from the start of the structure.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
}

impl Field {
    /// A field of `size` bytes at `offset`.
    pub const fn new(name: &'static str, offset: usize, size: usize) -> Field {
        Field { name, offset, size }
    }
    /// One past the last byte.
    pub const fn end(&self) -> usize {
        self.offset + self.size
    }
}

/// Page size of every pool (the unit of regions, checksums and write tracking).
pub const PAGE_SIZE: usize = 4096;
/// Large-page alignment a region may ask for.
pub const HUGE_PAGE_SIZE: usize = 2 << 20;
/// Offsets of the two header pages.
pub const HEADER_COPY_OFFSETS: [usize; 2] = [0, PAGE_SIZE];
/// Offset of the mutable slot inside its header page.
pub const SLOT_OFFSET_IN_PAGE: usize = 2048;
/// Offsets of the two region-directory pages.
pub const DIRECTORY_COPY_OFFSETS: [usize; 2] = [2 * PAGE_SIZE, 3 * PAGE_SIZE];
/// Bytes of pool metadata before the region space.
pub const METADATA_BYTES: usize = 4 * PAGE_SIZE;
/// Smallest pool: metadata plus twelve pages of region space.
pub const POOL_SIZE_MIN: u64 = 64 * 1024;
/// Largest pool a single backing file may hold (64 TiB).
pub const POOL_SIZE_MAX: u64 = 1 << 46;

/// Magic at the start of each header copy.
pub const HEADER_MAGIC: [u8; 8] = *b"KAVACHPL";
/// Format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Size of the immutable header part, its CRC included.
pub const HEADER_BYTES: usize = 256;

/// Feature bits this build understands (none yet in any class).
pub const FEATURES_COMPAT_KNOWN: u64 = 0;
/// Read-only-compatible feature bits this build understands.
pub const FEATURES_RO_COMPAT_KNOWN: u64 = 0;
/// Incompatible feature bit: the pool grows. Its size is the current mutable slot's
/// `pool_size` (or the header's while that is 0), and the file may be longer than that size.
pub const FEATURES_INCOMPAT_GROWABLE: u64 = 1;
/// Incompatible feature bits this build understands.
pub const FEATURES_INCOMPAT_KNOWN: u64 = FEATURES_INCOMPAT_GROWABLE;

/// Fields of the immutable header part (offsets from the start of a header page).
pub mod header {
    use super::Field;
    pub const MAGIC: Field = Field::new("magic", 0, 8);
    pub const FORMAT_VERSION: Field = Field::new("format_version", 8, 4);
    pub const COPY_INDEX: Field = Field::new("copy_index", 12, 4);
    pub const FEATURES_COMPAT: Field = Field::new("features_compat", 16, 8);
    pub const FEATURES_RO_COMPAT: Field = Field::new("features_ro_compat", 24, 8);
    pub const FEATURES_INCOMPAT: Field = Field::new("features_incompat", 32, 8);
    pub const POOL_UUID: Field = Field::new("pool_uuid", 40, 16);
    pub const SET_UUID: Field = Field::new("set_uuid", 56, 16);
    pub const MEMBER_INDEX: Field = Field::new("member_index", 72, 4);
    pub const MEMBER_COUNT: Field = Field::new("member_count", 76, 4);
    pub const PAGE_SIZE: Field = Field::new("page_size", 80, 4);
    pub const DOMAIN: Field = Field::new("domain", 84, 4);
    pub const POOL_SIZE: Field = Field::new("pool_size", 88, 8);
    pub const CREATED_NS: Field = Field::new("created_ns", 96, 8);
    pub const RESERVED: Field = Field::new("reserved", 104, 148);
    pub const CRC32C: Field = Field::new("crc32c", 252, 4);
    /// Every field in order; together they tile `[0, HEADER_BYTES)`.
    pub const ALL: &[Field] = &[
        MAGIC,
        FORMAT_VERSION,
        COPY_INDEX,
        FEATURES_COMPAT,
        FEATURES_RO_COMPAT,
        FEATURES_INCOMPAT,
        POOL_UUID,
        SET_UUID,
        MEMBER_INDEX,
        MEMBER_COUNT,
        PAGE_SIZE,
        DOMAIN,
        POOL_SIZE,
        CREATED_NS,
        RESERVED,
        CRC32C,
    ];
}

/// Size of a mutable slot, its CRC included.
pub const SLOT_BYTES: usize = 64;
/// Flag bit: the pool was closed cleanly.
pub const SLOT_FLAG_CLEAN_SHUTDOWN: u64 = 1;
/// All flag bits this build defines.
pub const SLOT_FLAGS_KNOWN: u64 = SLOT_FLAG_CLEAN_SHUTDOWN;

/// Fields of a mutable slot (offsets from the start of the slot).
pub mod slot {
    use super::Field;
    pub const SEQUENCE: Field = Field::new("sequence", 0, 8);
    pub const FLAGS: Field = Field::new("flags", 8, 8);
    pub const DIRECTORY_GENERATION: Field = Field::new("directory_generation", 16, 8);
    pub const POOL_SIZE: Field = Field::new("pool_size", 24, 8);
    pub const RESERVED: Field = Field::new("reserved", 32, 28);
    pub const CRC32C: Field = Field::new("crc32c", 60, 4);
    /// Every field in order; together they tile `[0, SLOT_BYTES)`.
    pub const ALL: &[Field] = &[
        SEQUENCE,
        FLAGS,
        DIRECTORY_GENERATION,
        POOL_SIZE,
        RESERVED,
        CRC32C,
    ];
}

/// Magic at the start of each directory copy.
pub const DIRECTORY_MAGIC: [u8; 8] = *b"KVREGDIR";
/// Size of the directory's own header.
pub const DIRECTORY_HEADER_BYTES: usize = 64;
/// Size of one directory entry.
pub const DIRECTORY_ENTRY_BYTES: usize = 64;
/// Entries that fit in one directory page.
pub const DIRECTORY_ENTRIES_MAX: usize =
    (PAGE_SIZE - DIRECTORY_HEADER_BYTES) / DIRECTORY_ENTRY_BYTES;
/// Longest region name, in bytes of UTF-8.
pub const REGION_NAME_BYTES_MAX: usize = 32;

/// Fields of the directory header (offsets from the start of a directory page).
pub mod directory {
    use super::Field;
    pub const MAGIC: Field = Field::new("magic", 0, 8);
    pub const GENERATION: Field = Field::new("generation", 8, 8);
    pub const ENTRY_COUNT: Field = Field::new("entry_count", 16, 4);
    pub const ENTRY_MAX: Field = Field::new("entry_max", 20, 4);
    pub const RESERVED: Field = Field::new("reserved", 24, 36);
    pub const CRC32C: Field = Field::new("crc32c", 60, 4);
    /// Every field in order; together they tile the 64-byte directory header.
    pub const ALL: &[Field] = &[MAGIC, GENERATION, ENTRY_COUNT, ENTRY_MAX, RESERVED, CRC32C];
}

/// Fields of a directory entry (offsets from the start of the entry).
pub mod entry {
    use super::Field;
    pub const NAME: Field = Field::new("name", 0, 32);
    pub const KIND: Field = Field::new("kind", 32, 4);
    pub const ALIGN_LOG2: Field = Field::new("align_log2", 36, 1);
    pub const RESERVED_A: Field = Field::new("reserved_a", 37, 3);
    pub const OFFSET: Field = Field::new("offset", 40, 8);
    pub const LENGTH: Field = Field::new("length", 48, 8);
    pub const RESERVED_B: Field = Field::new("reserved_b", 56, 8);
    /// Every field in order; together they tile one 64-byte entry.
    pub const ALL: &[Field] = &[
        NAME, KIND, ALIGN_LOG2, RESERVED_A, OFFSET, LENGTH, RESERVED_B,
    ];
}

// The immutable header and the slot share a page without overlapping.
const _: () = assert!(HEADER_BYTES <= SLOT_OFFSET_IN_PAGE);
const _: () = assert!(SLOT_OFFSET_IN_PAGE + SLOT_BYTES <= PAGE_SIZE);

pub(crate) fn get<const N: usize>(buf: &[u8], f: Field) -> [u8; N] {
    assert_eq!(f.size, N, "field {} read with the wrong width", f.name);
    let mut out = [0u8; N];
    out.copy_from_slice(&buf[f.offset..f.end()]);
    out
}
pub(crate) fn get_u32(buf: &[u8], f: Field) -> u32 {
    u32::from_le_bytes(get(buf, f))
}
pub(crate) fn get_u64(buf: &[u8], f: Field) -> u64 {
    u64::from_le_bytes(get(buf, f))
}
pub(crate) fn put(buf: &mut [u8], f: Field, bytes: &[u8]) {
    assert_eq!(
        f.size,
        bytes.len(),
        "field {} written with the wrong width",
        f.name
    );
    buf[f.offset..f.end()].copy_from_slice(bytes);
}
pub(crate) fn put_u32(buf: &mut [u8], f: Field, v: u32) {
    put(buf, f, &v.to_le_bytes());
}
pub(crate) fn put_u64(buf: &mut [u8], f: Field, v: u64) {
    put(buf, f, &v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_tiles(fields: &[Field], total: usize) {
        let mut at = 0;
        for f in fields {
            assert_eq!(f.offset, at, "gap or overlap before {}", f.name);
            at = f.end();
        }
        assert_eq!(at, total);
    }

    #[test]
    fn every_structure_is_tiled_by_its_fields() {
        assert_tiles(header::ALL, HEADER_BYTES);
        assert_tiles(slot::ALL, SLOT_BYTES);
        assert_tiles(directory::ALL, DIRECTORY_HEADER_BYTES);
        assert_tiles(entry::ALL, DIRECTORY_ENTRY_BYTES);
        assert_eq!(
            DIRECTORY_HEADER_BYTES + DIRECTORY_ENTRIES_MAX * DIRECTORY_ENTRY_BYTES,
            PAGE_SIZE
        );
        assert_eq!(DIRECTORY_COPY_OFFSETS[1] + PAGE_SIZE, METADATA_BYTES);
    }
}
