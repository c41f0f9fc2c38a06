//! The pool header: an immutable part kept in two copies, and two alternating mutable slots.

use crate::domain::Domain;
use crate::error::{Corruption, PmemError};
use crate::layout::{self, get, get_u32, get_u64, header as h, put, put_u32, put_u64, slot as s};
use std::fmt;

/// A 128-bit identifier, random at pool creation.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Uuid(pub [u8; 16]);

impl Uuid {
    /// A random (version 4) UUID from the operating system's generator.
    pub fn random() -> std::io::Result<Uuid> {
        use std::io::Read;
        let mut b = [0u8; 16];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        Ok(Uuid(b))
    }
    /// True for the all-zero UUID, which no pool has.
    pub fn is_nil(&self) -> bool {
        self.0 == [0; 16]
    }
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl serde::Serialize for Uuid {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        ser.collect_str(self)
    }
}

/// The immutable part of the header: written once at creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolHeader {
    /// Compatible features (unknown bits are ignored).
    pub features_compat: u64,
    /// Read-only-compatible features (unknown bits allow read-only opens only).
    pub features_ro_compat: u64,
    /// Incompatible features (unknown bits refuse the open).
    pub features_incompat: u64,
    /// This pool's identity; bound into every checksum.
    pub pool_uuid: Uuid,
    /// The identity of the set of backing files this one belongs to.
    pub set_uuid: Uuid,
    /// Position of this file in its set.
    pub member_index: u32,
    /// Number of files in the set (1 for now).
    pub member_count: u32,
    /// Domain chosen at creation.
    pub domain: Domain,
    /// Bytes in this backing file.
    pub pool_size: u64,
    /// Creation time, nanoseconds since the Unix epoch.
    pub created_ns: u64,
}

fn structure_name(copy: usize) -> String {
    format!("pool header copy {copy}")
}

fn crc_of_header(bytes: &[u8]) -> u32 {
    crc32c::crc32c(&bytes[..h::CRC32C.offset])
}

impl PoolHeader {
    /// Encode as header copy `copy` (0 or 1).
    pub fn encode(&self, copy: usize) -> [u8; layout::HEADER_BYTES] {
        assert!(copy < 2);
        let mut b = [0u8; layout::HEADER_BYTES];
        put(&mut b, h::MAGIC, &layout::HEADER_MAGIC);
        put_u32(&mut b, h::FORMAT_VERSION, layout::FORMAT_VERSION);
        put_u32(&mut b, h::COPY_INDEX, copy as u32);
        put_u64(&mut b, h::FEATURES_COMPAT, self.features_compat);
        put_u64(&mut b, h::FEATURES_RO_COMPAT, self.features_ro_compat);
        put_u64(&mut b, h::FEATURES_INCOMPAT, self.features_incompat);
        put(&mut b, h::POOL_UUID, &self.pool_uuid.0);
        put(&mut b, h::SET_UUID, &self.set_uuid.0);
        put_u32(&mut b, h::MEMBER_INDEX, self.member_index);
        put_u32(&mut b, h::MEMBER_COUNT, self.member_count);
        put_u32(&mut b, h::PAGE_SIZE, layout::PAGE_SIZE as u32);
        put_u32(&mut b, h::DOMAIN, self.domain.code());
        put_u64(&mut b, h::POOL_SIZE, self.pool_size);
        put_u64(&mut b, h::CREATED_NS, self.created_ns);
        let crc = crc_of_header(&b);
        put_u32(&mut b, h::CRC32C, crc);
        b
    }

