//! A client connection's TCP socket as the server holds it: registered with the event loop for
//! *reading only*, as redis-server registers a client (`AE_READABLE`), and for writing only while
//! a reply does not fit in the kernel's send buffer.
//!
//! Why not tokio's `TcpStream`: it registers every socket for both directions, and a socket is
//! writable the moment it is registered, so each new connection enters epoll's ready list at once
//! and keeps that place. When two connections' requests then arrive before the next
//! `epoll_wait`, they are served in the order the *connections were accepted*, not the order the
//! requests arrived: a PUBLISH sent right after another connection's PUNSUBSCRIBE could run first
//! (regression: `test_raw_protocol.py::
//! test_requests_on_two_connections_run_in_the_order_they_arrive`, 1 run in ~6000 under CPU
//! load). Registered for reading only, a socket enters the ready list when its bytes arrive.
//!
//! Writes go straight to the socket. One that would block registers a duplicate of the
//! descriptor for writability (epoll keys registrations by descriptor, so the readable one keeps
//! its interest and its place), which is dropped once a write is taken whole.
//!
//! [`SocketOps`] is what the connection loops need of the TCP socket under any stream (this one,
//! or tokio's on a replica's link to its primary): `TCP_NODELAY`, the addresses, and noticing a
//! peer that hung up.
//!
//! May import: nothing from this crate.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// What the connection loops use of the TCP socket under a stream.
pub trait SocketOps: Send + Sync {
    fn set_nodelay(&self, on: bool) -> io::Result<()>;
    fn peer_addr(&self) -> io::Result<SocketAddr>;
    fn local_addr(&self) -> io::Result<SocketAddr>;
    /// Ready when the peer has closed the connection (end of stream or an error); pending while
    /// it is connected, including when it has sent more bytes (they stay in the socket).
    fn poll_peer_closed(&self, cx: &mut Context<'_>) -> Poll<()>;
    /// Ready when the event loop has seen the socket readable since its last read emptied it
    /// (bytes, or the peer's end, may wait): nothing is read or cleared.
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<()>;
}

/// Resolves when the peer of `socket` has closed the connection (see
/// [`SocketOps::poll_peer_closed`]). Under a TLS stream it looks at the TCP socket: a TLS
/// close_notify counts as data, only a FIN or a reset as gone.
pub async fn peer_closed(socket: &dyn SocketOps) {
    std::future::poll_fn(|cx| socket.poll_peer_closed(cx)).await
}

/// A server-side client socket (see the module documentation).
pub struct Socket {
    io: AsyncFd<std::net::TcpStream>,
    /// A duplicate of the descriptor registered for writability, while a write waits for room.
    writable: Option<AsyncFd<OwnedFd>>,
}

impl Socket {
    /// Takes over an accepted connection, registering it for reading only.
    pub fn new(stream: tokio::net::TcpStream) -> io::Result<Socket> {
        let stream = stream.into_std()?;
        stream.set_nonblocking(true)?;
        Ok(Socket {
            io: register(stream, Interest::READABLE)?,
            writable: None,
        })
    }

    fn stream(&self) -> &std::net::TcpStream {
        self.io.get_ref()
    }

