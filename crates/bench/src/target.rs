//! Targets and how each one is driven — the way real applications drive it, because the session
//! lock algorithm is part of what is measured:
//!
//! * `gradus` — native session locks: `SESSION.OPEN sid WAIT ms LEASE ms` (lock + read, one round
//!   trip; the server parks waiters FIFO) and `SESSION.CLOSE sid token DATA bytes TTL s` (write +
//!   unlock); or, with `+polling`, exactly the Redis sequence below. Cache as Redis hashes.
//! * `redis` — the phpredis session handler: `SET sid_LOCK secret NX PX lease` retried every
//!   poll interval (20 ms), `GET sid`, `SETEX sid ttl data`, then the compare-and-delete unlock
//!   script (`EVALSHA`, falling back to `EVAL`). Application cache in one hash per cache definition
//!   (`HGET`/`HMGET`/`HSET`), as Moodle's Redis cache store keeps it.
//! * `memcached` — the php-memcached session handler: `add lock.sid` polled until it succeeds,
//!   `get`, `set`, `delete lock.sid`; cache entries as `definition:key` items, multi-get with one
//!   `get k1 k2 …`.
//!
//! * `postgres`, `mariadb`, `myrocks`, `files` — the database and file session stores of
//!   [`crate::db`] (named locks on the page's connection, cache table).
//!
//! This module parses target specifications and turns the workloads' logical operations (lock and
//! read a session, read cache entries, …) into protocol requests. It does not start servers
//! (`server`) nor measure anything (`stats`).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use gradus_proto::Frame;
use rand::RngCore;
use serde::Serialize;

use crate::codec::{self, Compression};
use crate::db::DbConn;
use crate::error::{BenchError, Result};
use crate::memcache::MemcacheConn;
use crate::resp::{self, RespConn};
use crate::wire::{WireCounter, WireSnapshot};

/// The compare-and-delete unlock script phpredis sends (same text, so the same SHA1).
pub const UNLOCK_SCRIPT: &str =
    "if redis.call(\"get\",KEYS[1]) == ARGV[1] then return redis.call(\"del\",KEYS[1]) else return 0 end";

/// Which server family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    /// The Gradus server.
    Gradus,
    /// redis-server.
    Redis,
    /// memcached.
    Memcached,
    /// PostgreSQL (`synchronous_commit` on/off).
    Postgres,
    /// MariaDB with InnoDB (durable/relaxed).
    Mariadb,
    /// MariaDB with the RocksDB engine (durable/relaxed).
    Myrocks,
    /// One file per session under a directory, `flock` locks.
    Files,
}

impl TargetKind {
    /// True for the database targets (memory scenarios apply to them).
    pub fn is_database(self) -> bool {
        matches!(
            self,
            TargetKind::Postgres | TargetKind::Mariadb | TargetKind::Myrocks
        )
    }

    fn name(self) -> &'static str {
        match self {
            TargetKind::Gradus => "gradus",
            TargetKind::Redis => "redis",
            TargetKind::Memcached => "memcached",
            TargetKind::Postgres => "postgres",
            TargetKind::Mariadb => "mariadb",
            TargetKind::Myrocks => "myrocks",
            TargetKind::Files => "files",
        }
    }
}

/// The two layers a page uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Layer {
    /// The session handler.
    Session,
    /// The application cache.
    Cache,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Session => "session",
            Layer::Cache => "cache",
        })
    }
}

/// How session locks are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LockMode {
    /// Gradus' server-side `SESSION.OPEN`/`SESSION.CLOSE`.
    Native,
    /// `SET NX PX` (or memcached `add`) retried every poll interval.
    Polling,
}

/// One target as written on the command line: `gradus[:degree][+polling][@addr]`,
/// `redis[:no|everysec|always][@addr]`, `memcached[@addr]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetSpec {
    /// Server family.
    pub kind: TargetKind,
    /// Gradus durability degree or Redis `appendfsync` policy; `None` for memcached.
    pub degree: Option<String>,
    /// Session lock algorithm.
    pub lock_mode: LockMode,
    /// Attach to this address instead of starting a server.
    pub addr: Option<String>,
    /// Database memory scenario: buffer pool / block cache / shared_buffers as a share (percent)
    /// of the estimated data (`/mem50` suffix or `--db-memory`).
    pub memory_pct: Option<u32>,
    /// The size that share came to, bytes (set when the run is planned).
    pub memory_bytes: Option<u64>,
    /// The data size the share was taken of (see `db::sizing`), bytes.
    pub data_estimate_bytes: Option<u64>,
    /// Database targets: the server's connection cap (`--db-max-connections`).
    pub max_connections: Option<u32>,
}

