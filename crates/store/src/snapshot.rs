//! Point-in-time snapshots without stopping the world: shard-granular copy-on-write.
//!
//! `Store::arm_snapshot` (called while the store gate is held exclusively, so no command is in
//! flight) marks every shard of every keyspace as *pending*. From then on, whoever locks a pending
//! shard first — the snapshot writer walking the shards in order, or a command about to touch it —
//! clones the shard's map into the [`SnapshotSink`] before doing anything else and clears the mark.
//! Every captured shard therefore holds exactly its state at the instant the snapshot was armed,
//! and a writer stalls at most once per snapshot, for the time it takes to clone one shard (values
//! are reference-counted `Bytes`, so a clone copies the table, not the data).

use crate::shard::Entry;
use crate::store::Store;
use crate::SHARDS;
use bytes::Bytes;
use hashbrown::HashMap;
use parking_lot::Mutex;

type ShardMap = HashMap<Bytes, Entry>;

/// Where captured shards wait until the snapshot writer serialises them.
#[derive(Default)]
pub struct SnapshotSink {
    /// (keyspace index, shard index) → captured map. Guarded by a mutex taken only to deposit or
    /// take one map; never held while a shard lock is being acquired.
    captured: Mutex<HashMap<(usize, usize), ShardMap>>,
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

    /// Walk every shard of `store` in order, capturing the ones no writer has captured yet, and
    /// call `f(keyspace index, key, entry)` for each entry that is live at `now_ms`. Each shard's copy
    /// is dropped as soon as it has been visited, so the extra memory is about one shard at a time
    /// plus whatever writers captured ahead of the walk.
    pub fn drain(&self, store: &Store, now_ms: u64, mut f: impl FnMut(usize, &Bytes, &Entry)) {
        for keyspace in store.keyspaces() {
            for i in 0..SHARDS {
                keyspace.capture(i);
                let map = self.captured.lock().remove(&(keyspace.index(), i));
                if let Some(map) = map {
                    for (key, entry) in map.iter() {
                        if entry.expires_at().is_none_or(|t| t > now_ms) {
                            f(keyspace.index(), key, entry);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{Store, Value};
    use bytes::Bytes;

    fn put(store: &Store, key: &str, value: &str) {
        store.db(0).unwrap().lock(key.as_bytes()).set(
            key.as_bytes(),
            Value::Str(Bytes::copy_from_slice(value.as_bytes())),
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
            assert_eq!(e.value, Value::Str(Bytes::from_static(b"old")));
            seen += 1;
        });
        assert_eq!(seen, 1000);
        // ...but they are in the store.
        assert_eq!(store.db(0).unwrap().len(), 1001);
    }
}
