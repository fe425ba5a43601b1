//! Redis' DUMP/RESTORE serialization: one value as an "RDB object" (type byte, object body) followed
//! by a footer of the RDB version (2 bytes, little-endian) and a CRC-64 (Jones polynomial, as Redis'
//! `crc64.c`; 8 bytes, little-endian) over everything before the CRC. This module owns that format
//! and every encoding a payload may contain: RDB lengths, integer-encoded and LZF-compressed strings,
//! listpacks, ziplists, intsets, zipmaps and quicklists. [`dump`] writes the encodings Redis 7.0
//! writes for the value (so a real Redis 7.0 or later accepts the payload with RESTORE); [`restore`]
//! reads every string, list, set, sorted-set, hash and stream encoding that Redis 7.0/7.2 emits or
//! still loads (RDB versions up to 11; streams as types 15, 19 and 21, in the `stream` submodule).
//! Module values are refused. LZF compression is Redis' own (liblzf as Redis builds it), so
//! payloads are byte-for-byte Redis 7.0's. [`dump_functions`] and
//! [`restore_functions`] do the same for FUNCTION DUMP/RESTORE payloads (libraries' code). It is a pure codec: no I/O,
//! no store types, no reply texts (the caller says "DUMP payload version or checksum are wrong" for
//! [`RdbError::is_footer`] errors and "Bad data format" for the rest, as Redis does). It may import
//! only `bytes`, std, the crates already in this crate's `Cargo.toml`, and `crc`.
//!
//! Hostile payloads: every length is checked against the bytes actually present before anything
//! is read or allocated, counts never size an allocation beyond the input that must back them,
//! and the decoded value (element bytes plus a per-element overhead, decompressed LZF data) is held
//! to a byte limit, by default [`default_restore_limit`] of the payload size. Every loop consumes
//! input, so decoding ends; nothing panics on input bytes.

use std::borrow::Cow;
use std::collections::HashSet;

use bytes::{BufMut, Bytes, BytesMut};

mod stream;

pub use stream::{
    stream_entry_lp_bytes, stream_master_entry_lp_bytes, stream_node_lp_bytes, RdbConsumer,
    RdbPending, RdbStream, RdbStreamEntry, RdbStreamGroup, RdbStreamNode, StreamId,
};

/// The RDB version [`dump`] writes in the footer: Redis 7.0's, so 7.0 and every later Redis loads it.
pub const DUMP_RDB_VERSION: u16 = 10;
/// The newest RDB version [`restore`] accepts: Redis 7.2's.
pub const MAX_RDB_VERSION: u16 = 11;

/// Redis' CRC-64 ("Jones" coefficients, reflected, initial value 0).
const CRC64: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_REDIS);

const FOOTER_LEN: usize = 10;

// RDB object types (rdb.h).
const TYPE_STRING: u8 = 0;
const TYPE_LIST: u8 = 1;
const TYPE_SET: u8 = 2;
const TYPE_ZSET: u8 = 3;
const TYPE_HASH: u8 = 4;
const TYPE_ZSET_2: u8 = 5;
const TYPE_HASH_ZIPMAP: u8 = 9;
const TYPE_LIST_ZIPLIST: u8 = 10;
const TYPE_SET_INTSET: u8 = 11;
const TYPE_ZSET_ZIPLIST: u8 = 12;
const TYPE_HASH_ZIPLIST: u8 = 13;
const TYPE_LIST_QUICKLIST: u8 = 14;
const TYPE_HASH_LISTPACK: u8 = 16;
const TYPE_ZSET_LISTPACK: u8 = 17;
const TYPE_LIST_QUICKLIST_2: u8 = 18;
const TYPE_SET_LISTPACK: u8 = 20;

// Quicklist node containers (quicklist.h).
const QUICKLIST_PLAIN: u64 = 1;
const QUICKLIST_PACKED: u64 = 2;

// Redis' default thresholds for the compact encodings (redis.conf of 7.0).
const HASH_MAX_LISTPACK_ENTRIES: usize = 512;
const HASH_MAX_LISTPACK_VALUE: usize = 64;
const ZSET_MAX_LISTPACK_ENTRIES: usize = 128;
const ZSET_MAX_LISTPACK_VALUE: usize = 64;
const SET_MAX_INTSET_ENTRIES: usize = 512;
/// `list-max-listpack-size -2`: a quicklist node's listpack stays within 8 KiB.
const LIST_NODE_MAX_BYTES: usize = 8192;
/// Elements this large get a plain quicklist node of their own, as in Redis.
const LIST_PLAIN_THRESHOLD: usize = 1 << 30;

/// Bytes charged against the restore limit for each decoded element, on top of its length: the
/// `Bytes` handle and the bookkeeping (vector slot, duplicate check) around it.
const ELEMENT_COST: u64 = 32;
/// Default restore limit per payload byte. LZF's densest back reference turns 3 bytes into 264
/// (88:1), so every value Redis itself emits decodes within 100× its payload.
pub const RESTORE_EXPANSION_FACTOR: usize = 100;
/// Default restore limit floor, so small payloads of highly compressible strings always decode.
pub const RESTORE_MIN_LIMIT: usize = 1 << 20;

/// One Redis value as DUMP carries it. Sets, sorted sets and hashes hold distinct members/fields;
/// no collection is empty; no score is NaN (Redis refuses such payloads, and [`dump`] refuses such
/// values). A stream may be empty (no entries, no groups).
#[derive(Debug, Clone, PartialEq)]
pub enum RdbValue {
    Str(Bytes),
    List(Vec<Bytes>),
    Set(Vec<Bytes>),
    ZSet(Vec<(Bytes, f64)>),
    Hash(Vec<(Bytes, Bytes)>),
    Stream(Box<RdbStream>),
}

/// Why a payload could not be decoded (or a value encoded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RdbError {
    /// Fewer bytes than the 10-byte footer.
    #[error("payload shorter than its footer")]
    TooShort,
    /// The footer names an RDB version newer than [`MAX_RDB_VERSION`].
    #[error("RDB version {0} is newer than {MAX_RDB_VERSION}")]
    Version(u16),
    /// The CRC-64 in the footer does not match the payload.
    #[error("CRC-64 mismatch")]
    Checksum,
    /// The object ends before its encoded lengths say it does.
    #[error("payload ends inside the value")]
    Truncated,
    /// Bytes left over between the object and the footer.
    #[error("{0} bytes after the value")]
    TrailingBytes(usize),
    /// A type this codec does not decode: module values, hashes with field expiry, or no RDB
    /// object type at all.
    #[error("unsupported RDB object type {0}")]
    UnsupportedType(u8),
    /// An encoding violates its format (bad header, length, back-length, order, ...).
    #[error("corrupt payload: {0}")]
    Corrupt(&'static str),
    /// A collection with no elements (Redis refuses to create an empty key).
    #[error("empty collection")]
    Empty,
    /// The same set member, sorted-set member or hash field twice.
    #[error("duplicate member or field")]
    Duplicate,
    /// A sorted-set score that is NaN.
    #[error("NaN score")]
    NanScore,
    /// The decoded value would exceed the restore limit (in bytes).
    #[error("decoded value exceeds the limit of {0} bytes")]
    TooLarge(usize),
    /// A FUNCTION RESTORE payload in the format of Redis 7.0's release candidates.
    #[error("pre-GA function format")]
    PreGaFunctions,
    /// A FUNCTION RESTORE payload holds something other than function libraries.
    #[error("not a function library")]
    NotAFunction,
}

