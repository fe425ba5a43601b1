//! Streams: entries with IDs, trimmed from the head, and consumer groups with their pending
//! entries lists — Redis 7.2's stream type, without the protocol.
//!
//! The layout follows Redis' on purpose, because it shows through: entries are kept in *nodes*
//! (one listpack each in Redis) that fill up to `stream-node-max-entries` entries or
//! `stream-node-max-bytes` bytes, a node's first entry gives it its master ID and master fields,
//! a deleted entry stays in its node as a tombstone until the node holds no live entry, and an
//! approximate trim (`MAXLEN ~`, `MINID ~`) removes whole nodes only. XTRIM's reply, XINFO
//! STREAM FULL and the DUMP payload depend on that layout, so the node sizes are computed in
//! bytes exactly as a Redis listpack would hold them ([`gradus_proto::rdb::listpack_entry_size`]).
//!
//! Nodes are shared (`Arc`), so a snapshot's copy of a large stream bumps one count per node and
//! the first write afterwards copies only the node it changes. Groups are copied whole.
//!
//! Times are Unix milliseconds passed in by the caller. May import `varint` and
//! `gradus_proto::rdb`'s listpack sizes; nothing about commands or replies.

use crate::varint;
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

/// A stream entry ID: milliseconds and sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    pub const ZERO: StreamId = StreamId { ms: 0, seq: 0 };
    pub const MAX: StreamId = StreamId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    pub const fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    pub fn is_zero(self) -> bool {
        self == StreamId::ZERO
    }

    /// The next ID, or None past the last possible one.
    pub fn incr(self) -> Option<StreamId> {
        if self.seq < u64::MAX {
            Some(StreamId::new(self.ms, self.seq + 1))
        } else if self.ms < u64::MAX {
            Some(StreamId::new(self.ms + 1, 0))
        } else {
            None
        }
    }

    /// The previous ID, or None before 0-0.
    pub fn decr(self) -> Option<StreamId> {
        if self.seq > 0 {
            Some(StreamId::new(self.ms, self.seq - 1))
        } else if self.ms > 0 {
            Some(StreamId::new(self.ms - 1, u64::MAX))
        } else {
            None
        }
    }

    /// The ID as `ms-seq` bytes.
    pub fn to_bytes(self) -> Bytes {
        Bytes::from(self.to_string())
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// `stream-node-max-bytes` and `stream-node-max-entries` (0: no limit of that kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeLimits {
    pub max_bytes: usize,
    pub max_entries: usize,
}

impl NodeLimits {
    /// Redis' defaults.
    pub const REDIS_DEFAULT: NodeLimits = NodeLimits {
        max_bytes: 4096,
        max_entries: 100,
    };
}

impl Default for NodeLimits {
    fn default() -> Self {
        Self::REDIS_DEFAULT
    }
}

/// The most bytes a node holds whatever the settings (Redis' `STREAM_LISTPACK_MAX_SIZE`).
const NODE_MAX_BYTES: usize = 1 << 30;
/// A listpack's header and end byte.
const LISTPACK_OVERHEAD: usize = 7;

/// The listpack size of an integer entry.
fn int_size(v: i64) -> usize {
    gradus_proto::rdb::listpack_entry_size(v.to_string().as_bytes())
}

fn str_size(s: &[u8]) -> usize {
    gradus_proto::rdb::listpack_entry_size(s)
}

/// Byte strings packed one after another, each after its LEB128 length.
fn pack<'a>(items: impl Iterator<Item = &'a [u8]>) -> Box<[u8]> {
    let mut out = Vec::new();
    for item in items {
        let (head, n) = varint::encode(item.len());
        out.extend_from_slice(&head[..n]);
        out.extend_from_slice(item);
    }
    out.into_boxed_slice()
}

/// The items [`pack`] packed.
#[derive(Clone)]
pub struct Unpack<'a> {
    buf: &'a [u8],
    at: usize,
}

fn unpack(buf: &[u8]) -> Unpack<'_> {
    Unpack { buf, at: 0 }
}

impl<'a> Iterator for Unpack<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.at >= self.buf.len() {
            return None;
        }
        let (len, start) = varint::decode(self.buf, self.at);
        self.at = start + len;
        Some(&self.buf[start..start + len])
    }
}

/// An entry's flag bits in a node's buffer.
const DELETED: u8 = 1;
const SAME_FIELDS: u8 = 2;

/// One entry of a node, decoded in place: its ID, whether it was deleted (a tombstone), and
/// its items — the values alone when it has its node's master fields, else fields and values
/// alternating — as [`pack`] packed them. `at` is where its flags byte is in the node's buffer.
#[derive(Debug, Clone, Copy)]
struct Raw<'a> {
    at: usize,
    id: StreamId,
    flags: u8,
    items: &'a [u8],
}

impl Raw<'_> {
    fn deleted(&self) -> bool {
        self.flags & DELETED != 0
    }
}

