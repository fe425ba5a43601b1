//! The settings table: one row per scalar setting — its name (redis-style kebab-case, also its
//! TOML key and flag), type, default, whether `CONFIG SET` may change it at run time, its flag, a
//! one-line doc, and how to read and write it. Everything that lists settings reads this table:
//! the TOML reader and the flags ([`crate::config`]), `CONFIG GET`/`SET`, `--print-config` (and so
//! `crates/server/gradus.toml`, which is its output) and the README's table (the tests compare
//! both). Redis' `standardConfig static_configs[]` in `config.c` is the model.
//!
//! The nested sections (`[durability] databases`, `[[tenants]]`, `[[users]]`) are not rows: serde
//! reads them into [`Config`] as before. This module may import [`crate::config`] (the structure
//! rows write into), [`crate::state`] (the live values rows read and set), [`crate::repl`] (the
//! role `replicaof` reports, see [`IN_FORCE`]) and [`crate::quota`] (whether a new `maxmemory`
//! is below what is used); it knows nothing of sockets or commands.

use crate::config::{Config, MAX_ITEM_SIZE};
use crate::state::{LiveSettings, Shared};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

/// Where a setting's key lives in the TOML file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// At the top of the file, before any `[section]`.
    Top,
    /// In `[durability]`.
    Durability,
}

impl Section {
    /// The TOML table header, if any.
    pub fn header(self) -> Option<&'static str> {
        match self {
            Section::Top => None,
            Section::Durability => Some("durability"),
        }
    }
}

/// The largest value of an integer setting with no smaller limit (Redis' `LLONG_MAX`).
const UNBOUNDED: u64 = i64::MAX as u64;

/// A setting's type: how its text (flag, `CONFIG SET`, default) is parsed and which values are valid.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// `yes` or `no` (TOML: `true` or `false`).
    Bool,
    /// A whole number in `min..=max`.
    Int { min: u64, max: u64 },
    /// A whole number that may be negative, in `min..=max`.
    Signed { min: i64, max: i64 },
    /// A number of bytes in `min..=max`; text may carry a unit (`64kb`, `4mb`, `1g`: powers of 1024).
    Size { min: u64, max: u64 },
    /// Any text.
    Text,
    /// One of the words (ASCII case-insensitive; kept in lower case).
    Enum(&'static [&'static str]),
    /// One of the words or a whole number (kept as text).
    EnumOrInt(&'static [&'static str]),
    /// A list of words (`CONFIG GET` shows them separated by spaces; TOML: an array of strings).
    List,
    /// Text in a syntax of its own: the function checks it and returns its canonical form, or
    /// Redis' error (`client-output-buffer-limit`, `notify-keyspace-events`).
    Custom(fn(&str) -> Result<String, String>),
}

/// A setting's value, whatever the field's Rust type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Int(u64),
    Signed(i64),
    Bool(bool),
    Text(String),
    List(Vec<String>),
}

impl Value {
    /// As `CONFIG GET` shows it (Redis' forms: `yes`/`no`, lists separated by spaces).
    pub fn text(&self) -> String {
        match self {
            Value::Int(n) => n.to_string(),
            Value::Signed(n) => n.to_string(),
            Value::Bool(b) => if *b { "yes" } else { "no" }.to_string(),
            Value::Text(s) => s.clone(),
            Value::List(items) => items.join(" "),
        }
    }

    /// As a TOML value.
    pub fn toml(&self) -> String {
        match self {
            Value::Int(n) => n.to_string(),
            Value::Signed(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Text(s) => toml::Value::String(s.clone()).to_string(),
            Value::List(items) => {
                let quoted: Vec<String> = items
                    .iter()
                    .map(|s| toml::Value::String(s.clone()).to_string())
                    .collect();
                format!("[{}]", quoted.join(", "))
            }
        }
    }
}

impl Kind {
    /// Parse a value given as text (a flag, `CONFIG SET`, a row's default). Errors are Redis'
    /// `CONFIG SET` texts.
    pub fn parse(self, text: &str) -> Result<Value, String> {
        let v = match self {
            Kind::Bool => match text.to_ascii_lowercase().as_str() {
                "yes" => Value::Bool(true),
                "no" => Value::Bool(false),
                _ => return Err("argument must be 'yes' or 'no'".into()),
            },
            Kind::Int { .. } => match text.parse::<i64>() {
                Ok(n) if n >= 0 => Value::Int(n as u64),
                Ok(_) => return Err(self.range_error()),
                Err(_) => return Err("argument couldn't be parsed into an integer".into()),
            },
            Kind::Signed { .. } => match text.parse::<i64>() {
                Ok(n) => Value::Signed(n),
                Err(_) if text.parse::<i128>().is_ok() => return Err(self.range_error()),
                Err(_) => return Err("argument couldn't be parsed into an integer".into()),
            },
            Kind::Size { .. } => match crate::tenancy::parse_size(text) {
                Some(n) => Value::Int(n as u64),
                None => return Err("argument must be a memory value".into()),
            },
            Kind::Text | Kind::Enum(_) | Kind::EnumOrInt(_) | Kind::Custom(_) => {
                Value::Text(text.to_string())
            }
            Kind::List => Value::List(text.split_whitespace().map(str::to_string).collect()),
        };
        self.check(v)
    }

    /// Parse a value read from the TOML file (`what` names it in errors).
    pub fn from_toml(self, v: &toml::Value) -> Result<Value, String> {
        let value = match (self, v) {
            (Kind::Bool, toml::Value::Boolean(b)) => Value::Bool(*b),
            (Kind::Int { .. } | Kind::Size { .. }, toml::Value::Integer(n)) => u64::try_from(*n)
                .map(Value::Int)
                .map_err(|_| self.range_error())?,
            (Kind::Signed { .. }, toml::Value::Integer(n)) => Value::Signed(*n),
            (Kind::Size { .. }, toml::Value::String(s)) => return self.parse(s),
            (
                Kind::Text | Kind::Enum(_) | Kind::EnumOrInt(_) | Kind::Custom(_),
                toml::Value::String(s),
            ) => Value::Text(s.clone()),
            (Kind::EnumOrInt(_), toml::Value::Integer(n)) if *n >= 0 => Value::Text(n.to_string()),
            (Kind::List, toml::Value::Array(items)) => Value::List(
                items
                    .iter()
                    .map(|i| i.as_str().map(str::to_string))
                    .collect::<Option<_>>()
                    .ok_or("expected an array of strings")?,
            ),
            _ => return Err(format!("expected {}", self.expected())),
        };
        self.check(value)
    }

    /// Accept a value of the right shape if it is in range (normalising enum words to lower case).
    pub fn check(self, v: Value) -> Result<Value, String> {
        match (self, v) {
            (Kind::Int { min, max } | Kind::Size { min, max }, Value::Int(n)) => {
                if (min..=max).contains(&n) {
                    Ok(Value::Int(n))
                } else {
                    Err(self.range_error())
                }
            }
            (Kind::Signed { min, max }, Value::Signed(n)) => {
                if (min..=max).contains(&n) {
                    Ok(Value::Signed(n))
                } else {
                    Err(self.range_error())
                }
            }
            (Kind::Enum(words), Value::Text(s)) => words
                .iter()
                .find(|w| w.eq_ignore_ascii_case(&s))
                .map(|w| Value::Text(w.to_string()))
                .ok_or_else(|| {
                    format!(
                        "argument(s) must be one of the following: {}",
                        words.join(", ")
                    )
                }),
            (Kind::EnumOrInt(words), Value::Text(s)) => {
                if let Some(w) = words.iter().find(|w| w.eq_ignore_ascii_case(&s)) {
                    Ok(Value::Text(w.to_string()))
                } else if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
                    s.parse::<u64>()
                        .map(|n| Value::Text(n.to_string()))
                        .map_err(|_| "argument couldn't be parsed into an integer".to_string())
                } else {
                    Err(format!(
                        "argument must be a whole number or one of the following: {}",
                        words.join(", ")
                    ))
                }
            }
            (Kind::Custom(normalize), Value::Text(s)) => normalize(&s).map(Value::Text),
            (Kind::Bool, v @ Value::Bool(_))
            | (Kind::Text, v @ Value::Text(_))
            | (Kind::List, v @ Value::List(_)) => Ok(v),
            (_, v) => Err(format!("expected {}, not {v:?}", self.expected())),
        }
    }

    fn range_error(self) -> String {
        match self {
            Kind::Int { min, max } | Kind::Size { min, max } => {
                format!("argument must be between {min} and {max} inclusive")
            }
            Kind::Signed { min, max } => {
                format!("argument must be between {min} and {max} inclusive")
            }
            _ => format!("expected {}", self.expected()),
        }
    }

    /// What a value of this kind looks like, for errors.
    fn expected(self) -> &'static str {
        match self {
            Kind::Bool => "true or false",
            Kind::Int { .. } | Kind::Signed { .. } => "a whole number",
            Kind::Size { .. } => "a number of bytes or a size such as \"64mb\"",
            Kind::Text | Kind::Enum(_) | Kind::Custom(_) => "a string",
            Kind::EnumOrInt(_) => "a string or a whole number",
            Kind::List => "an array of strings",
        }
    }

    /// The type as the README table shows it.
    pub fn describe(self) -> String {
        let range = |name: &str, min: u64, max: u64| {
            if max == UNBOUNDED {
                format!("{name} ≥ {min}")
            } else {
                format!("{name} {min}–{max}")
            }
        };
        match self {
            Kind::Bool => "bool".into(),
            Kind::Int { min, max } => range("int", min, max),
            Kind::Size { min, max } => range("size", min, max),
            Kind::Signed { min, max } => format!("int {min}–{max}"),
            Kind::Text | Kind::Custom(_) => "string".into(),
            Kind::Enum(words) => format!("enum: {}", words.join(", ")),
            Kind::EnumOrInt(words) => format!("{} or int", words.join(", ")),
            Kind::List => "list".into(),
        }
    }
}

