//! One checked little-endian reader and writer for every on-media and wire structure.
//!
//! Every decoder in Kavach reads untrusted bytes (a file, a mapping, a socket) through a
//! [`Reader`]: each read names the field it reads, and a read past the end is a [`FieldError`]
//! naming the structure, the field and the offset, never a panic or a slice index out of range.
//! Decoders report a bad value the same way ([`Reader::invalid`]), so every decode error has one
//! shape, convertible into a [`Corruption`].
//!
//! Encoders write through a [`Writer`] (a growing buffer, for messages and records) or a
//! [`FixedWriter`] (a fixed-size buffer with fields at documented offsets). Writing is our own
//! bytes into our own buffer: a field that does not fit is a bug here, and asserts.
//!
//! All integers are little-endian.

use std::fmt;

use crate::error::Corruption;
use crate::layout::Field;

/// What is wrong with a field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The input ends inside the field.
    Truncated {
        /// Bytes the field needs.
        needed: usize,
        /// Bytes the input still holds at the field's offset.
        available: usize,
    },
    /// Bytes follow the end of the structure.
    Trailing {
        /// How many.
        extra: usize,
    },
    /// The field holds a value the structure does not allow.
    Invalid {
        /// What a valid structure holds there.
        expected: String,
        /// What the input holds there.
        found: String,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Truncated { needed, available } => write!(
                f,
                "needs {needed} bytes, the input holds only {available} from there"
            ),
            Problem::Trailing { extra } => {
                write!(f, "should end the structure, but {extra} more bytes follow")
            }
            Problem::Invalid { expected, found } => write!(f, "expected {expected}, found {found}"),
        }
    }
}

impl Problem {
    /// What a valid structure holds there, for messages in the `expected`/`found` shape.
    #[inline]
    pub fn expected(&self) -> String {
        match self {
            Problem::Truncated { needed, .. } => format!("{needed} bytes"),
            Problem::Trailing { .. } => "the end of the structure".into(),
            Problem::Invalid { expected, .. } => expected.clone(),
        }
    }

    /// What the input holds there, for messages in the `expected`/`found` shape.
    #[inline]
    pub fn found(&self) -> String {
        match self {
            Problem::Truncated { available, .. } => format!("{available} bytes left"),
            Problem::Trailing { extra } => format!("{extra} more bytes"),
            Problem::Invalid { found, .. } => found.clone(),
        }
    }
}

/// A field of a structure failed to decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{structure} at byte {offset:#x}: field `{field}` {problem}")]
pub struct FieldError {
    /// The structure, e.g. `"log descriptor copy 1"` or `"replication frame"`.
    pub structure: &'static str,
    /// The field, e.g. `"magic"` or `"extent length"`.
    pub field: &'static str,
    /// Where the field starts: from the start of the input, plus the base the reader was given
    /// (so a structure read from a pool names its pool offset).
    pub offset: u64,
    /// What is wrong.
    pub problem: Problem,
}

impl FieldError {
    /// Whether the input ended inside this field (as opposed to holding a bad value).
    #[inline]
    pub fn is_truncated(&self) -> bool {
        matches!(self.problem, Problem::Truncated { .. })
    }
}

impl From<FieldError> for Corruption {
    fn from(e: FieldError) -> Corruption {
        Corruption {
            structure: e.structure.to_string(),
            offset: e.offset,
            field: e.field,
            expected: e.problem.expected(),
            found: e.problem.found(),
        }
    }
}

