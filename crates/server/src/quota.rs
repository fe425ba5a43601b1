//! Memory limits: a keyspace's own `memory-limit` and its tenant's total, enforced by the write
//! path before every write that may grow memory (commands flagged `denyoom`, EXEC of a
//! transaction holding one, scripts, memcached stores), over either front end.
//!
//! As in Redis, a write is admitted while usage is at or under the limit (so usage can overshoot by
//! one write) and the next one is refused or makes room first:
//! - over a keyspace's own limit, an `lru` keyspace evicts its own keys by approximate LRU
//!   (sampling) until it fits; a `none` keyspace refuses the write with `-OOM` and keeps every byte;
//! - over the tenant's limit, the tenant's `lru` keyspaces give up keys (the selected one first if it
//!   is one, else the largest); when none has anything left, the write is refused with `-OOM`.
//!
//! So cache pressure can never evict session data: only `lru` keyspaces ever lose keys. Evictions
//! from a logged keyspace are logged as DEL, so replay agrees with memory.
//!
//! On top of those, the server-wide `maxmemory` (Redis' setting, on `used_memory`: the
//! allocator's count, `crate::alloc`): over it, a write first evicts by `maxmemory-policy` from
//! the `lru` keyspaces (the largest first; session keyspaces never; without `[[tenants]]`, the
//! databases of degree `none`), and fails with Redis' OOM error when the policy is `noeviction`
//! or nothing qualifies. As in Redis' `processCommand`, any command (a read too) first evicts
//! while the server is over `maxmemory` (`dispatch::evict_before_command`).
//!
//! The policy also decides what keys' access data is (see [`apply_access_clock`]): under
//! `allkeys-lfu`/`volatile-lfu` Redis' LFU counter, which those policies evict by (lowest
//! first, as decayed by `lfu-decay-time`), else the last access time; `lru` keyspaces then evict
//! by whichever is kept.
//!
//! Client eviction (`maxmemory-clients`, Redis 7's): the memory of the connections themselves
//! (buffers, queued commands, pending replies) is bounded too; past the limit the largest
//! connections are closed ([`evict_clients`], ten times a second).
//!
//! May import: `persist::write` (evictions are a write transaction), `state`, `client`. Must not
//! import command modules.

use crate::client::ClientState;
use crate::persist::write::{log_effect, stream_effect, Scope, WriteError, WriteTxn};
use crate::state::Shared;
use bytes::Bytes;
use gradus_store::{AccessClock, EvictionPolicy};
use std::sync::atomic::Ordering;

/// Redis' `maxmemory-policy` values, in the order `LiveSettings::maxmemory_policy` indexes.
pub const POLICIES: &[&str] = &[
    "noeviction",
    "allkeys-lru",
    "volatile-lru",
    "allkeys-lfu",
    "volatile-lfu",
    "allkeys-random",
    "volatile-random",
    "volatile-ttl",
];

/// The index of policy `name` in [`POLICIES`] (0, `noeviction`, for a name not there; the
/// settings table lets only those names through).
pub fn policy_index(name: &str) -> u8 {
    POLICIES
        .iter()
        .position(|p| p.eq_ignore_ascii_case(name))
        .unwrap_or(0) as u8
}

/// How policy number `index` picks keys; None for `noeviction`.
fn eviction_policy(index: u8) -> Option<EvictionPolicy> {
    match POLICIES.get(usize::from(index)).copied() {
        Some("allkeys-lru") => Some(EvictionPolicy::AllKeysLru),
        Some("volatile-lru") => Some(EvictionPolicy::VolatileLru),
        Some("allkeys-lfu") => Some(EvictionPolicy::AllKeysLfu),
        Some("volatile-lfu") => Some(EvictionPolicy::VolatileLfu),
        Some("allkeys-random") => Some(EvictionPolicy::AllKeysRandom),
        Some("volatile-random") => Some(EvictionPolicy::VolatileRandom),
        Some("volatile-ttl") => Some(EvictionPolicy::VolatileTtl),
        _ => None,
    }
}

/// How keys' access data is kept under the live settings: LFU data under an LFU policy (Redis'
/// `MAXMEMORY_FLAG_LFU`), with `lfu-log-factor` and `lfu-decay-time`; else LRU data.
pub fn access_clock(live: &crate::state::LiveSettings) -> AccessClock {
    let policy = POLICIES[usize::from(live.maxmemory_policy.load(Ordering::Relaxed))];
    if !policy.ends_with("-lfu") {
        return AccessClock::Lru;
    }
    let setting = |v: &std::sync::atomic::AtomicU64| {
        u32::try_from(v.load(Ordering::Relaxed)).unwrap_or(u32::MAX)
    };
    AccessClock::Lfu {
        log_factor: setting(&live.lfu_log_factor),
        decay_time: setting(&live.lfu_decay_time),
    }
}

