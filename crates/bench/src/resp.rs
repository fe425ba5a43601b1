//! A small asynchronous RESP2 client over tokio: one TCP connection, one request at a time (or a
//! pipeline of several), every wait bounded by a timeout. Requests are encoded here as multibulk
//! arrays; replies are parsed with `gradus-proto`'s pure [`parse_frame`]. It knows nothing of
//! workloads or targets: the `target` module builds Redis/Gradus idioms on top of it.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use gradus_proto::{parse_frame, Frame};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::{BenchError, Result};
use crate::wire::{Counted, WireCounter};

/// The most bytes one reply may occupy before the connection is declared broken (bounded memory
/// even against a misbehaving server).
const MAX_REPLY_BYTES: usize = 64 << 20;

/// Appends one request, a multibulk array of `args`, to `out` (what every client here sends).
pub fn encode_command(out: &mut impl BufMut, args: &[&[u8]]) {
    out.put_u8(b'*');
    out.put_slice(itoa::Buffer::new().format(args.len()).as_bytes());
    out.put_slice(b"\r\n");
    for a in args {
        out.put_u8(b'$');
        out.put_slice(itoa::Buffer::new().format(a.len()).as_bytes());
        out.put_slice(b"\r\n");
        out.put_slice(a);
        out.put_slice(b"\r\n");
    }
}

/// Opens a TCP connection to `addr` within `timeout`, with Nagle's algorithm off.
pub async fn connect(addr: &str, timeout: Duration) -> Result<TcpStream> {
    let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            return Err(BenchError::Connect {
                addr: addr.to_string(),
                detail: e.to_string(),
            })
        }
        Err(_) => {
            return Err(BenchError::Connect {
                addr: addr.to_string(),
                detail: format!("no answer within {timeout:?}"),
            })
        }
    };
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// One RESP2 connection.
pub struct RespConn {
    stream: Counted<TcpStream>,
    read_buf: BytesMut,
    write_buf: BytesMut,
    /// Bound on each reply wait (extended per call by [`RespConn::call_with_extra`]).
    timeout: Duration,
}

impl RespConn {
    /// Connects to `addr`; `timeout` bounds the connect and every later reply wait; `wire`
    /// counts the bytes and round trips.
    pub async fn connect(
        addr: &str,
        timeout: Duration,
        wire: std::sync::Arc<WireCounter>,
    ) -> Result<RespConn> {
        Ok(RespConn {
            stream: Counted::new(connect(addr, timeout).await?, wire),
            read_buf: BytesMut::with_capacity(16 * 1024),
            write_buf: BytesMut::with_capacity(16 * 1024),
            timeout,
        })
    }

    /// Appends one request (a multibulk array of `args`) to the output buffer without sending it.
    pub fn queue(&mut self, args: &[&[u8]]) {
        encode_command(&mut self.write_buf, args);
    }

    /// Sends everything queued, then reads `n` replies, all within the timeout plus `extra`.
    pub async fn flush_and_read(&mut self, n: usize, extra: Duration) -> Result<Vec<Frame>> {
        let bound = self.timeout + extra;
        match tokio::time::timeout(bound, self.exchange(n)).await {
            Ok(r) => r,
            Err(_) => Err(BenchError::Timeout(bound, "a reply")),
        }
    }

    async fn exchange(&mut self, n: usize) -> Result<Vec<Frame>> {
        let out = self.write_buf.split();
        self.stream.write_all(&out).await?;
        let mut replies = Vec::with_capacity(n);
        while replies.len() < n {
            if let Some(frame) = parse_frame(&mut self.read_buf)? {
                replies.push(frame);
                continue;
            }
            if self.read_buf.len() > MAX_REPLY_BYTES {
                return Err(BenchError::Protocol(format!(
                    "reply larger than {MAX_REPLY_BYTES} bytes"
                )));
            }
            self.read_buf.reserve(16 * 1024);
            let read = self.stream.read_buf(&mut self.read_buf).await?;
            if read == 0 {
                return Err(BenchError::Closed);
            }
        }
        Ok(replies)
    }

    /// Sends one request and waits for its reply (error replies are returned as
    /// [`Frame::Error`], not as `Err`).
    pub async fn call(&mut self, args: &[&[u8]]) -> Result<Frame> {
        self.call_with_extra(args, Duration::ZERO).await
    }

