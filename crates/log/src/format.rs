//! Encoding and validation of the descriptor, the superline and record headers.
//!
//! Every decoder treats its input as untrusted and returns a [`Corruption`] naming the
//! structure, the absolute offset, the field, what was expected and what was found.

use crate::layout::{
    self, descriptor as d, get_u16, get_u32, get_u64, put, record as r, superline as s,
};
use pmem::{Corruption, Uuid};

fn corruption(
    structure: String,
    offset: u64,
    field: layout::Field,
    expected: impl Into<String>,
    found: impl Into<String>,
) -> Corruption {
    Corruption {
        structure,
        offset: offset + field.offset as u64,
        field: field.name,
        expected: expected.into(),
        found: found.into(),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The immutable description of a log, kept in two copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    /// Identity of the log (shared by a primary and its backups); every record CRC binds it.
    pub log_uuid: Uuid,
    /// Offset of the ring from the region's start.
    pub ring_offset: u64,
    /// Bytes in the ring.
    pub ring_bytes: u64,
    /// Largest payload a record may carry.
    pub payload_bytes_max: u32,
    /// Incompatible feature bits ([`layout::features`]); a new log has every known one.
    pub features_incompat: u32,
}

impl Descriptor {
    /// The descriptor of a new log in a region of `region_bytes`.
    pub fn for_region(log_uuid: Uuid, region_bytes: u64) -> Result<Descriptor, String> {
        let ring_bytes = region_bytes.saturating_sub(layout::RING_OFFSET as u64)
            / layout::RECORD_ALIGN as u64
            * layout::RECORD_ALIGN as u64;
        if ring_bytes < layout::RING_BYTES_MIN {
            return Err(format!(
                "a log region needs at least {} bytes ({} of ring plus {} of metadata); this one has {region_bytes}",
                layout::RING_BYTES_MIN + layout::RING_OFFSET as u64,
                layout::RING_BYTES_MIN,
                layout::RING_OFFSET
            ));
        }
        if ring_bytes > layout::RING_BYTES_MAX {
            return Err(format!(
                "a log ring holds at most {} bytes; this region would give {ring_bytes}",
                layout::RING_BYTES_MAX
            ));
        }
        Ok(Descriptor {
            log_uuid,
            ring_offset: layout::RING_OFFSET as u64,
            ring_bytes,
            payload_bytes_max: payload_max_for(ring_bytes),
            features_incompat: layout::FEATURES_INCOMPAT_KNOWN,
        })
    }

    /// The superline keeps `durable_lsn` in this log.
    pub fn keeps_durable_lsn(&self) -> bool {
        self.features_incompat & layout::features::DURABLE_LSN != 0
    }

    /// Bytes of copy `copy` (0 or 1).
    pub fn encode(&self, copy: usize) -> [u8; layout::DESCRIPTOR_BYTES] {
        let mut b = [0u8; layout::DESCRIPTOR_BYTES];
        put(&mut b, d::MAGIC, &layout::DESCRIPTOR_MAGIC);
        put(
            &mut b,
            d::FORMAT_VERSION,
            &layout::FORMAT_VERSION.to_le_bytes(),
        );
        put(
            &mut b,
            d::FEATURES_INCOMPAT,
            &self.features_incompat.to_le_bytes(),
        );
        put(&mut b, d::LOG_UUID, &self.log_uuid.0);
        put(&mut b, d::RING_OFFSET, &self.ring_offset.to_le_bytes());
        put(&mut b, d::RING_BYTES, &self.ring_bytes.to_le_bytes());
        put(
            &mut b,
            d::PAYLOAD_BYTES_MAX,
            &self.payload_bytes_max.to_le_bytes(),
        );
        put(&mut b, d::COPY_INDEX, &(copy as u32).to_le_bytes());
        let crc = crc32c::crc32c(&b[..d::CRC.offset]);
        put(&mut b, d::CRC, &crc.to_le_bytes());
        b
    }

    /// Validate copy `copy`, read at absolute offset `at` of a region of `region_bytes`.
    pub fn decode(
        bytes: &[u8],
        copy: usize,
        at: u64,
        region_bytes: u64,
    ) -> Result<Descriptor, Corruption> {
        let what = || format!("log descriptor copy {copy}");
        if bytes.len() < layout::DESCRIPTOR_BYTES {
            return Err(corruption(
                what(),
                at,
                d::MAGIC,
                "64 bytes",
                format!("{} bytes", bytes.len()),
            ));
        }
        let magic = &bytes[d::MAGIC.offset..d::MAGIC.end()];
        if magic != layout::DESCRIPTOR_MAGIC {
            return Err(corruption(
                what(),
                at,
                d::MAGIC,
                hex(&layout::DESCRIPTOR_MAGIC),
                hex(magic),
            ));
        }
        let crc = crc32c::crc32c(&bytes[..d::CRC.offset]);
        let stored = get_u32(bytes, d::CRC);
        if crc != stored {
            return Err(corruption(
                what(),
                at,
                d::CRC,
                format!("{crc:#010x}"),
                format!("{stored:#010x}"),
            ));
        }
        let version = get_u32(bytes, d::FORMAT_VERSION);
        if version != layout::FORMAT_VERSION {
            return Err(corruption(
                what(),
                at,
                d::FORMAT_VERSION,
                layout::FORMAT_VERSION.to_string(),
                version.to_string(),
            ));
        }
        let incompat = get_u32(bytes, d::FEATURES_INCOMPAT);
        if incompat & !layout::FEATURES_INCOMPAT_KNOWN != 0 {
            return Err(corruption(
                what(),
                at,
                d::FEATURES_INCOMPAT,
                "no unknown bits",
                format!("{incompat:#x}"),
            ));
        }
        let index = get_u32(bytes, d::COPY_INDEX);
        if index as usize != copy {
            return Err(corruption(
                what(),
                at,
                d::COPY_INDEX,
                copy.to_string(),
                index.to_string(),
            ));
        }
        if get_u32(bytes, d::RESERVED) != 0 {
            return Err(corruption(
                what(),
                at,
                d::RESERVED,
                "0",
                hex(&bytes[d::RESERVED.offset..d::RESERVED.end()]),
            ));
        }
        let ring_offset = get_u64(bytes, d::RING_OFFSET);
        if ring_offset != layout::RING_OFFSET as u64 {
            return Err(corruption(
                what(),
                at,
                d::RING_OFFSET,
                layout::RING_OFFSET.to_string(),
                ring_offset.to_string(),
            ));
        }
        let ring_bytes = get_u64(bytes, d::RING_BYTES);
        let fits = ring_offset
            .checked_add(ring_bytes)
            .is_some_and(|end| end <= region_bytes);
        if !(layout::RING_BYTES_MIN..=layout::RING_BYTES_MAX).contains(&ring_bytes)
            || ring_bytes % layout::RECORD_ALIGN as u64 != 0
            || !fits
        {
            return Err(corruption(
                what(),
                at,
                d::RING_BYTES,
                format!(
                    "a multiple of 64 in [{}, {}] ending inside the {region_bytes}-byte region",
                    layout::RING_BYTES_MIN,
                    layout::RING_BYTES_MAX
                ),
                ring_bytes.to_string(),
            ));
        }
        let payload_bytes_max = get_u32(bytes, d::PAYLOAD_BYTES_MAX);
        let limit = payload_max_for(ring_bytes);
        if payload_bytes_max == 0 || payload_bytes_max > limit {
            return Err(corruption(
                what(),
                at,
                d::PAYLOAD_BYTES_MAX,
                format!("1..={limit}"),
                payload_bytes_max.to_string(),
            ));
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&bytes[d::LOG_UUID.offset..d::LOG_UUID.end()]);
        Ok(Descriptor {
            log_uuid: Uuid(uuid),
            ring_offset,
            ring_bytes,
            payload_bytes_max,
            features_incompat: incompat,
        })
    }
}

/// The largest payload a ring of `ring_bytes` takes: a record of at most half the ring always
/// fits in an empty ring, padding included.
pub fn payload_max_for(ring_bytes: u64) -> u32 {
    let half = ring_bytes / 2 - layout::RECORD_HEADER_BYTES as u64;
    half.min(layout::PAYLOAD_BYTES_MAX as u64) as u32
}

/// The mutable state of a log, kept with the atomicity primitive: two copies, each with a CRC,
/// the valid copy with the higher sequence in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superline {
    /// Bumped on every update; its parity names the copy written.
    pub sequence: u64,
    /// Ring offset of the oldest live record.
    pub head: u64,
    /// LSN of the record at `head`.
    pub start_lsn: u64,
    /// Replication epoch (1 for a log that was never recovered by a quorum).
    pub epoch: u64,
    /// Every record from `start_lsn` through this LSN was durable when this state was written
    /// (0: nothing known). Kept only in a log with the `DURABLE_LSN` feature; recovery treats a
    /// walk that ends at or below it as damage, never as a torn tail.
    pub durable_lsn: u64,
}

