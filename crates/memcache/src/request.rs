//! Incremental decoding of memcached text-protocol requests: a command line, and for storage
//! commands (`set`, `add`, `replace`, `append`, `prepend`, `cas`, `ms`) the data block after it.
//!
//! Limits are enforced before anything is buffered beyond them, as memcached does at its edge:
//! * a line with no newline after `max_line` bytes (2048) closes the connection
//!   ([`McError::LineTooLong`]); retrieval lines (`get`, `gets`, `gat`, `gats`) may run to
//!   `max_get_line` bytes, since a multi-get of many keys is legitimately long;
//! * a data block longer than `max_value` is swallowed (read and dropped as it arrives, never
//!   buffered) and answered `SERVER_ERROR object too large for cache`;
//! * a key is at most 250 bytes with no control characters or spaces;
//! * a first byte of 0x80 (binary-protocol magic) is [`McError::BinaryProtocol`].
//!
//! Everything else that is wrong with a request is a [`Decoded::Reply`]: an error line in
//! memcached's words, after which the connection carries on.

use crate::error::McError;
use crate::meta::{MetaFlags, MAX_META_TOKENS};
use bytes::{Buf, Bytes, BytesMut};

/// Longest key, as in memcached.
pub const MAX_KEY_LEN: usize = 250;

/// Input limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest command line (memcached: 2048 bytes with no newline closes the connection).
    pub max_line: usize,
    /// Longest retrieval line (`get k1 k2 …`): memcached reads a multi-get line of any length,
    /// tens of thousands of keys are common; 2 MiB by default (~80 000 keys of 25 bytes).
    pub max_get_line: usize,
    /// Largest data block (memcached's item size limit, 1 MiB by default).
    pub max_value: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_line: 2048,
            max_get_line: 2 * 1024 * 1024,
            max_value: 1024 * 1024,
        }
    }
}

/// Which storage command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

/// A parsed request. (Meta variants carry their parsed flags inline: a command is built once and
/// moved once, so boxing would only add an allocation per request.)
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `get`/`gets` (touch None) and `gat`/`gats` (touch Some(exptime)); `with_cas` for the `s` forms.
    Get {
        keys: Vec<Bytes>,
        with_cas: bool,
        touch: Option<i64>,
    },
    /// `set`/`add`/`replace`/`append`/`prepend`/`cas`; `cas` is 0 unless mode is Cas.
    Store {
        mode: StoreMode,
        key: Bytes,
        flags: u32,
        exptime: i64,
        cas: u64,
        data: Bytes,
        noreply: bool,
    },
    Delete {
        key: Bytes,
        noreply: bool,
    },
    /// `incr` (incr true) / `decr`.
    Arith {
        key: Bytes,
        incr: bool,
        delta: u64,
        noreply: bool,
    },
    Touch {
        key: Bytes,
        exptime: i64,
        noreply: bool,
    },
    FlushAll {
        delay: i64,
        noreply: bool,
    },
    Version,
    Verbosity {
        noreply: bool,
    },
    /// `stats` and its arguments (`stats cachedump 1 0` → ["cachedump", "1", "0"]).
    Stats {
        args: Vec<Bytes>,
    },
    Quit,
    /// `mg` (the key is already base64-decoded when the `b` flag was sent).
    MetaGet {
        key: Bytes,
        flags: MetaFlags,
    },
    MetaSet {
        key: Bytes,
        data: Bytes,
        flags: MetaFlags,
    },
    MetaDelete {
        key: Bytes,
        flags: MetaFlags,
    },
    MetaArith {
        key: Bytes,
        flags: MetaFlags,
    },
    MetaNoop,
    /// `me key [b]`.
    MetaDebug {
        key: Bytes,
        base64: bool,
    },
}

