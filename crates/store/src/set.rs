//! The set type, [`SetValue`], in the three encodings Redis 7.2 keeps sets in: an *intset* (the
//! members, all integers, sorted, packed at the smallest of 16, 32 or 64 bits that holds every
//! one), a *listpack* (members packed one after the other in insertion order, each behind its
//! LEB128 length) and a *hashtable* (one hash set, split into shared parts from `HASH_SPLIT_LEN`
//! members on like a large hash, so a snapshot's clone stays cheap). A set moves up from one to
//! the next under Redis' rules, within the limits the caller passes in ([`SetLimits`]: the live
//! `set-max-intset-entries`, `set-max-listpack-entries` and `set-max-listpack-value`), and never
//! back. Memory is counted from the buffers' and tables' real capacities, in O(1).
//!
//! May import `value` (the shared [`Parts`] of large collections), `table` (allocation
//! classes), `bytes` and `hashbrown`; nothing here knows about keys, shards, expiry or commands.

use crate::heapstr::HeapStr;
use crate::table::reserve_in_class;
use crate::value::Parts;
use bytes::Bytes;
use hashbrown::HashMap;

/// Most members an intset holds (Redis' `set-max-intset-entries`).
pub const SET_MAX_INTSET_ENTRIES: usize = 512;
/// Most members a listpack holds (Redis' `set-max-listpack-entries`).
pub const SET_MAX_LISTPACK_ENTRIES: usize = 128;
/// Longest member a listpack holds, in bytes (Redis' `set-max-listpack-value`).
pub const SET_MAX_LISTPACK_VALUE: usize = 64;

/// The limits a set is kept an intset or a listpack within: the live `set-max-intset-entries`,
/// `set-max-listpack-entries` and `set-max-listpack-value` settings, read by the caller for each
/// write (as `crate::zset::ZSetLimits` for sorted sets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetLimits {
    /// Most members of an intset.
    pub intset_entries: usize,
    /// Most members of a listpack.
    pub entries: usize,
    /// Longest member of a listpack, in bytes.
    pub value: usize,
}

impl SetLimits {
    /// Redis' defaults (for values built without a server's settings: tests, decoders).
    pub const REDIS_DEFAULT: SetLimits = SetLimits {
        intset_entries: SET_MAX_INTSET_ENTRIES,
        entries: SET_MAX_LISTPACK_ENTRIES,
        value: SET_MAX_LISTPACK_VALUE,
    };
}

impl Default for SetLimits {
    fn default() -> Self {
        Self::REDIS_DEFAULT
    }
}

/// The most bytes one listpack buffer holds: Redis' listpack safety limit (`lpSafeToAdd`,
/// 1 GiB). Only limits far above Redis' defaults reach it.
const PACKED_MAX_BYTES: usize = 1 << 30;

/// A member as a set holds it: an integer of an intset, bytes packed in a listpack, or a
/// hashtable's own reference-counted string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Member<'a> {
    Int(i64),
    Packed(&'a [u8]),
    Shared(&'a HeapStr),
}

impl Member<'_> {
    /// The member as a string of its own (an integer in decimal, as Redis prints it).
    pub fn to_bytes(&self) -> Bytes {
        match self {
            Member::Int(v) => Bytes::copy_from_slice(IntText::new(*v).as_bytes()),
            Member::Packed(b) => Bytes::copy_from_slice(b),
            Member::Shared(b) => b.to_bytes(),
        }
    }

    /// `f` applied to the member's bytes, without allocating.
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        match self {
            Member::Int(v) => f(IntText::new(*v).as_bytes()),
            Member::Packed(b) => f(b),
            Member::Shared(b) => f(b),
        }
    }
}

/// An `i64` in decimal, on the stack.
struct IntText {
    buf: [u8; 20],
    start: usize,
}

