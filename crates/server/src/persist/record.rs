//! What the server puts inside log records and snapshot items (the log itself treats them as
//! opaque, checksummed payloads).
//!
//! ```text
//! command record (one atomic unit: a single write, or all writes of one MULTI/EXEC)
//! +------+-------------+-----------+--------------------------------------------------+
//! | 0x01 | now_ms u64  | count u32 | count × ( db u16 | argc u32 | argc × (len u32 | bytes) ) |
//! +------+-------------+-----------+--------------------------------------------------+
//!
//! snapshot item (one key)
//! +------+--------+------------------+--------------+------+-------------------------+
//! | 0x02 | db u16 | key (len u32|b)  | expires u64  | kind | value                   |
//! +------+--------+------------------+--------------+------+-------------------------+
//!   expires: Unix ms, 0 = no TTL.   kind 0 string: (len|bytes)
//!   kind 1 hash: n u32, n × (field, value)     kind 2 zset: n u32, n × (member, score f64 bits u64)
//!   kind 3 string with memcached state: client_flags u32, bits u8 (1 stale, 2 recache win sent),
//!          (len|bytes)
//!          (written only when the flags or the stale bit are set; kinds 0–2 read as before)
//!   kind 4 more of a string: (len|bytes), appended      kind 5 more of a hash: as kind 1
//!   kind 6 more of a zset: as kind 2
//!   kind 7 list: n u32, n × element (len|bytes), head first     kind 8 more of a list: as kind 7,
//!          appended at the tail
//!   kind 9 set: n u32, n × member (len|bytes)      kind 10 more of a set: as kind 9
//!          (kinds 7 and 8 are taken by lists)
//!   kind | 0x80: the same value, compressed: raw_len u32, then an LZ4 block that decompresses to
//!          exactly raw_len bytes, the value as its kind describes it (written when the value is
//!          at least 64 bytes and compresses by at least an eighth; as Redis' `rdbcompression`)
//!          (a value whose item would pass ITEM_PART_BYTES is written as its first part, in
//!          kind 0–3, 7 or 9, followed by items of kind 4–6, 8 or 10 for the same key, which add to it; so an
//!          item stays below the log's record limit whatever the value's size, and the loader
//!          threads get even shares)
//! ```
//!
//! snapshot functions item (one tenant's function libraries; written first, only for a tenant
//! that has libraries, so a snapshot without any reads as before)
//! +------+--------+-----------+------------------------------+
//! | 0x03 | db u16 | count u32 | count × code (len u32|bytes) |
//! +------+--------+-----------+------------------------------+
//!   db: a keyspace of the tenant (keyspace indices are stable, see persist::layout); code: a
//!   library's whole code, shebang line first, as FUNCTION LOAD took it.
//! All integers little-endian. Replay re-executes each command with the clock set to `now_ms`, so
//! relative TTLs and expiry decisions come out exactly as they did the first time.
//! Decoding never panics: a malformed payload is an error (the log's checksum makes that corruption
//! of a kind the checksum cannot see, i.e. a bug, but recovery still reports it instead of crashing).
//!
//! May import: `gradus-log`'s format limits and `gradus-store`'s values; nothing of the server's
//! state.

use bytes::{BufMut, Bytes, BytesMut};
use gradus_log::format::MAX_RECORD_LEN;
use gradus_store::stream::{Consumer, Group, Nack};
use gradus_store::{
    End, HashLimits, HashValue, ItemMeta, ItemView, ListLimit, ListValue, SetLimits, SetValue,
    StreamId, StreamValue, Value, ValueView, ZSetLimits, ZSetValue,
};

const TAG_COMMANDS: u8 = 1;
const TAG_SNAPSHOT_ITEM: u8 = 2;
const TAG_FUNCTIONS: u8 = 3;

/// A snapshot item holding a value bigger than this is split into parts of about this size (a
/// part ends after the element that reaches it; a string part is exactly this long).
pub const ITEM_PART_BYTES: usize = 8 << 20;

const KIND_STR: u8 = 0;
const KIND_HASH: u8 = 1;
const KIND_ZSET: u8 = 2;
const KIND_STR_META: u8 = 3;
const KIND_MORE_STR: u8 = 4;
const KIND_MORE_HASH: u8 = 5;
const KIND_MORE_ZSET: u8 = 6;
const KIND_LIST: u8 = 7;
const KIND_MORE_LIST: u8 = 8;
const KIND_SET: u8 = 9;
const KIND_MORE_SET: u8 = 10;
/// A stream: its metadata and groups, then entries (see [`put_stream_head`], [`put_stream_entry`]).
const KIND_STREAM: u8 = 11;
const KIND_MORE_STREAM: u8 = 12;
/// Set in an item's kind when its value is compressed.
const COMPRESSED: u8 = 0x80;
/// Values shorter than this are never compressed (the block format's overhead, and the CPU).
const MIN_COMPRESSED_VALUE: usize = 64;
/// An LZ4 block expands at most about 255-fold; a larger claimed length is corruption, refused
/// before anything is allocated for it.
const MAX_LZ4_RATIO: usize = 255;

/// One logged command: the database it ran in and its arguments (name first).
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedCommand {
    pub db: usize,
    pub args: Vec<Bytes>,
}

/// A decoded payload.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A tenant's function libraries (a snapshot item): their code, in the tenant of `db`.
    Functions { db: usize, codes: Vec<Bytes> },
    Commands {
        now_ms: u64,
        commands: Vec<LoggedCommand>,
    },
    Item {
        db: usize,
        key: Bytes,
        expires_at: Option<u64>,
        value: Value,
        /// memcached client flags and the stale bit (default for kinds 0–2).
        meta: ItemMeta,
        /// A later part of a value split over several items (kinds 4–6, 8, 10): `value` holds only
        /// what this part adds, to the key's value loaded from the earlier parts.
        more: bool,
    },
}

/// A payload that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("malformed record: {0}")]
pub struct RecordError(pub(crate) &'static str);

fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    out.put_u32_le(b.len() as u32);
    out.put_slice(b);
}

/// Encode a tenant's function libraries (their code) as a snapshot item, named by keyspace `db`
/// of the tenant.
pub fn encode_functions(db: usize, codes: &[Bytes]) -> Bytes {
    let mut out = BytesMut::with_capacity(7 + codes.iter().map(|c| 4 + c.len()).sum::<usize>());
    out.put_u8(TAG_FUNCTIONS);
    out.put_u16_le(db as u16);
    out.put_u32_le(codes.len() as u32);
    for code in codes {
        put_bytes(&mut out, code);
    }
    out.freeze()
}

/// Encode commands applied at `now_ms` as one record.
pub fn encode_commands(now_ms: u64, commands: &[LoggedCommand]) -> Bytes {
    encode(now_ms, commands.iter().map(|c| (c.db, c.args.as_slice())))
}

/// Encode one command (database `db`, arguments `args`) applied at `now_ms` as one record:
/// the same bytes as [`encode_commands`] with one command, without building a `LoggedCommand`.
pub fn encode_command(now_ms: u64, db: usize, args: &[Bytes]) -> Bytes {
    encode(now_ms, std::iter::once((db, args)))
}

/// Size of the record [`encode_commands`] makes of commands with these arguments (EXEC checks
/// it against the log's limit before it applies anything).
pub fn commands_record_len<'a>(commands: impl Iterator<Item = &'a [Bytes]>) -> usize {
    13 + commands.map(command_len).sum::<usize>()
}

/// Bytes one command takes in a command record.
fn command_len(args: &[Bytes]) -> usize {
    6 + args.iter().map(|a| 4 + a.len()).sum::<usize>()
}

/// What is left of the log's record limit ([`MAX_RECORD_LEN`]) for the writes of a script,
/// which are logged together as one record after the script has run. A write that would not
/// fit is refused before it is applied, so the log never refuses a record whose writes were
/// applied in memory already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRoom(usize);