/// One decoding step's result.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    Command(Command),
    /// Answer with this error line (no CRLF) and carry on; `noreply` when the request asked for
    /// no reply (memcached then stays silent for it).
    Reply {
        line: &'static str,
        noreply: bool,
    },
    /// A data block over the item size limit was swallowed: answer `SERVER_ERROR object too large
    /// for cache`, and when `unlink` (a `set` or `ms`, as memcached does) first remove `key`, so no
    /// stale item survives a failed update.
    TooLarge {
        key: Bytes,
        unlink: bool,
        noreply: bool,
    },
}

/// The largest data block length memcached accepts on a command line: its length plus the
/// CRLF must fit in a 32-bit int.
pub const MAX_DATA_LEN: i64 = i32::MAX as i64 - 2;

/// Incremental request decoder. The only state kept between calls is how many bytes of an
/// oversized data block remain to be swallowed.
#[derive(Debug, Clone)]
pub struct Decoder {
    limits: Limits,
    swallow: usize,
    /// Bytes at the front of the buffer already searched for a newline (a long multi-get line
    /// arriving in pieces is scanned once, not once per piece).
    scanned: usize,
}

const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";

fn reply(line: &'static str) -> Decoded {
    Decoded::Reply {
        line,
        noreply: false,
    }
}

/// A valid text-protocol key: 1..=250 bytes, no control characters, spaces or DEL.
pub fn key_ok(key: &[u8]) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_LEN && key.iter().all(|&c| c > b' ' && c != 0x7f)
}

/// A decimal number with only digits (and a leading '-' for signed types).
fn num<T: std::str::FromStr>(token: &[u8]) -> Option<T> {
    if token.is_empty() || token.len() > 20 {
        return None;
    }
    let digits = token.strip_prefix(b"-").unwrap_or(token);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(token).ok()?.parse().ok()
}

/// memcached's exptime: a 32-bit signed number.
fn exptime(token: &[u8]) -> Option<i64> {
    num::<i32>(token).map(i64::from)
}