impl RdbError {
    /// True for the errors Redis reports as "DUMP payload version or checksum are wrong"; Redis
    /// reports every other one as "Bad data format".
    pub fn is_footer(&self) -> bool {
        matches!(
            self,
            RdbError::TooShort | RdbError::Version(_) | RdbError::Checksum
        )
    }
}

type Result<T> = std::result::Result<T, RdbError>;

/// The restore limit [`restore`] applies to a payload of `payload_len` bytes.
pub fn default_restore_limit(payload_len: usize) -> usize {
    payload_len
        .saturating_mul(RESTORE_EXPANSION_FACTOR)
        .saturating_add(RESTORE_MIN_LIMIT)
}

/// The CRC-64 Redis puts in DUMP payloads and RDB files, over `data`.
pub fn crc64(data: &[u8]) -> u64 {
    CRC64.checksum(data)
}

// ---------------------------------------------------------------------------------------------
// dump

/// The DUMP payload of `value`: type byte, object, RDB version [`DUMP_RDB_VERSION`] and CRC-64.
///
/// Encodings, as Redis 7.0 with its default thresholds: strings as type 0 (integers of 32 bits as
/// integer encodings, strings over 20 bytes LZF-compressed when that saves 4 bytes or more); lists
/// as a quicklist (type 18) of listpack nodes of at most 8 KiB; sets of at most 512 integers as an
/// intset (11), other sets as type 2; sorted sets of at most 128 members of at most 64 bytes as a
/// listpack (17), others as type 5 (binary scores); hashes of at most 512 fields with fields and
/// values of at most 64 bytes as a listpack (16), others as type 4; streams as type 19 (Redis 7.0's
/// `RDB_TYPE_STREAM_LISTPACKS_2`), one listpack per node as Redis lays it out.
///
/// Fails with [`RdbError::Empty`], [`RdbError::Duplicate`] or [`RdbError::NanScore`] for values
/// Redis cannot hold, and [`RdbError::Corrupt`] for a stream whose consumers' pending IDs do not
/// match their group's pending list one to one.
pub fn dump(value: &RdbValue) -> Result<Bytes> {
    let mut out = BytesMut::new();
    match value {
        RdbValue::Str(s) => {
            out.put_u8(TYPE_STRING);
            put_string(&mut out, s);
        }
        RdbValue::List(items) => {
            if items.is_empty() {
                return Err(RdbError::Empty);
            }
            out.put_u8(TYPE_LIST_QUICKLIST_2);
            put_quicklist(&mut out, items);
        }
        RdbValue::Set(members) => {
            check_distinct(members.iter().map(|m| &m[..]), members.len())?;
            put_set(&mut out, members);
        }
        RdbValue::ZSet(pairs) => {
            check_distinct(pairs.iter().map(|(m, _)| &m[..]), pairs.len())?;
            if pairs.iter().any(|(_, s)| s.is_nan()) {
                return Err(RdbError::NanScore);
            }
            put_zset(&mut out, pairs);
        }
        RdbValue::Hash(pairs) => {
            check_distinct(pairs.iter().map(|(f, _)| &f[..]), pairs.len())?;
            put_hash(&mut out, pairs);
        }
        RdbValue::Stream(s) => stream::put_stream(&mut out, s)?,
    }
    out.put_u16_le(DUMP_RDB_VERSION);
    let crc = crc64(&out);
    out.put_u64_le(crc);
    Ok(out.freeze())
}

/// A whole RDB file (what `redis-cli --rdb` saves, what redis-server loads at start), written
/// in pieces: the `REDIS0010` header and `redis-ver`/`redis-bits`/`ctime` aux fields, then for
/// each database a SELECTDB, each key with its expiry (milliseconds) and its object as [`dump`]
/// encodes it, and the EOF opcode with the CRC-64 of the whole file. [`RdbFile::take`] hands out
/// what has been written so far, so a caller can stream a file of any size; the checksum runs
/// across the pieces.
pub struct RdbFile {
    out: BytesMut,
    crc: crc::Digest<'static, u64>,
    db: Option<u64>,
}

// RDB opcodes (rdb.h).
const OPCODE_AUX: u8 = 250;
const OPCODE_EXPIRETIME_MS: u8 = 252;
const OPCODE_SELECTDB: u8 = 254;
const OPCODE_EOF: u8 = 255;

impl RdbFile {
    /// A file whose aux fields say `redis_ver` and `ctime` (Unix seconds).
    pub fn new(redis_ver: &str, ctime: u64) -> RdbFile {
        let mut out = BytesMut::with_capacity(64 * 1024);
        out.put_slice(format!("REDIS{DUMP_RDB_VERSION:04}").as_bytes());
        for (name, value) in [
            ("redis-ver", redis_ver.to_string()),
            ("redis-bits", "64".to_string()),
            ("ctime", ctime.to_string()),
        ] {
            out.put_u8(OPCODE_AUX);
            put_string(&mut out, name.as_bytes());
            put_string(&mut out, value.as_bytes());
        }
        RdbFile {
            out,
            crc: CRC64.digest(),
            db: None,
        }
    }

    /// Append `key` of database `db` with `value` and, when it has one, its expiry (Unix ms).
    /// Fails, writing nothing, for a value [`dump`] refuses.
    pub fn key(
        &mut self,
        db: u64,
        key: &[u8],
        expires_at_ms: Option<u64>,
        value: &RdbValue,
    ) -> Result<()> {
        let object = dump(value)?;
        if self.db != Some(db) {
            self.out.put_u8(OPCODE_SELECTDB);
            put_len(&mut self.out, db);
            self.db = Some(db);
        }
        if let Some(at) = expires_at_ms {
            self.out.put_u8(OPCODE_EXPIRETIME_MS);
            self.out.put_u64_le(at);
        }
        // The object's type byte, then its key, then its body (`dump` without its footer).
        self.out.put_u8(object[0]);
        put_string(&mut self.out, key);
        self.out.put_slice(&object[1..object.len() - FOOTER_LEN]);
        Ok(())
    }

    /// Bytes written since the last call.
    pub fn len(&self) -> usize {
        self.out.len()
    }

    /// Whether nothing was written since the last [`RdbFile::take`].
    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// What was written since the last call (counted into the checksum).
    pub fn take(&mut self) -> Bytes {
        let piece = self.out.split().freeze();
        self.crc.update(&piece);
        piece
    }

    /// The rest of the file: what was not taken yet, the EOF opcode and the checksum.
    pub fn finish(mut self) -> Bytes {
        self.out.put_u8(OPCODE_EOF);
        let mut rest = self.out.split();
        self.crc.update(&rest);
        rest.put_u64_le(self.crc.finalize());
        rest.freeze()
    }
}

fn check_distinct<'a>(items: impl Iterator<Item = &'a [u8]>, len: usize) -> Result<()> {
    if len == 0 {
        return Err(RdbError::Empty);
    }
    let mut seen = HashSet::with_capacity(len);
    for item in items {
        if !seen.insert(item) {
            return Err(RdbError::Duplicate);
        }
    }
    Ok(())
}

