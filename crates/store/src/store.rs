//! The store: every keyspace of the server plus the gate that makes MULTI/EXEC atomic.
//!
//! The gate (see [`crate::gate`]) is a reader-writer lock taken by the *dispatcher*, never by command code: each ordinary
//! command runs under a shared hold, a transaction (EXEC) under an exclusive hold, so no other
//! command can interleave with it while shard locks stay fine-grained for everything else. The gate
//! is never held across an `.await`.

use crate::gate::{ExclusiveHold, Gate, SharedHold};
use crate::keyspace::Keyspace;

/// All keyspaces of a server.
pub struct Store {
    keyspaces: Vec<Keyspace>,
    gate: Gate,
}

impl Store {
    /// A store with `databases` keyspaces (the `SELECT` range is 0..databases).
    pub fn new(databases: usize) -> Self {
        Self {
            keyspaces: (0..databases.max(1)).map(Keyspace::with_index).collect(),
            gate: Gate::default(),
        }
    }

    pub fn databases(&self) -> usize {
        self.keyspaces.len()
    }

    /// Keyspace `index`, or None when out of range.
    pub fn db(&self, index: usize) -> Option<&Keyspace> {
        self.keyspaces.get(index)
    }

    pub fn keyspaces(&self) -> &[Keyspace] {
        &self.keyspaces
    }

    /// Shared hold of the gate, for one ordinary command of connection `who`.
    pub fn shared(&self, who: u64) -> SharedHold<'_> {
        self.gate.shared(who)
    }

    /// Exclusive hold of the gate, for a transaction: nothing else runs until it is dropped.
    pub fn exclusive(&self) -> ExclusiveHold<'_> {
        self.gate.exclusive()
    }

    /// Keep (or stop keeping) the keys expiry reclaims, in every keyspace
    /// ([`Keyspace::take_expired`] hands them out).
    pub fn set_expired_log(&self, on: bool) {
        for k in &self.keyspaces {
            k.set_expired_log(on);
        }
    }

    /// Whether any keyspace holds a key with a TTL (no locking): active expiry has nothing to
    /// do otherwise.
    pub fn has_volatile_keys(&self) -> bool {
        self.keyspaces.iter().any(|k| k.volatile_keys() > 0)
    }

    /// Active expiry: reclaim up to `budget_per_shard` expired keys per shard in every keyspace.
    /// Takes a shared hold of the gate itself (it is called from a timer, not from a command).
    pub fn sweep_expired(&self, now_ms: u64, budget_per_shard: usize) -> usize {
        let _gate = self.gate.shared(0);
        self.keyspaces
            .iter()
            .map(|k| k.sweep_expired(now_ms, budget_per_shard))
            .sum()
    }

    /// Arm a point-in-time snapshot of every keyspace (see [`crate::snapshot`]). The caller must
    /// hold the gate exclusively (`exclusive()`), so the snapshot corresponds to a moment when no
    /// command was half-applied; it then drains the returned sink at leisure.
    pub fn arm_snapshot(&self) -> std::sync::Arc<crate::snapshot::SnapshotSink> {
        let sink = std::sync::Arc::new(crate::snapshot::SnapshotSink::default());
        for keyspace in &self.keyspaces {
            keyspace.arm_snapshot(&sink);
        }
        sink
    }

    /// Until `until_ms` (Unix ms; 0: no longer) reads leave expired keys in every keyspace in
    /// place: Redis deletes no expired key while writes are paused (the server sets it with
    /// each pause and lifts it with the last).
    pub fn hold_expiry_until(&self, until_ms: u64) {
        for k in &self.keyspaces {
            k.hold_expiry_until(until_ms);
        }
    }

    /// Keep entries' access data per `clock` in every keyspace (the server sets it from
    /// `maxmemory-policy`, `lfu-log-factor` and `lfu-decay-time`).
    pub fn set_access_clock(&self, clock: crate::shard::AccessClock) {
        for k in &self.keyspaces {
            k.set_access_clock(clock);
        }
    }

    /// Approximate bytes held by keys and values across all keyspaces.
    pub fn used_bytes(&self) -> usize {
        self.keyspaces.iter().map(|k| k.used_bytes()).sum()
    }
}
