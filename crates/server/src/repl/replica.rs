//! The replica's side: a task that follows a primary (REPLICAOF host port, or the `replicaof`
//! setting) until REPLICAOF NO ONE or another REPLICAOF.
//!
//! One session: connect; `AUTH` (masteruser/masterauth) when set; `REPLCONF listening-port`
//! (and `ip-address` when `replica-announce-ip` is set); `REPLCONF capa eof capa psync2`;
//! `REPLCONF gradus-layout <fingerprint>` (a primary whose tenants, keyspaces or users differ
//! refuses it, and so does a primary that is not Gradus: the replica then does not sync and says
//! why in its log and INFO `master_sync_last_error`); `PSYNC <replid> <offset + 1>`. A full
//! resync clears every keyspace, loads the snapshot items the way recovery loads a snapshot
//! (every keyspace, `none` ones too), then takes a snapshot of its own log when it has one, so
//! its logged keyspaces are durable at its own degrees and its `none` keyspaces never reach its
//! log. Then each streamed record is applied as commands by a replication client through this
//! server's write path (so it logs at its own degrees), and the frame is fed as it came into this
//! server's backlog (so its offsets are the primary's, for its own replicas and after a
//! promotion). It acknowledges (`REPLCONF ACK <offset>`) once a second and as soon as its log has
//! made the applied records durable (the log's durable LSN), never before: the `replicated`
//! degree and WAIT count on it. A dropped link is retried every second with a partial resync.
//!
//! With `tls-replication` the connection is a TLS client connection (see
//! [`crate::tls::build_client`], built anew for each attempt from the settings in force), and
//! the listening port it announces is this server's `tls-port` when it has one (as Redis); the
//! session above runs unchanged over either stream. A failed handshake is a failed attempt like
//! any other: logged, shown in `master_sync_last_error`, retried a second later.
//!
//! May import: `repl`, `state`, `client`, `dispatch` (the write path for commands), `command`
//! (the table), `persist` (records, loading items, snapshots), `tls` (the client side),
//! `gradus-store`, `gradus-log`.

use super::stream::{self, Frame, PsyncReply};
use super::Role;
use crate::client::ClientState;
use crate::state::Shared;
use crate::tls::ClientStream;
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long a replica waits before it tries its primary again.
const RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Become a replica of `host:port` (REPLICAOF, the `replicaof` setting): the previous link, if
/// any, is stopped, and a task follows the new primary.
pub fn follow(shared: &Arc<Shared>, host: String, port: u16) {
    let repl = &shared.repl;
    repl.set_role(Role::Replica {
        host: host.clone(),
        port,
    });
    *repl.settings.replicaof.lock() = format!("{host} {port}");
    repl.activate();
    let epoch = repl.link_epoch.fetch_add(1, Ordering::AcqRel) + 1;
    *repl.link.lock() = super::MasterLink {
        state: "connect",
        last_io_ms: 0,
        // -1 in INFO until the link has been up once, as Redis.
        down_since_ms: 0,
        last_error: String::new(),
    };
    // Its own replicas follow a new history from here on.
    for r in repl.replicas() {
        r.handle.kill();
    }
    let task = tokio::spawn(run(shared.clone(), host, port, epoch));
    if let Some(old) = repl.link_task.lock().replace(task) {
        old.abort();
    }
}

/// Stop following (REPLICAOF NO ONE): the link task ends, and this server is a primary with a
/// new replication id (the old one stays valid as replid2 for partial resyncs).
pub fn promote(shared: &Shared) {
    let repl = &shared.repl;
    repl.link_epoch.fetch_add(1, Ordering::AcqRel);
    if let Some(task) = repl.link_task.lock().take() {
        task.abort();
    }
    repl.set_role(Role::Primary);
    repl.settings.replicaof.lock().clear();
    repl.sync_in_progress.store(false, Ordering::Relaxed);
    repl.shift_id();
    // Locks held by pages of the old primary stay held (their tokens still close them); new
    // tokens start a new epoch, above every token the old primary may have granted.
    shared.locks.promote(super::ORPHAN_LOCK_LEASE);
    // Its replicas reconnect and continue with the new id.
    for r in repl.replicas() {
        r.handle.kill();
    }
}