fn put_len(out: &mut BytesMut, len: u64) {
    if len < 1 << 6 {
        out.put_u8(len as u8);
    } else if len < 1 << 14 {
        out.put_u8(0x40 | (len >> 8) as u8);
        out.put_u8(len as u8);
    } else if len <= u64::from(u32::MAX) {
        out.put_u8(0x80);
        out.put_u32(len as u32);
    } else {
        out.put_u8(0x81);
        out.put_u64(len);
    }
}

/// The value of `s` if it is the canonical decimal text of an `i64` (no sign on zero, no leading
/// zeros, no `+`): the strings Redis stores as integers.
pub(crate) fn canonical_int(s: &[u8]) -> Option<i64> {
    crate::num::parse_strict_i64(s)
}

/// An RDB string: integer encoding for 32-bit integers, LZF for compressible strings over 20
/// bytes, else length and bytes.
fn put_string(out: &mut BytesMut, s: &[u8]) {
    if s.len() <= 11 {
        if let Some(v) = canonical_int(s) {
            if let Ok(v) = i8::try_from(v) {
                out.put_u8(0xC0);
                out.put_i8(v);
                return;
            } else if let Ok(v) = i16::try_from(v) {
                out.put_u8(0xC1);
                out.put_i16_le(v);
                return;
            } else if let Ok(v) = i32::try_from(v) {
                out.put_u8(0xC2);
                out.put_i32_le(v);
                return;
            }
        }
    }
    if s.len() > 20 {
        if let Some(compressed) = lzf_compress(s, s.len() - 4) {
            out.put_u8(0xC3);
            put_len(out, compressed.len() as u64);
            put_len(out, s.len() as u64);
            out.put_slice(&compressed);
            return;
        }
    }
    put_len(out, s.len() as u64);
    out.put_slice(s);
}

fn put_quicklist(out: &mut BytesMut, items: &[Bytes]) {
    enum Node<'a> {
        Packed(Vec<u8>),
        Plain(&'a [u8]),
    }
    let mut nodes = Vec::new();
    let mut lp = ListpackWriter::new();
    for item in items {
        if item.len() >= LIST_PLAIN_THRESHOLD {
            if lp.count > 0 {
                nodes.push(Node::Packed(
                    std::mem::replace(&mut lp, ListpackWriter::new()).finish(),
                ));
            }
            nodes.push(Node::Plain(item));
            continue;
        }
        if lp.count > 0 && lp.len() + listpack_entry_size(item) > LIST_NODE_MAX_BYTES {
            nodes.push(Node::Packed(
                std::mem::replace(&mut lp, ListpackWriter::new()).finish(),
            ));
        }
        lp.push(item);
    }
    if lp.count > 0 {
        nodes.push(Node::Packed(lp.finish()));
    }
    put_len(out, nodes.len() as u64);
    for node in &nodes {
        match node {
            Node::Packed(bytes) => {
                put_len(out, QUICKLIST_PACKED);
                put_string(out, bytes);
            }
            Node::Plain(bytes) => {
                put_len(out, QUICKLIST_PLAIN);
                put_string(out, bytes);
            }
        }
    }
}

fn put_set(out: &mut BytesMut, members: &[Bytes]) {
    if members.len() <= SET_MAX_INTSET_ENTRIES {
        let ints: Option<Vec<i64>> = members.iter().map(|m| canonical_int(m)).collect();
        if let Some(mut ints) = ints {
            ints.sort_unstable();
            let width: usize = if ints.iter().all(|&v| i16::try_from(v).is_ok()) {
                2
            } else if ints.iter().all(|&v| i32::try_from(v).is_ok()) {
                4
            } else {
                8
            };
            let mut blob = Vec::with_capacity(8 + width * ints.len());
            blob.extend_from_slice(&(width as u32).to_le_bytes());
            blob.extend_from_slice(&(ints.len() as u32).to_le_bytes());
            for v in ints {
                blob.extend_from_slice(&v.to_le_bytes()[..width]);
            }
            out.put_u8(TYPE_SET_INTSET);
            put_string(out, &blob);
            return;
        }
    }
    out.put_u8(TYPE_SET);
    put_len(out, members.len() as u64);
    for m in members {
        put_string(out, m);
    }
}

fn put_zset(out: &mut BytesMut, pairs: &[(Bytes, f64)]) {
    if pairs.len() <= ZSET_MAX_LISTPACK_ENTRIES
        && pairs
            .iter()
            .all(|(m, _)| m.len() <= ZSET_MAX_LISTPACK_VALUE)
    {
        // A listpack sorted set is kept in (score, member) order; Redis loads it as is.
        // Scores compare as Redis compares them (-0.0 equals 0.0), then members bytewise.
        let mut sorted: Vec<&(Bytes, f64)> = pairs.iter().collect();
        sorted.sort_by(|a, b| {
            a.1.partial_cmp(&b.1)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| a.0.cmp(&b.0))
        });
        let mut lp = ListpackWriter::new();
        for (member, score) in sorted {
            lp.push(member);
            lp.push(score_text(*score).as_bytes());
        }
        out.put_u8(TYPE_ZSET_LISTPACK);
        put_string(out, &lp.finish());
        return;
    }
    out.put_u8(TYPE_ZSET_2);
    put_len(out, pairs.len() as u64);
    for (member, score) in pairs {
        put_string(out, member);
        out.put_f64_le(*score);
    }
}

