//! The sorted-set type, [`ZSetValue`], in the two encodings Redis 7.2 keeps sorted sets in: a
//! *listpack* (up to `zset-max-listpack-entries` members of at most `zset-max-listpack-value`
//! bytes: one exact-sized buffer of scores, member ends and member bytes, in (score, member)
//! order) and a *skiplist* (member → score in a hash map, kept in shared parts once large like a
//! hash's, plus an ordered index of (score, member)). A set is a listpack while it stays within
//! the limits it was written under ([`ZSetLimits`], the live settings, passed in by the caller),
//! becomes a skiplist when a write crosses them and, as in Redis, never goes back; only a fresh
//! key (a new ZADD, RESTORE, a snapshot load) starts packed again.
//!
//! Reads see members as [`ZMember`]s: bytes inside the listpack, or the skiplist's own shared
//! string, so a reply can take the latter without a copy.
//!
//! May import `value` (the shared [`Parts`] of large collections), `bytes`, `hashbrown` and
//! `imbl`; nothing here knows about keys, shards, expiry or commands.

use crate::heapstr::HeapStr;
use crate::value::{Parts, HASH_SPLIT_LEN, ITEM_OVERHEAD};
use bytes::Bytes;
use imbl::OrdSet;
use std::collections::BTreeSet;
use std::ops::{Bound, Deref};

/// Redis' default `zset-max-listpack-entries`: most members a listpack sorted set holds.
pub const ZSET_MAX_LISTPACK_ENTRIES: usize = 128;
/// Redis' default `zset-max-listpack-value`: longest member a listpack sorted set holds, in bytes.
pub const ZSET_MAX_LISTPACK_VALUE: usize = 64;

/// The most member bytes one listpack buffer holds (its member ends are 16-bit). Only a
/// configuration far above Redis' defaults reaches it (they allow 128 × 64 = 8 KiB); a set that
/// would pass it becomes a skiplist, as Redis' own listpack size check (`lpSafeToAdd`) does at 1 GiB.
const PACKED_MAX_BYTES: usize = u16::MAX as usize;

/// The limits a sorted set is kept packed within: the live `zset-max-listpack-entries` and
/// `zset-max-listpack-value` settings, read by the caller for each write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZSetLimits {
    /// Most members.
    pub entries: usize,
    /// Longest member, in bytes.
    pub value: usize,
}

impl ZSetLimits {
    /// Redis' defaults (for values built without a server's settings: tests, decoders).
    pub const REDIS_DEFAULT: ZSetLimits = ZSetLimits {
        entries: ZSET_MAX_LISTPACK_ENTRIES,
        value: ZSET_MAX_LISTPACK_VALUE,
    };
}

impl Default for ZSetLimits {
    fn default() -> Self {
        Self::REDIS_DEFAULT
    }
}

/// A member as a sorted set holds it: bytes inside a listpack, or a skiplist's own
/// reference-counted string. Derefs to the bytes.
#[derive(Debug, Clone, Copy)]
pub enum ZMember<'a> {
    Packed(&'a [u8]),
    Shared(&'a HeapStr),
}

impl<'a> ZMember<'a> {
    /// The member's bytes, for as long as the set is borrowed.
    pub fn as_slice(&self) -> &'a [u8] {
        match *self {
            ZMember::Packed(b) => b,
            ZMember::Shared(b) => b,
        }
    }

    /// The member as a string of its own: a long skiplist member's is shared (no copy), others
    /// copied.
    pub fn to_bytes(&self) -> Bytes {
        match *self {
            ZMember::Packed(b) => Bytes::copy_from_slice(b),
            ZMember::Shared(b) => b.to_bytes(),
        }
    }
}

impl Deref for ZMember<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq<[u8]> for ZMember<'_> {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

// ---------------------------------------------------------------------------------------------
// The listpack form

/// A listpack sorted set's buffer, read in place:
///
/// ```text
/// +-------+-----------+------------------------+-------------------------+---------------------+
/// | n u16 | format u8 | n × score (1/2/4/8 B)  | n × member end (1/2 B)  | member bytes, one   |
/// |       |           |                        |                         | after another       |
/// +-------+-----------+------------------------+-------------------------+---------------------+
/// ```
/// all little-endian, entries in ascending (score, member) order. `format` gives the columns'
/// widths: bits 0–1 the scores' (0: `i8`, 1: `i16`, 2: `i32` — when every score is an integer
/// that fits, as Redis' listpack keeps integral scores as integers —, 3: `f64`), bit 2 the ends'
/// (0: `u8` while the members take at most 255 bytes, 1: `u16`). Member `i` is the bytes from
/// end `i - 1` (0 for the first) to end `i`. An empty set is an empty buffer (no allocation).
/// A score of -0 is kept as 0, as Redis' listpack does (it stores an integral score as an
/// integer), while a skiplist keeps the sign.
/// Scores are a column of their own so a score range is a binary search; a member is found by a
/// linear scan (at most `zset-max-listpack-entries`, 128 by default, as in Redis' listpack).
#[derive(Clone, Copy)]
struct Packed<'a> {
    buf: &'a [u8],
    n: usize,
    /// Bytes per score: 1, 2, 4 (integers) or 8 (`f64`).
    score_width: usize,
    /// Bytes per member end: 1 or 2.
    end_width: usize,
}

/// Bytes of the count and format header.
const PACKED_HEADER: usize = 3;

