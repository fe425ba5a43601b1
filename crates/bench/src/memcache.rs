//! A small asynchronous memcached text-protocol client: `get` (one key or many), `set`, `add`,
//! `delete`, `version`, `stats settings`. Every wait is bounded by a timeout; a reply line longer
//! than the protocol allows, or a value larger than [`MAX_VALUE_BYTES`], breaks the connection
//! instead of growing memory. It knows nothing of workloads: `target` builds the php-memcached
//! idioms (add-polling locks) on top of it.

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::{BenchError, Result};
use crate::wire::{Counted, WireCounter};

type Stream = Counted<TcpStream>;

/// memcached's default item size limit; larger values are a protocol surprise here.
pub const MAX_VALUE_BYTES: usize = 1 << 20;
/// Longest reply line accepted (a `VALUE` header or a status line).
const MAX_LINE: usize = 2048;

/// One memcached text-protocol connection.
pub struct MemcacheConn {
    stream: Stream,
    read_buf: BytesMut,
    timeout: Duration,
}

impl MemcacheConn {
    /// Connects to `addr`; `timeout` bounds the connect and every reply wait; `wire` counts
    /// the bytes and round trips.
    pub async fn connect(
        addr: &str,
        timeout: Duration,
        wire: std::sync::Arc<WireCounter>,
    ) -> Result<MemcacheConn> {
        Ok(MemcacheConn {
            stream: Counted::new(crate::resp::connect(addr, timeout).await?, wire),
            read_buf: BytesMut::with_capacity(16 * 1024),
            timeout,
        })
    }

    /// Reads one `\r\n`-terminated line (without the terminator).
    async fn read_line(stream: &mut Stream, buf: &mut BytesMut) -> Result<Bytes> {
        loop {
            if let Some(pos) = buf.windows(2).position(|w| w == b"\r\n") {
                let line = buf.split_to(pos).freeze();
                buf.advance(2);
                return Ok(line);
            }
            if buf.len() > MAX_LINE {
                return Err(BenchError::Protocol("memcached reply line too long".into()));
            }
            Self::fill(stream, buf).await?;
        }
    }

    async fn fill(stream: &mut Stream, buf: &mut BytesMut) -> Result<()> {
        buf.reserve(16 * 1024);
        if stream.read_buf(buf).await? == 0 {
            return Err(BenchError::Closed);
        }
        Ok(())
    }

