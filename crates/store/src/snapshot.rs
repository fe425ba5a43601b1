//! Point-in-time snapshots without stopping the world: key-granular copy-on-write.
//!
//! `Store::arm_snapshot` (called while the store gate is held exclusively, so no command is in
//! flight) marks every shard of every keyspace as *pending*. From then on, the first change to a
//! key of a pending shard keeps the key's entry as it was (or that it was absent) in the shard
//! before the change is made: one entry's clone, values being reference-counted `Bytes`. Reads
//! keep nothing. The snapshot writer walks the shards in order; for each, it takes the shard's
//! lock just long enough to copy the shard's entries into a reused buffer, with the kept entries
//! in place of the changed ones, and so sees the shard exactly as it was when the snapshot was
//! armed. A flush of a pending shard hands its contents (with the changes undone) to the
//! [`SnapshotSink`] instead of freeing them.
//!
//! The copy borrows strings instead of cloning them: it records where each key and string value
//! is, without touching reference counts (for entries spread over memory, the two atomic
//! increments per entry were cache misses, and most of the time the lock was held). The shard
//! stays pending while the writer encodes what it copied, so every change still keeps the entry
//! it replaces and a flush keeps the old map; the writer then releases the shard. Collections,
//! which change in place, are cloned.
//!
//! So a command never copies a shard: it waits at most for the snapshot writer's copy of the one
//! shard it needs (with 256 shards per keyspace, about 4 000 entries for a million keys: a few
//! hundred microseconds), and otherwise pays one entry clone for the first change of each key
//! while the snapshot runs. (Before, the first command to touch a pending shard, read or write,
//! cloned the whole shard's hash table under its lock, and there were 16 shards; with a million
//! keys that kept the worker threads cloning for half a second.)

use crate::shard::{Entry, ItemView, PendingSnapshot, ShardCopy};
use crate::store::Store;
use crate::SHARDS;
use hashbrown::HashMap;
use parking_lot::Mutex;

type ShardMap = crate::table::EntryMap;

/// Shards that a flush handed over while the snapshot waited for them, until the snapshot
/// writer serialises them.
#[derive(Default)]
pub struct SnapshotSink {
    /// (keyspace index, shard index) → the shard's contents as they were when the snapshot was
    /// armed. Guarded by a mutex taken only to deposit or take one map; never held while a
    /// shard lock is being acquired.
    captured: Mutex<HashMap<(usize, usize), ShardMap>>,
    /// What shards dropped while the writer's copy borrowed from them kept for it (see
    /// `Drop for Shard`); dropped with the sink.
    retired: Mutex<Vec<PendingSnapshot>>,
}

impl std::fmt::Debug for SnapshotSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotSink")
            .field("captured_shards", &self.captured.lock().len())
            .finish()
    }
}

impl SnapshotSink {
    pub(crate) fn deposit(&self, keyspace: usize, shard: usize, map: ShardMap) {
        self.captured.lock().insert((keyspace, shard), map);
    }

    pub(crate) fn retire(&self, kept: PendingSnapshot) {
        self.retired.lock().push(kept);
    }

    /// Walk every shard of `store` in order, copying each as the snapshot sees it, and call
    /// `f(keyspace index, key, item)` for each entry that is live at `now_ms`. One shard's copy
    /// is held at a time, in a buffer reused from shard to shard; the shard keeps what the copy
    /// borrows until `f` has seen all of it. Dropping the sink (after this, or instead of it)
    /// ends the snapshot: shards not yet copied stop keeping entries for it.
    /// Returns how long the longest shard copy took (see [`ShardCopyTimes`]).
    pub fn drain(
        &self,
        store: &Store,
        now_ms: u64,
        mut f: impl FnMut(usize, &[u8], ItemView<'_>),
    ) -> ShardCopyTimes {
        let mut copy = ShardCopy::default();
        let mut longest = ShardCopyTimes::default();
        for keyspace in store.keyspaces() {
            for i in 0..SHARDS {
                copy.prepare(keyspace.snapshot_copy_len(i));
                let started = std::time::Instant::now();
                let held = keyspace.copy_for_snapshot(i, &mut copy);
                longest.with_wait = longest.with_wait.max(started.elapsed());
                longest.held = longest.held.max(held);
                let flushed = self.captured.lock().remove(&(keyspace.index(), i));
                // SAFETY: shard `i` is released only after the last read of `copy` (below).
                let entries = unsafe { copy.iter() }.chain(
                    flushed
                        .iter()
                        .flat_map(|map| map.iter().map(|(k, e): (&[u8], &Entry)| (k, e.view()))),
                );
                for (key, item) in entries {
                    if item.expires_at.is_none_or(|t| t > now_ms) {
                        f(keyspace.index(), key, item);
                    }
                }
                // Nothing borrowed from the shard is read after this.
                copy.clear();
                let kept = keyspace.release_snapshot_copy(i);
                drop(kept);
            }
        }
        longest
    }
}

/// The longest shard copy of one snapshot: the longest a command could have waited for the
/// snapshot after it was armed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ShardCopyTimes {
    /// From asking for the shard's lock to releasing it: includes the wait for commands that
    /// held the lock first.
    pub with_wait: std::time::Duration,
    /// With the lock held: the copy itself, and any time the thread lost the CPU meanwhile.
    pub held: std::time::Duration,
}