impl<'a> Packed<'a> {
    fn of(buf: &'a [u8]) -> Self {
        let (n, format) = match buf {
            [a, b, format, ..] => (usize::from(u16::from_le_bytes([*a, *b])), *format),
            _ => (0, 0),
        };
        Packed {
            buf,
            n,
            score_width: 1 << (format & 3),
            end_width: 1 + usize::from(format >> 2 & 1),
        }
    }
    fn score(&self, i: usize) -> f64 {
        let at = PACKED_HEADER + self.score_width * i;
        let b = &self.buf[at..at + self.score_width];
        match self.score_width {
            1 => f64::from(b[0] as i8),
            2 => f64::from(i16::from_le_bytes([b[0], b[1]])),
            4 => f64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            _ => f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
        }
    }
    fn end(&self, i: usize) -> usize {
        let at = PACKED_HEADER + self.score_width * self.n + self.end_width * i;
        if self.end_width == 1 {
            usize::from(self.buf[at])
        } else {
            usize::from(u16::from_le_bytes([self.buf[at], self.buf[at + 1]]))
        }
    }
    fn member(&self, i: usize) -> &'a [u8] {
        let base = PACKED_HEADER + (self.score_width + self.end_width) * self.n;
        let start = if i == 0 { 0 } else { self.end(i - 1) };
        &self.buf[base + start..base + self.end(i)]
    }
    fn entry(&self, i: usize) -> (f64, &'a [u8]) {
        (self.score(i), self.member(i))
    }
    /// Total bytes of the members.
    fn member_bytes(&self) -> usize {
        if self.n == 0 {
            0
        } else {
            self.end(self.n - 1)
        }
    }
    fn find(&self, member: &[u8]) -> Option<usize> {
        (0..self.n).find(|&i| self.member(i) == member)
    }
    /// How many entries sort before (score, member).
    fn position(&self, score: f64, member: &[u8]) -> usize {
        partition_point(self.n, |i| {
            (Score(self.score(i)), self.member(i)) < (Score(score), member)
        })
    }
    /// The entries `lo..hi` in order.
    fn iter(self, lo: usize, hi: usize) -> PackedIter<'a> {
        PackedIter {
            packed: self,
            front: lo,
            back: hi.max(lo),
        }
    }
}

/// The first index in `0..n` for which `before` is false (`before` true then false over it).
fn partition_point(n: usize, before: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if before(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// A listpack buffer holding `items` (in order), exactly sized, its columns as narrow as they
/// can be. `items` is walked four times (widths, scores, ends, members), so nothing is
/// collected on the way.
fn packed_from<'a>(items: impl Iterator<Item = (f64, &'a [u8])> + Clone) -> Box<[u8]> {
    let (n, bytes, score_code) = items
        .clone()
        .fold((0usize, 0usize, 0u8), |(n, b, w), (s, m)| {
            (n + 1, b + m.len(), w.max(score_width_code(packed_score(s))))
        });
    if n == 0 {
        return Box::default();
    }
    let score_width = 1usize << score_code;
    let end_width = if bytes <= usize::from(u8::MAX) { 1 } else { 2 };
    let mut buf = Vec::with_capacity(PACKED_HEADER + (score_width + end_width) * n + bytes);
    buf.extend_from_slice(&(n as u16).to_le_bytes());
    buf.push(score_code | (end_width as u8 - 1) << 2);
    for (score, _) in items.clone() {
        let score = packed_score(score);
        match score_width {
            1 => buf.push(score as i8 as u8),
            2 => buf.extend_from_slice(&(score as i16).to_le_bytes()),
            4 => buf.extend_from_slice(&(score as i32).to_le_bytes()),
            _ => buf.extend_from_slice(&score.to_le_bytes()),
        }
    }
    let mut end = 0;
    for (_, member) in items.clone() {
        end += member.len();
        if end_width == 1 {
            buf.push(end as u8);
        } else {
            buf.extend_from_slice(&(end as u16).to_le_bytes());
        }
    }
    for (_, member) in items {
        buf.extend_from_slice(member);
    }
    buf.into_boxed_slice()
}

/// The narrowest score column that holds `score` exactly: 0 (`i8`), 1 (`i16`), 2 (`i32`) or 3
/// (`f64`; fractions, infinities and integers beyond `i32`).
fn score_width_code(score: f64) -> u8 {
    if score == f64::from(score as i8) {
        0
    } else if score == f64::from(score as i16) {
        1
    } else if score == f64::from(score as i32) {
        2
    } else {
        3
    }
}

/// `score` as a listpack keeps it: -0 as 0.
fn packed_score(score: f64) -> f64 {
    if score == 0.0 {
        0.0
    } else {
        score
    }
}

/// Entries of a listpack, in order, as (member, score).
#[derive(Clone)]
struct PackedIter<'a> {
    packed: Packed<'a>,
    front: usize,
    back: usize,
}

impl<'a> Iterator for PackedIter<'a> {
    type Item = (ZMember<'a>, f64);
    fn next(&mut self) -> Option<Self::Item> {
        if self.front >= self.back {
            return None;
        }
        let (score, member) = self.packed.entry(self.front);
        self.front += 1;
        Some((ZMember::Packed(member), score))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.back - self.front;
        (left, Some(left))
    }
    fn nth(&mut self, n: usize) -> Option<Self::Item> {
        self.front = self.front.saturating_add(n).min(self.back);
        self.next()
    }
}

impl DoubleEndedIterator for PackedIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.front >= self.back {
            return None;
        }
        self.back -= 1;
        let (score, member) = self.packed.entry(self.back);
        Some((ZMember::Packed(member), score))
    }
    fn nth_back(&mut self, n: usize) -> Option<Self::Item> {
        self.back = self.back.saturating_sub(n).max(self.front);
        self.next_back()
    }
}

impl ExactSizeIterator for PackedIter<'_> {}

// ---------------------------------------------------------------------------------------------
// The skiplist form

