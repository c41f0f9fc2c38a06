//! The block target's wire format (documented in `docs/format/target-protocol.md`, which a
//! test holds against the tables here).
//!
//! Every message is a 48-byte header followed by a body. All integers are little-endian.
//! A connection starts with a HELLO request naming the job (namespace); then the client sends
//! requests and the server answers each one, in order, with a reply carrying the request's id.

use pmem::layout::Field;

/// The protocol version this code speaks.
pub const PROTOCOL_VERSION: u16 = 1;
/// The first four bytes of every request.
pub const REQUEST_MAGIC: [u8; 4] = *b"KVTQ";
/// The first four bytes of every reply.
pub const REPLY_MAGIC: [u8; 4] = *b"KVTR";
/// The size of a request or reply header.
pub const HEADER_BYTES: usize = 48;
/// The largest body of a request or reply payload (a READ's length too).
pub const MAX_PAYLOAD: u32 = 8 << 20;
/// The largest error message in a reply.
pub const MAX_MESSAGE: u32 = 1024;
/// The fixed part of a HELLO body, before the job name.
pub const HELLO_FIXED_BYTES: usize = 8;
/// The body of a successful HELLO or STAT reply.
pub const INFO_BYTES: usize = 16;
/// The largest tenant class in a HELLO: Linux's I/O priority classes are 0 (none), 1
/// (realtime), 2 (best effort) and 3 (idle).
pub const TENANT_CLASS_MAX: u8 = 3;
/// The largest tenant level in a HELLO (Linux's I/O priority levels are 0 to 7).
pub const TENANT_LEVEL_MAX: u8 = 7;
/// The largest data of a STATS reply (a JSON document).
pub const MAX_STATS: u32 = 1 << 20;
/// HELLO flag: create the namespace if it does not exist.
pub const FLAG_CREATE: u16 = 1;
/// Info flag: this HELLO created the namespace.
pub const INFO_CREATED: u16 = 1;

/// Request operations.
pub mod op {
    /// Open (or create) a namespace; must be the first request and only once.
    pub const HELLO: u16 = 1;
    /// Read `length` bytes at `offset`.
    pub const READ: u16 = 2;
    /// Write the body at `offset`; durable when the reply is sent.
    pub const WRITE: u16 = 3;
    /// Claim `[offset, offset + length)` for this connection.
    pub const CLAIM: u16 = 4;
    /// Make every write durable (they already are; syncs the file).
    pub const FLUSH: u16 = 5;
    /// The namespace's size and block size.
    pub const STAT: u16 = 6;
    /// The server's quality-of-service statistics, as JSON; allowed before HELLO.
    pub const STATS: u16 = 7;
    /// Every operation, with its name.
    pub const ALL: [(&str, u16); 7] = [
        ("HELLO", HELLO),
        ("READ", READ),
        ("WRITE", WRITE),
        ("CLAIM", CLAIM),
        ("FLUSH", FLUSH),
        ("STAT", STAT),
        ("STATS", STATS),
    ];
}

/// Reply statuses.
pub mod status {
    /// Done.
    pub const OK: u16 = 0;
    /// The target's IO failed; `code` is the errno.
    pub const IO: u16 = 1;
    /// Outside the namespace.
    pub const RANGE: u16 = 2;
    /// Another connection claims the range.
    pub const BUSY: u16 = 3;
    /// The request broke the protocol.
    pub const PROTOCOL: u16 = 4;
    /// Refused: no such namespace, too small, too many connections.
    pub const REFUSED: u16 = 5;
    /// A bad argument (a job name, a length).
    pub const INVALID: u16 = 6;
    /// Every status, with its name.
    pub const ALL: [(&str, u16); 7] = [
        ("OK", OK),
        ("IO", IO),
        ("RANGE", RANGE),
        ("BUSY", BUSY),
        ("PROTOCOL", PROTOCOL),
        ("REFUSED", REFUSED),
        ("INVALID", INVALID),
    ];
}

