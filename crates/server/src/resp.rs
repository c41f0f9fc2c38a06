//! RESP2 framing: an incremental request parser, a reply encoder and a reply parser.
//!
//! Requests come in two shapes, as in Redis:
//!
//! - multibulk: `*<count>\r\n` followed by `count` bulk strings `$<len>\r\n<bytes>\r\n`;
//! - inline: one line of space-separated words ending in `\n` (optionally `\r\n`), with `"..."`
//!   and `'...'` quoting as `redis-cli` and telnet users type it.
//!
//! [`RequestParser`] is fed the unconsumed bytes of a connection's input each time more arrive and
//! answers [`Parse::Complete`], [`Parse::NeedMore`] or [`Parse::Error`]. It keeps the arguments
//! parsed so far between calls, so a large request arriving in many reads is scanned once. It
//! never allocates from a length it has not yet seen the bytes for: an argument is copied out only
//! when all of its bytes are present, and the argument vector grows as arguments arrive.

use std::fmt;

/// Size limits of the request parser. Every request that exceeds one is a [`ProtocolError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest bulk string (one argument) in bytes. Redis allows 512 MiB; the default is 64 MiB.
    pub max_bulk_bytes: usize,
    /// Largest number of arguments in one multibulk request (default 1,048,576, as Redis).
    pub max_multibulk_len: usize,
    /// Longest inline request line in bytes, without its line end (default 64 KiB, as Redis).
    pub max_inline_bytes: usize,
    /// Largest whole request (all headers and arguments) in bytes (default 128 MiB). This is what
    /// bounds a connection's input buffer.
    pub max_request_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_bytes: 64 << 20,
            max_multibulk_len: 1 << 20,
            max_inline_bytes: 64 << 10,
            max_request_bytes: 128 << 20,
        }
    }
}

/// Longest `*<count>` or `$<len>` header line, CRLF included. A valid header is at most 23
/// bytes (`$-9223372036854775808\r\n`); anything longer without a CRLF is garbage.
pub const HEADER_BYTES_MAX: usize = 32;

/// Deepest array nesting [`parse_reply`] accepts.
pub const REPLY_DEPTH_MAX: usize = 32;

/// What was wrong with a request. The server answers `-ERR Protocol error: <this>` and closes the
/// connection, as Redis does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// The `*` count is not a base-10 integer (non-digits, sign `+`, leading zero, overflow) or is
    /// negative other than `*-1`.
    #[error("invalid multibulk length")]
    InvalidMultibulkLength,
    /// The `*` count exceeds [`Limits::max_multibulk_len`].
    #[error("invalid multibulk length {len} (at most {max})")]
    MultibulkTooLong {
        /// The count the client sent.
        len: u64,
        /// The limit.
        max: usize,
    },
    /// The `$` length is not a non-negative base-10 integer.
    #[error("invalid bulk length")]
    InvalidBulkLength,
    /// The `$` length exceeds [`Limits::max_bulk_bytes`].
    #[error("invalid bulk length {len} (at most {max} bytes)")]
    BulkTooLong {
        /// The length the client sent.
        len: u64,
        /// The limit.
        max: usize,
    },
    /// Inside a multibulk request, an argument did not start with `$`.
    #[error("expected '$', got '{}'", EscapedByte(*found))]
    ExpectedBulk {
        /// The byte found instead.
        found: u8,
    },
    /// A `*` or `$` header line has no CRLF within [`HEADER_BYTES_MAX`] bytes.
    #[error("too big {kind} count string")]
    HeaderTooLong {
        /// `mbulk` or `bulk`.
        kind: &'static str,
    },
    /// A header line has a CR that is not followed by LF.
    #[error("expected LF after CR in {kind} header")]
    MissingLineFeed {
        /// `mbulk` or `bulk`.
        kind: &'static str,
    },
    /// The bytes of a bulk string are not followed by CRLF.
    #[error("expected CRLF after bulk data")]
    MissingBulkTerminator,
    /// An inline request line is longer than [`Limits::max_inline_bytes`].
    #[error("too big inline request")]
    InlineTooLong,
    /// An inline request has an unterminated quote, or a closing quote followed by a non-space.
    #[error("unbalanced quotes in request")]
    UnbalancedQuotes,
    /// The request exceeds [`Limits::max_request_bytes`] before it is complete.
    #[error("request exceeds {max} bytes")]
    RequestTooLarge {
        /// The limit.
        max: usize,
    },
    /// A reply (see [`parse_reply`]) starts with an unknown type byte.
    #[error("unknown reply type '{}'", EscapedByte(*found))]
    UnknownReplyType {
        /// The byte found.
        found: u8,
    },
    /// A reply's integer is malformed.
    #[error("invalid integer in reply")]
    InvalidReplyInteger,
    /// A reply nests arrays deeper than [`REPLY_DEPTH_MAX`].
    #[error("reply nested too deep")]
    ReplyTooDeep,
    /// A reply's simple string or error line is longer than [`Limits::max_inline_bytes`].
    #[error("reply line too long")]
    ReplyLineTooLong,
    /// A RESP3 boolean is neither `#t` nor `#f`, a null has text after `_`, or a verbatim
    /// string has no `xxx:` format prefix.
    #[error("malformed RESP3 {kind} reply")]
    MalformedReply {
        /// `boolean`, `null` or `verbatim`.
        kind: &'static str,
    },
}

/// Shows a byte as itself when printable ASCII, else as `\xHH` (error replies must not carry
/// control bytes).
struct EscapedByte(u8);

impl fmt::Display for EscapedByte {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_ascii_graphic() || self.0 == b' ' {
            write!(f, "{}", self.0 as char)
        } else {
            write!(f, "\\x{:02x}", self.0)
        }
    }
}

/// Result of one [`RequestParser::parse`] call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parse {
    /// A whole request: its arguments (empty for a blank inline line or `*0`/`*-1`, which the
    /// server ignores, as Redis does) and how many bytes of the input it used.
    Complete(Vec<Vec<u8>>, usize),
    /// The input holds only part of a request; call again with the same bytes plus more.
    NeedMore,
    /// The request is malformed or too large.
    Error(ProtocolError),
}

/// An incremental request parser. See the [module documentation](self).
///
/// Contract: pass the connection's unconsumed input each time. Between a [`Parse::NeedMore`] and
/// the next call the caller may only append bytes. After [`Parse::Complete`]`(_, used)` the caller
/// drops `used` bytes from the front; after [`Parse::Error`] the connection is unusable (the
/// parser resets itself, but the input position is lost).
#[derive(Debug, Clone)]
pub struct RequestParser {
    limits: Limits,
    /// Arguments of the current multibulk request parsed so far.
    args: Vec<Vec<u8>>,
    /// Argument count of the current multibulk request; `None` when between requests or inside
    /// an inline request.
    expected: Option<usize>,
    /// Bytes of the current request already parsed (the start of the next header).
    pos: usize,
    /// Inline requests: bytes already searched for the line end.
    inline_scanned: usize,
    /// An empty argument list with room, handed back by [`RequestParser::recycle`].
    spare_list: Vec<Vec<u8>>,
    /// Empty argument buffers with room, handed back by [`RequestParser::recycle`].
    spare_args: Vec<Vec<u8>>,
}