/// A sorted set past the listpack limits: member → score plus an ordered index of (score,
/// member). The member map is kept like a hash's ([`Parts`]); the index of a large set is a
/// persistent B-tree ([`Order`]), so a snapshot neither copies a large sorted set nor makes the
/// next write to it do so. (Named after Redis' encoding; the index is a B-tree, not a skiplist.)
#[derive(Debug, Clone, Default)]
struct SkipList {
    scores: Parts<f64>,
    ordered: Order,
    len: usize,
    /// Heap bytes, estimated per member.
    bytes: usize,
}

/// The estimated heap bytes of one skiplist member: its one [`HeapStr`] (the map and the index
/// share it), the map's slot and the index's entry.
fn skiplist_member_bytes(member_len: usize) -> usize {
    crate::table::alloc_class(HeapStr::alloc_len(member_len)) + 2 * ITEM_OVERHEAD
}

impl SkipList {
    /// Room for `len` members (up to the size at which the map is split into parts anyway).
    fn with_capacity(len: usize) -> Self {
        let mut z = SkipList::default();
        if let Parts::Flat(map) = &mut z.scores {
            map.reserve(len.min(HASH_SPLIT_LEN));
        }
        z
    }
    fn score(&self, member: &[u8]) -> Option<f64> {
        self.scores.map_of(member).get(member).copied()
    }
    fn insert(&mut self, member: &[u8], score: f64) -> Option<f64> {
        let scores = self.scores.map_of_mut(member);
        if let Some(old) = scores.get_mut(member) {
            let prev = *old;
            if prev.to_bits() != score.to_bits() {
                *old = score;
                let key = HeapStr::copy_from_slice(member);
                self.ordered.remove(&(Score(prev), key.clone()));
                self.ordered.insert((Score(score), key));
            }
            Some(prev)
        } else {
            let key = HeapStr::copy_from_slice(member);
            scores.insert(key.clone(), score);
            self.ordered.insert((Score(score), key));
            self.bytes += skiplist_member_bytes(member.len());
            self.len += 1;
            self.scores.grew_to(self.len);
            self.ordered.grew_to(self.len);
            None
        }
    }
    fn remove(&mut self, member: &[u8]) -> bool {
        match self.scores.map_of_mut(member).remove_entry(member) {
            Some((key, score)) => {
                self.ordered.remove(&(Score(score), key));
                self.bytes -= skiplist_member_bytes(member.len());
                self.len -= 1;
                true
            }
            None => false,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The sorted set

/// A sorted set, in either encoding (see the module). 16 bytes, held inline in a value.
#[derive(Debug, Clone)]
pub struct ZSetValue {
    repr: Repr,
}

#[derive(Debug, Clone)]
enum Repr {
    /// The listpack form (see [`Packed`]).
    Packed(Box<[u8]>),
    /// Boxed: most sorted sets are small, and keep the packed form's size.
    SkipList(Box<SkipList>),
}

impl std::fmt::Debug for Packed<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries((0..self.n).map(|i| self.entry(i)))
            .finish()
    }
}

impl Default for ZSetValue {
    fn default() -> Self {
        ZSetValue {
            repr: Repr::Packed(Box::default()),
        }
    }
}

impl PartialEq for ZSetValue {
    /// The same members with the same scores (bit for bit), whatever the encodings.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self
                .members()
                .all(|(m, s)| other.score(&m).is_some_and(|o| o.to_bits() == s.to_bits()))
    }
}

impl ZSetValue {
    /// An empty sorted set (a listpack).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty sorted set for a new key about to receive `size_hint` members, the first
    /// `first_len` bytes long: a skiplist from the start when that would not fit `limits`, as
    /// Redis 7.2's `zsetTypeCreate` decides for ZADD.
    pub fn sized_for(size_hint: usize, first_len: usize, limits: ZSetLimits) -> Self {
        if limits.entries == 0 || size_hint > limits.entries || first_len > limits.value {
            ZSetValue {
                repr: Repr::SkipList(Box::new(SkipList::with_capacity(size_hint))),
            }
        } else {
            Self::default()
        }
    }

    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Packed(buf) => Packed::of(buf).n,
            Repr::SkipList(z) => z.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes held by the value (it is itself held inline in its entry). O(1).
    pub fn mem_size(&self) -> usize {
        match &self.repr {
            Repr::Packed(buf) => buf.len(),
            Repr::SkipList(z) => std::mem::size_of::<SkipList>() + z.bytes,
        }
    }

    pub fn score(&self, member: &[u8]) -> Option<f64> {
        match &self.repr {
            Repr::Packed(buf) => {
                let p = Packed::of(buf);
                p.find(member).map(|i| p.score(i))
            }
            Repr::SkipList(z) => z.score(member),
        }
    }

    /// `member`'s rank (its index in ascending order) and score.
    pub fn rank(&self, member: &[u8]) -> Option<(usize, f64)> {
        match &self.repr {
            Repr::Packed(buf) => {
                let p = Packed::of(buf);
                p.find(member).map(|i| (i, p.score(i)))
            }
            Repr::SkipList(z) => {
                let score = z.score(member)?;
                // No order statistics in the index: count the members before this one.
                let key = (Score(score), HeapStr::copy_from_slice(member));
                let below = z
                    .ordered
                    .range((Bound::Unbounded, Bound::Excluded(key)))
                    .count();
                Some((below, score))
            }
        }
    }

