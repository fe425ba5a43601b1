//! Configuration: the built-in defaults, an optional TOML file, and command-line flags, in that
//! order of precedence (flags win). Which scalar settings exist, their types, defaults, flags and
//! docs is the settings table ([`crate::settings::SETTINGS`]); this module holds the structure they
//! are stored in, reads the file and flags through the table, and checks what no single row can
//! (addresses, cross-setting limits). The nested sections (`[durability] databases`, `[[tenants]]`,
//! `[[users]]`) are read with serde.
//!
//! This module only parses and validates; it does not open sockets or files other than the config.
//!
//! May import: `settings`, `error`.

use crate::error::ServerError;
use crate::settings::{self, Section, SETTINGS};
use clap::Parser;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The largest `memcached-item-size-max`: an item is logged as one record, so it must fit in one
/// with its key and headers (memcached itself allows 1 GiB).
pub const MAX_ITEM_SIZE: usize = gradus_log::format::MAX_RECORD_LEN - (1 << 20);

/// The server's configuration. Its scalar fields are the rows of the settings table, which reads
/// and writes them; the nested sections are read by serde.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub bind: Vec<String>,
    pub port: u16,
    pub dir: PathBuf,
    pub maxclients: usize,
    pub maxmemory: usize,
    pub maxmemory_policy: String,
    pub lfu_log_factor: u64,
    pub lfu_decay_time: u64,
    /// Keys each eviction samples (Redis' `maxmemory-samples`).
    pub maxmemory_samples: u64,
    pub requirepass: String,
    pub databases: usize,
    pub proto_max_bulk_len: usize,
    pub max_multibulk_len: usize,
    pub max_inline_len: usize,
    pub client_query_buffer_limit: usize,
    pub hz: u32,
    pub threads: usize,
    /// Transparent huge pages off for the process (Redis' `disable-thp`; see
    /// [`crate::alloc::disable_thp`]).
    pub disable_thp: bool,
    /// Redis' `enable-debug-command`: whether DEBUG runs (`yes`), only from a loopback
    /// connection (`local`), or never (`no`, the default).
    pub enable_debug_command: String,
    pub loglevel: String,
    pub memcached_port: u16,
    pub memcached_db: usize,
    /// The tenant whose keyspace `memcached-db` names (empty: the first; with no tenants, `default`).
    pub memcached_tenant: String,
    pub memcached_item_size_max: usize,
    /// TLS port for RESP (0: none) and for memcached (0: none); see [`crate::tls`].
    pub tls_port: u16,
    pub memcached_tls_port: u16,
    pub tls_cert_file: String,
    pub tls_key_file: String,
    /// What a replica presents to its primary with `tls-replication` (see [`crate::tls`]).
    pub tls_client_cert_file: String,
    pub tls_client_key_file: String,
    pub tls_ca_cert_file: String,
    /// `yes`, `optional` or `no`.
    pub tls_auth_clients: String,
    pub tls_protocols: Vec<String>,
    /// A replica's link to its primary is a TLS connection (see [`crate::tls::build_client`]).
    pub tls_replication: bool,
    /// Redis' users file (ACL users, `ACL SAVE`/`ACL LOAD`); empty: none.
    pub aclfile: String,
    pub hll_sparse_max_bytes: usize,
    /// Redis' RDB save points (`save`): accepted and reported, no effect here.
    pub save: String,
    pub list_max_listpack_size: i64,
    pub list_compress_depth: u64,
    pub set_max_intset_entries: u64,
    pub stream_node_max_bytes: u64,
    pub stream_node_max_entries: u64,
    pub set_max_listpack_entries: u64,
    pub set_max_listpack_value: u64,
    pub hash_max_listpack_entries: u64,
    pub hash_max_listpack_value: u64,
    pub zset_max_listpack_entries: u64,
    pub zset_max_listpack_value: u64,
    pub slowlog_log_slower_than: i64,
    pub slowlog_max_len: u64,
    /// Milliseconds a script may run before it is stopped (`busy-reply-threshold`).
    pub busy_reply_threshold: u64,
    /// Seconds a client may stay idle before it is closed (`timeout`; 0: never).
    pub timeout: u64,
    pub latency_monitor_threshold: u64,
    /// Per-command latency histograms (`latency-tracking`) and the percentiles INFO
    /// latencystats shows of them.
    pub latency_tracking: bool,
    pub latency_tracking_info_percentiles: String,
    pub metrics_port: u16,
    pub metrics_bind: Vec<String>,
    pub client_output_buffer_limit: String,
    /// `maxmemory-clients`: bytes, or `N%` of maxmemory; `0`: no limit.
    pub maxmemory_clients: String,
    pub notify_keyspace_events: String,
    pub tracking_table_max_keys: u64,
    pub replicaof: String,
    pub masterauth: String,
    pub masteruser: String,
    pub replica_read_only: bool,
    pub replica_serve_stale_data: bool,
    pub replica_priority: u64,
    pub replica_announce_ip: String,
    pub replica_announce_port: u64,
    pub replica_announced: bool,
    pub repl_backlog_size: u64,
    pub min_replicas_to_write: u64,
    pub min_replicas_max_lag: u64,
    pub repl_ping_replica_period: u64,
    pub repl_timeout: u64,
    pub durability: DurabilityConfig,
    /// `[[tenants]]`: when present, every connection authenticates as a tenant's user.
    pub tenants: Vec<TenantConfig>,
    /// `[[users]]`: users outside any tenant's own list (e.g. the global admin).
    pub users: Vec<UserConfig>,
}