impl TargetSpec {
    /// Parses `gradus:strict`, `gradus:background+polling`, `redis:everysec@127.0.0.1:6379`, ….
    pub fn parse(text: &str) -> Result<TargetSpec> {
        let (body, addr) = match text.split_once('@') {
            Some((b, a)) if !a.is_empty() => (b, Some(a.to_string())),
            Some(_) => return Err(BenchError::Input(format!("target {text:?}: empty address"))),
            None => (text, None),
        };
        let (body, memory_pct) = match body.split_once("/mem") {
            Some((b, pct)) => match pct.parse::<u32>() {
                Ok(p) if (1..=1000).contains(&p) => (b, Some(p)),
                _ => {
                    return Err(BenchError::Input(format!(
                        "target {text:?}: /mem takes a percentage (1-1000)"
                    )))
                }
            },
            None => (body, None),
        };
        let (body, polling) = match body.strip_suffix("+polling") {
            Some(b) => (b, true),
            None => (body, false),
        };
        let (name, degree) = match body.split_once(':') {
            Some((n, d)) => (n, Some(d.to_string())),
            None => (body, None),
        };
        let kind = match name {
            "gradus" => TargetKind::Gradus,
            "redis" => TargetKind::Redis,
            "memcached" => TargetKind::Memcached,
            "postgres" => TargetKind::Postgres,
            "mariadb" => TargetKind::Mariadb,
            "myrocks" => TargetKind::Myrocks,
            "files" => TargetKind::Files,
            other => {
                return Err(BenchError::Input(format!(
                "unknown target {other:?} (known: gradus[:none|lazy|background|strict][+polling], \
                     redis[:no|everysec|always], memcached, postgres[:on|off], \
                     mariadb[:durable|relaxed|relaxed0], myrocks[:durable|relaxed|relaxed0], files; append \
                     /memPCT to a database for a memory scenario, @host:port to attach)"
            )))
            }
        };
        let degree = match (kind, degree) {
            (TargetKind::Gradus, None) => Some("background".to_string()),
            (TargetKind::Gradus, Some(d)) => {
                if !["none", "lazy", "background", "strict"].contains(&d.as_str()) {
                    return Err(BenchError::Input(format!(
                        "gradus degree {d:?}: expected none, lazy, background or strict"
                    )));
                }
                Some(d)
            }
            (TargetKind::Redis, None) => Some("everysec".to_string()),
            (TargetKind::Redis, Some(d)) => {
                if !["no", "everysec", "always"].contains(&d.as_str()) {
                    return Err(BenchError::Input(format!(
                        "redis appendfsync {d:?}: expected no, everysec or always"
                    )));
                }
                Some(d)
            }
            (TargetKind::Memcached | TargetKind::Files, None) => None,
            (TargetKind::Memcached | TargetKind::Files, Some(d)) => {
                return Err(BenchError::Input(format!(
                    "{name} has no durability setting (got {d:?})"
                )))
            }
            (TargetKind::Postgres, None) => Some("on".to_string()),
            (TargetKind::Postgres, Some(d)) => {
                if !["on", "off"].contains(&d.as_str()) {
                    return Err(BenchError::Input(format!(
                        "postgres synchronous_commit {d:?}: expected on or off"
                    )));
                }
                Some(d)
            }
            (TargetKind::Mariadb | TargetKind::Myrocks, None) => Some("durable".to_string()),
            (TargetKind::Mariadb | TargetKind::Myrocks, Some(d)) => {
                if !["durable", "relaxed", "relaxed0"].contains(&d.as_str()) {
                    return Err(BenchError::Input(format!(
                        "{name} durability {d:?}: expected durable, relaxed or relaxed0"
                    )));
                }
                Some(d)
            }
        };
        if memory_pct.is_some() && !kind.is_database() {
            return Err(BenchError::Input(format!(
                "target {text:?}: memory scenarios apply to postgres, mariadb and myrocks"
            )));
        }
        let lock_mode = match (kind, polling) {
            (TargetKind::Gradus, false) => LockMode::Native,
            (TargetKind::Gradus, true) | (TargetKind::Redis, _) | (TargetKind::Memcached, _) => {
                LockMode::Polling
            }
            // Named locks the server parks waiters on (GET_LOCK, pg_advisory_lock), or flock.
            (_, _) => LockMode::Native,
        };
        Ok(TargetSpec {
            kind,
            degree,
            lock_mode,
            addr,
            memory_pct,
            memory_bytes: None,
            data_estimate_bytes: None,
            max_connections: None,
        })
    }

    /// The short label used in reports: `gradus:strict`, `gradus:strict+polling`, `redis:always`.
    pub fn label(&self) -> String {
        let mut s = self.kind.name().to_string();
        if let Some(d) = &self.degree {
            s.push(':');
            s.push_str(d);
        }
        if self.kind == TargetKind::Gradus && self.lock_mode == LockMode::Polling {
            s.push_str("+polling");
        }
        if let Some(p) = self.memory_pct {
            s.push_str(&format!("/mem{p}"));
        }
        s
    }
}