    /// `get k1 k2 …`: the values found, in reply order, as (key, value) pairs.
    pub async fn get_multi(&mut self, keys: &[&[u8]]) -> Result<Vec<(Bytes, Bytes)>> {
        let mut req = Vec::with_capacity(8 + keys.iter().map(|k| k.len() + 1).sum::<usize>());
        req.extend_from_slice(b"get");
        for k in keys {
            req.push(b' ');
            req.extend_from_slice(k);
        }
        req.extend_from_slice(b"\r\n");
        let MemcacheConn {
            stream, read_buf, ..
        } = self;
        let fut = async move {
            stream.write_all(&req).await?;
            let mut found = Vec::with_capacity(keys.len());
            loop {
                let line = Self::read_line(stream, read_buf).await?;
                if line.as_ref() == b"END" {
                    return Ok(found);
                }
                let mut parts = line.split(|&c| c == b' ');
                let (Some(b"VALUE"), Some(key), Some(_flags), Some(len)) =
                    (parts.next(), parts.next(), parts.next(), parts.next())
                else {
                    return Err(error_or_unexpected(&line, "get"));
                };
                let len: usize = std::str::from_utf8(len)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .filter(|&n| n <= MAX_VALUE_BYTES)
                    .ok_or_else(|| BenchError::Protocol("bad VALUE length".into()))?;
                let key = Bytes::copy_from_slice(key);
                while read_buf.len() < len + 2 {
                    Self::fill(stream, read_buf).await?;
                }
                let value = read_buf.split_to(len).freeze();
                if &read_buf[..2] != b"\r\n" {
                    return Err(BenchError::Protocol("value not followed by CRLF".into()));
                }
                read_buf.advance(2);
                found.push((key, value));
            }
        };
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(BenchError::Timeout(self.timeout, "a memcached get reply")),
        }
    }

    /// `get key`: the value or `None`.
    pub async fn get(&mut self, key: &[u8]) -> Result<Option<Bytes>> {
        Ok(self.get_multi(&[key]).await?.pop().map(|(_, v)| v))
    }

    /// A storage command (`set`, `add`); true for `STORED`, false for `NOT_STORED`.
    async fn store(&mut self, verb: &str, key: &[u8], value: &[u8], exptime: u32) -> Result<bool> {
        let mut req = Vec::with_capacity(value.len() + key.len() + 48);
        req.extend_from_slice(verb.as_bytes());
        req.push(b' ');
        req.extend_from_slice(key);
        req.extend_from_slice(format!(" 0 {exptime} {}\r\n", value.len()).as_bytes());
        req.extend_from_slice(value);
        req.extend_from_slice(b"\r\n");
        let line = self.command_line(req, "a memcached storage reply").await?;
        match line.as_ref() {
            b"STORED" => Ok(true),
            b"NOT_STORED" | b"EXISTS" => Ok(false),
            _ => Err(error_or_unexpected(&line, "set/add")),
        }
    }

    /// `set key 0 exptime len`.
    pub async fn set(&mut self, key: &[u8], value: &[u8], exptime: u32) -> Result<()> {
        if self.store("set", key, value, exptime).await? {
            Ok(())
        } else {
            Err(BenchError::Server("set was not stored".into()))
        }
    }

    /// `add key 0 exptime len`: true when the key did not exist and now holds `value`.
    pub async fn add(&mut self, key: &[u8], value: &[u8], exptime: u32) -> Result<bool> {
        self.store("add", key, value, exptime).await
    }

    /// `delete key`: true when something was deleted.
    pub async fn delete(&mut self, key: &[u8]) -> Result<bool> {
        let mut req = b"delete ".to_vec();
        req.extend_from_slice(key);
        req.extend_from_slice(b"\r\n");
        let line = self.command_line(req, "a memcached delete reply").await?;
        match line.as_ref() {
            b"DELETED" => Ok(true),
            b"NOT_FOUND" => Ok(false),
            _ => Err(error_or_unexpected(&line, "delete")),
        }
    }

    /// `version`: the server's version text.
    pub async fn version(&mut self) -> Result<String> {
        let line = self
            .command_line(b"version\r\n".to_vec(), "a memcached version reply")
            .await?;
        match line.strip_prefix(b"VERSION ") {
            Some(v) => Ok(String::from_utf8_lossy(v).into_owned()),
            None => Err(error_or_unexpected(&line, "version")),
        }
    }

    /// `stats settings`: every `STAT name value` line as a pair.
    pub async fn stats_settings(&mut self) -> Result<Vec<(String, String)>> {
        let MemcacheConn {
            stream, read_buf, ..
        } = self;
        let fut = async move {
            stream.write_all(b"stats settings\r\n").await?;
            let mut out = Vec::new();
            loop {
                let line = Self::read_line(stream, read_buf).await?;
                if line.as_ref() == b"END" {
                    return Ok(out);
                }
                let text = String::from_utf8_lossy(&line).into_owned();
                let mut parts = text.splitn(3, ' ');
                match (parts.next(), parts.next(), parts.next()) {
                    (Some("STAT"), Some(name), value) => {
                        out.push((name.to_string(), value.unwrap_or("").to_string()))
                    }
                    _ => return Err(error_or_unexpected(&line, "stats settings")),
                }
                if out.len() > 10_000 {
                    return Err(BenchError::Protocol("endless stats reply".into()));
                }
            }
        };
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(BenchError::Timeout(self.timeout, "a memcached stats reply")),
        }
    }

    /// Sends `req` and reads one reply line.
    async fn command_line(&mut self, req: Vec<u8>, what: &'static str) -> Result<Bytes> {
        let MemcacheConn {
            stream,
            read_buf,
            timeout,
        } = self;
        let timeout = *timeout;
        let fut = async move {
            stream.write_all(&req).await?;
            Self::read_line(stream, read_buf).await
        };
        match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(BenchError::Timeout(timeout, what)),
        }
    }
}

/// `ERROR`/`CLIENT_ERROR …`/`SERVER_ERROR …` become server errors; anything else is unexpected.
fn error_or_unexpected(line: &[u8], command: &'static str) -> BenchError {
    let text = String::from_utf8_lossy(line).into_owned();
    if text == "ERROR" || text.starts_with("CLIENT_ERROR") || text.starts_with("SERVER_ERROR") {
        BenchError::Server(text)
    } else {
        BenchError::Unexpected {
            command,
            reply: text.chars().take(120).collect(),
        }
    }
}
