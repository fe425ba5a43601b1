//! Reply values and their wire encoding. [`Frame`] is the in-memory form of any RESP2/RESP3
//! reply; [`encode`] appends one to an output buffer for the connection's [`ProtocolVersion`],
//! downgrading RESP3-only types exactly as Redis does for RESP2 clients. The `encode_*` helpers
//! write the hottest replies (and aggregate headers for streaming large replies) without building
//! a `Frame`. Pure: depends only on `bytes`, `itoa` and `ryu`; knows nothing of sockets, commands
//! or the keyspace.

use bytes::{BufMut, Bytes, BytesMut};

use crate::num::{format_human, write_double, NumBuf};

/// The protocol a connection speaks (`HELLO 2` / `HELLO 3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProtocolVersion {
    /// RESP2, the default for new connections.
    #[default]
    Resp2,
    /// RESP3.
    Resp3,
}

/// One reply value.
#[derive(Debug, Clone)]
pub enum Frame {
    /// Status reply `+text`. Any `\r`/`\n` inside is sent as a space.
    Simple(Bytes),
    /// Error reply `-text`; the text includes its prefix word, e.g. `"ERR syntax error"` or
    /// `"WRONGTYPE Operation against a key holding the wrong kind of value"`. Any `\r`/`\n`
    /// inside is sent as a space (as Redis does).
    Error(String),
    /// `:n`.
    Integer(i64),
    /// Binary-safe bulk string `$len`.
    Bulk(Bytes),
    /// Null bulk: RESP3 `_`, RESP2 `$-1`.
    Null,
    /// Null array: RESP3 `_`, RESP2 `*-1`.
    NullArray,
    /// `*n` array.
    Array(Vec<Frame>),
    /// `*n` array (or, made with [`BulkArray::into_set`], RESP3 `~n` set; with
    /// [`BulkArray::into_map`], RESP3 `%n` map of its elements taken in pairs) of bulk strings
    /// kept in wire form: a long LRANGE, SMEMBERS or HGETALL reply built as one buffer instead
    /// of one allocation per element. Equal to the [`Frame::Array`] (or [`Frame::Set`], or
    /// [`Frame::Map`]) of the same [`Frame::Bulk`]s.
    Bulks(BulkArray),
    /// RESP3 `%n` map of key/value pairs; RESP2: flat array of 2n.
    Map(Vec<(Frame, Frame)>),
    /// RESP3 `~n` set; RESP2: array.
    Set(Vec<Frame>),
    /// RESP3 `,` double; RESP2: bulk string. Text as [`format_double`].
    Double(f64),
    /// A double written the "human" way of Redis' long doubles (`%.17Lf`, trailing zeros cut:
    /// GEOPOS's coordinates): RESP3 `,`; RESP2: bulk string. Text as [`format_fixed17`].
    HumanDouble(f64),
    /// RESP3 `#t`/`#f`; RESP2: `:1`/`:0`.
    Boolean(bool),
    /// RESP3 `=` verbatim string with a 3-byte format such as `txt` or `mkd`; RESP2: bulk of
    /// `text` alone.
    Verbatim {
        /// The format tag, e.g. `*b"txt"`.
        format: [u8; 3],
        /// The text, without the `fmt:` prefix.
        text: Bytes,
    },
    /// RESP3 `(` big number (decimal digits, optional leading `-`); RESP2: bulk string.
    BigNumber(String),
    /// RESP3 `>n` out-of-band push (pub/sub messages, invalidations); RESP2: array.
    Push(Vec<Frame>),
}

impl Frame {
    /// `+OK`.
    pub fn ok() -> Frame {
        Frame::Simple(Bytes::from_static(b"OK"))
    }

    /// A status reply, e.g. `Frame::simple("PONG")` (no allocation for `&'static str`).
    pub fn simple(s: impl Into<Bytes>) -> Frame {
        Frame::Simple(s.into())
    }

    /// An error reply; `msg` must include the prefix word (`"ERR ..."`, `"WRONGTYPE ..."`).
    pub fn error(msg: impl Into<String>) -> Frame {
        Frame::Error(msg.into())
    }