/// Reads and writes a setting's field of [`Config`].
#[derive(Clone, Copy)]
pub struct Access {
    pub get: fn(&Config) -> Value,
    /// Stores a value [`Kind::check`] accepted (Err only if the row's kind does not fit its field).
    pub put: fn(&mut Config, Value) -> Result<(), String>,
}

/// Reads and sets a live setting's value in [`LiveSettings`].
#[derive(Clone, Copy)]
pub struct Live {
    pub get: fn(&LiveSettings) -> Value,
    /// Stores a value [`Kind::check`] accepted.
    pub set: fn(&LiveSettings, &Value),
    /// Puts the new values in force once a CONFIG SET has stored all of them (e.g. rebuilds the
    /// TLS configuration); on Err, CONFIG SET restores the previous values and fails.
    pub apply: Option<Apply>,
}

/// A live setting's step that puts new values in force (see [`Live::apply`]).
pub type Apply = fn(&Shared) -> Result<(), String>;

/// A command-line flag (its long name is the setting's name).
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    pub short: Option<char>,
    pub value_name: &'static str,
}

/// One setting.
pub struct Setting {
    /// Redis-style name: `CONFIG GET`/`SET`, the flag (`--name`), and the TOML key unless `key` differs.
    pub name: &'static str,
    pub section: Section,
    /// The key within `section`.
    pub key: &'static str,
    pub kind: Kind,
    /// The default, as text [`Kind::parse`] reads.
    pub default: &'static str,
    pub flag: Option<Flag>,
    /// One line: what it does.
    pub doc: &'static str,
    pub field: Access,
    /// `Some` when `CONFIG SET` may change it at run time; otherwise it is immutable.
    pub live: Option<Live>,
}

impl Setting {
    /// The setting's value in a configuration.
    pub fn get(&self, config: &Config) -> Value {
        (self.field.get)(config)
    }

    /// Parse `text` and store it in `config`.
    pub fn set_text(&self, config: &mut Config, text: &str) -> Result<(), String> {
        let v = self.kind.parse(text)?;
        (self.field.put)(config, v)
    }

    /// The value in force now (the live one for live settings), as `CONFIG GET` shows it.
    pub fn current(&self, shared: &Shared) -> String {
        self.current_value(shared).text()
    }

    /// The value in force now: from [`IN_FORCE`] when the row is there, else the live one for
    /// live settings, else the one started with. CONFIG GET shows it; CONFIG REWRITE writes it.
    pub fn current_value(&self, shared: &Shared) -> Value {
        if let Some((_, read)) = IN_FORCE.iter().find(|(name, _)| *name == self.name) {
            return read(shared);
        }
        match &self.live {
            Some(live) => (live.get)(&shared.live),
            None => self.get(&shared.config),
        }
    }

    /// Where it is in the TOML file: `port`, or `[durability] lazy-flush-ms`.
    pub fn toml_path(&self) -> String {
        match self.section.header() {
            None => self.key.to_string(),
            Some(h) => format!("[{h}] {}", self.key),
        }
    }
}

/// Conversion between a [`Config`] field and a [`Value`].
pub trait Field: Sized {
    fn to_value(&self) -> Value;
    fn from_value(v: Value) -> Option<Self>;
}

macro_rules! int_field {
    ($($t:ty),*) => {$(
        impl Field for $t {
            fn to_value(&self) -> Value {
                Value::Int(*self as u64)
            }
            fn from_value(v: Value) -> Option<Self> {
                match v {
                    Value::Int(n) => n.try_into().ok(),
                    _ => None,
                }
            }
        }
    )*};
}
int_field!(u16, u32, u64, usize);

impl Field for i64 {
    fn to_value(&self) -> Value {
        Value::Signed(*self)
    }
    fn from_value(v: Value) -> Option<Self> {
        match v {
            Value::Signed(n) => Some(n),
            _ => None,
        }
    }
}

