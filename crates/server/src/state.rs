//! Server-wide shared state: the store, the live settings, the client registry and counters.
//!
//! One `Arc<Shared>` is handed to every connection. Settings that `CONFIG SET` may change live in
//! atomics or a small mutex so the request path reads them without locking anything shared for long.
//!
//! May import: `client`, `config`, `persist`, `tenancy`, `blocking`, `pubsub`, `memcache::stats`, `tls`,
//! `observe`, `repl`, `migrate` (the state they keep); never command modules.

use crate::client::ClientRegistry;
use crate::config::Config;
use gradus_proto::Limits;
use gradus_store::Store;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// Counters reported by INFO stats. Relaxed atomics: they are statistics, not synchronisation.
#[derive(Default)]
pub struct Stats {
    pub connections_received: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub commands_processed: AtomicU64,
    pub keyspace_hits: AtomicU64,
    pub keyspace_misses: AtomicU64,
    pub net_input_bytes: AtomicU64,
    pub net_output_bytes: AtomicU64,
    pub expired_keys: AtomicU64,
    /// Connections closed because they sent an HTTP request (`POST`/`Host:` on the RESP port,
    /// an `… HTTP/x` line on the memcached port): a web page trying cross-protocol scripting.
    pub cross_protocol_attacks: AtomicU64,
    /// When (Unix seconds) the last such attack was logged: at most one log line a minute, as
    /// Redis, so an attacker cannot flood the log.
    pub cross_protocol_logged_at: AtomicU64,
    /// Error replies sent (INFO stats `total_error_replies`) and their count by error code
    /// (INFO errorstats), as Redis' `afterErrorReply` counts them.
    pub error_replies: AtomicU64,
    /// Clients closed by `maxmemory-clients` (INFO stats `evicted_clients`).
    pub evicted_clients: AtomicU64,
    pub errors_by_code: Mutex<std::collections::BTreeMap<String, u64>>,
}

/// Error codes INFO errorstats tracks at most: past them a new code is counted in
/// `total_error_replies` only (a script can make up codes without end; Redis 7.4 caps them
/// at the same number).
const ERROR_CODES_MAX: usize = 128;

impl Stats {
    /// Count `reply` if it is an error (a reply to a client's command). Errors inside an array
    /// are counted where such arrays are made (EXEC's replies, a script's table, the errors a
    /// script's commands give it), so an ordinary array reply is not looked through.
    #[inline]
    pub fn count_errors(&self, reply: &gradus_proto::Frame) {
        if let gradus_proto::Frame::Error(text) = reply {
            self.count_error(text);
        }
    }

    /// Count one error reply; its code is its first word (Redis looks in its first 32 bytes;
    /// `ERR` when it has no space there).
    #[cold]
    fn count_error(&self, text: &str) {
        self.error_replies.fetch_add(1, Ordering::Relaxed);
        let head = &text.as_bytes()[..text.len().min(32)];
        let code = match head.iter().position(|&b| b == b' ') {
            Some(end) => &text[..end],
            None => "ERR",
        };
        let mut codes = self.errors_by_code.lock();
        if let Some(count) = codes.get_mut(code) {
            *count += 1;
        } else if codes.len() < ERROR_CODES_MAX {
            codes.insert(code.to_string(), 1);
        }
    }

    /// Add a connection's local counters to the shared ones and zero them; its commands also
    /// count towards `tenant_ops`.
    pub fn absorb(&self, local: &crate::client::LocalCounters, tenant_ops: &AtomicU64) {
        let commands = local.commands.load(Ordering::Relaxed);
        if commands > 0 {
            tenant_ops.fetch_add(commands, Ordering::Relaxed);
        }
        for (shared, local) in [
            (&self.commands_processed, &local.commands),
            (&self.keyspace_hits, &local.hits),
            (&self.keyspace_misses, &local.misses),
        ] {
            let n = crate::client::LocalCounters::take(local);
            if n > 0 {
                shared.fetch_add(n, Ordering::Relaxed);
            }
        }
    }
}