/// A checked little-endian cursor over untrusted bytes.
///
/// Sequential reads (`u8`, `u32`, `bytes`, ...) advance the cursor; `*_at` reads take a fixed
/// offset (for structures with a documented field table) and leave it alone.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    structure: &'static str,
    base: u64,
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader over `bytes`, which hold a `structure`.
    #[inline]
    pub fn new(structure: &'static str, bytes: &'a [u8]) -> Reader<'a> {
        Reader {
            bytes,
            structure,
            base: 0,
            pos: 0,
        }
    }

    /// The same reader, naming offsets from `base` (the input's own offset in a pool, a region
    /// or a message) in its errors.
    #[inline]
    pub fn at(mut self, base: u64) -> Reader<'a> {
        self.base = base;
        self
    }

    /// The structure this reader decodes.
    #[inline]
    pub fn structure(&self) -> &'static str {
        self.structure
    }

    /// Offset of the cursor from the start of the input.
    #[inline]
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes after the cursor.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// The whole input.
    #[inline]
    pub fn input(&self) -> &'a [u8] {
        self.bytes
    }

    /// An error for `field` starting at input offset `offset`.
    #[cold]
    #[inline(never)]
    pub fn error(&self, field: &'static str, offset: usize, problem: Problem) -> FieldError {
        FieldError {
            structure: self.structure,
            field,
            offset: self.base.saturating_add(offset as u64),
            problem,
        }
    }

    /// An "expected this, found that" error for `field` starting at input offset `offset`.
    #[cold]
    #[inline(never)]
    pub fn invalid(
        &self,
        field: &'static str,
        offset: usize,
        expected: impl fmt::Display,
        found: impl fmt::Display,
    ) -> FieldError {
        self.error(
            field,
            offset,
            Problem::Invalid {
                expected: expected.to_string(),
                found: found.to_string(),
            },
        )
    }

    /// The `n` bytes of `field` at input offset `offset`.
    #[inline]
    pub fn slice_at(
        &self,
        field: &'static str,
        offset: usize,
        n: usize,
    ) -> Result<&'a [u8], FieldError> {
        match offset.checked_add(n) {
            Some(end) if end <= self.bytes.len() => Ok(&self.bytes[offset..end]),
            _ => Err(self.error(
                field,
                offset,
                Problem::Truncated {
                    needed: n,
                    available: self.bytes.len().saturating_sub(offset),
                },
            )),
        }
    }

    /// The `N` bytes of `field` at input offset `offset`.
    #[inline]
    pub fn array_at<const N: usize>(
        &self,
        field: &'static str,
        offset: usize,
    ) -> Result<[u8; N], FieldError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.slice_at(field, offset, N)?);
        Ok(a)
    }

    /// The byte of `field` at input offset `offset`.
    #[inline]
    pub fn u8_at(&self, field: &'static str, offset: usize) -> Result<u8, FieldError> {
        Ok(self.slice_at(field, offset, 1)?[0])
    }

    /// The `u16` of `field` at input offset `offset`.
    #[inline]
    pub fn u16_at(&self, field: &'static str, offset: usize) -> Result<u16, FieldError> {
        self.array_at(field, offset).map(u16::from_le_bytes)
    }

    /// The `u32` of `field` at input offset `offset`.
    #[inline]
    pub fn u32_at(&self, field: &'static str, offset: usize) -> Result<u32, FieldError> {
        self.array_at(field, offset).map(u32::from_le_bytes)
    }

    /// The `u64` of `field` at input offset `offset`.
    #[inline]
    pub fn u64_at(&self, field: &'static str, offset: usize) -> Result<u64, FieldError> {
        self.array_at(field, offset).map(u64::from_le_bytes)
    }

    /// The bytes of a field of a documented table.
    #[inline]
    pub fn field(&self, f: Field) -> Result<&'a [u8], FieldError> {
        self.slice_at(f.name, f.offset, f.size)
    }

    /// A 2-byte field of a documented table.
    #[inline]
    pub fn field_u16(&self, f: Field) -> Result<u16, FieldError> {
        debug_assert_eq!(f.size, 2, "field {}", f.name);
        self.u16_at(f.name, f.offset)
    }

    /// A 4-byte field of a documented table.
    #[inline]
    pub fn field_u32(&self, f: Field) -> Result<u32, FieldError> {
        debug_assert_eq!(f.size, 4, "field {}", f.name);
        self.u32_at(f.name, f.offset)
    }

    /// An 8-byte field of a documented table.
    #[inline]
    pub fn field_u64(&self, f: Field) -> Result<u64, FieldError> {
        debug_assert_eq!(f.size, 8, "field {}", f.name);
        self.u64_at(f.name, f.offset)
    }

    /// An "expected this, found that" error for a field of a documented table.
    #[cold]
    #[inline(never)]
    pub fn invalid_field(
        &self,
        f: Field,
        expected: impl fmt::Display,
        found: impl fmt::Display,
    ) -> FieldError {
        self.invalid(f.name, f.offset, expected, found)
    }

    /// The next `n` bytes, as `field`.
    #[inline]
    pub fn bytes(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], FieldError> {
        let s = self.slice_at(field, self.pos, n)?;
        self.pos += n;
        Ok(s)
    }

    /// The next `N` bytes, as `field`.
    #[inline]
    pub fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], FieldError> {
        let a = self.array_at(field, self.pos)?;
        self.pos += N;
        Ok(a)
    }

    /// The next byte, as `field`.
    #[inline]
    pub fn u8(&mut self, field: &'static str) -> Result<u8, FieldError> {
        self.array::<1>(field).map(|[b]| b)
    }

    /// The next `u16`, as `field`.
    #[inline]
    pub fn u16(&mut self, field: &'static str) -> Result<u16, FieldError> {
        self.array(field).map(u16::from_le_bytes)
    }

    /// The next `u32`, as `field`.
    #[inline]
    pub fn u32(&mut self, field: &'static str) -> Result<u32, FieldError> {
        self.array(field).map(u32::from_le_bytes)
    }

    /// The next `u64`, as `field`.
    #[inline]
    pub fn u64(&mut self, field: &'static str) -> Result<u64, FieldError> {
        self.array(field).map(u64::from_le_bytes)
    }

    /// The next `i64`, as `field`.
    #[inline]
    pub fn i64(&mut self, field: &'static str) -> Result<i64, FieldError> {
        self.array(field).map(i64::from_le_bytes)
    }

    /// A `u32` length, then that many bytes, both as `field`.
    #[inline]
    pub fn len_bytes(&mut self, field: &'static str) -> Result<&'a [u8], FieldError> {
        let n = self.u32(field)? as usize;
        self.bytes(field, n)
    }

    /// A `u32` count of items that each take at least `item_bytes_min` bytes: refused when the
    /// rest of the input cannot hold that many, so no caller allocates for a count the input
    /// cannot back.
    #[inline]
    pub fn count(
        &mut self,
        field: &'static str,
        item_bytes_min: usize,
    ) -> Result<usize, FieldError> {
        let at = self.pos;
        let n = self.u32(field)? as usize;
        let fits = n
            .checked_mul(item_bytes_min)
            .is_some_and(|need| need <= self.remaining());
        if !fits {
            return Err(self.invalid(
                field,
                at,
                format!(
                    "at most {} items of at least {item_bytes_min} bytes (the {} bytes left)",
                    self.remaining() / item_bytes_min.max(1),
                    self.remaining()
                ),
                n,
            ));
        }
        Ok(n)
    }

    /// Every byte after the cursor.
    #[inline]
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.bytes[self.pos..];
        self.pos = self.bytes.len();
        s
    }

    /// Check that the cursor is at the end of the input.
    #[inline]
    pub fn finish(&self) -> Result<(), FieldError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(self.error("end", self.pos, Problem::Trailing { extra })),
        }
    }
}

