//! `pubsub-fanout`: pub/sub fan-out throughput of a Redis-protocol server (Gradus or
//! redis-server): N subscribers on one channel, one publisher sending pipelined `PUBLISH`es of
//! a fixed-size payload; prints the messages delivered to subscribers per second.
//!
//! ```text
//! pubsub-fanout --port 6379 [--subscribers 100] [--size 64] [--pipeline 16] [--seconds 5]
//! ```
//!
//! Subscribers count bytes (every message has the same length), so the client spends almost
//! nothing per message. The publisher sends `--pipeline` commands, then reads their replies
//! before the next batch (flow control: a server cannot be flooded past what it acknowledges).
//! One warm-up second is not counted. Output: one line `delivered_per_s=… publishes_per_s=…`.

use gradus_bench::resp::encode_command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CHANNEL: &str = "fanout";

struct Args {
    host: String,
    port: u16,
    subscribers: usize,
    size: usize,
    pipeline: usize,
    seconds: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        host: "127.0.0.1".into(),
        port: 6379,
        subscribers: 100,
        size: 64,
        pipeline: 16,
        seconds: 5,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let num = || value.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--host" => args.host = value.clone(),
            "--port" => args.port = num()? as u16,
            "--subscribers" => args.subscribers = num()? as usize,
            "--size" => args.size = num()? as usize,
            "--pipeline" => args.pipeline = num()?.max(1) as usize,
            "--seconds" => args.seconds = num()?.max(1),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

fn command(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_command(&mut out, parts);
    out
}

/// The exact bytes of one delivered message (RESP2).
fn message_len(size: usize) -> usize {
    format!(
        "*3\r\n$7\r\nmessage\r\n${}\r\n{CHANNEL}\r\n${size}\r\n",
        CHANNEL.len()
    )
    .len()
        + size
        + 2
}

async fn subscriber(addr: String, bytes: Arc<AtomicU64>) -> std::io::Result<()> {
    let mut s = TcpStream::connect(&addr).await?;
    s.set_nodelay(true)?;
    s.write_all(&command(&[b"SUBSCRIBE", CHANNEL.as_bytes()]))
        .await?;
    let confirmation = format!(
        "*3\r\n$9\r\nsubscribe\r\n${}\r\n{CHANNEL}\r\n:1\r\n",
        CHANNEL.len()
    );
    let mut head = vec![0u8; confirmation.len()];
    s.read_exact(&mut head).await?;
    if head != confirmation.as_bytes() {
        return Err(std::io::Error::other("unexpected SUBSCRIBE reply"));
    }
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        bytes.fetch_add(n as u64, Ordering::Relaxed);
    }
}

async fn numsub(addr: &str) -> std::io::Result<usize> {
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(&command(&[b"PUBSUB", b"NUMSUB", CHANNEL.as_bytes()]))
        .await?;
    let mut buf = vec![0u8; 256];
    let n = s.read(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf[..n]);
    Ok(text
        .rsplit(':')
        .next()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0))
}

async fn run(args: Args) -> std::io::Result<()> {
    let addr = format!("{}:{}", args.host, args.port);
    let bytes = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.subscribers {
        tasks.push(tokio::spawn(subscriber(addr.clone(), bytes.clone())));
    }
    let ready = Instant::now();
    while numsub(&addr).await? < args.subscribers {
        if ready.elapsed() > Duration::from_secs(10) {
            return Err(std::io::Error::other("subscribers did not all subscribe"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let payload = vec![b'x'; args.size];
    let one = command(&[b"PUBLISH", CHANNEL.as_bytes(), &payload]);
    let batch: Vec<u8> = one.repeat(args.pipeline);
    let mut publisher = TcpStream::connect(&addr).await?;
    publisher.set_nodelay(true)?;
    let mut rbuf = vec![0u8; 64 * 1024];
    let msg_len = message_len(args.size) as u64;
    let warmup = Duration::from_secs(1);
    let measure = Duration::from_secs(args.seconds);
    let start = Instant::now();
    let mut published_at_mark = 0u64;
    let mut bytes_at_mark = 0u64;
    let mut mark: Option<Instant> = None;
    let mut published = 0u64;
    loop {
        publisher.write_all(&batch).await?;
        // Every reply is one `:N\r\n` line: count line ends until the batch is acknowledged.
        let mut lines = 0;
        while lines < args.pipeline {
            let n = publisher.read(&mut rbuf).await?;
            if n == 0 {
                return Err(std::io::Error::other("publisher connection closed"));
            }
            lines += rbuf[..n].iter().filter(|&&b| b == b'\n').count();
        }
        published += args.pipeline as u64;
        let now = Instant::now();
        match mark {
            None if now - start >= warmup => {
                mark = Some(now);
                published_at_mark = published;
                bytes_at_mark = bytes.load(Ordering::Relaxed);
            }
            Some(m) if now - m >= measure => {
                let secs = (now - m).as_secs_f64();
                let delivered = (bytes.load(Ordering::Relaxed) - bytes_at_mark) / msg_len;
                println!(
                    "delivered_per_s={:.0} publishes_per_s={:.0}",
                    delivered as f64 / secs,
                    (published - published_at_mark) as f64 / secs
                );
                break;
            }
            _ => {}
        }
    }
    for t in tasks {
        t.abort();
    }
    Ok(())
}

fn main() {
    gradus_bench::tool::main("pubsub-fanout", parse_args, run);
}
