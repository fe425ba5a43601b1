//! In-process integration tests: start the real server on an OS-chosen port and talk raw RESP to it.
//! (The Python suite under tests/python drives the binary with real clients; these cover concurrency
//! properties that are easiest to check from Rust.)

mod common;

use common::{start, test_config, Conn};
use gradus_proto::Frame;
use std::io::Write;

/// A memory-only server: these tests are about concurrency, not durability.
fn start_memory_only() -> (u16, std::sync::Arc<gradus_server::state::Shared>) {
    let mut config = test_config();
    config.durability.default = "none".into();
    let (port, shared, _thread) = start(config);
    (port, shared)
}

fn int(f: &Frame) -> i64 {
    match f {
        Frame::Integer(n) => *n,
        Frame::Bulk(b) => std::str::from_utf8(b).unwrap().parse().unwrap(),
        other => panic!("not an integer: {other:?}"),
    }
}

/// Optimistic-locking increments from several connections: every EXEC that succeeded must be
/// reflected exactly once in the final value (WATCH + the exclusive EXEC gate).
#[test]
fn watch_multi_exec_increments_are_never_lost() {
    let (port, _shared) = start_memory_only();
    Conn::new(port).call(&["SET", "counter", "0"]);
    let threads: Vec<_> = (0..6)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Conn::new(port);
                let mut committed = 0;
                for _ in 0..150 {
                    c.call(&["WATCH", "counter"]);
                    let v = int(&c.call(&["GET", "counter"]));
                    c.call(&["MULTI"]);
                    let next = (v + 1).to_string();
                    c.call(&["SET", "counter", &next]);
                    if let Frame::Array(_) = c.call(&["EXEC"]) {
                        committed += 1;
                    }
                }
                committed
            })
        })
        .collect();
    let committed: i64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let value = int(&Conn::new(port).call(&["GET", "counter"]));
    assert!(committed > 0);
    assert_eq!(value, committed);
}

/// MSET is atomic: a concurrent MGET never sees half of one MSET.
#[test]
fn mset_is_seen_whole_by_mget() {
    let (port, _shared) = start_memory_only();
    let keys: Vec<String> = (0..16).map(|i| format!("k{i}")).collect();
    let writer_keys = keys.clone();
    let writer = std::thread::spawn(move || {
        let mut c = Conn::new(port);
        for round in 0..400 {
            let v = round.to_string();
            let mut args = vec!["MSET"];
            for k in &writer_keys {
                args.push(k);
                args.push(&v);
            }
            c.call(&args);
        }
    });
    let mut c = Conn::new(port);
    let mut args = vec!["MGET"];
    args.extend(keys.iter().map(|k| k.as_str()));
    for _ in 0..400 {
        if let Frame::Array(items) = c.call(&args) {
            let first = &items[0];
            assert!(items.iter().all(|f| f == first), "torn MSET: {items:?}");
        }
    }
    writer.join().unwrap();
}

/// A pipelined batch of 1000 commands in one write gets 1000 replies in order.
#[test]
fn pipelined_batch_replies_in_order() {
    let (port, _shared) = start_memory_only();
    let mut c = Conn::new(port);
    let mut batch = String::new();
    for _ in 0..1000 {
        batch.push_str("*2\r\n$4\r\nINCR\r\n$1\r\np\r\n");
    }
    c.stream.write_all(batch.as_bytes()).unwrap();
    for i in 1..=1000 {
        assert_eq!(c.read(), Frame::Integer(i));
    }
}

/// Keys with a TTL are reclaimed by the active sweep without being touched.
#[test]
fn active_expiry_frees_untouched_keys() {
    let (port, shared) = start_memory_only();
    let mut c = Conn::new(port);
    for i in 0..200 {
        // Long enough that none expires before the count below, even on a loaded machine.
        c.call(&["SET", &format!("t{i}"), "v", "PX", "1500"]);
    }
    assert_eq!(shared.store.db(0).unwrap().len(), 200);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !shared.store.db(0).unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "expired keys were not swept"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