/// The request header.
pub mod request {
    use super::Field;
    /// `REQUEST_MAGIC`.
    pub const MAGIC: Field = Field::new("magic", 0, 4);
    /// An `op` value.
    pub const OP: Field = Field::new("op", 4, 2);
    /// HELLO: `FLAG_CREATE`; zero otherwise.
    pub const FLAGS: Field = Field::new("flags", 6, 2);
    /// Chosen by the client, echoed in the reply.
    pub const ID: Field = Field::new("id", 8, 8);
    /// First byte (zero for HELLO, FLUSH, STAT).
    pub const OFFSET: Field = Field::new("offset", 16, 8);
    /// Bytes (HELLO: the namespace's size).
    pub const LENGTH: Field = Field::new("length", 24, 8);
    /// Bytes of body after the header.
    pub const BODY_LEN: Field = Field::new("body_len", 32, 4);
    /// CRC-32C of the body.
    pub const BODY_CRC: Field = Field::new("body_crc", 36, 4);
    /// Zero.
    pub const RESERVED: Field = Field::new("reserved", 40, 4);
    /// CRC-32C of bytes 0..44.
    pub const HEADER_CRC: Field = Field::new("header_crc", 44, 4);
    /// In order.
    pub const FIELDS: [Field; 10] = [
        MAGIC, OP, FLAGS, ID, OFFSET, LENGTH, BODY_LEN, BODY_CRC, RESERVED, HEADER_CRC,
    ];
}

/// The reply header.
pub mod reply {
    use super::Field;
    /// `REPLY_MAGIC`.
    pub const MAGIC: Field = Field::new("magic", 0, 4);
    /// The request's op.
    pub const OP: Field = Field::new("op", 4, 2);
    /// A `status` value.
    pub const STATUS: Field = Field::new("status", 6, 2);
    /// The request's id.
    pub const ID: Field = Field::new("id", 8, 8);
    /// An errno (i32), zero when OK.
    pub const CODE: Field = Field::new("code", 16, 4);
    /// Bytes of message (UTF-8), first in the body.
    pub const MESSAGE_LEN: Field = Field::new("message_len", 20, 4);
    /// Bytes of data after the message.
    pub const DATA_LEN: Field = Field::new("data_len", 24, 4);
    /// CRC-32C of the body (message then data).
    pub const BODY_CRC: Field = Field::new("body_crc", 28, 4);
    /// Zero.
    pub const RESERVED: Field = Field::new("reserved", 32, 12);
    /// CRC-32C of bytes 0..44.
    pub const HEADER_CRC: Field = Field::new("header_crc", 44, 4);
    /// In order.
    pub const FIELDS: [Field; 10] = [
        MAGIC,
        OP,
        STATUS,
        ID,
        CODE,
        MESSAGE_LEN,
        DATA_LEN,
        BODY_CRC,
        RESERVED,
        HEADER_CRC,
    ];
}

/// The body of a HELLO request.
pub mod hello {
    use super::Field;
    /// `PROTOCOL_VERSION`.
    pub const VERSION: Field = Field::new("version", 0, 2);
    /// Tenant class: a Linux I/O priority class, 0 to `TENANT_CLASS_MAX`.
    pub const TENANT_CLASS: Field = Field::new("tenant_class", 2, 1);
    /// Tenant level: a Linux I/O priority level, 0 to `TENANT_LEVEL_MAX`.
    pub const TENANT_LEVEL: Field = Field::new("tenant_level", 3, 1);
    /// Bytes of job name after the fixed part.
    pub const JOB_LEN: Field = Field::new("job_len", 4, 1);
    /// Zero.
    pub const RESERVED: Field = Field::new("reserved", 5, 3);
    /// In order (the job name follows).
    pub const FIELDS: [Field; 5] = [VERSION, TENANT_CLASS, TENANT_LEVEL, JOB_LEN, RESERVED];
}

/// The data of a successful HELLO or STAT reply.
pub mod info {
    use super::Field;
    /// `PROTOCOL_VERSION`.
    pub const VERSION: Field = Field::new("version", 0, 2);
    /// `INFO_CREATED`.
    pub const FLAGS: Field = Field::new("flags", 2, 2);
    /// The namespace's block size.
    pub const BLOCK_SIZE: Field = Field::new("block_size", 4, 4);
    /// The namespace's size.
    pub const CAPACITY: Field = Field::new("capacity", 8, 8);
    /// In order.
    pub const FIELDS: [Field; 4] = [VERSION, FLAGS, BLOCK_SIZE, CAPACITY];
}