impl Field for bool {
    fn to_value(&self) -> Value {
        Value::Bool(*self)
    }
    fn from_value(v: Value) -> Option<Self> {
        match v {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }
}

impl Field for String {
    fn to_value(&self) -> Value {
        Value::Text(self.clone())
    }
    fn from_value(v: Value) -> Option<Self> {
        match v {
            Value::Text(s) => Some(s),
            _ => None,
        }
    }
}

impl Field for PathBuf {
    fn to_value(&self) -> Value {
        Value::Text(self.display().to_string())
    }
    fn from_value(v: Value) -> Option<Self> {
        String::from_value(v).map(PathBuf::from)
    }
}

impl Field for Vec<String> {
    fn to_value(&self) -> Value {
        Value::List(self.clone())
    }
    fn from_value(v: Value) -> Option<Self> {
        match v {
            Value::List(items) => Some(items),
            _ => None,
        }
    }
}

/// [`Access`] to a field of [`Config`], by path: `field!(durability.lazy_flush_ms)`.
macro_rules! field {
    ($($f:ident).+) => {
        Access {
            get: |c| Field::to_value(&c.$($f).+),
            put: |c, v| {
                c.$($f).+ = Field::from_value(v).ok_or("value does not fit the setting")?;
                Ok(())
            },
        }
    };
}

/// [`Live`] access to an `AtomicUsize` of [`LiveSettings`].
macro_rules! live_usize {
    ($f:ident) => {
        Some(Live {
            get: |l| Value::Int(l.$f.load(Ordering::Relaxed) as u64),
            set: |l, v| {
                if let Value::Int(n) = v {
                    l.$f.store(usize::try_from(*n).unwrap_or(usize::MAX), Ordering::Relaxed);
                }
            },
            apply: None,
        })
    };
}

/// [`Live`] access to an `AtomicU64` of [`LiveSettings`]; with a second argument, a function
/// that puts the new value in force (`live_u64!(lfu_log_factor, crate::quota::apply_access_clock)`:
/// the keys' access clock is made of it).
macro_rules! live_u64 {
    ($f:ident) => {
        live_u64!(@ $f, None)
    };
    ($f:ident, $apply:path) => {
        live_u64!(@ $f, Some($apply))
    };
    (@ $f:ident, $apply:expr) => {
        Some(Live {
            get: |l| Value::Int(l.$f.load(Ordering::Relaxed)),
            set: |l, v| {
                if let Value::Int(n) = v {
                    l.$f.store(*n, Ordering::Relaxed);
                }
            },
            apply: $apply,
        })
    };
}

/// [`Live`] access to a `Mutex<String>` of [`LiveSettings`] that the TLS configuration is built
/// from: setting it rebuilds that configuration (new connections use it).
macro_rules! live_tls_text {
    ($f:ident) => {
        Some(Live {
            get: |l| Value::Text(l.$f.lock().clone()),
            set: |l, v| *l.$f.lock() = v.text(),
            apply: Some(reload_tls),
        })
    };
}

/// A new `maxmemory` below what is used starts evictions without waiting for a command, as
/// Redis' `updateMaxmemory` starts its eviction timer, which runs at once and goes on only
/// while it is over the limit (see `LiveSettings::evict_pending`).
fn start_evictions(shared: &Shared) -> Result<(), String> {
    if crate::quota::over_maxmemory(shared) {
        shared.live.evict_pending.store(true, Ordering::Relaxed);
    }
    Ok(())
}

/// Rebuild the TLS configuration from the live settings.
fn reload_tls(shared: &Shared) -> Result<(), String> {
    shared
        .tls
        .reload(&shared.live)
        .map_err(|why| format!("Unable to update TLS configuration: {why}"))
}

/// [`Live`] access to an `AtomicI64` of [`LiveSettings`] (a [`Kind::Signed`] row).
macro_rules! live_i64 {
    ($f:ident) => {
        Some(Live {
            get: |l| Value::Signed(l.$f.load(Ordering::Relaxed)),
            set: |l, v| {
                if let Value::Signed(n) = v {
                    l.$f.store(*n, Ordering::Relaxed);
                }
            },
            apply: None,
        })
    };
}

const fn flag(value_name: &'static str) -> Option<Flag> {
    Some(Flag {
        short: None,
        value_name,
    })
}

const PORT: Kind = Kind::Int { min: 0, max: 65535 };
const COUNT: Kind = Kind::Int {
    min: 1,
    max: UNBOUNDED,
};
/// Redis' size_t encoding knobs: 0 to LONG_MAX, in plain numbers or (memory knobs) with units.
const KNOB: Kind = Kind::Int {
    min: 0,
    max: UNBOUNDED,
};
const KNOB_BYTES: Kind = Kind::Size {
    min: 0,
    max: UNBOUNDED,
};
const TLS_AUTH_CLIENTS: Kind = Kind::Enum(&["no", "yes", "optional"]);
const DEGREES: Kind = Kind::Enum(&["none", "lazy", "background", "strict", "replicated"]);

/// Every scalar setting, in the order `--print-config`, `CONFIG GET *` and the README list them.
#[rustfmt::skip]
pub static SETTINGS: &[Setting] = &[
    Setting { name: "bind", section: Section::Top, key: "bind", kind: Kind::List, default: "127.0.0.1",
        flag: flag("ADDR"), live: None, field: field!(bind),
        doc: "Addresses to listen on (IPv4 or IPv6 literals; the flag may be repeated); loopback only by default." },
    Setting { name: "port", section: Section::Top, key: "port", kind: PORT, default: "6379",
        flag: Some(Flag { short: Some('p'), value_name: "PORT" }), live: None, field: field!(port),
        doc: "TCP port for the RESP (Redis protocol) listener; 0: none when `tls-port` is set (TLS only, as Redis), else the OS picks one and it is logged." },
    Setting { name: "dir", section: Section::Top, key: "dir", kind: Kind::Text, default: "./gradus-data",
        flag: flag("DIR"), live: None, field: field!(dir),
        doc: "Data directory: log segments and snapshots (created if missing)." },
    Setting { name: "maxclients", section: Section::Top, key: "maxclients", kind: Kind::Int { min: 1, max: u32::MAX as u64 }, default: "10000",
        flag: flag("N"), live: live_usize!(maxclients), field: field!(maxclients),
        doc: "Most simultaneous client connections; the next one gets \"-ERR max number of clients reached\"." },
    Setting { name: "maxmemory", section: Section::Top, key: "maxmemory", kind: Kind::Size { min: 0, max: UNBOUNDED }, default: "0",
        flag: flag("BYTES"), live: Some(Live { apply: Some(start_evictions), ..live_usize!(maxmemory).expect("a live row") }), field: field!(maxmemory),
        doc: "Server-wide limit on used_memory (the allocator's count); while over it, every command (a read too, as in Redis) first evicts by maxmemory-policy from keyspaces whose eviction is lru (without [[tenants]]: databases of durability none; never a session keyspace), and a write that may grow memory fails with OOM if that freed too little; 0: none." },
    Setting { name: "maxmemory-policy", section: Section::Top, key: "maxmemory-policy", kind: Kind::Enum(crate::quota::POLICIES), default: "noeviction",
        flag: flag("POLICY"), live: Some(Live {
            get: |l| Value::Text(crate::quota::POLICIES[usize::from(l.maxmemory_policy.load(Ordering::Relaxed))].into()),
            set: |l, v| {
                if let Value::Text(name) = v {
                    l.maxmemory_policy.store(crate::quota::policy_index(name), Ordering::Relaxed);
                }
            },
            apply: Some(crate::quota::apply_access_clock),
        }), field: field!(maxmemory_policy),
        doc: "Which keys maxmemory evicts: noeviction, allkeys-lru, volatile-lru, allkeys-lfu, volatile-lfu (the lfu ones keep Redis' access-frequency counter per key instead of the last access time: OBJECT FREQ), allkeys-random, volatile-random or volatile-ttl." },
    Setting { name: "lfu-log-factor", section: Section::Top, key: "lfu-log-factor", kind: Kind::Int { min: 0, max: i32::MAX as u64 }, default: "10",
        flag: None, live: live_u64!(lfu_log_factor, crate::quota::apply_access_clock), field: field!(lfu_log_factor),
        doc: "How slowly the lfu policies' per-key counter grows (Redis' logarithmic counter: an access increments it with probability 1/((counter-5)*factor+1), up to 255)." },
    Setting { name: "lfu-decay-time", section: Section::Top, key: "lfu-decay-time", kind: Kind::Int { min: 0, max: i32::MAX as u64 }, default: "1",
        flag: None, live: live_u64!(lfu_decay_time, crate::quota::apply_access_clock), field: field!(lfu_decay_time),
        doc: "Minutes after which an idle key's lfu counter loses one (per period elapsed); 0: it never decays." },
    Setting { name: "maxmemory-samples", section: Section::Top, key: "maxmemory-samples", kind: Kind::Int { min: 1, max: i32::MAX as u64 }, default: "5",
        flag: None, live: live_u64!(maxmemory_samples), field: field!(maxmemory_samples),
        doc: "Keys an eviction samples in each shard it looks at (Redis' maxmemory-samples): more is closer to true LRU/LFU and costs more per eviction." },
    Setting { name: "maxmemory-clients", section: Section::Top, key: "maxmemory-clients", kind: Kind::Custom(crate::quota::normalize_client_limit), default: "0",
        flag: None, field: field!(maxmemory_clients),
        live: Some(Live { get: |l| Value::Text(crate::quota::client_limit_text(l.maxmemory_clients.load(Ordering::Relaxed))), set: |l, v| l.maxmemory_clients.store(crate::quota::parse_client_limit(&v.text()).unwrap_or(0), Ordering::Relaxed), apply: Some(|shared| { crate::quota::evict_clients(shared); Ok(()) }) }),
        doc: "Redis' client eviction: when the connections' memory (CLIENT LIST tot-mem: buffers, queued commands, pending replies) adds up to this many bytes, or this percentage of maxmemory (\"5%\"), the largest are closed (never replicas, a primary's link or CLIENT NO-EVICT ones; at least 128 KiB); 0: never." },
    Setting { name: "requirepass", section: Section::Top, key: "requirepass", kind: Kind::Text, default: "",
        flag: flag("PASSWORD"), field: field!(requirepass),
        live: Some(Live { get: |l| Value::Text(l.requirepass.lock().clone()), set: |l, v| *l.requirepass.lock() = v.text(), apply: None }),
        doc: "Password of the default user (AUTH); empty: none, and then Gradus listens on loopback only (unused with [[tenants]])." },
    Setting { name: "databases", section: Section::Top, key: "databases", kind: Kind::Int { min: 1, max: 1024 }, default: "16",
        flag: flag("N"), live: None, field: field!(databases),
        doc: "Number of databases (SELECT 0 to databases-1)." },
    Setting { name: "proto-max-bulk-len", section: Section::Top, key: "proto-max-bulk-len", kind: Kind::Size { min: 1024 * 1024, max: UNBOUNDED }, default: "536870912",
        flag: flag("BYTES"), live: live_usize!(proto_max_bulk_len), field: field!(proto_max_bulk_len),
        doc: "Largest bulk string (value) a client may send, and largest string APPEND/SETRANGE/SETBIT may make, in bytes (Redis' default, 512 MB). A declared length reserves memory only as its bytes arrive." },
    Setting { name: "client-query-buffer-limit", section: Section::Top, key: "client-query-buffer-limit", kind: Kind::Size { min: 1024 * 1024, max: UNBOUNDED }, default: "1073741824",
        flag: flag("BYTES"), live: live_usize!(client_query_buffer_limit), field: field!(client_query_buffer_limit),
        doc: "Most bytes a connection may hold of a request still arriving (its unread input and the arguments already decoded); over it the connection is closed, as in Redis." },
    Setting { name: "max-multibulk-len", section: Section::Top, key: "max-multibulk-len", kind: COUNT, default: "1048576",
        flag: flag("N"), live: live_usize!(max_multibulk_len), field: field!(max_multibulk_len),
        doc: "Most elements in one multibulk request." },
    Setting { name: "max-inline-len", section: Section::Top, key: "max-inline-len", kind: Kind::Size { min: 64, max: UNBOUNDED }, default: "65536",
        flag: flag("BYTES"), live: live_usize!(max_inline_len), field: field!(max_inline_len),
        doc: "Longest inline command (typed by hand) and longest unterminated request header, in bytes." },
    // As Redis: any value from 0 is accepted and clamped to 1..=500.
    Setting { name: "hz", section: Section::Top, key: "hz", kind: Kind::Int { min: 0, max: 2147483647 }, default: "10",
        flag: flag("N"), live: Some(Live {
            get: |l| Value::Int(l.hz.load(Ordering::Relaxed)),
            set: |l, v| if let Value::Int(n) = v { l.hz.store((*n).clamp(1, 500), Ordering::Relaxed) },
            apply: None,
        }), field: field!(hz),
        doc: "Active expiry cycles per second; as in Redis any value from 0 is taken and clamped to 1–500." },
    Setting { name: "threads", section: Section::Top, key: "threads", kind: Kind::Int { min: 0, max: 4096 }, default: "0",
        flag: flag("N"), live: None, field: field!(threads),
        doc: "Worker threads for the network and command handling; 0: one per CPU core minus one, at least one (1 on 2 cores). With one, requests run in the order they arrive, across connections too, as in redis-server." },
    Setting { name: "disable-thp", section: Section::Top, key: "disable-thp", kind: Kind::Bool, default: "yes",
        flag: None, live: None, field: field!(disable_thp),
        doc: "Turn transparent huge pages off for the process at start, as redis-server does (faster growth, less resident memory)." },
    Setting { name: "enable-debug-command", section: Section::Top, key: "enable-debug-command", kind: Kind::Enum(&["no", "yes", "local"]), default: "no",
        flag: flag("WHEN"), live: None, field: field!(enable_debug_command),
        doc: "Whether DEBUG runs: no (the default, as in Redis 7), yes, or local (only from a loopback connection); set at start only." },
    Setting { name: "loglevel", section: Section::Top, key: "loglevel", kind: Kind::Text, default: "info",
        flag: flag("FILTER"), live: Some(Live { get: |l| Value::Text(l.loglevel.lock().clone()), set: |l, v| *l.loglevel.lock() = v.text(), apply: Some(|shared| crate::logging::set(&shared.live.loglevel.lock())) }), field: field!(loglevel),
        doc: "Log filter: Redis' debug, verbose, notice (as info), warning or nothing, or error, warn, info, trace, or a tracing env-filter expression (logs go to stderr); CONFIG SET changes it at once." },
    Setting { name: "memcached-port", section: Section::Top, key: "memcached-port", kind: PORT, default: "11211",
        flag: flag("PORT"), live: None, field: field!(memcached_port),
        doc: "TCP port for the memcached text/meta protocol listener, on the same bind addresses; 0 disables it." },
    Setting { name: "memcached-db", section: Section::Top, key: "memcached-db", kind: Kind::Int { min: 0, max: UNBOUNDED }, default: "0",
        flag: flag("N"), live: None, field: field!(memcached_db),
        doc: "The database (SELECT index) the memcached port reads and writes; flush_all empties it only." },
    Setting { name: "memcached-tenant", section: Section::Top, key: "memcached-tenant", kind: Kind::Text, default: "",
        flag: None, live: None, field: field!(memcached_tenant),
        doc: "With [[tenants]]: the tenant whose keyspace memcached-db names (empty: the first); its users log in to it, other tenants' users to their own memcached-keyspace." },
    Setting { name: "memcached-item-size-max", section: Section::Top, key: "memcached-item-size-max", kind: Kind::Size { min: 1024, max: MAX_ITEM_SIZE as u64 }, default: "1048576",
        flag: flag("BYTES"), live: None, field: field!(memcached_item_size_max),
        doc: "Largest value over the memcached port (memcached's -I); at most the log's record limit less 1 MiB." },
    Setting { name: "tls-port", section: Section::Top, key: "tls-port", kind: PORT, default: "0",
        flag: flag("PORT"), live: None, field: field!(tls_port),
        doc: "TCP port for RESP over TLS, on the same bind addresses, beside the plain port; 0 disables it." },
    Setting { name: "memcached-tls-port", section: Section::Top, key: "memcached-tls-port", kind: PORT, default: "0",
        flag: flag("PORT"), live: None, field: field!(memcached_tls_port),
        doc: "TCP port for the memcached protocol over TLS (memcached's -Z), beside memcached-port; 0 disables it." },
    Setting { name: "tls-cert-file", section: Section::Top, key: "tls-cert-file", kind: Kind::Text, default: "",
        flag: flag("FILE"), live: live_tls_text!(tls_cert_file), field: field!(tls_cert_file),
        doc: "The server's certificate (PEM, chain allowed); CONFIG SET reloads it for new connections." },
    Setting { name: "tls-key-file", section: Section::Top, key: "tls-key-file", kind: Kind::Text, default: "",
        flag: flag("FILE"), live: live_tls_text!(tls_key_file), field: field!(tls_key_file),
        doc: "The private key of tls-cert-file (PEM: PKCS#8, PKCS#1 or SEC1); CONFIG SET reloads it." },
    Setting { name: "tls-client-cert-file", section: Section::Top, key: "tls-client-cert-file", kind: Kind::Text, default: "",
        flag: flag("FILE"), live: live_tls_text!(tls_client_cert_file), field: field!(tls_client_cert_file),
        doc: "The certificate (PEM) a replica presents to its primary with tls-replication; empty (or tls-client-key-file empty): tls-cert-file's, as Redis." },
    Setting { name: "tls-client-key-file", section: Section::Top, key: "tls-client-key-file", kind: Kind::Text, default: "",
        flag: flag("FILE"), live: live_tls_text!(tls_client_key_file), field: field!(tls_client_key_file),
        doc: "The private key of tls-client-cert-file (PEM)." },
    Setting { name: "tls-ca-cert-file", section: Section::Top, key: "tls-ca-cert-file", kind: Kind::Text, default: "",
        flag: flag("FILE"), live: live_tls_text!(tls_ca_cert_file), field: field!(tls_ca_cert_file),
        doc: "CA certificates (PEM) that client certificates are verified against." },
    Setting { name: "tls-auth-clients", section: Section::Top, key: "tls-auth-clients", kind: TLS_AUTH_CLIENTS, default: "yes",
        flag: flag("MODE"), live: live_tls_text!(tls_auth_clients), field: field!(tls_auth_clients),
        doc: "Client certificates on the TLS ports: yes (required, verified against tls-ca-cert-file), optional (verified when given), no (not asked for)." },
    Setting { name: "tls-protocols", section: Section::Top, key: "tls-protocols", kind: Kind::List, default: "TLSv1.2 TLSv1.3",
        flag: flag("PROTOCOL"), field: field!(tls_protocols),
        live: Some(Live { get: |l| Value::List(l.tls_protocols.lock().clone()), set: |l, v| if let Value::List(p) = v { *l.tls_protocols.lock() = p.clone() }, apply: Some(reload_tls) }),
        doc: "TLS versions offered: TLSv1.2 and/or TLSv1.3." },
    Setting { name: "tls-replication", section: Section::Top, key: "tls-replication", kind: Kind::Bool, default: "no",
        flag: None, field: field!(tls_replication),
        live: Some(Live { get: |l| Value::Bool(l.tls_replication.load(Ordering::Relaxed)), set: |l, v| l.tls_replication.store(*v == Value::Bool(true), Ordering::Relaxed), apply: Some(reload_tls) }),
        doc: "A replica's link to its primary is TLS (REPLICAOF names the primary's tls-port): its certificate verified against tls-ca-cert-file (not its host name, as Redis), tls-client-cert-file (else tls-cert-file) presented; CONFIG SET holds for the next link." },
    Setting { name: "aclfile", section: Section::Top, key: "aclfile", kind: Kind::Text, default: "",
        flag: flag("FILE"), live: None, field: field!(aclfile),
        doc: "Redis ACL users file (user lines as ACL LIST prints them, SHA-256 password hashes): read at start-up, written by ACL SAVE, read again by ACL LOAD; empty: none." },
    Setting { name: "hll-sparse-max-bytes", section: Section::Top, key: "hll-sparse-max-bytes", kind: Kind::Size { min: 0, max: UNBOUNDED }, default: "3000",
        flag: None, live: live_usize!(hll_sparse_max_bytes), field: field!(hll_sparse_max_bytes),
        doc: "A HyperLogLog stays in the sparse encoding while it is at most this many bytes (header included), then becomes dense (as Redis)." },
    Setting { name: "save", section: Section::Top, key: "save", kind: Kind::Custom(normalize_save), default: "",
        flag: None, field: field!(save),
        live: Some(Live { get: |l| Value::Text(l.save.lock().clone()), set: |l, v| *l.save.lock() = v.text(), apply: None }),
        doc: "Redis' RDB save points (seconds and changes, repeated; empty: none), checked as Redis checks them; accepted and reported, no effect here: snapshots follow the log (snapshot-* settings)." },
    Setting { name: "list-max-listpack-size", section: Section::Top, key: "list-max-listpack-size", kind: Kind::Signed { min: i32::MIN as i64, max: i32::MAX as i64 }, default: "-2",
        flag: None, live: live_i64!(list_max_listpack_size), field: field!(list_max_listpack_size),
        doc: "What one node of a list holds (alias list-max-ziplist-size): positive, that many elements; -1 to -5, 4 to 64 KiB. A list is a listpack while it fits one node, becomes a quicklist past it and a listpack again once it shrinks to half of it, as in Redis 7.2." },
    Setting { name: "list-compress-depth", section: Section::Top, key: "list-compress-depth", kind: Kind::Int { min: 0, max: i32::MAX as u64 }, default: "0",
        flag: None, live: live_u64!(list_compress_depth), field: field!(list_compress_depth),
        doc: "Redis' list compression knob; accepted and reported, no effect here." },
    Setting { name: "set-max-intset-entries", section: Section::Top, key: "set-max-intset-entries", kind: KNOB, default: "512",
        flag: None, live: live_u64!(set_max_intset_entries), field: field!(set_max_intset_entries),
        doc: "Most members a set of integers keeps as an intset; past it the set becomes a hashtable for good, as in Redis." },
    Setting { name: "set-max-listpack-entries", section: Section::Top, key: "set-max-listpack-entries", kind: KNOB, default: "128",
        flag: None, live: live_u64!(set_max_listpack_entries), field: field!(set_max_listpack_entries),
        doc: "Most members a set keeps in the packed listpack encoding; a write past it, or past set-max-listpack-value, makes the set a hashtable for good, as in Redis 7.2." },
    Setting { name: "set-max-listpack-value", section: Section::Top, key: "set-max-listpack-value", kind: KNOB, default: "64",
        flag: None, live: live_u64!(set_max_listpack_value), field: field!(set_max_listpack_value),
        doc: "Longest member, in bytes, a set keeps in the packed listpack encoding." },
    Setting { name: "stream-node-max-bytes", section: Section::Top, key: "stream-node-max-bytes", kind: KNOB_BYTES, default: "4096",
        flag: None, live: live_u64!(stream_node_max_bytes), field: field!(stream_node_max_bytes),
        doc: "Most bytes one node of a stream holds (its listpack in Redis; 0: no limit but 1 GiB); an approximate trim (MAXLEN ~, MINID ~) removes whole nodes." },
    Setting { name: "stream-node-max-entries", section: Section::Top, key: "stream-node-max-entries", kind: KNOB, default: "100",
        flag: None, live: live_u64!(stream_node_max_entries), field: field!(stream_node_max_entries),
        doc: "Most entries, deleted ones included, one node of a stream holds (0: no limit); an approximate trim removes whole nodes, at most 100 nodes' worth when no LIMIT is given." },
    Setting { name: "hash-max-listpack-entries", section: Section::Top, key: "hash-max-listpack-entries", kind: KNOB, default: "512",
        flag: None, live: live_u64!(hash_max_listpack_entries), field: field!(hash_max_listpack_entries),
        doc: "Most fields a hash keeps in the packed listpack encoding (alias hash-max-ziplist-entries); a write past it, or past hash-max-listpack-value, makes the hash a hashtable for good, as in Redis." },
    Setting { name: "hash-max-listpack-value", section: Section::Top, key: "hash-max-listpack-value", kind: KNOB_BYTES, default: "64",
        flag: None, live: live_u64!(hash_max_listpack_value), field: field!(hash_max_listpack_value),
        doc: "Longest field or value, in bytes, a hash keeps in the packed listpack encoding (alias hash-max-ziplist-value)." },
    Setting { name: "zset-max-listpack-entries", section: Section::Top, key: "zset-max-listpack-entries", kind: KNOB, default: "128",
        flag: None, live: live_u64!(zset_max_listpack_entries), field: field!(zset_max_listpack_entries),
        doc: "Most members a sorted set keeps in the packed listpack encoding (alias zset-max-ziplist-entries); a write past it, or past zset-max-listpack-value, makes the set a skiplist for good, as in Redis." },
    Setting { name: "zset-max-listpack-value", section: Section::Top, key: "zset-max-listpack-value", kind: KNOB_BYTES, default: "64",
        flag: None, live: live_u64!(zset_max_listpack_value), field: field!(zset_max_listpack_value),
        doc: "Longest member, in bytes, a sorted set keeps in the packed listpack encoding (alias zset-max-ziplist-value)." },
    Setting { name: "slowlog-log-slower-than", section: Section::Top, key: "slowlog-log-slower-than", kind: Kind::Signed { min: -1, max: i64::MAX }, default: "10000",
        flag: flag("MICROS"), live: live_i64!(slowlog_log_slower_than), field: field!(slowlog_log_slower_than),
        doc: "SLOWLOG records commands that ran at least this many microseconds (0: every command; -1: none)." },
    Setting { name: "slowlog-max-len", section: Section::Top, key: "slowlog-max-len", kind: Kind::Int { min: 0, max: i64::MAX as u64 }, default: "128",
        flag: flag("N"), live: live_u64!(slowlog_max_len), field: field!(slowlog_max_len),
        doc: "Most entries the slow log keeps (the oldest go first)." },
    Setting { name: "busy-reply-threshold", section: Section::Top, key: "busy-reply-threshold", kind: Kind::Int { min: 0, max: i64::MAX as u64 }, default: "5000",
        flag: None, live: live_u64!(busy_reply_threshold), field: field!(busy_reply_threshold),
        doc: "Milliseconds a script or function runs before the server is busy (alias lua-time-limit; 0: never). With two worker threads or more, as in Redis: it runs on, and every other command but the allow-busy ones (SCRIPT KILL, FUNCTION KILL, SHUTDOWN NOSAVE, MULTI, AUTH …) is answered BUSY until it ends or is killed. With one worker nothing else could run meanwhile, so a script that has not written is stopped with an error instead, and one that has written runs to its end (never stopped halfway through its writes)." },
    Setting { name: "timeout", section: Section::Top, key: "timeout", kind: Kind::Int { min: 0, max: i32::MAX as u64 }, default: "0",
        flag: None, live: live_u64!(timeout), field: field!(timeout),
        doc: "Seconds a client may send nothing before the server closes its connection, as Redis' timeout (0: never). Connections that subscribe, MONITOR, wait in a blocking command, or link a replica or primary are never closed for it; memcached connections neither." },
    Setting { name: "latency-monitor-threshold", section: Section::Top, key: "latency-monitor-threshold", kind: Kind::Int { min: 0, max: i64::MAX as u64 }, default: "0",
        flag: flag("MILLIS"), live: live_u64!(latency_monitor_threshold), field: field!(latency_monitor_threshold),
        doc: "The latency monitor (LATENCY) samples commands, fsyncs and lock waits that took at least this many milliseconds; 0: off." },
    Setting { name: "latency-tracking", section: Section::Top, key: "latency-tracking", kind: Kind::Bool, default: "yes",
        flag: None, field: field!(latency_tracking),
        live: Some(Live { get: |l| Value::Bool(l.latency_tracking.load(Ordering::Relaxed)), set: |l, v| l.latency_tracking.store(*v == Value::Bool(true), Ordering::Relaxed), apply: Some(|shared| { shared.observer.commands.set_tracking(shared.live.latency_tracking.load(Ordering::Relaxed)); Ok(()) }) }),
        doc: "Per-command latency histograms (INFO latencystats, LATENCY HISTOGRAM), as Redis' latency-tracking; no: commands are still counted (INFO commandstats) but their latencies not recorded." },
    Setting { name: "latency-tracking-info-percentiles", section: Section::Top, key: "latency-tracking-info-percentiles", kind: Kind::Custom(crate::observe::cmdstats::normalize_percentiles), default: "50 99 99.9",
        flag: None, field: field!(latency_tracking_info_percentiles),
        live: Some(Live { get: |l| Value::Text(crate::observe::cmdstats::percentiles_text(&l.latency_percentiles.lock())), set: |l, v| *l.latency_percentiles.lock() = crate::observe::cmdstats::parse_percentiles(&v.text()).unwrap_or_default(), apply: None }),
        doc: "The percentiles INFO latencystats shows for each command (numbers from 0 to 100, separated by spaces; empty: none)." },
    Setting { name: "metrics-port", section: Section::Top, key: "metrics-port", kind: PORT, default: "0",
        flag: flag("PORT"), live: None, field: field!(metrics_port),
        doc: "TCP port of the HTTP listener for Prometheus metrics (/metrics) and the status page (/); 0: off." },
    Setting { name: "metrics-bind", section: Section::Top, key: "metrics-bind", kind: Kind::List, default: "127.0.0.1",
        flag: flag("ADDR"), live: None, field: field!(metrics_bind),
        doc: "Addresses the metrics listener binds (loopback only by default); it serves only GET and HEAD of its own paths." },
    Setting { name: "client-output-buffer-limit", section: Section::Top, key: "client-output-buffer-limit", kind: Kind::Custom(normalize_output_limits), default: "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60",
        flag: None, field: field!(client_output_buffer_limit),
        live: Some(Live { get: |l| Value::Text(l.output_limits.text()), set: |l, v| l.output_limits.apply(&v.text()), apply: None }),
        doc: "Redis' output limits per client class (class, hard bytes, soft bytes, soft seconds; repeated): a pub/sub subscriber whose unsent messages pass the hard limit, or the soft one for longer than its seconds, is disconnected; a CONFIG SET changes only the classes it names." },
    Setting { name: "notify-keyspace-events", section: Section::Top, key: "notify-keyspace-events", kind: Kind::Custom(crate::notify::normalize), default: "",
        flag: None, field: field!(notify_keyspace_events),
        live: Some(Live { get: |l| Value::Text(crate::notify::format(l.notify_flags.load(Ordering::Relaxed))), set: |l, v| l.notify_flags.store(crate::notify::parse(&v.text()).unwrap_or(0), Ordering::Relaxed), apply: None }),
        doc: "Keyspace notification classes in Redis' letters (K, E, g, $, l, s, h, z, x, e, d, t, m, n, A); empty: none. Published in the tenant's own keyspace and keyevent channels (see README, Keyspace notifications)." },
    Setting { name: "tracking-table-max-keys", section: Section::Top, key: "tracking-table-max-keys", kind: KNOB, default: "1000000",
        flag: None, live: live_u64!(tracking_table_max_keys), field: field!(tracking_table_max_keys),
        doc: "Most keys the client-side caching table (CLIENT TRACKING) remembers; past it the oldest are invalidated and forgotten; 0: no limit." },
    Setting { name: "replicaof", section: Section::Top, key: "replicaof", kind: Kind::Text, default: "",
        flag: flag("\"HOST PORT\""), field: field!(replicaof),
        // CONFIG GET shows the role in force (REPLICAOF changes it); CONFIG SET refuses it with
        // Redis' words, as Redis does.
        live: Some(Live { get: |l| Value::Text(l.repl.replicaof.lock().clone()), set: |l, v| *l.repl.replicaof.lock() = v.text(), apply: Some(|_| Err("can't set immutable config".into())) }),
        doc: "Start as a replica of this primary (\"host port\"); CONFIG GET shows the one followed now (REPLICAOF changes it, CONFIG SET may not, as in Redis; see README, Replication)." },
    Setting { name: "masterauth", section: Section::Top, key: "masterauth", kind: Kind::Text, default: "",
        flag: flag("PASSWORD"), field: field!(masterauth),
        live: Some(Live { get: |l| Value::Text(l.repl.masterauth.lock().clone()), set: |l, v| *l.repl.masterauth.lock() = v.text(), apply: None }),
        doc: "Password a replica sends its primary (AUTH) before it syncs; empty: none." },
    Setting { name: "masteruser", section: Section::Top, key: "masteruser", kind: Kind::Text, default: "",
        flag: flag("USER"), field: field!(masteruser),
        live: Some(Live { get: |l| Value::Text(l.repl.masteruser.lock().clone()), set: |l, v| *l.repl.masteruser.lock() = v.text(), apply: None }),
        doc: "User a replica authenticates as with its primary (AUTH user masterauth); empty: the password alone." },
    Setting { name: "replica-read-only", section: Section::Top, key: "replica-read-only", kind: Kind::Bool, default: "yes",
        flag: None, field: field!(replica_read_only),
        live: Some(Live { get: |l| Value::Bool(l.repl.read_only.load(Ordering::Relaxed)), set: |l, v| l.repl.read_only.store(*v == Value::Bool(true), Ordering::Relaxed), apply: None }),
        doc: "A replica refuses writes from its clients (READONLY); only its primary's stream writes." },
    Setting { name: "replica-serve-stale-data", section: Section::Top, key: "replica-serve-stale-data", kind: Kind::Bool, default: "yes",
        flag: None, field: field!(replica_serve_stale_data),
        live: Some(Live { get: |l| Value::Bool(l.repl.serve_stale_data.load(Ordering::Relaxed)), set: |l, v| l.repl.serve_stale_data.store(*v == Value::Bool(true), Ordering::Relaxed), apply: None }),
        doc: "While its link to the primary is down, a replica still answers reads (no: MASTERDOWN, except for INFO, ROLE, REPLICAOF and the like)." },
    Setting { name: "replica-priority", section: Section::Top, key: "replica-priority", kind: Kind::Int { min: 0, max: i32::MAX as u64 }, default: "100",
        flag: None, field: field!(replica_priority),
        live: Some(Live { get: |l| Value::Int(l.repl.priority.load(Ordering::Relaxed)), set: |l, v| if let Value::Int(n) = v { l.repl.priority.store(*n, Ordering::Relaxed) }, apply: None }),
        doc: "Sentinel promotes the replica with the lowest priority first; 0: never (INFO slave_priority)." },
    Setting { name: "replica-announce-ip", section: Section::Top, key: "replica-announce-ip", kind: Kind::Text, default: "",
        flag: None, field: field!(replica_announce_ip),
        live: Some(Live { get: |l| Value::Text(l.repl.announce_ip.lock().clone()), set: |l, v| *l.repl.announce_ip.lock() = v.text(), apply: None }),
        doc: "Address a replica tells its primary (REPLCONF ip-address) instead of the one its connection comes from; empty: that one." },
    Setting { name: "replica-announce-port", section: Section::Top, key: "replica-announce-port", kind: PORT, default: "0",
        flag: None, field: field!(replica_announce_port),
        live: Some(Live { get: |l| Value::Int(l.repl.announce_port.load(Ordering::Relaxed)), set: |l, v| if let Value::Int(n) = v { l.repl.announce_port.store(*n, Ordering::Relaxed) }, apply: None }),
        doc: "Port a replica tells its primary (REPLCONF listening-port); 0: the port it listens on (its tls-port, if any, over a TLS link, as Redis)." },
    Setting { name: "replica-announced", section: Section::Top, key: "replica-announced", kind: Kind::Bool, default: "yes",
        flag: None, field: field!(replica_announced),
        live: Some(Live { get: |l| Value::Bool(l.repl.announced.load(Ordering::Relaxed)), set: |l, v| l.repl.announced.store(*v == Value::Bool(true), Ordering::Relaxed), apply: None }),
        doc: "Whether Sentinel should announce this replica to clients (INFO replica_announced)." },
    Setting { name: "repl-backlog-size", section: Section::Top, key: "repl-backlog-size", kind: Kind::Size { min: 1, max: UNBOUNDED }, default: "1048576",
        flag: None, field: field!(repl_backlog_size),
        live: Some(Live { get: |l| Value::Int(l.repl.backlog_size.load(Ordering::Relaxed) as u64), set: |l, v| if let Value::Int(n) = v { l.repl.backlog_size.store(usize::try_from(*n).unwrap_or(usize::MAX), Ordering::Relaxed) }, apply: Some(|shared| { shared.repl.resize_backlog(); Ok(()) }) }),
        doc: "Bytes of the replication stream kept (from the first replica's connection on) so a replica that lost its link briefly continues where it was (partial resync) instead of a full one." },
    Setting { name: "min-replicas-to-write", section: Section::Top, key: "min-replicas-to-write", kind: Kind::Int { min: 0, max: i32::MAX as u64 }, default: "0",
        flag: None, field: field!(min_replicas_to_write),
        live: Some(Live { get: |l| Value::Int(l.repl.min_replicas_to_write.load(Ordering::Relaxed)), set: |l, v| if let Value::Int(n) = v { l.repl.min_replicas_to_write.store(*n, Ordering::Relaxed) }, apply: None }),
        doc: "A primary refuses writes (NOREPLICAS) unless at least this many replicas acknowledged within min-replicas-max-lag seconds; 0: off." },
    Setting { name: "min-replicas-max-lag", section: Section::Top, key: "min-replicas-max-lag", kind: Kind::Int { min: 0, max: i32::MAX as u64 }, default: "10",
        flag: None, field: field!(min_replicas_max_lag),
        live: Some(Live { get: |l| Value::Int(l.repl.min_replicas_max_lag.load(Ordering::Relaxed)), set: |l, v| if let Value::Int(n) = v { l.repl.min_replicas_max_lag.store(*n, Ordering::Relaxed) }, apply: None }),
        doc: "Seconds since its last acknowledgement within which a replica counts for min-replicas-to-write." },
    Setting { name: "repl-ping-replica-period", section: Section::Top, key: "repl-ping-replica-period", kind: Kind::Int { min: 1, max: i32::MAX as u64 }, default: "10",
        flag: None, field: field!(repl_ping_replica_period),
        live: Some(Live { get: |l| Value::Int(l.repl.ping_period.load(Ordering::Relaxed)), set: |l, v| if let Value::Int(n) = v { l.repl.ping_period.store(*n, Ordering::Relaxed) }, apply: None }),
        doc: "Seconds between the PINGs a primary puts in the replication stream while nothing else is written, so its replicas see a live link (alias repl-ping-slave-period)." },
    Setting { name: "repl-timeout", section: Section::Top, key: "repl-timeout", kind: Kind::Int { min: 1, max: i32::MAX as u64 }, default: "60",
        flag: None, field: field!(repl_timeout),
        live: Some(Live { get: |l| Value::Int(l.repl.timeout.load(Ordering::Relaxed)), set: |l, v| if let Value::Int(n) = v { l.repl.timeout.store(*n, Ordering::Relaxed) }, apply: None }),
        doc: "Seconds a replica waits with nothing read from its primary before it drops the link and connects again. Keep it above repl-ping-replica-period." },
    Setting { name: "durability", section: Section::Durability, key: "default", kind: DEGREES, default: "background",
        flag: flag("DEGREE"), live: None, field: field!(durability.default),
        doc: "Default durability degree of every database: none, lazy, background, strict or replicated (see README, Durability and Replication)." },
    Setting { name: "lazy-flush-ms", section: Section::Durability, key: "lazy-flush-ms", kind: COUNT, default: "1000",
        flag: None, live: None, field: field!(durability.lazy_flush_ms),
        doc: "lazy: the log is handed to the OS at least this often, in milliseconds." },
    Setting { name: "background-fsync-ms", section: Section::Durability, key: "background-fsync-ms", kind: COUNT, default: "10",
        flag: None, live: None, field: field!(durability.background_fsync_ms),
        doc: "background: a write is fsynced within this many milliseconds of its reply." },
    Setting { name: "strict-linger-us", section: Section::Durability, key: "strict-linger-us", kind: Kind::Int { min: 0, max: 10_000 }, default: "100",
        flag: None, live: None, field: field!(durability.strict_linger_us),
        doc: "After a strict fsync the log thread watches this many microseconds for the next record before it sleeps; 0: off." },
    Setting { name: "zero-fill", section: Section::Durability, key: "zero-fill", kind: Kind::EnumOrInt(&["always", "never"]), default: "always",
        flag: None, live: None, field: field!(durability.zero_fill),
        doc: "Zero-fill log segments ahead of their records: always, never, or N (only while strict writes were made in the last N seconds)." },
    Setting { name: "segment-bytes", section: Section::Durability, key: "segment-bytes", kind: Kind::Size { min: 4096, max: UNBOUNDED }, default: "67108864",
        flag: None, live: None, field: field!(durability.segment_bytes),
        doc: "Log segment size in bytes." },
    Setting { name: "direct-io", section: Section::Durability, key: "direct-io", kind: Kind::Bool, default: "yes",
        flag: None, live: None, field: field!(durability.direct_io),
        doc: "Write log segments with O_DIRECT where the file system takes it (INFO persistence: gradus_log_direct_io)." },
    Setting { name: "snapshot-log-bytes", section: Section::Durability, key: "snapshot-log-bytes", kind: Kind::Size { min: 0, max: UNBOUNDED }, default: "268435456",
        flag: None, live: None, field: field!(durability.snapshot_log_bytes),
        doc: "Take a snapshot (and drop the log it covers) once the log has grown by this many bytes; 0: never by size." },
    Setting { name: "snapshot-log-percentage", section: Section::Durability, key: "snapshot-log-percentage", kind: Kind::Int { min: 0, max: UNBOUNDED }, default: "100",
        flag: None, live: None, field: field!(durability.snapshot_log_percentage),
        doc: "... and by this percentage of the last snapshot's size (Redis' auto-aof-rewrite-percentage: a big dataset is not rewritten for every snapshot-log-bytes of writes); 0: snapshot-log-bytes alone decides." },
    Setting { name: "snapshot-interval-s", section: Section::Durability, key: "snapshot-interval-s", kind: Kind::Int { min: 0, max: UNBOUNDED }, default: "3600",
        flag: None, live: None, field: field!(durability.snapshot_interval_s),
        doc: "... or this many seconds after the last snapshot if anything was written; 0: never by time." },
    Setting { name: "snapshot-compression", section: Section::Durability, key: "snapshot-compression", kind: Kind::Bool, default: "yes",
        flag: None, live: None, field: field!(durability.snapshot_compression),
        doc: "Store snapshot values of 64 bytes or more LZ4-compressed when that saves at least an eighth (as rdbcompression)." },
];

/// The canonical form of a `save` value (pairs of seconds ≥ 1 and changes ≥ 0, or empty), or
/// Redis' error (`setConfigSaveOption`).
fn normalize_save(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Ok(String::new());
    }
    let invalid = || "Invalid save parameters".to_string();
    let numbers = text
        .split(' ')
        .map(|word| word.parse::<i64>().map_err(|_| invalid()))
        .collect::<Result<Vec<_>, _>>()?;
    if numbers.len() % 2 == 1 || numbers.chunks(2).any(|pair| pair[0] < 1 || pair[1] < 0) {
        return Err(invalid());
    }
    Ok(numbers
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(" "))
}

