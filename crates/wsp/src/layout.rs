//! The image file's fixed layout: the header, the marker line, the metadata area and where the
//! segment data starts. `docs/format/wsp-image.md` describes the same; `tests/format_doc.rs`
//! checks the two agree.

use pmem::layout::Field;

/// The image header's magic, at offset 0.
pub const MAGIC: [u8; 8] = *b"KVWSPIMG";
/// The marker's magic when the image holds a completed save.
pub const MARKER_VALID: [u8; 8] = *b"KVWSPVAL";
/// Format version.
pub const VERSION: u32 = 1;
/// Size of the header structure (the rest of its page is zero).
pub const HEADER_SIZE: usize = 64;
/// Offset of the marker: its own cache line, written after everything else.
pub const MARKER_OFFSET: u64 = 128;
/// Size of the marker structure.
pub const MARKER_SIZE: usize = 24;
/// Offset of the metadata area (JSON, see the format document).
pub const META_OFFSET: u64 = 4096;
/// Capacity of the metadata area.
pub const META_CAPACITY: u64 = 1 << 20;
/// First byte of the segment data area; extents are allocated from here, page-aligned.
pub const DATA_OFFSET: u64 = META_OFFSET + META_CAPACITY;
/// The descriptor number at which the image is open in the traced program.
pub const IMAGE_FD: i32 = 1000;

/// `state` values.
pub const STATE_RUNNING: u32 = 1;
/// A save completed (the marker says whether inside the window).
pub const STATE_SAVED: u32 = 2;
/// A save ran past its window; the marker is clear.
pub const STATE_MISSED: u32 = 3;
/// The program ran to its end.
pub const STATE_ENDED: u32 = 4;

/// `mode` values.
pub const MODE_IMAGE: u32 = 1;
/// Memory stays anonymous; the save copies it.
pub const MODE_HIBERNATE: u32 = 2;

/// The header at offset 0.
pub const HEADER_FIELDS: &[Field] = &[
    Field::new("magic", 0, 8),
    Field::new("version", 8, 4),
    Field::new("mode", 12, 4),
    Field::new("state", 16, 4),
    Field::new("header_crc", 20, 4),
    Field::new("counter", 24, 8),
    Field::new("meta_offset", 32, 8),
    Field::new("meta_capacity", 40, 8),
    Field::new("meta_len", 48, 8),
    Field::new("meta_crc", 56, 4),
    Field::new("exit_status", 60, 4),
];

/// The marker at [`MARKER_OFFSET`].
pub const MARKER_FIELDS: &[Field] = &[
    Field::new("valid", 0, 8),
    Field::new("counter", 8, 8),
    Field::new("header_crc", 16, 4),
    Field::new("marker_crc", 20, 4),
];

/// A field's offset by name (the tables above are the single source).
pub(crate) const fn at(fields: &[Field], i: usize) -> usize {
    fields[i].offset
}
