//! The replication wire format after `PSYNC`'s reply line: a sequence of frames, each a kind, a
//! length and a body. Pure: no sockets, no state.
//!
//! ```text
//! frame
//! +------+----------+-------------------+
//! | kind | len u32  | body (len bytes)  |
//! +------+----------+-------------------+
//!   kind 1 RECORD: a command record, exactly as the log holds it (persist::record, tag 0x01)
//!   kind 2 ITEM:   a snapshot item or functions item (persist::record, tags 0x02 / 0x03)
//!   kind 3 END:    the end of a full snapshot; body: the item count, u64
//!   kind 4 PING:   nothing; keeps the link's idle time low (body empty)
//!   kind 5 LOCK:   a session lock granted or released (see `encode_lock` for the body)
//! len: little-endian, at most MAX_FRAME_BODY.
//! ```
//!
//! After `+FULLRESYNC <replid> <offset>\r\n` the primary sends the snapshot as ITEM frames and
//! one END frame, then RECORD, LOCK and PING frames; after `+CONTINUE <replid>\r\n`, RECORD,
//! LOCK and PING frames only. A full snapshot ends with a LOCK frame for every lock held when
//! it was walked, before its END (END counts the ITEMs only). Only RECORD, LOCK and PING frames
//! after the snapshot are part of the replication stream: the replication offset counts their
//! bytes (header included), and the backlog holds them. Snapshot frames are outside it, as
//! Redis' RDB transfer is. LOCK frames carry the session lock table (in memory, never logged):
//! a replica mirrors the primary's holders so a page's token still works after a failover.
//!
//! Decoding follows the crate's codecs: `Ok(None)` for "not enough bytes yet", an error for a
//! frame no Gradus primary writes.
//!
//! May import: `gradus-log`'s record limit, `gradus-store`'s lock events. Nothing of the
//! server's state.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use gradus_store::locks::LockEvent;

pub const KIND_RECORD: u8 = 1;
pub const KIND_ITEM: u8 = 2;
pub const KIND_END: u8 = 3;
pub const KIND_PING: u8 = 4;
pub const KIND_LOCK: u8 = 5;

/// The header's length: kind and body length.
pub const HEADER: usize = 5;

/// The largest body a frame may carry: a log record or a snapshot item (both under the log's
/// record limit) with room to spare.
pub const MAX_FRAME_BODY: usize = gradus_log::format::MAX_RECORD_LEN + 1024;

/// One decoded frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Record(Bytes),
    Item(Bytes),
    End { items: u64 },
    Ping,
    Lock(LockEvent),
}

/// A frame that no Gradus primary writes.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum StreamError {
    #[error("unknown replication frame kind {0}")]
    UnknownKind(u8),
    #[error("replication frame of {0} bytes is over the limit")]
    TooLong(usize),
    #[error("malformed replication frame: {0}")]
    Malformed(&'static str),
}

/// Encode one frame.
pub fn encode(kind: u8, body: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(HEADER + body.len());
    out.put_u8(kind);
    out.put_u32_le(body.len() as u32);
    out.put_slice(body);
    out.freeze()
}

/// The END frame for `items` snapshot items.
pub fn end(items: u64) -> Bytes {
    encode(KIND_END, &items.to_le_bytes())
}

/// Decode the frame at the start of `buf`, taking its bytes: Ok(None) when it is not complete.
/// Also returns the frame's length on the wire (what it adds to the replication offset).
pub fn decode(buf: &mut BytesMut) -> Result<Option<(Frame, usize)>, StreamError> {
    if buf.len() < HEADER {
        return Ok(None);
    }
    let kind = buf[0];
    let len = u32::from_le_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if !(KIND_RECORD..=KIND_LOCK).contains(&kind) {
        return Err(StreamError::UnknownKind(kind));
    }
    if len > MAX_FRAME_BODY {
        return Err(StreamError::TooLong(len));
    }
    if buf.len() < HEADER + len {
        return Ok(None);
    }
    buf.advance(HEADER);
    let body = buf.split_to(len).freeze();
    let frame = match kind {
        KIND_RECORD => Frame::Record(body),
        KIND_ITEM => Frame::Item(body),
        KIND_END => {
            let bytes: [u8; 8] = body
                .as_ref()
                .try_into()
                .map_err(|_| StreamError::Malformed("END frame body is not 8 bytes"))?;
            Frame::End {
                items: u64::from_le_bytes(bytes),
            }
        }
        KIND_LOCK => Frame::Lock(decode_lock(body)?),
        _ if body.is_empty() => Frame::Ping,
        _ => return Err(StreamError::Malformed("PING frame with a body")),
    };
    Ok(Some((frame, HEADER + len)))
}

const LOCK_GRANTED: u8 = 1;
const LOCK_RELEASED: u8 = 2;
/// A granted lock's `lease_ms` when it has none.
const NO_LEASE: u64 = u64::MAX;

/// The LOCK frame of `event`. Body: granted `1, db u32, token u64, lease_ms u64 (u64::MAX:
/// none), name`; released `2, db u32, token u64, name` (little-endian; the name is the rest).
pub fn encode_lock(event: &LockEvent) -> Bytes {
    let mut body = BytesMut::with_capacity(32);
    match event {
        LockEvent::Granted {
            db,
            name,
            token,
            lease_ms,
        } => {
            body.put_u8(LOCK_GRANTED);
            body.put_u32_le(*db as u32);
            body.put_u64_le(*token);
            body.put_u64_le(lease_ms.unwrap_or(NO_LEASE));
            body.put_slice(name);
        }
        LockEvent::Released { db, name, token } => {
            body.put_u8(LOCK_RELEASED);
            body.put_u32_le(*db as u32);
            body.put_u64_le(*token);
            body.put_slice(name);
        }
    }
    encode(KIND_LOCK, &body)
}