/// Put the live settings' [`access_clock`] in force in every keyspace (at start-up, and when
/// CONFIG SET changes `maxmemory-policy`, `lfu-log-factor` or `lfu-decay-time`). Keys keep their
/// access data, reinterpreted, as Redis' do when the policy switches between LRU and LFU.
pub fn apply_access_clock(shared: &Shared) -> Result<(), String> {
    shared.store.set_access_clock(access_clock(&shared.live));
    Ok(())
}

/// The server's memory as `maxmemory` is checked against it: the allocator's count (the
/// store's own figure where the allocator does not count, as in library tests).
fn server_used(shared: &Shared) -> usize {
    match crate::alloc::allocated_bytes() {
        0 => shared.store.used_bytes(),
        counted => counted,
    }
}

/// Whether `maxmemory` may evict from keyspace `k`: an `lru` keyspace; and without
/// `[[tenants]]`, where databases have no eviction setting, a database of degree `none` (a cache
/// by its durability: memcached's semantics), never a logged one.
fn maxmemory_may_evict(shared: &Shared, k: usize) -> bool {
    let tenancy = &shared.tenancy;
    tenancy.keyspaces[k].evict
        || !tenancy.multi_tenant
            && tenancy.keyspaces[k].tenant.is_some()
            && shared.persist.degrees.get(k) == Some(&gradus_log::Durability::None)
}

/// Whether `maxmemory` is set and the server's memory is over it, on a primary (a replica keeps
/// what its primary sends, as Redis' `replica-ignore-maxmemory`). Before every command (see
/// `dispatch::evict_before_command`): one relaxed load when `maxmemory` is 0.
pub(crate) fn over_maxmemory(shared: &Shared) -> bool {
    let max = shared.live.maxmemory.load(Ordering::Relaxed);
    max != 0 && !shared.repl.is_replica() && server_used(shared) > max
}

/// Make room under `maxmemory` (see the module docs).
pub(crate) fn make_room_in_server(
    shared: &Shared,
    client: &mut ClientState,
    now_ms: u64,
) -> Result<(), WriteError> {
    let max = shared.live.maxmemory.load(Ordering::Relaxed);
    if max == 0 || server_used(shared) <= max {
        return Ok(());
    }
    // Connections past `maxmemory-clients` go before any key, as in Redis (which evicts a
    // client as soon as its memory grows past the limit): what they hold is given back as they
    // close, so no key is evicted for it.
    if evict_clients(shared) > 0 {
        return Ok(());
    }
    let Some(policy) = eviction_policy(shared.live.maxmemory_policy.load(Ordering::Relaxed)) else {
        return Err(WriteError::MaxMemory);
    };
    let tenancy = &shared.tenancy;
    // Nothing may be evicted (only logged keyspaces hold keys): refused without opening a
    // write transaction, since a server kept over `maxmemory` by them asks before every command.
    if !(0..tenancy.keyspaces.len()).any(|k| maxmemory_may_evict(shared, k) && used(shared, k) > 0)
    {
        return Err(WriteError::MaxMemory);
    }
    let mut txn = WriteTxn::begin(shared, client, Scope::Evictions(None), now_ms, false)?;
    let result = txn.apply(|client| {
        let mut count = 0;
        while server_used(shared) > max && count < MAX_EVICTIONS_PER_COMMAND {
            let mut candidates: Vec<usize> = (0..tenancy.keyspaces.len())
                .filter(|&k| maxmemory_may_evict(shared, k) && used(shared, k) > 0)
                .collect();
            candidates.sort_by_key(|&k| std::cmp::Reverse(used(shared, k)));
            let victim = candidates.into_iter().find_map(|k| {
                let key =
                    shared.store.keyspaces()[k].evict_one_by(policy, samples(shared), now_ms)?;
                Some((k, key))
            });
            let Some((db, key)) = victim else {
                return Err(WriteError::MaxMemory);
            };
            count += 1;
            announce_eviction(shared, db, &key);
            if shared.persist.db_logged(db) {
                log_effect(client, db, vec![Bytes::from_static(b"DEL"), key]);
            } else {
                stream_effect(client, db, vec![Bytes::from_static(b"DEL"), key]);
            }
        }
        Ok(())
    });
    txn.commit()?;
    result
}

