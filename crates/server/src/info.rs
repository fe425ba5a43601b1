//! The INFO text, in Redis' `# Section` / `field:value` format.
//!
//! Field names follow Redis where a client or dashboard may read them (Moodle checks
//! `redis_version`; monitoring reads `used_memory`, `connected_clients`, `keyspace_hits`, `dbN:`).
//! Gradus-specific fields are prefixed `gradus_`.
//!
//! May import: `state` (and what it holds), `command` (row names), `observe` (command
//! statistics); read-only: it never changes state.

use crate::state::Shared;
use std::fmt::Write;
use std::sync::atomic::Ordering;

const DEFAULT_SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "modules",
    "errorstats",
    "cluster",
    "keyspace",
    "tenants",
];

/// Sections `INFO all` and `INFO everything` add to the default ones (as Redis: they are
/// long).
const EXTRA_SECTIONS: &[&str] = &["commandstats", "latencystats"];
// (`errorstats` is a default section in Redis 7.2: in DEFAULT_SECTIONS after `cpu`.)

/// Sections a user without the `admin` right may read: server-wide figures are not theirs.
const TENANT_SECTIONS: &[&str] = &["server", "modules", "cluster", "keyspace", "tenants"];

/// Who is asking: tenant-scoped sections show `tenant` only unless `admin`.
pub struct Viewer {
    pub tenant: usize,
    pub admin: bool,
}

/// Render the requested sections (`default`, `all`, `everything` or section names).
pub fn render(shared: &Shared, viewer: &Viewer, requested: &[String]) -> String {
    let every = DEFAULT_SECTIONS.iter().chain(EXTRA_SECTIONS).copied();
    let wanted: Vec<&str> = if requested.is_empty() || requested.iter().any(|s| s == "default") {
        DEFAULT_SECTIONS.to_vec()
    } else if requested.iter().any(|s| s == "all" || s == "everything") {
        every.collect()
    } else {
        every.filter(|s| requested.iter().any(|r| r == s)).collect()
    };
    let wanted: Vec<&str> = wanted
        .into_iter()
        .filter(|s| viewer.admin || TENANT_SECTIONS.contains(s))
        .collect();
    let mut out = String::new();
    for (i, section) in wanted.iter().enumerate() {
        if i > 0 {
            out.push_str("\r\n");
        }
        match *section {
            "server" => server(shared, &mut out),
            "clients" => clients(shared, &mut out),
            "memory" => memory(shared, &mut out),
            "persistence" => persistence(shared, &mut out),
            "stats" => stats(shared, &mut out),
            "replication" => replication(shared, &mut out),
            "cpu" => cpu(&mut out),
            "errorstats" => errorstats(shared, &mut out),
            // No modules, no cluster mode; tools and client test suites read these (redis-py's
            // reads `cluster_enabled` from a plain INFO).
            "modules" => out.push_str("# Modules\r\n"),
            "cluster" => out.push_str("# Cluster\r\ncluster_enabled:0\r\n"),
            "keyspace" => keyspace(shared, viewer, &mut out),
            "tenants" => tenants(shared, viewer, &mut out),
            "commandstats" => commandstats(shared, &mut out),
            "latencystats" => latencystats(shared, &mut out),
            _ => {}
        }
    }
    out
}

macro_rules! line {
    ($out:expr, $($arg:tt)*) => {{ let _ = write!($out, $($arg)*); $out.push_str("\r\n"); }};
}

fn server(shared: &Shared, out: &mut String) {
    let uptime = shared.started.elapsed().as_secs();
    line!(out, "# Server");
    line!(out, "redis_version:{}", crate::REDIS_COMPAT_VERSION);
    line!(out, "gradus_version:{}", crate::GRADUS_VERSION);
    line!(out, "redis_mode:standalone");
    line!(
        out,
        "os:{} {}",
        std::env::consts::OS,
        std::env::consts::ARCH
    );
    line!(out, "arch_bits:{}", usize::BITS);
    line!(out, "multiplexing_api:tokio");
    line!(out, "process_id:{}", std::process::id());
    line!(out, "run_id:{}", shared.run_id);
    line!(out, "tcp_port:{}", shared.port.load(Ordering::Relaxed));
    line!(out, "server_time_usec:{}", gradus_store::now_ms() * 1000);
    line!(out, "uptime_in_seconds:{uptime}");
    line!(out, "uptime_in_days:{}", uptime / 86400);
    line!(out, "hz:{}", shared.live.hz.load(Ordering::Relaxed));
    line!(
        out,
        "executable:{}",
        std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    );
    line!(
        out,
        "config_file:{}",
        shared
            .config_file
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    );
}

