//! Reply decoding for clients, tests and the benchmark: [`parse_frame`] reads one RESP2 or RESP3
//! reply (every type, attributes skipped; streamed `?` aggregates unsupported) into a
//! [`Frame`]. It is stateless: an incomplete reply is left in the buffer and `Ok(None)` returned.
//! A first pass only validates and measures (no allocation, iterative, depth-limited), so a
//! large reply arriving in pieces costs one cheap scan per call; the second pass builds the frame
//! with zero-copy bulk slices. Pure: depends only on `bytes`; no sockets, no server state.

use bytes::{Bytes, BytesMut};

use crate::error::ProtoError;
use crate::frame::Frame;
use crate::num::parse_lenient_i64;

/// Deepest aggregate nesting accepted (attributes count as a level). Deeper replies are
/// rejected with [`ProtoError::NestingTooDeep`] instead of risking stack exhaustion.
pub const MAX_DEPTH: usize = 128;

/// Aggregate kinds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Agg {
    Array,
    Map,
    Set,
    Push,
    Attribute,
}

/// One parsed element header. Ranges index the data slice; aggregates carry their declared
/// count (pairs for maps and attributes).
enum Item {
    Simple(usize, usize),
    Error(usize, usize),
    Integer(i64),
    Bulk(usize, usize),
    Null,
    NullArray,
    Double(f64),
    Boolean(bool),
    Verbatim(usize, usize),
    BigNumber(usize, usize),
    Agg(Agg, usize),
}

/// Finds the CRLF-terminated line starting at `start`: `(content_end, next_pos)`.
#[inline]
fn line(data: &[u8], start: usize) -> Result<Option<(usize, usize)>, ProtoError> {
    let tail = data.get(start..).unwrap_or(&[]);
    match tail.iter().position(|&b| b == b'\r') {
        None => Ok(None),
        Some(i) => {
            let cr = start + i;
            match data.get(cr + 1) {
                None => Ok(None),
                Some(b'\n') => Ok(Some((cr, cr + 2))),
                Some(_) => Err(ProtoError::InvalidReply("line terminator")),
            }
        }
    }
}

/// Parses a declared length: `-1` → `Ok(None)`; other negatives and junk are errors.
#[inline]
fn length(content: &[u8], what: &'static str) -> Result<Option<usize>, ProtoError> {
    match parse_lenient_i64(content) {
        Some(-1) => Ok(None),
        Some(n) => usize::try_from(n)
            .map(Some)
            .map_err(|_| ProtoError::InvalidReply(what)),
        None => Err(ProtoError::InvalidReply(what)),
    }
}