#[cfg(test)]
mod tests {
    use super::SnapshotSink;
    use crate::shard::ValueView;
    use crate::value::HashValue;
    use crate::{Store, Value};
    use bytes::Bytes;
    use std::collections::BTreeMap;

    fn put(store: &Store, key: &str, value: &str) {
        store.db(0).unwrap().lock(key.as_bytes()).set(
            key.as_bytes(),
            Value::string_copy(value.as_bytes()),
            None,
            0,
        );
    }

    #[test]
    fn snapshot_sees_the_state_at_arming_time() {
        let store = Store::new(2);
        for i in 0..1000 {
            put(&store, &format!("k{i}"), "old");
        }
        let sink = {
            let _gate = store.exclusive();
            store.arm_snapshot()
        };
        // Writes after arming must not show up in the snapshot...
        for i in 0..1000 {
            put(&store, &format!("k{i}"), "new");
        }
        put(&store, "extra", "new");
        let mut seen = 0;
        sink.drain(&store, 0, |db, _k, e| {
            assert_eq!(db, 0);
            assert!(matches!(e.value, ValueView::Str(b"old")));
            seen += 1;
        });
        assert_eq!(seen, 1000);
        // ...but they are in the store.
        assert_eq!(store.db(0).unwrap().len(), 1001);
    }

    /// A value as the snapshot saw it, owned.
    fn owned(v: ValueView<'_>) -> Value {
        match v {
            ValueView::Str(b) => Value::string_copy(b),
            ValueView::Hash(h) => Value::hash(h.clone()),
            ValueView::ZSet(z) => Value::zset(z.clone()),
            ValueView::List(l) => Value::List(l.clone()),
            ValueView::Set(s) => Value::set(s.clone()),
            ValueView::Stream(s) => Value::Stream(s.clone()),
        }
    }

    /// Every key of db 0 as the snapshot writes it: key → (value, expiry).
    fn drained(store: &Store, sink: &SnapshotSink) -> BTreeMap<String, (Value, Option<u64>)> {
        let mut out = BTreeMap::new();
        sink.drain(store, 0, |db, k, e| {
            assert_eq!(db, 0);
            let key = String::from_utf8(k.to_vec()).unwrap();
            assert!(out.insert(key, (owned(e.value), e.expires_at)).is_none());
        });
        out
    }

    /// One database holding `k0`.. `k{n-1}`, each `"old"`.
    fn store_with_old_keys(n: usize) -> Store {
        let store = Store::new(1);
        for i in 0..n {
            put(&store, &format!("k{i}"), "old");
        }
        store
    }

    fn s(v: &str) -> Value {
        Value::string_copy(v.as_bytes())
    }

    #[test]
    fn every_kind_of_change_after_arming_is_kept_out_of_the_snapshot() {
        let store = store_with_old_keys(2000);
        let db = store.db(0).unwrap();
        db.lock(b"h").upsert(
            b"h",
            0,
            || Value::hash(HashValue::new()),
            |v| {
                let Value::Hash(h) = v else { unreachable!() };
                h.insert(b"f", b"1", Default::default())
            },
        );
        let before = {
            let sink = {
                let _gate = store.exclusive();
                store.arm_snapshot()
            };
            let expected: BTreeMap<_, _> = (0..2000)
                .map(|i| (format!("k{i}"), (s("old"), None)))
                .chain([(
                    "h".to_string(),
                    (db.lock(b"h").get(b"h", 0).unwrap().value.clone(), None),
                )])
                .collect();
            // Overwrites (twice: the first change is the one kept), deletes, new keys, TTLs,
            // in-place changes of a collection, new keys deleted again.
            for i in 0..500 {
                put(&store, &format!("k{i}"), "new");
                put(&store, &format!("k{i}"), "newer");
            }
            for i in 500..1000 {
                let key = format!("k{i}");
                db.lock(key.as_bytes()).remove(key.as_bytes(), 0);
            }
            for i in 1000..1100 {
                let key = format!("k{i}");
                assert!(db
                    .lock(key.as_bytes())
                    .set_expiry(key.as_bytes(), Some(5_000), 0));
            }
            for i in 0..300 {
                put(&store, &format!("new{i}"), "x");
            }
            for i in 0..100 {
                let key = format!("new{i}");
                db.lock(key.as_bytes()).remove(key.as_bytes(), 0);
            }
            db.lock(b"h").modify(b"h", 0, |v| {
                let Value::Hash(h) = v else { unreachable!() };
                h.insert(b"g", b"2", Default::default())
            });
            assert_eq!(drained(&store, &sink), expected);
            expected
        };
        // The next snapshot sees the changes.
        let sink = {
            let _gate = store.exclusive();
            store.arm_snapshot()
        };
        let after = drained(&store, &sink);
        assert_eq!(after.len(), 2000 - 500 + 200 + 1);
        assert_eq!(after["k1"].0, s("newer"));
        assert_eq!(after["k1050"].1, Some(5_000));
        assert!(!after.contains_key("k600") && after.contains_key("new150"));
        assert_ne!(after["h"], before["h"]);
    }