    /// Set `member`'s score; returns the previous score if it existed. A new member that would
    /// take a listpack past `limits` (one member too many, or a member too long) makes the set a
    /// skiplist first, as Redis' `zsetAdd` does; a changed score never converts.
    pub fn insert(&mut self, member: &[u8], score: f64, limits: ZSetLimits) -> Option<f64> {
        if let Repr::Packed(buf) = &mut self.repr {
            let p = Packed::of(buf);
            match p.find(member) {
                Some(i) => {
                    let prev = p.score(i);
                    if prev.to_bits() != packed_score(score).to_bits() {
                        let at = p.position(score, member);
                        let old = |j: usize| p.entry(j);
                        let items = (0..at)
                            .filter(move |&j| j != i)
                            .map(old)
                            .chain(std::iter::once((score, member)))
                            .chain((at..p.n).filter(move |&j| j != i).map(old));
                        *buf = packed_from(items);
                    }
                    return Some(prev);
                }
                None if p.n < limits.entries
                    && member.len() <= limits.value
                    && p.n < usize::from(u16::MAX)
                    && p.member_bytes() + member.len() <= PACKED_MAX_BYTES =>
                {
                    let at = p.position(score, member);
                    let old = |j: usize| p.entry(j);
                    let items = (0..at)
                        .map(old)
                        .chain(std::iter::once((score, member)))
                        .chain((at..p.n).map(old));
                    *buf = packed_from(items);
                    return None;
                }
                None => self.convert_to_skiplist(),
            }
        }
        let Repr::SkipList(z) = &mut self.repr else {
            unreachable!("converted above")
        };
        z.insert(member, score)
    }

    /// Insert `pairs` (member, score) at once: for the members of a snapshot, a RESTORE payload or
    /// a range, which are new to the set and distinct. A listpack that can take them all is
    /// built once (not once per member); one that cannot becomes a skiplist first. A member that
    /// is not new is still handled as [`ZSetValue::insert`] would (only the encoding may differ).
    pub fn extend<'a>(
        &mut self,
        pairs: impl IntoIterator<Item = (&'a [u8], f64)>,
        limits: ZSetLimits,
    ) {
        let new: Vec<(f64, &[u8])> = pairs.into_iter().map(|(m, s)| (s, m)).collect();
        if let Repr::Packed(buf) = &self.repr {
            let p = Packed::of(buf);
            let n = p.n + new.len();
            let bytes = p.member_bytes() + new.iter().map(|(_, m)| m.len()).sum::<usize>();
            let fits = n <= limits.entries
                && n <= usize::from(u16::MAX)
                && bytes <= PACKED_MAX_BYTES
                && new.iter().all(|(_, m)| m.len() <= limits.value);
            if fits {
                let mut all: Vec<(f64, &[u8])> = (0..p.n)
                    .map(|i| p.entry(i))
                    .chain(new.iter().copied())
                    .collect();
                all.sort_unstable_by(|a, b| (Score(a.0), a.1).cmp(&(Score(b.0), b.1)));
                let mut names: Vec<&[u8]> = all.iter().map(|(_, m)| *m).collect();
                names.sort_unstable();
                if names.windows(2).all(|w| w[0] != w[1]) {
                    let packed = packed_from(all.iter().copied());
                    self.repr = Repr::Packed(packed);
                    return;
                }
            } else {
                self.convert_to_skiplist();
            }
        }
        for (score, member) in new {
            self.insert(member, score, limits);
        }
    }

    pub fn remove(&mut self, member: &[u8]) -> bool {
        match &mut self.repr {
            Repr::Packed(buf) => {
                let p = Packed::of(buf);
                let Some(i) = p.find(member) else {
                    return false;
                };
                let items = (0..p.n).filter(|&j| j != i).map(|j| p.entry(j));
                *buf = packed_from(items);
                true
            }
            Repr::SkipList(z) => z.remove(member),
        }
    }

    /// Make a listpack a skiplist (for good). Past the limits, and for SORT, which converts the
    /// sorted set it sorts in Redis.
    pub fn convert_to_skiplist(&mut self) {
        let Repr::Packed(buf) = &self.repr else {
            return;
        };
        let p = Packed::of(buf);
        let mut z = SkipList::with_capacity(p.n + 1);
        for (score, member) in (0..p.n).map(|i| p.entry(i)) {
            z.insert(member, score);
        }
        self.repr = Repr::SkipList(Box::new(z));
    }

    /// Whether the set is a listpack.
    pub fn is_packed(&self) -> bool {
        matches!(self.repr, Repr::Packed(_))
    }

