//! Session page cost: Gradus' native `SESSION.OPEN` + `SESSION.CLOSE` (two round trips per page)
//! versus the phpredis sequence on redis-server (`SET lock NX PX`, `GET`, `SETEX`, `EVALSHA`
//! unlock: four round trips), plus lock hand-over latency under contention versus 20 ms polling.
//! For reference it also runs the phpredis sequence against Gradus (what a client that keeps the
//! phpredis sequence gets there); that row is not part of the ratio.
//!
//! ```text
//! cargo run --release -p gradus-server --example session_bench -- \
//!     --gradus 127.0.0.1:6390 --redis 127.0.0.1:6391 --users 50 --pages 200 --size 4096 --slices 5
//! ```
//! Both servers must already run (scripts/bench-sessions.sh starts them). Output: Markdown.
//! Closed loop, no think time; latency per page measured from the first request to the last reply.
//!
//! The uncontended pages run in `--slices` slices (default 5). Each slice runs Gradus, then
//! redis-server (the other way round in odd slices), then the reference row, so the stores take
//! turns a fraction of a second apart: on a shared machine whose speed drifts by tens of percent
//! over seconds, measuring one store for a whole second and then the other made the drift the
//! largest term in a run's ratio. `--slices 1` measures each store in one go.

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

/// The phpredis sequence as a page, given the unlock script's digest on the server it runs against.
fn phpredis<'a>(data: &'a [u8], sha: &'a [u8]) -> impl Fn(&mut Conn, usize) + Sync + 'a {
    move |c, u| {
        redis_page(
            c,
            format!("PHPREDIS_SESSION:{u}").as_bytes(),
            data,
            format!("secret{u}").as_bytes(),
            sha,
        )
    }
}

/// Runs `pages` pages on each of `users` connections to `addr`, in parallel, all connections
/// starting together. Returns the latency (µs) of every page that started in the steady part —
/// from when the last connection started its first page to when the first one finished its
/// last page — and that part's length. Pages are chosen by when they start, not end, so long
/// pages are not the likelier to be left out. (With fewer than `users` connections busy, pages
/// are faster; counting such ramps would flatter the store whose pages are shorter, the more
/// so the more slices a run has.)
fn run_pages(
    users: usize,
    pages: usize,
    page: &(impl Fn(&mut Conn, usize) + Sync),
    addr: &str,
) -> Slice {
    let go = std::sync::Barrier::new(users);
    // Per connection: each page's start and end.
    let runs: Vec<Vec<(Instant, Instant)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..users)
            .map(|u| {
                let go = &go;
                s.spawn(move || {
                    let mut c = Conn::new(addr);
                    let mut spans = Vec::with_capacity(pages);
                    go.wait();
                    for _ in 0..pages {
                        let t = Instant::now();
                        page(&mut c, u);
                        spans.push((t, Instant::now()));
                    }
                    spans
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let steady_from = runs.iter().map(|r| r[0].0).max().expect("users, pages > 0");
    let steady_to = runs
        .iter()
        .map(|r| r[r.len() - 1].1)
        .min()
        .expect("users, pages > 0");
    let all = users * pages;
    let lat: Vec<u64> = runs
        .into_iter()
        .flatten()
        .filter(|&(start, _)| start >= steady_from && start < steady_to)
        .map(|(start, end)| (end - start).as_micros() as u64)
        .collect();
    Slice {
        ramp: all - lat.len(),
        lat,
        steady: steady_to.saturating_duration_since(steady_from),
    }
}

/// What [`run_pages`] measured.
struct Slice {
    lat: Vec<u64>,
    steady: Duration,
    /// Pages left out (started outside the steady part).
    ramp: usize,
}

/// Pages measured for one store over all slices: latencies (µs), the time they took, and how
/// many ramp pages were left out.
#[derive(Default)]
struct Measured {
    lat: Vec<u64>,
    busy: Duration,
    ramp: usize,
}

impl Measured {
    fn add(&mut self, slice: Slice) {
        self.lat.extend(slice.lat);
        self.busy += slice.steady;
        self.ramp += slice.ramp;
    }

    /// Sorts the latencies; returns them, the pages per second and the share left out.
    fn finish(mut self) -> (Vec<u64>, f64, f64) {
        self.lat.sort_unstable();
        let rate = self.lat.len() as f64 / self.busy.as_secs_f64().max(1e-9);
        let left_out = self.ramp as f64 / (self.ramp + self.lat.len()).max(1) as f64;
        (self.lat, rate, left_out)
    }
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
    let slices: usize = arg(&args, "--slices", "5").parse().expect("--slices");
    assert!(
        slices >= 1 && pages >= slices,
        "--slices must be between 1 and --pages"
    );
    let sha = load_unlock(&redis);
    let gradus_sha = load_unlock(&gradus);

    println!("## Uncontended: {users} users, {pages} pages each, {size}-byte sessions (one session per user)\n");
    println!(
        "The pages run in {slices} slices; each slice runs every store in turn (Gradus and redis-server \
         swap places from one slice to the next), so a change in the machine's speed during the run \
         reaches both stores alike.\n"
    );
    let native = |c: &mut Conn, u: usize| gradus_page(c, format!("sess:{u}").as_bytes(), &data);
    let (on_redis, on_gradus) = (phpredis(&data, &sha), phpredis(&data, &gradus_sha));
    let (mut g, mut r, mut p) = (
        Measured::default(),
        Measured::default(),
        Measured::default(),
    );
    for slice in 0..slices {
        let n = pages / slices + usize::from(slice < pages % slices);
        if slice % 2 == 0 {
            g.add(run_pages(users, n, &native, &gradus));
            r.add(run_pages(users, n, &on_redis, &redis));
        } else {
            r.add(run_pages(users, n, &on_redis, &redis));
            g.add(run_pages(users, n, &native, &gradus));
        }
        // The same sequence against Gradus: what an unchanged phpredis client gets there (not
        // part of the ratio).
        p.add(run_pages(users, n, &on_gradus, &gradus));
    }
    let (g, g_rate, g_ramp) = g.finish();
    let (r, r_rate, r_ramp) = r.finish();
    let (p, p_rate, _) = p.finish();
    println!("| store | pages/s | avg ms | P50 ms | P90 ms | P99 ms |");
    println!("|---|---|---|---|---|---|");
    for (label, lat, rate) in [
        (
            "Gradus SESSION.OPEN + SESSION.CLOSE (2 round trips)",
            &g,
            g_rate,
        ),
        (
            "redis-server, phpredis sequence (4 round trips)",
            &r,
            r_rate,
        ),
        (
            "Gradus, the same phpredis sequence (4 round trips; not in the ratio)",
            &p,
            p_rate,
        ),
    ] {
        println!("{}", row(label, lat, rate));
    }
    println!(
        "\nRamp pages left out: Gradus {:.0} %, redis-server {:.0} %.",
        g_ramp * 100.0,
        r_ramp * 100.0
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
