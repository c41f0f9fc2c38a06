//! Where everything lives in a log region, defined once.
//!
//! `docs/format/log.md` carries the same tables; `tests/format_doc.rs` checks the two agree.
//! Offsets are from the start of the log region (the pool's region directory says where that
//! is).
//!
//! ```text
//! 0      descriptor copy 0   (immutable: what this log is)
//! 64     descriptor copy 1
//! 128    superline copy 0    (mutable: head, start LSN, epoch; the atomicity primitive)
//! 192    superline copy 1
//! 256…   zero
//! 4096   ring: records, each at a 64-byte boundary, none straddling the ring's end
//! ```

pub use pmem::layout::Field;

/// Every record starts on a cache-line boundary and fills whole lines.
pub const RECORD_ALIGN: usize = 64;
/// Offsets of the two descriptor copies.
pub const DESCRIPTOR_COPY_OFFSETS: [usize; 2] = [0, 64];
/// Bytes of one descriptor copy.
pub const DESCRIPTOR_BYTES: usize = 64;
/// Offsets of the two superline copies; each has a cache line of its own.
pub const SUPERLINE_COPY_OFFSETS: [usize; 2] = [128, 192];
/// Bytes of one superline copy.
pub const SUPERLINE_BYTES: usize = 64;
/// Where the ring starts.
pub const RING_OFFSET: usize = 4096;
/// The superline epoch of a newly created log. Replication's recoveries take epochs above it,
/// so a copy still at this epoch never held a recovered history.
pub const NEW_LOG_EPOCH: u64 = 1;
/// Smallest ring.
pub const RING_BYTES_MIN: u64 = 16 * 1024;
/// Largest ring (1 TiB): the ring's position arithmetic stays far from overflow.
pub const RING_BYTES_MAX: u64 = 1 << 40;
/// Largest payload any log accepts (1 GiB); a log's own limit may be lower.
pub const PAYLOAD_BYTES_MAX: u32 = 1 << 30;

/// Magic of a descriptor copy.
pub const DESCRIPTOR_MAGIC: [u8; 8] = *b"KVLOGDSC";
/// Magic of a superline copy.
pub const SUPERLINE_MAGIC: [u8; 8] = *b"KVLOGSUP";
/// Format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Incompatible feature bits this build understands.
pub const FEATURES_INCOMPAT_KNOWN: u32 = features::DURABLE_LSN;

/// Incompatible feature bits of the descriptor.
pub mod features {
    /// The superline's `durable_lsn` field is kept (every record up to it was durable when the
    /// superline was written); without this bit the field must be zero. Set at create.
    pub const DURABLE_LSN: u32 = 1;
}

/// Bytes of a record header; the payload follows it.
pub const RECORD_HEADER_BYTES: usize = 32;
/// Key the valid word is built from: `valid = VALID_KEY ^ lsn`, so a valid word left over from
/// an earlier record at the same place does not pass for this one.
pub const VALID_KEY: u64 = 0x5641_4c49_444b_5643; // "CVKDILAV" little-endian: arbitrary

/// Record kinds.
pub mod kinds {
    /// A caller's record.
    pub const DATA: u16 = 1;
    /// Filler from here to the end of the ring; the record at the ring's start carries the same
    /// LSN (padding takes none of its own).
    pub const PADDING: u16 = 2;
    /// Written at recovery after an unclean shutdown: its 8-byte payload is the LSN the next
    /// record carries, past every LSN a lost record could hold.
    pub const JUMP: u16 = 3;
    /// A reservation dropped without `complete`: skipped by readers, its payload not checked.
    pub const VOID: u16 = 4;

    /// Name for messages.
    pub fn name(kind: u16) -> &'static str {
        match kind {
            DATA => "data",
            PADDING => "padding",
            JUMP => "jump",
            VOID => "void",
            _ => "unknown",
        }
    }
}

