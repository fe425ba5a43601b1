//! Recovery replays exactly what was acknowledged: a random workload (strings, counters, hashes,
//! sorted sets, expiry, renames, multi-key writes, MULTI/EXEC, FLUSHDB), with a snapshot taken in
//! the middle, must come back identical after a restart — through the snapshot loader and the
//! parallel log replay.

mod common;

use common::{test_config, Conn};
use gradus_proto::Frame;
use rand::{Rng, SeedableRng};
use std::path::Path;

/// Run a logged server on `dir`; returns its port and its thread (which ends after SHUTDOWN,
/// releasing the data directory).
fn start(dir: &Path) -> (u16, std::thread::JoinHandle<()>) {
    let mut config = test_config();
    config.dir = dir.to_path_buf();
    config.durability.default = "background".into();
    let (port, _shared, thread) = common::start(config);
    (port, thread)
}

/// Every key of database `db` with its type, value and whether it has a TTL, sorted.
fn dump(c: &mut Conn, db: usize) -> Vec<String> {
    c.call(&["SELECT", &db.to_string()]);
    let Frame::Array(keys) = c.call(&["KEYS", "*"]) else {
        panic!("KEYS did not return an array")
    };
    let mut out = Vec::new();
    for k in keys {
        let Frame::Bulk(k) = k else { continue };
        let key = String::from_utf8(k.to_vec()).unwrap();
        let kind = format!("{:?}", c.call(&["TYPE", &key]));
        let value = if kind.contains("string") {
            format!("{:?}", c.call(&["GET", &key]))
        } else if kind.contains("hash") {
            let Frame::Array(mut items) = c.call(&["HGETALL", &key]) else {
                panic!()
            };
            let mut pairs: Vec<String> = items
                .chunks_mut(2)
                .map(|p| format!("{:?}={:?}", p[0], p[1]))
                .collect();
            pairs.sort();
            pairs.join(",")
        } else {
            format!("{:?}", c.call(&["ZRANGE", &key, "0", "-1", "WITHSCORES"]))
        };
        let has_ttl = !matches!(c.call(&["PTTL", &key]), Frame::Integer(-1));
        out.push(format!("{key} {kind} {value} ttl={has_ttl}"));
    }
    out.sort();
    out
}

fn workload(c: &mut Conn, rng: &mut rand::rngs::StdRng, ops: usize) {
    for _ in 0..ops {
        let k = format!("k{}", rng.gen_range(0..40));
        let k2 = format!("k{}", rng.gen_range(0..40));
        let v = format!("v{}", rng.gen_range(0..1000));
        let n = rng.gen_range(-5..50).to_string();
        match rng.gen_range(0..14) {
            0 => c.call(&["SET", &k, &v]),
            1 => c.call(&["SET", &k, &v, "EX", "1000"]),
            2 => c.call(&["INCRBY", &k, &n]),
            3 => c.call(&["HSET", &format!("h{k}"), &v, &n]),
            4 => c.call(&["HINCRBY", &format!("h{k}"), "f", &n]),
            5 => c.call(&["ZADD", &format!("z{k}"), &n, &v]),
            6 => c.call(&["ZREM", &format!("z{k}"), &v]),
            7 => c.call(&["DEL", &k, &k2]),
            8 => c.call(&["RENAME", &k, &k2]),
            9 => c.call(&["MSET", &k, &v, &k2, &n]),
            10 => c.call(&["APPEND", &k, &v]),
            11 => c.call(&["PERSIST", &k]),
            12 => {
                c.call(&["MULTI"]);
                c.call(&["INCR", "tx"]);
                c.call(&["SET", &k, "in-tx"]);
                c.call(&["EXEC"])
            }
            _ => {
                if rng.gen_range(0..20) == 0 {
                    c.call(&["FLUSHDB"])
                } else {
                    c.call(&["SELECT", &rng.gen_range(0..3).to_string()])
                }
            }
        };
    }
}

#[test]
fn restart_brings_back_exactly_the_acknowledged_state() {
    let dir = std::env::temp_dir().join(format!("gradus-replay-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for seed in 0..3u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (port, thread) = start(&dir);
        let mut c = Conn::new(port);
        workload(&mut c, &mut rng, 600);
        assert_eq!(c.call(&["SAVE"]), Frame::Simple("OK".into()));
        workload(&mut c, &mut rng, 600);
        let before: Vec<Vec<String>> = (0..3).map(|db| dump(&mut c, db)).collect();
        assert!(
            before.iter().map(|d| d.len()).sum::<usize>() > 10,
            "seed {seed}: the workload left almost nothing to compare"
        );
        c.shutdown();
        thread.join().unwrap();

        let (port, thread) = start(&dir);
        let mut c = Conn::new(port);
        let after: Vec<Vec<String>> = (0..3).map(|db| dump(&mut c, db)).collect();
        assert_eq!(before, after, "seed {seed}: state differs after restart");
        c.shutdown();
        thread.join().unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