async fn run(shared: Arc<Shared>, host: String, port: u16, epoch: u64) {
    let current = || shared.repl.link_epoch.load(Ordering::Acquire) == epoch;
    while current() {
        shared.repl.link.lock().state = "connecting";
        let result = session(&shared, &host, port, &current).await;
        if !current() {
            return;
        }
        {
            let mut link = shared.repl.link.lock();
            if link.state == "connected" {
                link.down_since_ms = gradus_store::now_ms();
            }
            link.state = "connect";
            if let Err(e) = &result {
                link.last_error = e.clone();
            }
        }
        shared.repl.sync_in_progress.store(false, Ordering::Relaxed);
        match result {
            Ok(()) => tracing::info!(host, port, "link to the primary closed"),
            Err(e) => tracing::warn!(host, port, error = %e, "replication link failed"),
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// The connection to the primary (plain or TLS), read through a buffer.
struct Link {
    stream: Box<dyn ClientStream>,
    buf: BytesMut,
    /// When the last bytes came from the primary: the `repl-timeout` counts from here, not from
    /// the start of each read (the streaming loop starts a new read on every tick).
    last_read: tokio::time::Instant,
}

impl Link {
    async fn read_more(&mut self, shared: &Shared) -> Result<(), String> {
        // A link with nothing read for `repl-timeout` seconds is dropped and reconnected.
        let secs = shared.live.repl.timeout.load(Ordering::Relaxed).max(1);
        let deadline = self.last_read + std::time::Duration::from_secs(secs);
        match tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.buf)).await {
            Err(_) => Err(format!(
                "timeout: nothing read from the primary for {secs} seconds"
            )),
            Ok(Ok(0)) => Err("the primary closed the connection".into()),
            Ok(Ok(_)) => {
                self.last_read = tokio::time::Instant::now();
                shared.repl.link.lock().last_io_ms = gradus_store::now_ms();
                Ok(())
            }
            Ok(Err(e)) => Err(crate::tls::link_error("read from the primary", &e)),
        }
    }

    /// One reply line (without CRLF).
    async fn line(&mut self, shared: &Shared) -> Result<String, String> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = self.buf.split_to(end + 2);
                return Ok(String::from_utf8_lossy(&line[..end]).into_owned());
            }
            if self.buf.len() > 64 * 1024 {
                return Err("reply line too long".into());
            }
            self.read_more(shared).await?;
        }
    }

    async fn send(&mut self, args: &[&str]) -> Result<(), String> {
        let mut out = format!("*{}\r\n", args.len());
        for a in args {
            out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        // The flush pushes a TLS record out at once (a no-op on a plain socket).
        let written = async {
            self.stream.write_all(out.as_bytes()).await?;
            self.stream.flush().await
        };
        written
            .await
            .map_err(|e| crate::tls::link_error("write to the primary", &e))
    }

    /// Send a command and read its one-line reply; an error reply is an Err with its text.
    async fn call(&mut self, shared: &Shared, args: &[&str]) -> Result<String, String> {
        self.send(args).await?;
        let line = self.line(shared).await?;
        match line.strip_prefix('-') {
            Some(err) => Err(format!("{} refused: {err}", args[0])),
            None => Ok(line),
        }
    }

    async fn frame(&mut self, shared: &Shared) -> Result<(Frame, usize), String> {
        loop {
            if let Some(frame) = stream::decode(&mut self.buf).map_err(|e| e.to_string())? {
                return Ok(frame);
            }
            self.read_more(shared).await?;
        }
    }
}

