//! A small etcd v3 client over etcd's JSON gateway (`POST /v3/...` on the client URL): the
//! lease and key calls leader election needs, and nothing else.
//!
//! Why not a gRPC client crate: the ones on crates.io build their protocol code with `protoc`
//! and pull in an async runtime, which would add minutes to every build of this workspace for
//! five calls. The gateway speaks the same API (etcd 3.4 and later serve it on the client port);
//! keys and values are base64, 64-bit numbers are JSON strings.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};

use crate::coord::{CoordError, CoordOp, Coordinator, KeyValue};

/// The largest response body read (an election's answers are a few hundred bytes).
const BODY_MAX: usize = 1 << 20;

/// One etcd endpoint (`http://host:port`).
#[derive(Debug, Clone)]
pub struct Etcd {
    host: String,
    timeout: Duration,
}

impl Etcd {
    /// Parse `http://host:port` (the scheme may be left out; https is not supported).
    pub fn new(url: &str, timeout: Duration) -> Result<Etcd, CoordError> {
        let rest = match url.split_once("://") {
            Some(("http", r)) => r,
            Some((scheme, _)) => {
                return Err(CoordError::Config(format!(
                    "etcd URL `{url}`: scheme `{scheme}` is not supported (use http://)"
                )));
            }
            None => url,
        };
        let host = rest.trim_end_matches('/');
        if host.is_empty() || host.contains('/') {
            return Err(CoordError::Config(format!(
                "etcd URL `{url}` is not http://HOST:PORT"
            )));
        }
        let host = if host
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            host.to_string()
        } else {
            format!("{host}:2379")
        };
        Ok(Etcd { host, timeout })
    }

    /// The endpoint, as `host:port`.
    pub fn endpoint(&self) -> &str {
        &self.host
    }

    /// POST `body` to `path` and return the first JSON object of the answer (a streaming call
    /// such as keepalive answers with a stream; the first message is all we want).
    fn call(&self, op: CoordOp, path: &str, body: &Value) -> Result<Value, CoordError> {
        let unreachable = |e: anyhow::Error| CoordError::Unreachable {
            op,
            detail: format!("{e:#}"),
        };
        let mut r = self.send(path, body).map_err(unreachable)?;
        let (status, text) = read_response(&mut r)
            .with_context(|| format!("etcd {}: bad answer to {path}", self.host))
            .map_err(unreachable)?;
        let bad = |detail: String| CoordError::BadAnswer { op, detail };
        let v: Value = serde_json::Deserializer::from_str(&text)
            .into_iter::<Value>()
            .next()
            .ok_or_else(|| {
                bad(format!(
                    "etcd {}: empty answer to {path} (HTTP {status})",
                    self.host
                ))
            })?
            .map_err(|e| {
                bad(format!(
                    "etcd {}: answer to {path} is not JSON: {e}",
                    self.host
                ))
            })?;
        if status != 200 {
            let msg = v
                .get("message")
                .or_else(|| v.get("error"))
                .and_then(Value::as_str)
                .unwrap_or("no message");
            return Err(CoordError::Refused {
                op,
                detail: format!("etcd {}: {path} failed (HTTP {status}): {msg}", self.host),
            });
        }
        // A stream wraps each message in {"result": ...} or {"error": ...}.
        if let Some(e) = v.get("error") {
            return Err(CoordError::Refused {
                op,
                detail: format!("etcd {}: {path} failed: {e}", self.host),
            });
        }
        Ok(v.get("result").cloned().unwrap_or(v))
    }

    /// Connect and send one request; the reader of its answer.
    fn send(&self, path: &str, body: &Value) -> Result<BufReader<TcpStream>> {
        let addr = self
            .host
            .to_socket_addrs()
            .with_context(|| format!("etcd {}: cannot resolve", self.host))?
            .next()
            .ok_or_else(|| anyhow!("etcd {}: no address", self.host))?;
        let mut s = TcpStream::connect_timeout(&addr, self.timeout)
            .with_context(|| format!("etcd {}: cannot connect", self.host))?;
        s.set_read_timeout(Some(self.timeout))?;
        s.set_write_timeout(Some(self.timeout))?;
        let body = body.to_string();
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.host,
            body.len()
        );
        s.write_all(req.as_bytes())
            .with_context(|| format!("etcd {}: cannot send {path}", self.host))?;
        Ok(BufReader::new(s))
    }
}

