//! The listener side: bind, accept, enforce maxclients, run active expiry, shut down gracefully.
//!
//! `run` owns the lifecycle: it binds every configured address, spawns one task per connection, a
//! timer task for active expiry, and waits for SIGINT/SIGTERM or SHUTDOWN; then it stops accepting,
//! tells connections to finish their current batch, and waits (bounded) for them to go.
//!
//! TLS ports (`tls-port`, `memcached-tls-port`) are accepted like the plain ones, then the TLS
//! handshake runs in the connection's own task ([`spawn_connection`]) before its loop starts.
//!
//! May import: `connection`, `memcache::listener`, `observe::http`, `persist` (recovery, layout,
//! snapshots), `state`, `config`, `tls`. Must not import command modules.

use crate::client::ClientState;
use crate::config::Config;
use crate::connection;
use crate::error::ServerError;
use crate::socket::Socket;
use crate::state::Shared;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Keys reclaimed per shard per active-expiry cycle; bounds the time a cycle holds a shard lock.
const SWEEP_BUDGET_PER_SHARD: usize = 200;
/// How long shutdown waits for connections to finish before exiting anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A bound server, ready to serve.
pub struct Server {
    shared: Arc<Shared>,
    /// RESP listeners, each with whether it is a TLS port.
    listeners: Vec<(TcpListener, bool)>,
    memcached_listeners: Vec<(TcpListener, bool)>,
    /// The metrics and status page listeners (None: `metrics-port` is 0).
    metrics_listeners: Option<Vec<TcpListener>>,
}

