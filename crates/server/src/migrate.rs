//! MIGRATE's conversation with the target instance, as Redis 7.2's `migrateCommand` has it
//! (`cluster.c`): connect (or take a cached connection), send in one write an `AUTH` when
//! credentials are given, a `SELECT` unless the connection has the destination database selected
//! already, and one `RESTORE key ttl payload [REPLACE]` per key; then read one reply line for
//! each, and say which keys the target acknowledged and what MIGRATE answers. A socket error
//! before any reply is read is retried once on a fresh connection, unless it was a timeout (a
//! cached connection the target closed meanwhile fails that way). Every step waits at most the
//! command's timeout, on the tokio runtime: nothing here blocks a thread.
//!
//! Connecting fails as in Redis, whose blocking connect only fails when the `connect` call
//! itself does (the host does not resolve, the port is negative, no route to the network):
//! `IOERR … connecting to the client`. A connection refused, or not made within the timeout, is
//! found by the first write, which waits up to another timeout for it: `IOERR … writing to
//! target instance` (after the retry, for a refusal).
//!
//! The connection cache is Redis' `migrate_cached_sockets` (INFO `migrate_cached_sockets`): at
//! most 64 idle connections, each closed once unused for 10 s (a sweeper task runs while the
//! cache is not empty). A connection is taken out of the cache while a MIGRATE uses it, so two
//! MIGRATEs never share one, and goes back only when the exchange left it in a known state. It
//! is keyed by the credentials presented as well as by the target: one caller's authenticated
//! connection is never lent to a MIGRATE that presented other credentials or none (Redis keys
//! by `host:port` alone; with tenants that would lend one tenant's login to another).
//!
//! May import: `gradus-proto` (the commands are encoded as any RESP array is), `args::atoi`. Nothing of the
//! keyspaces or the command table: the caller hands over the payloads and deletes what was
//! acknowledged.

use crate::args::atoi;
use bytes::{Bytes, BytesMut};
use gradus_proto::{encode, Frame, ProtocolVersion};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Redis' `MIGRATE_SOCKET_CACHE_ITEMS`.
const CACHE_ITEMS: usize = 64;
/// Redis' `MIGRATE_SOCKET_CACHE_TTL`: a cached connection unused this long is closed.
const CACHE_TTL: Duration = Duration::from_secs(10);
/// How often the sweeper looks for connections past [`CACHE_TTL`].
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Redis writes the commands in chunks of this size, each within the timeout.
const WRITE_CHUNK: usize = 64 * 1024;
/// A reply line longer than this is not an answer to AUTH, SELECT or RESTORE: the connection is
/// dropped as broken (Redis reads at most 1 KB per line).
const MAX_LINE: usize = 64 * 1024;

/// Credentials for the target: `AUTH password`, or `AUTH2 username password`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Credentials {
    pub username: Option<Bytes>,
    pub password: Bytes,
}

/// One key to restore on the target.
#[derive(Debug, Clone)]
pub struct Restore {
    pub key: Bytes,
    /// Relative TTL in ms (0: none), as RESTORE takes it.
    pub ttl_ms: u64,
    /// The DUMP payload.
    pub payload: Bytes,
}

/// What to send where.
#[derive(Debug, Clone)]
pub struct Request {
    /// The target as the client named it (Redis caches by these strings).
    pub host: Bytes,
    pub port: Bytes,
    pub db: i64,
    /// Every step's limit (connect, each write, each reply line).
    pub timeout: Duration,
    pub credentials: Option<Credentials>,
    pub replace: bool,
    pub keys: Vec<Restore>,
}

/// Why MIGRATE failed, each with Redis' text (see [`Failure::text`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The connection could not be made within the timeout.
    Connect,
    /// Sending the commands failed or timed out.
    Write,
    /// A reply did not come within the timeout, or the connection broke.
    Read,
    /// The target answered AUTH, SELECT or a RESTORE with this error (the line after its `-`).
    Target(String),
}

impl Failure {
    /// The error line MIGRATE answers (without the leading `-`), word for word Redis'.
    pub fn text(&self) -> String {
        match self {
            Failure::Connect => "IOERR error or timeout connecting to the client".into(),
            Failure::Write => "IOERR error or timeout writing to target instance".into(),
            Failure::Read => "IOERR error or timeout reading to target instance".into(),
            Failure::Target(line) => format!("ERR Target instance replied with error: {line}"),
        }
    }
}

/// The result of one transfer.
#[derive(Debug)]
pub struct Transfer {
    /// Indexes (into [`Request::keys`]) of the keys whose RESTORE the target acknowledged, with
    /// AUTH and SELECT (when sent) acknowledged too: those the caller deletes unless COPY.
    pub acknowledged: Vec<usize>,
    pub outcome: Result<(), Failure>,
}