    /// A bulk string from anything convertible to `Bytes` (`Vec<u8>`, `&'static [u8]`, ...).
    pub fn bulk(b: impl Into<Bytes>) -> Frame {
        Frame::Bulk(b.into())
    }

    /// A bulk string copied from a borrowed `str`.
    pub fn bulk_from_str(s: &str) -> Frame {
        Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()))
    }

    /// A bulk string copied from a borrowed byte slice.
    pub fn bulk_from_slice(s: &[u8]) -> Frame {
        Frame::Bulk(Bytes::copy_from_slice(s))
    }

    /// `:n`.
    pub fn integer(n: i64) -> Frame {
        Frame::Integer(n)
    }

    /// An array.
    pub fn array(items: Vec<Frame>) -> Frame {
        Frame::Array(items)
    }

    /// True for [`Frame::Error`].
    pub fn is_error(&self) -> bool {
        matches!(self, Frame::Error(_))
    }

    /// Encodes this frame into a fresh buffer (convenience for tests; the server should reuse
    /// its output buffer with [`encode`]).
    pub fn to_bytes(&self, version: ProtocolVersion) -> Bytes {
        let mut out = BytesMut::new();
        encode(self, version, &mut out);
        out.freeze()
    }
}

/// Appends `frame` encoded for `version` to `out`. RESP2 downgrades like Redis: Map → flat array
/// of 2n, Set → array, Double → bulk string, Boolean → `:1`/`:0`, Verbatim → bulk of the text,
/// BigNumber → bulk, Push → array, Null → `$-1`, NullArray → `*-1`. Never fails; `\r`/`\n` in
/// Simple/Error/BigNumber text are written as spaces so the output is always valid RESP.
pub fn encode(frame: &Frame, version: ProtocolVersion, out: &mut BytesMut) {
    match frame {
        Frame::Simple(s) => encode_simple(s, out),
        Frame::Error(e) => encode_error(e, out),
        Frame::Integer(n) => encode_integer(*n, out),
        Frame::Bulk(b) => encode_bulk(b, out),
        Frame::Null => encode_null(version, out),
        Frame::NullArray => encode_null_array(version, out),
        Frame::Array(items) => {
            encode_array_header(items.len(), out);
            for item in items {
                encode(item, version, out);
            }
        }
        Frame::Bulks(bulks) => {
            out.reserve(bulks.wire.len() + 24);
            match bulks.shape {
                Shape::Array => encode_array_header(bulks.count, out),
                Shape::Set => encode_set_header(bulks.count, version, out),
                Shape::Map => encode_map_header(bulks.count / 2, version, out),
            }
            out.put_slice(&bulks.wire);
        }
        Frame::Map(pairs) => {
            encode_map_header(pairs.len(), version, out);
            for (k, v) in pairs {
                encode(k, version, out);
                encode(v, version, out);
            }
        }
        Frame::Set(items) => {
            encode_set_header(items.len(), version, out);
            for item in items {
                encode(item, version, out);
            }
        }
        Frame::Push(items) => {
            encode_push_header(items.len(), version, out);
            for item in items {
                encode(item, version, out);
            }
        }
        Frame::Double(v) => encode_double(*v, version, out),
        Frame::HumanDouble(v) => {
            let text = format_fixed17(*v);
            match version {
                ProtocolVersion::Resp2 => encode_bulk(text.as_bytes(), out),
                ProtocolVersion::Resp3 => {
                    out.reserve(text.len() + 3);
                    out.put_u8(b',');
                    out.put_slice(text.as_bytes());
                    out.put_slice(b"\r\n");
                }
            }
        }
        Frame::Boolean(b) => encode_bool(*b, version, out),
        Frame::Verbatim { format, text } => encode_verbatim(format, text, version, out),
        Frame::BigNumber(digits) => encode_big_number(digits, version, out),
    }
}

/// An array of bulk strings in wire form (`$len\r\n{data}\r\n` each; the same bytes in RESP2
/// and RESP3), built by [`BulkArray::push`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BulkArray {
    count: usize,
    wire: Vec<u8>,
    /// What RESP3 sends it as; RESP2 has only arrays.
    shape: Shape,
}

