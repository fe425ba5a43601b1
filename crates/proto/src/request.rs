//! Client request decoding: turns the bytes a client sends into argument vectors, exactly as
//! Redis' `processMultibulkBuffer` / `processInlineBuffer` accept them (RESP multibulk and inline
//! commands with `sdssplitargs` quoting), with the same limits and error texts. One
//! [`RequestDecoder`] per connection keeps partial progress so large commands arriving in small
//! pieces are decoded in linear time. Pure: depends only on `bytes`; no sockets, no runtime, no
//! keyspace, no command semantics.

use bytes::{Buf, Bytes, BytesMut};

use crate::error::ProtoError;
use crate::num::parse_strict_i64;

/// Size limits enforced while decoding requests (Redis: `proto-max-bulk-len`, the multibulk
/// count cap, `PROTO_INLINE_MAX_SIZE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted `$N` bulk argument, in bytes. Larger → `invalid bulk length`.
    pub max_bulk_len: usize,
    /// Largest accepted `*N` argument count. Larger → `invalid multibulk length`.
    pub max_array_len: usize,
    /// Most bytes buffered while waiting for the end of an inline line (`too big inline
    /// request`) or of a `*N`/`$N` header line (`too big [m]bulk count string`).
    pub max_inline_len: usize,
}

impl Default for Limits {
    /// 512 MB bulks (Redis' `proto-max-bulk-len`), 1 Mi arguments, 64 KiB inline lines.
    fn default() -> Self {
        Limits {
            max_bulk_len: 512 * 1024 * 1024,
            max_array_len: 1024 * 1024,
            max_inline_len: 64 * 1024,
        }
    }
}

/// Bulk arguments at least this long get room reserved for their payload in the caller's buffer
/// ahead of the reads (Redis' `PROTO_MBULK_BIG_ARG`), in steps bounded by what has arrived (see
/// [`payload_room`]), so a large value costs few reallocations.
const BIG_ARG: usize = 32 * 1024;

/// The buffer capacity to hold for a bulk of `len` bytes (`want` = `len` + CRLF) when `have` bytes
/// of it (and of its CRLF) are buffered: at most twice what has arrived plus [`BIG_ARG`] more,
/// never more than `want`. A declared length is a promise, not bytes: a client that announces
/// `$536870912` and sends nothing makes the server hold 32 KiB, not 512 MB; one that sends the
/// whole payload gets it in O(log n) doublings, each copying what has arrived.
pub fn payload_room(want: usize, have: usize) -> usize {
    want.min(have.saturating_mul(2).saturating_add(BIG_ARG))
}

/// At most this many argument slots are pre-allocated from an announced `*N` count; the vector
/// grows as arguments really arrive.
const MAX_PREALLOC_ARGS: usize = 1024;

/// Most arguments a command may have to take [`RequestDecoder`]'s fast path (see
/// `decode_whole`); longer commands are decoded argument by argument.
const FAST_ARGS: usize = 16;

/// A `<prefix>N\r\n` header at `at` in `b` with N written the plain way (1 to 19 digits, no sign,
/// no leading zero but for `0` itself): `(N, offset just past the header)`. `None` for anything
/// else, complete or not — the general path decides what that is.
#[inline]
fn short_header(b: &[u8], at: usize, prefix: u8) -> Option<(usize, usize)> {
    if *b.get(at)? != prefix {
        return None;
    }
    let digits = at + 1;
    let mut n: usize = 0;
    let mut i = digits;
    loop {
        match *b.get(i)? {
            c @ b'0'..=b'9' if i - digits < 19 => n = n * 10 + usize::from(c - b'0'),
            b'\r' => break,
            _ => return None,
        }
        i += 1;
    }
    let plain = i > digits && (b[digits] != b'0' || i == digits + 1);
    if !plain || *b.get(i + 1)? != b'\n' {
        return None;
    }
    Some((n, i + 2))
}

/// Stateful request decoder: one per connection.
///
/// Handles RESP multibulk (`*N\r\n$len\r\n...`) and inline commands (any command whose first
/// byte is not `*`: a line split on spaces/tabs with Redis' quoting rules, `"double"` quotes
/// with `\n \r \t \b \a \\ \" \xHH` escapes and `'single'` quotes with the `\'` escape; the line
/// may end in `\r\n` or a bare `\n`; a NUL byte in it is a protocol error).
///
/// Progress is kept across calls: completed arguments of an unfinished command are already split
/// off the buffer, and a header line is never re-scanned, so a 1M-argument command or a 4 MiB
/// bulk arriving one byte at a time costs O(total bytes).
///
/// Memory: the decoder never reserves from an announced length more than twice the payload bytes
/// that have arrived plus 32 KiB (and never beyond `max_bulk_len + 2`), and never pre-allocates
/// more than 1024 argument slots. The arguments of the
/// unfinished command are held by the decoder; [`RequestDecoder::pending_bytes`] reports their
/// size so the server can enforce an overall query-buffer limit if it wants one.
#[derive(Debug, Default)]
pub struct RequestDecoder {
    limits: Limits,
    /// Arguments of the multibulk command in progress.
    args: Vec<Bytes>,
    /// Arguments still expected by the command in progress; 0 = between commands.
    remaining: usize,
    /// Length of the bulk whose `$N` header was consumed but whose payload has not arrived.
    bulk_len: Option<usize>,
    /// Bytes at the front of the buffer already searched for the current line's terminator.
    scanned: usize,
    /// Sum of the lengths of `args`.
    pending: usize,
}