/// Parses one element header at `*pos` (and a blob's payload), advancing `*pos` past it.
/// `Ok(None)` when incomplete (then `*pos` is unchanged).
fn item(data: &[u8], pos: &mut usize) -> Result<Option<Item>, ProtoError> {
    let Some(&t) = data.get(*pos) else {
        return Ok(None);
    };
    if !matches!(
        t,
        b'+' | b'-'
            | b':'
            | b'$'
            | b'!'
            | b'='
            | b'*'
            | b'%'
            | b'~'
            | b'>'
            | b'|'
            | b'_'
            | b','
            | b'#'
            | b'('
    ) {
        return Err(ProtoError::InvalidReplyType(t));
    }
    let start = *pos + 1;
    let Some((end, mut next)) = line(data, start)? else {
        return Ok(None);
    };
    let content = data.get(start..end).unwrap_or(&[]);
    let it = match t {
        b'+' => Item::Simple(start, end),
        b'-' => Item::Error(start, end),
        b':' => {
            Item::Integer(parse_lenient_i64(content).ok_or(ProtoError::InvalidReply("integer"))?)
        }
        b'$' | b'!' | b'=' => {
            let len = match length(content, "bulk length")? {
                Some(len) => len,
                None if t == b'$' => {
                    *pos = next;
                    return Ok(Some(Item::Null));
                }
                None => return Err(ProtoError::InvalidReply("bulk length")),
            };
            let body_end = next
                .checked_add(len)
                .ok_or(ProtoError::InvalidReply("bulk length"))?;
            let after = body_end
                .checked_add(2)
                .ok_or(ProtoError::InvalidReply("bulk length"))?;
            if data.len() < after {
                return Ok(None);
            }
            if data.get(body_end..after) != Some(&b"\r\n"[..]) {
                return Err(ProtoError::InvalidReply("bulk terminator"));
            }
            let body = (next, body_end);
            next = after;
            match t {
                b'$' => Item::Bulk(body.0, body.1),
                b'!' => Item::Error(body.0, body.1),
                _ => {
                    if len < 4 || data.get(body.0 + 3) != Some(&b':') {
                        return Err(ProtoError::InvalidReply("verbatim string"));
                    }
                    Item::Verbatim(body.0, body.1)
                }
            }
        }
        b'*' | b'%' | b'~' | b'>' | b'|' => {
            let kind = match t {
                b'*' => Agg::Array,
                b'%' => Agg::Map,
                b'~' => Agg::Set,
                b'>' => Agg::Push,
                _ => Agg::Attribute,
            };
            match length(content, "aggregate length")? {
                Some(n) => Item::Agg(kind, n),
                None if kind == Agg::Array => Item::NullArray,
                None => return Err(ProtoError::InvalidReply("aggregate length")),
            }
        }
        b'_' if content.is_empty() => Item::Null,
        b'_' => return Err(ProtoError::InvalidReply("null")),
        b',' => {
            let v = std::str::from_utf8(content)
                .ok()
                .and_then(|s| s.parse::<f64>().ok())
                .ok_or(ProtoError::InvalidReply("double"))?;
            Item::Double(v)
        }
        b'#' => match content {
            b"t" => Item::Boolean(true),
            b"f" => Item::Boolean(false),
            _ => return Err(ProtoError::InvalidReply("boolean")),
        },
        _ => {
            // '(' big number: optional sign, then at least one digit.
            let digits = match content {
                [b'-' | b'+', rest @ ..] => rest,
                _ => content,
            };
            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return Err(ProtoError::InvalidReply("big number"));
            }
            Item::BigNumber(start, end)
        }
    };
    *pos = next;
    Ok(Some(it))
}

/// First pass: validates one complete frame at the front of `data` and returns its length, or
/// `Ok(None)` if more bytes are needed. Iterative and allocation-free except for a stack of
/// pending child counts bounded by [`MAX_DEPTH`].
fn frame_len(data: &[u8]) -> Result<Option<usize>, ProtoError> {
    let mut pos = 0;
    let mut pending: Vec<usize> = Vec::new();
    let mut top_done = false;
    loop {
        let Some(it) = item(data, &mut pos)? else {
            return Ok(None);
        };
        let (counts, children) = match it {
            Item::Agg(kind @ (Agg::Map | Agg::Attribute), n) => (
                kind != Agg::Attribute,
                n.checked_mul(2)
                    .ok_or(ProtoError::InvalidReply("aggregate length"))?,
            ),
            Item::Agg(_, n) => (true, n),
            _ => (true, 0),
        };
        if counts {
            match pending.last_mut() {
                Some(left) => *left = left.saturating_sub(1),
                None => top_done = true,
            }
        }
        if children > 0 {
            if pending.len() >= MAX_DEPTH {
                return Err(ProtoError::NestingTooDeep);
            }
            pending.push(children);
        }
        while pending.last() == Some(&0) {
            pending.pop();
        }
        if top_done && pending.is_empty() {
            return Ok(Some(pos));
        }
    }
}