async fn session(
    shared: &Arc<Shared>,
    host: &str,
    port: u16,
    current: &impl Fn() -> bool,
) -> Result<(), String> {
    let tls = shared.live.tls_replication.load(Ordering::Relaxed);
    let stream: Box<dyn ClientStream> = if tls {
        let files = crate::tls::TlsFiles::of_live(&shared.live);
        let config = crate::tls::build_client(&files)?;
        Box::new(crate::tls::connect(config, host, port).await?)
    } else {
        let stream = tokio::net::TcpStream::connect((host, port))
            .await
            .map_err(|e| format!("connect to {host}:{port}: {e}"))?;
        let _ = stream.set_nodelay(true);
        Box::new(stream)
    };
    let mut link = Link {
        stream,
        buf: BytesMut::with_capacity(64 * 1024),
        last_read: tokio::time::Instant::now(),
    };
    let settings = &shared.repl.settings;
    let (user, pass) = (
        settings.masteruser.lock().clone(),
        settings.masterauth.lock().clone(),
    );
    if !pass.is_empty() {
        if user.is_empty() {
            link.call(shared, &["AUTH", &pass]).await?;
        } else {
            link.call(shared, &["AUTH", &user, &pass]).await?;
        }
    }
    // As Redis: replica-announce-port, else the TLS port over a TLS link, else the plain one.
    let announced_port = match settings.announce_port.load(Ordering::Relaxed) {
        0 if tls && shared.config.tls_port != 0 => u64::from(shared.config.tls_port),
        0 => shared.port.load(Ordering::Relaxed) as u64,
        p => p,
    };
    link.call(
        shared,
        &["REPLCONF", "listening-port", &announced_port.to_string()],
    )
    .await?;
    let announce_ip = settings.announce_ip.lock().clone();
    if !announce_ip.is_empty() {
        link.call(shared, &["REPLCONF", "ip-address", &announce_ip])
            .await?;
    }
    link.call(shared, &["REPLCONF", "capa", "eof", "capa", "psync2"])
        .await?;
    link.call(
        shared,
        &["REPLCONF", "gradus-layout", &shared.repl.fingerprint],
    )
    .await
    .map_err(|e| {
        let text = format!(
            "the primary refused this replica's keyspace layout (tenants, keyspaces and users must match): {e}"
        );
        tracing::error!("{text}");
        text
    })?;
    if !current() {
        return Ok(());
    }
    let (replid, offset) = {
        let view = shared.repl.view();
        (view.replid, view.offset)
    };
    // FAILOVER: the PSYNC asks the target to take over (see `repl::failover`).
    let failover = shared.failover.in_progress();
    let offset_arg = (offset + 1).to_string();
    let mut psync = vec!["PSYNC", replid.as_str(), offset_arg.as_str()];
    if failover {
        psync.push("FAILOVER");
    }
    link.send(&psync).await?;
    let reply = loop {
        // A primary may send empty lines while it prepares (Redis does); skip them.
        let line = link.line(shared).await?;
        if !line.is_empty() {
            break stream::parse_psync_reply(&line);
        }
    };
    if failover {
        if let PsyncReply::Error(e) = &reply {
            super::failover::abort(shared, "Failover target rejected psync request");
            return Err(format!("PSYNC FAILOVER refused: {e}"));
        }
        super::failover::clear(shared);
    }
    match reply {
        PsyncReply::Full { replid, offset } => {
            shared.repl.link.lock().state = "sync";
            shared.repl.sync_in_progress.store(true, Ordering::Relaxed);
            // A replica cut off half-way through the load must not continue from its old
            // offset with what it has: a fresh id makes its next PSYNC a full one.
            shared.repl.adopt(&super::new_id(), 0);
            let locks = receive_snapshot(shared, &mut link).await?;
            if !current() {
                return Ok(());
            }
            let loader = shared.clone();
            tokio::task::spawn_blocking(move || snapshot_own_log(&loader))
                .await
                .map_err(|e| format!("loading the snapshot: {e}"))??;
            shared.locks.clear();
            for event in &locks {
                shared.locks.apply(event);
            }
            shared.repl.adopt(&replid, offset);
            shared.repl.applied_offset.store(offset, Ordering::Relaxed);
            shared.repl.read_offset.store(offset, Ordering::Relaxed);
            shared.repl.sync_in_progress.store(false, Ordering::Relaxed);
            tracing::info!(offset, "full resync from the primary done");
        }
        PsyncReply::Continue { replid } => {
            if let Some(replid) = replid {
                shared.repl.switch_id(&replid);
            }
            tracing::info!(offset, "partial resync with the primary accepted");
        }
        PsyncReply::Error(e) => return Err(format!("PSYNC refused: {e}")),
    }
    {
        let mut state = shared.repl.link.lock();
        state.state = "connected";
        state.down_since_ms = 0;
        state.last_error.clear();
    }
    follow_stream(shared, &mut link, current).await
}

/// Items loaded at once while a snapshot arrives (and their bytes): the load keeps up with the
/// link without holding the whole snapshot in memory.
const LOAD_BATCH_ITEMS: usize = 8192;
const LOAD_BATCH_BYTES: usize = 16 << 20;

/// Replace every keyspace's contents with the snapshot's: clear them, then load ITEM frames in
/// batches as they arrive (a value split over several items may span batches: the loader adds
/// later parts to what it loaded), up to the END frame, whose count must match. Returns the
/// locks held on the primary (its LOCK frames before END).
async fn receive_snapshot(
    shared: &Arc<Shared>,
    link: &mut Link,
) -> Result<Vec<gradus_store::locks::LockEvent>, String> {
    let clearing = shared.clone();
    tokio::task::spawn_blocking(move || clear_all(&clearing))
        .await
        .map_err(|e| format!("clearing the keyspaces: {e}"))?;
    let load = |batch: Vec<Bytes>| {
        let loader = shared.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                crate::persist::replay::load_items_into(&loader, &batch, true)
            })
            .await
            .map_err(|e| format!("loading the snapshot: {e}"))?
        }
    };
    let (mut batch, mut batch_bytes, mut count) = (Vec::new(), 0usize, 0u64);
    let mut locks = Vec::new();
    loop {
        match link.frame(shared).await?.0 {
            Frame::Item(item) => {
                count += 1;
                batch_bytes += item.len();
                batch.push(item);
                if batch.len() >= LOAD_BATCH_ITEMS || batch_bytes >= LOAD_BATCH_BYTES {
                    load(std::mem::take(&mut batch)).await?;
                    batch_bytes = 0;
                }
            }
            Frame::Lock(event) => locks.push(event),
            Frame::End { items } => {
                load(batch).await?;
                if items != count {
                    return Err(format!(
                        "snapshot ended after {count} items, the primary sent {items}"
                    ));
                }
                return Ok(locks);
            }
            other => return Err(format!("unexpected frame in a snapshot: {other:?}")),
        }
    }
}