impl RecordRoom {
    /// A record of its own: the limit less the record's header.
    pub fn whole() -> Self {
        Self(MAX_RECORD_LEN - commands_record_len(std::iter::empty()))
    }

    /// What is left in a record of `record_len` bytes so far (as [`commands_record_len`] gives).
    pub fn after(record_len: usize) -> Self {
        Self(MAX_RECORD_LEN.saturating_sub(record_len))
    }

    /// Whether a command with these arguments fits.
    pub fn fits(&self, args: &[Bytes]) -> bool {
        command_len(args) <= self.0
    }

    /// Count a command with these arguments in (after [`RecordRoom::fits`] said it fits).
    pub fn take(&mut self, args: &[Bytes]) {
        self.0 = self.0.saturating_sub(command_len(args));
    }

    /// The record's length with a command with these arguments added.
    pub fn len_with(&self, args: &[Bytes]) -> usize {
        MAX_RECORD_LEN - self.0.min(MAX_RECORD_LEN) + command_len(args)
    }
}

fn encode<'a>(now_ms: u64, commands: impl Iterator<Item = (usize, &'a [Bytes])> + Clone) -> Bytes {
    let (count, size) = commands
        .clone()
        .fold((0usize, 13usize), |(n, size), (_, args)| {
            (n + 1, size + command_len(args))
        });
    let mut out = BytesMut::with_capacity(size);
    out.put_u8(TAG_COMMANDS);
    out.put_u64_le(now_ms);
    out.put_u32_le(count as u32);
    for (db, args) in commands {
        out.put_u16_le(db as u16);
        out.put_u32_le(args.len() as u32);
        for a in args {
            put_bytes(&mut out, a);
        }
    }
    out.freeze()
}

/// Encode one key of a snapshot as one item, or as several for a value larger than
/// [`ITEM_PART_BYTES`], handing each to `emit` in order; with `compress`, values that compress
/// well are stored compressed.
pub fn encode_item(
    db: usize,
    key: &[u8],
    entry: ItemView<'_>,
    compress: bool,
    mut emit: impl FnMut(Bytes),
) {
    if compress {
        let kind_at = 1 + 2 + 4 + key.len() + 8;
        encode_item_parts(db, key, entry, ITEM_PART_BYTES, |item| {
            emit(compressed(item, kind_at))
        })
    } else {
        encode_item_parts(db, key, entry, ITEM_PART_BYTES, emit)
    }
}

/// `item` with its value (after the kind byte at `kind_at`) compressed, if that saves at least an
/// eighth; otherwise `item` itself.
fn compressed(item: Bytes, kind_at: usize) -> Bytes {
    let value = &item[kind_at + 1..];
    if value.len() < MIN_COMPRESSED_VALUE || looks_random(value) {
        return item;
    }
    let packed = lz4_flex::block::compress(value);
    if packed.len() + 4 > value.len() - value.len() / 8 {
        return item;
    }
    let mut out = BytesMut::with_capacity(kind_at + 5 + packed.len());
    out.extend_from_slice(&item[..kind_at]);
    out.put_u8(item[kind_at] | COMPRESSED);
    out.put_u32_le(value.len() as u32);
    out.extend_from_slice(&packed);
    out.freeze()
}

/// For the fuzzers: when `record`, decoded from `payload`, is a later part of a split value,
/// `payload` added with [`add_parts`] to an empty value of the same kind (which must equal the
/// value the part decodes to); `None` for anything else.
#[doc(hidden)]
pub fn later_part_added_to_empty(
    payload: &Bytes,
    record: &Record,
) -> Option<Result<Value, RecordError>> {
    let Record::Item {
        db,
        key,
        value,
        more: true,
        ..
    } = record
    else {
        return None;
    };
    let mut added = match value {
        Value::Str(_) => Value::string(Bytes::new()),
        Value::Hash(_) => Value::hash(HashValue::new()),
        Value::ZSet(_) => Value::zset(ZSetValue::new()),
        Value::List(_) => Value::List(ListValue::new()),
        Value::Set(_) => Value::set(SetValue::new()),
        Value::Stream(_) => Value::Stream(StreamValue::new()),
    };
    Some(add_parts(&mut added, *db, key, std::slice::from_ref(payload)).map(|()| added))
}

/// The items a snapshot would write for the key a decoded [`Record::Item`] describes (nothing
/// for a command record or a later part): lets the fuzzers check that what decodes re-encodes
/// to the same record.
#[doc(hidden)]
pub fn reencode_item(record: &Record, compress: bool) -> Vec<Bytes> {
    let mut items = Vec::new();
    if let Record::Item {
        db,
        key,
        expires_at,
        value,
        meta,
        more: false,
    } = record
    {
        let mut shard = gradus_store::Shard::new();
        shard.set_with_meta(key, value.clone(), *expires_at, *meta, 0);
        if let Some(entry) = shard.get(key, 0) {
            encode_item(*db, key, entry.view(), compress, |item| items.push(item));
        }
    }
    items
}

/// Whether `value` looks incompressible: its first 256 bytes use more distinct byte values than
/// text or serialized data do (random bytes use about 63 % of the 256 values in 256 bytes, English
/// text about 15 %). A compression attempt that saves nothing costs about 1.2 µs per KiB here; this
/// look, about a tenth of that. A value it wrongly skips is stored as it is, which is always valid.
fn looks_random(value: &[u8]) -> bool {
    let sample = &value[..value.len().min(256)];
    let mut seen = [false; 256];
    let mut distinct = 0;
    for &b in sample {
        distinct += usize::from(!std::mem::replace(&mut seen[usize::from(b)], true));
    }
    distinct * 2 > sample.len()
}

/// [`encode_item`] with the part size as a parameter (tests split small values), uncompressed.
fn encode_item_parts(
    db: usize,
    key: &[u8],
    entry: ItemView<'_>,
    part_bytes: usize,
    mut emit: impl FnMut(Bytes),
) {
    let header = |kind: u8, size: usize| {
        let mut out = BytesMut::with_capacity(32 + key.len() + size.min(part_bytes + 1024));
        out.put_u8(TAG_SNAPSHOT_ITEM);
        out.put_u16_le(db as u16);
        put_bytes(&mut out, key);
        out.put_u64_le(entry.expires_at.unwrap_or(0));
        out.put_u8(kind);
        out
    };
    let meta = entry.meta;
    let stale = meta.bits & ItemMeta::PERSISTED_BITS;
    let size = entry.value.mem_size();
    match entry.value {
        ValueView::Str(b) => {
            let mut parts = b.chunks(part_bytes.max(1));
            let first = parts.next().unwrap_or_default();
            let mut out = if meta.client_flags != 0 || stale != 0 {
                let mut out = header(KIND_STR_META, first.len());
                out.put_u32_le(meta.client_flags);
                out.put_u8(stale);
                out
            } else {
                header(KIND_STR, first.len())
            };
            put_bytes(&mut out, first);
            emit(out.freeze());
            for more in parts {
                let mut out = header(KIND_MORE_STR, more.len());
                put_bytes(&mut out, more);
                emit(out.freeze());
            }
        }
        ValueView::Hash(h) => {
            let put = |out: &mut BytesMut, (f, v): (&[u8], &[u8])| {
                put_bytes(out, f);
                put_bytes(out, v);
            };
            let kinds = (KIND_HASH, KIND_MORE_HASH);
            emit_counted_parts(size, h.iter(), put, kinds, part_bytes, header, emit);
        }
        ValueView::ZSet(z) => {
            let put = |out: &mut BytesMut, (m, s): (gradus_store::ZMember<'_>, f64)| {
                put_bytes(out, &m);
                out.put_u64_le(s.to_bits());
            };
            let kinds = (KIND_ZSET, KIND_MORE_ZSET);
            emit_counted_parts(size, z.iter(), put, kinds, part_bytes, header, emit);
        }
        ValueView::List(l) => {
            let kinds = (KIND_LIST, KIND_MORE_LIST);
            emit_counted_parts(size, l.iter(), put_bytes, kinds, part_bytes, header, emit);
        }
        ValueView::Set(s) => {
            let put = |out: &mut BytesMut, m: gradus_store::Member<'_>| {
                m.with_bytes(|b| put_bytes(out, b))
            };
            let kinds = (KIND_SET, KIND_MORE_SET);
            emit_counted_parts(size, s.iter(), put, kinds, part_bytes, header, emit);
        }
        ValueView::Stream(st) => {
            let head = |kind: u8, size: usize| {
                let mut out = header(kind, size);
                if kind == KIND_STREAM {
                    put_stream_head(&mut out, st);
                }
                out
            };
            let entries = st.nodes().flat_map(|node| {
                node.entries
                    .into_iter()
                    .enumerate()
                    .map(|(i, entry)| (i == 0, entry))
            });
            let kinds = (KIND_STREAM, KIND_MORE_STREAM);
            emit_counted_parts(
                size,
                entries,
                put_stream_entry,
                kinds,
                part_bytes,
                head,
                emit,
            );
        }
    }
}