impl IntText {
    fn new(v: i64) -> Self {
        let mut buf = [0u8; 20];
        let mut at = buf.len();
        let mut n = v.unsigned_abs();
        loop {
            at -= 1;
            buf[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        if v < 0 {
            at -= 1;
            buf[at] = b'-';
        }
        IntText { buf, start: at }
    }
    fn as_bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

/// The integer `s` spells, if it spells one the way Redis' `string2ll` accepts: an optional
/// `-`, then decimal digits without leading zeros (`0` alone), within `i64`. So `"007"`,
/// `"+1"`, `"-0"` and `" 1"` are strings, and each integer has exactly one spelling.
pub fn member_as_int(s: &[u8]) -> Option<i64> {
    gradus_proto::parse_strict_i64(s)
}

/// Bytes per integer needed for `v`: 2, 4 or 8.
fn width_of(v: i64) -> u8 {
    if i16::try_from(v).is_ok() {
        2
    } else if i32::try_from(v).is_ok() {
        4
    } else {
        8
    }
}

/// The `i`th integer of an intset buffer of `width`-byte little-endian integers.
fn int_at(buf: &[u8], width: u8, i: usize) -> i64 {
    let w = usize::from(width);
    let b = &buf[i * w..(i + 1) * w];
    match width {
        2 => i64::from(i16::from_le_bytes([b[0], b[1]])),
        4 => i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        _ => i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
    }
}

fn put_int(out: &mut Vec<u8>, width: u8, v: i64) {
    match width {
        2 => out.extend_from_slice(&(v as i16).to_le_bytes()),
        4 => out.extend_from_slice(&(v as i32).to_le_bytes()),
        _ => out.extend_from_slice(&v.to_le_bytes()),
    }
}

/// Where `v` is in a sorted intset buffer (Ok) or would go (Err).
fn int_search(buf: &[u8], width: u8, v: i64) -> Result<usize, usize> {
    let (mut lo, mut hi) = (0, buf.len() / usize::from(width));
    while lo < hi {
        let mid = (lo + hi) / 2;
        match int_at(buf, width, mid).cmp(&v) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Ok(mid),
        }
    }
    Err(lo)
}

/// The members of a listpack buffer: each is its LEB128 length and that many bytes.
fn packed(buf: &[u8]) -> impl Iterator<Item = &[u8]> + Clone {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= buf.len() {
            return None;
        }
        let (len, start) = crate::varint::decode(buf, at);
        at = start + len;
        Some(&buf[start..at])
    })
}

/// Where `member`'s entry (its length, then its bytes) is in a listpack buffer.
fn packed_find(buf: &[u8], member: &[u8]) -> Option<std::ops::Range<usize>> {
    let mut at = 0;
    while at < buf.len() {
        let (len, start) = crate::varint::decode(buf, at);
        if &buf[start..start + len] == member {
            return Some(at..start + len);
        }
        at = start + len;
    }
    None
}

/// Appends `member` with its LEB128 length to a listpack buffer.
fn put_packed(buf: &mut Vec<u8>, member: &[u8]) {
    let (len, k) = crate::varint::encode(member.len());
    buf.extend_from_slice(&len[..k]);
    buf.extend_from_slice(member);
}

/// Bytes `member` takes in a listpack buffer.
fn packed_len(member: &[u8]) -> usize {
    crate::varint::len(member.len()) + member.len()
}

/// Heap bytes of a hash set table of `capacity` (as `HashMap::capacity` reports it): its buckets
/// (a [`HeapStr`] and a control byte each) and one group of trailing control bytes.
fn table_bytes(capacity: usize) -> usize {
    let buckets = match capacity {
        0 => return 0,
        1..=7 => capacity + 1,
        _ => capacity * 8 / 7,
    };
    buckets * (std::mem::size_of::<HeapStr>() + 1) + 16
}

/// Heap bytes of a member string of `len` bytes of its own (its [`HeapStr`] allocation).
fn member_bytes(len: usize) -> usize {
    crate::table::alloc_class(HeapStr::alloc_len(len))
}

/// Bytes of integers an intset keeps inline in the value (7 of 32 bits, 14 of 16 bits):
/// what fits beside the width, the length and the encoding's tag in the set's 32 bytes.
const INTS_INLINE: usize = 28;

#[derive(Debug, Clone)]
enum Encoding {
    /// Sorted integers of `width` bytes each, little-endian (Redis' intset), while they take at
    /// most [`INTS_INLINE`] bytes: inline in the value, no allocation.
    SmallInts {
        width: u8,
        len: u8,
        buf: [u8; INTS_INLINE],
    },
    /// A larger intset: an exact-sized array whose pointer and length the value holds itself,
    /// with no header block.
    Ints { width: u8, buf: Box<[u8]> },
    /// `len` members in insertion order, each its LEB128 length (one byte up to 127, so a set
    /// within Redis' default limits costs what it did with byte lengths) and its bytes. Memory
    /// only: snapshots and log records write the members, not this buffer.
    Packed { len: u32, buf: Vec<u8> },
    /// One hash set, or shared parts of one (boxed: most sets are small, and keep the other
    /// encodings' 32 bytes).
    Table(Box<Table>),
}

