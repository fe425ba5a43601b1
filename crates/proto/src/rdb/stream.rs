//! Redis streams in RDB objects (types 15, 19 and 21: `RDB_TYPE_STREAM_LISTPACKS`, `_2`, `_3`).
//!
//! The object is: the number of radix-tree nodes, then each node as its key (the master entry ID,
//! 16 bytes: milliseconds and sequence, big-endian) and its listpack (RDB strings, the listpack
//! LZF-compressed as any RDB string may be); the stream's length and last ID; for type 19 and
//! later, the first ID, the greatest deleted ID and the entries-added counter; then the consumer
//! groups, each as name, last-delivered ID, entries-read counter (type 19 and later), the group's
//! pending entries list (ID as 16 raw bytes, delivery time as 8 bytes little-endian, delivery
//! count) and the consumers (name, seen time as 8 bytes little-endian, for type 21 the active
//! time likewise, and the IDs they own, 16 raw bytes each).
//!
//! A node's listpack starts with the master entry (live count, deleted count, number of master
//! fields, the field names, 0), then every entry of the node, deleted ones included:
//! flags (bit 0 deleted, bit 1 same fields as the master), the ID as differences from the node's
//! key (milliseconds, sequence; wrapping, as signed 64-bit integers), then either the number of
//! fields and field/value pairs or, with the same-fields flag, the values alone, and last the
//! number of listpack elements of the entry (`lp-count`) so the node can be walked backwards.
//!
//! Decoding checks what Redis 7.2 checks when loading with deep sanitisation: node keys of 16
//! bytes, no empty listpack, every listpack element walked with the layout above (integers may
//! be integer-encoded or canonical decimal strings, as `lpGetIntegerIfValid` takes them), the
//! lp-counts right, nothing after the last entry, a non-zero length only with nodes, no duplicate
//! node, group, consumer or pending ID, every consumer pending ID in its group's list and every
//! group pending entry owned by a consumer. It is stricter than Redis where this model cannot
//! hold what Redis would load: negative counts, an entry owned by two consumers. It is as lenient
//! as Redis on what it does not model: the listpack header's element count, how the master
//! entry splits the node's entries into live and deleted (only their sum is checked), flag bits
//! other than deleted and same-fields, and `length` against the live entries.

use std::cmp::Ordering;

use bytes::{BufMut, Bytes, BytesMut};

use super::{
    canonical_int, capacity, listpack_entries_with, listpack_entry_size, listpack_int_size,
    put_len, put_string, Budget, Entry, ListpackWriter, RdbError, Reader, Result, ELEMENT_COST,
};

/// `RDB_TYPE_STREAM_LISTPACKS`: Redis 5 and 6.
pub(super) const TYPE_STREAM_LISTPACKS: u8 = 15;
/// `RDB_TYPE_STREAM_LISTPACKS_2`: Redis 7.0 adds first ID, greatest deleted ID, entries added,
/// and each group's entries-read counter.
pub(super) const TYPE_STREAM_LISTPACKS_2: u8 = 19;
/// `RDB_TYPE_STREAM_LISTPACKS_3`: Redis 7.2 adds each consumer's active time.
pub(super) const TYPE_STREAM_LISTPACKS_3: u8 = 21;

/// Entry flags (stream.h).
const FLAG_DELETED: i64 = 1;
const FLAG_SAMEFIELDS: i64 = 2;

/// Listpack elements of an entry besides its fields and values: flags, ms-diff, seq-diff.
const ENTRY_FIXED_ELEMENTS: i64 = 3;

/// A stream entry ID: (milliseconds, sequence).
pub type StreamId = (u64, u64);

/// A stream as Redis keeps it: its radix tree of listpack nodes, its counters and its consumer
/// groups.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RdbStream {
    /// The radix tree's nodes in key order: each node is one listpack in Redis.
    pub nodes: Vec<RdbStreamNode>,
    /// Live (not deleted) entries.
    pub length: u64,
    pub last_id: StreamId,
    /// `RDB_TYPE_STREAM_LISTPACKS_2`+ metadata; (0,0) when empty. Decoded from type 15 it is
    /// the first live entry's ID, as Redis 7.2 computes it when loading (`streamGetEdgeID`),
    /// which gives (u64::MAX, u64::MAX) for a stream without live entries.
    pub first_id: StreamId,
    /// The greatest ID deleted so far; (0,0) when decoded from type 15.
    pub max_deleted_id: StreamId,
    /// Entries ever added; the length when decoded from type 15.
    pub entries_added: u64,
    /// In name order as Redis' rax gives.
    pub groups: Vec<RdbStreamGroup>,
}