/// A score as listpack text that `strtod` reads back exactly: integers as integers (stored as
/// listpack integers), "-0", "inf"/"-inf", else the shortest round-trip decimal.
fn score_text(score: f64) -> String {
    if score.is_infinite() {
        return if score > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    if score == 0.0 {
        return if score.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    if score.fract() == 0.0 && score.abs() < 9.0e15 {
        return itoa::Buffer::new().format(score as i64).to_string();
    }
    ryu::Buffer::new().format_finite(score).to_string()
}

fn put_hash(out: &mut BytesMut, pairs: &[(Bytes, Bytes)]) {
    if pairs.len() <= HASH_MAX_LISTPACK_ENTRIES
        && pairs
            .iter()
            .all(|(f, v)| f.len() <= HASH_MAX_LISTPACK_VALUE && v.len() <= HASH_MAX_LISTPACK_VALUE)
    {
        let mut lp = ListpackWriter::new();
        for (field, value) in pairs {
            lp.push(field);
            lp.push(value);
        }
        out.put_u8(TYPE_HASH_LISTPACK);
        put_string(out, &lp.finish());
        return;
    }
    out.put_u8(TYPE_HASH);
    put_len(out, pairs.len() as u64);
    for (field, value) in pairs {
        put_string(out, field);
        put_string(out, value);
    }
}

/// Builds a listpack: 6-byte header (total bytes, element count), entries, 0xFF.
struct ListpackWriter {
    buf: Vec<u8>,
    count: usize,
}

impl ListpackWriter {
    fn new() -> Self {
        ListpackWriter {
            buf: vec![0; 6],
            count: 0,
        }
    }

    /// Bytes so far, counting the terminator `finish` adds.
    fn len(&self) -> usize {
        self.buf.len() + 1
    }

    /// A string element: stored as an integer when it is the canonical text of one, as Redis'
    /// `lpAppend` does.
    fn push(&mut self, s: &[u8]) {
        let start = self.buf.len();
        match canonical_int(s) {
            Some(v) => listpack_put_int(&mut self.buf, v),
            None => listpack_put_str(&mut self.buf, s),
        }
        self.end_entry(start);
    }

    fn push_int(&mut self, v: i64) {
        let start = self.buf.len();
        listpack_put_int(&mut self.buf, v);
        self.end_entry(start);
    }

    fn end_entry(&mut self, start: usize) {
        let (back, n) = backlen(self.buf.len() - start);
        self.buf.extend_from_slice(&back[..n]);
        self.count += 1;
    }

    fn finish(mut self) -> Vec<u8> {
        self.buf.push(0xFF);
        let total = self.buf.len() as u32;
        let count = self.count.min(usize::from(u16::MAX)) as u16;
        self.buf[0..4].copy_from_slice(&total.to_le_bytes());
        self.buf[4..6].copy_from_slice(&count.to_le_bytes());
        self.buf
    }
}

fn listpack_put_int(buf: &mut Vec<u8>, v: i64) {
    if (0..=127).contains(&v) {
        buf.push(v as u8);
    } else if (-4096..=4095).contains(&v) {
        let u = (v as u16) & 0x1FFF;
        buf.push(0xC0 | (u >> 8) as u8);
        buf.push(u as u8);
    } else if let Ok(v) = i16::try_from(v) {
        buf.push(0xF1);
        buf.extend_from_slice(&v.to_le_bytes());
    } else if (-(1 << 23)..(1 << 23)).contains(&v) {
        buf.push(0xF2);
        buf.extend_from_slice(&v.to_le_bytes()[..3]);
    } else if let Ok(v) = i32::try_from(v) {
        buf.push(0xF3);
        buf.extend_from_slice(&v.to_le_bytes());
    } else {
        buf.push(0xF4);
        buf.extend_from_slice(&v.to_le_bytes());
    }
}

fn listpack_put_str(buf: &mut Vec<u8>, s: &[u8]) {
    let len = s.len();
    if len < 64 {
        buf.push(0x80 | len as u8);
    } else if len < 4096 {
        buf.push(0xE0 | (len >> 8) as u8);
        buf.push(len as u8);
    } else {
        buf.push(0xF0);
        buf.extend_from_slice(&(len as u32).to_le_bytes());
    }
    buf.extend_from_slice(s);
}

/// Size of `s` as a listpack entry, back-length included (the store sizes its packed lists by it).
pub fn listpack_entry_size(s: &[u8]) -> usize {
    if let Some(v) = canonical_int(s) {
        return listpack_int_size(v);
    }
    let enc = if s.len() < 64 {
        1 + s.len()
    } else if s.len() < 4096 {
        2 + s.len()
    } else {
        5 + s.len()
    };
    enc + backlen(enc).1
}

/// Size of the integer `v` as a listpack entry, back-length (one byte) included.
fn listpack_int_size(v: i64) -> usize {
    let enc = if (0..=127).contains(&v) {
        1
    } else if (-4096..=4095).contains(&v) {
        2
    } else if i16::try_from(v).is_ok() {
        3
    } else if (-(1 << 23)..(1 << 23)).contains(&v) {
        4
    } else if i32::try_from(v).is_ok() {
        5
    } else {
        9
    };
    enc + 1
}

/// A listpack entry's back-length: the size of its encoding and data, 7 bits a byte, most
/// significant first, every byte but the first with the high bit set. Thresholds as Redis'.
fn backlen(len: usize) -> ([u8; 5], usize) {
    let l = len as u64;
    let mut b = [0u8; 5];
    let n = if l <= 127 {
        1
    } else if l < 16383 {
        2
    } else if l < 2_097_151 {
        3
    } else if l < 268_435_455 {
        4
    } else {
        5
    };
    for (i, slot) in b.iter_mut().take(n).enumerate() {
        let shift = 7 * (n - 1 - i);
        let part = ((l >> shift) & 127) as u8;
        *slot = if i == 0 {
            (l >> shift) as u8
        } else {
            part | 128
        };
    }
    (b, n)
}

// ---------------------------------------------------------------------------------------------
// LZF

const LZF_MAX_LITERAL: usize = 32;
const LZF_MAX_OFF: usize = 1 << 13;
const LZF_MAX_REF: usize = 264;
/// Hash table slots of Redis' liblzf build (`HLOG` 16).
const LZF_HASH_SLOTS: usize = 1 << 16;

/// liblzf's hash table, kept per thread: a slot holds a position of the current call when its
/// upper half is the call's generation, so no call clears or allocates 64 Ki slots.
struct LzfTable {
    slots: Vec<u64>,
    generation: u32,
}

impl LzfTable {
    fn new() -> Self {
        LzfTable {
            slots: vec![0; LZF_HASH_SLOTS],
            generation: 0,
        }
    }

    /// Forgets every position (starts a new generation).
    fn reset(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.slots.fill(0);
            self.generation = 1;
        }
    }

    fn get(&self, slot: usize) -> Option<usize> {
        let v = self.slots[slot];
        ((v >> 32) as u32 == self.generation).then_some((v & 0xFFFF_FFFF) as usize)
    }

    fn set(&mut self, slot: usize, pos: usize) {
        self.slots[slot] = (u64::from(self.generation) << 32) | pos as u64;
    }
}

thread_local! {
    static LZF_TABLE: std::cell::RefCell<Option<LzfTable>> = const { std::cell::RefCell::new(None) };
}

/// liblzf's `IDX` for `VERY_FAST` and `HLOG` 16, over the last three bytes shifted into `h`.
fn lzf_slot(h: u32) -> usize {
    ((h >> 8).wrapping_sub(h.wrapping_mul(5)) & (LZF_HASH_SLOTS as u32 - 1)) as usize
}

/// One literal byte into an LZF run: a run full at [`LZF_MAX_LITERAL`] gets its length byte
/// and the next one starts (liblzf's literal handling).
fn put_literal(out: &mut [u8], op: &mut usize, lit: &mut usize, byte: u8) {
    out[*op] = byte;
    *op += 1;
    *lit += 1;
    if *lit == LZF_MAX_LITERAL {
        out[*op - *lit - 1] = (*lit - 1) as u8;
        *lit = 0;
        *op += 1;
    }
}

/// LZF-compresses `input` as Redis' `lzf_compress` (liblzf 3.6 as Redis builds it: `VERY_FAST`,
/// 16-bit hash, unaligned 2-byte compares) with an output buffer of `max_out` bytes, so the bytes
/// and the cases where compression gives up are Redis' own; `None` where it returns 0. Redis
/// leaves the hash table uninitialised (`INIT_HTAB` 0); this starts from an empty one.
fn lzf_compress(input: &[u8], max_out: usize) -> Option<Vec<u8>> {
    if input.len() > u32::MAX as usize {
        return None;
    }
    LZF_TABLE.with(|cell| match cell.try_borrow_mut() {
        Ok(mut table) => lzf_compress_with(table.get_or_insert_with(LzfTable::new), input, max_out),
        Err(_) => lzf_compress_with(&mut LzfTable::new(), input, max_out),
    })
}

fn lzf_compress_with(table: &mut LzfTable, input: &[u8], max_out: usize) -> Option<Vec<u8>> {
    let in_len = input.len();
    if in_len == 0 || max_out == 0 {
        return None;
    }
    table.reset();
    // Positions as liblzf's pointers: `op` may run one past `max_out` (a reserved literal-run
    // header), never further.
    let mut out = vec![0u8; max_out + 4];
    let mut ip = 0usize;
    let mut op = 1usize; // out[0] is the first literal run's header
    let mut lit = 0usize;
    let byte = |i: usize| u32::from(input[i]);
    let mut hval = if in_len >= 2 {
        (byte(0) << 8) | byte(1)
    } else {
        0
    };
    while ip + 2 < in_len {
        hval = (hval << 8) | byte(ip + 2);
        let slot = lzf_slot(hval);
        let reference = table.get(slot);
        table.set(slot, ip);
        let found = reference.filter(|&r| {
            r < ip
                && ip - r - 1 < LZF_MAX_OFF
                && r > 0
                && input[r + 2] == input[ip + 2]
                && input[r..r + 2] == input[ip..ip + 2]
        });
        if let Some(r) = found {
            let off = ip - r - 1;
            let mut len = 2usize;
            let max_len = (in_len - ip - len).min(LZF_MAX_REF);
            if op + 4 >= max_out && op - usize::from(lit == 0) + 4 >= max_out {
                return None;
            }
            out[op - lit - 1] = (lit as u8).wrapping_sub(1); // close the literal run
            op -= usize::from(lit == 0); // or drop it when empty
            'extend: {
                if max_len > 16 {
                    // liblzf compares 16 bytes unrolled before checking the length limit.
                    for _ in 0..16 {
                        len += 1;
                        if input[r + len] != input[ip + len] {
                            break 'extend;
                        }
                    }
                }
                loop {
                    len += 1;
                    if !(len < max_len && input[r + len] == input[ip + len]) {
                        break;
                    }
                }
            }
            len -= 2; // the back reference copies len + 2 bytes
            ip += 1;
            if len < 7 {
                out[op] = ((off >> 8) + (len << 5)) as u8;
                op += 1;
            } else {
                out[op] = ((off >> 8) + (7 << 5)) as u8;
                out[op + 1] = (len - 7) as u8;
                op += 2;
            }
            out[op] = off as u8;
            op += 2; // and reserve the next run's header
            lit = 0;
            ip += len + 1;
            if ip + 2 >= in_len {
                break;
            }
            // Hash the two positions before the new one.
            ip -= 2;
            hval = (byte(ip) << 8) | byte(ip + 1);
            for _ in 0..2 {
                hval = (hval << 8) | byte(ip + 2);
                table.set(lzf_slot(hval), ip);
                ip += 1;
            }
        } else {
            if op >= max_out {
                return None;
            }
            put_literal(&mut out, &mut op, &mut lit, input[ip]);
            ip += 1;
        }
    }
    if op + 3 > max_out {
        return None;
    }
    while ip < in_len {
        put_literal(&mut out, &mut op, &mut lit, input[ip]);
        ip += 1;
    }
    out[op - lit - 1] = (lit as u8).wrapping_sub(1);
    op -= usize::from(lit == 0);
    out.truncate(op);
    Some(out)
}

