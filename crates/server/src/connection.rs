//! One client connection: bytes in → requests → dispatch → replies → bytes out.
//!
//! Pipelining: every complete request in the read buffer is executed before the replies are written,
//! in one write (flushed early if the pending output passes `MAX_PENDING_OUTPUT`). Memory per
//! connection is bounded by the decoder limits plus that output threshold. A protocol error gets an
//! `-ERR Protocol error: …` reply and the connection is closed, as in Redis.
//!
//! Both front ends share what is the same shape in their loops: [`between_batches`] (flush with
//! the strict wait, shutdown, the next read) and [`close`]; their batch bodies differ (deferred
//! replies here, the login and `noreply` there).
//!
//! Durability: before any pending replies are written, the connection waits until the log's
//! durable LSN covers the highest `strict` write among them (so concurrent connections share one
//! fsync: group commit). If that wait fails (the log is poisoned), the connection is closed
//! *without* writing those replies: a strict write is never acknowledged unless it is durable.
//!
//! Plain and TLS connections run the same loop: it is generic over [`ClientStream`].
//!
//! May import: `dispatch`, `client`, `state`, `pause` (waiting out a client pause), `tls` (the stream type), `repl::primary` (a
//! connection that sent PSYNC becomes a replica's link), `gradus-proto`. Must not import command modules: a
//! deferred reply is a future the command made (`client::Deferred`).

use crate::client::ClientState;
use crate::dispatch::dispatch;
use crate::state::Shared;
use crate::tls::ClientStream;
use bytes::BytesMut;
use gradus_proto::{encode, Frame, Limits, ProtoError, ProtocolVersion, RequestDecoder};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Pending replies are written out once they reach this size, even mid-pipeline.
pub(crate) const MAX_PENDING_OUTPUT: usize = 64 * 1024;
/// Initial read buffer size; it grows only as a large request needs.
pub(crate) const READ_BUFFER: usize = 16 * 1024;
/// The read buffer of a client whose pipelined batches fill it grows to at most this much room.
pub(crate) const MAX_READ_BUFFER: usize = 256 * 1024;