/// (start, end) of each space-separated token of `line`.
fn token_ranges(line: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::with_capacity(8);
    let mut start = None;
    for (i, &c) in line.iter().enumerate() {
        match (c == b' ', start) {
            (true, Some(s)) => {
                out.push((s, i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, line.len()));
    }
    out
}

fn is_retrieval(line: &[u8]) -> bool {
    let line = line.trim_ascii_start();
    [&b"get "[..], b"gets ", b"gat ", b"gats "]
        .iter()
        .any(|p| line.starts_with(p))
}

impl Decoder {
    pub fn new(limits: Limits) -> Self {
        Decoder {
            limits,
            swallow: 0,
            scanned: 0,
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// Bytes of an oversized data block still to be dropped.
    pub fn pending_swallow(&self) -> usize {
        self.swallow
    }

    /// Decode the next request from `buf`, consuming its bytes. `Ok(None)`: more bytes needed.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, McError> {
        if self.swallow > 0 {
            let n = self.swallow.min(buf.len());
            buf.advance(n);
            self.swallow -= n;
            if self.swallow > 0 {
                return Ok(None);
            }
        }
        if buf.is_empty() {
            return Ok(None);
        }
        if buf[0] == 0x80 {
            return Err(McError::BinaryProtocol);
        }
        let scan = buf
            .len()
            .min(self.limits.max_get_line.max(self.limits.max_line) + 1);
        let from = self.scanned.min(scan);
        let Some(nl) = buf[from..scan]
            .iter()
            .position(|&c| c == b'\n')
            .map(|i| from + i)
        else {
            self.scanned = scan;
            if buf.len() > self.limits.max_line
                && (!is_retrieval(&buf[..buf.len().min(128)])
                    || buf.len() > self.limits.max_get_line)
            {
                return Err(McError::LineTooLong);
            }
            return Ok(None);
        };
        self.scanned = 0;
        let line_end = if nl > 0 && buf[nl - 1] == b'\r' {
            nl - 1
        } else {
            nl
        };
        if line_end > self.limits.max_line && !is_retrieval(&buf[..line_end.min(128)]) {
            return Err(McError::LineTooLong);
        }
        // Tokenize without copying or consuming (a storage command may still be waiting for its
        // data); the tokens become slices of the request's bytes once it is complete.
        let ranges: Vec<(usize, usize)> = token_ranges(&buf[..line_end]);
        let token = |i: usize| &buf[ranges[i].0..ranges[i].1];
        let consumed_line = nl + 1;
        if ranges.is_empty() {
            buf.advance(consumed_line);
            return Ok(Some(reply("ERROR")));
        }
        let name = token(0);
        let is_meta_set = name == b"ms";
        let data_len = match name {
            b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
                let want = if name == b"cas" { 6 } else { 5 };
                if ranges.len() != want && ranges.len() != want + 1 {
                    buf.advance(consumed_line);
                    return Ok(Some(reply("ERROR")));
                }
                match num::<i64>(token(4)) {
                    Some(n) if (0..=MAX_DATA_LEN).contains(&n) => Some(n as usize),
                    _ => {
                        buf.advance(consumed_line);
                        return Ok(Some(reply(BAD_FORMAT)));
                    }
                }
            }
            b"ms" => {
                if ranges.len() < 3 {
                    buf.advance(consumed_line);
                    return Ok(Some(reply(BAD_FORMAT)));
                }
                match num::<i64>(token(2)) {
                    Some(n) if (0..=MAX_DATA_LEN).contains(&n) => Some(n as usize),
                    _ => {
                        buf.advance(consumed_line);
                        return Ok(Some(reply(BAD_FORMAT)));
                    }
                }
            }
            _ => None,
        };
        let Some(data_len) = data_len else {
            let line = buf.split_to(consumed_line).freeze();
            let tokens: Vec<Bytes> = ranges.iter().map(|&(a, b)| line.slice(a..b)).collect();
            return self.parse_line(&tokens).map(Some);
        };
        let noreply = !is_meta_set && token(ranges.len() - 1) == b"noreply";
        // A bad header of a classic storage command is refused before its data block, which
        // memcached then reads as a command line of its own (ms swallows the block instead).
        if !is_meta_set {
            let header: Vec<&[u8]> = (0..ranges.len()).map(token).collect();
            if let Err(refusal) = parse_store_header(&header, noreply) {
                buf.advance(consumed_line);
                return Ok(Some(refusal.reply()));
            }
        }
        if data_len > self.limits.max_value {
            let key = Bytes::copy_from_slice(token(1));
            let unlink = name == b"set" || is_meta_set;
            buf.advance(consumed_line);
            self.swallow = data_len + 2;
            let n = self.swallow.min(buf.len());
            buf.advance(n);
            self.swallow -= n;
            return Ok(Some(Decoded::TooLarge {
                key,
                unlink,
                noreply,
            }));
        }
        let total = consumed_line + data_len + 2;
        if buf.len() < total {
            buf.reserve(total - buf.len());
            return Ok(None);
        }
        let request = buf.split_to(total).freeze();
        if &request[total - 2..] != b"\r\n" {
            return Ok(Some(Decoded::Reply {
                line: "CLIENT_ERROR bad data chunk",
                noreply,
            }));
        }
        let tokens: Vec<Bytes> = ranges.iter().map(|&(a, b)| request.slice(a..b)).collect();
        let data = request.slice(consumed_line..consumed_line + data_len);
        Ok(Some(if is_meta_set {
            parse_meta_set(&tokens, data)
        } else {
            parse_store(&tokens, data, noreply)
        }))
    }

    /// A command without a data block.
    /// Errs with [`McError::HttpRequest`] for an unknown command whose line ends in an
    /// `HTTP/…` token (`GET / HTTP/1.1`, `POST /x HTTP/1.0`): memcached hangs up on those, so a
    /// web page cannot make a browser talk to the cache (cross-protocol scripting).
    fn parse_line(&self, tokens: &[Bytes]) -> Result<Decoded, McError> {
        let name = tokens[0].as_ref();
        let noreply = tokens.len() > 1 && tokens.last().is_some_and(|t| t == "noreply");
        let args = &tokens[1..];
        let cmd = match name {
            b"get" | b"gets" => {
                if args.is_empty() {
                    return Ok(reply("ERROR"));
                }
                if !args.iter().all(|k| key_ok(k)) {
                    return Ok(reply(BAD_FORMAT));
                }
                Command::Get {
                    keys: args.to_vec(),
                    with_cas: name == b"gets",
                    touch: None,
                }
            }
            b"gat" | b"gats" => {
                if args.len() < 2 {
                    return Ok(reply("ERROR"));
                }
                let Some(t) = exptime(&args[0]) else {
                    return Ok(reply("CLIENT_ERROR invalid exptime argument"));
                };
                if !args[1..].iter().all(|k| key_ok(k)) {
                    return Ok(reply(BAD_FORMAT));
                }
                Command::Get {
                    keys: args[1..].to_vec(),
                    with_cas: name == b"gats",
                    touch: Some(t),
                }
            }
            b"delete" => {
                let n = args.len() - usize::from(noreply);
                // "delete key 0" is an old client habit memcached still tolerates.
                if n == 0 || n > 2 || (n == 2 && args[1] != "0") {
                    return Ok(Decoded::Reply {
                        line:
                            "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]",
                        noreply,
                    });
                }
                if !key_ok(&args[0]) {
                    return Ok(reply(BAD_FORMAT));
                }
                Command::Delete {
                    key: args[0].clone(),
                    noreply,
                }
            }
            b"incr" | b"decr" => {
                if args.len() != 2 + usize::from(noreply) {
                    return Ok(reply("ERROR"));
                }
                if !key_ok(&args[0]) {
                    return Ok(reply(BAD_FORMAT));
                }
                let Some(delta) = num::<u64>(&args[1]).filter(|_| args[1][0] != b'-') else {
                    return Ok(Decoded::Reply {
                        line: "CLIENT_ERROR invalid numeric delta argument",
                        noreply,
                    });
                };
                Command::Arith {
                    key: args[0].clone(),
                    incr: name == b"incr",
                    delta,
                    noreply,
                }
            }
            b"touch" => {
                if args.len() != 2 + usize::from(noreply) {
                    return Ok(reply("ERROR"));
                }
                if !key_ok(&args[0]) {
                    return Ok(reply(BAD_FORMAT));
                }
                let Some(t) = exptime(&args[1]) else {
                    return Ok(Decoded::Reply {
                        line: "CLIENT_ERROR invalid exptime argument",
                        noreply,
                    });
                };
                Command::Touch {
                    key: args[0].clone(),
                    exptime: t,
                    noreply,
                }
            }
            b"flush_all" => {
                let n = args.len() - usize::from(noreply);
                let delay = match n {
                    0 => 0,
                    1 => match exptime(&args[0]) {
                        Some(d) => d,
                        None => {
                            return Ok(Decoded::Reply {
                                line: "CLIENT_ERROR invalid exptime argument",
                                noreply,
                            })
                        }
                    },
                    _ => return Ok(reply("ERROR")),
                };
                Command::FlushAll { delay, noreply }
            }
            b"version" => Command::Version,
            b"verbosity" => {
                if args.is_empty() || args.len() > 2 {
                    return Ok(reply("ERROR"));
                }
                Command::Verbosity { noreply }
            }
            b"stats" => Command::Stats {
                args: args.to_vec(),
            },
            b"quit" => Command::Quit,
            b"mn" => Command::MetaNoop,
            b"me" => {
                if args.is_empty() || args.len() > 2 {
                    return Ok(reply(BAD_FORMAT));
                }
                let base64 = args.get(1).is_some_and(|f| f == "b");
                match meta_key(&args[0], base64) {
                    Ok(key) => Command::MetaDebug { key, base64 },
                    Err(line) => return Ok(reply(line)),
                }
            }
            b"mg" | b"md" | b"ma" => {
                if args.is_empty() {
                    return Ok(reply(BAD_FORMAT));
                }
                if tokens.len() > MAX_META_TOKENS {
                    return Ok(reply("CLIENT_ERROR options flags are too long"));
                }
                let flags = match MetaFlags::parse(&args[1..]) {
                    Ok(f) => f,
                    Err(_) if name == b"ma" => {
                        return Ok(reply("CLIENT_ERROR invalid or duplicate flag"))
                    }
                    Err(line) => return Ok(reply(line)),
                };
                let key = match meta_key(&args[0], flags.base64) {
                    Ok(k) => k,
                    Err(line) => return Ok(reply(line)),
                };
                match name {
                    b"mg" => Command::MetaGet { key, flags },
                    b"md" => Command::MetaDelete { key, flags },
                    _ => Command::MetaArith { key, flags },
                }
            }
            _ if name.len() >= 2 && tokens.last().is_some_and(|t| t.starts_with(b"HTTP/")) => {
                return Err(McError::HttpRequest)
            }
            _ => return Ok(reply("ERROR")),
        };
        Ok(Decoded::Command(cmd))
    }
}

/// The key of a meta command: base64-decoded when `b` was sent, then checked.
fn meta_key(raw: &Bytes, base64: bool) -> Result<Bytes, &'static str> {
    if raw.len() > MAX_KEY_LEN * 2 {
        return Err(BAD_FORMAT);
    }
    let key = if base64 {
        Bytes::from(crate::base64::decode(raw).ok_or("CLIENT_ERROR error decoding key")?)
    } else {
        if !key_ok(raw) {
            return Err(BAD_FORMAT);
        }
        raw.clone()
    };
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(BAD_FORMAT);
    }
    Ok(key)
}