/// Initial argument vector capacity: never more than this from a client-supplied count.
const ARGS_PREALLOC_MAX: usize = 16;

/// Most argument buffers a parser keeps for reuse (see [`RequestParser::recycle`]).
const SPARE_ARGS_MAX: usize = 8;

/// Largest argument buffer (capacity in bytes) a parser keeps for reuse: an idle connection
/// holds at most `SPARE_ARGS_MAX` of these.
const SPARE_ARG_BYTES_MAX: usize = 4 << 10;

/// Largest argument list (capacity) a parser keeps for reuse.
const SPARE_LIST_MAX: usize = 64;

impl RequestParser {
    /// A parser with these limits.
    pub fn new(limits: Limits) -> Self {
        RequestParser {
            limits,
            args: Vec::new(),
            expected: None,
            pos: 0,
            inline_scanned: 0,
            spare_list: Vec::new(),
            spare_args: Vec::new(),
        }
    }

    /// Hands back the arguments of a request [`parse`](Self::parse) returned, once the caller is
    /// done with them: the next requests' arguments are copied into these buffers instead of
    /// new ones (no allocation per request once a connection has warmed up). Buffers larger
    /// than 4 KiB, and any beyond 8, are freed.
    pub fn recycle(&mut self, mut args: Vec<Vec<u8>>) {
        for mut arg in args.drain(..) {
            if self.spare_args.len() >= SPARE_ARGS_MAX {
                break;
            }
            if arg.capacity() <= SPARE_ARG_BYTES_MAX {
                arg.clear();
                self.spare_args.push(arg);
            }
        }
        if args.capacity() <= SPARE_LIST_MAX && args.capacity() > self.spare_list.capacity() {
            self.spare_list = args;
        }
    }

    /// The parser's limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Forgets any partial request.
    pub fn reset(&mut self) {
        self.args = Vec::new();
        self.expected = None;
        self.pos = 0;
        self.inline_scanned = 0;
    }

    /// Parses the request at the start of `buf` (the connection's unconsumed input).
    pub fn parse(&mut self, buf: &[u8]) -> Parse {
        let result = self.parse_inner(buf);
        // The whole-request limit holds however the bytes arrive: checked on a partial request
        // (the buffer already holds more) and on a complete one.
        let too_large = match &result {
            Parse::Complete(_, used) => *used > self.limits.max_request_bytes,
            Parse::NeedMore => buf.len() > self.limits.max_request_bytes,
            Parse::Error(_) => false,
        };
        if !matches!(result, Parse::NeedMore) || too_large {
            self.reset();
        }
        if too_large {
            return Parse::Error(ProtocolError::RequestTooLarge {
                max: self.limits.max_request_bytes,
            });
        }
        result
    }

    fn parse_inner(&mut self, buf: &[u8]) -> Parse {
        debug_assert!(self.pos <= buf.len(), "input shrank between calls");
        let expected = match self.expected {
            Some(n) => n,
            None => {
                let Some(&first) = buf.first() else {
                    return Parse::NeedMore;
                };
                if first != b'*' {
                    return self.parse_inline(buf);
                }
                let (count, header_len) = match read_header(buf, 0, "mbulk") {
                    Ok(Some(h)) => h,
                    Ok(None) => return Parse::NeedMore,
                    Err(e) => return Parse::Error(e),
                };
                // As Redis's processMultibulkBuffer: any count that is an integer is taken, and
                // zero or less is an empty request (skipped).
                let Some(count) = count else {
                    return Parse::Error(ProtocolError::InvalidMultibulkLength);
                };
                if count <= 0 {
                    return Parse::Complete(Vec::new(), header_len);
                }
                let count_u = count as u64;
                if count_u > self.limits.max_multibulk_len as u64 {
                    return Parse::Error(ProtocolError::MultibulkTooLong {
                        len: count_u,
                        max: self.limits.max_multibulk_len,
                    });
                }
                let count = count_u as usize;
                self.expected = Some(count);
                let mut list = std::mem::take(&mut self.spare_list);
                list.reserve(count.min(ARGS_PREALLOC_MAX));
                self.args = list;
                self.pos = header_len;
                count
            }
        };
        while self.args.len() < expected {
            let Some(&first) = buf.get(self.pos) else {
                return Parse::NeedMore;
            };
            if first != b'$' {
                return Parse::Error(ProtocolError::ExpectedBulk { found: first });
            }
            let (len, header_len) = match read_header(buf, self.pos, "bulk") {
                Ok(Some(h)) => h,
                Ok(None) => return Parse::NeedMore,
                Err(e) => return Parse::Error(e),
            };
            let len = match len {
                Some(l) if l >= 0 => l as u64,
                _ => return Parse::Error(ProtocolError::InvalidBulkLength),
            };
            if len > self.limits.max_bulk_bytes as u64 {
                return Parse::Error(ProtocolError::BulkTooLong {
                    len,
                    max: self.limits.max_bulk_bytes,
                });
            }
            // `len` is at most max_bulk_bytes, a usize.
            let len = len as usize;
            let data_start = self.pos + header_len;
            let Some(data_end) = data_start.checked_add(len) else {
                return Parse::Error(ProtocolError::InvalidBulkLength);
            };
            let frame_end = data_end + 2;
            if buf.len() < frame_end {
                // Check what has arrived of the terminator, so garbage is caught early.
                if buf.len() > data_end && buf[data_end] != b'\r' {
                    return Parse::Error(ProtocolError::MissingBulkTerminator);
                }
                return Parse::NeedMore;
            }
            if &buf[data_end..frame_end] != b"\r\n" {
                return Parse::Error(ProtocolError::MissingBulkTerminator);
            }
            let arg = match self.spare_args.pop() {
                Some(mut spare) => {
                    spare.extend_from_slice(&buf[data_start..data_end]);
                    spare
                }
                None => buf[data_start..data_end].to_vec(),
            };
            self.args.push(arg);
            self.pos = frame_end;
        }
        Parse::Complete(std::mem::take(&mut self.args), self.pos)
    }

    fn parse_inline(&mut self, buf: &[u8]) -> Parse {
        let from = self.inline_scanned.min(buf.len());
        let Some(offset) = buf[from..].iter().position(|&b| b == b'\n') else {
            if buf.len() > self.limits.max_inline_bytes {
                return Parse::Error(ProtocolError::InlineTooLong);
            }
            self.inline_scanned = buf.len();
            return Parse::NeedMore;
        };
        let newline = from + offset;
        let mut line = &buf[..newline];
        if let Some(stripped) = line.strip_suffix(b"\r") {
            line = stripped;
        }
        if line.len() > self.limits.max_inline_bytes {
            return Parse::Error(ProtocolError::InlineTooLong);
        }
        match split_inline(line) {
            Some(args) => Parse::Complete(args, newline + 1),
            None => Parse::Error(ProtocolError::UnbalancedQuotes),
        }
    }
}

/// Parses one request with a fresh parser: [`RequestParser::parse`] without the state.
pub fn parse_request(buf: &[u8], limits: &Limits) -> Parse {
    RequestParser::new(*limits).parse(buf)
}