impl fmt::Display for TargetSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// How clients of one target behave (shared by all its connections).
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Server family.
    pub kind: TargetKind,
    /// Session lock algorithm.
    pub lock_mode: LockMode,
    /// `CLIENT DURABILITY` to send on every new connection (Gradus attached with `--addr`).
    pub durability_command: Option<String>,
    /// Longest time a session lock is waited for before the page gives up.
    pub lock_wait: Duration,
    /// Lock lease / lock key expiry.
    pub lock_lease: Duration,
    /// Sleep between two polling attempts.
    pub poll_interval: Duration,
    /// Session TTL in seconds.
    pub session_ttl_s: u32,
    /// Bound on every reply wait.
    pub op_timeout: Duration,
    /// Client-side compression of session data and cache values (`None`: off).
    pub compression: Option<Compression>,
    /// Route every connection through the bench's loopback relay, each direction delayed by
    /// this much (half the modelled round-trip time); `None`: connect directly.
    pub relay_one_way: Option<Duration>,
}

/// Proof of holding a session lock.
#[derive(Debug, Clone)]
pub enum LockToken {
    /// Gradus fencing token.
    Native(i64),
    /// Random secret stored in the lock key (Redis, memcached, Gradus polling).
    Secret(Bytes),
}

/// The result of locking and reading a session.
#[derive(Debug)]
pub struct OpenedSession {
    /// What releases the lock.
    pub token: LockToken,
    /// The stored session, `None` for a new one.
    pub data: Option<Bytes>,
    /// Failed lock attempts before the one that succeeded (always 0 for native locks: they
    /// wait server-side).
    pub polls: u32,
}

enum Conn {
    Resp(RespConn),
    Memcache(MemcacheConn),
    Db(Box<DbConn>),
}

/// One connection to one store, speaking that store's idioms.
struct Link {
    conn: Conn,
    config: Arc<ClientConfig>,
    /// Whether `EVALSHA` of the unlock script may be tried first (false after a `NOSCRIPT`
    /// until `EVAL` has loaded it again).
    script_loaded: bool,
    /// Bytes and round trips of this connection; `None` when they are not counted (the files
    /// store, or MariaDB's driver without the relay).
    wire: Option<Arc<WireCounter>>,
}

/// What one page's PHP process holds: a connection for the session handler and one for the
/// application cache — the same connection when both layers use the same target, two when
/// `--session-target` and `--cache-target` differ. Bytes and round trips are kept per layer.
pub struct Client {
    session: Link,
    cache: Option<Link>,
    by_layer: [WireSnapshot; 2],
}

/// Traffic of one client, per layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LayerWire {
    /// Session handler traffic.
    pub session: WireSnapshot,
    /// Application cache traffic.
    pub cache: WireSnapshot,
}

impl LayerWire {
    /// Both layers together.
    pub fn total(&self) -> WireSnapshot {
        self.session.plus(self.cache)
    }

    /// `self - earlier`, per layer.
    pub fn since(&self, earlier: LayerWire) -> LayerWire {
        LayerWire {
            session: self.session.since(earlier.session),
            cache: self.cache.since(earlier.cache),
        }
    }

    /// Per-layer sum.
    pub fn plus(&self, other: LayerWire) -> LayerWire {
        LayerWire {
            session: self.session.plus(other.session),
            cache: self.cache.plus(other.cache),
        }
    }
}

/// Where a user's connections go: the session layer's target and, when it differs, the cache
/// layer's.
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// Session handler: address and client behaviour.
    pub session: (String, Arc<ClientConfig>),
    /// Application cache, when it is another target than the session handler's.
    pub cache: Option<(String, Arc<ClientConfig>)>,
}

impl Endpoints {
    /// Both layers on one target.
    pub fn single(addr: String, config: Arc<ClientConfig>) -> Endpoints {
        Endpoints {
            session: (addr, config),
            cache: None,
        }
    }

    /// Opens one user's client.
    pub async fn connect(&self) -> Result<Client> {
        match &self.cache {
            None => Client::connect(&self.session.0, self.session.1.clone()).await,
            Some((addr, config)) => {
                Client::connect_split(
                    (&self.session.0, self.session.1.clone()),
                    (addr, config.clone()),
                )
                .await
            }
        }
    }
}

const SESSION: usize = 0;
const CACHE: usize = 1;

/// Runs `$body` on the link of `$layer`, adding its traffic to that layer's count.
macro_rules! on_layer {
    ($self:ident, $layer:expr, |$link:ident| $body:expr) => {{
        let layer = $layer;
        let $link = match (layer, &mut $self.cache) {
            (CACHE, Some(c)) => c,
            _ => &mut $self.session,
        };
        let before = $link.wire_snapshot();
        let result = $body.await;
        let after = $link.wire_snapshot();
        $self.by_layer[layer] = $self.by_layer[layer].plus(after.since(before));
        result
    }};
}

impl Client {
    /// Opens one connection to `addr` for both layers and prepares it.
    pub async fn connect(addr: &str, config: Arc<ClientConfig>) -> Result<Client> {
        Ok(Client {
            session: Link::connect(addr, config).await?,
            cache: None,
            by_layer: [WireSnapshot::default(); 2],
        })
    }

    /// Opens the session handler's connection to `session.0` and the cache's to `cache.0`.
    pub async fn connect_split(
        session: (&str, Arc<ClientConfig>),
        cache: (&str, Arc<ClientConfig>),
    ) -> Result<Client> {
        Ok(Client {
            session: Link::connect(session.0, session.1).await?,
            cache: Some(Link::connect(cache.0, cache.1).await?),
            by_layer: [WireSnapshot::default(); 2],
        })
    }