impl Coordinator for Etcd {
    /// Grant a lease of `ttl` seconds; its ID.
    fn grant(&self, ttl: u64) -> Result<i64, CoordError> {
        let v = self.call(CoordOp::Grant, "/v3/lease/grant", &json!({ "TTL": ttl }))?;
        num(&v, "ID").ok_or_else(|| CoordError::BadAnswer {
            op: CoordOp::Grant,
            detail: format!("etcd lease grant: no ID in {v}"),
        })
    }

    /// Renew lease `id`; the seconds it has left (0: it had already expired).
    fn keepalive(&self, id: i64) -> Result<i64, CoordError> {
        let v = self.call(
            CoordOp::KeepAlive,
            "/v3/lease/keepalive",
            &json!({ "ID": id.to_string() }),
        )?;
        Ok(num(&v, "TTL").unwrap_or(0))
    }

    /// Revoke lease `id` (its keys are deleted).
    fn revoke(&self, id: i64) -> Result<(), CoordError> {
        self.call(
            CoordOp::Revoke,
            "/v3/lease/revoke",
            &json!({ "ID": id.to_string() }),
        )?;
        Ok(())
    }

    /// Create `key` = `value` under lease `lease` if the key does not exist; whether it did.
    fn create(&self, key: &str, value: &[u8], lease: i64) -> Result<bool, CoordError> {
        let k = B64.encode(key);
        let v = self.call(
            CoordOp::Create,
            "/v3/kv/txn",
            &json!({
                "compare": [{ "target": "CREATE", "key": k, "createRevision": "0" }],
                "success": [{ "requestPut": {
                    "key": k, "value": B64.encode(value), "lease": lease.to_string()
                } }],
            }),
        )?;
        Ok(v.get("succeeded").and_then(Value::as_bool).unwrap_or(false))
    }

    /// Replace `key`'s value if it is still held by lease `lease`; whether it was.
    fn update(&self, key: &str, value: &[u8], lease: i64) -> Result<bool, CoordError> {
        let k = B64.encode(key);
        let v = self.call(
            CoordOp::Update,
            "/v3/kv/txn",
            &json!({
                "compare": [{ "target": "LEASE", "key": k, "lease": lease.to_string() }],
                "success": [{ "requestPut": {
                    "key": k, "value": B64.encode(value), "lease": lease.to_string()
                } }],
            }),
        )?;
        Ok(v.get("succeeded").and_then(Value::as_bool).unwrap_or(false))
    }

    /// Put `key` with no lease if `guard` is still held by lease `lease`; whether it was.
    fn record_if_held(
        &self,
        guard: &str,
        lease: i64,
        key: &str,
        value: &[u8],
    ) -> Result<bool, CoordError> {
        let v = self.call(
            CoordOp::Record,
            "/v3/kv/txn",
            &json!({
                "compare": [{ "target": "LEASE", "key": B64.encode(guard), "lease": lease.to_string() }],
                "success": [{ "requestPut": { "key": B64.encode(key), "value": B64.encode(value) } }],
            }),
        )?;
        Ok(v.get("succeeded").and_then(Value::as_bool).unwrap_or(false))
    }

    /// Read `key`.
    fn get(&self, key: &str) -> Result<Option<KeyValue>, CoordError> {
        let v = self.call(
            CoordOp::Get,
            "/v3/kv/range",
            &json!({ "key": B64.encode(key) }),
        )?;
        let Some(kv) = v
            .get("kvs")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
        else {
            return Ok(None);
        };
        let value = match kv.get("value").and_then(Value::as_str) {
            Some(b) => B64.decode(b).map_err(|e| CoordError::BadAnswer {
                op: CoordOp::Get,
                detail: format!("etcd: value of {key} is not base64: {e}"),
            })?,
            None => Vec::new(),
        };
        Ok(Some(KeyValue {
            value,
            lease: num(kv, "lease").unwrap_or(0),
            create_revision: num(kv, "create_revision").unwrap_or(0),
        }))
    }
}

