//! `gradus-bench`: the study tool that reproduces the LMS cache/session-store comparisons on one
//! machine — closed- and open-loop load, HDR histograms, the `kv`, `lms` and `exam` workloads,
//! Gradus, Redis and memcached targets driven the way real applications drive them, `/proc`
//! resource sampling of the server, JSON and Markdown/SVG reports.
//!
//! Modules, from the wire up:
//! * [`error`] — [`BenchError`], the crate's one error type.
//! * [`resp`] — a small async RESP2 client (encoding here, parsing by `gradus-proto`).
//! * [`memcache`] — a small async memcached text-protocol client.
//! * [`wire`] — bytes and round trips per connection, and the loopback relay that models a
//!   network round-trip time.
//! * [`codec`] — client-side LZ4 compression of values above a threshold.
//! * [`db`] — PostgreSQL, MariaDB/MyRocks and file session stores, and how to start the
//!   databases.
//! * [`target`] — target specs and each target's idioms (native/polling session locks, cache
//!   in hashes or items).
//! * [`iolimit`] — a cgroup block-I/O IOPS limit on a managed server.
//! * [`server`] — starting and stopping managed servers in temporary directories.
//! * [`sampler`] — `/proc` sampling of the server process.
//! * [`stats`] — histograms and counters.
//! * [`workload`] — what users do (`kv`, `lms`, `exam`).
//! * [`fault`] — restart and `kill -9` mid-run: sessions lost, users logged out, cold-cache
//!   penalty, time to accept connections again.
//! * [`run`] — one measurement point: load models, warm-up, drain, progress, aborts.
//! * [`report`] and [`svg`] — the result types (the JSON schema), Markdown and charts.
//! * [`cli`] — the command line and orchestration; the binary only calls it.
//! * [`php_lms`] — `gradus-bench php-lms`: the lms journey through PHP pages served by `php -S`.
//!
//! # JSON result (schema `gradus-bench/1`)
//! Top level: `schema`, `tool`, `command` (argv), `subcommand`, `started_at`/`finished_at`
//! (RFC 3339 UTC), `machine` {`cpus`, `mem_total_bytes`, `kernel`, `cpu_model`}, `workload`
//! {`name`, `params`}, `load` {`model` closed|open, `users`[], `rates`[], `connections`,
//! `timing` {`ramp_up_s`, `warmup_s`, `duration_s`, `units_limit`, `drain_s`, `think_ms`,
//! `think_dist`}, `seed`}, `partial`, `partial_reason`, `targets`[].
//!
//! Each target: `label`, `spec` {`kind`, `degree`, `lock_mode`, `addr`, `memory_pct`,
//! `memory_bytes`}, `server` {`managed`,
//! `addr`, `launch` {`binary`, `args`, `version_output`, `pid`}, `reported`
//! {`protocol_version`, `info`, `config`}, `client_durability`}, `points`[], `knee`
//! {`index`, `x`, `p90_ms`, `method`, `saturated`} or null, `disk_bytes` (the managed server's
//! data directory after the last point), `disk` {`total_bytes`, `log_bytes`, `data_bytes`},
//! `iops_limit` (the cgroup throttle set, or null), `held` {`layer` session|cache, `label`,
//! `addr`} (the layer held on another target) or null, `partial`, `partial_reason`. Points are in
//! increasing load order (an adaptive sweep's extra points sorted in).
//!
//! Each point: `users` or `rate`, `load`, `prepare_s`, `measured_s`, `unit` (journey | op |
//! post_answer), `units`, `units_per_s`, `protocol_ops`, `protocol_ops_per_s`,
//! `unit_latency`, `response_time` (open loop: from the intended start), `pages_per_journey`,
//! `ops` {name → latency}, `wire` {`counted`, `note`, `rtt_ms`, `compress_threshold`,
//! `figures` {`page.sent`|`page.received`|`page.round_trips`|`unit.session_sent`|…|
//! `unit.cache_round_trips` → {`count`, `avg`, `p50`, `p90`, `max`}}}, `abandoned_units`, `cut_at_end`, `dropped_arrivals`, `reconnects`,
//! `errors` {kind → count}, `locks` {`acquisitions`, `waits`, `polls`, `timeouts`,
//! `wait_latency`}, `verification` {`sessions_written`, `sessions_verified`,
//! `session_mismatches`, `final_readback_checked`, `final_readback_mismatches`, `cache_hits`,
//! `cache_misses`, `cache_regenerated`, `value_mismatches`, `proctor_sessions_seen`,
//! `first_mismatch`}, `resources` {`available`, `reason`, `pid`, `window_s`, `cpu_user_s`,
//! `cpu_sys_s`, `cpu_percent_of_one_core`, `rss_max_bytes`, `rss_avg_bytes`, `pss_max_bytes`,
//! `pss_avg_bytes`, `memory_note`, `read_bytes`, `read_bytes_per_s`, `read_syscalls_per_s`,
//! `disk_read_ops_per_s`, `disk_write_ops_per_s`, `disk_note`, `write_bytes`,
//! `write_bytes_per_s`, `write_syscalls`, `write_syscalls_per_s`, `fsyncs` (always null),
//! `fsync_note`, `sockets_max`, `sockets_avg`, `samples`[]}, `client_cpu_percent_of_one_core` (the bench itself),
//! `partial`, `partial_reason`.
//!
//! A latency is {`count`, `errors`, `min_us`, `avg_us`, `p50_us`, `p90_us`, `p99_us`,
//! `p999_us`, `max_us`, `stdev_us`} in microseconds. Only work that *started* after the warm-up
//! is counted, and a journey is counted whole or not at all, so for `lms`
//! `ops["page"].count == 13 * units` and `ops["session_open"].count == ops["page"].count +
//! ops["ajax"].count`.

pub mod cli;
pub mod codec;
pub mod db;
pub mod error;
pub mod fault;
pub mod iolimit;
pub mod memcache;
pub mod php_lms;
pub mod report;
pub mod resp;
pub mod run;
pub mod sampler;
pub mod server;
pub mod stats;
pub mod svg;
pub mod target;
pub mod tool;
pub mod wire;
pub mod workload;

pub use error::BenchError;
