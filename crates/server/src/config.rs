//! Configuration: the embedded default file, an optional TOML file, and command-line flags, in that
//! order of precedence (flags win). Names follow redis-server's where one exists.
//!
//! This module only parses and validates; it does not open sockets or files other than the config.

use crate::error::ServerError;
use clap::Parser;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The largest `memcached-item-size-max`: an item is logged as one record, so it must fit in one
/// with its key and headers (memcached itself allows 1 GiB).
pub const MAX_ITEM_SIZE: usize = gradus_log::format::MAX_RECORD_LEN - (1 << 20);

/// The default configuration, embedded in the binary (the same file documents every setting).
pub const DEFAULT_CONFIG_TOML: &str = include_str!("../gradus.toml");

/// Every setting of the server.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    pub bind: Vec<String>,
    pub port: u16,
    pub dir: PathBuf,
    pub maxclients: usize,
    pub requirepass: String,
    pub databases: usize,
    pub proto_max_bulk_len: usize,
    pub max_multibulk_len: usize,
    pub max_inline_len: usize,
    pub hz: u32,
    pub threads: usize,
    pub loglevel: String,
    pub memcached_port: u16,
    pub memcached_db: usize,
    /// The tenant whose keyspace `memcached-db` names (empty: the first; with no tenants, `default`).
    #[serde(default)]
    pub memcached_tenant: String,
    pub memcached_item_size_max: usize,
    pub durability: DurabilityConfig,
    /// `[[tenants]]`: when present, every connection authenticates as a tenant's user.
    #[serde(default)]
    pub tenants: Vec<TenantConfig>,
    /// `[[users]]`: users outside any tenant's own list (e.g. the global admin).
    #[serde(default)]
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

/// [`size_opt`] for a key that must be there: `durability.zero-fill`, a word ("always",
/// "never") or a number of seconds.
fn number_or_word<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    size_opt(d).map(Option::unwrap_or_default)
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
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct DurabilityConfig {
    pub default: String,
    pub databases: std::collections::BTreeMap<String, String>,
    pub lazy_flush_ms: u64,
    pub background_fsync_ms: u64,
    pub strict_linger_us: u64,
    /// "always", "never", or a number of seconds (see [`Config::zero_fill_window`]).
    #[serde(deserialize_with = "number_or_word")]
    pub zero_fill: String,
    pub segment_bytes: u64,
    pub direct_io: bool,
    pub snapshot_log_bytes: u64,
    pub snapshot_interval_s: u64,
    pub snapshot_compression: bool,
}

/// `[durability]` in a file may set any subset of its keys.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct PartialDurability {
    default: Option<String>,
    databases: Option<std::collections::BTreeMap<String, String>>,
    lazy_flush_ms: Option<u64>,
    background_fsync_ms: Option<u64>,
    strict_linger_us: Option<u64>,
    #[serde(default, deserialize_with = "size_opt")]
    zero_fill: Option<String>,
    segment_bytes: Option<u64>,
    direct_io: Option<bool>,
    snapshot_log_bytes: Option<u64>,
    snapshot_interval_s: Option<u64>,
    snapshot_compression: Option<bool>,
}

/// A config file may set any subset of the settings.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct PartialConfig {
    bind: Option<Vec<String>>,
    port: Option<u16>,
    dir: Option<PathBuf>,
    maxclients: Option<usize>,
    requirepass: Option<String>,
    databases: Option<usize>,
    proto_max_bulk_len: Option<usize>,
    max_multibulk_len: Option<usize>,
    max_inline_len: Option<usize>,
    hz: Option<u32>,
    threads: Option<usize>,
    loglevel: Option<String>,
    memcached_port: Option<u16>,
    memcached_db: Option<usize>,
    memcached_tenant: Option<String>,
    memcached_item_size_max: Option<usize>,
    durability: Option<PartialDurability>,
    tenants: Option<Vec<TenantConfig>>,
    users: Option<Vec<UserConfig>>,
}