/// One radix-tree node: a listpack holding a master entry and consecutive stream entries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RdbStreamNode {
    /// The node's key in the rax: its master entry's ID.
    pub master_id: StreamId,
    /// The master entry's field names (those of the first entry appended to the node).
    pub master_fields: Vec<Bytes>,
    /// Every entry in the listpack, in order, deleted ones included (flagged).
    pub entries: Vec<RdbStreamEntry>,
}

/// One entry of a node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RdbStreamEntry {
    pub id: StreamId,
    pub deleted: bool,
    pub fields: Vec<(Bytes, Bytes)>,
}

/// A consumer group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RdbStreamGroup {
    pub name: Bytes,
    pub last_id: StreamId,
    /// `entries_read`; -1 when unknown (Redis' SCG_INVALID_ENTRIES_READ).
    pub entries_read: i64,
    /// The group's pending entries list in ID order.
    pub pending: Vec<RdbPending>,
    /// In name order.
    pub consumers: Vec<RdbConsumer>,
}

/// An entry of a group's pending entries list (its owner is the consumer listing its ID).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RdbPending {
    pub id: StreamId,
    /// Unix time in milliseconds of the last delivery.
    pub delivery_time: u64,
    pub delivery_count: u64,
}

/// A consumer of a group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RdbConsumer {
    pub name: Bytes,
    /// Unix time in milliseconds.
    pub seen_time: u64,
    /// Redis 7.2's active-time (RDB_TYPE_STREAM_LISTPACKS_3); None when read from an older type.
    /// [`super::dump`] writes type 19, which has no active time, so it is not written.
    pub active_time: Option<u64>,
    /// IDs of this consumer's pending entries (each also in the group's `pending`), ID order.
    pub pending: Vec<StreamId>,
}

// ---------------------------------------------------------------------------------------------
// sizes

/// Whether an entry with `fields` is stored with the same-fields flag under `master_fields`:
/// the same number of fields with the same names in the same order (Redis compares the bytes).
fn same_fields(master_fields: &[Bytes], fields: &[(Bytes, Bytes)]) -> bool {
    master_fields.len() == fields.len()
        && master_fields.iter().zip(fields).all(|(m, (f, _))| m == f)
}

/// The `lp-count` element of an entry of `n` fields.
fn lp_count(n: usize, same: bool) -> i64 {
    let n = n as i64;
    if same {
        n + ENTRY_FIXED_ELEMENTS
    } else {
        2 * n + 1 + ENTRY_FIXED_ELEMENTS
    }
}

/// The listpack integers of an entry's ID relative to its node's master ID: two's-complement
/// differences, as Redis' `lpAppendInteger(id.ms - master_id.ms)`.
fn id_diffs(id: StreamId, master_id: StreamId) -> (i64, i64) {
    (
        id.0.wrapping_sub(master_id.0) as i64,
        id.1.wrapping_sub(master_id.1) as i64,
    )
}

/// The number of bytes an entry adds to its node's listpack in Redis' layout: flags, ms-diff,
/// seq-diff, then the number of fields and field/value pairs, or the values alone when the
/// fields are the master entry's (`STREAM_ITEM_FLAG_SAMEFIELDS`), then `lp-count`; each element
/// with its back-length. Marking the entry deleted later does not change its size.
pub fn stream_entry_lp_bytes(
    id: StreamId,
    master_id: StreamId,
    master_fields: &[Bytes],
    fields: &[(Bytes, Bytes)],
) -> usize {
    let same = same_fields(master_fields, fields);
    let (ms, seq) = id_diffs(id, master_id);
    // Flags are 0..=3: one byte and its back-length.
    let mut size =
        listpack_int_size(FLAG_SAMEFIELDS) + listpack_int_size(ms) + listpack_int_size(seq);
    if same {
        size += fields
            .iter()
            .map(|(_, v)| listpack_entry_size(v))
            .sum::<usize>();
    } else {
        size += listpack_int_size(fields.len() as i64);
        size += fields
            .iter()
            .map(|(f, v)| listpack_entry_size(f) + listpack_entry_size(v))
            .sum::<usize>();
    }
    size + listpack_int_size(lp_count(fields.len(), same))
}

