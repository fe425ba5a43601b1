//! The key → entry table of a shard: a SwissTable of 8-byte slots, each owning one heap block
//! that holds the entry and the key's bytes together.
//!
//! Why this shape (measured with `scripts/bench-memory-types.py`, see
//! `docs/benchmarks/memory.md`): a shard's table doubles in size, so between two growths it is
//! between ~44 % and 87 % full and every empty slot costs as much as a full one. A
//! `HashMap<Bytes, Entry>` slot was 112 bytes (a 32-byte `Bytes` key and an 80-byte entry), i.e.
//! ~230 bytes per key at the usual fill, plus a separate allocation for the key. Here a slot is
//! one pointer (8 bytes and a control byte), and the key lives inline after the entry in one
//! exact-sized block (Redis' `embstr` idea applied to the key, memcached's item header), so a key
//! costs its block plus ~19 bytes of table. The block is the 48-byte entry, the key's length as
//! a LEB128 varint (one byte below 128) and the key's bytes: a key of up to 15 bytes makes a
//! 64-byte block (mimalloc's class; it was 80 with a 64-byte entry, 96 with a 4-byte length
//! field after a 72-byte entry).
//!
//! A block never moves while it is in the table (growth moves slots, not blocks): the expiry
//! index and a snapshot's borrowed copy refer to blocks by address (see `crate::shard`). The
//! table hashes keys with its own hasher; [`EntryMap::hasher`] exposes it for resize-safe
//! scans (`crate::scan`).
//!
//! May import: `crate::shard::Entry` (the payload), `crate::varint` and nothing else of the crate.

use crate::shard::Entry;
use hashbrown::DefaultHashBuilder;
use hashbrown_table::HashTable;
use std::alloc::Layout;
use std::hash::BuildHasher;
use std::ptr::NonNull;

/// What a block starts with: the entry; the key's length (varint) and bytes follow.
type Head = Entry;

/// An owned block: an entry with its key. Dropping it frees both.
pub struct Node(NonNull<Head>);

// SAFETY: a `Node` owns its block exclusively (like a `Box`); `Entry` is Send + Sync.
unsafe impl Send for Node {}
unsafe impl Sync for Node {}

impl Node {
    fn layout(key_len: usize) -> Layout {
        let tail = crate::varint::len(key_len) + key_len;
        let (layout, _) = Layout::new::<Head>()
            .extend(Layout::array::<u8>(tail).expect("key length fits a layout"))
            .expect("key length fits a layout");
        layout.pad_to_align()
    }

    /// A block holding `entry` and a copy of `key`.
    pub fn new(key: &[u8], entry: Entry) -> Node {
        let layout = Self::layout(key.len());
        let (len, k) = crate::varint::encode(key.len());
        // SAFETY: the layout is non-zero-sized (it holds a `Head`) and has room for the head,
        // the `k` length bytes and the key; the head is written before the pointer is used.
        unsafe {
            let raw = std::alloc::alloc(layout) as *mut Head;
            let Some(head) = NonNull::new(raw) else {
                std::alloc::handle_alloc_error(layout)
            };
            head.as_ptr().write(entry);
            let tail = (raw as *mut u8).add(std::mem::size_of::<Head>());
            std::ptr::copy_nonoverlapping(len.as_ptr(), tail, k);
            std::ptr::copy_nonoverlapping(key.as_ptr(), tail.add(k), key.len());
            Node(head)
        }
    }

    fn head(&self) -> &Head {
        // SAFETY: the block is live for as long as the node.
        unsafe { self.0.as_ref() }
    }

    /// The key's bytes (stable for as long as the node lives).
    pub fn key(&self) -> &[u8] {
        // SAFETY: `key_len` bytes follow the head in the block (see `Node::new`).
        unsafe { key_of(self.0.as_ptr() as usize) }
    }

    pub fn entry(&self) -> &Entry {
        self.head()
    }

    pub fn entry_mut(&mut self) -> &mut Entry {
        // SAFETY: `&mut self` is the only access to the block.
        unsafe { self.0.as_mut() }
    }

    /// The key and the entry.
    pub fn parts(&self) -> (&[u8], &Entry) {
        (self.key(), self.entry())
    }

    /// The key and the entry, the entry mutable.
    pub fn parts_mut(&mut self) -> (&[u8], &mut Entry) {
        // SAFETY: the key bytes and the entry are disjoint parts of the block, which `&mut self`
        // owns exclusively.
        unsafe {
            let addr = self.0.as_ptr() as usize;
            (key_of(addr), &mut *self.0.as_ptr())
        }
    }

    /// The block's address: what the expiry index keeps (see [`key_of`]).
    pub fn addr(&self) -> usize {
        self.0.as_ptr() as usize
    }