/// Which connection a cached one may stand for: the target as named, and the credentials
/// presented to it (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct CacheKey {
    host: Bytes,
    port: Bytes,
    credentials: Option<Credentials>,
}

/// A connection to a target, and the database it has selected (None: unknown).
struct Connection {
    stream: TcpStream,
    read_buf: BytesMut,
    selected: Option<i64>,
}

struct Idle {
    conn: Connection,
    last_use: Instant,
}

/// Idle connections to MIGRATE targets (see the module docs). The map's mutex is held only to
/// take or put a connection, never across an `.await`.
#[derive(Default)]
pub struct SocketCache {
    idle: Arc<Mutex<HashMap<CacheKey, Idle>>>,
    /// Whether a sweeper task runs (it stops once the cache is empty).
    sweeping: Arc<AtomicBool>,
}

impl SocketCache {
    /// How many connections are cached (INFO `migrate_cached_sockets`).
    pub fn len(&self) -> usize {
        self.idle.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A cached connection for `key` (taken out of the cache), unless it was idle too long.
    fn take(&self, key: &CacheKey) -> Option<Connection> {
        let idle = self.idle.lock().remove(key)?;
        (idle.last_use.elapsed() <= CACHE_TTL).then_some(idle.conn)
    }

    /// Cache `conn` for `key`; when the cache is full, the connection unused longest goes. One
    /// that has unread bytes (the target said more than one line) is not in a known state: it
    /// is closed instead.
    fn put(&self, key: CacheKey, conn: Connection) {
        if !conn.read_buf.is_empty() {
            return;
        }
        let mut idle = self.idle.lock();
        if !idle.contains_key(&key) && idle.len() >= CACHE_ITEMS {
            let oldest = idle
                .iter()
                .min_by_key(|(_, c)| c.last_use)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                idle.remove(&oldest);
            }
        }
        idle.insert(
            key,
            Idle {
                conn,
                last_use: Instant::now(),
            },
        );
        // Decided under the map's lock, as the sweeper decides to stop: a connection cached
        // just as it stops starts a new one.
        if !self.sweeping.swap(true, Ordering::AcqRel) {
            let (idle, sweeping) = (self.idle.clone(), self.sweeping.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(SWEEP_EVERY).await;
                    let mut map = idle.lock();
                    map.retain(|_, c| c.last_use.elapsed() <= CACHE_TTL);
                    if map.is_empty() {
                        sweeping.store(false, Ordering::Release);
                        return;
                    }
                }
            });
        }
    }
}

/// Why a socket operation failed; a timeout is never retried (Redis' `errno != ETIMEDOUT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SocketError {
    TimedOut,
    Broken,
}

/// Why no connection was made: at once (Redis' connect fails), or as Redis' first write would
/// find it (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenError {
    Connect,
    Write(SocketError),
}

impl Connection {
    /// Connect to `host:port` (the port read as C's `atoi` and passed on as Redis does: a
    /// negative one does not resolve, a larger one wraps), within the connect's timeout and the
    /// first write's.
    async fn open(host: &Bytes, port: &Bytes, timeout: Duration) -> Result<Connection, OpenError> {
        let host = std::str::from_utf8(host).map_err(|_| OpenError::Connect)?;
        let port = match atoi(port) {
            n if (0..=i64::from(i32::MAX)).contains(&n) => n as u16,
            _ => return Err(OpenError::Connect),
        };
        let stream = match tokio::time::timeout(timeout * 2, TcpStream::connect((host, port))).await
        {
            Err(_) => return Err(OpenError::Write(SocketError::TimedOut)),
            Ok(Err(e)) if found_by_writing(&e) => {
                return Err(OpenError::Write(SocketError::Broken))
            }
            Ok(Err(_)) => return Err(OpenError::Connect),
            Ok(Ok(stream)) => stream,
        };
        let _ = stream.set_nodelay(true);
        Ok(Connection {
            stream,
            read_buf: BytesMut::with_capacity(1024),
            selected: None,
        })
    }

    /// Write `buf` in chunks of [`WRITE_CHUNK`], each within `timeout`.
    async fn send(&mut self, buf: &[u8], timeout: Duration) -> Result<(), SocketError> {
        for chunk in buf.chunks(WRITE_CHUNK) {
            match tokio::time::timeout(timeout, self.stream.write_all(chunk)).await {
                Err(_) => return Err(SocketError::TimedOut),
                Ok(Err(_)) => return Err(SocketError::Broken),
                Ok(Ok(())) => {}
            }
        }
        Ok(())
    }