    /// `OBJECT ENCODING`: `listpack` or `skiplist`.
    pub fn encoding(&self) -> &'static str {
        if self.is_packed() {
            "listpack"
        } else {
            "skiplist"
        }
    }

    /// Members in ascending (score, member) order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (ZMember<'_>, f64)> {
        match &self.repr {
            Repr::Packed(buf) => {
                let p = Packed::of(buf);
                Either::Left(p.iter(0, p.n))
            }
            Repr::SkipList(z) => Either::Right(z.ordered.iter().map(shared_entry)),
        }
    }

    /// Members whose score lies within [min, max] (honouring exclusivity), ascending.
    pub fn range_by_score(
        &self,
        min: ScoreBound,
        max: ScoreBound,
    ) -> impl DoubleEndedIterator<Item = (ZMember<'_>, f64)> {
        let empty = min.value.is_nan()
            || max.value.is_nan()
            || min.value > max.value
            || (min.value == max.value && (min.exclusive || max.exclusive));
        match &self.repr {
            Repr::Packed(buf) => {
                let p = Packed::of(buf);
                if empty {
                    return Either::Left(p.iter(0, 0));
                }
                let lo = partition_point(p.n, |i| !min.below(p.score(i)));
                let hi = partition_point(p.n, |i| max.above(p.score(i)));
                Either::Left(p.iter(lo, hi))
            }
            Repr::SkipList(z) => {
                let range = if empty {
                    None
                } else {
                    let start = Bound::Included((Score(min.value), HeapStr::copy_from_slice(&[])));
                    let end = if max.value == f64::INFINITY {
                        Bound::Unbounded
                    } else {
                        Bound::Excluded((Score(max.value.next_up()), HeapStr::copy_from_slice(&[])))
                    };
                    Some(z.ordered.range((start, end)))
                };
                Either::Right(
                    range
                        .into_iter()
                        .flatten()
                        .filter(move |(s, _)| min.below(s.0) && max.above(s.0))
                        .map(shared_entry),
                )
            }
        }
    }

    /// Members and their scores, in no particular order (cheaper than [`ZSetValue::iter`] for a
    /// skiplist; the same order for a listpack).
    pub fn members(&self) -> impl Iterator<Item = (ZMember<'_>, f64)> + Clone {
        match &self.repr {
            Repr::Packed(buf) => {
                let p = Packed::of(buf);
                Either::Left(p.iter(0, p.n))
            }
            Repr::SkipList(z) => {
                Either::Right(z.scores.iter().map(|(m, s)| (ZMember::Shared(m), *s)))
            }
        }
    }

    /// Whether the set is kept in shared parts and a persistent order (for tests).
    pub fn is_split(&self) -> bool {
        match &self.repr {
            Repr::Packed(_) => false,
            Repr::SkipList(z) => z.scores.is_split() && z.ordered.is_large(),
        }
    }
}

/// An entry of a skiplist's order as a read sees it.
fn shared_entry((score, member): &Entry) -> (ZMember<'_>, f64) {
    (ZMember::Shared(member), score.0)
}

/// A score with a total order (`f64::total_cmp`) so it can live in a BTreeSet. NaN never gets in:
/// commands reject it before it reaches the set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score(pub f64);

impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Score {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // -0.0 and 0.0 compare equal in Redis; normalise so total_cmp agrees.
        let a = if self.0 == 0.0 { 0.0 } else { self.0 };
        let b = if other.0 == 0.0 { 0.0 } else { other.0 };
        a.total_cmp(&b)
    }
}

/// One end of a score range (`ZCOUNT key (1 +inf`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreBound {
    pub value: f64,
    pub exclusive: bool,
}

impl ScoreBound {
    /// True when `score` is on the inner side of this bound used as a minimum.
    pub fn below(&self, score: f64) -> bool {
        if self.exclusive {
            self.value < score
        } else {
            self.value <= score
        }
    }
    /// True when `score` is on the inner side of this bound used as a maximum.
    pub fn above(&self, score: f64) -> bool {
        if self.exclusive {
            score < self.value
        } else {
            score <= self.value
        }
    }
}

/// The (score, member) index of a sorted set: a `BTreeSet` while small, a persistent B-tree
/// (`imbl::OrdSet`) from [`HASH_SPLIT_LEN`] members on, whose clone is O(1) and whose first change
/// after a clone copies only the nodes on its path. The persistent tree takes about 14 % more
/// memory per member, so small sets, which a snapshot copies in microseconds, do without it.
#[derive(Debug, Clone)]
enum Order {
    Small(BTreeSet<Entry>),
    Large(OrdSet<Entry>),
}

impl Default for Order {
    fn default() -> Self {
        Order::Small(BTreeSet::new())
    }
}

impl Order {
    fn insert(&mut self, entry: Entry) {
        match self {
            Order::Small(set) => {
                set.insert(entry);
            }
            Order::Large(set) => {
                set.insert(entry);
            }
        }
    }
    fn remove(&mut self, entry: &Entry) {
        match self {
            Order::Small(set) => {
                set.remove(entry);
            }
            Order::Large(set) => {
                set.remove(entry);
            }
        }
    }
    fn iter(
        &self,
    ) -> Either<impl DoubleEndedIterator<Item = &Entry>, impl DoubleEndedIterator<Item = &Entry>>
    {
        match self {
            Order::Small(set) => Either::Left(set.iter()),
            Order::Large(set) => Either::Right(set.iter()),
        }
    }
    fn range(
        &self,
        range: (Bound<Entry>, Bound<Entry>),
    ) -> Either<impl DoubleEndedIterator<Item = &Entry>, impl DoubleEndedIterator<Item = &Entry>>
    {
        match self {
            Order::Small(set) => Either::Left(set.range(range)),
            Order::Large(set) => Either::Right(set.range(range)),
        }
    }
    /// Becomes persistent once the set reaches [`HASH_SPLIT_LEN`] members (`len`).
    fn grew_to(&mut self, len: usize) {
        if let Order::Small(set) = self {
            if len >= HASH_SPLIT_LEN {
                *self = Order::Large(std::mem::take(set).into_iter().collect());
            }
        }
    }
    fn is_large(&self) -> bool {
        matches!(self, Order::Large(_))
    }
}

/// An entry of a sorted set's order.
type Entry = (Score, HeapStr);

/// One of two iterators over the same items.
#[derive(Clone)]
enum Either<L, R> {
    Left(L),
    Right(R),
}

impl<T, L: Iterator<Item = T>, R: Iterator<Item = T>> Iterator for Either<L, R> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        match self {
            Either::Left(l) => l.next(),
            Either::Right(r) => r.next(),
        }
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Either::Left(l) => l.size_hint(),
            Either::Right(r) => r.size_hint(),
        }
    }
    fn nth(&mut self, n: usize) -> Option<T> {
        match self {
            Either::Left(l) => l.nth(n),
            Either::Right(r) => r.nth(n),
        }
    }
}

