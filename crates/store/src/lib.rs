//! Gradus keyspaces: the in-memory data the server serves.
//!
//! Modules, from the outside in:
//! - [`store`]: every keyspace plus the gate that makes transactions atomic;
//! - [`keyspace`]: one `SELECT` database, sharded; multi-key locking, SCAN, KEYS, flush;
//! - [`shard`]: a table of entries ([`table`]: one block per key, 8-byte slots) with lazy/active expiry, versions for WATCH, memory accounting;
//! - [`snapshot`]: point-in-time copies by key-granular copy-on-write;
//! - [`locks`]: native session locks (FIFO, fencing tokens, leases, waiter cap);
//! - [`value`]: strings ([`string`]: short ones inline, long ones in a [`heapstr`]), hashes, sorted sets ([`zset`]: listpack, skiplist), lists ([`list`]: the
//!   packed list encoding), sets ([`set`]: intset, listpack, hashtable) and streams ([`stream`]: nodes of
//!   entries, consumer groups);
//! - [`scan`]: resize-safe cursor iteration; [`glob`]: Redis glob patterns;
//! - [`gate`]: the slotted reader-writer lock behind `Store::shared`/`Store::exclusive`;
//! - [`varint`]: LEB128 lengths (list packs, packed hashes and sets, key blocks).
//!
//! This crate knows nothing about sockets, protocols or command syntax (from `gradus-proto` it
//! takes only Redis' integer rule and a listpack entry's size, so encodings match Redis'); times are passed in as
//! Unix milliseconds so tests control the clock.

pub mod gate;
pub mod glob;
pub mod heapstr;
pub mod keyspace;
pub mod list;
pub mod locks;
pub mod scan;
pub mod set;
pub mod shard;
pub mod snapshot;
pub mod store;
pub mod stream;
pub mod string;
pub mod table;
pub mod value;
pub mod varint;
pub mod zset;

pub use keyspace::ShardGuard;
pub use keyspace::{HeldShards, Keyspace, MultiLock, ScanPage, UnloggedMarks, SHARDS};
pub use list::{End, ListLimit, ListValue};
pub use set::{Member, SetLimits, SetValue};
pub use shard::{
    with_touch, AccessClock, Cleared, Entry, EvictionPolicy, ItemMeta, ItemView, Shard, ValueView,
};
pub use snapshot::{ShardCopyTimes, SnapshotSink};
pub use store::Store;
pub use stream::{StreamId, StreamValue};
pub use string::StrValue;
pub use value::{FieldHasher, HashLimits, HashValue, Value, ValueKind};
pub use zset::{Score, ScoreBound, ZMember, ZSetLimits, ZSetValue};

/// The current time in Unix milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
