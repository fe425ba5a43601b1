//! A full disk: the writer keeps what it could not write and tries again, instead of poisoning
//! the log (see the `writer` module docs). While it waits, `stalled()` says why and the durable
//! LSN stays put; once there is room the same records are written, in order, with no gap, and a
//! restart finds them all. Shut down while the disk is still full, the log is poisoned with a
//! reason naming the last durable LSN.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{check_prefix, payload};
use gradus_log::{CrashMode, Durability, Log, LogError, LogOptions, SimStorage};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

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

/// Random workloads on a disk that fills up and empties again at random moments, crashed at a
/// random moment (stalled or not), then reopened: every record that was acknowledged durable (a
/// strict wait that returned `Ok`, a `sync_now` result, the durable LSN seen before the crash) is
/// recovered, and what is recovered is a gap-free prefix of what was appended. Waits that end
/// with `Stalled` acknowledge nothing.
#[test]
fn crashes_while_the_disk_fills_and_empties_lose_no_acknowledged_record() {
    let (mut seeds_stalled, mut total_refused) = (0, 0);
    for seed in 0..24 {
        let mut rng = StdRng::seed_from_u64(seed);
        let disk = SimStorage::new(seed);
        disk.pad_segments([0, 64, 4096][(seed % 3) as usize]);
        let mut opts = LogOptions::new("/sim/full-crash");
        opts.segment_bytes = [1024, 8192, 65536][rng.gen_range(0..3)];
        // Zero fill ahead (records overwrite it; only new segments and fills need room) or none
        // (every append grows the file).
        opts.zero_fill_window = [Duration::MAX, Duration::ZERO][rng.gen_range(0..2)];
        opts.lazy_flush_ms = [0, 2, 30][rng.gen_range(0..3)];
        opts.background_fsync_ms = [0, 1, 5][rng.gen_range(0..3)];
        opts.disk_full_retry = Duration::from_millis(rng.gen_range(1..5));
        let (mut log, _) = Log::open(opts.clone(), Arc::new(disk.clone())).unwrap();
        let mut model: Vec<Bytes> = Vec::new();
        let (mut retries, mut refused_waits) = (0, 0);
        for round in 0..3 {
            let mut acked = 0;
            for op in 0..300u64 {
                let tag = format!("s{seed}r{round}");
                match rng.gen_range(0..100) {
                    0..=59 => {
                        let degree = [Durability::Lazy, Durability::Background, Durability::Strict]
                            [rng.gen_range(0..3)];
                        let p = payload(&tag, op, rng.gen_range(0..600));
                        assert_eq!(
                            log.append(p.clone(), degree).unwrap(),
                            model.len() as u64 + 1
                        );
                        model.push(p);
                    }
                    60..=74 => {
                        let p = payload(&tag, op, rng.gen_range(0..200));
                        let lsn = log.append(p.clone(), Durability::Strict).unwrap();
                        model.push(p);
                        match log.wait_durable_blocking(lsn, Duration::from_secs(20)) {
                            Ok(true) => acked = acked.max(lsn),
                            Ok(false) => {
                                panic!("seed {seed}: a strict wait neither ended nor failed")
                            }
                            Err(LogError::Stalled(_)) => refused_waits += 1,
                            Err(e) => panic!("seed {seed}: {e}"),
                        }
                    }
                    75..=79 => match log.sync_now() {
                        Ok(lsn) => acked = acked.max(lsn),
                        Err(LogError::Stalled(_)) => refused_waits += 1,
                        Err(e) => panic!("seed {seed}: {e}"),
                    },
                    80..=89 => disk.set_capacity(Some(disk.used_bytes() + rng.gen_range(0..4_000))),
                    90..=92 => disk.set_capacity(None),
                    _ => std::thread::sleep(Duration::from_micros(rng.gen_range(0..1500))),
                }
            }
            assert!(
                log.poisoned().is_none(),
                "seed {seed}: {:?}",
                log.poisoned()
            );
            retries += log.stats().disk_full_retries;
            let durable = log.durable_lsn();
            disk.crash(CrashMode::ALL[rng.gen_range(0..CrashMode::ALL.len())]);
            drop(log);
            disk.set_capacity(None);
            let (reopened, rec) = Log::open(opts.clone(), Arc::new(disk.reboot()))
                .unwrap_or_else(|e| panic!("seed {seed} round {round}: reopen failed: {e}"));
            let kept = check_prefix(&rec, &model, durable.max(acked));
            model.truncate(kept);
            log = reopened;
        }
        seeds_stalled += u32::from(retries > 0);
        total_refused += refused_waits;
    }
    // The disk did fill up, in most seeds (writes were retried), and waits ended with `Stalled`.
    assert!(
        seeds_stalled >= 16,
        "only {seeds_stalled} seeds of 24 filled the disk up"
    );
    assert!(total_refused > 0, "no wait ever ended with Stalled");
}