    /// Decode header copy `copy` from the first [`layout::HEADER_BYTES`] of its page.
    ///
    /// Every field is checked; the first bad one is reported. A copy whose magic is wrong is
    /// reported as such, so a caller can tell "not a pool" from "a damaged pool".
    pub fn decode(bytes: &[u8], copy: usize) -> Result<PoolHeader, Corruption> {
        assert!(copy < 2 && bytes.len() >= layout::HEADER_BYTES);
        let base = layout::HEADER_COPY_OFFSETS[copy] as u64;
        let bad = |f: layout::Field, expected: String, found: String| Corruption {
            structure: structure_name(copy),
            offset: base + f.offset as u64,
            field: f.name,
            expected,
            found,
        };
        let magic: [u8; 8] = get(bytes, h::MAGIC);
        if magic != layout::HEADER_MAGIC {
            return Err(bad(
                h::MAGIC,
                show_bytes(&layout::HEADER_MAGIC),
                show_bytes(&magic),
            ));
        }
        // Before the CRC: a newer format may lay out (and checksum) the rest differently, and
        // must be reported as a newer version, not as damage.
        let version = get_u32(bytes, h::FORMAT_VERSION);
        if version != layout::FORMAT_VERSION {
            return Err(bad(
                h::FORMAT_VERSION,
                layout::FORMAT_VERSION.to_string(),
                version.to_string(),
            ));
        }
        let stored = get_u32(bytes, h::CRC32C);
        let computed = crc_of_header(bytes);
        if stored != computed {
            return Err(bad(
                h::CRC32C,
                format!("{computed:#010x}"),
                format!("{stored:#010x}"),
            ));
        }
        let copy_index = get_u32(bytes, h::COPY_INDEX);
        if copy_index != copy as u32 {
            return Err(bad(h::COPY_INDEX, copy.to_string(), copy_index.to_string()));
        }
        let page_size = get_u32(bytes, h::PAGE_SIZE);
        if page_size as usize != layout::PAGE_SIZE {
            return Err(bad(
                h::PAGE_SIZE,
                layout::PAGE_SIZE.to_string(),
                page_size.to_string(),
            ));
        }
        let pool_uuid = Uuid(get(bytes, h::POOL_UUID));
        if pool_uuid.is_nil() {
            return Err(bad(h::POOL_UUID, "a non-zero UUID".into(), "zero".into()));
        }
        let set_uuid = Uuid(get(bytes, h::SET_UUID));
        if set_uuid.is_nil() {
            return Err(bad(h::SET_UUID, "a non-zero UUID".into(), "zero".into()));
        }
        let member_count = get_u32(bytes, h::MEMBER_COUNT);
        if member_count == 0 {
            return Err(bad(h::MEMBER_COUNT, "at least 1".into(), "0".into()));
        }
        let member_index = get_u32(bytes, h::MEMBER_INDEX);
        if member_index >= member_count {
            return Err(bad(
                h::MEMBER_INDEX,
                format!("below member_count {member_count}"),
                member_index.to_string(),
            ));
        }
        let code = get_u32(bytes, h::DOMAIN);
        let domain = Domain::from_code(code).ok_or_else(|| {
            bad(
                h::DOMAIN,
                "1 (adr), 2 (eadr), 3 (msync) or 4 (sim)".into(),
                code.to_string(),
            )
        })?;
        let pool_size = get_u64(bytes, h::POOL_SIZE);
        if !(layout::POOL_SIZE_MIN..=layout::POOL_SIZE_MAX).contains(&pool_size)
            || pool_size % layout::PAGE_SIZE as u64 != 0
        {
            return Err(bad(
                h::POOL_SIZE,
                format!(
                    "a multiple of {} in [{}, {}]",
                    layout::PAGE_SIZE,
                    layout::POOL_SIZE_MIN,
                    layout::POOL_SIZE_MAX
                ),
                pool_size.to_string(),
            ));
        }
        if let Some(i) = bytes[h::RESERVED.offset..h::RESERVED.end()]
            .iter()
            .position(|&b| b != 0)
        {
            return Err(Corruption {
                offset: base + (h::RESERVED.offset + i) as u64,
                ..bad(
                    h::RESERVED,
                    "zero".into(),
                    format!("{:#04x}", bytes[h::RESERVED.offset + i]),
                )
            });
        }
        Ok(PoolHeader {
            features_compat: get_u64(bytes, h::FEATURES_COMPAT),
            features_ro_compat: get_u64(bytes, h::FEATURES_RO_COMPAT),
            features_incompat: get_u64(bytes, h::FEATURES_INCOMPAT),
            pool_uuid,
            set_uuid,
            member_index,
            member_count,
            domain,
            pool_size,
            created_ns: get_u64(bytes, h::CREATED_NS),
        })
    }