/// Fields of a descriptor copy.
pub mod descriptor {
    use super::Field;
    pub const MAGIC: Field = Field::new("magic", 0, 8);
    pub const FORMAT_VERSION: Field = Field::new("format_version", 8, 4);
    pub const FEATURES_INCOMPAT: Field = Field::new("features_incompat", 12, 4);
    pub const LOG_UUID: Field = Field::new("log_uuid", 16, 16);
    pub const RING_OFFSET: Field = Field::new("ring_offset", 32, 8);
    pub const RING_BYTES: Field = Field::new("ring_bytes", 40, 8);
    pub const PAYLOAD_BYTES_MAX: Field = Field::new("payload_bytes_max", 48, 4);
    pub const COPY_INDEX: Field = Field::new("copy_index", 52, 4);
    pub const RESERVED: Field = Field::new("reserved", 56, 4);
    pub const CRC: Field = Field::new("crc32c", 60, 4);
    /// Every field, in order.
    pub const ALL: [Field; 10] = [
        MAGIC,
        FORMAT_VERSION,
        FEATURES_INCOMPAT,
        LOG_UUID,
        RING_OFFSET,
        RING_BYTES,
        PAYLOAD_BYTES_MAX,
        COPY_INDEX,
        RESERVED,
        CRC,
    ];
}

/// Fields of a superline copy.
pub mod superline {
    use super::Field;
    pub const MAGIC: Field = Field::new("magic", 0, 8);
    pub const SEQUENCE: Field = Field::new("sequence", 8, 8);
    pub const HEAD: Field = Field::new("head", 16, 8);
    pub const START_LSN: Field = Field::new("start_lsn", 24, 8);
    pub const EPOCH: Field = Field::new("epoch", 32, 8);
    pub const DURABLE_LSN: Field = Field::new("durable_lsn", 40, 8);
    pub const RESERVED: Field = Field::new("reserved", 48, 12);
    pub const CRC: Field = Field::new("crc32c", 60, 4);
    /// Every field, in order.
    pub const ALL: [Field; 8] = [
        MAGIC,
        SEQUENCE,
        HEAD,
        START_LSN,
        EPOCH,
        DURABLE_LSN,
        RESERVED,
        CRC,
    ];
}

/// Fields of a record header.
pub mod record {
    use super::Field;
    pub const LSN: Field = Field::new("lsn", 0, 8);
    pub const LENGTH: Field = Field::new("length", 8, 4);
    pub const KIND: Field = Field::new("kind", 12, 2);
    pub const RESERVED: Field = Field::new("reserved", 14, 2);
    pub const PAYLOAD_CRC: Field = Field::new("payload_crc", 16, 4);
    pub const RESERVED2: Field = Field::new("reserved2", 20, 4);
    pub const VALID: Field = Field::new("valid", 24, 8);
    /// Every field, in order.
    pub const ALL: [Field; 7] = [LSN, LENGTH, KIND, RESERVED, PAYLOAD_CRC, RESERVED2, VALID];
    /// The header bytes the payload CRC covers (everything before `payload_crc`).
    pub const CRC_COVERED_BYTES: usize = 16;
}

/// Bytes a record with `payload` payload bytes occupies in the ring.
pub const fn record_footprint(payload: usize) -> usize {
    (RECORD_HEADER_BYTES + payload).next_multiple_of(RECORD_ALIGN)
}

const _: () = {
    assert!(DESCRIPTOR_COPY_OFFSETS[1] >= DESCRIPTOR_COPY_OFFSETS[0] + DESCRIPTOR_BYTES);
    assert!(SUPERLINE_COPY_OFFSETS[0] >= DESCRIPTOR_COPY_OFFSETS[1] + DESCRIPTOR_BYTES);
    assert!(SUPERLINE_COPY_OFFSETS[1] >= SUPERLINE_COPY_OFFSETS[0] + SUPERLINE_BYTES);
    assert!(RING_OFFSET >= SUPERLINE_COPY_OFFSETS[1] + SUPERLINE_BYTES);
    assert!(RING_OFFSET % RECORD_ALIGN == 0);
    assert!(SUPERLINE_COPY_OFFSETS[0] % 64 == 0 && SUPERLINE_COPY_OFFSETS[1] % 64 == 0);
    assert!(descriptor::CRC.end() == DESCRIPTOR_BYTES);
    assert!(superline::CRC.end() == SUPERLINE_BYTES);
    assert!(record::VALID.end() == RECORD_HEADER_BYTES);
    assert!(record::VALID.offset % 8 == 0);
    assert!(record::PAYLOAD_CRC.offset == record::CRC_COVERED_BYTES);
    assert!(RECORD_HEADER_BYTES <= RECORD_ALIGN);
};