/// The canonical form of a `client-output-buffer-limit` value (sizes in bytes), or Redis' error.
fn normalize_output_limits(text: &str) -> Result<String, String> {
    let classes = crate::pubsub::parse_output_limits(text)?;
    Ok(classes
        .iter()
        .map(|(class, l)| {
            format!(
                "{} {} {} {}",
                crate::pubsub::LimitClass::NAMES[*class as usize],
                l.hard,
                l.soft,
                l.soft_seconds
            )
        })
        .collect::<Vec<_>>()
        .join(" "))
}

/// How the value in force of a row kept outside the settings is read from the server's state.
pub type InForce = fn(&Shared) -> Value;

/// Rows whose value in force lives in the server's state rather than in the settings: Redis'
/// "special" configs, such as `replicaof`, which CONFIG SET may not change but the REPLICAOF
/// command does, and which CONFIG GET and CONFIG REWRITE report as they are now (Redis'
/// `rewriteConfigReplicaOfOption` writes the primary followed now, or nothing). An entry names a
/// row of [`SETTINGS`] and reads its value as that row's kind holds it.
#[rustfmt::skip]
pub static IN_FORCE: &[(&str, InForce)] = &[
    ("replicaof", |s| Value::Text(match &*s.repl.role.lock() {
        crate::repl::Role::Primary => String::new(),
        crate::repl::Role::Replica { host, port } => format!("{host} {port}"),
    })),
];

