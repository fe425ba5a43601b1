//! memcached statistics: the counters `stats` reports and the `stats` family of replies
//! (`stats`, `stats settings`, `stats items`, `stats slabs`, `stats cachedump`, `stats reset`).
//!
//! Counters are kept per connection in plain integers and added to the shared atomics once per
//! batch of requests (as the RESP side does), so the hot path never writes a shared cache line.
//!
//! May import: `state`.

use crate::state::Shared;
use bytes::{BufMut, Bytes, BytesMut};
use std::sync::atomic::{AtomicU64, Ordering};

/// One counter per memcached statistic that Gradus tracks, in `stats` output order.
#[derive(Debug, Clone, Copy)]
pub enum Counter {
    CmdGet,
    CmdSet,
    CmdFlush,
    CmdTouch,
    GetHits,
    GetMisses,
    GetExpired,
    DeleteMisses,
    DeleteHits,
    IncrMisses,
    IncrHits,
    DecrMisses,
    DecrHits,
    CasMisses,
    CasHits,
    CasBadval,
    TouchHits,
    TouchMisses,
    StoreTooLarge,
}

const NAMES: [&str; 19] = [
    "cmd_get",
    "cmd_set",
    "cmd_flush",
    "cmd_touch",
    "get_hits",
    "get_misses",
    "get_expired",
    "delete_misses",
    "delete_hits",
    "incr_misses",
    "incr_hits",
    "decr_misses",
    "decr_hits",
    "cas_misses",
    "cas_hits",
    "cas_badval",
    "touch_hits",
    "touch_misses",
    "store_too_large",
];

/// A connection's unflushed counts.
#[derive(Debug, Default)]
pub struct LocalCounters([u64; NAMES.len()]);

impl LocalCounters {
    pub fn bump(&mut self, c: Counter) {
        self.0[c as usize] += 1;
    }
}

/// Server-wide memcached statistics.
#[derive(Debug, Default)]
pub struct McShared {
    counters: [AtomicU64; NAMES.len()],
    pub curr_connections: AtomicU64,
    pub total_connections: AtomicU64,
    /// Delayed `flush_all`s: global keyspace → Unix ms at which it is due (one per keyspace, as
    /// memcached keeps one per server); see `text`. Taken briefly, never across an `.await`.
    pub flush_due_ms: parking_lot::Mutex<std::collections::BTreeMap<usize, u64>>,
}

impl McShared {
    /// Add a connection's counts and zero them.
    pub fn absorb(&self, local: &mut LocalCounters) {
        for (shared, n) in self.counters.iter().zip(local.0.iter_mut()) {
            if *n > 0 {
                shared.fetch_add(*n, Ordering::Relaxed);
                *n = 0;
            }
        }
    }

    /// Every counter by its `stats` name (the metrics endpoint reads them).
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        NAMES
            .iter()
            .zip(&self.counters)
            .map(|(name, c)| (*name, c.load(Ordering::Relaxed)))
            .collect()
    }

    fn reset(&self) {
        for c in &self.counters {
            c.store(0, Ordering::Relaxed);
        }
    }
}

fn stat(out: &mut BytesMut, name: &str, value: impl std::fmt::Display) {
    out.put_slice(format!("STAT {name} {value}\r\n").as_bytes());
}

