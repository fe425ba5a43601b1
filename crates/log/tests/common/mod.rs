//! Helpers shared by the integration tests: a self-deleting temporary directory under
//! `std::env::temp_dir()`, deterministic payloads, and the recovery invariants every crash
//! test checks against a model of the log (a `Vec` of every payload appended, in LSN order).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use gradus_log::{Lsn, Recovered};

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "gradus-log-test-{tag}-{}-{nanos}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A payload that names its writer and sequence and has `len` bytes in all (at least the tag).
pub fn payload(tag: &str, seq: u64, len: usize) -> Bytes {
    let mut p = format!("{tag}#{seq}|").into_bytes();
    let mut x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xA5;
    while p.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p.push(b'a' + (x % 26) as u8);
    }
    Bytes::from(p)
}

/// The state recovery rebuilt: snapshot items then record payloads. Checks on the way that the
/// records are gap-free from `snapshot_lsn + 1` and end at `last_lsn`.
pub fn recovered_state(rec: &Recovered) -> Vec<Bytes> {
    let mut expected = rec.snapshot_lsn + 1;
    for (lsn, _) in &rec.records {
        assert_eq!(
            *lsn, expected,
            "recovered records have a hole or are out of order"
        );
        expected += 1;
    }
    assert_eq!(
        rec.last_lsn,
        expected - 1,
        "last_lsn does not match the records"
    );
    let mut state = rec.snapshot_items.clone();
    state.extend(rec.records.iter().map(|(_, p)| p.clone()));
    state
}

/// Checks recovery against the model (payload of LSN n at index n-1): the recovered state is a
/// prefix of the model — nothing invented, nothing reordered — that contains at least every
/// LSN up to `must_have`. Returns the recovered length.
pub fn check_prefix(rec: &Recovered, model: &[Bytes], must_have: Lsn) -> usize {
    let state = recovered_state(rec);
    assert_eq!(
        state.len() as u64,
        rec.last_lsn,
        "snapshot items + records must be one per LSN in these tests"
    );
    assert!(
        state.len() <= model.len(),
        "recovered {} records but only {} were ever appended",
        state.len(),
        model.len()
    );
    for (i, (got, want)) in state.iter().zip(model).enumerate() {
        assert_eq!(got, want, "payload of lsn {} differs", i + 1);
    }
    assert!(
        state.len() as u64 >= must_have,
        "lost durable records: recovered up to lsn {}, but lsn {must_have} was durable",
        state.len()
    );
    state.len()
}