/// Serve one accepted connection until the client leaves, is killed, or the server shuts down.
pub async fn serve<S: ClientStream>(shared: Arc<Shared>, mut stream: S, mut client: ClientState) {
    let _ = stream.tcp().set_nodelay(true);
    let handle = client.handle.clone();
    let mut shutdown = shared.shutdown.subscribe();
    let mut decoder = RequestDecoder::new(shared.live.limits());
    let mut rbuf = BytesMut::with_capacity(READ_BUFFER);
    let mut wbuf = BytesMut::with_capacity(READ_BUFFER);
    let mut takeover = None;

    'conn: loop {
        // Execute every complete request already buffered, all with one clock reading.
        let mut now_ms = gradus_store::now_ms();
        loop {
            decoder.set_limits(limits_for(&shared, &client));
            let read = (rbuf.len(), rbuf.capacity());
            match decoder.decode(&mut rbuf) {
                Ok(Some(args)) => {
                    if args.is_empty() {
                        continue;
                    }
                    if evicting_clients(&shared) {
                        let argv: usize = args.iter().map(|a| a.len()).sum();
                        // (Counted with the read buffer as it is after the command was taken
                        // out of it: the arguments are that buffer's bytes, counted once.)
                        let left = (rbuf.len(), rbuf.capacity());
                        if big_request_evicted(&shared, &client, argv, argv, left) {
                            break 'conn;
                        }
                    }
                    handle.mem.note_buffers(read, (wbuf.len(), wbuf.capacity()));
                    if gradus_proto::is_http_request_command(&args[0]) {
                        // As Redis: the connection ends at once, before authentication and
                        // without the batch's pending replies; nothing after it runs.
                        http_request_refused(&shared, &client, "RESP");
                        wbuf.clear();
                        break 'conn;
                    }
                    // Over maxmemory, keys are evicted before any command (Redis'
                    // `processCommand`), their invalidations going out before its reply.
                    crate::dispatch::evict_before_command(&shared, &mut client, &args, now_ms);
                    // What others pushed before this command goes out before its reply; what
                    // is pushed while it runs (its own keyspace events, messages it published
                    // to itself) after it, as Redis 7.2 postpones them (`afterCommand`).
                    client.take_pushes(&mut wbuf);
                    let mut reply = dispatch(&shared, &mut client, args, now_ms);
                    while let Some(args) = client.postponed.take() {
                        // Held by a client pause: the replies before it go out, then it waits
                        // for the pause to change and is dispatched again (see `pause`).
                        if !flush(&shared, &mut stream, &mut wbuf, &mut client).await {
                            break 'conn;
                        }
                        let _held = shared.blocked.held_by_pause();
                        tokio::select! {
                            _ = shared.pauses.changed() => {}
                            _ = handle.killed() => break 'conn,
                            _ = shutdown.changed() => break 'conn,
                            _ = crate::socket::peer_closed(stream.tcp()) => break 'conn,
                        }
                        now_ms = gradus_store::now_ms();
                        reply = dispatch(&shared, &mut client, args, now_ms);
                    }
                    if let Some(request) = client.repl_takeover.take() {
                        // PSYNC/SYNC: the connection becomes a replica's link.
                        client.reply_queued = false;
                        takeover = Some(request);
                        break 'conn;
                    }
                    if let Some(work) = client.deferred.take() {
                        // Replies before this command go out first, then it completes.
                        if !flush(&shared, &mut stream, &mut wbuf, &mut client).await {
                            break 'conn;
                        }
                        // A client that hangs up while it waits stops waiting (a blocked
                        // pop must not be served to a closed connection).
                        client
                            .handle
                            .blocked
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                        let reply = tokio::select! {
                            // The reply first: its future sets up its own clean-up when made.
                            biased;
                            reply = work.complete(shared.clone(), &mut client) => reply,
                            _ = crate::socket::peer_closed(stream.tcp()) => break 'conn,
                        };
                        // Idle from now on (Redis counts from the reply's write). The clock
                        // is set before the wait ends, so the idle check (`timeout`) never
                        // sees it ended with the clock of before it: it closed a client just
                        // served its BLPOP (regression: `test_limits.py::
                        // test_timeout_closes_idle_clients_but_not_subscribers_or_blocked_ones`).
                        let now = gradus_store::now_ms();
                        client
                            .handle
                            .last_active_ms
                            .store(now, std::sync::atomic::Ordering::Relaxed);
                        client
                            .handle
                            .blocked
                            .store(false, std::sync::atomic::Ordering::Release);
                        crate::dispatch::finish_deferred(&shared, &mut client, &reply);
                        if !std::mem::take(&mut client.errors_counted) {
                            shared.stats.count_errors(&reply);
                        }
                        crate::dispatch::flush_broadcasts(&shared, &mut client);
                        if !client.reply_mode.withhold_and_advance() {
                            encode(&reply, client.resp, &mut wbuf);
                        }
                        for msg in client.after_reply.drain(..) {
                            wbuf.extend_from_slice(&msg);
                        }
                        client.take_pushes(&mut wbuf);
                        now_ms = gradus_store::now_ms();
                    } else {
                        // The reply, then the invalidations of its own keys, then the pushes
                        // made while it ran (Redis 7.2's `afterCommand` order). A command whose
                        // reply is a push (SUBSCRIBE) queued it in the outbox itself.
                        if !std::mem::take(&mut client.errors_counted) {
                            shared.stats.count_errors(&reply);
                        }
                        let withheld = client.reply_mode.withhold_and_advance();
                        if !std::mem::take(&mut client.reply_queued)
                            && !client.suppress_reply
                            && !withheld
                        {
                            encode(&reply, client.resp, &mut wbuf);
                        }
                        for msg in client.after_reply.drain(..) {
                            wbuf.extend_from_slice(&msg);
                        }
                        client.take_pushes(&mut wbuf);
                    }
                    if client.close_after_reply || handle.is_killed() {
                        flush(&shared, &mut stream, &mut wbuf, &mut client).await;
                        break 'conn;
                    }
                    if wbuf.len() >= MAX_PENDING_OUTPUT
                        && !flush(&shared, &mut stream, &mut wbuf, &mut client).await
                    {
                        break 'conn;
                    }
                }
                Ok(None) => {
                    // The replies in `wbuf` are written next (see `flush`).
                    handle
                        .mem
                        .note_buffers((rbuf.len(), rbuf.capacity()), (0, wbuf.capacity()));
                    // The unfinished command's arguments decoded so far (no longer in `rbuf`):
                    // its `argv-mem`, as Redis counts a half-read multibulk's, so they count
                    // toward `maxmemory-clients` while the client keeps them waiting.
                    handle
                        .mem
                        .argv
                        .store(decoder.pending_bytes(), Ordering::Relaxed);
                    let pending = decoder.pending_bytes();
                    let held = (rbuf.len(), rbuf.capacity());
                    if big_request_evicted(&shared, &client, pending + rbuf.len(), pending, held) {
                        break 'conn;
                    }
                    if query_buffer_over_limit(&shared, &client, &rbuf, &decoder) {
                        break 'conn;
                    }
                    break;
                }
                Err(e) => {
                    flush(&shared, &mut stream, &mut wbuf, &mut client).await;
                    let text = match (&e, client.authenticated) {
                        (ProtoError::InvalidMultibulkLength, false) => {
                            "Protocol error: unauthenticated multibulk length".to_string()
                        }
                        (ProtoError::InvalidBulkLength, false) => {
                            "Protocol error: unauthenticated bulk length".to_string()
                        }
                        _ => e.to_string(),
                    };
                    let frame = Frame::Error(format!("ERR {text}"));
                    encode(&frame, ProtocolVersion::Resp2, &mut wbuf);
                    let _ = stream.write_all(&wbuf).await;
                    let _ = stream.flush().await;
                    tracing::debug!(client = client.id, error = %e, "protocol error, closing");
                    break 'conn;
                }
            }
        }
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
    if let Some(request) = takeover {
        if flush(&shared, &mut stream, &mut wbuf, &mut client).await {
            crate::repl::primary::serve(shared.clone(), stream, rbuf, &mut client, request).await;
        }
        close(&shared, &client);
        return;
    }
    let _ = stream.shutdown().await;
    close(&shared, &client);
}