/// Command-line flags of `gradus`.
#[derive(Debug, Parser, Default)]
#[command(
    name = "gradus",
    version,
    about = "Gradus: a cache and session store speaking the Redis protocol, with degrees of durability.",
    long_about = "Gradus: a cache and session store speaking the Redis protocol (RESP2/RESP3).\n\n\
                  With no flags it runs with the embedded default configuration: listening on \
                  127.0.0.1:6379. Settings come from the embedded defaults, then --config FILE, then \
                  the flags below. `gradus --print-config` shows the default file with every setting documented."
)]
pub struct Cli {
    /// TOML configuration file (any subset of the settings; see --print-config).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on; repeat for several (default 127.0.0.1).
    #[arg(long, value_name = "ADDR")]
    pub bind: Vec<String>,
    /// TCP port for the Redis-protocol listener (default 6379; 0 picks a free port and logs it).
    #[arg(long, short = 'p')]
    pub port: Option<u16>,
    /// Data directory (default ./gradus-data).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Maximum simultaneous client connections (default 10000).
    #[arg(long)]
    pub maxclients: Option<usize>,
    /// Password for the default user; clients must AUTH first.
    #[arg(long, value_name = "PASSWORD")]
    pub requirepass: Option<String>,
    /// Number of databases for SELECT (default 16).
    #[arg(long)]
    pub databases: Option<usize>,
    /// Largest bulk string accepted from a client, in bytes (default 4 MiB).
    #[arg(long, value_name = "BYTES")]
    pub proto_max_bulk_len: Option<usize>,
    /// Largest multibulk element count accepted from a client (default 1048576).
    #[arg(long, value_name = "N")]
    pub max_multibulk_len: Option<usize>,
    /// Longest inline command line, in bytes (default 64 KiB).
    #[arg(long, value_name = "BYTES")]
    pub max_inline_len: Option<usize>,
    /// Active expiry cycles per second (default 10).
    #[arg(long)]
    pub hz: Option<u32>,
    /// Worker threads; 0 = one per core (default 0).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Log level or tracing filter (default info).
    #[arg(long)]
    pub loglevel: Option<String>,
    /// Default durability degree of every database: none, lazy, background or strict (default background).
    #[arg(long, value_name = "DEGREE")]
    pub durability: Option<String>,
    /// TCP port for the memcached-protocol listener (default 11211; 0 disables it).
    #[arg(long, value_name = "PORT")]
    pub memcached_port: Option<u16>,
    /// Database (SELECT index) that the memcached port reads and writes (default 0).
    #[arg(long, value_name = "N")]
    pub memcached_db: Option<usize>,
    /// Largest value accepted over the memcached port, in bytes (default 1 MiB).
    #[arg(long, value_name = "BYTES")]
    pub memcached_item_size_max: Option<usize>,
    /// Start even if the log is corrupt in the middle: keep the valid prefix and report what was dropped.
    #[arg(long)]
    pub repair: bool,
    /// Print the default configuration file (every setting, documented) and exit.
    #[arg(long)]
    pub print_config: bool,
    #[command(subcommand)]
    pub command: Option<Command>,
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
    /// The embedded defaults.
    pub fn embedded() -> Config {
        toml::from_str(DEFAULT_CONFIG_TOML).expect("embedded default config is valid")
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
        config.apply_cli(cli);
        config.validate()?;
        Ok(config)
    }

    /// Overlay the settings present in a TOML text.
    pub fn merge_toml(&mut self, text: &str) -> Result<(), String> {
        let p: PartialConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        macro_rules! overlay {
            ($($field:ident),*) => { $( if let Some(v) = p.$field { self.$field = v; } )* };
        }
        overlay!(
            bind,
            port,
            dir,
            maxclients,
            requirepass,
            databases,
            proto_max_bulk_len,
            max_multibulk_len,
            max_inline_len,
            hz,
            threads,
            loglevel,
            tenants,
            users,
            memcached_port,
            memcached_db,
            memcached_tenant,
            memcached_item_size_max
        );
        if let Some(d) = p.durability {
            let t = &mut self.durability;
            macro_rules! overlay_d {
                ($($field:ident),*) => { $( if let Some(v) = d.$field { t.$field = v; } )* };
            }
            overlay_d!(
                default,
                databases,
                lazy_flush_ms,
                background_fsync_ms,
                strict_linger_us,
                zero_fill,
                segment_bytes,
                direct_io,
                snapshot_log_bytes,
                snapshot_interval_s,
                snapshot_compression
            );
        }
        Ok(())
    }