/// One node: Redis' listpack of entries sharing a master entry. Its entries are one packed
/// buffer (as compact as the listpack: a flags byte, the milliseconds after the master's and
/// the sequence as LEB128, the item count, the items), read front to back; a node holds at
/// most `stream-node-max-entries` (100) of them, so a scan of one is short.
#[derive(Debug, Clone, PartialEq)]
struct Node {
    master_id: StreamId,
    master_fields: Box<[u8]>,
    master_count: u32,
    /// Entries, deleted ones included.
    count: u32,
    live: u32,
    /// The last entry's ID.
    last: StreamId,
    buf: Vec<u8>,
    /// The listpack's bytes but for the live and deleted counters (which change in place).
    bytes_but_counts: usize,
}

fn put_varint(out: &mut Vec<u8>, n: u64) {
    let (head, k) = varint::encode(n as usize);
    out.extend_from_slice(&head[..k]);
}

impl Node {
    fn new(master_id: StreamId, fields: &[Bytes]) -> Node {
        let names = fields.iter().step_by(2);
        let count = fields.len() / 2;
        let bytes = LISTPACK_OVERHEAD
            + int_size(count as i64)
            + names.clone().map(|f| str_size(f)).sum::<usize>()
            + int_size(0);
        Node {
            master_id,
            master_fields: pack(names.map(|f| &f[..])),
            master_count: count as u32,
            count: 0,
            live: 0,
            last: master_id,
            buf: Vec::new(),
            bytes_but_counts: bytes,
        }
    }

    /// lpBytes of this node in Redis.
    fn lp_bytes(&self) -> usize {
        let deleted = self.count - self.live;
        self.bytes_but_counts + int_size(i64::from(self.live)) + int_size(i64::from(deleted))
    }

    fn has_master_fields(&self, fields: &[Bytes]) -> bool {
        fields.len() / 2 == self.master_count as usize
            && unpack(&self.master_fields)
                .zip(fields.iter().step_by(2))
                .all(|(a, b)| a == &b[..])
    }

    fn push(&mut self, id: StreamId, fields: &[Bytes], deleted: bool) {
        let same = self.has_master_fields(fields);
        let n = fields.len() / 2;
        let mut size = int_size(if same { 2 } else { 0 })
            + int_size(id.ms.wrapping_sub(self.master_id.ms) as i64)
            + int_size(id.seq.wrapping_sub(self.master_id.seq) as i64);
        let items: Vec<&[u8]> = if same {
            fields.iter().skip(1).step_by(2).map(|v| &v[..]).collect()
        } else {
            fields.iter().map(|f| &f[..]).collect()
        };
        size += items.iter().map(|i| str_size(i)).sum::<usize>();
        size += if same {
            int_size(n as i64 + 3)
        } else {
            int_size(n as i64) + int_size(2 * n as i64 + 4)
        };
        self.bytes_but_counts += size;
        let mut flags = if same { SAME_FIELDS } else { 0 };
        if deleted {
            flags |= DELETED;
        } else {
            self.live += 1;
        }
        self.buf.push(flags);
        put_varint(&mut self.buf, id.ms - self.master_id.ms);
        put_varint(&mut self.buf, id.seq);
        put_varint(&mut self.buf, items.len() as u64);
        for item in items {
            put_varint(&mut self.buf, item.len() as u64);
            self.buf.extend_from_slice(item);
        }
        self.count += 1;
        self.last = id;
    }

    /// The entry whose flags byte is at `at`, and where the next one starts.
    fn decode(&self, at: usize) -> (Raw<'_>, usize) {
        let buf = &self.buf;
        let flags = buf[at];
        let (ms, k) = varint::decode(buf, at + 1);
        let (seq, k) = varint::decode(buf, k);
        let (n, mut k) = varint::decode(buf, k);
        let start = k;
        for _ in 0..n {
            let (len, next) = varint::decode(buf, k);
            k = next + len;
        }
        let raw = Raw {
            at,
            id: StreamId::new(self.master_id.ms + ms as u64, seq as u64),
            flags,
            items: &buf[start..k],
        };
        (raw, k)
    }

    /// Every entry, tombstones included, front to back (decoded as it goes).
    fn raw(&self) -> NodeIter<'_> {
        NodeIter { node: self, at: 0 }
    }

    /// Every entry, tombstones included, back to front (a node's entries are found from its
    /// front, so they are collected first: at most a node's worth).
    fn raw_rev(&self) -> std::iter::Rev<std::vec::IntoIter<Raw<'_>>> {
        let mut all = Vec::with_capacity(self.count as usize);
        all.extend(self.raw());
        all.into_iter().rev()
    }

    fn pairs<'a>(&'a self, e: &Raw<'a>) -> Fields<'a> {
        if e.flags & SAME_FIELDS != 0 {
            Fields::Same(unpack(&self.master_fields), unpack(e.items))
        } else {
            Fields::Own(unpack(e.items))
        }
    }

    fn mark_deleted(&mut self, at: usize) {
        self.buf[at] |= DELETED;
        self.live -= 1;
    }

    /// The last entry's ID, deleted or not (Redis' `lpGetEdgeStreamID`).
    fn last_id(&self) -> StreamId {
        self.last
    }

    /// Closed to new entries (another node follows it): its buffer gets its exact size, as
    /// Redis shrinks a full listpack.
    fn close(&mut self) {
        crate::value::shrink_exact(&mut self.buf);
    }

    fn mem(&self) -> usize {
        std::mem::size_of::<Node>() + self.master_fields.len() + self.buf.capacity()
    }
}