/// LZF-decompresses `input` into exactly `out_len` bytes.
fn lzf_decompress(input: &[u8], out_len: usize) -> Result<Vec<u8>> {
    const BAD: RdbError = RdbError::Corrupt("invalid LZF data");
    let mut out = Vec::with_capacity(out_len);
    let mut ip = 0;
    while ip < input.len() {
        let ctrl = usize::from(input[ip]);
        ip += 1;
        if ctrl < 32 {
            let run = ctrl + 1;
            if out.len() + run > out_len || ip + run > input.len() {
                return Err(BAD);
            }
            out.extend_from_slice(&input[ip..ip + run]);
            ip += run;
        } else {
            let mut len = ctrl >> 5;
            if len == 7 {
                len += usize::from(*input.get(ip).ok_or(BAD)?);
                ip += 1;
            }
            let low = usize::from(*input.get(ip).ok_or(BAD)?);
            ip += 1;
            let distance = ((ctrl & 0x1F) << 8) + low + 1;
            let len = len + 2;
            if out.len() + len > out_len || distance > out.len() {
                return Err(BAD);
            }
            let start = out.len() - distance;
            if distance >= len {
                out.extend_from_within(start..start + len);
            } else {
                for k in 0..len {
                    let b = out[start + k];
                    out.push(b);
                }
            }
        }
    }
    if out.len() != out_len {
        return Err(BAD);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// functions

/// RDB opcode of a function library (its code as an RDB string), Redis 7.0 GA and later.
const OPCODE_FUNCTION2: u8 = 245;
/// RDB opcode of Redis 7.0's release-candidate function format, which Redis refuses too.
const OPCODE_FUNCTION_PRE_GA: u8 = 246;

/// The FUNCTION DUMP payload of libraries whose code (shebang line included) is `codes`: each
/// as opcode `FUNCTION2` and an RDB string, then the RDB version and the CRC-64, as Redis'
/// `functionDumpCommand` writes it.
pub fn dump_functions(codes: &[&[u8]]) -> Bytes {
    let mut out = BytesMut::new();
    for code in codes {
        out.put_u8(OPCODE_FUNCTION2);
        put_string(&mut out, code);
    }
    out.put_u16_le(DUMP_RDB_VERSION);
    let crc = crc64(&out);
    out.put_u64_le(crc);
    out.freeze()
}

/// The libraries' code in a FUNCTION DUMP payload (footer checked as for [`restore`]); an
/// empty payload body holds no library.
pub fn restore_functions(payload: &[u8]) -> Result<Vec<Bytes>> {
    let body_len = check_footer(payload)?;
    let mut r = Reader {
        data: &payload[..body_len],
        pos: 0,
    };
    let limit = default_restore_limit(payload.len());
    let mut budget = Budget {
        left: limit as u64,
        limit,
    };
    let mut codes = Vec::new();
    while r.remaining() > 0 {
        match r.u8()? {
            OPCODE_FUNCTION2 => {}
            OPCODE_FUNCTION_PRE_GA => return Err(RdbError::PreGaFunctions),
            _ => return Err(RdbError::NotAFunction),
        }
        let code = r.string(&mut budget)?;
        codes.push(Bytes::copy_from_slice(&code));
    }
    Ok(codes)
}

/// Check a payload's footer (length, RDB version, CRC-64); the length of what precedes it.
fn check_footer(payload: &[u8]) -> Result<usize> {
    if payload.len() < FOOTER_LEN {
        return Err(RdbError::TooShort);
    }
    let body_len = payload.len() - FOOTER_LEN;
    let version = u16::from_le_bytes([payload[body_len], payload[body_len + 1]]);
    if version > MAX_RDB_VERSION {
        return Err(RdbError::Version(version));
    }
    let mut crc = [0u8; 8];
    crc.copy_from_slice(&payload[body_len + 2..]);
    if crc64(&payload[..body_len + 2]) != u64::from_le_bytes(crc) {
        return Err(RdbError::Checksum);
    }
    Ok(body_len)
}

// ---------------------------------------------------------------------------------------------
// restore

/// Decodes a DUMP payload with the default limit, [`default_restore_limit`] of its size.
pub fn restore(payload: &[u8]) -> Result<RdbValue> {
    restore_with_limit(payload, default_restore_limit(payload.len()))
}

/// Decodes a DUMP payload: checks the footer (length, RDB version ≤ [`MAX_RDB_VERSION`], CRC-64)
/// first, then the object, which must end exactly at the footer. `limit` bounds the decoded value:
/// element bytes plus a small per-element overhead, and decompressed LZF data.
///
/// Sets decoded from an intset come in ascending order and sorted sets from a listpack or ziplist
/// in score order; a stream's nodes, groups, consumers and pending lists in key order (as Redis'
/// radix trees hold them); every other collection in payload order.
pub fn restore_with_limit(payload: &[u8], limit: usize) -> Result<RdbValue> {
    let body_len = check_footer(payload)?;
    let mut r = Reader {
        data: &payload[..body_len],
        pos: 0,
    };
    let mut budget = Budget {
        left: limit as u64,
        limit,
    };
    let kind = r.u8()?;
    let value = decode_object(kind, &mut r, &mut budget)?;
    match r.remaining() {
        0 => Ok(value),
        n => Err(RdbError::TrailingBytes(n)),
    }
}

struct Budget {
    left: u64,
    limit: usize,
}

impl Budget {
    fn charge(&mut self, bytes: u64) -> Result<()> {
        match self.left.checked_sub(bytes) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => Err(RdbError::TooLarge(self.limit)),
        }
    }

    /// An element of the decoded value, charged.
    fn element(&mut self, s: &[u8]) -> Result<Bytes> {
        self.charge(s.len() as u64 + ELEMENT_COST)?;
        Ok(Bytes::copy_from_slice(s))
    }

    /// An integer element of the decoded value as its decimal text, charged.
    fn int_element(&mut self, v: i64) -> Result<Bytes> {
        self.element(itoa::Buffer::new().format(v).as_bytes())
    }

    fn entry(&mut self, e: Entry<'_>) -> Result<Bytes> {
        match e {
            Entry::Str(s) => self.element(s),
            Entry::Int(v) => self.int_element(v),
        }
    }
}

/// Initial capacity for `count` elements each backed by at least one of `backing` bytes.
fn capacity(count: u64, backing: usize) -> usize {
    count.min(backing as u64).min(4096) as usize
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

enum Len {
    Plain(u64),
    Encoded(u8),
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    fn u8(&mut self) -> Result<u8> {
        let b = *self.data.get(self.pos).ok_or(RdbError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    fn bytes(&mut self, n: u64) -> Result<&'a [u8]> {
        if n > self.remaining() as u64 {
            return Err(RdbError::Truncated);
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.data[start..self.pos])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N as u64)?);
        Ok(a)
    }

    fn len(&mut self) -> Result<Len> {
        let b = self.u8()?;
        Ok(match b >> 6 {
            0 => Len::Plain(u64::from(b & 0x3F)),
            1 => Len::Plain((u64::from(b & 0x3F) << 8) | u64::from(self.u8()?)),
            2 => match b {
                0x80 => Len::Plain(u64::from(u32::from_be_bytes(self.array()?))),
                0x81 => Len::Plain(u64::from_be_bytes(self.array()?)),
                _ => return Err(RdbError::Corrupt("unknown length encoding")),
            },
            _ => Len::Encoded(b & 0x3F),
        })
    }

    /// A length or count (never a special encoding).
    fn count(&mut self) -> Result<u64> {
        match self.len()? {
            Len::Plain(n) => Ok(n),
            Len::Encoded(_) => Err(RdbError::Corrupt("encoded value where a length belongs")),
        }
    }

    /// An RDB string: raw, integer-encoded or LZF-compressed.
    fn string(&mut self, budget: &mut Budget) -> Result<Cow<'a, [u8]>> {
        let int = |v: i64| Cow::Owned(itoa::Buffer::new().format(v).as_bytes().to_vec());
        match self.len()? {
            Len::Plain(n) => Ok(Cow::Borrowed(self.bytes(n)?)),
            Len::Encoded(0) => Ok(int(i64::from(i8::from_le_bytes(self.array()?)))),
            Len::Encoded(1) => Ok(int(i64::from(i16::from_le_bytes(self.array()?)))),
            Len::Encoded(2) => Ok(int(i64::from(i32::from_le_bytes(self.array()?)))),
            Len::Encoded(3) => {
                let compressed_len = self.count()?;
                let len = self.count()?;
                let compressed = self.bytes(compressed_len)?;
                budget.charge(len)?;
                let len = usize::try_from(len).map_err(|_| RdbError::TooLarge(budget.limit))?;
                Ok(Cow::Owned(lzf_decompress(compressed, len)?))
            }
            Len::Encoded(_) => Err(RdbError::Corrupt("unknown string encoding")),
        }
    }

    fn element(&mut self, budget: &mut Budget) -> Result<Bytes> {
        let s = self.string(budget)?;
        budget.element(&s)
    }

    /// A score written as text (RDB type 3): length byte, or 253/254/255 for NaN/+inf/-inf.
    fn text_double(&mut self) -> Result<f64> {
        match self.u8()? {
            253 => Ok(f64::NAN),
            254 => Ok(f64::INFINITY),
            255 => Ok(f64::NEG_INFINITY),
            n => parse_score(self.bytes(u64::from(n))?),
        }
    }
}