/// One `[[tenants]]` entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TenantConfig {
    pub name: String,
    /// Total for all the tenant's keyspaces (bytes, or a size such as "256mb"); absent = none.
    #[serde(default, deserialize_with = "size_opt")]
    pub memory_limit: Option<String>,
    #[serde(default)]
    pub users: Vec<UserConfig>,
    #[serde(default)]
    pub keyspaces: Vec<KeyspaceConfig>,
    /// The keyspace (by name) the memcached port serves to the tenant's users once they log in;
    /// absent: only the tenant named by `memcached-tenant` has one (`memcached-db`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memcached_keyspace: Option<String>,
}

/// A user: `[[tenants.users]]` or `[[users]]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct UserConfig {
    pub name: String,
    /// A hash printed by `gradus passwd` (never the password itself).
    pub password: String,
    /// Any of read, write, flush, admin (admin implies the others).
    pub permissions: Vec<String>,
    /// For `[[users]]`: the tenant whose keyspaces the user works in (default: the first).
    #[serde(default)]
    pub tenant: Option<String>,
}

/// A `[[tenants.keyspaces]]` entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct KeyspaceConfig {
    pub name: String,
    /// The `SELECT` index that reaches it.
    pub select: usize,
    /// none | lazy | background | strict (default: `[durability] default`).
    #[serde(default)]
    pub durability: Option<String>,
    /// `lru` (a cache: evict when over the limit) or `none` (reject writes with OOM).
    #[serde(default)]
    pub eviction: Option<String>,
    #[serde(default, deserialize_with = "size_opt")]
    pub memory_limit: Option<String>,
}

/// An integer or a string, kept as text: a size ("64mb", or bytes) or a word ("always").
fn size_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        N(u64),
        S(String),
    }
    Ok(Option::<Size>::deserialize(d)?.map(|s| match s {
        Size::N(n) => n.to_string(),
        Size::S(s) => s,
    }))
}

