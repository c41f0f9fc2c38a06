//! The region directory: named, aligned ranges of the pool that higher layers own.
//!
//! Two copies alternate by generation (`generation % 2`); the mutable header slot names the
//! current generation. An update writes the whole new directory into the other copy, persists it,
//! then writes a new header slot: a crash before the slot is durable leaves the old directory in
//! force, after it the new one. There is no state in between.

use crate::error::Corruption;
use crate::header::{Uuid, show_bytes};
use crate::layout::{
    self, DIRECTORY_ENTRIES_MAX, DIRECTORY_ENTRY_BYTES, DIRECTORY_HEADER_BYTES, PAGE_SIZE,
    directory as d, entry as e, get, get_u32, get_u64, put, put_u32, put_u64,
};

/// What a region is for. Higher layers pick their own tags; zero is not a valid kind.
pub type RegionKind = u32;

/// Region kinds the layers of Kavach use, so `pool info` can name them.
pub mod kinds {
    use super::RegionKind;
    /// A plain byte range (the `kavach demo` and tests use it).
    pub const RAW: RegionKind = 1;
    /// Integrity metadata: checksums, parity, dirty bitmaps.
    pub const INTEGRITY: RegionKind = 2;
    /// A persistent heap.
    pub const HEAP: RegionKind = 3;
    /// An Arcadia log.
    pub const LOG: RegionKind = 4;
    /// DIPPER shadow data.
    pub const DIPPER: RegionKind = 5;
    /// The flush-on-fail record (`docs/format/fof.md`).
    pub const FOF: RegionKind = 6;

    /// A human name for a kind tag.
    pub fn name(kind: RegionKind) -> &'static str {
        match kind {
            RAW => "raw",
            INTEGRITY => "integrity",
            HEAP => "heap",
            LOG => "log",
            DIPPER => "dipper",
            FOF => "fof",
            _ => "other",
        }
    }
}

/// Alignment of a region's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Alignment {
    /// 4 KiB: the page size.
    #[serde(rename = "4KiB")]
    Page,
    /// 2 MiB: a huge page.
    #[serde(rename = "2MiB")]
    Huge,
}

impl Alignment {
    /// log2 of the alignment in bytes, as stored.
    pub const fn log2(self) -> u8 {
        match self {
            Alignment::Page => 12,
            Alignment::Huge => 21,
        }
    }
    /// The alignment in bytes.
    pub const fn bytes(self) -> u64 {
        1 << self.log2()
    }
    fn from_log2(v: u8) -> Option<Alignment> {
        match v {
            12 => Some(Alignment::Page),
            21 => Some(Alignment::Huge),
            _ => None,
        }
    }
}

/// One named region.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Region {
    /// Unique name, 1 to 32 bytes of UTF-8.
    pub name: String,
    /// Kind tag chosen by the owning layer.
    pub kind: RegionKind,
    /// Alignment of `offset`.
    pub align: Alignment,
    /// Byte offset of the region in the pool.
    pub offset: u64,
    /// Length in bytes (a multiple of the page size).
    pub length: u64,
}

impl Region {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.offset + self.length
    }
}

/// Check a region name: 1 to 32 bytes of UTF-8, no NUL, no control characters.
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a region name cannot be empty".into());
    }
    if name.len() > layout::REGION_NAME_BYTES_MAX {
        return Err(format!(
            "`{name}` is {} bytes; a region name has at most {} bytes",
            name.len(),
            layout::REGION_NAME_BYTES_MAX
        ));
    }
    if name.chars().any(|c| c.is_control()) {
        return Err("a region name cannot contain control characters".into());
    }
    Ok(())
}

/// The directory as decoded: its generation and its regions in stored order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directory {
    /// Generation; the copy is `generation % 2`.
    pub generation: u64,
    /// The regions.
    pub regions: Vec<Region>,
}