fn put_id(out: &mut BytesMut, id: StreamId) {
    out.put_u64_le(id.ms);
    out.put_u64_le(id.seq);
}

/// A stream's first item, before its entries (so a stream's first part is larger than
/// [`ITEM_PART_BYTES`] by its groups: ~40 bytes per pending entry, so a record's 512 MiB limit
/// is reached only past ten million of them): last, first and largest deleted IDs, entries
/// added, then each group (name, last ID, entries read, its pending entries with their
/// consumer, delivery time and count, its consumers with seen and active times).
fn put_stream_head(out: &mut BytesMut, st: &StreamValue) {
    let meta = st.meta();
    put_id(out, meta.last_id);
    put_id(out, meta.first_id);
    put_id(out, meta.max_deleted_id);
    out.put_u64_le(meta.entries_added);
    out.put_u32_le(st.groups().len() as u32);
    for (name, g) in st.groups() {
        put_bytes(out, name);
        put_id(out, g.last_id);
        out.put_u64_le(g.entries_read as u64);
        out.put_u32_le(g.pel.len() as u32);
        for (id, nack) in &g.pel {
            put_id(out, *id);
            put_bytes(out, &nack.consumer);
            out.put_u64_le(nack.delivery_time);
            out.put_u64_le(nack.delivery_count);
        }
        out.put_u32_le(g.consumers.len() as u32);
        for (name, c) in &g.consumers {
            put_bytes(out, name);
            out.put_u64_le(c.seen_time);
            out.put_u64_le(c.active_time as u64);
        }
    }
}

/// One stream entry: flags (1: it starts a node, 2: deleted), ID, pair count, pairs.
fn put_stream_entry(
    out: &mut BytesMut,
    (new_node, (id, deleted, fields)): (bool, gradus_store::stream::EntryView<'_>),
) {
    out.put_u8(u8::from(new_node) | (u8::from(deleted) << 1));
    put_id(out, id);
    out.put_u32_le(fields.len() as u32);
    for (f, v) in fields {
        put_bytes(out, f);
        put_bytes(out, v);
    }
}

fn read_id(r: &mut Reader) -> Result<StreamId, RecordError> {
    Ok(StreamId::new(r.u64()?, r.u64()?))
}

/// What [`put_stream_head`] wrote, into `st`.
fn read_stream_head(r: &mut Reader, st: &mut StreamValue) -> Result<(), RecordError> {
    let (last, first, max_deleted) = (read_id(r)?, read_id(r)?, read_id(r)?);
    st.set_meta(last, first, max_deleted, r.u64()?);
    for _ in 0..r.count(4 + 16 + 8 + 8)? {
        let name = r.owned()?;
        let mut g = Group::new(read_id(r)?, r.u64()? as i64);
        let mut pel = Vec::new();
        for _ in 0..r.count(16 + 4 + 16)? {
            let id = read_id(r)?;
            let consumer = r.owned()?;
            pel.push((
                id,
                Nack {
                    consumer,
                    delivery_time: r.u64()?,
                    delivery_count: r.u64()?,
                },
            ));
        }
        for _ in 0..r.count(4 + 16)? {
            let name = r.owned()?;
            let mut c = Consumer::new(r.u64()?);
            c.active_time = r.u64()? as i64;
            g.consumers.insert(name, c);
        }
        for (id, nack) in pel {
            let Some(c) = g.consumers.get_mut(&nack.consumer) else {
                return Err(RecordError("a pending entry of an unknown consumer"));
            };
            c.pending.insert(id);
            g.pel.insert(id, nack);
        }
        st.load_group(name, g);
    }
    Ok(())
}

/// Entries [`put_stream_entry`] wrote (count first), appended to `st`.
fn read_stream_entries(r: &mut Reader, st: &mut StreamValue) -> Result<(), RecordError> {
    for _ in 0..r.count(1 + 16 + 4)? {
        let flags = r.u8()?;
        let id = read_id(r)?;
        if st.last_entry_id().is_some_and(|last| id <= last) {
            return Err(RecordError("stream entries out of order"));
        }
        let pairs = r.count(8)?;
        if pairs == 0 {
            return Err(RecordError("a stream entry without fields"));
        }
        let mut fields = Vec::with_capacity(pairs * 2);
        for _ in 0..pairs * 2 {
            fields.push(r.bytes()?);
        }
        st.load_entry(flags & 1 != 0, id, flags & 2 != 0, &fields);
    }
    Ok(())
}

/// The items of a collection: `count u32, count × element` (each written by `put`), the first of
/// kind `kinds.0`, any further ones (once an item's elements reach `part_bytes`) of kind
/// `kinds.1`. An empty collection (never stored, but harmless) is one item with count 0.
fn emit_counted_parts<T>(
    size: usize,
    elements: impl Iterator<Item = T>,
    put: impl Fn(&mut BytesMut, T),
    kinds: (u8, u8),
    part_bytes: usize,
    header: impl Fn(u8, usize) -> BytesMut,
    mut emit: impl FnMut(Bytes),
) {
    // The count follows the header; it is filled in when the part ends.
    let start = |kind: u8| {
        let mut out = header(kind, size);
        let count_at = out.len();
        out.put_u32_le(0);
        (out, count_at)
    };
    let finish = |mut out: BytesMut, count_at: usize, count: u32| {
        out[count_at..count_at + 4].copy_from_slice(&count.to_le_bytes());
        out.freeze()
    };
    let (mut out, mut count_at) = start(kinds.0);
    let mut count = 0u32;
    for element in elements {
        if count > 0 && out.len() - (count_at + 4) >= part_bytes {
            emit(finish(out, count_at, count));
            (out, count_at) = start(kinds.1);
            count = 0;
        }
        put(&mut out, element);
        count += 1;
    }
    emit(finish(out, count_at, count));
}

/// A bounds-checked reader over a payload.
struct Reader<'a> {
    buf: &'a [u8],
    /// The `Bytes` that `buf` is, when there is one: [`Reader::bytes`] slices it; without one
    /// (a scratch buffer) it copies.
    owner: Option<&'a Bytes>,
    pos: usize,
    /// Strings read with [`Reader::owned`] are copied out of `buf` (a whole snapshot batch,
    /// which they must not pin), rather than sliced from it (a buffer of their own).
    copy: bool,
}

