//! The primary's side of one replica's connection, once it sent `PSYNC` (or `SYNC`): answer
//! `+CONTINUE` with the missing part of the backlog, or `+FULLRESYNC` with a snapshot of every
//! keyspace (the `none` ones too) streamed as ITEM frames (see [`super::stream`]); then write
//! the stream as the write path feeds it, and read the replica's `REPLCONF ACK <offset>`s.
//!
//! The connection's output is the link's queue ([`super::ReplicaLink`]), bounded by the
//! `replica` class of `client-output-buffer-limit` (256mb hard, 64mb for 60 s soft by default),
//! never by the `normal` class: a replica over it is dropped and must fully resync.
//!
//! May import: `repl`, `state`, `client`, `persist` (the record encoding), `command::functions`
//! (the libraries a snapshot carries), `tls` (the stream type), `gradus-proto` (the ACK
//! requests), `gradus-store`.

use super::stream::{self, KIND_ITEM, KIND_PING};
use super::{LinkState, ReplicaLink, Resync};
use crate::client::ClientState;
use crate::state::Shared;
use crate::tls::ClientStream;
use bytes::{Bytes, BytesMut};
use gradus_proto::RequestDecoder;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a replica asked for: `PSYNC replid offset` (`None`: `SYNC`; `PSYNC ? -1` comes as `("?", 0)`,
/// which never continues). An RDB transfer answers PSYNC with `+FULLRESYNC …` first, SYNC without.
#[derive(Debug, Clone)]
pub struct PsyncRequest {
    pub from: Option<(String, u64)>,
    /// After `REPLCONF rdb-only 1`: an RDB file and no stream (see [`send_rdb`]).
    pub rdb_only: bool,
}

/// Feeds a PING frame every `repl-ping-replica-period` seconds while this server is a primary
/// with replicas, so they see a live link (`master_last_io_seconds_ago`, `repl-timeout`) when
/// nothing is written. It wakes once a second and compares the seconds since its last PING
/// with the setting, as Redis' replication cron does, so CONFIG SET takes effect within a
/// second.
pub async fn ping_task(shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.subscribe();
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    let mut seconds = 0u64;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|down| *down) => return,
        }
        seconds += 1;
        if seconds < shared.live.repl.ping_period.load(Ordering::Relaxed) {
            continue;
        }
        seconds = 0;
        let repl = &shared.repl;
        // Not while a FAILOVER waits for its target to acknowledge the whole stream.
        let failing_over = shared.failover.phase() != super::failover::Phase::None;
        if repl.is_active() && !repl.is_replica() && !repl.replicas().is_empty() && !failing_over {
            repl.feed_frame(stream::encode(KIND_PING, b""), replica_limits(&shared));
        }
    }
}

/// Active expiry on a primary with a backlog: reclaim expired keys and stream a DEL of each to
/// the replicas (which never expire keys on their own clock, as Redis' replicas), in one record
/// per keyspace. Runs under the store gate (shared) and the write-order lock, as a write does, so
/// the DEL takes its place in the stream after every write that reached memory before it and
/// before any that follows (a key written again after it expired is not deleted by it). Not
/// logged: a replay of the log expires keys by the records' clocks by itself. Returns how many
/// keys it reclaimed.
pub fn sweep_and_stream(shared: &Shared, now_ms: u64, budget_per_shard: usize) -> usize {
    let _gate = shared.store.shared(0);
    let _order = shared.write_order.lock();
    // Every shard it sweeps is marked until its DELs are streamed, as a lone write marks them.
    let _marks = gradus_store::UnloggedMarks::begin();
    let limits = replica_limits(shared);
    let mut removed = 0;
    for (db, keyspace) in shared.store.keyspaces().iter().enumerate() {
        let keys = keyspace.sweep_expired_keys(now_ms, budget_per_shard);
        if keys.is_empty() {
            continue;
        }
        removed += keys.len();
        let commands: Vec<crate::persist::record::LoggedCommand> = keys
            .into_iter()
            .map(|key| crate::persist::record::LoggedCommand {
                db,
                args: vec![Bytes::from_static(b"DEL"), key],
            })
            .collect();
        for chunk in commands.chunks(1024) {
            let payload = crate::persist::record::encode_commands(now_ms, chunk);
            shared.repl.feed_record(&payload, limits);
        }
    }
    removed
}

