//! `write-load`: acknowledged-write throughput and latency of a Redis-protocol server (Gradus or
//! redis-server), for comparing durability degrees and replication: N connections each send one
//! `SET key value` at a time (a random key of `--keys`), optionally followed in the same round
//! trip by `WAIT numreplicas 0` (redis-server's way to wait for replicas), and wait for the
//! replies before the next one.
//!
//! ```text
//! write-load --port 6379 [--connections 50] [--size 1024] [--keys 100000] [--seconds 5]
//!            [--wait N] [--warmup 1]
//! ```
//!
//! Every reply is one line (`+OK`, `:n`, or an error): the client counts line ends, so it spends
//! almost nothing per reply. An error reply, or a `WAIT` that answers fewer than N replicas, is
//! counted and printed, never hidden. One warm-up second is not counted. Output: one line
//! `ops_per_s=… p50_us=… p99_us=… errors=… short_waits=…`.

use gradus_bench::resp::encode_command;
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Args {
    host: String,
    port: u16,
    connections: usize,
    size: usize,
    keys: u64,
    seconds: u64,
    warmup: u64,
    wait: Option<u64>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        host: "127.0.0.1".into(),
        port: 6379,
        connections: 50,
        size: 1024,
        keys: 100_000,
        seconds: 5,
        warmup: 1,
        wait: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let num = || value.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--host" => args.host = value.clone(),
            "--port" => args.port = num()? as u16,
            "--connections" => args.connections = num()?.max(1) as usize,
            "--size" => args.size = num()? as usize,
            "--keys" => args.keys = num()?.max(1),
            "--seconds" => args.seconds = num()?.max(1),
            "--warmup" => args.warmup = num()?,
            "--wait" => args.wait = Some(num()?),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

/// What the connections measured, shared on the one client thread.
struct Tally {
    latency: Histogram<u64>,
    ops: u64,
    errors: u64,
    short_waits: u64,
    first_error: Option<String>,
    counting: bool,
}

/// Check the reply lines of one operation: errors and short WAITs are counted.
fn check(lines: &[u8], wait: Option<u64>, tally: &mut Tally) {
    for line in lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        match line.first() {
            Some(b'-') => {
                tally.errors += 1;
                if tally.first_error.is_none() {
                    tally.first_error = Some(String::from_utf8_lossy(line).into_owned());
                }
            }
            Some(b':') => {
                let n: u64 = std::str::from_utf8(&line[1..])
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                if wait.is_some_and(|w| n < w) {
                    tally.short_waits += 1;
                }
            }
            _ => {}
        }
    }
}

async fn connection(
    addr: String,
    args: Rc<Args>,
    seed: u64,
    tally: Rc<RefCell<Tally>>,
    until: Instant,
) -> std::io::Result<()> {
    let mut s = TcpStream::connect(&addr).await?;
    s.set_nodelay(true)?;
    let mut rng = SmallRng::seed_from_u64(seed);
    let value = vec![b'v'; args.size];
    let wait = args.wait.map(|n| n.to_string());
    let per_op = 1 + usize::from(wait.is_some());
    let mut out = Vec::with_capacity(args.size + 128);
    let mut replies = Vec::with_capacity(256);
    let mut buf = vec![0u8; 4096];
    while Instant::now() < until {
        out.clear();
        let key = format!("key:{:012}", rng.gen_range(0..args.keys));
        encode_command(&mut out, &[b"SET", key.as_bytes(), &value]);
        if let Some(n) = &wait {
            encode_command(&mut out, &[b"WAIT", n.as_bytes(), b"0"]);
        }
        let sent = Instant::now();
        s.write_all(&out).await?;
        replies.clear();
        while replies.iter().filter(|&&b| b == b'\n').count() < per_op {
            let n = s.read(&mut buf).await?;
            if n == 0 {
                return Err(std::io::Error::other("the server closed the connection"));
            }
            replies.extend_from_slice(&buf[..n]);
        }
        let micros = sent.elapsed().as_micros() as u64;
        let mut t = tally.borrow_mut();
        if t.counting {
            t.ops += 1;
            let _ = t.latency.record(micros.max(1));
            check(&replies, args.wait, &mut t);
        }
    }
    Ok(())
}

async fn run(args: Args) -> std::io::Result<()> {
    let addr = format!("{}:{}", args.host, args.port);
    let args = Rc::new(args);
    let tally = Rc::new(RefCell::new(Tally {
        latency: Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds"),
        ops: 0,
        errors: 0,
        short_waits: 0,
        first_error: None,
        counting: false,
    }));
    let start = Instant::now();
    let measured_from = start + Duration::from_secs(args.warmup);
    let until = measured_from + Duration::from_secs(args.seconds);
    let local = tokio::task::LocalSet::new();
    let mut tasks = Vec::new();
    for i in 0..args.connections {
        tasks.push(local.spawn_local(connection(
            addr.clone(),
            args.clone(),
            i as u64 + 1,
            tally.clone(),
            until,
        )));
    }
    let flip = tally.clone();
    local
        .run_until(async move {
            tokio::time::sleep_until(measured_from.into()).await;
            flip.borrow_mut().counting = true;
            for t in tasks {
                t.await.map_err(std::io::Error::other)??;
            }
            Ok::<(), std::io::Error>(())
        })
        .await?;
    let secs = (Instant::now() - measured_from).as_secs_f64();
    let t = tally.borrow();
    println!(
        "ops_per_s={:.0} p50_us={} p99_us={} errors={} short_waits={}",
        t.ops as f64 / secs,
        t.latency.value_at_quantile(0.5),
        t.latency.value_at_quantile(0.99),
        t.errors,
        t.short_waits
    );
    if let Some(e) = &t.first_error {
        eprintln!("write-load: first error reply: {e}");
    }
    Ok(())
}

fn main() {
    gradus_bench::tool::main("write-load", parse_args, run);
}