/// Where the settings that can change at run time (CONFIG SET) keep their values; the settings
/// table says which these are, and reads and sets them.
pub struct LiveSettings {
    pub maxclients: AtomicUsize,
    /// Server-wide memory limit in bytes (0: none) and its policy, an index into
    /// `crate::quota::POLICIES`.
    pub maxmemory: AtomicUsize,
    pub maxmemory_policy: std::sync::atomic::AtomicU8,
    /// Redis' `lfu-log-factor` and `lfu-decay-time` (minutes), for the LFU policies' counter
    /// (see `crate::quota::access_clock`).
    pub lfu_log_factor: AtomicU64,
    pub lfu_decay_time: AtomicU64,
    /// Keys each eviction samples per shard (`maxmemory-samples`).
    pub maxmemory_samples: AtomicU64,
    pub proto_max_bulk_len: AtomicUsize,
    pub max_multibulk_len: AtomicUsize,
    pub max_inline_len: AtomicUsize,
    /// Redis' `hz`: active expiry cycles per second (the expiry timer re-reads it every tick).
    pub hz: AtomicU64,
    /// Whether the expiry timer reclaims expired keys nobody reads (`DEBUG SET-ACTIVE-EXPIRE`;
    /// not a setting: on at every start). Off, a key still expires when it is read.
    pub active_expire: std::sync::atomic::AtomicBool,
    /// CONFIG SET maxmemory asked for evictions without a command (Redis' eviction timer,
    /// started by `updateMaxmemory`): the expiry timer evicts while this is set and the server
    /// is over the limit, and clears it once under it or when nothing can be evicted.
    pub evict_pending: std::sync::atomic::AtomicBool,
    /// `maxmemory-clients` as Redis keeps it: bytes when positive, a percentage of maxmemory
    /// when negative, 0 for none (see `crate::quota::client_eviction_limit`).
    pub maxmemory_clients: AtomicI64,
    /// Scripts may run commands flagged `noscript` (`DEBUG SET-DISABLE-DENY-SCRIPTS`, for test
    /// suites: DEBUG PROTOCOL from a script); off at every start.
    pub disable_deny_scripts: std::sync::atomic::AtomicBool,
    /// Most bytes one connection may hold of a request not yet complete (its unparsed input and
    /// the arguments already decoded); past it the connection is closed.
    pub client_query_buffer_limit: AtomicUsize,
    pub requirepass: Mutex<String>,
    pub hll_sparse_max_bytes: AtomicUsize,
    /// What the TLS configuration is built from (see [`crate::tls`]).
    pub tls_cert_file: Mutex<String>,
    pub tls_key_file: Mutex<String>,
    pub tls_client_cert_file: Mutex<String>,
    pub tls_client_key_file: Mutex<String>,
    pub tls_ca_cert_file: Mutex<String>,
    pub tls_auth_clients: Mutex<String>,
    pub tls_protocols: Mutex<Vec<String>>,
    /// `tls-replication`: the next link to a primary is a TLS connection.
    pub tls_replication: std::sync::atomic::AtomicBool,
    /// Redis' `save` points, as CONFIG SET left them (no effect here).
    pub save: Mutex<String>,
    /// The log's filter as last set (`crate::logging`).
    pub loglevel: Mutex<String>,
    /// Redis' encoding knobs: every write reads them to decide a value's encoding (see
    /// `command::lists::list_limit`, `sets::set_limits`, `hashes::hash_limits`,
    /// `zsets::zset_limits`); `list-compress-depth` is only reported.
    pub list_max_listpack_size: AtomicI64,
    pub list_compress_depth: AtomicU64,
    pub set_max_intset_entries: AtomicU64,
    pub stream_node_max_bytes: AtomicU64,
    pub stream_node_max_entries: AtomicU64,
    pub set_max_listpack_entries: AtomicU64,
    pub set_max_listpack_value: AtomicU64,
    pub hash_max_listpack_entries: AtomicU64,
    pub hash_max_listpack_value: AtomicU64,
    pub zset_max_listpack_entries: AtomicU64,
    pub zset_max_listpack_value: AtomicU64,
    /// `slowlog-log-slower-than`, microseconds (negative: off; 0: every command).
    pub slowlog_log_slower_than: AtomicI64,
    /// `slowlog-max-len`.
    pub slowlog_max_len: AtomicU64,
    /// `busy-reply-threshold`: the script time limit, in ms (0: none).
    pub busy_reply_threshold: AtomicU64,
    /// `timeout`: seconds a client may stay idle before it is closed (0: never).
    pub timeout: AtomicU64,
    /// `latency-monitor-threshold`, milliseconds (0: off).
    pub latency_monitor_threshold: AtomicU64,
    /// `latency-tracking` (put in force in `observe::cmdstats`) and the percentiles INFO
    /// latencystats shows.
    pub latency_tracking: std::sync::atomic::AtomicBool,
    pub latency_percentiles: Mutex<Vec<f64>>,
    /// `client-output-buffer-limit`, shared with the pub/sub tables that enforce it.
    pub output_limits: std::sync::Arc<crate::pubsub::OutputLimits>,
    /// `notify-keyspace-events` as `notify` class bits.
    pub notify_flags: std::sync::atomic::AtomicU32,
    pub tracking_table_max_keys: AtomicU64,
    /// The replication settings, shared with `repl::Repl`, which reads them.
    pub repl: std::sync::Arc<crate::repl::ReplSettings>,
}

