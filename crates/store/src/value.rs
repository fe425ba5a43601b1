//! The value types a key can hold: strings, hashes, sorted sets (see [`crate::zset`]), lists (see
//! [`crate::list`]) and sets (see [`crate::set`]).
//!
//! Each collection keeps a running byte count so `mem_size()` is O(1); the shard uses it to account
//! memory on every write without walking the value. Nothing here knows about keys, expiry or locking.

use crate::heapstr::HeapStr;
use crate::list::ListValue;
use crate::set::SetValue;
use crate::stream::StreamValue;
use crate::string::StrValue;
use crate::table::reserve_in_class;
use crate::zset::ZSetValue;
use bytes::Bytes;
use hashbrown::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

/// Fixed per-item overhead used by the memory accounting (pointer-sized headers, hash slots).
/// An estimate, like Redis' `used_memory` is for encodings; it only has to be monotone and stable.
pub const ITEM_OVERHEAD: usize = 32;

/// Redis' default `hash-max-listpack-entries`: most fields a listpack hash holds ...
pub const HASH_MAX_LISTPACK_ENTRIES: usize = 512;
/// ... and its default `*-max-listpack-value`: longest field or value, in bytes (see
/// [`HashLimits`]; for sorted sets [`crate::zset::ZSetLimits`], for sets [`crate::SetLimits`]).
pub const LISTPACK_MAX_VALUE: usize = 64;

/// The limits a hash is kept packed within: the live `hash-max-listpack-entries` and
/// `hash-max-listpack-value` settings, read by the caller for each write (as
/// [`crate::zset::ZSetLimits`] for sorted sets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashLimits {
    /// Most fields.
    pub entries: usize,
    /// Longest field or value, in bytes.
    pub value: usize,
}

impl HashLimits {
    /// Redis' defaults (for values built without a server's settings: tests, decoders).
    pub const REDIS_DEFAULT: HashLimits = HashLimits {
        entries: HASH_MAX_LISTPACK_ENTRIES,
        value: LISTPACK_MAX_VALUE,
    };
}

impl Default for HashLimits {
    fn default() -> Self {
        Self::REDIS_DEFAULT
    }
}

/// The most bytes one packed hash buffer holds: Redis' listpack safety limit (`lpSafeToAdd`,
/// 1 GiB). Only limits far above Redis' defaults reach it; a hash that would pass it becomes a
/// map.
const PACKED_MAX_BYTES: usize = 1 << 30;
pub use crate::string::EMBSTR_MAX_LEN;

/// The encoding Redis gives a string value that SET (or INCR, a load …) stored
/// (`OBJECT ENCODING`): `int` for the canonical form of an `i64` (no sign but `-`, no leading
/// zeros, at most 20 bytes), `embstr` up to [`EMBSTR_MAX_LEN`] bytes, `raw` beyond. (A string an
/// in-place edit made is `raw` whatever its bytes: see [`Value::encoding`].)
pub fn string_encoding(bytes: &[u8]) -> &'static str {
    if gradus_proto::parse_strict_i64(bytes).is_some() {
        "int"
    } else if bytes.len() <= EMBSTR_MAX_LEN {
        "embstr"
    } else {
        "raw"
    }
}

/// The kind of a value, as `TYPE` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    String,
    Hash,
    ZSet,
    List,
    Set,
    Stream,
}

impl ValueKind {
    /// The name `TYPE` replies with.
    pub fn name(self) -> &'static str {
        match self {
            ValueKind::String => "string",
            ValueKind::Hash => "hash",
            ValueKind::ZSet => "zset",
            ValueKind::List => "list",
            ValueKind::Set => "set",
            ValueKind::Stream => "stream",
        }
    }

    /// Parse a `SCAN ... TYPE name` argument (case-insensitive).
    pub fn parse(name: &[u8]) -> Option<ValueKind> {
        match name.to_ascii_lowercase().as_slice() {
            b"string" => Some(ValueKind::String),
            b"hash" => Some(ValueKind::Hash),
            b"zset" => Some(ValueKind::ZSet),
            b"list" => Some(ValueKind::List),
            b"set" => Some(ValueKind::Set),
            b"stream" => Some(ValueKind::Stream),
            _ => None,
        }
    }
}