/// Empty every keyspace and forget the function libraries (the snapshot carries the primary's).
fn clear_all(shared: &Shared) {
    let _exclusive = shared.store.exclusive();
    let old: Vec<_> = shared.store.keyspaces().iter().map(|k| k.flush()).collect();
    crate::command::server::dispose(old);
    shared.functions.clear();
    crate::command::scripting::libraries_changed();
}

/// After a full load, make the logged keyspaces durable in this server's own log with a snapshot
/// of it (the `none` ones never reach it).
fn snapshot_own_log(shared: &Shared) -> Result<(), String> {
    if shared.persist.log.get().is_some() {
        // A log snapshot running now holds the store's one armed snapshot: take turns.
        loop {
            match crate::persist::snapshot::take_snapshot(shared) {
                Ok(_) => break,
                Err(e) if e.contains("already in progress") => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => return Err(format!("snapshot after a full resync: {e}")),
            }
        }
    }
    Ok(())
}

/// The replication client: applies the primary's records (admin, every keyspace). While the
/// stream is followed it is in CLIENT LIST as Redis shows its master client (`flags=M`, type
/// `master`, the primary's address), so `CLIENT KILL TYPE master` reaches it (the link then
/// reconnects); unlisted when the returned guard drops.
fn replication_client(shared: &Arc<Shared>, link: &Link) -> (ClientState, MasterListed) {
    let unspecified = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
    let handle = shared.clients.register(
        link.stream.tcp().peer_addr().unwrap_or(unspecified),
        link.stream.tcp().local_addr().unwrap_or(unspecified),
        -1,
    );
    handle.set_role(crate::client::ClientRole::Master);
    let listed = MasterListed {
        shared: shared.clone(),
        id: handle.id,
    };
    let mut client = ClientState::new(handle, true);
    client.from_primary = true;
    (client, listed)
}