fn decode_lock(mut body: Bytes) -> Result<LockEvent, StreamError> {
    const SHORT: StreamError = StreamError::Malformed("LOCK frame too short");
    if body.len() < 13 {
        return Err(SHORT);
    }
    let tag = body.get_u8();
    let db = body.get_u32_le() as usize;
    let token = body.get_u64_le();
    match tag {
        LOCK_GRANTED => {
            if body.len() < 8 {
                return Err(SHORT);
            }
            let lease = body.get_u64_le();
            Ok(LockEvent::Granted {
                db,
                name: body,
                token,
                lease_ms: (lease != NO_LEASE).then_some(lease),
            })
        }
        LOCK_RELEASED => Ok(LockEvent::Released {
            db,
            name: body,
            token,
        }),
        _ => Err(StreamError::Malformed("LOCK frame of an unknown kind")),
    }
}

/// Parse the primary's answer to PSYNC (one line, without its CRLF): `+FULLRESYNC <replid>
/// <offset>` or `+CONTINUE [<replid>]`.
#[derive(Debug, Clone, PartialEq)]
pub enum PsyncReply {
    Full { replid: String, offset: u64 },
    Continue { replid: Option<String> },
    Error(String),
}

pub fn parse_psync_reply(line: &str) -> PsyncReply {
    let mut words = line.split(' ');
    match words.next() {
        Some("+FULLRESYNC") => {
            let replid = words.next().unwrap_or("");
            match (replid.len(), words.next().and_then(|o| o.parse().ok())) {
                (40, Some(offset)) => PsyncReply::Full {
                    replid: replid.to_string(),
                    offset,
                },
                _ => PsyncReply::Error(format!("malformed FULLRESYNC reply: {line}")),
            }
        }
        Some("+CONTINUE") => PsyncReply::Continue {
            replid: words.next().filter(|r| r.len() == 40).map(str::to_string),
        },
        _ => PsyncReply::Error(line.trim_start_matches(['-', '+']).to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_wait_for_their_last_byte() {
        let mut wire = BytesMut::new();
        wire.extend_from_slice(&encode(KIND_RECORD, b"abc"));
        wire.extend_from_slice(&encode(KIND_PING, b""));
        wire.extend_from_slice(&end(7));
        let whole = wire.clone();
        for cut in 0..whole.len() {
            let mut part = BytesMut::from(&whole[..cut]);
            while decode(&mut part).unwrap().is_some() {}
        }
        assert_eq!(
            decode(&mut wire).unwrap(),
            Some((Frame::Record(Bytes::from_static(b"abc")), 8))
        );
        assert_eq!(decode(&mut wire).unwrap(), Some((Frame::Ping, 5)));
        assert_eq!(
            decode(&mut wire).unwrap(),
            Some((Frame::End { items: 7 }, 13))
        );
        assert_eq!(decode(&mut wire).unwrap(), None);
    }

    #[test]
    fn lock_frames_round_trip() {
        let events = [
            LockEvent::Granted {
                db: 3,
                name: Bytes::from_static(b"sess:1"),
                token: (2 << 40) + 7,
                lease_ms: Some(30_000),
            },
            LockEvent::Granted {
                db: 0,
                name: Bytes::new(),
                token: 1,
                lease_ms: None,
            },
            LockEvent::Released {
                db: 1,
                name: Bytes::from_static(b"x"),
                token: 9,
            },
        ];
        for event in events {
            let frame = encode_lock(&event);
            let mut wire = BytesMut::from(&frame[..]);
            assert_eq!(
                decode(&mut wire).unwrap(),
                Some((Frame::Lock(event), frame.len()))
            );
        }
        let mut short = BytesMut::from(&encode(KIND_LOCK, &[1, 0, 0])[..]);
        assert!(decode(&mut short).is_err());
    }

    #[test]
    fn bad_frames_are_errors() {
        assert_eq!(
            decode(&mut BytesMut::from(&[9u8, 0, 0, 0, 0][..])),
            Err(StreamError::UnknownKind(9))
        );
        assert!(matches!(
            decode(&mut BytesMut::from(&[1u8, 255, 255, 255, 255][..])),
            Err(StreamError::TooLong(_))
        ));
        assert!(decode(&mut BytesMut::from(&encode(KIND_END, b"x")[..])).is_err());
        assert!(decode(&mut BytesMut::from(&encode(KIND_PING, b"x")[..])).is_err());
    }

    #[test]
    fn psync_replies_parse() {
        let id = "a".repeat(40);
        assert_eq!(
            parse_psync_reply(&format!("+FULLRESYNC {id} 42")),
            PsyncReply::Full {
                replid: id.clone(),
                offset: 42
            }
        );
        assert_eq!(
            parse_psync_reply(&format!("+CONTINUE {id}")),
            PsyncReply::Continue { replid: Some(id) }
        );
        assert_eq!(
            parse_psync_reply("+CONTINUE"),
            PsyncReply::Continue { replid: None }
        );
        assert!(matches!(
            parse_psync_reply("-NOMASTERLINK Can't SYNC while not connected with my master"),
            PsyncReply::Error(_)
        ));
    }
}