/// A set's hashtable form with its member count and its heap bytes.
#[derive(Debug, Clone)]
struct Table {
    parts: Parts<()>,
    len: usize,
    /// Heap bytes of the tables and member strings (not this header).
    bytes: usize,
}

/// A set of byte strings (see the module docs for its encodings). As small as a `Bytes`, so a
/// key's value holds it inline: a small intset costs its value slot only, a larger one its
/// value slot and its integer array.
#[derive(Debug, Clone)]
pub struct SetValue {
    encoding: Encoding,
}

impl Default for SetValue {
    fn default() -> Self {
        Self::new()
    }
}

impl PartialEq for SetValue {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|m| m.with_bytes(|b| other.contains(b)))
    }
}

/// `buf` (sorted integers of `width` bytes) with `v` inserted at index `at`, widened to `wanted`
/// bytes per integer (`wanted >= width`), in an exact-sized array.
fn ints_with(buf: &[u8], width: u8, at: usize, v: i64, wanted: u8) -> Vec<u8> {
    let n = buf.len() / usize::from(width);
    let mut out = Vec::with_capacity((n + 1) * usize::from(wanted));
    if wanted == width {
        let w = usize::from(width);
        out.extend_from_slice(&buf[..at * w]);
        put_int(&mut out, width, v);
        out.extend_from_slice(&buf[at * w..]);
    } else {
        for i in 0..n {
            if i == at {
                put_int(&mut out, wanted, v);
            }
            put_int(&mut out, wanted, int_at(buf, width, i));
        }
        if at == n {
            put_int(&mut out, wanted, v);
        }
    }
    out
}

/// The intset encoding of `buf` (sorted integers of `width` bytes): inline if it fits.
fn ints_encoding(width: u8, buf: Vec<u8>) -> Encoding {
    if buf.len() <= INTS_INLINE {
        let mut inline = [0; INTS_INLINE];
        inline[..buf.len()].copy_from_slice(&buf);
        Encoding::SmallInts {
            width,
            len: buf.len() as u8,
            buf: inline,
        }
    } else {
        Encoding::Ints {
            width,
            buf: buf.into_boxed_slice(),
        }
    }
}

impl SetValue {
    /// An intset's width and array, if the set is one.
    fn ints(&self) -> Option<(u8, &[u8])> {
        match &self.encoding {
            Encoding::SmallInts { width, len, buf } => Some((*width, &buf[..usize::from(*len)])),
            Encoding::Ints { width, buf } => Some((*width, buf)),
            _ => None,
        }
    }

    /// An empty set: an intset until a member that is not an integer arrives.
    pub fn new() -> Self {
        SetValue {
            encoding: ints_encoding(2, Vec::new()),
        }
    }

    /// An empty set in the encoding Redis' `setTypeCreate` picks for about `size_hint` members
    /// of which `first` is one: an intset if `first` is an integer and the hint allows one, else
    /// a listpack if the hint allows one, else a hashtable sized for the hint.
    pub fn sized_for(first: &[u8], size_hint: usize, limits: SetLimits) -> Self {
        let mut set = Self::new();
        if member_as_int(first).is_some() && size_hint <= limits.intset_entries {
            return set;
        }
        if size_hint <= limits.entries {
            set.encoding = Encoding::Packed {
                len: 0,
                buf: Vec::new(),
            };
        } else {
            set.convert_to_table(size_hint);
        }
        set
    }

    /// About to add `size_hint` members: a set whose encoding could not hold that many becomes a
    /// hashtable now (Redis' `setTypeMaybeConvert`).
    pub fn expect(&mut self, size_hint: usize, limits: SetLimits) {
        let too_many = match &self.encoding {
            Encoding::SmallInts { .. } | Encoding::Ints { .. } => size_hint > limits.intset_entries,
            Encoding::Packed { .. } => size_hint > limits.entries,
            Encoding::Table(_) => false,
        };
        if too_many {
            self.convert_to_table(size_hint);
        }
    }