/// The tenant a connection works for, in Linux's I/O priority terms (what `ionice` sets): a
/// class (0 none, 1 realtime, 2 best effort, 3 idle) and a level within it (0 to 7). A target
/// serving with quality of service maps the class to its own (`haq::class::Class::from_ioprio`:
/// 1 high, 2 medium, 3 low, 0 medium); the level is carried and checked, not used.
///
/// [`RemoteDevice::connect`](crate::RemoteDevice::connect) treats class 0 (the default) as
/// "not set" and sends the calling thread's own I/O priority instead (see
/// [`Tenant::resolve`]), so a program run under `ionice -c1` is served as high without
/// knowing about tenants.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tenant {
    /// I/O priority class, 0 to [`TENANT_CLASS_MAX`].
    pub class: u8,
    /// Level within the class, 0 to [`TENANT_LEVEL_MAX`].
    pub level: u8,
}

impl Tenant {
    /// The tenant a HELLO carries for this one: itself if its class is set (not 0), else the
    /// calling thread's I/O priority ([`Tenant::from_process`]); if that cannot be read, class
    /// 0 (served like best effort).
    pub fn resolve(self) -> Tenant {
        if self.class != 0 {
            return self;
        }
        Tenant::from_process().unwrap_or(self)
    }

    /// The calling thread's I/O priority (`ioprio_get(IOPRIO_WHO_PROCESS, 0)`: what `ionice`
    /// set for the process, inherited by its threads).
    pub fn from_process() -> std::io::Result<Tenant> {
        let p = haq::ioprio::ioprio_get_self()?;
        let t = Tenant {
            class: p.class,
            level: p.level,
        };
        // A kernel class this protocol has no room for (none exists today) is sent as 0.
        Ok(if t.validate().is_ok() {
            t
        } else {
            Tenant::default()
        })
    }

    /// Check the class and level ranges; the error names the field, the range and the value.
    pub fn validate(&self) -> Result<(), BadFrame> {
        if self.class > TENANT_CLASS_MAX {
            return Err(BadFrame {
                what: "HELLO tenant_class",
                expected: format!(
                    "0 to {TENANT_CLASS_MAX} (I/O priority class: 0 none, 1 realtime, 2 best \
                     effort, 3 idle)"
                ),
                found: self.class.to_string(),
            });
        }
        if self.level > TENANT_LEVEL_MAX {
            return Err(BadFrame {
                what: "HELLO tenant_level",
                expected: format!("0 to {TENANT_LEVEL_MAX} (I/O priority level)"),
                found: self.level.to_string(),
            });
        }
        Ok(())
    }
}

/// What a client says when it connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The namespace (`[A-Za-z0-9._-]{1,64}`).
    pub job: String,
    /// With `create`: its size if it must be created; otherwise (and when it exists) the
    /// least size wanted, 0 for any.
    pub len: u64,
    /// Create the namespace if it does not exist.
    pub create: bool,
    /// Who the connection works for.
    pub tenant: Tenant,
}

fn put(buf: &mut [u8], f: Field, v: u64) {
    let bytes = v.to_le_bytes();
    buf[f.offset..f.offset + f.size].copy_from_slice(&bytes[..f.size]);
}

fn get(buf: &[u8], f: Field) -> u64 {
    let mut bytes = [0u8; 8];
    bytes[..f.size].copy_from_slice(&buf[f.offset..f.offset + f.size]);
    u64::from_le_bytes(bytes)
}

fn header_crc(buf: &[u8; HEADER_BYTES]) -> u32 {
    crc32c::crc32c(&buf[..request::HEADER_CRC.offset])
}

/// A decoded request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RequestHeader {
    /// Operation.
    pub op: u16,
    /// Flags.
    pub flags: u16,
    /// Request id.
    pub id: u64,
    /// Offset.
    pub offset: u64,
    /// Length.
    pub length: u64,
    /// Body bytes.
    pub body_len: u32,
    /// CRC-32C of the body.
    pub body_crc: u32,
}