impl Superline {
    /// The copy this superline is written to.
    pub fn copy(&self) -> usize {
        (self.sequence % 2) as usize
    }

    fn crc(uuid: &Uuid, copy: usize, bytes: &[u8]) -> u32 {
        let seed = crc32c::crc32c_append(crc32c::crc32c(&uuid.0), &(copy as u32).to_le_bytes());
        crc32c::crc32c_append(seed, &bytes[..s::CRC.offset])
    }

    /// Bytes of this superline, for its copy.
    pub fn encode(&self, uuid: &Uuid) -> [u8; layout::SUPERLINE_BYTES] {
        let mut b = [0u8; layout::SUPERLINE_BYTES];
        put(&mut b, s::MAGIC, &layout::SUPERLINE_MAGIC);
        put(&mut b, s::SEQUENCE, &self.sequence.to_le_bytes());
        put(&mut b, s::HEAD, &self.head.to_le_bytes());
        put(&mut b, s::START_LSN, &self.start_lsn.to_le_bytes());
        put(&mut b, s::EPOCH, &self.epoch.to_le_bytes());
        put(&mut b, s::DURABLE_LSN, &self.durable_lsn.to_le_bytes());
        let crc = Self::crc(uuid, self.copy(), &b);
        put(&mut b, s::CRC, &crc.to_le_bytes());
        b
    }