/// Reads a `*<n>\r\n` or `$<n>\r\n` header starting at `start` (the type byte). Returns the value
/// (`None` if it is not a valid integer) and the header length including CRLF, or `Ok(None)` if
/// the line is not complete yet.
#[allow(clippy::type_complexity)]
fn read_header(
    buf: &[u8],
    start: usize,
    kind: &'static str,
) -> Result<Option<(Option<i64>, usize)>, ProtocolError> {
    let line = &buf[start..];
    let window = &line[..line.len().min(HEADER_BYTES_MAX)];
    let Some(cr) = window.iter().position(|&b| b == b'\r') else {
        if line.len() >= HEADER_BYTES_MAX {
            return Err(ProtocolError::HeaderTooLong { kind });
        }
        return Ok(None);
    };
    match line.get(cr + 1) {
        None => return Ok(None),
        Some(b'\n') => {}
        Some(_) => return Err(ProtocolError::MissingLineFeed { kind }),
    }
    Ok(Some((parse_strict_i64(&line[1..cr]), cr + 2)))
}

/// Parses a base-10 `i64` the way Redis's `string2ll` does: optional `-`, digits, no `+`, no
/// spaces, no leading zeros (`0` itself is fine), no overflow.
pub fn parse_strict_i64(s: &[u8]) -> Option<i64> {
    let (negative, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    match digits {
        [] => return None,
        [b'0'] => return if negative { None } else { Some(0) },
        [b'0', ..] => return None,
        _ => {}
    }
    if digits.len() > 19 {
        return None;
    }
    let mut magnitude: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        magnitude = magnitude
            .checked_mul(10)?
            .checked_add(u64::from(d - b'0'))?;
    }
    if negative {
        if magnitude == 1 << 63 {
            Some(i64::MIN)
        } else {
            i64::try_from(magnitude).ok().map(|m| -m)
        }
    } else {
        i64::try_from(magnitude).ok()
    }
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Splits an inline request line into arguments like Redis's `sdssplitargs`: words separated by
/// spaces; `"..."` with `\n \r \t \b \a \\ \" \xHH` escapes; `'...'` with `\'`; a quote may
/// start in the middle of a word (`ab"c d"` is `abc d`). A closing quote must be followed by a
/// space or the end. `None` means unbalanced quotes. Unlike C, a NUL byte is an ordinary byte.
pub fn split_inline(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let n = line.len();
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < n && is_space(line[i]) {
            i += 1;
        }
        if i == n {
            return Some(args);
        }
        let mut current = Vec::new();
        let (mut in_double, mut in_single, mut done) = (false, false, false);
        while !done {
            let b = line.get(i).copied();
            if in_double {
                match b {
                    None => return None,
                    Some(b'\\') if line.get(i + 1) == Some(&b'x') => {
                        let hi = line.get(i + 2).copied().and_then(hex_value);
                        let lo = line.get(i + 3).copied().and_then(hex_value);
                        if let (Some(hi), Some(lo)) = (hi, lo) {
                            current.push(hi * 16 + lo);
                            i += 3;
                        } else {
                            i += 1;
                            current.push(b'x');
                        }
                    }
                    Some(b'\\') if i + 1 < n => {
                        i += 1;
                        current.push(match line[i] {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 0x08,
                            b'a' => 0x07,
                            other => other,
                        });
                    }
                    Some(b'"') => {
                        if i + 1 < n && !is_space(line[i + 1]) {
                            return None;
                        }
                        done = true;
                    }
                    Some(c) => current.push(c),
                }
            } else if in_single {
                match b {
                    None => return None,
                    Some(b'\\') if line.get(i + 1) == Some(&b'\'') => {
                        i += 1;
                        current.push(b'\'');
                    }
                    Some(b'\'') => {
                        if i + 1 < n && !is_space(line[i + 1]) {
                            return None;
                        }
                        done = true;
                    }
                    Some(c) => current.push(c),
                }
            } else {
                match b {
                    None | Some(b' ' | b'\n' | b'\r' | b'\t') => done = true,
                    Some(b'"') => in_double = true,
                    Some(b'\'') => in_single = true,
                    Some(c) => current.push(c),
                }
            }
            if i < n {
                i += 1;
            }
        }
        args.push(current);
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------------

/// Appends `+<s>\r\n`. CR and LF in `s` become spaces.
pub fn write_simple(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'+');
    push_line(out, s);
}

/// Appends `-<msg>\r\n`. CR and LF in `msg` become spaces (as Redis does), so a reply line can
/// never be split.
pub fn write_error(out: &mut Vec<u8>, msg: &[u8]) {
    out.push(b'-');
    push_line(out, msg);
}

fn push_line(out: &mut Vec<u8>, s: &[u8]) {
    out.extend(
        s.iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

/// Appends the line `<kind><n>\r\n` (`-` before the digits of a negative `n`). Every reply
/// header goes through here: the formatting machinery of `write!` cost the server about 2% of
/// its CPU in YCSB's HGETALL replies (eleven headers each).
fn put_line(out: &mut Vec<u8>, kind: u8, negative: bool, mut n: u64) {
    // u64::MAX has 20 digits; the kind, a sign and CRLF make 24.
    let mut buf = [0u8; 24];
    let mut at = buf.len() - 2;
    buf[at..].copy_from_slice(b"\r\n");
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if negative {
        at -= 1;
        buf[at] = b'-';
    }
    at -= 1;
    buf[at] = kind;
    out.extend_from_slice(&buf[at..]);
}

/// Appends `<kind><n>\r\n` for a count or length.
fn put_count(out: &mut Vec<u8>, kind: u8, n: usize) {
    put_line(out, kind, false, n as u64);
}

/// Appends `:<n>\r\n`.
pub fn write_integer(out: &mut Vec<u8>, n: i64) {
    put_line(out, b':', n < 0, n.unsigned_abs());
}

/// Appends `$<len>\r\n<bytes>\r\n`.
pub fn write_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len() + 26);
    put_count(out, b'$', bytes.len());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// Appends a bulk string, or the null bulk string for `None`.
pub fn write_optional_bulk(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        Some(b) => write_bulk(out, b),
        None => write_null_bulk(out),
    }
}

/// Appends the null bulk string `$-1\r\n`.
pub fn write_null_bulk(out: &mut Vec<u8>) {
    out.extend_from_slice(b"$-1\r\n");
}

/// Appends an array header `*<n>\r\n`; the caller then appends `n` elements.
pub fn write_array_header(out: &mut Vec<u8>, n: usize) {
    put_count(out, b'*', n);
}

/// Appends the null array `*-1\r\n`.
pub fn write_null_array(out: &mut Vec<u8>) {
    out.extend_from_slice(b"*-1\r\n");
}

/// Appends the null reply: RESP3's `_\r\n`, or RESP2's null bulk string `$-1\r\n`.
pub fn write_null(out: &mut Vec<u8>, resp3: bool) {
    if resp3 {
        out.extend_from_slice(b"_\r\n");
    } else {
        write_null_bulk(out);
    }
}

/// Appends a bulk string, or the protocol's null ([`write_null`]) for `None`.
pub fn write_optional(out: &mut Vec<u8>, bytes: Option<&[u8]>, resp3: bool) {
    match bytes {
        Some(b) => write_bulk(out, b),
        None => write_null(out, resp3),
    }
}

/// Appends a map header for `n` pairs: RESP3's `%<n>`, or in RESP2 an array of `2n` elements.
/// The caller then appends `n` keys, each followed by its value.
pub fn write_map_header(out: &mut Vec<u8>, n: usize, resp3: bool) {
    if resp3 {
        put_count(out, b'%', n);
    } else {
        write_array_header(out, n.saturating_mul(2));
    }
}

/// Appends a set header: RESP3's `~<n>`, or in RESP2 an array header.
pub fn write_set_header(out: &mut Vec<u8>, n: usize, resp3: bool) {
    if resp3 {
        put_count(out, b'~', n);
    } else {
        write_array_header(out, n);
    }
}

/// Appends a push header (`><n>` in RESP3, an array header in RESP2).
pub fn write_push_header(out: &mut Vec<u8>, n: usize, resp3: bool) {
    if resp3 {
        put_count(out, b'>', n);
    } else {
        write_array_header(out, n);
    }
}

/// Appends a double already formatted as `text` (`1.5`, `inf`, `-inf`, `1e+20`): RESP3's
/// `,<text>`, or in RESP2 a bulk string of the same text. CR and LF cannot occur in a formatted
/// number; they would become spaces.
pub fn write_double_text(out: &mut Vec<u8>, text: &[u8], resp3: bool) {
    if resp3 {
        out.push(b',');
        push_line(out, text);
    } else {
        write_bulk(out, text);
    }
}

/// Appends a boolean: RESP3's `#t`/`#f`, or RESP2's integer 1/0.
pub fn write_boolean(out: &mut Vec<u8>, value: bool, resp3: bool) {
    match (resp3, value) {
        (true, true) => out.extend_from_slice(b"#t\r\n"),
        (true, false) => out.extend_from_slice(b"#f\r\n"),
        (false, v) => write_integer(out, i64::from(v)),
    }
}

/// Appends a verbatim string of the three-letter `format` (`txt`, `mkd`): RESP3's
/// `=<len>\r\n<format>:<bytes>\r\n`, or in RESP2 a bulk string of `bytes`.
pub fn write_verbatim(out: &mut Vec<u8>, format: [u8; 3], bytes: &[u8], resp3: bool) {
    if resp3 {
        put_count(out, b'=', bytes.len() + 4);
        out.extend_from_slice(&format);
        out.push(b':');
        out.extend_from_slice(bytes);
        out.extend_from_slice(b"\r\n");
    } else {
        write_bulk(out, bytes);
    }
}

/// A reply value (RESP2 and RESP3), for replies built as a tree and for clients (see
/// [`parse_reply`]). [`Reply::encode`] writes RESP2, [`Reply::encode_as`] either protocol; in
/// RESP2 the RESP3-only kinds fall back as Redis does (maps and sets become arrays, doubles and
/// verbatim strings bulk strings, booleans integers, nulls the null bulk string).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`
    Simple(Vec<u8>),
    /// `-ERR ...`
    Error(Vec<u8>),
    /// `:42`
    Integer(i64),
    /// `$3\r\nfoo`
    Bulk(Vec<u8>),
    /// `$-1`
    NullBulk,
    /// `*N` followed by N replies.
    Array(Vec<Reply>),
    /// `*-1`
    NullArray,
    /// RESP3 `_`.
    Null,
    /// RESP3 `%N` followed by N key/value pairs.
    Map(Vec<(Reply, Reply)>),
    /// RESP3 `~N` followed by N replies.
    Set(Vec<Reply>),
    /// RESP3 `,1.5`: the number's text as sent.
    Double(Vec<u8>),
    /// RESP3 `#t` / `#f`.
    Boolean(bool),
    /// RESP3 `=N\r\ntxt:...`: the three-letter format and the text.
    Verbatim([u8; 3], Vec<u8>),
    /// RESP3 `>N` followed by N replies (out-of-band data such as pub/sub messages).
    Push(Vec<Reply>),
}

