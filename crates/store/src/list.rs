//! The list value: a sequence of byte strings kept packed, as Redis 7.2 keeps lists.
//!
//! A list is one contiguous buffer of length-prefixed entries (a *pack*, like Redis' listpack)
//! while it is small, and a deque of packs (like Redis' quicklist) once it outgrows one pack.
//! How much a pack holds is the `list-max-listpack-size` setting ([`ListLimit`]: a number of
//! elements, or 4 to 64 KiB measured in the bytes a Redis listpack would take for the same
//! elements), passed in by the caller with every write as the live setting: a list converts to a
//! quicklist when a write would take its pack past the limit, and back when it shrinks to one
//! pack within half of it (Redis' `listTypeTryConvertListpack` / `listTypeTryConvertQuicklist`).
//! A quicklist keeps the limit it was made with for its packs (as Redis' `quicklist.fill`). So
//! [`ListValue::encoding`] names what `OBJECT ENCODING` says in Redis 7.2 for the same list and a
//! quicklist has the same nodes.
//!
//! Pack entry layout: `varint(len) | bytes | reversed varint(len)` (LEB128; the reversed copy lets
//! a pack be read from its end), so an entry of up to 127 bytes costs 2 bytes more than its data,
//! as in a listpack. Pushes and pops at both ends are O(1) in the number of packs (an edge pack is
//! shifted, at most 8 KiB); an index walks the packs, O(n) as in Redis.
//!
//! Snapshot cost: a clone of a small list copies its one buffer (at most ~8 KiB, one allocation);
//! a clone of a large list is O(1) (packs are `Arc`-shared in a persistent vector) and the first
//! write to a shared pack afterwards copies that pack only.
//!
//! This module depends on nothing but `bytes`, `imbl`, `crate::varint` and `crate::table`'s
//! allocation classes; it knows nothing of keys or commands.

use crate::table::reserve_in_class;
use bytes::Bytes;
use std::sync::Arc;

/// Redis' `SIZE_SAFETY_LIMIT`: the most listpack bytes a pack limited by a number of elements
/// takes all the same.
const SIZE_SAFETY_LIMIT: usize = 8192;
/// The byte limits of `list-max-listpack-size` -1 to -5 (Redis' `optimization_level`).
const FILL_BYTES: [usize; 5] = [4096, 8192, 16384, 32768, 65536];

/// How much one pack holds: the `list-max-listpack-size` setting (Redis' `quicklistNodeLimit`),
/// either a number of elements or a number of listpack bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListLimit {
    /// Most listpack bytes (`usize::MAX` when the limit is a count).
    bytes: usize,
    /// Most elements (`usize::MAX` when the limit is in bytes).
    entries: usize,
}

impl ListLimit {
    /// Redis' default, `list-max-listpack-size -2`: 8 KiB.
    pub const REDIS_DEFAULT: ListLimit = ListLimit::from_fill(-2);

    /// The limit `list-max-listpack-size fill` sets: a positive number is elements (0 counts as
    /// 1), -1 to -5 are 4, 8, 16, 32 or 64 KiB (below -5 as -5).
    pub const fn from_fill(fill: i64) -> ListLimit {
        if fill >= 0 {
            ListLimit {
                bytes: usize::MAX,
                entries: if fill == 0 { 1 } else { fill as usize },
            }
        } else {
            let level = fill.unsigned_abs() - 1;
            let level = if level > 4 { 4 } else { level as usize };
            ListLimit {
                bytes: FILL_BYTES[level],
                entries: usize::MAX,
            }
        }
    }

    /// Whether a pack of `bytes` listpack bytes and `entries` elements is past the limit (Redis'
    /// `quicklistNodeExceedsLimit`: a count limit still stops at [`SIZE_SAFETY_LIMIT`] bytes).
    fn exceeded_by(self, bytes: usize, entries: usize) -> bool {
        if self.bytes != usize::MAX {
            bytes > self.bytes
        } else {
            bytes > SIZE_SAFETY_LIMIT || entries > self.entries
        }
    }

    /// Whether one pack of `bytes` and `entries` is within half the limit: when a shrinking
    /// quicklist goes back to a listpack (no safety limit here, as in Redis).
    fn within_half(self, bytes: usize, entries: usize) -> bool {
        bytes <= self.bytes / 2 && entries <= self.entries / 2
    }
}

impl Default for ListLimit {
    fn default() -> Self {
        Self::REDIS_DEFAULT
    }
}
/// Redis' `SIZE_ESTIMATE_OVERHEAD`: what it adds to an element's length when it decides whether
/// the element still fits in a quicklist node.
const SIZE_ESTIMATE_OVERHEAD: usize = 8;
/// A listpack's header (total bytes u32, count u16) and terminator.
const LP_EMPTY: usize = 7;
/// Memory accounted per pack of a large list beyond its buffer: the `Arc` header, the pack's own
/// fields and its slot in the vector of packs.
const PACK_OVERHEAD: usize = 16 + std::mem::size_of::<Pack>() + 8;

/// Which end of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The head (LPUSH, LPOP, index 0).
    Left,
    /// The tail (RPUSH, RPOP, index -1).
    Right,
}

/// A list. See the module docs for the layout.
#[derive(Debug, Clone)]
pub struct ListValue {
    repr: Repr,
}

#[derive(Debug, Clone)]
enum Repr {
    Small(Pack),
    Large(Box<Quick>),
}

/// Packs shared between clones; `len` elements; `bytes`: the memory accounted for all of it;
/// `limit`: what each pack holds, the live setting when the list became a quicklist.
#[derive(Debug, Clone)]
struct Quick {
    packs: imbl::Vector<Arc<Pack>>,
    len: usize,
    bytes: usize,
    limit: ListLimit,
}

impl Default for ListValue {
    fn default() -> Self {
        Self::new()
    }
}

