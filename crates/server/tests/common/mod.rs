//! Shared by the in-process integration tests: start the real server on an OS-chosen port in its
//! own runtime thread, and a minimal raw-RESP connection to talk to it.

#![allow(dead_code)] // each test binary uses a different subset

use bytes::BytesMut;
use gradus_proto::{parse_frame, Frame};
use gradus_server::state::Shared;
use gradus_server::{Config, Server};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

/// The embedded defaults on port 0 with two workers; callers adjust the rest.
pub fn test_config() -> Config {
    let mut config = Config::embedded();
    config.port = 0;
    // No fixed memcached port: tests run in parallel.
    config.memcached_port = 0;
    config.threads = 2;
    config
}

/// Run a server with `config` in a background thread. Returns its port, its shared state, and the
/// thread, which ends after SHUTDOWN (drop the shared state first to release the data directory).
pub fn start(config: Config) -> (u16, Arc<Shared>, std::thread::JoinHandle<()>) {
    start_from(config, None)
}

/// [`start`], as if started with `--config config_file` (CONFIG REWRITE writes that file).
pub fn start_from(
    config: Config,
    config_file: Option<std::path::PathBuf>,
) -> (u16, Arc<Shared>, std::thread::JoinHandle<()>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let server = Server::bind(config, config_file, false).await.unwrap();
            tx.send((server.local_port(), server.shared())).unwrap();
            server.run().await.unwrap();
        });
    });
    let (port, shared) = rx.recv().unwrap();
    (port, shared, thread)
}

/// One client connection speaking raw RESP2.
pub struct Conn {
    pub stream: TcpStream,
    buf: BytesMut,
}

impl Conn {
    pub fn new(port: u16) -> Self {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        Conn {
            stream,
            buf: BytesMut::new(),
        }
    }

    pub fn send(&mut self, args: &[&str]) {
        let mut out = format!("*{}\r\n", args.len());
        for a in args {
            out.push_str(&format!("${}\r\n{}\r\n", a.len(), a));
        }
        self.stream.write_all(out.as_bytes()).unwrap();
    }

    /// The next reply, or None when the server closed the connection.
    pub fn try_read(&mut self) -> Option<Frame> {
        loop {
            if let Some(f) = parse_frame(&mut self.buf).unwrap() {
                return Some(f);
            }
            let mut chunk = [0u8; 65536];
            let n = self.stream.read(&mut chunk).unwrap();
            if n == 0 {
                return None;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    pub fn read(&mut self) -> Frame {
        self.try_read().expect("server closed the connection")
    }

    pub fn call(&mut self, args: &[&str]) -> Frame {
        self.send(args);
        self.read()
    }

    /// SHUTDOWN: the server closes the connection without a reply.
    pub fn shutdown(&mut self) {
        self.send(&["SHUTDOWN"]);
        assert_eq!(self.try_read(), None, "SHUTDOWN must close without a reply");
    }
}