/// How a reported value is read from the server's state.
pub type Reported = fn(&Shared) -> String;

/// Values some Redis clients and tools query with `CONFIG GET` that are not settings here: they
/// describe what this server does and cannot be set.
#[rustfmt::skip]
pub static REPORTED: &[(&str, Reported)] = &[
    ("appendonly", |s| if s.persist.log.get().is_some() { "yes".into() } else { "no".into() }),
    // The default degree in Redis' terms, for tools that check it: `strict` fsyncs before the
    // reply (always), `background` within 10 ms (closest: everysec), `lazy` leaves it to the OS.
    ("appendfsync", |s| appendfsync_of(&s.config.durability.default).into()),
    // The server stays in the foreground (a service manager runs it).
    ("daemonize", |_| "no".into()),
];

/// Redis' `appendfsync` value closest to a durability degree.
fn appendfsync_of(degree: &str) -> &'static str {
    match degree {
        "strict" | "replicated" => "always",
        "background" => "everysec",
        _ => "no",
    }
}

/// Old names Redis 7 still accepts for a setting (its `*-ziplist-*` encoding knobs,
/// `lua-time-limit`, the `slave` names of the replica settings): CONFIG GET
/// reports them too and CONFIG SET takes them.
pub static ALIASES: &[(&str, &str)] = &[
    ("list-max-ziplist-size", "list-max-listpack-size"),
    ("hash-max-ziplist-entries", "hash-max-listpack-entries"),
    ("hash-max-ziplist-value", "hash-max-listpack-value"),
    ("zset-max-ziplist-entries", "zset-max-listpack-entries"),
    ("zset-max-ziplist-value", "zset-max-listpack-value"),
    ("lua-time-limit", "busy-reply-threshold"),
    ("repl-ping-slave-period", "repl-ping-replica-period"),
    ("slaveof", "replicaof"),
    ("slave-read-only", "replica-read-only"),
    ("slave-serve-stale-data", "replica-serve-stale-data"),
    ("slave-priority", "replica-priority"),
    ("slave-announce-ip", "replica-announce-ip"),
    ("slave-announce-port", "replica-announce-port"),
    ("min-slaves-to-write", "min-replicas-to-write"),
    ("min-slaves-max-lag", "min-replicas-max-lag"),
];