fn clients(shared: &Shared, out: &mut String) {
    line!(out, "# Clients");
    // As Redis: replicas' links are not counted here (INFO replication `connected_slaves`).
    let replicas = shared.repl.replicas().len();
    line!(
        out,
        "connected_clients:{}",
        shared.clients.len().saturating_sub(replicas)
    );
    line!(out, "cluster_connections:0");
    line!(
        out,
        "maxclients:{}",
        shared.live.maxclients.load(Ordering::Relaxed)
    );
    // The largest buffers of any connection now (Redis keeps the peak of the last seconds).
    let (input, output) = shared
        .clients
        .all()
        .iter()
        .map(|c| c.buffer_bytes())
        .fold((0, 0), |(i, o), (ci, co)| (i.max(ci), o.max(co)));
    line!(out, "client_recent_max_input_buffer:{input}");
    line!(out, "client_recent_max_output_buffer:{output}");
    line!(out, "blocked_clients:{}", shared.blocked.count());
    line!(out, "tracking_clients:{}", shared.tracking.stats().clients);
    let (keys, on_nokey, timed) = shared.blocked.key_counts();
    line!(out, "clients_in_timeout_table:{timed}");
    line!(out, "total_blocking_keys:{keys}");
    line!(out, "total_blocking_keys_on_nokey:{on_nokey}");
}

/// Resident set size from /proc (0 where unavailable).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

fn human(bytes: u64) -> String {
    const UNITS: &[&str] = &["B", "K", "M", "G", "T"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes}B")
    } else {
        format!("{v:.2}{}", UNITS[u])
    }
}

/// The process's memory as INFO and MEMORY report it.
#[derive(Debug, Clone, Copy)]
pub struct MemoryFigures {
    /// Bytes allocated now (the allocator's count; the store's estimate where the allocator
    /// does not count, as in library tests).
    pub allocated: usize,
    /// The most `allocated` has been when read.
    pub peak_allocated: usize,
    /// `allocated` when the server started.
    pub startup_allocated: usize,
    /// What the keyspaces account for their keys and values.
    pub dataset: usize,
    /// Resident set size.
    pub rss: usize,
    pub process: crate::alloc::ProcessMemory,
}

impl MemoryFigures {
    pub fn now(shared: &Shared) -> MemoryFigures {
        let dataset = shared.store.used_bytes();
        let counted = crate::alloc::allocated_bytes();
        let allocated = if counted == 0 { dataset } else { counted };
        MemoryFigures {
            allocated,
            peak_allocated: crate::alloc::peak_allocated_bytes().max(allocated),
            startup_allocated: crate::alloc::startup_allocated_bytes(),
            dataset,
            rss: rss_bytes() as usize,
            process: crate::alloc::process_memory(),
        }
    }

    /// Resident set over allocated bytes (Redis' `mem_fragmentation_ratio`).
    pub fn fragmentation_ratio(&self) -> f64 {
        if self.allocated == 0 {
            0.0
        } else {
            self.rss as f64 / self.allocated as f64
        }
    }
}