    /// [`RespConn::call`] with the reply bound extended by `extra` (for commands that wait
    /// server-side, such as `SESSION.OPEN … WAIT ms`).
    pub async fn call_with_extra(&mut self, args: &[&[u8]], extra: Duration) -> Result<Frame> {
        self.queue(args);
        let mut replies = self.flush_and_read(1, extra).await?;
        replies.pop().ok_or(BenchError::Closed)
    }

    /// Like [`RespConn::call`] but an error reply becomes `Err(BenchError::Server)`.
    pub async fn call_ok(&mut self, args: &[&[u8]]) -> Result<Frame> {
        match self.call(args).await? {
            Frame::Error(e) => Err(BenchError::Server(e)),
            f => Ok(f),
        }
    }
}

/// A short human rendering of a reply for error messages (at most ~120 characters).
pub fn describe(frame: &Frame) -> String {
    let text = match frame {
        Frame::Simple(b) | Frame::Bulk(b) => format!("{:?}", String::from_utf8_lossy(b)),
        Frame::Error(e) => format!("error {e:?}"),
        Frame::Integer(i) => format!("integer {i}"),
        Frame::Null | Frame::NullArray => "nil".to_string(),
        Frame::Array(items) => format!("array of {}", items.len()),
        other => format!("{other:?}"),
    };
    text.chars().take(120).collect()
}

/// The bytes of a bulk or simple-string reply, `None` for nil; anything else is unexpected.
pub fn bulk_or_nil(frame: Frame, command: &'static str) -> Result<Option<Bytes>> {
    match frame {
        Frame::Bulk(b) | Frame::Simple(b) => Ok(Some(b)),
        Frame::Null | Frame::NullArray => Ok(None),
        Frame::Error(e) => Err(BenchError::Server(e)),
        other => Err(BenchError::Unexpected {
            command,
            reply: describe(&other),
        }),
    }
}

/// Checks for `+OK` (or any status reply).
pub fn expect_ok(frame: Frame, command: &'static str) -> Result<()> {
    match frame {
        Frame::Simple(_) => Ok(()),
        Frame::Error(e) => Err(BenchError::Server(e)),
        other => Err(BenchError::Unexpected {
            command,
            reply: describe(&other),
        }),
    }
}

/// An integer reply.
pub fn integer(frame: Frame, command: &'static str) -> Result<i64> {
    match frame {
        Frame::Integer(i) => Ok(i),
        Frame::Error(e) => Err(BenchError::Server(e)),
        other => Err(BenchError::Unexpected {
            command,
            reply: describe(&other),
        }),
    }
}

/// A flat key/value reply (`CONFIG GET`, RESP2 maps) as pairs of strings.
pub fn pairs(frame: Frame) -> Vec<(String, String)> {
    let items = match frame {
        Frame::Array(items) => items,
        Frame::Map(kv) => kv.into_iter().flat_map(|(k, v)| [k, v]).collect(),
        _ => return Vec::new(),
    };
    let text = |f: &Frame| match f {
        Frame::Bulk(b) | Frame::Simple(b) => String::from_utf8_lossy(b).into_owned(),
        Frame::Integer(i) => i.to_string(),
        other => describe(other),
    };
    items
        .chunks(2)
        .filter(|c| c.len() == 2)
        .map(|c| (text(&c[0]), text(&c[1])))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_reads_flat_arrays() {
        let f = Frame::Array(vec![
            Frame::bulk_from_str("maxclients"),
            Frame::bulk_from_str("10000"),
            Frame::bulk_from_str("odd"),
        ]);
        assert_eq!(
            pairs(f),
            vec![("maxclients".to_string(), "10000".to_string())]
        );
    }

    #[test]
    fn bulk_or_nil_maps_replies() {
        assert_eq!(bulk_or_nil(Frame::Null, "GET").unwrap(), None);
        assert!(matches!(
            bulk_or_nil(Frame::Error("ERR x".into()), "GET"),
            Err(BenchError::Server(_))
        ));
        assert!(matches!(
            bulk_or_nil(Frame::Integer(1), "GET"),
            Err(BenchError::Unexpected { .. })
        ));
    }
}