impl<T, L: DoubleEndedIterator<Item = T>, R: DoubleEndedIterator<Item = T>> DoubleEndedIterator
    for Either<L, R>
{
    fn next_back(&mut self) -> Option<T> {
        match self {
            Either::Left(l) => l.next_back(),
            Either::Right(r) => r.next_back(),
        }
    }
    fn nth_back(&mut self, n: usize) -> Option<T> {
        match self {
            Either::Left(l) => l.nth_back(n),
            Either::Right(r) => r.nth_back(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::HASH_BUCKETS;
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    const DEFAULT: ZSetLimits = ZSetLimits::REDIS_DEFAULT;
    /// Redis' limits (a small set stays packed) and none (every set is a skiplist).
    const BOTH_FORMS: [ZSetLimits; 2] = [
        DEFAULT,
        ZSetLimits {
            entries: 0,
            value: 0,
        },
    ];

    fn skiplist(z: &ZSetValue) -> &SkipList {
        match &z.repr {
            Repr::SkipList(s) => s,
            Repr::Packed(_) => panic!("packed"),
        }
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

    /// How many distinct parts `fields` fall in.
    fn parts_of(fields: &[&[u8]]) -> usize {
        let mut parts: Vec<usize> = fields.iter().map(|f| crate::value::bucket_of(f)).collect();
        parts.sort_unstable();
        parts.dedup();
        parts.len()
    }

    fn members(z: &ZSetValue) -> Vec<String> {
        z.iter()
            .map(|(m, _)| String::from_utf8_lossy(&m).into_owned())
            .collect()
    }

    #[test]
    fn a_large_sorted_set_is_shared_by_a_clone_and_keeps_its_order() {
        let mut z = ZSetValue::new();
        let n = HASH_SPLIT_LEN + 500;
        let score = |i: usize| ((i * 7919) % 1000) as f64 - 500.0;
        for i in 0..n {
            assert_eq!(
                z.insert(format!("m{i}").as_bytes(), score(i), DEFAULT),
                None
            );
        }
        assert!(z.is_split());
        let snapshot = z.clone();
        assert_eq!(z.insert(b"m1", 10_000.0, DEFAULT), Some(score(1)));
        assert!(z.remove(b"m2"));
        assert_eq!(z.insert(b"new", -10_000.0, DEFAULT), None);
        // The clone is what it was.
        assert_eq!(snapshot.len(), n);
        assert_eq!(snapshot.score(b"m1"), Some(score(1)));
        assert_eq!(snapshot.score(b"m2"), Some(score(2)));
        assert_eq!(snapshot.score(b"new"), None);
        assert_ne!(snapshot, z);
        assert_eq!(
            shared_parts(&skiplist(&snapshot).scores, &skiplist(&z).scores),
            HASH_BUCKETS - parts_of(&[b"m1", b"m2", b"new"]),
            "only the written parts are copied"
        );
        // Both orders agree with a sorted model.
        for (set, changed) in [(&snapshot, false), (&z, true)] {
            let mut model: Vec<(Score, Vec<u8>)> = (0..n)
                .filter(|&i| !(changed && i == 2))
                .map(|i| {
                    let s = if changed && i == 1 {
                        10_000.0
                    } else {
                        score(i)
                    };
                    (Score(s), format!("m{i}").into_bytes())
                })
                .collect();
            if changed {
                model.push((Score(-10_000.0), b"new".to_vec()));
            }
            model.sort();
            let got: Vec<(Score, Vec<u8>)> =
                set.iter().map(|(m, s)| (Score(s), m.to_vec())).collect();
            assert_eq!(got, model);
            assert_eq!(set.len(), model.len());
            let zero = ScoreBound {
                value: 0.0,
                exclusive: false,
            };
            let ten = ScoreBound {
                value: 10.0,
                exclusive: true,
            };
            let in_range = set.range_by_score(zero, ten).count();
            assert_eq!(
                in_range,
                model
                    .iter()
                    .filter(|(s, _)| s.0 >= 0.0 && s.0 < 10.0)
                    .count()
            );
        }
    }

    #[test]
    fn zset_orders_by_score_then_member() {
        for limits in BOTH_FORMS {
            let mut z = ZSetValue::new();
            z.insert(b"b", 1.0, limits);
            z.insert(b"a", 1.0, limits);
            z.insert(b"c", 0.5, limits);
            assert_eq!(members(&z), ["c", "a", "b"]);
            assert_eq!(z.insert(b"c", 2.0, limits), Some(0.5));
            assert_eq!(members(&z), ["a", "b", "c"]);
            assert_eq!(z.rank(b"b"), Some((1, 1.0)));
            assert_eq!(z.rank(b"x"), None);
            let incl = ScoreBound {
                value: 1.0,
                exclusive: false,
            };
            let excl = ScoreBound {
                value: 1.0,
                exclusive: true,
            };
            let inf = ScoreBound {
                value: f64::INFINITY,
                exclusive: false,
            };
            assert_eq!(z.range_by_score(incl, inf).count(), 3);
            assert_eq!(z.range_by_score(excl, inf).count(), 1);
            assert_eq!(z.range_by_score(inf, incl).count(), 0);
            assert!(z.remove(b"a"));
            assert!(!z.remove(b"a"));
            assert_eq!(z.len(), 2);
            assert_eq!(z.is_packed(), limits == DEFAULT);
        }
    }

    #[test]
    fn encodings_follow_redis_rules() {
        let mut z = ZSetValue::new();
        for i in 0..ZSET_MAX_LISTPACK_ENTRIES {
            z.insert(format!("m{i}").as_bytes(), 1.0, DEFAULT);
        }
        assert_eq!(z.encoding(), "listpack");
        // A changed score never converts.
        z.insert(
            b"m0",
            2.0,
            ZSetLimits {
                entries: 1,
                value: 1,
            },
        );
        assert_eq!(z.encoding(), "listpack");
        z.insert(b"one-more", 1.0, DEFAULT);
        assert_eq!(z.encoding(), "skiplist");
        z.remove(b"one-more");
        z.remove(b"m1");
        assert_eq!(z.encoding(), "skiplist", "Redis never converts back");
        assert_eq!(z.len(), ZSET_MAX_LISTPACK_ENTRIES - 1);
        assert_eq!(z.score(b"m0"), Some(2.0));

        let mut z = ZSetValue::new();
        z.insert(&[b'm'; ZSET_MAX_LISTPACK_VALUE], 1.0, DEFAULT);
        assert_eq!(z.encoding(), "listpack");
        z.insert(&[b'm'; ZSET_MAX_LISTPACK_VALUE + 1], 1.0, DEFAULT);
        assert_eq!(crate::Value::zset(z).encoding(), "skiplist");

        // The live limits are what counts.
        let small = ZSetLimits {
            entries: 2,
            value: 3,
        };
        let mut z = ZSetValue::new();
        z.insert(b"abc", 1.0, small);
        z.insert(b"d", 1.0, small);
        assert!(z.is_packed());
        z.insert(b"e", 1.0, small);
        assert!(!z.is_packed());
        let mut z = ZSetValue::new();
        z.insert(b"abcd", 1.0, small);
        assert!(!z.is_packed());

        // A new key's first write picks its encoding from its size (zsetTypeCreate).
        assert!(ZSetValue::sized_for(128, 64, DEFAULT).is_packed());
        assert!(!ZSetValue::sized_for(129, 1, DEFAULT).is_packed());
        assert!(!ZSetValue::sized_for(1, 65, DEFAULT).is_packed());
        assert!(!ZSetValue::sized_for(
            1,
            1,
            ZSetLimits {
                entries: 0,
                value: 64
            }
        )
        .is_packed());

        // SORT's conversion.
        let mut z = ZSetValue::new();
        z.insert(b"a", 1.0, DEFAULT);
        z.convert_to_skiplist();
        assert_eq!(z.encoding(), "skiplist");
        assert_eq!(z.score(b"a"), Some(1.0));
    }

    #[test]
    fn a_listpack_is_one_exact_sized_buffer() {
        let mut z = ZSetValue::new();
        assert_eq!(z.mem_size(), 0);
        assert_eq!(std::mem::size_of::<ZSetValue>(), 16);
        for i in 0..5 {
            z.insert(format!("member{i}").as_bytes(), f64::from(i), DEFAULT);
        }
        // Count and format, five 1-byte scores (small integers), five 1-byte ends, five 7-byte
        // members.
        assert_eq!(z.mem_size(), 3 + 5 * (1 + 1 + 7));
        z.remove(b"member3");
        assert_eq!(z.mem_size(), 3 + 4 * (1 + 1 + 7));
        // A fraction widens the score column to f64, 300 bytes of members the ends to u16.
        z.insert(b"half", 0.5, DEFAULT);
        assert_eq!(z.mem_size(), 3 + 4 * (8 + 1 + 7) + 8 + 1 + 4);
        assert_eq!(z.score(b"half"), Some(0.5));
        z.remove(b"half");
        assert_eq!(z.mem_size(), 3 + 4 * (1 + 1 + 7));
        for (i, score) in [(0, 40_000.0), (1, -3e9), (2, -200.0), (4, f64::INFINITY)] {
            z.insert(format!("member{i}").as_bytes(), score, DEFAULT);
            assert_eq!(z.score(format!("member{i}").as_bytes()), Some(score));
        }
        z.insert(&[b'x'; 64], 1.0, DEFAULT);
        z.insert(&[b'y'; 64], 1.0, DEFAULT);
        z.insert(&[b'z'; 64], 1.0, DEFAULT);
        z.insert(&[b'w'; 64], 1.0, DEFAULT);
        assert_eq!(z.mem_size(), 3 + 8 * (8 + 2) + 4 * 7 + 4 * 64);
        assert_eq!(members(&z)[0], "member1");
        assert_eq!(z.rank(&[b'z'; 64]), Some((5, 1.0)));
        for i in 0..5 {
            z.remove(format!("member{i}").as_bytes());
        }
        for c in [b'w', b'x', b'y', b'z'] {
            assert!(z.remove(&[c; 64]));
        }
        assert!(z.is_empty());
        assert_eq!(z.mem_size(), 0);
    }

    #[test]
    fn zero_and_negative_zero_are_one_score_and_only_a_skiplist_keeps_the_sign() {
        for limits in BOTH_FORMS {
            let mut z = ZSetValue::new();
            z.insert(b"b", 0.0, limits);
            z.insert(b"a", -0.0, limits);
            assert_eq!(members(&z), ["a", "b"]);
            assert_eq!(z.insert(b"b", -0.0, limits), Some(0.0));
            let kept = if z.is_packed() { 0.0f64 } else { -0.0f64 };
            assert_eq!(z.score(b"b").map(f64::to_bits), Some(kept.to_bits()));
            assert_eq!(z.score(b"a").map(f64::to_bits), Some(kept.to_bits()));
            let zero = ScoreBound {
                value: 0.0,
                exclusive: false,
            };
            assert_eq!(z.range_by_score(zero, zero).count(), 2);
        }
    }

    #[test]
    fn extend_packs_once_or_converts_first() {
        let pairs: Vec<(Vec<u8>, f64)> = (0..10)
            .map(|i| (format!("m{i}").into_bytes(), f64::from(10 - i)))
            .collect();
        let mut z = ZSetValue::new();
        z.extend(pairs.iter().map(|(m, s)| (&m[..], *s)), DEFAULT);
        assert!(z.is_packed());
        assert_eq!(z.len(), 10);
        assert_eq!(members(&z)[0], "m9");
        z.extend([(&b"m0"[..], -1.0)], DEFAULT);
        assert_eq!((z.len(), members(&z)[0].as_str()), (10, "m0"));
        let tight = ZSetLimits {
            entries: 10,
            value: 64,
        };
        z.extend([(&b"x"[..], 0.0)], tight);
        assert!(!z.is_packed());
        assert_eq!(z.len(), 11);
        let mut model = ZSetValue::new();
        for (m, s) in &pairs {
            model.insert(m, *s, DEFAULT);
        }
        model.insert(b"m0", -1.0, DEFAULT);
        model.insert(b"x", 0.0, DEFAULT);
        assert_eq!(z, model, "equal across encodings");
    }

    /// One step of the model test.
    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, usize),
        Remove(u8),
        Extend(Vec<(u8, usize)>),
    }

    /// Scores of every width a listpack column takes.
    const SCORES: [f64; 14] = [
        -1.5,
        -1.0,
        -0.5,
        0.0,
        0.5,
        1.0,
        1.5,
        127.0,
        -129.0,
        40_000.0,
        -3e9,
        1e300,
        f64::NEG_INFINITY,
        f64::INFINITY,
    ];

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..12, 0usize..SCORES.len()).prop_map(|(m, s)| Op::Insert(m, s)),
            2 => (0u8..12).prop_map(Op::Remove),
            1 => proptest::collection::vec((12u8..40, 0usize..SCORES.len()), 0..4).prop_map(Op::Extend),
        ]
    }

    /// Member `m`: its length grows with `m`, so some cross a small value limit.
    fn name(m: u8) -> Vec<u8> {
        vec![b'a' + m % 26; 1 + usize::from(m % 5)]
    }

    proptest! {
        #[test]
        fn both_encodings_agree_with_a_model(
            ops in proptest::collection::vec(op(), 1..60),
            entries in 0usize..10,
            value in 0usize..6,
        ) {
            let limits = ZSetLimits { entries, value };
            let mut z = ZSetValue::new();
            let mut model: BTreeMap<Vec<u8>, f64> = BTreeMap::new();
            let mut crossed = false;
            for op in ops {
                match op {
                    Op::Insert(m, s) => {
                        let (m, s) = (name(m), SCORES[s]);
                        if !model.contains_key(&m) {
                            crossed |= model.len() + 1 > entries || m.len() > value;
                        }
                        prop_assert_eq!(z.insert(&m, s, limits), model.insert(m, s));
                    }
                    Op::Remove(m) => {
                        let m = name(m);
                        prop_assert_eq!(z.remove(&m), model.remove(&m).is_some());
                    }
                    Op::Extend(pairs) => {
                        let mut fresh: BTreeMap<Vec<u8>, f64> = BTreeMap::new();
                        for (m, s) in pairs {
                            let m = name(m);
                            if !model.contains_key(&m) {
                                fresh.insert(m, SCORES[s]);
                            }
                        }
                        let n = model.len() + fresh.len();
                        crossed |= !fresh.is_empty()
                            && (n > entries || fresh.keys().any(|m| m.len() > value));
                        z.extend(fresh.iter().map(|(m, s)| (&m[..], *s)), limits);
                        model.extend(fresh);
                    }
                }
                prop_assert_eq!(z.is_packed(), !crossed);
                let mut sorted: Vec<(Score, Vec<u8>)> =
                    model.iter().map(|(m, s)| (Score(*s), m.clone())).collect();
                sorted.sort();
                let got: Vec<(Score, Vec<u8>)> =
                    z.iter().map(|(m, s)| (Score(s), m.to_vec())).collect();
                prop_assert_eq!(&got, &sorted);
                let back: Vec<(Score, Vec<u8>)> =
                    z.iter().rev().map(|(m, s)| (Score(s), m.to_vec())).collect();
                prop_assert_eq!(back.len(), sorted.len());
                prop_assert_eq!(z.len(), model.len());
                for (rank, (s, m)) in sorted.iter().enumerate() {
                    prop_assert_eq!(z.rank(m), Some((rank, s.0)));
                    prop_assert_eq!(z.score(m), Some(s.0));
                }
                for (lo, hi, lx, hx) in [(-1.0, 0.5, false, false), (-0.5, 1.0, true, false), (0.0, 0.0, false, true), (-0.5, -0.5, false, false)] {
                    let min = ScoreBound { value: lo, exclusive: lx };
                    let max = ScoreBound { value: hi, exclusive: hx };
                    let want: Vec<&Vec<u8>> = sorted
                        .iter()
                        .filter(|(s, _)| min.below(s.0) && max.above(s.0))
                        .map(|(_, m)| m)
                        .collect();
                    let got: Vec<Vec<u8>> =
                        z.range_by_score(min, max).map(|(m, _)| m.to_vec()).collect();
                    prop_assert_eq!(got.iter().collect::<Vec<_>>(), want);
                    let rev = z.range_by_score(min, max).rev().count();
                    prop_assert_eq!(rev, got.len());
                }
                let mut unordered: Vec<Vec<u8>> = z.members().map(|(m, _)| m.to_vec()).collect();
                unordered.sort();
                prop_assert_eq!(unordered, model.keys().cloned().collect::<Vec<_>>());
            }
        }
    }
}
