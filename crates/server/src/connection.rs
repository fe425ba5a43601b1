//! One client connection: bytes in → requests → dispatch → replies → bytes out.
//!
//! Pipelining: every complete request in the read buffer is executed before the replies are written,
//! in one write (flushed early if the pending output passes `MAX_PENDING_OUTPUT`). Memory per
//! connection is bounded by the decoder limits plus that output threshold. A protocol error gets an
//! `-ERR Protocol error: …` reply and the connection is closed, as in Redis.

use crate::client::ClientState;
use crate::dispatch::dispatch;
use crate::state::Shared;
use bytes::BytesMut;
use gradus_proto::{encode, Frame, ProtocolVersion, RequestDecoder};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Pending replies are written out once they reach this size, even mid-pipeline.
const MAX_PENDING_OUTPUT: usize = 64 * 1024;
/// Initial read buffer size; it grows only as a large request needs.
const READ_BUFFER: usize = 16 * 1024;

/// Serve one accepted connection until the client leaves, is killed, or the server shuts down.
pub async fn serve(shared: Arc<Shared>, mut stream: TcpStream, mut client: ClientState) {
    let _ = stream.set_nodelay(true);
    let handle = client.handle.clone();
    let mut shutdown = shared.shutdown.subscribe();
    let mut decoder = RequestDecoder::new(shared.live.limits());
    let mut rbuf = BytesMut::with_capacity(READ_BUFFER);
    let mut wbuf = BytesMut::with_capacity(READ_BUFFER);

    'conn: loop {
        // Execute every complete request already buffered.
        decoder.set_limits(shared.live.limits());
        loop {
            match decoder.decode(&mut rbuf) {
                Ok(Some(args)) => {
                    if args.is_empty() {
                        continue;
                    }
                    let reply = dispatch(&shared, &mut client, args);
                    if !client.suppress_reply {
                        encode(&reply, client.resp, &mut wbuf);
                    }
                    if client.close_after_reply || handle.is_killed() {
                        let _ = stream.write_all(&wbuf).await;
                        break 'conn;
                    }
                    if wbuf.len() >= MAX_PENDING_OUTPUT {
                        if stream.write_all(&wbuf).await.is_err() {
                            break 'conn;
                        }
                        count_output(&shared, wbuf.len());
                        wbuf.clear();
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    let frame = Frame::Error(format!("ERR {e}"));
                    encode(&frame, ProtocolVersion::Resp2, &mut wbuf);
                    let _ = stream.write_all(&wbuf).await;
                    tracing::debug!(client = client.id, error = %e, "protocol error, closing");
                    break 'conn;
                }
            }
        }
        if !wbuf.is_empty() {
            if stream.write_all(&wbuf).await.is_err() {
                break;
            }
            count_output(&shared, wbuf.len());
            wbuf.clear();
        }
        if *shutdown.borrow() {
            break;
        }
        if rbuf.capacity() - rbuf.len() < 4096 {
            rbuf.reserve(READ_BUFFER);
        }
        tokio::select! {
            read = stream.read_buf(&mut rbuf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    shared.stats.net_input_bytes.fetch_add(n as u64, Ordering::Relaxed);
                }
            },
            _ = handle.killed() => break,
            _ = shutdown.changed() => break,
        }
    }
    let _ = stream.shutdown().await;
    shared.clients.unregister(client.id);
}

fn count_output(shared: &Shared, n: usize) {
    shared
        .stats
        .net_output_bytes
        .fetch_add(n as u64, Ordering::Relaxed);
}