    /// Validate copy `copy` read at absolute offset `at`.
    pub fn decode(
        bytes: &[u8],
        copy: usize,
        at: u64,
        uuid: &Uuid,
        ring_bytes: u64,
    ) -> Result<Superline, Corruption> {
        let what = || format!("log superline copy {copy}");
        if bytes.len() < layout::SUPERLINE_BYTES {
            return Err(corruption(
                what(),
                at,
                s::MAGIC,
                "64 bytes",
                format!("{} bytes", bytes.len()),
            ));
        }
        let magic = &bytes[s::MAGIC.offset..s::MAGIC.end()];
        if magic != layout::SUPERLINE_MAGIC {
            return Err(corruption(
                what(),
                at,
                s::MAGIC,
                hex(&layout::SUPERLINE_MAGIC),
                hex(magic),
            ));
        }
        let crc = Self::crc(uuid, copy, bytes);
        let stored = get_u32(bytes, s::CRC);
        if crc != stored {
            return Err(corruption(
                what(),
                at,
                s::CRC,
                format!("{crc:#010x}"),
                format!("{stored:#010x}"),
            ));
        }
        let sequence = get_u64(bytes, s::SEQUENCE);
        if sequence == 0 || (sequence % 2) as usize != copy {
            return Err(corruption(
                what(),
                at,
                s::SEQUENCE,
                format!("non-zero with parity {copy}"),
                sequence.to_string(),
            ));
        }
        let reserved = &bytes[s::RESERVED.offset..s::RESERVED.end()];
        if reserved.iter().any(|&x| x != 0) {
            return Err(corruption(what(), at, s::RESERVED, "zeros", hex(reserved)));
        }
        let head = get_u64(bytes, s::HEAD);
        if head >= ring_bytes || head % layout::RECORD_ALIGN as u64 != 0 {
            return Err(corruption(
                what(),
                at,
                s::HEAD,
                format!("a multiple of 64 below {ring_bytes}"),
                head.to_string(),
            ));
        }
        let start_lsn = get_u64(bytes, s::START_LSN);
        if start_lsn == 0 || start_lsn > LSN_MAX {
            return Err(corruption(
                what(),
                at,
                s::START_LSN,
                format!("1..={LSN_MAX}"),
                start_lsn.to_string(),
            ));
        }
        let epoch = get_u64(bytes, s::EPOCH);
        if epoch == 0 {
            return Err(corruption(what(), at, s::EPOCH, "at least 1", "0"));
        }
        let durable_lsn = get_u64(bytes, s::DURABLE_LSN);
        if durable_lsn >= LSN_MAX {
            return Err(corruption(
                what(),
                at,
                s::DURABLE_LSN,
                format!("below {LSN_MAX}"),
                durable_lsn.to_string(),
            ));
        }
        Ok(Superline {
            sequence,
            head,
            start_lsn,
            epoch,
            durable_lsn,
        })
    }
}