/// Between two batches of requests, the same for both front ends: add up the batch's counters,
/// write the pending replies (after the fsync a strict write among them waits for), stop at
/// shutdown, then wait for more bytes, the connection being killed, or the server shutting down.
/// False when the connection ends.
pub(crate) async fn between_batches<S: ClientStream>(
    shared: &Shared,
    stream: &mut S,
    rbuf: &mut BytesMut,
    wbuf: &mut BytesMut,
    client: &mut ClientState,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> bool {
    shared
        .stats
        .absorb(&client.counters, &shared.tenancy.tenants[client.tenant].ops);
    if !wbuf.is_empty() {
        // The replies wait until the worker has run the other connections that are ready, then
        // go out together, as redis-server writes them in `beforeSleep` after one pass over the
        // ready clients: a client with many connections then gets its replies in bursts and
        // wakes once for several, not once per reply (redis-benchmark -c 50 running EVALSHA
        // slept ~40 000 times per 100 000 requests, against ~2 700 with redis-server; with
        // this, ~4 000). Bytes that reach this connection meanwhile end the wait at once: the
        // event loop then wakes it in the order the bytes arrived, before connections whose
        // bytes came later, so requests still run in arrival order (regression:
        // `test_raw_protocol.py::test_pipelined_request_runs_before_a_later_one_elsewhere`).
        let tcp = stream.tcp();
        tokio::select! {
            biased;
            () = std::future::poll_fn(|cx| tcp.poll_read_ready(cx)) => {}
            () = tokio::task::yield_now() => {}
        }
    }
    if !flush(shared, stream, wbuf, client).await || shutting_down(shutdown) {
        return false;
    }
    give_back_big_buffers(rbuf, wbuf, client);
    // Room is added only when little is left (or, for a connection whose batches outgrew 16
    // KiB, less than half its room): a key a command kept (a tracked key, a queued MULTI
    // command) may still share the buffer, and adding room then takes a new one.
    let free = rbuf.capacity() - rbuf.len();
    if free < 4096 || (client.read_room > READ_BUFFER && free < client.read_room / 2) {
        rbuf.reserve(client.read_room);
    }
    let room = rbuf.capacity() - rbuf.len();
    if rbuf.capacity() > KEEP_BUFFER_FACTOR * client.read_room {
        client.big_read_buffer = client.big_read_buffer.max(rbuf.capacity());
    }
    // Besides the socket, one waker for the rest (see `ClientHandle::attention`): a kill, the
    // server shutting down (`Shared::request_shutdown` wakes every connection), or messages
    // pushed by others, which the next flush writes.
    let handle = &client.handle;
    let outbox = client.outbox.as_deref();
    let ends = || handle.is_killed() || shutting_down(shutdown);
    tokio::select! {
        biased;
        read = stream.read_buf(rbuf) => match read {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                shared.stats.net_input_bytes.fetch_add(n as u64, Ordering::Relaxed);
                if n == room && client.read_room < MAX_READ_BUFFER {
                    // The read filled the buffer, so the rest of the client's batch waits in
                    // the socket: the next read gets room for twice as much. A pipelined batch
                    // larger than 16 KiB (16 SETs of 1 KiB) is then read, run and answered with
                    // one read and one write, as redis-server reads all its query buffer holds;
                    // it took two of each (regression: `bench-redis-benchmark.sh`, LPUSH -d 1024
                    // -P 16 made 6251 writes for 3125 batches).
                    client.read_room *= 2;
                }
                true
            }
        },
        _ = handle.attention(|| ends() || outbox.is_some_and(|o| o.has_queued())) => !ends(),
    }
}