impl LiveSettings {
    /// The request decoder limits in force now.
    pub fn limits(&self) -> Limits {
        Limits {
            max_bulk_len: self.proto_max_bulk_len.load(Ordering::Relaxed),
            max_array_len: self.max_multibulk_len.load(Ordering::Relaxed),
            max_inline_len: self.max_inline_len.load(Ordering::Relaxed),
        }
    }
}

/// Everything connections share.
pub struct Shared {
    pub store: Store,
    /// The configuration the server started with (`port`: the one bound; CONFIG GET reads live
    /// values from `live`).
    pub config: Config,
    pub config_file: Option<std::path::PathBuf>,
    pub live: LiveSettings,
    pub clients: ClientRegistry,
    pub stats: Stats,
    pub started: Instant,
    pub started_unix: u64,
    /// INFO's `run_id`: 40 random hex digits, new at every start (Redis Sentinel tells a restart
    /// of a monitored server by it).
    pub run_id: String,
    /// The port actually bound (differs from config when it was 0).
    pub port: AtomicUsize,
    /// Held while a write is applied and appended, so log order = application order (a queue
    /// push and a hash update: short, never held across an `.await`).
    pub write_order: Mutex<()>,
    /// Each tenant's function libraries (FUNCTION LOAD; FCALL reads them).
    pub functions: crate::functions::Registry,
    /// Clients blocked in BLPOP & co., by key.
    pub blocked: crate::blocking::BlockTable,
    /// Native session locks (in memory only; empty after a restart).
    pub locks: gradus_store::locks::LockTable,
    /// The log, degrees and snapshot state.
    pub persist: crate::persist::Persistence,
    /// Tenants, their keyspaces and users (fixed at startup).
    pub tenancy: crate::tenancy::Tenancy,
    /// Failed AUTH attempts per source address.
    pub auth_throttle: crate::tenancy::AuthThrottle,
    /// BGSAVE asks the snapshot task to run now.
    pub snapshot_request: tokio::sync::Notify,
    /// Flips to true once shutdown begins; connections and the acceptor watch it.
    pub shutdown: watch::Sender<bool>,
    /// memcached-protocol statistics and the pending delayed `flush_all`.
    pub memcache: crate::memcache::stats::McShared,
    /// The TLS configuration new TLS connections are accepted with (empty: no TLS port).
    pub tls: crate::tls::TlsState,
    /// ACL users (ACL SETUSER, the aclfile) and the ACL LOG.
    pub acl: crate::tenancy::acl_users::AclUsers,
    /// Command statistics, the slow log and the latency monitor (see `observe`).
    pub observer: crate::observe::Observer,
    /// Pub/sub subscriptions and the output limits of subscribed connections.
    pub pubsub: crate::pubsub::PubSub,
    /// Client-side caching: tracking connections and the keys they may cache.
    pub tracking: crate::tracking::Tracking,
    /// Connections in MONITOR.
    pub monitors: crate::monitor::Monitors,
    /// Replication: role, ids, offset, backlog, replicas (see `repl`).
    pub repl: crate::repl::Repl,
    /// CLIENT PAUSE and FAILOVER's pause of writes (see `pause`).
    pub pauses: crate::pause::Pauses,
    /// FAILOVER's switchover in progress (see `repl::failover`).
    pub failover: crate::repl::failover::Failover,
    /// MIGRATE's idle connections to its targets (see `migrate`).
    pub migrate_sockets: crate::migrate::SocketCache,
}