/// A node's entries, front to back.
struct NodeIter<'a> {
    node: &'a Node,
    at: usize,
}

impl<'a> Iterator for NodeIter<'a> {
    type Item = Raw<'a>;
    fn next(&mut self) -> Option<Raw<'a>> {
        if self.at >= self.node.buf.len() {
            return None;
        }
        let (raw, next) = self.node.decode(self.at);
        self.at = next;
        Some(raw)
    }
}

/// An entry's fields and values, as pairs.
#[derive(Clone)]
pub enum Fields<'a> {
    /// The node's master fields, and the entry's values.
    Same(Unpack<'a>, Unpack<'a>),
    /// Fields and values alternating.
    Own(Unpack<'a>),
}

impl<'a> Iterator for Fields<'a> {
    type Item = (&'a [u8], &'a [u8]);
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Fields::Same(names, values) => Some((names.next()?, values.next()?)),
            Fields::Own(items) => Some((items.next()?, items.next()?)),
        }
    }
}

/// A pending entry: delivered to `consumer`, not acknowledged yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nack {
    pub consumer: Bytes,
    pub delivery_time: u64,
    pub delivery_count: u64,
}

/// A consumer of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    /// Last time it was seen (any read or claim attempt).
    pub seen_time: u64,
    /// Last time it was delivered something or claimed an entry; -1 never.
    pub active_time: i64,
    /// Its pending entries (each also in the group's PEL, naming it).
    pub pending: BTreeSet<StreamId>,
}

impl Consumer {
    pub fn new(now: u64) -> Consumer {
        Consumer {
            seen_time: now,
            active_time: -1,
            pending: BTreeSet::new(),
        }
    }
}

/// Redis' `SCG_INVALID_ENTRIES_READ`.
pub const ENTRIES_READ_UNKNOWN: i64 = -1;

/// A consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub last_id: StreamId,
    /// Logical count of entries read, or [`ENTRIES_READ_UNKNOWN`].
    pub entries_read: i64,
    /// The pending entries list, by ID.
    pub pel: BTreeMap<StreamId, Nack>,
    /// Consumers by name (byte order, as Redis' rax).
    pub consumers: BTreeMap<Bytes, Consumer>,
}

impl Group {
    pub fn new(last_id: StreamId, entries_read: i64) -> Group {
        Group {
            last_id,
            entries_read,
            pel: BTreeMap::new(),
            consumers: BTreeMap::new(),
        }
    }

    /// The consumer, created if new (true when it was).
    pub fn consumer(&mut self, name: &[u8], now: u64) -> (&mut Consumer, bool) {
        let created = !self.consumers.contains_key(name);
        let c = self
            .consumers
            .entry(Bytes::copy_from_slice(name))
            .or_insert_with(|| Consumer::new(now));
        (c, created)
    }

    /// Removes the consumer and its pending entries: how many it had (None: no such consumer).
    pub fn delete_consumer(&mut self, name: &[u8]) -> Option<usize> {
        let c = self.consumers.remove(name)?;
        for id in &c.pending {
            self.pel.remove(id);
        }
        Some(c.pending.len())
    }

    /// Acknowledges `id`: whether it was pending.
    pub fn ack(&mut self, id: StreamId) -> bool {
        let Some(nack) = self.pel.remove(&id) else {
            return false;
        };
        if let Some(c) = self.consumers.get_mut(&nack.consumer) {
            c.pending.remove(&id);
        }
        true
    }

    /// Makes `id` pending for `consumer` (which must exist), delivered now, count `count`;
    /// moved from its previous owner if it had one.
    pub fn assign(&mut self, id: StreamId, consumer: &Bytes, time: u64, count: u64) {
        if let Some(old) = self.pel.get(&id) {
            if old.consumer != *consumer {
                if let Some(c) = self.consumers.get_mut(&old.consumer) {
                    c.pending.remove(&id);
                }
            }
        }
        self.pel.insert(
            id,
            Nack {
                consumer: consumer.clone(),
                delivery_time: time,
                delivery_count: count,
            },
        );
        if let Some(c) = self.consumers.get_mut(consumer) {
            c.pending.insert(id);
        }
    }
}

/// Where XADD takes its ID from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewId {
    /// `*`: from the clock (never below the last ID).
    Auto,
    /// `ms-*`: that millisecond, the next sequence number.
    Ms(u64),
    /// `ms-seq`.
    Exact(StreamId),
}

/// Why XADD added nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddError {
    /// The ID is not above the stream's last ID (or the sequence would overflow).
    NotAbove,
    /// The last ID is the last possible one.
    Exhausted,
    /// An element would not fit a listpack.
    TooLarge,
}

/// How to trim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trim {
    MaxLen(u64),
    MinId(StreamId),
}