/// A connection's buffer this many times its usual room (the read room, [`MAX_PENDING_OUTPUT`]
/// for replies) was made for one big request or reply.
const KEEP_BUFFER_FACTOR: usize = 4;

/// Give back, once they are empty, the buffers a big request or reply left behind: a
/// `SET k <32 MiB>` grew the read buffer to hold it, a `GET` of it the reply buffer, and each
/// connection that ever did so kept that memory while idle (eight connections that had each sent
/// one 32 MiB value held ~330 MB, where redis-server, which shrinks idle clients' query buffers
/// in `clientsCron`, held nothing; regression:
/// `test_memory.py::test_idle_connections_give_back_the_buffers_of_big_values`). The read
/// buffer's own capacity does not show it (the big argument was split off its front, and the
/// allocation is reused whole once that is dropped), so its growth is noted when room is added.
/// A buffer of [`PURGE_AFTER`] or more also asks the allocator to give the freed memory back to
/// the system soon (`alloc::ask_purge`): mimalloc keeps freed memory for reuse, and an idle
/// server stayed at its peak (148 MB for 32 MB of data; redis-server's jemalloc purges in a
/// background thread).
fn give_back_big_buffers(rbuf: &mut BytesMut, wbuf: &mut BytesMut, client: &mut ClientState) {
    let mut freed = 0;
    if client.big_read_buffer > 0 && rbuf.is_empty() {
        freed = std::mem::take(&mut client.big_read_buffer);
        *rbuf = BytesMut::with_capacity(client.read_room);
    }
    if wbuf.is_empty() && wbuf.capacity() > KEEP_BUFFER_FACTOR * MAX_PENDING_OUTPUT {
        freed = freed.max(wbuf.capacity());
        *wbuf = BytesMut::with_capacity(READ_BUFFER);
    }
    if freed >= PURGE_AFTER {
        crate::alloc::ask_purge();
    }
}