/// The aggregate a [`BulkArray`] is sent as in RESP3.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Shape {
    #[default]
    Array,
    Set,
    Map,
}

impl BulkArray {
    /// An empty array with room for `count` elements of `bytes` data bytes in all.
    pub fn with_capacity(count: usize, bytes: usize) -> Self {
        BulkArray {
            count: 0,
            wire: Vec::with_capacity(bytes + count * 8),
            shape: Shape::Array,
        }
    }

    /// The same elements as a set reply (RESP3 `~`, an array in RESP2): SMEMBERS and the set
    /// algebra.
    pub fn into_set(mut self) -> Self {
        self.shape = Shape::Set;
        self
    }

    /// The elements taken in pairs as a map reply (RESP3 `%`, a flat array in RESP2): HGETALL.
    /// The caller pushes an even number of elements, key then value.
    pub fn into_map(mut self) -> Self {
        self.shape = Shape::Map;
        self
    }

    /// Whether RESP3 sends it as a set ([`BulkArray::into_set`]).
    pub fn is_set(&self) -> bool {
        self.shape == Shape::Set
    }

    /// Whether RESP3 sends it as a map of its elements in pairs ([`BulkArray::into_map`]).
    pub fn is_map(&self) -> bool {
        self.shape == Shape::Map
    }

    /// Appends one bulk string.
    #[inline]
    pub fn push(&mut self, data: &[u8]) {
        let header = HeaderLine::new(b'$', data.len());
        self.wire.reserve(header.len + data.len() + 2);
        self.wire.extend_from_slice(header.as_bytes());
        self.wire.extend_from_slice(data);
        self.wire.extend_from_slice(b"\r\n");
        self.count += 1;
    }

    /// How many elements.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The elements in order.
    pub fn iter(&self) -> BulkArrayIter<'_> {
        BulkArrayIter { rest: &self.wire }
    }
}

impl<'a> FromIterator<&'a [u8]> for BulkArray {
    fn from_iter<I: IntoIterator<Item = &'a [u8]>>(items: I) -> Self {
        let items = items.into_iter();
        let mut out = BulkArray::with_capacity(items.size_hint().0, 0);
        for item in items {
            out.push(item);
        }
        out
    }
}

/// The elements of a [`BulkArray`], read back from the wire form it wrote itself.
#[derive(Debug, Clone)]
pub struct BulkArrayIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for BulkArrayIter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        // `$` digits CRLF data CRLF, as `push` wrote it.
        let digits_end = self.rest.iter().position(|&b| b == b'\r')?;
        let len = self
            .rest
            .get(1..digits_end)?
            .iter()
            .fold(0usize, |n, d| n * 10 + usize::from(d - b'0'));
        let start = digits_end + 2;
        let data = self.rest.get(start..start + len)?;
        self.rest = self.rest.get(start + len + 2..).unwrap_or(&[]);
        Some(data)
    }
}

/// Whether `frames` (`len` of them) are the bulks of `b`, in order.
fn same_bulks<'f>(frames: impl Iterator<Item = &'f Frame>, len: usize, b: &BulkArray) -> bool {
    len == b.len()
        && frames
            .zip(b.iter())
            .all(|(x, y)| matches!(x, Frame::Bulk(x) if x[..] == *y))
}

