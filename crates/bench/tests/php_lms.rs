//! End-to-end: `gradus-bench php-lms` drives PHP pages (php -S) with Gradus\SessionHandler on
//! Gradus and phpredis' stock handler on Redis, and reports pages, latency and session checks.

mod common;

use std::process::Command;

use common::{gradus_bin, on_path, out_dir, Cleanup};

fn php_with_redis() -> bool {
    Command::new("php")
        .arg("-m")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.trim() == "redis")
        })
        .unwrap_or(false)
}

#[test]
fn php_lms_runs_both_backends_and_loses_no_session_write() {
    if !php_with_redis() || !on_path("redis-server") {
        eprintln!(
            "skipped: needs php-cli with php-redis and redis-server (scripts/install-deps.sh)"
        );
        return;
    }
    let dir = out_dir("php-lms");
    let _cleanup = Cleanup(dir.clone());
    let json = dir.join("result.json");
    let report = dir.join("report.md");
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(env!("CARGO_BIN_EXE_gradus-bench"))
        .args([
            "php-lms",
            "--users",
            "4",
            "--duration",
            "3",
            "--warmup",
            "1",
            "--rounds",
            "1",
        ])
        .args([
            "--think-ms",
            "20",
            "--php-workers",
            "4",
            "--ajax-ratio",
            "0.5",
        ])
        .arg("--gradus-bin")
        .arg(gradus_bin())
        .arg("--php-client")
        .arg(repo.join("clients/php"))
        .arg("--json")
        .arg(&json)
        .arg("--report")
        .arg(&report)
        .output()
        .expect("gradus-bench runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    let result: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let runs = result["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{result}");
    for run in runs {
        assert!(run["pages"].as_u64().unwrap() > 5, "{run}");
        assert_eq!(run["errors"], 0, "{run}");
        assert_eq!(run["session_mismatches"], 0, "{run}");
        assert!(run["ajax_request"]["count"].as_u64().unwrap() > 0, "{run}");
        assert!(run["page"]["p90_us"].as_u64().unwrap() >= run["page"]["p50_us"].as_u64().unwrap());
    }
    let md = std::fs::read_to_string(&report).unwrap();
    assert!(
        md.contains("page P90 ratio Gradus / Redis per round"),
        "{md}"
    );
}