/// The row named `name` or one of its [`ALIASES`] (ASCII case-insensitive, as Redis looks
/// configs up).
pub fn find(name: &str) -> Option<&'static Setting> {
    let name = ALIASES
        .iter()
        .find(|(alias, _)| alias.eq_ignore_ascii_case(name))
        .map_or(name, |(_, row)| row);
    SETTINGS.iter().find(|s| s.name.eq_ignore_ascii_case(name))
}

/// The row for a TOML key in a section.
pub fn by_key(section: Section, key: &str) -> Option<&'static Setting> {
    SETTINGS
        .iter()
        .find(|s| s.section == section && s.key == key)
}

/// A configuration with every row at its default and the nested sections empty.
pub fn defaults() -> Config {
    let mut c = Config::blank();
    for s in SETTINGS {
        s.set_text(&mut c, s.default)
            .unwrap_or_else(|e| panic!("settings table: default of {}: {e}", s.name));
    }
    c
}

/// Set live settings from a configuration (at start-up).
pub fn init_live(live: &LiveSettings, config: &Config) {
    for s in SETTINGS {
        if let Some(l) = &s.live {
            (l.set)(live, &s.get(config));
        }
    }
}

const HEADER: &str = "\
# Gradus configuration: every setting with its value (`gradus --print-config` prints the ones in
# force: the defaults, then --config FILE, then flags; with neither, the defaults, which is the
# text of crates/server/gradus.toml).
#
# A file may set any subset of the settings: copy this, edit what you need and start with
# `gradus --config my.toml`; command-line flags override the file. Names follow redis-server's
# where one exists. Settings marked \"live\" can also be changed at run time with CONFIG SET;
# CONFIG GET shows every setting by the name given with its flag.
";

