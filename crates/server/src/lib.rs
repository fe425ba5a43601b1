//! The Gradus server. The request path is the module list:
//!
//! - [`server`]: bind, accept, maxclients, active expiry timer, signals and graceful shutdown;
//! - [`socket`]: a client's TCP socket, registered for reading only (requests are served in the
//!   order they arrive, as in redis-server);
//! - [`connection`]: bytes ↔ requests/replies for one client, pipelining, output batching;
//! - [`dispatch`]: table lookup, arity, auth, MULTI queueing, the store gate;
//! - [`alloc`]: the counting global allocator behind `used_memory`;
//! - [`command`]: the command table (data) and one module per command family;
//! - [`client`]: per-connection state and the registry behind CLIENT LIST/KILL;
//! - [`state`]: what all connections share (store, live settings, counters);
//! - [`tenancy`]: tenants and keyspaces, the keyspace layout, the users lookup; `tenancy::auth`:
//!   password checks and AUTH throttling; `tenancy::acl`: rights and the per-command check;
//! - [`functions`]: Redis 7 function libraries, per tenant (data; the commands and the Lua side
//!   are in `command::functions` and `command::scripting`);
//! - [`tracking`]: client-side caching (CLIENT TRACKING) and its invalidations;
//! - [`blocking`]: clients blocked in BLPOP & co., served first-come first-served by writers;
//! - [`pubsub`]: channel subscriptions by tenant, and each connection's bounded outbox of pushed
//!   messages (pub/sub, keyspace notifications, invalidations);
//! - [`migrate`]: MIGRATE's conversation with its target and the cache of its connections;
//! - [`monitor`]: MONITOR's connections and lines;
//! - [`pause`]: CLIENT PAUSE and FAILOVER's pause: which commands wait, and their wake-up;
//! - [`notify`]: keyspace notifications (`notify-keyspace-events`);
//! - [`quota`]: memory limits per keyspace and tenant: LRU eviction for caches, OOM for the rest;
//! - [`persist`]: durability degrees and the strict wait; `persist::write`: the one write path;
//!   `persist::record`: log records and snapshot items; `persist::replay`: recovery;
//!   `persist::snapshot`: taking snapshots; `persist::layout`: the data directory's lock and
//!   `LAYOUT` file (the log itself is `gradus-log`);
//! - [`repl`]: replication: the backlog, the primary's side of a replica's link, the replica's
//!   task that follows a primary, the stream's wire format;
//! - [`memcache`]: the memcached listener over the same keyspaces: `memcache::session` (the
//!   storage core both protocols share), `memcache::text` and `memcache::meta` (the commands);
//! - [`observe`]: per-command statistics, the slow log, the latency monitor, and the HTTP
//!   listener for Prometheus metrics and the status page;
//! - [`settings`]: the table of settings (name, type, default, live, flag, doc) that the TOML file,
//!   flags, CONFIG GET/SET, `--print-config` and the README's table all come from;
//! - [`tls`]: rustls on the TLS ports: the configuration from the `tls-*` settings, its reload,
//!   and the stream type both connection loops are generic over;
//! - [`config`]: defaults, TOML file, flags, validation; [`config_rewrite`]: CONFIG REWRITE's
//!   edit of that file; [`info`]: the INFO text;
//! - [`logging`]: the log's filter (`loglevel`), changed at run time by CONFIG SET;
//! - [`args`]: argument parsing with Redis' rules; [`long_double`]: Redis' float arithmetic for
//!   INCRBYFLOAT/HINCRBYFLOAT; [`error`]: this layer's error type.
//!
//! Protocol codecs live in `gradus-proto` and keyspaces in `gradus-store`; this crate wires them to
//! sockets and must not reimplement either.

pub mod alloc;
pub mod args;
pub mod blocking;
pub mod client;
pub mod command;
pub mod config;
pub mod config_rewrite;
pub mod connection;
pub mod dispatch;
pub mod error;
pub mod functions;
pub mod hll;
pub mod info;
pub mod logging;
pub mod long_double;
pub mod memcache;
pub mod migrate;
pub mod monitor;
pub mod notify;
pub mod observe;
pub mod pause;
pub mod persist;
pub mod pubsub;
pub mod quota;
pub mod repl;
pub mod server;
pub mod settings;
pub mod socket;
pub mod state;
pub mod tenancy;
pub mod tls;
pub mod tracking;

pub use config::{Cli, Config};
pub use server::Server;

/// Version reported as `redis_version` (clients such as Moodle require at least 5.0.0 and enable
/// features by it; Gradus implements the 7.2 command semantics it advertises).
pub const REDIS_COMPAT_VERSION: &str = "7.2.4";
/// Gradus' own version.
pub const GRADUS_VERSION: &str = env!("CARGO_PKG_VERSION");