impl Server {
    /// Recover the data directory, then bind the configured addresses. With port 0 the OS picks
    /// one; `local_port` tells which. `repair` lets recovery drop a corrupt middle of the log
    /// (keeping the valid prefix) instead of refusing to start.
    pub async fn bind(
        config: Config,
        config_file: Option<std::path::PathBuf>,
        repair: bool,
    ) -> Result<Self, ServerError> {
        // A TLS port with a bad certificate or key refuses to start, saying which file and why.
        let tls = if config.tls_port != 0 || config.memcached_tls_port != 0 {
            let files = crate::tls::TlsFiles::of_config(&config);
            Some(crate::tls::build(&files).map_err(ServerError::Config)?)
        } else {
            None
        };
        // So does `tls-replication` with settings a replica's link could not use (as Redis).
        if config.tls_replication {
            crate::tls::build_client(&crate::tls::TlsFiles::of_config(&config))
                .map_err(ServerError::Config)?;
        }
        let mut listeners = Vec::new();
        let mut port = config.port;
        // `port 0` beside a `tls-port` is Redis' TLS-only setup: no plain RESP listener. Without
        // a TLS port, 0 asks the OS for a port (CONFIG GET port then shows it): only in-process
        // servers get here so, as the binary refuses that configuration (`Config::load`).
        let plain_binds: &[String] = if port == 0 && config.tls_port != 0 {
            &[]
        } else {
            &config.bind
        };
        for addr in plain_binds {
            let listener = bind_one(addr, port).await?;
            // With port 0, bind every further address on the port the first one got.
            port = listener.local_addr()?.port();
            listeners.push((listener, false));
        }
        for listener in bind_port(&config.bind, config.tls_port).await? {
            listeners.push((listener, true));
        }
        // Keyspace layout: which global index is which tenant's keyspace (see `tenancy`).
        let mut tenancy = crate::tenancy::Tenancy::build(&config, &[])?;
        let logged = tenancy.degrees().iter().any(|d| d.is_logged());
        let started = std::time::Instant::now();
        let mut layout_path = None;
        let mut log_setup = None;
        let dir_lock = if logged {
            let storage: Arc<dyn gradus_log::Storage> =
                Arc::new(gradus_log::OsStorage::new(config.durability.direct_io));
            let mut options = config.log_options();
            options.repair = repair;
            let lock = crate::persist::layout::lock_data_dir(&config.dir)?;
            let previous = crate::persist::layout::read(&config)?;
            tenancy = crate::tenancy::Tenancy::build(&config, &previous)?;
            layout_path = Some((crate::persist::layout::path(&config.dir), previous));
            log_setup = Some((options, storage));
            Some(lock)
        } else {
            None
        };
        // After the data-directory lock, so a second server on the same directory reports that.
        let memcached_listeners = crate::memcache::listener::bind(&config).await?;
        let metrics_listeners = crate::observe::http::bind(&config).await?;
        let dir = config.dir.clone();
        // With port 0, CONFIG GET port shows the port the OS picked.
        let config = Config { port, ..config };
        // The log is opened into the state: recovery replays each segment as it is read.
        let mut shared = Shared::new(config, config_file, tenancy);
        shared.tls = crate::tls::TlsState::new(tls);
        let shared = Arc::new(shared);
        // Before any listener runs: REPLICAOF starts the link task from it.
        let _ = shared.repl.shared.set(Arc::downgrade(&shared));
        if !shared.config.aclfile.is_empty() {
            let users = crate::command::acl::read_aclfile(&shared)
                .map_err(|e| ServerError::Config(format!("aclfile: {e}")))?;
            shared.acl.replace(users);
        }
        *shared.persist.dir_lock.lock() = dir_lock;
        shared.port.store(port as usize, Ordering::Relaxed);
        if let Some((options, storage)) = log_setup {
            let (log, recovered) =
                crate::persist::replay::recover(&shared, options, storage).map_err(|e| match e {
                    gradus_log::LogError::Apply(e) => {
                        ServerError::Config(format!("recovery failed: {e}"))
                    }
                    e => {
                        let hint = if matches!(e, gradus_log::LogError::Corrupt { .. }) {
                            " (start with --repair to keep the valid prefix of the log and drop the rest)"
                        } else {
                            ""
                        };
                        ServerError::Config(format!("cannot recover {}: {e}{hint}", dir.display()))
                    }
                })?;
            if let Some(what) = &recovered.repaired {
                tracing::warn!(repaired = %what, "--repair dropped part of the log");
            }
            let _ = shared.persist.log.set(log);
            let (items, records) = (
                recovered.snapshot_items_recovered,
                recovered.records_recovered,
            );
            let report = crate::persist::replay::RecoveryReport {
                millis: started.elapsed().as_millis() as u64,
                keys: crate::persist::replay::logged_keys(&shared.store, &shared.persist.degrees),
                snapshot_items: items,
                records_replayed: records,
                torn_tail_bytes: recovered.torn_tail_bytes,
                repaired: recovered.repaired.clone(),
            };
            if report.torn_tail_bytes > 0 {
                tracing::warn!(
                    bytes = report.torn_tail_bytes,
                    "truncated a torn tail at the end of the log"
                );
            }
            tracing::info!(
                millis = report.millis,
                keys = report.keys,
                snapshot_items = items,
                records_replayed = records,
                "recovered"
            );
            *shared.persist.recovery.lock() = report;
        }
        if let Some((path, previous)) = layout_path {
            crate::persist::layout::write(&path, &previous, &shared.tenancy)?;
        }
        Ok(Self {
            shared,
            listeners,
            memcached_listeners,
            metrics_listeners,
        })
    }

    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    pub fn local_port(&self) -> u16 {
        self.shared.port.load(Ordering::Relaxed) as u16
    }