/// A stream (see the module).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamValue {
    inner: Box<Inner>,
}

#[derive(Debug, Clone, Default)]
struct Inner {
    nodes: BTreeMap<StreamId, Arc<Node>>,
    length: u64,
    last_id: StreamId,
    first_id: StreamId,
    max_deleted_id: StreamId,
    entries_added: u64,
    groups: BTreeMap<Bytes, Group>,
    /// Bytes of the nodes (their own accounting).
    node_mem: usize,
}

/// Two streams are equal when their entries, layout, metadata and groups are: the bytes their
/// buffers happen to reserve (`node_mem`) do not count.
impl PartialEq for Inner {
    fn eq(&self, other: &Inner) -> bool {
        self.nodes == other.nodes
            && self.length == other.length
            && self.last_id == other.last_id
            && self.first_id == other.first_id
            && self.max_deleted_id == other.max_deleted_id
            && self.entries_added == other.entries_added
            && self.groups == other.groups
    }
}

/// One live entry as a range gives it.
pub struct EntryRef<'a> {
    pub id: StreamId,
    node: &'a Node,
    raw: Raw<'a>,
}

impl<'a> EntryRef<'a> {
    /// The entry's field/value pairs.
    pub fn fields(&self) -> Fields<'a> {
        self.node.pairs(&self.raw)
    }
}

/// The stream's metadata (XINFO STREAM, the snapshot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamMeta {
    pub length: u64,
    pub last_id: StreamId,
    pub first_id: StreamId,
    pub max_deleted_id: StreamId,
    pub entries_added: u64,
}

/// One entry of a [`NodeView`]: ID, deleted, fields and values.
pub type EntryView<'a> = (StreamId, bool, Vec<(&'a [u8], &'a [u8])>);

/// One node as the RDB encoding sees it (entries with tombstones).
pub struct NodeView<'a> {
    pub master_id: StreamId,
    pub master_fields: Vec<&'a [u8]>,
    /// (ID, deleted, fields and values)
    pub entries: Vec<EntryView<'a>>,
}

impl StreamValue {
    pub fn new() -> StreamValue {
        StreamValue::default()
    }

    /// Live entries.
    pub fn len(&self) -> u64 {
        self.inner.length
    }

    pub fn is_empty(&self) -> bool {
        self.inner.length == 0
    }

    pub fn meta(&self) -> StreamMeta {
        let i = &self.inner;
        StreamMeta {
            length: i.length,
            last_id: i.last_id,
            first_id: i.first_id,
            max_deleted_id: i.max_deleted_id,
            entries_added: i.entries_added,
        }
    }

    /// Restores metadata read back from a snapshot or a DUMP payload (after the entries were
    /// appended with [`StreamValue::load_node`]).
    pub fn set_meta(
        &mut self,
        last_id: StreamId,
        first_id: StreamId,
        max_deleted_id: StreamId,
        entries_added: u64,
    ) {
        let i = &mut self.inner;
        i.last_id = last_id;
        i.first_id = first_id;
        i.max_deleted_id = max_deleted_id;
        i.entries_added = entries_added;
    }

    /// Approximate heap bytes. O(groups).
    pub fn mem_size(&self) -> usize {
        let groups: usize = self
            .inner
            .groups
            .iter()
            .map(|(name, g)| {
                64 + name.len()
                    + g.pel.len() * 64
                    + g.consumers
                        .iter()
                        .map(|(n, c)| 64 + n.len() + c.pending.len() * 32)
                        .sum::<usize>()
            })
            .sum();
        std::mem::size_of::<Inner>() + self.inner.node_mem + groups
    }

    /// Nodes, as Redis' radix tree holds them.
    pub fn node_count(&self) -> usize {
        self.inner.nodes.len()
    }

    /// Appends an entry (`fields`: field, value, …, at least one pair); its ID.
    pub fn add(
        &mut self,
        id: NewId,
        fields: &[Bytes],
        now: u64,
        limits: NodeLimits,
    ) -> Result<StreamId, AddError> {
        let last = self.inner.last_id;
        if last == StreamId::MAX {
            return Err(AddError::Exhausted);
        }
        let id = match id {
            NewId::Auto => {
                if now > last.ms {
                    StreamId::new(now, 0)
                } else {
                    last.incr().ok_or(AddError::NotAbove)?
                }
            }
            NewId::Ms(ms) if ms == last.ms => {
                if last.seq == u64::MAX {
                    return Err(AddError::NotAbove);
                }
                StreamId::new(ms, last.seq + 1)
            }
            NewId::Ms(ms) => StreamId::new(ms, 0),
            NewId::Exact(id) => id,
        };
        if id <= last {
            return Err(AddError::NotAbove);
        }
        let total: usize = fields.iter().map(|f| f.len()).sum();
        if fields.iter().any(|f| f.len() > u32::MAX as usize) || total > NODE_MAX_BYTES {
            return Err(AddError::TooLarge);
        }
        self.append(id, fields, limits);
        Ok(id)
    }