impl PartialEq for Frame {
    fn eq(&self, other: &Self) -> bool {
        use Frame::*;
        match (self, other) {
            (Simple(a), Simple(b)) => a == b,
            (Error(a), Error(b)) => a == b,
            (Integer(a), Integer(b)) => a == b,
            (Bulk(a), Bulk(b)) => a == b,
            (Null, Null) | (NullArray, NullArray) => true,
            (Array(a), Array(b)) | (Set(a), Set(b)) | (Push(a), Push(b)) => a == b,
            (Bulks(a), Bulks(b)) => a == b,
            (Array(a), Bulks(b)) | (Bulks(b), Array(a)) if b.shape == Shape::Array => {
                same_bulks(a.iter(), a.len(), b)
            }
            (Set(a), Bulks(b)) | (Bulks(b), Set(a)) if b.shape == Shape::Set => {
                same_bulks(a.iter(), a.len(), b)
            }
            (Map(a), Bulks(b)) | (Bulks(b), Map(a)) if b.shape == Shape::Map => same_bulks(
                a.iter().flat_map(|(k, v)| [k, v]),
                a.len().saturating_mul(2),
                b,
            ),
            (Map(a), Map(b)) => a == b,
            (Double(a), Double(b)) | (HumanDouble(a), HumanDouble(b)) => a == b,
            (Boolean(a), Boolean(b)) => a == b,
            (
                Verbatim {
                    format: f1,
                    text: t1,
                },
                Verbatim {
                    format: f2,
                    text: t2,
                },
            ) => f1 == f2 && t1 == t2,
            (BigNumber(a), BigNumber(b)) => a == b,
            _ => false,
        }
    }
}

/// A RESP header or integer line (`prefix`, decimal number, CRLF) assembled on the stack so it
/// is appended with a single copy. At most 1 + 20 + 2 bytes.
struct HeaderLine {
    buf: [u8; 24],
    len: usize,
}

impl HeaderLine {
    #[inline]
    fn new(prefix: u8, n: impl itoa::Integer) -> Self {
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(n).as_bytes();
        let mut buf = [0u8; 24];
        buf[0] = prefix;
        let end = 1 + digits.len();
        if let Some(dst) = buf.get_mut(1..end) {
            dst.copy_from_slice(digits);
        }
        if let Some(dst) = buf.get_mut(end..end + 2) {
            dst.copy_from_slice(b"\r\n");
        }
        HeaderLine { buf, len: end + 2 }
    }

    #[inline]
    fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }
}

/// Writes `prefix`, the decimal `n` and CRLF: a RESP header or integer line.
#[inline]
fn put_header(prefix: u8, n: i64, out: &mut BytesMut) {
    out.put_slice(HeaderLine::new(prefix, n).as_bytes());
}

/// Header with a `usize` length (saturates at `i64::MAX`, unreachable for real buffers).
#[inline]
fn put_len_header(prefix: u8, len: usize, out: &mut BytesMut) {
    put_header(prefix, i64::try_from(len).unwrap_or(i64::MAX), out);
}

