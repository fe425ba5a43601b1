//! A full disk: the writer keeps what it could not write and tries again, instead of poisoning
//! the log (see the `writer` module docs). While it waits, `stalled()` says why and the durable
//! LSN stays put; once there is room the same records are written, in order, with no gap, and a
//! restart finds them all. Shut down while the disk is still full, the log is poisoned with a
//! reason naming the last durable LSN.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use gradus_log::{CrashMode, Durability, Log, LogError, LogOptions, SimStorage};

fn record(i: usize, len: usize) -> Bytes {
    let mut payload = format!("record {i} ").into_bytes();
    payload.resize(len, b'a' + (i % 26) as u8);
    Bytes::from(payload)
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(10), "never: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn options(dir: &str) -> LogOptions {
    let mut opts = LogOptions::new(dir);
    opts.segment_bytes = 12 << 20;
    opts.disk_full_retry = Duration::from_millis(10);
    opts
}

#[test]
fn a_full_disk_stalls_the_log_until_there_is_room_and_loses_nothing() {
    let disk = SimStorage::new(11);
    let opts = options("/sim/full");
    let (log, _) = Log::open(opts.clone(), Arc::new(disk.clone())).unwrap();
    // The segment holds its first 4 MiB of zero fill; no more room on the disk from here.
    disk.set_capacity(Some(disk.used_bytes()));
    let mut written = Vec::new();
    // Records that land in the zero fill need no room: the fill ahead of them fails and is
    // put off, and that is all.
    for i in 0..20 {
        let payload = record(i, 100 << 10);
        let lsn = log.append(payload.clone(), Durability::Strict).unwrap();
        assert!(log
            .wait_durable_blocking(lsn, Duration::from_secs(10))
            .unwrap());
        written.push(payload);
    }
    assert_eq!(log.stalled(), None);
    assert!(log.poisoned().is_none());

    // Past the zero fill a write needs room: the writer stalls and keeps the records.
    let mut last = 0;
    for i in 20..60 {
        let payload = record(i, 100 << 10);
        last = log.append(payload.clone(), Durability::Background).unwrap();
        written.push(payload);
    }
    wait_until("the writer stalls", || log.stalled().is_some());
    let reason = log.stalled().unwrap();
    assert!(reason.contains("write failed"), "{reason}");
    assert!(reason.contains("os error 28"), "{reason}");
    let strict = log.append(record(60, 100), Durability::Strict).unwrap();
    written.push(record(60, 100));
    // A wait for durability ends at once with the reason instead of blocking while the disk
    // stays full; the record is kept all the same.
    let err = log
        .wait_durable_blocking(strict, Duration::from_secs(10))
        .unwrap_err();
    assert!(
        matches!(&err, LogError::Stalled(r) if r.contains("os error 28")),
        "{err}"
    );
    assert!(matches!(log.sync_now(), Err(LogError::Stalled(_))));
    let durable = log.durable_lsn();
    assert!(durable < last, "{durable} {last}");
    let retries = log.stats().disk_full_retries;
    wait_until("the writer retries", || {
        log.stats().disk_full_retries > retries
    });
    assert!(log.poisoned().is_none());
    assert_eq!(log.durable_lsn(), durable);

    // Room again: everything kept is written and made durable, and the stall is over.
    disk.set_capacity(None);
    wait_until("the stall ends", || log.stalled().is_none());
    assert!(log
        .wait_durable_blocking(strict, Duration::from_secs(10))
        .unwrap());
    assert_eq!(log.stalled(), None);
    assert!(log.poisoned().is_none());
    log.close().unwrap();

    disk.crash(CrashMode::DropUnsynced);
    let (_log, rec) = Log::open(opts, Arc::new(disk.reboot())).unwrap();
    let got: Vec<&Bytes> = rec.records.iter().map(|(_, payload)| payload).collect();
    assert_eq!(got.len(), written.len());
    assert!(got.iter().zip(&written).all(|(a, b)| *a == b));
}

#[test]
fn a_segment_that_cannot_be_created_is_created_again_once_there_is_room() {
    let disk = SimStorage::new(12);
    let mut opts = options("/sim/full-rotation");
    opts.segment_bytes = 256 << 10;
    let (log, _) = Log::open(opts.clone(), Arc::new(disk.clone())).unwrap();
    // The first segment is zero-filled whole (it is smaller than a fill chunk): its records
    // need no room, the next segment does.
    disk.set_capacity(Some(disk.used_bytes()));
    let mut written = Vec::new();
    let mut last = 0;
    for i in 0..10 {
        let payload = record(i, 40 << 10);
        last = log.append(payload.clone(), Durability::Strict).unwrap();
        written.push(payload);
    }
    wait_until("the writer stalls", || log.stalled().is_some());
    let reason = log.stalled().unwrap();
    assert!(reason.starts_with("segment rotation failed"), "{reason}");
    assert!(log.durable_lsn() < last);
    disk.set_capacity(None);
    wait_until("the stall ends", || log.stalled().is_none());
    assert!(log
        .wait_durable_blocking(last, Duration::from_secs(10))
        .unwrap());
    assert_eq!(log.stalled(), None);
    assert!(log.stats().segments >= 2);
    log.close().unwrap();

    disk.crash(CrashMode::DropUnsynced);
    let (_log, rec) = Log::open(opts, Arc::new(disk.reboot())).unwrap();
    let got: Vec<Bytes> = rec.records.iter().map(|(_, p)| p.clone()).collect();
    assert_eq!(got, written);
}

#[test]
fn shutting_down_with_the_disk_full_poisons_the_log_and_names_the_last_durable_record() {
    let disk = SimStorage::new(13);
    let mut opts = options("/sim/full-shutdown");
    opts.zero_fill_window = Duration::ZERO; // records extend the file from the start
    opts.lazy_flush_ms = 1;
    let (log, _) = Log::open(opts.clone(), Arc::new(disk.clone())).unwrap();
    let first = log.append(record(0, 100), Durability::Strict).unwrap();
    assert!(log
        .wait_durable_blocking(first, Duration::from_secs(10))
        .unwrap());
    disk.set_capacity(Some(disk.used_bytes()));
    let lost = log.append(record(1, 100), Durability::Lazy).unwrap();
    wait_until("the writer stalls", || log.stalled().is_some());
    let err = log.close().unwrap_err();
    let LogError::Poisoned(reason) = err else {
        panic!("{err}");
    };
    assert!(
        reason.starts_with(&format!(
            "shut down with the disk full: records after LSN {first} were never written"
        )),
        "{reason}"
    );
    assert!(lost > first);

    disk.crash(CrashMode::DropUnsynced);
    disk.set_capacity(None);
    let (_log, rec) = Log::open(opts, Arc::new(disk.reboot())).unwrap();
    assert_eq!(rec.records.len(), 1);
}