/// The `replica` class of `client-output-buffer-limit`.
pub fn replica_limits(shared: &Shared) -> crate::pubsub::ClassLimits {
    shared
        .live
        .output_limits
        .get(crate::pubsub::LimitClass::Replica)
}

/// Serve a replica's connection until it ends (see the module docs). `rbuf` holds what it sent
/// after PSYNC.
pub async fn serve<S: ClientStream>(
    shared: Arc<Shared>,
    stream: S,
    mut rbuf: BytesMut,
    client: &mut ClientState,
    request: PsyncRequest,
) {
    let handle = client.handle.clone();
    if request.rdb_only {
        let (_, mut writer) = tokio::io::split(stream);
        let (tenant, psync) = (client.tenant, request.from.is_some());
        if let Err(e) = send_rdb(&shared, &mut writer, &handle, tenant, psync).await {
            tracing::info!(client = handle.id, error = %e, "RDB transfer ended");
        }
        let _ = writer.shutdown().await;
        return;
    }
    handle.set_role(crate::client::ClientRole::Replica);
    let ip = client
        .repl_announced_ip
        .clone()
        .unwrap_or_else(|| handle.addr.ip().to_string());
    let link = ReplicaLink::new(handle.clone(), ip, client.repl_listening_port);
    let (mut reader, mut writer) = tokio::io::split(stream);
    let result = async {
        let continued = match &request.from {
            Some((replid, offset)) => match shared.repl.try_continue(replid, *offset, &link) {
                Resync::Continue { replid, missing } => {
                    shared.repl.sync_partial_ok.fetch_add(1, Ordering::Relaxed);
                    shared
                        .repl
                        .sync_partial_bytes
                        .fetch_add(missing.len() as u64, Ordering::Relaxed);
                    tracing::info!(
                        client = handle.id,
                        offset,
                        bytes = missing.len(),
                        "replica continues from the backlog (partial resync)"
                    );
                    let mut out = format!("+CONTINUE {replid}\r\n").into_bytes();
                    out.extend_from_slice(&missing);
                    write_out(&mut writer, &out, &link).await?;
                    true
                }
                Resync::Full => {
                    if replid != "?" {
                        shared.repl.sync_partial_err.fetch_add(1, Ordering::Relaxed);
                    }
                    false
                }
            },
            None => false,
        };
        if !continued {
            full_sync(&shared, &mut writer, &link).await?;
        }
        link.set_state(LinkState::Online);
        stream_to(&shared, &mut reader, &mut writer, &mut rbuf, &link).await
    }
    .await;
    if let Err(e) = result {
        tracing::info!(client = handle.id, error = %e, "replica connection ended");
    }
    shared.repl.remove_replica(handle.id);
    let _ = writer.shutdown().await;
}