impl Shared {
    pub fn new(
        config: Config,
        config_file: Option<std::path::PathBuf>,
        tenancy: crate::tenancy::Tenancy,
    ) -> Self {
        let degrees = tenancy.degrees();
        let live = LiveSettings {
            maxclients: AtomicUsize::new(0),
            maxmemory: AtomicUsize::new(0),
            maxmemory_policy: std::sync::atomic::AtomicU8::new(0),
            lfu_log_factor: AtomicU64::new(0),
            lfu_decay_time: AtomicU64::new(0),
            maxmemory_samples: AtomicU64::new(5),
            proto_max_bulk_len: AtomicUsize::new(0),
            max_multibulk_len: AtomicUsize::new(0),
            max_inline_len: AtomicUsize::new(0),
            hz: AtomicU64::new(0),
            active_expire: std::sync::atomic::AtomicBool::new(true),
            evict_pending: std::sync::atomic::AtomicBool::new(false),
            maxmemory_clients: AtomicI64::new(0),
            disable_deny_scripts: std::sync::atomic::AtomicBool::new(false),
            client_query_buffer_limit: AtomicUsize::new(0),
            requirepass: Mutex::new(String::new()),
            hll_sparse_max_bytes: AtomicUsize::new(0),
            tls_cert_file: Mutex::new(String::new()),
            tls_key_file: Mutex::new(String::new()),
            tls_client_cert_file: Mutex::new(String::new()),
            tls_client_key_file: Mutex::new(String::new()),
            tls_ca_cert_file: Mutex::new(String::new()),
            tls_auth_clients: Mutex::new(String::new()),
            tls_protocols: Mutex::new(Vec::new()),
            tls_replication: std::sync::atomic::AtomicBool::new(false),
            save: Mutex::new(String::new()),
            loglevel: Mutex::new(String::new()),
            list_max_listpack_size: AtomicI64::new(0),
            list_compress_depth: AtomicU64::new(0),
            set_max_intset_entries: AtomicU64::new(0),
            stream_node_max_bytes: AtomicU64::new(0),
            stream_node_max_entries: AtomicU64::new(0),
            set_max_listpack_entries: AtomicU64::new(0),
            set_max_listpack_value: AtomicU64::new(0),
            hash_max_listpack_entries: AtomicU64::new(0),
            hash_max_listpack_value: AtomicU64::new(0),
            zset_max_listpack_entries: AtomicU64::new(0),
            zset_max_listpack_value: AtomicU64::new(0),
            slowlog_log_slower_than: AtomicI64::new(0),
            slowlog_max_len: AtomicU64::new(0),
            busy_reply_threshold: AtomicU64::new(0),
            timeout: AtomicU64::new(0),
            latency_monitor_threshold: AtomicU64::new(0),
            latency_tracking: std::sync::atomic::AtomicBool::new(true),
            latency_percentiles: Mutex::new(vec![50.0, 99.0, 99.9]),
            output_limits: Default::default(),
            notify_flags: Default::default(),
            tracking_table_max_keys: AtomicU64::new(0),
            repl: Default::default(),
        };
        crate::settings::init_live(&live, &config);
        let observer = crate::observe::Observer::default();
        observer
            .commands
            .set_tracking(live.latency_tracking.load(Ordering::Relaxed));
        let live_limits = live.output_limits.clone();
        let (shutdown, _) = watch::channel(false);
        let persist = crate::persist::Persistence {
            // Set by start-up recovery, which replays into this state before the log exists.
            log: std::sync::OnceLock::new(),
            logged: degrees.iter().any(|d| d.is_logged()),
            flush_groups: (0..degrees.len())
                .map(|g| tenancy.tenant_of(g).unwrap_or(usize::MAX))
                .collect(),
            degrees,
            snapshot_in_progress: Default::default(),
            last_save_unix: AtomicU64::new(crate::persist::unix_now()),
            bytes_at_last_snapshot: AtomicU64::new(0),
            last_snapshot_bytes: AtomicU64::new(crate::info::data_dir_sizes(&config.dir).1),
            last_snapshot_status: Mutex::new("ok".into()),
            snapshot_failures: AtomicU64::new(0),
            snapshot_requested: std::sync::atomic::AtomicBool::new(false),
            last_snapshot_arm_micros: AtomicU64::new(0),
            last_snapshot_max_copy_micros: AtomicU64::new(0),
            last_snapshot_max_hold_micros: AtomicU64::new(0),
            snapshots_written: AtomicU64::new(0),
            snapshot_started_ms: AtomicU64::new(0),
            last_snapshot_millis: AtomicU64::new(u64::MAX),
            recovery: Default::default(),
            dir_lock: Mutex::new(None),
            strict_waiters: std::sync::atomic::AtomicUsize::new(0),
        };
        let tenant_count = tenancy.tenants.len();
        let repl = crate::repl::Repl::new(
            crate::tenancy::layout_fingerprint(&tenancy),
            live.repl.clone(),
        );
        // Keys' access data is LRU or LFU data from the first key on (recovery loads into it).
        let store = Store::new(tenancy.keyspace_count());
        store.set_access_clock(crate::quota::access_clock(&live));
        Self {
            store,
            tenancy,
            auth_throttle: Default::default(),
            port: AtomicUsize::new(config.port as usize),
            config,
            config_file,
            live,
            clients: ClientRegistry::default(),
            stats: Stats::default(),
            started: Instant::now(),
            started_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            persist,
            write_order: Mutex::new(()),
            functions: crate::functions::Registry::new(tenant_count),
            locks: gradus_store::locks::LockTable::new(),
            blocked: Default::default(),
            snapshot_request: tokio::sync::Notify::new(),
            shutdown,
            memcache: Default::default(),
            tls: Default::default(),
            acl: Default::default(),
            observer,
            pubsub: crate::pubsub::PubSub::new(live_limits),
            tracking: Default::default(),
            monitors: Default::default(),
            repl,
            pauses: Default::default(),
            failover: Default::default(),
            migrate_sockets: Default::default(),
            run_id: crate::repl::new_id(),
        }
    }

