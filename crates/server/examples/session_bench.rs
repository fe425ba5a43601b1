//! Session page cost: Gradus' native `SESSION.OPEN` + `SESSION.CLOSE` (two round trips per page)
//! versus the phpredis sequence on redis-server (`SET lock NX PX`, `GET`, `SETEX`, `EVALSHA`
//! unlock: four round trips), plus lock hand-over latency under contention versus 20 ms polling.
//! For reference it also runs the phpredis sequence against Gradus (what a client that keeps the
//! phpredis sequence gets there); that row is not part of the ratio.
//!
//! ```text
//! cargo run --release -p gradus-server --example session_bench -- \
//!     --gradus 127.0.0.1:6390 --redis 127.0.0.1:6391 --users 50 --pages 200 --size 4096
//! ```
//! Both servers must already run (scripts/bench-sessions.sh starts them). Output: Markdown.
//! Closed loop, no think time; latency per page measured from the first request to the last reply.

use bytes::BytesMut;
use gradus_proto::{parse_frame, Frame};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

struct Conn {
    stream: TcpStream,
    buf: BytesMut,
}

impl Conn {
    fn new(addr: &str) -> Conn {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        Conn {
            stream,
            buf: BytesMut::with_capacity(16 * 1024),
        }
    }

    fn call(&mut self, args: &[&[u8]]) -> Frame {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.stream.write_all(&out).expect("write");
        loop {
            if let Some(f) = parse_frame(&mut self.buf).expect("reply") {
                return f;
            }
            let mut chunk = [0u8; 16384];
            let n = self.stream.read(&mut chunk).expect("read");
            assert!(n > 0, "server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

const UNLOCK: &str =
    "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";

/// Loads the unlock script into `addr`'s script cache; its digest.
fn load_unlock(addr: &str) -> Vec<u8> {
    match Conn::new(addr).call(&[b"SCRIPT", b"LOAD", UNLOCK.as_bytes()]) {
        Frame::Bulk(b) => b.to_vec(),
        other => panic!("SCRIPT LOAD on {addr}: {other:?}"),
    }
}

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx] as f64 / 1000.0
}

/// One page on Gradus: lock+read, write+unlock.
fn gradus_page(c: &mut Conn, sid: &[u8], data: &[u8]) {
    let Frame::Array(reply) = c.call(&[b"SESSION.OPEN", sid, b"WAIT", b"10000"]) else {
        panic!("SESSION.OPEN failed")
    };
    let Frame::Integer(token) = reply[0] else {
        panic!("no token")
    };
    let token = token.to_string();
    let r = c.call(&[
        b"SESSION.CLOSE",
        sid,
        token.as_bytes(),
        b"DATA",
        data,
        b"TTL",
        b"1440",
    ]);
    assert!(!r.is_error(), "{r:?}");
}

/// One page the phpredis way on Redis: poll SET NX PX every 20 ms, GET, SETEX, EVALSHA unlock.
fn redis_page(c: &mut Conn, sid: &[u8], data: &[u8], secret: &[u8], sha: &[u8]) {
    let lock = [sid, b"_LOCK"].concat();
    loop {
        match c.call(&[b"SET", &lock, secret, b"NX", b"PX", b"30000"]) {
            Frame::Simple(_) => break,
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    c.call(&[b"GET", sid]);
    c.call(&[b"SETEX", sid, b"1440", data]);
    let r = c.call(&[b"EVALSHA", sha, b"1", &lock, secret]);
    assert!(!r.is_error(), "{r:?}");
}

fn run_pages(
    users: usize,
    pages: usize,
    page: impl Fn(&mut Conn, usize) + Sync,
    addr: &str,
) -> (Vec<u64>, f64) {
    let started = Instant::now();
    let mut all: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..users)
            .map(|u| {
                let page = &page;
                s.spawn(move || {
                    let mut c = Conn::new(addr);
                    let mut lat = Vec::with_capacity(pages);
                    for _ in 0..pages {
                        let t = Instant::now();
                        page(&mut c, u);
                        lat.push(t.elapsed().as_micros() as u64);
                    }
                    lat
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let secs = started.elapsed().as_secs_f64();
    all.sort_unstable();
    let rate = all.len() as f64 / secs;
    (all, rate)
}

fn row(label: &str, lat: &[u64], rate: f64) -> String {
    let avg = lat.iter().sum::<u64>() as f64 / lat.len().max(1) as f64 / 1000.0;
    format!(
        "| {label} | {rate:.0} | {avg:.3} | {:.3} | {:.3} | {:.3} |",
        percentile(lat, 0.5),
        percentile(lat, 0.9),
        percentile(lat, 0.99)
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let gradus = arg(&args, "--gradus", "127.0.0.1:6390");
    let redis = arg(&args, "--redis", "127.0.0.1:6391");
    let users: usize = arg(&args, "--users", "50").parse().expect("--users");
    let pages: usize = arg(&args, "--pages", "200").parse().expect("--pages");
    let size: usize = arg(&args, "--size", "4096").parse().expect("--size");
    let data = vec![b's'; size];
    let sha = load_unlock(&redis);

    println!("## Uncontended: {users} users, {pages} pages each, {size}-byte sessions (one session per user)\n");
    println!("| store | pages/s | avg ms | P50 ms | P90 ms | P99 ms |");
    println!("|---|---|---|---|---|---|");
    let (g, g_rate) = run_pages(
        users,
        pages,
        |c, u| gradus_page(c, format!("sess:{u}").as_bytes(), &data),
        &gradus,
    );
    println!(
        "{}",
        row(
            "Gradus SESSION.OPEN + SESSION.CLOSE (2 round trips)",
            &g,
            g_rate
        )
    );
    // The phpredis sequence, on `addr` with the unlock script's digest `sha` there.
    let phpredis = |addr: &str, sha: &[u8], label: &str| {
        let (lat, rate) = run_pages(
            users,
            pages,
            |c, u| {
                redis_page(
                    c,
                    format!("PHPREDIS_SESSION:{u}").as_bytes(),
                    &data,
                    format!("secret{u}").as_bytes(),
                    sha,
                )
            },
            addr,
        );
        println!("{}", row(label, &lat, rate));
        lat
    };
    let r = phpredis(
        &redis,
        &sha,
        "redis-server, phpredis sequence (4 round trips)",
    );
    // The same sequence against Gradus: what an unchanged phpredis client gets there (not part
    // of the ratio).
    phpredis(
        &gradus,
        &load_unlock(&gradus),
        "Gradus, the same phpredis sequence (4 round trips; not in the ratio)",
    );
    println!(
        "\nPage P90 ratio Gradus / Redis: {:.2}\n",
        percentile(&g, 0.9) / percentile(&r, 0.9).max(0.001)
    );

    // Contended: 8 parallel requests on ONE session; each holds the lock for 2 ms of "work".
    let contenders = 8;
    let rounds = 40;
    println!("## Contended: {contenders} parallel requests on one session, 2 ms of work under the lock\n");
    println!("Hand-over latency = from the holder's unlock reply to the next holder's grant, per hand-over.\n");
    println!("| store | hand-overs | P50 ms | P99 ms | max ms |");
    println!("|---|---|---|---|---|");
    for store in ["gradus", "redis"] {
        let addr = if store == "gradus" { &gradus } else { &redis };
        let events = std::sync::Mutex::new(Vec::<(Instant, Instant)>::new());
        std::thread::scope(|s| {
            for u in 0..contenders {
                let (events, data, sha) = (&events, &data, &sha);
                s.spawn(move || {
                    let mut c = Conn::new(addr);
                    let secret = format!("c{u}");
                    for _ in 0..rounds {
                        let got;
                        if store == "gradus" {
                            let Frame::Array(reply) =
                                c.call(&[b"SESSION.OPEN", b"hot", b"WAIT", b"30000"])
                            else {
                                panic!()
                            };
                            let Frame::Integer(token) = reply[0] else {
                                panic!()
                            };
                            got = Instant::now();
                            std::thread::sleep(Duration::from_millis(2));
                            let t = token.to_string();
                            c.call(&[b"SESSION.CLOSE", b"hot", t.as_bytes(), b"DATA", data]);
                        } else {
                            loop {
                                match c.call(&[
                                    b"SET",
                                    b"hot_LOCK",
                                    secret.as_bytes(),
                                    b"NX",
                                    b"PX",
                                    b"30000",
                                ]) {
                                    Frame::Simple(_) => break,
                                    _ => std::thread::sleep(Duration::from_millis(20)),
                                }
                            }
                            got = Instant::now();
                            c.call(&[b"GET", b"hot"]);
                            std::thread::sleep(Duration::from_millis(2));
                            c.call(&[b"SETEX", b"hot", b"1440", data]);
                            c.call(&[b"EVALSHA", sha, b"1", b"hot_LOCK", secret.as_bytes()]);
                        }
                        let released = Instant::now();
                        events.lock().unwrap().push((got, released));
                    }
                });
            }
        });
        let mut ev = events.into_inner().unwrap();
        ev.sort_by_key(|e| e.0);
        let mut gaps: Vec<u64> = ev
            .windows(2)
            .map(|w| w[1].0.saturating_duration_since(w[0].1).as_micros() as u64)
            .collect();
        gaps.sort_unstable();
        println!(
            "| {} | {} | {:.3} | {:.3} | {:.3} |",
            if store == "gradus" {
                "Gradus (server-side FIFO wait)"
            } else {
                "redis-server (SET NX polling every 20 ms)"
            },
            gaps.len(),
            percentile(&gaps, 0.5),
            percentile(&gaps, 0.99),
            gaps.last().copied().unwrap_or(0) as f64 / 1000.0
        );
    }
}