impl PartialEq for ListValue {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

/// Converts a Redis-style index (negative: from the tail) to a position, if it is in range.
fn position(index: i64, len: usize) -> Option<usize> {
    let len_i = i64::try_from(len).ok()?;
    let at = if index < 0 { len_i + index } else { index };
    (0..len_i).contains(&at).then_some(at as usize)
}

impl ListValue {
    /// An empty list (never stored: an empty list is deleted).
    pub fn new() -> Self {
        ListValue {
            repr: Repr::Small(Pack::default()),
        }
    }

    /// A list of `items`, head first, its packs within `limit`.
    pub fn from_items<T: AsRef<[u8]>>(
        items: impl IntoIterator<Item = T>,
        limit: ListLimit,
    ) -> Self {
        let mut list = Self::new();
        for item in items {
            list.push(End::Right, &[item], limit);
        }
        list
    }

    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Small(p) => p.count as usize,
            Repr::Large(q) => q.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes held by the list: buffer capacities plus the per-pack bookkeeping. O(1).
    pub fn mem_size(&self) -> usize {
        match &self.repr {
            Repr::Small(p) => p.buf.capacity(),
            Repr::Large(q) => q.bytes,
        }
    }

    /// What Redis 7.2's `OBJECT ENCODING` says of the same list: "listpack" or "quicklist".
    pub fn encoding(&self) -> &'static str {
        match &self.repr {
            Repr::Small(_) => "listpack",
            Repr::Large(_) => "quicklist",
        }
    }

    /// How many packs hold the list (1 while it is small).
    pub fn pack_count(&self) -> usize {
        match &self.repr {
            Repr::Small(_) => 1,
            Repr::Large(q) => q.packs.len(),
        }
    }

    /// Push `items` one after the other at `end` (LPUSH a b c leaves c at the head). Returns the
    /// new length. (Every write takes the live `list-max-listpack-size`, `limit`: see the module
    /// docs.)
    pub fn push<T: AsRef<[u8]>>(&mut self, end: End, items: &[T], limit: ListLimit) -> usize {
        let added: usize = items.iter().map(|i| i.as_ref().len()).sum();
        self.grow_check(added, items.len(), limit);
        for item in items {
            let item = item.as_ref();
            match &mut self.repr {
                Repr::Small(p) => p.push(end, item),
                Repr::Large(q) => q.push(end, item),
            }
        }
        self.len()
    }

    /// Remove and return the element at `end`.
    pub fn pop(&mut self, end: End, limit: ListLimit) -> Option<Bytes> {
        let popped = match &mut self.repr {
            Repr::Small(p) => p.pop(end),
            Repr::Large(q) => q.pop(end),
        };
        self.shrink_check(limit);
        popped
    }

    /// Remove and return up to `count` elements from `end`, in the order they were popped.
    pub fn pop_many(&mut self, end: End, count: usize, limit: ListLimit) -> Vec<Bytes> {
        let count = count.min(self.len());
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            match &mut self.repr {
                Repr::Small(p) => out.extend(p.pop(end)),
                Repr::Large(q) => out.extend(q.pop(end)),
            }
        }
        self.shrink_check(limit);
        out
    }

    /// The element at `index` (negative: from the tail).
    pub fn get(&self, index: i64) -> Option<&[u8]> {
        let at = position(index, self.len())?;
        match &self.repr {
            Repr::Small(p) => p.get(at),
            Repr::Large(q) => {
                let (pack, offset) = q.locate(at);
                q.packs[pack].get(offset)
            }
        }
    }

    /// Replace the element at `index` (negative: from the tail); false when out of range.
    pub fn set(&mut self, index: i64, item: &[u8], limit: ListLimit) -> bool {
        let Some(at) = position(index, self.len()) else {
            return false;
        };
        self.grow_check(item.len(), 1, limit);
        match &mut self.repr {
            Repr::Small(p) => p.replace(at, item),
            Repr::Large(q) => {
                let (pack, offset) = q.locate(at);
                q.change(pack, |p| p.replace(offset, item));
                q.split_if_over(pack);
            }
        }
        self.shrink_check(limit);
        true
    }

    /// Insert `item` before (or, with `after`, after) the first element equal to `pivot`.
    /// Returns the new length, or None when `pivot` is not in the list.
    pub fn insert(
        &mut self,
        pivot: &[u8],
        item: &[u8],
        after: bool,
        limit: ListLimit,
    ) -> Option<usize> {
        let found = self.iter().position(|e| e == pivot)?;
        let at = found + usize::from(after);
        self.grow_check(item.len(), 1, limit);
        match &mut self.repr {
            Repr::Small(p) => p.insert(at, item),
            Repr::Large(q) => q.insert(at, item),
        }
        Some(self.len())
    }

    /// Remove elements equal to `item`: the first `count` from the head (count > 0), the last
    /// `-count` from the tail (count < 0), or all (count 0). Returns how many were removed.
    pub fn remove(&mut self, item: &[u8], count: i64, limit: ListLimit) -> usize {
        let most = if count == 0 {
            usize::MAX
        } else {
            usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX)
        };
        let from_tail = count < 0;
        let removed = match &mut self.repr {
            Repr::Small(p) => p.remove_matching(item, most, from_tail),
            Repr::Large(q) => q.remove_matching(item, most, from_tail),
        };
        if removed > 0 {
            self.shrink_check(limit);
        }
        removed
    }

    /// Keep only the elements from `start` to `stop` (inclusive, negative from the tail) as
    /// LTRIM does; an empty range empties the list.
    pub fn trim(&mut self, start: i64, stop: i64, limit: ListLimit) {
        let len = self.len();
        let (left, right) = match range_bounds(start, stop, len) {
            None => (len, 0),
            Some((from, to)) => (from, len - to - 1),
        };
        match &mut self.repr {
            Repr::Small(p) => {
                p.remove_range(0, left);
                let count = p.count as usize;
                p.remove_range(count - right, right);
            }
            Repr::Large(q) => q.trim(left, right),
        }
        self.shrink_check(limit);
    }

    /// The elements from `start` to `stop` (inclusive, negative from the tail), as LRANGE
    /// selects them.
    pub fn range(&self, start: i64, stop: i64) -> Vec<&[u8]> {
        let Some((from, to)) = range_bounds(start, stop, self.len()) else {
            return Vec::new();
        };
        let n = to - from + 1;
        if from <= self.len() - 1 - to {
            self.iter().skip(from).take(n).collect()
        } else {
            let mut out: Vec<&[u8]> = self
                .iter()
                .rev()
                .skip(self.len() - 1 - to)
                .take(n)
                .collect();
            out.reverse();
            out
        }
    }

    /// Every element, head first (reversible).
    pub fn iter(&self) -> ListIter<'_> {
        let (small, packs) = match &self.repr {
            Repr::Small(p) => (Some(p.iter()), None),
            Repr::Large(q) => (None, Some(q.packs.iter())),
        };
        ListIter {
            small,
            packs,
            front: None,
            back: None,
            remaining: self.len(),
        }
    }

    /// Pack → quicklist when `added` more bytes in `added_items` elements would take the pack
    /// over the limit (Redis' `listTypeTryConvertListpack`: the pack's listpack bytes plus the
    /// raw lengths added, its length plus the elements added).
    fn grow_check(&mut self, added: usize, added_items: usize, limit: ListLimit) {
        if let Repr::Small(p) = &mut self.repr {
            if limit.exceeded_by(p.lp as usize + added, p.count as usize + added_items) {
                let pack = std::mem::take(p);
                let mut quick = Quick {
                    packs: imbl::Vector::new(),
                    len: 0,
                    bytes: std::mem::size_of::<Quick>(),
                    limit,
                };
                if pack.count > 0 {
                    quick.len = pack.count as usize;
                    quick.bytes += pack.buf.capacity() + PACK_OVERHEAD;
                    quick.packs.push_back(Arc::new(pack));
                }
                self.repr = Repr::Large(Box::new(quick));
            }
        }
    }

    /// Quicklist → pack when one pack within half the (live) limit is left (Redis'
    /// `listTypeTryConvertQuicklist` when shrinking); an empty quicklist becomes an empty pack.
    fn shrink_check(&mut self, limit: ListLimit) {
        match &mut self.repr {
            Repr::Large(q) if q.packs.len() <= 1 => {
                if q.packs
                    .front()
                    .is_some_and(|p| !limit.within_half(p.lp as usize, p.count as usize))
                {
                    return;
                }
                let pack = q
                    .packs
                    .pop_front()
                    .map(|p| Arc::try_unwrap(p).unwrap_or_else(|shared| (*shared).clone()))
                    .unwrap_or_default();
                self.repr = Repr::Small(pack);
            }
            Repr::Small(p) => p.fit(),
            Repr::Large(_) => {}
        }
    }
}