const DATABASES_DOC: &str = "\
# Per-database degrees by SELECT index, e.g. { \"1\" = \"none\" }. A database whose degree is \"none\"
# is never logged, whatever a connection asks.
";

const TENANTS_SKETCH: &str = "
# Tenants (none by default: one tenant, \"default\", with databases 0..databases-1 and the
# \"default\" user above). Declaring tenants makes every connection authenticate as a tenant's
# user; see examples/tenants.toml and the README (\"Tenants\"). Sketch:
#
# [[tenants]]
# name = \"alpha\"
# memory-limit = \"512mb\"                   # optional, all of the tenant's keyspaces together
#   [[tenants.users]]
#   name = \"alpha\"
#   password = \"pbkdf2-sha256$...\"         # from `gradus passwd`, never the password itself
#   permissions = [\"read\", \"write\", \"flush\"]
#   [[tenants.keyspaces]]
#   name = \"session\"
#   select = 0
#   durability = \"background\"              # default: [durability] default
#   eviction = \"none\"                      # none (refuse with OOM) | lru (a cache)
#   memory-limit = \"1gb\"                   # optional
#
# [[users]]                                 # e.g. the global admin
# name = \"admin\"
# password = \"pbkdf2-sha256$...\"
# permissions = [\"admin\"]
# tenant = \"alpha\"                          # where its key commands run (default: the first tenant)
";

/// Comment lines of at most 100 columns.
fn comment(out: &mut String, text: &str) {
    let mut line = String::from("#");
    for word in text.split_whitespace() {
        if line.len() + 1 + word.len() > 100 && line.len() > 1 {
            out.push_str(&line);
            out.push('\n');
            line = String::from("#");
        }
        line.push(' ');
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
}

/// The configuration as a TOML file: every row with its doc, then the nested sections
/// (`--print-config`; for [`defaults`], the text of `crates/server/gradus.toml`).
pub fn render_toml(config: &Config) -> Result<String, String> {
    let mut out = String::from(HEADER);
    for section in [Section::Top, Section::Durability] {
        if let Some(h) = section.header() {
            let _ = write!(out, "\n[{h}]\n");
        }
        for s in SETTINGS.iter().filter(|s| s.section == section) {
            out.push('\n');
            comment(&mut out, s.doc);
            let mut how = Vec::new();
            if s.key != s.name {
                how.push(format!("CONFIG GET {}", s.name));
            }
            if let Some(f) = &s.flag {
                let short = f.short.map(|c| format!(", -{c}")).unwrap_or_default();
                how.push(format!("flag --{} {}{short}", s.name, f.value_name));
            }
            if s.live.is_some() {
                how.push("live".into());
            }
            if !how.is_empty() {
                let _ = writeln!(out, "# ({})", how.join("; "));
            }
            let _ = writeln!(out, "{} = {}", s.key, s.get(config).toml());
        }
    }
    out.push('\n');
    out.push_str(DATABASES_DOC);
    let map: toml::Table = config
        .durability
        .databases
        .iter()
        .map(|(k, v)| (k.clone(), toml::Value::String(v.clone())))
        .collect();
    let _ = writeln!(out, "databases = {}", toml::Value::Table(map));
    if config.tenants.is_empty() && config.users.is_empty() {
        out.push_str(TENANTS_SKETCH);
    } else {
        // Empty lists are left out: `users = []` after `[durability]` would land in that table.
        #[derive(serde::Serialize)]
        struct Nested<'a> {
            #[serde(skip_serializing_if = "<[_]>::is_empty")]
            tenants: &'a [crate::config::TenantConfig],
            #[serde(skip_serializing_if = "<[_]>::is_empty")]
            users: &'a [crate::config::UserConfig],
        }
        let nested = Nested {
            tenants: &config.tenants,
            users: &config.users,
        };
        out.push('\n');
        out.push_str(&toml::to_string(&nested).map_err(|e| e.to_string())?);
    }
    Ok(out)
}