    /// `value` compressed when client-side compression is on and it pays.
    fn pack(&self, value: &[u8]) -> Option<Vec<u8>> {
        self.session
            .config
            .compression
            .and_then(|c| c.encode(value))
    }

    /// Bytes and round trips so far, per layer; `None` when a link is not counted.
    pub fn wire(&self) -> Option<LayerWire> {
        let counted = self.session.wire.is_some()
            && self
                .cache
                .as_ref()
                .map(|c| c.wire.is_some())
                .unwrap_or(true);
        counted.then_some(LayerWire {
            session: self.by_layer[SESSION],
            cache: self.by_layer[CACHE],
        })
    }

    /// Locks session `sid` and reads it.
    pub async fn session_open(&mut self, sid: &str) -> Result<OpenedSession> {
        let mut opened = on_layer!(self, SESSION, |l| l.session_open(sid))?;
        opened.data = codec::decode_opt(opened.data)?;
        Ok(opened)
    }

    /// Writes session `sid` and releases its lock.
    pub async fn session_close(&mut self, sid: &str, token: &LockToken, data: &[u8]) -> Result<()> {
        let packed = self.pack(data);
        let data = packed.as_deref().unwrap_or(data);
        on_layer!(self, SESSION, |l| l.session_close(sid, token, data))
    }

    /// Reads session `sid` without locking it.
    pub async fn session_read(&mut self, sid: &str) -> Result<Option<Bytes>> {
        codec::decode_opt(on_layer!(self, SESSION, |l| l.session_read(sid))?)
    }

    /// Reads several sessions without locking them (one round trip).
    pub async fn session_read_multi(&mut self, sids: &[String]) -> Result<Vec<Option<Bytes>>> {
        on_layer!(self, SESSION, |l| l.session_read_multi(sids))?
            .into_iter()
            .map(codec::decode_opt)
            .collect()
    }

    /// Reads one application-cache entry.
    pub async fn cache_get(&mut self, definition: &str, key: &str) -> Result<Option<Bytes>> {
        codec::decode_opt(on_layer!(self, CACHE, |l| l.cache_get(definition, key))?)
    }

    /// Reads several entries of one cache definition in one round trip.
    pub async fn cache_get_multi(
        &mut self,
        definition: &str,
        keys: &[String],
    ) -> Result<Vec<Option<Bytes>>> {
        on_layer!(self, CACHE, |l| l.cache_get_multi(definition, keys))?
            .into_iter()
            .map(codec::decode_opt)
            .collect()
    }

    /// Stores one application-cache entry.
    pub async fn cache_set(&mut self, definition: &str, key: &str, value: &[u8]) -> Result<()> {
        let packed = self.pack(value);
        let value = packed.as_deref().unwrap_or(value);
        on_layer!(self, CACHE, |l| l.cache_set(definition, key, value))
    }

    /// Stores many entries of one definition (filling the cache before a run).
    pub async fn cache_fill(
        &mut self,
        definition: &str,
        items: &[(String, Vec<u8>)],
    ) -> Result<()> {
        let packed: Vec<(String, Vec<u8>)>;
        let items = match self.session.config.compression {
            Some(c) => {
                packed = items
                    .iter()
                    .map(|(k, v)| (k.clone(), c.encode(v).unwrap_or_else(|| v.clone())))
                    .collect();
                &packed[..]
            }
            None => items,
        };
        on_layer!(self, CACHE, |l| l.cache_fill(definition, items))
    }

    /// Stores many plain keys (loading the `kv` records; the cache layer's target).
    pub async fn kv_fill(&mut self, items: &[(String, Vec<u8>)]) -> Result<()> {
        on_layer!(self, CACHE, |l| l.kv_fill(items))
    }

    /// Plain key read (the `kv` workload).
    pub async fn kv_get(&mut self, key: &str) -> Result<Option<Bytes>> {
        on_layer!(self, CACHE, |l| l.kv_get(key))
    }

    /// Plain key write (the `kv` workload).
    pub async fn kv_set(&mut self, key: &str, value: &[u8]) -> Result<()> {
        on_layer!(self, CACHE, |l| l.kv_set(key, value))
    }

    /// Server version and configuration of the session layer's target (creating a database
    /// target's tables); with a separate cache target, that one's tables are created too.
    pub async fn describe_server(&mut self) -> Result<ServerReport> {
        if let Some(c) = &mut self.cache {
            c.describe_server().await?;
        }
        self.session.describe_server().await
    }
}

fn lock_key(kind: TargetKind, sid: &str) -> String {
    match kind {
        TargetKind::Memcached => format!("lock.{sid}"),
        _ => format!("{sid}_LOCK"),
    }
}

fn cache_hash(definition: &str) -> String {
    format!("cache:{definition}")
}

fn memcache_key(definition: &str, key: &str) -> String {
    format!("{definition}:{key}")
}

