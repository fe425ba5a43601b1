//! The metrics in Prometheus' text exposition format (version 0.0.4), as `/metrics` serves them.
//!
//! Names follow Prometheus' conventions so `promtool check metrics` passes: a `gradus_` prefix,
//! base units in the name (`_seconds`, `_bytes`), `_total` on counters, histograms as
//! `_bucket{le=…}` (cumulative, ending in `+Inf`), `_sum` and `_count`, and one `# HELP` and
//! `# TYPE` per family. Counters are never reset (CONFIG RESETSTAT resets INFO's view only).
//!
//! Everything is read when scraped: command statistics from `cmdstats` (summed per command
//! family, the table's `group`), the log's counters, the lock table's, the keyspaces'.
//!
//! May import: `state`, `command` (the table's families), `info` (data directory sizes),
//! `observe`.

use crate::state::Shared;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

/// Upper bounds of the command latency buckets, in seconds.
const COMMAND_BUCKETS: &[f64] = &[
    0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005,
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// A text exposition being written.
struct Exposition {
    out: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", number(value));
    }

    /// One metric: its HELP/TYPE lines and a single unlabelled sample.
    fn single(&mut self, name: &str, kind: &str, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    /// The samples of one histogram: `buckets` are (upper bound, cumulative count), without
    /// `+Inf` (added from `count`).
    fn histogram(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        buckets: &[(f64, u64)],
        sum: f64,
        count: u64,
    ) {
        let bucket = format!("{name}_bucket");
        for (le, n) in buckets {
            let le = number(*le);
            let mut l = labels.to_vec();
            l.push(("le", &le));
            self.sample(&bucket, &l, *n as f64);
        }
        let mut l = labels.to_vec();
        l.push(("le", "+Inf"));
        self.sample(&bucket, &l, count as f64);
        self.sample(&format!("{name}_sum"), labels, sum);
        self.sample(&format!("{name}_count"), labels, count as f64);
    }
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A sample value: integers without a fraction, others in Rust's shortest form.
fn number(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Cumulative counts of power-of-two buckets (bucket `i`: values under `2^i` units) at upper
/// bounds `2^i × unit`; the last bucket is open-ended (only in `+Inf`).
fn pow2_cumulative(buckets: &[u64], unit: f64) -> Vec<(f64, u64)> {
    let mut total = 0;
    let mut out = Vec::with_capacity(buckets.len());
    for (i, n) in buckets.iter().enumerate().take(buckets.len() - 1) {
        total += n;
        out.push(((1u64 << i) as f64 * unit, total));
    }
    out
}

/// The whole exposition.
pub fn render(shared: &Shared) -> String {
    let mut e = Exposition {
        out: String::with_capacity(32 * 1024),
    };
    commands(shared, &mut e);
    clients(shared, &mut e);
    keyspaces(shared, &mut e);
    log(shared, &mut e);
    locks(shared, &mut e);
    memcached(shared, &mut e);
    replication(shared, &mut e);
    e.single(
        "gradus_uptime_seconds",
        "gauge",
        "Seconds since the server started.",
        shared.started.elapsed().as_secs_f64(),
    );
    e.out
}

/// Replication: the offset, each replica's lag (bytes not yet acknowledged, seconds since its
/// last acknowledgement), on a replica the link and what it applied, and the resync counters.
fn replication(shared: &Shared, e: &mut Exposition) {
    let repl = &shared.repl;
    let view = repl.view();
    e.single(
        "gradus_replication_offset_bytes",
        "gauge",
        "The replication offset (INFO master_repl_offset): bytes of the replication stream so far.",
        view.offset as f64,
    );
    e.single(
        "gradus_replication_connected_replicas",
        "gauge",
        "Replicas connected to this server (INFO connected_slaves).",
        view.replicas.len() as f64,
    );
    let now = gradus_store::now_ms();
    e.family(
        "gradus_replica_lag_bytes",
        "gauge",
        "Per connected replica: stream bytes it has not acknowledged yet.",
    );
    let name = |r: &crate::repl::ReplicaLink| {
        format!("{}:{}", r.ip.lock(), r.port.load(Ordering::Relaxed))
    };
    for r in &view.replicas {
        let acked = r.ack_offset.load(Ordering::Relaxed);
        e.sample(
            "gradus_replica_lag_bytes",
            &[("replica", &name(r))],
            view.offset.saturating_sub(acked) as f64,
        );
    }
    e.family(
        "gradus_replica_lag_records",
        "gauge",
        "Per connected replica: stream records (writes) it has not acknowledged yet.",
    );
    for (r, lag) in view.replicas.iter().zip(&view.lags) {
        e.sample(
            "gradus_replica_lag_records",
            &[("replica", &name(r))],
            lag.records as f64,
        );
    }
    e.family(
        "gradus_replica_lag_seconds",
        "gauge",
        "Per connected replica: age of the oldest write it has not acknowledged (0: none).",
    );
    for (r, lag) in view.replicas.iter().zip(&view.lags) {
        e.sample(
            "gradus_replica_lag_seconds",
            &[("replica", &name(r))],
            lag.ms as f64 / 1000.0,
        );
    }
    e.family(
        "gradus_replica_ack_age_seconds",
        "gauge",
        "Per connected replica: seconds since its last acknowledgement (INFO lag).",
    );
    for r in &view.replicas {
        let age = now.saturating_sub(r.last_ack_ms.load(Ordering::Relaxed));
        e.sample(
            "gradus_replica_ack_age_seconds",
            &[("replica", &name(r))],
            age as f64 / 1000.0,
        );
    }
    if repl.is_replica() {
        let up = repl.link.lock().state == "connected";
        e.single(
            "gradus_replication_link_up",
            "gauge",
            "On a replica: 1 while its link to the primary is up.",
            f64::from(u8::from(up)),
        );
        e.single(
            "gradus_replication_applied_offset_bytes",
            "gauge",
            "On a replica: the primary's offset it has applied (INFO slave_repl_offset).",
            repl.applied_offset.load(Ordering::Relaxed) as f64,
        );
    }
    for (name, help, v) in [
        (
            "gradus_replication_full_syncs_total",
            "Full resyncs served to replicas (INFO sync_full).",
            &repl.sync_full,
        ),
        (
            "gradus_replication_partial_syncs_total",
            "Partial resyncs served from the backlog (INFO sync_partial_ok).",
            &repl.sync_partial_ok,
        ),
    ] {
        e.single(name, "counter", help, v.load(Ordering::Relaxed) as f64);
    }
}

/// Per command family: calls, failures, rejections, and a latency histogram.
fn commands(shared: &Shared, e: &mut Exposition) {
    struct Family {
        calls: u64,
        failed: u64,
        rejected: u64,
        usec: u64,
        buckets: Vec<u64>,
    }
    let cells = shared.observer.commands.totals();
    let mut families: BTreeMap<&str, Family> = BTreeMap::new();
    for ((_, family), cell) in crate::command::table().rows().iter().zip(&cells) {
        let f = families.entry(family).or_insert_with(|| Family {
            calls: 0,
            failed: 0,
            rejected: 0,
            usec: 0,
            buckets: vec![0; COMMAND_BUCKETS.len()],
        });
        f.calls += cell.calls;
        f.failed += cell.failed;
        f.rejected += cell.rejected;
        f.usec += cell.usec;
        if let Some(h) = &cell.hist {
            for v in h.iter_recorded() {
                let seconds = h.highest_equivalent(v.value_iterated_to()) as f64 / 1e9;
                if let Some(b) = COMMAND_BUCKETS.iter().position(|le| seconds <= *le) {
                    f.buckets[b] += v.count_at_value();
                }
            }
        }
    }
    e.family(
        "gradus_commands_total",
        "counter",
        "Commands run over RESP, by command family (the command table's group).",
    );
    for (name, f) in &families {
        e.sample("gradus_commands_total", &[("family", name)], f.calls as f64);
    }
    e.family(
        "gradus_command_failures_total",
        "counter",
        "Commands that ran and answered an error, by command family.",
    );
    for (name, f) in &families {
        e.sample(
            "gradus_command_failures_total",
            &[("family", name)],
            f.failed as f64,
        );
    }
    e.family(
        "gradus_command_rejections_total",
        "counter",
        "Commands refused before they ran (arity, authentication, rights), by command family.",
    );
    for (name, f) in &families {
        e.sample(
            "gradus_command_rejections_total",
            &[("family", name)],
            f.rejected as f64,
        );
    }
    e.family(
        "gradus_command_duration_seconds",
        "histogram",
        "Time to run a command (not counting time blocked or waiting for a lock or fsync), by command family.",
    );
    for (name, f) in &families {
        let mut total = 0;
        let buckets: Vec<(f64, u64)> = COMMAND_BUCKETS
            .iter()
            .zip(&f.buckets)
            .map(|(le, n)| {
                total += n;
                (*le, total)
            })
            .collect();
        e.histogram(
            "gradus_command_duration_seconds",
            &[("family", name)],
            &buckets,
            f.usec as f64 / 1e6,
            f.calls,
        );
    }
}

fn clients(shared: &Shared, e: &mut Exposition) {
    let tenants = &shared.tenancy.tenants;
    let mut per_tenant = vec![0u64; tenants.len()];
    let mut unauthenticated = 0u64;
    for c in shared.clients.all() {
        match per_tenant.get_mut(c.tenant.load(Ordering::Relaxed)) {
            Some(n) => *n += 1,
            None => unauthenticated += 1,
        }
    }
    e.family(
        "gradus_connected_clients",
        "gauge",
        "Open RESP and memcached connections, by tenant (\"\": not yet authenticated).",
    );
    for (t, n) in tenants.iter().zip(&per_tenant) {
        e.sample(
            "gradus_connected_clients",
            &[("tenant", &t.name)],
            *n as f64,
        );
    }
    e.sample(
        "gradus_connected_clients",
        &[("tenant", "")],
        unauthenticated as f64,
    );
    let s = &shared.stats;
    for (name, help, v) in [
        (
            "gradus_connections_received_total",
            "Connections accepted.",
            &s.connections_received,
        ),
        (
            "gradus_connections_rejected_total",
            "Connections refused at maxclients.",
            &s.rejected_connections,
        ),
        (
            "gradus_net_input_bytes_total",
            "Bytes read from RESP clients.",
            &s.net_input_bytes,
        ),
        (
            "gradus_net_output_bytes_total",
            "Bytes written to RESP clients.",
            &s.net_output_bytes,
        ),
        (
            "gradus_expired_keys_total",
            "Keys removed because their TTL passed.",
            &s.expired_keys,
        ),
    ] {
        e.single(name, "counter", help, v.load(Ordering::Relaxed) as f64);
    }
    e.family(
        "gradus_tenant_commands_total",
        "counter",
        "Commands run by each tenant's connections.",
    );
    for t in tenants {
        e.sample(
            "gradus_tenant_commands_total",
            &[("tenant", &t.name)],
            t.ops.load(Ordering::Relaxed) as f64,
        );
    }
}

/// Keys, memory and evictions per keyspace; memory and limits per tenant.
fn keyspaces(shared: &Shared, e: &mut Exposition) {
    let tenancy = &shared.tenancy;
    let store = shared.store.keyspaces();
    let mut rows = Vec::new();
    for t in &tenancy.tenants {
        for &g in &t.keyspaces {
            let def = &tenancy.keyspaces[g];
            let name = def.full_name.rsplit('/').next().unwrap_or("").to_string();
            let ks = &store[g];
            let (keys, expires, _) = ks.stats();
            rows.push((
                t.name.clone(),
                name,
                keys,
                expires,
                ks.used_bytes(),
                def.memory_limit,
                ks.evictions(),
            ));
        }
    }
    type Pick = fn(&(String, String, usize, usize, usize, usize, u64)) -> f64;
    let metrics: [(&str, &str, &str, Pick); 5] = [
        (
            "gradus_keyspace_keys",
            "gauge",
            "Keys in each keyspace.",
            |r| r.2 as f64,
        ),
        (
            "gradus_keyspace_keys_with_expiry",
            "gauge",
            "Keys with a TTL in each keyspace.",
            |r| r.3 as f64,
        ),
        (
            "gradus_keyspace_memory_bytes",
            "gauge",
            "Memory used by each keyspace's keys and values.",
            |r| r.4 as f64,
        ),
        (
            "gradus_keyspace_memory_limit_bytes",
            "gauge",
            "Each keyspace's own memory limit (0: none).",
            |r| r.5 as f64,
        ),
        (
            "gradus_keyspace_evicted_keys_total",
            "counter",
            "Keys evicted from each (lru) keyspace under its memory limit.",
            |r| r.6 as f64,
        ),
    ];
    for (name, kind, help, pick) in metrics {
        e.family(name, kind, help);
        for r in &rows {
            e.sample(name, &[("tenant", &r.0), ("keyspace", &r.1)], pick(r));
        }
    }
    e.family(
        "gradus_tenant_memory_bytes",
        "gauge",
        "Memory used by all of each tenant's keyspaces.",
    );
    for t in &tenancy.tenants {
        let used: usize = t.keyspaces.iter().map(|&g| store[g].used_bytes()).sum();
        e.sample(
            "gradus_tenant_memory_bytes",
            &[("tenant", &t.name)],
            used as f64,
        );
    }
    e.family(
        "gradus_tenant_memory_limit_bytes",
        "gauge",
        "Each tenant's memory limit (0: none).",
    );
    for t in &tenancy.tenants {
        e.sample(
            "gradus_tenant_memory_limit_bytes",
            &[("tenant", &t.name)],
            t.memory_limit as f64,
        );
    }
}

/// The log: fsync latency, group-commit batch sizes, durable-LSN lag, sizes on disk.
fn log(shared: &Shared, e: &mut Exposition) {
    let p = &shared.persist;
    let (log_bytes, snapshot_bytes) = crate::info::data_dir_sizes(&shared.config.dir);
    e.single(
        "gradus_log_disk_bytes",
        "gauge",
        "Bytes of log segment files in the data directory.",
        log_bytes as f64,
    );
    e.single(
        "gradus_snapshot_disk_bytes",
        "gauge",
        "Bytes of snapshot files in the data directory.",
        snapshot_bytes as f64,
    );
    e.single(
        "gradus_last_snapshot_timestamp_seconds",
        "gauge",
        "Unix time of the last successful snapshot (or of the start).",
        p.last_save_unix.load(Ordering::Relaxed) as f64,
    );
    e.single(
        "gradus_snapshot_failures_total",
        "counter",
        "Snapshots that failed.",
        p.snapshot_failures.load(Ordering::Relaxed) as f64,
    );
    let Some(log) = p.log.get() else {
        return;
    };
    let s = log.stats();
    e.single(
        "gradus_log_durable_lag_records",
        "gauge",
        "Log records appended but not yet covered by an fsync (last LSN minus durable LSN).",
        s.last_lsn.saturating_sub(s.durable_lsn) as f64,
    );
    e.single(
        "gradus_log_last_lsn",
        "gauge",
        "LSN of the last record appended to the log.",
        s.last_lsn as f64,
    );
    e.single(
        "gradus_log_durable_lsn",
        "gauge",
        "LSN of the last record covered by an fsync.",
        s.durable_lsn as f64,
    );
    e.single(
        "gradus_log_written_bytes_total",
        "counter",
        "Bytes of log written to segment files.",
        s.bytes_written as f64,
    );
    e.single(
        "gradus_log_poisoned",
        "gauge",
        "1 when a failed fsync stopped the log from taking durable writes.",
        f64::from(u8::from(s.poisoned.is_some())),
    );
    e.family(
        "gradus_log_fsync_duration_seconds",
        "histogram",
        "Duration of log segment fsyncs (fdatasync).",
    );
    e.histogram(
        "gradus_log_fsync_duration_seconds",
        &[],
        &pow2_cumulative(&s.fsync_histogram, 1e-6),
        s.total_fsync_micros as f64 / 1e6,
        s.fsyncs,
    );
    e.family(
        "gradus_log_group_commit_batch_records",
        "histogram",
        "Records made durable by one fsync (group commit batch size).",
    );
    // Batch bucket i counts 2^i ..= 2^(i+1)-1 records.
    let mut total = 0;
    let batches: Vec<(f64, u64)> = s
        .batch_histogram
        .iter()
        .enumerate()
        .take(s.batch_histogram.len() - 1)
        .map(|(i, n)| {
            total += n;
            (((2u64 << i) - 1) as f64, total)
        })
        .collect();
    e.histogram(
        "gradus_log_group_commit_batch_records",
        &[],
        &batches,
        s.records_synced as f64,
        s.commit_fsyncs,
    );
}

/// The memcached port's commands and hit rate (its `stats` counters; `stats reset` restarts
/// them, which Prometheus' `rate` takes as a counter reset).
fn memcached(shared: &Shared, e: &mut Exposition) {
    let counters = shared.memcache.counters();
    let get = |name: &str| {
        counters
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0.0, |(_, v)| *v as f64)
    };
    e.family(
        "gradus_memcached_commands_total",
        "counter",
        "Commands on the memcached port, by kind (memcached's cmd_get, cmd_set, cmd_flush, cmd_touch).",
    );
    for kind in ["get", "set", "flush", "touch"] {
        e.sample(
            "gradus_memcached_commands_total",
            &[("command", kind)],
            get(&format!("cmd_{kind}")),
        );
    }
    e.family(
        "gradus_memcached_get_results_total",
        "counter",
        "Keys looked up by memcached retrievals, by result.",
    );
    for result in ["hits", "misses", "expired"] {
        e.sample(
            "gradus_memcached_get_results_total",
            &[("result", result)],
            get(&format!("get_{result}")),
        );
    }
    e.single(
        "gradus_memcached_connections",
        "gauge",
        "Open connections on the memcached port.",
        shared.memcache.curr_connections.load(Ordering::Relaxed) as f64,
    );
}

/// Session locks: grants, waits, waiter-cap rejections, wait and hand-over latency.
fn locks(shared: &Shared, e: &mut Exposition) {
    let stats = shared.locks.stats();
    let (held, waiting) = shared.locks.counts();
    e.single(
        "gradus_locks_held",
        "gauge",
        "Session locks held now.",
        held as f64,
    );
    e.single(
        "gradus_lock_waiters",
        "gauge",
        "Connections waiting for a session lock now.",
        waiting as f64,
    );
    e.family(
        "gradus_lock_grants_total",
        "counter",
        "Session locks granted, at once or after waiting.",
    );
    e.sample(
        "gradus_lock_grants_total",
        &[("waited", "no")],
        stats.granted_at_once.load(Ordering::Relaxed) as f64,
    );
    e.sample(
        "gradus_lock_grants_total",
        &[("waited", "yes")],
        stats.granted_after_wait.load(Ordering::Relaxed) as f64,
    );
    for (name, help, v) in [
        (
            "gradus_lock_waits_total",
            "Lock requests that queued behind a holder.",
            &stats.queued,
        ),
        (
            "gradus_lock_waiter_cap_rejections_total",
            "Lock requests refused at once because MAXWAITERS connections already waited.",
            &stats.waiter_cap_rejections,
        ),
        (
            "gradus_lock_lease_expirations_total",
            "Locks handed on because their lease ran out.",
            &stats.lease_expirations,
        ),
    ] {
        e.single(name, "counter", help, v.load(Ordering::Relaxed) as f64);
    }
    for (name, help, hist) in [
        (
            "gradus_lock_wait_seconds",
            "How long a waiter queued before the lock was handed to it.",
            &stats.wait,
        ),
        (
            "gradus_lock_handover_seconds",
            "From the release that hands a lock on to the waiting connection running again.",
            &shared.observer.lock_handover,
        ),
    ] {
        let (buckets, sum) = hist.read();
        e.family(name, "histogram", help);
        e.histogram(
            name,
            &[],
            &pow2_cumulative(&buckets, 1e-6),
            sum as f64 / 1e6,
            buckets.iter().sum(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pow2_buckets_are_cumulative_and_leave_the_last_to_inf() {
        assert_eq!(
            pow2_cumulative(&[1, 2, 3, 4], 1e-6),
            vec![(1e-6, 1), (2e-6, 3), (4e-6, 6)]
        );
    }

    #[test]
    fn numbers_and_labels_are_printed_as_prometheus_reads_them() {
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.000_25), "0.00025");
        assert_eq!(escape("a\"b\\c\n"), "a\\\"b\\\\c\\n");
    }
}