    /// Does the pool grow (`FEATURES_INCOMPAT_GROWABLE`)?
    pub fn growable(&self) -> bool {
        self.features_incompat & layout::FEATURES_INCOMPAT_GROWABLE != 0
    }

    /// Refuse what this build cannot handle. `read_only` allows unknown read-only-compatible bits.
    pub fn check_features(&self, read_only: bool) -> Result<(), PmemError> {
        let incompat = self.features_incompat & !layout::FEATURES_INCOMPAT_KNOWN;
        if incompat != 0 {
            return Err(PmemError::UnsupportedFeature {
                kind: "incompatible",
                bits: incompat,
            });
        }
        let ro = self.features_ro_compat & !layout::FEATURES_RO_COMPAT_KNOWN;
        if ro != 0 && !read_only {
            return Err(PmemError::UnsupportedFeature {
                kind: "read-only-compatible",
                bits: ro,
            });
        }
        if self.member_count != 1 {
            return Err(PmemError::Invalid {
                what: "pool set",
                reason: format!(
                    "this file is member {} of a {}-file set; multi-file sets are not supported yet",
                    self.member_index, self.member_count
                ),
            });
        }
        Ok(())
    }
}

pub(crate) fn show_bytes(b: &[u8]) -> String {
    let printable = b.iter().all(|c| c.is_ascii_graphic());
    if printable {
        format!("\"{}\"", String::from_utf8_lossy(b))
    } else {
        let hex: Vec<String> = b.iter().map(|c| format!("{c:02x}")).collect();
        format!("0x{}", hex.join(""))
    }
}

/// The mutable state kept in the alternating slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MutableState {
    /// Increases by one on every write; the slot is `sequence % 2`. Zero means "never written".
    pub sequence: u64,
    /// The pool was closed cleanly (no recovery needed).
    pub clean_shutdown: bool,
    /// Generation of the current region directory.
    pub directory_generation: u64,
    /// Size of a growable pool, in bytes; 0: the header's `pool_size` (always 0 in a pool
    /// without `FEATURES_INCOMPAT_GROWABLE`).
    pub pool_size: u64,
}

/// What one slot holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotContent {
    /// All zero: never written.
    Empty,
    /// A valid state.
    Valid(MutableState),
    /// Damaged: a write cut by a crash, or media corruption.
    Damaged(Corruption),
}

/// Absolute offset of mutable slot `index`.
pub const fn slot_offset(index: usize) -> usize {
    layout::HEADER_COPY_OFFSETS[index] + layout::SLOT_OFFSET_IN_PAGE
}

fn slot_crc(uuid: &Uuid, index: usize, bytes: &[u8]) -> u32 {
    let mut c = crc32c::crc32c(&uuid.0);
    c = crc32c::crc32c_append(c, &(index as u32).to_le_bytes());
    crc32c::crc32c_append(c, &bytes[..s::CRC32C.offset])
}

impl MutableState {
    /// The slot this state is written to.
    pub fn slot_index(&self) -> usize {
        (self.sequence % 2) as usize
    }