/// A stored value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Short strings inline, long ones shared (see [`crate::string`]).
    Str(StrValue),
    /// Inline: a packed hash is its buffer and its field count (32 bytes, no larger than the
    /// string case: an entry holds a `Value` inline for every key, see the size test).
    Hash(HashValue),
    /// Inline: a sorted set is as small as a `Bytes` (a listpack is just its exact-sized buffer).
    ZSet(ZSetValue),
    List(ListValue),
    /// Inline: a set is as small as a `Bytes` (an intset is just its exact-sized array).
    Set(SetValue),
    /// Boxed inside (see [`crate::stream`]): a stream is as small as a pointer here.
    Stream(StreamValue),
}

impl Value {
    /// A string value: inline when short (see [`crate::string`]).
    pub fn string(s: impl Into<StrValue>) -> Value {
        Value::Str(s.into())
    }

    /// A string value holding a copy of `bytes` (no intermediate buffer for a short one).
    pub fn string_copy(bytes: &[u8]) -> Value {
        Value::Str(StrValue::copy_from_slice(bytes))
    }

    /// A string value an in-place edit made (APPEND to an existing string, SETRANGE, SETBIT,
    /// BITFIELD, BITOP): `OBJECT ENCODING` says `raw` for it, as Redis does (see
    /// [`StrValue::raw`]).
    pub fn raw_string(bytes: Bytes) -> Value {
        Value::Str(StrValue::raw(bytes))
    }

    /// A hash value (held inline: see the enum).
    pub fn hash(h: HashValue) -> Value {
        Value::Hash(h)
    }

    /// A sorted-set value (held inline: see the enum).
    pub fn zset(z: ZSetValue) -> Value {
        Value::ZSet(z)
    }

    /// A set value (held inline: see the enum).
    pub fn set(s: SetValue) -> Value {
        Value::Set(s)
    }

    pub fn kind(&self) -> ValueKind {
        match self {
            Value::Str(_) => ValueKind::String,
            Value::Hash(_) => ValueKind::Hash,
            Value::ZSet(_) => ValueKind::ZSet,
            Value::List(_) => ValueKind::List,
            Value::Set(_) => ValueKind::Set,
            Value::Stream(_) => ValueKind::Stream,
        }
    }

    /// Approximate heap bytes held by the value. O(1).
    pub fn mem_size(&self) -> usize {
        self.view().mem_size()
    }

    /// The hash, if this value is one.
    pub fn as_hash(&self) -> Option<&HashValue> {
        match self {
            Value::Hash(h) => Some(h),
            _ => None,
        }
    }

    /// The sorted set, if this value is one.
    pub fn as_zset(&self) -> Option<&ZSetValue> {
        match self {
            Value::ZSet(z) => Some(z),
            _ => None,
        }
    }

    /// The list, if this value is one.
    pub fn as_list(&self) -> Option<&ListValue> {
        match self {
            Value::List(l) => Some(l),
            _ => None,
        }
    }

    /// The stream, if this value is one.
    pub fn as_stream(&self) -> Option<&StreamValue> {
        match self {
            Value::Stream(s) => Some(s),
            _ => None,
        }
    }

    /// The set, if this value is one.
    pub fn as_set(&self) -> Option<&SetValue> {
        match self {
            Value::Set(s) => Some(s),
            _ => None,
        }
    }