    /// One reply line without its `\r\n`, within `timeout`.
    async fn read_line(&mut self, timeout: Duration) -> Result<Bytes, SocketError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(at) = self.read_buf.iter().position(|&b| b == b'\n') {
                let mut line = self.read_buf.split_to(at + 1).freeze();
                line.truncate(at);
                if line.ends_with(b"\r") {
                    line.truncate(at - 1);
                }
                return Ok(line);
            }
            if self.read_buf.len() > MAX_LINE {
                return Err(SocketError::Broken);
            }
            let read = self.stream.read_buf(&mut self.read_buf);
            match tokio::time::timeout_at(deadline, read).await {
                Err(_) => return Err(SocketError::TimedOut),
                Ok(Ok(0)) | Ok(Err(_)) => return Err(SocketError::Broken),
                Ok(Ok(_)) => {}
            }
        }
    }
}

/// Whether a failed connect is one a non-blocking `connect` reports later, not at once (a
/// refusal, an unreachable host, a timeout): Redis finds those when it writes.
fn found_by_writing(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ETIMEDOUT | libc::ECONNRESET)
    )
}

/// Append one command as a RESP array of bulk strings.
fn push_command(out: &mut BytesMut, args: Vec<Bytes>) {
    let frame = Frame::Array(args.into_iter().map(Frame::Bulk).collect());
    encode(&frame, ProtocolVersion::Resp2, out);
}

/// Everything MIGRATE sends in one write: AUTH, SELECT (when `select`), the RESTOREs.
fn commands(request: &Request, select: bool) -> BytesMut {
    let mut out = BytesMut::new();
    if let Some(c) = &request.credentials {
        let mut args = vec![Bytes::from_static(b"AUTH")];
        args.extend(c.username.clone());
        args.push(c.password.clone());
        push_command(&mut out, args);
    }
    if select {
        let db = Bytes::from(request.db.to_string());
        push_command(&mut out, vec![Bytes::from_static(b"SELECT"), db]);
    }
    for k in &request.keys {
        let mut args = vec![
            Bytes::from_static(b"RESTORE"),
            k.key.clone(),
            Bytes::from(k.ttl_ms.to_string()),
            k.payload.clone(),
        ];
        if request.replace {
            args.push(Bytes::from_static(b"REPLACE"));
        }
        push_command(&mut out, args);
    }
    out
}

/// The text of an error reply line (after its `-`), None for any other reply.
fn error_text(line: &[u8]) -> Option<String> {
    line.strip_prefix(b"-")
        .map(|e| String::from_utf8_lossy(e).into_owned())
}