/// Largest LSN a log hands out (2^62): far beyond any lifetime, and LSN arithmetic never
/// overflows below it.
pub const LSN_MAX: u64 = 1 << 62;

/// The fixed part of a record, as written by `complete`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Log sequence number: the header's integrity check (must be exactly the one expected).
    pub lsn: u64,
    /// Payload bytes.
    pub length: u32,
    /// One of [`layout::kinds`].
    pub kind: u16,
    /// CRC-32C over the log UUID, the first 16 header bytes and the payload.
    pub payload_crc: u32,
}

impl RecordHeader {
    /// Header bytes, valid word included.
    pub fn encode(&self) -> [u8; layout::RECORD_HEADER_BYTES] {
        let mut b = [0u8; layout::RECORD_HEADER_BYTES];
        put(&mut b, r::LSN, &self.lsn.to_le_bytes());
        put(&mut b, r::LENGTH, &self.length.to_le_bytes());
        put(&mut b, r::KIND, &self.kind.to_le_bytes());
        put(&mut b, r::PAYLOAD_CRC, &self.payload_crc.to_le_bytes());
        put(&mut b, r::VALID, &valid_word(self.lsn).to_le_bytes());
        b
    }

    /// The CRC-covered header bytes (lsn, length, kind, reserved).
    pub fn covered(lsn: u64, length: u32, kind: u16) -> [u8; r::CRC_COVERED_BYTES] {
        let mut b = [0u8; r::CRC_COVERED_BYTES];
        put(&mut b, r::LSN, &lsn.to_le_bytes());
        put(&mut b, r::LENGTH, &length.to_le_bytes());
        put(&mut b, r::KIND, &kind.to_le_bytes());
        b
    }

    /// Parse the fields without judging them.
    pub fn parse(bytes: &[u8]) -> (RecordHeader, u64, u16, u32) {
        let h = RecordHeader {
            lsn: get_u64(bytes, r::LSN),
            length: get_u32(bytes, r::LENGTH),
            kind: get_u16(bytes, r::KIND),
            payload_crc: get_u32(bytes, r::PAYLOAD_CRC),
        };
        (
            h,
            get_u64(bytes, r::VALID),
            get_u16(bytes, r::RESERVED),
            get_u32(bytes, r::RESERVED2),
        )
    }
}

/// The valid word of the record with `lsn`.
pub const fn valid_word(lsn: u64) -> u64 {
    layout::VALID_KEY ^ lsn
}

/// CRC seed for the log with this UUID.
pub fn crc_seed(uuid: &Uuid) -> u32 {
    crc32c::crc32c(&uuid.0)
}