    /// Serve until shutdown is requested (SHUTDOWN, or a signal forwarded by [`Signals`]).
    pub async fn run(self) -> Result<(), ServerError> {
        let shared = self.shared;
        let mut tasks = JoinSet::new();
        // The per-command timer's clock calibrates itself against the OS clock on first use
        // (0.6 ms here, at most 200 ms): done now, not in the first command a client sends.
        let _ = quanta::Instant::now();
        for (listener, tls) in self.listeners {
            let what = if tls {
                "listening (RESP over TLS)"
            } else {
                "listening (RESP)"
            };
            tracing::info!(addr = %listener.local_addr()?, "{what}");
            tasks.spawn(accept_loop(shared.clone(), listener, tls));
        }
        for (listener, tls) in self.memcached_listeners {
            let what = if tls {
                "listening (memcached over TLS)"
            } else {
                "listening (memcached)"
            };
            tracing::info!(addr = %listener.local_addr()?, "{what}");
            tasks.spawn(crate::memcache::listener::accept_loop(
                shared.clone(),
                listener,
                tls,
            ));
        }
        tasks.spawn(crate::memcache::listener::delayed_flush_loop(
            shared.clone(),
        ));
        tasks.spawn(expiry_loop(shared.clone()));
        tasks.spawn(purge_loop());
        tasks.spawn(crate::repl::primary::ping_task(shared.clone()));
        crate::repl::stream_locks(&shared);
        if let Some((host, port)) = crate::repl::parse_replicaof(&shared.config.replicaof) {
            crate::repl::replica::follow(&shared, host, port);
        }
        tasks.spawn(snapshot_loop(shared.clone()));
        tasks.spawn(lock_lease_loop(shared.clone()));
        tasks.spawn(fsync_latency_loop(shared.clone()));
        tasks.spawn(idle_client_loop(shared.clone()));
        tasks.spawn(client_eviction_loop(shared.clone()));
        if let Some(listeners) = self.metrics_listeners {
            for listener in listeners {
                tracing::info!(addr = %listener.local_addr()?, "listening (metrics, status page)");
                tasks.spawn(crate::observe::http::accept_loop(shared.clone(), listener));
            }
        }
        let mut shutdown = shared.shutdown.subscribe();
        while !*shutdown.borrow() {
            if shutdown.changed().await.is_err() {
                break;
            }
        }
        tracing::info!("shutting down");
        tasks.abort_all();
        let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
        // A script past busy-reply-threshold keeps its connection for as long as it runs, and
        // every other one can only be answered BUSY: SHUTDOWN NOSAVE then exits at once, as
        // Redis' (the script's writes are not in the log; see `command::scripting`).
        while !shared.clients.is_empty()
            && tokio::time::Instant::now() < deadline
            && crate::command::scripting::busy_error().is_none()
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Everything acknowledged at any logged degree is on disk before we exit.
        if let Some(log) = shared.persist.log.get().cloned() {
            let syncing = log.clone();
            match tokio::task::spawn_blocking(move || syncing.sync_now()).await {
                Ok(Ok(lsn)) => tracing::info!(durable_lsn = lsn, "log synced"),
                Ok(Err(e @ gradus_log::LogError::Stalled(_))) => tracing::error!(
                    error = %e,
                    durable_lsn = log.durable_lsn(),
                    "final log sync failed: the disk is full; writes logged after durable_lsn were never written"
                ),
                Ok(Err(e)) => tracing::error!(error = %e, "final log sync failed"),
                Err(e) => tracing::error!(error = %e, "final log sync panicked"),
            }
        }
        tracing::info!("bye");
        Ok(())
    }
}

/// Bind `port` on every address of `bind`; none when the port is 0 (the TLS and memcached ports,
/// for which 0 means off).
pub(crate) async fn bind_port(bind: &[String], port: u16) -> Result<Vec<TcpListener>, ServerError> {
    let mut listeners = Vec::new();
    if port == 0 {
        return Ok(listeners);
    }
    for addr in bind {
        listeners.push(bind_one(addr, port).await?);
    }
    Ok(listeners)
}

/// Bind one address of a `bind` list on `port`.
async fn bind_one(addr: &str, port: u16) -> Result<TcpListener, ServerError> {
    let ip: std::net::IpAddr = addr
        .parse()
        .map_err(|_| ServerError::Config(format!("bad bind address {addr}")))?;
    let sa = SocketAddr::new(ip, port);
    TcpListener::bind(sa)
        .await
        .map_err(|source| ServerError::Bind {
            addr: sa.to_string(),
            source,
        })
}