/// An appending little-endian writer (messages, records).
#[derive(Debug, Clone, Default)]
pub struct Writer {
    bytes: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    #[inline]
    pub fn new() -> Writer {
        Writer::default()
    }

    /// An empty writer with room for `n` bytes.
    #[inline]
    pub fn with_capacity(n: usize) -> Writer {
        Writer {
            bytes: Vec::with_capacity(n),
        }
    }

    /// Bytes written so far.
    #[inline]
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Nothing written yet.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Append a byte.
    #[inline]
    pub fn u8(&mut self, v: u8) -> &mut Writer {
        self.bytes.push(v);
        self
    }

    /// Append a `u16`.
    #[inline]
    pub fn u16(&mut self, v: u16) -> &mut Writer {
        self.bytes(&v.to_le_bytes())
    }

    /// Append a `u32`.
    #[inline]
    pub fn u32(&mut self, v: u32) -> &mut Writer {
        self.bytes(&v.to_le_bytes())
    }

    /// Append a `u64`.
    #[inline]
    pub fn u64(&mut self, v: u64) -> &mut Writer {
        self.bytes(&v.to_le_bytes())
    }

    /// Append an `i64`.
    #[inline]
    pub fn i64(&mut self, v: i64) -> &mut Writer {
        self.bytes(&v.to_le_bytes())
    }

    /// Append raw bytes.
    #[inline]
    pub fn bytes(&mut self, b: &[u8]) -> &mut Writer {
        self.bytes.extend_from_slice(b);
        self
    }

    /// Append a count as a `u32`. Counts above `u32::MAX` cannot be encoded: the callers'
    /// limits keep them far below it.
    #[inline]
    pub fn count(&mut self, n: usize) -> &mut Writer {
        let n = u32::try_from(n).expect("a count above u32::MAX cannot be encoded");
        self.u32(n)
    }