    fn apply_cli(&mut self, cli: &Cli) {
        if !cli.bind.is_empty() {
            self.bind = cli.bind.clone();
        }
        macro_rules! flag {
            ($($field:ident),*) => { $( if let Some(v) = &cli.$field { self.$field = v.clone(); } )* };
        }
        flag!(
            port,
            dir,
            maxclients,
            requirepass,
            databases,
            proto_max_bulk_len,
            max_multibulk_len,
            max_inline_len,
            hz,
            threads,
            loglevel,
            memcached_port,
            memcached_db,
            memcached_item_size_max
        );
        if let Some(d) = &cli.durability {
            self.durability.default = d.clone();
        }
    }

    /// Reject settings the server cannot run with, saying which and why.
    pub fn validate(&self) -> Result<(), ServerError> {
        let bad = |msg: &str| Err(ServerError::Config(msg.to_string()));
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
        if self.databases == 0 || self.databases > 1024 {
            return bad("databases must be between 1 and 1024");
        }
        if self.maxclients == 0 {
            return bad("maxclients must be at least 1");
        }
        if self.proto_max_bulk_len < 1024 {
            return bad("proto-max-bulk-len must be at least 1024");
        }
        if self.max_multibulk_len == 0 || self.max_inline_len < 64 {
            return bad("max-multibulk-len must be >= 1 and max-inline-len >= 64");
        }
        if self.tenants.is_empty() && self.memcached_db >= self.databases {
            return bad("memcached-db must be below databases");
        }
        if self.memcached_item_size_max < 1024 || self.memcached_item_size_max > MAX_ITEM_SIZE {
            return bad(&format!(
                "memcached-item-size-max must be between 1024 and {MAX_ITEM_SIZE} (the log's record limit less 1 MiB)"
            ));
        }
        if self.hz == 0 || self.hz > 500 {
            return bad("hz must be between 1 and 500");
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
        if self.durability.background_fsync_ms == 0 || self.durability.lazy_flush_ms == 0 {
            return bad("durability: background-fsync-ms and lazy-flush-ms must be at least 1");
        }
        if self.durability.strict_linger_us > 10_000 {
            return bad("durability: strict-linger-us must be at most 10000 (10 ms)");
        }
        self.zero_fill_window()?;
        if self.durability.segment_bytes < 4096 {
            return bad("durability.segment-bytes must be at least 4096");
        }
        Ok(())
    }
}

fn parse_degree(s: &str) -> Result<gradus_log::Durability, ServerError> {
    s.parse().map_err(|_| {
        ServerError::Config(format!(
            "unknown durability degree {s:?} (expected none, lazy, background or strict)"
        ))
    })
}

impl Config {
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
    fn embedded_default_is_loopback_6379() {
        let c = Config::embedded();
        assert_eq!(c.bind, vec!["127.0.0.1".to_string()]);
        assert_eq!(c.port, 6379);
        assert_eq!(c.proto_max_bulk_len, 4 * 1024 * 1024);
        c.validate().unwrap();
    }

    #[test]
    fn file_then_flags() {
        let mut c = Config::embedded();
        c.merge_toml("port = 7000\nmaxclients = 5\n").unwrap();
        assert_eq!(c.port, 7000);
        let cli = Cli {
            port: Some(7001),
            ..Default::default()
        };
        c.apply_cli(&cli);
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
        c.merge_toml("[durability]\nzero-fill = \"sometimes\"\n")
            .unwrap();
        assert!(c.validate().is_err());
        c.merge_toml("[durability]\nzero-fill = \"always\"\n")
            .unwrap();
        c.merge_toml("[durability]\ndefault = \"sometimes\"\n")
            .unwrap();
        assert!(c.validate().is_err());
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let mut c = Config::embedded();
        assert!(c.merge_toml("prot = 1").is_err());
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