/// The start of a record's CRC: seed, then the covered header bytes.
pub fn crc_start(seed: u32, lsn: u64, length: u32, kind: u16) -> u32 {
    crc32c::crc32c_append(seed, &RecordHeader::covered(lsn, length, kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: Uuid = Uuid([7; 16]);

    fn desc() -> Descriptor {
        Descriptor::for_region(UUID, 1 << 20).expect("fits")
    }

    #[test]
    fn descriptor_round_trips_in_both_copies() {
        let d = desc();
        assert_eq!(d.ring_bytes, (1 << 20) - 4096);
        assert_eq!(d.payload_bytes_max as u64, d.ring_bytes / 2 - 32);
        for copy in 0..2 {
            assert_eq!(Descriptor::decode(&d.encode(copy), copy, 0, 1 << 20), Ok(d));
        }
        assert!(Descriptor::decode(&d.encode(0), 1, 0, 1 << 20).is_err());
    }

    #[test]
    fn too_small_or_too_large_regions_are_refused() {
        assert!(Descriptor::for_region(UUID, 4096 + 8192).is_err());
        assert!(Descriptor::for_region(UUID, 4096 + layout::RING_BYTES_MIN).is_ok());
        assert!(Descriptor::for_region(UUID, (1 << 41) + 4096).is_err());
    }

    /// Corrupt one field of a valid descriptor (re-sealing the CRC where asked) and expect the
    /// decoder to name that field.
    #[test]
    fn descriptor_corruption_table() {
        let d = desc();
        let cases: &[(layout::Field, &[u8], bool)] = &[
            (d::MAGIC, b"XXXXXXXX", false),
            (d::CRC, &[1, 2, 3, 4], false),
            (d::LOG_UUID, &[9; 16], false),
            (d::FORMAT_VERSION, &2u32.to_le_bytes(), true),
            (d::FEATURES_INCOMPAT, &2u32.to_le_bytes(), true),
            (d::COPY_INDEX, &1u32.to_le_bytes(), true),
            (d::RESERVED, &1u32.to_le_bytes(), true),
            (d::RING_OFFSET, &8192u64.to_le_bytes(), true),
            (d::RING_BYTES, &(1u64 << 20).to_le_bytes(), true),
            (d::RING_BYTES, &100u64.to_le_bytes(), true),
            (d::PAYLOAD_BYTES_MAX, &0u32.to_le_bytes(), true),
            (d::PAYLOAD_BYTES_MAX, &u32::MAX.to_le_bytes(), true),
        ];
        for (field, bytes, reseal) in cases {
            let mut b = d.encode(0);
            put(&mut b, *field, bytes);
            if *reseal {
                let crc = crc32c::crc32c(&b[..d::CRC.offset]);
                put(&mut b, d::CRC, &crc.to_le_bytes());
            }
            let err = Descriptor::decode(&b, 0, 1000, 1 << 20).expect_err(field.name);
            let want = if *reseal || field.name == "magic" {
                field.name
            } else {
                "crc32c"
            };
            assert_eq!(err.field, want, "{err}");
            assert!(err.offset >= 1000 && err.offset < 1064);
        }
    }

    #[test]
    fn superline_round_trips_and_binds_its_copy_and_log() {
        let sl = Superline {
            sequence: 5,
            head: 640,
            start_lsn: 17,
            epoch: 3,
            durable_lsn: 20,
        };
        let b = sl.encode(&UUID);
        assert_eq!(Superline::decode(&b, 1, 128, &UUID, 1 << 20), Ok(sl));
        assert_eq!(
            Superline::decode(&b, 0, 128, &UUID, 1 << 20)
                .unwrap_err()
                .field,
            "crc32c"
        );
        assert_eq!(
            Superline::decode(&b, 1, 128, &Uuid([8; 16]), 1 << 20)
                .unwrap_err()
                .field,
            "crc32c"
        );
    }

    #[test]
    fn superline_corruption_table() {
        let sl = Superline {
            sequence: 4,
            head: 640,
            start_lsn: 17,
            epoch: 3,
            durable_lsn: 20,
        };
        let cases: &[(layout::Field, &[u8])] = &[
            (s::SEQUENCE, &0u64.to_le_bytes()),
            (s::SEQUENCE, &3u64.to_le_bytes()),
            (s::HEAD, &65u64.to_le_bytes()),
            (s::HEAD, &(1u64 << 20).to_le_bytes()),
            (s::START_LSN, &0u64.to_le_bytes()),
            (s::START_LSN, &(LSN_MAX + 1).to_le_bytes()),
            (s::EPOCH, &0u64.to_le_bytes()),
            (s::DURABLE_LSN, &LSN_MAX.to_le_bytes()),
            (s::RESERVED, &[1; 12]),
        ];
        for (field, bytes) in cases {
            let mut b = sl.encode(&UUID);
            put(&mut b, *field, bytes);
            let crc = Superline::crc(&UUID, 0, &b);
            put(&mut b, s::CRC, &crc.to_le_bytes());
            let err = Superline::decode(&b, 0, 128, &UUID, 1 << 19).expect_err(field.name);
            assert_eq!(err.field, field.name, "{err}");
        }
        let mut b = sl.encode(&UUID);
        b[0] ^= 1;
        assert_eq!(
            Superline::decode(&b, 0, 128, &UUID, 1 << 19)
                .unwrap_err()
                .field,
            "magic"
        );
    }

    #[test]
    fn record_header_round_trips_and_valid_word_binds_lsn() {
        let h = RecordHeader {
            lsn: 42,
            length: 100,
            kind: layout::kinds::DATA,
            payload_crc: 0xdead_beef,
        };
        let (back, valid, r1, r2) = RecordHeader::parse(&h.encode());
        assert_eq!((back, valid, r1, r2), (h, valid_word(42), 0, 0));
        assert_ne!(valid_word(42), valid_word(43));
        assert_eq!(layout::record_footprint(0), 64);
        assert_eq!(layout::record_footprint(32), 64);
        assert_eq!(layout::record_footprint(33), 128);
    }
}
