//! Little-endian encoding of records, checkpoints and directory entries, and a bounds-checked
//! decoder that reports damage (what, where, expected, found) instead of panicking.

use crate::error::{FsError, Result};

/// Longest name component, in bytes.
pub const NAME_MAX: usize = 255;

/// A name component microfs accepts: 1..=255 bytes, no `/` or NUL, not `.` or `..`.
pub(crate) fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= NAME_MAX && !s.contains(['/', '\0']) && s != "." && s != ".."
}

/// An encoder into a byte vector.
#[derive(Debug, Default)]
pub(crate) struct Enc {
    pub(crate) buf: Vec<u8>,
}

impl Enc {
    pub(crate) fn new() -> Enc {
        Enc { buf: Vec::new() }
    }
    pub(crate) fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    pub(crate) fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn i64(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A name: u16 length, then its bytes.
    pub(crate) fn name(&mut self, s: &str) -> &mut Self {
        self.u16(s.len() as u16);
        self.buf.extend_from_slice(s.as_bytes());
        self
    }
    pub(crate) fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(b);
        self
    }
}

/// A decoder over bytes that came from the device at byte `base`.
#[derive(Debug)]
pub(crate) struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
    base: u64,
    what: &'a str,
}

impl<'a> Dec<'a> {
    pub(crate) fn new(buf: &'a [u8], base: u64, what: &'a str) -> Dec<'a> {
        Dec {
            buf,
            pos: 0,
            base,
            what,
        }
    }
    pub(crate) fn at(&self) -> u64 {
        self.base + self.pos as u64
    }
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8]> {
        if self.remaining() < n {
            return Err(FsError::damage(
                format!("{} ({field})", self.what),
                self.at(),
                format!("{n} more bytes"),
                format!("{} bytes left", self.remaining()),
            ));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    pub(crate) fn u8(&mut self, field: &str) -> Result<u8> {
        Ok(self.take(1, field)?[0])
    }
    pub(crate) fn u16(&mut self, field: &str) -> Result<u16> {
        let b = self.take(2, field)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    pub(crate) fn u32(&mut self, field: &str) -> Result<u32> {
        let b = self.take(4, field)?;
        Ok(u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
    }
    pub(crate) fn u64(&mut self, field: &str) -> Result<u64> {
        let b = self.take(8, field)?;
        Ok(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }
    pub(crate) fn i64(&mut self, field: &str) -> Result<i64> {
        Ok(self.u64(field)? as i64)
    }
    pub(crate) fn bytes(&mut self, n: usize, field: &str) -> Result<&'a [u8]> {
        self.take(n, field)
    }
    /// A name written by [`Enc::name`]: valid UTF-8, 1..=255 bytes, no `/` or NUL.
    pub(crate) fn name(&mut self, field: &str) -> Result<String> {
        let at = self.at();
        let len = self.u16(field)? as usize;
        let b = self.take(len, field)?;
        let s = std::str::from_utf8(b).map_err(|_| {
            FsError::damage(
                format!("{} ({field})", self.what),
                at,
                "a UTF-8 name",
                format!("{len} bytes that are not UTF-8"),
            )
        })?;
        if !valid_name(s) {
            return Err(FsError::damage(
                format!("{} ({field})", self.what),
                at,
                "a name of 1..=255 bytes without '/' or NUL",
                format!("{s:?}"),
            ));
        }
        Ok(s.to_string())
    }
    /// A count of items of at least `each` bytes: refuse counts the rest cannot hold.
    pub(crate) fn count(&mut self, field: &str, each: usize) -> Result<usize> {
        let at = self.at();
        let n = self.u32(field)? as usize;
        if n.saturating_mul(each.max(1)) > self.remaining() {
            return Err(FsError::damage(
                format!("{} ({field})", self.what),
                at,
                format!("at most {} items", self.remaining() / each.max(1)),
                n.to_string(),
            ));
        }
        Ok(n)
    }
    pub(crate) fn expect_end(&self) -> Result<()> {
        if self.remaining() != 0 {
            return Err(FsError::damage(
                format!("{} (length)", self.what),
                self.at(),
                "no bytes after the last field",
                format!("{} bytes", self.remaining()),
            ));
        }
        Ok(())
    }
}
