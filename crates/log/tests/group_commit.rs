//! Group commit: concurrent strict writers share fsyncs. With a simulated fsync that takes a
//! couple of milliseconds (as a real disk does), N threads doing strict appends must need far
//! fewer fsyncs than records; `sync_now` callers share fsyncs the same way.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use bytes::Bytes;
use gradus_log::{Durability, Log, LogOptions, SimStorage};

/// A strict append, waited for until durable (blocking).
fn strict_write(log: &Log, payload: String) {
    let lsn = log
        .append(Bytes::from(payload), Durability::Strict)
        .unwrap();
    assert!(log
        .wait_durable_blocking(lsn, Duration::from_secs(30))
        .unwrap());
}

#[test]
fn concurrent_strict_appends_share_fsyncs() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 40;
    let disk = SimStorage::new(1);
    disk.set_sync_latency(Duration::from_millis(2));
    let (log, _) = Log::open(LogOptions::new("/sim/gc"), Arc::new(disk.clone())).unwrap();
    let syncs_before = disk.file_syncs();
    let fsyncs_before = log.stats().fsyncs;
    let start = Arc::new(Barrier::new(THREADS));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (log, start) = (log.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                for i in 0..PER_THREAD {
                    strict_write(&log, format!("t{t}-{i}"));
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let records = (THREADS * PER_THREAD) as u64;
    let stats = log.stats();
    let fsyncs = stats.fsyncs - fsyncs_before;
    assert_eq!(stats.durable_lsn, records);
    assert_eq!(stats.records_synced, records);
    assert_eq!(disk.file_syncs() - syncs_before, fsyncs);
    eprintln!(
        "group commit: {records} strict records, {fsyncs} fsyncs, mean batch {:.1}, histogram {:?}",
        stats.mean_batch(),
        &stats.batch_histogram[..5]
    );
    assert!(
        fsyncs < records,
        "{fsyncs} fsyncs for {records} records: no group commit"
    );
    log.close().unwrap();
}

#[test]
fn concurrent_sync_now_calls_share_fsyncs() {
    const THREADS: usize = 6;
    let disk = SimStorage::new(2);
    disk.set_sync_latency(Duration::from_millis(2));
    let mut opts = LogOptions::new("/sim/gc2");
    opts.background_fsync_ms = 60_000;
    let (log, _) = Log::open(opts, Arc::new(disk.clone())).unwrap();
    let fsyncs_before = log.stats().fsyncs;
    let start = Arc::new(Barrier::new(THREADS));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (log, start) = (log.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                for i in 0..20 {
                    let lsn = log
                        .append(Bytes::from(format!("t{t}-{i}")), Durability::Lazy)
                        .unwrap();
                    assert!(log.sync_now().unwrap() >= lsn);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let fsyncs = log.stats().fsyncs - fsyncs_before;
    assert!(
        fsyncs < (THREADS * 20) as u64,
        "{fsyncs} fsyncs for {} sync_now calls",
        THREADS * 20
    );
}

#[test]
fn last_commit_records_counts_what_the_last_fsync_covered() {
    let disk = SimStorage::new(3);
    let (log, _) = Log::open(LogOptions::new("/sim/lcr"), Arc::new(disk)).unwrap();
    assert_eq!(log.last_commit_records(), 0, "no fsync of records yet");
    // A lone strict writer: each fsync covers its one record.
    for i in 0..3 {
        strict_write(&log, format!("lone-{i}"));
        assert_eq!(log.last_commit_records(), 1);
    }
    // Lazy records have no fsync of their own; the sync that follows covers all of them.
    for i in 0..5 {
        log.append(Bytes::from(format!("lazy-{i}")), Durability::Lazy)
            .unwrap();
    }
    assert_eq!(log.last_commit_records(), 1);
    assert_eq!(log.sync_now().unwrap(), 8);
    assert_eq!(log.last_commit_records(), 5);
    log.close().unwrap();
}

#[test]
fn async_waits_can_be_abandoned_and_resumed() {
    let disk = SimStorage::new(4);
    disk.set_sync_latency(Duration::from_millis(30));
    let mut opts = LogOptions::new("/sim/cancel");
    opts.lazy_flush_ms = 60_000;
    let (log, _) = Log::open(opts, Arc::new(disk)).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // Waits given up early (as a connection that goes away does) for LSNs not durable yet.
        let lazy: Vec<_> = (0..20)
            .map(|i| {
                log.append(Bytes::from(format!("lazy-{i}")), Durability::Lazy)
                    .unwrap()
            })
            .collect();
        for &lsn in &lazy {
            let gave_up =
                tokio::time::timeout(Duration::from_millis(1), log.wait_durable(lsn)).await;
            assert!(gave_up.is_err(), "lazy record {lsn} durable without a sync");
        }
        // Waiting again for the same LSNs works once a strict commit covers them all.
        let strict = log
            .append(Bytes::from_static(b"strict"), Durability::Strict)
            .unwrap();
        let waits: Vec<_> = lazy
            .iter()
            .chain([&strict])
            .map(|&lsn| log.wait_durable(lsn))
            .collect();
        for wait in waits {
            tokio::time::timeout(Duration::from_secs(10), wait)
                .await
                .expect("covered by the strict commit")
                .unwrap();
        }
    });
    assert_eq!(log.durable_lsn(), 21);
    log.close().unwrap();
}