fn memory(shared: &Shared, out: &mut String) {
    let m = MemoryFigures::now(shared);
    let (used, rss) = (m.allocated as u64, m.rss as u64);
    line!(out, "# Memory");
    line!(out, "used_memory:{used}");
    line!(out, "used_memory_human:{}", human(used));
    line!(out, "used_memory_rss:{rss}");
    line!(out, "used_memory_rss_human:{}", human(rss));
    line!(out, "used_memory_peak:{}", m.peak_allocated);
    line!(
        out,
        "used_memory_peak_human:{}",
        human(m.peak_allocated as u64)
    );
    line!(out, "used_memory_startup:{}", m.startup_allocated);
    line!(out, "used_memory_dataset:{}", m.dataset);
    let (scripts, script_bytes) = crate::command::scripting::cache_figures();
    let libraries = shared.functions.all();
    line!(out, "used_memory_scripts_eval:{script_bytes}");
    line!(out, "number_of_cached_scripts:{scripts}");
    line!(
        out,
        "number_of_functions:{}",
        libraries.iter().map(|l| l.function_count()).sum::<usize>()
    );
    line!(
        out,
        "number_of_libraries:{}",
        libraries.iter().map(|l| l.by_name.len()).sum::<usize>()
    );
    line!(out, "allocator_allocated:{used}");
    line!(out, "allocator_active:{}", m.process.commit);
    line!(out, "allocator_resident:{rss}");
    line!(
        out,
        "mem_fragmentation_ratio:{:.2}",
        m.fragmentation_ratio()
    );
    line!(out, "mem_fragmentation_bytes:{}", rss as i64 - used as i64);
    // Redis leaves replication and AOF buffers out of what `maxmemory` is checked against;
    // here `maxmemory` is checked against all of `used_memory` (see `quota`).
    line!(out, "mem_not_counted_for_evict:0");
    line!(out, "mem_allocator:mimalloc");
    line!(
        out,
        "lazyfree_pending_objects:{}",
        crate::command::server::LAZYFREE_PENDING.load(Ordering::Relaxed)
    );
    line!(
        out,
        "lazyfreed_objects:{}",
        crate::command::server::LAZYFREED.load(Ordering::Relaxed)
    );
    let max = shared.live.maxmemory.load(Ordering::Relaxed) as u64;
    let policy = shared.live.maxmemory_policy.load(Ordering::Relaxed);
    line!(out, "maxmemory:{max}");
    line!(out, "maxmemory_human:{}", human(max));
    line!(
        out,
        "maxmemory_policy:{}",
        crate::quota::POLICIES[usize::from(policy)]
    );
}

