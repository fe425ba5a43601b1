//! Poisoning: once an fsync fails, the durable LSN stops, every waiter and every later append
//! gets `Poisoned("fsync failed: ...")`, the reason shows in `poisoned()` and `stats()`, and
//! the fsync is never retried. Reopening the log (a restart) recovers what was durable.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use gradus_log::{CrashMode, Durability, Log, LogError, LogOptions, SimStorage};

fn is_fsync_poison(err: &LogError) -> bool {
    matches!(err, LogError::Poisoned(reason) if reason.starts_with("fsync failed: "))
}

#[test]
fn a_failed_fsync_poisons_the_log() {
    let disk = SimStorage::new(5);
    let mut opts = LogOptions::new("/sim/poison");
    opts.lazy_flush_ms = 60_000;
    let (log, _) = Log::open(opts.clone(), Arc::new(disk.clone())).unwrap();
    let first = log
        .append(Bytes::from_static(b"one"), Durability::Strict)
        .unwrap();
    assert!(log
        .wait_durable_blocking(first, Duration::from_secs(10))
        .unwrap());

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // Waiters parked before the failure (a thread and an async task) must be woken by it. A
    // lazy record has no fsync of its own, so nothing else wakes them.
    let lazy = log
        .append(Bytes::from_static(b"two"), Durability::Lazy)
        .unwrap();
    let parked = {
        let log = log.clone();
        std::thread::spawn(move || log.wait_durable_blocking(lazy, Duration::from_secs(30)))
    };
    let parked_async = {
        let log = log.clone();
        runtime.spawn(async move { log.wait_durable(lazy).await })
    };
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !parked_async.is_finished(),
        "the lazy record is not durable yet"
    );

    disk.fail_next_sync();
    let strict = log
        .append(Bytes::from_static(b"three"), Durability::Strict)
        .unwrap();
    let err = log
        .wait_durable_blocking(strict, Duration::from_secs(10))
        .unwrap_err();
    assert!(is_fsync_poison(&err), "{err}");
    assert!(is_fsync_poison(&parked.join().unwrap().unwrap_err()));
    let woken = runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), parked_async).await })
        .expect("the failure woke the parked task")
        .unwrap();
    assert!(is_fsync_poison(&woken.unwrap_err()));
    assert!(is_fsync_poison(
        &runtime.block_on(log.wait_durable(strict)).unwrap_err()
    ));
    // What was durable before stays durable.
    runtime.block_on(log.wait_durable(first)).unwrap();
    assert_eq!(log.durable_lsn(), first);

    let reason = log.poisoned().expect("poisoned");
    assert!(reason.starts_with("fsync failed: "), "{reason}");
    assert_eq!(log.stats().poisoned.as_deref(), Some(reason.as_str()));
    assert!(is_fsync_poison(
        &log.append(Bytes::from_static(b"four"), Durability::Lazy)
            .unwrap_err()
    ));
    assert!(is_fsync_poison(&log.sync_now().unwrap_err()));
    assert!(is_fsync_poison(
        &log.write_snapshot(first, &mut std::iter::empty())
            .unwrap_err()
    ));

    // Never retried: no fsync after the failed one.
    let syncs = disk.file_syncs();
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(disk.file_syncs(), syncs);
    assert_eq!(log.durable_lsn(), first);
    assert!(is_fsync_poison(&log.close().unwrap_err()));

    // After a power loss and restart, the durable record is there; the rest may not be.
    disk.crash(CrashMode::DropUnsynced);
    let (log, rec) = Log::open(opts, Arc::new(disk.reboot())).unwrap();
    assert_eq!(rec.records.first().map(|r| &r.1[..]), Some(&b"one"[..]));
    assert!(log.poisoned().is_none());
    log.append(Bytes::from_static(b"again"), Durability::Strict)
        .unwrap();
    log.sync_now().unwrap();
}

#[test]
fn a_failed_background_fsync_poisons_the_log_too() {
    let disk = SimStorage::new(6);
    let mut opts = LogOptions::new("/sim/poison-bg");
    opts.background_fsync_ms = 1;
    let (log, _) = Log::open(opts, Arc::new(disk.clone())).unwrap();
    disk.fail_next_sync();
    let lsn = log
        .append(Bytes::from_static(b"bg"), Durability::Background)
        .unwrap();
    let started = Instant::now();
    while log.poisoned().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never poisoned"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(is_fsync_poison(
        &log.wait_durable_blocking(lsn, Duration::from_secs(1))
            .unwrap_err()
    ));
    assert_eq!(log.durable_lsn(), 0);
    assert!(log.stats().poisoned.is_some());
}