/// A 64-bit number etcd sent as a JSON string (or, from some versions, as a number).
fn num(v: &Value, field: &str) -> Option<i64> {
    match v.get(field)? {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

/// Read an HTTP/1.1 response: status and body (whole, or for a chunked stream the first chunk
/// that holds a complete JSON message).
fn read_response(r: &mut impl BufRead) -> Result<(u16, String)> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("status line `{}`", line.trim_end()))?;
    let (mut length, mut chunked) = (None, false);
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            bail!("the connection closed in the headers");
        }
        let h = line.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((name, value)) = h.split_once(':') {
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = Some(value.parse::<usize>().context("Content-Length")?);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.eq_ignore_ascii_case("chunked");
            }
        }
    }
    let mut body = Vec::new();
    if chunked {
        // Chunks until one completes a JSON value (a stream never ends on its own).
        loop {
            line.clear();
            r.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim_end().split(';').next().unwrap_or(""), 16)
                .with_context(|| format!("chunk size `{}`", line.trim_end()))?;
            if size == 0 || body.len() + size > BODY_MAX {
                break;
            }
            let at = body.len();
            body.resize(at + size, 0);
            r.read_exact(&mut body[at..])?;
            let mut crlf = [0u8; 2];
            r.read_exact(&mut crlf)?;
            if serde_json::from_slice::<Value>(body.trim_ascii()).is_ok() {
                break;
            }
        }
    } else if let Some(n) = length {
        if n > BODY_MAX {
            bail!("a body of {n} bytes");
        }
        body.resize(n, 0);
        r.read_exact(&mut body)?;
    } else {
        r.take(BODY_MAX as u64).read_to_end(&mut body)?;
    }
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = Duration::from_secs(1);
        assert_eq!(
            Etcd::new("http://10.0.0.1:2379", t).unwrap().endpoint(),
            "10.0.0.1:2379"
        );
        assert_eq!(
            Etcd::new("localhost", t).unwrap().endpoint(),
            "localhost:2379"
        );
        assert_eq!(Etcd::new("h:1/", t).unwrap().endpoint(), "h:1");
        assert!(Etcd::new("https://h:1", t).is_err());
        assert!(Etcd::new("http://h:1/v3", t).is_err());
        assert!(Etcd::new("", t).is_err());
    }

    #[test]
    fn responses() {
        let fixed = "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{\"a\":\"1\"}";
        let (s, b) = read_response(&mut fixed.as_bytes()).unwrap();
        assert_eq!((s, b.as_str()), (200, "{\"a\":\"1\"}"));
        // A stream: the first complete message, split over two chunks, then more never read.
        let stream = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                      4\r\n{\"a\"\r\n5\r\n:\"2\"}\r\n7\r\n{\"b\":3}\r\n";
        let (s, b) = read_response(&mut stream.as_bytes()).unwrap();
        assert_eq!((s, b.as_str()), (200, "{\"a\":\"2\"}"));
        let err = "HTTP/1.1 400 Bad Request\r\nContent-Length: 2\r\n\r\n{}";
        assert_eq!(read_response(&mut err.as_bytes()).unwrap().0, 400);
        assert!(read_response(&mut "garbage\r\n".as_bytes()).is_err());
        assert!(read_response(&mut "HTTP/1.1 200 OK\r\n".as_bytes()).is_err());
        let huge = "HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n";
        assert!(read_response(&mut huge.as_bytes()).is_err());
        let v = json!({"ID": "7587899128422593285", "TTL": 5, "x": true});
        assert_eq!(num(&v, "ID"), Some(7587899128422593285));
        assert_eq!(num(&v, "TTL"), Some(5));
        assert_eq!(num(&v, "x"), None);
    }
}
