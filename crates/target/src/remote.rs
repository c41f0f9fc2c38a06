//! [`RemoteDevice`]: a namespace of a block target, over one TCP connection.

use crate::device::Device;
use crate::error::{DeviceError, Result, check_range};
use crate::proto::{
    self, FLAG_CREATE, HEADER_BYTES, Hello, INFO_CREATED, Info, MAX_PAYLOAD, MAX_STATS,
    ReplyHeader, RequestHeader, op, status,
};
use std::io::{IoSlice, Read, Write};
use std::net::TcpStream;
use std::sync::Mutex;

/// A namespace on a block target (`kavach target serve`), reached over one TCP connection:
/// one connection is one queue, so requests complete in the order they are made. A write
/// returns when the target has made it durable. Claims last as long as the connection.
///
/// If the connection breaks, every later request fails (it does not reconnect: its claims
/// would be gone).
#[derive(Debug)]
pub struct RemoteDevice {
    conn: Mutex<Conn>,
    label: String,
    capacity: u64,
    block_size: u32,
    created: bool,
}

#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    next_id: u64,
    broken: Option<String>,
}

fn write_all_vectored(s: &mut TcpStream, mut bufs: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    while !bufs.is_empty() {
        match s.write_vectored(bufs) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Where a reply's data goes.
enum Sink<'a> {
    None,
    Buf(&'a mut [u8]),
    Vec(&'a mut Vec<u8>),
}

impl RemoteDevice {
    /// Connect to the target at `addr` (`HOST:PORT`) and open the namespace `hello.job`
    /// (created with `hello.len` bytes if `hello.create` and absent; an existing one opens at its
    /// own size). `Refused` if it does not exist and `create` is false, or if `create` is false
    /// and it is smaller than `hello.len`.
    ///
    /// The tenant: a `hello.tenant` of class 0 (`Tenant::default()`) means "not set", and
    /// the HELLO carries the calling thread's I/O priority instead ([`Tenant::resolve`](crate::Tenant::resolve)); any
    /// other class is sent as given. The target refuses (INVALID) a class above 3 or a level
    /// above 7.
    pub fn connect(addr: &str, hello: &Hello) -> Result<RemoteDevice> {
        crate::validate_job(&hello.job)?;
        let mut dev = RemoteDevice::open_stream(addr, format!("tcp://{addr}/{}", hello.job))?;
        let hello = Hello {
            tenant: hello.tenant.resolve(),
            ..hello.clone()
        };
        let body = proto::encode_hello(&hello);
        let mut data = Vec::new();
        dev.call(
            op::HELLO,
            if hello.create { FLAG_CREATE } else { 0 },
            0,
            hello.len,
            &body,
            Sink::Vec(&mut data),
        )?;
        let info = Info::decode(&data).map_err(|b| dev.bad(b))?;
        dev.capacity = info.capacity;
        dev.block_size = info.block_size;
        dev.created = info.flags & INFO_CREATED != 0;
        Ok(dev)
    }

    fn open_stream(addr: &str, label: String) -> Result<RemoteDevice> {
        let stream = TcpStream::connect(addr)
            .map_err(|e| DeviceError::io(format!("cannot connect to {label}"), e))?;
        stream
            .set_nodelay(true)
            .map_err(|e| DeviceError::io(format!("cannot set TCP_NODELAY on {label}"), e))?;
        Ok(RemoteDevice {
            conn: Mutex::new(Conn {
                stream,
                next_id: 1,
                broken: None,
            }),
            label,
            capacity: 0,
            block_size: 512,
            created: false,
        })
    }

    /// The target's quality-of-service statistics (the STATS request): a JSON object whose
    /// `qos` is `"off"` (and nothing else) or `"on"` (with the fields of
    /// `haq::stats::ControllerStats`: `policy`, `weights`, `tenants`, `uptime_s`). See
    /// `docs/format/target-protocol.md`.
    pub fn stats(&self) -> Result<serde_json::Value> {
        let mut data = Vec::new();
        self.call(op::STATS, 0, 0, 0, &[], Sink::Vec(&mut data))?;
        let bad = |expected: &str, found: String| DeviceError::Protocol {
            what: format!("STATS reply from {}", self.label),
            expected: expected.into(),
            found,
        };
        if data.len() > MAX_STATS as usize {
            return Err(bad(
                &format!("at most {MAX_STATS} bytes"),
                format!("{} bytes", data.len()),
            ));
        }
        let v: serde_json::Value =
            serde_json::from_slice(&data).map_err(|e| bad("a JSON document", format!("{e}")))?;
        match v.get("qos").and_then(|q| q.as_str()) {
            Some("off") | Some("on") => Ok(v),
            _ => Err(bad(
                "a JSON object with \"qos\": \"on\" or \"off\"",
                format!("{:.200}", v.to_string()),
            )),
        }
    }

    /// Fail a request whose reply takes longer than `timeout` (`None`, the default: wait as
    /// long as TCP keeps the connection). A request that times out breaks the connection, as
    /// its reply may still come.
    pub fn set_timeout(&self, timeout: Option<std::time::Duration>) -> Result<()> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        conn.stream
            .set_read_timeout(timeout)
            .and_then(|()| conn.stream.set_write_timeout(timeout))
            .map_err(|e| DeviceError::io(format!("cannot set a timeout on {}", self.label), e))
    }

    /// Whether the HELLO created the namespace.
    pub fn created(&self) -> bool {
        self.created
    }

    /// Ask the target for the namespace's size and block size.
    pub fn stat(&self) -> Result<(u64, u32)> {
        let mut data = Vec::new();
        self.call(op::STAT, 0, 0, 0, &[], Sink::Vec(&mut data))?;
        let info = Info::decode(&data).map_err(|b| self.bad(b))?;
        Ok((info.capacity, info.block_size))
    }

    fn bad(&self, b: proto::BadFrame) -> DeviceError {
        DeviceError::Protocol {
            what: format!("{} from {}", b.what, self.label),
            expected: b.expected,
            found: b.found,
        }
    }

    /// One request and its reply. On a transport or framing error the connection is marked
    /// broken.
    fn call(
        &self,
        opcode: u16,
        flags: u16,
        offset: u64,
        length: u64,
        body: &[u8],
        sink: Sink<'_>,
    ) -> Result<()> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(why) = &conn.broken {
            return Err(DeviceError::io(
                format!("{}: the connection was lost earlier ({why})", self.label),
                std::io::ErrorKind::NotConnected.into(),
            ));
        }
        let id = conn.next_id;
        conn.next_id += 1;
        let r = self.exchange(&mut conn, opcode, flags, id, offset, length, body, sink);
        if let Err((e, fatal)) = r {
            if fatal {
                conn.broken = Some(e.to_string());
                let _ = conn.stream.shutdown(std::net::Shutdown::Both);
            }
            return Err(e);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn exchange(
        &self,
        conn: &mut Conn,
        opcode: u16,
        flags: u16,
        id: u64,
        offset: u64,
        length: u64,
        body: &[u8],
        sink: Sink<'_>,
    ) -> std::result::Result<(), (DeviceError, bool)> {
        let hdr = RequestHeader {
            op: opcode,
            flags,
            id,
            offset,
            length,
            body_len: body.len() as u32,
            body_crc: crc32c::crc32c(body),
        }
        .encode();
        let io = |what: &str, e: std::io::Error| {
            (DeviceError::io(format!("{what} {}", self.label), e), true)
        };
        write_all_vectored(
            &mut conn.stream,
            &mut [IoSlice::new(&hdr), IoSlice::new(body)],
        )
        .map_err(|e| io("cannot send to", e))?;
        let mut rb = [0u8; HEADER_BYTES];
        conn.stream
            .read_exact(&mut rb)
            .map_err(|e| io("no reply from", e))?;
        let rh = ReplyHeader::decode(&rb).map_err(|b| (self.bad(b), true))?;
        let mismatch = |what: &str, expected: String, found: String| {
            (
                DeviceError::Protocol {
                    what: format!("reply {what} from {}", self.label),
                    expected,
                    found,
                },
                true,
            )
        };
        // A server too busy to read the HELLO answers it with id 0 (REFUSED) and closes.
        let refused_early = opcode == op::HELLO && rh.id == 0 && rh.status == status::REFUSED;
        if (rh.id != id && !refused_early) || rh.op != opcode {
            return Err(mismatch(
                "id/op",
                format!("id {id} op {opcode}"),
                format!("id {} op {}", rh.id, rh.op),
            ));
        }
        let mut message = vec![0u8; rh.message_len as usize];
        conn.stream
            .read_exact(&mut message)
            .map_err(|e| io("short reply from", e))?;
        let mut crc = crc32c::crc32c(&message);
        let n = rh.data_len as usize;
        if rh.status == status::OK {
            match sink {
                Sink::Buf(buf) => {
                    if n != buf.len() {
                        return Err(mismatch("data_len", buf.len().to_string(), n.to_string()));
                    }
                    conn.stream
                        .read_exact(buf)
                        .map_err(|e| io("short reply from", e))?;
                    crc = crc32c::crc32c_append(crc, buf);
                }
                Sink::Vec(v) => {
                    v.resize(n, 0);
                    conn.stream
                        .read_exact(v)
                        .map_err(|e| io("short reply from", e))?;
                    crc = crc32c::crc32c_append(crc, v);
                }
                Sink::None => {
                    if n != 0 {
                        return Err(mismatch("data_len", "0".into(), n.to_string()));
                    }
                }
            }
        } else {
            let mut skip = vec![0u8; n];
            conn.stream
                .read_exact(&mut skip)
                .map_err(|e| io("short reply from", e))?;
            crc = crc32c::crc32c_append(crc, &skip);
        }
        if crc != rh.body_crc {
            return Err(mismatch(
                "body_crc",
                format!("{crc:#010x}"),
                format!("{:#010x}", rh.body_crc),
            ));
        }
        let msg = String::from_utf8_lossy(&message).into_owned();
        let what = format!("{}: {msg}", self.label);
        let e = match rh.status {
            status::OK => return Ok(()),
            status::IO => DeviceError::io(
                what,
                if rh.code > 0 {
                    std::io::Error::from_raw_os_error(rh.code)
                } else {
                    std::io::Error::other("the target's IO failed")
                },
            ),
            status::RANGE => DeviceError::Range {
                offset,
                len: length,
                capacity: self.capacity,
            },
            status::BUSY => DeviceError::Busy { what },
            status::PROTOCOL => DeviceError::Protocol {
                what: self.label.clone(),
                expected: "a request the target accepts".into(),
                found: msg,
            },
            status::REFUSED => DeviceError::Refused { what },
            status::INVALID => DeviceError::Invalid {
                what: self.label.clone(),
                expected: "a request the target accepts".into(),
                found: msg,
            },
            other => {
                return Err(mismatch("status", "0 to 6".into(), other.to_string()));
            }
        };
        Err((e, false))
    }
}

/// Ask the target at `addr` (`HOST:PORT`) for its statistics ([`RemoteDevice::stats`]) on a
/// connection of its own that opens no namespace (STATS is allowed before HELLO).
pub fn fetch_stats(addr: &str) -> Result<serde_json::Value> {
    let dev = RemoteDevice::open_stream(addr, format!("tcp://{addr}"))?;
    dev.stats()
}

impl Device for RemoteDevice {
    fn capacity(&self) -> u64 {
        self.capacity
    }
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        check_range(offset, buf.len() as u64, self.capacity)?;
        let mut at = offset;
        for chunk in buf.chunks_mut(MAX_PAYLOAD as usize) {
            let n = chunk.len() as u64;
            self.call(op::READ, 0, at, n, &[], Sink::Buf(chunk))?;
            at += n;
        }
        Ok(())
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        check_range(offset, data.len() as u64, self.capacity)?;
        let mut at = offset;
        for chunk in data.chunks(MAX_PAYLOAD as usize) {
            let n = chunk.len() as u64;
            self.call(op::WRITE, 0, at, n, chunk, Sink::None)?;
            at += n;
        }
        Ok(())
    }
    fn label(&self) -> String {
        self.label.clone()
    }
    fn claim(&self, offset: u64, len: u64) -> Result<()> {
        check_range(offset, len, self.capacity)?;
        self.call(op::CLAIM, 0, offset, len, &[], Sink::None)
    }
    fn flush(&self) -> Result<()> {
        self.call(op::FLUSH, 0, 0, 0, &[], Sink::None)
    }
}