fn persistence(shared: &Shared, out: &mut String) {
    let p = &shared.persist;
    line!(out, "# Persistence");
    line!(out, "loading:0");
    line!(out, "async_loading:0");
    line!(out, "aof_enabled:{}", u8::from(p.log.get().is_some()));
    let in_progress = u8::from(p.snapshot_pending());
    let status = p.last_snapshot_status.lock().clone();
    let ok_or_err = if status == "ok" { "ok" } else { "err" };
    // Seconds, -1 for none (as Redis): the last snapshot's duration and the running one's so far.
    let last_secs = match p.last_snapshot_millis.load(Ordering::Relaxed) {
        u64::MAX => -1,
        ms => (ms / 1000) as i64,
    };
    let current_secs = match p.snapshot_started_ms.load(Ordering::Relaxed) {
        0 => -1,
        since => (gradus_store::now_ms().saturating_sub(since) / 1000) as i64,
    };
    let saves = p.snapshots_written.load(Ordering::Relaxed);
    let last_save = p.last_save_unix.load(Ordering::Relaxed);
    // Writes logged since the newest snapshot: what a restart would replay.
    let stats = p.log.get().map(|log| log.stats());
    let changes = stats
        .as_ref()
        .map_or(0, |s| s.last_lsn.saturating_sub(s.snapshot_lsn));
    line!(out, "rdb_changes_since_last_save:{changes}");
    line!(out, "rdb_bgsave_in_progress:{in_progress}");
    line!(out, "rdb_last_save_time:{last_save}");
    line!(out, "rdb_last_bgsave_status:{ok_or_err}");
    line!(out, "rdb_last_bgsave_time_sec:{last_secs}");
    line!(out, "rdb_current_bgsave_time_sec:{current_secs}");
    line!(out, "rdb_saves:{saves}");
    // BGREWRITEAOF takes a snapshot too (see the command): the same progress, status and times.
    line!(out, "aof_rewrite_in_progress:{in_progress}");
    line!(out, "aof_last_rewrite_time_sec:{last_secs}");
    line!(out, "aof_current_rewrite_time_sec:{current_secs}");
    line!(out, "aof_last_bgrewrite_status:{ok_or_err}");
    line!(out, "gradus_last_snapshot_status:{status}");
    line!(
        out,
        "gradus_snapshot_failures:{}",
        p.snapshot_failures.load(Ordering::Relaxed)
    );
    line!(
        out,
        "gradus_last_snapshot_arm_usec:{}",
        p.last_snapshot_arm_micros.load(Ordering::Relaxed)
    );
    line!(
        out,
        "gradus_last_snapshot_max_shard_copy_usec:{}",
        p.last_snapshot_max_copy_micros.load(Ordering::Relaxed)
    );
    line!(
        out,
        "gradus_last_snapshot_max_shard_hold_usec:{}",
        p.last_snapshot_max_hold_micros.load(Ordering::Relaxed)
    );
    line!(
        out,
        "gradus_durability_default:{}",
        shared.config.durability.default
    );
    let degrees: Vec<String> = p
        .degrees
        .iter()
        .enumerate()
        .map(|(i, d)| format!("db{i}={d}"))
        .collect();
    line!(out, "gradus_durability_databases:{}", degrees.join(","));
    line!(
        out,
        "gradus_lazy_flush_ms:{}",
        shared.config.durability.lazy_flush_ms
    );
    line!(
        out,
        "gradus_background_fsync_ms:{}",
        shared.config.durability.background_fsync_ms
    );
    if let (Some(log), Some(s)) = (p.log.get(), stats) {
        line!(out, "gradus_log_last_lsn:{}", s.last_lsn);
        line!(out, "gradus_log_written_lsn:{}", s.written_lsn);
        line!(out, "gradus_log_durable_lsn:{}", s.durable_lsn);
        line!(
            out,
            "gradus_log_durable_lag:{}",
            s.last_lsn.saturating_sub(s.durable_lsn)
        );
        line!(out, "gradus_log_fsyncs:{}", s.fsyncs);
        line!(out, "gradus_log_last_fsync_usec:{}", s.last_fsync_micros);
        line!(
            out,
            "gradus_log_mean_fsync_usec:{:.0}",
            s.mean_fsync_micros()
        );
        line!(out, "gradus_log_max_fsync_usec:{}", s.max_fsync_micros);
        line!(out, "gradus_log_mean_group_commit:{:.2}", s.mean_batch());
        let hist: Vec<String> = s
            .batch_histogram
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, n)| format!("{}={n}", 1u64 << i))
            .collect();
        line!(out, "gradus_log_group_commit_histogram:{}", hist.join(","));
        line!(out, "gradus_log_bytes_written:{}", s.bytes_written);
        line!(
            out,
            "gradus_log_late_background_writes:{}",
            s.late_background
        );
        line!(out, "gradus_log_segments:{}", s.segments);
        line!(
            out,
            "gradus_log_direct_io:{}",
            if s.direct_io { "yes" } else { "no" }
        );
        let (log_bytes, snapshot_bytes) = data_dir_sizes(&shared.config.dir);
        line!(out, "gradus_log_size_bytes:{log_bytes}");
        line!(out, "aof_current_size:{log_bytes}");
        line!(out, "gradus_snapshot_size_bytes:{snapshot_bytes}");
        line!(
            out,
            "gradus_snapshot_compression:{}",
            if shared.config.durability.snapshot_compression {
                "yes"
            } else {
                "no"
            }
        );
        line!(out, "gradus_snapshot_lsn:{}", s.snapshot_lsn);
        line!(
            out,
            "gradus_log_poisoned:{}",
            s.poisoned.as_deref().unwrap_or("no")
        );
        let stalled = log.stalled();
        line!(
            out,
            "gradus_log_stalled:{}",
            stalled.as_deref().unwrap_or("no")
        );
        line!(out, "gradus_log_disk_full_retries:{}", s.disk_full_retries);
        // Redis' field for "the append-only file could not be written".
        line!(
            out,
            "aof_last_write_status:{}",
            if s.poisoned.is_some() || stalled.is_some() {
                "err"
            } else {
                "ok"
            }
        );
    }
    let r = p.recovery.lock().clone();
    line!(out, "gradus_recovery_ms:{}", r.millis);
    line!(out, "gradus_recovery_keys:{}", r.keys);
    line!(out, "gradus_recovery_snapshot_items:{}", r.snapshot_items);
    line!(out, "gradus_recovery_records:{}", r.records_replayed);
    line!(out, "gradus_recovery_torn_tail_bytes:{}", r.torn_tail_bytes);
    line!(
        out,
        "gradus_recovery_repaired:{}",
        r.repaired.as_deref().unwrap_or("no")
    );
}