/// A buffer at least this large, once given back, makes the allocator return freed memory to
/// the system (see [`give_back_big_buffers`]).
const PURGE_AFTER: usize = 1 << 20;

/// Whether the server is shutting down.
fn shutting_down(shutdown: &tokio::sync::watch::Receiver<bool>) -> bool {
    *shutdown.borrow()
}

/// The end of a connection (its socket shut), the same for both front ends: its counters are
/// added up, its locks released (whoever holds a lock loses it when its connection goes, like
/// MySQL's GET_LOCK) and the client unregistered.
pub(crate) fn close(shared: &Shared, client: &ClientState) {
    shared
        .stats
        .absorb(&client.counters, &shared.tenancy.tenants[client.tenant].ops);
    shared.locks.release_client(client.id);
    if let Some(subs) = &client.subs {
        subs.release(&shared.pubsub, client.id);
    }
    if client.tracking.is_some() {
        shared.tracking.disable(client.id);
    }
    shared.monitors.remove(client.id);
    client.handle.close_outbox();
    shared.clients.unregister(client.id);
}

/// Counts a connection closed for sending an HTTP request (a browser made to talk to Gradus by
/// a web page: cross-protocol scripting) and logs it at most once a minute, in Redis' words.
pub(crate) fn http_request_refused(shared: &Shared, client: &ClientState, port: &str) {
    shared
        .stats
        .cross_protocol_attacks
        .fetch_add(1, Ordering::Relaxed);
    let now = gradus_store::now_ms() / 1000;
    let last = shared
        .stats
        .cross_protocol_logged_at
        .load(Ordering::Relaxed);
    if now.abs_diff(last) > 60
        && shared
            .stats
            .cross_protocol_logged_at
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        tracing::warn!(
            client = client.id,
            peer = %client.handle.addr,
            port,
            "Possible SECURITY ATTACK detected. It looks like somebody is sending an HTTP request \
             (POST or Host: commands) to Gradus. This is likely due to an attacker attempting to \
             use Cross Protocol Scripting to compromise your Gradus instance. Connection aborted."
        );
    }
}

/// Whether the request still arriving holds more than `client-query-buffer-limit` bytes (its
/// unparsed input and the arguments already decoded): the connection is then closed, as Redis
/// closes a client whose query buffer grows past the limit, and logged in Redis' words.
/// Whether `maxmemory-clients` is set (one relaxed load: the per-command check).
fn evicting_clients(shared: &Shared) -> bool {
    shared.live.maxmemory_clients.load(Ordering::Relaxed) != 0
}

/// Requests this large make the connection look at `maxmemory-clients` at once, before the
/// command runs (smaller ones are left to the ten-times-a-second check).
const EVICTION_CHECK_BYTES: usize = 64 * 1024;

/// With `maxmemory-clients` set, a request of `bytes` (a whole command, or what has arrived of
/// one, `argv` of them decoded; the read buffer then holding `read`: length, capacity) may take
/// the clients past the limit: evict now, as Redis does as a client's memory grows, so a
/// client evicted for its own request never runs it. True when this connection was evicted.
fn big_request_evicted(
    shared: &Shared,
    client: &ClientState,
    bytes: usize,
    argv: usize,
    read: (usize, usize),
) -> bool {
    if bytes < EVICTION_CHECK_BYTES || crate::quota::client_eviction_limit(&shared.live) == 0 {
        return false;
    }
    let mem = &client.handle.mem;
    mem.qbuf.store(read.0, Ordering::Relaxed);
    mem.qbuf_free
        .store(read.1.saturating_sub(read.0), Ordering::Relaxed);
    mem.argv.store(argv, Ordering::Relaxed);
    crate::quota::evict_clients(shared);
    client.handle.is_killed()
}

