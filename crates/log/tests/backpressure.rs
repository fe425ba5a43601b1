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

/// Back-pressure in time: while the disk is slower than `background_fsync_ms`, a background
/// append reports the writer as late (so the server holds its reply until it is durable);
/// once the disk keeps up again, appends are not late.
#[test]
fn background_appends_report_a_late_writer() {
    let disk = SimStorage::new(6);
    let mut opts = LogOptions::new("/sim/late");
    opts.background_fsync_ms = 5;
    // Small segments: the simulated disk copies a whole file on each fsync, which for the
    // default 64 MiB segment's zero fill takes milliseconds in a debug build.
    opts.segment_bytes = 64 << 10;
    let (log, _) = Log::open(opts, Arc::new(disk.clone())).unwrap();
    let payload = Bytes::from(vec![1u8; 100]);
    // A quick disk: appends spread over 30 ms are never late.
    for _ in 0..30 {
        let appended = log
            .append_bounded(payload.clone(), Durability::Background)
            .unwrap();
        assert!(
            !appended.late,
            "writer reported late with a fast disk: {:?}",
            log.stats()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // Every fsync now takes 60 ms, twelve times the bound: within a few milliseconds of a
    // background deadline passing unfsynced, appends must say so.
    disk.set_sync_latency(Duration::from_millis(60));
    let started = Instant::now();
    let mut late = None;
    while started.elapsed() < Duration::from_secs(2) {
        let appended = log
            .append_bounded(payload.clone(), Durability::Background)
            .unwrap();
        if appended.late {
            late = Some(appended.lsn);
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let lsn = late.expect("a background append behind a 60 ms fsync was never reported late");
    assert!(log.stats().late_background >= 1);
    // Holding the reply until durable is what the server does with it; it completes.
    assert!(log
        .wait_durable_blocking(lsn, Duration::from_secs(5))
        .unwrap());
    // Strict and lazy appends are never "late" (strict waits anyway; lazy promises no fsync).
    let strict = log
        .append_bounded(payload.clone(), Durability::Strict)
        .unwrap();
    assert!(!strict.late);
    let lazy = log.append_bounded(payload, Durability::Lazy).unwrap();
    assert!(!lazy.late);
}

/// A segment rotation in the middle of a batch fsyncs the old segment; the background records
/// written after the rotation point are still owed an fsync within their bound, even when no
/// further append comes to set a new deadline (a connection holding its replies for a late
/// writer appends nothing more until those records are durable).
#[test]
fn background_records_after_a_mid_batch_rotation_still_get_their_fsync() {
    let disk = SimStorage::new(7);
    let mut opts = LogOptions::new("/sim/rotate");
    opts.background_fsync_ms = 5;
    opts.lazy_flush_ms = 60_000;
    // Small buffer and segments: batches are taken because the buffer filled (no fsync of their
    // own) and rotate in the middle.
    opts.buffer_bytes = 2_000;
    opts.segment_bytes = 3_000;
    let (log, _) = Log::open(opts, Arc::new(disk.clone())).unwrap();
    let payload = Bytes::from(vec![9u8; 300]);
    let mut last = 0;
    for _ in 0..200 {
        last = log.append(payload.clone(), Durability::Background).unwrap();
    }
    // No more appends: the last records must still become durable within the bound.
    assert!(
        log.wait_durable_blocking(last, Duration::from_secs(2))
            .unwrap(),
        "background records were left unsynced after a rotation: durable {} < last {last}",
        log.durable_lsn()
    );
}