impl Reply {
    /// A simple string reply from text.
    pub fn simple(s: &str) -> Reply {
        Reply::Simple(s.as_bytes().to_vec())
    }

    /// A bulk reply from bytes.
    pub fn bulk(b: impl AsRef<[u8]>) -> Reply {
        Reply::Bulk(b.as_ref().to_vec())
    }

    /// Appends the RESP2 encoding of this reply to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.encode_as(out, false);
    }

    /// Appends the encoding of this reply in RESP3 (`resp3`) or RESP2. In RESP3 both RESP2 nulls
    /// become `_`, as Redis sends them.
    pub fn encode_as(&self, out: &mut Vec<u8>, resp3: bool) {
        let list = |out: &mut Vec<u8>, items: &[Reply]| {
            for item in items {
                item.encode_as(out, resp3);
            }
        };
        match self {
            Reply::Simple(s) => write_simple(out, s),
            Reply::Error(e) => write_error(out, e),
            Reply::Integer(n) => write_integer(out, *n),
            Reply::Bulk(b) => write_bulk(out, b),
            Reply::NullBulk | Reply::Null => write_null(out, resp3),
            Reply::NullArray if resp3 => write_null(out, true),
            Reply::NullArray => write_null_array(out),
            Reply::Array(items) => {
                write_array_header(out, items.len());
                list(out, items);
            }
            Reply::Set(items) => {
                write_set_header(out, items.len(), resp3);
                list(out, items);
            }
            Reply::Push(items) => {
                write_push_header(out, items.len(), resp3);
                list(out, items);
            }
            Reply::Map(pairs) => {
                write_map_header(out, pairs.len(), resp3);
                for (k, v) in pairs {
                    k.encode_as(out, resp3);
                    v.encode_as(out, resp3);
                }
            }
            Reply::Double(text) => write_double_text(out, text, resp3),
            Reply::Boolean(b) => write_boolean(out, *b, resp3),
            Reply::Verbatim(format, text) => write_verbatim(out, *format, text, resp3),
        }
    }

    /// The encoding of this reply.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}

/// Parses one reply from the start of `buf`, for clients and tests: `Ok(Some((reply, used)))`,
/// `Ok(None)` if incomplete, or an error. Bulk lengths and array counts obey `limits`
/// (`max_bulk_bytes`, `max_multibulk_len`; simple lines `max_inline_bytes`) and nesting is at
/// most [`REPLY_DEPTH_MAX`]. Stateless: an incomplete reply is re-parsed from the start.
pub fn parse_reply(buf: &[u8], limits: &Limits) -> Result<Option<(Reply, usize)>, ProtocolError> {
    parse_reply_at(buf, 0, limits, 0)
}