impl<'a> Reader<'a> {
    fn over(buf: &'a Bytes, copy: bool) -> Reader<'a> {
        Reader {
            buf,
            owner: Some(buf),
            pos: 0,
            copy,
        }
    }
    /// Over a scratch buffer that is reused after the read: every string is copied out.
    fn scratch(buf: &'a [u8]) -> Reader<'a> {
        Reader {
            buf,
            owner: None,
            pos: 0,
            copy: true,
        }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(RecordError("truncated"))?;
        let buf: &'a [u8] = self.buf;
        let s = &buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, RecordError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, RecordError> {
        let mut b = [0u8; 2];
        b.copy_from_slice(self.take(2)?);
        Ok(u16::from_le_bytes(b))
    }
    fn u32(&mut self) -> Result<u32, RecordError> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }
    fn u64(&mut self) -> Result<u64, RecordError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
    /// A length-prefixed byte string, sliced from the payload without copying (copied when
    /// the payload is a scratch buffer).
    fn bytes(&mut self) -> Result<Bytes, RecordError> {
        let n = self.u32()? as usize;
        let start = self.pos;
        let s = self.take(n)?;
        Ok(match self.owner {
            Some(owner) => owner.slice(start..start + n),
            None => Bytes::copy_from_slice(s),
        })
    }
    /// A length-prefixed byte string, borrowed: for a value that copies it into a buffer of
    /// its own anyway.
    fn slice(&mut self) -> Result<&'a [u8], RecordError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// A length-prefixed byte string to keep: see [`Reader::copy`].
    fn owned(&mut self) -> Result<Bytes, RecordError> {
        let b = self.bytes()?;
        Ok(if self.copy {
            Bytes::copy_from_slice(&b)
        } else {
            b
        })
    }
    /// A count that cannot exceed what the remaining bytes could hold (`min_size` bytes each).
    fn count(&mut self, min_size: usize) -> Result<usize, RecordError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_size) > self.buf.len() - self.pos {
            return Err(RecordError("count larger than payload"));
        }
        Ok(n)
    }
}

/// Decode a payload written by `encode_commands` or `encode_item`.
pub fn decode(payload: &Bytes) -> Result<Record, RecordError> {
    let mut r = Reader::over(payload, true);
    let record = match r.u8()? {
        TAG_COMMANDS => {
            let now_ms = r.u64()?;
            let n = r.count(6)?;
            let mut commands = Vec::with_capacity(n);
            for _ in 0..n {
                let db = r.u16()? as usize;
                let argc = r.count(4)?;
                if argc == 0 {
                    return Err(RecordError("empty command"));
                }
                let mut args = Vec::with_capacity(argc);
                for _ in 0..argc {
                    args.push(r.bytes()?);
                }
                commands.push(LoggedCommand { db, args });
            }
            Record::Commands { now_ms, commands }
        }
        TAG_FUNCTIONS => {
            let db = r.u16()? as usize;
            let n = r.count(4)?;
            let mut codes = Vec::with_capacity(n);
            for _ in 0..n {
                codes.push(r.bytes()?);
            }
            Record::Functions { db, codes }
        }
        TAG_SNAPSHOT_ITEM => {
            let header = read_item_header(&mut r)?;
            let mut meta = ItemMeta::default();
            let value = read_item_value(header.kind, &mut r, |kind, r| {
                read_value(kind, r, &mut meta)
            })?;
            Record::Item {
                db: header.db,
                key: header.key,
                expires_at: header.expires_at,
                value,
                meta,
                more: is_more_kind(header.kind & !COMPRESSED),
            }
        }
        _ => return Err(RecordError("unknown record tag")),
    };
    if r.pos != payload.len() {
        return Err(RecordError("trailing bytes"));
    }
    Ok(record)
}

/// What every snapshot item starts with, after its tag.
struct ItemHeader {
    db: usize,
    key: Bytes,
    expires_at: Option<u64>,
    /// The value's kind, compression bit included.
    kind: u8,
}

fn read_item_header(r: &mut Reader) -> Result<ItemHeader, RecordError> {
    Ok(ItemHeader {
        db: r.u16()? as usize,
        key: r.owned()?,
        // 0 is "none"; so is u64::MAX, the store's own no-expiry mark, which it could not hold
        // as an expiry (it loads as a key without one, and decodes as one here).
        expires_at: Some(r.u64()?).filter(|&t| t != 0 && t != u64::MAX),
        kind: r.u8()?,
    })
}

fn is_more_kind(kind: u8) -> bool {
    matches!(
        kind,
        KIND_MORE_STR
            | KIND_MORE_HASH
            | KIND_MORE_ZSET
            | KIND_MORE_LIST
            | KIND_MORE_SET
            | KIND_MORE_STREAM
    )
}

/// Reads the value of an item of `kind` with `read`, which is given the kind without the
/// compression bit: from `r`, or for a compressed value from the block it decompresses to,
/// which `read` must read whole.
fn read_item_value<T>(
    kind: u8,
    r: &mut Reader,
    read: impl FnOnce(u8, &mut Reader) -> Result<T, RecordError>,
) -> Result<T, RecordError> {
    if kind & COMPRESSED == 0 {
        return read(kind, r);
    }
    let raw_len = r.u32()? as usize;
    let packed = r.take(r.buf.len() - r.pos)?;
    if raw_len > packed.len().saturating_mul(MAX_LZ4_RATIO) {
        return Err(RecordError("compressed value longer than its block allows"));
    }
    let base = kind & !COMPRESSED;
    if matches!(base, KIND_STR | KIND_MORE_STR | KIND_STR_META) && raw_len <= SCRATCH_MAX {
        // A string is copied into a buffer of its own whatever it is read from: decompressed
        // into this thread's scratch buffer, not into an allocation per value (recovery of 1 M
        // compressed 1 KiB strings spent that allocation and a copy more per value).
        return DECOMPRESS_SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            scratch.clear();
            scratch.resize(raw_len, 0);
            let n = lz4_flex::block::decompress_into(packed, &mut scratch)
                .map_err(|_| RecordError("compressed value does not decompress"))?;
            if n != raw_len {
                return Err(RecordError("compressed value of the wrong length"));
            }
            let mut inner = Reader::scratch(&scratch);
            let value = read(base, &mut inner)?;
            if inner.pos != raw_len {
                return Err(RecordError("trailing bytes in a compressed value"));
            }
            Ok(value)
        });
    }
    let raw = lz4_flex::block::decompress(packed, raw_len)
        .map_err(|_| RecordError("compressed value does not decompress"))?;
    if raw.len() != raw_len {
        return Err(RecordError("compressed value of the wrong length"));
    }
    let raw = Bytes::from(raw);
    let mut inner = Reader::over(&raw, false);
    let value = read(base, &mut inner)?;
    if inner.pos != raw.len() {
        return Err(RecordError("trailing bytes in a compressed value"));
    }
    Ok(value)
}

/// The largest decompressed string value read through [`DECOMPRESS_SCRATCH`] (a thread keeps
/// its scratch buffer at the largest size it has held).
const SCRATCH_MAX: usize = 64 << 10;

