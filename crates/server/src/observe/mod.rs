//! Observability: what the server measures about itself while it serves, and where it shows it.
//!
//! - [`cmdstats`]: per-command calls, time, failures and rejections with an HDR latency histogram
//!   each (`INFO commandstats`/`latencystats`, the metrics' per-family histograms), kept in one
//!   shard per worker thread so the request path never takes a lock another thread wants;
//! - [`slowlog`]: Redis' SLOWLOG (commands slower than `slowlog-log-slower-than`);
//! - [`latency`]: Redis' latency monitor (LATENCY LATEST/HISTORY/RESET/DOCTOR) with Redis'
//!   `command` and `fast-command` events and Gradus' own `fsync` and `lock-wait`;
//! - [`prometheus`]: the metrics in Prometheus' text format; [`status`]: the HTML status page;
//!   [`http`]: the listener on `metrics-port` that serves both (GET/HEAD of known paths only).
//!
//! [`Observer`] is the part of the shared state these keep; [`Observer::finish_command`] is the
//! one call the dispatcher makes per command. Readers (INFO, SLOWLOG, the HTTP side) copy what
//! they need and never hold a lock across an `.await`.
//!
//! May import: `state`, `client`, `command` (the table: row names and families), `info` (sizes
//! of the data directory), `tenancy` (who sees what); never command handlers.

pub mod cmdstats;
pub mod http;
pub mod latency;
pub mod prometheus;
pub mod slowlog;
pub mod status;

use crate::client::ClientState;
use crate::command::CommandSpec;
use crate::state::LiveSettings;
use bytes::Bytes;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// What the server observes about itself (one per server, in `Shared`).
#[derive(Default)]
pub struct Observer {
    pub commands: cmdstats::CommandStats,
    pub slowlog: slowlog::SlowLog,
    pub latency: latency::LatencyMonitor,
    /// How long waiters took to run once a lock was handed to them (see `command::locks`).
    pub lock_handover: gradus_store::locks::MicrosHistogram,
}

/// How a command ended, for its statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It ran and answered normally.
    Ok,
    /// It ran and answered an error (Redis' `failed_calls`).
    Failed,
    /// It was refused before it ran: arity, authentication, rights (Redis' `rejected_calls`).
    Rejected,
}

impl Observer {
    /// Count one command that ran for `elapsed` (or was refused), and log it to the slow log
    /// and the latency monitor when it passes their thresholds. `args` is the command as sent
    /// (only read when it is slow).
    #[allow(clippy::too_many_arguments)]
    pub fn finish_command(
        &self,
        live: &LiveSettings,
        client: &ClientState,
        row: &'static CommandSpec,
        args: &[Bytes],
        elapsed: Duration,
        outcome: Outcome,
    ) {
        self.commands.record(row, elapsed, outcome);
        if outcome == Outcome::Rejected || row.has(crate::command::flags::SKIP_SLOWLOG) {
            return;
        }
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        let slower_than = live.slowlog_log_slower_than.load(Ordering::Relaxed);
        if slower_than >= 0 && micros >= slower_than as u64 {
            let max_len = live.slowlog_max_len.load(Ordering::Relaxed) as usize;
            self.slowlog.push(client, row, args, micros, max_len);
        }
        let threshold_ms = live.latency_monitor_threshold.load(Ordering::Relaxed);
        let millis = micros / 1000;
        if threshold_ms > 0 && millis >= threshold_ms {
            let event = if row.has(crate::command::flags::FAST) {
                "fast-command"
            } else {
                "command"
            };
            self.latency.add_sample(event, millis);
        }
    }

    /// A latency event of Gradus' own (`fsync`, `lock-wait`) that took `elapsed`: sampled when
    /// the latency monitor is on and it passes the threshold.
    pub fn latency_event(&self, live: &LiveSettings, event: &'static str, elapsed: Duration) {
        let threshold_ms = live.latency_monitor_threshold.load(Ordering::Relaxed);
        let millis = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        if threshold_ms > 0 && millis >= threshold_ms {
            self.latency.add_sample(event, millis);
        }
    }
}

/// True when a slow command would be logged (the dispatcher keeps a write's arguments then).
pub fn slowlog_on(live: &LiveSettings) -> bool {
    live.slowlog_log_slower_than.load(Ordering::Relaxed) >= 0
}

/// The current Unix time in whole seconds.
pub(crate) fn unix_seconds() -> u64 {
    gradus_store::now_ms() / 1000
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::table;

    /// The cost the dispatcher adds per command (two clock readings, the statistics record, the
    /// slow-log and latency checks, and keeping a write's arguments): printed, for
    /// docs/benchmarks/observability.md. `cargo test --release -p gradus-server --lib
    /// per_command_cost -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn per_command_cost() {
        let shared = crate::state::Shared::new(
            crate::settings::defaults(),
            None,
            crate::tenancy::Tenancy::build(&crate::settings::defaults(), &[]).unwrap(),
        );
        let handle = shared.clients.register(
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
            -1,
        );
        let client = ClientState::new(handle, true);
        let args = vec![
            Bytes::from_static(b"SET"),
            Bytes::from_static(b"key:000001"),
            Bytes::from_static(b"xxx"),
        ];
        let row = table().get(&args[0]).unwrap();
        // This thread's CPU time (the machine may be shared: wall time would count the time
        // other processes ran).
        let cpu_ns = || -> u64 {
            std::fs::read_to_string("/proc/thread-self/schedstat")
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        let n = 2_000_000u32;
        let (started, cpu_started) = (std::time::Instant::now(), cpu_ns());
        for _ in 0..n {
            let kept = std::hint::black_box(args.clone());
            let t = std::time::Instant::now();
            let elapsed = std::hint::black_box(t.elapsed());
            shared
                .observer
                .finish_command(&shared.live, &client, row, &kept, elapsed, Outcome::Ok);
        }
        let per = started.elapsed() / n;
        let cpu_per = cpu_ns().saturating_sub(cpu_started) / u64::from(n);
        let clocks_started = cpu_ns();
        for _ in 0..n {
            let t = std::time::Instant::now();
            std::hint::black_box(t.elapsed());
        }
        let clocks = cpu_ns().saturating_sub(clocks_started) / u64::from(n);
        println!("per-command observability cost: {cpu_per} ns of CPU ({per:?} wall)");
        println!("of which two clock readings: {clocks} ns of CPU");
        assert!(per < Duration::from_micros(5));
    }
}