/// Second pass: builds the frame at `*pos` from data already validated by [`frame_len`].
fn build(data: &Bytes, pos: &mut usize, depth: usize) -> Result<Frame, ProtoError> {
    if depth > MAX_DEPTH + 1 {
        return Err(ProtoError::NestingTooDeep);
    }
    loop {
        let it = item(data, pos)?.ok_or(ProtoError::InvalidReply("truncated frame"))?;
        let text = |a: usize, b: usize| {
            String::from_utf8_lossy(data.get(a..b).unwrap_or(&[])).into_owned()
        };
        let children = |n: usize, pos: &mut usize| -> Result<Vec<Frame>, ProtoError> {
            let mut v = Vec::with_capacity(n.min(data.len()));
            for _ in 0..n {
                v.push(build(data, pos, depth + 1)?);
            }
            Ok(v)
        };
        return Ok(match it {
            Item::Simple(a, b) => Frame::Simple(data.slice(a..b)),
            Item::Error(a, b) => Frame::Error(text(a, b)),
            Item::Integer(n) => Frame::Integer(n),
            Item::Bulk(a, b) => Frame::Bulk(data.slice(a..b)),
            Item::Null => Frame::Null,
            Item::NullArray => Frame::NullArray,
            Item::Double(v) => Frame::Double(v),
            Item::Boolean(b) => Frame::Boolean(b),
            Item::Verbatim(a, b) => {
                let mut format = [0u8; 3];
                if let Some(f) = data.get(a..a + 3) {
                    format.copy_from_slice(f);
                }
                Frame::Verbatim {
                    format,
                    text: data.slice((a + 4).min(b)..b),
                }
            }
            Item::BigNumber(a, b) => Frame::BigNumber(text(a, b)),
            Item::Agg(Agg::Array, n) => Frame::Array(children(n, pos)?),
            Item::Agg(Agg::Set, n) => Frame::Set(children(n, pos)?),
            Item::Agg(Agg::Push, n) => Frame::Push(children(n, pos)?),
            Item::Agg(Agg::Map, n) => {
                let mut pairs = Vec::with_capacity(n.min(data.len()));
                for _ in 0..n {
                    let k = build(data, pos, depth + 1)?;
                    let v = build(data, pos, depth + 1)?;
                    pairs.push((k, v));
                }
                Frame::Map(pairs)
            }
            Item::Agg(Agg::Attribute, n) => {
                // Attributes annotate the next value; skip them.
                for _ in 0..n.saturating_mul(2) {
                    build(data, pos, depth + 1)?;
                }
                continue;
            }
        });
    }
}