fn parse_score(text: &[u8]) -> Result<f64> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse::<f64>().ok())
        .ok_or(RdbError::Corrupt("score is not a number"))
}

fn decode_object(kind: u8, r: &mut Reader<'_>, budget: &mut Budget) -> Result<RdbValue> {
    match kind {
        TYPE_STRING => Ok(RdbValue::Str(r.element(budget)?)),
        TYPE_LIST => {
            let n = nonzero(r.count()?)?;
            let mut items = Vec::with_capacity(capacity(n, r.remaining()));
            for _ in 0..n {
                items.push(r.element(budget)?);
            }
            Ok(RdbValue::List(items))
        }
        TYPE_SET => {
            let n = nonzero(r.count()?)?;
            let mut members = Vec::with_capacity(capacity(n, r.remaining()));
            for _ in 0..n {
                members.push(r.element(budget)?);
            }
            distinct(&members, |m| m)?;
            Ok(RdbValue::Set(members))
        }
        TYPE_ZSET | TYPE_ZSET_2 => {
            let n = nonzero(r.count()?)?;
            let mut pairs = Vec::with_capacity(capacity(n, r.remaining()));
            for _ in 0..n {
                let member = r.element(budget)?;
                let score = if kind == TYPE_ZSET_2 {
                    f64::from_le_bytes(r.array()?)
                } else {
                    r.text_double()?
                };
                pairs.push((member, score));
            }
            zset(pairs)
        }
        TYPE_HASH => {
            let n = nonzero(r.count()?)?;
            let mut pairs = Vec::with_capacity(capacity(n, r.remaining()));
            for _ in 0..n {
                let field = r.element(budget)?;
                let value = r.element(budget)?;
                pairs.push((field, value));
            }
            hash(pairs)
        }
        TYPE_HASH_ZIPMAP => {
            let blob = r.string(budget)?;
            let mut pairs = Vec::new();
            zipmap_pairs(&blob, |f, v| {
                pairs.push((budget.element(f)?, budget.element(v)?));
                Ok(())
            })?;
            hash(pairs)
        }
        TYPE_LIST_ZIPLIST => {
            let blob = r.string(budget)?;
            let mut items = Vec::new();
            ziplist_entries(&blob, |e| {
                items.push(budget.entry(e)?);
                Ok(())
            })?;
            nonzero(items.len() as u64)?;
            Ok(RdbValue::List(items))
        }
        TYPE_SET_INTSET => {
            let blob = r.string(budget)?;
            let mut members = Vec::new();
            intset_members(&blob, |v| {
                members.push(budget.int_element(v)?);
                Ok(())
            })?;
            Ok(RdbValue::Set(members))
        }
        TYPE_SET_LISTPACK => {
            let blob = r.string(budget)?;
            let mut members = Vec::new();
            listpack_entries(&blob, |e| {
                members.push(budget.entry(e)?);
                Ok(())
            })?;
            nonzero(members.len() as u64)?;
            distinct(&members, |m| m)?;
            Ok(RdbValue::Set(members))
        }
        TYPE_ZSET_ZIPLIST | TYPE_ZSET_LISTPACK => {
            let blob = r.string(budget)?;
            let entries = collect_pairs(&blob, kind == TYPE_ZSET_LISTPACK, budget)?;
            let mut pairs = Vec::with_capacity(entries.len());
            for (member, score) in entries {
                let score = match score {
                    Entry::Int(v) => v as f64,
                    Entry::Str(s) => parse_score(s)?,
                };
                pairs.push((budget.entry(member)?, score));
            }
            zset(pairs)
        }
        TYPE_HASH_ZIPLIST | TYPE_HASH_LISTPACK => {
            let blob = r.string(budget)?;
            let entries = collect_pairs(&blob, kind == TYPE_HASH_LISTPACK, budget)?;
            let mut pairs = Vec::with_capacity(entries.len());
            for (field, value) in entries {
                pairs.push((budget.entry(field)?, budget.entry(value)?));
            }
            hash(pairs)
        }
        TYPE_LIST_QUICKLIST | TYPE_LIST_QUICKLIST_2 => {
            let nodes = nonzero(r.count()?)?;
            let mut items = Vec::new();
            for _ in 0..nodes {
                let container = if kind == TYPE_LIST_QUICKLIST_2 {
                    r.count()?
                } else {
                    QUICKLIST_PACKED
                };
                if container != QUICKLIST_PACKED && container != QUICKLIST_PLAIN {
                    return Err(RdbError::Corrupt("unknown quicklist container"));
                }
                let blob = r.string(budget)?;
                if blob.is_empty() {
                    return Err(RdbError::Corrupt("empty quicklist node"));
                }
                let mut push = |e: Entry<'_>| -> Result<()> {
                    items.push(budget.entry(e)?);
                    Ok(())
                };
                if container == QUICKLIST_PLAIN {
                    push(Entry::Str(&blob))?;
                } else if kind == TYPE_LIST_QUICKLIST_2 {
                    listpack_entries(&blob, push)?;
                } else {
                    ziplist_entries(&blob, push)?;
                }
            }
            nonzero(items.len() as u64)?;
            Ok(RdbValue::List(items))
        }
        stream::TYPE_STREAM_LISTPACKS
        | stream::TYPE_STREAM_LISTPACKS_2
        | stream::TYPE_STREAM_LISTPACKS_3 => Ok(RdbValue::Stream(Box::new(stream::decode_stream(
            kind, r, budget,
        )?))),
        other => Err(RdbError::UnsupportedType(other)),
    }
}