fn random_secret() -> Bytes {
    let mut raw = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut raw);
    let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    Bytes::from(hex)
}

impl Link {
    /// Opens a connection to `addr` and prepares it (e.g. `CLIENT DURABILITY`). With a relay
    /// configured the connection goes through the bench's loopback relay (see `wire`).
    async fn connect(addr: &str, config: Arc<ClientConfig>) -> Result<Link> {
        let counter = WireCounter::shared();
        // MariaDB's driver keeps its socket: only the relay can count its bytes.
        let driver_owns_socket = matches!(config.kind, TargetKind::Mariadb | TargetKind::Myrocks);
        let (addr, wire) = match (config.kind, config.relay_one_way) {
            (TargetKind::Files, _) => (addr.to_string(), None),
            (_, Some(one_way)) => (
                crate::wire::relay(addr, one_way, driver_owns_socket.then(|| counter.clone()))?,
                Some(counter.clone()),
            ),
            (_, None) if driver_owns_socket => (addr.to_string(), None),
            (_, None) => (addr.to_string(), Some(counter.clone())),
        };
        let addr = addr.as_str();
        let conn = match config.kind {
            TargetKind::Memcached => Conn::Memcache(
                MemcacheConn::connect(addr, config.op_timeout, counter.clone()).await?,
            ),
            k if k.is_database() || k == TargetKind::Files => Conn::Db(Box::new(
                DbConn::connect(addr, &config, counter.clone()).await?,
            )),
            _ => Conn::Resp(RespConn::connect(addr, config.op_timeout, counter.clone()).await?),
        };
        let mut link = Link {
            conn,
            config,
            script_loaded: true,
            wire,
        };
        if let (Some(degree), Conn::Resp(c)) =
            (link.config.durability_command.clone(), &mut link.conn)
        {
            resp::expect_ok(
                c.call(&[b"CLIENT", b"DURABILITY", degree.as_bytes()])
                    .await?,
                "CLIENT DURABILITY",
            )?;
        }
        Ok(link)
    }

    /// This connection's counts so far (zero when not counted).
    fn wire_snapshot(&self) -> WireSnapshot {
        self.wire.as_ref().map(|w| w.snapshot()).unwrap_or_default()
    }

    fn resp(&mut self) -> &mut RespConn {
        match &mut self.conn {
            Conn::Resp(c) => c,
            Conn::Memcache(_) | Conn::Db(_) => {
                unreachable!("RESP call on a memcached or database connection")
            }
        }
    }

    /// Locks session `sid` and reads it.
    async fn session_open(&mut self, sid: &str) -> Result<OpenedSession> {
        let config = self.config.clone();
        if let Conn::Db(c) = &mut self.conn {
            let data = c.session_open(sid).await?;
            return Ok(OpenedSession {
                token: LockToken::Native(0),
                data,
                polls: 0,
            });
        }
        if config.kind == TargetKind::Gradus && config.lock_mode == LockMode::Native {
            let wait = config.lock_wait.as_millis().to_string();
            let lease = config.lock_lease.as_millis().to_string();
            let reply = self
                .resp()
                .call_with_extra(
                    &[
                        b"SESSION.OPEN",
                        sid.as_bytes(),
                        b"WAIT",
                        wait.as_bytes(),
                        b"LEASE",
                        lease.as_bytes(),
                    ],
                    config.lock_wait,
                )
                .await?;
            return match reply {
                Frame::Array(mut items) if items.len() == 2 => {
                    let data = items.pop().unwrap_or(Frame::Null);
                    let token = match items.pop() {
                        Some(Frame::Integer(t)) => t,
                        Some(Frame::Null) | Some(Frame::NullArray) => {
                            return Err(BenchError::LockTimeout(config.lock_wait))
                        }
                        other => {
                            return Err(BenchError::Unexpected {
                                command: "SESSION.OPEN",
                                reply: other.as_ref().map(resp::describe).unwrap_or_default(),
                            })
                        }
                    };
                    Ok(OpenedSession {
                        token: LockToken::Native(token),
                        data: resp::bulk_or_nil(data, "SESSION.OPEN")?,
                        polls: 0,
                    })
                }
                Frame::Null | Frame::NullArray => Err(BenchError::LockTimeout(config.lock_wait)),
                Frame::Error(e) => Err(BenchError::Server(e)),
                other => Err(BenchError::Unexpected {
                    command: "SESSION.OPEN",
                    reply: resp::describe(&other),
                }),
            };
        }
        let key = lock_key(config.kind, sid);
        let secret = random_secret();
        let started = Instant::now();
        let mut polls = 0u32;
        loop {
            let acquired = match &mut self.conn {
                Conn::Resp(c) => {
                    let lease = config.lock_lease.as_millis().to_string();
                    let reply = c
                        .call(&[
                            b"SET",
                            key.as_bytes(),
                            &secret,
                            b"NX",
                            b"PX",
                            lease.as_bytes(),
                        ])
                        .await?;
                    match reply {
                        Frame::Simple(_) => true,
                        Frame::Null | Frame::NullArray => false,
                        Frame::Error(e) => return Err(BenchError::Server(e)),
                        other => {
                            return Err(BenchError::Unexpected {
                                command: "SET NX PX",
                                reply: resp::describe(&other),
                            })
                        }
                    }
                }
                Conn::Memcache(c) => {
                    let secs = config.lock_lease.as_secs().max(1) as u32;
                    c.add(key.as_bytes(), &secret, secs).await?
                }
                Conn::Db(_) => unreachable!("database locks are taken above"),
            };
            if acquired {
                break;
            }
            polls += 1;
            if started.elapsed() + config.poll_interval > config.lock_wait {
                return Err(BenchError::LockTimeout(config.lock_wait));
            }
            tokio::time::sleep(config.poll_interval).await;
        }
        let data = self.session_read(sid).await?;
        Ok(OpenedSession {
            token: LockToken::Secret(secret),
            data,
            polls,
        })
    }