    pub fn len(&self) -> usize {
        if let Some((width, buf)) = self.ints() {
            return buf.len() / usize::from(width);
        }
        match &self.encoding {
            Encoding::SmallInts { .. } | Encoding::Ints { .. } => unreachable!("an intset"),
            Encoding::Packed { len, .. } => *len as usize,
            Encoding::Table(table) => table.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The encoding's name as Redis' `OBJECT ENCODING` gives it.
    pub fn encoding(&self) -> &'static str {
        match self.encoding {
            Encoding::SmallInts { .. } | Encoding::Ints { .. } => "intset",
            Encoding::Packed { .. } => "listpack",
            Encoding::Table(_) => "hashtable",
        }
    }

    /// Whether the set is small enough that Redis answers SSCAN with all of it at once (an
    /// intset or a listpack).
    pub fn is_compact(&self) -> bool {
        !matches!(self.encoding, Encoding::Table(_))
    }

    /// Whether the set is kept in shared parts (for tests).
    pub fn is_split(&self) -> bool {
        matches!(&self.encoding, Encoding::Table(table) if table.parts.is_split())
    }

    /// Heap bytes the set holds beyond its own (inline) bytes. O(1).
    pub fn mem_size(&self) -> usize {
        match &self.encoding {
            Encoding::SmallInts { .. } => 0,
            Encoding::Ints { buf, .. } => buf.len(),
            Encoding::Packed { buf, .. } => buf.capacity(),
            Encoding::Table(table) => std::mem::size_of::<Table>() + table.bytes,
        }
    }

    pub fn contains(&self, member: &[u8]) -> bool {
        if let Some((width, buf)) = self.ints() {
            return member_as_int(member).is_some_and(|v| int_search(buf, width, v).is_ok());
        }
        match &self.encoding {
            Encoding::SmallInts { .. } | Encoding::Ints { .. } => unreachable!("an intset"),
            Encoding::Packed { buf, .. } => packed_find(buf, member).is_some(),
            Encoding::Table(table) => table.parts.map_of(member).contains_key(member),
        }
    }

    /// Add `member`; true when it is new. The set moves up an encoding when it would pass
    /// `limits` (the live settings).
    pub fn insert(&mut self, member: &[u8], limits: SetLimits) -> bool {
        let len = self.len();
        if let Some((width, buf)) = self.ints() {
            let Some(v) = member_as_int(member) else {
                // Redis' test (`setTypeAddAux`): room for one more in a listpack, and the
                // member and the longest integer's text within the value limit.
                let longest_int = [0, len.saturating_sub(1)]
                    .into_iter()
                    .filter(|&i| i < len)
                    .map(|i| IntText::new(int_at(buf, width, i)).as_bytes().len())
                    .max()
                    .unwrap_or(0);
                if len < limits.entries
                    && member.len() <= limits.value
                    && longest_int <= limits.value
                {
                    self.convert_to_packed();
                } else {
                    self.convert_to_table(len + 1);
                }
                return self.insert(member, limits);
            };
            let Err(at) = int_search(buf, width, v) else {
                return false;
            };
            let wanted = width_of(v).max(width);
            self.encoding = ints_encoding(wanted, ints_with(buf, width, at, v, wanted));
            if len + 1 > limits.intset_entries {
                self.convert_to_table(len + 1);
            }
            return true;
        }
        match &mut self.encoding {
            Encoding::SmallInts { .. } | Encoding::Ints { .. } => unreachable!("an intset"),
            Encoding::Packed { len: count, buf } => {
                if packed_find(buf, member).is_some() {
                    return false;
                }
                if len < limits.entries
                    && member.len() <= limits.value
                    && buf.len() + packed_len(member) <= PACKED_MAX_BYTES
                {
                    reserve_in_class(buf, packed_len(member));
                    put_packed(buf, member);
                    *count += 1;
                    return true;
                }
                self.convert_to_table(len + 1);
                self.insert(member, limits)
            }
            Encoding::Table(table) => {
                let map = table.parts.map_of_mut(member);
                if map.contains_key(member) {
                    return false;
                }
                let before = table_bytes(map.capacity());
                map.insert(HeapStr::copy_from_slice(member), ());
                table.bytes =
                    table.bytes + table_bytes(map.capacity()) - before + member_bytes(member.len());
                table.len += 1;
                let was_split = table.parts.is_split();
                table.parts.grew_to(table.len);
                if table.parts.is_split() != was_split {
                    self.recount_table();
                }
                true
            }
        }
    }

    /// Remove `member`; true when it was there.
    pub fn remove(&mut self, member: &[u8]) -> bool {
        if let Some((width, buf)) = self.ints() {
            let Some(Ok(at)) = member_as_int(member).map(|v| int_search(buf, width, v)) else {
                return false;
            };
            let w = usize::from(width);
            let mut out = Vec::with_capacity(buf.len() - w);
            out.extend_from_slice(&buf[..at * w]);
            out.extend_from_slice(&buf[(at + 1) * w..]);
            self.encoding = ints_encoding(width, out);
            return true;
        }
        match &mut self.encoding {
            Encoding::SmallInts { .. } | Encoding::Ints { .. } => unreachable!("an intset"),
            Encoding::Packed { len, buf } => {
                let Some(at) = packed_find(buf, member) else {
                    return false;
                };
                buf.drain(at);
                shrink_if_loose(buf);
                *len -= 1;
            }
            Encoding::Table(table) => {
                if table.parts.map_of_mut(member).remove(member).is_none() {
                    return false;
                }
                table.bytes -= member_bytes(member.len());
                table.len -= 1;
            }
        }
        true
    }

    /// Every member: an intset's in ascending order, a listpack's in insertion order, a
    /// hashtable's in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = Member<'_>> + Clone {
        let (ints, pack, table) = match &self.encoding {
            Encoding::SmallInts { .. } | Encoding::Ints { .. } => (self.ints(), None, None),
            Encoding::Packed { buf, .. } => (None, Some(&buf[..]), None),
            Encoding::Table(table) => (None, None, Some(&table.parts)),
        };
        let ints = ints.into_iter().flat_map(|(width, buf)| {
            (0..buf.len() / usize::from(width)).map(move |i| Member::Int(int_at(buf, width, i)))
        });
        let pack = pack.into_iter().flat_map(packed).map(Member::Packed);
        let table = table
            .into_iter()
            .flat_map(|parts| parts.iter())
            .map(|(m, ())| Member::Shared(m));
        ints.chain(pack).chain(table)
    }