    /// Append a `u32` length, then the bytes.
    #[inline]
    pub fn len_bytes(&mut self, b: &[u8]) -> &mut Writer {
        self.count(b.len()).bytes(b)
    }

    /// The bytes written.
    #[inline]
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

/// A writer of fields at fixed offsets of a fixed-size buffer (on-media structures).
#[derive(Debug)]
pub struct FixedWriter<'a> {
    bytes: &'a mut [u8],
}

impl<'a> FixedWriter<'a> {
    /// A writer over `bytes` (usually a zeroed array of the structure's size).
    #[inline]
    pub fn new(bytes: &'a mut [u8]) -> FixedWriter<'a> {
        FixedWriter { bytes }
    }

    /// Write `b` at `offset`.
    #[inline]
    pub fn bytes_at(&mut self, offset: usize, b: &[u8]) -> &mut FixedWriter<'a> {
        let end = offset
            .checked_add(b.len())
            .filter(|&e| e <= self.bytes.len());
        let end = end.unwrap_or_else(|| does_not_fit(offset, b.len(), self.bytes.len()));
        self.bytes[offset..end].copy_from_slice(b);
        self
    }

    /// Write a byte at `offset`.
    #[inline]
    pub fn u8_at(&mut self, offset: usize, v: u8) -> &mut FixedWriter<'a> {
        self.bytes_at(offset, &[v])
    }

    /// Write a `u16` at `offset`.
    #[inline]
    pub fn u16_at(&mut self, offset: usize, v: u16) -> &mut FixedWriter<'a> {
        self.bytes_at(offset, &v.to_le_bytes())
    }

    /// Write a `u32` at `offset`.
    #[inline]
    pub fn u32_at(&mut self, offset: usize, v: u32) -> &mut FixedWriter<'a> {
        self.bytes_at(offset, &v.to_le_bytes())
    }

    /// Write a `u64` at `offset`.
    #[inline]
    pub fn u64_at(&mut self, offset: usize, v: u64) -> &mut FixedWriter<'a> {
        self.bytes_at(offset, &v.to_le_bytes())
    }

    /// Write the bytes of a field of a documented table (exactly its size).
    #[inline]
    pub fn field(&mut self, f: Field, b: &[u8]) -> &mut FixedWriter<'a> {
        assert_eq!(b.len(), f.size, "field {} is {} bytes", f.name, f.size);
        self.bytes_at(f.offset, b)
    }

    /// Write a 2-byte field of a documented table.
    #[inline]
    pub fn field_u16(&mut self, f: Field, v: u16) -> &mut FixedWriter<'a> {
        self.field(f, &v.to_le_bytes())
    }

    /// Write a 4-byte field of a documented table.
    #[inline]
    pub fn field_u32(&mut self, f: Field, v: u32) -> &mut FixedWriter<'a> {
        self.field(f, &v.to_le_bytes())
    }

    /// Write an 8-byte field of a documented table.
    #[inline]
    pub fn field_u64(&mut self, f: Field, v: u64) -> &mut FixedWriter<'a> {
        self.field(f, &v.to_le_bytes())
    }
}

/// Fields of a fixed-size structure already held as an array (a record header read into a
/// `[u8; 32]`): the field offsets are constants of the format that the layout checks against the
/// structure's size, so these reads cannot fail; on hot paths they compile to one load each.
/// A field outside the array is a bug in the layout and panics.
#[inline]
pub fn array_field<const N: usize>(b: &[u8; N], f: Field) -> &[u8] {
    &b[f.offset..f.offset + f.size]
}

/// The `u16` field `f` of the array `b` (see [`array_field`]).
#[inline]
pub fn array_u16<const N: usize>(b: &[u8; N], f: Field) -> u16 {
    let mut w = [0u8; 2];
    w.copy_from_slice(array_field(b, f));
    u16::from_le_bytes(w)
}

/// The `u32` field `f` of the array `b` (see [`array_field`]).
#[inline]
pub fn array_u32<const N: usize>(b: &[u8; N], f: Field) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(array_field(b, f));
    u32::from_le_bytes(w)
}

/// The `u64` field `f` of the array `b` (see [`array_field`]).
#[inline]
pub fn array_u64<const N: usize>(b: &[u8; N], f: Field) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(array_field(b, f));
    u64::from_le_bytes(w)
}