/// Bytes on disk in log segments and in snapshots (directory listing; INFO is not a hot path).
pub(crate) fn data_dir_sizes(dir: &std::path::Path) -> (u64, u64) {
    let mut sizes = (0, 0);
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let len = entry.metadata().map_or(0, |m| m.len());
            if name.starts_with("wal-") && name.ends_with(".log") {
                sizes.0 += len;
            } else if name.starts_with("snap-") && name.ends_with(".snap") {
                sizes.1 += len;
            }
        }
    }
    sizes
}

fn stats(shared: &Shared, out: &mut String) {
    let s = &shared.stats;
    let expired: u64 = shared
        .store
        .keyspaces()
        .iter()
        .map(|k| k.expired_count())
        .sum();
    line!(out, "# Stats");
    line!(
        out,
        "total_connections_received:{}",
        s.connections_received.load(Ordering::Relaxed)
    );
    line!(
        out,
        "total_commands_processed:{}",
        s.commands_processed.load(Ordering::Relaxed)
    );
    line!(
        out,
        "cross_protocol_attacks:{}",
        s.cross_protocol_attacks.load(Ordering::Relaxed)
    );
    line!(
        out,
        "total_net_input_bytes:{}",
        s.net_input_bytes.load(Ordering::Relaxed)
    );
    line!(
        out,
        "total_net_output_bytes:{}",
        s.net_output_bytes.load(Ordering::Relaxed)
    );
    line!(
        out,
        "rejected_connections:{}",
        s.rejected_connections.load(Ordering::Relaxed)
    );
    let repl = &shared.repl;
    line!(out, "sync_full:{}", repl.sync_full.load(Ordering::Relaxed));
    line!(
        out,
        "sync_partial_ok:{}",
        repl.sync_partial_ok.load(Ordering::Relaxed)
    );
    line!(
        out,
        "sync_partial_err:{}",
        repl.sync_partial_err.load(Ordering::Relaxed)
    );
    line!(
        out,
        "gradus_sync_partial_bytes:{}",
        repl.sync_partial_bytes.load(Ordering::Relaxed)
    );
    line!(out, "expired_keys:{expired}");
    let evicted: u64 = shared.store.keyspaces().iter().map(|k| k.evictions()).sum();
    line!(out, "evicted_keys:{evicted}");
    line!(
        out,
        "evicted_clients:{}",
        s.evicted_clients.load(Ordering::Relaxed)
    );
    line!(
        out,
        "total_auth_failures:{}",
        shared.auth_throttle.total_failures.load(Ordering::Relaxed)
    );
    line!(
        out,
        "keyspace_hits:{}",
        s.keyspace_hits.load(Ordering::Relaxed)
    );
    line!(
        out,
        "keyspace_misses:{}",
        s.keyspace_misses.load(Ordering::Relaxed)
    );
    line!(
        out,
        "migrate_cached_sockets:{}",
        shared.migrate_sockets.len()
    );
    let tracking = shared.tracking.stats();
    line!(out, "tracking_total_keys:{}", tracking.keys);
    line!(out, "tracking_total_items:{}", tracking.items);
    line!(out, "tracking_total_prefixes:{}", tracking.prefixes);
    line!(out, "unexpected_error_replies:0");
    line!(
        out,
        "total_error_replies:{}",
        shared.stats.error_replies.load(Ordering::Relaxed)
    );
}

/// INFO errorstats: each error code's count, as Redis 7.2 (`errorstat_<CODE>:count=<n>`).
fn errorstats(shared: &Shared, out: &mut String) {
    line!(out, "# Errorstats");
    for (code, count) in shared.stats.errors_by_code.lock().iter() {
        line!(out, "errorstat_{code}:count={count}");
    }
}