    /// Encode for its slot. The CRC binds the pool UUID and the slot index.
    pub fn encode(&self, uuid: &Uuid) -> [u8; layout::SLOT_BYTES] {
        assert!(self.sequence != 0, "sequence 0 marks an empty slot");
        let mut b = [0u8; layout::SLOT_BYTES];
        put_u64(&mut b, s::SEQUENCE, self.sequence);
        let flags = if self.clean_shutdown {
            layout::SLOT_FLAG_CLEAN_SHUTDOWN
        } else {
            0
        };
        put_u64(&mut b, s::FLAGS, flags);
        put_u64(&mut b, s::DIRECTORY_GENERATION, self.directory_generation);
        put_u64(&mut b, s::POOL_SIZE, self.pool_size);
        let crc = slot_crc(uuid, self.slot_index(), &b);
        put_u32(&mut b, s::CRC32C, crc);
        b
    }

    /// Decode slot `index`.
    pub fn decode(bytes: &[u8], index: usize, uuid: &Uuid) -> SlotContent {
        assert!(index < 2 && bytes.len() >= layout::SLOT_BYTES);
        let bytes = &bytes[..layout::SLOT_BYTES];
        if bytes.iter().all(|&b| b == 0) {
            return SlotContent::Empty;
        }
        let base = slot_offset(index) as u64;
        let bad = |f: layout::Field, expected: String, found: String| {
            SlotContent::Damaged(Corruption {
                structure: format!("mutable header slot {index}"),
                offset: base + f.offset as u64,
                field: f.name,
                expected,
                found,
            })
        };
        let stored = get_u32(bytes, s::CRC32C);
        let computed = slot_crc(uuid, index, bytes);
        if stored != computed {
            return bad(
                s::CRC32C,
                format!("{computed:#010x}"),
                format!("{stored:#010x}"),
            );
        }
        let sequence = get_u64(bytes, s::SEQUENCE);
        if sequence == 0 || (sequence % 2) as usize != index {
            return bad(
                s::SEQUENCE,
                format!(
                    "a non-zero {} number",
                    if index == 0 { "even" } else { "odd" }
                ),
                sequence.to_string(),
            );
        }
        let flags = get_u64(bytes, s::FLAGS);
        if flags & !layout::SLOT_FLAGS_KNOWN != 0 {
            return bad(
                s::FLAGS,
                format!("only bits {:#x}", layout::SLOT_FLAGS_KNOWN),
                format!("{flags:#x}"),
            );
        }
        let directory_generation = get_u64(bytes, s::DIRECTORY_GENERATION);
        if directory_generation == 0 {
            return bad(s::DIRECTORY_GENERATION, "at least 1".into(), "0".into());
        }
        let pool_size = get_u64(bytes, s::POOL_SIZE);
        if pool_size != 0
            && (!(layout::POOL_SIZE_MIN..=layout::POOL_SIZE_MAX).contains(&pool_size)
                || pool_size % layout::PAGE_SIZE as u64 != 0)
        {
            return bad(
                s::POOL_SIZE,
                format!(
                    "0 or a multiple of {} in [{}, {}]",
                    layout::PAGE_SIZE,
                    layout::POOL_SIZE_MIN,
                    layout::POOL_SIZE_MAX
                ),
                pool_size.to_string(),
            );
        }
        if bytes[s::RESERVED.offset..s::RESERVED.end()]
            .iter()
            .any(|&b| b != 0)
        {
            return bad(s::RESERVED, "zero".into(), "non-zero bytes".into());
        }
        SlotContent::Valid(MutableState {
            sequence,
            clean_shutdown: flags & layout::SLOT_FLAG_CLEAN_SHUTDOWN != 0,
            directory_generation,
            pool_size,
        })
    }
}

