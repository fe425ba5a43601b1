//! Helpers shared by the end-to-end test files: locating the gradus binary, temporary output
//! directories, and running `gradus-bench` with a JSON result.
#![allow(dead_code)] // each test file uses a subset

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The gradus binary: $GRADUS_BIN, else `debug/gradus` in the workspace target directory.
pub fn gradus_bin() -> PathBuf {
    if let Ok(p) = std::env::var("GRADUS_BIN") {
        return PathBuf::from(p);
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let bin = target.join("debug").join("gradus");
    assert!(
        bin.exists(),
        "no gradus binary at {} — run `cargo build -p gradus-server --bin gradus` first \
         (scripts/test.sh does), or set GRADUS_BIN",
        bin.display()
    );
    bin
}

pub fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|d| d.join(name).is_file()))
        .unwrap_or(false)
}

/// Removes a test's output directory when the test ends, pass or fail.
pub struct Cleanup(pub PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn out_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gradus-bench-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs the bench with `args` (plus --json and --gradus-bin), returns exit code, JSON, stderr.
/// Fails the test if the run takes longer than `limit`.
pub fn bench_within(name: &str, args: &[&str], limit: Duration) -> (i32, Option<Value>, String) {
    let dir = out_dir(name);
    let json = dir.join("result.json");
    let started = Instant::now();
    // lms pages spend 300 ms of application time by default; the tests time the stores alone
    // unless they say otherwise.
    let app: &[&str] = if args.contains(&"--app-ms") || args.len() < 2 {
        &[]
    } else {
        &["--app-ms", "0"]
    };
    let out = Command::new(env!("CARGO_BIN_EXE_gradus-bench"))
        .args(args)
        .args(app)
        .arg("--json")
        .arg(&json)
        .arg("--gradus-bin")
        .arg(gradus_bin())
        .arg("--quiet")
        .stdin(Stdio::null())
        .output()
        .expect("run gradus-bench");
    assert!(
        started.elapsed() < limit,
        "{name}: the bench took {:?}",
        started.elapsed()
    );
    let value = std::fs::read_to_string(&json)
        .ok()
        .map(|t| serde_json::from_str(&t).expect("valid JSON"));
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), value, stderr)
}

pub fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}