/// Run a registered client's connection: at once on a plain port; after the TLS handshake on a
/// TLS port (a failed or slow handshake ends it, unregistered, with the reason logged). The same
/// for both front ends: `serve` is the front end's connection loop.
pub(crate) fn spawn_connection<P, T>(
    shared: Arc<Shared>,
    stream: TcpStream,
    client: ClientState,
    tls: bool,
    plain: impl FnOnce(Arc<Shared>, Socket, ClientState) -> P,
    secure: impl FnOnce(Arc<Shared>, crate::tls::TlsStream, ClientState) -> T + Send + 'static,
) where
    P: std::future::Future<Output = ()> + Send + 'static,
    T: std::future::Future<Output = ()> + Send + 'static,
{
    let stream = match Socket::new(stream) {
        Ok(stream) => stream,
        Err(e) => {
            tracing::warn!(client = %client.handle.addr, error = %e, "cannot register the connection");
            connection::close(&shared, &client);
            return;
        }
    };
    if !tls {
        tokio::spawn(plain(shared, stream, client));
        return;
    }
    let Some(acceptor) = shared.tls.acceptor() else {
        connection::close(&shared, &client);
        return;
    };
    tokio::spawn(async move {
        let addr = client.handle.addr;
        let socket = tokio::io::BufReader::with_capacity(crate::tls::TLS_READ_BUFFER, stream);
        match tokio::time::timeout(crate::tls::HANDSHAKE_TIMEOUT, acceptor.accept(socket)).await {
            Ok(Ok(stream)) => secure(shared, stream, client).await,
            Ok(Err(e)) => {
                tracing::info!(client = %addr, error = %e, "TLS handshake failed");
                connection::close(&shared, &client);
            }
            Err(_) => {
                tracing::info!(client = %addr, "TLS handshake timed out");
                connection::close(&shared, &client);
            }
        }
    });
}

async fn accept_loop(shared: Arc<Shared>, listener: TcpListener, tls: bool) {
    loop {
        let (stream, addr) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
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
            if tls {
                // No TLS session yet to say why: just close.
                drop(stream);
            } else {
                tokio::spawn(refuse(stream));
            }
            continue;
        }
        let laddr = stream.local_addr().unwrap_or(addr);
        let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
        let handle = shared.clients.register(addr, laddr, fd);
        let mut client = ClientState::new(handle, !shared.auth_required());
        if shared.tenancy.multi_tenant {
            // Nobody's until AUTH: no rights, and invisible to every tenant's CLIENT LIST.
            client.perms = crate::tenancy::Perms::NONE;
            client.user = Arc::from("");
            *client.handle.user.lock() = client.user.clone();
            client.handle.tenant.store(usize::MAX, Ordering::Relaxed);
        }
        spawn_connection(
            shared.clone(),
            stream,
            client,
            tls,
            connection::serve,
            connection::serve,
        );
    }
}

async fn refuse(mut stream: TcpStream) {
    let _ = stream
        .write_all(b"-ERR max number of clients reached\r\n")
        .await;
    let _ = stream.shutdown().await;
}

/// How long after a key's expiry a replica reclaims it by itself when no DEL came from its
/// primary (see `expiry_loop`).
const REPLICA_EXPIRY_MARGIN_MS: u64 = 60_000;

/// The expiry timer's period at `hz` cycles per second.
fn expiry_period(hz: u64) -> Duration {
    Duration::from_millis(1000 / hz.clamp(1, 1000))
}

/// Gives memory back to the system after big buffers were freed (see `alloc::purge_if_asked`).
/// Runs on the runtime, so on the worker thread that freed them (mimalloc collects the calling
/// thread's pages).
async fn purge_loop() {
    let mut tick = tokio::time::interval(crate::alloc::PURGE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        crate::alloc::purge_if_asked();
    }
}