/// (mode, flags, exptime, cas) of a classic storage command line, or the refusal.
fn parse_store_header<T: AsRef<[u8]>>(
    tokens: &[T],
    noreply: bool,
) -> Result<(StoreMode, u32, i64, u64), Refusal> {
    let bad = Refusal(noreply);
    let mode = match tokens[0].as_ref() {
        b"set" => StoreMode::Set,
        b"add" => StoreMode::Add,
        b"replace" => StoreMode::Replace,
        b"append" => StoreMode::Append,
        b"prepend" => StoreMode::Prepend,
        _ => StoreMode::Cas,
    };
    if !key_ok(tokens[1].as_ref()) {
        return Err(bad);
    }
    let (Some(flags), Some(exptime)) =
        (num::<u32>(tokens[2].as_ref()), exptime(tokens[3].as_ref()))
    else {
        return Err(bad);
    };
    let cas = if mode == StoreMode::Cas {
        match num::<u64>(tokens[5].as_ref()) {
            Some(c) => c,
            None => return Err(bad),
        }
    } else {
        0
    };
    Ok((mode, flags, exptime, cas))
}

/// A malformed storage command line (the flag says whether it asked for no reply).
struct Refusal(bool);

impl Refusal {
    fn reply(self) -> Decoded {
        Decoded::Reply {
            line: BAD_FORMAT,
            noreply: self.0,
        }
    }
}