    /// The entry, freeing the block.
    pub fn into_entry(self) -> Entry {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: the entry is read out once and the block freed without dropping it again.
        unsafe {
            let key_len = key_of(this.0.as_ptr() as usize).len();
            let entry = std::ptr::read(this.0.as_ptr());
            std::alloc::dealloc(this.0.as_ptr() as *mut u8, Self::layout(key_len));
            entry
        }
    }

    /// Bytes the block takes from the allocator (the layout's size).
    pub fn block_size(key_len: usize) -> usize {
        Self::layout(key_len).size()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // SAFETY: the block was made by `Node::new` with this layout and is dropped once.
        unsafe {
            let key_len = key_of(self.0.as_ptr() as usize).len();
            std::ptr::drop_in_place(self.0.as_ptr());
            std::alloc::dealloc(self.0.as_ptr() as *mut u8, Self::layout(key_len));
        }
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Node")
            .field(&String::from_utf8_lossy(self.key()))
            .field(self.entry())
            .finish()
    }
}

/// The size class the server's allocator (mimalloc) serves a request of `n` bytes from: 8-byte
/// steps up to 64 bytes, then four classes per doubling. Memory accounting sizes allocations
/// with it (0 for nothing allocated).
pub fn alloc_class(n: usize) -> usize {
    if n <= 64 {
        return n.next_multiple_of(8);
    }
    let words = n.div_ceil(8);
    let bits = usize::BITS - 1 - (words - 1).leading_zeros();
    let step = 1usize << (bits - 2);
    words.next_multiple_of(step) * 8
}

/// Room for `extra` more bytes in `buf`: when it must grow, it takes the whole size class its
/// new length falls in ([`alloc_class`]), the block the allocator hands out for it anyway. A
/// packed collection growing one small entry at a time (LPUSH, HSET, SADD) then reallocates
/// once per class instead of on every write, at the same memory.
pub fn reserve_in_class(buf: &mut Vec<u8>, extra: usize) {
    let need = buf.len() + extra;
    if need > buf.capacity() {
        buf.reserve_exact(alloc_class(need) - buf.len());
    }
}

/// The key of the live block at `addr`.
///
/// # Safety
/// `addr` must be the [`Node::addr`] of a node that is still alive, and the slice must not be
/// used after that node is dropped.
pub unsafe fn key_of<'a>(addr: usize) -> &'a [u8] {
    // SAFETY: see the contract; `Node::new` wrote the varint length and the key after the head.
    unsafe {
        let mut p = (addr as *const u8).add(std::mem::size_of::<Head>());
        let first = *p;
        p = p.add(1);
        let mut len = usize::from(first & 0x7f);
        if first & 0x80 != 0 {
            let mut shift = 7;
            loop {
                let byte = *p;
                p = p.add(1);
                len |= usize::from(byte & 0x7f) << shift;
                if byte & 0x80 == 0 {
                    break;
                }
                shift += 7;
            }
        }
        std::slice::from_raw_parts(p, len)
    }
}

/// A shard's key → entry table (see the module docs).
#[derive(Default)]
pub struct EntryMap {
    table: HashTable<Node>,
    hasher: DefaultHashBuilder,
}

impl std::fmt::Debug for EntryMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntryMap")
            .field("len", &self.table.len())
            .finish()
    }
}

impl EntryMap {
    pub fn new() -> Self {
        Self::default()
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The hasher keys are placed by (scan positions use it).
    pub fn hasher(&self) -> &DefaultHashBuilder {
        &self.hasher
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    pub fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.node(key).map(Node::entry)
    }

    pub fn node(&self, key: &[u8]) -> Option<&Node> {
        self.table.find(self.hash(key), |n| n.key() == key)
    }

    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        self.node_mut(key).map(Node::entry_mut)
    }

    pub fn node_mut(&mut self, key: &[u8]) -> Option<&mut Node> {
        let hash = self.hash(key);
        self.table.find_mut(hash, |n| n.key() == key)
    }

    pub fn contains_key(&self, key: &[u8]) -> bool {
        self.node(key).is_some()
    }

    /// Insert a node whose key is not in the table (the caller has checked); returns it.
    pub fn insert_new(&mut self, node: Node) -> &mut Node {
        let hash = self.hash(node.key());
        let hasher = &self.hasher;
        self.table
            .insert_unique(hash, node, |n| hasher.hash_one(n.key()))
            .into_mut()
    }

    /// Insert `entry` under `key`, replacing (and returning) an entry already there.
    pub fn insert(&mut self, key: &[u8], entry: Entry) -> Option<Entry> {
        if let Some(node) = self.node_mut(key) {
            return Some(std::mem::replace(node.entry_mut(), entry));
        }
        self.insert_new(Node::new(key, entry));
        None
    }