/// An evicted key, as Redis' `performEvictions` announces it: the invalidation for the
/// connections that may cache it, then the `evicted` keyspace event.
fn announce_eviction(shared: &Shared, db: usize, key: &Bytes) {
    if shared.tracking.is_active() {
        if let Some(tenant) = shared.tenancy.tenant_of(db) {
            let own = shared
                .tracking
                .invalidate(0, tenant, std::slice::from_ref(key));
            debug_assert!(own.is_empty(), "no connection has id 0");
        }
    }
    crate::notify::emit(shared, crate::notify::EVICTED, "evicted", db, key);
}

/// Keys sampled per eviction in each shard looked at (`maxmemory-samples`).
fn samples(shared: &Shared) -> usize {
    shared.live.maxmemory_samples.load(Ordering::Relaxed).max(1) as usize
}
/// Evictions one command may perform before it proceeds anyway (bounds its latency).
const MAX_EVICTIONS_PER_COMMAND: usize = 10_000;

fn used(shared: &Shared, g: usize) -> usize {
    shared.store.keyspaces()[g].used_bytes()
}

/// What is over its limit, if anything.
fn over(shared: &Shared, g: usize, tenant: usize) -> (bool, bool) {
    let t = &shared.tenancy;
    let def = &t.keyspaces[g];
    let ks_over = def.memory_limit > 0 && used(shared, g) > def.memory_limit;
    let tdef = &t.tenants[tenant];
    let tenant_over = tdef.memory_limit > 0
        && tdef
            .keyspaces
            .iter()
            .map(|&k| used(shared, k))
            .sum::<usize>()
            > tdef.memory_limit;
    (ks_over, tenant_over)
}

/// Make room for a write into keyspace `g`, or say why there is none. Called by the write path
/// (`persist::write::WriteTxn::begin`) before a write that may grow memory; the evictions are a
/// write transaction of their own, logged (as DELs, from logged keyspaces) before the write's.
pub fn make_room(
    shared: &Shared,
    client: &mut ClientState,
    g: usize,
    now_ms: u64,
) -> Result<(), WriteError> {
    make_room_in_tenant(shared, client, g, now_ms)?;
    make_room_in_server(shared, client, now_ms)
}

/// Make room under keyspace `g`'s and its tenant's limits (see the module docs).
fn make_room_in_tenant(
    shared: &Shared,
    client: &mut ClientState,
    g: usize,
    now_ms: u64,
) -> Result<(), WriteError> {
    let tenancy = &shared.tenancy;
    let Some(tenant) = tenancy.tenant_of(g) else {
        return Ok(());
    };
    if !tenancy.tenants[tenant].limited || over(shared, g, tenant) == (false, false) {
        return Ok(());
    }
    // Evict under the gate (a snapshot sees an eviction and its DEL record together or neither)
    // and, when an eviction may be logged, in log order. A cache whose evicting keyspaces are
    // all `none` (the usual case) does not touch the global write-order lock.
    let mut txn = WriteTxn::begin(
        shared,
        client,
        Scope::Evictions(Some(tenant)),
        now_ms,
        false,
    )?;
    let result = txn.apply(|client| {
        let mut count = 0;
        loop {
            let (ks_over, tenant_over) = over(shared, g, tenant);
            if !ks_over && !tenant_over || count >= MAX_EVICTIONS_PER_COMMAND {
                return Ok(());
            }
            let victim = if ks_over {
                tenancy.keyspaces[g].evict.then_some(g)
            } else {
                tenancy.tenants[tenant]
                    .keyspaces
                    .iter()
                    .copied()
                    .filter(|&k| tenancy.keyspaces[k].evict && used(shared, k) > 0)
                    .max_by_key(|&k| (k == g, used(shared, k)))
            };
            let Some((db, key)) = victim.and_then(|v| {
                Some((
                    v,
                    shared.store.keyspaces()[v].evict_one(samples(shared), now_ms)?,
                ))
            }) else {
                return Err(oom(shared, g, tenant, ks_over));
            };
            count += 1;
            announce_eviction(shared, db, &key);
            if shared.persist.db_logged(db) {
                log_effect(client, db, vec![Bytes::from_static(b"DEL"), key]);
            } else {
                stream_effect(client, db, vec![Bytes::from_static(b"DEL"), key]);
            }
        }
    });
    txn.commit()?;
    result
}

fn oom(shared: &Shared, g: usize, tenant: usize, keyspace_limit: bool) -> WriteError {
    let t = &shared.tenancy;
    let what = if keyspace_limit {
        format!("keyspace {}", t.keyspaces[g].full_name)
    } else {
        format!("tenant {}", t.tenants[tenant].name)
    };
    WriteError::Oom { what }
}