    /// True when clients must authenticate before other commands.
    pub fn auth_required(&self) -> bool {
        self.tenancy.multi_tenant || !self.live.requirepass.lock().is_empty()
    }

    /// Set (or extend) `purpose`'s pause ([`crate::pause::Pauses::pause`]) and hold expiry for
    /// as long as any pause lasts: Redis 7.2 deletes no expired key while writes are paused
    /// (reads see it as absent), so no DEL reaches the log or a replica.
    pub fn pause(
        &self,
        purpose: crate::pause::PausePurpose,
        mode: crate::pause::PauseMode,
        end_ms: u64,
        now_ms: u64,
    ) {
        self.pauses.pause(purpose, mode, end_ms, now_ms);
        self.store
            .hold_expiry_until(self.pauses.expiry_held_until(now_ms));
    }

    /// Lift `purpose`'s pause, and the hold of expiry with the last pause.
    pub fn unpause(&self, purpose: crate::pause::PausePurpose) {
        self.pauses.unpause(purpose);
        self.store
            .hold_expiry_until(self.pauses.expiry_held_until(gradus_store::now_ms()));
    }

    /// Begin a graceful shutdown (SIGINT, SIGTERM, SHUTDOWN).
    pub fn request_shutdown(&self) {
        self.shutdown.send_replace(true);
        // Connections between batches wait on their own waker, not on this signal.
        for handle in self.clients.all() {
            handle.wake();
        }
    }
}