    /// The `index`th member in [`SetValue::iter`] order (for picking one at random): O(1) for an
    /// intset, O(n) for a listpack, O(parts + one part) for a hashtable.
    pub fn member_at(&self, index: usize) -> Option<Member<'_>> {
        match &self.encoding {
            Encoding::SmallInts { .. } | Encoding::Ints { .. } => self
                .ints()
                .filter(|_| index < self.len())
                .map(|(width, buf)| Member::Int(int_at(buf, width, index))),
            Encoding::Packed { buf, .. } => packed(buf).nth(index).map(Member::Packed),
            Encoding::Table(table) => table.parts.nth(index).map(|(m, ())| Member::Shared(m)),
        }
    }

    /// Intset → listpack: every integer written out as text.
    fn convert_to_packed(&mut self) {
        let len = self.len();
        let Some((width, buf)) = self.ints() else {
            return;
        };
        let mut out = Vec::new();
        let texts: Vec<IntText> = (0..len)
            .map(|i| IntText::new(int_at(buf, width, i)))
            .collect();
        out.reserve_exact(texts.iter().map(|t| packed_len(t.as_bytes())).sum());
        for t in &texts {
            put_packed(&mut out, t.as_bytes());
        }
        self.encoding = Encoding::Packed {
            len: len as u32,
            buf: out,
        };
    }

    /// Any encoding → hashtable, sized for `size_hint` members.
    fn convert_to_table(&mut self, size_hint: usize) {
        if matches!(self.encoding, Encoding::Table(_)) {
            return;
        }
        let len = self.len();
        let mut map: HashMap<HeapStr, ()> = HashMap::with_capacity(size_hint.max(len));
        for m in self.iter() {
            map.insert(m.with_bytes(HeapStr::copy_from_slice), ());
        }
        let mut parts = Parts::Flat(map);
        parts.grew_to(len);
        self.encoding = Encoding::Table(Box::new(Table {
            parts,
            len,
            bytes: 0,
        }));
        self.recount_table();
    }

    /// Counts a hashtable's bytes from scratch (after it was built or split).
    fn recount_table(&mut self) {
        if let Encoding::Table(table) = &mut self.encoding {
            table.bytes = table
                .parts
                .maps()
                .map(|map| {
                    table_bytes(map.capacity())
                        + map.keys().map(|m| member_bytes(m.len())).sum::<usize>()
                })
                .sum();
        }
    }
}