/// Outcome of looking for the end of a header line at the front of the buffer.
enum Line {
    /// `\r` found at this index and at least one byte follows it.
    Cr(usize),
    /// No complete line yet.
    Incomplete,
}

impl RequestDecoder {
    /// A decoder with the given limits and no buffered state.
    pub fn new(limits: Limits) -> Self {
        RequestDecoder {
            limits,
            ..Default::default()
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Replaces the limits (e.g. after `CONFIG SET proto-max-bulk-len`). Takes effect for the
    /// next header parsed; a bulk whose header was already accepted is still read in full.
    pub fn set_limits(&mut self, l: Limits) {
        self.limits = l;
    }

    /// True when the decoder holds no partial command (no multibulk in progress, no partially
    /// scanned line). A client that disconnects while this is false, or while its buffer is
    /// non-empty, disconnected mid-command.
    pub fn is_idle(&self) -> bool {
        self.remaining == 0 && self.scanned == 0
    }

    /// Total payload bytes of the arguments already decoded for the unfinished command (they no
    /// longer sit in the caller's buffer).
    pub fn pending_bytes(&self) -> usize {
        self.pending
    }

    /// Number of arguments already decoded for the unfinished command.
    pub fn pending_args(&self) -> usize {
        self.args.len()
    }

    /// Forgets any partial command, e.g. after an error if the caller wants to reuse the decoder.
    pub fn reset(&mut self) {
        self.args = Vec::new();
        self.remaining = 0;
        self.bulk_len = None;
        self.scanned = 0;
        self.pending = 0;
    }

    /// Decodes at most one command from the front of `buf`.
    ///
    /// * `Ok(Some(args))`: one complete command; every argument is split off `buf` with
    ///   `split_to().freeze()` (zero copy for multibulk and unquoted inline arguments). An empty
    ///   vector is an empty command — an empty inline line, `*0` or `*-N` — which Redis ignores:
    ///   the server should skip it and call again.
    /// * `Ok(None)`: more bytes are needed. Whatever is complete has been consumed from `buf`
    ///   and remembered; call again with the same buffer after appending more bytes.
    /// * `Err(e)`: a protocol violation; reply `-ERR {e}` and close the connection. The
    ///   decoder's and buffer's state afterwards is unspecified (use [`Self::reset`] to reuse).
    ///
    /// Contract: between calls the caller may only append to `buf` (never drop or rewrite its
    /// front), since the decoder remembers how far it has scanned.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtoError> {
        if self.remaining == 0 && self.scanned == 0 {
            if let Some(args) = self.decode_whole(buf) {
                return Ok(Some(args));
            }
        }
        self.decode_general(buf)
    }

    /// The common case at the start of a command: a multibulk of at most [`FAST_ARGS`] plain
    /// arguments that is all in `buf`. Its headers are read without consuming anything, then the
    /// command is split off `buf` once and its arguments are slices of that one `Bytes` (one
    /// reference-count increment each, as before, but none of `split_to`'s bookkeeping per
    /// argument). `None` when the command is anything else — incomplete, longer, malformed,
    /// over a limit —: nothing has been consumed and [`Self::decode_general`] decodes it (or
    /// reports its error) from the same state, so the two paths cannot disagree. At most one
    /// attempt per command: once the general path has consumed its count line, `remaining` is
    /// set until the command is complete.
    #[inline]
    fn decode_whole(&mut self, buf: &mut BytesMut) -> Option<Vec<Bytes>> {
        let b: &[u8] = buf;
        let (count, mut pos) = short_header(b, 0, b'*')?;
        if count == 0 || count > FAST_ARGS || count > self.limits.max_array_len {
            return None;
        }
        let mut spans = [(0usize, 0usize); FAST_ARGS];
        for span in spans.iter_mut().take(count) {
            let (len, at) = short_header(b, pos, b'$')?;
            if len > self.limits.max_bulk_len {
                return None;
            }
            let end = at.checked_add(len)?;
            if b.get(end..end.checked_add(2)?)? != b"\r\n" {
                return None;
            }
            *span = (at, len);
            pos = end + 2;
        }
        let mut whole = buf.split_to(pos).freeze();
        let mut args = Vec::with_capacity(count);
        for &(at, len) in &spans[..count - 1] {
            args.push(whole.slice(at..at + len));
        }
        let (at, len) = spans[count - 1];
        whole.advance(at);
        whole.truncate(len);
        args.push(whole);
        Some(args)
    }

    /// Decodes at most one command from the front of `buf`, in any state (see [`Self::decode`]).
    fn decode_general(&mut self, buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtoError> {
        if self.remaining == 0 {
            match buf.first() {
                None => return Ok(None),
                Some(&b'*') => {}
                Some(_) => return self.decode_inline(buf),
            }
            let cr = match self.find_line(buf, ProtoError::TooBigMbulkCount)? {
                Line::Cr(cr) => cr,
                Line::Incomplete => return Ok(None),
            };
            if buf.get(cr + 1) != Some(&b'\n') {
                return Err(ProtoError::InvalidMultibulkLength);
            }
            let count = buf
                .get(1..cr)
                .and_then(parse_strict_i64)
                .ok_or(ProtoError::InvalidMultibulkLength)?;
            if count > 0 && count as u64 > self.limits.max_array_len as u64 {
                return Err(ProtoError::InvalidMultibulkLength);
            }
            buf.advance(cr + 2);
            self.scanned = 0;
            if count <= 0 {
                return Ok(Some(Vec::new()));
            }
            let count = count as usize; // 0 < count <= max_array_len
            self.remaining = count;
            self.args = Vec::with_capacity(count.min(MAX_PREALLOC_ARGS));
        }

        while self.remaining > 0 {
            // `hdr`: bytes of a `$N\r\n` header still at the front of `buf` (0 when it was
            // consumed by an earlier call that then waited for the payload).
            let (hdr, len) = match self.bulk_len {
                Some(len) => (0, len),
                None => match self.parse_bulk_header(buf)? {
                    Some(parsed) => parsed,
                    None => return Ok(None),
                },
            };
            // `len <= max_bulk_len`, so this cannot overflow in practice; stay checked anyway.
            let needed = hdr
                .checked_add(len)
                .and_then(|n| n.checked_add(2))
                .ok_or(ProtoError::InvalidBulkLength)?;
            if buf.len() < needed {
                return self.wait_for_payload(buf, hdr, len).map(|()| None);
            }
            if buf.get(needed - 2..needed) != Some(&b"\r\n"[..]) {
                return Err(ProtoError::MissingBulkTerminator);
            }
            // One split per argument; trimming the header and CRLF off a `Bytes` is free.
            let mut arg = buf.split_to(needed).freeze();
            arg.advance(hdr);
            arg.truncate(len);
            self.args.push(arg);
            self.pending += len;
            self.bulk_len = None;
            self.scanned = 0;
            self.remaining -= 1;
        }
        self.pending = 0;
        Ok(Some(std::mem::take(&mut self.args)))
    }

    /// Parses (without consuming) a `$N\r\n` header at the front of `buf`: `(header_len, N)`.
    /// `Ok(None)` when the header line is incomplete.
    #[inline]
    fn parse_bulk_header(&mut self, buf: &BytesMut) -> Result<Option<(usize, usize)>, ProtoError> {
        let cr = match self.find_line(buf, ProtoError::TooBigBulkCount)? {
            Line::Cr(cr) => cr,
            Line::Incomplete => return Ok(None),
        };
        match buf.first() {
            Some(&b'$') => {}
            Some(&other) => return Err(ProtoError::ExpectedDollar(other)),
            None => return Ok(None),
        }
        if buf.get(cr + 1) != Some(&b'\n') {
            return Err(ProtoError::InvalidBulkLength);
        }
        let len = buf
            .get(1..cr)
            .and_then(parse_strict_i64)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n <= self.limits.max_bulk_len)
            .ok_or(ProtoError::InvalidBulkLength)?;
        Ok(Some((cr + 2, len)))
    }

    /// The payload of a bulk of `len` bytes, preceded by `hdr` header bytes, is not complete:
    /// consumes the header, remembers `len`, rejects a wrong terminator as soon as its first byte
    /// is visible, and reserves room for a big payload in steps bounded by what has arrived
    /// ([`payload_room`]).
    #[cold]
    fn wait_for_payload(
        &mut self,
        buf: &mut BytesMut,
        hdr: usize,
        len: usize,
    ) -> Result<(), ProtoError> {
        if hdr > 0 {
            buf.advance(hdr);
            self.scanned = 0;
            self.bulk_len = Some(len);
        }
        if buf.get(len).is_some_and(|&b| b != b'\r') {
            return Err(ProtoError::MissingBulkTerminator);
        }
        if len >= BIG_ARG {
            // Room ahead of the reads, as Redis makes for big args, but only as far as the bytes
            // that have arrived warrant (Redis reserves the declared length at once).
            let room = payload_room(len + 2, buf.len());
            if buf.capacity() < room {
                buf.reserve(room - buf.len());
            }
        }
        Ok(())
    }

    /// Looks for the `\r` ending the header line at the front of `buf`, resuming where the
    /// previous call stopped. Errs with `too_big` when more than `max_inline_len` bytes are
    /// buffered without a `\r`.
    #[inline]
    fn find_line(&mut self, buf: &BytesMut, too_big: ProtoError) -> Result<Line, ProtoError> {
        let from = self.scanned.min(buf.len());
        let tail = buf.get(from..).unwrap_or(&[]);
        match tail.iter().position(|&b| b == b'\r') {
            Some(i) => {
                let cr = from + i;
                if cr + 1 < buf.len() {
                    Ok(Line::Cr(cr))
                } else {
                    self.scanned = cr;
                    Ok(Line::Incomplete)
                }
            }
            None if buf.len() > self.limits.max_inline_len => Err(too_big),
            None => {
                self.scanned = buf.len();
                Ok(Line::Incomplete)
            }
        }
    }

    /// Decodes one inline command line at the front of `buf`.
    fn decode_inline(&mut self, buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtoError> {
        let from = self.scanned.min(buf.len());
        let tail = buf.get(from..).unwrap_or(&[]);
        let nl = match tail.iter().position(|&b| b == b'\n') {
            Some(i) => from + i,
            None if buf.len() > self.limits.max_inline_len => {
                return Err(ProtoError::TooBigInlineRequest)
            }
            None => {
                self.scanned = buf.len();
                return Ok(None);
            }
        };
        let mut line = buf.split_to(nl + 1).freeze();
        self.scanned = 0;
        line.truncate(nl);
        if line.last() == Some(&b'\r') {
            line.truncate(nl - 1);
        }
        split_inline(&line).map(Some)
    }
}

/// C `isspace` in the "C" locale.
#[inline]
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// Value of an ASCII hex digit.
#[inline]
fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Whether a command name is one a web page makes a browser send (`POST` and `Host:`, in any
/// case): the request line and a header of an HTTP request. Redis closes the connection at once
/// on either, before anything else is checked, so the request's body never runs as commands.
pub fn is_http_request_command(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"post") || name.eq_ignore_ascii_case(b"host:")
}

/// Splits an inline command line (terminator already removed) into arguments with Redis'
/// `sdssplitargs` rules. Unquoted arguments are zero-copy slices of `line`; quoted ones are
/// unescaped into fresh buffers. A NUL byte anywhere is an error (Redis would silently cut the
/// line there; a human typing commands never sends one). Also what a function library's
/// shebang line is split with, as Redis splits it.
pub fn split_inline(line: &Bytes) -> Result<Vec<Bytes>, ProtoError> {
    if line.contains(&0) {
        return Err(ProtoError::NulInInlineRequest);
    }
    let s = &line[..];
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while s.get(i).is_some_and(|&b| is_c_space(b)) {
            i += 1;
        }
        if i >= s.len() {
            return Ok(args);
        }
        let start = i;
        while s
            .get(i)
            .is_some_and(|&b| !matches!(b, b' ' | b'\n' | b'\r' | b'\t' | b'"' | b'\''))
        {
            i += 1;
        }
        match s.get(i) {
            Some(b'"') | Some(b'\'') => {
                let (arg, next) = quoted_arg(s, start, i)?;
                args.push(Bytes::from(arg));
                i = next;
            }
            _ => {
                args.push(line.slice(start..i));
                i += 1; // past the separator (or past the end)
            }
        }
    }
}

/// Slow path of [`split_inline`]: the argument starting at `start` contains a quote at `i`.
/// Returns the unescaped argument and the index just past it.
fn quoted_arg(s: &[u8], start: usize, mut i: usize) -> Result<(Vec<u8>, usize), ProtoError> {
    #[derive(PartialEq)]
    enum Mode {
        Bare,
        Double,
        Single,
    }
    // Byte at `k`, or 0 past the end: mirrors the C string the Redis parser walks.
    let at = |k: usize| s.get(k).copied().unwrap_or(0);
    let mut cur = s.get(start..i).unwrap_or(&[]).to_vec();
    let mut mode = Mode::Bare;
    loop {
        let c = at(i);
        match mode {
            Mode::Double => {
                if c == b'\\' && at(i + 1) == b'x' {
                    if let (Some(hi), Some(lo)) = (hex_val(at(i + 2)), hex_val(at(i + 3))) {
                        cur.push(hi * 16 + lo);
                        i += 4;
                        continue;
                    }
                }
                if c == b'\\' && at(i + 1) != 0 {
                    cur.push(match at(i + 1) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                    i += 2;
                } else if c == b'"' {
                    // A closing quote must be followed by a space or the end of the line.
                    if at(i + 1) != 0 && !is_c_space(at(i + 1)) {
                        return Err(ProtoError::UnbalancedQuotes);
                    }
                    return Ok((cur, i + 1));
                } else if c == 0 {
                    return Err(ProtoError::UnbalancedQuotes);
                } else {
                    cur.push(c);
                    i += 1;
                }
            }
            Mode::Single => {
                if c == b'\\' && at(i + 1) == b'\'' {
                    cur.push(b'\'');
                    i += 2;
                } else if c == b'\'' {
                    if at(i + 1) != 0 && !is_c_space(at(i + 1)) {
                        return Err(ProtoError::UnbalancedQuotes);
                    }
                    return Ok((cur, i + 1));
                } else if c == 0 {
                    return Err(ProtoError::UnbalancedQuotes);
                } else {
                    cur.push(c);
                    i += 1;
                }
            }
            Mode::Bare => match c {
                b' ' | b'\n' | b'\r' | b'\t' => return Ok((cur, i + 1)),
                0 => return Ok((cur, i)),
                b'"' => {
                    mode = Mode::Double;
                    i += 1;
                }
                b'\'' => {
                    mode = Mode::Single;
                    i += 1;
                }
                _ => {
                    cur.push(c);
                    i += 1;
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    /// Encodes args as a RESP multibulk request.
    pub(crate) fn multibulk(args: &[&[u8]]) -> Vec<u8> {
        let mut v = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            v.extend_from_slice(a);
            v.extend_from_slice(b"\r\n");
        }
        v
    }

    /// The fast path (`decode_whole`) against the general one alone: the same inputs fed in the
    /// same pieces give the same commands, errors, consumed bytes and decoder state after every
    /// call. Inputs are plain commands of 1 to 20 arguments (around `FAST_ARGS`), with headers
    /// and terminators sometimes made odd (leading zeros, signs, long counts, missing `\n`, bad
    /// terminators, inline lines) and limits sometimes small, cut at random points.
    #[test]
    fn the_fast_path_decodes_exactly_as_the_general_one() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config, TestRunner};
        let command = (
            prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..20),
            0u8..12,
            any::<u16>(),
        )
            .prop_map(|(args, odd, at)| {
                let refs: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
                let mut v = multibulk(&refs);
                let at = usize::from(at) % v.len();
                match odd {
                    0 => v.insert(1, b'0'),
                    1 => v.insert(1, b'+'),
                    2 => v.insert(1, b'-'),
                    3 => v[at] = b'\r',
                    4 => v[at] = b'$',
                    5 => v.truncate(at),
                    6 => v = b"PING inline\r\n".to_vec(),
                    7 => v.splice(0..0, b"*0\r\n".iter().copied()).for_each(drop),
                    _ => {}
                }
                v
            });
        let case = (
            prop::collection::vec(command, 1..8),
            prop::collection::vec(1usize..64, 1..32),
            any::<bool>(),
        );
        let mut runner = TestRunner::new(Config {
            cases: 2000,
            ..Config::default()
        });
        runner
            .run(&case, |(commands, cuts, small)| {
                let limits = if small {
                    Limits {
                        max_bulk_len: 16,
                        max_array_len: 4,
                        max_inline_len: 64,
                    }
                } else {
                    Limits::default()
                };
                let input: Vec<u8> = commands.concat();
                let (mut fast, mut general) =
                    (RequestDecoder::new(limits), RequestDecoder::new(limits));
                let (mut fb, mut gb) = (BytesMut::new(), BytesMut::new());
                let mut at = 0;
                let mut cut = cuts.iter().cycle();
                while at < input.len() {
                    let end = (at + cut.next().unwrap()).min(input.len());
                    fb.extend_from_slice(&input[at..end]);
                    gb.extend_from_slice(&input[at..end]);
                    at = end;
                    loop {
                        let (f, g) = (fast.decode(&mut fb), general.decode_general(&mut gb));
                        prop_assert_eq!(&f, &g);
                        prop_assert_eq!(&fb[..], &gb[..]);
                        prop_assert_eq!(
                            (fast.remaining, fast.scanned, fast.pending, fast.bulk_len),
                            (
                                general.remaining,
                                general.scanned,
                                general.pending,
                                general.bulk_len
                            )
                        );
                        match f {
                            Ok(Some(_)) => continue,
                            Ok(None) => break,
                            Err(_) => return Ok(()),
                        }
                    }
                }
                Ok(())
            })
            .unwrap();
    }

    /// Decodes everything in `input` at once: all commands, then the first error if any.
    fn decode_all(input: &[u8], limits: Limits) -> (Vec<Vec<Bytes>>, Option<ProtoError>) {
        let mut d = RequestDecoder::new(limits);
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        loop {
            match d.decode(&mut buf) {
                Ok(Some(cmd)) => out.push(cmd),
                Ok(None) => return (out, None),
                Err(e) => return (out, Some(e)),
            }
        }
    }

    /// Feeds `input` one byte at a time, decoding as much as possible after each byte.
    fn decode_bytewise(input: &[u8], limits: Limits) -> (Vec<Vec<Bytes>>, Option<ProtoError>) {
        let mut d = RequestDecoder::new(limits);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for &byte in input {
            buf.extend_from_slice(&[byte]);
            loop {
                match d.decode(&mut buf) {
                    Ok(Some(cmd)) => out.push(cmd),
                    Ok(None) => break,
                    Err(e) => return (out, Some(e)),
                }
            }
        }
        (out, None)
    }

    fn one(input: &[u8]) -> Result<Option<Vec<Bytes>>, ProtoError> {
        let mut d = RequestDecoder::new(Limits::default());
        let mut buf = BytesMut::from(input);
        d.decode(&mut buf)
    }

    fn inline(line: &str) -> Result<Vec<Bytes>, ProtoError> {
        match one(line.as_bytes()) {
            Ok(Some(v)) => Ok(v),
            Ok(None) => panic!("incomplete: {line:?}"),
            Err(e) => Err(e),
        }
    }

    #[test]
    fn simple_multibulk() {
        let input = multibulk(&[b"SET", b"key", b"value"]);
        let mut d = RequestDecoder::new(Limits::default());
        let mut buf = BytesMut::from(&input[..]);
        let cmd = d.decode(&mut buf).unwrap().unwrap();
        assert_eq!(cmd, vec![b("SET"), b("key"), b("value")]);
        assert!(buf.is_empty());
        assert!(d.is_idle());
        assert_eq!(d.decode(&mut buf), Ok(None));
    }

    #[test]
    fn binary_safe_args() {
        let args: [&[u8]; 4] = [b"SET", b"k\r\n", b"\r\n\r\n$3\r\n*1\r\n", b"\0\xff"];
        let input = multibulk(&args);
        let (cmds, err) = decode_all(&input, Limits::default());
        assert_eq!(err, None);
        assert_eq!(cmds.len(), 1);
        let got: Vec<&[u8]> = cmds[0].iter().map(|a| &a[..]).collect();
        assert_eq!(got, args.to_vec());
        assert_eq!(decode_bytewise(&input, Limits::default()), (cmds, None));
    }

    #[test]
    fn empty_bulk_and_empty_commands() {
        assert_eq!(one(b"*1\r\n$0\r\n\r\n"), Ok(Some(vec![Bytes::new()])));
        assert_eq!(one(b"*0\r\n"), Ok(Some(vec![])));
        assert_eq!(one(b"*-1\r\n"), Ok(Some(vec![])));
        assert_eq!(one(b"*-100\r\n"), Ok(Some(vec![])));
        assert_eq!(one(b"\r\n"), Ok(Some(vec![])));
        assert_eq!(one(b"\n"), Ok(Some(vec![])));
        assert_eq!(one(b" \t \r\n"), Ok(Some(vec![])));
        let (cmds, err) = decode_all(b"*0\r\n*1\r\n$4\r\nPING\r\n", Limits::default());
        assert_eq!(err, None);
        assert_eq!(cmds, vec![vec![], vec![b("PING")]]);
    }

    #[test]
    fn pipelined_batch_of_1000() {
        let mut input = Vec::new();
        for i in 0..1000 {
            if i % 3 == 0 {
                input.extend_from_slice(format!("GET key:{i}\r\n").as_bytes());
            } else {
                let v = format!("value-{i}");
                input.extend(multibulk(&[
                    b"SET",
                    format!("key:{i}").as_bytes(),
                    v.as_bytes(),
                ]));
            }
        }
        let (cmds, err) = decode_all(&input, Limits::default());
        assert_eq!(err, None);
        assert_eq!(cmds.len(), 1000);
        for (i, cmd) in cmds.iter().enumerate() {
            if i % 3 == 0 {
                assert_eq!(cmd, &vec![b("GET"), b(&format!("key:{i}"))]);
            } else {
                assert_eq!(cmd.len(), 3);
                assert_eq!(cmd[2], b(&format!("value-{i}")));
            }
        }
    }

    #[test]
    fn split_at_every_byte_position() {
        let inputs: Vec<Vec<u8>> = vec![
            multibulk(&[b"SET", b"key", b"value"]),
            multibulk(&[b"PING"]),
            multibulk(&[b"MSET", b"a\r\nb", b"", b"c"]),
            b"*0\r\n*-1\r\nPING\r\n".to_vec(),
            b"SET \"a b\\x41\" 'c\\'d' e\n".to_vec(),
            [
                multibulk(&[b"ECHO", &[b'x'; 40_000][..]]),
                b"PING\r\n".to_vec(),
            ]
            .concat(),
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n".to_vec(),
        ];
        for input in &inputs {
            let whole = decode_all(input, Limits::default());
            assert_eq!(whole.1, None);
            for cut in 0..=input.len() {
                let mut d = RequestDecoder::new(Limits::default());
                let mut buf = BytesMut::from(&input[..cut]);
                let mut got = Vec::new();
                while let Some(cmd) = d.decode(&mut buf).unwrap() {
                    got.push(cmd);
                }
                buf.extend_from_slice(&input[cut..]);
                while let Some(cmd) = d.decode(&mut buf).unwrap() {
                    got.push(cmd);
                }
                assert_eq!(got, whole.0, "cut at {cut}");
                assert!(buf.is_empty());
            }
            assert_eq!(decode_bytewise(input, Limits::default()), whole);
        }
    }

    #[test]
    fn errors_are_identical_bytewise() {
        let inputs: [&[u8]; 8] = [
            b"*3\r\n$3\r\nSET\r\nX\r\n",
            b"*2\r\n$3\r\nGETX\r\n",
            b"*x\r\n",
            b"*1\r\n$-1\r\n",
            b"PING\r\nSET \"a\r\n",
            b"*1\r\n$abc\r\n",
            b"*1\r\n$3\rxabc\r\n",
            b"*1\rx",
        ];
        for input in inputs {
            let whole = decode_all(input, Limits::default());
            assert!(whole.1.is_some(), "{:?}", input);
            assert_eq!(decode_bytewise(input, Limits::default()), whole);
        }
    }

    #[test]
    fn garbage_after_header() {
        assert_eq!(
            one(b"*3\r\n$3\r\nSET\r\nX\r\n"),
            Err(ProtoError::ExpectedDollar(b'X'))
        );
        assert_eq!(
            one(b"*3\r\n$3\r\nSET\r\n\r\n"),
            Err(ProtoError::ExpectedDollar(b'\r'))
        );
        assert_eq!(one(b"*3\r\n$3\r\nSET"), Ok(None));
        assert_eq!(
            one(b"*3\r\n$3\r\nSETX"),
            Err(ProtoError::MissingBulkTerminator)
        );
        assert_eq!(
            one(b"*3\r\n$3\r\nSET\n\r"),
            Err(ProtoError::MissingBulkTerminator)
        );
        assert_eq!(one(b"*3\r\nSET\r\n"), Err(ProtoError::ExpectedDollar(b'S')));
        assert_eq!(one(b"*3\r\n$\r\n"), Err(ProtoError::InvalidBulkLength));
        assert_eq!(one(b"*3\r\n$3x\r\n"), Err(ProtoError::InvalidBulkLength));
        assert_eq!(one(b"*3\r\n$+3\r\n"), Err(ProtoError::InvalidBulkLength));
        assert_eq!(one(b"*3\r\n$03\r\n"), Err(ProtoError::InvalidBulkLength));
        assert_eq!(one(b"*3\r\n$ 3\r\n"), Err(ProtoError::InvalidBulkLength));
        assert_eq!(one(b"*\r\n"), Err(ProtoError::InvalidMultibulkLength));
        assert_eq!(one(b"*3x\r\n"), Err(ProtoError::InvalidMultibulkLength));
        assert_eq!(one(b"*3\rx"), Err(ProtoError::InvalidMultibulkLength));
        assert_eq!(one(b"*3\r"), Ok(None));
        assert_eq!(one(b"*3"), Ok(None));
        assert_eq!(one(b"*"), Ok(None));
        assert_eq!(one(b""), Ok(None));
        // The '$' check happens once the header line is complete, as in Redis.
        assert_eq!(one(b"*1\r\nX"), Ok(None));
        let mut msg = ProtoError::ExpectedDollar(b'X').to_string();
        assert_eq!(msg, "Protocol error: expected '$', got 'X'");
        msg = one(b"*1\r\n\n\r\n").unwrap_err().to_string();
        assert_eq!(msg, "Protocol error: expected '$', got ' '");
    }

    #[test]
    fn huge_and_negative_lengths() {
        assert_eq!(
            one(b"*1048577\r\n"),
            Err(ProtoError::InvalidMultibulkLength)
        );
        assert_eq!(
            one(b"*99999999999999999999999\r\n"),
            Err(ProtoError::InvalidMultibulkLength)
        );
        assert_eq!(
            one(b"*9223372036854775807\r\n"),
            Err(ProtoError::InvalidMultibulkLength)
        );
        assert_eq!(one(b"*1048576\r\n"), Ok(None));
        assert_eq!(one(b"*1\r\n$-1\r\n"), Err(ProtoError::InvalidBulkLength));
        assert_eq!(one(b"*1\r\n$-5\r\n"), Err(ProtoError::InvalidBulkLength));
        assert_eq!(
            one(b"*1\r\n$536870913\r\n"),
            Err(ProtoError::InvalidBulkLength)
        );
        assert_eq!(
            one(b"*1\r\n$9223372036854775807\r\n"),
            Err(ProtoError::InvalidBulkLength)
        );
        assert_eq!(
            one(b"*1\r\n$18446744073709551616\r\n"),
            Err(ProtoError::InvalidBulkLength)
        );
    }

    #[test]
    fn declared_bulk_length_is_not_reserved_up_front() {
        // A client announcing the largest accepted bulk and sending nothing of it gets a buffer
        // sized by what arrived, not by what it announced.
        let limits = Limits {
            max_bulk_len: 512 * 1024 * 1024,
            ..Limits::default()
        };
        let mut d = RequestDecoder::new(limits);
        let mut buf = BytesMut::from(&b"*1\r\n$536870912\r\nabc"[..]);
        assert_eq!(d.decode(&mut buf), Ok(None));
        assert!(buf.capacity() <= 2 * BIG_ARG, "{}", buf.capacity());
        // As the payload arrives the room grows with it, never past the payload and its CRLF.
        let len = 1024 * 1024;
        let mut d = RequestDecoder::new(limits);
        let mut buf = BytesMut::from(format!("*1\r\n${len}\r\n").as_bytes());
        let mut sent = 0;
        while sent < len {
            let chunk = (len - sent).min(100_000);
            buf.extend_from_slice(&vec![b'x'; chunk]);
            sent += chunk;
            assert_eq!(d.decode(&mut buf), Ok(None));
            assert!(
                buf.capacity() <= 2 * (2 * buf.len() + BIG_ARG),
                "{}",
                buf.capacity()
            );
        }
        buf.extend_from_slice(b"\r\n");
        let args = d.decode(&mut buf).unwrap().unwrap();
        assert_eq!(args[0].len(), len);
    }

    #[test]
    fn payload_room_grows_with_what_arrived() {
        assert_eq!(payload_room(536_870_914, 0), BIG_ARG);
        assert_eq!(payload_room(536_870_914, 100), 200 + BIG_ARG);
        assert_eq!(payload_room(40_002, 30_000), 40_002);
        assert_eq!(payload_room(usize::MAX, usize::MAX), usize::MAX);
    }

    #[test]
    fn limits_enforced() {
        let limits = Limits {
            max_bulk_len: 10,
            max_array_len: 3,
            max_inline_len: 16,
        };
        let run = |input: &[u8]| decode_all(input, limits);
        assert_eq!(run(&multibulk(&[b"a", b"b", b"c"])).1, None);
        assert_eq!(
            run(&multibulk(&[b"a", b"b", b"c", b"d"])).1,
            Some(ProtoError::InvalidMultibulkLength)
        );
        assert_eq!(run(&multibulk(&[b"0123456789"])).1, None);
        assert_eq!(
            run(&multibulk(&[b"0123456789a"])).1,
            Some(ProtoError::InvalidBulkLength)
        );
        // Inline: up to max_inline_len buffered bytes without '\n' is fine, one more is not.
        assert_eq!(run(&[b'x'; 16]), (vec![], None));
        assert_eq!(run(&[b'x'; 17]).1, Some(ProtoError::TooBigInlineRequest));
        // A complete line longer than the limit is accepted, as Redis does.
        let long = [&[b'x'; 40][..], b"\r\n"].concat();
        assert_eq!(run(&long).0.len(), 1);
        // Header lines without '\r'.
        let mut star = vec![b'*'];
        star.extend_from_slice(&[b'1'; 16]);
        assert_eq!(run(&star).1, Some(ProtoError::TooBigMbulkCount));
        assert_eq!(run(&star[..16]).1, None);
        let mut dollar = b"*1\r\n$".to_vec();
        dollar.extend_from_slice(&[b'1'; 16]);
        assert_eq!(run(&dollar).1, Some(ProtoError::TooBigBulkCount));
        // Default limits match Redis' constants.
        let mut big = vec![b'*'];
        big.extend(std::iter::repeat_n(b'0', 65535));
        assert_eq!(decode_all(&big, Limits::default()).1, None);
        big.push(b'0');
        assert_eq!(
            decode_all(&big, Limits::default()).1,
            Some(ProtoError::TooBigMbulkCount)
        );
        big.extend_from_slice(b"\r\n");
        assert_eq!(
            decode_all(&big, Limits::default()).1,
            Some(ProtoError::InvalidMultibulkLength)
        );
        assert_eq!(decode_all(&[b'x'; 65536], Limits::default()).1, None);
        assert_eq!(
            decode_all(&[b'x'; 65537], Limits::default()).1,
            Some(ProtoError::TooBigInlineRequest)
        );
    }

    #[test]
    fn set_limits_applies_to_next_header() {
        let mut d = RequestDecoder::new(Limits::default());
        assert_eq!(d.limits(), &Limits::default());
        let mut buf = BytesMut::from(&multibulk(&[b"abcdef"])[..]);
        d.set_limits(Limits {
            max_bulk_len: 3,
            ..Limits::default()
        });
        assert_eq!(d.limits().max_bulk_len, 3);
        assert_eq!(d.decode(&mut buf), Err(ProtoError::InvalidBulkLength));
        d.reset();
        assert!(d.is_idle());
    }

    #[test]
    fn pending_state_is_tracked() {
        let input = multibulk(&[b"SET", b"key", b"value"]);
        let mut d = RequestDecoder::new(Limits::default());
        let mut buf = BytesMut::from(&input[..input.len() - 3]);
        assert_eq!(d.decode(&mut buf), Ok(None));
        assert_eq!(d.pending_args(), 2);
        assert_eq!(d.pending_bytes(), 6);
        assert!(!d.is_idle());
        buf.extend_from_slice(&input[input.len() - 3..]);
        assert!(d.decode(&mut buf).unwrap().is_some());
        assert_eq!(d.pending_bytes(), 0);
        assert!(d.is_idle());
    }

    #[test]
    fn inline_basic() {
        assert_eq!(inline("PING\r\n"), Ok(vec![b("PING")]));
        assert_eq!(inline("PING\n"), Ok(vec![b("PING")]));
        assert_eq!(inline(" PING\t\r\n"), Ok(vec![b("PING")]));
        assert_eq!(
            inline("SET  key\tvalue \r\n"),
            Ok(vec![b("SET"), b("key"), b("value")])
        );
        assert_eq!(one(b"PING"), Ok(None));
        assert_eq!(one(b"PING\r"), Ok(None));
        // A '\r' inside the line separates arguments; only the final one is stripped.
        assert_eq!(inline("a\rb\r\r\n"), Ok(vec![b("a"), b("b")]));
        // '\v' and '\f' are skipped between arguments but belong to bare arguments.
        assert_eq!(inline("\x0ba\x0bb\n"), Ok(vec![b("a\x0bb")]));
        // A NUL byte is refused.
        assert_eq!(inline("PING\0 junk\n"), Err(ProtoError::NulInInlineRequest));
        // Empty quoted arguments are kept.
        assert_eq!(
            inline("SET k \"\"\n"),
            Ok(vec![b("SET"), b("k"), Bytes::new()])
        );
        assert_eq!(
            inline("SET k ''\n"),
            Ok(vec![b("SET"), b("k"), Bytes::new()])
        );
    }

    #[test]
    fn inline_quoting() {
        assert_eq!(
            inline("SET \"hello world\" 'a b'\n"),
            Ok(vec![b("SET"), b("hello world"), b("a b")])
        );
        // Every double-quote escape; unknown escapes yield the escaped byte itself, and an
        // incomplete \x sequence is a plain escape of 'x'.
        assert_eq!(
            inline("ECHO \"\\n\\r\\t\\b\\a\\\\\\\"\\x41\\x7a\\xZZ\\q\"\n"),
            Ok(vec![b("ECHO"), b("\n\r\t\x08\x07\\\"AzxZZq")])
        );
        assert_eq!(
            inline("ECHO \"\\xff\\x00\"\n"),
            Ok(vec![b("ECHO"), Bytes::from_static(b"\xff\x00")])
        );
        // Single quotes only know \' ; other backslashes are literal.
        assert_eq!(
            inline("ECHO 'it\\'s \\n'\n"),
            Ok(vec![b("ECHO"), b("it's \\n")])
        );
        // A quote inside a bare word starts a quoted section of the same argument.
        assert_eq!(inline("ECHO ab\"c d\"\n"), Ok(vec![b("ECHO"), b("abc d")]));
        assert_eq!(inline("ECHO ab'c d'\n"), Ok(vec![b("ECHO"), b("abc d")]));
        assert_eq!(
            inline("ECHO \"a\"\tb\n"),
            Ok(vec![b("ECHO"), b("a"), b("b")])
        );
        // Unbalanced or badly closed quotes.
        for bad in [
            "ECHO \"a\n",
            "ECHO 'a\r\n",
            "ECHO \"a\"x\n",
            "ECHO 'a'x\n",
            "ECHO \"a\\\"\n",
            "ECHO 'a\\'\n",
            "ECHO \"a\\\n",
        ] {
            assert_eq!(inline(bad), Err(ProtoError::UnbalancedQuotes), "{bad:?}");
        }
        assert_eq!(
            ProtoError::UnbalancedQuotes.to_string(),
            "Protocol error: unbalanced quotes in request"
        );
    }

    #[test]
    fn inline_args_are_zero_copy() {
        let mut d = RequestDecoder::new(Limits::default());
        let mut buf = BytesMut::from(&b"GET somekey\r\n"[..]);
        let base = buf.as_ptr() as usize;
        let cmd = d.decode(&mut buf).unwrap().unwrap();
        assert_eq!(cmd[1].as_ptr() as usize, base + 4);
    }
}