/// Why a header was not accepted: what, expected, found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadFrame {
    /// The field.
    pub what: &'static str,
    /// What the protocol says.
    pub expected: String,
    /// What came.
    pub found: String,
}

impl RequestHeader {
    /// The 48 bytes.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[..4].copy_from_slice(&REQUEST_MAGIC);
        put(&mut b, request::OP, self.op.into());
        put(&mut b, request::FLAGS, self.flags.into());
        put(&mut b, request::ID, self.id);
        put(&mut b, request::OFFSET, self.offset);
        put(&mut b, request::LENGTH, self.length);
        put(&mut b, request::BODY_LEN, self.body_len.into());
        put(&mut b, request::BODY_CRC, self.body_crc.into());
        let crc = header_crc(&b);
        put(&mut b, request::HEADER_CRC, crc.into());
        b
    }

    /// Decode and check magic, header CRC, reserved bytes and the body length limit. The op
    /// is not checked here (the server answers an unknown op with the op echoed).
    pub fn decode(b: &[u8; HEADER_BYTES]) -> Result<RequestHeader, BadFrame> {
        check_common(b, REQUEST_MAGIC, request::RESERVED, request::HEADER_CRC)?;
        let h = RequestHeader {
            op: get(b, request::OP) as u16,
            flags: get(b, request::FLAGS) as u16,
            id: get(b, request::ID),
            offset: get(b, request::OFFSET),
            length: get(b, request::LENGTH),
            body_len: get(b, request::BODY_LEN) as u32,
            body_crc: get(b, request::BODY_CRC) as u32,
        };
        if h.body_len > MAX_PAYLOAD {
            return Err(BadFrame {
                what: "request body_len",
                expected: format!("at most {MAX_PAYLOAD}"),
                found: h.body_len.to_string(),
            });
        }
        Ok(h)
    }
}

fn check_common(
    b: &[u8; HEADER_BYTES],
    magic: [u8; 4],
    reserved: Field,
    crc: Field,
) -> Result<(), BadFrame> {
    if b[..4] != magic {
        return Err(BadFrame {
            what: "magic",
            expected: format!("{:?}", String::from_utf8_lossy(&magic)),
            found: format!("{:02x?}", &b[..4]),
        });
    }
    let stored = get(b, crc) as u32;
    let computed = header_crc(b);
    if stored != computed {
        return Err(BadFrame {
            what: "header_crc",
            expected: format!("{computed:#010x}"),
            found: format!("{stored:#010x}"),
        });
    }
    if b[reserved.offset..reserved.offset + reserved.size]
        .iter()
        .any(|&x| x != 0)
    {
        return Err(BadFrame {
            what: "reserved",
            expected: "zero".into(),
            found: format!(
                "{:02x?}",
                &b[reserved.offset..reserved.offset + reserved.size]
            ),
        });
    }
    Ok(())
}

/// A decoded reply header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplyHeader {
    /// The request's op.
    pub op: u16,
    /// Status.
    pub status: u16,
    /// The request's id.
    pub id: u64,
    /// errno.
    pub code: i32,
    /// Message bytes.
    pub message_len: u32,
    /// Data bytes.
    pub data_len: u32,
    /// CRC-32C of message then data.
    pub body_crc: u32,
}