/// LRANGE/LTRIM's range: the first and last positions selected, or None when empty.
fn range_bounds(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = i64::try_from(len).ok()?;
    let mut start = if start < 0 { len + start } else { start };
    let mut stop = if stop < 0 { len + stop } else { stop };
    if start < 0 {
        start = 0;
    }
    if start > stop || start >= len {
        return None;
    }
    if stop >= len {
        stop = len - 1;
    }
    Some((start as usize, stop as usize))
}

/// Iterator over a list's elements (see [`ListValue::iter`]).
pub struct ListIter<'a> {
    small: Option<PackIter<'a>>,
    packs: Option<imbl::vector::Iter<'a, Arc<Pack>, imbl::shared_ptr::DefaultSharedPtr>>,
    front: Option<PackIter<'a>>,
    back: Option<PackIter<'a>>,
    remaining: usize,
}

impl<'a> Iterator for ListIter<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.remaining == 0 {
            return None;
        }
        if let Some(small) = &mut self.small {
            self.remaining -= 1;
            return small.next();
        }
        loop {
            if let Some(item) = self.front.as_mut().and_then(Iterator::next) {
                self.remaining -= 1;
                return Some(item);
            }
            match self.packs.as_mut().and_then(Iterator::next) {
                Some(pack) => self.front = Some(pack.iter()),
                None => {
                    self.remaining -= 1;
                    return self.back.as_mut().and_then(Iterator::next);
                }
            }
        }
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl DoubleEndedIterator for ListIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        if let Some(small) = &mut self.small {
            self.remaining -= 1;
            return small.next_back();
        }
        loop {
            if let Some(item) = self.back.as_mut().and_then(DoubleEndedIterator::next_back) {
                self.remaining -= 1;
                return Some(item);
            }
            match self.packs.as_mut().and_then(DoubleEndedIterator::next_back) {
                Some(pack) => self.back = Some(pack.iter()),
                None => {
                    self.remaining -= 1;
                    return self.front.as_mut().and_then(DoubleEndedIterator::next_back);
                }
            }
        }
    }
}

impl ExactSizeIterator for ListIter<'_> {}

// ---------------------------------------------------------------------------------------------
// Packs

/// Entries `varint(len) | bytes | reversed varint(len)` in one buffer; `lp` is what a Redis
/// listpack of the same elements takes (header and terminator included).
#[derive(Debug, Clone)]
struct Pack {
    buf: Vec<u8>,
    count: u32,
    lp: u32,
}

impl Default for Pack {
    fn default() -> Self {
        Pack {
            buf: Vec::new(),
            count: 0,
            lp: LP_EMPTY as u32,
        }
    }
}

/// Bytes an entry of `len` data bytes takes in a pack.
fn entry_len(len: usize) -> usize {
    2 * crate::varint::len(len) + len
}

fn write_entry(out: &mut Vec<u8>, item: &[u8]) {
    let (head, k) = crate::varint::encode(item.len());
    out.extend_from_slice(&head[..k]);
    out.extend_from_slice(item);
    out.extend(head[..k].iter().rev());
}