/// Unlists the master client (see [`replication_client`]) when dropped.
struct MasterListed {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for MasterListed {
    fn drop(&mut self) {
        self.shared.clients.unregister(self.id);
    }
}

/// Apply streamed records, feed them to this server's own backlog, acknowledge.
async fn follow_stream(
    shared: &Arc<Shared>,
    link: &mut Link,
    current: &impl Fn() -> bool,
) -> Result<(), String> {
    let (mut client, _listed) = replication_client(shared, link);
    // Shutdown waits for every listed client to go: the master client goes at once.
    let mut shutdown = shared.shutdown.subscribe();
    // (offset after a record, the LSN this server's log gave it; 0: not logged here).
    let mut pending: VecDeque<(u64, u64)> = VecDeque::new();
    let mut acked = 0u64;
    let mut last_ack = std::time::Instant::now();
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    let limits = super::primary::replica_limits(shared);
    let mut offset = shared.repl.offset();
    // Where this link starts: everything up to it is applied and durable here (a full sync
    // snapshots this server's log before the stream starts), so it is acknowledged at once, not
    // only when the next frame arrives — a primary that stopped feeding (FAILOVER pauses writes
    // and its PINGs) waits for exactly this acknowledgement.
    let start = offset;
    loop {
        // CLIENT PAUSE on this replica holds its primary's stream too, as Redis pauses its
        // master client (acknowledging what it has meanwhile); a primary never pauses the
        // stream it sends.
        while shared.pauses.writes_paused(gradus_store::now_ms()) {
            tokio::select! {
                _ = shared.pauses.changed() => {}
                _ = tick.tick() => if acked > 0 {
                    link.send(&["REPLCONF", "ACK", &acked.to_string()]).await?;
                },
                _ = client.handle.killed() => return Err("the link to the primary was killed (CLIENT KILL)".into()),
                // (The guard `wait_for` gives is not Send: dropped inside.)
                _ = async { let _ = shutdown.wait_for(|down| *down).await; } => return Ok(()),
            }
            if !current() {
                return Ok(());
            }
        }
        while let Some((frame, len)) = stream::decode(&mut link.buf).map_err(|e| e.to_string())? {
            offset += len as u64;
            shared.repl.read_offset.store(offset, Ordering::Relaxed);
            let fed = match frame {
                Frame::Record(body) => {
                    let lsn = apply_record(shared, &mut client, &body)?;
                    pending.push_back((offset, lsn));
                    shared.repl.feed_record(&body, limits)
                }
                Frame::Ping => {
                    pending.push_back((offset, 0));
                    shared
                        .repl
                        .feed_frame(stream::encode(stream::KIND_PING, b""), limits)
                }
                Frame::Lock(event) => {
                    shared.locks.apply(&event);
                    pending.push_back((offset, 0));
                    shared.repl.feed_frame(stream::encode_lock(&event), limits)
                }
                other => return Err(format!("unexpected frame in the stream: {other:?}")),
            };
            if fed != offset {
                // Something else was streamed here (cannot happen: a replica streams only what
                // its primary sends); resync rather than serve its replicas a wrong history.
                return Err(format!(
                    "replication offset {fed} here differs from the primary's {offset}; resyncing"
                ));
            }
            shared.repl.applied_offset.store(offset, Ordering::Relaxed);
        }
        if !current() {
            return Ok(());
        }
        // Acknowledge what this server's log has made durable.
        let durable = shared
            .persist
            .log
            .get()
            .map_or(u64::MAX, |log| log.durable_lsn());
        let mut ackable = acked.max(start);
        while let Some(&(off, lsn)) = pending.front() {
            if lsn > durable {
                break;
            }
            ackable = off;
            pending.pop_front();
        }
        if ackable > acked || last_ack.elapsed() >= std::time::Duration::from_secs(1) {
            acked = acked.max(ackable);
            if acked > 0 {
                link.send(&["REPLCONF", "ACK", &acked.to_string()]).await?;
            }
            last_ack = std::time::Instant::now();
        }
        let waiting_lsn = pending.front().map(|&(_, lsn)| lsn);
        let log = shared.persist.log.get().cloned();
        tokio::select! {
            read = link.read_more(shared) => read?,
            _ = client.handle.killed() => return Err("the link to the primary was killed (CLIENT KILL)".into()),
            _ = shutdown.wait_for(|down| *down) => return Ok(()),
            _ = tick.tick() => {}
            _ = async {
                match (waiting_lsn, log) {
                    (Some(lsn), Some(log)) => { let _ = log.wait_durable(lsn).await; }
                    _ => std::future::pending::<()>().await,
                }
            } => {}
        }
    }
}

/// Apply one record's commands through the write path (a MULTI's as one transaction); returns
/// the LSN this server's log gave it (0 when nothing of it is logged here).
fn apply_record(shared: &Shared, client: &mut ClientState, body: &Bytes) -> Result<u64, String> {
    use crate::persist::record::{decode, Record};
    let (now_ms, commands) = match decode(body) {
        Ok(Record::Commands { now_ms, commands }) => (now_ms, commands),
        Ok(_) => return Err("a snapshot item in the stream".into()),
        Err(e) => return Err(format!("a record from the primary: {e}")),
    };
    let table = crate::command::table();
    client.last_write_lsn = 0;
    let run = |shared: &Shared,
               client: &mut ClientState,
               c: crate::persist::record::LoggedCommand| {
        let Some(spec) = table.get(&c.args[0]) else {
            tracing::error!(command = %String::from_utf8_lossy(&c.args[0]), "unknown command from the primary");
            return;
        };
        let row = spec.resolve(&c.args);
        client.db = c.db;
        if let Some(tenant) = shared.tenancy.tenant_of(c.db) {
            client.tenant = tenant;
        }
        let reply = crate::dispatch::run_write(shared, client, row, c.args, now_ms);
        if let gradus_proto::Frame::Error(e) = reply {
            tracing::warn!(error = %e, "a command from the primary failed here");
        }
    };
    if commands.len() == 1 {
        let c = commands.into_iter().next().expect("one command");
        run(shared, client, c);
    } else {
        let mut outer =
            crate::persist::write::WriteTxn::begin_exclusive(shared, client, now_ms, false)
                .map_err(|e| e.to_string())?;
        for c in commands {
            run(shared, outer.client(), c);
        }
        outer.commit().map_err(|e| e.to_string())?;
        crate::dispatch::flush_broadcasts(shared, client);
    }
    if !client.ready_keys.is_empty() {
        crate::blocking::serve(shared, std::mem::take(&mut client.ready_keys));
    }
    Ok(client.last_write_lsn)
}