/// Redis' floor for `maxmemory-clients`, so a small value cannot cut every client off.
const CLIENT_LIMIT_FLOOR: usize = 128 * 1024;

/// A `maxmemory-clients` value as Redis keeps it: bytes (`64mb`), or a percentage of maxmemory
/// (`5%`) as a negative number; Redis' errors otherwise.
pub fn parse_client_limit(text: &str) -> Result<i64, String> {
    let text = text.trim();
    if let Some(percent) = text.strip_suffix('%') {
        let n: i64 = percent
            .parse()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or("argument must be a memory or percent value")?;
        if n > 100 {
            return Err("percentage argument must be less or equal to 100".into());
        }
        return Ok(-n);
    }
    crate::tenancy::parse_size(text)
        .and_then(|n| i64::try_from(n).ok())
        .ok_or_else(|| "argument must be a memory or percent value".into())
}

/// As CONFIG GET shows a `maxmemory-clients` value kept by [`parse_client_limit`].
pub fn client_limit_text(kept: i64) -> String {
    if kept < 0 {
        format!("{}%", -kept)
    } else {
        kept.to_string()
    }
}

/// The canonical form of a `maxmemory-clients` value, or Redis' error (the settings table's
/// check).
pub fn normalize_client_limit(text: &str) -> Result<String, String> {
    parse_client_limit(text).map(client_limit_text)
}

/// The connections' memory at which clients are evicted, in bytes; 0: none (no limit, or a
/// percentage while maxmemory is 0), as Redis' `getClientEvictionLimit`.
pub fn client_eviction_limit(live: &crate::state::LiveSettings) -> usize {
    let limit = match live.maxmemory_clients.load(Ordering::Relaxed) {
        0 => return 0,
        percent if percent < 0 => {
            let maxmemory = live.maxmemory.load(Ordering::Relaxed);
            if maxmemory == 0 {
                return 0;
            }
            (maxmemory as f64 * (-percent) as f64 / 100.0) as usize
        }
        bytes => usize::try_from(bytes).unwrap_or(usize::MAX),
    };
    limit.max(CLIENT_LIMIT_FLOOR)
}

/// Close the largest evictable connections while the memory of all clients (normal and
/// pub/sub ones: not replicas nor a primary's link) adds up to the limit or more, as Redis'
/// `evictClients`; CLIENT NO-EVICT ones count but are never closed. Returns how many were
/// closed.
pub fn evict_clients(shared: &Shared) -> usize {
    let limit = client_eviction_limit(&shared.live);
    if limit == 0 {
        return 0;
    }
    let counted: Vec<(usize, std::sync::Arc<crate::client::ClientHandle>)> = shared
        .clients
        .all()
        .into_iter()
        .filter(|c| c.role() == crate::client::ClientRole::Normal && !c.is_killed())
        .map(|c| (c.memory(), c))
        .collect();
    let mut total: usize = counted.iter().map(|(m, _)| m).sum();
    if total < limit {
        return 0;
    }
    let mut clients: Vec<_> = counted
        .into_iter()
        .filter(|(_, c)| !c.no_evict.load(Ordering::Relaxed))
        .collect();
    clients.sort_unstable_by_key(|(m, _)| std::cmp::Reverse(*m));
    let mut evicted = 0;
    for (memory, client) in clients {
        if total < limit {
            break;
        }
        tracing::info!("Evicting client: {}", client.describe());
        client.kill();
        shared.stats.evicted_clients.fetch_add(1, Ordering::Relaxed);
        total -= memory;
        evicted += 1;
    }
    if total >= limit {
        tracing::warn!("Over client maxmemory after evicting all evictable clients");
    }
    evicted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maxmemory_clients_takes_bytes_or_a_percentage_as_redis_keeps_them() {
        assert_eq!(parse_client_limit("0"), Ok(0));
        assert_eq!(parse_client_limit("2mb"), Ok(2 * 1024 * 1024));
        assert_eq!(parse_client_limit("5%"), Ok(-5));
        assert_eq!(parse_client_limit("100%"), Ok(-100));
        assert_eq!(
            parse_client_limit("101%"),
            Err("percentage argument must be less or equal to 100".into())
        );
        for bad in ["abc", "-1", "-5%", "%", "5 %"] {
            assert_eq!(
                parse_client_limit(bad),
                Err("argument must be a memory or percent value".into()),
                "{bad}"
            );
        }
        assert_eq!(client_limit_text(-5), "5%");
        assert_eq!(normalize_client_limit("0%"), Ok("0".into()));
        assert_eq!(normalize_client_limit("1k"), Ok("1024".into()));
    }
}