/// Replaces the bytes `at` of `buf` by `item`'s entry, moving what follows with one `memmove`
/// (no temporary entry, no byte-by-byte fill: LPUSH of 1 KiB elements spent a sixth of its time
/// in `Vec::splice` doing that). Grows the buffer by exactly what it needs, as a listpack does.
fn put_entry(buf: &mut Vec<u8>, at: std::ops::Range<usize>, item: &[u8]) {
    let (head, k) = crate::varint::encode(item.len());
    let n = 2 * k + item.len();
    let old = buf.len();
    if n > at.len() {
        reserve_in_class(buf, n - at.len());
        buf.resize(old + n - at.len(), 0);
    }
    buf.copy_within(at.end..old, at.start + n);
    if n < at.len() {
        buf.truncate(old - (at.len() - n));
    }
    let entry = &mut buf[at.start..at.start + n];
    entry[..k].copy_from_slice(&head[..k]);
    entry[k..k + item.len()].copy_from_slice(item);
    for (dst, src) in entry[k + item.len()..]
        .iter_mut()
        .zip(head[..k].iter().rev())
    {
        *dst = *src;
    }
}

/// The entry starting at `pos`: (data start, data end, next entry's start).
fn read_forward(buf: &[u8], pos: usize) -> (usize, usize, usize) {
    let (mut len, mut shift, mut k) = (0usize, 0u32, 0usize);
    loop {
        let byte = buf[pos + k];
        len |= usize::from(byte & 0x7f) << shift;
        k += 1;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    let start = pos + k;
    (start, start + len, start + len + k)
}

/// The entry ending at `end`: (entry start, data start, data end).
fn read_backward(buf: &[u8], end: usize) -> (usize, usize, usize) {
    let (mut len, mut shift, mut k) = (0usize, 0u32, 0usize);
    loop {
        let byte = buf[end - 1 - k];
        len |= usize::from(byte & 0x7f) << shift;
        k += 1;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    let data_end = end - k;
    let data_start = data_end - len;
    (data_start - k, data_start, data_end)
}

/// The bytes one element takes in a Redis listpack: encoding, data and back-length.
fn lp_entry_size(s: &[u8]) -> usize {
    gradus_proto::rdb::listpack_entry_size(s)
}

fn add_lp(lp: u32, item: &[u8]) -> u32 {
    lp.saturating_add(u32::try_from(lp_entry_size(item)).unwrap_or(u32::MAX))
}

fn sub_lp(lp: u32, item: &[u8]) -> u32 {
    lp.saturating_sub(u32::try_from(lp_entry_size(item)).unwrap_or(u32::MAX))
        .max(LP_EMPTY as u32)
}

impl Pack {
    fn with_item(item: &[u8]) -> Pack {
        let mut p = Pack::default();
        p.push(End::Right, item);
        p
    }

    fn iter(&self) -> PackIter<'_> {
        PackIter {
            buf: &self.buf,
            front: 0,
            back: self.buf.len(),
        }
    }

    fn push(&mut self, end: End, item: &[u8]) {
        match end {
            End::Right => {
                reserve_in_class(&mut self.buf, entry_len(item.len()));
                write_entry(&mut self.buf, item);
            }
            End::Left => put_entry(&mut self.buf, 0..0, item),
        }
        self.count += 1;
        self.lp = add_lp(self.lp, item);
    }

    fn pop(&mut self, end: End) -> Option<Bytes> {
        if self.count == 0 {
            return None;
        }
        let item = match end {
            End::Right => {
                let (start, data_start, data_end) = read_backward(&self.buf, self.buf.len());
                let item = Bytes::copy_from_slice(&self.buf[data_start..data_end]);
                self.buf.truncate(start);
                item
            }
            End::Left => {
                let (data_start, data_end, next) = read_forward(&self.buf, 0);
                let item = Bytes::copy_from_slice(&self.buf[data_start..data_end]);
                self.buf.drain(..next);
                item
            }
        };
        self.count -= 1;
        self.lp = sub_lp(self.lp, &item);
        Some(item)
    }

    /// Give back spare capacity once it is large (after removals).
    fn fit(&mut self) {
        if self.buf.capacity() > self.buf.len() + self.buf.len() / 4 + 64 {
            crate::value::shrink_exact(&mut self.buf);
        }
    }

    /// Byte offset of entry `at` (== buf.len() for at == count), walking from the nearer end.
    fn offset(&self, at: usize) -> usize {
        let count = self.count as usize;
        if at <= count / 2 {
            let mut pos = 0;
            for _ in 0..at {
                pos = read_forward(&self.buf, pos).2;
            }
            pos
        } else {
            let mut pos = self.buf.len();
            for _ in at..count {
                pos = read_backward(&self.buf, pos).0;
            }
            pos
        }
    }

    fn get(&self, at: usize) -> Option<&[u8]> {
        if at >= self.count as usize {
            return None;
        }
        let (start, end, _) = read_forward(&self.buf, self.offset(at));
        Some(&self.buf[start..end])
    }

    fn replace(&mut self, at: usize, item: &[u8]) {
        let pos = self.offset(at);
        let (start, end, next) = read_forward(&self.buf, pos);
        self.lp = add_lp(sub_lp(self.lp, &self.buf[start..end]), item);
        put_entry(&mut self.buf, pos..next, item);
        self.fit();
    }

    fn insert(&mut self, at: usize, item: &[u8]) {
        let pos = self.offset(at);
        put_entry(&mut self.buf, pos..pos, item);
        self.count += 1;
        self.lp = add_lp(self.lp, item);
    }

    /// Remove `n` entries from entry `at` on.
    fn remove_range(&mut self, at: usize, n: usize) {
        if n == 0 {
            return;
        }
        let from = self.offset(at);
        let mut to = from;
        for _ in 0..n {
            let (start, end, next) = read_forward(&self.buf, to);
            self.lp = sub_lp(self.lp, &self.buf[start..end]);
            to = next;
        }
        self.buf.drain(from..to);
        self.count -= n as u32;
    }

    /// Remove up to `limit` entries equal to `item`, scanning from the head or the tail.
    fn remove_matching(&mut self, item: &[u8], limit: usize, from_tail: bool) -> usize {
        let mut doomed: Vec<(usize, usize)> = Vec::new();
        if from_tail {
            let mut end = self.buf.len();
            while end > 0 && doomed.len() < limit {
                let (start, ds, de) = read_backward(&self.buf, end);
                if &self.buf[ds..de] == item {
                    doomed.push((start, end));
                }
                end = start;
            }
            doomed.reverse();
        } else {
            let mut pos = 0;
            while pos < self.buf.len() && doomed.len() < limit {
                let (ds, de, next) = read_forward(&self.buf, pos);
                if &self.buf[ds..de] == item {
                    doomed.push((pos, next));
                }
                pos = next;
            }
        }
        if doomed.is_empty() {
            return 0;
        }
        let mut kept = Vec::with_capacity(self.buf.len());
        let mut pos = 0;
        for &(start, end) in &doomed {
            kept.extend_from_slice(&self.buf[pos..start]);
            pos = end;
        }
        kept.extend_from_slice(&self.buf[pos..]);
        self.buf = kept;
        self.count -= doomed.len() as u32;
        for _ in 0..doomed.len() {
            self.lp = sub_lp(self.lp, item);
        }
        doomed.len()
    }

    /// Split off the entries from `at` on into a new pack.
    fn split_off(&mut self, at: usize) -> Pack {
        let pos = self.offset(at);
        let mut rest = Pack {
            buf: self.buf[pos..].to_vec(),
            count: self.count - at as u32,
            lp: LP_EMPTY as u32,
        };
        self.buf.truncate(pos);
        crate::value::shrink_exact(&mut self.buf);
        self.count = at as u32;
        self.lp = LP_EMPTY as u32;
        let sizes: usize = self.iter().map(lp_entry_size).sum();
        self.lp = self.lp.saturating_add(sizes as u32);
        let sizes: usize = rest.iter().map(lp_entry_size).sum();
        rest.lp = rest.lp.saturating_add(sizes as u32);
        rest
    }

    /// Append the entries of `other`.
    fn append(&mut self, other: &Pack) {
        self.buf.reserve_exact(other.buf.len());
        self.buf.extend_from_slice(&other.buf);
        self.count += other.count;
        self.lp = self.lp.saturating_add(other.lp - LP_EMPTY as u32);
    }
}

/// Iterator over one pack's entries, from both ends.
struct PackIter<'a> {
    buf: &'a [u8],
    front: usize,
    back: usize,
}

