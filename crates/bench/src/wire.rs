//! What crosses the network between the application and a store: bytes sent and received and
//! round trips, counted per connection ([`WireCounter`]); a counting stream wrapper for the
//! clients that own their socket ([`Counted`]: RESP, memcached, PostgreSQL); and a loopback
//! relay ([`relay`]) that forwards one connection to the server through two delay lines, so a
//! cross-machine round-trip time can be modelled on one machine (and that counts for the driver
//! that keeps its socket to itself, MariaDB's).
//!
//! A *round trip* is one burst of requests followed by the reply: it is counted when the client
//! sends after having received (or for the first time), so a pipeline or a multi-get is one round
//! trip and each polling attempt of a lock is one. The relay runs on plain threads, not on the
//! tokio timer (whose resolution is one millisecond): each direction is a reader thread that
//! stamps every chunk with `arrival + delay` and a writer thread that sleeps until that instant,
//! as `tc netem delay` does; the sleep overshoots by the kernel's timer slack (about 50 µs).
//!
//! May import: `error`. Knows no protocol and no workload.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream as StdStream};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error::{BenchError, Result};

/// Byte and round-trip counts of one connection (shared with whoever reads them).
#[derive(Debug, Default)]
pub struct WireCounter {
    sent: AtomicU64,
    received: AtomicU64,
    round_trips: AtomicU64,
    awaiting_reply: AtomicBool,
}

/// A reading of a [`WireCounter`] (or a sum or difference of readings).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WireSnapshot {
    /// Bytes the client sent.
    pub sent: u64,
    /// Bytes the client received.
    pub received: u64,
    /// Request bursts answered (see the module comment).
    pub round_trips: u64,
}

impl WireSnapshot {
    /// `self - earlier`, saturating.
    pub fn since(self, earlier: WireSnapshot) -> WireSnapshot {
        WireSnapshot {
            sent: self.sent.saturating_sub(earlier.sent),
            received: self.received.saturating_sub(earlier.received),
            round_trips: self.round_trips.saturating_sub(earlier.round_trips),
        }
    }

    /// Component-wise sum.
    pub fn plus(self, other: WireSnapshot) -> WireSnapshot {
        WireSnapshot {
            sent: self.sent + other.sent,
            received: self.received + other.received,
            round_trips: self.round_trips + other.round_trips,
        }
    }
}

impl WireCounter {
    /// A fresh counter behind an `Arc`.
    pub fn shared() -> Arc<WireCounter> {
        Arc::new(WireCounter::default())
    }