impl ReplyHeader {
    /// The 48 bytes.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[..4].copy_from_slice(&REPLY_MAGIC);
        put(&mut b, reply::OP, self.op.into());
        put(&mut b, reply::STATUS, self.status.into());
        put(&mut b, reply::ID, self.id);
        put(&mut b, reply::CODE, u64::from(self.code as u32));
        put(&mut b, reply::MESSAGE_LEN, self.message_len.into());
        put(&mut b, reply::DATA_LEN, self.data_len.into());
        put(&mut b, reply::BODY_CRC, self.body_crc.into());
        let crc = header_crc(&b);
        put(&mut b, reply::HEADER_CRC, crc.into());
        b
    }

    /// Decode and check magic, header CRC, reserved bytes and the length limits.
    pub fn decode(b: &[u8; HEADER_BYTES]) -> Result<ReplyHeader, BadFrame> {
        check_common(b, REPLY_MAGIC, reply::RESERVED, reply::HEADER_CRC)?;
        let h = ReplyHeader {
            op: get(b, reply::OP) as u16,
            status: get(b, reply::STATUS) as u16,
            id: get(b, reply::ID),
            code: get(b, reply::CODE) as u32 as i32,
            message_len: get(b, reply::MESSAGE_LEN) as u32,
            data_len: get(b, reply::DATA_LEN) as u32,
            body_crc: get(b, reply::BODY_CRC) as u32,
        };
        if h.message_len > MAX_MESSAGE {
            return Err(BadFrame {
                what: "reply message_len",
                expected: format!("at most {MAX_MESSAGE}"),
                found: h.message_len.to_string(),
            });
        }
        if h.data_len > MAX_PAYLOAD {
            return Err(BadFrame {
                what: "reply data_len",
                expected: format!("at most {MAX_PAYLOAD}"),
                found: h.data_len.to_string(),
            });
        }
        Ok(h)
    }
}

/// The HELLO body for `h` (the size and create flag go in the header).
pub fn encode_hello(h: &Hello) -> Vec<u8> {
    let mut b = vec![0u8; HELLO_FIXED_BYTES];
    put(&mut b, hello::VERSION, PROTOCOL_VERSION.into());
    put(&mut b, hello::TENANT_CLASS, h.tenant.class.into());
    put(&mut b, hello::TENANT_LEVEL, h.tenant.level.into());
    put(&mut b, hello::JOB_LEN, (h.job.len().min(255)) as u64);
    b.extend_from_slice(h.job.as_bytes());
    b
}

/// Decode a HELLO from its header and body; the job name is not validated here.
pub fn decode_hello(hdr: &RequestHeader, body: &[u8]) -> Result<Hello, BadFrame> {
    if body.len() < HELLO_FIXED_BYTES {
        return Err(BadFrame {
            what: "HELLO body",
            expected: format!("at least {HELLO_FIXED_BYTES} bytes"),
            found: format!("{} bytes", body.len()),
        });
    }
    let version = get(body, hello::VERSION) as u16;
    if version != PROTOCOL_VERSION {
        return Err(BadFrame {
            what: "HELLO version",
            expected: PROTOCOL_VERSION.to_string(),
            found: version.to_string(),
        });
    }
    let r = hello::RESERVED;
    if body[r.offset..r.offset + r.size].iter().any(|&x| x != 0) {
        return Err(BadFrame {
            what: "HELLO reserved",
            expected: "zero".into(),
            found: format!("{:02x?}", &body[r.offset..r.offset + r.size]),
        });
    }
    let job_len = get(body, hello::JOB_LEN) as usize;
    if body.len() != HELLO_FIXED_BYTES + job_len {
        return Err(BadFrame {
            what: "HELLO body",
            expected: format!(
                "{} bytes ({HELLO_FIXED_BYTES} + job_len)",
                HELLO_FIXED_BYTES + job_len
            ),
            found: format!("{} bytes", body.len()),
        });
    }
    if hdr.flags & !FLAG_CREATE != 0 {
        return Err(BadFrame {
            what: "HELLO flags",
            expected: format!("only bit {FLAG_CREATE:#x}"),
            found: format!("{:#x}", hdr.flags),
        });
    }
    if hdr.offset != 0 {
        return Err(BadFrame {
            what: "HELLO offset",
            expected: "0".into(),
            found: hdr.offset.to_string(),
        });
    }
    let job = String::from_utf8_lossy(&body[HELLO_FIXED_BYTES..]).into_owned();
    Ok(Hello {
        job,
        len: hdr.length,
        create: hdr.flags & FLAG_CREATE != 0,
        tenant: crate::Tenant {
            class: get(body, hello::TENANT_CLASS) as u8,
            level: get(body, hello::TENANT_LEVEL) as u8,
        },
    })
}

/// A namespace's description, the data of a HELLO or STAT reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Info {
    /// `INFO_CREATED` or 0.
    pub flags: u16,
    /// Block size.
    pub block_size: u32,
    /// Size in bytes.
    pub capacity: u64,
}