fn parse_store(tokens: &[Bytes], data: Bytes, noreply: bool) -> Decoded {
    let (mode, flags, exptime, cas) = match parse_store_header(tokens, noreply) {
        Ok(header) => header,
        Err(refusal) => return refusal.reply(),
    };
    Decoded::Command(Command::Store {
        mode,
        key: tokens[1].clone(),
        flags,
        exptime,
        cas,
        data,
        noreply,
    })
}

fn parse_meta_set(tokens: &[Bytes], data: Bytes) -> Decoded {
    if tokens.len() > MAX_META_TOKENS {
        return reply("CLIENT_ERROR options flags are too long");
    }
    let flags = match MetaFlags::parse(&tokens[3..]) {
        Ok(f) => f,
        Err(line) => return reply(line),
    };
    if let Err(line) = flags.set_mode() {
        return reply(line);
    }
    match meta_key(&tokens[1], flags.base64) {
        Ok(key) => Decoded::Command(Command::MetaSet { key, data, flags }),
        Err(line) => reply(line),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(input: &[u8]) -> (Vec<Decoded>, Option<McError>) {
        let mut d = Decoder::new(Limits::default());
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        loop {
            match d.decode(&mut buf) {
                Ok(Some(x)) => out.push(x),
                Ok(None) => return (out, None),
                Err(e) => return (out, Some(e)),
            }
        }
    }

    #[test]
    fn set_then_get() {
        let (out, err) = decode_all(b"set k 5 0 3\r\nabc\r\nget k j\r\n");
        assert_eq!(err, None);
        assert_eq!(out.len(), 2);
        match &out[0] {
            Decoded::Command(Command::Store {
                mode: StoreMode::Set,
                key,
                flags: 5,
                data,
                ..
            }) => {
                assert_eq!(key, "k");
                assert_eq!(data, "abc");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(&out[1], Decoded::Command(Command::Get { keys, .. }) if keys.len() == 2));
    }

    #[test]
    fn partial_data_waits() {
        let mut d = Decoder::new(Limits::default());
        let mut buf = BytesMut::from(&b"set k 0 0 10\r\nabc"[..]);
        assert_eq!(d.decode(&mut buf), Ok(None));
        buf.extend_from_slice(b"defghij\r\n");
        assert!(matches!(d.decode(&mut buf), Ok(Some(Decoded::Command(_)))));
        assert!(buf.is_empty());
    }

    #[test]
    fn too_large_is_swallowed() {
        let limits = Limits {
            max_value: 4,
            ..Limits::default()
        };
        let mut d = Decoder::new(limits);
        let mut buf = BytesMut::from(&b"set k 0 0 6\r\nabc"[..]);
        assert_eq!(
            d.decode(&mut buf),
            Ok(Some(Decoded::TooLarge {
                key: Bytes::from_static(b"k"),
                unlink: true,
                noreply: false
            }))
        );
        buf.extend_from_slice(b"def\r\nmn\r\n");
        assert_eq!(
            d.decode(&mut buf),
            Ok(Some(Decoded::Command(Command::MetaNoop)))
        );
        // Only set and ms drop the old item, as memcached does; add/replace/append keep it.
        let mut buf = BytesMut::from(&b"add k 0 0 6 noreply\r\nabcdef\r\n"[..]);
        assert_eq!(
            d.decode(&mut buf),
            Ok(Some(Decoded::TooLarge {
                key: Bytes::from_static(b"k"),
                unlink: false,
                noreply: true
            }))
        );
        let mut buf = BytesMut::from(&b"ms k 6\r\nabcdef\r\n"[..]);
        assert!(matches!(
            d.decode(&mut buf),
            Ok(Some(Decoded::TooLarge { unlink: true, .. }))
        ));
    }

    /// Regression: memcached reads data lengths as a 32-bit int with room for the CRLF; longer or
    /// negative ones are a bad command line, not a block to swallow.
    #[test]
    fn data_lengths_beyond_memcacheds_int_are_a_bad_command_line() {
        for line in [
            "set k 0 0 4294967295\r\n",
            "set k 0 0 2147483647\r\n",
            "set k 0 0 2147483646\r\n",
            "set k 0 0 -1\r\n",
            "ms k 4294967295\r\n",
            "ms k -1\r\n",
        ] {
            let mut d = Decoder::new(Limits::default());
            let mut buf = BytesMut::from(line.as_bytes());
            assert_eq!(d.decode(&mut buf), Ok(Some(reply(BAD_FORMAT))), "{line}");
            assert!(buf.is_empty());
        }
    }

    /// Regression: a multi-get of tens of thousands of keys on one line is served, as memcached
    /// serves it, and a line arriving in pieces is not scanned again from its start each time.
    #[test]
    fn a_multiget_of_25000_keys_is_one_request() {
        let keys: Vec<String> = (0..25_000).map(|i| format!("key{i:06}")).collect();
        let line = format!("get {}\r\n", keys.join(" "));
        let mut d = Decoder::new(Limits::default());
        let mut buf = BytesMut::new();
        let mut got = None;
        for piece in line.as_bytes().chunks(16 * 1024) {
            buf.extend_from_slice(piece);
            if let Some(decoded) = d.decode(&mut buf).expect("a long get line is accepted") {
                got = Some(decoded);
            }
        }
        match got {
            Some(Decoded::Command(Command::Get { keys: got, .. })) => assert_eq!(got.len(), 25_000),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn limits_and_binary() {
        let (_, err) = decode_all(&[b'x'; 3000]);
        assert_eq!(err, Some(McError::LineTooLong));
        let (_, err) = decode_all(&[b'x'; 100]);
        assert_eq!(err, None);
        let mut long_get = b"get ".to_vec();
        long_get.extend(std::iter::repeat_n(b'k', 3000));
        let (_, err) = decode_all(&long_get);
        assert_eq!(err, None);
        let (_, err) = decode_all(b"\x80\x00\x00");
        assert_eq!(err, Some(McError::BinaryProtocol));
        let key = "k".repeat(251);
        let (out, _) = decode_all(format!("get {key}\r\n").as_bytes());
        assert_eq!(out, vec![reply(BAD_FORMAT)]);
    }

    #[test]
    fn http_request_lines_hang_up() {
        // memcached 1.6: an unknown command ending in an `HTTP/` token closes the connection;
        // a known command with the same tail, or a one-letter command, is an ordinary error.
        for line in [
            "GET / HTTP/1.1\r\n",
            "POST /x HTTP/1.0\r\n",
            "DELETE / HTTP/1.1\r\n",
            "FOO HTTP/2\r\n",
        ] {
            let (out, err) = decode_all(line.as_bytes());
            assert_eq!(err, Some(McError::HttpRequest), "{line}");
            assert!(out.is_empty(), "{line}");
        }
        let (out, err) = decode_all(b"get foo\r\nPOST / HTTP/1.0\r\nset a 0 0 1\r\nb\r\n");
        assert_eq!(err, Some(McError::HttpRequest));
        assert_eq!(out.len(), 1, "the get before it is served, nothing after");
        for line in ["x HTTP/1.1\r\n", "Host: x\r\n", "set / HTTP/1.1\r\n"] {
            let (out, err) = decode_all(line.as_bytes());
            assert_eq!(err, None, "{line}");
            assert_eq!(out, vec![reply("ERROR")], "{line}");
        }
    }

    #[test]
    fn meta_commands() {
        let (out, err) = decode_all(b"mg Zm9v b v k\r\nms foo 2 T10 F3\r\nhi\r\nmn\r\n");
        assert_eq!(err, None);
        match &out[0] {
            Decoded::Command(Command::MetaGet { key, flags }) => {
                assert_eq!(key, "foo");
                assert!(flags.base64 && flags.value);
            }
            other => panic!("{other:?}"),
        }
        match &out[1] {
            Decoded::Command(Command::MetaSet { key, data, flags }) => {
                assert_eq!((key.as_ref(), data.as_ref()), (&b"foo"[..], &b"hi"[..]));
                assert_eq!((flags.ttl, flags.client_flags), (Some(10), Some(3)));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(out[2], Decoded::Command(Command::MetaNoop));
    }
}