impl<'a> Iterator for PackIter<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.front >= self.back {
            return None;
        }
        let (start, end, next) = read_forward(self.buf, self.front);
        self.front = next;
        Some(&self.buf[start..end])
    }
}

impl DoubleEndedIterator for PackIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.front >= self.back {
            return None;
        }
        let (start, ds, de) = read_backward(self.buf, self.back);
        self.back = start;
        Some(&self.buf[ds..de])
    }
}

// ---------------------------------------------------------------------------------------------
// Quicklists

impl Quick {
    /// Change pack `i` (copied first if a clone shares it), keeping the accounting.
    fn change<R>(&mut self, i: usize, f: impl FnOnce(&mut Pack) -> R) -> R {
        let pack = Arc::make_mut(&mut self.packs[i]);
        let (cap, count) = (pack.buf.capacity(), pack.count);
        let result = f(pack);
        self.bytes = self.bytes + pack.buf.capacity() - cap;
        self.len = self.len + pack.count as usize - count as usize;
        result
    }

    fn add_pack(&mut self, at: usize, pack: Pack) {
        self.bytes += pack.buf.capacity() + PACK_OVERHEAD;
        self.len += pack.count as usize;
        self.packs.insert(at, Arc::new(pack));
    }

    fn drop_pack(&mut self, at: usize) {
        let pack = self.packs.remove(at);
        self.bytes -= pack.buf.capacity() + PACK_OVERHEAD;
        self.len -= pack.count as usize;
    }

    /// Whether `item` may join `pack` (Redis' `_quicklistNodeAllowInsert`).
    fn fits(&self, pack: &Pack, item: &[u8]) -> bool {
        !self.limit.exceeded_by(
            pack.lp as usize + item.len() + SIZE_ESTIMATE_OVERHEAD,
            pack.count as usize + 1,
        )
    }

    fn push(&mut self, end: End, item: &[u8]) {
        let edge = match end {
            End::Left => 0,
            End::Right => self.packs.len().wrapping_sub(1),
        };
        if self.packs.get(edge).is_some_and(|p| self.fits(p, item)) {
            self.change(edge, |p| p.push(end, item));
        } else {
            let at = if end == End::Left {
                0
            } else {
                self.packs.len()
            };
            self.add_pack(at, Pack::with_item(item));
        }
    }

    fn pop(&mut self, end: End) -> Option<Bytes> {
        let edge = match end {
            End::Left => 0,
            End::Right => self.packs.len().checked_sub(1)?,
        };
        let item = self.change(edge, |p| {
            let item = p.pop(end);
            p.fit();
            item
        });
        if self.packs[edge].count == 0 {
            self.drop_pack(edge);
        }
        item
    }

    /// The pack holding position `at`, and the position within it.
    fn locate(&self, at: usize) -> (usize, usize) {
        if at < self.len / 2 {
            let mut skipped = 0;
            for (i, pack) in self.packs.iter().enumerate() {
                let count = pack.count as usize;
                if at < skipped + count {
                    return (i, at - skipped);
                }
                skipped += count;
            }
        } else {
            let mut end = self.len;
            for (i, pack) in self.packs.iter().enumerate().rev() {
                let start = end - pack.count as usize;
                if at >= start {
                    return (i, at - start);
                }
                end = start;
            }
        }
        unreachable!("locate: position {at} within the list's length")
    }