    fn append(&mut self, id: StreamId, fields: &[Bytes], limits: NodeLimits) {
        let total: usize = fields.iter().map(|f| f.len()).sum();
        let max_bytes = if limits.max_bytes == 0 || limits.max_bytes > NODE_MAX_BYTES {
            NODE_MAX_BYTES
        } else {
            limits.max_bytes
        };
        let i = &mut *self.inner;
        let tail_fits = i.nodes.last_key_value().is_some_and(|(_, node)| {
            node.lp_bytes() + total < max_bytes
                && (limits.max_entries == 0 || (node.count as usize) < limits.max_entries)
        });
        self.push_entry(!tail_fits, id, false, fields);
        let i = &mut *self.inner;
        i.length += 1;
        i.entries_added += 1;
        i.last_id = id;
        if i.length == 1 {
            i.first_id = id;
        }
    }

    /// Appends an entry read back from a snapshot or DUMP payload into a node of its own layout
    /// (`new_node`: it starts a node), deleted or not; no ID checks, no metadata change but
    /// the length.
    pub fn load_entry(&mut self, new_node: bool, id: StreamId, deleted: bool, fields: &[Bytes]) {
        self.push_entry(new_node, id, deleted, fields);
        if !deleted {
            self.inner.length += 1;
        }
    }

    /// Appends an entry to the last node, or to a new one (`new_node`, or when there is none;
    /// the node before it is then closed), keeping the nodes' byte count.
    fn push_entry(&mut self, new_node: bool, id: StreamId, deleted: bool, fields: &[Bytes]) {
        let i = &mut *self.inner;
        if new_node || i.nodes.is_empty() {
            if let Some(mut tail) = i.nodes.last_entry() {
                let node = Arc::make_mut(tail.get_mut());
                let before = node.mem();
                node.close();
                i.node_mem = i.node_mem + node.mem() - before;
            }
            let node = Node::new(id, fields);
            i.node_mem += node.mem();
            i.nodes.insert(id, Arc::new(node));
        }
        let mut entry = i.nodes.last_entry().expect("a tail node");
        let node = Arc::make_mut(entry.get_mut());
        let before = node.mem();
        node.push(id, fields, deleted);
        i.node_mem = i.node_mem + node.mem() - before;
    }

    /// The last entry's ID, tombstones included (None: no node).
    pub fn last_entry_id(&self) -> Option<StreamId> {
        self.inner.nodes.values().next_back().map(|n| n.last_id())
    }