thread_local! {
    static DECOMPRESS_SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A snapshot item's value of `kind` (uncompressed), and its memcached state into `meta`.
fn read_value(kind: u8, r: &mut Reader, meta: &mut ItemMeta) -> Result<Value, RecordError> {
    Ok(match kind {
        // Sliced, not `owned`: the string value copies the bytes into its own buffer anyway
        // (one copy from the snapshot's buffer, not two).
        KIND_STR | KIND_MORE_STR => Value::string(r.slice()?),
        KIND_STR_META => {
            meta.client_flags = r.u32()?;
            meta.bits = r.u8()? & ItemMeta::PERSISTED_BITS;
            Value::string(r.slice()?)
        }
        KIND_HASH | KIND_MORE_HASH => {
            let mut h = HashValue::new();
            read_hash_into(r, &mut h)?;
            Value::hash(h)
        }
        KIND_ZSET | KIND_MORE_ZSET => {
            let mut z = ZSetValue::new();
            read_zset_into(r, &mut z)?;
            Value::zset(z)
        }
        KIND_LIST | KIND_MORE_LIST => {
            let mut l = ListValue::new();
            read_list_into(r, &mut l)?;
            Value::List(l)
        }
        KIND_SET | KIND_MORE_SET => {
            let mut s = SetValue::new();
            read_set_into(r, &mut s)?;
            Value::set(s)
        }
        KIND_STREAM | KIND_MORE_STREAM => {
            let mut st = StreamValue::new();
            if kind == KIND_STREAM {
                read_stream_head(r, &mut st)?;
            }
            read_stream_entries(r, &mut st)?;
            Value::Stream(st)
        }
        _ => return Err(RecordError("unknown value kind")),
    })
}

/// A hash's elements (count, then field and value each), inserted into `h` within Redis'
/// default limits (as a sorted set's: see [`read_zset_into`]).
fn read_hash_into(r: &mut Reader, h: &mut HashValue) -> Result<(), RecordError> {
    for _ in 0..r.count(8)? {
        let f = r.bytes()?;
        let v = r.bytes()?;
        h.insert(&f, &v, HashLimits::REDIS_DEFAULT);
    }
    Ok(())
}

/// A sorted set's elements (count, then member and score each), inserted into `z` at once: a
/// listpack if they fit Redis' default limits (a loaded set is a fresh key, as in Redis' RDB
/// load; the record layer does not see the live settings).
fn read_zset_into(r: &mut Reader, z: &mut ZSetValue) -> Result<(), RecordError> {
    let count = r.count(12)?;
    let mut pairs = Vec::with_capacity(count);
    for _ in 0..count {
        let m = r.bytes()?;
        let s = f64::from_bits(r.u64()?);
        if s.is_nan() {
            return Err(RecordError("NaN score"));
        }
        pairs.push((m, s));
    }
    z.extend(
        pairs.iter().map(|(m, s)| (&m[..], *s)),
        ZSetLimits::REDIS_DEFAULT,
    );
    Ok(())
}

/// A list's elements (count, then each element), appended to `l` at its tail, in packs of
/// Redis' default size (as a sorted set's: see [`read_zset_into`]).
fn read_list_into(r: &mut Reader, l: &mut ListValue) -> Result<(), RecordError> {
    for _ in 0..r.count(4)? {
        let e = r.bytes()?;
        l.push(End::Right, &[e], ListLimit::REDIS_DEFAULT);
    }
    Ok(())
}

/// A set's members (count, then each member), inserted into `s` within Redis' default limits
/// (as a sorted set's: see [`read_zset_into`]), which is made a hashtable at once when they
/// will not fit a smaller encoding (rather than converted on the way).
fn read_set_into(r: &mut Reader, s: &mut SetValue) -> Result<(), RecordError> {
    let count = r.count(4)?;
    s.expect(s.len() + count, SetLimits::REDIS_DEFAULT);
    for _ in 0..count {
        let m = r.bytes()?;
        if !s.insert(&m, SetLimits::REDIS_DEFAULT) {
            return Err(RecordError("a set member written twice"));
        }
    }
    Ok(())
}

/// Adds `parts` to `value`: the later parts of a value split over several items (kind 4–6, 8 or 10 items
/// of the same `db` and `key`, in order; see [`ITEM_PART_BYTES`]) that follow the item, or the
/// parts, `value` was decoded from. A hash's or sorted set's elements are inserted straight
/// into it (a list's appended at its tail; not into a collection of their own first); a string's parts are joined to it in one
/// copy (not one copy of the whole per part).
pub fn add_parts(
    value: &mut Value,
    db: usize,
    key: &[u8],
    parts: &[Bytes],
) -> Result<(), RecordError> {
    let mut strings = Vec::new();
    for part in parts {
        let mut r = Reader::over(part, false);
        if r.u8()? != TAG_SNAPSHOT_ITEM {
            return Err(RecordError("a part of a value that is not a snapshot item"));
        }
        let header = read_item_header(&mut r)?;
        if header.db != db || header.key != key {
            return Err(RecordError("a part of a value under another key"));
        }
        read_item_value(header.kind, &mut r, |kind, r| match (kind, &mut *value) {
            (KIND_MORE_STR, Value::Str(_)) => {
                strings.push(r.bytes()?);
                Ok(())
            }
            (KIND_MORE_HASH, Value::Hash(h)) => read_hash_into(r, h),
            (KIND_MORE_ZSET, Value::ZSet(z)) => read_zset_into(r, z),
            (KIND_MORE_LIST, Value::List(l)) => read_list_into(r, l),
            (KIND_MORE_SET, Value::Set(s)) => read_set_into(r, s),
            (KIND_MORE_STREAM, Value::Stream(st)) => read_stream_entries(r, st),
            _ => Err(RecordError(
                "a part of a value that is not a later part of the value's type",
            )),
        })?;
        if r.pos != part.len() {
            return Err(RecordError("trailing bytes"));
        }
    }
    if let Value::Str(s) = value {
        if !strings.is_empty() {
            let len = s.len() + strings.iter().map(Bytes::len).sum::<usize>();
            let mut joined = BytesMut::with_capacity(len);
            joined.extend_from_slice(s);
            strings
                .iter()
                .for_each(|more| joined.extend_from_slice(more));
            *s = joined.freeze().into();
        }
    }
    Ok(())
}

/// The database and key of a snapshot item, read without its value.
pub fn item_key(payload: &Bytes) -> Result<(usize, Bytes), RecordError> {
    let mut r = Reader::over(payload, true);
    if r.u8()? != TAG_SNAPSHOT_ITEM {
        return Err(RecordError("command record inside a snapshot"));
    }
    let header = read_item_header(&mut r)?;
    Ok((header.db, header.key))
}

/// Whether `payload` is a later part of a snapshot item split over several (kind 4–6, 8 or 10), read from
/// its header alone; false for anything else, malformed payloads included.
pub fn is_later_part(payload: &[u8]) -> bool {
    let key_len = match payload.get(3..7) {
        Some(b) if payload[0] == TAG_SNAPSHOT_ITEM => {
            u32::from_le_bytes(b.try_into().unwrap_or_default()) as usize
        }
        _ => return false,
    };
    let kind_at = 7usize.saturating_add(key_len).saturating_add(8);
    payload
        .get(kind_at)
        .is_some_and(|kind| is_more_kind(kind & !COMPRESSED))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gradus_store::Shard;

    #[test]
    fn commands_roundtrip() {
        let cmds = vec![
            LoggedCommand {
                db: 0,
                args: vec![Bytes::from("SET"), Bytes::from("k"), Bytes::from("v\r\n\0")],
            },
            LoggedCommand {
                db: 3,
                args: vec![Bytes::from("DEL"), Bytes::from("")],
            },
        ];
        let payload = encode_commands(1234, &cmds);
        assert_eq!(
            decode(&payload).unwrap(),
            Record::Commands {
                now_ms: 1234,
                commands: cmds.clone()
            }
        );
        // One command: encode_command writes exactly what encode_commands writes for it.
        assert_eq!(
            encode_command(99, 3, &cmds[1].args),
            encode_commands(99, &cmds[1..])
        );
    }

    #[test]
    fn the_record_length_is_known_before_encoding() {
        let cmds = [
            vec![
                Bytes::from("SET"),
                Bytes::from("k"),
                Bytes::from(vec![7u8; 1000]),
            ],
            vec![Bytes::from("DEL"), Bytes::from("a"), Bytes::from("bb")],
        ];
        let logged: Vec<_> = cmds
            .iter()
            .map(|args| LoggedCommand {
                db: 3,
                args: args.clone(),
            })
            .collect();
        let len = commands_record_len(cmds.iter().map(Vec::as_slice));
        assert_eq!(len, encode_commands(1, &logged).len());
        assert_eq!(
            commands_record_len(cmds[..1].iter().map(Vec::as_slice)),
            encode_command(1, 3, &cmds[0]).len()
        );
    }

    #[test]
    fn record_room_admits_exactly_what_a_record_under_the_limit_holds() {
        let set = |len: usize| {
            vec![
                Bytes::from("SET"),
                Bytes::from("k"),
                Bytes::from(vec![b'v'; len]),
            ]
        };
        // A whole record holds commands up to the limit, and not one byte more.
        let whole = RecordRoom::whole();
        let header = commands_record_len(std::iter::empty());
        let largest = set(MAX_RECORD_LEN - header - command_len(&set(0)));
        assert_eq!(
            commands_record_len(std::iter::once(largest.as_slice())),
            MAX_RECORD_LEN
        );
        assert!(whole.fits(&largest));
        assert!(!whole.fits(&set(MAX_RECORD_LEN - header - command_len(&set(0)) + 1)));
        // Room is used up command by command: what `fits` lets in always stays under the limit.
        let mut room = RecordRoom::after(MAX_RECORD_LEN - 100);
        let (a, b) = (set(40), set(40));
        assert!(room.fits(&a));
        room.take(&a);
        assert!(!room.fits(&b), "{room:?}");
        let taken = commands_record_len([a.as_slice()].into_iter()) - header;
        assert!(MAX_RECORD_LEN - 100 + taken <= MAX_RECORD_LEN);
        assert!(MAX_RECORD_LEN - 100 + taken + command_len(&b) > MAX_RECORD_LEN);
        // A record already over the limit (an EXEC refused before this is reached) has no room.
        assert!(!RecordRoom::after(MAX_RECORD_LEN + 1).fits(&set(0)));
    }

    /// The single item `encode_item` writes for a value below the part size.
    fn one_item(db: usize, key: &[u8], entry: &gradus_store::Entry) -> Bytes {
        let mut items = Vec::new();
        encode_item(db, key, entry.view(), true, |item| items.push(item));
        assert_eq!(items.len(), 1);
        items.pop().unwrap()
    }

    #[test]
    fn a_large_value_is_split_into_parts_that_add_up_to_it() {
        let mut h = HashValue::new();
        let mut z = ZSetValue::new();
        let mut set = SetValue::new();
        for i in 0..1000 {
            h.insert(
                format!("field{i}").as_bytes(),
                &[b'v'; 40],
                HashLimits::REDIS_DEFAULT,
            );
            z.insert(
                format!("member{i}").as_bytes(),
                f64::from(i) / 3.0,
                ZSetLimits::REDIS_DEFAULT,
            );
            set.insert(
                format!("set-member-{i}").as_bytes(),
                SetLimits::REDIS_DEFAULT,
            );
        }
        let long: Bytes = (0..10_000u32).flat_map(|i| i.to_le_bytes()).collect();
        let l = ListValue::from_items(
            (0..2000).map(|i| format!("element {i} of a list")),
            ListLimit::REDIS_DEFAULT,
        );
        let meta = ItemMeta {
            client_flags: 7,
            bits: ItemMeta::STALE,
        };
        let st = sample_stream(3000);
        let mut shard = Shard::new();
        shard.set(b"x", Value::Stream(st.clone()), None, 0);
        shard.set_with_meta(b"s", Value::string(long.clone()), Some(123), meta, 0);
        shard.set(b"h", Value::hash(h.clone()), Some(456), 0);
        shard.set(b"z", Value::zset(z.clone()), None, 0);
        shard.set(b"l", Value::List(l.clone()), Some(789), 0);
        shard.set(b"t", Value::set(set.clone()), Some(789), 0);
        for (key, whole) in [
            ("s", Value::string(long)),
            ("h", Value::hash(h)),
            ("z", Value::zset(z)),
            ("l", Value::List(l)),
            ("t", Value::set(set)),
            ("x", Value::Stream(st)),
        ] {
            let entry = shard.get(key.as_bytes(), 0).unwrap();
            let mut items = Vec::new();
            encode_item_parts(3, key.as_bytes(), entry.view(), 4096, |item| {
                items.push(item)
            });
            assert!(items.len() >= 5, "{key}: {} parts", items.len());
            // A stream's first part also holds its groups (here ~300 bytes): see
            // `put_stream_head`.
            let head = if key == "x" { 400 } else { 0 };
            assert!(
                items.iter().all(|i| i.len() < 4096 + 200 + head),
                "{key}: a part passed the size"
            );
            for (n, item) in items.iter().enumerate() {
                assert_eq!(is_later_part(item), n > 0, "{key}: part {n}");
                let Record::Item {
                    db,
                    key: k,
                    expires_at,
                    meta: m,
                    more,
                    ..
                } = decode(item).unwrap()
                else {
                    panic!("not an item");
                };
                assert_eq!(
                    (db, &k[..], expires_at, more),
                    (3, key.as_bytes(), entry.expires_at(), n > 0)
                );
                if n == 0 {
                    assert_eq!(m.client_flags, if key == "s" { 7 } else { 0 });
                }
            }
            let Record::Item { mut value, .. } = decode(&items[0]).unwrap() else {
                panic!("not an item");
            };
            add_parts(&mut value, 3, key.as_bytes(), &items[1..]).unwrap();
            assert_eq!(value, whole, "{key}");
            assert_eq!(item_key(&items[0]).unwrap(), (3, Bytes::from(key)));
            assert_eq!(item_key(&items[2]).unwrap(), (3, Bytes::from(key)));
            // Parts added in two steps (a value whose parts came in two batches) add up too.
            let Record::Item { mut value, .. } = decode(&items[0]).unwrap() else {
                panic!("not an item");
            };
            add_parts(&mut value, 3, key.as_bytes(), &items[1..3]).unwrap();
            assert_ne!(value, whole, "{key}");
            add_parts(&mut value, 3, key.as_bytes(), &items[3..]).unwrap();
            assert_eq!(value, whole, "{key}");
            // A part is refused under another key or database, after a value of another
            // type, or when it is a first item rather than a later part.
            let Record::Item { mut value, .. } = decode(&items[0]).unwrap() else {
                panic!("not an item");
            };
            assert!(add_parts(&mut value, 3, b"other", &items[1..2]).is_err());
            assert!(add_parts(&mut value, 4, key.as_bytes(), &items[1..2]).is_err());
            assert!(add_parts(&mut value, 3, key.as_bytes(), &items[0..1]).is_err());
            let mut wrong_type = if key == "s" {
                Value::hash(HashValue::new())
            } else {
                Value::string(Bytes::from_static(b"x"))
            };
            assert!(add_parts(&mut wrong_type, 3, key.as_bytes(), &items[1..2]).is_err());
        }
    }

    /// Regression (found by the `snapshot_item` fuzz target): an item whose expiry field is
    /// u64::MAX decoded with that expiry, but the store keeps u64::MAX as "no expiry", so the
    /// key loaded without one and re-encoded differently from what was decoded.
    #[test]
    fn an_item_expiring_at_the_no_expiry_mark_decodes_as_one_without_expiry() {
        let mut shard = Shard::new();
        let marker = 0x1122_3344_5566_7788u64;
        shard.set_with_meta(
            b"k",
            Value::string(Bytes::from_static(b"v")),
            Some(marker),
            ItemMeta::default(),
            0,
        );
        let mut items = Vec::new();
        let entry = shard.get(b"k", 0).expect("stored");
        encode_item(0, b"k", entry.view(), false, |item| items.push(item));
        let [item] = &items[..] else {
            panic!("one item")
        };
        let at = item
            .windows(8)
            .position(|w| w == marker.to_le_bytes())
            .expect("the expiry is in the item");
        let mut patched = item.to_vec();
        patched[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        let record = decode(&Bytes::from(patched)).expect("decodes");
        let Record::Item { expires_at, .. } = &record else {
            panic!("an item: {record:?}")
        };
        assert_eq!(*expires_at, None);
        for compress in [false, true] {
            let [again] = &reencode_item(&record, compress)[..] else {
                panic!("one item")
            };
            assert_eq!(decode(again).expect("decodes"), record);
        }
    }

    /// A stream of `n` entries over several nodes, with tombstones, a trimmed head, changed
    /// metadata and two groups with pending entries and consumers.
    fn sample_stream(n: u64) -> StreamValue {
        use gradus_store::stream::{NewId, NodeLimits, Trim};
        let mut st = StreamValue::new();
        for i in 1..=n {
            let fields: Vec<Bytes> = if i % 7 == 0 {
                vec![
                    Bytes::from("other"),
                    Bytes::from(format!("{i}")),
                    Bytes::from("x"),
                    Bytes::new(),
                ]
            } else {
                vec![Bytes::from("f"), Bytes::from(format!("value {i}"))]
            };
            st.add(
                NewId::Exact(StreamId::new(i, i % 3)),
                &fields,
                0,
                NodeLimits::REDIS_DEFAULT,
            )
            .unwrap();
        }
        for i in (5..n).step_by(11) {
            st.delete(StreamId::new(i, i % 3));
        }
        st.after_deletions(false);
        st.trim(Trim::MinId(StreamId::new(150, 0)), false, 0);
        st.create_group(b"g1", StreamId::new(40, 0), 12);
        st.create_group(b"g2", StreamId::ZERO, -1);
        let g = st.group_mut(b"g1").unwrap();
        for (c, id) in [("alice", 200), ("bob", 201), ("alice", 305)] {
            let name = Bytes::from(c);
            g.consumer(&name, 1_000);
            g.assign(StreamId::new(id, id % 3), &name, 2_000 + id, 3);
        }
        g.consumer(b"idle", 5);
        st
    }

    /// A set in each encoding (intset, listpack, hashtable), under its encoding's name.
    fn set_of_each_encoding() -> Vec<(&'static str, SetValue)> {
        let mut ints = SetValue::new();
        let mut pack = SetValue::new();
        let mut table = SetValue::new();
        for i in -20..20i64 {
            ints.insert(i.to_string().as_bytes(), SetLimits::REDIS_DEFAULT);
            pack.insert(format!("m{i}").as_bytes(), SetLimits::REDIS_DEFAULT);
            table.insert(
                format!("{i}").repeat(30).as_bytes(),
                SetLimits::REDIS_DEFAULT,
            );
        }
        table.insert(b"", SetLimits::REDIS_DEFAULT);
        let sets = vec![("intset", ints), ("listpack", pack), ("hashtable", table)];
        for (name, set) in &sets {
            assert_eq!(set.encoding(), *name);
        }
        sets
    }

    #[test]
    fn a_set_loads_in_the_encoding_its_members_call_for() {
        let mut shard = Shard::new();
        for (key, set) in set_of_each_encoding() {
            shard.set(key.as_bytes(), Value::set(set.clone()), None, 0);
            let payload = one_item(0, key.as_bytes(), shard.get(key.as_bytes(), 0).unwrap());
            assert_eq!(kind_of(&payload, key.as_bytes()) & !COMPRESSED, KIND_SET);
            let Record::Item {
                value: Value::Set(got),
                ..
            } = decode(&payload).unwrap()
            else {
                panic!("{key}: not a set item");
            };
            assert_eq!(got.encoding(), key);
            assert_eq!(got, set);
            // A listpack keeps its order through a snapshot.
            let order = |s: &SetValue| s.iter().map(|m| m.to_bytes()).collect::<Vec<_>>();
            if key != "hashtable" {
                assert_eq!(order(&got), order(&set), "{key}");
            }
        }
        // A member written twice is corruption, not a smaller set.
        let twice = b"\x02\0\0\x01\0\0\0k\0\0\0\0\0\0\0\0\x09\x02\0\0\0\x01\0\0\0a\x01\0\0\0a";
        assert!(decode(&Bytes::from_static(twice)).is_err());
        let once = b"\x02\0\0\x01\0\0\0k\0\0\0\0\0\0\0\0\x09\x02\0\0\0\x01\0\0\0a\x01\0\0\0b";
        assert!(decode(&Bytes::from_static(once)).is_ok());
    }

    #[test]
    fn items_roundtrip_every_kind() {
        let mut shard = Shard::new();
        let mut h = HashValue::new();
        h.insert(b"f", b"v", HashLimits::REDIS_DEFAULT);
        let mut z = ZSetValue::new();
        z.insert(b"m", -1.5, ZSetLimits::REDIS_DEFAULT);
        let sets = set_of_each_encoding();
        shard.set(b"s", Value::string(Bytes::from("x")), Some(99), 0);
        shard.set(b"h", Value::hash(h.clone()), None, 0);
        shard.set(b"z", Value::zset(z.clone()), None, 0);
        // A small list and one kept in several packs, with an empty and a long element.
        let small = ListValue::from_items(["a", "", "c"], ListLimit::REDIS_DEFAULT);
        let large = ListValue::from_items(
            (0..3000).map(|i| "x".repeat(i % 40)),
            ListLimit::REDIS_DEFAULT,
        );
        assert_eq!(large.encoding(), "quicklist");
        shard.set(b"l", Value::List(small.clone()), Some(12), 0);
        shard.set(b"q", Value::List(large.clone()), None, 0);
        for (key, set) in &sets {
            shard.set(key.as_bytes(), Value::set(set.clone()), Some(7), 0);
        }
        let small_stream = sample_stream(400);
        shard.set(b"st", Value::Stream(small_stream.clone()), Some(5), 0);
        shard.set(b"empty", Value::Stream(StreamValue::new()), None, 0);
        let mut cases = vec![
            ("st", Value::Stream(small_stream), Some(5)),
            ("empty", Value::Stream(StreamValue::new()), None),
            ("s", Value::string(Bytes::from("x")), Some(99)),
            ("h", Value::hash(h), None),
            ("z", Value::zset(z), None),
            ("l", Value::List(small), Some(12)),
            ("q", Value::List(large), None),
        ];
        cases.extend(sets.into_iter().map(|(k, s)| (k, Value::set(s), Some(7))));
        for (key, value, ttl) in cases {
            let entry = shard.get(key.as_bytes(), 0).unwrap();
            let payload = one_item(7, key.as_bytes(), entry);
            assert_eq!(
                decode(&payload).unwrap(),
                Record::Item {
                    db: 7,
                    key: Bytes::from(key),
                    expires_at: ttl,
                    value,
                    meta: ItemMeta::default(),
                    more: false,
                }
            );
        }
    }

    #[test]
    fn memcached_flags_and_stale_bit_roundtrip() {
        let mut shard = Shard::new();
        let meta = ItemMeta {
            client_flags: 0xdead_beef,
            bits: ItemMeta::STALE,
        };
        shard.set_with_meta(b"m", Value::string(Bytes::from("v")), Some(5), meta, 0);
        let payload = one_item(1, b"m", shard.get(b"m", 0).unwrap());
        assert_eq!(payload[1 + 2 + 4 + 1 + 8], 3, "kind 3 is used");
        match decode(&payload).unwrap() {
            Record::Item {
                meta: got, value, ..
            } => {
                assert_eq!(got.client_flags, 0xdead_beef);
                assert!(got.has(ItemMeta::STALE));
                assert_eq!(value, Value::string(Bytes::from("v")));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn kind_0_items_written_before_kind_3_still_load() {
        // A string item as the earlier format wrote it: db 2, key "k", no TTL, kind 0, "v".
        let old =
            b"\x02\x02\x00\x01\x00\x00\x00k\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00v";
        assert_eq!(
            decode(&Bytes::from_static(old)).unwrap(),
            Record::Item {
                db: 2,
                key: Bytes::from("k"),
                expires_at: None,
                value: Value::string(Bytes::from("v")),
                meta: ItemMeta::default(),
                more: false,
            }
        );
    }

    /// The kind byte of an item for key `key`.
    fn kind_of(item: &[u8], key: &[u8]) -> u8 {
        item[1 + 2 + 4 + key.len() + 8]
    }

    /// A store with one value of each kind that compresses well, and one string that does not.
    fn compressible_entries() -> (Shard, Vec<(&'static str, Value, bool)>) {
        let mut h = HashValue::new();
        let mut z = ZSetValue::new();
        let mut set = SetValue::new();
        for i in 0..200 {
            h.insert(
                format!("field:{i}").as_bytes(),
                b"some session data, ",
                HashLimits::REDIS_DEFAULT,
            );
            z.insert(
                format!("member:{i}").as_bytes(),
                f64::from(i),
                ZSetLimits::REDIS_DEFAULT,
            );
            set.insert(
                format!("tag:course:{i}").as_bytes(),
                SetLimits::REDIS_DEFAULT,
            );
        }
        let text = Bytes::from("a:3:{s:4:\"user\";i:42;} ".repeat(200));
        let noise: Bytes = {
            use rand::{RngCore, SeedableRng};
            let mut b = vec![0u8; 4096];
            rand::rngs::StdRng::seed_from_u64(7).fill_bytes(&mut b);
            b.into()
        };
        let meta = ItemMeta {
            client_flags: 9,
            bits: ItemMeta::STALE,
        };
        let mut shard = Shard::new();
        shard.set(b"s", Value::string(text.clone()), Some(77), 0);
        shard.set_with_meta(b"m", Value::string(text.clone()), None, meta, 0);
        shard.set(b"h", Value::hash(h.clone()), None, 0);
        shard.set(b"z", Value::zset(z.clone()), Some(5), 0);
        shard.set(b"n", Value::string(noise.clone()), None, 0);
        shard.set(b"t", Value::set(set.clone()), None, 0);
        let values = vec![
            ("t", Value::set(set), true),
            ("s", Value::string(text.clone()), true),
            ("m", Value::string(text), true),
            ("h", Value::hash(h), true),
            ("z", Value::zset(z), true),
            ("n", Value::string(noise), false),
        ];
        (shard, values)
    }

    #[test]
    fn values_that_compress_are_stored_compressed_and_read_back_whole() {
        let (mut shard, values) = compressible_entries();
        for (key, value, compresses) in values {
            let entry = shard.get(key.as_bytes(), 0).unwrap();
            let plain = {
                let mut items = Vec::new();
                encode_item(1, key.as_bytes(), entry.view(), false, |i| items.push(i));
                items.pop().unwrap()
            };
            let item = one_item(1, key.as_bytes(), entry);
            let kind = kind_of(&item, key.as_bytes());
            assert_eq!(kind & COMPRESSED != 0, compresses, "{key}: kind {kind}");
            assert_eq!(kind & !COMPRESSED, kind_of(&plain, key.as_bytes()));
            if compresses {
                assert!(
                    item.len() * 2 < plain.len(),
                    "{key}: {} of {}",
                    item.len(),
                    plain.len()
                );
            } else {
                assert_eq!(item, plain, "{key}: kept as it was");
            }
            let Record::Item {
                key: k,
                expires_at,
                value: got,
                meta,
                more,
                ..
            } = decode(&item).unwrap()
            else {
                panic!("{key}: not an item");
            };
            assert_eq!(
                (&k[..], expires_at, more),
                (key.as_bytes(), entry.expires_at(), false)
            );
            assert_eq!(got, value, "{key}");
            assert_eq!(meta.client_flags, entry.meta().client_flags, "{key}");
            assert_eq!(
                meta.bits,
                entry.meta().bits & ItemMeta::PERSISTED_BITS,
                "{key}"
            );
            assert_eq!(decode(&plain).unwrap(), decode(&item).unwrap(), "{key}");
        }
    }

    #[test]
    fn random_bytes_are_not_tried_and_text_or_serialized_values_are() {
        use rand::{RngCore, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for len in [64, 100, 256, 4096] {
            let mut b = vec![0u8; len];
            rng.fill_bytes(&mut b);
            assert!(looks_random(&b), "random, {len} bytes");
        }
        let session = "a:2:{s:4:\"user\";i:42;s:4:\"cart\";a:1:{i:0;s:5:\"apple\";}}".repeat(8);
        let json = "{\"id\":12345,\"name\":\"Ada\",\"tags\":[\"x\",\"y\"],\"ok\":true}".repeat(8);
        let hex: String = (0..256u32)
            .map(|i| format!("{:x}", (i * 7919) % 16))
            .collect();
        for text in [session, json, hex, "v".repeat(1024)] {
            assert!(!looks_random(text.as_bytes()), "{text}");
        }
    }

    #[test]
    fn compressed_later_parts_are_still_known_as_later_parts() {
        let (mut shard, _) = compressible_entries();
        let entry = shard.get(b"h", 0).unwrap();
        let mut items = Vec::new();
        encode_item_parts(0, b"h", entry.view(), 512, |item| {
            items.push(compressed(item, 1 + 2 + 4 + 1 + 8))
        });
        assert!(items.len() > 3);
        for (n, item) in items.iter().enumerate() {
            assert_ne!(kind_of(item, b"h") & COMPRESSED, 0, "part {n} compressed");
            assert_eq!(is_later_part(item), n > 0, "part {n}");
            assert!(matches!(decode(item), Ok(Record::Item { more, .. }) if more == (n > 0)));
        }
    }

    #[test]
    fn a_damaged_compressed_value_is_an_error_not_a_panic_nor_a_huge_allocation() {
        let (mut shard, _) = compressible_entries();
        let item = one_item(0, b"s", shard.get(b"s", 0).unwrap());
        let raw_len_at = 1 + 2 + 4 + 1 + 8 + 1;
        let with_raw_len = |len: u32| {
            let mut b = item.to_vec();
            b[raw_len_at..raw_len_at + 4].copy_from_slice(&len.to_le_bytes());
            Bytes::from(b)
        };
        let raw_len = u32::from_le_bytes(item[raw_len_at..raw_len_at + 4].try_into().unwrap());
        // Claims far more than the block can hold: refused before allocating it.
        assert!(decode(&with_raw_len(u32::MAX)).is_err());
        // One byte more or less than the block holds.
        assert!(decode(&with_raw_len(raw_len + 1)).is_err());
        assert!(decode(&with_raw_len(raw_len - 1)).is_err());
        // Cut short, or with a byte changed anywhere in the block: an error or (where LZ4 cannot
        // tell) another value, never a panic.
        for cut in raw_len_at..item.len() {
            assert!(decode(&item.slice(..cut)).is_err(), "cut at {cut}");
        }
        for at in raw_len_at + 4..item.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut b = item.to_vec();
                b[at] ^= flip;
                let _ = decode(&Bytes::from(b));
            }
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in [
            &b""[..],
            &b"\x01"[..],
            &b"\x01\0\0\0\0\0\0\0\0\xff\xff\xff\xff"[..],
            &b"\x02\0\0\x05\0\0\0ab"[..],
            &b"\x09"[..],
            // A compressed string claiming 5 bytes from an empty block.
            &b"\x02\0\0\x01\0\0\0k\0\0\0\0\0\0\0\0\x80\x05\0\0\0"[..],
        ] {
            assert!(decode(&Bytes::copy_from_slice(bad)).is_err());
        }
    }
}