    /// Splits pack `i` in two halves if it has grown over the limit.
    fn split_if_over(&mut self, i: usize) {
        let pack = &self.packs[i];
        if !self
            .limit
            .exceeded_by(pack.lp as usize, pack.count as usize)
            || pack.count < 2
        {
            return;
        }
        let half = pack.count as usize / 2;
        // `change` counts the moved elements out; `add_pack` counts them in again.
        let rest = self.change(i, |p| p.split_off(half));
        self.add_pack(i + 1, rest);
    }

    fn insert(&mut self, at: usize, item: &[u8]) {
        // At a pack boundary the item may go at the end of the previous pack or the start of
        // the next: whichever has room, else a pack of its own.
        if at == self.len {
            return self.push(End::Right, item);
        }
        let (i, offset) = self.locate(at);
        if offset == 0 && i > 0 && self.fits(&self.packs[i - 1], item) {
            let n = self.packs[i - 1].count as usize;
            return self.change(i - 1, |p| p.insert(n, item));
        }
        self.change(i, |p| p.insert(offset, item));
        self.split_if_over(i);
    }

    fn remove_matching(&mut self, item: &[u8], limit: usize, from_tail: bool) -> usize {
        let mut removed = 0;
        let order: Vec<usize> = if from_tail {
            (0..self.packs.len()).rev().collect()
        } else {
            (0..self.packs.len()).collect()
        };
        let mut touched = Vec::new();
        for i in order {
            if removed >= limit {
                break;
            }
            // Only packs that hold the item are written (and so copied when shared).
            if !self.packs[i].iter().any(|e| e == item) {
                continue;
            }
            removed += self.change(i, |p| {
                let n = p.remove_matching(item, limit - removed, from_tail);
                p.fit();
                n
            });
            touched.push(i);
        }
        touched.sort_unstable();
        for &i in touched.iter().rev() {
            if self.packs[i].count == 0 {
                self.drop_pack(i);
            }
        }
        self.merge_small();
        removed
    }

    /// Joins neighbouring packs that together fit in one (after removals in the middle).
    fn merge_small(&mut self) {
        let mut i = 0;
        while i + 1 < self.packs.len() {
            let (a, b) = (&self.packs[i], &self.packs[i + 1]);
            let (lp, count) = (
                a.lp as usize + b.lp as usize - LP_EMPTY,
                a.count as usize + b.count as usize,
            );
            if self.limit.within_half(lp, count) && !self.limit.exceeded_by(lp, count) {
                let next = self.packs[i + 1].clone();
                self.drop_pack(i + 1);
                self.change(i, |p| p.append(&next));
            } else {
                i += 1;
            }
        }
    }