    /// Every node with its tombstones, in order (the encodings).
    pub fn nodes(&self) -> impl Iterator<Item = NodeView<'_>> {
        self.inner.nodes.values().map(|node| NodeView {
            master_id: node.master_id,
            master_fields: unpack(&node.master_fields).collect(),
            entries: node
                .raw()
                .map(|e| (e.id, e.deleted(), node.pairs(&e).collect()))
                .collect(),
        })
    }

    /// Live entries with `start <= id <= end`, ascending (or descending when `rev`).
    pub fn range(
        &self,
        start: StreamId,
        end: StreamId,
        rev: bool,
    ) -> Box<dyn Iterator<Item = EntryRef<'_>> + '_> {
        if start > end {
            return Box::new(std::iter::empty());
        }
        // The node holding `start` begins at or before it.
        let from = self
            .inner
            .nodes
            .range(..=start)
            .next_back()
            .map_or(start, |(k, _)| *k);
        let nodes = self.inner.nodes.range(from..=end).map(|(_, n)| &**n);
        let live = move |e: &Raw<'_>| !e.deleted() && e.id >= start && e.id <= end;
        if rev {
            Box::new(nodes.rev().flat_map(move |node| {
                node.raw_rev().filter(live).map(move |raw| EntryRef {
                    id: raw.id,
                    node,
                    raw,
                })
            }))
        } else {
            Box::new(nodes.flat_map(move |node| {
                node.raw()
                    .take_while(move |e| e.id <= end)
                    .filter(live)
                    .map(move |raw| EntryRef {
                        id: raw.id,
                        node,
                        raw,
                    })
            }))
        }
    }

    /// The live entry `id`, if there is one.
    pub fn get(&self, id: StreamId) -> Option<EntryRef<'_>> {
        self.range(id, id, false).next()
    }

    /// The first live entry's ID (`streamGetEdgeID` with tombstones skipped).
    fn first_live(&self) -> Option<StreamId> {
        self.range(StreamId::ZERO, StreamId::MAX, false)
            .next()
            .map(|e| e.id)
    }

    /// The last live entry's ID.
    pub fn last_live(&self) -> Option<StreamId> {
        self.range(StreamId::ZERO, StreamId::MAX, true)
            .next()
            .map(|e| e.id)
    }

    /// The first entry's ID, tombstones included (`streamGetEdgeID(s,1,0)`): what an
    /// approximate MINID trim is logged with. MAX when there is none.
    pub fn first_with_tombstones(&self) -> StreamId {
        self.inner
            .nodes
            .values()
            .find_map(|n| n.raw().next().map(|e| e.id))
            .unwrap_or(StreamId::MAX)
    }

    /// XDEL of one ID: whether it was a live entry. Keeps `max_deleted_id` and `first_id`.
    pub fn delete(&mut self, id: StreamId) -> bool {
        let i = &mut *self.inner;
        let Some(key) = i.nodes.range(..=id).next_back().map(|(k, _)| *k) else {
            return false;
        };
        let node = i.nodes.get_mut(&key).expect("just found");
        let Some(at) = node
            .raw()
            .find(|e| e.id == id && !e.deleted())
            .map(|e| e.at)
        else {
            return false;
        };
        if node.live == 1 {
            let mem = node.mem();
            i.nodes.remove(&key);
            i.node_mem -= mem;
        } else {
            Arc::make_mut(node).mark_deleted(at);
        }
        i.length -= 1;
        if id > i.max_deleted_id {
            i.max_deleted_id = id;
        }
        true
    }

    /// After deletions (`first_deleted`: one of them was the first entry): Redis' first_id.
    pub fn after_deletions(&mut self, first_deleted: bool) {
        if self.inner.length == 0 {
            self.inner.first_id = StreamId::ZERO;
        } else if first_deleted {
            self.inner.first_id = self.first_live().unwrap_or(StreamId::MAX);
        }
    }

    /// The recorded first ID (`s->first_id`).
    pub fn first_id(&self) -> StreamId {
        self.inner.first_id
    }

    pub fn last_id(&self) -> StreamId {
        self.inner.last_id
    }

    pub fn max_deleted_id(&self) -> StreamId {
        self.inner.max_deleted_id
    }

    pub fn entries_added(&self) -> u64 {
        self.inner.entries_added
    }

    /// XSETID's change (checks are the caller's).
    pub fn set_id(
        &mut self,
        last: StreamId,
        entries_added: Option<u64>,
        max_deleted: Option<StreamId>,
    ) {
        self.inner.last_id = last;
        if let Some(n) = entries_added {
            self.inner.entries_added = n;
        }
        if let Some(m) = max_deleted {
            self.inner.max_deleted_id = m;
        }
    }

    /// Redis' `streamTrim`: entries removed from the head. `limit` 0: no limit.
    pub fn trim(&mut self, how: Trim, approx: bool, limit: u64) -> u64 {
        let i = &mut *self.inner;
        let mut deleted = 0u64;
        loop {
            if let Trim::MaxLen(max) = how {
                if i.length <= max {
                    break;
                }
            }
            let Some(mut first) = i.nodes.first_entry() else {
                break;
            };
            let live = first.get().live as u64;
            if limit != 0 && deleted + live > limit {
                break;
            }
            let remove = match how {
                Trim::MaxLen(max) => i.length - live >= max,
                Trim::MinId(min) => first.get().last_id() < min,
            };
            if remove {
                let node = first.remove();
                i.node_mem -= node.mem();
                i.length -= live;
                deleted += live;
                continue;
            }
            if approx {
                break;
            }
            let node = Arc::make_mut(first.get_mut());
            let entries: Vec<(usize, StreamId, bool)> =
                node.raw().map(|e| (e.at, e.id, e.deleted())).collect();
            for (at, id, gone) in entries {
                let stop = match how {
                    Trim::MaxLen(max) => i.length <= max,
                    Trim::MinId(min) => id >= min,
                };
                if stop {
                    break;
                }
                if !gone {
                    node.mark_deleted(at);
                    i.length -= 1;
                    deleted += 1;
                }
            }
            break;
        }
        if self.inner.length == 0 {
            self.inner.first_id = StreamId::ZERO;
        } else if deleted > 0 {
            self.inner.first_id = self.first_live().unwrap_or(StreamId::MAX);
        }
        deleted
    }

    /// Whether [`StreamValue::trim`] with these arguments would remove anything.
    pub fn trim_would_remove(&self, how: Trim, approx: bool, limit: u64) -> bool {
        let i = &self.inner;
        if let Trim::MaxLen(max) = how {
            if i.length <= max {
                return false;
            }
        }
        let Some((_, node)) = i.nodes.first_key_value() else {
            return false;
        };
        let live = node.live as u64;
        if limit != 0 && live > limit {
            return false;
        }
        let whole = match how {
            Trim::MaxLen(max) => i.length - live >= max,
            Trim::MinId(min) => node.last_id() < min,
        };
        if whole {
            return true;
        }
        if approx {
            return false;
        }
        match how {
            Trim::MaxLen(_) => true,
            Trim::MinId(min) => node.raw().any(|e| !e.deleted() && e.id < min),
        }
    }

    // ----- consumer groups

    pub fn groups(&self) -> &BTreeMap<Bytes, Group> {
        &self.inner.groups
    }

    pub fn group(&self, name: &[u8]) -> Option<&Group> {
        self.inner.groups.get(name)
    }

    pub fn group_mut(&mut self, name: &[u8]) -> Option<&mut Group> {
        self.inner.groups.get_mut(name)
    }

    /// XGROUP CREATE: false when the group exists.
    pub fn create_group(&mut self, name: &[u8], last_id: StreamId, entries_read: i64) -> bool {
        if self.inner.groups.contains_key(name) {
            return false;
        }
        self.inner.groups.insert(
            Bytes::copy_from_slice(name),
            Group::new(last_id, entries_read),
        );
        true
    }

    /// Inserts a group as loaded (snapshot, DUMP).
    pub fn load_group(&mut self, name: Bytes, group: Group) {
        self.inner.groups.insert(name, group);
    }

    pub fn destroy_group(&mut self, name: &[u8]) -> bool {
        self.inner.groups.remove(name).is_some()
    }

    /// Whether `start..=end` (None: the ends) may hold a tombstone (Redis'
    /// `streamRangeHasTombstones`).
    pub fn range_has_tombstones(&self, start: Option<StreamId>, end: Option<StreamId>) -> bool {
        let i = &self.inner;
        if i.length == 0 || i.max_deleted_id.is_zero() {
            return false;
        }
        if i.first_id > i.max_deleted_id {
            return false;
        }
        let start = start.unwrap_or(StreamId::ZERO);
        let end = end.unwrap_or(StreamId::MAX);
        start <= i.max_deleted_id && i.max_deleted_id <= end
    }

    /// Redis' `streamEstimateDistanceFromFirstEverEntry`.
    pub fn estimate_distance(&self, id: StreamId) -> i64 {
        let i = &self.inner;
        if i.entries_added == 0 {
            return 0;
        }
        if i.length == 0 && id <= i.last_id {
            return i.entries_added as i64;
        }
        match id.cmp(&i.last_id) {
            std::cmp::Ordering::Equal => return i.entries_added as i64,
            std::cmp::Ordering::Greater => return ENTRIES_READ_UNKNOWN,
            std::cmp::Ordering::Less => {}
        }
        if i.max_deleted_id.is_zero() || i.max_deleted_id < i.first_id {
            match id.cmp(&i.first_id) {
                std::cmp::Ordering::Less => return (i.entries_added - i.length) as i64,
                std::cmp::Ordering::Equal => return (i.entries_added - i.length + 1) as i64,
                std::cmp::Ordering::Greater => {}
            }
        }
        ENTRIES_READ_UNKNOWN
    }

    /// A group's lag (XINFO GROUPS), None when unknown.
    pub fn lag(&self, group: &Group) -> Option<i64> {
        let added = self.inner.entries_added as i64;
        if self.inner.entries_added == 0 {
            return Some(0);
        }
        if group.entries_read != ENTRIES_READ_UNKNOWN
            && !self.range_has_tombstones(Some(group.last_id), None)
        {
            return Some(added - group.entries_read);
        }
        let read = self.estimate_distance(group.last_id);
        (read != ENTRIES_READ_UNKNOWN).then_some(added - read)
    }

    /// A group read entry `id` (XREADGROUP `>`): its last ID and read counter move on.
    pub fn advance_group(&mut self, name: &[u8], id: StreamId) {
        let has_tombstones = self.range_has_tombstones(Some(id), None);
        let estimate = self.estimate_distance(id);
        let added = self.inner.entries_added;
        let Some(g) = self.inner.groups.get_mut(name) else {
            return;
        };
        if id <= g.last_id {
            return;
        }
        if g.entries_read != ENTRIES_READ_UNKNOWN && !has_tombstones {
            g.entries_read += 1;
        } else if added > 0 {
            g.entries_read = estimate;
        }
        g.last_id = id;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gradus_proto::rdb::{stream_node_lp_bytes, RdbStreamEntry, RdbStreamNode};

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn filled(n: u64, limits: NodeLimits) -> StreamValue {
        let mut s = StreamValue::new();
        for i in 1..=n {
            let fields = if i % 5 == 0 {
                vec![b("other"), b(&i.to_string())]
            } else {
                vec![
                    b("f"),
                    b(&format!("v{i}")),
                    b("n"),
                    b(&(i * 1000).to_string()),
                ]
            };
            s.add(NewId::Exact(StreamId::new(i, i % 4)), &fields, 0, limits)
                .unwrap();
        }
        s
    }

    /// Each node's size in bytes is what the codec (checked against redis-server's own
    /// listpacks) computes for the same node.
    #[test]
    fn node_sizes_are_redis_listpack_sizes() {
        let mut s = filled(450, NodeLimits::REDIS_DEFAULT);
        for i in (3..450).step_by(7) {
            s.delete(StreamId::new(i, i % 4));
        }
        for (node, view) in s.inner.nodes.values().zip(s.nodes()) {
            let rdb = RdbStreamNode {
                master_id: (view.master_id.ms, view.master_id.seq),
                master_fields: view
                    .master_fields
                    .iter()
                    .map(|f| Bytes::copy_from_slice(f))
                    .collect(),
                entries: view
                    .entries
                    .iter()
                    .map(|(id, deleted, fields)| RdbStreamEntry {
                        id: (id.ms, id.seq),
                        deleted: *deleted,
                        fields: fields
                            .iter()
                            .map(|(f, v)| (Bytes::copy_from_slice(f), Bytes::copy_from_slice(v)))
                            .collect(),
                    })
                    .collect(),
            };
            assert_eq!(node.lp_bytes(), stream_node_lp_bytes(&rdb));
        }
    }

    /// Nodes fill up to `stream-node-max-entries` entries or `stream-node-max-bytes` bytes, as
    /// Redis' `streamAppendItem` decides.
    #[test]
    fn nodes_fill_to_the_limits() {
        let s = filled(250, NodeLimits::REDIS_DEFAULT);
        let sizes: Vec<u32> = s.inner.nodes.values().map(|n| n.count).collect();
        assert_eq!(sizes, [100, 100, 50]);
        let small = NodeLimits {
            max_bytes: 200,
            max_entries: 0,
        };
        let s = filled(60, small);
        assert!(s.node_count() > 5);
        assert!(s.inner.nodes.values().all(|n| n.lp_bytes() < 200 + 40));
    }

    /// An approximate trim removes whole nodes only; an exact one marks the rest deleted in the
    /// first node; LIMIT stops before a node that would pass it.
    #[test]
    fn trims_remove_whole_nodes_or_exactly() {
        let mut s = filled(250, NodeLimits::REDIS_DEFAULT);
        assert!(!s.trim_would_remove(Trim::MaxLen(160), true, 10_000));
        assert_eq!(s.trim(Trim::MaxLen(160), true, 10_000), 0);
        assert_eq!(s.trim(Trim::MaxLen(140), true, 10_000), 100);
        assert_eq!(s.len(), 150);
        assert_eq!(s.trim(Trim::MaxLen(120), false, 0), 30);
        assert_eq!(s.len(), 120);
        assert_eq!(s.first_id(), StreamId::new(131, 131 % 4));
        assert_eq!(
            s.trim(Trim::MaxLen(0), true, 50),
            0,
            "the first node is past the limit"
        );
        assert_eq!(s.trim(Trim::MinId(StreamId::new(240, 0)), false, 0), 109);
        assert_eq!(s.first_id(), StreamId::new(240, 0));
        assert_eq!(s.trim(Trim::MaxLen(0), false, 0), 11);
        assert!(s.is_empty());
        assert_eq!(s.first_id(), StreamId::ZERO);
        assert_eq!(s.entries_added(), 250);
    }

    /// XDEL keeps tombstones until a node is empty, moves `max_deleted_id` up, and the group
    /// counters follow Redis' estimates.
    #[test]
    fn deletions_tombstones_and_lag() {
        let mut s = filled(10, NodeLimits::REDIS_DEFAULT);
        s.create_group(b"g", StreamId::ZERO, 0);
        assert_eq!(s.lag(s.group(b"g").unwrap()), Some(10));
        s.advance_group(b"g", StreamId::new(3, 3));
        assert_eq!(s.group(b"g").unwrap().entries_read, 1);
        assert!(s.delete(StreamId::new(5, 1)));
        assert!(!s.delete(StreamId::new(5, 1)), "already a tombstone");
        assert!(!s.delete(StreamId::new(5, 2)), "never there");
        assert_eq!(s.max_deleted_id(), StreamId::new(5, 1));
        // A tombstone after the group's last ID: its lag is unknown.
        assert_eq!(s.lag(s.group(b"g").unwrap()), None);
        assert_eq!(s.range(StreamId::ZERO, StreamId::MAX, false).count(), 9);
        assert_eq!(s.node_count(), 1);
        for i in 1..=10 {
            s.delete(StreamId::new(i, i % 4));
        }
        assert_eq!(s.node_count(), 0, "a node goes with its last live entry");
        s.after_deletions(true);
        assert_eq!(s.first_id(), StreamId::ZERO);
        assert_eq!(
            s.add(
                NewId::Exact(StreamId::new(10, 2)),
                &[b("f"), b("v")],
                0,
                NodeLimits::REDIS_DEFAULT
            ),
            Err(AddError::NotAbove)
        );
        assert_eq!(
            s.add(
                NewId::Ms(10),
                &[b("f"), b("v")],
                0,
                NodeLimits::REDIS_DEFAULT
            ),
            Ok(StreamId::new(10, 3))
        );
        assert_eq!(
            s.add(NewId::Auto, &[b("f"), b("v")], 5, NodeLimits::REDIS_DEFAULT),
            Ok(StreamId::new(10, 4))
        );
        assert_eq!(
            s.add(
                NewId::Auto,
                &[b("f"), b("v")],
                99,
                NodeLimits::REDIS_DEFAULT
            ),
            Ok(StreamId::new(99, 0))
        );
    }

    /// A snapshot's copy shares the nodes: a write to the stream copies only the node it
    /// changes, and the copy keeps what it had.
    #[test]
    fn a_copy_shares_nodes_until_written() {
        let mut s = filled(300, NodeLimits::REDIS_DEFAULT);
        let copy = s.clone();
        s.delete(StreamId::new(250, 250 % 4));
        let shared = s
            .inner
            .nodes
            .values()
            .zip(copy.inner.nodes.values())
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count();
        assert_eq!(shared, 2);
        assert_eq!(copy.len(), 300);
        assert!(copy.get(StreamId::new(250, 250 % 4)).is_some());
    }
}