/// The number of bytes of a node's master entry with `live` and `deleted` entries: the two
/// counts, the number of master fields, the field names and the terminating 0. A node's
/// listpack is 6 header bytes, this, its entries ([`stream_entry_lp_bytes`]) and 1 end byte.
pub fn stream_master_entry_lp_bytes(live: u64, deleted: u64, master_fields: &[Bytes]) -> usize {
    let int = |v: u64| listpack_int_size(i64::try_from(v).unwrap_or(i64::MAX));
    int(live)
        + int(deleted)
        + int(master_fields.len() as u64)
        + master_fields
            .iter()
            .map(|f| listpack_entry_size(f))
            .sum::<usize>()
        + listpack_int_size(0)
}

/// The node listpack's total size in bytes (Redis' `lpBytes`), as Redis lays it out: header,
/// master entry (counting the node's live and deleted entries), every entry, end byte.
///
/// Redis 7.0 and 7.2 append to the last node unless `lpBytes` plus the new entry's field and value
/// lengths (raw bytes) reach `stream-node-max-bytes`, or its live plus deleted entries reach
/// `stream-node-max-entries`; the new node's master fields are that entry's field names. To track
/// the size as entries come and go: 6 + [`stream_master_entry_lp_bytes`] (its counts' sizes
/// change with them) + the sum of [`stream_entry_lp_bytes`] + 1.
pub fn stream_node_lp_bytes(node: &RdbStreamNode) -> usize {
    let deleted = node.entries.iter().filter(|e| e.deleted).count() as u64;
    let live = node.entries.len() as u64 - deleted;
    let entries: usize = node
        .entries
        .iter()
        .map(|e| stream_entry_lp_bytes(e.id, node.master_id, &node.master_fields, &e.fields))
        .sum();
    6 + stream_master_entry_lp_bytes(live, deleted, &node.master_fields) + entries + 1
}

// ---------------------------------------------------------------------------------------------
// dump

/// An ID as Redis keys its rax and writes PEL entries: milliseconds and sequence, big-endian.
fn id_key(id: StreamId) -> [u8; 16] {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&id.0.to_be_bytes());
    key[8..].copy_from_slice(&id.1.to_be_bytes());
    key
}

fn put_id(out: &mut BytesMut, id: StreamId) {
    out.put_slice(&id_key(id));
}

/// A node's listpack, as Redis builds it with `streamAppendItem` and marks deletions.
pub(super) fn node_listpack(node: &RdbStreamNode) -> Vec<u8> {
    let deleted = node.entries.iter().filter(|e| e.deleted).count();
    let mut lp = ListpackWriter::new();
    lp.push_int((node.entries.len() - deleted) as i64);
    lp.push_int(deleted as i64);
    lp.push_int(node.master_fields.len() as i64);
    for f in &node.master_fields {
        lp.push(f);
    }
    lp.push_int(0);
    for e in &node.entries {
        let same = same_fields(&node.master_fields, &e.fields);
        let mut flags = 0;
        if e.deleted {
            flags |= FLAG_DELETED;
        }
        if same {
            flags |= FLAG_SAMEFIELDS;
        }
        let (ms, seq) = id_diffs(e.id, node.master_id);
        lp.push_int(flags);
        lp.push_int(ms);
        lp.push_int(seq);
        if same {
            for (_, v) in &e.fields {
                lp.push(v);
            }
        } else {
            lp.push_int(e.fields.len() as i64);
            for (f, v) in &e.fields {
                lp.push(f);
                lp.push(v);
            }
        }
        lp.push_int(lp_count(e.fields.len(), same));
    }
    lp.finish()
}

/// `items` in the order of `cmp`, refusing two that compare equal.
fn sorted_distinct<T>(items: &[T], cmp: impl Fn(&T, &T) -> Ordering) -> Result<Vec<&T>> {
    let mut sorted: Vec<&T> = items.iter().collect();
    sorted.sort_by(|a, b| cmp(a, b));
    if sorted
        .windows(2)
        .any(|w| cmp(w[0], w[1]) == Ordering::Equal)
    {
        return Err(RdbError::Duplicate);
    }
    Ok(sorted)
}