/// A field written past the end of a fixed-size structure: a bug in the encoder, never input.
#[cold]
#[inline(never)]
fn does_not_fit(offset: usize, len: usize, size: usize) -> ! {
    panic!("{len} bytes at offset {offset} do not fit a {size}-byte structure")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_reads_are_little_endian_and_advance() {
        let mut w = Writer::new();
        w.u8(1)
            .u16(0x0302)
            .u32(0x0706_0504)
            .u64(0x0f0e_0d0c_0b0a_0908);
        w.len_bytes(b"xy").i64(-2);
        let b = w.into_bytes();
        assert_eq!(
            &b[..15],
            &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
        );
        let mut r = Reader::new("sample", &b);
        assert_eq!(r.u8("a"), Ok(1));
        assert_eq!(r.u16("b"), Ok(0x0302));
        assert_eq!(r.u32("c"), Ok(0x0706_0504));
        assert_eq!(r.u64("d"), Ok(0x0f0e_0d0c_0b0a_0908));
        assert_eq!(r.len_bytes("e"), Ok(&b"xy"[..]));
        assert_eq!(r.i64("f"), Ok(-2));
        assert_eq!(r.remaining(), 0);
        assert_eq!(r.finish(), Ok(()));
    }

    #[test]
    fn a_read_past_the_end_names_structure_field_and_offset() {
        let b = [0u8; 6];
        let mut r = Reader::new("sample record", &b).at(0x1000);
        r.u32("first").unwrap();
        let e = r.u32("second").unwrap_err();
        assert_eq!(e.structure, "sample record");
        assert_eq!(e.field, "second");
        assert_eq!(e.offset, 0x1004);
        assert_eq!(
            e.problem,
            Problem::Truncated {
                needed: 4,
                available: 2
            }
        );
        assert!(e.is_truncated());
        assert_eq!(
            e.to_string(),
            "sample record at byte 0x1004: field `second` needs 4 bytes, the input holds only 2 from there"
        );
        // The cursor did not move: the two bytes are still there.
        assert_eq!(r.remaining(), 2);
        assert_eq!(r.u8_at("x", 99).unwrap_err().offset, 0x1000 + 99);
        assert!(r.slice_at("huge", usize::MAX, 2).is_err());
        assert!(r.bytes("huge", usize::MAX).is_err());
    }

    #[test]
    fn trailing_bytes_and_impossible_counts_are_refused() {
        let mut r = Reader::new("s", &[5, 0, 0, 0, 1, 2, 3]);
        let e = r.count("items", 2).unwrap_err();
        assert_eq!((e.field, e.offset), ("items", 0));
        let mut r = Reader::new("s", &[1, 0, 0, 0, 1, 2, 3]);
        assert_eq!(r.count("items", 2), Ok(1));
        let e = r.finish().unwrap_err();
        assert_eq!(e.problem, Problem::Trailing { extra: 3 });
        assert_eq!(e.offset, 4);
        let mut r = Reader::new("s", &[0xff, 0xff, 0xff, 0xff]);
        assert!(r.count("items", usize::MAX).is_err());
        assert_eq!(Reader::new("s", &[0, 0, 0, 0]).count("items", 0), Ok(0));
    }

    #[test]
    fn field_errors_convert_to_corruption() {
        let r = Reader::new("pool thing", &[]).at(64);
        let c: Corruption = r.invalid("magic", 8, "KV", "XX").into();
        assert_eq!(c.structure, "pool thing");
        assert_eq!((c.offset, c.field), (72, "magic"));
        assert_eq!((c.expected.as_str(), c.found.as_str()), ("KV", "XX"));
        let c: Corruption = r.u32_at("crc32c", 0).unwrap_err().into();
        assert_eq!(
            (c.expected.as_str(), c.found.as_str()),
            ("4 bytes", "0 bytes left")
        );
    }

    #[test]
    fn fixed_writer_places_fields() {
        let f = Field::new("word", 4, 4);
        let mut b = [0u8; 8];
        FixedWriter::new(&mut b)
            .field_u32(f, 0x0403_0201)
            .u8_at(0, 9);
        assert_eq!(b, [9, 0, 0, 0, 1, 2, 3, 4]);
        let r = Reader::new("s", &b);
        assert_eq!(r.field_u32(f), Ok(0x0403_0201));
        assert_eq!(r.field(f), Ok(&b[4..8]));
    }

    #[test]
    #[should_panic(expected = "do not fit")]
    fn fixed_writer_asserts_on_a_field_outside_the_buffer() {
        let mut b = [0u8; 4];
        FixedWriter::new(&mut b).u64_at(0, 1);
    }
}