    /// The encoding Redis would report for this value (`OBJECT ENCODING`): each type names its own.
    pub fn encoding(&self) -> &'static str {
        match self {
            Value::Str(b) if b.is_raw() => "raw",
            Value::Str(b) => string_encoding(b),
            Value::Hash(h) => h.encoding(),
            Value::ZSet(z) => z.encoding(),
            Value::List(l) => l.encoding(),
            Value::Set(s) => s.encoding(),
            Value::Stream(_) => "stream",
        }
    }

    /// Roughly how many allocations freeing the value takes, as Redis' `lazyfreeGetFreeEffort`
    /// reckons it: 1 for a string or a packed collection (one buffer), the element count of a
    /// hashtable or skiplist form, the pack count of a large list, the node count of a stream
    /// plus its groups times the first group's pending entries. UNLINK frees a value past
    /// Redis' threshold (64) on a background thread.
    pub fn free_effort(&self) -> usize {
        let packed = matches!(
            self.encoding(),
            "listpack" | "intset" | "raw" | "embstr" | "int"
        );
        match self {
            _ if packed => 1,
            Value::Str(_) => 1,
            Value::Hash(h) => h.len(),
            Value::ZSet(z) => z.len(),
            Value::List(l) => l.pack_count(),
            Value::Set(s) => s.len(),
            Value::Stream(st) => {
                let groups = st.groups();
                let pel = groups.values().next().map_or(0, |g| g.pel.len());
                st.node_count() + groups.len() * (1 + pel)
            }
        }
    }

    /// Collections that become empty are deleted, as in Redis.
    pub fn is_empty_collection(&self) -> bool {
        match self {
            Value::Str(_) => false,
            Value::Hash(h) => h.is_empty(),
            Value::ZSet(z) => z.is_empty(),
            Value::List(l) => l.is_empty(),
            Value::Set(s) => s.is_empty(),
            // A stream stays when its last entry goes (Redis keeps it, with its groups).
            Value::Stream(_) => false,
        }
    }
}

/// A hash or sorted set this large is kept as [`HASH_BUCKETS`] separately shared parts (see
/// [`Parts`]).
pub const HASH_SPLIT_LEN: usize = 8192;
/// How many parts a large hash or sorted set is kept in.
pub const HASH_BUCKETS: usize = 64;

/// The fixed hasher that picks a field's part and orders HSCAN and ZSCAN (the same for every
/// collection and every run, so a cursor keeps its meaning when a collection is split; the
/// parts themselves are ordinary maps with the default, randomly keyed hasher).
pub type FieldHasher = std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;

/// Field (or member) → `V`, as one map while small and as [`HASH_BUCKETS`] maps behind `Arc`s
/// (by a fixed hash of the field) from [`HASH_SPLIT_LEN`] entries on.
///
/// Cloning a split map — which a snapshot does when it copies or keeps a value — bumps 64
/// reference counts instead of copying a million entries, and the first write to it afterwards
/// copies only the part it changes (1/64 of it). Both used to hold the shard's lock for
/// ~30–45 ms with a million fields. A map stays split once it was (it may shrink again).
#[derive(Debug, Clone)]
pub(crate) enum Parts<V> {
    Flat(HashMap<HeapStr, V>),
    Split(Box<[Arc<HashMap<HeapStr, V>>]>),
}

impl<V> Default for Parts<V> {
    fn default() -> Self {
        Parts::Flat(HashMap::new())
    }
}

pub(crate) fn bucket_of(field: &[u8]) -> usize {
    (FieldHasher::default().hash_one(field) >> 58) as usize % HASH_BUCKETS
}

impl<V: Clone> Parts<V> {
    pub(crate) fn map_of(&self, field: &[u8]) -> &HashMap<HeapStr, V> {
        match self {
            Parts::Flat(map) => map,
            Parts::Split(parts) => &parts[bucket_of(field)],
        }
    }
    /// The map `field` belongs in, copied first if a snapshot shares it.
    pub(crate) fn map_of_mut(&mut self, field: &[u8]) -> &mut HashMap<HeapStr, V> {
        match self {
            Parts::Flat(map) => map,
            Parts::Split(parts) => Arc::make_mut(&mut parts[bucket_of(field)]),
        }
    }
    fn get(&self, field: &[u8]) -> Option<&V> {
        self.map_of(field).get(field)
    }
    /// The maps the entries are kept in: one while flat, [`HASH_BUCKETS`] once split.
    pub(crate) fn maps(&self) -> impl Iterator<Item = &HashMap<HeapStr, V>> + Clone {
        let (flat, parts) = match self {
            Parts::Flat(map) => (Some(map), &[][..]),
            Parts::Split(parts) => (None, &parts[..]),
        };
        flat.into_iter().chain(parts.iter().map(|part| &**part))
    }
    /// The `index`th entry in [`Parts::iter`] order: O(parts + one part's length).
    pub(crate) fn nth(&self, mut index: usize) -> Option<(&HeapStr, &V)> {
        for map in self.maps() {
            if index < map.len() {
                return map.iter().nth(index);
            }
            index -= map.len();
        }
        None
    }
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&HeapStr, &V)> + Clone {
        self.maps().flat_map(|map| map.iter())
    }
    pub(crate) fn is_split(&self) -> bool {
        matches!(self, Parts::Split(_))
    }
    /// Splits a flat map that has reached [`HASH_SPLIT_LEN`] entries (`len`).
    pub(crate) fn grew_to(&mut self, len: usize) {
        let Parts::Flat(map) = self else {
            return;
        };
        if len < HASH_SPLIT_LEN {
            return;
        }
        let mut parts: Vec<HashMap<HeapStr, V>> = (0..HASH_BUCKETS)
            .map(|_| HashMap::with_capacity(map.len() / HASH_BUCKETS * 2))
            .collect();
        for (field, value) in map.drain() {
            parts[bucket_of(&field)].insert(field, value);
        }
        *self = Parts::Split(parts.into_iter().map(Arc::new).collect());
    }
}