fn directory_crc(uuid: &Uuid, page: &[u8]) -> u32 {
    let mut c = crc32c::crc32c(&uuid.0);
    c = crc32c::crc32c_append(c, &page[..d::CRC32C.offset]);
    crc32c::crc32c_append(c, &page[DIRECTORY_HEADER_BYTES..PAGE_SIZE])
}

impl Directory {
    /// Copy index this generation lives in.
    pub fn copy_index(&self) -> usize {
        (self.generation % 2) as usize
    }

    /// Encode as a full page. The CRC binds the pool UUID.
    pub fn encode(&self, uuid: &Uuid) -> Vec<u8> {
        assert!(self.regions.len() <= DIRECTORY_ENTRIES_MAX);
        assert!(self.generation != 0);
        let mut page = vec![0u8; PAGE_SIZE];
        put(&mut page, d::MAGIC, &layout::DIRECTORY_MAGIC);
        put_u64(&mut page, d::GENERATION, self.generation);
        put_u32(&mut page, d::ENTRY_COUNT, self.regions.len() as u32);
        put_u32(&mut page, d::ENTRY_MAX, DIRECTORY_ENTRIES_MAX as u32);
        for (i, r) in self.regions.iter().enumerate() {
            let at = DIRECTORY_HEADER_BYTES + i * DIRECTORY_ENTRY_BYTES;
            let ent = &mut page[at..at + DIRECTORY_ENTRY_BYTES];
            let mut name = [0u8; layout::REGION_NAME_BYTES_MAX];
            assert!(
                validate_name(&r.name).is_ok(),
                "invalid region name reached encode"
            );
            name[..r.name.len()].copy_from_slice(r.name.as_bytes());
            put(ent, e::NAME, &name);
            put_u32(ent, e::KIND, r.kind);
            put(ent, e::ALIGN_LOG2, &[r.align.log2()]);
            put_u64(ent, e::OFFSET, r.offset);
            put_u64(ent, e::LENGTH, r.length);
        }
        let crc = directory_crc(uuid, &page);
        put_u32(&mut page, d::CRC32C, crc);
        page
    }