fn query_buffer_over_limit(
    shared: &Shared,
    client: &ClientState,
    rbuf: &BytesMut,
    decoder: &RequestDecoder,
) -> bool {
    let limit = shared
        .live
        .client_query_buffer_limit
        .load(Ordering::Relaxed);
    let held = rbuf.len().saturating_add(decoder.pending_bytes());
    if held <= limit {
        return false;
    }
    let head = &rbuf[..rbuf.len().min(64)];
    tracing::warn!(
        client = client.id,
        peer = %client.handle.addr,
        held,
        "Closing client that reached max query buffer length (qbuf initial bytes: {:?})",
        String::from_utf8_lossy(head)
    );
    true
}

/// Before AUTH, a client may send only small requests (Redis: 10 elements, 16 KiB bulks), so an
/// unauthenticated peer cannot make the server buffer megabytes.
fn limits_for(shared: &Shared, client: &ClientState) -> Limits {
    let live = shared.live.limits();
    if client.authenticated {
        live
    } else {
        Limits {
            max_bulk_len: live.max_bulk_len.min(16 * 1024),
            max_array_len: live.max_array_len.min(10),
            max_inline_len: live.max_inline_len,
        }
    }
}

/// Write the pending replies, first waiting for the fsync that covers any strict write among
/// them. Returns false when the connection must close (write error, or the log failed).
/// (The memcached front end uses it too.)
pub(crate) async fn flush<S: ClientStream>(
    shared: &Shared,
    stream: &mut S,
    wbuf: &mut BytesMut,
    client: &mut ClientState,
) -> bool {
    if client.strict_lsn > 0 {
        let lsn = std::mem::take(&mut client.strict_lsn);
        if let Some(log) = shared.persist.log.get() {
            if let Err(e) = shared.persist.wait_strict(log, lsn).await {
                tracing::error!(client = client.id, error = %e, "strict write not durable; closing without acknowledging");
                wbuf.clear();
                return false;
            }
        }
    }
    if client.replicated_offset > 0 {
        let offset = std::mem::take(&mut client.replicated_offset);
        if !shared.repl.wait_replicated(&client.handle, offset).await {
            tracing::error!(
                client = client.id,
                "replicated write not acknowledged by enough replicas; closing without acknowledging"
            );
            wbuf.clear();
            return false;
        }
    }
    client.take_pushes(wbuf);
    if wbuf.is_empty() {
        return true;
    }
    // CLIENT LIST `obl`: what waits for the peer to read it.
    let mem = &client.handle.mem;
    mem.reply_pending.store(wbuf.len(), Ordering::Relaxed);
    mem.reply_peak.fetch_max(wbuf.len(), Ordering::Relaxed);
    // A connection killed while its peer does not read (a slow subscriber over its output
    // limit) stops writing at once. A TLS stream may keep part of the records it made in its
    // buffer until flushed (a no-op for a plain socket).
    let written = tokio::select! {
        // The write first: one that completes at once (the usual case) never registers for
        // the kill.
        biased;
        written = async {
            stream.write_all(wbuf).await?;
            stream.flush().await
        } => written.is_ok(),
        _ = client.handle.killed() => false,
    };
    if !written {
        return false;
    }
    if let Some(outbox) = &client.outbox {
        outbox.written(std::mem::take(&mut client.outbox_taken));
    }
    shared
        .stats
        .net_output_bytes
        .fetch_add(wbuf.len() as u64, Ordering::Relaxed);
    wbuf.clear();
    client.handle.mem.reply_pending.store(0, Ordering::Relaxed);
    true
}