/// INFO replication, with Redis' field names in Redis' order (Sentinel parses them).
fn replication(shared: &Shared, out: &mut String) {
    use crate::repl::{LinkState, Role};
    let repl = &shared.repl;
    let settings = &repl.settings;
    let now = gradus_store::now_ms();
    line!(out, "# Replication");
    let role = repl.role.lock().clone();
    match &role {
        Role::Primary => line!(out, "role:master"),
        Role::Replica { host, port } => {
            let link = repl.link.lock().clone();
            let up = link.state == "connected";
            line!(out, "role:slave");
            line!(out, "master_host:{host}");
            line!(out, "master_port:{port}");
            line!(out, "master_link_status:{}", if up { "up" } else { "down" });
            let last_io = if link.last_io_ms == 0 {
                -1
            } else {
                (now.saturating_sub(link.last_io_ms) / 1000) as i64
            };
            line!(out, "master_last_io_seconds_ago:{last_io}");
            line!(
                out,
                "master_sync_in_progress:{}",
                u8::from(repl.sync_in_progress.load(Ordering::Relaxed))
            );
            line!(
                out,
                "slave_read_repl_offset:{}",
                repl.read_offset.load(Ordering::Relaxed)
            );
            line!(
                out,
                "slave_repl_offset:{}",
                repl.applied_offset.load(Ordering::Relaxed)
            );
            if !up {
                let down = if link.down_since_ms == 0 {
                    -1
                } else {
                    (now.saturating_sub(link.down_since_ms) / 1000) as i64
                };
                line!(out, "master_link_down_since_seconds:{down}");
            }
            line!(
                out,
                "slave_priority:{}",
                settings.priority.load(Ordering::Relaxed)
            );
            line!(
                out,
                "slave_read_only:{}",
                u8::from(settings.read_only.load(Ordering::Relaxed))
            );
            line!(
                out,
                "replica_announced:{}",
                u8::from(settings.announced.load(Ordering::Relaxed))
            );
            if !link.last_error.is_empty() {
                line!(out, "master_sync_last_error:{}", link.last_error);
            }
        }
    }
    let view = repl.view();
    line!(out, "connected_slaves:{}", view.replicas.len());
    for (i, r) in view.replicas.iter().enumerate() {
        let state = match r.state() {
            LinkState::Online => "online",
            LinkState::SendBulk => "send_bulk",
        };
        let lag = now.saturating_sub(r.last_ack_ms.load(Ordering::Relaxed)) / 1000;
        line!(
            out,
            "slave{i}:ip={},port={},state={state},offset={},lag={lag}",
            r.ip.lock(),
            r.port.load(Ordering::Relaxed),
            r.ack_offset.load(Ordering::Relaxed)
        );
    }
    // Gradus' own: how far each replica is behind, in records, bytes and the age of the oldest
    // write it has not acknowledged (Sentinel reads only the `slaveN` lines above).
    for (i, lag) in view.lags.iter().enumerate() {
        line!(
            out,
            "gradus_slave{i}_lag:records={},bytes={},ms={}",
            lag.records,
            lag.bytes,
            lag.ms
        );
    }
    line!(
        out,
        "master_failover_state:{}",
        shared.failover.state_name()
    );
    line!(out, "master_replid:{}", view.replid);
    line!(out, "master_replid2:{}", view.replid2);
    line!(out, "master_repl_offset:{}", view.offset);
    line!(out, "second_repl_offset:{}", view.second_offset);
    let (first, histlen) = view.backlog.map_or((0, 0), |(f, h, _)| (f, h));
    line!(
        out,
        "repl_backlog_active:{}",
        u8::from(view.backlog.is_some())
    );
    line!(
        out,
        "repl_backlog_size:{}",
        settings.backlog_size.load(Ordering::Relaxed)
    );
    line!(out, "repl_backlog_first_byte_offset:{first}");
    line!(out, "repl_backlog_histlen:{histlen}");
}

/// CPU seconds used by this process from /proc/self/stat (user, system).
fn cpu_seconds() -> (f64, f64) {
    let ticks = 100.0; // USER_HZ on Linux
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the parenthesised command name.
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = f.get(11)?.parse().ok()?;
            let stime: f64 = f.get(12)?.parse().ok()?;
            Some((utime / ticks, stime / ticks))
        })
        .unwrap_or((0.0, 0.0))
}

fn cpu(out: &mut String) {
    let (user, sys) = cpu_seconds();
    line!(out, "# CPU");
    line!(out, "used_cpu_sys:{sys:.6}");
    line!(out, "used_cpu_user:{user:.6}");
}