/// Writes `prefix`, `text` with `\r`/`\n` mapped to spaces, and CRLF.
#[inline]
fn put_line(prefix: u8, text: &[u8], out: &mut BytesMut) {
    out.reserve(text.len() + 3);
    out.put_u8(prefix);
    if text.iter().any(|&b| b == b'\r' || b == b'\n') {
        out.extend(
            text.iter()
                .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
    } else {
        out.put_slice(text);
    }
    out.put_slice(b"\r\n");
}

/// `+OK\r\n`.
#[inline]
pub fn encode_ok(out: &mut BytesMut) {
    out.put_slice(b"+OK\r\n");
}

/// Status reply `+{s}\r\n` (`\r`/`\n` in `s` become spaces).
#[inline]
pub fn encode_simple(s: &[u8], out: &mut BytesMut) {
    put_line(b'+', s, out);
}

/// Error reply `-{msg}\r\n`; `msg` includes its prefix word, e.g. `"ERR unknown command"`
/// (`\r`/`\n` in `msg` become spaces).
#[inline]
pub fn encode_error(msg: &str, out: &mut BytesMut) {
    put_line(b'-', msg.as_bytes(), out);
}

/// Integer reply `:{n}\r\n`.
#[inline]
pub fn encode_integer(n: i64, out: &mut BytesMut) {
    put_header(b':', n, out);
}

/// Bulk string `${len}\r\n{data}\r\n`, with one reservation for the whole reply.
#[inline]
pub fn encode_bulk(data: &[u8], out: &mut BytesMut) {
    let header = HeaderLine::new(b'$', data.len());
    let header = header.as_bytes();
    out.reserve(header.len() + data.len() + 2);
    out.put_slice(header);
    out.put_slice(data);
    out.put_slice(b"\r\n");
}

/// Null bulk: `_\r\n` (RESP3) or `$-1\r\n` (RESP2).
#[inline]
pub fn encode_null(version: ProtocolVersion, out: &mut BytesMut) {
    out.put_slice(match version {
        ProtocolVersion::Resp2 => b"$-1\r\n",
        ProtocolVersion::Resp3 => b"_\r\n",
    });
}

/// Null array: `_\r\n` (RESP3) or `*-1\r\n` (RESP2).
#[inline]
pub fn encode_null_array(version: ProtocolVersion, out: &mut BytesMut) {
    out.put_slice(match version {
        ProtocolVersion::Resp2 => b"*-1\r\n",
        ProtocolVersion::Resp3 => b"_\r\n",
    });
}

/// Array header `*{len}\r\n`; the caller then encodes exactly `len` elements.
#[inline]
pub fn encode_array_header(len: usize, out: &mut BytesMut) {
    put_len_header(b'*', len, out);
}

/// Map header for `pairs` key/value pairs: `%{pairs}` (RESP3) or `*{2*pairs}` (RESP2); the
/// caller then encodes `2 * pairs` elements, key then value.
#[inline]
pub fn encode_map_header(pairs: usize, version: ProtocolVersion, out: &mut BytesMut) {
    match version {
        ProtocolVersion::Resp2 => put_len_header(b'*', pairs.saturating_mul(2), out),
        ProtocolVersion::Resp3 => put_len_header(b'%', pairs, out),
    }
}

/// Set header `~{len}` (RESP3) or `*{len}` (RESP2).
#[inline]
pub fn encode_set_header(len: usize, version: ProtocolVersion, out: &mut BytesMut) {
    match version {
        ProtocolVersion::Resp2 => put_len_header(b'*', len, out),
        ProtocolVersion::Resp3 => put_len_header(b'~', len, out),
    }
}

/// Push header `>{len}` (RESP3) or `*{len}` (RESP2, e.g. pub/sub messages).
#[inline]
pub fn encode_push_header(len: usize, version: ProtocolVersion, out: &mut BytesMut) {
    match version {
        ProtocolVersion::Resp2 => put_len_header(b'*', len, out),
        ProtocolVersion::Resp3 => put_len_header(b'>', len, out),
    }
}

/// Double reply: `,{text}\r\n` (RESP3) or a bulk of the same text (RESP2), text as
/// [`format_double`]. No heap allocation.
#[inline]
pub fn encode_double(v: f64, version: ProtocolVersion, out: &mut BytesMut) {
    let mut nb = NumBuf::new();
    write_double(v, &mut nb);
    let text = nb.as_bytes();
    match version {
        ProtocolVersion::Resp2 => encode_bulk(text, out),
        ProtocolVersion::Resp3 => {
            out.reserve(text.len() + 3);
            out.put_u8(b',');
            out.put_slice(text);
            out.put_slice(b"\r\n");
        }
    }
}

/// Boolean: `#t`/`#f` (RESP3) or `:1`/`:0` (RESP2).
#[inline]
pub fn encode_bool(b: bool, version: ProtocolVersion, out: &mut BytesMut) {
    out.put_slice(match (version, b) {
        (ProtocolVersion::Resp2, true) => b":1\r\n",
        (ProtocolVersion::Resp2, false) => b":0\r\n",
        (ProtocolVersion::Resp3, true) => b"#t\r\n",
        (ProtocolVersion::Resp3, false) => b"#f\r\n",
    });
}

/// Verbatim string: `={len+4}\r\n{fmt}:{text}\r\n` (RESP3) or a bulk of `text` (RESP2).
pub fn encode_verbatim(
    format: &[u8; 3],
    text: &[u8],
    version: ProtocolVersion,
    out: &mut BytesMut,
) {
    match version {
        ProtocolVersion::Resp2 => encode_bulk(text, out),
        ProtocolVersion::Resp3 => {
            put_len_header(b'=', text.len().saturating_add(4), out);
            out.reserve(text.len() + 6);
            out.put_slice(format);
            out.put_u8(b':');
            out.put_slice(text);
            out.put_slice(b"\r\n");
        }
    }
}

/// Big number: `({digits}\r\n` (RESP3) or a bulk of `digits` (RESP2).
pub fn encode_big_number(digits: &str, version: ProtocolVersion, out: &mut BytesMut) {
    match version {
        ProtocolVersion::Resp2 => encode_bulk(digits.as_bytes(), out),
        ProtocolVersion::Resp3 => put_line(b'(', digits.as_bytes(), out),
    }
}

/// Formats a double the way Redis 7.2 replies do (`d2string`, used by ZSCORE, ZINCRBY, GEODIST,
/// RESP3 doubles, ...): `inf`/`-inf`/`nan`, `0`/`-0`; integral values up to 2^62 in magnitude as
/// integers; otherwise the shortest digits that round-trip, laid out plainly for moderate
/// exponents (`0.30000000000000004`, `123456.789`) and as `1.5e-7` / `1e+20` beyond.
/// Redis uses Grisu2, which in rare cases emits one digit more than the true shortest form
/// produced here; both parse back to the same `f64`.
pub fn format_double(v: f64) -> String {
    let mut nb = NumBuf::new();
    write_double(v, &mut nb);
    String::from_utf8_lossy(nb.as_bytes()).into_owned()
}

/// Formats a double like Redis' INCRBYFLOAT / HINCRBYFLOAT results ("human friendly" long
/// double: `%.17Lf` with trailing zeros removed): never an exponent (`1e20` →
/// `100000000000000000000`), at most 17 fractional digits, `-0` → `0`, `0.1` → `0.1`.
pub fn format_double_human(v: f64) -> String {
    format_human(v)
}

/// A double as Redis' `ld2string(LD_STR_HUMAN)` writes a long double holding it exactly: 17
/// fractional digits of its exact value, correctly rounded, then trailing zeros (and a bare
/// point) cut, as GEOPOS replies (`13.36138933897018433`).
pub fn format_fixed17(v: f64) -> String {
    if !v.is_finite() {
        return format_human(v);
    }
    let mut text = format!("{v:.17}");
    if text.contains('.') {
        let kept = text.trim_end_matches('0').trim_end_matches('.').len();
        text.truncate(kept);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProtocolVersion::{Resp2, Resp3};

    #[test]
    fn fixed17_doubles_are_written_as_redis_writes_geopos() {
        assert_eq!(format_fixed17(13.361389338970184), "13.36138933897018433");
        assert_eq!(format_fixed17(22.842654883207274), "22.842654883207274");
        assert_eq!(format_fixed17(180.0), "180");
        both(Frame::HumanDouble(0.5), "$3\r\n0.5\r\n", ",0.5\r\n");
    }

    fn enc(f: &Frame, v: ProtocolVersion) -> String {
        String::from_utf8(f.to_bytes(v).to_vec()).unwrap()
    }

    fn both(f: Frame, resp2: &str, resp3: &str) {
        assert_eq!(enc(&f, Resp2), resp2, "RESP2 {f:?}");
        assert_eq!(enc(&f, Resp3), resp3, "RESP3 {f:?}");
    }

    #[test]
    fn scalar_types_both_versions() {
        both(Frame::ok(), "+OK\r\n", "+OK\r\n");
        both(Frame::simple("PONG"), "+PONG\r\n", "+PONG\r\n");
        both(Frame::simple("a\r\nb"), "+a  b\r\n", "+a  b\r\n");
        both(
            Frame::error("ERR syntax error"),
            "-ERR syntax error\r\n",
            "-ERR syntax error\r\n",
        );
        both(
            Frame::error("ERR bad\nthing"),
            "-ERR bad thing\r\n",
            "-ERR bad thing\r\n",
        );
        both(Frame::integer(0), ":0\r\n", ":0\r\n");
        both(Frame::Integer(-42), ":-42\r\n", ":-42\r\n");
        both(
            Frame::Integer(i64::MIN),
            ":-9223372036854775808\r\n",
            ":-9223372036854775808\r\n",
        );
        both(
            Frame::bulk_from_str("hello"),
            "$5\r\nhello\r\n",
            "$5\r\nhello\r\n",
        );
        both(Frame::bulk(&b""[..]), "$0\r\n\r\n", "$0\r\n\r\n");
        both(
            Frame::bulk_from_slice(b"a\r\nb"),
            "$4\r\na\r\nb\r\n",
            "$4\r\na\r\nb\r\n",
        );
        both(Frame::Null, "$-1\r\n", "_\r\n");
        both(Frame::NullArray, "*-1\r\n", "_\r\n");
        both(Frame::Double(1.5), "$3\r\n1.5\r\n", ",1.5\r\n");
        both(Frame::Double(3.0), "$1\r\n3\r\n", ",3\r\n");
        both(Frame::Double(f64::INFINITY), "$3\r\ninf\r\n", ",inf\r\n");
        both(
            Frame::Double(f64::NEG_INFINITY),
            "$4\r\n-inf\r\n",
            ",-inf\r\n",
        );
        both(Frame::Double(f64::NAN), "$3\r\nnan\r\n", ",nan\r\n");
        both(Frame::Boolean(true), ":1\r\n", "#t\r\n");
        both(Frame::Boolean(false), ":0\r\n", "#f\r\n");
        both(
            Frame::Verbatim {
                format: *b"txt",
                text: Bytes::from_static(b"Some string"),
            },
            "$11\r\nSome string\r\n",
            "=15\r\ntxt:Some string\r\n",
        );
        both(
            Frame::BigNumber("3492890328409238509324850943850943825024385".into()),
            "$43\r\n3492890328409238509324850943850943825024385\r\n",
            "(3492890328409238509324850943850943825024385\r\n",
        );
    }

    #[test]
    fn aggregate_types_both_versions() {
        both(Frame::array(vec![]), "*0\r\n", "*0\r\n");
        both(
            Frame::array(vec![
                Frame::integer(1),
                Frame::bulk_from_str("a"),
                Frame::Null,
            ]),
            "*3\r\n:1\r\n$1\r\na\r\n$-1\r\n",
            "*3\r\n:1\r\n$1\r\na\r\n_\r\n",
        );
        both(
            Frame::Map(vec![
                (Frame::simple("first"), Frame::Integer(1)),
                (Frame::bulk_from_str("second"), Frame::Double(2.5)),
            ]),
            "*4\r\n+first\r\n:1\r\n$6\r\nsecond\r\n$3\r\n2.5\r\n",
            "%2\r\n+first\r\n:1\r\n$6\r\nsecond\r\n,2.5\r\n",
        );
        both(
            Frame::Set(vec![Frame::bulk_from_str("x"), Frame::Boolean(true)]),
            "*2\r\n$1\r\nx\r\n:1\r\n",
            "~2\r\n$1\r\nx\r\n#t\r\n",
        );
        both(
            Frame::Push(vec![
                Frame::bulk_from_str("message"),
                Frame::bulk_from_str("ch"),
                Frame::bulk_from_str("hi"),
            ]),
            "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n",
            ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n",
        );
        both(
            Frame::array(vec![
                Frame::array(vec![Frame::NullArray]),
                Frame::Map(vec![]),
            ]),
            "*2\r\n*1\r\n*-1\r\n*0\r\n",
            "*2\r\n*1\r\n_\r\n%0\r\n",
        );
    }

    #[test]
    fn fast_helpers_match_encode() {
        for v in [Resp2, Resp3] {
            let mut a = BytesMut::new();
            encode_ok(&mut a);
            encode_simple(b"PONG", &mut a);
            encode_error("ERR x", &mut a);
            encode_integer(7, &mut a);
            encode_bulk(b"v", &mut a);
            encode_null(v, &mut a);
            encode_null_array(v, &mut a);
            encode_double(0.25, v, &mut a);
            encode_bool(true, v, &mut a);
            encode_verbatim(b"mkd", b"# hi", v, &mut a);
            encode_big_number("-12", v, &mut a);
            encode_array_header(1, &mut a);
            encode_integer(1, &mut a);
            encode_map_header(1, v, &mut a);
            encode_integer(1, &mut a);
            encode_integer(2, &mut a);
            encode_set_header(0, v, &mut a);
            encode_push_header(0, v, &mut a);
            let frames = [
                Frame::ok(),
                Frame::simple("PONG"),
                Frame::error("ERR x"),
                Frame::Integer(7),
                Frame::bulk(&b"v"[..]),
                Frame::Null,
                Frame::NullArray,
                Frame::Double(0.25),
                Frame::Boolean(true),
                Frame::Verbatim {
                    format: *b"mkd",
                    text: Bytes::from_static(b"# hi"),
                },
                Frame::BigNumber("-12".into()),
                Frame::array(vec![Frame::Integer(1)]),
                Frame::Map(vec![(Frame::Integer(1), Frame::Integer(2))]),
                Frame::Set(vec![]),
                Frame::Push(vec![]),
            ];
            let mut b = BytesMut::new();
            for f in &frames {
                encode(f, v, &mut b);
            }
            assert_eq!(a, b);
        }
    }

    #[test]
    fn double_text() {
        assert_eq!(format_double(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(format_double(1e20), "1e+20");
        assert_eq!(format_double(-2.0), "-2");
        assert_eq!(format_double_human(1e20), "100000000000000000000");
        assert_eq!(format_double_human(10.5), "10.5");
    }

    #[test]
    fn a_bulk_array_is_written_and_read_back_as_the_array_of_its_bulks() {
        let items: Vec<&[u8]> = vec![b"a", b"", b"with\r\ncrlf", &[0u8, 255, 13], &[b'x'; 300]];
        let bulks: BulkArray = items.iter().copied().collect();
        assert_eq!(bulks.len(), 5);
        assert_eq!(bulks.iter().collect::<Vec<_>>(), items);
        let array = Frame::Array(items.iter().map(|i| Frame::bulk_from_slice(i)).collect());
        for version in [Resp2, Resp3] {
            assert_eq!(
                Frame::Bulks(bulks.clone()).to_bytes(version),
                array.to_bytes(version)
            );
        }
        assert_eq!(Frame::Bulks(bulks.clone()), array);
        assert_eq!(array, Frame::Bulks(bulks.clone()));
        let mut other = bulks.clone();
        other.push(b"more");
        assert_ne!(Frame::Bulks(other), array);
        let empty = BulkArray::default();
        assert!(empty.is_empty());
        assert_eq!(Frame::Bulks(empty).to_bytes(Resp3), &b"*0\r\n"[..]);
        assert_ne!(
            Frame::Bulks(bulks.clone()),
            Frame::Array(items.iter().map(|_| Frame::Integer(1)).collect())
        );
        // As a set: `~` in RESP3, equal to the Set and not to the Array of the same bulks.
        let set = Frame::Set(items.iter().map(|i| Frame::bulk_from_slice(i)).collect());
        let as_set = Frame::Bulks(bulks.into_set());
        for version in [Resp2, Resp3] {
            assert_eq!(as_set.to_bytes(version), set.to_bytes(version));
        }
        assert_eq!(as_set, set);
        assert_eq!(set, as_set);
        assert_ne!(as_set, array);
        assert_ne!(array, as_set);
        // As a map: `%` of the pairs in RESP3, the flat array in RESP2.
        let kv: BulkArray = items[..4].iter().copied().collect();
        let map = Frame::Map(vec![
            (
                Frame::bulk_from_slice(items[0]),
                Frame::bulk_from_slice(items[1]),
            ),
            (
                Frame::bulk_from_slice(items[2]),
                Frame::bulk_from_slice(items[3]),
            ),
        ]);
        let as_map = Frame::Bulks(kv.clone().into_map());
        for version in [Resp2, Resp3] {
            assert_eq!(as_map.to_bytes(version), map.to_bytes(version));
        }
        assert_eq!(as_map.to_bytes(Resp3)[..4], b"%2\r\n"[..]);
        assert_eq!(as_map, map);
        assert_eq!(map, as_map);
        assert_ne!(Frame::Bulks(kv), map);
    }
}