    /// One write attempt `write` makes on the socket, waiting for room when it would block.
    fn poll_write_with(
        &mut self,
        cx: &mut Context<'_>,
        len: usize,
        mut write: impl FnMut(&std::net::TcpStream) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = match &self.writable {
                Some(waiter) => Some(ready!(waiter.poll_write_ready(cx))?),
                None => None,
            };
            match write(self.io.get_ref()) {
                Ok(n) => {
                    if n == len {
                        // Everything asked was taken: nothing waits for room any more.
                        self.writable = None;
                    }
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => match guard.as_mut() {
                    Some(guard) => guard.clear_ready(),
                    None => {
                        let dup = self.stream().as_fd().try_clone_to_owned()?;
                        self.writable = Some(register(dup, Interest::WRITABLE)?);
                    }
                },
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

/// Registers a descriptor the value owns with the event loop.
fn register<T: AsFd + AsRawFd>(owner: T, interest: Interest) -> io::Result<AsyncFd<T>> {
    // SAFETY: `T` (a `TcpStream` or an `OwnedFd`) owns its descriptor and closes it only when
    // dropped, so it stays open and the same while the `AsyncFd` holds it.
    Ok(unsafe { AsyncFd::register_with_interest(owner, interest) }?)
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.io.poll_read_ready(cx))?;
            // SAFETY: `recv` writes at most `unfilled.len()` bytes into the slice and reports
            // how many; exactly those are then marked initialized and filled.
            let unfilled = unsafe { buf.unfilled_mut() };
            let room = unfilled.len();
            let read = guard.try_io(|io| {
                let n = unsafe {
                    libc::recv(
                        io.as_raw_fd(),
                        unfilled.as_mut_ptr().cast(),
                        unfilled.len(),
                        0,
                    )
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match read {
                Ok(Ok(n)) => {
                    if 0 < n && n < room {
                        // A short read emptied the socket (as tokio's own streams assume): the
                        // next read waits for the next event instead of trying and failing
                        // first, one `recv` less per request. The closed state is kept.
                        guard.clear_ready();
                    }
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => {}
            }
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .poll_write_with(cx, buf.len(), |mut s| s.write(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let len = bufs.iter().map(|b| b.len()).sum();
        self.get_mut()
            .poll_write_with(cx, len, |mut s| s.write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.stream().shutdown(std::net::Shutdown::Write))
    }
}

impl SocketOps for Socket {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        // The guard is dropped without clearing: the readiness stays for the read that follows.
        self.io.poll_read_ready(cx).map(|_| ())
    }

    fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.stream().set_nodelay(on)
    }

    fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.stream().peer_addr()
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.stream().local_addr()
    }

    fn poll_peer_closed(&self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let Ok(mut guard) = ready!(self.io.poll_read_ready(cx)) else {
                return Poll::Ready(());
            };
            let mut byte = [0u8; 1];
            match guard.try_io(|io| io.get_ref().peek(&mut byte)) {
                Ok(Ok(0)) | Ok(Err(_)) => return Poll::Ready(()),
                // Bytes wait to be read: the peer counts as there until they are read (the
                // connection loop reads them once the command it waits for completes).
                Ok(Ok(_)) => return Poll::Pending,
                Err(_would_block) => {}
            }
        }
    }
}

impl SocketOps for tokio::net::TcpStream {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        tokio::net::TcpStream::poll_read_ready(self, cx).map(|_| ())
    }

    fn set_nodelay(&self, on: bool) -> io::Result<()> {
        tokio::net::TcpStream::set_nodelay(self, on)
    }

    fn peer_addr(&self) -> io::Result<SocketAddr> {
        tokio::net::TcpStream::peer_addr(self)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        tokio::net::TcpStream::local_addr(self)
    }

    fn poll_peer_closed(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut byte = [0u8; 1];
        let mut buf = ReadBuf::new(&mut byte);
        match ready!(self.poll_peek(cx, &mut buf)) {
            Ok(0) | Err(_) => Poll::Ready(()),
            Ok(_) => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn pair() -> (Socket, tokio::net::TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (Socket::new(server).unwrap(), client)
    }

    #[tokio::test]
    async fn reads_writes_and_notices_the_peer_leaving() {
        let (mut server, mut client) = pair().await;
        client.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        server.write_all(b"pong").await.unwrap();
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"pong");
        drop(client);
        tokio::time::timeout(std::time::Duration::from_secs(5), peer_closed(&server))
            .await
            .expect("the peer's close is noticed");
    }

    #[tokio::test]
    async fn a_write_larger_than_the_send_buffer_waits_for_the_reader() {
        let (mut server, mut client) = pair().await;
        let reply = vec![7u8; 8 << 20];
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut chunk = vec![0u8; 64 << 10];
            while got.len() < 8 << 20 {
                let n = client.read(&mut chunk).await.unwrap();
                assert!(n > 0);
                got.extend_from_slice(&chunk[..n]);
            }
            got
        });
        server.write_all(&reply).await.unwrap();
        assert_eq!(reader.await.unwrap(), reply);
        assert!(
            server.writable.is_none(),
            "the write-side registration is dropped"
        );
    }

    #[tokio::test]
    async fn read_readiness_is_seen_without_reading_and_cleared_by_a_short_read() {
        let (mut server, mut client) = pair().await;
        let ready = |s: &Socket| {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            s.poll_read_ready(&mut cx).is_ready()
        };
        assert!(!ready(&server), "nothing has arrived");
        client.write_all(b"ping").await.unwrap();
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            std::future::poll_fn(|cx| server.poll_read_ready(cx)),
        )
        .await
        .expect("the bytes are seen");
        assert!(ready(&server), "looking does not clear the readiness");
        let mut got = [0u8; 16];
        let n = server.read(&mut got).await.unwrap();
        assert_eq!(&got[..n], b"ping");
        assert!(!ready(&server), "a short read emptied the socket");
    }

    #[tokio::test]
    async fn peer_closed_pends_while_bytes_wait() {
        let (server, mut client) = pair().await;
        client.write_all(b"x").await.unwrap();
        let waited =
            tokio::time::timeout(std::time::Duration::from_millis(100), peer_closed(&server)).await;
        assert!(
            waited.is_err(),
            "a connected peer with bytes pending is not 'closed'"
        );
    }
}