    #[test]
    fn a_flush_after_arming_hands_the_old_contents_to_the_snapshot() {
        let store = store_with_old_keys(1000);
        let db = store.db(0).unwrap();
        let sink = {
            let _gate = store.exclusive();
            store.arm_snapshot()
        };
        put(&store, "k7", "changed before the flush");
        put(&store, "created before the flush", "x");
        drop(db.flush());
        put(&store, "k8", "after the flush");
        let seen = drained(&store, &sink);
        assert_eq!(seen.len(), 1000);
        assert!(seen.values().all(|(v, _)| *v == s("old")));
        assert_eq!(db.len(), 1);
    }

    #[test]
    fn an_abandoned_snapshot_stops_keeping_entries() {
        let store = Store::new(1);
        put(&store, "k", "old");
        let sink = {
            let _gate = store.exclusive();
            store.arm_snapshot()
        };
        drop(sink);
        put(&store, "k", "new");
        // A later snapshot is not confused by the abandoned one.
        let sink = {
            let _gate = store.exclusive();
            store.arm_snapshot()
        };
        put(&store, "k", "newer");
        assert_eq!(drained(&store, &sink)["k"].0, s("new"));
    }

    /// A value of `len` bytes that says which key it belongs to and when it was written.
    fn tagged(key: usize, tag: &str, len: usize) -> Vec<u8> {
        let mut v = format!("{tag}-{key}-").into_bytes();
        v.resize(len, b'.');
        v
    }

    /// The copy of a shard borrows its strings without reference counts; everything that
    /// could free or change them while the writer reads them (overwrites, deletes, expiry, a
    /// flush) must leave the bytes it reads as they were when the snapshot was armed. Freed
    /// buffers are filled again with other bytes of the same size to make a read of freed
    /// memory show.
    #[test]
    fn changes_while_the_writer_reads_a_shard_leave_its_bytes_as_armed() {
        changes_while_the_writer_reads(100);
    }

    /// The same with strings short enough to be held inline in the keys' blocks, which a change
    /// rewrites in place (the copy takes their bytes, not a pointer).
    #[test]
    fn changes_while_the_writer_reads_a_shard_leave_inline_strings_as_armed() {
        const { assert!(16 <= crate::string::INLINE_MAX) };
        changes_while_the_writer_reads(16);
    }

    fn changes_while_the_writer_reads(len: usize) {
        const N: usize = 3000;
        let store = Store::new(1);
        let db = store.db(0).unwrap();
        for i in 0..N {
            let key = format!("k{i}");
            db.lock(key.as_bytes()).set(
                key.as_bytes(),
                Value::string(Bytes::from(tagged(i, "old", len))),
                Some(10_000),
                0,
            );
        }
        let sink = {
            let _gate = store.exclusive();
            store.arm_snapshot()
        };
        let mut seen = 0;
        let mut shards_seen = 0;
        let mut current = usize::MAX;
        let mut garbage: Vec<Vec<u8>> = Vec::new();
        // The keys of shard `shard`.
        let keys_of = |shard: usize| {
            (0..N)
                .map(|i| format!("k{i}"))
                .filter(move |k| db.shard_index(k.as_bytes()) == shard)
        };
        sink.drain(&store, 0, |_, key, item| {
            seen += 1;
            let shard = db.shard_index(key);
            if shard != current {
                // The writer has just copied `shard` and reads it now: change it under it.
                current = shard;
                shards_seen += 1;
                match shards_seen {
                    1 => {
                        for (n, key) in keys_of(shard).enumerate() {
                            let mut guard = db.lock(key.as_bytes());
                            let value = Value::string(Bytes::from(vec![b'n'; len]));
                            guard.set(key.as_bytes(), value, None, 0);
                            if n % 2 == 0 {
                                guard.remove(key.as_bytes(), 0);
                            }
                        }
                    }
                    2 => {
                        for key in keys_of(shard) {
                            let mut guard = db.lock(key.as_bytes());
                            guard.set_expiry(key.as_bytes(), Some(5), 0);
                            guard.sweep_expired(10, usize::MAX);
                        }
                    }
                    3 => drop(db.flush()),
                    // A shard the writer has not reached yet: kept the usual way.
                    4 => {
                        for key in keys_of(shard + 1) {
                            db.lock(key.as_bytes()).remove(key.as_bytes(), 0);
                        }
                    }
                    _ => {}
                }
                garbage.extend((0..N).map(|_| vec![b'X'; len]));
            }
            let i: usize = std::str::from_utf8(&key[1..]).unwrap().parse().unwrap();
            let ValueView::Str(bytes) = item.value else {
                panic!("k{i} is not a string")
            };
            assert_eq!(bytes, &tagged(i, "old", len)[..], "k{i} in shard {shard}");
            assert_eq!(item.expires_at, Some(10_000));
        });
        assert_eq!(seen, N);
        assert!(shards_seen > 4);
    }
}