/// Send a full snapshot: arm it under the exclusive gate (the offset it corresponds to is the
/// replication offset then, and the link receives everything streamed after), walk it on a
/// blocking thread, write its items as they come.
async fn full_sync<W: tokio::io::AsyncWrite + Unpin>(
    shared: &Arc<Shared>,
    writer: &mut W,
    link: &Arc<ReplicaLink>,
) -> std::io::Result<()> {
    shared.repl.sync_full.fetch_add(1, Ordering::Relaxed);
    let _turn = snapshot_turn(shared).await;
    let (replid, offset, sink, libraries) = {
        let _exclusive = shared.store.exclusive();
        let (replid, offset) = shared.repl.begin_full_sync(link);
        (
            replid,
            offset,
            shared.store.arm_snapshot(),
            crate::command::functions::snapshot_libraries(shared),
        )
    };
    tracing::info!(client = link.handle.id, offset, "full resync of a replica");
    write_out(
        writer,
        format!("+FULLRESYNC {replid} {offset}\r\n").as_bytes(),
        link,
    )
    .await?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(1024);
    let walker = {
        let shared = shared.clone();
        tokio::task::spawn_blocking(move || {
            let mut count = 0u64;
            for (db, codes) in &libraries {
                let item = crate::persist::record::encode_functions(*db, codes);
                count += 1;
                if tx.blocking_send(stream::encode(KIND_ITEM, &item)).is_err() {
                    return count;
                }
            }
            let compress = shared.config.durability.snapshot_compression;
            let now = gradus_store::now_ms();
            let mut open = true;
            sink.drain(&shared.store, now, |db, key, item| {
                if !open {
                    return;
                }
                crate::persist::record::encode_item(db, key, item, compress, |item| {
                    count += 1;
                    if open && tx.blocking_send(stream::encode(KIND_ITEM, &item)).is_err() {
                        open = false;
                    }
                });
            });
            count
        })
    };
    let mut out = BytesMut::with_capacity(64 * 1024);
    while let Some(frame) = rx.recv().await {
        out.extend_from_slice(&frame);
        if out.len() >= 64 * 1024 {
            write_out(writer, &out, link).await?;
            out.clear();
        }
    }
    let count = walker.await.map_err(std::io::Error::other)?;
    // The locks held now (at or after the snapshot's offset): the replica loads them, then the
    // stream from that offset replays the grants and releases since, which ends in the same
    // holders (a release frees a lock only if its token still holds it).
    for event in shared.locks.held() {
        out.extend_from_slice(&stream::encode_lock(&event));
    }
    out.extend_from_slice(&stream::end(count));
    write_out(writer, &out, link).await
}

/// The only snapshot in progress, until dropped: the store keeps one armed snapshot per shard,
/// so a log snapshot, a replica's sync and an RDB transfer take turns.
async fn snapshot_turn(shared: &Shared) -> impl Drop + Send + '_ {
    let flag = &shared.persist.snapshot_in_progress;
    while flag.swap(true, Ordering::AcqRel) {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    struct Release<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for Release<'_> {
        fn drop(&mut self) {
            self.0.store(false, Ordering::Release);
        }
    }
    Release(flag)
}

/// `REPLCONF rdb-only 1`, then SYNC or PSYNC: what `redis-cli --rdb` sends to take a backup. The
/// reply is a Redis RDB file of the connection's tenant's keyspaces (each as its SELECT index,
/// every key with its expiry) in the diskless form Redis sends it (`$EOF:<40-byte mark>`, the
/// file, the mark), after `+FULLRESYNC <replid> <offset>` for PSYNC; then the connection ends.
/// It was the Gradus replication stream, which no Redis tool reads (`redis-check-rdb`: "Wrong
/// signature"). The snapshot is the one replicas get (key-granular copy-on-write, no pause of
/// writers); Redis functions are not included.
async fn send_rdb<W: tokio::io::AsyncWrite + Unpin>(
    shared: &Arc<Shared>,
    writer: &mut W,
    handle: &crate::client::ClientHandle,
    tenant: usize,
    psync: bool,
) -> std::io::Result<()> {
    let _turn = snapshot_turn(shared).await;
    let (replid, offset, sink) = {
        let _exclusive = shared.store.exclusive();
        (
            shared.repl.replid(),
            shared.repl.offset(),
            shared.store.arm_snapshot(),
        )
    };
    let mark = sha1_smol::Sha1::from(format!("{replid}:{offset}:{}", handle.id))
        .digest()
        .to_string();
    let mut head = String::new();
    if psync {
        head.push_str(&format!("+FULLRESYNC {replid} {offset}\r\n"));
    }
    head.push_str(&format!("$EOF:{mark}\r\n"));
    tracing::info!(client = handle.id, "RDB transfer (rdb-only sync)");
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let walker = {
        let shared = shared.clone();
        tokio::task::spawn_blocking(move || {
            let now = gradus_store::now_ms();
            let mut file = gradus_proto::rdb::RdbFile::new(crate::REDIS_COMPAT_VERSION, now / 1000);
            let tenancy = &shared.tenancy;
            let mut open = true;
            sink.drain(&shared.store, now, |g, key, item| {
                if !open || tenancy.tenant_of(g) != Some(tenant) {
                    return;
                }
                let value = crate::command::dump::view_to_rdb(item.value);
                let db = tenancy.select_of(g) as u64;
                if file.key(db, key, item.expires_at, &value).is_err() {
                    return; // an empty collection: nothing Redis could hold
                }
                if file.len() >= 64 * 1024 && tx.blocking_send(file.take()).is_err() {
                    open = false;
                }
            });
            if open {
                let _ = tx.blocking_send(file.finish());
            }
        })
    };
    write_unless_killed(writer, head.as_bytes(), handle).await?;
    while let Some(piece) = rx.recv().await {
        write_unless_killed(writer, &piece, handle).await?;
    }
    walker.await.map_err(std::io::Error::other)?;
    write_unless_killed(writer, mark.as_bytes(), handle).await
}