/// Gives memory back once a buffer uses less than half of it (Redis reallocates on every
/// removal; this keeps removals cheap while the accounting stays close to the truth).
fn shrink_if_loose(buf: &mut Vec<u8>) {
    if buf.capacity() > 2 * buf.len() + 16 {
        crate::value::shrink_exact(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const D: SetLimits = SetLimits::REDIS_DEFAULT;
    use crate::value::HASH_SPLIT_LEN;

    fn members(set: &SetValue) -> Vec<Vec<u8>> {
        set.iter().map(|m| m.to_bytes().to_vec()).collect()
    }

    #[test]
    fn integers_are_recognised_as_redis_does() {
        for (text, want) in [
            ("0", Some(0)),
            ("-1", Some(-1)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("007", None),
            ("-0", None),
            ("+1", None),
            (" 1", None),
            ("1 ", None),
            ("", None),
            ("-", None),
            ("1e3", None),
        ] {
            assert_eq!(member_as_int(text.as_bytes()), want, "{text:?}");
        }
        for v in [0, 1, -1, 42, i64::MIN, i64::MAX, -32768, 32768] {
            assert_eq!(IntText::new(v).as_bytes(), v.to_string().as_bytes());
        }
    }

    #[test]
    fn an_intset_is_sorted_and_widens_as_needed() {
        let mut s = SetValue::new();
        for v in ["5", "-3", "100", "5", "0"] {
            s.insert(v.as_bytes(), D);
        }
        assert_eq!(s.encoding(), "intset");
        assert_eq!(s.len(), 4);
        assert_eq!(members(&s), [&b"-3"[..], b"0", b"5", b"100"]);
        assert_eq!(s.mem_size(), 0, "four 16-bit integers, inline");
        assert!(s.insert(b"70000", D));
        assert!(s.insert(b"-5000000000", D));
        assert_eq!(s.encoding(), "intset");
        assert_eq!(
            s.mem_size(),
            6 * 8,
            "widened to 64 bits, too many to keep inline"
        );
        assert_eq!(
            members(&s),
            [&b"-5000000000"[..], b"-3", b"0", b"5", b"100", b"70000"]
        );
        assert!(s.contains(b"70000") && !s.contains(b"070000") && !s.contains(b"7"));
        assert!(s.remove(b"0") && !s.remove(b"0") && !s.remove(b"x"));
        assert_eq!((s.len(), s.mem_size()), (5, 40));
        assert_eq!(s.member_at(0), Some(Member::Int(-5_000_000_000)));
        assert!(s.remove(b"5") && s.remove(b"100"));
        assert_eq!(
            (s.len(), s.mem_size()),
            (3, 0),
            "three 64-bit integers: inline again"
        );
        assert_eq!(members(&s), [&b"-5000000000"[..], b"-3", b"70000"]);
        assert_eq!(s.member_at(5), None);
    }

    #[test]
    fn encodings_move_up_under_redis_rules_and_never_back() {
        // A string member turns a small intset into a listpack, which keeps insertion order.
        let mut s = SetValue::new();
        s.insert(b"2", D);
        s.insert(b"1", D);
        s.insert(b"b", D);
        s.insert(b"a", D);
        assert_eq!(s.encoding(), "listpack");
        assert_eq!(members(&s), [&b"1"[..], b"2", b"b", b"a"]);
        assert!(s.contains(b"1") && s.contains(b"a") && !s.contains(b"01"));
        for m in ["1", "2", "b"] {
            assert!(s.remove(m.as_bytes()));
        }
        assert_eq!(s.encoding(), "listpack", "no conversion back");
        // A long member, or a 129th, makes a hashtable.
        let mut long = s.clone();
        long.insert(&[b'x'; 65], D);
        assert_eq!(long.encoding(), "hashtable");
        assert!(long.contains(&[b'x'; 65]) && long.contains(b"a"));
        for i in 0..SET_MAX_LISTPACK_ENTRIES - 1 {
            s.insert(format!("m{i}").as_bytes(), D);
        }
        assert_eq!((s.encoding(), s.len()), ("listpack", 128));
        s.insert(b"one more", D);
        assert_eq!((s.encoding(), s.len()), ("hashtable", 129));
        // 513 integers make a hashtable; a string among 128 integers too.
        let mut ints = SetValue::new();
        for i in 0..SET_MAX_INTSET_ENTRIES {
            ints.insert(i.to_string().as_bytes(), D);
        }
        assert_eq!(ints.encoding(), "intset");
        let mut many = ints.clone();
        many.insert(b"-1", D);
        assert_eq!((many.encoding(), many.len()), ("hashtable", 513));
        ints.insert(b"x", D);
        assert_eq!((ints.encoding(), ints.len()), ("hashtable", 513));
        // What Redis' setTypeCreate picks.
        assert_eq!(SetValue::sized_for(b"1", 3, D).encoding(), "intset");
        assert_eq!(SetValue::sized_for(b"1", 600, D).encoding(), "hashtable");
        assert_eq!(SetValue::sized_for(b"a", 128, D).encoding(), "listpack");
        assert_eq!(SetValue::sized_for(b"a", 129, D).encoding(), "hashtable");
        let mut pack = SetValue::sized_for(b"a", 2, D);
        pack.expect(200, D);
        assert_eq!(pack.encoding(), "hashtable");
    }

    #[test]
    fn the_live_limits_decide_the_encoding_and_a_listpack_holds_long_members() {
        let wide = SetLimits {
            intset_entries: 3,
            entries: 4,
            value: 1000,
        };
        let mut ints = SetValue::new();
        for v in ["1", "2", "3"] {
            ints.insert(v.as_bytes(), wide);
        }
        assert_eq!(ints.encoding(), "intset");
        ints.insert(b"4", wide);
        assert_eq!(ints.encoding(), "hashtable", "past set-max-intset-entries");
        // Members past 255 bytes, packed behind LEB128 lengths.
        let long = vec![b'm'; 300];
        let mut s = SetValue::sized_for(b"a", 1, wide);
        assert!(s.insert(b"a", wide) && s.insert(&long, wide) && !s.insert(&long, wide));
        assert_eq!(s.encoding(), "listpack");
        assert_eq!(members(&s), [b"a".to_vec(), long.clone()]);
        assert!(s.contains(&long) && s.remove(&long) && !s.contains(&long));
        assert!(s.insert(&long, wide));
        assert!(s.insert(&[b'x'; 1001], wide));
        assert_eq!((s.encoding(), s.len()), ("hashtable", 3));
        // An intset becomes a listpack only if its integers' text fits the value limit.
        let three = SetLimits { value: 3, ..wide };
        let mut big = SetValue::new();
        big.insert(b"-1000", three);
        big.insert(b"a", three);
        assert_eq!(big.encoding(), "hashtable");
        let mut small = SetValue::new();
        small.insert(b"-10", three);
        small.insert(b"100", three);
        small.insert(b"a", three);
        assert_eq!(small.encoding(), "listpack");
        assert_eq!(members(&small), [&b"-10"[..], b"100", b"a"]);
    }

    #[test]
    fn memory_follows_the_buffers_and_returns_to_nothing() {
        for encoding in ["intset", "listpack", "hashtable"] {
            let mut s = match encoding {
                "intset" => SetValue::new(),
                "listpack" => SetValue::sized_for(b"a", 1, D),
                _ => SetValue::sized_for(b"a", 1000, D),
            };
            let member = |i: usize| match encoding {
                "intset" => i.to_string(),
                _ => format!("member:{i}"),
            };
            let mut last = s.mem_size();
            for i in 0..100 {
                assert!(s.insert(member(i).as_bytes(), D));
                assert!(s.mem_size() >= last, "{encoding} grows");
                last = s.mem_size();
            }
            assert_eq!(s.encoding(), encoding);
            assert!(s.mem_size() > 100, "{encoding}: {}", s.mem_size());
            for i in 0..100 {
                assert!(s.remove(member(i).as_bytes()));
            }
            assert!(s.is_empty());
            match encoding {
                // The table keeps its buckets, as a hash map does; its members are gone.
                "hashtable" => assert_eq!(s.mem_size(), {
                    let Encoding::Table(table) = &s.encoding else {
                        unreachable!()
                    };
                    std::mem::size_of::<Table>()
                        + table
                            .parts
                            .maps()
                            .map(|m| table_bytes(m.capacity()))
                            .sum::<usize>()
                }),
                _ => assert!(s.mem_size() <= 16, "{encoding}: {}", s.mem_size()),
            }
        }
    }

    #[test]
    fn a_large_set_is_split_and_a_clone_shares_its_parts() {
        let mut s = SetValue::new();
        let n = HASH_SPLIT_LEN + 10;
        for i in 0..n {
            assert!(s.insert(format!("m{i}").as_bytes(), D));
        }
        assert!(s.is_split());
        let counted = s.mem_size();
        s.recount_table();
        assert_eq!(s.mem_size(), counted, "the running count is exact");
        let snapshot = s.clone();
        assert!(s.remove(b"m1"));
        assert!(s.insert(b"new", D));
        assert!(snapshot.contains(b"m1") && !snapshot.contains(b"new"));
        assert_eq!((snapshot.len(), s.len()), (n, n));
        assert_ne!(snapshot, s);
        let mut seen: Vec<Bytes> = (0..n).map(|i| s.member_at(i).unwrap().to_bytes()).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), n, "member_at reaches every member once");
        assert_eq!(s.member_at(n), None);
        assert_eq!(s.iter().count(), n);
    }

    /// A set is as small as a `Bytes`, so a value holds it inline; a small intset is held
    /// inline in it, a larger one is the value slot and an exact-sized array of its integers.
    #[test]
    fn an_intset_is_inline_while_small_and_its_array_exact_after() {
        assert!(std::mem::size_of::<SetValue>() <= std::mem::size_of::<Bytes>());
        let mut s = SetValue::new();
        assert_eq!(s.mem_size(), 0, "an empty intset allocates nothing");
        for v in ["1", "2", "3", "4", "5"] {
            assert!(s.insert(v.as_bytes(), D));
        }
        let Some((width, buf)) = s.ints() else {
            panic!("not an intset")
        };
        assert_eq!((width, buf.len(), s.mem_size()), (2, 10, 0), "inline");
        assert!(s.insert(b"100000", D));
        assert_eq!((s.len(), s.mem_size()), (6, 0), "widened, still inline");
        assert!(s.insert(b"100001", D));
        assert_eq!((s.len(), s.mem_size()), (7, 0), "28 bytes: still inline");
        assert!(s.insert(b"100002", D));
        assert_eq!(
            (s.len(), s.mem_size()),
            (8, 32),
            "32 bits each, in an exact-sized array"
        );
        assert!(s.remove(b"100000"));
        assert_eq!(
            (s.len(), s.mem_size()),
            (7, 0),
            "stays 32 bits, as Redis' intset does, and inline again"
        );
        assert!(s.contains(b"3") && !s.contains(b"100000") && s.contains(b"100002"));
        let members: Vec<Bytes> = s.iter().map(|m| m.to_bytes()).collect();
        assert_eq!(
            members,
            ["1", "2", "3", "4", "5", "100001", "100002"].map(|m| Bytes::from_static(m.as_bytes()))
        );
    }

    /// Every key's entry holds a `Value` inline: the collections are boxed so it stays the
    /// size of its string case (a `Bytes` and the tag).
    #[test]
    fn a_value_is_no_larger_than_a_string_and_its_tag() {
        assert_eq!(
            std::mem::size_of::<crate::Value>(),
            std::mem::size_of::<Bytes>() + 8
        );
    }

    #[test]
    fn equal_sets_compare_equal_whatever_their_encoding() {
        let mut a = SetValue::new();
        let mut b = SetValue::sized_for(b"x", 1000, D);
        for m in ["1", "2", "3"] {
            a.insert(m.as_bytes(), D);
            b.insert(m.as_bytes(), D);
        }
        assert_eq!((a.encoding(), b.encoding()), ("intset", "hashtable"));
        assert_eq!(a, b);
        b.insert(b"4", D);
        assert_ne!(a, b);
    }
}
