//! One memcached connection: bytes in → `gradus_memcache::Decoder` → [`super::session`] → replies
//! out, with the same batching as the RESP connection: every complete request in the read buffer
//! runs (one clock reading per batch), then the replies go out in one write.
//!
//! Durability: before replies are written, the connection waits until the log is durable up to
//! the highest `strict` write among them; if that fails the connection closes without sending
//! them. Limits are the decoder's (2048-byte lines, `memcached-item-size-max` values); a decoder
//! error (overlong line: silent close, as memcached; binary-protocol bytes: one error line, then
//! close) ends the connection.
//!
//! Authentication: when `requirepass` is set, the port requires memcached's `-Y` text-protocol
//! login before anything else — a `set` of any key whose data is `default <password>` (answered
//! `STORED`, or `CLIENT_ERROR authentication failure`); every other command gets
//! `CLIENT_ERROR unauthenticated`. Until then values are capped at `MAX_AUTH_REQ_LEN` bytes.
//! The login binds the connection to its user's tenant and that tenant's memcached keyspace, so
//! one port serves many tenants, each seeing (and `flush_all`ing) only its own items.
//!
//! Plain and TLS connections (`memcached-port`, `memcached-tls-port`) run the same loop, generic
//! over [`ClientStream`].
//!
//! May import: `memcache::session`, `memcache::stats`, `connection::flush` (the strict wait before
//! replies), `client`, `state`, `tenancy`, `pause` (waiting out a client pause), `tls` (the stream type). Must not import RESP command modules.

use super::session::{Flow, Session};
use super::stats::LocalCounters;
use crate::client::ClientState;
use crate::connection::{between_batches, close, flush, MAX_PENDING_OUTPUT, READ_BUFFER};
use crate::state::Shared;
use crate::tenancy::Perms;
use crate::tls::ClientStream;
use bytes::BytesMut;
use gradus_memcache::{Decoded, Decoder, Limits, McError};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

/// Longest login payload accepted before authentication (memcached's limit).
const MAX_AUTH_REQ_LEN: usize = 8192;

/// The decoder limits for this server.
pub fn limits(shared: &Shared) -> Limits {
    Limits {
        max_value: shared.config.memcached_item_size_max,
        ..Limits::default()
    }
}

/// Serve one accepted memcached connection until the client leaves or the server shuts down.
pub async fn serve<S: ClientStream>(shared: Arc<Shared>, mut stream: S, mut client: ClientState) {
    let _ = stream.tcp().set_nodelay(true);
    let handle = client.handle.clone();
    let (tenant, mut db) = shared.tenancy.memcached;
    bind_keyspace(&shared, &mut client, tenant, db);
    let mut shutdown = shared.shutdown.subscribe();
    let mut authenticated = !shared.auth_required();
    let mut decoder = Decoder::new(limits(&shared));
    let max_value = decoder.limits().max_value;
    if !authenticated {
        decoder.set_limits(Limits {
            max_value: MAX_AUTH_REQ_LEN,
            ..decoder.limits()
        });
    }
    let mut counters = LocalCounters::default();
    let mut rbuf = BytesMut::with_capacity(READ_BUFFER);
    let mut wbuf = BytesMut::with_capacity(READ_BUFFER);
    shared
        .memcache
        .curr_connections
        .fetch_add(1, Ordering::Relaxed);
    shared
        .memcache
        .total_connections
        .fetch_add(1, Ordering::Relaxed);

    'conn: loop {
        let mut now_ms = gradus_store::now_ms();
        let mut touched = false;
        loop {
            let decoded = match decoder.decode(&mut rbuf) {
                Ok(Some(d)) => d,
                Ok(None) => break,
                Err(e) => {
                    flush(&shared, &mut stream, &mut wbuf, &mut client).await;
                    if e == McError::HttpRequest {
                        crate::connection::http_request_refused(&shared, &client, "memcached");
                    }
                    if e == McError::BinaryProtocol {
                        let _ = stream
                            .write_all(b"CLIENT_ERROR binary protocol is not supported\r\n")
                            .await;
                        let _ = stream.flush().await;
                    }
                    tracing::debug!(client = client.id, error = %e, "memcached protocol error, closing");
                    break 'conn;
                }
            };
            match decoded {
                Decoded::Reply { line, noreply } => {
                    if line.starts_with("SERVER_ERROR object too large") {
                        counters.bump(super::stats::Counter::StoreTooLarge);
                    }
                    if !noreply {
                        gradus_memcache::reply::line(&mut wbuf, line.as_bytes());
                    }
                }
                Decoded::TooLarge {
                    key,
                    unlink,
                    noreply,
                } => {
                    counters.bump(super::stats::Counter::StoreTooLarge);
                    let mut line = "SERVER_ERROR object too large for cache".to_string();
                    if unlink && authenticated {
                        // As memcached: a failed update leaves no stale item behind.
                        let mut session = Session {
                            shared: &shared,
                            client: &mut client,
                            db,
                            now_ms,
                            counters: &mut counters,
                            max_value,
                        };
                        if let Err(e) = session.remove(&key) {
                            line = e.memcached_line();
                        }
                    }
                    if !noreply {
                        gradus_memcache::reply::line(&mut wbuf, line.as_bytes());
                    }
                }
                Decoded::Command(command) if !authenticated => {
                    let delay = shared.auth_throttle.delay(handle.addr.ip());
                    if !delay.is_zero() {
                        // Guessing from one address stays slow, as for AUTH on the RESP port.
                        if !flush(&shared, &mut stream, &mut wbuf, &mut client).await {
                            break 'conn;
                        }
                        tokio::time::sleep(delay).await;
                    }
                    if let Some((tenant, keyspace)) =
                        login(&shared, &mut client, command, &mut wbuf)
                    {
                        // From now on the user's tenant's memcached keyspace.
                        db = keyspace;
                        bind_keyspace(&shared, &mut client, tenant, db);
                        authenticated = true;
                        decoder.set_limits(limits(&shared));
                    }
                }
                Decoded::Command(command) => {
                    // CLIENT PAUSE / FAILOVER: a memcached command waits out any pause, reads
                    // too (a get may touch or lease), so no write reaches the stream meanwhile.
                    if shared.pauses.current(now_ms).0 != crate::pause::PauseMode::Off {
                        if !flush(&shared, &mut stream, &mut wbuf, &mut client).await {
                            break 'conn;
                        }
                        while shared.pauses.current(gradus_store::now_ms()).0
                            != crate::pause::PauseMode::Off
                        {
                            tokio::select! {
                                _ = shared.pauses.changed() => {}
                                _ = client.handle.killed() => break 'conn,
                            }
                        }
                        now_ms = gradus_store::now_ms();
                    }
                    if !touched {
                        // Once per batch: CLIENT LIST's idle time and last command.
                        client.handle.touch("memcached", now_ms);
                        touched = true;
                    }
                    let mut session = Session {
                        shared: &shared,
                        client: &mut client,
                        db,
                        now_ms,
                        counters: &mut counters,
                        max_value,
                    };
                    if session.execute(command, &mut wbuf) == Flow::Close {
                        flush(&shared, &mut stream, &mut wbuf, &mut client).await;
                        break 'conn;
                    }
                }
            }
            if handle.is_killed() {
                break 'conn;
            }
            if wbuf.len() >= MAX_PENDING_OUTPUT
                && !flush(&shared, &mut stream, &mut wbuf, &mut client).await
            {
                break 'conn;
            }
        }
        shared.memcache.absorb(&mut counters);
        if !between_batches(
            &shared,
            &mut stream,
            &mut rbuf,
            &mut wbuf,
            &mut client,
            &mut shutdown,
        )
        .await
        {
            break;
        }
    }
    shared.memcache.absorb(&mut counters);
    shared
        .memcache
        .curr_connections
        .fetch_sub(1, Ordering::Relaxed);
    let _ = stream.shutdown().await;
    close(&shared, &client);
}