/// Checks that every consumer's pending IDs name entries of the group's pending list (sorted),
/// each owned by exactly one consumer.
fn check_ownership<'a>(
    pending: &[StreamId],
    owners: impl Iterator<Item = &'a [StreamId]>,
) -> Result<()> {
    let mut owned = vec![false; pending.len()];
    for ids in owners {
        for id in ids {
            let i = pending
                .binary_search(id)
                .map_err(|_| RdbError::Corrupt("consumer PEL entry not in the group PEL"))?;
            if owned[i] {
                return Err(RdbError::Corrupt("PEL entry owned by two consumers"));
            }
            owned[i] = true;
        }
    }
    if owned.iter().any(|o| !o) {
        return Err(RdbError::Corrupt("group PEL entry without a consumer"));
    }
    Ok(())
}

/// Writes `s` as `RDB_TYPE_STREAM_LISTPACKS_2`, as Redis 7.0's `rdbSaveObject` does. Nodes,
/// groups, consumers and pending lists are written in key order whatever their order in `s`;
/// the same key twice is [`RdbError::Duplicate`]; a consumer's pending ID missing from its
/// group's list, owned twice, or a group pending entry owned by no consumer is
/// [`RdbError::Corrupt`] (Redis could not hold such a stream).
pub(super) fn put_stream(out: &mut BytesMut, s: &RdbStream) -> Result<()> {
    let nodes = sorted_distinct(&s.nodes, |a, b| a.master_id.cmp(&b.master_id))?;
    let groups = sorted_distinct(&s.groups, |a, b| a.name.cmp(&b.name))?;
    struct Group<'a> {
        group: &'a RdbStreamGroup,
        pending: Vec<&'a RdbPending>,
        consumers: Vec<(&'a RdbConsumer, Vec<StreamId>)>,
    }
    let mut checked = Vec::with_capacity(groups.len());
    for group in groups {
        let pending = sorted_distinct(&group.pending, |a, b| a.id.cmp(&b.id))?;
        let mut consumers = Vec::with_capacity(group.consumers.len());
        for c in sorted_distinct(&group.consumers, |a, b| a.name.cmp(&b.name))? {
            let ids: Vec<StreamId> = sorted_distinct(&c.pending, Ord::cmp)?
                .into_iter()
                .copied()
                .collect();
            consumers.push((c, ids));
        }
        let ids: Vec<StreamId> = pending.iter().map(|p| p.id).collect();
        check_ownership(&ids, consumers.iter().map(|(_, ids)| &ids[..]))?;
        checked.push(Group {
            group,
            pending,
            consumers,
        });
    }

    out.put_u8(TYPE_STREAM_LISTPACKS_2);
    put_len(out, nodes.len() as u64);
    for node in nodes {
        put_string(out, &id_key(node.master_id));
        put_string(out, &node_listpack(node));
    }
    put_len(out, s.length);
    for id in [s.last_id, s.first_id, s.max_deleted_id] {
        put_len(out, id.0);
        put_len(out, id.1);
    }
    put_len(out, s.entries_added);
    put_len(out, checked.len() as u64);
    for g in &checked {
        put_string(out, &g.group.name);
        put_len(out, g.group.last_id.0);
        put_len(out, g.group.last_id.1);
        put_len(out, g.group.entries_read as u64);
        put_len(out, g.pending.len() as u64);
        for p in &g.pending {
            put_id(out, p.id);
            out.put_u64_le(p.delivery_time);
            put_len(out, p.delivery_count);
        }
        put_len(out, g.consumers.len() as u64);
        for (c, ids) in &g.consumers {
            put_string(out, &c.name);
            out.put_u64_le(c.seen_time);
            put_len(out, ids.len() as u64);
            for id in ids {
                put_id(out, *id);
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// restore

const BAD_LISTPACK: RdbError = RdbError::Corrupt("stream listpack integrity check failed");

fn read_id(r: &mut Reader<'_>) -> Result<StreamId> {
    let raw: [u8; 16] = r.array()?;
    Ok(id_from_key(&raw))
}

fn id_from_key(raw: &[u8; 16]) -> StreamId {
    let mut ms = [0u8; 8];
    let mut seq = [0u8; 8];
    ms.copy_from_slice(&raw[..8]);
    seq.copy_from_slice(&raw[8..]);
    (u64::from_be_bytes(ms), u64::from_be_bytes(seq))
}

fn read_len_id(r: &mut Reader<'_>) -> Result<StreamId> {
    Ok((r.count()?, r.count()?))
}

/// The elements of a node's listpack, walked as Redis' `streamValidateListpackIntegrity` does
/// with deep sanitisation.
struct Elements<'b> {
    items: std::vec::IntoIter<Entry<'b>>,
}

impl<'b> Elements<'b> {
    fn next(&mut self) -> Result<Entry<'b>> {
        self.items.next().ok_or(BAD_LISTPACK)
    }

    /// An integer element, or a string holding one (Redis' `lpGetIntegerIfValid`).
    fn int(&mut self) -> Result<i64> {
        match self.next()? {
            Entry::Int(v) => Ok(v),
            Entry::Str(s) => canonical_int(s).ok_or(BAD_LISTPACK),
        }
    }

    /// A count of elements that follow: not negative and not more than are left.
    fn count(&mut self) -> Result<usize> {
        let n = self.int()?;
        if n < 0 || n as u64 > self.items.len() as u64 {
            return Err(BAD_LISTPACK);
        }
        Ok(n as usize)
    }
}

/// One node: its 16-byte key and its listpack.
fn read_node(r: &mut Reader<'_>, budget: &mut Budget) -> Result<RdbStreamNode> {
    let key = r.string(budget)?;
    let key: &[u8; 16] = key[..]
        .try_into()
        .map_err(|_| RdbError::Corrupt("stream node key is not a stream ID"))?;
    let master_id = id_from_key(key);
    let blob = r.string(budget)?;
    // Redis checks the listpack's header and walks its elements, but not the element count in
    // the header.
    let mut items = Vec::new();
    listpack_entries_with(&blob, false, |e| {
        items.push(e);
        Ok(())
    })?;
    if items.is_empty() {
        return Err(RdbError::Corrupt("empty listpack inside stream"));
    }
    let mut el = Elements {
        items: items.into_iter(),
    };
    let live = el.int()?;
    let deleted = el.int()?;
    let n_master = el.count()?;
    let mut master_fields = Vec::with_capacity(n_master);
    for _ in 0..n_master {
        master_fields.push(budget.entry(el.next()?)?);
    }
    if el.int()? != 0 {
        return Err(BAD_LISTPACK);
    }
    let total = live.checked_add(deleted).ok_or(BAD_LISTPACK)?;
    if total < 0 || total as u64 > el.items.len() as u64 {
        return Err(BAD_LISTPACK);
    }
    let mut entries = Vec::with_capacity(total as usize);
    for _ in 0..total {
        let flags = el.int()?;
        let ms = el.int()?;
        let seq = el.int()?;
        let id = (
            master_id.0.wrapping_add(ms as u64),
            master_id.1.wrapping_add(seq as u64),
        );
        let same = flags & FLAG_SAMEFIELDS != 0;
        let n = if same { n_master } else { el.count()? };
        budget.charge(ELEMENT_COST)?;
        let mut fields = Vec::with_capacity(n);
        if same {
            // The names are shared with the master entry's; each slot is charged.
            for field in &master_fields {
                budget.charge(ELEMENT_COST)?;
                fields.push((field.clone(), budget.entry(el.next()?)?));
            }
        } else {
            for _ in 0..n {
                let field = budget.entry(el.next()?)?;
                let value = budget.entry(el.next()?)?;
                fields.push((field, value));
            }
        }
        if el.int()? != lp_count(n, same) {
            return Err(BAD_LISTPACK);
        }
        entries.push(RdbStreamEntry {
            id,
            deleted: flags & FLAG_DELETED != 0,
            fields,
        });
    }
    if el.items.len() != 0 {
        return Err(BAD_LISTPACK);
    }
    Ok(RdbStreamNode {
        master_id,
        master_fields,
        entries,
    })
}

/// Sorts `items` by `cmp` as Redis' rax orders them; two that compare equal are a duplicate.
fn sort_distinct<T>(items: &mut [T], cmp: impl Fn(&T, &T) -> Ordering) -> Result<()> {
    items.sort_by(|a, b| cmp(a, b));
    if items
        .windows(2)
        .any(|w| cmp(&w[0], &w[1]) == Ordering::Equal)
    {
        return Err(RdbError::Duplicate);
    }
    Ok(())
}

/// Redis' `streamEstimateDistanceFromFirstEverEntry`, with which Redis 7.2 sets a group's
/// entries-read counter when loading type 15.
fn estimate_entries_read(s: &RdbStream, id: StreamId) -> i64 {
    if s.entries_added == 0 {
        return 0;
    }
    if s.length == 0 && id <= s.last_id {
        return s.entries_added as i64;
    }
    match id.cmp(&s.last_id) {
        Ordering::Equal => return s.entries_added as i64,
        Ordering::Greater => return -1,
        Ordering::Less => {}
    }
    if s.max_deleted_id == (0, 0) || s.max_deleted_id < s.first_id {
        let before = s.entries_added.wrapping_sub(s.length);
        match id.cmp(&s.first_id) {
            Ordering::Less => return before as i64,
            Ordering::Equal => return before.wrapping_add(1) as i64,
            Ordering::Greater => {}
        }
    }
    -1
}

/// Decodes a stream object of RDB type `kind` (15, 19 or 21) as Redis 7.2's `rdbLoadObject`,
/// with the checks of its deep sanitisation: every node's listpack walked entry by entry,
/// consumers' pending IDs found in their group's list. Nodes, groups, consumers and pending
/// lists come back in key order.
pub(super) fn decode_stream(
    kind: u8,
    r: &mut Reader<'_>,
    budget: &mut Budget,
) -> Result<RdbStream> {
    let n_nodes = r.count()?;
    let mut nodes = Vec::with_capacity(capacity(n_nodes, r.remaining()));
    for _ in 0..n_nodes {
        nodes.push(read_node(r, budget)?);
    }
    sort_distinct(&mut nodes, |a, b| a.master_id.cmp(&b.master_id))?;
    let mut s = RdbStream {
        nodes,
        length: r.count()?,
        last_id: read_len_id(r)?,
        ..RdbStream::default()
    };
    if kind >= TYPE_STREAM_LISTPACKS_2 {
        s.first_id = read_len_id(r)?;
        s.max_deleted_id = read_len_id(r)?;
        s.entries_added = r.count()?;
    } else {
        s.entries_added = s.length;
        s.first_id = s
            .nodes
            .iter()
            .flat_map(|n| &n.entries)
            .find(|e| !e.deleted)
            .map_or((u64::MAX, u64::MAX), |e| e.id);
    }
    if s.length != 0 && s.nodes.is_empty() {
        return Err(RdbError::Corrupt(
            "stream length inconsistent with rax entries",
        ));
    }

    let n_groups = r.count()?;
    let mut groups = Vec::with_capacity(capacity(n_groups, r.remaining()));
    for _ in 0..n_groups {
        let name = r.element(budget)?;
        let last_id = read_len_id(r)?;
        let entries_read = if kind >= TYPE_STREAM_LISTPACKS_2 {
            r.count()? as i64
        } else {
            estimate_entries_read(&s, last_id)
        };
        let n_pending = r.count()?;
        let mut pending = Vec::with_capacity(capacity(n_pending, r.remaining()));
        for _ in 0..n_pending {
            let id = read_id(r)?;
            let delivery_time = u64::from_le_bytes(r.array()?);
            let delivery_count = r.count()?;
            budget.charge(ELEMENT_COST)?;
            pending.push(RdbPending {
                id,
                delivery_time,
                delivery_count,
            });
        }
        sort_distinct(&mut pending, |a, b| a.id.cmp(&b.id))?;
        let n_consumers = r.count()?;
        let mut consumers = Vec::with_capacity(capacity(n_consumers, r.remaining()));
        for _ in 0..n_consumers {
            let name = r.element(budget)?;
            let seen_time = u64::from_le_bytes(r.array()?);
            let active_time = if kind >= TYPE_STREAM_LISTPACKS_3 {
                Some(u64::from_le_bytes(r.array()?))
            } else {
                None
            };
            let n_ids = r.count()?;
            let mut ids = Vec::with_capacity(capacity(n_ids, r.remaining()));
            for _ in 0..n_ids {
                budget.charge(ELEMENT_COST)?;
                ids.push(read_id(r)?);
            }
            sort_distinct(&mut ids, Ord::cmp)?;
            consumers.push(RdbConsumer {
                name,
                seen_time,
                active_time,
                pending: ids,
            });
        }
        sort_distinct(&mut consumers, |a, b| a.name.cmp(&b.name))?;
        let ids: Vec<StreamId> = pending.iter().map(|p| p.id).collect();
        check_ownership(&ids, consumers.iter().map(|c| &c.pending[..]))?;
        groups.push(RdbStreamGroup {
            name,
            last_id,
            entries_read,
            pending,
            consumers,
        });
    }
    sort_distinct(&mut groups, |a, b| a.name.cmp(&b.name))?;
    s.groups = groups;
    Ok(s)
}