/// Send `request` to its target and read the replies (see the module docs).
pub async fn transfer(cache: &SocketCache, request: &Request) -> Transfer {
    let key = CacheKey {
        host: request.host.clone(),
        port: request.port.clone(),
        credentials: request.credentials.clone(),
    };
    let failed = |failure| Transfer {
        acknowledged: Vec::new(),
        outcome: Err(failure),
    };
    let mut may_retry = true;
    loop {
        // A socket error before any RESTORE reply: retried once on a fresh connection unless
        // it was a timeout (the connection is dropped either way).
        let retry = |e: SocketError, may_retry: &mut bool| {
            let again = e != SocketError::TimedOut && *may_retry;
            *may_retry = false;
            again
        };
        let cached = cache.take(&key);
        let opened = match cached {
            Some(conn) => Ok(conn),
            None => Connection::open(&request.host, &request.port, request.timeout).await,
        };
        let mut conn = match opened {
            Ok(conn) => conn,
            Err(OpenError::Connect) => return failed(Failure::Connect),
            Err(OpenError::Write(e)) if retry(e, &mut may_retry) => continue,
            Err(OpenError::Write(_)) => return failed(Failure::Write),
        };
        let select = conn.selected != Some(request.db);
        let timeout = request.timeout;
        if let Err(e) = conn.send(&commands(request, select), timeout).await {
            if retry(e, &mut may_retry) {
                continue;
            }
            return failed(Failure::Write);
        }
        let mut preamble_error = None;
        let mut broken = None;
        for sent in [request.credentials.is_some(), select] {
            if !sent {
                continue;
            }
            match conn.read_line(timeout).await {
                Ok(line) => preamble_error = preamble_error.or_else(|| error_text(&line)),
                Err(e) => {
                    broken = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = broken {
            if retry(e, &mut may_retry) {
                continue;
            }
            return failed(Failure::Read);
        }
        // As Redis: an error to AUTH or SELECT is reported (first) once a RESTORE reply is
        // read, and then no key counts as acknowledged.
        let mut acknowledged = Vec::new();
        let mut target_error = None;
        let mut socket_error = None;
        for i in 0..request.keys.len() {
            match conn.read_line(timeout).await {
                Err(e) => {
                    socket_error = Some((i, e));
                    break;
                }
                Ok(line) => match preamble_error.clone().or_else(|| error_text(&line)) {
                    Some(text) => {
                        target_error.get_or_insert(text);
                    }
                    None => acknowledged.push(i),
                },
            }
        }
        match (target_error, socket_error) {
            (None, Some((0, e))) if retry(e, &mut may_retry) => continue,
            (None, Some(_)) => {
                return Transfer {
                    acknowledged,
                    outcome: Err(Failure::Read),
                }
            }
            (Some(text), socket_error) => {
                // After an error the selected database is not known any more.
                conn.selected = None;
                if socket_error.is_none() {
                    cache.put(key, conn);
                }
                return Transfer {
                    acknowledged,
                    outcome: Err(Failure::Target(text)),
                };
            }
            (None, None) => {
                conn.selected = Some(request.db);
                cache.put(key, conn);
                return Transfer {
                    acknowledged,
                    outcome: Ok(()),
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    fn request(port: u16, keys: &[&str]) -> Request {
        Request {
            host: Bytes::from_static(b"127.0.0.1"),
            port: Bytes::from(port.to_string()),
            db: 0,
            timeout: Duration::from_millis(500),
            credentials: None,
            replace: false,
            keys: keys
                .iter()
                .map(|k| Restore {
                    key: Bytes::copy_from_slice(k.as_bytes()),
                    ttl_ms: 0,
                    payload: Bytes::from_static(b"payload"),
                })
                .collect(),
        }
    }

    /// A target that reads what it is sent, answers `replies` (whole lines), and keeps the
    /// connection open for two seconds.
    async fn target(replies: &'static str) -> (u16, tokio::task::JoinHandle<Vec<u8>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = vec![0u8; 4096];
            let n = s.read(&mut got).await.unwrap();
            got.truncate(n);
            s.write_all(replies.as_bytes()).await.unwrap();
            tokio::time::sleep(Duration::from_secs(2)).await;
            got
        });
        (port, task)
    }

    #[test]
    fn atoi_reads_as_c_does() {
        assert_eq!(atoi(b"6379"), 6379);
        assert_eq!(atoi(b" 12x"), 12);
        assert_eq!(atoi(b"abc"), 0);
        assert_eq!(atoi(b"-5"), -5);
    }

    #[tokio::test]
    async fn sends_select_and_restores_and_caches_the_connection() {
        let (port, task) =
            target("+OK\r\n+OK\r\n-BUSYKEY Target key name already exists.\r\n").await;
        let cache = SocketCache::default();
        let done = transfer(&cache, &request(port, &["a", "b"])).await;
        assert_eq!(done.acknowledged, vec![0]);
        assert_eq!(
            done.outcome,
            Err(Failure::Target(
                "BUSYKEY Target key name already exists.".into()
            ))
        );
        assert_eq!(
            cache.len(),
            1,
            "an error reply leaves the connection usable"
        );
        let sent = task.await.unwrap();
        let sent = String::from_utf8_lossy(&sent);
        assert!(sent.starts_with(
            "*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n*4\r\n$7\r\nRESTORE\r\n$1\r\na\r\n$1\r\n0\r\n"
        ));
    }

    #[tokio::test]
    async fn an_error_to_auth_acknowledges_no_key() {
        let (port, _task) = target("-WRONGPASS invalid\r\n+OK\r\n+OK\r\n").await;
        let mut req = request(port, &["a"]);
        req.credentials = Some(Credentials {
            username: None,
            password: Bytes::from_static(b"pw"),
        });
        let done = transfer(&SocketCache::default(), &req).await;
        assert!(done.acknowledged.is_empty());
        assert_eq!(
            done.outcome.unwrap_err().text(),
            "ERR Target instance replied with error: WRONGPASS invalid"
        );
    }

    /// As Redis 7.2 answers: a refused connection is found by the first write.
    #[tokio::test]
    async fn a_silent_target_times_out_and_connections_fail_as_in_redis() {
        let (port, _task) = target("").await;
        let done = transfer(&SocketCache::default(), &request(port, &["a"])).await;
        assert_eq!(done.outcome, Err(Failure::Read));
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let done = transfer(&SocketCache::default(), &request(closed, &["a"])).await;
        assert_eq!(done.outcome, Err(Failure::Write));
        let mut negative = request(closed, &["a"]);
        negative.port = Bytes::from_static(b"-1");
        let done = transfer(&SocketCache::default(), &negative).await;
        assert_eq!(done.outcome, Err(Failure::Connect));
        assert_eq!(
            Failure::Connect.text(),
            "IOERR error or timeout connecting to the client"
        );
    }
}
