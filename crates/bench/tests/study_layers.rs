//! The study's measurement options end to end: the session and cache layers on separate
//! targets (each sees only its own traffic), bytes on the wire in the result, client-side
//! compression and the relay's round-trip delay, and `--ajax-ratio 0` on every target kind.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::{on_path, out_dir, u, Cleanup};

fn bench(name: &str, args: &[&str]) -> Value {
    let (code, json, stderr) = common::bench_within(name, args, Duration::from_secs(90));
    assert_eq!(code, 0, "{name}: exit {code}, stderr: {stderr}");
    let json = json.expect("a result file");
    assert_eq!(json["partial"], false, "{name}: {}", json["partial_reason"]);
    json
}

/// A redis-server without persistence on a free port, stopped on drop.
struct Redis {
    child: Child,
    addr: String,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_redis(dir: &std::path::Path) -> Redis {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    drop(listener);
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            dir.to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-server");
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    Redis { child, addr }
}

/// `KEYS pattern` on `addr`, answered as a list of names (enough RESP for a flat array).
fn keys(addr: &str, pattern: &str) -> Vec<String> {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let req = format!("*2\r\n$4\r\nKEYS\r\n${}\r\n{pattern}\r\n", pattern.len());
    s.write_all(req.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        let n = s.read(&mut chunk).unwrap();
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        let mut lines = text.split("\r\n");
        let Some(head) = lines.next() else { continue };
        let Some(count) = head.strip_prefix('*').and_then(|c| c.parse::<usize>().ok()) else {
            panic!("unexpected KEYS reply {head:?}");
        };
        let names: Vec<String> = lines
            .filter(|l| !l.starts_with('$') && !l.is_empty())
            .map(str::to_string)
            .collect();
        if names.len() >= count {
            return names[..count].to_vec();
        }
    }
}

#[test]
fn separate_session_and_cache_targets_each_see_only_their_own_traffic() {
    if !on_path("redis-server") {
        eprintln!("skipped: redis-server not installed");
        return;
    }
    let dir = out_dir("layers");
    let _cleanup = Cleanup(dir.clone());
    let sessions = start_redis(&dir);
    let cache = start_redis(&dir);
    let target = format!("redis:no@{}", sessions.addr);
    let held = format!("redis:no@{}", cache.addr);
    let json = bench(
        "layers",
        &[
            "run",
            "lms",
            "--target",
            &target,
            "--cache-target",
            &held,
            "--users",
            "2",
            "--duration",
            "2",
            "--warmup",
            "0.3",
            "--ramp-up",
            "0",
            "--think-ms",
            "5",
            "--ajax-ratio",
            "0",
        ],
    );
    let t = &json["targets"][0];
    assert_eq!(t["held"]["layer"], "cache");
    assert_eq!(t["held"]["addr"], cache.addr.as_str());
    let p = &t["points"][0];
    assert!(u(&p["units"]) > 0);
    // The session store holds sessions and no cache; the cache store the reverse.
    assert!(!keys(&sessions.addr, "*:sess:*").is_empty());
    assert!(keys(&sessions.addr, "cache:*").is_empty());
    assert!(!keys(&cache.addr, "cache:*").is_empty());
    assert!(keys(&cache.addr, "*:sess:*").is_empty());
    assert!(keys(&cache.addr, "*_LOCK").is_empty());
    // Both layers' bytes are counted, apart.
    let f = &p["wire"]["figures"];
    assert_eq!(p["wire"]["counted"], true);
    for name in [
        "unit.session_sent",
        "unit.session_received",
        "unit.cache_sent",
        "unit.cache_received",
        "page.sent",
        "page.round_trips",
    ] {
        assert!(f[name]["avg"].as_f64().unwrap() >= 1.0, "{name}: {f}");
        assert!(u(&f[name]["count"]) > 0, "{name}");
    }
    // 13 pages, each at least a lock, a read, 20 cache reads and a write.
    assert!(f["unit.cache_round_trips"]["avg"].as_f64().unwrap() >= 13.0 * 2.0);
    assert_eq!(u(&f["page.sent"]["count"]), 13 * u(&p["units"]));
}

#[test]
fn compression_and_relay_show_in_the_wire_figures() {
    if !on_path("redis-server") {
        eprintln!("skipped: redis-server not installed");
        return;
    }
    let common = [
        "--users",
        "1",
        "--duration",
        "2",
        "--warmup",
        "0.3",
        "--ramp-up",
        "0",
        "--think-ms",
        "2",
        "--ajax-ratio",
        "0",
        "--seed",
        "7",
        "--cache-value-size",
        "2048",
    ];
    let mut plain: Vec<&str> = vec!["run", "lms", "--target", "redis:no"];
    plain.extend(common);
    let plain = bench("wire-plain", &plain);
    let mut packed: Vec<&str> = vec![
        "run",
        "lms",
        "--target",
        "redis:no",
        "--compress-threshold",
        "256",
        "--rtt-ms",
        "2",
    ];
    packed.extend(common);
    let packed = bench("wire-packed", &packed);
    let p0 = &plain["targets"][0]["points"][0];
    let p1 = &packed["targets"][0]["points"][0];
    assert_eq!(p1["wire"]["compress_threshold"], 256);
    assert_eq!(p1["wire"]["rtt_ms"], 2.0);
    // Sessions and values read back intact through compression.
    assert_eq!(u(&p1["verification"]["session_mismatches"]), 0);
    assert_eq!(u(&p1["verification"]["value_mismatches"]), 0);
    assert!(u(&p1["verification"]["cache_hits"]) > 0);
    let recv = |p: &Value| {
        p["wire"]["figures"]["page.received"]["avg"]
            .as_f64()
            .unwrap()
    };
    assert!(
        recv(p1) < 0.8 * recv(p0),
        "compressed pages receive less: {} vs {}",
        recv(p1),
        recv(p0)
    );
    // Each round trip costs at least the modelled 2 ms.
    let page_ms = p1["ops"]["page"]["avg_us"].as_f64().unwrap() / 1000.0;
    let rts = p1["wire"]["figures"]["page.round_trips"]["avg"]
        .as_f64()
        .unwrap();
    assert!(
        page_ms >= 2.0 * rts * 0.95,
        "page {page_ms} ms for {rts} round trips"
    );
}

#[test]
fn no_ajax_runs_on_every_target_kind() {
    let mut targets = vec!["gradus:none", "files"];
    if on_path("redis-server") {
        targets.push("redis:no");
    }
    if on_path("memcached") {
        targets.push("memcached");
    }
    let list = targets.join(",");
    let json = bench(
        "no-ajax",
        &[
            "compare",
            "lms",
            "--targets",
            &list,
            "--users",
            "2",
            "--duration",
            "1.5",
            "--warmup",
            "0.3",
            "--ramp-up",
            "0",
            "--think-ms",
            "2",
            "--ajax-ratio",
            "0",
        ],
    );
    for t in json["targets"].as_array().unwrap() {
        let p = &t["points"][0];
        assert!(u(&p["units"]) > 0, "{}", t["label"]);
        assert_eq!(
            p["ops"]["ajax"]["count"].as_u64().unwrap_or(0),
            0,
            "{}",
            t["label"]
        );
        assert_eq!(
            u(&p["locks"]["waits"]),
            0,
            "{}: no AJAX, no waits",
            t["label"]
        );
    }
}