/// A hash: field → value, with a running byte count. Within the listpack limits it was written
/// under ([`HashLimits`], the live settings, passed in by the caller) it is one packed buffer
/// (insertion order, as Redis' listpack); past them a hash map, kept in shared parts once large
/// ([`Parts`]), and it stays a map (Redis never converts back either).
///
/// Held inline in its key's entry (see [`Value`]): a packed hash costs its buffer and nothing
/// else (it was boxed, a 48-byte allocation per hash, measured in `docs/benchmarks/memory.md`).
#[derive(Debug, Clone)]
pub struct HashValue {
    repr: HashRepr,
}

#[derive(Debug, Clone)]
enum HashRepr {
    /// `[field length][field][value length][value]` per field, in insertion order, the lengths
    /// LEB128 (`crate::varint`: one byte up to 127, so a hash within Redis' default limits
    /// costs what it did with byte lengths, and a configured value limit above 255 still packs).
    /// Memory only: snapshots and log records write fields and values, not this buffer. `len`
    /// is the field count (a packed hash holds at most `hash-max-listpack-entries` fields, and
    /// never more than [`PACKED_MAX_BYTES`] bytes, so it fits 32 bits).
    Packed { buf: Vec<u8>, len: u32 },
    /// Boxed: most hashes are small, and keep the packed form's 32 bytes.
    Map(Box<MapHash>),
}

/// A hash in map form: its parts, field count and heap bytes.
#[derive(Debug, Clone)]
struct MapHash {
    parts: Parts<HeapStr>,
    len: usize,
    /// Heap bytes of the parts (see [`map_field_bytes`]).
    bytes: usize,
}

impl Default for HashValue {
    fn default() -> Self {
        HashValue {
            repr: HashRepr::Packed {
                buf: Vec::new(),
                len: 0,
            },
        }
    }
}

impl PartialEq for HashValue {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(f, v)| other.get(f) == Some(v))
    }
}

/// One field of a packed hash, where it is in the buffer.
struct PackedField<'a> {
    /// Offset of the field's length.
    start: usize,
    field: &'a [u8],
    /// Offset of the value's length.
    value_at: usize,
    value: &'a [u8],
    /// Offset just past the value.
    end: usize,
}

/// The fields of a packed hash, in order.
#[derive(Clone)]
struct PackedFields<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Iterator for PackedFields<'a> {
    type Item = PackedField<'a>;
    fn next(&mut self) -> Option<Self::Item> {
        let start = self.at;
        if start >= self.buf.len() {
            return None;
        }
        let (flen, fat) = crate::varint::decode(self.buf, start);
        let value_at = fat + flen;
        let (vlen, vat) = crate::varint::decode(self.buf, value_at);
        let end = vat + vlen;
        self.at = end;
        Some(PackedField {
            start,
            field: &self.buf[fat..value_at],
            value_at,
            value: &self.buf[vat..end],
            end,
        })
    }
}

/// Appends `bytes` with its LEB128 length to a packed hash's buffer.
fn put_packed(buf: &mut Vec<u8>, bytes: &[u8]) {
    let (len, k) = crate::varint::encode(bytes.len());
    buf.extend_from_slice(&len[..k]);
    buf.extend_from_slice(bytes);
}