    /// The client sent `n` bytes.
    pub fn on_sent(&self, n: usize) {
        if n == 0 {
            return;
        }
        self.sent.fetch_add(n as u64, Ordering::Relaxed);
        if !self.awaiting_reply.swap(true, Ordering::Relaxed) {
            self.round_trips.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The client received `n` bytes.
    pub fn on_received(&self, n: usize) {
        if n == 0 {
            return;
        }
        self.received.fetch_add(n as u64, Ordering::Relaxed);
        self.awaiting_reply.store(false, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn snapshot(&self) -> WireSnapshot {
        WireSnapshot {
            sent: self.sent.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
            round_trips: self.round_trips.load(Ordering::Relaxed),
        }
    }
}

/// A stream that counts what passes through it into a [`WireCounter`].
pub struct Counted<S> {
    inner: S,
    counter: Arc<WireCounter>,
}

impl<S> Counted<S> {
    /// Wraps `inner`; `counter` receives the counts.
    pub fn new(inner: S, counter: Arc<WireCounter>) -> Counted<S> {
        Counted { inner, counter }
    }

    /// The counter.
    pub fn counter(&self) -> &Arc<WireCounter> {
        &self.counter
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            self.counter.on_received(buf.filled().len() - before);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            self.counter.on_sent(n);
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Longest wait of a relay for its one client to connect.
const RELAY_ACCEPT_WAIT: Duration = Duration::from_secs(30);

/// Starts a relay for one connection: returns the loopback address the client must connect to
/// within 30 s; the relay connects to `upstream` and forwards both ways, each byte held for
/// `one_way` (half the modelled round-trip time). With `counter`, the relay counts the
/// connection (client to server is "sent"). The threads end when either side closes.
pub fn relay(
    upstream: &str,
    one_way: Duration,
    counter: Option<Arc<WireCounter>>,
) -> Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let local = listener.local_addr()?.to_string();
    listener.set_nonblocking(true)?;
    let upstream = upstream.to_string();
    std::thread::Builder::new()
        .name("wire-relay".into())
        .spawn(move || {
            let until = Instant::now() + RELAY_ACCEPT_WAIT;
            let client = loop {
                match listener.accept() {
                    Ok((s, _)) => break s,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if Instant::now() > until {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(_) => return,
                }
            };
            drop(listener);
            let Ok(server) = StdStream::connect(&upstream) else {
                return;
            };
            if client.set_nonblocking(false).is_err() {
                return;
            }
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
                return;
            };
            let up = counter.clone();
            let t = std::thread::Builder::new()
                .name("wire-relay-up".into())
                .spawn(move || {
                    pump(client, s2, one_way, |n| {
                        if let Some(c) = &up {
                            c.on_sent(n)
                        }
                    })
                });
            pump(server, c2, one_way, |n| {
                if let Some(c) = &counter {
                    c.on_received(n)
                }
            });
            if let Ok(t) = t {
                let _ = t.join();
            }
        })
        .map_err(|e| BenchError::Protocol(format!("cannot start a relay thread: {e}")))?;
    Ok(local)
}

/// Copies `from` to `to`, each chunk delayed by `delay` (a delay line: chunks keep their order
/// and their spacing, throughput is not limited). Shuts `to`'s write side down at the end.
fn pump(mut from: StdStream, mut to: StdStream, delay: Duration, count: impl Fn(usize)) {
    let mut buf = vec![0u8; 64 * 1024];
    if delay.is_zero() {
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            count(n);
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
        return;
    }
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
    let writer = std::thread::Builder::new()
        .name("wire-relay-delay".into())
        .spawn(move || {
            while let Ok((at, chunk)) = rx.recv() {
                let now = Instant::now();
                if at > now {
                    std::thread::sleep(at - now);
                }
                if to.write_all(&chunk).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        });
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            break;
        }
        count(n);
        if tx
            .send((Instant::now() + delay, buf[..n].to_vec()))
            .is_err()
        {
            break;
        }
    }
    drop(tx);
    if let Ok(w) = writer {
        let _ = w.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn round_trips_count_bursts_not_writes() {
        let c = WireCounter::default();
        c.on_sent(10);
        c.on_sent(5); // same burst (a pipeline)
        c.on_received(3);
        c.on_received(4);
        c.on_sent(1);
        c.on_received(0); // nothing read: still waiting
        c.on_sent(1);
        assert_eq!(
            c.snapshot(),
            WireSnapshot {
                sent: 17,
                received: 7,
                round_trips: 2
            }
        );
        let later = WireSnapshot {
            sent: 20,
            received: 9,
            round_trips: 3,
        };
        assert_eq!(
            later.since(c.snapshot()),
            WireSnapshot {
                sent: 3,
                received: 2,
                round_trips: 1
            }
        );
    }

    /// A one-line echo-style server: replies `+OK\r\n` to every `\n`-terminated line.
    fn ok_server() -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = l.accept() {
                let mut buf = [0u8; 1024];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let lines = buf[..n].iter().filter(|&&b| b == b'\n').count();
                    for _ in 0..lines {
                        if s.write_all(b"+OK\r\n").is_err() {
                            return;
                        }
                    }
                }
            }
        });
        addr
    }

    #[tokio::test]
    async fn counted_stream_matches_a_known_exchange() {
        let addr = ok_server();
        let counter = WireCounter::shared();
        let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let mut s = Counted::new(tcp, counter.clone());
        // "*1\r\n$4\r\nPING\r\n" is 14 bytes with 3 newlines: three +OK replies of 5 bytes.
        s.write_all(b"*1\r\n$4\r\nPING\r\n").await.unwrap();
        let mut reply = [0u8; 15];
        s.read_exact(&mut reply).await.unwrap();
        s.write_all(b"x\n").await.unwrap();
        let mut one = [0u8; 5];
        s.read_exact(&mut one).await.unwrap();
        assert_eq!(
            counter.snapshot(),
            WireSnapshot {
                sent: 16,
                received: 20,
                round_trips: 2
            }
        );
    }

    #[tokio::test]
    async fn relay_counts_and_delays_each_round_trip() {
        let addr = ok_server();
        let counter = WireCounter::shared();
        let one_way = Duration::from_millis(5);
        let local = relay(&addr, one_way, Some(counter.clone())).unwrap();
        let mut s = tokio::net::TcpStream::connect(&local).await.unwrap();
        let mut one = [0u8; 5];
        let started = Instant::now();
        for _ in 0..4 {
            s.write_all(b"a\n").await.unwrap();
            s.read_exact(&mut one).await.unwrap();
            assert_eq!(&one, b"+OK\r\n");
        }
        let took = started.elapsed();
        // Four round trips of two 5 ms legs each; bounded above loosely for a loaded machine.
        assert!(took >= Duration::from_millis(40), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        assert_eq!(
            counter.snapshot(),
            WireSnapshot {
                sent: 8,
                received: 20,
                round_trips: 4
            }
        );
    }
}