/// `dbN:` lines for the viewer's own tenant, N being the SELECT index.
fn keyspace(shared: &Shared, viewer: &Viewer, out: &mut String) {
    line!(out, "# Keyspace");
    let Some(tenant) = shared.tenancy.tenants.get(viewer.tenant) else {
        return;
    };
    for &g in &tenant.keyspaces {
        let (keys, expires, _) = shared.store.keyspaces()[g].stats();
        if keys > 0 {
            let n = shared.tenancy.select_of(g);
            line!(out, "db{n}:keys={keys},expires={expires},avg_ttl=0");
        }
    }
}

/// One `# Tenant_<name>` section per tenant the viewer may see (all for admins): memory, keys,
/// evictions and commands of the tenant, then one line per keyspace.
fn tenants(shared: &Shared, viewer: &Viewer, out: &mut String) {
    let mut first = true;
    for (t, tenant) in shared.tenancy.tenants.iter().enumerate() {
        if !viewer.admin && t != viewer.tenant {
            continue;
        }
        if !first {
            out.push_str("\r\n");
        }
        first = false;
        let mut used = 0;
        let mut keys = 0;
        let mut evicted = 0;
        let mut lines = Vec::new();
        for &g in &tenant.keyspaces {
            let def = &shared.tenancy.keyspaces[g];
            let ks = &shared.store.keyspaces()[g];
            let (k, expires, _) = ks.stats();
            let u = ks.used_bytes();
            used += u;
            keys += k;
            evicted += ks.evictions();
            let name = def.full_name.rsplit('/').next().unwrap_or("");
            lines.push(format!(
                "keyspace_{name}:db={},keys={k},expires={expires},used_memory={u},memory_limit={},eviction={},durability={},evicted_keys={}",
                def.select,
                def.memory_limit,
                if def.evict { "lru" } else { "none" },
                def.degree,
                ks.evictions()
            ));
        }
        line!(out, "# Tenant_{}", tenant.name);
        line!(out, "tenant:{}", tenant.name);
        line!(out, "used_memory:{used}");
        line!(out, "memory_limit:{}", tenant.memory_limit);
        line!(out, "keys:{keys}");
        line!(out, "evicted_keys:{evicted}");
        line!(out, "ops:{}", tenant.ops.load(Ordering::Relaxed));
        for l in lines {
            line!(out, "{l}");
        }
    }
}

/// `cmdstat_<row>:calls=…,usec=…,usec_per_call=…,rejected_calls=…,failed_calls=…` for every
/// command row used since the last RESETSTAT (Redis' format; subcommands as `config|get`).
fn commandstats(shared: &Shared, out: &mut String) {
    line!(out, "# Commandstats");
    let cells = shared.observer.commands.since_reset();
    for ((row, _), c) in crate::command::table().rows().iter().zip(&cells) {
        if c.is_empty() {
            continue;
        }
        let per_call = if c.calls == 0 {
            0.0
        } else {
            c.usec as f64 / c.calls as f64
        };
        line!(
            out,
            "cmdstat_{}:calls={},usec={},usec_per_call={per_call:.2},rejected_calls={},failed_calls={}",
            row.name,
            c.calls,
            c.usec,
            c.rejected,
            c.failed
        );
    }
}

/// `latency_percentiles_usec_<row>:p50=…,p99=…,p99.9=…`, at the percentiles of
/// `latency-tracking-info-percentiles` (Redis' default: 50, 99, 99.9).
fn latencystats(shared: &Shared, out: &mut String) {
    line!(out, "# Latencystats");
    let percentiles = shared.live.latency_percentiles.lock().clone();
    let cells = shared.observer.commands.since_reset();
    for ((row, _), c) in crate::command::table().rows().iter().zip(&cells) {
        let Some(h) = c.hist.as_ref().filter(|h| !h.is_empty()) else {
            continue;
        };
        let values: Vec<String> = percentiles
            .iter()
            .map(|&q| {
                let usec = crate::observe::cmdstats::percentile_usec(h, q);
                format!("p{q}={usec:.3}")
            })
            .collect();
        line!(
            out,
            "latency_percentiles_usec_{}:{}",
            row.name,
            values.join(",")
        );
    }
}