    /// Remove `left` elements from the head and `right` from the tail.
    fn trim(&mut self, mut left: usize, mut right: usize) {
        while left > 0 {
            let count = self.packs[0].count as usize;
            if count <= left {
                self.drop_pack(0);
                left -= count;
            } else {
                self.change(0, |p| {
                    p.remove_range(0, left);
                    p.fit();
                });
                left = 0;
            }
        }
        while right > 0 {
            let last = self.packs.len() - 1;
            let count = self.packs[last].count as usize;
            if count <= right {
                self.drop_pack(last);
                right -= count;
            } else {
                self.change(last, |p| {
                    p.remove_range(count - right, right);
                    p.fit();
                });
                right = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::collections::VecDeque;
    const L: ListLimit = ListLimit::REDIS_DEFAULT;

    #[test]
    fn put_entry_replaces_an_entry_by_one_of_any_length() {
        let sizes = [0usize, 1, 127, 128, 300, 20_000];
        for &before in &sizes {
            for &after in &sizes {
                let (a, b, c) = (vec![b'a'; 5], vec![b'b'; before], vec![b'c'; 130]);
                let mut buf = Vec::new();
                for item in [&a, &b, &c] {
                    write_entry(&mut buf, item);
                }
                let start = entry_len(a.len());
                let new = vec![b'n'; after];
                put_entry(&mut buf, start..start + entry_len(before), &new);
                let mut expected = Vec::new();
                for item in [&a, &new, &c] {
                    write_entry(&mut expected, item);
                }
                assert_eq!(buf, expected, "{before} -> {after}");
                // An insertion at the front, as LPUSH makes.
                put_entry(&mut buf, 0..0, &b);
                let mut front = Vec::new();
                write_entry(&mut front, &b);
                front.extend_from_slice(&expected);
                assert_eq!(buf, front, "push of {before} bytes before {after}");
            }
        }
    }

    fn items(list: &ListValue) -> Vec<Vec<u8>> {
        list.iter().map(<[u8]>::to_vec).collect()
    }

    fn check(list: &ListValue, model: &VecDeque<Vec<u8>>) {
        assert_eq!(list.len(), model.len());
        let forward: Vec<Vec<u8>> = items(list);
        assert_eq!(forward, model.iter().cloned().collect::<Vec<_>>());
        let mut backward: Vec<Vec<u8>> = list.iter().rev().map(<[u8]>::to_vec).collect();
        backward.reverse();
        assert_eq!(backward, forward);
        if let Repr::Large(q) = &list.repr {
            let count: usize = q.packs.iter().map(|p| p.count as usize).sum();
            assert_eq!(count, q.len);
            let bytes: usize = q
                .packs
                .iter()
                .map(|p| p.buf.capacity() + PACK_OVERHEAD)
                .sum::<usize>()
                + std::mem::size_of::<Quick>();
            assert_eq!(bytes, q.bytes, "running byte count");
            for p in q.packs.iter() {
                assert!(p.count > 0, "no empty pack is kept");
                let lp: usize = LP_EMPTY + p.iter().map(lp_entry_size).sum::<usize>();
                assert_eq!(lp, p.lp as usize);
            }
        }
        if let Repr::Small(p) = &list.repr {
            let lp: usize = LP_EMPTY + p.iter().map(lp_entry_size).sum::<usize>();
            assert_eq!(lp, p.lp as usize);
        }
    }

    #[test]
    fn entries_of_every_length_class_read_both_ways() {
        let lens = [0usize, 1, 127, 128, 300, 16383, 16384, 70_000];
        let list = ListValue::from_items(lens.iter().map(|&n| vec![b'x'; n]), L);
        let got: Vec<usize> = list.iter().map(<[u8]>::len).collect();
        assert_eq!(got, lens);
        let back: Vec<usize> = list.iter().rev().map(<[u8]>::len).collect();
        assert_eq!(back, lens.iter().rev().copied().collect::<Vec<_>>());
        assert_eq!(list.get(-1).map(<[u8]>::len), Some(70_000));
        assert_eq!(list.get(3).map(<[u8]>::len), Some(128));
    }

    #[test]
    fn listpack_sizes_follow_redis() {
        // The sizes lpEncodeBacklen/lpEncodeString give: integers small, strings with a header.
        assert_eq!(lp_entry_size(b"7"), 2);
        assert_eq!(lp_entry_size(b"-1"), 3);
        assert_eq!(lp_entry_size(b"1000"), 3);
        assert_eq!(lp_entry_size(b"30000"), 4);
        assert_eq!(lp_entry_size(b"1000000"), 5);
        assert_eq!(lp_entry_size(b"100000000"), 6);
        assert_eq!(lp_entry_size(b"10000000000"), 10);
        assert_eq!(lp_entry_size(b"007"), 5);
        assert_eq!(lp_entry_size(b"-0"), 4);
        assert_eq!(lp_entry_size(b"item1"), 7);
        assert_eq!(lp_entry_size(&[b'a'; 100]), 103);
        assert_eq!(lp_entry_size(&[b'a'; 5000]), 5007);
    }

    #[test]
    fn a_list_converts_at_redis_thresholds() {
        let mut list = ListValue::new();
        // 7 bytes of header + 79 × (2 + 100 + 1) = 8144: the next 100-byte push passes 8 KiB.
        for _ in 0..79 {
            list.push(End::Right, &[[b'a'; 100]], L);
        }
        assert_eq!(list.encoding(), "listpack");
        list.push(End::Right, &[[b'a'; 100]], L);
        assert_eq!(list.encoding(), "quicklist");
        assert_eq!(list.pack_count(), 2);
        // Back to a pack once one pack of at most 4 KiB is left.
        list.trim(0, 39, L);
        assert_eq!(list.encoding(), "quicklist");
        list.trim(0, 38, L);
        assert_eq!(list.encoding(), "listpack");
        assert_eq!(list.len(), 39);
        // A single element over the limit makes a quicklist of its own pack.
        let mut big = ListValue::new();
        big.push(End::Left, &[vec![b'b'; 9000]], L);
        assert_eq!((big.encoding(), big.pack_count()), ("quicklist", 1));
        big.push(End::Left, &[b"x"], L);
        assert_eq!(big.pack_count(), 2);
    }

    #[test]
    fn a_list_converts_at_the_configured_list_max_listpack_size() {
        // A count: 4 elements fit one pack, a fifth makes a quicklist of 4 + 1 ...
        let four = ListLimit::from_fill(4);
        let mut list = ListValue::from_items(["a", "b", "c", "d"], four);
        assert_eq!(list.encoding(), "listpack");
        list.push(End::Right, &[b"e"], four);
        assert_eq!((list.encoding(), list.pack_count()), ("quicklist", 2));
        for i in 0..20 {
            list.push(End::Left, &[format!("{i}")], four);
        }
        assert_eq!(list.pack_count(), 7, "25 elements in packs of 4");
        // ... and a list converts back only at half the limit, in one pack.
        list.trim(0, 2, four);
        assert_eq!((list.encoding(), list.len()), ("quicklist", 3));
        list.pop(End::Left, four);
        assert_eq!((list.encoding(), list.len()), ("listpack", 2));
        // A push of several counts them all; the live limit decides (-1: 4 KiB).
        let mut many = ListValue::new();
        many.push(End::Right, &[b"x"; 5], four);
        assert_eq!(many.encoding(), "quicklist");
        let small = ListLimit::from_fill(-1);
        let mut kib = ListValue::new();
        for _ in 0..39 {
            kib.push(End::Right, &[[b'a'; 100]], small);
        }
        assert_eq!(kib.encoding(), "listpack");
        kib.push(End::Right, &[[b'a'; 100]], small);
        assert_eq!(kib.encoding(), "quicklist");
        // Below -5 counts as -5 (64 KiB); 0 as 1 element.
        assert_eq!(ListLimit::from_fill(-9), ListLimit::from_fill(-5));
        assert_eq!(ListLimit::from_fill(0), ListLimit::from_fill(1));
        let mut one = ListValue::from_items(["a"], ListLimit::from_fill(0));
        assert_eq!(one.encoding(), "listpack");
        one.push(End::Left, &[b"b"], ListLimit::from_fill(0));
        assert_eq!(one.encoding(), "quicklist");
        one.pop(End::Left, ListLimit::from_fill(0));
        assert_eq!(one.encoding(), "quicklist", "half of 1 is 0: never back");
    }

    #[test]
    fn random_operations_match_a_model() {
        let mut rng = StdRng::seed_from_u64(5);
        for round in 0..30 {
            // Redis' default, and list-max-listpack-size 5, -1, 1 and 16 elements.
            let limit = ListLimit::from_fill([-2, 5, -1, 1, 16][round % 5]);
            let mut list = ListValue::new();
            let mut model: VecDeque<Vec<u8>> = VecDeque::new();
            let big = round % 3 == 0;
            for _ in 0..600 {
                let item: Vec<u8> = if big && rng.gen_bool(0.3) {
                    vec![b'a' + rng.gen_range(0..3u8); rng.gen_range(50..3000)]
                } else {
                    format!("{}", rng.gen_range(0..20)).into_bytes()
                };
                let len = model.len() as i64;
                match rng.gen_range(0..10) {
                    0 | 1 => {
                        let n = rng.gen_range(1..40);
                        let batch: Vec<Vec<u8>> = (0..n).map(|_| item.clone()).collect();
                        let end = if rng.gen_bool(0.5) {
                            End::Left
                        } else {
                            End::Right
                        };
                        list.push(end, &batch, limit);
                        for b in batch {
                            match end {
                                End::Left => model.push_front(b),
                                End::Right => model.push_back(b),
                            }
                        }
                    }
                    2 => {
                        let end = if rng.gen_bool(0.5) {
                            End::Left
                        } else {
                            End::Right
                        };
                        let n = rng.gen_range(0..30);
                        let got = list.pop_many(end, n, limit);
                        let want: Vec<Vec<u8>> = (0..n.min(model.len()))
                            .map(|_| match end {
                                End::Left => model.pop_front().unwrap(),
                                End::Right => model.pop_back().unwrap(),
                            })
                            .collect();
                        assert_eq!(got, want);
                    }
                    3 => {
                        let i = rng.gen_range(-len - 2..len + 2);
                        let ok = list.set(i, &item, limit);
                        let at = if i < 0 { len + i } else { i };
                        assert_eq!(ok, (0..len).contains(&at));
                        if ok {
                            model[at as usize] = item.clone();
                        }
                    }
                    4 => {
                        let pivot = format!("{}", rng.gen_range(0..20)).into_bytes();
                        let after = rng.gen_bool(0.5);
                        let got = list.insert(&pivot, &item, after, limit);
                        match model.iter().position(|e| *e == pivot) {
                            None => assert_eq!(got, None),
                            Some(p) => {
                                model.insert(p + usize::from(after), item.clone());
                                assert_eq!(got, Some(model.len()));
                            }
                        }
                    }
                    5 => {
                        let count = rng.gen_range(-3..4);
                        let got = list.remove(&item, count, limit);
                        let mut removed = 0;
                        let limit = if count == 0 {
                            usize::MAX
                        } else {
                            count.unsigned_abs() as usize
                        };
                        if count < 0 {
                            let mut i = model.len();
                            while i > 0 && removed < limit {
                                i -= 1;
                                if model[i] == item {
                                    model.remove(i);
                                    removed += 1;
                                }
                            }
                        } else {
                            let mut i = 0;
                            while i < model.len() && removed < limit {
                                if model[i] == item {
                                    model.remove(i);
                                    removed += 1;
                                } else {
                                    i += 1;
                                }
                            }
                        }
                        assert_eq!(got, removed);
                    }
                    6 if rng.gen_bool(0.2) => {
                        let (a, b) = (
                            rng.gen_range(-len - 2..len + 2),
                            rng.gen_range(-len - 2..len + 2),
                        );
                        list.trim(a, b, limit);
                        let kept: VecDeque<Vec<u8>> = match range_bounds(a, b, model.len()) {
                            None => VecDeque::new(),
                            Some((f, t)) => model.range(f..=t).cloned().collect(),
                        };
                        model = kept;
                    }
                    7 => {
                        let (a, b) = (
                            rng.gen_range(-len - 2..len + 2),
                            rng.gen_range(-len - 2..len + 2),
                        );
                        let got: Vec<Vec<u8>> =
                            list.range(a, b).into_iter().map(<[u8]>::to_vec).collect();
                        let want: Vec<Vec<u8>> = match range_bounds(a, b, model.len()) {
                            None => Vec::new(),
                            Some((f, t)) => model.range(f..=t).cloned().collect(),
                        };
                        assert_eq!(got, want);
                    }
                    _ => {
                        let i = rng.gen_range(-len - 2..len + 2);
                        let at = if i < 0 { len + i } else { i };
                        let want = (0..len)
                            .contains(&at)
                            .then(|| model[at as usize].as_slice());
                        assert_eq!(list.get(i), want);
                    }
                }
                check(&list, &model);
            }
        }
    }

    #[test]
    fn a_clone_of_a_large_list_shares_its_packs_until_written() {
        let mut list = ListValue::new();
        for i in 0..20_000 {
            list.push(End::Right, &[format!("element-{i}")], L);
        }
        assert_eq!(list.encoding(), "quicklist");
        let snapshot = list.clone();
        let Repr::Large(q) = &list.repr else {
            panic!("large")
        };
        let Repr::Large(s) = &snapshot.repr else {
            panic!("large")
        };
        assert!(q
            .packs
            .iter()
            .zip(s.packs.iter())
            .all(|(a, b)| Arc::ptr_eq(a, b)));
        list.pop(End::Left, L);
        list.push(End::Right, &[b"new"], L);
        let Repr::Large(q) = &list.repr else {
            panic!("large")
        };
        let shared = q
            .packs
            .iter()
            .zip(s.packs.iter())
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count();
        assert_eq!(
            shared,
            q.packs.len() - 2,
            "only the two written packs were copied"
        );
        assert_eq!(snapshot.len(), 20_000);
        assert_eq!(snapshot.get(0), Some(&b"element-0"[..]));
        assert_eq!(list.get(0), Some(&b"element-1"[..]));
        assert_ne!(snapshot, list);
    }

    #[test]
    fn memory_accounting_follows_the_buffers() {
        let mut list = ListValue::new();
        list.push(
            End::Right,
            &[b"item1", b"item2", b"item3", b"item4", b"item5"],
            L,
        );
        // Five 5-byte entries of 7 bytes each: one buffer of that size's allocation class
        // (the block the allocator hands out for 35 bytes; the buffer grows within it).
        assert_eq!(list.mem_size(), crate::table::alloc_class(35));
        assert_eq!(list.mem_size(), 40);
        assert_eq!(list.encoding(), "listpack");
        for _ in 0..5 {
            list.pop(End::Left, L);
        }
        assert!(list.is_empty());
        assert!(list.mem_size() <= 64);
    }
}