/// Bind the connection to `tenant` and its keyspace `db` (CLIENT LIST shows both).
fn bind_keyspace(shared: &Shared, client: &mut ClientState, tenant: usize, db: usize) {
    client.db = db;
    client.tenant = tenant;
    client
        .handle
        .db
        .store(shared.tenancy.select_of(db), Ordering::Relaxed);
    client.handle.tenant.store(tenant, Ordering::Relaxed);
}

/// memcached's `-Y` login: a `set` whose data is `user password` — `default` and `requirepass`, or
/// a user with the `read` and `write` rights whose tenant has a memcached keyspace (its
/// `memcached-keyspace`, or the port's `memcached-db` for `memcached-tenant`; an `admin` of a
/// tenant with none gets the port's). Writes the reply; on success the connection has the user's
/// rights and the result is the (tenant, keyspace) it now works in.
fn login(
    shared: &Shared,
    client: &mut ClientState,
    command: gradus_memcache::Command,
    out: &mut BytesMut,
) -> Option<(usize, usize)> {
    use gradus_memcache::{Command, StoreMode};
    let reply = |out: &mut BytesMut, text: &[u8]| gradus_memcache::reply::line(out, text);
    let Command::Store {
        mode: StoreMode::Set,
        data,
        ..
    } = command
    else {
        reply(out, b"CLIENT_ERROR unauthenticated");
        return None;
    };
    let Some(space) = data.iter().position(|&c| c == b' ') else {
        reply(out, b"CLIENT_ERROR bad authentication token format");
        return None;
    };
    let (user, password) = (&data[..space], &data[space + 1..]);
    let requirepass = shared.live.requirepass.lock().clone();
    let ip = client.handle.addr.ip();
    let tenancy = &shared.tenancy;
    let found = tenancy.user(user).and_then(|u| {
        let keyspace = match tenancy.memcached_of(u.tenant) {
            Some(g) => (u.tenant, g),
            None if u.perms.contains(Perms::ADMIN) => tenancy.memcached,
            None => return None,
        };
        (u.perms.contains(Perms::READ.union(Perms::WRITE)) && u.verify(password, &requirepass))
            .then_some((u, keyspace))
    });
    match found {
        Some((u, keyspace)) => {
            shared.auth_throttle.succeeded(ip);
            client.perms = u.perms;
            client.user = Arc::from(u.name.as_str());
            *client.handle.user.lock() = client.user.clone();
            reply(out, b"STORED");
            Some(keyspace)
        }
        None => {
            shared.auth_throttle.failed(ip);
            reply(out, b"CLIENT_ERROR authentication failure");
            None
        }
    }
}