    /// Take `key`'s node out of the table.
    pub fn remove(&mut self, key: &[u8]) -> Option<Node> {
        let hash = self.hash(key);
        match self.table.find_entry(hash, |n| n.key() == key) {
            Ok(found) => Some(found.remove().0),
            Err(_) => None,
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Entry)> + Clone {
        self.table.iter().map(Node::parts)
    }

    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.table.iter()
    }

    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.table.iter().map(Node::key)
    }

    /// The node in the first occupied slot at or after slot `start` (wrapping): with a random
    /// `start`, a random key (slightly biased towards keys after empty runs, as Redis' own
    /// sampling is). None when the table is empty.
    pub fn node_near(&self, start: usize) -> Option<&Node> {
        let slots = self.table.num_buckets();
        if self.table.is_empty() || slots == 0 {
            return None;
        }
        (0..slots).find_map(|i| self.table.get_bucket((start + i) % slots))
    }

    /// Slots in the table (for sampling and for the memory report).
    pub fn slots(&self) -> usize {
        self.table.num_buckets()
    }

    /// Bytes of the table itself (slots and control bytes), not counting the blocks.
    pub fn table_bytes(&self) -> usize {
        self.table.allocation_size()
    }

    /// Keep only the nodes for which `keep` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8], &mut Entry) -> bool) {
        self.table.retain(|n| {
            let (k, e) = n.parts_mut();
            keep(k, e)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Value;
    use bytes::Bytes;

    fn entry(v: &'static [u8]) -> Entry {
        Entry::new(Value::string(Bytes::from_static(v)), None, 1, 0)
    }

    #[test]
    fn a_slot_is_one_pointer_and_a_block_holds_entry_and_key() {
        assert_eq!(std::mem::size_of::<Node>(), 8);
        assert_eq!(std::mem::size_of::<Option<Node>>(), 8);
        assert_eq!(std::mem::size_of::<Entry>(), 48);
        // The entry with a key of up to 15 bytes fits a 64-byte allocation class.
        assert_eq!(
            alloc_class(Node::block_size(15)),
            64,
            "{}",
            Node::block_size(15)
        );
        assert_eq!(alloc_class(Node::block_size(16)), 80);
    }

    #[test]
    fn keys_of_every_length_class_read_back_from_their_blocks() {
        // 127 and 128 bytes: where the length takes a second byte; 16384: a third.
        for len in [0usize, 1, 15, 16, 127, 128, 300, 16_383, 16_384, 70_000] {
            let key: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let node = Node::new(&key, entry(b"v"));
            assert_eq!(node.key(), &key[..], "{len}");
            // SAFETY: the node is alive for the read.
            assert_eq!(unsafe { key_of(node.addr()) }, &key[..], "{len}");
            assert_eq!(
                Node::block_size(len),
                (48 + crate::varint::len(len) + len).next_multiple_of(8)
            );
            assert!(matches!(node.into_entry().value, Value::Str(_)));
        }
    }

    #[test]
    fn allocation_classes_are_mimallocs() {
        let classes: Vec<usize> = [0, 1, 8, 9, 64, 65, 80, 81, 100, 128, 129, 134, 1000]
            .iter()
            .map(|&n| alloc_class(n))
            .collect();
        assert_eq!(
            classes,
            [0, 8, 8, 16, 64, 80, 80, 96, 112, 128, 160, 160, 1024]
        );
    }

    #[test]
    fn insert_get_replace_remove() {
        let mut map = EntryMap::new();
        for i in 0..1000 {
            assert!(map
                .insert(format!("k{i}").as_bytes(), entry(b"v"))
                .is_none());
        }
        assert_eq!(map.len(), 1000);
        let addr = map.node(b"k7").map(Node::addr).expect("present");
        assert!(map.insert(b"k7", entry(b"w")).is_some());
        assert_eq!(
            map.node(b"k7").map(Node::addr),
            Some(addr),
            "blocks do not move"
        );
        // SAFETY: the node is alive.
        assert_eq!(unsafe { key_of(addr) }, b"k7");
        for i in 0..2000 {
            map.insert(format!("x{i}").as_bytes(), entry(b"v"));
        }
        assert_eq!(
            map.node(b"k7").map(Node::addr),
            Some(addr),
            "not on growth either"
        );
        let node = map.remove(b"k7").expect("present");
        assert_eq!(node.key(), b"k7");
        assert!(matches!(&node.into_entry().value, Value::Str(v) if v == "w"));
        assert!(map.get(b"k7").is_none());
        assert_eq!(map.iter().count(), 2999);
        let mut rng = 0usize;
        for _ in 0..100 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            assert!(map.node_near(rng % (map.slots() + 1)).is_some());
        }
        map.retain(|k, _| k.starts_with(b"k"));
        assert_eq!(map.len(), 999);
    }
}