/// Bytes `bytes` takes in a packed hash's buffer (its length and itself).
fn packed_len(bytes: &[u8]) -> usize {
    crate::varint::len(bytes.len()) + bytes.len()
}

fn packed_fields(buf: &[u8]) -> PackedFields<'_> {
    PackedFields { buf, at: 0 }
}

/// Heap bytes of one field of a hash in map form: its slot (two [`HeapStr`]s) at the usual
/// fill and the two allocations.
fn map_field_bytes(field: usize, value: usize) -> usize {
    HASH_MAP_SLOT
        + crate::table::alloc_class(HeapStr::alloc_len(field))
        + crate::table::alloc_class(HeapStr::alloc_len(value))
}

/// A map slot of a hash (two 8-byte [`HeapStr`]s and a control byte) at ~70 % fill.
const HASH_MAP_SLOT: usize = 25;

impl HashValue {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn len(&self) -> usize {
        match &self.repr {
            HashRepr::Packed { len, .. } => *len as usize,
            HashRepr::Map(m) => m.len,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether the hash is kept in shared parts (for tests).
    pub fn is_split(&self) -> bool {
        matches!(&self.repr, HashRepr::Map(m) if m.parts.is_split())
    }
    /// Approximate heap bytes held beside the entry that holds the hash inline. O(1).
    pub fn mem_size(&self) -> usize {
        match &self.repr {
            HashRepr::Packed { buf, .. } => buf.capacity(),
            HashRepr::Map(m) => std::mem::size_of::<MapHash>() + m.bytes,
        }
    }
    pub fn get(&self, field: &[u8]) -> Option<&[u8]> {
        match &self.repr {
            HashRepr::Packed { buf, .. } => packed_fields(buf)
                .find(|p| p.field == field)
                .map(|p| p.value),
            HashRepr::Map(m) => m.parts.get(field).map(|v| &v[..]),
        }
    }
    pub fn contains(&self, field: &[u8]) -> bool {
        self.get(field).is_some()
    }
    /// The packed form becomes a map (for good): past the listpack limits.
    fn convert_to_map(&mut self, size_hint: usize) {
        let HashRepr::Packed { buf, len } = &self.repr else {
            return;
        };
        let len = *len as usize;
        let mut map = HashMap::with_capacity(size_hint.max(len + 1));
        let mut bytes = 0;
        for p in packed_fields(buf) {
            bytes += map_field_bytes(p.field.len(), p.value.len());
            map.insert(
                HeapStr::copy_from_slice(p.field),
                HeapStr::copy_from_slice(p.value),
            );
        }
        self.repr = HashRepr::Map(Box::new(MapHash {
            parts: Parts::Flat(map),
            len,
            bytes,
        }));
    }
    /// About to write `new_fields` fields (an HSET's pairs, a RESTORE's fields): a packed hash
    /// that could not hold that many becomes a map now (Redis' `hashTypeTryConversion`, which
    /// counts the arguments, duplicates included).
    pub fn expect(&mut self, new_fields: usize, limits: HashLimits) {
        if new_fields > limits.entries {
            self.convert_to_map(new_fields);
        }
    }
    /// Insert or overwrite; true when the field is new. A packed hash stays packed while it
    /// keeps within `limits` (the live settings), else becomes a map for good.
    pub fn insert(&mut self, field: &[u8], value: &[u8], limits: HashLimits) -> bool {
        if let HashRepr::Packed { buf, len } = &mut self.repr {
            let fits = field.len() <= limits.value && value.len() <= limits.value;
            let found = packed_fields(buf)
                .find(|p| p.field == field)
                .map(|p| (p.value_at, p.end));
            let used = buf.len();
            let grows_to = |old: usize| used - old + packed_len(value);
            match found {
                Some((vat, end)) if fits && grows_to(end - vat) <= PACKED_MAX_BYTES => {
                    // The value's length and bytes, replaced in place.
                    let mut new = Vec::with_capacity(packed_len(value));
                    put_packed(&mut new, value);
                    if new.len() > end - vat {
                        buf.reserve_exact(new.len() - (end - vat));
                    }
                    buf.splice(vat..end, new);
                    shrink_if_loose(buf);
                    return false;
                }
                None if fits
                    && (*len as usize) < limits.entries
                    && grows_to(0) + packed_len(field) <= PACKED_MAX_BYTES =>
                {
                    reserve_in_class(buf, packed_len(field) + packed_len(value));
                    put_packed(buf, field);
                    put_packed(buf, value);
                    *len += 1;
                    return true;
                }
                _ => self.convert_to_map(0),
            }
        }
        let HashRepr::Map(m) = &mut self.repr else {
            unreachable!("converted above")
        };
        let value = HeapStr::copy_from_slice(value);
        let new_len = value.len();
        let map = m.parts.map_of_mut(field);
        if let Some(old) = map.get_mut(field) {
            let old_len = old.len();
            *old = value;
            m.bytes = m.bytes - map_field_bytes(field.len(), old_len)
                + map_field_bytes(field.len(), new_len);
            return false;
        }
        map.insert(HeapStr::copy_from_slice(field), value);
        m.bytes += map_field_bytes(field.len(), new_len);
        m.len += 1;
        m.parts.grew_to(m.len);
        true
    }
    /// `OBJECT ENCODING`: `listpack` while the hash has stayed within the listpack limits since
    /// it was created (or loaded), else `hashtable`.
    ///
    /// (HSCAN answers a packed hash whole, as Redis does a listpack: see [`HashValue::is_packed`].)
    pub fn encoding(&self) -> &'static str {
        match self.repr {
            HashRepr::Packed { .. } => "listpack",
            HashRepr::Map(_) => "hashtable",
        }
    }
    /// Whether the hash is packed (`listpack`).
    pub fn is_packed(&self) -> bool {
        matches!(self.repr, HashRepr::Packed { .. })
    }
    pub fn remove(&mut self, field: &[u8]) -> bool {
        match &mut self.repr {
            HashRepr::Packed { buf, len } => {
                let Some(p) = packed_fields(buf).find(|p| p.field == field) else {
                    return false;
                };
                let (start, end) = (p.start, p.end);
                buf.drain(start..end);
                shrink_if_loose(buf);
                *len -= 1;
                true
            }
            HashRepr::Map(m) => match m.parts.map_of_mut(field).remove(field) {
                Some(v) => {
                    m.bytes -= map_field_bytes(field.len(), v.len());
                    m.len -= 1;
                    true
                }
                None => false,
            },
        }
    }
    /// Fields and values: in insertion order while packed, in no particular order after.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + Clone {
        let (packed, map) = match &self.repr {
            HashRepr::Packed { buf, .. } => (Some(packed_fields(buf)), None),
            HashRepr::Map(m) => (None, Some(m.parts.iter())),
        };
        packed
            .into_iter()
            .flatten()
            .map(|p| (p.field, p.value))
            .chain(map.into_iter().flatten().map(|(f, v)| (&f[..], &v[..])))
    }
}