    /// Writes session `sid` and releases its lock.
    pub async fn session_close(&mut self, sid: &str, token: &LockToken, data: &[u8]) -> Result<()> {
        let config = self.config.clone();
        let ttl = config.session_ttl_s.to_string();
        match (token, &mut self.conn) {
            (_, Conn::Db(c)) => c.session_close(sid, data).await,
            (LockToken::Native(t), Conn::Resp(c)) => {
                let t = t.to_string();
                let reply = c
                    .call(&[
                        b"SESSION.CLOSE",
                        sid.as_bytes(),
                        t.as_bytes(),
                        b"DATA",
                        data,
                        b"TTL",
                        ttl.as_bytes(),
                    ])
                    .await?;
                resp::expect_ok(reply, "SESSION.CLOSE")
            }
            (LockToken::Secret(secret), Conn::Resp(_)) => {
                let secret = secret.clone();
                resp::expect_ok(
                    self.resp()
                        .call(&[b"SETEX", sid.as_bytes(), ttl.as_bytes(), data])
                        .await?,
                    "SETEX",
                )?;
                self.redis_unlock(sid, &secret).await
            }
            (LockToken::Secret(_), Conn::Memcache(c)) => {
                c.set(sid.as_bytes(), data, config.session_ttl_s).await?;
                c.delete(lock_key(config.kind, sid).as_bytes()).await?;
                Ok(())
            }
            (LockToken::Native(_), Conn::Memcache(_)) => Err(BenchError::Input(
                "native session locks are a Gradus feature".into(),
            )),
        }
    }

    /// phpredis' unlock: `EVALSHA` of the compare-and-delete script, `EVAL` on `NOSCRIPT`.
    async fn redis_unlock(&mut self, sid: &str, secret: &[u8]) -> Result<()> {
        let key = lock_key(self.config.kind, sid);
        if self.script_loaded {
            let sha = script_sha();
            let reply = self
                .resp()
                .call(&[b"EVALSHA", sha.as_bytes(), b"1", key.as_bytes(), secret])
                .await?;
            match reply {
                Frame::Error(e) if e.starts_with("NOSCRIPT") => self.script_loaded = false,
                other => return resp::integer(other, "EVALSHA unlock").map(|_| ()),
            }
        }
        let reply = self
            .resp()
            .call(&[
                b"EVAL",
                UNLOCK_SCRIPT.as_bytes(),
                b"1",
                key.as_bytes(),
                secret,
            ])
            .await?;
        resp::integer(reply, "EVAL unlock")?;
        self.script_loaded = true;
        Ok(())
    }

    /// Reads session `sid` without locking it.
    pub async fn session_read(&mut self, sid: &str) -> Result<Option<Bytes>> {
        match &mut self.conn {
            Conn::Resp(c) => resp::bulk_or_nil(c.call(&[b"GET", sid.as_bytes()]).await?, "GET"),
            Conn::Memcache(c) => c.get(sid.as_bytes()).await,
            Conn::Db(c) => c.session_read(sid).await,
        }
    }

    /// Reads several sessions without locking them (one round trip).
    pub async fn session_read_multi(&mut self, sids: &[String]) -> Result<Vec<Option<Bytes>>> {
        match &mut self.conn {
            Conn::Resp(c) => {
                let mut args: Vec<&[u8]> = Vec::with_capacity(sids.len() + 1);
                args.push(b"MGET");
                args.extend(sids.iter().map(|s| s.as_bytes()));
                aligned_array(c.call(&args).await?, sids.len(), "MGET")
            }
            Conn::Memcache(c) => {
                let keys: Vec<&[u8]> = sids.iter().map(|s| s.as_bytes()).collect();
                let found = c.get_multi(&keys).await?;
                Ok(align_found(&keys, found))
            }
            Conn::Db(c) => c.session_read_multi(sids).await,
        }
    }