async fn expiry_loop(shared: Arc<Shared>) {
    let mut hz = shared.live.hz.load(Ordering::Relaxed);
    let mut tick = tokio::time::interval(expiry_period(hz));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut logging_expired = false;
    let mut evictor = crate::client::ClientState::internal();
    loop {
        tick.tick().await;
        // `hz` is live (CONFIG SET hz): a new value takes effect from this cycle.
        let now_hz = shared.live.hz.load(Ordering::Relaxed);
        if now_hz != hz {
            hz = now_hz;
            tick = tokio::time::interval_at(
                tokio::time::Instant::now() + expiry_period(hz),
                expiry_period(hz),
            );
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        }
        // Expired keys are kept for `expired` notifications and invalidations only while wanted.
        let wanted = crate::notify::keeps_expired(&shared);
        if wanted != logging_expired {
            shared.store.set_expired_log(wanted);
            logging_expired = wanted;
        }
        // While writes are paused (CLIENT PAUSE WRITE, FAILOVER), no key expires actively: no
        // DEL may reach the stream (reads already see expired keys as missing), as in Redis.
        if shared.pauses.writes_paused(gradus_store::now_ms()) {
            continue;
        }
        // Without a key that has a TTL there is nothing to sweep: no shard lock, no hop to a
        // blocking thread (an idle server used to lock every shard of every keyspace ten times
        // a second).
        // `DEBUG SET-ACTIVE-EXPIRE 0` stops the sweep (reads still expire what they find).
        let active = shared.live.active_expire.load(Ordering::Relaxed);
        let removed = if active && shared.store.has_volatile_keys() {
            sweep(&shared).await
        } else {
            0
        };
        if removed > 0 {
            tracing::trace!(removed, "active expiry");
        }
        // After CONFIG SET maxmemory below what is used, keys are evicted here without
        // waiting for a command, as Redis' eviction timer does after `updateMaxmemory`, until
        // the server is under the limit or nothing can be evicted. (Otherwise, as in Redis, a
        // server that a write took over the limit evicts before its next command: evicting
        // here then would send an evicted key's invalidation before that command's turn.)
        if shared.live.evict_pending.load(Ordering::Relaxed) {
            let done = !crate::quota::over_maxmemory(&shared)
                || match crate::command::scripting::admit() {
                    Ok(_admitted) => crate::quota::make_room_in_server(
                        &shared,
                        &mut evictor,
                        gradus_store::now_ms(),
                    )
                    .is_err(),
                    Err(_) => false,
                };
            if done {
                shared.live.evict_pending.store(false, Ordering::Relaxed);
            }
        }
        if logging_expired {
            crate::notify::publish_expired(&shared);
        }
        let max_keys = shared.live.tracking_table_max_keys.load(Ordering::Relaxed);
        shared.tracking.limit(max_keys as usize);
    }
}

/// One active-expiry cycle: reclaim expired keys in every keyspace; returns how many. A cycle
/// that takes `latency-monitor-threshold` or longer is the latency event `expire-cycle`, as in
/// Redis.
async fn sweep(shared: &Arc<Shared>) -> usize {
    let sweeper = shared.clone();
    // The sweep takes shard locks; keep it off the async workers' fast path.
    tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        let reclaimed = sweep_now(&sweeper);
        let observer = &sweeper.observer;
        observer.latency_event(&sweeper.live, "expire-cycle", started.elapsed());
        reclaimed
    })
    .await
    .unwrap_or(0)
}

/// [`sweep`]'s work, on the calling thread.
fn sweep_now(sweeper: &Arc<Shared>) -> usize {
    let now = gradus_store::now_ms();
    let repl = &sweeper.repl;
    if repl.is_active() && repl.is_replica() {
        // A replica deletes what its primary's stream deletes; it reclaims on its own only
        // keys its primary let expire without a DEL (reclaimed there by a read) long ago.
        // Reads here already see them as missing.
        sweeper.store.sweep_expired(
            now.saturating_sub(REPLICA_EXPIRY_MARGIN_MS),
            SWEEP_BUDGET_PER_SHARD,
        )
    } else if repl.is_active() {
        crate::repl::primary::sweep_and_stream(sweeper, now, SWEEP_BUDGET_PER_SHARD)
    } else {
        sweeper.store.sweep_expired(now, SWEEP_BUDGET_PER_SHARD)
    }
}

/// Hand on locks whose lease ran out (every 10 ms: the lease is a safety net for a hung holder,
/// not a precision timer). While no holder has a lease it sleeps until one is given one, so an
/// idle server is not woken 100 times a second for nothing.
async fn lock_lease_loop(shared: Arc<Shared>) {
    loop {
        if shared
            .locks
            .expire_leases(std::time::Instant::now())
            .leased_left
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        } else {
            shared.locks.lease_granted().await;
        }
    }
}

