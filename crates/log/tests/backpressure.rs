//! Back-pressure: when the disk is slower than the appends, `append` waits once
//! `max_queue_bytes` are queued instead of letting the queue grow without bound.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use gradus_log::{Durability, Log, LogOptions, SimStorage};

#[test]
fn appends_wait_for_a_slow_disk_once_the_queue_is_full() {
    let disk = SimStorage::new(5);
    // Every fsync takes 20 ms; each strict record makes the writer fsync.
    disk.set_sync_latency(Duration::from_millis(20));
    let mut opts = LogOptions::new("/sim/bp");
    opts.max_queue_bytes = 4096;
    let (log, _) = Log::open(opts.clone(), Arc::new(disk.clone())).unwrap();
    let payload = Bytes::from(vec![7u8; 1000]);
    let started = Instant::now();
    let mut last = 0;
    for _ in 0..60 {
        last = log.append(payload.clone(), Durability::Strict).unwrap();
    }
    let elapsed = started.elapsed();
    // 60 KB through a 4 KB queue drained at most once per 20 ms fsync: at least ~13 rounds.
    // Without back-pressure the 60 appends return in microseconds.
    assert!(
        elapsed >= Duration::from_millis(150),
        "appends did not wait for the disk: {elapsed:?}"
    );
    assert!(log
        .wait_durable_blocking(last, Duration::from_secs(10))
        .unwrap());
    drop(log);
    let (_log, recovered) = Log::open(opts, Arc::new(disk.reboot())).unwrap();
    assert_eq!(recovered.records.len(), 60);
}