    /// Reads one application-cache entry.
    pub async fn cache_get(&mut self, definition: &str, key: &str) -> Result<Option<Bytes>> {
        match &mut self.conn {
            Conn::Resp(c) => {
                let hash = cache_hash(definition);
                resp::bulk_or_nil(
                    c.call(&[b"HGET", hash.as_bytes(), key.as_bytes()]).await?,
                    "HGET",
                )
            }
            Conn::Memcache(c) => c.get(memcache_key(definition, key).as_bytes()).await,
            Conn::Db(c) => Ok(c
                .cache_get_multi(definition, &[key.to_string()])
                .await?
                .pop()
                .flatten()),
        }
    }

    /// Reads several entries of one cache definition in one round trip.
    pub async fn cache_get_multi(
        &mut self,
        definition: &str,
        keys: &[String],
    ) -> Result<Vec<Option<Bytes>>> {
        match &mut self.conn {
            Conn::Resp(c) => {
                let hash = cache_hash(definition);
                let mut args: Vec<&[u8]> = Vec::with_capacity(keys.len() + 2);
                args.push(b"HMGET");
                args.push(hash.as_bytes());
                args.extend(keys.iter().map(|k| k.as_bytes()));
                aligned_array(c.call(&args).await?, keys.len(), "HMGET")
            }
            Conn::Memcache(c) => {
                let full: Vec<String> = keys.iter().map(|k| memcache_key(definition, k)).collect();
                let refs: Vec<&[u8]> = full.iter().map(|k| k.as_bytes()).collect();
                let found = c.get_multi(&refs).await?;
                Ok(align_found(&refs, found))
            }
            Conn::Db(c) => c.cache_get_multi(definition, keys).await,
        }
    }

    /// Stores one application-cache entry.
    pub async fn cache_set(&mut self, definition: &str, key: &str, value: &[u8]) -> Result<()> {
        match &mut self.conn {
            Conn::Resp(c) => {
                let hash = cache_hash(definition);
                resp::integer(
                    c.call(&[b"HSET", hash.as_bytes(), key.as_bytes(), value])
                        .await?,
                    "HSET",
                )
                .map(|_| ())
            }
            Conn::Memcache(c) => {
                c.set(memcache_key(definition, key).as_bytes(), value, 0)
                    .await
            }
            Conn::Db(c) => {
                c.cache_put(definition, &[(key.to_string(), value.to_vec())])
                    .await
            }
        }
    }

    /// Stores many entries of one definition (used to fill the cache before a run; batched
    /// `HSET` on RESP targets).
    pub async fn cache_fill(
        &mut self,
        definition: &str,
        items: &[(String, Vec<u8>)],
    ) -> Result<()> {
        match &mut self.conn {
            Conn::Resp(c) => {
                let hash = cache_hash(definition);
                for chunk in items.chunks(200) {
                    let mut args: Vec<&[u8]> = Vec::with_capacity(2 + chunk.len() * 2);
                    args.push(b"HSET");
                    args.push(hash.as_bytes());
                    for (k, v) in chunk {
                        args.push(k.as_bytes());
                        args.push(v);
                    }
                    resp::integer(c.call(&args).await?, "HSET")?;
                }
                Ok(())
            }
            Conn::Memcache(c) => {
                for (k, v) in items {
                    c.set(memcache_key(definition, k).as_bytes(), v, 0).await?;
                }
                Ok(())
            }
            Conn::Db(c) => c.cache_put(definition, items).await,
        }
    }

    /// Stores many plain keys (loading the `kv` records: `MSET` batches on RESP targets).
    pub async fn kv_fill(&mut self, items: &[(String, Vec<u8>)]) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        match &mut self.conn {
            Conn::Resp(c) => {
                let mut args: Vec<&[u8]> = Vec::with_capacity(1 + items.len() * 2);
                args.push(b"MSET");
                for (k, v) in items {
                    args.push(k.as_bytes());
                    args.push(v);
                }
                resp::expect_ok(c.call(&args).await?, "MSET")
            }
            Conn::Memcache(c) => {
                for (k, v) in items {
                    c.set(k.as_bytes(), v, 0).await?;
                }
                Ok(())
            }
            Conn::Db(c) => c.kv_put(items).await,
        }
    }

    /// Plain key read (the `kv` workload).
    pub async fn kv_get(&mut self, key: &str) -> Result<Option<Bytes>> {
        if let Conn::Db(c) = &mut self.conn {
            return c.kv_get(key).await;
        }
        self.session_read(key).await
    }

    /// Plain key write (the `kv` workload).
    pub async fn kv_set(&mut self, key: &str, value: &[u8]) -> Result<()> {
        match &mut self.conn {
            Conn::Resp(c) => {
                resp::expect_ok(c.call(&[b"SET", key.as_bytes(), value]).await?, "SET")
            }
            Conn::Memcache(c) => c.set(key.as_bytes(), value, 0).await,
            Conn::Db(c) => c.kv_put(&[(key.to_string(), value.to_vec())]).await,
        }
    }

    /// Server version and configuration, as the server itself reports them.
    pub async fn describe_server(&mut self) -> Result<ServerReport> {
        match &mut self.conn {
            Conn::Resp(c) => {
                let info = resp::bulk_or_nil(c.call(&[b"INFO", b"server"]).await?, "INFO")?
                    .unwrap_or_default();
                let info = String::from_utf8_lossy(&info).into_owned();
                let field = |name: &str| {
                    info.lines()
                        .find_map(|l| l.strip_prefix(&format!("{name}:")))
                        .map(|v| v.trim().to_string())
                };
                let version = field("redis_version").unwrap_or_default();
                let mut info_fields = Vec::new();
                for name in [
                    "redis_version",
                    "gradus_version",
                    "redis_mode",
                    "os",
                    "arch_bits",
                ] {
                    if let Some(v) = field(name) {
                        info_fields.push((name.to_string(), v));
                    }
                }
                let config = match c.call(&[b"CONFIG", b"GET", b"*"]).await? {
                    Frame::Error(_) => Vec::new(),
                    f => resp::pairs(f),
                };
                Ok(ServerReport {
                    protocol_version: version,
                    info: info_fields,
                    config,
                })
            }
            Conn::Memcache(c) => Ok(ServerReport {
                protocol_version: c.version().await?,
                info: Vec::new(),
                config: c.stats_settings().await?,
            }),
            Conn::Db(c) => {
                // The first contact with a database target: its tables are created here.
                c.create_schema().await?;
                c.describe().await
            }
        }
    }
}