/// Write the reply to `stats <args>` for the keyspace `db`. Returns false for an unknown
/// sub-command (the caller answers `ERROR`, as memcached does).
pub fn write_stats(
    shared: &Shared,
    db: usize,
    args: &[Bytes],
    now_ms: u64,
    out: &mut BytesMut,
) -> bool {
    let mc = &shared.memcache;
    let ks = shared
        .store
        .db(db)
        .expect("memcached-db validated at start");
    match args.first().map(|a| a.as_ref()) {
        None => {
            let (items, _, bytes) = ks.stats();
            let uptime = shared.started.elapsed().as_secs();
            stat(out, "pid", std::process::id());
            stat(out, "uptime", uptime);
            stat(out, "time", now_ms / 1000);
            stat(out, "version", super::MEMCACHED_COMPAT_VERSION);
            stat(out, "gradus_version", crate::GRADUS_VERSION);
            stat(out, "pointer_size", usize::BITS);
            stat(
                out,
                "curr_connections",
                mc.curr_connections.load(Ordering::Relaxed),
            );
            stat(
                out,
                "total_connections",
                mc.total_connections.load(Ordering::Relaxed),
            );
            for (i, name) in NAMES.iter().enumerate() {
                stat(out, name, mc.counters[i].load(Ordering::Relaxed));
            }
            stat(out, "curr_items", items);
            stat(out, "total_items", items);
            stat(out, "bytes", bytes);
            stat(out, "limit_maxbytes", 0);
            stat(out, "threads", shared.config.effective_threads());
            // Keys the keyspace's `memory-limit` evicted (an `lru` keyspace; 0 otherwise).
            stat(out, "evictions", ks.evictions());
            stat(out, "gradus_db", db);
        }
        Some(b"settings") => {
            stat(
                out,
                "maxconns",
                shared.live.maxclients.load(Ordering::Relaxed),
            );
            stat(out, "tcpport", shared.config.memcached_port);
            stat(out, "item_size_max", shared.config.memcached_item_size_max);
            stat(out, "cas_enabled", "yes");
            let evicts = shared.tenancy.keyspaces.get(db).is_some_and(|k| k.evict);
            stat(out, "evictions", if evicts { "on" } else { "off" });
            stat(out, "binding_protocol", "ascii");
        }
        Some(b"items") => {
            let (items, _, _) = ks.stats();
            if items > 0 {
                stat(out, "items:1:number", items);
                stat(out, "items:1:age", 0);
                stat(out, "items:1:evicted", 0);
            }
        }
        Some(b"slabs") => {
            let (items, _, bytes) = ks.stats();
            if items > 0 {
                stat(out, "1:chunk_size", bytes / items.max(1));
                stat(out, "1:used_chunks", items);
            }
            stat(out, "active_slabs", usize::from(items > 0));
            stat(out, "total_malloced", bytes);
        }
        Some(b"cachedump") => {
            // memcached dumps one slab class; Gradus has one class (1) holding every item.
            // libmemcached's memcdump asks for classes 0..200 with limit 0 (= all).
            let class = args
                .get(1)
                .and_then(|a| std::str::from_utf8(a).ok()?.parse::<u32>().ok());
            let limit = args
                .get(2)
                .and_then(|a| std::str::from_utf8(a).ok()?.parse::<usize>().ok())
                .unwrap_or(0);
            let Some(class) = class else {
                out.put_slice(b"CLIENT_ERROR bad command line format\r\n");
                return true;
            };
            if class >= 64 {
                // memcached's MAX_NUMBER_OF_SLAB_CLASSES.
                out.put_slice(b"CLIENT_ERROR Illegal slab id\r\n");
                return true;
            }
            if class == 1 {
                let mut written = 0;
                ks.for_each_shard(|shard| {
                    for (key, entry) in shard.iter_live(now_ms) {
                        if limit != 0 && written >= limit {
                            return;
                        }
                        // The value's length, as memcached reports an item's data.
                        let size = match &entry.value {
                            gradus_store::Value::Str(bytes) => bytes.len(),
                            value => value.mem_size(),
                        };
                        let exp = entry.expires_at().map_or(0, |t| t / 1000);
                        out.put_slice(b"ITEM ");
                        out.put_slice(key);
                        out.put_slice(format!(" [{size} b; {exp} s]\r\n").as_bytes());
                        written += 1;
                    }
                });
            }
        }
        Some(b"reset") => {
            mc.reset();
            out.put_slice(b"RESET\r\n");
            return true;
        }
        Some(_) => return false,
    }
    out.put_slice(b"END\r\n");
    true
}