/// The `[durability]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct DurabilityConfig {
    pub default: String,
    /// Per-database degrees by SELECT index (a nested map, not a settings row).
    pub databases: std::collections::BTreeMap<String, String>,
    pub lazy_flush_ms: u64,
    pub background_fsync_ms: u64,
    pub strict_linger_us: u64,
    /// "always", "never", or a number of seconds (see [`Config::zero_fill_window`]).
    pub zero_fill: String,
    pub segment_bytes: u64,
    pub direct_io: bool,
    pub snapshot_log_bytes: u64,
    pub snapshot_log_percentage: u64,
    pub snapshot_interval_s: u64,
    pub snapshot_compression: bool,
}

/// Command-line flags of `gradus`.
#[derive(Debug, Parser, Default)]
#[command(
    name = "gradus",
    version,
    about = "Gradus: a cache and session store speaking the Redis protocol, with degrees of durability.",
    long_about = "Gradus: a cache and session store speaking the Redis protocol (RESP2/RESP3).\n\n\
                  With no flags it runs with the built-in defaults: listening on 127.0.0.1:6379. \
                  Settings come from the defaults, then --config FILE, then the flags below. \
                  `gradus --print-config` prints the settings in force as a TOML file, every one documented."
)]
pub struct Cli {
    /// TOML configuration file (any subset of the settings; see --print-config).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// One flag per settings row that has one (`--port`, `--maxclients`, ...).
    #[command(flatten)]
    pub settings: SettingFlags,
    /// Start even if the log is corrupt in the middle: keep the valid prefix and report what was dropped.
    #[arg(long)]
    pub repair: bool,
    /// Print the configuration in force (defaults, then --config, then flags) as a TOML file with
    /// every setting documented, and exit.
    #[arg(long)]
    pub print_config: bool,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The setting flags given, in the settings table's order: (setting name, value as text; a
/// repeated flag's values separated by spaces).
#[derive(Debug, Clone, Default)]
pub struct SettingFlags(pub Vec<(&'static str, String)>);

impl clap::FromArgMatches for SettingFlags {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut given = Vec::new();
        for s in SETTINGS.iter().filter(|s| s.flag.is_some()) {
            if let Some(values) = m.get_many::<String>(s.name) {
                let values: Vec<&str> = values.map(String::as_str).collect();
                given.push((s.name, values.join(" ")));
            }
        }
        Ok(SettingFlags(given))
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl clap::Args for SettingFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        SETTINGS.iter().fold(cmd, |cmd, s| {
            let Some(flag) = s.flag else { return cmd };
            let default = match s.default {
                "" => "empty".to_string(),
                d => d.to_string(),
            };
            let list = matches!(s.kind, settings::Kind::List);
            let mut arg = clap::Arg::new(s.name)
                .long(s.name)
                .value_name(flag.value_name)
                .help(format!("{} [default: {default}]", s.doc))
                .action(if list {
                    clap::ArgAction::Append
                } else {
                    clap::ArgAction::Set
                });
            if let Some(c) = flag.short {
                arg = arg.short(c);
            }
            cmd.arg(arg)
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// Subcommands of `gradus` (with none, it runs the server).
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Print the hash of a password for a user's `password` in the config (reads the password
    /// from the first line of stdin when not given).
    Passwd {
        /// The password (prefer stdin: arguments show up in the process list).
        password: Option<String>,
    },
}

impl Config {
    /// Every field empty or zero: what [`settings::defaults`] fills in from the table.
    pub(crate) fn blank() -> Config {
        Config {
            bind: Vec::new(),
            port: 0,
            dir: PathBuf::new(),
            maxclients: 0,
            maxmemory: 0,
            maxmemory_policy: String::new(),
            lfu_log_factor: 0,
            lfu_decay_time: 0,
            maxmemory_samples: 0,
            requirepass: String::new(),
            databases: 0,
            proto_max_bulk_len: 0,
            max_multibulk_len: 0,
            max_inline_len: 0,
            client_query_buffer_limit: 0,
            hz: 0,
            threads: 0,
            disable_thp: false,
            enable_debug_command: String::new(),
            loglevel: String::new(),
            memcached_port: 0,
            memcached_db: 0,
            memcached_tenant: String::new(),
            memcached_item_size_max: 0,
            tls_port: 0,
            memcached_tls_port: 0,
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            tls_client_cert_file: String::new(),
            tls_client_key_file: String::new(),
            tls_ca_cert_file: String::new(),
            tls_auth_clients: String::new(),
            tls_protocols: Vec::new(),
            tls_replication: false,
            aclfile: String::new(),
            hll_sparse_max_bytes: 0,
            save: String::new(),
            list_max_listpack_size: 0,
            list_compress_depth: 0,
            set_max_intset_entries: 0,
            stream_node_max_bytes: 0,
            stream_node_max_entries: 0,
            set_max_listpack_entries: 0,
            set_max_listpack_value: 0,
            hash_max_listpack_entries: 0,
            hash_max_listpack_value: 0,
            zset_max_listpack_entries: 0,
            zset_max_listpack_value: 0,
            slowlog_log_slower_than: 0,
            slowlog_max_len: 0,
            busy_reply_threshold: 0,
            timeout: 0,
            latency_monitor_threshold: 0,
            latency_tracking: false,
            latency_tracking_info_percentiles: String::new(),
            metrics_port: 0,
            metrics_bind: Vec::new(),
            client_output_buffer_limit: String::new(),
            maxmemory_clients: String::new(),
            notify_keyspace_events: String::new(),
            tracking_table_max_keys: 0,
            replicaof: String::new(),
            masterauth: String::new(),
            masteruser: String::new(),
            replica_read_only: false,
            replica_serve_stale_data: false,
            replica_priority: 0,
            replica_announce_ip: String::new(),
            replica_announce_port: 0,
            replica_announced: false,
            repl_backlog_size: 0,
            min_replicas_to_write: 0,
            min_replicas_max_lag: 0,
            repl_ping_replica_period: 0,
            repl_timeout: 0,
            durability: DurabilityConfig {
                default: String::new(),
                databases: Default::default(),
                lazy_flush_ms: 0,
                background_fsync_ms: 0,
                strict_linger_us: 0,
                zero_fill: String::new(),
                segment_bytes: 0,
                direct_io: false,
                snapshot_log_bytes: 0,
                snapshot_log_percentage: 0,
                snapshot_interval_s: 0,
                snapshot_compression: false,
            },
            tenants: Vec::new(),
            users: Vec::new(),
        }
    }

    /// The built-in defaults: every settings row at its default, no tenants or users (the text of
    /// `crates/server/gradus.toml`).
    pub fn embedded() -> Config {
        settings::defaults()
    }

    /// Defaults, then the file named by `--config` (if any), then the flags.
    pub fn load(cli: &Cli) -> Result<Config, ServerError> {
        let mut config = Config::embedded();
        if let Some(path) = &cli.config {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ServerError::Config(format!("cannot read {}: {e}", path.display())))?;
            config
                .merge_toml(&text)
                .map_err(|e| ServerError::Config(format!("{}: {e}", path.display())))?;
        }
        config.apply_cli(cli)?;
        config.validate()?;
        // redis-server's rule: `port 0` opens no plain listener, so with no TLS port either the
        // server would be unreachable (Gradus used to ask the OS for a random port instead).
        // Only the binary's configuration is held to it: in-process servers bind port 0 to get
        // a free port (see `Server::bind`).
        if config.port == 0 && config.tls_port == 0 {
            return Err(ServerError::Config(
                "Configured to not listen anywhere, exiting. (port 0 opens no RESP listener: \
                 set port or tls-port)"
                    .into(),
            ));
        }
        Ok(config)
    }

    /// Overlay the settings present in a TOML text (all of them, or none when one is wrong).
    pub fn merge_toml(&mut self, text: &str) -> Result<(), String> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
        let mut next = self.clone();
        for (key, value) in table {
            match key.as_str() {
                "durability" => {
                    let toml::Value::Table(section) = value else {
                        return Err("durability: expected a [durability] table".into());
                    };
                    for (key, value) in section {
                        if key == "databases" {
                            next.durability.databases = value
                                .try_into()
                                .map_err(|e| format!("durability.databases: {e}"))?;
                        } else {
                            next.set_toml(Section::Durability, &key, &value)?;
                        }
                    }
                }
                "tenants" => {
                    next.tenants = value.try_into().map_err(|e| format!("tenants: {e}"))?;
                }
                "users" => {
                    next.users = value.try_into().map_err(|e| format!("users: {e}"))?;
                }
                _ => next.set_toml(Section::Top, &key, &value)?,
            }
        }
        *self = next;
        Ok(())
    }

    /// Set the row whose TOML key is `key` in `section` from a TOML value.
    fn set_toml(&mut self, section: Section, key: &str, value: &toml::Value) -> Result<(), String> {
        let path = match section.header() {
            None => key.to_string(),
            Some(h) => format!("{h}.{key}"),
        };
        let s =
            settings::by_key(section, key).ok_or_else(|| format!("unknown setting `{path}`"))?;
        let v = s
            .kind
            .from_toml(value)
            .map_err(|e| format!("{path}: {e}"))?;
        (s.field.put)(self, v).map_err(|e| format!("{path}: {e}"))
    }

    fn apply_cli(&mut self, cli: &Cli) -> Result<(), ServerError> {
        for (name, text) in &cli.settings.0 {
            let s = settings::find(name).expect("flags are made from the settings table");
            s.set_text(self, text)
                .map_err(|e| ServerError::Config(format!("--{name} {text:?}: {e}")))?;
        }
        Ok(())
    }

    /// Reject settings the server cannot run with, saying which and why.
    pub fn validate(&self) -> Result<(), ServerError> {
        let bad = |msg: &str| Err(ServerError::Config(msg.to_string()));
        for s in SETTINGS {
            s.kind
                .check(s.get(self))
                .map_err(|e| ServerError::Config(format!("{}: {e}", s.toml_path())))?;
        }
        if let Err(e) = crate::logging::filter(&self.loglevel) {
            return Err(ServerError::Config(format!("loglevel: {e}")));
        }
        if self.bind.is_empty() {
            return bad("bind must name at least one address");
        }
        for addr in &self.bind {
            if addr.parse::<std::net::IpAddr>().is_err() {
                return Err(ServerError::Config(format!(
                    "bind address {addr:?} is not an IP address"
                )));
            }
        }
        for addr in &self.bind {
            let ip: std::net::IpAddr = addr.parse().expect("checked above");
            let authenticated = !self.requirepass.is_empty() || !self.tenants.is_empty();
            if !ip.is_loopback() && !authenticated {
                return Err(ServerError::Config(format!(
                    "refusing to listen on {addr}, which is not a loopback address, with no \
                     authentication configured: set requirepass or declare [[tenants]] with users \
                     (see examples/tenants.toml), or bind to 127.0.0.1"
                )));
            }
        }
        if self.tenants.is_empty() && self.memcached_db >= self.databases {
            return bad("memcached-db must be below databases");
        }
        self.default_degree()?;
        for (db, degree) in &self.durability.databases {
            match db.parse::<usize>() {
                Ok(i) if i < self.databases => {}
                _ => {
                    return Err(ServerError::Config(format!(
                        "durability.databases: {db:?} is not a database index below {}",
                        self.databases
                    )))
                }
            }
            parse_degree(degree)?;
        }
        self.zero_fill_window()?;
        Ok(())
    }
}

fn parse_degree(s: &str) -> Result<gradus_log::Durability, ServerError> {
    s.parse().map_err(|_| {
        ServerError::Config(format!(
            "unknown durability degree {s:?} (expected none, lazy, background, strict or replicated)"
        ))
    })
}

/// Worker threads for `threads = n` on a machine with `cores` CPUs: `n` itself, or for 0 one per core
/// minus one, at least one. The spare core is the kernel's network work, the log writer and the
/// clients that share small machines: on 2 cores, one worker matched or beat two on every
/// pipelined line and on TLS, and tied unpipelined (`docs/benchmarks/threads.md`).
pub fn worker_threads(configured: usize, cores: usize) -> usize {
    match configured {
        0 => cores.saturating_sub(1).max(1),
        n => n,
    }
}

impl Config {
    /// Worker threads this configuration runs with on this machine (see [`worker_threads`]).
    pub fn effective_threads(&self) -> usize {
        worker_threads(
            self.threads,
            std::thread::available_parallelism().map_or(1, |n| n.get()),
        )
    }

    /// The default degree of every database not listed in `durability.databases`.
    pub fn default_degree(&self) -> Result<gradus_log::Durability, ServerError> {
        parse_degree(&self.durability.default)
    }

    /// The default degree of each database, by index.
    pub fn database_degrees(&self) -> Result<Vec<gradus_log::Durability>, ServerError> {
        let default = self.default_degree()?;
        let mut out = vec![default; self.databases];
        for (db, degree) in &self.durability.databases {
            if let Ok(i) = db.parse::<usize>() {
                if i < out.len() {
                    out[i] = parse_degree(degree)?;
                }
            }
        }
        Ok(out)
    }

    /// Log options from the `[durability]` section.
    pub fn log_options(&self) -> gradus_log::LogOptions {
        let mut o = gradus_log::LogOptions::new(self.dir.clone());
        o.lazy_flush_ms = self.durability.lazy_flush_ms;
        o.background_fsync_ms = self.durability.background_fsync_ms;
        o.segment_bytes = self.durability.segment_bytes;
        o.strict_linger = std::time::Duration::from_micros(self.durability.strict_linger_us);
        o.zero_fill_window = self
            .zero_fill_window()
            .expect("validated: durability.zero-fill");
        o
    }

    /// `durability.zero-fill` as the log's zero fill window: "always" (`Duration::MAX`),
    /// "never" (zero), or N seconds after the last strict write or sync.
    pub fn zero_fill_window(&self) -> Result<std::time::Duration, ServerError> {
        use std::time::Duration;
        match self.durability.zero_fill.as_str() {
            "always" => Ok(Duration::MAX),
            "never" => Ok(Duration::ZERO),
            n => n.parse::<u64>().map(Duration::from_secs).map_err(|_| {
                ServerError::Config(format!(
                    "durability.zero-fill: {n:?} is not \"always\", \"never\" or a number of seconds"
                ))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_threads_leave_one_core_and_keep_at_least_one_worker() {
        assert_eq!(worker_threads(0, 1), 1);
        assert_eq!(worker_threads(0, 2), 1);
        assert_eq!(worker_threads(0, 16), 15);
        assert_eq!(worker_threads(3, 2), 3);
    }

    #[test]
    fn embedded_default_is_loopback_6379() {
        let c = Config::embedded();
        assert_eq!(c.bind, vec!["127.0.0.1".to_string()]);
        assert_eq!(c.port, 6379);
        assert_eq!(c.proto_max_bulk_len, 512 * 1024 * 1024);
        assert_eq!(c.client_query_buffer_limit, 1024 * 1024 * 1024);
        c.validate().unwrap();
    }

    #[test]
    fn file_then_flags() {
        let mut c = Config::embedded();
        c.merge_toml("port = 7000\nmaxclients = 5\n").unwrap();
        assert_eq!(c.port, 7000);
        let cli = Cli::parse_from([
            "gradus",
            "--port",
            "7001",
            "--bind",
            "::1",
            "--bind",
            "127.0.0.1",
        ]);
        c.apply_cli(&cli).unwrap();
        assert_eq!(c.bind, vec!["::1".to_string(), "127.0.0.1".to_string()]);
        assert_eq!(c.port, 7001);
        assert_eq!(c.maxclients, 5);
    }

    #[test]
    fn durability_defaults_and_overrides() {
        let mut c = Config::embedded();
        assert_eq!(
            c.default_degree().unwrap(),
            gradus_log::Durability::Background
        );
        c.merge_toml("[durability]\ndefault = \"strict\"\ndatabases = { \"1\" = \"none\" }\n")
            .unwrap();
        c.validate().unwrap();
        let d = c.database_degrees().unwrap();
        assert_eq!(d[0], gradus_log::Durability::Strict);
        assert_eq!(d[1], gradus_log::Durability::None);
        assert_eq!(c.durability.background_fsync_ms, 10);
        assert_eq!(c.durability.strict_linger_us, 100);
        assert_eq!(
            c.log_options().zero_fill_window,
            gradus_log::LogOptions::DEFAULT_ZERO_FILL_WINDOW
        );
        assert_eq!(c.log_options().zero_fill_window, std::time::Duration::MAX);
        for (value, window) in [
            ("\"never\"", std::time::Duration::ZERO),
            ("10", std::time::Duration::from_secs(10)),
            ("\"always\"", std::time::Duration::MAX),
        ] {
            c.merge_toml(&format!("[durability]\nzero-fill = {value}\n"))
                .unwrap();
            c.validate().unwrap();
            assert_eq!(c.log_options().zero_fill_window, window, "{value}");
        }
        // A bad value is refused with the file, which then changes nothing.
        let before = c.clone();
        let err = c
            .merge_toml("port = 1\n[durability]\nzero-fill = \"sometimes\"\n")
            .unwrap_err();
        assert!(err.contains("durability.zero-fill"), "{err}");
        let err = c
            .merge_toml("[durability]\ndefault = \"sometimes\"\n")
            .unwrap_err();
        assert!(err.contains("durability.default"), "{err}");
        assert_eq!(c, before);
        // Set directly (not through the table), validate still catches it.
        c.durability.default = "sometimes".into();
        assert!(c.validate().is_err());
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_rejected() {
        let mut c = Config::embedded();
        assert_eq!(
            c.merge_toml("prot = 1").unwrap_err(),
            "unknown setting `prot`"
        );
        assert_eq!(
            c.merge_toml("[durability]\nfsync = 1").unwrap_err(),
            "unknown setting `durability.fsync`"
        );
        assert!(c.merge_toml("port = \"6379\"").is_err());
        assert!(c.merge_toml("port = 70000").is_err());
        assert!(c.merge_toml("[[tenants]]\nnom = \"a\"").is_err());
        c.merge_toml("proto-max-bulk-len = \"8mb\"").unwrap();
        assert_eq!(c.proto_max_bulk_len, 8 << 20);
    }

    #[test]
    fn flags_are_checked_as_the_table_says() {
        let mut c = Config::embedded();
        let cli = Cli::parse_from(["gradus", "--databases", "0"]);
        let err = c.apply_cli(&cli).unwrap_err().to_string();
        assert!(
            err.contains("--databases") && err.contains("between 1 and 1024"),
            "{err}"
        );
        let cli = Cli::parse_from([
            "gradus",
            "--durability",
            "STRICT",
            "--proto-max-bulk-len",
            "1mb",
        ]);
        c.apply_cli(&cli).unwrap();
        assert_eq!(c.durability.default, "strict");
        assert_eq!(c.proto_max_bulk_len, 1 << 20);
    }

    #[test]
    fn bad_values_are_rejected_with_reason() {
        let mut c = Config::embedded();
        c.databases = 0;
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("databases"), "{err}");
        let mut c = Config::embedded();
        c.memcached_item_size_max = MAX_ITEM_SIZE + 1;
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("memcached-item-size-max"), "{err}");
        c.memcached_item_size_max = MAX_ITEM_SIZE;
        assert!(c.validate().is_ok());
    }
}