/// Once a second, close the clients idle for longer than `timeout` seconds (when set), as
/// Redis' `clientsCronHandleTimeout`: not replicas' or a primary's links, subscribers,
/// monitors, clients waiting in a blocking command, nor memcached connections. Idle counts from
/// the client's last command (or the reply that ended its wait).
async fn idle_client_loop(shared: Arc<Shared>) {
    use std::sync::atomic::Ordering::Relaxed;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let timeout_s = shared.live.timeout.load(Relaxed);
        if timeout_s == 0 {
            continue;
        }
        let now = gradus_store::now_ms();
        for client in shared.clients.all() {
            // Whether it waits first, then its clock: a wait that has just ended set the
            // clock before it ended (see `connection::serve`).
            let exempt = client.role() != crate::client::ClientRole::Normal
                || client.is_pubsub()
                || client.blocked.load(std::sync::atomic::Ordering::Acquire)
                || client.monitoring.load(Relaxed)
                || client.memcached.load(Relaxed);
            let idle_ms = now.saturating_sub(client.last_active_ms.load(Relaxed));
            if !exempt && idle_ms / 1000 > timeout_s {
                tracing::debug!(id = client.id, addr = %client.addr, "Closing idle client");
                client.kill();
            }
        }
    }
}

/// Ten times a second, while `maxmemory-clients` is set, close the largest connections if
/// theirs add up past it (`crate::quota::evict_clients`).
async fn client_eviction_loop(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        crate::quota::evict_clients(&shared);
    }
}

/// Once a second, the longest log fsync of that second goes to the latency monitor (its
/// `fsync` event) when it passes `latency-monitor-threshold`.
async fn fsync_latency_loop(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Some(log) = shared.persist.log.get() {
            let peak = Duration::from_micros(log.take_fsync_peak());
            shared.observer.latency_event(&shared.live, "fsync", peak);
        }
    }
}

/// After an automatic snapshot fails, the next automatic one waits this long, doubled after
/// each further failure up to [`SNAPSHOT_RETRY_MAX`] (Redis waits 5 s after a failed BGSAVE).
/// Without it a snapshot that keeps failing (a full disk) would be tried again every half
/// second while the log stays over `snapshot-log-bytes`, copying and writing the whole dataset
/// each time. `SAVE` and `BGSAVE` are never held back.
const SNAPSHOT_RETRY_FIRST: Duration = Duration::from_secs(5);
const SNAPSHOT_RETRY_MAX: Duration = Duration::from_secs(300);

/// Take a snapshot when the log has grown by `snapshot-log-bytes` since the last one and by
/// `snapshot-log-percentage` of that snapshot's size (see [`size_due`]), or
/// `snapshot-interval-s` has passed with writes in between (see [`SNAPSHOT_RETRY_FIRST`] for
/// what follows a failure).
async fn snapshot_loop(shared: Arc<Shared>) {
    let Some(log) = shared.persist.log.get().cloned() else {
        return;
    };
    let by_size = shared.config.durability.snapshot_log_bytes;
    let by_time = Duration::from_secs(shared.config.durability.snapshot_interval_s);
    let mut last = tokio::time::Instant::now();
    let mut lsn_at_last = log.last_lsn();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    // (not before, current delay) after a failed snapshot.
    let mut backoff: Option<(tokio::time::Instant, Duration)> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shared.snapshot_request.notified() => {}
        }
        // Kept until a snapshot starts: one asked for while another runs follows it.
        let requested = shared.persist.snapshot_requested.load(Ordering::Acquire);
        let grown = log.stats().bytes_written.saturating_sub(
            shared
                .persist
                .bytes_at_last_snapshot
                .load(Ordering::Relaxed),
        );
        let size_due = size_due(
            grown,
            by_size,
            shared.config.durability.snapshot_log_percentage,
            shared.persist.last_snapshot_bytes.load(Ordering::Relaxed),
        );
        let time_due =
            !by_time.is_zero() && last.elapsed() >= by_time && log.last_lsn() > lsn_at_last;
        if !(requested || size_due || time_due)
            || shared.persist.snapshot_in_progress.load(Ordering::Acquire)
        {
            continue;
        }
        if !requested
            && backoff.is_some_and(|(not_before, _)| tokio::time::Instant::now() < not_before)
        {
            continue;
        }
        last = tokio::time::Instant::now();
        lsn_at_last = log.last_lsn();
        let failures = || shared.persist.snapshot_failures.load(Ordering::Relaxed);
        let failures_before = failures();
        let s = shared.clone();
        let _ =
            tokio::task::spawn_blocking(move || crate::persist::snapshot::take_snapshot(&s)).await;
        if failures() > failures_before {
            let delay = backoff.map_or(SNAPSHOT_RETRY_FIRST, |(_, d)| {
                (d * 2).min(SNAPSHOT_RETRY_MAX)
            });
            backoff = Some((tokio::time::Instant::now() + delay, delay));
            tracing::warn!(
                retry_in_s = delay.as_secs(),
                "the next automatic snapshot waits"
            );
        } else {
            backoff = None;
        }
    }
}