fn nonzero(n: u64) -> Result<u64> {
    if n == 0 {
        Err(RdbError::Empty)
    } else {
        Ok(n)
    }
}

fn distinct<T>(items: &[T], key: impl Fn(&T) -> &[u8]) -> Result<()> {
    let mut seen = HashSet::with_capacity(items.len());
    for item in items {
        if !seen.insert(key(item)) {
            return Err(RdbError::Duplicate);
        }
    }
    Ok(())
}

fn zset(pairs: Vec<(Bytes, f64)>) -> Result<RdbValue> {
    nonzero(pairs.len() as u64)?;
    if pairs.iter().any(|(_, s)| s.is_nan()) {
        return Err(RdbError::NanScore);
    }
    distinct(&pairs, |(m, _)| m)?;
    Ok(RdbValue::ZSet(pairs))
}

fn hash(pairs: Vec<(Bytes, Bytes)>) -> Result<RdbValue> {
    nonzero(pairs.len() as u64)?;
    distinct(&pairs, |(f, _)| f)?;
    Ok(RdbValue::Hash(pairs))
}

/// The entries of a listpack or ziplist taken two by two; an odd count is corrupt.
fn collect_pairs<'b>(
    blob: &'b [u8],
    listpack: bool,
    budget: &mut Budget,
) -> Result<Vec<(Entry<'b>, Entry<'b>)>> {
    let mut pairs = Vec::new();
    let mut pending = None;
    let mut take = |e: Entry<'b>| -> Result<()> {
        match pending.take() {
            None => pending = Some(e),
            Some(first) => {
                budget.charge(ELEMENT_COST)?;
                pairs.push((first, e));
            }
        }
        Ok(())
    };
    if listpack {
        listpack_entries(blob, &mut take)?;
    } else {
        ziplist_entries(blob, &mut take)?;
    }
    if pending.is_some() {
        return Err(RdbError::Corrupt(
            "odd number of entries in a pair encoding",
        ));
    }
    Ok(pairs)
}

/// One listpack or ziplist entry.
#[derive(Debug, Clone, Copy)]
enum Entry<'b> {
    Str(&'b [u8]),
    Int(i64),
}

fn le_uint(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .rev()
        .fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
}

/// Sign-extends the low `bits` bits of `v`.
fn sign_extend(v: u64, bits: u32) -> i64 {
    let shift = 64 - bits;
    ((v << shift) as i64) >> shift
}

/// Walks a listpack, checking its header, every entry's bounds and back-length, the terminator
/// and the element count.
fn listpack_entries<'b>(lp: &'b [u8], f: impl FnMut(Entry<'b>) -> Result<()>) -> Result<()> {
    listpack_entries_with(lp, true, f)
}

/// [`listpack_entries`], checking the element count in the header only when `check_count` (Redis
/// does not check it in a stream's listpacks).
fn listpack_entries_with<'b>(
    lp: &'b [u8],
    check_count: bool,
    mut f: impl FnMut(Entry<'b>) -> Result<()>,
) -> Result<()> {
    const BAD: RdbError = RdbError::Corrupt("listpack integrity check failed");
    if lp.len() < 7 || le_uint(&lp[0..4]) != lp.len() as u64 || lp[lp.len() - 1] != 0xFF {
        return Err(BAD);
    }
    let declared = le_uint(&lp[4..6]);
    let end = lp.len() - 1;
    let mut p = 6;
    let mut count: u64 = 0;
    while lp[p] != 0xFF {
        let avail = end - p;
        let need = |n: usize| if n > avail { Err(BAD) } else { Ok(()) };
        let b = lp[p];
        let (entry, size) = if b & 0x80 == 0 {
            (Entry::Int(i64::from(b)), 1)
        } else if b & 0xC0 == 0x80 {
            let n = usize::from(b & 0x3F);
            need(1 + n)?;
            (Entry::Str(&lp[p + 1..p + 1 + n]), 1 + n)
        } else if b & 0xE0 == 0xC0 {
            need(2)?;
            let v = (u64::from(b & 0x1F) << 8) | u64::from(lp[p + 1]);
            (Entry::Int(sign_extend(v, 13)), 2)
        } else if b & 0xF0 == 0xE0 {
            need(2)?;
            let n = (usize::from(b & 0x0F) << 8) | usize::from(lp[p + 1]);
            need(2 + n)?;
            (Entry::Str(&lp[p + 2..p + 2 + n]), 2 + n)
        } else {
            let int = |width: usize| -> Result<(Entry<'b>, usize)> {
                need(1 + width)?;
                let v = le_uint(&lp[p + 1..p + 1 + width]);
                Ok((Entry::Int(sign_extend(v, 8 * width as u32)), 1 + width))
            };
            match b {
                0xF0 => {
                    need(5)?;
                    let n = le_uint(&lp[p + 1..p + 5]);
                    if n > (avail - 5) as u64 {
                        return Err(BAD);
                    }
                    let n = n as usize;
                    (Entry::Str(&lp[p + 5..p + 5 + n]), 5 + n)
                }
                0xF1 => int(2)?,
                0xF2 => int(3)?,
                0xF3 => int(4)?,
                0xF4 => int(8)?,
                _ => return Err(BAD),
            }
        };
        let (back, n) = backlen(size);
        need(size + n)?;
        if lp[p + size..p + size + n] != back[..n] {
            return Err(BAD);
        }
        f(entry)?;
        count += 1;
        p += size + n;
    }
    if p != end || (check_count && declared != u64::from(u16::MAX) && declared != count) {
        return Err(BAD);
    }
    Ok(())
}