/// The README's settings table (the tests check README.md holds exactly this).
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| setting | flag | type | default | live | meaning |\n\
         |---------|------|------|---------|------|---------|\n",
    );
    for s in SETTINGS {
        let name = if s.section == Section::Top && s.key == s.name {
            format!("`{}`", s.name)
        } else {
            format!("`{}` (TOML: `{}`)", s.name, s.toml_path())
        };
        let flag = match &s.flag {
            Some(f) => {
                let short = f.short.map(|c| format!(", `-{c}`")).unwrap_or_default();
                format!("`--{} {}`{short}", s.name, f.value_name)
            }
            None => String::new(),
        };
        let default = match s.default {
            "" => "empty".to_string(),
            d => format!("`{d}`"),
        };
        let live = if s.live.is_some() { "yes" } else { "no" };
        let _ = writeln!(
            out,
            "| {name} | {flag} | {} | {default} | {live} | {} |",
            s.kind.describe(),
            s.doc
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRADUS_TOML: &str = include_str!("../gradus.toml");
    const README: &str = include_str!("../../../README.md");

    #[test]
    fn in_force_entries_name_rows() {
        for (name, _) in IN_FORCE {
            assert!(
                SETTINGS.iter().any(|s| s.name == *name),
                "IN_FORCE names {name}, which is not a row"
            );
        }
    }

    #[test]
    fn names_are_unique_kebab_case_and_keys_unique_per_section() {
        for (i, s) in SETTINGS.iter().enumerate() {
            assert!(
                s.name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{}",
                s.name
            );
            for t in &SETTINGS[i + 1..] {
                assert_ne!(s.name, t.name);
                assert!(s.section != t.section || s.key != t.key, "{}", s.key);
            }
            assert!(REPORTED.iter().all(|(n, _)| *n != s.name), "{}", s.name);
        }
    }

    #[test]
    fn every_default_parses_into_its_field_and_reads_back() {
        let c = defaults();
        for s in SETTINGS {
            assert_eq!(s.get(&c), s.kind.parse(s.default).unwrap(), "{}", s.name);
            assert_eq!(s.get(&c).text(), s.default, "{}", s.name);
        }
    }

    #[test]
    fn every_row_takes_its_extreme_values() {
        for s in SETTINGS {
            let mut c = defaults();
            if let Kind::Signed { min, max } = s.kind {
                for n in [min, max] {
                    s.set_text(&mut c, &n.to_string()).unwrap();
                    assert_eq!(s.get(&c), Value::Signed(n), "{}", s.name);
                }
                let err = s
                    .set_text(&mut c, &(max as i128 + 1).to_string())
                    .unwrap_err();
                assert!(err.contains("must be between"), "{}: {err}", s.name);
            }
            if let Kind::Int { min, max } | Kind::Size { min, max } = s.kind {
                for n in [min, max] {
                    s.set_text(&mut c, &n.to_string()).unwrap();
                    assert_eq!(s.get(&c), Value::Int(n), "{}", s.name);
                }
                if max < UNBOUNDED {
                    let err = s.set_text(&mut c, &(max + 1).to_string()).unwrap_err();
                    assert!(err.contains("must be between"), "{}: {err}", s.name);
                }
            }
        }
    }

    #[test]
    fn gradus_toml_is_the_rendered_defaults() {
        let rendered = render_toml(&defaults()).unwrap();
        assert!(
            rendered == GRADUS_TOML,
            "crates/server/gradus.toml differs from the settings table; regenerate it with \
             `gradus --print-config > crates/server/gradus.toml`. Expected:\n{rendered}"
        );
        // And so every row is in it, under its section, with its default.
        let table: toml::Table = GRADUS_TOML.parse().unwrap();
        for s in SETTINGS {
            let section = match s.section.header() {
                None => &table,
                Some(h) => table[h].as_table().unwrap(),
            };
            let v = section
                .get(s.key)
                .unwrap_or_else(|| panic!("{} missing", s.name));
            assert_eq!(s.kind.from_toml(v).unwrap().text(), s.default, "{}", s.name);
        }
    }

    #[test]
    fn rendering_reads_back_as_the_same_config() {
        let mut c = defaults();
        c.merge_toml(
            "port = 7000\nbind = [\"127.0.0.1\", \"::1\"]\nrequirepass = \"a \\\"b\\\"\"\n\
             [durability]\ndatabases = { \"1\" = \"none\" }\nzero-fill = 5\ndirect-io = false\n\
             [[tenants]]\nname = \"t\"\nmemory-limit = \"1mb\"\n\
             [[tenants.keyspaces]]\nname = \"k\"\nselect = 0\n",
        )
        .unwrap();
        let text = render_toml(&c).unwrap();
        let mut back = defaults();
        back.merge_toml(&text).unwrap();
        assert_eq!(back, c, "{text}");
    }

    /// `--print-config` wrote a text setting made of digits (a password "1234") as a TOML
    /// integer, which a text setting does not take: the printed file did not load.
    #[test]
    fn print_config_of_a_digits_only_password_reads_back() {
        let mut c = defaults();
        c.requirepass = "1234".into();
        c.durability.zero_fill = "10".into();
        let text = render_toml(&c).unwrap();
        assert!(text.contains("\nrequirepass = \"1234\"\n"), "{text}");
        let mut back = defaults();
        back.merge_toml(&text).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn readme_has_the_settings_table() {
        let table = markdown_table();
        assert!(
            README.contains(&table),
            "README.md's settings table differs from the settings table; it should read:\n{table}"
        );
        for s in SETTINGS {
            assert!(table.contains(&format!("| `{}`", s.name)), "{}", s.name);
        }
    }

    #[test]
    fn every_flag_maps_to_a_row() {
        use clap::CommandFactory;
        let cmd = crate::config::Cli::command();
        let own = ["config", "repair", "print-config", "help", "version"];
        let mut flagged = 0;
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if own.contains(&long) {
                continue;
            }
            let row = find(long).unwrap_or_else(|| panic!("--{long} is not a settings row"));
            let flag = row
                .flag
                .unwrap_or_else(|| panic!("{} has no flag", row.name));
            assert_eq!(arg.get_short(), flag.short, "--{long}");
            flagged += 1;
        }
        assert_eq!(
            flagged,
            SETTINGS.iter().filter(|s| s.flag.is_some()).count()
        );
    }

    #[test]
    fn aliases_name_rows() {
        for (alias, name) in ALIASES {
            assert_eq!(find(alias).map(|s| s.name), Some(*name));
            assert_eq!(find(&alias.to_uppercase()).map(|s| s.name), Some(*name));
            assert!(SETTINGS.iter().all(|s| s.name != *alias));
        }
    }

    #[test]
    fn kinds_parse_as_redis_does() {
        let signed = Kind::Signed {
            min: i32::MIN as i64,
            max: i32::MAX as i64,
        };
        assert_eq!(signed.parse("-2"), Ok(Value::Signed(-2)));
        assert_eq!(
            signed.parse("3000000000").unwrap_err(),
            "argument must be between -2147483648 and 2147483647 inclusive"
        );
        assert_eq!(
            signed.parse("x").unwrap_err(),
            "argument couldn't be parsed into an integer"
        );
        let int = Kind::Int { min: 1, max: 10 };
        assert_eq!(int.parse("10"), Ok(Value::Int(10)));
        assert_eq!(
            int.parse("x").unwrap_err(),
            "argument couldn't be parsed into an integer"
        );
        assert_eq!(
            int.parse("0").unwrap_err(),
            "argument must be between 1 and 10 inclusive"
        );
        assert_eq!(
            int.parse("-1").unwrap_err(),
            "argument must be between 1 and 10 inclusive"
        );
        let size = Kind::Size {
            min: 1024,
            max: UNBOUNDED,
        };
        assert_eq!(size.parse("2mb"), Ok(Value::Int(2 << 20)));
        assert_eq!(
            size.parse("-1").unwrap_err(),
            "argument must be a memory value"
        );
        assert_eq!(Kind::Bool.parse("YES"), Ok(Value::Bool(true)));
        assert_eq!(
            Kind::Bool.parse("1").unwrap_err(),
            "argument must be 'yes' or 'no'"
        );
        assert_eq!(DEGREES.parse("Strict"), Ok(Value::Text("strict".into())));
        assert_eq!(
            DEGREES.parse("x").unwrap_err(),
            "argument(s) must be one of the following: none, lazy, background, strict, replicated"
        );
        let zf = Kind::EnumOrInt(&["always", "never"]);
        assert_eq!(zf.parse("30"), Ok(Value::Text("30".into())));
        assert!(zf.parse("sometimes").is_err());
        assert_eq!(
            Kind::List.parse(" a  b "),
            Ok(Value::List(vec!["a".into(), "b".into()]))
        );
        assert_eq!(
            Kind::Bool.from_toml(&toml::Value::Integer(1)).unwrap_err(),
            "expected true or false"
        );
    }
}