/// Write `bytes`, unless the link is killed first (dropped over its output limit, CLIENT KILL,
/// shutdown): a replica that stops reading must not hold its connection's task in a write.
async fn write_out<W: tokio::io::AsyncWrite + Unpin>(
    writer: &mut W,
    bytes: &[u8],
    link: &ReplicaLink,
) -> std::io::Result<()> {
    write_unless_killed(writer, bytes, &link.handle).await
}

/// Write `bytes`, unless the connection is killed first.
async fn write_unless_killed<W: tokio::io::AsyncWrite + Unpin>(
    writer: &mut W,
    bytes: &[u8],
    handle: &crate::client::ClientHandle,
) -> std::io::Result<()> {
    tokio::select! {
        written = async {
            writer.write_all(bytes).await?;
            writer.flush().await
        } => written,
        _ = handle.killed() => Err(std::io::Error::other("connection killed")),
    }
}

/// Write what the write path queues for the link; read its acknowledgements.
async fn stream_to<R, W>(
    shared: &Arc<Shared>,
    reader: &mut R,
    writer: &mut W,
    rbuf: &mut BytesMut,
    link: &Arc<ReplicaLink>,
) -> std::io::Result<()>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut shutdown = shared.shutdown.subscribe();
    let mut decoder = RequestDecoder::new(shared.live.limits());
    let mut out = BytesMut::new();
    loop {
        read_acks(shared, &mut decoder, rbuf, link);
        for frame in link.take() {
            out.extend_from_slice(&frame);
        }
        if !out.is_empty() {
            // A replica that does not read is dropped (over its output limit) while this
            // waits: stop writing then.
            write_out(writer, &out, link).await?;
            out.clear();
        }
        if link.dropped.load(Ordering::Relaxed) {
            return Err(std::io::Error::other(
                "dropped: over the replica output limit",
            ));
        }
        tokio::select! {
            _ = link.wake.notified() => {}
            read = reader.read_buf(rbuf) => match read {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(e),
            },
            _ = link.handle.killed() => return Ok(()),
            _ = shutdown.wait_for(|down| *down) => return Ok(()),
        }
    }
}

/// Apply every complete request the replica sent: `REPLCONF ACK <offset> [FACK <offset>]` moves
/// its acknowledged offset; anything else (a PING, `REPLCONF GETACK`) is ignored, as Redis
/// ignores replies from a replica.
fn read_acks(
    shared: &Shared,
    decoder: &mut RequestDecoder,
    rbuf: &mut BytesMut,
    link: &ReplicaLink,
) {
    while let Ok(Some(args)) = decoder.decode(rbuf) {
        if args.len() >= 3
            && args[0].eq_ignore_ascii_case(b"replconf")
            && args[1].eq_ignore_ascii_case(b"ack")
        {
            if let Some(offset) = std::str::from_utf8(&args[2])
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
            {
                link.ack_offset.fetch_max(offset, Ordering::Relaxed);
                link.last_ack_ms
                    .store(gradus_store::now_ms(), Ordering::Relaxed);
                shared.repl.acked.notify_waiters();
            }
        }
    }
}