    /// Decode directory copy `copy`, which must hold `generation`, for a pool of `pool_size`.
    ///
    /// Checks the magic, CRC, generation, counts, every entry's fields, that unused entries are
    /// zero, that regions lie in the region space without overlapping, and that names are unique.
    pub fn decode(
        page: &[u8],
        copy: usize,
        uuid: &Uuid,
        generation: u64,
        pool_size: u64,
    ) -> Result<Directory, Corruption> {
        assert!(copy < 2 && page.len() >= PAGE_SIZE);
        let page = &page[..PAGE_SIZE];
        let base = layout::DIRECTORY_COPY_OFFSETS[copy] as u64;
        let structure = format!("region directory copy {copy}");
        let bad = |at: usize, field: &'static str, expected: String, found: String| Corruption {
            structure: structure.clone(),
            offset: base + at as u64,
            field,
            expected,
            found,
        };
        let magic: [u8; 8] = get(page, d::MAGIC);
        if magic != layout::DIRECTORY_MAGIC {
            return Err(bad(
                0,
                d::MAGIC.name,
                show_bytes(&layout::DIRECTORY_MAGIC),
                show_bytes(&magic),
            ));
        }
        let stored = get_u32(page, d::CRC32C);
        let computed = directory_crc(uuid, page);
        if stored != computed {
            return Err(bad(
                d::CRC32C.offset,
                d::CRC32C.name,
                format!("{computed:#010x}"),
                format!("{stored:#010x}"),
            ));
        }
        let found_gen = get_u64(page, d::GENERATION);
        if found_gen != generation {
            return Err(bad(
                d::GENERATION.offset,
                d::GENERATION.name,
                format!("{generation} (named by the header)"),
                found_gen.to_string(),
            ));
        }
        let max = get_u32(page, d::ENTRY_MAX);
        if max as usize != DIRECTORY_ENTRIES_MAX {
            return Err(bad(
                d::ENTRY_MAX.offset,
                d::ENTRY_MAX.name,
                DIRECTORY_ENTRIES_MAX.to_string(),
                max.to_string(),
            ));
        }
        let count = get_u32(page, d::ENTRY_COUNT);
        if count as usize > DIRECTORY_ENTRIES_MAX {
            return Err(bad(
                d::ENTRY_COUNT.offset,
                d::ENTRY_COUNT.name,
                format!("at most {DIRECTORY_ENTRIES_MAX}"),
                count.to_string(),
            ));
        }
        if page[d::RESERVED.offset..d::RESERVED.end()]
            .iter()
            .any(|&b| b != 0)
        {
            return Err(bad(
                d::RESERVED.offset,
                d::RESERVED.name,
                "zero".into(),
                "non-zero bytes".into(),
            ));
        }
        let mut regions: Vec<Region> = Vec::with_capacity(count as usize);
        for i in 0..DIRECTORY_ENTRIES_MAX {
            let at = DIRECTORY_HEADER_BYTES + i * DIRECTORY_ENTRY_BYTES;
            let ent = &page[at..at + DIRECTORY_ENTRY_BYTES];
            let field_at = |f: layout::Field| at + f.offset;
            if i >= count as usize {
                if ent.iter().any(|&b| b != 0) {
                    return Err(bad(
                        at,
                        "unused entry",
                        "all zero".into(),
                        format!("entry {i} in use"),
                    ));
                }
                continue;
            }
            let what = |f: layout::Field| (field_at(f), f.name);
            let name_bytes: [u8; layout::REGION_NAME_BYTES_MAX] = get(ent, e::NAME);
            let len = name_bytes
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(name_bytes.len());
            let name = std::str::from_utf8(&name_bytes[..len])
                .ok()
                .filter(|n| validate_name(n).is_ok() && name_bytes[len..].iter().all(|&b| b == 0));
            let Some(name) = name else {
                let (o, f) = what(e::NAME);
                return Err(bad(
                    o,
                    f,
                    "1-32 bytes of UTF-8, zero padded".into(),
                    show_bytes(&name_bytes),
                ));
            };
            let kind = get_u32(ent, e::KIND);
            if kind == 0 {
                let (o, f) = what(e::KIND);
                return Err(bad(o, f, "non-zero".into(), "0".into()));
            }
            let [log2] = get::<1>(ent, e::ALIGN_LOG2);
            let Some(align) = Alignment::from_log2(log2) else {
                let (o, f) = what(e::ALIGN_LOG2);
                return Err(bad(o, f, "12 or 21".into(), log2.to_string()));
            };
            for f in [e::RESERVED_A, e::RESERVED_B] {
                if ent[f.offset..f.end()].iter().any(|&b| b != 0) {
                    let (o, f) = what(f);
                    return Err(bad(o, f, "zero".into(), "non-zero bytes".into()));
                }
            }
            let offset = get_u64(ent, e::OFFSET);
            let length = get_u64(ent, e::LENGTH);
            if offset < layout::METADATA_BYTES as u64 || offset % align.bytes() != 0 {
                let (o, f) = what(e::OFFSET);
                return Err(bad(
                    o,
                    f,
                    format!(
                        "a multiple of {:#x} at or after {:#x}",
                        align.bytes(),
                        layout::METADATA_BYTES
                    ),
                    format!("{offset:#x}"),
                ));
            }
            let end = offset.checked_add(length);
            if length == 0 || length % PAGE_SIZE as u64 != 0 || end.is_none_or(|e| e > pool_size) {
                let (o, f) = what(e::LENGTH);
                return Err(bad(
                    o,
                    f,
                    format!(
                        "a non-zero multiple of {PAGE_SIZE} ending by {pool_size:#x} (region at \
                         {offset:#x})"
                    ),
                    length.to_string(),
                ));
            }
            let region = Region {
                name: name.to_string(),
                kind,
                align,
                offset,
                length,
            };
            if let Some(other) = regions.iter().find(|r| r.name == region.name) {
                let (o, f) = what(e::NAME);
                return Err(bad(
                    o,
                    f,
                    "a unique name".into(),
                    format!("`{}` again", other.name),
                ));
            }
            if let Some(other) = regions
                .iter()
                .find(|r| r.offset < region.end() && region.offset < r.end())
            {
                let (o, f) = what(e::OFFSET);
                return Err(bad(
                    o,
                    f,
                    format!(
                        "no overlap with region `{}` [{:#x}, {:#x})",
                        other.name,
                        other.offset,
                        other.end()
                    ),
                    format!("[{:#x}, {:#x})", region.offset, region.end()),
                ));
            }
            regions.push(region);
        }
        Ok(Directory {
            generation,
            regions,
        })
    }

    /// Find the lowest offset where `length` bytes aligned to `align` fit in `[METADATA_BYTES,
    /// pool_size)` without overlapping an existing region.
    pub fn find_space(&self, length: u64, align: Alignment, pool_size: u64) -> Option<u64> {
        let mut taken: Vec<(u64, u64)> = self.regions.iter().map(|r| (r.offset, r.end())).collect();
        taken.sort_unstable();
        let mut candidate = layout::METADATA_BYTES as u64;
        for (start, end) in taken
            .into_iter()
            .chain(std::iter::once((pool_size, pool_size)))
        {
            let aligned = candidate.checked_next_multiple_of(align.bytes())?;
            if aligned.checked_add(length)? <= start {
                return Some(aligned);
            }
            candidate = candidate.max(end);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: Uuid = Uuid([5; 16]);
    const SIZE: u64 = 8 << 20;

    fn sample() -> Directory {
        Directory {
            generation: 3,
            regions: vec![
                Region {
                    name: "alpha".into(),
                    kind: kinds::RAW,
                    align: Alignment::Page,
                    offset: 16384,
                    length: 8192,
                },
                Region {
                    name: "β-huge".into(),
                    kind: kinds::HEAP,
                    align: Alignment::Huge,
                    offset: 2 << 20,
                    length: 2 << 20,
                },
            ],
        }
    }

    fn refix(page: &mut [u8]) {
        let crc = directory_crc(&UUID, page);
        page[d::CRC32C.offset..d::CRC32C.end()].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn round_trip() {
        let page = sample().encode(&UUID);
        assert_eq!(Directory::decode(&page, 1, &UUID, 3, SIZE), Ok(sample()));
    }

    #[test]
    fn every_directory_field_is_validated() {
        let entry0 = DIRECTORY_HEADER_BYTES;
        let entry1 = DIRECTORY_HEADER_BYTES + DIRECTORY_ENTRY_BYTES;
        let entry2 = DIRECTORY_HEADER_BYTES + 2 * DIRECTORY_ENTRY_BYTES;
        // (absolute offset in the page, bytes to write, the field the error must name)
        let cases: Vec<(usize, Vec<u8>, &str)> = vec![
            (d::MAGIC.offset, b"KVREGDIX".to_vec(), "magic"),
            (
                d::GENERATION.offset,
                4u64.to_le_bytes().to_vec(),
                "generation",
            ),
            (
                d::ENTRY_COUNT.offset,
                64u32.to_le_bytes().to_vec(),
                "entry_count",
            ),
            (
                d::ENTRY_COUNT.offset,
                1u32.to_le_bytes().to_vec(),
                "unused entry",
            ),
            (
                d::ENTRY_MAX.offset,
                62u32.to_le_bytes().to_vec(),
                "entry_max",
            ),
            (d::RESERVED.offset, vec![1], "reserved"),
            (entry0 + e::NAME.offset, vec![0], "name"),
            (entry0 + e::NAME.offset, vec![0xff, 0xfe], "name"),
            (entry0 + e::NAME.offset, b"a\0b".to_vec(), "name"),
            (entry0 + e::NAME.offset, b"\x07".to_vec(), "name"),
            (entry1 + e::NAME.offset, b"alpha\0\0\0".to_vec(), "name"),
            (entry0 + e::KIND.offset, vec![0, 0, 0, 0], "kind"),
            (entry0 + e::ALIGN_LOG2.offset, vec![13], "align_log2"),
            (entry0 + e::RESERVED_A.offset, vec![1], "reserved_a"),
            (entry0 + e::RESERVED_B.offset, vec![1], "reserved_b"),
            (
                entry0 + e::OFFSET.offset,
                4096u64.to_le_bytes().to_vec(),
                "offset",
            ),
            (
                entry0 + e::OFFSET.offset,
                16385u64.to_le_bytes().to_vec(),
                "offset",
            ),
            (
                entry1 + e::OFFSET.offset,
                (3u64 << 20).to_le_bytes().to_vec(),
                "offset",
            ),
            (
                entry0 + e::OFFSET.offset,
                ((2u64 << 20) - 4096).to_le_bytes().to_vec(),
                "offset",
            ),
            (
                entry0 + e::LENGTH.offset,
                0u64.to_le_bytes().to_vec(),
                "length",
            ),
            (
                entry0 + e::LENGTH.offset,
                100u64.to_le_bytes().to_vec(),
                "length",
            ),
            (
                entry0 + e::LENGTH.offset,
                u64::MAX.to_le_bytes().to_vec(),
                "length",
            ),
            (
                entry1 + e::LENGTH.offset,
                SIZE.to_le_bytes().to_vec(),
                "length",
            ),
            (entry2 + e::KIND.offset, vec![1], "unused entry"),
        ];
        for (at, value, want) in cases {
            let mut page = sample().encode(&UUID);
            page[at..at + value.len()].copy_from_slice(&value);
            refix(&mut page);
            let err = Directory::decode(&page, 1, &UUID, 3, SIZE).expect_err(want);
            assert_eq!(err.field, want, "writing {value:?} at {at}: {err}");
            assert!(err.offset >= layout::DIRECTORY_COPY_OFFSETS[1] as u64);
        }
        // Without refixing, any flip is a CRC error, and so is another pool's UUID.
        let mut page = sample().encode(&UUID);
        page[entry0 + e::LENGTH.offset] ^= 1;
        assert_eq!(
            Directory::decode(&page, 1, &UUID, 3, SIZE)
                .unwrap_err()
                .field,
            "crc32c"
        );
        let page = sample().encode(&UUID);
        assert_eq!(
            Directory::decode(&page, 1, &Uuid([6; 16]), 3, SIZE)
                .unwrap_err()
                .field,
            "crc32c"
        );
    }

    #[test]
    fn names_are_checked() {
        assert!(validate_name("").is_err());
        assert!(validate_name(&"x".repeat(33)).is_err());
        assert!(validate_name(&"x".repeat(32)).is_ok());
        assert!(validate_name("a\nb").is_err());
        assert!(validate_name("données").is_ok());
    }

    #[test]
    fn space_is_found_first_fit_and_aligned() {
        let dir = sample();
        assert_eq!(
            dir.find_space(4096, Alignment::Page, SIZE),
            Some(16384 + 8192)
        );
        // Between the first region's end and the huge one there are 2 MiB - 24 KiB.
        assert_eq!(
            dir.find_space((2 << 20) - 24576, Alignment::Page, SIZE),
            Some(24576)
        );
        assert_eq!(
            dir.find_space((2 << 20) - 24575 + 4095, Alignment::Page, SIZE),
            Some(4 << 20)
        );
        assert_eq!(
            dir.find_space(2 << 20, Alignment::Huge, SIZE),
            Some(4 << 20)
        );
        assert_eq!(dir.find_space(SIZE, Alignment::Page, SIZE), None);
        let empty = Directory {
            generation: 1,
            regions: vec![],
        };
        assert_eq!(
            empty.find_space(SIZE - 16384, Alignment::Page, SIZE),
            Some(16384)
        );
        assert_eq!(empty.find_space(SIZE - 16383, Alignment::Page, SIZE), None);
    }
}
