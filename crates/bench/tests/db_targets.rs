//! End-to-end runs of `gradus-bench` against the database and file session stores it starts
//! itself (PostgreSQL, MariaDB with InnoDB and with RocksDB, one file per session), and fault
//! runs (clean restart and `kill -9` mid-run) whose loss counts are checked against what the
//! bench wrote. A database target is skipped, with a message, only when its binaries are not
//! installed (scripts/install-deps.sh installs them).

use std::sync::Mutex;
use std::time::Duration;

use gradus_bench::db::launch::available;
use gradus_bench::target::TargetKind;
use serde_json::Value;

mod common;
use common::{gradus_bin, on_path, u};

/// Runs the bench; database runs may take up to 90 s (start-up of the servers included).
/// One run at a time: each starts database servers and keeps the two cores busy, and with
/// three in parallel a fault scheduled 2 s into a run could come before a slowed-down user had
/// finished a single page.
fn bench(name: &str, args: &[&str]) -> (i32, Option<Value>, String) {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    common::bench_within(name, args, Duration::from_secs(90))
}

/// The database targets whose binaries are installed; the others are named on stderr.
fn installed(candidates: &[(&'static str, TargetKind)]) -> Vec<&'static str> {
    candidates
        .iter()
        .filter(|(label, kind)| {
            let ok = available(*kind);
            if !ok {
                eprintln!("SKIP {label}: its server binaries are not installed (scripts/install-deps.sh installs them)");
            }
            ok
        })
        .map(|(label, _)| *label)
        .collect()
}

#[test]
fn database_and_file_stores_keep_sessions_and_cache() {
    let targets = installed(&[
        ("postgres:on", TargetKind::Postgres),
        ("mariadb:durable", TargetKind::Mariadb),
        ("myrocks:relaxed", TargetKind::Myrocks),
        ("files", TargetKind::Files),
    ]);
    let list = targets.join(",");
    let (code, json, stderr) = bench(
        "stores",
        &[
            "compare",
            "lms",
            "--targets",
            &list,
            "--users",
            "4",
            "--duration",
            "2",
            "--warmup",
            "0.5",
            "--ramp-up",
            "0.2",
            "--think-ms",
            "20",
            "--cache-keys",
            "200",
        ],
    );
    assert_eq!(code, 0, "exit {code}: {stderr}");
    let json = json.expect("a result file");
    assert_eq!(json["partial"], false, "{}", json["partial_reason"]);
    let results = json["targets"].as_array().unwrap();
    assert_eq!(results.len(), targets.len());
    for (t, label) in results.iter().zip(&targets) {
        assert_eq!(t["label"], *label);
        let p = &t["points"][0];
        let units = u(&p["units"]);
        assert!(units > 0, "{label}: no journey");
        assert_eq!(u(&p["ops"]["page"]["count"]), 13 * units, "{label}: pages");
        let v = &p["verification"];
        assert!(u(&v["sessions_verified"]) > 0, "{label}: {v}");
        assert_eq!(u(&v["session_mismatches"]), 0, "{label}: {v}");
        assert!(u(&v["final_readback_checked"]) > 0, "{label}: {v}");
        assert_eq!(u(&v["final_readback_mismatches"]), 0, "{label}: {v}");
        assert!(u(&v["cache_hits"]) > 0, "{label}: {v}");
        assert_eq!(u(&v["value_mismatches"]), 0, "{label}: {v}");
        // Misses were regenerated and stored in the cache table (upserts).
        assert_eq!(v["cache_misses"], v["cache_regenerated"], "{label}");
        // Only the planned misses (hit ratio 0.98): a multi-get naming a popular key twice must
        // find it both times.
        let reads = u(&v["cache_hits"]) + u(&v["cache_misses"]);
        assert!(
            u(&v["cache_misses"]) * 100 <= reads * 5,
            "{label}: {} misses in {reads} reads",
            v["cache_misses"]
        );
        assert_eq!(
            u(&p["locks"]["acquisitions"]),
            u(&p["ops"]["session_open"]["count"]),
            "{label}"
        );
        assert_eq!(
            p["errors"].as_object().map(|e| e.len()),
            Some(0),
            "{label}: {}",
            p["errors"]
        );
        let server = &t["server"];
        assert!(
            u(&t["disk_bytes"]) > 0,
            "{label}: disk bytes {}",
            t["disk_bytes"]
        );
        if *label != "files" {
            // Version and configuration are recorded, and the configuration is the one asked for.
            let version = server["launch"]["version_output"].as_str().unwrap();
            assert!(!version.is_empty(), "{label}: no version");
            let config: Vec<(String, String)> =
                serde_json::from_value(server["reported"]["config"].clone()).unwrap();
            let get = |k: &str| config.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            match *label {
                "postgres:on" => assert_eq!(get("synchronous_commit").as_deref(), Some("on")),
                "mariadb:durable" => {
                    assert_eq!(get("innodb_flush_log_at_trx_commit").as_deref(), Some("1"));
                    assert_eq!(get("log_bin").as_deref(), Some("ON"));
                }
                "myrocks:relaxed" => {
                    assert_eq!(get("default_storage_engine").as_deref(), Some("ROCKSDB"));
                    assert_eq!(get("rocksdb_flush_log_at_trx_commit").as_deref(), Some("2"));
                    assert_eq!(get("log_bin").as_deref(), Some("OFF"));
                }
                other => unreachable!("{other}"),
            }
        }
    }
}

/// The fault report of a target's only point, with its internal sums checked.
fn fault_of<'a>(t: &'a Value, label: &str) -> &'a Value {
    let f = &t["points"][0]["fault"];
    assert_eq!(f["applicable"], true, "{label}: {f}");
    assert!(f["note"].is_null(), "{label}: {f}");
    let checked = u(&f["sessions_checked"]);
    assert!(checked > 0, "{label}: no session to check: {f}");
    assert_eq!(
        checked,
        u(&f["sessions_intact"]) + u(&f["sessions_missing"]) + u(&f["sessions_stale"]),
        "{label}: {f}"
    );
    assert_eq!(
        u(&f["sessions_lost"]),
        u(&f["sessions_missing"]) + u(&f["sessions_stale"]),
        "{label}"
    );
    assert!(
        u(&f["users_logged_out"]) <= u(&f["users_active"]),
        "{label}: {f}"
    );
    let unavailable = f["unavailable_s"].as_f64().unwrap();
    assert!(unavailable > 0.0 && unavailable < 60.0, "{label}: {f}");
    assert!(
        f["penalty_window_s"].as_f64().unwrap() > 0.0,
        "{label}: {f}"
    );
    assert_eq!(
        f["penalty_window_scaled"], true,
        "{label}: a short run scales the window"
    );
    assert!(u(&f["pages_before"]["count"]) > 0, "{label}: {f}");
    assert!(
        u(&f["pages_after"]["count"]) > 0,
        "{label}: users carried on: {f}"
    );
    f
}

#[test]
fn kill_mid_run_loses_exactly_what_the_store_did_not_keep() {
    let mut candidates = Vec::new();
    let gradus = gradus_bin();
    if gradus.exists() {
        candidates.push("gradus:strict");
    } else {
        eprintln!(
            "SKIP gradus:strict: no gradus binary at {}",
            gradus.display()
        );
    }
    if on_path("memcached") {
        candidates.push("memcached");
    } else {
        eprintln!("SKIP memcached: not on PATH");
    }
    candidates.extend(installed(&[("mariadb:durable", TargetKind::Mariadb)]));
    assert!(!candidates.is_empty(), "no target to run");
    let list = candidates.join(",");
    let (code, json, stderr) = bench(
        "kill",
        &[
            "compare",
            "lms",
            "--targets",
            &list,
            "--users",
            "6",
            "--duration",
            "4",
            "--warmup",
            "0.5",
            "--ramp-up",
            "0.2",
            "--think-ms",
            "30",
            "--cache-keys",
            "200",
            "--kill-at",
            "50%",
        ],
    );
    assert_eq!(code, 0, "exit {code}: {stderr}");
    let json = json.expect("a result file");
    assert_eq!(json["partial"], false, "{}", json["partial_reason"]);
    for (t, label) in json["targets"].as_array().unwrap().iter().zip(&candidates) {
        let f = fault_of(t, label);
        assert_eq!(f["kind"], "kill");
        match *label {
            // Every acknowledged write was fsynced before its reply: nothing lost.
            "gradus:strict" | "mariadb:durable" => {
                assert_eq!(u(&f["sessions_lost"]), 0, "{label}: {f}");
                assert_eq!(u(&f["users_logged_out"]), 0, "{label}: {f}");
            }
            // Memory only: every session the bench knew is gone, every active user logged out.
            "memcached" => {
                assert_eq!(u(&f["sessions_missing"]), u(&f["sessions_checked"]), "{f}");
                assert_eq!(u(&f["users_logged_out"]), u(&f["users_active"]), "{f}");
                // The final read-back sees the loss too (finished journeys from before the kill).
                assert!(
                    u(&t["points"][0]["verification"]["final_readback_mismatches"]) > 0,
                    "{}",
                    t["points"][0]["verification"]
                );
            }
            other => unreachable!("{other}"),
        }
    }
}

#[test]
fn clean_restart_keeps_durable_sessions() {
    let mut candidates = Vec::new();
    if on_path("redis-server") {
        candidates.push("redis:always");
    } else {
        eprintln!("SKIP redis:always: redis-server not on PATH");
    }
    candidates.extend(installed(&[("postgres:on", TargetKind::Postgres)]));
    candidates.push("files");
    let list = candidates.join(",");
    let (code, json, stderr) = bench(
        "restart",
        &[
            "compare",
            "lms",
            "--targets",
            &list,
            "--users",
            "6",
            "--duration",
            "4",
            "--warmup",
            "0.5",
            "--ramp-up",
            "0.2",
            "--think-ms",
            "30",
            "--cache-keys",
            "200",
            "--restart-at",
            "50%",
        ],
    );
    assert_eq!(code, 0, "exit {code}: {stderr}");
    let json = json.expect("a result file");
    assert_eq!(json["partial"], false, "{}", json["partial_reason"]);
    for (t, label) in json["targets"].as_array().unwrap().iter().zip(&candidates) {
        if *label == "files" {
            let f = &t["points"][0]["fault"];
            assert_eq!(f["applicable"], false, "{f}");
            assert!(f["note"].as_str().unwrap().contains("no server process"));
            continue;
        }
        let f = fault_of(t, label);
        assert_eq!(f["kind"], "restart");
        assert_eq!(u(&f["sessions_lost"]), 0, "{label}: {f}");
        // The server's pid changed and the point still finished its journeys.
        assert!(u(&t["points"][0]["units"]) > 0, "{label}");
    }
}