/// What a server says about itself.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerReport {
    /// `redis_version` from `INFO` or memcached's `version`.
    pub protocol_version: String,
    /// Selected `INFO server` fields.
    pub info: Vec<(String, String)>,
    /// `CONFIG GET *` or `stats settings`, sorted by name.
    pub config: Vec<(String, String)>,
}

/// SHA1 of [`UNLOCK_SCRIPT`], computed once.
fn script_sha() -> &'static str {
    static SHA: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SHA.get_or_init(|| {
        sha1_smol::Sha1::from(UNLOCK_SCRIPT.as_bytes())
            .digest()
            .to_string()
    })
}

fn aligned_array(frame: Frame, n: usize, command: &'static str) -> Result<Vec<Option<Bytes>>> {
    match frame {
        Frame::Array(items) if items.len() == n => items
            .into_iter()
            .map(|f| resp::bulk_or_nil(f, command))
            .collect(),
        Frame::Error(e) => Err(BenchError::Server(e)),
        other => Err(BenchError::Unexpected {
            command,
            reply: resp::describe(&other),
        }),
    }
}

/// memcached omits misses from a multi-get: put the hits back in request order.
fn align_found(keys: &[&[u8]], found: Vec<(Bytes, Bytes)>) -> Vec<Option<Bytes>> {
    let mut out: Vec<Option<Bytes>> = vec![None; keys.len()];
    let mut next = 0;
    for (k, v) in found {
        // Replies come in request order; scan forward from the last match.
        if let Some(pos) = keys[next..].iter().position(|q| *q == k.as_ref()) {
            out[next + pos] = Some(v);
            next += pos + 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_specs_parse() {
        let t = TargetSpec::parse("gradus:strict").unwrap();
        assert_eq!(t.kind, TargetKind::Gradus);
        assert_eq!(t.degree.as_deref(), Some("strict"));
        assert_eq!(t.lock_mode, LockMode::Native);
        let t = TargetSpec::parse("gradus:none+polling@127.0.0.1:7000").unwrap();
        assert_eq!(t.lock_mode, LockMode::Polling);
        assert_eq!(t.addr.as_deref(), Some("127.0.0.1:7000"));
        assert_eq!(t.label(), "gradus:none+polling");
        assert_eq!(
            TargetSpec::parse("redis").unwrap().label(),
            "redis:everysec"
        );
        assert_eq!(TargetSpec::parse("memcached").unwrap().label(), "memcached");
        assert_eq!(
            TargetSpec::parse("postgres").unwrap().label(),
            "postgres:on"
        );
        assert_eq!(
            TargetSpec::parse("mariadb:relaxed/mem50").unwrap().label(),
            "mariadb:relaxed/mem50"
        );
        assert_eq!(
            TargetSpec::parse("myrocks").unwrap().label(),
            "myrocks:durable"
        );
        assert_eq!(TargetSpec::parse("files").unwrap().label(), "files");
        for bad in [
            "postgres:maybe",
            "files:durable",
            "redis/mem50",
            "mariadb/memx",
            "sqlite",
            "gradus:fast",
            "redis:sometimes",
            "memcached:always",
            "redis@",
        ] {
            assert!(
                matches!(TargetSpec::parse(bad), Err(BenchError::Input(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn multi_get_misses_are_realigned() {
        let keys: Vec<&[u8]> = vec![b"a", b"b", b"c"];
        let found = vec![(Bytes::from_static(b"c"), Bytes::from_static(b"3"))];
        assert_eq!(
            align_found(&keys, found),
            vec![None, None, Some(Bytes::from_static(b"3"))]
        );
    }

    #[test]
    fn unlock_script_digest_is_phpredis_text_digest() {
        assert_eq!(script_sha().len(), 40);
        assert_eq!(
            sha1_smol::Sha1::from(b"abc").digest().to_string(),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
    }
}