/// Whether `grown` bytes of log since the last snapshot call for the next one: at least
/// `by_size` (0: never by size), and at least `percentage` % of the last snapshot's size, as
/// Redis rewrites its AOF only past `auto-aof-rewrite-min-size` and
/// `auto-aof-rewrite-percentage` of its size after the last rewrite. Without the second
/// condition a dataset several times `by_size` would be written out whole for every `by_size`
/// of writes (a 400 MB dataset under 4 KiB SETs: a snapshot every ~1.3 s at 200 MB/s of log);
/// with it, snapshots write at most `100 / percentage` bytes per byte of log.
fn size_due(grown: u64, by_size: u64, percentage: u64, last_snapshot_bytes: u64) -> bool {
    by_size > 0
        && grown >= by_size
        && u128::from(grown) * 100 >= u128::from(last_snapshot_bytes) * u128::from(percentage)
}

/// SIGINT/SIGTERM handlers. Install them before `Server::bind`: once a listener exists a client
/// can connect, and a signal that arrived before the handlers would take the default action
/// (exit at once, skipping the final log sync).
pub struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    /// Register the handlers (must run inside the tokio runtime).
    pub fn install() -> std::io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Signals {
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Signals {})
        }
    }

    /// Turn the first SIGINT/SIGTERM into a graceful shutdown of `shared`'s server.
    pub fn forward_to(self, shared: Arc<Shared>) {
        #[allow(unused_mut)]
        let mut signals = self;
        tokio::spawn(async move {
            #[cfg(unix)]
            tokio::select! {
                _ = signals.term.recv() => tracing::info!("SIGTERM received"),
                _ = signals.int.recv() => tracing::info!("SIGINT received"),
            }
            #[cfg(not(unix))]
            {
                let _ = tokio::signal::ctrl_c().await;
            }
            shared.request_shutdown();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::size_due;

    /// The size trigger needs both the bytes and the percentage of the last snapshot; either
    /// set to 0 behaves as documented.
    #[test]
    fn a_snapshot_is_due_past_both_the_bytes_and_the_percentage_of_the_last_one() {
        const MIB: u64 = 1 << 20;
        // A small dataset: the bytes decide.
        assert!(!size_due(255 * MIB, 256 * MIB, 100, 10 * MIB));
        assert!(size_due(256 * MIB, 256 * MIB, 100, 10 * MIB));
        // A 400 MiB dataset: not before the log has grown by as much again.
        assert!(!size_due(300 * MIB, 256 * MIB, 100, 400 * MIB));
        assert!(size_due(400 * MIB, 256 * MIB, 100, 400 * MIB));
        assert!(size_due(200 * MIB, 64 * MIB, 50, 400 * MIB));
        // 0 %: the bytes alone; 0 bytes: never by size.
        assert!(size_due(256 * MIB, 256 * MIB, 0, 400 * MIB));
        assert!(!size_due(u64::MAX, 0, 100, 0));
        // No overflow at the extremes.
        assert!(size_due(u64::MAX, 1, 200, u64::MAX / 2));
        assert!(!size_due(u64::MAX / 2, 1, 300, u64::MAX));
    }
}
