//! A small memcached-protocol load generator: `get`/`set` of fixed-size values over N
//! connections, closed loop (each connection sends its next request when the previous reply has
//! arrived), uniform random keys over a preloaded keyspace. Runs every target named on the
//! command line in turn, `--rounds` times, and prints a Markdown table (throughput and latency
//! percentiles per target and round).
//!
//! ```text
//! cargo run --release -p gradus-server --example memcache_bench -- \
//!     --target gradus=127.0.0.1:11311 --target memcached=127.0.0.1:11411 \
//!     --connections 50 --value 1024 --keys 10000 --get-ratio 0.9 --secs 10 --rounds 3
//! ```
//! The servers must already run (scripts/bench-memcached.sh starts them). Latency is measured
//! from sending a request to the end of its reply.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

/// xorshift64*: cheap per-connection randomness.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Read one complete reply for `get` (VALUE … END) or `set` (one line) into `buf`.
async fn read_reply(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    is_get: bool,
) -> std::io::Result<()> {
    buf.clear();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(done) = complete(buf, is_get) {
            if done {
                return Ok(());
            }
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::other("server closed the connection"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Some(true) once `buf` holds the whole reply.
fn complete(buf: &[u8], is_get: bool) -> Option<bool> {
    let line_end = buf.windows(2).position(|w| w == b"\r\n")?;
    if !is_get || buf.starts_with(b"END\r\n") {
        return Some(true);
    }
    let header = std::str::from_utf8(&buf[..line_end]).ok()?;
    let len: usize = header.split(' ').nth(3)?.parse().ok()?;
    // VALUE line, data, CRLF, END CRLF.
    Some(buf.len() >= line_end + 2 + len + 2 + 5)
}

struct Round {
    ops: u64,
    gets: u64,
    hits: u64,
    secs: f64,
    latencies_us: Vec<u32>,
}

async fn connection(
    addr: String,
    keys: u64,
    value: Arc<Vec<u8>>,
    get_ratio: f64,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> (u64, u64, u64, Vec<u32>) {
    let mut stream = TcpStream::connect(&addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let mut rng = Rng(seed | 1);
    let mut buf = Vec::with_capacity(4096);
    let mut req = Vec::with_capacity(value.len() + 64);
    let (mut ops, mut gets, mut hits) = (0u64, 0u64, 0u64);
    let mut lat = Vec::with_capacity(1 << 16);
    let threshold = (get_ratio * u64::MAX as f64) as u64;
    while !stop.load(Ordering::Relaxed) {
        let key = rng.next() % keys;
        let is_get = rng.next() < threshold;
        req.clear();
        if is_get {
            req.extend_from_slice(format!("get key:{key}\r\n").as_bytes());
        } else {
            req.extend_from_slice(format!("set key:{key} 0 0 {}\r\n", value.len()).as_bytes());
            req.extend_from_slice(&value);
            req.extend_from_slice(b"\r\n");
        }
        let started = Instant::now();
        stream.write_all(&req).await.expect("write");
        read_reply(&mut stream, &mut buf, is_get)
            .await
            .expect("reply");
        lat.push(started.elapsed().as_micros().min(u32::MAX as u128) as u32);
        ops += 1;
        if is_get {
            gets += 1;
            hits += u64::from(buf.starts_with(b"VALUE"));
        } else {
            assert!(
                buf.starts_with(b"STORED"),
                "set failed: {:?}",
                String::from_utf8_lossy(&buf)
            );
        }
    }
    (ops, gets, hits, lat)
}

async fn preload(addr: &str, keys: u64, value: &[u8]) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let mut buf = Vec::new();
    for chunk in (0..keys).collect::<Vec<_>>().chunks(100) {
        let mut req = Vec::new();
        for key in chunk {
            req.extend_from_slice(
                format!("set key:{key} 0 0 {} noreply\r\n", value.len()).as_bytes(),
            );
            req.extend_from_slice(value);
            req.extend_from_slice(b"\r\n");
        }
        stream.write_all(&req).await.expect("preload");
    }
    stream.write_all(b"mn\r\n").await.expect("preload");
    read_reply(&mut stream, &mut buf, false)
        .await
        .expect("preload");
    assert!(
        buf.starts_with(b"MN"),
        "preload: {:?}",
        String::from_utf8_lossy(&buf)
    );
}

async fn run_round(
    addr: &str,
    conns: usize,
    keys: u64,
    value: Arc<Vec<u8>>,
    get_ratio: f64,
    secs: f64,
) -> Round {
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..conns)
        .map(|i| {
            tokio::spawn(connection(
                addr.to_string(),
                keys,
                value.clone(),
                get_ratio,
                0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1),
                stop.clone(),
            ))
        })
        .collect();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut round = Round {
        ops: 0,
        gets: 0,
        hits: 0,
        secs: 0.0,
        latencies_us: Vec::new(),
    };
    for t in tasks {
        let (ops, gets, hits, lat) = t.await.expect("connection task");
        round.ops += ops;
        round.gets += gets;
        round.hits += hits;
        round.latencies_us.extend(lat);
    }
    round.secs = started.elapsed().as_secs_f64();
    round.latencies_us.sort_unstable();
    round
}

fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    f64::from(sorted[i]) / 1000.0
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let targets: Vec<(String, String)> = args
        .windows(2)
        .filter(|w| w[0] == "--target")
        .map(|w| {
            let (name, addr) = w[1].split_once('=').expect("--target NAME=HOST:PORT");
            (name.to_string(), addr.to_string())
        })
        .collect();
    assert!(
        !targets.is_empty(),
        "name at least one --target NAME=HOST:PORT"
    );
    let conns: usize = arg(&args, "--connections", "50")
        .parse()
        .expect("--connections");
    let size: usize = arg(&args, "--value", "1024").parse().expect("--value");
    let keys: u64 = arg(&args, "--keys", "10000").parse().expect("--keys");
    let get_ratio: f64 = arg(&args, "--get-ratio", "0.9")
        .parse()
        .expect("--get-ratio");
    let secs: f64 = arg(&args, "--secs", "10").parse().expect("--secs");
    let rounds: usize = arg(&args, "--rounds", "3").parse().expect("--rounds");
    let threads: usize = arg(&args, "--client-threads", "2")
        .parse()
        .expect("--client-threads");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("runtime");
    let value: Arc<Vec<u8>> = Arc::new((0..size).map(|i| b'a' + (i % 26) as u8).collect());
    runtime.block_on(async {
        for (_, addr) in &targets {
            preload(addr, keys, &value).await;
        }
        println!("| round | target | ops/s | hit rate | p50 ms | p90 ms | p99 ms | p99.9 ms |");
        println!("|---|---|---:|---:|---:|---:|---:|---:|");
        let mut totals = vec![(0u64, 0f64); targets.len()];
        for round in 1..=rounds {
            for (i, (name, addr)) in targets.iter().enumerate() {
                let r = run_round(addr, conns, keys, value.clone(), get_ratio, secs).await;
                totals[i].0 += r.ops;
                totals[i].1 += r.secs;
                println!(
                    "| {round} | {name} | {:.0} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
                    r.ops as f64 / r.secs,
                    r.hits as f64 / r.gets.max(1) as f64,
                    pct(&r.latencies_us, 0.5),
                    pct(&r.latencies_us, 0.9),
                    pct(&r.latencies_us, 0.99),
                    pct(&r.latencies_us, 0.999),
                );
            }
        }
        println!();
        println!("| target | mean ops/s over {rounds} rounds | ratio to the last target |");
        println!("|---|---:|---:|");
        let last = totals.last().map_or(1.0, |(ops, s)| *ops as f64 / s);
        for ((name, _), (ops, s)) in targets.iter().zip(&totals) {
            let mean = *ops as f64 / s;
            println!("| {name} | {mean:.0} | {:.2}× |", mean / last);
        }
    });
}
