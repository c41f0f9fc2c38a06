//! Encoding and validation of the descriptor, the superline and record headers.
//!
//! Every decoder treats its input as untrusted and returns a [`Corruption`] naming the
//! structure, the absolute offset, the field, what was expected and what was found.

use crate::layout::{self, descriptor as d, record as r, superline as s};
use pmem::codec::{self, FixedWriter, Reader};
use pmem::{Corruption, Uuid};

/// Structure names of the two descriptor copies, for errors.
const DESCRIPTOR_NAMES: [&str; 2] = ["log descriptor copy 0", "log descriptor copy 1"];
/// Structure names of the two superline copies, for errors.
const SUPERLINE_NAMES: [&str; 2] = ["log superline copy 0", "log superline copy 1"];

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
        let mut w = FixedWriter::new(&mut b);
        w.field(d::MAGIC, &layout::DESCRIPTOR_MAGIC)
            .field_u32(d::FORMAT_VERSION, layout::FORMAT_VERSION)
            .field_u32(d::FEATURES_INCOMPAT, self.features_incompat)
            .field(d::LOG_UUID, &self.log_uuid.0)
            .field_u64(d::RING_OFFSET, self.ring_offset)
            .field_u64(d::RING_BYTES, self.ring_bytes)
            .field_u32(d::PAYLOAD_BYTES_MAX, self.payload_bytes_max)
            .field_u32(d::COPY_INDEX, copy as u32);
        let crc = crc32c::crc32c(&b[..d::CRC.offset]);
        FixedWriter::new(&mut b).field_u32(d::CRC, crc);
        b
    }

    /// Validate copy `copy`, read at absolute offset `at` of a region of `region_bytes`.
    pub fn decode(
        bytes: &[u8],
        copy: usize,
        at: u64,
        region_bytes: u64,
    ) -> Result<Descriptor, Corruption> {
        let rd = Reader::new(DESCRIPTOR_NAMES[copy.min(1)], bytes).at(at);
        let magic = rd.field(d::MAGIC)?;
        if magic != layout::DESCRIPTOR_MAGIC {
            return Err(rd
                .invalid_field(d::MAGIC, hex(&layout::DESCRIPTOR_MAGIC), hex(magic))
                .into());
        }
        let stored = rd.field_u32(d::CRC)?;
        let crc = crc32c::crc32c(rd.slice_at("crc-covered bytes", 0, d::CRC.offset)?);
        if crc != stored {
            return Err(rd
                .invalid_field(d::CRC, format!("{crc:#010x}"), format!("{stored:#010x}"))
                .into());
        }
        let version = rd.field_u32(d::FORMAT_VERSION)?;
        if version != layout::FORMAT_VERSION {
            return Err(rd
                .invalid_field(d::FORMAT_VERSION, layout::FORMAT_VERSION, version)
                .into());
        }
        let incompat = rd.field_u32(d::FEATURES_INCOMPAT)?;
        if incompat & !layout::FEATURES_INCOMPAT_KNOWN != 0 {
            return Err(rd
                .invalid_field(
                    d::FEATURES_INCOMPAT,
                    "no unknown bits",
                    format!("{incompat:#x}"),
                )
                .into());
        }
        let index = rd.field_u32(d::COPY_INDEX)?;
        if index as usize != copy {
            return Err(rd.invalid_field(d::COPY_INDEX, copy, index).into());
        }
        let reserved = rd.field(d::RESERVED)?;
        if reserved.iter().any(|&x| x != 0) {
            return Err(rd.invalid_field(d::RESERVED, "0", hex(reserved)).into());
        }
        let ring_offset = rd.field_u64(d::RING_OFFSET)?;
        if ring_offset != layout::RING_OFFSET as u64 {
            return Err(rd
                .invalid_field(d::RING_OFFSET, layout::RING_OFFSET, ring_offset)
                .into());
        }
        let ring_bytes = rd.field_u64(d::RING_BYTES)?;
        let fits = ring_offset
            .checked_add(ring_bytes)
            .is_some_and(|end| end <= region_bytes);
        if !(layout::RING_BYTES_MIN..=layout::RING_BYTES_MAX).contains(&ring_bytes)
            || ring_bytes % layout::RECORD_ALIGN as u64 != 0
            || !fits
        {
            return Err(rd
                .invalid_field(
                    d::RING_BYTES,
                    format!(
                        "a multiple of 64 in [{}, {}] ending inside the {region_bytes}-byte region",
                        layout::RING_BYTES_MIN,
                        layout::RING_BYTES_MAX
                    ),
                    ring_bytes,
                )
                .into());
        }
        let payload_bytes_max = rd.field_u32(d::PAYLOAD_BYTES_MAX)?;
        let limit = payload_max_for(ring_bytes);
        if payload_bytes_max == 0 || payload_bytes_max > limit {
            return Err(rd
                .invalid_field(
                    d::PAYLOAD_BYTES_MAX,
                    format!("1..={limit}"),
                    payload_bytes_max,
                )
                .into());
        }
        let log_uuid = Uuid(rd.array_at(d::LOG_UUID.name, d::LOG_UUID.offset)?);
        Ok(Descriptor {
            log_uuid,
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

    /// The CRC of a whole superline copy's covered bytes (`bytes` holds at least the bytes
    /// before the CRC field).
    fn crc(uuid: &Uuid, copy: usize, bytes: &[u8]) -> u32 {
        let seed = crc32c::crc32c_append(crc32c::crc32c(&uuid.0), &(copy as u32).to_le_bytes());
        crc32c::crc32c_append(seed, &bytes[..s::CRC.offset])
    }

    /// Bytes of this superline, for its copy.
    pub fn encode(&self, uuid: &Uuid) -> [u8; layout::SUPERLINE_BYTES] {
        let mut b = [0u8; layout::SUPERLINE_BYTES];
        FixedWriter::new(&mut b)
            .field(s::MAGIC, &layout::SUPERLINE_MAGIC)
            .field_u64(s::SEQUENCE, self.sequence)
            .field_u64(s::HEAD, self.head)
            .field_u64(s::START_LSN, self.start_lsn)
            .field_u64(s::EPOCH, self.epoch)
            .field_u64(s::DURABLE_LSN, self.durable_lsn);
        let crc = Self::crc(uuid, self.copy(), &b);
        FixedWriter::new(&mut b).field_u32(s::CRC, crc);
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
        let rd = Reader::new(SUPERLINE_NAMES[copy.min(1)], bytes).at(at);
        let magic = rd.field(s::MAGIC)?;
        if magic != layout::SUPERLINE_MAGIC {
            return Err(rd
                .invalid_field(s::MAGIC, hex(&layout::SUPERLINE_MAGIC), hex(magic))
                .into());
        }
        let stored = rd.field_u32(s::CRC)?;
        let crc = Self::crc(
            uuid,
            copy,
            rd.slice_at("crc-covered bytes", 0, s::CRC.offset)?,
        );
        if crc != stored {
            return Err(rd
                .invalid_field(s::CRC, format!("{crc:#010x}"), format!("{stored:#010x}"))
                .into());
        }
        let sequence = rd.field_u64(s::SEQUENCE)?;
        if sequence == 0 || (sequence % 2) as usize != copy {
            return Err(rd
                .invalid_field(
                    s::SEQUENCE,
                    format!("non-zero with parity {copy}"),
                    sequence,
                )
                .into());
        }
        let reserved = rd.field(s::RESERVED)?;
        if reserved.iter().any(|&x| x != 0) {
            return Err(rd.invalid_field(s::RESERVED, "zeros", hex(reserved)).into());
        }
        let head = rd.field_u64(s::HEAD)?;
        if head >= ring_bytes || head % layout::RECORD_ALIGN as u64 != 0 {
            return Err(rd
                .invalid_field(
                    s::HEAD,
                    format!("a multiple of 64 below {ring_bytes}"),
                    head,
                )
                .into());
        }
        let start_lsn = rd.field_u64(s::START_LSN)?;
        if start_lsn == 0 || start_lsn > LSN_MAX {
            return Err(rd
                .invalid_field(s::START_LSN, format!("1..={LSN_MAX}"), start_lsn)
                .into());
        }
        let epoch = rd.field_u64(s::EPOCH)?;
        if epoch == 0 {
            return Err(rd.invalid_field(s::EPOCH, "at least 1", "0").into());
        }
        let durable_lsn = rd.field_u64(s::DURABLE_LSN)?;
        if durable_lsn >= LSN_MAX {
            return Err(rd
                .invalid_field(s::DURABLE_LSN, format!("below {LSN_MAX}"), durable_lsn)
                .into());
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

/// The fields of a record header as read, before any judgement: the header, the valid word
/// and the two reserved fields.
pub type RawRecordHeader = (RecordHeader, u64, u16, u32);

impl RecordHeader {
    /// Header bytes, valid word included.
    pub fn encode(&self) -> [u8; layout::RECORD_HEADER_BYTES] {
        let mut b = [0u8; layout::RECORD_HEADER_BYTES];
        FixedWriter::new(&mut b)
            .field_u64(r::LSN, self.lsn)
            .field_u32(r::LENGTH, self.length)
            .field_u16(r::KIND, self.kind)
            .field_u32(r::PAYLOAD_CRC, self.payload_crc)
            .field_u64(r::VALID, valid_word(self.lsn));
        b
    }

    /// The CRC-covered header bytes (lsn, length, kind, reserved).
    pub fn covered(lsn: u64, length: u32, kind: u16) -> [u8; r::CRC_COVERED_BYTES] {
        let mut b = [0u8; r::CRC_COVERED_BYTES];
        FixedWriter::new(&mut b)
            .field_u64(r::LSN, lsn)
            .field_u32(r::LENGTH, length)
            .field_u16(r::KIND, kind);
        b
    }

    /// Read the fields of a record header found at absolute offset `at` without judging them;
    /// an input shorter than a header is an error naming the first field it cuts.
    pub fn decode(bytes: &[u8], at: u64) -> Result<RawRecordHeader, Corruption> {
        let rd = Reader::new("log record header", bytes).at(at);
        let h = RecordHeader {
            lsn: rd.field_u64(r::LSN)?,
            length: rd.field_u32(r::LENGTH)?,
            kind: rd.field_u16(r::KIND)?,
            payload_crc: rd.field_u32(r::PAYLOAD_CRC)?,
        };
        Ok((
            h,
            rd.field_u64(r::VALID)?,
            rd.field_u16(r::RESERVED)?,
            rd.field_u32(r::RESERVED2)?,
        ))
    }

    /// Parse the fields of a whole header without judging them.
    pub fn parse(bytes: &[u8; layout::RECORD_HEADER_BYTES]) -> RawRecordHeader {
        // Every field lies inside the header's 32 bytes (checked at compile time in `layout`),
        // so the array reads cannot fail: this is the recovery walk's per-record path.
        let h = RecordHeader {
            lsn: codec::array_u64(bytes, r::LSN),
            length: codec::array_u32(bytes, r::LENGTH),
            kind: codec::array_u16(bytes, r::KIND),
            payload_crc: codec::array_u32(bytes, r::PAYLOAD_CRC),
        };
        (
            h,
            codec::array_u64(bytes, r::VALID),
            codec::array_u16(bytes, r::RESERVED),
            codec::array_u32(bytes, r::RESERVED2),
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
    pmem::cpu::crc32c_append(seed, &RecordHeader::covered(lsn, length, kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(b: &mut [u8], f: layout::Field, bytes: &[u8]) {
        FixedWriter::new(b).field(f, bytes);
    }

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