fn parse_reply_at(
    buf: &[u8],
    start: usize,
    limits: &Limits,
    depth: usize,
) -> Result<Option<(Reply, usize)>, ProtocolError> {
    if depth > REPLY_DEPTH_MAX {
        return Err(ProtocolError::ReplyTooDeep);
    }
    let Some(&kind) = buf.get(start) else {
        return Ok(None);
    };
    let rest = &buf[start..];
    let Some(cr) = rest[1..]
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| p + 1)
    else {
        if rest.len() > limits.max_inline_bytes.max(HEADER_BYTES_MAX) {
            return Err(ProtocolError::ReplyLineTooLong);
        }
        return Ok(None);
    };
    let line = &rest[1..cr];
    let after = start + cr + 2;
    match kind {
        b'+' | b'-' => {
            if line.len() > limits.max_inline_bytes {
                return Err(ProtocolError::ReplyLineTooLong);
            }
            let reply = if kind == b'+' {
                Reply::Simple(line.to_vec())
            } else {
                Reply::Error(line.to_vec())
            };
            Ok(Some((reply, after)))
        }
        b':' => {
            let n = parse_strict_i64(line).ok_or(ProtocolError::InvalidReplyInteger)?;
            Ok(Some((Reply::Integer(n), after)))
        }
        b'_' if line.is_empty() => Ok(Some((Reply::Null, after))),
        b'_' => Err(ProtocolError::MalformedReply { kind: "null" }),
        b'#' => match line {
            b"t" => Ok(Some((Reply::Boolean(true), after))),
            b"f" => Ok(Some((Reply::Boolean(false), after))),
            _ => Err(ProtocolError::MalformedReply { kind: "boolean" }),
        },
        b',' => {
            if line.len() > limits.max_inline_bytes {
                return Err(ProtocolError::ReplyLineTooLong);
            }
            Ok(Some((Reply::Double(line.to_vec()), after)))
        }
        b'$' | b'=' => {
            let len = parse_strict_i64(line).ok_or(ProtocolError::InvalidBulkLength)?;
            if len == -1 && kind == b'$' {
                return Ok(Some((Reply::NullBulk, after)));
            }
            if len < 0 {
                return Err(ProtocolError::InvalidBulkLength);
            }
            if len as u64 > limits.max_bulk_bytes as u64 {
                return Err(ProtocolError::BulkTooLong {
                    len: len as u64,
                    max: limits.max_bulk_bytes,
                });
            }
            let end = after + len as usize;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(ProtocolError::MissingBulkTerminator);
            }
            let data = &buf[after..end];
            if kind == b'$' {
                return Ok(Some((Reply::Bulk(data.to_vec()), end + 2)));
            }
            match data {
                [a, b, c, b':', text @ ..] => Ok(Some((
                    Reply::Verbatim([*a, *b, *c], text.to_vec()),
                    end + 2,
                ))),
                _ => Err(ProtocolError::MalformedReply { kind: "verbatim" }),
            }
        }
        b'*' | b'%' | b'~' | b'>' => {
            let count = parse_strict_i64(line).ok_or(ProtocolError::InvalidMultibulkLength)?;
            if count == -1 && kind == b'*' {
                return Ok(Some((Reply::NullArray, after)));
            }
            if count < 0 {
                return Err(ProtocolError::InvalidMultibulkLength);
            }
            if count as u64 > limits.max_multibulk_len as u64 {
                return Err(ProtocolError::MultibulkTooLong {
                    len: count as u64,
                    max: limits.max_multibulk_len,
                });
            }
            // A map's count is of pairs: twice as many replies follow.
            let elements = if kind == b'%' {
                count.saturating_mul(2)
            } else {
                count
            };
            let mut items = Vec::with_capacity((elements as usize).min(ARGS_PREALLOC_MAX));
            let mut pos = after;
            for _ in 0..elements {
                match parse_reply_at(buf, pos, limits, depth + 1)? {
                    Some((item, next)) => {
                        items.push(item);
                        pos = next;
                    }
                    None => return Ok(None),
                }
            }
            let reply = match kind {
                b'%' => {
                    let mut pairs = Vec::with_capacity(items.len() / 2);
                    let mut it = items.into_iter();
                    while let (Some(k), Some(v)) = (it.next(), it.next()) {
                        pairs.push((k, v));
                    }
                    Reply::Map(pairs)
                }
                b'~' => Reply::Set(items),
                b'>' => Reply::Push(items),
                _ => Reply::Array(items),
            };
            Ok(Some((reply, pos)))
        }
        other => Err(ProtocolError::UnknownReplyType { found: other }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<Vec<u8>> {
        list.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    fn small_limits() -> Limits {
        Limits {
            max_bulk_bytes: 16,
            max_multibulk_len: 4,
            max_inline_bytes: 32,
            max_request_bytes: 256,
        }
    }

    /// The reply headers are written digit by digit; every value must read back as the decimal
    /// text `format!` gives, from both ends of the range and the digit-count boundaries.
    #[test]
    fn reply_headers_spell_numbers_in_decimal() {
        let mut signed = vec![
            0i64,
            1,
            -1,
            9,
            10,
            -10,
            99,
            100,
            i64::MAX,
            i64::MIN,
            i64::MIN + 1,
        ];
        let mut counts = vec![0usize, 1, 9, 10, 64, 1000, usize::MAX];
        for d in 1..19u32 {
            let p = 10i64.pow(d);
            signed.extend([p - 1, p, p + 1, -(p - 1), -p]);
            counts.extend([p as usize - 1, p as usize]);
        }
        for n in signed {
            let mut out = Vec::new();
            write_integer(&mut out, n);
            assert_eq!(out, format!(":{n}\r\n").into_bytes(), "integer {n}");
        }
        for n in counts {
            let mut out = b"prefix".to_vec();
            write_array_header(&mut out, n);
            write_map_header(&mut out, n / 2, true);
            write_set_header(&mut out, n, true);
            write_push_header(&mut out, n, true);
            let want = format!("prefix*{n}\r\n%{}\r\n~{n}\r\n>{n}\r\n", n / 2);
            assert_eq!(out, want.into_bytes(), "count {n}");
        }
        for len in [0usize, 1, 9, 10, 99, 100, 4096] {
            let body = vec![b'x'; len];
            let mut out = Vec::new();
            write_bulk(&mut out, &body);
            write_verbatim(&mut out, *b"txt", &body, true);
            let text = "x".repeat(len);
            let want = format!("${len}\r\n{text}\r\n={}\r\ntxt:{text}\r\n", len + 4);
            assert_eq!(out, want.into_bytes(), "bulk of {len}");
        }
    }

    /// Parses `input` request by request, handing each request's arguments back: every request
    /// comes out as a fresh parser reads it, split at any byte.
    #[test]
    fn recycled_buffers_carry_no_bytes_over() {
        let l = Limits::default();
        let big = "v".repeat(5000);
        let requests: Vec<Vec<&str>> = vec![
            vec!["SET", "key-one", "a-longer-value-than-the-next"],
            vec!["GET", "k"],
            vec!["SET", "k", &big],
            vec!["MSET", "a", "1", "b", "2", "c", "3", "d", "4", "e", "5"],
            vec!["DEL", "x"],
            vec!["PING"],
        ];
        let mut wire = Vec::new();
        for r in &requests {
            wire.extend_from_slice(format!("*{}\r\n", r.len()).as_bytes());
            for a in r {
                wire.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
            }
        }
        for split in [1, 7, wire.len()] {
            let mut p = RequestParser::new(l);
            let (mut input, mut fed, mut seen) = (Vec::new(), 0, 0);
            while seen < requests.len() {
                match p.parse(&input) {
                    Parse::Complete(got, used) => {
                        assert_eq!(got, args(&requests[seen]), "request {seen}, split {split}");
                        input.drain(..used);
                        p.recycle(got);
                        seen += 1;
                    }
                    Parse::NeedMore => {
                        assert!(fed < wire.len(), "ran out of input at request {seen}");
                        let end = (fed + split).min(wire.len());
                        input.extend_from_slice(&wire[fed..end]);
                        fed = end;
                    }
                    Parse::Error(e) => panic!("request {seen}, split {split}: {e}"),
                }
            }
        }
    }

    /// A recycled buffer takes the next argument (no allocation); oversized ones are dropped.
    #[test]
    fn recycle_reuses_small_buffers_only() {
        let l = Limits::default();
        let mut p = RequestParser::new(l);
        let Parse::Complete(first, _) = p.parse(b"*2\r\n$3\r\nGET\r\n$5\r\nhello\r\n") else {
            panic!("a whole request");
        };
        let spots: Vec<*const u8> = first.iter().map(|a| a.as_ptr()).collect();
        p.recycle(first);
        let Parse::Complete(second, _) = p.parse(b"*2\r\n$3\r\nDEL\r\n$2\r\nhi\r\n") else {
            panic!("a whole request");
        };
        assert_eq!(second, args(&["DEL", "hi"]));
        for a in &second {
            assert!(
                spots.contains(&a.as_ptr()),
                "argument not in a recycled buffer"
            );
        }
        let mut huge = vec![b'x'; SPARE_ARG_BYTES_MAX + 1];
        huge.reserve_exact(0);
        p.recycle(vec![huge]);
        assert!(
            p.spare_args
                .iter()
                .all(|a| a.capacity() <= SPARE_ARG_BYTES_MAX),
            "kept a buffer over the limit"
        );
        p.recycle(second);
        p.recycle((0..2 * SPARE_ARGS_MAX).map(|_| vec![0u8; 8]).collect());
        assert!(p.spare_args.len() <= SPARE_ARGS_MAX);
        assert!(p.spare_args.iter().all(Vec::is_empty));
    }

    #[test]
    fn parses_multibulk_and_inline() {
        let l = Limits::default();
        assert_eq!(
            parse_request(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", &l),
            Parse::Complete(args(&["GET", "k"]), 20)
        );
        assert_eq!(
            parse_request(b"PING\r\n", &l),
            Parse::Complete(args(&["PING"]), 6)
        );
        assert_eq!(
            parse_request(b"PING\n", &l),
            Parse::Complete(args(&["PING"]), 5)
        );
        assert_eq!(parse_request(b"\r\n", &l), Parse::Complete(vec![], 2));
        assert_eq!(parse_request(b"*0\r\n", &l), Parse::Complete(vec![], 4));
        assert_eq!(parse_request(b"*-1\r\n", &l), Parse::Complete(vec![], 5));
        // Any negative count is an empty request, as in Redis.
        assert_eq!(parse_request(b"*-10\r\n", &l), Parse::Complete(vec![], 6));
        assert_eq!(
            parse_request(b"*1\r\n$0\r\n\r\n", &l),
            Parse::Complete(vec![Vec::new()], 10)
        );
        assert_eq!(parse_request(b"", &l), Parse::NeedMore);
        assert_eq!(parse_request(b"*1\r\n$4\r\nPI", &l), Parse::NeedMore);
        // Binary-safe payloads.
        assert_eq!(
            parse_request(b"*1\r\n$4\r\n\r\n\0\xff\r\n", &l),
            Parse::Complete(vec![b"\r\n\0\xff".to_vec()], 14)
        );
    }

    #[test]
    fn inline_quoting_follows_sdssplitargs() {
        type Case = (&'static [u8], Option<Vec<Vec<u8>>>);
        let cases: &[Case] = &[
            (b"set ab\"c d\" x", Some(args(&["set", "abc d", "x"]))),
            (b"set ab\"c d\"e", None),
            (b"set a'b c'", Some(args(&["set", "ab c"]))),
            (b"echo \"a\\\"", None),
            (b"set a b", Some(args(&["set", "a", "b"]))),
            (b"  set   a\tb  ", Some(args(&["set", "a", "b"]))),
            (b"echo \"a b\"", Some(args(&["echo", "a b"]))),
            (
                b"echo \"\\x41\\n\\\"\"",
                Some(vec![b"echo".to_vec(), b"A\n\"".to_vec()]),
            ),
            (b"echo 'it\\'s'", Some(args(&["echo", "it's"]))),
            (b"echo 'a\\nb'", Some(args(&["echo", "a\\nb"]))),
            (b"echo \"\"", Some(args(&["echo", ""]))),
            (b"echo \"\\xZZ\"", Some(args(&["echo", "xZZ"]))),
            (b"echo \"a", None),
            (b"echo 'a", None),
            (b"echo \"a\"b", None),
            (b"echo 'a'b", None),
            (b"", Some(vec![])),
        ];
        for (line, want) in cases {
            assert_eq!(
                &split_inline(line),
                want,
                "line {:?}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn strict_integers() {
        let cases: &[(&[u8], Option<i64>)] = &[
            (b"0", Some(0)),
            (b"12", Some(12)),
            (b"-1", Some(-1)),
            (b"9223372036854775807", Some(i64::MAX)),
            (b"-9223372036854775808", Some(i64::MIN)),
            (b"9223372036854775808", None),
            (b"-9223372036854775809", None),
            (b"99999999999999999999", None),
            (b"", None),
            (b"-", None),
            (b"-0", None),
            (b"01", None),
            (b"+1", None),
            (b" 1", None),
            (b"1 ", None),
            (b"1a", None),
            (b"0x10", None),
        ];
        for (s, want) in cases {
            assert_eq!(
                parse_strict_i64(s),
                *want,
                "{:?}",
                String::from_utf8_lossy(s)
            );
        }
    }

    #[test]
    fn malformed_requests_give_specific_errors() {
        use ProtocolError::*;
        let l = small_limits();
        let cases: &[(&[u8], ProtocolError)] = &[
            (b"*x\r\n", InvalidMultibulkLength),
            (b"*\r\n", InvalidMultibulkLength),
            (b"*01\r\n", InvalidMultibulkLength),
            (b"*+1\r\n", InvalidMultibulkLength),
            (b"* 1\r\n", InvalidMultibulkLength),
            (b"*1 \r\n", InvalidMultibulkLength),
            (b"*99999999999999999999\r\n", InvalidMultibulkLength),
            (b"*5\r\n", MultibulkTooLong { len: 5, max: 4 }),
            (
                b"*9223372036854775807\r\n",
                MultibulkTooLong {
                    len: i64::MAX as u64,
                    max: 4,
                },
            ),
            (b"*1\rX", MissingLineFeed { kind: "mbulk" }),
            (
                b"*1111111111111111111111111111111111",
                HeaderTooLong { kind: "mbulk" },
            ),
            (b"*1\r\n$-1\r\n", InvalidBulkLength),
            (b"*1\r\n$-5\r\n", InvalidBulkLength),
            (b"*1\r\n$abc\r\n", InvalidBulkLength),
            (b"*1\r\n$\r\n", InvalidBulkLength),
            (b"*1\r\n$01\r\na\r\n", InvalidBulkLength),
            (b"*1\r\n$+1\r\na\r\n", InvalidBulkLength),
            (b"*1\r\n$17\r\n", BulkTooLong { len: 17, max: 16 }),
            (
                b"*1\r\n$536870913\r\n",
                BulkTooLong {
                    len: 536_870_913,
                    max: 16,
                },
            ),
            (b"*1\r\n$1\rx", MissingLineFeed { kind: "bulk" }),
            (
                b"*1\r\n$11111111111111111111111111111111111",
                HeaderTooLong { kind: "bulk" },
            ),
            (b"*2\r\n$3\r\nget\r\nx\r\n", ExpectedBulk { found: b'x' }),
            (b"*1\r\n:1\r\n", ExpectedBulk { found: b':' }),
            (b"*1\r\n\r\n", ExpectedBulk { found: b'\r' }),
            (b"*1\r\n$4\r\nPINGxx", MissingBulkTerminator),
            (b"*1\r\n$4\r\nPINGx", MissingBulkTerminator),
            (b"*1\r\n$4\r\nPING\rx", MissingBulkTerminator),
            (b"*1\r\n$4\r\nPING\n\r", MissingBulkTerminator),
            (b"echo \"unterminated\r\n", UnbalancedQuotes),
            (b"echo 'x'y\r\n", UnbalancedQuotes),
            (
                b"this inline line is longer than 32 bytes\r\n",
                InlineTooLong,
            ),
            (
                b"this inline line is longer than 32 bytes without end",
                InlineTooLong,
            ),
        ];
        for (input, want) in cases {
            assert_eq!(
                parse_request(input, &l),
                Parse::Error(want.clone()),
                "input {:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn request_size_is_bounded() {
        let l = Limits {
            max_request_bytes: 40,
            ..small_limits()
        };
        let mut p = RequestParser::new(l);
        let mut buf = b"*4\r\n".to_vec();
        for _ in 0..3 {
            buf.extend_from_slice(b"$16\r\n0123456789abcdef\r\n");
        }
        assert_eq!(
            p.parse(&buf),
            Parse::Error(ProtocolError::RequestTooLarge { max: 40 })
        );
    }

    #[test]
    fn error_text_escapes_control_bytes() {
        let e = ProtocolError::ExpectedBulk { found: b'\r' };
        assert_eq!(e.to_string(), "expected '$', got '\\x0d'");
        let mut out = Vec::new();
        write_error(&mut out, b"ERR a\r\nb");
        assert_eq!(out, b"-ERR a  b\r\n");
    }

    /// Valid frames, each split at every byte boundary, parse the same as whole (with one parser
    /// kept across the split and with a fresh parser on every prefix).
    #[test]
    fn split_at_every_boundary_parses_identically() {
        let frames: Vec<Vec<u8>> = vec![
            b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n".to_vec(),
            b"*1\r\n$0\r\n\r\n".to_vec(),
            b"*2\r\n$4\r\nECHO\r\n$6\r\n\r\n\r\n\r\n\r\n".to_vec(),
            b"PING\r\n".to_vec(),
            b"set \"a b\" 'c d'\n".to_vec(),
            b"*0\r\n".to_vec(),
            b"\r\n".to_vec(),
            b"*1\r\n$12\r\n\0\x01\x02\xff\xfe*$\r\n:+-\r\n".to_vec(),
        ];
        let l = Limits::default();
        for frame in &frames {
            let whole = parse_request(frame, &l);
            let Parse::Complete(ref want, used) = whole else {
                panic!(
                    "frame {:?} did not parse: {whole:?}",
                    String::from_utf8_lossy(frame)
                );
            };
            assert_eq!(used, frame.len());
            for cut in 0..frame.len() {
                assert_eq!(
                    parse_request(&frame[..cut], &l),
                    Parse::NeedMore,
                    "fresh cut {cut}"
                );
                let mut p = RequestParser::new(l);
                assert_eq!(p.parse(&frame[..cut]), Parse::NeedMore, "cut {cut}");
                assert_eq!(
                    p.parse(frame),
                    Parse::Complete(want.clone(), used),
                    "cut {cut}"
                );
            }
            // Byte by byte with one parser.
            let mut p = RequestParser::new(l);
            for end in 1..frame.len() {
                assert_eq!(p.parse(&frame[..end]), Parse::NeedMore);
            }
            assert_eq!(p.parse(frame), Parse::Complete(want.clone(), used));
        }
        // A pipeline of all frames, fed in every two-piece split, gives the same sequence.
        let pipeline: Vec<u8> = frames.concat();
        let expected: Vec<Vec<Vec<u8>>> = frames
            .iter()
            .map(|f| match parse_request(f, &l) {
                Parse::Complete(a, _) => a,
                other => panic!("{other:?}"),
            })
            .collect();
        for cut in 0..=pipeline.len() {
            assert_eq!(
                drive(&[&pipeline[..cut], &pipeline[cut..]], &l),
                expected,
                "cut {cut}"
            );
        }
    }

    /// Feeds chunks to one parser as a connection would and collects the requests.
    fn drive(chunks: &[&[u8]], l: &Limits) -> Vec<Vec<Vec<u8>>> {
        let mut p = RequestParser::new(*l);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        for chunk in chunks {
            buf.extend_from_slice(chunk);
            loop {
                match p.parse(&buf) {
                    Parse::Complete(a, used) => {
                        out.push(a);
                        buf.drain(..used);
                    }
                    Parse::NeedMore => break,
                    Parse::Error(e) => panic!("{e}"),
                }
            }
        }
        assert!(buf.is_empty());
        out
    }

    /// A tiny deterministic generator (SplitMix64) so the test needs no external crate.
    struct SplitMix(u64);

    impl SplitMix {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Random and mutated inputs never panic, never claim more bytes than given, and respect the
    /// limits.
    #[test]
    fn random_bytes_never_panic() {
        let mut rng = SplitMix(0x6b61_7661_6368);
        let l = small_limits();
        let alphabet: &[u8] = b"*$\r\n0123456789-+ \"'\\xab:";
        let seeds: &[&[u8]] = &[
            b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n",
            b"PING \"a\\x41\" 'b'\r\n",
            b"*1\r\n$4\r\nPING\r\n*0\r\n",
        ];
        let mut completes = 0u32;
        for iteration in 0..300_000u32 {
            let mut input: Vec<u8> = match iteration % 3 {
                0 => {
                    let len = rng.below(48) as usize;
                    (0..len).map(|_| rng.next() as u8).collect()
                }
                1 => {
                    let len = rng.below(48) as usize;
                    (0..len)
                        .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
                        .collect()
                }
                _ => {
                    let mut v = seeds[rng.below(seeds.len() as u64) as usize].to_vec();
                    for _ in 0..=rng.below(3) {
                        let at = rng.below(v.len() as u64) as usize;
                        match rng.below(3) {
                            0 => v[at] = rng.next() as u8,
                            1 => v.insert(at, alphabet[rng.below(alphabet.len() as u64) as usize]),
                            _ => {
                                v.remove(at);
                            }
                        }
                    }
                    v
                }
            };
            if iteration % 7 == 0 {
                input.truncate(rng.below(input.len() as u64 + 1) as usize);
            }
            let mut p = RequestParser::new(l);
            let cut = rng.below(input.len() as u64 + 1) as usize;
            let _ = p.parse(&input[..cut]);
            let mut p2 = RequestParser::new(l);
            let whole = p2.parse(&input);
            match p.parse(&input) {
                Parse::Complete(a, used) => {
                    completes += 1;
                    assert!(used <= input.len());
                    assert!(a.len() <= l.max_multibulk_len || input[0] != b'*');
                    assert!(
                        a.iter()
                            .all(|x| x.len() <= l.max_bulk_bytes.max(l.max_inline_bytes))
                    );
                    // Split or whole, the answer is the same.
                    assert_eq!(whole, Parse::Complete(a, used));
                }
                other => {
                    // A split may see an error earlier, but never a different success.
                    assert!(
                        !matches!(whole, Parse::Complete(..)) || matches!(other, Parse::Error(_))
                    );
                }
            }
            let _ = parse_reply(&input, &l);
        }
        assert!(
            completes > 1000,
            "the generator should produce some valid requests"
        );
    }

    #[test]
    fn encoder_output() {
        let mut out = Vec::new();
        write_simple(&mut out, b"OK");
        write_error(&mut out, b"ERR x");
        write_integer(&mut out, -42);
        write_bulk(&mut out, b"ab");
        write_null_bulk(&mut out);
        write_array_header(&mut out, 0);
        write_null_array(&mut out);
        assert_eq!(
            out,
            b"+OK\r\n-ERR x\r\n:-42\r\n$2\r\nab\r\n$-1\r\n*0\r\n*-1\r\n".to_vec()
        );
        let nested = Reply::Array(vec![
            Reply::Integer(1),
            Reply::Array(vec![Reply::bulk("a"), Reply::NullBulk]),
            Reply::NullArray,
            Reply::Array(vec![]),
        ]);
        let bytes = nested.to_bytes();
        assert_eq!(
            bytes,
            b"*4\r\n:1\r\n*2\r\n$1\r\na\r\n$-1\r\n*-1\r\n*0\r\n".to_vec()
        );
        assert_eq!(
            parse_reply(&bytes, &Limits::default()),
            Ok(Some((nested, bytes.len())))
        );
        for cut in 0..bytes.len() {
            assert_eq!(parse_reply(&bytes[..cut], &Limits::default()), Ok(None));
        }
    }

    #[test]
    fn resp3_encoder_output() {
        let mut three = Vec::new();
        let mut two = Vec::new();
        for (out, resp3) in [(&mut three, true), (&mut two, false)] {
            write_null(out, resp3);
            write_optional(out, None, resp3);
            write_optional(out, Some(b"x"), resp3);
            write_map_header(out, 2, resp3);
            write_set_header(out, 3, resp3);
            write_push_header(out, 1, resp3);
            write_double_text(out, b"-1.5e+20", resp3);
            write_double_text(out, b"inf", resp3);
            write_boolean(out, true, resp3);
            write_boolean(out, false, resp3);
            write_verbatim(out, *b"txt", b"a\r\nb", resp3);
        }
        assert_eq!(
            String::from_utf8_lossy(&three),
            "_\r\n_\r\n$1\r\nx\r\n%2\r\n~3\r\n>1\r\n,-1.5e+20\r\n,inf\r\n#t\r\n#f\r\n\
             =8\r\ntxt:a\r\nb\r\n"
        );
        assert_eq!(
            String::from_utf8_lossy(&two),
            "$-1\r\n$-1\r\n$1\r\nx\r\n*4\r\n*3\r\n*1\r\n$8\r\n-1.5e+20\r\n$3\r\ninf\r\n\
             :1\r\n:0\r\n$4\r\na\r\nb\r\n"
        );
        let tree = Reply::Array(vec![
            Reply::Map(vec![
                (Reply::bulk("k"), Reply::Double(b"0.25".to_vec())),
                (Reply::simple("s"), Reply::Null),
            ]),
            Reply::Set(vec![Reply::Integer(1), Reply::Boolean(true)]),
            Reply::Push(vec![Reply::bulk("message")]),
            Reply::Verbatim(*b"mkd", b"# t".to_vec()),
            Reply::NullBulk,
            Reply::NullArray,
        ]);
        let mut three = Vec::new();
        tree.encode_as(&mut three, true);
        assert_eq!(
            String::from_utf8_lossy(&three),
            "*6\r\n%2\r\n$1\r\nk\r\n,0.25\r\n+s\r\n_\r\n~2\r\n:1\r\n#t\r\n>1\r\n\
             $7\r\nmessage\r\n=7\r\nmkd:# t\r\n_\r\n_\r\n"
        );
        assert_eq!(
            String::from_utf8_lossy(&tree.to_bytes()),
            "*6\r\n*4\r\n$1\r\nk\r\n$4\r\n0.25\r\n+s\r\n$-1\r\n*2\r\n:1\r\n:1\r\n*1\r\n\
             $7\r\nmessage\r\n$3\r\n# t\r\n$-1\r\n*-1\r\n"
        );
        // The parser reads RESP3 back into the same tree (the nulls become `Null`), and needs
        // every byte of it.
        let (parsed, used) = parse_reply(&three, &Limits::default()).unwrap().unwrap();
        assert_eq!(used, three.len());
        let mut again = Vec::new();
        parsed.encode_as(&mut again, true);
        assert_eq!(again, three);
        for cut in 0..three.len() {
            assert_eq!(parse_reply(&three[..cut], &Limits::default()), Ok(None));
        }
    }

    #[test]
    fn resp3_parser_rejects_malformed_replies() {
        let l = Limits::default();
        for bad in [
            &b"_x\r\n"[..],
            b"#x\r\n",
            b"=3\r\ntx:\r\n",
            b"%-1\r\n",
            b"=-1\r\n",
        ] {
            assert!(
                parse_reply(bad, &l).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let huge = b"%9223372036854775807\r\n";
        assert!(parse_reply(huge, &l).is_err());
    }

    #[test]
    fn reply_parser_rejects_garbage() {
        use ProtocolError::*;
        let l = small_limits();
        let cases: &[(&[u8], ProtocolError)] = &[
            (b"?x\r\n", UnknownReplyType { found: b'?' }),
            (b":1x\r\n", InvalidReplyInteger),
            (b"$-2\r\n", InvalidBulkLength),
            (b"$17\r\n", BulkTooLong { len: 17, max: 16 }),
            (b"$1\r\nab\r\n", MissingBulkTerminator),
            (b"*5\r\n", MultibulkTooLong { len: 5, max: 4 }),
        ];
        for (input, want) in cases {
            assert_eq!(parse_reply(input, &l), Err(want.clone()));
        }
        let deep: Vec<u8> = b"*1\r\n".repeat(REPLY_DEPTH_MAX + 2);
        assert_eq!(parse_reply(&deep, &Limits::default()), Err(ReplyTooDeep));
    }
}