/// Give back a buffer's spare room once it is a quarter of it (a shrinking packed value).
fn shrink_if_loose(buf: &mut Vec<u8>) {
    if buf.capacity() - buf.len() > buf.capacity() / 4 {
        shrink_exact(buf);
    }
}

/// A buffer moved into an allocation of its exact size. Not `shrink_to_fit`: mimalloc's
/// realloc keeps a block that shrinks by less than half where it is, so the spare room stayed
/// allocated (and out of the accounting, which reads the capacity).
pub(crate) fn shrink_exact(buf: &mut Vec<u8>) {
    if buf.capacity() != buf.len() {
        *buf = buf.as_slice().to_vec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const D: HashLimits = HashLimits::REDIS_DEFAULT;

    #[test]
    fn hash_accounting_returns_to_zero() {
        let mut h = HashValue::new();
        assert!(h.insert(b"f", b"v1", D));
        assert!(!h.insert(b"f", b"value2", D));
        assert!(h.insert(b"g", b"", D));
        assert!(h.remove(b"f"));
        assert!(h.remove(b"g"));
        assert_eq!(
            Value::hash(h).mem_size(),
            0,
            "inline: nothing beside the entry"
        );
    }

    #[test]
    fn a_small_hash_is_packed_in_insertion_order_and_converts_past_the_limits() {
        let mut h = HashValue::new();
        assert!(h.insert(b"b", b"1", D));
        assert!(h.insert(b"a", b"22", D));
        assert!(!h.insert(b"b", b"333", D));
        assert!(!h.insert(b"a", b"", D));
        assert_eq!(h.get(b"b"), Some(&b"333"[..]));
        assert_eq!(h.get(b"a"), Some(&b""[..]));
        let order: Vec<_> = h.iter().map(|(f, _)| f.to_vec()).collect();
        assert_eq!(order, vec![b"b".to_vec(), b"a".to_vec()]);
        assert_eq!(h.encoding(), "listpack");
        assert!(h.mem_size() <= 64, "{}", h.mem_size());
        assert!(h.remove(b"b"));
        assert!(!h.remove(b"b"));
        assert_eq!(h.len(), 1);
        assert!(h.insert(b"big", &[b'v'; LISTPACK_MAX_VALUE + 1], D));
        assert_eq!(h.encoding(), "hashtable");
        assert_eq!(h.get(b"a"), Some(&b""[..]));
        assert_eq!(h.len(), 2);
    }

    #[test]
    fn a_packed_hash_follows_the_live_limits_and_holds_long_fields() {
        // hash-max-listpack-value 1000: a 300-byte value (past a byte length) stays packed, in
        // insertion order, and reads back whole.
        let wide = HashLimits {
            entries: 4,
            value: 1000,
        };
        let mut h = HashValue::new();
        let long = vec![b'x'; 300];
        let longer = vec![b'y'; 20_000];
        assert!(h.insert(b"z", &long, wide));
        assert!(h.insert(&long, b"short", wide));
        assert!(h.insert(b"a", b"1", wide));
        assert_eq!(h.encoding(), "listpack");
        assert_eq!(h.get(b"z"), Some(&long[..]));
        assert_eq!(h.get(&long), Some(&b"short"[..]));
        assert!(!h.insert(b"z", b"now short", wide));
        assert!(!h.insert(b"a", &long, wide));
        let order: Vec<_> = h.iter().map(|(f, _)| f.to_vec()).collect();
        assert_eq!(order, vec![b"z".to_vec(), long.clone(), b"a".to_vec()]);
        assert!(h.remove(&long));
        assert_eq!(h.get(b"a"), Some(&long[..]));
        assert_eq!(h.encoding(), "listpack");
        // The entries limit, whatever it is now: 2 fields, a third converts.
        let two = HashLimits {
            entries: 2,
            value: 1000,
        };
        assert!(h.insert(b"b", b"2", two));
        assert_eq!(h.encoding(), "hashtable");
        assert_eq!((h.len(), h.get(b"a")), (3, Some(&long[..])));
        // A value past the value limit converts, and a map never goes back.
        let mut v = HashValue::new();
        v.insert(b"f", b"1", wide);
        v.insert(b"f", &longer, wide);
        assert_eq!(
            (v.encoding(), v.get(b"f")),
            ("hashtable", Some(&longer[..]))
        );
        v.remove(b"f");
        v.insert(b"f", b"1", wide);
        assert_eq!(v.encoding(), "hashtable");
        // Limit 0 entries: every hash is a map; expect() converts before a big write.
        let mut none = HashValue::new();
        none.insert(b"f", b"v", HashLimits { entries: 0, ..wide });
        assert_eq!(none.encoding(), "hashtable");
        let mut soon = HashValue::new();
        soon.insert(b"f", b"v", D);
        soon.expect(3, two);
        assert_eq!(
            (soon.encoding(), soon.get(b"f")),
            ("hashtable", Some(&b"v"[..]))
        );
    }

    /// How many parts two split maps still share.
    fn shared_parts<V>(a: &Parts<V>, b: &Parts<V>) -> usize {
        let (Parts::Split(a), Parts::Split(b)) = (a, b) else {
            panic!("not split");
        };
        a.iter()
            .zip(b.iter())
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count()
    }

    fn map_of(h: &HashValue) -> &Parts<HeapStr> {
        match &h.repr {
            HashRepr::Map(m) => &m.parts,
            HashRepr::Packed { .. } => panic!("packed"),
        }
    }

    /// How many distinct parts `fields` fall in.
    fn parts_of(fields: &[&[u8]]) -> usize {
        let mut parts: Vec<usize> = fields.iter().map(|f| bucket_of(f)).collect();
        parts.sort_unstable();
        parts.dedup();
        parts.len()
    }

    #[test]
    fn a_large_hash_is_split_and_a_clone_copies_only_the_part_written() {
        let mut h = HashValue::new();
        let n = HASH_SPLIT_LEN + 100;
        for i in 0..n {
            assert!(h.insert(format!("f{i}").as_bytes(), b"value", D));
        }
        assert!(h.is_split());
        assert_eq!((h.len(), h.iter().count()), (n, n));
        assert_eq!(h.get(b"f0"), Some(&b"value"[..]));
        let snapshot = h.clone();
        assert!(!h.insert(b"f1", b"changed", D));
        assert!(h.insert(b"new", b"x", D));
        assert_eq!(
            shared_parts(map_of(&snapshot), map_of(&h)),
            HASH_BUCKETS - parts_of(&[b"f1", b"new"]),
            "only the written parts are copied"
        );
        assert_eq!(snapshot.get(b"f1"), Some(&b"value"[..]));
        assert!(!snapshot.contains(b"new"));
        assert_ne!(snapshot, h);
        assert_eq!(h.len(), n + 1);
        for i in 0..n {
            assert!(h.remove(format!("f{i}").as_bytes()));
        }
        assert!(h.remove(b"new"));
        assert!(h.is_empty());
        assert_eq!(Value::hash(h).mem_size(), std::mem::size_of::<MapHash>());
    }

    /// A hash is held inline in its key's entry: it must not make `Value` larger than its
    /// string case (a `Bytes` and the tag).
    #[test]
    fn a_hash_is_no_larger_than_a_string() {
        assert!(std::mem::size_of::<HashValue>() <= std::mem::size_of::<StrValue>());
        assert_eq!(
            std::mem::size_of::<Value>(),
            std::mem::size_of::<Bytes>() + 8
        );
    }

    #[test]
    fn encodings_follow_redis_rules() {
        assert_eq!(string_encoding(b"123"), "int");
        assert_eq!(string_encoding(b"-9223372036854775808"), "int");
        assert_eq!(string_encoding(b"9223372036854775808"), "embstr");
        for not_canonical in [&b"0123"[..], b"+1", b"-0", b" 1", b"1 ", b""] {
            assert_eq!(string_encoding(not_canonical), "embstr");
        }
        assert_eq!(string_encoding(&[b'x'; EMBSTR_MAX_LEN]), "embstr");
        assert_eq!(string_encoding(&[b'x'; EMBSTR_MAX_LEN + 1]), "raw");
        // After APPEND / SETRANGE Redis says raw, even for a short number; a SET again, int.
        for edited in [&b"12"[..], b"abc", &[b'x'; 30], &[b'x'; 50]] {
            let v = Value::raw_string(Bytes::copy_from_slice(edited));
            assert_eq!(v.encoding(), "raw", "{edited:?}");
        }
        assert_eq!(Value::string_copy(b"12").encoding(), "int");
        assert_eq!(Value::string_copy(&[b'x'; 30]).encoding(), "embstr");

        let mut h = HashValue::new();
        for i in 0..HASH_MAX_LISTPACK_ENTRIES {
            h.insert(format!("f{i}").as_bytes(), b"v", D);
        }
        assert_eq!(h.encoding(), "listpack");
        h.insert(b"one-more", b"v", D);
        assert_eq!(h.encoding(), "hashtable");
        h.remove(b"one-more");
        assert_eq!(h.encoding(), "hashtable", "Redis never converts back");
        let mut long = HashValue::new();
        long.insert(b"f", &[b'v'; LISTPACK_MAX_VALUE], D);
        assert_eq!(long.encoding(), "listpack");
        long.insert(b"f", &[b'v'; LISTPACK_MAX_VALUE + 1], D);
        assert_eq!(Value::hash(long).encoding(), "hashtable");
    }
}