/// Decodes one reply frame (RESP2 or RESP3 syntax) from the front of `buf`.
///
/// * `Ok(Some(frame))`: the frame's bytes were split off `buf`; bulk/simple payloads are
///   zero-copy slices of them. `$-1` and `_` give [`Frame::Null`], `*-1` gives
///   [`Frame::NullArray`], `!` blob errors give [`Frame::Error`], attributes (`|`) are skipped.
/// * `Ok(None)`: incomplete; `buf` is untouched.
/// * `Err(_)`: malformed input (unknown type byte, bad number, missing CRLF, nesting deeper
///   than [`MAX_DEPTH`], streamed aggregates).
pub fn parse_frame(buf: &mut BytesMut) -> Result<Option<Frame>, ProtoError> {
    let Some(len) = frame_len(buf)? else {
        return Ok(None);
    };
    let data = buf.split_to(len).freeze();
    let mut pos = 0;
    build(&data, &mut pos, 0).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{encode, ProtocolVersion};

    fn parse(s: &[u8]) -> Result<Option<Frame>, ProtoError> {
        let mut buf = BytesMut::from(s);
        let r = parse_frame(&mut buf);
        if let Ok(Some(_)) = r {
            assert!(buf.is_empty(), "leftover {:?}", buf);
        }
        r
    }

    fn sample_frames() -> Vec<Frame> {
        vec![
            Frame::ok(),
            Frame::error("ERR syntax error"),
            Frame::Integer(-12),
            Frame::bulk_from_slice(b"bin\r\n\0ary"),
            Frame::Null,
            Frame::NullArray,
            Frame::array(vec![
                Frame::Integer(1),
                Frame::array(vec![Frame::bulk_from_str("x"), Frame::Null]),
            ]),
            Frame::Map(vec![(Frame::simple("k"), Frame::Double(-0.5))]),
            Frame::Set(vec![Frame::Boolean(true), Frame::Boolean(false)]),
            Frame::Double(1e300),
            Frame::Verbatim {
                format: *b"txt",
                text: Bytes::from_static(b"hello\r\nworld"),
            },
            Frame::BigNumber("-123456789012345678901234567890".into()),
            Frame::Push(vec![Frame::bulk_from_str("invalidate"), Frame::NullArray]),
        ]
    }

    /// What RESP3 encoding then parsing yields: NullArray is sent as `_`, which reads as Null.
    fn resp3_view(f: &Frame) -> Frame {
        match f {
            Frame::NullArray => Frame::Null,
            Frame::Array(v) => Frame::Array(v.iter().map(resp3_view).collect()),
            Frame::Push(v) => Frame::Push(v.iter().map(resp3_view).collect()),
            other => other.clone(),
        }
    }

    #[test]
    fn every_type_resp3_roundtrip() {
        for f in sample_frames() {
            let bytes = f.to_bytes(ProtocolVersion::Resp3);
            assert_eq!(parse(&bytes), Ok(Some(resp3_view(&f))), "{f:?}");
        }
    }

    #[test]
    fn every_type_resp2_downgrade() {
        let cases = [
            (Frame::Double(2.5), Frame::bulk_from_str("2.5")),
            (Frame::Boolean(true), Frame::Integer(1)),
            (
                Frame::Map(vec![(Frame::Integer(1), Frame::Integer(2))]),
                Frame::array(vec![Frame::Integer(1), Frame::Integer(2)]),
            ),
            (
                Frame::Set(vec![Frame::Integer(1)]),
                Frame::array(vec![Frame::Integer(1)]),
            ),
            (
                Frame::Push(vec![Frame::Integer(1)]),
                Frame::array(vec![Frame::Integer(1)]),
            ),
            (
                Frame::Verbatim {
                    format: *b"txt",
                    text: Bytes::from_static(b"hi"),
                },
                Frame::bulk_from_str("hi"),
            ),
            (Frame::BigNumber("12".into()), Frame::bulk_from_str("12")),
            (Frame::Null, Frame::Null),
            (Frame::NullArray, Frame::NullArray),
        ];
        for (f, want) in cases {
            let bytes = f.to_bytes(ProtocolVersion::Resp2);
            assert_eq!(parse(&bytes), Ok(Some(want)), "{f:?}");
        }
    }

    #[test]
    fn partial_frames_at_every_byte() {
        let mut all = BytesMut::new();
        for f in sample_frames() {
            encode(&f, ProtocolVersion::Resp3, &mut all);
        }
        let expected: Vec<Frame> = sample_frames().iter().map(resp3_view).collect();
        // One byte at a time.
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for &b in all.iter() {
            buf.extend_from_slice(&[b]);
            while let Some(f) = parse_frame(&mut buf).unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got, expected);
        // Every prefix of a single frame is incomplete and leaves the buffer alone.
        let one = Frame::array(vec![
            Frame::Map(vec![(Frame::bulk_from_str("a"), Frame::Double(1.5))]),
            Frame::Verbatim {
                format: *b"mkd",
                text: Bytes::from_static(b"x"),
            },
        ])
        .to_bytes(ProtocolVersion::Resp3);
        for cut in 0..one.len() {
            let mut buf = BytesMut::from(&one[..cut]);
            assert_eq!(parse_frame(&mut buf), Ok(None), "cut {cut}");
            assert_eq!(buf.len(), cut);
        }
    }

    #[test]
    fn attributes_are_skipped() {
        let input = b"|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.19\r\n*2\r\n:1\r\n|1\r\n+x\r\n+y\r\n:2\r\n";
        assert_eq!(
            parse(input),
            Ok(Some(Frame::array(vec![
                Frame::Integer(1),
                Frame::Integer(2)
            ])))
        );
        assert_eq!(parse(b"|0\r\n:5\r\n"), Ok(Some(Frame::Integer(5))));
        assert_eq!(parse(b"|1\r\n+a\r\n+b\r\n"), Ok(None));
    }

    #[test]
    fn other_syntax() {
        assert_eq!(
            parse(b"!21\r\nSYNTAX invalid syntax\r\n"),
            Ok(Some(Frame::error("SYNTAX invalid syntax")))
        );
        assert_eq!(parse(b":+7\r\n"), Ok(Some(Frame::Integer(7))));
        assert_eq!(parse(b",inf\r\n"), Ok(Some(Frame::Double(f64::INFINITY))));
        assert_eq!(
            parse(b",-inf\r\n"),
            Ok(Some(Frame::Double(f64::NEG_INFINITY)))
        );
        assert!(matches!(parse(b",nan\r\n"), Ok(Some(Frame::Double(v))) if v.is_nan()));
        assert_eq!(parse(b",1.5e+10\r\n"), Ok(Some(Frame::Double(1.5e10))));
        assert_eq!(parse(b"$-1\r\n"), Ok(Some(Frame::Null)));
        assert_eq!(parse(b"*-1\r\n"), Ok(Some(Frame::NullArray)));
        assert_eq!(parse(b"%0\r\n"), Ok(Some(Frame::Map(vec![]))));
        assert_eq!(parse(b""), Ok(None));
        assert_eq!(parse(b"*2\r\n:1\r\n"), Ok(None));
        assert_eq!(parse(b"$5\r\nab"), Ok(None));
        assert_eq!(parse(b"$999999999999\r\nab"), Ok(None));
    }

    #[test]
    fn malformed_replies() {
        let bad: [&[u8]; 18] = [
            b"?\r\n",
            b"x",
            b"*?\r\n",
            b":abc\r\n",
            b":\r\n",
            b"$-2\r\n",
            b"$3\r\nabcd\r\n",
            b"+OK\rX",
            b"#x\r\n",
            b"_x\r\n",
            b",abc\r\n",
            b"=2\r\nab\r\n",
            b"=5\r\nabcde\r\n",
            b"(12a\r\n",
            b"(\r\n",
            b"%-1\r\n",
            b"$99999999999999999999999\r\n",
            b"~-1\r\n",
        ];
        for input in bad {
            assert!(
                parse(input).is_err(),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn nesting_is_bounded() {
        let ok = [b"*1\r\n".repeat(MAX_DEPTH), b":1\r\n".to_vec()].concat();
        assert!(matches!(parse(&ok), Ok(Some(Frame::Array(_)))));
        let deep = [b"*1\r\n".repeat(MAX_DEPTH + 1), b":1\r\n".to_vec()].concat();
        assert_eq!(parse(&deep), Err(ProtoError::NestingTooDeep));
        // Far deeper input fails fast without recursion.
        let huge = b"*1\r\n".repeat(1_000_000);
        assert_eq!(parse(&huge), Err(ProtoError::NestingTooDeep));
    }

    #[test]
    fn pipelined_replies() {
        let mut buf = BytesMut::new();
        for i in 0..1000 {
            encode(&Frame::Integer(i), ProtocolVersion::Resp2, &mut buf);
            encode(&Frame::ok(), ProtocolVersion::Resp2, &mut buf);
        }
        for i in 0..1000 {
            assert_eq!(parse_frame(&mut buf), Ok(Some(Frame::Integer(i))));
            assert_eq!(parse_frame(&mut buf), Ok(Some(Frame::ok())));
        }
        assert_eq!(parse_frame(&mut buf), Ok(None));
    }
}