impl Info {
    /// The 16 bytes.
    pub fn encode(&self) -> [u8; INFO_BYTES] {
        let mut b = [0u8; INFO_BYTES];
        put(&mut b, info::VERSION, PROTOCOL_VERSION.into());
        put(&mut b, info::FLAGS, self.flags.into());
        put(&mut b, info::BLOCK_SIZE, self.block_size.into());
        put(&mut b, info::CAPACITY, self.capacity);
        b
    }

    /// Decode and check the version and the block size (a power of two, 1 to 1 MiB).
    pub fn decode(b: &[u8]) -> Result<Info, BadFrame> {
        if b.len() != INFO_BYTES {
            return Err(BadFrame {
                what: "info",
                expected: format!("{INFO_BYTES} bytes"),
                found: format!("{} bytes", b.len()),
            });
        }
        let version = get(b, info::VERSION) as u16;
        if version != PROTOCOL_VERSION {
            return Err(BadFrame {
                what: "info version",
                expected: PROTOCOL_VERSION.to_string(),
                found: version.to_string(),
            });
        }
        let block_size = get(b, info::BLOCK_SIZE) as u32;
        if !block_size.is_power_of_two() || block_size > 1 << 20 {
            return Err(BadFrame {
                what: "info block_size",
                expected: "a power of two up to 1048576".into(),
                found: block_size.to_string(),
            });
        }
        Ok(Info {
            flags: get(b, info::FLAGS) as u16,
            block_size,
            capacity: get(b, info::CAPACITY),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_reject_damage() {
        let h = RequestHeader {
            op: op::WRITE,
            flags: 0,
            id: 7,
            offset: 4096,
            length: 100,
            body_len: 100,
            body_crc: 0xdead_beef,
        };
        let b = h.encode();
        assert_eq!(RequestHeader::decode(&b), Ok(h));
        for i in 0..HEADER_BYTES {
            let mut bad = b;
            bad[i] ^= 0x10;
            assert!(
                RequestHeader::decode(&bad).is_err(),
                "flip in byte {i} accepted"
            );
        }
        let r = ReplyHeader {
            op: op::READ,
            status: status::BUSY,
            id: 9,
            code: libc::EBUSY,
            message_len: 3,
            data_len: 0,
            body_crc: 1,
        };
        assert_eq!(ReplyHeader::decode(&r.encode()), Ok(r));
        // A request is not a reply.
        assert_eq!(ReplyHeader::decode(&b).unwrap_err().what, "magic");
        let big = RequestHeader {
            body_len: MAX_PAYLOAD + 1,
            ..h
        };
        assert_eq!(
            RequestHeader::decode(&big.encode()).unwrap_err().what,
            "request body_len"
        );
    }

    #[test]
    fn hello_round_trips() {
        let h = Hello {
            job: "job-1.a_b".into(),
            len: 1 << 30,
            create: true,
            tenant: Tenant { class: 2, level: 5 },
        };
        let body = encode_hello(&h);
        let hdr = RequestHeader {
            op: op::HELLO,
            flags: FLAG_CREATE,
            length: h.len,
            body_len: body.len() as u32,
            ..RequestHeader::default()
        };
        assert_eq!(decode_hello(&hdr, &body), Ok(h));
        assert_eq!(
            decode_hello(&hdr, &body[..body.len() - 1])
                .unwrap_err()
                .what,
            "HELLO body"
        );
        let mut v2 = body.clone();
        v2[0] = 2;
        assert_eq!(decode_hello(&hdr, &v2).unwrap_err().what, "HELLO version");
        let flags = RequestHeader { flags: 2, ..hdr };
        assert_eq!(decode_hello(&flags, &body).unwrap_err().what, "HELLO flags");
    }

    #[test]
    fn info_round_trips() {
        let i = Info {
            flags: INFO_CREATED,
            block_size: 4096,
            capacity: 123 << 20,
        };
        assert_eq!(Info::decode(&i.encode()), Ok(i));
        let mut bad = i.encode();
        bad[4] = 3;
        assert_eq!(Info::decode(&bad).unwrap_err().what, "info block_size");
    }
}