/// Pick the current state from the two slots: the valid one with the highest sequence.
pub fn current_state(slots: &[SlotContent; 2]) -> Option<MutableState> {
    slots
        .iter()
        .filter_map(|s| match s {
            SlotContent::Valid(m) => Some(*m),
            _ => None,
        })
        .max_by_key(|m| m.sequence)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PoolHeader {
        PoolHeader {
            features_compat: 0,
            features_ro_compat: 0,
            features_incompat: 0,
            pool_uuid: Uuid([7; 16]),
            set_uuid: Uuid([9; 16]),
            member_index: 0,
            member_count: 1,
            domain: Domain::Adr,
            pool_size: 1 << 20,
            created_ns: 1_700_000_000_000_000_000,
        }
    }

    /// Write `value` into `field` of an encoded copy and fix the CRC, so the field check itself
    /// (not the CRC) has to catch it.
    fn with_field(copy: usize, field: layout::Field, value: &[u8]) -> Vec<u8> {
        let mut b = sample().encode(copy).to_vec();
        b[field.offset..field.offset + value.len()].copy_from_slice(value);
        let crc = crc_of_header(&b);
        b[h::CRC32C.offset..h::CRC32C.end()].copy_from_slice(&crc.to_le_bytes());
        b
    }

    #[test]
    fn header_round_trips_in_both_copies() {
        for copy in 0..2 {
            assert_eq!(
                PoolHeader::decode(&sample().encode(copy), copy),
                Ok(sample())
            );
        }
    }

    #[test]
    fn every_header_field_is_validated() {
        // (field, bad value, fix the CRC after the change?)
        let cases: Vec<(layout::Field, Vec<u8>, bool)> = vec![
            (h::MAGIC, b"KAVACHPX".to_vec(), true),
            (h::FORMAT_VERSION, 2u32.to_le_bytes().to_vec(), true),
            (h::FORMAT_VERSION, 2u32.to_le_bytes().to_vec(), false),
            (h::COPY_INDEX, 1u32.to_le_bytes().to_vec(), true),
            (h::POOL_UUID, vec![0; 16], true),
            (h::SET_UUID, vec![0; 16], true),
            (h::MEMBER_INDEX, 1u32.to_le_bytes().to_vec(), true),
            (h::MEMBER_COUNT, 0u32.to_le_bytes().to_vec(), true),
            (h::PAGE_SIZE, 8192u32.to_le_bytes().to_vec(), true),
            (h::DOMAIN, 9u32.to_le_bytes().to_vec(), true),
            (h::POOL_SIZE, 4096u64.to_le_bytes().to_vec(), true),
            (
                h::POOL_SIZE,
                ((1u64 << 20) + 1).to_le_bytes().to_vec(),
                true,
            ),
            (h::RESERVED, vec![1], true),
            (h::CRC32C, vec![0, 0, 0, 0], false),
            // A flipped bit in a field with no rule of its own is caught by the CRC.
            (h::CREATED_NS, vec![0xff], false),
            (h::FEATURES_COMPAT, vec![1], false),
        ];
        for (field, value, fix_crc) in cases {
            let b = if fix_crc {
                with_field(0, field, &value)
            } else {
                let mut b = sample().encode(0).to_vec();
                b[field.offset..field.offset + value.len()].copy_from_slice(&value);
                b
            };
            let err = PoolHeader::decode(&b, 0).expect_err(field.name);
            let checked_before_crc = [h::MAGIC.name, h::FORMAT_VERSION.name].contains(&field.name);
            let want = if fix_crc || checked_before_crc {
                field.name
            } else {
                "crc32c"
            };
            // Magic and version are checked before the CRC, the CRC before the other rules.
            assert_eq!(err.field, want, "corrupting {}", field.name);
            assert_eq!(err.structure, "pool header copy 0");
        }
    }

    #[test]
    fn unknown_features_are_refused_by_class() {
        let mut hd = sample();
        hd.features_compat = 1 << 5;
        assert!(hd.check_features(false).is_ok());
        hd.features_ro_compat = 1;
        assert!(matches!(
            hd.check_features(false),
            Err(PmemError::UnsupportedFeature {
                kind: "read-only-compatible",
                ..
            })
        ));
        assert!(hd.check_features(true).is_ok());
        hd.features_incompat = 1 << 63;
        assert!(matches!(
            hd.check_features(true),
            Err(PmemError::UnsupportedFeature {
                kind: "incompatible",
                ..
            })
        ));
        let mut set = sample();
        set.member_count = 2;
        assert!(matches!(
            set.check_features(false),
            Err(PmemError::Invalid { .. })
        ));
    }

    #[test]
    fn slots_round_trip_and_bind_uuid_and_index() {
        let uuid = Uuid([3; 16]);
        let st = MutableState {
            sequence: 5,
            clean_shutdown: true,
            directory_generation: 2,
            pool_size: 0,
        };
        let b = st.encode(&uuid);
        assert_eq!(MutableState::decode(&b, 1, &uuid), SlotContent::Valid(st));
        // Read as the other slot, or under another pool's UUID: the CRC no longer matches.
        assert!(
            matches!(MutableState::decode(&b, 0, &uuid), SlotContent::Damaged(c) if c.field == "crc32c")
        );
        assert!(
            matches!(MutableState::decode(&b, 1, &Uuid([4; 16])), SlotContent::Damaged(c) if c.field == "crc32c")
        );
        assert_eq!(MutableState::decode(&[0; 64], 0, &uuid), SlotContent::Empty);
    }

    #[test]
    fn every_slot_field_is_validated() {
        let uuid = Uuid([3; 16]);
        let good = MutableState {
            sequence: 4,
            clean_shutdown: false,
            directory_generation: 1,
            pool_size: 0,
        }
        .encode(&uuid);
        let cases: Vec<(layout::Field, Vec<u8>)> = vec![
            (s::SEQUENCE, 3u64.to_le_bytes().to_vec()),
            (s::SEQUENCE, 0u64.to_le_bytes().to_vec()),
            (s::FLAGS, 2u64.to_le_bytes().to_vec()),
            (s::DIRECTORY_GENERATION, 0u64.to_le_bytes().to_vec()),
            (s::POOL_SIZE, 4096u64.to_le_bytes().to_vec()),
            (s::POOL_SIZE, (65536u64 + 1).to_le_bytes().to_vec()),
            (s::RESERVED, vec![1]),
        ];
        for (field, value) in cases {
            let mut b = good.to_vec();
            b[field.offset..field.offset + value.len()].copy_from_slice(&value);
            let crc = slot_crc(&uuid, 0, &b);
            b[s::CRC32C.offset..s::CRC32C.end()].copy_from_slice(&crc.to_le_bytes());
            match MutableState::decode(&b, 0, &uuid) {
                SlotContent::Damaged(c) => assert_eq!(c.field, field.name),
                other => panic!("corrupting {} gave {other:?}", field.name),
            }
        }
        let mut b = good.to_vec();
        b[9] ^= 0x10;
        assert!(
            matches!(MutableState::decode(&b, 0, &uuid), SlotContent::Damaged(c) if c.field == "crc32c")
        );
    }

    #[test]
    fn highest_valid_sequence_wins() {
        let a = MutableState {
            sequence: 6,
            clean_shutdown: false,
            directory_generation: 3,
            pool_size: 0,
        };
        let b = MutableState {
            sequence: 7,
            clean_shutdown: true,
            directory_generation: 3,
            pool_size: 0,
        };
        let dmg = SlotContent::Damaged(Corruption {
            structure: String::new(),
            offset: 0,
            field: "crc32c",
            expected: String::new(),
            found: String::new(),
        });
        assert_eq!(
            current_state(&[SlotContent::Valid(a), SlotContent::Valid(b)]),
            Some(b)
        );
        assert_eq!(
            current_state(&[SlotContent::Valid(a), dmg.clone()]),
            Some(a)
        );
        assert_eq!(
            current_state(&[SlotContent::Empty, SlotContent::Valid(b)]),
            Some(b)
        );
        assert_eq!(current_state(&[dmg.clone(), dmg]), None);
        assert_eq!(
            current_state(&[SlotContent::Empty, SlotContent::Empty]),
            None
        );
    }
}
