//! The memcached listener: bind `memcached-port` (and `memcached-tls-port`) on every `bind` address, accept connections
//! (counted against the same `maxclients` as RESP, and listed by CLIENT LIST), and run delayed
//! `flush_all`s when they fall due.
//!
//! May import: `memcache::connection`, `memcache::session` (delayed flush_all), `client`, `state`,
//! `server` (binding a port, starting a plain or TLS connection).

use crate::client::ClientState;
use crate::error::ServerError;
use crate::state::Shared;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// Bind the memcached port and the memcached TLS port on every configured address (none for a
/// port that is 0, i.e. disabled); each listener with whether it is the TLS one.
pub async fn bind(config: &crate::config::Config) -> Result<Vec<(TcpListener, bool)>, ServerError> {
    let mut listeners = Vec::new();
    for (port, tls) in [
        (config.memcached_port, false),
        (config.memcached_tls_port, true),
    ] {
        for listener in crate::server::bind_port(&config.bind, port).await? {
            listeners.push((listener, tls));
        }
    }
    Ok(listeners)
}

/// Accept memcached connections (over TLS on `memcached-tls-port`) until the task is aborted at
/// shutdown.
pub async fn accept_loop(shared: Arc<Shared>, listener: TcpListener, tls: bool) {
    loop {
        let (mut stream, addr) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(error = %e, "memcached accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        shared
            .stats
            .connections_received
            .fetch_add(1, Ordering::Relaxed);
        if shared.clients.len() >= shared.live.maxclients.load(Ordering::Relaxed) {
            shared
                .stats
                .rejected_connections
                .fetch_add(1, Ordering::Relaxed);
            if !tls {
                tokio::spawn(async move {
                    let _ = stream
                        .write_all(b"SERVER_ERROR Too many open connections\r\n")
                        .await;
                    let _ = stream.shutdown().await;
                });
            }
            continue;
        }
        let laddr = stream.local_addr().unwrap_or(addr);
        let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
        let handle = shared.clients.register(addr, laddr, fd);
        handle
            .memcached
            .store(true, std::sync::atomic::Ordering::Relaxed);
        // The connection does its own (memcached -Y style) login when requirepass is set; this
        // flag is the RESP dispatcher's, which memcached connections never go through.
        let client = ClientState::new(handle, true);
        crate::server::spawn_connection(
            shared.clone(),
            stream,
            client,
            tls,
            super::connection::serve,
            super::connection::serve,
        );
    }
}

/// Run each keyspace's delayed `flush_all` once its time comes (checked every 100 ms).
pub async fn delayed_flush_loop(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = gradus_store::now_ms();
        let due: Vec<usize> = {
            let mut pending = shared.memcache.flush_due_ms.lock();
            let due = pending
                .iter()
                .filter(|(_, at)| **at <= now)
                .map(|(db, _)| *db)
                .collect::<Vec<_>>();
            for db in &due {
                pending.remove(db);
            }
            due
        };
        for db in due {
            let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
            let handle = Arc::new(crate::client::ClientHandle::new(
                0,
                unspecified,
                unspecified,
            ));
            let mut client = ClientState::new(handle, true);
            client.db = db;
            client.tenant = shared.tenancy.tenant_of(db).unwrap_or(0);
            if let Err(e) = super::session::flush_db(&shared, &mut client, db, now) {
                tracing::error!(error = %e, "delayed flush_all failed");
            }
        }
    }
}