/// Walks a ziplist, checking its header (size, tail offset, count), every entry's bounds and
/// previous-entry length, and the terminator.
fn ziplist_entries<'b>(zl: &'b [u8], mut f: impl FnMut(Entry<'b>) -> Result<()>) -> Result<()> {
    const BAD: RdbError = RdbError::Corrupt("ziplist integrity check failed");
    const HEADER: usize = 10;
    if zl.len() < HEADER + 1 || le_uint(&zl[0..4]) != zl.len() as u64 || zl[zl.len() - 1] != 0xFF {
        return Err(BAD);
    }
    let tail = le_uint(&zl[4..8]);
    let declared = le_uint(&zl[8..10]);
    let end = zl.len() - 1;
    let mut p = HEADER;
    let mut prev_size: u64 = 0;
    let mut last_start = HEADER;
    let mut count: u64 = 0;
    while zl[p] != 0xFF {
        let avail = end - p;
        let need = |n: usize| if n > avail { Err(BAD) } else { Ok(()) };
        let (prevlen, pl) = if zl[p] < 254 {
            (u64::from(zl[p]), 1)
        } else {
            need(5)?;
            (le_uint(&zl[p + 1..p + 5]), 5)
        };
        if prevlen != prev_size {
            return Err(BAD);
        }
        need(pl + 1)?;
        let enc = zl[p + pl];
        let h = p + pl;
        let (entry, size) = match enc >> 6 {
            0 => {
                let n = usize::from(enc & 0x3F);
                need(pl + 1 + n)?;
                (Entry::Str(&zl[h + 1..h + 1 + n]), pl + 1 + n)
            }
            1 => {
                need(pl + 2)?;
                let n = (usize::from(enc & 0x3F) << 8) | usize::from(zl[h + 1]);
                need(pl + 2 + n)?;
                (Entry::Str(&zl[h + 2..h + 2 + n]), pl + 2 + n)
            }
            2 => {
                if enc != 0x80 {
                    return Err(BAD);
                }
                need(pl + 5)?;
                let mut be = [0u8; 4];
                be.copy_from_slice(&zl[h + 1..h + 5]);
                let n = u64::from(u32::from_be_bytes(be));
                if n > (avail - pl - 5) as u64 {
                    return Err(BAD);
                }
                let n = n as usize;
                (Entry::Str(&zl[h + 5..h + 5 + n]), pl + 5 + n)
            }
            _ => {
                let width = match enc {
                    0xC0 => 2,
                    0xD0 => 4,
                    0xE0 => 8,
                    0xF0 => 3,
                    0xFE => 1,
                    0xF1..=0xFD => 0,
                    _ => return Err(BAD),
                };
                need(pl + 1 + width)?;
                let v = if width == 0 {
                    i64::from(enc & 0x0F) - 1
                } else {
                    sign_extend(le_uint(&zl[h + 1..h + 1 + width]), 8 * width as u32)
                };
                (Entry::Int(v), pl + 1 + width)
            }
        };
        f(entry)?;
        count += 1;
        last_start = p;
        prev_size = size as u64;
        p += size;
    }
    if p != end
        || tail != last_start as u64
        || (declared != u64::from(u16::MAX) && declared != count)
    {
        return Err(BAD);
    }
    Ok(())
}

/// Walks an intset: encoding width (2, 4 or 8), count, then strictly ascending little-endian
/// integers filling the blob exactly.
fn intset_members(blob: &[u8], mut f: impl FnMut(i64) -> Result<()>) -> Result<()> {
    const BAD: RdbError = RdbError::Corrupt("intset integrity check failed");
    if blob.len() < 8 {
        return Err(BAD);
    }
    let width = le_uint(&blob[0..4]);
    if !matches!(width, 2 | 4 | 8) {
        return Err(BAD);
    }
    let count = le_uint(&blob[4..8]);
    if count.checked_mul(width).and_then(|n| n.checked_add(8)) != Some(blob.len() as u64) {
        return Err(BAD);
    }
    if count == 0 {
        return Err(RdbError::Empty);
    }
    let mut prev = None;
    for chunk in blob[8..].chunks_exact(width as usize) {
        let v = sign_extend(le_uint(chunk), 8 * width as u32);
        if prev.is_some_and(|p| v <= p) {
            return Err(BAD);
        }
        prev = Some(v);
        f(v)?;
    }
    Ok(())
}

/// Walks a zipmap (hashes of Redis before 2.6): count byte, then (length, field, length, free
/// byte, value, free bytes) until 0xFF.
fn zipmap_pairs<'b>(
    zm: &'b [u8],
    mut f: impl FnMut(&'b [u8], &'b [u8]) -> Result<()>,
) -> Result<()> {
    const BAD: RdbError = RdbError::Corrupt("zipmap integrity check failed");
    if zm.len() < 2 || zm[zm.len() - 1] != 0xFF {
        return Err(BAD);
    }
    let end = zm.len() - 1;
    let mut p = 1;
    let read_len = |p: &mut usize| -> Result<usize> {
        let b = zm[*p];
        let n = match b {
            0..=253 => {
                *p += 1;
                u64::from(b)
            }
            254 => {
                if end - *p < 5 {
                    return Err(BAD);
                }
                let n = le_uint(&zm[*p + 1..*p + 5]);
                *p += 5;
                n
            }
            255 => return Err(BAD),
        };
        if n > (end - *p) as u64 {
            return Err(BAD);
        }
        Ok(n as usize)
    };
    let mut count: u64 = 0;
    while zm[p] != 0xFF {
        let n = read_len(&mut p)?;
        let field = &zm[p..p + n];
        p += n;
        if p >= end {
            return Err(BAD);
        }
        let n = read_len(&mut p)?;
        if p >= end {
            return Err(BAD);
        }
        let free = usize::from(zm[p]);
        p += 1;
        if n + free > end - p {
            return Err(BAD);
        }
        let value = &zm[p..p + n];
        p += n + free;
        f(field, value)?;
        count += 1;
    }
    if p != end || count == 0 || (zm[0] != 254 && u64::from(zm[0]) != count) {
        return Err(BAD);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
